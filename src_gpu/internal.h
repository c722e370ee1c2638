// src_gpu/internal.h - what the .cu files of src_gpu/ share: the handle's
// layout, error reporting into it, the workspace and launch helpers. Not
// installed with the headers; only src_gpu/ includes it.
#ifndef DLG_INTERNAL_H
#define DLG_INTERNAL_H

#ifdef DLG_FAKE // the fake device on the host (make gpu-fake; see fake/cuda_fake.h)
#include "fake/cuda_fake.h"
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#endif
#include <stdarg.h>
#include <stdio.h>

#include "dl/gpu/abi.h"

struct dlg_handle {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  cudnnHandle_t dnn;
  void *ws;         // workspace for cuDNN / reductions (device), grown by dlg_ws
  size_t ws_bytes;
  int sm_count;     // multiprocessors, for grid sizes
  int deterministic; // dlg_set_deterministic: convolution algorithms as chosen before (see conv.cu)
  struct dlg_conv_cache *conv; // convolution plans per shape (conv.cu; NULL until the first)
  dlg_counts n;     // what this handle asked of the device (dlg_counters)
  char msg[512];    // last failure
};
// conv.cu: frees the convolution plans (dlg_destroy).
void dlg_conv_cache_free(dlg_handle *h);

// Records a failure: "op: text" into h->msg; returns code.
static inline int dlg_fail(dlg_handle *h, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->msg, sizeof h->msg, fmt, ap);
  va_end(ap);
  return code;
}
// A CUDA runtime status as a dlg code (cudaErrorMemoryAllocation -> DLG_OOM).
static inline int dlg_cuda(dlg_handle *h, cudaError_t e, const char *op) {
  if (e == cudaSuccess) return DLG_OK;
  (void)cudaGetLastError(); // clear a sticky launch error so the next call reports its own
  return dlg_fail(h, e == cudaErrorMemoryAllocation ? DLG_OOM : DLG_ERR, "%s: CUDA error %d (%s)", op,
                  (int)e, cudaGetErrorString(e));
}
// After a kernel launch (every launch calls it once, so it counts them):
// reports a bad configuration or an earlier fault.
static inline int dlg_launched(dlg_handle *h, const char *op) {
  h->n.launches++;
  return dlg_cuda(h, cudaGetLastError(), op);
}
// The stream's queued work done (counted: a host synchronisation).
static inline cudaError_t dlg_stream_sync(dlg_handle *h) {
  h->n.syncs++;
  return cudaStreamSynchronize(h->stream);
}
// Queued copy / fill on the handle's stream (counted).
static inline cudaError_t dlg_memcpy_async(dlg_handle *h, void *dst, const void *src, size_t bytes,
                                           cudaMemcpyKind k) {
  h->n.copies++;
  return cudaMemcpyAsync(dst, src, bytes, k, h->stream);
}
static inline cudaError_t dlg_memset_async(dlg_handle *h, void *p, int v, size_t bytes) {
  h->n.memsets++;
  return cudaMemsetAsync(p, v, bytes, h->stream);
}
// cudaMalloc, counted.
static inline cudaError_t dlg_cuda_malloc(dlg_handle *h, void **p, size_t bytes) {
  h->n.mallocs++;
  return cudaMalloc(p, bytes);
}
static inline int dlg_blas(dlg_handle *h, cublasStatus_t s, const char *op) {
  if (s == CUBLAS_STATUS_SUCCESS) return DLG_OK;
  return dlg_fail(h, s == CUBLAS_STATUS_ALLOC_FAILED ? DLG_OOM : DLG_ERR, "%s: cuBLAS error %d (%s)", op, (int)s,
                  cublasGetStatusString(s));
}
static inline int dlg_dnn(dlg_handle *h, cudnnStatus_t s, const char *op) {
  if (s == CUDNN_STATUS_SUCCESS) return DLG_OK;
  return dlg_fail(h, s == CUDNN_STATUS_ALLOC_FAILED ? DLG_OOM : DLG_ERR, "%s: cuDNN error %d (%s)", op, (int)s,
                  cudnnGetErrorString(s));
}
// At least `bytes` of device workspace in h->ws (kept and reused; grows only).
static inline int dlg_ws(dlg_handle *h, size_t bytes) {
  if (bytes <= h->ws_bytes) return DLG_OK;
  if (h->ws) {
    cudaError_t e = dlg_stream_sync(h); // the old workspace may still be in use
    if (e != cudaSuccess) return dlg_cuda(h, e, "dlg_ws");
    cudaFree(h->ws);
    h->ws = NULL;
    h->ws_bytes = 0;
  }
  if (dlg_cuda_malloc(h, &h->ws, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    h->ws = NULL;
    return dlg_fail(h, DLG_OOM, "workspace: out of device memory allocating %zu bytes", bytes);
  }
  h->ws_bytes = bytes;
  return DLG_OK;
}

// Every launch: DLG_LAUNCH(grid, block, shmem, stream, kernel)(args), which
// is kernel<<<grid, block, shmem, stream>>>(args) under nvcc and a run on
// the host under DLG_FAKE (the kernel last: a template-id may hold commas).
#ifndef DLG_LAUNCH
#define DLG_LAUNCH(grid, block, shmem, stream, ...) __VA_ARGS__<<<grid, block, shmem, stream>>>
#endif

// Grid for a grid-stride loop over n items with `threads` per block.
static inline unsigned dlg_blocks(const dlg_handle *h, int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads, cap = (int64_t)(h->sm_count > 0 ? h->sm_count : 80) * 32;
  if (b < 1) b = 1;
  return (unsigned)(b < cap ? b : cap);
}

// Element offsets of the five slots of an element-wise walk at index i (see dlg_ew in abi.h).
__device__ inline void dlg_ew_offsets(const dlg_ew &e, int64_t i, int64_t o[5]) {
  if (e.contig) {
    o[0] = o[1] = o[2] = o[3] = o[4] = i;
    return;
  }
  o[0] = o[1] = o[2] = o[3] = o[4] = 0;
  for (int d = e.ndim - 1; d >= 0; d--) {
    int64_t id = i % e.shape[d];
    i /= e.shape[d];
    for (int k = 0; k < 5; k++) o[k] += id * e.st[k][d];
  }
}
template <typename T> __device__ inline void dlg_add_to(T *g, T v, int atomic) {
  if (atomic) atomicAdd(g, v);
  else *g += v;
}
struct dlg_ptrs {
  void *p[5];
};

#endif
