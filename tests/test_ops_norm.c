/* dl-test-cxx */
/* tests/test_ops_norm.c - dl/ops/norm.h: batch_norm, layer_norm, rms_norm.
 *
 * - PyTorch agreement (tests/fixtures/norm.txt, tools/fixtures_norm.py), f64
 *   (relative error <= 1e-10) and f32 (norm-wise <= 1e-5, element-wise
 *   <= 1e-4): forward values, gradients of
 *   x, weight and bias, and the running statistics after the call; batch norm
 *   on 2-d, 3-d and 4-d x, training / evaluation / no running statistics,
 *   affine or not; layer and RMS norm over the last 1 and 2 dimensions,
 *   affine or not. Each case also runs with x a strided (permuted) view, with
 *   only the parameters requiring a gradient, and with only x; a second
 *   backward doubles the gradients.
 * - running statistics after 3 consecutive training calls (momentum 0.1 and
 *   0.3) equal PyTorch's.
 * - dl_gradcheck (f64: tape gradient and forward-mode tangent vs finite
 *   differences) of every op and mode, contiguous and strided x, serially and
 *   on a 2-thread ctx that parallelises from 1 element of work.
 * - larger problems (several tiles) against a naive double reference, and
 *   bit-identical outputs, gradients and tangents with 1 and 2 threads.
 * - f32 tangents agree with f64 ones; no-grad records nothing; evaluation
 *   leaves the running statistics alone.
 * - panics name the op and the shapes (weight / bias / running statistics of
 *   the wrong shape, dtype mismatch, bad nnorm, eps < 0 ...).
 * NORM_VERBOSE=1 in the environment prints every fixture comparison.
 */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx;    /* panics land in the harness; default threads */
static dl_ctx serctx; /* one thread */
static dl_ctx parctx; /* two threads, parallel from 1 element of work */

enum { OP_BN, OP_LN, OP_RMS };
static const char *op_names[] = {"batch_norm", "layer_norm", "rms_norm"};

typedef struct norm_args {
  int op, training, nnorm;
  double momentum, eps;
} norm_args;

static dl_tensor *call_op(dl_tape *tp, const norm_args *a, dl_tensor *x, dl_tensor *w, dl_tensor *b,
                          dl_tensor *rm, dl_tensor *rv) {
  switch (a->op) {
    case OP_BN: return dl_t_batch_norm(tp, x, w, b, rm, rv, a->training, a->momentum, a->eps);
    case OP_LN: return dl_t_layer_norm(tp, x, a->nnorm, w, b, a->eps);
    default: return dl_t_rms_norm(tp, x, a->nnorm, w, a->eps);
  }
}

/* A view of a new tensor with src's values and shape whose dimensions are
 * laid out in reverse order (strided, not contiguous); *base owns the memory. */
static dl_tensor strided_copy(const dl_tensor *src, dl_tensor **base) {
  int64_t shape[DL_MAX_DIMS];
  int perm[DL_MAX_DIMS], d, nd = src->ndim;
  dl_tensor v;
  for (d = 0; d < nd; d++) {
    shape[d] = src->shape[nd - 1 - d];
    perm[d] = nd - 1 - d;
  }
  *base = dl_tensor_make(src->ctx, src->dtype, nd, shape);
  v = dl_view_permute(*base, perm);
  dl_tensor_copy(&v, src);
  return v;
}

/* >>PyTorch fixtures ------------------------------------------------------- */

/* worst element-wise relative error (fx2_err) [f64?], and for f32 the worst
 * norm-wise one (fx2_err_norm) */
static double worst_err[2], worst_norm32;

/* got against scale * want. f64: element-wise relative error <= 1e-10. f32:
 * norm-wise <= 1e-5 and element-wise <= 1e-4 (PyTorch rounds in float: an
 * output near zero, (x - mu) is with x close to mu, carries float's rounding
 * of x; checked with tools/: PyTorch's own f32 values are 1.5e-5 element-wise
 * off the exact ones where ours are closer). */
static int check_err(const fx2_case *c, const char *what, const char *variant, const dl_tensor *got,
                     const fx2_tensor *want, double scale) {
  const double tol = c->f64 ? 1e-10 : 1e-4;
  double e, en = 0;
  fx2_tensor w2;
  int64_t i;
  if (!want) return 0;
  w2 = *want;
  w2.v = (double *)malloc(sizeof(double) * (size_t)(want->numel ? want->numel : 1));
  for (i = 0; i < want->numel; i++) w2.v[i] = scale * want->v[i];
  e = fx2_err(got, &w2);
  if (!c->f64) en = fx2_err_norm(got, &w2);
  free(w2.v);
  worst_err[c->f64] = fmax(worst_err[c->f64], e);
  worst_norm32 = fmax(worst_norm32, en);
  if (getenv("NORM_VERBOSE"))
    printf("    %s %s %s %s %.3g (norm-wise %.3g)\n", c->name, c->f64 ? "f64" : "f32", variant, what, e, en);
  if (e <= tol && en <= 1e-5) return 0;
  fprintf(stderr, "  %s %s (%s): %s rel err %.3g (tol %g), norm-wise %.3g\n", c->name, c->f64 ? "f64" : "f32",
          variant, what, e, tol, en);
  return 1;
}

static norm_args case_args(const fx2_case *c) {
  norm_args a;
  a.op = !strncmp(c->name, "bn_", 3) ? OP_BN : !strncmp(c->name, "ln_", 3) ? OP_LN : OP_RMS;
  a.training = (int)fx2_param(c, "training", 0);
  a.nnorm = (int)fx2_param(c, "nnorm", 1);
  a.momentum = fx2_param(c, "momentum", 0.1);
  a.eps = fx2_param(c, "eps", -1);
  return a;
}

/* One fixture case. variant 0: x, w, b require gradients (backward twice);
 * 1: x is a strided view; 2: only w, b require gradients; 3: only x.
 * Returns the number of failed comparisons. */
static int run_fixture_case(const fx2_case *c, int variant) {
  static const char *vnames[4] = {"all", "strided x", "params only", "x only"};
  const dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  const norm_args a = case_args(c);
  const char *vn = vnames[variant];
  dl_tensor *x = fx2_make(c, "x", dt), *w = fx2_make(c, "w", dt), *b = fx2_make(c, "b", dt);
  dl_tensor *rm = fx2_make(c, "rm", dt), *rv = fx2_make(c, "rv", dt), *gy = fx2_make(c, "gy", dt);
  dl_tensor *xbase = NULL, xv, *xin = x, *y;
  dl_tape tp;
  int bad = 0, k, want_x = variant != 2, want_p = variant != 3;
  CHECK_MSG(x && gy && a.eps >= 0, "fixture case %s (line %d) not understood", c->name, c->line);
  if (!x || !gy) return 1;
  if (variant == 2 && !w && !b) { /* no parameters: nothing would require a gradient */
    dl_tensor_free(x);
    dl_tensor_free(rm);
    dl_tensor_free(rv);
    dl_tensor_free(gy);
    return 0;
  }
  if (variant == 1) {
    xv = strided_copy(x, &xbase);
    CHECK(!dl_tensor_is_contiguous(&xv));
    xin = &xv;
  }
  if (want_x) dl_requires_grad(xin);
  if (want_p && w) dl_requires_grad(w);
  if (want_p && b) dl_requires_grad(b);
  dl_tape_init(&tp, &ctx, 0);
  y = call_op(&tp, &a, xin, w, b, rm, rv);
  bad += check_err(c, "y", vn, y, fx2_get(c, "y"), 1);
  if (rm) bad += check_err(c, "rm_out", vn, rm, fx2_get(c, "rm_out"), 1);
  if (rv) bad += check_err(c, "rv_out", vn, rv, fx2_get(c, "rv_out"), 1);
  for (k = 1; k <= (variant == 0 ? 2 : 1); k++) {
    dl_backward(&tp, y, gy);
    if (want_x) bad += check_err(c, k == 1 ? "g_x" : "g_x (2nd backward)", vn, xin->grad, fx2_get(c, "g_x"), k);
    else CHECK(xin->grad == NULL);
    if (want_p && w) bad += check_err(c, k == 1 ? "g_w" : "g_w (2nd backward)", vn, w->grad, fx2_get(c, "g_w"), k);
    if (want_p && b) bad += check_err(c, k == 1 ? "g_b" : "g_b (2nd backward)", vn, b->grad, fx2_get(c, "g_b"), k);
  }
  CHECK(!w == !fx2_get(c, "g_w") && !b == !fx2_get(c, "g_b"));
  if (rm) CHECK(rm->grad == NULL && rv->grad == NULL);
  dl_tape_free(&tp);
  if (variant == 1) dl_tensor_free(xv.grad);
  dl_tensor_free(xbase);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
  dl_tensor_free(rm);
  dl_tensor_free(rv);
  dl_tensor_free(gy);
  return bad;
}

