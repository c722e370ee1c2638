/* dl-test-cxx */
/* tests/test_blas.c - dl/blas.h: every GEMM entry point against a naive
 * triple loop in double, over all transpose combinations, odd and padded
 * shapes, alpha/beta cases, K == 0, batches, the OpenMP path, allocator
 * hooks, and the argument checks.
 *
 *   gcc -std=c11 -O2 -Wall -Wextra -Wpedantic -Werror -Iinclude -Itests tests/test_blas.c -o /tmp/tb -lm
 *   (also with -fopenmp, with -DDL_USE_OPENBLAS ... -lopenblas, with clang,
 *   with -DDL_GEMM_NO_VECTOR_EXT, and under -fsanitize=address,undefined)
 */
#if defined(__linux__) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* fork, execve, pipe, opendir: test_openblas_env's second process */
#endif
#include "dl/blas.h"
#include "harness.h"
#if defined(DL_USE_OPENBLAS) && defined(__linux__)
#include <dirent.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

static dl_ctx panic_ctx;

/* ---- one GEMM case against the reference ---------------------------------- */

enum { ENTRY_GEMM, ENTRY_BUILTIN, ENTRY_BATCHED };

typedef struct gemm_case {
  dl_trans ta, tb;
  int64_t M, N, K;
  int64_t pada, padb, padc; /* extra columns beyond the row length */
  double alpha, beta;
  int nan_c;                /* fill C with NaN (for beta == 0) */
  int64_t batch;            /* batched entry only */
  int64_t gapa, gapb, gapc; /* extra elements between batch items */
  int share_a;              /* strideA = 0 */
  dl_ctx *ctx;
} gemm_case;

static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* Uniform in [-1, 1), rounded to float when f32 so the reference sees the
 * exact inputs. */
static double draw(dl_rng *r, int f64) {
  double v = 2.0 * dl_rng_uniform(r) - 1.0;
  return f64 ? v : (double)(float)v;
}

/* Runs the case through entry (f32 or f64) and checks every element of C,
 * including that padding columns of C are untouched. Returns the number of
 * mismatches (also counted by CHECK). */
