// src_gpu/device.cu - the device handle, raw memory, copies, fills and
// cuBLAS GEMM behind dl/gpu/abi.h. Row-major GEMM is computed as the
// column-major product of the transposes: C^T = op(B)^T op(A)^T.
#include <stdlib.h>
#include <string.h>

#include "internal.h"

extern "C" int dlg_device_count(int *count, char *msg, size_t cap) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  *count = 0;
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(msg, cap, "no CUDA device: %s (error %d)", cudaGetErrorString(e), (int)e);
    return DLG_NODEV;
  }
  if (n == 0) {
    snprintf(msg, cap, "no CUDA device: the driver reports none");
    return DLG_NODEV;
  }
  *count = n;
  return DLG_OK;
}

extern "C" int dlg_create(dlg_handle **out, int device, char *msg, size_t cap) {
  int n = 0;
  dlg_handle *h;
  cudaError_t e;
  *out = NULL;
  if (dlg_device_count(&n, msg, cap) != DLG_OK) return DLG_NODEV;
  if (device < 0 || device >= n) {
    snprintf(msg, cap, "no CUDA device %d: this process sees %d", device, n);
    return DLG_NODEV;
  }
  h = (dlg_handle *)calloc(1, sizeof *h);
  if (!h) {
    snprintf(msg, cap, "out of host memory");
    return DLG_OOM;
  }
  h->device = device;
  if ((e = cudaSetDevice(device)) != cudaSuccess ||
      (e = cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking)) != cudaSuccess ||
      (e = cudaDeviceGetAttribute(&h->sm_count, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) {
    snprintf(msg, cap, "CUDA device %d: %s", device, cudaGetErrorString(e));
    (void)cudaGetLastError();
    if (h->stream) cudaStreamDestroy(h->stream);
    free(h);
    return DLG_NODEV;
  }
  cublasStatus_t bs = cublasCreate(&h->blas);
  if (bs != CUBLAS_STATUS_SUCCESS || cublasSetStream(h->blas, h->stream) != CUBLAS_STATUS_SUCCESS) {
    snprintf(msg, cap, "cuBLAS on device %d: %s", device, cublasGetStatusString(bs));
    if (bs == CUBLAS_STATUS_SUCCESS) cublasDestroy(h->blas);
    cudaStreamDestroy(h->stream);
    free(h);
    return DLG_ERR;
  }
  // GEMMs in f32 stay true f32 (no TF32): the tests compare with the CPU at 1e-5.
  cublasSetMathMode(h->blas, CUBLAS_DEFAULT_MATH);
  // A workspace of its own from the start (CUDA graphs need one), so that a
  // GEMM runs alike recorded or not; without the memory, cuBLAS's own (and
  // dlg_graph_begin tries again).
  (void)dlg_blas_workspace(h);
  h->msg[0] = 0;
  cudnnStatus_t ds = cudnnCreate(&h->dnn);
  if (ds != CUDNN_STATUS_SUCCESS || cudnnSetStream(h->dnn, h->stream) != CUDNN_STATUS_SUCCESS) {
    snprintf(msg, cap, "cuDNN on device %d: %s", device, cudnnGetErrorString(ds));
    if (ds == CUDNN_STATUS_SUCCESS) cudnnDestroy(h->dnn);
    cublasDestroy(h->blas);
    cudaStreamDestroy(h->stream);
    free(h);
    return DLG_ERR;
  }
  *out = h;
  return DLG_OK;
}

extern "C" void dlg_destroy(dlg_handle *h) {
  if (!h) return;
  dlg_graph_free(h);
  cudaStreamSynchronize(h->stream);
  dlg_conv_cache_free(h);
  if (h->blas_ws) {
    cublasSetWorkspace(h->blas, nullptr, 0);
    cudaFree(h->blas_ws);
  }
  if (h->ws) cudaFree(h->ws);
  cudnnDestroy(h->dnn);
  cublasDestroy(h->blas);
  cudaStreamDestroy(h->stream);
  free(h);
}

extern "C" const char *dlg_message(const dlg_handle *h) { return h ? h->msg : "no device"; }

extern "C" int dlg_device_name(dlg_handle *h, char *buf, size_t cap) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, h->device);
  if (e != cudaSuccess) return dlg_cuda(h, e, "dlg_device_name");
  snprintf(buf, cap, "%s (sm_%d%d)", p.name, p.major, p.minor);
  return DLG_OK;
}