static void test_fixtures_match_torch(void) {
  fx2_set s;
  int i, n = 0, f32 = 0, running = 0;
  int bn_seen[3][3][2], row_seen[2][2][2]; /* [ndim-2][train/eval/notrack][affine]; [op-1][nnorm-1][affine] */
  memset(bn_seen, 0, sizeof bn_seen);
  memset(row_seen, 0, sizeof row_seen);
  if (!fx2_load(&s, "tests/fixtures/norm.txt")) {
    CHECK_MSG(0, "%s", s.err);
    return;
  }
  for (i = 0; i < s.n; i++) {
    const fx2_case *c = &s.cases[i];
    const norm_args a = case_args(c);
    const fx2_tensor *x = fx2_get(c, "x");
    const int affine = (int)fx2_param(c, "affine", -1);
    int v;
    if (!strncmp(c->name, "bn_running_", 11)) { running++; continue; }
    for (v = 0; v < 4; v++) {
      const int fails = run_fixture_case(c, v);
      CHECK_MSG(fails == 0, "fixture %s %s variant %d: %d comparison(s) off PyTorch", c->name,
                c->f64 ? "f64" : "f32", v, fails);
    }
    n++;
    f32 += !c->f64;
    if (!x || affine < 0) continue;
    if (a.op == OP_BN && x->ndim >= 2 && x->ndim <= 4) {
      const int mode = fx2_param(c, "track", 1) == 0 ? 2 : a.training ? 0 : 1;
      bn_seen[x->ndim - 2][mode][affine]++;
    } else if (a.op != OP_BN && a.nnorm >= 1 && a.nnorm <= 2) {
      row_seen[a.op - 1][a.nnorm - 1][affine]++;
    }
  }
  {
    int d, m, af;
    for (d = 0; d < 3; d++)
      for (m = 0; m < 3; m++)
        for (af = 0; af < 2; af++)
          CHECK_MSG(bn_seen[d][m][af] == 2, "batch_norm %d-d mode %d affine %d: %d fixture cases (want f64 and f32)",
                    d + 2, m, af, bn_seen[d][m][af]);
    for (d = 0; d < 2; d++)
      for (m = 0; m < 2; m++)
        for (af = 0; af < 2; af++)
          CHECK_MSG(row_seen[d][m][af] >= 2, "%s nnorm %d affine %d: no fixture cases", op_names[d + 1], m + 1, af);
  }
  CHECK(running == 4);
  CHECK(f32 > 0 && f32 < n);
  printf("  %d fixture cases x 4 variants (%d f32); worst rel error vs PyTorch: f64 %.3g, f32 %.3g "
         "(norm-wise %.3g)\n", n, f32, worst_err[1], worst_err[0], worst_norm32);
  fx2_free(&s);
}

/* Three consecutive training calls: the running statistics after each, and
 * the last output, equal PyTorch's. */
static void test_running_stats(void) {
  fx2_set s;
  int i, seen = 0;
  if (!fx2_load(&s, "tests/fixtures/norm.txt")) {
    CHECK_MSG(0, "%s", s.err);
    return;
  }
  for (i = 0; i < s.n; i++) {
    const fx2_case *c = &s.cases[i];
    const dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
    const double mom = fx2_param(c, "momentum", -1), eps = fx2_param(c, "eps", -1);
    dl_tensor *rm, *rv, *w, *b, *y = NULL;
    dl_tape tp;
    int k, bad = 0;
    if (strncmp(c->name, "bn_running_", 11)) continue;
    seen++;
    rm = fx2_make(c, "rm", dt);
    rv = fx2_make(c, "rv", dt);
    w = fx2_make(c, "w", dt);
    b = fx2_make(c, "b", dt);
    dl_requires_grad(w);
    dl_tape_init(&tp, &ctx, 0);
    for (k = 1; k <= 3; k++) {
      char key[24];
      dl_tensor *x;
      snprintf(key, sizeof key, "x%d", k);
      x = fx2_make(c, key, dt);
      CHECK(x != NULL);
      if (!x) break;
      y = dl_t_batch_norm(&tp, x, w, b, rm, rv, 1, mom, eps);
      snprintf(key, sizeof key, "rm%d", k);
      bad += check_err(c, key, "3 calls", rm, fx2_get(c, key), 1);
      snprintf(key, sizeof key, "rv%d", k);
      bad += check_err(c, key, "3 calls", rv, fx2_get(c, key), 1);
      if (k == 3) bad += check_err(c, "y3", "3 calls", y, fx2_get(c, "y3"), 1);
      dl_tensor_free(x);
    }
    CHECK_MSG(bad == 0, "%s %s: %d comparison(s) off PyTorch", c->name, c->f64 ? "f64" : "f32", bad);
    CHECK(y && y->node != NULL && rm->grad == NULL && !(rm->flags & DL_TENSOR_REQUIRES_GRAD));
    dl_tape_free(&tp);
    dl_tensor_free(rm);
    dl_tensor_free(rv);
    dl_tensor_free(w);
    dl_tensor_free(b);
  }
  CHECK(seen == 4);
  CHECK(fx2_find(&s, "bn_running_m0.1", 1) && fx2_find(&s, "bn_running_m0.3", 0));
  fx2_free(&s);
}

/* >>gradcheck -------------------------------------------------------------- */

typedef struct gc_case {
  const char *name;
  norm_args a;
  int ndim;
  int64_t shape[4];
  int has_w, has_b, track, strided;
} gc_case;

typedef struct gc_user {
  const gc_case *gc;
  dl_tensor *rm, *rv;
} gc_user;

static dl_tensor *gc_fn(dl_tape *tp, dl_tensor **in, void *user) {
  const gc_user *u = (const gc_user *)user;
  const gc_case *g = u->gc;
  dl_tensor *w = g->has_w ? in[1] : NULL, *b = g->has_b ? in[g->has_w ? 2 : 1] : NULL;
  return call_op(tp, &g->a, in[0], w, b, u->rm, u->rv);
}

static double worst_gc;

