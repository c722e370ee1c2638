/* tests/test_dual.c - dual numbers and the generic scalar math (dl/dual.h).
 *
 * For every function: the dl_dual64 derivative (seed d = 1) against the
 * analytic derivative written out here and against central differences of the
 * f64 function; the dual64 value equal to the f64 value bit for bit; the
 * dl_dual (f32) derivative against the f64 analytic one; f32 and f64 values
 * against libm / closed forms written here in double. Then the kink
 * conventions from dual.h's top comment, NaN propagation, softplus at +-100,
 * the generic names in DL_SCALAR contexts, and Newton's method as a composite.
 *
 * Tolerances: f64 values 1e-13 relative, dual64 vs analytic 1e-10 relative,
 * vs central differences 1e-6 relative; f32 values 1e-6 relative, dual (f32)
 * derivatives 1e-5 relative. Each comes with an absolute floor (the relative
 * error is taken against max(|expected|, floor)); the floor is tiny (1e-300)
 * for functions whose formulas keep relative accuracy and larger where
 * dual.h's formula cancels by design (1 - t*t, s*(1-s), 1 + tanh, 1 + erf
 * near their limits), per the table below.
 */
#include "dl/dual.h"
#include "harness.h"

#include <float.h>

#define TINY 1e-300
#define NELEM(a) ((int)(sizeof(a) / sizeof *(a)))

/* --- closed forms and analytic derivatives, written independently in double */

static double sigm(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
static double sigm_d(double x) { double e = exp(-fabs(x)); return e / ((1.0 + e) * (1.0 + e)); }

static double r_exp(double x) { return exp(x); }
static double d_exp(double x) { return exp(x); }
static double r_log(double x) { return log(x); }
static double d_log(double x) { return 1.0 / x; }
static double r_log1p(double x) { return log1p(x); }
static double d_log1p(double x) { return 1.0 / (1.0 + x); }
static double r_expm1(double x) { return expm1(x); }
static double d_expm1(double x) { return exp(x); }
static double r_sqrt(double x) { return sqrt(x); }
static double d_sqrt(double x) { return 0.5 / sqrt(x); }
static double r_sin(double x) { return sin(x); }
static double d_sin(double x) { return cos(x); }
static double r_cos(double x) { return cos(x); }
static double d_cos(double x) { return -sin(x); }
/* tanh x = expm1(2x) / (expm1(2x) + 2), odd; tanh' = 1 / cosh^2 */
static double r_tanh(double x) {
  double e = expm1(-2.0 * fabs(x)), t = -e / (e + 2.0);
  return x < 0 ? -t : t;
}
static double d_tanh(double x) { double c = cosh(x); return 1.0 / (c * c); }
static double r_sigmoid(double x) { return sigm(x); }
static double d_sigmoid(double x) { return sigm_d(x); }
/* libm's erf near 0, 1 - erfc(|x|) in the tails */
static double r_erf(double x) {
  return fabs(x) < 1 ? erf(x) : x < 0 ? erfc(-x) - 1.0 : 1.0 - erfc(x);
}
static double d_erf(double x) { return 2.0 / sqrt(acos(-1.0)) * exp(-x * x); }
static double r_neg(double x) { return -x; }
static double d_neg(double x) { (void)x; return -1.0; }
static double r_abs(double x) { return x < 0 ? -x : x; }
static double d_abs(double x) { return x < 0 ? -1.0 : 1.0; }
static double r_square(double x) { return x * x; }
static double d_square(double x) { return 2.0 * x; }
static double r_relu(double x) { return x > 0 ? x : 0.0; }
static double d_relu(double x) { return x > 0 ? 1.0 : 0.0; }
#define SLOPE 0.01
#define ALPHA 1.5
#define LO (-1.0)
#define HI 2.0
static double r_leaky(double x) { return x > 0 ? x : (double)(float)SLOPE * x; }
static double d_leaky(double x) { return x > 0 ? 1.0 : (double)(float)SLOPE; }
static double r_elu(double x) { return x > 0 ? x : ALPHA * expm1(x); }
static double d_elu(double x) { return x > 0 ? 1.0 : ALPHA * exp(x); }
static double r_clamp(double x) { return x < LO ? LO : x > HI ? HI : x; }
static double d_clamp(double x) { return x < LO || x > HI ? 0.0 : 1.0; }
/* gelu_tanh (tanh form): 0.5 (1 + tanh u) = sigmoid(2u), u = c (x + k x^3) */
#define GELU_C 0.79788456080286535588
#define GELU_K 0.044715
static double r_gelu_tanh(double x) { return x * sigm(2.0 * GELU_C * (x + GELU_K * x * x * x)); }
static double d_gelu_tanh(double x) {
  double u2 = 2.0 * GELU_C * (x + GELU_K * x * x * x);
  return sigm(u2) + x * sigm_d(u2) * 2.0 * GELU_C * (1.0 + 3.0 * GELU_K * x * x);
}
/* exact gelu_tanh: x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2; derivative Phi + x phi */
static double r_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double d_gelu(double x) {
  return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * acos(-1.0));
}
static double r_silu(double x) { return x * sigm(x); }
static double d_silu(double x) { return sigm(x) + x * sigm_d(x); }
static double r_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double d_softplus(double x) { return sigm(x); }

/* --- the functions with parameters, fixed to unary ones for the table ------ */

static float w_leaky_f32(float x) { return dl_leaky_relu_f32(x, (float)SLOPE); }
static double w_leaky_f64(double x) { return dl_leaky_relu_f64(x, (float)SLOPE); }
static dl_dual w_leaky_dual(dl_dual x) { return dl_leaky_relu_dual(x, (float)SLOPE); }
static dl_dual64 w_leaky_dual64(dl_dual64 x) { return dl_leaky_relu_dual64(x, (float)SLOPE); }
static float w_elu_f32(float x) { return dl_elu_f32(x, (float)ALPHA); }
static double w_elu_f64(double x) { return dl_elu_f64(x, ALPHA); }
static dl_dual w_elu_dual(dl_dual x) { return dl_elu_dual(x, (float)ALPHA); }
static dl_dual64 w_elu_dual64(dl_dual64 x) { return dl_elu_dual64(x, ALPHA); }
static float w_clamp_f32(float x) { return dl_clamp_f32(x, (float)LO, (float)HI); }
static double w_clamp_f64(double x) { return dl_clamp_f64(x, LO, HI); }
static dl_dual w_clamp_dual(dl_dual x) { return dl_clamp_dual(x, (float)LO, (float)HI); }
static dl_dual64 w_clamp_dual64(dl_dual64 x) { return dl_clamp_dual64(x, LO, HI); }

/* --- unary table ------------------------------------------------------------ */

typedef struct unary_case {
  const char *name;
  float (*f32)(float);
  double (*f64)(double);
  dl_dual (*fd)(dl_dual);
  dl_dual64 (*fdd)(dl_dual64);
  double (*ref)(double), (*dref)(double);
  const double *xs;
  int n;
  double vfloor64, dfloor64, vfloor32, dfloor32, xnoise;
} unary_case;

