/* tests/cxx/mlp.c - one source, built as C11 and as C++ (g++ and clang++
 * -std=c++17 -x c++): the MLP of examples/fashion_mlp.c trained for 50
 * steps on Fashion-MNIST, then the rest of the API touched once each. Both
 * builds print the same text, which tests/run.sh compares byte for byte:
 * every loss of the 50 steps and every figure below is printed exactly
 * (%a), and the trained weights as a hash of their safetensors file.
 *
 *   training    dl_model, dl_linear_make ..., dl_batcher (shuffled,
 *               standardised), Adam with a cosine learning rate, the tape,
 *               dl_train_step, dl_evaluate
 *   io          dl_model_save / dl_model_load round trip
 *   expressions DL_ASSIGN with broadcasting, a strided view, a user op
 *               (DL_DEFINE_OP1) inside it; the op's _into/_backward
 *   tape        the user op on the tape (DL_T_MAP1), dl_backward, a jvp by
 *               dual numbers, dl_gradcheck
 *   run         dl_flags_parse
 *
 * No data (dataset-fashion-mnist not installed): the training prints
 * "SKIP ..." instead; the rest runs. C++-only lines are under __cplusplus: the generic names as
 * ordinary C++ functions (the user op's own generic name, mixed types). */
#define DL_USE_ZLIB
#include "dl.h"

#ifdef __cplusplus
#include <vector>
#define ZERO {}
#else
#define ZERO {0}
#endif

DL_DEFINE_OP1(softsign, dl_div(x0, dl_add(1, dl_abs(x0))))

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = (const unsigned char *)p;
  size_t i;
  for (i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
static uint64_t tensor_hash(const dl_tensor *t) {
  return fnv(t->data, (size_t)t->numel * dl_dtype_size(t->dtype), 1469598103934665603ull);
}
static uint64_t file_hash(const char *path) {
  unsigned char buf[4096];
  uint64_t h = 1469598103934665603ull;
  size_t n;
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = fnv(buf, n, h);
  fclose(f);
  return h;
}

static dl_model *make_mlp(dl_ctx *ctx, uint64_t seed) {
  dl_model_desc md = ZERO;
  dl_linear_desc l1 = ZERO, l2 = ZERO, l3 = ZERO;
  dl_model *m;
  md.dtype = DL_F32;
  md.seed = seed;
  l1.in = 28 * 28; l1.out = 256;
  l2.in = 256; l2.out = 128;
  l3.in = 128; l3.out = 10;
  m = dl_model_make(ctx, &md);
  dl_flatten_make(m, NULL, NULL, 1);
  dl_linear_make(m, NULL, NULL, &l1);
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &l2);
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &l3);
  return m;
}

