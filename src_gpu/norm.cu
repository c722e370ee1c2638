// src_gpu/norm.cu - batch norm, layer norm and RMS norm on the device: the ABI
// of include/dl/gpu/norm.h, for ops/norm.h.
//
// Why own kernels where cuDNN has a call: batch norm: cuDNN requires eps >=
// CUDNN_BN_MIN_EPSILON in some versions, keeps f32 statistics for f32 data,
// and folds the running variance update into its own expression; the CPU
// accumulates in double (two passes) and takes eps >= 0. The CPU's
// per-channel work (the plane form of ops/norm.h) is done here in double:
// each channel's sums split over several blocks (dnn_common.h's
// chan_part_k: a CNN has too few channels to fill a GPU with one block
// each), then one thread per channel for what follows. Backward passes gather (one thread per element
// written, sums in the CPU's order) instead of scattering with atomics, so
// they are deterministic. Sums reduce in double through a shared-memory tree
// (a different order from the CPU's loop: the last bits of a double sum may
// differ, which rounding to f32 almost always hides).
#include "dnn_common.h"

namespace {

// >>batch norm ------------------------------------------------------------------
// ops/norm.h's plane form: per channel c, the statistics or the sums (split
// over blocks), then the constants k1, k2, k3 (dl__bn_consts), then one map pass
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

// The per-channel sums of the passes (dnn_common.h's chan_part_at, split
// over blocks): FWD batch: sum x, then sum (x - mu)^2 (the CPU's two
// passes); TAN / BWD: sum v and sum v (x - mu).
template <class T> struct BnSumX {
  const T *x;
  __host__ __device__ void operator()(int64_t i, int64_t, double &a, double &) const { a += (double)x[i]; }
};
template <class T> struct BnSumSq {
  const T *x;
  const double *mu;
  __host__ __device__ void operator()(int64_t i, int64_t c, double &a, double &) const {
    const double d = (double)x[i] - mu[c];
    a += d * d;
  }
};
template <class T> struct BnSumV {
  const T *x, *v;
  const double *mu;
  __host__ __device__ void operator()(int64_t i, int64_t c, double &a, double &b) const {
    a += (double)v[i];
    b += (double)v[i] * ((double)x[i] - mu[c]);
  }
};
// Which sums a pass needs (none: its constants come from the statistics alone).
inline bool bn_needs_sums(int mode, const dlg_bn &p, bool has_v, bool has_gw, bool has_gb) {
  if (mode == kFwd) return p.batch != 0;
  if (mode == kTan) return p.batch && has_v;
  return p.batch || has_gw || has_gb;
}
// Channel c after its sums (part: the chunk sums, split per channel; NULL:
// none were needed), the CPU's per-channel work: FWD batch stage 0: the
// mean into stats[c]; FWD stage 1: istd (batch: from the squared
// deviations' sum), the running update, the constants; TAN / BWD: the
// constants from the two sums. The constants go to k [3, C].
template <class T>
__host__ __device__ void bn_final_at(int mode, int stage, const dlg_bn &p, const double *part, int64_t split,
                                     bool has_v, const T *tw, const T *tb, T *gw, T *gb, double *k, int64_t c) {
  const int64_t C = p.C;
  const double m = (double)(p.N * p.S);
  const double w = p.w ? (double)((const T *)p.w)[c * p.ws] : 1.0;
  double s0 = 0, s1 = 0;
  if (part) chan_total(part, split, c, &s0, &s1);
  if (mode == kFwd && p.batch) {
    if (stage == 0) {
      p.stats[c] = s0 / m;
      return;
    }
    const double mu = p.stats[c];
    p.stats[C + c] = 1.0 / sqrt(s0 / m + p.eps);
    if (p.update) {
      T *rm = (T *)p.rmean + c * p.rms, *rv = (T *)p.rvar + c * p.rvs;
      *rm = (T)((1 - p.momentum) * (double)*rm + p.momentum * mu);
      *rv = (T)((1 - p.momentum) * (double)*rv + p.momentum * (s0 / m) * m / (m - 1));
    }
    s0 = s1 = 0;
  } else if (mode == kFwd) {
    p.stats[c] = (double)((const T *)p.rmean)[c * p.rms];
    p.stats[C + c] = 1.0 / sqrt((double)((const T *)p.rvar)[c * p.rvs] + p.eps);
  }
  bn_consts<T>(mode, p, c, has_v, s0, s1, w, tw, tb, gw, gb, k);
}
template <class T>
__global__ void bn_final_k(int mode, int stage, dlg_bn p, const double *part, int64_t split, int has_v, const T *tw,
                           const T *tb, T *gw, T *gb, double *k) {
  for (int64_t c = gtid(); c < p.C; c += gstride())
    bn_final_at<T>(mode, stage, p, part, split, has_v != 0, tw, tb, gw, gb, k, c);
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
  {
    const ChanGeo g = {p->N, p->C, p->S};
    const int64_t split = chan_split(g, h->sm_count);
    const bool sums = bn_needs_sums(mode, *p, vv != nullptr, gw != nullptr, gb != nullptr);
    const unsigned pb = dlg_blocks(h, p->C * split, 1), cb = dlg_blocks(h, p->C, kThreads);
    double *part;
    const T *x = (const T *)xv, *v = (const T *)vv;
    // workspace: k [3, C], then the chunk sums [C, split, 2]
    if ((rc = dlg_ws(h, sizeof(double) * (3 + 2 * (size_t)split) * (size_t)p->C)) != DLG_OK) return rc;
    k = (double *)h->ws;
    part = k + 3 * p->C;
    if (mode == kFwd && p->batch) { // mean, then the squared deviations from it
      DLG_LAUNCH(pb, kThreads, 0, h->stream, chan_part_k<BnSumX<T>>)(g, split, BnSumX<T>{x}, part);
      if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
      DLG_LAUNCH(cb, kThreads, 0, h->stream, bn_final_k<T>)(mode, 0, *p, part, split, 0, nullptr, nullptr, nullptr,
                                                           nullptr, k);
      if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
      DLG_LAUNCH(pb, kThreads, 0, h->stream, chan_part_k<BnSumSq<T>>)(g, split, BnSumSq<T>{x, p->stats}, part);
      if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
    } else if (sums) {
      DLG_LAUNCH(pb, kThreads, 0, h->stream, chan_part_k<BnSumV<T>>)(g, split, BnSumV<T>{x, v, p->stats}, part);
      if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
    }
    DLG_LAUNCH(cb, kThreads, 0, h->stream, bn_final_k<T>)(mode, 1, *p, sums ? part : nullptr, split, vv != nullptr,
                                                         (const T *)tw, (const T *)tb, (T *)gw, (T *)gb, k);
    if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
  }
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
