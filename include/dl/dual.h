/* dl/dual.h - dual numbers and the generic scalar math every op is written in.
 *
 * A dual number carries a value and a derivative: (v, d) stands for v + d*eps
 * with eps^2 = 0, so evaluating f on (x, 1) gives (f(x), f'(x)). dl_dual holds
 * floats, dl_dual64 doubles.
 *
 * Each function below exists as concrete, callable functions for five types:
 *   dl_exp_f32(float)  dl_exp_f64(double)  dl_exp_dual(dl_dual)  dl_exp_dual64(dl_dual64)
 *   dl_exp_dual2(dl_dual2)   (nested duals: second derivatives, see below)
 * and as one generic name, dl_exp(x), that picks among them. In C the pick is
 * made by _Generic from the *scalar context*, not from the argument alone:
 *
 *   - inside DL_ASSIGN and the op list (expr.h) the loop decides: the element
 *     type of the destination (f32 or f64), or dual numbers for derivatives;
 *   - in ordinary code, DL_SCALAR(type); at the top of a block says which:
 *
 *       static dl_dual64 f(dl_dual64 x) {
 *         DL_SCALAR(dl_dual64);                 // literals below become duals
 *         return dl_sub(dl_mul(x, dl_exp(x)), 2);
 *       }
 *
 * Numbers (int, float, double literals and variables) are converted to the
 * context's type: a double constant in an f32 loop becomes float, in a dual
 * context it becomes a constant (derivative 0). Dual numbers are never
 * converted: a dl_dual where the context is dl_dual64 or float is a compile
 * error, as is generic math with no context. The compiler's message names the
 * mistake (dl__ERROR_mixing_dl_dual_and_dl_dual64, ...).
 *
 * In C++ (g++, clang++, nvcc) the generic names are function templates
 * instead, typed by their arguments: mixed arguments follow the same rule
 * (dual2 > dual64 > dual > float > double > integers: a double constant
 * meeting a float stays float), and with a tensor among the arguments they
 * build an expression node that DL_ASSIGN evaluates (expr.h).
 *
 * Derivative conventions follow PyTorch where there is a kink: relu'(0) = 0,
 * leaky_relu'(0) = slope, elu'(0) = alpha, abs'(0) = 0, clamp passes the
 * gradient for lo <= x <= hi, max/min split it evenly on ties.
 *
 * Accuracy: the f32 exp/log/log1p/expm1/tanh/sigmoid/erf are the vectorisable
 * versions in vmath.h (bounds stated there); f64 uses the C library.
 */
#ifndef DL_DUAL_H
#define DL_DUAL_H

#include "tensor.h"
#include "vmath.h"
DL__HEADER_BEGIN

#ifdef __cplusplus
extern "C" {
#endif

/* A dual number in float: value v and derivative (tangent) d; arithmetic on
 * it carries d along by the chain rule. */
typedef struct dl_dual { float v, d; /* value, derivative */ } dl_dual;
/* A dual number in double (see dl_dual). */
typedef struct dl_dual64 { double v, d; /* value, derivative */ } dl_dual64;

/* The dual number (v, d). */
DL_HD DL__VAPI dl_dual dl_dual_make(float v, float d) { dl_dual r; r.v = v; r.d = d; return r; }
/* The dual number (v, d) in double. */
DL_HD DL__VAPI dl_dual64 dl_dual64_make(double v, double d) { dl_dual64 r; r.v = v; r.d = d; return r; }

/* >>scalar functions ------------------------------------------------------- */

/* The constants below are written as double literals and converted once. */
#define DL__SQRT_2_OVER_PI 0.79788456080286535588
#define DL__INV_SQRT_2 0.70710678118654752440
#define DL__INV_SQRT_2PI 0.39894228040143267794
#define DL__2_OVER_SQRT_PI 1.12837916709551257390

/* Plain float/double versions; S is the type, sfx its suffix, and the rest are
 * the primitive functions of that precision. */
#define DL__SCALAR_FUNCS(S, sfx, EXP, LOG, LOG1P, EXPM1, SQRT, SIN, COS, TANH, SIGMOID, ERF, POW, FABS) \
  /* a + b, a - b, a * b, a / b, -a */                                                 \
  DL_HD DL__VAPI S dl_add_##sfx(S a, S b) { return a + b; }                              \
  DL_HD DL__VAPI S dl_sub_##sfx(S a, S b) { return a - b; }                              \
  DL_HD DL__VAPI S dl_mul_##sfx(S a, S b) { return a * b; }                              \
  DL_HD DL__VAPI S dl_div_##sfx(S a, S b) { return a / b; }                              \
  DL_HD DL__VAPI S dl_neg_##sfx(S a) { return -a; }                                      \
  /* e^x, ln x, ln(1+x), e^x - 1, sqrt x, sin x, cos x, tanh x, 1/(1+e^-x), erf x */   \
  DL_HD DL__VAPI S dl_exp_##sfx(S x) { return EXP(x); }                                  \
  DL_HD DL__VAPI S dl_log_##sfx(S x) { return LOG(x); }                                  \
  DL_HD DL__VAPI S dl_log1p_##sfx(S x) { return LOG1P(x); }                              \
  DL_HD DL__VAPI S dl_expm1_##sfx(S x) { return EXPM1(x); }                              \
  DL_HD DL__VAPI S dl_sqrt_##sfx(S x) { return SQRT(x); }                                \
  DL_HD DL__VAPI S dl_sin_##sfx(S x) { return SIN(x); }                                  \
  DL_HD DL__VAPI S dl_cos_##sfx(S x) { return COS(x); }                                  \
  DL_HD DL__VAPI S dl_tanh_##sfx(S x) { return TANH(x); }                                \
  DL_HD DL__VAPI S dl_sigmoid_##sfx(S x) { return SIGMOID(x); }                          \
  DL_HD DL__VAPI S dl_erf_##sfx(S x) { return ERF(x); }                                  \
  /* a^b */                                                                            \
  DL_HD DL__VAPI S dl_pow_##sfx(S a, S b) { return POW(a, b); }                          \
  /* |x| */                                                                            \
  DL_HD DL__VAPI S dl_abs_##sfx(S x) { return FABS(x); }                                 \
  DL_HD DL__VAPI S dl_square_##sfx(S x) { return x * x; }                              \
  /* max(x, 0); NaN propagates */                                                      \
  DL_HD DL__VAPI S dl_relu_##sfx(S x) { return x < (S)0 ? (S)0 : x; }                    \
  /* x > 0 ? x : slope * x */                                                          \
  DL_HD DL__VAPI S dl_leaky_relu_##sfx(S x, S slope) { return x > (S)0 ? x : slope * x; } \
  /* x > 0 ? x : alpha * (e^x - 1) */                                                  \
  DL_HD DL__VAPI S dl_elu_##sfx(S x, S alpha) { return x > (S)0 ? x : alpha * EXPM1(x); } \
  /* x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))  (PyTorch approximate='tanh') */ \
  DL_HD DL__VAPI S dl_gelu_tanh_##sfx(S x) {                                           \
    return (S)0.5 * x * ((S)1 + TANH((S)DL__SQRT_2_OVER_PI * (x + (S)0.044715 * x * x * x))); \
  }                                                                                    \
  /* x/2 * (1 + erf(x / sqrt 2))  (exact GELU) */                                      \
  DL_HD DL__VAPI S dl_gelu_##sfx(S x) { return (S)0.5 * x * ((S)1 + ERF(x * (S)DL__INV_SQRT_2)); } \
  /* x * sigmoid(x) */                                                                 \
  DL_HD DL__VAPI S dl_silu_##sfx(S x) { return x * SIGMOID(x); }                         \
  /* ln(1 + e^x), computed as max(x,0) + ln(1 + e^-|x|) */                             \
  DL_HD DL__VAPI S dl_softplus_##sfx(S x) {                                              \
    return (x > (S)0 ? x : (S)0) + LOG1P(EXP(-FABS(x)));                               \
  }                                                                                    \
  /* larger / smaller of a, b; NaN propagates */                                       \
  DL_HD DL__VAPI S dl_max_##sfx(S a, S b) { return (a > b || a != a) ? a : b; }          \
  DL_HD DL__VAPI S dl_min_##sfx(S a, S b) { return (a < b || a != a) ? a : b; }          \
  /* min(max(x, lo), hi) */                                                            \
  DL_HD DL__VAPI S dl_clamp_##sfx(S x, S lo, S hi) { return x < lo ? lo : (x > hi ? hi : x); } \
  /* comparisons give 1 or 0 in the context's type (no derivative) */                  \
  DL_HD DL__VAPI S dl_gt_##sfx(S a, S b) { return a > b ? (S)1 : (S)0; }                 \
  DL_HD DL__VAPI S dl_ge_##sfx(S a, S b) { return a >= b ? (S)1 : (S)0; }                \
  DL_HD DL__VAPI S dl_lt_##sfx(S a, S b) { return a < b ? (S)1 : (S)0; }                 \
  DL_HD DL__VAPI S dl_le_##sfx(S a, S b) { return a <= b ? (S)1 : (S)0; }                \
  DL_HD DL__VAPI S dl_eq_##sfx(S a, S b) { return a == b ? (S)1 : (S)0; }                \
  /* c != 0 ? a : b */                                                                 \
  DL_HD DL__VAPI S dl_where_##sfx(S c, S a, S b) { return c != (S)0 ? a : b; }

