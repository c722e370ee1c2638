/* dl-test-cxx */
/* tests/test_ops_loss.c - the losses of dl/ops/loss.h: mse, cross_entropy
 * (label smoothing), nll, bce_with_logits, huber, smooth_l1.
 *
 * - PyTorch agreement (tests/fixtures/loss.txt, tools/fixtures_loss.py):
 *   every op, reduction and option, forward value and input gradients, f64
 *   (relative error <= 1e-10) and f32 (<= 1e-5); i32 labels give the same.
 * - dl_gradcheck (f64, tape gradient and forward-mode tangent) of every op,
 *   reduction and option, with strided (transposed) inputs and targets that
 *   require a gradient.
 * - cross_entropy at logits of 1e4 is finite and exact.
 * - results do not depend on the thread count; backward accumulates.
 * - panics: shape and dtype mismatches name the op and both shapes; a label
 *   out of range names its value, position and the class count.
 * LOSS_VERBOSE=1 in the environment prints every fixture comparison.
 */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx;

enum { OP_MSE, OP_CE, OP_NLL, OP_BCE, OP_HUBER, OP_SL1 };
static const char *op_names[] = {"mse", "cross_entropy", "nll", "bce_with_logits", "huber", "smooth_l1"};

/* one loss call; p = label smoothing, delta or beta */
static dl_tensor *call_loss(dl_tape *tp, int op, dl_tensor *a, dl_tensor *b, const dl_tensor *labels,
                            double p, dl_reduction r) {
  switch (op) {
    case OP_MSE: return dl_t_mse(tp, a, b, r);
    case OP_CE: return dl_t_cross_entropy(tp, a, labels, p, r);
    case OP_NLL: return dl_t_nll(tp, a, labels, r);
    case OP_BCE: return dl_t_bce_with_logits(tp, a, b, r);
    case OP_HUBER: return dl_t_huber(tp, a, b, p, r);
    default: return dl_t_smooth_l1(tp, a, b, p, r);
  }
}

/* >>PyTorch fixtures ------------------------------------------------------- */

static double worst_err[2]; /* [f64?] over all fixture comparisons */

static int case_op(const char *name, double *p, const fx2_case *c) {
  if (!strncmp(name, "mse_", 4)) { *p = 0; return OP_MSE; }
  if (!strncmp(name, "ce_", 3)) { *p = fx2_param(c, "eps", -1); return OP_CE; }
  if (!strncmp(name, "nll_", 4)) { *p = 0; return OP_NLL; }
  if (!strncmp(name, "bce_", 4)) { *p = 0; return OP_BCE; }
  if (!strncmp(name, "huber_", 6)) { *p = fx2_param(c, "delta", -1); return OP_HUBER; }
  if (!strncmp(name, "sl1_", 4)) { *p = fx2_param(c, "beta", -1); return OP_SL1; }
  return -1;
}

/* Runs one fixture case (labels as i64, or converted to i32); returns the
 * number of failed comparisons. */
