/* tests/test_run.c - include/dl/run.h: a training program's flags, its run
 * (--load, --resume, --stop-after, per-epoch checkpoint, CSV log), the
 * classifier evaluation and the result line.
 *
 * - Flags: every kind, "--name value" and "--name=value", positional
 *   arguments and "--"; each malformed input (not a number, trailing
 *   characters, out of range, overflow, NaN/inf, unknown flag, missing
 *   value, a value given to a switch, one dash, an empty string, a
 *   positional argument where none is taken) is DL_ERR_ARG with a message
 *   naming the flag and the value, and leaves the target unchanged. The
 *   usage lists every flag with its default. The standard set: 17 flags,
 *   names unique; contradictions (--load with --resume, --eval without
 *   weights, --chart in a build without PNG output) refused.
 * - Run: a small classifier (Linear, ReLU, Dropout, Linear; Adam; a
 *   shuffled batcher; the learning rate set from the step count). Three
 *   epochs in one process against one epoch (--stop-after 1, as if killed)
 *   plus a second process object resuming from its checkpoint: weights,
 *   optimizer state, step count and the CSV's loss/accuracy columns are
 *   bit-identical. --resume of a missing file, of a checkpoint of another
 *   architecture (report names the tensor) fail and change nothing;
 *   --load of weights gives the same parameters; --eval trains nothing.
 * - dl_evaluate against the same numbers computed by hand over the whole
 *   set at once; the model's training mode is restored.
 * - dl_run_result's line, parsed back.
 * The test writes a fresh folder dl_run_XXXXXX under $TMPDIR (else /tmp) and
 * removes it.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dl.h"
#include "harness.h"

static dl_ctx ctx;
static char tmpdir[256];
static const char *TP(const char *name) {
  static char ring[8][320];
  static int k;
  char *b = ring[k++ & 7];
  snprintf(b, 320, "%s/%s", tmpdir, name);
  return b;
}

/* >>flags ------------------------------------------------------------------ */

typedef struct fv { int64_t n; double x; const char *s; int sw; } fv;
static int mkflags(fv *v, dl_flag *f) {
  f[0] = (dl_flag){"count", DL_FLAG_I64, &v->n, 1, 100, "a count", "N"};
  f[1] = (dl_flag){"rate", DL_FLAG_F64, &v->x, 0, 0, "any number", "X"};
  f[2] = (dl_flag){"name", DL_FLAG_STR, (void *)&v->s, 0, 0, "a name", "S"};
  f[3] = (dl_flag){"verbose", DL_FLAG_SWITCH, &v->sw, 0, 0, "talk", NULL};
  f[4] = (dl_flag){"big", DL_FLAG_I64, &v->n, 0, 0, "unbounded", NULL};
  return 5;
}
static dl_status parse(fv *v, const char *line, char **pos, int maxpos, int *npos) {
  static char buf[512];
  char *argv[32];
  int argc = 0;
  dl_flag f[8];
  int nf = mkflags(v, f);
  char *t;
  snprintf(buf, sizeof buf, "prog %s", line);
  for (t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
  return dl_flags_parse(&ctx, argc, argv, f, nf, pos, maxpos, npos);
}

static void test_flags(void) {
  fv v = {5, 0.5, "a", 0};
  char *pos[4];
  int np = -1;
  CHECK(parse(&v, "--count 7 --rate=-2.5e-3 --name=bob --verbose", NULL, 0, NULL) == DL_OK);
  CHECK(v.n == 7 && v.x == -2.5e-3 && strcmp(v.s, "bob") == 0 && v.sw == 1);
  CHECK(parse(&v, "one --count=100 two -- --three", pos, 4, &np) == DL_OK && np == 3 && strcmp(pos[0], "one") == 0 &&
        strcmp(pos[1], "two") == 0 && strcmp(pos[2], "--three") == 0 && v.n == 100);
  CHECK(parse(&v, "--big -9000000000000000000", NULL, 0, NULL) == DL_OK && v.n == -9000000000000000000LL);
  {
    static const struct { const char *line, *want1, *want2; } bad[] = {
        {"--count 7x", "--count", "'7x' is not an integer"},
        {"--count 0", "--count", "outside [1, 100]"},
        {"--count 101", "--count", "101"},
        {"--big 99999999999999999999", "--big", "not an integer"},
        {"--count 1.5", "--count", "1.5"},
        {"--rate nan", "--rate", "not a finite number"},
        {"--rate inf", "--rate", "'inf'"},
        {"--rate 1e999", "--rate", "1e999"},
        {"--rate 0x", "--rate", "'0x'"},
        {"--colour red", "unknown flag --colour", ""},
        {"--count", "--count needs a value", ""},
        {"--verbose=1", "--verbose takes no value", ""},
        {"-count 3", "'-count'", "spelled --name"},
        {"--name=", "--name", "empty"},
        {"stray", "'stray'", "takes only flags"},
    };
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      fv w = {5, 0.5, "a", 0};
      dl_status s = parse(&w, bad[i].line, NULL, 0, NULL);
      CHECK_MSG(s == DL_ERR_ARG && strstr(dl_ctx_message(&ctx), bad[i].want1) && strstr(dl_ctx_message(&ctx), bad[i].want2),
                "'%s': status %d, message '%s'", bad[i].line, (int)s, dl_ctx_message(&ctx));
      CHECK_MSG(w.n == 5 && w.x == 0.5 && strcmp(w.s, "a") == 0 && w.sw == 0, "'%s' changed a value", bad[i].line);
    }
  }
  CHECK(parse(&v, "a b c", pos, 2, &np) == DL_ERR_ARG && strstr(dl_ctx_message(&ctx), "too many"));
  /* the usage: every flag, its meta name and its default */
  {
    FILE *f = tmpfile();
    char text[2048];
    size_t n;
    fv w = {5, 0.25, "alice", 0};
    dl_flag fl[8];
    int nf = mkflags(&w, fl);
    dl_flags_usage(f, "prog", "Does things.", fl, nf, "FILE...");
    rewind(f);
    n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    CHECK(strstr(text, "usage: prog [flags] FILE...") && strstr(text, "Does things."));
    CHECK(strstr(text, "--count N") && strstr(text, "(default 5)") && strstr(text, "(default 0.25)") &&
          strstr(text, "(default alice)") && strstr(text, "--verbose ") && strstr(text, "talk"));
  }
}

