/* bench/bench_gpt.c - the GPT of examples/gpt.c (dl/transformer.h) timed
 * alone, for bench/run_gpt.sh.
 *
 *   bench_gpt train THREADS T STEPS [B]   L4 H4 C256 GPT with context T,
 *       batch B (8) of random byte tokens (seeded), cross-entropy, AdamW
 *       (betas 0.9/0.95, weight decay 0.1 on the matrices), global-norm
 *       clipping 1.0, as examples/gpt.c; 3 warm-up steps, then STEPS timed.
 *       Prints "tokens_per_s=X max_rss_kb=Y" (max RSS of the whole process).
 *   bench_gpt gen THREADS T           the same model with context T, eval
 *       mode: T - 1 tokens generated after a one-token prompt, once with the
 *       KV cache and once recomputing the window for every token
 *       (dl_gpt_generate's use_cache 1 / 0). Prints
 *       "cache_tokens_per_s=X recompute_tokens_per_s=Y same_tokens=0|1".
 *   bench_gpt attn THREADS T REPS [B H D]   causal attention alone: q, k, v
 *       [B, H, T, D] (8, 4, T, 64) f32, dl_t_scaled_dot_product_attention and
 *       the backward of a fixed gradient, then the same heads packed as
 *       [B, T, 3C] through dl_t_attention_qkv; medians of REPS after 3
 *       warm-ups. Prints "attn_fwd_us=X attn_bwd_us=Y qkv_fwd_us=Z
 *       qkv_bwd_us=W" (bench/torch_gpt.py attn prints PyTorch's first two).
 * Build: gcc -std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude
 *        bench/bench_gpt.c -o build/bench/bench_gpt -lopenblas -lm
 */
#define _POSIX_C_SOURCE 200809L
#include "dl.h"
#include "bench_util.h"

#include <sys/resource.h>

static dl_model *make(dl_ctx *ctx, int64_t T, dl_layer **gpt) {
  dl_model *m = dl_model_make(ctx, &(dl_model_desc){DL_F32, 1});
  dl_gpt_desc g;
  memset(&g, 0, sizeof g);
  g.vocab = 256;
  g.context = T;
  g.embed = 256;
  g.layers = 4;
  g.heads = 4;
  *gpt = dl_gpt_make(m, NULL, "transformer", &g);
  return m;
}

