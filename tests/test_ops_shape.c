/* dl-test-cxx */
/* tests/test_ops_shape.c - the shape ops of dl/ops/shape.h: transpose,
 * permute, reshape, flatten, slice, index_select, gather, concat, stack, pad,
 * contiguous.
 *
 *   - PyTorch agreement: every case of tests/fixtures/shape.txt
 *     (tools/fixtures_shape.py), forward values and input gradients of
 *     sum(y * gy), f64 (rel. 1e-10) and f32 (rel. 1e-5), strided inputs included
 *   - gradcheck (tape vs central differences, tangent vs directional
 *     difference) of every op and option, plain, through a recorded transpose,
 *     and on a strided view input directly
 *   - views share storage and get their own node; copies are contiguous
 *   - gradients accumulate; scatter-adds are the same for 1 and 2 threads and
 *     above / below the parallel threshold
 *   - integer dtypes move through; panics name the op and both shapes
 */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx, ctx1, ctx2;

/* ---- one op call described by numbers, for fixtures and gradcheck ------- */

typedef struct spec {
  const char *op;     /* "transpose", "permute", ... */
  int pre;            /* float inputs transposed (0, 1) on the tape first */
  int n;              /* concat / stack: number of inputs */
  int na;
  int64_t a[16];      /* integer parameters (see apply) */
  double value;       /* pad */
  const dl_tensor *idx;
} spec;

static dl_tensor *apply(dl_tape *tp, dl_tensor **in, void *user) {
  const spec *s = (const spec *)user;
  dl_tensor *x[8];
  int k, p[8];
  for (k = 0; k < (s->n ? s->n : 1); k++) x[k] = s->pre ? dl_t_transpose(tp, in[k], 0, 1) : in[k];
  if (!strcmp(s->op, "transpose")) return dl_t_transpose(tp, x[0], (int)s->a[0], (int)s->a[1]);
  if (!strcmp(s->op, "permute")) {
    for (k = 0; k < s->na; k++) p[k] = (int)s->a[k];
    return dl_t_permute(tp, x[0], p);
  }
  if (!strcmp(s->op, "reshape")) return dl_t_reshape(tp, x[0], s->na, s->a);
  if (!strcmp(s->op, "flatten")) return dl_t_flatten(tp, x[0], (int)s->a[0]);
  if (!strcmp(s->op, "slice")) return dl_t_slice(tp, x[0], (int)s->a[0], s->a[1], s->a[2], s->a[3]);
  if (!strcmp(s->op, "index_select")) return dl_t_index_select(tp, x[0], (int)s->a[0], s->idx);
  if (!strcmp(s->op, "gather")) return dl_t_gather(tp, x[0], (int)s->a[0], s->idx);
  if (!strcmp(s->op, "concat")) return dl_t_concat(tp, s->n, x, (int)s->a[0]);
  if (!strcmp(s->op, "stack")) return dl_t_stack(tp, s->n, x, (int)s->a[0]);
  if (!strcmp(s->op, "pad")) return dl_t_pad(tp, x[0], s->na / 2, s->a, s->value);
  if (!strcmp(s->op, "contiguous")) return dl_t_contiguous(tp, x[0]);
  fprintf(stderr, "unknown op %s\n", s->op);
  abort();
}

static const char *const all_ops[] = {"transpose", "permute", "reshape", "flatten", "slice",
                                      "index_select", "gather", "concat", "stack", "pad", "contiguous"};
#define NALL ((int)(sizeof all_ops / sizeof all_ops[0]))

/* ---- PyTorch fixtures ------------------------------------------------------ */

static double worst32, worst64;

/* The spec of a fixture case (op = name up to the '.'); 0 when unknown. */
static int spec_of_case(const fx2_case *c, spec *s, char *op, size_t cap) {
  const char *dot = strchr(c->name, '.');
  size_t len = dot ? (size_t)(dot - c->name) : strlen(c->name);
  char key[16];
  int k, n;
  memset(s, 0, sizeof *s);
  if (len + 1 > cap) return 0;
  memcpy(op, c->name, len);
  op[len] = 0;
  s->op = op;
  s->pre = (int)fx2_param(c, "pre", 0);
  n = (int)fx2_param(c, "n", 0);
  if (!strcmp(op, "transpose")) {
    s->a[0] = (int64_t)fx2_param(c, "d0", 0);
    s->a[1] = (int64_t)fx2_param(c, "d1", 0);
  } else if (!strcmp(op, "permute") || !strcmp(op, "reshape") || !strcmp(op, "pad")) {
    const char *pfx = op[0] == 'p' ? (op[1] == 'e' ? "p" : "pad") : "s";
    s->na = n;
    for (k = 0; k < n; k++) {
      snprintf(key, sizeof key, "%s%d", pfx, k);
      s->a[k] = (int64_t)fx2_param(c, key, -999);
    }
    s->value = fx2_param(c, "value", 0);
  } else if (!strcmp(op, "flatten")) {
    s->a[0] = (int64_t)fx2_param(c, "start", 0);
  } else if (!strcmp(op, "slice")) {
    s->a[0] = (int64_t)fx2_param(c, "dim", 0);
    s->a[1] = (int64_t)fx2_param(c, "start", 0);
    s->a[2] = (int64_t)fx2_param(c, "stop", 0);
    s->a[3] = (int64_t)fx2_param(c, "step", 0);
  } else if (!strcmp(op, "index_select") || !strcmp(op, "gather")) {
    s->a[0] = (int64_t)fx2_param(c, "dim", 0);
  } else if (!strcmp(op, "concat") || !strcmp(op, "stack")) {
    s->n = n;
    s->a[0] = (int64_t)fx2_param(c, "dim", 0);
  } else if (strcmp(op, "contiguous")) {
    return 0;
  }
  return 1;
}

