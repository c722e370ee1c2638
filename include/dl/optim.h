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
 * The schedules (and the configs) are visible to C++ too; the updates are C.
 */
#ifndef DL_OPTIM_H
#define DL_OPTIM_H

#include "expr.h"

#include <math.h>

/* >>configs ---------------------------------------------------------------- */

/* torch.optim.SGD */
typedef struct dl_sgd_cfg {
  double lr, momentum, dampening, weight_decay;
  int nesterov, maximize;
} dl_sgd_cfg;

/* torch.optim.Adam (decoupled = 0) and torch.optim.AdamW (decoupled = 1) */
typedef struct dl_adam_cfg {
  double lr, beta1, beta2, eps, weight_decay;
  int amsgrad, decoupled, maximize;
} dl_adam_cfg;

/* torch.optim.RMSprop */
typedef struct dl_rmsprop_cfg {
  double lr, alpha, eps, weight_decay, momentum;
  int centered, maximize;
} dl_rmsprop_cfg;

/* torch.optim.Adagrad */
typedef struct dl_adagrad_cfg {
  double lr, lr_decay, weight_decay, initial_accumulator_value, eps;
  int maximize;
} dl_adagrad_cfg;

/* Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
 *   c = beta1*m + (1-beta1)*g;  p = p*(1 - lr*wd) - lr*sign(c);
 *   m = beta2*m + (1-beta2)*g */
typedef struct dl_lion_cfg {
  double lr, beta1, beta2, weight_decay;
} dl_lion_cfg;

/* PyTorch's defaults (Lion: the paper's betas 0.9, 0.99, no weight decay). */
DL_API dl_sgd_cfg dl_sgd_defaults(double lr) {
  dl_sgd_cfg c;
  c.lr = lr; c.momentum = 0; c.dampening = 0; c.weight_decay = 0;
  c.nesterov = 0; c.maximize = 0;
  return c;
}
DL_API dl_adam_cfg dl_adam_defaults(double lr) {
  dl_adam_cfg c;
  c.lr = lr; c.beta1 = 0.9; c.beta2 = 0.999; c.eps = 1e-8; c.weight_decay = 0;
  c.amsgrad = 0; c.decoupled = 0; c.maximize = 0;
  return c;
}
DL_API dl_adam_cfg dl_adamw_defaults(double lr) {
  dl_adam_cfg c = dl_adam_defaults(lr);
  c.weight_decay = 1e-2;
  c.decoupled = 1;
  return c;
}
DL_API dl_rmsprop_cfg dl_rmsprop_defaults(double lr) {
  dl_rmsprop_cfg c;
  c.lr = lr; c.alpha = 0.99; c.eps = 1e-8; c.weight_decay = 0; c.momentum = 0;
  c.centered = 0; c.maximize = 0;
  return c;
}
DL_API dl_adagrad_cfg dl_adagrad_defaults(double lr) {
  dl_adagrad_cfg c;
  c.lr = lr; c.lr_decay = 0; c.weight_decay = 0; c.initial_accumulator_value = 0;
  c.eps = 1e-10; c.maximize = 0;
  return c;
}
DL_API dl_lion_cfg dl_lion_defaults(double lr) {
  dl_lion_cfg c;
  c.lr = lr; c.beta1 = 0.9; c.beta2 = 0.99; c.weight_decay = 0;
  return c;
}

/* >>schedules -------------------------------------------------------------- */

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

#ifndef __cplusplus

/* >>checks ----------------------------------------------------------------- */

