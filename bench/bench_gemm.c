/* bench/bench_gemm.c - dl/blas.h GEMM against cblas_sgemm/cblas_dgemm in the
 * same process.
 *
 *   gcc -std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude bench/bench_gemm.c -o /tmp/bg -lopenblas -lm
 *   OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 /tmp/bg
 *
 * Part 1: the nine GEMMs of one training step of a 784-256-128-10 MLP at
 * batch 64 (per layer with input I and output O: forward Y = X W^T,
 * backward dW = dY^T X and dX = dY W), timed through dl_gemm_f32 and through
 * cblas_sgemm called directly, call by call in alternation; the ratio cblas
 * time / dl time shows what the wrapper costs (1.000 = nothing). The built-in
 * kernel is timed on the same shapes in a phase of its own.
 * Part 2: dl_gemm_builtin_f32 / _f64 against cblas on square matrices,
 * GFLOP/s each and the built-in's fraction of OpenBLAS.
 *
 * Every figure is the median over many single calls (budgeted by time,
 * at least 31), which a preempted call or a noisy neighbour hardly moves.
 * dl_gemm and cblas alternate call by call. OpenBLAS's idle threads and an
 * OpenMP team's idle threads both spin for a while after their last job and
 * would steal the cores from the other library, so the built-in kernel is
 * timed in blocks, RUNS per contender in alternation, each after a SETTLE_MS
 * millisecond sleep. The load average is printed: other processes on a 2-core
 * machine move the absolute figures a lot, the ratios much less.
 */
#define _POSIX_C_SOURCE 199309L
#include "dl/blas.h"

#ifndef DL_USE_OPENBLAS
#error "bench_gemm.c compares with OpenBLAS: build with -DDL_USE_OPENBLAS ... -lopenblas"
#endif

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

#define RUNS 5
#define SETTLE_MS 300

typedef struct shape {
  const char *name;
  dl_trans ta, tb;
  int M, N, K;
} shape;

enum { WHO_DL, WHO_CBLAS, WHO_BUILTIN };

/* Operands for one shape: A, B sized for op(A) (M,K), op(B) (K,N), C (M,N). */
typedef struct operands {
  float *A, *B, *C;
  double *Ad, *Bd, *Cd;
  int lda, ldb, ldc;
} operands;

static void fill(float *x, double *xd, size_t n, dl_rng *r) {
  size_t i;
  for (i = 0; i < n; i++) {
    double v = 2.0 * dl_rng_uniform(r) - 1.0;
    if (x) x[i] = (float)v;
    if (xd) xd[i] = v;
  }
}

static operands make_operands(const shape *s, int f64) {
  operands o;
  dl_rng r = dl_rng_make((uint64_t)(s->M * 7 + s->N * 3 + s->K));
  size_t na = (size_t)s->M * (size_t)s->K, nb = (size_t)s->K * (size_t)s->N;
  size_t nc = (size_t)s->M * (size_t)s->N;
  o.lda = s->ta ? s->M : s->K;
  o.ldb = s->tb ? s->K : s->N;
  o.ldc = s->N;
  o.A = o.B = o.C = NULL;
  o.Ad = o.Bd = o.Cd = NULL;
  if (f64) {
    o.Ad = (double *)malloc(na * sizeof(double));
    o.Bd = (double *)malloc(nb * sizeof(double));
    o.Cd = (double *)malloc(nc * sizeof(double));
    fill(NULL, o.Ad, na, &r);
    fill(NULL, o.Bd, nb, &r);
    fill(NULL, o.Cd, nc, &r);
  } else {
    o.A = (float *)malloc(na * sizeof(float));
    o.B = (float *)malloc(nb * sizeof(float));
    o.C = (float *)malloc(nc * sizeof(float));
    fill(o.A, NULL, na, &r);
    fill(o.B, NULL, nb, &r);
    fill(o.C, NULL, nc, &r);
  }
  return o;
}

static void free_operands(operands *o) {
  free(o->A);
  free(o->B);
  free(o->C);
  free(o->Ad);
  free(o->Bd);
  free(o->Cd);
}

