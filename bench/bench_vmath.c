/* bench/bench_vmath.c - dl/vmath.h against glibc's scalar functions.
 *
 *   gcc -std=c11 -O3 -march=native -Iinclude bench/bench_vmath.c -o /tmp/bv -lm && /tmp/bv
 *
 * Over 2^24 floats (64 MiB in, 64 MiB out), single thread, times
 * y[i] = f(x[i]) for dl_vtanh_f32 / tanhf, dl_vexp_f32 / expf and
 * dl_vsigmoid_f32 / 1 / (1 + expf(-x)); 7 repetitions each, after one
 * warm-up pass. Prints the median throughput in GB/s (bytes read + written)
 * and the ratio dl / libm, both measured in this run, and a plain copy
 * loop's GB/s as the memory-bandwidth ceiling. Add -fopt-info-vec-optimized
 * to see the dl_v* loops vectorise.
 */
#define _POSIX_C_SOURCE 199309L
#include "dl/vmath.h"

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

#define N ((size_t)1 << 24)
#define REPS 7

#if defined(__GNUC__) || defined(__clang__)
#define BENCH_NOINLINE __attribute__((noinline))
#else
#define BENCH_NOINLINE
#endif

/* One loop per function, kept out of line so each is compiled (and
 * vectorised, or not) on its own. */
#define LOOP(name, expr)                                                           \
  static BENCH_NOINLINE void name(const float *DL__RESTRICT x,                     \
                                  float *DL__RESTRICT y, size_t n) {               \
    size_t i;                                                                      \
    for (i = 0; i < n; i++) y[i] = (expr);                                         \
  }
LOOP(loop_dl_tanh, dl_vtanh_f32(x[i]))
LOOP(loop_libm_tanh, tanhf(x[i]))
LOOP(loop_dl_exp, dl_vexp_f32(x[i]))
LOOP(loop_libm_exp, expf(x[i]))
LOOP(loop_dl_sigmoid, dl_vsigmoid_f32(x[i]))
LOOP(loop_libm_sigmoid, 1.0f / (1.0f + expf(-x[i])))
LOOP(loop_copy, x[i])

typedef void (*loop_fn)(const float *, float *, size_t);

/* median GB/s of REPS runs */
static double gbps(loop_fn fn, const float *x, float *y) {
  double t[REPS];
  int r;
  fn(x, y, N); /* warm-up: page faults, caches, clocks */
  for (r = 0; r < REPS; r++) {
    double t0 = bench_now();
    fn(x, y, N);
    t[r] = bench_now() - t0;
  }
  return (double)(2 * N * sizeof(float)) / bench_median(t, REPS) / 1e9;
}

/* largest |a - b| / max(|b|, tiny), to show both loops computed the same thing */
static double max_rel_diff(const float *a, const float *b) {
  double m = 0;
  size_t i;
  for (i = 0; i < N; i++) {
    double d = fabs((double)a[i] - (double)b[i]) / fmax(fabs((double)b[i]), 1e-30);
    if (d > m) m = d;
  }
  return m;
}

int main(void) {
  float *x = (float *)malloc(N * sizeof *x);
  float *y = (float *)malloc(N * sizeof *y);
  float *z = (float *)malloc(N * sizeof *z);
  uint32_t s = 12345u;
  size_t i;
  int k;
  static const struct {
    const char *dl, *libm;
    loop_fn fdl, flibm;
    float lo, hi; /* input range */
  } cases[] = {
      {"dl_vtanh_f32", "tanhf", loop_dl_tanh, loop_libm_tanh, -5.0f, 5.0f},
      {"dl_vexp_f32", "expf", loop_dl_exp, loop_libm_exp, -80.0f, 80.0f},
      {"dl_vsigmoid_f32", "1/(1+expf(-x))", loop_dl_sigmoid, loop_libm_sigmoid, -20.0f, 20.0f},
  };
  if (!x || !y || !z) {
    fprintf(stderr, "bench_vmath: out of memory\n");
    return 1;
  }
  printf("%zu floats, %d reps, median GB/s (read + written), single thread\n", N, REPS);
  printf("%-16s %9s   %-15s %9s   %6s   %s\n", "dl", "GB/s", "libm", "GB/s", "ratio",
         "max rel diff");
  for (k = 0; k < (int)(sizeof cases / sizeof *cases); k++) {
    double g_dl, g_libm;
    for (i = 0; i < N; i++) {
      s = s * 1664525u + 1013904223u;
      x[i] = cases[k].lo + (cases[k].hi - cases[k].lo) * (float)(s >> 8) * 0x1p-24f;
    }
    g_dl = gbps(cases[k].fdl, x, y);
    g_libm = gbps(cases[k].flibm, x, z);
    printf("%-16s %9.2f   %-15s %9.2f   %5.2fx   %.2g\n", cases[k].dl, g_dl, cases[k].libm,
           g_libm, g_dl / g_libm, max_rel_diff(y, z));
  }
  printf("copy y[i] = x[i]: %.2f GB/s (the memory ceiling for these loops)\n",
         gbps(loop_copy, x, y));
  free(x);
  free(y);
  free(z);
  return 0;
}
