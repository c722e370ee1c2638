/* tests/test_vmath.c - accuracy and special values of dl/vmath.h.
 *
 *   gcc -std=c11 -O2 -Wall -Wextra -Wpedantic -Werror -Iinclude -Itests \
 *       tests/test_vmath.c -o /tmp/tv -lm && /tmp/tv
 *
 * Every function is evaluated in a plain loop over a block of inputs (the
 * same kind of loop the library vectorises, so at -O3 the SIMD code is what
 * is tested) and compared in ulp against a wider reference: libm's double
 * function for f32, the long double one for f64. f32 sweeps take every
 * 2^10-th bit pattern of the whole float range plus every float (or every
 * few) near 0, around the function's switch points and at its overflow /
 * underflow thresholds; f64 takes random bit patterns, random points in the
 * interesting range, log-uniform magnitudes down to 2^-60 and runs of
 * consecutive doubles at the switch points. The max error of each function
 * must stay within the bound below, the one the header's table states next
 * to the measured maximum. VMATH_VERBOSE=1 in the environment prints the
 * maxima this run found.
 */
#include "dl/vmath.h"

#include "harness.h"

#include <float.h>
#include <stdint.h>

/* Tested bounds, in ulp. */
#define BOUND_EXP_F32 1.0
#define BOUND_EXPM1_F32 1.3
#define BOUND_LOG_F32 0.9
#define BOUND_LOG1P_F32 0.9
#define BOUND_TANH_F32 1.4
#define BOUND_SIGMOID_F32 2.0
#define BOUND_ERF_F32 1.4
#define BOUND_EXP_F64 1.1
#define BOUND_EXPM1_F64 1.6
#define BOUND_LOG_F64 0.95
#define BOUND_LOG1P_F64 0.95
#define BOUND_TANH_F64 1.6
#define BOUND_SIGMOID_F64 2.1
#define BOUND_ERF_F64 1.6

/* Without a long double wider than double, the f64 reference is libm's
 * double function, whose own error (up to about 1 ulp) adds to ours. */
#if LDBL_MANT_DIG > DBL_MANT_DIG
#define REF64_SLACK 0.0
#else
#define REF64_SLACK 1.0
#endif

static int verbose;

/* ---- ulp error ---------------------------------------------------------- */

/* |y - ref| in ulp of the float binade of ref (subnormal spacing below
 * FLT_MIN). A NaN must meet a NaN; an infinity counts as 2^128 unless the
 * reference also rounds to it. */
static double ulp_err_f32(float y, double ref) {
  if (isnan(ref) || isnan(y)) return isnan(ref) && isnan(y) ? 0.0 : INFINITY;
  if (isinf(y) && isinf((float)ref) && (y > 0) == (ref > 0)) return 0.0;
  double yy = isinf(y) ? copysign(0x1p128, (double)y) : (double)y;
  if (isinf(ref)) return INFINITY;
  int e = ref == 0.0 ? -126 : ilogb(ref);
  if (e < -126) e = -126;
  return fabs(yy - ref) / ldexp(1.0, e - 23);
}

static double ulp_err_f64(double y, long double ref) {
  if (isnan(ref) || isnan(y)) return isnan(ref) && isnan(y) ? 0.0 : INFINITY;
  if (isinf(y) && isinf((double)ref) && (y > 0) == (ref > 0)) return 0.0;
  long double yy = isinf(y) ? (y > 0 ? 1.0L : -1.0L) * ldexpl(1.0L, 1024) : (long double)y;
  if (isinf(ref)) return INFINITY;
  int e = ref == 0.0L ? -1022 : ilogbl(ref);
  if (e < -1022) e = -1022;
  return (double)(fabsl(yy - ref) / ldexpl(1.0L, e - 52));
}

/* ---- references --------------------------------------------------------- */

static double ref_exp_f32(double x) { return exp(x); }
static double ref_expm1_f32(double x) { return expm1(x); }
static double ref_log_f32(double x) { return log(x); }
static double ref_log1p_f32(double x) { return log1p(x); }
static double ref_tanh_f32(double x) { return tanh(x); }
static double ref_sigmoid_f32(double x) {
  double e = exp(-fabs(x));
  return (x < 0 ? e : 1.0) / (1.0 + e);
}
static double ref_erf_f32(double x) { return erf(x); }

static long double ref_exp_f64(long double x) { return expl(x); }
static long double ref_expm1_f64(long double x) { return expm1l(x); }
static long double ref_log_f64(long double x) { return logl(x); }
static long double ref_log1p_f64(long double x) { return log1pl(x); }
static long double ref_tanh_f64(long double x) { return tanhl(x); }
static long double ref_sigmoid_f64(long double x) {
  long double e = expl(-fabsl(x));
  return (x < 0 ? e : 1.0L) / (1.0L + e);
}
static long double ref_erf_f64(long double x) { return erfl(x); }