static void gradcheck_case(const gc_case *g, uint64_t seed) {
  int ctxi;
  for (ctxi = 0; ctxi < 2; ctxi++) {
    dl_rng rng = dl_rng_make(seed);
    dl_tensor *x = dl_tensor_make(&ctx, DL_F64, g->ndim, g->shape), *xbase = NULL, xv;
    dl_tensor *in[3], *w = NULL, *b = NULL;
    int64_t pshape[4], np = 0, i;
    int nin = 1, d, ok;
    gc_user u;
    dl_gradcheck_result res;
    /* parameters: [C] for batch norm, the last nnorm dimensions otherwise */
    if (g->a.op == OP_BN) pshape[np++] = g->shape[1];
    else
      for (d = g->ndim - g->a.nnorm; d < g->ndim; d++) pshape[np++] = g->shape[d];
    dl_tensor_rand_normal(x, &rng, 0.3, 1.2);
    in[0] = x;
    if (g->strided) {
      xv = strided_copy(x, &xbase);
      in[0] = &xv;
    }
    if (g->has_w) {
      w = dl_tensor_make(&ctx, DL_F64, (int)np, pshape);
      dl_tensor_rand_normal(w, &rng, 1.0, 0.5);
      in[nin++] = w;
    }
    if (g->has_b) {
      b = dl_tensor_make(&ctx, DL_F64, (int)np, pshape);
      dl_tensor_rand_normal(b, &rng, 0.0, 0.5);
      in[nin++] = b;
    }
    u.gc = g;
    u.rm = u.rv = NULL;
    if (g->track) {
      u.rm = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(g->shape[1]));
      u.rv = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(g->shape[1]));
      dl_tensor_rand_normal(u.rm, &rng, 0.0, 0.5);
      dl_tensor_rand_uniform(u.rv, &rng, 0.5, 2.0);
    }
    for (i = 0; i < nin; i++) dl_requires_grad(in[i]);
    /* step 1e-5 for the large (plane-form) cases: the rounding of L = sum(y w)
     * over ~1000 elements divided by the step dominates there (measured: the
     * error scales as 1/step, 9e-8 at 1e-6, 8e-9 at 1e-5) */
    ok = dl_gradcheck(ctxi ? &parctx : &serctx, gc_fn, &u, nin, in, x->numel > 256 ? 1e-5 : 1e-6, 1e-7, &res);
    worst_gc = fmax(worst_gc, res.max_err);
    if (getenv("NORM_VERBOSE"))
      printf("    gradcheck %s (%s): grad %.3g (input %d [%lld] %.10g vs %.10g) jvp %.3g\n", g->name,
             ctxi ? "2 threads" : "serial", res.grad_err, res.input, (long long)res.index, res.analytic,
             res.numeric, res.jvp_err);
    CHECK_MSG(ok, "gradcheck %s (%s): max_err %.3g (grad %.3g at input %d [%lld]: analytic %.10g numeric %.10g; "
              "jvp %.3g)", g->name, ctxi ? "2 threads" : "serial", res.max_err, res.grad_err, res.input,
              (long long)res.index, res.analytic, res.numeric, res.jvp_err);
    CHECK(res.checked == x->numel + (w ? w->numel : 0) + (b ? b->numel : 0));
    CHECK(res.jvp_err <= 1e-7);
    if (g->strided) dl_tensor_free(xv.grad);
    dl_tensor_free(xbase);
    dl_tensor_free(x);
    dl_tensor_free(w);
    dl_tensor_free(b);
    dl_tensor_free(u.rm);
    dl_tensor_free(u.rv);
  }
}

static void test_gradcheck(void) {
  /* name, {op, training, nnorm, momentum, eps}, ndim, shape, w, b, running stats, strided x */
  static const gc_case cases[] = {
      {"bn 2d train", {OP_BN, 1, 0, 0.1, 1e-5}, 2, {5, 3, 1, 1}, 1, 1, 1, 0},
      {"bn 2d eval", {OP_BN, 0, 0, 0.1, 1e-5}, 2, {5, 3, 1, 1}, 1, 1, 1, 0},
      {"bn 2d no stats", {OP_BN, 0, 0, 0.1, 1e-5}, 2, {5, 3, 1, 1}, 1, 1, 0, 1},
      {"bn 3d train", {OP_BN, 1, 0, 0.3, 1e-5}, 3, {3, 2, 4, 1}, 1, 1, 1, 1},
      {"bn 3d eval plain", {OP_BN, 0, 0, 0.1, 1e-3}, 3, {3, 2, 4, 1}, 0, 0, 1, 1},
      {"bn 3d train plain", {OP_BN, 1, 0, 0.1, 1e-3}, 3, {2, 3, 3, 1}, 0, 0, 1, 0},
      {"bn 4d train", {OP_BN, 1, 0, 0.1, 1e-5}, 4, {2, 3, 2, 2}, 1, 1, 1, 0},
      {"bn 4d train strided", {OP_BN, 1, 0, 0.1, 1e-5}, 4, {2, 3, 2, 2}, 1, 1, 0, 1},
      {"bn 4d eval", {OP_BN, 0, 0, 0.1, 1e-5}, 4, {2, 3, 2, 2}, 1, 1, 1, 1},
      {"bn 4d no stats, weight only", {OP_BN, 1, 0, 0.1, 1e-5}, 4, {2, 2, 2, 3}, 1, 0, 0, 0},
      {"bn 4d eval, bias only", {OP_BN, 0, 0, 0.1, 1e-5}, 4, {2, 2, 2, 3}, 0, 1, 1, 0},
      {"bn 4d train (planes)", {OP_BN, 1, 0, 0.1, 1e-5}, 4, {2, 2, 16, 16}, 1, 1, 1, 0},
      {"bn 3d train strided (planes)", {OP_BN, 1, 0, 0.1, 1e-5}, 3, {2, 3, 256, 1}, 1, 1, 0, 1},
      {"bn 4d eval (planes)", {OP_BN, 0, 0, 0.1, 1e-5}, 4, {3, 2, 16, 16}, 1, 1, 1, 1},
      {"ln 2d n1", {OP_LN, 0, 1, 0, 1e-5}, 2, {4, 5, 1, 1}, 1, 1, 0, 0},
      {"ln 2d n1 strided", {OP_LN, 0, 1, 0, 1e-5}, 2, {4, 5, 1, 1}, 1, 1, 0, 1},
      {"ln 3d n1 plain", {OP_LN, 0, 1, 0, 1e-5}, 3, {2, 3, 4, 1}, 0, 0, 0, 1},
      {"ln 3d n2", {OP_LN, 0, 2, 0, 1e-5}, 3, {2, 3, 4, 1}, 1, 1, 0, 0},
      {"ln 4d n2 weight only", {OP_LN, 0, 2, 0, 1e-3}, 4, {2, 2, 2, 3}, 1, 0, 0, 1},
      {"ln 3d n3 bias only", {OP_LN, 0, 3, 0, 1e-5}, 3, {2, 2, 3, 1}, 0, 1, 0, 0},
      {"rms 2d n1", {OP_RMS, 0, 1, 0, 1e-6}, 2, {4, 5, 1, 1}, 1, 0, 0, 0},
      {"rms 2d n1 plain strided", {OP_RMS, 0, 1, 0, 1e-6}, 2, {4, 5, 1, 1}, 0, 0, 0, 1},
      {"rms 3d n2", {OP_RMS, 0, 2, 0, 1e-6}, 3, {2, 3, 4, 1}, 1, 0, 0, 1},
      {"rms 4d n2 plain", {OP_RMS, 0, 2, 0, 1e-3}, 4, {2, 2, 2, 3}, 0, 0, 0, 0},
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof *cases; i++) gradcheck_case(&cases[i], 500 + i);
  printf("  %d gradcheck cases (serial and 2 threads), worst error %.3g\n", (int)(sizeof cases / sizeof *cases),
         worst_gc);
}

/* >>larger problems: naive reference and thread-count independence -------- */

/* Naive double reference of y, gx, gw, gb (gw, gb over the parameter
 * elements) for gy, x, w, b in double arrays. Batch norm: groups are the
 * channels (batch statistics when `batch`, else rm, rv); layer / RMS norm:
 * groups are the rows. */