DL_HD DL__VAPI double dl__sigmoid_libm(double x) { return 1.0 / (1.0 + exp(-x)); }

DL__SCALAR_FUNCS(float, f32, dl_vexp_f32, dl_vlog_f32, dl_vlog1p_f32, dl_vexpm1_f32, sqrtf, sinf,
                 cosf, dl_vtanh_f32, dl_vsigmoid_f32, dl_verf_f32, powf, fabsf)
DL__SCALAR_FUNCS(double, f64, exp, log, log1p, expm1, sqrt, sin, cos, tanh, dl__sigmoid_libm, erf,
                 pow, fabs)

/* Dual-number versions: D the dual type, S its scalar, sfx the scalar
 * functions' suffix. Each rule is the chain rule: f(v + d eps) = f(v) + f'(v) d eps. */
#define DL__DUAL_FUNCS(D, S, dsfx, sfx)                                                \
  DL_HD DL__VAPI D dl__mk_##dsfx(S v, S d) { D r; r.v = v; r.d = d; return r; }          \
  DL_HD DL__VAPI D dl_add_##dsfx(D a, D b) { return dl__mk_##dsfx(a.v + b.v, a.d + b.d); } \
  DL_HD DL__VAPI D dl_sub_##dsfx(D a, D b) { return dl__mk_##dsfx(a.v - b.v, a.d - b.d); } \
  DL_HD DL__VAPI D dl_mul_##dsfx(D a, D b) { return dl__mk_##dsfx(a.v * b.v, a.d * b.v + a.v * b.d); } \
  DL_HD DL__VAPI D dl_div_##dsfx(D a, D b) {                                             \
    S q = a.v / b.v;                                                                   \
    return dl__mk_##dsfx(q, (a.d - q * b.d) / b.v);                                    \
  }                                                                                    \
  DL_HD DL__VAPI D dl_neg_##dsfx(D a) { return dl__mk_##dsfx(-a.v, -a.d); }              \
  DL_HD DL__VAPI D dl_exp_##dsfx(D a) { S e = dl_exp_##sfx(a.v); return dl__mk_##dsfx(e, a.d * e); } \
  DL_HD DL__VAPI D dl_log_##dsfx(D a) { return dl__mk_##dsfx(dl_log_##sfx(a.v), a.d / a.v); } \
  DL_HD DL__VAPI D dl_log1p_##dsfx(D a) {                                                \
    return dl__mk_##dsfx(dl_log1p_##sfx(a.v), a.d / ((S)1 + a.v));                     \
  }                                                                                    \
  DL_HD DL__VAPI D dl_expm1_##dsfx(D a) {                                                \
    return dl__mk_##dsfx(dl_expm1_##sfx(a.v), a.d * dl_exp_##sfx(a.v));                \
  }                                                                                    \
  DL_HD DL__VAPI D dl_sqrt_##dsfx(D a) {                                                 \
    S s = dl_sqrt_##sfx(a.v);                                                          \
    return dl__mk_##dsfx(s, a.d / ((S)2 * s));                                         \
  }                                                                                    \
  DL_HD DL__VAPI D dl_sin_##dsfx(D a) { return dl__mk_##dsfx(dl_sin_##sfx(a.v), a.d * dl_cos_##sfx(a.v)); } \
  DL_HD DL__VAPI D dl_cos_##dsfx(D a) { return dl__mk_##dsfx(dl_cos_##sfx(a.v), -a.d * dl_sin_##sfx(a.v)); } \
  DL_HD DL__VAPI D dl_tanh_##dsfx(D a) {                                                 \
    S t = dl_tanh_##sfx(a.v);                                                          \
    return dl__mk_##dsfx(t, a.d * ((S)1 - t * t));                                     \
  }                                                                                    \
  DL_HD DL__VAPI D dl_sigmoid_##dsfx(D a) {                                              \
    S s = dl_sigmoid_##sfx(a.v);                                                       \
    return dl__mk_##dsfx(s, a.d * s * ((S)1 - s));                                     \
  }                                                                                    \
  DL_HD DL__VAPI D dl_erf_##dsfx(D a) {                                                  \
    return dl__mk_##dsfx(dl_erf_##sfx(a.v),                                            \
                         a.d * (S)DL__2_OVER_SQRT_PI * dl_exp_##sfx(-a.v * a.v));      \
  }                                                                                    \
  /* d(a^b) = b a^(b-1) da + a^b ln(a) db; as in PyTorch the first term is 0 when  \
   * b = 0 and the second when a^b = 0 (no 0 * inf) */                                 \
  DL_HD DL__VAPI D dl_pow_##dsfx(D a, D b) {                                             \
    S p = dl_pow_##sfx(a.v, b.v);                                                      \
    S d = (a.d != (S)0 && b.v != (S)0) ? a.d * b.v * dl_pow_##sfx(a.v, b.v - (S)1) : (S)0; \
    if (b.d != (S)0 && p != (S)0) d += b.d * p * dl_log_##sfx(a.v);                    \
    return dl__mk_##dsfx(p, d);                                                        \
  }                                                                                    \
  DL_HD DL__VAPI D dl_square_##dsfx(D a) { return dl__mk_##dsfx(a.v * a.v, (S)2 * a.v * a.d); } \
  DL_HD DL__VAPI D dl_abs_##dsfx(D a) {                                                  \
    return dl__mk_##dsfx(dl_abs_##sfx(a.v), a.v > (S)0 ? a.d : (a.v < (S)0 ? -a.d : (S)0)); \
  }                                                                                    \
  DL_HD DL__VAPI D dl_relu_##dsfx(D a) {                                                 \
    return dl__mk_##dsfx(dl_relu_##sfx(a.v), a.v > (S)0 ? a.d : (S)0);                 \
  }                                                                                    \
  DL_HD DL__VAPI D dl_leaky_relu_##dsfx(D a, S slope) {                                  \
    return a.v > (S)0 ? a : dl__mk_##dsfx(slope * a.v, slope * a.d);                   \
  }                                                                                    \
  DL_HD DL__VAPI D dl_elu_##dsfx(D a, S alpha) {                                         \
    return a.v > (S)0 ? a                                                              \
                      : dl__mk_##dsfx(alpha * dl_expm1_##sfx(a.v), a.d * alpha * dl_exp_##sfx(a.v)); \
  }                                                                                    \
  DL_HD DL__VAPI D dl_gelu_tanh_##dsfx(D a) {                                          \
    S x = a.v, u = (S)DL__SQRT_2_OVER_PI * (x + (S)0.044715 * x * x * x);              \
    S t = dl_tanh_##sfx(u);                                                            \
    S du = (S)DL__SQRT_2_OVER_PI * ((S)1 + (S)3 * (S)0.044715 * x * x);                \
    return dl__mk_##dsfx((S)0.5 * x * ((S)1 + t),                                      \
                         a.d * ((S)0.5 * ((S)1 + t) + (S)0.5 * x * ((S)1 - t * t) * du)); \
  }                                                                                    \
  DL_HD DL__VAPI D dl_gelu_##dsfx(D a) {                                               \
    S x = a.v, cdf = (S)0.5 * ((S)1 + dl_erf_##sfx(x * (S)DL__INV_SQRT_2));            \
    S pdf = (S)DL__INV_SQRT_2PI * dl_exp_##sfx((S)-0.5 * x * x);                       \
    return dl__mk_##dsfx(x * cdf, a.d * (cdf + x * pdf));                              \
  }                                                                                    \
  DL_HD DL__VAPI D dl_silu_##dsfx(D a) {                                                 \
    S s = dl_sigmoid_##sfx(a.v);                                                       \
    return dl__mk_##dsfx(a.v * s, a.d * s * ((S)1 + a.v * ((S)1 - s)));                \
  }                                                                                    \
  DL_HD DL__VAPI D dl_softplus_##dsfx(D a) {                                             \
    return dl__mk_##dsfx(dl_softplus_##sfx(a.v), a.d * dl_sigmoid_##sfx(a.v));          \
  }                                                                                    \
  DL_HD DL__VAPI D dl_max_##dsfx(D a, D b) {                                             \
    if (a.v > b.v || a.v != a.v) return a;                                             \
    if (a.v < b.v || b.v != b.v) return b;                                             \
    return dl__mk_##dsfx(a.v, (S)0.5 * (a.d + b.d));                                   \
  }                                                                                    \
  DL_HD DL__VAPI D dl_min_##dsfx(D a, D b) {                                             \
    if (a.v < b.v || a.v != a.v) return a;                                             \
    if (a.v > b.v || b.v != b.v) return b;                                             \
    return dl__mk_##dsfx(a.v, (S)0.5 * (a.d + b.d));                                   \
  }                                                                                    \
  DL_HD DL__VAPI D dl_clamp_##dsfx(D a, S lo, S hi) {                                    \
    if (a.v < lo) return dl__mk_##dsfx(lo, (S)0);                                      \
    if (a.v > hi) return dl__mk_##dsfx(hi, (S)0);                                      \
    return a;                                                                          \
  }                                                                                    \
  DL_HD DL__VAPI D dl_gt_##dsfx(D a, D b) { return dl__mk_##dsfx(a.v > b.v ? (S)1 : (S)0, (S)0); } \
  DL_HD DL__VAPI D dl_ge_##dsfx(D a, D b) { return dl__mk_##dsfx(a.v >= b.v ? (S)1 : (S)0, (S)0); } \
  DL_HD DL__VAPI D dl_lt_##dsfx(D a, D b) { return dl__mk_##dsfx(a.v < b.v ? (S)1 : (S)0, (S)0); } \
  DL_HD DL__VAPI D dl_le_##dsfx(D a, D b) { return dl__mk_##dsfx(a.v <= b.v ? (S)1 : (S)0, (S)0); } \
  DL_HD DL__VAPI D dl_eq_##dsfx(D a, D b) { return dl__mk_##dsfx(a.v == b.v ? (S)1 : (S)0, (S)0); } \
  DL_HD DL__VAPI D dl_where_##dsfx(D c, D a, D b) { return c.v != (S)0 ? a : b; }

