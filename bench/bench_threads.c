/* bench/bench_threads.c - DL_ASSIGN with 1 and 2 threads, and denormals.
 *
 * Mode `scale` (the default): DL_ASSIGN(y, dl_tanh(dl_add(dl_mul(a, b), c)))
 * at 2^22 elements (past the last-level cache), 2^16 (in cache: team start
 * and join are a large share of a call) and 1024 (below the parallel
 * threshold: must never start a team), with ctx threads = 1 and = 2. Each
 * sample runs `elems` elements' worth of calls (default 2^22: one call at
 * 2^22, 64 at 2^16, 4096 at 1024); 1- and 2-thread samples alternate so
 * that both see the same machine, each after a 30 ms pause so that the
 * team's idle thread has stopped spinning (libgomp spins up to 7.5 ms after
 * a parallel loop here) and does not take CPU from the 1-thread sample, as
 * it would not in a 1-thread program; medians of `reps`. The 1024 case runs
 * first, before any team can exist, and the process's thread count after it
 * shows whether a team was started.
 *
 * The shared-machine requirement ("with 2 threads and one core busy
 * elsewhere, throughput stays at least at the 1-thread figure") is checked
 * by bench/run_fused.sh, which runs this mode idle and beside a busy-loop
 * process, under several libgomp wait policies, and prints the ratios.
 *
 * Mode `ftz`: three loops over denormal inputs (a*b with a denormal product,
 * an Adam-like c / (sqrt(c) + eps) with c denormal, tanh of a denormal
 * product) at 2^20 elements, 2 threads, with the ctx's keep_denormals = 1
 * (denormals computed) and = 0 (the default: every worker flushes them to
 * zero); prints both times, their ratio, and how many outputs are still
 * denormal (0 under flushing means the worker threads flushed too).
 *
 *   gcc -std=c11 -O3 -march=native -fopenmp -Iinclude bench/bench_threads.c -o build/bench_threads -lm
 *   build/bench_threads scale [label=-] [reps=7] [elems=4194304]
 *   build/bench_threads ftz [reps=7]
 * Output: one `key=value ...` line per figure.
 */
#define _POSIX_C_SOURCE 200809L
#include "dl/expr.h"

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

#define BENCH_MAX_REPS 64
#define BENCH_SETTLE_MS 30

/* Threads of this process now (from /proc/self/status); -1 if unknown. */
static int bench_process_threads(void) {
  char line[256];
  int n = -1;
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  fclose(f);
  return n;
}

static void expr_tanh(dl_tensor *y, const dl_tensor *a, const dl_tensor *b, const dl_tensor *c) {
  DL_ASSIGN(y, dl_tanh(dl_add(dl_mul(a, b), c)));
}

typedef struct bench_bufs {
  float *a, *b, *c, *y;
} bench_bufs;

/* Wrap the first n elements of the buffers as tensors under ctx. */
static void bench_wrap(dl_tensor t[4], const bench_bufs *B, dl_ctx *ctx, int64_t n) {
  if (dl_tensor_wrap(&t[0], ctx, DL_F32, DL_SHAPE(n), B->a) != DL_OK ||
      dl_tensor_wrap(&t[1], ctx, DL_F32, DL_SHAPE(n), B->b) != DL_OK ||
      dl_tensor_wrap(&t[2], ctx, DL_F32, DL_SHAPE(n), B->c) != DL_OK ||
      dl_tensor_wrap(&t[3], ctx, DL_F32, DL_SHAPE(n), B->y) != DL_OK) {
    fprintf(stderr, "bench_threads: %s\n", dl_ctx_message(ctx));
    exit(1);
  }
}

/* Median seconds per sample (`calls` calls) of the tanh expression at size n,
 * for ctx1 (1 thread) and ctx2 (2 threads), samples alternating. */