static void naive(const norm_args *a, int batch, int ndim, const int64_t *shape, const double *x, const double *w,
                  const double *b, const double *rm, const double *rv, const double *gy, double *y, double *gx,
                  double *gw, double *gb) {
  int64_t N = shape[0], C = 1, S = 1, R = 1, D = 1, numel = 1, i, j, g, ng, len, np;
  int d;
  for (d = 0; d < ndim; d++) numel *= shape[d];
  if (a->op == OP_BN) {
    C = shape[1];
    for (d = 2; d < ndim; d++) S *= shape[d];
    ng = C;
    len = N * S;
    np = C;
  } else {
    for (d = 0; d < ndim; d++) {
      if (d < ndim - a->nnorm) R *= shape[d];
      else D *= shape[d];
    }
    ng = R;
    len = D;
    np = D;
  }
  for (j = 0; j < np; j++) gw[j] = gb[j] = 0;
  for (g = 0; g < ng; g++) {
    double mu = 0, var = 0, is, su = 0, sux = 0;
#define NAIVE_IDX(e) (a->op == OP_BN ? ((e) / S * C + g) * S + (e) % S : g * D + (e))
#define NAIVE_P(e) (a->op == OP_BN ? g : (e))
    if (a->op == OP_BN && !batch) {
      mu = rm[g];
      var = rv[g];
    } else {
      if (a->op != OP_RMS) {
        for (i = 0; i < len; i++) mu += x[NAIVE_IDX(i)];
        mu /= (double)len;
      }
      for (i = 0; i < len; i++) var += (x[NAIVE_IDX(i)] - mu) * (x[NAIVE_IDX(i)] - mu);
      var /= (double)len;
    }
    is = 1 / sqrt(var + a->eps);
    for (i = 0; i < len; i++) {
      const int64_t k = NAIVE_IDX(i), p = NAIVE_P(i);
      const double xh = (x[k] - mu) * is, u = gy[k] * (w ? w[p] : 1);
      y[k] = xh * (w ? w[p] : 1) + (b ? b[p] : 0);
      gw[p] += gy[k] * xh;
      gb[p] += gy[k];
      su += u;
      sux += u * xh;
    }
    for (i = 0; i < len; i++) {
      const int64_t k = NAIVE_IDX(i), p = NAIVE_P(i);
      const double xh = (x[k] - mu) * is, u = gy[k] * (w ? w[p] : 1);
      if (a->op == OP_BN && !batch) gx[k] = is * u;
      else if (a->op == OP_RMS) gx[k] = is * (u - xh * sux / (double)len);
      else gx[k] = is * (u - su / (double)len - xh * sux / (double)len);
    }
#undef NAIVE_IDX
#undef NAIVE_P
  }
  (void)numel;
}

typedef struct big_case {
  const char *name;
  norm_args a;
  int ndim;
  int64_t shape[4];
  int has_w, has_b, track;
} big_case;

