/* dl-test-cxx */
/* tests/test_ops_reduce.c - reductions and softmax (dl/ops/reduce.h):
 * - PyTorch agreement (tests/fixtures/reduce.txt, tools/fixtures_reduce.py):
 *   forward and input gradient of every op and option, f64 (rel 1e-10) and
 *   f32 (rel 1e-5), from contiguous inputs and from transposed views;
 * - dl_gradcheck (f64: tape gradient and forward-mode tangent) of every op
 *   and option, contiguous and strided inputs;
 * - the tiling paths (long runs, column blocks, chunks) against a naive
 *   double reference, bit-identical results for 1 and 2 threads;
 * - stability (logits +-1e4, logsumexp of +-1000, infinities), f32 sums of
 *   a million elements, empty tensors, 0-d results, keepdim shapes;
 * - panics naming the op, the shape and the axes.
 * REDUCE_VERBOSE=1 prints every fixture case's errors, and for f32 how far
 * ours and torch's results are from the exact result of the same inputs. */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx, ctx1, ctx2;

enum { OP_SUM = 1, OP_MEAN, OP_MAX, OP_MIN, OP_VAR, OP_LSE, OP_SOFTMAX, OP_LOG_SOFTMAX,
       OP_SUM_ALL, OP_MEAN_ALL };
static const char *op_names[] = {"?", "sum", "mean", "max", "min", "var", "logsumexp",
                                 "softmax", "log_softmax", "sum_all", "mean_all"};

typedef struct opspec {
  int op, naxes, axes[8], keepdim, axis;
  double correction;
} opspec;

static dl_tensor *apply(dl_tape *tp, const opspec *s, dl_tensor *x) {
  switch (s->op) {
    case OP_SUM: return dl_t_sum(tp, x, s->naxes, s->axes, s->keepdim);
    case OP_MEAN: return dl_t_mean(tp, x, s->naxes, s->axes, s->keepdim);
    case OP_MAX: return dl_t_max(tp, x, s->naxes, s->axes, s->keepdim);
    case OP_MIN: return dl_t_min(tp, x, s->naxes, s->axes, s->keepdim);
    case OP_VAR: return dl_t_var(tp, x, s->naxes, s->axes, s->correction, s->keepdim);
    case OP_LSE: return dl_t_logsumexp(tp, x, s->naxes, s->axes, s->keepdim);
    case OP_SOFTMAX: return dl_t_softmax(tp, x, s->axis);
    case OP_LOG_SOFTMAX: return dl_t_log_softmax(tp, x, s->axis);
    case OP_SUM_ALL: return dl_t_sum_all(tp, x);
    default: return dl_t_mean_all(tp, x);
  }
}

static opspec spec_of(const fx2_case *c) {
  opspec s;
  int k;
  memset(&s, 0, sizeof s);
  s.op = (int)fx2_param(c, "op", 0);
  s.naxes = (int)fx2_param(c, "naxes", 0);
  if (s.naxes < 0 || s.naxes > 8) s.naxes = 0;
  for (k = 0; k < s.naxes; k++) {
    char key[16];
    snprintf(key, sizeof key, "a%d", k);
    s.axes[k] = (int)fx2_param(c, key, 0);
  }
  s.keepdim = (int)fx2_param(c, "keepdim", 0);
  s.correction = fx2_param(c, "correction", 1);
  s.axis = (int)fx2_param(c, "axis", -1);
  return s;
}

/* A tensor with t's values whose storage is transposed in its last two
 * dimensions (a strided view of *store, which the caller frees). */
static dl_tensor strided_copy(const dl_tensor *t, dl_tensor **store) {
  int64_t sh[DL_MAX_DIMS];
  int d, nd = t->ndim;
  dl_tensor v;
  for (d = 0; d < nd; d++) sh[d] = t->shape[d];
  sh[nd - 2] = t->shape[nd - 1];
  sh[nd - 1] = t->shape[nd - 2];
  *store = dl_tensor_make(&ctx, t->dtype, nd, sh);
  v = dl_view_transpose(*store, nd - 2, nd - 1);
  dl_tensor_copy(&v, t);
  return v;
}

/* >>PyTorch ---------------------------------------------------------------- */

static fx2_set fx;
static int fx_ok;
static double worst_y[2], worst_g[2];   /* [f32, f64] */
static double exact_worst[4];           /* f32 vs exact: ours y, g; torch's y, g */

