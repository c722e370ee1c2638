// src_gpu/dnn.cu - convolution through cuDNN, pooling, batch norm, layer and
// RMS norm on the device: the ABI of include/dl/gpu/dnn.h.
//
// Why own kernels where cuDNN has a call:
//   - pooling: the CPU's max pool keeps the first maximum in scan order and
//     lets a NaN win; cuDNN documents neither, and its backward recomputes
//     the argmax instead of using the forward's. The kernels here copy the
//     CPU's loops, so values and indices agree bit for bit.
//   - batch norm: cuDNN requires eps >= CUDNN_BN_MIN_EPSILON in some
//     versions, keeps f32 statistics for f32 data, and folds the running
//     variance update into its own expression; the CPU accumulates in double
//     (two passes) and takes eps >= 0. One block per channel here does the
//     CPU's per-channel work (the plane form of ops/norm.h) in double.
// Backward passes gather (one thread per element written, sums in the CPU's
// order) instead of scattering with atomics, so they are deterministic.
// Sums reduce in double through a shared-memory tree (a different order
// from the CPU's loop: the last bits of a double sum may differ, which
// rounding to f32 almost always hides).
#include "internal.h"

#include <limits.h>
#include <math.h>

namespace {

constexpr int kThreads = 256; // every kernel here runs blocks of this size

int bad_dtype(dlg_handle *h, const char *op, int dtype) {
  return dlg_fail(h, DLG_ERR, "%s: dtype %d is not DLG_F32 (%d) or DLG_F64 (%d)", op, dtype, DLG_F32,
                  DLG_F64);
}

// Blocks for one block per item (channel, row), grid-stride beyond 2^30.
unsigned item_blocks(int64_t n) { return (unsigned)(n < (1 << 30) ? (n > 0 ? n : 1) : (1 << 30)); }

__device__ inline int64_t gtid() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ inline int64_t gstride() { return (int64_t)gridDim.x * blockDim.x; }

// Sums a and b over the block (kThreads threads); every thread gets the
// totals. sh: 2 * kThreads doubles of shared memory. All threads must call it.
__device__ void block_sum2(double &a, double &b, double *sh) {
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

// >>convolution -------------------------------------------------------------

template <class T> cudnnDataType_t dnn_type();
template <> cudnnDataType_t dnn_type<float>() { return CUDNN_DATA_FLOAT; }
template <> cudnnDataType_t dnn_type<double>() { return CUDNN_DATA_DOUBLE; }

// The descriptors of one convolution, destroyed with the struct.
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t c = nullptr;
  ConvDescs() = default;
  ConvDescs(const ConvDescs &) = delete;
  ConvDescs &operator=(const ConvDescs &) = delete;
  ~ConvDescs() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (c) cudnnDestroyConvolutionDescriptor(c);
  }
};

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// Checks g (sizes cuDNN can take, consistent groups) and makes the
// descriptors. Math: f32 FMA only (CUDNN_FMA_MATH: no TF32 tensor cores,
// whose 10-bit mantissa products would leave the CPU's 1e-4 tolerance);
// f64 cuDNN's default (double tensor cores, where used, are exact IEEE FMA).
template <class T> int conv_descs(dlg_handle *h, const char *op, const dlg_conv2d *g, ConvDescs *d) {
  const cudnnDataType_t dt = dnn_type<T>();
  int rc, n, c, hh, ww;
  if (!(g->sh >= 1 && g->sw >= 1 && g->dh >= 1 && g->dw >= 1 && g->G >= 1 && g->ph >= 0 && g->pw >= 0 &&
        g->kh >= 1 && g->kw >= 1 && g->C % g->G == 0 && g->O % g->G == 0))
    return dlg_fail(h, DLG_ERR, "%s: bad geometry (kernel %lldx%lld, stride %lldx%lld, dilation %lldx%lld, "
                    "padding %lldx%lld, C %lld, O %lld, groups %lld)", op, (long long)g->kh, (long long)g->kw,
                    (long long)g->sh, (long long)g->sw, (long long)g->dh, (long long)g->dw, (long long)g->ph,
                    (long long)g->pw, (long long)g->C, (long long)g->O, (long long)g->G);
  {
    const int64_t v[] = {g->N, g->C, g->H, g->W, g->O, g->kh, g->kw, g->Ho, g->Wo, g->sh, g->sw, g->ph, g->pw,
                         g->dh, g->dw, g->G};
    bool ok = true;
    for (int64_t e : v) ok = ok && fits_int(e);
    // every tensor below 2^31 elements (cuDNN's strides are int)
    ok = ok && (double)g->N * g->C * g->H * g->W <= INT_MAX && (double)g->N * g->O * g->Ho * g->Wo <= INT_MAX &&
         (double)g->O * (g->C / g->G) * g->kh * g->kw <= INT_MAX;
    if (!ok)
      return dlg_fail(h, DLG_ERR, "%s: x [%lld, %lld, %lld, %lld] or y [%lld, %lld, %lld, %lld] too large for "
                      "cuDNN (2^31 elements per tensor)", op, (long long)g->N, (long long)g->C, (long long)g->H,
                      (long long)g->W, (long long)g->N, (long long)g->O, (long long)g->Ho, (long long)g->Wo);
  }
  if ((rc = dlg_dnn(h, cudnnSetStream(h->dnn, h->stream), op)) != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnCreateTensorDescriptor(&d->x), op)) != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnCreateTensorDescriptor(&d->y), op)) != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnCreateFilterDescriptor(&d->w), op)) != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnCreateConvolutionDescriptor(&d->c), op)) != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, dt, (int)g->N, (int)g->C, (int)g->H,
                                             (int)g->W), op);
  if (rc != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, dt, (int)g->N, (int)g->O, (int)g->Ho,
                                             (int)g->Wo), op);
  if (rc != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetFilter4dDescriptor(d->w, dt, CUDNN_TENSOR_NCHW, (int)g->O, (int)(g->C / g->G),
                                             (int)g->kh, (int)g->kw), op);
  if (rc != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetConvolution2dDescriptor(d->c, (int)g->ph, (int)g->pw, (int)g->sh, (int)g->sw,
                                                  (int)g->dh, (int)g->dw, CUDNN_CROSS_CORRELATION, dt), op);
  if (rc != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnSetConvolutionGroupCount(d->c, (int)g->G), op)) != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetConvolutionMathType(d->c, dt == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH),
               op);
  if (rc != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnGetConvolution2dForwardOutputDim(d->c, d->x, d->w, &n, &c, &hh, &ww), op);
  if (rc != DLG_OK) return rc;
  if (n != g->N || c != g->O || hh != g->Ho || ww != g->Wo)
    return dlg_fail(h, DLG_ERR, "%s: cuDNN's output [%d, %d, %d, %d] is not y [%lld, %lld, %lld, %lld]", op, n, c,
                    hh, ww, (long long)g->N, (long long)g->O, (long long)g->Ho, (long long)g->Wo);
  return DLG_OK;
}

