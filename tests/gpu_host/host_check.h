/* tests/gpu_host/host_check.h - what the host tests of src_gpu/ share: the
 * X_ref.c functions' declarations, read by both sides (X_host.cu, built by
 * nvcc as C++, and X_ref.c, built as C11), so that the two cannot drift
 * apart; for the C side, the reference context and tensor copies in and
 * out; for the C++ side, the fixed-seed random inputs and the checks.
 * Included after ../harness.h (CHECK_MSG) in X_host.cu and first in
 * X_ref.c. */
#ifndef DL_TESTS_GPU_HOST_CHECK_H
#define DL_TESTS_GPU_HOST_CHECK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kern_ref.c: dl.h's CPU ops on plain arrays (dt 0: f32, 1: f64); the
 * contracts are at the definitions. */
void kref_sum_to(int dt, int64_t rows, int64_t n, const void *g, void *gx);
void kref_reduce(int dt, int kind, int ndim, const int64_t *shape, unsigned mask, double correction, const void *x,
                 const void *tx, const void *gy, void *y, void *ty, void *gx);
void kref_softmax(int dt, int logsm, int64_t outer, int64_t n, int64_t inner, const void *x, const void *tx,
                  const void *gy, void *y, void *ty, void *gx);
void kref_loss_ew(int dt, int kind, double p, int r, int64_t n, const void *a, const void *b, const void *ta,
                  const void *tb, const void *gy, void *y, void *ty, void *ga, void *gb);
void kref_ce(int dt, int64_t N, int64_t C, const void *x, const int64_t *lab, double eps, int r, const void *tx,
             const void *gy, void *prob, void *y, void *ty, void *gx);
void kref_nll(int dt, int64_t N, int64_t C, int transposed, const void *x, const int64_t *lab, int r, const void *tx,
              const void *gy, void *y, void *ty, void *gx);
void kref_embedding(int dt, int64_t V, int64_t D, int layout, const void *w, const void *tw, const int64_t *idx,
                    int64_t n, void *y, void *ty);
int64_t kref_embedding_sparse(int dt, int64_t V, int64_t D, const int64_t *idx1, int64_t n1, const void *gy1,
                              const int64_t *idx2, int64_t n2, const void *gy2, int64_t *rows, void *values,
                              void *dense);
void kref_embedding_dense(int dt, int64_t V, int64_t D, const int64_t *idx, int64_t n, const void *gy, void *gw);
void kref_dropout(int dt, int64_t n, double p, uint64_t seed, uint64_t skip, const void *x, const void *tx,
                  const void *gy, unsigned char *mask, void *y, void *ty, void *gx, uint64_t *key, uint64_t *base,
                  uint64_t *thr, double *scale);
void kref_lamb(int dt, const double *hp, int64_t step, int64_t n, void *p, const void *g, void *m, void *v,
               double *kargs);
void kref_optim(int dt, int opt, const double *hp, int64_t step, int64_t n, void *p, const void *g, void *s0,
                void *s1, void *s2, double *kargs);
void kref_optim_sparse(int dt, int opt, const double *hp, int64_t step, int64_t V, int64_t w, const int64_t *rows,
                       int64_t k, void *p, const void *g, void *s0, void *s1, void *s2, double *kargs);
void kref_clamp(int dt, void *x, int64_t n, double v);
double kref_sumsq(int dt, const void *x, int64_t n);
void kref_scale(int dt, void *x, int64_t n, double f);
int64_t kref_regularize(int dt, double l1, double l2, int64_t V, int64_t D, int64_t in, int64_t out,
                        const void *p0, const void *p1, const void *p2, void *g1, void *g2, const int64_t *idx,
                        int64_t n, const void *gy, int64_t *rows, void *vals_before, void *vals_after);

/* dnn_ref.c: the pools, norms and conv bias gradient (dt 0: f32, 1: f64). */
/* The pools' window q[13] is a dl_pool2d_args in its field order (kernel h, w;
 * stride h, w; padding h, w; exclude_pad; dilation h, w; ceil_mode; pad_mode;
 * pad_h_end, pad_w_end); dnn_ref_pool_geom gives dl.h's sizes for it on
 * [N, C, H, W]: g = Ho, Wo, ph, pw, phe, pwe, sh, sw, dh, dw. */