static void test_train_flags(void) {
  dl_train_opts o;
  dl_flag f[DL_TRAIN_NFLAGS];
  int n, i, j;
  memset(&o, 0, sizeof o);
  n = dl_train_flags(&o, f);
  CHECK(n == DL_TRAIN_NFLAGS && n == 20);
  for (i = 0; i < n; i++)
    for (j = i + 1; j < n; j++) CHECK_MSG(strcmp(f[i].name, f[j].name) != 0, "flag %s twice", f[i].name);
  {
    char *argv[] = {"p", "--epochs", "3", "--batch=16", "--lr", "0.01", "--seed", "9", "--threads", "1", "--save",
                    "w", "--checkpoint", "c", "--csv", "l", "--subset", "100", "--stop-after", "2", "--quiet", "--deterministic", "--no-graphs"};
    CHECK(dl_flags_parse(&ctx, (int)(sizeof argv / sizeof argv[0]), argv, f, n, NULL, 0, NULL) == DL_OK);
    CHECK(o.epochs == 3 && o.batch == 16 && o.lr == 0.01 && o.seed == 9 && o.threads == 1 && strcmp(o.save, "w") == 0 &&
          strcmp(o.checkpoint, "c") == 0 && strcmp(o.csv, "l") == 0 && o.subset == 100 && o.stop_after == 2 && o.quiet &&
          o.deterministic && o.no_graphs);
    CHECK(dl_train_opts_check(&ctx, &o) == DL_OK);
  }
  { /* --device: cpu, cuda, cuda:N; the GPU refuses training state files (not implemented there) */
    static const char *const good[] = {"cpu", "cuda", "cuda:0", "cuda:12"}, *const bad[] = {"tpu", "cuda:", "cuda:x", "cudax"};
    size_t k;
    for (k = 0; k < 4; k++) {
      char *argv[] = {"p", "--device", (char *)good[k]};
      memset(&o, 0, sizeof o);
      CHECK(dl_flags_parse(&ctx, 3, argv, f, n, NULL, 0, NULL) == DL_OK && strcmp(o.device, good[k]) == 0);
      CHECK_MSG(dl_train_opts_check(&ctx, &o) == DL_OK, "--device %s", good[k]);
      o.resume = "r.ckpt";
      CHECK_MSG(dl_train_opts_check(&ctx, &o) == (k ? DL_ERR_UNSUPPORTED : DL_OK), "--device %s --resume", good[k]);
    }
    for (k = 0; k < 4; k++) {
      memset(&o, 0, sizeof o);
      o.device = bad[k];
      CHECK_MSG(dl_train_opts_check(&ctx, &o) == DL_ERR_ARG && strstr(dl_ctx_message(&ctx), "cpu, cuda or cuda:N"),
                "--device %s: %s", bad[k], dl_ctx_message(&ctx));
    }
  }
  {
    char *argv[] = {"p", "--batch", "0"};
    CHECK(dl_flags_parse(&ctx, 3, argv, f, n, NULL, 0, NULL) == DL_ERR_ARG && strstr(dl_ctx_message(&ctx), "--batch"));
  }
  memset(&o, 0, sizeof o);
  o.load = "a";
  o.resume = "b";
  CHECK(dl_train_opts_check(&ctx, &o) == DL_ERR_ARG && strstr(dl_ctx_message(&ctx), "--load and --resume"));
  memset(&o, 0, sizeof o);
  o.eval = 1;
  CHECK(dl_train_opts_check(&ctx, &o) == DL_ERR_ARG && strstr(dl_ctx_message(&ctx), "--eval"));
  o.load = "w";
  CHECK(dl_train_opts_check(&ctx, &o) == DL_OK);
  memset(&o, 0, sizeof o);
  o.chart = "c.png"; /* this test is built without DL_USE_STB_IMAGE_WRITE */
  CHECK(dl_train_opts_check(&ctx, &o) == DL_ERR_UNSUPPORTED && strstr(dl_ctx_message(&ctx), "DL_USE_STB_IMAGE_WRITE"));
}

