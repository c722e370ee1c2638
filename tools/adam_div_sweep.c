/* tools/adam_div_sweep.c - checks optim.h's division of Adam's square root
 * by the bias correction bc = sqrt(1 - beta2^step) without the divider
 * (DL__ADAM_DIVBC: q0 = s y, then twice q += (s - bc q) y, y = 1/bc
 * correctly rounded) against the division itself, on AVX-512:
 *   - f32: for every divisor a run of Adam can meet with beta2 in {0.5, 0.9,
 *     0.95, 0.98, 0.99, 0.995, 0.999, 0.9999} up to step 20000 (until bc
 *     rounds to 1), and R random divisors in [2^-60, 1), every one of the
 *     2^23 mantissas of the dividend (the quotient's rounding does not
 *     depend on the dividend's exponent while nothing over- or underflows),
 *     and for the first steps also dividends near 2^63 and 2^-75, the
 *     ends of the range sqrt can give;
 *   - f64: 2e7 x 8 random pairs (dividends 2^-500 .. 2^500, divisors
 *     2^-400 .. 1).
 * Prints the number of quotients that differ (0 expected) and exits 1 if any.
 *
 *   gcc -O2 -march=native tools/adam_div_sweep.c -o /tmp/adam_div_sweep -lm
 *   /tmp/adam_div_sweep [R=2000]      (about 2 minutes at R=200 here)
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef __AVX512F__
#error "adam_div_sweep.c needs AVX-512 (-march=native on such a machine)"
#endif

static __m512 div_ps(__m512 s, __m512 b, __m512 y) {
  __m512 q = _mm512_mul_ps(s, y);
  q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, b, s), y, q);
  return _mm512_fmadd_ps(_mm512_fnmadd_ps(q, b, s), y, q);
}
static __m512d div_pd(__m512d s, __m512d b, __m512d y) {
  __m512d q = _mm512_mul_pd(s, y);
  q = _mm512_fmadd_pd(_mm512_fnmadd_pd(q, b, s), y, q);
  return _mm512_fmadd_pd(_mm512_fnmadd_pd(q, b, s), y, q);
}

static uint64_t wrong;
/* every mantissa of the dividend at exponent expo, divisor b */
static void sweep(float b, int expo) {
  const __m512 vb = _mm512_set1_ps(b), vy = _mm512_set1_ps(1.0f / b);
  __m512i bits = _mm512_add_epi32(_mm512_set1_epi32((127 + expo) << 23),
                                  _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  uint32_t m;
  for (m = 0; m < (1u << 23); m += 16) {
    const __m512 a = _mm512_castsi512_ps(bits);
    const __mmask16 ne = _mm512_cmp_ps_mask(div_ps(a, vb, vy), _mm512_div_ps(a, vb), _CMP_NEQ_UQ);
    if (ne) {
      if (wrong < 10) printf("f32: divisor %a, dividend exponent %d, mantissas from %u: lanes %04x differ\n", b, expo, m, ne);
      wrong += (uint64_t)__builtin_popcount(ne);
    }
    bits = _mm512_add_epi32(bits, _mm512_set1_epi32(16));
  }
}
static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

int main(int argc, char **argv) {
  static const double beta2[] = {0.5, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999};
  const int R = argc > 1 ? atoi(argv[1]) : 2000;
  uint64_t s = 88172645463325252ull, w32, n64 = 0;
  long divisors = 0, i;
  unsigned k;
  int step, r, l;
  for (k = 0; k < sizeof beta2 / sizeof beta2[0]; k++) {
    float last = -1;
    for (step = 1; step <= 20000; step++) {
      const float b = (float)sqrt(1 - pow(beta2[k], (double)step));
      if (b == last) continue;
      last = b;
      sweep(b, 0);
      divisors++;
      if (step <= 3) {
        sweep(b, 63);
        sweep(b, -75);
      }
      if (b == 1.0f) break;
    }
  }
  for (r = 0; r < R; r++) {
    const uint32_t u = ((uint32_t)xorshift(&s) & 0x7fffffu) | (uint32_t)(126 - (int)(xorshift(&s) % 60)) << 23;
    float b;
    memcpy(&b, &u, sizeof b);
    sweep(b, 0);
    divisors++;
  }
  w32 = wrong;
  printf("f32: %ld divisors x 2^23 dividends: %llu quotients differ from the division\n", divisors,
         (unsigned long long)w32);
  for (i = 0; i < 20000000; i++) {
    double a[8], b;
    uint64_t u = (xorshift(&s) & 0xfffffffffffffull) | (uint64_t)(1022 - xorshift(&s) % 400) << 52;
    __m512d vb, vy;
    memcpy(&b, &u, sizeof b);
    for (l = 0; l < 8; l++) {
      u = (xorshift(&s) & 0xfffffffffffffull) | (uint64_t)(1023 - 500 + xorshift(&s) % 1000) << 52;
      memcpy(&a[l], &u, sizeof a[l]);
    }
    vb = _mm512_set1_pd(b);
    vy = _mm512_set1_pd(1.0 / b);
    wrong += (uint64_t)__builtin_popcount(
        _mm512_cmp_pd_mask(div_pd(_mm512_loadu_pd(a), vb, vy), _mm512_div_pd(_mm512_loadu_pd(a), vb), _CMP_NEQ_UQ));
    n64 += 8;
  }
  printf("f64: %llu random pairs: %llu quotients differ from the division\n", (unsigned long long)n64,
         (unsigned long long)(wrong - w32));
  return wrong != 0;
}
