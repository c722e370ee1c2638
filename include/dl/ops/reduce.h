/* dl/ops/reduce.h - reductions along axes and softmax. Included by dl/ops.h
 * (see there for the conventions every op follows).
 *
 *   int ax[1] = {0};
 *   dl_tensor *gb = dl_t_sum(tp, g, 1, ax, 0);            // [N, C] -> [C]
 *   dl_tensor *m  = dl_t_mean(tp, x, 0, NULL, 0);         // all dims -> 0-d
 *   dl_tensor *p  = dl_t_softmax(tp, logits, -1);         // rows sum to 1
 *
 * Axes. `axes` lists naxes dimensions (negative ones count from the end; each
 * at most once); naxes == 0 means every dimension. With keepdim the reduced
 * dimensions stay as size 1 (the result broadcasts against x); without it
 * they are removed, and reducing every dimension gives a 0-d tensor.
 *
 * Accuracy. Every reduction accumulates in double, f32 inputs too, and long
 * reductions are summed in fixed chunks (a shape-only choice), so results do
 * not depend on the thread count. var is two-pass (the mean, then squared
 * deviations); logsumexp, softmax and log_softmax subtract the maximum first
 * and stay finite for logits like +-1e4.
 *
 * Gradients. max/min split the gradient evenly among tied maxima (like
 * torch.amax/amin); softmax and log_softmax differentiate from their saved
 * output. Forward-mode tangents: sum/mean reduce the tangent; max/min average
 * it over the selected elements; var 2/(n - correction) sum((x - mean) tx);
 * logsumexp sum(softmax(x) tx); softmax s (tx - sum(s tx)); log_softmax
 * tx - sum(s tx).
 *
 * Threads: outputs are split into tiles (an output, or a block of columns,
 * and a chunk of its reduction) run on the ctx's OpenMP team above the
 * parallel threshold, each tile on one thread; chunks combine in a fixed
 * order. Softmax over contiguous rows (the last axis) has its own row loop.
 *
 * GPU (DL_USE_CUDA, device tensors on a device tape): the same formulas in
 * dl/gpu/reduce.h's kernels (dlg_reduce, dlg_softmax and their backward),
 * also accumulating in double; a sum's order is the kernel's (fixed, so
 * results repeat) rather than the CPU's, so the last bits may differ, while
 * max / min and their tie rule are exact.
 */
#ifndef DL_OPS_REDUCE_H
#define DL_OPS_REDUCE_H

#include "core.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY /* the library's code (nvcc sees only the scalar math) */

/* Elements of work per tile the tilings aim at; the column block of the
 * column form (its accumulators stay in L1) and of softmax's; the fewest rows
 * a chunk of the column form takes (its partial results cost 1/that). */
#define DL__RED_W 16384
#define DL__RED_JB 2048
#define DL__SM_JB 256
/* Softmax rows shorter than DL__SM_SHORT take exp over blocks of about
 * DL__SM_BLOCK elements of several rows at once. */
#define DL__SM_SHORT 64
#define DL__SM_BLOCK 2048
#define DL__RED_MINROWS 64

/* Vectorisation of reduction loops. gcc vectorises a loop at -O2 only when
 * told (`omp simd`, with OpenMP), and a floating-point reduction only with a
 * reduction clause (the order changes, but the same for any thread count).
 * clang vectorises plain loops by itself and warns when an `omp simd` loop
 * cannot be, so it gets none of these; its sums use DL__RED_LANES. */
#if defined(__GNUC__) && !defined(__clang__) && defined(_OPENMP)
#define DL__RPRAGMA(x) _Pragma(#x)
#define DL__RSIMD _Pragma("omp simd")
#define DL__RSIMD_SUM(v) DL__RPRAGMA(omp simd reduction(+ : v))
#define DL__RED_OMP_SIMD 1
#else
#define DL__RSIMD
#define DL__RSIMD_SUM(v)
#define DL__RED_OMP_SIMD 0
#endif
/* m = the largest of x[0 .. n) (T values, n >= 1), kept in 16 lanes so the
 * compare vectorises, then the lanes and the remainder; i and l are the
 * caller's int64_t scratch. A NaN is kept or skipped as the lanes fall (the
 * callers' exp gives NaN either way). */
#define DL__ROW_MAX16(T, x, n, m, i, l)                                                 \
  do {                                                                                  \
    T dl__mx[16];                                                                       \
    for (l = 0; l < 16; l++) dl__mx[l] = (x)[0];                                        \
    for (i = 0; i + 16 <= (n); i += 16) {                                               \
      DL__RSIMD                                                                         \
      for (l = 0; l < 16; l++) dl__mx[l] = (x)[i + l] > dl__mx[l] ? (x)[i + l] : dl__mx[l]; \
    }                                                                                   \
    m = dl__mx[0];                                                                      \
    for (l = 1; l < 16; l++) m = dl__mx[l] > m ? dl__mx[l] : m;                         \
    for (; i < (n); i++) m = (x)[i] > m ? (x)[i] : m;                                   \
  } while (0)
/* acc += F(i) summed over i in [0, n), in double (F a function-like macro):
 * one vectorised reduction under gcc + OpenMP, else four independent lanes. */
#if DL__RED_OMP_SIMD
#define DL__RED_LANES(acc, i, n, F)                                                     \
  do {                                                                                  \
    double dl__s0 = 0;                                                                  \
    DL__RSIMD_SUM(dl__s0)                                                               \
    for (i = 0; i < (n); i++) dl__s0 += F(i);                                           \
    acc += dl__s0;                                                                      \
  } while (0)
#else
#define DL__RED_LANES(acc, i, n, F)                                                     \
  do {                                                                                  \
    double dl__s0 = 0, dl__s1 = 0, dl__s2 = 0, dl__s3 = 0;                              \
    for (i = 0; i + 4 <= (n); i += 4) {                                                 \
      dl__s0 += F(i);                                                                   \
      dl__s1 += F(i + 1);                                                               \
      dl__s2 += F(i + 2);                                                               \
      dl__s3 += F(i + 3);                                                               \
    }                                                                                   \
    for (; i < (n); i++) dl__s0 += F(i);                                                \
    acc += (dl__s0 + dl__s1) + (dl__s2 + dl__s3);                                       \
  } while (0)
#endif
/* exp in double for the generic kernels and f64 softmax: vmath's
 * vectorisable one where the target vectorises it well (AVX2, NEON), libm's
 * elsewhere (a scalar dl_vexp_f64 is slower than glibc's exp; SSE2 cannot
 * vectorise it). Both within about 1 ulp. */
#if defined(__AVX2__) || defined(__aarch64__)
#define DL__REXP(v) dl_vexp_f64(v)
#else
#define DL__REXP(v) exp(v)
#endif
/* The same for f32 data: the f32 exp (vectorisable everywhere) of the
 * difference rounded to f32, as the op's own precision allows. */
#define DL__REXP32(v) ((double)dl_vexp_f32((float)(v)))
/* Terms the kernels sum (x, y, a are the kernels' local arrays). */
#define DL__RT_X(i) ((double)x[i])
#define DL__RT_Y(i) ((double)y[i])
#define DL__RT_A(i) ((double)a[i])
#define DL__RT_AY(i) ((double)a[i] * (double)y[i])

/* >>reduction plan ---------------------------------------------------------- */

/* How a contiguous tensor of some shape reduces over a set of axes. Adjacent
 * dimensions of the same kind (reduced / kept) are merged and sizes of 1
 * dropped, so the innermost run of elements is either reduced (row form:
 * each output reduces runs of ni contiguous elements) or kept (column form:
 * ni consecutive outputs reduce rows of ni contiguous elements together).
 * Element (kept k, reduced r, inner i) sits at koff[k] + roff[r] + i.
 * The tiling depends on the shape only. */
typedef struct dl__rplan {
  int64_t M, K;          /* outputs; elements reduced into each */
  int row;               /* 1: row form, 0: column form */
  int64_t ni;            /* length of the innermost run */
  int64_t nko, nro;      /* outer kept / outer reduced index combinations */
  int64_t *koff, *roff;  /* their element offsets, row-major order (arena) */
  /* tiling: tile = (group of outputs or outer-kept indices, column block, chunk) */
  int64_t nc;            /* reduction chunks per output (> 1: partial results combined) */
  int split;             /* row form: a chunk is a piece of one run (long runs) */
  int64_t csz;           /* elements of a run (split) or runs (otherwise) per chunk */
  int64_t ncr;           /* split: chunks per run */
  int64_t G, ngr;        /* outputs (row) / outer-kept indices (column) per tile; groups */
  int64_t njb;           /* column form: column blocks of DL__RED_JB (fastest in the tile order) */
  int64_t ntiles;
} dl__rplan;

