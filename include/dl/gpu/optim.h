/* dl/gpu/optim.h - the optimizer updates, clipping and regularisation on
 * the device: the ABI of src_gpu/optim.cu, for dl/optim.h. Plain C, with the conventions abi.h
 * states for the kernel families (host index arrays staged through the
 * workspace; sizes of 0 accepted). */
#ifndef DL_GPU_OPTIM_H
#define DL_GPU_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlg_handle dlg_handle;

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
/* Adam / AdamW over nt dense tensors in one launch (the multi-tensor form
 * dl_optim_step uses for a model's parameters): tensor k updates t[k].n
 * elements of t[k].p from t[k].g with its own state and scalars, exactly as
 * dlg_adam_update (rows NULL) would. t: a HOST array, staged through the
 * workspace; vmax NULL: no amsgrad for that tensor. */
typedef struct dlg_adam_tensor {
  void *p, *m, *v, *vmax;
  const void *g;
  int64_t n;
  double sg, wd, b1, b1c, b2, b2c, decay, step_size, bc2_sqrt, eps;
} dlg_adam_tensor;
int dlg_adam_multi(dlg_handle *h, int dtype, int nt, const dlg_adam_tensor *t);
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

/* LAMB (dl_lamb_update) over n contiguous elements, k = its ten scalars
 * (beta1, 1 - beta1, beta2, 1 - beta2, bc1, sqrt(bc2), eps, wd, lr,
 * max_trust): m and v, then the sums of p^2 and u^2 on the device (another
 * order than the CPU's, so the trust ratio's last bits, and p's, may
 * differ), then p -= (T)(lr trust) u. No wait on the host. */
int dlg_lamb_update(dlg_handle *h, int dtype, int64_t n, void *p, const void *g, void *m, void *v, const double *k);

/* x[i] clamped to [-v, v] (NaN stays), n elements (dl__clamp_buf). Bit-identical. */
int dlg_clamp(dlg_handle *h, int dtype, void *x, int64_t n, double v);
/* *out (one device double) = sum_i (double)x[i]^2, in a fixed order (dl__sumsq;
 * the order differs from the CPU's, so the last bits may). */
int dlg_sumsq(dlg_handle *h, int dtype, const void *x, int64_t n, double *out);
/* x[i] *= (T)f (dl__scale). Bit-identical. */
int dlg_scale(dlg_handle *h, int dtype, void *x, int64_t n, double f);
/* One gradient buffer of dlg_clip_multi: n elements at g (device). */
typedef struct dlg_gbuf {
  void *g;
  int64_t n;
} dlg_gbuf;
/* The global-norm stage of dl_clip_grads over nt buffers (t: host memory,
 * staged without a wait), in at most three launches whatever nt is:
 * s_k = sum_i (double)g_k[i]^2 (per-block partials added in a fixed order;
 * not the CPU's order, so the last bits may differ), then in tensor order
 * total = ((0 + s_0) + s_1) + ..., out[0] = sqrt(total) (out: two device
 * doubles), and when max_norm > 0: out[1] = f = max_norm / (out[0] + 1e-6)
 * and, unless f >= 1 (a NaN f scales: NaN gradients, as the CPU),
 * g_k[i] *= (T)f. Nothing is read back: out[0] is there for a caller that
 * wants the norm. */
int dlg_clip_multi(dlg_handle *h, int dtype, int nt, const dlg_gbuf *t, double max_norm, double *out);
/* Regularisation (dl_regularize): g = g + (l2 p + l1 ((p > 0) - (p < 0))),
 * rows / width as the optimizers (g indexes the touched rows, p the full
 * parameter). Bit-identical. */
int dlg_regularize(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *g, const void *p,
                   double l1, double l2);

#ifdef __cplusplus
}
#endif

#endif /* DL_GPU_OPTIM_H */
