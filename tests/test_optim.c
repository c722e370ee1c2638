/* dl-test-cxx */
/* tests/test_optim.c - optimizer updates and learning-rate schedules
 * (include/dl/optim.h).
 *
 * - PyTorch agreement (tests/fixtures/optim.txt, tools/fixtures_optim.py):
 *   SGD (plain, momentum, dampening, nesterov, weight decay, maximize),
 *   Adam (plain, weight decay, amsgrad, maximize), AdamW (+ amsgrad),
 *   RMSprop (plain, centered, momentum, both, weight decay + maximize),
 *   Adagrad (plain, lr_decay, initial_accumulator_value, weight decay +
 *   maximize) and Lion (against the published rule) replay 20 stored
 *   gradients on a 3x4 parameter; the parameter after every step agrees
 *   norm-wise (max |error| / max |p|) to 1e-6 in f64 and 1e-5 in f32, and
 *   element-wise (relative, floor 1e-3 * max |p|) to 1e-6 in f64 and 1e-4 in
 *   f32: PyTorch's f32 kernels fuse a*b + c (FMA) where ours may round twice,
 *   and after 20 steps an element passing near zero keeps ~1e-7 absolute. The same runs with a two-thread
 *   team forced on (parallel threshold 1) give bit-identical results, and a
 *   run on transposed views gives the same result as a contiguous one.
 * - Schedules: StepLR, MultiStepLR (unsorted, repeated milestones),
 *   ExponentialLR and OneCycleLR against torch's schedulers, the cosine
 *   warm-up against its Python formula, to 1e-12.
 * - Defaults match PyTorch's.
 * - Panics: shape and dtype mismatches name the function and both shapes;
 *   a missing state tensor and step 0 are refused.
 * OPTIM_VERBOSE=1 in the environment prints every fixture comparison.
 */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx, ctx_par;
static fx2_set fx;
static int fx_ok;
static double worst[2], worst_el[2], worst_sched;

/* >>optimizer fixtures ----------------------------------------------------- */

typedef struct state {
  dl_tensor *p, *g, *s1, *s2, *s3;
} state;

/* One optimizer step of case c on st (gradient already in st->g). */
static void opt_step(const fx2_case *c, state *st, int64_t step) {
  const int opt = (int)fx2_param(c, "opt", -1);
  if (opt == 0) {
    dl_sgd_cfg k = dl_sgd_defaults(fx2_param(c, "lr", -1));
    k.momentum = fx2_param(c, "momentum", -1);
    k.dampening = fx2_param(c, "dampening", -1);
    k.weight_decay = fx2_param(c, "weight_decay", -1);
    k.nesterov = (int)fx2_param(c, "nesterov", -1);
    k.maximize = (int)fx2_param(c, "maximize", -1);
    dl_sgd_update(st->p, st->g, k.momentum != 0 ? st->s1 : NULL, step, &k);
  } else if (opt == 1) {
    dl_adam_cfg k = fx2_param(c, "decoupled", -1) ? dl_adamw_defaults(fx2_param(c, "lr", -1))
                                                  : dl_adam_defaults(fx2_param(c, "lr", -1));
    k.beta1 = fx2_param(c, "beta1", -1);
    k.beta2 = fx2_param(c, "beta2", -1);
    k.eps = fx2_param(c, "eps", -1);
    k.weight_decay = fx2_param(c, "weight_decay", -1);
    k.amsgrad = (int)fx2_param(c, "amsgrad", -1);
    k.maximize = (int)fx2_param(c, "maximize", -1);
    dl_adam_update(st->p, st->g, st->s1, st->s2, k.amsgrad ? st->s3 : NULL, step, &k);
  } else if (opt == 2) {
    dl_rmsprop_cfg k = dl_rmsprop_defaults(fx2_param(c, "lr", -1));
    k.alpha = fx2_param(c, "alpha", -1);
    k.eps = fx2_param(c, "eps", -1);
    k.weight_decay = fx2_param(c, "weight_decay", -1);
    k.momentum = fx2_param(c, "momentum", -1);
    k.centered = (int)fx2_param(c, "centered", -1);
    k.maximize = (int)fx2_param(c, "maximize", -1);
    dl_rmsprop_update(st->p, st->g, st->s1, k.centered ? st->s2 : NULL,
                      k.momentum > 0 ? st->s3 : NULL, step, &k);
  } else if (opt == 3) {
    dl_adagrad_cfg k = dl_adagrad_defaults(fx2_param(c, "lr", -1));
    k.lr_decay = fx2_param(c, "lr_decay", -1);
    k.weight_decay = fx2_param(c, "weight_decay", -1);
    k.initial_accumulator_value = fx2_param(c, "initial_accumulator_value", -1);
    k.eps = fx2_param(c, "eps", -1);
    k.maximize = (int)fx2_param(c, "maximize", -1);
    if (step == 1) dl_adagrad_init_state(st->s1, &k);
    dl_adagrad_update(st->p, st->g, st->s1, step, &k);
  } else if (opt == 4) {
    dl_lion_cfg k = dl_lion_defaults(fx2_param(c, "lr", -1));
    k.beta1 = fx2_param(c, "beta1", -1);
    k.beta2 = fx2_param(c, "beta2", -1);
    k.weight_decay = fx2_param(c, "weight_decay", -1);
    dl_lion_update(st->p, st->g, st->s1, step, &k);
  } else {
    dl_lamb_cfg k = dl_lamb_defaults(fx2_param(c, "lr", -1));
    k.beta1 = fx2_param(c, "beta1", -1);
    k.beta2 = fx2_param(c, "beta2", -1);
    k.eps = fx2_param(c, "eps", -1);
    k.weight_decay = fx2_param(c, "weight_decay", -1);
    k.max_trust = fx2_param(c, "max_trust", -1);
    k.bias_correction = (int)fx2_param(c, "bias_correction", -1);
    dl_lamb_update(st->p, st->g, st->s1, st->s2, step, &k);
  }
}

