/* dl-test-cxx */
/* tests/test_torch_ops.c - every op in expr.h's op lists against PyTorch.
 *
 * tests/fixtures/ops.txt (tools/make_fixtures.py, PyTorch's autograd) holds,
 * per op, inputs, y, an upstream gradient gy and the input gradients of
 * sum(y * gy), in f64 and in f32, same-shape and (binary ops) broadcast. Each
 * case runs dl_NAME_into and dl_NAME_backward, the functions found by name in
 * a table built from DL_OPS_UNARY / DL_OPS_UNARY_P / DL_OPS_BINARY, so a new
 * op in a list fails here until the fixtures are regenerated.
 *
 * Tolerances, relative to PyTorch's value with an absolute floor:
 *   f64: 1e-12 (floor 1e-14)      f32: 1e-5 (floor 1e-6), against torch's f32 run.
 * backward accumulates: a second call must give twice the gradient, and a NULL
 * gradient is skipped.
 */
#include "dl/expr.h"
#include "harness.h"
#include "fixtures.h"

static dl_ctx ctx;
static fx_set fx;
static int fx_ok;

enum { K_UNARY = 1, K_UNARY_P, K_BINARY };

typedef struct op_entry {
  const char *name;
  int kind;
  void (*f1)(dl_tensor *, const dl_tensor *);
  void (*b1)(dl_tensor *, const dl_tensor *, const dl_tensor *);
  void (*f1p)(dl_tensor *, const dl_tensor *, double);
  void (*b1p)(dl_tensor *, const dl_tensor *, const dl_tensor *, double);
  void (*f2)(dl_tensor *, const dl_tensor *, const dl_tensor *);
  void (*b2)(dl_tensor *, dl_tensor *, const dl_tensor *, const dl_tensor *, const dl_tensor *);
} op_entry;

#define OP_U(name, expr) {#name, K_UNARY, dl_##name##_into, dl_##name##_backward, NULL, NULL, NULL, NULL},
#define OP_UP(name, expr) {#name, K_UNARY_P, NULL, NULL, dl_##name##_into, dl_##name##_backward, NULL, NULL},
#define OP_B(name, expr) {#name, K_BINARY, NULL, NULL, NULL, NULL, dl_##name##_into, dl_##name##_backward},
static const op_entry ops[] = {DL_OPS_UNARY(OP_U) DL_OPS_UNARY_P(OP_UP) DL_OPS_BINARY(OP_B)};
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

static const op_entry *find_op(const char *name) {
  int i;
  for (i = 0; i < NOPS; i++)
    if (!strcmp(ops[i].name, name)) return &ops[i];
  return NULL;
}

static const char *case_label(const fx_case *c, char *buf, size_t cap) {
  char sh[3][64];
  int k, d, t;
  for (k = 0; k <= c->nin; k++) {
    size_t n = 0;
    t = k < c->nin ? k : 2;
    n += (size_t)snprintf(sh[k] + n, sizeof sh[k] - n, "(");
    for (d = 0; d < c->ndim[t] && n < sizeof sh[k]; d++)
      n += (size_t)snprintf(sh[k] + n, sizeof sh[k] - n, d ? ",%lld" : "%lld",
                            (long long)c->shape[t][d]);
    if (n < sizeof sh[k]) snprintf(sh[k] + n, sizeof sh[k] - n, ")");
  }
  if (c->nin == 2)
    snprintf(buf, cap, "%s %s p0=%g %s,%s->%s (ops.txt:%d)", c->op, c->f64 ? "f64" : "f32",
             c->p0, sh[0], sh[1], sh[2], c->line);
  else
    snprintf(buf, cap, "%s %s p0=%g %s->%s (ops.txt:%d)", c->op, c->f64 ? "f64" : "f32", c->p0,
             sh[0], sh[1], c->line);
  return buf;
}

static dl_tensor *make_from(const fx_case *c, int t, const double *v) {
  dl_tensor *x = dl_tensor_make(&ctx, c->f64 ? DL_F64 : DL_F32, c->ndim[t], c->shape[t]);
  int64_t i;
  if (!x) return NULL;
  for (i = 0; i < c->numel[t]; i++) {
    if (c->f64) dl_f64(x)[i] = v ? v[i] : 0.0;
    else dl_f32(x)[i] = v ? (float)v[i] : 0.0f;
  }
  return x;
}

