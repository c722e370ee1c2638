// src_gpu/rnn.cu - the gate kernels of the recurrent ops (Elman RNN tanh /
// relu, LSTM, GRU) for one time step on the device: the ABI of
// include/dl/gpu/rnn.h. ops/rnn.h drives the recurrence (the GEMMs through
// dlg_gemm, one launch of these per step and direction).
//
// Each kernel is one thread per (batch row b, hidden unit j), grid-stride
// over B H: every value a step reads or writes at (b, j) belongs to that
// thread alone (the CPU's row loops have no dependence between j either),
// so there are no atomics and the results do not depend on the launch. The
// work of one element is a __host__ __device__ function (rnn_fwd_at,
// rnn_bwd_at) with the CPU's formulas in the CPU's order of operations, so
// that tests/gpu_host/rnn_host.cu can run it on the host against the CPU
// ops (there is no GPU in CI).
#include "internal.h"

#include "dl/vmath.h"

#include <math.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 256;

// The scalar functions of ops/rnn.h's kernels (dual.h's dl_tanh_f32 /
// dl_sigmoid_f32 are vmath.h's; dl_tanh_f64 is tanh, dl_sigmoid_f64 is
// 1 / (1 + e^-x) with the C library's exp).
__host__ __device__ __forceinline__ float rtanh(float v) { return dl_vtanh_f32(v); }
__host__ __device__ __forceinline__ double rtanh(double v) { return tanh(v); }
__host__ __device__ __forceinline__ float rsig(float v) { return dl_vsigmoid_f32(v); }
__host__ __device__ __forceinline__ double rsig(double v) { return 1.0 / (1.0 + exp(-v)); }

__host__ __device__ inline int64_t rnn_gates(int kind) {
  return kind == DLG_RNN_LSTM ? 4 : kind == DLG_RNN_GRU ? 3 : 1;
}

template <class T>
__host__ __device__ void rnn_fwd_tangent_at(const dlg_rnn &r, int64_t t, int64_t b, int64_t j, const T *y, const T *g,
                                            const T *c, const T *cp, const T *hp);

// Step t, batch row b, hidden unit j: dl__rnn_fwd_row_* at j (the forward,
// then the tangent when r.ty).
template <class T> __host__ __device__ void rnn_fwd_at(const dlg_rnn &r, int64_t t, int64_t b, int64_t j) {
  const int64_t H = r.H, GH = rnn_gates(r.kind) * H, bt = b * r.T + t;
  const T *xp = (const T *)r.xp + bt * GH, *s = (const T *)r.s + b * GH;
  const T *bh = (const T *)r.bhh;
  const T *hp = t ? (const T *)r.y + (bt - 1) * H : (const T *)r.h0 + b * r.h0_ld;
  T *y = (T *)r.y + bt * H;
  T *g = (T *)r.g + b * r.g_lb + t * r.g_lt;
  T *c = (T *)r.c + b * r.c_lb + t * r.c_lt;
  const T *cp = t ? c - r.c_lt : (const T *)r.c0 + b * r.c0_ld;
  const int64_t L = r.len ? r.len[b] : r.T;
  if (t >= L) { // past the row's end: y = 0, the state stays as it was
    y[j] = 0;
    if (r.rb) g[3 * H + j] = 0; // u = r h_{t-1} = 0 (w_hn's gradient multiplies it over every row)
    if (r.ty) ((T *)r.ty)[bt * H + j] = 0;
    return;
  }
  if (r.kind == DLG_RNN_TANH) {
    y[j] = rtanh(xp[j] + s[j] + bh[j]);
  } else if (r.kind == DLG_RNN_RELU) {
    const T a = xp[j] + s[j] + bh[j];
    y[j] = a > 0 ? a : (T)0;
  } else if (r.kind == DLG_RNN_LSTM) {
    const T i_ = rsig(xp[j] + s[j] + bh[j]);
    const T f_ = rsig(xp[H + j] + s[H + j] + bh[H + j]);
    const T g_ = rtanh(xp[2 * H + j] + s[2 * H + j] + bh[2 * H + j]);
    const T o_ = rsig(xp[3 * H + j] + s[3 * H + j] + bh[3 * H + j]);
    const T c_ = f_ * cp[j] + i_ * g_;
    c[j] = c_;
    y[j] = o_ * rtanh(c_);
    g[j] = i_;
    g[H + j] = f_;
    g[2 * H + j] = g_;
    g[3 * H + j] = o_;
  } else if (r.rb && r.phase == 0) { // r, z and u = r h_{t-1} (g's 4th part)
    const T r_ = rsig(xp[j] + (s[j] + bh[j]));
    g[j] = r_;
    g[H + j] = rsig(xp[H + j] + (s[H + j] + bh[H + j]));
    g[3 * H + j] = r_ * hp[j];
  } else if (r.rb) { // s's n part is u w_hn^T now
    const T z_ = g[H + j];
    const T n_ = rtanh(xp[2 * H + j] + (s[2 * H + j] + bh[2 * H + j]));
    y[j] = ((T)1 - z_) * n_ + z_ * hp[j];
    g[2 * H + j] = n_;
  } else {
    const T hn_ = s[2 * H + j] + bh[2 * H + j];
    const T r_ = rsig(xp[j] + (s[j] + bh[j]));
    const T z_ = rsig(xp[H + j] + (s[H + j] + bh[H + j]));
    const T n_ = rtanh(xp[2 * H + j] + r_ * hn_);
    y[j] = ((T)1 - z_) * n_ + z_ * hp[j];
    g[j] = r_;
    g[H + j] = z_;
    g[2 * H + j] = n_;
    g[3 * H + j] = hn_;
  }
  if (r.ty) rnn_fwd_tangent_at<T>(r, t, b, j, y, g, c, cp, hp);
  if (t == L - 1 && !(r.rb && r.phase == 0)) { // the row's last real step: h_n, c_n and their tangents
    if (r.hn) ((T *)r.hn)[b * H + j] = y[j];
    if (r.cn) ((T *)r.cn)[b * H + j] = c[j];
    if (r.thn) ((T *)r.thn)[b * H + j] = ((const T *)r.ty)[bt * H + j];
    if (r.tcn) ((T *)r.tcn)[b * H + j] = ((const T *)r.tc)[b * H + j];
  }
}

