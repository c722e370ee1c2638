/* dl/config.h - feature macros, DL_API, allocator hooks, version.
 *
 * Everything here can be set before the first #include of a dl header:
 *
 *   DL_IMPLEMENTATION        this file compiles the library's functions once for
 *                            a program of several files (see >>compile once)
 *   DL_LINK                  this file calls the DL_IMPLEMENTATION file's functions
 *                            and compiles none of the library itself
 *   DL_API                   storage class of every library function
 *                            (default: static inline; the library is header-only
 *                            and needs no define)
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

/* The version: the one place it is written. `make install` reads it from here
 * into dl.pc and the CMake package (dlConfigVersion.cmake); tests/run.sh
 * checks that the four agree and that CHANGELOG.md's newest entry is this
 * one. DL_VERSION_NUMBER is for #if: 0.2.0 is 200, 1.4.12 is 10412. */
#define DL_VERSION_MAJOR 0
/* The minor version: before 1.0, a new one may change the API. */
#define DL_VERSION_MINOR 2
/* The patch version: fixes only. */
#define DL_VERSION_PATCH 0
/* "MAJOR.MINOR.PATCH". */
#define DL_VERSION_STRING "0.2.0"
/* For #if: MAJOR * 10000 + MINOR * 100 + PATCH (0.2.0 is 200). */
#define DL_VERSION_NUMBER (DL_VERSION_MAJOR * 10000 + DL_VERSION_MINOR * 100 + DL_VERSION_PATCH)

/* >>compile once -------------------------------------------------------------
 * How the library's functions are compiled in this file (dl.h's top says
 * how to use them):
 *   default            static inline: the whole library in the one file
 *   DL_IMPLEMENTATION  external definitions: the one file that compiles the
 *                      library for a program of several files
 *   DL_LINK            the library's functions are C99 inline definitions
 *                      that are never emitted or inlined here: every call
 *                      goes to the DL_IMPLEMENTATION file's symbols, so this
 *                      file compiles none of the library's code (only its
 *                      declarations are parsed). Define it for every file
 *                      of the program (-DDL_LINK); the one file that also
 *                      defines DL_IMPLEMENTATION compiles the library.
 * C only: a C++ file compiles the whole library static inline (the
 * default way), whatever it defines.
 *   DL_API    the library's functions (a user may still predefine it)
 *   DL__INL   the small functions that must inline wherever they are called
 *             (scalar math, element loads): the same three ways, inlinable
 *   DL__LOCAL what a user's own file generates (DL_DEFINE_OP*): static
 *             inline in every mode, never shared between files
 *   DL__GLOBAL(decl, init...)  a library object that must be one object in
 *             the program (a layer's vtable, whose address is its type):
 *             static in a single file, defined by the DL_IMPLEMENTATION
 *             file, declared extern in DL_LINK files
 *   DL__GLOBAL_DECL(decl...)  a forward declaration of one, and
 *   DL__GLOBAL_LATE(decl, init...)  the definition of such a one */
/* Where the library's code is compiled: C (gcc, clang) and C++ (g++,
 * clang++) get all of it; nvcc (a .cu file, __CUDACC__) only the scalar
 * math, the dual numbers and the op list that dl/gpu/ew.cuh turns into
 * kernels: the library's host code is linked from the C or C++ side. */
#ifdef __CUDACC__
#define DL__SCALAR_ONLY 1
#endif
/* A C++ file compiles its own copy of the library whatever it defines
 * (dl/layers.h refuses DL_LINK and DL_IMPLEMENTATION there: a layer's
 * type is its vtable's address, and a C++ file's copy would not recognise
 * the layers of the program's C files). */
#if defined(DL_IMPLEMENTATION) && !defined(__cplusplus)
#define DL__MODE_IMPL 1
#elif defined(DL_LINK) && !defined(__cplusplus)
#define DL__MODE_LINK 1
#endif
#ifndef DL_API
#if defined(DL__MODE_IMPL)
#define DL_API
#elif defined(DL__MODE_LINK) && (defined(__GNUC__) || defined(__clang__))
#define DL_API inline __attribute__((noinline)) /* gcc's "inline function given noinline" is off in dl's headers */
#elif defined(DL__MODE_LINK)
#define DL_API inline
#else
#define DL_API static inline
#endif
#endif
#if defined(__cplusplus) && !defined(DL__MODE_IMPL) && !defined(DL__MODE_LINK)
/* C++ has no tentative definitions: a forward-declared object is extern in
 * an unnamed namespace (internal linkage), and defined there by
 * DL__GLOBAL_LATE (outside any extern "C" block: C language linkage would
 * make it one external symbol again). */
