/* dl/blas.h - GEMM: OpenBLAS (cblas_sgemm / cblas_dgemm) or a built-in
 * cache-blocked kernel.
 *
 *   C = alpha * op(A) * op(B) + beta * C,   op(X) = X or X^T,  all row-major
 *
 *   op(A) is (M,K): A is (M,K) with lda >= max(1,K), or (K,M) when ta with lda >= max(1,M)
 *   op(B) is (K,N): B is (K,N) with ldb >= max(1,N), or (N,K) when tb with ldb >= max(1,K)
 *   C is (M,N) with ldc >= max(1,N)
 *
 * Element (i,j) of a row-major matrix X with leading dimension ldx lives at
 * X[i * ldx + j]; ldx larger than the row length describes a view into a
 * wider matrix. The caller owns every buffer; nothing is kept after a call.
 *
 * Contract shared by every entry point:
 *   - beta == 0 means C is only written, never read (NaN or garbage in C does
 *     not reach the result). alpha == 0 or K == 0 leaves A and B unread and
 *     sets C = beta * C. M == 0 or N == 0 (or batch == 0) does nothing.
 *   - Negative sizes, a trans flag other than DL_NOTRANS / DL_TRANS, leading
 *     dimensions too small for the row-major shapes above, NULL matrices with
 *     nonzero sizes, negative batch strides and batches whose C matrices
 *     overlap are programmer errors: DL_PANIC names the entry point
 *     ("dl_gemm_f32", ...) and the sizes.
 *   - ctx may be NULL (defaults). ctx's allocator supplies the packing
 *     buffers and ctx's thread count bounds the OpenMP team. The only state
 *     kept between calls is the team guard's record in ctx (core.h). If the
 *     packing buffers cannot be allocated, the product is still computed by
 *     a plain loop; the failure is logged and left in ctx's status.
 *
 * Entry points:
 *   dl_gemm_f32 / dl_gemm_f64                  OpenBLAS when DL_USE_OPENBLAS is
 *                                              defined (sizes above INT32_MAX go
 *                                              to the built-in), else built-in
 *   dl_gemm_batched_f32 / dl_gemm_batched_f64  batch independent products,
 *                                              matrix b at X + b * strideX
 *   dl_gemm_builtin_f32 / dl_gemm_builtin_f64  always the built-in kernel
 *   dl_gemm_backend()                          which of the two dl_gemm_<sfx>
 *                                              uses: under DL_USE_OPENBLAS the
 *                                              built-in when OpenBLAS runs
 *                                              kernels older than this build's
 *                                              (a CPU it does not know)
 *
 * The built-in kernel (BLIS-style): op(A) is packed into MR-tall and op(B)
 * into NR-wide micro-panels (zero-padded, so edge tiles compute a full tile
 * and store only the part inside C), blocked MC x KC for L2 and KC x NC, and
 * an MR x NR register-blocked micro-kernel runs over them. Serially (and
 * for batches of at least two items per thread) each thread does whole
 * items with its own packing buffers. With OpenMP (-fopenmp), 2*M*N*K*batch
 * above DL_GEMM_PARALLEL_FLOPS and fewer than two items per thread: one item
 * of at most DL_GEMM_SPLIT_FLOPS is cut into one block of C per thread, each
 * block the serial algorithm (dl__gemm_split); otherwise the team
 * splits C into tiles handed out with schedule(dynamic), packing each panel
 * of op(A) and op(B) once into a shared buffer (its first user packs it; no
 * thread waits for another), with one barrier at the end (and one per
 * further batch item, or K slab when the packed operands pass 32 MiB); a
 * thread that loses its core holds up only the tile it is on. Below the
 * threshold, or when already
 * inside a parallel region, the calling thread does everything and no team
 * starts. Every thread it runs on flushes denormals unless ctx keeps them
 * (the OpenBLAS path sets the mode of the calling thread around the call).
 *
 * Shared machines: GOMP's default wait policy makes a thread that reaches a
 * barrier spin for milliseconds, which keeps the scheduler from moving a
 * team thread that lost its core to another process onto the spinning
 * core: beside busy processes 2-thread GEMMs ran 0.05-0.7x as fast as 1
 * thread. The team guard (core.h) measures whether each parallel GEMM's team
 * saved time and runs the ctx's next GEMMs on one thread for a while when it
 * did not (then 0.98-1.00x beside a busy process, MLP shapes).
 * OMP_WAIT_POLICY=passive in the environment helps further.
 *
 * Configuration (define before including):
 *   DL_GEMM_PARALLEL_FLOPS   2*M*N*K*batch above which the built-in kernel
 *                            uses OpenMP (default 1000000)
 *   DL_GEMM_NO_VECTOR_EXT    use the plain-C micro-kernel even where GCC
 *                            vector extensions are available
 *
 * Micro-kernel: with GCC or clang, MR rows of two vectors each held in
 * registers (GCC vector extensions: 64-byte vectors with AVX-512, 32 with AVX,
 * 16 otherwise); elsewhere, or with DL_GEMM_NO_VECTOR_EXT, a plain-C MR x NR
 * accumulator array. Results agree with a naive loop to rounding; the
 * summation order (and FMA contraction) differs from OpenBLAS.
 */
#ifndef DL_BLAS_H
#define DL_BLAS_H

#include "core.h"
#include "tensor.h"
DL__HEADER_BEGIN

#ifdef DL_USE_OPENBLAS
/* OpenBLAS's cblas.h would include <complex.h> in C, which defines the macro
 * I and breaks any variable of that name in the including program. dl.h
 * calls only the real GEMMs, so ask for OpenBLAS's struct complex types
 * instead. (A program that needs C99-complex cblas prototypes includes
 * <cblas.h> itself before dl.h.) */
#ifndef FORCE_OPENBLAS_COMPLEX_STRUCT
#define FORCE_OPENBLAS_COMPLEX_STRUCT
#define DL__GEMM_FORCED_COMPLEX_STRUCT
#endif
#include <cblas.h>
#ifdef DL__GEMM_FORCED_COMPLEX_STRUCT
#undef FORCE_OPENBLAS_COMPLEX_STRUCT
#undef DL__GEMM_FORCED_COMPLEX_STRUCT
#endif

/* OpenBLAS's pthread build (Debian's default) starts a worker per core when
 * it is loaded, and each worker at once maps its 128 MiB buffer, retrying
 * for ever when that fails: under `ulimit -v` a training program printed its
 * out-of-memory message and then hung in exit, joining a worker stuck in
 * blas_memory_alloc. The library never uses those workers (it runs OpenBLAS
 * on one thread per call, see dl__openblas_single). So in an executable on
 * Linux a pre-init function, which runs before any shared library's
 * constructor, sets OpenBLAS's thread count (its exported blas_cpu_number and
 * blas_num_threads, found weakly: another BLAS has neither and nothing
 * happens) to 1 before OpenBLAS starts: no worker starts. That holds when the
 * environment names a count (OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS) too:
 * the library brings OpenBLAS to one thread at its first GEMM whatever the
 * variable says, and workers started for it only cost. Each spins, calling
 * sched_yield, for about 0.07 s after it starts, taking a core from the
 * team: with OPENBLAS_NUM_THREADS=2 (as bench/run_train.sh sets it for both
 * libraries) fashion_cnn trained 4100-4670 samples/s on 2 threads against
 * 5090-5250 without it, 32 steps, alternated. A program that wants
 * OpenBLAS's threads for its own cblas calls asks for them with
 * openblas_set_num_threads, which starts them. (Setting the variable here
 * would not do: the C library resets the environment after pre-init.)
 * DL_OPENBLAS_KEEP_THREADS leaves it out; a shared library has no pre-init
 * and gets OpenBLAS as its program started it. */
#if defined(__linux__) && defined(__GNUC__) && (defined(__PIE__) || !defined(__PIC__)) && \
    !defined(DL_OPENBLAS_KEEP_THREADS) && !defined(DL__OPENBLAS_PREINIT)
#define DL__OPENBLAS_PREINIT
#ifdef __cplusplus
extern "C" {
#endif
extern int blas_cpu_number __attribute__((weak));
extern int blas_num_threads __attribute__((weak));
#ifdef __cplusplus
}
#endif
static void dl__openblas_preinit(int argc, char **argv, char **envp) {
  (void)argc;
  (void)argv;
  (void)envp;
  if (&blas_cpu_number && &blas_num_threads && blas_cpu_number == 0 && blas_num_threads == 0)
    blas_cpu_number = blas_num_threads = 1;
}
__attribute__((section(".preinit_array"), used)) static void (*dl__openblas_preinit_p)(int, char **, char **) =
    dl__openblas_preinit;
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* >>gemm-api --------------------------------------------------------------- */

/* Whether a GEMM operand is used as stored (DL_NOTRANS) or transposed
 * (DL_TRANS). */
typedef enum dl_trans { DL_NOTRANS = 0, DL_TRANS = 1 } dl_trans;

#ifndef DL_GEMM_PARALLEL_FLOPS
/* Flops (2 m n k) below which the built-in GEMM stays on the calling
 * thread. */
#define DL_GEMM_PARALLEL_FLOPS 1000000
#endif

/* >>gemm-config ------------------------------------------------------------ */

/* Micro-tile MR x NR (NR = two vectors; MR rows of two accumulators fill
 * most of the vector registers) and cache blocks MC x KC of packed A and
 * KC x NC of packed B, in elements; MC is a multiple of MR and NC of NR. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(DL_GEMM_NO_VECTOR_EXT)
#define DL__GEMM_VEC 1
#if defined(__AVX512F__)
#define DL__GEMM_VBYTES 64
#define DL__GEMM_MR 12
#elif defined(__AVX__)
#define DL__GEMM_VBYTES 32
#define DL__GEMM_MR 6
#else
#define DL__GEMM_VBYTES 16
#define DL__GEMM_MR 6
#endif
typedef float dl__gemm_vf32 __attribute__((vector_size(DL__GEMM_VBYTES)));
typedef double dl__gemm_vf64 __attribute__((vector_size(DL__GEMM_VBYTES)));
#define DL__GEMM_NR_F32 (2 * DL__GEMM_VBYTES / 4)
#define DL__GEMM_NR_F64 (2 * DL__GEMM_VBYTES / 8)
#else
#define DL__GEMM_VEC 0
#define DL__GEMM_MR 4
#define DL__GEMM_NR_F32 8
#define DL__GEMM_NR_F64 8
#endif

/* Measured on a Zen 4 core (AVX-512, 32 KiB L1d, 1 MiB L2): a deep KC
 * amortises the C tile's loads and stores and the packing (the KC x NR
 * micro-panel of B streams from L2 well); with AVX-512 an MC x KC block of
 * packed A is 384 KiB for both types (L2) and a KC x NC panel of B 4 MiB. */
#define DL__GEMM_KC 512
#define DL__GEMM_MC_F32 (DL__GEMM_MR * 16)
#define DL__GEMM_MC_F64 (DL__GEMM_MR * 8)
#define DL__GEMM_NC_F32 (DL__GEMM_NR_F32 * 64)
#define DL__GEMM_NC_F64 (DL__GEMM_NR_F64 * 64)
/* Transposing packs go PACK_STEP values of K at a time, so the lines they
 * write stay in L1 between the rows they read. */
#define DL__GEMM_PACK_STEP 16

/* Unroll the next loop completely (GCC leaves short loops rolled at -O2,
 * which would keep the accumulators in memory; clang unrolls them itself;
 * nvcc's front end does not know the pragma). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define DL__GEMM_UNROLL _Pragma("GCC unroll 16")
/* ISO C modes (-std=c11) turn off FMA contraction in GCC; the micro-kernel
 * wants c += a * b fused where the target has FMA. */
#define DL__GEMM_CONTRACT __attribute__((optimize("fp-contract=fast")))
#else
#define DL__GEMM_UNROLL
#define DL__GEMM_CONTRACT
#endif

/* >>gemm-types ------------------------------------------------------------- */

/* One (possibly batched) GEMM with the arguments already checked. Matrices
 * are byte pointers so the driver is shared by f32 and f64; leading
 * dimensions and strides are in elements. */
typedef struct dl__gemm_problem {
  dl_trans ta, tb;
  int64_t M, N, K, batch;
  double alpha, beta; /* exact for f32 values too */
  const unsigned char *A, *B;
  unsigned char *C;
  int64_t lda, ldb, ldc;
  int64_t sa, sb, sc; /* batch strides */
} dl__gemm_problem;

/* Pack rows [i0, i0+mc) x columns [p0, p0+kc) of op(A) into MR-tall
 * micro-panels: panel r holds, for p = 0..kc-1, the MR values
 * op(A)(i0 + r*MR + i, p0 + p) (zero past row M). */
typedef void (*dl__gemm_pack_a_fn)(dl_trans ta, const void *A, int64_t lda, int64_t i0,
                                   int64_t mc, int64_t p0, int64_t kc, void *dst);
