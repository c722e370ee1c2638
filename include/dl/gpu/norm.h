/* dl/gpu/norm.h - the ABI of src_gpu/norm.cu: batch norm, layer and RMS
 * norm on the device, for ops/norm.h. Included by dl/gpu/abi.h;
 * conventions as there (first argument the handle, DLG_OK / DLG_OOM /
 * DLG_ERR with the message in dlg_message, device pointers, work queued on
 * the handle's stream, dtype DLG_F32 or DLG_F64 for every floating operand
 * of a call).
 *
 * Every call matches the CPU code of the same op:
 * same formulas, statistics and sums accumulated in double (f32 too), the
 * same rules for ties and NaN in max pooling. Gradients ADD into the buffers
 * given (gx += ..., as the CPU backward rules do); a NULL gradient pointer
 * means "not wanted". All tensors are contiguous unless a stride is given.
 * Empty sizes (a zero dimension) are accepted and do nothing (but what the
 * CPU also does for them: bias written, zero sums added). */
#ifndef DL_GPU_NORM_H
#define DL_GPU_NORM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlg_handle dlg_handle; /* as in abi.h (a repeated typedef: C11) */

/* >>batch norm (own kernels: double statistics, any eps >= 0) -----------------
 * x [N, C, S] contiguous (S: the product of x's dimensions after the
 * channel; [N, C] is S = 1), m = N S values per channel. stats is device
 * memory of 2 C doubles: mean [C], then istd = 1 / sqrt(var + eps) [C].
 * The [C] vectors w, b (weight, bias: NULL means 1, 0) and the running
 * statistics have x's dtype and element strides ws, bs, rms, rvs.
 *   batch != 0  FWD computes mean and the BIASED var over the m values
 *               (two passes in double) into stats; with update != 0 it also
 *               sets, per channel, as the CPU (in double, rounded once):
 *                 rmean = (1 - momentum) rmean + momentum mean
 *                 rvar  = (1 - momentum) rvar + momentum var m / (m - 1)
 *   batch == 0  FWD sets stats from rmean, rvar (mean = rmean,
 *               istd = 1 / sqrt(rvar + eps)); nothing is updated.
 * TAN and BWD read stats as FWD left them. */
typedef struct dlg_bn {
  int64_t N, C, S;
  int batch, update;
  double eps, momentum;
  const void *w, *b;
  int64_t ws, bs;
  void *rmean, *rvar;
  int64_t rms, rvs;
  double *stats;
} dlg_bn;

/* y = (x - mean) istd w + b per channel. */
int dlg_batch_norm_fwd(dlg_handle *h, int dtype, const dlg_bn *p, const void *x, void *y);
/* Forward-mode tangent: tx [N, C, S] (NULL: zero), tw, tb [C] contiguous
 * (NULL: zero); ty = (=, overwritten)
 *   batch  w istd (tx - sum(tx)/m - xh sum(xh tx)/m) + xh tw + tb
 *   else   w istd tx + xh tw + tb,      xh = (x - mean) istd. */
int dlg_batch_norm_tan(dlg_handle *h, int dtype, const dlg_bn *p, const void *x, const void *tx,
                       const void *tw, const void *tb, void *ty);
/* Backward from gy [N, C, S], each added into (NULL: skipped):
 *   batch  gx += w istd (gy - sum(gy)/m - xh sum(gy xh)/m)
 *   else   gx += w istd gy
 *   gw [C] += sum(gy xh), gb [C] += sum(gy)   (contiguous). */
int dlg_batch_norm_bwd(dlg_handle *h, int dtype, const dlg_bn *p, const void *x, const void *gy,
                       void *gx, void *gw, void *gb);

/* >>layer norm, RMS norm (own kernels, one block per row) --------------------
 * x [R, D] contiguous (D: the product of the normalised last dimensions).
 * Per row, in double: mu = mean(x) (center != 0, layer norm) or 0 (RMS
 * norm), istd = 1 / sqrt(mean((x - mu)^2) + eps); stats (device, 2 R
 * doubles) = mu [R], then istd [R], written by FWD, read by TAN and BWD.
 * w, b [D] contiguous, x's dtype, NULL: 1, 0 (RMS norm has no b). */
typedef struct dlg_ln {
  int64_t R, D;
  int center;
  double eps;
  const void *w, *b;
  double *stats;
} dlg_ln;

/* y = (x - mu) istd w + b. */
int dlg_layer_norm_fwd(dlg_handle *h, int dtype, const dlg_ln *p, const void *x, void *y);
/* ty = (overwritten) w (istd tx - (x - mu) istd^3 s1/D - center istd s0/D)
 * + (x - mu) istd tw + tb, s0 = sum(tx), s1 = sum(tx (x - mu)) per row;
 * tx, tw, tb NULL: zero. */
int dlg_layer_norm_tan(dlg_handle *h, int dtype, const dlg_ln *p, const void *x, const void *tx,
                       const void *tw, const void *tb, void *ty);
/* Backward from gy [R, D], each added into (NULL: skipped), u = gy w:
 *   gx += istd u - (x - mu) istd^3 s1/D - center istd s0/D,
 *         s0 = sum(u), s1 = sum(u (x - mu)) per row
 *   gw [D] += sum over rows of gy (x - mu) istd,  gb [D] += sum over rows of gy
 * (the column sums in double, in a fixed order: deterministic). */
int dlg_layer_norm_bwd(dlg_handle *h, int dtype, const dlg_ln *p, const void *x, const void *gy,
                       void *gx, void *gw, void *gb);

#ifdef __cplusplus
}
#endif

#endif /* DL_GPU_NORM_H */
