/* tests/test_oom.c - out of memory anywhere in a training program is a
 * status, never an abort, a crash, a leak or a torn file.
 *
 * One short training program, written as a careful user writes one (every
 * status checked, dl_ctx_on_nomem's recovery point around the ops, one
 * cleanup whatever failed), runs under a ctx whose allocator fails its k-th
 * call, for every k from 0 to the number of calls a clean run makes:
 *   - the first run: data, model, Adam, tape, dl_run_begin (CSV log,
 *     checkpoint after each epoch, weights at the end), two epochs of
 *     forward + dl_dist_train_step, dl_dist_evaluate with a confusion
 *     matrix, dl_model_summary, dl_run_finish;
 *   - the resume: a new program that resumes from the first's checkpoint,
 *     trains a third epoch and loads the first's weights into a second
 *     model.
 * Each k must end in DL_OK (a failure the library absorbs: the GEMM packing
 * buffer, a cosmetic output) or DL_ERR_NOMEM with a message that says
 * "out of memory" and names bytes; every block must be freed, and the
 * checkpoint and weights on disk must load (the writer is atomic). Under
 * the sanitizer pass the same runs go through ASan and UBSan. The PNG chart
 * (stb_image_write, thousands of small blocks per image) is checked the same
 * way for the first 120 calls and every 97th after. */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__has_include)
#if __has_include(<stb/stb_image_write.h>)
#define DL_USE_STB_IMAGE_WRITE
#endif
#endif
#include "dl.h"
#include "harness.h"

/* the allocator: counts calls and live blocks, fails call number fail_at */
static long calls, live, fail_at = -1;
static void *oom_alloc(size_t n, void *u) {
  (void)u;
  if (calls++ == fail_at) return NULL;
  live++;
  return malloc(n);
}
static void oom_free(void *p, void *u) {
  (void)u;
  if (p) live--;
  free(p);
}
static int warnings;
static void oom_log(void *u, int level, const char *msg) {
  (void)u;
  (void)msg;
  if (level) warnings++;
}

static char dir[256];
static const char *TP(const char *name) {
  static char buf[8][320];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

enum { N = 96, NT = 40, D = 6, C = 3, H = 16, B = 32 };
typedef struct prog {
  dl_ctx ctx;
  dl_dataset train, test;
  dl_batcher tb, eb;
  dl_model *m, *m2;
  dl_optim *o;
  dl_tape tp;
  dl_run r;
  dl_confusion cm;
  dl_train_opts opts;
  FILE *out;
} prog;

static dl_status make_data(prog *p, dl_dataset *ds, int64_t n, uint64_t seed) {
  dl_rng g = dl_rng_make(seed);
  dl_tensor *x = dl_tensor_make(&p->ctx, DL_F32, DL_SHAPE(n, D)), *y = dl_tensor_make(&p->ctx, DL_I64, DL_SHAPE(n));
  int64_t i;
  dl_status st;
  if (!x || !y) {
    dl_tensor_free(x);
    dl_tensor_free(y);
    return p->ctx.status;
  }
  dl_tensor_rand_normal(x, &g, 0, 1);
  for (i = 0; i < n; i++) {
    const float *r = dl_f32(x) + i * D;
    dl_i64(y)[i] = r[0] > r[1] ? 0 : r[2] > 0 ? 1 : 2;
  }
  st = dl_dataset_make(&p->ctx, ds, x, y, DL_DATASET_OWN);
  if (st != DL_OK) {
    dl_tensor_free(x);
    dl_tensor_free(y);
  }
  return st;
}
static dl_model *make_model(dl_ctx *ctx) {
  dl_model *m = dl_model_make(ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 3});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = D, .out = H});
  dl_layernorm_make(m, NULL, NULL, &(dl_norm_desc){.ndims = 1, .shape = {H}});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_dropout_make(m, NULL, NULL, 0.1);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = H, .out = C});
  return m; /* NULL, or a model whose status says what failed */
}

