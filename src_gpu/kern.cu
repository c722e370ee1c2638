// src_gpu/kern.cu - reductions, softmax, losses, embedding, dropout and the
// optimizer updates on the device (the contracts are in dl/gpu/kern.h).
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
// Layout of this file: each kernel's work for one element (the *_at
// functions) or one engine output (the *_out functions, templated over the
// lane policy EngRed) is a __host__ __device__ function, and the kernel is
// a thin loop around it. tests/gpu_host/kern_host.cu #includes this file
// with DLG_HOST_TEST defined (which leaves out the launch code and the
// dlg_* entry points) and runs those bodies on the host, with host lane
// policies, against the CPU ops (there is no GPU in CI).
#include "internal.h"

#include "dl/gpu/kern.h"
#include "dl/vmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

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

int geo_make(dlg_handle *h, const char *op, int ndim, const int64_t *shape, unsigned mask, Geo *g) {
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
int geo_3(dlg_handle *h, const char *op, int64_t outer, int64_t n, int64_t inner, Geo *g) {
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

// >>reductions

template <typename T, class R>
__host__ __device__ void reduce_out(const R &rd, const Geo &g, int64_t o, int kind, const T *__restrict__ x,
                                    T *__restrict__ y, double *__restrict__ mean, double scale,
                                    const T *__restrict__ tx, T *__restrict__ ty, double tscale) {
  OUT_BEGIN(rd, g, o)
  if (kind == DLG_RED_SUM) {
    double a = 0;
    EACH(rd, g, e) a += (double)x[e];
    a = rd.comb(a, CSum());
    if (lead) y[o] = (T)(a * scale);
    if (tx) {
      double t = 0;
      EACH(rd, g, e) t += (double)tx[e];
      t = rd.comb(t, CSum());
      if (lead) ty[o] = (T)(t * tscale);
    }
  } else if (kind == DLG_RED_MAX || kind == DLG_RED_MIN) {
    const CExt ext = {kind == DLG_RED_MAX};
    double a = kind == DLG_RED_MAX ? -INFINITY : INFINITY;
    EACH(rd, g, e) a = ext(a, (double)x[e]);
    a = rd.comb(a, ext);
    if (lead) y[o] = (T)a;
    if (tx) { // the tangent at the selected elements, averaged over ties
      double num = 0, cnt = 0;
      EACH(rd, g, e) {
        if ((double)x[e] == a) {
          num += (double)tx[e];
          cnt += 1.0;
        }
      }
      num = rd.comb(num, CSum());
      cnt = rd.comb(cnt, CSum());
      if (lead) ty[o] = (T)(num / cnt);
    }
  } else if (kind == DLG_RED_VAR) {
    double s = 0, q = 0;
    EACH(rd, g, e) s += (double)x[e];
    s = rd.comb(s, CSum());
    const double mu = s / (double)g.K;
    EACH(rd, g, e) {
      const double v = (double)x[e] - mu;
      q += v * v;
    }
    q = rd.comb(q, CSum());
    if (lead) {
      if (mean) mean[o] = mu;
      y[o] = (T)(q * scale);
    }
    if (tx) {
      double d = 0;
      EACH(rd, g, e) d += ((double)x[e] - mu) * (double)tx[e];
      d = rd.comb(d, CSum());
      if (lead) ty[o] = (T)(d * tscale);
    }
  } else { // LSE
    const CExt ext = {1};
    double m = -INFINITY, s = 0;
    EACH(rd, g, e) m = ext(m, (double)x[e]);
    m = rd.comb(m, ext);
    if (m == INFINITY || m == -INFINITY) m = 0.0;
    EACH(rd, g, e) s += rexp<T>((double)x[e] - m);
    s = rd.comb(s, CSum());
    const double out = m + log(s);
    if (lead) y[o] = (T)out;
    if (tx) {
      double d = 0;
      EACH(rd, g, e) d += rexp<T>((double)x[e] - out) * (double)tx[e];
      d = rd.comb(d, CSum());
      if (lead) ty[o] = (T)d;
    }
  }
}
template <typename T>
__global__ void __launch_bounds__(TPB) k_reduce(Geo g, int kind, const T *__restrict__ x, T *__restrict__ y,
                                                double *__restrict__ mean, double scale, const T *__restrict__ tx,
                                                T *__restrict__ ty, double tscale) {
  ENGINE_TILES(g, rd, o) reduce_out<T>(rd, g, o, kind, x, y, mean, scale, tx, ty, tscale);
}

template <typename T, class R>
__host__ __device__ void reduce_bw_out(const R &rd, const Geo &g, int64_t o, int kind, T *__restrict__ gx,
                                       const T *__restrict__ x, const T *__restrict__ y, const T *__restrict__ gy,
                                       const double *__restrict__ mean, double scale) {
  OUT_BEGIN(rd, g, o)
  const double gyo = ok ? (double)gy[o] : 0.0;
  if (kind == DLG_RED_SUM) {
    const double c = gyo * scale;
    EACH(rd, g, e) gx[e] = (T)((double)gx[e] + c);
  } else if (kind == DLG_RED_MAX || kind == DLG_RED_MIN) {
    const double s = ok ? (double)y[o] : 0.0;
    double cnt = 0;
    EACH(rd, g, e) cnt += (double)x[e] == s ? 1.0 : 0.0;
    cnt = rd.comb(cnt, CSum());
    const double c = gyo / cnt;
    EACH(rd, g, e) gx[e] = (T)((double)gx[e] + ((double)x[e] == s ? c : 0.0));
  } else if (kind == DLG_RED_VAR) {
    const double c = gyo * scale, mu = ok ? mean[o] : 0.0;
    EACH(rd, g, e) gx[e] = (T)((double)gx[e] + c * ((double)x[e] - mu));
  } else { // LSE: gy exp(x - y)
    const double s = ok ? (double)y[o] : 0.0;
    EACH(rd, g, e) gx[e] = (T)((double)gx[e] + gyo * rexp<T>((double)x[e] - s));
  }
}
template <typename T>
__global__ void __launch_bounds__(TPB) k_reduce_bw(Geo g, int kind, T *__restrict__ gx, const T *__restrict__ x,
                                                   const T *__restrict__ y, const T *__restrict__ gy,
                                                   const double *__restrict__ mean, double scale) {
  ENGINE_TILES(g, rd, o) reduce_bw_out<T>(rd, g, o, kind, gx, x, y, gy, mean, scale);
}

template <typename T, class R>
__host__ __device__ void sum_axis_out(const R &rd, const Geo &g, int64_t o, T *__restrict__ y,
                                      const T *__restrict__ x, double scale, int accumulate) {
  OUT_BEGIN(rd, g, o)
  double a = 0;
  EACH(rd, g, e) a += (double)x[e];
  a = rd.comb(a, CSum());
  if (lead) y[o] = accumulate ? (T)((double)y[o] + scale * a) : (T)(scale * a);
}
template <typename T>
__global__ void __launch_bounds__(TPB) k_sum_axis(Geo g, T *__restrict__ y, const T *__restrict__ x, double scale,
                                                  int accumulate) {
  ENGINE_TILES(g, rd, o) sum_axis_out<T>(rd, g, o, y, x, scale, accumulate);
}

// >>softmax

template <typename T, class R>
__host__ __device__ void softmax_out(const R &rd, const Geo &g, int64_t o, const T *__restrict__ x,
                                     T *__restrict__ y, int logsm) {
  OUT_BEGIN(rd, g, o)
  double m = -INFINITY, s = 0;
  EACH(rd, g, e) {
    const double v = (double)x[e];
    m = v > m ? v : m;
  }
  m = rd.comb(m, CExt{1});
  const T mt = (T)m;
  EACH(rd, g, e) {
    const T ev = texp((T)(x[e] - mt));
    y[e] = ev;
    s += (double)ev;
  }
  s = rd.comb(s, CSum());
  if (logsm) {
    const T lse = (T)log(s);
    EACH(rd, g, e) y[e] = (T)(x[e] - mt) - lse;
  } else {
    const T inv = (T)(1.0 / s);
    EACH(rd, g, e) y[e] = y[e] * inv;
  }
}
template <typename T>
__global__ void __launch_bounds__(TPB) k_softmax(Geo g, const T *__restrict__ x, T *__restrict__ y, int logsm) {
  ENGINE_TILES(g, rd, o) softmax_out<T>(rd, g, o, x, y, logsm);
}

template <typename T, class R>
__host__ __device__ void softmax_bw_out(const R &rd, const Geo &g, int64_t o, int kind, const T *__restrict__ y,
                                        const T *__restrict__ a, T *__restrict__ gr) {
  OUT_BEGIN(rd, g, o)
  double d = 0;
  EACH(rd, g, e) {
    if (kind == 0) d += (double)a[e] * (double)y[e];
    else if (kind == 1) d += (double)a[e];
    else d += (double)texp(y[e]) * (double)a[e];
  }
  d = rd.comb(d, CSum());
  const T dv = (T)d;
  EACH(rd, g, e) {
    if (kind == 0) gr[e] = (T)((double)gr[e] + (double)y[e] * ((double)a[e] - d));
    else if (kind == 1) gr[e] = gr[e] + (a[e] - texp(y[e]) * dv);
    else gr[e] = gr[e] + (a[e] - dv);
  }
}
template <typename T>
__global__ void __launch_bounds__(TPB) k_softmax_bw(Geo g, int kind, const T *__restrict__ y, const T *__restrict__ a,
                                                    T *__restrict__ gr) {
  ENGINE_TILES(g, rd, o) softmax_bw_out<T>(rd, g, o, kind, y, a, gr);
}

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

// >>element-wise losses

template <typename T> struct LossArgs {
  int kind;
  const T *a, *b, *ta, *tb;
  T p;
};
template <typename T> __host__ __device__ __forceinline__ T loss_l(int kind, T x, T t, T p) {
  const T d = x - t, z = d < 0 ? -d : d;
  switch (kind) {
    case DLG_LOSS_MSE: return d * d;
    case DLG_LOSS_BCE: return (x > 0 ? x : (T)0) - x * t + tlog1p(lexp(x < 0 ? x : -x));
    case DLG_LOSS_HUBER: return z < p ? (T)0.5 * d * d : p * (z - (T)0.5 * p);
    case DLG_LOSS_SL1: return z < p ? (T)0.5 * d * d / p : z - (T)0.5 * p;
    default: return z;
  }
}
template <typename T> __host__ __device__ __forceinline__ T loss_da(int kind, T x, T t, T p) {
  const T d = x - t;
  switch (kind) {
    case DLG_LOSS_MSE: return 2 * d;
    case DLG_LOSS_BCE: return tsig(x) - t;
    case DLG_LOSS_HUBER: return d < -p ? -p : d > p ? p : d;
    case DLG_LOSS_SL1: return (d < -p ? -p : d > p ? p : d) / p;
    default: return (T)((d > 0) - (d < 0));
  }
}
template <typename T> __host__ __device__ __forceinline__ T loss_db(int kind, T x, T t, T p) {
  const T d = x - t;
  switch (kind) {
    case DLG_LOSS_MSE: return -2 * d;
    case DLG_LOSS_BCE: return -x;
    case DLG_LOSS_HUBER: return -(d < -p ? -p : d > p ? p : d);
    case DLG_LOSS_SL1: return -((d < -p ? -p : d > p ? p : d) / p);
    default: return (T)((d < 0) - (d > 0));
  }
}
template <typename T> __host__ __device__ __forceinline__ T loss_tan(const LossArgs<T> &A, int64_t i) {
  T v = 0;
  if (A.ta) v += loss_da(A.kind, A.a[i], A.b[i], A.p) * A.ta[i];
  if (A.tb) v += loss_db(A.kind, A.a[i], A.b[i], A.p) * A.tb[i];
  return v;
}
template <typename T> struct FLoss {
  LossArgs<T> A;
  int tangent;
  __host__ __device__ double operator()(int64_t i) const {
    return (double)(tangent ? loss_tan(A, i) : loss_l(A.kind, A.a[i], A.b[i], A.p));
  }
};
template <typename T>
__host__ __device__ __forceinline__ void loss_none_at(const LossArgs<T> &A, int tangent, T *__restrict__ out,
                                                      int64_t i) {
  out[i] = tangent ? loss_tan(A, i) : loss_l(A.kind, A.a[i], A.b[i], A.p);
}
template <typename T> __global__ void k_loss_none(LossArgs<T> A, int tangent, int64_t n, T *__restrict__ out) {
  GRID_STRIDE(i, n) loss_none_at(A, tangent, out, i);
}
template <typename T>
__host__ __device__ __forceinline__ void loss_bw_at(const LossArgs<T> &A, const T *__restrict__ gy, int64_t gs, T gsc,
                                                    T *ga, T *gb, int64_t i) {
  const T x = A.a[i], t = A.b[i], g = gy[i * gs] * gsc;
  if (ga) ga[i] += loss_da(A.kind, x, t, A.p) * g;
  if (gb) gb[i] += loss_db(A.kind, x, t, A.p) * g;
}
template <typename T>
__global__ void k_loss_bw(LossArgs<T> A, int64_t n, const T *__restrict__ gy, int64_t gs, T gsc, T *ga, T *gb) {
  GRID_STRIDE(i, n) loss_bw_at(A, gy, gs, gsc, ga, gb, i);
}

// >>cross entropy, nll (one engine output per row)

// Row o of x [N, C] (contiguous): prob's row, out[o] (when out) and
// rowv[o] = (double)(T)loss.
template <typename T, class R>
__host__ __device__ void ce_out(const R &rd, const Geo &g, int64_t o, int64_t C, const T *__restrict__ x,
                                const int64_t *__restrict__ lab, double eps, T *__restrict__ prob, T *__restrict__ out,
                                double *__restrict__ rowv) {
  OUT_BEGIN(rd, g, o)
  double m = -INFINITY, sz = 0, se = 0;
  EACH(rd, g, e) {
    const double v = (double)x[e];
    m = v > m ? v : m;
  }
  m = rd.comb(m, CExt{1});
  const T mt = (T)m;
  EACH(rd, g, e) {
    const T z = x[e] - mt, ev = lexp(z);
    sz += (double)z;
    prob[e] = ev;
    se += (double)ev;
  }
  sz = rd.comb(sz, CSum());
  se = rd.comb(se, CSum());
  const double inv = 1 / se;
  EACH(rd, g, e) prob[e] = (T)((double)prob[e] * inv);
  if (lead) {
    int64_t l = lab[o];
    if (l < 0 || l >= C) l = 0; // checked by the caller; only keeps the read inside the row
    const T zl = x[o * C + l] - mt;
    const double part = -(1.0 - eps) * (double)zl - (eps != 0 ? eps / (double)C * sz : 0);
    const double li = dl_vlog_f64(se) + part;
    if (out) out[o] = (T)li;
    rowv[o] = (double)(T)li;
  }
}
template <typename T>
__global__ void __launch_bounds__(TPB) k_ce(Geo g, int64_t C, const T *__restrict__ x, const int64_t *__restrict__ lab,
                                            double eps, T *__restrict__ prob, T *__restrict__ out,
                                            double *__restrict__ rowv) {
  ENGINE_TILES(g, rd, o) ce_out<T>(rd, g, o, C, x, lab, eps, prob, out, rowv);
}
template <typename T, class R>
__host__ __device__ void ce_tan_out(const R &rd, const Geo &g, int64_t o, int64_t C, const T *__restrict__ prob,
                                    const int64_t *__restrict__ lab, double eps, const T *__restrict__ t,
                                    T *__restrict__ out, double *__restrict__ rowv) {
  const T keep = (T)(1.0 - eps), eoc = (T)(eps / (double)C);
  OUT_BEGIN(rd, g, o)
  double v = 0;
  EACH(rd, g, e) v += (double)((prob[e] - eoc) * t[e]);
  v = rd.comb(v, CSum());
  if (lead) {
    int64_t l = lab[o];
    if (l < 0 || l >= C) l = 0;
    const T r = (T)v - keep * t[o * C + l];
    if (out) out[o] = r;
    rowv[o] = (double)r;
  }
}
template <typename T>
__global__ void __launch_bounds__(TPB) k_ce_tan(Geo g, int64_t C, const T *__restrict__ prob,
                                                const int64_t *__restrict__ lab, double eps, const T *__restrict__ t,
                                                T *__restrict__ out, double *__restrict__ rowv) {
  ENGINE_TILES(g, rd, o) ce_tan_out<T>(rd, g, o, C, prob, lab, eps, t, out, rowv);
}
template <typename T>
__host__ __device__ __forceinline__ void ce_bw_at(int64_t C, const T *__restrict__ prob,
                                                  const int64_t *__restrict__ lab, T keep, T eoc,
                                                  const T *__restrict__ gy, int64_t gs, T gsc, T *__restrict__ gx,
                                                  int64_t k) {
  const int64_t i = k / C, c = k - i * C;
  const T g = gy[i * gs] * gsc;
  T v = gx[k] + (prob[k] - eoc) * g;
  if (c == lab[i]) v -= keep * g;
  gx[k] = v;
}
template <typename T>
__global__ void k_ce_bw(int64_t N, int64_t C, const T *__restrict__ prob, const int64_t *__restrict__ lab, T keep,
                        T eoc, const T *__restrict__ gy, int64_t gs, T gsc, T *__restrict__ gx) {
  GRID_STRIDE(k, N * C) ce_bw_at(C, prob, lab, keep, eoc, gy, gs, gsc, gx, k);
}
template <typename T>
__host__ __device__ __forceinline__ void nll_at(int64_t C, const T *__restrict__ x, int64_t s0, int64_t s1,
                                                const int64_t *__restrict__ lab, T *__restrict__ out,
                                                double *__restrict__ rowv, int64_t i) {
  const int64_t l = lab[i];
  const T e = (l >= 0 && l < C) ? -x[i * s0 + l * s1] : (T)0;
  if (out) out[i] = e;
  rowv[i] = (double)e;
}
template <typename T>
__global__ void k_nll(int64_t N, int64_t C, const T *__restrict__ x, int64_t s0, int64_t s1,
                      const int64_t *__restrict__ lab, T *__restrict__ out, double *__restrict__ rowv) {
  GRID_STRIDE(i, N) nll_at(C, x, s0, s1, lab, out, rowv, i);
}
template <typename T>
__host__ __device__ __forceinline__ void nll_bw_at(int64_t C, const int64_t *__restrict__ lab,
                                                   const T *__restrict__ gy, int64_t gs, T f, T *__restrict__ gx,
                                                   int64_t i) {
  const int64_t l = lab[i];
  if (l >= 0 && l < C) gx[i * C + l] -= gy[i * gs] * f;
}
template <typename T>
__global__ void k_nll_bw(int64_t N, int64_t C, const int64_t *__restrict__ lab, const T *__restrict__ gy, int64_t gs,
                         T f, T *__restrict__ gx) {
  GRID_STRIDE(i, N) nll_bw_at(C, lab, gy, gs, f, gx, i);
}

// >>embedding, row scatter, dropout

template <typename T>
__host__ __device__ __forceinline__ void gather_at(T *__restrict__ y, const T *__restrict__ w, int64_t s0, int64_t s1,
                                                   int64_t V, int64_t D, const int64_t *__restrict__ rows, int64_t k) {
  const int64_t i = k / D, j = k - i * D, r = rows[i];
  y[k] = (r >= 0 && r < V) ? w[r * s0 + j * s1] : (T)0;
}
template <typename T>
__global__ void k_gather(T *__restrict__ y, const T *__restrict__ w, int64_t s0, int64_t s1, int64_t V, int64_t D,
                         const int64_t *__restrict__ rows, int64_t n) {
  GRID_STRIDE(k, n * D) gather_at(y, w, s0, s1, V, D, rows, k);
}
// The groups of dlg_rows_scatter, built on the host: the indices i with a
// key in [0, nrows), stably sorted by key, then one group per distinct key,
// into all = [dst_row (ng) | beg (ng + 1) | order (m)]: group q adds src
// rows order[beg[q] .. beg[q+1]) into dst row dst_row[q]. Returns ng (0:
// nothing to add; all is then empty).
int64_t scatter_plan(const int64_t *key, int64_t n, int64_t nrows, std::vector<int64_t> &all) {
  std::vector<int64_t> idx;
  all.clear();
  idx.reserve((size_t)n);
  for (int64_t i = 0; i < n; i++)
    if (key[i] >= 0 && key[i] < nrows) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [key](int64_t a, int64_t b) { return key[a] < key[b]; });
  const int64_t m = (int64_t)idx.size();
  if (m == 0) return 0;
  std::vector<int64_t> dst_row, beg;
  for (int64_t p = 0; p < m; p++)
    if (p == 0 || key[idx[(size_t)p]] != key[idx[(size_t)p - 1]]) {
      dst_row.push_back(key[idx[(size_t)p]]);
      beg.push_back(p);
    }
  beg.push_back(m);
  const int64_t ng = (int64_t)dst_row.size();
  all.reserve((size_t)(2 * ng + 1 + m));
  all.insert(all.end(), dst_row.begin(), dst_row.end());
  all.insert(all.end(), beg.begin(), beg.end());
  all.insert(all.end(), idx.begin(), idx.end());
  return ng;
}
// Column j of group q (k = q D + j): its rows added in order, in the dtype.
template <typename T>
__host__ __device__ __forceinline__ void scatter_at(T *__restrict__ dst, int64_t D, const int64_t *__restrict__ dst_row,
                                                    const int64_t *__restrict__ beg,
                                                    const int64_t *__restrict__ order, const T *__restrict__ src,
                                                    int64_t k) {
  const int64_t q = k / D, j = k - q * D;
  T *d = dst + dst_row[q] * D + j;
  T v = *d;
  for (int64_t p = beg[q]; p < beg[q + 1]; p++) v = radd(v, src[order[p] * D + j]);
  *d = v;
}
template <typename T>
__global__ void k_scatter(T *__restrict__ dst, int64_t D, const int64_t *__restrict__ dst_row,
                          const int64_t *__restrict__ beg, const int64_t *__restrict__ order, int64_t ngroups,
                          const T *__restrict__ src) {
  GRID_STRIDE(k, ngroups * D) scatter_at(dst, D, dst_row, beg, order, src, k);
}
template <typename T>
__host__ __device__ __forceinline__ void dropout_at(const T *__restrict__ x, T *__restrict__ y,
                                                    unsigned char *__restrict__ mask, uint64_t key, uint64_t base,
                                                    uint64_t thr, T s, int64_t i) {
  const uint64_t u = mix64(key + (base + (uint64_t)i + 1) * 0x9e3779b97f4a7c15ULL);
  const unsigned char k = (unsigned char)((u >> 11) >= thr);
  mask[i] = k;
  y[i] = rmul(x[i], rmul(s, (T)k));
}
template <typename T>
__global__ void k_dropout(int64_t n, const T *__restrict__ x, T *__restrict__ y, unsigned char *__restrict__ mask,
                          uint64_t key, uint64_t base, uint64_t thr, T s) {
  GRID_STRIDE(i, n) dropout_at(x, y, mask, key, base, thr, s, i);
}
template <typename T>
__host__ __device__ __forceinline__ void dropout_apply_at(T *__restrict__ y, const T *__restrict__ x,
                                                          const unsigned char *__restrict__ mask, T s, int accumulate,
                                                          int64_t i) {
  const T v = rmul(x[i], rmul(s, (T)mask[i]));
  y[i] = accumulate ? radd(y[i], v) : v;
}
template <typename T>
__global__ void k_dropout_apply(int64_t n, T *__restrict__ y, const T *__restrict__ x,
                                const unsigned char *__restrict__ mask, T s, int accumulate) {
  GRID_STRIDE(i, n) dropout_apply_at(y, x, mask, s, accumulate, i);
}

// >>optimizers: element i of g is element at(i) of p and the state

__host__ __device__ __forceinline__ int64_t at(int64_t i, int64_t w, const int64_t *rows) {
  if (!rows) return i;
  const int64_t k = i / w;
  return rows[k] * w + (i - k * w);
}
template <typename T> __host__ __device__ __forceinline__ T sgn(T v) {
  return rsub(v > 0 ? (T)1 : (T)0, v < 0 ? (T)1 : (T)0);
}

template <typename T>
__host__ __device__ __forceinline__ void sgd_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                const T *__restrict__ g, T *__restrict__ buf, T sg, T wd, T mom,
                                                T damp1, T lr, int use_buf, int first, int nesterov, int64_t i) {
  const int64_t k = at(i, w, rows);
  const T pk = p[k], d = radd(rmul(sg, g[i]), rmul(wd, pk));
  if (!use_buf) {
    p[k] = rsub(pk, rmul(lr, d));
    return;
  }
  const T b = first ? d : radd(rmul(buf[k], mom), rmul(damp1, d));
  buf[k] = b;
  p[k] = nesterov ? rsub(pk, rmul(lr, radd(d, rmul(mom, b)))) : rsub(pk, rmul(lr, b));
}
template <typename T>
__global__ void k_sgd(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                      const T *__restrict__ g, T *__restrict__ buf, T sg, T wd, T mom, T damp1, T lr, int use_buf,
                      int first, int nesterov) {
  GRID_STRIDE(i, n) sgd_at(w, rows, p, g, buf, sg, wd, mom, damp1, lr, use_buf, first, nesterov, i);
}
template <typename T>
__host__ __device__ __forceinline__ void adam_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                 const T *__restrict__ g, T *__restrict__ m, T *__restrict__ v,
                                                 T *__restrict__ vm, T sg, T wd, T b1, T b1c, T b2, T b2c, T dec, T ss,
                                                 T bc, T eps, int64_t i) {
  const int64_t k = at(i, w, rows);
  const T pk = p[k], d = radd(rmul(sg, g[i]), rmul(wd, pk));
  const T mi = radd(rmul(m[k], b1), rmul(b1c, d));
  T vi = radd(rmul(v[k], b2), rmul(b2c, rmul(d, d)));
  m[k] = mi;
  v[k] = vi;
  if (vm) {
    const T a = vm[k];
    vi = (a > vi || a != a) ? a : vi;
    vm[k] = vi;
  }
  p[k] = rsub(rmul(pk, dec), rdiv(rmul(ss, mi), radd(rdiv(rsqrt_(vi), bc), eps)));
}
template <typename T>
__global__ void k_adam(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                       const T *__restrict__ g, T *__restrict__ m, T *__restrict__ v, T *__restrict__ vm, T sg, T wd,
                       T b1, T b1c, T b2, T b2c, T dec, T ss, T bc, T eps) {
  GRID_STRIDE(i, n) adam_at(w, rows, p, g, m, v, vm, sg, wd, b1, b1c, b2, b2c, dec, ss, bc, eps, i);
}
template <typename T>
__host__ __device__ __forceinline__ void rmsprop_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                    const T *__restrict__ g, T *__restrict__ sq, T *__restrict__ ga,
                                                    T *__restrict__ mb, T sg, T wd, T al, T al1, T eps, T mom, T lr,
                                                    int64_t i) {
  const int64_t k = at(i, w, rows);
  const T pk = p[k], d = radd(rmul(sg, g[i]), rmul(wd, pk));
  const T s = radd(rmul(sq[k], al), rmul(al1, rmul(d, d)));
  T avg;
  sq[k] = s;
  if (ga) {
    const T a = radd(rmul(ga[k], al), rmul(al1, d));
    ga[k] = a;
    avg = radd(rsqrt_(rsub(s, rmul(a, a))), eps);
  } else {
    avg = radd(rsqrt_(s), eps);
  }
  if (mb) {
    const T b = radd(rmul(mb[k], mom), rdiv(d, avg));
    mb[k] = b;
    p[k] = rsub(pk, rmul(lr, b));
  } else {
    p[k] = rsub(pk, rdiv(rmul(lr, d), avg));
  }
}
template <typename T>
__global__ void k_rmsprop(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                          const T *__restrict__ g, T *__restrict__ sq, T *__restrict__ ga, T *__restrict__ mb, T sg,
                          T wd, T al, T al1, T eps, T mom, T lr) {
  GRID_STRIDE(i, n) rmsprop_at(w, rows, p, g, sq, ga, mb, sg, wd, al, al1, eps, mom, lr, i);
}
template <typename T>
__host__ __device__ __forceinline__ void adagrad_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                    const T *__restrict__ g, T *__restrict__ sum, T sg, T wd, T clr,
                                                    T eps, int64_t i) {
  const int64_t k = at(i, w, rows);
  const T pk = p[k], d = radd(rmul(sg, g[i]), rmul(wd, pk));
  const T s = radd(sum[k], rmul(d, d));
  sum[k] = s;
  p[k] = rsub(pk, rdiv(rmul(clr, d), radd(rsqrt_(s), eps)));
}
template <typename T>
__global__ void k_adagrad(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                          const T *__restrict__ g, T *__restrict__ sum, T sg, T wd, T clr, T eps) {
  GRID_STRIDE(i, n) adagrad_at(w, rows, p, g, sum, sg, wd, clr, eps, i);
}
template <typename T>
__host__ __device__ __forceinline__ void lion_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                 const T *__restrict__ g, T *__restrict__ m, T b1, T b1c, T b2, T b2c,
                                                 T lr, T dec, int64_t i) {
  const int64_t k = at(i, w, rows);
  const T gi = g[i], mk = m[k];
  const T c = radd(rmul(mk, b1), rmul(b1c, gi));
  p[k] = rsub(rmul(p[k], dec), rmul(lr, sgn(c)));
  m[k] = radd(rmul(mk, b2), rmul(b2c, gi));
}
template <typename T>
__global__ void k_lion(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                       const T *__restrict__ g, T *__restrict__ m, T b1, T b1c, T b2, T b2c, T lr, T dec) {
  GRID_STRIDE(i, n) lion_at(w, rows, p, g, m, b1, b1c, b2, b2c, lr, dec, i);
}
template <typename T> __host__ __device__ __forceinline__ void clamp_at(T *__restrict__ x, T lo, T hi, int64_t i) {
  const T v = x[i];
  x[i] = v < lo ? lo : v > hi ? hi : v;
}
template <typename T> __global__ void k_clamp(T *__restrict__ x, int64_t n, T lo, T hi) {
  GRID_STRIDE(i, n) clamp_at(x, lo, hi, i);
}
template <typename T> struct FSq {
  const T *x;
  __host__ __device__ double operator()(int64_t i) const {
    const double v = (double)x[i];
    return v * v;
  }
};
template <typename T> __host__ __device__ __forceinline__ void scale_at(T *__restrict__ x, T f, int64_t i) {
  x[i] = rmul(x[i], f);
}
template <typename T> __global__ void k_scale(T *__restrict__ x, int64_t n, T f) {
  GRID_STRIDE(i, n) scale_at(x, f, i);
}
template <typename T>
__host__ __device__ __forceinline__ void regularize_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ g,
                                                       const T *__restrict__ p, T l1, T l2, int64_t i) {
  const T pk = p[at(i, w, rows)];
  g[i] = radd(g[i], radd(rmul(l2, pk), rmul(l1, sgn(pk))));
}
template <typename T>
__global__ void k_regularize(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ g,
                             const T *__restrict__ p, T l1, T l2) {
  GRID_STRIDE(i, n) regularize_at(w, rows, g, p, l1, l2, i);
}

