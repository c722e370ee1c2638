/* dl-test-cxx */
/* tests/test_gpu_alloc.c - gpu.h's parts that need no GPU, run everywhere.
 *
 * - The caching allocator (dl_gpu_cache) over a fake device: a byte budget
 *   and a log of the backend's calls. A freed block is reused by the next
 *   request of its class (cache_hits grows, the backend is not called);
 *   other classes get their own blocks; in_use / cached / reserved and the
 *   peaks add up after every call; dl_gpu_cache_release gives back the
 *   cached blocks only; a request that does not fit releases the cache and
 *   retries (oom_releases), and when it still does not fit it is
 *   DL_ERR_NOMEM with the figures in the message, after which the
 *   allocator still works; a pointer it never gave (or given back twice)
 *   panics naming dl_gpu_free; hundreds of blocks (table growth) stay
 *   consistent.
 * - dl_gpu_round: 512-byte steps below 1 MiB, eight classes per power of
 *   two above, never below the request.
 * - Without DL_USE_CUDA: dl_gpu_open / dl_gpu_count / dl_tape_use_gpu are
 *   DL_ERR_NO_DEVICE with a message that says why, and dl_tape_input /
 *   dl_tape_host / dl_item are the identity on host tensors.
 */
#include "dl.h"
#include "harness.h"

static dl_ctx ctx;

typedef struct fake_dev {
  size_t budget, used;
  int mallocs, frees, live;
} fake_dev;

static int fake_malloc(void *u, void **p, size_t n) {
  fake_dev *d = (fake_dev *)u;
  unsigned char *b;
  if (d->used + n > d->budget) return DLG_OOM;
  b = (unsigned char *)malloc(n + 16); /* the size in a header, for fake_free */
  if (!b) return DLG_ERR;
  memcpy(b, &n, sizeof n);
  memset(b + 16, 0xAB, n); /* ASan sees any use past the class size */
  *p = b + 16;
  d->used += n;
  d->mallocs++;
  d->live++;
  return DLG_OK;
}
static void fake_free(void *u, void *p) {
  fake_dev *d = (fake_dev *)u;
  unsigned char *b = (unsigned char *)p - 16;
  size_t n;
  memcpy(&n, b, sizeof n);
  d->used -= n;
  d->frees++;
  d->live--;
  free(b);
}
static int fake_info(void *u, size_t *f, size_t *t) {
  fake_dev *d = (fake_dev *)u;
  *f = d->budget - d->used;
  *t = d->budget;
  return DLG_OK;
}

/* The fake device's byte count goes down on free too (sizes are the class sizes). */
static size_t class_of(size_t n) { return dl_gpu_round(n); }

static void check_sums(const dl_gpu_cache *c) {
  const dl_gpu_stats *s = &c->st;
  CHECK(s->reserved == s->in_use + s->cached);
  CHECK(s->peak_in_use >= s->in_use && s->peak_reserved >= s->reserved);
}

static void test_round(void) {
  size_t n;
  CHECK(dl_gpu_round(0) == 512 && dl_gpu_round(1) == 512 && dl_gpu_round(512) == 512);
  CHECK(dl_gpu_round(513) == 1024);
  CHECK(dl_gpu_round((1 << 20) - 1) == (1 << 20));
  CHECK(dl_gpu_round(1 << 20) == (1 << 20));
  CHECK(dl_gpu_round((1 << 20) + 1) == (1 << 20) + (1 << 17)); /* 2^20 / 8 steps */
  CHECK(dl_gpu_round((size_t)3 << 30) == (size_t)3 << 30);
  for (n = 1; n < ((size_t)1 << 26); n = n * 3 + 7) {
    size_t r = dl_gpu_round(n);
    CHECK_MSG(r >= n && r - n <= (n < (1 << 20) ? 511 : n / 8), "round(%zu) = %zu", n, r);
  }
}

