/* examples/gpt.c - a byte-level GPT trained on the fortune cookies of
 * Debian's `fortunes` package (dl/transformer.h).
 *
 * The text and its split are char_lm.c's: every regular file without a dot
 * in its name in /usr/share/games/fortunes (--data DIR), ascii-art skipped,
 * fortune k held out as test text when k % 10 == 9; each fortune followed by
 * a "%" line. Tokens are the bytes (256).
 *
 * Model: nanoGPT's GPT-2 (dl_gpt_make): token and learned position
 * embeddings, --layers (4) pre-norm blocks of --heads (4) causal heads,
 * width --embed (256), MLP 4x with exact GELU, final LayerNorm, the head
 * tied to the token embedding; context --ctx (128). --rope: rotary
 * embeddings instead of learned positions; --swiglu, --rmsnorm; --shift:
 * token shift (each block's normed inputs mix in the previous position's,
 * dl_block_desc.shift), which learns far more per byte on this text.
 *
 * Training: the training text cut into windows of --ctx + 1 bytes, one
 * every --ctx bytes, each a sample (inputs the first ctx bytes, targets the
 * last ctx); shuffled mini-batches of --batch (8); cross-entropy at every
 * position; AdamW (betas 0.9, 0.95, weight decay 0.1 on the matrices only)
 * with a linear warmup over the first --warmup (100) steps and a cosine
 * decay to lr/10 over the run; the gradient's global norm clipped to 1.
 * --dropout (0). The data order, the optimizer and the dropout streams are
 * checkpointed (--checkpoint / --resume continue bit for bit; --stop-after
 * splits a run). --threads 0 by default (OpenMP's choice).
 *
 * Evaluation: every byte of the test text after its first is predicted
 * once, from windows of ctx bytes overlapping by half (each scored byte sees
 * at least ctx/2 before it); --eval-chars N: the first N only. Reported:
 * bits per byte and next-byte accuracy. Then --samples (3) fortunes
 * sampled with the KV cache (dl_gpt_generate; --temp 0.8, --top-k 40,
 * --top-p 0.95, seeded by --seed), and one line
 *   result: test_acc=... epochs=... train_samples_per_s=... wall_s=... test_bpb=... steps=... weights=...
 * (a sample in train_samples_per_s is a byte).
 *
 * Weights (--save, safetensors) have nanoGPT's names (transformer.wte.weight,
 * transformer.h.0.attn.c_attn.weight, ...): tools/gpt_reference.py's
 * PyTorch model loads them with load_state_dict (strict).
 *
 * Build:
 *   cc -std=c11 -O2 -Iinclude examples/gpt.c -o gpt -lm
 * faster (threads, vectorised loops, OpenBLAS GEMM):
 *   cc -std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude examples/gpt.c -o gpt -lopenblas -lm
 * Run:  ./gpt                    (./gpt --help for the flags)
 *       ./gpt --load runs/gpt/gpt.safetensors --eval --temp 0.7
 *
 * Link flags for tests/run.sh (none beyond -lm):
 * dl-example-flags:
 */
#if defined(__has_include)
#if __has_include(<stb/stb_image_write.h>)
#define DL_USE_STB_IMAGE_WRITE
#endif
#endif
#include "dl.h"
#include "fortunes.h" /* the texts: fortunes_load */

#define VOCAB 256

/* Sizes and the sampling settings (flags beyond the standard ones). */
typedef struct gpt_opts {
  int64_t embed, layers, heads, ctx, warmup, samples, sample_len, eval_chars, top_k;
  int64_t rope, swiglu, rmsnorm, shift;
  double temp, top_p, dropout, wd;
} gpt_opts;

/* Everything the program owns, zeroed first so that one cleanup frees it
 * whatever step failed. */