DL__DUAL_FUNCS(dl_dual, float, dual, f32)
DL__DUAL_FUNCS(dl_dual64, double, dual64, f64)

/* >>nested duals (second derivatives) ----------------------------------------
 * dl_dual2 is a dual number whose two parts are dl_dual64s: a dual of duals,
 * (v, d) = v + d e2 with v = v.v + v.d e1 and e1^2 = e2^2 = 0. Evaluating f
 * on ((x, t), (1, 0)) gives
 *   v = (f(x), f'(x) t)        d = (f'(x), f''(x) t)
 * so the second derivative along t comes out of the first-order rules
 * applied twice. Each rule below is the dual rule of dl_dual64 with its
 * arithmetic done in dl_dual64 (the inner derivative of the outer one): a
 * user's element-wise op written with the generic math gets its second
 * derivative with no code of its own (the op list's second-order backward
 * rule, the FAM_d2 functions of expr.h's generators and dl_hvp, is built
 * on it). f64 only: f32 ops evaluate it in double. */

/* A dual of dl_dual64s: second derivatives (see above). */
typedef struct dl_dual2 {
  dl_dual64 v; /* the value and its derivative along e1 (the direction t) */
  dl_dual64 d; /* the derivative along e2 and its derivative along e1 */
} dl_dual2;
DL_HD DL__VAPI dl_dual2 dl__mk_dual2(dl_dual64 v, dl_dual64 d) { dl_dual2 r; r.v = v; r.d = d; return r; }
/* The value x + t e1 with derivative 1 along e2 (the point and direction a
 * second-order rule evaluates at). */
DL_HD DL__VAPI dl_dual2 dl_dual2_make(double x, double t, double dx) {
  return dl__mk_dual2(dl_dual64_make(x, t), dl_dual64_make(dx, 0.0));
}
#define DL__D2K(k) dl_dual64_make((k), 0.0)
/* a + b, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_add_dual2(dl_dual2 a, dl_dual2 b) {
  return dl__mk_dual2(dl_add_dual64(a.v, b.v), dl_add_dual64(a.d, b.d));
}
/* a - b, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_sub_dual2(dl_dual2 a, dl_dual2 b) {
  return dl__mk_dual2(dl_sub_dual64(a.v, b.v), dl_sub_dual64(a.d, b.d));
}
/* a * b, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_mul_dual2(dl_dual2 a, dl_dual2 b) {
  return dl__mk_dual2(dl_mul_dual64(a.v, b.v), dl_add_dual64(dl_mul_dual64(a.d, b.v), dl_mul_dual64(a.v, b.d)));
}
/* a / b, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_div_dual2(dl_dual2 a, dl_dual2 b) {
  dl_dual64 q = dl_div_dual64(a.v, b.v);
  return dl__mk_dual2(q, dl_div_dual64(dl_sub_dual64(a.d, dl_mul_dual64(q, b.d)), b.v));
}
/* -a, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_neg_dual2(dl_dual2 a) { return dl__mk_dual2(dl_neg_dual64(a.v), dl_neg_dual64(a.d)); }
/* f(a) = (f(a.v), f'(a.v) a.d), f' evaluated in dl_dual64 */
#define DL__D2_CHAIN(f, fprime) return dl__mk_dual2(f, dl_mul_dual64(a.d, fprime))
/* e^a, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_exp_dual2(dl_dual2 a) {
  dl_dual64 e = dl_exp_dual64(a.v);
  DL__D2_CHAIN(e, e);
}
/* ln a, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_log_dual2(dl_dual2 a) { DL__D2_CHAIN(dl_log_dual64(a.v), dl_div_dual64(DL__D2K(1), a.v)); }
/* ln(1 + a), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_log1p_dual2(dl_dual2 a) {
  DL__D2_CHAIN(dl_log1p_dual64(a.v), dl_div_dual64(DL__D2K(1), dl_add_dual64(DL__D2K(1), a.v)));
}
/* e^a - 1, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_expm1_dual2(dl_dual2 a) { DL__D2_CHAIN(dl_expm1_dual64(a.v), dl_exp_dual64(a.v)); }
/* sqrt a, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_sqrt_dual2(dl_dual2 a) {
  dl_dual64 s = dl_sqrt_dual64(a.v);
  DL__D2_CHAIN(s, dl_div_dual64(DL__D2K(0.5), s));
}
/* sin a, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_sin_dual2(dl_dual2 a) { DL__D2_CHAIN(dl_sin_dual64(a.v), dl_cos_dual64(a.v)); }
/* cos a, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_cos_dual2(dl_dual2 a) {
  DL__D2_CHAIN(dl_cos_dual64(a.v), dl_neg_dual64(dl_sin_dual64(a.v)));
}
/* tanh a, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_tanh_dual2(dl_dual2 a) {
  dl_dual64 t = dl_tanh_dual64(a.v);
  DL__D2_CHAIN(t, dl_sub_dual64(DL__D2K(1), dl_mul_dual64(t, t)));
}
/* 1 / (1 + e^-a), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_sigmoid_dual2(dl_dual2 a) {
  dl_dual64 s = dl_sigmoid_dual64(a.v);
  DL__D2_CHAIN(s, dl_mul_dual64(s, dl_sub_dual64(DL__D2K(1), s)));
}
/* erf a, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_erf_dual2(dl_dual2 a) {
  DL__D2_CHAIN(dl_erf_dual64(a.v),
               dl_mul_dual64(DL__D2K(DL__2_OVER_SQRT_PI), dl_exp_dual64(dl_neg_dual64(dl_mul_dual64(a.v, a.v)))));
}
/* as dl_pow_dual64: d(a^b) = b a^(b-1) da + a^b ln(a) db, each term 0 where
 * its factor da (db) is 0 everywhere, so that a constant exponent or base
 * gives no 0 * inf */
