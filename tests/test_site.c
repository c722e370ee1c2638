/* dl-test-cxx */
/* tests/test_site.c - a programmer error in a public op or layer call is
 * reported at the caller's file:line (dl/site.h), not the library's.
 *
 * Each check makes a call fail on the line it is written on (the panic
 * handler records the file and line it is given and jumps back); every
 * element-wise op of the list is called through the list itself, so a new
 * entry without its macro fails here; a shell check at the end of
 * tests/run.sh's unit tests is not needed: test_wrappers_complete reads
 * the headers. */
#include "dl.h"
#include "harness.h"

static jmp_buf site_jmp;
static const char *site_file;
static int site_line;
static char site_msg[1200];
static void site_panic(void *user, const char *op, const char *msg, const char *file, int line) {
  (void)user;
  site_file = file;
  site_line = line;
  snprintf(site_msg, sizeof site_msg, "%s: %s", op, msg);
  longjmp(site_jmp, 1);
}

static dl_ctx ctx;

/* The statement must panic, reporting this file and the line given. */
#define AT_LINE(want_line, stmt)                                                        \
  do {                                                                                  \
    site_file = NULL;                                                                   \
    if (setjmp(site_jmp) == 0) {                                                        \
      stmt;                                                                             \
      CHECK_MSG(0, "no panic from %s", #stmt);                                          \
    } else {                                                                            \
      CHECK_MSG(site_file && strstr(site_file, "test_site.c") && site_line == (want_line), \
                "%s reported at %s:%d, not line %d (%s)", #stmt, site_file ? site_file : "?", \
                site_line, (int)(want_line), site_msg);                                 \
    }                                                                                   \
  } while (0)

static dl_tensor *t(int64_t a, int64_t b) { return dl_tensor_make(&ctx, DL_F32, DL_SHAPE(a, b)); }

static void test_ops(void) {
  dl_tape tp;
  dl_tensor *a = t(8, 3), *b = t(4, 2), *w = t(5, 3), *bias = t(1, 7), *ok;
  dl_tape_init(&tp, &ctx, 0);
  AT_LINE(__LINE__, dl_t_matmul(&tp, a, b));
  AT_LINE(__LINE__, dl_t_linear(&tp, a, b, NULL));
  AT_LINE(__LINE__, dl_t_add(&tp, a, b));
  AT_LINE(__LINE__, dl_t_reshape(&tp, a, 2, (const int64_t[]){5, 5}));
  AT_LINE(__LINE__, dl_t_softmax(&tp, a, 7));
  CHECK(strstr(site_msg, "raised at") != NULL); /* the library's line comes after */
  /* nested: the outer call's line, and an inner failure there too */
  AT_LINE(__LINE__, dl_t_relu(&tp, dl_t_matmul(&tp, a, b)));
  AT_LINE(__LINE__, dl_t_add(&tp, dl_t_relu(&tp, a), b));
  /* a call that succeeds leaves no site behind: a later failure elsewhere is not blamed on it */
  ok = dl_t_matmul(&tp, a, dl_t_transpose(&tp, w, 0, 1));
  CHECK(ok && ok->shape[1] == 5);
  CHECK(dl__cur_site.file == NULL && dl__cur_site.depth == 0);
  (void)bias;
  dl_tape_free(&tp);
  dl_tensor_free(a);
  dl_tensor_free(b);
  dl_tensor_free(w);
  dl_tensor_free(bias);
}

/* Every op of the element-wise list, called through the list (f32 and f64 mixed: a dtype error). */
static void test_elementwise_list(void) {
  dl_tape tp;
  dl_tensor *x = t(2, 2), *y = dl_tensor_make(&ctx, DL_F64, 2, (const int64_t[]){2, 2});
  dl_tensor *i = dl_tensor_make(&ctx, DL_I64, 2, (const int64_t[]){2, 2});
  dl_tape_init(&tp, &ctx, 0);
#define SITE_U(name, expr) AT_LINE(__LINE__, dl_t_##name(&tp, i));
#define SITE_P(name, expr) AT_LINE(__LINE__, dl_t_##name(&tp, i, 0.5));
#define SITE_B(name, expr) AT_LINE(__LINE__, dl_t_##name(&tp, x, y));
  DL_OPS_UNARY(SITE_U)
  DL_OPS_UNARY_P(SITE_P)
  DL_OPS_BINARY(SITE_B)
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_tensor_free(y);
  dl_tensor_free(i);
}

static void test_layers(void) {
  dl_tape tp;
  const dl_model_desc md = {DL_F32, 1};
  const dl_linear_desc l03 = {0, 3, 0};
  dl_conv2d_desc cd;
  dl_model *m = dl_model_make(&ctx, &md);
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3, 8, 8));
  memset(&cd, 0, sizeof cd);
  cd.in = 1;
  cd.out = 4;
  cd.kernel = 3;
  dl_tape_init(&tp, &ctx, 0);
  dl_conv2d_make(m, NULL, NULL, &cd);
  AT_LINE(__LINE__, dl_model_forward(m, &tp, x)); /* 3 channels into a conv of 1 */
  CHECK(strstr(site_msg, "'0'") != NULL);          /* and the layer's name */
  AT_LINE(__LINE__, dl_layer_call(m->root.child[0], &tp, x));
  AT_LINE(__LINE__, dl_linear_make(m, NULL, NULL, &l03));
  AT_LINE(__LINE__, dl_dropout_make(m, NULL, NULL, 1.5));
  dl_tape_free(&tp);
  dl_tensor_free(x);
  dl_model_free(m);
}

