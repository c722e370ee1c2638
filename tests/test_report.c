/* dl-test-cxx */
/* tests/test_report.c - progress line, metrics, CSV log and PNG chart
 * (include/dl/report.h).
 *
 * - Progress: a fake clock and a non-terminal FILE* (tmpfile): every line
 *   compared with text written by hand (throughput, elapsed rounded down,
 *   ETA rounded up, the summary's ETA for the epochs left); lines every
 *   tenth / half of an epoch, every N seconds when the step count is
 *   unknown; the in-place path (forced) byte for byte: '\r', redraws at
 *   most every redraw_s, padding over a longer previous line, cutting to
 *   the width; a real pseudo-terminal (posix_openpt) is detected as one and
 *   gets '\r' redraws. The EMA of the running loss against hand values.
 * - Metrics: argmax ties go to the first maximum and a NaN wins (checked
 *   against torch.argmax by hand: [1,3,3] -> 1, [2,2,2] -> 0, [0,nan,5] -> 1),
 *   f32 and f64 logits, i64 and i32 labels, a transposed (strided) view;
 *   a confusion matrix over two batches (logits and index predictions),
 *   per-class accuracy (NaN for an absent class), its printed table; misuse
 *   panics naming the shapes or the bad label.
 * - CSV: exact file contents, the header once when a log is resumed, a
 *   different header refused, a row cut short by a crash kept on its own
 *   line, flushed rows visible before close, bad columns and paths.
 * - Chart: the layout's ranges against hand-computed nice ticks, axis
 *   pixels on the frame, curve colours where straight-line data puts them,
 *   no curve colour where there is no data, the legend in the emptiest
 *   corner, tick labels drawn; the PNG decoded with stb_image equals the
 *   rendered buffer; failing saves (missing folder, a folder as target,
 *   a read-only folder) return DL_ERR_IO and leave no temporary file.
 *   The memory a save takes: a handful of allocations, as many for any
 *   picture (the encoder's pieces come from chunks), all given back; an
 *   allocator that fails at each of them in turn gets DL_ERR_NOMEM naming
 *   the file, loses nothing (the earlier chart stays, no temporary is left)
 *   and leaks nothing.
 * The test writes a fresh folder dl_report_XXXXXX under $TMPDIR (else /tmp) and
 * removes it.
 */
/* dl-test-flags: -DDL_USE_STB_IMAGE_WRITE */
#define _XOPEN_SOURCE 700 /* posix_openpt, mkdtemp */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include "dl.h"
#include "harness.h"

#ifndef STBI_VERSION /* not already compiled in by data.h (DL_USE_STB_IMAGE) */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
/* stb_image 2.27 declares stbi_set_unpremultiply_on_load_thread static but
 * defines it as stbi__unpremultiply_on_load_thread: one name for both, or
 * gcc reports "declared static but never defined" at the end of the file */
#define stbi_set_unpremultiply_on_load_thread test_report_stbi_unpremultiply_thread
#define stbi__unpremultiply_on_load_thread test_report_stbi_unpremultiply_thread
#include <stb/stb_image.h>
#undef stbi_set_unpremultiply_on_load_thread
#undef stbi__unpremultiply_on_load_thread
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* STBI_VERSION */

static dl_ctx ctx;       /* panics go to the harness */
static char dir[256];     /* the test's temporary folder */

typedef struct fake_clock { double t; } fake_clock;
static double fake_now(void *u) { return ((fake_clock *)u)->t; }

/* Everything written to f so far, as a malloc'd string. */
static char *slurp(FILE *f) {
  long n;
  char *s;
  fflush(f);
  n = ftell(f);
  s = (char *)malloc((size_t)n + 1);
  rewind(f);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
  s[n] = 0;
  return s;
}
static char *slurp_path(const char *path) {
  FILE *f = fopen(path, "rb");
  char *s;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  s = slurp(f);
  fclose(f);
  return s;
}
static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

/* ---- progress --------------------------------------------------------- */

static void test_progress_lines(void) {
  fake_clock clk = {100.0};
  FILE *f = tmpfile();
  dl_progress pg;
  dl_progress_desc d;
  char *out;
  int i;
  const char *want =
      "epoch 1/2 | step  5/10 ( 50%) | loss 0.8500 | acc 0.7667 | 60.0 samples/s | elapsed 0:00:02 | eta 0:00:03\n"
      "epoch 1/2 done | 10 steps in 0:00:06 | loss 0.7250 | acc 0.8500 | 60.0 samples/s | total 0:00:06 | eta 0:00:06 | val_loss 0.500\n"
      "epoch 2/2 | step  5/10 ( 50%) | loss 0.5000 | 120.0 samples/s | elapsed 0:00:01 | eta 0:00:02\n"
      "epoch 2/2 done | 10 steps in 0:00:02 | loss 0.5000 | 120.0 samples/s | total 0:00:08\n";
  if (!f) SKIP("tmpfile failed");
  memset(&d, 0, sizeof d);
  d.stream = f; d.epochs = 2; d.steps = 10; d.mode = DL_PROGRESS_LINES; d.every_frac = 0.5;
  d.clock = fake_now; d.clock_user = &clk;
  dl_progress_init(&pg, &d);
  CHECK(pg.tty == 0);
  /* epoch 1: 10 steps of 30 samples, 0.5 s each; loss 1 - 0.05 i, 20 + i right.
   * At step 5: 150 samples / 2.5 s = 60/s; mean loss (0.95+...+0.75)/5 = 0.85;
   * acc (21+...+25)/150 = 0.76667; eta 2.5 / 5 * 5 = 2.5 -> 3 s. Summary at
   * t = 106 (1 s of validation): 10 steps in 6 s, loss 7.25/10, acc 255/300,
   * 300 samples / 5 s (to the last update), eta for 1 more epoch: 6 s. */
  dl_progress_begin(&pg, 1);
  for (i = 1; i <= 10; i++) {
    clk.t += 0.5;
    dl_progress_update_acc(&pg, 30, 1.0 - 0.05 * i, 20 + i);
  }
  clk.t += 1.0;
  dl_progress_end_epoch(&pg, "val_loss %.3f", 0.5);
  CHECK_NEAR(dl_progress_loss(&pg), 0.725, 1e-12);
  CHECK_NEAR(dl_progress_accuracy(&pg), 0.85, 1e-12);
  CHECK_NEAR(dl_progress_samples_per_s(&pg), 60.0, 1e-9);
  CHECK_NEAR(dl_progress_epoch_s(&pg), 6.0, 1e-9);
  CHECK_NEAR(pg.epoch_s, 6.0, 1e-9);
  /* epoch 2: 0.25 s steps, no accuracy: 150 / 1.25 = 120/s, eta 1.25 -> 2 s;
   * ends at t = 108.5: 2.5 s, total 8.5 s, no eta after the last epoch. */
  dl_progress_begin(&pg, 2);
  for (i = 1; i <= 10; i++) {
    clk.t += 0.25;
    dl_progress_update(&pg, 30, 0.5);
  }
  dl_progress_end_epoch(&pg, NULL);
  CHECK(isnan(dl_progress_accuracy(&pg)));
  CHECK_NEAR(dl_progress_samples_per_s(&pg), 120.0, 1e-9);
  CHECK_NEAR(dl_progress_epoch_s(&pg), 2.5, 1e-9);
  CHECK_NEAR(dl_progress_total_s(&pg), 8.5, 1e-9);
  out = slurp(f);
  CHECK_MSG(strcmp(out, want) == 0, "got:\n%s\nwant:\n%s", out, want);
  free(out);
  fclose(f);
}