/* Panics unless t has p's dtype and shape; a NULL t is reported as missing. */
DL_API void dl__optim_same(const char *fn, const dl_tensor *p, const dl_tensor *t,
                           const char *what) {
  if (!t)
    DL_PANIC(p->ctx, fn, "%s is NULL (parameter %s)", what, DL_SHAPESTR(p));
  if (t->dtype != p->dtype || !dl_tensor_same_shape(p, t))
    DL_PANIC(p->ctx, fn, "%s %s does not match parameter %s (same shape and dtype required)",
             what, DL_SHAPESTR(t), DL_SHAPESTR(p));
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

/* >>updates ---------------------------------------------------------------- */

/* Fills an Adagrad sum with c->initial_accumulator_value. */
DL_API void dl_adagrad_init_state(dl_tensor *sum, const dl_adagrad_cfg *c) {
  dl_tensor_fill(sum, c->initial_accumulator_value);
}

/* torch.optim.SGD. buf (the momentum buffer) may be NULL when momentum == 0.
 *   d = (maximize ? -g : g) + wd*p
 *   step 1: buf = d;  later: buf = momentum*buf + (1-dampening)*d
 *   p -= lr * (nesterov ? d + momentum*buf : buf)     (p -= lr*d without momentum) */
DL_API void dl_sgd_update(dl_tensor *p, const dl_tensor *g, dl_tensor *buf, int64_t step,
                          const dl_sgd_cfg *c) {
  const char *fn = "dl_sgd_update";
  const double sg = c && c->maximize ? -1.0 : 1.0;
  double wd, mom, damp1, lr;
  dl__optim_param(fn, p, g, c, step);
  wd = c->weight_decay; mom = c->momentum; damp1 = 1 - c->dampening; lr = c->lr;
#define DL__D dl_add(dl_mul(sg, g), dl_mul(wd, p))
  if (mom == 0) {
    DL_ASSIGN(p, dl_sub(p, dl_mul(lr, DL__D)));
    return;
  }
  dl__optim_same(fn, p, buf, "momentum buffer");
  if (step == 1) DL_ASSIGN(buf, DL__D);
  else DL_ASSIGN(buf, dl_add(dl_mul(buf, mom), dl_mul(damp1, DL__D)));
  if (c->nesterov) DL_ASSIGN(p, dl_sub(p, dl_mul(lr, dl_add(DL__D, dl_mul(mom, buf)))));
  else DL_ASSIGN(p, dl_sub(p, dl_mul(lr, buf)));
#undef DL__D
}

/* torch.optim.Adam / AdamW. vmax may be NULL unless c->amsgrad.
 *   d = (maximize ? -g : g) (+ wd*p for Adam; AdamW multiplies p by 1 - lr*wd)
 *   m = beta1*m + (1-beta1)*d;  v = beta2*v + (1-beta2)*d*d;  vmax = max(vmax, v)
 *   p -= lr/(1-beta1^step) * m / (sqrt(v or vmax)/sqrt(1-beta2^step) + eps) */
DL_API void dl_adam_update(dl_tensor *p, const dl_tensor *g, dl_tensor *m, dl_tensor *v,
                           dl_tensor *vmax, int64_t step, const dl_adam_cfg *c) {
  const char *fn = "dl_adam_update";
  const double sg = c && c->maximize ? -1.0 : 1.0;
  double wd, b1, b2, b1c, b2c, step_size, bc2_sqrt, eps, decay;
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, m, "m (first moment)");
  dl__optim_same(fn, p, v, "v (second moment)");
  if (c->amsgrad) dl__optim_same(fn, p, vmax, "vmax (amsgrad)");
  b1 = c->beta1; b2 = c->beta2; eps = c->eps;
  b1c = 1 - b1; b2c = 1 - b2;
  wd = c->decoupled ? 0.0 : c->weight_decay;
  decay = c->decoupled ? 1 - c->lr * c->weight_decay : 1.0;
  step_size = c->lr / (1 - pow(b1, (double)step));
  bc2_sqrt = sqrt(1 - pow(b2, (double)step));
#define DL__D dl_add(dl_mul(sg, g), dl_mul(wd, p))
  DL_ASSIGN(m, dl_add(dl_mul(m, b1), dl_mul(b1c, DL__D)));
  DL_ASSIGN(v, dl_add(dl_mul(v, b2), dl_mul(b2c, dl_mul(DL__D, DL__D))));
#undef DL__D
  if (c->amsgrad) {
    DL_ASSIGN(vmax, dl_max(vmax, v));
    v = vmax;
  }
  DL_ASSIGN(p, dl_sub(dl_mul(p, decay),
                      dl_div(dl_mul(step_size, m), dl_add(dl_div(dl_sqrt(v), bc2_sqrt), eps))));
}

/* torch.optim.RMSprop. grad_avg may be NULL unless c->centered, momentum_buf
 * unless c->momentum > 0. step is checked but does not enter the formulas.
 *   d = (maximize ? -g : g) + wd*p;  sq = alpha*sq + (1-alpha)*d*d
 *   centered: ga = alpha*ga + (1-alpha)*d;  avg = sqrt(sq - ga*ga) + eps
 *   else avg = sqrt(sq) + eps
 *   momentum: buf = momentum*buf + d/avg; p -= lr*buf;  else p -= lr*d/avg */
