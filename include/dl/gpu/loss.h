/* dl/gpu/loss.h - the losses on the device: the ABI of
 * src_gpu/loss.cu, for dl/ops/loss.h. Plain C, with the conventions abi.h
 * states for the kernel families (host index arrays staged through the
 * workspace; sizes of 0 accepted). */
#ifndef DL_GPU_LOSS_H
#define DL_GPU_LOSS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlg_handle dlg_handle;

/* >>losses (ops/loss.h) ----------------------------------------------------- */

/* Element-wise losses (loss.h's DL__LK_*, the same values), per element with
 * x = a[i], t = b[i], d = x - t, z = |d|, p the parameter, in the dtype:
 *   MSE    d^2                                  dL/da 2d, dL/db -2d
 *   BCE    max(x,0) - x t + log1p(exp(-|x|))    sigmoid(x) - t, -x
 *   HUBER  z < p ? d^2/2 : p (z - p/2)          clamp(d, -p, p), its negative
 *   SL1    z < p ? d^2/2/p : z - p/2            clamp(d, -p, p) / p, its negative
 *   L1     z                                    sign(d), -sign(d) */
enum { DLG_LOSS_MSE = 0, DLG_LOSS_BCE = 1, DLG_LOSS_HUBER = 2, DLG_LOSS_SL1 = 3, DLG_LOSS_L1 = 4 };

/* Forward over n elements of a and b (contiguous). out != NULL (reduction
 * none): out[i] = L_i. Otherwise *y (one element) = (T)(sum_i (double)L_i / div)
 * (div = n for mean, 1 for sum), summed in a fixed order. */
int dlg_loss_ew(dlg_handle *h, int dtype, int kind, int64_t n, const void *a, const void *b, double p, void *out,
                void *y, double div);
/* Tangent: v_i = dL/da ta[i] + dL/db tb[i] (a NULL tangent: that term is 0),
 * into out[i] or *y = (T)(sum / div), as dlg_loss_ew. */
int dlg_loss_ew_tangent(dlg_handle *h, int dtype, int kind, int64_t n, const void *a, const void *b, double p,
                        const void *ta, const void *tb, void *out, void *y, double div);
/* Backward: g_i = gy[i * gstride] * (T)gscale (gstride 1 for none, 0 for a
 * 0-d gy; gscale 1/n for mean); ga[i] += dL/da g_i, gb[i] += dL/db g_i (NULL: skipped). */
int dlg_loss_ew_backward(dlg_handle *h, int dtype, int kind, int64_t n, const void *a, const void *b, double p,
                         const void *gy, int64_t gstride, double gscale, void *ga, void *gb);

/* Cross-entropy of logits x [N, C] (contiguous) at labels (HOST int64 [N],
 * each in [0, C)), label smoothing eps (loss.h's dl__ce, FWD): per row, with
 * m the row max and z = x - m (in the dtype),
 *   l = log(sum e^z) - (1 - eps) z_label - eps / C sum z     (sums in double)
 * prob [N, C] = e^z / sum e^z (kept for backward). out != NULL: out[i] = l_i;
 * else *y = (T)(sum_i (double)(T)l_i / div). */
int dlg_cross_entropy(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *x, const int64_t *labels,
                      double eps, void *prob, void *out, void *y, double div);
/* Tangent from the saved prob and the logits' tangent t [N, C]: per row
 * v = sum_c (p_c - eps/C) t_c - (1 - eps) t_label, into out[i] or *y = (T)(sum / div). */
int dlg_cross_entropy_tangent(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *prob,
                              const int64_t *labels, double eps, const void *t, void *out, void *y, double div);
/* Backward: g = gy[i * gstride] * (T)gscale; gx[i, c] += (p_c - eps/C) g, then
 * gx[i, label] -= (1 - eps) g. gx contiguous [N, C]. */
int dlg_cross_entropy_backward(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *prob,
                               const int64_t *labels, double eps, const void *gy, int64_t gstride, double gscale,
                               void *gx);
/* Negative log-likelihood: e_i = -x[i*s0 + label_i*s1] (x [N, C], strides in
 * elements), labels HOST int64 [N] in [0, C); out[i] = e_i or *y = (T)(sum / div). */
int dlg_nll(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *x, int64_t s0, int64_t s1,
            const int64_t *labels, void *out, void *y, double div);
/* Backward: gx[i*C + label_i] -= gy[i * gstride] * (T)gscale; gx contiguous [N, C]. */
int dlg_nll_backward(dlg_handle *h, int dtype, int64_t N, int64_t C, const int64_t *labels, const void *gy,
                     int64_t gstride, double gscale, void *gx);

/* >>metrics (report.h) ------------------------------------------------------ */

/* *count (one device int64, written) = the rows i of x [N, C] (element
 * strides s0, s1) whose first maximum (a NaN counts as the maximum, as
 * report.h's dl__argmax_row) is at column label_i. Labels: HOST int64 [N]
 * (labels_host, staged through the workspace) or, labels_host NULL, DEVICE
 * labels_dev of dtype DLG_I32 / DLG_I64 with element stride ls. A label
 * outside [0, C) counts as a miss (the loss that ran first checked them). */
int dlg_argmax_hits(dlg_handle *h, int dtype, int64_t N, int64_t C, const void *x, int64_t s0, int64_t s1,
                    const int64_t *labels_host, const void *labels_dev, int ldtype, int64_t ls, int64_t *count);

#ifdef __cplusplus
}
#endif

#endif /* DL_GPU_LOSS_H */
