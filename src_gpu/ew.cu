// src_gpu/ew.cu - the library's element-wise ops on the GPU: every entry of
// expr.h's lists (DL_OPS_UNARY, DL_OPS_UNARY_P, DL_OPS_BINARY) becomes its
// launcher dl__op_NAME__gpu through dl/gpu/ew.cuh, from the same text that
// makes the CPU loops. Adding an op to the list adds its kernels here.
#include "dl/gpu/ew.cuh"

#define DLG_LIB1(name, expr) DL_GPU__OP(dl__op_##name, 1, expr)
#define DLG_LIB2(name, expr) DL_GPU__OP(dl__op_##name, 2, expr)
DL_OPS_UNARY(DLG_LIB1)
DL_OPS_UNARY_P(DLG_LIB1)
DL_OPS_BINARY(DLG_LIB2)

extern "C" int dlg_ew_linked(void) { return 1; }