/* fx2_err's measure between two tensors (want's largest |value| sets the floor). */
static double tensor_err(const dl_tensor *got, const dl_tensor *want) {
  double worst = 0, scale = 0;
  int64_t i;
  for (i = 0; i < want->numel; i++) scale = fmax(scale, fabs(dl__get_at(want, i)));
  for (i = 0; i < want->numel; i++) {
    double g = dl__get_at(got, dl__offset_of_linear(got, i)), w = dl__get_at(want, i);
    double e = fabs(g - w) / fmax(fmax(fabs(w), 1e-3 * scale), 1e-30);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}
static double fx2_tensor_err(const fx2_tensor *got, const dl_tensor *want) {
  dl_tensor t;
  dl_tensor_wrap(&t, NULL, DL_F64, got->ndim, got->shape, got->v);
  return tensor_err(&t, want);
}

static int run_case(const fx2_case *c, int view) {
  const double tol = c->f64 ? 1e-10 : 1e-5;
  const dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  opspec s = spec_of(c);
  dl_tensor *x0 = fx2_make(c, "x", dt), *gy, *store = NULL, xv, *x = x0, *y;
  dl_tape tp;
  double ey, eg;
  int bad = 0;
  if (view) {
    if (x0->ndim < 2) { dl_tensor_free(x0); return 0; }
    xv = strided_copy(x0, &store);
    if (x0->shape[x0->ndim - 1] > 1 && x0->shape[x0->ndim - 2] > 1)
      CHECK(!dl_tensor_is_contiguous(&xv));
    x = &xv;
  }
  x->ctx = &ctx;
  dl_requires_grad(x);
  dl_tape_init(&tp, &ctx, 0);
  y = apply(&tp, &s, x);
  gy = fx2_make(c, "gy", dt);
  dl_backward(&tp, y, gy);
  ey = fx2_err(y, fx2_get(c, "y"));
  eg = fx2_err(x->grad, fx2_get(c, "g_x"));
  if (!c->f64) {
    /* The exact result for the same f32 inputs: our f64 op (itself checked
     * against torch's f64 to 1e-10) on the f32 values. Both f32 results are
     * measured against it, which says who is closer when the two differ. */
    dl_tensor *x64 = dl_tensor_make(&ctx, DL_F64, x0->ndim, x0->shape);
    dl_tensor *gy64 = dl_tensor_make(&ctx, DL_F64, gy->ndim, gy->shape), *y64;
    dl_tensor_convert(x64, x0);
    dl_tensor_convert(gy64, gy);
    dl_requires_grad(x64);
    y64 = apply(&tp, &s, x64);
    dl_backward(&tp, y64, gy64);
    if (!view && getenv("REDUCE_VERBOSE"))
      printf("    %-26s f32 vs exact: ours y %.2g g %.2g, torch's y %.2g g %.2g\n", c->name,
             tensor_err(y, y64), tensor_err(x->grad, x64->grad),
             fx2_tensor_err(fx2_get(c, "y"), y64),
             fx2_tensor_err(fx2_get(c, "g_x"), x64->grad));
    if (!view) {
      exact_worst[0] = fmax(exact_worst[0], tensor_err(y, y64));
      exact_worst[1] = fmax(exact_worst[1], tensor_err(x->grad, x64->grad));
      exact_worst[2] = fmax(exact_worst[2], fx2_tensor_err(fx2_get(c, "y"), y64));
      exact_worst[3] = fmax(exact_worst[3], fx2_tensor_err(fx2_get(c, "g_x"), x64->grad));
    }
    if (!strcmp(c->name, "var_offset_axis0"))
      /* values near 1e4: torch's f32 backward forms x - mean with the mean
       * rounded to f32 (4e-4 off); ours keeps the mean in double. Checked
       * against the exact gradient instead. */
      eg = tensor_err(x->grad, x64->grad);
    dl_tensor_free(x64);
    dl_tensor_free(gy64);
  }
  if (ey > worst_y[c->f64]) worst_y[c->f64] = ey;
  if (eg > worst_g[c->f64]) worst_g[c->f64] = eg;
  CHECK_MSG(ey <= tol, "%s (%s%s, op %s): forward error %.3g > %g", c->name, c->f64 ? "f64" : "f32",
            view ? ", strided" : "", op_names[s.op], ey, tol);
  CHECK_MSG(eg <= tol, "%s (%s%s, op %s): gradient error %.3g > %g", c->name,
            c->f64 ? "f64" : "f32",
            view ? ", strided" : "", op_names[s.op], eg, tol);
  if (getenv("REDUCE_VERBOSE"))
    printf("    %-26s %s%s y %.2g g %.2g\n", c->name, c->f64 ? "f64" : "f32",
           view ? " strided" : "", ey, eg);
  bad = !(ey <= tol && eg <= tol);
  dl_tape_free(&tp);
  if (view) dl_tensor_free(x->grad);
  dl_tensor_free(x0);
  dl_tensor_free(gy);
  dl_tensor_free(store);
  return bad;
}

static void test_fixtures_cover_every_op(void) {
  int op, j, n[11][2];
  if (!fx_ok) SKIP("no fixtures: %s", fx.err);
  memset(n, 0, sizeof n);
  for (j = 0; j < fx.n; j++) {
    op = (int)fx2_param(&fx.cases[j], "op", 0);
    CHECK(op >= 1 && op <= 10);
    if (op >= 1 && op <= 10) n[op][fx.cases[j].f64]++;
  }
  CHECK(fx2_find(&fx, "max_ties_axis1", 0) && fx2_find(&fx, "var_corr2_axes01", 1) &&
        fx2_find(&fx, "log_softmax_large", 0) && fx2_find(&fx, "logsumexp_large", 1));
  for (op = 1; op <= 10; op++)
    CHECK_MSG(n[op][0] > 0 && n[op][1] > 0, "op %s has %d f32 and %d f64 cases (regenerate: "
              "/usr/bin/python3 tools/fixtures_reduce.py)", op_names[op], n[op][0], n[op][1]);
}

static void test_match_torch(void) {
  int j, view, nbad = 0, nrun = 0;
  if (!fx_ok) SKIP("no fixtures: %s", fx.err);
  for (view = 0; view < 2; view++)
    for (j = 0; j < fx.n; j++) {
      nbad += run_case(&fx.cases[j], view);
      nrun++;
    }
  printf("  %d of %d runs match PyTorch (%d cases, contiguous and strided); worst relative error "
         "f32: y %.2g, grad %.2g; f64: y %.2g, grad %.2g\n",
         nrun - nbad, nrun, fx.n, worst_y[0], worst_g[0], worst_y[1], worst_g[1]);
  printf("  f32 against the exact result of the same inputs: ours y %.2g, grad %.2g; "
         "torch's y %.2g, grad %.2g\n",
         exact_worst[0], exact_worst[1], exact_worst[2], exact_worst[3]);
}

/* >>gradcheck -------------------------------------------------------------- */

typedef struct gc_user {
  opspec s;
  int view;                 /* the input is a transposed view */
} gc_user;

static dl_tensor *gc_fn(dl_tape *tp, dl_tensor **in, void *user) {
  gc_user *u = (gc_user *)user;
  return apply(tp, &u->s, in[0]);
}

static double worst_gc;

static void gradcheck_one(int op, int nd, const int64_t *shape, int naxes, const int *axes,
                          int keepdim, double corr, int axis, int view) {
  dl_rng r = dl_rng_make(77 + (uint64_t)op * 13 + (uint64_t)naxes * 5 + (uint64_t)view);
  gc_user u;
  dl_tensor *x0 = dl_tensor_make(&ctx, DL_F64, nd, shape), *store = NULL, xv, *x = x0;
  dl_gradcheck_result res;
  int ok, k;
  memset(&u, 0, sizeof u);
  u.s.op = op;
  u.s.naxes = naxes;
  for (k = 0; k < naxes; k++) u.s.axes[k] = axes[k];
  u.s.keepdim = keepdim;
  u.s.correction = corr;
  u.s.axis = axis;
  u.view = view;
  dl_tensor_rand_normal(x0, &r, 0, 1);
  if (view) {
    xv = strided_copy(x0, &store);
    x = &xv;
  }
  dl_requires_grad(x);
  ok = dl_gradcheck(&ctx, gc_fn, &u, 1, &x, 1e-6, 1e-7, &res);
  if (res.max_err > worst_gc) worst_gc = res.max_err;
  CHECK_MSG(ok, "gradcheck %s ndim %d naxes %d keepdim %d corr %g axis %d view %d: max_err %.3g "
            "(grad %.3g at %lld: %.10g vs %.10g; jvp %.3g)", op_names[op], nd, naxes, keepdim, corr,
            axis, view, res.max_err, res.grad_err, (long long)res.index, res.analytic, res.numeric,
            res.jvp_err);
  if (view) dl_tensor_free(x->grad);
  dl_tensor_free(x0);
  dl_tensor_free(store);
}

static void test_gradcheck_reductions(void) {
  static const int a0[] = {0}, a1[] = {1}, am1[] = {-1}, a02[] = {0, 2}, am1_1[] = {-1, 1};
  int op, view, keep;
  for (op = OP_SUM; op <= OP_LSE; op++)
    for (view = 0; view < 2; view++)
      for (keep = 0; keep < 2; keep++) {
        double corr = op == OP_VAR ? 1.0 : 0.0;
        gradcheck_one(op, DL_SHAPE(4, 5), 1, a0, keep, corr, 0, view);
        gradcheck_one(op, DL_SHAPE(4, 5), 1, am1, keep, corr, 0, view);
        gradcheck_one(op, DL_SHAPE(3, 4, 5), 1, a1, keep, corr, 0, view);
        gradcheck_one(op, DL_SHAPE(3, 4, 5), 2, a02, keep, corr, 0, view);
        gradcheck_one(op, DL_SHAPE(2, 3, 4, 2), 2, am1_1, keep, corr, 0, view);
        gradcheck_one(op, DL_SHAPE(3, 4), 0, NULL, keep, corr, 0, view);
      }
  gradcheck_one(OP_VAR, DL_SHAPE(4, 6), 1, a1, 0, 0.0, 0, 0);   /* population */
  gradcheck_one(OP_VAR, DL_SHAPE(4, 6), 1, a0, 1, 2.0, 0, 1);   /* correction 2 */
  gradcheck_one(OP_SUM_ALL, DL_SHAPE(3, 4), 0, NULL, 0, 0, 0, 0);
  gradcheck_one(OP_SUM_ALL, DL_SHAPE(3, 4), 0, NULL, 0, 0, 0, 1);
  gradcheck_one(OP_MEAN_ALL, DL_SHAPE(3, 4), 0, NULL, 0, 0, 0, 0);
  gradcheck_one(OP_MEAN_ALL, DL_SHAPE(3, 4), 0, NULL, 0, 0, 0, 1);
  gradcheck_one(OP_SUM, DL_SHAPE(7), 1, a0, 0, 0, 0, 0);
  gradcheck_one(OP_MAX, DL_SHAPE(7), 0, NULL, 1, 0, 0, 0);
  printf("  worst gradcheck error so far %.2g\n", worst_gc);
}

static void test_gradcheck_softmax(void) {
  int op, view;
  for (op = OP_SOFTMAX; op <= OP_LOG_SOFTMAX; op++)
    for (view = 0; view < 2; view++) {
      gradcheck_one(op, DL_SHAPE(4, 7), 0, NULL, 0, 0, -1, view);
      gradcheck_one(op, DL_SHAPE(4, 7), 0, NULL, 0, 0, 0, view);
      gradcheck_one(op, DL_SHAPE(2, 5, 3), 0, NULL, 0, 0, 1, view);
      gradcheck_one(op, DL_SHAPE(2, 5, 3), 0, NULL, 0, 0, -1, view);
      gradcheck_one(op, DL_SHAPE(3, 2, 4), 0, NULL, 0, 0, 0, view);
    }
  gradcheck_one(OP_SOFTMAX, DL_SHAPE(9), 0, NULL, 0, 0, 0, 0);
  gradcheck_one(OP_LOG_SOFTMAX, DL_SHAPE(9), 0, NULL, 0, 0, -1, 0);
  printf("  worst gradcheck error %.2g\n", worst_gc);
}

/* >>against a naive reference ---------------------------------------------- */

/* The reduction of x (f32 or f64, contiguous) over mask at output o,
 * computed the obvious way in long double. */
static void naive_reduce(const dl_tensor *x, unsigned mask, int op, double corr, double *out,
                         int64_t M) {
  int64_t i, o, idx[DL_MAX_DIMS], oidx, stride;
  long double *acc = (long double *)calloc((size_t)M, sizeof *acc), *acc2 = (long double *)calloc((size_t)M, sizeof *acc2);
  long double *mx = (long double *)malloc(sizeof *mx * (size_t)M);
  int64_t *cnt = (int64_t *)calloc((size_t)M, sizeof *cnt);
  int d, pass;
  for (o = 0; o < M; o++) mx[o] = -INFINITY;
  for (pass = 0; pass < 2; pass++)
    for (i = 0; i < x->numel; i++) {
      long double v = dl__get_at(x, i);
      int64_t rem = i;
      for (d = x->ndim - 1; d >= 0; d--) { idx[d] = rem % x->shape[d]; rem /= x->shape[d]; }
      oidx = 0;
      stride = 1;
      for (d = x->ndim - 1; d >= 0; d--)
        if (!((mask >> d) & 1u)) { oidx += idx[d] * stride; stride *= x->shape[d]; }
      if (pass == 0) {
        acc[oidx] += v;
        cnt[oidx]++;
        if (op == OP_MIN ? -v > mx[oidx] : v > mx[oidx]) mx[oidx] = op == OP_MIN ? -v : v;
      } else if (op == OP_VAR) {
        long double dv = v - acc[oidx] / cnt[oidx];
        acc2[oidx] += dv * dv;
      } else if (op == OP_LSE) {
        acc2[oidx] += expl(v - mx[oidx]);
      }
    }
  for (o = 0; o < M; o++) {
    switch (op) {
      case OP_SUM: out[o] = (double)acc[o]; break;
      case OP_MEAN: out[o] = (double)(acc[o] / cnt[o]); break;
      case OP_MAX: out[o] = (double)mx[o]; break;
      case OP_MIN: out[o] = (double)-mx[o]; break;
      case OP_VAR: out[o] = (double)(acc2[o] / (cnt[o] - corr)); break;
      default: out[o] = (double)(mx[o] + logl(acc2[o])); break;
    }
  }
  free(acc); free(acc2); free(mx); free(cnt);
}

/* Shapes that take every tiling path: long runs split into chunks, many
 * runs per chunk, column blocks, column chunks, groups of outputs. */
static void test_tiling_paths_vs_naive(void) {
  struct { int nd; int64_t shape[4]; unsigned mask; } cases[] = {
      {2, {3, 40000}, 2u},          /* rows, long runs: split */
      {2, {40000, 3}, 1u},          /* columns, narrow: chunks of rows, groups */
      {2, {600, 300}, 1u},          /* columns, 2 blocks, chunks */
      {2, {300, 600}, 2u},          /* rows, groups of outputs */
      {3, {40, 300, 30}, 2u},       /* middle axis: column form with outer kept */
      {3, {40, 20, 30}, 2u},        /* the same with groups of outer indices */
      {3, {30, 50, 40}, 5u},        /* outer and inner: row form with outer reduced runs */
      {2, {200, 300}, 3u},          /* everything: one output, chunks */
      {4, {6, 70, 5, 40}, 10u},     /* alternating */
  };
  int c, op, pass;
  dl_tape tp;
  dl_rng r = dl_rng_make(5);
  dl_tape_init(&tp, &ctx2, 0);
  for (c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++)
    for (pass = 0; pass < 2; pass++) {
      dl_dtype dt = pass ? DL_F64 : DL_F32;
      dl_tensor *x = dl_tensor_make(&ctx2, dt, cases[c].nd, cases[c].shape);
      int axes[4], na = 0, d;
      for (d = 0; d < cases[c].nd; d++)
        if ((cases[c].mask >> d) & 1u) axes[na++] = d;
      dl_tensor_rand_normal(x, &r, 0.5, 1);
      for (op = OP_SUM; op <= OP_LSE; op++) {
        opspec s;
        dl_tensor *y;
        double *want;
        double worst = 0;
        int64_t o;
        memset(&s, 0, sizeof s);
        s.op = op;
        s.naxes = na;
        memcpy(s.axes, axes, sizeof axes);
        s.correction = 1;
        y = apply(&tp, &s, x);
        want = (double *)malloc(sizeof *want * (size_t)y->numel);
        naive_reduce(x, cases[c].mask, op, 1.0, want, y->numel);
        for (o = 0; o < y->numel; o++) {
          double e = fabs(dl__get_at(y, o) - want[o]) / fmax(1.0, fabs(want[o]));
          if (!(e <= worst)) worst = e;
        }
        CHECK_MSG(worst <= (pass ? 1e-12 : 2e-7), "case %d %s %s: worst error %.3g", c,
                  op_names[op], pass ? "f64" : "f32", worst);
        free(want);
        dl_tape_rewind(&tp);
      }
      dl_tensor_free(x);
    }
  dl_tape_free(&tp);
}

/* Forward values, tangents and gradients are bit-identical on 1 and 2 threads
 * (the tape's ctx sets the threads; ctx2 parallelises every loop). */
static void test_thread_count_independent(void) {
  static const int64_t shapes[][3] = {{3, 40000, 1}, {40000, 3, 1}, {600, 300, 1}, {40, 300, 30},
                                      {300, 200, 7}};
  int c, op;
  dl_rng r = dl_rng_make(6);
  for (c = 0; c < 5; c++)
    for (op = OP_SUM; op <= OP_LOG_SOFTMAX; op++) {
      dl_tensor *x = dl_tensor_make(&ctx1, DL_F32, 3, shapes[c]);
      dl_tensor *t = dl_tensor_make(&ctx1, DL_F32, 3, shapes[c]);
      dl_tensor *res[2][3];
      opspec s;
      dl_tape tp[2];
      int k;
      memset(&s, 0, sizeof s);
      s.op = op;
      s.naxes = 1;
      s.axes[0] = c % 2 ? 0 : 1;
      s.axis = c % 3 - 1;
      s.correction = 1;
      dl_tensor_rand_normal(x, &r, 0, 2);
      dl_tensor_rand_normal(t, &r, 0, 1);
      dl_requires_grad(x);
      dl_set_tangent(x, t);
      for (k = 0; k < 2; k++) {
        dl_tensor *y, *gy;
        x->ctx = k ? &ctx2 : &ctx1;
        dl_tape_init(&tp[k], x->ctx, 0);
        dl_zero_grad(x);
        y = apply(&tp[k], &s, x);
        gy = dl_tape_out(&tp[k], "test", y->dtype, y->ndim, y->shape);
        dl_tensor_fill(gy, 0.5);
        dl_backward(&tp[k], y, gy);
        res[k][0] = y;
        res[k][1] = y->tangent;
        res[k][2] = dl_tape_out(&tp[k], "test", x->dtype, x->ndim, x->shape);
        dl_tensor_copy(res[k][2], x->grad);
      }
      for (k = 0; k < 3; k++)
        CHECK_MSG(res[0][k]->numel == res[1][k]->numel &&
                      !memcmp(res[0][k]->data, res[1][k]->data, (size_t)res[0][k]->numel * 4),
                  "shape %d op %s: %s differs between 1 and 2 threads", c, op_names[op],
                  k == 0 ? "forward" : k == 1 ? "tangent" : "gradient");
      dl_tape_free(&tp[0]);
      dl_tape_free(&tp[1]);
      dl_tensor_free(x);
      dl_tensor_free(t);
    }
}

/* >>accuracy and stability ------------------------------------------------- */

static void test_f32_long_sums(void) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(1000000));
  dl_tensor *x2 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(1000, 1000));
  dl_tape tp;
  dl_tensor *s, *m, *v, *c;
  int64_t i;
  double want = 0;
  int ax0[1] = {0};
  for (i = 0; i < x->numel; i++) {
    dl_f32(x)[i] = 0.1f + (float)(i % 7) * 1e-3f;
    dl_f32(x2)[i] = dl_f32(x)[i];
    want += (double)dl_f32(x)[i];
  }
  dl_tape_init(&tp, &ctx, 0);
  s = dl_t_sum_all(&tp, x);
  m = dl_t_mean(&tp, x, 0, NULL, 1);
  v = dl_t_var(&tp, x, 0, NULL, 0.0, 0);
  c = dl_t_sum(&tp, x2, 1, ax0, 0);
  CHECK(s->ndim == 0 && m->ndim == 1 && m->shape[0] == 1);
  CHECK_REL(dl_f32(s)[0], want, 1e-7, 1e-30);           /* a float-only loop is off by ~1e-3 */
  CHECK_REL(dl_f32(m)[0], want / 1e6, 1e-7, 1e-30);
  {
    double mean = want / 1e6, ss = 0;
    for (i = 0; i < x->numel; i++)
      ss += ((double)dl_f32(x)[i] - mean) * ((double)dl_f32(x)[i] - mean);
    CHECK_REL(dl_f32(v)[0], ss / 1e6, 1e-6, 1e-30);
  }
  for (i = 0; i < 1000; i++) {
    double w = 0;
    int64_t k;
    for (k = 0; k < 1000; k++) w += (double)dl_f32(x2)[k * 1000 + i];
    CHECK_REL(dl_f32(c)[i], w, 1e-7, 1e-30);
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(x2);
}

