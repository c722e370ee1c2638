/* dl/ops/rnn.h - recurrent layers on the tape: Elman RNN (tanh or relu),
 * LSTM and GRU, one layer, one direction, batch-first, every time step
 * (or, with the _ex forms, each row's own number of steps).
 * Included by dl/ops.h (see there for the conventions every op follows).
 *
 *   dl_tensor *hn, *cn;
 *   dl_tensor *y = dl_t_lstm(tp, x, NULL, NULL, w_ih, w_hh, b_ih, b_hh, &hn, &cn);
 *   // x [B, T, I] -> y [B, T, H]; hn, cn [B, H]
 *   int64_t lengths[] = {5, 2, 7};      // rows of x padded to T = 7
 *   y = dl_t_lstm_ex(tp, x, NULL, NULL, w_ih, w_hh, b_ih, b_hh, &(dl_rnn_args){.lengths = lengths}, &hn, &cn);
 *   // y[b, t] = 0 for t >= lengths[b]; hn[b], cn[b] after step lengths[b] - 1
 *
 * Weights have PyTorch's layouts and gate orders (torch.nn.RNN / LSTM / GRU
 * with batch_first=True, the parameters weight_ih_l0, weight_hh_l0,
 * bias_ih_l0, bias_hh_l0):
 *   w_ih [G*H, I], w_hh [G*H, H], b_ih, b_hh [G*H] or NULL (no bias),
 *   G = 1 (RNN), 4 (LSTM: gates i, f, g, o), 3 (GRU: r, z, n).
 * x [B, T, I] with T >= 1; h0, c0 [B, H] or NULL (zeros). Every tensor f32
 * or f64, all one dtype; any of them may be a strided view.
 *
 * Math, per step t (a_* = x_t W_i*^T + b_i* + h_{t-1} W_h*^T + b_h*):
 *   RNN   h_t = tanh(a) or relu(a)
 *   LSTM  i = s(a_i), f = s(a_f), g = tanh(a_g), o = s(a_o)   (s: sigmoid)
 *         c_t = f c_{t-1} + i g,   h_t = o tanh(c_t)
 *   GRU   r = s(a_r), z = s(a_z),
 *         n = tanh(x_t W_in^T + b_in + r (h_{t-1} W_hn^T + b_hn))
 *         h_t = (1 - z) n + z h_{t-1}
 *         or, with dl_rnn_args.gru_reset_before_linear (ONNX's default),
 *         n = tanh(x_t W_in^T + b_in + (r h_{t-1}) W_hn^T + b_hn)
 * Returns y [B, T, H] (every h_t), contiguous, in the tape's arena (valid
 * until dl_tape_rewind). When h_n (c_n) is not NULL, *h_n (*c_n) receives the
 * last state h_{T-1} (c_{T-1}) [B, H] (each row's last real step with
 * lengths), contiguous, in the arena; a loss may
 * use y, h_n and c_n in any combination and the gradient flows through each.
 *
 * How it runs. The input projection of all time steps is ONE GEMM,
 * xp = dl_t_linear(x, w_ih, b_ih) on x seen as [B*T, I] (its backward, also
 * one GEMM each for x and w_ih, is linear's). The recurrence is one fused
 * node: per step one GEMM s = h_{t-1} w_hh^T ([B, H] x [H, G*H]) and one
 * element-wise kernel for the gates (over the batch rows, on the ctx's
 * OpenMP team above the parallel threshold). It saves the gate activations
 * [B, T, G*H] (GRU: r, z, n and W_hn h + b_hn) and the LSTM cell states
 * [B, T, H] for backward; under no-grad with no tangents it keeps only one
 * step of each. Backward (backpropagation through time), per step from the
 * last: the element-wise rule gives the pre-activation gradients da_t
 * (written straight into xp's gradient), then dh_{t-1} = da_t w_hh (one GEMM
 * per step); after the loop grad_w_hh += da^T [h_{-1} .. h_{T-2}] is one GEMM
 * over all B*T rows and grad_b_hh the column sums of da (for the GRU the
 * hidden part of the n gate's gradient is r * da_n). Results do not depend
 * on the thread count: every kernel is element-wise over batch rows, column
 * sums run in a fixed order, and the GEMMs split only their output.
 *
 * The GRU with the reset gate before the product needs r before the n
 * gate's GEMM, so a step is the r and z rows' GEMM, a kernel (r, z and
 * u = r h_{t-1}, kept as the GRU's fourth saved value), the GEMM
 * u w_hn^T, a kernel (n, h_t). Backward per step: a kernel (da_n, da_z,
 * dh z), du = da_n w_hn, a kernel (da_r = du h_{t-1} s'(r), dh += du r),
 * then dh += [da_r, da_z] w_h{r,z}; after the loop grad w_hn += da_n^T u
 * over all B*T rows. Tangents as the forward, with tu = tr h + r th.
 *
 * Variable lengths (the _ex ops, dl_rnn_args.lengths): at a step t past row
 * b's end the gate kernel writes y = 0 (and its tangent) and leaves the
 * state alone; at t = lengths[b] - 1 it writes row b of h_n and c_n. The
 * backward kernel writes da = 0 there and leaves dh and dc as they are, so
 * h_n's and c_n's gradients (dh, dc start as them) reach each row's last
 * step; on the rows it runs it leaves dh = 0 (GRU: dh z), and the step's
 * GEMM adds da_t w_hh. The GEMMs still cover every row.
 *
 * Forward mode: the tangent of every input (x, h0, c0, weights, biases) is
 * pushed through each step in the same forward pass (ts = th_{t-1} w_hh^T +
 * h_{t-1} tw_hh^T, then the gate rules' derivatives); y, h_n and c_n carry
 * tangents.
 *
 * Memory: outputs, saved activations and scratch come from the tape's arena;
 * no allocation besides the GEMM's packing cache (blas.h, grow-only).
 *
 * Device (DL_USE_CUDA): x on the GPU, on a device tape (every other tensor
 * and tangent on the GPU too), runs the same steps with device buffers from
 * the tape's device arena: the GEMMs through cuBLAS (dlg_gemm), each step's
 * gates and gate derivatives as one kernel over B x H (src_gpu/rnn.cu,
 * dl/gpu/rnn.h: the formulas above, operation for operation), grad_b_hh's
 * column sums in double (dlg_sum_axis). Per step: one GEMM and one launch
 * forward (three more GEMMs with tangents), one launch and one GEMM backward.
 */
#ifndef DL_OPS_RNN_H
#define DL_OPS_RNN_H

#include "core.h"
#include "shape.h"
#include "reduce.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY /* the library's code (nvcc sees only the scalar math) */

/* >>recurrent core ---------------------------------------------------------- */

/* Options of dl_t_rnn_ex, dl_t_lstm_ex and dl_t_gru_ex; a zero struct (or
 * NULL) is the plain op.
 *   lengths  [B] on the host, or NULL: row b of x [B, T, I] holds a sequence
 *            of lengths[b] steps (1..T) padded to T (PyTorch's
 *            pack_padded_sequence(x, lengths, batch_first=True) around the
 *            layer, then pad_packed_sequence). Steps t >= lengths[b] give
 *            y[b, t] = 0 and take no part: the padding of x gets no
 *            gradient, a gradient arriving at y[b, t] there is dropped, and
 *            h_n[b] (c_n[b]) is the state after step lengths[b] - 1. The
 *            array is copied; it may change after the call.
 *   gru_reset_before_linear  (dl_t_gru_ex only) 0: PyTorch's (and cuDNN's)
 *            GRU, n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn)); 1: the
 *            reset gate applied before the product, as in Cho et al. 2014,
 *            ONNX's GRU with linear_before_reset = 0 (its default) and
 *            Keras's reset_after=False:
 *            n = tanh(x W_in^T + b_in + (r h) W_hn^T + b_hn).
 *            Same parameters, names and layouts in both forms. */
typedef struct dl_rnn_args {
  const int64_t *lengths;      /* [B] steps of each row (1..T) on the host, or NULL (see above) */
  int gru_reset_before_linear; /* dl_t_gru_ex: 1 the reset gate before w_hn (see above) */
} dl_rnn_args;

enum { DL__RNN_TANH = 0, DL__RNN_RELU = 1, DL__RNN_LSTM = 2, DL__RNN_GRU = 3 };

/* What one recurrent call shares with its backward rule (tape arena). Row b
 * of a [B, T, W] buffer at step t starts at base + b * lb + t * lt; a stride
 * of 0 makes the buffer hold one step (overwritten in place) or one row
 * (the zero row of a missing h0). */
typedef struct dl__rnn {
  int kind, G, S;               /* DL__RNN_*; gates; saved values per hidden unit */
  int rb;                       /* GRU with the reset gate before the product (two phases a step) */
  int phase;                    /* rb: 0 the r and z gates (and u = r h_{t-1}), 1 the n gate and h_t */
  int64_t B, T, H;
  dl_ctx *ctx;
  dl_dtype dtype;
  const char *op;
  const void *xp;               /* [B, T, G*H] x w_ih^T + b_ih, contiguous */
  const void *whh;              /* [G*H, H] contiguous */
  const void *bhh;              /* [G*H] (the zero row when there is no b_hh) */
  const void *h0, *c0;          /* rows h0_ld / c0_ld apart (0: the zero row) */
  int64_t h0_ld, c0_ld;
  int has_h0;                   /* h0 given (not the zero row) */
  void *y;                      /* [B, T, H] the output */
  void *c;                      /* LSTM cell states, strides c_lb, c_lt */
  int64_t c_lb, c_lt;
  void *g;                      /* saved activations [.., S*H], strides g_lb, g_lt */
  int64_t g_lb, g_lt;
  void *s;                      /* [B, G*H] scratch: h_{t-1} w_hh^T */
  const void *zero;             /* G*H zeros */
  /* forward mode (ty == NULL when no input carries a tangent) */
  const void *txp;              /* xp's tangent, strides txp_lb, txp_lt (0, 0: zero) */
  int64_t txp_lb, txp_lt;
  const void *twhh;             /* w_hh's tangent [G*H, H] or NULL */
  const void *tbhh;             /* b_hh's tangent (or the zero row) */
  const void *th0, *tc0;        /* rows th0_ld / tc0_ld apart (0: the zero row) */
  int64_t th0_ld, tc0_ld;
  int has_th0;
  void *ty;                     /* [B, T, H] y's tangent */
  void *tc;                     /* [B, H] the LSTM cell's tangent, updated in place */
  void *ts;                     /* [B, G*H] scratch */
  void *tu;                     /* rb: [B, H] u's tangent */
  /* variable lengths: len[b] steps of row b are real (1..T), later steps
   * give y = 0 and leave the state alone; NULL: every row has T steps */
  const int64_t *len;
  /* h_n, c_n [B, H] (and their tangents): written by the kernel at each
   * row's last real step; NULL when not asked for */
  void *hn, *cno, *thn, *tcn;
  /* h_n's and c_n's nodes hand their gradients over during a backward walk */
  dl_tensor *hnt, *cn;
  uint64_t ghn_walk, gcn_walk;
  int ghn_set, gcn_set;
} dl__rnn;