#ifndef DLG_HOST_TEST
// ------------------------------------------------------------ launching

int bad_dtype(dlg_handle *h, const char *op, int dtype) {
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

size_t up256(size_t b) { return (b + 255) & ~(size_t)255; }

// The workspace cut into pieces: piece k starts at at[k] bytes.
struct Carve {
  size_t at[4];
  size_t total;
};
Carve carve(size_t b0, size_t b1 = 0, size_t b2 = 0, size_t b3 = 0) {
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
int stage(dlg_handle *h, void *dst, const void *src, size_t bytes, const char *op) {
  if (bytes == 0) return DLG_OK;
  return dlg_cuda(h, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, h->stream), op);
}
// The workspace taken as carved by c, whose piece 0 is n int64_t, and the
// host index array idx (n entries) staged into that piece: *dev.
int stage_index(dlg_handle *h, const char *op, const Carve &c, const int64_t *idx, size_t n, int64_t **dev) {
  DLG_TRY(dlg_ws(h, c.total));
  *dev = piece<int64_t>(h, c, 0);
  return stage(h, *dev, idx, sizeof(int64_t) * n, op);
}

unsigned geo_blocks(const dlg_handle *h, const Geo &g) { return dlg_blocks(h, geo_tiles(g) * TPB, TPB); }

// The partial buffer a sum over n items needs (doubles), for dlg_psum.
int64_t psum_blocks(const dlg_handle *h, int64_t n) { return (int64_t)dlg_blocks(h, n, TPB); }
// *y = (T)(sum_i f(i) / div), with `part` psum_blocks(n) doubles of device scratch.
template <typename T, class F>
int psum(dlg_handle *h, const char *op, F f, int64_t n, double *part, T *y, double div) {
  const unsigned nb = dlg_blocks(h, n, TPB);
  DLG_LAUNCH(nb, TPB, 0, h->stream, k_psum<F>)(f, n, part);
  DLG_TRY(dlg_launched(h, op));
  DLG_LAUNCH(1, TPB, 0, h->stream, k_pfinal<T>)(part, (int64_t)nb, y, div);
  return dlg_launched(h, op);
}

template <typename T>
int loss_ew_run(dlg_handle *h, const char *op, int kind, int64_t n, const void *a, const void *b, double p,
                const void *ta, const void *tb, int tangent, void *out, void *y, double div) {
  LossArgs<T> A = {kind, (const T *)a, (const T *)b, (const T *)ta, (const T *)tb, (T)p};
  if (out) {
    if (n == 0) return DLG_OK;
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_loss_none<T>)(A, tangent, n, (T *)out);
    return dlg_launched(h, op);
  }
  const Carve c = carve(sizeof(double) * (size_t)psum_blocks(h, n));
  DLG_TRY(dlg_ws(h, c.total));
  FLoss<T> f = {A, tangent};
  return psum<T>(h, op, f, n, piece<double>(h, c, 0), (T *)y, div);
}