static const double X_EXP[] = {-30, -5, -1, -1e-3, 0, 1e-3, 0.5, 1, 5, 20, 80};
static const double X_LOG[] = {1e-6, 0.01, 0.5, 1, 1.0009765625, 2, 10, 1e6};
static const double X_LOG1P[] = {-0.99, -0.5, -1e-4, -1e-8, 0, 1e-8, 1e-4, 1, 10, 1e6};
static const double X_EXPM1[] = {-30, -1, -1e-5, -1e-9, 0, 1e-9, 1e-5, 1, 10, 50};
static const double X_SQRT[] = {1e-6, 0.01, 0.25, 1, 2, 100, 1e8};
static const double X_TRIG[] = {-100, -3, -1, -1e-3, 0, 1e-3, 0.5, 1.5, 3, 10, 100};
static const double X_TANH[] = {-20, -5, -1, -1e-3, 0, 1e-3, 0.5, 2, 5, 20};
static const double X_SIGM[] = {-40, -10, -2, -1e-3, 0, 1e-3, 1, 5, 10, 40};
static const double X_ERF[] = {-5, -2, -0.5, -1e-3, 0, 1e-3, 0.5, 1, 2, 3.7, 5};
static const double X_KINKED[] = {-100, -20, -2.5, -1e-3, 1e-3, 0.75, 3, 100};
static const double X_CLAMP[] = {-5, -1.5, -1.001, -0.999, -0.5, 1e-3, 1.5, 1.999, 2.001, 3, 100};
static const double X_GELU[] = {-10, -4, -1, -1e-3, 0, 1e-3, 0.5, 1, 3, 10};
static const double X_SILU[] = {-40, -5, -1, -1e-3, 0, 1e-3, 1, 5, 40};
static const double X_NEG[] = {-3, -1e-3, 0, 2.5, 1e6};

#define FNS(n) dl_##n##_f32, dl_##n##_f64, dl_##n##_dual, dl_##n##_dual64
#define WFNS(n) w_##n##_f32, w_##n##_f64, w_##n##_dual, w_##n##_dual64
#define PTS(a) a, NELEM(a)
/* floors (see the top comment) and xnoise (see fd_allow):
 *                                                       vfloor64 dfloor64 vfloor32 dfloor32 xnoise */
static const unary_case UNARY[] = {
    {"exp", FNS(exp), r_exp, d_exp, PTS(X_EXP), TINY, TINY, TINY, TINY, 0},
    {"log", FNS(log), r_log, d_log, PTS(X_LOG), TINY, TINY, TINY, TINY, 0},
    {"log1p", FNS(log1p), r_log1p, d_log1p, PTS(X_LOG1P), TINY, TINY, TINY, TINY, 0},
    {"expm1", FNS(expm1), r_expm1, d_expm1, PTS(X_EXPM1), TINY, TINY, TINY, TINY, 0},
    {"sqrt", FNS(sqrt), r_sqrt, d_sqrt, PTS(X_SQRT), TINY, TINY, TINY, TINY, 0},
    {"sin", FNS(sin), r_sin, d_sin, PTS(X_TRIG), TINY, TINY, TINY, TINY, 0},
    {"cos", FNS(cos), r_cos, d_cos, PTS(X_TRIG), TINY, TINY, TINY, TINY, 0},
    {"tanh", FNS(tanh), r_tanh, d_tanh, PTS(X_TANH), TINY, 1e-5, TINY, 0.1, 0},
    {"sigmoid", FNS(sigmoid), r_sigmoid, d_sigmoid, PTS(X_SIGM), TINY, 1e-5, TINY, 0.1, 0},
    {"erf", FNS(erf), r_erf, d_erf, PTS(X_ERF), TINY, TINY, TINY, TINY, 0},
    {"neg", FNS(neg), r_neg, d_neg, PTS(X_NEG), TINY, TINY, TINY, TINY, 0},
    {"abs", FNS(abs), r_abs, d_abs, PTS(X_KINKED), TINY, TINY, TINY, TINY, 0},
    {"square", FNS(square), r_square, d_square, PTS(X_NEG), TINY, TINY, TINY, TINY, 0},
    {"relu", FNS(relu), r_relu, d_relu, PTS(X_KINKED), TINY, TINY, TINY, TINY, 0},
    {"leaky_relu", WFNS(leaky), r_leaky, d_leaky, PTS(X_KINKED), TINY, TINY, TINY, TINY, 0},
    /* elu: e^-100 is subnormal in float, so the f32 derivative gets a floor */
    {"elu", WFNS(elu), r_elu, d_elu, PTS(X_KINKED), TINY, TINY, TINY, 1e-30, 0},
    {"clamp", WFNS(clamp), r_clamp, d_clamp, PTS(X_CLAMP), TINY, TINY, TINY, TINY, 0},
    {"gelu_tanh", FNS(gelu_tanh), r_gelu_tanh, d_gelu_tanh, PTS(X_GELU), 0.1, 1e-4, 1.0, 1.0, 1},
    {"gelu", FNS(gelu), r_gelu, d_gelu, PTS(X_GELU), 0.1, 1e-4, 1.0, 0.1, 1},
    {"silu", FNS(silu), r_silu, d_silu, PTS(X_SILU), TINY, 1e-5, TINY, 0.1, 0},
    {"softplus", FNS(softplus), r_softplus, d_softplus, PTS(X_SILU), TINY, TINY, TINY, TINY, 0},
};

/* Central differences: step 1e-6 max(1, |x|), but at most 1e-4 |x| so that
 * log and sqrt near 0 stay in their domain; divided by the difference of the
 * points actually used. */
static double fd_step(double x) {
  double h = 1e-6 * (fabs(x) > 1 ? fabs(x) : 1.0);
  if (x != 0 && h > 1e-4 * fabs(x)) h = 1e-4 * fabs(x);
  return h;
}
static double central_diff(double (*f)(double), double x) {
  double h = fd_step(x), xp = x + h, xm = x - h;
  return (f(xp) - f(xm)) / (xp - xm);
}
/* Allowed |dual - central difference|: 1e-6 relative, plus the difference's
 * own rounding, about eps * noise / h where noise is |f| (plus |x| for
 * formulas that cancel to an absolute error in x, like gelu_tanh's 1 + tanh). */
static double fd_allow(double fd, double fx, double x, double xnoise) {
  return 1e-6 * fabs(fd) + 20 * DBL_EPSILON * (fabs(fx) + xnoise * fabs(x)) / fd_step(x);
}