extern "C" int dlg_malloc(dlg_handle *h, void **p, size_t bytes) {
  cudaError_t e = dlg_cuda_malloc(h, p, bytes);
  if (e != cudaSuccess) {
    *p = NULL;
    return dlg_cuda(h, e, "cudaMalloc");
  }
  return DLG_OK;
}

extern "C" int dlg_free(dlg_handle *h, void *p) {
  // cudaFree synchronises the device: the block's queued users are done.
  if (!p) return DLG_OK;
  const int rc = dlg_graph_flush(h); // recorded work may use the block
  h->n.frees++;
  const int frc = dlg_cuda(h, cudaFree(p), "cudaFree");
  return rc != DLG_OK ? rc : frc;
}

extern "C" int dlg_mem_info(dlg_handle *h, size_t *free_bytes, size_t *total_bytes) {
  return dlg_cuda(h, cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

extern "C" int dlg_copy(dlg_handle *h, void *dst, const void *src, size_t bytes, int kind) {
  cudaMemcpyKind k = kind == DLG_H2D ? cudaMemcpyHostToDevice : kind == DLG_D2H ? cudaMemcpyDeviceToHost
                                                                                 : cudaMemcpyDeviceToDevice;
  if (bytes == 0) return DLG_OK;
  int rc = dlg_cuda(h, dlg_memcpy_async(h, dst, src, bytes, k), "dlg_copy");
  // D2H: the host reads the bytes on return, so it waits. H2D: from pageable
  // host memory (malloc's) the call returns once the bytes are staged, so
  // the caller may reuse them without waiting; from page-locked memory the
  // copy runs later, and the host must not change them before: it waits.
  if (rc == DLG_OK && kind == DLG_D2H) rc = dlg_cuda(h, dlg_stream_sync(h), "dlg_copy");
  if (rc == DLG_OK && kind == DLG_H2D && dlg_rec_h != h) { // (recording: the bytes were copied already)
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, src) != cudaSuccess) {
      (void)cudaGetLastError();
      a.type = cudaMemoryTypeHost; // unknown: wait, to be safe
    }
    if (a.type != cudaMemoryTypeUnregistered) rc = dlg_cuda(h, dlg_stream_sync(h), "dlg_copy");
  }
  return rc;
}

extern "C" int dlg_host_alloc(dlg_handle *h, void **p, size_t bytes) {
  cudaError_t e = cudaMallocHost(p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    *p = NULL;
    return dlg_cuda(h, e, "cudaMallocHost");
  }
  return DLG_OK;
}
extern "C" void dlg_host_free(dlg_handle *h, void *p) {
  (void)h;
  if (p) cudaFreeHost(p);
}
extern "C" int dlg_copy_async(dlg_handle *h, void *dst, const void *src, size_t bytes, int kind) {
  cudaMemcpyKind k = kind == DLG_H2D ? cudaMemcpyHostToDevice : kind == DLG_D2H ? cudaMemcpyDeviceToHost
                                                                                 : cudaMemcpyDeviceToDevice;
  if (dlg_rec_h == h && bytes && kind == DLG_D2H) { // to page-locked memory, read after an event: recorded
    dlg_rec_copy(h, dst, src, bytes, k);
    h->gr_name(h, "dlg_copy_async");
    return DLG_OK;
  }
  return bytes ? dlg_cuda(h, dlg_memcpy_async(h, dst, src, bytes, k), "dlg_copy_async") : DLG_OK;
}
extern "C" int dlg_event_record(dlg_handle *h, void **ev) {
  cudaEvent_t e = (cudaEvent_t)*ev;
  const int rc = dlg_graph_flush(h); // the event marks the work queued so far
  if (rc != DLG_OK) return rc;
  if (!e) {
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (r != cudaSuccess) return dlg_cuda(h, r, "cudaEventCreate");
    *ev = (void *)e;
  }
  return dlg_cuda(h, cudaEventRecord(e, h->stream), "cudaEventRecord");
}
extern "C" int dlg_event_wait(dlg_handle *h, void *ev) {
  cudaError_t r = cudaEventQuery((cudaEvent_t)ev);
  if (r == cudaSuccess) return DLG_OK;
  if (r != cudaErrorNotReady) return dlg_cuda(h, r, "cudaEventQuery");
  (void)cudaGetLastError(); // cudaErrorNotReady is not an error
  h->n.syncs++;
  return dlg_cuda(h, cudaEventSynchronize((cudaEvent_t)ev), "cudaEventSynchronize");
}
extern "C" void dlg_event_free(dlg_handle *h, void *ev) {
  (void)h;
  if (ev) cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" void dlg_counters(const dlg_handle *h, dlg_counts *c) {
  if (h) *c = h->n;
  else memset(c, 0, sizeof *c);
}
extern "C" void dlg_set_deterministic(dlg_handle *h, int on) { h->deterministic = on != 0; }
extern "C" int dlg_deterministic(const dlg_handle *h) { return h->deterministic; }

