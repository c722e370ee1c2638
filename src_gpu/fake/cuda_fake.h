// src_gpu/fake/cuda_fake.h - a FAKE CUDA device on the host, so that the
// whole GPU path (src_gpu/*.cu, the dlg_* entry points and the C side's
// device tapes, model moves and optimizer state) runs in CI, where there is
// no GPU. `make gpu-fake` compiles the same src_gpu/*.cu with g++ as C++17
// and -DDLG_FAKE; src_gpu/internal.h and dl/gpu/ew.cuh then include this
// header instead of the CUDA ones, and src_gpu/fake/fake.cpp implements it.
//
// What it is:
//   - CUDA C++: __global__, __device__, __host__, __forceinline__ and
//     __launch_bounds__ are empty; __shared__ is `static` (the blocks of a
//     launch run one after another, so one copy per kernel is the block's);
//     dim3, threadIdx / blockIdx / blockDim / gridDim (globals set by the
//     launcher), __syncthreads, atomicAdd and atomicMax (plain: one host thread),
//     the _rn intrinsics as plain operators.
//   - Launches: DLG_LAUNCH(grid, block, shmem, stream, kernel)(args) (the
//     macro of internal.h / ew.cuh; `kernel<<<grid, block, shmem, stream>>>`
//     under nvcc) runs every block of the grid in turn with its REAL block
//     size: each thread of a block is a fiber (ucontext) that runs to its
//     next __syncthreads, so shared-memory trees and lane policies run as on
//     the device. A kernel whose first thread never calls __syncthreads runs
//     its threads as plain calls (fast). A bad configuration (an empty grid,
//     more than 1024 threads) is recorded for cudaGetLastError as on a GPU.
//   - Device memory: cudaMalloc maps pages of its own, kept PROT_NONE except
//     while a fake kernel, copy, memset, cuBLAS or cuDNN call runs, so a host
//     read or write of device memory segfaults. A block ends at the end of
//     its pages (256-byte aligned start) followed by a PROT_NONE guard page,
//     so a kernel that runs past a block's end faults too. A new block holds
//     all bits set (NaN, -1), not zeros, so reads before writes show. Every
//     raw pointer argument of a launch, every copy / memset range and every
//     cuBLAS / cuDNN operand must lie in a live device block, or the program
//     stops with a message (a host pointer handed to the device); so must
//     the non-null pointers of a `void *p[N]` struct argument (dlg_ptrs).
//   - cudaMemGetInfo reports a budget: env DLG_FAKE_MEM (bytes, or with a
//     K / M / G suffix; default 4G); cudaMalloc past it fails with
//     cudaErrorMemoryAllocation, so out-of-memory paths can be tested.
//     Env DLG_FAKE_SMS: the multiprocessor count reported (default 2; grids
//     are capped by it).
//   - cuBLAS: Sgemm / Dgemm and their StridedBatched forms, column-major as
//     cuBLAS defines them, with its argument checks (leading dimensions).
//   - cuDNN: the descriptors, convolution forward / backward data / backward
//     filter (NCHW, groups, stride, padding, dilation, alpha / beta) as direct
//     loops; each algorithm query returns one algorithm, which asks for a
//     small workspace (checked to be device memory of that size).
// Everything is synchronous: streams are tokens, synchronisation is a no-op.
#ifndef DLG_CUDA_FAKE_H
#define DLG_CUDA_FAKE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// ------------------------------------------------------------ CUDA C++

#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __shared__ static
#define __launch_bounds__(...)

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

void __syncthreads();

template <typename T> inline T atomicAdd(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T> inline T atomicMax(T *p, T v) {
  T old = *p;
  if (v > old) *p = v;
  return old;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return sqrt(a); }

// ------------------------------------------------------------ runtime API

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNotReady = 600,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorGraphExecUpdateFailure = 910,
  cudaErrorLaunchFailure = 719,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
};
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void *devicePointer, *hostPointer;
};
#define cudaStreamNonBlocking 0x01
typedef struct CUstream_st *cudaStream_t;
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaMalloc(void **p, size_t bytes);
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
cudaError_t cudaFree(void *p);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
// Device memory of the fake device, page-locked host memory (cudaMallocHost), or plain host memory.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
// Events: the fake device runs every call at once, so an event is always reached.
typedef struct CUevent_st *cudaEvent_t;
#define cudaEventDisableTiming 0x02
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
// Stream capture and graphs: between cudaStreamBeginCapture and
// cudaStreamEndCapture the stream's work (launches with their argument
// values, copies, fills, cuBLAS GEMMs, cuDNN convolutions with copies of
// their descriptors) is kept, not run; cudaGraphLaunch runs it in order.
// What a GPU refuses while a stream captures (thread-local mode) fails with
// cudaErrorStreamCaptureUnsupported and invalidates the capture: a wait,
// allocating or freeing memory, synchronous copies, a copy between the
// device and pageable host memory, an event, cudnnFind (it times).
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
struct cudaGraphExecUpdateResultInfo {
  int result;
};
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
// Whether s is capturing; a captured call's work, run at each launch.
bool dlg_fake_capturing(cudaStream_t s);
void dlg_fake_record(std::function<void()> f);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);