/* Runs one case; returns 1 when it matches. */
static int run_fixture(const fx2_case *c, int *seen) {
  spec s;
  char op[32], key[16];
  dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  double tol = c->f64 ? 1e-10 : 1e-5, e;
  dl_tensor *in[8] = {0}, *idx = NULL, *gy, *y;
  dl_tape tp;
  int nin, k, ok = 1;
  if (!spec_of_case(c, &s, op, sizeof op)) {
    CHECK_MSG(0, "case %s: unknown op", c->name);
    return 0;
  }
  for (k = 0; k < NALL; k++)
    if (!strcmp(all_ops[k], op)) seen[k] = 1;
  nin = s.n ? s.n : 1;
  for (k = 0; k < nin; k++) {
    snprintf(key, sizeof key, s.n ? "x%d" : "x", k);
    in[k] = fx2_make(c, key, dt);
    CHECK_MSG(in[k] != NULL, "case %s lacks %s", c->name, key);
    if (!in[k]) return 0;
    dl_requires_grad(in[k]);
  }
  if (fx2_get(c, "idx")) {
    dl_tensor *i64 = fx2_make(c, "idx", DL_I64);
    if (fx2_param(c, "i32", 0)) {
      idx = dl_tensor_make(NULL, DL_I32, i64->ndim, i64->shape);
      dl_tensor_convert(idx, i64);
      dl_tensor_free(i64);
    } else {
      idx = i64;
    }
    s.idx = idx;
  }
  gy = fx2_make(c, "gy", dt);
  dl_tape_init(&tp, NULL, 0);
  y = apply(&tp, in, &s);
  e = fx2_err(y, fx2_get(c, "y"));
  CHECK_MSG(e <= tol, "%s %s: y error %g", c->name, c->f64 ? "f64" : "f32", e);
  if (!(e <= tol)) ok = 0;
  if (c->f64) worst64 = fmax(worst64, e); else worst32 = fmax(worst32, e);
  dl_backward(&tp, y, gy);
  for (k = 0; k < nin; k++) {
    snprintf(key, sizeof key, s.n ? "g_x%d" : "g_x", k);
    e = fx2_err(in[k]->grad, fx2_get(c, key));
    CHECK_MSG(e <= tol, "%s %s: %s error %g", c->name, c->f64 ? "f64" : "f32", key, e);
    if (!(e <= tol)) ok = 0;
    if (c->f64) worst64 = fmax(worst64, e); else worst32 = fmax(worst32, e);
  }
  dl_tape_free(&tp);
  for (k = 0; k < nin; k++) dl_tensor_free(in[k]);
  dl_tensor_free(idx);
  dl_tensor_free(gy);
  return ok;
}

static void test_fixtures_match_torch(void) {
  fx2_set fs;
  int j, good = 0, seen[NALL] = {0}, k;
  if (!fx2_load(&fs, "tests/fixtures/shape.txt")) SKIP("%s", fs.err);
  CHECK(fx2_find(&fs, "concat.dim1", 1) != NULL && fx2_find(&fs, "concat.dim1", 0) != NULL);
  for (j = 0; j < fs.n; j++) good += run_fixture(&fs.cases[j], seen);
  for (k = 0; k < NALL; k++) CHECK_MSG(seen[k], "no fixture case for %s", all_ops[k]);
  printf("  %d of %d PyTorch cases match; worst rel. error f64 %.3g, f32 %.3g\n", good, fs.n, worst64,
         worst32);
  fx2_free(&fs);
}

/* ---- gradcheck ------------------------------------------------------------- */

static double worst_gc;
static int gc_count;

static dl_tensor *rnd(dl_ctx *c, dl_dtype dt, int ndim, const int64_t *shape, uint64_t seed) {
  dl_tensor *t = dl_tensor_make(c, dt, ndim, shape);
  dl_rng r = dl_rng_make(seed);
  dl_tensor_rand_uniform(t, &r, -2.0, 2.0);
  return t;
}