/* var of values far from 0: the two-pass form keeps the digits. */
static void test_var_offset(void) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(1000)), *v;
  dl_tape tp;
  int64_t i;
  for (i = 0; i < 1000; i++) dl_f64(x)[i] = 1e9 + (double)(i % 10);
  dl_tape_init(&tp, &ctx, 0);
  v = dl_t_var(&tp, x, 0, NULL, 1.0, 0);
  CHECK_REL(dl_f64(v)[0], 8.25 * 1000.0 / 999.0, 1e-9, 1e-30);
  dl_tape_free(&tp);
  dl_tensor_free(x);
}

static void test_softmax_large_logits(void) {
  int pass, op, k;
  for (pass = 0; pass < 2; pass++)
    for (op = OP_SOFTMAX; op <= OP_LOG_SOFTMAX; op++) {
      dl_dtype dt = pass ? DL_F64 : DL_F32;
      dl_tensor *x = dl_tensor_make(&ctx, dt, DL_SHAPE(3, 4)), *y;
      static const double v[12] = {1e4, -1e4, 9999, 0, -1e4, -1e4 + 1, -1e4 + 2, -1e4,
                                   5e3, 5e3, 1e4, -1e4};
      dl_tape tp;
      int i;
      opspec s;
      memset(&s, 0, sizeof s);
      s.op = op;
      s.axis = -1;
      for (i = 0; i < 12; i++) dl__set_at(x, i, v[i]);
      dl_requires_grad(x);
      dl_tape_init(&tp, &ctx, 0);
      y = apply(&tp, &s, x);
      for (k = 0; k < 3; k++) {
        /* reference in long double */
        long double m = -INFINITY, sum = 0;
        for (i = 0; i < 4; i++) m = fmaxl(m, v[k * 4 + i]);
        for (i = 0; i < 4; i++) sum += expl(v[k * 4 + i] - m);
        for (i = 0; i < 4; i++) {
          long double ls = v[k * 4 + i] - m - logl(sum);
          double want = op == OP_SOFTMAX ? (double)expl(ls) : (double)ls;
          double got = dl__get_at(y, k * 4 + i);
          CHECK_MSG(isfinite(got), "%s %s [%d, %d] not finite", op_names[op],
                    pass ? "f64" : "f32", k, i);
          CHECK_NEAR(got, want, (pass ? 1e-12 : 1e-6) * fmax(1.0, fabs(want)));
        }
      }
      dl_backward(&tp, dl_t_sum_all(&tp, dl_t_mul(&tp, y, y)), NULL);
      for (i = 0; i < 12; i++) CHECK(isfinite(dl__get_at(x->grad, i)));
      dl_tape_free(&tp);
      dl_tensor_free(x);
    }
}