static int run_fixture_case(const fx2_case *c, int i32_labels) {
  const dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  const double tol = c->f64 ? 1e-10 : 1e-5;
  double p, e;
  const int op = case_op(c->name, &p, c);
  const dl_reduction r = (dl_reduction)(int)fx2_param(c, "reduction", -1);
  dl_tensor *x = fx2_make(c, "x", dt), *t = fx2_make(c, "t", dt), *gy = fx2_make(c, "gy", dt);
  dl_tensor *lab = NULL, *y;
  dl_tape tp;
  int bad = 0, k;
  CHECK_MSG(op >= 0 && x && gy, "fixture case %s (line %d) not understood", c->name, c->line);
  if (op < 0 || !x || !gy) return 1;
  if (op == OP_CE || op == OP_NLL) {
    const fx2_tensor *l = fx2_get(c, "labels");
    int64_t i;
    lab = dl_tensor_make(&ctx, i32_labels ? DL_I32 : DL_I64, l->ndim, l->shape);
    for (i = 0; i < l->numel; i++) dl__set_at(lab, i, l->v[i]);
  }
  dl_requires_grad(x);
  if (t) dl_requires_grad(t);
  dl_tape_init(&tp, &ctx, 0);
  y = call_loss(&tp, op, x, t, lab, p, r);
  e = fx2_err(y, fx2_get(c, "y"));
  worst_err[c->f64] = fmax(worst_err[c->f64], e);
  if (getenv("LOSS_VERBOSE")) printf("    %s %s y %.3g\n", c->name, c->f64 ? "f64" : "f32", e);
  if (!(e <= tol)) {
    bad++;
    fprintf(stderr, "  %s %s%s: y rel err %.3g (tol %g)\n", c->name, c->f64 ? "f64" : "f32",
            i32_labels ? " (i32 labels)" : "", e, tol);
  }
  /* backward twice: the second call adds the same gradient again */
  for (k = 1; k <= 2; k++) {
    const char *keys[2] = {"g_x", "g_t"};
    dl_tensor *ins[2];
    int j;
    ins[0] = x;
    ins[1] = t;
    dl_backward(&tp, y, gy);
    for (j = 0; j < 2; j++) {
      const fx2_tensor *want = fx2_get(c, keys[j]);
      fx2_tensor w2;
      int64_t i;
      if (!ins[j] || !want) continue;
      w2 = *want;
      w2.v = (double *)malloc(sizeof(double) * (size_t)(want->numel ? want->numel : 1));
      for (i = 0; i < want->numel; i++) w2.v[i] = k * want->v[i];
      e = fx2_err(ins[j]->grad, &w2);
      free(w2.v);
      worst_err[c->f64] = fmax(worst_err[c->f64], e);
      if (getenv("LOSS_VERBOSE")) printf("    %s %s %s %.3g\n", c->name, c->f64 ? "f64" : "f32", keys[j], e);
      if (!(e <= tol)) {
        bad++;
        fprintf(stderr, "  %s %s%s: %s rel err %.3g (tol %g)%s\n", c->name, c->f64 ? "f64" : "f32",
                i32_labels ? " (i32 labels)" : "", keys[j], e, tol, k == 2 ? " after a 2nd backward" : "");
      }
    }
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(t);
  dl_tensor_free(gy);
  dl_tensor_free(lab);
  return bad;
}

static void test_fixtures_match_torch(void) {
  fx2_set s;
  int i, n = 0, seen[6] = {0}, red_seen[6][3], f32 = 0;
  memset(red_seen, 0, sizeof red_seen);
  if (!fx2_load(&s, "tests/fixtures/loss.txt")) {
    CHECK_MSG(0, "%s", s.err);
    return;
  }
  for (i = 0; i < s.n; i++) {
    const fx2_case *c = &s.cases[i];
    double p;
    int op = case_op(c->name, &p, c), fails = run_fixture_case(c, 0);
    int r = (int)fx2_param(c, "reduction", -1);
    CHECK_MSG(fails == 0, "fixture %s %s: %d comparison(s) off PyTorch", c->name, c->f64 ? "f64" : "f32", fails);
    if (op == OP_CE || op == OP_NLL) {
      fails = run_fixture_case(c, 1);
      CHECK_MSG(fails == 0, "fixture %s %s with i32 labels: %d comparison(s) off", c->name,
                c->f64 ? "f64" : "f32", fails);
    }
    n++;
    if (op >= 0) seen[op]++;
    if (op >= 0 && r >= 0 && r < 3) red_seen[op][r]++;
    f32 += !c->f64;
  }
  for (i = 0; i < 6; i++) {
    int r;
    CHECK_MSG(seen[i] > 0, "no fixture case for %s", op_names[i]);
    for (r = 0; r < 3; r++) CHECK_MSG(red_seen[i][r] > 0, "no fixture case for %s reduction %d", op_names[i], r);
  }
  CHECK(f32 > 0 && f32 < n);
  CHECK(fx2_find(&s, "ce_big_ls0", 1) && fx2_find(&s, "ce_big_ls0.1", 0) && fx2_find(&s, "ce_mlp_ls0.1_mean", 0));
  printf("  %d fixture cases (%d f32); worst rel error vs PyTorch: f64 %.3g, f32 %.3g\n", n, f32,
         worst_err[1], worst_err[0]);
  fx2_free(&s);
}

/* >>gradcheck -------------------------------------------------------------- */

typedef struct gc_user {
  int op;
  dl_reduction r;
  double p;
  const dl_tensor *labels;
} gc_user;

static dl_tensor *gc_fn(dl_tape *tp, dl_tensor **in, void *user) {
  const gc_user *u = (const gc_user *)user;
  return call_loss(tp, u->op, in[0], u->op == OP_CE || u->op == OP_NLL ? NULL : in[1], u->labels, u->p, u->r);
}

static double worst_gc;

/* gradcheck of op at a [N, C] (optionally a transposed view of a [C, N]
 * tensor) and target [N, C] (requiring a gradient when target_grad). */
static void gradcheck_one(int op, dl_reduction r, double p, int view, int target_grad) {
  const int64_t N = 5, C = 4;
  dl_rng rng = dl_rng_make(1000 + (uint64_t)(op * 100 + (int)r * 10 + view * 2 + target_grad));
  dl_tensor *base = view ? dl_tensor_make(&ctx, DL_F64, DL_SHAPE(C, N)) : dl_tensor_make(&ctx, DL_F64, DL_SHAPE(N, C));
  dl_tensor *tb = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(C, N));
  dl_tensor *lab = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(N));
  dl_tensor av, tv, *a, *t;
  dl_tensor *in[2];
  dl_gradcheck_result res;
  gc_user u;
  int64_t i;
  int ok;
  dl_tensor_rand_normal(base, &rng, 0, 1.5);
  dl_tensor_rand_normal(tb, &rng, 0, 1);
  if (op == OP_BCE) dl_tensor_rand_uniform(tb, &rng, 0, 1);
  for (i = 0; i < N; i++) dl_i64(lab)[i] = (i * 3 + 1) % C;
  if (view) {
    av = dl_view_transpose(base, 0, 1);
    a = &av;
  } else {
    a = base;
  }
  tv = dl_view_transpose(tb, 0, 1); /* targets are always strided */
  t = &tv;
  if (op == OP_NLL) { /* log-probabilities */
    int64_t j;
    for (i = 0; i < N; i++) {
      double m = -HUGE_VAL, s = 0;
      int64_t idx[2];
      idx[0] = i;
      for (j = 0; j < C; j++) { idx[1] = j; m = fmax(m, dl_tensor_get(a, idx)); }
      for (j = 0; j < C; j++) { idx[1] = j; s += exp(dl_tensor_get(a, idx) - m); }
      for (j = 0; j < C; j++) { idx[1] = j; dl_tensor_set(a, idx, dl_tensor_get(a, idx) - m - log(s)); }
    }
  }
  dl_requires_grad(a);
  if (target_grad) dl_requires_grad(t);
  in[0] = a;
  in[1] = t;
  u.op = op;
  u.r = r;
  u.p = p;
  u.labels = lab;
  ok = dl_gradcheck(&ctx, gc_fn, &u, (op == OP_CE || op == OP_NLL) ? 1 : 2, in, 1e-6, 1e-7, &res);
  worst_gc = fmax(worst_gc, res.max_err);
  CHECK_MSG(ok, "gradcheck %s reduction %d p %g view %d target_grad %d: max_err %.3g (grad %.3g at input %d "
            "[%lld]: analytic %.10g numeric %.10g; jvp %.3g)", op_names[op], (int)r, p, view, target_grad,
            res.max_err, res.grad_err, res.input, (long long)res.index, res.analytic, res.numeric, res.jvp_err);
  CHECK(res.checked == N * C * (target_grad ? 2 : 1));
  if (view) dl_tensor_free(av.grad);
  if (target_grad) dl_tensor_free(tv.grad);
  dl_tensor_free(base);
  dl_tensor_free(tb);
  dl_tensor_free(lab);
}