// Whether an algorithm computes the plain sum of products (GEMM-like or
// direct): FFT and Winograd transforms round differently and are tried
// only when nothing else runs.
bool exact_algo(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
bool exact_algo(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool exact_algo(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// Runs one convolution pass, trying cuDNN's heuristic candidates (perf[0..n),
// best first) in this order: exact and deterministic, exact, the rest;
// never with down-conversion, f32 never on tensor-op math (TF32).
// Workspace from dlg_ws: first among the candidates needing at most
// max(current workspace, 256 MiB), then any.
// size(algo, &bytes) and run(algo, ws, bytes) return cuDNN statuses; a
// candidate that cuDNN refuses (NOT_SUPPORTED, BAD_PARAM) or whose
// workspace does not fit is skipped.
template <class Perf, class SizeFn, class RunFn>
int conv_try(dlg_handle *h, const char *op, bool f32, cudnnConvolutionDescriptor_t cd, const Perf *perf, int n,
             SizeFn size, RunFn run) {
  const size_t cap = h->ws_bytes > ((size_t)256 << 20) ? h->ws_bytes : ((size_t)256 << 20);
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  int rc;
  for (int sweep = 0; sweep < 2; sweep++)
    for (int rank = 0; rank < 3; rank++)
      for (int i = 0; i < n; i++) {
        const Perf &p = perf[i];
        const bool exact = exact_algo(p.algo), det = p.determinism == CUDNN_DETERMINISTIC;
        const int r = !exact ? 2 : det ? 0 : 1;
        size_t need = 0;
        cudnnStatus_t st;
        if (r != rank || p.status != CUDNN_STATUS_SUCCESS) continue;
        if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || (f32 && p.mathType == CUDNN_TENSOR_OP_MATH))
          continue; // no down-conversion; no TF32 for f32
        if (!f32 && (rc = dlg_dnn(h, cudnnSetConvolutionMathType(cd, p.mathType), op)) != DLG_OK) return rc;
        st = size(p.algo, &need);
        if (st != CUDNN_STATUS_SUCCESS) {
          last = st;
          continue;
        }
        if ((sweep == 0) != (need <= cap)) continue;
        if (need > 0 && dlg_ws(h, need) != DLG_OK) continue; // out of memory: one needing less may run
        st = run(p.algo, need > 0 ? h->ws : nullptr, need);
        if (st == CUDNN_STATUS_SUCCESS) return DLG_OK;
        if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED ||
            CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_BAD_PARAM) {
          last = st;
          continue;
        }
        return dlg_dnn(h, st, op);
      }
  return dlg_fail(h, DLG_ERR, "%s: no cuDNN algorithm ran (last: cuDNN error %d, %s)", op, (int)last,
                  cudnnGetErrorString(last));
}

// y[n, o, p] = (acc ? y : 0) + b[o] over y [N, O, P] (C == 0) or y += b[o].
template <class T> __global__ void conv_bias_k(int64_t total, int64_t O, int64_t P, const T *b, T *y, int keep) {
  for (int64_t e = gtid(); e < total; e += gstride()) {
    const int64_t o = (e / P) % O;
    y[e] = keep ? y[e] + b[o] : b[o];
  }
}
// gb[o] += sum over n, p of gy[n, o, p], in double (one block per channel).
template <class T, class Red>
__host__ __device__ void conv_bias_grad_at(const Red &rd, int64_t N, int64_t O, int64_t P, const T *gy, T *gb,
                                           int64_t o) {
  double s = 0, z = 0;
  for (int64_t e = rd.tid(); e < N * P; e += Red::nt) {
    const int64_t n = e / P, p = e - n * P;
    s += (double)gy[(n * O + o) * P + p];
  }
  rd.sum2(s, z);
  if (rd.lead()) gb[o] += (T)s;
}
template <class T> __global__ void conv_bias_grad_k(int64_t N, int64_t O, int64_t P, const T *gy, T *gb) {
  __shared__ double sh[2 * kThreads];
  const BlockRed rd{sh};
  for (int64_t o = blockIdx.x; o < O; o += gridDim.x) conv_bias_grad_at<T>(rd, N, O, P, gy, gb, o);
}

template <class T>
int conv_fwd(dlg_handle *h, const dlg_conv2d *g, const void *xv, const void *wv, const void *bv, void *yv, int acc) {
  const char *op = "dlg_conv2d_fwd";
  const int64_t ny = g->N * g->O * g->Ho * g->Wo;
  T *y = (T *)yv;
  const T *b = (const T *)bv;
  int rc;
  if (ny <= 0) return DLG_OK;
  if (g->C == 0) { // no input channels: y is the bias (or zero)
    if (b) {
      DLG_LAUNCH(dlg_blocks(h, ny, kThreads), kThreads, 0, h->stream, conv_bias_k<T>)(ny, g->O, g->Ho * g->Wo, b, y, acc);
      return dlg_launched(h, op);
    }
    return acc ? DLG_OK : dlg_cuda(h, cudaMemsetAsync(y, 0, (size_t)ny * sizeof(T), h->stream), op);
  }
  {
    ConvDescs d;
    const T one = 1, beta = acc ? 1 : 0;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    if ((rc = conv_descs<T>(h, op, g, &d)) != DLG_OK) return rc;
    rc = dlg_dnn(h, cudnnGetConvolutionForwardAlgorithm_v7(h->dnn, d.x, d.w, d.c, d.y,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf), op);
    if (rc != DLG_OK) return rc;
    rc = conv_try(h, op, sizeof(T) == 4, d.c, perf, n,
                  [&](cudnnConvolutionFwdAlgo_t a, size_t *bytes) {
                    return cudnnGetConvolutionForwardWorkspaceSize(h->dnn, d.x, d.w, d.c, d.y, a, bytes);
                  },
                  [&](cudnnConvolutionFwdAlgo_t a, void *ws, size_t bytes) {
                    return cudnnConvolutionForward(h->dnn, &one, d.x, xv, d.w, wv, d.c, a, ws, bytes, &beta, d.y,
                                                   yv);
                  });
    if (rc != DLG_OK) return rc;
  }
  if (b) {
    DLG_LAUNCH(dlg_blocks(h, ny, kThreads), kThreads, 0, h->stream, conv_bias_k<T>)(ny, g->O, g->Ho * g->Wo, b, y, 1);
    return dlg_launched(h, op);
  }
  return DLG_OK;
}

template <class T>
int conv_bwd(dlg_handle *h, const dlg_conv2d *g, const void *xv, const void *wv, const void *gyv, void *gxv,
             void *gwv, void *gbv) {
  const char *op = "dlg_conv2d_bwd";
  const int64_t P = g->Ho * g->Wo;
  int rc;
  if (gbv && g->O > 0) { // before cuDNN's passes: the same order as the CPU
    DLG_LAUNCH(item_blocks(g->O), kThreads, 0, h->stream, conv_bias_grad_k<T>)(g->N, g->O, P, (const T *)gyv, (T *)gbv);
    if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
  }
  // nothing flows when x, w or gy is empty
  if ((!gxv && !gwv) || g->N == 0 || g->C == 0 || g->O == 0 || P == 0 || g->H == 0 || g->W == 0) return DLG_OK;
  {
    ConvDescs d;
    const T one = 1;
    if ((rc = conv_descs<T>(h, op, g, &d)) != DLG_OK) return rc;
    if (gxv) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      int n = 0;
      rc = dlg_dnn(h, cudnnGetConvolutionBackwardDataAlgorithm_v7(h->dnn, d.w, d.y, d.c, d.x,
                                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
                   op);
      if (rc != DLG_OK) return rc;
      rc = conv_try(h, op, sizeof(T) == 4, d.c, perf, n,
                    [&](cudnnConvolutionBwdDataAlgo_t a, size_t *bytes) {
                      return cudnnGetConvolutionBackwardDataWorkspaceSize(h->dnn, d.w, d.y, d.c, d.x, a, bytes);
                    },
                    [&](cudnnConvolutionBwdDataAlgo_t a, void *ws, size_t bytes) {
                      // beta = 1: gx += ...
                      return cudnnConvolutionBackwardData(h->dnn, &one, d.w, wv, d.y, gyv, d.c, a, ws, bytes, &one,
                                                          d.x, gxv);
                    });
      if (rc != DLG_OK) return rc;
    }
    if (gwv) {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int n = 0;
      rc = dlg_dnn(h, cudnnGetConvolutionBackwardFilterAlgorithm_v7(h->dnn, d.x, d.y, d.c, d.w,
                                                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
                                                                    perf),
                   op);
      if (rc != DLG_OK) return rc;
      rc = conv_try(h, op, sizeof(T) == 4, d.c, perf, n,
                    [&](cudnnConvolutionBwdFilterAlgo_t a, size_t *bytes) {
                      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h->dnn, d.x, d.y, d.c, d.w, a, bytes);
                    },
                    [&](cudnnConvolutionBwdFilterAlgo_t a, void *ws, size_t bytes) {
                      // beta = 1: gw += ...
                      return cudnnConvolutionBackwardFilter(h->dnn, &one, d.x, xv, d.y, gyv, d.c, a, ws, bytes,
                                                            &one, d.w, gwv);
                    });
      if (rc != DLG_OK) return rc;
    }
  }
  return DLG_OK;
}