/* every_frac 0.1 (the default) on 20 steps: lines at steps 2, 4, ..., 18. */
static void test_progress_tenths(void) {
  fake_clock clk = {0};
  FILE *f = tmpfile();
  dl_progress pg;
  dl_progress_desc d;
  char *out, *s;
  int i, lines = 0;
  if (!f) SKIP("tmpfile failed");
  memset(&d, 0, sizeof d);
  d.stream = f; d.steps = 20; d.mode = DL_PROGRESS_LINES; d.clock = fake_now; d.clock_user = &clk;
  dl_progress_init(&pg, &d);
  dl_progress_begin(&pg, 3);
  for (i = 1; i <= 20; i++) { clk.t += 1; dl_progress_update(&pg, 8, 1.0); }
  out = slurp(f);
  for (s = out; (s = strchr(s, '\n')) != NULL; s++) lines++;
  CHECK_MSG(lines == 9, "%d lines:\n%s", lines, out);
  CHECK(strncmp(out, "epoch 3 | step  2/20 ( 10%) | loss 1.0000 | 8.0 samples/s | elapsed 0:00:02 | eta 0:00:18\n",
                strlen("epoch 3 | step  2/20 ( 10%) | loss 1.0000 | 8.0 samples/s | elapsed 0:00:02 | eta 0:00:18\n")) == 0);
  CHECK(strstr(out, "step 18/20 ( 90%)") != NULL);
  CHECK(strstr(out, "step 20/20") == NULL);
  CHECK(strstr(out, "step  3/20") == NULL);
  free(out);
  fclose(f);
}

/* Unknown step count: a line every 10 s (the default then), a label, large
 * losses in %.3e, epochs unknown. */
static void test_progress_unknown_steps(void) {
  fake_clock clk = {0};
  FILE *f = tmpfile();
  dl_progress pg;
  dl_progress_desc d;
  char *out;
  int i;
  const char *want =
      "train | epoch 1 | step 4 | loss 2.000e+04 | 10.0 samples/s | elapsed 0:00:12\n"
      "train | epoch 1 | step 8 | loss 2.000e+04 | 10.0 samples/s | elapsed 0:00:24\n"
      "train | epoch 1 done | 9 steps in 0:01:30 | loss 2.000e+04 | 10.0 samples/s | total 0:01:30\n";
  if (!f) SKIP("tmpfile failed");
  memset(&d, 0, sizeof d);
  d.stream = f; d.mode = DL_PROGRESS_LINES; d.label = "train"; d.clock = fake_now; d.clock_user = &clk;
  dl_progress_init(&pg, &d);
  dl_progress_begin(&pg, 1);
  for (i = 1; i <= 9; i++) { clk.t += 3; dl_progress_update(&pg, 30, 20000.0); }
  clk.t = 90;
  dl_progress_end_epoch(&pg, NULL);
  out = slurp(f);
  CHECK_MSG(strcmp(out, want) == 0, "got:\n%s\nwant:\n%s", out, want);
  free(out);
  fclose(f);
}

/* smoothing 0.5: losses 1, 0 -> EMA 0.5, 0.25; bias-corrected 0.5/0.5 = 1,
 * 0.25/0.75 = 1/3; the summary keeps the plain mean 0.5. every_s 2: a line
 * when 2 s passed since the last one, also with steps known. */
static void test_progress_ema_and_seconds(void) {
  fake_clock clk = {0};
  FILE *f = tmpfile();
  dl_progress pg;
  dl_progress_desc d;
  char *out;
  if (!f) SKIP("tmpfile failed");
  memset(&d, 0, sizeof d);
  d.stream = f; d.steps = 100; d.epochs = 1; d.mode = DL_PROGRESS_LINES; d.smoothing = 0.5; d.every_s = 2;
  d.clock = fake_now; d.clock_user = &clk;
  dl_progress_init(&pg, &d);
  dl_progress_begin(&pg, 1);
  clk.t = 1;
  dl_progress_update(&pg, 10, 1.0);
  CHECK_NEAR(dl_progress_running_loss(&pg), 1.0, 1e-12);
  clk.t = 2;
  dl_progress_update(&pg, 10, 0.0);
  CHECK_NEAR(dl_progress_running_loss(&pg), 1.0 / 3.0, 1e-12);
  CHECK_NEAR(dl_progress_loss(&pg), 0.5, 1e-12);
  out = slurp(f);
  CHECK_MSG(strcmp(out, "epoch 1/1 | step   2/100 (  2%) | loss 0.3333 | 10.0 samples/s | elapsed 0:00:02 | eta 0:01:38\n") == 0,
            "got %s", out);
  free(out);
  fclose(f);
}

/* The in-place path, forced: '\r' redraws at most every 0.1 s, a shorter
 * summary padded over the longer line, then '\n'. */
static void test_progress_tty_forced(void) {
  fake_clock clk = {0};
  FILE *f = tmpfile();
  dl_progress pg;
  dl_progress_desc d;
  char *out, want[1024];
  const char *l1 = "epoch 1/1 | step 1/3 ( 33%) | loss 1.0000 | 200.0 samples/s | elapsed 0:00:00 | eta 0:00:01";
  const char *l3 = "epoch 1/1 | step 3/3 (100%) | loss 1.0000 | 187.5 samples/s | elapsed 0:00:00 | eta 0:00:00";
  const char *sum = "epoch 1/1 done | 3 steps in 0:00:00 | loss 1.0000 | 187.5 samples/s | total 0:00:00";
  if (!f) SKIP("tmpfile failed");
  memset(&d, 0, sizeof d);
  d.stream = f; d.epochs = 1; d.steps = 3; d.mode = DL_PROGRESS_TTY; d.width = 500;
  d.clock = fake_now; d.clock_user = &clk;
  dl_progress_init(&pg, &d);
  CHECK(pg.tty == 1);
  dl_progress_begin(&pg, 1);
  clk.t = 0.05; dl_progress_update(&pg, 10, 1.0);  /* first: drawn */
  clk.t = 0.10; dl_progress_update(&pg, 10, 1.0);  /* 0.05 s later: not */
  clk.t = 0.16; dl_progress_update(&pg, 10, 1.0);  /* 0.11 s later: drawn */
  clk.t = 0.20; dl_progress_end_epoch(&pg, NULL);
  snprintf(want, sizeof want, "\r%s\r%s\r%s%*s\n", l1, l3, sum, (int)(strlen(l3) - strlen(sum)), "");
  out = slurp(f);
  CHECK_MSG(strcmp(out, want) == 0, "got:\n%s\nwant:\n%s", out, want);
  free(out);
  fclose(f);

  /* width 30: each redraw cut to 29 characters */
  f = tmpfile();
  if (!f) return;
  d.stream = f; d.width = 30;
  clk.t = 0;
  dl_progress_init(&pg, &d);
  dl_progress_begin(&pg, 1);
  clk.t = 0.05; dl_progress_update(&pg, 10, 1.0);
  out = slurp(f);
  snprintf(want, sizeof want, "\r%.29s", l1);
  CHECK_MSG(strcmp(out, want) == 0, "got '%s' want '%s'", out, want);
  free(out);
  fclose(f);
}