/* Per-walk buffers of the backward rule: gy [B, T, H] (y's gradient),
 * (GRU with rb: the gradient of u = r h_{t-1} in du [B, H] between the two
 * phases of a step; dhs holds da_r, da_z, da_n, whose n part multiplies u),
 * dx [B, T, G*H] (pre-activation gradients: xp's gradient), dhs (GRU: the
 * gradient of h_{t-1} w_hh^T + b_hh; the others: dx), dh, dc [B, H]
 * (gradients flowing into step t from step t+1). */
typedef struct dl__rnn_bwbuf {
  const void *gy;
  void *dx, *dhs, *dh, *dc;
  void *du; /* rb: [B, H] the gradient of u = r h_{t-1} (da_n W_hn) */
} dl__rnn_bwbuf;

/* The element-wise kernels of one step for batch row b, once per float type:
 * dl__rnn_fwd_row_f32/f64 (forward, then the tangent when r->ty) and
 * dl__rnn_bwd_row_f32/f64 (backward). */
#define DL__RNN_KERNELS(FT, SFX)                                                             \
  DL_API void dl__rnn_fwd_row_##SFX(const dl__rnn *r, int64_t t, int64_t b) {                \
    const int64_t H = r->H, GH = (int64_t)r->G * H, bt = b * r->T + t;                       \
    const FT *xp = (const FT *)r->xp + bt * GH, *s = (const FT *)r->s + b * GH;              \
    const FT *bh = (const FT *)r->bhh;                                                       \
    const FT *hp = t ? (const FT *)r->y + (bt - 1) * H : (const FT *)r->h0 + b * r->h0_ld;   \
    FT *y = (FT *)r->y + bt * H;                                                             \
    FT *g = (FT *)r->g + b * r->g_lb + t * r->g_lt;                                          \
    FT *c = (FT *)r->c + b * r->c_lb + t * r->c_lt;                                          \
    const FT *cp = t ? c - r->c_lt : (const FT *)r->c0 + b * r->c0_ld;                       \
    const int64_t L = r->len ? r->len[b] : r->T;                                             \
    int64_t j;                                                                               \
    if (t >= L) { /* past the row's end: y = 0, the state stays as it was */                 \
      for (j = 0; j < H; j++) y[j] = 0;                                                      \
      if (r->rb)  /* u = r h_{t-1} = 0 (w_hn's gradient multiplies it over every row) */    \
        for (j = 0; j < H; j++) g[3 * H + j] = 0;                                            \
      if (r->ty)                                                                             \
        for (j = 0; j < H; j++) ((FT *)r->ty)[bt * H + j] = 0;                               \
      return;                                                                                \
    }                                                                                        \
    if (r->kind == DL__RNN_TANH) {                                                           \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) y[j] = dl_tanh_##SFX(xp[j] + s[j] + bh[j]);                    \
    } else if (r->kind == DL__RNN_RELU) {                                                    \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        const FT a = xp[j] + s[j] + bh[j];                                                   \
        y[j] = a > 0 ? a : (FT)0;                                                            \
      }                                                                                      \
    } else if (r->kind == DL__RNN_LSTM) {                                                    \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        const FT i_ = dl_sigmoid_##SFX(xp[j] + s[j] + bh[j]);                                \
        const FT f_ = dl_sigmoid_##SFX(xp[H + j] + s[H + j] + bh[H + j]);                    \
        const FT g_ = dl_tanh_##SFX(xp[2 * H + j] + s[2 * H + j] + bh[2 * H + j]);           \
        const FT o_ = dl_sigmoid_##SFX(xp[3 * H + j] + s[3 * H + j] + bh[3 * H + j]);        \
        const FT c_ = f_ * cp[j] + i_ * g_;                                                  \
        c[j] = c_;                                                                           \
        y[j] = o_ * dl_tanh_##SFX(c_);                                                       \
        g[j] = i_;                                                                           \
        g[H + j] = f_;                                                                       \
        g[2 * H + j] = g_;                                                                   \
        g[3 * H + j] = o_;                                                                   \
      }                                                                                      \
    } else if (r->rb && r->phase == 0) { /* r, z and u = r h_{t-1} (g's 4th part) */         \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        const FT r_ = dl_sigmoid_##SFX(xp[j] + (s[j] + bh[j]));                              \
        g[j] = r_;                                                                           \
        g[H + j] = dl_sigmoid_##SFX(xp[H + j] + (s[H + j] + bh[H + j]));                     \
        g[3 * H + j] = r_ * hp[j];                                                           \
      }                                                                                      \
    } else if (r->rb) { /* s's n part is u w_hn^T now */                                     \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        const FT z_ = g[H + j];                                                              \
        const FT n_ = dl_tanh_##SFX(xp[2 * H + j] + (s[2 * H + j] + bh[2 * H + j]));         \
        y[j] = ((FT)1 - z_) * n_ + z_ * hp[j];                                               \
        g[2 * H + j] = n_;                                                                   \
      }                                                                                      \
    } else {                                                                                 \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        const FT hn_ = s[2 * H + j] + bh[2 * H + j];                                         \
        const FT r_ = dl_sigmoid_##SFX(xp[j] + (s[j] + bh[j]));                              \
        const FT z_ = dl_sigmoid_##SFX(xp[H + j] + (s[H + j] + bh[H + j]));                  \
        const FT n_ = dl_tanh_##SFX(xp[2 * H + j] + r_ * hn_);                               \
        y[j] = ((FT)1 - z_) * n_ + z_ * hp[j];                                               \
        g[j] = r_;                                                                           \
        g[H + j] = z_;                                                                       \
        g[2 * H + j] = n_;                                                                   \
        g[3 * H + j] = hn_;                                                                  \
      }                                                                                      \
    }                                                                                        \
    if (r->ty) { /* the tangent of step t */                                                 \
      const FT *tx = (const FT *)r->txp + b * r->txp_lb + t * r->txp_lt;                     \
      const FT *ts = (const FT *)r->ts + b * GH, *tb = (const FT *)r->tbhh;                  \
      FT *ty = (FT *)r->ty + bt * H;                                                         \
      if (r->kind == DL__RNN_TANH) {                                                         \
        DL__RSIMD                                                                            \
        for (j = 0; j < H; j++) ty[j] = ((FT)1 - y[j] * y[j]) * (tx[j] + ts[j] + tb[j]);     \
      } else if (r->kind == DL__RNN_RELU) {                                                  \
        DL__RSIMD                                                                            \
        for (j = 0; j < H; j++) ty[j] = y[j] > 0 ? tx[j] + ts[j] + tb[j] : (FT)0;            \
      } else if (r->kind == DL__RNN_LSTM) {                                                  \
        FT *tc = (FT *)r->tc + b * H;                                                        \
        DL__RSIMD                                                                            \
        for (j = 0; j < H; j++) {                                                            \
          const FT i_ = g[j], f_ = g[H + j], g_ = g[2 * H + j], o_ = g[3 * H + j];           \
          const FT ti = i_ * ((FT)1 - i_) * (tx[j] + ts[j] + tb[j]);                         \
          const FT tf = f_ * ((FT)1 - f_) * (tx[H + j] + ts[H + j] + tb[H + j]);             \
          const FT tg = ((FT)1 - g_ * g_) * (tx[2 * H + j] + ts[2 * H + j] + tb[2 * H + j]); \
          const FT to = o_ * ((FT)1 - o_) * (tx[3 * H + j] + ts[3 * H + j] + tb[3 * H + j]); \
          const FT k_ = dl_tanh_##SFX(c[j]);                                                 \
          const FT tc_ = tf * cp[j] + f_ * tc[j] + ti * g_ + i_ * tg;                        \
          tc[j] = tc_;                                                                       \
          ty[j] = to * k_ + o_ * ((FT)1 - k_ * k_) * tc_;                                    \
        }                                                                                    \
      } else if (r->rb && r->phase == 0) { /* u's tangent tr h_{t-1} + r th_{t-1} */        \
        const FT *thp = t ? ty - H : (const FT *)r->th0 + b * r->th0_ld;                     \
        FT *tu = (FT *)r->tu + b * H;                                                        \
        DL__RSIMD                                                                            \
        for (j = 0; j < H; j++) {                                                            \
          const FT r_ = g[j];                                                                \
          const FT tr = r_ * ((FT)1 - r_) * (tx[j] + ts[j] + tb[j]);                         \
          tu[j] = tr * hp[j] + r_ * thp[j];                                                  \
        }                                                                                    \
      } else if (r->rb) { /* ts's n part is tu w_hn^T + u tw_hn^T now */                    \
        const FT *thp = t ? ty - H : (const FT *)r->th0 + b * r->th0_ld;                     \
        DL__RSIMD                                                                            \
        for (j = 0; j < H; j++) {                                                            \
          const FT z_ = g[H + j], n_ = g[2 * H + j];                                         \
          const FT tz = z_ * ((FT)1 - z_) * (tx[H + j] + ts[H + j] + tb[H + j]);             \
          const FT tn = ((FT)1 - n_ * n_) * (tx[2 * H + j] + (ts[2 * H + j] + tb[2 * H + j])); \
          ty[j] = ((FT)1 - z_) * tn + tz * (hp[j] - n_) + z_ * thp[j];                       \
        }                                                                                    \
      } else {                                                                               \
        const FT *thp = t ? ty - H : (const FT *)r->th0 + b * r->th0_ld;                     \
        DL__RSIMD                                                                            \
        for (j = 0; j < H; j++) {                                                            \
          const FT r_ = g[j], z_ = g[H + j], n_ = g[2 * H + j], hn_ = g[3 * H + j];          \
          const FT thn = ts[2 * H + j] + tb[2 * H + j];                                      \
          const FT tr = r_ * ((FT)1 - r_) * (tx[j] + ts[j] + tb[j]);                         \
          const FT tz = z_ * ((FT)1 - z_) * (tx[H + j] + ts[H + j] + tb[H + j]);             \
          const FT tn = ((FT)1 - n_ * n_) * (tx[2 * H + j] + tr * hn_ + r_ * thn);           \
          ty[j] = ((FT)1 - z_) * tn + tz * (hp[j] - n_) + z_ * thp[j];                       \
        }                                                                                    \
      }                                                                                      \
    }                                                                                        \
    if (t == L - 1 && !(r->rb && r->phase == 0)) { /* the row's last step: h_n, c_n, tangents */ \
      if (r->hn) memcpy((FT *)r->hn + b * H, y, (size_t)H * sizeof(FT));                    \
      if (r->cno) memcpy((FT *)r->cno + b * H, c, (size_t)H * sizeof(FT));                   \
      if (r->thn) memcpy((FT *)r->thn + b * H, (FT *)r->ty + bt * H, (size_t)H * sizeof(FT)); \
      if (r->tcn) memcpy((FT *)r->tcn + b * H, (FT *)r->tc + b * H, (size_t)H * sizeof(FT)); \
    }                                                                                        \
  }                                                                                          \
  DL_API void dl__rnn_bwd_row_##SFX(const dl__rnn *r, const dl__rnn_bwbuf *w, int64_t t,     \
                                    int64_t b) {                                             \
    const int64_t H = r->H, GH = (int64_t)r->G * H, bt = b * r->T + t;                       \
    const FT *gy = (const FT *)w->gy + bt * H, *y = (const FT *)r->y + bt * H;               \
    const FT *g = (const FT *)r->g + b * r->g_lb + t * r->g_lt;                              \
    FT *dx = (FT *)w->dx + bt * GH, *dh = (FT *)w->dh + b * H, *dc = (FT *)w->dc + b * H;    \
    int64_t j;                                                                               \
    if (r->len && t >= r->len[b]) { /* past the row's end: no gradient, dh and dc pass */    \
      for (j = 0; j < GH; j++) dx[j] = 0;                                                    \
      if (w->dhs != w->dx)                                                                   \
        for (j = 0; j < GH; j++) ((FT *)w->dhs)[bt * GH + j] = 0;                            \
      return;                                                                                \
    }                                                                                        \
    if (r->kind == DL__RNN_TANH) {                                                           \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        dx[j] = (gy[j] + dh[j]) * ((FT)1 - y[j] * y[j]);                                     \
        dh[j] = 0;                                                                           \
      }                                                                                      \
    } else if (r->kind == DL__RNN_RELU) {                                                    \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        dx[j] = y[j] > 0 ? gy[j] + dh[j] : (FT)0;                                            \
        dh[j] = 0;                                                                           \
      }                                                                                      \
    } else if (r->kind == DL__RNN_LSTM) {                                                    \
      const FT *c = (const FT *)r->c + b * r->c_lb + t * r->c_lt;                            \
      const FT *cp = t ? c - r->c_lt : (const FT *)r->c0 + b * r->c0_ld;                     \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        const FT i_ = g[j], f_ = g[H + j], g_ = g[2 * H + j], o_ = g[3 * H + j];             \
        const FT k_ = dl_tanh_##SFX(c[j]), dht = gy[j] + dh[j];                              \
        const FT dct = dc[j] + dht * o_ * ((FT)1 - k_ * k_);                                 \
        dx[j] = dct * g_ * (i_ * ((FT)1 - i_));                                              \
        dx[H + j] = dct * cp[j] * (f_ * ((FT)1 - f_));                                       \
        dx[2 * H + j] = dct * i_ * ((FT)1 - g_ * g_);                                        \
        dx[3 * H + j] = dht * k_ * (o_ * ((FT)1 - o_));                                      \
        dc[j] = dct * f_;                                                                    \
        dh[j] = 0;                                                                           \
      }                                                                                      \
    } else if (r->rb && r->phase == 0) { /* da_n, da_z; then du = da_n w_hn (a GEMM) */      \
      const FT *hp = t ? y - H : (const FT *)r->h0 + b * r->h0_ld;                           \
      FT *ds = (FT *)w->dhs + bt * GH;                                                       \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        const FT z_ = g[H + j], n_ = g[2 * H + j];                                           \
        const FT dht = gy[j] + dh[j];                                                        \
        const FT dan = dht * ((FT)1 - z_) * ((FT)1 - n_ * n_);                               \
        const FT daz = dht * (hp[j] - n_) * (z_ * ((FT)1 - z_));                             \
        dh[j] = dht * z_;                                                                    \
        dx[H + j] = daz;                                                                     \
        dx[2 * H + j] = dan;                                                                 \
        ds[H + j] = daz;                                                                     \
        ds[2 * H + j] = dan;                                                                 \
      }                                                                                      \
    } else if (r->rb) { /* da_r = du h_{t-1} s'(r), dh += du r */                            \
      const FT *hp = t ? y - H : (const FT *)r->h0 + b * r->h0_ld;                           \
      const FT *du = (const FT *)w->du + b * H;                                              \
      FT *ds = (FT *)w->dhs + bt * GH;                                                       \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        const FT r_ = g[j];                                                                  \
        const FT dar = du[j] * hp[j] * (r_ * ((FT)1 - r_));                                  \
        dx[j] = dar;                                                                         \
        ds[j] = dar;                                                                         \
        dh[j] += du[j] * r_;                                                                 \
      }                                                                                      \
    } else {                                                                                 \
      const FT *hp = t ? y - H : (const FT *)r->h0 + b * r->h0_ld;                           \
      FT *ds = (FT *)w->dhs + bt * GH;                                                       \
      DL__RSIMD                                                                              \
      for (j = 0; j < H; j++) {                                                              \
        const FT r_ = g[j], z_ = g[H + j], n_ = g[2 * H + j], hn_ = g[3 * H + j];            \
        const FT dht = gy[j] + dh[j];                                                        \
        const FT dan = dht * ((FT)1 - z_) * ((FT)1 - n_ * n_);                               \
        const FT dar = dan * hn_ * (r_ * ((FT)1 - r_));                                      \
        const FT daz = dht * (hp[j] - n_) * (z_ * ((FT)1 - z_));                             \
        dh[j] = dht * z_;                                                                    \
        dx[j] = dar;                                                                         \
        dx[H + j] = daz;                                                                     \
        dx[2 * H + j] = dan;                                                                 \
        ds[j] = dar;                                                                         \
        ds[H + j] = daz;                                                                     \
        ds[2 * H + j] = dan * r_;                                                            \
      }                                                                                      \
    }                                                                                        \
  }