// >>pooling -------------------------------------------------------------------
// Copies of ops/conv.h's DL__POOL_KERNELS, one thread per element written.

// Each body below is the work of one element e (host and device, so that
// it can be checked against the CPU's loops without a GPU).
template <class T>
__host__ __device__ inline void maxpool_fwd_at(const dlg_pool2d &g, const T *x, T *y, int32_t *idx, int64_t e) {
  const int64_t ow = e % g.Wo, t = e / g.Wo, oh = t % g.Ho, pl = t / g.Ho;
  const T *xp = x + pl * g.H * g.W;
  int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  const int64_t he = hs + g.kh < g.H ? hs + g.kh : g.H;
  const int64_t we = ws + g.kw < g.W ? ws + g.kw : g.W;
  T m = -(T)INFINITY;
  int64_t at;
  if (hs < 0) hs = 0;
  if (ws < 0) ws = 0;
  at = hs * g.W + ws;
  for (int64_t ih = hs; ih < he; ih++)
    for (int64_t iw = ws; iw < we; iw++) {
      const T v = xp[ih * g.W + iw];
      if (v > m || v != v) {
        m = v;
        at = ih * g.W + iw;
      }
    }
  y[e] = m;
  if (idx) idx[e] = (int32_t)at;
}

// The outputs [*lo, *hi] (inclusive; empty when lo > hi) along one axis whose
// window [o s - p, o s - p + k) holds input position i; n outputs.
__host__ __device__ inline void pool_range(int64_t i, int64_t k, int64_t s, int64_t p, int64_t n, int64_t *lo,
                                           int64_t *hi) {
  const int64_t a = i + p - k + 1; // o s >= a
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  *hi = (i + p) / s;               // o s <= i + p (i + p >= 0)
  if (*hi > n - 1) *hi = n - 1;
}

