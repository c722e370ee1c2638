/* examples/firmware/fw.h - the board's few services (startup.c on the
 * Cortex-M, stdio on the host). */
#ifndef FW_H
#define FW_H
#include <stddef.h>
void fw_puts(const char *s);
void fw_exit(int code);
size_t fw_stack_used(void);
size_t fw_stack_size(void);
#endif
