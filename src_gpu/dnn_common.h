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

} // namespace

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic pop
#endif

#endif // DLG_DNN_COMMON_H