// Cross-entropy and its tangent share the shape: rows through the engine
// into per-row values, then their sum unless `out` takes them.
template <typename T>
int ce_run(dlg_handle *h, const char *op, int tangent, int64_t N, int64_t C, const void *x,
                  const int64_t *labels, double eps, void *prob, const void *t, void *out, void *y, double div) {
  Geo g;
  const int64_t shape[2] = {N, C};
  DLG_TRY(geo_make(h, op, 2, shape, 2u, &g));
  if (C == 0 && N > 0) return dlg_fail(h, DLG_ERR, "%s: %lld rows of 0 classes", op, (long long)N);
  const Carve c = carve(sizeof(int64_t) * (size_t)N, sizeof(double) * (size_t)N,
                        sizeof(double) * (size_t)psum_blocks(h, N));
  int64_t *lab = NULL;
  DLG_TRY(stage_index(h, op, c, labels, (size_t)N, &lab));
  double *rowv = piece<double>(h, c, 1);
  if (N > 0) {
    if (!tangent)
      DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_ce<T>)(g, C, (const T *)x, lab, eps, (T *)prob, (T *)out, rowv);
    else
      DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_ce_tan<T>)(g, C, (const T *)prob, lab, eps, (const T *)t, (T *)out,
                                                            rowv);
    DLG_TRY(dlg_launched(h, op));
  }
  if (out) return DLG_OK;
  const FRead f = {rowv};
  return psum<T>(h, op, f, N, piece<double>(h, c, 2), (T *)y, div);
}