/* Offsets of the row-major combinations of n (size, stride) pairs, outer first. */
DL_API int64_t *dl__rplan_offsets(dl_tape *tp, const char *op, int n, const int64_t *size,
                                  const int64_t *stride, int64_t *count) {
  int64_t total = 1, len = 1, a, i, *arr;
  int k;
  for (k = 0; k < n; k++) total *= size[k];
  arr = (int64_t *)dl_tape_scratch(tp, op, sizeof(int64_t) * (size_t)total);
  arr[0] = 0;
  for (k = 0; k < n; k++) { /* expand every entry into size[k] entries, in place from the end */
    for (a = len - 1; a >= 0; a--) {
      int64_t base = arr[a];
      for (i = size[k] - 1; i >= 0; i--) arr[a * size[k] + i] = base + i * stride[k];
    }
    len *= size[k];
  }
  *count = total;
  return arr;
}

/* The plan for a contiguous tensor of this shape (numel > 0) reduced over the
 * dimensions whose bit is set in mask. */
DL_API void dl__rplan_make(dl_tape *tp, const char *op, int ndim, const int64_t *shape,
                           unsigned mask, dl__rplan *p) {
  int64_t gs[DL_MAX_DIMS], gst[DL_MAX_DIMS], ks[DL_MAX_DIMS], kst[DL_MAX_DIMS];
  int64_t rs[DL_MAX_DIMS], rst[DL_MAX_DIMS], stride = 1, unit;
  int gr[DL_MAX_DIMS], ng = 0, nk = 0, nr = 0, d, g;
  memset(p, 0, sizeof *p);
  for (d = ndim - 1; d >= 0; d--) { /* groups, innermost first */
    int red = (int)((mask >> d) & 1u);
    if (shape[d] == 1) continue;
    if (ng > 0 && gr[ng - 1] == red) gs[ng - 1] *= shape[d];
    else {
      gs[ng] = shape[d];
      gst[ng] = stride;
      gr[ng] = red;
      ng++;
    }
    stride *= shape[d];
  }
  p->M = 1;
  p->K = 1;
  for (g = 0; g < ng; g++) {
    if (gr[g]) p->K *= gs[g];
    else p->M *= gs[g];
  }
  p->row = ng == 0 ? 1 : gr[0];
  p->ni = ng == 0 ? 1 : gs[0];
  for (g = ng - 1; g >= 1; g--) { /* outer groups, outermost first */
    if (gr[g]) { rs[nr] = gs[g]; rst[nr] = gst[g]; nr++; }
    else { ks[nk] = gs[g]; kst[nk] = gst[g]; nk++; }
  }
  p->koff = dl__rplan_offsets(tp, op, nk, ks, kst, &p->nko);
  p->roff = dl__rplan_offsets(tp, op, nr, rs, rst, &p->nro);
  if (p->row) {
    if (p->ni >= DL__RED_W) { /* long runs: chunks are pieces of a run */
      p->split = 1;
      p->csz = DL__RED_W;
      p->ncr = (p->ni + p->csz - 1) / p->csz;
      p->nc = p->nro * p->ncr;
      unit = p->csz;
    } else {                  /* chunks are groups of whole runs */
      p->csz = DL__RED_W / p->ni;
      if (p->csz > p->nro) p->csz = p->nro;
      p->nc = (p->nro + p->csz - 1) / p->csz;
      unit = p->csz * p->ni;
    }
    p->G = DL__RED_W / unit > 1 ? DL__RED_W / unit : 1;
    p->ngr = (p->M + p->G - 1) / p->G;
    p->njb = 1;
  } else {
    int64_t w = p->ni < DL__RED_JB ? p->ni : DL__RED_JB;
    p->csz = DL__RED_W / w > DL__RED_MINROWS ? DL__RED_W / w : DL__RED_MINROWS;
    if (p->csz > p->nro) p->csz = p->nro;
    p->nc = (p->nro + p->csz - 1) / p->csz;
    p->njb = (p->ni + DL__RED_JB - 1) / DL__RED_JB;
    unit = w * p->csz;
    p->G = p->njb == 1 && DL__RED_W / unit > 1 ? DL__RED_W / unit : 1;
    p->ngr = (p->nko + p->G - 1) / p->G;
  }
  p->ntiles = p->ngr * p->njb * p->nc;
}

/* >>reduction kernels ------------------------------------------------------- */

/* What a reduction accumulates per element (x, tangent t, the output's
 * statistic s), in double: */
enum {
  DL__R_SUM,      /* x */
  DL__R_MAX,      /* max x (NaN propagates) */
  DL__R_MIN,      /* min x */
  DL__R_SQDEV,    /* (x - s)^2 */
  DL__R_EXP,      /* exp(x - s) */
  DL__R_CNT,      /* x == s */
  DL__R_DOT_EQ,   /* x == s ? t : 0 */
  DL__R_DOT_DEV,  /* (x - s) t */
  DL__R_DOT_EXP   /* exp(x - s) t */
};
/* What a backward rule adds per element (coefficient c and statistic s of
 * the element's output): */
enum {
  DL__E_SUM,      /* c */
  DL__E_EQ,       /* x == s ? c : 0 */
  DL__E_DEV,      /* c (x - s) */
  DL__E_EXP       /* c exp(x - s) */
};

DL_API double dl__red_init(int mode) {
  return mode == DL__R_MAX ? -INFINITY : mode == DL__R_MIN ? INFINITY : 0.0;
}
DL_API double dl__red_combine(int mode, double a, double b) {
  if (mode == DL__R_MAX) return (b > a || b != b) ? b : a;
  if (mode == DL__R_MIN) return (b < a || b != b) ? b : a;
  return a + b;
}

/* The kernels, written once for float and double:
 *   run:  a run of n elements into one accumulator a (row form);
 *   vec:  a row of n elements into n accumulators acc[] (column form);
 *   tile: one tile of the plan, into dst[o] (or the chunk's partials);
 *   erun / evec / etile: the backward expansion g[e] += f(c[o], x[e], s[o]);
 * EXP is the exp they use (DL__REXP32 for f32 data, DL__REXP for f64). */