// gx[pl, ih, iw] += gy[pl, oh, ow] for every output whose idx is (ih, iw),
// in (oh, ow) order, as the CPU's loop over k adds them (e indexes gx).
template <class T>
__host__ __device__ inline void maxpool_bwd_at(const dlg_pool2d &g, const T *gy, const int32_t *idx, T *gx,
                                               int64_t e) {
  const int64_t iw = e % g.W, t = e / g.W, ih = t % g.H, pl = t / g.H;
  const int64_t pos = ih * g.W + iw;
  int64_t hlo, hhi, wlo, whi;
  T v = gx[e];
  bool hit = false;
  pool_range(ih, g.kh, g.sh, g.ph, g.Ho, &hlo, &hhi);
  pool_range(iw, g.kw, g.sw, g.pw, g.Wo, &wlo, &whi);
  for (int64_t oh = hlo; oh <= hhi; oh++)
    for (int64_t ow = wlo; ow <= whi; ow++) {
      const int64_t k = (pl * g.Ho + oh) * g.Wo + ow;
      if (idx[k] == pos) {
        v += gy[k];
        hit = true;
      }
    }
  if (hit) gx[e] = v;
}

template <class T>
__host__ __device__ inline void maxpool_tan_at(const dlg_pool2d &g, const T *tx, const int32_t *idx, T *ty,
                                               int64_t e) {
  const int64_t pl = e / (g.Ho * g.Wo);
  ty[e] = tx[pl * g.H * g.W + idx[e]];
}

template <class T> __host__ __device__ inline void avgpool_fwd_at(const dlg_pool2d &g, const T *x, T *y, int64_t e) {
  const int64_t ow = e % g.Wo, t = e / g.Wo, oh = t % g.Ho, pl = t / g.Ho;
  const T *xp = x + pl * g.H * g.W;
  int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw, cnt;
  const int64_t he = hs + g.kh < g.H ? hs + g.kh : g.H;
  const int64_t we = ws + g.kw < g.W ? ws + g.kw : g.W;
  T s = 0;
  if (hs < 0) hs = 0;
  if (ws < 0) ws = 0;
  cnt = g.excl ? (he - hs) * (we - ws) : g.kh * g.kw;
  for (int64_t ih = hs; ih < he; ih++)
    for (int64_t iw = ws; iw < we; iw++) s += xp[ih * g.W + iw];
  y[e] = cnt > 0 ? s / (T)cnt : (T)0;
}

// gx[pl, ih, iw] += gy[pl, oh, ow] / count for every window holding (ih, iw),
// in (oh, ow) order, as the CPU adds them (e indexes gx).
template <class T> __host__ __device__ inline void avgpool_bwd_at(const dlg_pool2d &g, const T *gy, T *gx, int64_t e) {
  const int64_t iw = e % g.W, t = e / g.W, ih = t % g.H, pl = t / g.H;
  int64_t hlo, hhi, wlo, whi;
  T v = gx[e];
  bool hit = false;
  pool_range(ih, g.kh, g.sh, g.ph, g.Ho, &hlo, &hhi);
  pool_range(iw, g.kw, g.sw, g.pw, g.Wo, &wlo, &whi);
  for (int64_t oh = hlo; oh <= hhi; oh++)
    for (int64_t ow = wlo; ow <= whi; ow++) {
      int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw, cnt;
      const int64_t he = hs + g.kh < g.H ? hs + g.kh : g.H;
      const int64_t we = ws + g.kw < g.W ? ws + g.kw : g.W;
      if (hs < 0) hs = 0;
      if (ws < 0) ws = 0;
      cnt = g.excl ? (he - hs) * (we - ws) : g.kh * g.kw;
      if (cnt <= 0) continue;
      v += gy[(pl * g.Ho + oh) * g.Wo + ow] / (T)cnt;
      hit = true;
    }
  if (hit) gx[e] = v;
}

enum { kMaxFwd, kMaxBwd, kMaxTan, kAvgFwd, kAvgBwd };

// One thread per element written: y (forward kinds) or gx (backward kinds).
template <class T>
__global__ void pool_k(int kind, dlg_pool2d g, const T *in, T *out, const int32_t *cidx, int32_t *idx, int64_t total) {
  for (int64_t e = gtid(); e < total; e += gstride()) {
    switch (kind) {
      case kMaxFwd: maxpool_fwd_at(g, in, out, idx, e); break;
      case kMaxBwd: maxpool_bwd_at(g, in, cidx, out, e); break;
      case kMaxTan: maxpool_tan_at(g, in, cidx, out, e); break;
      case kAvgFwd: avgpool_fwd_at(g, in, out, e); break;
      default: avgpool_bwd_at(g, in, out, e); break;
    }
  }
}