static void test_gradcheck(void) {
  int r, view;
  for (r = 0; r < 3; r++)
    for (view = 0; view < 2; view++) {
      gradcheck_one(OP_MSE, (dl_reduction)r, 0, view, 1);
      gradcheck_one(OP_MSE, (dl_reduction)r, 0, view, 0);
      gradcheck_one(OP_CE, (dl_reduction)r, 0.0, view, 0);
      gradcheck_one(OP_CE, (dl_reduction)r, 0.1, view, 0);
      gradcheck_one(OP_CE, (dl_reduction)r, 1.0, view, 0);
      gradcheck_one(OP_NLL, (dl_reduction)r, 0, view, 0);
      gradcheck_one(OP_BCE, (dl_reduction)r, 0, view, 1);
      gradcheck_one(OP_BCE, (dl_reduction)r, 0, view, 0);
      gradcheck_one(OP_HUBER, (dl_reduction)r, 1.0, view, 1);
      gradcheck_one(OP_HUBER, (dl_reduction)r, 0.4, view, 1);
      gradcheck_one(OP_SL1, (dl_reduction)r, 1.0, view, 1);
      gradcheck_one(OP_SL1, (dl_reduction)r, 0.4, view, 1);
      gradcheck_one(OP_SL1, (dl_reduction)r, 0.0, view, 1);
    }
  printf("  gradcheck worst error %.3g\n", worst_gc);
}

