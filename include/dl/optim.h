/* dl/optim.h - optimizer update kernels over one parameter tensor, and
 * learning-rate schedules as pure functions.
 *
 * Each update applies one step of a PyTorch optimizer (torch 1.13's
 * single-tensor formulas, the same order of operations) to a parameter p,
 * given its gradient g and the optimizer's state tensors, in place:
 *
 *   dl_adam_cfg c = dl_adamw_defaults(1e-3);
 *   dl_tensor_fill(m, 0); dl_tensor_fill(v, 0);             // state starts at 0
 *   for (step = 1; ...; step++) {
 *     ... forward, backward into g ...
 *     dl_adam_update(w, g, m, v, NULL, step, &c);
 *   }
 *
 * - step counts calls for this parameter and is 1 on the first one.
 * - p, g and every state tensor given must have one shape and one dtype (f32
 *   or f64); a mismatch panics naming the function and both shapes. The
 *   element loops are DL_ASSIGN fused loops (expr.h): no temporary tensors,
 *   threads above the ctx's parallel threshold, strided views accepted.
 * - The zero value of a config is not PyTorch's default: start from
 *   dl_X_defaults(lr) and change fields.
 * - State tensors are owned by the caller; their initial values:
 *     SGD       buf: anything (step 1 copies the gradient into it)
 *     Adam      m, v, vmax: 0
 *     RMSprop   square_avg, grad_avg, momentum_buf: 0
 *     Adagrad   sum: initial_accumulator_value (dl_adagrad_init_state)
 *     Lion      m: 0
 *     LAMB      m, v: 0
 * - f32 parameters are updated in float arithmetic (like PyTorch on the CPU);
 *   scalars derived from the step (bias corrections, decayed learning rates)
 *   are computed in double and then rounded, like PyTorch's Python floats.
 *
 * Schedules return the learning rate for an epoch or step (0-based; what
 * torch's scheduler gives after that many scheduler.step() calls):
 *   dl_lr_step          StepLR:        base * gamma^floor(epoch / step_size)
 *   dl_lr_multistep     MultiStepLR:   base * gamma^(number of milestones <= epoch)
 *   dl_lr_exponential   ExponentialLR: base * gamma^epoch
 *   dl_lr_cosine_warmup linear warm-up from 0 to base over warmup_steps steps
 *                       (step * base / warmup_steps), then half a cosine from
 *                       base down to min_lr at total_steps, min_lr after it
 *   dl_lr_one_cycle     OneCycleLR(anneal_strategy='cos', three_phase=False)
 * The schedules (and the configs) are visible to nvcc too; the rest is
 * host code (C or C++).
 *
 * GPU (DL_USE_CUDA): an update of device tensors (contiguous) is one fused
 * kernel (dl/gpu/optim.h) that gives the CPU's bits; an optimizer made for a
 * model on the GPU keeps its state there (make it after dl_model_to_device:
 * a step with state and model on different devices panics), and clipping
 * and regularisation run on the device too.
 */
#ifndef DL_OPTIM_H
#define DL_OPTIM_H

#include "expr.h"
#include "layers.h"
DL__HEADER_BEGIN

#include <float.h>
#include <math.h>

/* >>configs ---------------------------------------------------------------- */

/* torch.optim.SGD */
typedef struct dl_sgd_cfg {
  double lr, momentum, dampening, weight_decay; /* PyTorch's names and meanings */
  int nesterov, maximize; /* 1: Nesterov momentum; 1: maximise the objective */
} dl_sgd_cfg;

/* torch.optim.Adam (decoupled = 0) and torch.optim.AdamW (decoupled = 1) */
typedef struct dl_adam_cfg {
  double lr, beta1, beta2, eps, weight_decay; /* PyTorch's names and meanings */
  int amsgrad, decoupled, maximize; /* 1: AMSGrad; 1: AdamW's decoupled weight decay; 1: maximise */
} dl_adam_cfg;

/* torch.optim.RMSprop */
typedef struct dl_rmsprop_cfg {
  double lr, alpha, eps, weight_decay, momentum; /* PyTorch's names and meanings */
  int centered, maximize; /* 1: centred (by the mean gradient); 1: maximise */
} dl_rmsprop_cfg;

/* torch.optim.Adagrad */
typedef struct dl_adagrad_cfg {
  double lr, lr_decay, weight_decay, initial_accumulator_value, eps; /* PyTorch's names and meanings */
  int maximize; /* 1: maximise the objective */
} dl_adagrad_cfg;

/* Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
 *   c = beta1*m + (1-beta1)*g;  p = p*(1 - lr*wd) - lr*sign(c);
 *   m = beta2*m + (1-beta2)*g */
typedef struct dl_lion_cfg {
  double lr, beta1, beta2, weight_decay; /* the paper's names */
} dl_lion_cfg;

/* LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning:
 * Training BERT in 76 minutes", Algorithm 2), per parameter tensor:
 *   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
 *   u = (m / bc1) / (sqrt(v) / sqrt(bc2) + eps) + wd*p
 *       (bc = 1 - beta^step with bias_correction, else 1)
 *   trust = |p| / |u| (L2 norms over the tensor; 1 when either is 0),
 *           at most max_trust when max_trust > 0 (the paper's clipped phi)
 *   p = p - lr*trust*u
 * Not in torch 1.13: tools/fixtures_optim.py holds a reference written from
 * the paper. Defaults: betas 0.9, 0.999, eps 1e-6 (the paper's), no weight
 * decay, no trust clipping, bias correction on. */
typedef struct dl_lamb_cfg {
  double lr, beta1, beta2, eps, weight_decay, max_trust; /* the paper's names; max_trust > 0 clips the trust ratio */
  int bias_correction; /* 1: bias-corrected moments (the default) */
} dl_lamb_cfg;

/* PyTorch's defaults (Lion: the paper's betas 0.9, 0.99, no weight decay). */
DL_API dl_sgd_cfg dl_sgd_defaults(double lr) {
  dl_sgd_cfg c;
  c.lr = lr; c.momentum = 0; c.dampening = 0; c.weight_decay = 0;
  c.nesterov = 0; c.maximize = 0;
  return c;
}
/* torch.optim.Adam's defaults with learning rate lr: betas 0.9, 0.999, eps
 * 1e-8, no weight decay. */
DL_API dl_adam_cfg dl_adam_defaults(double lr) {
  dl_adam_cfg c;
  c.lr = lr; c.beta1 = 0.9; c.beta2 = 0.999; c.eps = 1e-8; c.weight_decay = 0;
  c.amsgrad = 0; c.decoupled = 0; c.maximize = 0;
  return c;
}
/* torch.optim.AdamW's defaults with learning rate lr: Adam's, decoupled
 * weight decay 0.01. */
DL_API dl_adam_cfg dl_adamw_defaults(double lr) {
  dl_adam_cfg c = dl_adam_defaults(lr);
  c.weight_decay = 1e-2;
  c.decoupled = 1;
  return c;
}
/* torch.optim.RMSprop's defaults with learning rate lr (alpha 0.99, eps
 * 1e-8). */
DL_API dl_rmsprop_cfg dl_rmsprop_defaults(double lr) {
  dl_rmsprop_cfg c;
  c.lr = lr; c.alpha = 0.99; c.eps = 1e-8; c.weight_decay = 0; c.momentum = 0;
  c.centered = 0; c.maximize = 0;
  return c;
}
/* torch.optim.Adagrad's defaults with learning rate lr (eps 1e-10). */
DL_API dl_adagrad_cfg dl_adagrad_defaults(double lr) {
  dl_adagrad_cfg c;
  c.lr = lr; c.lr_decay = 0; c.weight_decay = 0; c.initial_accumulator_value = 0;
  c.eps = 1e-10; c.maximize = 0;
  return c;
}
/* Lion's defaults with learning rate lr: the paper's betas 0.9, 0.99, no
 * weight decay. */
DL_API dl_lion_cfg dl_lion_defaults(double lr) {
  dl_lion_cfg c;
  c.lr = lr; c.beta1 = 0.9; c.beta2 = 0.99; c.weight_decay = 0;
  return c;
}
/* LAMB's defaults with learning rate lr (see dl_lamb_cfg above). */
DL_API dl_lamb_cfg dl_lamb_defaults(double lr) {
  dl_lamb_cfg c;
  c.lr = lr; c.beta1 = 0.9; c.beta2 = 0.999; c.eps = 1e-6; c.weight_decay = 0; c.max_trust = 0;
  c.bias_correction = 1;
  return c;
}

/* >>schedules -------------------------------------------------------------- */

/* StepLR: base * gamma^(epoch / step_size) (integer division; step_size <=
 * 0: base). */
DL_API double dl_lr_step(double base, int64_t epoch, int64_t step_size, double gamma) {
  return base * pow(gamma, (double)(step_size > 0 ? epoch / step_size : 0));
}

/* milestones need not be sorted; a repeated milestone counts as often as it
 * appears (like torch's Counter). */
DL_API double dl_lr_multistep(double base, int64_t epoch, const int *milestones, int n,
                              double gamma) {
  int i, k = 0;
  for (i = 0; i < n; i++)
    if (milestones[i] <= epoch) k++;
  return base * pow(gamma, (double)k);
}

/* ExponentialLR: base * gamma^epoch. */
DL_API double dl_lr_exponential(double base, int64_t epoch, double gamma) {
  return base * pow(gamma, (double)epoch);
}

/* step < warmup_steps: base * step / warmup_steps (0 at step 0);
 * then min_lr + (base - min_lr) * (1 + cos(pi * t)) / 2 with
 * t = (step - warmup_steps) / (total_steps - warmup_steps) clamped to [0, 1]
 * (t = 1 when total_steps <= warmup_steps). */
DL_API double dl_lr_cosine_warmup(double base, int64_t step, int64_t warmup_steps,
                                  int64_t total_steps, double min_lr) {
  double t;
  if (step < warmup_steps) return base * (double)step / (double)warmup_steps;
  if (total_steps <= warmup_steps) return min_lr;
  t = (double)(step - warmup_steps) / (double)(total_steps - warmup_steps);
  if (t > 1) t = 1;
  return min_lr + (base - min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * t));
}

/* torch.optim.lr_scheduler.OneCycleLR(max_lr, total_steps, pct_start,
 * anneal_strategy='cos', div_factor, final_div_factor, three_phase=False):
 * from max_lr/div_factor up to max_lr at step pct_start*total_steps - 1, then
 * down to max_lr/div_factor/final_div_factor at step total_steps - 1.
 * (torch's defaults: pct_start 0.3, div_factor 25, final_div_factor 1e4.) */
DL_API double dl_lr_one_cycle(double max_lr, int64_t step, int64_t total_steps, double pct_start,
                              double div_factor, double final_div_factor) {
  const double initial = max_lr / div_factor, min_lr = initial / final_div_factor;
  const double end1 = pct_start * (double)total_steps - 1, end2 = (double)(total_steps - 1);
  double start, end, s0, s1, pct;
  if ((double)step <= end1) { start = initial; end = max_lr; s0 = 0; s1 = end1; }
  else { start = max_lr; end = min_lr; s0 = end1; s1 = end2; }
  pct = ((double)step - s0) / (s1 - s0);
  return end + (start - end) / 2.0 * (cos(3.14159265358979323846 * pct) + 1);
}

#ifndef DL__SCALAR_ONLY

/* >>checks ----------------------------------------------------------------- */

/* Panics unless t has p's dtype and shape; a NULL t is reported as missing. */
DL_API void dl__optim_same(const char *fn, const dl_tensor *p, const dl_tensor *t,
                           const char *what) {
  if (!t)
    DL_PANIC(p->ctx, fn, "%s is NULL (parameter %s)", what, DL_SHAPESTR(p));
  if (t->dtype != p->dtype || !dl_tensor_same_shape(p, t))
    DL_PANIC(p->ctx, fn, "%s %s does not match parameter %s (same shape and dtype required)",
             what, DL_SHAPESTR(t), DL_SHAPESTR(p));
#ifdef DL_USE_CUDA
  if (t->device != p->device)
    DL_PANIC(p->ctx, fn, "%s %s is on the %s but parameter %s is on the %s (one device for both: an optimizer "
             "made before dl_model_to_device keeps its state on the host)", what, DL_SHAPESTR(t),
             t->device == DL_CUDA ? "GPU" : "host", DL_SHAPESTR(p), p->device == DL_CUDA ? "GPU" : "host");
#endif
}
DL_API void dl__optim_param(const char *fn, const dl_tensor *p, const dl_tensor *g,
                            const void *cfg, int64_t step) {
  if (!p || !g || !cfg)
    dl_panic_at(p ? p->ctx : NULL, __FILE__, __LINE__, fn, "NULL parameter, gradient or config");
  if (p->dtype != DL_F32 && p->dtype != DL_F64)
    DL_PANIC(p->ctx, fn, "parameter %s must be f32 or f64", DL_SHAPESTR(p));
  dl__optim_same(fn, p, g, "gradient");
  if (step < 1) DL_PANIC(p->ctx, fn, "step %lld: steps count from 1", (long long)step);
}

#ifdef DL_USE_CUDA
/* >>updates on the GPU --------------------------------------------------------
 * One fused kernel per update (dl/gpu/optim.h), bit-identical to the loops
 * below: the same scalars, computed here as the CPU versions compute them,
 * rounded to the dtype in the kernel, the same operations in the same order.
 * g is the dense gradient (rows == NULL), or the values [nnz, width] of a
 * row-sparse one whose row k belongs to parameter row rows[k] (host array):
 * then only those rows of p and of the state change. */


/* Panics unless t is contiguous on the GPU with p's dtype; a state tensor
 * (state != 0) must also be there (not NULL) and have p's shape. */
