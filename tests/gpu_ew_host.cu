// tests/gpu_ew_host.cu - the GPU element-wise ops' scalar code, run on the
// HOST (no GPU needed). dl/gpu/ew.cuh turns each op of expr.h's lists into
// a struct whose __host__ __device__ template f(x0, x1, p0) is the op's
// expression over float, double, dl_dual and dl_dual64: the kernels call it
// for the forward (float/double), the backward and the tangent (the dual
// part). This file instantiates the same lists the way src_gpu/core.cu does,
// plus a user op (DL_GPU_DEFINE_OP1, the check of user GPU ops that
// tests/test_gpu.c leaves to this file), and checks every op on the host:
//   - f<dl_dual64>'s value part equals f<double>; its dual part (df/dx0 and,
//     for binary ops, df/dx1) against a central difference of f<double>
//     (relative 1e-6);
//   - f<float> against f<double> and f<dl_dual>'s dual part against
//     f<dl_dual64>'s (the f32 kernels' accuracy: relative 2e-5 / 1e-4);
//   - closed forms (<cmath>) for relu, sigmoid, tanh, add, mul, pow and the
//     user op: values and derivatives, relative 1e-12;
//   - each launcher has abi.h's dlg_ew_fn type (a compile-time check).
// Inputs are grids that keep clear of kinks (0 for relu/abs/elu, ties for
// maximum/minimum) and of the domains' edges (log, sqrt, pow: x0 > 0).
//
// Build and run (part of the normal suite; no GPU is touched):
//   nvcc -std=c++17 -Werror all-warnings -Iinclude tests/gpu_ew_host.cu -o /tmp/gpu_ew_host && /tmp/gpu_ew_host
// The last line is the harness's "HARNESS <passed> <failed> <skipped>".
#include "dl/gpu/ew.cuh"
#include "harness.h"

#include <cmath>

// The launchers call these runtime functions (src_gpu/device.cu, in
// build/libdlgpu.a). Nothing here launches a kernel, so this program links
// stand-ins instead of the library: they are never called.
extern "C" void *dlg_stream(dlg_handle *h) { (void)h; return NULL; }
extern "C" int dlg_sm_count(dlg_handle *h) { (void)h; return 0; }
extern "C" int dlg_launch_status(dlg_handle *h, const char *op) { (void)h; (void)op; return DLG_ERR; }
extern "C" int dlg_launch_user(dlg_handle *h, int (*run)(const void *, void *), const void *args, size_t bytes,
                               const char *op) {
  (void)h; (void)run; (void)args; (void)bytes; (void)op;
  return DLG_ERR;
}
extern "C" int dlg_error(dlg_handle *h, const char *op, const char *what) {
  (void)h; (void)op; (void)what;
  return DLG_ERR;
}

// The library's lists, exactly as src_gpu/core.cu instantiates them.
#define GT_LIB1(name, expr) DL_GPU__OP(dl__op_##name, 1, expr)
#define GT_LIB2(name, expr) DL_GPU__OP(dl__op_##name, 2, expr)
DL_OPS_UNARY(GT_LIB1)
DL_OPS_UNARY_P(GT_LIB1)
DL_OPS_BINARY(GT_LIB2)

// A user op, as a program's .cu file defines it (dl/gpu/ew.cuh's example).
DL_GPU_DEFINE_OP1(my_leaky, dl_max(dl_mul(0.2, x0), x0))

// One op: its name, inputs, parameter, and f at the four scalar types (the
// parameter is float for the f32 kernels, double for the f64 ones, as
// dlg__ew_kernel passes it).
typedef struct gt_op {
  const char *name;
  int nin, has_p;
  double (*f64)(double, double, double);
  dl_dual64 (*d64)(dl_dual64, dl_dual64, double);
  float (*f32)(float, float, float);
  dl_dual (*d32)(dl_dual, dl_dual, float);
  dlg_ew_fn launcher;
} gt_op;

