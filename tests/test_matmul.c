/* dl-test-cxx */
/* tests/test_matmul.c - dl_matmul_into on tensors: plain, transposed views,
 * batched with shared and per-item B, alpha/beta, shape and dtype errors. */
#include "dl/blas.h"
#include "harness.h"

static dl_ctx ctx;

static double ref_at(const dl_tensor *t, int64_t b, int64_t i, int64_t j) {
  int64_t idx[3];
  if (t->ndim == 2) { idx[0] = i; idx[1] = j; }
  else { idx[0] = b; idx[1] = i; idx[2] = j; }
  return dl_tensor_get(t, idx);
}

static void check_matmul(const dl_tensor *A, const dl_tensor *B, const dl_tensor *C0, const dl_tensor *C,
                         double alpha, double beta, double tol) {
  int64_t batch = C->ndim == 3 ? C->shape[0] : 1, M = C->shape[C->ndim - 2], N = C->shape[C->ndim - 1];
  int64_t K = A->shape[A->ndim - 1], b, i, j, k;
  for (b = 0; b < batch; b++)
    for (i = 0; i < M; i++)
      for (j = 0; j < N; j++) {
        double s = 0;
        for (k = 0; k < K; k++) s += ref_at(A, b, i, k) * ref_at(B, B->ndim == 3 ? b : 0, k, j);
        s = alpha * s + beta * ref_at(C0, b, i, j);
        CHECK_NEAR(ref_at(C, b, i, j), s, tol * (1 + fabs(s)));
      }
}

static void test_plain_and_transposed(void) {
  dl_rng r = dl_rng_make(3);
  int pass;
  for (pass = 0; pass < 2; pass++) {
    dl_dtype dt = pass ? DL_F64 : DL_F32;
    double tol = pass ? 1e-12 : 1e-5;
    dl_tensor *A = dl_tensor_make(&ctx, dt, DL_SHAPE(7, 5)), *B = dl_tensor_make(&ctx, dt, DL_SHAPE(5, 9));
    dl_tensor *At = dl_tensor_make(&ctx, dt, DL_SHAPE(5, 7)), *Bt = dl_tensor_make(&ctx, dt, DL_SHAPE(9, 5));
    dl_tensor *C = dl_tensor_make(&ctx, dt, DL_SHAPE(7, 9)), *C0 = dl_tensor_make(&ctx, dt, DL_SHAPE(7, 9));
    dl_tensor av, bv;
    dl_tensor_rand_normal(A, &r, 0, 1);
    dl_tensor_rand_normal(B, &r, 0, 1);
    dl_tensor_rand_normal(At, &r, 0, 1);
    dl_tensor_rand_normal(Bt, &r, 0, 1);
    dl_tensor_rand_normal(C0, &r, 0, 1);
    dl_tensor_copy(C, C0);
    dl_matmul_into(C, A, B, 1.0, 0.0);
    check_matmul(A, B, C0, C, 1.0, 0.0, tol);
    av = dl_view_transpose(At, 0, 1); /* (7, 5) view, no copy */
    bv = dl_view_transpose(Bt, 0, 1); /* (5, 9) view */
    dl_tensor_copy(C, C0);
    dl_matmul_into(C, &av, &bv, 0.5, 2.0);
    check_matmul(&av, &bv, C0, C, 0.5, 2.0, tol);
    dl_tensor_free(A); dl_tensor_free(B); dl_tensor_free(At); dl_tensor_free(Bt);
    dl_tensor_free(C); dl_tensor_free(C0);
  }
}

static void test_batched(void) {
  dl_rng r = dl_rng_make(4);
  dl_tensor *A = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 4, 6)), *B = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 6, 2));
  dl_tensor *W = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(6, 2)), *C = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 4, 2));
  dl_tensor *Z = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 4, 2));
  dl_tensor_rand_normal(A, &r, 0, 1);
  dl_tensor_rand_normal(B, &r, 0, 1);
  dl_tensor_rand_normal(W, &r, 0, 1);
  dl_matmul_into(C, A, B, 1.0, 0.0);
  check_matmul(A, B, Z, C, 1.0, 0.0, 1e-12);
  dl_matmul_into(C, A, W, 1.0, 0.0); /* one weight shared by the batch */
  check_matmul(A, W, Z, C, 1.0, 0.0, 1e-12);
  dl_tensor_free(A); dl_tensor_free(B); dl_tensor_free(W); dl_tensor_free(C); dl_tensor_free(Z);
}

static void test_errors(void) {
  dl_tensor *A = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(4, 3)), *B = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(4, 5));
  dl_tensor *C = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(4, 5)), *D = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 5));
  EXPECT_PANIC(dl_matmul_into(C, A, B, 1, 0), "dl_matmul", "shape mismatch", "f32[4, 3]", "f32[4, 5]");
  EXPECT_PANIC(dl_matmul_into(C, A, D, 1, 0), "dl_matmul", "f64[3, 5]", "all f32 or all f64");
  dl_tensor_free(A); dl_tensor_free(B); dl_tensor_free(C); dl_tensor_free(D);
}

/* A GEMM big enough for a team, run while the ctx's team guard has backed
 * off (as it does beside a busy process): the single-thread plan must be
 * used whole, giving the same result as with the team. */
static void test_guard_backoff_gemm(void) {
#ifdef _OPENMP
  dl_ctx c2;
  dl_ctx_desc d = {0};
  dl_rng r = dl_rng_make(8);
  dl_tensor *A = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(300, 250)), *B = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(250, 200));
  dl_tensor *C1 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(300, 200)), *C2 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(300, 200));
  int64_t i;
  int same = 1;
  d.threads = 2;
  dl_ctx_init(&c2, &d);
  dl_tensor_rand_normal(A, &r, 0, 1);
  dl_tensor_rand_normal(B, &r, 0, 1);
  dl_gemm_builtin_f64(&c2, DL_NOTRANS, DL_NOTRANS, 300, 200, 250, 1.0, dl_f64(A), 250, dl_f64(B), 200, 0.0, dl_f64(C1), 200);
  c2.team.until = omp_get_wtime() + 60; /* backed off */
  dl_gemm_builtin_f64(&c2, DL_NOTRANS, DL_NOTRANS, 300, 200, 250, 1.0, dl_f64(A), 250, dl_f64(B), 200, 0.0, dl_f64(C2), 200);
  for (i = 0; i < 300 * 200; i++) same &= dl_f64(C1)[i] == dl_f64(C2)[i];
  CHECK(same);
  check_matmul(A, B, C1, C2, 1.0, 0.0, 1e-12);
  dl_tensor_free(A); dl_tensor_free(B); dl_tensor_free(C1); dl_tensor_free(C2);
#else
  SKIP("built without OpenMP: no team guard");
#endif
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  RUN(test_plain_and_transposed);
  RUN(test_batched);
  RUN(test_errors);
  RUN(test_guard_backoff_gemm);
  return harness_finish();
}