static int train(dl_ctx *ctx, const char *weights) {
  dl_dataset all = ZERO, train_set = ZERO, test_all = ZERO, test_set = ZERO;
  dl_batcher tb = ZERO, eb = ZERO;
  dl_batcher_desc bd = ZERO;
  dl_adam_cfg ac;
  dl_tape tp;
  dl_model *m, *m2;
  dl_optim *opt;
  dl_batch b;
  double test_loss = 0, test_acc = 0;
  const int64_t steps = 50;
  int64_t step = 0;
  dl_status s = dl_load_fashion_mnist(ctx, NULL, &all, &test_all);
  if (s != DL_OK) {
    printf("SKIP no Fashion-MNIST (apt-get install dataset-fashion-mnist): %s\n", dl_ctx_message(ctx));
    return 77;
  }
  if (dl_dataset_head(ctx, &all, steps * 64, &train_set) != DL_OK || dl_dataset_head(ctx, &test_all, 1000, &test_set) != DL_OK)
    return 1;
  bd.batch_size = 64;
  bd.dtype = DL_F32;
  bd.shuffle.seed = 1;
  bd.norm = DL_NORM_STANDARDIZE;
  bd.mean = 0.2860;
  bd.std = 0.3530;
  if (dl_batcher_make(ctx, &tb, &train_set, &bd) != DL_OK) return 1;
  bd.batch_size = 500;
  bd.shuffle.no_shuffle = 1;
  if (dl_batcher_make(ctx, &eb, &test_set, &bd) != DL_OK) return 1;
  m = make_mlp(ctx, 1);
  ac = dl_adam_defaults(1e-3);
  if (!m || dl_model_status(m) != DL_OK || !(opt = dl_optim_adam(m, &ac)) || dl_tape_init(&tp, ctx, 0) != DL_OK) return 1;
  dl_batcher_set_epoch(&tb, 0);
  while (step < steps && dl_batcher_next(&tb, &b)) {
    dl_tensor *logits, *loss;
    dl_optim_set_lr(opt, dl_lr_cosine_warmup(1e-3, step, 0, steps, 0));
    logits = dl_model_forward(m, &tp, dl_tape_input(&tp, b.x));
    loss = dl_t_cross_entropy(&tp, logits, b.y, 0, DL_REDUCE_MEAN);
    dl_train_step(opt, &tp, loss, NULL);
    printf("step %2lld loss %a\n", (long long)step, dl_item(loss));
    dl_tape_rewind(&tp);
    step++;
  }
  dl_evaluate(m, &tp, &eb, &test_loss, &test_acc, NULL);
  printf("test loss %a acc %a\n", test_loss, test_acc);
  if (dl_model_save(m, weights, NULL) != DL_OK) return 1;
  printf("weights %016llx\n", (unsigned long long)file_hash(weights));
  /* the same weights back into a fresh model */
  m2 = make_mlp(ctx, 99);
  if (dl_model_load(m2, weights, NULL) != DL_OK) return 1;
  printf("reloaded %s\n", tensor_hash(dl_model_tensor(m2, "5.weight")) == tensor_hash(dl_model_tensor(m, "5.weight"))
                              ? "same"
                              : "DIFFERENT");
  dl_model_free(m2);
  dl_tape_free(&tp);
  dl_optim_free(opt);
  dl_model_free(m);
  dl_batcher_free(&tb);
  dl_batcher_free(&eb);
  dl_dataset_free(&train_set);
  dl_dataset_free(&all);
  dl_dataset_free(&test_set);
  dl_dataset_free(&test_all);
  return 0;
}

static dl_tensor *f_softsign(dl_tape *tp, dl_tensor **in, void *user) {
  (void)user;
  return DL_T_MAP1(tp, softsign, in[0]);
}

/* Fused expressions over f32 and f64, broadcasting, a strided view and the
 * user op; its rules on tensors; the tape; forward mode; dl_gradcheck. */