static void test_reuse_and_stats(void) {
  fake_dev d = {1 << 26, 0, 0, 0, 0};
  dl_gpu_backend be = {fake_malloc, fake_free, fake_info, NULL, &d};
  dl_gpu_cache c;
  void *a, *b, *a2, *e;
  dl_gpu_cache_init(&c, &ctx, &be);
  CHECK(dl_gpu_cache_alloc(&c, &a, 1000, "fake") == DL_OK && a);
  CHECK(dl_gpu_cache_alloc(&c, &b, 5000, "fake") == DL_OK && b && b != a);
  CHECK(d.mallocs == 2 && c.st.in_use == class_of(1000) + class_of(5000) && c.st.cached == 0);
  check_sums(&c);
  dl_gpu_cache_free(&c, a);
  CHECK(c.st.cached == class_of(1000) && c.st.in_use == class_of(5000));
  check_sums(&c);
  /* same class (1000 and 1020 round to 1024): the cached block, no backend call */
  CHECK(dl_gpu_cache_alloc(&c, &a2, 1020, "fake") == DL_OK && a2 == a);
  CHECK(d.mallocs == 2 && c.st.cache_hits == 1 && c.st.cached == 0);
  /* another class: a new block */
  CHECK(dl_gpu_cache_alloc(&c, &e, 2000, "fake") == DL_OK && e != a && e != b);
  CHECK(d.mallocs == 3 && c.st.device_mallocs == 3);
  check_sums(&c);
  dl_gpu_cache_free(&c, a2);
  dl_gpu_cache_free(&c, b);
  dl_gpu_cache_free(&c, e);
  CHECK(c.st.in_use == 0 && c.st.cached == class_of(1000) + class_of(5000) + class_of(2000));
  CHECK(c.st.peak_in_use == class_of(1000) + class_of(5000) + class_of(2000));
  CHECK(c.st.allocs == 4 && c.st.frees == 4);
  /* release: every cached block back to the device */
  dl_gpu_cache_release(&c);
  CHECK(c.st.cached == 0 && c.st.reserved == 0 && d.frees == 3 && d.live == 0);
  check_sums(&c);
  /* after a release, a request makes a new block */
  CHECK(dl_gpu_cache_alloc(&c, &a, 1000, "fake") == DL_OK && d.mallocs == 4);
  dl_gpu_cache_free(&c, a);
  dl_gpu_cache_destroy(&c);
  CHECK(d.live == 0);
}

static void test_oom(void) {
  fake_dev d = {3 << 20, 0, 0, 0, 0}; /* 3 MiB */
  dl_gpu_backend be = {fake_malloc, fake_free, fake_info, NULL, &d};
  dl_gpu_cache c;
  void *a, *b, *x = (void *)1;
  dl_gpu_cache_init(&c, &ctx, &be);
  CHECK(dl_gpu_cache_alloc(&c, &a, 1 << 20, "fake") == DL_OK);
  CHECK(dl_gpu_cache_alloc(&c, &b, 1 << 20, "fake") == DL_OK);
  dl_gpu_cache_free(&c, b); /* 1 MiB cached, 1 MiB in use, 1 MiB free on the device */
  /* 2 MiB do not fit beside the cached block: the cache is released, then it fits */
  CHECK(dl_gpu_cache_alloc(&c, &b, 2 << 20, "fake") == DL_OK && b);
  CHECK(c.st.oom_releases == 1 && c.st.cached == 0);
  check_sums(&c);
  /* nothing left: DL_ERR_NOMEM with the figures, *out NULL */
  dl_ctx_clear(&ctx);
  CHECK(dl_gpu_cache_alloc(&c, &x, 1 << 20, "fake") == DL_ERR_NOMEM && x == NULL);
  CHECK_MSG(strstr(dl_ctx_message(&ctx), "fake: out of memory allocating 1048576 bytes") != NULL, "%s",
            dl_ctx_message(&ctx));
  CHECK_MSG(strstr(dl_ctx_message(&ctx), "3.0 MiB in use") != NULL, "%s", dl_ctx_message(&ctx));
  CHECK_MSG(strstr(dl_ctx_message(&ctx), "0.0 MiB free of 3.0 MiB") != NULL, "%s", dl_ctx_message(&ctx));
  /* and still works once memory is back */
  dl_gpu_cache_free(&c, a);
  CHECK(dl_gpu_cache_alloc(&c, &x, 1 << 20, "fake") == DL_OK && x == a);
  dl_gpu_cache_free(&c, x);
  dl_gpu_cache_free(&c, b);
  /* a pointer it never gave, and a double free */
  EXPECT_PANIC(dl_gpu_cache_free(&c, &d), "dl_gpu_free", "not allocated by this device");
  EXPECT_PANIC(dl_gpu_cache_free(&c, b), "dl_gpu_free", "freed twice");
  CHECK(c.st.in_use == 0);
  dl_gpu_cache_destroy(&c);
  CHECK(d.live == 0);
}