static void bench_pair(const bench_bufs *B, dl_ctx *ctx1, dl_ctx *ctx2, int64_t n, int64_t calls,
                       int reps, double *s1, double *s2) {
  double v1[BENCH_MAX_REPS], v2[BENCH_MAX_REPS];
  dl_tensor t1[4], t2[4];
  int r;
  bench_wrap(t1, B, ctx1, n);
  bench_wrap(t2, B, ctx2, n);
  for (r = -1; r < reps; r++) {
    int k;
    for (k = 0; k < 2; k++) {
      dl_tensor *t = ((r + k) & 1) ? t2 : t1;  /* alternate which goes first */
      double t0, dt;
      int64_t j;
      /* Let the team's idle thread go to sleep first: libgomp spins up to
       * GOMP_SPINCOUNT (300000 PAUSEs, 7.5 ms here) after a parallel loop,
       * which would otherwise take CPU from the next 1-thread sample. */
      bench_pause_ms(BENCH_SETTLE_MS);
      t0 = bench_now();
      for (j = 0; j < calls; j++) expr_tanh(&t[3], &t[0], &t[1], &t[2]);
      dt = bench_now() - t0;
      if (r >= 0) {
        if (t == t1) v1[r] = dt;
        else v2[r] = dt;
      }
    }
  }
  *s1 = bench_median(v1, reps);
  *s2 = bench_median(v2, reps);
}

static void bench_fill(bench_bufs *B, int64_t n) {
  dl_rng rng = dl_rng_make(7);
  int64_t i;
  for (i = 0; i < n; i++) {
    B->a[i] = 2.0f * dl_rng_uniform_f32(&rng) - 1.0f;
    B->b[i] = 2.0f * dl_rng_uniform_f32(&rng) - 1.0f;
    B->c[i] = 2.0f * dl_rng_uniform_f32(&rng) - 1.0f;
    B->y[i] = 0.0f;
  }
}

static int bench_alloc(bench_bufs *B, int64_t n) {
  size_t bytes = (size_t)n * sizeof(float);
  B->a = (float *)dl_alloc(NULL, bytes);
  B->b = (float *)dl_alloc(NULL, bytes);
  B->c = (float *)dl_alloc(NULL, bytes);
  B->y = (float *)dl_alloc(NULL, bytes);
  return B->a && B->b && B->c && B->y;
}

static void bench_release(bench_bufs *B) {
  dl_free(NULL, B->a);
  dl_free(NULL, B->b);
  dl_free(NULL, B->c);
  dl_free(NULL, B->y);
}

static int mode_scale(const char *label, int reps, int64_t elems) {
  static const int64_t sizes[] = {1024, (int64_t)1 << 16, (int64_t)1 << 22};
  const int64_t nmax = (int64_t)1 << 22;
  dl_ctx ctx1, ctx2;
  dl_ctx_desc d;
  bench_bufs B;
  size_t s;
  const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");

  memset(&d, 0, sizeof d);
  d.threads = 1;
  dl_ctx_init(&ctx1, &d);
  d.threads = 2;
  dl_ctx_init(&ctx2, &d);
  if (!bench_alloc(&B, nmax)) {
    fprintf(stderr, "bench_threads: out of memory\n");
    return 1;
  }
  bench_fill(&B, nmax);
  bench_other_load();
  for (s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    const int64_t n = sizes[s], calls = elems / n > 0 ? elems / n : 1;
    double s1, s2, other;
    bench_pair(&B, &ctx1, &ctx2, n, calls, reps, &s1, &s2);
    other = bench_other_load();
    printf("threads_bench cond=%s policy=%s spin=%s size=%lld calls=%lld"
           " t1_melems=%.1f t2_melems=%.1f t2_over_t1=%.3f t1_us_call=%.2f t2_us_call=%.2f"
           " other_load_cores=%.2f",
           label, policy ? policy : "default", spin ? spin : "default", (long long)n,
           (long long)calls, (double)(n * calls) / s1 * 1e-6, (double)(n * calls) / s2 * 1e-6,
           s1 / s2, s1 / (double)calls * 1e6, s2 / (double)calls * 1e6, other);
    if (s == 0) {
      /* Only the 1024 case has run so far: any thread beyond the main one
       * would be an OpenMP team that a small loop started. */
      int th = bench_process_threads();
      printf(" process_threads=%d team_started=%s", th, th < 0 ? "unknown" : th > 1 ? "YES" : "no");
    }
    printf("\n");
    fflush(stdout);
  }
  bench_release(&B);
  return 0;
}

/* Denormal outputs in y[0, n): 0 after a flushing loop on every thread. */
static int64_t bench_count_denormal(const float *y, int64_t n) {
  int64_t i, k = 0;
  for (i = 0; i < n; i++) k += y[i] != 0.0f && fabsf(y[i]) < 1.17549435e-38f;
  return k;
}

