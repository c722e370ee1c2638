/* dl/gpu/abi.h - the C interface between the headers and the CUDA library
 * that `make gpu` builds from src_gpu/ (build/libdlgpu.a). Programs call
 * gpu.h; this file is what gpu.h and src_gpu/ agree on. Plain C types only,
 * so gcc, clang and nvcc read it alike.
 *
 * Conventions for every dlg_* call:
 *   - the first argument is the handle of one device (stream, cuBLAS and
 *     cuDNN handles, workspace, the last message): no global state;
 *   - it returns DLG_OK (0), or DLG_OOM when device memory ran out, or
 *     DLG_ERR for any other failure, with a readable message (naming the
 *     call and the CUDA / cuBLAS / cuDNN error) in dlg_message(h);
 *   - pointers named like data are device pointers unless the comment says
 *     host; work is queued on the handle's stream (in order, asynchronous
 *     to the host) except where a comment says the call waits;
 *   - dtype is DLG_F32 or DLG_F64 (the values of DL_F32 / DL_F64); index
 *     tensors (labels, token ids) are DLG_I32 or DLG_I64;
 *   - "contiguous [rows, n]" means row r, column j is at r * n + j. */
#ifndef DL_GPU_ABI_H
#define DL_GPU_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlg_handle dlg_handle;

enum { DLG_OK = 0, DLG_ERR = 1, DLG_OOM = 2, DLG_NODEV = 3 };
enum { DLG_F32 = 0, DLG_F64 = 1, DLG_I32 = 2, DLG_I64 = 3 };
enum { DLG_H2D = 1, DLG_D2H = 2, DLG_D2D = 3 };
#define DLG_MAXD 8

/* >>runtime (src_gpu/device.cu) ------------------------------------------ */

/* Devices visible to this process. Without a driver or a device: *count = 0
 * and DLG_NODEV with the reason in msg (host buffer of cap bytes). */
int dlg_device_count(int *count, char *msg, size_t cap);
/* A handle on device `device`: sets the device, makes a stream, a cuBLAS and
 * a cuDNN handle. On failure *h is NULL and msg says why. */
int dlg_create(dlg_handle **h, int device, char *msg, size_t cap);
void dlg_destroy(dlg_handle *h);
const char *dlg_message(const dlg_handle *h);
/* Device name and compute capability into buf (host): "NVIDIA H100 80GB HBM3 (sm_90)". */
int dlg_device_name(dlg_handle *h, char *buf, size_t cap);
/* Raw device memory (cudaMalloc / cudaFree). DLG_OOM when it does not fit. */
int dlg_malloc(dlg_handle *h, void **p, size_t bytes);
int dlg_free(dlg_handle *h, void *p);
int dlg_mem_info(dlg_handle *h, size_t *free_bytes, size_t *total_bytes);
/* Copies on the handle's stream; D2H waits until the bytes are on the host. */
int dlg_copy(dlg_handle *h, void *dst, const void *src, size_t bytes, int kind);
int dlg_memset0(dlg_handle *h, void *p, size_t bytes);
/* Waits for all queued work; reports an asynchronous kernel failure. */
int dlg_sync(dlg_handle *h);

/* Page-locked host memory (cudaMallocHost): what dlg_copy_async copies
 * into and out of without the host waiting. */
int dlg_host_alloc(dlg_handle *h, void **p, size_t bytes);
void dlg_host_free(dlg_handle *h, void *p);
/* A copy queued on the stream; the host does not wait: D2H into
 * page-locked memory is there once an event recorded after it has
 * completed (dlg_event_wait); H2D from page-locked memory must not be
 * changed before that. */
int dlg_copy_async(dlg_handle *h, void *dst, const void *src, size_t bytes, int kind);
/* Events on the stream: record (*ev NULL: made first, no timing), wait on
 * the host until the work queued before the record is done (counted as a
 * host wait only when it was not done yet), free. */
int dlg_event_record(dlg_handle *h, void **ev);
int dlg_event_wait(dlg_handle *h, void *ev);
void dlg_event_free(dlg_handle *h, void *ev);

/* What the handle has asked of the device since dlg_create, counted on the
 * host as the calls are made (so a test on the fake device sees what a GPU
 * would be asked): kernel launches, cuBLAS GEMM calls, host waits for the
 * stream (dlg_sync, a D2H copy, an event not yet reached), cudaMalloc /
 * cudaFree, queued copies and fills; cuDNN algorithm
 * queries (heuristics and timed searches) and descriptors created. The
 * difference of two readings is what the code between them cost: a training
 * step in the steady state asks for no algorithm, creates no descriptor and
 * allocates nothing (tests/test_gpu.c checks). */
typedef struct dlg_counts {
  int64_t launches, blas, syncs, mallocs, frees, copies, memsets, dnn_queries, dnn_descriptors;
  int64_t graph_launches, graph_builds; /* CUDA graphs launched; captured (new or changed work) */
} dlg_counts;
void dlg_counters(const dlg_handle *h, dlg_counts *c);