#define DL__RED_DEFINE(T, SFX, EXP)                                                     \
  DL_API double dl__red_run_##SFX(int mode, const T *x, const T *t, int64_t n, double s, \
                                   double a) {                                          \
    int64_t i;                                                                          \
    switch (mode) {                                                                     \
      case DL__R_SUM:                                                                   \
        DL__RED_LANES(a, i, n, DL__RT_X);                                               \
        return a;                                                                       \
      case DL__R_MAX:                                                                   \
        for (i = 0; i < n; i++) {                                                       \
          double v = (double)x[i];                                                      \
          if (v > a || v != v) a = v;                                                   \
        }                                                                               \
        return a;                                                                       \
      case DL__R_MIN:                                                                   \
        for (i = 0; i < n; i++) {                                                       \
          double v = (double)x[i];                                                      \
          if (v < a || v != v) a = v;                                                   \
        }                                                                               \
        return a;                                                                       \
      case DL__R_SQDEV:                                                                 \
        for (i = 0; i < n; i++) {                                                       \
          double v = (double)x[i] - s;                                                  \
          a += v * v;                                                                   \
        }                                                                               \
        return a;                                                                       \
      case DL__R_EXP:                                                                   \
        for (i = 0; i < n; i++) a += EXP((double)x[i] - s);                             \
        return a;                                                                       \
      case DL__R_CNT:                                                                   \
        for (i = 0; i < n; i++) a += (double)x[i] == s ? 1.0 : 0.0;                     \
        return a;                                                                       \
      case DL__R_DOT_EQ:                                                                \
        for (i = 0; i < n; i++) a += (double)x[i] == s ? (double)t[i] : 0.0;            \
        return a;                                                                       \
      case DL__R_DOT_DEV:                                                               \
        for (i = 0; i < n; i++) a += ((double)x[i] - s) * (double)t[i];                 \
        return a;                                                                       \
      default:                                                                          \
        for (i = 0; i < n; i++) a += EXP((double)x[i] - s) * (double)t[i];              \
        return a;                                                                       \
    }                                                                                   \
  }                                                                                     \
  DL_API void dl__red_vec_##SFX(int mode, const T *x, const T *t, int64_t n,            \
                                const double *s, double *acc) {                         \
    int64_t i;                                                                          \
    switch (mode) {                                                                     \
      case DL__R_SUM:                                                                   \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) acc[i] += (double)x[i];                                 \
        break;                                                                          \
      case DL__R_MAX:                                                                   \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) {                                                       \
          const double v = (double)x[i];                                                \
          acc[i] = (v > acc[i] || v != v) ? v : acc[i];                                 \
        }                                                                               \
        break;                                                                          \
      case DL__R_MIN:                                                                   \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) {                                                       \
          const double v = (double)x[i];                                                \
          acc[i] = (v < acc[i] || v != v) ? v : acc[i];                                 \
        }                                                                               \
        break;                                                                          \
      case DL__R_SQDEV:                                                                 \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) {                                                       \
          double v = (double)x[i] - s[i];                                               \
          acc[i] += v * v;                                                              \
        }                                                                               \
        break;                                                                          \
      case DL__R_EXP:                                                                   \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) acc[i] += EXP((double)x[i] - s[i]);                     \
        break;                                                                          \
      case DL__R_CNT:                                                                   \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) acc[i] += (double)x[i] == s[i] ? 1.0 : 0.0;             \
        break;                                                                          \
      case DL__R_DOT_EQ:                                                                \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) acc[i] += (double)x[i] == s[i] ? (double)t[i] : 0.0;    \
        break;                                                                          \
      case DL__R_DOT_DEV:                                                               \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) acc[i] += ((double)x[i] - s[i]) * (double)t[i];         \
        break;                                                                          \
      default:                                                                          \
        for (i = 0; i < n; i++) acc[i] += EXP((double)x[i] - s[i]) * (double)t[i];      \
        break;                                                                          \
    }                                                                                   \
  }                                                                                     \
  DL_API void dl__red_tile_##SFX(const dl__rplan *p, int mode, const T *x, const T *t,  \
                                 const double *s, double *out, double *part,            \
                                 int64_t tile) {                                        \
    const int64_t c = tile % p->nc, rest = tile / p->nc;                                \
    double *dst = p->nc > 1 ? part + c * p->M : out;                                    \
    const double init = dl__red_init(mode);                                             \
    if (p->row) {                                                                       \
      const int64_t o0 = rest * p->G, o1 = o0 + p->G < p->M ? o0 + p->G : p->M;         \
      int64_t o, r;                                                                     \
      for (o = o0; o < o1; o++) {                                                       \
        const double so = s ? s[o] : 0.0;                                               \
        double a = init;                                                                \
        if (p->split) {                                                                 \
          const int64_t i0 = (c % p->ncr) * p->csz;                                     \
          const int64_t n = i0 + p->csz < p->ni ? p->csz : p->ni - i0;                  \
          const int64_t off = p->koff[o] + p->roff[c / p->ncr] + i0;                    \
          a = dl__red_run_##SFX(mode, x + off, t ? t + off : NULL, n, so, a);           \
        } else {                                                                        \
          const int64_t r0 = c * p->csz;                                                \
          const int64_t r1 = r0 + p->csz < p->nro ? r0 + p->csz : p->nro;               \
          for (r = r0; r < r1; r++) {                                                   \
            const int64_t off = p->koff[o] + p->roff[r];                                \
            a = dl__red_run_##SFX(mode, x + off, t ? t + off : NULL, p->ni, so, a);     \
          }                                                                             \
        }                                                                               \
        dst[o] = a;                                                                     \
      }                                                                                 \
    } else {                                                                            \
      const int64_t jb = tile % p->njb, rest2 = tile / p->njb;                          \
      const int64_t cc = rest2 % p->nc, kg = rest2 / p->nc;                             \
      double *const dstc = p->nc > 1 ? part + cc * p->M : out;                          \
      const int64_t k0 = kg * p->G, k1 = k0 + p->G < p->nko ? k0 + p->G : p->nko;       \
      const int64_t j0 = jb * DL__RED_JB;                                               \
      const int64_t w = j0 + DL__RED_JB < p->ni ? DL__RED_JB : p->ni - j0;              \
      const int64_t r0 = cc * p->csz, r1 = r0 + p->csz < p->nro ? r0 + p->csz : p->nro; \
      int64_t k, r, j;                                                                  \
      (void)c;                                                                          \
      (void)dst;                                                                        \
      for (k = k0; k < k1; k++) {                                                       \
        const int64_t o0 = k * p->ni + j0;                                              \
        double *const acc = dstc + o0;                                                  \
        for (j = 0; j < w; j++) acc[j] = init;                                          \
        for (r = r0; r < r1; r++) {                                                     \
          const int64_t off = p->koff[k] + p->roff[r] + j0;                             \
          dl__red_vec_##SFX(mode, x + off, t ? t + off : NULL, w, s ? s + o0 : NULL,    \
                            acc);                                                       \
        }                                                                               \
      }                                                                                 \
    }                                                                                   \
  }                                                                                     \
  DL_API void dl__red_erun_##SFX(int mode, T *g, const T *x, int64_t n, double c,       \
                                 double s) {                                            \
    int64_t i;                                                                          \
    switch (mode) {                                                                     \
      case DL__E_SUM: {                                                                 \
        const T cv = (T)c;                                                              \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) g[i] += cv;                                             \
        break;                                                                          \
      }                                                                                 \
      case DL__E_EQ:                                                                    \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) g[i] = (T)((double)g[i] + ((double)x[i] == s ? c : 0.0)); \
        break;                                                                          \
      case DL__E_DEV:                                                                   \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) g[i] = (T)((double)g[i] + c * ((double)x[i] - s));      \
        break;                                                                          \
      default:                                                                          \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) g[i] = (T)((double)g[i] + c * EXP((double)x[i] - s));   \
        break;                                                                          \
    }                                                                                   \
  }                                                                                     \
  DL_API void dl__red_evec_##SFX(int mode, T *g, const T *x, int64_t n, const double *c, \
                                 const double *s) {                                     \
    int64_t i;                                                                          \
    switch (mode) {                                                                     \
      case DL__E_SUM:                                                                   \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) g[i] = (T)((double)g[i] + c[i]);                        \
        break;                                                                          \
      case DL__E_EQ:                                                                    \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++)                                                         \
          g[i] = (T)((double)g[i] + ((double)x[i] == s[i] ? c[i] : 0.0));               \
        break;                                                                          \
      case DL__E_DEV:                                                                   \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++) g[i] = (T)((double)g[i] + c[i] * ((double)x[i] - s[i])); \
        break;                                                                          \
      default:                                                                          \
        DL__RSIMD                                                                       \
        for (i = 0; i < n; i++)                                                         \
          g[i] = (T)((double)g[i] + c[i] * EXP((double)x[i] - s[i]));                   \
        break;                                                                          \
    }                                                                                   \
  }                                                                                     \
  DL_API void dl__red_etile_##SFX(const dl__rplan *p, int mode, T *g, const T *x,       \
                                  const double *c, const double *s, int64_t tile) {     \
    const int64_t ch = tile % p->nc, rest = tile / p->nc;                               \
    if (p->row) {                                                                       \
      const int64_t o0 = rest * p->G, o1 = o0 + p->G < p->M ? o0 + p->G : p->M;         \
      int64_t o, r;                                                                     \
      for (o = o0; o < o1; o++) {                                                       \
        const double so = s ? s[o] : 0.0;                                               \
        if (p->split) {                                                                 \
          const int64_t i0 = (ch % p->ncr) * p->csz;                                    \
          const int64_t n = i0 + p->csz < p->ni ? p->csz : p->ni - i0;                  \
          const int64_t off = p->koff[o] + p->roff[ch / p->ncr] + i0;                   \
          dl__red_erun_##SFX(mode, g + off, x ? x + off : NULL, n, c[o], so);           \
        } else {                                                                        \
          const int64_t r0 = ch * p->csz;                                               \
          const int64_t r1 = r0 + p->csz < p->nro ? r0 + p->csz : p->nro;               \
          for (r = r0; r < r1; r++) {                                                   \
            const int64_t off = p->koff[o] + p->roff[r];                                \
            dl__red_erun_##SFX(mode, g + off, x ? x + off : NULL, p->ni, c[o], so);     \
          }                                                                             \
        }                                                                               \
      }                                                                                 \
    } else {                                                                            \
      const int64_t jb = tile % p->njb, rest2 = tile / p->njb;                          \
      const int64_t cc = rest2 % p->nc, kg = rest2 / p->nc;                             \
      const int64_t k0 = kg * p->G, k1 = k0 + p->G < p->nko ? k0 + p->G : p->nko;       \
      const int64_t j0 = jb * DL__RED_JB;                                               \
      const int64_t w = j0 + DL__RED_JB < p->ni ? DL__RED_JB : p->ni - j0;              \
      const int64_t r0 = cc * p->csz, r1 = r0 + p->csz < p->nro ? r0 + p->csz : p->nro; \
      int64_t k, r;                                                                     \
      (void)ch;                                                                         \
      for (k = k0; k < k1; k++) {                                                       \
        const int64_t o0 = k * p->ni + j0;                                              \
        for (r = r0; r < r1; r++) {                                                     \
          const int64_t off = p->koff[k] + p->roff[r] + j0;                             \
          dl__red_evec_##SFX(mode, g + off, x ? x + off : NULL, w, c + o0,              \
                             s ? s + o0 : NULL);                                        \
        }                                                                               \
      }                                                                                 \
    }                                                                                   \
  }