static void check_unary(const unary_case *c) {
  int i;
  for (i = 0; i < c->n; i++) {
    float xf = (float)c->xs[i];
    double x = (double)xf; /* the point both precisions see */
    double v64 = c->f64(x), ref = c->ref(x), dref = c->dref(x);
    float v32 = c->f32(xf);
    dl_dual64 y64 = c->fdd(dl_dual64_make(x, 1.0));
    dl_dual y32 = c->fd(dl_dual_make(xf, 1.0f));
    dl_dual64 z64 = c->fdd(dl_dual64_make(x, 0.0));
    dl_dual64 s64 = c->fdd(dl_dual64_make(x, -2.5));
    double fd = central_diff(c->f64, x);

    CHECK_MSG(y64.v == v64, "%s(%g): dual64 value %.17g, f64 %.17g", c->name, x, y64.v, v64);
    CHECK_MSG(y32.v == v32, "%s(%g): dual value %.9g, f32 %.9g", c->name, x, y32.v, v32);
    CHECK_MSG(fabs(v64 - ref) <= 1e-13 * fmax(fabs(ref), c->vfloor64),
              "%s(%g): f64 %.17g, closed form %.17g", c->name, x, v64, ref);
    CHECK_MSG(fabs(v32 - ref) <= 1e-6 * fmax(fabs(ref), c->vfloor32),
              "%s(%g): f32 %.9g, closed form %.17g", c->name, x, v32, ref);
    CHECK_MSG(fabs(y64.d - dref) <= 1e-10 * fmax(fabs(dref), c->dfloor64),
              "%s(%g): dual64 d %.17g, analytic %.17g", c->name, x, y64.d, dref);
    CHECK_MSG(fabs(y64.d - fd) <= fd_allow(fd, v64, x, c->xnoise),
              "%s(%g): dual64 d %.17g, central difference %.17g", c->name, x, y64.d, fd);
    CHECK_MSG(fabs(y32.d - dref) <= 1e-5 * fmax(fabs(dref), c->dfloor32),
              "%s(%g): dual d %.9g, analytic %.17g", c->name, x, y32.d, dref);
    /* the derivative is linear in the seed: 0 gives 0, -2.5 gives -2.5 f' */
    CHECK_MSG(z64.v == v64 && z64.d == 0.0, "%s(%g): seed 0 gives d %g", c->name, x, z64.d);
    CHECK_MSG(s64.v == v64 && fabs(s64.d + 2.5 * y64.d) <= 1e-15 * fabs(y64.d),
              "%s(%g): seed -2.5 gives d %.17g, want %.17g", c->name, x, s64.d, -2.5 * y64.d);
  }
}

static void test_unary_table(void) {
  int k;
  for (k = 0; k < NELEM(UNARY); k++) check_unary(&UNARY[k]);
}

/* --- binary table ------------------------------------------------------------ */

static double b_add(double a, double b) { return a + b; }
static double b_sub(double a, double b) { return a - b; }
static double b_mul(double a, double b) { return a * b; }
static double b_div(double a, double b) { return a / b; }
static double b_pow(double a, double b) { return exp(b * log(a)); }
static double b_max(double a, double b) { return a > b ? a : b; }
static double b_min(double a, double b) { return a < b ? a : b; }
static double b_gt(double a, double b) { return a > b; }
static double b_ge(double a, double b) { return a >= b; }
static double b_lt(double a, double b) { return a < b; }
static double b_le(double a, double b) { return a <= b; }
static double b_eq(double a, double b) { return a == b; }
static double one(double a, double b) { (void)a; (void)b; return 1.0; }
static double minus_one(double a, double b) { (void)a; (void)b; return -1.0; }
static double zero(double a, double b) { (void)a; (void)b; return 0.0; }
static double second(double a, double b) { (void)a; return b; }
static double first(double a, double b) { (void)b; return a; }
static double div_da(double a, double b) { (void)a; return 1.0 / b; }
static double div_db(double a, double b) { return -a / (b * b); }
static double pow_da(double a, double b) { return b * exp((b - 1.0) * log(a)); }
static double pow_db(double a, double b) { return exp(b * log(a)) * log(a); }
static double max_da(double a, double b) { return a > b ? 1.0 : 0.0; }
static double max_db(double a, double b) { return a > b ? 0.0 : 1.0; }

typedef struct binary_case {
  const char *name;
  float (*f32)(float, float);
  double (*f64)(double, double);
  dl_dual (*fd)(dl_dual, dl_dual);
  dl_dual64 (*fdd)(dl_dual64, dl_dual64);
  double (*ref)(double, double), (*da)(double, double), (*db)(double, double);
  const double (*ps)[2];
  int n;
  double vtol64;
} binary_case;

/* no ties: max/min and the comparisons switch there (ties have their own tests) */
static const double P_ARITH[][2] = {{-3, 2},  {0.5, -0.25}, {1e-3, 7},  {100, -1e-2},
                                    {0, 3},   {-7.5, -0.125}, {1e6, 3e-3}, {2.25, 1e-6}};
static const double P_POW[][2] = {{2, 3},    {0.5, -1.5}, {10, 0.5}, {1.5, 2.25},
                                  {3, 0},    {0.25, 10},  {7, -2},   {1e-3, 0.5}, {1, 4.5}};

#define BIN(n) dl_##n##_f32, dl_##n##_f64, dl_##n##_dual, dl_##n##_dual64
static const binary_case BINARY[] = {
    {"add", BIN(add), b_add, one, one, PTS(P_ARITH), 0},
    {"sub", BIN(sub), b_sub, one, minus_one, PTS(P_ARITH), 0},
    {"mul", BIN(mul), b_mul, second, first, PTS(P_ARITH), 0},
    {"div", BIN(div), b_div, div_da, div_db, PTS(P_ARITH), 0},
    {"pow", BIN(pow), b_pow, pow_da, pow_db, PTS(P_POW), 1e-13},
    {"max", BIN(max), b_max, max_da, max_db, PTS(P_ARITH), 0},
    {"min", BIN(min), b_min, max_db, max_da, PTS(P_ARITH), 0},
    {"gt", BIN(gt), b_gt, zero, zero, PTS(P_ARITH), 0},
    {"ge", BIN(ge), b_ge, zero, zero, PTS(P_ARITH), 0},
    {"lt", BIN(lt), b_lt, zero, zero, PTS(P_ARITH), 0},
    {"le", BIN(le), b_le, zero, zero, PTS(P_ARITH), 0},
    {"eq", BIN(eq), b_eq, zero, zero, PTS(P_ARITH), 0},
};

static void check_binary(const binary_case *c) {
  int i, w;
  for (i = 0; i < c->n; i++) {
    float af = (float)c->ps[i][0], bf = (float)c->ps[i][1];
    double a = af, b = bf;
    double v64 = c->f64(a, b), ref = c->ref(a, b), v32 = c->f32(af, bf);
    double vref32 = c->ref(a, b);
    double dref[2], fd[2], f0 = c->f64(a, b);
    dl_dual64 y64[2];
    dl_dual y32[2];
    dl_dual64 both;
    dref[0] = c->da(a, b);
    dref[1] = c->db(a, b);
    {
      double ha = fd_step(a), hb = fd_step(b);
      double ap = a + ha, am = a - ha, bp = b + hb, bm = b - hb;
      fd[0] = (c->f64(ap, b) - c->f64(am, b)) / (ap - am);
      fd[1] = (c->f64(a, bp) - c->f64(a, bm)) / (bp - bm);
    }
    y64[0] = c->fdd(dl_dual64_make(a, 1.0), dl_dual64_make(b, 0.0));
    y64[1] = c->fdd(dl_dual64_make(a, 0.0), dl_dual64_make(b, 1.0));
    y32[0] = c->fd(dl_dual_make(af, 1.0f), dl_dual_make(bf, 0.0f));
    y32[1] = c->fd(dl_dual_make(af, 0.0f), dl_dual_make(bf, 1.0f));
    both = c->fdd(dl_dual64_make(a, 1.0), dl_dual64_make(b, 1.0));

    CHECK_MSG(fabs(v64 - ref) <= c->vtol64 * fabs(ref), "%s(%g, %g): f64 %.17g, want %.17g",
              c->name, a, b, v64, ref);
    CHECK_MSG(fabs(v32 - vref32) <= 1e-6 * fmax(fabs(vref32), TINY),
              "%s(%g, %g): f32 %.9g, want %.17g", c->name, a, b, v32, vref32);
    for (w = 0; w < 2; w++) {
      CHECK_MSG(y64[w].v == v64, "%s(%g, %g) seed %d: dual64 value %.17g, f64 %.17g", c->name,
                a, b, w, y64[w].v, v64);
      CHECK_MSG(y32[w].v == (float)v32, "%s(%g, %g) seed %d: dual value %.9g, f32 %.9g",
                c->name, a, b, w, y32[w].v, v32);
      CHECK_MSG(fabs(y64[w].d - dref[w]) <= 1e-10 * fmax(fabs(dref[w]), TINY),
                "%s(%g, %g) d/d%c: dual64 %.17g, analytic %.17g", c->name, a, b, "ab"[w],
                y64[w].d, dref[w]);
      CHECK_MSG(fabs(y64[w].d - fd[w]) <= fd_allow(fd[w], f0, w ? b : a, 0.0),
                "%s(%g, %g) d/d%c: dual64 %.17g, central difference %.17g", c->name, a, b,
                "ab"[w], y64[w].d, fd[w]);
      CHECK_MSG(fabs(y32[w].d - dref[w]) <= 1e-5 * fmax(fabs(dref[w]), 1e-3),
                "%s(%g, %g) d/d%c: dual %.9g, analytic %.17g", c->name, a, b, "ab"[w],
                y32[w].d, dref[w]);
    }
    /* seeding both gives the total derivative */
    CHECK_MSG(fabs(both.d - (y64[0].d + y64[1].d)) <= 1e-14 * fmax(fabs(both.d), 1.0),
              "%s(%g, %g): d/da + d/db %.17g, both seeded %.17g", c->name, a, b,
              y64[0].d + y64[1].d, both.d);
  }
}