static void ftz_expr(int e, dl_tensor *t) {
  switch (e) {
    case 0: DL_ASSIGN(&t[3], dl_mul(&t[0], &t[1])); break;
    case 1: DL_ASSIGN(&t[3], dl_div(&t[2], dl_add(dl_sqrt(&t[2]), 1e-30))); break;
    default: DL_ASSIGN(&t[3], dl_tanh(dl_mul(&t[0], &t[1]))); break;
  }
}

static int mode_ftz(int reps) {
  /* 2^20 elements (4 MiB a buffer, in the last-level cache), 8 calls a
   * sample: compute-bound enough for the penalty to show. */
  const int64_t n = (int64_t)1 << 20, calls = 8;
  static const char *const names[] = {"y=a*b", "y=c/(sqrt(c)+1e-30)", "y=tanh(a*b)"};
  dl_ctx keep, flush;
  dl_ctx_desc d;
  bench_bufs B;
  dl_tensor tk[4], tf[4];
  int64_t i;
  int e;
  dl_rng rng = dl_rng_make(11);

  memset(&d, 0, sizeof d);
  d.threads = 2;
  d.keep_denormals = 1;
  dl_ctx_init(&keep, &d);
  d.keep_denormals = 0;
  dl_ctx_init(&flush, &d);
  if (!bench_alloc(&B, n)) {
    fprintf(stderr, "bench_threads: out of memory\n");
    return 1;
  }
  for (i = 0; i < n; i++) {  /* a*b in [1e-40, 4e-40] and c in [1e-39, 2e-39]: denormals */
    B.a[i] = 1e-20f * (1.0f + dl_rng_uniform_f32(&rng));
    B.b[i] = 1e-20f * (1.0f + dl_rng_uniform_f32(&rng));
    B.c[i] = 1e-39f * (1.0f + dl_rng_uniform_f32(&rng));
    B.y[i] = 0.0f;
  }
  bench_wrap(tk, &B, &keep, n);
  bench_wrap(tf, &B, &flush, n);
  for (e = 0; e < 3; e++) {
    double vk[BENCH_MAX_REPS], vf[BENCH_MAX_REPS], mk, mf, other;
    int64_t dk, df;
    int r, j;
    bench_other_load();
    for (r = -1; r < reps; r++) {
      double t0 = bench_now(), t1, t2;
      for (j = 0; j < calls; j++) ftz_expr(e, tk);
      t1 = bench_now();
      for (j = 0; j < calls; j++) ftz_expr(e, tf);
      t2 = bench_now();
      if (r >= 0) {
        vk[r] = t1 - t0;
        vf[r] = t2 - t1;
      }
    }
    other = bench_other_load();
    ftz_expr(e, tk);
    dk = bench_count_denormal(B.y, n);
    ftz_expr(e, tf);
    df = bench_count_denormal(B.y, n);
    mk = bench_median(vk, reps) / (double)calls;
    mf = bench_median(vf, reps) / (double)calls;
    printf("ftz_bench expr=%s size=%lld threads=2 keep_denormals_us=%.1f flush_us=%.1f"
           " keep_over_flush=%.2f denormal_outputs_keep=%lld denormal_outputs_flush=%lld"
           " other_load_cores=%.2f\n",
           names[e], (long long)n, mk * 1e6, mf * 1e6, mk / mf, (long long)dk, (long long)df,
           other);
  }
  bench_release(&B);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "scale";
  if (!strcmp(mode, "scale")) {
    const char *label = argc > 2 ? argv[2] : "-";
    int reps = argc > 3 ? atoi(argv[3]) : 7;
    long long elems = argc > 4 ? atoll(argv[4]) : (long long)1 << 22;
    if (reps < 1 || reps > BENCH_MAX_REPS || elems < 1) {
      fprintf(stderr, "usage: %s scale [label] [reps 1..%d] [elements per sample]\n", argv[0],
              BENCH_MAX_REPS);
      return 2;
    }
    return mode_scale(label, reps, (int64_t)elems);
  }
  if (!strcmp(mode, "ftz")) {
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    if (reps < 1 || reps > BENCH_MAX_REPS) {
      fprintf(stderr, "usage: %s ftz [reps 1..%d]\n", argv[0], BENCH_MAX_REPS);
      return 2;
    }
    return mode_ftz(reps);
  }
  fprintf(stderr, "usage: %s scale|ftz ...\n", argv[0]);
  return 2;
}