typedef struct prog {
  dl_ctx ctx;
  fortunes f;                        /* the training and test texts */
  dl_dataset train_all, train;       /* windows of train_text */
  dl_batcher tb;
  dl_model *m;
  dl_layer *gpt;
  dl_optim *opt;
  dl_tape tp;
  dl_run r;
  dl_gpu *gpu;                       /* --device cuda */
  dl_tensor *ex, *ey;                /* evaluation windows, i64 [EVAL_BATCH, ctx] */
  dl_train_paths paths; /* runs/gpt/... for the outputs the flags do not name */
} prog;

#define EVAL_BATCH 32

static int fail(prog *p, const char *argv0) {
  fprintf(stderr, "%s: %s\n", argv0, dl_ctx_message(&p->ctx));
  return 1;
}

/* >>model ------------------------------------------------------------------------ */

static dl_model *make_gpt(dl_ctx *ctx, uint64_t seed, const gpt_opts *go, dl_layer **gpt) {
  dl_model *m = dl_model_make(ctx, &(dl_model_desc){.dtype = DL_F32, .seed = seed});
  dl_gpt_desc g;
  memset(&g, 0, sizeof g);
  g.vocab = VOCAB;
  g.context = go->ctx;
  g.embed = go->embed;
  g.layers = (int)go->layers;
  g.heads = (int)go->heads;
  g.rope = (int)go->rope;
  g.dropout = go->dropout;
  g.block.mlp = go->swiglu ? DL_TF_SWIGLU : DL_TF_GELU;
  g.block.norm = go->rmsnorm ? DL_TF_RMSNORM : DL_TF_LAYERNORM;
  g.block.shift = (int)go->shift;
  *gpt = dl_gpt_make(m, NULL, "transformer", &g); /* [B, T] -> [B, T, 256] */
  return m;
}

/* Log-probability (natural log) of class y in row z[0..V) and whether it is the argmax. */
static double row_logp(const float *z, int64_t y, int *hit) {
  double mx = z[0], s = 0;
  int64_t i, arg = 0;
  for (i = 1; i < VOCAB; i++)
    if (z[i] > mx) mx = z[i], arg = i;
  for (i = 0; i < VOCAB; i++) s += exp((double)z[i] - mx);
  *hit = arg == y;
  return (double)z[y] - mx - log(s);
}

/* The model on text tok[0..L): every byte after the first predicted once,
 * by windows of T that overlap by T/2. Mean nats per byte and next-byte
 * accuracy. */
static void eval_text(prog *p, const uint8_t *tok, int64_t L, double *nats, double *acc) {
  const int64_t T = p->ex->shape[1], W = T / 2, S = T - W;
  int64_t k = 0, count = 0, correct = 0;
  double sum = 0;
  int was = p->m->training;
  dl_model_train(p->m, 0);
  dl_no_grad_begin(&p->tp);
  for (;;) {
    int64_t nb = 0, b, j;
    int64_t *x = dl_i64(p->ex), *y = dl_i64(p->ey);
    int64_t from[EVAL_BATCH], to[EVAL_BATCH];
    dl_tensor xv;
    dl_tensor *lg;
    const float *z;
    for (; nb < EVAL_BATCH; k++) {
      const int64_t s = k * S, j0 = k ? W : 0;
      if (s + j0 + 1 > L - 1) break;
      from[nb] = j0;
      to[nb] = T < L - 1 - s ? T : L - 1 - s;
      for (j = 0; j < T; j++) {
        x[nb * T + j] = s + j < L ? tok[s + j] : 0;
        y[nb * T + j] = s + j + 1 < L ? tok[s + j + 1] : 0;
      }
      nb++;
    }
    if (!nb) break;
    xv = dl_view_slice(p->ex, 0, 0, nb, 1);
    lg = dl_tape_host(&p->tp, dl_model_forward(p->m, &p->tp, dl_tape_input(&p->tp, &xv)));
    if (!dl_tensor_is_contiguous(lg)) lg = dl_tensor_contiguous(dl_tape_arena(&p->tp), lg);
    z = dl_f32(lg);
    for (b = 0; b < nb; b++)
      for (j = from[b]; j < to[b]; j++) {
        int hit;
        sum -= row_logp(z + (b * T + j) * VOCAB, y[b * T + j], &hit);
        correct += hit;
        count++;
      }
    dl_tape_rewind(&p->tp);
  }
  dl_no_grad_end(&p->tp);
  dl_model_train(p->m, was);
  *nats = count ? sum / (double)count : (double)NAN;
  *acc = count ? (double)correct / (double)count : (double)NAN;
}