/* ---- the loops under test ----------------------------------------------- */

#define BLOCK 4096

#define APPLY(fn, T)                                                                \
  static void apply_##fn(const T *DL__RESTRICT x, T *DL__RESTRICT y, int n) {      \
    int i;                                                                         \
    for (i = 0; i < n; i++) y[i] = fn(x[i]);                                       \
  }
APPLY(dl_vexp_f32, float)
APPLY(dl_vexpm1_f32, float)
APPLY(dl_vlog_f32, float)
APPLY(dl_vlog1p_f32, float)
APPLY(dl_vtanh_f32, float)
APPLY(dl_vsigmoid_f32, float)
APPLY(dl_verf_f32, float)
APPLY(dl_vexp_f64, double)
APPLY(dl_vexpm1_f64, double)
APPLY(dl_vlog_f64, double)
APPLY(dl_vlog1p_f64, double)
APPLY(dl_vtanh_f64, double)
APPLY(dl_vsigmoid_f64, double)
APPLY(dl_verf_f64, double)

typedef void (*apply_f32_fn)(const float *, float *, int);
typedef void (*apply_f64_fn)(const double *, double *, int);
typedef struct {
  const char *name;
  apply_f32_fn apply;
  double (*ref)(double);
} fn_f32;
typedef struct {
  const char *name;
  apply_f64_fn apply;
  long double (*ref)(long double);
} fn_f64;

/* worst error seen by one function */
typedef struct {
  double err;
  double x;
  long n;
} worst;

static void worst_add(worst *w, double err, double x) {
  w->n++;
  if (err > w->err || isnan(err)) {
    w->err = isnan(err) ? INFINITY : err;
    w->x = x;
  }
}

/* ---- f32 sweeps ---------------------------------------------------------- */