/* Replays case c: mode 0 contiguous tensors, no ctx; 1 the same with a
 * two-thread team forced on; 2 transposed views. Returns the parameter after
 * every step (steps x 12 values, malloc'd) and the worst errors against the
 * fixture over the steps: err[0] norm-wise (max |got - want| / max |want| per
 * step), err[1] element-wise (fx2_err: relative, floor 1e-3 * max |want|). */
static double *run_case(const fx2_case *c, int mode, double err[2]) {
  const dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  const fx2_tensor *p0 = fx2_get(c, "p0"), *g = fx2_get(c, "g"), *want = fx2_get(c, "p");
  const int64_t steps = g->shape[0], n = p0->numel;
  dl_tensor *base[5], views[5], *t[5];
  double *out = (double *)malloc(sizeof(double) * (size_t)(steps * n));
  state st;
  int64_t k, i;
  int j;
  err[0] = err[1] = 0;
  for (j = 0; j < 5; j++) {
    if (mode == 2) {
      base[j] = dl_tensor_make(NULL, dt, DL_SHAPE(p0->shape[1], p0->shape[0]));
      views[j] = dl_view_transpose(base[j], 0, 1);
      t[j] = &views[j];
    } else {
      base[j] = dl_tensor_make(NULL, dt, p0->ndim, p0->shape);
      base[j]->ctx = mode == 1 ? &ctx_par : NULL;
      t[j] = base[j];
    }
    dl_tensor_fill(t[j], 0);
  }
  st.p = t[0]; st.g = t[1]; st.s1 = t[2]; st.s2 = t[3]; st.s3 = t[4];
  for (i = 0; i < n; i++) dl__set_at(st.p, dl__offset_of_linear(st.p, i), p0->v[i]);
  for (k = 0; k < steps; k++) {
    fx2_tensor w = *want;
    double e;
    for (i = 0; i < n; i++) dl__set_at(st.g, dl__offset_of_linear(st.g, i), g->v[k * n + i]);
    opt_step(c, &st, k + 1);
    w.ndim = p0->ndim;
    memcpy(w.shape, p0->shape, sizeof w.shape);
    w.numel = n;
    w.v = want->v + k * n;
    e = fx2_err_norm(st.p, &w);
    if (!(e <= err[0])) err[0] = e;
    e = fx2_err(st.p, &w);
    if (!(e <= err[1])) err[1] = e;
    for (i = 0; i < n; i++) out[k * n + i] = dl__get_at(st.p, dl__offset_of_linear(st.p, i));
  }
  for (j = 0; j < 5; j++) dl_tensor_free(base[j]);
  return out;
}