DL_API void dl_rmsprop_update(dl_tensor *p, const dl_tensor *g, dl_tensor *square_avg,
                              dl_tensor *grad_avg, dl_tensor *momentum_buf, int64_t step,
                              const dl_rmsprop_cfg *c) {
  const char *fn = "dl_rmsprop_update";
  const double sg = c && c->maximize ? -1.0 : 1.0;
  double wd, al, al1, eps, mom, lr;
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, square_avg, "square_avg");
  if (c->centered) dl__optim_same(fn, p, grad_avg, "grad_avg (centered)");
  if (c->momentum > 0) dl__optim_same(fn, p, momentum_buf, "momentum buffer");
  wd = c->weight_decay; al = c->alpha; al1 = 1 - c->alpha; eps = c->eps; mom = c->momentum;
  lr = c->lr;
#define DL__D dl_add(dl_mul(sg, g), dl_mul(wd, p))
  DL_ASSIGN(square_avg, dl_add(dl_mul(square_avg, al), dl_mul(al1, dl_mul(DL__D, DL__D))));
  if (c->centered) {
    DL_ASSIGN(grad_avg, dl_add(dl_mul(grad_avg, al), dl_mul(al1, DL__D)));
#define DL__AVG dl_add(dl_sqrt(dl_sub(square_avg, dl_mul(grad_avg, grad_avg))), eps)
    if (mom > 0) {
      DL_ASSIGN(momentum_buf, dl_add(dl_mul(momentum_buf, mom), dl_div(DL__D, DL__AVG)));
      DL_ASSIGN(p, dl_sub(p, dl_mul(lr, momentum_buf)));
    } else {
      DL_ASSIGN(p, dl_sub(p, dl_div(dl_mul(lr, DL__D), DL__AVG)));
    }
#undef DL__AVG
  } else {
#define DL__AVG dl_add(dl_sqrt(square_avg), eps)
    if (mom > 0) {
      DL_ASSIGN(momentum_buf, dl_add(dl_mul(momentum_buf, mom), dl_div(DL__D, DL__AVG)));
      DL_ASSIGN(p, dl_sub(p, dl_mul(lr, momentum_buf)));
    } else {
      DL_ASSIGN(p, dl_sub(p, dl_div(dl_mul(lr, DL__D), DL__AVG)));
    }
#undef DL__AVG
  }
#undef DL__D
}

/* torch.optim.Adagrad. sum starts at initial_accumulator_value
 * (dl_adagrad_init_state).
 *   d = (maximize ? -g : g) + wd*p;  sum += d*d
 *   p -= lr/(1 + (step-1)*lr_decay) * d / (sqrt(sum) + eps) */
DL_API void dl_adagrad_update(dl_tensor *p, const dl_tensor *g, dl_tensor *sum, int64_t step,
                              const dl_adagrad_cfg *c) {
  const char *fn = "dl_adagrad_update";
  const double sg = c && c->maximize ? -1.0 : 1.0;
  double wd, clr, eps;
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, sum, "sum");
  wd = c->weight_decay; eps = c->eps;
  clr = c->lr / (1 + (double)(step - 1) * c->lr_decay);
#define DL__D dl_add(dl_mul(sg, g), dl_mul(wd, p))
  DL_ASSIGN(sum, dl_add(sum, dl_mul(DL__D, DL__D)));
  DL_ASSIGN(p, dl_sub(p, dl_div(dl_mul(clr, DL__D), dl_add(dl_sqrt(sum), eps))));
#undef DL__D
}

/* Lion (see dl_lion_cfg); sign(0) = 0. step is checked only. */
DL_API void dl_lion_update(dl_tensor *p, const dl_tensor *g, dl_tensor *m, int64_t step,
                           const dl_lion_cfg *c) {
  const char *fn = "dl_lion_update";
  double b1, b1c, b2, b2c, lr, decay;
  dl__optim_param(fn, p, g, c, step);
  dl__optim_same(fn, p, m, "m");
  b1 = c->beta1; b1c = 1 - c->beta1; b2 = c->beta2; b2c = 1 - c->beta2; lr = c->lr;
  decay = 1 - c->lr * c->weight_decay;
#define DL__C dl_add(dl_mul(m, b1), dl_mul(b1c, g))
  DL_ASSIGN(p, dl_sub(dl_mul(p, decay), dl_mul(lr, dl_sub(dl_gt(DL__C, 0.0), dl_lt(DL__C, 0.0)))));
#undef DL__C
  DL_ASSIGN(m, dl_add(dl_mul(m, b2), dl_mul(b2c, g)));
}

#endif /* __cplusplus */

#endif /* DL_OPTIM_H */
