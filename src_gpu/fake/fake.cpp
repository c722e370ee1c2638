// src_gpu/fake/fake.cpp - the fake CUDA device of cuda_fake.h (read its top
// comment first): protected device memory, the launcher (blocks in turn,
// threads as fibers), the runtime calls, cuBLAS GEMM and cuDNN convolution
// as host loops. Compiled only into build/libdlgpu_fake.a (make gpu-fake).
#include "cuda_fake.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <map>
#include <set>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

[[noreturn]] void die(const char *fmt, const char *a = "", const void *p = nullptr, long long v = 0) {
  fprintf(stderr, "DLG_FAKE: ");
  fprintf(stderr, fmt, a, p, v);
  fprintf(stderr, "\n");
  fflush(stderr);
  abort();
}

size_t page() {
  static size_t p = (size_t)sysconf(_SC_PAGESIZE);
  return p;
}
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t env_size(const char *name, size_t dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  double v = strtod(s, &end);
  if (*end == 'k' || *end == 'K') v *= 1024.0;
  else if (*end == 'm' || *end == 'M') v *= 1024.0 * 1024;
  else if (*end == 'g' || *end == 'G') v *= 1024.0 * 1024 * 1024;
  return v > 0 ? (size_t)v : 0;
}

// ------------------------------------------------------------ device memory

// A cudaMalloc block: `bytes` at `user`, which ends `acc` bytes of readable
// (while a device call runs) pages at `map`, followed by a guard page.
struct Block {
  char *map;
  size_t acc, bytes;
};
std::map<uintptr_t, Block> g_blocks; // by user address
size_t g_used;
int g_open; // device calls running (nesting)
cudaError_t g_last = cudaSuccess;

size_t budget() {
  static size_t b = env_size("DLG_FAKE_MEM", (size_t)4 << 30);
  return b;
}

void protect_all(int prot) {
  for (auto &kv : g_blocks)
    if (mprotect(kv.second.map, kv.second.acc, prot) != 0) die("mprotect failed%s", "");
}
// Device memory is readable and writable from open() to close(): while a
// fake kernel, copy, memset, cuBLAS or cuDNN call runs.
void open_dev() {
  if (g_open++ == 0) protect_all(PROT_READ | PROT_WRITE);
}
void close_dev() {
  if (--g_open == 0) protect_all(PROT_NONE);
}
struct DevSection {
  DevSection() { open_dev(); }
  ~DevSection() { close_dev(); }
  DevSection(const DevSection &) = delete;
  DevSection &operator=(const DevSection &) = delete;
};

// The block holding [p, p + bytes) (bytes == 0: p may be its end), or null.
const Block *find(const void *p, size_t bytes) {
  const uintptr_t a = (uintptr_t)p;
  auto it = g_blocks.upper_bound(a);
  if (it == g_blocks.begin()) return nullptr;
  --it;
  if (a < it->first || a + bytes > it->first + it->second.bytes || (bytes == 0 && a > it->first + it->second.bytes))
    return nullptr;
  return &it->second;
}
void need_dev(const char *what, const void *p, size_t bytes) {
  if (bytes == 0) return;
  if (!find(p, bytes)) {
    fprintf(stderr, "DLG_FAKE: %s: [%p, +%zu bytes) is not inside one live device allocation\n", what, p, bytes);
    fflush(stderr);
    abort();
  }
}
void need_host(const char *what, const void *p, size_t bytes) {
  if (bytes && find(p, 0)) die("%s: a device pointer %p where host memory is expected", what, p);
}

cudaError_t fail(cudaError_t e) {
  g_last = e;
  return e;
}

// Reports device memory still allocated at exit (a leak of the caller's).
struct LeakCheck {
  ~LeakCheck() {
    if (!g_blocks.empty() && getenv("DLG_FAKE_LEAKS"))
      fprintf(stderr, "DLG_FAKE: %zu device allocations (%zu bytes) never freed\n", g_blocks.size(), g_used);
  }
} g_leak_check;

// ------------------------------------------------------------ fibers

constexpr size_t kStack = 256 << 10;
struct Fiber {
  ucontext_t uc;
  char *stack;
  bool done, synced;
};
std::vector<Fiber> g_fib;
ucontext_t g_sched;
int g_cur = -1;          // the running fiber; -1: a thread run as a plain call
bool g_in_kernel;
void (*g_fn)(void *);
void *g_ctx;
const void *g_kernel; // the running kernel, for messages