static int run_case(const char *label, int f64, int entry, const gemm_case *c) {
  const int64_t batch = entry == ENTRY_BATCHED ? c->batch : 1;
  const int64_t ra = c->ta ? c->K : c->M, ca = c->ta ? c->M : c->K;
  const int64_t rb = c->tb ? c->N : c->K, cb = c->tb ? c->K : c->N;
  const int64_t lda = imax(1, ca) + c->pada, ldb = imax(1, cb) + c->padb;
  const int64_t ldc = imax(1, c->N) + c->padc;
  const int64_t sa = c->share_a ? 0 : ra * lda + c->gapa, sb = rb * ldb + c->gapb;
  const int64_t sc = c->M * ldc + c->gapc;
  const int64_t na = (batch - 1) * sa + ra * lda, nb = (batch - 1) * sb + rb * ldb;
  const int64_t nc = (batch - 1) * sc + c->M * ldc;
  const double sentinel = 777.0;
  const double tol = (f64 ? 1e-12 : 1e-5) * (1.0 + (double)c->K / 64.0);
  double *Ad = (double *)malloc((size_t)imax(na, 1) * sizeof(double));
  double *Bd = (double *)malloc((size_t)imax(nb, 1) * sizeof(double));
  double *Cd = (double *)malloc((size_t)imax(nc, 1) * sizeof(double));
  void *A = malloc((size_t)imax(na, 1) * 8), *B = malloc((size_t)imax(nb, 1) * 8);
  void *C = malloc((size_t)imax(nc, 1) * 8);
  dl_rng rng = dl_rng_make(1000003u * (uint64_t)(c->M * 131 + c->N * 17 + c->K));
  int64_t i, j, p, b, bad = 0;

  /* padding of A and B is NaN: reading it would poison the result */
  for (i = 0; i < na; i++) Ad[i] = NAN;
  for (i = 0; i < nb; i++) Bd[i] = NAN;
  for (b = 0; b < (c->share_a ? 1 : batch); b++)
    for (i = 0; i < ra; i++)
      for (j = 0; j < ca; j++) Ad[b * sa + i * lda + j] = draw(&rng, f64);
  for (b = 0; b < batch; b++)
    for (i = 0; i < rb; i++)
      for (j = 0; j < cb; j++) Bd[b * sb + i * ldb + j] = draw(&rng, f64);
  for (i = 0; i < nc; i++) Cd[i] = sentinel;
  for (b = 0; b < batch; b++)
    for (i = 0; i < c->M; i++)
      for (j = 0; j < c->N; j++) Cd[b * sc + i * ldc + j] = c->nan_c ? NAN : draw(&rng, f64);
  for (i = 0; i < na; i++) {
    if (f64) ((double *)A)[i] = Ad[i];
    else ((float *)A)[i] = (float)Ad[i];
  }
  for (i = 0; i < nb; i++) {
    if (f64) ((double *)B)[i] = Bd[i];
    else ((float *)B)[i] = (float)Bd[i];
  }
  for (i = 0; i < nc; i++) {
    if (f64) ((double *)C)[i] = Cd[i];
    else ((float *)C)[i] = (float)Cd[i];
  }

  if (f64) {
    const double *a = (const double *)A, *bb = (const double *)B;
    double *cc = (double *)C;
    if (entry == ENTRY_GEMM)
      dl_gemm_f64(c->ctx, c->ta, c->tb, c->M, c->N, c->K, c->alpha, a, lda, bb, ldb, c->beta, cc, ldc);
    else if (entry == ENTRY_BUILTIN)
      dl_gemm_builtin_f64(c->ctx, c->ta, c->tb, c->M, c->N, c->K, c->alpha, a, lda, bb, ldb,
                          c->beta, cc, ldc);
    else
      dl_gemm_batched_f64(c->ctx, c->ta, c->tb, c->M, c->N, c->K, c->alpha, a, lda, sa, bb, ldb,
                          sb, c->beta, cc, ldc, sc, batch);
  } else {
    const float *a = (const float *)A, *bb = (const float *)B;
    float *cc = (float *)C;
    const float alpha = (float)c->alpha, beta = (float)c->beta;
    if (entry == ENTRY_GEMM)
      dl_gemm_f32(c->ctx, c->ta, c->tb, c->M, c->N, c->K, alpha, a, lda, bb, ldb, beta, cc, ldc);
    else if (entry == ENTRY_BUILTIN)
      dl_gemm_builtin_f32(c->ctx, c->ta, c->tb, c->M, c->N, c->K, alpha, a, lda, bb, ldb, beta,
                          cc, ldc);
    else
      dl_gemm_batched_f32(c->ctx, c->ta, c->tb, c->M, c->N, c->K, alpha, a, lda, sa, bb, ldb, sb,
                          beta, cc, ldc, sc, batch);
  }

  for (b = 0; b < batch; b++)
    for (i = 0; i < c->M; i++)
      for (j = 0; j < ldc; j++) {
        const int64_t at = b * sc + i * ldc + j;
        const double got = f64 ? ((double *)C)[at] : (double)((float *)C)[at];
        double want, scale;
        if (j >= c->N) { /* padding column: must be untouched */
          if (got != sentinel) bad++;
          continue;
        }
        {
          double s = 0.0, sabs = 0.0;
          for (p = 0; p < c->K; p++) {
            const double x = c->ta ? Ad[b * sa + p * lda + i] : Ad[b * sa + i * lda + p];
            const double y = c->tb ? Bd[b * sb + j * ldb + p] : Bd[b * sb + p * ldb + j];
            s += x * y;
            sabs += fabs(x * y);
          }
          want = c->alpha * s;
          scale = fabs(c->alpha) * sabs;
          if (c->beta != 0.0) {
            want += c->beta * Cd[at];
            scale += fabs(c->beta * Cd[at]);
          }
        }
        if (!(fabs(got - want) <= tol * (scale > 1e-300 ? scale : 1e-300) + 1e-300)) {
          if (bad < 3)
            fprintf(stderr, "  %s %s [b=%lld i=%lld j=%lld] got %.17g want %.17g\n", label,
                    f64 ? "f64" : "f32", (long long)b, (long long)i, (long long)j, got, want);
          bad++;
        }
      }
  /* gaps between batch items of C are untouched too */
  for (b = 0; b + 1 < batch; b++)
    for (i = b * sc + c->M * ldc; i < (b + 1) * sc; i++) {
      const double got = f64 ? ((double *)C)[i] : (double)((float *)C)[i];
      if (got != sentinel) bad++;
    }
  CHECK_MSG(bad == 0, "%s %s ta=%d tb=%d M=%lld N=%lld K=%lld alpha=%g beta=%g: %lld bad", label,
            f64 ? "f64" : "f32", (int)c->ta, (int)c->tb, (long long)c->M, (long long)c->N,
            (long long)c->K, c->alpha, c->beta, (long long)bad);
  free(Ad);
  free(Bd);
  free(Cd);
  free(A);
  free(B);
  free(C);
  return (int)bad;
}

/* ---- shapes, transposes, padding, alpha/beta ------------------------------- */

static const int64_t shapes[][3] = {
    {1, 1, 1},   {3, 7, 17},  {7, 3, 1},   {17, 33, 65}, {33, 17, 129}, {65, 129, 7},
    {129, 65, 33}, {1, 129, 3}, {5, 9, 600}, {3, 600, 5}, {200, 7, 3},  {13, 1, 300},
    {2, 2100, 3}, {3, 2, 1100},
    /* A B^T by dot products where the build has them (blas.h's gemm-dot):
     * row blocks of 8, 4, 1, columns in threes and ones, K's tail */
    {64, 10, 128}, {21, 50, 784}, {70, 5, 47}, {9, 31, 390},
    /* a last panel of at most one vector of columns (f32: 196 = 6 x 32 + 4,
     * 13; f64: 196 = 24 x 8 + 4) under panels of 12, 8 and 4 rows */
    {64, 196, 40}, {20, 13, 50}, {8, 196, 9}};
static const double alphabeta[][3] = {/* alpha, beta, NaN in C */
                                      {1.0, 0.0, 1}, {0.5, -1.5, 0}, {-2.0, 1.0, 0}};

static void sweep(int f64, int entry, const char *label) {
  size_t s, ab;
  int t;
  for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (t = 0; t < 4; t++)
      for (ab = 0; ab < sizeof alphabeta / sizeof *alphabeta; ab++) {
        gemm_case c;
        memset(&c, 0, sizeof c);
        c.ta = (dl_trans)(t & 1);
        c.tb = (dl_trans)(t >> 1);
        c.M = shapes[s][0];
        c.N = shapes[s][1];
        c.K = shapes[s][2];
        c.pada = (int64_t)((s + ab) % 3) * 3; /* 0, 3, 6 extra columns */
        c.padb = (int64_t)((s + t) % 3) * 2;
        c.padc = (int64_t)((s + t + ab) % 2) * 5;
        c.alpha = alphabeta[ab][0];
        c.beta = alphabeta[ab][1];
        c.nan_c = (int)alphabeta[ab][2];
        c.batch = 1;
        run_case(label, f64, entry, &c);
      }
}