static void test_logsumexp_extremes(void) {
  static const double v[] = {1000, -1000, 999,       /* 1000 + log(1 + e^-1) */
                             -INFINITY, -INFINITY, -INFINITY,
                             INFINITY, 1, 2,
                             -1000, -1000, -1000};  /* -1000 + log 3 */
  int pass, ax1[1] = {1};
  for (pass = 0; pass < 2; pass++) {
    dl_dtype dt = pass ? DL_F64 : DL_F32;
    dl_tensor *x = dl_tensor_make(&ctx, dt, DL_SHAPE(4, 3)), *y;
    dl_tape tp;
    int i;
    for (i = 0; i < 12; i++) dl__set_at(x, i, v[i]);
    dl_tape_init(&tp, &ctx, 0);
    y = dl_t_logsumexp(&tp, x, 1, ax1, 0);
    CHECK_NEAR(dl__get_at(y, 0), 1000 + log1p(exp(-1.0)), pass ? 1e-12 : 1e-4);
    CHECK(dl__get_at(y, 1) == -INFINITY);
    CHECK(dl__get_at(y, 2) == INFINITY);
    CHECK_NEAR(dl__get_at(y, 3), -1000 + log(3.0), pass ? 1e-12 : 1e-4);
    dl_tape_free(&tp);
    dl_tensor_free(x);
  }
}