static void test_optimizers_vs_torch(void) {
  int i, ncase = 0;
  if (!fx_ok) SKIP("%s", fx.err);
  for (i = 0; i < fx.n; i++) {
    const fx2_case *c = &fx.cases[i];
    const double tol = c->f64 ? 1e-6 : 1e-5, etol = c->f64 ? 1e-6 : 1e-4;
    double e0[2], e1[2], e2[2], *r0, *r1, *r2;
    int64_t n, j;
    int same1 = 1, same2 = 1;
    if (strncmp(c->name, "opt_", 4)) continue;
    ncase++;
    CHECK_MSG(fx2_get(c, "p0") && fx2_get(c, "g") && fx2_get(c, "p"), "%s lacks tensors", c->name);
    if (!fx2_get(c, "p0") || !fx2_get(c, "g") || !fx2_get(c, "p")) continue;
    n = fx2_get(c, "p")->numel;
    r0 = run_case(c, 0, e0);
    r1 = run_case(c, 1, e1);
    r2 = run_case(c, 2, e2);
    for (j = 0; j < n; j++) {
      if (r0[j] != r1[j]) same1 = 0;
      if (r0[j] != r2[j]) same2 = 0;
    }
    if (getenv("OPTIM_VERBOSE"))
      printf("  %-30s %s  norm-wise %.3g  element-wise %.3g\n", c->name, c->f64 ? "f64" : "f32",
             e0[0], e0[1]);
    CHECK_MSG(e0[0] <= tol, "%s %s: rel err %.3g > %g", c->name, c->f64 ? "f64" : "f32", e0[0], tol);
    CHECK_MSG(e0[1] <= etol, "%s %s: element-wise rel err %.3g > %g", c->name,
              c->f64 ? "f64" : "f32", e0[1], etol);
    CHECK_MSG(same1, "%s %s: threaded run differs", c->name, c->f64 ? "f64" : "f32");
    CHECK_MSG(same2, "%s %s: transposed views differ", c->name, c->f64 ? "f64" : "f32");
    if (e0[0] > worst[c->f64]) worst[c->f64] = e0[0];
    if (e0[1] > worst_el[c->f64]) worst_el[c->f64] = e0[1];
    free(r0); free(r1); free(r2);
  }
  CHECK_MSG(ncase == 56, "%d optimizer cases (56 expected)", ncase);
}

/* >>schedules -------------------------------------------------------------- */

static void test_schedules_vs_torch(void) {
  int i, ncase = 0;
  if (!fx_ok) SKIP("%s", fx.err);
  for (i = 0; i < fx.n; i++) {
    const fx2_case *c = &fx.cases[i];
    const fx2_tensor *lr = fx2_get(c, "lr");
    int64_t s;
    if (strncmp(c->name, "sched_", 6)) continue;
    ncase++;
    CHECK_MSG(lr != NULL, "%s lacks lr", c->name);
    if (!lr) continue;
    for (s = 0; s < lr->numel; s++) {
      double got, e;
      if (!strcmp(c->name, "sched_step")) {
        got = dl_lr_step(fx2_param(c, "base", -1), s, (int64_t)fx2_param(c, "step_size", -1),
                         fx2_param(c, "gamma", -1));
      } else if (!strcmp(c->name, "sched_multistep")) {
        const fx2_tensor *m = fx2_get(c, "milestones");
        int ms[16], k, nm = m ? (int)m->numel : 0;
        for (k = 0; k < nm && k < 16; k++) ms[k] = (int)m->v[k];
        got = dl_lr_multistep(fx2_param(c, "base", -1), s, ms, nm, fx2_param(c, "gamma", -1));
      } else if (!strcmp(c->name, "sched_exponential")) {
        got = dl_lr_exponential(fx2_param(c, "base", -1), s, fx2_param(c, "gamma", -1));
      } else if (!strcmp(c->name, "sched_one_cycle")) {
        got = dl_lr_one_cycle(fx2_param(c, "max_lr", -1), s, (int64_t)fx2_param(c, "total_steps", -1),
                              fx2_param(c, "pct_start", -1), fx2_param(c, "div_factor", -1),
                              fx2_param(c, "final_div_factor", -1));
      } else if (!strcmp(c->name, "sched_cosine_warmup")) {
        got = dl_lr_cosine_warmup(fx2_param(c, "base", -1), s,
                                  (int64_t)fx2_param(c, "warmup_steps", -1),
                                  (int64_t)fx2_param(c, "total_steps", -1), fx2_param(c, "min_lr", -1));
      } else {
        CHECK_MSG(0, "unknown schedule case %s", c->name);
        break;
      }
      e = fabs(got - lr->v[s]) / fmax(fabs(lr->v[s]), 1e-300);
      if (lr->v[s] == 0) e = fabs(got);
      CHECK_MSG(e <= 1e-12, "%s step %lld: %.17g vs %.17g", c->name, (long long)s, got, lr->v[s]);
      if (e > worst_sched) worst_sched = e;
    }
  }
  CHECK_MSG(ncase == 12, "%d schedule cases (12 expected)", ncase);
}