// The rows of a row-sparse step into the workspace (NULL when dense).
int stage_rows(dlg_handle *h, const char *op, int64_t n, int64_t width, const int64_t *rows, const int64_t **dev) {
  *dev = NULL;
  if (!rows || n == 0) return DLG_OK;
  if (width <= 0 || n % width != 0)
    return dlg_fail(h, DLG_ERR, "%s: %lld elements are not whole rows of %lld", op, (long long)n, (long long)width);
  const size_t bytes = sizeof(int64_t) * (size_t)(n / width);
  DLG_TRY(dlg_ws(h, up256(bytes)));
  DLG_TRY(stage(h, h->ws, rows, bytes, op));
  *dev = (const int64_t *)h->ws;
  return DLG_OK;
}
#endif // DLG_HOST_TEST

} // namespace

#ifndef DLG_HOST_TEST
// ================================================================ the ABI

extern "C" {

int dlg_sum_axis(dlg_handle *h, int dtype, void *y, const void *x, int64_t outer, int64_t n, int64_t inner,
                 double scale, int accumulate) {
  static const char *op = "dlg_sum_axis";
  Geo g;
  DLG_CHECK_DTYPE(op, dtype);
  DLG_TRY(geo_3(h, op, outer, n, inner, &g));
  if (outer == 0 || inner == 0) return DLG_OK;
  if (n == 0) { // nothing summed: y = y or 0
    if (accumulate) return DLG_OK;
    return dlg_cuda(h, cudaMemsetAsync(y, 0, (size_t)(outer * inner) * (dtype == DLG_F32 ? 4 : 8), h->stream), op);
  }
  if (dtype == DLG_F32)
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_sum_axis<float>)(g, (float *)y, (const float *)x, scale, accumulate);
  else
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_sum_axis<double>)(g, (double *)y, (const double *)x, scale, accumulate);
  return dlg_launched(h, op);
}