// f<float> for the f32 column (leaky_relu and elu too: dual.h's C++ overloads
// take their number parameter in the computation's precision).
template <class Op> float gt_f32(float x0, float x1, float p0) { return Op::f(x0, x1, p0); }
template <class Op> double gt_f64(double x0, double x1, double p0) { return Op::f(x0, x1, p0); }
template <class Op> dl_dual64 gt_d64(dl_dual64 x0, dl_dual64 x1, double p0) { return Op::f(x0, x1, p0); }
template <class Op> dl_dual gt_d32(dl_dual x0, dl_dual x1, float p0) { return Op::f(x0, x1, p0); }
#define GT_ROW(FAM, nin, hasp)                                                                      \
  {#FAM, nin, hasp, &gt_f64<FAM##__gpu_op>, &gt_d64<FAM##__gpu_op>, &gt_f32<FAM##__gpu_op>,          \
   &gt_d32<FAM##__gpu_op>, FAM##__gpu},
#define GT_ROW1(name, expr) GT_ROW(dl__op_##name, 1, 0)
#define GT_ROW1P(name, expr) GT_ROW(dl__op_##name, 1, 1)
#define GT_ROW2(name, expr) GT_ROW(dl__op_##name, 2, 0)
static const gt_op ops[] = {DL_OPS_UNARY(GT_ROW1) DL_OPS_UNARY_P(GT_ROW1P) DL_OPS_BINARY(GT_ROW2)
                                GT_ROW(my_leaky, 1, 0)};
static const int nops = (int)(sizeof ops / sizeof ops[0]);

// Grids: general values (none within 0.25 of 0), positive values (log, sqrt,
// pow's base), and a second operand's values that never equal the first's.
static const double grid_any[] = {-2.3, -1.7, -1.05, -0.6, -0.25, 0.35, 0.8, 1.45, 2.2, 3.1};
static const double grid_pos[] = {0.15, 0.4, 0.75, 1.2, 1.9, 2.6, 3.4};
static const double grid_x1[] = {-2.05, -1.3, -0.45, 0.55, 1.15, 1.75, 2.45};

static int is(const gt_op *op, const char *short_name) {
  const char *n = op->name;
  if (!strncmp(n, "dl__op_", 7)) n += 7;
  return !strcmp(n, short_name);
}
// The parameter of each UNARY_P op (and 0 for the others).
static double param_of(const gt_op *op) {
  if (is(op, "leaky_relu")) return 0.1;
  if (is(op, "elu")) return 0.7;
  if (is(op, "pow_scalar")) return 2.5;
  if (is(op, "add_scalar")) return 0.5;
  if (is(op, "mul_scalar")) return -1.5;
  return 0.0;
}
static int positive_x0(const gt_op *op) {
  return is(op, "log") || is(op, "log1p") || is(op, "sqrt") || is(op, "pow_scalar") || is(op, "pow");
}

// |a - b| <= tol * max(|b|, floor), NaN never passes.
static int close_rel(double a, double b, double tol, double floor_) {
  double d = std::fabs(b) > floor_ ? std::fabs(b) : floor_;
  return std::fabs(a - b) <= tol * d;
}

static int worst_count;
static double worst_fd, worst_f32, worst_d32;

static double rel_err(double a, double b, double floor_) {
  double d = std::fabs(b) > floor_ ? std::fabs(b) : floor_;
  return std::fabs(a - b) / d;
}

// Every check of one op at one point (a, b).
static void check_point(const gt_op *op, double a, double b) {
  const double p = param_of(op), ha = 1e-5 * (std::fabs(a) > 1 ? std::fabs(a) : 1),
               hb = 1e-5 * (std::fabs(b) > 1 ? std::fabs(b) : 1);
  const double y = op->f64(a, b, p);
  const dl_dual64 da = op->d64(dl_dual64_make(a, 1.0), dl_dual64_make(b, 0.0), p);
  const double fda = (op->f64(a + ha, b, p) - op->f64(a - ha, b, p)) / (2 * ha);
  CHECK_MSG(std::isfinite(y), "%s(%g, %g; p %g) = %g", op->name, a, b, p, y);
  CHECK_MSG(close_rel(da.v, y, 1e-14, 1e-300), "%s(%g, %g): dual64 value %.17g vs double %.17g", op->name, a, b,
            da.v, y);
  CHECK_MSG(close_rel(da.d, fda, 1e-6, 1e-6), "%s(%g, %g): d/dx0 %.17g vs central difference %.17g", op->name, a,
            b, da.d, fda);
  if (rel_err(da.d, fda, 1e-6) > worst_fd) worst_fd = rel_err(da.d, fda, 1e-6);
  if (op->nin == 2) {
    const dl_dual64 db = op->d64(dl_dual64_make(a, 0.0), dl_dual64_make(b, 1.0), p);
    const double fdb = (op->f64(a, b + hb, p) - op->f64(a, b - hb, p)) / (2 * hb);
    CHECK_MSG(close_rel(db.v, y, 1e-14, 1e-300), "%s(%g, %g): dual64 value %.17g vs double %.17g", op->name, a, b,
              db.v, y);
    CHECK_MSG(close_rel(db.d, fdb, 1e-6, 1e-6), "%s(%g, %g): d/dx1 %.17g vs central difference %.17g", op->name,
              a, b, db.d, fdb);
    if (rel_err(db.d, fdb, 1e-6) > worst_fd) worst_fd = rel_err(db.d, fdb, 1e-6);
  }
  // f32: the same point rounded to float, against the double result there
  {
    const float af = (float)a, bf = (float)b, pf = (float)p;
    const double y64 = op->f64((double)af, (double)bf, (double)pf);
    const float y32 = op->f32(af, bf, pf);
    const dl_dual d32 = op->d32(dl_dual_make(af, 1.0f), dl_dual_make(bf, 0.0f), pf);
    const dl_dual64 d64 = op->d64(dl_dual64_make(af, 1.0), dl_dual64_make(bf, 0.0), (double)pf);
    CHECK_MSG(close_rel(y32, y64, 2e-5, 1e-3), "%s(%g, %g) in f32: %.9g vs f64 %.17g", op->name, a, b, (double)y32,
              y64);
    CHECK_MSG(close_rel(d32.v, y32, 1e-6, 1e-3), "%s(%g, %g): dual value %.9g vs float %.9g", op->name,
              a, b, (double)d32.v, (double)y32);
    CHECK_MSG(close_rel(d32.d, d64.d, 1e-4, 1e-3), "%s(%g, %g): f32 d/dx0 %.9g vs f64 %.17g", op->name, a, b,
              (double)d32.d, d64.d);
    if (rel_err(y32, y64, 1e-3) > worst_f32) worst_f32 = rel_err(y32, y64, 1e-3);
    if (rel_err(d32.d, d64.d, 1e-3) > worst_d32) worst_d32 = rel_err(d32.d, d64.d, 1e-3);
    if (op->nin == 2) {
      const dl_dual e32 = op->d32(dl_dual_make(af, 0.0f), dl_dual_make(bf, 1.0f), pf);
      const dl_dual64 e64 = op->d64(dl_dual64_make(af, 0.0), dl_dual64_make(bf, 1.0), (double)pf);
      CHECK_MSG(close_rel(e32.d, e64.d, 1e-4, 1e-3), "%s(%g, %g): f32 d/dx1 %.9g vs f64 %.17g", op->name, a, b,
                (double)e32.d, e64.d);
      if (rel_err(e32.d, e64.d, 1e-3) > worst_d32) worst_d32 = rel_err(e32.d, e64.d, 1e-3);
    }
  }
  worst_count++;
}

// Closed forms: value, d/dx0, d/dx1 of the op at (a, b); 0 when the op has none here.
static int closed_form(const gt_op *op, double a, double b, double *y, double *ga, double *gb) {
  *gb = 0;
  if (is(op, "relu")) {
    *y = a > 0 ? a : 0;
    *ga = a > 0 ? 1 : 0;
  } else if (is(op, "sigmoid")) {
    double s = 1 / (1 + std::exp(-a));
    *y = s;
    *ga = s * (1 - s);
  } else if (is(op, "tanh")) {
    double t = std::tanh(a);
    *y = t;
    *ga = 1 - t * t;
  } else if (is(op, "add")) {
    *y = a + b;
    *ga = 1;
    *gb = 1;
  } else if (is(op, "mul")) {
    *y = a * b;
    *ga = b;
    *gb = a;
  } else if (is(op, "pow")) {
    *y = std::pow(a, b);
    *ga = b * std::pow(a, b - 1);
    *gb = std::pow(a, b) * std::log(a);
  } else if (is(op, "my_leaky")) {
    *y = a > 0 ? a : 0.2 * a;
    *ga = a > 0 ? 1 : 0.2;
  } else {
    return 0;
  }
  return 1;
}

static void check_op(const gt_op *op) {
  const double *g0 = positive_x0(op) ? grid_pos : grid_any;
  const int n0 = positive_x0(op) ? (int)(sizeof grid_pos / sizeof *grid_pos) : (int)(sizeof grid_any / sizeof *grid_any);
  const int n1 = op->nin == 2 ? (int)(sizeof grid_x1 / sizeof *grid_x1) : 1;
  int i, j;
  CHECK_MSG(op->launcher != NULL, "%s: no launcher", op->name);
  for (i = 0; i < n0; i++)
    for (j = 0; j < n1; j++) {
      const double a = g0[i], b = op->nin == 2 ? grid_x1[j] : 0.0;
      double y, ga, gb;
      check_point(op, a, b);
      if (closed_form(op, a, b, &y, &ga, &gb)) {
        const double p = param_of(op);
        const dl_dual64 da = op->d64(dl_dual64_make(a, 1.0), dl_dual64_make(b, 0.0), p);
        const dl_dual64 db = op->d64(dl_dual64_make(a, 0.0), dl_dual64_make(b, 1.0), p);
        CHECK_MSG(close_rel(op->f64(a, b, p), y, 1e-12, 1e-300), "%s(%g, %g) = %.17g, closed form %.17g", op->name,
                  a, b, op->f64(a, b, p), y);
        CHECK_MSG(close_rel(da.d, ga, 1e-12, 1e-300), "%s(%g, %g): d/dx0 %.17g, closed form %.17g", op->name, a, b,
                  da.d, ga);
        if (op->nin == 2)
          CHECK_MSG(close_rel(db.d, gb, 1e-12, 1e-300), "%s(%g, %g): d/dx1 %.17g, closed form %.17g", op->name, a,
                    b, db.d, gb);
      }
    }
}

// Every op of the lists has its row (so a new op cannot miss these checks).
static void test_every_op_listed(void) {
#define GT_COUNT(name, expr) +1
  const int want = 0 DL_OPS_UNARY(GT_COUNT) DL_OPS_UNARY_P(GT_COUNT) DL_OPS_BINARY(GT_COUNT) + 1;
#undef GT_COUNT
  CHECK_MSG(nops == want, "%d rows for %d ops", nops, want);
  CHECK(nops >= 26);
}

// Kinks take PyTorch's conventions on the dual numbers too (dual.h's rules).
static void test_kinks(void) {
  int k;
  for (k = 0; k < nops; k++) {
    const gt_op *op = &ops[k];
    const dl_dual64 z = op->d64(dl_dual64_make(0.0, 1.0), dl_dual64_make(0.0, 0.0), param_of(op));
    if (is(op, "relu") || is(op, "abs")) CHECK_MSG(z.d == 0, "%s'(0) = %g, not 0", op->name, z.d);
    if (is(op, "leaky_relu")) CHECK_MSG(z.d == 0.1, "leaky_relu'(0) = %g, not the slope", z.d);
    if (is(op, "elu")) CHECK_MSG(z.d == 0.7, "elu'(0) = %g, not alpha", z.d);
  }
}

int main(void) {
  int k;
  RUN(test_every_op_listed);
  RUN(test_kinks);
  for (k = 0; k < nops; k++) { // one test per op, named after it (as RUN does)
    int before = harness_failed_checks;
    harness_current = ops[k].name;
    harness_skipped_now = 0;
    check_op(&ops[k]);
    if (harness_failed_checks == before) harness_pass++;
    else {
      harness_fail++;
      fprintf(stderr, "FAILED %s\n", ops[k].name);
    }
  }
  printf("  %d ops at %d points: worst relative error of the dual64 derivatives vs central differences %.2g; "
         "f32 vs f64 values %.2g, derivatives %.2g\n",
         nops, worst_count, worst_fd, worst_f32, worst_d32);
  return harness_finish();
}