/* >>run --------------------------------------------------------------------- */

enum { N = 200, NT = 100, D = 6, C = 3, H = 16 };
/* what a job takes from outside its opts: the batch size, the training
 * samples and where the run prints (a resume's tests change them) */
static int64_t job_batch = 32, job_n = N;
static FILE *job_out;

typedef struct job {
  dl_dataset train, test;
  dl_batcher tb, eb;
  dl_model *m;
  dl_optim *o;
  dl_tape tp;
  dl_run r;
  dl_train_opts opts;
} job;

/* The same data for every job: class = argmax of a fixed linear map. */
static void make_data(dl_tensor **x, dl_tensor **y, int64_t n, uint64_t seed) {
  dl_rng g = dl_rng_make(seed);
  int64_t i, j;
  *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(n, D));
  *y = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(n));
  dl_tensor_rand_normal(*x, &g, 0, 1);
  for (i = 0; i < n; i++) {
    const float *r = dl_f32(*x) + i * D;
    double s[C] = {r[0] - r[1], r[2] + 0.5 * r[3], r[4] - r[5] + 0.2};
    int64_t best = 0;
    for (j = 1; j < C; j++)
      if (s[j] > s[best]) best = j;
    dl_i64(*y)[i] = best;
  }
}
static dl_model *job_model(uint64_t seed, int64_t hidden) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = seed});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = D, .out = hidden});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_dropout_make(m, NULL, NULL, 0.2);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = hidden, .out = C});
  return m;
}
/* Set up a job; returns dl_run_begin's status. */
static dl_status job_init(job *j, const dl_train_opts *opts, int64_t hidden) {
  dl_tensor *x, *y;
  memset(j, 0, sizeof *j);
  j->opts = *opts;
  make_data(&x, &y, job_n, 11);
  CHECK(dl_dataset_make(&ctx, &j->train, x, y, DL_DATASET_OWN) == DL_OK);
  make_data(&x, &y, NT, 12);
  CHECK(dl_dataset_make(&ctx, &j->test, x, y, DL_DATASET_OWN) == DL_OK);
  CHECK(dl_batcher_make(&ctx, &j->tb, &j->train,
                        &(dl_batcher_desc){.batch_size = job_batch, .dtype = DL_F32, .shuffle = {.seed = (uint64_t)opts->seed}}) ==
        DL_OK);
  CHECK(dl_batcher_make(&ctx, &j->eb, &j->test,
                        &(dl_batcher_desc){.batch_size = 40, .dtype = DL_F32, .shuffle = {.no_shuffle = 1}}) == DL_OK);
  j->m = job_model((uint64_t)opts->seed, hidden);
  j->o = dl_optim_adam(j->m, &(dl_adam_cfg){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
  CHECK(dl_tape_init(&j->tp, &ctx, 0) == DL_OK);
  return dl_run_begin(&j->r, &ctx, &(dl_run_desc){.opts = &j->opts, .model = j->m, .optim = j->o, .batcher = &j->tb,
                                                   .steps_per_epoch = (job_n + job_batch - 1) / job_batch,
                                                   .out = job_out ? job_out : stderr});
}
static void job_free(job *j) {
  dl_run_free(&j->r);
  dl_tape_free(&j->tp);
  dl_optim_free(j->o);
  dl_model_free(j->m);
  dl_batcher_free(&j->tb);
  dl_batcher_free(&j->eb);
  dl_dataset_free(&j->train);
  dl_dataset_free(&j->test);
}
/* Train to the end (or --stop-after); the lr follows the global step. */
static void job_train(job *j) {
  while (dl_run_next_epoch(&j->r)) {
    dl_batch b;
    double vl, va;
    while (dl_batcher_next(&j->tb, &b)) {
      dl_tensor *logits, *loss;
      double lv;
      int64_t correct;
      dl_optim_set_lr(j->o, 0.01 / (1.0 + 0.01 * (double)j->r.step));
      logits = dl_model_forward(j->m, &j->tp, b.x);
      loss = dl_t_cross_entropy(&j->tp, logits, b.y, 0, DL_REDUCE_MEAN);
      lv = dl__get_at(loss, 0);
      correct = dl_accuracy_count(logits, b.y);
      dl_train_step(j->o, &j->tp, loss, NULL);
      dl_tape_rewind(&j->tp);
      dl_run_step(&j->r, b.size, lv, correct);
    }
    dl_evaluate(j->m, &j->tp, &j->eb, &vl, &va, NULL);
    CHECK(dl_run_end_epoch(&j->r, vl, va) == DL_OK);
  }
}
static int params_equal(const dl_model *a, const dl_model *b) {
  int i;
  if (a->nparams != b->nparams) return 0;
  for (i = 0; i < a->nparams; i++)
    if (memcmp(a->params[i]->t.data, b->params[i]->t.data, (size_t)a->params[i]->t.numel * dl_dtype_size(a->params[i]->t.dtype)))
      return 0;
  return 1;
}
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  char *s;
  long n;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  rewind(f);
  s = malloc((size_t)n + 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
  s[n] = 0;
  fclose(f);
  return s;
}
/* The first k comma-separated columns of every line of a CSV log. */
static void csv_cols(const char *text, int k, char *out, size_t n) {
  size_t o = 0;
  int col = 0;
  for (; *text && o + 1 < n; text++) {
    if (*text == '\n') col = 0, out[o++] = '\n';
    else if (*text == ',') { if (++col < k) out[o++] = ','; }
    else if (col < k) out[o++] = *text;
  }
  out[o] = 0;
}

/* What a run printed into the tmpfile f, as a string (f is closed). */
static void read_back(FILE *f, char *text, size_t n) {
  size_t got;
  rewind(f);
  got = fread(text, 1, n - 1, f);
  text[got] = 0;
  fclose(f);
}

/* A copy of the checkpoint src at dst with the I64 or F64 scalar key set
 * to v (all else as it was): a well-formed file with a bad value. */
static int ckpt_edit(const char *src, const char *dst, const char *key, double v) {
  dl_safetensors st;
  dl_st_writer w;
  dl_tensor *t[256];
  int i, ok, found = 0;
  if (dl_safetensors_open(&st, &ctx, src) != DL_OK || st.ntensors > 256) return 0;
  dl_st_writer_init(&w, &ctx);
  for (i = 0; i < st.nmeta; i++) dl_st_writer_meta(&w, st.meta[i].key, st.meta[i].value);
  for (i = 0; i < st.ntensors; i++) {
    const dl_st_tensor *e = &st.tensors[i];
    t[i] = dl_tensor_make(&ctx, e->dtype, e->ndim, e->shape);
    dl_safetensors_read(&st, e, t[i], 0);
    if (strcmp(e->name, key) == 0) {
      found = 1;
      if (e->dtype == DL_I64) dl_i64(t[i])[0] = (int64_t)v;
      else dl_f64(t[i])[0] = v;
    }
    dl_st_writer_add(&w, e->name, t[i]);
  }
  ok = found && dl_st_writer_save(&w, dst, NULL) == DL_OK;
  dl_st_writer_free(&w);
  for (i = 0; i < st.ntensors; i++) dl_tensor_free(t[i]);
  dl_safetensors_free(&st);
  return ok;
}

/* --resume of b.ckpt (base's run at its end, epoch 3): well-formed checkpoints with values
 * that must not be trusted, and runs whose settings differ. A refusal names
 * the key or flag and the value, and changes nothing (fresh weights, epoch
 * 0); an applied change prints a note saying what changed from what. */
static void test_resume_refusals(const dl_train_opts *base) {
  static const struct { const char *key; double v; const char *says; } bad[] = {
      {"extra/run/epoch", -1000000, "'run/epoch' is -1000000"}, /* was a write far outside the history */
      {"extra/run/epoch", -1, "'run/epoch' is -1"},             /* was a silent write into another column */
      {"extra/run/epoch", 1001, "contradicts itself"}, /* beyond the history is fine, but not at step 21 */
      {"extra/run/step", -3, "'run/step' is -3"},
      {"extra/run/step", 8, "contradicts itself"},
      {"extra/run/shuffle_pos", -1, "'run/shuffle_pos' is -1"},
      {"extra/run/shuffle_pos", 1000, "past the 200 samples of an epoch"}, /* was caught after the load */
      {"extra/run/wall_s", -1.0 / 0.0, "'run/wall_s' is -inf"},
      {"extra/run/lr", 0.0 / 0.0, "'run/lr' is nan"},
      {"optim/0.weight/step", -3, "'optim/0.weight/step' is -3"}, /* was a load, then an abort at the first step */
      {"optim/nsteps", -1, "'optim/nsteps' is -1"},
      {"optim/lr", -0.5, "'optim/lr' is -0.5"},
  };
  size_t k;
  job b;
  dl_model *fresh = job_model((uint64_t)base->seed, H);
  for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    dl_train_opts o = *base;
    dl_status s;
    CHECK_MSG(ckpt_edit(TP("b.ckpt"), TP("bad.ckpt"), bad[k].key, bad[k].v), "%s", bad[k].key);
    o.resume = TP("bad.ckpt");
    s = job_init(&b, &o, H);
    CHECK_MSG(s == DL_ERR_FORMAT && strstr(dl_ctx_message(&ctx), bad[k].says) && strstr(dl_ctx_message(&ctx), "bad.ckpt") &&
                  strstr(dl_ctx_message(&ctx), "nothing was"),
              "%s = %g: status %d, '%s'", bad[k].key, bad[k].v, (int)s, dl_ctx_message(&ctx));
    CHECK_MSG(params_equal(b.m, fresh) && b.r.epoch == 0 && b.r.step == 0 && b.o->nsteps == 0, "%s changed the run",
              bad[k].key);
    job_free(&b);
  }
  /* settings the checkpoint cannot honour: refused, the flag named */
  {
    static const struct { int64_t batch, n, seed; const char *says; } diff[] = {
        {64, N, 5, "--batch"}, {32, N - 40, 5, "--subset"}, {32, N, 77, "--seed 5"}};
    for (k = 0; k < sizeof diff / sizeof diff[0]; k++) {
      dl_train_opts o = *base;
      o.resume = TP("b.ckpt");
      o.seed = diff[k].seed;
      job_batch = diff[k].batch;
      job_n = diff[k].n;
      CHECK_MSG(job_init(&b, &o, H) == DL_ERR_ARG && strstr(dl_ctx_message(&ctx), diff[k].says) &&
                    strstr(dl_ctx_message(&ctx), "nothing was loaded"),
                "%s: '%s'", diff[k].says, dl_ctx_message(&ctx));
      CHECK(b.r.epoch == 0 && b.r.step == 0);
      job_free(&b);
      job_batch = 32;
      job_n = N;
    }
  }
  /* settings it can: applied, each with a note of what changed */
  {
    dl_train_opts o = *base;
    FILE *f = tmpfile();
    char text[2048];
    o.resume = TP("b.ckpt");
    o.lr = 0.5;
    o.epochs = 5;
    job_out = f;
    CHECK_MSG(f && job_init(&b, &o, H) == DL_OK && b.r.epoch == 3 && b.r.step == 21, "%s", dl_ctx_message(&ctx));
    job_out = NULL;
    if (f) {
      read_back(f, text, sizeof text);
      CHECK_MSG(strstr(text, "note: --resume") && strstr(text, "--lr 0.5 (the checkpoint's run had 0)") &&
                    strstr(text, "--epochs 5 (the checkpoint's run had 3)"),
                "%s", text);
    }
    CHECK(b.r.cfg[3] == 5 && b.r.cfg_lr == 0.5); /* the next checkpoint records the new settings */
    CHECK(dl_optim_lr(b.o) == 0.5); /* applied to the optimizer too (the old run's lr was 0: set outright) */
    job_free(&b);
  }
  { /* the old run had --lr 0.01 and its schedule had reached 0.005: --lr 0.02 doubles the optimizer's lr */
    dl_train_opts o = *base;
    CHECK(ckpt_edit(TP("b.ckpt"), TP("lr1.ckpt"), "extra/run/lr", 0.01));
    CHECK(ckpt_edit(TP("lr1.ckpt"), TP("lr2.ckpt"), "optim/lr", 0.005));
    o.resume = TP("lr2.ckpt");
    o.lr = 0.02;
    CHECK_MSG(job_init(&b, &o, H) == DL_OK, "%s", dl_ctx_message(&ctx));
    CHECK_MSG(fabs(dl_optim_lr(b.o) - 0.01) < 1e-15, "lr %.17g", dl_optim_lr(b.o));
    job_free(&b);
  }
  { /* the old run's optimizer had weight decay 0.3, this one's has 0: applied, with a note */
    dl_train_opts o = *base;
    FILE *f = tmpfile();
    char text[2048];
    CHECK(ckpt_edit(TP("b.ckpt"), TP("wd.ckpt"), "extra/run/weight_decay", 0.3));
    o.resume = TP("wd.ckpt");
    job_out = f;
    CHECK_MSG(f && job_init(&b, &o, H) == DL_OK, "%s", dl_ctx_message(&ctx));
    job_out = NULL;
    if (f) {
      read_back(f, text, sizeof text);
      CHECK_MSG(strstr(text, "note: --resume") && strstr(text, "weight decay 0 (the checkpoint's run had 0.3) applies "
                                                               "from step 21 on"),
                "%s", text);
    }
    CHECK(b.r.cfg_wd == 0); /* the next checkpoint records this run's */
    job_free(&b);
  }
  dl_model_free(fresh);
}

static void test_resume(void) {
  dl_train_opts base;
  job a, b, c;
  memset(&base, 0, sizeof base);
  base.epochs = 3;
  base.seed = 5;
  base.quiet = 1;

  /* uninterrupted: three epochs, a checkpoint and a log after each */
  {
    dl_train_opts o = base;
    o.checkpoint = TP("a.ckpt");
    o.csv = TP("a.csv");
    o.save = TP("a.safetensors");
    CHECK(job_init(&a, &o, H) == DL_OK);
    job_train(&a);
    CHECK(a.r.epoch == 3 && a.r.step == 3 * 7 && a.r.first_epoch == 0);
    CHECK(dl_run_finish(&a.r) == DL_OK);
  }
  /* killed after epoch 1 (--stop-after), resumed by a new process */
  {
    dl_train_opts o = base;
    o.checkpoint = TP("b.ckpt");
    o.csv = TP("b.csv");
    o.stop_after = 1;
    CHECK(job_init(&b, &o, H) == DL_OK);
    job_train(&b);
    CHECK(b.r.epoch == 1 && b.r.step == 7);
    job_free(&b);
  }
  {
    dl_train_opts o = base;
    o.resume = TP("b.ckpt");
    o.checkpoint = TP("b.ckpt");
    o.csv = TP("b.csv");
    CHECK(job_init(&c, &o, H) == DL_OK);
    CHECK(c.r.epoch == 1 && c.r.first_epoch == 1 && c.r.step == 7);
    CHECK(dl_batcher_get_state(&c.tb).seed == 5 && dl_batcher_get_state(&c.tb).epoch == 1);
    job_train(&c);
    CHECK(c.r.epoch == 3 && c.r.step == 21);
    CHECK_MSG(params_equal(a.m, c.m), "resumed weights differ");
    CHECK(memcmp(a.o->state[0].data, c.o->state[0].data, (size_t)a.o->state[0].numel * sizeof(float)) == 0);
    CHECK(dl_optim_lr(a.o) == dl_optim_lr(c.o));
    /* the history went through the checkpoint: the resumed log is whole */
    {
      char *la = slurp(TP("a.csv")), *lc = slurp(TP("b.csv"));
      static char ca[4096], cc[4096];
      CHECK(la && lc);
      if (la && lc) {
        csv_cols(la, 5, ca, sizeof ca);
        csv_cols(lc, 5, cc, sizeof cc);
        CHECK_MSG(strcmp(ca, cc) == 0, "logs differ:\n%s\nvs\n%s", ca, cc);
        CHECK(strncmp(la, "epoch,train_loss,train_acc,val_loss,val_acc,lr,samples_per_s,wall_s\n1,", 70) == 0);
      }
      free(la);
      free(lc);
    }
    CHECK(dl_f64(c.r.hist)[0] == 1.0 && dl_f64(c.r.hist)[2] == 3.0 && isnan(dl_f64(c.r.hist)[3]));
    job_free(&c);
  }
  /* --load: the saved weights; --eval: no epoch runs */
  {
    dl_train_opts o = base;
    o.seed = 99;
    o.load = TP("a.safetensors");
    o.eval = 1;
    CHECK(job_init(&b, &o, H) == DL_OK);
    CHECK(params_equal(a.m, b.m));
    CHECK(dl_run_next_epoch(&b.r) == 0 && b.r.epoch == 0);
    job_free(&b);
  }
  /* failures: nothing changes, the message names the flag and file */
  {
    dl_train_opts o = base;
    dl_model *fresh;
    o.resume = TP("missing.ckpt");
    CHECK(job_init(&b, &o, H) == DL_ERR_IO && strstr(dl_ctx_message(&ctx), "--resume") &&
          strstr(dl_ctx_message(&ctx), "missing.ckpt"));
    fresh = job_model(5, H);
    CHECK(params_equal(b.m, fresh) && b.r.epoch == 0);
    dl_model_free(fresh);
    job_free(&b);
    o.resume = TP("a.ckpt"); /* another architecture */
    CHECK(job_init(&b, &o, H + 1) != DL_OK && strstr(b.r.report.text, "0.weight"));
    CHECK(b.r.epoch == 0 && b.r.step == 0);
    job_free(&b);
    o.resume = NULL;
    o.load = TP("a.ckpt"); /* a checkpoint is not a weights file: unexpected tensors named */
    CHECK(job_init(&b, &o, H) != DL_OK && strstr(dl_ctx_message(&ctx), "--load") && strstr(b.r.report.text, "optim/"));
    job_free(&b);
  }
  test_resume_refusals(&base);
  /* the result line */
  {
    FILE *f = tmpfile();
    char line[512];
    double acc = -1, sps = -1, wall = -1;
    long long ep = -1;
    int extra = 0;
    dl_run_result(&a.r, f, 0.875, "test_loss=%.3f extra=%d", 0.25, 7);
    rewind(f);
    CHECK(fgets(line, sizeof line, f) != NULL);
    fclose(f);
    CHECK(sscanf(line, "result: test_acc=%lf epochs=%lld train_samples_per_s=%lf wall_s=%lf test_loss=0.250 extra=%d", &acc,
                 &ep, &sps, &wall, &extra) == 5);
    CHECK(acc == 0.875 && ep == 3 && sps > 0 && wall > 0 && extra == 7 && line[strlen(line) - 1] == '\n');
  }
  job_free(&a);
}

/* The CSV log is for people to read: when it cannot be written (here its
 * path is a folder), each epoch prints a warning, training goes on and the
 * checkpoint is still written; the log never ends in a cut row. */
static void test_cosmetic_failures(void) {
  dl_train_opts o;
  job j;
  FILE *f = tmpfile();
  char text[4096];
  struct stat sb;
  memset(&o, 0, sizeof o);
  o.epochs = 2;
  o.seed = 3;
  o.quiet = 1;
  o.csv = TP("csv_is_a_folder");
  o.checkpoint = TP("cosmetic.ckpt");
  CHECK(mkdir(o.csv, 0700) == 0);
  job_out = f;
  CHECK(f && job_init(&j, &o, H) == DL_OK);
  job_train(&j); /* CHECKs each dl_run_end_epoch == DL_OK */
  job_out = NULL;
  CHECK(j.r.epoch == 2);
  CHECK(stat(o.checkpoint, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0);
  CHECK(stat(o.csv, &sb) == 0 && S_ISDIR(sb.st_mode));
  if (f) {
    read_back(f, text, sizeof text);
    CHECK_MSG(strstr(text, "warning: --csv") && strstr(text, "not written (training goes on)") &&
                  strstr(text, "is not a regular file"),
              "%s", text);
  }
  job_free(&j);
  rmdir(o.csv);
}

/* Outputs the flags do not name go to runs/NAME/ (made, announced), never
 * the current folder; given ones stay; --eval writes nothing. */
static void test_default_outputs(void) {
  char cwd[512], text[512];
  dl_train_opts o;
  dl_train_paths paths;
  FILE *f = tmpfile();
  struct stat sb;
  CHECK(getcwd(cwd, sizeof cwd) != NULL && chdir(tmpdir) == 0);
  memset(&o, 0, sizeof o);
  o.save = "given.safetensors";
  CHECK(dl_train_default_outputs(&ctx, &o, "demo", &paths, f, 1) == DL_OK);
  CHECK(strcmp(o.save, "given.safetensors") == 0 && o.csv && strcmp(o.csv, "runs/demo/demo.csv") == 0);
  CHECK(o.chart == NULL); /* this test is built without PNG output */
  CHECK(stat("runs/demo", &sb) == 0 && S_ISDIR(sb.st_mode));
  if (f) {
    read_back(f, text, sizeof text);
    CHECK_MSG(strncmp(text, "outputs: runs/demo/ (weights, CSV log;", 38) == 0, "%s", text);
  }
  /* not the writing rank: the same paths, no folder, nothing printed */
  memset(&o, 0, sizeof o);
  CHECK(dl_train_default_outputs(&ctx, &o, "other", &paths, stderr, 0) == DL_OK);
  CHECK(o.save && strcmp(o.save, "runs/other/other.safetensors") == 0 && stat("runs/other", &sb) != 0);
  /* --eval: nothing */
  memset(&o, 0, sizeof o);
  o.eval = 1;
  CHECK(dl_train_default_outputs(&ctx, &o, "demo", &paths, stderr, 1) == DL_OK && !o.save && !o.csv);
  CHECK(dl_train_default_outputs(&ctx, &o, "../up", &paths, stderr, 1) == DL_ERR_ARG);
  rmdir("runs/demo");
  rmdir("runs");
  CHECK(chdir(cwd) == 0);
}

static void test_evaluate(void) {
  dl_train_opts o;
  job j;
  double vl, va, ref_loss = 0;
  int64_t i, k, correct = 0;
  dl_tensor *logits;
  dl_confusion cm;
  memset(&o, 0, sizeof o);
  o.epochs = 1;
  o.seed = 3;
  o.quiet = 1;
  CHECK(job_init(&j, &o, H) == DL_OK);
  dl_model_train(j.m, 1);
  CHECK(dl_confusion_init(&cm, &ctx, C) == DL_OK);
  dl_evaluate(j.m, &j.tp, &j.eb, &vl, &va, &cm);
  CHECK(j.m->training == 1 && j.tp.no_grad == 0);
  /* by hand: the whole test set in one forward pass, eval mode (no dropout) */
  dl_model_train(j.m, 0);
  logits = dl_model_forward(j.m, &j.tp, j.test.x);
  for (i = 0; i < NT; i++) {
    const float *r = dl_f32(logits) + i * C;
    double mx = r[0], s = 0;
    int64_t best = 0, y = dl_i64(j.test.y)[i];
    for (k = 1; k < C; k++)
      if (r[k] > mx) mx = r[k], best = k;
    for (k = 0; k < C; k++) s += exp((double)r[k] - mx);
    ref_loss += log(s) + mx - (double)r[y];
    correct += best == y;
  }
  CHECK_NEAR(vl, ref_loss / NT, 1e-5);
  CHECK(va == (double)correct / NT);
  CHECK(dl_confusion_total(&cm) == NT && dl_confusion_correct(&cm) == correct);
  dl_tape_rewind(&j.tp);
  dl_confusion_free(&cm);
  job_free(&j);
}

int main(void) {
  char cmd[320];
  int rc;
  dl_ctx_init(&ctx, NULL);
  if (!mkdtemp(harness_tmp_template(tmpdir, sizeof tmpdir, "dl_run"))) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_flags);
  RUN(test_train_flags);
  RUN(test_resume);
  RUN(test_cosmetic_failures);
  RUN(test_default_outputs);
  RUN(test_evaluate);
  rc = harness_finish();
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  dl_gemm_release_cache();
  return rc;
}