static void test_schedule_shapes(void) {
  const int ms[] = {10, 4};
  CHECK(dl_lr_step(0.1, 0, 5, 0.5) == 0.1);
  CHECK_NEAR(dl_lr_step(0.1, 10, 5, 0.5), 0.025, 1e-17);
  CHECK_NEAR(dl_lr_multistep(1.0, 4, ms, 2, 0.1), 0.1, 1e-16);
  CHECK_NEAR(dl_lr_multistep(1.0, 3, ms, 2, 0.1), 1.0, 0);
  CHECK(dl_lr_cosine_warmup(1.0, 0, 10, 100, 0.1) == 0);
  CHECK_NEAR(dl_lr_cosine_warmup(1.0, 10, 10, 100, 0.1), 1.0, 1e-15);
  CHECK_NEAR(dl_lr_cosine_warmup(1.0, 100, 10, 100, 0.1), 0.1, 1e-15);
  CHECK_NEAR(dl_lr_cosine_warmup(1.0, 1000, 10, 100, 0.1), 0.1, 1e-15);
  CHECK_NEAR(dl_lr_one_cycle(1.0, 0, 100, 0.3, 25, 1e4), 0.04, 1e-15);
  CHECK_NEAR(dl_lr_one_cycle(1.0, 29, 100, 0.3, 25, 1e4), 1.0, 1e-15);
  CHECK_NEAR(dl_lr_one_cycle(1.0, 99, 100, 0.3, 25, 1e4), 0.04 / 1e4, 1e-18);
}

/* >>defaults --------------------------------------------------------------- */

static void test_defaults(void) {
  dl_sgd_cfg s = dl_sgd_defaults(0.1);
  dl_adam_cfg a = dl_adam_defaults(1e-3), w = dl_adamw_defaults(1e-3);
  dl_rmsprop_cfg r = dl_rmsprop_defaults(1e-2);
  dl_adagrad_cfg g = dl_adagrad_defaults(1e-2);
  dl_lion_cfg l = dl_lion_defaults(1e-4);
  CHECK(s.lr == 0.1 && s.momentum == 0 && s.dampening == 0 && s.weight_decay == 0 && !s.nesterov &&
        !s.maximize);
  CHECK(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 && a.weight_decay == 0 &&
        !a.amsgrad && !a.decoupled && !a.maximize);
  CHECK(w.weight_decay == 1e-2 && w.decoupled && w.beta2 == 0.999);
  CHECK(r.alpha == 0.99 && r.eps == 1e-8 && r.momentum == 0 && !r.centered);
  CHECK(g.lr_decay == 0 && g.eps == 1e-10 && g.initial_accumulator_value == 0);
  CHECK(l.beta1 == 0.9 && l.beta2 == 0.99 && l.weight_decay == 0);
}

/* >>panics ----------------------------------------------------------------- */

