/* bench/bench_conv.c - one training step of a convolution layer on the tape.
 *
 * The step: y = dl_t_conv2d(x, w, b) with a 5x5 kernel, 32 -> 64 channels,
 * 12x12 input, padding 0, stride 1, batch 64, f32 (shape "5x5"), or with
 * fashion_cnn's second convolution, a 3x3 kernel, 32 -> 64 channels, 14x14
 * input, padding 1 (shape "3x3": Winograd where the build has AVX2 and
 * FMA, unless algo is "im2col"); then dl_backward with a
 * fixed seed gradient gy, so x, w and b all receive gradients (x requires
 * one as it does in a network whose earlier layers train); then the
 * gradients are zeroed and the tape rewound, as a training loop does.
 * bench/torch_conv.py times the same step in PyTorch.
 *
 * Prints the median milliseconds per step over `reps` repeats of `steps`
 * steps each (after one warm-up repeat), and the CPU the rest of the
 * machine used meanwhile (other sessions share these machines):
 *   dl_ms=... gflops=... other_load_cores=...
 *
 *   gcc -std=c11 -O2 -fopenmp -DDL_USE_OPENBLAS -Iinclude bench/bench_conv.c \
 *       -o build/bench/bench_conv -lopenblas -lm
 *   build/bench/bench_conv [reps=7] [steps=20] [threads=2] [batch=64] [shape=5x5|3x3] [algo=auto|im2col]
 * (bench/run_conv.sh builds it and runs it beside PyTorch.)
 */
#define _POSIX_C_SOURCE 200809L
#include "dl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define BENCH_MAX_REPS 64

static void fill(dl_tensor *t, dl_rng *r, float scale) {
  float *p = (float *)t->data;
  int64_t i;
  for (i = 0; i < t->numel; i++) p[i] = scale * (2.0f * dl_rng_uniform_f32(r) - 1.0f);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 7;
  int steps = argc > 2 ? atoi(argv[2]) : 20;
  int threads = argc > 3 ? atoi(argv[3]) : 2;
  int batch = argc > 4 ? atoi(argv[4]) : 64;
  const int k3 = argc > 5 && strcmp(argv[5], "3x3") == 0, im2col = argc > 6 && strcmp(argv[6], "im2col") == 0;
  const int ks = k3 ? 3 : 5, hw = k3 ? 14 : 12, pad = k3 ? 1 : 0, ho = hw + 2 * pad - ks + 1;
  const dl_conv2d_args args = {0, 0, pad, pad, 0, 0, 0, 0, 0, 0};
  dl_ctx ctx;
  dl_ctx_desc desc;
  dl_tape tp;
  dl_tensor *x, *w, *b, *gy;
  dl_rng rng = dl_rng_make(2024);
  double times[BENCH_MAX_REPS], ms, other, check = 0;
  int r, s;
  int64_t i;

  if (reps < 1 || reps > BENCH_MAX_REPS || steps < 1 || threads < 1 || batch < 1 ||
      (argc > 5 && !k3 && strcmp(argv[5], "5x5") != 0) || (argc > 6 && !im2col && strcmp(argv[6], "auto") != 0)) {
    fprintf(stderr, "usage: %s [reps 1..%d] [steps >= 1] [threads >= 1] [batch >= 1] [5x5|3x3] [auto|im2col]\n", argv[0],
            BENCH_MAX_REPS);
    return 2;
  }
  memset(&desc, 0, sizeof desc);
  desc.threads = threads;
  desc.conv_algo = im2col ? DL_CONV_IM2COL : DL_CONV_AUTO;
  dl_ctx_init(&ctx, &desc);
  x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(batch, 32, hw, hw));
  w = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(64, 32, ks, ks));
  b = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(64));
  gy = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(batch, 64, ho, ho));
  if (!x || !w || !b || !gy || dl_tape_init(&tp, &ctx, 0) != DL_OK || dl_requires_grad(x) != DL_OK ||
      dl_requires_grad(w) != DL_OK || dl_requires_grad(b) != DL_OK) {
    fprintf(stderr, "bench_conv: %s\n", dl_ctx_message(&ctx));
    return 1;
  }
  fill(x, &rng, 1.0f);
  fill(w, &rng, 0.05f);
  fill(b, &rng, 1.0f);
  fill(gy, &rng, 1.0f);

  for (r = -1; r < reps; r++) {
    double t0;
    if (r == 0) bench_other_load();
    t0 = bench_now();
    for (s = 0; s < steps; s++) {
      dl_tensor *y;
      dl_zero_grad(x);
      dl_zero_grad(w);
      dl_zero_grad(b);
      y = dl_t_conv2d(&tp, x, w, b, &args);
      dl_backward(&tp, y, gy);
      dl_tape_rewind(&tp);
    }
    if (r >= 0) times[r] = (bench_now() - t0) / steps;
  }
  other = bench_other_load();
  for (i = 0; i < w->numel; i++) check += ((const float *)w->grad->data)[i];
  ms = bench_median(times, reps) * 1e3;
  {
    int64_t gi[8] = {1, 1, pad, pad, 1, 1, 1, 0};
    const dl__conv_geom g = dl__conv_geom_of(x, w, gi);
    printf("# bench_conv conv2d %dx%d 32->64 %dx%d pad %d batch=%d f32 threads=%d reps=%d steps=%d "
           "(median) %s, %s check sum(grad_w)=%.6g\n",
           ks, ks, hw, hw, pad, batch, threads, reps, steps, dl__wino_ok(&ctx, &g, DL_F32) ? "Winograd" : "im2col",
#ifdef DL_USE_OPENBLAS
           "OpenBLAS",
#else
           "built-in GEMM",
#endif
           check);
  }
  printf("dl_ms=%.3f gflops=%.1f other_load_cores=%.2f\n", ms,
         3.0 * 2.0 * batch * 64 * 32 * ks * ks * ho * ho / (ms * 1e-3) * 1e-9, other);
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(w);
  dl_tensor_free(b);
  dl_tensor_free(gy);
  return 0;
}