// The tangent of step t at (b, j), after the forward wrote y, g, c.
template <class T>
__host__ __device__ void rnn_fwd_tangent_at(const dlg_rnn &r, int64_t t, int64_t b, int64_t j, const T *y, const T *g,
                                            const T *c, const T *cp, const T *hp) {
  const int64_t H = r.H, GH = rnn_gates(r.kind) * H, bt = b * r.T + t;
  const T *tx = (const T *)r.txp + b * r.txp_lb + t * r.txp_lt;
  const T *ts = (const T *)r.ts + b * GH, *tb = (const T *)r.tbhh;
  T *ty = (T *)r.ty + bt * H;
  if (r.kind == DLG_RNN_TANH) {
    ty[j] = ((T)1 - y[j] * y[j]) * (tx[j] + ts[j] + tb[j]);
  } else if (r.kind == DLG_RNN_RELU) {
    ty[j] = y[j] > 0 ? tx[j] + ts[j] + tb[j] : (T)0;
  } else if (r.kind == DLG_RNN_LSTM) {
    T *tc = (T *)r.tc + b * H;
    const T i_ = g[j], f_ = g[H + j], g_ = g[2 * H + j], o_ = g[3 * H + j];
    const T ti = i_ * ((T)1 - i_) * (tx[j] + ts[j] + tb[j]);
    const T tf = f_ * ((T)1 - f_) * (tx[H + j] + ts[H + j] + tb[H + j]);
    const T tg = ((T)1 - g_ * g_) * (tx[2 * H + j] + ts[2 * H + j] + tb[2 * H + j]);
    const T to = o_ * ((T)1 - o_) * (tx[3 * H + j] + ts[3 * H + j] + tb[3 * H + j]);
    const T k_ = rtanh(c[j]);
    const T tc_ = tf * cp[j] + f_ * tc[j] + ti * g_ + i_ * tg;
    tc[j] = tc_;
    ty[j] = to * k_ + o_ * ((T)1 - k_ * k_) * tc_;
  } else if (r.rb && r.phase == 0) { // u's tangent tr h_{t-1} + r th_{t-1}
    const T *thp = t ? ty - H : (const T *)r.th0 + b * r.th0_ld;
    const T r_ = g[j];
    const T tr = r_ * ((T)1 - r_) * (tx[j] + ts[j] + tb[j]);
    ((T *)r.tu)[b * H + j] = tr * hp[j] + r_ * thp[j];
  } else if (r.rb) { // ts's n part is tu w_hn^T + u tw_hn^T now
    const T *thp = t ? ty - H : (const T *)r.th0 + b * r.th0_ld;
    const T z_ = g[H + j], n_ = g[2 * H + j];
    const T tz = z_ * ((T)1 - z_) * (tx[H + j] + ts[H + j] + tb[H + j]);
    const T tn = ((T)1 - n_ * n_) * (tx[2 * H + j] + (ts[2 * H + j] + tb[2 * H + j]));
    ty[j] = ((T)1 - z_) * tn + tz * (hp[j] - n_) + z_ * thp[j];
  } else {
    const T *thp = t ? ty - H : (const T *)r.th0 + b * r.th0_ld;
    const T r_ = g[j], z_ = g[H + j], n_ = g[2 * H + j], hn_ = g[3 * H + j];
    const T thn = ts[2 * H + j] + tb[2 * H + j];
    const T tr = r_ * ((T)1 - r_) * (tx[j] + ts[j] + tb[j]);
    const T tz = z_ * ((T)1 - z_) * (tx[H + j] + ts[H + j] + tb[H + j]);
    const T tn = ((T)1 - n_ * n_) * (tx[2 * H + j] + tr * hn_ + r_ * thn);
    ty[j] = ((T)1 - z_) * tn + tz * (hp[j] - n_) + z_ * thp[j];
  }
}