void fiber_main() {
  g_fn(g_ctx);
  g_fib[g_cur].done = true; // returns to uc_link (the scheduler)
}
void fiber_start(int t) {
  Fiber &f = g_fib[t];
  if (!f.stack) {
    char *m = (char *)mmap(nullptr, kStack + page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) die("no memory for a fiber stack%s", "");
    mprotect(m, page(), PROT_NONE); // guard below the stack
    f.stack = m;
  }
  if (getcontext(&f.uc) != 0) die("getcontext failed%s", "");
  f.uc.uc_stack.ss_sp = f.stack + page();
  f.uc.uc_stack.ss_size = kStack;
  f.uc.uc_link = &g_sched;
  makecontext(&f.uc, fiber_main, 0);
  f.done = f.synced = false;
}
void set_thread(int t) {
  threadIdx.x = (unsigned)t % blockDim.x;
  threadIdx.y = ((unsigned)t / blockDim.x) % blockDim.y;
  threadIdx.z = (unsigned)t / (blockDim.x * blockDim.y);
}
void fiber_run(int t) {
  g_cur = t;
  set_thread(t);
  if (swapcontext(&g_sched, &g_fib[t].uc) != 0) die("swapcontext failed%s", "");
  g_cur = -1;
}

} // namespace

void __syncthreads() {
  if (!g_in_kernel) die("__syncthreads outside a kernel%s", "");
  if (g_cur < 0)
    die("kernel %s%p called __syncthreads though its first thread did not (the fake ran it without fibers)", "",
        g_kernel);
  g_fib[g_cur].synced = true;
  if (swapcontext(&g_fib[g_cur].uc, &g_sched) != 0) die("swapcontext failed%s", "");
}

bool dlg_fake_is_device(const void *p, size_t bytes) { return find(p, bytes) != nullptr; }

void dlg_fake_bad_arg(const void *kernel, int arg, const void *p) {
  fprintf(stderr, "DLG_FAKE: kernel %p launched with argument %d = %p, which is not device memory\n", kernel, arg,
          p);
  fflush(stderr);
  abort();
}

void dlg_fake_run(const void *kernel, dim3 grid, dim3 block, size_t shmem, cudaStream_t st, void (*fn)(void *),
                  void *ctx) {
  (void)st;
  const unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
  if (g_in_kernel) die("a kernel launched from a kernel%s", "");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535 ||
      nt == 0 || nt > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || shmem > 48 * 1024) {
    g_last = cudaErrorInvalidConfiguration;
    return;
  }
  if (g_fib.empty()) g_fib.resize(1024, Fiber{});
  DevSection dev;
  g_in_kernel = true;
  gridDim = grid;
  blockDim = block;
  g_fn = fn;
  g_ctx = ctx;
  g_kernel = kernel;
  bool known = false, fibers = false;
  for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
      for (unsigned bx = 0; bx < grid.x; bx++) {
        blockIdx.x = bx;
        blockIdx.y = by;
        blockIdx.z = bz;
        int start = 0;
        if (!known) { // thread 0 of the first block on a fiber: does this kernel synchronise?
          fiber_start(0);
          fiber_run(0);
          known = true;
          fibers = !(g_fib[0].done && !g_fib[0].synced);
          start = 1;
        }
        if (!fibers) {
          for (int t = start; t < (int)nt; t++) {
            set_thread(t);
            fn(ctx);
          }
          continue;
        }
        for (int t = start; t < (int)nt; t++) fiber_start(t);
        for (int t = start; t < (int)nt && start > 0; t++) fiber_run(t); // catch up with thread 0 (at its barrier)
        for (int live = 1; live;) { // rounds: every live thread runs to its next barrier
          live = 0;
          for (int t = 0; t < (int)nt; t++)
            if (!g_fib[t].done) {
              fiber_run(t);
              live += !g_fib[t].done;
            }
        }
      }
  g_in_kernel = false;
}

// ------------------------------------------------------------ runtime API

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "fake CUDA device (host)");
  p->totalGlobalMem = budget();
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = (int)env_size("DLG_FAKE_SMS", 2);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  if (attr != cudaDevAttrMultiProcessorCount) return fail(cudaErrorInvalidValue);
  *value = (int)env_size("DLG_FAKE_SMS", 2);
  if (*value < 1) *value = 1;
  return cudaSuccess;
}
// ------------------------------------------------------------ stream capture