static void test_panics(void) {
  dl_tensor *p = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3, 4));
  dl_tensor *g = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3, 4));
  dl_tensor *gt = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(4, 3));
  dl_tensor *g64 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 4));
  dl_tensor *m = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3, 4));
  dl_tensor *v = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3, 4));
  dl_tensor *bad = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(12));
  dl_tensor *pi = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(3, 4));
  dl_sgd_cfg s = dl_sgd_defaults(0.1);
  dl_adam_cfg a = dl_adam_defaults(1e-3);
  dl_rmsprop_cfg r = dl_rmsprop_defaults(1e-2);
  dl_adagrad_cfg ag = dl_adagrad_defaults(1e-2);
  dl_lion_cfg l = dl_lion_defaults(1e-4);
  dl_tensor_fill(p, 1); dl_tensor_fill(g, 1); dl_tensor_fill(m, 0); dl_tensor_fill(v, 0);
  EXPECT_PANIC(dl_sgd_update(p, gt, NULL, 1, &s), "dl_sgd_update", "f32[4, 3]", "f32[3, 4]");
  EXPECT_PANIC(dl_sgd_update(p, g64, NULL, 1, &s), "dl_sgd_update", "f64[3, 4]", "f32[3, 4]");
  s.momentum = 0.9;
  EXPECT_PANIC(dl_sgd_update(p, g, NULL, 1, &s), "dl_sgd_update", "momentum buffer");
  EXPECT_PANIC(dl_sgd_update(p, g, bad, 1, &s), "dl_sgd_update", "f32[12]", "f32[3, 4]");
  EXPECT_PANIC(dl_adam_update(p, g, m, bad, NULL, 1, &a), "dl_adam_update", "f32[12]", "f32[3, 4]");
  EXPECT_PANIC(dl_adam_update(p, g, m, v, NULL, 0, &a), "dl_adam_update", "step 0");
  a.amsgrad = 1;
  EXPECT_PANIC(dl_adam_update(p, g, m, v, NULL, 1, &a), "dl_adam_update", "vmax");
  EXPECT_PANIC(dl_adam_update(p, g, m, v, g64, 1, &a), "dl_adam_update", "f64[3, 4]", "f32[3, 4]");
  r.centered = 1;
  EXPECT_PANIC(dl_rmsprop_update(p, g, m, bad, NULL, 1, &r), "dl_rmsprop_update", "f32[12]",
               "f32[3, 4]");
  EXPECT_PANIC(dl_adagrad_update(p, g, bad, 1, &ag), "dl_adagrad_update", "f32[12]", "f32[3, 4]");
  EXPECT_PANIC(dl_lion_update(p, gt, m, 1, &l), "dl_lion_update", "f32[4, 3]", "f32[3, 4]");
  EXPECT_PANIC(dl_lion_update(pi, g, m, 1, &l), "dl_lion_update", "i32[3, 4]");
  dl_tensor_free(p); dl_tensor_free(g); dl_tensor_free(gt); dl_tensor_free(g64);
  dl_tensor_free(m); dl_tensor_free(v); dl_tensor_free(bad); dl_tensor_free(pi);
}

/* Adam's one-pass loop (contiguous tensors) and its DL_ASSIGN form (strided
 * views: every other element of a twice-as-long buffer) give identical bits,
 * f32 and f64, Adam/AdamW, with and without AMSGrad, on 1 and 2 threads. */
static void test_adam_paths_agree(void) {
  int dti, var;
  for (dti = 0; dti < 2; dti++)
    for (var = 0; var < 4; var++) {
      const dl_dtype dt = dti ? DL_F64 : DL_F32;
      const int64_t n = 40000; /* above the parallel threshold */
      dl_tensor *c[5], *wide[5], sv[5];
      dl_adam_cfg cfg = (var & 1) ? dl_adamw_defaults(1e-2) : dl_adam_defaults(1e-2);
      dl_rng r = dl_rng_make(77);
      int k, step, same = 1;
      cfg.amsgrad = (var & 2) != 0;
      cfg.weight_decay = 0.05;
      for (k = 0; k < 5; k++) {
        c[k] = dl_tensor_make(&ctx, dt, DL_SHAPE(n));
        wide[k] = dl_tensor_make(&ctx, dt, DL_SHAPE(2 * n));
        sv[k] = dl_view_slice(wide[k], 0, 0, 2 * n, 2);
        if (k < 2) dl_tensor_rand_normal(c[k], &r, 0, 1);
        dl_tensor_copy(&sv[k], c[k]);
      }
      for (step = 1; step <= 5; step++) {
        dl_adam_update(c[0], c[1], c[2], c[3], c[4], step, &cfg);
        dl_adam_update(&sv[0], &sv[1], &sv[2], &sv[3], &sv[4], step, &cfg);
      }
      for (k = 0; k < 5; k++) {
        int64_t i;
        for (i = 0; i < n; i++) same &= dl__get_at(c[k], i) == dl__get_at(&sv[k], 2 * i);
      }
      CHECK_MSG(same, "Adam fused vs DL_ASSIGN differ: %s, variant %d", dl_dtype_name(dt), var);
      for (k = 0; k < 5; k++) {
        dl_tensor_free(c[k]);
        dl_tensor_free(wide[k]);
      }
    }
}