/* A real terminal: a pseudo-terminal's slave is detected (AUTO) and gets
 * '\r' redraws; a regular file is not. */
static void test_progress_pty(void) {
  int m, flags;
  char *sname, buf[4096];
  FILE *slave, *file;
  dl_progress pg;
  dl_progress_desc d;
  fake_clock clk = {0};
  ssize_t n, got = 0;
  m = posix_openpt(O_RDWR | O_NOCTTY);
  if (m < 0) SKIP("posix_openpt failed: no pseudo-terminals here");
  if (grantpt(m) != 0 || unlockpt(m) != 0 || !(sname = ptsname(m))) { close(m); SKIP("grantpt/unlockpt failed"); }
  slave = fopen(sname, "w");
  if (!slave) { close(m); SKIP("cannot open %s", sname); }
  memset(&d, 0, sizeof d);
  d.stream = slave; d.epochs = 1; d.steps = 2; d.width = 500; d.clock = fake_now; d.clock_user = &clk;
  dl_progress_init(&pg, &d);
  CHECK(pg.tty == 1);
  dl_progress_begin(&pg, 1);
  clk.t = 1; dl_progress_update(&pg, 4, 0.5);
  clk.t = 2; dl_progress_update(&pg, 4, 0.5);
  dl_progress_end_epoch(&pg, NULL);
  fclose(slave);
  flags = fcntl(m, F_GETFL);
  fcntl(m, F_SETFL, flags | O_NONBLOCK);
  while (got < (ssize_t)sizeof buf - 1 && (n = read(m, buf + got, sizeof buf - 1 - (size_t)got)) > 0) got += n;
  buf[got > 0 ? got : 0] = 0;
  close(m);
  CHECK_MSG(strstr(buf, "\repoch 1/1 | step 1/2 ( 50%)") != NULL, "pty got '%s'", buf);
  CHECK_MSG(strstr(buf, "\repoch 1/1 | step 2/2 (100%)") != NULL, "pty got '%s'", buf);
  CHECK_MSG(strstr(buf, "\repoch 1/1 done | 2 steps") != NULL, "pty got '%s'", buf);
  file = tmpfile();
  if (file) {
    d.stream = file;
    dl_progress_init(&pg, &d);
    CHECK(pg.tty == 0);
    fclose(file);
  }
}

static void test_clock(void) {
  double a = dl_clock_monotonic(NULL), b;
  int i, ok = 1;
  dl_progress pg;
  for (i = 0; i < 1000; i++) {
    b = dl_clock_monotonic(NULL);
    ok &= b >= a;
    a = b;
  }
  CHECK(ok);
  CHECK(a > 0);
  dl_progress_init(&pg, NULL); /* defaults: stderr, the monotonic clock */
  CHECK(pg.desc.stream == stderr);
  CHECK(pg.desc.clock == dl_clock_monotonic);
  CHECK(pg.t_init >= a);
  CHECK(pg.desc.redraw_s == 0.1 && pg.desc.every_frac == 0.1 && pg.desc.every_s == 10);
}

/* ---- metrics ---------------------------------------------------------- */

/* rows: [1,3,3] -> 1 (first max), [2,2,2] -> 0, [-1,-5,-0.5] -> 2,
 * [0,nan,5] -> 1 (NaN wins), [7,1,7] -> 0; labels 1,0,1,2,0: rows 0, 1, 4 right. */
static const double logit_vals[5][3] = {{1, 3, 3}, {2, 2, 2}, {-1, -5, -0.5}, {0, NAN, 5}, {7, 1, 7}};
static const int64_t label_vals[5] = {1, 0, 1, 2, 0};

static void test_accuracy(void) {
  dl_tensor *lf = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(5, 3)), *ld = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(5, 3));
  dl_tensor *lt = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 5));
  dl_tensor *y64 = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(5)), *y32 = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(5));
  dl_tensor tv;
  int64_t am[5], i, j;
  const int64_t want_am[5] = {1, 0, 2, 1, 0};
  for (i = 0; i < 5; i++) {
    for (j = 0; j < 3; j++) {
      dl_f32(lf)[i * 3 + j] = (float)logit_vals[i][j];
      dl_f64(ld)[i * 3 + j] = logit_vals[i][j];
      dl_f64(lt)[j * 5 + i] = logit_vals[i][j];
    }
    dl_i64(y64)[i] = label_vals[i];
    dl_i32(y32)[i] = (int32_t)label_vals[i];
  }
  tv = dl_view_transpose(lt, 0, 1); /* [5, 3] with strides (1, 5) */
  dl_argmax_rows(lf, am);
  for (i = 0; i < 5; i++) CHECK_MSG(am[i] == want_am[i], "f32 row %lld: %lld", (long long)i, (long long)am[i]);
  dl_argmax_rows(&tv, am);
  for (i = 0; i < 5; i++) CHECK_MSG(am[i] == want_am[i], "view row %lld: %lld", (long long)i, (long long)am[i]);
  CHECK(dl_accuracy_count(lf, y64) == 3);
  CHECK(dl_accuracy_count(ld, y32) == 3);
  CHECK(dl_accuracy_count(&tv, y64) == 3);
  CHECK_NEAR(dl_accuracy(ld, y64), 0.6, 1e-15);
  {
    dl_tensor none = dl_view_slice(ld, 0, 0, 0, 1);
    dl_tensor nolab = dl_view_slice(y64, 0, 0, 0, 1);
    CHECK(isnan(dl_accuracy(&none, &nolab)));
  }
  /* misuse */
  dl_i64(y64)[3] = 3;
  EXPECT_PANIC(dl_accuracy_count(ld, y64), "dl_accuracy_count", "label 3 at position 3", "3 classes");
  dl_i64(y64)[3] = 2;
  EXPECT_PANIC(dl_accuracy_count(lt, y64), "dl_accuracy_count", "f64[3, 5]", "i64[5]");
  EXPECT_PANIC(dl_accuracy_count(y64, y64), "dl_accuracy_count", "f32 or f64");
  EXPECT_PANIC(dl_accuracy_count(ld, ld), "dl_accuracy_count", "i64 or i32");
  dl_tensor_free(lf); dl_tensor_free(ld); dl_tensor_free(lt); dl_tensor_free(y64); dl_tensor_free(y32);
}