namespace {
struct Capture {
  cudaStream_t s = nullptr;
  std::vector<std::function<void()>> *ops = nullptr; // non-null: capturing
  bool bad = false;                                  // a refused call invalidated it
} g_cap;
// A call a GPU refuses while a stream captures: the capture is invalidated.
cudaError_t cap_refuse(const char *what) {
  fprintf(stderr, "DLG_FAKE: %s while a stream captures a graph (refused; the capture is invalidated)\n", what);
  g_cap.bad = true;
  return fail(cudaErrorStreamCaptureUnsupported);
}
} // namespace
struct CUgraph_st {
  std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
};
bool dlg_fake_capturing(cudaStream_t s) { return g_cap.ops && s == g_cap.s; }
void dlg_fake_record(std::function<void()> f) { g_cap.ops->push_back(std::move(f)); }
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  (void)mode;
  if (g_cap.ops || !s) return fail(cudaErrorInvalidValue);
  g_cap.s = s;
  g_cap.ops = new std::vector<std::function<void()>>();
  g_cap.bad = false;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  *g = nullptr;
  if (!g_cap.ops || s != g_cap.s) return fail(cudaErrorInvalidValue);
  std::vector<std::function<void()>> *ops = g_cap.ops;
  const bool bad = g_cap.bad;
  g_cap = Capture();
  if (bad) {
    delete ops;
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  *g = new CUgraph_st{std::move(*ops)};
  delete ops;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
  (void)flags;
  if (!g) return fail(cudaErrorInvalidValue);
  *e = new CUgraphExec_st{g->ops};
  return cudaSuccess;
}
// In place when the work has as many steps (a GPU also needs the same kinds and kernels).
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info) {
  if (!e || !g) return fail(cudaErrorInvalidValue);
  if (info) info->result = e->ops.size() == g->ops.size() ? 0 : 1;
  if (e->ops.size() != g->ops.size()) return fail(cudaErrorGraphExecUpdateFailure);
  e->ops = g->ops;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  if (!e) return fail(cudaErrorInvalidValue);
  if (dlg_fake_capturing(s)) return cap_refuse("cudaGraphLaunch");
  for (const auto &op : e->ops) op();
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return g_cap.ops ? cap_refuse("cudaDeviceSynchronize") : cudaSuccess; }

