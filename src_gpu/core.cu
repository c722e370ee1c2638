// src_gpu/core.cu - the element-wise ops of ops/core.h on the GPU.
//
// The library's element-wise ops on the GPU: every entry of
// expr.h's lists (DL_OPS_UNARY, DL_OPS_UNARY_P, DL_OPS_BINARY) becomes its
// launcher dl__op_NAME__gpu through dl/gpu/ew.cuh, from the same text that
// makes the CPU loops. Adding an op to the list adds its kernels here.
// Outside the list: clamp (two number parameters) and where (a mask), with
// the same scalar functions as the CPU (dual.h's dl_clamp, dl_ge, dl_le,
// dl_where) and dlg_ew's slots.
#include "dl/gpu/ew.cuh"

#define DLG_LIB1(name, expr) DL_GPU__OP(dl__op_##name, 1, expr)
#define DLG_LIB2(name, expr) DL_GPU__OP(dl__op_##name, 2, expr)
DL_OPS_UNARY(DLG_LIB1)
DL_OPS_UNARY_P(DLG_LIB1)
DL_OPS_BINARY(DLG_LIB2)

extern "C" int dlg_ew_linked(void) { return 1; }

#include "internal.h"

#include "dl.h"

template <typename T>
__global__ void dlg_clamp_k(int mode, dlg_ew e, dlg_ptrs P, T lo, T hi) {
  const T *x = (const T *)P.p[1];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < e.n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t o[5];
    dlg_ew_offsets(e, i, o);
    T v = x[o[1]];
    if (mode == DLG_FWD) {
      ((T *)P.p[0])[o[0]] = dl_clamp(v, (double)lo, (double)hi);
    } else {
      T in = dl_mul(dl_ge(v, lo), dl_le(v, hi)); // 1 inside [lo, hi], else 0 (as the CPU rule)
      if (mode == DLG_JVP) ((T *)P.p[0])[o[0]] = ((const T *)P.p[3])[o[3]] * in;
      else dlg_add_to(&((T *)P.p[3])[o[3]], ((const T *)P.p[0])[o[0]] * in, e.atomic);
    }
  }
}

template <typename T> __global__ void dlg_where_k(int mode, dlg_ew e, dlg_ptrs P) {
  const T *c = (const T *)P.p[1];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < e.n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t o[5];
    dlg_ew_offsets(e, i, o);
    T m = c[o[1]];
    if (mode != DLG_BWD) {
      ((T *)P.p[0])[o[0]] = dl_where(m, ((const T *)P.p[2])[o[2]], ((const T *)P.p[3])[o[3]]);
    } else {
      T gy = ((const T *)P.p[0])[o[0]];
      if (P.p[3]) dlg_add_to(&((T *)P.p[3])[o[3]], dl_where(m, gy, (T)0), e.atomic);
      if (P.p[4]) dlg_add_to(&((T *)P.p[4])[o[4]], dl_where(m, (T)0, gy), e.atomic);
    }
  }
}

static int dlg_ew_ptrs(const dlg_ew *e, void *const ptr[5], dlg_ptrs *P) {
  for (int k = 0; k < 5; k++) P->p[k] = ptr[k];
  return e->n > 0;
}

extern "C" int dlg_clamp_ew(dlg_handle *h, int dtype, int mode, const dlg_ew *e, void *const ptr[5], double lo,
                         double hi) {
  dlg_ptrs P;
  if (!dlg_ew_ptrs(e, ptr, &P)) return DLG_OK;
  unsigned g = dlg_blocks(h, e->n, 256);
  if (dtype == DLG_F32) DLG_LAUNCH(g, 256, 0, h->stream, dlg_clamp_k<float>)(mode, *e, P, (float)lo, (float)hi);
  else if (dtype == DLG_F64) DLG_LAUNCH(g, 256, 0, h->stream, dlg_clamp_k<double>)(mode, *e, P, lo, hi);
  else return dlg_fail(h, DLG_ERR, "dlg_clamp_ew: bad dtype %d", dtype);
  return dlg_launched(h, "dlg_clamp_ew");
}

extern "C" int dlg_where_ew(dlg_handle *h, int dtype, int mode, const dlg_ew *e, void *const ptr[5]) {
  dlg_ptrs P;
  if (!dlg_ew_ptrs(e, ptr, &P)) return DLG_OK;
  unsigned g = dlg_blocks(h, e->n, 256);
  if (dtype == DLG_F32) DLG_LAUNCH(g, 256, 0, h->stream, dlg_where_k<float>)(mode, *e, P);
  else if (dtype == DLG_F64) DLG_LAUNCH(g, 256, 0, h->stream, dlg_where_k<double>)(mode, *e, P);
  else return dlg_fail(h, DLG_ERR, "dlg_where_ew: bad dtype %d", dtype);
  return dlg_launched(h, "dlg_where_ew");
}
