/* examples/firmware/classify.h - the loop the firmware and the host both
 * run: the first FW_NIMAGES test images through a micro model, the
 * predicted classes printed 100 to a line ("pred 0 3 ..." as digits), then
 * "correct N of M". The same source on both sides, the same model source
 * (int8: the same bytes out). */
#ifndef FW_CLASSIFY_H
#define FW_CLASSIFY_H
#include <stdint.h>
#include <string.h>
#include "dl/micro.h"

/* Decimal digits of v into b (at least 12 bytes). */
static char *fw_utoa(char *b, unsigned long v) {
  char t[12];
  int n = 0, i;
  do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
  for (i = 0; i < n; i++) b[i] = t[n - 1 - i];
  b[n] = 0;
  return b;
}

/* 0, or 1 after printing the model's error. */
static int fw_classify(const dlm_model *m, void *arena, size_t arena_bytes, const uint8_t *images,
                       const uint8_t *labels, int n, size_t image_bytes, void (*put)(const char *)) {
  char line[8 + 100 + 2], num[12];
  int k, right = 0, col = 0;
  dlm_error e;
  memcpy(line, "pred ", 5);
  for (k = 0; k < n; k++) {
    int c;
    if (dlm_run_u8(m, arena, arena_bytes, images + (size_t)k * image_bytes, image_bytes, &e) != DLM_OK) {
      put("error: ");
      put(e.msg);
      put("\n");
      return 1;
    }
    c = dlm_argmax(m, arena);
    right += c == labels[k];
    line[5 + col++] = (char)('0' + c % 10);
    if (col == 100 || k == n - 1) {
      line[5 + col] = '\n';
      line[6 + col] = 0;
      put(line);
      col = 0;
    }
  }
  put("correct ");
  put(fw_utoa(num, (unsigned long)right));
  put(" of ");
  put(fw_utoa(num, (unsigned long)n));
  put("\n");
  return 0;
}
#endif