/* >>cross entropy specifics ------------------------------------------------ */

/* Logits of 1e4 (f32 and f64): finite and exact. */
static void test_ce_large_logits(void) {
  static const double xs[4][3] = {{1e4, 0, -1e4}, {0, 1e4, 5e3}, {-1e4, -1e4, 1e4}, {1e4, 1e4, -1e4}};
  static const int64_t ls[4] = {0, 0, 1, 2};
  int pass;
  for (pass = 0; pass < 2; pass++) {
    const dl_dtype dt = pass ? DL_F64 : DL_F32;
    dl_tensor *x = dl_tensor_make(&ctx, dt, DL_SHAPE(4, 3)), *lab = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(4));
    dl_tensor *y, *ym, *ys;
    dl_tape tp;
    int64_t i, j;
    for (i = 0; i < 4; i++) {
      for (j = 0; j < 3; j++) dl__set_at(x, i * 3 + j, xs[i][j]);
      dl_i64(lab)[i] = ls[i];
    }
    dl_requires_grad(x);
    dl_tape_init(&tp, &ctx, 0);
    y = dl_t_cross_entropy(&tp, x, lab, 0.0, DL_REDUCE_NONE);
    CHECK(dl__get_at(y, 0) == 0);
    CHECK(dl__get_at(y, 1) == 1e4);
    CHECK(dl__get_at(y, 2) == 2e4);
    CHECK_REL(dl__get_at(y, 3), 2e4 + log(2.0), pass ? 1e-15 : 1e-7, 1);
    ys = dl_t_cross_entropy(&tp, x, lab, 0.0, DL_REDUCE_SUM);
    CHECK_REL(dl__get_at(ys, 0), 5e4 + log(2.0), pass ? 1e-15 : 1e-7, 1);
    ym = dl_t_cross_entropy(&tp, x, lab, 0.1, DL_REDUCE_MEAN);
    CHECK(isfinite(dl__get_at(ym, 0)));
    /* smoothed: row 0 is 0.1/3 * (0 + 1e4 + 2e4) */
    {
      dl_tensor *yn = dl_t_cross_entropy(&tp, x, lab, 0.1, DL_REDUCE_NONE);
      CHECK_REL(dl__get_at(yn, 0), 0.1 / 3 * 3e4, pass ? 1e-14 : 1e-6, 1);
    }
    dl_backward(&tp, ym, NULL);
    for (i = 0; i < 12; i++) CHECK(isfinite(dl__get_at(x->grad, i)));
    /* row 0: p = (1, 0, 0), s = (0.9 + 0.1/3, 0.1/3, 0.1/3); grad / 4 */
    CHECK_NEAR(dl__get_at(x->grad, 0), (1 - 0.9 - 0.1 / 3) / 4, pass ? 1e-16 : 1e-8);
    CHECK_NEAR(dl__get_at(x->grad, 1), (-0.1 / 3) / 4, pass ? 1e-16 : 1e-8);
    dl_tape_free(&tp);
    dl_tensor_free(x);
    dl_tensor_free(lab);
  }
}

/* f32 and f64 against a double reference computed here (log-sum-exp),
 * including a large batch run in parallel; the thread count does not change
 * a bit of the result. */