static long max_rss_kb(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

static int train(dl_ctx *ctx, int64_t T, int steps, int64_t B) {
  dl_layer *gpt;
  dl_model *m = make(ctx, T, &gpt);
  dl_adam_cfg ac = dl_adam_defaults(1e-3);
  dl_optim *opt;
  dl_tape tp;
  dl_tensor *x = dl_tensor_make(ctx, DL_I64, DL_SHAPE(B, T)), *y = dl_tensor_make(ctx, DL_I64, DL_SHAPE(B * T));
  dl_rng r = dl_rng_make(7);
  double t0 = 0;
  int s;
  int64_t i;
  ac.beta2 = 0.95;
  ac.weight_decay = 0.1;
  ac.decoupled = 1;
  opt = dl_optim_adam(m, &ac);
  if (!m || !opt || !x || !y || dl_tape_init(&tp, ctx, 0) != DL_OK) return fprintf(stderr, "out of memory\n"), 1;
  for (i = 0; i < B * T; i++) {
    dl_i64(x)[i] = (int64_t)dl_rng_below(&r, 256);
    dl_i64(y)[i] = (int64_t)dl_rng_below(&r, 256);
  }
  for (s = 0; s < steps + 3; s++) {
    dl_tensor *lg, *loss;
    if (s == 3) t0 = bench_now();
    lg = dl_model_forward(m, &tp, x);
    loss = dl_t_cross_entropy(&tp, dl_t_reshape(&tp, lg, 2, (const int64_t[]){B * T, 256}), y, 0, DL_REDUCE_MEAN);
    dl_train_step(opt, &tp, loss, &(dl_step_desc){.clip_norm = 1.0});
    dl_tape_rewind(&tp);
  }
  printf("tokens_per_s=%.1f max_rss_kb=%ld\n", (double)(B * T * steps) / (bench_now() - t0), max_rss_kb());
  dl_tape_free(&tp);
  dl_optim_free(opt);
  dl_model_free(m);
  dl_tensor_free(x);
  dl_tensor_free(y);
  return 0;
}

static int gen(dl_ctx *ctx, int64_t T) {
  dl_layer *gpt;
  dl_model *m = make(ctx, T, &gpt);
  int64_t *a = (int64_t *)malloc(sizeof(int64_t) * (size_t)T), *b = (int64_t *)malloc(sizeof(int64_t) * (size_t)T);
  const int64_t prompt = '%';
  const dl_sample_desc sd = {0.8, 40, 0.95};
  dl_rng r1 = dl_rng_make(3), r2 = dl_rng_make(3);
  double t0, tc, tr;
  if (!m || !a || !b) return fprintf(stderr, "out of memory\n"), 1;
  t0 = bench_now();
  if (dl_gpt_generate(gpt, &prompt, 1, T - 1, &sd, &r1, 1, a) != DL_OK) return 1;
  tc = bench_now() - t0;
  t0 = bench_now();
  if (dl_gpt_generate(gpt, &prompt, 1, T - 1, &sd, &r2, 0, b) != DL_OK) return 1;
  tr = bench_now() - t0;
  printf("cache_tokens_per_s=%.1f recompute_tokens_per_s=%.1f same_tokens=%d\n", (double)(T - 1) / tc,
         (double)(T - 1) / tr, memcmp(a, b, sizeof(int64_t) * (size_t)(T - 1)) == 0);
  free(a);
  free(b);
  dl_model_free(m);
  return 0;
}

static int attn(dl_ctx *ctx, int64_t T, int reps, int64_t B, int64_t H, int64_t D) {
  dl_rng r = dl_rng_make(5);
  dl_tensor *q = dl_tensor_make(ctx, DL_F32, DL_SHAPE(B, H, T, D)), *k = dl_tensor_make(ctx, DL_F32, DL_SHAPE(B, H, T, D));
  dl_tensor *v = dl_tensor_make(ctx, DL_F32, DL_SHAPE(B, H, T, D)), *gy = dl_tensor_make(ctx, DL_F32, DL_SHAPE(B, H, T, D));
  dl_tensor *x = dl_tensor_make(ctx, DL_F32, DL_SHAPE(B, T, 3 * H * D)), *gx = dl_tensor_make(ctx, DL_F32, DL_SHAPE(B, T, H * D));
  double *t = (double *)malloc(sizeof(double) * 4 * (size_t)(reps + 3)), m[4];
  dl_tape tp;
  int i, w;
  if (!q || !k || !v || !gy || !x || !gx || !t || dl_tape_init(&tp, ctx, 0) != DL_OK)
    return fprintf(stderr, "out of memory\n"), 1;
  dl_tensor_rand_normal(q, &r, 0, 1);
  dl_tensor_rand_normal(k, &r, 0, 1);
  dl_tensor_rand_normal(v, &r, 0, 1);
  dl_tensor_rand_normal(gy, &r, 0, 1);
  dl_tensor_rand_normal(x, &r, 0, 1);
  dl_tensor_rand_normal(gx, &r, 0, 1);
  dl_requires_grad(q);
  dl_requires_grad(k);
  dl_requires_grad(v);
  dl_requires_grad(x);
  for (w = 0; w < 2; w++)
    for (i = 0; i < reps + 3; i++) {
      double t0 = bench_now(), t1;
      dl_tensor *y = w ? dl_t_attention_qkv(&tp, x, H, 1) : dl_t_scaled_dot_product_attention(&tp, q, k, v, 1, 0);
      t1 = bench_now();
      dl_backward(&tp, y, w ? gx : gy);
      if (i >= 3) {
        t[(2 * w) * reps + i - 3] = t1 - t0;
        t[(2 * w + 1) * reps + i - 3] = bench_now() - t1;
      }
      dl_tape_rewind(&tp);
    }
  for (i = 0; i < 4; i++) m[i] = bench_median(t + i * reps, reps) * 1e6;
  printf("attn_fwd_us=%.1f attn_bwd_us=%.1f qkv_fwd_us=%.1f qkv_bwd_us=%.1f\n", m[0], m[1], m[2], m[3]);
  dl_tape_free(&tp);
  dl_tensor_free(q);
  dl_tensor_free(k);
  dl_tensor_free(v);
  dl_tensor_free(gy);
  dl_tensor_free(x);
  dl_tensor_free(gx);
  free(t);
  return 0;
}

int main(int argc, char **argv) {
  dl_ctx ctx;
  int threads;
  if (argc < 4 || (strcmp(argv[1], "train") != 0 && strcmp(argv[1], "gen") != 0 && strcmp(argv[1], "attn") != 0))
    return fprintf(stderr, "usage: %s train THREADS T STEPS [B] | gen THREADS T | attn THREADS T REPS [B H D]\n",
                   argv[0]), 2;
  threads = atoi(argv[2]);
  dl_ctx_init(&ctx, &(dl_ctx_desc){.threads = threads});
  if (strcmp(argv[1], "gen") == 0) return gen(&ctx, atoll(argv[3]));
  if (strcmp(argv[1], "attn") == 0) {
    const int reps = argc > 4 ? atoi(argv[4]) : 20;
    if (reps < 1) return 2;
    return argc > 7 ? attn(&ctx, atoll(argv[3]), reps, atoll(argv[5]), atoll(argv[6]), atoll(argv[7]))
                    : attn(&ctx, atoll(argv[3]), reps, 8, 4, 64);
  }
  if (argc < 5) return 2;
  return train(&ctx, atoll(argv[3]), atoi(argv[4]), argc > 5 ? atoll(argv[5]) : 8);
}
