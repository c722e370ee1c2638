// src_gpu/engine.h - what the kernel families of src_gpu/ share (reduce.cu,
// loss.cu, sparse.cu, optim.cu): the rounding helpers that keep the
// optimizer, dropout and regularisation kernels bit-identical to the CPU,
// the element math of the CPU's losses and softmax, the reduction engine,
// sums to one value, and (outside the host test) the launch helpers.
//
//
// Shapes of kernel: grid-stride loops for element-wise work; for anything
// that reduces, the "reduction engine" below: a block of TPB threads takes
// bx outputs at a time and by lanes per output (bx * by == TPB, by a power
// of two); each lane walks the output's elements r = lane, lane + by, ...
// accumulating in double, and the lanes combine through a shared-memory
// tree. The grid size depends on the shape and the device only, so every
// result is the same from run to run. When the reduced elements are the
// innermost (rows), the lanes are the fastest thread index (coalesced along
// a row); otherwise the outputs are (coalesced across outputs).
//
// Layout of each family's file: each kernel's work for one element (the
// *_at functions) or one engine output (the *_out functions, templated over
// the lane policy EngRed) is a __host__ __device__ function, and the kernel
// is a thin loop around it. tests/gpu_host/kern_host.cu #includes the four
// files with DLG_HOST_TEST defined (which leaves out the launch code and the
// dlg_* entry points) and runs those bodies on the host, with host lane
// policies, against the CPU ops (there is no GPU in CI). Everything here is
// in an anonymous namespace (each file its own copy) and inline where it is
// not a template, so that a file using only part of it compiles warning-free.
#ifndef DLG_ENGINE_H
#define DLG_ENGINE_H
#include "internal.h"

#include "dl/gpu/reduce.h"
#include "dl/gpu/loss.h"
#include "dl/gpu/sparse.h"
#include "dl/gpu/optim.h"
#include "dl/vmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

// A file that uses only part of this gets no "defined but not used"
// warning for the rest (g++ builds these files for the fake device).
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