DL_API void dl__optim_gpu_need(const char *fn, const dl_tensor *p, const dl_tensor *t, const char *what, int state) {
  if (state) dl__optim_same(fn, p, t, what);
  else if (!t) return;
  if (t->dtype != p->dtype || t->device != DL_CUDA)
    DL_PANIC(p->ctx, fn, "%s %s must be a %s tensor on the GPU, as parameter %s", what, DL_SHAPESTR(t),
             dl_dtype_name(p->dtype), DL_SHAPESTR(p));
  if (!dl_tensor_is_contiguous(t))
    DL_PANIC(p->ctx, fn, "%s %s must be contiguous on the GPU (parameter %s)", what, DL_SHAPESTR(t), DL_SHAPESTR(p));
}
/* The row width of g for the kernels (0: dense). */
DL_API int64_t dl__optim_gpu_width(const char *fn, const dl_tensor *p, const dl_tensor *g, const int64_t *rows) {
  dl__optim_gpu_need(fn, p, p, "parameter", 0);
  dl__optim_gpu_need(fn, p, g, "gradient", 0);
  if (!rows) {
    if (!dl_tensor_same_shape(p, g))
      DL_PANIC(p->ctx, fn, "gradient %s does not match parameter %s", DL_SHAPESTR(g), DL_SHAPESTR(p));
    return 0;
  }
  if (p->ndim != 2 || g->ndim != 2 || g->shape[1] != p->shape[1])
    DL_PANIC(p->ctx, fn, "row-sparse gradient %s does not fit parameter %s", DL_SHAPESTR(g), DL_SHAPESTR(p));
  return g->shape[1];
}

DL_API void dl__sgd_gpu(dl_tensor *p, const dl_tensor *g, dl_tensor *buf, int64_t step, const dl_sgd_cfg *c,
                        const int64_t *rows) {
  const char *fn = "dl_sgd_update";
  const int64_t w = dl__optim_gpu_width(fn, p, g, rows);
  if (c->momentum != 0) dl__optim_gpu_need(fn, p, buf, "momentum buffer", 1);
  dl__gpu_ok(p, fn, dlg_sgd_update(dl__gpu_h(p, fn), (int)p->dtype, g->numel, w, rows, p->data, g->data,
                                   c->momentum != 0 ? buf->data : NULL, c->maximize ? -1.0 : 1.0, c->weight_decay,
                                   c->momentum, 1 - c->dampening, c->lr, step == 1, c->nesterov));
}
/* The checks of dl_adam_update for a dense update on the GPU, and its
 * kernel's pointers and scalars in *e (for dlg_adam_multi). */
DL_API void dl__adam_gpu_entry(dl_tensor *p, const dl_tensor *g, dl_tensor *m, dl_tensor *v, dl_tensor *vmax,
                               int64_t step, const dl_adam_cfg *c, dlg_adam_tensor *e) {
  const char *fn = "dl_adam_update";
  const double b1 = c->beta1, b2 = c->beta2;
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, m, "m (first moment)");
  dl__optim_same(fn, p, v, "v (second moment)");
  (void)dl__optim_gpu_width(fn, p, g, NULL);
  dl__optim_gpu_need(fn, p, m, "m (first moment)", 1);
  dl__optim_gpu_need(fn, p, v, "v (second moment)", 1);
  if (c->amsgrad) dl__optim_gpu_need(fn, p, vmax, "vmax (amsgrad)", 1);
  e->p = p->data;
  e->g = g->data;
  e->m = m->data;
  e->v = v->data;
  e->vmax = c->amsgrad ? vmax->data : NULL;
  e->n = g->numel;
  e->sg = c->maximize ? -1.0 : 1.0;
  e->wd = c->decoupled ? 0.0 : c->weight_decay;
  e->b1 = b1;
  e->b1c = 1 - b1;
  e->b2 = b2;
  e->b2c = 1 - b2;
  e->decay = c->decoupled ? 1 - c->lr * c->weight_decay : 1.0;
  e->step_size = c->lr / (1 - pow(b1, (double)step));
  e->bc2_sqrt = sqrt(1 - pow(b2, (double)step));
  e->eps = c->eps;
}
DL_API void dl__adam_gpu(dl_tensor *p, const dl_tensor *g, dl_tensor *m, dl_tensor *v, dl_tensor *vmax, int64_t step,
                         const dl_adam_cfg *c, const int64_t *rows) {
  const char *fn = "dl_adam_update";
  const int64_t w = dl__optim_gpu_width(fn, p, g, rows);
  const double b1 = c->beta1, b2 = c->beta2;
  if (!rows) { /* dense: the one-tensor case of the multi-tensor kernel */
    dlg_adam_tensor e;
    dl__adam_gpu_entry(p, g, m, v, vmax, step, c, &e);
    dl__gpu_ok(p, fn, dlg_adam_multi(dl__gpu_h(p, fn), (int)p->dtype, 1, &e));
    return;
  }
  dl__optim_gpu_need(fn, p, m, "m (first moment)", 1);
  dl__optim_gpu_need(fn, p, v, "v (second moment)", 1);
  if (c->amsgrad) dl__optim_gpu_need(fn, p, vmax, "vmax (amsgrad)", 1);
  dl__gpu_ok(p, fn, dlg_adam_update(dl__gpu_h(p, fn), (int)p->dtype, g->numel, w, rows, p->data, g->data, m->data,
                                    v->data, c->amsgrad ? vmax->data : NULL, c->maximize ? -1.0 : 1.0,
                                    c->decoupled ? 0.0 : c->weight_decay, b1, 1 - b1, b2, 1 - b2,
                                    c->decoupled ? 1 - c->lr * c->weight_decay : 1.0,
                                    c->lr / (1 - pow(b1, (double)step)), sqrt(1 - pow(b2, (double)step)), c->eps));
}
DL_API void dl__rmsprop_gpu(dl_tensor *p, const dl_tensor *g, dl_tensor *square_avg, dl_tensor *grad_avg,
                            dl_tensor *momentum_buf, const dl_rmsprop_cfg *c, const int64_t *rows) {
  const char *fn = "dl_rmsprop_update";
  const int64_t w = dl__optim_gpu_width(fn, p, g, rows);
  dl_tensor *ga = c->centered ? grad_avg : NULL, *mb = c->momentum > 0 ? momentum_buf : NULL;
  dl__optim_gpu_need(fn, p, square_avg, "square_avg", 1);
  if (ga) dl__optim_gpu_need(fn, p, ga, "grad_avg (centered)", 1);
  if (mb) dl__optim_gpu_need(fn, p, mb, "momentum buffer", 1);
  if ((c->centered && !ga) || (c->momentum > 0 && !mb))
    dl__optim_same(fn, p, NULL, c->centered && !ga ? "grad_avg (centered)" : "momentum buffer"); /* panics */
  dl__gpu_ok(p, fn, dlg_rmsprop_update(dl__gpu_h(p, fn), (int)p->dtype, g->numel, w, rows, p->data, g->data,
                                       square_avg->data, ga ? ga->data : NULL, mb ? mb->data : NULL,
                                       c->maximize ? -1.0 : 1.0, c->weight_decay, c->alpha, 1 - c->alpha, c->eps,
                                       c->momentum, c->lr));
}
DL_API void dl__adagrad_gpu(dl_tensor *p, const dl_tensor *g, dl_tensor *sum, int64_t step, const dl_adagrad_cfg *c,
                            const int64_t *rows) {
  const char *fn = "dl_adagrad_update";
  const int64_t w = dl__optim_gpu_width(fn, p, g, rows);
  dl__optim_gpu_need(fn, p, sum, "sum", 1);
  dl__gpu_ok(p, fn, dlg_adagrad_update(dl__gpu_h(p, fn), (int)p->dtype, g->numel, w, rows, p->data, g->data,
                                       sum->data, c->maximize ? -1.0 : 1.0, c->weight_decay,
                                       c->lr / (1 + (double)(step - 1) * c->lr_decay), c->eps));
}
DL_API void dl__lion_gpu(dl_tensor *p, const dl_tensor *g, dl_tensor *m, const dl_lion_cfg *c, const int64_t *rows) {
  const char *fn = "dl_lion_update";
  const int64_t w = dl__optim_gpu_width(fn, p, g, rows);
  dl__optim_gpu_need(fn, p, m, "m", 1);
  dl__gpu_ok(p, fn, dlg_lion_update(dl__gpu_h(p, fn), (int)p->dtype, g->numel, w, rows, p->data, g->data, m->data,
                                    c->beta1, 1 - c->beta1, c->beta2, 1 - c->beta2, c->lr,
                                    1 - c->lr * c->weight_decay));
}
#endif

/* >>updates ---------------------------------------------------------------- */

/* Fills an Adagrad sum with c->initial_accumulator_value. */
DL_API void dl_adagrad_init_state(dl_tensor *sum, const dl_adagrad_cfg *c) {
  dl_tensor_fill(sum, c->initial_accumulator_value);
}

/* Every update below is one pass of a kernel over contiguous arrays,
 * a[0] = p, a[1] = g, a[2..] the state (NULL where unused), written once for
 * float and once for double with the same operations in the same order (the
 * GPU kernels repeat that order: their results are bit-identical). The
 * scalars come in as doubles and are rounded to the element type first, as
 * generic math rounds a number in an f32 loop. Tensors that are not all
 * contiguous (views a user passes) go through dl__optim_run's tiles: gathered
 * into stack buffers, updated, written back; no allocation either way.
 * Contiguous arrays are cut into blocks of DL__OPTIM_BLOCK elements shared
 * by the ctx's team above its parallel threshold (each element is updated
 * on its own, so the bits do not depend on the thread count); both paths
 * run in the ctx's floating-point mode (flush-to-zero unless
 * keep_denormals), as every other loop of the library: Adam's divisions and
 * square root on denormal moments (tiny gradients late in training) ran 60x
 * slower without it. A gradient flagged DL_TENSOR__ZERO_ON_READ (by
 * dl_optim_step inside dl_apply_grads, which zeroes the gradients next) is
 * zeroed block by block right after the kernel has read it, while the block
 * is in L1, and the flag cleared; dl_optim_step zeroes what no kernel did.
 * (A kernel reads its gradient in one pass: the block is its last use.) */
#define DL__OPTIM_NT 5
#define DL__OPTIM_BLOCK 8192
typedef void (*dl__optim_kernel)(void *const *a, int64_t n, const double *k);
DL_API void dl__optim_run(dl_tensor *const *t, int nt, dl__optim_kernel kern, const double *k) {
  enum { TILE = 256 };
  void *a[DL__OPTIM_NT];
  int64_t i, n = t[0]->numel, idx[DL_MAX_DIMS], off[DL__OPTIM_NT];
  int j, d, contig = 1;
  const size_t es = dl_dtype_size(t[0]->dtype);
  const int zero = nt > 1 && t[1] && (t[1]->flags & DL_TENSOR__ZERO_ON_READ) && t[1]->data;
  for (j = 0; j < nt; j++) {
    a[j] = t[j] ? t[j]->data : NULL;
    if (t[j] && !dl_tensor_is_contiguous(t[j])) contig = 0;
  }
  if (contig) { /* blocks of DL__OPTIM_BLOCK elements on the ctx's team */
    DL_PARALLEL_FOR(t[0]->ctx, n, (n + DL__OPTIM_BLOCK - 1) / DL__OPTIM_BLOCK, b, {
      void *ab[DL__OPTIM_NT];
      const int64_t lo = b * DL__OPTIM_BLOCK, len = n - lo < DL__OPTIM_BLOCK ? n - lo : DL__OPTIM_BLOCK;
      int q;
      for (q = 0; q < nt; q++) ab[q] = a[q] ? (void *)((char *)a[q] + (size_t)lo * es) : NULL;
      kern(ab, len, k);
      if (zero) memset(ab[1], 0, (size_t)len * es); /* still in L1: no pass of its own over the gradients */
    });
    if (zero) t[1]->flags &= ~(unsigned)DL_TENSOR__ZERO_ON_READ; /* done: dl_optim_step sees it */
    return;
  }
  {
    const dl_fpmode fm = dl_ctx_fp_enter(t[0]->ctx);
    union { float f[TILE]; double d[TILE]; } buf[DL__OPTIM_NT];
    memset(idx, 0, sizeof idx);
    for (i = 0; i < n; i += TILE) {
      const int64_t m = n - i < TILE ? n - i : (int64_t)TILE;
      int64_t e;
      for (j = 0; j < nt; j++) a[j] = t[j] ? (void *)buf[j].d : NULL;
      /* gather: element e of the tile is row-major element i + e */
      for (e = 0; e < m; e++) {
        int64_t r = i + e;
        for (d = t[0]->ndim - 1; d >= 0; d--) { idx[d] = r % t[0]->shape[d]; r /= t[0]->shape[d]; }
        for (j = 0; j < nt; j++) {
          if (!t[j]) continue;
          off[j] = 0;
          for (d = 0; d < t[j]->ndim; d++) off[j] += idx[d] * t[j]->strides[d];
          memcpy((char *)buf[j].d + (size_t)e * es, (const char *)t[j]->data + (size_t)off[j] * es, es);
        }
      }
      kern(a, m, k);
      for (e = 0; e < m; e++) { /* write back everything but the gradient (j = 1) */
        int64_t r = i + e;
        for (d = t[0]->ndim - 1; d >= 0; d--) { idx[d] = r % t[0]->shape[d]; r /= t[0]->shape[d]; }
        for (j = 0; j < nt; j++) {
          if (!t[j] || j == 1) continue;
          off[j] = 0;
          for (d = 0; d < t[j]->ndim; d++) off[j] += idx[d] * t[j]->strides[d];
          memcpy((char *)t[j]->data + (size_t)off[j] * es, (const char *)buf[j].d + (size_t)e * es, es);
        }
      }
    }
    dl_ftz_leave(fm);
  }
}
/* sqrt in the kernel's element type S (sqrtf for float, as f32 generic math) */
#define DL__OSQRT(x) (sizeof(S) == sizeof(float) ? (S)sqrtf((float)(x)) : (S)sqrt((double)(x)))
/* Declares the kernel's arrays in the element type S. */
#define DL__OPTIM_ARRAYS(S)                                                            \
  S *const DL__RESTRICT P = (S *)a[0];                                                 \
  const S *const DL__RESTRICT G = (const S *)a[1];                                     \
  S *const DL__RESTRICT A2 = (S *)a[2];                                                \
  S *const DL__RESTRICT A3 = (S *)a[3];                                                \
  S *const DL__RESTRICT A4 = (S *)a[4];                                                \
  int64_t i;                                                                           \
  (void)A2; (void)A3; (void)A4
