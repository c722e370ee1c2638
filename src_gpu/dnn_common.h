// src_gpu/dnn_common.h - what conv.cu and norm.cu share: the block size, the
// dtype check, grid sizes, and the block-wide double sums of the norms.
// In an anonymous namespace (each file its own copy), inline where not a
// template, so that a file using part of it compiles warning-free.
#ifndef DLG_DNN_COMMON_H
#define DLG_DNN_COMMON_H
#include "internal.h"

#include <limits.h>
#include <math.h>

// A file that uses only part of this gets no "defined but not used"
// warning for the rest (g++ builds these files for the fake device).
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

namespace {

constexpr int kThreads = 256; // every kernel here runs blocks of this size

inline int bad_dtype(dlg_handle *h, const char *op, int dtype) {
  return dlg_fail(h, DLG_ERR, "%s: dtype %d is not DLG_F32 (%d) or DLG_F64 (%d)", op, dtype, DLG_F32,
                  DLG_F64);
}

// Blocks for one block per item (channel, row), grid-stride beyond 2^30.
inline unsigned item_blocks(int64_t n) { return (unsigned)(n < (1 << 30) ? (n > 0 ? n : 1) : (1 << 30)); }

__device__ inline int64_t gtid() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ inline int64_t gstride() { return (int64_t)gridDim.x * blockDim.x; }

// Sums a and b over the block (kThreads threads); every thread gets the
// totals. sh: 2 * kThreads doubles of shared memory. All threads must call it.
__device__ inline void block_sum2(double &a, double &b, double *sh) {
  const int t = threadIdx.x;
  sh[t] = a;
  sh[kThreads + t] = b;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (t < s) {
      sh[t] += sh[t + s];
      sh[kThreads + t] += sh[kThreads + t + s];
    }
    __syncthreads();
  }
  a = sh[0];
  b = sh[kThreads];
  __syncthreads(); // sh is free again for the next call
}

// Who runs a per-item body (one channel, one row): the block, thread tid of
// nt, sums through block_sum2, `lead` writes the item's results. The bodies
// are __host__ __device__ templates over this policy so that a host test
// can run them with a one-thread policy against the CPU code (no GPU here).
struct BlockRed {
  double *sh;
  __host__ __device__ int64_t tid() const {
#if defined(__CUDA_ARCH__) || defined(DLG_FAKE) // the fake device runs the block (fake/cuda_fake.h)
    return threadIdx.x;
#else
    return 0;
#endif
  }
  static constexpr int64_t nt = kThreads;
  __host__ __device__ bool lead() const { return tid() == 0; }
  __host__ __device__ void sum2(double &a, double &b) const {
#if defined(__CUDA_ARCH__) || defined(DLG_FAKE)
    block_sum2(a, b, sh);
#else
    (void)a;
    (void)b;
#endif
  }
};

// >>per-channel sums split over blocks -------------------------------------------
// A tensor [N, C, S] (S: the plane) reduced per channel c over its m = N S
// elements. One block per channel leaves most of a GPU idle when C is small
// (a CNN's 32 channels on 132 multiprocessors), so each channel is cut into
// `split` chunks of consecutive elements (n-major, as the CPU walks them),
// one block each; chunk sums go to part [C, split, 2] and are added per
// channel in chunk order afterwards. The split depends only on the sizes
// and the device, so reruns give the same bits.
struct ChanGeo {
  int64_t N, C, S;
};
// Chunks per channel: enough blocks for about four per multiprocessor, each
// with at least 2048 elements.
inline int64_t chan_split(const ChanGeo &g, int sm_count) {
  const int64_t m = g.N * g.S, want = (4 * (int64_t)(sm_count > 0 ? sm_count : 80) + g.C - 1) / (g.C > 0 ? g.C : 1);
  int64_t by_size = m / 2048;
  if (by_size < 1) by_size = 1;
  return want < by_size ? (want > 0 ? want : 1) : by_size;
}
// Chunk j of channel c: elements [lo, hi) of its m.
__host__ __device__ inline void chan_chunk(const ChanGeo &g, int64_t split, int64_t j, int64_t *lo, int64_t *hi) {
  const int64_t m = g.N * g.S, len = (m + split - 1) / split;
  *lo = j * len < m ? j * len : m;
  *hi = *lo + len < m ? *lo + len : m;
}
// The two sums of f over chunk j of channel c (f(i, c, a, b) adds element
// i's terms to a and b); the lead writes them to part[2 (c split + j) + 0, 1].
template <class F, class Red>
__host__ __device__ void chan_part_at(const Red &rd, const ChanGeo &g, int64_t split, const F &f, double *part,
                                      int64_t c, int64_t j) {
  int64_t lo, hi;
  double a = 0, b = 0;
  chan_chunk(g, split, j, &lo, &hi);
  for (int64_t e = lo + rd.tid(); e < hi; e += Red::nt) {
    const int64_t n = e / g.S, s = e - n * g.S;
    f((n * g.C + c) * g.S + s, c, a, b);
  }
  rd.sum2(a, b);
  if (rd.lead()) {
    part[2 * (c * split + j)] = a;
    part[2 * (c * split + j) + 1] = b;
  }
}
template <class F> __global__ void chan_part_k(ChanGeo g, int64_t split, F f, double *part) {
  __shared__ double sh[2 * kThreads];
  const BlockRed rd{sh};
  for (int64_t q = blockIdx.x; q < g.C * split; q += gridDim.x) chan_part_at(rd, g, split, f, part, q / split, q % split);
}
// Channel c's totals: its chunk sums added in chunk order.
__host__ __device__ inline void chan_total(const double *part, int64_t split, int64_t c, double *a, double *b) {
  double x = 0, y = 0;
  for (int64_t j = 0; j < split; j++) {
    x += part[2 * (c * split + j)];
    y += part[2 * (c * split + j) + 1];
  }
  *a = x;
  *b = y;
}

} // namespace

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic pop
#endif

#endif // DLG_DNN_COMMON_H
