/* dl-test-cxx */
/* tests/test_tape.c - the reverse-mode tape, forward-mode tangents, custom
 * ops, and the ops defined in dl/ops.h itself (element-wise list, clamp,
 * where, matmul, linear): gradcheck, PyTorch fixtures, error messages,
 * steady-state allocation. */
#include "dl.h"
#include "harness.h"
#include "fixtures.h"
#include "fixtures2.h"

static dl_ctx pctx; /* panics land in the harness */

static dl_tensor *mk(int ndim, const int64_t *shape, uint64_t seed, double lo, double hi) {
  dl_rng r = dl_rng_make(seed);
  dl_tensor *t = dl_tensor_make(&pctx, DL_F64, ndim, shape);
  dl_tensor_rand_uniform(t, &r, lo, hi);
  return t;
}
/* values pushed away from 0 (kinks of abs/relu) */
static void away0(dl_tensor *t) {
  int64_t i;
  double *p = dl_f64(t);
  for (i = 0; i < t->numel; i++) p[i] = p[i] < 0 ? p[i] - 0.1 : p[i] + 0.1;
}
static void report(const char *what, int ok, const dl_gradcheck_result *r) {
  CHECK_MSG(ok, "%s: grad_err %.3g (input %d element %lld: analytic %.10g numeric %.10g) jvp_err %.3g",
            what, r->grad_err, r->input, (long long)r->index, r->analytic, r->numeric, r->jvp_err);
}

/* ---- the element-wise list on the tape -------------------------------------- */

typedef struct un_case { const char *name; dl_tensor *(*f)(dl_tape *, dl_tensor *); double lo, hi; int away; } un_case;
typedef struct unp_case { const char *name; dl_tensor *(*f)(dl_tape *, dl_tensor *, double); double p, lo, hi; int away; } unp_case;
typedef struct bin_case { const char *name; dl_tensor *(*f)(dl_tape *, dl_tensor *, dl_tensor *); double lo, hi; } bin_case;

static dl_tensor *(*g_un)(dl_tape *, dl_tensor *);
static dl_tensor *(*g_unp)(dl_tape *, dl_tensor *, double);
static dl_tensor *(*g_bin)(dl_tape *, dl_tensor *, dl_tensor *);
static double g_p;
static dl_tensor *f_un(dl_tape *tp, dl_tensor **in, void *u) {
  (void)u;
  return g_un(tp, in[0]);
}
static dl_tensor *f_unp(dl_tape *tp, dl_tensor **in, void *u) {
  (void)u;
  return g_unp(tp, in[0], g_p);
}
static dl_tensor *f_bin(dl_tape *tp, dl_tensor **in, void *u) {
  (void)u;
  return g_bin(tp, in[0], in[1]);
}
static void test_elementwise_gradcheck(void) {
#define UN(name, expr) {#name, dl_t_##name, -1.5, 1.5, 0},
  un_case un[] = {DL_OPS_UNARY(UN)};
#undef UN
#define UNP(name, expr) {#name, dl_t_##name, 0.7, -1.5, 1.5, 0},
  unp_case unp[] = {DL_OPS_UNARY_P(UNP)};
#undef UNP
#define BIN(name, expr) {#name, dl_t_##name, -1.5, 1.5},
  bin_case bin[] = {DL_OPS_BINARY(BIN)};
#undef BIN
  size_t k;
  dl_gradcheck_result r;
  char what[128];
  for (k = 0; k < sizeof un / sizeof un[0]; k++) {
    dl_tensor *x;
    int ok;
    if (!strcmp(un[k].name, "log") || !strcmp(un[k].name, "sqrt")) { un[k].lo = 0.3; un[k].hi = 3; }
    if (!strcmp(un[k].name, "log1p")) { un[k].lo = -0.5; un[k].hi = 3; }
    if (!strcmp(un[k].name, "abs") || !strcmp(un[k].name, "relu")) un[k].away = 1;
    x = mk(DL_SHAPE(3, 5), 10 + k, un[k].lo, un[k].hi);
    if (un[k].away) away0(x);
    dl_requires_grad(x);
    g_un = un[k].f;
    ok = dl_gradcheck(&pctx, f_un, NULL, 1, &x, 1e-6, 1e-6, &r);
    snprintf(what, sizeof what, "dl_t_%s", un[k].name);
    report(what, ok, &r);
    dl_tensor_free(x);
  }
  for (k = 0; k < sizeof unp / sizeof unp[0]; k++) {
    dl_tensor *x;
    int ok;
    if (!strcmp(unp[k].name, "pow_scalar")) { unp[k].lo = 0.3; unp[k].hi = 3; unp[k].p = 2.5; }
    x = mk(DL_SHAPE(4, 3), 40 + k, unp[k].lo, unp[k].hi);
    away0(x);
    dl_requires_grad(x);
    g_unp = unp[k].f;
    g_p = unp[k].p;
    ok = dl_gradcheck(&pctx, f_unp, NULL, 1, &x, 1e-6, 1e-6, &r);
    snprintf(what, sizeof what, "dl_t_%s", unp[k].name);
    report(what, ok, &r);
    dl_tensor_free(x);
  }
  for (k = 0; k < sizeof bin / sizeof bin[0]; k++) {
    /* broadcast: (2, 1, 4) with (3, 1) -> (2, 3, 4); then a transposed view */
    dl_tensor *in[2];
    int ok, pos = !strcmp(bin[k].name, "pow") || !strcmp(bin[k].name, "div");
    in[0] = mk(DL_SHAPE(2, 1, 4), 70 + k, pos ? 0.5 : -1.5, pos ? 2.0 : 1.5);
    in[1] = mk(DL_SHAPE(3, 1), 90 + k, pos ? 0.5 : -1.5, pos ? 2.0 : 1.5);
    dl_requires_grad(in[0]);
    dl_requires_grad(in[1]);
    g_bin = bin[k].f;
    ok = dl_gradcheck(&pctx, f_bin, NULL, 2, in, 1e-6, 1e-6, &r);
    snprintf(what, sizeof what, "dl_t_%s broadcast", bin[k].name);
    report(what, ok, &r);
    dl_tensor_free(in[0]);
    dl_tensor_free(in[1]);
    { /* the first operand a transposed (strided) view of its storage */
      dl_tensor *base = mk(DL_SHAPE(4, 3), 110 + k, pos ? 0.5 : -1.5, pos ? 2.0 : 1.5);
      dl_tensor view = dl_view_transpose(base, 0, 1);
      in[0] = &view;
      in[1] = mk(DL_SHAPE(3, 4), 130 + k, pos ? 0.5 : -1.5, pos ? 2.0 : 1.5);
      dl_requires_grad(in[0]);
      dl_requires_grad(in[1]);
      ok = dl_gradcheck(&pctx, f_bin, NULL, 2, in, 1e-6, 1e-6, &r);
      snprintf(what, sizeof what, "dl_t_%s strided view", bin[k].name);
      report(what, ok, &r);
      dl_tensor_free(view.grad);
      dl_tensor_free(base);
      dl_tensor_free(in[1]);
    }
  }
}