/* CUDA graphs (graph.cu). Between dlg_graph_begin and dlg_graph_end the
 * handle records its device work instead of issuing it: kernels with their
 * argument values, cuBLAS and cuDNN calls, copies and fills; a host-to-
 * device copy keeps its bytes. A call that needs the device's results or
 * the raw stream (a copy to the host, an event, a wait, a free, cuDNN's
 * algorithm search, dlg_stream for a user's kernel) first flushes what was
 * recorded: one segment of the step. A segment is compared, byte for byte
 * (kernels, configurations, argument values, pointers; for a host copy its
 * size and destination), with the segment at its place in the previous
 * step: the same work is replayed as the CUDA graph captured then (one copy
 * of the segment's host bytes to the device, one graph launch); new or
 * changed work is captured again first (graph_builds counts it). The same
 * kernels run with the same arguments in the same order as without
 * recording, so the results are bit-identical. Errors of recorded work are
 * reported when it is flushed (dlg_graph_end's status). One handle records
 * at a time. DLG_OK or DLG_ERR with a message. */
int dlg_graph_begin(dlg_handle *h);
int dlg_graph_end(dlg_handle *h);
/* Whether h is recording (between dlg_graph_begin and dlg_graph_end). */
int dlg_graph_recording(const dlg_handle *h);
/* Drops h's captured graphs (they are rebuilt when next needed). */
void dlg_graph_reset(dlg_handle *h);
/* Convolution algorithms (conv.cu): 0 (the default): for each shape, once,
 * cuDNN times its candidates (cudnnFind) and the fastest that computes the
 * plain sum of products (no FFT or Winograd, no TF32; workspace within
 * DLG_CONV_WS_BUDGET) is kept: results may vary in the last bits from run
 * to run (some of those algorithms add with atomics). 1: deterministic
 * algorithms first, from cuDNN's heuristics: reruns are bit-identical.
 * Plans already chosen are chosen again after a switch. */
void dlg_set_deterministic(dlg_handle *h, int on);
int dlg_deterministic(const dlg_handle *h);

/* y[0..n) = v for dtype DLG_F32 / DLG_F64 / DLG_I32 / DLG_I64. */
int dlg_fill(dlg_handle *h, int dtype, void *y, int64_t n, double v);
/* *p += delta for one int64 on the device (BatchNorm's num_batches_tracked). */
int dlg_add_i64(dlg_handle *h, int64_t *p, int64_t delta);
/* The element-wise launchers of src_gpu/core.cu are reached through weak
 * references (so that a user op without a GPU launcher links and panics with
 * a message); gpu.h calls this to pull core.cu's object out of the archive. */
int dlg_ew_linked(void);
/* y (contiguous) = x read through shape/strides (elements of elem_size bytes:
 * 1, 2, 4 or 8): the device's strided gather. ndim <= DLG_MAXD. */
int dlg_copy_strided(dlg_handle *h, int elem_size, void *y, const void *x, int ndim,
                     const int64_t *shape, const int64_t *strides);

/* y = x (add 0, any dtype of elem_size bytes) or y += x (add 1, dtype
 * DLG_F32 / DLG_F64) over shape[0..ndim), both read through their own
 * element strides; y's elements distinct. */
int dlg_move(dlg_handle *h, int dtype, int elem_size, int add, int ndim, const int64_t *shape, void *y,
             const int64_t *ystrides, const void *x, const int64_t *xstrides);

/* For launchers compiled outside src_gpu/ (a user's ops, dl/gpu/ew.cuh):
 * the handle's stream (a cudaStream_t), its multiprocessor count, and the
 * check after a launch (DLG_OK, or DLG_ERR with op and the CUDA error in
 * the message). */
void *dlg_stream(dlg_handle *h);
int dlg_sm_count(dlg_handle *h);
int dlg_launch_status(dlg_handle *h, const char *op);
int dlg_error(dlg_handle *h, const char *op, const char *what);
/* A launch by such a launcher: run(args, stream) launches its kernel on the
 * stream, its arguments read from args (bytes, no pointer into the caller's
 * stack). It runs now, or, while h records (dlg_graph_begin), later from a
 * copy of args; either way it is counted and checked as op's. dlg_stream
 * instead issues what was recorded first (the caller's own work comes after
 * it, unrecorded). */
int dlg_launch_user(dlg_handle *h, int (*run)(const void *args, void *stream), const void *args, size_t bytes,
                    const char *op);

/* Row-major GEMM, the same contract as blas.h's dl_gemm:
 * C[m, n] = alpha * op(A) op(B) + beta * C, op(X) = X or X^T (ta, tb != 0),
 * leading dimensions in elements. Batched: `batch` problems whose A, B, C
 * start sa, sb, sc elements apart (0: shared). */