static void call(int who, int f64, const shape *s, operands *o) {
  const CBLAS_TRANSPOSE ta = s->ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = s->tb ? CblasTrans : CblasNoTrans;
  if (f64) {
    if (who == WHO_DL)
      dl_gemm_f64(NULL, s->ta, s->tb, s->M, s->N, s->K, 1.0, o->Ad, o->lda, o->Bd, o->ldb, 0.0, o->Cd, o->ldc);
    else if (who == WHO_CBLAS)
      cblas_dgemm(CblasRowMajor, ta, tb, s->M, s->N, s->K, 1.0, o->Ad, o->lda, o->Bd, o->ldb, 0.0, o->Cd, o->ldc);
    else
      dl_gemm_builtin_f64(NULL, s->ta, s->tb, s->M, s->N, s->K, 1.0, o->Ad, o->lda, o->Bd, o->ldb, 0.0, o->Cd, o->ldc);
  } else {
    if (who == WHO_DL)
      dl_gemm_f32(NULL, s->ta, s->tb, s->M, s->N, s->K, 1.0f, o->A, o->lda, o->B, o->ldb, 0.0f, o->C, o->ldc);
    else if (who == WHO_CBLAS)
      cblas_sgemm(CblasRowMajor, ta, tb, s->M, s->N, s->K, 1.0f, o->A, o->lda, o->B, o->ldb, 0.0f, o->C, o->ldc);
    else
      dl_gemm_builtin_f32(NULL, s->ta, s->tb, s->M, s->N, s->K, 1.0f, o->A, o->lda, o->B, o->ldb, 0.0f, o->C, o->ldc);
  }
}

/* Seconds taken by one call. */
static double time_call(int who, int f64, const shape *s, operands *o) {
  const double t0 = bench_now();
  call(who, f64, s, o);
  return bench_now() - t0;
}

/* Calls to time so that they take about budget seconds (odd, 31..20001),
 * from a few warm-up calls of who (pages, OpenBLAS threads, OpenMP team). */
static int pick_calls(int who, int f64, const shape *s, operands *o, double budget) {
  double t = 1e30;
  int i, n;
  for (i = 0; i < 5; i++) {
    const double ti = time_call(who, f64, s, o);
    if (ti < t) t = ti;
  }
  n = (int)(budget / (t > 1e-9 ? t : 1e-9));
  if (n < 31) n = 31;
  if (n > 20001) n = 20001;
  return n | 1;
}

/* Median seconds per call of dl_gemm_f32 and cblas_sgemm (both OpenBLAS
 * underneath), timed call by call in alternation: out[WHO_DL], out[WHO_CBLAS]. */
static void time_wrapper(const shape *s, double budget, double out[3]) {
  operands o = make_operands(s, 0);
  const int n = pick_calls(WHO_DL, 0, s, &o, budget / 2);
  double *t[2];
  int i;
  t[0] = (double *)malloc((size_t)n * sizeof(double));
  t[1] = (double *)malloc((size_t)n * sizeof(double));
  time_call(WHO_CBLAS, 0, s, &o);
  for (i = 0; i < n; i++) {
    const int first = i % 2;
    t[first][i] = time_call(first, 0, s, &o);
    t[!first][i] = time_call(!first, 0, s, &o);
  }
  out[WHO_DL] = bench_median(t[WHO_DL], n);
  out[WHO_CBLAS] = bench_median(t[WHO_CBLAS], n);
  free(t[0]);
  free(t[1]);
  free_operands(&o);
}

/* Median seconds per call of who, calls back to back for about budget s. */
static double time_alone(int who, int f64, const shape *s, double budget) {
  operands o = make_operands(s, f64);
  const int n = pick_calls(who, f64, s, &o, budget);
  double *t = (double *)malloc((size_t)n * sizeof(double)), m;
  int i;
  for (i = 0; i < n; i++) t[i] = time_call(who, f64, s, &o);
  m = bench_median(t, n);
  free(t);
  free_operands(&o);
  return m;
}