/* Every op of the list on the tape agrees with PyTorch (tests/fixtures/ops.txt):
 * forward values and input gradients of sum(y * gy), f32 and f64. */
static dl_tensor *fx_tensor(const fx_case *c, int which, const double *v, dl_dtype dt) {
  dl_tensor *t = dl_tensor_make(&pctx, dt, c->ndim[which], c->shape[which]);
  int64_t i;
  for (i = 0; i < t->numel; i++) dl__set_at(t, i, v[i]);
  return t;
}
static double max_rel(const dl_tensor *got, const double *want) {
  double worst = 0, scale = 0;
  int64_t i;
  for (i = 0; i < got->numel; i++) scale = fmax(scale, fabs(want[i]));
  for (i = 0; i < got->numel; i++) {
    double e = fabs(dl__get_at(got, i) - want[i]) / fmax(fmax(fabs(want[i]), 1e-3 * scale), 1e-30);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}
static void test_elementwise_torch(void) {
  fx_set s;
  int i, seen = 0;
  dl_tape tp;
  if (!fx_load(&s)) { SKIP("%s", s.err); }
  dl_tape_init(&tp, &pctx, 0);
  for (i = 0; i < s.n; i++) {
    const fx_case *c = &s.cases[i];
    dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
    dl_tensor *x0 = fx_tensor(c, 0, c->x[0], dt), *x1 = c->nin > 1 ? fx_tensor(c, 1, c->x[1], dt) : NULL;
    dl_tensor *gy = fx_tensor(c, 2, c->gy, dt), *y = NULL;
    double tol = c->f64 ? 1e-12 : 1e-5;
    dl_requires_grad(x0);
    if (x1) dl_requires_grad(x1);
#define UN(name, expr) if (!strcmp(c->op, #name)) y = dl_t_##name(&tp, x0);
#define UNP(name, expr) if (!strcmp(c->op, #name)) y = dl_t_##name(&tp, x0, c->p0);
#define BIN(name, expr) if (!strcmp(c->op, #name)) y = dl_t_##name(&tp, x0, x1);
    DL_OPS_UNARY(UN) DL_OPS_UNARY_P(UNP) DL_OPS_BINARY(BIN)
#undef UN
#undef UNP
#undef BIN
    CHECK_MSG(y != NULL, "fixture op %s has no dl_t_ function", c->op);
    if (y) {
      double e;
      seen++;
      dl_backward(&tp, y, gy);
      e = max_rel(y, c->y);
      CHECK_MSG(e <= tol, "%s %s: y rel err %.3g (line %d)", c->op, c->f64 ? "f64" : "f32", e, c->line);
      e = max_rel(x0->grad, c->g[0]);
      CHECK_MSG(e <= tol, "%s %s: g0 rel err %.3g (line %d)", c->op, c->f64 ? "f64" : "f32", e, c->line);
      if (x1) {
        e = max_rel(x1->grad, c->g[1]);
        CHECK_MSG(e <= tol, "%s %s: g1 rel err %.3g", c->op, c->f64 ? "f64" : "f32", e);
      }
    }
    dl_tape_rewind(&tp);
    dl_tensor_free(x0);
    dl_tensor_free(x1);
    dl_tensor_free(gy);
  }
  CHECK(seen == s.n && seen >= 2 * 25);
  dl_tape_free(&tp);
  fx_free(&s);
}

/* ---- clamp, where, matmul, linear ------------------------------------------- */

static dl_tensor *f_clamp(dl_tape *tp, dl_tensor **in, void *u) { (void)u; return dl_t_clamp(tp, in[0], -0.5, 0.7); }
static dl_tensor *f_where(dl_tape *tp, dl_tensor **in, void *u) { (void)u; return dl_t_where(tp, in[0], in[1], in[2]); }
static dl_tensor *f_matmul(dl_tape *tp, dl_tensor **in, void *u) { (void)u; return dl_t_matmul(tp, in[0], in[1]); }
static dl_tensor *f_linear(dl_tape *tp, dl_tensor **in, void *u) { (void)u; return dl_t_linear(tp, in[0], in[1], in[2]); }
static dl_tensor *f_linear_nb(dl_tape *tp, dl_tensor **in, void *u) { (void)u; return dl_t_linear(tp, in[0], in[1], NULL); }

static void test_other_ops_gradcheck(void) {
  dl_gradcheck_result r;
  dl_tensor *in[3];
  int k;
  { /* clamp: values kept away from the bounds */
    dl_tensor *x = mk(DL_SHAPE(4, 5), 1, -1.5, 1.5);
    int64_t i;
    for (i = 0; i < x->numel; i++) {
      double *p = dl_f64(x);
      if (fabs(p[i] + 0.5) < 0.05 || fabs(p[i] - 0.7) < 0.05) p[i] += 0.2;
    }
    dl_requires_grad(x);
    report("dl_t_clamp", dl_gradcheck(&pctx, f_clamp, NULL, 1, &x, 1e-6, 1e-6, &r), &r);
    dl_tensor_free(x);
  }
  { /* where: mask (3, 1) broadcast against a (2, 3, 4) and b (4) */
    dl_tensor *c = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(3, 1));
    dl_f64(c)[0] = 1; dl_f64(c)[1] = 0; dl_f64(c)[2] = 1;
    in[0] = c;
    in[1] = mk(DL_SHAPE(2, 3, 4), 2, -1, 1);
    in[2] = mk(DL_SHAPE(4), 3, -1, 1);
    dl_requires_grad(in[1]);
    dl_requires_grad(in[2]);
    report("dl_t_where", dl_gradcheck(&pctx, f_where, NULL, 3, in, 1e-6, 1e-6, &r), &r);
    CHECK(fabs(dl_f64(in[2]->grad)[0]) > 0); /* b gets gradient from the masked-off row */
    for (k = 0; k < 3; k++) dl_tensor_free(in[k]);
  }
  { /* matmul: plain, batched, shared B over a batch, transposed views */
    dl_tensor *a = mk(DL_SHAPE(3, 4), 4, -1, 1), *b = mk(DL_SHAPE(4, 5), 5, -1, 1);
    dl_tensor *ab = mk(DL_SHAPE(2, 3, 4), 6, -1, 1), *bb = mk(DL_SHAPE(2, 4, 5), 7, -1, 1);
    dl_tensor *at_base = mk(DL_SHAPE(4, 3), 8, -1, 1), at = dl_view_transpose(at_base, 0, 1);
    dl_tensor *bt_base = mk(DL_SHAPE(5, 4), 9, -1, 1), bt = dl_view_transpose(bt_base, 0, 1);
    dl_tensor *all[] = {a, b, ab, bb, &at, &bt};
    for (k = 0; k < 6; k++) dl_requires_grad(all[k]);
    in[0] = a; in[1] = b;
    report("dl_t_matmul 2-d", dl_gradcheck(&pctx, f_matmul, NULL, 2, in, 1e-6, 1e-6, &r), &r);
    in[0] = ab; in[1] = bb;
    report("dl_t_matmul batched", dl_gradcheck(&pctx, f_matmul, NULL, 2, in, 1e-6, 1e-6, &r), &r);
    in[0] = ab; in[1] = b;
    report("dl_t_matmul shared B", dl_gradcheck(&pctx, f_matmul, NULL, 2, in, 1e-6, 1e-6, &r), &r);
    in[0] = &at; in[1] = &bt;
    report("dl_t_matmul transposed views", dl_gradcheck(&pctx, f_matmul, NULL, 2, in, 1e-6, 1e-6, &r), &r);
    dl_tensor_free(at.grad);
    dl_tensor_free(bt.grad);
    for (k = 0; k < 4; k++) dl_tensor_free(all[k]);
    dl_tensor_free(at_base);
    dl_tensor_free(bt_base);
  }
  { /* linear: 2-d and 3-d input, with and without bias */
    dl_tensor *x2 = mk(DL_SHAPE(5, 4), 10, -1, 1), *x3 = mk(DL_SHAPE(2, 3, 4), 11, -1, 1);
    dl_tensor *w = mk(DL_SHAPE(6, 4), 12, -1, 1), *b = mk(DL_SHAPE(6), 13, -1, 1);
    dl_tensor *all[] = {x2, x3, w, b};
    for (k = 0; k < 4; k++) dl_requires_grad(all[k]);
    in[0] = x2; in[1] = w; in[2] = b;
    report("dl_t_linear", dl_gradcheck(&pctx, f_linear, NULL, 3, in, 1e-6, 1e-6, &r), &r);
    in[0] = x3;
    report("dl_t_linear 3-d", dl_gradcheck(&pctx, f_linear, NULL, 3, in, 1e-6, 1e-6, &r), &r);
    report("dl_t_linear no bias", dl_gradcheck(&pctx, f_linear_nb, NULL, 2, in, 1e-6, 1e-6, &r), &r);
    { /* a strided x: the forward's contiguous copy serves the weight gradient */
      dl_tensor *xb = mk(DL_SHAPE(4, 5), 14, -1, 1), xt = dl_view_transpose(xb, 0, 1);
      dl_requires_grad(&xt);
      in[0] = &xt;
      report("dl_t_linear strided x", dl_gradcheck(&pctx, f_linear, NULL, 3, in, 1e-6, 1e-6, &r), &r);
      dl_tensor_free(xt.grad);
      dl_tensor_free(xb);
    }
    { /* a weight view with no unit stride (every other column): copied once for the GEMM */
      dl_tensor *wb = mk(DL_SHAPE(6, 8), 15, -1, 1), ws = dl_view_slice(wb, 1, 0, 8, 2);
      dl_requires_grad(&ws);
      in[0] = x2; in[1] = &ws;
      report("dl_t_linear weight without unit stride", dl_gradcheck(&pctx, f_linear, NULL, 3, in, 1e-6, 1e-6, &r), &r);
      dl_tensor_free(ws.grad);
      dl_tensor_free(wb);
    }
    for (k = 0; k < 4; k++) dl_tensor_free(all[k]);
  }
}

