/* bench/bench_fused.c - fused element-wise loop vs memory bandwidth.
 *
 * Over n floats (default 2^24, 64 MiB per array, well past the last-level
 * cache), medians of `reps` timed runs after warm-up runs, each run doing the
 * four loops below back to back so that they share the machine's drift:
 *   triad   a[i] = b[i] + s*c[i], a plain OpenMP loop, schedule(static),
 *           same thread count: the bandwidth reference (3 arrays x 4 bytes
 *           per element, the STREAM convention).
 *   fused   DL_ASSIGN(y, dl_tanh(dl_add(dl_mul(a, b), c))): GB/s of useful
 *           traffic, 4 arrays x 4 bytes per element.
 *   plain   the same expression as a plain OpenMP loop with glibc's scalar
 *           tanhf, same threads and schedule(static): what a user writes by hand.
 *   fma     DL_ASSIGN(y, dl_add(dl_mul(a, b), c)): the same loop machinery
 *           without the transcendental, so that a low `ratio` can be told
 *           apart as the loop's fault (fma_ratio low) or dl_tanh's.
 * other_load_cores is the CPU time other processes took during the timed
 * runs (these machines are shared): figures taken with it well above 0 are
 * not clean ones.
 * Prints one key=value line per figure and a final summary line
 *   fused_gbs=... triad_gbs=... ratio=...      (goal: ratio >= 0.8)
 *
 *   gcc -std=c11 -O3 -march=native -fopenmp -Iinclude bench/bench_fused.c -o build/bench_fused -lm
 *   OMP_NUM_THREADS=2 build/bench_fused [log2(n)=24] [reps=9] [threads=2]
 * (bench/run_fused.sh builds it at -O3 -march=native, -O2 -march=native and
 * -O2, and runs it beside PyTorch.)
 */
#define _POSIX_C_SOURCE 200809L
#include "dl/expr.h"

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

#define BENCH_WARMUP 2
#define BENCH_MAX_REPS 64

