/* dl/vmath.h - vectorisable scalar math for float and double.
 *
 * exp, expm1, log, log1p, tanh, sigmoid and erf written so that a compiler
 * can turn a loop over them into SIMD code:
 *
 *   for (i = 0; i < n; i++) y[i] = dl_vtanh_f32(a[i] * b[i] + c[i]);
 *
 * vectorises with gcc 12 and clang 14 at -O3, with clang at -O2, and with gcc
 * at -O2 -ftree-vectorize (gcc's plain -O2 only vectorises loops whose trip
 * count is a known multiple of the vector width). With gcc on x86-64 the f64
 * functions need SSE4.2 (-march=x86-64-v2 or later) to vectorise; f32 ones
 * vectorise with plain SSE2.
 *
 * Each function is range reduction plus a polynomial: no branches, no
 * tables, no calls into libm. Special cases are selects between values that
 * are always computed, done with bit masks (dl__vsel_*), and bits are moved
 * with memcpy through uint32_t / uint64_t. Float functions compute in float,
 * double ones in double, so a float loop keeps its full vector width. Where
 * the target has fused multiply-add (__FMA__, AArch64) the polynomials use
 * it through __builtin_fma, which gcc does not otherwise do under -std=c11.
 * Needs IEEE binary32/binary64 evaluated in their own precision
 * (FLT_EVAL_METHOD 0: SSE, AVX, NEON; not x87), round to nearest, and no
 * -ffast-math (which folds away the NaN and infinity checks).
 *
 * Accuracy: max error in ulp of the result against the exact value. f32:
 * every one of the 2^32 inputs checked against libm's double function;
 * f64: 2^26 random inputs per function (random bit patterns, uniform over
 * the interesting range, log-uniform magnitudes) plus the sweeps of
 * tests/test_vmath.c, against the long double function. Measured with and
 * without FMA (gcc -O2, and -O3 -march=native -ffp-contract=fast), taking
 * the larger; "bound" is what tests/test_vmath.c asserts.
 *
 *   function   f32 max  bound   f64 max  bound
 *   exp        0.99     1.0     0.99     1.1
 *   expm1      1.26     1.3     1.51     1.6
 *   log        0.84     0.9     0.84     0.95
 *   log1p      0.87     0.9     0.85     0.95
 *   tanh       1.34     1.4     1.45     1.6
 *   sigmoid    1.97     2.0     1.97     2.1
 *   erf        1.32     1.4     1.43     1.6
 *
 * Special values follow C's libm: NaN in gives NaN out; exp overflows to +inf
 * and underflows to +0, exp(-inf) = 0; log(+-0) = -inf, log(x < 0) = NaN,
 * log(+inf) = +inf; log1p(-1) = -inf, log1p(x < -1) = NaN; tanh(+-inf) = +-1,
 * sigmoid(+inf) = 1, sigmoid(-inf) = 0, erf(+-inf) = +-1; the odd functions
 * (expm1, log1p, tanh, erf) keep the sign of a zero. Results that are
 * subnormal (exp, sigmoid, tanh and erf of tiny or very negative inputs) are
 * produced as subnormals, not flushed; a thread that runs with flush-to-zero
 * (dl's training workers do) sees them, and subnormal inputs, as zero.
 *
 * The polynomial coefficients are weighted minimax fits (Remez exchange, 60
 * digits, rounded to the working precision) made for this file:
 *   e^r - 1 = r + r^2 q(r) on |r| <= 0.354, relative error;
 *   log(1+f) = f - f^2/2 + s (f^2/2 + z P(z)), s = f/(2+f), z = s^2,
 *     |s| <= 0.1716;
 *   tanh(x) = x + x^3 P(x^2) on |x| < 1/2, relative error;
 *   erf(x) = x + x P(x^2) on |x| < 1, relative error;
 *   erf(x) = 1 - e^{-x^2} Q(x) on 1 <= x <= 3.95 (f32) / 6 (f64), with the
 *     error of Q weighted by erfc(x) / erf(x) (its share of erf's error).
 */
#ifndef DL_VMATH_H
#define DL_VMATH_H

#include "config.h"
DL__HEADER_BEGIN
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* >>vmath-bits ------------------------------------------------------------- */

/* The bits of a float / double and back (memcpy: defined in C and C++, and
 * compiled to a register move). */
