// src_gpu/reduce.cu - reductions (sum, mean, max, min, var, logsumexp along
// axes) and softmax / log_softmax on the device: the ABI of dl/gpu/reduce.h,
// for ops/reduce.h. The reduction engine they run on is engine.h's.
#include "engine.h"

namespace {

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
    return dlg_cuda(h, dlg_memset_async(h, y, 0, (size_t)(outer * inner) * (dtype == DLG_F32 ? 4 : 8)), op);
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

} // extern "C"
#endif // DLG_HOST_TEST