/* clamp, where, matmul, linear against PyTorch (tests/fixtures/core.txt from
 * tools/fixtures_core.py): outputs and input gradients, f32 and f64 */
static void test_core_torch(void) {
  static const char *names[] = {"clamp", "where", "matmul", "matmul_batched", "matmul_shared",
                                "linear", "linear_3d", "linear_nobias"};
  static const char *inputs[] = {"x", "c", "a", "b", "w"};
  fx2_set s;
  dl_tape tp;
  size_t k;
  int f64, seen = 0;
  if (!fx2_load(&s, "tests/fixtures/core.txt")) { SKIP("%s", s.err); }
  dl_tape_init(&tp, &pctx, 0);
  for (k = 0; k < sizeof names / sizeof names[0]; k++)
    for (f64 = 0; f64 < 2; f64++) {
      const fx2_case *c = fx2_find(&s, names[k], f64);
      dl_dtype dt = f64 ? DL_F64 : DL_F32;
      dl_tensor *t[5], *y = NULL, *gy;
      double tol = f64 ? 1e-12 : 1e-5, e;
      size_t j;
      CHECK_MSG(c != NULL, "fixture %s missing", names[k]);
      if (!c) continue;
      for (j = 0; j < 5; j++) {
        t[j] = fx2_make(c, inputs[j], dt);
        if (t[j] && j != 1) dl_requires_grad(t[j]);
      }
      gy = fx2_make(c, "gy", dt);
      if (k == 0) y = dl_t_clamp(&tp, t[0], fx2_param(c, "lo", 0), fx2_param(c, "hi", 0));
      else if (k == 1) y = dl_t_where(&tp, t[1], t[2], t[3]);
      else if (k <= 4) y = dl_t_matmul(&tp, t[2], t[3]);
      else y = dl_t_linear(&tp, t[0], t[4], t[3]);
      dl_backward(&tp, y, gy);
      /* matmul/linear (k >= 2) are sums: norm-wise in f32, as GEMM bounds are */
      e = (k >= 2 && !f64) ? fx2_err_norm(y, fx2_get(c, "y")) : fx2_err(y, fx2_get(c, "y"));
      CHECK_MSG(e <= tol, "%s %s: y rel err %.3g", names[k], f64 ? "f64" : "f32", e);
      for (j = 0; j < 5; j++) {
        char key[40];
        if (!t[j] || j == 1) continue;
        snprintf(key, sizeof key, "g_%s", inputs[j]);
        e = (k >= 2 && !f64) ? fx2_err_norm(t[j]->grad, fx2_get(c, key)) : fx2_err(t[j]->grad, fx2_get(c, key));
        CHECK_MSG(e <= tol, "%s %s: %s rel err %.3g", names[k], f64 ? "f64" : "f32", key, e);
      }
      seen++;
      dl_tape_rewind(&tp);
      for (j = 0; j < 5; j++) dl_tensor_free(t[j]);
      dl_tensor_free(gy);
    }
  CHECK(seen == 16);
  dl_tape_free(&tp);
  fx2_free(&s);
}