/* The program's body: DL_OK or the first failure's status. */
static dl_status body(prog *p) {
  dl_status st;
  dl_batch b;
  if ((st = make_data(p, &p->train, N, 11)) != DL_OK || (st = make_data(p, &p->test, NT, 12)) != DL_OK) return st;
  if ((st = dl_batcher_make(&p->ctx, &p->tb, &p->train,
                            &(dl_batcher_desc){.batch_size = B, .dtype = DL_F32, .shuffle = {.seed = 5}})) != DL_OK ||
      (st = dl_batcher_make(&p->ctx, &p->eb, &p->test,
                            &(dl_batcher_desc){.batch_size = 16, .dtype = DL_F32, .shuffle = {.no_shuffle = 1}})) != DL_OK)
    return st;
  p->m = make_model(&p->ctx);
  if (!p->m) return p->ctx.status;
  if ((st = dl_model_status(p->m)) != DL_OK) return st;
  if (!(p->o = dl_optim_adam(p->m, &(dl_adam_cfg){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8})))
    return p->ctx.status;
  if ((st = dl_tape_init(&p->tp, &p->ctx, 0)) != DL_OK || (st = dl_confusion_init(&p->cm, &p->ctx, C)) != DL_OK)
    return st;
  if ((st = dl_run_begin(&p->r, &p->ctx, &(dl_run_desc){.opts = &p->opts, .model = p->m, .optim = p->o,
                                                          .batcher = &p->tb, .steps_per_epoch = (N + B - 1) / B,
                                                          .out = p->out})) != DL_OK)
    return st;
  if (!p->opts.resume) { /* the summary's pass on one evaluation batch */
    dl_batcher_set_epoch(&p->eb, 0);
    if (dl_batcher_next(&p->eb, &b) && (st = dl_model_summary(p->m, p->out, b.x)) != DL_OK) return st;
  }
  while (dl_run_next_epoch(&p->r)) {
    double vl = NAN, va = NAN;
    while (dl_batcher_next(&p->tb, &b)) {
      dl_tensor *logits = dl_model_forward(p->m, &p->tp, dl_tape_input(&p->tp, b.x));
      dl_tensor *loss = dl_t_cross_entropy(&p->tp, logits, b.y, 0, DL_REDUCE_MEAN);
      double lv = dl_item(loss);
      int64_t correct = dl_accuracy_count(dl_tape_host(&p->tp, logits), b.y);
      if ((st = dl_dist_train_step(NULL, p->o, &p->tp, loss, NULL, NULL)) != DL_OK) return st;
      dl_tape_rewind(&p->tp);
      dl_run_step(&p->r, b.size, lv, correct);
    }
    if ((st = dl_dist_evaluate(NULL, p->m, &p->tp, &p->eb, &vl, &va, &p->cm)) != DL_OK) return st;
    if ((st = dl_run_end_epoch(&p->r, vl, va)) != DL_OK) return st;
  }
  if ((st = dl_run_finish(&p->r)) != DL_OK) return st;
  if (p->opts.resume) { /* the first run's weights into a second model */
    p->m2 = make_model(&p->ctx);
    if (!p->m2) return p->ctx.status;
    if ((st = dl_model_status(p->m2)) != DL_OK) return st;
    if ((st = dl_model_load(p->m2, TP("a.safetensors"), NULL)) != DL_OK) return st;
  }
  return DL_OK;
}
static void prog_free(prog *p) {
  dl_run_free(&p->r);
  dl_tape_free(&p->tp);
  dl_confusion_free(&p->cm);
  dl_optim_free(p->o);
  dl_model_free(p->m);
  dl_model_free(p->m2);
  dl_batcher_free(&p->tb);
  dl_batcher_free(&p->eb);
  dl_dataset_free(&p->train);
  dl_dataset_free(&p->test);
}
/* The whole program under a ctx that fails allocation number k (-1: none). */
static dl_status program(prog *p, int resume, long k, int chart) {
  jmp_buf oom;
  dl_status st;
  memset(p, 0, sizeof *p);
  calls = 0;
  live = 0;
  fail_at = k;
  dl_ctx_init(&p->ctx, &(dl_ctx_desc){.allocator = {.alloc = oom_alloc, .free = oom_free}, .log = oom_log, .threads = 1});
  p->out = fopen("/dev/null", "w");
  p->opts.seed = 5;
  p->opts.quiet = 1;
  p->opts.epochs = resume ? 3 : 2;
  p->opts.checkpoint = TP(resume ? "b.ckpt" : "a.ckpt");
  p->opts.csv = TP(resume ? "b.csv" : "a.csv");
  p->opts.save = TP(resume ? "b.safetensors" : "a.safetensors");
  p->opts.resume = resume ? TP("a.ckpt") : NULL;
#ifdef DL_USE_STB_IMAGE_WRITE
  p->opts.chart = chart ? TP("a.png") : NULL;
#else
  (void)chart;
#endif
  dl_ctx_on_nomem(&p->ctx, &oom);
  if (setjmp(oom)) st = DL_ERR_NOMEM; /* an op ran out: its message is in ctx */
  else st = body(p);
  dl_ctx_on_nomem(&p->ctx, NULL);
  prog_free(p);
  dl_gemm_release_cache(); /* the packing buffer this thread keeps (blas.h) */
  fclose(p->out);
  return st;
}

