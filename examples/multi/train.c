/* examples/multi/train.c - the training loop of a program in three files
 * (model.c, data.c, this one; mlp.h says how to build it with the library
 * compiled once). Trains the MLP with Adam on the first --train images of
 * Fashion-MNIST for --epochs and prints
 *   result: test_acc=... test_loss=... train_loss=... steps=...
 * Usage: multi [--data DIR] [--epochs N] [--train N] [--test N] [--seed N]
 */
#include "mlp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  dl_ctx ctx;
  mlp_data d;
  dl_model *m = NULL;
  dl_optim *opt = NULL;
  dl_tape tp;
  const char *dir = NULL;
  int64_t epochs = 2, n_train = 4000, n_test = 1000, seed = 1, steps = 0, e, k;
  double train_loss = 0, test_loss = 0, test_acc = 0;
  int rc = 1;
  dl_adam_cfg adam = dl_adam_defaults(1e-3);
  for (k = 1; k < argc; k++) {
    if (k + 1 < argc && !strcmp(argv[k], "--data")) dir = argv[++k];
    else if (k + 1 < argc && !strcmp(argv[k], "--epochs")) epochs = atoll(argv[++k]);
    else if (k + 1 < argc && !strcmp(argv[k], "--train")) n_train = atoll(argv[++k]);
    else if (k + 1 < argc && !strcmp(argv[k], "--test")) n_test = atoll(argv[++k]);
    else if (k + 1 < argc && !strcmp(argv[k], "--seed")) seed = atoll(argv[++k]);
    else {
      fprintf(stderr, "usage: %s [--data DIR] [--epochs N] [--train N] [--test N] [--seed N]\n", argv[0]);
      return 2;
    }
  }
  dl_ctx_init(&ctx, &(dl_ctx_desc){.threads = 1});
  memset(&tp, 0, sizeof tp);
  if (mlp_data_load(&ctx, &d, dir, n_train, n_test, 64, (uint64_t)seed) != DL_OK) goto done;
  m = mlp_make(&ctx, (uint64_t)seed, 128);
  if (!m || dl_model_status(m) != DL_OK) goto done;
  if (!(opt = dl_optim_adam(m, &adam)) ||
      dl_tape_init(&tp, &ctx, 0) != DL_OK)
    goto done;
  for (e = 0; e < epochs; e++) {
    dl_batch b;
    double sum = 0;
    int64_t n = 0;
    dl_batcher_set_epoch(&d.tb, e);
    while (dl_batcher_next(&d.tb, &b)) {
      dl_tensor *loss = dl_t_cross_entropy(&tp, dl_model_forward(m, &tp, b.x), b.y, 0, DL_REDUCE_MEAN);
      sum += dl_item(loss);
      n++;
      dl_train_step(opt, &tp, loss, NULL);
      dl_tape_rewind(&tp);
      steps++;
    }
    train_loss = sum / (double)(n ? n : 1);
  }
  dl_evaluate(m, &tp, &d.eb, &test_loss, &test_acc, NULL);
  printf("result: test_acc=%.4f test_loss=%.4f train_loss=%.4f steps=%lld\n", test_acc, test_loss, train_loss,
         (long long)steps);
  rc = 0;
done:
  if (rc) fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&ctx));
  dl_tape_free(&tp);
  dl_optim_free(opt);
  dl_model_free(m);
  mlp_data_free(&d);
  return rc;
}