/* gradcheck of s on n inputs of the given shapes (all requiring gradients
 * unless skip_grad is that input's index), plain; then with the inputs made
 * strided (dl_view_transpose(0, 1) of a base holding the transposed shape)
 * and flagged directly. */
static void gc(spec s, int ndim, const int64_t *shape, int skip_grad, const char *what) {
  dl_tensor *base[8], views[8], *in[8];
  dl_gradcheck_result res;
  int n = s.n ? s.n : 1, k, pass, ok;
  for (pass = 0; pass < 2; pass++) {
    if (pass == 1 && (ndim < 2 || s.pre)) break;
    for (k = 0; k < n; k++) {
      int64_t sh[8];
      memcpy(sh, shape, sizeof(int64_t) * (size_t)ndim);
      if (pass == 1) { sh[0] = shape[1]; sh[1] = shape[0]; }
      base[k] = rnd(&ctx, DL_F64, ndim, sh, 100 + (uint64_t)k);
      if (pass == 1) {
        views[k] = dl_view_transpose(base[k], 0, 1);
        in[k] = &views[k];
      } else {
        in[k] = base[k];
      }
      if (k != skip_grad) dl_requires_grad(in[k]);
    }
    ok = dl_gradcheck(&ctx, apply, &s, n, in, 1e-6, 1e-6, &res);
    CHECK_MSG(ok, "gradcheck %s (%s%s): max_err %g grad_err %g jvp_err %g at input %d index %lld "
              "analytic %g numeric %g", s.op, what, pass ? ", strided input" : "", res.max_err,
              res.grad_err, res.jvp_err, res.input, (long long)res.index, res.analytic, res.numeric);
    CHECK(res.checked > 0);
    worst_gc = fmax(worst_gc, res.max_err);
    gc_count++;
    for (k = 0; k < n; k++) {
      if (pass == 1) dl_tensor_free(views[k].grad);
      dl_tensor_free(base[k]);
    }
  }
}

static spec mk(const char *op, int pre, int na, const int64_t *a) {
  spec s;
  memset(&s, 0, sizeof s);
  s.op = op;
  s.pre = pre;
  s.na = na;
  if (na) memcpy(s.a, a, sizeof(int64_t) * (size_t)na);
  return s;
}
#define A(...) (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

static void test_gradcheck_views(void) {
  gc(mk("transpose", 0, A(0, 2)), DL_SHAPE(2, 3, 4), -1, "0,2");
  gc(mk("transpose", 0, A(-1, -2)), DL_SHAPE(2, 3, 4), -1, "-1,-2");
  gc(mk("transpose", 1, A(1, 2)), DL_SHAPE(3, 2, 4), -1, "pre");
  gc(mk("permute", 0, A(2, 0, 1)), DL_SHAPE(2, 3, 4), -1, "2,0,1");
  gc(mk("permute", 0, A(1, 3, 0, 2)), DL_SHAPE(2, 3, 2, 2), -1, "4-d");
  gc(mk("permute", 1, A(-1, 0, 1)), DL_SHAPE(3, 2, 4), -1, "negative, pre");
  gc(mk("slice", 0, A(1, 1, 5, 2)), DL_SHAPE(3, 6, 2), -1, "step 2");
  gc(mk("slice", 0, A(-1, -4, -1, 1)), DL_SHAPE(3, 2, 5), -1, "negative");
  gc(mk("slice", 0, A(0, -100, 100, 3)), DL_SHAPE(7, 3), -1, "clamped");
  gc(mk("slice", 1, A(0, 1, 6, 2)), DL_SHAPE(3, 6, 2), -1, "pre");
}

static void test_gradcheck_reshape(void) {
  gc(mk("reshape", 0, A(4, -1)), DL_SHAPE(2, 3, 4), -1, "infer");
  gc(mk("reshape", 0, A(24)), DL_SHAPE(2, 3, 4), -1, "flat");
  gc(mk("reshape", 1, A(3, 8)), DL_SHAPE(3, 2, 4), -1, "pre");
  gc(mk("reshape", 0, A(2, 1, -1)), DL_SHAPE(3, 2, 4), -1, "copy of strided");
  gc(mk("flatten", 0, A(1)), DL_SHAPE(2, 3, 2, 2), -1, "start 1");
  gc(mk("flatten", 0, A(0)), DL_SHAPE(2, 3, 4), -1, "start 0");
  gc(mk("flatten", 0, A(-2)), DL_SHAPE(2, 3, 2, 2), -1, "start -2");
  gc(mk("flatten", 1, A(1)), DL_SHAPE(3, 2, 4), -1, "pre");
  gc(mk("contiguous", 0, 0, NULL), DL_SHAPE(3, 4, 2), -1, "contiguous input");
  gc(mk("contiguous", 1, 0, NULL), DL_SHAPE(3, 4, 2), -1, "pre");
}

