/* fuzz/fuzz_micro_blob.c - libFuzzer target for dlm_load_blob (dl/micro.h),
 * the loader of a model blob a firmware may receive from outside:
 *
 *   clang -fsanitize=fuzzer,address,undefined -Iinclude fuzz/fuzz_micro_blob.c -o fuzz_micro_blob
 *   ./fuzz_micro_blob -max_total_time=60 fuzz/corpus/micro_blob/
 *
 * The input is copied to an aligned buffer and its size and checksum words
 * are set to match (otherwise nearly every mutation would stop at the
 * checksum); then the blob is loaded into a fixed number of slots. Besides
 * "no crash, no leak, no undefined behaviour": a refusal leaves a message,
 * and a blob that loads runs (when its work is small enough for a fuzzer)
 * on a 256 KiB arena with every pixel 0 and 255, then refuses a short arena.
 * The seeds are blobs dl_micro_blob wrote for a small CNN, f32 and int8.
 */
#include "dl/micro.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned char arena[1 << 18] __attribute__((aligned(16)));
static uint8_t pixels[1 << 16];
static float zeros[1 << 16];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dlm_layer L[32];
  dlm_tensor T[64];
  dlm_model m;
  dlm_error e;
  uint32_t *buf;
  unsigned char *b;
  dlm_status s;
  if (size > (1u << 20)) return 0;
  buf = (uint32_t *)malloc(size + 4);
  if (!buf) return 0;
  b = (unsigned char *)buf;
  memcpy(b, data, size);
  if (size >= DLM_BLOB_HEADER) { /* the size and checksum words made right */
    uint32_t v = (uint32_t)size, h;
    b[36] = (unsigned char)v; b[37] = (unsigned char)(v >> 8); b[38] = (unsigned char)(v >> 16); b[39] = (unsigned char)(v >> 24);
    h = dlm_fnv1a(b + 64, size - 64);
    b[40] = (unsigned char)h; b[41] = (unsigned char)(h >> 8); b[42] = (unsigned char)(h >> 16); b[43] = (unsigned char)(h >> 24);
  }
  s = dlm_load_blob(b, size, &m, L, 32, T, 64, &e);
  if (s != DLM_OK) {
    if (!e.msg[0] || e.status != s) abort();
  } else {
    uint64_t work = 0, in = dlm_tensor_numel(&m.tensors[m.input]);
    int32_t i;
    for (i = 0; i < m.nlayers; i++) /* multiply-adds, roughly: weights x output plane, or the tensors' sizes */
      work += (uint64_t)(L[i].nweight + 1) * (uint64_t)T[L[i].out].h * (uint64_t)T[L[i].out].w +
              dlm_tensor_numel(&T[L[i].in]) * (uint64_t)(L[i].kh + 1) * (uint64_t)(L[i].kw + 1);
    if (m.arena_bytes <= sizeof arena && in <= sizeof pixels && work < 20000000u) {
      int k;
      const int lut = m.precision == DLM_F32 ? m.input_lut != NULL : m.input_lut_q != NULL;
      for (k = 0; k < 2; k++) { /* checked: it runs (a blob without a pixel table: on floats) */
        memset(pixels, k ? 255 : 0, (size_t)in);
        if (lut ? dlm_run_u8(&m, arena, sizeof arena, pixels, (size_t)in, &e) != DLM_OK
                : dlm_run_f32(&m, arena, sizeof arena, (const float *)(const void *)zeros, (size_t)in, &e) != DLM_OK)
          abort();
        if (dlm_argmax(&m, arena) < 0 || dlm_argmax(&m, arena) >= dlm_output_count(&m)) abort();
      }
      if (m.arena_bytes > 4 && dlm_run_f32(&m, arena, m.arena_bytes - 4, (const float *)(const void *)zeros, (size_t)in,
                                           &e) != DLM_ERR_ARENA)
        abort();
    }
  }
  free(buf);
  return 0;
}