static void test_threads_and_reference(void) {
  dl_ctx c1, c2;
  dl_ctx_desc d = {0};
  int pass, op;
  d.panic = harness_panic;
  d.parallel_threshold = 64;
  d.threads = 1;
  dl_ctx_init(&c1, &d);
  d.threads = 2;
  dl_ctx_init(&c2, &d);
  for (pass = 0; pass < 2; pass++) {
    const dl_dtype dt = pass ? DL_F64 : DL_F32;
    const int64_t N = 300, C = 37;
    dl_rng rng = dl_rng_make(77);
    dl_tensor *x = dl_tensor_make(&ctx, dt, DL_SHAPE(N, C)), *t = dl_tensor_make(&ctx, dt, DL_SHAPE(N, C));
    dl_tensor *lab = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(N));
    int64_t i, j;
    dl_tensor_rand_normal(x, &rng, 0, 3);
    dl_tensor_rand_uniform(t, &rng, 0, 1);
    for (i = 0; i < N; i++) dl_i32(lab)[i] = (int32_t)((i * 7) % C);
    dl_requires_grad(x);
    dl_requires_grad(t);
    for (op = 0; op < 6; op++) {
      double v[2], ref = 0;
      dl_tensor *g[2][2];
      int th;
      for (th = 0; th < 2; th++) {
        dl_tape tp;
        dl_tensor *y;
        dl_tape_init(&tp, th ? &c2 : &c1, 0);
        dl_zero_grad(x);
        dl_zero_grad(t);
        y = call_loss(&tp, op, x, op == OP_CE || op == OP_NLL ? NULL : t, lab, op == OP_CE ? 0.1 : 0.7,
                      DL_REDUCE_MEAN);
        v[th] = dl__get_at(y, 0);
        dl_backward(&tp, y, NULL);
        g[th][0] = dl_tensor_make(&ctx, dt, 2, x->shape);
        g[th][1] = dl_tensor_make(&ctx, dt, 2, t->shape);
        dl_tensor_copy(g[th][0], x->grad);
        dl_tensor_copy(g[th][1], t->grad);
        dl_tape_free(&tp);
      }
      CHECK_MSG(v[0] == v[1], "%s %s: 1 thread %.17g, 2 threads %.17g", op_names[op], pass ? "f64" : "f32",
                v[0], v[1]);
      CHECK_MSG(!memcmp(g[0][0]->data, g[1][0]->data, (size_t)(N * C) * dl_dtype_size(dt)) &&
                    !memcmp(g[0][1]->data, g[1][1]->data, (size_t)(N * C) * dl_dtype_size(dt)),
                "%s %s: gradients differ with the thread count", op_names[op], pass ? "f64" : "f32");
      /* reference in double */
      for (i = 0; i < N; i++) {
        double m = -HUGE_VAL, s = 0, sz = 0, rowl = 0;
        const int64_t l = dl_i32(lab)[i];
        for (j = 0; j < C; j++) m = fmax(m, dl__get_at(x, i * C + j));
        for (j = 0; j < C; j++) { s += exp(dl__get_at(x, i * C + j) - m); sz += dl__get_at(x, i * C + j) - m; }
        switch (op) {
          case OP_CE: rowl = log(s) - 0.9 * (dl__get_at(x, i * C + l) - m) - 0.1 / (double)C * sz; break;
          case OP_NLL: rowl = -dl__get_at(x, i * C + l); break;
          default:
            for (j = 0; j < C; j++) {
              double a = dl__get_at(x, i * C + j), b = dl__get_at(t, i * C + j), dd = a - b, z = fabs(dd);
              switch (op) {
                case OP_MSE: rowl += dd * dd; break;
                case OP_BCE: rowl += fmax(a, 0) - a * b + log1p(exp(-fabs(a))); break;
                case OP_HUBER: rowl += z < 0.7 ? 0.5 * dd * dd : 0.7 * (z - 0.35); break;
                default: rowl += z < 0.7 ? 0.5 * dd * dd / 0.7 : z - 0.35; break;
              }
            }
        }
        ref += rowl;
      }
      ref /= (op == OP_CE || op == OP_NLL) ? (double)N : (double)(N * C);
      CHECK_REL(v[0], ref, pass ? 1e-13 : 2e-6, 1e-3);
      for (th = 0; th < 2; th++) { dl_tensor_free(g[th][0]); dl_tensor_free(g[th][1]); }
    }
    dl_tensor_free(x);
    dl_tensor_free(t);
    dl_tensor_free(lab);
  }
}

/* Under no-grad nothing is recorded (and the value is the same); with a
 * tangent only, the tangent is still computed. */