DL__RNN_KERNELS(float, f32)
DL__RNN_KERNELS(double, f64)

/* C = op(A) op(B) + beta C in r's dtype (blas.h's row-major GEMM). */
DL_API void dl__rnn_gemm(dl_ctx *ctx, dl_dtype dt, dl_trans ta, dl_trans tb, int64_t M, int64_t N,
                         int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb,
                         double beta, void *C, int64_t ldc) {
  if (dt == DL_F32)
    dl_gemm_f32(ctx, ta, tb, M, N, K, 1.0f, (const float *)A, lda, (const float *)B, ldb, (float)beta,
                (float *)C, ldc);
  else
    dl_gemm_f64(ctx, ta, tb, M, N, K, 1.0, (const double *)A, lda, (const double *)B, ldb, beta,
                (double *)C, ldc);
}

/* The element-wise kernel of step t over all batch rows (bw NULL: forward). */
DL_API void dl__rnn_rows(const dl__rnn *r, const dl__rnn_bwbuf *bw, int64_t t) {
  const int64_t work = r->B * r->G * r->H * (r->ty ? 2 : 1);
  if (r->dtype == DL_F32) {
    if (bw) DL_PARALLEL_FOR(r->ctx, work, r->B, b, { dl__rnn_bwd_row_f32(r, bw, t, b); });
    else DL_PARALLEL_FOR(r->ctx, work, r->B, b, { dl__rnn_fwd_row_f32(r, t, b); });
  } else {
    if (bw) DL_PARALLEL_FOR(r->ctx, work, r->B, b, { dl__rnn_bwd_row_f64(r, bw, t, b); });
    else DL_PARALLEL_FOR(r->ctx, work, r->B, b, { dl__rnn_fwd_row_f64(r, t, b); });
  }
}

/* dst[j] += sum over the R rows of src [R, N] (contiguous), column blocks on
 * the team, each column summed in row order (in double for f32). */
DL_API void dl__rnn_colsum_add(dl_ctx *ctx, dl_dtype dt, const void *src, int64_t R, int64_t N, void *dst) {
  const int64_t JB = 256, nb = (N + JB - 1) / JB;
  DL_PARALLEL_FOR(ctx, R * N, nb, blk, {
    const int64_t j0 = blk * JB, j1 = j0 + JB < N ? j0 + JB : N;
    double acc[256];
    int64_t i, j;
    for (j = j0; j < j1; j++) acc[j - j0] = 0;
    if (dt == DL_F32) {
      for (i = 0; i < R; i++) {
        const float *row = (const float *)src + i * N;
        for (j = j0; j < j1; j++) acc[j - j0] += (double)row[j];
      }
      for (j = j0; j < j1; j++) ((float *)dst)[j] += (float)acc[j - j0];
    } else {
      for (i = 0; i < R; i++) {
        const double *row = (const double *)src + i * N;
        for (j = j0; j < j1; j++) acc[j - j0] += row[j];
      }
      for (j = j0; j < j1; j++) ((double *)dst)[j] += acc[j - j0];
    }
  });
}

/* dst [B, H] contiguous (+)= rows of src ld elements apart. */
DL_API void dl__rnn_rows_copy(dl_dtype dt, void *dst, const void *src, int64_t B, int64_t H, int64_t ld,
                              int add) {
  int64_t b, j;
  for (b = 0; b < B; b++) {
    if (dt == DL_F32) {
      float *d = (float *)dst + b * H;
      const float *s = (const float *)src + b * ld;
      for (j = 0; j < H; j++) d[j] = add ? d[j] + s[j] : s[j];
    } else {
      double *d = (double *)dst + b * H;
      const double *s = (const double *)src + b * ld;
      for (j = 0; j < H; j++) d[j] = add ? d[j] + s[j] : s[j];
    }
  }
}

/* Whether h_n's (c_n's) node handed its gradient over in this walk. */
DL_API int dl__rnn_handed(const dl_tape *tp, const dl_tensor *t, int set, uint64_t walk) {
  return t && set && walk == tp->backwards && t->grad;
}

#ifdef DL_USE_CUDA
/* >>device ------------------------------------------------------------------
 * On a device tape the same recurrence runs with every buffer in device
 * memory: the GEMMs through dlg_gemm (cuBLAS), each step's gates through
 * dlg_rnn_fwd / dlg_rnn_bwd (src_gpu/rnn.cu: DL__RNN_KERNELS' formulas, one
 * thread per batch row and hidden unit), copies through dlg_move, the bias
 * gradient's column sums through dlg_sum_axis (in double). */

