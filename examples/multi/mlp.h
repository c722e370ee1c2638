/* examples/multi/mlp.h - what the three files of this program share.
 *
 * A program of several files that all use dl.h, built the way a larger
 * project builds: the library is compiled once, in dl.c (DL_IMPLEMENTATION),
 * and every file is compiled with -DDL_LINK, so editing one of them rebuilds
 * only that file and none of the library:
 *
 *   cc -std=c11 -O2 -DDL_LINK -DDL_USE_ZLIB -Iinclude -c examples/multi/dl.c      (once; it defines DL_IMPLEMENTATION)
 *   cc -std=c11 -O2 -DDL_LINK -DDL_USE_ZLIB -Iinclude -c examples/multi/model.c   (each file: a fraction of a second)
 *   cc -std=c11 -O2 -DDL_LINK -DDL_USE_ZLIB -Iinclude -c examples/multi/data.c
 *   cc -std=c11 -O2 -DDL_LINK -DDL_USE_ZLIB -Iinclude -c examples/multi/train.c
 *   cc dl.o model.o data.o train.o -o multi -lz -lm
 *
 * Every file must see the same configuration macros (DL_USE_ZLIB here):
 * put them on the command line. Without -DDL_LINK and without dl.c each
 * file compiles the parts of the library it uses for itself, which works
 * too (tests/run.sh builds it both ways and compares the results); layer
 * types are compared by address, so objects of one file's copy are best
 * kept to that copy: prefer the compile-once build for programs of several
 * files.
 */
#ifndef MLP_H
#define MLP_H

#include "dl.h"

/* model.c: a 784-hidden-10 MLP with ReLU, weights from seed. */
dl_model *mlp_make(dl_ctx *ctx, uint64_t seed, int64_t hidden);

/* data.c: the first n_train / n_test Fashion-MNIST images, standardised
 * f32 batches of `batch` (training order shuffled by seed). */
typedef struct mlp_data {
  dl_dataset train_all, test_all, train, test;
  dl_batcher tb, eb;
} mlp_data;
dl_status mlp_data_load(dl_ctx *ctx, mlp_data *d, const char *dir, int64_t n_train, int64_t n_test, int64_t batch,
                        uint64_t seed);
void mlp_data_free(mlp_data *d);

#endif