/* A kernel in float and double: NAME_f32 / NAME_f64, body over element i. */
#define DL__OPTIM_KERNEL(NAME, ...)                                                    \
  DL_API void NAME##_f32(void *const *a, int64_t n, const double *kd) {                \
    typedef float S;                                                                   \
    DL__OPTIM_ARRAYS(float);                                                           \
    __VA_ARGS__                                                                        \
  }                                                                                    \
  DL_API void NAME##_f64(void *const *a, int64_t n, const double *kd) {                \
    typedef double S;                                                                  \
    DL__OPTIM_ARRAYS(double);                                                          \
    __VA_ARGS__                                                                        \
  }
#define DL__OPTIM_PICK(NAME, p) ((p)->dtype == DL_F32 ? NAME##_f32 : NAME##_f64)

/* torch.optim.SGD. buf (the momentum buffer) may be NULL when momentum == 0.
 *   d = (maximize ? -g : g) + wd*p
 *   step 1: buf = d;  later: buf = momentum*buf + (1-dampening)*d
 *   p -= lr * (nesterov ? d + momentum*buf : buf)     (p -= lr*d without momentum)
 * kd: sg, wd, momentum, 1 - dampening, lr, mode (0 no momentum, 1 first step,
 * 2 later), nesterov */
DL__OPTIM_KERNEL(dl__sgd_k, {
  const S sg = (S)kd[0], wd = (S)kd[1], mom = (S)kd[2], damp1 = (S)kd[3], lr = (S)kd[4];
  const int mode = (int)kd[5], nesterov = kd[6] != 0;
  DL__IVDEP
  for (i = 0; i < n; i++) {
    const S d = sg * G[i] + wd * P[i];
    if (mode == 0) { P[i] = P[i] - lr * d; continue; }
    A2[i] = mode == 1 ? d : A2[i] * mom + damp1 * d;
    P[i] = P[i] - lr * (nesterov ? d + mom * A2[i] : A2[i]);
  }
})
DL_API void dl_sgd_update(dl_tensor *p, const dl_tensor *g, dl_tensor *buf, int64_t step,
                          const dl_sgd_cfg *c) {
  const char *fn = "dl_sgd_update";
  double k[7];
  dl_tensor *t[3];
  dl__optim_param(fn, p, g, c, step);
#ifdef DL_USE_CUDA
  if (p->device == DL_CUDA) { dl__sgd_gpu(p, g, buf, step, c, NULL); return; }
#endif
  if (c->momentum != 0) dl__optim_same(fn, p, buf, "momentum buffer");
  k[0] = c->maximize ? -1.0 : 1.0; k[1] = c->weight_decay; k[2] = c->momentum; k[3] = 1 - c->dampening;
  k[4] = c->lr; k[5] = c->momentum == 0 ? 0 : step == 1 ? 1 : 2; k[6] = c->nesterov;
  t[0] = p; t[1] = (dl_tensor *)g; t[2] = c->momentum != 0 ? buf : NULL;
  dl__optim_run(t, 3, DL__OPTIM_PICK(dl__sgd_k, p), k);
}

/* One pass of Adam over contiguous p, g, m, v (vmax), reading each array
 * once (the three-pass form of the first version moved 10 arrays instead
 * of 7). The vector body runs the scalar body's operations in its order on
 * the widest vectors the build has (AVX-512: 16 floats or 8 doubles; AVX: 8
 * or 4; SSE2, every x86-64: 4 or 2): mul, add, div and sqrt are correctly
 * rounded at every width as in scalar code, so the vector body and the
 * scalar tail agree bit for bit (gcc's -O2 would not vectorise this loop
 * itself: sqrtf's errno and the unknown trip count). Its cost was the
 * two divisions and the square root, all on the one divider (about 2
 * cycles per element on SSE, 1.8 on AVX; the 512-bit units are no faster
 * per element): an in-cache array ran at the speed of one in L3. Where the
 * build has FMA the division by sqrt(1 - beta2^step), the same for every
 * element, takes the divider's exact bits from the FMA units instead
 * (DL__ADAM_DIVBC). On this AVX-512 machine (bench/bench_adam.c, one
 * thread) an f32 element in cache went from 0.79-0.82 to 0.53-0.66 ns, the
 * MLP's 235k parameters from 0.80-0.86 to 0.73-0.82 ns (memory's pace),
 * f64 in cache from 2.7 to 1.9 ns. dl__optim_run splits the arrays over the
 * ctx's team. */
typedef struct dl__adam_k {
  double sg, wd, b1, b1c, b2, b2c, decay, step_size, bc2_sqrt, eps;
} dl__adam_k;
#define DL__ADAM_SCALAR(S, SQRT)                                                           \
  for (; i < n; i++) {                                                                     \
    const S d = sg * G[i] + wd * P[i];                                                     \
    const S mi = M[i] * b1 + b1c * d;                                                      \
    S vi = V[i] * b2 + b2c * (d * d);                                                      \
    M[i] = mi;                                                                             \
    V[i] = vi;                                                                             \
    if (VM) {                                                                              \
      const S a = VM[i];                                                                   \
      vi = (a > vi || a != a) ? a : vi;                                                    \
      VM[i] = vi;                                                                          \
    }                                                                                      \
    P[i] = P[i] * dec - (ss * mi) / (SQRT(vi) / bc + eps);                                 \
  }
/* The vector body and the scalar tail must round every product and sum on
 * its own: no FMA contraction (clang contracts a * b + c within an
 * expression by default, gcc across statements in its GNU modes). */
#if defined(__clang__)
#define DL__ADAM_NOFMA
#define DL__ADAM_NOFMA_BODY _Pragma("clang fp contract(off)")
#elif defined(__GNUC__) && !defined(__CUDACC__)
#define DL__ADAM_NOFMA __attribute__((optimize("fp-contract=off")))
#define DL__ADAM_NOFMA_BODY
#else
#define DL__ADAM_NOFMA
#define DL__ADAM_NOFMA_BODY
#endif
#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif
/* q = q / bc (q >= 0: a square root) as the division rounds it, without
 * the divider where mk says the divisor allows (see dl__adam_f32): with y =
 * vrbc = 1/bc correctly rounded, q0 = s y is within 1.5 ulps of s / bc,
 * q1 = q0 + (s - bc q0) y within one, and q2 = q1 + (s - bc q1) y, the
 * remainder exact in the FMA, is the correctly rounded quotient (Markstein's
 * theorem: y correctly rounded and q1 faithful). Checked against the
 * division by tools/adam_div_sweep.c: every f32 mantissa over 34861
 * divisors (each step to 20000 of beta2 0.5, 0.9, 0.95, 0.98, 0.99, 0.995,
 * 0.999, 0.9999, and random ones) and 1.6e8 random f64 pairs, none apart;
 * tests/test_optim.c's test_adam_vector_matches_scalar runs seven steps.
 * Lanes that are not finite (ODD) take the division. FMA and FNMA are
 * a * b + c and c - a * b with one rounding. */
#define DL__ADAM_DIVBC(T, X, FMA, FNMA, ODD)                                               \
  if (mk) {                                                                                \
    const T s_ = q;                                                                        \
    q = X(mul)(s_, vrbc);                                                                  \
    q = FMA(FNMA(q, vbc, s_), vrbc, q);                                                    \
    q = FMA(FNMA(q, vbc, s_), vrbc, q);                                                    \
    ODD(q, s_)                                                                             \
  } else {                                                                                 \
    q = X(div)(q, vbc);                                                                    \
  }
#define DL__ADAM_DIVBC_PLAIN(T, X) q = X(div)(q, vbc);
/* The scalar body on vectors T of W lanes: X(op) names the intrinsic
 * (_mm512_add_ps ...), SQRT the square root, TAKE(a, vi) AMSGrad's
 * (a > vi || a != a) ? a : vi, DIVBC the division by bc (above). */
#define DL__ADAM_VEC(T, W, X, SQRT, TAKE, DIVBC)                                                 \
  {                                                                                        \
    const T vsg = X(set1)(sg), vwd = X(set1)(wd), vb1 = X(set1)(b1), vb1c = X(set1)(b1c); \
    const T vb2 = X(set1)(b2), vb2c = X(set1)(b2c), vdec = X(set1)(dec), vss = X(set1)(ss); \
    const T vbc = X(set1)(bc), vrbc = X(set1)(rbc), veps = X(set1)(eps);                   \
    (void)vrbc;                                                                            \
    for (; i + (W) <= n; i += (W)) {                                                       \
      const T p = X(loadu)(P + i), g = X(loadu)(G + i);                                    \
      const T d = X(add)(X(mul)(vsg, g), X(mul)(vwd, p));                                  \
      const T mi = X(add)(X(mul)(X(loadu)(M + i), vb1), X(mul)(vb1c, d));                  \
      T vi = X(add)(X(mul)(X(loadu)(V + i), vb2), X(mul)(vb2c, X(mul)(d, d)));             \
      X(storeu)(M + i, mi);                                                                \
      X(storeu)(V + i, vi);                                                                \
      if (VM) {                                                                            \
        const T a = X(loadu)(VM + i);                                                      \
        vi = TAKE(a, vi);                                                                  \
        X(storeu)(VM + i, vi);                                                             \
      }                                                                                    \
      {                                                                                    \
        T q = SQRT(vi);                                                                    \
        DIVBC                                                                              \
        X(storeu)(P + i, X(sub)(X(mul)(p, vdec), X(div)(X(mul)(vss, mi), X(add)(q, veps)))); \
      }                                                                                    \
    }                                                                                      \
  }
#if defined(__AVX512F__)
#define DL__ADAM_XS(op) _mm512_##op##_ps
#define DL__ADAM_XD(op) _mm512_##op##_pd
/* (maskz: g++ 12 warns that the unmasked form's undefined source "may be
 * used uninitialized") */
#define DL__ADAM_SQRTS(x) _mm512_maskz_sqrt_ps((__mmask16)0xffff, x)
#define DL__ADAM_SQRTD(x) _mm512_maskz_sqrt_pd((__mmask8)0xff, x)
#define DL__ADAM_TAKES(a, v) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, v, _CMP_GT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), v, a)
#define DL__ADAM_TAKED(a, v) _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, v, _CMP_GT_OQ) | _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), v, a)
#define DL__ADAM_ODDS(q, s)                                                                \
  {                                                                                        \
    const __mmask16 o_ = _mm512_cmp_ps_mask(s, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);    \
    if (o_) q = _mm512_mask_div_ps(q, o_, s, vbc);                                         \
  }
#define DL__ADAM_ODDD(q, s)                                                                \
  {                                                                                        \
    const __mmask8 o_ = _mm512_cmp_pd_mask(s, _mm512_set1_pd(DBL_MAX), _CMP_NLE_UQ);     \
    if (o_) q = _mm512_mask_div_pd(q, o_, s, vbc);                                         \
  }
#define DL__ADAM_VF                                                                        \
  DL__ADAM_VEC(__m512, 16, DL__ADAM_XS, DL__ADAM_SQRTS, DL__ADAM_TAKES,                    \
               DL__ADAM_DIVBC(__m512, DL__ADAM_XS, _mm512_fmadd_ps, _mm512_fnmadd_ps, DL__ADAM_ODDS))
#define DL__ADAM_VD                                                                        \
  DL__ADAM_VEC(__m512d, 8, DL__ADAM_XD, DL__ADAM_SQRTD, DL__ADAM_TAKED,                    \
               DL__ADAM_DIVBC(__m512d, DL__ADAM_XD, _mm512_fmadd_pd, _mm512_fnmadd_pd, DL__ADAM_ODDD))
#elif defined(__AVX__)
#define DL__ADAM_XS(op) _mm256_##op##_ps
#define DL__ADAM_XD(op) _mm256_##op##_pd
#define DL__ADAM_SQRTS _mm256_sqrt_ps
#define DL__ADAM_SQRTD _mm256_sqrt_pd
#define DL__ADAM_TAKES(a, v) _mm256_blendv_ps(v, a, _mm256_or_ps(_mm256_cmp_ps(a, v, _CMP_GT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q)))
#define DL__ADAM_TAKED(a, v) _mm256_blendv_pd(v, a, _mm256_or_pd(_mm256_cmp_pd(a, v, _CMP_GT_OQ), _mm256_cmp_pd(a, a, _CMP_UNORD_Q)))
#if defined(__FMA__)
#define DL__ADAM_ODDS(q, s)                                                                \
  {                                                                                        \
    const __m256 o_ = _mm256_cmp_ps(s, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ);             \
    if (_mm256_movemask_ps(o_)) q = _mm256_blendv_ps(q, _mm256_div_ps(s, vbc), o_);       \
  }