struct CUstream_st {
  int token;
};
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  *s = new CUstream_st();
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (g_cap.ops) return cap_refuse("cudaStreamSynchronize");
  (void)s;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
  *p = nullptr;
  if (g_cap.ops) return cap_refuse("cudaMalloc");
  if (bytes == 0) return cudaSuccess;
  if (bytes > budget() || g_used > budget() - bytes) return fail(cudaErrorMemoryAllocation);
  const size_t span = round_up(bytes, 256), acc = round_up(span, page());
  char *m = (char *)mmap(nullptr, acc + page(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  char *u = m + acc - span;
  g_blocks[(uintptr_t)u] = Block{m, acc, bytes};
  g_used += bytes;
  // fresh device memory is garbage on a GPU: here all bits set (NaN, -1), so
  // a read before the first write shows (mmap's zeros would hide it)
  if (mprotect(m, acc, PROT_READ | PROT_WRITE) != 0) die("mprotect failed%s", "");
  memset(u, 0xff, span);
  if (!g_open && mprotect(m, acc, PROT_NONE) != 0) die("mprotect failed%s", "");
  *p = u;
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  if (g_cap.ops) return cap_refuse("cudaFree");
  if (!p) return cudaSuccess;
  auto it = g_blocks.find((uintptr_t)p);
  if (it == g_blocks.end()) {
    fprintf(stderr, "DLG_FAKE: cudaFree(%p): not a live device allocation (double free?)\n", p);
    return fail(cudaErrorInvalidValue);
  }
  munmap(it->second.map, it->second.acc + page());
  g_used -= it->second.bytes;
  g_blocks.erase(it);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  *free_bytes = budget() - g_used;
  *total_bytes = budget();
  return cudaSuccess;
}
static std::map<const char *, size_t> g_pinned; // cudaMallocHost's blocks: start, size
// Whether [p, p + bytes) lies in one cudaMallocHost block.
static bool pinned(const void *p, size_t bytes) {
  auto it = g_pinned.upper_bound((const char *)p);
  if (it == g_pinned.begin()) return false;
  --it;
  return (const char *)p + bytes <= it->first + it->second;
}
struct CUevent_st {
  int recorded;
};
cudaError_t cudaMallocHost(void **p, size_t bytes) {
  if (g_cap.ops) return cap_refuse("cudaMallocHost");
  *p = malloc(bytes ? bytes : 1);
  if (!*p) return fail(cudaErrorMemoryAllocation);
  g_pinned[(const char *)*p] = bytes ? bytes : 1;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
  if (p && !g_pinned.erase((const char *)p)) {
    fprintf(stderr, "DLG_FAKE: cudaFreeHost(%p): not from cudaMallocHost\n", p);
    abort();
  }
  free(p);
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  *e = new CUevent_st{0};
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  (void)s;
  if (g_cap.ops) return cap_refuse("cudaEventRecord"); // dl.h records its events outside graphs
  if (!e) return fail(cudaErrorInvalidValue);
  e->recorded = 1;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (g_cap.ops) return cap_refuse("cudaEventQuery");
  return e ? cudaSuccess : fail(cudaErrorInvalidValue);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (g_cap.ops) return cap_refuse("cudaEventSynchronize");
  return e ? cudaSuccess : fail(cudaErrorInvalidValue);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p) {
  const bool dev = find(p, 0) != nullptr;
  a->type = dev ? cudaMemoryTypeDevice : pinned(p, 0) ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
  a->device = dev ? 0 : -1;
  a->devicePointer = dev ? (void *)p : nullptr;
  a->hostPointer = dev ? nullptr : (void *)p;
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (dlg_fake_capturing(s)) {
    if ((kind == cudaMemcpyHostToDevice && !pinned(src, bytes)) ||
        (kind == cudaMemcpyDeviceToHost && !pinned(dst, bytes)))
      return cap_refuse("a copy between the device and pageable host memory");
    dlg_fake_record([=]() { cudaMemcpyAsync(dst, src, bytes, kind, nullptr); });
    return cudaSuccess;
  }
  switch (kind) {
    case cudaMemcpyHostToDevice:
      need_dev("cudaMemcpy HostToDevice (destination)", dst, bytes);
      need_host("cudaMemcpy HostToDevice (source)", src, bytes);
      break;
    case cudaMemcpyDeviceToHost:
      need_dev("cudaMemcpy DeviceToHost (source)", src, bytes);
      need_host("cudaMemcpy DeviceToHost (destination)", dst, bytes);
      break;
    case cudaMemcpyDeviceToDevice:
      need_dev("cudaMemcpy DeviceToDevice (destination)", dst, bytes);
      need_dev("cudaMemcpy DeviceToDevice (source)", src, bytes);
      break;
    default: return fail(cudaErrorInvalidMemcpyDirection);
  }
  DevSection dev;
  memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
  if (g_cap.ops) return cap_refuse("cudaMemcpy (synchronous)");
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (dlg_fake_capturing(s)) {
    dlg_fake_record([=]() { cudaMemsetAsync(p, value, bytes, nullptr); });
    return cudaSuccess;
  }
  need_dev("cudaMemset", p, bytes);
  DevSection dev;
  memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  if (g_cap.ops) return cap_refuse("cudaMemset (synchronous)");
  return cudaMemsetAsync(p, value, bytes, nullptr);
}
cudaError_t cudaGetLastError(void) {
  cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last; }
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory (fake device budget, DLG_FAKE_MEM)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorGraphExecUpdateFailure: return "the graph update was not performed";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

// ------------------------------------------------------------ cuBLAS

struct cublasContext {
  cudaStream_t stream;
  cublasMath_t math;
};
cublasStatus_t cublasCreate(cublasHandle_t *h) {
  *h = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (ws) need_dev("cublasSetWorkspace", ws, bytes);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = m;
  return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

namespace {
// C = alpha op(A) op(B) + beta C, column-major, `batch` times at strides
// sa, sb, sc; cuBLAS's argument checks first. beta == 0: C is not read.
// Sums in T, as the device does.
template <typename T>
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const T *alpha, const T *A, int lda, long long sa, const T *B, int ldb, long long sb,
                    const T *beta, T *C, int ldc, long long sc, int batch) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int ra = ta == CUBLAS_OP_N ? m : k, rb = tb == CUBLAS_OP_N ? k : n;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 ||
      k < 0 || batch < 0 || lda < (ra > 1 ? ra : 1) || ldb < (rb > 1 ? rb : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const T al = *alpha, be = *beta;
  if (dlg_fake_capturing(h->stream)) { // alpha and beta read now, as cuBLAS reads host scalars
    cublasContext *hc = new cublasContext(*h);
    hc->stream = nullptr;
    std::shared_ptr<cublasContext> run_on(hc);
    dlg_fake_record([=]() { gemm<T>(run_on.get(), ta, tb, m, n, k, &al, A, lda, sa, B, ldb, sb, &be, C, ldc, sc, batch); });
    return CUBLAS_STATUS_SUCCESS;
  }
  if (k > 0) {
    const int ca = ta == CUBLAS_OP_N ? k : m, cb = tb == CUBLAS_OP_N ? n : k;
    need_dev("cuBLAS gemm A", A, ((size_t)(batch - 1) * (size_t)sa + (size_t)(ca - 1) * lda + ra) * sizeof(T));
    need_dev("cuBLAS gemm B", B, ((size_t)(batch - 1) * (size_t)sb + (size_t)(cb - 1) * ldb + rb) * sizeof(T));
  }
  need_dev("cuBLAS gemm C", C, ((size_t)(batch - 1) * (size_t)sc + (size_t)(n - 1) * ldc + m) * sizeof(T));
  if (sa < 0 || sb < 0 || sc < 0) return CUBLAS_STATUS_INVALID_VALUE;
  DevSection dev;
  for (int b = 0; b < batch; b++) {
    const T *a = A + b * sa, *bb = B + b * sb;
    T *c = C + b * sc;
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        T s = 0;
        for (int l = 0; l < k; l++) {
          const T x = ta == CUBLAS_OP_N ? a[i + (size_t)l * lda] : a[l + (size_t)i * lda];
          const T y = tb == CUBLAS_OP_N ? bb[l + (size_t)j * ldb] : bb[j + (size_t)l * ldb];
          s += x * y;
        }
        T &out = c[i + (size_t)j * ldc];
        out = be == 0 ? al * s : al * s + be * out;
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
} // namespace

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
  return gemm<float>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double *alpha, const double *A, int lda, const double *B, int ldb,
                           const double *beta, double *C, int ldc) {
  return gemm<double>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sa,
                                         const float *B, int ldb, long long sb, const float *beta, float *C, int ldc,
                                         long long sc, int batch) {
  return gemm<float>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double *alpha, const double *A, int lda, long long sa,
                                         const double *B, int ldb, long long sb, const double *beta, double *C,
                                         int ldc, long long sc, int batch) {
  return gemm<double>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

// ------------------------------------------------------------ cuDNN

struct cudnnContext {
  cudaStream_t stream;
};
// Tensor and filter descriptors: 4-d (nd 4, depth d = 1) or 5-d (NCDHW);
// a convolution's spatial dims: 2 or 3 (nsp; the depth's pd, sd, dd).
struct dlg_fake_tensor_desc {
  bool set;
  cudnnDataType_t t;
  int n, c, h, w;
  int nd, d;
};
struct dlg_fake_filter_desc {
  bool set;
  cudnnDataType_t t;
  int k, c, h, w;
  int nd, d;
};
struct dlg_fake_conv_desc {
  bool set;
  int ph, pw, sh, sw, dh, dw, groups;
  cudnnConvolutionMode_t mode;
  cudnnDataType_t t;
  cudnnMathType_t math;
  int nsp, pd, sd, dd;
};

cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
  *h = new cudnnContext{nullptr};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  delete h;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}
const char *cudnnGetErrorString(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_ALLOC_FAILED: return "CUDNN_STATUS_ALLOC_FAILED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) {
  *d = new dlg_fake_tensor_desc();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n,
                                         int c, int h, int w) {
  if (!d || f != CUDNN_TENSOR_NCHW || n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *d = dlg_fake_tensor_desc{true, t, n, c, h, w, 4, 1};
  return CUDNN_STATUS_SUCCESS;
}
// Only the 5-d (NCDHW) case, the one src_gpu/ uses.
cudnnStatus_t cudnnSetTensorNdDescriptorEx(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t,
                                           int nbDims, const int *dims) {
  if (!d || f != CUDNN_TENSOR_NCHW || nbDims != 5 || !dims) return CUDNN_STATUS_BAD_PARAM;
  for (int k = 0; k < 5; k++)
    if (dims[k] <= 0) return CUDNN_STATUS_BAD_PARAM;
  *d = dlg_fake_tensor_desc{true, t, dims[0], dims[1], dims[3], dims[4], 5, dims[2]};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) {
  *d = new dlg_fake_filter_desc();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k,
                                         int c, int h, int w) {
  if (!d || f != CUDNN_TENSOR_NCHW || k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *d = dlg_fake_filter_desc{true, t, k, c, h, w, 4, 1};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f,
                                         int nbDims, const int *dims) {
  if (!d || f != CUDNN_TENSOR_NCHW || nbDims != 5 || !dims) return CUDNN_STATUS_BAD_PARAM;
  for (int k = 0; k < 5; k++)
    if (dims[k] <= 0) return CUDNN_STATUS_BAD_PARAM;
  *d = dlg_fake_filter_desc{true, t, dims[0], dims[1], dims[3], dims[4], 5, dims[2]};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
  *d = new dlg_fake_conv_desc();
  (*d)->groups = 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete d;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int sh, int sw, int dh,
                                              int dw, cudnnConvolutionMode_t mode, cudnnDataType_t t) {
  if (!d || ph < 0 || pw < 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0) return CUDNN_STATUS_BAD_PARAM;
  d->set = true;
  d->ph = ph, d->pw = pw, d->sh = sh, d->sw = sw, d->dh = dh, d->dw = dw;
  d->mode = mode;
  d->t = t;
  d->nsp = 2, d->pd = 0, d->sd = 1, d->dd = 1;
  return CUDNN_STATUS_SUCCESS;
}
// Only 3 spatial dims (depth, height, width), the case src_gpu/ uses.
cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int n, const int *pad, const int *stride,
                                              const int *dil, cudnnConvolutionMode_t mode, cudnnDataType_t t) {
  if (!d || n != 3 || !pad || !stride || !dil) return CUDNN_STATUS_BAD_PARAM;
  for (int k = 0; k < 3; k++)
    if (pad[k] < 0 || stride[k] <= 0 || dil[k] <= 0) return CUDNN_STATUS_BAD_PARAM;
  d->set = true;
  d->pd = pad[0], d->ph = pad[1], d->pw = pad[2];
  d->sd = stride[0], d->sh = stride[1], d->sw = stride[2];
  d->dd = dil[0], d->dh = dil[1], d->dw = dil[2];
  d->mode = mode;
  d->t = t;
  d->nsp = 3;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (!d || groups < 1) return CUDNN_STATUS_BAD_PARAM;
  d->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  d->math = m;
  return CUDNN_STATUS_SUCCESS;
}
namespace {
// The output [n, k, d, h, w] of x and w under c, all of rank nd (4: d = 1).
cudnnStatus_t fake_out_dim(cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                           int nd, int *out) {
  if (!c || !x || !w || !c->set || !x->set || !w->set || x->c != w->c * c->groups || w->k % c->groups ||
      x->nd != nd || w->nd != nd || c->nsp != nd - 2)
    return CUDNN_STATUS_BAD_PARAM;
  out[0] = x->n;
  out[1] = w->k;
  out[2] = (x->d + 2 * c->pd - c->dd * (w->d - 1) - 1) / c->sd + 1;
  out[3] = (x->h + 2 * c->ph - c->dh * (w->h - 1) - 1) / c->sh + 1;
  out[4] = (x->w + 2 * c->pw - c->dw * (w->w - 1) - 1) / c->sw + 1;
  return out[2] > 0 && out[3] > 0 && out[4] > 0 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}
} // namespace
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int *n, int *ch, int *h, int *wo) {
  int out[5];
  const cudnnStatus_t st = fake_out_dim(c, x, w, 4, out);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  *n = out[0], *ch = out[1], *h = out[3], *wo = out[4];
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int nbDims, int *out) {
  int o[5];
  if (nbDims != 5 || !out) return CUDNN_STATUS_BAD_PARAM;
  const cudnnStatus_t st = fake_out_dim(c, x, w, 5, o);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  for (int k = 0; k < 5; k++) out[k] = o[k];
  return CUDNN_STATUS_SUCCESS;
}

namespace {
constexpr size_t kConvWs = 1024; // the workspace each fake algorithm asks for

// Everything one convolution pass needs, checked against cuDNN's rules.
struct Conv {
  int N, C, H, W, O, Cg, Og, KH, KW, Ho, Wo, ph, pw, sh, sw, dh, dw, G;
  cudnnDataType_t t;
  int D, KD, Do, pd, sd, dd; // 1, 1, 1, 0, 1, 1 in 2-d
};
cudnnStatus_t conv_geo(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                       cudnnTensorDescriptor_t y, Conv *g) {
  int o[5];
  if (!x || fake_out_dim(c, x, w, x->nd, o) != CUDNN_STATUS_SUCCESS || !y || !y->set || y->nd != x->nd)
    return CUDNN_STATUS_BAD_PARAM;
  if (y->n != o[0] || y->c != o[1] || y->d != o[2] || y->h != o[3] || y->w != o[4]) return CUDNN_STATUS_BAD_PARAM;
  if (x->t != w->t || x->t != y->t || (x->t != CUDNN_DATA_FLOAT && x->t != CUDNN_DATA_DOUBLE) || c->t != x->t)
    return CUDNN_STATUS_BAD_PARAM;
  if (c->mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_NOT_SUPPORTED;
  *g = Conv{x->n, x->c, x->h, x->w, w->k, w->c, w->k / c->groups, w->h, w->w, o[3], o[4],
            c->ph, c->pw, c->sh, c->sw, c->dh, c->dw, c->groups, x->t,
            x->d, w->d, o[2], c->pd, c->sd, c->dd};
  return CUDNN_STATUS_SUCCESS;
}
template <typename Perf, typename Algo>
cudnnStatus_t one_algo(cudnnConvolutionDescriptor_t c, int want, int *got, Perf *perf, Algo a) {
  if (!c || want < 1) return CUDNN_STATUS_BAD_PARAM;
  memset(&perf[0], 0, sizeof perf[0]);
  perf[0].algo = a;
  perf[0].status = CUDNN_STATUS_SUCCESS;
  perf[0].memory = kConvWs;
  perf[0].determinism = CUDNN_DETERMINISTIC;
  perf[0].mathType = c->math;
  *got = 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t ws_ok(void *ws, size_t bytes) {
  if (bytes < kConvWs) return CUDNN_STATUS_BAD_PARAM;
  need_dev("cuDNN workspace", ws, bytes);
  return CUDNN_STATUS_SUCCESS;
}
size_t numel_x(const Conv &g) { return (size_t)g.N * g.C * g.D * g.H * g.W; }
size_t numel_w(const Conv &g) { return (size_t)g.O * g.Cg * g.KD * g.KH * g.KW; }
size_t numel_y(const Conv &g) { return (size_t)g.N * g.O * g.Do * g.Ho * g.Wo; }

// Calls f(xi, wi, yi) for every (input, weight, output) element triple of
// the convolution, the flat NC(D)HW indices; the output column j innermost.
template <class F> void conv_walk(const Conv &g, F f) {
  for (int n = 0; n < g.N; n++)
    for (int o = 0; o < g.O; o++) {
      const int grp = o / g.Og;
      for (int c = 0; c < g.Cg; c++)
        for (int a = 0; a < g.KD; a++)
          for (int p = 0; p < g.KH; p++)
            for (int q = 0; q < g.KW; q++) {
              const size_t wi = ((((size_t)o * g.Cg + c) * g.KD + a) * g.KH + p) * g.KW + q;
              for (int z = 0; z < g.Do; z++) {
                const int dd = z * g.sd - g.pd + a * g.dd;
                if (dd < 0 || dd >= g.D) continue;
                const size_t xplane = (((size_t)n * g.C + grp * g.Cg + c) * g.D + dd) * g.H;
                const size_t yplane = (((size_t)n * g.O + o) * g.Do + z) * g.Ho;
                for (int i = 0; i < g.Ho; i++) {
                  const int hh = i * g.sh - g.ph + p * g.dh;
                  if (hh < 0 || hh >= g.H) continue;
                  const size_t xrow = (xplane + hh) * g.W, yrow = (yplane + i) * g.Wo;
                  for (int j = 0; j < g.Wo; j++) {
                    const int ww = j * g.sw - g.pw + q * g.dw;
                    if (ww >= 0 && ww < g.W) f(xrow + ww, wi, yrow + j);
                  }
                }
              }
            }
    }
}
// out = alpha * (the pass's sums in acc) + beta * out (beta == 0: out is not read).
template <typename T> void blend(T *out, const std::vector<T> &acc, const void *alpha, const void *beta) {
  const T al = *(const T *)alpha, be = *(const T *)beta;
  for (size_t i = 0; i < acc.size(); i++) out[i] = be == 0 ? al * acc[i] : al * acc[i] + be * out[i];
}
// pass 0: y from x, w; 1: dx from w, dy; 2: dw from x, dy.
template <typename T>
void conv_pass(int pass, const Conv &g, const T *x, const T *w, const T *y, T *out, const void *alpha,
               const void *beta) {
  std::vector<T> acc(pass == 0 ? numel_y(g) : pass == 1 ? numel_x(g) : numel_w(g), (T)0);
  if (pass == 0) conv_walk(g, [&](size_t xi, size_t wi, size_t yi) { acc[yi] += x[xi] * w[wi]; });
  else if (pass == 1) conv_walk(g, [&](size_t xi, size_t wi, size_t yi) { acc[xi] += y[yi] * w[wi]; });
  else conv_walk(g, [&](size_t xi, size_t wi, size_t yi) { acc[wi] += y[yi] * x[xi]; });
  blend(out, acc, alpha, beta);
}
cudnnStatus_t conv_run(int pass, cudnnHandle_t h, const Conv &g, const void *x, const void *w, const void *y,
                       void *out, void *ws, size_t ws_bytes, const void *alpha, const void *beta) {
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t s = ws_ok(ws, ws_bytes);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const size_t es = g.t == CUDNN_DATA_FLOAT ? 4 : 8;
  if (pass != 1) need_dev("cuDNN convolution x", x, numel_x(g) * es);
  if (pass != 2) need_dev("cuDNN convolution w", w, numel_w(g) * es);
  if (pass != 0) need_dev("cuDNN convolution dy", y, numel_y(g) * es);
  need_dev("cuDNN convolution output", out, (pass == 0 ? numel_y(g) : pass == 1 ? numel_x(g) : numel_w(g)) * es);
  if (dlg_fake_capturing(h->stream)) { // the geometry (not the descriptors) and alpha, beta kept as they are now
    double ab[2] = {0, 0};
    memcpy(&ab[0], alpha, es);
    memcpy(&ab[1], beta, es);
    std::shared_ptr<cudnnContext> run_on(new cudnnContext{nullptr});
    const Conv gk = g;
    dlg_fake_record([=]() { conv_run(pass, run_on.get(), gk, x, w, y, out, ws, ws_bytes, &ab[0], &ab[1]); });
    return CUDNN_STATUS_SUCCESS;
  }
  DevSection dev;
  memset(ws, 0xff, ws_bytes); // the workspace holds garbage afterwards
  if (g.t == CUDNN_DATA_FLOAT)
    conv_pass<float>(pass, g, (const float *)x, (const float *)w, (const float *)y, (float *)out, alpha, beta);
  else
    conv_pass<double>(pass, g, (const double *)x, (const double *)w, (const double *)y, (double *)out, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}
} // namespace

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                     cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                                                     cudnnTensorDescriptor_t y, int want, int *got,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf) {
  Conv g;
  if (!h || conv_geo(x, w, c, y, &g) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_BAD_PARAM;
  return one_algo(c, want, got, perf, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                          cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c,
                                                          cudnnTensorDescriptor_t dx, int want, int *got,
                                                          cudnnConvolutionBwdDataAlgoPerf_t *perf) {
  Conv g;
  if (!h || conv_geo(dx, w, c, dy, &g) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_BAD_PARAM;
  return one_algo(c, want, got, perf, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                            cudnnTensorDescriptor_t dy,
                                                            cudnnConvolutionDescriptor_t c,
                                                            cudnnFilterDescriptor_t dw, int want, int *got,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
  Conv g;
  if (!h || conv_geo(x, dw, c, dy, &g) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_BAD_PARAM;
  return one_algo(c, want, got, perf, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
}
// cudnnFind...: the same single candidate, as if timed (nothing runs).
cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                   cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                                                   cudnnTensorDescriptor_t y, int want, int *got,
                                                   cudnnConvolutionFwdAlgoPerf_t *perf) {
  if (g_cap.ops) {
    cap_refuse("cudnnFindConvolutionForwardAlgorithm");
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  return cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, c, y, want, got, perf);
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                        cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c,
                                                        cudnnTensorDescriptor_t dx, int want, int *got,
                                                        cudnnConvolutionBwdDataAlgoPerf_t *perf) {
  if (g_cap.ops) {
    cap_refuse("cudnnFindConvolutionBackwardDataAlgorithm");
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, dy, c, dx, want, got, perf);
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                          cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c,
                                                          cudnnFilterDescriptor_t dw, int want, int *got,
                                                          cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
  if (g_cap.ops) {
    cap_refuse("cudnnFindConvolutionBackwardFilterAlgorithm");
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, dy, c, dw, want, got, perf);
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                      cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                                                      cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t a,
                                                      size_t *bytes) {
  Conv g;
  if (!h || conv_geo(x, w, c, y, &g) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_BAD_PARAM;
  if (a != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = kConvWs;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                           cudnnTensorDescriptor_t dy,
                                                           cudnnConvolutionDescriptor_t c,
                                                           cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t a, size_t *bytes) {
  Conv g;
  if (!h || conv_geo(dx, w, c, dy, &g) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_BAD_PARAM;
  if (a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = kConvWs;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                             cudnnTensorDescriptor_t dy,
                                                             cudnnConvolutionDescriptor_t c,
                                                             cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t a, size_t *bytes) {
  Conv g;
  if (!h || conv_geo(x, dw, c, dy, &g) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_BAD_PARAM;
  if (a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = kConvWs;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd, const void *x,
                                      cudnnFilterDescriptor_t wd, const void *w, cudnnConvolutionDescriptor_t cd,
                                      cudnnConvolutionFwdAlgo_t a, void *ws, size_t ws_bytes, const void *beta,
                                      cudnnTensorDescriptor_t yd, void *y) {
  Conv g;
  if (conv_geo(xd, wd, cd, yd, &g) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_BAD_PARAM;
  if (a != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) return CUDNN_STATUS_NOT_SUPPORTED;
  return conv_run(0, h, g, x, w, nullptr, y, ws, ws_bytes, alpha, beta);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, cudnnFilterDescriptor_t wd,
                                           const void *w, cudnnTensorDescriptor_t dyd, const void *dy,
                                           cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t a,
                                           void *ws, size_t ws_bytes, const void *beta, cudnnTensorDescriptor_t dxd,
                                           void *dx) {
  Conv g;
  if (conv_geo(dxd, wd, cd, dyd, &g) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_BAD_PARAM;
  if (a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) return CUDNN_STATUS_NOT_SUPPORTED;
  return conv_run(1, h, g, nullptr, w, dy, dx, ws, ws_bytes, alpha, beta);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                             const void *x, cudnnTensorDescriptor_t dyd, const void *dy,
                                             cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t a,
                                             void *ws, size_t ws_bytes, const void *beta,
                                             cudnnFilterDescriptor_t dwd, void *dw) {
  Conv g;
  if (conv_geo(xd, dwd, cd, dyd, &g) != CUDNN_STATUS_SUCCESS) return CUDNN_STATUS_BAD_PARAM;
  if (a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1) return CUDNN_STATUS_NOT_SUPPORTED;
  return conv_run(2, h, g, x, nullptr, dy, dw, ws, ws_bytes, alpha, beta);
}
