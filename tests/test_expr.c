/* dl-test-cxx */
/* tests/test_expr.c - DL_ASSIGN fused loops (contiguous, broadcast, strided,
 * in place, threads), their error messages, and the op list: forward against
 * the scalar functions, backward (derived on dual numbers) against central
 * differences, including a user op defined only in this file. */
#include "dl/expr.h"
#include "harness.h"

static dl_ctx ctx, ctx1, ctx2;

/* user-defined ops: one line each */
DL_DEFINE_OP1(test_swishish, dl_mul(x0, dl_sigmoid(dl_mul(1.5, x0))))
DL_DEFINE_OP2(test_softmax2, dl_div(dl_exp(x0), dl_add(dl_exp(x0), dl_exp(x1))))
DL_DEFINE_OP1P(test_scaled_tanh, dl_mul(p0, dl_tanh(x0)))

static dl_tensor *mk(dl_dtype dt, int nd, const int64_t *shape, dl_rng *r) {
  dl_tensor *t = dl_tensor_make(&ctx, dt, nd, shape);
  if (r) dl_tensor_rand_normal(t, r, 0, 1);
  return t;
}

static void test_contiguous_f32_f64(void) {
  dl_rng r = dl_rng_make(1);
  int pass;
  for (pass = 0; pass < 2; pass++) {
    dl_dtype dt = pass ? DL_F64 : DL_F32;
    dl_tensor *a = mk(dt, DL_SHAPE(37, 11), &r), *b = mk(dt, DL_SHAPE(37, 11), &r);
    dl_tensor *c = mk(dt, DL_SHAPE(37, 11), &r), *y = mk(dt, DL_SHAPE(37, 11), NULL);
    int64_t i;
    DL_ASSIGN(y, dl_tanh(dl_add(dl_mul(a, b), c)));
    for (i = 0; i < y->numel; i++) {
      double want = pass ? tanh(dl_f64(a)[i] * dl_f64(b)[i] + dl_f64(c)[i])
                         : tanh((double)(dl_f32(a)[i] * dl_f32(b)[i] + dl_f32(c)[i]));
      double got = pass ? dl_f64(y)[i] : dl_f32(y)[i];
      CHECK_NEAR(got, want, pass ? 1e-15 : 3e-7);
    }
    dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(c); dl_tensor_free(y);
  }
}

static void test_broadcast(void) {
  dl_rng r = dl_rng_make(2);
  dl_tensor *h = mk(DL_F32, DL_SHAPE(5, 7), &r), *bias = mk(DL_F32, DL_SHAPE(7), &r);
  dl_tensor *col = mk(DL_F32, DL_SHAPE(5, 1), &r), *s = mk(DL_F32, 0, NULL, &r);
  dl_tensor *y = mk(DL_F32, DL_SHAPE(5, 7), NULL), *y3 = mk(DL_F32, DL_SHAPE(2, 5, 7), NULL);
  int64_t i, j, k;
  DL_ASSIGN(y, dl_relu(dl_add(h, bias)));                 /* bias over a batch */
  for (i = 0; i < 5; i++)
    for (j = 0; j < 7; j++) {
      float v = dl_f32(h)[i * 7 + j] + dl_f32(bias)[j];
      CHECK(dl_f32(y)[i * 7 + j] == (v < 0 ? 0 : v));
    }
  DL_ASSIGN(y, dl_sub(dl_mul(h, col), s));                /* (N,1) column and a 0-d scalar */
  for (i = 0; i < 5; i++)
    for (j = 0; j < 7; j++)
      CHECK(dl_f32(y)[i * 7 + j] == dl_f32(h)[i * 7 + j] * dl_f32(col)[i] - dl_f32(s)[0]);
  DL_ASSIGN(y3, dl_add(h, 1));                            /* new leading dimension */
  for (k = 0; k < 2; k++)
    for (i = 0; i < 35; i++) CHECK(dl_f32(y3)[k * 35 + i] == dl_f32(h)[i] + 1.0f);
  DL_ASSIGN(y, 3.5);                                      /* no tensor operand: a fill */
  CHECK(dl_f32(y)[34] == 3.5f);
  dl_tensor_free(h); dl_tensor_free(bias); dl_tensor_free(col); dl_tensor_free(s);
  dl_tensor_free(y); dl_tensor_free(y3);
}