static void test_binary_table(void) {
  int k;
  for (k = 0; k < NELEM(BINARY); k++) check_binary(&BINARY[k]);
}

/* pow with a negative base and an integer exponent: d/da is b a^(b-1), and the
 * ln(a) term is skipped when b carries no derivative (it would be NaN). */
static void test_pow_negative_base(void) {
  dl_dual64 y = dl_pow_dual64(dl_dual64_make(-2.0, 1.0), dl_dual64_make(3.0, 0.0));
  dl_dual z = dl_pow_dual(dl_dual_make(-2.0f, 1.0f), dl_dual_make(3.0f, 0.0f));
  dl_dual64 c = dl_pow_dual64(dl_dual64_make(-1.5, 0.0), dl_dual64_make(2.0, 0.0));
  dl_dual64 zero_base = dl_pow_dual64(dl_dual64_make(0.0, 1.0), dl_dual64_make(2.0, 0.0));
  CHECK(y.v == -8.0 && y.d == 12.0);
  CHECK(z.v == -8.0f && z.d == 12.0f);
  CHECK(c.v == 2.25 && c.d == 0.0);
  CHECK(zero_base.v == 0.0 && zero_base.d == 0.0);
  CHECK(dl_pow_f64(-2.0, 3.0) == -8.0 && dl_pow_f32(-2.0f, 3.0f) == -8.0f);
}

/* --- where ------------------------------------------------------------------ */

static void test_where(void) {
  const double cs[] = {1.0, -3.0, 1e-300, 0.0, -0.0};
  int i;
  for (i = 0; i < NELEM(cs); i++) {
    int pick_a = cs[i] != 0.0;
    dl_dual64 y = dl_where_dual64(dl_dual64_make(cs[i], 11.0), dl_dual64_make(3.0, 7.0),
                                  dl_dual64_make(4.0, 9.0));
    dl_dual z = dl_where_dual(dl_dual_make((float)cs[i], 11.0f), dl_dual_make(3.0f, 7.0f),
                              dl_dual_make(4.0f, 9.0f));
    double v = dl_where_f64(cs[i], 3.0, 4.0);
    float vf = dl_where_f32((float)cs[i], 3.0f, 4.0f);
    int pick_af = (float)cs[i] != 0.0f; /* 1e-300 is 0 as a float */
    CHECK_MSG(v == (pick_a ? 3.0 : 4.0), "where f64 c=%g gives %g", cs[i], v);
    CHECK_MSG(vf == (pick_af ? 3.0f : 4.0f), "where f32 c=%g gives %g", cs[i], vf);
    CHECK_MSG(y.v == (pick_a ? 3.0 : 4.0) && y.d == (pick_a ? 7.0 : 9.0),
              "where dual64 c=%g gives (%g, %g)", cs[i], y.v, y.d);
    CHECK_MSG(z.v == (pick_af ? 3.0f : 4.0f) && z.d == (pick_af ? 7.0f : 9.0f),
              "where dual c=%g gives (%g, %g)", cs[i], z.v, z.d);
  }
  /* a NaN condition is != 0, so it selects a */
  CHECK(dl_where_f64(NAN, 3.0, 4.0) == 3.0);
  CHECK(dl_where_dual64(dl_dual64_make(NAN, 0.0), dl_dual64_make(3.0, 1.0),
                        dl_dual64_make(4.0, 2.0)).d == 1.0);
  /* seeding only the condition gives no derivative */
  CHECK(dl_where_dual64(dl_dual64_make(1.0, 1.0), dl_dual64_make(3.0, 0.0),
                        dl_dual64_make(4.0, 0.0)).d == 0.0);
  /* a piecewise function via where: d/dx where(x > 0, x^2, -x) */
  {
    dl_dual64 x = dl_dual64_make(1.5, 1.0), xn = dl_dual64_make(-1.5, 1.0);
    dl_dual64 zero64 = dl_dual64_make(0.0, 0.0);
    dl_dual64 p = dl_where_dual64(dl_gt_dual64(x, zero64), dl_mul_dual64(x, x), dl_neg_dual64(x));
    dl_dual64 q = dl_where_dual64(dl_gt_dual64(xn, zero64), dl_mul_dual64(xn, xn), dl_neg_dual64(xn));
    CHECK(p.v == 2.25 && p.d == 3.0);
    CHECK(q.v == 1.5 && q.d == -1.0);
  }
}

/* --- kink conventions ---------------------------------------------------------- */