/* Count elements of got (a dl tensor) off scale*want beyond tolerance; print the first few.
 * f32 (alt given): an element also passes within tolerance of scale*alt, the same op in f64
 * on the same f32 inputs (the f32 problem's exact answer to f64 precision; the f64 ops are
 * held to PyTorch's f64 at 1e-12 by the f64 cases). Where a gradient cancels (gelu's
 * cdf + x pdf near x = -0.75) torch's f32 result can be the less accurate of the two. */
static int compare(const char *label, const char *what, const dl_tensor *got, const double *want,
                   double scale, const dl_tensor *alt) {
  int f64 = got->dtype == DL_F64, bad = 0;
  double tol = f64 ? 1e-12 : 1e-5, floor_ = f64 ? 1e-14 : 1e-6;
  int64_t i;
  for (i = 0; i < got->numel; i++) {
    double g = f64 ? dl_f64(got)[i] : (double)dl_f32(got)[i], w = scale * want[i];
    double den = fabs(w) > floor_ ? fabs(w) : floor_, err = fabs(g - w) / den;
    if (!(err <= tol) && alt) { /* the exact answer instead */
      double a = scale * dl_f64(alt)[i], da = fabs(a) > floor_ ? fabs(a) : floor_;
      if (fabs(g - a) / da <= tol) continue;
    }
    if (!(err <= tol)) {
      if (bad < 4)
        fprintf(stderr, "  MISMATCH %s: %s[%lld] dl %.17g torch %.17g (rel err %.3g, tol %g)\n",
                label, what, (long long)i, g, w, err, tol);
      bad++;
    }
  }
  return bad;
}

/* The op in f64 on the case's inputs (for an f32 case: its f32 values, exactly):
 * *y64 and g64[0..nin) from one forward and one backward. */
static void exact64(const fx_case *c, const op_entry *op, dl_tensor **y64, dl_tensor **g64) {
  dl_tensor *x[2] = {NULL, NULL}, *gy;
  int k;
  for (k = 0; k < c->nin; k++) {
    x[k] = dl_tensor_make(&ctx, DL_F64, c->ndim[k], c->shape[k]);
    g64[k] = dl_tensor_make(&ctx, DL_F64, c->ndim[k], c->shape[k]);
    memcpy(dl_f64(x[k]), c->x[k], (size_t)c->numel[k] * sizeof(double));
    memset(dl_f64(g64[k]), 0, (size_t)c->numel[k] * sizeof(double));
  }
  *y64 = dl_tensor_make(&ctx, DL_F64, c->ndim[2], c->shape[2]);
  gy = dl_tensor_make(&ctx, DL_F64, c->ndim[2], c->shape[2]);
  memcpy(dl_f64(gy), c->gy, (size_t)c->numel[2] * sizeof(double));
  switch (op->kind) {
  case K_UNARY: op->f1(*y64, x[0]); op->b1(g64[0], gy, x[0]); break;
  case K_UNARY_P: op->f1p(*y64, x[0], c->p0); op->b1p(g64[0], gy, x[0], c->p0); break;
  default: op->f2(*y64, x[0], x[1]); op->b2(g64[0], g64[1], gy, x[0], x[1]); break;
  }
  for (k = 0; k < c->nin; k++) dl_tensor_free(x[k]);
  dl_tensor_free(gy);
}

