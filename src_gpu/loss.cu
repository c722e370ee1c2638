// src_gpu/loss.cu - the losses (element-wise, cross-entropy, nll) on the
// device: the ABI of dl/gpu/loss.h, for ops/loss.h. Rows go through
// engine.h's reduction engine, sums through its psum.
#include "engine.h"

namespace {

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

// >>metrics

// Column of row i's first maximum; a NaN counts as the maximum (report.h's dl__argmax_row).
template <typename T>
__host__ __device__ __forceinline__ int64_t argmax_row(const T *__restrict__ x, int64_t C, int64_t s0, int64_t s1,
                                                       int64_t i) {
  const T *r = x + i * s0;
  T bv = r[0];
  int64_t best = 0;
  if (bv != bv) return 0;
  for (int64_t j = 1; j < C; j++) {
    const T v = r[j * s1];
    if (v != v) return j;
    if (v > bv) {
      bv = v;
      best = j;
    }
  }
  return best;
}
// One block: *count = the rows whose argmax is their label (labels: lab64, or lab32 when lab64 is NULL).
template <typename T>
__global__ void k_argmax_hits(int64_t N, int64_t C, const T *__restrict__ x, int64_t s0, int64_t s1,
                              const int64_t *__restrict__ lab64, const int32_t *__restrict__ lab32, int64_t ls,
                              int64_t *__restrict__ count) {
  __shared__ int64_t sh[TPB];
  const int t = threadIdx.x;
  int64_t hits = 0;
  for (int64_t i = t; i < N; i += TPB) {
    const int64_t l = lab64 ? lab64[i * ls] : (int64_t)lab32[i * ls];
    hits += (l >= 0 && l < C && argmax_row(x, C, s0, s1, i) == l) ? 1 : 0;
  }
  sh[t] = hits;
  __syncthreads();
  for (int k = TPB / 2; k > 0; k >>= 1) {
    if (t < k) sh[t] += sh[t + k];
    __syncthreads();
  }
  if (t == 0) *count = sh[0];
}

#ifndef DLG_HOST_TEST
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
#endif // DLG_HOST_TEST

} // namespace

#ifndef DLG_HOST_TEST
// ================================================================ the ABI

extern "C" {

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

int dlg_argmax_hits(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *x, int64_t s0, int64_t s1,
                    const int64_t *labels_host, const void *labels_dev, int ldtype, int64_t ls, int64_t *count) {
  static const char *op = "dlg_argmax_hits";
  DLG_CHECK_DTYPE(op, dtype);
  const int64_t *l64 = nullptr;
  const int32_t *l32 = nullptr;
  if (N == 0 || C == 0) return dlg_cuda(h, dlg_memset_async(h, count, 0, sizeof(int64_t)), op);
  if (labels_host) {
    int64_t *lab = NULL;
    DLG_TRY(stage_index(h, op, carve(sizeof(int64_t) * (size_t)N), labels_host, (size_t)N, &lab));
    l64 = lab;
    ls = 1;
  } else if (ldtype == DLG_I64) l64 = (const int64_t *)labels_dev;
  else if (ldtype == DLG_I32) l32 = (const int32_t *)labels_dev;
  else return dlg_fail(h, DLG_ERR, "%s: label dtype %d is not DLG_I32 or DLG_I64", op, ldtype);
  if (dtype == DLG_F32)
    DLG_LAUNCH(1, TPB, 0, h->stream, k_argmax_hits<float>)(N, C, (const float *)x, s0, s1, l64, l32, ls, count);
  else
    DLG_LAUNCH(1, TPB, 0, h->stream, k_argmax_hits<double>)(N, C, (const double *)x, s0, s1, l64, l32, ls, count);
  return dlg_launched(h, op);
}

} // extern "C"
#endif // DLG_HOST_TEST