DL__STATIC_ASSERT((int)DL__RNN_TANH == (int)DLG_RNN_TANH && (int)DL__RNN_RELU == (int)DLG_RNN_RELU &&
                   (int)DL__RNN_LSTM == (int)DLG_RNN_LSTM && (int)DL__RNN_GRU == (int)DLG_RNN_GRU,
               "dl: ops/rnn.h's DL__RNN_* and dl/gpu/rnn.h's DLG_RNN_* must agree");

/* r's buffers as the device kernels take them. */
DL_API dlg_rnn dl__rnn_dlg(const dl__rnn *r) {
  dlg_rnn d;
  memset(&d, 0, sizeof d);
  d.kind = r->kind;
  d.B = r->B;
  d.T = r->T;
  d.H = r->H;
  d.xp = r->xp;
  d.s = r->s;
  d.bhh = r->bhh;
  d.h0 = r->h0;
  d.c0 = r->c0;
  d.h0_ld = r->h0_ld;
  d.c0_ld = r->c0_ld;
  d.y = r->y;
  d.c = r->c;
  d.g = r->g;
  d.c_lb = r->c_lb;
  d.c_lt = r->c_lt;
  d.g_lb = r->g_lb;
  d.g_lt = r->g_lt;
  d.txp = r->txp;
  d.tbhh = r->tbhh;
  d.th0 = r->th0;
  d.ts = r->ts;
  d.txp_lb = r->txp_lb;
  d.txp_lt = r->txp_lt;
  d.th0_ld = r->th0_ld;
  d.ty = r->ty;
  d.tc = r->tc;
  d.len = r->len;
  d.rb = r->rb;
  d.tu = r->tu;
  d.hn = r->hn;
  d.cn = r->cno;
  d.thn = r->thn;
  d.tcn = r->tcn;
  return d;
}
/* C = op(A) op(B) + beta C on the device (row-major, dlg_gemm); `on` (a
 * device tensor of the op) names the device and the op's shapes in a panic. */
DL_API void dl__rnn_gemm_dev(const dl_tensor *on, const char *op, int ta, int tb, int64_t M, int64_t N, int64_t K,
                             const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C,
                             int64_t ldc) {
  dl__gpu_ok(on, op, dlg_gemm(dl__gpu_h(on, op), (int)on->dtype, ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc));
}
/* dst (+)= src over [R, W] on the device: row r of dst at dst + r dld, of
 * src at src + r sld (elements), add 0 copies, 1 adds. */
DL_API void dl__rnn_move_dev(const dl_tensor *on, const char *op, void *dst, int64_t dld, const void *src,
                             int64_t sld, int64_t R, int64_t W, int add) {
  int64_t shape[2], ys[2], xs[2];
  shape[0] = R;
  shape[1] = W;
  ys[0] = dld;
  ys[1] = 1;
  xs[0] = sld;
  xs[1] = 1;
  dl__gpu_ok(on, op, dlg_move(dl__gpu_h(on, op), (int)on->dtype, (int)dl_dtype_size(on->dtype), add, 2, shape, dst, ys,
                              src, xs));
}
/* bytes of zeroed device scratch of tp (valid until the rewind). */
DL_API void *dl__rnn_zeros_dev(dl_tape *tp, const dl_tensor *on, const char *op, size_t bytes) {
  void *p = dl_tape_dev_scratch(tp, op, bytes);
  dl__gpu_ok(on, op, dlg_memset0(dl__gpu_h(on, op), p, bytes));
  return p;
}

/* dl__rnn_bw on the device: the same walk, step by step from the last. */
DL_API void dl__rnn_bw_gpu(dl_tape *tp, dl_node *n) {
  dl__rnn *r = (dl__rnn *)n->user;
  const int64_t B = r->B, T = r->T, H = r->H, GH = (int64_t)r->G * H;
  const size_t es = dl_dtype_size(r->dtype);
  const dl_tensor *on = n->out->grad;
  const char *op = r->op;
  dlg_handle *h = dl__gpu_h(on, op);
  dl_tensor *gxp = dl_tape_grad(tp, n->in[0]), *gw = dl_tape_grad(tp, n->in[1]);
  dl_tensor *gb = dl_tape_grad(tp, n->in[2]), *gh0 = dl_tape_grad(tp, n->in[3]);
  dl_tensor *gc0 = dl_tape_grad(tp, n->in[4]);
  dlg_rnn d = dl__rnn_dlg(r);
  dlg_rnn_bw w;
  int64_t t;
  w.gy = on->data;
  w.dx = gxp ? gxp->data : dl_tape_dev_scratch(tp, op, (size_t)(B * T * GH) * es);
  w.dhs = r->kind == DL__RNN_GRU ? dl_tape_dev_scratch(tp, op, (size_t)(B * T * GH) * es) : w.dx;
  /* dh and dc start as h_n's and c_n's gradients (as on the host) */
  if (dl__rnn_handed(tp, r->hnt, r->ghn_set, r->ghn_walk)) {
    w.dh = dl_tape_dev_scratch(tp, op, (size_t)(B * H) * es);
    dl__gpu_ok(on, op, dlg_copy(h, w.dh, r->hnt->grad->data, (size_t)(B * H) * es, DLG_D2D));
  } else {
    w.dh = dl__rnn_zeros_dev(tp, on, op, (size_t)(B * H) * es);
  }
  if (dl__rnn_handed(tp, r->cn, r->gcn_set, r->gcn_walk)) {
    w.dc = dl_tape_dev_scratch(tp, op, (size_t)(B * H) * es);
    dl__gpu_ok(on, op, dlg_copy(h, w.dc, r->cn->grad->data, (size_t)(B * H) * es, DLG_D2D));
  } else {
    w.dc = dl__rnn_zeros_dev(tp, on, op, (size_t)(B * H) * es);
  }
  w.du = r->rb ? dl_tape_dev_scratch(tp, op, (size_t)(B * H) * es) : NULL;
  for (t = T - 1; t >= 0; t--) {
    if (r->rb) { /* as on the host: phase 0, du = da_n w_hn, phase 1 */
      d.phase = 0;
      dl__gpu_ok(on, op, dlg_rnn_bwd(h, (int)r->dtype, &d, &w, t));
      dl__rnn_gemm_dev(on, op, 0, 0, B, H, H, (const char *)w.dhs + (size_t)(t * GH + 2 * H) * es, T * GH,
                       (const char *)r->whh + (size_t)(2 * H * H) * es, H, 0.0, w.du, H);
      d.phase = 1;
    }
    dl__gpu_ok(on, op, dlg_rnn_bwd(h, (int)r->dtype, &d, &w, t));
    if (t > 0 || gh0) /* dh_{t-1} += da_t w_hh (rb: the r and z rows) */
      dl__rnn_gemm_dev(on, op, 0, 0, B, H, r->rb ? 2 * H : GH, (const char *)w.dhs + (size_t)(t * GH) * es, T * GH,
                       r->whh, H, 1.0, w.dh, H);
  }
  if (gh0) dl__rnn_move_dev(on, op, gh0->data, H, w.dh, H, B, H, 1);
  if (gc0) dl__rnn_move_dev(on, op, gc0->data, H, w.dc, H, B, H, 1);
  if (gw) { /* grad_w_hh += da^T [h_{-1}, ..., h_{T-2}] over all B*T rows */
    char *hp = (char *)dl_tape_dev_scratch(tp, op, (size_t)(B * T * H) * es);
    if (r->has_h0) dl__rnn_move_dev(on, op, hp, T * H, r->h0, r->h0_ld, B, H, 0);
    else dl__gpu_ok(on, op, dlg_memset0(h, hp, (size_t)(B * T * H) * es));
    if (T > 1) dl__rnn_move_dev(on, op, hp + (size_t)H * es, T * H, r->y, T * H, B, (T - 1) * H, 0);
    dl__rnn_gemm_dev(on, op, 1, 0, r->rb ? 2 * H : GH, H, B * T, w.dhs, GH, hp, H, 1.0, gw->data, H);
    if (r->rb) /* w_hn's rows: da_n^T [u_0, ..., u_{T-1}] (u saved in g) */
      dl__rnn_gemm_dev(on, op, 1, 0, H, H, B * T, (const char *)w.dhs + (size_t)(2 * H) * es, GH,
                       (const char *)r->g + (size_t)(3 * H) * es, r->S * H, 1.0,
                       (char *)gw->data + (size_t)(2 * H * H) * es, H);
  }
  if (gb) dl__gpu_ok(on, op, dlg_sum_axis(h, (int)r->dtype, gb->data, w.dhs, 1, B * T, GH, 1.0, 1));
}
#endif

/* >>second order (dl_hvp) -------------------------------------------------- */

/* One leaf of dl__rnn_hvp's private tape: t's values (or zeros [d0, d1] when
 * t is NULL), requiring a gradient, carrying t's tangent; in *slot (the
 * caller's struct; its gradient is freed by dl__rnn_hvp). */
DL_API dl_tensor *dl__rnn_hvp_leaf(dl_tape *sub, dl_tensor *slot, const dl_tensor *t, dl_dtype dt, int64_t d0,
                                   int64_t d1, int nd) {
  const int64_t shape[2] = {d0, d1};
  if (t) {
    *slot = *t;
    slot->flags = 0;
    slot->node = NULL;
    slot->grad = NULL;
    slot->sgrad = NULL;
  } else {
    dl_tensor *z = dl_tape_zeros(sub, "dl_hvp", dt, nd, shape);
    *slot = *z;
    slot->flags = 0;
    slot->tangent = NULL;
  }
  dl_requires_grad(slot);
  return slot;
}
/* The recurrence of node n written with the library's ops on a private
 * tape (per step: one matmul with w_hh, the gates element-wise, a mask per
 * row for variable lengths), then dl_hvp of sum(y gy) + sum(h_n g_hn) +
 * sum(c_n g_cn), the gradients and their tangents carried over from the
 * walk: the tangents of the gradients of xp, w_hh, b_hh, h0, c0 are added
 * into the walk's. A Hessian-vector product through an RNN stores every
 * step's gates twice over (this tape and the walk's); the training step
 * keeps its fused kernels. */