/* a^b, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_pow_dual2(dl_dual2 a, dl_dual2 b) {
  dl_dual64 p = dl_pow_dual64(a.v, b.v), d = DL__D2K(0);
  if (a.d.v != 0.0 || a.d.d != 0.0)
    d = dl_mul_dual64(dl_mul_dual64(a.d, b.v), dl_pow_dual64(a.v, dl_sub_dual64(b.v, DL__D2K(1))));
  if ((b.d.v != 0.0 || b.d.d != 0.0) && p.v != 0.0)
    d = dl_add_dual64(d, dl_mul_dual64(dl_mul_dual64(b.d, p), dl_log_dual64(a.v)));
  return dl__mk_dual2(p, d);
}
/* a^2, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_square_dual2(dl_dual2 a) { return dl_mul_dual2(a, a); }
/* the kinks as the first-order rules: the slope of the side the value is on */
/* |a| (derivative 0 at 0), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_abs_dual2(dl_dual2 a) {
  return a.v.v > 0.0 ? a : (a.v.v < 0.0 ? dl_neg_dual2(a) : dl__mk_dual2(dl_abs_dual64(a.v), DL__D2K(0)));
}
/* max(a, 0) (derivative 0 at 0), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_relu_dual2(dl_dual2 a) {
  return a.v.v > 0.0 ? a : dl__mk_dual2(dl_relu_dual64(a.v), DL__D2K(0));
}
/* a > 0 ? a : slope a, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_leaky_relu_dual2(dl_dual2 a, double slope) {
  return a.v.v > 0.0 ? a : dl_mul_dual2(a, dl__mk_dual2(DL__D2K(slope), DL__D2K(0)));
}
/* a > 0 ? a : alpha (e^a - 1), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_elu_dual2(dl_dual2 a, double alpha) {
  if (a.v.v > 0.0) return a;
  DL__D2_CHAIN(dl_mul_dual64(DL__D2K(alpha), dl_expm1_dual64(a.v)), dl_mul_dual64(DL__D2K(alpha), dl_exp_dual64(a.v)));
}
/* the tanh approximation of GELU, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_gelu_tanh_dual2(dl_dual2 a) {
  /* 0.5 x (1 + tanh(u)), u = c (x + k x^3): written with the rules above */
  dl_dual2 x3 = dl_mul_dual2(a, dl_mul_dual2(a, a));
  dl_dual2 u = dl_mul_dual2(dl__mk_dual2(DL__D2K(DL__SQRT_2_OVER_PI), DL__D2K(0)),
                            dl_add_dual2(a, dl_mul_dual2(dl__mk_dual2(DL__D2K(0.044715), DL__D2K(0)), x3)));
  dl_dual2 h = dl_mul_dual2(dl__mk_dual2(DL__D2K(0.5), DL__D2K(0)), a);
  return dl_mul_dual2(h, dl_add_dual2(dl__mk_dual2(DL__D2K(1), DL__D2K(0)), dl_tanh_dual2(u)));
}
/* a cdf(a) (exact GELU), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_gelu_dual2(dl_dual2 a) {
  /* x cdf(x): d = cdf + x pdf, in dl_dual64 */
  dl_dual64 x = a.v;
  dl_dual64 cdf = dl_mul_dual64(DL__D2K(0.5),
                                dl_add_dual64(DL__D2K(1), dl_erf_dual64(dl_mul_dual64(x, DL__D2K(DL__INV_SQRT_2)))));
  dl_dual64 pdf = dl_mul_dual64(DL__D2K(DL__INV_SQRT_2PI), dl_exp_dual64(dl_mul_dual64(DL__D2K(-0.5), dl_mul_dual64(x, x))));
  DL__D2_CHAIN(dl_mul_dual64(x, cdf), dl_add_dual64(cdf, dl_mul_dual64(x, pdf)));
}
/* a sigmoid(a), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_silu_dual2(dl_dual2 a) { return dl_mul_dual2(a, dl_sigmoid_dual2(a)); }
/* ln(1 + e^a), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_softplus_dual2(dl_dual2 a) {
  DL__D2_CHAIN(dl_softplus_dual64(a.v), dl_sigmoid_dual64(a.v));
}
/* the larger of a, b (half the derivative each on a tie), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_max_dual2(dl_dual2 a, dl_dual2 b) {
  if (a.v.v > b.v.v || a.v.v != a.v.v) return a;
  if (a.v.v < b.v.v || b.v.v != b.v.v) return b;
  return dl_mul_dual2(dl_add_dual2(a, b), dl__mk_dual2(DL__D2K(0.5), DL__D2K(0)));
}
/* the smaller of a, b (half the derivative each on a tie), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_min_dual2(dl_dual2 a, dl_dual2 b) {
  if (a.v.v < b.v.v || a.v.v != a.v.v) return a;
  if (a.v.v > b.v.v || b.v.v != b.v.v) return b;
  return dl_mul_dual2(dl_add_dual2(a, b), dl__mk_dual2(DL__D2K(0.5), DL__D2K(0)));
}
/* min(max(a, lo), hi), on nested duals */
DL_HD DL__VAPI dl_dual2 dl_clamp_dual2(dl_dual2 a, double lo, double hi) {
  if (a.v.v < lo) return dl__mk_dual2(DL__D2K(lo), DL__D2K(0));
  if (a.v.v > hi) return dl__mk_dual2(DL__D2K(hi), DL__D2K(0));
  return a;
}
/* comparisons on nested duals: 1 or 0, no derivative (dl_gt_dual2, dl_ge_dual2,
 * dl_lt_dual2, dl_le_dual2, dl_eq_dual2) */
#define DL__D2_CMP(name, OP)                                                           \
  DL_HD DL__VAPI dl_dual2 dl_##name##_dual2(dl_dual2 a, dl_dual2 b) {                  \
    return dl__mk_dual2(DL__D2K(a.v.v OP b.v.v ? 1.0 : 0.0), DL__D2K(0));              \
  }
DL__D2_CMP(gt, >)
DL__D2_CMP(ge, >=)
DL__D2_CMP(lt, <)
DL__D2_CMP(le, <=)
DL__D2_CMP(eq, ==)
/* c != 0 ? a : b, on nested duals */
DL_HD DL__VAPI dl_dual2 dl_where_dual2(dl_dual2 c, dl_dual2 a, dl_dual2 b) { return c.v.v != 0.0 ? a : b; }

#ifdef __cplusplus
} /* extern "C" */
#endif

/* >>probe (C and C++) ------------------------------------------------------
 * DL_ASSIGN's first pass (expr.h): the tensors of the expression, checked
 * against the destination, and the general loop's cursor over them. */
#ifndef DL__SCALAR_ONLY
#define DL__MAX_OPERANDS 16
typedef struct dl__gcur {                                  /* broadcast / strided */
  int64_t j;                                               /* index in the row */
  int nops;
  const dl_tensor *ops[DL__MAX_OPERANDS];
  const char *base[DL__MAX_OPERANDS];                      /* row start per operand */
  int64_t inc[DL__MAX_OPERANDS];                           /* stride along the row */
} dl__gcur;
typedef struct dl__gf32 { dl__gcur g; } dl__gf32;
typedef struct dl__gf64 { dl__gcur g; } dl__gf64;
typedef struct dl__probe {                                 /* first pass of DL_ASSIGN */
  const dl_tensor *dst;
  const char *expr, *file;
  int line, nops;
  const dl_tensor *ops[DL__MAX_OPERANDS];
} dl__probe;
/* Record operand t of a DL_ASSIGN: same dtype as the destination, shape
 * broadcastable to it (right-aligned, each size equal or 1). Returns its
 * slot (the same for a tensor that appears twice). */
DL_API int dl__probe_operand(dl__probe *p, const dl_tensor *t) {
  int k, d, off;
  const dl_tensor *y = p->dst;
  for (k = 0; k < p->nops; k++)
    if (p->ops[k] == t) return k;
  if (t->dtype != y->dtype)
    dl_panic_at(y->ctx, p->file, p->line, "DL_ASSIGN",
                "dtype mismatch: destination %s, operand %s in `%s` (no implicit conversion)",
                DL_SHAPESTR(y), DL_SHAPESTR(t), p->expr);
  if (t->device != y->device) /* the loop runs on the host (expr.h); a device operand is not readable there */
    dl_panic_at(y->ctx, p->file, p->line, "DL_ASSIGN", "operand %s is on the GPU in `%s`: DL_ASSIGN runs on the host",
                DL_SHAPESTR(t), p->expr);
  off = y->ndim - t->ndim;
  for (d = 0; d < t->ndim; d++)
    if (off < 0 || (t->shape[d] != 1 && t->shape[d] != y->shape[d + off])) break;
  if (off < 0 || d < t->ndim)
    dl_panic_at(y->ctx, p->file, p->line, "DL_ASSIGN",
                "shape mismatch: operand %s does not broadcast to destination %s in `%s`",
                DL_SHAPESTR(t), DL_SHAPESTR(y), p->expr);
  if (p->nops == DL__MAX_OPERANDS)
    dl_panic_at(y->ctx, p->file, p->line, "DL_ASSIGN", "more than %d tensor operands in `%s`",
                DL__MAX_OPERANDS, p->expr);
  p->ops[p->nops] = t;
  return p->nops++;
}
#endif /* !DL__SCALAR_ONLY */

