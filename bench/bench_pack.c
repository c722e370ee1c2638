/* bench/bench_pack.c - the parts of one image's convolution product on the
 * built-in GEMM: packing op(A), packing op(B), the micro-kernel calls.
 *
 * The shapes are the Fashion CNN's second convolution (32 -> 64 channels,
 * 3x3, 14x14 positions: K = 288, P = 196), image by image:
 *   fwd   y[64, 196]    = w[64, 288] @ col[288, 196]
 *   dW    gw[64, 288]  += gy[64, 196] @ col[288, 196]^T
 *   dX    col[288, 196] = w^T[288, 64] @ gy[64, 196]
 * and the same forward with 192 positions (whole 32-wide panels of B), to
 * show what the last, narrower panel costs. What the convolution no longer
 * does per image (it packs w and w^T once per batch, dl__conv_wpack) is the
 * pack_a column of fwd and dX.
 *
 * Prints, per shape, the median microseconds of each part over `reps`
 * calls (one thread, the calls of the parts alternated) and the kernel's
 * GFLOP/s:
 *   fwd 64x196x288 NN: pack_a 4.9 us, pack_b 9.5 us, kernel 52.7 us (137.0 GFLOP/s), total 67.1 us
 *
 *   gcc -std=c11 -O3 -march=native -Iinclude bench/bench_pack.c -o build/bench/bench_pack -lm
 *   build/bench/bench_pack [reps=301]
 */
#define _POSIX_C_SOURCE 200809L
#include "dl.h"

#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

#define BENCH_MAX_REPS 2001

static float *filled(int64_t n) {
  float *p = (float *)malloc(sizeof(float) * (size_t)(n + 64));
  int64_t i;
  if (!p) {
    fprintf(stderr, "bench_pack: out of memory\n");
    exit(1);
  }
  for (i = 0; i < n + 64; i++) p[i] = (float)(i * 37 % 101 - 50) / 50.0f;
  return p;
}

static double t_a[BENCH_MAX_REPS], t_b[BENCH_MAX_REPS], t_k[BENCH_MAX_REPS], t_all[BENCH_MAX_REPS];

/* C[M, N] = op(A) op(B) by the parts dl__gemm_item runs (K <= KC, N <= NC: one block). */
static void one(const char *name, int reps, int64_t M, int64_t N, int64_t K, dl_trans ta, dl_trans tb) {
  const dl__gemm_kind k = dl__gemm_kind_f32();
  float *A = filled(M * K), *B = filled(K * N), *C = filled(M * N);
  float *pa = filled((M + k.mr) * K), *pb = filled((N + k.nr) * K);
  const int64_t lda = ta == DL_NOTRANS ? K : M, ldb = tb == DL_NOTRANS ? N : K;
  int r;
  for (r = 0; r < reps; r++) {
    double t0 = bench_now(), t1, t2, t3;
    int64_t ir, jr;
    k.pack_a(ta, A, lda, 0, M, 0, K, pa);
    t1 = bench_now();
    k.pack_b(tb, B, ldb, 0, K, 0, N, pb);
    t2 = bench_now();
    for (jr = 0; jr < N; jr += k.nr)
      for (ir = 0; ir < M; ir += k.mr)
        k.kernel(K, pa + ir * K, pb + jr * K, 1.0, 0.0, C + ir * N + jr, N, (int)(M - ir < k.mr ? M - ir : k.mr),
                 (int)(N - jr < k.nr ? N - jr : k.nr));
    t3 = bench_now();
    t_a[r] = t1 - t0;
    t_b[r] = t2 - t1;
    t_k[r] = t3 - t2;
    t_all[r] = t3 - t0;
  }
  {
    const double a = bench_median(t_a, reps), b = bench_median(t_b, reps), kk = bench_median(t_k, reps);
    const double all = bench_median(t_all, reps);
    printf("%s %lldx%lldx%lld %s%s: pack_a %.1f us, pack_b %.1f us, kernel %.1f us (%.1f GFLOP/s), total %.1f us\n",
           name, (long long)M, (long long)N, (long long)K, ta == DL_NOTRANS ? "N" : "T", tb == DL_NOTRANS ? "N" : "T",
           a * 1e6, b * 1e6, kk * 1e6, 2.0 * (double)(M * N * K) / kk * 1e-9, all * 1e6);
  }
  free(A);
  free(B);
  free(C);
  free(pa);
  free(pb);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 301;
  if (reps < 1 || reps > BENCH_MAX_REPS) {
    fprintf(stderr, "usage: bench_pack [reps 1..%d]\n", BENCH_MAX_REPS);
    return 2;
  }
  one("fwd", reps, 64, 196, 288, DL_NOTRANS, DL_NOTRANS);
  one("fwd", reps, 64, 192, 288, DL_NOTRANS, DL_NOTRANS);
  one("dW ", reps, 64, 288, 196, DL_NOTRANS, DL_TRANS);
  one("dX ", reps, 288, 196, 64, DL_TRANS, DL_NOTRANS);
  return 0;
}