static void test_strided(void) {
  dl_rng r = dl_rng_make(3);
  dl_tensor *a = mk(DL_F64, DL_SHAPE(6, 4), &r), *b = mk(DL_F64, DL_SHAPE(4, 6), &r);
  dl_tensor *y = mk(DL_F64, DL_SHAPE(4, 6), NULL), *big = mk(DL_F64, DL_SHAPE(8, 10), NULL);
  dl_tensor at = dl_view_transpose(a, 0, 1), yv;
  int64_t i, j;
  DL_ASSIGN(y, dl_add(dl_mul(&at, 2), b));                /* transposed operand */
  for (i = 0; i < 4; i++)
    for (j = 0; j < 6; j++)
      CHECK(dl_f64(y)[i * 6 + j] == dl_f64(a)[j * 4 + i] * 2 + dl_f64(b)[i * 6 + j]);
  yv = dl_view_slice(big, 1, 2, 8, 1);                    /* strided destination (8, 6) */
  yv = dl_view_slice(&yv, 0, 0, 8, 2);                    /* every other row: (4, 6) */
  DL_ASSIGN(&yv, dl_neg(b));
  for (i = 0; i < 8; i++)
    for (j = 0; j < 10; j++) {
      double want = (i % 2 == 0 && j >= 2 && j < 8) ? -dl_f64(b)[(i / 2) * 6 + (j - 2)] : 0.0;
      CHECK(dl_f64(big)[i * 10 + j] == want);
    }
  dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(y); dl_tensor_free(big);
}

static void test_in_place_sgd(void) {
  dl_rng r = dl_rng_make(4);
  dl_tensor *w = mk(DL_F32, DL_SHAPE(100), &r), *g = mk(DL_F32, DL_SHAPE(100), &r);
  float before[100];
  double lr = 0.1;
  int i;
  memcpy(before, dl_f32(w), sizeof before);
  DL_ASSIGN(w, dl_sub(w, dl_mul(lr, g)));
  for (i = 0; i < 100; i++) CHECK(dl_f32(w)[i] == before[i] - (float)lr * dl_f32(g)[i]);
  dl_tensor_free(w); dl_tensor_free(g);
}

static void test_threads_bit_identical(void) {
  /* large enough for the OpenMP path; 1 and 2 threads must agree exactly */
  int64_t n = 3 * DL_PARALLEL_THRESHOLD + 5, i;
  dl_rng r = dl_rng_make(5);
  dl_tensor *a = dl_tensor_make(&ctx1, DL_F32, DL_SHAPE(n)), *y1 = dl_tensor_make(&ctx1, DL_F32, DL_SHAPE(n));
  dl_tensor *b = dl_tensor_make(&ctx2, DL_F32, DL_SHAPE(n)), *y2 = dl_tensor_make(&ctx2, DL_F32, DL_SHAPE(n));
  dl_tensor *bias = dl_tensor_make(&ctx2, DL_F32, DL_SHAPE(n / 5, 1)), *y3 = dl_tensor_make(&ctx2, DL_F32, DL_SHAPE(n / 5, 5));
  dl_tensor av;
  int same = 1;
  dl_tensor_rand_normal(a, &r, 0, 3);
  dl_tensor_copy(b, a);
  DL_ASSIGN(y1, dl_gelu_tanh(dl_mul(a, a)));
  DL_ASSIGN(y2, dl_gelu_tanh(dl_mul(b, b)));
  for (i = 0; i < n; i++) same &= dl_f32(y1)[i] == dl_f32(y2)[i];
  CHECK(same);
  /* general path with threads */
  av = dl_view_slice(a, 0, 0, (n / 5) * 5, 1);
  av = dl_view_reshape(&av, DL_SHAPE(n / 5, 5));
  dl_tensor_fill(bias, 0.25);
  DL_ASSIGN(y3, dl_add(&av, bias));
  for (i = 0, same = 1; i < (n / 5) * 5; i++) same &= dl_f32(y3)[i] == dl_f32(a)[i] + 0.25f;
  CHECK(same);
  dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(y1); dl_tensor_free(y2);
  dl_tensor_free(bias); dl_tensor_free(y3);
}