void dnn_ref_pool_geom(int kind, int64_t N, int64_t C, int64_t H, int64_t W, const int *q, int64_t *g);
void dnn_ref_pool(int kind, int dt, int64_t N, int64_t C, int64_t H, int64_t W, const int *q, const void *x,
                  const void *gy, const void *tx, void *y, void *gx, void *ty);
/* 3-d: q[14] a dl_pool3d_args in its field order (kernel d, h, w; stride
 * d, h, w; padding d, h, w; exclude_pad; dilation d, h, w; ceil_mode) on
 * [N, C, D, H, W]: g = Do, Ho, Wo, pd, ph, pw, sd, sh, sw, dd, dh, dw. */
void dnn_ref_pool3d_geom(int kind, int64_t N, int64_t C, int64_t D, int64_t H, int64_t W, const int *q, int64_t *g);
void dnn_ref_pool3d(int kind, int dt, int64_t N, int64_t C, int64_t D, int64_t H, int64_t W, const int *q,
                    const void *x, const void *gy, const void *tx, void *y, void *gx, void *ty);
void dnn_ref_bn(int dt, int64_t N, int64_t C, int64_t S, int training, double momentum, double eps, const void *x,
                const void *w, const void *b, void *rm, void *rv, const void *gy, const void *tx, const void *tw,
                const void *tb, void *y, void *gx, void *gw, void *gb, void *ty);
void dnn_ref_ln(int dt, int center, int64_t R, int64_t D, double eps, const void *x, const void *w, const void *b,
                const void *gy, const void *tx, const void *tw, const void *tb, void *y, void *gx, void *gw,
                void *gb, void *ty);
void dnn_ref_conv_gb(int dt, int64_t N, int64_t O, int64_t Hh, int64_t Ww, const void *gy, void *gb);

/* rnn_ref.c: the recurrent ops (dt 0: f32, 1: f64). Which arrays of one
 * call: inputs (x [B, T, I], h0, c0 [B, H], w_ih [G H, I], w_hh [G H, H],
 * b_ih, b_hh [G H]; h0, c0, b_ih, b_hh NULL: left out), their tangents (same
 * shapes; NULL: none, or no forward mode at all when every one is NULL), the
 * upstream gradients gy [B, T, H], ghn, gcn [B, H] of y, h_n, c_n (the loss
 * is sum(y gy) + sum(h_n ghn) + sum(c_n gcn); gy NULL: no backward), and the
 * results (NULL: not wanted). */
typedef struct rnn_ref_io {
  int kind; /* 0 tanh, 1 relu, 2 LSTM, 3 GRU */
  int dt;
  int64_t B, T, I, H;
  const void *x, *h0, *c0, *wih, *whh, *bih, *bhh;
  const void *tx, *th0, *tc0, *twih, *twhh, *tbih, *tbhh;
  const void *gy, *ghn, *gcn;
  void *y, *hn, *cn;
  void *gx, *gh0, *gc0, *gwih, *gwhh, *gbih, *gbhh;
  void *ty, *thn, *tcn;
  const int64_t *lengths; /* [B] or NULL: the _ex ops with these lengths */
  int rb;                 /* GRU: the reset gate before the product */
} rnn_ref_io;
void rnn_ref(const rnn_ref_io *io);

/* shape_ref.c: index_select, gather, pad (dt a dl_dtype value); the
 * contracts are there. */
void sref_index_select(int dt, int ndim, const int64_t *shape, int dim, const int64_t *idx, int64_t m, const void *x,
                       const void *tx, const void *gy, void *y, void *ty, void *gx);
void sref_gather(int dt, int ndim, const int64_t *xshape, int tr, int dim, const int64_t *ishape, const int64_t *idx,
                 const void *x, const void *tx, const void *gy, void *y, void *ty, void *gx);
void sref_pad(int dt, int ndim, const int64_t *xshape, int tr, int npairs, const int64_t *pads, double value,
              const void *x, const void *tx, const void *gy, const int64_t **yshape_out, void *y, void *ty, void *gx);
void sref_fill_bits(int dt, double value, void *out);