extern "C" int dlg_memset0(dlg_handle *h, void *p, size_t bytes) {
  return bytes ? dlg_cuda(h, dlg_memset_async(h, p, 0, bytes), "dlg_memset0") : DLG_OK;
}

extern "C" int dlg_sync(dlg_handle *h) { return dlg_cuda(h, dlg_stream_sync(h), "dlg_sync"); }

template <typename T> __global__ void dlg_fill_k(T *y, int64_t n, T v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = v;
}

extern "C" int dlg_fill(dlg_handle *h, int dtype, void *y, int64_t n, double v) {
  if (n <= 0) return DLG_OK;
  unsigned g = dlg_blocks(h, n, 256);
  switch (dtype) {
    case DLG_F32: DLG_LAUNCH(g, 256, 0, h->stream, dlg_fill_k<float>)((float *)y, n, (float)v); break;
    case DLG_F64: DLG_LAUNCH(g, 256, 0, h->stream, dlg_fill_k<double>)((double *)y, n, v); break;
    case DLG_I32: DLG_LAUNCH(g, 256, 0, h->stream, dlg_fill_k<int32_t>)((int32_t *)y, n, (int32_t)v); break;
    case DLG_I64: DLG_LAUNCH(g, 256, 0, h->stream, dlg_fill_k<int64_t>)((int64_t *)y, n, (int64_t)v); break;
    default: return dlg_fail(h, DLG_ERR, "dlg_fill: bad dtype %d", dtype);
  }
  return dlg_launched(h, "dlg_fill");
}

struct dlg_strided {
  int ndim;
  int64_t shape[DLG_MAXD], strides[DLG_MAXD];
};

template <typename T> __global__ void dlg_gather_k(T *y, const T *x, int64_t n, dlg_strided s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, off = 0;
    for (int d = s.ndim - 1; d >= 0; d--) {
      off += (r % s.shape[d]) * s.strides[d];
      r /= s.shape[d];
    }
    y[i] = x[off];
  }
}

extern "C" int dlg_copy_strided(dlg_handle *h, int elem_size, void *y, const void *x, int ndim,
                                const int64_t *shape, const int64_t *strides) {
  dlg_strided s;
  int64_t n = 1;
  if (ndim < 0 || ndim > DLG_MAXD) return dlg_fail(h, DLG_ERR, "dlg_copy_strided: %d dimensions", ndim);
  s.ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    s.shape[d] = shape[d];
    s.strides[d] = strides[d];
    n *= shape[d];
  }
  if (n == 0) return DLG_OK;
  unsigned g = dlg_blocks(h, n, 256);
  switch (elem_size) {
    case 1: DLG_LAUNCH(g, 256, 0, h->stream, dlg_gather_k<uint8_t>)((uint8_t *)y, (const uint8_t *)x, n, s); break;
    case 2: DLG_LAUNCH(g, 256, 0, h->stream, dlg_gather_k<uint16_t>)((uint16_t *)y, (const uint16_t *)x, n, s); break;
    case 4: DLG_LAUNCH(g, 256, 0, h->stream, dlg_gather_k<uint32_t>)((uint32_t *)y, (const uint32_t *)x, n, s); break;
    case 8: DLG_LAUNCH(g, 256, 0, h->stream, dlg_gather_k<uint64_t>)((uint64_t *)y, (const uint64_t *)x, n, s); break;
    default: return dlg_fail(h, DLG_ERR, "dlg_copy_strided: element size %d", elem_size);
  }
  return dlg_launched(h, "dlg_copy_strided");
}

// cuBLAS takes int sizes: larger problems are refused, not truncated.
static int dlg_int_ok(dlg_handle *h, const char *op, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e,
                      int64_t f) {
  const int64_t lim = 2147483647;
  if (a > lim || b > lim || c > lim || d > lim || e > lim || f > lim)
    return dlg_fail(h, DLG_ERR, "%s: a size or leading dimension is past 2^31-1", op);
  return DLG_OK;
}