/* Copies t's values (any dtype, contiguous) into a new double array. */
static double *to_d(const dl_tensor *t) {
  double *d;
  int64_t i;
  if (!t) return NULL;
  d = (double *)malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  for (i = 0; i < t->numel; i++) d[i] = dl__get_at(t, dl__offset_of_linear(t, i));
  return d;
}
static double max_rel(const dl_tensor *got, const double *want, int64_t n) {
  double worst = 0, scale = 0;
  int64_t i;
  for (i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  for (i = 0; i < n; i++) {
    double e = fabs(dl__get_at(got, i) - want[i]) / fmax(fabs(want[i]), 1e-3 * scale);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}
static int same_bits(const dl_tensor *a, const dl_tensor *b) {
  if (!a || !b) return a == b;
  return a->numel == b->numel && a->dtype == b->dtype &&
         !memcmp(a->data, b->data, (size_t)a->numel * dl_dtype_size(a->dtype));
}
static dl_tensor *clone(const dl_tensor *t) {
  dl_tensor *c;
  if (!t) return NULL;
  c = dl_tensor_make(&ctx, t->dtype, t->ndim, t->shape);
  dl_tensor_copy(c, t);
  return c;
}

static void big_case_run(const big_case *bc, dl_dtype dt, uint64_t seed) {
  const char *dts = dt == DL_F64 ? "f64" : "f32";
  dl_rng rng = dl_rng_make(seed);
  dl_tensor *x = dl_tensor_make(&ctx, dt, bc->ndim, bc->shape), *gy, *tx, *tw = NULL, *tb = NULL;
  dl_tensor *w = NULL, *b = NULL, *rm0 = NULL, *rv0 = NULL;
  dl_tensor *out[2][8]; /* y, gx, gw, gb, ty, rm, rv */
  int64_t pshape[4], np = 0, P = 1, i;
  int th, d, k;
  memset(out, 0, sizeof out);
  if (bc->a.op == OP_BN) pshape[np++] = bc->shape[1];
  else
    for (d = bc->ndim - bc->a.nnorm; d < bc->ndim; d++) pshape[np++] = bc->shape[d];
  for (d = 0; d < (int)np; d++) P *= pshape[d];
  gy = dl_tensor_make(&ctx, dt, bc->ndim, bc->shape);
  tx = dl_tensor_make(&ctx, dt, bc->ndim, bc->shape);
  dl_tensor_rand_normal(x, &rng, 2.0, 1.5); /* mean far from 0: the two-pass statistics matter */
  dl_tensor_rand_uniform(gy, &rng, -1, 1);
  dl_tensor_rand_uniform(tx, &rng, -1, 1);
  if (bc->has_w) {
    w = dl_tensor_make(&ctx, dt, (int)np, pshape);
    tw = dl_tensor_make(&ctx, dt, (int)np, pshape);
    dl_tensor_rand_normal(w, &rng, 1, 0.5);
    dl_tensor_rand_uniform(tw, &rng, -1, 1);
  }
  if (bc->has_b) {
    b = dl_tensor_make(&ctx, dt, (int)np, pshape);
    tb = dl_tensor_make(&ctx, dt, (int)np, pshape);
    dl_tensor_rand_normal(b, &rng, 0, 0.5);
    dl_tensor_rand_uniform(tb, &rng, -1, 1);
  }
  if (bc->track) {
    rm0 = dl_tensor_make(&ctx, dt, DL_SHAPE(bc->shape[1]));
    rv0 = dl_tensor_make(&ctx, dt, DL_SHAPE(bc->shape[1]));
    dl_tensor_rand_normal(rm0, &rng, 2.0, 0.5);
    dl_tensor_rand_uniform(rv0, &rng, 1.0, 3.0);
  }
  dl_requires_grad(x);
  if (w) dl_requires_grad(w);
  if (b) dl_requires_grad(b);
  for (th = 0; th < 2; th++) {
    dl_tape tp;
    dl_tensor *y, *rm = clone(rm0), *rv = clone(rv0);
    dl_tape_init(&tp, th ? &parctx : &serctx, 0);
    dl_zero_grad(x);
    if (w) dl_zero_grad(w);
    if (b) dl_zero_grad(b);
    dl_set_tangent(x, tx);
    if (w) dl_set_tangent(w, tw);
    if (b) dl_set_tangent(b, tb);
    y = call_op(&tp, &bc->a, x, w, b, rm, rv);
    dl_set_tangent(x, NULL);
    if (w) dl_set_tangent(w, NULL);
    if (b) dl_set_tangent(b, NULL);
    dl_backward(&tp, y, gy);
    out[th][0] = clone(y);
    out[th][1] = clone(x->grad);
    out[th][2] = w ? clone(w->grad) : NULL;
    out[th][3] = b ? clone(b->grad) : NULL;
    out[th][4] = clone(y->tangent);
    out[th][5] = rm;
    out[th][6] = rv;
    dl_tape_free(&tp);
  }
  for (k = 0; k < 7; k++) {
    static const char *names[7] = {"y", "grad x", "grad w", "grad b", "tangent", "running_mean", "running_var"};
    CHECK_MSG(same_bits(out[0][k], out[1][k]), "%s %s: %s differs between 1 and 2 threads", bc->name, dts, names[k]);
  }
  { /* naive double reference (from the rounded inputs) */
    const int batch = bc->a.op == OP_BN && (bc->a.training || !bc->track);
    double *xd = to_d(x), *wd = to_d(w), *bd = to_d(b), *gyd = to_d(gy), *rmd = to_d(rm0), *rvd = to_d(rv0);
    double *yd = (double *)malloc(sizeof(double) * (size_t)x->numel), *gxd = (double *)malloc(sizeof(double) * (size_t)x->numel);
    double *gwd = (double *)malloc(sizeof(double) * (size_t)P), *gbd = (double *)malloc(sizeof(double) * (size_t)P);
    const double tol = dt == DL_F64 ? 1e-10 : 2e-5;
    double e;
    naive(&bc->a, batch, bc->ndim, bc->shape, xd, wd, bd, rmd, rvd, gyd, yd, gxd, gwd, gbd);
    e = max_rel(out[0][0], yd, x->numel);
    CHECK_MSG(e <= tol, "%s %s: y rel err %.3g vs naive", bc->name, dts, e);
    e = max_rel(out[0][1], gxd, x->numel);
    CHECK_MSG(e <= tol, "%s %s: grad x rel err %.3g vs naive", bc->name, dts, e);
    if (w) {
      e = max_rel(out[0][2], gwd, P);
      CHECK_MSG(e <= tol, "%s %s: grad w rel err %.3g vs naive", bc->name, dts, e);
    }
    if (b) {
      e = max_rel(out[0][3], gbd, P);
      CHECK_MSG(e <= tol, "%s %s: grad b rel err %.3g vs naive", bc->name, dts, e);
    }
    if (bc->track && bc->a.training) { /* running statistics: mean and unbiased variance of the batch */
      const int64_t C = bc->shape[1], m = x->numel / C;
      for (i = 0; i < C; i++) {
        const int64_t S = m / bc->shape[0];
        double mu = 0, var = 0;
        int64_t j;
        for (j = 0; j < m; j++) mu += xd[(j / S * C + i) * S + j % S];
        mu /= (double)m;
        for (j = 0; j < m; j++) var += (xd[(j / S * C + i) * S + j % S] - mu) * (xd[(j / S * C + i) * S + j % S] - mu);
        var /= (double)(m - 1);
        CHECK_REL(dl__get_at(out[0][5], i), 0.9 * rmd[i] + 0.1 * mu, dt == DL_F64 ? 1e-13 : 1e-6, 1e-3);
        CHECK_REL(dl__get_at(out[0][6], i), 0.9 * rvd[i] + 0.1 * var, dt == DL_F64 ? 1e-13 : 1e-6, 1e-3);
      }
    }
    free(xd); free(wd); free(bd); free(gyd); free(rmd); free(rvd);
    free(yd); free(gxd); free(gwd); free(gbd);
  }
  for (th = 0; th < 2; th++)
    for (k = 0; k < 7; k++) dl_tensor_free(out[th][k]);
  dl_tensor_free(x); dl_tensor_free(gy); dl_tensor_free(tx); dl_tensor_free(w); dl_tensor_free(b);
  dl_tensor_free(tw); dl_tensor_free(tb); dl_tensor_free(rm0); dl_tensor_free(rv0);
}

static void test_threads_and_naive(void) {
  /* each several tiles: per channel (>= 256 positions), rows of samples or rows
   * (blocks of about 16384 elements) */
  static const big_case cases[] = {
      {"bn [512, 200] train", {OP_BN, 1, 0, 0.1, 1e-5}, 2, {512, 200, 1, 1}, 1, 1, 1},
      {"bn [512, 200] eval", {OP_BN, 0, 0, 0.1, 1e-5}, 2, {512, 200, 1, 1}, 1, 1, 1},
      {"bn [128, 8, 5, 5] train", {OP_BN, 1, 0, 0.1, 1e-5}, 4, {128, 8, 5, 5}, 1, 1, 1},
      {"bn [128, 8, 5, 5] no stats", {OP_BN, 0, 0, 0.1, 1e-5}, 4, {128, 8, 5, 5}, 1, 0, 0},
      {"bn [96, 12, 40] eval", {OP_BN, 0, 0, 0.1, 1e-5}, 3, {96, 12, 40, 1}, 1, 1, 1},
      {"bn [4, 6, 16, 20] train (planes)", {OP_BN, 1, 0, 0.1, 1e-5}, 4, {4, 6, 16, 20}, 1, 1, 1},
      {"bn [4, 6, 300] eval (planes)", {OP_BN, 0, 0, 0.1, 1e-5}, 3, {4, 6, 300, 1}, 0, 1, 1},
      {"ln [1024, 40]", {OP_LN, 0, 1, 0, 1e-5}, 2, {1024, 40, 1, 1}, 1, 1, 0},
      {"ln [64, 16, 30] nnorm 2", {OP_LN, 0, 2, 0, 1e-5}, 3, {64, 16, 30, 1}, 1, 1, 0},
      {"ln [2048, 12] plain", {OP_LN, 0, 1, 0, 1e-5}, 2, {2048, 12, 1, 1}, 0, 0, 0},
      {"rms [1024, 40]", {OP_RMS, 0, 1, 0, 1e-6}, 2, {1024, 40, 1, 1}, 1, 0, 0},
      {"rms [8, 64, 2, 30] nnorm 2", {OP_RMS, 0, 2, 0, 1e-6}, 4, {8, 64, 2, 30}, 1, 0, 0},
  };
  size_t i;
  for (i = 0; i < sizeof cases / sizeof *cases; i++) {
    big_case_run(&cases[i], DL_F64, 900 + i);
    big_case_run(&cases[i], DL_F32, 900 + i);
  }
}

/* >>tangents in f32, no-grad, evaluation -------------------------------------- */

/* The f32 tangent (x, weight and bias tangents at once) agrees with the f64 one. */
static void test_tangent_f32(void) {
  static const norm_args as[4] = {{OP_BN, 1, 0, 0.1, 1e-5}, {OP_BN, 0, 0, 0.1, 1e-5}, {OP_LN, 0, 2, 0, 1e-5},
                                  {OP_RMS, 0, 1, 0, 1e-6}};
  int k;
  for (k = 0; k < 4; k++) {
    dl_tensor *t[2][6], *ty[2];
    dl_tape tp[2];
    int p, j;
    for (p = 0; p < 2; p++) {
      const dl_dtype dt = p ? DL_F64 : DL_F32;
      dl_rng rng = dl_rng_make(33 + (uint64_t)k);
      const int64_t pc = as[k].op == OP_BN ? 4 : 5;
      t[p][0] = dl_tensor_make(&ctx, dt, DL_SHAPE(3, 4, 5)); /* x */
      t[p][1] = dl_tensor_make(&ctx, dt, DL_SHAPE(3, 4, 5)); /* tx */
      t[p][2] = as[k].op == OP_LN ? dl_tensor_make(&ctx, dt, DL_SHAPE(4, 5)) : dl_tensor_make(&ctx, dt, DL_SHAPE(pc));
      t[p][3] = dl_tensor_make(&ctx, dt, t[p][2]->ndim, t[p][2]->shape);
      t[p][4] = dl_tensor_make(&ctx, dt, DL_SHAPE(4)); /* running stats */
      t[p][5] = dl_tensor_make(&ctx, dt, DL_SHAPE(4));
      for (j = 0; j < 4; j++) dl_tensor_rand_normal(t[p][j], &rng, j == 2 ? 1.0 : 0.2, 1.0);
      dl_tensor_rand_normal(t[p][4], &rng, 0, 1);
      dl_tensor_rand_uniform(t[p][5], &rng, 0.5, 2);
      dl_set_tangent(t[p][0], t[p][1]);
      dl_set_tangent(t[p][2], t[p][3]);
      dl_tape_init(&tp[p], &ctx, 0);
      ty[p] = call_op(&tp[p], &as[k], t[p][0], t[p][2], as[k].op == OP_BN ? t[p][3] : NULL,
                      as[k].op == OP_BN ? t[p][4] : NULL, as[k].op == OP_BN ? t[p][5] : NULL)->tangent;
    }
    CHECK(ty[0] && ty[1]);
    if (ty[0] && ty[1]) {
      double e = 0, sc = 0;
      int64_t i;
      for (i = 0; i < ty[1]->numel; i++) {
        e = fmax(e, fabs(dl__get_at(ty[0], i) - dl__get_at(ty[1], i)));
        sc = fmax(sc, fabs(dl__get_at(ty[1], i)));
      }
      CHECK_MSG(e <= 1e-5 * sc && sc > 0.1, "%s: f32 tangent off the f64 one by %.3g (scale %.3g)",
                op_names[as[k].op], e, sc);
    }
    for (p = 0; p < 2; p++) {
      dl_tape_free(&tp[p]);
      for (j = 0; j < 6; j++) dl_tensor_free(t[p][j]);
    }
  }
}

/* No-grad records nothing and gives the same values; training updates the
 * running statistics under no-grad too (like PyTorch); evaluation leaves
 * them alone; a tangent alone is still propagated. */
static void test_no_grad_eval(void) {
  dl_rng rng = dl_rng_make(3);
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(4, 3, 5)), *w = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3));
  dl_tensor *rm = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3)), *rv = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3));
  dl_tensor *rm0, *rv0, *y0, *y1, *tx = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(4, 3, 5));
  dl_tape tp;
  dl_tensor_rand_normal(x, &rng, 0, 1);
  dl_tensor_rand_normal(tx, &rng, 0, 1);
  dl_tensor_rand_normal(w, &rng, 1, 0.2);
  dl_tensor_fill(rm, 0);
  dl_tensor_fill(rv, 1);
  rm0 = clone(rm);
  rv0 = clone(rv);
  dl_requires_grad(w);
  dl_tape_init(&tp, &ctx, 0);
  y0 = dl_t_batch_norm(&tp, x, w, NULL, rm, rv, 0, 0.1, 1e-5);
  CHECK(same_bits(rm, rm0) && same_bits(rv, rv0)); /* evaluation: untouched */
  CHECK(y0->node != NULL);
  dl_no_grad_begin(&tp);
  y1 = dl_t_batch_norm(&tp, x, w, NULL, rm, rv, 0, 0.1, 1e-5);
  CHECK(y1->node == NULL && !(y1->flags & DL_TENSOR_REQUIRES_GRAD) && same_bits(y0, y1));
  y1 = dl_t_batch_norm(&tp, x, w, NULL, rm, rv, 1, 0.1, 1e-5);
  CHECK(!same_bits(rm, rm0) && !same_bits(rv, rv0) && y1->node == NULL);
  dl_set_tangent(x, tx);
  y1 = dl_t_layer_norm(&tp, x, 2, NULL, NULL, 1e-5);
  CHECK(y1->tangent != NULL && y1->node == NULL);
  y1 = dl_t_rms_norm(&tp, x, 1, NULL, 1e-5);
  CHECK(y1->tangent != NULL && y1->node == NULL);
  dl_set_tangent(x, NULL);
  dl_no_grad_end(&tp);
  y1 = dl_t_layer_norm(&tp, x, 1, NULL, NULL, 1e-5);
  CHECK(y1->node == NULL && y1->tangent == NULL); /* nothing requires a gradient */
  dl_tape_free(&tp);
  dl_tensor_free(x); dl_tensor_free(w); dl_tensor_free(rm); dl_tensor_free(rv);
  dl_tensor_free(rm0); dl_tensor_free(rv0); dl_tensor_free(tx);
}