/* Adam's vector body against its formula written out in scalar code (each
 * product and sum rounded on its own: volatile temporaries keep a compiler
 * from fusing them), bit for bit: lengths with every tail (vector widths 2
 * to 16), AMSGrad with NaN and infinities in the moments, f32 and f64, on
 * one thread and on a team of two (every block of the parallel update). */
#define ADAM_REF(S, SQRT)                                                                        \
  static void adam_ref_##S(S *P, const S *G, S *M, S *V, S *VM, int64_t n, const dl_adam_cfg *c, \
                           int64_t step) {                                                      \
    const S sg = (S)(c->maximize ? -1.0 : 1.0), wd = (S)(c->decoupled ? 0.0 : c->weight_decay);  \
    const S b1 = (S)c->beta1, b1c = (S)(1 - c->beta1), b2 = (S)c->beta2, b2c = (S)(1 - c->beta2); \
    const S dec = (S)(c->decoupled ? 1 - c->lr * c->weight_decay : 1.0);                         \
    const S ss = (S)(c->lr / (1 - pow(c->beta1, (double)step)));                                 \
    const S bc = (S)sqrt(1 - pow(c->beta2, (double)step)), eps = (S)c->eps;                     \
    int64_t i;                                                                                  \
    for (i = 0; i < n; i++) {                                                                   \
      volatile S t1, t2, d, mi, vi, q;                                                          \
      t1 = sg * G[i]; t2 = wd * P[i]; d = t1 + t2;                                              \
      t1 = M[i] * b1; t2 = b1c * d; mi = t1 + t2;                                               \
      t1 = V[i] * b2; q = d * d; t2 = b2c * q; vi = t1 + t2;                                    \
      M[i] = mi; V[i] = vi;                                                                     \
      if (VM) { const S a = VM[i]; if (a > vi || a != a) vi = a; VM[i] = vi; }                  \
      t1 = P[i] * dec; t2 = ss * mi; q = SQRT(vi); q = q / bc; q = q + eps; t2 = t2 / q;         \
      P[i] = t1 - t2;                                                                           \
    }                                                                                           \
  }