static void test_no_grad_and_tangent_only(void) {
  dl_rng rng = dl_rng_make(5);
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(6, 4)), *lab = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(6));
  dl_tensor *v = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(6, 4));
  dl_tensor *y0, *y1;
  dl_tape tp;
  int64_t i;
  double num;
  dl_tensor_rand_normal(x, &rng, 0, 1);
  dl_tensor_rand_normal(v, &rng, 0, 1);
  for (i = 0; i < 6; i++) dl_i64(lab)[i] = i % 4;
  dl_requires_grad(x);
  dl_tape_init(&tp, &ctx, 0);
  y0 = dl_t_cross_entropy(&tp, x, lab, 0.2, DL_REDUCE_MEAN);
  dl_no_grad_begin(&tp);
  y1 = dl_t_cross_entropy(&tp, x, lab, 0.2, DL_REDUCE_MEAN);
  CHECK(y1->node == NULL && !(y1->flags & DL_TENSOR_REQUIRES_GRAD));
  CHECK(dl__get_at(y0, 0) == dl__get_at(y1, 0));
  dl_set_tangent(x, v);
  y1 = dl_t_cross_entropy(&tp, x, lab, 0.2, DL_REDUCE_MEAN);
  CHECK(y1->tangent != NULL);
  dl_set_tangent(x, NULL);
  /* directional difference */
  {
    double lp, lm, h = 1e-6;
    DL_ASSIGN(x, dl_add(x, dl_mul(h, v)));
    lp = dl__get_at(dl_t_cross_entropy(&tp, x, lab, 0.2, DL_REDUCE_MEAN), 0);
    DL_ASSIGN(x, dl_sub(x, dl_mul(2 * h, v)));
    lm = dl__get_at(dl_t_cross_entropy(&tp, x, lab, 0.2, DL_REDUCE_MEAN), 0);
    DL_ASSIGN(x, dl_add(x, dl_mul(h, v)));
    num = (lp - lm) / (2 * h);
  }
  if (y1->tangent) CHECK_NEAR(dl__get_at(y1->tangent, 0), num, 1e-8);
  dl_no_grad_end(&tp);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(v);
  dl_tensor_free(lab);
}

/* Evaluation (no softmax kept) and training (softmax kept for backward) give
 * the same cross-entropy, bit for bit, in f32 and f64, for few and many
 * classes. */
static void test_ce_eval_equals_train(void) {
  static const int64_t shapes[3][2] = {{64, 10}, {9, 100}, {3, 3000}};
  int pass, k, sm;
  for (pass = 0; pass < 2; pass++)
    for (k = 0; k < 3; k++)
      for (sm = 0; sm < 2; sm++) {
        const dl_dtype dt = pass ? DL_F64 : DL_F32;
        const int64_t N = shapes[k][0], C = shapes[k][1];
        dl_rng rng = dl_rng_make(9 + (uint64_t)k);
        dl_tensor *x = dl_tensor_make(&ctx, dt, DL_SHAPE(N, C)), *lab = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(N));
        dl_tensor *ya, *yb;
        dl_tape tp;
        int64_t i, same = 1;
        dl_tensor_rand_normal(x, &rng, 0, 4);
        for (i = 0; i < N; i++) dl_i64(lab)[i] = (i * 5) % C;
        dl_requires_grad(x);
        dl_tape_init(&tp, &ctx, 0);
        ya = dl_t_cross_entropy(&tp, x, lab, sm ? 0.1 : 0.0, DL_REDUCE_NONE);
        dl_no_grad_begin(&tp);
        yb = dl_t_cross_entropy(&tp, x, lab, sm ? 0.1 : 0.0, DL_REDUCE_NONE);
        dl_no_grad_end(&tp);
        CHECK(ya->node != NULL && yb->node == NULL);
        for (i = 0; i < N; i++) same &= dl__get_at(ya, i) == dl__get_at(yb, i);
        CHECK_MSG(same, "%s [%lld, %lld] smoothing %d: training and evaluation losses differ", pass ? "f64" : "f32",
                  (long long)N, (long long)C, sm);
        dl_tape_free(&tp);
        dl_tensor_free(x);
        dl_tensor_free(lab);
      }
}

/* Labels may be a strided view (and i32); a NaN or an infinite logit gives a
 * NaN loss for its row only. */