#define DL__ADAM_ODDD(q, s)                                                                \
  {                                                                                        \
    const __m256d o_ = _mm256_cmp_pd(s, _mm256_set1_pd(DBL_MAX), _CMP_NLE_UQ);            \
    if (_mm256_movemask_pd(o_)) q = _mm256_blendv_pd(q, _mm256_div_pd(s, vbc), o_);       \
  }
#define DL__ADAM_DIVBCS DL__ADAM_DIVBC(__m256, DL__ADAM_XS, _mm256_fmadd_ps, _mm256_fnmadd_ps, DL__ADAM_ODDS)
#define DL__ADAM_DIVBCD DL__ADAM_DIVBC(__m256d, DL__ADAM_XD, _mm256_fmadd_pd, _mm256_fnmadd_pd, DL__ADAM_ODDD)
#else
#define DL__ADAM_DIVBCS DL__ADAM_DIVBC_PLAIN(__m256, DL__ADAM_XS)
#define DL__ADAM_DIVBCD DL__ADAM_DIVBC_PLAIN(__m256d, DL__ADAM_XD)
#endif
#define DL__ADAM_VF DL__ADAM_VEC(__m256, 8, DL__ADAM_XS, DL__ADAM_SQRTS, DL__ADAM_TAKES, DL__ADAM_DIVBCS)
#define DL__ADAM_VD DL__ADAM_VEC(__m256d, 4, DL__ADAM_XD, DL__ADAM_SQRTD, DL__ADAM_TAKED, DL__ADAM_DIVBCD)
#elif defined(__SSE2__)
#define DL__ADAM_XS(op) _mm_##op##_ps
#define DL__ADAM_XD(op) _mm_##op##_pd
#define DL__ADAM_SQRTS _mm_sqrt_ps
#define DL__ADAM_SQRTD _mm_sqrt_pd
#define DL__ADAM_TAKES(a, v) _mm_or_ps(_mm_and_ps(DL__ADAM_TK(ps, a, v), a), _mm_andnot_ps(DL__ADAM_TK(ps, a, v), v))
#define DL__ADAM_TAKED(a, v) _mm_or_pd(_mm_and_pd(DL__ADAM_TK(pd, a, v), a), _mm_andnot_pd(DL__ADAM_TK(pd, a, v), v))
#define DL__ADAM_TK(s, a, v) _mm_or_##s(_mm_cmpgt_##s(a, v), _mm_cmpunord_##s(a, a))
#define DL__ADAM_VF DL__ADAM_VEC(__m128, 4, DL__ADAM_XS, DL__ADAM_SQRTS, DL__ADAM_TAKES, DL__ADAM_DIVBC_PLAIN(__m128, DL__ADAM_XS))
#define DL__ADAM_VD DL__ADAM_VEC(__m128d, 2, DL__ADAM_XD, DL__ADAM_SQRTD, DL__ADAM_TAKED, DL__ADAM_DIVBC_PLAIN(__m128d, DL__ADAM_XD))
#else
#define DL__ADAM_VF
#define DL__ADAM_VD
#endif
DL_API DL__ADAM_NOFMA void dl__adam_f32(float *P, const float *G, float *M, float *V, float *VM, int64_t n,
                                        const dl__adam_k *k) {
  DL__ADAM_NOFMA_BODY
  const float sg = (float)k->sg, wd = (float)k->wd, b1 = (float)k->b1, b1c = (float)k->b1c, b2 = (float)k->b2;
  const float b2c = (float)k->b2c, dec = (float)k->decay, ss = (float)k->step_size, bc = (float)k->bc2_sqrt;
  const float eps = (float)k->eps, rbc = 1.0f / bc;
  /* DL__ADAM_DIVBC's range: bc <= 1 keeps every quotient >= its normal
   * dividend (no underflow), bc >= 1e-18 below the overflow of sqrt(FLT_MAX) / bc */
  const int mk = bc >= 1e-18f && bc <= 1.0f;
  int64_t i = 0;
  (void)rbc;
  (void)mk;
  DL__ADAM_VF
  DL__ADAM_SCALAR(float, sqrtf)
}
DL_API DL__ADAM_NOFMA void dl__adam_f64(double *P, const double *G, double *M, double *V, double *VM, int64_t n,
                                        const dl__adam_k *k) {
  DL__ADAM_NOFMA_BODY
  const double sg = k->sg, wd = k->wd, b1 = k->b1, b1c = k->b1c, b2 = k->b2, b2c = k->b2c, dec = k->decay;
  const double ss = k->step_size, bc = k->bc2_sqrt, eps = k->eps, rbc = 1.0 / bc;
  const int mk = bc >= 1e-150 && bc <= 1.0; /* (as in dl__adam_f32) */
  int64_t i = 0;
  (void)rbc;
  (void)mk;
  DL__ADAM_VD
  DL__ADAM_SCALAR(double, sqrt)
}
#undef DL__ADAM_SCALAR
#undef DL__ADAM_VEC
#undef DL__ADAM_XS
#undef DL__ADAM_XD
#undef DL__ADAM_TAKES
#undef DL__ADAM_TAKED
#undef DL__ADAM_SQRTS
#undef DL__ADAM_SQRTD
#undef DL__ADAM_NOFMA
#undef DL__ADAM_NOFMA_BODY
#undef DL__ADAM_TK
#undef DL__ADAM_VF
#undef DL__ADAM_VD
#undef DL__ADAM_DIVBC
#undef DL__ADAM_DIVBC_PLAIN
#undef DL__ADAM_DIVBCS
#undef DL__ADAM_DIVBCD
#undef DL__ADAM_ODDS
#undef DL__ADAM_ODDD

/* torch.optim.Adam / AdamW. vmax may be NULL unless c->amsgrad.
 *   d = (maximize ? -g : g) (+ wd*p for Adam; AdamW multiplies p by 1 - lr*wd)
 *   m = beta1*m + (1-beta1)*d;  v = beta2*v + (1-beta2)*d*d;  vmax = max(vmax, v)
 *   p -= lr/(1-beta1^step) * m / (sqrt(v or vmax)/sqrt(1-beta2^step) + eps) */
DL_API void dl__adam_k_f32(void *const *a, int64_t n, const double *kd) {
  dl__adam_f32((float *)a[0], (const float *)a[1], (float *)a[2], (float *)a[3], (float *)a[4], n,
               (const dl__adam_k *)(const void *)kd);
}
DL_API void dl__adam_k_f64(void *const *a, int64_t n, const double *kd) {
  dl__adam_f64((double *)a[0], (const double *)a[1], (double *)a[2], (double *)a[3], (double *)a[4], n,
               (const dl__adam_k *)(const void *)kd);
}
/* One Adam / AdamW step on tensor p with gradient g and state m, v (and
 * vmax with AMSGrad), as described above. */
DL_API void dl_adam_update(dl_tensor *p, const dl_tensor *g, dl_tensor *m, dl_tensor *v,
                           dl_tensor *vmax, int64_t step, const dl_adam_cfg *c) {
  const char *fn = "dl_adam_update";
  double b1, b2;
  dl__adam_k k;
  dl_tensor *t[5];
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, m, "m (first moment)");
  dl__optim_same(fn, p, v, "v (second moment)");
  if (c->amsgrad) dl__optim_same(fn, p, vmax, "vmax (amsgrad)");
#ifdef DL_USE_CUDA
  if (p->device == DL_CUDA) { dl__adam_gpu(p, g, m, v, vmax, step, c, NULL); return; }
#endif
  b1 = c->beta1; b2 = c->beta2;
  k.sg = c->maximize ? -1.0 : 1.0;
  k.wd = c->decoupled ? 0.0 : c->weight_decay;
  k.b1 = b1; k.b1c = 1 - b1; k.b2 = b2; k.b2c = 1 - b2;
  k.decay = c->decoupled ? 1 - c->lr * c->weight_decay : 1.0;
  k.step_size = c->lr / (1 - pow(b1, (double)step));
  k.bc2_sqrt = sqrt(1 - pow(b2, (double)step));
  k.eps = c->eps;
  t[0] = p; t[1] = (dl_tensor *)g; t[2] = m; t[3] = v; t[4] = c->amsgrad ? vmax : NULL;
  dl__optim_run(t, 5, DL__OPTIM_PICK(dl__adam_k, p), (const double *)(const void *)&k);
}

/* torch.optim.RMSprop. grad_avg may be NULL unless c->centered, momentum_buf
 * unless c->momentum > 0. step is checked but does not enter the formulas.
 *   d = (maximize ? -g : g) + wd*p;  sq = alpha*sq + (1-alpha)*d*d
 *   centered: ga = alpha*ga + (1-alpha)*d;  avg = sqrt(sq - ga*ga) + eps
 *   else avg = sqrt(sq) + eps
 *   momentum: buf = momentum*buf + d/avg; p -= lr*buf;  else p -= lr*d/avg
 * kd: sg, wd, alpha, 1 - alpha, eps, momentum, lr; A2 sq, A3 ga, A4 buf */
DL__OPTIM_KERNEL(dl__rmsprop_k, {
  const S sg = (S)kd[0], wd = (S)kd[1], al = (S)kd[2], al1 = (S)kd[3], eps = (S)kd[4], mom = (S)kd[5];
  const S lr = (S)kd[6];
  for (i = 0; i < n; i++) {
    const S d = sg * G[i] + wd * P[i];
    S avg;
    A2[i] = A2[i] * al + al1 * (d * d);
    if (A3) {
      A3[i] = A3[i] * al + al1 * d;
      avg = DL__OSQRT(A2[i] - A3[i] * A3[i]) + eps;
    } else {
      avg = DL__OSQRT(A2[i]) + eps;
    }
    if (A4) {
      A4[i] = A4[i] * mom + d / avg;
      P[i] = P[i] - lr * A4[i];
    } else {
      P[i] = P[i] - (lr * d) / avg;
    }
  }
})
DL_API void dl_rmsprop_update(dl_tensor *p, const dl_tensor *g, dl_tensor *square_avg,
                              dl_tensor *grad_avg, dl_tensor *momentum_buf, int64_t step,
                              const dl_rmsprop_cfg *c) {
  const char *fn = "dl_rmsprop_update";
  double k[7];
  dl_tensor *t[5];
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, square_avg, "square_avg");
  if (c->centered) dl__optim_same(fn, p, grad_avg, "grad_avg (centered)");
  if (c->momentum > 0) dl__optim_same(fn, p, momentum_buf, "momentum buffer");
#ifdef DL_USE_CUDA
  if (p->device == DL_CUDA) { dl__rmsprop_gpu(p, g, square_avg, grad_avg, momentum_buf, c, NULL); return; }
#endif
  k[0] = c->maximize ? -1.0 : 1.0; k[1] = c->weight_decay; k[2] = c->alpha; k[3] = 1 - c->alpha;
  k[4] = c->eps; k[5] = c->momentum; k[6] = c->lr;
  t[0] = p; t[1] = (dl_tensor *)g; t[2] = square_avg; t[3] = c->centered ? grad_avg : NULL;
  t[4] = c->momentum > 0 ? momentum_buf : NULL;
  dl__optim_run(t, 5, DL__OPTIM_PICK(dl__rmsprop_k, p), k);
}

/* torch.optim.Adagrad. sum starts at initial_accumulator_value
 * (dl_adagrad_init_state).
 *   d = (maximize ? -g : g) + wd*p;  sum += d*d
 *   p -= lr/(1 + (step-1)*lr_decay) * d / (sqrt(sum) + eps)
 * kd: sg, wd, the decayed lr, eps; A2 sum */
DL__OPTIM_KERNEL(dl__adagrad_k, {
  const S sg = (S)kd[0], wd = (S)kd[1], clr = (S)kd[2], eps = (S)kd[3];
  for (i = 0; i < n; i++) {
    const S d = sg * G[i] + wd * P[i];
    A2[i] = A2[i] + d * d;
    P[i] = P[i] - (clr * d) / (DL__OSQRT(A2[i]) + eps);
  }
})
DL_API void dl_adagrad_update(dl_tensor *p, const dl_tensor *g, dl_tensor *sum, int64_t step,
                              const dl_adagrad_cfg *c) {
  const char *fn = "dl_adagrad_update";
  double k[4];
  dl_tensor *t[3];
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, sum, "sum");
#ifdef DL_USE_CUDA
  if (p->device == DL_CUDA) { dl__adagrad_gpu(p, g, sum, step, c, NULL); return; }
#endif
  k[0] = c->maximize ? -1.0 : 1.0; k[1] = c->weight_decay;
  k[2] = c->lr / (1 + (double)(step - 1) * c->lr_decay); k[3] = c->eps;
  t[0] = p; t[1] = (dl_tensor *)g; t[2] = sum;
  dl__optim_run(t, 3, DL__OPTIM_PICK(dl__adagrad_k, p), k);
}

/* Lion (see dl_lion_cfg); sign(0) = 0. step is checked only.
 *   c = beta1*m + (1-beta1)*g;  p = p*(1 - lr*wd) - lr*sign(c);  m = beta2*m + (1-beta2)*g
 * kd: beta1, 1 - beta1, beta2, 1 - beta2, lr, 1 - lr*wd; A2 m */