/* matmul and linear against plain loops in f32 (PyTorch's are the same sums) */
static void test_linear_values(void) {
  dl_tape tp;
  dl_tensor *x = dl_tensor_make(&pctx, DL_F32, DL_SHAPE(3, 2)), *w = dl_tensor_make(&pctx, DL_F32, DL_SHAPE(2, 2));
  dl_tensor *b = dl_tensor_make(&pctx, DL_F32, DL_SHAPE(2)), *y;
  float xs[] = {1, 2, 3, 4, 5, 6}, ws[] = {1, -1, 0.5f, 2}, bs[] = {10, 20};
  memcpy(x->data, xs, sizeof xs);
  memcpy(w->data, ws, sizeof ws);
  memcpy(b->data, bs, sizeof bs);
  dl_tape_init(&tp, &pctx, 0);
  y = dl_t_linear(&tp, x, w, b);
  CHECK(y->shape[0] == 3 && y->shape[1] == 2);
  CHECK_NEAR(dl_f32(y)[0], 1 - 2 + 10, 0);
  CHECK_NEAR(dl_f32(y)[1], 0.5 + 4 + 20, 0);
  CHECK_NEAR(dl_f32(y)[5], 2.5 + 12 + 20, 0);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
}

/* ---- a user's element-wise op: one line at file scope ----------------------- */

DL_DEFINE_OP1(softsign, dl_div(x0, dl_add(1.0, dl_abs(x0))))

static dl_tensor *f_softsign(dl_tape *tp, dl_tensor **in, void *u) {
  (void)u;
  return dl_t_mul(tp, DL_T_MAP1(tp, softsign, in[0]), in[1]);
}
static void test_user_op(void) {
  dl_tape tp;
  dl_tensor *x = mk(DL_SHAPE(7), 20, -2, 2), *y, *seed = mk(DL_SHAPE(7), 21, 1, 1), *in[2];
  dl_gradcheck_result r;
  int64_t i;
  away0(x);
  dl_requires_grad(x);
  dl_tape_init(&tp, &pctx, 0);
  y = DL_T_MAP1(&tp, softsign, x);
  dl_backward(&tp, y, seed);
  for (i = 0; i < 7; i++) {
    double v = dl_f64(x)[i];
    CHECK_NEAR(dl_f64(y)[i], v / (1 + fabs(v)), 1e-15);
    CHECK_NEAR(dl_f64(x->grad)[i], 1 / ((1 + fabs(v)) * (1 + fabs(v))), 1e-14); /* derived, not written */
  }
  dl_tape_free(&tp);
  in[0] = x;
  in[1] = mk(DL_SHAPE(3, 1), 22, -1, 1);
  /* (7) * (3, 1) broadcasts to (3, 7) */
  dl_requires_grad(in[1]);
  report("user op softsign", dl_gradcheck(&pctx, f_softsign, NULL, 2, in, 1e-6, 1e-6, &r), &r);
  dl_tensor_free(x);
  dl_tensor_free(in[1]);
  dl_tensor_free(seed);
}

/* ---- tape semantics ----------------------------------------------------------- */

/* a small two-layer net: loss = sum(tanh(x W1^T + b1) * head) */
typedef struct net { dl_tensor *x, *w1, *b1, *h1, *h2; } net;
static net net_make(void) {
  net n;
  n.x = mk(DL_SHAPE(4, 3), 30, -1, 1);
  n.w1 = mk(DL_SHAPE(5, 3), 31, -1, 1);
  n.b1 = mk(DL_SHAPE(5), 32, -1, 1);
  n.h1 = mk(DL_SHAPE(5), 33, -1, 1);
  n.h2 = mk(DL_SHAPE(5), 34, -1, 1);
  dl_requires_grad(n.w1);
  dl_requires_grad(n.b1);
  dl_requires_grad(n.h1);
  dl_requires_grad(n.h2);
  return n;
}
static void net_free(net *n) {
  dl_tensor_free(n->x); dl_tensor_free(n->w1); dl_tensor_free(n->b1); dl_tensor_free(n->h1); dl_tensor_free(n->h2);
}
static void zero_all(net *n) { dl_zero_grad(n->w1); dl_zero_grad(n->b1); dl_zero_grad(n->h1); dl_zero_grad(n->h2); }

/* The Flux paper's listing 4: a shared trunk, two heads, two losses
 * back-propagated one after the other before one update; the gradients add. */