static void test_gemm_f32(void) { sweep(0, ENTRY_GEMM, "dl_gemm"); }
static void test_gemm_f64(void) { sweep(1, ENTRY_GEMM, "dl_gemm"); }
static void test_builtin_f32(void) { sweep(0, ENTRY_BUILTIN, "dl_gemm_builtin"); }
static void test_builtin_f64(void) { sweep(1, ENTRY_BUILTIN, "dl_gemm_builtin"); }

/* ---- K == 0, alpha == 0, empty C ------------------------------------------ */

/* K == 0: C = beta * C with A and B NULL (they have no elements). */
static void test_k_zero(void) {
  int entry, f64;
  for (f64 = 0; f64 < 2; f64++)
    for (entry = ENTRY_GEMM; entry <= ENTRY_BATCHED; entry++) {
      double cd[2][6];
      float cf[2][6];
      int b, i;
      for (b = 0; b < 2; b++)
        for (i = 0; i < 6; i++) {
          cd[b][i] = b == 0 ? NAN : (double)(i + 1);
          cf[b][i] = (float)cd[b][i];
        }
      /* item 0: beta = 0 over NaN; item 1 (separate call): beta = 2 */
      for (b = 0; b < 2; b++) {
        const double beta = b == 0 ? 0.0 : 2.0;
        if (f64) {
          if (entry == ENTRY_GEMM) dl_gemm_f64(NULL, DL_NOTRANS, DL_NOTRANS, 2, 3, 0, 1.0, NULL, 1, NULL, 3, beta, cd[b], 3);
          else if (entry == ENTRY_BUILTIN) dl_gemm_builtin_f64(NULL, DL_TRANS, DL_TRANS, 2, 3, 0, 1.0, NULL, 2, NULL, 1, beta, cd[b], 3);
          else dl_gemm_batched_f64(NULL, DL_NOTRANS, DL_TRANS, 2, 3, 0, 1.0, NULL, 1, 0, NULL, 1, 0, beta, cd[b], 3, 6, 1);
        } else {
          if (entry == ENTRY_GEMM) dl_gemm_f32(NULL, DL_NOTRANS, DL_NOTRANS, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, (float)beta, cf[b], 3);
          else if (entry == ENTRY_BUILTIN) dl_gemm_builtin_f32(NULL, DL_TRANS, DL_TRANS, 2, 3, 0, 1.0f, NULL, 2, NULL, 1, (float)beta, cf[b], 3);
          else dl_gemm_batched_f32(NULL, DL_NOTRANS, DL_TRANS, 2, 3, 0, 1.0f, NULL, 1, 0, NULL, 1, 0, (float)beta, cf[b], 3, 6, 1);
        }
      }
      for (i = 0; i < 6; i++) {
        CHECK(f64 ? cd[0][i] == 0.0 : cf[0][i] == 0.0f);
        CHECK(f64 ? cd[1][i] == 2.0 * (i + 1) : cf[1][i] == 2.0f * (float)(i + 1));
      }
    }
  /* K == 0 through the sweep's machinery too (padded, non-NULL pointers) */
  {
    gemm_case c;
    int t;
    memset(&c, 0, sizeof c);
    c.M = 5;
    c.N = 4;
    c.K = 0;
    c.padc = 2;
    c.alpha = 1.5;
    c.beta = -0.5;
    c.batch = 2;
    c.gapc = 3;
    for (t = 0; t < 4; t++) {
      c.ta = (dl_trans)(t & 1);
      c.tb = (dl_trans)(t >> 1);
      run_case("K=0", 0, ENTRY_GEMM, &c);
      run_case("K=0", 1, ENTRY_BUILTIN, &c);
      run_case("K=0", 0, ENTRY_BATCHED, &c);
    }
  }
}

/* alpha == 0: A and B are not read (NaN there does not matter). */
static void test_alpha_zero(void) {
  float A[12], B[12], C[6];
  double Ad[12], Bd[12], Cd[6];
  int i;
  for (i = 0; i < 12; i++) A[i] = B[i] = NAN, Ad[i] = Bd[i] = NAN;
  for (i = 0; i < 6; i++) C[i] = (float)i, Cd[i] = i;
  dl_gemm_f32(NULL, DL_NOTRANS, DL_NOTRANS, 2, 3, 4, 0.0f, A, 4, B, 3, 3.0f, C, 3);
  dl_gemm_builtin_f64(NULL, DL_TRANS, DL_NOTRANS, 2, 3, 4, 0.0, Ad, 2, Bd, 3, 3.0, Cd, 3);
  for (i = 0; i < 6; i++) {
    CHECK(C[i] == 3.0f * (float)i);
    CHECK(Cd[i] == 3.0 * i);
  }
  dl_gemm_batched_f32(NULL, DL_NOTRANS, DL_TRANS, 1, 3, 4, 0.0f, A, 4, 4, B, 4, 0, 0.0f, C, 3, 3, 2);
  for (i = 0; i < 6; i++) CHECK(C[i] == 0.0f);
}

