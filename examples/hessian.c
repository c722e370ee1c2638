/* examples/hessian.c - the top eigenvalue of the Hessian of a Fashion-MNIST
 * MLP's loss, by power iteration on Hessian-vector products (dl_hvp).
 *
 * The curvature of the loss says how large a learning rate can be (plain
 * gradient descent is stable below 2 / lambda_max) and how sharp the
 * minimum a run found is. Forming the Hessian of a 784-256-128-10 MLP
 * (235,146 parameters, 5.5e10 entries) is out of the question; a product
 * H v costs about two gradients: set v as the parameters' tangents, run
 * the forward pass (every activation gets its tangent J v), then dl_hvp
 * walks the tape back carrying each gradient's tangent, and every
 * parameter ends with grad->tangent = H v.
 *
 * 1. Train the MLP (f64, Adam) for --epochs on --subset training images.
 * 2. Power iteration on a fixed batch of --hvp-batch images: v <- H v / |H v|,
 *    lambda = v . H v, until lambda changes by less than 1e-6 relative
 *    (at most --iters products).
 * 3. Check the last product against central differences of two gradients,
 *    (g(w + eps v) - g(w - eps v)) / 2 eps, and print both. The step is
 *    small (1e-7 along a unit v) because ReLU's gradient jumps where a
 *    unit's input crosses 0: a larger step crosses some of those kinks
 *    and the difference then measures the jumps, not the curvature.
 *
 *   cc -std=c11 -O2 -Iinclude examples/hessian.c -o hessian -lz -lm && ./hessian
 *   ./hessian --epochs 0          the curvature at the initial weights
 *
 * Last line: result: lambda_max=... iterations=... converged=0|1 hv_rel_err=... lr_bound=... wall_s=...
 *
 * dl-example-flags: -lz
 */
#define DL_USE_ZLIB
#include "dl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct opts {
  const char *data;
  int64_t subset, batch, hvp_batch;
  int epochs, iters;
  uint64_t seed;
  double lr;
} opts;

static int usage(const char *argv0, int rc) {
  fprintf(rc ? stderr : stdout,
          "usage: %s [--data DIR] [--subset N (10000)] [--epochs E (1)] [--batch B (64)] [--lr LR (1e-3)]\n"
          "          [--hvp-batch N (1000)] [--iters K (50)] [--seed S (1)]\n",
          argv0);
  return rc;
}

/* the loss on batch (x, y): mean cross-entropy of the MLP's logits */
static dl_tensor *loss_of(dl_model *m, dl_tape *tp, dl_tensor *x, const dl_tensor *y) {
  return dl_t_cross_entropy(tp, dl_model_forward(m, tp, x), y, 0.0, DL_REDUCE_MEAN);
}

/* sum over the parameters of <a_i, b_i> (tensors indexed like m->params) */
static double dot(dl_model *m, dl_tensor *const *a, dl_tensor *const *b) {
  double s = 0;
  int i;
  int64_t j;
  for (i = 0; i < m->nparams; i++)
    for (j = 0; j < a[i]->numel; j++) s += dl_f64(a[i])[j] * dl_f64(b[i])[j];
  return s;
}