int dlg_gemm(dlg_handle *h, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k,
             double alpha, const void *A, int64_t lda, const void *B, int64_t ldb, double beta,
             void *C, int64_t ldc);
int dlg_gemm_batched(dlg_handle *h, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k,
                     double alpha, const void *A, int64_t lda, int64_t sa, const void *B,
                     int64_t ldb, int64_t sb, double beta, void *C, int64_t ldc, int64_t sc,
                     int64_t batch);

/* >>element-wise ops from the op list (src_gpu/core.cu) -----------------------
 * One launcher per op of expr.h's list, generated from the same text as the
 * CPU loops: `FAM__gpu` where FAM is the op's scalar family (dl__op_relu
 * for the library's relu, the user's name for DL_DEFINE_OP1(name, ...)).
 * A user's op gets its launcher from the same line compiled by nvcc
 * (DL_GPU_DEFINE_OP1 in dl/gpu/ew.cuh).
 *
 * Operand slots of ptr[5]:
 *   DLG_FWD  0 y       1 x0  2 x1 (binary)          y = f(x0, x1)
 *   DLG_BWD  0 gy      1 x0  2 x1  3 gx0  4 gx1     gxk += gy * df/dxk (NULL gxk: skipped)
 *   DLG_JVP  0 ty      1 x0  2 x1  3 tx0  4 tx1     ty = sum_k df/dxk * txk (NULL txk: zero)
 * e->shape is the shape walked (y's, gy's or ty's); e->st[slot] are each
 * operand's element strides aligned to it, 0 along broadcast dimensions.
 * e->contig: every slot is contiguous with that shape (element i at i).
 * e->atomic: some gradient slot is broadcast, so several elements add into
 * one place (atomicAdd; the sum's order, hence its last bits, may vary).
 * p0: the op's number parameter (UNARY_P ops), ignored by the others. */
enum { DLG_FWD = 0, DLG_BWD = 1, DLG_JVP = 2 };
typedef struct dlg_ew {
  int ndim;
  int contig, atomic;
  int64_t n;
  int64_t shape[DLG_MAXD];
  int64_t st[5][DLG_MAXD];
} dlg_ew;
typedef int (*dlg_ew_fn)(dlg_handle *h, int dtype, int mode, const dlg_ew *e, void *const ptr[5],
                         double p0);

/* clamp and where (src_gpu/core.cu), through the same slots:
 *   dlg_clamp_ew  FWD y = clamp(x0, lo, hi); JVP ty = tx0 (slot 3) where lo <= x0 <= hi, else 0;
 *              BWD gx0 (slot 3) += gy where lo <= x0 <= hi
 *   dlg_where_ew  FWD (and JVP, on tangents) y = c (slot 1) != 0 ? a (slot 2) : b (slot 3);
 *              BWD ga (slot 3) += c != 0 ? gy : 0, gb (slot 4) += c != 0 ? 0 : gy */
int dlg_clamp_ew(dlg_handle *h, int dtype, int mode, const dlg_ew *e, void *const ptr[5], double lo, double hi);
int dlg_where_ew(dlg_handle *h, int dtype, int mode, const dlg_ew *e, void *const ptr[5]);

#ifdef __cplusplus
}
#endif

/* The kernel families, one header and one src_gpu/ file each, named after
 * the op family they serve (dl/ops/NAME.h, or dl/optim.h). Their calls
 * follow the conventions above, and:
 * Each call matches the CPU code it serves (named in its comment): same
 * formulas, same precision (sums in double, element math in the dtype), so
 * results agree with the CPU's to rounding; where the comment says
 * "bit-identical" the arithmetic is the CPU's, operation for operation
 * (no fused multiply-add), and so are the results.
 *
 * Index lists built on the host (embedding rows, labels, touched rows of a
 * row-sparse gradient) are passed as HOST int64 arrays: the call copies them
 * into the handle's workspace before its kernels run. The caller checks
 * their range (the CPU's messages); the kernels still never read or write
 * outside the arrays (an index out of range is skipped, as noted).
 *
 * Sizes of 0 are accepted: nothing is written, except by the calls that
 * produce a sum (their value over nothing, 0 / div). */
#include "conv.h"   /* convolution, pooling (src_gpu/conv.cu) */
#include "norm.h"   /* batch, layer, RMS normalisation (src_gpu/norm.cu) */
#include "reduce.h" /* reductions, softmax (src_gpu/reduce.cu) */
#include "loss.h"   /* the losses (src_gpu/loss.cu) */
#include "sparse.h" /* embedding, row scatter, dropout (src_gpu/sparse.cu) */
#include "optim.h"  /* optimizer updates, clipping, regularisation (src_gpu/optim.cu) */
#include "shape.h"  /* index_select, gather, pad (src_gpu/shape.cu) */
#include "rnn.h"    /* the recurrent layers' gates (src_gpu/rnn.cu) */

#endif /* DL_GPU_ABI_H */