ADAM_REF(float, sqrtf)
ADAM_REF(double, sqrt)
static void test_adam_vector_matches_scalar(void) {
  static const int64_t lens[] = {1, 3, 7, 15, 17, 31, 33, 8193, 40013};
  static const int64_t steps[] = {1, 2, 3, 17, 250, 4000, 30000}; /* bias corrections from 0.03 to 1 */
  int dti, li, var, par;
  for (dti = 0; dti < 2; dti++)
    for (li = 0; li < (int)(sizeof lens / sizeof lens[0]); li++)
      for (var = 0; var < 4; var++)
        for (par = 0; par < 2; par++) {
          const dl_dtype dt = dti ? DL_F64 : DL_F32;
          const int64_t n = lens[li];
          dl_ctx *cx = par ? &ctx_par : &ctx;
          dl_tensor *t[5], *r[5];
          dl_adam_cfg cfg = (var & 1) ? dl_adamw_defaults(1e-2) : dl_adam_defaults(1e-2);
          dl_rng rng = dl_rng_make(91 + (uint64_t)li);
          int k, si, same = 1;
          int64_t i;
          cfg.amsgrad = (var & 2) != 0;
          cfg.weight_decay = 0.05;
          cfg.maximize = var == 3;
          for (k = 0; k < 5; k++) {
            t[k] = dl_tensor_make(cx, dt, DL_SHAPE(n));
            r[k] = dl_tensor_make(cx, dt, DL_SHAPE(n));
            dl_tensor_rand_normal(t[k], &rng, 0, 1);
            if (k >= 2) { /* moments: >= 0, with the odd NaN and inf in vmax */
              for (i = 0; i < n; i++) {
                double x = fabs(dl__get_at(t[k], i));
                if (k == 4 && i % 5 == 1) x = i % 3 ? NAN : INFINITY;
                dl__set_at(t[k], i, x);
              }
            }
            dl_tensor_copy(r[k], t[k]);
          }
          for (si = 0; si < (int)(sizeof steps / sizeof steps[0]); si++) {
            const int64_t step = steps[si];
            dl_adam_update(t[0], t[1], t[2], t[3], cfg.amsgrad ? t[4] : NULL, step, &cfg);
            if (dt == DL_F32)
              adam_ref_float((float *)r[0]->data, (const float *)r[1]->data, (float *)r[2]->data,
                             (float *)r[3]->data, cfg.amsgrad ? (float *)r[4]->data : NULL, n, &cfg, step);
            else
              adam_ref_double((double *)r[0]->data, (const double *)r[1]->data, (double *)r[2]->data,
                              (double *)r[3]->data, cfg.amsgrad ? (double *)r[4]->data : NULL, n, &cfg, step);
          }
          for (k = 0; k < 5; k++)
            for (i = 0; i < n; i++) {
              const double x = dl__get_at(t[k], i), y = dl__get_at(r[k], i);
              same &= memcmp(&x, &y, sizeof x) == 0 || (x != x && y != y);
            }
          CHECK_MSG(same, "Adam's vector body differs from its scalar formula: %s, n %lld, variant %d, %d thread(s)",
                    dl_dtype_name(dt), (long long)n, var, par ? 2 : 1);
          for (k = 0; k < 5; k++) {
            dl_tensor_free(t[k]);
            dl_tensor_free(r[k]);
          }
        }
}

/* The gradient norm's sum of squares (dl__sumsq), the clip's scaling
 * (dl__scale) and its clamp (dl__clamp_buf) run on the ctx's team: the sum
 * the same bits on one thread and on two (the pieces' sums added in
 * order) and within 1e-14 of a long double one, for lengths of one piece,
 * two, and more than 256 pieces (longer pieces then); the scaled and
 * clamped values those of the scalar loop (NaN kept); f32 and f64. */
static void test_sumsq_scale_threads(void) {
  static const int64_t lens[] = {5, 32768, 32769, 100003, 9000017};
  int dti, li;
  for (dti = 0; dti < 2; dti++)
    for (li = 0; li < (int)(sizeof lens / sizeof lens[0]); li++) {
      const dl_dtype dt = dti ? DL_F64 : DL_F32;
      const int64_t n = lens[li];
      dl_tensor *x = dl_tensor_make(&ctx, dt, DL_SHAPE(n)), *y = dl_tensor_make(&ctx, dt, DL_SHAPE(n));
      dl_rng rng = dl_rng_make(17 + (uint64_t)li);
      long double ref = 0;
      double s1, s2;
      int64_t i;
      int same = 1;
      dl_tensor_rand_normal(x, &rng, 0.5, 2);
      for (i = 0; i < n; i++) ref += (long double)dl__get_at(x, i) * (long double)dl__get_at(x, i);
      s1 = dl__sumsq(&ctx, x->data, n, dt);
      s2 = dl__sumsq(&ctx_par, x->data, n, dt);
      CHECK_MSG(memcmp(&s1, &s2, sizeof s1) == 0, "dl__sumsq %s n %lld: %.17g on 1 thread, %.17g on 2",
                dl_dtype_name(dt), (long long)n, s1, s2);
      CHECK_MSG(fabs(s1 - (double)ref) <= 1e-14 * (double)ref, "dl__sumsq %s n %lld: %.17g, long double %.17Lg",
                dl_dtype_name(dt), (long long)n, s1, ref);
      dl_tensor_copy(y, x);
      dl__scale(&ctx_par, y->data, n, dt, 0.37);
      for (i = 0; i < n; i++) {
        double a = dl__get_at(y, i), b = dt == DL_F32 ? (double)((float)dl__get_at(x, i) * 0.37f) : dl__get_at(x, i) * 0.37;
        same &= memcmp(&a, &b, sizeof a) == 0;
      }
      CHECK_MSG(same, "dl__scale %s n %lld on 2 threads differs from x * f", dl_dtype_name(dt), (long long)n);
      dl_tensor_copy(y, x);
      dl__set_at(y, n / 2, NAN);
      dl__clamp_buf(&ctx_par, y->data, n, dt, 1.25);
      for (i = 0, same = 1; i < n; i++) {
        const double a = dl__get_at(y, i), e = dl__get_at(x, i);
        same &= i == n / 2 ? a != a : a == (e < -1.25 ? -1.25 : e > 1.25 ? 1.25 : e);
      }
      CHECK_MSG(same, "dl__clamp_buf %s n %lld on 2 threads: not x clamped to [-1.25, 1.25], NaN kept",
                dl_dtype_name(dt), (long long)n);
      dl_tensor_free(x);
      dl_tensor_free(y);
    }
}