static void test_errors_name_expression(void) {
  dl_tensor *a = mk(DL_F32, DL_SHAPE(4, 3), NULL), *d = mk(DL_F64, DL_SHAPE(4, 3), NULL);
  dl_tensor *b = mk(DL_F32, DL_SHAPE(4, 2), NULL), *y = mk(DL_F32, DL_SHAPE(4, 3), NULL);
  dl_tensor *l = mk(DL_I64, DL_SHAPE(4, 3), NULL);
  dl_tensor at;
  EXPECT_PANIC(DL_ASSIGN(y, dl_add(a, d)), "DL_ASSIGN", "dtype mismatch", "f32[4, 3]", "f64[4, 3]",
               "dl_add(a, d)", "test_expr.c");
  EXPECT_PANIC(DL_ASSIGN(y, dl_mul(a, b)), "shape mismatch", "f32[4, 2]", "f32[4, 3]", "dl_mul(a, b)");
  EXPECT_PANIC(DL_ASSIGN(l, dl_exp(a)), "destination i64[4, 3] must be f32 or f64");
  at = dl_view_reshape(y, DL_SHAPE(3, 4));
  at = dl_view_transpose(&at, 0, 1);
  EXPECT_PANIC(DL_ASSIGN(y, dl_add(&at, 1)), "overlaps destination");
  dl_tensor_free(a); dl_tensor_free(d); dl_tensor_free(b); dl_tensor_free(y); dl_tensor_free(l);
}

/* ---- op list: forward and dual-number backward vs finite differences ---- */

typedef void (*into1_fn)(dl_tensor *, const dl_tensor *);
typedef void (*back1_fn)(dl_tensor *, const dl_tensor *, const dl_tensor *);
typedef double (*ref1_fn)(double);

static double ref_relu(double x) { return x < 0 ? 0 : x; }
static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double ref_neg(double x) { return -x; }
static double ref_square(double x) { return x * x; }
static double ref_gelu_tanh(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x))); }
static double ref_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2))); }
static double ref_silu(double x) { return x / (1 + exp(-x)); }
static double ref_softplus(double x) { return log1p(exp(x)); }
static double ref_swishish(double x) { return x / (1 + exp(-1.5 * x)); }

/* Central difference of `into` at element i of x (f64), summed against gy. */
static double fd1(into1_fn f, dl_tensor *x, const dl_tensor *gy, int64_t i) {
  dl_tensor *y = dl_tensor_make(&ctx, DL_F64, x->ndim, x->shape);
  double h = 1e-6, keep = dl_f64(x)[i], s = 0;
  int64_t k;
  dl_f64(x)[i] = keep + h;
  f(y, x);
  for (k = 0; k < y->numel; k++) s += dl_f64(y)[k] * dl_f64(gy)[k];
  dl_f64(x)[i] = keep - h;
  f(y, x);
  for (k = 0; k < y->numel; k++) s -= dl_f64(y)[k] * dl_f64(gy)[k];
  dl_f64(x)[i] = keep;
  dl_tensor_free(y);
  return s / (2 * h);
}