static void triad(float *a, const float *b, const float *c, float s, int64_t n, int threads) {
  int64_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#else
  (void)threads;
#endif
  for (i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

static void plain_tanhf(float *y, const float *a, const float *b, const float *c, int64_t n,
                        int threads) {
  int64_t i;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads)
#else
  (void)threads;
#endif
  for (i = 0; i < n; i++) y[i] = tanhf(a[i] * b[i] + c[i]);
}

static void fused(dl_tensor *y, const dl_tensor *a, const dl_tensor *b, const dl_tensor *c) {
  DL_ASSIGN(y, dl_tanh(dl_add(dl_mul(a, b), c)));
}

/* The same loop without the transcendental: isolates DL_ASSIGN's machinery
 * (blocks, dynamic schedule, leaf loads) from the speed of dl_tanh. */
static void fused_fma(dl_tensor *y, const dl_tensor *a, const dl_tensor *b, const dl_tensor *c) {
  DL_ASSIGN(y, dl_add(dl_mul(a, b), c));
}

int main(int argc, char **argv) {
  int lg = argc > 1 ? atoi(argv[1]) : 24;
  int reps = argc > 2 ? atoi(argv[2]) : 9;
  int threads = argc > 3 ? atoi(argv[3]) : 2;
  int64_t n, i;
  int r;
  dl_ctx ctx;
  dl_ctx_desc desc;
  dl_tensor *a, *b, *c, *y, *t;
  float *pa, *pb, *pc, *py, *pt;
  dl_rng rng = dl_rng_make(2024);
  double tt[BENCH_MAX_REPS], tf[BENCH_MAX_REPS], tp[BENCH_MAX_REPS], tm[BENCH_MAX_REPS];
  double mt, mf, mp, mm, gt, gf, gp, gm, other, maxdiff = 0, sum = 0;

  if (lg < 10 || lg > 30 || reps < 1 || reps > BENCH_MAX_REPS || threads < 1) {
    fprintf(stderr, "usage: %s [log2(n) 10..30] [reps 1..%d] [threads >= 1]\n", argv[0],
            BENCH_MAX_REPS);
    return 2;
  }
  n = (int64_t)1 << lg;
  memset(&desc, 0, sizeof desc);
  desc.threads = threads;
  dl_ctx_init(&ctx, &desc);
  a = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(n));
  b = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(n));
  c = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(n));
  y = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(n));
  t = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(n));
  if (!a || !b || !c || !y || !t) {
    fprintf(stderr, "bench_fused: %s\n", dl_ctx_message(&ctx));
    return 1;
  }
  pa = (float *)a->data;
  pb = (float *)b->data;
  pc = (float *)c->data;
  py = (float *)y->data;
  pt = (float *)t->data;
  for (i = 0; i < n; i++) {
    pa[i] = 2.0f * dl_rng_uniform_f32(&rng) - 1.0f;
    pb[i] = 2.0f * dl_rng_uniform_f32(&rng) - 1.0f;
    pc[i] = 2.0f * dl_rng_uniform_f32(&rng) - 1.0f;
  }

  for (r = -BENCH_WARMUP; r < reps; r++) {
    double t0, t1, t2, t3, t4;
    if (r == 0) bench_other_load();
    t0 = bench_now();
    triad(pt, pb, pc, 3.0f, n, threads);
    t1 = bench_now();
    fused_fma(y, a, b, c);
    t2 = bench_now();
    plain_tanhf(pt, pa, pb, pc, n, threads);
    t3 = bench_now();
    fused(y, a, b, c);
    t4 = bench_now();
    if (r >= 0) {
      tt[r] = t1 - t0;
      tm[r] = t2 - t1;
      tp[r] = t3 - t2;
      tf[r] = t4 - t3;
    }
  }
  other = bench_other_load();
  for (i = 0; i < n; i++) {  /* y from DL_ASSIGN, t from the plain tanhf loop */
    double d = fabs((double)py[i] - (double)pt[i]);
    if (d > maxdiff) maxdiff = d;
    sum += py[i];
  }
  mt = bench_median(tt, reps);
  mf = bench_median(tf, reps);
  mp = bench_median(tp, reps);
  mm = bench_median(tm, reps);
  gm = 16.0 * (double)n / mm * 1e-9;
  gt = 12.0 * (double)n / mt * 1e-9;
  gf = 16.0 * (double)n / mf * 1e-9;
  gp = 16.0 * (double)n / mp * 1e-9;
  printf("# bench_fused n=%lld threads=%d reps=%d (medians), vmath=%s\n", (long long)n, threads,
         reps,
#ifdef DL__BENCH_VMATH
         DL__BENCH_VMATH
#else
         "include/dl/vmath.h"
#endif
  );
  printf("other_load_cores=%.2f (CPU used by other processes during the timed runs)\n", other);
  printf("triad_ms=%.3f triad_gbs=%.2f\n", mt * 1e3, gt);
  printf("fused_fma_ms=%.3f fused_fma_gbs=%.2f fma_ratio=%.3f (DL_ASSIGN y=a*b+c vs triad)\n",
         mm * 1e3, gm, gm / gt);
  printf("fused_ms=%.3f fused_gbs=%.2f\n", mf * 1e3, gf);
  printf("plain_tanhf_ms=%.3f plain_tanhf_gbs=%.2f\n", mp * 1e3, gp);
  printf("check max_abs_diff_fused_vs_tanhf=%.3g checksum=%.6g\n", maxdiff, sum);
  printf("fused_gbs=%.2f triad_gbs=%.2f ratio=%.3f fused_over_plain=%.2f\n", gf, gt, gf / gt,
         gf / gp);
  dl_tensor_free(a);
  dl_tensor_free(b);
  dl_tensor_free(c);
  dl_tensor_free(y);
  dl_tensor_free(t);
  return 0;
}