/* Order-preserving map from float to int64 and back (-0 and +0 both 0). */
static int64_t key_f32(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (u >> 31) ? -(int64_t)(u & 0x7FFFFFFFu) : (int64_t)u;
}
static float unkey_f32(int64_t k) {
  uint32_t u = k < 0 ? (uint32_t)(-k) | 0x80000000u : (uint32_t)k;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* About npts floats spread evenly (in bit patterns) over [lo, hi], each
 * shifted by a varying offset inside its stride so that all low-bit patterns
 * occur; every float of [lo, hi] when it holds fewer than npts. */
static void sweep_f32(const fn_f32 *f, worst *w, float lo, float hi, int64_t npts) {
  static float x[BLOCK], y[BLOCK];
  int64_t k = key_f32(lo), end = key_f32(hi);
  int64_t stride = (end - k + 1) / npts > 1 ? (end - k + 1) / npts : 1;
  uint32_t h = 0x9E3779B9u;
  while (k <= end) {
    int n = 0, j;
    for (; n < BLOCK && k <= end; n++) {
      int64_t off = (int64_t)(h % (uint32_t)stride);
      h = h * 1664525u + 1013904223u;
      x[n] = unkey_f32(k + off <= end ? k + off : k);
      k += stride;
    }
    f->apply(x, y, n);
    for (j = 0; j < n; j++) worst_add(w, ulp_err_f32(y[j], f->ref((double)x[j])), x[j]);
  }
}

static void check_f32(const fn_f32 *f, const worst *w, double bound) {
  if (verbose)
    printf("  %-16s max %.3f ulp at %.9g (%ld points)\n", f->name, w->err, w->x, w->n);
  CHECK_MSG(w->err <= bound, "%s: %.3f ulp at x = %.9g (bound %.2f)", f->name, w->err, w->x,
            bound);
}

/* The whole float range, every 2^10-th pattern: 4.2M points. */
static void sweep_all_f32(const fn_f32 *f, worst *w) {
  sweep_f32(f, w, -INFINITY, INFINITY, (int64_t)1 << 22);
}

/* npts floats in each of [2^e0, 2^e1) and its negative. */
static void sweep_mag_f32(const fn_f32 *f, worst *w, int e0, int e1, int64_t npts) {
  sweep_f32(f, w, ldexpf(1.0f, e0), ldexpf(1.0f, e1), npts);
  sweep_f32(f, w, -ldexpf(1.0f, e1), -ldexpf(1.0f, e0), npts);
}

/* ---- f64 sweeps ---------------------------------------------------------- */

static uint64_t rng_state = 0x243F6A8885A308D3u;
static uint64_t rng_next(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Du;
}
static double rng_unit(void) { return (double)(rng_next() >> 11) * 0x1p-53; }

enum { GEN_BITS, GEN_UNIFORM, GEN_LOGMAG, GEN_RUN };

/* n points: GEN_BITS random bit patterns (not NaN), GEN_UNIFORM uniform in
 * [a, b], GEN_LOGMAG +-2^u with u uniform in [a, b], GEN_RUN n consecutive
 * doubles starting at a. */
static void sweep_f64(const fn_f64 *f, worst *w, int gen, double a, double b, long n) {
  static double x[BLOCK], y[BLOCK];
  double run = a;
  while (n > 0) {
    int m = n < BLOCK ? (int)n : BLOCK, j;
    for (j = 0; j < m; j++) {
      if (gen == GEN_BITS) {
        uint64_t u;
        do u = rng_next();
        while (((u >> 52) & 0x7FF) == 0x7FF && (u & 0x000FFFFFFFFFFFFFu) != 0);
        memcpy(&x[j], &u, 8);
      } else if (gen == GEN_UNIFORM) {
        x[j] = a + (b - a) * rng_unit();
      } else if (gen == GEN_LOGMAG) {
        x[j] = ldexp(1.0 + rng_unit(), (int)floor(a + (b - a) * rng_unit()));
        if (rng_next() & 1) x[j] = -x[j];
      } else {
        x[j] = run;
        run = nextafter(run, INFINITY);
      }
    }
    f->apply(x, y, m);
    for (j = 0; j < m; j++) worst_add(w, ulp_err_f64(y[j], f->ref((long double)x[j])), x[j]);
    n -= m;
  }
}

static void check_f64(const fn_f64 *f, const worst *w, double bound) {
  if (verbose)
    printf("  %-16s max %.3f ulp at %.17g (%ld points)\n", f->name, w->err, w->x, w->n);
  CHECK_MSG(w->err <= bound + REF64_SLACK, "%s: %.3f ulp at x = %.17g (bound %.2f)", f->name,
            w->err, w->x, bound);
}

/* consecutive doubles on both sides of c */
static void sweep_around_f64(const fn_f64 *f, worst *w, double c, long n) {
  double s = c;
  long i;
  for (i = 0; i < n / 2; i++) s = nextafter(s, -INFINITY);
  sweep_f64(f, w, GEN_RUN, s, 0, n);
}

static const fn_f32 F32_EXP = {"dl_vexp_f32", apply_dl_vexp_f32, ref_exp_f32};
static const fn_f32 F32_EXPM1 = {"dl_vexpm1_f32", apply_dl_vexpm1_f32, ref_expm1_f32};
static const fn_f32 F32_LOG = {"dl_vlog_f32", apply_dl_vlog_f32, ref_log_f32};
static const fn_f32 F32_LOG1P = {"dl_vlog1p_f32", apply_dl_vlog1p_f32, ref_log1p_f32};
static const fn_f32 F32_TANH = {"dl_vtanh_f32", apply_dl_vtanh_f32, ref_tanh_f32};
static const fn_f32 F32_SIGMOID = {"dl_vsigmoid_f32", apply_dl_vsigmoid_f32, ref_sigmoid_f32};
static const fn_f32 F32_ERF = {"dl_verf_f32", apply_dl_verf_f32, ref_erf_f32};
static const fn_f64 F64_EXP = {"dl_vexp_f64", apply_dl_vexp_f64, ref_exp_f64};
static const fn_f64 F64_EXPM1 = {"dl_vexpm1_f64", apply_dl_vexpm1_f64, ref_expm1_f64};
static const fn_f64 F64_LOG = {"dl_vlog_f64", apply_dl_vlog_f64, ref_log_f64};
static const fn_f64 F64_LOG1P = {"dl_vlog1p_f64", apply_dl_vlog1p_f64, ref_log1p_f64};
static const fn_f64 F64_TANH = {"dl_vtanh_f64", apply_dl_vtanh_f64, ref_tanh_f64};
static const fn_f64 F64_SIGMOID = {"dl_vsigmoid_f64", apply_dl_vsigmoid_f64, ref_sigmoid_f64};
static const fn_f64 F64_ERF = {"dl_verf_f64", apply_dl_verf_f64, ref_erf_f64};

/* ---- accuracy tests ------------------------------------------------------ */

#define M (1 << 20)

static void test_exp_f32_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_all_f32(&F32_EXP, &w);
  sweep_f32(&F32_EXP, &w, -1.0f, 1.0f, 2 * M);      /* near 0 */
  sweep_f32(&F32_EXP, &w, 87.0f, 89.0f, M);         /* every float at the overflow threshold */
  sweep_f32(&F32_EXP, &w, -105.0f, -86.0f, 2 * M);  /* subnormal results, underflow */
  check_f32(&F32_EXP, &w, BOUND_EXP_F32);
}