/* Pack rows [p0, p0+kc) x columns [j0, j0+nc) of op(B) into NR-wide
 * micro-panels: panel c holds, for p = 0..kc-1, the NR values
 * op(B)(p0 + p, j0 + c*NR + j) (zero past column N). */
typedef void (*dl__gemm_pack_b_fn)(dl_trans tb, const void *B, int64_t ldb, int64_t p0,
                                   int64_t kc, int64_t j0, int64_t nc, void *dst);
/* C(m x n tile at C, ldc) = alpha * a·b + beta * C, where a is one packed
 * MR x kc micro-panel, b one packed kc x NR micro-panel, m <= MR, n <= NR;
 * C is not read when beta == 0. */
typedef void (*dl__gemm_kernel_fn)(int64_t kc, const void *a, const void *b, double alpha,
                                   double beta, void *C, int64_t ldc, int m, int n);

/* What the driver needs to know about one element type. */
typedef struct dl__gemm_kind {
  size_t esz;
  int64_t mr, nr, mc, kc, nc;
  dl__gemm_pack_a_fn pack_a;
  dl__gemm_pack_b_fn pack_b;
  dl__gemm_kernel_fn kernel;
  /* C columns [j0, j1) of batch item bi, every row, without packing, for
   * op(A) = A (M,K) and op(B) = B^T with B (N,K): Linear's forward X W^T
   * (dl__gemm_dot_fits says when); NULL where the build has none */
  void (*dot)(const struct dl__gemm_problem *pr, int64_t bi, int64_t j0, int64_t j1);
} dl__gemm_kind;

/* Transposing a 4x4 block of floats in registers, for the packs that read
 * op(A) or op(B) across its rows (A not transposed, B transposed: both
 * operands of X W^T): dst row u, at dst + u * ldd, gets element u of the
 * four rows src + t * lds. Scalar, those packs moved one element per
 * cycle; this moves four. Where the compiler has no __builtin_shufflevector
 * (gcc before 12) DL__GEMM_TR4 is 0 and the scalar loops do it all. */
#if defined(__has_builtin) && !defined(DL_GEMM_NO_VECTOR_EXT) && !defined(__CUDACC__)
#if __has_builtin(__builtin_shufflevector) && (defined(__GNUC__) || defined(__clang__))
#define DL__GEMM_TR4 1
#endif
#endif
#ifndef DL__GEMM_TR4
#define DL__GEMM_TR4 0
#else
typedef float dl__gemm_v4f __attribute__((vector_size(16)));
DL__INL void dl__gemm_tr4_f32(const float *src, int64_t lds, float *dst, int64_t ldd) {
  dl__gemm_v4f x0, x1, x2, x3, t0, t1, t2, t3, y;
  memcpy(&x0, src, sizeof x0);
  memcpy(&x1, src + lds, sizeof x1);
  memcpy(&x2, src + 2 * lds, sizeof x2);
  memcpy(&x3, src + 3 * lds, sizeof x3);
  t0 = __builtin_shufflevector(x0, x1, 0, 4, 1, 5);
  t1 = __builtin_shufflevector(x0, x1, 2, 6, 3, 7);
  t2 = __builtin_shufflevector(x2, x3, 0, 4, 1, 5);
  t3 = __builtin_shufflevector(x2, x3, 2, 6, 3, 7);
  y = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
  memcpy(dst, &y, sizeof y);
  y = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
  memcpy(dst + ldd, &y, sizeof y);
  y = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
  memcpy(dst + 2 * ldd, &y, sizeof y);
  y = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
  memcpy(dst + 3 * ldd, &y, sizeof y);
}
#endif

#if DL__GEMM_TR4
/* (the casts only matter to the double instantiation, where the call is dead code) */
#define DL__GEMM_TR4_CALL(src, lds, dst, ldd) \
  dl__gemm_tr4_f32((const float *)(const void *)(src), (lds), (float *)(void *)(dst), (ldd))
#else
#define DL__GEMM_TR4_CALL(src, lds, dst, ldd) ((void)(src), (void)(dst))
#endif

/* A last micro-panel of B narrower than NR, one row: d[0, NR) = s[0, cols)
 * then zeros, by two masked loads (AVX-512; the lanes past cols are not
 * read). Element by element, with the zeros stored down the panel's
 * columns, the 4-wide last panel of a 196-wide B (a 14 x 14 convolution's
 * positions) took as long to pack as the six full ones (bench: 17 us
 * against 9 for 288 x 196). DL__GEMM_TAIL is 0 where there is no such
 * copy (the loops below do it). */
#if DL__GEMM_VEC && DL__GEMM_VBYTES == 64 && !defined(__CUDACC__)
#include <immintrin.h>
#define DL__GEMM_TAIL 1
DL__INL void dl__gemm_tail_f32(float *d, const float *s, int64_t cols) {
  const unsigned m = (1u << cols) - 1u; /* cols < NR = 32 */
  _mm512_storeu_ps(d, _mm512_maskz_loadu_ps((__mmask16)(m & 0xffffu), s));
  _mm512_storeu_ps(d + 16, _mm512_maskz_loadu_ps((__mmask16)(m >> 16), s + 16));
}
DL__INL void dl__gemm_tail_f64(double *d, const double *s, int64_t cols) {
  const unsigned m = (1u << cols) - 1u; /* cols < NR = 16 */
  _mm512_storeu_pd(d, _mm512_maskz_loadu_pd((__mmask8)(m & 0xffu), s));
  _mm512_storeu_pd(d + 8, _mm512_maskz_loadu_pd((__mmask8)(m >> 8), s + 8));
}
#else
#define DL__GEMM_TAIL 0
DL__INL void dl__gemm_tail_f32(float *d, const float *s, int64_t cols) { (void)d, (void)s, (void)cols; }
DL__INL void dl__gemm_tail_f64(double *d, const double *s, int64_t cols) { (void)d, (void)s, (void)cols; }
#endif

/* >>gemm-kernels ----------------------------------------------------------- */

/* Row counts of the short-panel kernels (used where MR > 8; capped at MR so the
 * dead branches of other builds stay valid). */
#define DL__GEMM_RM4 (DL__GEMM_MR < 4 ? DL__GEMM_MR : 4)
#define DL__GEMM_RM8 (DL__GEMM_MR < 8 ? DL__GEMM_MR : 8)

/* The micro-kernel's body, defined one way per build (a preprocessor #if
 * cannot stand inside the generator below): the body of
 * dl__gemm_kernel_<sfx>, whose variables (kc, a, b, alpha, beta, C, ldc, m,
 * n, p, i and the enum MR, NR) it uses. T is the element type, VT its vector
 * type and sfx the suffix of the store it ends with. */
#if DL__GEMM_VEC
/* The m x n corner of C that the kernel will write, asked for (for writing)
 * before its loop over K, so that the lines arrive while it computes:
 * a C block not in cache (a weight's gradient, 256 x 784 floats, last
 * touched by the previous step's optimizer) otherwise cost a miss per row
 * at the end of every tile, with only 64 steps of K between them. */
#define DL__GEMM_PREFETCH_C(T)                                                                     \
  for (i = 0; i < m; i++) {                                                                        \
    __builtin_prefetch(C + i * ldc, 1, 3);                                                         \
    if ((size_t)n * sizeof(T) > 64) __builtin_prefetch(C + i * ldc + 64 / sizeof(T), 1, 3);       \
    __builtin_prefetch(C + i * ldc + n - 1, 1, 3);                                                 \
  }
/* RM (<= MR) rows of two vector accumulators (L lanes each) in registers;
 * the packed panel of A is MR tall whatever RM is. */
#define DL__GEMM_KERNEL_BODY(T, sfx, VT, RM)                                                       \
  enum { L = DL__GEMM_VBYTES / sizeof(T) };                                                        \
  const VT zero = {0};                                                                             \
  VT c0[RM], c1[RM];                                                                               \
  DL__GEMM_PREFETCH_C(T)                                                                           \
  DL__GEMM_UNROLL                                                                                  \
  for (i = 0; i < RM; i++) c0[i] = c1[i] = zero;                                                   \
  for (p = 0; p < kc; p++, a += MR, b += NR) {                                                     \
    VT b0, b1;                                                                                     \
    memcpy(&b0, b, sizeof b0);                                                                     \
    memcpy(&b1, b + L, sizeof b1);                                                                 \
    DL__GEMM_UNROLL                                                                                \
    for (i = 0; i < RM; i++) {                                                                     \
      VT ai = a[i] - zero; /* broadcast (x - 0 == x for every x) */                                \
      c0[i] += ai * b0;                                                                            \
      c1[i] += ai * b1;                                                                            \
    }                                                                                              \
  }                                                                                                \
  if (m == RM && n == NR) {                                                                        \
    DL__GEMM_UNROLL                                                                                \
    for (i = 0; i < RM; i++) {                                                                     \
      T *c = C + i * ldc;                                                                          \
      VT r0 = c0[i] * alpha, r1 = c1[i] * alpha;                                                   \
      if (beta != (T)0) {                                                                          \
        VT x0, x1;                                                                                 \
        memcpy(&x0, c, sizeof x0);                                                                 \
        memcpy(&x1, c + L, sizeof x1);                                                             \
        r0 += beta * x0;                                                                           \
        r1 += beta * x1;                                                                           \
      }                                                                                            \
      memcpy(c, &r0, sizeof r0);                                                                   \
      memcpy(c + L, &r1, sizeof r1);                                                               \
    }                                                                                              \
  } else {                                                                                         \
    T t[MR * NR];                                                                                  \
    for (i = 0; i < RM; i++) {                                                                     \
      memcpy(t + i * NR, &c0[i], sizeof c0[i]);                                                    \
      memcpy(t + i * NR + L, &c1[i], sizeof c1[i]);                                                \
    }                                                                                              \
    dl__gemm_store_##sfx(t, alpha, beta, C, ldc, m, n);                                            \
  }
/* The same with one vector accumulator a row, for a panel of at most L
 * columns (N's last, N = 196 = 6 x 32 + 4: half the work of its 32
 * columns). The packed panel of B is NR wide whatever it holds. */
#define DL__GEMM_KERNEL_BODY1(T, sfx, VT, RM)                                                      \
  enum { L = DL__GEMM_VBYTES / sizeof(T) };                                                        \
  const VT zero = {0};                                                                             \
  VT c0[RM];                                                                                       \
  DL__GEMM_PREFETCH_C(T)                                                                           \
  DL__GEMM_UNROLL                                                                                  \
  for (i = 0; i < RM; i++) c0[i] = zero;                                                           \
  for (p = 0; p < kc; p++, a += MR, b += NR) {                                                     \
    VT b0;                                                                                         \
    memcpy(&b0, b, sizeof b0);                                                                     \
    DL__GEMM_UNROLL                                                                                \
    for (i = 0; i < RM; i++) c0[i] += (a[i] - zero) * b0;                                          \
  }                                                                                                \
  {                                                                                                \
    T t[MR * NR];                                                                                  \
    for (i = 0; i < RM; i++) memcpy(t + i * NR, &c0[i], sizeof c0[i]);                             \
    dl__gemm_store_##sfx(t, alpha, beta, C, ldc, m, n);                                            \
  }
#else
/* A plain-C MR x NR accumulator array (VT and RM are not used). */
#define DL__GEMM_KERNEL_BODY(T, sfx, VT, RM)                                                       \
  T t[MR * NR];                                                                                    \
  int j;                                                                                           \
  for (i = 0; i < MR * NR; i++) t[i] = (T)0;                                                       \
  for (p = 0; p < kc; p++, a += MR, b += NR)                                                       \
    for (i = 0; i < MR; i++) {                                                                     \
      const T ai = a[i];                                                                           \
      for (j = 0; j < NR; j++) t[i * NR + j] += ai * b[j];                                         \
    }                                                                                              \
  dl__gemm_store_##sfx(t, alpha, beta, C, ldc, m, n);
#define DL__GEMM_KERNEL_BODY1(T, sfx, VT, RM) DL__GEMM_KERNEL_BODY(T, sfx, VT, RM) /* (not reached) */
#endif

/* Everything the driver needs for one element type, written once and
 * instantiated for float and double below. DL__GEMM_DEFINE(T, sfx, NRT, MCT,
 * NCT, VT) defines dl__gemm_pack_a_<sfx>, dl__gemm_pack_b_<sfx>,
 * dl__gemm_store_<sfx>, dl__gemm_kernel_<sfx>, dl__gemm_scale_<sfx>,
 * dl__gemm_naive_<sfx> and dl__gemm_kind_<sfx>: T is the element type, sfx
 * its suffix (f32, f64), NRT the micro-tile width, MCT and NCT the cache
 * blocks of that type (MR and KC are shared), VT its vector type (only named
 * under DL__GEMM_VEC). Constants are written (T)0, (T)1 so float code stays
 * in float. */