static void test_many(void) {
  enum { N = 700 };
  fake_dev d = {(size_t)1 << 34, 0, 0, 0, 0};
  dl_gpu_backend be = {fake_malloc, fake_free, fake_info, NULL, &d};
  dl_gpu_cache c;
  void *p[N];
  size_t total = 0;
  int i, round;
  dl_gpu_cache_init(&c, &ctx, &be);
  for (round = 0; round < 3; round++) {
    for (i = 0; i < N; i++) {
      size_t n = (size_t)(i % 97 + 1) * 700 + (size_t)(i % 5) * 300000;
      CHECK(dl_gpu_cache_alloc(&c, &p[i], n, "fake") == DL_OK && p[i]);
      if (round == 0) total += class_of(n);
    }
    CHECK(c.st.in_use == total);
    for (i = 0; i < N; i += 2) dl_gpu_cache_free(&c, p[i]);
    for (i = 1; i < N; i += 2) dl_gpu_cache_free(&c, p[i]);
    CHECK(c.st.in_use == 0 && c.st.cached == total);
    check_sums(&c);
  }
  /* rounds 2 and 3 came entirely from the cache */
  CHECK_MSG(c.st.device_mallocs == N, "%llu device mallocs", (unsigned long long)c.st.device_mallocs);
  CHECK(c.st.cache_hits == 2 * N);
  dl_gpu_cache_destroy(&c);
  CHECK(d.live == 0);
}

static void test_no_cuda(void) {
#ifndef DL_USE_CUDA
  dl_gpu *g = (dl_gpu *)1;
  dl_tape tp;
  int n = 7;
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3));
  dl_ctx_clear(&ctx);
  CHECK(dl_gpu_open(&g, &ctx, 0) == DL_ERR_NO_DEVICE && g == NULL);
  CHECK(strstr(dl_ctx_message(&ctx), "DL_USE_CUDA") != NULL);
  CHECK(dl_gpu_count(&ctx, &n) == DL_ERR_NO_DEVICE && n == 0);
  CHECK(dl_tape_init(&tp, &ctx, 0) == DL_OK);
  CHECK(dl_tape_use_gpu(&tp, NULL) == DL_ERR_NO_DEVICE && tp.gpu == NULL);
  dl_f32(x)[1] = 2.5f; /* [0, 1]: the first element of column 1 */
  CHECK(dl_tape_input(&tp, x) == x && dl_tape_host(&tp, x) == x);
  {
    dl_tensor v = dl_view_slice(x, 1, 1, 2, 1);
    CHECK(dl_item(&v) == 2.5);
  }
  dl_tape_free(&tp);
  dl_tensor_free(x);
#else
  SKIP("built with DL_USE_CUDA: test_gpu covers the device");
#endif
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  RUN(test_round);
  RUN(test_reuse_and_stats);
  RUN(test_oom);
  RUN(test_many);
  RUN(test_no_cuda);
  return harness_finish();
}