DL__RED_DEFINE(float, f32, DL__REXP32)
DL__RED_DEFINE(double, f64, DL__REXP)

/* out[o] (M doubles) = the reduction `mode` of contiguous x (and tangent t,
 * statistic s[o], for the modes that use them) under plan p. */
DL_API void dl__reduce(dl_tape *tp, const char *op, const dl__rplan *p, int mode,
                       const dl_tensor *x, const dl_tensor *t, const double *s, double *out) {
  double *part = NULL;
  int64_t o, c;
  if (p->nc > 1)
    part = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)(p->nc * p->M));
  if (x->dtype == DL_F32) {
    const float *xd = (const float *)x->data, *td = t ? (const float *)t->data : NULL;
    DL_PARALLEL_FOR(tp->ctx, x->numel, p->ntiles, tile,
                  dl__red_tile_f32(p, mode, xd, td, s, out, part, tile););
  } else {
    const double *xd = (const double *)x->data, *td = t ? (const double *)t->data : NULL;
    DL_PARALLEL_FOR(tp->ctx, x->numel, p->ntiles, tile,
                  dl__red_tile_f64(p, mode, xd, td, s, out, part, tile););
  }
  if (part) /* chunks combine in order: the same result for any thread count */
    for (o = 0; o < p->M; o++) {
      double a = part[o];
      for (c = 1; c < p->nc; c++) a = dl__red_combine(mode, a, part[c * p->M + o]);
      out[o] = a;
    }
}
/* g[e] += f(c[o], x[e], s[o]) over the elements e of every output o (g and x
 * contiguous, x's shape; x and s may be NULL for DL__E_SUM). */
DL_API void dl__red_expand(dl_ctx *ctx, const dl__rplan *p, int mode, dl_tensor *g,
                           const dl_tensor *x, const double *c, const double *s) {
  if (g->dtype == DL_F32) {
    float *gd = (float *)g->data;
    const float *xd = x ? (const float *)x->data : NULL;
    DL_PARALLEL_FOR(ctx, g->numel, p->ntiles, tile,
                  dl__red_etile_f32(p, mode, gd, xd, c, s, tile););
  } else {
    double *gd = (double *)g->data;
    const double *xd = x ? (const double *)x->data : NULL;
    DL_PARALLEL_FOR(ctx, g->numel, p->ntiles, tile,
                  dl__red_etile_f64(p, mode, gd, xd, c, s, tile););
  }
}

/* Contiguous t's values as doubles (n of them) into d. */
DL_API void dl__red_load(const dl_tensor *t, double *d) {
  int64_t i;
  if (t->dtype == DL_F32)
    for (i = 0; i < t->numel; i++) d[i] = (double)((const float *)t->data)[i];
  else
    for (i = 0; i < t->numel; i++) d[i] = ((const double *)t->data)[i];
}
/* Contiguous t = d[i] * scale. */
DL_API void dl__red_store(dl_tensor *t, const double *d, double scale) {
  int64_t i;
  if (t->dtype == DL_F32)
    for (i = 0; i < t->numel; i++) ((float *)t->data)[i] = (float)(d[i] * scale);
  else
    for (i = 0; i < t->numel; i++) ((double *)t->data)[i] = d[i] * scale;
}

/* >>axes -------------------------------------------------------------------- */

/* "[0, -1]" for messages. */
DL_API dl__shapebuf dl__red_axes_str(int naxes, const int *axes) {
  dl__shapebuf b;
  size_t at = 0;
  int k;
  at += (size_t)snprintf(b.s, sizeof b.s, "[");
  for (k = 0; k < naxes && axes && at < sizeof b.s; k++)
    at += (size_t)snprintf(b.s + at, sizeof b.s - at, k ? ", %d" : "%d", axes[k]);
  if (at < sizeof b.s) snprintf(b.s + at, sizeof b.s - at, "]");
  return b;
}
/* The set of reduced dimensions of x as a bit mask; panics naming the op,
 * x's shape and the axes on an axis out of range or given twice. A 0-d x
 * accepts axis 0 / -1 (and reduces nothing). */
DL_API unsigned dl__red_mask(const char *op, const dl_tensor *x, int naxes, const int *axes) {
  int nd = x->ndim ? x->ndim : 1, k;
  unsigned mask = 0;
  if (naxes < 0 || naxes > DL_MAX_DIMS || (naxes > 0 && !axes))
    DL_PANIC(x->ctx, op, "bad axes (naxes %d) for %s", naxes, DL_SHAPESTR(x));
  if (naxes == 0) return (1u << x->ndim) - 1u;
  for (k = 0; k < naxes; k++) {
    int a = axes[k];
    if (a < -nd || a >= nd)
      DL_PANIC(x->ctx, op, "axis %d out of range for %s (axes %s)", a, DL_SHAPESTR(x),
               dl__red_axes_str(naxes, axes).s);
    if (a < 0) a += nd;
    if (x->ndim == 0) continue;
    if (mask & (1u << a))
      DL_PANIC(x->ctx, op, "axis %d given twice for %s (axes %s)", axes[k], DL_SHAPESTR(x),
               dl__red_axes_str(naxes, axes).s);
    mask |= 1u << a;
  }
  return mask;
}
/* The output shape: reduced dimensions set to 1 (keepdim) or removed. */
DL_API int dl__red_out_shape(const dl_tensor *x, unsigned mask, int keepdim, int64_t *shape) {
  int d, n = 0;
  for (d = 0; d < x->ndim; d++) {
    if (!((mask >> d) & 1u)) shape[n++] = x->shape[d];
    else if (keepdim) shape[n++] = 1;
  }
  return n;
}

/* >>sum, mean, max, min, var, logsumexp ------------------------------------- */

enum { DL__RK_SUM, DL__RK_MEAN, DL__RK_MAX, DL__RK_MIN, DL__RK_VAR, DL__RK_LSE };
/* dl_hvp: sums, means and the selections of max and min are linear in the
 * output's gradient (their tangent rule is the rule itself); var and
 * logsumexp have their own (dl__red_hvp). */
DL_API unsigned dl__red_hvp_flag(int kind) {
  return kind == DL__RK_VAR || kind == DL__RK_LSE ? (unsigned)DL_NODE_HVP : (unsigned)DL_NODE_HVP_LINEAR;
}

#ifdef DL_USE_CUDA
/* The kernel's kind (dl/gpu/reduce.h) of a reduction kind; mean is a scaled sum. */
DL_API int dl__red_gpu_kind(int kind) {
  switch (kind) {
    case DL__RK_SUM:
    case DL__RK_MEAN: return DLG_RED_SUM;
    case DL__RK_MAX: return DLG_RED_MAX;
    case DL__RK_MIN: return DLG_RED_MIN;
    case DL__RK_VAR: return DLG_RED_VAR;
    default: return DLG_RED_LSE;
  }
}
#endif

/* Backward of every reduction: gx += d/dx of sum(y * gy). Node: i[0] the
 * mask, i[1] the kind; p[0] the scale (sum, mean) or 2 / (n - correction)
 * (var); saved[0] contiguous x (max, min, var, logsumexp), saved[1] the
 * means as f64 (var). */
