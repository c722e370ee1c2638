// dl/gpu/ew.cuh - CUDA kernels for element-wise ops, generated from the
// same one-line definitions as the CPU loops (expr.h's op list and a
// user's DL_DEFINE_OP lines). Compiled by nvcc only: src_gpu/core.cu
// instantiates the library's list; a user op gets its kernels from the same
// text in a .cu file of the program:
//
//   // my_ops.cu  (nvcc -Iinclude -c my_ops.cu)
//   #include "dl/gpu/ew.cuh"
//   DL_GPU_DEFINE_OP1(my_leaky, dl_max(dl_mul(0.2, x0), x0))
//
// with the C file keeping its DL_DEFINE_OP1(my_leaky, ...) line (one shared
// header holding the expression as a macro keeps the two copies one text).
// Link my_ops.o itself, not an archive holding it: the C side refers to the
// launcher weakly (so that a program without it links and panics with a
// message), and a linker does not take an archive member for a weak
// reference.
// Each definition gives the launcher `name__gpu` (dl/gpu/abi.h's dlg_ew_fn),
// which the C side finds by name when the op's tensors are on the GPU:
// forward y = f(x), backward gx += gy * f'(x) and forward mode
// ty = f'(x) tx, the derivatives by evaluating the expression on dual
// numbers, exactly as on the CPU.
#ifndef DL_GPU_EW_CUH
#define DL_GPU_EW_CUH

#include "../../dl.h"
#include "abi.h"

// The launch (the same macro as src_gpu/internal.h's): DLG_LAUNCH(grid,
// block, shmem, stream, kernel)(args) is kernel<<<grid, block, shmem,
// stream>>>(args) under nvcc; under DLG_FAKE (tests only: built with -Isrc_gpu, see
// src_gpu/fake/cuda_fake.h) a run on the host.
#ifdef DLG_FAKE
#include "fake/cuda_fake.h"
#endif
#ifndef DLG_LAUNCH
#define DLG_LAUNCH(grid, block, shmem, stream, ...) __VA_ARGS__<<<grid, block, shmem, stream>>>
#endif

template <typename T> struct dlg__dual_of;
template <> struct dlg__dual_of<float> {
  typedef dl_dual type;
  __host__ __device__ static dl_dual make(float v, float d) { return dl_dual_make(v, d); }
};
template <> struct dlg__dual_of<double> {
  typedef dl_dual64 type;
  __device__ static dl_dual64 make(double v, double d) { return dl_dual64_make(v, d); }
};

struct dlg__ptrs {
  void *p[5];
};

// gx[o] += v; atomically when several threads may add into one element.
template <typename T> __device__ inline void dlg__acc(T *g, T v, int atomic) {
  if (atomic) atomicAdd(g, v);
  else *g += v;
}

// One thread per element of the walked shape (grid-stride); Op::f is the
// op's expression over any scalar type S (float, double, dl_dual, dl_dual64).
template <typename T, int NIN, class Op>
__global__ void dlg__ew_kernel(int mode, dlg_ew e, dlg__ptrs P, T p0) {
  typedef dlg__dual_of<T> DD;
  const T *x0 = (const T *)P.p[1], *x1 = (const T *)P.p[2];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < e.n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t o[5] = {i, i, i, i, i};
    if (!e.contig) {
      int64_t r = i;
      o[0] = o[1] = o[2] = o[3] = o[4] = 0;
      for (int d = e.ndim - 1; d >= 0; d--) {
        int64_t id = r % e.shape[d];
        r /= e.shape[d];
        for (int k = 0; k < 5; k++) o[k] += id * e.st[k][d];
      }
    }
    T a = x0[o[1]], b = NIN == 2 ? x1[o[2]] : T(0);
    if (mode == DLG_FWD) {
      ((T *)P.p[0])[o[0]] = (T)Op::f(a, b, p0);
    } else if (mode == DLG_JVP) {
      const T *t0 = (const T *)P.p[3], *t1 = (const T *)P.p[4];
      ((T *)P.p[0])[o[0]] = Op::f(DD::make(a, t0 ? t0[o[3]] : T(0)), DD::make(b, t1 ? t1[o[4]] : T(0)), p0).d;
    } else {
      T gy = ((const T *)P.p[0])[o[0]];
      if (P.p[3]) dlg__acc(&((T *)P.p[3])[o[3]], gy * Op::f(DD::make(a, T(1)), DD::make(b, T(0)), p0).d, e.atomic);
      if (NIN == 2 && P.p[4])
        dlg__acc(&((T *)P.p[4])[o[4]], gy * Op::f(DD::make(a, T(0)), DD::make(b, T(1)), p0).d, e.atomic);
    }
  }
}