#define DL__GEMM_DEFINE(T, sfx, NRT, MCT, NCT, VT)                                                 \
  /* dl__gemm_pack_a_fn for T: MR-tall panels, rows past mc zero (a short                         \
   * last panel zeroed whole first: stores down its columns cost more). */                         \
  DL_API void dl__gemm_pack_a_##sfx(dl_trans ta, const void *A_, int64_t lda, int64_t i0,          \
                                    int64_t mc, int64_t p0, int64_t kc, void *dst_) {              \
    const int64_t MR = DL__GEMM_MR;                                                                \
    const T *A = (const T *)A_;                                                                    \
    T *d = (T *)dst_;                                                                              \
    int64_t r, i, p;                                                                               \
    for (r = 0; r < mc; r += MR, d += MR * kc) {                                                   \
      int64_t rows = mc - r < MR ? mc - r : MR;                                                    \
      if (rows < MR) memset(d, 0, sizeof(T) * (size_t)(MR * kc)); /* rows past mc, in one pass */  \
      if (ta == DL_NOTRANS) { /* A is (M,K): row i0+r+i is contiguous in p */                      \
        int64_t q;                                                                                 \
        for (q = 0; q < kc; q += DL__GEMM_PACK_STEP) { /* keep the written lines in L1 */          \
          const int64_t qe = kc - q < DL__GEMM_PACK_STEP ? kc - q : DL__GEMM_PACK_STEP;            \
          i = 0;                                                                                   \
          if (DL__GEMM_TR4 && sizeof(T) == 4 && qe == DL__GEMM_PACK_STEP) /* 4x4 blocks */         \
            for (; i + 4 <= rows; i += 4)                                                          \
              for (p = 0; p < qe; p += 4)                                                          \
                DL__GEMM_TR4_CALL(A + (i0 + r + i) * lda + p0 + q + p, lda, d + (q + p) * MR + i, MR); \
          for (; i < rows; i++) {                                                                  \
            const T *s = A + (i0 + r + i) * lda + p0 + q;                                          \
            T *o = d + q * MR + i;                                                                 \
            for (p = 0; p < qe; p++) o[p * MR] = s[p];                                             \
          }                                                                                        \
        }                                                                                          \
      } else if (rows == MR) { /* A is (K,M): the MR values for one p are contiguous */            \
        for (p = 0; p < kc; p++)                                                                   \
          memcpy(d + p * MR, A + (p0 + p) * lda + i0 + r, sizeof(T) * DL__GEMM_MR);                \
      } else {                                                                                     \
        for (p = 0; p < kc; p++) {                                                                 \
          const T *s = A + (p0 + p) * lda + i0 + r;                                                \
          for (i = 0; i < rows; i++) d[p * MR + i] = s[i];                                         \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* dl__gemm_pack_b_fn for T: NR-wide panels, columns past nc zero. */                            \
  DL_API void dl__gemm_pack_b_##sfx(dl_trans tb, const void *B_, int64_t ldb, int64_t p0,          \
                                    int64_t kc, int64_t j0, int64_t nc, void *dst_) {              \
    const int64_t NR = NRT;                                                                        \
    const T *B = (const T *)B_;                                                                    \
    T *d = (T *)dst_;                                                                              \
    int64_t c, j, p;                                                                               \
    for (c = 0; c < nc; c += NR, d += NR * kc) {                                                   \
      int64_t cols = nc - c < NR ? nc - c : NR;                                                    \
      if (tb == DL_NOTRANS && cols == NR) { /* B is (K,N): NR values per p are contiguous */       \
        for (p = 0; p < kc; p++)                                                                   \
          memcpy(d + p * NR, B + (p0 + p) * ldb + j0 + c, sizeof(T) * NRT);                        \
      } else if (tb == DL_NOTRANS && DL__GEMM_TAIL) { /* the last panel, rows zero-filled */      \
        for (p = 0; p < kc; p++) dl__gemm_tail_##sfx(d + p * NR, B + (p0 + p) * ldb + j0 + c, cols); \
        continue;                                                                                  \
      } else if (tb == DL_NOTRANS) {                                                               \
        memset(d, 0, sizeof(T) * (size_t)(NR * kc)); /* then the values: no stores down columns */ \
        for (p = 0; p < kc; p++) {                                                                 \
          const T *s = B + (p0 + p) * ldb + j0 + c;                                                \
          for (j = 0; j < cols; j++) d[p * NR + j] = s[j];                                         \
        }                                                                                          \
        continue;                                                                                  \
      } else { /* B is (N,K): column j0+c+j of op(B) is row j0+c+j of B */                         \
        int64_t q;                                                                                 \
        if (cols < NR) memset(d, 0, sizeof(T) * (size_t)(NR * kc)); /* the columns past nc */     \
        for (q = 0; q < kc; q += DL__GEMM_PACK_STEP) { /* keep the written lines in L1 */          \
          const int64_t qe = kc - q < DL__GEMM_PACK_STEP ? kc - q : DL__GEMM_PACK_STEP;            \
          j = 0;                                                                                   \
          if (DL__GEMM_TR4 && sizeof(T) == 4 && qe == DL__GEMM_PACK_STEP) /* 4x4 blocks */         \
            for (; j + 4 <= cols; j += 4)                                                          \
              for (p = 0; p < qe; p += 4)                                                          \
                DL__GEMM_TR4_CALL(B + (j0 + c + j) * ldb + p0 + q + p, ldb, d + (q + p) * NR + j, NR); \
          for (; j < cols; j++) {                                                                  \
            const T *s = B + (j0 + c + j) * ldb + p0 + q;                                          \
            T *o = d + q * NR + j;                                                                 \
            for (p = 0; p < qe; p++) o[p * NR] = s[p];                                             \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* Write an MR x NR accumulator tile (row stride NR) to the m x n corner of C. */                \
  DL_API void dl__gemm_store_##sfx(const T *acc, T alpha, T beta, T *C, int64_t ldc, int m,        \
                                   int n) {                                                        \
    int i, j;                                                                                      \
    for (i = 0; i < m; i++) {                                                                      \
      T *c = C + i * ldc;                                                                          \
      const T *t = acc + i * NRT;                                                                  \
      if (beta == (T)0)                                                                            \
        for (j = 0; j < n; j++) c[j] = alpha * t[j];                                               \
      else                                                                                         \
        for (j = 0; j < n; j++) c[j] = alpha * t[j] + beta * c[j];                                 \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* dl__gemm_kernel_fn for T: the MR x NR micro-kernel (accumulators in                           \
   * registers), then the store of its m x n corner. A panel of at most 4                          \
   * or 8 rows (the last of M = 64 with MR = 12) runs only those rows: the                          \
   * same sums in the same order, a third or two thirds of the work. */                            \
  DL_API DL__GEMM_CONTRACT void dl__gemm_kernel_##sfx(int64_t kc, const void *a_, const void *b_,  \
                                                      double alpha_, double beta_, void *C_,       \
                                                      int64_t ldc, int m, int n) {                 \
    enum { MR = DL__GEMM_MR, NR = NRT };                                                           \
    const T *a = (const T *)a_, *b = (const T *)b_;                                                \
    T *C = (T *)C_;                                                                                \
    const T alpha = (T)alpha_, beta = (T)beta_;                                                    \
    int64_t p;                                                                                     \
    int i;                                                                                         \
    if (DL__GEMM_VEC && 2 * n <= NR) { /* one vector of columns (NR is two) */                      \
      if (MR > 8 && m <= 4) {                                                                      \
        DL__GEMM_KERNEL_BODY1(T, sfx, VT, DL__GEMM_RM4)                                            \
      } else if (MR > 8 && m <= 8) {                                                               \
        DL__GEMM_KERNEL_BODY1(T, sfx, VT, DL__GEMM_RM8)                                            \
      } else {                                                                                     \
        DL__GEMM_KERNEL_BODY1(T, sfx, VT, MR)                                                      \
      }                                                                                            \
    } else if (DL__GEMM_VEC && MR > 8 && m <= 4) {                                                \
      DL__GEMM_KERNEL_BODY(T, sfx, VT, DL__GEMM_RM4)                                               \
    } else if (DL__GEMM_VEC && MR > 8 && m <= 8) {                                                \
      DL__GEMM_KERNEL_BODY(T, sfx, VT, DL__GEMM_RM8)                                               \
    } else {                                                                                       \
      DL__GEMM_KERNEL_BODY(T, sfx, VT, MR)                                                         \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* C = beta * C on an M x N block (C not read when beta == 0). */                                \
  DL_API void dl__gemm_scale_##sfx(int64_t M, int64_t N, T beta, T *C, int64_t ldc) {              \
    int64_t i, j;                                                                                  \
    if (beta == (T)1) return;                                                                      \
    for (i = 0; i < M; i++) {                                                                      \
      T *c = C + i * ldc;                                                                          \
      if (beta == (T)0)                                                                            \
        for (j = 0; j < N; j++) c[j] = (T)0;                                                       \
      else                                                                                         \
        for (j = 0; j < N; j++) c[j] *= beta;                                                      \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* Batch item b of pr by the unblocked triple loop: the fallback when no                         \
   * packing buffer could be allocated. */                                                         \
  DL_API void dl__gemm_naive_##sfx(const dl__gemm_problem *pr, int64_t b) {                        \
    const T *A = (const T *)pr->A + b * pr->sa, *B = (const T *)pr->B + b * pr->sb;                \
    T *C = (T *)pr->C + b * pr->sc;                                                                \
    const T alpha = (T)pr->alpha, beta = (T)pr->beta;                                              \
    int64_t i, j, p;                                                                               \
    for (i = 0; i < pr->M; i++)                                                                    \
      for (j = 0; j < pr->N; j++) {                                                                \
        T s = (T)0;                                                                                \
        for (p = 0; p < pr->K; p++)                                                                \
          s += (pr->ta ? A[p * pr->lda + i] : A[i * pr->lda + p]) *                                \
               (pr->tb ? B[j * pr->ldb + p] : B[p * pr->ldb + j]);                                 \
        C[i * pr->ldc + j] = beta == (T)0 ? alpha * s : alpha * s + beta * C[i * pr->ldc + j];     \
      }                                                                                            \
  }                                                                                                \
                                                                                                   \
  /* The T kernels and block sizes for the driver. */                                              \
  DL_API dl__gemm_kind dl__gemm_kind_##sfx(void) {                                                 \
    dl__gemm_kind k;                                                                               \
    k.esz = sizeof(T);                                                                             \
    k.mr = DL__GEMM_MR;                                                                            \
    k.nr = NRT;                                                                                    \
    k.mc = MCT;                                                                                    \
    k.kc = DL__GEMM_KC;                                                                            \
    k.nc = NCT;                                                                                    \
    k.pack_a = dl__gemm_pack_a_##sfx;                                                              \
    k.pack_b = dl__gemm_pack_b_##sfx;                                                              \
    k.kernel = dl__gemm_kernel_##sfx;                                                              \
    k.dot = DL__GEMM_DOT_##sfx; /* NULL where the build has no dot kernel for T */                 \
    return k;                                                                                      \
  }

/* >>gemm-dot ----------------------------------------------------------------- */

/* C = alpha A B^T + beta C with A (M,K) and B (N,K) both read along K in
 * place: Linear's forward X W^T at a small batch. The packed kernel above
 * must first transpose B (the weight) into NR-wide panels, all of it, for
 * only M rows of work; at M = 64 that pack of W (read from L3 after the
 * optimizer's update) took as long as a third of the product. Here each
 * output is a dot product: an 8 x 3 block of C holds 24 vector accumulators
 * over K (8 rows of A stay in L1, 3 rows of B stream from L2), and each
 * column of 8 is summed across its lanes at the end by a shuffle tree.
 * The sums run in another order than the packed kernel's (16 lanes of K,
 * then the tree): other bits than there, the same at any thread count (a
 * team splits the columns, each output is one thread's). AVX-512 f32 only
 * (where the tree has its shuffles); elsewhere dot stays NULL. */
#if DL__GEMM_VEC && DL__GEMM_TR4 && DL__GEMM_VBYTES == 64
#define DL__GEMM_DOT 1
/* Lane r (< 8) of the result: the sum of the 16 lanes of a[r]. */
DL__INL dl__gemm_vf32 dl__gemm_hsum8_f32(const dl__gemm_vf32 *a) {
  dl__gemm_vf32 v[4], w[2], x;
  int r;
  for (r = 0; r < 4; r++) /* [a(2r) 8 | a(2r+1) 8] */
    v[r] = __builtin_shufflevector(a[2 * r], a[2 * r + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(a[2 * r], a[2 * r + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (r = 0; r < 2; r++) /* [a(4r) 4 | .. | a(4r+3) 4] */
    w[r] = __builtin_shufflevector(v[2 * r], v[2 * r + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
           __builtin_shufflevector(v[2 * r], v[2 * r + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  /* [a0 2 | a1 2 | .. | a7 2] */
  x = __builtin_shufflevector(w[0], w[1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
      __builtin_shufflevector(w[0], w[1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  return __builtin_shufflevector(x, x, 0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14) +
         __builtin_shufflevector(x, x, 1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
}
/* dl__gemm_dot_<RM>x<NB>: the RM x NB block of C at C (RM <= 8 rows of A
 * at a, NB rows of B at b); rows past RM are zero in the tree. K's last
 * K % 16 values go through zero-padded copies. */
#define DL__GEMM_DOT_BLOCK(RM, NB)                                                                  \
  DL_API DL__GEMM_CONTRACT void dl__gemm_dot_##RM##x##NB(int64_t K, const float *a, int64_t lda,    \
                                                          const float *b, int64_t ldb, float alpha, \
                                                          float beta, float *C, int64_t ldc) {     \
    const dl__gemm_vf32 zero = {0};                                                                 \
    dl__gemm_vf32 acc[NB][8], av, bv[NB];                                                           \
    int64_t p;                                                                                      \
    int r, c;                                                                                       \
    DL__GEMM_UNROLL                                                                                 \
    for (c = 0; c < NB; c++) {                                                                      \
      DL__GEMM_UNROLL                                                                               \
      for (r = 0; r < 8; r++) acc[c][r] = zero;                                                     \
    }                                                                                               \
    for (p = 0; p + 16 <= K; p += 16) {                                                             \
      DL__GEMM_UNROLL                                                                               \
      for (c = 0; c < NB; c++) memcpy(&bv[c], b + c * ldb + p, sizeof bv[c]);                      \
      DL__GEMM_UNROLL                                                                               \
      for (r = 0; r < RM; r++) {                                                                    \
        memcpy(&av, a + r * lda + p, sizeof av);                                                    \
        __asm__("" : "+v"(av)); /* one load of the row for its NB products, not NB folded loads */ \
        DL__GEMM_UNROLL                                                                             \
        for (c = 0; c < NB; c++) acc[c][r] += av * bv[c];                                           \
      }                                                                                             \
    }                                                                                               \
    if (p < K) {                                                                                    \
      float t[16];                                                                                  \
      for (c = 0; c < NB; c++) {                                                                    \
        memset(t, 0, sizeof t);                                                                     \
        memcpy(t, b + c * ldb + p, sizeof(float) * (size_t)(K - p));                                \
        memcpy(&bv[c], t, sizeof bv[c]);                                                            \
      }                                                                                             \
      for (r = 0; r < RM; r++) {                                                                    \
        memset(t, 0, sizeof t);                                                                     \
        memcpy(t, a + r * lda + p, sizeof(float) * (size_t)(K - p));                                \
        memcpy(&av, t, sizeof av);                                                                  \
        for (c = 0; c < NB; c++) acc[c][r] += av * bv[c];                                           \
      }                                                                                             \
    }                                                                                               \
    for (c = 0; c < NB; c++) {                                                                      \
      const dl__gemm_vf32 s = dl__gemm_hsum8_f32(acc[c]);                                           \
      float o[16];                                                                                  \
      memcpy(o, &s, sizeof o);                                                                      \
      for (r = 0; r < RM; r++) {                                                                    \
        float *y = C + r * ldc + c;                                                                 \
        *y = beta == 0.0f ? alpha * o[r] : alpha * o[r] + beta * *y;                                \
      }                                                                                             \
    }                                                                                               \
  }
DL__GEMM_DOT_BLOCK(8, 3)
DL__GEMM_DOT_BLOCK(8, 1)
DL__GEMM_DOT_BLOCK(4, 3)
DL__GEMM_DOT_BLOCK(4, 1)
DL__GEMM_DOT_BLOCK(1, 3)
DL__GEMM_DOT_BLOCK(1, 1)
#undef DL__GEMM_DOT_BLOCK
/* dl__gemm_kind.dot for f32: rows of A in blocks of 8 (then 4, then 1),
 * for each the columns [j0, j1) in threes (then ones). */
DL_API void dl__gemm_dot_f32(const dl__gemm_problem *pr, int64_t bi, int64_t j0, int64_t j1) {
  const float *A = (const float *)(const void *)pr->A + bi * pr->sa;
  const float *B = (const float *)(const void *)pr->B + bi * pr->sb;
  float *C = (float *)(void *)pr->C + bi * pr->sc;
  const float alpha = (float)pr->alpha, beta = (float)pr->beta;
  const int64_t K = pr->K, lda = pr->lda, ldb = pr->ldb, ldc = pr->ldc;
  typedef void (*blk_fn)(int64_t, const float *, int64_t, const float *, int64_t, float, float, float *, int64_t);
  static const blk_fn blk[3][2] = {{dl__gemm_dot_8x3, dl__gemm_dot_8x1},
                                   {dl__gemm_dot_4x3, dl__gemm_dot_4x1},
                                   {dl__gemm_dot_1x3, dl__gemm_dot_1x1}};
  int64_t i = 0, j;
  while (i < pr->M) {
    const int r = pr->M - i >= 8 ? 0 : pr->M - i >= 4 ? 1 : 2; /* 8, 4 or 1 rows */
    const float *a = A + i * lda;
    float *c = C + i * ldc;
    for (j = j0; j < j1; j += j + 3 <= j1 ? 3 : 1)
      blk[r][j + 3 > j1](K, a, lda, B + j * ldb, ldb, alpha, beta, c + j, ldc);
    i += r == 0 ? 8 : r == 1 ? 4 : 1;
  }
}
#define DL__GEMM_DOT_f32 dl__gemm_dot_f32
#else
#define DL__GEMM_DOT 0
#define DL__GEMM_DOT_f32 NULL
#endif
#define DL__GEMM_DOT_f64 NULL


DL__GEMM_DEFINE(float, f32, DL__GEMM_NR_F32, DL__GEMM_MC_F32, DL__GEMM_NC_F32, dl__gemm_vf32)
DL__GEMM_DEFINE(double, f64, DL__GEMM_NR_F64, DL__GEMM_MC_F64, DL__GEMM_NC_F64, dl__gemm_vf64)
/* Whether problem pr takes kind k's dot kernel: where it beat the packed
 * kernel on this 2-core AVX-512 machine (bench/bench_gemm.c's shapes and
 * others, 1 thread): K of 384 to 1024 with M <= 64 (the MLP's 64 x 784 x
 * 256: 180 us against 215) or M <= 128 from K = 512, and any K from 32 for a
 * thin C (N <= 16: a classifier's last layer, 2.0 us against 5.6; or M <=
 * 8). Below K = 384 at M = 64 the sum across lanes costs more than the pack
 * it saves (K = 64: 2x slower); past K = 1024 the 8 rows of A leave L1. */
DL_API int dl__gemm_dot_fits(const dl__gemm_kind *k, const dl__gemm_problem *pr) {
  const int64_t M = pr->M, N = pr->N, K = pr->K;
  if (!k->dot || pr->ta != DL_NOTRANS || pr->tb != DL_TRANS || K > 1024 || K < 32) return 0;
  return (M <= 64 && K >= 384) || (M <= 128 && K >= 512) || N <= 16 || M <= 8;
}

/* >>gemm-driver ------------------------------------------------------------ */

/* How the work is shared out.
 *
 * Private mode (one thread, or a batch of at least two items per thread): a
 * task is one whole batch item; the thread running it packs A and B into its
 * own MC x KC and KC x NC buffers (abuf, bbuf bytes per thread).
 *
 * Shared mode (batch items split across threads): C is cut into a gm x gn
 * grid of tm x tn tiles handed out with schedule(dynamic); K is cut into
 * slabs of ks (all of K unless the packed slab would pass
 * DL__GEMM_SLAB_BYTES). Each (panel, KC block) of op(A) and op(B) in a slab
 * has a shared packed slot and a claim/ready flag pair: the first thread to
 * need it packs it and publishes it, a thread that finds it ready uses it,
 * and a thread that finds it being packed packs a private copy rather than
 * wait. So every panel is packed about once, no thread ever waits for
 * another inside a slab, and the only barriers are the one closing each
 * slab (before its buffer is reused) and the end of the parallel region. */
typedef struct dl__gemm_plan {
  int threads, shared;
  size_t abuf, bbuf;      /* private: bytes per thread, 64-aligned */
  int64_t mp, np;         /* shared: MR panels of op(A), NR panels of op(B) */
  int64_t ks, nslab, nkb; /* shared: K per slab, slabs, KC blocks per slab */
  int64_t tm, tn, gm, gn; /* shared: tiles of C */
  size_t apack, bpack;    /* shared: bytes of the packed slab of A, of B */
  size_t nflags;          /* shared: ints of claim/ready flags, all items and slabs */
  size_t total;           /* bytes to allocate */
} dl__gemm_plan;

/* Cap on the shared packed slab of op(A) and op(B) (bytes). */
#define DL__GEMM_SLAB_BYTES ((size_t)32 << 20)

DL_API int64_t dl__gemm_ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }
DL_API int64_t dl__gemm_min(int64_t a, int64_t b) { return a < b ? a : b; }
DL_API size_t dl__gemm_round64(size_t n) { return (n + 63) & ~(size_t)63; }

DL_API dl__gemm_plan dl__gemm_make_plan(dl_ctx *ctx, const dl__gemm_kind *k,
                                        const dl__gemm_problem *pr, int serial) {
  dl__gemm_plan pl;
  const double flops = 2.0 * (double)pr->M * (double)pr->N * (double)pr->K * (double)pr->batch;
  int threads = dl_ctx_threads(ctx);
  memset(&pl, 0, sizeof pl);
#ifdef _OPENMP
  if (omp_in_parallel()) threads = 1; /* no nested teams */
#endif
  if (flops <= (double)DL_GEMM_PARALLEL_FLOPS || serial) threads = 1;
  pl.mp = dl__gemm_ceil(pr->M, k->mr);
  pl.np = dl__gemm_ceil(pr->N, k->nr);
  if (threads == 1 || pr->batch >= 2 * (int64_t)threads) {
    const int64_t mc = dl__gemm_min(pl.mp * k->mr, k->mc), nc = dl__gemm_min(pl.np * k->nr, k->nc);
    const int64_t kc = dl__gemm_min(pr->K, k->kc);
    pl.threads = (int64_t)threads < pr->batch ? threads : (int)pr->batch;
    pl.abuf = dl__gemm_round64((size_t)(mc * kc) * k->esz);
    pl.bbuf = dl__gemm_round64((size_t)(kc * nc) * k->esz);
    pl.total = (size_t)threads * (pl.abuf + pl.bbuf); /* one pair per worker of the team */
    return pl;
  }
  pl.shared = 1;
  pl.threads = threads;
  { /* slabs */
    const size_t per_k = (size_t)(pl.mp * k->mr + pl.np * k->nr) * k->esz; /* bytes per K step */
    pl.ks = pr->K;
    if (per_k * (size_t)pr->K > DL__GEMM_SLAB_BYTES) {
      pl.ks = (int64_t)(DL__GEMM_SLAB_BYTES / per_k) / k->kc * k->kc;
      if (pl.ks < k->kc) pl.ks = k->kc;
    }
    pl.nslab = dl__gemm_ceil(pr->K, pl.ks);
    pl.nkb = dl__gemm_ceil(pl.ks, k->kc);
    pl.apack = dl__gemm_round64((size_t)(pl.mp * k->mr * pl.ks) * k->esz);
    pl.bpack = dl__gemm_round64((size_t)(pl.np * k->nr * pl.ks) * k->esz);
    pl.nflags = (size_t)(2 * (pl.mp + pl.np) * pl.nkb * pl.nslab * pr->batch);
  }
  { /* tiles: at most MC rows (the A block stays in L2); then halve the longer
     * side until there are about four tiles per thread, keeping each above
     * ~128K flops so handing it out costs little against its work */
    int64_t tbm = dl__gemm_ceil(dl__gemm_min(pl.mp * k->mr, k->mc), k->mr), tbn = pl.np;
    const int64_t want = 4 * (int64_t)threads;
    while (dl__gemm_ceil(pl.mp, tbm) * dl__gemm_ceil(pl.np, tbn) < want) {
      const int split_m = tbm > 1 && (tbm * k->mr >= tbn * k->nr || tbn == 1);
      const int64_t nbm = split_m ? dl__gemm_ceil(tbm, 2) : tbm;
      const int64_t nbn = split_m ? tbn : dl__gemm_ceil(tbn, 2);
      if (nbm == tbm && nbn == tbn) break;
      if (2.0 * (double)(nbm * k->mr) * (double)(nbn * k->nr) * (double)pr->K < 131072.0) break;
      tbm = nbm;
      tbn = nbn;
    }
    pl.tm = tbm * k->mr;
    pl.tn = tbn * k->nr;
    pl.gm = dl__gemm_ceil(pl.mp, tbm);
    pl.gn = dl__gemm_ceil(pl.np, tbn);
  }
  /* packed slab, flags, then per thread one private A and one B panel */
  pl.total = pl.apack + pl.bpack + dl__gemm_round64(pl.nflags * sizeof(int)) +
             (size_t)threads * dl__gemm_round64((size_t)((k->mr + k->nr) * k->kc) * k->esz);
  return pl;
}

/* Private mode: the whole of batch item bi with packing buffers pa (abuf
 * bytes) and pb (bbuf bytes); or, when apre is not NULL, op(A) already
 * packed whole there (dl__gemm_pack_all_a) and pa unused. */
DL_API void dl__gemm_item_ex(const dl__gemm_kind *k, const dl__gemm_problem *pr, int64_t bi,
                             void *pa, void *pb, const void *apre) {
  const size_t esz = k->esz;
  const unsigned char *A = pr->A + (size_t)(bi * pr->sa) * esz;
  const unsigned char *B = pr->B + (size_t)(bi * pr->sb) * esz;
  unsigned char *C = pr->C + (size_t)(bi * pr->sc) * esz;
  const int64_t mp = dl__gemm_ceil(pr->M, k->mr) * k->mr;
  int64_t jc, pc, ic, jr, ir;
  for (jc = 0; jc < pr->N; jc += k->nc) {
    const int64_t nc = dl__gemm_min(pr->N - jc, k->nc);
    for (pc = 0; pc < pr->K; pc += k->kc) {
      const int64_t kc = dl__gemm_min(pr->K - pc, k->kc);
      const double beta = pc == 0 ? pr->beta : 1.0; /* later K blocks accumulate */
      k->pack_b(pr->tb, B, pr->ldb, pc, kc, jc, nc, pb);
      for (ic = 0; ic < pr->M; ic += k->mc) {
        const int64_t mc = dl__gemm_min(pr->M - ic, k->mc);
        const unsigned char *ab = (const unsigned char *)pa;
        if (apre) ab = (const unsigned char *)apre + (size_t)(pc * mp + ic * kc) * esz;
        else k->pack_a(pr->ta, A, pr->lda, ic, mc, pc, kc, pa);
        for (jr = 0; jr < nc; jr += k->nr) {
          const int n = (int)dl__gemm_min(nc - jr, k->nr);
          const unsigned char *bp = (const unsigned char *)pb + (size_t)(jr * kc) * esz;
          for (ir = 0; ir < mc; ir += k->mr)
            k->kernel(kc, ab + (size_t)(ir * kc) * esz, bp, pr->alpha, beta,
                      C + (size_t)((ic + ir) * pr->ldc + jc + jr) * esz, pr->ldc,
                      (int)dl__gemm_min(mc - ir, k->mr), n);
        }
      }
    }
  }
}
DL_API void dl__gemm_item(const dl__gemm_kind *k, const dl__gemm_problem *pr, int64_t bi,
                          void *pa, void *pb) {
  dl__gemm_item_ex(k, pr, bi, pa, pb, NULL);
}

/* Shared mode: the packed KC block q of one panel, from the shared slot when
 * this thread packs it first or finds it ready, else packed into own (this
 * thread's private slot). flag[0] counts claims, flag[1] is set once the
 * shared slot holds the data. is_b selects op(B) panel `panel` (else op(A)). */
DL_API const unsigned char *dl__gemm_panel(const dl__gemm_kind *k, const dl__gemm_problem *pr,
                                           int is_b, const unsigned char *X, int64_t panel,
                                           int64_t p0, int64_t kc, unsigned char *slot,
                                           unsigned char *own, int *flag) {
  int ready, claims;
  unsigned char *dst;
  DL__OMP("omp atomic read seq_cst")
  ready = flag[1];
  if (ready) return slot;
  DL__OMP("omp atomic capture seq_cst")
  claims = flag[0]++;
  dst = claims == 0 ? slot : own;
  if (is_b)
    k->pack_b(pr->tb, X, pr->ldb, p0, kc, panel * k->nr,
              dl__gemm_min(pr->N - panel * k->nr, k->nr), dst);
  else
    k->pack_a(pr->ta, X, pr->lda, panel * k->mr, dl__gemm_min(pr->M - panel * k->mr, k->mr),
              p0, kc, dst);
  if (claims == 0) {
    DL__OMP("omp atomic write seq_cst")
    flag[1] = 1;
  }
  return dst;
}

/* Shared mode: tile t of batch item bi over slab s. pack is the shared
 * packed slab (A then B), flags the slab's flags (A panels then B panels,
 * nkb blocks each), own this thread's private A and B panel. */
DL_API void dl__gemm_tile(const dl__gemm_kind *k, const dl__gemm_problem *pr,
                          const dl__gemm_plan *pl, int64_t bi, int64_t s, int64_t t,
                          unsigned char *pack, int *flags, unsigned char *own) {
  const size_t esz = k->esz;
  const int64_t k0 = s * pl->ks, kslab = dl__gemm_min(pr->K - k0, pl->ks);
  /* tiles taken in diagonal order: ti runs fastest and tj shifts with it,
   * so the tiles the team starts at once share neither a row block (the
   * same panels of op(A)) nor a column block; tiles started together in
   * row order packed the same A panels at the same moment, and the thread
   * that found one being packed packed its own copy */
  const int64_t ti = t % pl->gm, tj = (t / pl->gm + ti) % pl->gn;
  const int64_t i0 = ti * pl->tm, j0 = tj * pl->tn;
  const int64_t i1 = dl__gemm_min(i0 + pl->tm, pr->M), j1 = dl__gemm_min(j0 + pl->tn, pr->N);
  const unsigned char *A = pr->A + (size_t)(bi * pr->sa) * esz;
  const unsigned char *B = pr->B + (size_t)(bi * pr->sb) * esz;
  unsigned char *C = pr->C + (size_t)(bi * pr->sc) * esz;
  unsigned char *own_a = own, *own_b = own + (size_t)(k->mr * k->kc) * esz;
  /* where a tile starts among its panels: with one row block (M = 64:
   * every tile needs every A panel) the team's tiles would still walk the
   * same panels in step; the k-th of a team's concurrent tiles starts k/T
   * of the way through them (each C block is still summed once, in the
   * same order: the same bits) */
  const int64_t na = dl__gemm_ceil(i1 - i0, k->mr), nb = dl__gemm_ceil(j1 - j0, k->nr);
  const int64_t ra = na * (tj % pl->threads) / pl->threads, rb = nb * (ti % pl->threads) / pl->threads;
  int64_t q, jj, ii, jr, ir;
  for (q = 0; q < pl->nkb && q * k->kc < kslab; q++) {
    const int64_t pc = q * k->kc, kc = dl__gemm_min(kslab - pc, k->kc);
    const double beta = k0 + pc == 0 ? pr->beta : 1.0;
    for (jj = 0; jj < nb; jj++) {
      const int64_t c = (j0 / k->nr) + (jj + rb) % nb;
      const unsigned char *bp;
      jr = c * k->nr;
      bp = dl__gemm_panel(
          k, pr, 1, B, c, k0 + pc, kc, pack + pl->apack + (size_t)(jr * kslab + pc * k->nr) * esz,
          own_b, flags + 2 * ((pl->mp + c) * pl->nkb + q));
      for (ii = 0; ii < na; ii++) {
        const int64_t r = (i0 / k->mr) + (ii + ra) % na;
        const unsigned char *ap;
        ir = r * k->mr;
        ap = dl__gemm_panel(
            k, pr, 0, A, r, k0 + pc, kc, pack + (size_t)(ir * kslab + pc * k->mr) * esz, own_a,
            flags + 2 * (r * pl->nkb + q));
        k->kernel(kc, ap, bp, pr->alpha, beta, C + (size_t)(ir * pr->ldc + jr) * esz, pr->ldc,
                  (int)dl__gemm_min(i1 - ir, k->mr), (int)dl__gemm_min(j1 - jr, k->nr));
      }
    }
  }
}

/* Packing buffers: each thread keeps the largest it has needed (grow-only,
 * from the ctx's allocator), so a training loop's GEMMs stop allocating
 * after the first step. dl_gemm_release_cache() returns the calling thread's.
 * A cache is tied to the allocator that made it: a call under a ctx with
 * another allocator drops it first. */
typedef struct dl__gemm_cache {
  void *p;
  size_t cap;
  int has_ctx;        /* made with own.desc's allocator (else the default) */
  dl_ctx own;         /* a copy holding the allocator that made p */
} dl__gemm_cache;
DL__GLOBAL(DL__TLS dl__gemm_cache dl__gemm_tls, DL__ZERO_INIT);
/* Release the calling thread's GEMM packing buffer (it is kept between
 * calls and grows to the largest GEMM seen); the next GEMM allocates it
 * again. */
DL_API void dl_gemm_release_cache(void) {
  dl_free(dl__gemm_tls.has_ctx ? &dl__gemm_tls.own : NULL, dl__gemm_tls.p);
  dl__gemm_tls.p = NULL;
  dl__gemm_tls.cap = 0;
  dl__gemm_tls.has_ctx = 0;
}
DL_API void *dl__gemm_scratch(dl_ctx *ctx, size_t n) {
  const dl_allocator *want = ctx ? &ctx->desc.allocator : NULL;
  int same = dl__gemm_tls.has_ctx
                 ? (want && !memcmp(want, &dl__gemm_tls.own.desc.allocator, sizeof *want))
                 : (!want || !want->alloc);
  if (dl__gemm_tls.p && same && dl__gemm_tls.cap >= n) return dl__gemm_tls.p;
  dl_gemm_release_cache();
  dl__gemm_tls.p = dl_alloc(ctx, n);
  if (!dl__gemm_tls.p) return NULL;
  dl__gemm_tls.cap = n;
  if (ctx && ctx->desc.allocator.alloc) {
    dl__gemm_tls.has_ctx = 1;
    dl_ctx_init(&dl__gemm_tls.own, &ctx->desc);
  }
  return dl__gemm_tls.p;
}

/* A small product (2 M N K up to DL_GEMM_SPLIT_FLOPS, one item) on a team:
 * C cut into one block of whole micro-panel columns (or rows, when M > N)
 * per thread, each block the serial algorithm with its worker's own packing
 * buffers (pl is the serial plan, scratch one pair of its buffers per
 * worker); member t takes block t (DL_PARALLEL_FOR's fixed shares: a
 * member that lost its core holds its block up, which the team guard
 * answers by running the ctx's loops alone for a while). Against the
 * shared tiles below, nothing is packed by one core for another (measured
 * at 2 threads, bench/bench_gemm.c, two alternating runs: the MLP's
 * 64 x 256 x 784 product 202 / 201 us shared, 139 / 174 us split; its nine
 * GEMMs 657 / 700 us, 529 / 599 us). Every element of C sums over K in the
 * same order either way: the same bits as one thread. */
#ifndef DL_GEMM_SPLIT_FLOPS
#define DL_GEMM_SPLIT_FLOPS 64000000
#endif
DL_API void dl__gemm_split(dl__team *tm, dl_ctx *ctx, const dl__gemm_kind *k, const dl__gemm_problem *pr,
                           const dl__gemm_plan *pl, unsigned char *scratch) {
  const int split_n = pr->N >= pr->M;
  const int64_t step = split_n ? k->nr : k->mr, dim = split_n ? pr->N : pr->M;
  const int64_t chunk = (dim + (int64_t)pl->threads * step - 1) / ((int64_t)pl->threads * step) * step;
  const size_t per = pl->abuf + pl->bbuf;
  DL__PARALLEL_FOR_AS(tm, ctx, (dim + chunk - 1) / chunk, u, {
    dl__gemm_problem sub = *pr;
    unsigned char *pa = scratch + (size_t)dl_worker() * per;
    const int64_t lo = u * chunk, n = dl__gemm_min(dim - lo, chunk);
    if (split_n) {
      sub.N = n;
      sub.B += (size_t)(pr->tb == DL_NOTRANS ? lo : lo * pr->ldb) * k->esz;
      sub.C += (size_t)lo * k->esz;
    } else {
      sub.M = n;
      sub.A += (size_t)(pr->ta == DL_NOTRANS ? lo * pr->lda : lo) * k->esz;
      sub.C += (size_t)(lo * pr->ldc) * k->esz;
    }
    dl__gemm_item(k, &sub, 0, pa, pa + pl->abuf);
  });
}

/* The built-in kernel on a checked problem (any batch). op names the entry
 * point for the out-of-memory warning. */
DL_API void dl__gemm_run(dl_ctx *ctx, const char *op, const dl__gemm_kind *k,
                         const dl__gemm_problem *pr) {
  dl__gemm_plan pl;
  dl__team tm;
  unsigned char *scratch;
  int64_t b;
  int split;
  if (pr->M == 0 || pr->N == 0 || pr->batch == 0) return;
  if (pr->K == 0 || pr->alpha == 0.0) { /* C = beta * C; A and B are not read */
    for (b = 0; b < pr->batch; b++) {
      if (k->esz == sizeof(float))
        dl__gemm_scale_f32(pr->M, pr->N, (float)pr->beta, (float *)pr->C + b * pr->sc, pr->ldc);
      else
        dl__gemm_scale_f64(pr->M, pr->N, pr->beta, (double *)pr->C + b * pr->sc, pr->ldc);
    }
    return;
  }
  pl = dl__gemm_make_plan(ctx, k, pr, 0);
  if (dl__gemm_dot_fits(k, pr)) { /* no packing: the team splits C's columns, about two pieces each */
    const int64_t chunk = 3 * dl__gemm_ceil(pr->N, 3 * 2 * (int64_t)pl.threads);
    const int64_t nch = dl__gemm_ceil(pr->N, chunk);
    dl__team_begin(&tm, ctx, pl.threads > 1);
    DL__PARALLEL_FOR_AS(&tm, ctx, pr->batch * nch, dl__u, {
      const int64_t j0 = dl__u % nch * chunk;
      k->dot(pr, dl__u / nch, j0, dl__gemm_min(j0 + chunk, pr->N));
    });
    dl__team_end(&tm, ctx);
    return;
  }
  /* The team guard (core.h) decides first: while teams stall (another
   * process holds a core) the plan, and its scratch layout, is the
   * single-thread one. Its state lives in the caller's ctx. */
  dl__team_begin(&tm, ctx, pl.threads > 1);
  if (pl.threads > 1 && !tm.par) pl = dl__gemm_make_plan(ctx, k, pr, 1);
  split = pl.shared && pr->batch == 1 &&
          2.0 * (double)pr->M * (double)pr->N * (double)pr->K <= (double)DL_GEMM_SPLIT_FLOPS;
  if (split) { /* the serial plan's buffers, one pair per worker */
    const int threads = pl.threads;
    pl = dl__gemm_make_plan(ctx, k, pr, 1);
    pl.threads = threads;
    pl.total = (size_t)threads * (pl.abuf + pl.bbuf);
  }
  scratch = (unsigned char *)dl__gemm_scratch(ctx, pl.total);
  if (!scratch) {
    dl_log_msg(ctx, 1, "%s: no memory for %zu bytes of packing buffers; using the unblocked loop",
               op, pl.total);
    for (b = 0; b < pr->batch; b++) {
      if (k->esz == sizeof(float)) dl__gemm_naive_f32(pr, b);
      else dl__gemm_naive_f64(pr, b);
    }
    return;
  }
  if (pl.threads == 1) {
    dl_fpmode fm = dl_ctx_fp_enter(ctx);
    for (b = 0; b < pr->batch; b++) dl__gemm_item(k, pr, b, scratch, scratch + pl.abuf);
    dl_ftz_leave(fm);
  } else if (split) {
    dl__gemm_split(&tm, ctx, k, pr, &pl, scratch);
  } else if (!pl.shared) { /* whole items of the batch, one per piece */
    const size_t per = pl.abuf + pl.bbuf;
    DL__PARALLEL_FOR_AS(&tm, ctx, pr->batch, bi, {
      unsigned char *pa = scratch + (size_t)dl_worker() * per;
      dl__gemm_item(k, pr, bi, pa, pa + pl.abuf);
    });
  } else { /* tiles of C shared by the team, slab by slab of K */
    const int64_t ntiles = pl.gm * pl.gn, fslab = 2 * (pl.mp + pl.np) * pl.nkb;
    int *flags = (int *)(scratch + pl.apack + pl.bpack);
    unsigned char *own0 = scratch + pl.apack + pl.bpack + dl__gemm_round64(pl.nflags * sizeof(int));
    const size_t own_bytes = dl__gemm_round64((size_t)((k->mr + k->nr) * k->kc) * k->esz);
    memset(flags, 0, pl.nflags * sizeof(int));
    (void)own_bytes; /* without OpenMP only the alone statements remain */
    DL__PARALLEL_REGION_AS(
        &tm, ctx,
        ({
          unsigned char *own = own0 + (size_t)dl_worker() * own_bytes;
          int64_t bi, sl, t;
          for (bi = 0; bi < pr->batch; bi++)
            for (sl = 0; sl < pl.nslab; sl++) {
              int *f = flags + (bi * pl.nslab + sl) * fslab;
              if (bi + 1 < pr->batch || sl + 1 < pl.nslab) {
                /* the loop's closing barrier keeps the next slab's packing out
                 * of the buffer until every tile of this one is done */
                DL__OMP("omp for schedule(dynamic, 1)")
                for (t = 0; t < ntiles; t++) dl__gemm_tile(k, pr, &pl, bi, sl, t, scratch, f, own);
              } else { /* the last slab: the region's own end is the only barrier */
                DL__OMP("omp for schedule(dynamic, 1) nowait")
                for (t = 0; t < ntiles; t++) dl__gemm_tile(k, pr, &pl, bi, sl, t, scratch, f, own);
              }
            }
        }),
        ({
          int64_t bi, sl, t;
          for (bi = 0; bi < pr->batch; bi++)
            for (sl = 0; sl < pl.nslab; sl++)
              for (t = 0; t < ntiles; t++)
                dl__gemm_tile(k, pr, &pl, bi, sl, t, scratch, flags + (bi * pl.nslab + sl) * fslab, own0);
        }));
  }
  dl__team_end(&tm, ctx);
}

/* >>gemm-check ------------------------------------------------------------- */

/* Panic (naming op) unless the arguments describe valid row-major matrices.
 * batched != 0 also checks batch and the strides. */
DL_API void dl__gemm_check(dl_ctx *ctx, const char *op, dl_trans ta, dl_trans tb,
                           int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                           const void *B, int64_t ldb, const void *C, int64_t ldc, int batched,
                           int64_t sa, int64_t sb, int64_t sc, int64_t batch) {
  const long long m = (long long)M, n = (long long)N, kk = (long long)K;
  long long need;
  if ((ta != DL_NOTRANS && ta != DL_TRANS) || (tb != DL_NOTRANS && tb != DL_TRANS))
    DL_PANIC(ctx, op, "trans flags must be DL_NOTRANS or DL_TRANS, got ta=%d tb=%d "
             "(M=%lld N=%lld K=%lld)", (int)ta, (int)tb, m, n, kk);
  if (M < 0 || N < 0 || K < 0) DL_PANIC(ctx, op, "negative size: M=%lld N=%lld K=%lld", m, n, kk);
  need = ta ? m : kk; /* A is (M,K), or (K,M) when ta */
  if (need < 1) need = 1;
  if (lda < need)
    DL_PANIC(ctx, op, "lda=%lld too small for A (%lld,%lld)%s: need lda >= %lld "
             "(M=%lld N=%lld K=%lld)", (long long)lda, ta ? kk : m, ta ? m : kk,
             ta ? " (ta)" : "", need, m, n, kk);
  need = tb ? kk : n; /* B is (K,N), or (N,K) when tb */
  if (need < 1) need = 1;
  if (ldb < need)
    DL_PANIC(ctx, op, "ldb=%lld too small for B (%lld,%lld)%s: need ldb >= %lld "
             "(M=%lld N=%lld K=%lld)", (long long)ldb, tb ? n : kk, tb ? kk : n,
             tb ? " (tb)" : "", need, m, n, kk);
  need = n > 1 ? n : 1;
  if (ldc < need)
    DL_PANIC(ctx, op, "ldc=%lld too small for C (%lld,%lld): need ldc >= %lld "
             "(M=%lld N=%lld K=%lld)", (long long)ldc, m, n, need, m, n, kk);
  if (batched) {
    if (batch < 0)
      DL_PANIC(ctx, op, "negative batch=%lld (M=%lld N=%lld K=%lld)", (long long)batch, m, n, kk);
    if (sa < 0 || sb < 0 || sc < 0)
      DL_PANIC(ctx, op, "negative stride: strideA=%lld strideB=%lld strideC=%lld "
               "(M=%lld N=%lld K=%lld)", (long long)sa, (long long)sb, (long long)sc, m, n, kk);
    if (batch > 1 && M > 0 && N > 0 && sc < (M - 1) * ldc + N)
      DL_PANIC(ctx, op, "strideC=%lld makes the %lld C matrices (%lld,%lld) with ldc=%lld "
               "overlap: need strideC >= %lld (K=%lld)", (long long)sc, (long long)batch, m, n,
               (long long)ldc, (long long)((M - 1) * ldc + N), kk);
    if (batch == 0) return;
  }
  if (M > 0 && K > 0 && !A) DL_PANIC(ctx, op, "A is NULL with M=%lld N=%lld K=%lld", m, n, kk);
  if (N > 0 && K > 0 && !B) DL_PANIC(ctx, op, "B is NULL with M=%lld N=%lld K=%lld", m, n, kk);
  if (M > 0 && N > 0 && !C) DL_PANIC(ctx, op, "C is NULL with M=%lld N=%lld K=%lld", m, n, kk);
}

/* The checked arguments as one problem for the driver. */
DL_API dl__gemm_problem dl__gemm_problem_make(dl_trans ta, dl_trans tb, int64_t M, int64_t N,
                                              int64_t K, double alpha, const void *A,
                                              int64_t lda, int64_t sa, const void *B,
                                              int64_t ldb, int64_t sb, double beta, void *C,
                                              int64_t ldc, int64_t sc, int64_t batch) {
  dl__gemm_problem pr;
  pr.ta = ta;
  pr.tb = tb;
  pr.M = M;
  pr.N = N;
  pr.K = K;
  pr.batch = batch;
  pr.alpha = alpha;
  pr.beta = beta;
  pr.A = (const unsigned char *)A;
  pr.B = (const unsigned char *)B;
  pr.C = (unsigned char *)C;
  pr.lda = lda;
  pr.ldb = ldb;
  pr.ldc = ldc;
  pr.sa = sa;
  pr.sb = sb;
  pr.sc = sc;
  return pr;
}

/* op(A), M x K, packed whole for a product repeated over many B (a
 * convolution's weight, image after image): KC block q at element
 * q * KC * Mp (Mp: M rounded up to MR), each as pack_a lays out its rows;
 * dl__gemm_packed_a_bytes bytes at dst. dl__gemm_serial_pa multiplies with
 * it: the kernel calls of the product packed as it goes, the same bits. */
DL_API size_t dl__gemm_packed_a_bytes(const dl__gemm_kind *k, int64_t M, int64_t K) {
  return dl__gemm_round64((size_t)(dl__gemm_ceil(M, k->mr) * k->mr * K) * k->esz);
}
DL_API void dl__gemm_pack_all_a(const dl__gemm_kind *k, dl_trans ta, const void *A, int64_t lda, int64_t M,
                                int64_t K, void *dst) {
  const int64_t mp = dl__gemm_ceil(M, k->mr) * k->mr;
  int64_t pc;
  for (pc = 0; pc < K; pc += k->kc)
    k->pack_a(ta, A, lda, 0, M, pc, dl__gemm_min(K - pc, k->kc), (unsigned char *)dst + (size_t)(pc * mp) * k->esz);
}
/* C = alpha op(A) op(B) + beta C on the calling thread, op(A) packed by
 * dl__gemm_pack_all_a; 0 when no packing buffer for B could be had (the
 * caller then multiplies another way). */
DL_API int dl__gemm_serial_pa(dl_ctx *ctx, const dl__gemm_kind *k, int64_t M, int64_t N, int64_t K, double alpha,
                              const void *apre, dl_trans tb, const void *B, int64_t ldb, double beta, void *C,
                              int64_t ldc) {
  dl__gemm_problem pr;
  void *pb;
  if (M == 0 || N == 0) return 1;
  pb = dl__gemm_scratch(ctx, dl__gemm_round64((size_t)(dl__gemm_min(K, k->kc) *
                                                       dl__gemm_min(dl__gemm_ceil(N, k->nr) * k->nr, k->nc)) * k->esz));
  if (!pb) return 0;
  /* (A itself is not read: it is packed) */
  pr = dl__gemm_problem_make(DL_NOTRANS, tb, M, N, K, alpha, NULL, 0, 0, B, ldb, 0, beta, C, ldc, 0, 1);
  if (K == 0 || alpha == 0.0) {
    if (k->esz == sizeof(float)) dl__gemm_scale_f32(M, N, (float)beta, (float *)C, ldc);
    else dl__gemm_scale_f64(M, N, beta, (double *)C, ldc);
    return 1;
  }
  {
    dl_fpmode fm = dl_ctx_fp_enter(ctx);
    dl__gemm_item_ex(k, &pr, 0, NULL, pb, apre);
    dl_ftz_leave(fm);
  }
  return 1;
}

#ifdef DL_USE_OPENBLAS
/* Whether every size fits cblas's 32-bit int. */
DL_API int dl__gemm_fits_int(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                             int64_t ldc) {
  return M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
         ldb <= INT32_MAX && ldc <= INT32_MAX;
}

/* OpenBLAS keeps its own thread pool, which would compete with the
 * library's OpenMP team for the same cores (two pools spinning: measured
 * up to 4x slower on a busy 2-core machine, and OpenBLAS's threaded sgemm
 * allocates on every call). Under DL_USE_OPENBLAS the library therefore
 * sets OpenBLAS to one thread (openblas_set_num_threads(1), a process-wide
 * setting: a program that also calls cblas directly and wants OpenBLAS's
 * threads there sets them back) and parallelises a GEMM itself: C is cut
 * into one block of columns (or rows, when M > N) per team member, or the
 * batch items are shared out, and each block is one single-threaded cblas
 * call with the whole K. The blocks depend only on the thread count, so a
 * given count gives the same bits every run; another count may round
 * differently (OpenBLAS chooses its kernels by a block's size). The team
 * guard (core.h) applies as for the other parallel loops. */
/* OpenBLAS's pool down to one thread (once; cheap after). Called outside
 * any parallel region before the team's members call cblas. */
DL_API void dl__openblas_single(void) {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}
DL_API void dl__cblas_block(size_t es, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                            const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C,
                            int64_t ldc) {
  if (M == 1 && N > 1 && K > 0) { /* one row (a token at a time: generation): gemv reads B once, unpacked */
    const int inc = ta ? (int)lda : 1;
    if (beta == 0) memset(C, 0, (size_t)N * es); /* gemv scales y by beta: stale NaNs must not survive */
    if (es == sizeof(float))
      cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, (int)(tb ? N : K), (int)(tb ? K : N), (float)alpha,
                  (const float *)B, (int)ldb, (const float *)A, inc, (float)beta, (float *)C, 1);
    else
      cblas_dgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, (int)(tb ? N : K), (int)(tb ? K : N), alpha,
                  (const double *)B, (int)ldb, (const double *)A, inc, beta, (double *)C, 1);
    return;
  }
  if (es == sizeof(float))
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, (float)alpha, (const float *)A, (int)lda, (const float *)B, (int)ldb, (float)beta,
                (float *)C, (int)ldc);
  else
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, (const double *)A, (int)lda, (const double *)B, (int)ldb, beta, (double *)C,
                (int)ldc);
}
/* The size of each part when a dim is cut into parts (a multiple of 16; the
 * last part gets what is left). */
DL_API int64_t dl__cblas_chunk(int64_t dim, int64_t parts) { return ((dim + parts - 1) / parts + 15) / 16 * 16; }
/* Unit u of a split GEMM: item u / parts, part u % parts of its columns
 * (split_n) or rows, in multiples of 16. */
DL_API void dl__cblas_unit(size_t es, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                           const unsigned char *A, int64_t lda, int64_t sa, const unsigned char *B, int64_t ldb,
                           int64_t sb, double beta, unsigned char *C, int64_t ldc, int64_t sc, int64_t parts,
                           int split_n, int64_t u) {
  const int64_t b = u / parts, p = u % parts, dim = split_n ? N : M;
  const int64_t chunk = dl__cblas_chunk(dim, parts);
  const int64_t lo = p * chunk, hi = lo + chunk < dim ? lo + chunk : dim;
  const unsigned char *a = A + (size_t)(b * sa) * es, *bb = B + (size_t)(b * sb) * es;
  unsigned char *c = C + (size_t)(b * sc) * es;
  if (lo >= hi) return;
  if (split_n)
    dl__cblas_block(es, ta, tb, M, hi - lo, K, alpha, a, lda, bb + (size_t)(tb ? lo * ldb : lo) * es, ldb, beta,
                    c + (size_t)lo * es, ldc);
  else
    dl__cblas_block(es, ta, tb, hi - lo, N, K, alpha, a + (size_t)(ta ? lo : lo * lda) * es, lda, bb, ldb, beta,
                    c + (size_t)(lo * ldc) * es, ldc);
}
/* The smallest part dl__cblas_unit cuts from an item's dim into parts (0:
 * some part is empty). */
DL_API int64_t dl__cblas_min_part(int64_t dim, int64_t parts) {
  const int64_t chunk = dl__cblas_chunk(dim, parts), last = dim - (parts - 1) * chunk;
  return last < chunk ? (last > 0 ? last : 0) : chunk;
}
/* Each part of an item that dl__openblas_gemm splits over the team keeps
 * M * N * K above this: OpenBLAS computes smaller products with other
 * kernels (0.3.21 on SkylakeX / Cooperlake: its small-matrix kernels up to
 * 100^3), whose sums run in another order, so a product split at 2 threads
 * and whole at 1 gave other bits (sgemm, 20 x 67 x 611: 1212 of 1340
 * elements; 100 x 100 x 101 in halves: 347). Below it an item is never
 * split, at any thread count. Above it, sgemm gave the same bits however it
 * was cut (408 splits into 2-6 parts of 20 shapes, the Fashion MLP's among
 * them, NN and NT, beta 0 and 1); dgemm did not for some odd shapes (301 x
 * 203 x 611 in halves: 31 elements of 61103 split by rows, 819 by
 * columns), so with OpenBLAS an f64 product may differ in its last bits
 * between thread counts. At one thread count it never does: the split
 * follows the ctx's thread count, not the team guard's choice. */
#ifndef DL_OPENBLAS_SMALL_MNK
#define DL_OPENBLAS_SMALL_MNK 1000000.0
#endif
/* OpenBLAS takes a work buffer per concurrent call from its own pool and,
 * when the pool has none free, maps a new one (BUFFER_SIZE: 128 MiB in
 * Debian's build); when that mapping fails it retries for ever (measured:
 * a training run under `ulimit -v` hung in blas_memory_alloc). So before
 * OpenBLAS is asked to serve more concurrent calls than it has served so
 * far, the address space is tried with that many buffers' worth (malloc and
 * free, untouched: no memory is used); when it does not fit, that GEMM runs
 * on the built-in kernels (blas.h's own, whose packing buffer falls back
 * to a plain loop) and never reaches OpenBLAS's pool. Once served, OpenBLAS
 * keeps its buffers: later calls at that level allocate nothing. */
#ifndef DL_OPENBLAS_BUFFER_BYTES
#define DL_OPENBLAS_BUFFER_BYTES ((size_t)136 << 20) /* one buffer and some room */
#endif
DL__GLOBAL(int dl__openblas_served, 0); /* the most concurrent calls OpenBLAS has had buffers for */
DL__GLOBAL(int dl__openblas_warned, 0);
#if defined(__GNUC__) || defined(__clang__)
#define DL__ATOMIC_GET(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define DL__ATOMIC_MAX(x, v)                                                                     \
  do {                                                                                           \
    int dl__old = __atomic_load_n(&(x), __ATOMIC_RELAXED);                                       \
    while (dl__old < (v) &&                                                                      \
           !__atomic_compare_exchange_n(&(x), &dl__old, (v), 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) \
      ;                                                                                          \
  } while (0)
#else
#define DL__ATOMIC_GET(x) (x)
#define DL__ATOMIC_MAX(x, v) do { if ((x) < (v)) (x) = (v); } while (0)
#endif
DL_API int dl__openblas_room(dl_ctx *ctx, int callers) {
  void *p;
  size_t bytes;
  if (callers <= DL__ATOMIC_GET(dl__openblas_served)) return 1;
  p = dl_size_mul((size_t)callers, DL_OPENBLAS_BUFFER_BYTES, &bytes) ? NULL : malloc(bytes); /* the system's, as OpenBLAS's */
  if (p) {
    free(p);
    return 1;
  }
  if (!DL__ATOMIC_GET(dl__openblas_warned)) { /* once per program: GEMM is slower from here */
    DL__ATOMIC_MAX(dl__openblas_warned, 1);
    dl_log_msg(ctx, 1, "OpenBLAS cannot map work buffers for %d concurrent calls (%zu MiB of address space): GEMMs that "
               "need them run on the built-in kernels", callers, (size_t)callers * (DL_OPENBLAS_BUFFER_BYTES >> 20));
  }
  return 0;
}
/* OpenBLAS picks its kernels at load time from the CPU's model number. A
 * CPU it does not know (a newer one, or a virtual machine that reports a
 * generic model: seen, an AVX-512 Xeon in a VM that OpenBLAS 0.3.21 ran as
 * "Prescott") gets its SSE3 kernels: cblas_sgemm ran 28 GFLOP/s where the
 * built-in kernel, compiled for the machine, ran 121 and OpenBLAS's own
 * SkylakeX kernels 145 (bench/bench_gemm.c, one core). So when this program
 * was compiled for AVX2 with FMA (or more) and OpenBLAS runs a core older
 * than its AVX2 kernels, dl_gemm_<sfx> uses the built-in kernel instead:
 * decided once, from OpenBLAS's core name and this build's flags alone, so
 * a given machine and binary always compute the same bits. A program may
 * force OpenBLAS's kernels with OPENBLAS_CORETYPE (its name is then the one
 * forced) or define DL_OPENBLAS_ANY_CORE to keep OpenBLAS whatever its core.
 * dl_gemm_backend() names the choice. */
DL_API int dl__openblas_core_ok(const char *core) {
#if defined(DL_OPENBLAS_ANY_CORE) || !(defined(__x86_64__) || defined(__i386__)) || \
    !(defined(__AVX2__) && defined(__FMA__))
  (void)core;
  return 1; /* not x86, or the built-in kernel is no wider than OpenBLAS's oldest */
#else
  static const char *const avx2[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"};
  size_t i, j;
  if (!core) return 1;
  for (i = 0; i < sizeof avx2 / sizeof avx2[0]; i++) {
    for (j = 0; core[j] && avx2[i][j] && (core[j] | 0x20) == avx2[i][j]; j++)
      ;
    if (!avx2[i][j] && !core[j]) return 1;
  }
  return 0;
#endif
}
DL__GLOBAL(int dl__openblas_use, -1); /* -1 not yet decided, 0 the built-in kernel, 1 OpenBLAS */
DL_API int dl__openblas_chosen(void) {
  int u = DL__ATOMIC_GET(dl__openblas_use);
  if (u < 0) {
    u = dl__openblas_core_ok(openblas_get_corename());
    DL__ATOMIC_MAX(dl__openblas_use, u); /* racing first callers all compute the same */
  }
  return u;
}
/* 1 when OpenBLAS did the product, 0 when its pool could not grow or its
 * kernels are older than this build's (the caller then uses the built-in
 * kernels). */
DL_API int dl__openblas_gemm(dl_ctx *ctx, size_t es, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                             const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                             double beta, void *C, int64_t ldc, int64_t sc, int64_t batch) {
  const unsigned char *a = (const unsigned char *)A, *bb = (const unsigned char *)B;
  unsigned char *c = (unsigned char *)C;
  const double flops = 2.0 * (double)M * (double)N * (double)K * (double)batch;
  const int split_n = N >= M;
  int threads = dl_ctx_threads(ctx), callers;
  int64_t parts, units;
  if (!dl__openblas_chosen()) return 0;
#ifdef _OPENMP
  if (omp_in_parallel())
    threads = 1; /* no nested teams; the team's owner brought OpenBLAS to one thread */
  else
#endif
    dl__openblas_single();
  if (flops <= (double)DL_GEMM_PARALLEL_FLOPS) threads = 1;
  parts = batch >= 2 * (int64_t)threads ? 1 : threads;
  if (parts > 1 && (split_n ? N : M) < 32) parts = 1;
  while (parts > 1 && (double)dl__cblas_min_part(split_n ? N : M, parts) * (double)(split_n ? M : N) * (double)K <=
                          DL_OPENBLAS_SMALL_MNK)
    parts--; /* every part above OpenBLAS's small sizes (DL_OPENBLAS_SMALL_MNK) */
  units = batch * parts;
  callers = units < (int64_t)threads ? (int)units : threads;
#ifdef _OPENMP
  if (omp_in_parallel()) callers = omp_get_num_threads(); /* the enclosing team may all be in here at once */
#endif
  if (!dl__openblas_room(ctx, callers)) return 0;
  DL_PARALLEL_FOR(ctx, threads > 1 ? (int64_t)flops : 0, units, v, {
    dl__cblas_unit(es, ta, tb, M, N, K, alpha, a, lda, sa, bb, ldb, sb, beta, c, ldc, sc, parts, split_n, v);
  });
  DL__ATOMIC_MAX(dl__openblas_served, callers);
  return 1;
}
#endif

/* >>gemm-public ------------------------------------------------------------ */

#ifdef DL_USE_OPENBLAS
/* The OpenBLAS path of dl_gemm_<sfx> and dl_gemm_batched_<sfx>, inside the
 * function and with its arguments: when every size fits cblas's int, the
 * batch products by cblas_gemm (cblas_sgemm or cblas_dgemm), matrix b at
 * A + b * sa (likewise B, C), with the calling thread's denormal mode set
 * from ctx, and return. Without DL_USE_OPENBLAS it is nothing. */
#define DL__GEMM_TRY_OPENBLAS(T, sfx, cblas_gemm, sa, sb, sc, batch)                               \
  if (dl__gemm_fits_int(M, N, K, lda, ldb, ldc)) {                                                 \
    int64_t b;                                                                                     \
    if (M == 0 || N == 0) return;                                                                  \
    if (K == 0 || alpha == (T)0) {                                                                 \
      for (b = 0; b < (batch); b++) dl__gemm_scale_##sfx(M, N, beta, C + b * (sc), ldc);           \
      return;                                                                                      \
    }                                                                                              \
    if (dl__openblas_gemm(ctx, sizeof(T), ta, tb, M, N, K, (double)alpha, A, lda, (sa), B, ldb, (sb),  \
                          (double)beta, C, ldc, (sc), (batch)))                                    \
      return; /* else OpenBLAS's pool cannot grow: the built-in kernels below */                   \
  }
#else
#define DL__GEMM_TRY_OPENBLAS(T, sfx, cblas_gemm, sa, sb, sc, batch)
#endif

/* The public entry points of one element type, written once and
 * instantiated for float and double below: DL__GEMM_DEFINE_PUBLIC(T, sfx,
 * cblas_gemm) defines dl_gemm_builtin_<sfx>, dl_gemm_<sfx> and
 * dl_gemm_batched_<sfx> with T (float or double) for every matrix, alpha
 * and beta; cblas_gemm is cblas_sgemm or cblas_dgemm. */
#define DL__GEMM_DEFINE_PUBLIC(T, sfx, cblas_gemm)                                                 \
  /* The built-in kernel, whatever DL_USE_OPENBLAS says.                                           \
   * A is (M,K) or (K,M) when ta; B is (K,N) or (N,K) when tb; C is (M,N).                         \
   * C = alpha * op(A) * op(B) + beta * C. */                                                      \
  DL_API void dl_gemm_builtin_##sfx(dl_ctx *ctx, dl_trans ta, dl_trans tb, int64_t M,        \
                                    int64_t N, int64_t K, T alpha, const T *A, int64_t lda,        \
                                    const T *B, int64_t ldb, T beta, T *C, int64_t ldc) {          \
    dl__gemm_kind k = dl__gemm_kind_##sfx();                                                       \
    dl__gemm_problem pr;                                                                           \
    dl__gemm_check(ctx, "dl_gemm_builtin_" #sfx, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, 0, 0,    \
                   0, 0, 1);                                                                       \
    pr = dl__gemm_problem_make(ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);  \
    dl__gemm_run(ctx, "dl_gemm_builtin_" #sfx, &k, &pr);                                           \
  }                                                                                                \
                                                                                                   \
  /* C = alpha * op(A) * op(B) + beta * C through cblas_sgemm (f32) or                             \
   * cblas_dgemm (f64) under DL_USE_OPENBLAS, else the built-in kernel.                            \
   * A is (M,K) or (K,M) when ta; B is (K,N) or (N,K) when tb; C is (M,N). */                      \
  DL_API void dl_gemm_##sfx(dl_ctx *ctx, dl_trans ta, dl_trans tb, int64_t M, int64_t N,     \
                            int64_t K, T alpha, const T *A, int64_t lda, const T *B,               \
                            int64_t ldb, T beta, T *C, int64_t ldc) {                              \
    dl__gemm_check(ctx, "dl_gemm_" #sfx, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, 0, 0, 0, 0, 1);  \
    DL__GEMM_TRY_OPENBLAS(T, sfx, cblas_gemm, 0, 0, 0, 1)                                          \
    {                                                                                              \
      dl__gemm_kind k = dl__gemm_kind_##sfx();                                                     \
      dl__gemm_problem pr =                                                                        \
          dl__gemm_problem_make(ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1); \
      dl__gemm_run(ctx, "dl_gemm_" #sfx, &k, &pr);                                                 \
    }                                                                                              \
  }                                                                                                \
                                                                                                   \
  /* batch independent products: for b in [0, batch), matrix b of A starts at                      \
   * A + b * strideA (likewise B, C; strides in elements, >= 0; a stride of 0                      \
   * shares one A or B across the batch). The C matrices must not overlap.                         \
   * OpenBLAS 0.3.21 has no cblas_sgemm_batch, so under DL_USE_OPENBLAS this is                    \
   * one cblas_sgemm / cblas_dgemm per item; the built-in kernel spreads                           \
   * batch x blocks of C over the OpenMP team. */                                                  \
  DL_API void dl_gemm_batched_##sfx(dl_ctx *ctx, dl_trans ta, dl_trans tb, int64_t M,        \
                                    int64_t N, int64_t K, T alpha, const T *A, int64_t lda,        \
                                    int64_t strideA, const T *B, int64_t ldb, int64_t strideB,     \
                                    T beta, T *C, int64_t ldc, int64_t strideC, int64_t batch) {   \
    dl__gemm_check(ctx, "dl_gemm_batched_" #sfx, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, 1,       \
                   strideA, strideB, strideC, batch);                                              \
    DL__GEMM_TRY_OPENBLAS(T, sfx, cblas_gemm, strideA, strideB, strideC, batch)                    \
    {                                                                                              \
      dl__gemm_kind k = dl__gemm_kind_##sfx();                                                     \
      dl__gemm_problem pr = dl__gemm_problem_make(ta, tb, M, N, K, alpha, A, lda, strideA, B,      \
                                                  ldb, strideB, beta, C, ldc, strideC, batch);     \
      dl__gemm_run(ctx, "dl_gemm_batched_" #sfx, &k, &pr);                                         \
    }                                                                                              \
  }

/* dl_gemm_builtin_f32, dl_gemm_f32, dl_gemm_batched_f32 */
DL__GEMM_DEFINE_PUBLIC(float, f32, cblas_sgemm)
/* dl_gemm_builtin_f64, dl_gemm_f64, dl_gemm_batched_f64 */
DL__GEMM_DEFINE_PUBLIC(double, f64, cblas_dgemm)

/* What dl_gemm_<sfx> and dl_gemm_batched_<sfx> run on in this program:
 * "openblas", "builtin" (no DL_USE_OPENBLAS), or "builtin (OpenBLAS runs
 * pre-AVX2 kernels on this CPU)" (see dl__openblas_core_ok). Products whose
 * sizes pass cblas's int, and those OpenBLAS cannot map buffers for, take
 * the built-in kernel whatever this says. */
DL_API const char *dl_gemm_backend(void) {
#ifdef DL_USE_OPENBLAS
  return dl__openblas_chosen() ? "openblas" : "builtin (OpenBLAS runs pre-AVX2 kernels on this CPU)";
#else
  return "builtin";
#endif
}


/* >>matmul (tensors) ------------------------------------------------------- */

/* How a 2-D (or the last two dims of an n-D) view maps onto a row-major GEMM
 * operand: unit stride along the last dim is the plain layout, unit stride
 * along the one before it is a transposed view. 0 when neither (copy first). */
DL_API int dl__mat_layout(const dl_tensor *t, dl_trans *tr, int64_t *ld) {
  int r = t->ndim - 2, c = t->ndim - 1;
  if (t->strides[c] == 1 || t->shape[c] == 1) {
    *tr = DL_NOTRANS;
    *ld = t->shape[r] == 1 ? (t->shape[c] > 1 ? t->shape[c] : 1) : t->strides[r];
    if (*ld < t->shape[c]) *ld = t->shape[c];
    return t->shape[r] == 1 || t->strides[r] >= t->shape[c];
  }
  if (t->strides[r] == 1) {
    *tr = DL_TRANS;
    *ld = t->strides[c];
    return *ld >= t->shape[r];
  }
  return 0;
}

/* C = alpha * A @ B + beta * C for f32/f64 tensors (no implicit conversion):
 *   A (M, K), B (K, N), C (M, N); or batched: A (b.., M, K) with B either
 *   (K, N) (shared) or (b.., K, N), C (b.., M, N), batch dims equal.
 * A and B may be transposed views (dl_view_transpose) of contiguous data: no
 * copy is made. C must be contiguous. beta = 0 overwrites C. Panics naming
 * the three shapes on any mismatch. */
DL_API void dl_matmul_into(dl_tensor *C, const dl_tensor *A, const dl_tensor *B, double alpha,
                           double beta) {
  int64_t M, N, K, batch = 1, lda, ldb, sa, sb;
  dl_trans ta, tb;
  int d, bshared;
  if (A->dtype != B->dtype || A->dtype != C->dtype || (A->dtype != DL_F32 && A->dtype != DL_F64))
    DL_PANIC(C->ctx, "dl_matmul", "dtypes %s @ %s -> %s: all f32 or all f64", DL_SHAPESTR(A),
             DL_SHAPESTR(B), DL_SHAPESTR(C));
  if (A->ndim < 2 || B->ndim < 2 || C->ndim != A->ndim || (B->ndim != 2 && B->ndim != A->ndim))
    DL_PANIC(C->ctx, "dl_matmul", "ranks do not fit: %s @ %s -> %s", DL_SHAPESTR(A), DL_SHAPESTR(B),
             DL_SHAPESTR(C));
  M = A->shape[A->ndim - 2];
  K = A->shape[A->ndim - 1];
  N = B->shape[B->ndim - 1];
  bshared = B->ndim == 2;
  if (B->shape[B->ndim - 2] != K || C->shape[C->ndim - 2] != M || C->shape[C->ndim - 1] != N)
    DL_PANIC(C->ctx, "dl_matmul", "shape mismatch: %s @ %s -> %s", DL_SHAPESTR(A), DL_SHAPESTR(B),
             DL_SHAPESTR(C));
  for (d = 0; d < A->ndim - 2; d++) {
    if (C->shape[d] != A->shape[d] || (!bshared && B->shape[d] != A->shape[d]))
      DL_PANIC(C->ctx, "dl_matmul", "batch dimensions differ: %s @ %s -> %s", DL_SHAPESTR(A),
               DL_SHAPESTR(B), DL_SHAPESTR(C));
    batch *= A->shape[d];
  }
  if (!dl_tensor_is_contiguous(C))
    DL_PANIC(C->ctx, "dl_matmul", "destination %s must be contiguous", DL_SHAPESTR(C));
  if (!dl__mat_layout(A, &ta, &lda) || !dl__mat_layout(B, &tb, &ldb))
    DL_PANIC(C->ctx, "dl_matmul", "operands %s, %s need unit stride in one of their last two dimensions",
             DL_SHAPESTR(A), DL_SHAPESTR(B));
  /* batch dims of A (and B) must be uniformly strided: the leading dims
   * collapse to one stride */
  sa = A->ndim > 2 ? A->strides[A->ndim - 3] : 0;
  sb = (!bshared && B->ndim > 2) ? B->strides[B->ndim - 3] : 0;
  for (d = A->ndim - 4; d >= 0; d--) {
    if (A->strides[d] != A->strides[d + 1] * A->shape[d + 1] ||
        (!bshared && B->strides[d] != B->strides[d + 1] * B->shape[d + 1]))
      DL_PANIC(C->ctx, "dl_matmul", "batch dimensions of %s / %s are not uniformly strided",
               DL_SHAPESTR(A), DL_SHAPESTR(B));
  }
#ifdef DL__CUDA_C
  if (C->device == DL_CUDA || A->device == DL_CUDA || B->device == DL_CUDA) { /* cuBLAS */
    if (C->device != A->device || C->device != B->device)
      DL_PANIC(C->ctx, "dl_matmul", "%s @ %s -> %s: operands on different devices", DL_SHAPESTR(A),
               DL_SHAPESTR(B), DL_SHAPESTR(C));
    dl__gpu_ok(C, "dl_matmul",
               dlg_gemm_batched(dl__gpu_h(C, "dl_matmul"), (int)A->dtype, ta == DL_TRANS, tb == DL_TRANS, M, N, K,
                                alpha, A->data, lda, sa, B->data, ldb, sb, beta, C->data, N, M * N, batch));
    return;
  }
#endif
  if (A->dtype == DL_F32)
    dl_gemm_batched_f32(C->ctx, ta, tb, M, N, K, (float)alpha, (const float *)A->data, lda, sa,
                        (const float *)B->data, ldb, sb, (float)beta, (float *)C->data, N, M * N, batch);
  else
    dl_gemm_batched_f64(C->ctx, ta, tb, M, N, K, alpha, (const double *)A->data, lda, sa,
                        (const double *)B->data, ldb, sb, beta, (double *)C->data, N, M * N, batch);
}

#ifdef __cplusplus
}
#endif
DL__HEADER_END
#endif /* DL_BLAS_H */