static void test_two_losses_accumulate(void) {
  net n = net_make();
  dl_tape tp;
  dl_tensor *trunk, *l1, *l2, *w1_both, *b1_both;
  dl_tape_init(&tp, &pctx, 0);
  zero_all(&n);
  trunk = dl_t_tanh(&tp, dl_t_linear(&tp, n.x, n.w1, n.b1));
  l1 = dl_t_sum_all(&tp, dl_t_mul(&tp, trunk, n.h1));
  l2 = dl_t_sum_all(&tp, dl_t_square(&tp, dl_t_mul(&tp, trunk, n.h2)));
  dl_backward(&tp, l1, NULL);
  dl_backward(&tp, l2, NULL);
  w1_both = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(5, 3));
  b1_both = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(5));
  dl_tensor_copy(w1_both, n.w1->grad);
  dl_tensor_copy(b1_both, n.b1->grad);
  CHECK(fabs(dl_f64(n.h1->grad)[0]) > 0 && fabs(dl_f64(n.h2->grad)[0]) > 0);
  dl_tape_rewind(&tp);
  /* the same as back-propagating l1 + l2 once */
  zero_all(&n);
  trunk = dl_t_tanh(&tp, dl_t_linear(&tp, n.x, n.w1, n.b1));
  l1 = dl_t_sum_all(&tp, dl_t_mul(&tp, trunk, n.h1));
  l2 = dl_t_sum_all(&tp, dl_t_square(&tp, dl_t_mul(&tp, trunk, n.h2)));
  dl_backward(&tp, dl_t_add(&tp, l1, l2), NULL);
  {
    int64_t i;
    double worst = 0;
    for (i = 0; i < 15; i++) worst = fmax(worst, fabs(dl_f64(w1_both)[i] - dl_f64(n.w1->grad)[i]));
    for (i = 0; i < 5; i++) worst = fmax(worst, fabs(dl_f64(b1_both)[i] - dl_f64(n.b1->grad)[i]));
    CHECK_MSG(worst < 1e-13, "accumulated vs joint: %g", worst);
  }
  /* without zero_grad, a second backward of the same loss adds again */
  {
    double g0 = dl_f64(n.h1->grad)[0];
    dl_tape_rewind(&tp);
    trunk = dl_t_tanh(&tp, dl_t_linear(&tp, n.x, n.w1, n.b1));
    l1 = dl_t_sum_all(&tp, dl_t_mul(&tp, trunk, n.h1));
    dl_backward(&tp, l1, NULL);
    CHECK(dl_f64(n.h1->grad)[0] != g0);
  }
  dl_tape_free(&tp);
  dl_tensor_free(w1_both);
  dl_tensor_free(b1_both);
  net_free(&n);
}

static void test_no_grad_detach_keep(void) {
  net n = net_make();
  dl_tape tp;
  dl_tensor *h, *loss;
  int64_t nodes;
  dl_tape_init(&tp, &pctx, 0);
  /* no-grad: nothing recorded, outputs need no gradient; scopes nest */
  dl_no_grad_begin(&tp);
  dl_no_grad_begin(&tp);
  h = dl_t_tanh(&tp, dl_t_linear(&tp, n.x, n.w1, n.b1));
  dl_no_grad_end(&tp);
  CHECK(tp.nodes == 0 && !dl_requires_grad_p(h) && !dl_grad_enabled(&tp));
  dl_no_grad_end(&tp);
  CHECK(dl_grad_enabled(&tp));
  EXPECT_PANIC(dl_no_grad_end(&tp), "dl_no_grad_end", "no no-grad scope");
  /* detach: the gradient stops there */
  zero_all(&n);
  h = dl_t_tanh(&tp, dl_t_linear(&tp, n.x, n.w1, n.b1));
  nodes = tp.nodes;
  loss = dl_t_sum_all(&tp, dl_t_mul(&tp, dl_detach(&tp, h), n.h1));
  dl_backward(&tp, loss, NULL);
  CHECK(dl_f64(n.w1->grad)[0] == 0 && dl_f64(n.h1->grad)[0] != 0);
  CHECK(tp.nodes == nodes + 2);
  /* keep the gradient of an intermediate: d loss / d h = head, per row */
  dl_tape_rewind(&tp);
  h = dl_t_tanh(&tp, dl_t_linear(&tp, n.x, n.w1, n.b1));
  dl_keep_grad(h);
  {
    dl_tensor *z = dl_t_linear(&tp, n.x, n.w1, n.b1);
    loss = dl_t_sum_all(&tp, dl_t_mul(&tp, h, n.h1));
    dl_backward(&tp, loss, NULL);
    CHECK(h->grad != NULL && z->grad == NULL); /* kept / dropped */
    if (h->grad) CHECK_NEAR(dl_f64(h->grad)[3 * 5 + 2], dl_f64(n.h1)[2], 0);
  }
  dl_tape_free(&tp);
  net_free(&n);
}

/* The backward walk's memory: a chain of 40 ops on [64, 256] stores 40
 * outputs, but its gradients are spent one after another, so the walk needs
 * a few buffers, not 40 (each rule's scratch goes when it returns; each spent
 * gradient is reused). The gradient is checked against forward mode (the
 * tangent of the loss along v is <grad, v>), and again after a second walk
 * of the same loss reuses the first walk's buffers. */
