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

#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dl/gpu/abi.h"

struct dlg_handle;
// One recorded call (graph.cu): issue(h, op) issues it on h->stream,
// counts it as what it is, and reports a failure as op's.
typedef std::function<int(dlg_handle *, const char *)> dlg_issue_fn;

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
  // CUDA graphs (graph.cu): the recording and the captured segments, and
  // its entry points (NULL until the first dlg_graph_begin, so that files
  // built without graph.cu, the host tests, link)
  void *blas_ws;    // cuBLAS's workspace, its default's size (graph.cu: dlg_blas_workspace), NULL: cuBLAS's own
  struct dlg_graphs *gr;
  int gr_rc;        // the failure of recorded work issued where no status could say it (sticky until reported)
  void (*gr_add)(dlg_handle *h, std::string &&key, dlg_issue_fn &&f);
  void (*gr_upload)(dlg_handle *h, void *dst, const void *src, size_t bytes);
  void (*gr_name)(dlg_handle *h, const char *op);
  int (*gr_flush)(dlg_handle *h);
};

// >>recording (graph.cu; see dlg_graph_begin in abi.h)
// The handle recording now in this thread, NULL when none: work queued on
// its stream is recorded instead of issued (one handle at a time; capture
// runs in the thread-local mode too).
inline thread_local dlg_handle *dlg_rec_h = nullptr;
inline dlg_handle *dlg_recording_on(cudaStream_t st) {
  return dlg_rec_h && dlg_rec_h->stream == st ? dlg_rec_h : nullptr;
}
// Issues what h recorded so far (a segment: replayed or captured), before a
// call that needs the device's results or runs at once. DLG_OK when h is
// not recording.
inline int dlg_graph_flush(dlg_handle *h) { return h->gr_flush ? h->gr_flush(h) : DLG_OK; }
// Recording paused in a scope, the recorded work flushed first (cuDNN's
// algorithm search times its candidates at once).
struct dlg_rec_pause {
  dlg_handle *saved;
  int rc;
  explicit dlg_rec_pause(dlg_handle *h) : saved(dlg_rec_h), rc(dlg_graph_flush(h)) { dlg_rec_h = nullptr; }
  ~dlg_rec_pause() { dlg_rec_h = saved; }
  dlg_rec_pause(const dlg_rec_pause &) = delete;
  dlg_rec_pause &operator=(const dlg_rec_pause &) = delete;
};
// A recorded call's key: the bytes that say what it does.
inline void dlg_key_put(std::string &k, const void *p, size_t n) { k.append((const char *)p, n); }
template <class V> inline void dlg_key_val(std::string &k, const V &v) { dlg_key_put(k, &v, sizeof v); }

// conv.cu: frees the convolution plans (dlg_destroy).
void dlg_conv_cache_free(dlg_handle *h);
// graph.cu: frees the CUDA graphs and their blocks (dlg_destroy).
void dlg_graph_free(dlg_handle *h);
// graph.cu: gives cuBLAS a workspace of its default's size (it allocates
// none while a stream captures), at dlg_create so that every GEMM, recorded
// or not, runs with the same one. DLG_OK or DLG_OOM.
int dlg_blas_workspace(dlg_handle *h);