/* dl_hvp's rule of var and logsumexp over the axes in mask (x [..], y its
 * reduction), on the host, in double; o(e) is element e's output:
 *   var  gx = c gy (x - m), c = 2 / (K - correction):
 *        d(gx) = c d(gy) (x - m) + c gy (tx - tm),   tm the mean of tx
 *   lse  gx = gy p, p = e^(x - y):
 *        d(gx) = d(gy) p + gy p (tx - ty),            ty y's tangent */
DL_API void dl__red_hvp(dl_tape *tp, const dl_node *n, dl_tensor *gx) {
  const dl_tensor *x = n->in[0], *xc = n->saved[0], *y = n->out, *gy = y->grad, *tgy = gy->tangent;
  const dl_tensor *tx = x->tangent;
  const unsigned mask = (unsigned)n->i[0];
  const int var = (int)n->i[1] == DL__RK_VAR;
  const int64_t M = y->numel, K = M ? x->numel / M : 0;
  double *tm = (double *)dl_tape_scratch(tp, n->op, sizeof(double) * (size_t)(M ? M : 1));
  int64_t idx[DL_MAX_DIMS], e, o;
  int pass, d;
  memset(tm, 0, sizeof(double) * (size_t)(M ? M : 1));
  for (pass = (var && tx) ? 0 : 1; pass < 2; pass++) {
    memset(idx, 0, sizeof idx);
    for (e = 0; e < x->numel; e++) {
      for (o = 0, d = 0; d < x->ndim; d++) /* the output's row-major index: the kept axes */
        if (!(mask & (1u << d))) o = o * x->shape[d] + idx[d];
      if (pass == 0) {
        tm[o] += dl__get_at(tx, dl__offset_of_linear(tx, e)) / (double)K;
      } else {
        const double xv = dl__get_at(xc, e), txv = tx ? dl__get_at(tx, dl__offset_of_linear(tx, e)) : 0.0;
        const double g = dl__get_at(gy, o), tg = dl__get_at(tgy, o);
        double v;
        if (var) {
          const double m = ((const double *)n->saved[1]->data)[o];
          v = n->p[0] * (tg * (xv - m) + g * (txv - tm[o]));
        } else {
          const double p = exp(xv - dl__get_at(y, o)), ty = y->tangent ? dl__get_at(y->tangent, o) : 0.0;
          v = tg * p + g * p * (txv - ty);
        }
        if (gx->dtype == DL_F32) ((float *)gx->tangent->data)[e] += (float)v;
        else ((double *)gx->tangent->data)[e] += v;
      }
      for (d = x->ndim - 1; d >= 0; d--) {
        if (++idx[d] < x->shape[d]) break;
        idx[d] = 0;
      }
    }
  }
}
DL_API void dl__t_reduce_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *x = n->in[0], *gx = dl_tape_grad(tp, x), *y = n->out, *xc = n->saved[0];
  const char *op = n->op;
  const int kind = (int)n->i[1];
  dl__rplan p;
  double *c, *s = NULL;
  int64_t o;
  if (!gx || x->numel == 0) return;
#ifdef DL_USE_CUDA
  if (gx->device == DL_CUDA) {
    dl__gpu_ok(gx, op, dlg_reduce_backward(dl__gpu_h(gx, op), (int)gx->dtype, dl__red_gpu_kind(kind), x->ndim,
                                           x->shape, (unsigned)n->i[0], gx->data, xc->data, y->data, y->grad->data,
                                           n->saved[1] ? (const double *)n->saved[1]->data : NULL, n->p[0]));
    return;
  }
#endif
  dl__rplan_make(tp, op, x->ndim, x->shape, (unsigned)n->i[0], &p);
  c = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)p.M);
  dl__red_load(y->grad, c);
  switch (kind) {
    case DL__RK_SUM:
    case DL__RK_MEAN:
      for (o = 0; o < p.M; o++) c[o] *= n->p[0];
      dl__red_expand(tp->ctx, &p, DL__E_SUM, gx, NULL, c, NULL);
      break;
    case DL__RK_MAX:
    case DL__RK_MIN: {
      double *cnt = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)p.M);
      s = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)p.M);
      dl__red_load(y, s);
      dl__reduce(tp, op, &p, DL__R_CNT, xc, NULL, s, cnt);
      for (o = 0; o < p.M; o++) c[o] /= cnt[o];
      dl__red_expand(tp->ctx, &p, DL__E_EQ, gx, xc, c, s);
      break;
    }
    case DL__RK_VAR:
      for (o = 0; o < p.M; o++) c[o] *= n->p[0];
      dl__red_expand(tp->ctx, &p, DL__E_DEV, gx, xc, c, (const double *)n->saved[1]->data);
      break;
    default: /* logsumexp: gy exp(x - y) */
      s = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)p.M);
      dl__red_load(y, s);
      dl__red_expand(tp->ctx, &p, DL__E_EXP, gx, xc, c, s);
      break;
  }
  if (tp->hvp && (kind == DL__RK_VAR || kind == DL__RK_LSE)) dl__red_hvp(tp, n, gx);
}

#ifdef DL_USE_CUDA
/* The forward on the device (x->numel > 0, y and ty made): one dlg_reduce
 * call, forward and tangent; the node as the CPU records it, its means on
 * the device. */
DL_API dl_tensor *dl__t_reduce_gpu(dl_tape *tp, const char *op, int kind, dl_tensor *x, dl_tensor *y,
                                   dl_tensor *ty, unsigned mask, double correction) {
  dl_tensor *xc = dl__t_contig(tp, op, x), *tc = NULL, *means = NULL;
  const int64_t M = y->numel, K = x->numel / y->numel;
  double scale = 1.0, tscale = 1.0, denom = 0.0;
  dl_node *n;
  if (ty) {
    dl__ops_same_device(op, x, x->tangent);
    tc = dl__t_contig(tp, op, x->tangent);
  }
  if (kind == DL__RK_MEAN) scale = tscale = 1.0 / (double)K;
  if (kind == DL__RK_VAR) {
    means = dl_tape_out(tp, op, DL_F64, 1, &M);
    denom = (double)K - correction;
    if (denom < 0) denom = 0; /* K <= correction: inf or NaN, like torch */
    scale = 1.0 / denom;
    tscale = 2.0 / denom;
  }
  dl__gpu_ok(x, op, dlg_reduce(dl__gpu_h(x, op), (int)x->dtype, dl__red_gpu_kind(kind), x->ndim, x->shape, mask,
                               xc->data, y->data, means ? (double *)means->data : NULL, scale,
                               tc ? tc->data : NULL, ty ? ty->data : NULL, tscale));
  if ((n = dl_tape_record(tp, op, dl__t_reduce_bw, y, x, NULL, NULL)) != NULL) {
    n->i[0] = (int64_t)mask;
    n->i[1] = kind;
    n->flags |= dl__red_hvp_flag(kind);
    n->p[0] = kind == DL__RK_VAR ? 2.0 / denom : scale;
    n->saved[0] = xc;
    n->saved[1] = means;
  }
  return y;
}
#endif