static void test_kinks(void) {
  const double zeros[] = {0.0, -0.0};
  int i;
  for (i = 0; i < 2; i++) {
    double z = zeros[i];
    float zf = (float)z;
    dl_dual64 r;
    dl_dual rf;
    /* relu'(0) = 0 */
    r = dl_relu_dual64(dl_dual64_make(z, 1.0));
    rf = dl_relu_dual(dl_dual_make(zf, 1.0f));
    CHECK(r.v == 0.0 && r.d == 0.0 && rf.v == 0.0f && rf.d == 0.0f);
    /* leaky_relu'(0) = slope */
    r = dl_leaky_relu_dual64(dl_dual64_make(z, 1.0), 0.2);
    rf = dl_leaky_relu_dual(dl_dual_make(zf, 1.0f), 0.2f);
    CHECK(r.v == 0.0 && r.d == 0.2 && rf.v == 0.0f && rf.d == 0.2f);
    r = dl_leaky_relu_dual64(dl_dual64_make(z, 3.0), 0.01);
    CHECK(r.d == 0.01 * 3.0);
    /* elu'(0) = alpha */
    r = dl_elu_dual64(dl_dual64_make(z, 1.0), 1.5);
    rf = dl_elu_dual(dl_dual_make(zf, 1.0f), 1.5f);
    CHECK(r.v == 0.0 && r.d == 1.5 && rf.v == 0.0f && rf.d == 1.5f);
    r = dl_elu_dual64(dl_dual64_make(z, 1.0), 0.25);
    CHECK(r.d == 0.25);
    /* abs'(0) = 0 */
    r = dl_abs_dual64(dl_dual64_make(z, 1.0));
    rf = dl_abs_dual(dl_dual_make(zf, 1.0f));
    CHECK(r.v == 0.0 && r.d == 0.0 && rf.v == 0.0f && rf.d == 0.0f);
    CHECK(!signbit(r.v) && !signbit(dl_abs_f64(z)) && !signbit(dl_abs_f32(zf)));
  }
  /* clamp: gradient passes for lo <= x <= hi, inclusive, and is 0 outside */
  {
    const double xs[] = {-1.0, 2.0, -1.0 - 1e-12, 2.0 + 1e-12, 0.5};
    const double want_v[] = {-1.0, 2.0, -1.0, 2.0, 0.5}, want_d[] = {1, 1, 0, 0, 1};
    for (i = 0; i < NELEM(xs); i++) {
      dl_dual64 r = dl_clamp_dual64(dl_dual64_make(xs[i], 1.0), -1.0, 2.0);
      CHECK_MSG(r.v == want_v[i] && r.d == want_d[i], "clamp(%.17g) = (%g, %g)", xs[i], r.v,
                r.d);
      CHECK(dl_clamp_f64(xs[i], -1.0, 2.0) == want_v[i]);
    }
    {
      const float xf[] = {-1.0f, 2.0f, -1.0000001f, 2.0000002f, 0.5f};
      for (i = 0; i < NELEM(xf); i++) {
        dl_dual r = dl_clamp_dual(dl_dual_make(xf[i], 1.0f), -1.0f, 2.0f);
        CHECK_MSG(r.v == (float)want_v[i] && r.d == (float)want_d[i], "clamp(%.9g) = (%g, %g)",
                  xf[i], r.v, r.d);
        CHECK(dl_clamp_f32(xf[i], -1.0f, 2.0f) == (float)want_v[i]);
      }
    }
    /* lo == hi: the one point passes the gradient */
    CHECK(dl_clamp_dual64(dl_dual64_make(3.0, 1.0), 3.0, 3.0).d == 1.0);
  }
  /* max/min split the gradient evenly on ties */
  {
    dl_dual64 a = dl_dual64_make(2.0, 1.0), b = dl_dual64_make(2.0, 0.0);
    dl_dual64 p = dl_dual64_make(2.0, 3.0), q = dl_dual64_make(2.0, 5.0);
    dl_dual af = dl_dual_make(-1.0f, 1.0f), bf = dl_dual_make(-1.0f, 0.0f);
    CHECK(dl_max_dual64(a, b).v == 2.0 && dl_max_dual64(a, b).d == 0.5);
    CHECK(dl_max_dual64(b, a).d == 0.5);
    CHECK(dl_min_dual64(a, b).v == 2.0 && dl_min_dual64(a, b).d == 0.5);
    CHECK(dl_min_dual64(b, a).d == 0.5);
    CHECK(dl_max_dual64(p, q).d == 4.0 && dl_min_dual64(q, p).d == 4.0);
    CHECK(dl_max_dual64(a, a).d == 1.0); /* max(x, x) = x: derivative 1 */
    CHECK(dl_max_dual(af, bf).v == -1.0f && dl_max_dual(af, bf).d == 0.5f);
    CHECK(dl_min_dual(bf, af).d == 0.5f);
    /* +0 and -0 tie too */
    CHECK(dl_max_dual64(dl_dual64_make(0.0, 1.0), dl_dual64_make(-0.0, 0.0)).d == 0.5);
  }
  /* comparisons have derivative 0, at ties and away from them, whatever the seeds */
  {
    const double ab[][2] = {{1, 2}, {2, 2}, {3, 2}, {-0.0, 0.0}};
    /* gt ge lt le eq for each pair */
    const double want[][5] = {{0, 0, 1, 1, 0}, {0, 1, 0, 1, 1}, {1, 1, 0, 0, 0}, {0, 1, 0, 1, 1}};
    for (i = 0; i < NELEM(ab); i++) {
      dl_dual64 a = dl_dual64_make(ab[i][0], 1.0), b = dl_dual64_make(ab[i][1], -2.0);
      dl_dual af = dl_dual_make((float)ab[i][0], 1.0f), bf = dl_dual_make((float)ab[i][1], 1.0f);
      dl_dual64 r[5];
      dl_dual rf[5];
      double r64[5];
      float r32[5];
      int k;
      r[0] = dl_gt_dual64(a, b); r[1] = dl_ge_dual64(a, b); r[2] = dl_lt_dual64(a, b);
      r[3] = dl_le_dual64(a, b); r[4] = dl_eq_dual64(a, b);
      rf[0] = dl_gt_dual(af, bf); rf[1] = dl_ge_dual(af, bf); rf[2] = dl_lt_dual(af, bf);
      rf[3] = dl_le_dual(af, bf); rf[4] = dl_eq_dual(af, bf);
      r64[0] = dl_gt_f64(a.v, b.v); r64[1] = dl_ge_f64(a.v, b.v); r64[2] = dl_lt_f64(a.v, b.v);
      r64[3] = dl_le_f64(a.v, b.v); r64[4] = dl_eq_f64(a.v, b.v);
      r32[0] = dl_gt_f32(af.v, bf.v); r32[1] = dl_ge_f32(af.v, bf.v); r32[2] = dl_lt_f32(af.v, bf.v);
      r32[3] = dl_le_f32(af.v, bf.v); r32[4] = dl_eq_f32(af.v, bf.v);
      for (k = 0; k < 5; k++) {
        CHECK_MSG(r[k].v == want[i][k] && r[k].d == 0.0 && r64[k] == want[i][k],
                  "comparison %d of (%g, %g): (%g, %g), f64 %g", k, ab[i][0], ab[i][1], r[k].v,
                  r[k].d, r64[k]);
        CHECK_MSG(rf[k].v == (float)want[i][k] && rf[k].d == 0.0f && r32[k] == (float)want[i][k],
                  "f32 comparison %d of (%g, %g): (%g, %g), f32 %g", k, ab[i][0], ab[i][1],
                  rf[k].v, rf[k].d, r32[k]);
      }
    }
  }
}

/* --- NaN and softplus at +-100 ------------------------------------------------- */

