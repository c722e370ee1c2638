/* dl-test-cxx */
/* tests/test_tensor.c - creation, overflow checks, views, copies, printing,
 * dtype rules, panic messages. */
#include "dl/tensor.h"
#include "harness.h"

static dl_ctx ctx;

static void setup(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
}

static void test_make_and_free(void) {
  dl_tensor *t = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3, 4));
  int64_t i;
  float *p;
  CHECK(t != NULL);
  if (!t) return;
  CHECK(t->ndim == 3 && t->numel == 24 && t->dtype == DL_F32 && t->device == DL_CPU);
  CHECK(t->strides[0] == 12 && t->strides[1] == 4 && t->strides[2] == 1);
  CHECK((uintptr_t)t->data % DL_ALIGN == 0);
  CHECK(dl_tensor_is_contiguous(t));
  p = dl_f32(t);
  for (i = 0; i < 24; i++) CHECK(p[i] == 0.0f); /* zero-filled */
  dl_tensor_free(t);
  t = dl_tensor_make(&ctx, DL_I64, 0, NULL); /* a scalar */
  CHECK(t && t->ndim == 0 && t->numel == 1 && t->data != NULL);
  dl_tensor_free(t);
  t = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(5, 0)); /* empty */
  CHECK(t && t->numel == 0 && t->data == NULL);
  dl_tensor_free(t);
}

