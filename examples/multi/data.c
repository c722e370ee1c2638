/* examples/multi/data.c - the data (see mlp.h). */
#include "mlp.h"

dl_status mlp_data_load(dl_ctx *ctx, mlp_data *d, const char *dir, int64_t n_train, int64_t n_test, int64_t batch,
                        uint64_t seed) {
  const double mean = 0.2860, std = 0.3530; /* Fashion-MNIST's training mean and deviation of x / 255 */
  dl_status st;
  memset(d, 0, sizeof *d);
  if ((st = dl_load_fashion_mnist(ctx, dir, &d->train_all, &d->test_all)) != DL_OK ||
      (st = dl_dataset_head(ctx, &d->train_all, n_train, &d->train)) != DL_OK ||
      (st = dl_dataset_head(ctx, &d->test_all, n_test, &d->test)) != DL_OK)
    return st;
  if ((st = dl_batcher_make(ctx, &d->tb, &d->train,
                            &(dl_batcher_desc){.batch_size = batch, .dtype = DL_F32, .shuffle = {.seed = seed},
                                               .norm = DL_NORM_STANDARDIZE, .mean = mean, .std = std})) != DL_OK)
    return st;
  return dl_batcher_make(ctx, &d->eb, &d->test,
                         &(dl_batcher_desc){.batch_size = 500, .dtype = DL_F32, .shuffle = {.no_shuffle = 1},
                                            .norm = DL_NORM_STANDARDIZE, .mean = mean, .std = std});
}

void mlp_data_free(mlp_data *d) {
  dl_batcher_free(&d->tb);
  dl_batcher_free(&d->eb);
  dl_dataset_free(&d->train);
  dl_dataset_free(&d->test);
  dl_dataset_free(&d->train_all);
  dl_dataset_free(&d->test_all);
}
