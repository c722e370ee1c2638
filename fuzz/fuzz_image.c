/* fuzz/fuzz_image.c - libFuzzer target for image decoding through
 * include/dl/data.h (dl_image_load_memory: stb_image behind a header check;
 * built and run by fuzz/run.sh under ASan and UBSan).
 *
 * For every input, dl_image_load_memory either refuses it (NULL, a message,
 * *w = *h = 0) or returns w x h pixels of the channels asked for, with
 * 0 < w x h <= DL_IMAGE_MAX_PIXELS (the limit is read from the header before
 * anything is decoded, so a small file declaring a huge image costs
 * nothing), every byte of which is readable; dl_image_resize of them to a
 * small size stays inside both buffers. The channel count comes from the
 * input's first byte. DL_IMAGE_MAX_PIXELS is lowered here to 2^16 (the
 * default is 2^26): stb's code paths do not change with the size past a few
 * blocks, while the decode time does; at 2^22 a corpus that has found large
 * images runs at 170-300 executions a second under the sanitizers, at 2^16
 * at thousands (fuzz/README.md).
 * stb_image 2.27 (Debian 12's) is what decodes: this target found that it
 * writes past a Huffman table for a JPEG table of more than 256 codes
 * (dl_image_load now refuses such files first, dl__jpeg_tables_ok), and
 * that its PNG parser adds 0 to a NULL pointer and copies 0 bytes from a
 * NULL pointer (harmless; UBSan's pointer-overflow and nonnull-attribute
 * checks), which is why those two checks are off here; that it reads a PNM
 * header's numbers into an int without an overflow check (refused first,
 * dl__pnm_check); and that a JPEG scan using a Huffman table no DHT
 * segment defined indexes far outside the tables, reading what stb's
 * malloc'd decoder state held (stb's blocks now come zeroed: such a scan
 * decodes as corrupt); and that a 16-bit PNM asked for other channels than
 * its own is converted by stb's 8-bit routine, reading past its buffer
 * (dl.h decodes 16-bit PNMs itself, dl__pnm_check, and refuses a PNM whose
 * pixel data is shorter than its header declares); and that stb reads a
 * number ending at the end of its input one digit short (a maximum value
 * of 66020 read as 6602: 16-bit again, behind dl.h's back), so a header
 * running to the end of the data is refused first. And that stb 2.27's JPEG
 * bit reader shifts by 24 - code_bits with code_bits negative (a shift of
 * 34 on a corrupt scan a marker cuts short: stbi__grow_buffer_unsafe); the
 * value shifted is then always 0 (stb sets nomore with the marker and feeds
 * 0 bytes from then on), stb 2.28 returns before the count goes negative,
 * and dl.h cannot reach the reader from outside, so UBSan's shift-exponent
 * check is off for that one function (fuzz/fuzz_image.ignore) and on
 * everywhere else.
 * Seed corpus: fuzz/corpus/image/ (the test images of tests/data/images,
 * and the 74-byte decode bomb of tests/data/images_bomb).
 */
/* dl-fuzz-flags: -DDL_USE_STB_IMAGE -DDL_IMAGE_MAX_PIXELS=65536 -fno-sanitize=pointer-overflow,nonnull-attribute -fsanitize-ignorelist=fuzz/fuzz_image.ignore */
#include "dl/data.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "fuzz_image: %s failed (line %d)\n", #c, __LINE__); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dl_ctx ctx;
  int w = -1, h = -1, channels;
  unsigned char *px, small[4 * 7 * 5];
  size_t i, n;
  unsigned sum = 0;
  if (size < 1) return 0;
  channels = 1 + data[0] % 4;
  dl_ctx_init(&ctx, NULL);
  px = dl_image_load_memory(&ctx, data + 1, size - 1, "fuzz", channels, &w, &h);
  if (!px) {
    REQUIRE(w == 0 && h == 0 && ctx.message[0] != 0 && ctx.status != DL_OK);
    return 0;
  }
  REQUIRE(w > 0 && h > 0 && (int64_t)w * h <= (int64_t)DL_IMAGE_MAX_PIXELS);
  n = (size_t)w * (size_t)h * (size_t)channels;
  for (i = 0; i < n; i++) sum += px[i]; /* every byte readable (ASan) */
  dl_image_resize(px, h, w, channels, small, 5, 7);
  for (i = 0; i < (size_t)(channels * 7 * 5); i++) sum += small[i];
  dl_image_free(px);
  return (int)(sum & 0); /* libFuzzer wants 0 */
}