static void test_expm1_f32_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_all_f32(&F32_EXPM1, &w);
  sweep_mag_f32(&F32_EXPM1, &w, -30, 0, M);         /* relative accuracy near 0 */
  sweep_mag_f32(&F32_EXPM1, &w, -2, 1, M);          /* every float of +-[1/4, 2) */
  sweep_f32(&F32_EXPM1, &w, 87.0f, 89.0f, M);
  sweep_f32(&F32_EXPM1, &w, -21.0f, -16.0f, M);     /* where it reaches -1 */
  check_f32(&F32_EXPM1, &w, BOUND_EXPM1_F32);
}

static void test_log_f32_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_all_f32(&F32_LOG, &w);
  sweep_f32(&F32_LOG, &w, 0.5f, 2.0f, 2 * M);      /* every float around 1 */
  sweep_f32(&F32_LOG, &w, 0.0f, 1e-37f, M);         /* subnormal inputs */
  check_f32(&F32_LOG, &w, BOUND_LOG_F32);
}

static void test_log1p_f32_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_all_f32(&F32_LOG1P, &w);
  sweep_mag_f32(&F32_LOG1P, &w, -30, -2, M);        /* relative accuracy near 0 */
  sweep_mag_f32(&F32_LOG1P, &w, -2, 0, M);
  sweep_f32(&F32_LOG1P, &w, -1.0f, -0.75f, M);
  sweep_f32(&F32_LOG1P, &w, 0.75f, 4.0f, M);
  check_f32(&F32_LOG1P, &w, BOUND_LOG1P_F32);
}

static void test_tanh_f32_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_all_f32(&F32_TANH, &w);
  sweep_mag_f32(&F32_TANH, &w, -30, -2, M);         /* relative accuracy near 0 */
  sweep_mag_f32(&F32_TANH, &w, -2, 0, M);           /* switch at 1/2 */
  sweep_mag_f32(&F32_TANH, &w, 0, 4, M);            /* the bend, up to saturation */
  check_f32(&F32_TANH, &w, BOUND_TANH_F32);
}

static void test_sigmoid_f32_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_all_f32(&F32_SIGMOID, &w);
  sweep_mag_f32(&F32_SIGMOID, &w, -3, 5, 2 * M);
  sweep_f32(&F32_SIGMOID, &w, -105.0f, -86.0f, M);  /* tiny, then subnormal results */
  check_f32(&F32_SIGMOID, &w, BOUND_SIGMOID_F32);
}

static void test_erf_f32_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_all_f32(&F32_ERF, &w);
  sweep_mag_f32(&F32_ERF, &w, -30, -1, M);
  sweep_f32(&F32_ERF, &w, 0.5f, 4.5f, 2 * M);      /* switch at 1, saturation at 3.92 */
  sweep_f32(&F32_ERF, &w, -4.5f, -0.5f, M);
  check_f32(&F32_ERF, &w, BOUND_ERF_F32);
}

static void test_exp_f64_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_f64(&F64_EXP, &w, GEN_BITS, 0, 0, 1 << 19);
  sweep_f64(&F64_EXP, &w, GEN_UNIFORM, -746, 710, 1 << 20);
  sweep_f64(&F64_EXP, &w, GEN_UNIFORM, -1, 1, 1 << 19);
  sweep_f64(&F64_EXP, &w, GEN_LOGMAG, -60, 0, 1 << 18);
  sweep_f64(&F64_EXP, &w, GEN_UNIFORM, -745.2, -707, 1 << 18); /* subnormal results */
  sweep_around_f64(&F64_EXP, &w, 709.782712893384, 1 << 14); /* overflow threshold */
  sweep_around_f64(&F64_EXP, &w, 0.5 * 0.6931471805599453, 1 << 14); /* |r| = ln2/2 */
  check_f64(&F64_EXP, &w, BOUND_EXP_F64);
}

static void test_expm1_f64_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_f64(&F64_EXPM1, &w, GEN_BITS, 0, 0, 1 << 19);
  sweep_f64(&F64_EXPM1, &w, GEN_UNIFORM, -40, 710, 1 << 19);
  sweep_f64(&F64_EXPM1, &w, GEN_UNIFORM, -2, 2, 1 << 20);
  sweep_f64(&F64_EXPM1, &w, GEN_LOGMAG, -60, 1, 1 << 20);
  sweep_around_f64(&F64_EXPM1, &w, 709.782712893384, 1 << 14);
  sweep_around_f64(&F64_EXPM1, &w, 0.5 * 0.6931471805599453, 1 << 14);
  sweep_around_f64(&F64_EXPM1, &w, -0.5 * 0.6931471805599453, 1 << 14);
  check_f64(&F64_EXPM1, &w, BOUND_EXPM1_F64);
}