static void test_gradcheck_index(void) {
  dl_tensor *i1 = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(4)), *i2 = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(3));
  dl_tensor *g1 = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(3, 5)), *g2 = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(2, 6, 3));
  dl_tensor *g3 = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(9));
  spec s;
  int64_t i;
  dl_rng r = dl_rng_make(5);
  dl_i64(i1)[0] = 4; dl_i64(i1)[1] = 0; dl_i64(i1)[2] = 2; dl_i64(i1)[3] = 0;
  dl_i32(i2)[0] = 1; dl_i32(i2)[1] = 1; dl_i32(i2)[2] = 0;
  for (i = 0; i < g1->numel; i++) dl_i64(g1)[i] = (int64_t)(dl_rng_below(&r, 4));
  for (i = 0; i < g2->numel; i++) dl_i32(g2)[i] = (int32_t)(dl_rng_below(&r, 4));
  for (i = 0; i < g3->numel; i++) dl_i64(g3)[i] = (int64_t)(dl_rng_below(&r, 4));
  s = mk("index_select", 0, A(0)); s.idx = i1;
  gc(s, DL_SHAPE(5, 4), -1, "dim 0, repeats");
  s = mk("index_select", 0, A(-1)); s.idx = i2;
  gc(s, DL_SHAPE(3, 4, 2), -1, "dim -1, i32");
  s = mk("index_select", 1, A(1)); s.idx = i2;
  gc(s, DL_SHAPE(4, 3, 2), -1, "pre");
  s = mk("gather", 0, A(0)); s.idx = g1;
  gc(s, DL_SHAPE(4, 5), -1, "dim 0");
  s = mk("gather", 0, A(1)); s.idx = g2;
  gc(s, DL_SHAPE(3, 4, 5), -1, "dim 1, smaller index, i32");
  s = mk("gather", 0, A(-1)); s.idx = g1;
  gc(s, DL_SHAPE(3, 5), -1, "dim -1");
  s = mk("gather", 1, A(0)); s.idx = g1;
  gc(s, DL_SHAPE(5, 4), -1, "pre");
  s = mk("gather", 0, A(0)); s.idx = g3;
  gc(s, DL_SHAPE(4), -1, "1-d repeats");
  dl_tensor_free(i1); dl_tensor_free(i2); dl_tensor_free(g1); dl_tensor_free(g2); dl_tensor_free(g3);
}

static void test_gradcheck_join_pad(void) {
  spec s;
  s = mk("concat", 0, A(0)); s.n = 3;
  gc(s, DL_SHAPE(2, 3), -1, "dim 0");
  s = mk("concat", 0, A(1)); s.n = 2;
  gc(s, DL_SHAPE(2, 3, 2), 1, "dim 1, second input without gradient or tangent");
  s = mk("concat", 0, A(-1)); s.n = 2;
  gc(s, DL_SHAPE(2, 3, 2), -1, "dim -1");
  s = mk("concat", 1, A(0)); s.n = 3;
  gc(s, DL_SHAPE(3, 2), -1, "pre");
  s = mk("stack", 0, A(0)); s.n = 3;
  gc(s, DL_SHAPE(2, 3), -1, "dim 0");
  s = mk("stack", 0, A(1)); s.n = 2;
  gc(s, DL_SHAPE(2, 3), 0, "dim 1, first input without gradient");
  s = mk("stack", 0, A(-1)); s.n = 3;
  gc(s, DL_SHAPE(2, 3), -1, "dim -1");
  s = mk("stack", 1, A(2)); s.n = 2;
  gc(s, DL_SHAPE(3, 2), -1, "last, pre");
  s = mk("pad", 0, A(1, 2)); s.value = 0.5;
  gc(s, DL_SHAPE(2, 3, 4), -1, "last dim");
  s = mk("pad", 0, A(2, 1, 1, 0, 1, 1)); s.value = -1;
  gc(s, DL_SHAPE(2, 3, 4), -1, "three pairs");
  s = mk("pad", 0, A(-1, 2, 1, -2));
  gc(s, DL_SHAPE(3, 4, 5), -1, "cropping");
  s = mk("pad", 1, A(1, 1, 2, 0)); s.value = 3;
  gc(s, DL_SHAPE(4, 3), -1, "pre");
  printf("  %d gradchecks, worst error %.3g\n", gc_count, worst_gc);
}

/* ---- view semantics ----------------------------------------------------------- */

static int inside(const dl_tensor *v, const dl_tensor *base) {
  const char *p = (const char *)v->data, *b = (const char *)base->data;
  return p >= b && p < b + base->numel * (int64_t)dl_dtype_size(base->dtype);
}