/* M == 0 or N == 0 does nothing; matrices with no elements may be NULL. */
static void test_empty(void) {
  float C[4] = {1, 2, 3, 4};
  double Cd[4] = {1, 2, 3, 4};
  int i;
  dl_gemm_f32(NULL, DL_NOTRANS, DL_NOTRANS, 0, 1, 4, 1.0f, NULL, 4, C, 1, 0.0f, NULL, 1);
  dl_gemm_f32(NULL, DL_NOTRANS, DL_NOTRANS, 1, 0, 3, 1.0f, C, 3, NULL, 1, 0.0f, C, 1);
  dl_gemm_builtin_f64(NULL, DL_TRANS, DL_NOTRANS, 1, 0, 3, 1.0, Cd, 1, NULL, 1, 0.0, Cd, 1);
  dl_gemm_batched_f64(NULL, DL_NOTRANS, DL_NOTRANS, 2, 2, 2, 1.0, Cd, 2, 4, Cd, 2, 4, 0.0, Cd, 2, 4, 0);
  dl_gemm_batched_f32(NULL, DL_NOTRANS, DL_NOTRANS, 2, 2, 2, 1.0f, NULL, 2, 4, NULL, 2, 4, 0.0f, NULL, 2, 4, 0);
  for (i = 0; i < 4; i++) {
    CHECK(C[i] == (float)(i + 1));
    CHECK(Cd[i] == (double)(i + 1));
  }
}

/* ---- batched --------------------------------------------------------------- */

static void test_batched(void) {
  static const int64_t bshapes[][4] = {/* M, N, K, batch */
                                       {3, 7, 17, 3}, {17, 5, 33, 4}, {1, 1, 1, 5}, {33, 65, 9, 2}};
  size_t s;
  int t, f64;
  for (f64 = 0; f64 < 2; f64++)
    for (s = 0; s < sizeof bshapes / sizeof *bshapes; s++)
      for (t = 0; t < 4; t++) {
        gemm_case c;
        memset(&c, 0, sizeof c);
        c.ta = (dl_trans)(t & 1);
        c.tb = (dl_trans)(t >> 1);
        c.M = bshapes[s][0];
        c.N = bshapes[s][1];
        c.K = bshapes[s][2];
        c.batch = bshapes[s][3];
        c.pada = 2;
        c.padb = (int64_t)t;
        c.padc = 3;
        c.gapa = 5;
        c.gapb = 1;
        c.gapc = 7;
        c.alpha = 0.75;
        c.beta = t == 1 ? 0.0 : -0.5;
        c.nan_c = t == 1;
        run_case("batched", f64, ENTRY_BATCHED, &c);
        c.share_a = 1; /* strideA = 0: one A for every item */
        run_case("batched shared A", f64, ENTRY_BATCHED, &c);
      }
}

/* Batches big enough for the OpenMP path, with 2 threads: four items (whole
 * items per thread) and two items (each split into tiles, one item after the
 * other), A shared across the batch in the second. */
static void test_batched_large(void) {
  dl_ctx two;
  dl_ctx_desc d;
  gemm_case c;
  int t;
  memset(&d, 0, sizeof d);
  d.threads = 2;
  dl_ctx_init(&two, &d);
  memset(&c, 0, sizeof c);
  c.M = 100;
  c.N = 120;
  c.K = 90;
  c.padc = 1;
  c.gapa = 3;
  c.gapc = 2;
  c.alpha = 1.0;
  c.beta = 0.5;
  c.ctx = &two;
  for (t = 0; t < 4; t++) {
    c.ta = (dl_trans)(t & 1);
    c.tb = (dl_trans)(t >> 1);
    c.batch = 4;
    c.share_a = 0;
    run_case("batched large", 0, ENTRY_BATCHED, &c);
    run_case("batched large", 1, ENTRY_BATCHED, &c);
    c.batch = 2;
    c.share_a = 1;
    run_case("batched large, 2 items", 0, ENTRY_BATCHED, &c);
    run_case("batched large, 2 items", 1, ENTRY_BATCHED, &c);
  }
}

/* ---- large products (OpenMP path when built with -fopenmp) ------------------ */

static void test_large(void) {
  dl_ctx two, three;
  dl_ctx_desc d;
  dl_ctx *ctxs[3];
  int t, k;
  memset(&d, 0, sizeof d);
  d.threads = 2;
  dl_ctx_init(&two, &d);
  d.threads = 3;
  dl_ctx_init(&three, &d);
  ctxs[0] = NULL;
  ctxs[1] = &two;
  ctxs[2] = &three;
  for (t = 0; t < 4; t++)
    for (k = 0; k < 3; k++) {
      gemm_case c;
      memset(&c, 0, sizeof c);
      c.ta = (dl_trans)(t & 1);
      c.tb = (dl_trans)(t >> 1);
      c.M = 300;
      c.N = 200;
      c.K = 250;
      c.pada = 1;
      c.padb = 2;
      c.padc = 3;
      c.alpha = 1.25;
      c.beta = k == 1 ? 0.0 : 0.5;
      c.nan_c = k == 1;
      c.batch = 1;
      c.ctx = ctxs[k];
      run_case("large", 0, ENTRY_BUILTIN, &c);
      run_case("large", 1, ENTRY_BUILTIN, &c);
      run_case("large", 0, ENTRY_GEMM, &c);
      run_case("large", 1, ENTRY_GEMM, &c);
    }
  /* K above the KC block on the OpenMP path: later K blocks accumulate */
  for (t = 0; t < 4; t += 3) {
    gemm_case c;
    memset(&c, 0, sizeof c);
    c.ta = (dl_trans)(t & 1);
    c.tb = (dl_trans)(t >> 1);
    c.M = 130;
    c.N = 150;
    c.K = 700;
    c.padc = 2;
    c.alpha = -1.0;
    c.beta = 2.0;
    c.batch = 1;
    c.ctx = &two;
    run_case("large K", 0, ENTRY_BUILTIN, &c);
    run_case("large K", 1, ENTRY_BUILTIN, &c);
  }
  /* op(A) and op(B) too big to pack in one go (over 32 MiB of f64): the team
   * packs and computes K in slabs */
  {
    gemm_case c;
    memset(&c, 0, sizeof c);
    c.ta = DL_TRANS;
    c.M = 2000;
    c.N = 9;
    c.K = 2100;
    c.alpha = 0.5;
    c.beta = -1.0;
    c.batch = 1;
    c.ctx = &two;
    run_case("slabs", 1, ENTRY_BUILTIN, &c);
  }
}