int pool_check(dlg_handle *h, const char *op, const dlg_pool2d *g) {
  if (g->N < 0 || g->C < 0 || g->H < 0 || g->W < 0 || g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 ||
      g->ph < 0 || g->pw < 0 || g->Ho < 0 || g->Wo < 0 || g->H * g->W > INT32_MAX)
    return dlg_fail(h, DLG_ERR, "%s: bad window (kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld) or "
                    "input [%lld, %lld, %lld, %lld]", op, (long long)g->kh, (long long)g->kw, (long long)g->sh,
                    (long long)g->sw, (long long)g->ph, (long long)g->pw, (long long)g->N, (long long)g->C,
                    (long long)g->H, (long long)g->W);
  return DLG_OK;
}

template <class T> int pool_run(dlg_handle *h, const char *op, int kind, const dlg_pool2d *g, const void *in,
                                void *out, const int32_t *cidx, int32_t *idx) {
  const int bwd = kind == kMaxBwd || kind == kAvgBwd;
  const int64_t total = g->N * g->C * (bwd ? g->H * g->W : g->Ho * g->Wo);
  const unsigned nb = dlg_blocks(h, total, kThreads);
  int rc;
  if ((rc = pool_check(h, op, g)) != DLG_OK) return rc;
  if (total <= 0 || g->Ho * g->Wo <= 0) return DLG_OK;
  DLG_LAUNCH(nb, kThreads, 0, h->stream, pool_k<T>)(kind, *g, (const T *)in, (T *)out, cidx, idx, total);
  return dlg_launched(h, op);
}

int pool_any(dlg_handle *h, const char *op, int dtype, int kind, const dlg_pool2d *g, const void *in, void *out,
             const int32_t *cidx, int32_t *idx) {
  if (dtype == DLG_F32) return pool_run<float>(h, op, kind, g, in, out, cidx, idx);
  if (dtype == DLG_F64) return pool_run<double>(h, op, kind, g, in, out, cidx, idx);
  return bad_dtype(h, op, dtype);
}

// >>batch norm ------------------------------------------------------------------
// ops/norm.h's plane form: per channel c (one block), the statistics or the
// sums, then the constants k1, k2, k3 (dl__bn_consts), then one map pass
//   out = (or +=, BWD) k1 v + (x - mu) k2 + k3      (v = tx, gy, or x).

enum { kFwd, kTan, kBwd };

// The CPU's dl__bn_consts for channel c from the sums s0, s1 (m values);
// BWD also adds is s1 to gw[c] and s0 to gb[c].
template <class T>
__host__ __device__ void bn_consts(int mode, const dlg_bn &p, int64_t c, bool has_v, double s0, double s1, double w,
                                   const T *tw, const T *tb, T *gw, T *gb, double *k) {
  const double m = (double)(p.N * p.S), is = p.stats[p.C + c];
  double k1, k2, k3;
  if (mode == kFwd) {
    k1 = 0;
    k2 = is * w;
    k3 = p.b ? (double)((const T *)p.b)[c * p.bs] : 0.0;
  } else if (mode == kTan) {
    const double a0 = p.batch && has_v ? s0 : 0.0, a1 = p.batch && has_v ? s1 : 0.0;
    const double twc = tw ? (double)tw[c] : 0.0, tbc = tb ? (double)tb[c] : 0.0;
    k1 = has_v ? w * is : 0.0;
    k2 = is * (twc - k1 * is * a1 / m);
    k3 = tbc - k1 * a0 / m;
  } else {
    if (gw) gw[c] += (T)(is * s1);
    if (gb) gb[c] += (T)s0;
    k1 = w * is;
    k2 = p.batch ? -k1 * is * is * s1 / m : 0.0;
    k3 = p.batch ? -k1 * s0 / m : 0.0;
  }
  k[c] = k1;
  k[p.C + c] = k2;
  k[2 * p.C + c] = k3;
}

// Channel c: FWD statistics (batch: two passes over x; else from the running
// statistics) and the running update; TAN / BWD sums of v and v (x - mu)
// when needed; then the constants into k [3, C].
template <class T, class Red>
__host__ __device__ void bn_chan_at(const Red &rd, int mode, const dlg_bn &p, const T *x, const T *v, const T *tw,
                                    const T *tb, T *gw, T *gb, double *k, int64_t c) {
  const int64_t C = p.C, S = p.S, mn = p.N * S;
  const double m = (double)mn;
  const double w = p.w ? (double)((const T *)p.w)[c * p.ws] : 1.0;
  double s0 = 0, s1 = 0;
  if (mode == kFwd && p.batch) {
    double mu, z = 0;
    for (int64_t e = rd.tid(); e < mn; e += Red::nt) {
      const int64_t n = e / S, s = e - n * S;
      s0 += (double)x[(n * C + c) * S + s];
    }
    rd.sum2(s0, z);
    mu = s0 / m;
    s0 = 0;
    z = 0;
    for (int64_t e = rd.tid(); e < mn; e += Red::nt) {
      const int64_t n = e / S, s = e - n * S;
      s0 += ((double)x[(n * C + c) * S + s] - mu) * ((double)x[(n * C + c) * S + s] - mu);
    }
    rd.sum2(s0, z);
    if (rd.lead()) {
      p.stats[c] = mu;
      p.stats[C + c] = 1.0 / sqrt(s0 / m + p.eps);
      if (p.update) {
        T *rm = (T *)p.rmean + c * p.rms, *rv = (T *)p.rvar + c * p.rvs;
        *rm = (T)((1 - p.momentum) * (double)*rm + p.momentum * mu);
        *rv = (T)((1 - p.momentum) * (double)*rv + p.momentum * (s0 / m) * m / (m - 1));
      }
    }
    s0 = 0;
  } else if (mode == kFwd) {
    if (rd.lead()) {
      p.stats[c] = (double)((const T *)p.rmean)[c * p.rms];
      p.stats[C + c] = 1.0 / sqrt((double)((const T *)p.rvar)[c * p.rvs] + p.eps);
    }
  } else if ((mode == kTan && p.batch && v) || (mode == kBwd && (p.batch || gw || gb))) {
    const double mu = p.stats[c];
    for (int64_t e = rd.tid(); e < mn; e += Red::nt) {
      const int64_t n = e / S, s = e - n * S, i = (n * C + c) * S + s;
      s0 += (double)v[i];
      s1 += (double)v[i] * ((double)x[i] - mu);
    }
    rd.sum2(s0, s1);
  }
  if (rd.lead()) bn_consts<T>(mode, p, c, v != nullptr, s0, s1, w, tw, tb, gw, gb, k);
}
template <class T>
__global__ void bn_chan_k(int mode, dlg_bn p, const T *x, const T *v, const T *tw, const T *tb, T *gw, T *gb,
                          double *k) {
  __shared__ double sh[2 * kThreads];
  const BlockRed rd{sh};
  for (int64_t c = blockIdx.x; c < p.C; c += gridDim.x) bn_chan_at<T>(rd, mode, p, x, v, tw, tb, gw, gb, k, c);
}