/* >>shapes, empty tensors, tape behaviour ---------------------------------- */

static void test_shapes_and_keepdim(void) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 3, 4)), *y, *s0;
  dl_tape tp;
  int a[2] = {-1, 0};
  dl_tensor_fill(x, 1.0);
  dl_tape_init(&tp, &ctx, 0);
  y = dl_t_sum(&tp, x, 2, a, 0);
  CHECK(y->ndim == 1 && y->shape[0] == 3 && dl_f64(y)[2] == 8.0);
  y = dl_t_sum(&tp, x, 2, a, 1);
  CHECK(y->ndim == 3 && y->shape[0] == 1 && y->shape[1] == 3 && y->shape[2] == 1);
  y = dl_t_max(&tp, x, 0, NULL, 0);
  CHECK(y->ndim == 0 && y->numel == 1 && dl_f64(y)[0] == 1.0);
  y = dl_t_mean(&tp, x, 0, NULL, 1);
  CHECK(y->ndim == 3 && y->numel == 1 && dl_f64(y)[0] == 1.0);
  /* a 0-d input: axis 0 / -1 reduce nothing */
  s0 = dl_tensor_make(&ctx, DL_F64, 0, NULL);
  dl_f64(s0)[0] = 2.5;
  a[0] = 0;
  y = dl_t_sum(&tp, s0, 1, a, 0);
  CHECK(y->ndim == 0 && dl_f64(y)[0] == 2.5);
  y = dl_t_softmax(&tp, s0, -1);
  CHECK(y->ndim == 0 && dl_f64(y)[0] == 1.0);
  y = dl_t_log_softmax(&tp, s0, 0);
  CHECK(y->ndim == 0 && dl_f64(y)[0] == 0.0);
  y = dl_t_var(&tp, s0, 0, NULL, 0.0, 0);
  CHECK(y->ndim == 0 && dl_f64(y)[0] == 0.0);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(s0);
}

