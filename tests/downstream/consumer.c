/* tests/downstream/consumer.c - a program that uses an installed dl.h, as a
 * project of someone else's would: `#include "dl.h"` found through
 * pkg-config, CMake's dl::dl or a copy of the headers next to this file
 * (tests/downstream.sh builds it all three ways against a staged install).
 *
 * It makes a three-class problem (256 points in 8 dimensions, labelled by
 * the largest of three fixed projections), standardises it with one fused
 * expression, trains an 8-16-3 MLP with Adam for 60 full-batch steps and
 * prints
 *   config: version=0.2.0 openmp=0|1 openblas=0|1 zlib=0|1 stb=0|1 mpi=0|1 cuda=0|1
 *   result: loss0=1.1234 loss=0.0567 acc=0.9883 steps=60
 * Exit status 0 when the loss fell below a quarter of its start and the
 * training accuracy reached 0.95; 1 otherwise, or when something failed.
 * With an argument: that must be the headers' DL_VERSION_STRING. */
#include "dl.h" /* -I from pkg-config or CMake, or the copy next to this file */

#include <stdio.h>
#include <string.h>

#define N 256
#define D 8
#define K 3

int main(int argc, char **argv) {
  dl_ctx ctx;
  dl_rng rng = dl_rng_make(7);
  dl_tensor *x, *y, *proj;
  dl_model *m = NULL;
  dl_optim *opt = NULL;
  dl_tape tp;
  dl_adam_cfg adam = dl_adam_defaults(0.05);
  double loss0 = 0, loss = 0, acc = 0;
  int64_t i, k, step, steps = 60;
  int rc = 1;

  printf("config: version=%s openmp=%d openblas=%d zlib=%d stb=%d mpi=%d cuda=%d\n", DL_VERSION_STRING,
#ifdef _OPENMP
         1,
#else
         0,
#endif
#ifdef DL_USE_OPENBLAS
         1,
#else
         0,
#endif
#ifdef DL_USE_ZLIB
         1,
#else
         0,
#endif
#if defined(DL_USE_STB_IMAGE) && defined(DL_USE_STB_IMAGE_WRITE)
         1,
#else
         0,
#endif
#ifdef DL_USE_MPI
         1,
#else
         0,
#endif
#ifdef DL_USE_CUDA
         1
#else
         0
#endif
  );
  if (argc > 1 && strcmp(argv[1], DL_VERSION_STRING) != 0) {
    fprintf(stderr, "%s: headers say %s, expected %s\n", argv[0], DL_VERSION_STRING, argv[1]);
    return 1;
  }
  if (DL_VERSION_NUMBER != DL_VERSION_MAJOR * 10000 + DL_VERSION_MINOR * 100 + DL_VERSION_PATCH) return 1;

  dl_ctx_init(&ctx, &(dl_ctx_desc){.threads = 1});
  memset(&tp, 0, sizeof tp);
  x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(N, D));
  y = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(N));
  proj = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(D, K));
  if (!x || !y || !proj) goto done;
  dl_tensor_rand_normal(x, &rng, 0.0, 1.0);
  dl_tensor_rand_normal(proj, &rng, 0.0, 1.0);
  for (i = 0; i < N; i++) { /* the label: the largest of K projections */
    const float *xi = (const float *)x->data + i * D, *p = (const float *)proj->data;
    double best = -1e300;
    for (k = 0; k < K; k++) {
      double s = 0;
      int64_t j;
      for (j = 0; j < D; j++) s += (double)xi[j] * p[j * K + k];
      if (s > best) best = s, ((int64_t *)y->data)[i] = k;
    }
  }
  DL_ASSIGN(x, dl_mul(dl_add(x, 0.25), 0.5)); /* a fused expression: shift and scale in one loop */

  m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 3});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = D, .out = 16});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 16, .out = K});
  if (!m || dl_model_status(m) != DL_OK) goto done;
  if (!(opt = dl_optim_adam(m, &adam)) ||
      dl_tape_init(&tp, &ctx, 0) != DL_OK)
    goto done;
  for (step = 0; step < steps; step++) {
    dl_tensor *logits = dl_model_forward(m, &tp, x);
    dl_tensor *l = dl_t_cross_entropy(&tp, logits, y, 0, DL_REDUCE_MEAN);
    loss = dl_item(l);
    if (step == 0) loss0 = loss;
    acc = (double)dl_accuracy_count(logits, y) / N;
    dl_train_step(opt, &tp, l, NULL); /* backward, clip, regularise, update, zero-grad */
    dl_tape_rewind(&tp);
  }
  printf("result: loss0=%.4f loss=%.4f acc=%.4f steps=%lld\n", loss0, loss, acc, (long long)steps);
  rc = !(loss < 0.25 * loss0 && acc >= 0.95);
  if (rc) fprintf(stderr, "%s: did not learn (loss %.4f -> %.4f, accuracy %.4f)\n", argv[0], loss0, loss, acc);
done:
  if (rc && dl_ctx_message(&ctx)[0]) fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&ctx));
  dl_tape_free(&tp);
  dl_optim_free(opt);
  dl_model_free(m);
  dl_tensor_free(proj);
  dl_tensor_free(y);
  dl_tensor_free(x);
  return rc;
}
