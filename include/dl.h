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
 * Configuration macros (define before including; see dl/config.h):
 *   DL_API, DL_MALLOC/DL_REALLOC/DL_FREE (all or none), DL_USE_OPENBLAS,
 *   DL_USE_ZLIB, DL_USE_STB_IMAGE, DL_USE_STB_IMAGE_WRITE, DL_NO_STDIO,
 *   DL_PARALLEL_THRESHOLD.
 *
 * The headers, each using only those above it:
 *   dl/config.h   feature macros, allocator hooks, version
 *   dl/core.h     dl_status, dl_ctx (allocator, panic handler, threads,
 *                 denormals), arenas, the counter-based RNG, dtypes
 *   dl/tensor.h   dl_tensor: n-d shape/strides, views, copies, printing
 *   dl/vmath.h    vectorisable exp/log/tanh/sigmoid/erf with stated accuracy
 *   dl/dual.h     dual numbers and the generic scalar math (dl_exp, dl_add, ...)
 *   dl/expr.h     DL_ASSIGN fused loops and the element-wise op list
 *   dl/blas.h     GEMM: OpenBLAS or the built-in blocked kernel
 *   dl/tape.h     reverse-mode tape, no-grad, custom ops, tangents, gradcheck
 *   dl/ops.h      the differentiable ops dl_t_NAME (families in dl/ops/)
 *   dl/layers.h   dl_model: layers with PyTorch-named parameters
 *   dl/optim.h    optimizers, clipping, regularisation, the training step
 *   dl/data.h     datasets, shuffler, batcher, IDX/CSV/image/text loaders,
 *                 augmentation (DL_USE_ZLIB: gzip, -lz; DL_USE_STB_IMAGE: images)
 *   dl/io.h       safetensors weights, checkpoints, atomic writes
 *   dl/report.h   progress line, accuracy and confusion matrix, CSV log, PNG
 *                 chart (DL_USE_STB_IMAGE_WRITE: the PNG)
 *   dl/run.h      a training program's flags, --load/--resume, per-epoch
 *                 checkpoints, history, evaluation, the result line
 *
 * Conventions: public names start dl_/DL_, private ones dl__/DL__. Functions
 * that can fail for reasons the caller must handle return dl_status (or NULL)
 * and leave a message in the dl_ctx; programmer errors (shape or dtype
 * mismatches) call the ctx's panic handler with the op, shapes and file:line.
 * A NULL dl_ctx * means the defaults everywhere.
 */
#ifndef DL_H
#define DL_H

#include "dl/config.h"
#include "dl/core.h"
#include "dl/tensor.h"
#include "dl/vmath.h"
#include "dl/dual.h"
#include "dl/expr.h"
#include "dl/blas.h"
#include "dl/tape.h"
#include "dl/ops.h"
#include "dl/layers.h"
#include "dl/optim.h"
#include "dl/gpu.h"
#include "dl/io.h"
#include "dl/data.h"
#include "dl/report.h"
#include "dl/dist.h"
#include "dl/run.h"

#endif /* DL_H */