static void test_empty(void) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(0, 3)), *y;
  dl_tape tp;
  int a0[1] = {0}, a1[1] = {1};
  dl_requires_grad(x);
  dl_tape_init(&tp, &ctx, 0);
  y = dl_t_sum(&tp, x, 1, a0, 0);
  CHECK(y->ndim == 1 && y->shape[0] == 3 && dl_f32(y)[0] == 0.0f);
  dl_backward(&tp, dl_t_sum_all(&tp, y), NULL);
  y = dl_t_mean(&tp, x, 1, a0, 0);
  CHECK(isnan(dl_f32(y)[1]));
  y = dl_t_logsumexp(&tp, x, 1, a0, 0);
  CHECK(dl_f32(y)[2] == -INFINITY);
  y = dl_t_max(&tp, x, 1, a1, 0);         /* [0, 3] over axis 1: no outputs, fine */
  CHECK(y->ndim == 1 && y->shape[0] == 0);
  y = dl_t_softmax(&tp, x, 1);
  CHECK(y->numel == 0);
  EXPECT_PANIC(dl_t_max(&tp, x, 1, a0, 0), "dl_t_max", "f32[0, 3]", "[0]", "no elements");
  dl_tape_free(&tp);
  dl_tensor_free(x);
}

static void test_tape_behaviour(void) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 4)), *y;
  dl_tape tp;
  dl_rng r = dl_rng_make(9);
  int a1[1] = {1}, i, op;
  dl_tensor_rand_normal(x, &r, 0, 1);
  dl_requires_grad(x);
  dl_tape_init(&tp, &ctx, 0);
  for (op = OP_SUM; op <= OP_MEAN_ALL; op++) {
    opspec s;
    double g1[12];
    memset(&s, 0, sizeof s);
    s.op = op;
    s.naxes = 1;
    s.axes[0] = 1;
    s.correction = 1;
    s.axis = 1;
    /* backward accumulates: twice gives twice the gradient */
    dl_zero_grad(x);
    dl_backward(&tp, dl_t_sum_all(&tp, dl_t_mul(&tp, apply(&tp, &s, x), apply(&tp, &s, x))), NULL);
    for (i = 0; i < 12; i++) g1[i] = dl_f64(x->grad)[i];
    dl_backward(&tp, dl_t_sum_all(&tp, dl_t_mul(&tp, apply(&tp, &s, x), apply(&tp, &s, x))), NULL);
    for (i = 0; i < 12; i++) CHECK_NEAR(dl_f64(x->grad)[i], 2 * g1[i], 1e-12 * (1 + fabs(g1[i])));
    /* no-grad: nothing recorded */
    dl_no_grad_begin(&tp);
    y = apply(&tp, &s, x);
    CHECK(y->node == NULL && !(y->flags & DL_TENSOR_REQUIRES_GRAD));
    dl_no_grad_end(&tp);
    dl_tape_rewind(&tp);
  }
  (void)a1;
  dl_tape_free(&tp);
  dl_tensor_free(x);
}