static void test_confusion(void) {
  dl_confusion cm;
  dl_tensor *lg = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(5, 3)), *y = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(5));
  dl_tensor *pred = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(4)), *y2 = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(4));
  int64_t i, j;
  const int32_t pv[4] = {2, 2, 0, 1}, yv[4] = {2, 1, 0, 1};
  /* batch 1 (logits): (true, pred) = (1,1) (0,0) (1,2) (2,1) (0,0);
   * batch 2 (indices): (2,2) (1,2) (0,0) (1,1). Matrix, rows true:
   *   0: 3 0 0 | 1: 0 2 2 | 2: 0 1 1  -> 6 right of 9. */
  const int64_t want[3][3] = {{3, 0, 0}, {0, 2, 2}, {0, 1, 1}};
  const char *names[3] = {"cat", "dog", "bird"};
  const char *want_named =
      "confusion matrix: 3 classes, 9 samples, accuracy 0.6667 (rows: true class, columns: predicted)\n"
      "true\\pred  cat  dog bird | n    acc\n"
      "cat          3    0    0 | 3 1.0000\n"
      "dog          0    2    2 | 4 0.5000\n"
      "bird         0    1    1 | 2 0.5000\n";
  FILE *f;
  char *out;
  for (i = 0; i < 5; i++) {
    for (j = 0; j < 3; j++) dl_f32(lg)[i * 3 + j] = (float)logit_vals[i][j];
    dl_i64(y)[i] = label_vals[i];
  }
  for (i = 0; i < 4; i++) { dl_i32(pred)[i] = pv[i]; dl_i32(y2)[i] = yv[i]; }
  CHECK(dl_confusion_init(&cm, &ctx, 3) == DL_OK);
  CHECK(cm.matrix && cm.matrix->dtype == DL_I64 && cm.matrix->ndim == 2 && cm.matrix->shape[0] == 3 &&
        cm.matrix->shape[1] == 3);
  CHECK(dl_confusion_add(&cm, lg, y) == 3);
  CHECK(dl_confusion_add_pred(&cm, pred, y2) == 3);
  for (i = 0; i < 3; i++)
    for (j = 0; j < 3; j++)
      CHECK_MSG(dl_confusion_count(&cm, i, j) == want[i][j] && dl_i64(cm.matrix)[i * 3 + j] == want[i][j],
                "[%lld][%lld] = %lld", (long long)i, (long long)j, (long long)dl_confusion_count(&cm, i, j));
  CHECK(dl_confusion_total(&cm) == 9);
  CHECK(dl_confusion_correct(&cm) == 6);
  CHECK_NEAR(dl_confusion_accuracy(&cm), 6.0 / 9.0, 1e-15);
  CHECK_NEAR(dl_confusion_class_accuracy(&cm, 0), 1.0, 1e-15);
  CHECK_NEAR(dl_confusion_class_accuracy(&cm, 1), 0.5, 1e-15);
  CHECK_NEAR(dl_confusion_class_accuracy(&cm, 2), 0.5, 1e-15);
  f = tmpfile();
  if (f) {
    dl_confusion_fprint(f, &cm, names);
    out = slurp(f);
    CHECK_MSG(strcmp(out, want_named) == 0, "got:\n%s\nwant:\n%s", out, want_named);
    free(out);
    fclose(f);
  }
  EXPECT_PANIC(dl_confusion_count(&cm, 3, 0), "dl_confusion_count", "out of range");
  dl_confusion_reset(&cm);
  CHECK(dl_confusion_total(&cm) == 0);
  CHECK(isnan(dl_confusion_accuracy(&cm)));
  dl_confusion_free(&cm);

  /* 4 classes, class 3 never seen: its accuracy is NaN, printed "-";
   * default names are the indices */
  CHECK(dl_confusion_init(&cm, &ctx, 4) == DL_OK);
  dl_confusion_add_pred(&cm, pred, y2);
  CHECK(isnan(dl_confusion_class_accuracy(&cm, 3)));
  f = tmpfile();
  if (f) {
    const char *want4 =
        "confusion matrix: 4 classes, 4 samples, accuracy 0.7500 (rows: true class, columns: predicted)\n"
        "true\\pred 0 1 2 3 | n    acc\n"
        "0         1 0 0 0 | 1 1.0000\n"
        "1         0 1 1 0 | 2 0.5000\n"
        "2         0 0 1 0 | 1 1.0000\n"
        "3         0 0 0 0 | 0      -\n";
    dl_confusion_fprint(f, &cm, NULL);
    out = slurp(f);
    CHECK_MSG(strcmp(out, want4) == 0, "got:\n%s\nwant:\n%s", out, want4);
    free(out);
    fclose(f);
  }
  EXPECT_PANIC(dl_confusion_add(&cm, lg, y), "dl_confusion_add", "3 classes but the matrix 4", "f32[5, 3]");
  dl_i32(y2)[1] = 4;
  EXPECT_PANIC(dl_confusion_add_pred(&cm, pred, y2), "dl_confusion_add_pred", "position 1", "label 4");
  dl_confusion_free(&cm);
  CHECK(dl_confusion_init(&cm, &ctx, 0) == DL_ERR_ARG);
  CHECK(strstr(dl_ctx_message(&ctx), "classes must be >= 1") != NULL);
  dl_tensor_free(lg); dl_tensor_free(y); dl_tensor_free(pred); dl_tensor_free(y2);
}

/* ---- CSV -------------------------------------------------------------- */