int dlg_reduce(dlg_handle *h, int dtype, int kind, int ndim, const int64_t *shape, unsigned mask, const void *x,
               void *y, double *mean, double scale, const void *tx, void *ty, double tscale) {
  static const char *op = "dlg_reduce";
  Geo g;
  DLG_CHECK_DTYPE(op, dtype);
  if (kind < DLG_RED_SUM || kind > DLG_RED_LSE) return dlg_fail(h, DLG_ERR, "%s: unknown kind %d", op, kind);
  DLG_TRY(geo_make(h, op, ndim, shape, mask, &g));
  if (g.M == 0 || g.K == 0) return DLG_OK; // empty: the caller fills the outputs
  if (dtype == DLG_F32)
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_reduce<float>)(g, kind, (const float *)x, (float *)y, mean, scale,
                                                               (const float *)tx, (float *)ty, tscale);
  else
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_reduce<double>)(g, kind, (const double *)x, (double *)y, mean, scale,
                                                                (const double *)tx, (double *)ty, tscale);
  return dlg_launched(h, op);
}

int dlg_reduce_backward(dlg_handle *h, int dtype, int kind, int ndim, const int64_t *shape, unsigned mask, void *gx,
                        const void *x, const void *y, const void *gy, const double *mean, double scale) {
  static const char *op = "dlg_reduce_backward";
  Geo g;
  DLG_CHECK_DTYPE(op, dtype);
  if (kind < DLG_RED_SUM || kind > DLG_RED_LSE) return dlg_fail(h, DLG_ERR, "%s: unknown kind %d", op, kind);
  if (kind == DLG_RED_VAR && !mean) return dlg_fail(h, DLG_ERR, "%s: var needs the forward's means", op);
  DLG_TRY(geo_make(h, op, ndim, shape, mask, &g));
  if (g.M == 0 || g.K == 0) return DLG_OK;
  if (dtype == DLG_F32)
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_reduce_bw<float>)(g, kind, (float *)gx, (const float *)x,
                                                                  (const float *)y, (const float *)gy, mean, scale);
  else
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_reduce_bw<double>)(g, kind, (double *)gx, (const double *)x,
                                                                   (const double *)y, (const double *)gy, mean, scale);
  return dlg_launched(h, op);
}