DL_API void dl__rnn_hvp(dl_tape *tp, dl_node *n, dl_tensor *const *g) {
  const dl__rnn *r = (const dl__rnn *)n->user;
  const int64_t B = r->B, T = r->T, H = r->H, G = r->G, GH = G * H;
  const dl_dtype dt = r->dtype;
  dl_tensor lf[5], *xp, *whh, *bhh, *h, *c = NULL, *ys[4096], *y, *loss;
  dl_tape sub;
  int64_t t, b;
  int k;
  if (T > 4096) DL_PANIC(tp->ctx, "dl_hvp", "%s: at most 4096 steps in a Hessian-vector product, not %lld", n->op,
                         (long long)T);
  if (dl_tape_init(&sub, tp->ctx, 0) != DL_OK) dl__tape_nomem(tp, "dl_hvp", "a private tape", 0);
  xp = dl__rnn_hvp_leaf(&sub, &lf[0], dl__t_contig(&sub, "dl_hvp", n->in[0]), dt, B, T, 2);
  xp->tangent = n->in[0]->tangent;
  whh = dl__rnn_hvp_leaf(&sub, &lf[1], n->in[1], dt, GH, H, 2);
  bhh = dl__rnn_hvp_leaf(&sub, &lf[2], n->in[2], dt, GH, 0, 1);
  h = dl__rnn_hvp_leaf(&sub, &lf[3], n->in[3], dt, B, H, 2);
  if (r->kind == DL__RNN_LSTM) c = dl__rnn_hvp_leaf(&sub, &lf[4], n->in[4], dt, B, H, 2);
  for (t = 0; t < T; t++) {
    dl_tensor *xt = dl_t_reshape(&sub, dl_t_slice(&sub, xp, 1, t, t + 1, 1), 2, DL__I64S(B, GH));
    dl_tensor *hn, *cn = NULL;
    if (r->kind == DL__RNN_GRU) {
      dl_tensor *whrz = dl_t_slice(&sub, whh, 0, 0, 2 * H, 1), *whn = dl_t_slice(&sub, whh, 0, 2 * H, GH, 1);
      dl_tensor *brz = dl_t_slice(&sub, bhh, 0, 0, 2 * H, 1), *bn = dl_t_slice(&sub, bhh, 0, 2 * H, GH, 1);
      dl_tensor *srz = dl_t_linear(&sub, h, whrz, brz);
      dl_tensor *rg = dl_t_sigmoid(&sub, dl_t_add(&sub, dl_t_slice(&sub, xt, 1, 0, H, 1), dl_t_slice(&sub, srz, 1, 0, H, 1)));
      dl_tensor *zg = dl_t_sigmoid(&sub, dl_t_add(&sub, dl_t_slice(&sub, xt, 1, H, 2 * H, 1),
                                                  dl_t_slice(&sub, srz, 1, H, 2 * H, 1)));
      dl_tensor *q = r->rb ? dl_t_linear(&sub, dl_t_mul(&sub, rg, h), whn, bn)
                           : dl_t_mul(&sub, rg, dl_t_linear(&sub, h, whn, bn));
      dl_tensor *ng = dl_t_tanh(&sub, dl_t_add(&sub, dl_t_slice(&sub, xt, 1, 2 * H, GH, 1), q));
      hn = dl_t_add(&sub, dl_t_mul(&sub, dl_t_add_scalar(&sub, dl_t_neg(&sub, zg), 1.0), ng), dl_t_mul(&sub, zg, h));
    } else {
      dl_tensor *a = dl_t_add(&sub, xt, dl_t_linear(&sub, h, whh, bhh));
      if (r->kind == DL__RNN_TANH) hn = dl_t_tanh(&sub, a);
      else if (r->kind == DL__RNN_RELU) hn = dl_t_relu(&sub, a);
      else {
        dl_tensor *ig = dl_t_sigmoid(&sub, dl_t_slice(&sub, a, 1, 0, H, 1));
        dl_tensor *fg = dl_t_sigmoid(&sub, dl_t_slice(&sub, a, 1, H, 2 * H, 1));
        dl_tensor *gg = dl_t_tanh(&sub, dl_t_slice(&sub, a, 1, 2 * H, 3 * H, 1));
        dl_tensor *og = dl_t_sigmoid(&sub, dl_t_slice(&sub, a, 1, 3 * H, 4 * H, 1));
        cn = dl_t_add(&sub, dl_t_mul(&sub, fg, c), dl_t_mul(&sub, ig, gg));
        hn = dl_t_mul(&sub, og, dl_t_tanh(&sub, cn));
      }
    }
    if (r->len) { /* rows past their end: y 0, the state kept */
      dl_tensor *m = dl_tape_out(&sub, "dl_hvp", dt, 2, DL__I64S(B, 1));
      for (b = 0; b < B; b++) dl__set_at(m, b, t < r->len[b] ? 1.0 : 0.0);
      ys[t] = dl_t_mul(&sub, hn, m);
      h = dl_t_add(&sub, ys[t], dl_t_mul(&sub, h, dl_t_add_scalar(&sub, dl_t_neg(&sub, m), 1.0)));
      if (cn) c = dl_t_add(&sub, dl_t_mul(&sub, cn, m), dl_t_mul(&sub, c, dl_t_add_scalar(&sub, dl_t_neg(&sub, m), 1.0)));
    } else {
      ys[t] = hn;
      h = hn;
      if (cn) c = cn;
    }
  }
  y = dl_t_stack(&sub, (int)T, ys, 1);
  loss = dl_t_sum_all(&sub, dl_t_mul(&sub, y, n->out->grad)); /* gy with its tangent */
  if (dl__rnn_handed(tp, r->hnt, r->ghn_set, r->ghn_walk))
    loss = dl_t_add(&sub, loss, dl_t_sum_all(&sub, dl_t_mul(&sub, h, r->hnt->grad)));
  if (c && dl__rnn_handed(tp, r->cn, r->gcn_set, r->gcn_walk))
    loss = dl_t_add(&sub, loss, dl_t_sum_all(&sub, dl_t_mul(&sub, c, r->cn->grad)));
  dl_hvp(&sub, loss, NULL);
  for (k = 0; k < 5; k++) {
    if (k == 4 && r->kind != DL__RNN_LSTM) continue;
    if (g[k] && lf[k].grad && lf[k].grad->tangent) dl_add_into(g[k]->tangent, g[k]->tangent, lf[k].grad->tangent);
    dl_tensor_free(lf[k].grad);
  }
  dl_tape_free(&sub);
}

/* Backward of the recurrence: in = {xp, w_hh, b_hh, h0, c0}; n->user the dl__rnn. */
DL_API void dl__rnn_bw(dl_tape *tp, dl_node *n) {
  dl__rnn *r = (dl__rnn *)n->user;
  const int64_t B = r->B, T = r->T, H = r->H, GH = (int64_t)r->G * H;
  const size_t es = dl_dtype_size(r->dtype);
  const dl_dtype dt = r->dtype;
  dl_tensor *gxp = dl_tape_grad(tp, n->in[0]), *gw = dl_tape_grad(tp, n->in[1]);
  dl_tensor *gb = dl_tape_grad(tp, n->in[2]), *gh0 = dl_tape_grad(tp, n->in[3]);
  dl_tensor *gc0 = dl_tape_grad(tp, n->in[4]);
  dl__rnn_bwbuf w;
  int64_t t;
#ifdef DL_USE_CUDA
  if (n->out->grad->device == DL_CUDA) {
    dl__rnn_bw_gpu(tp, n);
    return;
  }
#endif
  /* xp is this op's private input (made by dl__rnn_run for this node only),
   * so its fresh gradient is where the pre-activation gradients go */
  w.gy = n->out->grad->data;
  w.dx = gxp ? gxp->data : dl_tape_scratch(tp, r->op, (size_t)(B * T * GH) * es);
  w.dhs = r->kind == DL__RNN_GRU ? dl_tape_scratch(tp, r->op, (size_t)(B * T * GH) * es) : w.dx;
  w.dh = dl_tape_scratch(tp, r->op, (size_t)(B * H) * es);
  w.dc = dl_tape_scratch(tp, r->op, (size_t)(B * H) * es);
  /* dh and dc start as h_n's and c_n's gradients (each row's last real
   * step reads them; steps past a row's end pass them on unchanged) */
  if (dl__rnn_handed(tp, r->hnt, r->ghn_set, r->ghn_walk)) memcpy(w.dh, r->hnt->grad->data, (size_t)(B * H) * es);
  else memset(w.dh, 0, (size_t)(B * H) * es);
  if (dl__rnn_handed(tp, r->cn, r->gcn_set, r->gcn_walk)) memcpy(w.dc, r->cn->grad->data, (size_t)(B * H) * es);
  else memset(w.dc, 0, (size_t)(B * H) * es);
  if (r->rb) w.du = dl_tape_scratch(tp, r->op, (size_t)(B * H) * es);
  for (t = T - 1; t >= 0; t--) {
    /* leaves dh = 0 (GRU: its direct part dh z; rb: + du r) on the rows it ran */
    if (r->rb) {
      r->phase = 0;
      dl__rnn_rows(r, &w, t);
      dl__rnn_gemm(r->ctx, dt, DL_NOTRANS, DL_NOTRANS, B, H, H, (const char *)w.dhs + (size_t)(t * GH + 2 * H) * es,
                   T * GH, (const char *)r->whh + (size_t)(2 * H * H) * es, H, 0.0, w.du, H); /* du = da_n w_hn */
      r->phase = 1;
    }
    dl__rnn_rows(r, &w, t);
    if (t > 0 || gh0) /* dh_{t-1} += da_t w_hh (rb: the r and z rows; u's part came through du) */
      dl__rnn_gemm(r->ctx, dt, DL_NOTRANS, DL_NOTRANS, B, H, r->rb ? 2 * H : GH,
                   (const char *)w.dhs + (size_t)(t * GH) * es, T * GH, r->whh, H, 1.0, w.dh, H);
  }
  if (gh0) dl__rnn_rows_copy(dt, gh0->data, w.dh, B, H, H, 1);
  if (gc0) dl__rnn_rows_copy(dt, gc0->data, w.dc, B, H, H, 1);
  if (gw) { /* grad_w_hh += da^T [h_{-1}, ..., h_{T-2}] over all B*T rows */
    char *hp = (char *)dl_tape_scratch(tp, r->op, (size_t)(B * T * H) * es);
    int64_t b;
    for (b = 0; b < B; b++) {
      if (r->has_h0) memcpy(hp + (size_t)(b * T * H) * es, (const char *)r->h0 + (size_t)(b * r->h0_ld) * es,
                            (size_t)H * es);
      else memset(hp + (size_t)(b * T * H) * es, 0, (size_t)H * es);
      if (T > 1)
        memcpy(hp + (size_t)((b * T + 1) * H) * es, (const char *)r->y + (size_t)(b * T * H) * es,
               (size_t)((T - 1) * H) * es);
    }
    dl__rnn_gemm(r->ctx, dt, DL_TRANS, DL_NOTRANS, r->rb ? 2 * H : GH, H, B * T, w.dhs, GH, hp, H, 1.0, gw->data,
                 H);
    if (r->rb) /* w_hn's rows: da_n^T [u_0, ..., u_{T-1}], u = r h_{t-1} saved in g */
      dl__rnn_gemm(r->ctx, dt, DL_TRANS, DL_NOTRANS, H, H, B * T, (const char *)w.dhs + (size_t)(2 * H) * es, GH,
                   (const char *)r->g + (size_t)(3 * H) * es, r->S * H, 1.0,
                   (char *)gw->data + (size_t)(2 * H * H) * es, H);
  }
  if (gb) dl__rnn_colsum_add(r->ctx, dt, w.dhs, B * T, GH, gb->data);
  if (tp->hvp) {
    dl_tensor *g[5];
    g[0] = gxp;
    g[1] = gw;
    g[2] = gb;
    g[3] = gh0;
    g[4] = gc0;
    dl__rnn_hvp(tp, n, g);
  }
}