static void test_overflow_refused(void) {
  int64_t big = (int64_t)1 << 40;
  dl_tensor *t;
  dl_ctx_clear(&ctx);
  t = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(big, big));
  CHECK(t == NULL);
  CHECK(ctx.status == DL_ERR_OVERFLOW);
  CHECK(strstr(ctx.message, "f32[1099511627776, 1099511627776]") != NULL);
  /* fits in int64 elements but not in bytes */
  t = dl_tensor_make(&ctx, DL_F64, DL_SHAPE((int64_t)1 << 61));
  CHECK(t == NULL && ctx.status == DL_ERR_OVERFLOW);
  t = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(-3, 2));
  CHECK(t == NULL && ctx.status == DL_ERR_ARG);
  t = dl_tensor_make(&ctx, DL_F32, 9, (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(t == NULL && ctx.status == DL_ERR_ARG && strstr(ctx.message, "rank 9") != NULL);
  CHECK(dl_tensor_arena_bytes(DL_F32, DL_SHAPE(big, big)) == 0);
  {
    int64_t n;
    size_t b;
    CHECK(dl_shape_size(DL_F32, DL_SHAPE(3, 5), &n, &b) == DL_OK && n == 15 && b == 60);
    CHECK(dl_shape_size(DL_U8, DL_SHAPE(big, big, big), NULL, NULL) == DL_ERR_OVERFLOW);
    /* a zero size does not excuse the others: the strides are their product */
    CHECK(dl_shape_size(DL_U8, DL_SHAPE(0, big, big, big), NULL, NULL) == DL_ERR_OVERFLOW);
    CHECK(dl_shape_size(DL_U8, DL_SHAPE(0, 7, 9), &n, &b) == DL_OK && n == 0 && b == 0);
  }
}

static void test_arena_tensors(void) {
  dl_arena a;
  dl_tensor *t, *u;
  size_t need = dl_tensor_arena_bytes(DL_F32, DL_SHAPE(10, 10));
  static unsigned char buf[8192];
  dl_arena_init_buffer(&a, &ctx, buf, sizeof buf);
  t = dl_tensor_new(&a, DL_F32, DL_SHAPE(10, 10));
  CHECK(t != NULL && dl_arena_used(&a) <= need + DL_ALIGN);
  u = dl_tensor_zeros(&a, DL_F64, DL_SHAPE(3));
  CHECK(u && dl_f64(u)[0] == 0 && dl_f64(u)[2] == 0);
  CHECK(dl_tensor_new(&a, DL_F32, DL_SHAPE(4096)) == NULL); /* 16 KiB > buffer */
  CHECK(ctx.status == DL_ERR_NOMEM);
  dl_tensor_free(t); /* arena tensors: free is a no-op */
}

static void test_wrap(void) {
  float mem[6] = {1, 2, 3, 4, 5, 6};
  dl_tensor t;
  int64_t idx[2] = {1, 2};
  CHECK(dl_tensor_wrap(&t, &ctx, DL_F32, DL_SHAPE(2, 3), mem) == DL_OK);
  CHECK(dl_tensor_get(&t, idx) == 6.0);
  dl_tensor_set(&t, idx, 9.5);
  CHECK(mem[5] == 9.5f);
  CHECK(dl_tensor_wrap(&t, &ctx, DL_F32, DL_SHAPE(-1), mem) == DL_ERR_ARG);
}

static void test_views(void) {
  dl_tensor *t = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(2, 3, 4)), v, w;
  double *p = dl_f64(t);
  int64_t i, idx[3];
  for (i = 0; i < 24; i++) p[i] = (double)i;
  /* transpose shares storage and swaps strides */
  v = dl_view_transpose(t, 0, 2);
  CHECK(v.shape[0] == 4 && v.shape[2] == 2 && v.strides[0] == 1 && v.strides[2] == 12);
  CHECK(!dl_tensor_is_contiguous(&v) && v.data == t->data && (v.flags & DL_TENSOR_VIEW));
  idx[0] = 3; idx[1] = 1; idx[2] = 1;
  CHECK(dl_tensor_get(&v, idx) == 12 + 4 + 3);
  /* permute */
  v = dl_view_permute(t, (const int[]){1, 2, 0});
  CHECK(v.shape[0] == 3 && v.shape[1] == 4 && v.shape[2] == 2);
  idx[0] = 2; idx[1] = 3; idx[2] = 1;
  CHECK(dl_tensor_get(&v, idx) == 12 + 8 + 3);
  /* reshape with an inferred size */
  v = dl_view_reshape(t, DL_SHAPE(6, -1));
  CHECK(v.ndim == 2 && v.shape[1] == 4 && dl_tensor_is_contiguous(&v));
  /* slice with a step, and negative bounds */
  v = dl_view_slice(t, 2, 1, 4, 2); /* columns 1, 3 */
  CHECK(v.shape[2] == 2 && v.numel == 12);
  idx[0] = 1; idx[1] = 2; idx[2] = 1;
  CHECK(dl_tensor_get(&v, idx) == 12 + 8 + 3);
  w = dl_view_slice(t, -1, -2, 100, 1);
  CHECK(w.shape[2] == 2 && ((double *)w.data)[0] == 2.0);
  /* expand a (3, 1) to (2, 3, 5) */
  {
    dl_tensor *c = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 1));
    dl_f64(c)[1] = 7;
    v = dl_view_expand(c, DL_SHAPE(2, 3, 5));
    CHECK(v.numel == 30 && v.strides[0] == 0 && v.strides[2] == 0 && v.strides[1] == 1);
    idx[0] = 1; idx[1] = 1; idx[2] = 4;
    CHECK(dl_tensor_get(&v, idx) == 7);
    EXPECT_PANIC(dl_view_expand(c, DL_SHAPE(2, 4, 5)), "dl_view_expand", "f64[3, 1]");
    dl_tensor_free(c);
  }
  /* misuse panics with the op and the shape */
  v = dl_view_transpose(t, 0, 1);
  EXPECT_PANIC(dl_view_reshape(&v, DL_SHAPE(24)), "dl_view_reshape", "not contiguous", "f64[3, 2, 4]");
  EXPECT_PANIC(dl_view_reshape(t, DL_SHAPE(5, 5)), "dl_view_reshape", "24 elements");
  EXPECT_PANIC(dl_view_transpose(t, 0, 3), "dl_view_transpose", "f64[2, 3, 4]");
  EXPECT_PANIC(dl_view_permute(t, (const int[]){0, 0, 1}), "dl_view_permute");
  EXPECT_PANIC(dl_view_reshape(t, DL_SHAPE((int64_t)1 << 40, (int64_t)1 << 40, 0)), "dl_view_reshape", "overflows");
  {
    dl_tensor *one = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(1));
    EXPECT_PANIC(dl_view_expand(one, DL_SHAPE((int64_t)1 << 40, (int64_t)1 << 40)), "dl_view_expand", "overflows");
    dl_tensor_free(one);
  }
  idx[0] = 2; idx[1] = 0; idx[2] = 0;
  EXPECT_PANIC(dl_tensor_get(t, idx), "dl_tensor_offset", "index 2 out of range");
  dl_tensor_free(t);
}

static void test_copy_convert(void) {
  dl_tensor *a = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3, 4));
  dl_tensor *b = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(4, 3));
  dl_tensor *c = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 3));
  dl_tensor *l = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(4, 3));
  dl_tensor at;
  int64_t i, j;
  for (i = 0; i < 12; i++) dl_f32(a)[i] = (float)i + 0.75f;
  at = dl_view_transpose(a, 0, 1);
  dl_tensor_copy(b, &at); /* strided source into contiguous */
  for (i = 0; i < 4; i++)
    for (j = 0; j < 3; j++) CHECK(dl_f32(b)[i * 3 + j] == dl_f32(a)[j * 4 + i]);
  EXPECT_PANIC(dl_tensor_copy(c, b), "dl_tensor_copy", "dtype mismatch", "f64[4, 3]", "f32[4, 3]");
  EXPECT_PANIC(dl_tensor_copy(b, a), "dl_tensor_copy", "shape mismatch", "f32[4, 3]", "f32[3, 4]");
  dl_tensor_convert(c, b); /* the explicit conversion */
  CHECK(dl_f64(c)[5] == (double)dl_f32(b)[5]);
  dl_tensor_convert(l, c);
  CHECK(dl_i32(l)[1] == 4); /* 4.75 truncates */
  EXPECT_PANIC(dl_f32(c), "dl_f32", "f64[4, 3]", "f32 was asked for");
  dl_tensor_fill(c, -2.5);
  CHECK(dl_f64(c)[11] == -2.5);
  dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(c); dl_tensor_free(l);
}