#define DL__INL static inline
#define DL__GLOBAL(decl, ...) static decl = __VA_ARGS__
#define DL__GLOBAL_DECL(...) namespace { extern __VA_ARGS__; }
#define DL__GLOBAL_LATE(decl, ...) namespace { decl = __VA_ARGS__; }
#elif defined(DL__MODE_IMPL)
#define DL__INL extern inline
#define DL__GLOBAL(decl, ...) decl = __VA_ARGS__
#define DL__GLOBAL_DECL(...) extern __VA_ARGS__;
#define DL__GLOBAL_LATE(decl, ...) decl = __VA_ARGS__
#elif defined(DL__MODE_LINK)
#define DL__INL inline
#define DL__GLOBAL(decl, ...) extern decl
#define DL__GLOBAL_DECL(...) extern __VA_ARGS__;
#define DL__GLOBAL_LATE(decl, ...) extern decl
#else
#define DL__INL static inline
#define DL__GLOBAL(decl, ...) static decl = __VA_ARGS__
#define DL__GLOBAL_DECL(...) static __VA_ARGS__;
#define DL__GLOBAL_LATE(decl, ...) static decl = __VA_ARGS__
#endif
#define DL__LOCAL static inline
/* The functions a user's DL_DEFINE_OP line generates, which a file may
 * never call (the tape's backward, the jvp, the second-order rule ...):
 * static, and no unused-function warning from clang -Wall. */
#if defined(__GNUC__) || defined(__clang__)
#define DL__LOCAL_GEN static inline __attribute__((unused))
#else
#define DL__LOCAL_GEN static inline
#endif
/* A zero initializer that C11 and C++ both take without a warning. */
#ifdef __cplusplus
#define DL__ZERO_INIT {}
#else
#define DL__ZERO_INIT {0}
#endif
/* Around every header's body: in DL_LINK files gcc would warn that an inline
 * function has the noinline attribute (the point of DL_LINK), and clang that
 * an inline definition calls a static function (the SSE intrinsics: never
 * compiled here, since these definitions are never emitted or inlined); the
 * warnings are switched off inside dl's headers only. */
#if defined(DL__MODE_LINK) && defined(__clang__)
#define DL__HEADER_BEGIN _Pragma("clang diagnostic push") _Pragma("clang diagnostic ignored \"-Wstatic-in-inline\"")
#define DL__HEADER_END _Pragma("clang diagnostic pop")
#elif defined(DL__MODE_LINK) && defined(__GNUC__)
#define DL__HEADER_BEGIN _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wattributes\"")
#define DL__HEADER_END _Pragma("GCC diagnostic pop")
#else
#define DL__HEADER_BEGIN
#define DL__HEADER_END
#endif

#if defined(DL_MALLOC) || defined(DL_REALLOC) || defined(DL_FREE)
#if !defined(DL_MALLOC) || !defined(DL_REALLOC) || !defined(DL_FREE)
#error "dl: define all of DL_MALLOC, DL_REALLOC and DL_FREE, or none of them"
#endif
#else
#include <stdlib.h>
/* The default allocator hooks, the C library's malloc: DL_MALLOC(size,
 * user) allocates (user is the ctx's allocator argument, unused here),
 * DL_REALLOC(ptr, size, user) resizes, DL_FREE(ptr, user) frees. Define all
 * three before the first #include to replace them, or none. */
#define DL_MALLOC(size, user) ((void)(user), malloc(size))
/* DL_REALLOC(ptr, size, user): the default realloc hook (see DL_MALLOC). */
#define DL_REALLOC(ptr, size, user) ((void)(user), realloc((ptr), (size)))
/* DL_FREE(ptr, user): the default free hook (see DL_MALLOC). */
#define DL_FREE(ptr, user) ((void)(user), free(ptr))
#endif

#ifndef DL_PARALLEL_THRESHOLD
/* Elements below which a library loop never starts an OpenMP team (default
 * 32768; dl_ctx_desc.parallel_threshold overrides it per ctx). */
#define DL_PARALLEL_THRESHOLD 32768
#endif

/* Most dimensions a tensor has (shape and strides are arrays of this size). */
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
/* Per-thread storage (blas.h's packing buffers, report.h's PNG encoder). */
#if defined(__cplusplus)
#define DL__TLS thread_local
#else
#define DL__TLS _Thread_local
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
#define DL__VAPI DL__INL __attribute__((always_inline))
#define DL__LOCAL_VAPI DL__LOCAL __attribute__((always_inline))
#else
#define DL__VAPI DL__INL
#define DL__LOCAL_VAPI DL__LOCAL
#endif

/* DL__STATIC_ASSERT(cond, message): C11's _Static_assert, C++'s static_assert. */
#ifdef __cplusplus
#define DL__STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define DL__STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#ifdef __cplusplus
#define DL__RESTRICT __restrict
#else
#define DL__RESTRICT restrict
#endif

#endif /* DL_CONFIG_H */