/* n fortunes, each generated after the prompt "%\n" with the KV cache, up to
 * len bytes or the next "%" line; seeded. On the host (a model trained on
 * the GPU is copied back first). */
static dl_status print_samples(prog *p, const gpt_opts *go, uint64_t seed) {
  dl_ctx *ctx = &p->ctx;
  const dl_sample_desc sd = {go->temp, (int)go->top_k, go->top_p};
  dl_rng rng = dl_rng_make(seed ^ 0x5a4d504c45ULL);
  int64_t *out, i, j, n;
  const int64_t prompt[2] = {'%', '\n'};
  if (go->samples < 1) return DL_OK;
  if (!(out = (int64_t *)malloc(sizeof *out * (size_t)go->sample_len))) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
  printf("samples (temperature %g, top-k %lld, top-p %g):\n", go->temp, (long long)go->top_k, go->top_p);
  for (i = 0; i < go->samples; i++) {
    dl_status st = dl_gpt_generate(p->gpt, prompt, 2, go->sample_len, &sd, &rng, 1, out);
    int cut = 1;
    if (st != DL_OK) {
      free(out);
      return dl_fail(ctx, st, "out of memory while sampling");
    }
    for (n = 0; n < go->sample_len; n++) /* a "%" line ends the fortune */
      if (out[n] == '%' && (n == 0 || out[n - 1] == '\n') && (n + 1 == go->sample_len || out[n + 1] == '\n')) {
        cut = 0;
        break;
      }
    printf("--- %lld%s\n", (long long)i + 1, cut ? " (cut at --sample-len)" : "");
    for (j = 0; j < n; j++) {
      const int c = (int)out[j];
      putchar(c == '\n' || c == '\t' || (c >= 32 && c < 127) ? c : '?');
    }
    if (n == 0 || out[n - 1] != '\n') putchar('\n');
  }
  printf("---\n");
  free(out);
  return DL_OK;
}

/* >>run ------------------------------------------------------------------------ */