int dlg_softmax(dlg_handle *h, int dtype, int64_t outer, int64_t n, int64_t inner, const void *x, void *y,
                int logsm) {
  static const char *op = "dlg_softmax";
  Geo g;
  DLG_CHECK_DTYPE(op, dtype);
  DLG_TRY(geo_3(h, op, outer, n, inner, &g));
  if (g.M == 0 || g.K == 0) return DLG_OK;
  if (dtype == DLG_F32)
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_softmax<float>)(g, (const float *)x, (float *)y, logsm);
  else
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_softmax<double>)(g, (const double *)x, (double *)y, logsm);
  return dlg_launched(h, op);
}

int dlg_softmax_backward(dlg_handle *h, int dtype, int64_t outer, int64_t n, int64_t inner, int kind, const void *y,
                         const void *a, void *gr) {
  static const char *op = "dlg_softmax_backward";
  Geo g;
  DLG_CHECK_DTYPE(op, dtype);
  if (kind < 0 || kind > 2) return dlg_fail(h, DLG_ERR, "%s: unknown kind %d", op, kind);
  DLG_TRY(geo_3(h, op, outer, n, inner, &g));
  if (g.M == 0 || g.K == 0) return DLG_OK;
  if (dtype == DLG_F32)
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_softmax_bw<float>)(g, kind, (const float *)y, (const float *)a,
                                                                   (float *)gr);
  else
    DLG_LAUNCH(geo_blocks(h, g), TPB, 0, h->stream, k_softmax_bw<double>)(g, kind, (const double *)y, (const double *)a,
                                                                    (double *)gr);
  return dlg_launched(h, op);
}

int dlg_loss_ew(dlg_handle *h, int dtype, int kind, int64_t n, const void *a, const void *b, double p, void *out,
                void *y, double div) {
  static const char *op = "dlg_loss_ew";
  DLG_CHECK_DTYPE(op, dtype);
  if (dtype == DLG_F32) return loss_ew_run<float>(h, op, kind, n, a, b, p, NULL, NULL, 0, out, y, div);
  return loss_ew_run<double>(h, op, kind, n, a, b, p, NULL, NULL, 0, out, y, div);
}

