/* examples/char_lm.c - a character-level language model (Embedding -> LSTM ->
 * Linear) trained on the fortune cookies of Debian's `fortunes` package.
 *
 * The text: every regular file without a dot in its name in
 * /usr/share/games/fortunes (--data DIR for another place; the .dat index
 * files and the .u8 links are skipped that way), except ascii-art (pictures,
 * not language), read in bytewise order of their names. A file is a list of
 * fortunes separated by lines holding only "%"; fortune k of that list (k =
 * 0, 1, ... over all files) is held out as test text when k % 10 == 9, the
 * rest is the training text. Either text is its fortunes, each followed by a
 * "%" line, so the model learns where a fortune ends. Tokens are the bytes
 * (256 classes, the few UTF-8 and backspace bytes included). On the Debian
 * files: 2.3 M training characters, 0.25 M test characters.
 *
 * Model: Embedding(256, 64) -> LSTM(64, 256, 1 layer) -> Linear(256, 256)
 * (--embed, --hidden, --layers), PyTorch's initialisation.
 *
 * Training: the training text cut into windows of --seq (50) characters,
 * not overlapping, each a sample that starts from a zero LSTM state;
 * shuffled mini-batches of 16 windows, cross-entropy on every position (the
 * next byte), Adam with a cosine learning rate from --lr (0.01) to 0 over
 * the run, the gradient norm clipped to 1. Many small steps learn faster
 * here than few large ones. --subset N trains on N windows spread evenly
 * over the training text. The data order is checkpointed with the rest
 * (--checkpoint / --resume continue bit for bit; --stop-after to split a
 * run). One thread by default (see main).
 *
 * Evaluation: every character of the test text after its first is predicted
 * once, from windows of --seq characters that overlap by half (each scored
 * character sees at least seq/2 characters before it); --eval-chars N: the
 * first N characters only. Reported: bits per character, next-character
 * accuracy, and the bits per character of a unigram model (the byte
 * frequencies of the whole training text, add-one smoothed over the 256
 * bytes) on the same characters. Then a few fortunes sampled from the model
 * (seeded by --seed; --temp, --samples, --sample-len), and one line
 *   result: test_acc=0.5179 epochs=1 train_samples_per_s=16000.9 wall_s=156.05 test_bpc=2.3955
 *           unigram_bpc=4.7784 test_chars=262037 steps=2886 weights=runs/char_lm/char_lm.safetensors
 * (one line; test_acc: next-character accuracy; a sample in
 * train_samples_per_s is a character). That is the default run, built as
 * below with OpenBLAS, on 2 cores that other programs kept busy.
 *
 * Weights (--save, safetensors) have PyTorch's names: torch 1.13 takes them
 * with load_state_dict (strict) and gives the same bits per character for
 *   class CharLM(nn.Module):   # the default sizes
 *     def __init__(s): super().__init__(); s.embed = nn.Embedding(256, 64)
 *       s.lstm = nn.LSTM(64, 256, 1, batch_first=True); s.head = nn.Linear(256, 256)
 *     def forward(s, x): return s.head(s.lstm(s.embed(x))[0])
 *
 * On a GPU (--device cuda, a build with DL_USE_CUDA as in dl/gpu.h): the
 * model and its training on the device, the windows made on the host and
 * sent each step, each step's device work replayed as CUDA graphs
 * (--no-graphs: not), the loss and accuracy read a step late; evaluation
 * reads the logits back, sampling runs on the host.
 *
 * Build:
 *   cc -std=c11 -O2 -Iinclude examples/char_lm.c -o char_lm -lm
 * faster (threads, vectorised loops, OpenBLAS GEMM):
 *   cc -std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude examples/char_lm.c \
 *      -o char_lm -lopenblas -lm
 * Run:  ./char_lm                    (./char_lm --help for the flags)
 *       ./char_lm --load runs/char_lm/char_lm.safetensors --eval --temp 0.5
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
typedef struct lm_opts {
  int64_t embed, hidden, layers, seq, samples, sample_len, eval_chars;
  double temp;
} lm_opts;

/* Everything the program owns, zeroed first so that one cleanup frees it
 * whatever step failed. */