static void test_csv(void) {
  char path[320], path2[320];
  dl_csv_log log;
  dl_csv_log_desc d;
  dl_epoch_stats s;
  char *txt;
  const char *hdr = "epoch,train_loss,train_acc,val_loss,val_acc,lr,samples_per_s,wall_s\n";
  const char *row1 = "1,0.5,0.75,0.6,0.7,0.001,1234.5,10.25\n";
  const char *row2 = "2,0.25,0.875,,0.8,0.0005,1300,20.5\n";
  const char *row3 = "3,0.3333333333,1,0.1,0.9,0.0001,1000000,30\n";
  char want[1024];
  path_in(path, sizeof path, "log.csv");
  memset(&d, 0, sizeof d);
  d.path = path;
  CHECK(dl_csv_log_open(&log, &ctx, &d) == DL_OK);
  s.epoch = 1; s.train_loss = 0.5; s.train_acc = 0.75; s.val_loss = 0.6; s.val_acc = 0.7; s.lr = 1e-3;
  s.samples_per_s = 1234.5; s.wall_s = 10.25;
  CHECK(dl_csv_log_epoch(&log, &s) == DL_OK);
  /* flushed: another reader sees the row before close */
  txt = slurp_path(path);
  snprintf(want, sizeof want, "%s%s", hdr, row1);
  CHECK_MSG(txt && strcmp(txt, want) == 0, "got '%s'", txt ? txt : "(null)");
  free(txt);
  s.epoch = 2; s.train_loss = 0.25; s.train_acc = 0.875; s.val_loss = NAN; s.val_acc = 0.8; s.lr = 5e-4;
  s.samples_per_s = 1300; s.wall_s = 20.5;
  CHECK(dl_csv_log_epoch(&log, &s) == DL_OK);
  CHECK(log.rows == 2);
  CHECK(dl_csv_log_close(&log) == DL_OK);
  CHECK(dl_csv_log_close(&log) == DL_OK);
  /* resumed: same header, appended, header not repeated */
  CHECK(dl_csv_log_open(&log, &ctx, &d) == DL_OK);
  s.epoch = 3; s.train_loss = 1.0 / 3.0; s.train_acc = 1; s.val_loss = 0.1; s.val_acc = 0.9; s.lr = 1e-4;
  s.samples_per_s = 1e6; s.wall_s = 30;
  CHECK(dl_csv_log_epoch(&log, &s) == DL_OK);
  dl_csv_log_close(&log);
  txt = slurp_path(path);
  snprintf(want, sizeof want, "%s%s%s%s", hdr, row1, row2, row3);
  CHECK_MSG(txt && strcmp(txt, want) == 0, "got '%s' want '%s'", txt ? txt : "(null)", want);
  free(txt);
  /* other columns on the same file: refused, file unchanged */
  {
    const char *cols[2] = {"step", "loss"};
    const double v[2] = {1, 0.1};
    d.columns = cols; d.ncolumns = 2;
    CHECK(dl_csv_log_open(&log, &ctx, &d) == DL_ERR_FORMAT);
    CHECK(strstr(dl_ctx_message(&ctx), "fresh") != NULL && strstr(dl_ctx_message(&ctx), path) != NULL);
    CHECK(log.text == NULL);
    txt = slurp_path(path);
    CHECK(txt && strcmp(txt, want) == 0);
    free(txt);
    /* fresh: truncated, own columns */
    d.fresh = 1;
    CHECK(dl_csv_log_open(&log, &ctx, &d) == DL_OK);
    CHECK(dl_csv_log_row(&log, v) == DL_OK);
    EXPECT_PANIC(dl_csv_log_epoch(&log, &s), "dl_csv_log_epoch", "own 2 columns");
    dl_csv_log_close(&log);
    txt = slurp_path(path);
    CHECK_MSG(txt && strcmp(txt, "step,loss\n1,0.1\n") == 0, "got '%s'", txt ? txt : "(null)");
    free(txt);
  }
  /* a row cut short (a crash mid-write) stays on its own line */
  {
    const char *cols[2] = {"step", "loss"};
    const double v[2] = {2, 0.2};
    FILE *f = fopen(path, "wb");
    if (f) { fputs("step,loss\n1,0.", f); fclose(f); }
    d.columns = cols; d.ncolumns = 2; d.fresh = 0; d.digits = 3;
    CHECK(dl_csv_log_open(&log, &ctx, &d) == DL_OK);
    CHECK(dl_csv_log_row(&log, v) == DL_OK);
    dl_csv_log_close(&log);
    txt = slurp_path(path);
    CHECK_MSG(txt && strcmp(txt, "step,loss\n1,0.\n2,0.2\n") == 0, "got '%s'", txt ? txt : "(null)");
    free(txt);
  }
  /* each row rewrites the file atomically: a row whose write fails (the path is a folder now) leaves the file
   * as it was and is written with the next row that succeeds */
  {
    const char *cols[2] = {"step", "loss"};
    const double v1[2] = {1, 0.5}, v2[2] = {2, 0.25}, v3[2] = {3, 0.125};
    memset(&d, 0, sizeof d);
    d.path = path; d.columns = cols; d.ncolumns = 2; d.fresh = 1;
    CHECK(dl_csv_log_open(&log, &ctx, &d) == DL_OK);
    CHECK(dl_csv_log_row(&log, v1) == DL_OK);
    CHECK(remove(path) == 0 && mkdir(path, 0700) == 0);
    CHECK(dl_csv_log_row(&log, v2) == DL_ERR_IO);
    CHECK_MSG(strstr(dl_ctx_message(&ctx), "dl_csv_log_row") && strstr(dl_ctx_message(&ctx), path),
              "message: %s", dl_ctx_message(&ctx));
    CHECK(rmdir(path) == 0);
    CHECK(dl_csv_log_row(&log, v3) == DL_OK && log.rows == 2);
    dl_csv_log_close(&log);
    txt = slurp_path(path);
    CHECK_MSG(txt && strcmp(txt, "step,loss\n1,0.5\n2,0.25\n3,0.125\n") == 0, "got '%s'", txt ? txt : "(null)");
    free(txt);
  }
  /* bad columns, bad path */
  {
    const char *bad[2] = {"a,b", "c"};
    memset(&d, 0, sizeof d);
    d.path = path; d.columns = bad; d.ncolumns = 2;
    CHECK(dl_csv_log_open(&log, &ctx, &d) == DL_ERR_ARG);
    CHECK(strstr(dl_ctx_message(&ctx), "\"a,b\"") != NULL);
    path_in(path2, sizeof path2, "no/such/dir/log.csv");
    memset(&d, 0, sizeof d);
    d.path = path2;
    CHECK(dl_csv_log_open(&log, &ctx, &d) == DL_ERR_IO);
    CHECK(strstr(dl_ctx_message(&ctx), path2) != NULL);
  }
  remove(path);
}

/* ---- chart ------------------------------------------------------------ */

/* Straight lines over epochs 1..10: losses 1.0 .. 0.28 and 1.18 .. 0.46 (y
 * range [0.28, 1.18]: step 0.2, axis 0.2 .. 1.2); accuracies 0.5 .. 0.86 and
 * 0.45 .. 0.81 (range [0.45, 0.86]: step 0.1, axis 0.4 .. 0.9). */
static double tl[10], vl[10], ta[10], va[10];
static void chart_data(void) {
  int i;
  for (i = 0; i < 10; i++) {
    tl[i] = 1.0 - 0.08 * i;
    vl[i] = 1.18 - 0.08 * i;
    ta[i] = 0.5 + 0.04 * i;
    va[i] = 0.45 + 0.04 * i;
  }
}
static dl_chart_desc chart_desc(void) {
  dl_chart_desc d;
  memset(&d, 0, sizeof d);
  d.n = 10; d.train_loss = tl; d.val_loss = vl; d.train_acc = ta; d.val_acc = va;
  d.title = "test chart";
  return d;
}
static int near_rgb(const unsigned char *p, int r, int g, int b, int tol) {
  return abs(p[0] - r) <= tol && abs(p[1] - g) <= tol && abs(p[2] - b) <= tol;
}
/* Is there a pixel of colour (r,g,b) within rad pixels of (x, y)? */
static int colour_near(const unsigned char *img, int w, int h, double x, double y, int rad, int r, int g, int b) {
  int i, j, xi = (int)floor(x + 0.5), yi = (int)floor(y + 0.5);
  for (j = yi - rad; j <= yi + rad; j++)
    for (i = xi - rad; i <= xi + rad; i++)
      if (i >= 0 && j >= 0 && i < w && j < h && near_rgb(img + ((size_t)j * w + i) * 3, r, g, b, 40)) return 1;
  return 0;
}
static int count_colour(const unsigned char *img, int w, int x0, int y0, int x1, int y1, int r, int g, int b, int tol) {
  int x, y, n = 0;
  if (x0 < 0) x0 = 0;
  if (y0 < 0) y0 = 0;
  for (y = y0; y <= y1; y++)
    for (x = x0; x <= x1; x++) n += near_rgb(img + ((size_t)y * w + x) * 3, r, g, b, tol);
  return n;
}