DL__OPTIM_KERNEL(dl__lion_k, {
  const S b1 = (S)kd[0], b1c = (S)kd[1], b2 = (S)kd[2], b2c = (S)kd[3], lr = (S)kd[4], decay = (S)kd[5];
  DL__IVDEP
  for (i = 0; i < n; i++) {
    const S cm = A2[i] * b1 + b1c * G[i];
    P[i] = P[i] * decay - lr * ((cm > (S)0 ? (S)1 : (S)0) - (cm < (S)0 ? (S)1 : (S)0));
    A2[i] = A2[i] * b2 + b2c * G[i];
  }
})
DL_API void dl_lion_update(dl_tensor *p, const dl_tensor *g, dl_tensor *m, int64_t step,
                           const dl_lion_cfg *c) {
  const char *fn = "dl_lion_update";
  double k[6];
  dl_tensor *t[3];
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, m, "m");
#ifdef DL_USE_CUDA
  if (p->device == DL_CUDA) { dl__lion_gpu(p, g, m, c, NULL); return; }
#endif
  k[0] = c->beta1; k[1] = 1 - c->beta1; k[2] = c->beta2; k[3] = 1 - c->beta2; k[4] = c->lr;
  k[5] = 1 - c->lr * c->weight_decay;
  t[0] = p; t[1] = (dl_tensor *)g; t[2] = m;
  dl__optim_run(t, 3, DL__OPTIM_PICK(dl__lion_k, p), k);
}

/* LAMB (see dl_lamb_cfg) over contiguous p, g, m, v, n elements, for S:
 * kd: beta1, 1 - beta1, beta2, 1 - beta2, bc1, sqrt(bc2), eps, wd, lr,
 * max_trust. Three passes: m and v; the sums of p^2 and u^2 in double
 * (element i into partial sum i mod 4, then (s0 + s1) + (s2 + s3): one
 * order, the same every run; the GPU sums in another, so its last bits may
 * differ); p -= (S)(lr*trust) * u, u recomputed as in the second pass. On
 * one thread (its sums are added in one order), in the ctx's
 * floating-point mode. */
#define DL__LAMB_KERNEL(S, sfx, SQRT)                                                                 \
  DL_API void dl__lamb_##sfx(S *P, const S *G, S *M, S *V, int64_t n, const double *kd) {            \
    const S b1 = (S)kd[0], b1c = (S)kd[1], b2 = (S)kd[2], b2c = (S)kd[3], bc1 = (S)kd[4];             \
    const S bc2s = (S)kd[5], eps = (S)kd[6], wd = (S)kd[7];                                           \
    double sp[4] = {0, 0, 0, 0}, su[4] = {0, 0, 0, 0}, pn, un, trust;                                 \
    S st;                                                                                             \
    int64_t i;                                                                                        \
    for (i = 0; i < n; i++) {                                                                         \
      M[i] = M[i] * b1 + b1c * G[i];                                                                  \
      V[i] = V[i] * b2 + b2c * (G[i] * G[i]);                                                         \
    }                                                                                                 \
    for (i = 0; i < n; i++) {                                                                         \
      const S u = (M[i] / bc1) / (SQRT(V[i]) / bc2s + eps) + wd * P[i];                               \
      sp[i & 3] += (double)P[i] * (double)P[i];                                                       \
      su[i & 3] += (double)u * (double)u;                                                             \
    }                                                                                                 \
    pn = sqrt((sp[0] + sp[1]) + (sp[2] + sp[3]));                                                    \
    un = sqrt((su[0] + su[1]) + (su[2] + su[3]));                                                     \
    trust = pn > 0 && un > 0 ? pn / un : 1.0;                                                         \
    if (kd[9] > 0 && trust > kd[9]) trust = kd[9];                                                    \
    st = (S)(kd[8] * trust);                                                                          \
    for (i = 0; i < n; i++) {                                                                         \
      const S u = (M[i] / bc1) / (SQRT(V[i]) / bc2s + eps) + wd * P[i];                               \
      P[i] = P[i] - st * u;                                                                           \
    }                                                                                                 \
  }
DL__LAMB_KERNEL(float, f32, sqrtf)
DL__LAMB_KERNEL(double, f64, sqrt)
#undef DL__LAMB_KERNEL
/* The scalars of a LAMB step (kd of dl__lamb_<sfx>). */
DL_API void dl__lamb_scalars(const dl_lamb_cfg *c, int64_t step, double *k) {
  k[0] = c->beta1; k[1] = 1 - c->beta1; k[2] = c->beta2; k[3] = 1 - c->beta2;
  k[4] = c->bias_correction ? 1 - pow(c->beta1, (double)step) : 1.0;
  k[5] = c->bias_correction ? sqrt(1 - pow(c->beta2, (double)step)) : 1.0;
  k[6] = c->eps; k[7] = c->weight_decay; k[8] = c->lr; k[9] = c->max_trust;
}
/* LAMB (see dl_lamb_cfg): m, v start at 0. Strided views on the host are
 * updated through contiguous copies (the same bits as contiguous tensors);
 * on the GPU they must be contiguous. A row-sparse gradient is not taken
 * (dl_optim_step panics naming the parameter). */
DL_API void dl_lamb_update(dl_tensor *p, const dl_tensor *g, dl_tensor *m, dl_tensor *v, int64_t step,
                           const dl_lamb_cfg *c) {
  const char *fn = "dl_lamb_update";
  double k[10];
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, m, "m (first moment)");
  dl__optim_same(fn, p, v, "v (second moment)");
  dl__lamb_scalars(c, step, k);
  if (p->device == DL_CPU && (!dl_tensor_is_contiguous(p) || !dl_tensor_is_contiguous(g) ||
                              !dl_tensor_is_contiguous(m) || !dl_tensor_is_contiguous(v))) {
    const dl_tensor *t[4];
    dl_tensor *cp[4];
    int j;
    t[0] = p; t[1] = g; t[2] = m; t[3] = v;
    for (j = 0; j < 4; j++) {
      cp[j] = dl_tensor_make(p->ctx, p->dtype, p->ndim, p->shape);
      if (!cp[j]) {
        while (j > 0) dl_tensor_free(cp[--j]);
        DL_NOMEM(p->ctx, fn, "no memory for contiguous copies of parameter %s", DL_SHAPESTR(p));
        return;
      }
      dl_tensor_copy(cp[j], t[j]);
    }
    dl_lamb_update(cp[0], cp[1], cp[2], cp[3], step, c);
    dl_tensor_copy(p, cp[0]);
    dl_tensor_copy(m, cp[2]);
    dl_tensor_copy(v, cp[3]);
    for (j = 0; j < 4; j++) dl_tensor_free(cp[j]);
    return;
  }
#ifdef DL_USE_CUDA
  if (p->device == DL_CUDA) {
    (void)dl__optim_gpu_width(fn, p, g, NULL);
    dl__optim_gpu_need(fn, p, m, "m (first moment)", 1);
    dl__optim_gpu_need(fn, p, v, "v (second moment)", 1);
    dl__gpu_ok(p, fn, dlg_lamb_update(dl__gpu_h(p, fn), (int)p->dtype, p->numel, p->data, g->data, m->data, v->data,
                                      k));
    return;
  }
#endif
  {
    const dl_fpmode fm = dl_ctx_fp_enter(p->ctx);
    if (p->dtype == DL_F32)
      dl__lamb_f32((float *)p->data, (const float *)g->data, (float *)m->data, (float *)v->data, p->numel, k);
    else
      dl__lamb_f64((double *)p->data, (const double *)g->data, (double *)m->data, (double *)v->data, p->numel, k);
    dl_ftz_leave(fm);
  }
}

#undef DL__OPTIM_KERNEL
#undef DL__OPTIM_ARRAYS
#undef DL__OPTIM_PICK
#undef DL__OSQRT

/* >>optimizer objects ------------------------------------------------------ */

/* An optimizer over every trainable parameter of a model, with the state
 * PyTorch keeps (names as in torch's optimizer.state_dict()):
 *   SGD      momentum_buffer (when momentum != 0)
 *   Adam(W)  exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad)
 *   RMSprop  square_avg, momentum_buffer (momentum > 0), grad_avg (centered)
 *   Adagrad  sum
 *   Lion     exp_avg
 *   LAMB     exp_avg, exp_avg_sq (dense gradients only)
 * and a step count per parameter. Each state is one contiguous buffer laid
 * out like the model's packed parameters.
 *
 * Per parameter, the update uses lr = dl_optim_lr(o) * lr_mult and
 * weight_decay = cfg.weight_decay * wd_mult (a torch param group per
 * parameter). A parameter that is frozen or has lr_mult 0 is skipped
 * entirely: its values, state and step count do not change.
 *
 * Row-sparse gradients (Embedding(sparse=1)): only the touched rows are
 * updated, with the same formulas applied row by row, their state rows
 * included; untouched rows and their state stay bit-identical ("lazy"
 * updates). Adam then follows torch.optim.SparseAdam exactly (its eps sits
 * outside the bias correction: p -= lr sqrt(1-b2^t)/(1-b1^t) m/(sqrt(v)+eps));
 * the others apply their dense rule to the rows with a gradient. The step
 * count (bias correction; SGD's "first step" that copies the gradient into
 * the momentum buffer) is the parameter's, counted on steps where it had a
 * gradient, so a row first seen at a later step starts its SGD momentum
 * buffer at (1 - dampening) * d. Momentum and weight decay act only on the
 * steps where a row is seen. A sparse parameter that also gets a dense
 * gradient in a step (an embedding tied to an output projection) is updated
 * densely in that step, its sparse rows added to the dense gradient. */
typedef enum dl_optim_kind {
  DL_OPT_SGD,
  DL_OPT_ADAM,
  DL_OPT_RMSPROP,
  DL_OPT_ADAGRAD,
  DL_OPT_LION,
  DL_OPT_LAMB
} dl_optim_kind;

/* Most state tensors per parameter an optimizer keeps (Adam with AMSGrad:
 * 3). */
#define DL_OPTIM_MAX_STATE 3
struct dl_optim;
/* One parameter's update: p, its gradient g (row views for a lazy sparse
 * step), its state tensors st[0..nstate), its step count. */
typedef void (*dl__optim_update_fn)(struct dl_optim *o, const dl_param *pr, dl_tensor *p, const dl_tensor *g,
                                    dl_tensor *st, int64_t step, int sparse);
/* An optimizer over a model's parameters (dl_optim_sgd, dl_optim_adam ...):
 * its kind and configuration, each parameter's state tensors (by name:
 * dl_optim_state) and step count, the learning rate. dl_optim_free. */
typedef struct dl_optim {
  dl_model *model; /* the model it updates (borrowed) */
  dl_optim_kind kind; /* SGD, Adam ... */
  dl__optim_update_fn update;                /* the kind's kernel: a pointer, so that a program
                                                compiles only the optimizers it makes */
  union {
    dl_sgd_cfg sgd;
    dl_adam_cfg adam;
    dl_rmsprop_cfg rmsprop;
    dl_adagrad_cfg adagrad;
    dl_lion_cfg lion;
    dl_lamb_cfg lamb;
  } cfg;                                     /* as given; cfg's lr is the base lr */
  double lr;                                 /* current lr (dl_optim_set_lr; starts at cfg's) */
  int nstate;                                /* state tensors per parameter */
  const char *state_name[DL_OPTIM_MAX_STATE]; /* the state tensors' names ("exp_avg" ...) */
  void *sbuf;                                /* nstate * model->pnumel elements */
  dl_tensor *state;                          /* [model->nparams][DL_OPTIM_MAX_STATE] views (buffers: unused) */
  int64_t *steps;                            /* per parameter */
  int64_t nsteps;                            /* dl_optim_step calls */
  dl_device device;                          /* where sbuf lives: the model's device when made */
  dlg_adam_tensor *multi;                    /* Adam on the GPU: the step's dense tensors, one launch */
} dl_optim;

DL_API dl_optim *dl__optim_make(dl_model *m, dl_optim_kind kind, dl__optim_update_fn update) {
  dl_ctx *ctx = m->ctx;
  dl_optim *o;
  size_t nst;
  if (dl_model_pack(m) != DL_OK) return NULL;
  o = (dl_optim *)dl_alloc(ctx, sizeof *o);
  if (!o) return NULL;
  memset(o, 0, sizeof *o);
  o->model = m;
  o->kind = kind;
  o->update = update;
  nst = (size_t)m->nparams * DL_OPTIM_MAX_STATE;
  o->state = (dl_tensor *)dl_alloc(ctx, sizeof(dl_tensor) * (nst ? nst : 1));
  o->steps = (int64_t *)dl_alloc(ctx, sizeof(int64_t) * (size_t)(m->nparams ? m->nparams : 1));
  if (!o->state || !o->steps) {
    dl_free(ctx, o->state);
    dl_free(ctx, o->steps);
    dl_free(ctx, o);
    return NULL;
  }
  memset(o->state, 0, sizeof(dl_tensor) * (nst ? nst : 1));
  memset(o->steps, 0, sizeof(int64_t) * (size_t)(m->nparams ? m->nparams : 1));
  return o;
}
/* Allocate the named state buffers (zeroed) once cfg is in place. */
DL_API dl_optim *dl__optim_state(dl_optim *o, int n, const char *const *names) {
  dl_model *m = o->model;
  size_t es = dl_dtype_size(m->dtype), total = (size_t)n * (size_t)m->pnumel;
  int i, k;
  o->nstate = n;
  for (k = 0; k < n; k++) o->state_name[k] = names[k];
#ifdef DL_USE_CUDA
  if (m->nparams && m->params[0]->t.device == DL_CUDA) { /* the model is on the GPU: so is the state */
    struct dl_gpu *g = m->ctx->gpu;
    o->device = DL_CUDA;
    o->sbuf = NULL;
    if (!g || dl_gpu_alloc(g, &o->sbuf, (total ? total : 1) * es) != DL_OK ||
        dlg_memset0(dl__gpu_handle(g), o->sbuf, (total ? total : 1) * es) != DLG_OK) {
      if (g && o->sbuf) {
        dl_fail(m->ctx, DL_ERR_NO_DEVICE, "optimizer state: %s", dlg_message(dl__gpu_handle(g)));
        dl_gpu_free(g, o->sbuf);
      } else if (!g) {
        dl_fail(m->ctx, DL_ERR_NO_DEVICE, "optimizer state: the model's ctx has no device open");
      }
      dl_free(m->ctx, o->state);
      dl_free(m->ctx, o->steps);
      dl_free(m->ctx, o);
      return NULL;
    }
  } else
#endif
  {
    o->sbuf = dl_alloc(m->ctx, (total ? total : 1) * es);
    if (!o->sbuf) {
      dl_free(m->ctx, o->state);
      dl_free(m->ctx, o->steps);
      dl_free(m->ctx, o);
      return NULL;
    }
    memset(o->sbuf, 0, (total ? total : 1) * es);
  }
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    if (p->kind == DL_PARAM_BUFFER) continue;
    for (k = 0; k < n; k++) {
      dl_tensor_wrap(&o->state[i * DL_OPTIM_MAX_STATE + k], m->ctx, m->dtype, p->t.ndim, p->t.shape,
                     p->t.numel ? (unsigned char *)o->sbuf + ((size_t)k * (size_t)m->pnumel + (size_t)p->offset) * es
                                : NULL);
      o->state[i * DL_OPTIM_MAX_STATE + k].device = o->device;
    }
  }
  return o;
}