static void test_views_share_storage(void) {
  dl_tensor *x = rnd(&ctx, DL_F32, DL_SHAPE(4, 6), 1), *y, *z, *w, *c;
  dl_tape tp;
  int64_t ix[2] = {1, 2};
  int perm[2] = {1, 0};
  dl_tape_init(&tp, &ctx, 0);
  dl_requires_grad(x);
  y = dl_t_transpose(&tp, x, 0, 1);
  CHECK(y->data == x->data && y->shape[0] == 6 && y->strides[0] == 1 && y->strides[1] == 6);
  CHECK(y->grad == NULL && y->node != NULL && y->node != x->node && (y->flags & DL_TENSOR_VIEW));
  z = dl_t_slice(&tp, y, 0, 1, 6, 2);
  CHECK(inside(z, x) && z->shape[0] == 3 && z->strides[0] == 2 && z->node && z->grad == NULL);
  dl_f32(x)[2 * 6 + 3] = 42.0f;
  ix[0] = 1; ix[1] = 2;
  CHECK(dl_tensor_get(z, ix) == 42.0f);  /* z[1][2] = y[3][2] = x[2][3] */
  w = dl_t_reshape(&tp, x, DL_SHAPE(-1));
  CHECK(w->data == x->data && w->ndim == 1 && w->shape[0] == 24 && w->node);
  w = dl_t_permute(&tp, x, perm);
  CHECK(w->data == x->data && w->shape[0] == 6);
  c = dl_t_contiguous(&tp, x);
  CHECK(c == x);
  c = dl_t_contiguous(&tp, y);
  CHECK(c != y && dl_tensor_is_contiguous(c) && !inside(c, x) && c->node);
  w = dl_t_reshape(&tp, y, DL_SHAPE(3, 8)); /* strided: a copy */
  CHECK(!inside(w, x) && dl_tensor_is_contiguous(w) && w->shape[1] == 8);
  w = dl_t_flatten(&tp, z, 0);
  CHECK(!inside(w, x) && w->ndim == 1 && w->shape[0] == 12);
  /* no gradient wanted: nothing recorded, still a view */
  dl_no_grad_begin(&tp);
  y = dl_t_transpose(&tp, x, 0, 1);
  CHECK(y->node == NULL && !(y->flags & DL_TENSOR_REQUIRES_GRAD) && y->data == x->data);
  dl_no_grad_end(&tp);
  /* a 0-d input flattens to (1) */
  {
    dl_tensor *s = dl_tensor_make(&ctx, DL_F64, 0, NULL);
    dl_f64(s)[0] = 3.5;
    w = dl_t_flatten(&tp, s, 0);
    CHECK(w->ndim == 1 && w->shape[0] == 1 && dl_f64(w)[0] == 3.5);
    dl_tensor_free(s);
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
}

/* backward through a chain of views; a second backward adds the same again. */
static void test_chain_and_accumulate(void) {
  dl_tensor *x = rnd(&ctx, DL_F64, DL_SHAPE(3, 4, 5), 7), *y, *seed;
  dl_tape tp;
  int perm[3] = {2, 0, 1};
  int64_t i, n;
  double g1[60];
  dl_tape_init(&tp, &ctx, 0);
  dl_requires_grad(x);
  /* y = flatten(slice(permute(x), dim 0, 1:5:2)) : (2, 12) */
  y = dl_t_flatten(&tp, dl_t_slice(&tp, dl_t_permute(&tp, x, perm), 0, 1, 5, 2), 1);
  CHECK(y->ndim == 2 && y->shape[0] == 2 && y->shape[1] == 12);
  seed = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 12));
  dl_tensor_fill(seed, 1.0);
  dl_backward(&tp, y, seed);
  /* x[a][b][c] reaches y iff c in {1, 3} */
  for (n = 0, i = 0; i < 60; i++) {
    double want = (i % 5 == 1 || i % 5 == 3) ? 1.0 : 0.0;
    g1[i] = dl_f64(x->grad)[i];
    n += g1[i] == want;
  }
  CHECK(n == 60);
  dl_backward(&tp, y, seed);
  for (n = 0, i = 0; i < 60; i++) n += dl_f64(x->grad)[i] == 2 * g1[i];
  CHECK(n == 60);
  dl_tape_free(&tp);
  dl_tensor_free(seed);
  dl_tensor_free(x);
}

/* Same shape and bytes (both contiguous). */
static int same_bytes(const dl_tensor *a, const dl_tensor *b) {
  return dl_tensor_same_shape(a, b) && a->dtype == b->dtype &&
         (a->numel == 0 || !memcmp(a->data, b->data, (size_t)a->numel * dl_dtype_size(a->dtype)));
}

/* ---- threads and the parallel threshold ------------------------------------ */

/* Runs a mix of ops forward and backward on big inputs with ctx c and
 * returns a checksum-free copy of the results (f32, to catch ordering). */
