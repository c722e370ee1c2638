/* fuzz/fuzz_safetensors.c - libFuzzer target for the safetensors reader of
 * include/dl/io.h (built and run by fuzz/run.sh under ASan and UBSan).
 *
 * For every input, dl_safetensors_parse either refuses it (and must leave
 * the result empty), or accepts it, and then everything it promises must
 * hold, or the target aborts (a crash to libFuzzer):
 *   - every tensor is readable, and its copy has the file's bytes;
 *   - an f16 / bf16 / f32 tensor converted to f32 and back (explicit
 *     conversions, correctly rounded) keeps its bits (NaN stays NaN);
 *   - written again with dl_st_writer (metadata included) and parsed again,
 *     the same names, dtypes, shapes, bytes and metadata come back.
 * Seed corpus: fuzz/corpus/safetensors/ (tools/check_safetensors.py corpus
 * writes most of it); dictionary: fuzz/fuzz_safetensors.dict.
 */
/* dl-fuzz-flags: -DDL_SAFETENSORS_MAX_HEADER=1000000 */
#include "dl/io.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "fuzz_safetensors: %s failed (line %d)\n", #c, __LINE__); abort(); } } while (0)

static int same_half_bits(const unsigned char *a, const unsigned char *b, int64_t n, dl_dtype dt) {
  int64_t i;
  for (i = 0; i < n; i++) {
    uint16_t x, y;
    float fx, fy;
    if (dt == DL_F32) {
      memcpy(&fx, a + 4 * i, 4);
      memcpy(&fy, b + 4 * i, 4);
      if (fx != fx || fy != fy) { if (!(fx != fx && fy != fy)) return 0; continue; }
      if (memcmp(a + 4 * i, b + 4 * i, 4)) return 0;
      continue;
    }
    memcpy(&x, a + 2 * i, 2);
    memcpy(&y, b + 2 * i, 2);
    fx = dt == DL_F16 ? dl_f16_to_f32(x) : dl_bf16_to_f32(x);
    fy = dt == DL_F16 ? dl_f16_to_f32(y) : dl_bf16_to_f32(y);
    if (fx != fx || fy != fy) { if (!(fx != fx && fy != fy)) return 0; continue; }
    if (x != y) return 0;
  }
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dl_ctx ctx;
  dl_safetensors st, again;
  dl_st_writer w;
  dl_tensor **copies;
  void *buf;
  size_t n;
  int i;
  dl_ctx_init(&ctx, NULL);
  if (dl_safetensors_parse(&st, &ctx, data, size) != DL_OK) {
    REQUIRE(st.tensors == NULL && st.meta == NULL && st.strings == NULL && st.ntensors == 0);
    REQUIRE(ctx.message[0] != 0);
    return 0;
  }
  copies = (dl_tensor **)calloc((size_t)st.ntensors + 1, sizeof *copies);
  REQUIRE(copies);
  dl_st_writer_init(&w, &ctx);
  for (i = 0; i < st.nmeta; i++) REQUIRE(dl_st_writer_meta(&w, st.meta[i].key, st.meta[i].value) == DL_OK);
  for (i = 0; i < st.ntensors; i++) {
    const dl_st_tensor *e = &st.tensors[i];
    size_t bytes = (size_t)e->numel * dl_dtype_size(e->dtype);
    REQUIRE(i == 0 || strcmp(st.tensors[i - 1].name, e->name) < 0);
    REQUIRE(dl_safetensors_find(&st, e->name) == e);
    REQUIRE(e->end - e->begin == bytes && e->end <= st.data_len);
    copies[i] = dl_safetensors_get(&st, e->name);
    REQUIRE(copies[i] != NULL);
    REQUIRE(bytes == 0 || memcmp(copies[i]->data, e->data, bytes) == 0);
    if (e->dtype == DL_F16 || e->dtype == DL_BF16 || e->dtype == DL_F32) {
      dl_tensor *f = dl_tensor_make(&ctx, DL_F32, e->ndim, e->shape), *back = dl_tensor_make(&ctx, e->dtype, e->ndim, e->shape);
      REQUIRE(f && back);
      REQUIRE(dl_safetensors_read(&st, e, f, 0) == (e->dtype == DL_F32 ? DL_OK : DL_ERR_DTYPE));
      REQUIRE(dl_safetensors_read(&st, e, f, 1) == DL_OK);
      dl_tensor_convert_float(back, f);
      REQUIRE(bytes == 0 || same_half_bits((const unsigned char *)back->data, e->data, e->numel, e->dtype));
      dl_tensor_free(f);
      dl_tensor_free(back);
    }
    REQUIRE(dl_st_writer_add(&w, e->name, copies[i]) == DL_OK);
  }
  REQUIRE(dl_st_writer_to_memory(&w, &buf, &n) == DL_OK);
  REQUIRE(dl_safetensors_parse(&again, &ctx, buf, n) == DL_OK);
  REQUIRE(again.ntensors == st.ntensors && again.nmeta == st.nmeta && (8 + again.header_len) % 8 == 0);
  for (i = 0; i < st.nmeta; i++)
    REQUIRE(!strcmp(again.meta[i].key, st.meta[i].key) && !strcmp(again.meta[i].value, st.meta[i].value));
  for (i = 0; i < st.ntensors; i++) {
    const dl_st_tensor *a = &again.tensors[i], *e = &st.tensors[i];
    REQUIRE(!strcmp(a->name, e->name) && a->dtype == e->dtype && a->ndim == e->ndim && a->numel == e->numel);
    REQUIRE(!memcmp(a->shape, e->shape, sizeof(int64_t) * (size_t)e->ndim));
    REQUIRE(a->begin % dl_dtype_size(a->dtype) == 0);
    REQUIRE(a->end == a->begin || !memcmp(a->data, e->data, (size_t)(e->end - e->begin)));
  }
  dl_safetensors_free(&again);
  dl_free(&ctx, buf);
  dl_st_writer_free(&w);
  for (i = 0; i < st.ntensors; i++) dl_tensor_free(copies[i]);
  free(copies);
  dl_safetensors_free(&st);
  return 0;
}