int dlg_loss_ew_tangent(dlg_handle *h, int dtype, int kind, int64_t n, const void *a, const void *b, double p,
                        const void *ta, const void *tb, void *out, void *y, double div) {
  static const char *op = "dlg_loss_ew_tangent";
  DLG_CHECK_DTYPE(op, dtype);
  if (dtype == DLG_F32) return loss_ew_run<float>(h, op, kind, n, a, b, p, ta, tb, 1, out, y, div);
  return loss_ew_run<double>(h, op, kind, n, a, b, p, ta, tb, 1, out, y, div);
}

int dlg_loss_ew_backward(dlg_handle *h, int dtype, int kind, int64_t n, const void *a, const void *b, double p,
                         const void *gy, int64_t gstride, double gscale, void *ga, void *gb) {
  static const char *op = "dlg_loss_ew_backward";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0 || (!ga && !gb)) return DLG_OK;
  if (dtype == DLG_F32) {
    const LossArgs<float> A = {kind, (const float *)a, (const float *)b, NULL, NULL, (float)p};
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_loss_bw<float>)(A, n, (const float *)gy, gstride, (float)gscale,
                                                                      (float *)ga, (float *)gb);
  } else {
    const LossArgs<double> A = {kind, (const double *)a, (const double *)b, NULL, NULL, p};
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_loss_bw<double>)(A, n, (const double *)gy, gstride, gscale,
                                                                       (double *)ga, (double *)gb);
  }
  return dlg_launched(h, op);
}

int dlg_cross_entropy(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *x, const int64_t *labels,
                      double eps, void *prob, void *out, void *y, double div) {
  static const char *op = "dlg_cross_entropy";
  DLG_CHECK_DTYPE(op, dtype);
  if (dtype == DLG_F32) return ce_run<float>(h, op, 0, N, C, x, labels, eps, prob, NULL, out, y, div);
  return ce_run<double>(h, op, 0, N, C, x, labels, eps, prob, NULL, out, y, div);
}

int dlg_cross_entropy_tangent(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *prob,
                              const int64_t *labels, double eps, const void *t, void *out, void *y, double div) {
  static const char *op = "dlg_cross_entropy_tangent";
  DLG_CHECK_DTYPE(op, dtype);
  if (dtype == DLG_F32)
    return ce_run<float>(h, op, 1, N, C, NULL, labels, eps, const_cast<void *>(prob), t, out, y, div);
  return ce_run<double>(h, op, 1, N, C, NULL, labels, eps, const_cast<void *>(prob), t, out, y, div);
}

int dlg_cross_entropy_backward(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *prob,
                               const int64_t *labels, double eps, const void *gy, int64_t gstride, double gscale,
                               void *gx) {
  static const char *op = "dlg_cross_entropy_backward";
  DLG_CHECK_DTYPE(op, dtype);
  if (N == 0 || C == 0) return DLG_OK;
  const Carve c = carve(sizeof(int64_t) * (size_t)N);
  int64_t *lab = NULL;
  DLG_TRY(stage_index(h, op, c, labels, (size_t)N, &lab));
  const unsigned nb = dlg_blocks(h, N * C, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_ce_bw<float>)(N, C, (const float *)prob, lab, (float)(1.0 - eps),
                                              (float)(eps / (double)C), (const float *)gy, gstride, (float)gscale,
                                              (float *)gx);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_ce_bw<double>)(N, C, (const double *)prob, lab, 1.0 - eps, eps / (double)C,
                                               (const double *)gy, gstride, gscale, (double *)gx);
  return dlg_launched(h, op);
}

int dlg_nll(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *x, int64_t s0, int64_t s1,
            const int64_t *labels, void *out, void *y, double div) {
  static const char *op = "dlg_nll";
  DLG_CHECK_DTYPE(op, dtype);
  const Carve c = carve(sizeof(int64_t) * (size_t)N, sizeof(double) * (size_t)N,
                        sizeof(double) * (size_t)psum_blocks(h, N));
  int64_t *lab = NULL;
  DLG_TRY(stage_index(h, op, c, labels, (size_t)N, &lab));
  double *rowv = piece<double>(h, c, 1);
  if (N > 0) {
    if (dtype == DLG_F32)
      DLG_LAUNCH(dlg_blocks(h, N, TPB), TPB, 0, h->stream, k_nll<float>)(N, C, (const float *)x, s0, s1, lab, (float *)out,
                                                                  rowv);
    else
      DLG_LAUNCH(dlg_blocks(h, N, TPB), TPB, 0, h->stream, k_nll<double>)(N, C, (const double *)x, s0, s1, lab,
                                                                   (double *)out, rowv);
    DLG_TRY(dlg_launched(h, op));
  }
  if (out) return DLG_OK;
  const FRead f = {rowv};
  if (dtype == DLG_F32) return psum<float>(h, op, f, N, piece<double>(h, c, 2), (float *)y, div);
  return psum<double>(h, op, f, N, piece<double>(h, c, 2), (double *)y, div);
}

int dlg_nll_backward(dlg_handle *h, int dtype, int64_t N, int64_t C, const int64_t *labels, const void *gy,
                     int64_t gstride, double gscale, void *gx) {
  static const char *op = "dlg_nll_backward";
  DLG_CHECK_DTYPE(op, dtype);
  if (N == 0) return DLG_OK;
  const Carve c = carve(sizeof(int64_t) * (size_t)N);
  int64_t *lab = NULL;
  DLG_TRY(stage_index(h, op, c, labels, (size_t)N, &lab));
  if (dtype == DLG_F32)
    DLG_LAUNCH(dlg_blocks(h, N, TPB), TPB, 0, h->stream, k_nll_bw<float>)(N, C, lab, (const float *)gy, gstride,
                                                                   (float)gscale, (float *)gx);
  else
    DLG_LAUNCH(dlg_blocks(h, N, TPB), TPB, 0, h->stream, k_nll_bw<double>)(N, C, lab, (const double *)gy, gstride, gscale,
                                                                    (double *)gx);
  return dlg_launched(h, op);
}

int dlg_embedding_forward(dlg_handle *h, int dtype, void *y, const void *w, int64_t s0, int64_t s1, int64_t V,
                          int64_t D, const int64_t *rows, int64_t n) {
  static const char *op = "dlg_embedding_forward";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0 || D == 0) return DLG_OK;
  const Carve c = carve(sizeof(int64_t) * (size_t)n);
  int64_t *r = NULL;
  DLG_TRY(stage_index(h, op, c, rows, (size_t)n, &r));
  const unsigned nb = dlg_blocks(h, n * D, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_gather<float>)((float *)y, (const float *)w, s0, s1, V, D, r, n);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_gather<double>)((double *)y, (const double *)w, s0, s1, V, D, r, n);
  return dlg_launched(h, op);
}