/* Optimizers over model m (packed by this call; no layer can be added
 * after). cfg: from dl_X_defaults(lr), fields changed as wanted. NULL when
 * out of memory (message in the model's ctx). Free with dl_optim_free. */
#ifdef DL_USE_CUDA
/* The touched rows (host) of a device parameter's row-sparse gradient: a
 * GPU step updates them all in one kernel, g being the values [nnz, width]. */
DL_API const int64_t *dl__sgrad_rows(const dl_param *pr) { return ((const dl_sgrad *)pr->t.sgrad)->rows; }
#endif
/* >>per-kind updates: the cfg with the parameter's multipliers applied */
DL_API void dl__optim_update_sgd(dl_optim *o, const dl_param *pr, dl_tensor *p, const dl_tensor *g, dl_tensor *st,
                                 int64_t step, int sparse) {
  dl_sgd_cfg c = o->cfg.sgd;
  (void)sparse;
  c.lr = o->lr * pr->lr_mult;
  c.weight_decay *= pr->wd_mult;
#ifdef DL_USE_CUDA
  if (sparse && p->device == DL_CUDA) { dl__sgd_gpu(p, g, o->nstate ? &st[0] : NULL, step, &c, dl__sgrad_rows(pr)); return; }
#endif
  dl_sgd_update(p, g, o->nstate ? &st[0] : NULL, step, &c);
}
DL_API void dl__optim_update_adam(dl_optim *o, const dl_param *pr, dl_tensor *p, const dl_tensor *g, dl_tensor *st,
                                  int64_t step, int sparse) {
  dl_adam_cfg c = o->cfg.adam;
  c.lr = o->lr * pr->lr_mult;
  c.weight_decay *= pr->wd_mult;
  /* SparseAdam: p -= lr sqrt(bc2)/bc1 * m / (sqrt(v) + eps), i.e. Adam's
   * formula with eps / sqrt(bc2) */
  if (sparse) c.eps /= sqrt(1 - pow(c.beta2, (double)step));
#ifdef DL_USE_CUDA
  if (sparse && p->device == DL_CUDA) {
    dl__adam_gpu(p, g, &st[0], &st[1], c.amsgrad ? &st[2] : NULL, step, &c, dl__sgrad_rows(pr));
    return;
  }
#endif
  dl_adam_update(p, g, &st[0], &st[1], c.amsgrad ? &st[2] : NULL, step, &c);
}
DL_API void dl__optim_update_rmsprop(dl_optim *o, const dl_param *pr, dl_tensor *p, const dl_tensor *g,
                                     dl_tensor *st, int64_t step, int sparse) {
  dl_rmsprop_cfg c = o->cfg.rmsprop;
  int k = 1;
  dl_tensor *mb = NULL, *ga = NULL;
  (void)sparse;
  c.lr = o->lr * pr->lr_mult;
  c.weight_decay *= pr->wd_mult;
  if (c.momentum > 0) mb = &st[k++];
  if (c.centered) ga = &st[k++];
#ifdef DL_USE_CUDA
  if (sparse && p->device == DL_CUDA) { dl__rmsprop_gpu(p, g, &st[0], ga, mb, &c, dl__sgrad_rows(pr)); return; }
#endif
  dl_rmsprop_update(p, g, &st[0], ga, mb, step, &c);
}
DL_API void dl__optim_update_adagrad(dl_optim *o, const dl_param *pr, dl_tensor *p, const dl_tensor *g,
                                     dl_tensor *st, int64_t step, int sparse) {
  dl_adagrad_cfg c = o->cfg.adagrad;
  (void)sparse;
  c.lr = o->lr * pr->lr_mult;
  c.weight_decay *= pr->wd_mult;
#ifdef DL_USE_CUDA
  if (sparse && p->device == DL_CUDA) { dl__adagrad_gpu(p, g, &st[0], step, &c, dl__sgrad_rows(pr)); return; }
#endif
  dl_adagrad_update(p, g, &st[0], step, &c);
}
DL_API void dl__optim_update_lion(dl_optim *o, const dl_param *pr, dl_tensor *p, const dl_tensor *g, dl_tensor *st,
                                  int64_t step, int sparse) {
  dl_lion_cfg c = o->cfg.lion;
  (void)sparse;
  c.lr = o->lr * pr->lr_mult;
  c.weight_decay *= pr->wd_mult;
#ifdef DL_USE_CUDA
  if (sparse && p->device == DL_CUDA) { dl__lion_gpu(p, g, &st[0], &c, dl__sgrad_rows(pr)); return; }
#endif
  dl_lion_update(p, g, &st[0], step, &c);
}

DL_API void dl__optim_update_lamb(dl_optim *o, const dl_param *pr, dl_tensor *p, const dl_tensor *g, dl_tensor *st,
                                  int64_t step, int sparse) {
  dl_lamb_cfg c = o->cfg.lamb;
  if (sparse)
    DL_PANIC(o->model->ctx, "dl_optim_step", "LAMB takes the norm of the whole parameter '%s': make its Embedding "
             "with sparse = 0", pr->name);
  c.lr = o->lr * pr->lr_mult;
  c.weight_decay *= pr->wd_mult;
  dl_lamb_update(p, g, &st[0], &st[1], step, &c);
}

/* An SGD optimizer over m's trainable parameters (state made lazily, on the
 * parameters' device). NULL on failure (message in the model's ctx). */