static void test_backward_memory(void) {
  const int64_t R = 64, C = 256;
  const size_t one = (size_t)(R * C) * sizeof(double);
  dl_tensor *x = mk(DL_SHAPE(R, C), 41, -1, 1), *v = mk(DL_SHAPE(R, C), 42, -1, 1);
  dl_tensor *w = mk(DL_SHAPE(C, C), 43, -0.1, 0.1), *h, *loss;
  dl_tape tp;
  size_t fwd, walk;
  double dot = 0;
  int k, round;
  int64_t i;
  dl_requires_grad(x);
  dl_set_tangent(x, v);
  dl_tape_init(&tp, &pctx, 0);
  for (round = 0; round < 2; round++) {
    dl_tape_rewind(&tp);
    dl_zero_grad(x);
    h = x;
    for (k = 0; k < 40; k++) {
      h = k % 3 == 0 ? dl_t_tanh(&tp, h) : k % 3 == 1 ? dl_t_mul(&tp, h, h) : dl_t_sin(&tp, h);
      if (k == 20) h = dl_t_matmul(&tp, h, w);
    }
    loss = dl_t_sum_all(&tp, h);
    fwd = tp.arena.used;
    tp.arena.high = fwd; /* the walk's own high-water mark (the arena's block is already large enough) */
    dl_backward(&tp, loss, NULL);
    walk = tp.arena.high - fwd;
    CHECK_MSG(walk <= 4 * one, "round %d: the walk took %zu bytes more than the forward pass (%zu per gradient)",
              round, walk, one);
    dot = 0;
    for (i = 0; i < R * C; i++) dot += dl_f64(x->grad)[i] * dl_f64(v)[i];
    CHECK_MSG(fabs(dot - dl_f64(loss->tangent)[0]) <= 1e-10 * (1 + fabs(dot)), "round %d: <grad, v> %.15g, tangent %.15g",
              round, dot, dl_f64(loss->tangent)[0]);
  }
  /* an input its rule never asks a gradient for (where's condition) gets
   * none: nothing flows back through log(0) = -inf (no 0 * inf = NaN), and
   * the condition's own rule does not run */
  {
    dl_tensor *x0 = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(2)), *a = mk(DL_SHAPE(2), 44, 1, 2), *cond, *y2;
    dl_tape t2;
    dl_f64(x0)[0] = 0;
    dl_f64(x0)[1] = 1;
    dl_requires_grad(x0);
    dl_requires_grad(a);
    dl_tape_init(&t2, &pctx, 0);
    cond = dl_t_log(&t2, x0);
    dl_keep_grad(cond);
    y2 = dl_t_where(&t2, cond, a, dl_t_mul_scalar(&t2, a, 3.0));
    dl_backward(&t2, dl_t_sum_all(&t2, y2), NULL);
    CHECK_MSG(dl_f64(x0->grad)[0] == 0 && dl_f64(x0->grad)[1] == 0, "the condition's input got %g %g",
              dl_f64(x0->grad)[0], dl_f64(x0->grad)[1]);
    CHECK(cond->grad == NULL);
    CHECK(dl_f64(a->grad)[0] == 1 && dl_f64(a->grad)[1] == 3); /* log 0 = -inf: a; log 1 = 0: 3a */
    dl_tape_free(&t2);
    dl_tensor_free(x0);
    dl_tensor_free(a);
  }
  /* a second walk of the same loss adds the same gradient again */
  {
    dl_tensor *g1 = dl_tensor_make(&pctx, DL_F64, DL_SHAPE(R, C));
    dl_tensor_copy(g1, x->grad);
    dl_backward(&tp, loss, NULL);
    for (i = 0; i < R * C; i++)
      if (fabs(dl_f64(x->grad)[i] - 2 * dl_f64(g1)[i]) > 1e-12 * (1 + fabs(dl_f64(g1)[i]))) break;
    CHECK_MSG(i == R * C, "second walk: element %lld is %.15g, twice the first is %.15g", (long long)i,
              i < R * C ? dl_f64(x->grad)[i] : 0.0, i < R * C ? 2 * dl_f64(g1)[i] : 0.0);
    dl_tensor_free(g1);
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(v);
  dl_tensor_free(w);
}

static void test_backward_errors(void) {
  net n = net_make();
  dl_tape tp;
  dl_tensor *h, *loss;
  dl_tape_init(&tp, &pctx, 0);
  h = dl_t_tanh(&tp, dl_t_linear(&tp, n.x, n.w1, n.b1));
  EXPECT_PANIC(dl_backward(&tp, h, NULL), "dl_backward", "not a scalar", "f64[4, 5]", "seed");
  loss = dl_t_sum_all(&tp, h);
  dl_backward(&tp, loss, NULL);
  dl_tape_rewind(&tp);
  EXPECT_PANIC(dl_backward(&tp, loss, NULL), "dl_backward", "rewound");
  dl_no_grad_begin(&tp);
  h = dl_t_sum_all(&tp, dl_t_tanh(&tp, n.x));
  dl_no_grad_end(&tp);
  h = dl_t_tanh(&tp, dl_t_linear(&tp, n.x, n.w1, n.b1));
  EXPECT_PANIC(dl_backward(&tp, n.x, NULL), "dl_backward", "not recorded on this tape");
  dl_tape_free(&tp);
  net_free(&n);
}

static void test_shape_errors(void) {
  dl_tape tp;
  dl_tensor *a = mk(DL_SHAPE(2, 3), 1, 0, 1), *b = mk(DL_SHAPE(4), 2, 0, 1);
  dl_tensor *f = dl_tensor_make(&pctx, DL_F32, DL_SHAPE(2, 3));
  dl_tape_init(&tp, &pctx, 0);
  EXPECT_PANIC(dl_t_add(&tp, a, b), "dl_t_add", "f64[2, 3]", "f64[4]", "broadcast");
  EXPECT_PANIC(dl_t_mul(&tp, a, f), "dl_t_mul", "f64[2, 3]", "f32[2, 3]");
  EXPECT_PANIC(dl_t_matmul(&tp, a, a), "dl_t_matmul", "f64[2, 3] @ f64[2, 3]");
  EXPECT_PANIC(dl_t_linear(&tp, a, b, NULL), "dl_t_linear", "x f64[2, 3]", "weight f64[4]");
  EXPECT_PANIC(dl_t_where(&tp, b, a, a), "dl_t_where", "f64[4]", "f64[2, 3]");
  EXPECT_PANIC(dl_t_clamp(&tp, a, 1, 0), "dl_t_clamp", "lo 1 > hi 0");
  dl_tape_free(&tp);
  { /* a tape on a small fixed buffer: without a recovery point (dl_ctx_on_nomem) the panic says how much it needs */
    static unsigned char buf[256];
    dl_tape_init_buffer(&tp, &pctx, buf, sizeof buf);
    EXPECT_PANIC(dl_t_tanh(&tp, a), "dl_t_tanh", "out of memory", "arena cannot hold the output of 256 bytes", "320 needed in all", "dl_ctx_on_nomem");
  }
  dl_tensor_free(a);
  dl_tensor_free(b);
  dl_tensor_free(f);
}

/* ---- custom ops ----------------------------------------------------------------- */

