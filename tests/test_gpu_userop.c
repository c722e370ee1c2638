/* dl-test-cxx */
/* tests/test_gpu_userop.c - a user's one-line element-wise ops on the GPU.
 *
 * The ops are written once (tests/gpu_user_ops.h); this file makes their CPU
 * side with DL_DEFINE_OP1/2 and tests/gpu_user_ops.cu their kernels with
 * DL_GPU_DEFINE_OP1/2 (nvcc). With a device: forward, backward (gradient
 * of sum(y * w)) and forward mode of each on a device tape equal the CPU's
 * (f32 1e-5 relative, f64 1e-12), broadcasting included; an op that has no
 * GPU line (my_unported) panics naming what to do instead of running. The
 * CPU checks run everywhere: the ops against closed forms. Without a device
 * (or DL_USE_CUDA) the GPU checks are skipped with a message.
 * tests/run.sh links tests/gpu_user_ops.cu's object into the CUDA build. */
#include "dl.h"
#include "harness.h"
#include "gpu_user_ops.h"

DL_DEFINE_OP1(my_softsign, MY_SOFTSIGN(x0))
DL_DEFINE_OP2(my_hypot, MY_HYPOT(x0, x1))
DL_DEFINE_OP1(my_unported, dl_mul(x0, 3.0))

static dl_ctx ctx;
static dl_gpu *gpu;

static dl_tensor *rnd(dl_dtype dt, int nd, const int64_t *shape, uint64_t seed) {
  dl_tensor *t = dl_tensor_make(&ctx, dt, nd, shape);
  dl_rng r = dl_rng_make(seed);
  dl_tensor_rand_uniform(t, &r, -2, 2);
  return t;
}

/* y = op(inputs) on tape tp; returns y, the gradients of sum(y * w) in g[],
 * y's tangent in *ty (host copies, owned). */
typedef struct res { dl_tensor *y, *g[2], *ty; } res;
static res run(dl_tape *tp, int two, dl_tensor *a, dl_tensor *b, dl_tensor *w, dl_tensor *ta) {
  res r;
  dl_tensor *y, *loss;
  memset(&r, 0, sizeof r);
  CHECK(dl_requires_grad(a) == DL_OK);
  if (two) CHECK(dl_requires_grad(b) == DL_OK);
  dl_set_tangent(a, ta);
  y = two ? DL_T_MAP2(tp, my_hypot, a, b) : DL_T_MAP1(tp, my_softsign, a);
  loss = dl_t_sum_all(tp, dl_t_mul(tp, y, w));
  dl_backward(tp, loss, NULL);
  CHECK(dl_to_host(&r.y, y) == DL_OK);
  CHECK(dl_to_host(&r.g[0], a->grad) == DL_OK);
  if (two) CHECK(dl_to_host(&r.g[1], b->grad) == DL_OK);
  CHECK(dl_to_host(&r.ty, y->tangent) == DL_OK);
  dl_set_tangent(a, NULL);
  dl_tape_rewind(tp);
  return r;
}

static double maxrel(const dl_tensor *x, const dl_tensor *y) {
  double m = 0;
  int64_t i;
  for (i = 0; i < x->numel; i++) {
    double a = dl__get_at(x, dl__offset_of_linear(x, i)), b = dl__get_at(y, dl__offset_of_linear(y, i));
    double e = fabs(a - b) / (fabs(b) > 1e-3 ? fabs(b) : 1e-3);
    if (!(e <= m)) m = e;
  }
  return m;
}

static void free_res(res *r) {
  dl_tensor_free(r->y);
  dl_tensor_free(r->g[0]);
  dl_tensor_free(r->g[1]);
  dl_tensor_free(r->ty);
}

static void test_cpu_closed_forms(void) {
  dl_tape tp;
  dl_tensor *a = rnd(DL_F64, DL_SHAPE(3, 4), 1), *b = rnd(DL_F64, DL_SHAPE(4), 2);
  dl_tensor *y, *z;
  int64_t i;
  CHECK(dl_tape_init(&tp, &ctx, 0) == DL_OK);
  y = DL_T_MAP1(&tp, my_softsign, a);
  z = DL_T_MAP2(&tp, my_hypot, a, b);
  for (i = 0; i < 12; i++) {
    double x = dl_f64(a)[i], v = dl_f64(b)[i % 4];
    CHECK_NEAR(dl_f64(y)[i], x / (1 + fabs(x)), 1e-15);
    CHECK_NEAR(dl_f64(z)[i], sqrt(x * x + v * v), 1e-14);
  }
  dl_tape_free(&tp);
  dl_tensor_free(a);
  dl_tensor_free(b);
}