/* >>batch norm + ReLU as one op ------------------------------------------------ */

/* The largest |a - b| over max |b| (0 when both are all zero). */
static double rel_diff(const dl_tensor *a, const dl_tensor *b) {
  double d = 0, m = 0;
  int64_t e;
  for (e = 0; e < b->numel; e++) {
    d = fmax(d, fabs(dl__get_at(a, e) - dl__get_at(b, e)));
    m = fmax(m, fabs(dl__get_at(b, e)));
  }
  return m > 0 ? d / m : d;
}
/* dl__t_batch_norm_relu (a Sequential's BatchNorm then ReLU) against
 * dl_t_relu(dl_t_batch_norm(...)): the output and the running statistics
 * bit for bit; the gradients of x, weight and bias (loss sum(y r), r of
 * both signs, so the mask matters) to 1e-12 of their largest (f64) or
 * 1e-6 (f32): the double sums of the masked loop may vectorise otherwise
 * than the plain one (the same bits where they vectorise alike); in the
 * row form ([16, 3, 5, 5]), the plane form (a batch of 2 of 9 x 9 maps),
 * rows wider than 16 (34, 33) and over [N, C] (BatchNorm1d), f32 and
 * f64, training and evaluation; H v (dl_hvp, a tangent only on a factor
 * after the op) likewise; and a Sequential of BatchNorm2d, ReLU records
 * the one fused node. */