static void test_strided_labels_and_nan(void) {
  dl_rng rng = dl_rng_make(11);
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(5, 6)), *big = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(10));
  dl_tensor *lab = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(5)), lv, *ya, *yb, *yc;
  dl_tape tp;
  int64_t i;
  dl_tensor_rand_normal(x, &rng, 0, 2);
  for (i = 0; i < 10; i++) dl_i32(big)[i] = (int32_t)(i % 2 ? 99 : (i / 2 + 1) % 6);
  lv = dl_view_slice(big, 0, 0, 10, 2); /* 1, 2, 3, 4, 5 with stride 2 */
  for (i = 0; i < 5; i++) dl_i64(lab)[i] = (i + 1) % 6;
  dl_tape_init(&tp, &ctx, 0);
  ya = dl_t_cross_entropy(&tp, x, &lv, 0.05, DL_REDUCE_NONE);
  yb = dl_t_cross_entropy(&tp, x, lab, 0.05, DL_REDUCE_NONE);
  for (i = 0; i < 5; i++) CHECK(dl_f32(ya)[i] == dl_f32(yb)[i]);
  yc = dl_t_nll(&tp, x, &lv, DL_REDUCE_SUM);
  { /* rows i, labels i + 1: summed in double, rounded once */
    double want = 0;
    for (i = 0; i < 5; i++) want -= (double)dl_f32(x)[i * 6 + i + 1];
    CHECK(dl_f32(yc)[0] == (float)want);
  }
  dl_f32(x)[2 * 6 + 3] = NAN;
  dl_f32(x)[4 * 6 + 0] = INFINITY;
  ya = dl_t_cross_entropy(&tp, x, lab, 0.0, DL_REDUCE_NONE);
  CHECK(isfinite(dl_f32(ya)[0]) && isfinite(dl_f32(ya)[1]) && isfinite(dl_f32(ya)[3]));
  CHECK(isnan(dl_f32(ya)[2]) && isnan(dl_f32(ya)[4]));
  CHECK(isnan(dl_f32(dl_t_cross_entropy(&tp, x, lab, 0.0, DL_REDUCE_MEAN))[0]));
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(big);
  dl_tensor_free(lab);
}

/* >>panics ----------------------------------------------------------------- */