static void test_nan_propagation(void) {
  dl_dual64 n64 = dl_dual64_make(NAN, 1.0), o64 = dl_dual64_make(1.0, 2.0);
  dl_dual n32 = dl_dual_make(NAN, 1.0f), o32 = dl_dual_make(1.0f, 2.0f);
  CHECK(isnan(dl_max_f64(NAN, 1.0)) && isnan(dl_max_f64(1.0, NAN)));
  CHECK(isnan(dl_min_f64(NAN, 1.0)) && isnan(dl_min_f64(1.0, NAN)));
  CHECK(isnan(dl_max_f32(NAN, 1.0f)) && isnan(dl_max_f32(1.0f, NAN)));
  CHECK(isnan(dl_min_f32(NAN, 1.0f)) && isnan(dl_min_f32(1.0f, NAN)));
  CHECK(isnan(dl_max_f64(NAN, -INFINITY)) && isnan(dl_min_f64(INFINITY, NAN)));
  CHECK(isnan(dl_max_dual64(n64, o64).v) && isnan(dl_max_dual64(o64, n64).v));
  CHECK(isnan(dl_min_dual64(n64, o64).v) && isnan(dl_min_dual64(o64, n64).v));
  CHECK(isnan(dl_max_dual(n32, o32).v) && isnan(dl_max_dual(o32, n32).v));
  CHECK(isnan(dl_min_dual(n32, o32).v) && isnan(dl_min_dual(o32, n32).v));
  /* the NaN operand is the one returned, derivative and all */
  CHECK(dl_max_dual64(o64, n64).d == 1.0 && dl_min_dual64(o64, n64).d == 1.0);
  CHECK(dl_max_dual64(n64, o64).d == 1.0 && dl_min_dual64(n64, o64).d == 1.0);
  CHECK(dl_max_dual(n32, o32).d == 1.0f && dl_min_dual(o32, n32).d == 1.0f);
  CHECK(isnan(dl_relu_f64(NAN)) && isnan(dl_relu_f32(NAN)));
  CHECK(isnan(dl_relu_dual64(n64).v) && isnan(dl_relu_dual(n32).v));
  CHECK(isnan(dl_relu_f64(-NAN)) && isnan(dl_relu_f32(-NAN)));
  /* ordinary values still work next to the NaN cases */
  CHECK(dl_max_f64(1.0, 2.0) == 2.0 && dl_min_f64(1.0, 2.0) == 1.0 && dl_relu_f64(-1.0) == 0.0);
}

static void test_softplus_extremes(void) {
  const double xs[] = {100.0, -100.0};
  int i;
  for (i = 0; i < 2; i++) {
    double x = xs[i], want = x > 0 ? x + exp(-x) : exp(x); /* ln(1 + e^-100) = e^-100 */
    double v = dl_softplus_f64(x);
    float vf = dl_softplus_f32((float)x);
    dl_dual64 y = dl_softplus_dual64(dl_dual64_make(x, 1.0));
    dl_dual yf = dl_softplus_dual(dl_dual_make((float)x, 1.0f));
    CHECK_MSG(isfinite(v) && isfinite(y.v) && isfinite(y.d), "softplus(%g) = %g, d %g", x, v, y.d);
    CHECK_MSG(isfinite(vf) && isfinite(yf.v) && isfinite(yf.d), "softplus f32(%g) = %g, d %g", x,
              vf, yf.d);
    CHECK_REL(v, want, 1e-13, TINY);
    CHECK(y.v == v);
    CHECK(y.d == dl_sigmoid_f64(x));
    CHECK_REL(y.d, sigm(x), 1e-13, TINY);
    CHECK(yf.d == dl_sigmoid_f32((float)x));
    /* f32: e^-100 is below float's normal range; allow it to round or flush */
    CHECK_NEAR(vf, want, 1e-6 * fabs(want) + 1e-40);
    CHECK_NEAR(yf.d, sigm(x), 1e-6 * sigm(x) + 1e-40);
    CHECK(vf >= 0.0f && yf.d >= 0.0f);
  }
  /* and the rest of the range stays finite and monotone */
  {
    double x, prev = -1.0;
    int mono = 1, fin = 1;
    for (x = -700.0; x <= 700.0; x += 12.5) {
      double v = dl_softplus_f64(x);
      dl_dual64 y = dl_softplus_dual64(dl_dual64_make(x, 1.0));
      fin &= isfinite(v) && isfinite(y.d) && y.d >= 0.0 && y.d <= 1.0;
      mono &= v >= prev;
      prev = v;
    }
    CHECK(fin && mono);
  }
}

/* --- the generic names in a DL_SCALAR context ---------------------------------- */

/* One function text, compiled in each scalar context: the point of the
 * generic names. NAME_dual64 / NAME_dual / NAME_f64 / NAME_f32 of x. */
#define DEFINE_IN_CONTEXTS(NAME, BODY)                                             \
  static dl_dual64 NAME##_dual64(dl_dual64 x) { DL_SCALAR(dl_dual64); return BODY; } \
  static dl_dual NAME##_dual(dl_dual x) { DL_SCALAR(dl_dual); return BODY; }      \
  static double NAME##_f64(double x) { DL_SCALAR(double); return BODY; }          \
  static float NAME##_f32(float x) { DL_SCALAR(float); return BODY; }

/* f(x) = x e^x - 2, with an integer literal */
DEFINE_IN_CONTEXTS(g, dl_sub(dl_mul(x, dl_exp(x)), 2))

/* h(x) = 0.5 x^2 + sin(x)/3 - softplus(-x) + where(x > 1, leaky_relu(x, 0.1), clamp(x, -1, 1))
 *        + max(x, 0.25): double and integer literals, parameters, comparisons */
DEFINE_IN_CONTEXTS(h, dl_add(dl_add(dl_sub(dl_add(dl_mul(0.5, dl_pow(x, 2)), dl_div(dl_sin(x), 3)),
                                           dl_softplus(dl_neg(x))),
                                    dl_where(dl_gt(x, 1), dl_leaky_relu(x, 0.1), dl_clamp(x, -1, 1))),
                             dl_max(x, 0.25)))

static double h_ref(double x) {
  return 0.5 * x * x + sin(x) / 3 - r_softplus(-x) + (x > 1 ? x : (x < -1 ? -1 : x)) +
         (x > 0.25 ? x : 0.25);
}
static double h_dref(double x) {
  return x + cos(x) / 3 + sigm(-x) + (x < -1 ? 0.0 : 1.0) + (x > 0.25 ? 1.0 : 0.0);
}

static void test_generic_scalar(void) {
  const double xs[] = {-3, -1.25, -0.5, 0.1, 0.75, 1.5, 4};
  int i;
  for (i = 0; i < NELEM(xs); i++) {
    float xf = (float)xs[i];
    double x = xf;
    dl_dual64 y = g_dual64(dl_dual64_make(x, 1.0));
    dl_dual yf = g_dual(dl_dual_make(xf, 1.0f));
    double v = g_f64(x);
    float vf = g_f32(xf);
    dl_dual64 hy = h_dual64(dl_dual64_make(x, 1.0));
    double hv = h_f64(x);
    float hvf = h_f32(xf);
    dl_dual hyf = h_dual(dl_dual_make(xf, 1.0f));
    CHECK_MSG(y.v == v, "g(%g): dual64 %.17g, double %.17g", x, y.v, v);
    CHECK(v == x * exp(x) - 2.0);
    CHECK_REL(y.d, (1.0 + x) * exp(x), 1e-14, TINY);
    CHECK_REL(yf.d, (1.0 + x) * exp(x), 1e-5, 1e-3);
    CHECK(yf.v == vf);
    CHECK_REL(vf, x * exp(x) - 2.0, 1e-6, 1.0);
    CHECK_MSG(hy.v == hv, "h(%g): dual64 %.17g, double %.17g", x, hy.v, hv);
    CHECK_REL(hv, h_ref(x), 1e-14, 1.0);
    CHECK_REL(hvf, h_ref(x), 1e-6, 1.0);
    CHECK_REL(hy.d, h_dref(x), 1e-13, 1.0);
    CHECK_REL(hy.d, central_diff(h_f64, x), 1e-6, 1.0);
    CHECK(hyf.v == hvf);
    CHECK_REL(hyf.d, h_dref(x), 1e-5, 1.0);
  }
}