typedef struct prog {
  dl_ctx ctx;
  fortunes f;                        /* the training and test texts */
  dl_dataset train_all, train;       /* windows of train_text */
  dl_batcher tb;
  dl_model *m;
  dl_optim *opt;
  dl_tape tp;
  dl_run r;
  dl_tensor *ex, *ey;                /* evaluation windows, i64 [EVAL_BATCH, seq] */
  dl_tensor *sx, *sh, *sc;           /* sampling: input i64 [n, 1], state f32 [layers, n, hidden] */
  dl_gpu *gpu;                       /* --device cuda */
  dl_train_paths paths; /* runs/char_lm/... for the outputs the flags do not name */
} prog;

#define EVAL_BATCH 64

static int fail(prog *p, const char *argv0) {
  fprintf(stderr, "%s: %s\n", argv0, dl_ctx_message(&p->ctx));
  return 1;
}

/* >>model ------------------------------------------------------------------------ */

static dl_model *make_lm(dl_ctx *ctx, uint64_t seed, const lm_opts *lo) {
  dl_model *m = dl_model_make(ctx, &(dl_model_desc){.dtype = DL_F32, .seed = seed});
  dl_embedding_make(m, NULL, "embed", &(dl_embedding_desc){.num = VOCAB, .dim = lo->embed});      /* [B, T] -> [B, T, E] */
  dl_lstm_make(m, NULL, "lstm", &(dl_rnn_desc){.input = lo->embed, .hidden = lo->hidden, .num_layers = (int)lo->layers});
  dl_linear_make(m, NULL, "head", &(dl_linear_desc){.in = lo->hidden, .out = VOCAB});             /* -> [B, T, 256] */
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

/* The model on text tok[0..L): every character after the first predicted
 * once, by windows of T that overlap by T/2. Mean nats per character and
 * next-character accuracy. */
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
    /* window k: inputs tok[kS, kS + T), targets one later, scored from j0 */
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
    lg = dl_tape_host(&p->tp, dl_model_forward(p->m, &p->tp, dl_tape_input(&p->tp, &xv))); /* the GPU's: read back */
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

/* Bits per character of the unigram model of the training text (add-one
 * smoothing over the 256 bytes) on the test text's characters after its first. */
static double unigram_bpc(const dl_tensor *train, const uint8_t *t, int64_t L) {
  double cnt[VOCAB], total = (double)train->numel + VOCAB, bits = 0;
  const uint8_t *a = dl_u8(train);
  int64_t i;
  for (i = 0; i < VOCAB; i++) cnt[i] = 1;
  for (i = 0; i < train->numel; i++) cnt[a[i]] += 1;
  for (i = 1; i < L; i++) bits -= log2(cnt[t[i]] / total);
  return bits / (double)(L - 1);
}

/* n fortunes sampled in parallel, each started after a "%" line, up to len
 * characters or the next "%" line; temperature temp; seeded. */
static dl_status print_samples(prog *p, const lm_opts *lo, uint64_t seed) {
  dl_ctx *ctx = &p->ctx;
  const int64_t n = lo->samples, len = lo->sample_len;
  dl_layer *emb = dl_model_layer(p->m, "embed"), *lstm = dl_model_layer(p->m, "lstm"), *head = dl_model_layer(p->m, "head");
  dl_rng rng = dl_rng_make(seed ^ 0x5a4d504c45ULL);
  char *out;
  int64_t *olen, i, t;
  int *done;
  int was = p->m->training;
  if (n < 1) return DL_OK;
  p->sx = dl_tensor_make(ctx, DL_I64, DL_SHAPE(n, 1));
  p->sh = dl_tensor_make(ctx, DL_F32, DL_SHAPE(lo->layers, n, lo->hidden));
  p->sc = dl_tensor_make(ctx, DL_F32, DL_SHAPE(lo->layers, n, lo->hidden));
  out = (char *)calloc((size_t)(n * (len + 1)), 1);
  olen = (int64_t *)calloc((size_t)n, sizeof *olen);
  done = (int *)calloc((size_t)n, sizeof *done);
  if (!p->sx || !p->sh || !p->sc || !out || !olen || !done) {
    free(out), free(olen), free(done);
    return dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
  }
  dl_tensor_fill(p->sh, 0);
  dl_tensor_fill(p->sc, 0);
  dl_model_train(p->m, 0);
  dl_no_grad_begin(&p->tp);
  /* the prompt "%\n", then one sampled character after another */
  for (t = 0; t < len + 1; t++) {
    dl_tensor *e, *y, *lg, *hn, *cn;
    int all = 1;
    for (i = 0; i < n; i++) dl_i64(p->sx)[i] = t == 0 ? '%' : t == 1 ? '\n' : (unsigned char)out[i * (len + 1) + t - 2];
    e = dl_layer_call(emb, &p->tp, p->sx);
    y = dl_rnn_forward(lstm, &p->tp, e, p->sh, p->sc, &hn, &cn);
    lg = dl_layer_call(head, &p->tp, y);
    if (!dl_tensor_is_contiguous(lg)) lg = dl_tensor_contiguous(dl_tape_arena(&p->tp), lg);
    dl_tensor_copy(p->sh, hn);
    dl_tensor_copy(p->sc, cn);
    if (t >= 1)
      for (i = 0; i < n; i++) {
        const float *z = dl_f32(lg) + i * VOCAB;
        double w[VOCAB], mx = z[0], s = 0, u;
        int c;
        char *o = out + i * (len + 1);
        if (done[i] || olen[i] >= len) { o[t - 1] = 0; continue; }
        for (c = 1; c < VOCAB; c++) mx = z[c] > mx ? z[c] : mx;
        for (c = 0; c < VOCAB; c++) s += (w[c] = exp(((double)z[c] - mx) / lo->temp));
        u = dl_rng_uniform(&rng) * s;
        for (c = 0; c < VOCAB - 1 && u >= w[c]; c++) u -= w[c];
        o[t - 1] = (char)c;
        olen[i] = t;
        /* a "%" line ends the fortune */
        if (c == '\n' && t >= 3 && o[t - 2] == '%' && o[t - 3] == '\n') done[i] = 1, olen[i] = t - 2;
      }
    dl_tape_rewind(&p->tp);
    for (i = 0; i < n; i++) all &= done[i] || olen[i] >= len;
    if (all) break;
  }
  dl_no_grad_end(&p->tp);
  dl_model_train(p->m, was);
  printf("samples (temperature %g):\n", lo->temp);
  for (i = 0; i < n; i++) {
    const char *o = out + i * (len + 1);
    int64_t j;
    printf("--- %lld%s\n", (long long)i + 1, done[i] ? "" : " (cut at --sample-len)");
    for (j = 0; j < olen[i]; j++) {
      unsigned char c = (unsigned char)o[j];
      putchar(c == '\n' || c == '\t' || (c >= 32 && c < 127) ? c : '?');
    }
    if (olen[i] == 0 || o[olen[i] - 1] != '\n') putchar('\n');
  }
  printf("---\n");
  free(out), free(olen), free(done);
  return DL_OK;
}

/* >>run ------------------------------------------------------------------------ */

static int run(prog *p, dl_train_opts *o, const lm_opts *lo, const char *argv0) {
  dl_ctx *ctx = &p->ctx;
  const int64_t T = lo->seq;
  double test_nats = NAN, test_acc = NAN, uni;
  int64_t steps_per_epoch, total_steps, nfiles, nfortunes, L;
  const dl_step_desc clip = {.clip_norm = 1.0};
  dl_adam_cfg ac;
  char title[128];
  /* --save, --csv, --chart not given: into runs/char_lm/, announced (never the current folder) */
  if (dl_train_default_outputs(ctx, o, "char_lm", &p->paths, stdout, 1) != DL_OK) return fail(p, argv0);

  if (fortunes_load(ctx, &p->f, o->data) != DL_OK) return fail(p, argv0);
  nfiles = p->f.nfiles;
  nfortunes = p->f.nfortunes;
  L = lo->eval_chars > 0 && lo->eval_chars < p->f.test->numel ? lo->eval_chars : p->f.test->numel;
  if (L < 2) L = 2; /* one character predicted at least */
  if (dl_text_windows(ctx, &p->train_all, p->f.train, T, T, 0) != DL_OK) return fail(p, argv0);
  if (o->subset > 0 && o->subset < p->train_all.n) {
    /* --subset N: N windows spread evenly over the text */
    int64_t *pick = dl_alloc(ctx, (size_t)o->subset * sizeof *pick), i;
    if (!pick) return fail(p, argv0);
    for (i = 0; i < o->subset; i++) pick[i] = i * p->train_all.n / o->subset;
    if (dl_dataset_subset(ctx, &p->train_all, pick, o->subset, &p->train) != DL_OK) return dl_free(ctx, pick), fail(p, argv0);
    dl_free(ctx, pick);
  } else {
    p->train = p->train_all; /* borrowed: freeing this copy frees nothing */
    p->train.own = 0;
    p->train.names_block = NULL;
  }
  if (dl_batcher_make(ctx, &p->tb, &p->train,
                      &(dl_batcher_desc){.batch_size = o->batch, .shuffle = {.seed = (uint64_t)o->seed}}) != DL_OK)
    return fail(p, argv0);
  steps_per_epoch = (p->train.n + o->batch - 1) / o->batch;
  total_steps = steps_per_epoch * o->epochs;

  p->m = make_lm(ctx, (uint64_t)o->seed, lo);
  if (!p->m || dl_model_status(p->m) != DL_OK) return fail(p, argv0);
  if (dl_train_device(ctx, o, p->m, &p->gpu) != DL_OK) return fail(p, argv0); /* before the optimizer */
  ac = dl_adam_defaults(o->lr);
  if (!(p->opt = dl_optim_adam(p->m, &ac)) || dl_tape_init(&p->tp, ctx, 0) != DL_OK ||
      (p->gpu && dl_tape_use_gpu(&p->tp, p->gpu) != DL_OK) ||
      !(p->ex = dl_tensor_make(ctx, DL_I64, DL_SHAPE(EVAL_BATCH, T))) ||
      !(p->ey = dl_tensor_make(ctx, DL_I64, DL_SHAPE(EVAL_BATCH, T))))
    return fail(p, argv0);
  snprintf(title, sizeof title, "char LSTM %lldx%lld, fortunes", (long long)lo->layers, (long long)lo->hidden);
  if (dl_run_begin(&p->r, ctx, &(dl_run_desc){.opts = o, .model = p->m, .optim = p->opt, .batcher = &p->tb,
                                              .steps_per_epoch = steps_per_epoch, .title = title}) != DL_OK) {
    dl_run_print_error(&p->r, stderr, argv0);
    return 1;
  }
  if (!o->eval) {
    dl_tensor xv = dl_view_slice(p->ex, 0, 0, 1, 1);
    printf("fortunes: %lld files, %lld fortunes: %lld training characters (%lld windows of %lld, %lld trained on: "
           "%lld steps of %lld per epoch), %lld test characters, %d threads\n",
           (long long)nfiles, (long long)nfortunes, (long long)p->f.train->numel, (long long)p->train_all.n,
           (long long)T, (long long)p->train.n, (long long)steps_per_epoch, (long long)o->batch,
           (long long)p->f.test->numel, dl_ctx_threads(ctx));
    if (L < p->f.test->numel) printf("evaluating on the first %lld test characters (--eval-chars)\n", (long long)L);
    if (p->gpu) printf("device: %s\n", dl_gpu_name(p->gpu));
    memset(p->ex->data, 0, (size_t)T * sizeof(int64_t));
    if (dl_model_summary(p->m, stdout, p->gpu ? NULL : &xv) != DL_OK) return fail(p, argv0); /* a host pass */
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
      dl_optim_set_lr(p->opt, dl_lr_cosine_warmup(o->lr, p->r.step, 0, total_steps, 0));
      logits = dl_model_forward(p->m, &p->tp, dl_tape_input(&p->tp, b.x));     /* [B, T, 256] */
      flat = dl_t_reshape(&p->tp, logits, 2, (const int64_t[]){n, VOCAB});      /* [B*T, 256] */
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

  if (o->eval || p->r.epoch == p->r.first_epoch) /* not evaluated after a last epoch of this process */
    eval_text(p, dl_u8(p->f.test), L, &test_nats, &test_acc);
  uni = unigram_bpc(p->f.train, dl_u8(p->f.test), L);
  printf("test text (%lld characters predicted): %.4f bits per character, next-character accuracy %.4f; "
         "unigram model of the training text: %.4f bits per character\n",
         (long long)L - 1, test_nats / log(2.0), test_acc, uni);
  if (p->gpu) { /* sampling (one character at a time) and saving run on the host */
    dl_tape_free(&p->tp);
    if (dl_model_to_host(p->m) != DL_OK || dl_tape_init(&p->tp, ctx, 0) != DL_OK) return fail(p, argv0);
  }
  if (print_samples(p, lo, (uint64_t)o->seed) != DL_OK) return fail(p, argv0);
  if (dl_run_finish(&p->r) != DL_OK) return fail(p, argv0);
  if (!o->eval && o->save) printf("weights: %s\n", o->save);
  if (!o->eval && o->chart && p->r.epoch > p->r.first_epoch) printf("chart: %s\n", o->chart);
  dl_run_result(&p->r, stdout, test_acc, "test_bpc=%.4f unigram_bpc=%.4f test_chars=%lld steps=%lld weights=%s",
                test_nats / log(2.0), uni, (long long)L - 1, (long long)p->r.step,
                o->eval || !o->save ? "-" : o->save);
  return 0;
}

int main(int argc, char **argv) {
  /* one thread by default: a step's GEMMs ([16, 256] x [256, 1024] per character
   * position) are too small to share well, and on a busy machine threads that
   * wait for each other cost far more than they save (--threads 0: OpenMP's default) */
  dl_train_opts o = {.epochs = 1, .batch = 16, .lr = 1e-2, .seed = 1, .threads = 1,
                     .data = "/usr/share/games/fortunes"};
  lm_opts lo = {.embed = 64, .hidden = 256, .layers = 1, .seq = 50, .samples = 3, .sample_len = 400, .temp = 0.8};
  dl_flag fl[DL_TRAIN_NFLAGS + 8];
  int nf = dl_train_flags(&o, fl), rc, i;
  prog *p = calloc(1, sizeof *p);
  const char *const argv0 = argv[0]; /* read after a jump: not changed after setjmp */
  jmp_buf oom;
  if (!p) return fprintf(stderr, "%s: out of memory\n", argv[0]), 1;
  for (i = 0; i < nf; i++)
    if (strcmp(fl[i].name, "subset") == 0) fl[i].help = "train on N windows spread evenly over the text (0: all)";
  fl[nf++] = (dl_flag){"embed", DL_FLAG_I64, &lo.embed, 1, 4096, "embedding size", "N"};
  fl[nf++] = (dl_flag){"hidden", DL_FLAG_I64, &lo.hidden, 1, 8192, "LSTM hidden units", "N"};
  fl[nf++] = (dl_flag){"layers", DL_FLAG_I64, &lo.layers, 1, DL_RNN_MAX_LAYERS, "LSTM layers", "N"};
  fl[nf++] = (dl_flag){"seq", DL_FLAG_I64, &lo.seq, 2, 100000, "characters per training window", "N"};
  fl[nf++] = (dl_flag){"eval-chars", DL_FLAG_I64, &lo.eval_chars, 0, 1e15, "evaluate on the first N test characters (0: all)", "N"};
  fl[nf++] = (dl_flag){"samples", DL_FLAG_I64, &lo.samples, 0, 1000, "fortunes to sample at the end", "N"};
  fl[nf++] = (dl_flag){"sample-len", DL_FLAG_I64, &lo.sample_len, 1, 1000000, "longest sample, in characters", "N"};
  fl[nf++] = (dl_flag){"temp", DL_FLAG_F64, &lo.temp, 0.01, 100, "sampling temperature", "X"};
  dl_ctx_init(&p->ctx, NULL);
  if (dl_flags_main(&p->ctx, argc, argv, fl, nf, NULL, 0, NULL,
                    "Train a character-level LSTM language model on Debian's fortune cookies.") != DL_OK)
    rc = 2;
  else if (dl_train_opts_check(&p->ctx, &o) != DL_OK)
    rc = 2, fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&p->ctx));
  else {
    dl_ctx_init(&p->ctx, &(dl_ctx_desc){.threads = (int)o.threads});
    dl_ctx_on_nomem(&p->ctx, &oom); /* an op out of memory: its message and exit 1, not an abort (core.h) */
    if (setjmp(oom))
      rc = fail(p, argv0);
    else
      rc = run(p, &o, &lo, argv[0]);
    dl_ctx_on_nomem(&p->ctx, NULL);
  }
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
  dl_tensor_free(p->sx);
  dl_tensor_free(p->sh);
  dl_tensor_free(p->sc);
  {
    dl_gpu *gpu = p->gpu;
    free(p);
    dl_gpu_close(gpu); /* after everything on it */
  }
  return rc;
}