/* "vendor kernel": y = x^3 row-wise scaled by a user factor */
static void cube_fwd(dl_tensor *out, dl_tensor *const *in, int nin, void *user) {
  double s = *(const double *)user;
  int64_t i;
  (void)nin;
  for (i = 0; i < out->numel; i++) {
    double v = dl__get_at(in[0], dl__offset_of_linear(in[0], i));
    dl__set_at(out, i, s * v * v * v);
  }
}
static int cube_bwd_calls;
static void cube_bwd(dl_tape *tp, const dl_tensor *gy, const dl_tensor *out, dl_tensor *const *in, int nin,
                     void *user) {
  double s = *(const double *)user;
  dl_tensor *gx = dl_tape_grad(tp, in[0]);
  int64_t i;
  (void)out;
  (void)nin;
  cube_bwd_calls++;
  if (!gx) return;
  for (i = 0; i < gx->numel; i++) {
    double v = dl__get_at(in[0], dl__offset_of_linear(in[0], i));
    dl__set_at(gx, i, dl__get_at(gx, i) + dl__get_at(gy, i) * 3 * s * v * v);
  }
}
static void cube_jvp(dl_tensor *tout, const dl_tensor *out, dl_tensor *const *in, dl_tensor *const *tin, int nin,
                     void *user) {
  double s = *(const double *)user;
  int64_t i;
  (void)out;
  (void)nin;
  if (!tin[0]) return;
  for (i = 0; i < tout->numel; i++) {
    double v = dl__get_at(in[0], dl__offset_of_linear(in[0], i));
    dl__set_at(tout, i, 3 * s * v * v * dl__get_at(tin[0], dl__offset_of_linear(tin[0], i)));
  }
}
static const dl_custom_op cube_op = {"cube", cube_fwd, cube_bwd, cube_jvp};
static const dl_custom_op cube_op_nojvp = {"cube_nojvp", cube_fwd, cube_bwd, NULL};
static double cube_scale = 0.5;

static dl_tensor *f_custom(dl_tape *tp, dl_tensor **in, void *u) {
  dl_tensor *h = dl_t_sigmoid(tp, dl_t_matmul(tp, in[0], in[1]));
  (void)u;
  h = dl_t_custom(tp, &cube_op, &cube_scale, 1, &h, h->ndim, h->shape);
  return dl_t_tanh(tp, h);
}
static void test_custom_op(void) {
  dl_tensor *in[2];
  dl_gradcheck_result r;
  in[0] = mk(DL_SHAPE(3, 4), 40, -1, 1);
  in[1] = mk(DL_SHAPE(4, 2), 41, -1, 1);
  dl_requires_grad(in[0]);
  dl_requires_grad(in[1]);
  cube_bwd_calls = 0;
  report("custom op in a composite", dl_gradcheck(&pctx, f_custom, NULL, 2, in, 1e-6, 1e-6, &r), &r);
  CHECK(cube_bwd_calls == 1);
  {
    dl_tape tp;
    dl_tensor *t = mk(DL_SHAPE(3, 4), 42, -1, 1);
    dl_tape_init(&tp, &pctx, 0);
    dl_set_tangent(in[0], t);
    EXPECT_PANIC(dl_t_custom(&tp, &cube_op_nojvp, &cube_scale, 1, &in[0], 2, in[0]->shape), "cube_nojvp",
                 "no jvp rule");
    dl_set_tangent(in[0], NULL);
    EXPECT_PANIC(dl_set_tangent(in[0], in[1]), "dl_set_tangent", "f64[4, 2]", "f64[3, 4]");
    dl_tape_free(&tp);
    dl_tensor_free(t);
  }
  dl_tensor_free(in[0]);
  dl_tensor_free(in[1]);
}

/* ---- steady state: no allocator calls after the first step ---------------------- */

static int n_alloc;
static void *count_alloc(size_t n, void *u) { (void)u; n_alloc++; return malloc(n); }
static void *count_realloc(void *p, size_t n, void *u) { (void)u; n_alloc++; return realloc(p, n); }
static void count_free(void *p, void *u) { (void)u; free(p); }

static void test_steady_state_no_malloc(void) {
  dl_ctx_desc d;
  dl_ctx ctx;
  dl_tape tp;
  dl_rng rng = dl_rng_make(5);
  dl_tensor *x, *w1, *b1, *w2, *b2, *y;
  int step, after_first = 0;
  memset(&d, 0, sizeof d);
  d.allocator.alloc = count_alloc;
  d.allocator.realloc = count_realloc;
  d.allocator.free = count_free;
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(64, 100));
  y = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(64, 10));
  w1 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(50, 100));
  b1 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(50));
  w2 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(10, 50));
  b2 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(10));
  dl_tensor_rand_normal(x, &rng, 0, 1);
  dl_tensor_rand_normal(y, &rng, 0, 1);
  dl_tensor_rand_normal(w1, &rng, 0, 0.1);
  dl_tensor_rand_normal(w2, &rng, 0, 0.1);
  dl_tensor_fill(b1, 0.01);
  dl_tensor_fill(b2, 0.01);
  dl_requires_grad(w1); dl_requires_grad(b1); dl_requires_grad(w2); dl_requires_grad(b2);
  dl_tape_init(&tp, &ctx, 0);
  for (step = 0; step < 6; step++) {
    dl_tensor *h = dl_t_relu(&tp, dl_t_linear(&tp, x, w1, b1));
    dl_tensor *o = dl_t_linear(&tp, h, w2, b2);
    dl_tensor *loss = dl_t_mean_all(&tp, dl_t_square(&tp, dl_t_sub(&tp, o, y)));
    dl_zero_grad(w1); dl_zero_grad(b1); dl_zero_grad(w2); dl_zero_grad(b2);
    dl_backward(&tp, loss, NULL);
    DL_ASSIGN(w1, dl_sub(w1, dl_mul(0.01, w1->grad)));
    DL_ASSIGN(w2, dl_sub(w2, dl_mul(0.01, w2->grad)));
    dl_tape_rewind(&tp);
    if (step == 0) after_first = n_alloc;
  }
  CHECK_MSG(n_alloc == after_first, "%d allocator calls in 5 steady-state steps", n_alloc - after_first);
  dl_tape_free(&tp);
  dl_tensor_free(x); dl_tensor_free(y); dl_tensor_free(w1); dl_tensor_free(b1); dl_tensor_free(w2); dl_tensor_free(b2);
  dl_gemm_release_cache();
}

/* ---- forward mode against the tape: <J v, w> = <v, J^T w> ----------------------- */

static double dot(const dl_tensor *a, const dl_tensor *b) {
  double s = 0;
  int64_t i;
  for (i = 0; i < a->numel; i++) s += dl__get_at(a, dl__offset_of_linear(a, i)) * dl__get_at(b, dl__offset_of_linear(b, i));
  return s;
}
/* Sets tangents v[k] on the parameters p[k] (random), runs build once,
 * reads <J v, w> from the output's tangent and <v, J^T w> from backward with
 * seed w: the two must agree to rounding. */