/* Median seconds per call of the built-in kernel and of cblas: RUNS blocks
 * of each in alternation, a settle before every block, about budget seconds
 * per block. out[WHO_BUILTIN], out[WHO_CBLAS]. */
static void time_builtin_vs_cblas(int f64, const shape *s, double budget, double out[3]) {
  operands o = make_operands(s, f64);
  int n[3], r, k, i, filled[3] = {0, 0, 0};
  double *t[3];
  n[WHO_BUILTIN] = pick_calls(WHO_BUILTIN, f64, s, &o, budget);
  bench_pause_ms(SETTLE_MS);
  n[WHO_CBLAS] = pick_calls(WHO_CBLAS, f64, s, &o, budget);
  t[WHO_BUILTIN] = (double *)malloc((size_t)(n[WHO_BUILTIN] * RUNS) * sizeof(double));
  t[WHO_CBLAS] = (double *)malloc((size_t)(n[WHO_CBLAS] * RUNS) * sizeof(double));
  for (r = 0; r < RUNS; r++)
    for (k = 0; k < 2; k++) {
      const int who = (k + r) % 2 ? WHO_BUILTIN : WHO_CBLAS;
      bench_pause_ms(SETTLE_MS);
      call(who, f64, s, &o); /* wake its threads */
      for (i = 0; i < n[who]; i++) t[who][filled[who]++] = time_call(who, f64, s, &o);
    }
  out[WHO_BUILTIN] = bench_median(t[WHO_BUILTIN], filled[WHO_BUILTIN]);
  out[WHO_CBLAS] = bench_median(t[WHO_CBLAS], filled[WHO_CBLAS]);
  free(t[WHO_BUILTIN]);
  free(t[WHO_CBLAS]);
  free_operands(&o);
}

/* Largest |builtin - cblas| / max|cblas| on s (f32): a sanity check that the
 * timed kernels compute the same thing. */
static double builtin_vs_cblas(const shape *s) {
  operands o = make_operands(s, 0);
  size_t n = (size_t)s->M * (size_t)s->N, i;
  float *ref = (float *)malloc(n * sizeof(float));
  double md = 0.0, mx = 0.0;
  call(WHO_CBLAS, 0, s, &o);
  memcpy(ref, o.C, n * sizeof(float));
  call(WHO_BUILTIN, 0, s, &o);
  for (i = 0; i < n; i++) {
    double d = fabs((double)o.C[i] - (double)ref[i]);
    if (d > md) md = d;
    if (fabs((double)ref[i]) > mx) mx = fabs((double)ref[i]);
  }
  free(ref);
  free_operands(&o);
  return md / (mx > 0 ? mx : 1);
}

/* The 1-minute load average from /proc/loadavg, or -1 where there is none. */
static double loadavg(void) {
  double l = -1.0;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = -1.0;
    fclose(f);
  }
  return l;
}