/* Softmax rows sum to 1 for the shapes the benchmarks use; log_softmax's
 * exp too; the strided path equals the contiguous one. */
static void test_softmax_shapes(void) {
  static const int64_t shapes[][2] = {{64, 10}, {256, 100}, {4096, 1000}, {7, 2000}, {1000, 5},
                                      {300, 1}, {130, 63}, {50, 64}};
  int c, pass;
  dl_rng r = dl_rng_make(11);
  for (c = 0; c < 8; c++)
    for (pass = 0; pass < 2; pass++) {
      dl_dtype dt = pass ? DL_F64 : DL_F32;
      int64_t R = shapes[c][0], K = shapes[c][1], i, k;
      dl_tensor *x = dl_tensor_make(&ctx2, dt, 2, shapes[c]), *store, xv, *y, *ly, *yt;
      dl_tape tp;
      double worst = 0, worst_l = 0, worst_t = 0;
      dl_tensor_rand_normal(x, &r, 0, 3);
      xv = strided_copy(x, &store);
      dl_tape_init(&tp, &ctx2, 0);
      y = dl_t_softmax(&tp, x, 1);
      ly = dl_t_log_softmax(&tp, x, -1);
      yt = dl_t_softmax(&tp, &xv, 1);
      for (i = 0; i < R; i++) {
        double s = 0, sl = 0;
        for (k = 0; k < K; k++) {
          s += dl__get_at(y, i * K + k);
          sl += exp(dl__get_at(ly, i * K + k));
          worst_t = fmax(worst_t, fabs(dl__get_at(y, i * K + k) - dl__get_at(yt, i * K + k)));
        }
        worst = fmax(worst, fabs(s - 1));
        worst_l = fmax(worst_l, fabs(sl - 1));
      }
      CHECK_MSG(worst <= (pass ? 1e-13 : 2e-6), "softmax [%lld, %lld]: rows sum to 1 +- %.3g",
                (long long)R, (long long)K, worst);
      CHECK_MSG(worst_l <= (pass ? 1e-13 : 2e-6), "log_softmax [%lld, %lld]: rows +- %.3g",
                (long long)R, (long long)K, worst_l);
      CHECK(worst_t == 0);
      dl_tape_free(&tp);
      dl_tensor_free(x);
      dl_tensor_free(store);
    }
}