DL_API dl_optim *dl_optim_sgd(dl_model *m, const dl_sgd_cfg *c) {
  if (!m) return NULL; /* a dl_model_make that failed */
  static const char *const n[] = {"momentum_buffer"};
  dl_optim *o;
  if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
    DL_PANIC(m->ctx, "dl_optim_sgd", "Nesterov momentum requires momentum > 0 and zero dampening (as in PyTorch)");
  o = dl__optim_make(m, DL_OPT_SGD, dl__optim_update_sgd);
  if (!o) return NULL;
  o->cfg.sgd = *c;
  o->lr = c->lr;
  return dl__optim_state(o, c->momentum != 0 ? 1 : 0, n);
}
/* Adam, or AdamW with c->decoupled (dl_adamw_defaults). */
DL_API dl_optim *dl_optim_adam(dl_model *m, const dl_adam_cfg *c) {
  if (!m) return NULL; /* a dl_model_make that failed */
  static const char *const n[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  dl_optim *o = dl__optim_make(m, DL_OPT_ADAM, dl__optim_update_adam);
  if (!o) return NULL;
  o->cfg.adam = *c;
  o->lr = c->lr;
  return dl__optim_state(o, c->amsgrad ? 3 : 2, n);
}
/* An RMSprop optimizer over m's trainable parameters. NULL on failure. */
DL_API dl_optim *dl_optim_rmsprop(dl_model *m, const dl_rmsprop_cfg *c) {
  if (!m) return NULL; /* a dl_model_make that failed */
  const char *n[3];
  int k = 0;
  dl_optim *o = dl__optim_make(m, DL_OPT_RMSPROP, dl__optim_update_rmsprop);
  if (!o) return NULL;
  o->cfg.rmsprop = *c;
  o->lr = c->lr;
  n[k++] = "square_avg";
  if (c->momentum > 0) n[k++] = "momentum_buffer";
  if (c->centered) n[k++] = "grad_avg";
  return dl__optim_state(o, k, n);
}
/* An Adagrad optimizer over m's trainable parameters. NULL on failure. */
DL_API dl_optim *dl_optim_adagrad(dl_model *m, const dl_adagrad_cfg *c) {
  if (!m) return NULL; /* a dl_model_make that failed */
  static const char *const n[] = {"sum"};
  dl_optim *o = dl__optim_make(m, DL_OPT_ADAGRAD, dl__optim_update_adagrad);
  int i;
  if (!o) return NULL;
  o->cfg.adagrad = *c;
  o->lr = c->lr;
  if (!dl__optim_state(o, 1, n)) return NULL;
  for (i = 0; i < m->nparams; i++)
    if (m->params[i]->kind != DL_PARAM_BUFFER) dl_adagrad_init_state(&o->state[i * DL_OPTIM_MAX_STATE], c);
  return o;
}
/* A Lion optimizer over m's trainable parameters. NULL on failure. */
DL_API dl_optim *dl_optim_lion(dl_model *m, const dl_lion_cfg *c) {
  if (!m) return NULL; /* a dl_model_make that failed */
  static const char *const n[] = {"exp_avg"};
  dl_optim *o = dl__optim_make(m, DL_OPT_LION, dl__optim_update_lion);
  if (!o) return NULL;
  o->cfg.lion = *c;
  o->lr = c->lr;
  return dl__optim_state(o, 1, n);
}

/* LAMB (dl_lamb_cfg): the trust ratio per parameter tensor, as the paper's
 * per-layer one (a weight and its bias are two tensors). */
DL_API dl_optim *dl_optim_lamb(dl_model *m, const dl_lamb_cfg *c) {
  if (!m) return NULL; /* a dl_model_make that failed */
  static const char *const n[] = {"exp_avg", "exp_avg_sq"};
  dl_optim *o = dl__optim_make(m, DL_OPT_LAMB, dl__optim_update_lamb);
  if (!o) return NULL;
  o->cfg.lamb = *c;
  o->lr = c->lr;
  return dl__optim_state(o, 2, n);
}

/* Release the optimizer and its state (NULL is fine); the model stays. */
DL_API void dl_optim_free(dl_optim *o) {
  dl_ctx *ctx;
  if (!o) return;
  ctx = o->model->ctx;
#ifdef DL_USE_CUDA
  if (o->device == DL_CUDA) {
    if (ctx->gpu) dl_gpu_free(ctx->gpu, o->sbuf);
  } else
#endif
  dl_free(ctx, o->sbuf);
  dl_free(ctx, o->state);
  dl_free(ctx, o->steps);
  dl_free(ctx, o->multi);
  dl_free(ctx, o);
}

/* The learning rate the next dl_optim_step uses. */
DL_API double dl_optim_lr(const dl_optim *o) { return o->lr; }
/* The weight decay o was made with (its kind's cfg; AdamW's decoupled one too). */
DL_API double dl_optim_weight_decay(const dl_optim *o) {
  switch (o->kind) {
  case DL_OPT_SGD: return o->cfg.sgd.weight_decay;
  case DL_OPT_ADAM: return o->cfg.adam.weight_decay;
  case DL_OPT_RMSPROP: return o->cfg.rmsprop.weight_decay;
  case DL_OPT_ADAGRAD: return o->cfg.adagrad.weight_decay;
  case DL_OPT_LION: return o->cfg.lion.weight_decay;
  case DL_OPT_LAMB: return o->cfg.lamb.weight_decay;
  }
  return 0;
}
/* Set the base learning rate (what a schedule computes each step/epoch). */
DL_API void dl_optim_set_lr(dl_optim *o, double lr) { o->lr = lr; }

/* The state tensor `state` ("exp_avg" ...) of parameter `param`
 * ("0.weight"), or NULL when either name is unknown. Owned by o. */
DL_API dl_tensor *dl_optim_state(dl_optim *o, const char *param, const char *state) {
  int i, k;
  for (i = 0; i < o->model->nparams; i++) {
    if (strcmp(o->model->params[i]->name, param) != 0) continue;
    if (o->model->params[i]->kind == DL_PARAM_BUFFER) return NULL;
    for (k = 0; k < o->nstate; k++)
      if (strcmp(o->state_name[k], state) == 0) return &o->state[i * DL_OPTIM_MAX_STATE + k];
  }
  return NULL;
}
/* The step count of parameter `param` (writable, for checkpoints), or NULL. */
DL_API int64_t *dl_optim_param_steps(dl_optim *o, const char *param) {
  int i;
  for (i = 0; i < o->model->nparams; i++)
    if (strcmp(o->model->params[i]->name, param) == 0 && o->model->params[i]->kind != DL_PARAM_BUFFER)
      return &o->steps[i];
  return NULL;
}

/* One update of parameter i's tensor p with gradient g and state st[], at
 * step `step`, with the per-parameter lr and weight decay. */
/* One parameter's update by the optimizer's kernel (o->update, set by
 * its constructor). */
DL_API void dl__optim_update(dl_optim *o, const dl_param *pr, dl_tensor *p, const dl_tensor *g, dl_tensor *st,
                             int64_t step, int sparse) {
  o->update(o, pr, p, g, st, step, sparse);
}

/* Whether parameter p's gradient is row-sparse this step. A sparse
 * parameter that also received a dense gradient (a tied embedding used as an
 * output projection too) has its sparse rows added into the dense gradient
 * here, once, and is treated as dense until the gradients are zeroed. */
DL_API int dl__param_sparse_now(dl_param *p) {
  dl_sgrad *s = (dl_sgrad *)p->t.sgrad;
  if (!p->sparse) return 0;
  if (!(p->t.flags & DL_TENSOR_DENSE_GRAD)) return 1;
  if (s && s->nnz) {
    dl_sgrad_add_to(s, &p->g); /* on the device too (tape.h) */
    dl_sgrad_clear(s);
  }
  return 0;
}

/* Row r of a [rows, ...] tensor t as a 1-d view of `width` elements. */
DL_API dl_tensor dl__row(const dl_tensor *t, int64_t r, int64_t width) {
  dl_tensor v;
  dl_tensor_wrap(&v, t->ctx, t->dtype, 1, &width, (unsigned char *)t->data + (size_t)(r * width) * dl_dtype_size(t->dtype));
  return v;
}

/* A parameter's dense host gradient zeroed (dl__optim_step's zero_g). */
DL_API void dl__optim_zero_g(dl_param *pr) {
  pr->g.flags &= ~(unsigned)DL_TENSOR__ZERO_ON_READ;
  if (pr->g.data && pr->g.numel) memset(pr->g.data, 0, (size_t)pr->g.numel * dl_dtype_size(pr->g.dtype));
}
/* dl_optim_step; with zero_g (host models only: dl__apply_grads, which
 * zeroes the gradients next) it also leaves every trainable parameter's
 * dense gradient zero: the library's kernels zero each block of it as they
 * finish reading it (dl__optim_run), the rest is zeroed here. */
DL_API void dl__optim_step(dl_optim *o, int zero_g) {
  dl_model *m = o->model;
  int i, k, nmulti = 0;
  o->nsteps++;
#ifdef DL_USE_CUDA
  /* Adam on the GPU: every dense update in one launch (dlg_adam_multi), the same arithmetic per element */
  if (o->kind == DL_OPT_ADAM && o->device == DL_CUDA && !o->multi && m->nparams > 0) {
    o->multi = (dlg_adam_tensor *)dl_alloc(m->ctx, sizeof(dlg_adam_tensor) * (size_t)m->nparams);
    if (!o->multi) DL_NOMEM(m->ctx, "dl_optim_step", "%d tensors' update table", m->nparams);
  }
#endif
  for (i = 0; i < m->nparams; i++) {
    dl_param *pr = m->params[i];
    dl_tensor *st = &o->state[i * DL_OPTIM_MAX_STATE];
    if (pr->kind == DL_PARAM_BUFFER) continue;
    if (pr->frozen || pr->lr_mult == 0) {
      if (zero_g) dl__optim_zero_g(pr);
      continue;
    }
#ifdef DL_USE_CUDA
    if (pr->t.device != o->device)
      DL_PANIC(m->ctx, "dl_optim_step", "parameter %s %s is on the %s but the optimizer's state is on the %s: make "
               "the optimizer after moving the model (dl_model_to_device), or free it and make a new one",
               pr->name, DL_SHAPESTR(&pr->t), pr->t.device == DL_CUDA ? "GPU" : "host",
               o->device == DL_CUDA ? "GPU" : "host");
    if (pr->t.device == DL_CUDA) {
      if (dl__param_sparse_now(pr)) { /* all touched rows in one kernel: g is the values [nnz, width] */
        const dl_sgrad *s = (const dl_sgrad *)pr->t.sgrad;
        dl_tensor gv;
        int64_t vshape[2];
        if (!s || s->nnz == 0) continue;
        o->steps[i]++;
        vshape[0] = s->nnz;
        vshape[1] = s->width;
        dl_tensor_wrap(&gv, m->ctx, m->dtype, 2, vshape, s->values);
        gv.device = DL_CUDA;
        dl__optim_update(o, pr, &pr->t, &gv, st, o->steps[i], 1);
        continue;
      }
      o->steps[i]++;
      if (o->multi) {
        dl_adam_cfg c = o->cfg.adam; /* as dl__optim_update_adam (dense) */
        c.lr = o->lr * pr->lr_mult;
        c.weight_decay *= pr->wd_mult;
        dl__adam_gpu_entry(&pr->t, &pr->g, &st[0], &st[1], c.amsgrad ? &st[2] : NULL, o->steps[i], &c,
                           &o->multi[nmulti++]);
        continue;
      }
      dl__optim_update(o, pr, &pr->t, &pr->g, st, o->steps[i], 0);
      continue;
    }
#endif
    if (dl__param_sparse_now(pr)) {
      const dl_sgrad *s = (const dl_sgrad *)pr->t.sgrad;
      int64_t j, w;
      if (zero_g) dl__optim_zero_g(pr); /* the dense part (the rows are the sparse gradient's) */
      if (!s || s->nnz == 0) continue;
      w = s->width;
      o->steps[i]++;
      for (j = 0; j < s->nnz; j++) {
        int64_t r = s->rows[j];
        dl_tensor pv = dl__row(&pr->t, r, w), gv, sv[DL_OPTIM_MAX_STATE];
        dl_tensor_wrap(&gv, m->ctx, m->dtype, 1, &w, (unsigned char *)s->values + (size_t)(s->slot[r] * w) * dl_dtype_size(m->dtype));
        for (k = 0; k < o->nstate; k++) sv[k] = dl__row(&st[k], r, w);
        dl__optim_update(o, pr, &pv, &gv, sv, o->steps[i], 1);
      }
      continue;
    }
    o->steps[i]++;
    if (zero_g) pr->g.flags |= DL_TENSOR__ZERO_ON_READ;
    dl__optim_update(o, pr, &pr->t, &pr->g, st, o->steps[i], 0);
    if (zero_g && (pr->g.flags & DL_TENSOR__ZERO_ON_READ)) dl__optim_zero_g(pr); /* a kernel that did not */
  }
#ifdef DL_USE_CUDA
  if (nmulti > 0)
    dl__gpu_ok(&m->params[0]->t, "dl_optim_step",
               dlg_adam_multi(dl__gpu_h(&m->params[0]->t, "dl_optim_step"), (int)m->dtype, nmulti, o->multi));
#else
  (void)nmulti;
#endif
}
/* Stage 5: update every trainable parameter from its gradient (dense, or
 * the touched rows of a row-sparse one). Does not zero the gradients. */
DL_API void dl_optim_step(dl_optim *o) { dl__optim_step(o, 0); }

/* >>clipping and regularisation -------------------------------------------- */

/* Stages 3 and 4 of a training step. Zero fields are off.
 *   clip_value  every gradient element clamped to [-v, v] (a parameter's own
 *               clip_value, when set, replaces it) - clip_grad_value_
 *   (per parameter: each parameter's clip_norm caps its own gradient's L2
 *               norm, the same rule as below on one tensor)
 *   clip_norm   the global L2 norm over all gradients (torch's
 *               clip_grad_norm_): scale by min(1, clip_norm / (norm + 1e-6))
 *   l1, l2      gradient += wd_mult * (l1 * sign(p) + l2 * p): L1 and L2
 *               penalties 0.5*l2*|p|^2 + l1*|p|_1 added to the loss (biases
 *               and norms have wd_mult 0). Decoupled weight decay belongs to
 *               the optimizer (AdamW, Lion). */
typedef struct dl_step_desc {
  double clip_value, clip_norm; /* clamp to [-clip_value, clip_value]; cap the global L2 norm (0: off) */
  double l1, l2; /* L1 and L2 penalties added to the gradients, times wd_mult (0: off) */
} dl_step_desc;

/* Sum of squares of data[i0, i1), in double: 16 interleaved partial sums
 * (two vectors of AVX-512 doubles; with four scalar ones gcc kept a value on
 * the stack each step, 16% of the MLP step's main thread under
 * dl_train_step), added pairwise at the end. A fixed order. */
DL_API double dl__sumsq_piece(const void *data, int64_t i0, int64_t i1, dl_dtype dt) {
  double a[16] = {0}, t = 0;
  int64_t i = i0;
  int j, w;
  if (dt == DL_F32) {
    const float *x = (const float *)data;
    for (; i + 16 <= i1; i += 16)
      for (j = 0; j < 16; j++) a[j] += (double)x[i + j] * x[i + j];
    for (; i < i1; i++) t += (double)x[i] * x[i];
  } else {
    const double *x = (const double *)data;
    for (; i + 16 <= i1; i += 16)
      for (j = 0; j < 16; j++) a[j] += x[i + j] * x[i + j];
    for (; i < i1; i++) t += x[i] * x[i];
  }
  for (w = 8; w > 0; w /= 2)
    for (j = 0; j < w; j++) a[j] += a[j + w];
  return a[0] + t;
}
/* Sum of squares of a contiguous buffer: dl__sumsq_piece over pieces of
 * DL__SUMSQ_PIECE elements (longer where there would be more than
 * DL__SUMSQ_MAXP), run by the ctx's team, their sums added in order: the
 * same result every run and on any number of threads. (It ran on the
 * calling thread alone: under dl_train_step with a norm the MLP's 235k
 * gradients took 8% of the 2-thread step, the other thread waiting.) */
#define DL__SUMSQ_PIECE 32768
#define DL__SUMSQ_MAXP 256
DL_API double dl__sumsq(dl_ctx *ctx, const void *data, int64_t n, dl_dtype dt) {
  double part[DL__SUMSQ_MAXP], s = 0;
  int64_t len = DL__SUMSQ_PIECE, np, k;
  if (n <= len) return dl__sumsq_piece(data, 0, n, dt);
  if ((n + len - 1) / len > DL__SUMSQ_MAXP) len = ((n + DL__SUMSQ_MAXP - 1) / DL__SUMSQ_MAXP + 15) / 16 * 16;
  np = (n + len - 1) / len;
  DL_PARALLEL_RUNS(ctx, n, np, pc, { part[pc] = dl__sumsq_piece(data, pc * len, pc == np - 1 ? n : (pc + 1) * len, dt); });
  for (k = 0; k < np; k++) s += part[k];
  return s;
}
/* x *= f over a contiguous buffer, run by the ctx's team. */
DL_API void dl__scale(dl_ctx *ctx, void *data, int64_t n, dl_dtype dt, double f) {
  if (dt == DL_F32) {
    float *x = (float *)data, ff = (float)f;
    DL_PARALLEL_RANGE(ctx, n, n, i, { x[i] *= ff; });
  } else {
    double *x = (double *)data;
    DL_PARALLEL_RANGE(ctx, n, n, i, { x[i] *= f; });
  }
}
/* x clamped to [-v, v] (NaN stays) over a contiguous buffer, run by the
 * ctx's team. */
DL_API void dl__clamp_buf(dl_ctx *ctx, void *data, int64_t n, dl_dtype dt, double v) {
  if (dt == DL_F32) {
    float *x = (float *)data, lo = (float)-v, hi = (float)v;
    DL_PARALLEL_RANGE(ctx, n, n, i, { x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i]; });
  } else {
    double *x = (double *)data;
    DL_PARALLEL_RANGE(ctx, n, n, i, { x[i] = x[i] < -v ? -v : x[i] > v ? v : x[i]; });
  }
}
/* The gradient memory of parameter p: the touched rows' values of a sparse
 * one, else its dense gradient. */
DL_API void *dl__grad_mem(dl_param *p, int64_t *n) {
  if (dl__param_sparse_now(p)) {
    const dl_sgrad *s = (const dl_sgrad *)p->t.sgrad;
    *n = s ? s->nnz * s->width : 0;
    return s ? s->values : NULL;
  }
  *n = p->g.numel;
  return p->g.data;
}

/* The sums of squares of dl_clip_grads, on the host or on the model's GPU
 * (one path for both). On the host each parameter's sum is added to the
 * total as it is made. On the GPU it goes into a device double, and the sums
 * come back together at the end (one wait, no host allocation: in chunks
 * through a stack buffer) unless a parameter's own clip_norm needs its sum
 * at once; they are added in parameter order, in double, as on the host (one
 * parameter's sum is taken in another order there, so its last bits may
 * differ). */
typedef struct dl__gsum {
  dl_model *m;
  double total;  /* the host's running total */
#ifdef DL_USE_CUDA
  dlg_handle *h; /* NULL: the model is on the host */
  double *dsum;  /* [nparams] on the device */
#endif
} dl__gsum;
DL_API void dl__gsum_begin(dl__gsum *c, dl_model *m) {
  memset(c, 0, sizeof *c);
  c->m = m;
#ifdef DL_USE_CUDA
  if (m->nparams && m->params[0]->t.device == DL_CUDA) {
    void *dv = NULL;
    c->h = dl__gpu_h(&m->params[0]->t, "dl_clip_grads");
    if (dl_gpu_alloc(m->ctx->gpu, &dv, sizeof(double) * (size_t)m->nparams) != DL_OK) /* the cache: no cudaMalloc */
      DL_NOMEM(m->ctx, "dl_clip_grads", "the device cannot hold %d sums: %s", m->nparams, dl_ctx_message(m->ctx));
    c->dsum = (double *)dv;
  }
#endif
}
/* The sum of squares of parameter i's g[0..n): its value on the host; on
 * the GPU it stays in its device double (NaN returned) until dl__gsum_get. */
