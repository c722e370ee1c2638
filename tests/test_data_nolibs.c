/* dl-test-cxx */
/* tests/test_data_nolibs.c - include/dl/data.h built as a user builds it
 * without -DDL_USE_ZLIB and -DDL_USE_STB_IMAGE: plain files still load, and
 * a gzip input or an image folder gives DL_ERR_UNSUPPORTED with a message
 * that names the flag to build with (tests/test_data.c covers the rest).
 */
#include "dl/data.h"
#include "harness.h"

#define DATA "tests/data/"

static dl_ctx ctx;

#define CHECK_HAS(frag) CHECK_MSG(strstr(ctx.message, frag) != NULL, "message \"%s\" lacks \"%s\"", ctx.message, frag)

static void test_plain_without_zlib(void) {
  dl_tensor *t = NULL;
  dl_dataset ds;
  static const unsigned char gz[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  CHECK(dl_idx_load(&ctx, DATA "images_u8.idx", &t) == DL_OK);
  if (t) CHECK(t->numel == 60 && dl_u8(t)[59] == (37 * 4 + 11 * 2 + 3 * 3) % 256);
  dl_tensor_free(t);
  CHECK(dl_idx_load(&ctx, DATA "images_u8.idx.gz", &t) == DL_ERR_UNSUPPORTED && t == NULL);
  CHECK_HAS("images_u8.idx.gz is gzip-compressed: build with -DDL_USE_ZLIB -lz");
  CHECK(dl_idx_parse(&ctx, gz, sizeof gz, &t) == DL_ERR_UNSUPPORTED && t == NULL);
  CHECK_HAS("-DDL_USE_ZLIB -lz");
  CHECK(dl_csv_load(&ctx, DATA "iris_small.csv.gz", NULL, &ds) == DL_ERR_UNSUPPORTED && ds.x == NULL);
  CHECK_HAS("iris_small.csv.gz is gzip-compressed");
  {
    dl_csv_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.label = "species";
    CHECK(dl_csv_load(&ctx, DATA "iris_small.csv", &cd, &ds) == DL_OK);
  }
  CHECK(ds.n == 6);
  dl_dataset_free(&ds);
  /* Fashion-MNIST as Debian ships it (.gz) needs zlib: the message says so */
  {
    FILE *f = fopen(DL_FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz", "rb");
    if (!f) return;
    fclose(f);
  }
  CHECK(dl_load_fashion_mnist(&ctx, NULL, NULL, &ds) == DL_ERR_UNSUPPORTED);
  CHECK_HAS("-DDL_USE_ZLIB -lz");
}

static void test_images_without_stb(void) {
  dl_dataset ds;
  dl_image_folder_desc id;
  memset(&id, 0, sizeof id);
  id.height = id.width = 4;
  CHECK(dl_image_folder_load(&ctx, DATA "images", &id, &ds) == DL_ERR_UNSUPPORTED);
  CHECK_HAS("built without DL_USE_STB_IMAGE");
  CHECK(ds.x == NULL);
  {
    static const uint8_t px[4] = {0, 100, 200, 255};
    uint8_t out[4];
    dl_image_resize(px, 2, 2, 1, out, 2, 2); /* the resize is plain C, always there */
    CHECK(memcmp(px, out, 4) == 0);
  }
}

int main(void) {
  dl_ctx_init(&ctx, NULL);
  RUN(test_plain_without_zlib);
  RUN(test_images_without_stb);
  return harness_finish();
}