typedef dl_tensor *(*jvp_net_fn)(dl_tape *tp, dl_tensor **p);
static void jvp_identity(const char *what, int n, const int *nd, const int64_t *const *shapes, uint64_t seed,
                         jvp_net_fn build) {
  dl_tensor *p[8], *v[8], *y, *w;
  dl_tape tp;
  double jv_w, v_jtw = 0;
  int k;
  for (k = 0; k < n; k++) {
    p[k] = mk(nd[k], shapes[k], seed + (uint64_t)k, -1, 1);
    v[k] = mk(nd[k], shapes[k], seed + 10 + (uint64_t)k, -1, 1);
    dl_requires_grad(p[k]);
    dl_zero_grad(p[k]);
    dl_set_tangent(p[k], v[k]);
  }
  dl_tape_init(&tp, &pctx, 0);
  y = build(&tp, p);
  w = mk(y->ndim, y->shape, seed + 20, -1, 1);
  CHECK_MSG(y->tangent != NULL, "%s: no tangent on the output", what);
  jv_w = y->tangent ? dot(y->tangent, w) : 0;
  dl_backward(&tp, y, w);
  for (k = 0; k < n; k++) v_jtw += dot(v[k], p[k]->grad);
  CHECK_MSG(fabs(jv_w - v_jtw) <= 1e-12 * fmax(1, fabs(jv_w)), "%s: <Jv,w> %.17g vs <v,J^T w> %.17g", what, jv_w,
            v_jtw);
  dl_tape_free(&tp);
  for (k = 0; k < n; k++) { dl_tensor_free(p[k]); dl_tensor_free(v[k]); }
  dl_tensor_free(w);
}

/* an MLP: y = W2 gelu_tanh(W1 x + b1) + b2 over a batch of 8; x, W1, b1, W2, b2 */
static dl_tensor *mlp_net(dl_tape *tp, dl_tensor **p) {
  return dl_t_linear(tp, dl_t_gelu_tanh(tp, dl_t_linear(tp, p[0], p[1], p[2])), p[3], p[4]);
}
static void test_jvp_dot_product_mlp(void) {
  int64_t s0[] = {8, 6}, s1[] = {7, 6}, s2[] = {7}, s3[] = {3, 7}, s4[] = {3};
  const int64_t *shapes[] = {s0, s1, s2, s3, s4};
  int nd[] = {2, 2, 1, 2, 1};
  jvp_identity("mlp", 5, nd, shapes, 50, mlp_net);
}
/* a small conv net: linear(flatten(max_pool(tanh(conv2d(x, w1, b1, pad 1)))), w2, b2) */
static dl_tensor *conv_net(dl_tape *tp, dl_tensor **p) {
  dl_conv2d_args ca;
  dl_pool2d_args pa;
  memset(&ca, 0, sizeof ca);
  memset(&pa, 0, sizeof pa);
  ca.pad_h = ca.pad_w = 1;
  pa.kernel_h = pa.kernel_w = 2;
  return dl_t_linear(tp, dl_t_flatten(tp, dl_t_max_pool2d(tp, dl_t_tanh(tp, dl_t_conv2d(tp, p[0], p[1], p[2], &ca)), &pa), 1),
                     p[3], p[4]);
}
static void test_jvp_dot_product_convnet(void) {
  int64_t s0[] = {2, 3, 6, 6}, s1[] = {4, 3, 3, 3}, s2[] = {4}, s3[] = {5, 36}, s4[] = {5};
  const int64_t *shapes[] = {s0, s1, s2, s3, s4};
  int nd[] = {4, 4, 1, 2, 1};
  jvp_identity("conv net", 5, nd, shapes, 80, conv_net);
}

/* Empty intermediates: their gradients have no data, and the lazy zeroing
 * (DL_TENSOR__UNZEROED: zeroed on ask, or by the first writer) must not pass
 * a NULL pointer to memset (the sanitizer build checks) while a shape with a
 * zero still gives an empty gradient of the leaf's shape. */
static void test_empty_intermediates(void) {
  dl_tape tp;
  dl_tensor *x = dl_tensor_make(&pctx, DL_F32, DL_SHAPE(0, 4)), *b = dl_tensor_make(&pctx, DL_F32, DL_SHAPE(4));
  dl_tensor *h, *loss;
  dl_tensor_fill(b, 0.5);
  dl_requires_grad(x);
  dl_requires_grad(b);
  dl_tape_init(&tp, &pctx, 0);
  h = dl_t_relu(&tp, dl_t_add(&tp, dl_t_relu(&tp, x), b)); /* [0, 4] + [4] broadcast, then element-wise */
  h = dl_t_reshape(&tp, dl_t_transpose(&tp, h, 0, 1), 2, DL__I64S(0, 4));
  loss = dl_t_sum_all(&tp, dl_t_mul(&tp, h, h));
  dl_backward(&tp, loss, NULL);
  CHECK(dl__get_at(loss, 0) == 0.0);
  CHECK(x->grad && x->grad->numel == 0 && x->grad->shape[0] == 0 && x->grad->shape[1] == 4);
  CHECK(b->grad && dl__get_at(b->grad, 0) == 0.0 && dl__get_at(b->grad, 3) == 0.0);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(b);
}

int main(void) {
  dl_ctx_desc d;
  memset(&d, 0, sizeof d);
  d.panic = harness_panic;
  dl_ctx_init(&pctx, &d);
  RUN(test_elementwise_gradcheck);
  RUN(test_elementwise_torch);
  RUN(test_other_ops_gradcheck);
  RUN(test_core_torch);
  RUN(test_linear_values);
  RUN(test_user_op);
  RUN(test_two_losses_accumulate);
  RUN(test_no_grad_detach_keep);
  RUN(test_backward_memory);
  RUN(test_backward_errors);
  RUN(test_shape_errors);
  RUN(test_custom_op);
  RUN(test_steady_state_no_malloc);
  RUN(test_jvp_dot_product_mlp);
  RUN(test_jvp_dot_product_convnet);
  RUN(test_empty_intermediates);
  return harness_finish();
}