namespace {

constexpr int TPB = 256;

// ---------------------------------------------------------------- helpers

// Arithmetic that nvcc never fuses into a multiply-add: the optimizer,
// dropout and regularisation kernels use it to stay bit-identical to the
// CPU. On the host (the host test) the plain operators, which round the
// same way (the x86-64 baseline the CPU code is built for has no FMA).
#ifdef __CUDA_ARCH__
#define DLG_RN(dev, host) return dev
#else
#define DLG_RN(dev, host) return host
#endif
__host__ __device__ __forceinline__ float radd(float a, float b) { DLG_RN(__fadd_rn(a, b), a + b); }
__host__ __device__ __forceinline__ double radd(double a, double b) { DLG_RN(__dadd_rn(a, b), a + b); }
__host__ __device__ __forceinline__ float rsub(float a, float b) { DLG_RN(__fsub_rn(a, b), a - b); }
__host__ __device__ __forceinline__ double rsub(double a, double b) { DLG_RN(__dsub_rn(a, b), a - b); }
__host__ __device__ __forceinline__ float rmul(float a, float b) { DLG_RN(__fmul_rn(a, b), a * b); }
__host__ __device__ __forceinline__ double rmul(double a, double b) { DLG_RN(__dmul_rn(a, b), a * b); }
__host__ __device__ __forceinline__ float rdiv(float a, float b) { DLG_RN(__fdiv_rn(a, b), a / b); }
__host__ __device__ __forceinline__ double rdiv(double a, double b) { DLG_RN(__ddiv_rn(a, b), a / b); }
__host__ __device__ __forceinline__ float rsqrt_(float a) { DLG_RN(__fsqrt_rn(a), sqrtf(a)); }
__host__ __device__ __forceinline__ double rsqrt_(double a) { DLG_RN(__dsqrt_rn(a), sqrt(a)); }
#undef DLG_RN

// The element math of the CPU's losses and softmax (vmath.h, compiled for
// the device too): exp, log, log1p, sigmoid in the dtype.
__host__ __device__ __forceinline__ float texp(float v) { return dl_vexp_f32(v); }
__host__ __device__ __forceinline__ double texp(double v) { return exp(v); }
__host__ __device__ __forceinline__ float tlog1p(float v) { return dl_vlog1p_f32(v); }
__host__ __device__ __forceinline__ double tlog1p(double v) { return dl_vlog1p_f64(v); }
__host__ __device__ __forceinline__ float lexp(float v) { return dl_vexp_f32(v); }
__host__ __device__ __forceinline__ double lexp(double v) { return dl_vexp_f64(v); }
__host__ __device__ __forceinline__ float tsig(float v) { return dl_vsigmoid_f32(v); }
__host__ __device__ __forceinline__ double tsig(double v) { return dl_vsigmoid_f64(v); }
// reduce.h's exp of a double difference: f32 data take the float exp of the
// difference rounded to float (DL__REXP32), f64 data exp.
template <typename T> __host__ __device__ __forceinline__ double rexp(double v);
template <> __host__ __device__ __forceinline__ double rexp<float>(double v) { return (double)dl_vexp_f32((float)v); }
template <> __host__ __device__ __forceinline__ double rexp<double>(double v) { return exp(v); }

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) { // core.h's dl__mix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// ----------------------------------------------------- reduction engine

// A contiguous tensor seen as outputs x reduced elements: element (o, r) is
// at koff(o) + roff(r), each the row-major digits of o (r) over the kept
// (reduced) dimension groups times their strides. Adjacent dimensions of
// one kind are merged and sizes of 1 dropped, as reduce.h's plan does.
struct Geo {
  int nk, nr;
  int64_t ks[DLG_MAXD], kst[DLG_MAXD]; // kept groups, outermost first
  int64_t rs[DLG_MAXD], rst[DLG_MAXD]; // reduced groups, outermost first
  int64_t M, K;                        // outputs, elements per output
  int bx, by;                          // outputs per block, lanes per output
  int lanes_fast;                      // 1: the lane is the fastest thread index
};

__host__ __device__ __forceinline__ int64_t off_of(int n, const int64_t *sz, const int64_t *st, int64_t i) {
  if (n == 1) return i * st[0];
  int64_t off = 0;
  for (int d = n - 1; d >= 0; d--) {
    const int64_t q = i / sz[d];
    off += (i - q * sz[d]) * st[d];
    i = q;
  }
  return off;
}

inline int geo_make(dlg_handle *h, const char *op, int ndim, const int64_t *shape, unsigned mask, Geo *g) {
  int64_t gs[DLG_MAXD], gst[DLG_MAXD], stride = 1;
  int gr[DLG_MAXD], ng = 0;
  memset(g, 0, sizeof *g);
  if (ndim < 0 || ndim > DLG_MAXD || (ndim > 0 && !shape))
    return dlg_fail(h, DLG_ERR, "%s: %d dimensions (0 to %d)", op, ndim, DLG_MAXD);
  for (int d = ndim - 1; d >= 0; d--) { // groups, innermost first
    const int red = (int)((mask >> d) & 1u);
    if (shape[d] < 0) return dlg_fail(h, DLG_ERR, "%s: negative size %lld", op, (long long)shape[d]);
    if (shape[d] == 1) continue;
    if (ng > 0 && gr[ng - 1] == red) gs[ng - 1] *= shape[d];
    else {
      gs[ng] = shape[d];
      gst[ng] = stride;
      gr[ng] = red;
      ng++;
    }
    stride *= shape[d];
  }
  g->M = 1;
  g->K = 1;
  for (int k = ng - 1; k >= 0; k--) { // outermost first
    if (gr[k]) {
      g->rs[g->nr] = gs[k];
      g->rst[g->nr] = gst[k];
      g->nr++;
      g->K *= gs[k];
    } else {
      g->ks[g->nk] = gs[k];
      g->kst[g->nk] = gst[k];
      g->nk++;
      g->M *= gs[k];
    }
  }
  if (ng == 0 || gr[0]) { // the innermost run is reduced: lanes along it
    int by = 1;
    while (by < TPB && by < g->K) by *= 2;
    g->by = by;
    g->bx = TPB / by;
    g->lanes_fast = 1;
  } else { // the innermost run is kept: consecutive outputs on consecutive threads
    g->bx = 32;
    g->by = TPB / 32;
    g->lanes_fast = 0;
  }
  return DLG_OK;
}
// A geometry [outer, n, inner] reducing n.
inline int geo_3(dlg_handle *h, const char *op, int64_t outer, int64_t n, int64_t inner, Geo *g) {
  const int64_t shape[3] = {outer, n, inner};
  return geo_make(h, op, 3, shape, 2u, g);
}
// Tiles of bx outputs (one block's work at a time).
__host__ __device__ __forceinline__ int64_t geo_tiles(const Geo &g) { return (g.M + g.bx - 1) / g.bx; }

struct CSum {
  __host__ __device__ double operator()(double a, double b) const { return a + b; }
};
// max (is_max) or min; NaN propagates (reduce.h's dl__red_combine)
struct CExt {
  int is_max;
  __host__ __device__ double operator()(double a, double b) const {
    return is_max ? ((b > a || b != b) ? b : a) : ((b < a || b != b) ? b : a);
  }
};

// Combines each lane's v over the by lanes of its output (lane ty of output
// slot tx in the block); every thread of the block must call it (the same
// number of times); all lanes get the result.
template <class C> __device__ double bcomb(double v, double *sh, int bx, int by, int tx, int ty, C comb) {
  sh[ty * bx + tx] = v;
  __syncthreads();
  for (int s = by >> 1; s > 0; s >>= 1) {
    if (ty < s) sh[ty * bx + tx] = comb(sh[ty * bx + tx], sh[(ty + s) * bx + tx]);
    __syncthreads();
  }
  const double r = sh[tx];
  __syncthreads();
  return r;
}

// Who runs an output's body (the *_out functions): lane `first()` of the
// `step()` lanes of the output, which combine their partial values through
// comb; lead() (lane 0) writes the output's results. The bodies are
// __host__ __device__ templates over this policy so that the host test can
// run them with its own policies (one lane per output, or several lanes
// run in turn) against the CPU code.
struct EngRed {
  double *sh;
  int bx, by; // the geometry's
  int tx, ty; // output slot in the block, lane
  __host__ __device__ int64_t first() const { return ty; }
  __host__ __device__ int64_t step() const { return by; }
  __host__ __device__ bool lead() const { return ty == 0; }
  template <class C> __host__ __device__ double comb(double v, C c) const {
#if defined(__CUDA_ARCH__) || defined(DLG_FAKE) // the fake device runs the block (fake/cuda_fake.h)
    return bcomb(v, sh, bx, by, tx, ty, c);
#else
    (void)c;
    return v;
#endif
  }
};
// This thread's policy in a block of TPB threads over geometry g.
__device__ __forceinline__ EngRed eng_of(double *sh, const Geo &g) {
  const int t = (int)threadIdx.x;
  EngRed r;
  r.sh = sh;
  r.bx = g.bx;
  r.by = g.by;
  r.tx = g.lanes_fast ? t / g.by : t % g.bx;
  r.ty = g.lanes_fast ? t % g.by : t / g.bx;
  return r;
}
// The kernels' loop: each tile of outputs in turn, this thread on output
// o = tile * bx + its slot (the last tile's spare slots, o >= M, walk
// nothing but still take part in comb).
#define ENGINE_TILES(g, rd, o)                                                        \
  __shared__ double sh[TPB];                                                          \
  const EngRed rd = eng_of(sh, g);                                                    \
  const int64_t ntiles_ = geo_tiles(g);                                               \
  for (int64_t tile_ = blockIdx.x, o = tile_ * (g).bx + rd.tx; tile_ < ntiles_;       \
       tile_ += gridDim.x, o = tile_ * (g).bx + rd.tx)

// The start of an output body: ok (o is an output), base (the offset of
// its element 0), r0 (this lane's first element), lead (it writes the
// output's results). EACH walks this lane's elements: E is the offset.
#define OUT_BEGIN(rd, g, o)                                                   \
  const bool ok = (o) < (g).M;                                                \
  const int64_t base = ok ? off_of((g).nk, (g).ks, (g).kst, (o)) : 0;         \
  const int64_t r0 = ok ? (rd).first() : (g).K;                               \
  const bool lead = ok && (rd).lead();                                        \
  (void)lead;
#define EACH(rd, g, E)                                                                        \
  for (int64_t r_ = r0, E = 0; r_ < (g).K && ((E = base + off_of((g).nr, (g).rs, (g).rst, r_)), 1); \
       r_ += (rd).step())


// >>sums to one value: per-block partials, then one block adds them in order

template <class F>
__global__ void __launch_bounds__(TPB) k_psum(F f, int64_t n, double *__restrict__ part) {
  __shared__ double sh[TPB];
  double a = 0;
  GRID_STRIDE(i, n) a += f(i);
  sh[threadIdx.x] = a;
  __syncthreads();
  for (int s = TPB / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}
template <typename T>
__global__ void __launch_bounds__(TPB) k_pfinal(const double *__restrict__ part, int64_t nb, T *__restrict__ y,
                                                double div) {
  __shared__ double sh[TPB];
  double a = 0;
  for (int64_t i = threadIdx.x; i < nb; i += TPB) a += part[i];
  sh[threadIdx.x] = a;
  __syncthreads();
  for (int s = TPB / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = (T)(sh[0] / div);
}
// The terms such sums add (term i of n): f(i) of these functors.
struct FRead { // a buffer of doubles
  const double *v;
  __host__ __device__ double operator()(int64_t i) const { return v[i]; }
};


#ifndef DLG_HOST_TEST
// ------------------------------------------------------------ launching

inline int bad_dtype(dlg_handle *h, const char *op, int dtype) {
  return dlg_fail(h, DLG_ERR, "%s: dtype %d is not DLG_F32 or DLG_F64", op, dtype);
}
#define DLG_CHECK_DTYPE(op, dt)                                            \
  do {                                                                     \
    if ((dt) != DLG_F32 && (dt) != DLG_F64) return bad_dtype(h, op, (dt)); \
  } while (0)
#define DLG_TRY(x)              \
  do {                          \
    const int rc_ = (x);        \
    if (rc_ != DLG_OK) return rc_; \
  } while (0)

inline size_t up256(size_t b) { return (b + 255) & ~(size_t)255; }

// The workspace cut into pieces: piece k starts at at[k] bytes.
struct Carve {
  size_t at[4];
  size_t total;
};
inline Carve carve(size_t b0, size_t b1 = 0, size_t b2 = 0, size_t b3 = 0) {
  Carve c;
  const size_t b[4] = {b0, b1, b2, b3};
  size_t t = 0;
  for (int k = 0; k < 4; k++) {
    c.at[k] = t;
    t += up256(b[k] ? b[k] : 1);
  }
  c.total = t;
  return c;
}
template <typename P> P *piece(dlg_handle *h, const Carve &c, int k) { return (P *)((char *)h->ws + c.at[k]); }

// Host array -> device (in the stream's order: after the work queued before).
inline int stage(dlg_handle *h, void *dst, const void *src, size_t bytes, const char *op) {
  if (bytes == 0) return DLG_OK;
  return dlg_cuda(h, dlg_memcpy_async(h, dst, src, bytes, cudaMemcpyHostToDevice), op);
}
// The workspace taken as carved by c, whose piece 0 is n int64_t, and the
// host index array idx (n entries) staged into that piece: *dev.
inline int stage_index(dlg_handle *h, const char *op, const Carve &c, const int64_t *idx, size_t n, int64_t **dev) {
  DLG_TRY(dlg_ws(h, c.total));
  *dev = piece<int64_t>(h, c, 0);
  return stage(h, *dev, idx, sizeof(int64_t) * n, op);
}

inline unsigned geo_blocks(const dlg_handle *h, const Geo &g) { return dlg_blocks(h, geo_tiles(g) * TPB, TPB); }

// The partial buffer a sum over n items needs (doubles), for dlg_psum.
inline int64_t psum_blocks(const dlg_handle *h, int64_t n) { return (int64_t)dlg_blocks(h, n, TPB); }
// *y = (T)(sum_i f(i) / div), with `part` psum_blocks(n) doubles of device scratch.
template <typename T, class F>
int psum(dlg_handle *h, const char *op, F f, int64_t n, double *part, T *y, double div) {
  const unsigned nb = dlg_blocks(h, n, TPB);
  DLG_LAUNCH(nb, TPB, 0, h->stream, k_psum<F>)(f, n, part);
  DLG_TRY(dlg_launched(h, op));
  DLG_LAUNCH(1, TPB, 0, h->stream, k_pfinal<T>)(part, (int64_t)nb, y, div);
  return dlg_launched(h, op);
}
#endif // DLG_HOST_TEST

} // namespace

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic pop
#endif

#endif // DLG_ENGINE_H
