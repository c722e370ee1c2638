/* dl/gpu/reduce.h - reductions and softmax on the device: the ABI of
 * src_gpu/reduce.cu, for dl/ops/reduce.h. Plain C, with the conventions abi.h
 * states for the kernel families (host index arrays staged through the
 * workspace; sizes of 0 accepted). */
#ifndef DL_GPU_REDUCE_H
#define DL_GPU_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlg_handle dlg_handle;

/* >>reductions (ops/reduce.h) ----------------------------------------------- */

/* y[o*inner + i] = (accumulate ? y[...] : 0) + scale * sum_k x[(o*n + k)*inner + i], k < n; x, y contiguous.
 * The sum is taken in double; y = (T)(y + scale * sum) with accumulate, (T)(scale * sum) without. */
int dlg_sum_axis(dlg_handle *h, int dtype, void *y, const void *x, int64_t outer, int64_t n, int64_t inner,
                 double scale, int accumulate);

/* What dlg_reduce computes per output (reduce.h's DL__RK_*, in double):
 *   SUM  y = scale * sum x                      (mean: scale = 1 / K)
 *   MAX  y = max x, MIN y = min x               (NaN propagates)
 *   VAR  mean = sum x / K; y = scale * sum (x - mean)^2    (scale = 1 / (K - correction))
 *   LSE  m = max x (0 when infinite); y = m + log(sum exp(x - m))
 * with K the elements reduced into each output. */
enum { DLG_RED_SUM = 0, DLG_RED_MAX = 1, DLG_RED_MIN = 2, DLG_RED_VAR = 3, DLG_RED_LSE = 4 };

/* Reduction of x (contiguous, shape[ndim] on the host, ndim <= DLG_MAXD)
 * over the dimensions whose bit is set in mask, into y: contiguous, the kept
 * dimensions in order (the CPU's output, keepdim or not; M = its numel).
 * VAR also writes mean[M] (device doubles; may be NULL), which its backward
 * reads. Tangent (forward mode), when tx != NULL, into ty [M] (x's layout):
 *   SUM tscale * sum tx;  MAX/MIN sum(x == y ? tx : 0) / count(x == y);
 *   VAR tscale * sum (x - mean) tx (tscale = 2 / (K - correction));
 *   LSE sum exp(x - lse) tx  (lse the unrounded double).
 * exp: float exp of the difference rounded to float for f32 (as the CPU). */
int dlg_reduce(dlg_handle *h, int dtype, int kind, int ndim, const int64_t *shape, unsigned mask,
               const void *x, void *y, double *mean, double scale, const void *tx, void *ty, double tscale);
/* Backward of dlg_reduce: gx (contiguous, x's shape) += d/dx sum(y gy), with
 * gy [M] contiguous, in double then rounded per element:
 *   SUM  scale gy[o]                        (the forward's scale)
 *   MAX/MIN  gy[o] / count(x == y[o]) at the elements equal to y[o], 0 elsewhere
 *   VAR  scale gy[o] (x - mean[o])          (scale = 2 / (K - correction); mean from dlg_reduce)
 *   LSE  gy[o] exp(x - y[o])
 * x is read by MAX, MIN, VAR, LSE; y by MAX, MIN, LSE. */
int dlg_reduce_backward(dlg_handle *h, int dtype, int kind, int ndim, const int64_t *shape, unsigned mask,
                        void *gx, const void *x, const void *y, const void *gy, const double *mean, double scale);

/* softmax (logsm 0) or log_softmax (logsm 1) of x along n, x and y
 * contiguous [outer, n, inner] (y may not alias x). Per row (reduce.h's
 * dl__sm_rows): m = max (in the dtype), e = exp(x - m) in the dtype,
 * s = sum e in double; softmax e * (T)(1/s), log_softmax (x - m) - (T)log(s). */
int dlg_softmax(dlg_handle *h, int dtype, int64_t outer, int64_t n, int64_t inner, const void *x, void *y,
                int logsm);
/* g += the rule `kind` along n, y the saved output, a the upstream gradient
 * (or the input's tangent), all contiguous [outer, n, inner]:
 *   0 softmax (backward and tangent): g += y (a - sum(a y))   (in double)
 *   1 log_softmax backward:          g += a - exp(y) (T)sum(a)
 *   2 log_softmax tangent:           g += a - (T)sum(exp(y) a) */
int dlg_softmax_backward(dlg_handle *h, int dtype, int64_t outer, int64_t n, int64_t inner, int kind,
                         const void *y, const void *a, void *g);

#ifdef __cplusplus
}
#endif

#endif /* DL_GPU_REDUCE_H */