static void big_run(dl_ctx *c, dl_tensor **outs) {
  dl_tape tp;
  dl_tensor *x = rnd(c, DL_F32, DL_SHAPE(300, 400), 11), *x2 = rnd(c, DL_F32, DL_SHAPE(300, 400), 12);
  dl_tensor *gi = dl_tensor_make(c, DL_I64, DL_SHAPE(300, 400)), *si = dl_tensor_make(c, DL_I64, DL_SHAPE(500));
  dl_tensor *y[5], *seed, *xs[2], *xs2[2];
  dl_rng r = dl_rng_make(13);
  int64_t i, pads[4] = {3, 1, 2, 5};
  int k;
  for (i = 0; i < gi->numel; i++) dl_i64(gi)[i] = (int64_t)(dl_rng_below(&r, 7)); /* many repeats */
  for (i = 0; i < si->numel; i++) dl_i64(si)[i] = (int64_t)(dl_rng_below(&r, 5));
  dl_requires_grad(x);
  dl_requires_grad(x2);
  dl_tape_init(&tp, c, 0);
  y[0] = dl_t_gather(&tp, x, 0, gi);
  y[1] = dl_t_index_select(&tp, dl_t_transpose(&tp, x, 0, 1), 1, si);
  y[2] = dl_t_contiguous(&tp, dl_t_transpose(&tp, x2, 0, 1));
  xs[0] = x;
  xs[1] = dl_t_slice(&tp, x2, 1, 0, 400, 2);
  y[3] = dl_t_concat(&tp, 2, xs, 1);
  xs2[0] = x;
  xs2[1] = x2;
  y[4] = dl_t_pad(&tp, dl_t_stack(&tp, 2, xs2, 0), 2, pads, 0.5);
  for (k = 0; k < 5; k++) {
    seed = rnd(c, DL_F32, y[k]->ndim, y[k]->shape, 20 + (uint64_t)k);
    dl_backward(&tp, y[k], seed);
    outs[k] = dl_tensor_make(c, DL_F32, y[k]->ndim, y[k]->shape);
    dl_tensor_copy(outs[k], y[k]);
    dl_tensor_free(seed);
  }
  outs[5] = dl_tensor_make(c, DL_F32, DL_SHAPE(300, 400));
  dl_tensor_copy(outs[5], x->grad);
  outs[6] = dl_tensor_make(c, DL_F32, DL_SHAPE(300, 400));
  dl_tensor_copy(outs[6], x2->grad);
  dl_tape_free(&tp);
  dl_tensor_free(x); dl_tensor_free(x2); dl_tensor_free(gi); dl_tensor_free(si);
}

static void test_threads_identical(void) {
  dl_tensor *a[7], *b[7], *s[7];
  dl_ctx_desc d = {0};
  dl_ctx serial;
  int k;
  d.panic = harness_panic;
  d.threads = 1;
  d.parallel_threshold = (int64_t)1 << 40;
  dl_ctx_init(&serial, &d);
  big_run(&ctx1, a);
  big_run(&ctx2, b);
  big_run(&serial, s);
  for (k = 0; k < 7; k++) {
    CHECK_MSG(same_bytes(a[k], b[k]),
              "result %d differs between 1 and 2 threads", k);
    CHECK_MSG(same_bytes(a[k], s[k]),
              "result %d differs from the serial run", k);
    dl_tensor_free(a[k]); dl_tensor_free(b[k]); dl_tensor_free(s[k]);
  }
}

/* Large strided copies (tiled paths) against dl_tensor_copy, forward and
 * backward: contiguous(permute(x)) and contiguous(slice(x)). */