/* h_n's and c_n's rules: each hands its gradient to the recurrence's rule
 * (which runs next in this walk: making y's gradient makes sure it runs),
 * where it enters at each row's last real step. */
DL_API void dl__rnn_hn_bw(dl_tape *tp, dl_node *n) {
  dl__rnn *r = (dl__rnn *)n->user;
  (void)dl_tape_grad(tp, n->in[0]);
  r->ghn_set = 1;
  r->ghn_walk = tp->backwards;
}
DL_API void dl__rnn_cn_bw(dl_tape *tp, dl_node *n) {
  dl__rnn *r = (dl__rnn *)n->user;
  (void)dl_tape_grad(tp, n->in[0]);
  r->gcn_set = 1;
  r->gcn_walk = tp->backwards;
}

/* Why t (NULL: absent, fine) does not fit: not x's dtype, or not the 1-d /
 * 2-d shape [d0(, d1)]; NULL when it fits. */
DL_API const char *dl__rnn_misfit(const dl_tensor *x, const dl_tensor *t, int nd, int64_t d0, int64_t d1) {
  if (!t) return NULL;
  if (t->dtype != x->dtype) return "dtype mismatch (all f32 or all f64)";
  if (t->ndim != nd || t->shape[0] != d0 || (nd > 1 && t->shape[1] != d1)) return "shape mismatch";
  return NULL;
}

/* Panics naming op unless every lengths[b] of x [B, T, I] is in 1..T. */
DL_API void dl__rnn_check_lengths(dl_tape *tp, const char *op, const dl_tensor *x, const int64_t *lengths) {
  int64_t b;
  if (!lengths) return;
  for (b = 0; b < x->shape[0]; b++)
    if (lengths[b] < 1 || lengths[b] > x->shape[1])
      DL_PANIC(x->ctx ? x->ctx : tp->ctx, op, "lengths[%lld] = %lld is not in 1..T = %lld (x %s)", (long long)b,
               (long long)lengths[b], (long long)x->shape[1], DL_SHAPESTR(x));
}

/* Checks the arguments of a recurrent op; panics naming the op, what is
 * wrong and every shape. */
DL_API void dl__rnn_validate(dl_tape *tp, const char *op, int kind, const dl_tensor *x, const dl_tensor *h0,
                             const dl_tensor *c0, const dl_tensor *w_ih, const dl_tensor *w_hh,
                             const dl_tensor *b_ih, const dl_tensor *b_hh) {
  const int G = kind == DL__RNN_LSTM ? 4 : kind == DL__RNN_GRU ? 3 : 1;
  const dl_tensor *ts[6];
  const char *names[6] = {"w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0"}, *why = NULL;
  char all[1400], want[96];
  dl_ctx *pc;
  int k;
  if (!x || !w_ih || !w_hh)
    DL_PANIC(tp->ctx, op, "x, w_ih and w_hh are required (x %s, w_ih %s, w_hh %s)", x ? DL_SHAPESTR(x) : "NULL",
             w_ih ? DL_SHAPESTR(w_ih) : "NULL", w_hh ? DL_SHAPESTR(w_hh) : "NULL");
  pc = x->ctx ? x->ctx : tp->ctx;
  ts[0] = w_ih;
  ts[1] = w_hh;
  ts[2] = b_ih;
  ts[3] = b_hh;
  ts[4] = h0;
  ts[5] = kind == DL__RNN_LSTM ? c0 : NULL;
  want[0] = 0;
  if (x->dtype != DL_F32 && x->dtype != DL_F64) {
    why = "dtype mismatch: x must be f32 or f64";
  } else if (x->ndim != 3 || x->shape[0] < 1 || x->shape[1] < 1 || w_hh->ndim != 2 || w_hh->shape[1] < 1 ||
             w_hh->shape[0] != G * w_hh->shape[1] || w_ih->ndim != 2 || w_ih->shape[0] != w_hh->shape[0] ||
             w_ih->shape[1] != x->shape[2]) {
    why = "shape mismatch";
    snprintf(want, sizeof want, "x [B, T, I] with B, T >= 1, w_ih [%d*H, I], w_hh [%d*H, H]", G, G);
  } else {
    const int64_t B = x->shape[0], H = w_hh->shape[1];
    const int nd[6] = {2, 2, 1, 1, 2, 2};
    const int64_t d0[6] = {G * H, G * H, G * H, G * H, B, B}, d1[6] = {x->shape[2], H, 0, 0, H, H};
    for (k = 0; k < 6 && !why; k++)
      if ((why = dl__rnn_misfit(x, ts[k], nd[k], d0[k], d1[k])) != NULL) {
        if (nd[k] == 1) snprintf(want, sizeof want, "%s [%lld]", names[k], (long long)d0[k]);
        else snprintf(want, sizeof want, "%s [%lld, %lld]", names[k], (long long)d0[k], (long long)d1[k]);
      }
  }
  if (!why) return;
  snprintf(all, sizeof all, "x %s, h0 %s, w_ih %s, w_hh %s, b_ih %s, b_hh %s", DL_SHAPESTR(x),
           h0 ? DL_SHAPESTR(h0) : "NULL", DL_SHAPESTR(w_ih), DL_SHAPESTR(w_hh), b_ih ? DL_SHAPESTR(b_ih) : "NULL",
           b_hh ? DL_SHAPESTR(b_hh) : "NULL");
  if (kind == DL__RNN_LSTM)
    snprintf(all + strlen(all), sizeof all - strlen(all), ", c0 %s", c0 ? DL_SHAPESTR(c0) : "NULL");
  DL_PANIC(pc, op, "%s: %s%s%s (gates %s: w_ih [%d*H, I], w_hh [%d*H, H], biases [%d*H], h0%s [B, H])", why, all,
           want[0] ? "; expected " : "", want, G == 4 ? "i, f, g, o" : G == 3 ? "r, z, n" : "1", G, G, G,
           kind == DL__RNN_LSTM ? " and c0" : "");
}

/* A contiguous copy of t's tangent (NULL when t or its tangent is missing). */
DL_API const void *dl__rnn_tan(dl_tape *tp, const char *op, const dl_tensor *t) {
  if (!t || !t->tangent) return NULL;
  return dl__t_contig(tp, op, t->tangent)->data;
}

/* Scratch bytes of tp for the recurrence of x: device memory when dev (a
 * device tape), zeroed when zero. */
DL_API void *dl__rnn_scratch(dl_tape *tp, const char *op, const dl_tensor *x, int dev, size_t bytes, int zero) {
  void *p;
#ifdef DL_USE_CUDA
  if (dev) {
    p = dl_tape_dev_scratch(tp, op, bytes);
    if (zero) dl__gpu_ok(x, op, dlg_memset0(dl__gpu_h(x, op), p, bytes));
    return p;
  }
#endif
  (void)x;
  (void)dev;
  p = dl_tape_scratch(tp, op, bytes);
  if (zero) memset(p, 0, bytes);
  return p;
}
/* The start of dl__rnn_run and dl__rnn_run_gpu (dev: every buffer in device
 * memory): the input projection xp of every step, the recurrence's state r
 * (returned) with its buffers, the output *y [B, T, H] and its tangent, and
 * h_n / c_n [B, H] (with tangents) when asked for (the kernels write them at
 * each row's last step). in [5] receives the backward's inputs (xp, w_hh,
 * b_hh, h0, c0), *jvp whether tangents flow. lengths (validated) is copied
 * into the tape's (device) scratch. */