static void check_unary(const char *name, into1_fn into, back1_fn back, ref1_fn ref, double lo, double hi) {
  dl_rng r = dl_rng_make(11);
  dl_tensor *x = mk(DL_F64, DL_SHAPE(3, 9), NULL), *y = mk(DL_F64, DL_SHAPE(3, 9), NULL);
  dl_tensor *gy = mk(DL_F64, DL_SHAPE(3, 9), &r), *gx = mk(DL_F64, DL_SHAPE(3, 9), NULL);
  dl_tensor *x32 = mk(DL_F32, DL_SHAPE(3, 9), NULL), *y32 = mk(DL_F32, DL_SHAPE(3, 9), NULL);
  int64_t i;
  dl_tensor_rand_uniform(x, &r, lo, hi);
  for (i = 0; i < x->numel; i++) /* keep away from kinks at 0 */
    if (fabs(dl_f64(x)[i]) < 1e-3) dl_f64(x)[i] = 0.5;
  into(y, x);
  dl_tensor_convert(x32, x);
  into(y32, x32);
  for (i = 0; i < x->numel; i++) {
    double want = ref(dl_f64(x)[i]);
    CHECK_MSG(fabs(dl_f64(y)[i] - want) <= 1e-13 * (1 + fabs(want)), "%s f64 forward at %g: %.17g vs %.17g",
              name, dl_f64(x)[i], dl_f64(y)[i], want);
    want = ref((double)dl_f32(x32)[i]);
    CHECK_MSG(fabs(dl_f32(y32)[i] - want) <= 2e-6 * (1 + fabs(want)), "%s f32 forward at %g: %.9g vs %.9g",
              name, (double)dl_f32(x32)[i], (double)dl_f32(y32)[i], want);
  }
  dl_tensor_fill(gx, 0.25); /* backward accumulates */
  back(gx, gy, x);
  for (i = 0; i < x->numel; i++) {
    double fd = fd1(into, x, gy, i);
    CHECK_MSG(fabs(dl_f64(gx)[i] - 0.25 - fd) <= 1e-6 * (1 + fabs(fd)), "%s backward at %g: %.12g vs fd %.12g",
              name, dl_f64(x)[i], dl_f64(gx)[i] - 0.25, fd);
  }
  dl_tensor_free(x); dl_tensor_free(y); dl_tensor_free(gy); dl_tensor_free(gx);
  dl_tensor_free(x32); dl_tensor_free(y32);
}

static void test_oplist_unary(void) {
  check_unary("neg", dl_neg_into, dl_neg_backward, ref_neg, -3, 3);
  check_unary("exp", dl_exp_into, dl_exp_backward, exp, -3, 3);
  check_unary("log", dl_log_into, dl_log_backward, log, 0.1, 5);
  check_unary("sqrt", dl_sqrt_into, dl_sqrt_backward, sqrt, 0.1, 5);
  check_unary("abs", dl_abs_into, dl_abs_backward, fabs, -3, 3);
  check_unary("relu", dl_relu_into, dl_relu_backward, ref_relu, -3, 3);
  check_unary("sigmoid", dl_sigmoid_into, dl_sigmoid_backward, ref_sigmoid, -6, 6);
  check_unary("tanh", dl_tanh_into, dl_tanh_backward, tanh, -4, 4);
  check_unary("gelu_tanh", dl_gelu_tanh_into, dl_gelu_tanh_backward, ref_gelu_tanh, -4, 4);
  check_unary("gelu", dl_gelu_into, dl_gelu_backward, ref_gelu, -4, 4);
  check_unary("silu", dl_silu_into, dl_silu_backward, ref_silu, -5, 5);
  check_unary("softplus", dl_softplus_into, dl_softplus_backward, ref_softplus, -5, 5);
  check_unary("square", dl_square_into, dl_square_backward, ref_square, -3, 3);
  check_unary("user swishish", test_swishish_into, test_swishish_backward, ref_swishish, -4, 4);
}

static void test_oplist_param(void) {
  dl_tensor *x = mk(DL_F64, DL_SHAPE(4), NULL), *y = mk(DL_F64, DL_SHAPE(4), NULL);
  dl_tensor *gy = mk(DL_F64, DL_SHAPE(4), NULL), *gx = mk(DL_F64, DL_SHAPE(4), NULL);
  const double xs[4] = {-2, -0.5, 0.5, 2};
  int i;
  memcpy(dl_f64(x), xs, sizeof xs);
  dl_tensor_fill(gy, 1);
  dl_leaky_relu_into(y, x, 0.1);
  dl_leaky_relu_backward(gx, gy, x, 0.1);
  for (i = 0; i < 4; i++) {
    CHECK(dl_f64(y)[i] == (xs[i] > 0 ? xs[i] : 0.1 * xs[i]));
    CHECK(dl_f64(gx)[i] == (xs[i] > 0 ? 1 : 0.1));
  }
  dl_tensor_fill(gx, 0);
  dl_elu_into(y, x, 1.5);
  dl_elu_backward(gx, gy, x, 1.5);
  for (i = 0; i < 4; i++) {
    CHECK_NEAR(dl_f64(y)[i], xs[i] > 0 ? xs[i] : 1.5 * expm1(xs[i]), 1e-15);
    CHECK_NEAR(dl_f64(gx)[i], xs[i] > 0 ? 1 : 1.5 * exp(xs[i]), 1e-15);
  }
  dl_tensor_fill(gx, 0);
  test_scaled_tanh_into(y, x, 3.0);
  test_scaled_tanh_backward(gx, gy, x, 3.0);
  for (i = 0; i < 4; i++) {
    CHECK_NEAR(dl_f64(y)[i], 3 * tanh(xs[i]), 1e-15);
    CHECK_NEAR(dl_f64(gx)[i], 3 * (1 - tanh(xs[i]) * tanh(xs[i])), 1e-14);
  }
  dl_tensor_fill(gx, 0);
  dl_pow_scalar_into(y, x, 3.0);
  dl_pow_scalar_backward(gx, gy, x, 3.0);
  for (i = 0; i < 4; i++) {
    CHECK_NEAR(dl_f64(y)[i], xs[i] * xs[i] * xs[i], 1e-14);
    CHECK_NEAR(dl_f64(gx)[i], 3 * xs[i] * xs[i], 1e-14);
  }
  dl_tensor_free(x); dl_tensor_free(y); dl_tensor_free(gy); dl_tensor_free(gx);
}