// Element e of [N, C, S]: out = (acc: +=) k1 v + (x - mu) k2 + k3.
template <class T>
__host__ __device__ inline void bn_map_at(int acc, int64_t C, int64_t S, const T *x, const T *v, const double *mean,
                                          const double *k, T *out, int64_t e) {
  const int64_t c = (e / S) % C;
  const double r = k[c] * (double)v[e] + ((double)x[e] - mean[c]) * k[C + c] + k[2 * C + c];
  if (acc) out[e] += (T)r;
  else out[e] = (T)r;
}
template <class T>
__global__ void bn_map_k(int acc, int64_t total, int64_t C, int64_t S, const T *x, const T *v, const double *mean,
                         const double *k, T *out) {
  for (int64_t e = gtid(); e < total; e += gstride()) bn_map_at(acc, C, S, x, v, mean, k, out, e);
}

template <class T>
int bn_run(dlg_handle *h, const char *op, int mode, const dlg_bn *p, const void *xv, const void *vv, const void *tw,
           const void *tb, void *outv, void *gw, void *gb) {
  const int64_t total = p->N * p->C * p->S;
  double *k;
  int rc;
  if (p->N < 0 || p->C < 0 || p->S < 0)
    return dlg_fail(h, DLG_ERR, "%s: bad sizes [%lld, %lld, %lld]", op, (long long)p->N, (long long)p->C,
                    (long long)p->S);
  if (p->C == 0) return DLG_OK;
  if (!p->stats || (mode == kFwd && (!p->batch || p->update) && (!p->rmean || !p->rvar)))
    return dlg_fail(h, DLG_ERR, "%s: no stats, or running statistics missing (x [%lld, %lld, %lld])", op,
                    (long long)p->N, (long long)p->C, (long long)p->S);
  if ((rc = dlg_ws(h, sizeof(double) * 3 * (size_t)p->C)) != DLG_OK) return rc;
  k = (double *)h->ws;
  DLG_LAUNCH(item_blocks(p->C), kThreads, 0, h->stream, bn_chan_k<T>)(mode, *p, (const T *)xv, (const T *)vv,
                                                              (const T *)tw, (const T *)tb, (T *)gw, (T *)gb, k);
  if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
  if (!outv || total <= 0) return DLG_OK;
  DLG_LAUNCH(dlg_blocks(h, total, kThreads), kThreads, 0, h->stream, bn_map_k<T>)(
      mode == kBwd, total, p->C, p->S, (const T *)xv, (const T *)(vv ? vv : xv), p->stats, k, (T *)outv);
  return dlg_launched(h, op);
}

int bn_any(dlg_handle *h, const char *op, int dtype, int mode, const dlg_bn *p, const void *x, const void *v,
           const void *tw, const void *tb, void *out, void *gw, void *gb) {
  if (dtype == DLG_F32) return bn_run<float>(h, op, mode, p, x, v, tw, tb, out, gw, gb);
  if (dtype == DLG_F64) return bn_run<double>(h, op, mode, p, x, v, tw, tb, out, gw, gb);
  return bad_dtype(h, op, dtype);
}

