/* examples/firmware/main.c - a trained Fashion-MNIST classifier on a
 * Cortex-M4 (QEMU's mps2-an386 board), from C source that dl.h wrote.
 *
 *   make firmware          trains the MLP and the small CNN (or takes
 *                          their weights), exports them in f32 and int8,
 *                          builds four firmware images, runs each under
 *                          qemu-system-arm and compares its predictions
 *                          with the host's (examples/firmware/run.sh)
 *
 * Built with arm-none-eabi-gcc -std=c11 -mcpu=cortex-m4 -mthumb
 * -mfloat-abi=hard -mfpu=fpv4-sp-d16 -ffreestanding -Os: dl.h with
 * DL_FREESTANDING is dl/micro.h alone, the model is the generated
 * NAME.c (weights as const arrays, in flash), its arena a static buffer
 * of NAME_ARENA_BYTES (in RAM). No heap: the image has no malloc, free,
 * calloc or realloc (run.sh checks with nm). The first 1000 test images
 * are embedded (test_images.c, section .testdata, left out of the
 * model's flash figure). Output goes out through semihosting.
 *
 * model_select.h (written by run.sh for each build) names the model:
 *   #include "fashion_mlp_int8.h"
 *   #define FW_MODEL fashion_mlp_int8
 *   #define FW_ARENA_BYTES FASHION_MLP_INT8_ARENA_BYTES */
#define DL_FREESTANDING
#include "dl.h"
#include "classify.h"
#include "fw.h"
#include "model_select.h"
#include "test_images.h"

static unsigned char arena[FW_ARENA_BYTES] __attribute__((aligned(8)));

int main(void) {
  char num[12];
  int rc;
  fw_puts("model ");
  fw_puts(FW_MODEL.name);
  fw_puts(FW_MODEL.precision == DLM_INT8 ? " int8" : " f32");
  fw_puts(", arena ");
  fw_puts(fw_utoa(num, (unsigned long)sizeof arena));
  fw_puts(" bytes\n");
  rc = fw_classify(&FW_MODEL, arena, sizeof arena, fw_images, fw_labels, FW_NIMAGES, FW_IMAGE_BYTES, fw_puts);
  fw_puts("stack used ");
  fw_puts(fw_utoa(num, (unsigned long)fw_stack_used()));
  fw_puts(" of ");
  fw_puts(fw_utoa(num, (unsigned long)fw_stack_size()));
  fw_puts(" bytes\n");
  return rc;
}