static void test_generic_types(void) {
  {
    DL_SCALAR(dl_dual64);
    dl_dual64 x = dl_dual64_make(2.0, 1.0);
    double c = 3.0;
    CHECK(_Generic(dl_exp(x), dl_dual64: 1, default: 0));
    CHECK(_Generic(dl_exp(1), dl_dual64: 1, default: 0));
    CHECK(_Generic(dl_leaky_relu(x, 0.1), dl_dual64: 1, default: 0));
    /* numbers become constants: derivative 0 */
    CHECK(dl_add(x, 2).d == 1.0 && dl_add(x, 2).v == 4.0);
    CHECK(dl_mul(3, x).d == 3.0 && dl_mul(c, x).d == 3.0);
    CHECK(dl_exp(0.5).v == exp(0.5) && dl_exp(0.5).d == 0.0);
    CHECK(dl_add(0.1, x).v == 0.1 + 2.0); /* a double literal stays double */
    CHECK(dl_div(1, x).d == -0.25);
    CHECK(dl_pow(x, 3).d == 12.0);
    CHECK(dl_pow(2, x).d == 4.0 * log(2.0));
  }
  {
    DL_SCALAR(dl_dual);
    dl_dual x = dl_dual_make(2.0f, 1.0f);
    CHECK(_Generic(dl_exp(x), dl_dual: 1, default: 0));
    CHECK(dl_mul(x, 0.1).v == 2.0f * 0.1f && dl_mul(x, 0.1).d == 0.1f);
    CHECK(dl_add(x, 2).d == 1.0f);
  }
  {
    DL_SCALAR(double);
    float f = 0.1f;
    CHECK(_Generic(dl_exp(1), double: 1, default: 0));
    CHECK(_Generic(dl_add(f, 1), double: 1, default: 0));
    CHECK(dl_add(f, 0.2) == (double)0.1f + 0.2);
    CHECK(dl_exp(1) == exp(1.0));
  }
  {
    DL_SCALAR(float);
    double d = 0.1;
    float x = 9.0f;
    CHECK(_Generic(dl_exp(x), float: 1, default: 0));
    CHECK(_Generic(dl_mul(x, 0.1), float: 1, default: 0));
    CHECK(_Generic(dl_add(d, 1), float: 1, default: 0));
    /* 0.1 becomes (float)0.1 before the multiply: 9 * 0.1f rounds to
     * 0.90000004, while 9 * 0.1 in double then rounded gives 0.9f */
    CHECK(x * 0.1f != (float)(x * 0.1));
    CHECK(dl_mul(x, 0.1) == x * 0.1f);
    CHECK(dl_mul(x, 0.1) != (float)(x * 0.1));
    CHECK(dl_mul(x, d) == x * 0.1f);
    CHECK(dl_add(1, 0.1) == 1.0f + 0.1f);
  }
}

/* --- Newton's method on dual numbers ---------------------------------------------- */

static dl_dual64 cubic(dl_dual64 x) {
  DL_SCALAR(dl_dual64);
  return dl_sub(dl_sub(dl_mul(x, dl_mul(x, x)), dl_mul(2, x)), 5);
}

/* --- second derivatives: nested duals (dl_dual2) ------------------------------
 * Each function on ((x, t), (1, 0)) must give v = (f(x), f'(x) t) and
 * d = (f'(x), f''(x) t): v and d.v equal to the dl_dual64 results (1e-14
 * relative: the composite rules round in another order), d.d / t against central differences
 * of the dl_dual64 derivative, 1e-6 relative (floor 1e-7); for two inputs
 * the mixed partials as well, with the seed on x0 then on x1. A few second
 * derivatives are also checked against closed forms written here. */