DL_API dl__rnn *dl__rnn_start(dl_tape *tp, const char *op, int kind, int dev, dl_tensor *x, dl_tensor *h0,
                              dl_tensor *c0, dl_tensor *w_ih, dl_tensor *w_hh, dl_tensor *b_ih, dl_tensor *b_hh,
                              const int64_t *lengths, int rb, dl_tensor **h_n, dl_tensor **c_n, dl_tensor **in,
                              dl_tensor **y_out, int *jvp_out) {
  const int G = kind == DL__RNN_LSTM ? 4 : kind == DL__RNN_GRU ? 3 : 1;
  dl_tensor *xp, *y;
  dl__rnn *r;
  int64_t B, T, H, GH;
  size_t es;
  int jvp, full;
  B = x->shape[0];
  T = x->shape[1];
  H = w_hh->shape[1];
  GH = G * H;
  es = dl_dtype_size(x->dtype);

  /* the input projection of every step: one GEMM */
  xp = dl_t_linear(tp, x, dl_t_contiguous(tp, w_ih), b_ih); /* (linear reads w in place) */
  in[0] = xp;
  in[1] = w_hh;
  in[2] = b_hh;
  in[3] = h0;
  in[4] = kind == DL__RNN_LSTM ? c0 : NULL;
  jvp = dl_tangent_wants(5, in);
  full = dl_tape_wants(tp, 5, in) || jvp; /* keep every step's gates and cells */

  r = (dl__rnn *)dl_tape_scratch(tp, op, sizeof *r); /* host: read by the rule (dev: pointing at device memory) */
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->rb = rb;
  r->G = G;
  r->S = kind == DL__RNN_LSTM || kind == DL__RNN_GRU ? 4 : 0;
  r->B = B;
  r->T = T;
  r->H = H;
  r->ctx = tp->ctx;
  r->dtype = x->dtype;
  r->op = op;
  r->zero = dl__rnn_scratch(tp, op, x, dev, (size_t)GH * es, 1);
  r->xp = xp->data;
  r->whh = dl__t_contig(tp, op, w_hh)->data;
  r->bhh = b_hh ? dl__t_contig(tp, op, b_hh)->data : r->zero;
  r->has_h0 = h0 != NULL;
  r->h0 = h0 ? dl__t_contig(tp, op, h0)->data : r->zero;
  r->h0_ld = h0 ? H : 0;
  r->c0 = c0 && kind == DL__RNN_LSTM ? dl__t_contig(tp, op, c0)->data : r->zero;
  r->c0_ld = c0 && kind == DL__RNN_LSTM ? H : 0;
  y = dl_tape_out(tp, op, x->dtype, DL_SHAPE(B, T, H));
  r->y = y->data;
  if (kind == DL__RNN_LSTM) {
    r->c_lb = full ? T * H : H;
    r->c_lt = full ? H : 0;
    r->c = dl__rnn_scratch(tp, op, x, dev, (size_t)(full ? B * T * H : B * H) * es, 0);
  } else {
    r->c = (void *)(uintptr_t)r->zero; /* never written: only the LSTM has cells */
  }
  if (r->S) {
    r->g_lb = full ? T * r->S * H : r->S * H;
    r->g_lt = full ? r->S * H : 0;
    r->g = dl__rnn_scratch(tp, op, x, dev, (size_t)((full ? B * T : B) * r->S * H) * es, 0);
  } else {
    r->g = (void *)(uintptr_t)r->zero;
  }
  r->s = dl__rnn_scratch(tp, op, x, dev, (size_t)(B * GH) * es, 0);
  if (jvp) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    const void *v;
    r->ty = ty->data;
    r->ts = dl__rnn_scratch(tp, op, x, dev, (size_t)(B * GH) * es, 0);
    if (rb) r->tu = dl__rnn_scratch(tp, op, x, dev, (size_t)(B * H) * es, 0);
    v = dl__rnn_tan(tp, op, xp);
    r->txp = v ? v : r->zero;
    r->txp_lb = v ? T * GH : 0;
    r->txp_lt = v ? GH : 0;
    r->twhh = dl__rnn_tan(tp, op, w_hh);
    v = dl__rnn_tan(tp, op, b_hh);
    r->tbhh = v ? v : r->zero;
    v = dl__rnn_tan(tp, op, h0);
    r->has_th0 = v != NULL;
    r->th0 = v ? v : r->zero;
    r->th0_ld = v ? H : 0;
    v = kind == DL__RNN_LSTM ? dl__rnn_tan(tp, op, c0) : NULL;
    r->tc0 = v ? v : r->zero;
    r->tc0_ld = v ? H : 0;
    if (kind == DL__RNN_LSTM) { /* the cell's tangent, from c0's (zeros without) */
      r->tc = dl__rnn_scratch(tp, op, x, dev, (size_t)(B * H) * es, !v);
      if (v) {
#ifdef DL_USE_CUDA
        if (dev) dl__gpu_ok(x, op, dlg_copy(dl__gpu_h(x, op), r->tc, v, (size_t)(B * H) * es, DLG_D2D));
        else
#endif
          memcpy(r->tc, v, (size_t)(B * H) * es);
      }
    }
  }
  if (lengths) {
    int64_t *len = (int64_t *)dl__rnn_scratch(tp, op, x, dev, sizeof(int64_t) * (size_t)B, 0);
#ifdef DL_USE_CUDA
    if (dev) dl__gpu_ok(x, op, dlg_copy(dl__gpu_h(x, op), len, lengths, sizeof(int64_t) * (size_t)B, DLG_H2D));
    else
#endif
      memcpy(len, lengths, sizeof(int64_t) * (size_t)B);
    r->len = len;
  }
  if (h_n) {
    *h_n = dl_tape_out(tp, op, x->dtype, DL_SHAPE(B, H));
    r->hn = (*h_n)->data;
    if (jvp) r->thn = dl_tape_tangent(tp, *h_n)->data;
  }
  if (c_n && kind == DL__RNN_LSTM) {
    *c_n = dl_tape_out(tp, op, x->dtype, DL_SHAPE(B, H));
    r->cno = (*c_n)->data;
    if (jvp) r->tcn = dl_tape_tangent(tp, *c_n)->data;
  }
  *y_out = y;
  *jvp_out = jvp;
  return r;
}

/* The end of dl__rnn_run and dl__rnn_run_gpu: the recurrence's node on the
 * tape, then h_n's and c_n's (their values are written already). */
/* h_n's or c_n's node (state, made from y): its rule hands the gradient to
 * the recurrence's, which reads it (tangent included), so it is kept. */
DL_API void dl__rnn_record_state(dl_tape *tp, const char *op, dl__rnn *r, dl_tensor *y, dl_tensor *state,
                                 dl_backward_fn bw, dl_tensor **slot) {
  dl_node *nd = dl_tape_record(tp, op, bw, state, y, NULL, NULL);
  if (nd) {
    nd->flags |= DL_NODE_KEEP_OUT_GRAD | DL_NODE_HVP;
    nd->user = r;
    *slot = state;
  }
}
DL_API void dl__rnn_record(dl_tape *tp, const char *op, dl__rnn *r, dl_tensor *y, dl_tensor **in, dl_tensor *hn,
                           dl_tensor *cn) {
  dl_node *nd = dl_tape_record_n(tp, op, dl__rnn_bw, y, 5, in);
  if (nd) {
    nd->user = r;
    nd->flags |= DL_NODE_HVP;
  }
  if (hn) dl__rnn_record_state(tp, op, r, y, hn, dl__rnn_hn_bw, &r->hnt);
  if (cn) dl__rnn_record_state(tp, op, r, y, cn, dl__rnn_cn_bw, &r->cn);
}

#ifdef DL_USE_CUDA
/* Panics naming op unless every tensor given (and its tangent) is on x's device. */
DL_API void dl__rnn_devices(const char *op, int kind, const dl_tensor *x, const dl_tensor *h0, const dl_tensor *c0,
                            const dl_tensor *w_ih, const dl_tensor *w_hh, const dl_tensor *b_ih,
                            const dl_tensor *b_hh) {
  const dl_tensor *ts[7];
  int k;
  ts[0] = x;
  ts[1] = w_ih;
  ts[2] = w_hh;
  ts[3] = b_ih;
  ts[4] = b_hh;
  ts[5] = h0;
  ts[6] = kind == DL__RNN_LSTM ? c0 : NULL;
  for (k = 0; k < 7; k++)
    if (ts[k]) {
      dl__ops_same_device(op, x, ts[k]);
      if (ts[k]->tangent) dl__ops_same_device(op, x, ts[k]->tangent);
    }
}
/* dl__rnn_run on a device tape, after the argument checks: every tensor on
 * the device; the same buffers in device memory, the same steps. */
DL_API dl_tensor *dl__rnn_run_gpu(dl_tape *tp, const char *op, int kind, dl_tensor *x, dl_tensor *h0,
                                  dl_tensor *c0, dl_tensor *w_ih, dl_tensor *w_hh, dl_tensor *b_ih,
                                  dl_tensor *b_hh, const int64_t *lengths, int rb, dl_tensor **h_n,
                                  dl_tensor **c_n) {
  dlg_handle *h = dl__dnn_h(tp, op, x); /* x on the device, tp a device tape */
  dl_tensor *y, *in[5], *hn = NULL, *cn = NULL;
  dl__rnn *r;
  dlg_rnn d;
  int64_t B, T, H, GH, t;
  size_t es;
  int jvp;
  r = dl__rnn_start(tp, op, kind, 1, x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths, rb, h_n ? &hn : NULL,
                    c_n ? &cn : NULL, in, &y, &jvp);
  B = r->B;
  T = r->T;
  H = r->H;
  GH = r->G * H;
  es = dl_dtype_size(x->dtype);
  d = dl__rnn_dlg(r);

  for (t = 0; t < T; t++) {
    const void *hp = t ? (const char *)r->y + (size_t)((t - 1) * H) * es : h0 ? r->h0 : NULL;
    const int64_t ld = t ? T * H : H, N = r->rb ? 2 * H : GH; /* rb: the n part comes after r */
    if (hp) dl__rnn_gemm_dev(x, op, 0, 1, B, N, H, hp, ld, r->whh, H, 0.0, r->s, GH);
    else dl__gpu_ok(x, op, dlg_memset0(h, r->s, (size_t)(B * GH) * es));
    if (jvp) { /* ts = th_{t-1} w_hh^T + h_{t-1} tw_hh^T */
      const void *thp = t ? (const char *)r->ty + (size_t)((t - 1) * H) * es : r->has_th0 ? r->th0 : NULL;
      double beta = 0.0;
      if (thp) {
        dl__rnn_gemm_dev(x, op, 0, 1, B, N, H, thp, ld, r->whh, H, 0.0, r->ts, GH);
        beta = 1.0;
      }
      if (r->twhh && hp) {
        dl__rnn_gemm_dev(x, op, 0, 1, B, N, H, hp, ld, r->twhh, H, beta, r->ts, GH);
        beta = 1.0;
      }
      if (beta == 0.0) dl__gpu_ok(x, op, dlg_memset0(h, r->ts, (size_t)(B * GH) * es));
    }
    if (r->rb) { /* r and z, then s_n = u w_hn^T (u = r h_{t-1} in g), then n and h_t */
      const char *u = (const char *)r->g + (size_t)(t * r->g_lt + 3 * H) * es;
      const char *whn = (const char *)r->whh + (size_t)(2 * H * H) * es;
      d.phase = 0;
      dl__gpu_ok(x, op, dlg_rnn_fwd(h, (int)r->dtype, &d, t));
      dl__rnn_gemm_dev(x, op, 0, 1, B, H, H, u, r->g_lb, whn, H, 0.0, (char *)r->s + (size_t)(2 * H) * es, GH);
      if (jvp) { /* ts_n = tu w_hn^T + u tw_hn^T */
        dl__rnn_gemm_dev(x, op, 0, 1, B, H, H, r->tu, H, whn, H, 0.0, (char *)r->ts + (size_t)(2 * H) * es, GH);
        if (r->twhh)
          dl__rnn_gemm_dev(x, op, 0, 1, B, H, H, u, r->g_lb, (const char *)r->twhh + (size_t)(2 * H * H) * es, H, 1.0,
                           (char *)r->ts + (size_t)(2 * H) * es, GH);
      }
      d.phase = 1;
    }
    dl__gpu_ok(x, op, dlg_rnn_fwd(h, (int)r->dtype, &d, t));
  }
  dl__rnn_record(tp, op, r, y, in, hn, cn);
  if (h_n) *h_n = hn;
  if (c_n) *c_n = cn;
  return y;
}
#endif