// ------------------------------------------------------------ launches

// Whether [p, p + bytes) lies in one live device block (fake.cpp).
bool dlg_fake_is_device(const void *p, size_t bytes);
// Runs fn(ctx) as every thread of every block of the grid (see the top).
void dlg_fake_run(const void *kernel, dim3 grid, dim3 block, size_t shmem, cudaStream_t st, void (*fn)(void *),
                  void *ctx);
// Stops the program: argument `arg` of a launch of `kernel` is a pointer that is no device memory.
[[noreturn]] void dlg_fake_bad_arg(const void *kernel, int arg, const void *p);

// Whether V is a struct of device pointers `void *p[N]` (dlg_ptrs, dlg__ptrs).
template <class V, class = void> struct dlg_fake_has_ptrs : std::false_type {};
template <class V>
struct dlg_fake_has_ptrs<V, std::void_t<decltype(std::declval<const V &>().p[0])>>
    : std::is_same<typename std::decay<decltype(std::declval<const V &>().p[0])>::type, void *> {};

template <class V> inline void dlg_fake_check_arg(const void *k, int i, const V &v) {
  if constexpr (std::is_pointer<V>::value) {
    if (v && !dlg_fake_is_device((const void *)v, 0)) dlg_fake_bad_arg(k, i, (const void *)v);
  } else if constexpr (dlg_fake_has_ptrs<V>::value) {
    for (const void *p : v.p)
      if (p && !dlg_fake_is_device(p, 0)) dlg_fake_bad_arg(k, i, p);
  } else {
    (void)k;
    (void)i;
    (void)v;
  }
}

// A launch's configuration and kernel, waiting for the arguments: the
// arguments convert to the kernel's parameter types once (as a launch
// copies them), the raw pointers among them are checked, and every thread
// calls the kernel on those values.
template <class... P> struct dlg_fake_launcher {
  void (*k)(P...);
  dim3 grid, block;
  size_t shmem;
  cudaStream_t st;
  typedef std::tuple<typename std::decay<P>::type...> Args;
  template <class... A> void operator()(A &&...a) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    Args args(std::forward<A>(a)...);
    check(args, std::index_sequence_for<P...>{});
    if (dlg_fake_capturing(st)) { // kept with its arguments' values, run at each graph launch
      const dlg_fake_launcher run_later{k, grid, block, shmem, nullptr};
      auto kept = std::make_shared<Args>(std::move(args));
      dlg_fake_record([run_later, kept]() { run_later.run(*kept); });
      return;
    }
    run(args);
  }
  void run(Args &args) const {
    check(args, std::index_sequence_for<P...>{});
    auto body = [&]() { std::apply(k, args); };
    dlg_fake_run((const void *)k, grid, block, shmem, st, [](void *c) { (*(decltype(body) *)c)(); }, &body);
  }
  template <class Tu, size_t... I> void check(const Tu &t, std::index_sequence<I...>) const {
    (dlg_fake_check_arg((const void *)k, (int)I, std::get<I>(t)), ...);
    (void)t;
  }
};
template <class... P>
inline dlg_fake_launcher<P...> dlg_fake_launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t st, void (*k)(P...)) {
  return dlg_fake_launcher<P...>{k, grid, block, shmem, st};
}
#define DLG_LAUNCH(grid, block, shmem, stream, ...) dlg_fake_launch(grid, block, shmem, stream, __VA_ARGS__)

// ------------------------------------------------------------ cuBLAS

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
typedef struct cublasContext *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
// The workspace cuBLAS uses (it allocates none while a stream captures): checked to be device memory.
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc);
cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double *alpha, const double *A, int lda, const double *B, int ldb,
                           const double *beta, double *C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sa,
                                         const float *B, int ldb, long long sb, const float *beta, float *C, int ldc,
                                         long long sc, int batch);
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double *alpha, const double *A, int lda, long long sa,
                                         const double *B, int ldb, long long sb, const double *beta, double *C,
                                         int ldc, long long sc, int batch);

// ------------------------------------------------------------ cuDNN

