/* examples/firmware/images.c - writes the first N Fashion-MNIST test images
 * and labels as C source for the firmware (and the host run beside it):
 *   images OUT_DIR N [DATA_DIR]   -> OUT_DIR/test_images.{c,h}
 * The images go in section .testdata (the linker script keeps it apart). */
#define DL_USE_ZLIB
#include "dl.h"

int main(int argc, char **argv) {
  dl_ctx ctx;
  dl_dataset tr, te;
  char path[4096];
  long n;
  int64_t k, per;
  FILE *f;
  if (argc < 3 || (n = atol(argv[2])) <= 0) return fprintf(stderr, "usage: %s OUT_DIR N [DATA_DIR]\n", argv[0]), 2;
  dl_ctx_init(&ctx, NULL);
  if (dl_load_fashion_mnist(&ctx, argc > 3 ? argv[3] : NULL, &tr, &te) != DL_OK)
    return fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&ctx)), 1;
  if (n > te.n) n = (long)te.n;
  per = te.x->numel / te.n;
  snprintf(path, sizeof path, "%s/test_images.h", argv[1]);
  if (!(f = fopen(path, "w"))) return perror(path), 1;
  fprintf(f, "/* the first %ld Fashion-MNIST test images (written by examples/firmware/images.c) */\n"
             "#include <stdint.h>\n#define FW_NIMAGES %ld\n#define FW_IMAGE_BYTES %lld\n"
             "extern const uint8_t fw_images[FW_NIMAGES * FW_IMAGE_BYTES];\nextern const uint8_t fw_labels[FW_NIMAGES];\n",
          n, n, (long long)per);
  if (fclose(f)) return perror(path), 1;
  snprintf(path, sizeof path, "%s/test_images.c", argv[1]);
  if (!(f = fopen(path, "w"))) return perror(path), 1;
  fprintf(f, "#include \"test_images.h\"\n__attribute__((section(\".testdata\"))) const uint8_t fw_images[] = {");
  for (k = 0; k < n * per; k++) fprintf(f, "%s%u", k == 0 ? "\n" : k % 28 ? "," : ",\n", ((const uint8_t *)te.x->data)[k]);
  fprintf(f, "\n};\nconst uint8_t fw_labels[] = {");
  for (k = 0; k < n; k++) fprintf(f, "%s%lld", k == 0 ? "\n" : k % 50 ? "," : ",\n", (long long)((const int64_t *)te.y->data)[k]);
  fprintf(f, "\n};\n");
  if (fclose(f)) return perror(path), 1;
  dl_dataset_free(&tr);
  dl_dataset_free(&te);
  return 0;
}