/* >>errors ----------------------------------------------------------------- */

static void test_panics(void) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 3));
  dl_tensor *xi = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(4));
  dl_tape tp;
  int bad[1] = {5}, neg[1] = {-3}, dup[2] = {1, -1}, ok[1] = {0};
  dl_tape_init(&tp, &ctx, 0);
  EXPECT_PANIC(dl_t_sum(&tp, x, 1, bad, 0), "dl_t_sum", "axis 5", "f64[2, 3]", "[5]");
  EXPECT_PANIC(dl_t_mean(&tp, x, 1, neg, 0), "dl_t_mean", "axis -3", "f64[2, 3]");
  EXPECT_PANIC(dl_t_max(&tp, x, 2, dup, 1), "dl_t_max", "twice", "f64[2, 3]", "[1, -1]");
  EXPECT_PANIC(dl_t_min(&tp, x, 1, bad, 0), "dl_t_min", "f64[2, 3]", "[5]");
  EXPECT_PANIC(dl_t_var(&tp, x, 1, bad, 1.0, 0), "dl_t_var", "f64[2, 3]", "[5]");
  EXPECT_PANIC(dl_t_logsumexp(&tp, x, 1, bad, 0), "dl_t_logsumexp", "f64[2, 3]", "[5]");
  EXPECT_PANIC(dl_t_sum(&tp, x, -1, ok, 0), "dl_t_sum", "naxes -1", "f64[2, 3]");
  EXPECT_PANIC(dl_t_sum(&tp, x, 1, NULL, 0), "dl_t_sum", "f64[2, 3]");
  EXPECT_PANIC(dl_t_softmax(&tp, x, 2), "dl_t_softmax", "axis 2", "f64[2, 3]");
  EXPECT_PANIC(dl_t_log_softmax(&tp, x, -3), "dl_t_log_softmax", "axis -3", "f64[2, 3]");
  EXPECT_PANIC(dl_t_sum_all(&tp, xi), "dl_t_sum_all", "i64[4]");
  EXPECT_PANIC(dl_t_mean_all(&tp, xi), "dl_t_mean_all", "i64[4]");
  EXPECT_PANIC(dl_t_softmax(&tp, xi, 0), "dl_t_softmax", "i64[4]");
  EXPECT_PANIC(dl_t_max(&tp, xi, 0, NULL, 0), "dl_t_max", "i64[4]");
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(xi);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  d.threads = 1;
  dl_ctx_init(&ctx1, &d);
  d.threads = 2;
  d.parallel_threshold = 1;    /* every loop with more than one tile goes parallel */
  dl_ctx_init(&ctx2, &d);
  fx_ok = fx2_load(&fx, "tests/fixtures/reduce.txt");
  RUN(test_fixtures_cover_every_op);
  RUN(test_match_torch);
  RUN(test_gradcheck_reductions);
  RUN(test_gradcheck_softmax);
  RUN(test_tiling_paths_vs_naive);
  RUN(test_thread_count_independent);
  RUN(test_f32_long_sums);
  RUN(test_var_offset);
  RUN(test_softmax_large_logits);
  RUN(test_logsumexp_extremes);
  RUN(test_shapes_and_keepdim);
  RUN(test_empty);
  RUN(test_tape_behaviour);
  RUN(test_softmax_shapes);
  RUN(test_panics);
  if (fx_ok) fx2_free(&fx);
  return harness_finish();
}
