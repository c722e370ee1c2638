/* dl/gpu/rnn.h - the ABI of src_gpu/rnn.cu: the element-wise gate kernels
 * of one time step of the recurrent ops (ops/rnn.h's dl_t_rnn, dl_t_lstm,
 * dl_t_gru) on the device. Included by dl/gpu/abi.h; conventions as there
 * (first argument the handle, DLG_OK / DLG_ERR with the message in
 * dlg_message, device pointers, work queued on the handle's stream, dtype
 * DLG_F32 or DLG_F64 for every floating buffer of a call).
 *
 * The GEMMs of the recurrence (the input projection, h_{t-1} w_hh^T per
 * step, the gradients) are dlg_gemm calls made by ops/rnn.h; these two calls
 * are what runs between them, one thread per (batch row b, hidden unit j).
 * The formulas and their order of operations are ops/rnn.h's
 * DL__RNN_KERNELS (dl__rnn_fwd_row_*, dl__rnn_bwd_row_*), with the same
 * scalar tanh and sigmoid (vmath.h's for f32, the C library's for f64), so
 * results agree with the CPU's to rounding (nvcc may fuse a multiply-add). */
#ifndef DL_GPU_RNN_H
#define DL_GPU_RNN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlg_handle dlg_handle; /* as in abi.h (a repeated typedef: C11) */

/* The cell (= ops/rnn.h's DL__RNN_*) and its gates G: 1, 1, 4 (i, f, g, o), 3 (r, z, n). */
enum { DLG_RNN_TANH = 0, DLG_RNN_RELU = 1, DLG_RNN_LSTM = 2, DLG_RNN_GRU = 3 };

/* One recurrent call, ops/rnn.h's dl__rnn with device pointers; GH = G H.
 * A buffer of [B, T, W] rows is read at row b, step t as base + b lb + t lt
 * (lb, lt in elements; lt = 0: one step, overwritten in place; lb = lt = 0:
 * one shared row, e.g. a zero row for a missing h0).
 *   xp   [B, T, GH] contiguous: x w_ih^T + b_ih
 *   s    [B, GH] contiguous: h_{t-1} w_hh^T (zeros at t = 0 without h0)
 *   bhh  [GH] (zeros without b_hh)
 *   h0, c0  rows h0_ld / c0_ld apart (0: a zero row of at least H)
 *   y    [B, T, H] contiguous: every h_t, written at step t (read at t-1)
 *   c    LSTM cell states, rows (c_lb, c_lt); others: unused
 *   g    saved activations, rows (g_lb, g_lt) of 4H: LSTM i, f, g, o;
 *        GRU r, z, n, h_{t-1} w_hn^T + b_hn; others: unused
 * Forward mode (ty NULL: none): txp rows (txp_lb, txp_lt), tbhh [GH], th0
 * rows th0_ld apart (zero rows where a tangent is missing), ts [B, GH] =
 * th_{t-1} w_hh^T + h_{t-1} tw_hh^T, ty [B, T, H] written at step t, tc
 * [B, H] the LSTM cell's tangent updated in place.
 * Variable lengths: steps t >= len[b] write y (ty) = 0 and leave the state
 * (c, tc) alone; the backward writes dx (dhs) = 0 there and leaves dh, dc
 * as they were. At t = len[b] - 1 (T - 1 without len) the forward copies
 * row b's y, c, ty, tc into hn, cn, thn, tcn (those not NULL). The backward
 * leaves dh = 0 (GRU: dh z) on every row it ran: the step's GEMM adds
 * da w_hh into it.
 * The GRU with the reset gate before the product (rb, dl_rnn_args's
 * gru_reset_before_linear) runs each step in two phases with a GEMM
 * between: phase 0 writes r, z and u = r h_{t-1} (g's fourth part; its
 * tangent in tu), ops/rnn.h then puts u w_hn^T in s's n part (and the
 * tangent's in ts), phase 1 writes n and h_t. Backward: phase 0 writes
 * da_n, da_z and dh = dh_t z, the GEMM du = da_n w_hn, phase 1 da_r =
 * du h_{t-1} s'(r) and dh += du r. */
typedef struct dlg_rnn {
  int kind;
  int64_t B, T, H;
  const void *xp, *s, *bhh, *h0, *c0;
  int64_t h0_ld, c0_ld;
  void *y, *c, *g;
  int64_t c_lb, c_lt, g_lb, g_lt;
  const void *txp, *tbhh, *th0, *ts;
  int64_t txp_lb, txp_lt, th0_ld;
  void *ty, *tc;
  const int64_t *len; /* [B] device: steps of row b (1..T), NULL: T */
  int rb, phase; /* GRU, reset gate before the product: phase 0 r, z, u; 1 n, h (see above) */
  void *tu;      /* rb: [B, H] u's tangent */
  void *hn, *cn, *thn, *tcn; /* [B, H] or NULL: h_n, c_n and tangents, written at row b's last step */
} dlg_rnn;

/* Step t's gates for every batch row: y[:, t] (and c, g at step t), then,
 * when r->ty, the tangent ty[:, t] (and tc). Exactly dl__rnn_fwd_row_*. */
int dlg_rnn_fwd(dlg_handle *h, int dtype, const dlg_rnn *r, int64_t t);

/* The backward buffers (ops/rnn.h's dl__rnn_bwbuf): gy [B, T, H] (y's
 * gradient), dx [B, T, GH] (pre-activation gradients, written at step t),
 * dhs [B, T, GH] (GRU: the gradient of h_{t-1} w_hh^T + b_hh, written at
 * step t; the others: dx itself), dh, dc [B, H] (the gradients flowing into
 * step t from step t+1, updated in place: the LSTM's dc becomes dc_{t-1},
 * the GRU's dh becomes its direct part dh_t z). */
typedef struct dlg_rnn_bw {
  const void *gy;
  void *dx, *dhs, *dh, *dc;
  void *du; /* rb: [B, H] da_n w_hn, between the two phases */
} dlg_rnn_bw;

/* Step t's gate derivatives for every batch row: exactly dl__rnn_bwd_row_*
 * (reads r's y, c, g, h0, c0 as the forward left them). */
int dlg_rnn_bwd(dlg_handle *h, int dtype, const dlg_rnn *r, const dlg_rnn_bw *w, int64_t t);

#ifdef __cplusplus
}
#endif

#endif /* DL_GPU_RNN_H */