// >>layer norm, rms norm ----------------------------------------------------------
// ops/norm.h's DL__LN_KERNEL, one block per row r: FWD writes y and the
// row's stats, TAN ty, BWD gx (+=).
template <class T, class Red>
__host__ __device__ void ln_row_at(const Red &rd, int mode, const dlg_ln &p, const T *x, const T *v, const T *tw,
                                   const T *tb, T *out, int64_t r) {
  const int64_t R = p.R, D = p.D;
  const double dD = (double)D;
  const T *w = (const T *)p.w, *b = (const T *)p.b;
  const T *xr = x + r * D;
  T *o = out + r * D;
  if (mode == kFwd) {
    double mu = 0, a = 0, z = 0, is;
    if (p.center) {
      for (int64_t j = rd.tid(); j < D; j += Red::nt) a += (double)xr[j];
      rd.sum2(a, z);
      mu = a / dD;
      a = 0;
      z = 0;
    }
    for (int64_t j = rd.tid(); j < D; j += Red::nt) a += ((double)xr[j] - mu) * ((double)xr[j] - mu);
    rd.sum2(a, z);
    is = 1.0 / sqrt(a / dD + p.eps);
    if (rd.lead()) {
      p.stats[r] = mu;
      p.stats[R + r] = is;
    }
    for (int64_t j = rd.tid(); j < D; j += Red::nt)
      o[j] = (T)(((double)xr[j] - mu) * is * (w ? (double)w[j] : 1.0) + (b ? (double)b[j] : 0.0));
  } else if (mode == kTan) {
    const double mu = p.stats[r], is = p.stats[R + r];
    const T *vr = v ? v + r * D : xr;
    const double k1 = v ? is : 0.0;
    double s0 = 0, s1 = 0, k2, k3;
    if (v) {
      for (int64_t j = rd.tid(); j < D; j += Red::nt) {
        s0 += (double)vr[j];
        s1 += (double)vr[j] * ((double)xr[j] - mu);
      }
      rd.sum2(s0, s1);
    }
    k2 = -is * is * is * s1 / dD;
    k3 = p.center ? -is * s0 / dD : 0.0;
    for (int64_t j = rd.tid(); j < D; j += Red::nt) {
      const double xm = (double)xr[j] - mu;
      const double wj = w ? (double)w[j] : 1.0, twj = tw ? (double)tw[j] : 0.0, tbj = tb ? (double)tb[j] : 0.0;
      o[j] = (T)(wj * (k1 * (double)vr[j] + xm * k2 + k3) + xm * is * twj + tbj);
    }
  } else {
    const double mu = p.stats[r], is = p.stats[R + r];
    const T *gr = v + r * D;
    double s0 = 0, s1 = 0, k2, k3;
    for (int64_t j = rd.tid(); j < D; j += Red::nt) {
      const double u = (double)gr[j] * (w ? (double)w[j] : 1.0);
      s0 += u;
      s1 += u * ((double)xr[j] - mu);
    }
    rd.sum2(s0, s1);
    k2 = -is * is * is * s1 / dD;
    k3 = p.center ? -is * s0 / dD : 0.0;
    for (int64_t j = rd.tid(); j < D; j += Red::nt)
      o[j] += (T)(is * (double)gr[j] * (w ? (double)w[j] : 1.0) + ((double)xr[j] - mu) * k2 + k3);
  }
}
template <class T>
__global__ void ln_row_k(int mode, dlg_ln p, const T *x, const T *v, const T *tw, const T *tb, T *out) {
  __shared__ double sh[2 * kThreads];
  const BlockRed rd{sh};
  for (int64_t r = blockIdx.x; r < p.R; r += gridDim.x) ln_row_at<T>(rd, mode, p, x, v, tw, tb, out, r);
}

// Column j of the rows [ch rpc, + rpc): part[ch, 0, j] = sum of gy (x - mu) is,
// part[ch, 1, j] = sum of gy.
template <class T>
__host__ __device__ inline void ln_colpart_at(const dlg_ln &p, const T *x, const T *gy, int64_t rpc, double *part,
                                              int64_t ch, int64_t j) {
  const int64_t R = p.R, D = p.D, r0 = ch * rpc, r1 = R - r0 < rpc ? R : r0 + rpc;
  double sw = 0, sb = 0;
  for (int64_t r = r0; r < r1; r++) {
    sw += (double)gy[r * D + j] * ((double)x[r * D + j] - p.stats[r]) * p.stats[R + r];
    sb += (double)gy[r * D + j];
  }
  part[ch * 2 * D + j] = sw;
  part[ch * 2 * D + D + j] = sb;
}
// Grid: x over the columns, y the chunk.
template <class T> __global__ void ln_colpart_k(dlg_ln p, const T *x, const T *gy, int64_t rpc, double *part) {
  for (int64_t j = gtid(); j < p.D; j += gstride()) ln_colpart_at(p, x, gy, rpc, part, (int64_t)blockIdx.y, j);
}
// gw[j] += the chunks' sums in chunk order, gb likewise.
template <class T>
__host__ __device__ inline void ln_colsum_at(int64_t D, int64_t nch, const double *part, T *gw, T *gb, int64_t j) {
  double sw = 0, sb = 0;
  for (int64_t c = 0; c < nch; c++) {
    sw += part[c * 2 * D + j];
    sb += part[c * 2 * D + D + j];
  }
  if (gw) gw[j] += (T)sw;
  if (gb) gb[j] += (T)sb;
}
template <class T> __global__ void ln_colsum_k(int64_t D, int64_t nch, const double *part, T *gw, T *gb) {
  for (int64_t j = gtid(); j < D; j += gstride()) ln_colsum_at(D, nch, part, gw, gb, j);
}

// Row chunks of the weight and bias gradient: at least 16 rows, at most 256 chunks.
inline void ln_chunks(int64_t R, int64_t *nch, int64_t *rpc) {
  int64_t n = (R + 15) / 16;
  if (n > 256) n = 256;
  if (n < 1) n = 1;
  *rpc = (R + n - 1) / n;
  *nch = (R + *rpc - 1) / *rpc;
}

