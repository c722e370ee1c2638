/* examples/firmware/startup.c - what runs before main on a Cortex-M4, and
 * output through semihosting (no UART driver, no C library stdio).
 *
 * The vector table (initial stack pointer, reset and fault handlers); the
 * reset handler turns the FPU on (CPACR: CP10 and CP11, full access),
 * copies .data from flash, zeroes .bss, fills the stack with a pattern (so
 * that fw_stack_used can say how deep it went) and calls main; main's
 * return value ends the run (SYS_EXIT: QEMU exits 0 for 0, 1 otherwise).
 * fw_puts writes a string with SYS_WRITE0 (QEMU: -semihosting-config
 * enable=on,target=native prints it on its standard output). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "fw.h"

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _sstack, _estack;
int main(void);

/* A semihosting call: operation in r0, argument in r1, BKPT 0xAB. */
static int semihost(int op, const void *arg) {
  register int r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}
void fw_puts(const char *s) { semihost(0x04, s); } /* SYS_WRITE0 */
void fw_exit(int code) {
  /* SYS_EXIT with ADP_Stopped_ApplicationExit (0x20026) or RunTimeErrorUnknown (0x20023) */
  semihost(0x18, (const void *)(uintptr_t)(code == 0 ? 0x20026u : 0x20023u));
  for (;;) {
  }
}

#define FW_STACK_PAINT 0xC0FFEE11u
size_t fw_stack_used(void) {
  const uint32_t *p = &_sstack;
  while (p < &_estack && *p == FW_STACK_PAINT) p++;
  return (size_t)((const char *)&_estack - (const char *)p);
}
size_t fw_stack_size(void) { return (size_t)((const char *)&_estack - (const char *)&_sstack); }

void Reset_Handler(void) {
  volatile uint32_t *const cpacr = (volatile uint32_t *)0xE000ED88u;
  uint32_t *p;
  *cpacr |= 0xFu << 20; /* CP10, CP11: the FPU, before any float instruction */
  __asm__ volatile("dsb\n\tisb" ::: "memory");
  for (p = &_sdata; p < &_edata; p++) *p = (&_sidata)[p - &_sdata];
  for (p = &_sbss; p < &_ebss; p++) *p = 0;
  { /* paint the stack below what this function uses */
    uint32_t *sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    for (p = &_sstack; p < sp - 16; p++) *p = FW_STACK_PAINT;
  }
  fw_exit(main());
}

static void Fault_Handler(void) {
  fw_puts("firmware: hard fault\n");
  fw_exit(1);
}

typedef void (*fw_vector)(void);
__attribute__((section(".isr_vector"), used)) const fw_vector fw_vectors[16] = {
    (fw_vector)(uintptr_t)&_estack, /* initial stack pointer */
    Reset_Handler,  Fault_Handler, /* NMI */
    Fault_Handler,  /* HardFault */
    Fault_Handler,  /* MemManage */
    Fault_Handler,  /* BusFault */
    Fault_Handler,  /* UsageFault */
    0, 0, 0, 0,
    Fault_Handler,  /* SVCall */
    Fault_Handler,  /* DebugMon */
    0,
    Fault_Handler,  /* PendSV */
    Fault_Handler,  /* SysTick */
};