static void test_panics(void) {
  dl_tensor *a = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 4)), *b = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 3));
  dl_tensor *a32 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3, 4));
  dl_tensor *l3 = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(3)), *l5 = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(5));
  dl_tensor *l3i = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(3)), *lf = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3));
  dl_tensor *x3 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 3, 4));
  dl_tape tp;
  dl_tensor_fill(a, 0);
  dl_tensor_fill(b, 0);
  dl_tensor_fill(a32, 0);
  dl_tensor_fill(l3, 1);
  dl_tensor_fill(l5, 1);
  dl_tensor_fill(l3i, 1);
  dl_tensor_fill(lf, 1);
  dl_tape_init(&tp, &ctx, 0);
  /* shape mismatches name the op and both shapes */
  EXPECT_PANIC(dl_t_mse(&tp, a, b, DL_REDUCE_MEAN), "dl_t_mse", "f64[3, 4]", "f64[4, 3]");
  EXPECT_PANIC(dl_t_bce_with_logits(&tp, a, b, DL_REDUCE_SUM), "dl_t_bce_with_logits", "f64[3, 4]", "f64[4, 3]");
  EXPECT_PANIC(dl_t_huber(&tp, a, b, 1.0, DL_REDUCE_NONE), "dl_t_huber", "f64[3, 4]", "f64[4, 3]");
  EXPECT_PANIC(dl_t_smooth_l1(&tp, a, b, 1.0, DL_REDUCE_MEAN), "dl_t_smooth_l1", "f64[3, 4]", "f64[4, 3]");
  EXPECT_PANIC(dl_t_cross_entropy(&tp, a, l5, 0.0, DL_REDUCE_MEAN), "dl_t_cross_entropy", "f64[3, 4]", "i64[5]");
  EXPECT_PANIC(dl_t_nll(&tp, a, l5, DL_REDUCE_MEAN), "dl_t_nll", "f64[3, 4]", "i64[5]");
  EXPECT_PANIC(dl_t_cross_entropy(&tp, x3, l3, 0.0, DL_REDUCE_MEAN), "dl_t_cross_entropy", "f64[2, 3, 4]", "i64[3]");
  /* dtypes */
  EXPECT_PANIC(dl_t_mse(&tp, a, a32, DL_REDUCE_MEAN), "dl_t_mse", "f64[3, 4]", "f32[3, 4]");
  EXPECT_PANIC(dl_t_huber(&tp, a32, a, 1.0, DL_REDUCE_MEAN), "dl_t_huber", "f32[3, 4]", "f64[3, 4]");
  EXPECT_PANIC(dl_t_cross_entropy(&tp, a, lf, 0.0, DL_REDUCE_MEAN), "dl_t_cross_entropy", "i64 or i32",
               "f64[3, 4]", "f64[3]");
  EXPECT_PANIC(dl_t_nll(&tp, l3, l3, DL_REDUCE_MEAN), "dl_t_nll", "f32 or f64", "i64[3]");
  /* labels out of range: value, position, class count */
  dl_i64(l3)[2] = 4;
  EXPECT_PANIC(dl_t_cross_entropy(&tp, a, l3, 0.0, DL_REDUCE_MEAN), "dl_t_cross_entropy", "label 4",
               "position 2", "4 classes");
  dl_i64(l3)[2] = 1;
  dl_i64(l3)[1] = -1;
  EXPECT_PANIC(dl_t_nll(&tp, a, l3, DL_REDUCE_SUM), "dl_t_nll", "label -1", "position 1", "4 classes");
  dl_i32(l3i)[0] = 100;
  EXPECT_PANIC(dl_t_cross_entropy(&tp, a, l3i, 0.1, DL_REDUCE_NONE), "dl_t_cross_entropy", "label 100",
               "position 0", "4 classes");
  /* bad options */
  EXPECT_PANIC(dl_t_cross_entropy(&tp, a, l5, 0.0, DL_REDUCE_MEAN), "dl_t_cross_entropy");
  dl_i64(l3)[1] = 0;
  EXPECT_PANIC(dl_t_cross_entropy(&tp, a, l3, 1.5, DL_REDUCE_MEAN), "dl_t_cross_entropy", "label_smoothing", "1.5");
  EXPECT_PANIC(dl_t_cross_entropy(&tp, a, l3, 0.0, (dl_reduction)7), "dl_t_cross_entropy", "reduction 7");
  EXPECT_PANIC(dl_t_huber(&tp, a, a, 0.0, DL_REDUCE_MEAN), "dl_t_huber", "delta");
  EXPECT_PANIC(dl_t_smooth_l1(&tp, a, a, -1.0, DL_REDUCE_MEAN), "dl_t_smooth_l1", "beta");
  EXPECT_PANIC(dl_t_mse(&tp, a, a, (dl_reduction)-1), "dl_t_mse", "reduction -1");
  dl_tape_free(&tp);
  dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(a32); dl_tensor_free(l3); dl_tensor_free(l5);
  dl_tensor_free(l3i); dl_tensor_free(lf); dl_tensor_free(x3);
}

/* Reductions of an empty batch follow torch: MEAN is NaN, SUM is 0. */
static void test_empty(void) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(0, 3)), *lab = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(0));
  dl_tape tp;
  dl_tape_init(&tp, &ctx, 0);
  CHECK(isnan(dl__get_at(dl_t_cross_entropy(&tp, x, lab, 0.0, DL_REDUCE_MEAN), 0)));
  CHECK(dl__get_at(dl_t_cross_entropy(&tp, x, lab, 0.0, DL_REDUCE_SUM), 0) == 0);
  CHECK(dl_t_cross_entropy(&tp, x, lab, 0.0, DL_REDUCE_NONE)->numel == 0);
  CHECK(isnan(dl__get_at(dl_t_mse(&tp, x, x, DL_REDUCE_MEAN), 0)));
  CHECK(dl__get_at(dl_t_nll(&tp, x, lab, DL_REDUCE_SUM), 0) == 0);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(lab);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  RUN(test_fixtures_match_torch);
  RUN(test_gradcheck);
  RUN(test_ce_large_logits);
  RUN(test_threads_and_reference);
  RUN(test_no_grad_and_tangent_only);
  RUN(test_ce_eval_equals_train);
  RUN(test_strided_labels_and_nan);
  RUN(test_panics);
  RUN(test_empty);
  return harness_finish();
}