static void test_log_f64_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_f64(&F64_LOG, &w, GEN_BITS, 0, 0, 1 << 20);
  sweep_f64(&F64_LOG, &w, GEN_UNIFORM, 0.5, 2, 1 << 20);
  sweep_f64(&F64_LOG, &w, GEN_UNIFORM, 0, 1e-307, 1 << 17); /* subnormal inputs */
  sweep_around_f64(&F64_LOG, &w, 1.0, 1 << 15);
  sweep_around_f64(&F64_LOG, &w, 0.70710678118654752, 1 << 14); /* the split at sqrt(1/2) */
  check_f64(&F64_LOG, &w, BOUND_LOG_F64);
}

static void test_log1p_f64_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_f64(&F64_LOG1P, &w, GEN_BITS, 0, 0, 1 << 19);
  sweep_f64(&F64_LOG1P, &w, GEN_UNIFORM, -1, 4, 1 << 20);
  sweep_f64(&F64_LOG1P, &w, GEN_LOGMAG, -60, 0, 1 << 20);
  sweep_around_f64(&F64_LOG1P, &w, 1.0, 1 << 14);  /* the Fast2Sum switch */
  sweep_around_f64(&F64_LOG1P, &w, 0.41421356237309505, 1 << 14);
  sweep_around_f64(&F64_LOG1P, &w, -0.29289321881345248, 1 << 14);
  check_f64(&F64_LOG1P, &w, BOUND_LOG1P_F64);
}

static void test_tanh_f64_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_f64(&F64_TANH, &w, GEN_BITS, 0, 0, 1 << 19);
  sweep_f64(&F64_TANH, &w, GEN_UNIFORM, -20, 20, 1 << 20);
  sweep_f64(&F64_TANH, &w, GEN_UNIFORM, -2, 2, 1 << 20);
  sweep_f64(&F64_TANH, &w, GEN_LOGMAG, -60, 1, 1 << 20);
  sweep_around_f64(&F64_TANH, &w, 0.5, 1 << 14);   /* the switch at 1/2 */
  check_f64(&F64_TANH, &w, BOUND_TANH_F64);
}

static void test_sigmoid_f64_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_f64(&F64_SIGMOID, &w, GEN_BITS, 0, 0, 1 << 19);
  sweep_f64(&F64_SIGMOID, &w, GEN_UNIFORM, -40, 40, 1 << 20);
  sweep_f64(&F64_SIGMOID, &w, GEN_LOGMAG, -60, 5, 1 << 19);
  sweep_f64(&F64_SIGMOID, &w, GEN_UNIFORM, -746, -700, 1 << 18); /* subnormal results */
  check_f64(&F64_SIGMOID, &w, BOUND_SIGMOID_F64);
}

static void test_erf_f64_accuracy(void) {
  worst w = {0, 0, 0};
  sweep_f64(&F64_ERF, &w, GEN_BITS, 0, 0, 1 << 19);
  sweep_f64(&F64_ERF, &w, GEN_UNIFORM, -6.5, 6.5, 1 << 20);
  sweep_f64(&F64_ERF, &w, GEN_LOGMAG, -60, 0, 1 << 19);
  sweep_around_f64(&F64_ERF, &w, 1.0, 1 << 15);    /* the switch at 1 */
  sweep_around_f64(&F64_ERF, &w, -1.0, 1 << 14);
  sweep_f64(&F64_ERF, &w, GEN_UNIFORM, 5.5, 6.5, 1 << 16); /* saturation */
  check_f64(&F64_ERF, &w, BOUND_ERF_F64);
}

/* ---- special values ------------------------------------------------------ */

#define SAME_BITS_F32(a, b) (memcmp(&(float){a}, &(float){b}, 4) == 0)
#define SAME_BITS_F64(a, b) (memcmp(&(double){a}, &(double){b}, 8) == 0)