// Step t, batch row b, hidden unit j: dl__rnn_bwd_row_* at j.
template <class T>
__host__ __device__ void rnn_bwd_at(const dlg_rnn &r, const dlg_rnn_bw &w, int64_t t, int64_t b, int64_t j) {
  const int64_t H = r.H, GH = rnn_gates(r.kind) * H, bt = b * r.T + t;
  const T *gy = (const T *)w.gy + bt * H, *y = (const T *)r.y + bt * H;
  const T *g = (const T *)r.g + b * r.g_lb + t * r.g_lt;
  T *dx = (T *)w.dx + bt * GH, *dh = (T *)w.dh + b * H, *dc = (T *)w.dc + b * H;
  if (r.len && t >= r.len[b]) { // past the row's end: no gradient, dh and dc pass
    for (int64_t k = 0; k < rnn_gates(r.kind); k++) {
      dx[k * H + j] = 0;
      if (w.dhs != w.dx) ((T *)w.dhs)[bt * GH + k * H + j] = 0;
    }
    return;
  }
  if (r.kind == DLG_RNN_TANH) {
    dx[j] = (gy[j] + dh[j]) * ((T)1 - y[j] * y[j]);
    dh[j] = 0;
  } else if (r.kind == DLG_RNN_RELU) {
    dx[j] = y[j] > 0 ? gy[j] + dh[j] : (T)0;
    dh[j] = 0;
  } else if (r.kind == DLG_RNN_LSTM) {
    const T *c = (const T *)r.c + b * r.c_lb + t * r.c_lt;
    const T *cp = t ? c - r.c_lt : (const T *)r.c0 + b * r.c0_ld;
    const T i_ = g[j], f_ = g[H + j], g_ = g[2 * H + j], o_ = g[3 * H + j];
    const T k_ = rtanh(c[j]), dht = gy[j] + dh[j];
    const T dct = dc[j] + dht * o_ * ((T)1 - k_ * k_);
    dx[j] = dct * g_ * (i_ * ((T)1 - i_));
    dx[H + j] = dct * cp[j] * (f_ * ((T)1 - f_));
    dx[2 * H + j] = dct * i_ * ((T)1 - g_ * g_);
    dx[3 * H + j] = dht * k_ * (o_ * ((T)1 - o_));
    dc[j] = dct * f_;
    dh[j] = 0;
  } else if (r.rb && r.phase == 0) { // da_n, da_z; then du = da_n w_hn (a GEMM)
    const T *hp = t ? y - H : (const T *)r.h0 + b * r.h0_ld;
    T *ds = (T *)w.dhs + bt * GH;
    const T z_ = g[H + j], n_ = g[2 * H + j];
    const T dht = gy[j] + dh[j];
    const T dan = dht * ((T)1 - z_) * ((T)1 - n_ * n_);
    const T daz = dht * (hp[j] - n_) * (z_ * ((T)1 - z_));
    dh[j] = dht * z_;
    dx[H + j] = daz;
    dx[2 * H + j] = dan;
    ds[H + j] = daz;
    ds[2 * H + j] = dan;
  } else if (r.rb) { // da_r = du h_{t-1} s'(r), dh += du r
    const T *hp = t ? y - H : (const T *)r.h0 + b * r.h0_ld;
    const T *du = (const T *)w.du + b * H;
    T *ds = (T *)w.dhs + bt * GH;
    const T r_ = g[j];
    const T dar = du[j] * hp[j] * (r_ * ((T)1 - r_));
    dx[j] = dar;
    ds[j] = dar;
    dh[j] += du[j] * r_;
  } else {
    const T *hp = t ? y - H : (const T *)r.h0 + b * r.h0_ld;
    T *ds = (T *)w.dhs + bt * GH;
    const T r_ = g[j], z_ = g[H + j], n_ = g[2 * H + j], hn_ = g[3 * H + j];
    const T dht = gy[j] + dh[j];
    const T dan = dht * ((T)1 - z_) * ((T)1 - n_ * n_);
    const T dar = dan * hn_ * (r_ * ((T)1 - r_));
    const T daz = dht * (hp[j] - n_) * (z_ * ((T)1 - z_));
    dh[j] = dht * z_;
    dx[j] = dar;
    dx[H + j] = daz;
    dx[2 * H + j] = dan;
    ds[j] = dar;
    ds[H + j] = daz;
    ds[2 * H + j] = dan * r_;
  }
}