// One launch's arguments, as bytes (dlg_launch_user copies them while the
// handle records a graph; zeroed first, so that padding compares equal).
struct dlg__ew_args {
  dlg_ew e;
  dlg__ptrs P;
  double p0;
  int dtype, mode;
  unsigned grid;
};
template <class Op, int NIN> static int dlg__ew_run(const void *args, void *stream) {
  const dlg__ew_args *a = (const dlg__ew_args *)args;
  cudaStream_t s = (cudaStream_t)stream;
  if (a->dtype == DLG_F32) DLG_LAUNCH(a->grid, 256, 0, s, dlg__ew_kernel<float, NIN, Op>)(a->mode, a->e, a->P, (float)a->p0);
  else DLG_LAUNCH(a->grid, 256, 0, s, dlg__ew_kernel<double, NIN, Op>)(a->mode, a->e, a->P, a->p0);
  return 0;
}
template <class Op, int NIN>
static int dlg__ew_launch(dlg_handle *h, int dtype, int mode, const dlg_ew *e, void *const ptr[5], double p0,
                          const char *name) {
  dlg__ew_args a;
  if (e->n <= 0) return DLG_OK;
  if (dtype != DLG_F32 && dtype != DLG_F64) return dlg_error(h, name, "only f32 and f64 tensors");
  memset(&a, 0, sizeof a);
  memcpy(&a.e, e, sizeof a.e);
  for (int k = 0; k < 5; k++) a.P.p[k] = ptr[k];
  int64_t blocks = (e->n + 255) / 256, cap = (int64_t)(dlg_sm_count(h) > 0 ? dlg_sm_count(h) : 80) * 32;
  a.grid = (unsigned)(blocks < cap ? blocks : cap);
  a.p0 = p0;
  a.dtype = dtype;
  a.mode = mode;
  return dlg_launch_user(h, dlg__ew_run<Op, NIN>, &a, sizeof a, name);
}

// One op: the expression in x0 (x1 for two inputs, p0 for a number
// parameter) over generic scalar math, as in the C definition.
#define DL_GPU__OP(FAM, NIN, expr)                                                                     \
  struct FAM##__gpu_op {                                                                               \
    template <typename S, typename P> __host__ __device__ static S f(S x0, S x1, P p0) {                        \
      (void)x1;                                                                                        \
      (void)p0;                                                                                        \
      return (expr);                                                                                   \
    }                                                                                                  \
  };                                                                                                   \
  extern "C" int FAM##__gpu(dlg_handle *h, int dtype, int mode, const dlg_ew *e, void *const ptr[5],   \
                            double p0) {                                                               \
    return dlg__ew_launch<FAM##__gpu_op, NIN>(h, dtype, mode, e, ptr, p0, #FAM);                       \
  }
#define DL_GPU_DEFINE_OP1(name, expr) DL_GPU__OP(name, 1, expr)
#define DL_GPU_DEFINE_OP1P(name, expr) DL_GPU__OP(name, 1, expr)
#define DL_GPU_DEFINE_OP2(name, expr) DL_GPU__OP(name, 2, expr)

#endif