typedef dl_dual64 (*d64_1)(dl_dual64);
typedef dl_dual2 (*d2_1)(dl_dual2);
typedef dl_dual64 (*d64_2)(dl_dual64, dl_dual64);
typedef dl_dual2 (*d2_2)(dl_dual2, dl_dual2);
static double d64_slope(d64_1 f, double x) { return f(dl_dual64_make(x, 1.0)).d; }
static int close2(double got, double want, double rel, double floor) {
  return fabs(got - want) <= rel * fmax(fabs(want), floor);
}
static void check_second_1(const char *name, d64_1 f64, d2_1 f2, double x) {
  const double t = 0.75, h = 1e-5 * fmax(1.0, fabs(x));
  const dl_dual2 r = f2(dl_dual2_make(x, t, 1.0));
  const dl_dual64 a = f64(dl_dual64_make(x, t)), b = f64(dl_dual64_make(x, 1.0));
  const double fd = (d64_slope(f64, x + h) - d64_slope(f64, x - h)) / (2 * h);
  CHECK_MSG(close2(r.v.v, a.v, 1e-14, 1e-300) && close2(r.v.d, a.d, 1e-14, 1e-300) && close2(r.d.v, b.d, 1e-14, 1e-300),
            "%s(%g): first order (%.17g, %.17g, %.17g) vs dual64", name, x, r.v.v, r.v.d, r.d.v);
  CHECK_MSG(close2(r.d.d / t, fd, 1e-6, 1e-7), "%s''(%g) = %.12g, central differences %.12g", name, x, r.d.d / t, fd);
}
static void check_second_2(const char *name, d64_2 f64, d2_2 f2, double x0, double x1) {
  const double t0 = 0.6, t1 = -0.35, h = 1e-5;
  int k;
  for (k = 0; k < 2; k++) { /* the seed (the outer derivative) on x0, then on x1 */
    const dl_dual2 r = f2(dl_dual2_make(x0, t0, k == 0), dl_dual2_make(x1, t1, k == 1));
    /* d/ds of df/dxk at (x0 + s t0, x1 + s t1) */
    const dl_dual64 p0 = f64(dl_dual64_make(x0 + h * t0, k == 0), dl_dual64_make(x1 + h * t1, k == 1));
    const dl_dual64 m0 = f64(dl_dual64_make(x0 - h * t0, k == 0), dl_dual64_make(x1 - h * t1, k == 1));
    const dl_dual64 b = f64(dl_dual64_make(x0, k == 0), dl_dual64_make(x1, k == 1));
    const double fd = (p0.d - m0.d) / (2 * h);
    CHECK_MSG(r.d.v == b.d, "%s(%g, %g) seed %d: first order %.17g vs %.17g", name, x0, x1, k, r.d.v, b.d);
    CHECK_MSG(close2(r.d.d, fd, 1e-6, 1e-7), "%s(%g, %g) seed %d: second order %.12g, central differences %.12g",
              name, x0, x1, k, r.d.d, fd);
  }
}
static dl_dual64 d64_leaky(dl_dual64 x) { return dl_leaky_relu_dual64(x, 0.2); }
static dl_dual2 d2_leaky(dl_dual2 x) { return dl_leaky_relu_dual2(x, 0.2); }
static dl_dual64 d64_elu(dl_dual64 x) { return dl_elu_dual64(x, 1.3); }
static dl_dual2 d2_elu(dl_dual2 x) { return dl_elu_dual2(x, 1.3); }
static dl_dual64 d64_clamp(dl_dual64 x) { return dl_clamp_dual64(x, -1.0, 2.0); }
static dl_dual2 d2_clamp(dl_dual2 x) { return dl_clamp_dual2(x, -1.0, 2.0); }
/* a composite in the generic math, written once, evaluated on both types */
static dl_dual64 comp64(dl_dual64 x) {
  DL_SCALAR(dl_dual64);
  return dl_mul(dl_tanh(dl_mul(x, 1.5)), dl_add(dl_exp(dl_neg(dl_square(x))), dl_softplus(x)));
}
static dl_dual2 comp2(dl_dual2 x) {
  DL_SCALAR(dl_dual2);
  return dl_mul(dl_tanh(dl_mul(x, 1.5)), dl_add(dl_exp(dl_neg(dl_square(x))), dl_softplus(x)));
}
static void test_second_derivatives(void) {
  static const struct {
    const char *name;
    d64_1 f64;
    d2_1 f2;
    double lo; /* points: lo .. lo + 3 in steps of 0.73 (away from kinks) */
  } un[] = {
      {"exp", dl_exp_dual64, dl_exp_dual2, -2.1},          {"log", dl_log_dual64, dl_log_dual2, 0.3},
      {"log1p", dl_log1p_dual64, dl_log1p_dual2, -0.7},    {"expm1", dl_expm1_dual64, dl_expm1_dual2, -2.1},
      {"sqrt", dl_sqrt_dual64, dl_sqrt_dual2, 0.2},        {"sin", dl_sin_dual64, dl_sin_dual2, -1.9},
      {"cos", dl_cos_dual64, dl_cos_dual2, -1.9},          {"tanh", dl_tanh_dual64, dl_tanh_dual2, -2.1},
      {"sigmoid", dl_sigmoid_dual64, dl_sigmoid_dual2, -2.1}, {"erf", dl_erf_dual64, dl_erf_dual2, -1.6},
      {"abs", dl_abs_dual64, dl_abs_dual2, -2.1},          {"square", dl_square_dual64, dl_square_dual2, -2.1},
      {"relu", dl_relu_dual64, dl_relu_dual2, -2.1},       {"gelu_tanh", dl_gelu_tanh_dual64, dl_gelu_tanh_dual2, -2.9},
      {"gelu", dl_gelu_dual64, dl_gelu_dual2, -2.9},       {"silu", dl_silu_dual64, dl_silu_dual2, -2.9},
      {"softplus", dl_softplus_dual64, dl_softplus_dual2, -2.9}, {"neg", dl_neg_dual64, dl_neg_dual2, -2.1},
      {"leaky_relu", d64_leaky, d2_leaky, -2.1},           {"elu", d64_elu, d2_elu, -2.1},
      {"clamp", d64_clamp, d2_clamp, -2.1},                {"composite", comp64, comp2, -2.1},
  };
  static const struct {
    const char *name;
    d64_2 f64;
    d2_2 f2;
    double x0, x1;
  } bin[] = {
      {"add", dl_add_dual64, dl_add_dual2, 0.4, -1.3}, {"sub", dl_sub_dual64, dl_sub_dual2, 0.4, -1.3},
      {"mul", dl_mul_dual64, dl_mul_dual2, 0.4, -1.3}, {"div", dl_div_dual64, dl_div_dual2, 0.4, -1.3},
      {"pow", dl_pow_dual64, dl_pow_dual2, 1.7, -1.3}, {"pow", dl_pow_dual64, dl_pow_dual2, 0.6, 2.5},
      {"max", dl_max_dual64, dl_max_dual2, 0.4, -1.3}, {"min", dl_min_dual64, dl_min_dual2, 0.4, -1.3},
  };
  int i, k;
  for (i = 0; i < NELEM(un); i++)
    for (k = 0; k < 5; k++) check_second_1(un[i].name, un[i].f64, un[i].f2, un[i].lo + 0.73 * k);
  for (i = 0; i < NELEM(bin); i++) check_second_2(bin[i].name, bin[i].f64, bin[i].f2, bin[i].x0, bin[i].x1);
  { /* closed forms: tanh'' = -2 t (1 - t^2), sigmoid'' = s (1 - s) (1 - 2 s), gelu'' = pdf (2 - x^2) */
    const double x = 0.83, t = dl_tanh_f64(x), sg = sigm(x), pdf = exp(-0.5 * x * x) / sqrt(2 * 3.14159265358979323846);
    CHECK(close2(dl_tanh_dual2(dl_dual2_make(x, 1, 1)).d.d, -2 * t * (1 - t * t), 1e-13, TINY));
    CHECK(close2(dl_sigmoid_dual2(dl_dual2_make(x, 1, 1)).d.d, sg * (1 - sg) * (1 - 2 * sg), 1e-13, TINY));
    CHECK(close2(dl_gelu_dual2(dl_dual2_make(x, 1, 1)).d.d, pdf * (2 - x * x), 1e-13, TINY));
    CHECK(close2(dl_log_dual2(dl_dual2_make(x, 1, 1)).d.d, -1 / (x * x), 1e-15, TINY));
  }
  { /* numbers in a dl_dual2 context are constants; kinks and comparisons have no second derivative */
    DL_SCALAR(dl_dual2);
    const dl_dual2 c = dl_add(dl_mul(2, 3), 0.5), g = dl_gt(dl_dual2_make(1, 1, 1), 0);
    CHECK(c.v.v == 6.5 && c.v.d == 0 && c.d.v == 0 && c.d.d == 0);
    CHECK(g.v.v == 1 && g.d.v == 0 && g.d.d == 0);
    CHECK(dl_relu_dual2(dl_dual2_make(0.0, 1, 1)).d.v == 0 && dl_abs_dual2(dl_dual2_make(0.0, 1, 1)).d.v == 0);
  }
}

static void test_newton(void) {
  const double root = 2.0945514815423265;
  const double starts[] = {2.0, 3.0, 10.0};
  int s;
  for (s = 0; s < NELEM(starts); s++) {
    double x = starts[s];
    int it;
    for (it = 0; it < 50; it++) {
      dl_dual64 y = cubic(dl_dual64_make(x, 1.0));
      double step;
      CHECK_MSG(fabs(y.d - (3.0 * x * x - 2.0)) <= 1e-15 * 3.0 * x * x, "f'(%.17g) = %.17g", x, y.d);
      step = y.v / y.d;
      x -= step;
      if (fabs(step) < 1e-15 * fabs(x)) break;
    }
    CHECK_MSG(fabs(x - root) <= 1e-12, "Newton from %g ends at %.17g", starts[s], x);
    CHECK_MSG(it < 20, "Newton from %g took %d steps", starts[s], it);
  }
}

int main(void) {
  RUN(test_unary_table);
  RUN(test_binary_table);
  RUN(test_pow_negative_base);
  RUN(test_where);
  RUN(test_kinks);
  RUN(test_nan_propagation);
  RUN(test_softplus_extremes);
  RUN(test_generic_scalar);
  RUN(test_generic_types);
  RUN(test_newton);
  RUN(test_second_derivatives);
  return harness_finish();
}
