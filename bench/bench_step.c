/* bench/bench_step.c - one whole training step of the 784-256-128-10 MLP
 * (ReLU, cross-entropy from logits) at batch 64, f32, built from layers.h
 * and updated with optim.h's Adam: forward, backward, global-norm gradient
 * clipping (max norm 1), Adam update, zeroed gradients, tape rewound. That
 * is dl_train_step's five stages. Milliseconds per step, median of REPS
 * repeats of STEPS steps after a warm-up repeat, and heap allocations per
 * step in the steady state (counted by the ctx's allocator hooks; the
 * warm-up's first step, which sizes the tape and GEMM buffers, excluded).
 * bench/torch_step.py does the same in PyTorch eager; bench/run_step.sh
 * runs both and prints the ratio.
 *
 *   bench_step [reps=7] [steps=50] [threads=2] [batch=64]
 * prints: dl_step_ms=<median> batch=... threads=... gemm=... allocs_per_step=<n> loss=<last>
 */
#define _POSIX_C_SOURCE 199309L
#include "dl.h"
#include "bench_util.h"

static long n_alloc;
static void *count_alloc(size_t n, void *u) { (void)u; n_alloc++; return malloc(n); }
static void *count_realloc(void *p, size_t n, void *u) { (void)u; n_alloc++; return realloc(p, n); }
static void count_free(void *p, void *u) { (void)u; free(p); }

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 7, steps = argc > 2 ? atoi(argv[2]) : 50;
  int threads = argc > 3 ? atoi(argv[3]) : 2, batch = argc > 4 ? atoi(argv[4]) : 64;
  dl_ctx_desc d;
  dl_ctx ctx;
  dl_tape tp;
  dl_rng rng = dl_rng_make(42);
  dl_tensor *x, *labels;
  dl_model *m;
  dl_optim *opt;
  dl_adam_cfg adam = dl_adam_defaults(1e-3);
  const dl_step_desc sd = {.clip_norm = 1.0};
  double *ms = (double *)malloc(sizeof(double) * (size_t)reps), last = 0;
  long allocs0 = 0;
  int r, s, k;
  memset(&d, 0, sizeof d);
  d.threads = threads;
  d.allocator.alloc = count_alloc;
  d.allocator.realloc = count_realloc;
  d.allocator.free = count_free;
  dl_ctx_init(&ctx, &d);
  m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 42});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 784, .out = 256});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 256, .out = 128});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 128, .out = 10});
  opt = dl_optim_adam(m, &adam);
  if (!opt) { fprintf(stderr, "bench_step: %s\n", dl_ctx_message(&ctx)); return 1; }
  x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(batch, 784));
  labels = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(batch));
  dl_tensor_rand_uniform(x, &rng, 0, 1);
  for (k = 0; k < batch; k++) dl_i64(labels)[k] = (int64_t)dl_rng_below(&rng, 10);
  dl_tape_init(&tp, &ctx, 0);
  for (r = -1; r < reps; r++) { /* r = -1: warm-up */
    double t0;
    bench_pause_ms(20);
    t0 = bench_now();
    for (s = 0; s < steps; s++) {
      dl_tensor *loss;
      dl_tape_rewind(&tp);
      loss = dl_t_cross_entropy(&tp, dl_model_forward(m, &tp, x), labels, 0.0, DL_REDUCE_MEAN); /* 1 */
      last = dl_f32(loss)[0];
      dl_train_step(opt, &tp, loss, &sd); /* 2-5: backward, clip, regularise (none), Adam */
      if (r == -1 && s == 0) allocs0 = n_alloc;
    }
    if (r >= 0) ms[r] = (bench_now() - t0) * 1e3 / steps;
  }
  printf("dl_step_ms=%.4f batch=%d threads=%d gemm=%s allocs_per_step=%.2f loss=%.4g\n", bench_median(ms, reps), batch,
         threads,
#if defined(DL_USE_OPENBLAS)
         "openblas",
#else
         "builtin",
#endif
         (double)(n_alloc - allocs0) / ((double)steps * (reps + 1) - 1), last);
  dl_tape_free(&tp);
  dl_optim_free(opt);
  dl_model_free(m);
  dl_tensor_free(x);
  dl_tensor_free(labels);
  dl_gemm_release_cache();
  free(ms);
  return 0;
}