static void test_bn_relu_fused(void) {
  static const int64_t shapes[7][4] = {{16, 3, 5, 5},  {2, 4, 9, 9},  {20, 6, 0, 0}, {4, 3, 8, 6},
                                       {700, 8, 3, 3}, {3, 2, 6, 34}, {2, 3, 5, 33}};
  /* [700, 8, 3, 3]: 3 row tiles of 228 samples and a last of 16; rows of 34 and 33: wider than
   * a vector of 16 floats (the pool's plane kernel, the map's loops) */
  static const int nds[7] = {4, 4, 2, 4, 4, 4, 4};
  const dl_pool2d_args pa = {2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* kernel 2x2 */
  int si, dt, tr, hv, pool;
  dl_tape tp;
  dl_tape_init(&tp, &ctx, 0);
  for (si = 0; si < 7; si++)
    for (pool = 0; pool < 2; pool++)
    for (dt = 0; dt < 2; dt++)
      for (tr = 0; tr < 2; tr++)
        for (hv = 0; hv < 2; hv++) {
          const dl_dtype T = dt ? DL_F64 : DL_F32;
          const int64_t C = shapes[si][1];
          dl_rng rng = dl_rng_make(40 + (uint64_t)(si * 8 + dt * 4 + tr * 2 + hv));
          dl_tensor *x[2], *w[2], *b[2], *rm[2], *rv[2], *y[2], *u[2], *r = NULL, *uv = NULL;
          int64_t ysh[4];
          int k;
          if (pool && nds[si] != 4) continue;
          memcpy(ysh, shapes[si], sizeof ysh);
          if (pool) ysh[2] /= 2, ysh[3] /= 2;
          x[0] = dl_tensor_make(&ctx, T, nds[si], shapes[si]);
          w[0] = dl_tensor_make(&ctx, T, DL_SHAPE(C));
          b[0] = dl_tensor_make(&ctx, T, DL_SHAPE(C));
          rm[0] = dl_tensor_make(&ctx, T, DL_SHAPE(C));
          rv[0] = dl_tensor_make(&ctx, T, DL_SHAPE(C));
          dl_tensor_rand_normal(x[0], &rng, 0.3, 1.5);
          dl_tensor_rand_normal(w[0], &rng, 1, 0.5);
          dl_tensor_rand_normal(b[0], &rng, 0, 0.5);
          dl_tensor_rand_normal(rm[0], &rng, 0.2, 0.3);
          dl_tensor_fill(rv[0], 1.7);
          r = dl_tensor_make(&ctx, T, nds[si], ysh);
          dl_tensor_rand_normal(r, &rng, 0, 1);
          u[0] = clone(r);
          uv = clone(r);
          dl_tensor_rand_normal(uv, &rng, 0, 1);
          x[1] = clone(x[0]); w[1] = clone(w[0]); b[1] = clone(b[0]); rm[1] = clone(rm[0]); rv[1] = clone(rv[0]);
          u[1] = clone(u[0]);
          for (k = 0; k < 2; k++) {
            dl_tensor *loss;
            dl_requires_grad(x[k]);
            dl_requires_grad(w[k]);
            dl_requires_grad(b[k]);
            if (hv) {
              dl_requires_grad(u[k]);
              dl_set_tangent(u[k], uv);
            }
            CHECK(pool ? dl__bn_relu_pool_fits(&tp, x[k], w[k], b[k]) : dl__bn_relu_fits(&tp, x[k], w[k], b[k]));
            if (k == 0 && pool) y[k] = dl__t_batch_norm_relu_pool(&tp, x[k], w[k], b[k], rm[k], rv[k], tr, 0.1, 1e-5);
            else if (k == 0) y[k] = dl__t_batch_norm_relu(&tp, x[k], w[k], b[k], rm[k], rv[k], tr, 0.1, 1e-5);
            else y[k] = dl_t_relu(&tp, dl_t_batch_norm(&tp, x[k], w[k], b[k], rm[k], rv[k], tr, 0.1, 1e-5));
            if (k == 1 && pool) y[k] = dl_t_max_pool2d(&tp, y[k], &pa);
            if (k == 0)
              CHECK(tp.last && strcmp(tp.last->op, pool ? "dl_t_batch_norm + relu + max_pool2d" : "dl_t_batch_norm + relu") == 0);
            loss = dl_t_sum_all(&tp, hv ? dl_t_square(&tp, dl_t_mul(&tp, y[k], u[k])) : dl_t_mul(&tp, y[k], u[k]));
            if (hv) dl_hvp(&tp, loss, NULL);
            else dl_backward(&tp, loss, NULL);
            if (k == 0) y[0] = clone(y[0]); /* (the tape is rewound before the second) */
            else y[1] = clone(y[1]);
            dl_tape_rewind(&tp);
          }
          {
            const double tol = dt ? 1e-12 : 1e-6;
            CHECK_MSG(same_bits(y[0], y[1]) && same_bits(rm[0], rm[1]) && same_bits(rv[0], rv[1]),
                      "case %d pool %d %s training %d hvp %d: fused and unfused outputs differ", si, pool,
                      dt ? "f64" : "f32", tr, hv);
            CHECK_MSG(rel_diff(x[0]->grad, x[1]->grad) <= tol && rel_diff(w[0]->grad, w[1]->grad) <= tol &&
                      rel_diff(b[0]->grad, b[1]->grad) <= tol,
                      "case %d pool %d %s training %d hvp %d: gradients differ by %.3g, %.3g, %.3g", si, pool,
                      dt ? "f64" : "f32", tr, hv, rel_diff(x[0]->grad, x[1]->grad), rel_diff(w[0]->grad, w[1]->grad),
                      rel_diff(b[0]->grad, b[1]->grad));
            if (hv)
              CHECK_MSG(x[0]->grad->tangent && rel_diff(x[0]->grad->tangent, x[1]->grad->tangent) <= tol &&
                        rel_diff(w[0]->grad->tangent, w[1]->grad->tangent) <= tol &&
                        rel_diff(b[0]->grad->tangent, b[1]->grad->tangent) <= tol &&
                        rel_diff(u[0]->grad->tangent, u[1]->grad->tangent) <= tol,
                        "case %d pool %d %s training %d: H v of the fused op differs", si, pool, dt ? "f64" : "f32", tr);
          }
          {
            double nz = 0;
            int64_t e;
            for (e = 0; e < x[0]->numel; e++) nz += dl__get_at(x[0]->grad, e) != 0;
            CHECK(nz > 0); /* a gradient flowed */
          }
          for (k = 0; k < 2; k++) {
            dl_set_tangent(u[k], NULL);
            dl_tensor_free(x[k]); dl_tensor_free(w[k]); dl_tensor_free(b[k]); dl_tensor_free(rm[k]);
            dl_tensor_free(rv[k]); dl_tensor_free(y[k]); dl_tensor_free(u[k]);
          }
          dl_tensor_free(r);
          dl_tensor_free(uv);
        }
  { /* the fused ops on 1 thread and on 2 (parallel from 1 element): the same bits, outputs and gradients */
    int pool2;
    for (pool2 = 0; pool2 < 2; pool2++) {
      dl_tensor *keep[2][4];
      int k, j;
      for (k = 0; k < 2; k++) {
        dl_ctx *c = k ? &parctx : &serctx;
        dl_tape t2;
        dl_rng rng = dl_rng_make(77);
        dl_tensor *x = dl_tensor_make(c, DL_F32, DL_SHAPE(700, 8, 3, 3)), *w = dl_tensor_make(c, DL_F32, DL_SHAPE(8));
        dl_tensor *b = dl_tensor_make(c, DL_F32, DL_SHAPE(8)), *y;
        dl_tensor_rand_normal(x, &rng, 0.2, 1);
        dl_tensor_rand_normal(w, &rng, 1, 0.3);
        dl_tensor_rand_normal(b, &rng, 0, 0.3);
        dl_requires_grad(x);
        dl_requires_grad(w);
        dl_requires_grad(b);
        dl_tape_init(&t2, c, 0);
        y = pool2 ? dl__t_batch_norm_relu_pool(&t2, x, w, b, NULL, NULL, 1, 0.1, 1e-5)
                  : dl__t_batch_norm_relu(&t2, x, w, b, NULL, NULL, 1, 0.1, 1e-5);
        dl_backward(&t2, dl_t_sum_all(&t2, dl_t_mul(&t2, y, y)), NULL);
        keep[k][0] = clone(y);
        keep[k][1] = clone(x->grad);
        keep[k][2] = clone(w->grad);
        keep[k][3] = clone(b->grad);
        dl_tape_free(&t2);
        dl_tensor_free(x);
        dl_tensor_free(w);
        dl_tensor_free(b);
      }
      for (j = 0; j < 4; j++) {
        CHECK_MSG(same_bits(keep[0][j], keep[1][j]), "pool %d: result %d differs between 1 and 2 threads", pool2, j);
        dl_tensor_free(keep[0][j]);
        dl_tensor_free(keep[1][j]);
      }
    }
  }
  { /* a Sequential fuses BatchNorm2d then ReLU into one node; its output is dl_t_relu(dl_t_batch_norm) */
    dl_model_desc md = {DL_F32, 5};
    dl_batchnorm_desc bd;
    dl_model *m = dl_model_make(&ctx, &md);
    dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(8, 3, 4, 4)), *y, *y1, *g0;
    dl_rng rng = dl_rng_make(9);
    memset(&bd, 0, sizeof bd);
    bd.features = 3;
    dl_batchnorm2d_make(m, NULL, NULL, &bd);
    dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
    CHECK(dl_model_pack(m) == DL_OK);
    dl_tensor_rand_normal(x, &rng, 0, 1);
    dl_requires_grad(x);
    y = dl_model_forward(m, &tp, x);
    CHECK(tp.nodes == 1 && strcmp(tp.last->op, "dl_t_batch_norm + relu") == 0);
    dl_backward(&tp, dl_t_sum_all(&tp, y), NULL);
    y = clone(y);
    g0 = clone(x->grad);
    dl_tape_rewind(&tp);
    dl_zero_grad(x);
    dl_model_zero_grad(m);
    y1 = dl_t_relu(&tp, dl_t_batch_norm(&tp, x, &m->params[0]->t, &m->params[1]->t, NULL, NULL, 1, 0.1, 1e-5));
    dl_backward(&tp, dl_t_sum_all(&tp, y1), NULL);
    CHECK(same_bits(y, y1) && rel_diff(g0, x->grad) <= 1e-6);
    dl_tape_rewind(&tp);
    dl_tensor_free(y);
    dl_tensor_free(g0);
    { /* then a MaxPool2d(2): the three as one node; a MaxPool2d(3) after instead: BatchNorm and ReLU only */
      dl_pool2d_desc pd;
      dl_model *m2 = dl_model_make(&ctx, &md), *m3 = dl_model_make(&ctx, &md);
      memset(&pd, 0, sizeof pd);
      pd.kernel = 2;
      dl_batchnorm2d_make(m2, NULL, NULL, &bd);
      dl_act_make(m2, NULL, NULL, DL_ACT_RELU, 0);
      dl_maxpool2d_make(m2, NULL, NULL, &pd);
      pd.kernel = 3;
      dl_batchnorm2d_make(m3, NULL, NULL, &bd);
      dl_act_make(m3, NULL, NULL, DL_ACT_RELU, 0);
      dl_maxpool2d_make(m3, NULL, NULL, &pd);
      CHECK(dl_model_pack(m2) == DL_OK && dl_model_pack(m3) == DL_OK);
      y = dl_model_forward(m2, &tp, x);
      CHECK(tp.nodes == 1 && strcmp(tp.last->op, "dl_t_batch_norm + relu + max_pool2d") == 0 && y->shape[2] == 2);
      y1 = dl_t_max_pool2d(&tp, dl_t_relu(&tp, dl_t_batch_norm(&tp, x, &m2->params[0]->t, &m2->params[1]->t, NULL,
                                                                 NULL, 1, 0.1, 1e-5)), &pa);
      CHECK(same_bits(y, y1));
      dl_tape_rewind(&tp);
      y = dl_model_forward(m3, &tp, x);
      CHECK(tp.nodes == 2 && strcmp(tp.last->op, "dl_t_max_pool2d") == 0 && y->shape[2] == 1);
      dl_tape_rewind(&tp);
      dl_model_free(m2);
      dl_model_free(m3);
    }
    dl_tensor_free(x);
    dl_model_free(m);
  }
  dl_tape_free(&tp);
}

