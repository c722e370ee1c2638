/* bench/bench_pool.c - the 2x2, stride-2 max pool with indices (the pool
 * after each convolution of examples/fashion_cnn.c, also the pool inside
 * the fused batch norm + ReLU + pool) against a plain loop and memcpy.
 *
 * The CNN's two pools on 64 images, f32: [32, 28, 28] and [64, 14, 14] per
 * image. Per layer, alternating in the same run:
 *   dl       dl__maxpool_fwd_f32 plane by plane, called through a volatile
 *            pointer (in a program the geometry is known only at run time):
 *            the AVX-512 or AVX2 form where the build has it (-march=native
 *            on such a CPU), else the block form;
 *   plain    the rule as a plain loop: each window scanned in row-major
 *            order, the first maximum kept, a NaN winning;
 *   memcpy   copying the input's bytes (what a pass over the input costs).
 * Prints per layer
 *   maxpool2 [C,H,W] x64: dl X us, plain Y us (Y/X), memcpy Z us (X/Z of it)
 * with the medians of `reps` repeats, and checks that dl and plain wrote
 * the same values and indices (exit 1 otherwise).
 *
 *   gcc -std=c11 -O2 [-march=native] -Iinclude bench/bench_pool.c -o build/bench/bench_pool -lm
 *   build/bench/bench_pool [reps=31]
 * (bench/run_conv.sh builds it both ways and runs it.)
 */
#define _POSIX_C_SOURCE 200809L
#include "dl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define MAX_REPS 101
#define IMAGES 64

/* the rule, for one plane */
static void plain_pool(const dl__pool_geom *g, const float *x, float *y, int32_t *idx) {
  int64_t oh, ow, i, j;
  for (oh = 0; oh < g->Ho; oh++)
    for (ow = 0; ow < g->Wo; ow++) {
      int64_t at = -1;
      float m = 0;
      for (i = 2 * oh; i < 2 * oh + 2; i++)
        for (j = 2 * ow; j < 2 * ow + 2; j++) {
          const float v = x[i * g->W + j];
          if (at < 0 || v > m || v != v) {
            m = v;
            at = i * g->W + j;
          }
        }
      y[oh * g->Wo + ow] = m;
      idx[oh * g->Wo + ow] = (int32_t)at;
    }
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 31;
  static const int64_t layers[2][3] = {{32, 28, 28}, {64, 14, 14}};
  int li, status = 0;
  if (reps < 1 || reps > MAX_REPS) {
    fprintf(stderr, "usage: %s [reps 1..%d]\n", argv[0], MAX_REPS);
    return 2;
  }
  printf("# bench_pool: 2x2 stride 2 max pool with indices, %d images, f32, medians of %d, one thread\n", IMAGES,
         reps);
  for (li = 0; li < 2; li++) {
    dl__pool_geom g;
    float *x, *y, *yr, *dst;
    int32_t *id, *idr;
    double td[MAX_REPS], tp[MAX_REPS], tm[MAX_REPS], d, p, m;
    int64_t planes, HW, Q, k;
    int r;
    memset(&g, 0, sizeof g);
    g.N = IMAGES;
    g.C = layers[li][0];
    g.H = layers[li][1];
    g.W = layers[li][2];
    g.kh = g.kw = g.sh = g.sw = 2;
    g.dh = g.dw = 1;
    g.D = g.kd = g.sd = g.dd = g.Do = 1;
    g.Ho = g.H / 2;
    g.Wo = g.W / 2;
    planes = g.N * g.C;
    HW = g.H * g.W;
    Q = g.Ho * g.Wo;
    x = (float *)malloc(sizeof(float) * (size_t)(planes * HW));
    dst = (float *)malloc(sizeof(float) * (size_t)(planes * HW));
    y = (float *)malloc(sizeof(float) * (size_t)(planes * Q));
    yr = (float *)malloc(sizeof(float) * (size_t)(planes * Q));
    id = (int32_t *)malloc(sizeof(int32_t) * (size_t)(planes * Q));
    idr = (int32_t *)malloc(sizeof(int32_t) * (size_t)(planes * Q));
    if (!x || !dst || !y || !yr || !id || !idr) {
      fprintf(stderr, "bench_pool: out of memory\n");
      return 1;
    }
    for (k = 0; k < planes * HW; k++) x[k] = (float)((k * 7919) % 1009) - 500.0f; /* ties and every position */
    for (r = -1; r < reps; r++) { /* (-1: a warm-up) */
      void (*volatile pool)(const dl__pool_geom *, const float *, float *, int32_t *) = dl__maxpool_fwd_f32;
      double t0 = bench_now(), t1, t2, t3;
      for (k = 0; k < planes; k++) pool(&g, x + k * HW, y + k * Q, id + k * Q);
      t1 = bench_now();
      for (k = 0; k < planes; k++) plain_pool(&g, x + k * HW, yr + k * Q, idr + k * Q);
      t2 = bench_now();
      memcpy(dst, x, sizeof(float) * (size_t)(planes * HW));
      x[r + 1] = dst[planes * HW - 1 - (r + 1)]; /* (a dependence, so no copy is dropped) */
      t3 = bench_now();
      if (r >= 0) {
        td[r] = (t1 - t0) * 1e6;
        tp[r] = (t2 - t1) * 1e6;
        tm[r] = (t3 - t2) * 1e6;
      }
    }
    if (memcmp(y, yr, sizeof(float) * (size_t)(planes * Q)) != 0 ||
        memcmp(id, idr, sizeof(int32_t) * (size_t)(planes * Q)) != 0) {
      printf("maxpool2 [%lld,%lld,%lld]: dl.h's values or indices differ from the plain loop's\n", (long long)g.C,
             (long long)g.H, (long long)g.W);
      status = 1;
    }
    d = bench_median(td, reps);
    p = bench_median(tp, reps);
    m = bench_median(tm, reps);
    printf("maxpool2 [%lld,%lld,%lld] x%d: dl %.1f us, plain %.1f us (%.2fx), memcpy %.1f us (dl takes %.2fx of it)\n",
           (long long)g.C, (long long)g.H, (long long)g.W, IMAGES, d, p, p / d, m, d / m);
    free(x);
    free(dst);
    free(y);
    free(yr);
    free(id);
    free(idr);
  }
  return status;
}
