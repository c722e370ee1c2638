/* examples/firmware/host.c - the host's run of a firmware model: the same
 * generated model source and the same classify.h loop over the same
 * embedded images as main.c (the predictions run.sh compares with QEMU's),
 * then the accuracy over the whole test set:
 *   host [DATA_DIR]   prints the "pred" lines, "correct N of M", "host_acc=X" */
#define DL_USE_ZLIB
#include "dl.h"
#include "classify.h"
#include "model_select.h"
#include "test_images.h"

static unsigned char arena[FW_ARENA_BYTES] __attribute__((aligned(8)));
static void put(const char *s) { fputs(s, stdout); }

int main(int argc, char **argv) {
  dl_ctx ctx;
  dl_dataset tr, te;
  int64_t k, per, right = 0;
  if (fw_classify(&FW_MODEL, arena, sizeof arena, fw_images, fw_labels, FW_NIMAGES, FW_IMAGE_BYTES, put)) return 1;
  dl_ctx_init(&ctx, NULL);
  if (dl_load_fashion_mnist(&ctx, argc > 1 ? argv[1] : NULL, &tr, &te) != DL_OK)
    return fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&ctx)), 1;
  per = te.x->numel / te.n;
  for (k = 0; k < te.n; k++) {
    dlm_error e;
    if (dlm_run_u8(&FW_MODEL, arena, sizeof arena, (const uint8_t *)te.x->data + k * per, (size_t)per, &e) != DLM_OK)
      return fprintf(stderr, "%s: %s\n", argv[0], e.msg), 1;
    right += dlm_argmax(&FW_MODEL, arena) == ((const int64_t *)te.y->data)[k];
  }
  printf("host_acc=%.4f (%lld of %lld test images)\n", (double)right / (double)te.n, (long long)right, (long long)te.n);
  dl_dataset_free(&tr);
  dl_dataset_free(&te);
  return 0;
}