/* >>panics ----------------------------------------------------------------- */

static void test_panics(void) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 3, 5)), *x32 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3, 5));
  dl_tensor *c3 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3)), *c4 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4));
  dl_tensor *c3f = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3)), *c13 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(1, 3));
  dl_tensor *x1 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(5)), *one = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(1, 3));
  dl_tensor *w5 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(5)), *w35 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 5));
  dl_tensor *w6 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(6)), *w53 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(5, 3));
  dl_tensor *i3 = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(2, 3, 5));
  dl_tape tp;
  dl_tensor_fill(x, 1);
  dl_tensor_fill(x32, 1);
  dl_tensor_fill(c3, 1);
  dl_tensor_fill(one, 1);
  dl_tensor_fill(w5, 1);
  dl_tensor_fill(w35, 1);
  dl_tape_init(&tp, &ctx, 0);
  /* batch norm: parameter and statistic shapes name the op and both shapes */
  EXPECT_PANIC(dl_t_batch_norm(&tp, x, c4, NULL, NULL, NULL, 1, 0.1, 1e-5), "dl_t_batch_norm", "weight",
               "f64[4]", "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_batch_norm(&tp, x, c3, c4, NULL, NULL, 1, 0.1, 1e-5), "dl_t_batch_norm", "bias", "f64[4]",
               "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_batch_norm(&tp, x, NULL, NULL, c13, c3, 0, 0.1, 1e-5), "dl_t_batch_norm", "running_mean",
               "f64[1, 3]", "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_batch_norm(&tp, x, NULL, NULL, c3, c4, 0, 0.1, 1e-5), "dl_t_batch_norm", "running_var",
               "f64[4]", "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_batch_norm(&tp, x, NULL, NULL, c3, NULL, 0, 0.1, 1e-5), "dl_t_batch_norm", "both or neither",
               "f64[3]", "NULL");
  EXPECT_PANIC(dl_t_batch_norm(&tp, x, c3f, NULL, NULL, NULL, 1, 0.1, 1e-5), "dl_t_batch_norm", "dtype",
               "f64[2, 3, 5]", "f32[3]");
  EXPECT_PANIC(dl_t_batch_norm(&tp, x32, c3, NULL, NULL, NULL, 1, 0.1, 1e-5), "dl_t_batch_norm", "dtype",
               "f32[2, 3, 5]", "f64[3]");
  EXPECT_PANIC(dl_t_batch_norm(&tp, x1, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5), "dl_t_batch_norm", "f64[5]",
               "at least 2 dimensions");
  EXPECT_PANIC(dl_t_batch_norm(&tp, one, NULL, NULL, c3, c3, 1, 0.1, 1e-5), "dl_t_batch_norm", "f64[1, 3]",
               "more than 1 value per channel");
  EXPECT_PANIC(dl_t_batch_norm(&tp, one, NULL, NULL, NULL, NULL, 0, 0.1, 1e-5), "dl_t_batch_norm", "f64[1, 3]",
               "more than 1 value per channel");
  EXPECT_PANIC(dl_t_batch_norm(&tp, x, NULL, NULL, NULL, NULL, 1, 0.1, -1e-5), "dl_t_batch_norm", "eps",
               "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_batch_norm(&tp, i3, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5), "dl_t_batch_norm", "i64[2, 3, 5]");
  /* evaluation with one sample per channel is fine */
  CHECK(dl_t_batch_norm(&tp, one, NULL, NULL, c3, c3, 0, 0.1, 0.0)->numel == 3);
  /* layer norm */
  EXPECT_PANIC(dl_t_layer_norm(&tp, x, 1, w6, NULL, 1e-5), "dl_t_layer_norm", "weight", "f64[6]", "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_layer_norm(&tp, x, 2, w35, w53, 1e-5), "dl_t_layer_norm", "bias", "f64[5, 3]",
               "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_layer_norm(&tp, x, 2, w5, NULL, 1e-5), "dl_t_layer_norm", "weight", "f64[5]", "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_layer_norm(&tp, x, 0, NULL, NULL, 1e-5), "dl_t_layer_norm", "nnorm 0", "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_layer_norm(&tp, x, 4, NULL, NULL, 1e-5), "dl_t_layer_norm", "nnorm 4", "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_layer_norm(&tp, x, 1, c3f, NULL, 1e-5), "dl_t_layer_norm", "dtype", "f32[3]");
  EXPECT_PANIC(dl_t_layer_norm(&tp, x, 1, NULL, NULL, NAN), "dl_t_layer_norm", "eps");
  /* rms norm */
  EXPECT_PANIC(dl_t_rms_norm(&tp, x, 1, w6, 1e-5), "dl_t_rms_norm", "weight", "f64[6]", "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_rms_norm(&tp, x, 2, w53, 1e-5), "dl_t_rms_norm", "weight", "f64[5, 3]", "f64[2, 3, 5]");
  EXPECT_PANIC(dl_t_rms_norm(&tp, x, -1, NULL, 1e-5), "dl_t_rms_norm", "nnorm -1");
  EXPECT_PANIC(dl_t_rms_norm(&tp, x, 1, NULL, -1.0), "dl_t_rms_norm", "eps");
  /* the right shapes pass */
  CHECK(dl_t_layer_norm(&tp, x, 2, w35, w35, 1e-5)->numel == 30);
  CHECK(dl_t_rms_norm(&tp, x, 1, w5, 1e-5)->numel == 30);
  dl_tape_free(&tp);
  dl_tensor_free(x); dl_tensor_free(x32); dl_tensor_free(c3); dl_tensor_free(c4); dl_tensor_free(c3f);
  dl_tensor_free(c13); dl_tensor_free(x1); dl_tensor_free(one); dl_tensor_free(w5); dl_tensor_free(w35);
  dl_tensor_free(w6); dl_tensor_free(w53); dl_tensor_free(i3);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  d.threads = 1;
  dl_ctx_init(&serctx, &d);
  d.threads = 2;
  d.parallel_threshold = 1;
  dl_ctx_init(&parctx, &d);
  RUN(test_fixtures_match_torch);
  RUN(test_running_stats);
  RUN(test_gradcheck);
  RUN(test_threads_and_naive);
  RUN(test_tangent_f32);
  RUN(test_no_grad_eval);
  RUN(test_bn_relu_fused);
  RUN(test_panics);
  return harness_finish();
}