/* Every public dl_t_* function and layer constructor in the headers has its macro. */
static void test_wrappers_complete(void) {
  const char *files[] = {"include/dl/ops/core.h",  "include/dl/ops/shape.h", "include/dl/ops/reduce.h",
                         "include/dl/ops/loss.h",  "include/dl/ops/conv.h",  "include/dl/ops/sparse.h",
                         "include/dl/ops/norm.h",  "include/dl/ops/rnn.h",   "include/dl/ops/attention.h",
                         "include/dl/layers.h",    "include/dl/tape.h"};
  char line[512], site[200000];
  size_t n, k, found = 0;
  FILE *f = fopen("include/dl/site.h", "r");
  if (!f) { SKIP("run from the repository root (include/dl/site.h not found)"); return; }
  n = fread(site, 1, sizeof site - 1, f);
  site[n] = 0;
  fclose(f);
  for (k = 0; k < sizeof files / sizeof *files; k++) {
    FILE *h = fopen(files[k], "r");
    CHECK(h != NULL);
    if (!h) continue;
    while (fgets(line, sizeof line, h)) {
      char name[128], want[160];
      const char *p = strstr(line, "*dl_");
      if (strncmp(line, "DL_API dl_tensor *dl_t_", 23) != 0 && strncmp(line, "DL_API dl_layer *dl_", 20) != 0) continue;
      if (!p || sscanf(p + 1, "%127[a-z0-9_]", name) != 1) continue;
      if (strncmp(name, "dl__", 4) == 0 || (strncmp(name, "dl_t_", 5) != 0 && !strstr(name, "_make"))) continue;
      snprintf(want, sizeof want, "#define %s(...)", name);
      CHECK_MSG(strstr(site, want) != NULL, "%s (%s) has no call-site macro in dl/site.h", name, files[k]);
      found++;
    }
    fclose(h);
  }
  CHECK(found > 60);
}

int main(void) {
  dl_ctx_desc cd;
  memset(&cd, 0, sizeof cd);
  cd.panic = site_panic;
  dl_ctx_init(&ctx, &cd);
  RUN(test_ops);
  RUN(test_elementwise_list);
  RUN(test_layers);
  RUN(test_wrappers_complete);
  return harness_finish();
}