static void test_large_against_reference(void) {
  static const int64_t shapes[4][4] = {{300, 400, 1, 1}, {7, 90, 130, 1}, {5, 3, 70, 90}, {2, 9000, 3, 1}};
  static const int perms[4][4] = {{1, 0, 2, 3}, {2, 0, 1, 3}, {0, 3, 2, 1}, {1, 2, 0, 3}};
  static const int nds[4] = {2, 3, 4, 3};
  int c, k, pass;
  for (pass = 0; pass < 2; pass++) {
    dl_ctx *cx = pass ? &ctx2 : &ctx;
    for (c = 0; c < 4; c++) {
      dl_tensor *x = rnd(cx, DL_F32, nds[c], shapes[c], 30 + (uint64_t)c), *ref, *seed, *back;
      dl_tensor pv, gv;
      dl_tape tp;
      dl_tensor *y;
      dl_requires_grad(x);
      dl_tape_init(&tp, cx, 0);
      for (k = 0; k < 2; k++) {
        dl_tensor_fill(x->grad, 0);
        if (k == 0) {
          pv = dl_view_permute(x, perms[c]);
          y = dl_t_contiguous(&tp, dl_t_permute(&tp, x, perms[c]));
        } else {
          pv = dl_view_slice(x, 1, 1, x->shape[1] - 2, 3);
          y = dl_t_contiguous(&tp, dl_t_slice(&tp, x, 1, 1, x->shape[1] - 2, 3));
        }
        ref = dl_tensor_make(cx, DL_F32, pv.ndim, pv.shape);
        dl_tensor_copy(ref, &pv);
        CHECK_MSG(same_bytes(y, ref),
                  "case %d %s: forward differs from dl_tensor_copy", c, k ? "slice" : "permute");
        seed = rnd(cx, DL_F32, y->ndim, y->shape, 40 + (uint64_t)c);
        dl_backward(&tp, y, seed);
        /* the gradient seen through the same view is the seed; elsewhere 0 */
        gv = k == 0 ? dl_view_permute(x->grad, perms[c]) : dl_view_slice(x->grad, 1, 1, x->shape[1] - 2, 3);
        back = dl_tensor_make(cx, DL_F32, gv.ndim, gv.shape);
        dl_tensor_copy(back, &gv);
        CHECK_MSG(same_bytes(back, seed),
                  "case %d %s: backward differs", c, k ? "slice" : "permute");
        if (k == 1) {
          double total = 0, want = 0;
          int64_t i;
          for (i = 0; i < x->numel; i++) total += fabs(dl_f32(x->grad)[i]);
          for (i = 0; i < seed->numel; i++) want += fabs(dl_f32(seed)[i]);
          CHECK_NEAR(total, want, 1e-6 * want);
        }
        dl_tensor_free(ref);
        dl_tensor_free(seed);
        dl_tensor_free(back);
        dl_tape_rewind(&tp);
      }
      dl_tape_free(&tp);
      dl_tensor_free(x);
    }
  }
}

/* ---- integer dtypes ----------------------------------------------------------- */

static void test_integer_dtypes(void) {
  dl_tensor *a = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(2, 3)), *b = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(1, 3));
  dl_tensor *q = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(2, 3)), *xs[2], *y, *ix = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(2));
  dl_tape tp;
  int64_t i, pads[2] = {1, 0};
  dl_tape_init(&tp, &ctx, 0);
  for (i = 0; i < 6; i++) { dl_i64(a)[i] = i; dl_i32(q)[i] = (int32_t)(10 * i); }
  for (i = 0; i < 3; i++) dl_i64(b)[i] = 100 + i;
  dl_i32(ix)[0] = 2; dl_i32(ix)[1] = 0;
  xs[0] = a; xs[1] = b;
  y = dl_t_concat(&tp, 2, xs, 0);
  CHECK(y->dtype == DL_I64 && y->shape[0] == 3 && dl_i64(y)[3] == 3 && dl_i64(y)[7] == 101);
  y = dl_t_contiguous(&tp, dl_t_transpose(&tp, q, 0, 1)); /* (3, 2) */
  CHECK(y->dtype == DL_I32 && dl_i32(y)[1] == 30 && dl_i32(y)[2] == 10);
  y = dl_t_index_select(&tp, q, 1, ix);
  CHECK(dl_i32(y)[0] == 20 && dl_i32(y)[1] == 0 && dl_i32(y)[2] == 50 && dl_i32(y)[3] == 30);
  y = dl_t_pad(&tp, q, 1, pads, 7);
  CHECK(y->shape[1] == 4 && dl_i32(y)[0] == 7 && dl_i32(y)[1] == 0 && dl_i32(y)[4] == 7 && dl_i32(y)[5] == 30);
  dl_tape_free(&tp);
  dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(q); dl_tensor_free(ix);
}

/* ---- errors ----------------------------------------------------------------- */