/* >>generic (C) ------------------------------------------------------------ */
#ifndef __cplusplus

/* Loop cursors (the scalar context inside fused loops, defined by expr.h's
 * machinery below) and the shape-check probe. */
typedef struct dl__cf32 { int64_t i; } dl__cf32;          /* contiguous, f32 */
typedef struct dl__cf64 { int64_t i; } dl__cf64;          /* contiguous, f64 */

/* With no context in scope, these file-scope tags make the compiler say so. */
static const struct dl__ERROR_generic_math_needs_DL_SCALAR_or_DL_ASSIGN { int unused; } *const dl__tag;
static const struct dl__ERROR_generic_math_needs_DL_SCALAR_or_DL_ASSIGN *const dl__ptag;

/* DL_SCALAR(type): generic math in the rest of the block computes in `type`
 * (float, double, dl_dual, dl_dual64 or dl_dual2). A statement; declares dl__tag and
 * dl__ptag. */
#define DL_SCALAR(type) type const *const dl__tag = 0, *const dl__ptag = 0; (void)dl__tag; (void)dl__ptag

/* Compile-time mistakes: selected by _Generic, these are called with two
 * arguments and the compiler's error quotes their names. Never defined. */
void dl__ERROR_tensor_outside_DL_ASSIGN(void);
void dl__ERROR_dual_number_in_tensor_expression(void);
void dl__ERROR_dual_number_in_float_context(void);
void dl__ERROR_mixing_dl_dual_and_dl_dual64(void);

/* Every context declares two locals: dl__tag, whose type names the context
 * (a plain scalar type under DL_SCALAR, a loop cursor in DL_ASSIGN's loops,
 * the probe in its check pass), and dl__ptag, a pointer to the precision the
 * context computes in (float, double, dl_dual, dl_dual64, or the probe).
 * Functions are picked by the precision alone (five choices, not one per
 * context: the text of every generic call is that much shorter), leaves by
 * whichever of the two decides them. */
#define DL__PRECSEL(s32, s64, sd, sdd, sd2, p)                                         \
  _Generic(dl__ptag, const float *: s32, const double *: s64, const dl_dual *: sd,     \
           const dl_dual64 *: sdd, const dl_dual2 *: sd2, dl__probe *: p)
/* Leaf conversions: (context tag, operand) -> a value of the context's type. */
DL__VAPI float dl__num_f32(const void *tag, double x) { (void)tag; return (float)x; }
DL__VAPI double dl__num_f64(const void *tag, double x) { (void)tag; return x; }
DL__VAPI dl_dual dl__num_dual(const void *tag, double x) { (void)tag; return dl_dual_make((float)x, 0.0f); }
DL__VAPI dl_dual64 dl__num_dual64(const void *tag, double x) { (void)tag; return dl_dual64_make(x, 0.0); }
DL__VAPI dl_dual2 dl__num_dual2(const void *tag, double x) { (void)tag; return dl__mk_dual2(DL__D2K(x), DL__D2K(0)); }
DL__VAPI dl_dual2 dl__same_dual2(const void *tag, dl_dual2 x) { (void)tag; return x; }
DL__VAPI dl__probe *dl__num_probe(dl__probe *p, double x) { (void)x; return p; }
DL__VAPI dl__probe *dl__same_probe(dl__probe *tag, dl__probe *x) { (void)tag; return x; }
DL__VAPI dl_dual dl__same_dual(const void *tag, dl_dual x) { (void)tag; return x; }
DL__VAPI dl_dual64 dl__same_dual64(const void *tag, dl_dual64 x) { (void)tag; return x; }
DL__VAPI float dl__ld_cf32(const dl__cf32 *c, const dl_tensor *t) { return ((const float *)t->data)[c->i]; }
DL__VAPI double dl__ld_cf64(const dl__cf64 *c, const dl_tensor *t) { return ((const double *)t->data)[c->i]; }
DL__VAPI int dl__gslot(const dl__gcur *g, const dl_tensor *t) {
  int k = 0;
  while (k < g->nops - 1 && g->ops[k] != t) k++;
  return k;
}
DL__VAPI float dl__ld_gf32(const dl__gf32 *c, const dl_tensor *t) {
  int k = dl__gslot(&c->g, t);
  return ((const float *)(const void *)c->g.base[k])[c->g.j * c->g.inc[k]];
}
DL__VAPI double dl__ld_gf64(const dl__gf64 *c, const dl_tensor *t) {
  int k = dl__gslot(&c->g, t);
  return ((const double *)(const void *)c->g.base[k])[c->g.j * c->g.inc[k]];
}
DL_API dl__probe *dl__ld_probe(dl__probe *p, const dl_tensor *t) { dl__probe_operand(p, t); return p; }

#define DL__LEAF_TENSOR                                                                \
  _Generic(dl__tag, const dl__cf32 *: dl__ld_cf32, const dl__cf64 *: dl__ld_cf64,      \
           const dl__gf32 *: dl__ld_gf32, const dl__gf64 *: dl__ld_gf64, dl__probe *: dl__ld_probe, \
           default: dl__ERROR_tensor_outside_DL_ASSIGN)
#define DL__LEAF_DUALS(same, other)                                                    \
  _Generic(dl__tag, const dl_dual *: same, const dl_dual64 *: other,                   \
           const float *: dl__ERROR_dual_number_in_float_context,                      \
           const double *: dl__ERROR_dual_number_in_float_context,                     \
           default: dl__ERROR_dual_number_in_tensor_expression)
#define DL__LEAF_DUAL DL__LEAF_DUALS(dl__same_dual, dl__ERROR_mixing_dl_dual_and_dl_dual64)
#define DL__LEAF_DUAL64 DL__LEAF_DUALS(dl__ERROR_mixing_dl_dual_and_dl_dual64, dl__same_dual64)
#define DL__LEAF_PROBE _Generic(dl__tag, dl__probe *: dl__same_probe, default: dl__ERROR_tensor_outside_DL_ASSIGN)
#define DL__LEAF_NUMBER DL__PRECSEL(dl__num_f32, dl__num_f64, dl__num_dual, dl__num_dual64, dl__num_dual2, dl__num_probe)

/* DL__L(x): x converted to the context's type, evaluated once.
 *
 * The conversion is picked by x's type, and _Generic can only see a type by
 * naming the expression; pasting x twice (once to pick, once to pass) would
 * double the text at every level of nesting (a 10-deep expression became
 * 2^10 copies of its leaves). With gcc and clang x is pasted once, into a
 * local of its own type (__auto_type in a statement expression; __extension__
 * keeps -Wpedantic quiet), and _Generic picks by the local. Other compilers
 * get the portable two-paste form: the same result, exponential text. */
#define DL__PICK(v)                                                                    \
  _Generic((v), dl_tensor *: DL__LEAF_TENSOR, const dl_tensor *: DL__LEAF_TENSOR,      \
           dl_dual: DL__LEAF_DUAL, dl_dual64: DL__LEAF_DUAL64, dl_dual2: dl__same_dual2,      \
           dl__probe *: DL__LEAF_PROBE,                                                \
           default: DL__LEAF_NUMBER)
#if (defined(__GNUC__) || defined(__clang__)) && !defined(DL_NO_GNU_EXTENSIONS)
#define DL__LINEAR_MACROS 1
#define DL__L(x) __extension__({ __auto_type dl__x = (x); DL__PICK(dl__x)(dl__tag, dl__x); })
#else
#define DL__LINEAR_MACROS 0
#define DL__L(x) DL__PICK(x)(dl__tag, (x))
#endif

/* Probe versions of every function: they only pass the probe along. */
DL_API dl__probe *dl__probe_1(dl__probe *a) { return a; }
DL_API dl__probe *dl__probe_2(dl__probe *a, dl__probe *b) { (void)b; return a; }
DL_API dl__probe *dl__probe_3(dl__probe *a, dl__probe *b, dl__probe *c) { (void)b; (void)c; return a; }
DL_API dl__probe *dl__probe_1n(dl__probe *a, double n) { (void)n; return a; }
DL_API dl__probe *dl__probe_1nn(dl__probe *a, double n, double m) { (void)n; (void)m; return a; }