typedef void (*into2_fn)(dl_tensor *, const dl_tensor *, const dl_tensor *);
typedef void (*back2_fn)(dl_tensor *, dl_tensor *, const dl_tensor *, const dl_tensor *, const dl_tensor *);

/* binary op with broadcasting: a (3, 4), b (4) -> y (3, 4); gradients of b
 * are summed over the broadcast rows. */
static void check_binary(const char *name, into2_fn into, back2_fn back, double lo, double hi) {
  dl_rng r = dl_rng_make(21);
  dl_tensor *a = mk(DL_F64, DL_SHAPE(3, 4), NULL), *b = mk(DL_F64, DL_SHAPE(4), NULL);
  dl_tensor *y = mk(DL_F64, DL_SHAPE(3, 4), NULL), *y2 = mk(DL_F64, DL_SHAPE(3, 4), NULL);
  dl_tensor *gy = mk(DL_F64, DL_SHAPE(3, 4), &r), *ga = mk(DL_F64, DL_SHAPE(3, 4), NULL), *gb = mk(DL_F64, DL_SHAPE(4), NULL);
  dl_tensor *ts[2] = {a, b}, *gs[2] = {ga, gb};
  int64_t i, k, t;
  dl_tensor_rand_uniform(a, &r, lo, hi);
  dl_tensor_rand_uniform(b, &r, lo, hi);
  dl_f64(b)[1] = dl_f64(a)[5] + 0.3; /* no ties for max/min */
  back(ga, gb, gy, a, b);
  for (t = 0; t < 2; t++)
    for (i = 0; i < ts[t]->numel; i++) {
      double h = 1e-6, keep = dl_f64(ts[t])[i], s = 0;
      dl_f64(ts[t])[i] = keep + h;
      into(y, a, b);
      dl_f64(ts[t])[i] = keep - h;
      into(y2, a, b);
      dl_f64(ts[t])[i] = keep;
      for (k = 0; k < y->numel; k++) s += (dl_f64(y)[k] - dl_f64(y2)[k]) * dl_f64(gy)[k];
      s /= 2 * h;
      CHECK_MSG(fabs(dl_f64(gs[t])[i] - s) <= 1e-6 * (1 + fabs(s)), "%s d/dx%d[%lld]: %.12g vs fd %.12g",
                name, (int)t, (long long)i, dl_f64(gs[t])[i], s);
    }
  dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(y); dl_tensor_free(y2);
  dl_tensor_free(gy); dl_tensor_free(ga); dl_tensor_free(gb);
}

static void test_oplist_binary(void) {
  check_binary("add", dl_add_into, dl_add_backward, -2, 2);
  check_binary("sub", dl_sub_into, dl_sub_backward, -2, 2);
  check_binary("mul", dl_mul_into, dl_mul_backward, -2, 2);
  check_binary("div", dl_div_into, dl_div_backward, 0.5, 2);
  check_binary("pow", dl_pow_into, dl_pow_backward, 0.5, 2);
  check_binary("maximum", dl_maximum_into, dl_maximum_backward, -2, 2);
  check_binary("minimum", dl_minimum_into, dl_minimum_backward, -2, 2);
  check_binary("user softmax2", test_softmax2_into, test_softmax2_backward, -2, 2);
}