static void test_panics_name_op_and_shapes(void) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 3)), *x4 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 4));
  dl_tensor *xf = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3)), *x3 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 3, 1));
  dl_tensor *i1 = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(2)), *i2 = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(2, 2));
  dl_tensor *i3 = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(3, 3)), *fi = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2));
  dl_tensor *xs[3];
  dl_tape tp;
  int bad_perm[2] = {0, 0};
  int64_t pads3[6] = {1, 1, 1, 1, 1, 1}, padneg[2] = {-2, -2};
  dl_tape_init(&tp, &ctx, 0);
  dl_tensor_fill(x, 1);
  dl_tensor_fill(i2, 0);
  dl_tensor_fill(i3, 0);
  dl_i64(i1)[0] = 1; dl_i64(i1)[1] = 7;
  EXPECT_PANIC(dl_t_transpose(&tp, x, 0, 5), "dl_t_transpose", "f64[2, 3]", "dimension 5");
  EXPECT_PANIC(dl_t_permute(&tp, x, bad_perm), "dl_t_permute", "[0, 0]", "f64[2, 3]");
  EXPECT_PANIC(dl_t_reshape(&tp, x, DL_SHAPE(4, 2)), "dl_t_reshape", "f64[2, 3]", "[4, 2]");
  EXPECT_PANIC(dl_t_reshape(&tp, x, DL_SHAPE(-1, -1)), "dl_t_reshape", "f64[2, 3]", "[-1, -1]");
  EXPECT_PANIC(dl_t_reshape(&tp, x, DL_SHAPE(4, -1)), "dl_t_reshape", "f64[2, 3]", "[4, -1]");
  EXPECT_PANIC(dl_t_flatten(&tp, x, 2), "dl_t_flatten", "f64[2, 3]", "dimension 2");
  EXPECT_PANIC(dl_t_slice(&tp, x, 1, 0, 3, 0), "dl_t_slice", "f64[2, 3]", "step 0");
  EXPECT_PANIC(dl_t_slice(&tp, x, -3, 0, 3, 1), "dl_t_slice", "f64[2, 3]", "dimension -3");
  EXPECT_PANIC(dl_t_index_select(&tp, x, 0, i1), "dl_t_index_select", "index 7", "size 2", "f64[2, 3]",
               "i64[2]");
  EXPECT_PANIC(dl_t_index_select(&tp, x, 0, i2), "dl_t_index_select", "1-d", "i64[2, 2]", "f64[2, 3]");
  EXPECT_PANIC(dl_t_index_select(&tp, x, 0, fi), "dl_t_index_select", "i64 or i32", "f64[2]", "f64[2, 3]");
  EXPECT_PANIC(dl_t_gather(&tp, x, 1, i1), "dl_t_gather", "i64[2]", "f64[2, 3]", "rank");
  EXPECT_PANIC(dl_t_gather(&tp, x, 1, i3), "dl_t_gather", "i32[3, 3]", "f64[2, 3]", "dimension 0");
  dl_i64(i2)[3] = 3;
  EXPECT_PANIC(dl_t_gather(&tp, x, 1, i2), "dl_t_gather", "index 3", "size 3", "i64[2, 2]", "f64[2, 3]");
  dl_i64(i2)[3] = -1;
  EXPECT_PANIC(dl_t_gather(&tp, x, 1, i2), "dl_t_gather", "index -1", "size 3");
  xs[0] = x; xs[1] = x4; xs[2] = xf;
  EXPECT_PANIC(dl_t_concat(&tp, 2, xs, 0), "dl_t_concat", "f64[2, 3]", "f64[2, 4]", "shape mismatch");
  CHECK(dl_t_concat(&tp, 2, xs, 1)->shape[1] == 7);
  xs[1] = xf;
  EXPECT_PANIC(dl_t_concat(&tp, 2, xs, 0), "dl_t_concat", "f64[2, 3]", "f32[2, 3]", "dtype mismatch");
  xs[1] = x3;
  EXPECT_PANIC(dl_t_concat(&tp, 2, xs, 0), "dl_t_concat", "f64[2, 3]", "f64[2, 3, 1]", "rank");
  EXPECT_PANIC(dl_t_concat(&tp, 0, xs, 0), "dl_t_concat", "at least one");
  xs[1] = x4;
  EXPECT_PANIC(dl_t_stack(&tp, 2, xs, 0), "dl_t_stack", "f64[2, 3]", "f64[2, 4]", "shape mismatch");
  xs[1] = xf;
  EXPECT_PANIC(dl_t_stack(&tp, 2, xs, 0), "dl_t_stack", "f64[2, 3]", "f32[2, 3]", "dtype mismatch");
  xs[1] = x;
  EXPECT_PANIC(dl_t_stack(&tp, 2, xs, 3), "dl_t_stack", "f64[2, 3]", "dimension 3");
  EXPECT_PANIC(dl_t_pad(&tp, x, 3, pads3, 0), "dl_t_pad", "3 (left, right) pairs", "f64[2, 3]");
  EXPECT_PANIC(dl_t_pad(&tp, x, 1, padneg, 0), "dl_t_pad", "[-2, -2]", "f64[2, 3]", "negative");
  dl_tape_free(&tp);
  dl_tensor_free(x); dl_tensor_free(x4); dl_tensor_free(xf); dl_tensor_free(x3);
  dl_tensor_free(i1); dl_tensor_free(i2); dl_tensor_free(i3); dl_tensor_free(fi);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  d.threads = 1;
  d.parallel_threshold = 1000;
  dl_ctx_init(&ctx1, &d);
  d.threads = 2;
  dl_ctx_init(&ctx2, &d);
  RUN(test_fixtures_match_torch);
  RUN(test_gradcheck_views);
  RUN(test_gradcheck_reshape);
  RUN(test_gradcheck_index);
  RUN(test_gradcheck_join_pad);
  RUN(test_views_share_storage);
  RUN(test_chain_and_accumulate);
  RUN(test_threads_identical);
  RUN(test_large_against_reference);
  RUN(test_integer_dtypes);
  RUN(test_panics_name_op_and_shapes);
  return harness_finish();
}