DL_API dl_tensor *dl__t_reduce(dl_tape *tp, const char *op, int kind, dl_tensor *x, int naxes,
                               const int *axes, double correction, int keepdim) {
  int64_t oshape[DL_MAX_DIMS] = {0}, o; /* all set by dl__red_out_shape; gcc -O2 cannot always tell */
  dl_tensor *y, *xc, *ty = NULL, *tc = NULL, *means = NULL;
  dl__rplan p;
  double *out, *tmp, scale = 1.0, denom = 0.0;
  unsigned mask;
  int ond;
  dl_node *n;
  dl__ops_same_float(op, x, NULL);
  mask = dl__red_mask(op, x, naxes, axes);
  ond = dl__red_out_shape(x, mask, keepdim, oshape);
  y = dl_tape_out(tp, op, x->dtype, ond, oshape);
#ifdef DL_USE_CUDA
  dl__ops_same_device(op, x, y); /* a device tensor on a host tape, or the reverse */
#endif
  if (x->tangent) ty = dl_tape_tangent(tp, y);
  if (x->numel == 0) { /* nothing to reduce: the reduction's value on an empty set */
    double v = 0.0;
    if (kind == DL__RK_MAX || kind == DL__RK_MIN) {
      if (y->numel > 0)
        DL_PANIC(x->ctx, op, "cannot reduce %s over axes %s: they hold no elements",
                 DL_SHAPESTR(x), dl__red_axes_str(naxes, axes).s);
    } else if (kind == DL__RK_MEAN || kind == DL__RK_VAR) v = NAN;
    else if (kind == DL__RK_LSE) v = -INFINITY;
    dl_tensor_fill(y, v);
    if ((n = dl_tape_record(tp, op, dl__t_reduce_bw, y, x, NULL, NULL)) != NULL) n->flags |= DL_NODE_HVP_LINEAR;
    return y;
  }
#ifdef DL_USE_CUDA
  if (x->device == DL_CUDA) return dl__t_reduce_gpu(tp, op, kind, x, y, ty, mask, correction);
#endif
  xc = dl__t_contig(tp, op, x);
  if (ty) tc = dl__t_contig(tp, op, x->tangent);
  dl__rplan_make(tp, op, x->ndim, x->shape, mask, &p);
  out = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)p.M);
  tmp = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)p.M);
  switch (kind) {
    case DL__RK_SUM:
    case DL__RK_MEAN:
      if (kind == DL__RK_MEAN) scale = 1.0 / (double)p.K;
      dl__reduce(tp, op, &p, DL__R_SUM, xc, NULL, NULL, out);
      dl__red_store(y, out, scale);
      if (ty) {
        dl__reduce(tp, op, &p, DL__R_SUM, tc, NULL, NULL, tmp);
        dl__red_store(ty, tmp, scale);
      }
      break;
    case DL__RK_MAX:
    case DL__RK_MIN:
      dl__reduce(tp, op, &p, kind == DL__RK_MAX ? DL__R_MAX : DL__R_MIN, xc, NULL, NULL, out);
      dl__red_store(y, out, 1.0);
      if (ty) { /* the tangent at the selected elements, averaged over ties */
        double *cnt = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)p.M);
        dl__reduce(tp, op, &p, DL__R_DOT_EQ, xc, tc, out, tmp);
        dl__reduce(tp, op, &p, DL__R_CNT, xc, NULL, out, cnt);
        for (o = 0; o < p.M; o++) tmp[o] /= cnt[o];
        dl__red_store(ty, tmp, 1.0);
      }
      break;
    case DL__RK_VAR: {
      double *mean;
      means = dl_tape_out(tp, op, DL_F64, 1, &p.M);
      mean = (double *)means->data;
      dl__reduce(tp, op, &p, DL__R_SUM, xc, NULL, NULL, mean);
      for (o = 0; o < p.M; o++) mean[o] /= (double)p.K;
      dl__reduce(tp, op, &p, DL__R_SQDEV, xc, NULL, mean, out);
      denom = (double)p.K - correction;
      if (denom < 0) denom = 0; /* K <= correction: inf or NaN, like torch */
      dl__red_store(y, out, 1.0 / denom);
      if (ty) {
        dl__reduce(tp, op, &p, DL__R_DOT_DEV, xc, tc, mean, tmp);
        dl__red_store(ty, tmp, 2.0 / denom);
      }
      break;
    }
    default: { /* logsumexp: m + log(sum(exp(x - m))), m the max (0 when infinite) */
      double *m = tmp;
      dl__reduce(tp, op, &p, DL__R_MAX, xc, NULL, NULL, m);
      for (o = 0; o < p.M; o++)
        if (m[o] == INFINITY || m[o] == -INFINITY) m[o] = 0.0;
      dl__reduce(tp, op, &p, DL__R_EXP, xc, NULL, m, out);
      for (o = 0; o < p.M; o++) out[o] = m[o] + log(out[o]);
      dl__red_store(y, out, 1.0);
      if (ty) {
        dl__reduce(tp, op, &p, DL__R_DOT_EXP, xc, tc, out, tmp);
        dl__red_store(ty, tmp, 1.0);
      }
      break;
    }
  }
  if ((n = dl_tape_record(tp, op, dl__t_reduce_bw, y, x, NULL, NULL)) != NULL) {
    n->i[0] = (int64_t)mask;
    n->i[1] = kind;
    n->flags |= dl__red_hvp_flag(kind);
    n->p[0] = kind == DL__RK_VAR ? 2.0 / denom : scale;
    n->saved[0] = xc;
    n->saved[1] = means;
  }
  return y;
}

/* Sum of x over `axes` (naxes of them, negative from the end; naxes 0: all),
 * keepdim keeping them as size 1. Output contiguous, in the tape's arena
 * (valid until dl_tape_rewind); 0-d when every dimension is reduced without
 * keepdim. Accumulates in double for f32 too. */
DL_API dl_tensor *dl_t_sum(dl_tape *tp, dl_tensor *x, int naxes, const int *axes, int keepdim) {
  return dl__t_reduce(tp, "dl_t_sum", DL__RK_SUM, x, naxes, axes, 0.0, keepdim);
}
/* Mean over axes (as dl_t_sum); NaN over an empty set. */
DL_API dl_tensor *dl_t_mean(dl_tape *tp, dl_tensor *x, int naxes, const int *axes, int keepdim) {
  return dl__t_reduce(tp, "dl_t_mean", DL__RK_MEAN, x, naxes, axes, 0.0, keepdim);
}
/* Maximum over axes (torch.amax); NaN propagates. The gradient is split
 * evenly among tied maxima. Panics when the axes hold no elements. */
DL_API dl_tensor *dl_t_max(dl_tape *tp, dl_tensor *x, int naxes, const int *axes, int keepdim) {
  return dl__t_reduce(tp, "dl_t_max", DL__RK_MAX, x, naxes, axes, 0.0, keepdim);
}
/* Minimum over axes (torch.amin), as dl_t_max. */
DL_API dl_tensor *dl_t_min(dl_tape *tp, dl_tensor *x, int naxes, const int *axes, int keepdim) {
  return dl__t_reduce(tp, "dl_t_min", DL__RK_MIN, x, naxes, axes, 0.0, keepdim);
}
/* Variance over axes: sum((x - mean)^2) / (n - correction), n the elements
 * reduced into each output; correction 1 is the unbiased estimate
 * (torch.var's default), 0 the population variance; n <= correction gives
 * inf or NaN, like torch. Two passes in double. */
DL_API dl_tensor *dl_t_var(dl_tape *tp, dl_tensor *x, int naxes, const int *axes, double correction,
                           int keepdim) {
  return dl__t_reduce(tp, "dl_t_var", DL__RK_VAR, x, naxes, axes, correction, keepdim);
}
/* log(sum(exp(x))) over axes, computed as m + log(sum(exp(x - m))) with m
 * the maximum: finite for inputs like +-1000; -inf over an empty set. */
DL_API dl_tensor *dl_t_logsumexp(dl_tape *tp, dl_tensor *x, int naxes, const int *axes,
                                 int keepdim) {
  return dl__t_reduce(tp, "dl_t_logsumexp", DL__RK_LSE, x, naxes, axes, 0.0, keepdim);
}
/* Sum / mean of every element: a 0-d tensor in the tape's arena. */
DL_API dl_tensor *dl_t_sum_all(dl_tape *tp, dl_tensor *x) {
  return dl__t_reduce(tp, "dl_t_sum_all", DL__RK_SUM, x, 0, NULL, 0.0, 0);
}
/* The mean of every element: a 0-d tensor. */
DL_API dl_tensor *dl_t_mean_all(dl_tape *tp, dl_tensor *x) {
  return dl__t_reduce(tp, "dl_t_mean_all", DL__RK_MEAN, x, 0, NULL, 0.0, 0);
}

/* >>softmax, log_softmax ---------------------------------------------------- */

/* The kernels, once for float and double. x viewed as [outer, K, inner]
 * (contiguous); rows: inner == 1, rows [r0, r1) of K contiguous elements;
 * cols: outer index o, inner columns [j0, j1) (at most DL__SM_JB).
 * Backward / tangent kinds, with y the saved output and a the upstream
 * gradient (or the input's tangent), g accumulated into:
 *   0 softmax:          g += y (a - sum(a y))        (backward and tangent)
 *   1 log_softmax:      g += a - exp(y) sum(a)       (backward)
 *   2 log_softmax:      g += a - sum(exp(y) a)       (tangent) */