static void test_special_f32(void) {
  const float inf = INFINITY, nan = NAN;
  const float zero = 0.0f, nzero = -0.0f;
  /* exp */
  CHECK(dl_vexp_f32(inf) == inf);
  CHECK(dl_vexp_f32(-inf) == 0.0f);
  CHECK(isnan(dl_vexp_f32(nan)));
  CHECK(dl_vexp_f32(zero) == 1.0f && dl_vexp_f32(nzero) == 1.0f);
  CHECK(dl_vexp_f32(88.73f) == inf);               /* past ln(FLT_MAX) = 88.7228 */
  CHECK(dl_vexp_f32(1000.0f) == inf);
  CHECK(isfinite(dl_vexp_f32(88.72f)) && dl_vexp_f32(88.72f) > 3.3e38f);
  CHECK(dl_vexp_f32(-103.98f) == 0.0f);            /* below 2^-150 */
  CHECK(dl_vexp_f32(-1000.0f) == 0.0f && !signbit(dl_vexp_f32(-1000.0f)));
  CHECK(dl_vexp_f32(-103.0f) > 0.0f && dl_vexp_f32(-103.0f) < FLT_MIN); /* subnormal */
  CHECK(dl_vexp_f32(-FLT_MAX) == 0.0f && dl_vexp_f32(FLT_MAX) == inf);
  /* expm1 */
  CHECK(dl_vexpm1_f32(inf) == inf);
  CHECK(dl_vexpm1_f32(-inf) == -1.0f);
  CHECK(isnan(dl_vexpm1_f32(nan)));
  CHECK(SAME_BITS_F32(dl_vexpm1_f32(zero), zero));
  CHECK(SAME_BITS_F32(dl_vexpm1_f32(nzero), nzero));
  CHECK(dl_vexpm1_f32(88.73f) == inf && dl_vexpm1_f32(-1000.0f) == -1.0f);
  CHECK(isfinite(dl_vexpm1_f32(88.72f)));
  CHECK(dl_vexpm1_f32(1e-30f) == 1e-30f && dl_vexpm1_f32(-1e-30f) == -1e-30f);
  CHECK(dl_vexpm1_f32(FLT_TRUE_MIN) == FLT_TRUE_MIN);
  /* log */
  CHECK(dl_vlog_f32(zero) == -inf && dl_vlog_f32(nzero) == -inf);
  CHECK(isnan(dl_vlog_f32(-1.0f)) && isnan(dl_vlog_f32(-FLT_TRUE_MIN)) && isnan(dl_vlog_f32(-inf)));
  CHECK(dl_vlog_f32(inf) == inf);
  CHECK(isnan(dl_vlog_f32(nan)));
  CHECK(SAME_BITS_F32(dl_vlog_f32(1.0f), zero));
  CHECK_NEAR(dl_vlog_f32(FLT_TRUE_MIN), -103.27893f, 1e-5);
  CHECK_NEAR(dl_vlog_f32(FLT_MAX), 88.7228394f, 1e-5);
  /* log1p */
  CHECK(dl_vlog1p_f32(-1.0f) == -inf);
  CHECK(isnan(dl_vlog1p_f32(-1.5f)) && isnan(dl_vlog1p_f32(-inf)));
  CHECK(dl_vlog1p_f32(inf) == inf);
  CHECK(isnan(dl_vlog1p_f32(nan)));
  CHECK(SAME_BITS_F32(dl_vlog1p_f32(zero), zero));
  CHECK(SAME_BITS_F32(dl_vlog1p_f32(nzero), nzero));
  CHECK(dl_vlog1p_f32(1e-30f) == 1e-30f && dl_vlog1p_f32(FLT_TRUE_MIN) == FLT_TRUE_MIN);
  CHECK_NEAR(dl_vlog1p_f32(FLT_MAX), 88.7228394f, 1e-5);
  /* tanh */
  CHECK(dl_vtanh_f32(inf) == 1.0f && dl_vtanh_f32(-inf) == -1.0f);
  CHECK(dl_vtanh_f32(20.0f) == 1.0f && dl_vtanh_f32(-FLT_MAX) == -1.0f);
  CHECK(isnan(dl_vtanh_f32(nan)));
  CHECK(SAME_BITS_F32(dl_vtanh_f32(zero), zero));
  CHECK(SAME_BITS_F32(dl_vtanh_f32(nzero), nzero));
  CHECK(dl_vtanh_f32(1e-30f) == 1e-30f && dl_vtanh_f32(-FLT_TRUE_MIN) == -FLT_TRUE_MIN);
  CHECK(dl_vtanh_f32(0x1p-10f) < 0x1p-10f);       /* x^3/3 is 5 ulp here */
  /* sigmoid */
  CHECK(dl_vsigmoid_f32(inf) == 1.0f && dl_vsigmoid_f32(-inf) == 0.0f);
  CHECK(dl_vsigmoid_f32(zero) == 0.5f && dl_vsigmoid_f32(nzero) == 0.5f);
  CHECK(isnan(dl_vsigmoid_f32(nan)));
  CHECK(dl_vsigmoid_f32(-200.0f) == 0.0f && dl_vsigmoid_f32(200.0f) == 1.0f);
  CHECK_REL(dl_vsigmoid_f32(-80.0f), 1.8048513878454153e-35, 2e-7, 0.0);
  /* erf */
  CHECK(dl_verf_f32(inf) == 1.0f && dl_verf_f32(-inf) == -1.0f);
  CHECK(dl_verf_f32(4.0f) == 1.0f && dl_verf_f32(-10.0f) == -1.0f);
  CHECK(isnan(dl_verf_f32(nan)));
  CHECK(SAME_BITS_F32(dl_verf_f32(zero), zero));
  CHECK(SAME_BITS_F32(dl_verf_f32(nzero), nzero));
  CHECK_REL(dl_verf_f32(1e-30f), 1.1283791670955126e-30, 1e-7, 0.0);
  CHECK(dl_verf_f32(3.9f) < 1.0f);
}