extern "C" int dlg_gemm_batched(dlg_handle *h, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k,
                                double alpha, const void *A, int64_t lda, int64_t sa, const void *B,
                                int64_t ldb, int64_t sb, double beta, void *C, int64_t ldc, int64_t sc,
                                int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return DLG_OK;
  int rc = dlg_int_ok(h, "dlg_gemm", m, n, k, lda, ldb, ldc);
  if (rc != DLG_OK) return rc;
  if (batch > 2147483647) return dlg_fail(h, DLG_ERR, "dlg_gemm: batch past 2^31-1");
  // Row-major C (m x n) is column-major C^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m):
  // cuBLAS gets B first with tb, then A with ta, and the sizes n, m, k.
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (k == 0) { // C = beta * C: cuBLAS with k = 0 does that too, but lda/ldb checks may refuse it
    if (beta == 0) {
      for (int64_t b = 0; b < batch; b++)
        for (int64_t r = 0; r < m; r++) {
          size_t es = dtype == DLG_F32 ? 4 : 8;
          rc = dlg_cuda(h, dlg_memset_async(h, (char *)C + (size_t)(b * sc + r * ldc) * es, 0, (size_t)n * es),
                        "dlg_gemm");
          if (rc != DLG_OK) return rc;
        }
      return DLG_OK;
    }
  }
  if (dtype != DLG_F32 && dtype != DLG_F64) return dlg_fail(h, DLG_ERR, "dlg_gemm: bad dtype %d", dtype);
  const int im = (int)m, in = (int)n, ik = (int)k, ilda = (int)lda, ildb = (int)ldb, ildc = (int)ldc, ib = (int)batch;
  auto call = [=](dlg_handle *hh, const char *) -> int {
    hh->n.blas++;
    if (dtype == DLG_F32) {
      const float al = (float)alpha, be = (float)beta;
      if (ib == 1)
        return dlg_blas(hh, cublasSgemm(hh->blas, ob, oa, in, im, ik, &al, (const float *)B, ildb, (const float *)A,
                                        ilda, &be, (float *)C, ildc),
                        "cublasSgemm");
      return dlg_blas(hh, cublasSgemmStridedBatched(hh->blas, ob, oa, in, im, ik, &al, (const float *)B, ildb, sb,
                                                    (const float *)A, ilda, sa, &be, (float *)C, ildc, sc, ib),
                      "cublasSgemmStridedBatched");
    }
    if (ib == 1)
      return dlg_blas(hh, cublasDgemm(hh->blas, ob, oa, in, im, ik, &alpha, (const double *)B, ildb, (const double *)A,
                                      ilda, &beta, (double *)C, ildc),
                      "cublasDgemm");
    return dlg_blas(hh, cublasDgemmStridedBatched(hh->blas, ob, oa, in, im, ik, &alpha, (const double *)B, ildb, sb,
                                                  (const double *)A, ilda, sa, &beta, (double *)C, ildc, sc, ib),
                    "cublasDgemmStridedBatched");
  };
  if (dlg_rec_h == h) {
    std::string key("G", 1);
    const int64_t v[] = {dtype, ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, batch};
    const void *ptr[] = {A, B, C};
    const double ab[] = {alpha, beta};
    dlg_key_val(key, v);
    dlg_key_val(key, ptr);
    dlg_key_val(key, ab);
    h->gr_add(h, std::move(key), call);
    return DLG_OK;
  }
  return call(h, "dlg_gemm");
}

