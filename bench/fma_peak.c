/* bench/fma_peak.c - the machine's single-precision FMA peak, measured.
 *
 * NACC independent chains of vector fused multiply-adds (a = a * m + c),
 * each a vector register wide (16 floats with AVX-512, 8 with AVX, 4
 * otherwise), enough chains to cover the FMA latency on two ports; no
 * memory traffic. Prints
 *   fma_peak threads=1 gflops=X
 *   fma_peak threads=N gflops=Y        (N: omp_get_max_threads(), each thread its own chains)
 * the best of REPS runs of about 0.2 s each. The benchmarks divide their
 * throughput (FLOP/s) by these to print fractions of the peak.
 *
 *   cc -O3 -march=native -ffp-contract=fast -fopenmp bench/fma_peak.c -o fma_peak -lm
 * (GNU C vector types: gcc or clang; -ffp-contract=fast makes a * m + c one
 * FMA instruction.)
 */
#include <stdio.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__)
#define W 16
#elif defined(__AVX__)
#define W 8
#else
#define W 4
#endif
#define NACC 10
#define REPS 5

static double now(void) {
#ifdef _OPENMP
  return omp_get_wtime();
#else
  return (double)clock() / CLOCKS_PER_SEC;
#endif
}

typedef float vec __attribute__((vector_size(W * sizeof(float))));

/* iters rounds of NACC * W FMAs; returns a value the compiler cannot drop */
static float chains(long iters, float seed) {
  vec a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, m, c;
  long it;
  int j;
  float s = 0;
  for (j = 0; j < W; j++) {
    m[j] = 0.999999f;
    c[j] = 1e-7f;
    a0[j] = seed + (float)j * 1e-3f;
  }
  a1 = a0 + 0.01f; a2 = a0 + 0.02f; a3 = a0 + 0.03f; a4 = a0 + 0.04f;
  a5 = a0 + 0.05f; a6 = a0 + 0.06f; a7 = a0 + 0.07f; a8 = a0 + 0.08f; a9 = a0 + 0.09f;
  for (it = 0; it < iters; it++) { /* NACC = 10 independent chains */
    a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c; a4 = a4 * m + c;
    a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c; a8 = a8 * m + c; a9 = a9 * m + c;
  }
  a0 = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9;
  for (j = 0; j < W; j++) s += a0[j];
  return s;
}
static volatile float dl_sink; /* the calibration's result, kept */

static double gflops(int threads, long iters) {
  double best = 0;
  int r;
  for (r = 0; r < REPS; r++) {
    double t0, t;
    float sink = 0;
    t0 = now();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += chains(iters, (float)omp_get_thread_num());
#else
    (void)threads;
    sink = chains(iters, 1.0f);
#endif
    t = now() - t0;
    if (sink == 12345.0f) printf("#");
    if (2.0 * NACC * W * (double)iters * threads / t / 1e9 > best) best = 2.0 * NACC * W * (double)iters * threads / t / 1e9;
  }
  return best;
}

int main(void) {
  int n = 1;
  long iters = 1000000;
  double t0;
#ifdef _OPENMP
  n = omp_get_max_threads();
#endif
  /* calibrate: about 0.2 s per run on one thread */
  t0 = now();
  dl_sink = chains(iters, 0.5f);
  t0 = now() - t0;
  if (t0 > 0) iters = (long)(iters * (0.2 / t0));
  if (iters < 1000) iters = 1000;
  printf("fma_peak threads=1 gflops=%.1f (vector width %d floats, %d chains)\n", gflops(1, iters), W, NACC);
  if (n > 1) printf("fma_peak threads=%d gflops=%.1f\n", n, gflops(n, iters));
  return 0;
}