/* What a failed run left on disk loads (checkpoints and weights are atomic). */
static int files_load(void) {
  dl_ctx c;
  dl_model *m;
  dl_optim *o;
  int ok = 1;
  const char *ck[2] = {"a.ckpt", "b.ckpt"}, *wt[2] = {"a.safetensors", "b.safetensors"};
  int i;
  dl_ctx_init(&c, NULL);
  m = make_model(&c);
  o = dl_optim_adam(m, &(dl_adam_cfg){.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
  for (i = 0; i < 2; i++) {
    if (access(TP(ck[i]), F_OK) == 0) { /* whole and parseable (its values are the run's: test_run.c loads them) */
      dl_safetensors st;
      if (dl_safetensors_open(&st, &c, TP(ck[i])) != DL_OK) ok = 0;
      else dl_safetensors_free(&st);
    }
    if (access(TP(wt[i]), F_OK) == 0 && dl_model_load(m, TP(wt[i]), NULL) != DL_OK) ok = 0;
  }
  if (!ok) fprintf(stderr, "  a file on disk does not load: %s\n", dl_ctx_message(&c));
  dl_optim_free(o);
  dl_model_free(m);
  return ok;
}

/* Every k of one program; returns the clean run's call count. */
static long sweep(int resume, int chart, long first, long stride) {
  static prog p;
  long total, k, ok = 0, nomem = 0, bad = 0;
  dl_status st;
  warnings = 0;
  st = program(&p, resume, -1, chart);
  CHECK(st == DL_OK && live == 0 && warnings == 0);
  if (st != DL_OK || live || warnings)
    fprintf(stderr, "  clean run: %s, %ld blocks, %d warnings: %s\n", dl_status_str(st), live, warnings,
            dl_ctx_message(&p.ctx));
  total = calls;
  for (k = 0; k < total; k = k < first ? k + 1 : k + stride) {
    if (resume) { /* the resume reads the first run's files: keep them whole */
      unlink(TP("b.ckpt"));
    }
    st = program(&p, resume, k, chart);
    if (st == DL_OK) ok++;
    else if (st == DL_ERR_NOMEM && strstr(dl_ctx_message(&p.ctx), "out of memory") &&
             strstr(dl_ctx_message(&p.ctx), "bytes"))
      nomem++;
    else {
      bad++;
      if (bad < 5) fprintf(stderr, "  k=%ld: status %s: %s\n", k, dl_status_str(st), dl_ctx_message(&p.ctx));
    }
    if (live != 0) {
      bad++;
      if (bad < 5) fprintf(stderr, "  k=%ld: %ld blocks not freed (%s)\n", k, live, dl_ctx_message(&p.ctx));
    }
    if (!files_load()) bad++;
  }
  CHECK(bad == 0);
  CHECK(nomem > 0);
  printf("  %s%s: %ld allocations in a clean run; failing each%s: %ld DL_ERR_NOMEM, %ld absorbed (DL_OK), %ld bad\n",
         resume ? "resume" : "first run", chart ? " with the chart" : "", total,
         first < total ? " (sampled)" : "", nomem, ok, bad);
  return total;
}

static void test_first_run(void) { sweep(0, 0, 1L << 30, 1); }
static void test_resume(void) { sweep(1, 0, 1L << 30, 1); }
#ifdef DL_USE_STB_IMAGE_WRITE
static void test_chart(void) { sweep(0, 1, 120, 97); }
#endif
/* Without a recovery point an op out of memory still panics, naming it. */
static int panicked;
static char panic_msg[600];
static jmp_buf panic_jb;
static void on_panic(void *u, const char *op, const char *msg, const char *file, int line) {
  (void)u;
  (void)file;
  (void)line;
  panicked = 1;
  snprintf(panic_msg, sizeof panic_msg, "%s: %s", op, msg);
  longjmp(panic_jb, 1);
}
static void test_no_recovery_point(void) {
  static unsigned char buf[4096];
  dl_ctx c;
  dl_tape tp;
  dl_tensor *x;
  dl_ctx_init(&c, &(dl_ctx_desc){.panic = on_panic});
  dl_tape_init_buffer(&tp, &c, buf, sizeof buf);
  x = dl_tensor_make(&c, DL_F32, DL_SHAPE(64, 64));
  dl_tensor_fill(x, 1);
  if (!setjmp(panic_jb)) (void)dl_t_relu(&tp, x);
  CHECK(panicked && strstr(panic_msg, "dl_t_relu: out of memory") && strstr(panic_msg, "bytes in use") &&
        strstr(panic_msg, "dl_ctx_on_nomem"));
  { /* with one: the status, the op and the bytes; the tape rewinds and goes on */
    jmp_buf jb;
    volatile int jumped = 0;
    dl_ctx_on_nomem(&c, &jb);
    if (setjmp(jb)) jumped = 1;
    else (void)dl_t_relu(&tp, x);
    dl_ctx_on_nomem(&c, NULL);
    CHECK(jumped && c.status == DL_ERR_NOMEM && strstr(dl_ctx_message(&c), "dl_t_relu: out of memory") &&
          strstr(dl_ctx_message(&c), "the output of 16"));
    dl_tape_rewind(&tp);
    x->shape[0] = 4; /* a smaller op fits */
    x->numel = 4 * 64;
    CHECK(dl_f32(dl_t_relu(&tp, x))[0] == 1);
    x->shape[0] = 64;
    x->numel = 64 * 64;
  }
  dl_tensor_free(x);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/dl_test_oom_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  RUN(test_no_recovery_point);
  RUN(test_first_run);
  RUN(test_resume);
#ifdef DL_USE_STB_IMAGE_WRITE
  RUN(test_chart);
#endif
  {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  }
  return harness_finish();
}