static int expressions(dl_ctx *ctx) {
  dl_rng rng = dl_rng_make(7);
  dl_tensor *a = dl_tensor_make(ctx, DL_F32, DL_SHAPE(16, 33));
  dl_tensor *bias = dl_tensor_make(ctx, DL_F32, DL_SHAPE(33));
  dl_tensor *y = dl_tensor_make(ctx, DL_F32, DL_SHAPE(16, 33));
  dl_tensor *yt = dl_tensor_make(ctx, DL_F32, DL_SHAPE(33, 16));
  dl_tensor *d = dl_tensor_make(ctx, DL_F64, DL_SHAPE(5, 7));
  dl_tensor *g = dl_tensor_make(ctx, DL_F32, DL_SHAPE(16, 33));
  dl_tensor at;
  dl_tape tp;
  double lr = 0.25;
  int ok;
  dl_tensor_rand_normal(a, &rng, 0.0, 1.0);
  dl_tensor_rand_uniform(bias, &rng, -1.0, 1.0);
  dl_tensor_rand_normal(d, &rng, 0.0, 2.0);
  DL_ASSIGN(y, dl_gelu(dl_add(a, bias)));
  printf("gelu %016llx\n", (unsigned long long)tensor_hash(y));
  DL_ASSIGN(y, dl_where(dl_gt(a, 0.5), dl_mul(lr, DL_APPLY1(softsign, a)), dl_clamp(dl_sub(a, bias), -0.3, 0.3)));
  printf("where %016llx\n", (unsigned long long)tensor_hash(y));
  at = dl_view_transpose(a, 0, 1); /* a strided view [33, 16] */
  DL_ASSIGN(yt, dl_add(dl_square(&at), dl_leaky_relu(&at, 0.1)));
  printf("strided %016llx\n", (unsigned long long)tensor_hash(yt));
  DL_ASSIGN(d, dl_add(dl_mul(d, dl_exp(dl_neg(dl_abs(d)))), dl_val(1e-300)));
  printf("f64 %016llx\n", (unsigned long long)tensor_hash(d));
  DL_ASSIGN(y, 0.0);
  softsign_into(y, a);
  dl_tensor_fill(g, 0.0);
  softsign_backward(g, y, a);
  printf("softsign %016llx %016llx\n", (unsigned long long)tensor_hash(y), (unsigned long long)tensor_hash(g));
  /* the user op on the tape: d/da sum(softsign(a) * bias) */
  if (dl_tape_init(&tp, ctx, 0) != DL_OK) return 1;
  dl_requires_grad(a);
  dl_zero_grad(a);
  {
    dl_tensor *loss = dl_t_sum(&tp, dl_t_mul(&tp, DL_T_MAP1(&tp, softsign, a), bias), 0, NULL, 0);
    dl_backward(&tp, loss, NULL);
    printf("tape %a %016llx\n", dl_item(loss), (unsigned long long)tensor_hash(a->grad));
  }
  dl_tape_free(&tp);
  {
    dl_dual64 r;
    DL_SCALAR(dl_dual64);
    r = softsign_dual64(dl_dual64_make(0.5, 1.0));
    printf("dual %a %a\n", r.v, r.d);
    r = dl_sub(dl_mul(dl_dual64_make(0.5, 1.0), dl_exp(dl_dual64_make(0.5, 1.0))), 2);
    printf("newton %a %a\n", r.v, r.d);
  }
#ifdef __cplusplus
  {
    /* C++ only: the generic names are functions of their argument types */
    std::vector<double> v;
    const float xf = 0.75f;
    v.push_back(softsign(0.5));                 /* the user op's generic name */
    v.push_back((double)dl_mul(xf, 2.0));       /* float context: 2.0 becomes float */
    v.push_back(dl_tanh(dl_dual64_make(0.3, 1.0)).d);
    printf("c++ %a %a %a\n", v[0], v[1], v[2]);
  }
#endif
  {
    dl_tensor *x64 = dl_tensor_make(ctx, DL_F64, DL_SHAPE(3, 4));
    dl_gradcheck_result r;
    dl_tensor_rand_normal(x64, &rng, 0.0, 1.0);
    dl_requires_grad(x64);
    ok = dl_gradcheck(ctx, f_softsign, NULL, 1, &x64, 1e-6, 1e-6, &r);
    printf("gradcheck %s (%lld elements)\n", ok ? "ok" : "FAILED", (long long)r.checked);
    dl_tensor_free(x64);
    if (!ok) return 1;
  }
  dl_tensor_free(a);
  dl_tensor_free(bias);
  dl_tensor_free(y);
  dl_tensor_free(yt);
  dl_tensor_free(d);
  dl_tensor_free(g);
  return 0;
}

static int flags(dl_ctx *ctx) {
  dl_train_opts o = ZERO;
  dl_flag fl[DL_TRAIN_NFLAGS];
  char a0[] = "mlp", a1[] = "--epochs", a2[] = "7", a3[] = "--lr=0.5";
  char *argv[] = {a0, a1, a2, a3};
  int nf = dl_train_flags(&o, fl);
  if (dl_flags_parse(ctx, 4, argv, fl, nf, NULL, 0, NULL) != DL_OK) return 1;
  printf("flags epochs=%lld lr=%a\n", (long long)o.epochs, o.lr);
  return 0;
}

int main(int argc, char **argv) {
  dl_ctx ctx;
  int rc;
  const char *weights = argc > 1 ? argv[1] : "mlp_cxx_test.safetensors";
  dl_ctx_init(&ctx, NULL);
  rc = expressions(&ctx); /* no data needed */
  if (rc == 0) rc = flags(&ctx);
  if (rc == 0) rc = train(&ctx, weights);
  if (rc == 77) rc = 0; /* no data: the rest ran; the SKIP line says so */
  if (rc == 1) fprintf(stderr, "failed: %s\n", dl_ctx_message(&ctx));
  return rc;
}