#define DL__SOFTMAX_DEFINE(T, SFX, VEXP)                                                \
  DL_API void dl__sm_rows_##SFX(const T *xall, T *yall, int64_t K, int64_t r0, int64_t r1, \
                                int logsm) {                                            \
    int64_t r, i, l;                                                                    \
    if (K < DL__SM_SHORT) { /* short rows: exp in one flat loop over a block of rows */ \
      T mb[256];                                                                        \
      const int64_t B = DL__SM_BLOCK / K < 256 ? DL__SM_BLOCK / K : 256;                \
      int64_t rb, re;                                                                   \
      for (rb = r0; rb < r1; rb = re) {                                                 \
        T *const yb = yall + rb * K;                                                    \
        re = rb + B < r1 ? rb + B : r1;                                                 \
        for (r = rb; r < re; r++) {                                                     \
          const T *x = xall + r * K;                                                    \
          T *y = yall + r * K, m = x[0];                                                \
          for (i = 1; i < K; i++) m = x[i] > m ? x[i] : m;                              \
          for (i = 0; i < K; i++) y[i] = x[i] - m;                                      \
          mb[r - rb] = m;                                                               \
        }                                                                               \
        DL__RSIMD                                                                       \
        for (i = 0; i < (re - rb) * K; i++) yb[i] = VEXP(yb[i]);                        \
        for (r = rb; r < re; r++) {                                                     \
          const T *x = xall + r * K;                                                    \
          T *y = yall + r * K;                                                          \
          double s = 0;                                                                 \
          for (i = 0; i < K; i++) s += (double)y[i];                                    \
          if (logsm) {                                                                  \
            const T m = mb[r - rb], lse = (T)log(s);                                    \
            for (i = 0; i < K; i++) y[i] = (x[i] - m) - lse;                            \
          } else {                                                                      \
            const T inv = (T)(1.0 / s);                                                 \
            for (i = 0; i < K; i++) y[i] *= inv;                                        \
          }                                                                             \
        }                                                                               \
      }                                                                                 \
      return;                                                                           \
    }                                                                                   \
    for (r = r0; r < r1; r++) {                                                         \
      const T *DL__RESTRICT x = xall + r * K;                                           \
      T *DL__RESTRICT y = yall + r * K;                                                 \
      T m;                                                                              \
      double s = 0;                                                                     \
      DL__ROW_MAX16(T, x, K, m, i, l);                                                  \
      DL__RSIMD                                                                         \
      for (i = 0; i < K; i++) y[i] = VEXP(x[i] - m);                                    \
      DL__RED_LANES(s, i, K, DL__RT_Y);                                                 \
      if (logsm) {                                                                      \
        const T lse = (T)log(s);                                                        \
        DL__RSIMD                                                                       \
        for (i = 0; i < K; i++) y[i] = (x[i] - m) - lse;                                \
      } else {                                                                          \
        const T inv = (T)(1.0 / s);                                                     \
        DL__RSIMD                                                                       \
        for (i = 0; i < K; i++) y[i] *= inv;                                            \
      }                                                                                 \
    }                                                                                   \
  }                                                                                     \
  DL_API void dl__sm_cols_##SFX(const T *x, T *y, int64_t K, int64_t inner, int64_t o,  \
                                int64_t j0, int64_t j1, int logsm) {                    \
    double m[DL__SM_JB], s[DL__SM_JB];                                                  \
    const int64_t w = j1 - j0;                                                          \
    int64_t k, j;                                                                       \
    x += o * K * inner + j0;                                                            \
    y += o * K * inner + j0;                                                            \
    for (j = 0; j < w; j++) { m[j] = (double)x[j]; s[j] = 0; }                          \
    for (k = 1; k < K; k++)                                                             \
      for (j = 0; j < w; j++) {                                                         \
        double v = (double)x[k * inner + j];                                            \
        m[j] = v > m[j] ? v : m[j];                                                     \
      }                                                                                 \
    for (k = 0; k < K; k++)                                                             \
      for (j = 0; j < w; j++) {                                                         \
        T e = VEXP(x[k * inner + j] - (T)m[j]);                                         \
        y[k * inner + j] = e;                                                           \
        s[j] += (double)e;                                                              \
      }                                                                                 \
    for (j = 0; j < w; j++) s[j] = logsm ? log(s[j]) : 1.0 / s[j];                      \
    for (k = 0; k < K; k++)                                                             \
      for (j = 0; j < w; j++) {                                                         \
        const int64_t e = k * inner + j;                                                \
        y[e] = logsm ? (x[e] - (T)m[j]) - (T)s[j] : y[e] * (T)s[j];                     \
      }                                                                                 \
  }                                                                                     \
  DL_API void dl__sm_back_rows_##SFX(int kind, const T *yall, const T *aall, T *gall,   \
                                     int64_t K, int64_t r0, int64_t r1) {               \
    int64_t r, i;                                                                       \
    for (r = r0; r < r1; r++) {                                                         \
      const T *DL__RESTRICT y = yall + r * K, *DL__RESTRICT a = aall + r * K;           \
      T *DL__RESTRICT g = gall + r * K;                                                 \
      double d = 0;                                                                     \
      T dv;                                                                             \
      if (kind == 0) DL__RED_LANES(d, i, K, DL__RT_AY);                                 \
      else if (kind == 1) DL__RED_LANES(d, i, K, DL__RT_A);                             \
      else                                                                              \
        for (i = 0; i < K; i++) d += (double)VEXP(y[i]) * (double)a[i];                 \
      dv = (T)d;                                                                        \
      if (kind == 0) {                                                                  \
        DL__RSIMD                                                                       \
        for (i = 0; i < K; i++) g[i] = (T)((double)g[i] + (double)y[i] * ((double)a[i] - d)); \
      } else if (kind == 1) {                                                           \
        DL__RSIMD                                                                       \
        for (i = 0; i < K; i++) g[i] += a[i] - VEXP(y[i]) * dv;                         \
      } else {                                                                          \
        DL__RSIMD                                                                       \
        for (i = 0; i < K; i++) g[i] += a[i] - dv;                                      \
      }                                                                                 \
    }                                                                                   \
  }                                                                                     \
  DL_API void dl__sm_back_cols_##SFX(int kind, const T *y, const T *a, T *g, int64_t K, \
                                     int64_t inner, int64_t o, int64_t j0, int64_t j1) { \
    double d[DL__SM_JB];                                                                \
    const int64_t w = j1 - j0, base = o * K * inner + j0;                               \
    int64_t k, j;                                                                       \
    y += base;                                                                          \
    a += base;                                                                          \
    g += base;                                                                          \
    for (j = 0; j < w; j++) d[j] = 0;                                                   \
    for (k = 0; k < K; k++)                                                             \
      for (j = 0; j < w; j++) {                                                         \
        const int64_t e = k * inner + j;                                                \
        d[j] += kind == 0   ? (double)a[e] * (double)y[e]                               \
                : kind == 1 ? (double)a[e]                                              \
                            : (double)VEXP(y[e]) * (double)a[e];                        \
      }                                                                                 \
    for (k = 0; k < K; k++)                                                             \
      for (j = 0; j < w; j++) {                                                         \
        const int64_t e = k * inner + j;                                                \
        const T dv = (T)d[j];                                                           \
        if (kind == 0) g[e] = (T)((double)g[e] + (double)y[e] * ((double)a[e] - d[j])); \
        else g[e] += kind == 1 ? a[e] - VEXP(y[e]) * dv : a[e] - dv;                    \
      }                                                                                 \
  }
DL__SOFTMAX_DEFINE(float, f32, dl_vexp_f32)
DL__SOFTMAX_DEFINE(double, f64, DL__REXP)

/* Tiles of a softmax over [outer, K, inner]: groups of rows (inner == 1) or
 * (outer index, block of columns). */
typedef struct dl__smplan {
  int64_t outer, K, inner, G, njb, ntiles;
} dl__smplan;
DL_API dl__smplan dl__smplan_make(const dl_tensor *x, int axis) {
  dl__smplan q;
  int d;
  q.outer = 1;
  q.inner = 1;
  q.K = x->ndim ? x->shape[axis] : 1;
  for (d = 0; d < axis; d++) q.outer *= x->shape[d];
  for (d = axis + 1; d < x->ndim; d++) q.inner *= x->shape[d];
  if (q.inner == 1) {
    q.G = q.K > 0 && DL__RED_W / q.K > 1 ? DL__RED_W / q.K : 1;
    q.njb = 1;
    q.ntiles = (q.outer + q.G - 1) / q.G;
  } else {
    q.G = 1;
    q.njb = (q.inner + DL__SM_JB - 1) / DL__SM_JB;
    q.ntiles = q.outer * q.njb;
  }
  if (x->numel == 0) q.ntiles = 0;
  return q;
}
/* The tile's rows [*r0, *r1) (rows form) or outer index and columns. */
#define DL__SM_TILE(q, tile, A, B, C, D)                                                \
  const int64_t A = (q).inner == 1 ? (tile) * (q).G : (tile) / (q).njb;                 \
  const int64_t B = (q).inner == 1 ? (A + (q).G < (q).outer ? A + (q).G : (q).outer) : 0; \
  const int64_t C = (q).inner == 1 ? 0 : ((tile) % (q).njb) * DL__SM_JB;                \
  const int64_t D = (q).inner == 1 ? 0 : (C + DL__SM_JB < (q).inner ? C + DL__SM_JB : (q).inner);