int main(void) {
  static const int layers[4] = {784, 256, 128, 10};
  static char names[9][40];
  const int batch = 64;
  shape mlp[9];
  double t[9][3], tot[3] = {0, 0, 0};
  int l, i, n = 0;
  const char *omp = getenv("OMP_NUM_THREADS"), *obl = getenv("OPENBLAS_NUM_THREADS");
  const char *wait = getenv("OMP_WAIT_POLICY");

  printf("bench_gemm: OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s OMP_WAIT_POLICY=%s\n"
         "dl threads %d, OpenBLAS threads %d (core %s), dl_gemm on %s, load average %.2f; medians of single calls\n",
         omp ? omp : "(unset)", obl ? obl : "(unset)", wait ? wait : "(unset)",
         dl_ctx_threads(NULL), openblas_get_num_threads(), openblas_get_corename(), dl_gemm_backend(), loadavg());

  for (l = 0; l < 3; l++) {
    const int nin = layers[l], nout = layers[l + 1];
    shape f = {names[n], DL_NOTRANS, DL_TRANS, batch, nout, nin};
    shape dw = {names[n + 1], DL_TRANS, DL_NOTRANS, nout, nin, batch};
    shape dx = {names[n + 2], DL_NOTRANS, DL_NOTRANS, batch, nin, nout};
    snprintf(names[n], sizeof names[n], "L%d fwd X.W^T", l + 1);
    snprintf(names[n + 1], sizeof names[n + 1], "L%d bwd dY^T.X", l + 1);
    snprintf(names[n + 2], sizeof names[n + 2], "L%d bwd dY.W", l + 1);
    mlp[n++] = f;
    mlp[n++] = dw;
    mlp[n++] = dx;
  }

  /* OpenBLAS phase: dl_gemm_f32 against cblas_sgemm */
  for (i = 0; i < n; i++) time_wrapper(&mlp[i], 0.4, t[i]);
  /* built-in phase */
  bench_pause_ms(SETTLE_MS);
  for (i = 0; i < n; i++) t[i][WHO_BUILTIN] = time_alone(WHO_BUILTIN, 0, &mlp[i], 0.3);

  printf("\nPart 1: MLP 784-256-128-10, batch %d, f32, microseconds per call\n", batch);
  printf("%-14s %4s %4s %4s %2s  %9s %9s %7s  %9s %7s  %8s\n", "gemm", "M", "N", "K", "op",
         "dl_gemm", "cblas", "ratio", "builtin", "ratio", "rel.diff");
  for (i = 0; i < n; i++) {
    for (l = 0; l < 3; l++) tot[l] += t[i][l];
    printf("%-14s %4d %4d %4d %c%c  %9.2f %9.2f %7.3f  %9.2f %7.3f  %8.1e\n", mlp[i].name,
           mlp[i].M, mlp[i].N, mlp[i].K, mlp[i].ta ? 'T' : 'N', mlp[i].tb ? 'T' : 'N',
           1e6 * t[i][WHO_DL], 1e6 * t[i][WHO_CBLAS], t[i][WHO_CBLAS] / t[i][WHO_DL],
           1e6 * t[i][WHO_BUILTIN], t[i][WHO_CBLAS] / t[i][WHO_BUILTIN],
           builtin_vs_cblas(&mlp[i]));
  }
  printf("%-14s %4s %4s %4s %2s  %9.2f %9.2f %7.3f  %9.2f %7.3f\n", "total (step)", "", "", "",
         "", 1e6 * tot[WHO_DL], 1e6 * tot[WHO_CBLAS], tot[WHO_CBLAS] / tot[WHO_DL],
         1e6 * tot[WHO_BUILTIN], tot[WHO_CBLAS] / tot[WHO_BUILTIN]);
  printf("ratio = cblas time / time (1.000 = as fast as cblas_sgemm; dl_gemm goal >= 0.95);\n"
         "rel.diff = max |builtin - cblas| / max |cblas| over C\n");

  {
    static const struct { int n, f64; } sq[3] = {{512, 0}, {1024, 0}, {512, 1}};
    printf("\nPart 2: square C = A.B (NN), GFLOP/s\n");
    printf("%-5s %5s  %9s %9s %9s\n", "dtype", "n", "builtin", "OpenBLAS", "fraction");
    for (i = 0; i < 3; i++) {
      shape s = {"square", DL_NOTRANS, DL_NOTRANS, sq[i].n, sq[i].n, sq[i].n};
      double ts[3], fl = 2.0 * sq[i].n * (double)sq[i].n * sq[i].n;
      time_builtin_vs_cblas(sq[i].f64, &s, 0.15, ts);
      printf("%-5s %5d  %9.1f %9.1f %9.3f\n", sq[i].f64 ? "f64" : "f32", sq[i].n,
             1e-9 * fl / ts[WHO_BUILTIN], 1e-9 * fl / ts[WHO_CBLAS],
             ts[WHO_CBLAS] / ts[WHO_BUILTIN]);
    }
  }
  printf("\nload average at the end %.2f\n", loadavg());
  return 0;
}