static void test_rand_fill_deterministic(void) {
  dl_tensor *a = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(1000)), *b = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(500));
  dl_rng r1 = dl_rng_make(9), r2 = dl_rng_make(9);
  int64_t i;
  double s = 0;
  dl_tensor_rand_normal(a, &r1, 1.0, 2.0);
  /* two halves drawn one after the other equal one fill of the whole */
  dl_tensor_rand_normal(b, &r2, 1.0, 2.0);
  for (i = 0; i < 500; i++) CHECK(dl_f32(a)[i] == dl_f32(b)[i]);
  dl_tensor_rand_normal(b, &r2, 1.0, 2.0);
  for (i = 0; i < 500; i++) CHECK(dl_f32(a)[500 + i] == dl_f32(b)[i]);
  CHECK(r1.counter == 1000 && r2.counter == 1000);
  for (i = 0; i < 1000; i++) s += dl_f32(a)[i];
  CHECK_NEAR(s / 1000, 1.0, 0.25);
  dl_tensor_rand_uniform(a, &r1, -1, 1);
  for (i = 0; i < 1000; i++) CHECK(dl_f32(a)[i] >= -1 && dl_f32(a)[i] < 1);
  dl_tensor_free(a); dl_tensor_free(b);
}

static void test_rand_threads(void) {
  /* large enough for the parallel fill: 1 and 2 threads give the same numbers */
  dl_ctx c1, c2;
  dl_ctx_desc d = {0};
  int64_t n = 4 * DL_PARALLEL_THRESHOLD + 3, i;
  dl_tensor *a, *b;
  dl_rng r1 = dl_rng_make(77), r2 = dl_rng_make(77);
  int same = 1;
  d.threads = 1;
  dl_ctx_init(&c1, &d);
  d.threads = 2;
  dl_ctx_init(&c2, &d);
  a = dl_tensor_make(&c1, DL_F64, DL_SHAPE(n));
  b = dl_tensor_make(&c2, DL_F64, DL_SHAPE(n));
  dl_tensor_rand_normal(a, &r1, 0, 1);
  dl_tensor_rand_normal(b, &r2, 0, 1);
  for (i = 0; i < n; i++) same &= dl_f64(a)[i] == dl_f64(b)[i];
  CHECK(same);
  CHECK(dl_f64(a)[n - 1] == dl__normal_from(dl_rng_at(&r1, (uint64_t)n - 1)));
  dl_tensor_free(a);
  dl_tensor_free(b);
}

static void test_print(void) {
  char buf[4096];
  FILE *f = tmpfile();
  dl_tensor *t = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3)), *big = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(40, 40));
  size_t n;
  int64_t i;
  for (i = 0; i < 6; i++) dl_f32(t)[i] = (float)i * 0.5f;
  for (i = 0; i < 1600; i++) dl_f64(big)[i] = (double)i;
  if (!f) { SKIP("tmpfile() failed"); }
  dl_tensor_fprint(f, t, "t");
  dl_tensor_fprint(f, big, NULL);
  rewind(f);
  n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  CHECK(strstr(buf, "t f32[2, 3] =\n[[0, 0.5, 1],\n [1.5, 2, 2.5]]\n") != NULL);
  CHECK(strstr(buf, "f64[40, 40] =") != NULL && strstr(buf, "...") != NULL);
  CHECK(strstr(buf, "1599") != NULL && strstr(buf, "800") == NULL); /* middle elided */
  {
    char s[64];
    CHECK(strcmp(dl_shape_str(t, s, sizeof s), "f32[2, 3]") == 0);
  }
  dl_tensor_free(t); dl_tensor_free(big);
}

int main(void) {
  setup();
  RUN(test_make_and_free);
  RUN(test_overflow_refused);
  RUN(test_arena_tensors);
  RUN(test_wrap);
  RUN(test_views);
  RUN(test_copy_convert);
  RUN(test_rand_fill_deterministic);
  RUN(test_rand_threads);
  RUN(test_print);
  return harness_finish();
}