DL_HD DL__VAPI uint32_t dl__vbits_f32(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
DL_HD DL__VAPI float dl__vfrom_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
DL_HD DL__VAPI uint64_t dl__vbits_f64(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
DL_HD DL__VAPI double dl__vfrom_f64(uint64_t u) {
  double x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* a * b + c as one fused multiply-add where the target has one (gcc does
 * not contract a * b + c under -std=c11, so this is what gives it FMA),
 * otherwise as a multiply and an add. The stated accuracy holds both ways. */
#if defined(__CUDA_ARCH__) /* device code: the CUDA fma */
#define DL__VFMA_F32(a, b, c) fmaf((a), (b), (c))
#define DL__VFMA_F64(a, b, c) fma((a), (b), (c))
#elif (defined(__GNUC__) || defined(__clang__)) && \
    (defined(__FMA__) || defined(__ARM_FEATURE_FMA) || defined(__aarch64__))
#define DL__VFMA_F32(a, b, c) __builtin_fmaf((a), (b), (c))
#define DL__VFMA_F64(a, b, c) __builtin_fma((a), (b), (c))
#else
#define DL__VFMA_F32(a, b, c) ((a) * (b) + (c))
#define DL__VFMA_F64(a, b, c) ((a) * (b) + (c))
#endif

/* c ? a : b without a branch: the comparison c (0 or 1) becomes a bit mask
 * that picks a's or b's bits. Written this way rather than as ?: because
 * gcc turns ?: into branches, sinks the arithmetic that only one arm uses
 * into them, and then will not if-convert a loop whose arms may trap. */
DL_HD DL__VAPI float dl__vsel_f32(int c, float a, float b) {
  uint32_t m = 0u - (uint32_t)c;
  return dl__vfrom_f32((dl__vbits_f32(a) & m) | (dl__vbits_f32(b) & ~m));
}
DL_HD DL__VAPI double dl__vsel_f64(int c, double a, double b) {
  uint64_t m = 0u - (uint64_t)c;
  return dl__vfrom_f64((dl__vbits_f64(a) & m) | (dl__vbits_f64(b) & ~m));
}

/* >>vmath-exp -------------------------------------------------------------- */

/* Range reduction: x = n ln2 + r with |r| <= ln2/2 (plus rounding). n is
 * rounded to nearest by adding 1.5 * 2^23 (2^52), so n sits in the low bits
 * of the returned shifted value *t; ln2 is split so that n * ln2_hi is exact. */
#define DL__VSHIFT_F32 12582912.0f           /* 1.5 * 2^23 */
#define DL__VSHIFT_F32_BITS 0x4B400000u
#define DL__VSHIFT_F64 6755399441055744.0    /* 1.5 * 2^52 */
#define DL__VSHIFT_F64_BITS 0x4338000000000000u
#define DL__VLOG2E_F32 1.44269502f
#define DL__VLN2HI_F32 0.693359375f          /* 10 significant bits */
#define DL__VLN2LO_F32 -0.000212194442f
#define DL__VLOG2E_F64 1.4426950408889634
#define DL__VLN2HI_F64 0.69314718048553914   /* 33 significant bits */
#define DL__VLN2LO_F64 7.4406171100123968e-11

DL_HD DL__VAPI float dl__vexp_reduce_f32(float x, float *t) {
  float sh = DL__VFMA_F32(x, DL__VLOG2E_F32, DL__VSHIFT_F32);
  float n = sh - DL__VSHIFT_F32;
  *t = sh;
  return DL__VFMA_F32(-n, DL__VLN2LO_F32, DL__VFMA_F32(-n, DL__VLN2HI_F32, x));
}
DL_HD DL__VAPI double dl__vexp_reduce_f64(double x, double *t) {
  double sh = DL__VFMA_F64(x, DL__VLOG2E_F64, DL__VSHIFT_F64);
  double n = sh - DL__VSHIFT_F64;
  *t = sh;
  return DL__VFMA_F64(-n, DL__VLN2LO_F64, DL__VFMA_F64(-n, DL__VLN2HI_F64, x));
}

/* q(r) with e^r - 1 = r + r^2 q(r) for |r| <= 0.354: relative error of
 * e^r - 1 2^-28 (f32), 2^-57 (f64) before rounding. */
DL_HD DL__VAPI float dl__vexpm1_q_f32(float r) {
  float q = 0.000199672169f;
  q = DL__VFMA_F32(q, r, 0.00139454729f);
  q = DL__VFMA_F32(q, r, 0.0083332099f);
  q = DL__VFMA_F32(q, r, 0.0416662991f);
  q = DL__VFMA_F32(q, r, 0.166666672f);
  q = DL__VFMA_F32(q, r, 0.5f);
  return q;
}
DL_HD DL__VAPI double dl__vexpm1_q_f64(double r) {
  double q = 1.768865547632694e-09;
  q = DL__VFMA_F64(q, r, 2.5107358809917935e-08);
  q = DL__VFMA_F64(q, r, 2.7568359335201212e-07);
  q = DL__VFMA_F64(q, r, 2.7557250158148842e-06);
  q = DL__VFMA_F64(q, r, 2.4801573475959173e-05);
  q = DL__VFMA_F64(q, r, 0.00019841269879028898);
  q = DL__VFMA_F64(q, r, 0.0013888888896451475);
  q = DL__VFMA_F64(q, r, 0.0083333333333249094);
  q = DL__VFMA_F64(q, r, 0.041666666666649796);
  q = DL__VFMA_F64(q, r, 0.16666666666666671);
  q = DL__VFMA_F64(q, r, 0.50000000000000011);
  return q;
}

/* 2^n e^r - 1 for the reduced r and s = 2^n: (s - 1 + s r) + s r^2 q(r).
 * The first sum is exact where it cancels (n = 1, r < -1/4), so no bits of
 * the result are lost to s (e^r - 1) + (s - 1) cancelling. */
DL_HD DL__VAPI float dl__vexpm1_scaled_f32(float r, float s) {
  return DL__VFMA_F32(s, (r * r) * dl__vexpm1_q_f32(r), DL__VFMA_F32(s, r, s - 1.0f));
}
DL_HD DL__VAPI double dl__vexpm1_scaled_f64(double r, double s) {
  return DL__VFMA_F64(s, (r * r) * dl__vexpm1_q_f64(r), DL__VFMA_F64(s, r, s - 1.0));
}

/* 2^n from the shifted value t of dl__vexp_reduce, for n + bias in range
 * (the result must be a normal number). */
DL_HD DL__VAPI float dl__vpow2_f32(float t, uint32_t bias) {
  return dl__vfrom_f32((dl__vbits_f32(t) - DL__VSHIFT_F32_BITS + bias) << 23);
}
DL_HD DL__VAPI double dl__vpow2_f64(double t, uint64_t bias) {
  return dl__vfrom_f64((dl__vbits_f64(t) - DL__VSHIFT_F64_BITS + bias) << 52);
}

/* e^(x + xlo) for results that are normal numbers (x in [-87, 88] for f32,
 * [-708, 709] for f64), |xlo| < 2^-6, and x - n ln2_hi exact (x a multiple
 * of 2^-22 (f32) / 2^-50 (f64), as erf's x^2 split gives). */
DL_HD DL__VAPI float dl__vexp_normal_f32(float x, float xlo) {
  float t = DL__VFMA_F32(x + xlo, DL__VLOG2E_F32, DL__VSHIFT_F32);
  float n = t - DL__VSHIFT_F32;
  float r = DL__VFMA_F32(-n, DL__VLN2LO_F32, DL__VFMA_F32(-n, DL__VLN2HI_F32, x) + xlo);
  return (1.0f + DL__VFMA_F32(r * r, dl__vexpm1_q_f32(r), r)) * dl__vpow2_f32(t, 127u);
}
DL_HD DL__VAPI double dl__vexp_normal_f64(double x, double xlo) {
  double t = DL__VFMA_F64(x + xlo, DL__VLOG2E_F64, DL__VSHIFT_F64);
  double n = t - DL__VSHIFT_F64;
  double r = DL__VFMA_F64(-n, DL__VLN2LO_F64, DL__VFMA_F64(-n, DL__VLN2HI_F64, x) + xlo);
  return (1.0 + DL__VFMA_F64(r * r, dl__vexpm1_q_f64(r), r)) * dl__vpow2_f64(t, 1023u);
}

/* f(x) = e^x; max error 0.99 ulp (all floats).
 * x is clamped to where e^x is 0 or inf anyway; 2^n is applied as two halves
 * so that subnormal results round once (gradual underflow, then +0). */
DL_HD DL__VAPI float dl_vexp_f32(float x) {
  float xc = dl__vsel_f32(x < -104.0f, -104.0f, x);
  xc = dl__vsel_f32(xc > 89.0f, 89.0f, xc);
  float t, r = dl__vexp_reduce_f32(xc, &t);
  float p = 1.0f + DL__VFMA_F32(r * r, dl__vexpm1_q_f32(r), r);
  uint32_t u = dl__vbits_f32(t) - DL__VSHIFT_F32_BITS + 256u; /* n + 256 */
  uint32_t u1 = u >> 1;
  float s1 = dl__vfrom_f32((u1 - 1u) << 23);     /* 2^floor(n/2) */
  float s2 = dl__vfrom_f32((u - u1 - 1u) << 23); /* 2^(n - floor(n/2)) */
  return p * s1 * s2;
}
/* f(x) = e^x; max error 0.99 ulp (sampled over all doubles).
 * Clamped and scaled as the f32 version. */
DL_HD DL__VAPI double dl_vexp_f64(double x) {
  double xc = dl__vsel_f64(x < -746.0, -746.0, x);
  xc = dl__vsel_f64(xc > 710.0, 710.0, xc);
  double t, r = dl__vexp_reduce_f64(xc, &t);
  double p = 1.0 + DL__VFMA_F64(r * r, dl__vexpm1_q_f64(r), r);
  uint64_t u = dl__vbits_f64(t) - DL__VSHIFT_F64_BITS + 2048u; /* n + 2048 */
  uint64_t u1 = u >> 1;
  double s1 = dl__vfrom_f64((u1 - 1u) << 52);
  double s2 = dl__vfrom_f64((u - u1 - 1u) << 52);
  return p * s1 * s2;
}

/* f(x) = e^x - 1; max error 1.26 ulp (all floats), relative near 0. */
DL_HD DL__VAPI float dl_vexpm1_f32(float x) {
  float xc = dl__vsel_f32(x < -20.0f, -20.0f, x); /* e^-20 - 1 rounds to -1 */
  xc = dl__vsel_f32(xc > 89.0f, 89.0f, xc);
  float t, r = dl__vexp_reduce_f32(xc, &t);
  float n = t - DL__VSHIFT_F32;
  /* 2^n with n capped at 127; the n = 128 case is doubled afterwards. */
  float s = dl__vpow2_f32(t, 127u - (uint32_t)(n > 127.5f));
  float y = dl__vexpm1_scaled_f32(r, s);
  float y2 = y + y;
  y = dl__vsel_f32(n > 127.5f, y2, y);
  return dl__vsel_f32(x == 0.0f, x, y);
}
/* f(x) = e^x - 1; max error 1.51 ulp (sampled over all doubles), relative
 * near 0. */
DL_HD DL__VAPI double dl_vexpm1_f64(double x) {
  double xc = dl__vsel_f64(x < -40.0, -40.0, x); /* e^-40 - 1 rounds to -1 */
  xc = dl__vsel_f64(xc > 710.0, 710.0, xc);
  double t, r = dl__vexp_reduce_f64(xc, &t);
  double n = t - DL__VSHIFT_F64;
  double s = dl__vpow2_f64(t, 1023u - (uint64_t)(n > 1023.5));
  double y = dl__vexpm1_scaled_f64(r, s);
  double y2 = y + y;
  y = dl__vsel_f64(n > 1023.5, y2, y);
  return dl__vsel_f64(x == 0.0, x, y);
}

/* >>vmath-log -------------------------------------------------------------- */

/* log(u) + c for a positive normal u, plus kadd * ln2 (an exponent taken out
 * beforehand); c is a correction far below u's ulp. u = 2^k m with
 * m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f),
 * log(m) = f - f^2/2 + s (f^2/2 + R(s^2)). */
DL_HD DL__VAPI float dl__vlog_kernel_f32(float u, float kadd, float c) {
  uint32_t ix = dl__vbits_f32(u) - 0x3F3504F3u + 0x40000000u; /* 0x3F3504F3 = sqrt(1/2) */
  float k = dl__vfrom_f32(0x4B000000u | (ix >> 23)) - 8388736.0f + kadd; /* 2^23 + 128 */
  float f = dl__vfrom_f32((ix & 0x007FFFFFu) + 0x3F3504F3u) - 1.0f;
  float s = f / (2.0f + f);
  float z = s * s;
  float R = z * DL__VFMA_F32(z, DL__VFMA_F32(z, 0.298744202f, 0.399774492f), 0.666667759f);
  float hfsq = 0.5f * f * f;
  float lo = DL__VFMA_F32(s, hfsq + R, DL__VFMA_F32(k, DL__VLN2LO_F32, c));
  return DL__VFMA_F32(k, DL__VLN2HI_F32, -((hfsq - lo) - f));
}
DL_HD DL__VAPI double dl__vlog_kernel_f64(double u, double kadd, double c) {
  uint64_t ix = dl__vbits_f64(u) - 0x3FE6A09E667F3BCDu + 0x4000000000000000u;
  double k = dl__vfrom_f64(0x4330000000000000u | (ix >> 52)) - 4503599627371520.0 + kadd;
  double f = dl__vfrom_f64((ix & 0x000FFFFFFFFFFFFFu) + 0x3FE6A09E667F3BCDu) - 1.0;
  double s = f / (2.0 + f);
  double z = s * s;
  double p = 0.14799067701797178;
  p = DL__VFMA_F64(p, z, 0.15313755599902024);
  p = DL__VFMA_F64(p, z, 0.18183575171787689);
  p = DL__VFMA_F64(p, z, 0.22222198378353514);
  p = DL__VFMA_F64(p, z, 0.28571428744142641);
  p = DL__VFMA_F64(p, z, 0.39999999999407482);
  p = DL__VFMA_F64(p, z, 0.66666666666667351);
  double R = z * p;
  double hfsq = 0.5 * f * f;
  double lo = DL__VFMA_F64(s, hfsq + R, DL__VFMA_F64(k, DL__VLN2LO_F64, c));
  return DL__VFMA_F64(k, DL__VLN2HI_F64, -((hfsq - lo) - f));
}

/* f(x) = ln x; max error 0.84 ulp (all floats, subnormal x included). */
DL_HD DL__VAPI float dl_vlog_f32(float x) {
  float xs = x * 8388608.0f; /* 2^23 */
  int sub = x < 1.17549435e-38f;
  float y = dl__vlog_kernel_f32(dl__vsel_f32(sub, xs, x), dl__vsel_f32(sub, -23.0f, 0.0f), 0.0f);
  y = dl__vsel_f32(x == INFINITY, x, y);
  y = dl__vsel_f32(x == 0.0f, -INFINITY, y);
  y = dl__vsel_f32(x < 0.0f, NAN, y);
  return dl__vsel_f32(x != x, x, y);
}
/* f(x) = ln x; max error 0.84 ulp (sampled over all doubles, subnormal x
 * included). */
DL_HD DL__VAPI double dl_vlog_f64(double x) {
  double xs = x * 4503599627370496.0; /* 2^52 */
  int sub = x < 2.2250738585072014e-308;
  double y = dl__vlog_kernel_f64(dl__vsel_f64(sub, xs, x), dl__vsel_f64(sub, -52.0, 0.0), 0.0);
  y = dl__vsel_f64(x == (double)INFINITY, x, y);
  y = dl__vsel_f64(x == 0.0, -(double)INFINITY, y);
  y = dl__vsel_f64(x < 0.0, (double)NAN, y);
  return dl__vsel_f64(x != x, x, y);
}

/* f(x) = ln(1 + x); max error 0.87 ulp (all floats), relative near 0.
 * u = 1 + x is rounded; its exact rounding error (Fast2Sum) is added back
 * as err / u. */
DL_HD DL__VAPI float dl_vlog1p_f32(float x) {
  float u = 1.0f + x;
  float hi = dl__vsel_f32(x > 1.0f, x, 1.0f), lo = dl__vsel_f32(x > 1.0f, 1.0f, x);
  float c = (lo - (u - hi)) / u;
  float y = dl__vlog_kernel_f32(u, 0.0f, c);
  y = dl__vsel_f32(x == INFINITY, x, y);
  y = dl__vsel_f32(x == -1.0f, -INFINITY, y);
  y = dl__vsel_f32(x < -1.0f, NAN, y);
  y = dl__vsel_f32(x != x, x, y);
  return dl__vsel_f32(x == 0.0f, x, y);
}
/* f(x) = ln(1 + x); max error 0.85 ulp (sampled over all doubles), relative
 * near 0. */
DL_HD DL__VAPI double dl_vlog1p_f64(double x) {
  double u = 1.0 + x;
  double hi = dl__vsel_f64(x > 1.0, x, 1.0), lo = dl__vsel_f64(x > 1.0, 1.0, x);
  double c = (lo - (u - hi)) / u;
  double y = dl__vlog_kernel_f64(u, 0.0, c);
  y = dl__vsel_f64(x == (double)INFINITY, x, y);
  y = dl__vsel_f64(x == -1.0, -(double)INFINITY, y);
  y = dl__vsel_f64(x < -1.0, (double)NAN, y);
  y = dl__vsel_f64(x != x, x, y);
  return dl__vsel_f64(x == 0.0, x, y);
}

/* >>vmath-tanh-sigmoid ----------------------------------------------------- */

/* f(x) = tanh x; max error 1.34 ulp (all floats), relative near 0.
 * |x| < 1/2: x + x^3 P(x^2); above: sign(x) e / (e + 2), e = e^{2|x|} - 1,
 * with the rounding error of e + 2 (exact by Fast2Sum) divided out again
 * through 1 / (e + 2) = (1 - y) / 2; |x| >= 9.5 gives +-1. */
DL_HD DL__VAPI float dl_vtanh_f32(float x) {
  uint32_t sx = dl__vbits_f32(x) & 0x80000000u;
  float a = dl__vfrom_f32(dl__vbits_f32(x) ^ sx);
  float z = a * a;
  float p = -0.00664711883f;
  p = DL__VFMA_F32(p, z, 0.0212977882f);
  p = DL__VFMA_F32(p, z, -0.0538991541f);
  p = DL__VFMA_F32(p, z, 0.133329645f);
  p = DL__VFMA_F32(p, z, -0.333333254f);
  float ys = DL__VFMA_F32(a, z * p, a);
  float b = dl__vsel_f32(a > 9.5f, 9.5f, a); /* tanh(9.5) rounds to 1 */
  float t, r = dl__vexp_reduce_f32(b + b, &t);
  float e = dl__vexpm1_scaled_f32(r, dl__vpow2_f32(t, 127u));
  float d = e + 2.0f;
  float hi = dl__vsel_f32(e > 2.0f, e, 2.0f), lo = dl__vsel_f32(e > 2.0f, 2.0f, e);
  float err = (hi - d) + lo; /* (e + 2) - d */
  float y = e / d;
  y = DL__VFMA_F32(-y, err * DL__VFMA_F32(-0.5f, y, 0.5f), y);
  y = dl__vsel_f32(a < 0.5f, ys, y);
  return dl__vfrom_f32(dl__vbits_f32(y) | sx);
}
/* f(x) = tanh x; max error 1.45 ulp (sampled over all doubles), relative
 * near 0. As the f32 version; |x| >= 20 gives +-1. */
DL_HD DL__VAPI double dl_vtanh_f64(double x) {
  uint64_t sx = dl__vbits_f64(x) & 0x8000000000000000u;
  double a = dl__vfrom_f64(dl__vbits_f64(x) ^ sx);
  double z = a * a;
  double p = 5.6798966649250981e-05;
  p = DL__VFMA_F64(p, z, -0.0002178293182060445);
  p = DL__VFMA_F64(p, z, 0.0005832998584906358);
  p = DL__VFMA_F64(p, z, -0.0014544887702422152);
  p = DL__VFMA_F64(p, z, 0.0035919537753554098);
  p = DL__VFMA_F64(p, z, -0.0088632210150841398);
  p = DL__VFMA_F64(p, z, 0.02186948778552553);
  p = DL__VFMA_F64(p, z, -0.053968253945891637);
  p = DL__VFMA_F64(p, z, 0.13333333333300285);
  p = DL__VFMA_F64(p, z, -0.33333333333333165);
  double ys = DL__VFMA_F64(a, z * p, a);
  double b = dl__vsel_f64(a > 20.0, 20.0, a); /* tanh(20) rounds to 1 */
  double t, r = dl__vexp_reduce_f64(b + b, &t);
  double e = dl__vexpm1_scaled_f64(r, dl__vpow2_f64(t, 1023u));
  double d = e + 2.0;
  double hi = dl__vsel_f64(e > 2.0, e, 2.0), lo = dl__vsel_f64(e > 2.0, 2.0, e);
  double err = (hi - d) + lo;
  double y = e / d;
  y = DL__VFMA_F64(-y, err * DL__VFMA_F64(-0.5, y, 0.5), y);
  y = dl__vsel_f64(a < 0.5, ys, y);
  return dl__vfrom_f64(dl__vbits_f64(y) | sx);
}

/* f(x) = 1 / (1 + e^-x); max error 1.97 ulp (all floats).
 * Computed as e^x / (1 + e^x) for x < 0, so the left tail is accurate
 * relative to its (tiny, then subnormal, then 0) value; the rounding error
 * of 1 + e^-|x| is divided out again. */
DL_HD DL__VAPI float dl_vsigmoid_f32(float x) {
  float e = dl_vexp_f32(dl__vfrom_f32(dl__vbits_f32(x) | 0x80000000u)); /* e^-|x| */
  float d = 1.0f + e;
  float err = (1.0f - d) + e; /* (1 + e) - d */
  float y = dl__vsel_f32(x < 0.0f, e, 1.0f) / d;
  float omy = 1.0f - y;
  float inv = dl__vsel_f32(x < 0.0f, omy, y); /* 1 / d */
  return DL__VFMA_F32(-y, err * inv, y);
}
/* f(x) = 1 / (1 + e^-x); max error 1.97 ulp (sampled over all doubles).
 * As the f32 version. */
DL_HD DL__VAPI double dl_vsigmoid_f64(double x) {
  double e = dl_vexp_f64(dl__vfrom_f64(dl__vbits_f64(x) | 0x8000000000000000u));
  double d = 1.0 + e;
  double err = (1.0 - d) + e;
  double y = dl__vsel_f64(x < 0.0, e, 1.0) / d;
  double omy = 1.0 - y;
  double inv = dl__vsel_f64(x < 0.0, omy, y);
  return DL__VFMA_F64(-y, err * inv, y);
}

/* >>vmath-erf -------------------------------------------------------------- */

/* f(x) = erf x = 2/sqrt(pi) int_0^x e^{-t^2} dt; max error 1.32 ulp (all floats).
 * |x| < 1: x + x P(x^2); 1 <= |x|: 1 - e^{-x^2} Q(|x|), with x^2 split
 * exactly into hi + lo (12-bit high half) so e^{-x^2} keeps full accuracy;
 * |x| >= 3.95 gives +-1. */
DL_HD DL__VAPI float dl_verf_f32(float x) {
  uint32_t sx = dl__vbits_f32(x) & 0x80000000u;
  float a = dl__vfrom_f32(dl__vbits_f32(x) ^ sx);
  float z = a * a;
  float p = 7.85386073e-05f;
  p = DL__VFMA_F32(p, z, -0.000801019371f);
  p = DL__VFMA_F32(p, z, 0.00518832775f);
  p = DL__VFMA_F32(p, z, -0.026853811f);
  p = DL__VFMA_F32(p, z, 0.112835854f);
  p = DL__VFMA_F32(p, z, -0.37612626f);
  p = DL__VFMA_F32(p, z, 0.128379166f); /* 2/sqrt(pi) - 1 */
  float ys = DL__VFMA_F32(a, p, a);
  float b = dl__vsel_f32(a > 3.95f, 3.95f, a);
  float bh = dl__vfrom_f32(dl__vbits_f32(b) & 0xFFFFF000u), bl = b - bh;
  float g = dl__vexp_normal_f32(-(bh * bh), -(bl * (b + bh))); /* e^{-b^2} */
  float t = b - 2.475f;
  float q = -0.000393790251f;
  q = DL__VFMA_F32(q, t, -0.000756613503f);
  q = DL__VFMA_F32(q, t, -0.00189167936f);
  q = DL__VFMA_F32(q, t, 0.00217093364f);
  q = DL__VFMA_F32(q, t, -0.0080166636f);
  q = DL__VFMA_F32(q, t, 0.0257580392f);
  q = DL__VFMA_F32(q, t, -0.0755694956f);
  q = DL__VFMA_F32(q, t, 0.212680072f);
  float yt = DL__VFMA_F32(-g, q, 1.0f);
  float y = dl__vsel_f32(a < 1.0f, ys, yt);
  return dl__vfrom_f32(dl__vbits_f32(y) | sx);
}
/* f(x) = erf x; max error 1.43 ulp (sampled over all doubles).
 * |x| < 1: x + x P(x^2);
 * 1 <= |x|: 1 - e^{-x^2} Q(|x|) (x^2 split exactly, 26-bit high half);
 * |x| >= 6 gives +-1. */
DL_HD DL__VAPI double dl_verf_f64(double x) {
  uint64_t sx = dl__vbits_f64(x) & 0x8000000000000000u;
  double a = dl__vfrom_f64(dl__vbits_f64(x) ^ sx);
  double z = a * a;
  double p = -7.7794691844360427e-10;
  p = DL__VFMA_F64(p, z, 1.3710980812348475e-08);
  p = DL__VFMA_F64(p, z, -1.6206313864868442e-07);
  p = DL__VFMA_F64(p, z, 1.6447131586688471e-06);
  p = DL__VFMA_F64(p, z, -1.4924712303394421e-05);
  p = DL__VFMA_F64(p, z, 0.00012055293576980521);
  p = DL__VFMA_F64(p, z, -0.00085483259293174551);
  p = DL__VFMA_F64(p, z, 0.0052239776061185419);
  p = DL__VFMA_F64(p, z, -0.026866170643111476);
  p = DL__VFMA_F64(p, z, 0.11283791670944185);
  p = DL__VFMA_F64(p, z, -0.37612638903183521);
  p = DL__VFMA_F64(p, z, 0.12837916709551256); /* 2/sqrt(pi) - 1 */
  double ys = DL__VFMA_F64(a, p, a);
  double b = dl__vsel_f64(a > 6.0, 6.0, a);
  double bh = dl__vfrom_f64(dl__vbits_f64(b) & 0xFFFFFFFFF8000000u), bl = b - bh;
  double g = dl__vexp_normal_f64(-(bh * bh), -(bl * (b + bh)));
  double t = b - 3.5;
  double q = 1.186929807128692e-12;
  q = DL__VFMA_F64(q, t, 1.9663594783632575e-11);
  q = DL__VFMA_F64(q, t, 1.4904057181226394e-10);
  q = DL__VFMA_F64(q, t, 6.3815631159946187e-10);
  q = DL__VFMA_F64(q, t, 1.6018491178652973e-09);
  q = DL__VFMA_F64(q, t, 1.7523469024133688e-09);
  q = DL__VFMA_F64(q, t, -1.7521452035697022e-09);
  q = DL__VFMA_F64(q, t, -1.1063252175826168e-08);
  q = DL__VFMA_F64(q, t, -1.1631839821999032e-08);
  q = DL__VFMA_F64(q, t, -2.3862920543505484e-08);
  q = DL__VFMA_F64(q, t, 1.0110974952916103e-07);
  q = DL__VFMA_F64(q, t, -3.7724104213635201e-07);
  q = DL__VFMA_F64(q, t, 1.8495328047949646e-06);
  q = DL__VFMA_F64(q, t, -8.2430132811524472e-06);
  q = DL__VFMA_F64(q, t, 3.6172278413716091e-05);
  q = DL__VFMA_F64(q, t, -0.00015547287679798852);
  q = DL__VFMA_F64(q, t, 0.00065268653721134169);
  q = DL__VFMA_F64(q, t, -0.0026730738032495803);
  q = DL__VFMA_F64(q, t, 0.010661133346225475);
  q = DL__VFMA_F64(q, t, -0.041323577831078429);
  q = DL__VFMA_F64(q, t, 0.15529365560718844);
  double yt = DL__VFMA_F64(-g, q, 1.0);
  double y = dl__vsel_f64(a < 1.0, ys, yt);
  return dl__vfrom_f64(dl__vbits_f64(y) | sx);
}

#ifdef __cplusplus
}
#endif

DL__HEADER_END
#endif /* DL_VMATH_H */