static int run(prog *p, dl_train_opts *o, const gpt_opts *go, const char *argv0) {
  dl_ctx *ctx = &p->ctx;
  const int64_t T = go->ctx;
  double test_nats = NAN, test_acc = NAN;
  int64_t steps_per_epoch, total_steps, nfiles, nfortunes, L;
  const dl_step_desc clip = {.clip_norm = 1.0};
  dl_adam_cfg ac;
  char title[128];
  if (dl_train_default_outputs(ctx, o, "gpt", &p->paths, stdout, 1) != DL_OK) return fail(p, argv0);

  if (fortunes_load(ctx, &p->f, o->data) != DL_OK) return fail(p, argv0);
  nfiles = p->f.nfiles;
  nfortunes = p->f.nfortunes;
  L = go->eval_chars > 0 && go->eval_chars < p->f.test->numel ? go->eval_chars : p->f.test->numel;
  if (L < 2) L = 2;
  if (dl_text_windows(ctx, &p->train_all, p->f.train, T, T, 0) != DL_OK) return fail(p, argv0);
  if (o->subset > 0 && o->subset < p->train_all.n) {
    int64_t *pick = dl_alloc(ctx, (size_t)o->subset * sizeof *pick), i;
    if (!pick) return fail(p, argv0);
    for (i = 0; i < o->subset; i++) pick[i] = i * p->train_all.n / o->subset;
    if (dl_dataset_subset(ctx, &p->train_all, pick, o->subset, &p->train) != DL_OK) return dl_free(ctx, pick), fail(p, argv0);
    dl_free(ctx, pick);
  } else {
    p->train = p->train_all;
    p->train.own = 0;
    p->train.names_block = NULL;
  }
  if (dl_batcher_make(ctx, &p->tb, &p->train,
                      &(dl_batcher_desc){.batch_size = o->batch, .shuffle = {.seed = (uint64_t)o->seed}}) != DL_OK)
    return fail(p, argv0);
  steps_per_epoch = (p->train.n + o->batch - 1) / o->batch;
  total_steps = steps_per_epoch * o->epochs;

  p->m = make_gpt(ctx, (uint64_t)o->seed, go, &p->gpt);
  if (!p->m || dl_model_status(p->m) != DL_OK) return fail(p, argv0);
  if (dl_train_device(ctx, o, p->m, &p->gpu) != DL_OK) return fail(p, argv0); /* before the optimizer */
  /* text-window batches are made on the host; dl_tape_input moves each one to the GPU */
  /* AdamW as nanoGPT: decay on the matrices (the layers' weights), none on biases and norms */
  ac = dl_adam_defaults(o->lr);
  ac.beta2 = 0.95;
  ac.weight_decay = go->wd;
  ac.decoupled = 1;
  if (!(p->opt = dl_optim_adam(p->m, &ac)) || dl_tape_init(&p->tp, ctx, 0) != DL_OK ||
      (p->gpu && dl_tape_use_gpu(&p->tp, p->gpu) != DL_OK) ||
      !(p->ex = dl_tensor_make(ctx, DL_I64, DL_SHAPE(EVAL_BATCH, T))) ||
      !(p->ey = dl_tensor_make(ctx, DL_I64, DL_SHAPE(EVAL_BATCH, T))))
    return fail(p, argv0);
  snprintf(title, sizeof title, "GPT %lld x %lld, fortunes", (long long)go->layers, (long long)go->embed);
  if (dl_run_begin(&p->r, ctx, &(dl_run_desc){.opts = o, .model = p->m, .optim = p->opt, .batcher = &p->tb,
                                              .steps_per_epoch = steps_per_epoch, .title = title}) != DL_OK) {
    dl_run_print_error(&p->r, stderr, argv0);
    return 1;
  }
  if (!o->eval) {
    printf("fortunes: %lld files, %lld fortunes: %lld training bytes (%lld windows of %lld, %lld trained on: "
           "%lld steps of %lld per epoch), %lld test bytes, %d threads\n",
           (long long)nfiles, (long long)nfortunes, (long long)p->f.train->numel, (long long)p->train_all.n,
           (long long)T, (long long)p->train.n, (long long)steps_per_epoch, (long long)o->batch,
           (long long)p->f.test->numel, dl_ctx_threads(ctx));
    if (p->gpu) printf("device: %s\n", dl_gpu_name(p->gpu));
    if (L < p->f.test->numel) printf("evaluating on the first %lld test bytes (--eval-chars)\n", (long long)L);
    if (dl_model_summary(p->m, stdout, NULL) != DL_OK) return fail(p, argv0);
    if (p->r.epoch > 0)
      printf("resumed from %s after epoch %lld (step %lld)\n", o->resume, (long long)p->r.epoch, (long long)p->r.step);
  }

  while (dl_run_next_epoch(&p->r)) {
    dl_gpu *graphs = o->no_graphs ? NULL : p->gpu; /* on the GPU: each step replayed as CUDA graphs */
    dl_batch b;
    int more;
    while ((more = dl_train_next(graphs, &p->tb, &b)) > 0) {
      const int64_t n = b.size * T;
      dl_tensor *logits, *loss, *flat, yv;
      yv = dl_view_reshape(b.y, 1, &n); /* the labels stay on the host: the loss checks them there */
      dl_optim_set_lr(p->opt, dl_lr_cosine_warmup(o->lr, p->r.step, go->warmup, total_steps, o->lr / 10));
      logits = dl_model_forward(p->m, &p->tp, dl_tape_input(&p->tp, b.x)); /* [B, T, 256] */
      flat = dl_t_reshape(&p->tp, logits, 2, (const int64_t[]){n, VOCAB});
      loss = dl_t_cross_entropy(&p->tp, flat, &yv, 0, DL_REDUCE_MEAN);
      dl_run_step_async(&p->r, n, loss, flat, &yv); /* on the GPU: read a step later, nothing waits */
      dl_train_step_nowait(p->opt, &p->tp, loss, &clip);
      if (dl_gpu_graph_end(graphs) != DL_OK) return fail(p, argv0);
      dl_tape_rewind(&p->tp);
    }
    if (more < 0) return fail(p, argv0);
    dl_run_flush(&p->r); /* the epoch's last step counted before the evaluation */
    eval_text(p, dl_u8(p->f.test), L, &test_nats, &test_acc);
    if (dl_run_end_epoch(&p->r, test_nats, test_acc) != DL_OK) return fail(p, argv0);
  }

  if (o->eval || p->r.epoch == p->r.first_epoch)
    eval_text(p, dl_u8(p->f.test), L, &test_nats, &test_acc);
  printf("test text (%lld bytes predicted): %.4f bits per byte, next-byte accuracy %.4f\n", (long long)L - 1,
         test_nats / log(2.0), test_acc);
  if (p->gpu && dl_model_to_host(p->m) != DL_OK) return fail(p, argv0); /* sampling runs on the host */
  if (print_samples(p, go, (uint64_t)o->seed) != DL_OK) return fail(p, argv0);
  if (dl_run_finish(&p->r) != DL_OK) return fail(p, argv0);
  if (!o->eval && o->save) printf("weights: %s\n", o->save);
  if (!o->eval && o->chart && p->r.epoch > p->r.first_epoch) printf("chart: %s\n", o->chart);
  dl_run_result(&p->r, stdout, test_acc, "test_bpb=%.4f test_bytes=%lld steps=%lld weights=%s", test_nats / log(2.0),
                (long long)L - 1, (long long)p->r.step, o->eval || !o->save ? "-" : o->save);
  return 0;
}