static void test_gpu_ops(void) {
  int two, k;
  dl_dtype dts[2] = {DL_F32, DL_F64};
  if (!gpu) SKIP("no CUDA device");
  for (k = 0; k < 2; k++)
    for (two = 0; two < 2; two++) {
      dl_dtype dt = dts[k];
      double tol = dt == DL_F32 ? 1e-5 : 1e-12;
      dl_tape th, td;
      dl_tensor *a = rnd(dt, DL_SHAPE(5, 1, 7), 10), *b = rnd(dt, DL_SHAPE(3, 7), 11); /* broadcast to [5, 3, 7] */
      dl_tensor *w = rnd(dt, two ? 3 : 3, two ? (const int64_t[]){5, 3, 7} : (const int64_t[]){5, 1, 7}, 12);
      dl_tensor *ta = rnd(dt, DL_SHAPE(5, 1, 7), 13);
      dl_tensor *ad = NULL, *bd = NULL, *wd = NULL, *tad = NULL;
      res h, d;
      CHECK(dl_tape_init(&th, &ctx, 0) == DL_OK && dl_tape_init(&td, &ctx, 0) == DL_OK);
      if (dl_tape_use_gpu(&td, gpu) != DL_OK || dl_to_device(gpu, &ad, a) != DL_OK ||
          dl_to_device(gpu, &bd, b) != DL_OK || dl_to_device(gpu, &wd, w) != DL_OK ||
          dl_to_device(gpu, &tad, ta) != DL_OK) {
        CHECK_MSG(0, "moving the inputs to the device: %s", dl_ctx_message(&ctx));
        return;
      }
      h = run(&th, two, a, b, w, ta);
      d = run(&td, two, ad, bd, wd, tad);
      CHECK_MSG(maxrel(d.y, h.y) <= tol, "%s %s forward: %g", two ? "my_hypot" : "my_softsign", dl_dtype_name(dt),
                maxrel(d.y, h.y));
      CHECK_MSG(maxrel(d.g[0], h.g[0]) <= tol, "gradient 0: %g", maxrel(d.g[0], h.g[0]));
      if (two) CHECK_MSG(maxrel(d.g[1], h.g[1]) <= 10 * tol, "gradient 1 (broadcast): %g", maxrel(d.g[1], h.g[1]));
      CHECK_MSG(maxrel(d.ty, h.ty) <= tol, "tangent: %g", maxrel(d.ty, h.ty));
      free_res(&h);
      free_res(&d);
      dl_tensor_free(a);
      dl_tensor_free(b);
      dl_tensor_free(w);
      dl_tensor_free(ta);
      dl_tensor_free(ad);
      dl_tensor_free(bd);
      dl_tensor_free(wd);
      dl_tensor_free(tad);
      dl_tape_free(&th);
      dl_tape_free(&td);
    }
}

/* Its own function: the setjmp of EXPECT_PANIC stays away from the moves' locals. */
static void expect_unported(dl_tape *td, dl_tensor *ad) {
  EXPECT_PANIC(DL_T_MAP1(td, my_unported, ad), "my_unported", "no GPU kernel", "DL_GPU_DEFINE_OP");
}
static void test_gpu_unported(void) {
  dl_tape td;
  dl_tensor *a, *ad;
  if (!gpu) SKIP("no CUDA device");
  a = rnd(DL_F32, DL_SHAPE(4), 3);
  CHECK(dl_tape_init(&td, &ctx, 0) == DL_OK);
  if (dl_tape_use_gpu(&td, gpu) != DL_OK || dl_to_device(gpu, &ad, a) != DL_OK) {
    CHECK_MSG(0, "moving the input to the device: %s", dl_ctx_message(&ctx));
    return;
  }
  expect_unported(&td, ad);
  dl_tape_free(&td);
  dl_tensor_free(ad);
  dl_tensor_free(a);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  if (dl_gpu_open(&gpu, &ctx, 0) != DL_OK) {
    printf("SKIP test_gpu_userop: no CUDA device (%s)\n", dl_ctx_message(&ctx));
    gpu = NULL;
  }
  RUN(test_cpu_closed_forms);
  RUN(test_gpu_ops);
  RUN(test_gpu_unported);
  dl_gpu_close(gpu);
  return harness_finish();
}
