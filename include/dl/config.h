/* dl/config.h - feature macros, DL_API, allocator hooks, version.
 *
 * Everything here can be set before the first #include of a dl header:
 *
 *   DL_API                   storage class of every library function
 *                            (default: static inline; the library is header-only
 *                            and needs no DL_IMPLEMENTATION define)
 *   DL_MALLOC(size, user), DL_REALLOC(ptr, size, user), DL_FREE(ptr, user)
 *                            compile-time allocator hooks. Define all three or
 *                            none (an #error says so otherwise). The run-time
 *                            hooks in dl_ctx_desc override them per context.
 *   DL_USE_OPENBLAS          GEMM through cblas_sgemm/cblas_dgemm (link -lopenblas)
 *   DL_USE_ZLIB              gzip-compressed files in the loaders (link -lz)
 *   DL_NO_STDIO              firmware builds: no printing helpers that need FILE
 *   DL_PARALLEL_THRESHOLD    elements below which fused loops never start an
 *                            OpenMP team (default 32768)
 *   DL_GEMM_PARALLEL_FLOPS   flops below which GEMM never starts a team (blas.h)
 *   DL_MAX_DIMS              is fixed at 8
 *
 * OpenMP is switched on by the compiler's own flag (-fopenmp defines _OPENMP);
 * without it every loop runs on the calling thread and no pragma is emitted.
 */
#ifndef DL_CONFIG_H
#define DL_CONFIG_H

#define DL_VERSION_MAJOR 0
#define DL_VERSION_MINOR 1
#define DL_VERSION_PATCH 0
#define DL_VERSION_STRING "0.1.0"

#ifndef DL_API
#define DL_API static inline
#endif

#if defined(DL_MALLOC) || defined(DL_REALLOC) || defined(DL_FREE)
#if !defined(DL_MALLOC) || !defined(DL_REALLOC) || !defined(DL_FREE)
#error "dl: define all of DL_MALLOC, DL_REALLOC and DL_FREE, or none of them"
#endif
#else
#include <stdlib.h>
#define DL_MALLOC(size, user) ((void)(user), malloc(size))
#define DL_REALLOC(ptr, size, user) ((void)(user), realloc((ptr), (size)))
#define DL_FREE(ptr, user) ((void)(user), free(ptr))
#endif

#ifndef DL_PARALLEL_THRESHOLD
#define DL_PARALLEL_THRESHOLD 32768
#endif

#define DL_MAX_DIMS 8
/* Alignment of every tensor's data and arena allocation, in bytes. */
#define DL_ALIGN 64

#ifdef _OPENMP
#include <omp.h>
#define DL__OMP(text) _Pragma(text)
#else
#define DL__OMP(text)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define DL__LIKELY(x) __builtin_expect(!!(x), 1)
#define DL__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DL__PRINTF(f, a) __attribute__((format(printf, f, a)))
#define DL__NORETURN __attribute__((noreturn))
#else
#define DL__LIKELY(x) (x)
#define DL__UNLIKELY(x) (x)
#define DL__PRINTF(f, a)
#define DL__NORETURN
#endif

/* Functions that nvcc must also compile for the device (scalar math, dual
 * numbers): DL_HD is __host__ __device__ under nvcc, empty elsewhere. */
#ifdef __CUDACC__
#define DL_HD __host__ __device__
#else
#define DL_HD
#endif

/* Small scalar functions that fused loops call per element (vmath, dual
 * numbers, op families): forced inline on gcc/clang so that gcc -O2, which
 * otherwise declines to inline them, still gets a loop it can vectorise. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define DL__VAPI DL_API __attribute__((always_inline))
#else
#define DL__VAPI DL_API
#endif

#ifdef __cplusplus
#define DL__RESTRICT __restrict
#else
#define DL__RESTRICT restrict
#endif

#endif /* DL_CONFIG_H */