static void test_chart_render(void) {
  dl_chart_desc d;
  dl_chart_layout L;
  unsigned char *img;
  const dl_chart_panel *P, *A;
  double px, py;
  int x, y, black, s;
  chart_data();
  d = chart_desc();
  CHECK(dl_chart_layout_of(&ctx, &d, &L) == DL_OK);
  CHECK(L.width == 1000 && L.height == 420 && L.scale == 2);
  img = (unsigned char *)malloc((size_t)L.width * L.height * 3);
  CHECK(dl_chart_render(&ctx, &d, img, &L) == DL_OK);
  P = &L.panel[0];
  A = &L.panel[1];
  s = L.scale;
  CHECK(P->present && A->present);
  CHECK_NEAR(P->ystep, 0.2, 1e-12);
  CHECK_NEAR(P->ymin, 0.2, 1e-12);
  CHECK_NEAR(P->ymax, 1.2, 1e-12);
  CHECK_NEAR(A->ystep, 0.1, 1e-12);
  CHECK_NEAR(A->ymin, 0.4, 1e-12);
  CHECK_NEAR(A->ymax, 0.9, 1e-12);
  CHECK(P->xmin == 1 && P->xmax == 10 && A->xmin == 1 && A->xmax == 10);
  CHECK(P->xstep >= 1 && P->xstep == floor(P->xstep));
  CHECK(P->right < A->left && P->left > 0 && A->right < L.width && P->bottom < L.height);
  CHECK(P->px0 > P->left && P->px1 < P->right && P->py0 < P->bottom && P->py1 > P->top);
  /* the axes: the frame's left column and bottom row are black throughout */
  black = 0;
  for (y = P->top; y <= P->bottom; y++) black += near_rgb(img + ((size_t)y * L.width + P->left) * 3, 0, 0, 0, 0);
  CHECK_MSG(black == P->bottom - P->top + 1, "%d black of %d", black, P->bottom - P->top + 1);
  black = 0;
  for (x = A->left; x <= A->right; x++) black += near_rgb(img + ((size_t)A->bottom * L.width + x) * 3, 0, 0, 0, 0);
  CHECK(black == A->right - A->left + 1);
  /* left of the axis only tick marks are black (6 ticks: 0.2 .. 1.2) */
  black = 0;
  for (y = P->top; y <= P->bottom; y++) black += near_rgb(img + ((size_t)y * L.width + P->left - 1) * 3, 0, 0, 0, 0);
  CHECK_MSG(black == 6, "%d tick pixels", black);
  /* curves: straight lines between points, so the midpoint of epochs 5 and 6
   * lies on them: train loss 1 - 0.08 * 4.5 = 0.64, val acc 0.45 + 0.04 * 4.5 */
  dl_chart_map(P, 5.5, 0.64, &px, &py);
  CHECK_NEAR(px, P->px0 + 4.5 / 9.0 * (P->px1 - P->px0), 1e-9);
  CHECK_NEAR(py, P->py0 + 0.44 / 1.0 * (P->py1 - P->py0), 1e-9);
  CHECK(colour_near(img, L.width, L.height, px, py, 1, DL_CHART_TRAIN_RGB));
  dl_chart_map(A, 5.5, 0.63, &px, &py);
  CHECK(colour_near(img, L.width, L.height, px, py, 1, DL_CHART_VAL_RGB));
  /* markers at the data points: the pixel itself has the colour */
  dl_chart_map(P, 1, 1.0, &px, &py);
  CHECK(colour_near(img, L.width, L.height, px, py, 0, DL_CHART_TRAIN_RGB));
  dl_chart_map(A, 10, 0.86, &px, &py);
  CHECK(colour_near(img, L.width, L.height, px, py, 0, DL_CHART_TRAIN_RGB));
  /* no curve where there is no data: loss 0.9 at epoch 8 (curves at 0.44, 0.62),
   * accuracy 0.85 at epoch 2 (curves at 0.54, 0.49) */
  dl_chart_map(P, 8, 0.9, &px, &py);
  CHECK(!colour_near(img, L.width, L.height, px, py, 4, DL_CHART_TRAIN_RGB));
  CHECK(!colour_near(img, L.width, L.height, px, py, 4, DL_CHART_VAL_RGB));
  dl_chart_map(A, 2, 0.85, &px, &py);
  CHECK(!colour_near(img, L.width, L.height, px, py, 4, DL_CHART_TRAIN_RGB));
  /* the legend (grey border 170) goes where the curves are not: top right
   * of the falling losses, bottom right of the rising accuracies */
  {
    const int mx = (P->left + P->right) / 2, my = (P->top + P->bottom) / 2;
    const int ax = (A->left + A->right) / 2, ay = (A->top + A->bottom) / 2;
    CHECK(count_colour(img, L.width, mx, P->top + 1, P->right - 1, my, 170, 170, 170, 0) > 50);
    CHECK(count_colour(img, L.width, P->left + 1, my, mx, P->bottom - 1, 170, 170, 170, 0) == 0);
    CHECK(count_colour(img, L.width, ax, ay, A->right - 1, A->bottom - 1, 170, 170, 170, 0) > 50);
    CHECK(count_colour(img, L.width, ax, A->top + 1, A->right - 1, ay, 170, 170, 170, 0) == 0);
  }
  /* tick labels: dark text left of the 0.2 and 1.2 ticks, below epoch 10... */
  dl_chart_map(P, 1, 0.2, &px, &py);
  CHECK(count_colour(img, L.width, P->left - 40 * s, (int)py - 4 * s, P->left - 3 * s, (int)py + 4 * s, 30, 30, 30, 0) > 10);
  dl_chart_map(P, 1, 1.2, &px, &py);
  CHECK(count_colour(img, L.width, P->left - 40 * s, (int)py - 4 * s, P->left - 3 * s, (int)py + 4 * s, 30, 30, 30, 0) > 10);
  /* ...and nothing between the tick labels 0.2 and 0.4, halfway */
  dl_chart_map(P, 1, 0.3, &px, &py);
  CHECK(count_colour(img, L.width, P->left - 40 * s, (int)py - 2 * s, P->left - 3 * s, (int)py + 2 * s, 30, 30, 30, 60) == 0);
  /* the title's text is at the top */
  CHECK(count_colour(img, L.width, 0, 0, L.width - 1, P->top - 12 * s, 0, 0, 0, 0) > 30);

  /* a NaN is no point: one marker fewer, the line joins its neighbours */
  {
    unsigned char *img2 = (unsigned char *)malloc((size_t)L.width * L.height * 3);
    int before = count_colour(img, L.width, P->left, P->top, P->right, P->bottom, DL_CHART_VAL_RGB, 10), after;
    vl[4] = NAN;
    CHECK(dl_chart_render(&ctx, &d, img2, NULL) == DL_OK);
    after = count_colour(img2, L.width, P->left, P->top, P->right, P->bottom, DL_CHART_VAL_RGB, 10);
    CHECK_MSG(after < before && after > before / 2, "%d orange pixels, %d with the NaN", before, after);
    dl_chart_map(P, 5, 1.18 - 0.32, &px, &py);
    CHECK(colour_near(img2, L.width, L.height, px, py, 1, DL_CHART_VAL_RGB));
    vl[4] = 1.18 - 0.32;
    free(img2);
  }
  free(img);

  /* one panel (loss only), one point: a 600-wide image, the point centred */
  {
    dl_chart_desc d1;
    double one = 0.5;
    memset(&d1, 0, sizeof d1);
    d1.n = 1; d1.train_loss = &one;
    CHECK(dl_chart_layout_of(&ctx, &d1, &L) == DL_OK);
    CHECK(L.width == 600 && L.panel[0].present && !L.panel[1].present);
    img = (unsigned char *)malloc((size_t)L.width * L.height * 3);
    CHECK(dl_chart_render(&ctx, &d1, img, &L) == DL_OK);
    CHECK(L.panel[0].xmin == 0.5 && L.panel[0].xmax == 1.5);
    /* 0.5 +- 10% = [0.45, 0.55]: step 0.02, widened to whole ticks 0.44 .. 0.56 */
    CHECK_NEAR(L.panel[0].ystep, 0.02, 1e-15);
    CHECK_NEAR(L.panel[0].ymin, 0.44, 1e-12);
    CHECK_NEAR(L.panel[0].ymax, 0.56, 1e-12);
    dl_chart_map(&L.panel[0], 1, 0.5, &px, &py);
    CHECK_NEAR(px, (L.panel[0].px0 + L.panel[0].px1) / 2, 1e-9);
    CHECK(colour_near(img, L.width, L.height, px, py, 0, DL_CHART_TRAIN_RGB));
    free(img);
  }
  /* refused */
  {
    dl_chart_desc bad = chart_desc();
    bad.n = 0;
    CHECK(dl_chart_render(&ctx, &bad, NULL, NULL) == DL_ERR_ARG);
    bad = chart_desc();
    bad.train_loss = bad.val_loss = bad.train_acc = bad.val_acc = NULL;
    CHECK(dl_chart_layout_of(&ctx, &bad, &L) == DL_ERR_ARG);
    CHECK(strstr(dl_ctx_message(&ctx), "no curve") != NULL);
    bad = chart_desc();
    bad.width = 80; bad.height = 100;
    CHECK(dl_chart_layout_of(&ctx, &bad, &L) == DL_ERR_ARG);
    CHECK(strstr(dl_ctx_message(&ctx), "too small") != NULL);
    bad.width = 100000;
    CHECK(dl_chart_layout_of(&ctx, &bad, &L) == DL_ERR_ARG);
  }
}