/* backward through a sliced (strided) input and into a strided gradient view
 * equals the same computation on contiguous copies */
/* Every op of the list and a user's one-line op have second derivatives:
 * NAME_dual2 on ((x, t), (1, 0)) gives f''(x) t in d.d, checked against
 * central differences of NAME_dual64's derivative (1e-6 relative). */
static double slope64(dl_dual64 (*f)(dl_dual64), double x) { return f(dl_dual64_make(x, 1.0)).d; }
static void second_order_1(const char *name, dl_dual64 (*f64)(dl_dual64), dl_dual2 (*f2)(dl_dual2)) {
  const double xs[4] = {-1.7, -0.35, 0.62, 1.9};
  int k;
  for (k = 0; k < 4; k++) {
    const double x = xs[k] + (strcmp(name, "log") == 0 || strcmp(name, "sqrt") == 0 || strcmp(name, "log1p") == 0 ? 2.0 : 0.0), h = 1e-5;
    const double fd = (slope64(f64, x + h) - slope64(f64, x - h)) / (2 * h);
    const dl_dual2 r = f2(dl_dual2_make(x, 0.5, 1.0));
    CHECK_MSG(fabs(r.d.d / 0.5 - fd) <= 1e-6 * fmax(fabs(fd), 1e-7), "%s''(%g) = %.12g, differences %.12g", name, x,
              r.d.d / 0.5, fd);
  }
}
static void test_oplist_second_order(void) {
#define SECOND(name, expr) second_order_1(#name, dl__op_##name##_dual64, dl__op_##name##_dual2);
  DL_OPS_UNARY(SECOND)
#undef SECOND
  second_order_1("test_swishish (a user op)", test_swishish_dual64, test_swishish_dual2);
  { /* a binary op of the list: the mixed partial of x0 x1 */
    const dl_dual2 r = dl__op_mul_dual2(dl_dual2_make(0.7, 0.3, 1.0), dl_dual2_make(-1.2, 0.8, 0.0));
    CHECK(fabs(r.d.v - -1.2) < 1e-15 && fabs(r.d.d - 0.8) < 1e-15); /* d/dx0 (x0 x1) = x1, its change along t: t1 */
  }
}

static void test_backward_strided_views(void) {
  dl_rng r = dl_rng_make(31);
  dl_tensor *big = mk(DL_F64, DL_SHAPE(4, 10), &r), *b = mk(DL_F64, DL_SHAPE(6), &r), *gy = mk(DL_F64, DL_SHAPE(4, 6), &r);
  dl_tensor *ac = mk(DL_F64, DL_SHAPE(4, 6), NULL), *ga = mk(DL_F64, DL_SHAPE(4, 6), NULL), *gb = mk(DL_F64, DL_SHAPE(6), NULL);
  dl_tensor *gbig = mk(DL_F64, DL_SHAPE(6, 4), NULL), *gb2 = mk(DL_F64, DL_SHAPE(6), NULL);
  dl_tensor av = dl_view_slice(big, 1, 2, 8, 1), gav = dl_view_transpose(gbig, 0, 1);
  int64_t i, j;
  dl_tensor_copy(ac, &av);
  dl_mul_backward(ga, gb, gy, ac, b);        /* contiguous reference */
  dl_mul_backward(&gav, gb2, gy, &av, b);    /* strided input, transposed gradient */
  for (i = 0; i < 4; i++)
    for (j = 0; j < 6; j++) CHECK_NEAR(dl_f64(gbig)[j * 4 + i], dl_f64(ga)[i * 6 + j], 1e-15);
  for (j = 0; j < 6; j++) CHECK_NEAR(dl_f64(gb2)[j], dl_f64(gb)[j], 1e-14);
  dl_tensor_fill(ga, 0);
  dl_tensor_fill(gbig, 0);
  dl_sigmoid_backward(ga, gy, ac);
  dl_sigmoid_backward(&gav, gy, &av);
  for (i = 0; i < 4; i++)
    for (j = 0; j < 6; j++) CHECK_NEAR(dl_f64(gbig)[j * 4 + i], dl_f64(ga)[i * 6 + j], 1e-15);
  dl_tensor_free(big); dl_tensor_free(b); dl_tensor_free(gy); dl_tensor_free(ac); dl_tensor_free(ga);
  dl_tensor_free(gb); dl_tensor_free(gbig); dl_tensor_free(gb2);
}