int dlg_rows_scatter(dlg_handle *h, int dtype, void *dst, int64_t nrows, int64_t D, const int64_t *key, int64_t n,
                     const void *src) {
  static const char *op = "dlg_rows_scatter";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0 || D == 0) return DLG_OK;
  std::vector<int64_t> all; // grouped by key on the host (scatter_plan)
  const int64_t ng = scatter_plan(key, n, nrows, all);
  if (ng == 0) return DLG_OK;
  const Carve c = carve(sizeof(int64_t) * all.size());
  int64_t *d = NULL;
  DLG_TRY(stage_index(h, op, c, all.data(), all.size(), &d));
  const unsigned nb = dlg_blocks(h, ng * D, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_scatter<float>)((float *)dst, D, d, d + ng, d + 2 * ng + 1, ng, (const float *)src);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_scatter<double>)((double *)dst, D, d, d + ng, d + 2 * ng + 1, ng,
                                                 (const double *)src);
  return dlg_launched(h, op);
}

int dlg_dropout(dlg_handle *h, int dtype, int64_t n, const void *x, void *y, unsigned char *mask, uint64_t key,
                uint64_t base, uint64_t thr, double scale) {
  static const char *op = "dlg_dropout";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  if (dtype == DLG_F32)
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_dropout<float>)(n, (const float *)x, (float *)y, mask, key, base,
                                                                    thr, (float)scale);
  else
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_dropout<double>)(n, (const double *)x, (double *)y, mask, key,
                                                                     base, thr, scale);
  return dlg_launched(h, op);
}

int dlg_dropout_apply(dlg_handle *h, int dtype, int64_t n, void *y, const void *x, const unsigned char *mask,
                      double scale, int accumulate) {
  static const char *op = "dlg_dropout_apply";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  if (dtype == DLG_F32)
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_dropout_apply<float>)(n, (float *)y, (const float *)x, mask,
                                                                          (float)scale, accumulate);
  else
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_dropout_apply<double>)(n, (double *)y, (const double *)x, mask,
                                                                           scale, accumulate);
  return dlg_launched(h, op);
}

int dlg_sgd_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                   void *buf, double sg, double wd, double momentum, double damp1, double lr, int first,
                   int nesterov) {
  static const char *op = "dlg_sgd_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  const int use_buf = momentum != 0;
  if (use_buf && !buf) return dlg_fail(h, DLG_ERR, "%s: momentum %g needs the momentum buffer", op, momentum);
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_sgd<float>)(n, width, r, (float *)p, (const float *)g, (float *)buf, (float)sg,
                                            (float)wd, (float)momentum, (float)damp1, (float)lr, use_buf, first,
                                            nesterov);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_sgd<double>)(n, width, r, (double *)p, (const double *)g, (double *)buf, sg, wd,
                                             momentum, damp1, lr, use_buf, first, nesterov);
  return dlg_launched(h, op);
}

int dlg_adam_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                    void *m, void *v, void *vmax, double sg, double wd, double b1, double b1c, double b2, double b2c,
                    double decay, double step_size, double bc2_sqrt, double eps) {
  static const char *op = "dlg_adam_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adam<float>)(n, width, r, (float *)p, (const float *)g, (float *)m, (float *)v,
                                             (float *)vmax, (float)sg, (float)wd, (float)b1, (float)b1c, (float)b2,
                                             (float)b2c, (float)decay, (float)step_size, (float)bc2_sqrt,
                                             (float)eps);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adam<double>)(n, width, r, (double *)p, (const double *)g, (double *)m, (double *)v,
                                              (double *)vmax, sg, wd, b1, b1c, b2, b2c, decay, step_size, bc2_sqrt,
                                              eps);
  return dlg_launched(h, op);
}

int dlg_rmsprop_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p,
                       const void *g, void *sq, void *ga, void *mb, double sg, double wd, double alpha, double alpha1,
                       double eps, double momentum, double lr) {
  static const char *op = "dlg_rmsprop_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_rmsprop<float>)(n, width, r, (float *)p, (const float *)g, (float *)sq, (float *)ga,
                                                (float *)mb, (float)sg, (float)wd, (float)alpha, (float)alpha1,
                                                (float)eps, (float)momentum, (float)lr);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_rmsprop<double>)(n, width, r, (double *)p, (const double *)g, (double *)sq,
                                                 (double *)ga, (double *)mb, sg, wd, alpha, alpha1, eps, momentum,
                                                 lr);
  return dlg_launched(h, op);
}

int dlg_adagrad_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p,
                       const void *g, void *sum, double sg, double wd, double clr, double eps) {
  static const char *op = "dlg_adagrad_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adagrad<float>)(n, width, r, (float *)p, (const float *)g, (float *)sum, (float)sg,
                                                (float)wd, (float)clr, (float)eps);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adagrad<double>)(n, width, r, (double *)p, (const double *)g, (double *)sum, sg, wd,
                                                 clr, eps);
  return dlg_launched(h, op);
}

int dlg_lion_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                    void *m, double b1, double b1c, double b2, double b2c, double lr, double decay) {
  static const char *op = "dlg_lion_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_lion<float>)(n, width, r, (float *)p, (const float *)g, (float *)m, (float)b1,
                                             (float)b1c, (float)b2, (float)b2c, (float)lr, (float)decay);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_lion<double>)(n, width, r, (double *)p, (const double *)g, (double *)m, b1, b1c, b2,
                                              b2c, lr, decay);
  return dlg_launched(h, op);
}

int dlg_clamp(dlg_handle *h, int dtype, void *x, int64_t n, double v) {
  static const char *op = "dlg_clamp";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  if (dtype == DLG_F32)
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_clamp<float>)((float *)x, n, (float)-v, (float)v);
  else
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_clamp<double>)((double *)x, n, -v, v);
  return dlg_launched(h, op);
}

int dlg_sumsq(dlg_handle *h, int dtype, const void *x, int64_t n, double *out) {
  static const char *op = "dlg_sumsq";
  DLG_CHECK_DTYPE(op, dtype);
  const Carve c = carve(sizeof(double) * (size_t)psum_blocks(h, n));
  DLG_TRY(dlg_ws(h, c.total));
  if (dtype == DLG_F32) {
    const FSq<float> f = {(const float *)x};
    return psum<double>(h, op, f, n, piece<double>(h, c, 0), out, 1.0);
  }
  const FSq<double> f = {(const double *)x};
  return psum<double>(h, op, f, n, piece<double>(h, c, 0), out, 1.0);
}

int dlg_scale(dlg_handle *h, int dtype, void *x, int64_t n, double f) {
  static const char *op = "dlg_scale";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  if (dtype == DLG_F32) DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_scale<float>)((float *)x, n, (float)f);
  else DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_scale<double>)((double *)x, n, f);
  return dlg_launched(h, op);
}

int dlg_regularize(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *g, const void *p,
                   double l1, double l2) {
  static const char *op = "dlg_regularize";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_regularize<float>)(n, width, r, (float *)g, (const float *)p, (float)l1, (float)l2);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_regularize<double>)(n, width, r, (double *)g, (const double *)p, l1, l2);
  return dlg_launched(h, op);
}

} // extern "C"
#endif // DLG_HOST_TEST