static void test_chart_png(void) {
  char path[320], tmp[360], sub[320];
  dl_chart_desc d;
  dl_chart_layout L;
  unsigned char *img, *dec;
  int w = 0, h = 0, comp = 0;
  FILE *f;
  chart_data();
  d = chart_desc();
  path_in(path, sizeof path, "chart.png");
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
#ifndef DL_USE_STB_IMAGE_WRITE
  CHECK(dl_chart_save_png(&ctx, path, &d) == DL_ERR_UNSUPPORTED);
  CHECK(strstr(dl_ctx_message(&ctx), "#define DL_USE_STB_IMAGE_WRITE") != NULL);
  (void)L; (void)img; (void)dec; (void)w; (void)h; (void)comp; (void)f; (void)sub;
#else
  CHECK(dl_chart_save_png(&ctx, path, &d) == DL_OK);
  f = fopen(tmp, "rb");
  CHECK(f == NULL); /* renamed away */
  if (f) fclose(f);
  dec = stbi_load(path, &w, &h, &comp, 3);
  CHECK(dec != NULL);
  if (!dec) return;
  CHECK(w == 1000 && h == 420 && comp == 3);
  img = (unsigned char *)malloc((size_t)w * h * 3);
  CHECK(dl_chart_render(&ctx, &d, img, &L) == DL_OK);
  CHECK(memcmp(img, dec, (size_t)w * h * 3) == 0);
  /* and on the decoded image itself: the axis, a curve point */
  {
    const dl_chart_panel *P = &L.panel[0];
    double px, py;
    int y, black = 0;
    for (y = P->top; y <= P->bottom; y++) black += near_rgb(dec + ((size_t)y * w + P->left) * 3, 0, 0, 0, 0);
    CHECK(black == P->bottom - P->top + 1);
    dl_chart_map(P, 2.5, 1.18 - 0.08 * 1.5, &px, &py);
    CHECK(colour_near(dec, w, h, px, py, 1, DL_CHART_VAL_RGB));
  }
  free(img);
  stbi_image_free(dec);

  /* failures: a missing folder, a folder as the target, bad data; none
   * leaves a temporary, and the earlier chart stays as it was */
  {
    char bad[360], *before = slurp_path(path), *after;
    dl_chart_desc nod = chart_desc();
    snprintf(bad, sizeof bad, "%s/missing/chart.png", dir);
    CHECK(dl_chart_save_png(&ctx, bad, &d) == DL_ERR_IO);
    CHECK(strstr(dl_ctx_message(&ctx), "cannot create") != NULL && strstr(dl_ctx_message(&ctx), bad) != NULL);
    path_in(sub, sizeof sub, "adir");
    CHECK(mkdir(sub, 0700) == 0);
    CHECK(dl_chart_save_png(&ctx, sub, &d) == DL_ERR_IO);
    CHECK(strstr(dl_ctx_message(&ctx), "is not a regular file") != NULL);
    /* a device is refused, not replaced by a regular file (as root it used to be) */
    CHECK(dl_chart_save_png(&ctx, "/dev/null", &d) == DL_ERR_IO);
    CHECK(strstr(dl_ctx_message(&ctx), "'/dev/null' exists and is not a regular file") != NULL);
    {
      struct stat sb;
      CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    }
    /* a link planted at this process's first temporary name is not followed: its target stays as it was,
     * the chart is written through the next name; a killed writer's old temporary (a pid that cannot
     * exist) is removed, a live process's (our parent's) is not */
    {
      char victim[360], planted[400], stale[400], live[400], *v;
      FILE *vf;
      path_in(victim, sizeof victim, "victim.txt");
      vf = fopen(victim, "wb");
      CHECK(vf && fputs("precious", vf) >= 0);
      if (vf) fclose(vf);
      snprintf(planted, sizeof planted, "%s.tmp.%ld.0", path, (long)getpid());
      CHECK(symlink(victim, planted) == 0);
      snprintf(stale, sizeof stale, "%s.tmp.999999999.3", path);
      snprintf(live, sizeof live, "%s.tmp.%ld.0", path, (long)getppid());
      vf = fopen(stale, "wb");
      if (vf) fclose(vf);
      vf = fopen(live, "wb");
      if (vf) fclose(vf);
      { /* both last written an hour ago: only the dead process's goes */
        struct utimbuf old = {time(NULL) - 3600, time(NULL) - 3600};
        CHECK(utime(stale, &old) == 0 && utime(live, &old) == 0);
      }
      CHECK(dl_chart_save_png(&ctx, path, &d) == DL_OK);
      v = slurp_path(victim);
      CHECK(v && strcmp(v, "precious") == 0);
      free(v);
#ifdef __linux__
      CHECK(access(stale, F_OK) != 0);
#endif
      CHECK(access(live, F_OK) == 0);
      remove(planted);
      remove(stale);
      remove(live);
      remove(victim);
    }
    snprintf(bad, sizeof bad, "%s.tmp.%ld.0", sub, (long)getpid());
    f = fopen(bad, "rb");
    CHECK(f == NULL);
    if (f) fclose(f);
    nod.n = 0;
    CHECK(dl_chart_save_png(&ctx, path, &nod) == DL_ERR_ARG);
    after = slurp_path(path);
    CHECK(before && after && strlen(before) == strlen(after) && memcmp(before, after, strlen(before)) == 0);
    free(before);
    free(after);
    if (geteuid() != 0) { /* root writes anywhere */
      CHECK(chmod(sub, 0500) == 0);
      snprintf(bad, sizeof bad, "%s/chart.png", sub);
      CHECK(dl_chart_save_png(&ctx, bad, &d) == DL_ERR_IO);
      CHECK(strstr(dl_ctx_message(&ctx), "Permission denied") != NULL);
      chmod(sub, 0700);
    }
    rmdir(sub);
  }
  remove(path);
#endif
}