template <class T>
int ln_run(dlg_handle *h, const char *op, int mode, const dlg_ln *p, const void *xv, const void *vv, const void *tw,
           const void *tb, void *outv, void *gw, void *gb) {
  int rc;
  if (p->R < 0 || p->D < 0)
    return dlg_fail(h, DLG_ERR, "%s: bad sizes [%lld, %lld]", op, (long long)p->R, (long long)p->D);
  if (p->R == 0) return DLG_OK;
  if (!p->stats) return dlg_fail(h, DLG_ERR, "%s: no stats (x [%lld, %lld])", op, (long long)p->R, (long long)p->D);
  if (outv) {
    DLG_LAUNCH(item_blocks(p->R), kThreads, 0, h->stream, ln_row_k<T>)(mode, *p, (const T *)xv, (const T *)vv,
                                                               (const T *)tw, (const T *)tb, (T *)outv);
    if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
  }
  if (mode == kBwd && (gw || gb) && p->D > 0) {
    int64_t nch, rpc;
    double *part;
    ln_chunks(p->R, &nch, &rpc);
    if ((rc = dlg_ws(h, sizeof(double) * 2 * (size_t)p->D * (size_t)nch)) != DLG_OK) return rc;
    part = (double *)h->ws;
    {
      const int64_t bx = (p->D + kThreads - 1) / kThreads;
      const dim3 grid((unsigned)(bx < 65535 ? bx : 65535), (unsigned)nch);
      DLG_LAUNCH(grid, kThreads, 0, h->stream, ln_colpart_k<T>)(*p, (const T *)xv, (const T *)vv, rpc, part);
      if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
    }
    DLG_LAUNCH(dlg_blocks(h, p->D, kThreads), kThreads, 0, h->stream, ln_colsum_k<T>)(p->D, nch, part, (T *)gw, (T *)gb);
    if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
  }
  return DLG_OK;
}

int ln_any(dlg_handle *h, const char *op, int dtype, int mode, const dlg_ln *p, const void *x, const void *v,
           const void *tw, const void *tb, void *out, void *gw, void *gb) {
  if (dtype == DLG_F32) return ln_run<float>(h, op, mode, p, x, v, tw, tb, out, gw, gb);
  if (dtype == DLG_F64) return ln_run<double>(h, op, mode, p, x, v, tw, tb, out, gw, gb);
  return bad_dtype(h, op, dtype);
}

} // namespace

// >>the ABI ---------------------------------------------------------------------

extern "C" int dlg_conv2d_fwd(dlg_handle *h, int dtype, const dlg_conv2d *g, const void *x, const void *w,
                              const void *b, void *y, int acc) {
  if (dtype == DLG_F32) return conv_fwd<float>(h, g, x, w, b, y, acc);
  if (dtype == DLG_F64) return conv_fwd<double>(h, g, x, w, b, y, acc);
  return bad_dtype(h, "dlg_conv2d_fwd", dtype);
}
extern "C" int dlg_conv2d_bwd(dlg_handle *h, int dtype, const dlg_conv2d *g, const void *x, const void *w,
                              const void *gy, void *gx, void *gw, void *gb) {
  if (dtype == DLG_F32) return conv_bwd<float>(h, g, x, w, gy, gx, gw, gb);
  if (dtype == DLG_F64) return conv_bwd<double>(h, g, x, w, gy, gx, gw, gb);
  return bad_dtype(h, "dlg_conv2d_bwd", dtype);
}

extern "C" int dlg_max_pool2d_fwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *x, void *y,
                                  int32_t *idx) {
  return pool_any(h, "dlg_max_pool2d_fwd", dtype, kMaxFwd, g, x, y, nullptr, idx);
}
extern "C" int dlg_max_pool2d_bwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *gy, const int32_t *idx,
                                  void *gx) {
  return pool_any(h, "dlg_max_pool2d_bwd", dtype, kMaxBwd, g, gy, gx, idx, nullptr);
}
extern "C" int dlg_max_pool2d_tan(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *tx, const int32_t *idx,
                                  void *ty) {
  return pool_any(h, "dlg_max_pool2d_tan", dtype, kMaxTan, g, tx, ty, idx, nullptr);
}
extern "C" int dlg_avg_pool2d_fwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *x, void *y) {
  return pool_any(h, "dlg_avg_pool2d_fwd", dtype, kAvgFwd, g, x, y, nullptr, nullptr);
}
extern "C" int dlg_avg_pool2d_bwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *gy, void *gx) {
  return pool_any(h, "dlg_avg_pool2d_bwd", dtype, kAvgBwd, g, gy, gx, nullptr, nullptr);
}

extern "C" int dlg_batch_norm_fwd(dlg_handle *h, int dtype, const dlg_bn *p, const void *x, void *y) {
  return bn_any(h, "dlg_batch_norm_fwd", dtype, kFwd, p, x, nullptr, nullptr, nullptr, y, nullptr, nullptr);
}
extern "C" int dlg_batch_norm_tan(dlg_handle *h, int dtype, const dlg_bn *p, const void *x, const void *tx,
                                  const void *tw, const void *tb, void *ty) {
  return bn_any(h, "dlg_batch_norm_tan", dtype, kTan, p, x, tx, tw, tb, ty, nullptr, nullptr);
}
extern "C" int dlg_batch_norm_bwd(dlg_handle *h, int dtype, const dlg_bn *p, const void *x, const void *gy, void *gx,
                                  void *gw, void *gb) {
  return bn_any(h, "dlg_batch_norm_bwd", dtype, kBwd, p, x, gy, nullptr, nullptr, gx, gw, gb);
}

extern "C" int dlg_layer_norm_fwd(dlg_handle *h, int dtype, const dlg_ln *p, const void *x, void *y) {
  return ln_any(h, "dlg_layer_norm_fwd", dtype, kFwd, p, x, nullptr, nullptr, nullptr, y, nullptr, nullptr);
}
extern "C" int dlg_layer_norm_tan(dlg_handle *h, int dtype, const dlg_ln *p, const void *x, const void *tx,
                                  const void *tw, const void *tb, void *ty) {
  return ln_any(h, "dlg_layer_norm_tan", dtype, kTan, p, x, tx, tw, tb, ty, nullptr, nullptr);
}
extern "C" int dlg_layer_norm_bwd(dlg_handle *h, int dtype, const dlg_ln *p, const void *x, const void *gy, void *gx,
                                  void *gw, void *gb) {
  return ln_any(h, "dlg_layer_norm_bwd", dtype, kBwd, p, x, gy, nullptr, nullptr, gx, gw, gb);
}