extern "C" int dlg_gemm(dlg_handle *h, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                        const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
  return dlg_gemm_batched(h, dtype, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

// The raw stream, for a caller that queues its own work (a user's kernel):
// what was recorded is issued first, so that work comes after it.
extern "C" void *dlg_stream(dlg_handle *h) {
  const int rc = dlg_graph_flush(h);
  if (rc != DLG_OK) h->gr_rc = rc; // kept: the caller's launch status reports it
  return (void *)h->stream;
}
extern "C" int dlg_sm_count(dlg_handle *h) { return h->sm_count; }
// A user's kernel, launched on dlg_stream's stream (never recorded).
extern "C" int dlg_launch_status(dlg_handle *h, const char *op) {
  h->n.launches++;
  if (h->gr_rc != DLG_OK) return dlg_cuda(h, DLG_FLUSH_FAILED, op); // dlg_stream's flush failed
  return dlg_cuda(h, cudaGetLastError(), op);
}
extern "C" int dlg_launch_user(dlg_handle *h, int (*run)(const void *args, void *stream), const void *args,
                               size_t bytes, const char *op) {
  if (dlg_rec_h == h) {
    std::string key("E", 1), blob((const char *)args, bytes);
    dlg_key_val(key, run);
    key += blob;
    h->gr_add(h, std::move(key), [run, blob](dlg_handle *hh, const char *o) {
      run(blob.data(), (void *)hh->stream);
      hh->n.launches++;
      return dlg_cuda(hh, cudaGetLastError(), o);
    });
    h->gr_name(h, op);
    return DLG_OK;
  }
  run(args, (void *)h->stream);
  h->n.launches++;
  if (h->gr_rc != DLG_OK) return dlg_cuda(h, DLG_FLUSH_FAILED, op);
  return dlg_cuda(h, cudaGetLastError(), op);
}
extern "C" int dlg_error(dlg_handle *h, const char *op, const char *what) {
  return dlg_fail(h, DLG_ERR, "%s: %s", op, what);
}

struct dlg_move_desc {
  int ndim;
  int64_t shape[DLG_MAXD], ys[DLG_MAXD], xs[DLG_MAXD];
};

template <typename T, int ADD> __global__ void dlg_move_k(T *y, const T *x, int64_t n, dlg_move_desc m) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, oy = 0, ox = 0;
    for (int d = m.ndim - 1; d >= 0; d--) {
      int64_t id = r % m.shape[d];
      r /= m.shape[d];
      oy += id * m.ys[d];
      ox += id * m.xs[d];
    }
    if (ADD) y[oy] += x[ox];
    else y[oy] = x[ox];
  }
}

extern "C" int dlg_move(dlg_handle *h, int dtype, int elem_size, int add, int ndim, const int64_t *shape, void *y,
                        const int64_t *ystrides, const void *x, const int64_t *xstrides) {
  dlg_move_desc m;
  int64_t n = 1;
  if (ndim < 0 || ndim > DLG_MAXD) return dlg_fail(h, DLG_ERR, "dlg_move: %d dimensions", ndim);
  m.ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    m.shape[d] = shape[d];
    m.ys[d] = ystrides[d];
    m.xs[d] = xstrides[d];
    n *= shape[d];
  }
  if (n == 0) return DLG_OK;
  unsigned g = dlg_blocks(h, n, 256);
  if (add) {
    if (dtype == DLG_F32) DLG_LAUNCH(g, 256, 0, h->stream, dlg_move_k<float, 1>)((float *)y, (const float *)x, n, m);
    else if (dtype == DLG_F64) DLG_LAUNCH(g, 256, 0, h->stream, dlg_move_k<double, 1>)((double *)y, (const double *)x, n, m);
    else return dlg_fail(h, DLG_ERR, "dlg_move: adding needs f32 or f64");
  } else {
    switch (elem_size) {
      case 1: DLG_LAUNCH(g, 256, 0, h->stream, dlg_move_k<uint8_t, 0>)((uint8_t *)y, (const uint8_t *)x, n, m); break;
      case 2: DLG_LAUNCH(g, 256, 0, h->stream, dlg_move_k<uint16_t, 0>)((uint16_t *)y, (const uint16_t *)x, n, m); break;
      case 4: DLG_LAUNCH(g, 256, 0, h->stream, dlg_move_k<uint32_t, 0>)((uint32_t *)y, (const uint32_t *)x, n, m); break;
      case 8: DLG_LAUNCH(g, 256, 0, h->stream, dlg_move_k<uint64_t, 0>)((uint64_t *)y, (const uint64_t *)x, n, m); break;
      default: return dlg_fail(h, DLG_ERR, "dlg_move: element size %d", elem_size);
    }
  }
  return dlg_launched(h, "dlg_move");
}

__global__ void dlg_add_i64_k(int64_t *p, int64_t d) { *p += d; }

extern "C" int dlg_add_i64(dlg_handle *h, int64_t *p, int64_t delta) {
  DLG_LAUNCH(1, 1, 0, h->stream, dlg_add_i64_k)(p, delta);
  return dlg_launched(h, "dlg_add_i64");
}
