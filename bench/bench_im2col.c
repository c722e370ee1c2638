/* bench/bench_im2col.c - im2col, the copy a convolution multiplies, against
 * a plain loop and against memcpy of the same bytes.
 *
 * The CNN's (examples/fashion_cnn.c) two convolutions, 3x3 with padding 1,
 * on 64 images each: [1, 28, 28] and [32, 14, 14]. Per layer, alternating in
 * the same run:
 *   dl       dl__im2col_f32, the library's kernel, called through a
 *            volatile pointer: in a program the geometry is known only at
 *            run time (called directly here, gcc propagated the constants
 *            into it and timed code no convolution runs: a masked AVX-512
 *            form measured 11x faster that way ran 2x slower than this
 *            kernel through the pointer);
 *   plain    the definition as a plain loop: for each row (c, i, j) and
 *            output (oh, ow) the input element or 0;
 *   memcpy   copying the same number of bytes from one buffer to another
 *            (what no im2col can beat).
 * Each image gets its own input (as in a batch: one image's input is not
 * in L1 when its turn comes); one column buffer is reused. Prints per layer
 *   im2col [C,H,W] x64: dl X us, plain Y us (Y/X), memcpy Z us (X/Z of it)
 * with the medians of `reps` repeats, and checks that dl and plain wrote
 * the same columns (exit 1 otherwise).
 *
 *   gcc -std=c11 -O2 [-march=native] -Iinclude bench/bench_im2col.c -o build/bench/bench_im2col -lm
 *   build/bench/bench_im2col [reps=31]
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

/* the definition, for one image: col[K, P] from x[C, H, W] */
static void plain_im2col(const dl__conv_geom *g, const float *x, float *col) {
  int64_t c, i, j, oh, ow;
  for (c = 0; c < g->C; c++)
    for (i = 0; i < g->kh; i++)
      for (j = 0; j < g->kw; j++)
        for (oh = 0; oh < g->Ho; oh++)
          for (ow = 0; ow < g->Wo; ow++) {
            const int64_t ih = oh * g->sh - g->ph + i * g->dh, iw = ow * g->sw - g->pw + j * g->dw;
            col[((c * g->kh + i) * g->kw + j) * g->P + oh * g->Wo + ow] =
                ih >= 0 && ih < g->H && iw >= 0 && iw < g->W ? x[(c * g->H + ih) * g->W + iw] : 0.0f;
          }
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 31;
  static const int64_t layers[2][3] = {{1, 28, 28}, {32, 14, 14}};
  int li, status = 0;
  if (reps < 1 || reps > MAX_REPS) {
    fprintf(stderr, "usage: %s [reps 1..%d]\n", argv[0], MAX_REPS);
    return 2;
  }
  printf("# bench_im2col: 3x3, padding 1, %d images, f32, medians of %d, one thread\n", IMAGES, reps);
  for (li = 0; li < 2; li++) {
    dl__conv_geom g;
    float *x, *col, *ref, *src, *dst;
    double td[MAX_REPS], tp[MAX_REPS], tm[MAX_REPS], d, p, m;
    size_t xn, cn;
    int r, k;
    memset(&g, 0, sizeof g);
    g.N = 1;
    g.C = layers[li][0];
    g.H = layers[li][1];
    g.W = layers[li][2];
    g.O = 1;
    g.kh = g.kw = 3;
    g.sh = g.sw = g.dh = g.dw = 1;
    g.ph = g.pw = 1;
    g.G = 1;
    dl__conv_geom_fill(&g);
    xn = (size_t)(g.C * g.H * g.W);
    cn = (size_t)(g.K * g.P);
    x = (float *)malloc(sizeof(float) * xn * IMAGES);
    col = (float *)malloc(sizeof(float) * cn);
    ref = (float *)malloc(sizeof(float) * cn);
    src = (float *)malloc(sizeof(float) * cn);
    dst = (float *)malloc(sizeof(float) * cn);
    if (!x || !col || !ref || !src || !dst) {
      fprintf(stderr, "bench_im2col: out of memory\n");
      return 1;
    }
    for (k = 0; k < (int)(xn * IMAGES); k++) x[k] = (float)(k % 1009) - 500.0f;
    for (k = 0; k < (int)cn; k++) src[k] = (float)k;
    for (r = -1; r < reps; r++) { /* (-1: a warm-up) */
      void (*volatile im2col)(const dl__conv_geom *, const float *, float *) = dl__im2col_f32;
      double t0 = bench_now(), t1, t2, t3;
      for (k = 0; k < IMAGES; k++) im2col(&g, x + (size_t)k * xn, col);
      t1 = bench_now();
      for (k = 0; k < IMAGES; k++) plain_im2col(&g, x + (size_t)k * xn, ref);
      t2 = bench_now();
      for (k = 0; k < IMAGES; k++) {
        memcpy(dst, src, sizeof(float) * cn);
        src[k] = dst[cn - 1 - (size_t)k]; /* (a dependence, so no copy is dropped) */
      }
      t3 = bench_now();
      if (r >= 0) {
        td[r] = (t1 - t0) * 1e6;
        tp[r] = (t2 - t1) * 1e6;
        tm[r] = (t3 - t2) * 1e6;
      }
    }
    if (memcmp(col, ref, sizeof(float) * cn) != 0) { /* both hold the last image's columns */
      printf("im2col [%lld,%lld,%lld]: dl.h's columns differ from the plain loop's\n", (long long)g.C,
             (long long)g.H, (long long)g.W);
      status = 1;
    }
    d = bench_median(td, reps);
    p = bench_median(tp, reps);
    m = bench_median(tm, reps);
    printf("im2col [%lld,%lld,%lld] x%d: dl %.1f us, plain %.1f us (%.2fx), memcpy %.1f us (dl takes %.2fx of it)\n",
           (long long)g.C, (long long)g.H, (long long)g.W, IMAGES, d, p, p / d, m, d / m);
    free(x);
    free(col);
    free(ref);
    free(src);
    free(dst);
  }
  return status;
}