/* Every C element is summed in the same order whatever the task split, so
 * the built-in kernel gives bit-identical results for any thread count. */
static void test_thread_count_invariance(void) {
  const int64_t M = 301, N = 203, K = 611;
  float *A = (float *)malloc((size_t)(M * K) * sizeof(float));
  float *B = (float *)malloc((size_t)(K * N) * sizeof(float));
  float *C1 = (float *)malloc((size_t)(M * N) * sizeof(float));
  float *C2 = (float *)malloc((size_t)(M * N) * sizeof(float));
  dl_ctx one, two;
  dl_ctx_desc d;
  dl_rng r = dl_rng_make(7);
  int64_t i, diff = 0;
  memset(&d, 0, sizeof d);
  d.threads = 1;
  dl_ctx_init(&one, &d);
  d.threads = 2;
  dl_ctx_init(&two, &d);
  for (i = 0; i < M * K; i++) A[i] = 2.0f * dl_rng_uniform_f32(&r) - 1.0f;
  for (i = 0; i < K * N; i++) B[i] = 2.0f * dl_rng_uniform_f32(&r) - 1.0f;
  dl_gemm_builtin_f32(&one, DL_NOTRANS, DL_TRANS, M, N / 2, K, 1.0f, A, K, B, K, 0.0f, C1, N);
  dl_gemm_builtin_f32(&two, DL_NOTRANS, DL_TRANS, M, N / 2, K, 1.0f, A, K, B, K, 0.0f, C2, N);
  for (i = 0; i < M; i++) {
    int64_t j;
    for (j = 0; j < N / 2; j++) diff += C1[i * N + j] != C2[i * N + j];
  }
  CHECK(diff == 0);
  /* and the result is not trivially zero */
  CHECK(C1[0] != 0.0f && C1[(M - 1) * N + N / 2 - 1] != 0.0f);
  /* that product (37 MFLOP) is cut into one block per thread; the whole
   * width (75 MFLOP, above DL_GEMM_SPLIT_FLOPS) goes through the shared
   * tiles: the same bits too */
  dl_gemm_builtin_f32(&one, DL_NOTRANS, DL_TRANS, M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
  dl_gemm_builtin_f32(&two, DL_NOTRANS, DL_TRANS, M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N);
  CHECK(2.0 * (double)(M * N * K) > (double)DL_GEMM_SPLIT_FLOPS && 2.0 * (double)(M * (N / 2) * K) <= (double)DL_GEMM_SPLIT_FLOPS);
  CHECK(memcmp(C1, C2, sizeof(float) * (size_t)(M * N)) == 0);
  /* 64 rows of A B^T: the dot kernel where the build has one (the team
   * splits C's columns), the same bits at 1 and 2 threads */
  {
    const dl__gemm_kind k = dl__gemm_kind_f32();
    const dl__gemm_problem pr = dl__gemm_problem_make(DL_NOTRANS, DL_TRANS, 64, N, K, 1.0, A, K, 0, B, K, 0, 0.0,
                                                      C1, N, 0, 1);
    CHECK(dl__gemm_dot_fits(&k, &pr) == DL__GEMM_DOT);
    dl_gemm_builtin_f32(&one, DL_NOTRANS, DL_TRANS, 64, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
    dl_gemm_builtin_f32(&two, DL_NOTRANS, DL_TRANS, 64, N, K, 1.0f, A, K, B, K, 0.0f, C2, N);
    CHECK(memcmp(C1, C2, sizeof(float) * (size_t)(64 * N)) == 0);
    dl_gemm_batched_f32(&one, DL_NOTRANS, DL_TRANS, 20, N / 3, K, 1.0f, A, K, 20 * K, B, K, 0, 0.0f, C1, N / 3,
                        20 * (N / 3), 3);
    dl_gemm_batched_f32(&two, DL_NOTRANS, DL_TRANS, 20, N / 3, K, 1.0f, A, K, 20 * K, B, K, 0, 0.0f, C2, N / 3,
                        20 * (N / 3), 3);
    CHECK(memcmp(C1, C2, sizeof(float) * (size_t)(60 * (N / 3))) == 0);
  }
  free(A);
  free(B);
  free(C1);
  free(C2);
}

/* ---- allocator hooks ------------------------------------------------------- */

typedef struct alloc_stats { int allocs, frees, fail; } alloc_stats;
static void *count_alloc(size_t size, void *user) {
  alloc_stats *s = (alloc_stats *)user;
  if (s->fail) return NULL;
  s->allocs++;
  return malloc(size);
}
static void count_free(void *p, void *user) {
  ((alloc_stats *)user)->frees++;
  free(p);
}
static int log_warnings;
static void count_log(void *user, int level, const char *message) {
  (void)user;
  if (level == 1 && strstr(message, "dl_gemm_builtin_f32")) log_warnings++;
}

/* The packing buffers come from ctx's allocator and are all given back; when
 * it fails, the product is still right and a warning is logged. */
static void test_allocator(void) {
  alloc_stats st = {0, 0, 0};
  dl_ctx_desc d;
  dl_ctx ctx;
  gemm_case c;
  memset(&d, 0, sizeof d);
  d.allocator.alloc = count_alloc;
  d.allocator.free = count_free;
  d.allocator.user = &st;
  d.log = count_log;
  dl_ctx_init(&ctx, &d);
  memset(&c, 0, sizeof c);
  c.ta = DL_TRANS;
  c.M = 40;
  c.N = 50;
  c.K = 60;
  c.alpha = 1.0;
  c.beta = 1.0;
  c.batch = 1;
  c.ctx = &ctx;
  run_case("allocator", 0, ENTRY_BUILTIN, &c);
  CHECK(st.allocs >= 1);
  { /* packing buffers stay cached per thread: the same call again allocates nothing */
    int before = st.allocs;
    run_case("allocator again", 0, ENTRY_BUILTIN, &c);
    CHECK(st.allocs == before);
  }
  dl_gemm_release_cache();
  CHECK(st.frees == st.allocs);
  st.fail = 1;
  log_warnings = 0;
  run_case("allocator failing", 0, ENTRY_BUILTIN, &c);
  CHECK(log_warnings == 1);
  dl_gemm_release_cache();
  CHECK(st.frees == st.allocs);
}

/* ---- denormals --------------------------------------------------------------- */

/* Products below FLT_MIN are flushed on every thread the built-in kernel uses
 * (the default), kept with keep_denormals; the caller's mode is restored. */
static void test_denormals(void) {
#if defined(__SSE__) || defined(__x86_64__)
  const int64_t M = 300, N = 200, K = 250;
  float *A = (float *)malloc((size_t)(M * K) * sizeof(float));
  float *B = (float *)malloc((size_t)(K * N) * sizeof(float));
  float *C = (float *)malloc((size_t)(M * N) * sizeof(float));
  dl_ctx keep;
  dl_ctx_desc d;
  unsigned int csr = _mm_getcsr();
  int64_t i, nonzero = 0, zero = 0;
  memset(&d, 0, sizeof d);
  d.keep_denormals = 1;
  dl_ctx_init(&keep, &d);
  _mm_setcsr(csr & ~0x8040u); /* caller runs with denormals */
  for (i = 0; i < M * K; i++) A[i] = 1e-20f;
  for (i = 0; i < K * N; i++) B[i] = 1e-21f; /* each product 1e-41, a denormal */
  dl_gemm_builtin_f32(NULL, DL_NOTRANS, DL_NOTRANS, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
  for (i = 0; i < M * N; i++) zero += C[i] == 0.0f;
  CHECK(zero == M * N);
  CHECK((_mm_getcsr() & 0x8040u) == 0);
  dl_gemm_builtin_f32(&keep, DL_NOTRANS, DL_NOTRANS, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
  for (i = 0; i < M * N; i++) nonzero += C[i] > 1e-39f && C[i] < 1e-38f;
  CHECK(nonzero == M * N);
  _mm_setcsr(csr);
  free(A);
  free(B);
  free(C);
#else
  SKIP("no MXCSR on this target");
#endif
}

/* ---- argument checks ------------------------------------------------------- */

static void test_panics(void) {
  float a[64], b[64], c[64];
  double ad[64], bd[64], cd[64];
  memset(a, 0, sizeof a);
  memset(b, 0, sizeof b);
  memset(c, 0, sizeof c);
  memset(ad, 0, sizeof ad);
  memset(bd, 0, sizeof bd);
  memset(cd, 0, sizeof cd);
  /* A is (4,5): lda 4 < K 5 */
  EXPECT_PANIC(dl_gemm_f32(&panic_ctx, DL_NOTRANS, DL_NOTRANS, 4, 3, 5, 1.0f, a, 4, b, 3, 0.0f, c, 3),
               "dl_gemm_f32", "lda=4", "M=4 N=3 K=5");
  /* A is (K,M) = (5,4) when ta: lda 3 < M 4 */
  EXPECT_PANIC(dl_gemm_f32(&panic_ctx, DL_TRANS, DL_NOTRANS, 4, 3, 5, 1.0f, a, 3, b, 3, 0.0f, c, 3),
               "dl_gemm_f32", "lda=3", "need lda >= 4");
  /* B is (N,K) = (3,5) when tb: ldb 3 < K 5 */
  EXPECT_PANIC(dl_gemm_f64(&panic_ctx, DL_NOTRANS, DL_TRANS, 4, 3, 5, 1.0, ad, 5, bd, 3, 0.0, cd, 3),
               "dl_gemm_f64", "ldb=3", "need ldb >= 5");
  EXPECT_PANIC(dl_gemm_builtin_f32(&panic_ctx, DL_NOTRANS, DL_NOTRANS, 4, 3, 5, 1.0f, a, 5, b, 3, 0.0f, c, 2),
               "dl_gemm_builtin_f32", "ldc=2");
  EXPECT_PANIC(dl_gemm_builtin_f64(&panic_ctx, DL_NOTRANS, DL_NOTRANS, -1, 3, 5, 1.0, ad, 5, bd, 3, 0.0, cd, 3),
               "dl_gemm_builtin_f64", "negative size", "M=-1");
  EXPECT_PANIC(dl_gemm_f32(&panic_ctx, DL_NOTRANS, DL_NOTRANS, 4, 3, 5, 1.0f, a, 5, b, 3, 0.0f, NULL, 3),
               "dl_gemm_f32", "C is NULL");
  EXPECT_PANIC(dl_gemm_f32(&panic_ctx, DL_NOTRANS, DL_NOTRANS, 4, 3, 5, 1.0f, NULL, 5, b, 3, 0.0f, c, 3),
               "dl_gemm_f32", "A is NULL");
  EXPECT_PANIC(dl_gemm_f32(&panic_ctx, (dl_trans)2, DL_NOTRANS, 4, 3, 5, 1.0f, a, 5, b, 3, 0.0f, c, 3),
               "dl_gemm_f32", "ta=2");
  EXPECT_PANIC(dl_gemm_batched_f32(&panic_ctx, DL_NOTRANS, DL_NOTRANS, 2, 3, 2, 1.0f, a, 2, 4, b, 3, 6,
                                   0.0f, c, 3, 5, 2),
               "dl_gemm_batched_f32", "strideC=5", "need strideC >= 6");
  EXPECT_PANIC(dl_gemm_batched_f64(&panic_ctx, DL_NOTRANS, DL_NOTRANS, 2, 3, 2, 1.0, ad, 2, -4, bd, 3, 6,
                                   0.0, cd, 3, 6, 2),
               "dl_gemm_batched_f64", "strideA=-4");
  EXPECT_PANIC(dl_gemm_batched_f64(&panic_ctx, DL_NOTRANS, DL_NOTRANS, 2, 3, 2, 1.0, ad, 2, 4, bd, 3, 6,
                                   0.0, cd, 3, 6, -1),
               "dl_gemm_batched_f64", "batch=-1");
}

/* With OpenBLAS, the library runs OpenBLAS on one thread and shares a
 * GEMM's blocks out to its own team: OpenBLAS's pool stays at 1 whatever
 * the ctx says; a GEMM big enough to be split gives the same bits every
 * time on 2 threads and agrees with 1 thread to rounding (OpenBLAS picks
 * kernels by block size, so not bit for bit), for plain, transposed and
 * batched operands. */
#ifdef DL_USE_OPENBLAS
static double max_diff(const float *a, const float *b, int n) {
  double e = 0;
  int i;
  for (i = 0; i < n; i++)
    if (fabs((double)a[i] - (double)b[i]) > e) e = fabs((double)a[i] - (double)b[i]);
  return e;
}
static void test_openblas_threads(void) {
  dl_ctx one, two;
  enum { M = 70, N = 90, K = 300 };
  float *A = malloc(sizeof(float) * M * K * 3), *B = malloc(sizeof(float) * K * N * 3);
  float *C1 = malloc(sizeof(float) * M * N * 3), *C2 = malloc(sizeof(float) * M * N * 3);
  float *C3 = malloc(sizeof(float) * M * N * 3);
  dl_rng g = dl_rng_make(5);
  int i, ta, tb;
  dl_ctx_init(&one, &(dl_ctx_desc){.threads = 1});
  dl_ctx_init(&two, &(dl_ctx_desc){.threads = 2});
  for (i = 0; i < M * K * 3; i++) A[i] = (float)dl_rng_uniform(&g) - 0.5f;
  for (i = 0; i < K * N * 3; i++) B[i] = (float)dl_rng_uniform(&g) - 0.5f;
  openblas_set_num_threads(2);
  for (ta = 0; ta < 2; ta++)
    for (tb = 0; tb < 2; tb++) {
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      dl_gemm_f32(&one, (dl_trans)ta, (dl_trans)tb, M, N, K, 1.5f, A, lda, B, ldb, 0.0f, C1, N);
      CHECK(openblas_get_num_threads() == 1 || !dl__openblas_chosen()); /* not reached: the built-in kernel */
      dl_gemm_f32(&two, (dl_trans)ta, (dl_trans)tb, M, N, K, 1.5f, A, lda, B, ldb, 0.0f, C2, N);
      dl_gemm_f32(&two, (dl_trans)ta, (dl_trans)tb, M, N, K, 1.5f, A, lda, B, ldb, 0.0f, C3, N);
      CHECK_MSG(memcmp(C3, C2, sizeof(float) * M * N) == 0, "ta %d tb %d: 2 threads not repeatable", ta, tb);
      CHECK_MSG(max_diff(C1, C2, M * N) < 1e-4, "ta %d tb %d: 1 and 2 threads differ by %g", ta, tb, max_diff(C1, C2, M * N));
      /* M > N: split by rows */
      dl_gemm_f32(&one, (dl_trans)ta, (dl_trans)tb, N, M, K, 1.0f, B, ta ? N : K, A, tb ? K : M, 0.0f, C1, M);
      dl_gemm_f32(&two, (dl_trans)ta, (dl_trans)tb, N, M, K, 1.0f, B, ta ? N : K, A, tb ? K : M, 0.0f, C2, M);
      dl_gemm_f32(&two, (dl_trans)ta, (dl_trans)tb, N, M, K, 1.0f, B, ta ? N : K, A, tb ? K : M, 0.0f, C3, M);
      CHECK_MSG(memcmp(C3, C2, sizeof(float) * M * N) == 0, "rows, ta %d tb %d: 2 threads not repeatable", ta, tb);
      CHECK_MSG(max_diff(C1, C2, M * N) < 1e-4, "rows, ta %d tb %d: differ by %g", ta, tb, max_diff(C1, C2, M * N));
    }
  dl_gemm_batched_f32(&one, DL_NOTRANS, DL_NOTRANS, M, N, K, 1.0f, A, K, M * K, B, N, K * N, 0.0f, C1, N, M * N, 3);
  dl_gemm_batched_f32(&two, DL_NOTRANS, DL_NOTRANS, M, N, K, 1.0f, A, K, M * K, B, N, K * N, 0.0f, C2, N, M * N, 3);
  CHECK(max_diff(C1, C2, M * N * 3) < 1e-4);
  /* and against the plain loop */
  {
    double e = 0;
    int r, c, k;
    for (r = 0; r < M; r++)
      for (c = 0; c < N; c++) {
        double ref = 0;
        for (k = 0; k < K; k++) ref += (double)A[2 * M * K + r * K + k] * (double)B[2 * K * N + k * N + c];
        if (fabs(ref - C2[2 * M * N + r * N + c]) > e) e = fabs(ref - C2[2 * M * N + r * N + c]);
      }
    CHECK_MSG(e < 1e-4, "max error %g", e);
  }
  free(A); free(B); free(C1); free(C2); free(C3);
}
#ifdef __linux__
/* The threads this process has now. */
static int tasks_now(void) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}
/* This binary run again with OPENBLAS_NUM_THREADS=3 (main's probe mode, before
 * any GEMM): OpenBLAS is at one thread and started no worker (the pre-init
 * sets it whatever the variable says: workers spinning after their start
 * took a core from the team), and asking for 3 threads starts them. */
static void test_openblas_env(void) {
  char buf[256];
  int fd[2], status = -1, before = -1, tasks = -1, after = -1, tasks3 = -1;
  ssize_t n = 0, r;
  pid_t pid;
  if (tasks_now() < 1 || access("/proc/self/exe", X_OK) != 0) SKIP("no /proc/self here: cannot run this binary again");
  CHECK(pipe(fd) == 0);
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid == 0) {
    char *argv[] = {(char *)"test_blas", (char *)"--openblas-env-probe", NULL};
    char *envp[] = {(char *)"OPENBLAS_NUM_THREADS=3", NULL};
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execve("/proc/self/exe", argv, envp);
    _exit(127);
  }
  close(fd[1]);
  while (n < (ssize_t)sizeof buf - 1 && (r = read(fd[0], buf + n, sizeof buf - 1 - (size_t)n)) > 0) n += r;
  buf[n > 0 ? n : 0] = 0;
  close(fd[0]);
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_MSG(sscanf(buf, "openblas_threads=%d tasks=%d then=%d tasks=%d", &before, &tasks, &after, &tasks3) == 4,
            "the probe printed \"%s\"", buf);
  CHECK_MSG(before == 1 && tasks == 1, "OPENBLAS_NUM_THREADS=3: OpenBLAS at %d threads, %d threads running at start",
            before, tasks);
  CHECK_MSG(after > 1 && tasks3 == after, "openblas_set_num_threads(3): %d threads, %d running", after, tasks3);
}
static int openblas_env_probe(void) {
  const int before = openblas_get_num_threads(), tasks = tasks_now();
  openblas_set_num_threads(3);
  printf("openblas_threads=%d tasks=%d then=%d tasks=%d\n", before, tasks, openblas_get_num_threads(), tasks_now());
  return 0;
}
#endif
/* Which kernel dl_gemm uses under DL_USE_OPENBLAS: OpenBLAS unless this
 * build has AVX2 and FMA (x86) and OpenBLAS runs a core it has no AVX2
 * kernels for; the name is matched whole, in any case. */
static void test_openblas_core(void) {
  const char *core = openblas_get_corename();
#if (defined(__x86_64__) || defined(__i386__)) && defined(__AVX2__) && defined(__FMA__) && !defined(DL_OPENBLAS_ANY_CORE)
  const int avx2_build = 1;
#else
  const int avx2_build = 0;
#endif
  CHECK(dl__openblas_core_ok("Haswell") == 1);
  CHECK(dl__openblas_core_ok("SKYLAKEX") == 1);
  CHECK(dl__openblas_core_ok("Zen") == 1);
  CHECK(dl__openblas_core_ok("SapphireRapids") == 1);
  CHECK(dl__openblas_core_ok(NULL) == 1);
  CHECK(dl__openblas_core_ok("Prescott") == !avx2_build);
  CHECK(dl__openblas_core_ok("Sandybridge") == !avx2_build);
  CHECK(dl__openblas_core_ok("Haswel") == !avx2_build);
  CHECK(dl__openblas_core_ok("Haswellx") == !avx2_build);
  CHECK(dl__openblas_core_ok("") == !avx2_build);
  CHECK(dl__openblas_chosen() == dl__openblas_core_ok(core));
  CHECK_MSG((strcmp(dl_gemm_backend(), "openblas") == 0) == dl__openblas_chosen(), "core %s: %s", core, dl_gemm_backend());
  printf("OpenBLAS core %s, this build %s AVX2+FMA: dl_gemm on %s\n", core, avx2_build ? "with" : "without",
         dl_gemm_backend());
}

#endif

int main(int argc, char **argv) {
  dl_ctx_desc d;
#if defined(DL_USE_OPENBLAS) && defined(__linux__)
  if (argc > 1 && strcmp(argv[1], "--openblas-env-probe") == 0) return openblas_env_probe();
#else
  (void)argc;
  (void)argv;
#endif
  memset(&d, 0, sizeof d);
  d.panic = harness_panic;
  dl_ctx_init(&panic_ctx, &d);
  RUN(test_gemm_f32);
  RUN(test_gemm_f64);
  RUN(test_builtin_f32);
  RUN(test_builtin_f64);
  RUN(test_k_zero);
  RUN(test_alpha_zero);
  RUN(test_empty);
  RUN(test_batched);
  RUN(test_batched_large);
  RUN(test_large);
  RUN(test_thread_count_invariance);
  RUN(test_allocator);
  RUN(test_denormals);
  RUN(test_panics);
#ifdef DL_USE_OPENBLAS
  RUN(test_openblas_threads);
  RUN(test_openblas_core);
#ifdef __linux__
  RUN(test_openblas_env);
#endif
#else
  CHECK(!strcmp(dl_gemm_backend(), "builtin"));
#endif
  return harness_finish();
}