static void test_special_f64(void) {
  const double inf = INFINITY, nan = NAN;
  const double zero = 0.0, nzero = -0.0;
  const double dmin = DBL_MIN, tmin = 4.9406564584124654e-324;
  /* exp */
  CHECK(dl_vexp_f64(inf) == inf && dl_vexp_f64(-inf) == 0.0);
  CHECK(isnan(dl_vexp_f64(nan)));
  CHECK(dl_vexp_f64(zero) == 1.0 && dl_vexp_f64(nzero) == 1.0);
  CHECK(dl_vexp_f64(709.79) == inf && dl_vexp_f64(1e300) == inf);
  CHECK(isfinite(dl_vexp_f64(709.78)) && dl_vexp_f64(709.78) > 1.79e308);
  CHECK(dl_vexp_f64(-745.14) == 0.0 && dl_vexp_f64(-1e300) == 0.0);
  CHECK(dl_vexp_f64(-745.13) == tmin);              /* rounds up to the least subnormal */
  CHECK(dl_vexp_f64(-740.0) > 0.0 && dl_vexp_f64(-740.0) < dmin);
  /* expm1 */
  CHECK(dl_vexpm1_f64(inf) == inf && dl_vexpm1_f64(-inf) == -1.0);
  CHECK(isnan(dl_vexpm1_f64(nan)));
  CHECK(SAME_BITS_F64(dl_vexpm1_f64(zero), zero));
  CHECK(SAME_BITS_F64(dl_vexpm1_f64(nzero), nzero));
  CHECK(dl_vexpm1_f64(709.79) == inf && dl_vexpm1_f64(-1000.0) == -1.0);
  CHECK(isfinite(dl_vexpm1_f64(709.78)));
  CHECK(dl_vexpm1_f64(1e-300) == 1e-300 && dl_vexpm1_f64(tmin) == tmin);
  /* log */
  CHECK(dl_vlog_f64(zero) == -inf && dl_vlog_f64(nzero) == -inf);
  CHECK(isnan(dl_vlog_f64(-1.0)) && isnan(dl_vlog_f64(-tmin)) && isnan(dl_vlog_f64(-inf)));
  CHECK(dl_vlog_f64(inf) == inf);
  CHECK(isnan(dl_vlog_f64(nan)));
  CHECK(SAME_BITS_F64(dl_vlog_f64(1.0), zero));
  CHECK_NEAR(dl_vlog_f64(tmin), -744.44007192138126, 1e-12);
  CHECK_NEAR(dl_vlog_f64(DBL_MAX), 709.78271289338400, 1e-12);
  /* log1p */
  CHECK(dl_vlog1p_f64(-1.0) == -inf);
  CHECK(isnan(dl_vlog1p_f64(-1.5)) && isnan(dl_vlog1p_f64(-inf)));
  CHECK(dl_vlog1p_f64(inf) == inf);
  CHECK(isnan(dl_vlog1p_f64(nan)));
  CHECK(SAME_BITS_F64(dl_vlog1p_f64(zero), zero));
  CHECK(SAME_BITS_F64(dl_vlog1p_f64(nzero), nzero));
  CHECK(dl_vlog1p_f64(1e-300) == 1e-300 && dl_vlog1p_f64(tmin) == tmin);
  CHECK_NEAR(dl_vlog1p_f64(DBL_MAX), 709.78271289338400, 1e-12);
  /* tanh */
  CHECK(dl_vtanh_f64(inf) == 1.0 && dl_vtanh_f64(-inf) == -1.0);
  CHECK(dl_vtanh_f64(40.0) == 1.0 && dl_vtanh_f64(-DBL_MAX) == -1.0);
  CHECK(isnan(dl_vtanh_f64(nan)));
  CHECK(SAME_BITS_F64(dl_vtanh_f64(zero), zero));
  CHECK(SAME_BITS_F64(dl_vtanh_f64(nzero), nzero));
  CHECK(dl_vtanh_f64(1e-300) == 1e-300 && dl_vtanh_f64(-tmin) == -tmin);
  /* sigmoid */
  CHECK(dl_vsigmoid_f64(inf) == 1.0 && dl_vsigmoid_f64(-inf) == 0.0);
  CHECK(dl_vsigmoid_f64(zero) == 0.5 && dl_vsigmoid_f64(nzero) == 0.5);
  CHECK(isnan(dl_vsigmoid_f64(nan)));
  CHECK(dl_vsigmoid_f64(-800.0) == 0.0 && dl_vsigmoid_f64(800.0) == 1.0);
  CHECK_REL(dl_vsigmoid_f64(-700.0), 9.8596765437597708e-305, 1e-15, 0.0);
  /* erf */
  CHECK(dl_verf_f64(inf) == 1.0 && dl_verf_f64(-inf) == -1.0);
  CHECK(dl_verf_f64(6.0) == 1.0 && dl_verf_f64(-100.0) == -1.0);
  CHECK(isnan(dl_verf_f64(nan)));
  CHECK(SAME_BITS_F64(dl_verf_f64(zero), zero));
  CHECK(SAME_BITS_F64(dl_verf_f64(nzero), nzero));
  CHECK_REL(dl_verf_f64(1e-300), 1.1283791670955126e-300, 3e-16, 0.0);
  CHECK(dl_verf_f64(5.8) < 1.0);
}

