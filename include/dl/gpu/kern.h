/* dl/gpu/kern.h - the device kernels behind reductions, softmax, losses,
 * embedding, dropout and the optimizers (src_gpu/kern.cu). Plain C, the
 * conventions of abi.h: handle first, DLG_OK / DLG_OOM / DLG_ERR with the
 * message in dlg_message(h), work queued on the handle's stream, pointers
 * are device pointers unless a comment says host, dtype DLG_F32 / DLG_F64.
 * Each call matches the CPU code it serves (named in its comment): same
 * formulas, same precision (sums in double, element math in the dtype), so
 * results agree with the CPU's to rounding; where the comment says
 * "bit-identical" the arithmetic is the CPU's, operation for operation
 * (no fused multiply-add), and so are the results.
 *
 * Index lists built on the host (embedding rows, labels, touched rows of a
 * row-sparse gradient) are passed as HOST int64 arrays: the call copies them
 * into the handle's workspace before its kernels run. The caller checks
 * their range (the CPU's messages); the kernels still never read or write
 * outside the arrays (an index out of range is skipped, as noted).
 *
 * Sizes of 0 are accepted: nothing is written, except by the calls that
 * produce a sum (their value over nothing, 0 / div). */
#ifndef DL_GPU_KERN_H
#define DL_GPU_KERN_H

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

/* >>embedding, row scatter, dropout (ops/sparse.h) ------------------------- */

/* y [n, D] contiguous = rows of w [V, D] (strides s0, s1 in elements) picked
 * by rows (HOST int64 [n]); a row outside [0, V) gives zeros (the caller
 * checks the range first: this only keeps the kernel inside w). */
int dlg_embedding_forward(dlg_handle *h, int dtype, void *y, const void *w, int64_t s0, int64_t s1, int64_t V,
                          int64_t D, const int64_t *rows, int64_t n);
/* dst[key[i], :] += src[i, :] for i = 0 .. n-1, dst [nrows, D] and src [n, D]
 * contiguous, key HOST int64 [n]. Deterministic and bit-identical to the
 * CPU's loop: the indices are grouped by key on the host (stable, so each
 * row's additions keep index order) and one thread adds a row's column in
 * that order, in the dtype. A key outside [0, nrows) is skipped. Serves the
 * embedding's backward (dense: key = the rows; row-sparse: key = the slots)
 * and dl_sgrad_add_to (dense += the sparse rows: key = s->rows). */
int dlg_rows_scatter(dlg_handle *h, int dtype, void *dst, int64_t nrows, int64_t D, const int64_t *key, int64_t n,
                     const void *src);
/* Inverted dropout, bit-identical to the CPU's mask: element i is kept when
 * (mix64(key + (base + i + 1) * 0x9e3779b97f4a7c15) >> 11) >= thr
 * (core.h's dl_rng_at(rng, base + i) with rng->key = key; thr = ceil(p 2^53)).
 * mask[i] (device bytes) = kept; y[i] = x[i] * ((T)scale * kept); x, y contiguous [n]. */
int dlg_dropout(dlg_handle *h, int dtype, int64_t n, const void *x, void *y, unsigned char *mask, uint64_t key,
                uint64_t base, uint64_t thr, double scale);
/* y[i] = (accumulate ? y[i] : 0) + x[i] * ((T)scale * mask[i]): dropout's
 * backward (accumulate 1: gx += gy * ...) and tangent (0). Bit-identical. */
int dlg_dropout_apply(dlg_handle *h, int dtype, int64_t n, void *y, const void *x, const unsigned char *mask,
                      double scale, int accumulate);

/* >>optimizers, clipping, regularisation (optim.h) ------------------------- */

/* Every update below is one fused kernel over the n elements of g,
 * bit-identical to optim.h's CPU loops (numbers rounded to the dtype first,
 * the same operations in the same order, no fused multiply-add).
 * rows == NULL: dense, element i of g is element i of p and of the state.
 * rows != NULL (HOST int64 [n / width]): a row-sparse step, element
 * (k, j) of g ([n / width, width]) updates element rows[k] * width + j of p
 * and of the state (the touched rows, each once). */

/* torch.optim.SGD (dl_sgd_update): d = sg g + wd p;
 * momentum == 0: p = p - lr d (buf unused, may be NULL); else
 * buf = first ? d : buf momentum + damp1 d;  p = p - lr (nesterov ? d + momentum buf : buf). */
int dlg_sgd_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                   void *buf, double sg, double wd, double momentum, double damp1, double lr, int first,
                   int nesterov);
/* Adam / AdamW (dl_adam_update's fused loop): d = sg g + wd p;
 * m = m b1 + b1c d;  v = v b2 + b2c (d d);  vmax != NULL: vmax = (vmax > v || vmax is NaN) ? vmax : v, used as v;
 * p = p decay - (step_size m) / (sqrt(v) / bc2_sqrt + eps). */
int dlg_adam_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                    void *m, void *v, void *vmax, double sg, double wd, double b1, double b1c, double b2, double b2c,
                    double decay, double step_size, double bc2_sqrt, double eps);
/* RMSprop (dl_rmsprop_update): d = sg g + wd p;  sq = sq alpha + alpha1 (d d);
 * ga != NULL (centered): ga = ga alpha + alpha1 d, avg = sqrt(sq - ga ga) + eps; else avg = sqrt(sq) + eps;
 * mb != NULL (momentum > 0): mb = mb momentum + d / avg, p = p - lr mb; else p = p - (lr d) / avg. */
int dlg_rmsprop_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p,
                       const void *g, void *sq, void *ga, void *mb, double sg, double wd, double alpha, double alpha1,
                       double eps, double momentum, double lr);
/* Adagrad (dl_adagrad_update): d = sg g + wd p;  sum = sum + d d;  p = p - (clr d) / (sqrt(sum) + eps). */
int dlg_adagrad_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p,
                       const void *g, void *sum, double sg, double wd, double clr, double eps);
/* Lion (dl_lion_update): c = m b1 + b1c g;  p = p decay - lr ((c > 0) - (c < 0));  m = m b2 + b2c g. */
int dlg_lion_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                    void *m, double b1, double b1c, double b2, double b2c, double lr, double decay);

/* x[i] clamped to [-v, v] (NaN stays), n elements (dl__clamp_buf). Bit-identical. */
int dlg_clamp(dlg_handle *h, int dtype, void *x, int64_t n, double v);
/* *out (one device double) = sum_i (double)x[i]^2, in a fixed order (dl__sumsq;
 * the order differs from the CPU's, so the last bits may). */
int dlg_sumsq(dlg_handle *h, int dtype, const void *x, int64_t n, double *out);
/* x[i] *= (T)f (dl__scale). Bit-identical. */
int dlg_scale(dlg_handle *h, int dtype, void *x, int64_t n, double f);
/* Regularisation (dl_regularize): g = g + (l2 p + l1 ((p > 0) - (p < 0))),
 * rows / width as the optimizers (g indexes the touched rows, p the full
 * parameter). Bit-identical. */
int dlg_regularize(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *g, const void *p,
                   double l1, double l2);

#ifdef __cplusplus
}
#endif

#endif /* DL_GPU_KERN_H */