// What a CUDA-status helper below returns when issuing the recorded work
// failed first: dlg_cuda then returns that failure's code (h->gr_rc) and
// keeps its message.
#define DLG_FLUSH_FAILED ((cudaError_t)9999)
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
  if (e == DLG_FLUSH_FAILED) {
    const int rc = h->gr_rc ? h->gr_rc : DLG_ERR;
    h->gr_rc = 0; // reported now
    return rc;
  }
  (void)cudaGetLastError(); // clear a sticky launch error so the next call reports its own
  return dlg_fail(h, e == cudaErrorMemoryAllocation ? DLG_OOM : DLG_ERR, "%s: CUDA error %d (%s)", op,
                  (int)e, cudaGetErrorString(e));
}
// After a kernel launch (every launch calls it once, so it counts them):
// reports a bad configuration or an earlier fault.
// While recording, the launch was recorded: it is counted, and its errors
// reported (as op's), when issued.
static inline int dlg_launched(dlg_handle *h, const char *op) {
  if (dlg_rec_h == h) {
    h->gr_name(h, op);
    return DLG_OK;
  }
  h->n.launches++;
  return dlg_cuda(h, cudaGetLastError(), op);
}
// The stream's queued work done (counted: a host synchronisation). What
// was recorded is issued first.
static inline cudaError_t dlg_stream_sync(dlg_handle *h) {
  if ((h->gr_rc = dlg_graph_flush(h)) != DLG_OK) return DLG_FLUSH_FAILED;
  h->n.syncs++;
  return cudaStreamSynchronize(h->stream);
}
// A copy recorded as it is (device to device, or device to page-locked
// host memory read after an event), issued in its place.
static inline void dlg_rec_copy(dlg_handle *h, void *dst, const void *src, size_t bytes, cudaMemcpyKind k) {
  std::string key("C", 1);
  dlg_key_val(key, dst);
  dlg_key_val(key, src);
  dlg_key_val(key, bytes);
  dlg_key_val(key, k);
  h->gr_add(h, std::move(key), [dst, src, bytes, k](dlg_handle *hh, const char *op) {
    hh->n.copies++;
    return dlg_cuda(hh, cudaMemcpyAsync(dst, src, bytes, k, hh->stream), op);
  });
}
// Queued copy / fill on the handle's stream (counted). While recording: a
// copy from the host is recorded with its bytes, a copy to the host flushes
// the recording and is issued at once (the host reads it next).
static inline cudaError_t dlg_memcpy_async(dlg_handle *h, void *dst, const void *src, size_t bytes,
                                           cudaMemcpyKind k) {
  if (dlg_rec_h == h && bytes) {
    if (k == cudaMemcpyHostToDevice) {
      h->gr_upload(h, dst, src, bytes);
      return cudaSuccess;
    }
    if (k == cudaMemcpyDeviceToDevice) {
      dlg_rec_copy(h, dst, src, bytes, k);
      return cudaSuccess;
    }
    if ((h->gr_rc = dlg_graph_flush(h)) != DLG_OK) return DLG_FLUSH_FAILED;
  }
  h->n.copies++;
  return cudaMemcpyAsync(dst, src, bytes, k, h->stream);
}
static inline cudaError_t dlg_memset_async(dlg_handle *h, void *p, int v, size_t bytes) {
  if (dlg_rec_h == h && bytes) {
    std::string key("S", 1);
    dlg_key_val(key, p);
    dlg_key_val(key, v);
    dlg_key_val(key, bytes);
    h->gr_add(h, std::move(key), [p, v, bytes](dlg_handle *hh, const char *op) {
      hh->n.memsets++;
      return dlg_cuda(hh, cudaMemsetAsync(p, v, bytes, hh->stream), op);
    });
    return cudaSuccess;
  }
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
// issues kernel<<<grid, block, shmem, stream>>>(args) under nvcc and a run
// on the host under DLG_FAKE (the kernel last: a template-id may hold
// commas), or records it, with its argument values, while the stream's
// handle records (dlg_graph_begin).
#ifdef DLG_FAKE
#define DLG_ISSUE(grid, block, shmem, stream, k) dlg_fake_launch(grid, block, shmem, stream, k)
#else
#define DLG_ISSUE(grid, block, shmem, stream, k) k<<<grid, block, shmem, stream>>>
#endif
template <class... P> struct dlg_launcher {
  typedef std::tuple<typename std::decay<P>::type...> Args;
  void (*k)(P...);
  dim3 grid, block;
  size_t shmem;
  cudaStream_t st;
  template <class... A> void operator()(A &&...a) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    Args args(std::forward<A>(a)...); // converted to the parameters' types once, as a launch does
    dlg_handle *h = dlg_recording_on(st);
    if (!h) {
      issue(k, grid, block, shmem, st, args);
      return;
    }
    std::string key("K", 1);
    dlg_key_val(key, k);
    dlg_key_val(key, grid);
    dlg_key_val(key, block);
    dlg_key_val(key, shmem);
    std::apply([&key](const auto &...x) { (dlg_key_val(key, x), ...); }, args);
    void (*kk)(P...) = k;
    const dim3 g = grid, b = block;
    const size_t sm = shmem;
    h->gr_add(h, std::move(key), [kk, g, b, sm, args](dlg_handle *hh, const char *op) {
      issue(kk, g, b, sm, hh->stream, args);
      hh->n.launches++;
      return dlg_cuda(hh, cudaGetLastError(), op);
    });
  }
  static void issue(void (*kf)(P...), dim3 g, dim3 b, size_t sm, cudaStream_t s, const Args &args) {
    std::apply([&](const auto &...x) { DLG_ISSUE(g, b, sm, s, kf)(x...); }, args);
  }
};
template <class... P>
inline dlg_launcher<P...> dlg_launch_rec(dim3 grid, dim3 block, size_t shmem, cudaStream_t st, void (*k)(P...)) {
  return dlg_launcher<P...>{k, grid, block, shmem, st};
}
#undef DLG_LAUNCH
#define DLG_LAUNCH(grid, block, shmem, stream, ...) dlg_launch_rec(grid, block, shmem, stream, __VA_ARGS__)

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