/* A NaN's payload and sign may change, but every NaN input gives a NaN. */
static void test_nan_patterns(void) {
  const uint32_t pats32[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFBFFFFFu};
  const uint64_t pats64[] = {0x7FF8000000000000u, 0xFFF8000000000000u, 0x7FF0000000000001u,
                             0x7FFFFFFFFFFFFFFFu};
  size_t i;
  for (i = 0; i < sizeof pats32 / sizeof *pats32; i++) {
    float x;
    memcpy(&x, &pats32[i], 4);
    CHECK(isnan(dl_vexp_f32(x)) && isnan(dl_vexpm1_f32(x)) && isnan(dl_vlog_f32(x)));
    CHECK(isnan(dl_vlog1p_f32(x)) && isnan(dl_vtanh_f32(x)) && isnan(dl_vsigmoid_f32(x)));
    CHECK(isnan(dl_verf_f32(x)));
  }
  for (i = 0; i < sizeof pats64 / sizeof *pats64; i++) {
    double x;
    memcpy(&x, &pats64[i], 8);
    CHECK(isnan(dl_vexp_f64(x)) && isnan(dl_vexpm1_f64(x)) && isnan(dl_vlog_f64(x)));
    CHECK(isnan(dl_vlog1p_f64(x)) && isnan(dl_vtanh_f64(x)) && isnan(dl_vsigmoid_f64(x)));
    CHECK(isnan(dl_verf_f64(x)));
  }
}

/* The ulp measure itself: one ulp off is 1, the rounding of a value halfway
 * is 0.5, subnormal spacing below the normal range. */
static void test_ulp_measure(void) {
  CHECK_NEAR(ulp_err_f32(1.0f + 0x1p-23f, 1.0), 1.0, 1e-12);
  CHECK_NEAR(ulp_err_f32(1.0f, 1.0 + 0x1p-24), 0.5, 1e-12);
  CHECK_NEAR(ulp_err_f32(0x1p-149f, 0.0), 1.0, 1e-12);
  CHECK(isinf(ulp_err_f32(NAN, 1.0)) && ulp_err_f32(NAN, NAN) == 0.0);
  CHECK(ulp_err_f32(INFINITY, 1e300) == 0.0 && ulp_err_f32(INFINITY, 1.0) > 1e30);
  CHECK_NEAR(ulp_err_f64(1.0 + 0x1p-52, 1.0L), 1.0, 1e-12);
  CHECK_NEAR(ulp_err_f64(1.0, 1.0L + 0x1p-53L), 0.5, 1e-12);
  CHECK_NEAR(ulp_err_f64(4.9406564584124654e-324, 0.0L), 1.0, 1e-12);
}

int main(void) {
  const char *v = getenv("VMATH_VERBOSE");
  verbose = v && *v && *v != '0';
  RUN(test_ulp_measure);
  RUN(test_special_f32);
  RUN(test_special_f64);
  RUN(test_nan_patterns);
  RUN(test_exp_f32_accuracy);
  RUN(test_expm1_f32_accuracy);
  RUN(test_log_f32_accuracy);
  RUN(test_log1p_f32_accuracy);
  RUN(test_tanh_f32_accuracy);
  RUN(test_sigmoid_f32_accuracy);
  RUN(test_erf_f32_accuracy);
  RUN(test_exp_f64_accuracy);
  RUN(test_expm1_f64_accuracy);
  RUN(test_log_f64_accuracy);
  RUN(test_log1p_f64_accuracy);
  RUN(test_tanh_f64_accuracy);
  RUN(test_sigmoid_f64_accuracy);
  RUN(test_erf_f64_accuracy);
  return harness_finish();
}