/* The recurrent ops: argument checks, then the recurrence on the host or the device. */
DL_API dl_tensor *dl__rnn_run(dl_tape *tp, const char *op, int kind, dl_tensor *x, dl_tensor *h0,
                              dl_tensor *c0, dl_tensor *w_ih, dl_tensor *w_hh, dl_tensor *b_ih,
                              dl_tensor *b_hh, const dl_rnn_args *a, dl_tensor **h_n, dl_tensor **c_n) {
  dl_tensor *y, *in[5], *hn = NULL, *cn = NULL;
  const int64_t *lengths = a ? a->lengths : NULL;
  const int rb = a ? a->gru_reset_before_linear : 0;
  dl__rnn *r;
  int64_t B, T, H, GH, t;
  size_t es;
  int jvp;
  dl__rnn_validate(tp, op, kind, x, h0, c0, w_ih, w_hh, b_ih, b_hh);
  dl__rnn_check_lengths(tp, op, x, lengths);
  if (rb && (kind != DL__RNN_GRU || rb != 1))
    DL_PANIC(x->ctx ? x->ctx : tp->ctx, op, "gru_reset_before_linear %d: 0 or 1, GRU only", rb);
#ifdef DL_USE_CUDA
  dl__rnn_devices(op, kind, x, h0, c0, w_ih, w_hh, b_ih, b_hh);
  if (x->device == DL_CUDA || tp->gpu)
    return dl__rnn_run_gpu(tp, op, kind, x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths, rb, h_n, c_n);
#endif
  r = dl__rnn_start(tp, op, kind, 0, x, h0, c0, w_ih, w_hh, b_ih, b_hh, lengths, rb, h_n ? &hn : NULL,
                    c_n ? &cn : NULL, in, &y, &jvp);
  B = r->B;
  T = r->T;
  H = r->H;
  GH = r->G * H;
  es = dl_dtype_size(x->dtype);

  for (t = 0; t < T; t++) {
    const void *hp = t ? (const char *)r->y + (size_t)((t - 1) * H) * es : h0 ? r->h0 : NULL;
    const int64_t ld = t ? T * H : H, N = r->rb ? 2 * H : GH; /* rb: the n part comes after r */
    if (hp) dl__rnn_gemm(r->ctx, r->dtype, DL_NOTRANS, DL_TRANS, B, N, H, hp, ld, r->whh, H, 0.0, r->s, GH);
    else memset(r->s, 0, (size_t)(B * GH) * es);
    if (jvp) { /* ts = th_{t-1} w_hh^T + h_{t-1} tw_hh^T */
      const void *thp = t ? (const char *)r->ty + (size_t)((t - 1) * H) * es : r->has_th0 ? r->th0 : NULL;
      double beta = 0.0;
      if (thp) {
        dl__rnn_gemm(r->ctx, r->dtype, DL_NOTRANS, DL_TRANS, B, N, H, thp, ld, r->whh, H, 0.0, r->ts, GH);
        beta = 1.0;
      }
      if (r->twhh && hp) {
        dl__rnn_gemm(r->ctx, r->dtype, DL_NOTRANS, DL_TRANS, B, N, H, hp, ld, r->twhh, H, beta, r->ts, GH);
        beta = 1.0;
      }
      if (beta == 0.0) memset(r->ts, 0, (size_t)(B * GH) * es);
    }
    if (r->rb) { /* r and z, then s_n = u w_hn^T (u = r h_{t-1} in g), then n and h_t */
      const char *u = (const char *)r->g + (size_t)(t * r->g_lt + 3 * H) * es;
      const char *whn = (const char *)r->whh + (size_t)(2 * H * H) * es;
      r->phase = 0;
      dl__rnn_rows(r, NULL, t);
      dl__rnn_gemm(r->ctx, r->dtype, DL_NOTRANS, DL_TRANS, B, H, H, u, r->g_lb, whn, H, 0.0,
                   (char *)r->s + (size_t)(2 * H) * es, GH);
      if (jvp) { /* ts_n = tu w_hn^T + u tw_hn^T */
        dl__rnn_gemm(r->ctx, r->dtype, DL_NOTRANS, DL_TRANS, B, H, H, r->tu, H, whn, H, 0.0,
                     (char *)r->ts + (size_t)(2 * H) * es, GH);
        if (r->twhh)
          dl__rnn_gemm(r->ctx, r->dtype, DL_NOTRANS, DL_TRANS, B, H, H, u, r->g_lb,
                       (const char *)r->twhh + (size_t)(2 * H * H) * es, H, 1.0, (char *)r->ts + (size_t)(2 * H) * es,
                       GH);
      }
      r->phase = 1;
    }
    dl__rnn_rows(r, NULL, t);
  }
  dl__rnn_record(tp, op, r, y, in, hn, cn);
  if (h_n) *h_n = hn;
  if (c_n) *c_n = cn;
  return y;
}

/* >>public ------------------------------------------------------------------ */

/* Elman RNN, torch.nn.RNN(I, H, nonlinearity='tanh' or 'relu',
 * batch_first=True), one layer, one direction:
 *   h_t = act(x_t w_ih^T + b_ih + h_{t-1} w_hh^T + b_hh), act = tanh when
 *   tanh_not_relu, else relu.
 * x [B, T, I]; h0 [B, H] or NULL (zeros); w_ih [H, I], w_hh [H, H]; b_ih,
 * b_hh [H] or NULL. Returns y [B, T, H] (every h_t); *h_n = h_{T-1} [B, H]
 * when h_n is not NULL. Backward: through time (da_t = (gy_t + dh_t) act'),
 * into x, h0, w_ih, w_hh, b_ih, b_hh. Outputs in the tape's arena. */
DL_API dl_tensor *dl_t_rnn(dl_tape *tp, dl_tensor *x, dl_tensor *h0, dl_tensor *w_ih, dl_tensor *w_hh,
                           dl_tensor *b_ih, dl_tensor *b_hh, int tanh_not_relu, dl_tensor **h_n) {
  return dl__rnn_run(tp, "dl_t_rnn", tanh_not_relu ? DL__RNN_TANH : DL__RNN_RELU, x, h0, NULL, w_ih, w_hh,
                     b_ih, b_hh, NULL, h_n, NULL);
}
/* dl_t_rnn with options a (dl_rnn_args: per-row lengths; NULL = dl_t_rnn). */
DL_API dl_tensor *dl_t_rnn_ex(dl_tape *tp, dl_tensor *x, dl_tensor *h0, dl_tensor *w_ih, dl_tensor *w_hh,
                              dl_tensor *b_ih, dl_tensor *b_hh, int tanh_not_relu, const dl_rnn_args *a,
                              dl_tensor **h_n) {
  return dl__rnn_run(tp, "dl_t_rnn_ex", tanh_not_relu ? DL__RNN_TANH : DL__RNN_RELU, x, h0, NULL, w_ih, w_hh,
                     b_ih, b_hh, a, h_n, NULL);
}

/* LSTM, torch.nn.LSTM(I, H, batch_first=True), one layer, one direction:
 *   [i, f, g, o] = x_t w_ih^T + b_ih + h_{t-1} w_hh^T + b_hh (4 blocks of H),
 *   c_t = s(f) c_{t-1} + s(i) tanh(g),   h_t = s(o) tanh(c_t).
 * x [B, T, I]; h0, c0 [B, H] or NULL (zeros); w_ih [4H, I], w_hh [4H, H];
 * b_ih, b_hh [4H] or NULL. Returns y [B, T, H]; *h_n = h_{T-1}, *c_n =
 * c_{T-1} [B, H] when the pointers are not NULL. Backward through time:
 *   dc_t += dh_t s(o) (1 - tanh^2 c_t), da_i = dc_t tanh(g) s'(i),
 *   da_f = dc_t c_{t-1} s'(f), da_g = dc_t s(i) tanh'(g),
 *   da_o = dh_t tanh(c_t) s'(o), dc_{t-1} = dc_t s(f), dh_{t-1} = da w_hh;
 * gradients reach x, h0, c0, every weight and bias. Outputs in the arena. */
DL_API dl_tensor *dl_t_lstm(dl_tape *tp, dl_tensor *x, dl_tensor *h0, dl_tensor *c0, dl_tensor *w_ih,
                            dl_tensor *w_hh, dl_tensor *b_ih, dl_tensor *b_hh, dl_tensor **h_n,
                            dl_tensor **c_n) {
  return dl__rnn_run(tp, "dl_t_lstm", DL__RNN_LSTM, x, h0, c0, w_ih, w_hh, b_ih, b_hh, NULL, h_n, c_n);
}
/* dl_t_lstm with options a (dl_rnn_args: per-row lengths; NULL = dl_t_lstm). */
DL_API dl_tensor *dl_t_lstm_ex(dl_tape *tp, dl_tensor *x, dl_tensor *h0, dl_tensor *c0, dl_tensor *w_ih,
                               dl_tensor *w_hh, dl_tensor *b_ih, dl_tensor *b_hh, const dl_rnn_args *a,
                               dl_tensor **h_n, dl_tensor **c_n) {
  return dl__rnn_run(tp, "dl_t_lstm_ex", DL__RNN_LSTM, x, h0, c0, w_ih, w_hh, b_ih, b_hh, a, h_n, c_n);
}

/* GRU, torch.nn.GRU(I, H, batch_first=True), one layer, one direction:
 *   r = s(x w_ir^T + b_ir + h w_hr^T + b_hr), z = s(x w_iz^T + b_iz + h w_hz^T + b_hz),
 *   n = tanh(x w_in^T + b_in + r (h w_hn^T + b_hn)),   h_t = (1 - z) n + z h_{t-1}
 * (h = h_{t-1}; rows r, z, n of w_ih [3H, I], w_hh [3H, H], b_ih, b_hh [3H]
 * or NULL). x [B, T, I]; h0 [B, H] or NULL. Returns y [B, T, H]; *h_n =
 * h_{T-1} when h_n is not NULL. Backward through time:
 *   da_n = dh (1 - z) tanh'(n), da_r = da_n (h w_hn^T + b_hn) s'(r),
 *   da_z = dh (h_{t-1} - n) s'(z), dh_{t-1} = dh z + [da_r, da_z, r da_n] w_hh.
 * Outputs in the tape's arena. */
DL_API dl_tensor *dl_t_gru(dl_tape *tp, dl_tensor *x, dl_tensor *h0, dl_tensor *w_ih, dl_tensor *w_hh,
                           dl_tensor *b_ih, dl_tensor *b_hh, dl_tensor **h_n) {
  return dl__rnn_run(tp, "dl_t_gru", DL__RNN_GRU, x, h0, NULL, w_ih, w_hh, b_ih, b_hh, NULL, h_n, NULL);
}
/* dl_t_gru with options a (dl_rnn_args: per-row lengths, the reset gate
 * before the product; NULL = dl_t_gru). */
DL_API dl_tensor *dl_t_gru_ex(dl_tape *tp, dl_tensor *x, dl_tensor *h0, dl_tensor *w_ih, dl_tensor *w_hh,
                              dl_tensor *b_ih, dl_tensor *b_hh, const dl_rnn_args *a, dl_tensor **h_n) {
  return dl__rnn_run(tp, "dl_t_gru_ex", DL__RNN_GRU, x, h0, NULL, w_ih, w_hh, b_ih, b_hh, a, h_n, NULL);
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_OPS_RNN_H */