typedef enum {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
  CUDNN_STATUS_INTERNAL_ERROR = 4000,
  CUDNN_STATUS_ALLOC_FAILED = 4001,
  CUDNN_STATUS_EXECUTION_FAILED = 5000,
} cudnnStatus_t;
#define CUDNN_STATUS_CATEGORY(full_error_code) ((full_error_code) / 1000 * 1000)
typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1 } cudnnDataType_t;
typedef enum { CUDNN_TENSOR_NCHW = 0 } cudnnTensorFormat_t;
typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;
typedef enum {
  CUDNN_DEFAULT_MATH = 0,
  CUDNN_TENSOR_OP_MATH = 1,
  CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
  CUDNN_FMA_MATH = 3
} cudnnMathType_t;
typedef enum { CUDNN_NON_DETERMINISTIC = 0, CUDNN_DETERMINISTIC = 1 } cudnnDeterminism_t;
typedef enum {
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0,
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM = 1,
  CUDNN_CONVOLUTION_FWD_ALGO_GEMM = 2,
  CUDNN_CONVOLUTION_FWD_ALGO_DIRECT = 3,
  CUDNN_CONVOLUTION_FWD_ALGO_FFT = 4,
  CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING = 5,
  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD = 6,
  CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED = 7,
  CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8
} cudnnConvolutionFwdAlgo_t;
typedef enum {
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 = 0,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 = 1,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT = 2,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING = 3,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD = 4,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED = 5,
  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT = 6
} cudnnConvolutionBwdDataAlgo_t;
typedef enum {
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 = 0,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 = 1,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT = 2,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 = 3,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED = 5,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING = 6,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT = 7
} cudnnConvolutionBwdFilterAlgo_t;
#define DLG_FAKE_PERF(Name, Algo)   \
  typedef struct {                  \
    Algo algo;                      \
    cudnnStatus_t status;           \
    float time;                     \
    size_t memory;                  \
    cudnnDeterminism_t determinism; \
    cudnnMathType_t mathType;       \
    int reserved[3];                \
  } Name
DLG_FAKE_PERF(cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t);
DLG_FAKE_PERF(cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t);
DLG_FAKE_PERF(cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t);
#undef DLG_FAKE_PERF
typedef struct cudnnContext *cudnnHandle_t;
typedef struct dlg_fake_tensor_desc *cudnnTensorDescriptor_t;
typedef struct dlg_fake_filter_desc *cudnnFilterDescriptor_t;
typedef struct dlg_fake_conv_desc *cudnnConvolutionDescriptor_t;

cudnnStatus_t cudnnCreate(cudnnHandle_t *h);
cudnnStatus_t cudnnDestroy(cudnnHandle_t h);
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s);
const char *cudnnGetErrorString(cudnnStatus_t s);
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n,
                                         int c, int h, int w);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d);
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k,
                                         int c, int h, int w);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d);
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int sh, int sw, int dh,
                                              int dw, cudnnConvolutionMode_t mode, cudnnDataType_t t);
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m);
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int *n, int *ch, int *h, int *wo);
/* The Nd (5-d, NCDHW) forms: tensor, filter, convolution (3 spatial dims), output size. */
cudnnStatus_t cudnnSetTensorNdDescriptorEx(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t,
                                           int nbDims, const int *dims);
cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f,
                                         int nbDims, const int *dims);
cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int n, const int *pad, const int *stride,
                                              const int *dil, cudnnConvolutionMode_t mode, cudnnDataType_t t);
cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(cudnnConvolutionDescriptor_t c, cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t w, int nbDims, int *out);
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                     cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                                                     cudnnTensorDescriptor_t y, int want, int *got,
                                                     cudnnConvolutionFwdAlgoPerf_t *perf);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                          cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c,
                                                          cudnnTensorDescriptor_t dx, int want, int *got,
                                                          cudnnConvolutionBwdDataAlgoPerf_t *perf);
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                            cudnnTensorDescriptor_t dy,
                                                            cudnnConvolutionDescriptor_t c,
                                                            cudnnFilterDescriptor_t dw, int want, int *got,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *perf);
cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                   cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                                                   cudnnTensorDescriptor_t y, int want, int *got,
                                                   cudnnConvolutionFwdAlgoPerf_t *perf);
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                        cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c,
                                                        cudnnTensorDescriptor_t dx, int want, int *got,
                                                        cudnnConvolutionBwdDataAlgoPerf_t *perf);
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                          cudnnTensorDescriptor_t dy, cudnnConvolutionDescriptor_t c,
                                                          cudnnFilterDescriptor_t dw, int want, int *got,
                                                          cudnnConvolutionBwdFilterAlgoPerf_t *perf);
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                      cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t c,
                                                      cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t a,
                                                      size_t *bytes);
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, cudnnFilterDescriptor_t w,
                                                           cudnnTensorDescriptor_t dy,
                                                           cudnnConvolutionDescriptor_t c,
                                                           cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t a, size_t *bytes);
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                                             cudnnTensorDescriptor_t dy,
                                                             cudnnConvolutionDescriptor_t c,
                                                             cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t a, size_t *bytes);
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd, const void *x,
                                      cudnnFilterDescriptor_t wd, const void *w, cudnnConvolutionDescriptor_t cd,
                                      cudnnConvolutionFwdAlgo_t a, void *ws, size_t ws_bytes, const void *beta,
                                      cudnnTensorDescriptor_t yd, void *y);
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, cudnnFilterDescriptor_t wd,
                                           const void *w, cudnnTensorDescriptor_t dyd, const void *dy,
                                           cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t a,
                                           void *ws, size_t ws_bytes, const void *beta, cudnnTensorDescriptor_t dxd,
                                           void *dx);
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, cudnnTensorDescriptor_t xd,
                                             const void *x, cudnnTensorDescriptor_t dyd, const void *dy,
                                             cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t a,
                                             void *ws, size_t ws_bytes, const void *beta,
                                             cudnnFilterDescriptor_t dwd, void *dw);

#endif
