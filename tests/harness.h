/* tests/harness.h - the small test harness every tests/test_*.c includes.
 *
 *   static void test_something(void) { CHECK(x == 1); CHECK_NEAR(a, b, 1e-6); }
 *   int main(void) { RUN(test_something); return harness_finish(); }
 *
 * Every CHECK counts as one assertion; a test function passes when none of its
 * checks failed. harness_finish prints "<file>: N passed, N failed" (tests,
 * not checks) and a machine-readable "HARNESS <passed> <failed> <skipped>" line
 * that tests/run.sh adds up. EXPECT_PANIC runs a statement that must hit the
 * panic handler and checks that the message contains every given fragment.
 */
#ifndef DL_TEST_HARNESS_H
#define DL_TEST_HARNESS_H

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int harness_failed_checks, harness_checks, harness_pass, harness_fail, harness_skip;
static int harness_skipped_now;
static const char *harness_current = "";

#define CHECK(cond)                                                                \
  do {                                                                             \
    harness_checks++;                                                              \
    if (!(cond)) {                                                                 \
      harness_failed_checks++;                                                     \
      fprintf(stderr, "  FAIL %s:%d in %s: %s\n", __FILE__, __LINE__,              \
              harness_current, #cond);                                             \
    }                                                                              \
  } while (0)

#define CHECK_MSG(cond, ...)                                                       \
  do {                                                                             \
    harness_checks++;                                                              \
    if (!(cond)) {                                                                 \
      harness_failed_checks++;                                                     \
      fprintf(stderr, "  FAIL %s:%d in %s: %s: ", __FILE__, __LINE__,              \
              harness_current, #cond);                                             \
      fprintf(stderr, __VA_ARGS__);                                                \
      fputc('\n', stderr);                                                         \
    }                                                                              \
  } while (0)

/* |a - b| <= tol, NaN never passes */
#define CHECK_NEAR(a, b, tol)                                                      \
  do {                                                                             \
    double harness_a_ = (double)(a), harness_b_ = (double)(b);                     \
    CHECK_MSG(fabs(harness_a_ - harness_b_) <= (tol), "%.17g vs %.17g (tol %g)",   \
              harness_a_, harness_b_, (double)(tol));                              \
  } while (0)

/* relative error |a-b| / max(|b|, floor) <= tol */
#define CHECK_REL(a, b, tol, floor_)                                               \
  do {                                                                             \
    double harness_a_ = (double)(a), harness_b_ = (double)(b);                     \
    double harness_d_ = fabs(harness_b_) > (floor_) ? fabs(harness_b_) : (floor_); \
    CHECK_MSG(fabs(harness_a_ - harness_b_) / harness_d_ <= (tol),                 \
              "%.17g vs %.17g (rel tol %g)", harness_a_, harness_b_, (double)(tol)); \
  } while (0)

#define SKIP(...)                                                                  \
  do {                                                                             \
    fprintf(stderr, "  SKIP %s: ", harness_current);                               \
    fprintf(stderr, __VA_ARGS__);                                                  \
    fputc('\n', stderr);                                                           \
    harness_skipped_now = 1;                                                       \
    return;                                                                        \
  } while (0)

#define RUN(fn)                                                                    \
  do {                                                                             \
    int harness_before_ = harness_failed_checks;                                   \
    harness_current = #fn;                                                         \
    harness_skipped_now = 0;                                                       \
    fn();                                                                          \
    if (harness_skipped_now) harness_skip++;                                       \
    else if (harness_failed_checks == harness_before_) harness_pass++;             \
    else { harness_fail++; fprintf(stderr, "FAILED %s\n", #fn); }                  \
  } while (0)

/* "$TMPDIR/<name>_XXXXXX" (/tmp when TMPDIR is unset or empty) into buf,
 * a template for mkdtemp (which the test declares with _XOPEN_SOURCE). */
static inline char *harness_tmp_template(char *buf, size_t n, const char *name) {
  const char *t = getenv("TMPDIR");
  snprintf(buf, n, "%s/%s_XXXXXX", t && *t ? t : "/tmp", name);
  return buf;
}

#define harness_finish() harness_finish_(__FILE__)
static inline int harness_finish_(const char *file) {
  printf("%s: %d passed, %d failed, %d skipped (%d checks)\n", file, harness_pass,
         harness_fail, harness_skip, harness_checks);
  printf("HARNESS %d %d %d\n", harness_pass, harness_fail, harness_skip);
  return harness_fail ? 1 : 0;
}

/* ---- panic capture: install harness_panic in a dl_ctx_desc ---- */
static jmp_buf harness_jmp;
static int harness_jmp_armed;
static char harness_panic_text[2048];

static inline void harness_panic(void *user, const char *op, const char *message, const char *file,
                          int line) {
  (void)user;
  snprintf(harness_panic_text, sizeof harness_panic_text, "%s: %s (%s:%d)", op, message, file,
           line);
  if (harness_jmp_armed) {
    harness_jmp_armed = 0;
    longjmp(harness_jmp, 1);
  }
  fprintf(stderr, "unexpected panic: %s\n", harness_panic_text);
}

/* EXPECT_PANIC(stmt, "frag1", "frag2", ...): stmt must panic, and the text
 * "op: message (file:line)" must contain each fragment. */
#define EXPECT_PANIC(stmt, ...)                                                    \
  do {                                                                             \
    const char *harness_frags_[] = {__VA_ARGS__};                                  \
    harness_panic_text[0] = 0;                                                     \
    harness_jmp_armed = 1;                                                         \
    if (setjmp(harness_jmp) == 0) {                                                \
      stmt;                                                                        \
      harness_jmp_armed = 0;                                                       \
      CHECK_MSG(0, "expected a panic from: %s", #stmt);                            \
    } else {                                                                       \
      size_t harness_k_;                                                           \
      for (harness_k_ = 0; harness_k_ < sizeof harness_frags_ / sizeof *harness_frags_; \
           harness_k_++)                                                           \
        CHECK_MSG(strstr(harness_panic_text, harness_frags_[harness_k_]) != NULL,  \
                  "panic text \"%s\" lacks \"%s\"", harness_panic_text,            \
                  harness_frags_[harness_k_]);                                     \
    }                                                                              \
  } while (0)

#endif
