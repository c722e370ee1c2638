/* dl.h - a header-only deep-learning library for C11.
 *
 * Quick start: one file, no build system, no other flag.
 *
 *   #include "dl.h"
 *
 *   int main(void) {
 *     dl_tensor *a = dl_tensor_make(NULL, DL_F32, DL_SHAPE(2, 3));
 *     dl_tensor *y = dl_tensor_make(NULL, DL_F32, DL_SHAPE(2, 3));
 *     dl_rng rng = dl_rng_make(42);
 *     dl_tensor_rand_normal(a, &rng, 0.0, 1.0);
 *     DL_ASSIGN(y, dl_tanh(dl_add(dl_mul(a, 2), 1)));   // one fused loop
 *     dl_tensor_fprint(stdout, y, "y");
 *     dl_tensor_free(a);
 *     dl_tensor_free(y);
 *   }
 *
 *   cc -std=c11 -O2 prog.c -lm                    plain, single-threaded
 *   cc -std=c11 -O3 -march=native -fopenmp prog.c -lm                 threads
 *   cc ... -DDL_USE_OPENBLAS prog.c -lopenblas -lm                   OpenBLAS GEMM
 *
 * Compile once (a program of several files, stb's convention): every file
 * includes dl.h and is compiled with -DDL_LINK; one file, say dl.c, holds
 *
 *   #define DL_IMPLEMENTATION
 *   #include "dl.h"
 *
 * and compiles the library's functions, once (as external symbols). The
 * other files compile none of the library (its functions are declarations
 * to them), so editing one of them rebuilds in about the time it takes to
 * read the headers; DL_ASSIGN expressions and DL_DEFINE_OP ops stay inline
 * in the file that writes them. Every file must see the same configuration
 * macros: put them on the command line. examples/multi/ is such a program.
 * With DL_USE_STB_IMAGE(_WRITE), dl.c also holds stb's implementation.
 *
 * Configuration macros: define them before the first #include of any dl
 * header (-DNAME on the command line does the same). One line each; the
 * header named at the end says more.
 *   Building and linking
 *   DL_IMPLEMENTATION       this file compiles the library (compile once)  config.h
 *   DL_LINK                 this file compiles none of it: it calls the
 *                           DL_IMPLEMENTATION file's functions            config.h
 *   DL_API                  storage class of every library function; default
 *                           static inline (single file, nothing to link)  config.h
 *   DL_USE_OPENBLAS         GEMM through OpenBLAS's cblas (-lopenblas)    blas.h
 *   DL_USE_ZLIB             gzip files in the loaders (-lz)               data.h
 *   DL_USE_STB_IMAGE        image files in the loaders (libstb-dev)       data.h
 *   DL_USE_STB_IMAGE_WRITE  PNG samples and charts (libstb-dev)           report.h
 *   DL_USE_CUDA             the GPU backend: link build/libdlgpu.a, cuBLAS,
 *                           cuDNN and cudart (make gpu)                  gpu.h
 *   DL_USE_MPI              data parallelism over Open MPI (mpicc);
 *                           without it dist.h is a one-process fallback   dist.h
 *   DL_FREESTANDING         dl.h is dl/micro.h alone: inference of an exported
 *                           model on a microcontroller (no OS, no heap)  micro.h
 *   DL_NO_STDIO             no FILE printing helpers (firmware); run.h and
 *                           the printing parts of report.h drop out       config.h
 *   DL_NO_GNU_EXTENSIONS    generic math without gcc/clang's statement
 *                           expressions: portable C11, but its macro text
 *                           then doubles at every level of nesting        dual.h
 *   Memory and limits
 *   DL_MALLOC, DL_REALLOC, DL_FREE  allocator hooks: all three or none;
 *                           a ctx's run-time hooks take precedence        config.h
 *   DL_PARALLEL_THRESHOLD   elements below which a loop never starts an
 *                           OpenMP team (default 32768)                   config.h
 *   DL_GEMM_PARALLEL_FLOPS  flops below which GEMM stays on one thread    blas.h
 *   DL_GEMM_NO_VECTOR_EXT   the built-in GEMM without gcc vector types    blas.h
 *   DL_NAME_MAX             longest parameter name                        layers.h
 *   DL_SAFETENSORS_MAX_HEADER, DL_SAFETENSORS_MAX_DEPTH  limits on a weight
 *                           file's JSON header (refused beyond them)      io.h
 *   DL_IO_BUFFER            bytes of the buffered atomic file writer      file.h
 *   DL_DATA_MAX_BYTES       largest array a loader allocates (4 GiB)      data.h
 *   DL_IMAGE_MAX_PIXELS     largest image decoded (8192 x 8192)           data.h
 *   DL_OPENBLAS_BUFFER_BYTES  address space one OpenBLAS call needs (136
 *                           MiB); a GEMM it does not fit runs built-in    blas.h
 *   DL_OPENBLAS_KEEP_THREADS  leave OpenBLAS's worker threads alone (by
 *                           default an executable starts none)            blas.h
 *   DL_FASHION_MNIST_DIR    where dl_load_fashion_mnist looks by default  data.h
 *   DL_RUN_MAX_EPOCHS       epochs a training history keeps               run.h
 *   DL_DIST_BUCKET_BYTES, DL_DIST_CHECK_EVERY  all-reduce bucket size and
 *                           divergence-check period when a desc says 0   dist.h
 * OpenMP is switched on by the compiler's own flag (-fopenmp); without it
 * every loop runs on the calling thread.
 *
 * Version: DL_VERSION_STRING ("MAJOR.MINOR.PATCH"), DL_VERSION_MAJOR, _MINOR, _PATCH and
 * DL_VERSION_NUMBER (0.2.0 is 200) for #if, in config.h; CHANGELOG.md says what
 * changed. Installed (make install): pkg-config module dl (and dl-openmp,
 * dl-openblas, dl-zlib, dl-stb, dl-mpi, dl-cuda), CMake package dl
 * (find_package(dl CONFIG COMPONENTS ...), target dl::dl).
 *
 * Headers, in the order dl.h includes them; each includes what it needs and
 * compiles alone:
 *   dl/config.h     configuration macros, DL_API and the compile-once modes, version
 *   dl/core.h       dl_status, dl_ctx, arenas, RNG, dtypes, DL_PARALLEL_REGION
 *   dl/file.h       the atomic file writer (dl_atomic_*), dl_io_hooks
 *   dl/device.h     the GPU handle and caching allocator (empty without DL_USE_CUDA)
 *   dl/tensor.h     dl_tensor, views, copies, printing; device tensors, dl_item
 *   dl/vmath.h      vectorisable exp, log, tanh, sigmoid, erf ...
 *   dl/dual.h       dual numbers and the generic scalar math (dl_add, dl_exp ...)
 *   dl/expr.h       DL_ASSIGN fused loops, the element-wise op list, DL_DEFINE_OP*
 *   dl/blas.h       GEMM: OpenBLAS or the built-in kernel
 *   dl/tape.h       reverse mode: dl_tape, dl_backward, custom ops, dl_gradcheck
 *   dl/ops.h        the differentiable ops dl_t_*, by family in dl/ops/:
 *     ops/core.h      element-wise, clamp, where, matmul, linear
 *     ops/shape.h     reshape, transpose, cat, slice, pad ...
 *     ops/reduce.h    sum, mean, max, var, logsumexp, softmax
 *     ops/loss.h      cross-entropy, NLL, MSE, BCE, Huber ...
 *     ops/conv.h      conv1d/2d, pooling
 *     ops/sparse.h    embedding, dropout
 *     ops/norm.h      batch, layer and RMS norm
 *     ops/rnn.h       RNN, LSTM, GRU
 *     ops/attention.h multi-head attention
 *   dl/layers.h     dl_model: named layers with PyTorch's names and layouts
 *   dl/optim.h      optimizers, clipping, regularisation, the five-stage step
 *   dl/gpu.h        models on the GPU (DL_USE_CUDA), the backend's manual
 *   dl/io.h         safetensors weights, checkpoints
 *   dl/data.h       datasets, shuffler, batcher, IDX/CSV/image/text loaders
 *   dl/report.h     progress, metrics, confusion matrix, CSV log, PNG chart
 *   dl/dist.h       data parallelism over MPI (one-process fallback), evaluation
 *   dl/run.h        a training program's flags, epochs, checkpoints, result line
 *   dl/export.h     a trained model as a micro model: f32 or int8, host
 *                   evaluation, C source for firmware (dl_micro_*)
 *   dl/micro.h      the firmware's inference runtime (dlm_*), freestanding
 *   dl/site.h       (last) the caller's file:line in the panics of every
 *                   public op and layer call
 *
 * Conventions: public names start dl_/DL_, private ones dl__/DL__. Functions
 * that can fail for reasons the caller must handle return dl_status (or NULL)
 * and leave a message in the dl_ctx; programmer errors (shape or dtype
 * mismatches) call the ctx's panic handler with the op, shapes and file:line.
 * An op (which returns a tensor) that runs out of memory leaves through the
 * recovery point set with dl_ctx_on_nomem (a longjmp; DL_ERR_NOMEM and the
 * message in the ctx), or panics when there is none (core.h).
 * A NULL dl_ctx * means the defaults everywhere.
 */
#ifndef DL_H
#define DL_H

#ifdef DL_FREESTANDING
/* Firmware: the inference runtime alone (dl/micro.h): no allocator, no
 * stdio, no files, no time, no threads, no thread-local storage. */
#include "dl/micro.h"
#else
#include "dl/config.h"
#include "dl/core.h"
#include "dl/file.h"
#include "dl/tensor.h"
#include "dl/vmath.h"
#include "dl/dual.h"
#include "dl/expr.h"
#include "dl/blas.h"
#include "dl/tape.h"
#include "dl/ops.h"
#include "dl/layers.h"
#include "dl/transformer.h"
#include "dl/optim.h"
#include "dl/gpu.h"
#include "dl/io.h"
#include "dl/data.h"
#include "dl/report.h"
#include "dl/dist.h"
#include "dl/run.h"
#include "dl/export.h"
#include "dl/site.h"
#endif /* DL_FREESTANDING */

#endif /* DL_H */