int main(int argc, char **argv) {
  dl_train_opts o = {.epochs = 1, .batch = 8, .lr = 1e-3, .seed = 1, .threads = 0,
                     .data = "/usr/share/games/fortunes"};
  gpt_opts go = {.embed = 256, .layers = 4, .heads = 4, .ctx = 128, .warmup = 100, .samples = 3,
                 .sample_len = 400, .top_k = 40, .temp = 0.8, .top_p = 0.95, .wd = 0.1};
  dl_flag fl[DL_TRAIN_NFLAGS + 20];
  int nf = dl_train_flags(&o, fl), rc, i;
  prog *p = calloc(1, sizeof *p);
  const char *const argv0 = argv[0];
  jmp_buf oom;
  dl_gpu *gpu;
  if (!p) return fprintf(stderr, "%s: out of memory\n", argv[0]), 1;
  for (i = 0; i < nf; i++)
    if (strcmp(fl[i].name, "subset") == 0) fl[i].help = "train on N windows spread evenly over the text (0: all)";
  fl[nf++] = (dl_flag){"embed", DL_FLAG_I64, &go.embed, 1, 8192, "model width", "N"};
  fl[nf++] = (dl_flag){"layers", DL_FLAG_I64, &go.layers, 1, 256, "transformer blocks", "N"};
  fl[nf++] = (dl_flag){"heads", DL_FLAG_I64, &go.heads, 1, 256, "attention heads (divide --embed)", "N"};
  fl[nf++] = (dl_flag){"ctx", DL_FLAG_I64, &go.ctx, 2, 1 << 20, "context: bytes per training window", "N"};
  fl[nf++] = (dl_flag){"warmup", DL_FLAG_I64, &go.warmup, 0, 1e12, "learning-rate warmup steps", "N"};
  fl[nf++] = (dl_flag){"dropout", DL_FLAG_F64, &go.dropout, 0, 0.99, "embedding and residual dropout", "P"};
  fl[nf++] = (dl_flag){"wd", DL_FLAG_F64, &go.wd, 0, 10, "AdamW weight decay (matrices only)", "X"};
  fl[nf++] = (dl_flag){"rope", DL_FLAG_SWITCH, &go.rope, 0, 0, "rotary position embeddings instead of learned ones", NULL};
  fl[nf++] = (dl_flag){"swiglu", DL_FLAG_SWITCH, &go.swiglu, 0, 0, "SwiGLU MLP instead of GELU", NULL};
  fl[nf++] = (dl_flag){"rmsnorm", DL_FLAG_SWITCH, &go.rmsnorm, 0, 0, "RMSNorm instead of LayerNorm", NULL};
  fl[nf++] = (dl_flag){"shift", DL_FLAG_SWITCH, &go.shift, 0, 0,
                       "token shift: each block's inputs mix in the previous position's", NULL};
  fl[nf++] = (dl_flag){"eval-chars", DL_FLAG_I64, &go.eval_chars, 0, 1e15, "evaluate on the first N test bytes (0: all)", "N"};
  fl[nf++] = (dl_flag){"samples", DL_FLAG_I64, &go.samples, 0, 1000, "fortunes to sample at the end", "N"};
  fl[nf++] = (dl_flag){"sample-len", DL_FLAG_I64, &go.sample_len, 1, 1000000, "longest sample, in bytes", "N"};
  fl[nf++] = (dl_flag){"temp", DL_FLAG_F64, &go.temp, 0, 100, "sampling temperature (0: greedy)", "X"};
  fl[nf++] = (dl_flag){"top-k", DL_FLAG_I64, &go.top_k, 0, VOCAB, "sample from the k most likely bytes (0: all)", "N"};
  fl[nf++] = (dl_flag){"top-p", DL_FLAG_F64, &go.top_p, 0, 1, "nucleus: the smallest set of this probability (0 or 1: all)", "X"};
  dl_ctx_init(&p->ctx, NULL);
  if (dl_flags_main(&p->ctx, argc, argv, fl, nf, NULL, 0, NULL,
                    "Train a byte-level GPT on Debian's fortune cookies.") != DL_OK)
    rc = 2;
  else if (dl_train_opts_check(&p->ctx, &o) != DL_OK)
    rc = 2, fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&p->ctx));
  else if (go.embed % go.heads || (go.rope && (go.embed / go.heads) % 2))
    rc = 2, fprintf(stderr, "%s: --heads %lld must divide --embed %lld (into an even width with --rope)\n", argv[0],
                    (long long)go.heads, (long long)go.embed);
  else {
    dl_ctx_init(&p->ctx, &(dl_ctx_desc){.threads = (int)o.threads});
    dl_ctx_on_nomem(&p->ctx, &oom);
    if (setjmp(oom))
      rc = fail(p, argv0);
    else
      rc = run(p, &o, &go, argv[0]);
    dl_ctx_on_nomem(&p->ctx, NULL);
  }
  gpu = p->gpu;
  dl_run_free(&p->r);
  dl_tape_free(&p->tp);
  dl_optim_free(p->opt);
  dl_model_free(p->m);
  dl_batcher_free(&p->tb);
  dl_dataset_free(&p->train);
  dl_dataset_free(&p->train_all);
  fortunes_free(&p->f);
  dl_tensor_free(p->ex);
  dl_tensor_free(p->ey);
  free(p);
  dl_gpu_close(gpu); /* after everything on it */
  return rc;
}