static int run_case(const fx_case *c) {
  char label[512];
  const op_entry *op = find_op(c->op);
  dl_tensor *x[2] = {NULL, NULL}, *g[2] = {NULL, NULL}, *y, *gy, *y64 = NULL, *g64[2] = {NULL, NULL};
  int k, bad = 0;
  case_label(c, label, sizeof label);
  CHECK_MSG(op != NULL, "fixture op '%s' is not in dl.h's op lists (%s)", c->op, label);
  if (!op) return 1;
  CHECK_MSG(c->nin == (op->kind == K_BINARY ? 2 : 1), "%s: fixture has %d inputs", label, c->nin);
  CHECK_MSG(op->kind == K_UNARY_P || c->p0 == 0, "%s: p0 given for an op without one", label);
  if (c->nin != (op->kind == K_BINARY ? 2 : 1)) return 1;
  for (k = 0; k < c->nin; k++) {
    x[k] = make_from(c, k, c->x[k]);
    g[k] = make_from(c, k, NULL);
  }
  y = make_from(c, 2, NULL);
  gy = make_from(c, 2, c->gy);
  if (!c->f64) exact64(c, op, &y64, g64);
  /* forward */
  switch (op->kind) {
  case K_UNARY: op->f1(y, x[0]); break;
  case K_UNARY_P: op->f1p(y, x[0], c->p0); break;
  default: op->f2(y, x[0], x[1]); break;
  }
  bad += compare(label, "y", y, c->y, 1.0, y64);
  /* backward, twice: it accumulates */
  for (k = 1; k <= 2; k++) {
    switch (op->kind) {
    case K_UNARY: op->b1(g[0], gy, x[0]); break;
    case K_UNARY_P: op->b1p(g[0], gy, x[0], c->p0); break;
    default: op->b2(g[0], g[1], gy, x[0], x[1]); break;
    }
    bad += compare(label, k == 1 ? "g0" : "g0 (2nd call, 2x)", g[0], c->g[0], k, g64[0]);
    if (c->nin == 2) bad += compare(label, k == 1 ? "g1" : "g1 (2nd call, 2x)", g[1], c->g[1], k, g64[1]);
  }
  /* a NULL gradient is skipped, the other still accumulated */
  switch (op->kind) {
  case K_UNARY: op->b1(NULL, gy, x[0]); break;
  case K_UNARY_P: op->b1p(NULL, gy, x[0], c->p0); break;
  default:
    op->b2(NULL, g[1], gy, x[0], x[1]);
    bad += compare(label, "g1 (3rd call, gx0 NULL)", g[1], c->g[1], 3, g64[1]);
    op->b2(g[0], NULL, gy, x[0], x[1]);
    bad += compare(label, "g0 (4th call, gx1 NULL)", g[0], c->g[0], 3, g64[0]);
    break;
  }
  CHECK_MSG(bad == 0, "%s: %d value(s) differ from PyTorch", label, bad);
  for (k = 0; k < 2; k++) { dl_tensor_free(x[k]); dl_tensor_free(g[k]); dl_tensor_free(g64[k]); }
  dl_tensor_free(y64);
  dl_tensor_free(y);
  dl_tensor_free(gy);
  return bad != 0;
}

static void test_fixture_file(void) {
  CHECK_MSG(fx_ok, "%s", fx.err);
  if (fx_ok) printf("  %s: %d cases\n", fx.path, fx.n);
}

/* Every list op has f64 and f32 cases; binary ops also broadcast ones. */
static void test_every_op_has_fixtures(void) {
  int i, j;
  if (!fx_ok) SKIP("no fixtures: %s", fx.err);
  for (i = 0; i < NOPS; i++) {
    int n64 = 0, n32 = 0, nbcast = 0;
    for (j = 0; j < fx.n; j++) {
      const fx_case *c = &fx.cases[j];
      if (strcmp(c->op, ops[i].name)) continue;
      if (c->f64) n64++;
      else n32++;
      if (c->nin == 2 && (c->numel[0] != c->numel[2] || c->numel[1] != c->numel[2])) nbcast++;
    }
    CHECK_MSG(n64 > 0 && n32 > 0, "op '%s' has %d f64 and %d f32 fixture cases "
              "(regenerate: /usr/bin/python3 tools/make_fixtures.py)", ops[i].name, n64, n32);
    if (ops[i].kind == K_BINARY)
      CHECK_MSG(nbcast > 0, "binary op '%s' has no broadcast fixture case", ops[i].name);
  }
}

static void test_ops_match_torch(void) {
  int j, nbad = 0;
  if (!fx_ok) SKIP("no fixtures: %s", fx.err);
  for (j = 0; j < fx.n; j++) nbad += run_case(&fx.cases[j]);
  printf("  %d of %d cases match PyTorch\n", fx.n - nbad, fx.n);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  fx_ok = fx_load(&fx);
  RUN(test_fixture_file);
  RUN(test_every_op_has_fixtures);
  RUN(test_ops_match_torch);
  fx_free(&fx);
  return harness_finish();
}