template <class T> __global__ void rnn_fwd_k(dlg_rnn r, int64_t t) {
  const int64_t n = r.B * r.H;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    rnn_fwd_at<T>(r, t, i / r.H, i % r.H);
}
template <class T> __global__ void rnn_bwd_k(dlg_rnn r, dlg_rnn_bw w, int64_t t) {
  const int64_t n = r.B * r.H;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    rnn_bwd_at<T>(r, w, t, i / r.H, i % r.H);
}

// The arguments every launch needs: a known cell, positive sizes, t in range,
// the buffers each kind reads or writes present.
int rnn_check(dlg_handle *h, const char *op, int dtype, const dlg_rnn *r, int64_t t) {
  if (dtype != DLG_F32 && dtype != DLG_F64)
    return dlg_fail(h, DLG_ERR, "%s: dtype %d is not DLG_F32 (%d) or DLG_F64 (%d)", op, dtype, DLG_F32, DLG_F64);
  if (!r || r->kind < DLG_RNN_TANH || r->kind > DLG_RNN_GRU)
    return dlg_fail(h, DLG_ERR, "%s: unknown cell kind %d", op, r ? r->kind : -1);
  if (r->rb && (r->kind != DLG_RNN_GRU || r->phase < 0 || r->phase > 1))
    return dlg_fail(h, DLG_ERR, "%s: rb %d (phase %d) is for the GRU, phase 0 or 1", op, r->rb, r->phase);
  if (r->B < 1 || r->T < 1 || r->H < 1 || t < 0 || t >= r->T)
    return dlg_fail(h, DLG_ERR, "%s: sizes B %lld, T %lld, H %lld, step %lld", op, (long long)r->B, (long long)r->T,
                    (long long)r->H, (long long)t);
  if (!r->xp || !r->s || !r->bhh || !r->h0 || !r->y ||
      ((r->kind == DLG_RNN_LSTM || r->kind == DLG_RNN_GRU) && !r->g) || (r->kind == DLG_RNN_LSTM && (!r->c || !r->c0)))
    return dlg_fail(h, DLG_ERR, "%s: a buffer of the %s cell is NULL", op,
                    r->kind == DLG_RNN_LSTM ? "LSTM" : r->kind == DLG_RNN_GRU ? "GRU" : "RNN");
  return DLG_OK;
}

} // namespace

// >>the ABI ---------------------------------------------------------------------

extern "C" int dlg_rnn_fwd(dlg_handle *h, int dtype, const dlg_rnn *r, int64_t t) {
  int rc = rnn_check(h, "dlg_rnn_fwd", dtype, r, t);
  if (rc != DLG_OK) return rc;
  if (r->ty && (!r->txp || !r->ts || !r->tbhh || !r->th0 || (r->kind == DLG_RNN_LSTM && !r->tc) || (r->rb && !r->tu)))
    return dlg_fail(h, DLG_ERR, "dlg_rnn_fwd: a tangent buffer is NULL");
  const unsigned blocks = dlg_blocks(h, r->B * r->H, kThreads);
  if (dtype == DLG_F32) DLG_LAUNCH(blocks, kThreads, 0, h->stream, rnn_fwd_k<float>)(*r, t);
  else DLG_LAUNCH(blocks, kThreads, 0, h->stream, rnn_fwd_k<double>)(*r, t);
  return dlg_launched(h, "dlg_rnn_fwd");
}

extern "C" int dlg_rnn_bwd(dlg_handle *h, int dtype, const dlg_rnn *r, const dlg_rnn_bw *w, int64_t t) {
  int rc = rnn_check(h, "dlg_rnn_bwd", dtype, r, t);
  if (rc != DLG_OK) return rc;
  if (!w || !w->gy || !w->dx || !w->dh || (r->kind == DLG_RNN_LSTM && !w->dc) || (r->kind == DLG_RNN_GRU && !w->dhs) ||
      (r->rb && !w->du))
    return dlg_fail(h, DLG_ERR, "dlg_rnn_bwd: a gradient buffer is NULL");
  const unsigned blocks = dlg_blocks(h, r->B * r->H, kThreads);
  if (dtype == DLG_F32) DLG_LAUNCH(blocks, kThreads, 0, h->stream, rnn_bwd_k<float>)(*r, *w, t);
  else DLG_LAUNCH(blocks, kThreads, 0, h->stream, rnn_bwd_k<double>)(*r, *w, t);
  return dlg_launched(h, "dlg_rnn_bwd");
}
