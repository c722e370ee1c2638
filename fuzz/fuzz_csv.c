/* dl-fuzz-flags: -DDL_USE_ZLIB -lz */
/* fuzz/fuzz_csv.c - libFuzzer target for the CSV reader (dl_csv_parse in
 * include/dl/data.h), plain and gzip:
 *
 *   clang -fsanitize=fuzzer,address,undefined -Iinclude fuzz/fuzz_csv.c -DDL_USE_ZLIB -lz -o fuzz_csv
 *   ./fuzz_csv -max_total_time=60 fuzz/corpus/csv/
 *
 * Each input is parsed with four configurations (label column by name, by
 * index from the end with regression targets and ';', none, f64). Checked:
 * a failure leaves the dataset zeroed with a message; a success has N >= 1
 * rows, x [N, F] with F >= 1 of finite values, y [N] i64 >= 0 or [N, 1].
 */
#include "dl/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(dl_status st, const dl_ctx *ctx, dl_dataset *ds, const dl_csv_desc *d) {
  int64_t i;
  if (st != DL_OK) {
    if (ds->x || ds->y || ds->n || ctx->message[0] == 0) abort();
    return;
  }
  if (!ds->x || ds->x->ndim != 2 || ds->n < 1 || ds->x->shape[0] != ds->n || ds->x->shape[1] < 1) abort();
  if (ds->x->dtype != d->dtype) abort();
  for (i = 0; i < ds->x->numel; i++) {
    double v = dl__get_at(ds->x, i);
    if (!(v == v) || v > DBL_MAX || v < -DBL_MAX) abort();
  }
  if (d->no_label) {
    if (ds->y) abort();
  } else if (!d->regression) {
    if (!ds->y || ds->y->dtype != DL_I64 || ds->y->numel != ds->n) abort();
    for (i = 0; i < ds->n; i++)
      if (dl_i64(ds->y)[i] < 0 || dl_i64(ds->y)[i] >= ds->num_classes) abort();
  } else if (!ds->y || ds->y->ndim != 2 || ds->y->shape[1] != 1) {
    abort();
  }
  dl_dataset_free(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const dl_csv_desc descs[4] = {
      {"label", 0, 0, 0, DL_F32, 0},
      {NULL, -1, 0, 1, DL_F32, ';'},
      {NULL, 0, 1, 0, DL_F64, 0},
      {NULL, 0, 0, 0, DL_F64, 0},
  };
  int k;
  for (k = 0; k < 4; k++) {
    dl_ctx ctx;
    dl_dataset ds;
    dl_ctx_init(&ctx, NULL);
    check(dl_csv_parse(&ctx, data, size, &descs[k], &ds), &ctx, &ds, &descs[k]);
  }
  return 0;
}
