/* dl-fuzz-flags: -DDL_USE_ZLIB -lz */
/* fuzz/fuzz_idx.c - libFuzzer target for the IDX reader (dl_idx_parse in
 * include/dl/data.h), plain and gzip:
 *
 *   clang -fsanitize=fuzzer,address,undefined -Iinclude fuzz/fuzz_idx.c -DDL_USE_ZLIB -lz -o fuzz_idx
 *   ./fuzz_idx -max_total_time=60 fuzz/corpus/idx/
 *
 * Besides "no crash, no leak, no undefined behaviour", it checks the
 * reader's contract: a failure leaves *out NULL and a message in the ctx; a
 * success gives a tensor whose IDX encoding is the input byte for byte (for
 * plain input of every type but i16, which loads widened to i32).
 */
#include "dl/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dl_ctx ctx;
  dl_tensor *t = (dl_tensor *)(uintptr_t)1;
  dl_status st;
  dl_ctx_init(&ctx, NULL);
  st = dl_idx_parse(&ctx, data, size, &t);
  if (st != DL_OK) {
    if (t != NULL || ctx.message[0] == 0 || ctx.status != st) abort();
    return 0;
  }
  if (!t || t->ndim < 1 || t->ndim > DL_MAX_DIMS) abort();
  if (size >= 4 && data[0] == 0 && data[2] != 0x0B) {
    size_t n = 0;
    unsigned char *buf = (unsigned char *)malloc(size);
    if (!buf || dl_idx_encode(&ctx, t, buf, size, &n) != DL_OK || n != size || memcmp(buf, data, size) != 0) abort();
    free(buf);
  }
  dl_tensor_free(t);
  return 0;
}
