/* bench/bench_mlp.c - forward+backward of a 784-256-128-10 MLP (ReLU,
 * cross-entropy from logits) at batch 64, f32, on the tape: milliseconds per
 * step, median of REPS repeats of STEPS steps. A step is what a training
 * loop does before its optimizer update: zero the gradients, forward,
 * backward, rewind the tape. bench/torch_mlp.py does the same in PyTorch
 * eager; bench/run_mlp.sh runs both and prints the ratio.
 *
 *   bench_mlp [reps=7] [steps=50] [threads=2] [batch=64]
 * prints: dl_mlp_ms=<median> batch=... threads=... gemm=<openblas|builtin> allocs_per_step=<n>
 */
#define _POSIX_C_SOURCE 199309L
#include "dl.h"
#include "bench_util.h"

static int n_alloc;
static void *count_alloc(size_t n, void *u) { (void)u; n_alloc++; return malloc(n); }
static void *count_realloc(void *p, size_t n, void *u) { (void)u; n_alloc++; return realloc(p, n); }
static void count_free(void *p, void *u) { (void)u; free(p); }

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 7, steps = argc > 2 ? atoi(argv[2]) : 50;
  int threads = argc > 3 ? atoi(argv[3]) : 2, batch = argc > 4 ? atoi(argv[4]) : 64;
  const int64_t sizes[4] = {784, 256, 128, 10};
  dl_ctx_desc d;
  dl_ctx ctx;
  dl_tape tp;
  dl_rng rng = dl_rng_make(42);
  dl_tensor *x, *labels, *w[3], *b[3];
  double *ms = (double *)malloc(sizeof(double) * (size_t)reps);
  int r, s, k, allocs0;
  memset(&d, 0, sizeof d);
  d.threads = threads;
  d.allocator.alloc = count_alloc;
  d.allocator.realloc = count_realloc;
  d.allocator.free = count_free;
  dl_ctx_init(&ctx, &d);
  x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(batch, 784));
  labels = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(batch));
  dl_tensor_rand_uniform(x, &rng, 0, 1);
  for (k = 0; k < batch; k++) dl_i64(labels)[k] = (int64_t)dl_rng_below(&rng, 10);
  for (k = 0; k < 3; k++) {
    double bound = 1.0 / sqrt((double)sizes[k]);
    w[k] = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(sizes[k + 1], sizes[k]));
    b[k] = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(sizes[k + 1]));
    dl_tensor_rand_uniform(w[k], &rng, -bound, bound);
    dl_tensor_rand_uniform(b[k], &rng, -bound, bound);
    dl_requires_grad(w[k]);
    dl_requires_grad(b[k]);
  }
  dl_tape_init(&tp, &ctx, 0);
  allocs0 = 0;
  for (r = -1; r < reps; r++) { /* r = -1: warm-up */
    double t0;
    bench_pause_ms(20);
    t0 = bench_now();
    for (s = 0; s < steps; s++) {
      dl_tensor *h = x, *loss;
      for (k = 0; k < 3; k++) {
        dl_zero_grad(w[k]);
        dl_zero_grad(b[k]);
      }
      for (k = 0; k < 3; k++) {
        h = dl_t_linear(&tp, h, w[k], b[k]);
        if (k < 2) h = dl_t_relu(&tp, h);
      }
      loss = dl_t_cross_entropy(&tp, h, labels, 0.0, DL_REDUCE_MEAN);
      dl_backward(&tp, loss, NULL);
      dl_tape_rewind(&tp);
      if (r == -1 && s == 0) allocs0 = n_alloc;
    }
    if (r >= 0) ms[r] = (bench_now() - t0) * 1e3 / steps;
  }
  printf("dl_mlp_ms=%.4f batch=%d threads=%d gemm=%s allocs_per_step=%.2f\n", bench_median(ms, reps), batch,
         threads,
#if defined(DL_BENCH_GEMM_NAME)
         DL_BENCH_GEMM_NAME,
#elif defined(DL_USE_OPENBLAS)
         "openblas",
#else
         "builtin",
#endif
         (double)(n_alloc - allocs0) / ((double)steps * (reps + 1) - 1));
  dl_tape_free(&tp);
  for (k = 0; k < 3; k++) {
    dl_tensor_free(w[k]);
    dl_tensor_free(b[k]);
  }
  dl_tensor_free(x);
  dl_tensor_free(labels);
  dl_gemm_release_cache();
  free(ms);
  return 0;
}