/* Views whose rows are contiguous (the two halves of a SwiGLU projection,
 * a slice of the last dimension, outer dimensions permuted) run row by row
 * in place: the same bits as on contiguous copies, at 1 and 2 threads, a
 * strided destination and strided gradients written only where they lie,
 * a broadcast bias read along the rows. */
static void test_strided_rows(void) {
  const int64_t B = 3, T = 50, F = 64, W = 2 * F + 6; /* rows of W: halves at [3, 3 + F), [3 + F, 3 + 2F) */
  dl_rng r = dl_rng_make(51);
  int pass;
  for (pass = 0; pass < 2; pass++) {
    dl_ctx *c = pass ? &ctx2 : &ctx1;
    dl_tensor *m = dl_tensor_make(c, DL_F32, DL_SHAPE(B, T, W)), *bias = dl_tensor_make(c, DL_F32, DL_SHAPE(F));
    dl_tensor *a = dl_tensor_make(c, DL_F32, DL_SHAPE(B, T, F)), *b = dl_tensor_make(c, DL_F32, DL_SHAPE(B, T, F));
    dl_tensor *y = dl_tensor_make(c, DL_F32, DL_SHAPE(B, T, F)), *yr = dl_tensor_make(c, DL_F32, DL_SHAPE(B, T, F));
    dl_tensor *gy = dl_tensor_make(c, DL_F32, DL_SHAPE(B, T, F)), *ga = dl_tensor_make(c, DL_F32, DL_SHAPE(B, T, F));
    dl_tensor *gb = dl_tensor_make(c, DL_F32, DL_SHAPE(B, T, F)), *gm = dl_tensor_make(c, DL_F32, DL_SHAPE(B, T, W));
    dl_tensor *big = dl_tensor_make(c, DL_F32, DL_SHAPE(T, B, W));
    dl_tensor s1 = dl_view_slice(m, 2, 3, 3 + F, 1), s2 = dl_view_slice(m, 2, 3 + F, 3 + 2 * F, 1);
    dl_tensor g1 = dl_view_slice(gm, 2, 3, 3 + F, 1), g2 = dl_view_slice(gm, 2, 3 + F, 3 + 2 * F, 1);
    dl_tensor dv = dl_view_slice(big, 2, 5, 5 + F, 1), perm;
    int64_t i, t, k, j;
    int same = 1, kept = 1;
    dl_tensor_rand_normal(m, &r, 0, 2);
    dl_tensor_rand_normal(gy, &r, 0, 1);
    dl_tensor_rand_normal(bias, &r, 0, 1);
    dl_tensor_copy(a, &s1);
    dl_tensor_copy(b, &s2);
    DL_ASSIGN(yr, dl_mul(dl_silu(a), dl_add(b, bias)));
    DL_ASSIGN(y, dl_mul(dl_silu(&s1), dl_add(&s2, bias)));
    for (i = 0; i < y->numel; i++) same &= dl_f32(y)[i] == dl_f32(yr)[i];
    CHECK(same);
    dl_tensor_fill(big, 7);
    perm = dl_view_transpose(&dv, 0, 1); /* [B, T, F] over big [T, B, W]: outer dims permuted */
    DL_ASSIGN(&perm, dl_mul(dl_silu(&s1), &s2));
    DL_ASSIGN(yr, dl_mul(dl_silu(a), b));
    for (t = 0, same = 1; t < T; t++)
      for (k = 0; k < B; k++)
        for (j = 0; j < W; j++) {
          const float v = dl_f32(big)[(t * B + k) * W + j];
          if (j < 5 || j >= 5 + F) kept &= v == 7.0f;
          else same &= v == dl_f32(yr)[(k * T + t) * F + j - 5];
        }
    CHECK(same);
    CHECK(kept);
    /* backward: into the two halves of one gradient buffer, added to what is there */
    dl_tensor_fill(gm, 0.5);
    dl_tensor_fill(ga, 0.5);
    dl_tensor_fill(gb, 0.5);
    dl_mul_backward(ga, gb, gy, a, b);
    dl_mul_backward(&g1, &g2, gy, &s1, &s2);
    for (k = 0, same = 1, kept = 1; k < B * T; k++)
      for (j = 0; j < W; j++) {
        const float v = dl_f32(gm)[k * W + j];
        if (j < 3 || j >= 3 + 2 * F) kept &= v == 0.5f;
        else if (j < 3 + F) same &= v == dl_f32(ga)[k * F + j - 3];
        else same &= v == dl_f32(gb)[k * F + j - 3 - F];
      }
    CHECK(same);
    CHECK(kept);
    dl_tensor_free(m); dl_tensor_free(bias); dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(y);
    dl_tensor_free(yr); dl_tensor_free(gy); dl_tensor_free(ga); dl_tensor_free(gb); dl_tensor_free(gm);
    dl_tensor_free(big);
  }
}