int main(int argc, char **argv) {
  opts o = {NULL, 10000, 64, 1000, 1, 50, 1, 1e-3};
  dl_ctx ctx;
  dl_dataset train_all, train, test;
  dl_batcher tb, hb;
  dl_model *m;
  dl_optim *opt;
  dl_adam_cfg ac;
  dl_tape tp;
  dl_batch b, hbatch;
  dl_tensor *v[16], *hv[16], *gp[16];
  double lambda = 0, prev = 0, t0, rel = NAN, eps = 1e-7;
  int i, it = 0, k, converged = 0;
  int64_t j;
  memset(&train_all, 0, sizeof train_all);
  memset(&train, 0, sizeof train);
  memset(&test, 0, sizeof test);
  for (k = 1; k < argc; k++) {
    const char *a = argv[k], *val = k + 1 < argc ? argv[k + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(argv[0], 0);
    if (!val) return usage(argv[0], 2);
    if (!strcmp(a, "--data")) o.data = val;
    else if (!strcmp(a, "--subset")) o.subset = atoll(val);
    else if (!strcmp(a, "--epochs")) o.epochs = atoi(val);
    else if (!strcmp(a, "--batch")) o.batch = atoll(val);
    else if (!strcmp(a, "--lr")) o.lr = atof(val);
    else if (!strcmp(a, "--hvp-batch")) o.hvp_batch = atoll(val);
    else if (!strcmp(a, "--iters")) o.iters = atoi(val);
    else if (!strcmp(a, "--seed")) o.seed = (uint64_t)atoll(val);
    else return usage(argv[0], 2);
    k++;
  }
  if (o.subset < 1 || o.epochs < 0 || o.batch < 1 || o.hvp_batch < 1 || o.iters < 1 || !(o.lr > 0)) {
    fprintf(stderr, "%s: --subset, --batch, --hvp-batch, --iters must be >= 1, --epochs >= 0, --lr > 0\n", argv[0]);
    return 2;
  }
  dl_ctx_init(&ctx, NULL);
  t0 = dl_clock_monotonic(NULL);
  if (dl_load_fashion_mnist(&ctx, o.data, &train_all, &test) != DL_OK ||
      dl_dataset_head(&ctx, &train_all, o.subset, &train) != DL_OK) {
    fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&ctx));
    return 1;
  }
  /* f64 throughout: the eigenvalue and the difference check are then
   * accurate to many digits */
  if (dl_batcher_make(&ctx, &tb, &train,
                      &(dl_batcher_desc){.batch_size = o.batch, .dtype = DL_F64, .shuffle = {.seed = o.seed},
                                         .norm = DL_NORM_STANDARDIZE, .mean = 0.2860, .std = 0.3530}) != DL_OK ||
      dl_batcher_make(&ctx, &hb, &train,
                      &(dl_batcher_desc){.batch_size = o.hvp_batch, .dtype = DL_F64, .shuffle = {.no_shuffle = 1},
                                         .norm = DL_NORM_STANDARDIZE, .mean = 0.2860, .std = 0.3530}) != DL_OK) {
    fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&ctx));
    return 1;
  }
  ac = dl_adam_defaults(o.lr);
  m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = o.seed});
  dl_flatten_make(m, NULL, NULL, 1);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 784, .out = 256});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 256, .out = 128});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 128, .out = 10});
  if (dl_model_status(m) != DL_OK || !(opt = dl_optim_adam(m, &ac)) ||
      dl_tape_init(&tp, &ctx, 0) != DL_OK) {
    fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&ctx));
    return 1;
  }

  /* 1. train */
  for (k = 0; k < o.epochs; k++) {
    double sum = 0;
    int64_t n = 0;
    dl_batcher_set_epoch(&tb, k);
    while (dl_batcher_next(&tb, &b)) {
      dl_tensor *loss = loss_of(m, &tp, b.x, b.y);
      sum += dl_item(loss) * (double)b.size;
      dl_train_step(opt, &tp, loss, NULL);
      n += b.size;
      dl_tape_rewind(&tp);
    }
    printf("epoch %d: training loss %.4f (%lld images)\n", k + 1, sum / (double)n, (long long)n);
  }

  /* 2. power iteration on a fixed batch */
  dl_batcher_set_epoch(&hb, 0);
  if (!dl_batcher_next(&hb, &hbatch)) return 1;
  {
    dl_rng rng = dl_rng_make(o.seed + 17);
    double nv;
    if (m->nparams > 16) return 1;
    for (i = 0; i < m->nparams; i++) {
      dl_tensor *p = &m->params[i]->t;
      v[i] = dl_tensor_make(&ctx, DL_F64, p->ndim, p->shape);
      hv[i] = dl_tensor_make(&ctx, DL_F64, p->ndim, p->shape);
      gp[i] = dl_tensor_make(&ctx, DL_F64, p->ndim, p->shape);
      if (!v[i] || !hv[i] || !gp[i]) return 1;
      dl_tensor_rand_normal(v[i], &rng, 0, 1);
    }
    nv = sqrt(dot(m, v, v));
    for (i = 0; i < m->nparams; i++) DL_ASSIGN(v[i], dl_div(v[i], nv));
  }
  printf("power iteration on %lld images, %d parameter tensors:\n", (long long)hbatch.size, m->nparams);
  for (it = 1; it <= o.iters; it++) {
    double nh;
    for (i = 0; i < m->nparams; i++) {
      dl_zero_grad(&m->params[i]->t);
      dl_set_tangent(&m->params[i]->t, v[i]);
    }
    dl_hvp(&tp, loss_of(m, &tp, hbatch.x, hbatch.y), NULL);
    dl_tape_rewind(&tp);
    for (i = 0; i < m->nparams; i++) dl_tensor_copy(hv[i], m->params[i]->t.grad->tangent);
    prev = lambda;
    lambda = dot(m, v, hv); /* the Rayleigh quotient, |v| = 1 */
    nh = sqrt(dot(m, hv, hv));
    if (it <= 5 || it % 10 == 0) printf("  %3d: lambda %.8f  |Hv| %.8f\n", it, lambda, nh);
    if (it > 1 && fabs(lambda - prev) <= 1e-6 * fabs(lambda)) {
      converged = 1;
      break;
    }
    if (it < o.iters)
      for (i = 0; i < m->nparams; i++) DL_ASSIGN(v[i], dl_div(hv[i], nh));
  }
  if (it > o.iters) it = o.iters;
  printf("  %s after %d products (last change %.1e relative): lambda_max = %.8f\n",
         converged ? "converged" : "stopped", it, fabs(lambda - prev) / fabs(lambda), lambda);
  for (i = 0; i < m->nparams; i++) dl_set_tangent(&m->params[i]->t, NULL);

  /* 3. the last product against central differences of the gradient */
  {
    double num = 0, den = 0;
    int side;
    for (side = 0; side < 2; side++) {
      for (i = 0; i < m->nparams; i++) {
        DL_ASSIGN(&m->params[i]->t, dl_add(&m->params[i]->t, dl_mul(side ? -2 * eps : eps, v[i])));
        dl_zero_grad(&m->params[i]->t);
      }
      dl_backward(&tp, loss_of(m, &tp, hbatch.x, hbatch.y), NULL);
      dl_tape_rewind(&tp);
      for (i = 0; i < m->nparams; i++) {
        if (!side) dl_tensor_copy(gp[i], m->params[i]->t.grad);
        else DL_ASSIGN(gp[i], dl_div(dl_sub(gp[i], m->params[i]->t.grad), 2 * eps));
      }
    }
    for (i = 0; i < m->nparams; i++) {
      DL_ASSIGN(&m->params[i]->t, dl_add(&m->params[i]->t, dl_mul(eps, v[i])));
      for (j = 0; j < hv[i]->numel; j++) {
        const double d = dl_f64(hv[i])[j] - dl_f64(gp[i])[j];
        num += d * d;
        den += dl_f64(gp[i])[j] * dl_f64(gp[i])[j];
      }
    }
    rel = sqrt(num / den);
    printf("H v against differences of gradients (eps %g): relative error %.2e\n", eps, rel);
  }
  printf("gradient descent on this batch is stable for learning rates below 2 / lambda_max = %.5f\n",
         2 / lambda);
  printf("result: lambda_max=%.6f iterations=%d converged=%d hv_rel_err=%.2e lr_bound=%.5f wall_s=%.1f\n", lambda,
         it, converged, rel, 2 / lambda, dl_clock_monotonic(NULL) - t0);
  for (i = 0; i < m->nparams; i++) {
    dl_tensor_free(v[i]);
    dl_tensor_free(hv[i]);
    dl_tensor_free(gp[i]);
  }
  dl_optim_free(opt);
  dl_model_free(m);
  dl_tape_free(&tp);
  dl_batcher_free(&tb);
  dl_batcher_free(&hb);
  dl_dataset_free(&train);
  dl_dataset_free(&train_all);
  dl_dataset_free(&test);
  return 0;
}
