/* dl-test-cxx */
/* tests/test_alloc_hooks.c - compile-time allocator hooks replace malloc/free
 * everywhere the library allocates. The hooks are only declared before dl.h
 * and nothing of the C library is included first, as with a firmware pool
 * allocator: the headers must declare what they use themselves (abort). */
#include <stddef.h>
static int hook_allocs, hook_frees;
static void *hook_malloc(size_t n, void *user);
static void *hook_realloc(void *p, size_t n, void *user);
static void hook_free(void *p, void *user);
#define DL_MALLOC(n, user) hook_malloc((n), (user))
#define DL_REALLOC(p, n, user) hook_realloc((p), (n), (user))
#define DL_FREE(p, user) hook_free((p), (user))
#include "dl.h"
#include "harness.h"

#include <stdlib.h>
static void *hook_malloc(size_t n, void *user) { (void)user; hook_allocs++; return malloc(n); }
static void *hook_realloc(void *p, size_t n, void *user) { (void)user; return realloc(p, n); }
static void hook_free(void *p, void *user) { (void)user; if (p) hook_frees++; free(p); }

static void test_hooks_used(void) {
  dl_tensor *t = dl_tensor_make(NULL, DL_F32, DL_SHAPE(10, 10));
  dl_arena a;
  CHECK(t != NULL && hook_allocs == 1);
  dl_tensor_free(t);
  CHECK(hook_frees == 1);
  CHECK(dl_arena_init(&a, NULL, 1000, 1) == DL_OK && hook_allocs == 2);
  CHECK(dl_tensor_new(&a, DL_F64, DL_SHAPE(1000)) != NULL); /* overflow block */
  CHECK(hook_allocs == 3);
  dl_arena_free(&a);
  CHECK(hook_frees == 3);
  { /* the realloc hook is part of the set even where the library does not need it */
    void *p = DL_REALLOC(NULL, 16, NULL);
    CHECK(p != NULL);
    DL_FREE(p, NULL);
  }
}

int main(void) {
  RUN(test_hooks_used);
  return harness_finish();
}