#ifdef DL_USE_STB_IMAGE_WRITE
/* an allocator that counts and fails its fail_at-th call (from 1; 0: never) */
typedef struct png_alloc { int calls, live, fail_at; } png_alloc;
static void *png_alloc_fn(size_t size, void *user) {
  png_alloc *a = (png_alloc *)user;
  if (++a->calls == a->fail_at) return NULL;
  a->live++;
  return malloc(size);
}
static void png_free_fn(void *p, void *user) {
  ((png_alloc *)user)->live--;
  free(p);
}
/* The whole of a (binary) file, its length in *n; NULL when unreadable. */
static unsigned char *file_bytes(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *b = NULL;
  *n = -1;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (*n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (b = (unsigned char *)malloc((size_t)*n + 1)) != NULL && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  return b;
}
/* Does dir hold a name with ".tmp." in it? */
static int temporary_left(void) {
  DIR *dd = opendir(dir);
  struct dirent *e;
  int found = 0;
  if (!dd) return 1;
  while ((e = readdir(dd)) != NULL) found |= strstr(e->d_name, ".tmp.") != NULL;
  closedir(dd);
  return found;
}
#endif

/* A save takes a few allocations whatever the chart shows (stb's deflate,
 * left to itself, took 7,000-13,000, more with busier curves), and each of
 * them failing in turn is a clean DL_ERR_NOMEM. */
static void test_chart_png_memory(void) {
#ifdef DL_USE_STB_IMAGE_WRITE
  png_alloc a;
  dl_ctx_desc cd;
  dl_ctx mc;
  dl_chart_desc d, busy;
  double noisy[4][200], xs[200];
  char path[320];
  unsigned char *before, *after;
  long nb, na;
  int k, calls, calls_busy, nomem = 0, encoder = 0;
  memset(&a, 0, sizeof a);
  memset(&cd, 0, sizeof cd);
  cd.panic = harness_panic;
  cd.allocator.alloc = png_alloc_fn;
  cd.allocator.free = png_free_fn;
  cd.allocator.user = &a;
  dl_ctx_init(&mc, &cd);
  chart_data();
  d = chart_desc();
  path_in(path, sizeof path, "memory.png");
  CHECK(dl_chart_save_png(&mc, path, &d) == DL_OK);
  calls = a.calls;
  CHECK_MSG(calls >= 2 && calls <= 8, "a chart save took %d allocations", calls);
  CHECK(a.live == 0);
  /* 200 epochs of jagged curves: a less compressible picture of the same size, the same count */
  for (k = 0; k < 200; k++) {
    uint32_t r = (uint32_t)k * 2654435761u;
    xs[k] = k + 1;
    noisy[0][k] = 2.0 / (1 + k) + (double)(r % 97) / 300.0;
    noisy[1][k] = 2.5 / (1 + k) + (double)(r % 89) / 250.0;
    noisy[2][k] = 0.5 + 0.4 * k / 200.0 + (double)(r % 83) / 900.0;
    noisy[3][k] = 0.45 + 0.4 * k / 200.0 + (double)(r % 79) / 800.0;
  }
  memset(&busy, 0, sizeof busy);
  busy.n = 200; busy.x = xs;
  busy.train_loss = noisy[0]; busy.val_loss = noisy[1]; busy.train_acc = noisy[2]; busy.val_acc = noisy[3];
  a.calls = 0;
  CHECK(dl_chart_save_png(&mc, path, &busy) == DL_OK);
  calls_busy = a.calls;
  CHECK_MSG(calls_busy == calls, "a busy chart took %d allocations, a plain one %d", calls_busy, calls);
  CHECK(a.live == 0);
  CHECK(dl_chart_save_png(&mc, path, &d) == DL_OK);
  before = file_bytes(path, &nb);
  CHECK(before && nb > 100);
  for (k = 1; k <= calls; k++) {
    dl_status st;
    a.calls = 0;
    a.fail_at = k;
    st = dl_chart_save_png(&mc, path, &busy);
    CHECK_MSG(st == DL_ERR_NOMEM, "failing allocation %d of %d: %s", k, calls, dl_status_str(st));
    nomem += st == DL_ERR_NOMEM;
    CHECK_MSG(strstr(dl_ctx_message(&mc), path) != NULL, "failing allocation %d: %s", k, dl_ctx_message(&mc));
    encoder += strstr(dl_ctx_message(&mc), "the PNG encoder ran out of memory") != NULL;
    CHECK_MSG(a.live == 0, "failing allocation %d: %d blocks left", k, a.live);
    CHECK(!temporary_left());
    after = file_bytes(path, &na);
    CHECK_MSG(before && after && na == nb && memcmp(before, after, (size_t)nb) == 0, "failing allocation %d: the chart changed", k);
    free(after);
  }
  CHECK(nomem == calls && encoder >= 1);
  free(before);
  a.fail_at = 0;
  CHECK(dl_chart_save_png(&mc, path, &busy) == DL_OK && a.live == 0);
  remove(path);
#ifdef DL__PNG_TRACKED
  { /* the encoder alone on 320 x 200 of noise, whose deflate output outgrows the first chunk:
     * more chunks, decoded back exactly; each allocation failing in turn, the second chunk's
     * included, is -1 with nothing left */
    enum { NW = 320, NH = 200 };
    unsigned char *rgb = (unsigned char *)malloc(NW * NH * 3), *dec;
    dl__png_mem mem;
    dl_atomic_file af;
    int e, w = 0, h = 0, comp = 0, total;
    uint32_t r = 12345;
    for (e = 0; e < NW * NH * 3; e++) rgb[e] = (unsigned char)((r = r * 1664525u + 1013904223u) >> 24);
    path_in(path, sizeof path, "noise.png");
    a.calls = 0;
    CHECK(dl_atomic_begin(&af, &mc, path, NULL) == DL_OK);
    total = a.calls;
    CHECK(dl__png_encode(&mem, &mc, &af, NW, NH, rgb) == 1);
    CHECK_MSG(mem.chunks >= 2, "the noise took %d chunk(s)", mem.chunks);
    total = a.calls - total;
    CHECK(dl_atomic_commit(&af) == DL_OK && a.live == 0);
    dec = stbi_load(path, &w, &h, &comp, 3);
    CHECK(dec && w == NW && h == NH && memcmp(dec, rgb, NW * NH * 3) == 0);
    stbi_image_free(dec);
    for (k = 1; k <= total; k++) {
      CHECK(dl_atomic_begin(&af, &mc, path, NULL) == DL_OK);
      a.calls = 0;
      a.fail_at = k;
      CHECK_MSG(dl__png_encode(&mem, &mc, &af, NW, NH, rgb) == -1 && mem.asked > 0, "failing chunk %d of %d", k, total);
      a.fail_at = 0;
      dl_atomic_abort(&af);
      CHECK_MSG(a.live == 0, "failing chunk %d: %d blocks left", k, a.live);
    }
    free(rgb);
    remove(path);
  }
#endif
#endif
}

int main(void) {
  dl_ctx_desc cd;
  memset(&cd, 0, sizeof cd);
  cd.panic = harness_panic;
  dl_ctx_init(&ctx, &cd);
  if (!mkdtemp(harness_tmp_template(dir, sizeof dir, "dl_report"))) { perror("mkdtemp"); return 1; }
  RUN(test_progress_lines);
  RUN(test_progress_tenths);
  RUN(test_progress_unknown_steps);
  RUN(test_progress_ema_and_seconds);
  RUN(test_progress_tty_forced);
  RUN(test_progress_pty);
  RUN(test_clock);
  RUN(test_accuracy);
  RUN(test_confusion);
  RUN(test_csv);
  RUN(test_chart_render);
  RUN(test_chart_png);
  RUN(test_chart_png_memory);
  rmdir(dir);
  return harness_finish();
}