DL_API double dl__gsum_sumsq(dl__gsum *c, int i, const void *g, int64_t n) {
#ifdef DL_USE_CUDA
  if (c->h) {
    dl__gpu_ok(&c->m->params[i]->t, "dl_clip_grads", dlg_sumsq(c->h, (int)c->m->dtype, g, n, c->dsum + i));
    return (double)NAN;
  }
#else
  (void)i;
#endif
  return dl__sumsq(c->m->ctx, g, n, c->m->dtype);
}
/* Parameter i's sum s from dl__gsum_sumsq, now on the host. */
DL_API double dl__gsum_get(dl__gsum *c, int i, double s) {
#ifdef DL_USE_CUDA
  if (c->h) dl__gpu_ok(&c->m->params[i]->t, "dl_clip_grads", dlg_copy(c->h, &s, c->dsum + i, sizeof s, DLG_D2H));
#else
  (void)c;
  (void)i;
#endif
  return s;
}
/* Parameter i's final sum s: added to the total (on the GPU at the end). */
DL_API void dl__gsum_add(dl__gsum *c, double s) {
#ifdef DL_USE_CUDA
  if (c->h) return;
#endif
  c->total += s;
}
/* The total over the parameters dl__gsum_add was called for (skip[i]: not). */
DL_API double dl__gsum_total(dl__gsum *c, int (*skip)(const dl_param *)) {
#ifdef DL_USE_CUDA
  if (c->h) {
    double part[64];
    int i0, k;
    for (i0 = 0; i0 < c->m->nparams; i0 += 64) {
      int nk = c->m->nparams - i0 < 64 ? c->m->nparams - i0 : 64;
      dl__gpu_ok(&c->m->params[i0]->t, "dl_clip_grads",
                 dlg_copy(c->h, part, c->dsum + i0, sizeof(double) * (size_t)nk, DLG_D2H));
      for (k = 0; k < nk; k++)
        if (!skip(c->m->params[i0 + k])) c->total += part[k];
    }
    dl_gpu_free(c->m->ctx->gpu, c->dsum);
    c->dsum = NULL;
  }
#else
  (void)skip;
#endif
  return c->total;
}
/* g[0..n) clamped to [-v, v] (clamp) or scaled by f, on p's device. */
DL_API void dl__gbuf_clamp(const dl_param *p, void *g, int64_t n, double v) {
#ifdef DL_USE_CUDA
  if (p->t.device == DL_CUDA) {
    dl__gpu_ok(&p->t, "dl_clip_grads", dlg_clamp(dl__gpu_h(&p->t, "dl_clip_grads"), (int)p->t.dtype, g, n, v));
    return;
  }
#endif
  dl__clamp_buf(p->t.ctx, g, n, p->t.dtype, v);
}
DL_API void dl__gbuf_scale(const dl_param *p, void *g, int64_t n, double f) {
#ifdef DL_USE_CUDA
  if (p->t.device == DL_CUDA) {
    dl__gpu_ok(&p->t, "dl_clip_grads", dlg_scale(dl__gpu_h(&p->t, "dl_clip_grads"), (int)p->t.dtype, g, n, f));
    return;
  }
#endif
  dl__scale(p->t.ctx, g, n, p->t.dtype, f);
}

/* The parameters dl_clip_grads leaves alone: buffers, frozen, no gradient. */
DL_API int dl__clip_skips(const dl_param *p) { return p->kind == DL_PARAM_BUFFER || p->frozen || !p->t.grad; }

/* Stage 3: clip the gradients as d says. Returns the global gradient L2
 * norm after value and per-parameter clipping, before global scaling (what
 * clip_grad_norm_ returns; computed even when clip_norm is 0, for logging).
 * Frozen parameters are left out. NaN or inf gradients give a NaN/inf norm
 * and, with clip_norm set, NaN gradients (as PyTorch). On the host or on
 * the model's GPU. */
DL_API double dl__clip_grads(dl_model *m, const dl_step_desc *d, int want_norm);
/* Stage 3 (see above): clip m's gradients as d says; returns the global
 * gradient norm. */
DL_API double dl_clip_grads(dl_model *m, const dl_step_desc *d) { return dl__clip_grads(m, d, 1); }
/* dl_clip_grads; want_norm 0: the norm is not wanted, so when no clipping
 * by norm needs it (no clip_norm in d or on a parameter) no sum of squares
 * is computed (on the GPU: no reduction launched, nothing read back) and
 * NaN is returned. The gradients come out the same either way. */
#ifdef DL_USE_CUDA
/* dl__clip_grads on the GPU when no parameter has a clip_norm of its own
 * (the usual case): each parameter's value clipping, then the sums of
 * squares, the norm and the global scaling of every gradient in three
 * launches (dlg_clip_multi) whatever the parameter count, and nothing read
 * back unless the norm is wanted (then one double). The table of gradient
 * buffers is on the stack up to 256 parameters. */
DL_API double dl__clip_grads_gpu(dl_model *m, const dl_step_desc *d, int want_norm) {
  const char *op = "dl_clip_grads";
  const double cn = d && d->clip_norm > 0 ? d->clip_norm : 0;
  dlg_gbuf stack[256], *tab = stack;
  dlg_handle *h = dl__gpu_h(&m->params[0]->t, op);
  double out[2] = {(double)NAN, 1};
  void *dout = NULL;
  int i, nt = 0;
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    const double cv = p->clip_value > 0 ? p->clip_value : d ? d->clip_value : 0;
    if (dl__clip_skips(p) || !(cv > 0)) continue;
    {
      int64_t n;
      void *g = dl__grad_mem(p, &n);
      dl__gbuf_clamp(p, g, n, cv);
    }
  }
  if (!want_norm && !(cn > 0)) return (double)NAN;
  if (m->nparams > 256) {
    tab = (dlg_gbuf *)dl_alloc(m->ctx, sizeof(dlg_gbuf) * (size_t)m->nparams);
    if (!tab) DL_NOMEM(m->ctx, op, "the table of %d gradients", m->nparams);
  }
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    if (dl__clip_skips(p)) continue;
    tab[nt].g = dl__grad_mem(p, &tab[nt].n);
    nt++;
  }
  if (dl_gpu_alloc(m->ctx->gpu, &dout, sizeof out) != DL_OK) { /* the cache: no cudaMalloc */
    if (tab != stack) dl_free(m->ctx, tab);
    DL_NOMEM(m->ctx, op, "the device cannot hold the norm: %s", dl_ctx_message(m->ctx));
  }
  i = dlg_clip_multi(h, (int)m->dtype, nt, tab, cn, (double *)dout);
  if (tab != stack) dl_free(m->ctx, tab);
  if (i == DLG_OK && want_norm) i = dlg_copy(h, out, dout, sizeof out, DLG_D2H);
  dl_gpu_free(m->ctx->gpu, dout); /* back to the cache; queued kernels still using it run first */
  dl__gpu_ok(&m->params[0]->t, op, i);
  return out[0];
}
#endif

DL_API double dl__clip_grads(dl_model *m, const dl_step_desc *d, int want_norm) {
  double total, f;
  dl__gsum c;
  int i, sums = want_norm || (d && d->clip_norm > 0); /* the sums of squares: wanted, or needed to clip */
  int own = 0; /* a parameter with a clip_norm of its own */
  for (i = 0; i < m->nparams && !own; i++) own = !dl__clip_skips(m->params[i]) && m->params[i]->clip_norm > 0;
#ifdef DL_USE_CUDA
  if (!own && m->nparams && m->nparams <= 65535 && m->params[0]->t.device == DL_CUDA)
    return dl__clip_grads_gpu(m, d, want_norm); /* (one launch takes at most 65535 buffers) */
#endif
  sums = sums || own;
  if (sums) dl__gsum_begin(&c, m);
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    double cv = p->clip_value > 0 ? p->clip_value : d ? d->clip_value : 0, s;
    int64_t n;
    void *g;
    if (dl__clip_skips(p) || (!sums && !(cv > 0))) continue;
    g = dl__grad_mem(p, &n);
    if (cv > 0) dl__gbuf_clamp(p, g, n, cv);
    if (!sums) continue;
    s = dl__gsum_sumsq(&c, i, g, n);
    if (p->clip_norm > 0) {
      f = p->clip_norm / (sqrt(dl__gsum_get(&c, i, s)) + 1e-6);
      if (f < 1) {
        dl__gbuf_scale(p, g, n, f);
        s = dl__gsum_sumsq(&c, i, g, n);
      }
    }
    dl__gsum_add(&c, s);
  }
  if (!sums) return (double)NAN;
  total = sqrt(dl__gsum_total(&c, dl__clip_skips));
  if (d && d->clip_norm > 0) {
    f = d->clip_norm / (total + 1e-6);
    if (!(f >= 1))
      for (i = 0; i < m->nparams; i++) {
        dl_param *p = m->params[i];
        int64_t n;
        void *g;
        if (dl__clip_skips(p)) continue;
        g = dl__grad_mem(p, &n);
        dl__gbuf_scale(p, g, n, f);
      }
  }
  return total;
}

/* Stage 4: gradient += wd_mult * (l1 * sign(p) + l2 * p) for every trainable
 * parameter (the touched rows only of a row-sparse one). */
DL_API void dl_regularize(dl_model *m, const dl_step_desc *d) {
  int i;
  if (!d || (d->l1 == 0 && d->l2 == 0)) return;
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    double l1, l2;
    if (p->kind == DL_PARAM_BUFFER || p->frozen || !p->t.grad || p->wd_mult == 0) continue;
    l1 = d->l1 * p->wd_mult;
    l2 = d->l2 * p->wd_mult;
#ifdef DL_USE_CUDA
    if (p->t.device == DL_CUDA) { /* one kernel: the touched rows of a row-sparse gradient, or all */
      dlg_handle *h = dl__gpu_h(&p->t, "dl_regularize");
      if (dl__param_sparse_now(p)) {
        const dl_sgrad *s = (const dl_sgrad *)p->t.sgrad;
        if (!s) continue;
        dl__gpu_ok(&p->t, "dl_regularize", dlg_regularize(h, (int)m->dtype, s->nnz * s->width, s->width, s->rows,
                                                          s->values, p->t.data, l1, l2));
      } else {
        dl__gpu_ok(&p->t, "dl_regularize", dlg_regularize(h, (int)m->dtype, p->g.numel, 0, NULL, p->g.data,
                                                          p->t.data, l1, l2));
      }
      continue;
    }
#endif
    if (dl__param_sparse_now(p)) {
      const dl_sgrad *s = (const dl_sgrad *)p->t.sgrad;
      int64_t j, w;
      if (!s) continue;
      w = s->width;
      for (j = 0; j < s->nnz; j++) {
        dl_tensor pv = dl__row(&p->t, s->rows[j], w), gv;
        dl_tensor_wrap(&gv, m->ctx, m->dtype, 1, &w, (unsigned char *)s->values + (size_t)(s->slot[s->rows[j]] * w) * dl_dtype_size(m->dtype));
        dl_tensor *gp = &gv, *pp = &pv;
        DL_ASSIGN(gp, dl_add(gp, dl_add(dl_mul(l2, pp), dl_mul(l1, dl_sub(dl_gt(pp, 0.0), dl_lt(pp, 0.0))))));
      }
      continue;
    }
    {
      dl_tensor *g = &p->g, *pt = &p->t;
      DL_ASSIGN(g, dl_add(g, dl_add(dl_mul(l2, pt), dl_mul(l1, dl_sub(dl_gt(pt, 0.0), dl_lt(pt, 0.0))))));
    }
  }
}

/* Stages 3-5 after a backward pass, in their fixed order, then zero the
 * gradients: dl_clip_grads -> dl_regularize -> dl_optim_step ->
 * dl_model_zero_grad. Returns the gradient norm dl_clip_grads gives. The one
 * place the order is written: dl_train_step and dist.h's dl_dist_train_step
 * (whose backward also all-reduces) both end with it. */
DL_API double dl__apply_grads(dl_optim *o, const dl_step_desc *d, int want_norm) {
  const double norm = dl__clip_grads(o->model, d, want_norm);
  dl_regularize(o->model, d);
  dl__optim_step(o, o->device == DL_CPU); /* on the host the kernels zero the gradients as they read them */
  dl__model_zero_grad(o->model, o->device != DL_CPU); /* so no pass of its own there */
  return norm;
}
/* Stages 3-5 and zeroing (see above); returns the gradient norm. */
DL_API double dl_apply_grads(dl_optim *o, const dl_step_desc *d) { return dl__apply_grads(o, d, 1); }

/* Stages 2-5 in their fixed order, then zero the gradients:
 *   dl_backward(tp, loss) -> dl_apply_grads (dl_clip_grads -> dl_regularize
 *   -> dl_optim_step -> dl_model_zero_grad).
 * Gradients already accumulated (an earlier dl_backward of a second loss)
 * are kept and added to. Returns the gradient norm dl_clip_grads gives.
 * Stage 1 (the forward) is the caller's; rewind the tape before the next. */
DL_API double dl_train_step(dl_optim *o, dl_tape *tp, dl_tensor *loss, const dl_step_desc *d) {
  dl_backward(tp, loss, NULL);
  return dl_apply_grads(o, d);
}
/* dl_train_step without its return value: the gradient norm is computed
 * only where clipping by norm needs it, so on the GPU the host does not
 * wait for the step (nothing is read back). The same update. */
DL_API void dl_train_step_nowait(dl_optim *o, dl_tape *tp, dl_tensor *loss, const dl_step_desc *d) {
  dl_backward(tp, loss, NULL);
  (void)dl__apply_grads(o, d, 0);
}

#endif /* !DL__SCALAR_ONLY */

DL__HEADER_END
#endif /* DL_OPTIM_H */