/* binary backward above the parallel threshold (the team path) */
static void test_backward_parallel(void) {
  int64_t n = 3 * DL_PARALLEL_THRESHOLD + 7, i;
  dl_rng r = dl_rng_make(41);
  dl_tensor *a = dl_tensor_make(&ctx2, DL_F32, DL_SHAPE(n)), *b = dl_tensor_make(&ctx2, DL_F32, DL_SHAPE(n));
  dl_tensor *gy = dl_tensor_make(&ctx2, DL_F32, DL_SHAPE(n)), *ga = dl_tensor_make(&ctx2, DL_F32, DL_SHAPE(n));
  dl_tensor *gb = dl_tensor_make(&ctx2, DL_F32, DL_SHAPE(n));
  int ok = 1;
  dl_tensor_rand_normal(a, &r, 0, 1);
  dl_tensor_rand_normal(b, &r, 0, 1);
  dl_tensor_rand_normal(gy, &r, 0, 1);
  dl_mul_backward(ga, gb, gy, a, b);
  for (i = 0; i < n; i++)
    ok &= dl_f32(ga)[i] == dl_f32(gy)[i] * dl_f32(b)[i] && dl_f32(gb)[i] == dl_f32(gy)[i] * dl_f32(a)[i];
  CHECK(ok);
  dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(gy); dl_tensor_free(ga); dl_tensor_free(gb);
}

static void test_backward_f32_and_errors(void) {
  dl_tensor *x = mk(DL_F32, DL_SHAPE(5), NULL), *gy = mk(DL_F32, DL_SHAPE(5), NULL), *gx = mk(DL_F32, DL_SHAPE(5), NULL);
  dl_tensor *gbad = mk(DL_F32, DL_SHAPE(4), NULL), *g64 = mk(DL_F64, DL_SHAPE(5), NULL);
  int i;
  for (i = 0; i < 5; i++) { dl_f32(x)[i] = (float)i - 2.0f; dl_f32(gy)[i] = 2.0f; }
  dl_tanh_backward(gx, gy, x);
  for (i = 0; i < 5; i++) {
    double t = tanh((double)i - 2.0);
    CHECK_NEAR(dl_f32(gx)[i], 2 * (1 - t * t), 1e-6);
  }
  EXPECT_PANIC(dl_tanh_backward(gbad, gy, x), "dl_tanh_backward", "f32[4]", "f32[5]");
  EXPECT_PANIC(dl_tanh_backward(gx, g64, x), "dl_tanh_backward", "dtype mismatch");
  dl_tensor_free(x); dl_tensor_free(gy); dl_tensor_free(gx); dl_tensor_free(gbad); dl_tensor_free(g64);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  d.threads = 1;
  dl_ctx_init(&ctx1, &d);
  d.threads = 2;
  dl_ctx_init(&ctx2, &d);
  RUN(test_contiguous_f32_f64);
  RUN(test_broadcast);
  RUN(test_strided);
  RUN(test_strided_rows);
  RUN(test_in_place_sgd);
  RUN(test_threads_bit_identical);
  RUN(test_errors_name_expression);
  RUN(test_oplist_second_order);
  RUN(test_oplist_unary);
  RUN(test_oplist_param);
  RUN(test_oplist_binary);
  RUN(test_backward_strided_views);
  RUN(test_backward_parallel);
  RUN(test_backward_f32_and_errors);
  return harness_finish();
}