/* g += the kind's rule (see DL__SOFTMAX_DEFINE) from y and a, all contiguous. */
DL_API void dl__sm_back(dl_ctx *ctx, const dl__smplan *q, int kind, const dl_tensor *y,
                        const dl_tensor *a, dl_tensor *g) {
  const dl__smplan qq = *q;
#ifdef DL_USE_CUDA
  if (g->device == DL_CUDA) {
    dl__ops_same_device("dl_t_softmax", g, y);
    dl__ops_same_device("dl_t_softmax", g, a);
    if (g->numel)
      dl__gpu_ok(g, "dl_t_softmax", dlg_softmax_backward(dl__gpu_h(g, "dl_t_softmax"), (int)g->dtype, qq.outer, qq.K,
                                                          qq.inner, kind, y->data, a->data, g->data));
    return;
  }
#endif
  if (y->dtype == DL_F32) {
    const float *yd = (const float *)y->data, *ad = (const float *)a->data;
    float *gd = (float *)g->data;
    DL_PARALLEL_FOR(ctx, 2 * y->numel, qq.ntiles, tile, {
      DL__SM_TILE(qq, tile, t0, t1, j0, j1)
      if (qq.inner == 1) dl__sm_back_rows_f32(kind, yd, ad, gd, qq.K, t0, t1);
      else dl__sm_back_cols_f32(kind, yd, ad, gd, qq.K, qq.inner, t0, j0, j1);
      (void)t1; (void)j0; (void)j1;
    });
  } else {
    const double *yd = (const double *)y->data, *ad = (const double *)a->data;
    double *gd = (double *)g->data;
    DL_PARALLEL_FOR(ctx, 2 * y->numel, qq.ntiles, tile, {
      DL__SM_TILE(qq, tile, t0, t1, j0, j1)
      if (qq.inner == 1) dl__sm_back_rows_f64(kind, yd, ad, gd, qq.K, t0, t1);
      else dl__sm_back_cols_f64(kind, yd, ad, gd, qq.K, qq.inner, t0, j0, j1);
      (void)t1; (void)j0; (void)j1;
    });
  }
}

/* Backward: i[0] the axis, i[1] 1 for log_softmax; the rule reads the output. */
DL_API void dl__t_softmax_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *x = n->in[0], *gx = dl_tape_grad(tp, x);
  dl__smplan q;
  if (!gx || x->numel == 0) return;
  q = dl__smplan_make(x, (int)n->i[0]);
  dl__sm_back(tp->ctx, &q, n->i[1] ? 1 : 0, n->out, n->out->grad, gx);
  if (tp->hvp) {
    /* the gradient's tangent: the rule on d(gy), plus the change of the
     * rule's own factor along y's tangent ty (the forward's):
     *   softmax      d(gx) = rule(d(gy)) + ty (gy - <gy, y>) - y <gy, ty>
     *   log_softmax  d(gx) = rule(d(gy)) - p ty sum(gy),  p = e^y
     * along each row of the axis */
    const dl_tensor *y = n->out, *ty = y->tangent, *gy = y->grad;
    int64_t o, j, k;
    dl__sm_back(tp->ctx, &q, n->i[1] ? 1 : 0, y, gy->tangent, gx->tangent);
    if (ty)
      for (o = 0; o < q.outer; o++)
        for (j = 0; j < q.inner; j++) {
          const int64_t base = o * q.K * q.inner + j;
          double a = 0, b = 0;
          for (k = 0; k < q.K; k++) {
            const int64_t e = base + k * q.inner;
            const double yv = dl__get_at(y, e), gv = dl__get_at(gy, e);
            a += n->i[1] ? gv : gv * yv;
            b += gv * dl__get_at(ty, e);
          }
          for (k = 0; k < q.K; k++) {
            const int64_t e = base + k * q.inner;
            const double yv = dl__get_at(y, e), tv = dl__get_at(ty, e), gv = dl__get_at(gy, e);
            const double d = n->i[1] ? -exp(yv) * tv * a : tv * (gv - a) - yv * b;
            if (gx->dtype == DL_F32) ((float *)gx->tangent->data)[e] += (float)d;
            else ((double *)gx->tangent->data)[e] += d;
          }
        }
  }
}

DL_API dl_tensor *dl__t_softmax(dl_tape *tp, const char *op, dl_tensor *x, int axis, int logsm) {
  int nd;
  dl_tensor *y, *xc;
  dl__smplan q;
  dl_node *n;
  dl__ops_same_float(op, x, NULL);
  nd = x->ndim ? x->ndim : 1;
  if (axis < -nd || axis >= nd)
    DL_PANIC(x->ctx, op, "axis %d out of range for %s", axis, DL_SHAPESTR(x));
  if (axis < 0) axis += nd;
  if (x->ndim == 0) axis = 0;
  y = dl_tape_out(tp, op, x->dtype, x->ndim, x->shape);
#ifdef DL_USE_CUDA
  dl__ops_same_device(op, x, y); /* a device tensor on a host tape, or the reverse */
#endif
  xc = dl__t_contig(tp, op, x);
  q = dl__smplan_make(x, axis);
#ifdef DL_USE_CUDA
  if (x->device == DL_CUDA) {
    if (x->numel)
      dl__gpu_ok(x, op, dlg_softmax(dl__gpu_h(x, op), (int)x->dtype, q.outer, q.K, q.inner, xc->data, y->data, logsm));
  } else
#endif
  {
    const dl__smplan qq = q;
    if (x->dtype == DL_F32) {
      const float *xd = (const float *)xc->data;
      float *yd = (float *)y->data;
      DL_PARALLEL_FOR(tp->ctx, x->numel, qq.ntiles, tile, {
        DL__SM_TILE(qq, tile, t0, t1, j0, j1)
        if (qq.inner == 1) dl__sm_rows_f32(xd, yd, qq.K, t0, t1, logsm);
        else dl__sm_cols_f32(xd, yd, qq.K, qq.inner, t0, j0, j1, logsm);
        (void)t1; (void)j0; (void)j1;
      });
    } else {
      const double *xd = (const double *)xc->data;
      double *yd = (double *)y->data;
      DL_PARALLEL_FOR(tp->ctx, x->numel, qq.ntiles, tile, {
        DL__SM_TILE(qq, tile, t0, t1, j0, j1)
        if (qq.inner == 1) dl__sm_rows_f64(xd, yd, qq.K, t0, t1, logsm);
        else dl__sm_cols_f64(xd, yd, qq.K, qq.inner, t0, j0, j1, logsm);
        (void)t1; (void)j0; (void)j1;
      });
    }
  }
  if (x->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y), *tc = dl__t_contig(tp, op, x->tangent);
    dl__sm_back(tp->ctx, &q, logsm ? 2 : 0, y, tc, ty);
  }
  if ((n = dl_tape_record(tp, op, dl__t_softmax_bw, y, x, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP;
    n->i[0] = axis;
    n->i[1] = logsm;
  }
  return y;
}

/* softmax(x) along `axis` (negative from the end): exp(x - max) / sum, the
 * same shape as x, contiguous, in the tape's arena (valid until
 * dl_tape_rewind). Stable for logits like +-1e4; a row of -inf gives NaN
 * (like torch). Backward and tangent use the output. */
DL_API dl_tensor *dl_t_softmax(dl_tape *tp, dl_tensor *x, int axis) {
  return dl__t_softmax(tp, "dl_t_softmax", x, axis, 0);
}
/* log(softmax(x)) along axis: x - max - log(sum(exp(x - max))), as
 * dl_t_softmax. */
DL_API dl_tensor *dl_t_log_softmax(dl_tape *tp, dl_tensor *x, int axis) {
  return dl__t_softmax(tp, "dl_t_log_softmax", x, axis, 1);
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_OPS_REDUCE_H */