/* The update runs in the ctx's floating-point mode, as every library loop:
 * with the default (flush-to-zero) a gradient of 1e-20, whose square is
 * below FLT_MIN, leaves v at 0 (the product is flushed), with keep_denormals v
 * keeps the denormal; both paths (contiguous, and strided views). Only where
 * dl_ftz_enter has a control register to set (x86, AArch64). */
static void test_optim_fp_mode(void) {
#if defined(__SSE__) || defined(__x86_64__) || defined(__aarch64__)
  dl_ctx keep;
  dl_ctx_desc d;
  int which, strided;
  memset(&d, 0, sizeof d);
  d.keep_denormals = 1;
  dl_ctx_init(&keep, &d);
  for (which = 0; which < 2; which++)
    for (strided = 0; strided < 2; strided++) {
      dl_ctx *cx = which ? &keep : &ctx;
      const int64_t n = 64;
      dl_tensor *t[4], *w[4], v[4];
      dl_adam_cfg cfg = dl_adam_defaults(1e-3);
      int k;
      int64_t i, nonzero = 0;
      for (k = 0; k < 4; k++) {
        t[k] = dl_tensor_make(cx, DL_F32, DL_SHAPE(n));
        w[k] = dl_tensor_make(cx, DL_F32, DL_SHAPE(2 * n));
        dl_tensor_fill(t[k], k == 1 ? 1e-20 : k == 0 ? 0.5 : 0.0);
        dl_tensor_fill(w[k], 0.0);
        v[k] = dl_view_slice(w[k], 0, 0, 2 * n, 2);
        dl_tensor_copy(&v[k], t[k]);
      }
      if (strided) dl_adam_update(&v[0], &v[1], &v[2], &v[3], NULL, 1, &cfg);
      else dl_adam_update(t[0], t[1], t[2], t[3], NULL, 1, &cfg);
      for (i = 0; i < n; i++) nonzero += (strided ? dl__get_at(w[3], 2 * i) : dl__get_at(t[3], i)) != 0;
      if (which) CHECK_MSG(nonzero == n, "keep_denormals: v should hold denormals (%lld of %lld do)", (long long)nonzero, (long long)n);
      else CHECK_MSG(nonzero == 0, "flush-to-zero: v should be 0 (%lld of %lld are not)", (long long)nonzero, (long long)n);
      for (k = 0; k < 4; k++) {
        dl_tensor_free(t[k]);
        dl_tensor_free(w[k]);
      }
    }
#endif
}

int main(void) {
  dl_ctx_desc d;
  memset(&d, 0, sizeof d);
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  memset(&d, 0, sizeof d);
  d.threads = 2;
  d.parallel_threshold = 1;
  dl_ctx_init(&ctx_par, &d);
  fx_ok = fx2_load(&fx, "tests/fixtures/optim.txt");
  RUN(test_optimizers_vs_torch);
  RUN(test_schedules_vs_torch);
  RUN(test_schedule_shapes);
  RUN(test_defaults);
  RUN(test_panics);
  RUN(test_adam_paths_agree);
  RUN(test_adam_vector_matches_scalar);
  RUN(test_sumsq_scale_threads);
  RUN(test_optim_fp_mode);
  printf("worst error vs PyTorch, norm-wise (element-wise): f64 %.3g (%.3g), f32 %.3g (%.3g); "
         "schedules %.3g\n", worst[1], worst_el[1], worst[0], worst_el[0], worst_sched);
  if (fx_ok) fx2_free(&fx);
  return harness_finish();
}