#ifdef __cplusplus
}
#endif

#ifndef __cplusplus
/* ---- the C side (X_ref.c): dl.h's context and plain-array copies ---- */
#include "dl.h"

/* The one context of the reference ops, made on the first call. */
static dl_ctx ref_ctx;
static int ref_inited;
static inline void ref_init_desc(const dl_ctx_desc *d) {
  if (!ref_inited) {
    dl_ctx_init(&ref_ctx, d);
    ref_inited = 1;
  }
}
static inline void ref_init(void) { ref_init_desc(NULL); }
/* An owned tensor of dtype dt (a dl_dtype: 0 f32, 1 f64, ...) and the given
 * shape, filled from src (NULL: zeros). */
static inline dl_tensor *ref_make(int dt, int nd, const int64_t *shape, const void *src) {
  dl_tensor *t = dl_tensor_make(&ref_ctx, (dl_dtype)dt, nd, shape);
  if (!t) DL_PANIC(&ref_ctx, "gpu_host ref", "out of memory");
  if (src && t->numel) memcpy(t->data, src, (size_t)t->numel * dl_dtype_size(t->dtype));
  return t;
}
/* t's elements (contiguous t) into dst (NULL: not wanted). */
static inline void ref_out(void *dst, const dl_tensor *t) {
  if (dst && t && t->numel) memcpy(dst, t->data, (size_t)t->numel * dl_dtype_size(t->dtype));
}

#else
/* ---- the C++ side (X_host.cu): inputs and checks ---- */
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

/* xorshift64, fixed seed: the same inputs every run. */
static uint64_t hc_state = 88172645463325252ull;
static inline uint64_t hc_next() {
  hc_state ^= hc_state << 13;
  hc_state ^= hc_state >> 7;
  hc_state ^= hc_state << 17;
  return hc_state;
}
/* Uniform in [0, 1). */
static inline double hc_urand() { return (double)(hc_next() >> 11) / 9007199254740992.0; }
template <class T> static void hc_fill(std::vector<T> &v, double lo, double hi) {
  for (auto &e : v) e = (T)(lo + (hi - lo) * hc_urand());
}
template <class T> static std::vector<T> hc_rand(size_t n, double lo, double hi) {
  std::vector<T> v(n);
  hc_fill(v, lo, hi);
  return v;
}

/* One check: the worst |got - want| / (1 + |want|) over the elements is at
 * most tol. nonfinite_ok: NaN in both places, or the same inf, agrees (NaN
 * or inf in one place fails); otherwise any NaN or inf fails. */
template <class T>
static void hc_close(const std::string &what, const std::vector<T> &got, const std::vector<T> &want, double tol,
                     bool nonfinite_ok = true) {
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); i++) {
    const double g = (double)got[i], w = (double)want[i];
    if (nonfinite_ok && ((std::isnan(g) && std::isnan(w)) || g == w)) continue;
    const double e = std::fabs(g - w) / (1 + std::fabs(w));
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  CHECK_MSG(got.size() == want.size() && worst <= tol,
            "%s: %zu vs %zu elements, worst relative error %g at %zu (got %.17g, want %.17g)", what.c_str(),
            got.size(), want.size(), worst, at, at < got.size() ? (double)got[at] : 0.0,
            at < want.size() ? (double)want[at] : 0.0);
}
/* One check: got and want are the same bits, element by element. */
template <class T>
static void hc_bits(const std::string &what, const std::vector<T> &got, const std::vector<T> &want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && std::memcmp(&got[i], &want[i], sizeof(T)) == 0) i++;
  CHECK_MSG(got.size() == want.size() && i == got.size(),
            "%s: %zu vs %zu elements, element %zu differs (got %.17g, want %.17g)", what.c_str(), got.size(),
            want.size(), i, i < got.size() ? (double)got[i] : 0.0, i < want.size() ? (double)want[i] : 0.0);
}
/* The name of dt 0 / 1. */
static inline const char *hc_dt(int dt) { return dt ? "f64" : "f32"; }
/* What outputs that the bodies assign hold before the call: no op or cell
 * yields it, so an element left unwritten fails its check. */
constexpr float kUnset = 777.0f;
#endif

#endif