/* The function `name` of the context's type; P is its probe version. */
#define DL__FN(name, P)                                                                \
  DL__PRECSEL(dl_##name##_f32, dl_##name##_f64, dl_##name##_dual, dl_##name##_dual64, dl_##name##_dual2, P)

/* DL_APPLY1/2(f, ...): call a user function family f_f32, f_f64, f_dual,
 * f_dual64 (as DL_DEFINE_OP makes) from generic code. */
#define DL_APPLY1(f, a) DL__PRECSEL(f##_f32, f##_f64, f##_dual, f##_dual64, f##_dual2, dl__probe_1)(DL__L(a))
/* f(a, b) for a user's binary family (DL_DEFINE_OP2) */
#define DL_APPLY2(f, a, b)                                                             \
  DL__PRECSEL(f##_f32, f##_f64, f##_dual, f##_dual64, f##_dual2, dl__probe_2)(DL__L(a), DL__L(b))

/* dl_val(x): x itself as the context's scalar (a tensor read at the current
 * element, a number converted): DL_ASSIGN(y, dl_val(b)) broadcasts b into y. */
#define dl_val(x) DL__L(x)
#define dl_add(a, b) DL__FN(add, dl__probe_2)(DL__L(a), DL__L(b)) /* a + b */
#define dl_sub(a, b) DL__FN(sub, dl__probe_2)(DL__L(a), DL__L(b)) /* a - b */
#define dl_mul(a, b) DL__FN(mul, dl__probe_2)(DL__L(a), DL__L(b)) /* a * b */
#define dl_div(a, b) DL__FN(div, dl__probe_2)(DL__L(a), DL__L(b)) /* a / b */
#define dl_pow(a, b) DL__FN(pow, dl__probe_2)(DL__L(a), DL__L(b)) /* a^b */
#define dl_max(a, b) DL__FN(max, dl__probe_2)(DL__L(a), DL__L(b)) /* max(a, b) (NaN propagates; the derivative is split evenly on a tie) */
#define dl_min(a, b) DL__FN(min, dl__probe_2)(DL__L(a), DL__L(b)) /* min(a, b) (as dl_max) */
#define dl_gt(a, b) DL__FN(gt, dl__probe_2)(DL__L(a), DL__L(b)) /* a > b: 1 or 0 in the context's type (no derivative) */
#define dl_ge(a, b) DL__FN(ge, dl__probe_2)(DL__L(a), DL__L(b)) /* a >= b: 1 or 0 */
#define dl_lt(a, b) DL__FN(lt, dl__probe_2)(DL__L(a), DL__L(b)) /* a < b: 1 or 0 */
#define dl_le(a, b) DL__FN(le, dl__probe_2)(DL__L(a), DL__L(b)) /* a <= b: 1 or 0 */
#define dl_eq(a, b) DL__FN(eq, dl__probe_2)(DL__L(a), DL__L(b)) /* a == b: 1 or 0 */
#define dl_where(c, a, b) DL__FN(where, dl__probe_3)(DL__L(c), DL__L(a), DL__L(b)) /* c != 0 ? a : b */
#define dl_neg(x) DL__FN(neg, dl__probe_1)(DL__L(x)) /* -x */
#define dl_exp(x) DL__FN(exp, dl__probe_1)(DL__L(x)) /* e^x */
#define dl_log(x) DL__FN(log, dl__probe_1)(DL__L(x)) /* natural logarithm */
#define dl_log1p(x) DL__FN(log1p, dl__probe_1)(DL__L(x)) /* log(1 + x), accurate near 0 */
#define dl_expm1(x) DL__FN(expm1, dl__probe_1)(DL__L(x)) /* e^x - 1, accurate near 0 */
#define dl_sqrt(x) DL__FN(sqrt, dl__probe_1)(DL__L(x)) /* square root */
#define dl_sin(x) DL__FN(sin, dl__probe_1)(DL__L(x)) /* sine */
#define dl_cos(x) DL__FN(cos, dl__probe_1)(DL__L(x)) /* cosine */
#define dl_tanh(x) DL__FN(tanh, dl__probe_1)(DL__L(x)) /* hyperbolic tangent */
#define dl_sigmoid(x) DL__FN(sigmoid, dl__probe_1)(DL__L(x)) /* 1 / (1 + e^-x) */
#define dl_erf(x) DL__FN(erf, dl__probe_1)(DL__L(x)) /* the error function */
#define dl_abs(x) DL__FN(abs, dl__probe_1)(DL__L(x)) /* |x| */
#define dl_square(x) DL__FN(square, dl__probe_1)(DL__L(x)) /* x * x */
#define dl_relu(x) DL__FN(relu, dl__probe_1)(DL__L(x)) /* max(0, x) */
#define dl_gelu_tanh(x) DL__FN(gelu_tanh, dl__probe_1)(DL__L(x)) /* GELU, tanh approximation */
#define dl_gelu(x) DL__FN(gelu, dl__probe_1)(DL__L(x)) /* GELU, exact: x * (1 + erf(x / sqrt 2)) / 2 */
#define dl_silu(x) DL__FN(silu, dl__probe_1)(DL__L(x)) /* x * sigmoid(x) */
#define dl_softplus(x) DL__FN(softplus, dl__probe_1)(DL__L(x)) /* log(1 + e^x) */
/* slope, alpha, lo, hi are plain numbers (not differentiated) */
#define dl_leaky_relu(x, slope) DL__FN(leaky_relu, dl__probe_1n)(DL__L(x), (slope))
#define dl_elu(x, alpha) DL__FN(elu, dl__probe_1n)(DL__L(x), (alpha)) /* x > 0 ? x : alpha * (e^x - 1) */
#define dl_clamp(x, lo, hi) DL__FN(clamp, dl__probe_1nn)(DL__L(x), (lo), (hi)) /* min(max(x, lo), hi) */

#else /* >>generic (C++) ------------------------------------------------------ */

/* In C++ the generic names are function templates: the argument types are
 * the context. Numbers meet the other operand's type (rank: dl_dual2 5 >
 * dl_dual64 4 > dl_dual 3 > float 2 > double 1 > integers 0: a double
 * constant meeting a float stays float, as in a C f32 context); dual types
 * never mix. With a tensor among the arguments (outside nvcc) a generic call
 * builds an expression node instead, which DL_ASSIGN (expr.h) evaluates per
 * element: the C++ form of C's fused loops, the same arithmetic. */
#include <type_traits>

/* The C++ machinery is file-local (an unnamed namespace), like the static
 * inline C functions it calls: no template is shared between files built
 * with other flags. */
/* Functors and nodes inline into the fused loops (as C's DL__VAPI
 * functions are forced to), so that gcc -O2 still vectorises them. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define DL__CXX_AI __attribute__((always_inline)) inline
#else
#define DL__CXX_AI inline
#endif
namespace {
template <class T> struct dl__cxx_rank { static const int value = 0; };
template <> struct dl__cxx_rank<double> { static const int value = 1; };
template <> struct dl__cxx_rank<float> { static const int value = 2; };
template <> struct dl__cxx_rank<dl_dual> { static const int value = 3; };
template <> struct dl__cxx_rank<dl_dual64> { static const int value = 4; };
template <> struct dl__cxx_rank<dl_dual2> { static const int value = 5; };
template <int R> struct dl__cxx_type { typedef double type; };
template <> struct dl__cxx_type<2> { typedef float type; };
template <> struct dl__cxx_type<3> { typedef dl_dual type; };
template <> struct dl__cxx_type<4> { typedef dl_dual64 type; };
template <> struct dl__cxx_type<5> { typedef dl_dual2 type; };
template <class A, class B> struct dl__cxx_common {
  static const int ra = dl__cxx_rank<A>::value, rb = dl__cxx_rank<B>::value, r = ra > rb ? ra : rb;
  static_assert(!(ra >= 3 && rb >= 3 && ra != rb), "dl: mixing dual number types (dl_dual, dl_dual64, dl_dual2)");
  typedef typename dl__cxx_type<r>::type type;
};
template <class To> struct dl__cxx_cv {
  template <class F> DL_HD static DL__CXX_AI To from(F x) {
    static_assert(dl__cxx_rank<F>::value < 3, "dl: a dual number where a float is expected");
    return (To)x;
  }
};
template <> struct dl__cxx_cv<dl_dual> {
  DL_HD static DL__CXX_AI dl_dual from(dl_dual x) { return x; }
  template <class F> DL_HD static DL__CXX_AI dl_dual from(F x) {
    static_assert(dl__cxx_rank<F>::value < 3, "dl: mixing dual number types (dl_dual, dl_dual64, dl_dual2)");
    return dl_dual_make((float)x, 0.0f);
  }
};
template <> struct dl__cxx_cv<dl_dual64> {
  DL_HD static DL__CXX_AI dl_dual64 from(dl_dual64 x) { return x; }
  template <class F> DL_HD static DL__CXX_AI dl_dual64 from(F x) {
    static_assert(dl__cxx_rank<F>::value < 3, "dl: mixing dual number types (dl_dual, dl_dual64, dl_dual2)");
    return dl_dual64_make((double)x, 0.0);
  }
};
template <> struct dl__cxx_cv<dl_dual2> {
  DL_HD static DL__CXX_AI dl_dual2 from(dl_dual2 x) { return x; }
  template <class F> DL_HD static DL__CXX_AI dl_dual2 from(F x) {
    static_assert(dl__cxx_rank<F>::value < 3, "dl: mixing dual number types (dl_dual, dl_dual64, dl_dual2)");
    return dl__mk_dual2(DL__D2K((double)x), DL__D2K(0.0));
  }
};

/* One function family (FAM_f32 ... FAM_dual2) as a functor: ap() picks by
 * the argument's type. PF: the number parameter's type for f32 and dl_dual
 * (float for the library's families, double for a user's DL_DEFINE_OP1P). */
#define DL__CXX_FO1(FO, FAM)                                                           \
  struct FO {                                                                          \
    DL_HD static DL__CXX_AI float ap(float a) { return FAM##_f32(a); }                            \
    DL_HD static DL__CXX_AI double ap(double a) { return FAM##_f64(a); }                          \
    DL_HD static DL__CXX_AI dl_dual ap(dl_dual a) { return FAM##_dual(a); }                       \
    DL_HD static DL__CXX_AI dl_dual64 ap(dl_dual64 a) { return FAM##_dual64(a); }                 \
    DL_HD static DL__CXX_AI dl_dual2 ap(dl_dual2 a) { return FAM##_dual2(a); }                    \
  };
#define DL__CXX_FO2(FO, FAM)                                                           \
  struct FO {                                                                          \
    DL_HD static DL__CXX_AI float ap(float a, float b) { return FAM##_f32(a, b); }                \
    DL_HD static DL__CXX_AI double ap(double a, double b) { return FAM##_f64(a, b); }             \
    DL_HD static DL__CXX_AI dl_dual ap(dl_dual a, dl_dual b) { return FAM##_dual(a, b); }         \
    DL_HD static DL__CXX_AI dl_dual64 ap(dl_dual64 a, dl_dual64 b) { return FAM##_dual64(a, b); } \
    DL_HD static DL__CXX_AI dl_dual2 ap(dl_dual2 a, dl_dual2 b) { return FAM##_dual2(a, b); }     \
  };
#define DL__CXX_FO1P(FO, FAM, PF)                                                      \
  struct FO {                                                                          \
    DL_HD static DL__CXX_AI float ap(float a, double p) { return FAM##_f32(a, (PF)p); }           \
    DL_HD static DL__CXX_AI double ap(double a, double p) { return FAM##_f64(a, p); }             \
    DL_HD static DL__CXX_AI dl_dual ap(dl_dual a, double p) { return FAM##_dual(a, (PF)p); }      \
    DL_HD static DL__CXX_AI dl_dual64 ap(dl_dual64 a, double p) { return FAM##_dual64(a, p); }    \
    DL_HD static DL__CXX_AI dl_dual2 ap(dl_dual2 a, double p) { return FAM##_dual2(a, p); }       \
  };

/* Expression operands: tensors and nodes (never under nvcc). */
#ifdef DL__SCALAR_ONLY
template <class T> struct dl__cxx_isx { static const bool value = false; };
#else
template <class T> struct dl__cxx_false { static const bool value = false; };
struct dl__xbase {
  /* a node used as a number: the expression was not given to DL_ASSIGN */
  template <class T> operator T() const {
    static_assert(dl__cxx_false<T>::value,
                  "dl: generic math over a tensor is a tensor expression: evaluate it with DL_ASSIGN(dst, expr)");
    return T();
  }
};
template <class T> struct dl__cxx_isx { static const bool value = std::is_base_of<dl__xbase, T>::value; };
template <> struct dl__cxx_isx<dl_tensor *> { static const bool value = true; };
template <> struct dl__cxx_isx<const dl_tensor *> { static const bool value = true; };
#endif

/* The call of functor F on scalars: its arguments converted to their common
 * type (a node when an argument is a tensor or node, below). */
template <class F, class A, bool X = dl__cxx_isx<A>::value> struct dl__cxx_u {
  typedef typename dl__cxx_common<A, A>::type type;
  DL_HD static DL__CXX_AI type go(A a) { return F::ap(dl__cxx_cv<type>::from(a)); }
  DL_HD static DL__CXX_AI type go(A a, double p) { return F::ap(dl__cxx_cv<type>::from(a), p); }
  DL_HD static DL__CXX_AI type go(A a, double p, double q) { return F::ap(dl__cxx_cv<type>::from(a), p, q); }
};
template <class F, class A, class B, bool X = dl__cxx_isx<A>::value || dl__cxx_isx<B>::value> struct dl__cxx_b {
  typedef typename dl__cxx_common<A, B>::type type;
  DL_HD static DL__CXX_AI type go(A a, B b) { return F::ap(dl__cxx_cv<type>::from(a), dl__cxx_cv<type>::from(b)); }
};
template <class F, class C, class A, class B,
          bool X = dl__cxx_isx<C>::value || dl__cxx_isx<A>::value || dl__cxx_isx<B>::value>
struct dl__cxx_t {
  typedef typename dl__cxx_common<typename dl__cxx_common<A, B>::type, C>::type type;
  DL_HD static DL__CXX_AI type go(C c, A a, B b) {
    return F::ap(dl__cxx_cv<type>::from(c), dl__cxx_cv<type>::from(a), dl__cxx_cv<type>::from(b));
  }
};

#ifndef DL__SCALAR_ONLY
/* >>expression nodes (C++) --------------------------------------------------
 * A generic call with a tensor among its arguments returns a node; nodes
 * nest into the expression's tree, held by value. probe() records the
 * tensors (expr.h's first pass); ev<T>(cursor) computes one element in T
 * (float or double), the cursor being the contiguous index or the general
 * loop's row cursor (dl__gcur). */
struct dl__xcc { int64_t i; };
struct dl__xleaf : dl__xbase {
  const dl_tensor *t;
  mutable int k; /* the tensor's slot in the general cursor */
  void probe(dl__probe *p) const { k = dl__probe_operand(p, t); }
  template <class T> DL__CXX_AI T ev(const dl__xcc &c) const { return ((const T *)t->data)[c.i]; }
  template <class T> DL__CXX_AI T ev(const dl__gcur &c) const {
    return ((const T *)(const void *)c.base[k])[c.j * c.inc[k]];
  }
};
struct dl__xnum : dl__xbase {
  double v;
  void probe(dl__probe *) const {}
  template <class T, class Cur> DL__CXX_AI T ev(const Cur &) const { return (T)v; }
};
template <class F, class A> struct dl__xun : dl__xbase {
  A a;
  double p, q;
  void probe(dl__probe *pr) const { a.probe(pr); }
  template <class T, class Cur> DL__CXX_AI T ev(const Cur &c) const { return F::ap(a.template ev<T>(c)); }
};
template <class F, class A> struct dl__xun1 : dl__xun<F, A> { /* one number parameter */
  template <class T, class Cur> DL__CXX_AI T ev(const Cur &c) const { return F::ap(this->a.template ev<T>(c), this->p); }
};
template <class F, class A> struct dl__xun2 : dl__xun<F, A> { /* two number parameters */
  template <class T, class Cur> DL__CXX_AI T ev(const Cur &c) const {
    return F::ap(this->a.template ev<T>(c), this->p, this->q);
  }
};
template <class F, class A, class B> struct dl__xbin : dl__xbase {
  A a;
  B b;
  void probe(dl__probe *pr) const { a.probe(pr); b.probe(pr); }
  template <class T, class Cur> DL__CXX_AI T ev(const Cur &c) const { return F::ap(a.template ev<T>(c), b.template ev<T>(c)); }
};
template <class F, class C, class A, class B> struct dl__xter : dl__xbase {
  C c;
  A a;
  B b;
  void probe(dl__probe *pr) const { c.probe(pr); a.probe(pr); b.probe(pr); }
  template <class T, class Cur> DL__CXX_AI T ev(const Cur &u) const {
    return F::ap(c.template ev<T>(u), a.template ev<T>(u), b.template ev<T>(u));
  }
};
/* An operand as a node: a tensor becomes a leaf, a number a constant, a
 * node stays itself; a dual number is an error. */
template <class A, bool N = std::is_base_of<dl__xbase, A>::value> struct dl__xw {
  static_assert(dl__cxx_rank<A>::value < 3,
                "dl: a dual number in a tensor expression (DL_ASSIGN computes in the destination's f32 or f64)");
  static_assert(std::is_arithmetic<A>::value || std::is_enum<A>::value,
                "dl: an operand of a tensor expression must be a tensor (dl_tensor *), a number, or generic math over them");
  typedef dl__xnum type;
  static type of(A a) { type r; r.v = (double)a; return r; }
};
template <class A> struct dl__xw<A, true> {
  typedef A type;
  static type of(const A &a) { return a; }
};
template <> struct dl__xw<dl_tensor *, false> {
  typedef dl__xleaf type;
  static type of(const dl_tensor *t) { type r; r.t = t; r.k = 0; return r; }
};
template <> struct dl__xw<const dl_tensor *, false> : dl__xw<dl_tensor *, false> {};
template <class A> inline typename dl__xw<A>::type dl__xwrap(const A &a) { return dl__xw<A>::of(a); }
template <class F, class A> struct dl__cxx_u<F, A, true> {
  typedef dl__xun<F, typename dl__xw<A>::type> type;
  static type go(A a) { type r; r.a = dl__xw<A>::of(a); r.p = r.q = 0; return r; }
  static dl__xun1<F, typename dl__xw<A>::type> go(A a, double p) {
    dl__xun1<F, typename dl__xw<A>::type> r;
    r.a = dl__xw<A>::of(a); r.p = p; r.q = 0;
    return r;
  }
  static dl__xun2<F, typename dl__xw<A>::type> go(A a, double p, double q) {
    dl__xun2<F, typename dl__xw<A>::type> r;
    r.a = dl__xw<A>::of(a); r.p = p; r.q = q;
    return r;
  }
};
template <class F, class A, class B> struct dl__cxx_b<F, A, B, true> {
  typedef dl__xbin<F, typename dl__xw<A>::type, typename dl__xw<B>::type> type;
  static type go(A a, B b) { type r; r.a = dl__xw<A>::of(a); r.b = dl__xw<B>::of(b); return r; }
};
template <class F, class C, class A, class B> struct dl__cxx_t<F, C, A, B, true> {
  typedef dl__xter<F, typename dl__xw<C>::type, typename dl__xw<A>::type, typename dl__xw<B>::type> type;
  static type go(C c, A a, B b) {
    type r;
    r.c = dl__xw<C>::of(c); r.a = dl__xw<A>::of(a); r.b = dl__xw<B>::of(b);
    return r;
  }
};
#endif /* !DL__SCALAR_ONLY */

/* The generic names: one functor per family, one template per name. The
 * one- and two-parameter calls (dl__cxx_u's go with numbers) return the
 * node types dl__xun1/dl__xun2 for tensors; the return type is spelled by
 * decltype. */
#define DL__CXX_UNARY(name)                                                            \
  DL__CXX_FO1(dl__fo_##name, dl_##name)                                                \
  template <class A> DL_HD inline typename dl__cxx_u<dl__fo_##name, A>::type dl_##name(A a) { \
    return dl__cxx_u<dl__fo_##name, A>::go(a);                                         \
  }
#define DL__CXX_BINARY(name)                                                           \
  DL__CXX_FO2(dl__fo_##name, dl_##name)                                                \
  template <class A, class B>                                                          \
  DL_HD inline typename dl__cxx_b<dl__fo_##name, A, B>::type dl_##name(A a, B b) {     \
    return dl__cxx_b<dl__fo_##name, A, B>::go(a, b);                                   \
  }
/* x differentiable, p a plain number */
#define DL__CXX_PARAM1(name)                                                           \
  DL__CXX_FO1P(dl__fo_##name, dl_##name, float)                                        \
  template <class A>                                                                   \
  DL_HD inline auto dl_##name(A a, double p) -> decltype(dl__cxx_u<dl__fo_##name, A>::go(a, p)) { \
    return dl__cxx_u<dl__fo_##name, A>::go(a, p);                                      \
  }
DL__CXX_UNARY(neg) DL__CXX_UNARY(exp) DL__CXX_UNARY(log) DL__CXX_UNARY(log1p)
DL__CXX_UNARY(expm1) DL__CXX_UNARY(sqrt) DL__CXX_UNARY(sin) DL__CXX_UNARY(cos)
DL__CXX_UNARY(tanh) DL__CXX_UNARY(sigmoid) DL__CXX_UNARY(erf) DL__CXX_UNARY(abs) DL__CXX_UNARY(square)
DL__CXX_UNARY(relu) DL__CXX_UNARY(gelu_tanh) DL__CXX_UNARY(gelu) DL__CXX_UNARY(silu)
DL__CXX_UNARY(softplus)
DL__CXX_BINARY(add) DL__CXX_BINARY(sub) DL__CXX_BINARY(mul) DL__CXX_BINARY(div)
DL__CXX_BINARY(pow) DL__CXX_BINARY(max) DL__CXX_BINARY(min) DL__CXX_BINARY(gt)
DL__CXX_BINARY(ge) DL__CXX_BINARY(lt) DL__CXX_BINARY(le) DL__CXX_BINARY(eq)
DL__CXX_PARAM1(leaky_relu) DL__CXX_PARAM1(elu)
struct dl__fo_clamp {
  DL_HD static DL__CXX_AI float ap(float a, double lo, double hi) { return dl_clamp_f32(a, (float)lo, (float)hi); }
  DL_HD static DL__CXX_AI double ap(double a, double lo, double hi) { return dl_clamp_f64(a, lo, hi); }
  DL_HD static DL__CXX_AI dl_dual ap(dl_dual a, double lo, double hi) { return dl_clamp_dual(a, (float)lo, (float)hi); }
  DL_HD static DL__CXX_AI dl_dual64 ap(dl_dual64 a, double lo, double hi) { return dl_clamp_dual64(a, lo, hi); }
  DL_HD static DL__CXX_AI dl_dual2 ap(dl_dual2 a, double lo, double hi) { return dl_clamp_dual2(a, lo, hi); }
};
/* min(max(x, lo), hi); lo and hi are plain numbers */
template <class A>
DL_HD inline auto dl_clamp(A a, double lo, double hi) -> decltype(dl__cxx_u<dl__fo_clamp, A>::go(a, lo, hi)) {
  return dl__cxx_u<dl__fo_clamp, A>::go(a, lo, hi);
}
struct dl__fo_where {
  DL_HD static DL__CXX_AI float ap(float c, float a, float b) { return dl_where_f32(c, a, b); }
  DL_HD static DL__CXX_AI double ap(double c, double a, double b) { return dl_where_f64(c, a, b); }
  DL_HD static DL__CXX_AI dl_dual ap(dl_dual c, dl_dual a, dl_dual b) { return dl_where_dual(c, a, b); }
  DL_HD static DL__CXX_AI dl_dual64 ap(dl_dual64 c, dl_dual64 a, dl_dual64 b) { return dl_where_dual64(c, a, b); }
  DL_HD static DL__CXX_AI dl_dual2 ap(dl_dual2 c, dl_dual2 a, dl_dual2 b) { return dl_where_dual2(c, a, b); }
};
/* c != 0 ? a : b */
template <class C, class A, class B>
DL_HD inline typename dl__cxx_t<dl__fo_where, C, A, B>::type dl_where(C c, A a, B b) {
  return dl__cxx_t<dl__fo_where, C, A, B>::go(c, a, b);
}
struct dl__fo_val {
  template <class T> DL_HD static DL__CXX_AI T ap(T a) { return a; }
};
/* x itself as a scalar of its type; a tensor read at the current element
 * inside DL_ASSIGN (DL_ASSIGN(y, dl_val(b)) broadcasts b into y) */
template <class A> DL_HD inline typename dl__cxx_u<dl__fo_val, A>::type dl_val(A a) {
  return dl__cxx_u<dl__fo_val, A>::go(a);
}
} /* namespace */
/* In C++ the context is the argument types; DL_SCALAR is accepted and ignored. */
#define DL_SCALAR(type) ((void)0)
/* A user's family (DL_DEFINE_OP1/1P/2 in expr.h makes the generic name f
 * too in C++): DL_APPLY1(f, a) is f(a). */
#define DL_APPLY1(f, a) f(a)
#define DL_APPLY2(f, a, b) f(a, b)
#endif /* __cplusplus */

/* The element-wise list's names for dl_max and dl_min (as dl_t_maximum and
 * dl_t_minimum; dl_t_max and dl_t_min are reductions, as torch.maximum and
 * torch.max are), in C and C++. */
#define dl_maximum(a, b) dl_max(a, b)
#define dl_minimum(a, b) dl_min(a, b) /* min(a, b) (the element-wise list's name) */

DL__HEADER_END
#endif /* DL_DUAL_H */
