/* dl/ops/conv.h - convolution and pooling on the tape (see dl/ops.h).
 *
 *   dl_tensor *h = dl_t_conv2d(tp, x, w, b, &(dl_conv2d_args){.pad_h = 2, .pad_w = 2});
 *   dl_tensor *p = dl_t_max_pool2d(tp, dl_t_relu(tp, h), &(dl_pool2d_args){.kernel_h = 2, .kernel_w = 2});
 *
 * Layouts are PyTorch's: x [N, C, H, W] (conv1d: [N, C, L]; conv3d and the
 * 3-d pools: [N, C, D, H, W]), weights [O, C/groups, kh, kw] ([O, C/groups,
 * k]; [O, C/groups, kd, kh, kw]), outputs [N, O, Ho, Wo] ([N, O, Do, Ho,
 * Wo]). One code serves all three ranks: the geometry, im2col and the
 * pooling loops carry a depth, 1 for the 2-d ops (and conv1d is conv2d with
 * H = 1). Every
 * argument struct's all-zero value (or a NULL pointer) means PyTorch's
 * defaults: stride 1 (pools: the kernel size), no padding, dilation 1, one
 * group. Inputs may be strided views (copied to contiguous arena memory
 * first); outputs are contiguous tensors in the tape's arena, valid until
 * dl_tape_rewind. f32 and f64, never mixed.
 *
 * f32 3x3 convolutions with stride 1 (enough channels, a build for AVX2
 * and FMA) run Winograd's F(2x2, 3x3): see ">>winograd" below and
 * dl_ctx_desc.conv_algo. Every other convolution is im2col + GEMM: per
 * image and group,
 *   y[O/g, Ho*Wo] = w[O/g, C/g*kh*kw] @ col[C/g*kh*kw, Ho*Wo]
 * (3-d: K = C/g*kd*kh*kw rows, P = Do*Ho*Wo columns)
 * (a 1x1 convolution with stride 1 and no padding uses the image itself as
 * col). Backward: grad_w += gy @ col^T, grad_x += col2im(w^T @ gy),
 * grad_b += gy summed over the batch and positions. On the built-in
 * GEMM, w (forward) and w^T (grad_x) are packed into the kernel's panels
 * once per batch, not once per image (dl__conv_wpack). Above
 * dl_ctx_parallel_threshold elements of col work the batch is split over
 * an OpenMP team of dl_ctx_threads threads, each with its own col buffer
 * in the arena and each GEMM running on its own thread (under OpenBLAS's
 * pthreads build its thread count is set to 1 for the region and restored
 * after, so that the team and OpenBLAS's pool do not fight for the cores;
 * BLAS calls another thread of the program makes meanwhile run on one
 * thread too). Forward values, grad_x and grad_b do not depend on the
 * thread count; grad_w is summed per chunk of consecutive images (one
 * chunk per thread) and the chunks' sums are added in order, so it is the
 * same run after run for a given thread count.
 *
 * Forward mode: conv is bilinear, ty = conv(tx, w) + conv(x, tw) + tb; max
 * pooling takes the tangent at the argmax, average pooling averages it.
 */
#ifndef DL_OPS_CONV_H
#define DL_OPS_CONV_H

#include "core.h"
#include "shape.h" /* dl_t_pad: uneven padding of a convolution */
#include "reduce.h" /* DL__RSIMD_SUM: the bias gradient's vectorised sum */
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY /* the library's code (nvcc sees only the scalar math) */

/* >>arguments -------------------------------------------------------------- */

/* conv2d options; zero means PyTorch's default (stride 1, padding 0,
 * dilation 1, groups 1). pad_mode (see below): DL_PAD_EXPLICIT reads pad_h,
 * pad_w as the top / left and pad_h_end, pad_w_end as the bottom / right;
 * DL_PAD_SAME, DL_PAD_SAME_LOWER compute them. */
typedef struct dl_conv2d_args {
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups; /* 0: PyTorch's defaults (stride 1, padding 0, dilation 1, groups 1) */
  int pad_mode, pad_h_end, pad_w_end; /* see below; the _end paddings under DL_PAD_EXPLICIT */
} dl_conv2d_args;
/* conv1d options; zero means PyTorch's default; pad_mode as conv2d's (pad
 * at the start, pad_end at the end under DL_PAD_EXPLICIT). */
typedef struct dl_conv1d_args {
  int stride, pad, dil, groups; /* 0: PyTorch's defaults */
  int pad_mode, pad_end; /* as conv2d's: pad at the start, pad_end at the end */
} dl_conv1d_args;
/* conv3d options; zero means PyTorch's default (stride 1, padding 0,
 * dilation 1, groups 1); pad_mode as conv2d's, with pad_d / pad_d_end the
 * front / back of the depth under DL_PAD_EXPLICIT. */
typedef struct dl_conv3d_args {
  int stride_d, stride_h, stride_w; /* 0: 1 */
  int pad_d, pad_h, pad_w;          /* padding per axis (both sides, or the start under DL_PAD_EXPLICIT) */
  int dil_d, dil_h, dil_w;          /* dilation per axis, 0: 1 */
  int groups;                       /* 0: 1 */
  int pad_mode;                     /* DL_PAD_* (see below) */
  int pad_d_end, pad_h_end, pad_w_end; /* the end paddings under DL_PAD_EXPLICIT */
} dl_conv3d_args;
/* How a window op's padding is given (pad_mode):
 *   DL_PAD_SYMMETRIC (0)  pad_h rows at the top and at the bottom, pad_w
 *                         columns at the left and the right (PyTorch's);
 *   DL_PAD_EXPLICIT       pad_h at the top, pad_h_end at the bottom, pad_w
 *                         at the left, pad_w_end at the right (ONNX pads,
 *                         Keras' ZeroPadding2D before a layer);
 *   DL_PAD_SAME           TensorFlow's padding="SAME" (ONNX SAME_UPPER):
 *                         output ceil(H / stride), the padding that takes
 *                         (Ho - 1) stride + dil (k - 1) + 1 - H, at least
 *                         0, split with the odd one at the bottom / right;
 *   DL_PAD_SAME_LOWER     the same, the odd one at the top / left.
 * Under the SAME modes pad_h, pad_w and ceil_mode must be 0. */
enum { DL_PAD_SYMMETRIC = 0, DL_PAD_EXPLICIT = 1, DL_PAD_SAME = 2, DL_PAD_SAME_LOWER = 3 };

/* Pooling window: kernel_h, kernel_w > 0 are required; stride 0 means the
 * kernel size (PyTorch's default); symmetric padding at most half the
 * kernel (as in PyTorch), explicit padding less than the window on each
 * side; exclude_pad = 0 counts padded zeros in the average
 * (count_include_pad=True, PyTorch's default), 1 divides by the number of
 * elements inside the input (TensorFlow's SAME average is exclude_pad = 1).
 * dil_h, dil_w: dilation, 0 = 1, max pooling only. ceil_mode: output sizes
 * rounded up (PyTorch's ceil_mode=True). max_pool2d pads with -inf. */
typedef struct dl_pool2d_args {
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, exclude_pad; /* see below */
  int dil_h, dil_w, ceil_mode, pad_mode, pad_h_end, pad_w_end; /* see below and the pad modes above */
} dl_pool2d_args;

/* >>helpers ---------------------------------------------------------------- */

/* One axis of a window op: input size n, kernel k, stride s, dilation d,
 * padding p (and p_end under DL_PAD_EXPLICIT) under pad_mode `mode`, ceil
 * mode `ceil`: sets *pb, *pe (the padding before and after) and returns the
 * output size, -1 when the window is larger than the padded input. */
DL_API int64_t dl__window_axis(int mode, int64_t n, int64_t k, int64_t s, int64_t d, int64_t p, int64_t p_end,
                               int ceil, int64_t *pb, int64_t *pe) {
  const int64_t ek = (k - 1) * d + 1;
  int64_t o;
  if (mode == DL_PAD_SAME || mode == DL_PAD_SAME_LOWER) {
    int64_t tot;
    o = (n + s - 1) / s;
    tot = o > 0 ? (o - 1) * s + ek - n : 0;
    if (tot < 0) tot = 0;
    *pe = mode == DL_PAD_SAME ? tot - tot / 2 : tot / 2;
    *pb = tot - *pe;
    return o;
  }
  *pb = p;
  *pe = mode == DL_PAD_EXPLICIT ? p_end : p;
  if (n + *pb + *pe < ek) return -1;
  o = (n + *pb + *pe - ek + (ceil ? s - 1 : 0)) / s + 1;
  if (ceil && (o - 1) * s >= n + *pb) o--;
  return o;
}

/* One convolution's sizes: x [N, C, D, H, W], w [O, Cg, kd, kh, kw], y
 * [N, O, Do, Ho, Wo], G groups of Cg = C/G input and Og = O/G output
 * channels, K = Cg*kd*kh*kw rows and P = Do*Ho*Wo columns of col. conv2d is
 * the depth 1 case (D = kd = sd = dd = 1, pd = 0), conv1d also H = kh = 1. */
typedef struct dl__conv_geom {
  int64_t N, C, H, W, O, kh, kw, Ho, Wo;
  int64_t sh, sw, ph, pw, dh, dw, G;
  int64_t Cg, Og, K, P;
  int direct; /* 1x1x1, stride 1, no padding: the image is its own col */
  int64_t D, kd, Do, sd, pd, dd;
} dl__conv_geom;

/* Fills Do, Ho, Wo, Cg, Og, K, P, direct; a depth left 0 (D, kd, sd, dd)
 * means the 2-d case. */
DL_API void dl__conv_geom_fill(dl__conv_geom *g) {
  if (g->D == 0) g->D = 1;
  if (g->kd == 0) g->kd = 1;
  if (g->sd == 0) g->sd = 1;
  if (g->dd == 0) g->dd = 1;
  g->Do = (g->D + 2 * g->pd - g->dd * (g->kd - 1) - 1) / g->sd + 1;
  g->Ho = (g->H + 2 * g->ph - g->dh * (g->kh - 1) - 1) / g->sh + 1;
  g->Wo = (g->W + 2 * g->pw - g->dw * (g->kw - 1) - 1) / g->sw + 1;
  g->Cg = g->C / g->G;
  g->Og = g->O / g->G;
  g->K = g->Cg * g->kd * g->kh * g->kw;
  g->P = g->Do * g->Ho * g->Wo;
  g->direct = g->kd == 1 && g->kh == 1 && g->kw == 1 && g->sd == 1 && g->sh == 1 && g->sw == 1 && g->pd == 0 &&
              g->ph == 0 && g->pw == 0;
}

/* Panics naming op unless pad_mode `mode` fits the padding given for
 * `axes` axes: p[2 a] and p[2 a + 1] the start and end padding of axis a,
 * named names[2 a] and names[2 a + 1] (the args' fields). The end paddings
 * are read only under DL_PAD_EXPLICIT; the SAME modes compute the padding
 * and the output size, so the start paddings and ceil_mode must be 0. */
DL_API void dl__pad_mode_check(const char *op, const dl_tensor *x, int mode, int axes, const int *p,
                               const char *const *names, int ceil_mode) {
  const int same = mode == DL_PAD_SAME || mode == DL_PAD_SAME_LOWER;
  int a;
  if (mode < DL_PAD_SYMMETRIC || mode > DL_PAD_SAME_LOWER)
    DL_PANIC(x->ctx, op, "pad_mode %d for x %s: DL_PAD_SYMMETRIC, DL_PAD_EXPLICIT, DL_PAD_SAME or "
             "DL_PAD_SAME_LOWER", mode, DL_SHAPESTR(x));
  for (a = 0; a < axes; a++) {
    if (mode != DL_PAD_EXPLICIT && p[2 * a + 1])
      DL_PANIC(x->ctx, op, "%s %d for x %s is read only under pad_mode DL_PAD_EXPLICIT", names[2 * a + 1],
               p[2 * a + 1], DL_SHAPESTR(x));
    if (same && p[2 * a])
      DL_PANIC(x->ctx, op, "pad_mode SAME for x %s computes the padding: %s %d must be 0", DL_SHAPESTR(x),
               names[2 * a], p[2 * a]);
  }
  if (same && ceil_mode)
    DL_PANIC(x->ctx, op, "pad_mode SAME for x %s computes the output size: ceil_mode %d must be 0", DL_SHAPESTR(x),
             ceil_mode);
}

/* Threads for `items` independent items doing `work` elements in all:
 * dl_ctx_threads, at most one per item, 1 below the parallel threshold or
 * inside another parallel region. */
DL_API int dl__conv_team(const dl_ctx *ctx, int64_t items, int64_t work) {
  int nt = dl_ctx_threads(ctx);
#ifdef _OPENMP
  if (omp_in_parallel()) nt = 1;
#endif
  if ((int64_t)nt > items) nt = (int)items;
  if (nt < 1 || work < dl_ctx_parallel_threshold(ctx)) nt = 1;
  return nt;
}

/* Under DL_USE_OPENBLAS the per-image GEMMs of a parallel loop go through
 * dl_gemm, which runs OpenBLAS on one thread (blas.h); its pool is brought
 * down to one thread here, before the region, so that the members never
 * race to set it. */
DL_API void dl__conv_blas_single(void) {
#ifdef DL_USE_OPENBLAS
  dl__openblas_single();
#endif
}

/* The output columns [*lo, *hi) whose input column ow*s + off lies in [0, n). */
DL_API void dl__conv_range(int64_t off, int64_t s, int64_t n, int64_t outn, int64_t *lo, int64_t *hi) {
  int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t b = n - 1 - off >= 0 ? (n - 1 - off) / s + 1 : 0;
  if (a > outn) a = outn;
  if (b > outn) b = outn;
  if (b < a) b = a;
  *lo = a;
  *hi = b;
}

/* >>kernels (one image) ---------------------------------------------------- */

/* n rows of m values, d[r*rs + q] += s[r*ss + q], on AVX-512: 16 floats (8
 * doubles) a vector, a row's last piece masked, the even rows first and
 * then the odd ones. col2im's rows are short (14 and 13 values in the
 * Fashion CNN's second convolution): the portable form (4 at a time, then
 * one by one) spent its time in loop control and scalar tails. A masked
 * vector spans the start of the next row (its lanes off), and a load that
 * overlaps a store still in flight waits for it: in row order that ran
 * 2.2x slower than the portable form, two rows apart it does not wait.
 * The same additions, the same bits. */
#if defined(__AVX512F__) && !defined(__CUDACC__)
#include <immintrin.h>
/* (X(op): _mm512_<op>_ps or _pd; MT the mask type of W lanes) */
#define DL__CONV_ROWS_ACC_V_DEF(T, sfx, W, MT, X)                                                       \
  DL_API void dl__conv_rows_acc_v_##sfx(T *d, const T *s, int64_t n, int64_t m, int64_t rs, int64_t ss) { \
    int64_t r, q, par;                                                                                  \
    for (par = 0; par < 2; par++)                                                                       \
      for (r = par; r < n; r += 2) {                                                                    \
        T *dr = d + r * rs;                                                                             \
        const T *sr = s + r * ss;                                                                       \
        for (q = 0; q + (W) <= m; q += (W)) X(storeu)(dr + q, X(add)(X(loadu)(dr + q), X(loadu)(sr + q))); \
        if (q < m) {                                                                                    \
          const MT k = (MT)((1u << (m - q)) - 1u);                                                      \
          X(mask_storeu)(dr + q, k, X(add)(X(maskz_loadu)(k, dr + q), X(maskz_loadu)(k, sr + q)));     \
        }                                                                                               \
      }                                                                                                 \
  }
#define DL__CONV_XS(op) _mm512_##op##_ps
#define DL__CONV_XD(op) _mm512_##op##_pd
DL__CONV_ROWS_ACC_V_DEF(float, f32, 16, __mmask16, DL__CONV_XS)
DL__CONV_ROWS_ACC_V_DEF(double, f64, 8, __mmask8, DL__CONV_XD)
#undef DL__CONV_ROWS_ACC_V_DEF
#undef DL__CONV_XS
#undef DL__CONV_XD
#define DL__CONV_ROWS_ACC_V(sfx, d, s, n, m, rs, ss) \
  {                                                 \
    dl__conv_rows_acc_v_##sfx(d, s, n, m, rs, ss);  \
    return;                                         \
  }
#else
#define DL__CONV_ROWS_ACC_V(sfx, d, s, n, m, rs, ss)
#endif

/* Per element type T (sfx f32 / f64):
 *   dl__im2col_<sfx>(g, x, col)       col[K, P] of one group of one image
 *                                     (x: its first channel, [Cg, H, W])
 *   dl__col2im_<sfx>(g, col, gx)      gx[Cg, H, W] += the columns, scattered back
 *   dl__conv_fwd_img_<sfx>(...)       y[O, P] (=, or += when acc) of one image
 *   dl__conv_bwd_img_<sfx>(...)       gw += gy @ col^T and gx += col2im(w^T @ gy)
 *                                     for one image (either may be NULL)
 *   dl__conv_bias_<sfx>(...)          rows of y[O, P] (=, or += when acc) the bias */
#define DL__CONV_KERNELS(T, sfx)                                                                   \
  /* d[0..m) = s[0..m) (= / +=), 4 at a time: a vector move each, where the                        \
   * compiler would leave a short loop of unknown length scalar */                                 \
  DL_API void dl__conv_copy_##sfx(T *d, const T *s, int64_t m) {                                   \
    int64_t q;                                                                                     \
    for (q = 0; q + 4 <= m; q += 4) memcpy(d + q, s + q, 4 * sizeof(T));                           \
    for (; q < m; q++) d[q] = s[q];                                                                \
  }                                                                                                \
  /* d[0..m) = 0 for a few m: the first two stores written out (a loop alone                      \
   * becomes a libc memset call, costly for one element) */                                        \
  DL_API void dl__conv_zero_##sfx(T *d, int64_t m) {                                               \
    int64_t q;                                                                                     \
    d[0] = 0;                                                                                      \
    if (m > 1) d[1] = 0;                                                                           \
    for (q = 2; q < m; q++) d[q] = 0;                                                              \
  }                                                                                                \
  DL_API void dl__conv_acc_##sfx(T *d, const T *s, int64_t m) {                                    \
    int64_t q;                                                                                     \
    for (q = 0; q + 4 <= m; q += 4) {                                                              \
      T a[4], b[4];                                                                                \
      memcpy(a, d + q, sizeof a);                                                                  \
      memcpy(b, s + q, sizeof b);                                                                  \
      a[0] += b[0];                                                                                \
      a[1] += b[1];                                                                                \
      a[2] += b[2];                                                                                \
      a[3] += b[3];                                                                                \
      memcpy(d + q, a, sizeof a);                                                                  \
    }                                                                                              \
    for (; q < m; q++) d[q] += s[q];                                                               \
  }                                                                                                \
  /* n rows of m values: d[r*m + q] = s[r*rs + q], and d[r*rs + q] += s[r*ss + q]                   \
   * (AVX-512: DL__CONV_ROWS_ACC_V): functions of their own, so that few                           \
   * values are live (no spills). */                                                               \
  DL_API void dl__conv_rows_##sfx(T *DL__RESTRICT d, const T *DL__RESTRICT s, int64_t n,           \
                                  int64_t m, int64_t rs) {                                         \
    for (; n > 0; n--, d += m, s += rs) dl__conv_copy_##sfx(d, s, m);                              \
  }                                                                                                \
  DL_API void dl__conv_rows_acc_##sfx(T *DL__RESTRICT d, const T *DL__RESTRICT s, int64_t n,       \
                                      int64_t m, int64_t rs, int64_t ss) {                         \
    DL__CONV_ROWS_ACC_V(sfx, d, s, n, m, rs, ss)                                                   \
    for (; n > 0; n--, d += rs, s += ss) dl__conv_acc_##sfx(d, s, m);                              \
  }                                                                                                \
  /* Row (c, a, i, j) of col, column (od, oh, ow), is x[c, od*sd - pd + a*dd,                      \
   * oh*sh - ph + i*dh, ow*sw - pw + j*dw], zero outside the input; for each                       \
   * depth tap a and output depth od (one of each in 2-d) rows oh in [olo, ohi)                    \
   * and columns ow in [lo, hi) are the ones inside. The channel loop is                           \
   * innermost: the ranges (two divisions each) are worked out kd*Do*kh*kw                         \
   * times, not Cg*kd*kh*kw times. */                                                              \
  DL_API void dl__im2col_##sfx(const dl__conv_geom *g, const T *x, T *col) {                       \
    const int64_t Wo = g->Wo, sw = g->sw, rs = g->sh * g->W, HW = g->H * g->W;                     \
    const int64_t Q = g->Ho * Wo, DHW = g->D * HW, kk = g->kh * g->kw;                             \
    const int64_t cstep = g->kd * kk * g->P;                                                       \
    int64_t c, a, od, i, j, oh, ow, lo, hi, olo, ohi, dlo, dhi;                                    \
    for (a = 0; a < g->kd; a++) {                                                                  \
      const int64_t doff = a * g->dd - g->pd;                                                      \
      dl__conv_range(doff, g->sd, g->D, g->Do, &dlo, &dhi);                                        \
      for (od = 0; od < g->Do; od++) {                                                             \
        const T *xd = x + (od * g->sd + doff) * HW;                                                \
        T *cd = col + a * kk * g->P + od * Q;                                                      \
        if (od < dlo || od >= dhi) { /* a depth outside the input: zeros */                        \
          for (c = 0; c < g->Cg; c++)                                                              \
            for (i = 0; i < kk; i++) memset(cd + c * cstep + i * g->P, 0, sizeof(T) * (size_t)Q);  \
          continue;                                                                                \
        }                                                                                          \
        for (i = 0; i < g->kh; i++) {                                                              \
          const int64_t hoff = i * g->dh - g->ph;                                                  \
          dl__conv_range(hoff, g->sh, g->H, g->Ho, &olo, &ohi);                                    \
          for (j = 0; j < g->kw; j++) {                                                            \
            const int64_t woff = j * g->dw - g->pw;                                                \
            T *dst0 = cd + (i * g->kw + j) * g->P;                                                 \
            dl__conv_range(woff, sw, g->W, Wo, &lo, &hi);                                          \
            for (c = 0; c < g->Cg; c++) {                                                          \
              T *dst = dst0 + c * cstep;                                                           \
              const T *src;                                                                        \
              if (ohi <= olo || hi <= lo) { /* nothing of x in this row */                         \
                memset(dst, 0, sizeof(T) * (size_t)Q);                                             \
                continue;                                                                          \
              }                                                                                    \
              if (olo > 0) memset(dst, 0, sizeof(T) * (size_t)(olo * Wo));                         \
              if (ohi < g->Ho) memset(dst + ohi * Wo, 0, sizeof(T) * (size_t)((g->Ho - ohi) * Wo)); \
              /* the first inside row, from its first inside column */                             \
              src = xd + c * DHW + (olo * g->sh + hoff) * g->W + (lo * sw + woff);                 \
              dst += olo * Wo;                                                                     \
              if (sw == 1 && rs == Wo) {                                                           \
                /* column stride 1 and a row of x per output row (sh W == Wo: stride 1 and        \
                 * "same" padding): the inside rows are one stretch of x, one copy, then the        \
                 * edge columns (garbage from the next row, or not written) zeroed, one or two      \
                 * elements each written out so the compiler makes no memset call of them */       \
                memcpy(dst + lo, src, sizeof(T) * (size_t)((ohi - olo - 1) * Wo + hi - lo));       \
                if (lo > 0 || hi < Wo)                                                             \
                  for (oh = olo; oh < ohi; oh++, dst += Wo) {                                      \
                    if (lo > 0) dl__conv_zero_##sfx(dst, lo);                                      \
                    if (hi < Wo) dl__conv_zero_##sfx(dst + hi, Wo - hi);                           \
                  }                                                                                \
              } else if (sw == 1 && lo == 0 && hi == Wo) {                                         \
                dl__conv_rows_##sfx(dst, src, ohi - olo, Wo, rs);                                  \
              } else {                                                                             \
                for (oh = olo; oh < ohi; oh++, dst += Wo, src += rs) {                             \
                  for (ow = 0; ow < lo; ow++) dst[ow] = 0;                                         \
                  if (sw == 1) dl__conv_copy_##sfx(dst + lo, src, hi - lo);                        \
                  else                                                                             \
                    for (ow = lo; ow < hi; ow++) dst[ow] = src[(ow - lo) * sw];                    \
                  for (ow = hi; ow < Wo; ow++) dst[ow] = 0;                                        \
                }                                                                                  \
              }                                                                                    \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  /* gx[Cg, D, H, W] += the columns, each back where im2col took it from.                          \
   * Channel innermost here too, which also keeps the overlapping                                  \
   * read-modify-writes of neighbouring kernel columns j, j+1 far apart (a                         \
   * load that partly overlaps a store still in flight stalls). */                                 \
  DL_API void dl__col2im_##sfx(const dl__conv_geom *g, const T *col, T *gx) {                      \
    const int64_t Wo = g->Wo, sw = g->sw, rs = g->sh * g->W, HW = g->H * g->W;                     \
    const int64_t Q = g->Ho * Wo, DHW = g->D * HW, kk = g->kh * g->kw;                             \
    const int64_t cstep = g->kd * kk * g->P;                                                       \
    int64_t c, a, od, i, j, oh, ow, lo, hi, olo, ohi, dlo, dhi;                                    \
    for (a = 0; a < g->kd; a++) {                                                                  \
      const int64_t doff = a * g->dd - g->pd;                                                      \
      dl__conv_range(doff, g->sd, g->D, g->Do, &dlo, &dhi);                                        \
      for (od = dlo; od < dhi; od++) {                                                             \
        T *gd = gx + (od * g->sd + doff) * HW;                                                     \
        const T *cd = col + a * kk * g->P + od * Q;                                                \
        for (i = 0; i < g->kh; i++) {                                                              \
          const int64_t hoff = i * g->dh - g->ph;                                                  \
          dl__conv_range(hoff, g->sh, g->H, g->Ho, &olo, &ohi);                                    \
          if (ohi <= olo) continue;                                                                \
          for (j = 0; j < g->kw; j++) {                                                            \
            const int64_t woff = j * g->dw - g->pw;                                                \
            const T *src0;                                                                         \
            T *dst0;                                                                               \
            dl__conv_range(woff, sw, g->W, Wo, &lo, &hi);                                          \
            if (hi <= lo) continue;                                                                \
            src0 = cd + (i * g->kw + j) * g->P + olo * Wo + lo;                                    \
            dst0 = gd + (olo * g->sh + hoff) * g->W + (lo * sw + woff);                            \
            for (c = 0; c < g->Cg; c++) {                                                          \
              const T *src = src0 + c * cstep;                                                     \
              T *dst = dst0 + c * DHW;                                                             \
              if (sw == 1) {                                                                       \
                dl__conv_rows_acc_##sfx(dst, src, ohi - olo, hi - lo, rs, Wo);                     \
                continue;                                                                          \
              }                                                                                    \
              for (oh = olo; oh < ohi; oh++, src += Wo, dst += rs) {                               \
                for (ow = 0; ow < hi - lo; ow++) dst[ow * sw] += src[ow];                          \
              }                                                                                    \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  DL_API void dl__conv_bias_##sfx(int64_t O, int64_t P, const T *b, T *y, int acc) {               \
    int64_t o, p;                                                                                  \
    for (o = 0; o < O; o++) {                                                                      \
      const T bo = b[o];                                                                           \
      T *r = y + o * P;                                                                            \
      if (acc)                                                                                     \
        for (p = 0; p < P; p++) r[p] += bo;                                                        \
      else                                                                                         \
        for (p = 0; p < P; p++) r[p] = bo;                                                         \
    }                                                                                              \
  }                                                                                                \
  DL_API void dl__conv_fwd_img_##sfx(dl_ctx *ctx, const dl__conv_geom *g, const void *xv,          \
                                     const void *wv, const void *bv, void *yv, int acc,           \
                                     void *colv, const void *wpack) {                              \
    const T *x = (const T *)xv, *w = (const T *)wv, *b = (const T *)bv;                            \
    T *y = (T *)yv, *col = (T *)colv;                                                              \
    const dl__gemm_kind gk = dl__gemm_kind_##sfx();                                                \
    const size_t wpb = dl__gemm_packed_a_bytes(&gk, g->Og, g->K);                                  \
    int64_t gi;                                                                                    \
    for (gi = 0; gi < g->G; gi++) {                                                                \
      const T *xg = x + gi * g->Cg * g->D * g->H * g->W, *B = xg;                                  \
      T *yg = y + gi * g->Og * g->P;                                                               \
      T beta = acc ? (T)1 : (T)0;                                                                  \
      if (b) {                                                                                     \
        dl__conv_bias_##sfx(g->Og, g->P, b + gi * g->Og, yg, acc);                                 \
        beta = 1;                                                                                  \
      }                                                                                            \
      if (!g->direct) {                                                                            \
        dl__im2col_##sfx(g, xg, col);                                                              \
        B = col;                                                                                   \
      }                                                                                            \
      if (!wpack || !dl__gemm_serial_pa(ctx, &gk, g->Og, g->P, g->K, 1.0,                          \
                                        (const unsigned char *)wpack + (size_t)gi * wpb, DL_NOTRANS, \
                                        B, g->P, (double)beta, yg, g->P))                          \
        dl_gemm_##sfx(ctx, DL_NOTRANS, DL_NOTRANS, g->Og, g->P, g->K, (T)1, w + gi * g->Og * g->K, \
                      g->K, B, g->P, beta, yg, g->P);                                              \
    }                                                                                              \
  }                                                                                                \
  DL_API void dl__conv_bwd_img_##sfx(dl_ctx *ctx, const dl__conv_geom *g, const void *xv,          \
                                     const void *wv, const void *gyv, void *gxv, void *gwv,        \
                                     void *colv, int gx0, const void *wtpack) {                    \
    const T *x = (const T *)xv, *w = (const T *)wv, *gy = (const T *)gyv;                          \
    T *gx = (T *)gxv, *gw = (T *)gwv, *col = (T *)colv;                                            \
    const dl__gemm_kind gk = dl__gemm_kind_##sfx();                                                \
    const size_t wpb = dl__gemm_packed_a_bytes(&gk, g->K, g->Og);                                  \
    int64_t gi;                                                                                    \
    for (gi = 0; gi < g->G; gi++) {                                                                \
      const T *xg = x + gi * g->Cg * g->D * g->H * g->W, *wg = w + gi * g->Og * g->K;              \
      const T *gyg = gy + gi * g->Og * g->P;                                                       \
      if (gw) {                                                                                    \
        const T *B = xg;                                                                           \
        if (!g->direct) {                                                                          \
          dl__im2col_##sfx(g, xg, col);                                                            \
          B = col;                                                                                 \
        }                                                                                          \
        dl_gemm_##sfx(ctx, DL_NOTRANS, DL_TRANS, g->Og, g->K, g->P, (T)1, gyg, g->P, B, g->P,      \
                      (T)1, gw + gi * g->Og * g->K, g->K);                                         \
      }                                                                                            \
      if (gx) {                                                                                    \
        T *gxg = gx + gi * g->Cg * g->D * g->H * g->W;                                             \
        /* w^T @ gy: into gx itself when direct (gx0: gx not zeroed yet, written, not              \
         * added to), else into col for col2im */                                                  \
        T *dst = g->direct ? gxg : col;                                                            \
        const T beta = g->direct && !gx0 ? (T)1 : (T)0;                                            \
        if (!wtpack || !dl__gemm_serial_pa(ctx, &gk, g->K, g->P, g->Og, 1.0,                       \
                                           (const unsigned char *)wtpack + (size_t)gi * wpb,       \
                                           DL_NOTRANS, gyg, g->P, (double)beta, dst, g->P))        \
          dl_gemm_##sfx(ctx, DL_TRANS, DL_NOTRANS, g->K, g->P, g->Og, (T)1, wg, g->K, gyg, g->P,   \
                        beta, dst, g->P);                                                          \
        if (!g->direct) {                                                                          \
          if (gx0) memset(gxg, 0, sizeof(T) * (size_t)(g->Cg * g->D * g->H * g->W));               \
          dl__col2im_##sfx(g, col, gxg);                                                           \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }

DL__CONV_KERNELS(float, f32)
DL__CONV_KERNELS(double, f64)

typedef void (*dl__conv_fwd_fn)(dl_ctx *, const dl__conv_geom *, const void *, const void *,
                                const void *, void *, int, void *, const void *);
typedef void (*dl__conv_bwd_fn)(dl_ctx *, const dl__conv_geom *, const void *, const void *,
                                const void *, void *, void *, void *, int, const void *);

/* Bytes of one thread's col buffer (a multiple of 64: no false sharing). */
DL_API size_t dl__conv_col_bytes(const dl__conv_geom *g, size_t es) {
  return g->direct ? 0 : ((size_t)(g->K * g->P) * es + 63) & ~(size_t)63;
}

/* >>drivers (the batch) ---------------------------------------------------- */

/* The weight packed once for the batch (dl__gemm_pack_all_a; each group's
 * at group * dl__gemm_packed_a_bytes), for the products of the images
 * (dl__gemm_serial_pa), where the products would run on one thread each
 * on the built-in kernel: the team splits the images (nt > 1) or a
 * product is too small for a team, and OpenBLAS is not the GEMM (its own
 * products stay its). Otherwise NULL: the images' products go through
 * dl_gemm, packing the weight each time. t: op(A) is w^T (the input
 * gradient's w^T @ gy) rather than w. The same kernel calls on the same
 * panels either way: the same bits. Packing w (64 x 288, fashion_cnn's
 * second convolution) took 4-6 us of each image's 90. */
DL_API void *dl__conv_wpack(dl_tape *tp, const char *op, const dl__conv_geom *g, dl_dtype dt, const void *w,
                            int nt, int t) {
  dl_ctx *ctx = tp->ctx;
  const dl__gemm_kind gk = dt == DL_F32 ? dl__gemm_kind_f32() : dl__gemm_kind_f64();
  const int64_t M = t ? g->K : g->Og, K = t ? g->Og : g->K;
  const size_t per = dl__gemm_packed_a_bytes(&gk, M, K), es = dl_dtype_size(dt);
  int threads = dl_ctx_threads(ctx);
  unsigned char *pk;
  int64_t gi;
#ifdef DL_USE_OPENBLAS
  if (dl__openblas_chosen()) return NULL;
#endif
#ifdef _OPENMP
  if (omp_in_parallel()) threads = 1;
#endif
  if (!(nt > 1 || threads == 1 || 2.0 * (double)(g->Og * g->K) * (double)g->P <= (double)DL_GEMM_PARALLEL_FLOPS))
    return NULL;
  pk = (unsigned char *)dl_tape_scratch(tp, op, per * (size_t)g->G);
  for (gi = 0; gi < g->G; gi++)
    dl__gemm_pack_all_a(&gk, t ? DL_TRANS : DL_NOTRANS, (const unsigned char *)w + (size_t)(gi * g->Og * g->K) * es,
                        g->K, M, K, pk + (size_t)gi * per);
  return pk;
}

/* dl__conv_forward by im2col + GEMM. */
DL_API void dl__conv_forward_im2col(dl_tape *tp, const char *op, const dl__conv_geom *g, dl_dtype dt,
                                    const void *x, const void *w, const void *b, void *y, int acc) {
  dl_ctx *ctx = tp->ctx;
  const size_t es = dl_dtype_size(dt), colb = dl__conv_col_bytes(g, es);
  const size_t xs = (size_t)(g->C * g->D * g->H * g->W) * es, ys = (size_t)(g->O * g->P) * es;
  const dl__conv_fwd_fn f = dt == DL_F32 ? dl__conv_fwd_img_f32 : dl__conv_fwd_img_f64;
  const int nt = dl__conv_team(ctx, g->N, g->N * g->G * g->K * g->P);
  /* one col buffer per worker the loop may use */
  unsigned char *col = colb ? (unsigned char *)dl_tape_scratch(tp, op, colb * (size_t)(nt > 1 ? dl_ctx_threads(ctx) : 1)) : NULL;
  const unsigned char *xb = (const unsigned char *)x;
  unsigned char *yb = (unsigned char *)y;
  const void *wpack = g->N > 1 ? dl__conv_wpack(tp, op, g, dt, w, nt, 0) : NULL;
  if (nt > 1) dl__conv_blas_single();
  DL_PARALLEL_FOR(ctx, nt > 1 ? g->N * g->G * g->K * g->P : 0, g->N, i, {
    /* alone (nt 1: inside a caller's parallel region, dl_worker() is the
     * caller's thread number) the one buffer allocated above */
    unsigned char *mine = col ? col + (size_t)(nt > 1 ? dl_worker() : 0) * colb : NULL;
    f(ctx, g, xb + (size_t)i * xs, w, b, yb + (size_t)i * ys, acc, mine, wpack);
  });
}

/* gb[o] += gy[:, o, :] summed over the batch and the positions, in double:
 * part[n, o] is row (n, o) of gy summed in vector lanes (DL__RSIMD_SUM), and
 * gb[o] gets the parts added in image order, so the sum is the same
 * whichever thread summed which image. dl__conv_bias_part sums one image's
 * rows; dl__conv_backward calls it inside its loop over the images, where
 * the image's rows of gy are read for the weight and input gradients anyway
 * (a pass of its own over gy before that loop read all of gy from memory
 * once more: 0.6 ms of fashion_cnn's 15 ms step on 2 threads). */
DL_API void dl__conv_bias_part(const dl__conv_geom *g, dl_dtype dt, const void *gy, int64_t n, double *part) {
  int64_t o, p;
  for (o = 0; o < g->O; o++) {
    double s = 0;
    if (dt == DL_F32) {
      const float *r = (const float *)gy + (n * g->O + o) * g->P;
      DL__RSIMD_SUM(s)
      for (p = 0; p < g->P; p++) s += (double)r[p];
    } else {
      const double *r = (const double *)gy + (n * g->O + o) * g->P;
      DL__RSIMD_SUM(s)
      for (p = 0; p < g->P; p++) s += r[p];
    }
    part[n * g->O + o] = s;
  }
}
DL_API void dl__conv_bias_fold(const dl__conv_geom *g, dl_dtype dt, const double *part, void *gb) {
  int64_t n, o;
  for (o = 0; o < g->O; o++) {
    double s = 0;
    for (n = 0; n < g->N; n++) s += part[n * g->O + o];
    if (dt == DL_F32) ((float *)gb)[o] += (float)s;
    else ((double *)gb)[o] += s;
  }
}

/* Gradients of conv (each NULL when not wanted; all contiguous):
 * gx [N, C, H, W] += ..., gw [O, Cg, kh, kw] += ..., gb [O] += ...
 * With a team, the batch is cut into one chunk of consecutive images per
 * thread (more chunks balance a loaded machine better but measured 2-15%
 * slower on an idle one: each needs its own copy of grad_w); chunk 0 sums
 * into gw, chunk k > 0 into its own zeroed copy, and the copies are added
 * in chunk order, each element by one thread: the result depends on the
 * chunk boundaries only, so it is the same run after run for a given
 * thread count. grad_x elements are each summed by one thread in a fixed
 * order (as serially), grad_b as dl__conv_bias_part says (the same at any
 * thread count). */
DL_API void dl__conv_backward_im2col(dl_tape *tp, const char *op, const dl__conv_geom *g, dl_dtype dt,
                                     const void *x, const void *w, const void *gy, void *gx, void *gw,
                                     void *gb, int gx0) {
  dl_ctx *ctx = tp->ctx;
  const size_t es = dl_dtype_size(dt), colb = dl__conv_col_bytes(g, es);
  const size_t xs = (size_t)(g->C * g->D * g->H * g->W) * es, ys = (size_t)(g->O * g->P) * es;
  const size_t wn = (size_t)(g->O * g->K), wb = (wn * es + 63) & ~(size_t)63;
  const dl__conv_bwd_fn f = dt == DL_F32 ? dl__conv_bwd_img_f32 : dl__conv_bwd_img_f64;
  const unsigned char *xb = (const unsigned char *)x, *gyb = (const unsigned char *)gy;
  unsigned char *gxb = (unsigned char *)gx, *col, *parts = NULL;
  double *bpart = gb ? (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)(g->N * g->O)) : NULL;
  const void *wtpack;
  int64_t n, nch;
  int nt;
  nt = dl__conv_team(ctx, g->N, g->N * g->G * g->K * g->P);
  wtpack = gx && g->N > 1 ? dl__conv_wpack(tp, op, g, dt, w, nt, 1) : NULL;
  if (nt == 1) {
    col = colb && (gx || gw) ? (unsigned char *)dl_tape_scratch(tp, op, colb) : NULL;
    for (n = 0; n < g->N; n++) {
      if (bpart) dl__conv_bias_part(g, dt, gy, n, bpart);
      if (gx || gw)
        f(ctx, g, xb + (size_t)n * xs, w, gyb + (size_t)n * ys, gx ? gxb + (size_t)n * xs : NULL, gw, col, gx0,
          wtpack);
    }
    if (bpart) dl__conv_bias_fold(g, dt, bpart, gb);
    return;
  }
  nch = gx || gw ? nt : 0;
  col = colb && nch ? (unsigned char *)dl_tape_scratch(tp, op, colb * (size_t)dl_ctx_threads(ctx)) : NULL;
  if (gw && nch > 1) parts = (unsigned char *)dl_tape_scratch(tp, op, wb * (size_t)(nch - 1));
  dl__conv_blas_single();
  if (nch == 0) { /* the bias alone */
    DL_PARALLEL_RUNS(ctx, g->N * g->O * g->P, g->N, k, { dl__conv_bias_part(g, dt, gy, k, bpart); });
  } else {
    DL_PARALLEL_FOR(ctx, g->N * g->G * g->K * g->P, nch, k, {
      unsigned char *mine = col ? col + (size_t)dl_worker() * colb : NULL;
      void *mygw = !gw ? NULL : k == 0 ? gw : (void *)(parts + (size_t)(k - 1) * wb);
      int64_t i;
      if (mygw && k > 0) memset(mygw, 0, wn * es);
      for (i = g->N * k / nch; i < g->N * (k + 1) / nch; i++) {
        if (bpart) dl__conv_bias_part(g, dt, gy, i, bpart);
        f(ctx, g, xb + (size_t)i * xs, w, gyb + (size_t)i * ys, gx ? gxb + (size_t)i * xs : NULL, mygw, mine, gx0,
          wtpack);
      }
    });
  }
  if (bpart) dl__conv_bias_fold(g, dt, bpart, gb);
  if (parts) { /* gw += the copies in chunk order, each element by one block */
    const int64_t nblk = (int64_t)((wn + 1023) / 1024);
    DL_PARALLEL_FOR(ctx, (int64_t)wn * nch, nblk, k, {
      const size_t k0 = (size_t)k * 1024, k1 = k0 + 1024 < wn ? k0 + 1024 : wn;
      size_t e;
      int64_t c;
      for (c = 1; c < nch; c++) {
        const unsigned char *src = parts + (size_t)(c - 1) * wb;
        if (dt == DL_F32)
          for (e = k0; e < k1; e++) ((float *)gw)[e] += ((const float *)src)[e];
        else
          for (e = k0; e < k1; e++) ((double *)gw)[e] += ((const double *)src)[e];
      }
    });
  }
}

/* >>winograd (f32, 3x3, stride 1) ------------------------------------------
 * Where the compiler targets AVX2 and FMA (-march=native on any x86-64 of
 * the last ten years, -mavx2 -mfma), the f32 3x3 convolution with stride 1,
 * dilation 1, one group and at least DL__WINO_MIN_CH input and output
 * channels (fashion_cnn's second convolution; VGG- and ResNet-style layers)
 * runs Winograd's F(2x2, 3x3) unless the context's desc says conv_algo =
 * DL_CONV_IM2COL. Each 2x2 block of outputs (a tile) is
 *   y = A^T [ sum_c (G g G^T) . (B^T d B) ] A
 * with d the tile's 4x4 input patch of channel c, g the 3x3 kernel from c,
 * `.` element-wise, and
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
 *   A^T = [1 1 1 0; 0 1 -1 -1]:
 * per position p of the 4x4 transformed tile a product over the channels,
 * M[p] (O x tiles) = U[p] (O x C) @ V[p] (C x tiles), 16 products of C
 * where im2col has 36: 2.25x fewer multiply-adds. The backward is the same
 * algebra read backwards (exact for these linear maps):
 *   dM[p] = (A gy A^T)[p],  dV[p] = U[p]^T @ dM[p],  dU[p] = dM[p] @ V[p]^T,
 *   grad_x += B dV B^T (the tiles' 4x4 patches overlap by 2: added up),
 *   grad_w += G^T dU G.
 * The work goes in groups of DL__WL = 8 tiles of a tile row (a row of 14
 * outputs has 7 tiles: lane 8 computes a tile that is dropped), and in
 * blocks of DL__WINO_BLOCK images: V (or dM) of a block's groups, columns
 * of [16][C][lanes]; then the channel products two groups at a time
 * (dl__wino_mk_f32: 6 rows of the output by 16 lanes in 12 registers) and
 * their outputs (or grad_x patches); then grad_w's products, summed over
 * the block's lanes (dl__wino_gwk_f32, against V turned tiles by
 * channels). The transforms of a group are AVX2 intrinsics (in plain C
 * loops of 8, gcc -O2 took twice its -O3 time for them). Measured on a
 * Zen 3: the channel products as 16 OpenBLAS calls a block (K = 32) ran
 * at half the FMA peak and made the convolution no faster than im2col;
 * the kernels here run at about 70-80% of it.
 * y and grad_x are computed per image, the same at any thread count;
 * grad_w is summed per chunk of images (one chunk per thread), the chunks
 * added in order, as im2col's is. The rounding is not im2col's (the
 * transforms add and subtract inputs before the products). f64 always
 * takes im2col. */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__CUDACC__)
#define DL__WINO 1
#include <immintrin.h>
#endif
#ifndef DL__WINO_BLOCK
#define DL__WINO_BLOCK 4 /* images whose tiles one weight-gradient product sums */
#endif
#define DL__WINO_MIN_CH 16 /* fewer input or output channels: the transforms cost more than they save */
/* N x tiles x C x O below this: im2col (3 images, 16 -> 24 channels, 14x14 ran at 0.6-1.0x its speed) */
#define DL__WINO_MIN_WORK 1048576.0
#define DL__WL 8

typedef struct dl__wino {
  int64_t th, tw, nq; /* tile rows and columns of an output plane, groups of DL__WL a tile row */
  int64_t hp, lw;     /* padded rows, length of a padded row's even (odd) half, groups' reach included */
  int64_t sp;         /* floats of one split plane (2 hp lw) */
  int64_t nb, tb;     /* images a block; its lanes, nb th nq DL__WL, and DL__WL more (a lone last group's pair) */
  int64_t cp;         /* C rounded up to a multiple of 8 */
} dl__wino;

DL_API int dl__wino_ok(const dl_ctx *ctx, const dl__conv_geom *g, dl_dtype dt) {
#ifdef DL__WINO
  const int algo = ctx ? ctx->desc.conv_algo : DL_CONV_AUTO;
  if (dt != DL_F32 || algo == DL_CONV_IM2COL || g->D != 1 || g->kd != 1 || g->kh != 3 || g->kw != 3 || g->sh != 1 ||
      g->sw != 1 || g->dh != 1 || g->dw != 1 || g->G != 1 || g->Ho < 1 || g->Wo < 1 || g->N < 1)
    return 0;
  return algo == DL_CONV_WINOGRAD ||
         (g->C >= DL__WINO_MIN_CH && g->O >= DL__WINO_MIN_CH &&
          (double)g->N * (double)((g->Ho + 1) / 2 * ((g->Wo + 1) / 2)) * (double)g->C * (double)g->O >=
              DL__WINO_MIN_WORK);
#else
  (void)ctx;
  (void)g;
  (void)dt;
  return 0;
#endif
}

#ifdef DL__WINO
DL_API dl__wino dl__wino_make(const dl__conv_geom *g) {
  dl__wino w;
  w.th = (g->Ho + 1) / 2;
  w.tw = (g->Wo + 1) / 2;
  w.nq = (w.tw + DL__WL - 1) / DL__WL;
  w.hp = 2 * w.th + 2;
  w.lw = w.nq * DL__WL + DL__WL;
  w.sp = 2 * w.hp * w.lw;
  w.nb = g->N < DL__WINO_BLOCK ? g->N : DL__WINO_BLOCK;
  w.tb = w.nb * w.th * w.nq * DL__WL + DL__WL;
  w.cp = (g->C + 7) / 8 * 8;
  return w;
}

/* U[p][o][c] (t = 0) or U[p][c][o] (t = 1) = (G g G^T)[p] of w[o][c] (3x3). */
DL_API void dl__wino_u_f32(int64_t O, int64_t C, const float *w, float *U, int t) {
  const int64_t so = t ? 1 : C, sc = t ? O : 1;
  int64_t o, c, i, j;
  for (o = 0; o < O; o++)
    for (c = 0; c < C; c++) {
      const float *k = w + (o * C + c) * 9;
      float r[4][3];
      for (j = 0; j < 3; j++) {
        const float a = k[j], b = k[3 + j], d = k[6 + j];
        r[0][j] = a;
        r[1][j] = 0.5f * (a + b + d);
        r[2][j] = 0.5f * (a - b + d);
        r[3][j] = d;
      }
      for (i = 0; i < 4; i++) {
        const float a = r[i][0], b = r[i][1], d = r[i][2];
        float *u = U + 4 * i * O * C + o * so + c * sc;
        u[0] = a;
        u[O * C] = 0.5f * (a + b + d);
        u[2 * O * C] = 0.5f * (a - b + d);
        u[3 * O * C] = d;
      }
    }
}
/* gw[o][c] += G^T dU[:][o][c] G. */
DL_API void dl__wino_gw_f32(int64_t O, int64_t C, const float *dU, float *gw) {
  int64_t o, c, i, j;
  for (o = 0; o < O; o++)
    for (c = 0; c < C; c++) {
      float u[4][4], t[3][4];
      for (i = 0; i < 16; i++) u[i / 4][i % 4] = dU[(i * O + o) * C + c];
      for (j = 0; j < 4; j++) {
        t[0][j] = u[0][j] + 0.5f * (u[1][j] + u[2][j]);
        t[1][j] = 0.5f * (u[1][j] - u[2][j]);
        t[2][j] = 0.5f * (u[1][j] + u[2][j]) + u[3][j];
      }
      for (i = 0; i < 3; i++) {
        float *k = gw + (o * C + c) * 9 + i * 3;
        k[0] += t[i][0] + 0.5f * (t[i][1] + t[i][2]);
        k[1] += 0.5f * (t[i][1] - t[i][2]);
        k[2] += 0.5f * (t[i][1] + t[i][2]) + t[i][3];
      }
    }
}
/* A plane's zero-padded rows taken apart, S[r][m] = P[r][2 m] and S[hp + r][m]
 * = P[r][2 m + 1], P[r][s] = x[r - ph][s - pw] inside the image, else 0. */
DL_API void dl__wino_split_f32(const dl__conv_geom *g, const dl__wino *w, const float *x, float *S) {
  /* columns 2 m - pw (even half) and 2 m + 1 - pw (odd half) inside [0, W) for m in [a, b) */
  const int64_t pw = g->pw, ae = (pw + 1) / 2, be = (g->W - 1 + pw) / 2 + 1, ao = pw / 2, bo = (g->W - 2 + pw) / 2 + 1;
  int64_t r, m;
  memset(S, 0, sizeof(float) * (size_t)w->sp);
  for (r = 0; r < w->hp; r++) {
    const int64_t yy = r - g->ph;
    float *er = S + r * w->lw, *orow = S + (w->hp + r) * w->lw;
    const float *xr;
    if (yy < 0 || yy >= g->H) continue;
    xr = x + yy * g->W;
    for (m = ae; m < be && m < w->lw; m++) er[m] = xr[2 * m - pw];
    for (m = ao; m < bo && m < w->lw; m++) orow[m] = xr[2 * m + 1 - pw];
  }
}
/* V of group (ty, q) of a split plane S: d[p ps + l] = (B^T patch B)[p]. */
DL_API void dl__wino_v8_f32(const dl__wino *w, const float *S, int64_t ty, int64_t q, float *d, int64_t ps) {
  __m256 h[4][4];
  int a, k;
  /* B^T on the columns of patch row a: E[m] - E[m+1], O[m] + E[m+1], E[m+1] - O[m], O[m] - O[m+1] */
  for (a = 0; a < 4; a++) {
    const float *e = S + (2 * ty + a) * w->lw + q * DL__WL, *o = e + w->hp * w->lw;
    const __m256 e0 = _mm256_loadu_ps(e), e1 = _mm256_loadu_ps(e + 1), o0 = _mm256_loadu_ps(o),
                 o1 = _mm256_loadu_ps(o + 1);
    h[a][0] = _mm256_sub_ps(e0, e1);
    h[a][1] = _mm256_add_ps(o0, e1);
    h[a][2] = _mm256_sub_ps(e1, o0);
    h[a][3] = _mm256_sub_ps(o0, o1);
  }
  for (k = 0; k < 4; k++) { /* then on the rows */
    _mm256_storeu_ps(d + k * ps, _mm256_sub_ps(h[0][k], h[2][k]));
    _mm256_storeu_ps(d + (4 + k) * ps, _mm256_add_ps(h[1][k], h[2][k]));
    _mm256_storeu_ps(d + (8 + k) * ps, _mm256_sub_ps(h[2][k], h[1][k]));
    _mm256_storeu_ps(d + (12 + k) * ps, _mm256_sub_ps(h[1][k], h[3][k]));
  }
}
/* The gy plane gp taken apart into R (4 th lw floats): row i's even
 * columns at R + 2 i lw, its odd ones lw after, zeros past the plane. */
DL_API void dl__wino_gysplit_f32(const dl__conv_geom *g, const dl__wino *w, const float *gp, float *R) {
  const int64_t ne = (g->Wo + 1) / 2, no = g->Wo / 2;
  int64_t i, m;
  memset(R, 0, sizeof(float) * (size_t)(4 * w->th * w->lw));
  for (i = 0; i < g->Ho; i++) {
    const float *gr = gp + i * g->Wo;
    float *e = R + 2 * i * w->lw, *o = e + w->lw;
    for (m = 0; m < ne; m++) e[m] = gr[2 * m];
    for (m = 0; m < no; m++) o[m] = gr[2 * m + 1];
  }
}
/* dM of group q of tile row ty of a gy plane split by dl__wino_gysplit_f32
 * into R (R + 4 ty lw: the row pair):
 * d[p ps + l] = (A gy A^T)[p] (0 in lanes past the row's tiles). */
DL_API void dl__wino_dm8_f32(const dl__wino *w, const float *R, int64_t q, float *d, int64_t ps) {
  const float *p0 = R + q * DL__WL;
  const __m256 e0 = _mm256_loadu_ps(p0), o0 = _mm256_loadu_ps(p0 + w->lw), e1 = _mm256_loadu_ps(p0 + 2 * w->lw),
               o1 = _mm256_loadu_ps(p0 + 3 * w->lw), z = _mm256_setzero_ps();
  /* the rows of A gy: q0, q0 + q1, q0 - q1, -q1 (each its two columns a, b) */
  const __m256 ra[4] = {e0, _mm256_add_ps(e0, e1), _mm256_sub_ps(e0, e1), _mm256_sub_ps(z, e1)};
  const __m256 rb[4] = {o0, _mm256_add_ps(o0, o1), _mm256_sub_ps(o0, o1), _mm256_sub_ps(z, o1)};
  int i;
  for (i = 0; i < 4; i++) { /* then its columns: a, a + b, a - b, -b */
    _mm256_storeu_ps(d + 4 * i * ps, ra[i]);
    _mm256_storeu_ps(d + (4 * i + 1) * ps, _mm256_add_ps(ra[i], rb[i]));
    _mm256_storeu_ps(d + (4 * i + 2) * ps, _mm256_sub_ps(ra[i], rb[i]));
    _mm256_storeu_ps(d + (4 * i + 3) * ps, _mm256_sub_ps(z, rb[i]));
  }
}
/* d[0 .. min(8, n)) = (or += when acc) the lanes of v (AMD's masked
 * stores are microcoded: a row's end goes through memory instead). */
DL__INL void dl__wino_put8(float *d, __m256 v, int64_t n, int acc) {
  if (n >= 8) {
    _mm256_storeu_ps(d, acc ? _mm256_add_ps(_mm256_loadu_ps(d), v) : v);
  } else {
    float t[8];
    int64_t i;
    _mm256_storeu_ps(t, v);
    if (acc)
      for (i = 0; i < n; i++) d[i] += t[i];
    else
      for (i = 0; i < n; i++) d[i] = t[i];
  }
}
/* Output rows 2 ty, 2 ty + 1 of group (ty, q) of the y plane yp from
 * m[p ps + l]: A^T M A + bo, written (added when acc) inside the plane. */
DL_API void dl__wino_y8_f32(const dl__conv_geom *g, const float *m, int64_t ps, int64_t ty, int64_t q, float bo,
                            float *yp, int acc) {
  const int64_t x0 = 2 * q * DL__WL, nx = g->Wo - x0 < 2 * DL__WL ? g->Wo - x0 : 2 * DL__WL;
  const int rows = 2 * ty + 1 < g->Ho ? 2 : 1;
  const __m256 b8 = _mm256_set1_ps(bo);
  __m256 r[2][4];
  int k, i;
  for (k = 0; k < 4; k++) { /* A^T on the rows */
    const __m256 m0 = _mm256_loadu_ps(m + k * ps), m1 = _mm256_loadu_ps(m + (4 + k) * ps),
                 m2 = _mm256_loadu_ps(m + (8 + k) * ps), m3 = _mm256_loadu_ps(m + (12 + k) * ps);
    r[0][k] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
    r[1][k] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
  }
  for (i = 0; i < rows; i++) { /* then on the columns, the bias, and the two outputs of each tile side by side */
    const __m256 e = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r[i][0], r[i][1]), r[i][2]), b8);
    const __m256 o = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(r[i][1], r[i][2]), r[i][3]), b8);
    const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
    __m256 v0 = _mm256_permute2f128_ps(lo, hi, 0x20), v1 = _mm256_permute2f128_ps(lo, hi, 0x31);
    float *yr = yp + (2 * ty + i) * g->Wo + x0;
    dl__wino_put8(yr, v0, nx, acc);
    if (nx > 8) dl__wino_put8(yr + 8, v1, nx - 8, acc);
  }
}
/* Group (ty, q)'s B dV B^T added into the split plane G of grad_x (lanes
 * past the row's tiles skipped): dv[p ps + l]. */
DL_API void dl__wino_gx8_f32(const dl__wino *w, const float *dv, int64_t ps, int64_t ty, int64_t q, float *G) {
  const int64_t nv = w->tw - q * DL__WL < DL__WL ? w->tw - q * DL__WL : DL__WL;
  const __m256 keep = _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps((float)nv), _CMP_LT_OQ);
  __m256 t[4][4];
  int i, j;
  for (j = 0; j < 4; j++) { /* B on the rows of column j: v0, v1 - v2 + v3, v1 + v2 - v0, -v3 */
    const __m256 a = _mm256_and_ps(keep, _mm256_loadu_ps(dv + j * ps));
    const __m256 b = _mm256_and_ps(keep, _mm256_loadu_ps(dv + (4 + j) * ps));
    const __m256 c = _mm256_and_ps(keep, _mm256_loadu_ps(dv + (8 + j) * ps));
    const __m256 e = _mm256_and_ps(keep, _mm256_loadu_ps(dv + (12 + j) * ps));
    t[0][j] = a;
    t[1][j] = _mm256_add_ps(_mm256_sub_ps(b, c), e);
    t[2][j] = _mm256_sub_ps(_mm256_add_ps(b, c), a);
    t[3][j] = _mm256_sub_ps(_mm256_setzero_ps(), e);
  }
  for (i = 0; i < 4; i++) { /* then on the columns, added into the patch: even columns m and m + 1, odd ones likewise */
    float *e = G + (2 * ty + i) * w->lw + q * DL__WL, *o = e + w->hp * w->lw;
    const __m256 d1 = _mm256_add_ps(_mm256_sub_ps(t[i][1], t[i][2]), t[i][3]);
    const __m256 d2 = _mm256_sub_ps(_mm256_add_ps(t[i][1], t[i][2]), t[i][0]);
    _mm256_storeu_ps(e, _mm256_add_ps(_mm256_loadu_ps(e), t[i][0]));
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), d1));
    _mm256_storeu_ps(e + 1, _mm256_add_ps(_mm256_loadu_ps(e + 1), d2));
    _mm256_storeu_ps(o + 1, _mm256_sub_ps(_mm256_loadu_ps(o + 1), t[i][3]));
  }
}
/* A split plane G back into the image plane xp: written (gx0) or added. */
DL_API void dl__wino_unsplit_f32(const dl__conv_geom *g, const dl__wino *w, const float *G, float *xp, int gx0) {
  int64_t yy, xx;
  for (yy = 0; yy < g->H; yy++) {
    const float *er = G + (yy + g->ph) * w->lw, *orow = er + w->hp * w->lw;
    float *xr = xp + yy * g->W;
    for (xx = 0; xx < g->W; xx++) {
      const int64_t s = xx + g->pw;
      const float v = s & 1 ? orow[s >> 1] : er[s >> 1];
      xr[xx] = gx0 ? v : xr[xx] + v;
    }
  }
}
/* The 16 products of two groups: d[p ds + m 16 + l] = sum_k a[p as + k ak +
 * m] b[p bs + k ldb + l], m < rows, k < K, l < 16: R rows (6, then 4, 2,
 * 1) at a time in 2 R registers, two vectors of b and R broadcasts of a a
 * step. */
/* (the registers named one by one: at -O2 gcc kept a loop's array of
 * accumulators in memory, at 40% of this speed) */
#define DL__WINO_R6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define DL__WINO_R4(X) X(0) X(1) X(2) X(3)
#define DL__WINO_R2(X) X(0) X(1)
#define DL__WINO_R1(X) X(0)
#define DL__WINO_MK_ZERO(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
#define DL__WINO_MK_STEP(r)                                                                      \
  u = _mm256_broadcast_ss(ar + (r));                                                             \
  c##r##0 = _mm256_fmadd_ps(u, v0, c##r##0);                                                     \
  c##r##1 = _mm256_fmadd_ps(u, v1, c##r##1);
#define DL__WINO_MK_STORE(r)                                                                     \
  _mm256_storeu_ps(dp + (m + (r)) * 16, c##r##0);                                                \
  _mm256_storeu_ps(dp + (m + (r)) * 16 + 8, c##r##1);
#define DL__WINO_MK(R)                                                                           \
  for (; m + (R) <= rows; m += (R)) {                                                            \
    DL__WINO_R##R(DL__WINO_MK_ZERO)                                                              \
    for (k = 0; k < K; k++) {                                                                    \
      const __m256 v0 = _mm256_loadu_ps(bp + k * ldb), v1 = _mm256_loadu_ps(bp + k * ldb + 8);   \
      const float *ar = ap + k * ak + m;                                                         \
      __m256 u;                                                                                  \
      DL__WINO_R##R(DL__WINO_MK_STEP)                                                            \
    }                                                                                            \
    DL__WINO_R##R(DL__WINO_MK_STORE)                                                             \
  }
DL_API void dl__wino_mk_f32(int64_t rows, int64_t K, const float *a, int64_t as, int64_t ak, const float *b,
                            int64_t bs, int64_t ldb, float *d, int64_t ds) {
  int64_t p, m, k;
  for (p = 0; p < 16; p++) {
    const float *ap = a + p * as, *bp = b + p * bs;
    float *dp = d + p * ds;
    m = 0;
    DL__WINO_MK(6)
    DL__WINO_MK(4)
    DL__WINO_MK(2)
    DL__WINO_MK(1)
  }
}

/* The weight gradient's products of a block: dU[p][o][c] += sum_t dM[p][o][t]
 * VT[p][t][c] over its n tiles (dM's rows ld apart, p O ld apart; VT's rows
 * cp (C rounded up to 8) apart, p ld cp apart): R rows (6, 4, 2, 1) of dM
 * broadcast against 16 (then 8) columns of VT, 2 R registers. */
/* (NV = 2 or 1 vectors of VT's columns; the rows as dl__wino_mk_f32's) */
#define DL__WINO_GW_LOAD2 const __m256 v0 = _mm256_loadu_ps(vp + t * cp + c), v1 = _mm256_loadu_ps(vp + t * cp + c + 8);
#define DL__WINO_GW_LOAD1 const __m256 v0 = _mm256_loadu_ps(vp + t * cp + c);
#define DL__WINO_GW_ZERO2(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();
#define DL__WINO_GW_ZERO1(r) __m256 a##r##0 = _mm256_setzero_ps();
#define DL__WINO_GW_STEP2(r)                                                                     \
  u = _mm256_broadcast_ss(mp + (o + (r)) * ld + t);                                              \
  a##r##0 = _mm256_fmadd_ps(u, v0, a##r##0);                                                     \
  a##r##1 = _mm256_fmadd_ps(u, v1, a##r##1);
#define DL__WINO_GW_STEP1(r)                                                                     \
  u = _mm256_broadcast_ss(mp + (o + (r)) * ld + t);                                              \
  a##r##0 = _mm256_fmadd_ps(u, v0, a##r##0);
#define DL__WINO_GW_STORE2(r)                                                                    \
  dl__wino_put8(up + (o + (r)) * C + c, a##r##0, C - c, 1);                                       \
  dl__wino_put8(up + (o + (r)) * C + c + 8, a##r##1, C - c - 8, 1);
#define DL__WINO_GW_STORE1(r) dl__wino_put8(up + (o + (r)) * C + c, a##r##0, C - c, 1);
#define DL__WINO_GWK(R, NV)                                                                      \
  for (; o + (R) <= O; o += (R)) {                                                               \
    DL__WINO_R##R(DL__WINO_GW_ZERO##NV)                                                          \
    for (t = 0; t < n; t++) {                                                                    \
      DL__WINO_GW_LOAD##NV                                                                       \
      __m256 u;                                                                                  \
      DL__WINO_R##R(DL__WINO_GW_STEP##NV)                                                        \
    }                                                                                            \
    DL__WINO_R##R(DL__WINO_GW_STORE##NV)                                                         \
  }
DL_API void dl__wino_gwk_f32(int64_t O, int64_t C, int64_t n, const float *dM, int64_t ld, const float *VT,
                             float *dU) {
  const int64_t cp = (C + 7) / 8 * 8;
  int64_t p, o, c, t;
  for (p = 0; p < 16; p++) {
    const float *mp = dM + p * O * ld, *vp = VT + p * ld * cp;
    float *up = dU + p * O * C;
    for (c = 0; c + 16 <= cp; c += 16) {
      o = 0;
      DL__WINO_GWK(6, 2)
      DL__WINO_GWK(4, 2)
      DL__WINO_GWK(2, 2)
      DL__WINO_GWK(1, 2)
    }
    if (c < cp) {
      o = 0;
      DL__WINO_GWK(6, 1)
      DL__WINO_GWK(4, 1)
      DL__WINO_GWK(2, 1)
      DL__WINO_GWK(1, 1)
    }
  }
}
/* d[i ds + j] = s[j ss + i], i, j < 8. */
DL__INL void dl__wino_tr8(const float *s, int64_t ss, float *d, int64_t ds) {
  const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ss), r2 = _mm256_loadu_ps(s + 2 * ss),
               r3 = _mm256_loadu_ps(s + 3 * ss), r4 = _mm256_loadu_ps(s + 4 * ss), r5 = _mm256_loadu_ps(s + 5 * ss),
               r6 = _mm256_loadu_ps(s + 6 * ss), r7 = _mm256_loadu_ps(s + 7 * ss);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
               t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
               u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
               u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + ds, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2 * ds, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3 * ds, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4 * ds, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5 * ds, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6 * ds, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7 * ds, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* V of the block's images (nb from image x) into V[p][c][col], col the
 * group's first lane (groups in image, tile row, group order); S: sp floats. */
DL_API void dl__wino_vblock_f32(const dl__conv_geom *g, const dl__wino *w, const float *x, int64_t nb, float *V,
                                float *S) {
  int64_t j, c, ty, q;
  for (j = 0; j < nb; j++)
    for (c = 0; c < g->C; c++) {
      dl__wino_split_f32(g, w, x + (j * g->C + c) * g->H * g->W, S);
      for (ty = 0; ty < w->th; ty++)
        for (q = 0; q < w->nq; q++)
          dl__wino_v8_f32(w, S, ty, q, V + c * w->tb + ((j * w->th + ty) * w->nq + q) * DL__WL, g->C * w->tb);
    }
}

/* Forward of a convolution dl__wino_ok accepts: y = conv(x, w) + b (+= when
 * acc). The images go in blocks of wn.nb: V of the block, then the products
 * two groups at a time and their outputs. */
DL_API void dl__wino_forward(dl_tape *tp, const char *op, const dl__conv_geom *g, const float *x, const float *w,
                             const float *b, float *y, int acc) {
  dl_ctx *ctx = tp->ctx;
  const dl__wino wn = dl__wino_make(g);
  const int64_t nblk = (g->N + wn.nb - 1) / wn.nb, gpi = wn.th * wn.nq;
  /* M's p stride: 64 bytes off a multiple of 4 KB, so that a tile's 16 loads do not all map to one L1 set */
  const int64_t mps = 2 * g->O * DL__WL + 16;
  const int64_t per = (wn.sp + 16 * g->C * wn.tb + 16 * mps + 15) / 16 * 16;
  const int64_t work = g->N * g->O * g->C * gpi;
  const int nt = dl__conv_team(ctx, nblk, work);
  float *Ut = (float *)dl_tape_scratch(tp, op, sizeof(float) * (size_t)(16 * g->O * g->C));
  float *buf = (float *)dl_tape_scratch(tp, op, sizeof(float) * (size_t)per * (size_t)(nt > 1 ? dl_ctx_threads(ctx) : 1));
  dl__wino_u_f32(g->O, g->C, w, Ut, 1);
  DL_PARALLEL_FOR(ctx, nt > 1 ? work : 0, nblk, bi, {
    float *S = buf + per * (nt > 1 ? dl_worker() : 0), *V = S + wn.sp, *M = V + 16 * g->C * wn.tb;
    const int64_t n0 = bi * wn.nb, nb = g->N - n0 < wn.nb ? g->N - n0 : wn.nb, ng = nb * gpi;
    int64_t c, o, gi, h, p_;
    dl__wino_vblock_f32(g, &wn, x + n0 * g->C * g->H * g->W, nb, V, S);
    if (ng % 2) /* the lone last group's partner lanes: zeros */
      for (p_ = 0; p_ < 16; p_++)
        for (c = 0; c < g->C; c++) memset(V + (p_ * g->C + c) * wn.tb + ng * DL__WL, 0, sizeof(float) * DL__WL);
    for (gi = 0; gi < ng; gi += 2) {
      dl__wino_mk_f32(g->O, g->C, Ut, g->O * g->C, g->O, V + gi * DL__WL, g->C * wn.tb, wn.tb, M, mps);
      for (h = 0; h < 2 && gi + h < ng; h++) {
        const int64_t j = (gi + h) / gpi, ty = (gi + h) % gpi / wn.nq, q = (gi + h) % wn.nq;
        float *yn = y + (n0 + j) * g->O * g->Ho * g->Wo;
        for (o = 0; o < g->O; o++)
          dl__wino_y8_f32(g, M + o * 2 * DL__WL + h * DL__WL, mps, ty, q, b ? b[o] : 0.0f,
                          yn + o * g->Ho * g->Wo, acc);
      }
    }
  });
}

/* Backward of a convolution dl__wino_ok accepts (gx, gw, gb each NULL when
 * not wanted; gx0 as dl__conv_backward_im2col's). Each thread takes a chunk
 * of consecutive images, in blocks of wn.nb: dM of the block's groups, V^T
 * (grad_w: tiles by channels), then grad_x's products two groups at a time
 * and their patches added up, then grad_w's products over the block. */
DL_API void dl__wino_backward(dl_tape *tp, const char *op, const dl__conv_geom *g, const float *x, const float *w,
                              const float *gy, float *gx, float *gw, float *gb, int gx0) {
  dl_ctx *ctx = tp->ctx;
  const dl__wino wn = dl__wino_make(g);
  const int64_t un = 16 * g->O * g->C, gpi = wn.th * wn.nq, work = g->N * g->O * g->C * gpi;
  const int64_t sgy = 4 * wn.th * wn.lw, s8 = 8 * wn.sp + 16 * 64;
  const int64_t vps = 2 * g->C * DL__WL + 16; /* dV's p stride (see dl__wino_forward's M) */
  const int64_t per = (wn.nb * g->C * wn.sp + 16 * g->O * wn.tb + 16 * wn.tb * wn.cp + 16 * vps +
                       (sgy > s8 ? sgy : s8) + 15) / 16 * 16;
  const int nt = dl__conv_team(ctx, g->N, work);
  const int64_t nch = nt;
  double *bpart = gb ? (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)(g->N * g->O)) : NULL;
  float *U = gx ? (float *)dl_tape_scratch(tp, op, sizeof(float) * (size_t)un) : NULL;
  float *buf = (float *)dl_tape_scratch(tp, op, sizeof(float) * (size_t)per * (size_t)(nt > 1 ? dl_ctx_threads(ctx) : 1));
  float *dU = gw ? (float *)dl_tape_scratch(tp, op, sizeof(float) * (size_t)(un * nch)) : NULL;
  int64_t c, e;
  if (U) dl__wino_u_f32(g->O, g->C, w, U, 0);
  DL_PARALLEL_FOR(ctx, nt > 1 ? work : 0, nch, k, {
    float *G = buf + per * (nt > 1 ? dl_worker() : 0), *dM = G + wn.nb * g->C * wn.sp, *VT = dM + 16 * g->O * wn.tb;
    float *dV = VT + 16 * wn.tb * wn.cp, *T = dV + 16 * vps, *mydU = gw ? dU + k * un : NULL;
    const int64_t i0 = g->N * k / nch, i1 = g->N * (k + 1) / nch;
    int64_t n0, j, gi, h, o, cc, c0, ty, q, p_;
    if (mydU) memset(mydU, 0, sizeof(float) * (size_t)un);
    for (n0 = i0; n0 < i1; n0 += wn.nb) {
      const int64_t nb = i1 - n0 < wn.nb ? i1 - n0 : wn.nb, ng = nb * gpi;
      if (bpart)
        for (j = 0; j < nb; j++) dl__conv_bias_part(g, DL_F32, gy, n0 + j, bpart);
      if (!gx && !gw) continue;
      for (j = 0; j < nb; j++) /* dM */
        for (o = 0; o < g->O; o++) {
          dl__wino_gysplit_f32(g, &wn, gy + ((n0 + j) * g->O + o) * g->Ho * g->Wo, T);
          for (ty = 0; ty < wn.th; ty++)
            for (q = 0; q < wn.nq; q++)
              dl__wino_dm8_f32(&wn, T + 4 * ty * wn.lw, q, dM + o * wn.tb + ((j * wn.th + ty) * wn.nq + q) * DL__WL,
                               g->O * wn.tb);
        }
      if (ng % 2)
        for (p_ = 0; p_ < 16; p_++)
          for (o = 0; o < g->O; o++) memset(dM + (p_ * g->O + o) * wn.tb + ng * DL__WL, 0, sizeof(float) * DL__WL);
      if (gw) /* V^T: V of 8 channels at a time (T: their split planes, then 16 8x8 blocks), turned */
        for (j = 0; j < nb; j++)
          for (c0 = 0; c0 < g->C; c0 += 8) {
            float *T8 = T + 8 * wn.sp;
            for (cc = 0; cc < 8; cc++) {
              if (c0 + cc < g->C)
                dl__wino_split_f32(g, &wn, x + ((n0 + j) * g->C + c0 + cc) * g->H * g->W, T + cc * wn.sp);
              else
                memset(T + cc * wn.sp, 0, sizeof(float) * (size_t)wn.sp);
            }
            for (ty = 0; ty < wn.th; ty++)
              for (q = 0; q < wn.nq; q++) {
                const int64_t col = ((j * wn.th + ty) * wn.nq + q) * DL__WL;
                for (cc = 0; cc < 8; cc++) dl__wino_v8_f32(&wn, T + cc * wn.sp, ty, q, T8 + cc * DL__WL, 64);
                for (p_ = 0; p_ < 16; p_++)
                  dl__wino_tr8(T8 + p_ * 64, DL__WL, VT + (p_ * wn.tb + col) * wn.cp + c0, wn.cp);
              }
          }
      if (gx) {
        memset(G, 0, sizeof(float) * (size_t)(nb * g->C * wn.sp));
        for (gi = 0; gi < ng; gi += 2) {
          dl__wino_mk_f32(g->C, g->O, U, g->O * g->C, g->C, dM + gi * DL__WL, g->O * wn.tb, wn.tb, dV,
                          vps);
          for (h = 0; h < 2 && gi + h < ng; h++) {
            const int64_t jh = (gi + h) / gpi, tyh = (gi + h) % gpi / wn.nq, qh = (gi + h) % wn.nq;
            for (cc = 0; cc < g->C; cc++)
              dl__wino_gx8_f32(&wn, dV + cc * 2 * DL__WL + h * DL__WL, vps, tyh, qh,
                               G + (jh * g->C + cc) * wn.sp);
          }
        }
        for (cc = 0; cc < nb * g->C; cc++)
          dl__wino_unsplit_f32(g, &wn, G + cc * wn.sp, gx + (n0 * g->C + cc) * g->H * g->W, gx0);
      }
      if (gw) dl__wino_gwk_f32(g->O, g->C, ng * DL__WL, dM, wn.tb, VT, mydU);
    }
  });
  if (bpart) dl__conv_bias_fold(g, DL_F32, bpart, gb);
  if (gw) {
    for (c = 1; c < nch; c++)
      for (e = 0; e < un; e++) dU[e] += dU[c * un + e];
    dl__wino_gw_f32(g->O, g->C, dU, gw);
  }
}
#else /* never called (dl__wino_ok is 0): the dispatchers below still name them */
DL_API void dl__wino_forward(dl_tape *tp, const char *op, const dl__conv_geom *g, const float *x, const float *w,
                             const float *b, float *y, int acc) {
  (void)tp, (void)op, (void)g, (void)x, (void)w, (void)b, (void)y, (void)acc;
}
DL_API void dl__wino_backward(dl_tape *tp, const char *op, const dl__conv_geom *g, const float *x, const float *w,
                              const float *gy, float *gx, float *gw, float *gb, int gx0) {
  (void)tp, (void)op, (void)g, (void)x, (void)w, (void)gy, (void)gx, (void)gw, (void)gb, (void)gx0;
}
#endif

/* >>dispatch --------------------------------------------------------------- */

/* y (contiguous [N, O, Ho, Wo]) = conv(x, w) + b, or += when acc; x, w, b
 * contiguous, b may be NULL. Batch split over a team when large. Winograd
 * where dl__wino_ok says so, else im2col. */
DL_API void dl__conv_forward(dl_tape *tp, const char *op, const dl__conv_geom *g, dl_dtype dt,
                             const void *x, const void *w, const void *b, void *y, int acc) {
  if (dl__wino_ok(tp->ctx, g, dt))
    dl__wino_forward(tp, op, g, (const float *)x, (const float *)w, (const float *)b, (float *)y, acc);
  else
    dl__conv_forward_im2col(tp, op, g, dt, x, w, b, y, acc);
}
/* The gradients (see dl__conv_backward_im2col), Winograd where
 * dl__wino_ok says so. */
DL_API void dl__conv_backward(dl_tape *tp, const char *op, const dl__conv_geom *g, dl_dtype dt,
                              const void *x, const void *w, const void *gy, void *gx, void *gw,
                              void *gb, int gx0) {
  if (dl__wino_ok(tp->ctx, g, dt))
    dl__wino_backward(tp, op, g, (const float *)x, (const float *)w, (const float *)gy, (float *)gx, (float *)gw,
                      (float *)gb, gx0);
  else
    dl__conv_backward_im2col(tp, op, g, dt, x, w, gy, gx, gw, gb, gx0);
}

/* >>device (DL_USE_CUDA) ------------------------------------------------------
 * Convolution, pooling and the norms (ops/norm.h) on the GPU: src_gpu/conv.cu
 * and norm.cu through dl/gpu/conv.h and norm.h, the same results as the CPU
 * code (pooling bit for bit; convolution is cuDNN's, f32 on FMA kernels, no
 * TF32). */
#ifdef DL_USE_CUDA
DL_API dlg_conv2d dl__conv_dlg(const dl__conv_geom *g) {
  dlg_conv2d c;
  c.N = g->N;
  c.C = g->C;
  c.H = g->H;
  c.W = g->W;
  c.O = g->O;
  c.kh = g->kh;
  c.kw = g->kw;
  c.Ho = g->Ho;
  c.Wo = g->Wo;
  c.sh = g->sh;
  c.sw = g->sw;
  c.ph = g->ph;
  c.pw = g->pw;
  c.dh = g->dh;
  c.dw = g->dw;
  c.G = g->G;
  c.D = g->D;
  c.kd = g->kd;
  c.Do = g->Do;
  c.sd = g->sd;
  c.pd = g->pd;
  c.dd = g->dd;
  return c;
}
/* dl__t_conv on the device: y = conv(x, w) + b through cuDNN, tangents as
 * the CPU's (ty = conv(tx, w) + conv(x, tw) + tb), the node saves the
 * contiguous x and w; dl__t_conv_bw branches to dlg_conv2d_bwd. */
DL_API dl_tensor *dl__t_conv_gpu(dl_tape *tp, const char *op, dl_tensor *x, dl_tensor *w, dl_tensor *b,
                                 const dl__conv_geom *g, const int64_t *i, dl_backward_fn bw) {
  dlg_handle *h = dl__dnn_h(tp, op, x);
  const dlg_conv2d c = dl__conv_dlg(g);
  const int dt = (int)x->dtype;
  dl_tensor *y, *xc, *wc, *bc;
  dl_node *n;
  int64_t shape[5];
  int k;
  dl__dnn_tangent_dev(op, x);
  dl__dnn_tangent_dev(op, w);
  dl__dnn_tangent_dev(op, b);
  shape[0] = g->N;
  shape[1] = g->O;
  shape[2] = i[7] == 1 ? g->Wo : i[7] == 2 ? g->Do : g->Ho;
  shape[3] = i[7] == 2 ? g->Ho : g->Wo;
  shape[4] = g->Wo;
  y = dl_tape_out(tp, op, x->dtype, i[7] == 1 ? 3 : i[7] == 2 ? 5 : 4, shape);
  xc = dl__t_contig(tp, op, x);
  wc = dl__t_contig(tp, op, w);
  bc = b ? dl__t_contig(tp, op, b) : NULL;
  /* C == 0 (no input channels) is handled there too: y = b, or zeros */
  if (y->numel) dl__gpu_ok(x, op, dlg_conv2d_fwd(h, dt, &c, xc->data, wc->data, bc ? bc->data : NULL, y->data, 0));
  if (x->tangent || w->tangent || (b && b->tangent)) {
    dl_tensor *ty = dl_tape_tangent(tp, y); /* zeros */
    dl_tensor *tb = b && b->tangent ? dl__t_contig(tp, op, b->tangent) : NULL;
    if (y->numel && g->K) {
      if (x->tangent) {
        dl_tensor *tx = dl__t_contig(tp, op, x->tangent);
        dl__gpu_ok(x, op, dlg_conv2d_fwd(h, dt, &c, tx->data, wc->data, tb ? tb->data : NULL, ty->data, 1));
        tb = NULL;
      }
      if (w->tangent) {
        dl_tensor *tw = dl__t_contig(tp, op, w->tangent);
        dl__gpu_ok(x, op, dlg_conv2d_fwd(h, dt, &c, xc->data, tw->data, tb ? tb->data : NULL, ty->data, 1));
        tb = NULL;
      }
    }
    if (tb && y->numel) { /* ty += tb alone: a geometry without input channels adds just the bias */
      dlg_conv2d c0 = c;
      c0.C = 0;
      dl__gpu_ok(x, op, dlg_conv2d_fwd(h, dt, &c0, NULL, NULL, tb->data, ty->data, 1));
    }
  }
  if ((n = dl_tape_record(tp, op, bw, y, x, w, b)) != NULL) {
    for (k = 0; k < 8; k++) n->i[k] = i[k];
    n->saved[0] = xc;
    n->saved[1] = wc;
  }
  return y;
}
#endif

/* >>conv ops --------------------------------------------------------------- */

/* The geometry of a recorded node: i[0..7) = sh, sw, ph, pw, dh, dw, groups;
 * i[7] = 1 for conv1d (x [N, C, L], w [O, Cg, k]), 2 for conv3d (x
 * [N, C, D, H, W], w [O, Cg, kd, kh, kw]), whose depth stride, padding and
 * dilation are the high 32 bits of i[0], i[2] and i[4] (dl__conv_pack). */
DL_API dl__conv_geom dl__conv_geom_of(const dl_tensor *x, const dl_tensor *w, const int64_t *i) {
  dl__conv_geom g;
  const int64_t lo = 0xffffffff;
  memset(&g, 0, sizeof g);
  g.N = x->shape[0];
  g.C = x->shape[1];
  g.O = w->shape[0];
  if (i[7] == 2) {
    g.D = x->shape[2];
    g.H = x->shape[3];
    g.W = x->shape[4];
    g.kd = w->shape[2];
    g.kh = w->shape[3];
    g.kw = w->shape[4];
    g.sd = i[0] >> 32;
    g.pd = i[2] >> 32;
    g.dd = i[4] >> 32;
    g.sh = i[0] & lo;
    g.sw = i[1];
    g.ph = i[2] & lo;
    g.pw = i[3];
    g.dh = i[4] & lo;
    g.dw = i[5];
    g.G = i[6];
    dl__conv_geom_fill(&g);
    return g;
  }
  if (i[7]) {
    g.H = 1;
    g.W = x->shape[2];
    g.kh = 1;
    g.kw = w->shape[2];
  } else {
    g.H = x->shape[2];
    g.W = x->shape[3];
    g.kh = w->shape[2];
    g.kw = w->shape[3];
  }
  g.sh = i[0];
  g.sw = i[1];
  g.ph = i[2];
  g.pw = i[3];
  g.dh = i[4];
  g.dw = i[5];
  g.G = i[6];
  dl__conv_geom_fill(&g);
  return g;
}

DL_API void dl__t_conv_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *x = n->in[0], *w = n->in[1], *b = n->nin > 2 ? n->in[2] : NULL;
  dl_tensor *gx = dl__tape_grad_w(tp, x), *gw = dl_tape_grad(tp, w), *gb = dl_tape_grad(tp, b);
  const dl__conv_geom g = dl__conv_geom_of(x, w, n->i);
#ifdef DL_USE_CUDA
  if (n->out->grad->device == DL_CUDA) {
    const dlg_conv2d c = dl__conv_dlg(&g);
    dl__gpu_ok(n->out->grad, n->op,
               dlg_conv2d_bwd(dl__gpu_h(n->out->grad, n->op), (int)x->dtype, &c, n->saved[0]->data,
                              n->saved[1]->data, n->out->grad->data, gx ? gx->data : NULL, gw ? gw->data : NULL,
                              gb ? gb->data : NULL));
    return;
  }
#endif
  dl__conv_backward(tp, n->op, &g, x->dtype, n->saved[0]->data, n->saved[1]->data,
                    n->out->grad->data, gx ? gx->data : NULL, gw ? gw->data : NULL,
                    gb ? gb->data : NULL, dl__grad_take(gx)); /* gx not zeroed yet: each image's written */
  if (tp->hvp) { /* bilinear in (x, w): d(gx) = rule(d(gy); w) + rule(gy; tw), d(gw) = rule(d(gy); x) + rule(gy; tx) */
    const dl_tensor *gy = n->out->grad;
    dl__conv_backward(tp, n->op, &g, x->dtype, n->saved[0]->data, n->saved[1]->data, gy->tangent->data,
                      gx ? gx->tangent->data : NULL, gw ? gw->tangent->data : NULL, gb ? gb->tangent->data : NULL, 0);
    if (gx && w->tangent)
      dl__conv_backward(tp, n->op, &g, x->dtype, n->saved[0]->data, dl__t_contig(tp, n->op, w->tangent)->data,
                        gy->data, gx->tangent->data, NULL, NULL, 0);
    if (gw && x->tangent)
      dl__conv_backward(tp, n->op, &g, x->dtype, dl__t_contig(tp, n->op, x->tangent)->data, n->saved[1]->data,
                        gy->data, NULL, gw->tangent->data, NULL, 0);
  }
}

/* Checks the operands of conv1d / conv2d / conv3d (nd = 3, 4 or 5), fills
 * i[] as dl__conv_geom_of reads it and returns the geometry. dep: conv3d's
 * depth stride, padding and dilation (0: 1, 0, 1), NULL for the others. */
DL_API dl__conv_geom dl__conv_check(const char *op, const dl_tensor *x, const dl_tensor *w,
                                    const dl_tensor *b, int nd, int64_t *i, const int64_t *dep) {
  dl__conv_geom g;
  int64_t sd = 1, pd = 0, dd = 1;
  int d;
  dl__ops_same_float(op, x, w);
  if (b) dl__ops_same_float(op, x, b);
  if (x->ndim != nd || w->ndim != nd)
    DL_PANIC(x->ctx, op, "shape mismatch: x %s and weight %s must both be %d-d (x [N, C, %s], "
             "weight [O, C/groups, %s])", DL_SHAPESTR(x), DL_SHAPESTR(w), nd,
             nd == 5 ? "D, H, W" : nd == 4 ? "H, W" : "L", nd == 5 ? "kd, kh, kw" : nd == 4 ? "kh, kw" : "k");
  for (d = 0; d < 7; d++)
    if (i[d] < 0 || (dep && d < 3 && dep[d] < 0))
      DL_PANIC(x->ctx, op, "negative stride, padding, dilation or groups for x %s, weight %s",
               DL_SHAPESTR(x), DL_SHAPESTR(w));
  if (dep) {
    sd = dep[0] ? dep[0] : 1;
    pd = dep[1];
    dd = dep[2] ? dep[2] : 1;
  }
  if (i[0] == 0) i[0] = 1;
  if (i[1] == 0) i[1] = 1;
  if (i[4] == 0) i[4] = 1;
  if (i[5] == 0) i[5] = 1;
  if (i[6] == 0) i[6] = 1;
  if (x->shape[1] % i[6] != 0 || w->shape[0] % i[6] != 0 || w->shape[1] * i[6] != x->shape[1])
    DL_PANIC(x->ctx, op, "shape mismatch: x %s, weight %s with groups=%lld: need weight [O, C/groups, ...] "
             "with C and O divisible by groups", DL_SHAPESTR(x), DL_SHAPESTR(w), (long long)i[6]);
  for (d = 2; d < nd; d++)
    if (w->shape[d] < 1)
      DL_PANIC(x->ctx, op, "empty kernel: x %s, weight %s", DL_SHAPESTR(x), DL_SHAPESTR(w));
  if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
    DL_PANIC(x->ctx, op, "shape mismatch: bias %s for weight %s (x %s): need bias [O]",
             DL_SHAPESTR(b), DL_SHAPESTR(w), DL_SHAPESTR(x));
  i[7] = nd == 3 ? 1 : nd == 5 ? 2 : 0;
  if (nd == 5) { /* the depth's in the high halves (each value an int) */
    i[0] |= sd << 32;
    i[2] |= pd << 32;
    i[4] |= dd << 32;
  }
  g = dl__conv_geom_of(x, w, i);
  if (nd == 5 && g.D + 2 * g.pd < g.dd * (g.kd - 1) + 1)
    DL_PANIC(x->ctx, op, "kernel larger than the padded input: x %s, weight %s (depth padding %lld, "
             "dilation %lld)", DL_SHAPESTR(x), DL_SHAPESTR(w), (long long)g.pd, (long long)g.dd);
  if (g.H + 2 * g.ph < g.dh * (g.kh - 1) + 1 || g.W + 2 * g.pw < g.dw * (g.kw - 1) + 1)
    DL_PANIC(x->ctx, op, "kernel larger than the padded input: x %s, weight %s (padding %lld x %lld, "
             "dilation %lld x %lld)", DL_SHAPESTR(x), DL_SHAPESTR(w), (long long)g.ph,
             (long long)g.pw, (long long)g.dh, (long long)g.dw);
  return g;
}

/* y[n, o, :] = b[o] (or += when acc) for every image: y [N, O, P] contiguous. */
DL_API void dl__conv_bias_all(const dl__conv_geom *g, dl_dtype dt, const void *b, void *y, int acc) {
  int64_t n;
  for (n = 0; n < g->N; n++) {
    if (dt == DL_F32)
      dl__conv_bias_f32(g->O, g->P, (const float *)b, (float *)y + n * g->O * g->P, acc);
    else
      dl__conv_bias_f64(g->O, g->P, (const double *)b, (double *)y + n * g->O * g->P, acc);
  }
}

/* conv1d, conv2d and conv3d after the checks: i[] as dl__conv_geom_of reads it. */
DL_API dl_tensor *dl__t_conv(dl_tape *tp, const char *op, dl_tensor *x, dl_tensor *w, dl_tensor *b,
                             const dl__conv_geom *g, const int64_t *i) {
  dl_tensor *y, *xc, *wc, *bc;
  dl_node *n;
  int64_t shape[5];
  int k;
#ifdef DL_USE_CUDA
  if (x->device == DL_CUDA || tp->gpu) return dl__t_conv_gpu(tp, op, x, w, b, g, i, dl__t_conv_bw);
#endif
  shape[0] = g->N;
  shape[1] = g->O;
  if (i[7] == 1) {
    shape[2] = g->Wo;
  } else if (i[7] == 2) {
    shape[2] = g->Do;
    shape[3] = g->Ho;
    shape[4] = g->Wo;
  } else {
    shape[2] = g->Ho;
    shape[3] = g->Wo;
  }
  y = dl_tape_out(tp, op, x->dtype, i[7] == 1 ? 3 : i[7] == 2 ? 5 : 4, shape);
  xc = dl__t_contig(tp, op, x);
  wc = dl__t_contig(tp, op, w);
  bc = b ? dl__t_contig(tp, op, b) : NULL;
  if (y->numel && g->K)
    dl__conv_forward(tp, op, g, x->dtype, xc->data, wc->data, bc ? bc->data : NULL, y->data, 0);
  else if (y->numel && bc) /* no input channels: y is the bias */
    dl__conv_bias_all(g, x->dtype, bc->data, y->data, 0);
  else if (y->numel)
    memset(y->data, 0, (size_t)y->numel * dl_dtype_size(y->dtype));
  if (x->tangent || w->tangent || (b && b->tangent)) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    dl_tensor *tb = b && b->tangent ? dl__t_contig(tp, op, b->tangent) : NULL;
    if (y->numel && g->K) {
      if (x->tangent) {
        dl_tensor *tx = dl__t_contig(tp, op, x->tangent);
        dl__conv_forward(tp, op, g, x->dtype, tx->data, wc->data, tb ? tb->data : NULL, ty->data, 1);
        tb = NULL;
      }
      if (w->tangent) {
        dl_tensor *tw = dl__t_contig(tp, op, w->tangent);
        dl__conv_forward(tp, op, g, x->dtype, xc->data, tw->data, tb ? tb->data : NULL, ty->data, 1);
        tb = NULL;
      }
    }
    if (tb && y->numel) dl__conv_bias_all(g, x->dtype, tb->data, ty->data, 1);
  }
  if ((n = dl_tape_record(tp, op, dl__t_conv_bw, y, x, w, b)) != NULL) {
    n->flags |= DL_NODE_HVP;
    for (k = 0; k < 8; k++) n->i[k] = i[k];
    n->saved[0] = xc;
    n->saved[1] = wc;
  }
  return y;
}

/* Padding that is not the same on both sides of an axis (pad_mode
 * DL_PAD_EXPLICIT, DL_PAD_SAME, DL_PAD_SAME_LOWER): the convolution keeps
 * the smaller side's padding (*ip per axis, written back into the i[]
 * slots), and the difference becomes zeros added to x by dl_t_pad, a copy
 * of x on the tape (its backward crops the gradient). nd 3, 4 or 5; p[2 a],
 * p[2 a + 1] the start and end padding asked for axis a (the spatial axes
 * in order: conv1d's length; conv2d's height, width; conv3d's depth,
 * height, width), s, d its stride and dilation (0 = 1). Returns x, or the
 * padded copy. */
DL_API dl_tensor *dl__conv_pad_modes(dl_tape *tp, const char *op, dl_tensor *x, const dl_tensor *w, int nd,
                                     int mode, const int *p, const int *s, const int *d, int64_t **ip) {
  static const char *const names2[] = {"pad_h", "pad_h_end", "pad_w", "pad_w_end"}, *const names1[] = {"pad", "pad_end"};
  static const char *const names3[] = {"pad_d", "pad_d_end", "pad_h", "pad_h_end", "pad_w", "pad_w_end"};
  int64_t pads[6] = {0, 0, 0, 0, 0, 0}, extra = 0;
  int a, axes = nd - 2;
  dl__pad_mode_check(op, x, mode, axes, p, nd == 5 ? names3 : nd == 4 ? names2 : names1, 0);
  for (a = 0; a < axes; a++) {
    if (p[2 * a] < 0 || p[2 * a + 1] < 0)
      DL_PANIC(x->ctx, op, "negative padding %d, %d for x %s", p[2 * a], p[2 * a + 1], DL_SHAPESTR(x));
  }
  if (mode == DL_PAD_SYMMETRIC || x->ndim != nd || w->ndim != nd) return x; /* dl__conv_check names a bad rank */
  for (a = 0; a < axes; a++) {
    const int64_t n = x->shape[2 + a], k = w->shape[2 + a], st = s[a] ? s[a] : 1, di = d[a] ? d[a] : 1;
    int64_t pb, pe, sym;
    (void)dl__window_axis(mode, n, k, st, di, p[2 * a], p[2 * a + 1], 0, &pb, &pe);
    sym = pb < pe ? pb : pe;
    *ip[a] = sym;
    /* dl_t_pad's pairs run from the last dimension: the width's first */
    pads[2 * (axes - 1 - a)] = pb - sym;
    pads[2 * (axes - 1 - a) + 1] = pe - sym;
    extra |= pb - sym || pe - sym;
  }
  return extra ? dl_t_pad(tp, x, axes, pads, 0.0) : x;
}

/* y = conv2d(x, w) + b, PyTorch's F.conv2d: x [N, C, H, W], w [O, C/groups,
 * kh, kw], b [O] or NULL; a NULL (or zeroed) args means stride 1, no
 * padding, dilation 1, one group. Returns y [N, O, Ho, Wo] with
 * Ho = (H + 2*pad_h - dil_h*(kh-1) - 1) / stride_h + 1 (likewise Wo; with
 * pad_mode, pad_top + pad_bottom in place of 2*pad_h, ceil(H / stride_h)
 * under SAME), in the tape's arena (valid until dl_tape_rewind). x, w, b
 * may be strided views. Uneven padding costs a padded copy of x (see
 * dl__conv_pad_modes). */
DL_API dl_tensor *dl_t_conv2d(dl_tape *tp, dl_tensor *x, dl_tensor *w, dl_tensor *b,
                              const dl_conv2d_args *a) {
  int64_t i[8];
  dl_conv2d_args z;
  dl__conv_geom g;
  if (!a) {
    memset(&z, 0, sizeof z);
    a = &z;
  }
  i[0] = a->stride_h;
  i[1] = a->stride_w;
  i[2] = a->pad_h;
  i[3] = a->pad_w;
  i[4] = a->dil_h;
  i[5] = a->dil_w;
  i[6] = a->groups;
  if (a->pad_mode || a->pad_h_end || a->pad_w_end) {
    const int p[4] = {a->pad_h, a->pad_h_end, a->pad_w, a->pad_w_end}, s[2] = {a->stride_h, a->stride_w},
              d[2] = {a->dil_h, a->dil_w};
    int64_t *ip[2];
    ip[0] = &i[2];
    ip[1] = &i[3];
    x = dl__conv_pad_modes(tp, "dl_t_conv2d", x, w, 4, a->pad_mode, p, s, d, ip);
  }
  g = dl__conv_check("dl_t_conv2d", x, w, b, 4, i, NULL);
  return dl__t_conv(tp, "dl_t_conv2d", x, w, b, &g, i);
}

/* y = conv1d(x, w) + b, PyTorch's F.conv1d: x [N, C, L], w [O, C/groups, k],
 * b [O] or NULL; NULL args: stride 1, no padding, dilation 1, one group.
 * Returns y [N, O, Lo], Lo = (L + 2*pad - dil*(k-1) - 1) / stride + 1 (with
 * pad_mode: pad + pad_end in place of 2*pad, ceil(L / stride) under SAME),
 * in the tape's arena (valid until dl_tape_rewind). Uneven padding costs a
 * padded copy of x, as conv2d's. */
DL_API dl_tensor *dl_t_conv1d(dl_tape *tp, dl_tensor *x, dl_tensor *w, dl_tensor *b,
                              const dl_conv1d_args *a) {
  int64_t i[8];
  dl_conv1d_args z;
  dl__conv_geom g;
  if (!a) {
    memset(&z, 0, sizeof z);
    a = &z;
  }
  i[0] = 1;
  i[1] = a->stride;
  i[2] = 0;
  i[3] = a->pad;
  i[4] = 1;
  i[5] = a->dil;
  i[6] = a->groups;
  if (a->pad_mode || a->pad_end) {
    const int p[2] = {a->pad, a->pad_end}, s[1] = {a->stride}, d[1] = {a->dil};
    int64_t *ip[1];
    ip[0] = &i[3];
    x = dl__conv_pad_modes(tp, "dl_t_conv1d", x, w, 3, a->pad_mode, p, s, d, ip);
  }
  g = dl__conv_check("dl_t_conv1d", x, w, b, 3, i, NULL);
  return dl__t_conv(tp, "dl_t_conv1d", x, w, b, &g, i);
}

/* y = conv3d(x, w) + b, PyTorch's F.conv3d: x [N, C, D, H, W], w [O,
 * C/groups, kd, kh, kw], b [O] or NULL; a NULL (or zeroed) args means
 * stride 1, no padding, dilation 1, one group. Returns y [N, O, Do, Ho, Wo]
 *   y[n, o, z, r, c] = b[o] + sum over ci < C/groups, a, i, j of
 *     w[o, ci, a, i, j] x[n, g C/groups + ci, z sd - pd + a dd,
 *                         r sh - ph + i dh, c sw - pw + j dw]
 * (g = o / (O/groups), x zero outside), Do = (D + 2*pad_d - dil_d*(kd-1) -
 * 1) / stride_d + 1 (likewise Ho, Wo; with pad_mode, front + back padding in
 * place of 2*pad_d, ceil(D / stride_d) under SAME). Backward: grad_w +=
 * gy @ col^T, grad_x += col2im(w^T @ gy), grad_b += gy summed over N and the
 * positions (im2col + GEMM as conv2d, one col buffer of K x Do*Ho*Wo per
 * thread); forward mode ty = conv(tx, w) + conv(x, tw) + tb. y lives in the
 * tape's arena (valid until dl_tape_rewind); x, w, b may be strided views.
 * Uneven padding costs a padded copy of x, as conv2d's. */
DL_API dl_tensor *dl_t_conv3d(dl_tape *tp, dl_tensor *x, dl_tensor *w, dl_tensor *b,
                              const dl_conv3d_args *a) {
  int64_t i[8], dep[3];
  dl_conv3d_args z;
  dl__conv_geom g;
  if (!a) {
    memset(&z, 0, sizeof z);
    a = &z;
  }
  dep[0] = a->stride_d;
  dep[1] = a->pad_d;
  dep[2] = a->dil_d;
  i[0] = a->stride_h;
  i[1] = a->stride_w;
  i[2] = a->pad_h;
  i[3] = a->pad_w;
  i[4] = a->dil_h;
  i[5] = a->dil_w;
  i[6] = a->groups;
  if (a->pad_mode || a->pad_d_end || a->pad_h_end || a->pad_w_end) {
    const int p[6] = {a->pad_d, a->pad_d_end, a->pad_h, a->pad_h_end, a->pad_w, a->pad_w_end},
              s[3] = {a->stride_d, a->stride_h, a->stride_w}, d[3] = {a->dil_d, a->dil_h, a->dil_w};
    int64_t *ip[3];
    ip[0] = &dep[1];
    ip[1] = &i[2];
    ip[2] = &i[3];
    x = dl__conv_pad_modes(tp, "dl_t_conv3d", x, w, 5, a->pad_mode, p, s, d, ip);
  }
  g = dl__conv_check("dl_t_conv3d", x, w, b, 5, i, dep);
  return dl__t_conv(tp, "dl_t_conv3d", x, w, b, &g, i);
}

/* >>pooling ---------------------------------------------------------------- */

/* One pooling window: ph, pw the padding at the top and left, phe, pwe at
 * the bottom and right; dh, dw the dilation (1 for average pooling). The
 * depth (pooling 3-d: D, kd, sd, pd, pde, dd, Do) is 1, 1, 1, 0, 0, 1, 1 for
 * the 2-d pools. */
typedef struct dl__pool_geom {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo;
  int excl;
  int64_t dh, dw, phe, pwe;
  int64_t D, kd, sd, pd, pde, dd, Do;
} dl__pool_geom;

/* 2x2, stride-2 max pooling of one f32 plane with every window inside (the
 * pool after a convolution in a small CNN), on AVX-512: per output row and
 * per 16 outputs, two masked loads of each of the two input rows, the even
 * and odd columns split by a permute, and the same scan as the kernel
 * below (first maximum in scan order, NaN wins), as mask blends. The
 * block form below (a gather per tap) took 2.2-2.6x as long, with indices,
 * on f32 [64, 32, 28, 28] (1490-1560 us against 570-690) and [64, 64, 14,
 * 14] (880-980 against 370-430), one core, same run. */
#if defined(__AVX512F__) && !defined(__CUDACC__)
#include <immintrin.h>
DL_API void dl__maxpool2_f32(const float *x, float *y, int32_t *idx, int32_t W, int32_t Ho, int32_t Wo) {
  const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  const __m512i one = _mm512_set1_epi32(1), wv = _mm512_set1_epi32(W), w1 = _mm512_set1_epi32(W + 1);
  int32_t oh, o0;
  for (oh = 0; oh < Ho; oh++) {
    const float *r0 = x + (int64_t)2 * oh * W, *r1 = r0 + W;
    for (o0 = 0; o0 < Wo; o0 += 16) {
      const int32_t n = Wo - o0 < 16 ? Wo - o0 : 16, in = 2 * n;
      const __mmask16 mo = (__mmask16)((1u << n) - 1u);
      const __mmask16 ml = (__mmask16)(in >= 16 ? 0xFFFFu : (1u << in) - 1u);
      const __mmask16 mh = (__mmask16)(in > 16 ? (1u << (in - 16)) - 1u : 0u);
      const __m512 al = _mm512_maskz_loadu_ps(ml, r0 + 2 * o0), ah = _mm512_maskz_loadu_ps(mh, r0 + 2 * o0 + 16);
      const __m512 bl = _mm512_maskz_loadu_ps(ml, r1 + 2 * o0), bh = _mm512_maskz_loadu_ps(mh, r1 + 2 * o0 + 16);
      const __m512 v1 = _mm512_permutex2var_ps(al, od, ah), v2 = _mm512_permutex2var_ps(bl, ev, bh);
      const __m512 v3 = _mm512_permutex2var_ps(bl, od, bh);
      const __m512i a0 = _mm512_add_epi32(_mm512_set1_epi32(2 * oh * W + 2 * o0), ev);
      __m512 m = _mm512_permutex2var_ps(al, ev, ah);
      __m512i at = a0;
      __mmask16 c;
      c = _mm512_cmp_ps_mask(v1, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q);
      m = _mm512_mask_mov_ps(m, c, v1);
      at = _mm512_mask_add_epi32(at, c, a0, one);
      c = _mm512_cmp_ps_mask(v2, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v2, v2, _CMP_UNORD_Q);
      m = _mm512_mask_mov_ps(m, c, v2);
      at = _mm512_mask_add_epi32(at, c, a0, wv);
      c = _mm512_cmp_ps_mask(v3, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v3, v3, _CMP_UNORD_Q);
      m = _mm512_mask_mov_ps(m, c, v3);
      at = _mm512_mask_add_epi32(at, c, a0, w1);
      _mm512_mask_storeu_ps(y + (int64_t)oh * Wo + o0, mo, m);
      if (idx) _mm512_mask_storeu_epi32(idx + (int64_t)oh * Wo + o0, mo, at);
    }
  }
}
#elif defined(__AVX2__) && !defined(__CUDACC__)
#include <immintrin.h>
/* The same on AVX2, 8 outputs at a time: the even and odd columns of 16
 * inputs split by a shuffle within lanes and a permute across them. A
 * row's tail (Wo 14 or 7 leaves 6 or 7) is read and stored whole where
 * that stays inside the plane: the extra lanes read the next rows, and
 * their outputs land on the next row's, written after it; only at the
 * plane's end are the loads masked and the outputs stored one by one
 * (with masked loads and stores at every row's end it was slower than the
 * block form on Zen 3). f32 [64, 32, 28, 28] 361-386 us against the block
 * form's 1096-1406, [64, 64, 14, 14] 298 against 541-577, one core of a
 * Zen 3, same run. */
/* the even (odd) lanes of a, then of b: [a0 a2 b0 b2 | a4 a6 b4 b6] from the
 * shuffle, 64-bit pieces 0, 2, 1, 3 from the permute */
DL__INL __m256 dl__evens8(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
                                                _MM_SHUFFLE(3, 1, 2, 0)));
}
DL__INL __m256 dl__odds8(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))),
                                                _MM_SHUFFLE(3, 1, 2, 0)));
}
DL_API void dl__maxpool2_f32(const float *x, float *y, int32_t *idx, int32_t W, int32_t Ho, int32_t Wo) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i ev = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i one = _mm256_set1_epi32(1), wv = _mm256_set1_epi32(W), w1 = _mm256_set1_epi32(W + 1);
  int32_t oh, o0;
  for (oh = 0; oh < Ho; oh++) {
    const float *r0 = x + (int64_t)2 * oh * W, *r1 = r0 + W;
    for (o0 = 0; o0 < Wo; o0 += 8) {
      const int32_t n = Wo - o0 < 8 ? Wo - o0 : 8;
      __m256 al, ah, bl, bh;
      if ((int64_t)(2 * oh + 1) * W + 2 * o0 + 16 <= (int64_t)2 * Ho * W) { /* 16 from each row inside the plane */
        al = _mm256_loadu_ps(r0 + 2 * o0);
        ah = _mm256_loadu_ps(r0 + 2 * o0 + 8);
        bl = _mm256_loadu_ps(r1 + 2 * o0);
        bh = _mm256_loadu_ps(r1 + 2 * o0 + 8);
      } else {
        const __m256i ml = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n), lanes);
        const __m256i mh = _mm256_cmpgt_epi32(_mm256_set1_epi32(2 * n - 8), lanes);
        al = _mm256_maskload_ps(r0 + 2 * o0, ml);
        ah = _mm256_maskload_ps(r0 + 2 * o0 + 8, mh);
        bl = _mm256_maskload_ps(r1 + 2 * o0, ml);
        bh = _mm256_maskload_ps(r1 + 2 * o0 + 8, mh);
      }
      const __m256 v1 = dl__odds8(al, ah), v2 = dl__evens8(bl, bh), v3 = dl__odds8(bl, bh);
      const __m256i a0 = _mm256_add_epi32(_mm256_set1_epi32(2 * oh * W + 2 * o0), ev);
      __m256 m = dl__evens8(al, ah);
      __m256 at = _mm256_castsi256_ps(a0), c;
      c = _mm256_or_ps(_mm256_cmp_ps(v1, m, _CMP_GT_OQ), _mm256_cmp_ps(v1, v1, _CMP_UNORD_Q));
      m = _mm256_blendv_ps(m, v1, c);
      at = _mm256_blendv_ps(at, _mm256_castsi256_ps(_mm256_add_epi32(a0, one)), c);
      c = _mm256_or_ps(_mm256_cmp_ps(v2, m, _CMP_GT_OQ), _mm256_cmp_ps(v2, v2, _CMP_UNORD_Q));
      m = _mm256_blendv_ps(m, v2, c);
      at = _mm256_blendv_ps(at, _mm256_castsi256_ps(_mm256_add_epi32(a0, wv)), c);
      c = _mm256_or_ps(_mm256_cmp_ps(v3, m, _CMP_GT_OQ), _mm256_cmp_ps(v3, v3, _CMP_UNORD_Q));
      m = _mm256_blendv_ps(m, v3, c);
      at = _mm256_blendv_ps(at, _mm256_castsi256_ps(_mm256_add_epi32(a0, w1)), c);
      if ((int64_t)(Ho - oh) * Wo - o0 >= 8) { /* a short row's extra lanes land on the next row's, written after */
        _mm256_storeu_ps(y + (int64_t)oh * Wo + o0, m);
        if (idx) _mm256_storeu_si256((__m256i *)(void *)(idx + (int64_t)oh * Wo + o0), _mm256_castps_si256(at));
      } else { /* the plane's last outputs */
        float mv[8];
        int32_t av[8], k;
        _mm256_storeu_ps(mv, m);
        _mm256_storeu_ps((float *)(void *)av, at);
        for (k = 0; k < n; k++) {
          y[(int64_t)oh * Wo + o0 + k] = mv[k];
          if (idx) idx[(int64_t)oh * Wo + o0 + k] = av[k];
        }
      }
    }
  }
}
#endif
#if (defined(__AVX512F__) || defined(__AVX2__)) && !defined(__CUDACC__)
/* 1 when the plane went through dl__maxpool2_f32 (T is float) */
#define DL__POOL2_FAST(T, g, x, y, idx)                                                             \
  (sizeof(T) == 4 ? (dl__maxpool2_f32((const float *)(const void *)(x), (float *)(void *)(y), (idx), \
                                      (int32_t)(g)->W, (int32_t)(g)->Ho, (int32_t)(g)->Wo),         \
                     1)                                                                             \
                  : 0)
#else
#define DL__POOL2_FAST(T, g, x, y, idx) 0
#endif

/* The pooling kernels, per volume ([D, H, W] in, [Do, Ho, Wo] out; D = Do =
 * 1 in 2-d), for T (sfx):
 *   dl__maxpool_fwd_<sfx>(g, x, y, idx)   y = window max, idx (may be NULL)
 *                                         its position (id*H + ih)*W + iw
 *                                         (the first maximum in scan order;
 *                                         NaN wins; -1 and -inf for a window
 *                                         none of whose taps is inside the
 *                                         input)
 *   dl__maxpool_bwd_<sfx>(g, gy, idx, gx) gx[idx] += gy
 *   dl__maxpool_tan_<sfx>(g, tx, idx, ty) ty = tx[idx]
 *   dl__avgpool_fwd_<sfx>(g, x, y)        y = window mean
 *   dl__avgpool_bwd_<sfx>(g, gy, gx)      gx[window] += gy / count
 * The average's window of (od, oh, ow) (DL__AVGPOOL_COUNT) is depths
 * [od sd - pd, + kd) clipped to the padded input [-pd, D + pde)
 * (count_include_pad counts those) and to the input [0, D) (the elements
 * summed, and exclude_pad's count); likewise the rows and columns. */
#define DL__POOL_KERNELS(T, sfx)                                                                   \
  /* max of four in scan order, a NaN winning (as the window scan below) */                        \
  DL__INL T dl__max4nan_##sfx(T v0, T v1, T v2, T v3) {                                            \
    T m = v0;                                                                                      \
    m = ((v1 > m) | (v1 != v1)) ? v1 : m;                                                          \
    m = ((v2 > m) | (v2 != v2)) ? v2 : m;                                                          \
    return ((v3 > m) | (v3 != v3)) ? v3 : m;                                                       \
  }                                                                                                \
  DL_API void dl__maxpool_fwd_##sfx(const dl__pool_geom *g, const T *x, T *y, int32_t *idx) {      \
    const int64_t HW = g->H * g->W, Q = g->Ho * g->Wo;                                             \
    int64_t od, oh, ow, jd, jh, jw;                                                                \
    const int two = g->D == 1 && g->kd == 1 && g->kh == 2 && g->kw == 2 && g->sh == 2 &&           \
                    g->sw == 2 && g->ph == 0 && g->pw == 0 && g->dh == 1 && g->dw == 1 &&          \
                    2 * g->Ho <= g->H && 2 * g->Wo <= g->W; /* 2x2, stride 2, every window inside */ \
    if (two && DL__POOL2_FAST(T, g, x, y, idx)) return;                                            \
    if (two && g->Wo <= 256) {                                                                     \
      /* The rows of one plane are short (Wo 14 or 7 in a small CNN): a loop \
       * per row would run its vector part rarely, so a block of rows is one \
       * loop over its outputs, each window found from a table of offsets. */ \
      enum { ROWS = 256 }; /* outputs per block, at least one row (Wo <= 256) */                   \
      const int32_t W = (int32_t)g->W, Wo = (int32_t)g->Wo, Ho = (int32_t)g->Ho;                   \
      const int32_t rb = ROWS / Wo; /* output rows per block */                                    \
      int32_t tab[ROWS], h0, k, n;                                                                 \
      for (h0 = 0; h0 < Ho; h0 += rb) {                                                            \
        const int32_t rows = Ho - h0 < rb ? Ho - h0 : rb, q = rows * Wo;                           \
        T *DL__RESTRICT yo = y + (int64_t)h0 * Wo;                                                 \
        int32_t *DL__RESTRICT io = idx ? idx + (int64_t)h0 * Wo : NULL;                            \
        for (n = 0; n < rows; n++)                                                                 \
          for (k = 0; k < Wo; k++) tab[n * Wo + k] = 2 * (h0 + n) * W + 2 * k;                     \
        if (!io) {                                                                                 \
          DL__IVDEP                                                                                \
          for (k = 0; k < q; k++)                                                                  \
            yo[k] = dl__max4nan_##sfx(x[tab[k]], x[tab[k] + 1], x[tab[k] + W], x[tab[k] + W + 1]);    \
          continue;                                                                                \
        }                                                                                          \
        DL__IVDEP                                                                                  \
        for (k = 0; k < q; k++) { /* branch-free, so it vectorises */                              \
          const int32_t a0 = tab[k];                                                               \
          const T v0 = x[a0], v1 = x[a0 + 1], v2 = x[a0 + W], v3 = x[a0 + W + 1];                 \
          T m = v0;                                                                                \
          int32_t at = a0, c;                                                                      \
          c = (v1 > m) | (v1 != v1);                                                               \
          m = c ? v1 : m;                                                                          \
          at = c ? a0 + 1 : at;                                                                    \
          c = (v2 > m) | (v2 != v2);                                                               \
          m = c ? v2 : m;                                                                          \
          at = c ? a0 + W : at;                                                                    \
          c = (v3 > m) | (v3 != v3);                                                               \
          m = c ? v3 : m;                                                                          \
          at = c ? a0 + W + 1 : at;                                                                \
          yo[k] = m;                                                                               \
          io[k] = at;                                                                              \
        }                                                                                          \
      }                                                                                            \
      return;                                                                                      \
    }                                                                                              \
    if (g->dd == 1 && g->dh == 1 && g->dw == 1) { /* the window clipped to the input */            \
      for (od = 0; od < g->Do; od++) {                                                             \
        int64_t d0 = od * g->sd - g->pd;                                                           \
        const int64_t d1 = d0 + g->kd < g->D ? d0 + g->kd : g->D;                                  \
        if (d0 < 0) d0 = 0;                                                                        \
        for (oh = 0; oh < g->Ho; oh++)                                                             \
          for (ow = 0; ow < g->Wo; ow++) {                                                         \
            int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw, at;                          \
            const int64_t h1 = h0 + g->kh < g->H ? h0 + g->kh : g->H;                              \
            const int64_t w1 = w0 + g->kw < g->W ? w0 + g->kw : g->W;                              \
            T m = -(T)INFINITY;                                                                    \
            if (h0 < 0) h0 = 0;                                                                    \
            if (w0 < 0) w0 = 0;                                                                    \
            at = d0 < d1 && h0 < h1 && w0 < w1 ? d0 * HW + h0 * g->W + w0 : -1;                    \
            for (jd = d0; jd < d1; jd++)                                                           \
              for (jh = h0; jh < h1; jh++)                                                         \
                for (jw = w0; jw < w1; jw++) {                                                     \
                  const int64_t p = jd * HW + jh * g->W + jw;                                      \
                  const T v = x[p];                                                                \
                  if (v > m || v != v) {                                                           \
                    m = v;                                                                         \
                    at = p;                                                                        \
                  }                                                                                \
                }                                                                                  \
            y[od * Q + oh * g->Wo + ow] = m;                                                       \
            if (idx) idx[od * Q + oh * g->Wo + ow] = (int32_t)at;                                  \
          }                                                                                        \
      }                                                                                            \
      return;                                                                                      \
    }                                                                                              \
    for (od = 0; od < g->Do; od++) { /* dilated: the taps inside the input, maybe none */          \
      const int64_t ds = od * g->sd - g->pd;                                                       \
      int64_t d0, d1;                                                                              \
      dl__conv_range(ds, g->dd, g->D, g->kd, &d0, &d1);                                            \
      for (oh = 0; oh < g->Ho; oh++) {                                                             \
        const int64_t hs = oh * g->sh - g->ph;                                                     \
        int64_t h0, h1;                                                                            \
        dl__conv_range(hs, g->dh, g->H, g->kh, &h0, &h1);                                          \
        for (ow = 0; ow < g->Wo; ow++) {                                                           \
          const int64_t ws = ow * g->sw - g->pw;                                                   \
          int64_t w0, w1, at = -1;                                                                 \
          T m = -(T)INFINITY;                                                                      \
          dl__conv_range(ws, g->dw, g->W, g->kw, &w0, &w1);                                        \
          if (d0 < d1 && h0 < h1 && w0 < w1) { /* the first tap starts the scan (NaN, -inf) */     \
            at = (ds + d0 * g->dd) * HW + (hs + h0 * g->dh) * g->W + ws + w0 * g->dw;              \
            m = x[at];                                                                             \
          }                                                                                        \
          for (jd = d0; jd < d1; jd++)                                                             \
            for (jh = h0; jh < h1; jh++) {                                                         \
              const int64_t r = (ds + jd * g->dd) * HW + (hs + jh * g->dh) * g->W + ws;            \
              for (jw = w0; jw < w1; jw++) {                                                       \
                const int64_t p = r + jw * g->dw;                                                  \
                const T v = x[p];                                                                  \
                if (v > m || v != v) {                                                             \
                  m = v;                                                                           \
                  at = p;                                                                          \
                }                                                                                  \
              }                                                                                    \
            }                                                                                      \
          y[od * Q + oh * g->Wo + ow] = m;                                                         \
          if (idx) idx[od * Q + oh * g->Wo + ow] = (int32_t)at;                                    \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  DL_API void dl__maxpool_bwd_##sfx(const dl__pool_geom *g, const T *gy, const int32_t *idx,       \
                                    T *gx) {                                                       \
    int64_t k;                                                                                     \
    for (k = 0; k < g->Do * g->Ho * g->Wo; k++)                                                    \
      if (idx[k] >= 0) gx[idx[k]] += gy[k];                                                        \
  }                                                                                                \
  DL_API void dl__maxpool_tan_##sfx(const dl__pool_geom *g, const T *tx, const int32_t *idx,       \
                                    T *ty) {                                                       \
    int64_t k;                                                                                     \
    for (k = 0; k < g->Do * g->Ho * g->Wo; k++) ty[k] = idx[k] >= 0 ? tx[idx[k]] : (T)0;           \
  }                                                                                                \
  DL_API void dl__avgpool_fwd_##sfx(const dl__pool_geom *g, const T *x, T *y) {                    \
    const int64_t HW = g->H * g->W, Q = g->Ho * g->Wo;                                             \
    int64_t od, oh, ow, id, ih, iw;                                                                \
    const int64_t dfull = dl__avgpool_full(g->D, g->pd, g->pde, g->kd, g->sd);                     \
    const int64_t hfull = dl__avgpool_full(g->H, g->ph, g->phe, g->kh, g->sh);                     \
    const int64_t wfull = dl__avgpool_full(g->W, g->pw, g->pwe, g->kw, g->sw);                     \
    for (od = 0; od < g->Do; od++)                                                                 \
      for (oh = 0; oh < g->Ho; oh++)                                                               \
        for (ow = 0; ow < g->Wo; ow++) {                                                           \
          int64_t ds = od * g->sd - g->pd, hs = oh * g->sh - g->ph, ws = ow * g->sw - g->pw, cnt;  \
          const int64_t de = ds + g->kd < g->D ? ds + g->kd : g->D;                                \
          const int64_t he = hs + g->kh < g->H ? hs + g->kh : g->H;                                \
          const int64_t we = ws + g->kw < g->W ? ws + g->kw : g->W;                                \
          T s = 0;                                                                                 \
          DL__AVGPOOL_COUNT                                                                        \
          for (id = ds; id < de; id++)                                                             \
            for (ih = hs; ih < he; ih++)                                                           \
              for (iw = ws; iw < we; iw++) s += x[id * HW + ih * g->W + iw];                       \
          y[od * Q + oh * g->Wo + ow] = cnt > 0 ? s / (T)cnt : (T)0;                               \
        }                                                                                          \
  }                                                                                                \
  DL_API void dl__avgpool_bwd_##sfx(const dl__pool_geom *g, const T *gy, T *gx) {                  \
    const int64_t HW = g->H * g->W, Q = g->Ho * g->Wo;                                             \
    int64_t od, oh, ow, id, ih, iw;                                                                \
    const int64_t dfull = dl__avgpool_full(g->D, g->pd, g->pde, g->kd, g->sd);                     \
    const int64_t hfull = dl__avgpool_full(g->H, g->ph, g->phe, g->kh, g->sh);                     \
    const int64_t wfull = dl__avgpool_full(g->W, g->pw, g->pwe, g->kw, g->sw);                     \
    for (od = 0; od < g->Do; od++)                                                                 \
      for (oh = 0; oh < g->Ho; oh++)                                                               \
        for (ow = 0; ow < g->Wo; ow++) {                                                           \
          int64_t ds = od * g->sd - g->pd, hs = oh * g->sh - g->ph, ws = ow * g->sw - g->pw, cnt;  \
          const int64_t de = ds + g->kd < g->D ? ds + g->kd : g->D;                                \
          const int64_t he = hs + g->kh < g->H ? hs + g->kh : g->H;                                \
          const int64_t we = ws + g->kw < g->W ? ws + g->kw : g->W;                                \
          T v;                                                                                     \
          DL__AVGPOOL_COUNT                                                                        \
          if (cnt <= 0) continue;                                                                  \
          v = gy[od * Q + oh * g->Wo + ow] / (T)cnt;                                               \
          for (id = ds; id < de; id++)                                                             \
            for (ih = hs; ih < he; ih++)                                                           \
              for (iw = ws; iw < we; iw++) gx[id * HW + ih * g->W + iw] += v;                      \
        }                                                                                          \
  }

/* How many windows along an axis lie wholly inside the padded input (all
 * but a ceil_mode window that runs past the padding). */
DL__INL int64_t dl__avgpool_full(int64_t n, int64_t p, int64_t pe, int64_t k, int64_t s) {
  return n + p + pe - k >= 0 ? (n + p + pe - k) / s + 1 : 0;
}
/* The average's divisor for the window at (ds, hs, ws) with ends (de, he,
 * we) clipped to the input; then ds, hs, ws clipped too (the kernels'
 * variables): count_include_pad counts the window inside the padded input
 * [-pd, D + pde) x [-ph, H + phe) x [-pw, W + pwe). */
#define DL__AVGPOOL_COUNT                                                                          \
  if (g->excl) {                                                                                   \
    if (ds < 0) ds = 0;                                                                            \
    if (hs < 0) hs = 0;                                                                            \
    if (ws < 0) ws = 0;                                                                            \
    cnt = (de > ds ? de - ds : 0) * (he > hs ? he - hs : 0) * (we > ws ? we - ws : 0);             \
  } else {                                                                                         \
    /* kd kh kw but for the windows that ceil_mode runs past the padding */                        \
    if (od < dfull && oh < hfull && ow < wfull) {                                                  \
      cnt = g->kd * g->kh * g->kw;                                                                 \
    } else {                                                                                       \
      const int64_t dp = ds + g->kd < g->D + g->pde ? g->kd : g->D + g->pde - ds;                  \
      const int64_t hp = hs + g->kh < g->H + g->phe ? g->kh : g->H + g->phe - hs;                  \
      const int64_t wp = ws + g->kw < g->W + g->pwe ? g->kw : g->W + g->pwe - ws;                  \
      cnt = dp * hp * wp;                                                                          \
    }                                                                                              \
    if (ds < 0) ds = 0;                                                                            \
    if (hs < 0) hs = 0;                                                                            \
    if (ws < 0) ws = 0;                                                                            \
  }

DL__POOL_KERNELS(float, f32)
DL__POOL_KERNELS(double, f64)
#undef DL__AVGPOOL_COUNT

enum { DL__MAXPOOL_FWD, DL__MAXPOOL_BWD, DL__MAXPOOL_TAN, DL__AVGPOOL_FWD, DL__AVGPOOL_BWD };
#define DL__POOL_ZERO 0x100 /* or'ed into a backward kind: zero each plane of the output just before adding to it */

/* Runs kernel `kind` over the N*C planes (volumes in 3-d): in (plane
 * [D, H, W] for the forward kinds, [Do, Ho, Wo] for the backward ones), out
 * likewise the other size, idx [N*C, Do, Ho, Wo] (max pooling). Planes
 * split over a team when large; each plane is written by one thread.
 * kind | DL__POOL_ZERO (backward kinds: out is a tape gradient not zeroed
 * yet) zeroes each plane of out as the thread reaches it, in L1. */
DL_API void dl__pool_run(dl_ctx *ctx, const dl__pool_geom *g, int kind_, dl_dtype dt,
                         const void *in, void *out, int32_t *idx) {
  const int kind = kind_ & ~DL__POOL_ZERO, zero = (kind_ & DL__POOL_ZERO) != 0;
  const int64_t planes = g->N * g->C, hw = g->D * g->H * g->W, ohw = g->Do * g->Ho * g->Wo;
  const int fwd = kind == DL__MAXPOOL_FWD || kind == DL__MAXPOOL_TAN || kind == DL__AVGPOOL_FWD;
  const int64_t is = fwd ? hw : ohw, os = fwd ? ohw : hw;
  DL_PARALLEL_RUNS(ctx, planes * ohw * g->kd * g->kh * g->kw, planes, pl, {
    int32_t *ip = idx ? idx + pl * ohw : NULL;
    if (zero && os) memset((char *)out + (size_t)(pl * os) * dl_dtype_size(dt), 0, (size_t)os * dl_dtype_size(dt));
    if (dt == DL_F32) {
      const float *a = (const float *)in + pl * is;
      float *b = (float *)out + pl * os;
      switch (kind) {
        case DL__MAXPOOL_FWD: dl__maxpool_fwd_f32(g, a, b, ip); break;
        case DL__MAXPOOL_BWD: dl__maxpool_bwd_f32(g, a, ip, b); break;
        case DL__MAXPOOL_TAN: dl__maxpool_tan_f32(g, a, ip, b); break;
        case DL__AVGPOOL_FWD: dl__avgpool_fwd_f32(g, a, b); break;
        default: dl__avgpool_bwd_f32(g, a, b); break;
      }
    } else {
      const double *a = (const double *)in + pl * is;
      double *b = (double *)out + pl * os;
      switch (kind) {
        case DL__MAXPOOL_FWD: dl__maxpool_fwd_f64(g, a, b, ip); break;
        case DL__MAXPOOL_BWD: dl__maxpool_bwd_f64(g, a, ip, b); break;
        case DL__MAXPOOL_TAN: dl__maxpool_tan_f64(g, a, ip, b); break;
        case DL__AVGPOOL_FWD: dl__avgpool_fwd_f64(g, a, b); break;
        default: dl__avgpool_bwd_f64(g, a, b); break;
      }
    }
  });
}

/* Checks x and the window (a NULL args panics: the kernel size is needed);
 * max: max pooling (the only one with dilation). */
DL_API dl__pool_geom dl__pool_check(const char *op, const dl_tensor *x, const dl_pool2d_args *a, int max) {
  dl__pool_geom g;
  int64_t ekh, ekw;
  dl__ops_same_float(op, x, NULL);
  if (!a) DL_PANIC(x->ctx, op, "no window given for x %s: pass dl_pool2d_args with kernel_h, kernel_w",
                   DL_SHAPESTR(x));
  if (x->ndim != 4)
    DL_PANIC(x->ctx, op, "x %s must be 4-d [N, C, H, W] (window %dx%d)", DL_SHAPESTR(x),
             a->kernel_h, a->kernel_w);
  if (a->kernel_h <= 0 || a->kernel_w <= 0 || a->stride_h < 0 || a->stride_w < 0 || a->pad_h < 0 ||
      a->pad_w < 0 || a->pad_h_end < 0 || a->pad_w_end < 0 || a->dil_h < 0 || a->dil_w < 0)
    DL_PANIC(x->ctx, op, "bad window for x %s: kernel %dx%d (must be > 0), stride %dx%d, padding %dx%d "
             "(end %dx%d), dilation %dx%d (must be >= 0)", DL_SHAPESTR(x), a->kernel_h, a->kernel_w,
             a->stride_h, a->stride_w, a->pad_h, a->pad_w, a->pad_h_end, a->pad_w_end, a->dil_h, a->dil_w);
  if (!max && (a->dil_h > 1 || a->dil_w > 1))
    DL_PANIC(x->ctx, op, "dilation %dx%d for x %s: average pooling has none (as PyTorch's avg_pool2d)",
             a->dil_h, a->dil_w, DL_SHAPESTR(x));
  {
    static const char *const names[] = {"pad_h", "pad_h_end", "pad_w", "pad_w_end"};
    const int p[4] = {a->pad_h, a->pad_h_end, a->pad_w, a->pad_w_end};
    dl__pad_mode_check(op, x, a->pad_mode, 2, p, names, a->ceil_mode);
  }
  memset(&g, 0, sizeof g);
  g.N = x->shape[0];
  g.C = x->shape[1];
  g.D = g.kd = g.sd = g.dd = g.Do = 1;
  g.H = x->shape[2];
  g.W = x->shape[3];
  g.kh = a->kernel_h;
  g.kw = a->kernel_w;
  g.sh = a->stride_h ? a->stride_h : a->kernel_h;
  g.sw = a->stride_w ? a->stride_w : a->kernel_w;
  g.dh = a->dil_h ? a->dil_h : 1;
  g.dw = a->dil_w ? a->dil_w : 1;
  g.excl = a->exclude_pad != 0;
  ekh = (g.kh - 1) * g.dh + 1;
  ekw = (g.kw - 1) * g.dw + 1;
  if (a->pad_mode == DL_PAD_SYMMETRIC && (2 * a->pad_h > a->kernel_h || 2 * a->pad_w > a->kernel_w))
    DL_PANIC(x->ctx, op, "padding %dx%d is more than half of the kernel %dx%d (x %s)", a->pad_h,
             a->pad_w, a->kernel_h, a->kernel_w, DL_SHAPESTR(x));
  if (a->pad_mode == DL_PAD_EXPLICIT &&
      (a->pad_h >= ekh || a->pad_h_end >= ekh || a->pad_w >= ekw || a->pad_w_end >= ekw))
    DL_PANIC(x->ctx, op, "padding top %d, bottom %d, left %d, right %d for x %s: each side must be less than "
             "the window %lldx%lld, else a window holds padding only", a->pad_h, a->pad_h_end, a->pad_w,
             a->pad_w_end, DL_SHAPESTR(x), (long long)ekh, (long long)ekw);
  g.Ho = dl__window_axis(a->pad_mode, g.H, g.kh, g.sh, g.dh, a->pad_h, a->pad_h_end, a->ceil_mode, &g.ph, &g.phe);
  g.Wo = dl__window_axis(a->pad_mode, g.W, g.kw, g.sw, g.dw, a->pad_w, a->pad_w_end, a->ceil_mode, &g.pw, &g.pwe);
  if (g.Ho < 0 || g.Wo < 0)
    DL_PANIC(x->ctx, op, "window %lldx%lld larger than the padded input x %s (padding %lldx%lld, end %lldx%lld)",
             (long long)ekh, (long long)ekw, DL_SHAPESTR(x), (long long)g.ph, (long long)g.pw,
             (long long)g.phe, (long long)g.pwe);
  if (g.H * g.W > INT32_MAX)
    DL_PANIC(x->ctx, op, "planes of x %s hold more than 2^31 elements", DL_SHAPESTR(x));
  return g;
}

/* A recorded pooling node's window: i[0..6) = the (h << 32 | w) pairs of
 * kernel, stride, padding at the start, padding at the end, dilation, and
 * excl; in 3-d (x 5-d) i[6] = (kd << 32 | sd), i[7] = (pd << 32 | dd), the
 * depth padded alike at both ends; Do, Ho, Wo are the output's. */
DL_API int64_t dl__pool_pair(int64_t h, int64_t w) { return (int64_t)(((uint64_t)h << 32) | (uint64_t)w); }
DL_API dl__pool_geom dl__pool_geom_of(const dl_node *n) {
  dl__pool_geom g;
  const dl_tensor *x = n->in[0];
  const int d3 = x->ndim == 5;
#define DL__POOL_UNPAIR(k, a, b) (a = n->i[k] >> 32, b = n->i[k] & 0xffffffff)
  g.N = x->shape[0];
  g.C = x->shape[1];
  g.H = x->shape[2 + d3];
  g.W = x->shape[3 + d3];
  DL__POOL_UNPAIR(0, g.kh, g.kw);
  DL__POOL_UNPAIR(1, g.sh, g.sw);
  DL__POOL_UNPAIR(2, g.ph, g.pw);
  DL__POOL_UNPAIR(3, g.phe, g.pwe);
  DL__POOL_UNPAIR(4, g.dh, g.dw);
  g.D = g.kd = g.sd = g.dd = g.Do = 1;
  g.pd = g.pde = 0;
  if (d3) {
    g.D = x->shape[2];
    g.Do = n->out->shape[2];
    DL__POOL_UNPAIR(6, g.kd, g.sd);
    DL__POOL_UNPAIR(7, g.pd, g.dd);
    g.pde = g.pd;
  }
#undef DL__POOL_UNPAIR
  g.excl = (int)n->i[5];
  g.Ho = n->out->shape[2 + d3];
  g.Wo = n->out->shape[3 + d3];
  return g;
}
DL_API void dl__pool_save(dl_node *n, const dl__pool_geom *g) {
  n->i[0] = dl__pool_pair(g->kh, g->kw);
  n->i[1] = dl__pool_pair(g->sh, g->sw);
  n->i[2] = dl__pool_pair(g->ph, g->pw);
  n->i[3] = dl__pool_pair(g->phe, g->pwe);
  n->i[4] = dl__pool_pair(g->dh, g->dw);
  n->i[5] = g->excl;
  n->i[6] = dl__pool_pair(g->kd, g->sd);
  n->i[7] = dl__pool_pair(g->pd, g->dd);
}
/* The output shape of pooling x with g: [N, C, Ho, Wo] (x 4-d) or
 * [N, C, Do, Ho, Wo] (x 5-d); returns the rank. */
DL_API int dl__pool_shape(const dl_tensor *x, const dl__pool_geom *g, int64_t *shape) {
  const int d3 = x->ndim == 5;
  shape[0] = g->N;
  shape[1] = g->C;
  shape[2] = g->Do;
  shape[2 + d3] = g->Ho;
  shape[3 + d3] = g->Wo;
  return 4 + d3;
}

#ifdef DL_USE_CUDA
DL_API dlg_pool2d dl__pool_dlg(const dl__pool_geom *g) {
  dlg_pool2d p;
  p.N = g->N;
  p.C = g->C;
  p.H = g->H;
  p.W = g->W;
  p.kh = g->kh;
  p.kw = g->kw;
  p.sh = g->sh;
  p.sw = g->sw;
  p.ph = g->ph;
  p.pw = g->pw;
  p.Ho = g->Ho;
  p.Wo = g->Wo;
  p.excl = g->excl;
  p.dh = g->dh;
  p.dw = g->dw;
  p.phe = g->phe;
  p.pwe = g->pwe;
  p.D = g->D;
  p.kd = g->kd;
  p.sd = g->sd;
  p.pd = g->pd;
  p.pde = g->pde;
  p.dd = g->dd;
  p.Do = g->Do;
  return p;
}
/* max_pool2d (max != 0) or avg_pool2d on the device, recorded with rule bw;
 * max pooling saves the argmax (int32 [N, C, Ho, Wo], device) as the CPU,
 * and hands it to *ind when ind is not NULL. */
DL_API dl_tensor *dl__t_pool_gpu(dl_tape *tp, const char *op, int max, dl_tensor *x, const dl__pool_geom *g,
                                 dl_backward_fn bw, dl_tensor **ind) {
  dlg_handle *h = dl__dnn_h(tp, op, x);
  const dlg_pool2d pg = dl__pool_dlg(g);
  const int dt = (int)x->dtype;
  dl_tensor *y, *xc, *idx = NULL;
  dl_node *n;
  int64_t shape[5];
  const int nd = dl__pool_shape(x, g, shape);
  dl__dnn_tangent_dev(op, x);
  y = dl_tape_out(tp, op, x->dtype, nd, shape);
  xc = dl__t_contig(tp, op, x);
  if (max && (ind || dl_tape_wants(tp, 1, &x) || x->tangent)) idx = dl_tape_out(tp, op, DL_I32, nd, y->shape);
  if (y->numel)
    dl__gpu_ok(x, op, max ? dlg_max_pool2d_fwd(h, dt, &pg, xc->data, y->data, idx ? (int32_t *)idx->data : NULL)
                          : dlg_avg_pool2d_fwd(h, dt, &pg, xc->data, y->data));
  if (x->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y), *tx = dl__t_contig(tp, op, x->tangent);
    if (y->numel)
      dl__gpu_ok(x, op, max ? dlg_max_pool2d_tan(h, dt, &pg, tx->data, (const int32_t *)idx->data, ty->data)
                            : dlg_avg_pool2d_fwd(h, dt, &pg, tx->data, ty->data));
  }
  if ((n = dl_tape_record(tp, op, bw, y, x, NULL, NULL)) != NULL) {
    dl__pool_save(n, g);
    n->saved[0] = idx;
  }
  if (ind) *ind = idx;
  return y;
}
/* The pooling rules' gradient on the device: gx += from gy (and idx). */
DL_API void dl__pool_bw_gpu(dl_node *n, int max, const dl__pool_geom *g, dl_tensor *gx) {
  const dl_tensor *gy = n->out->grad;
  const dlg_pool2d pg = dl__pool_dlg(g);
  dlg_handle *h = dl__gpu_h(gy, n->op);
  dl__gpu_ok(gy, n->op, max ? dlg_max_pool2d_bwd(h, (int)gx->dtype, &pg, gy->data,
                                                 (const int32_t *)n->saved[0]->data, gx->data)
                            : dlg_avg_pool2d_bwd(h, (int)gx->dtype, &pg, gy->data, gx->data));
}
#endif

/* gx of a pooling's backward from dl__tape_grad_w: the kind to run, with
 * DL__POOL_ZERO when gx is not zeroed yet (the flag is then handled). */
DL_API int dl__pool_bw_kind(dl_tensor *gx, int kind) { return dl__grad_take(gx) ? kind | DL__POOL_ZERO : kind; }
DL_API void dl__t_max_pool2d_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl__tape_grad_w(tp, n->in[0]);
  const dl__pool_geom g = dl__pool_geom_of(n);
#ifdef DL_USE_CUDA
  if (gx && gx->device == DL_CUDA) {
    dl__pool_bw_gpu(n, 1, &g, gx);
    return;
  }
#endif
  if (gx)
    dl__pool_run(tp->ctx, &g, dl__pool_bw_kind(gx, DL__MAXPOOL_BWD), gx->dtype, n->out->grad->data, gx->data,
                 (int32_t *)n->saved[0]->data);
}
/* max pooling (2-d or 3-d) after the checks, and its argmax in *ind when
 * ind is not NULL. */
DL_API dl_tensor *dl__t_max_pool(dl_tape *tp, const char *op, dl_tensor *x, const dl__pool_geom *gp,
                                 dl_tensor **ind) {
  const dl__pool_geom g = *gp;
  dl_tensor *y, *xc, *idx = NULL;
  dl_node *n;
  int64_t shape[5];
  const int rec = dl_tape_wants(tp, 1, &x), nd = dl__pool_shape(x, &g, shape);
#ifdef DL_USE_CUDA
  if (x->device == DL_CUDA || tp->gpu) return dl__t_pool_gpu(tp, op, 1, x, &g, dl__t_max_pool2d_bw, ind);
#endif
  y = dl_tape_out(tp, op, x->dtype, nd, shape);
  xc = dl__t_contig(tp, op, x);
  if (rec || x->tangent || ind) idx = dl_tape_out(tp, op, DL_I32, nd, y->shape);
  if (y->numel)
    dl__pool_run(tp->ctx, &g, DL__MAXPOOL_FWD, x->dtype, xc->data, y->data, idx ? (int32_t *)idx->data : NULL);
  if (x->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y), *tx = dl__t_contig(tp, op, x->tangent);
    if (y->numel) dl__pool_run(tp->ctx, &g, DL__MAXPOOL_TAN, x->dtype, tx->data, ty->data, (int32_t *)idx->data);
  }
  if ((n = dl_tape_record(tp, op, dl__t_max_pool2d_bw, y, x, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP_LINEAR; /* a selection: linear in the gradient */
    dl__pool_save(n, &g);
    n->saved[0] = idx;
  }
  if (ind) *ind = idx;
  return y;
}
/* y = max_pool2d(x), PyTorch's F.max_pool2d(x, kernel, stride, padding,
 * dilation, ceil_mode): x [N, C, H, W] -> y [N, C, Ho, Wo],
 *   Ho = (H + pad_top + pad_bottom - dil_h (kernel_h - 1) - 1) / stride_h + 1
 * rounded down (ceil_mode: up, but the last window starts inside the input
 * or the top padding), stride 0 meaning the kernel size; padding counts as
 * -inf (see dl_pool2d_args for the padding modes). The gradient goes to the
 * first maximum of each window in scan order (as in PyTorch). A window
 * whose taps all miss the input (possible with dilation) gives -inf and no
 * gradient. y lives in the tape's arena (valid until dl_tape_rewind). */
DL_API dl_tensor *dl_t_max_pool2d(dl_tape *tp, dl_tensor *x, const dl_pool2d_args *a) {
  const dl__pool_geom g = dl__pool_check("dl_t_max_pool2d", x, a, 1);
  return dl__t_max_pool(tp, "dl_t_max_pool2d", x, &g, NULL);
}
/* max_pool2d with return_indices: y as dl_t_max_pool2d, and *indices an
 * int32 [N, C, Ho, Wo] tensor (on x's device, in the tape's arena) of each
 * window's argmax as ih * W + iw within its plane, PyTorch's indices (-1
 * for a window that misses the input). They feed dl_t_max_unpool2d. */
DL_API dl_tensor *dl_t_max_pool2d_with_indices(dl_tape *tp, dl_tensor *x, const dl_pool2d_args *a,
                                               dl_tensor **indices) {
  dl_tensor *dummy;
  const dl__pool_geom g = dl__pool_check("dl_t_max_pool2d_with_indices", x, a, 1);
  return dl__t_max_pool(tp, "dl_t_max_pool2d_with_indices", x, &g, indices ? indices : &dummy);
}

DL_API void dl__t_avg_pool2d_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl__tape_grad_w(tp, n->in[0]);
  const dl__pool_geom g = dl__pool_geom_of(n);
#ifdef DL_USE_CUDA
  if (gx && gx->device == DL_CUDA) {
    dl__pool_bw_gpu(n, 0, &g, gx);
    return;
  }
#endif
  if (gx) dl__pool_run(tp->ctx, &g, dl__pool_bw_kind(gx, DL__AVGPOOL_BWD), gx->dtype, n->out->grad->data, gx->data, NULL);
}
/* average pooling (2-d or 3-d) after the checks. */
DL_API dl_tensor *dl__t_avg_pool(dl_tape *tp, const char *op, dl_tensor *x, const dl__pool_geom *g) {
  dl_tensor *y, *xc;
  dl_node *n;
  int64_t shape[5];
  const int nd = dl__pool_shape(x, g, shape);
#ifdef DL_USE_CUDA
  if (x->device == DL_CUDA || tp->gpu) return dl__t_pool_gpu(tp, op, 0, x, g, dl__t_avg_pool2d_bw, NULL);
#endif
  y = dl_tape_out(tp, op, x->dtype, nd, shape);
  xc = dl__t_contig(tp, op, x);
  if (y->numel) dl__pool_run(tp->ctx, g, DL__AVGPOOL_FWD, x->dtype, xc->data, y->data, NULL);
  if (x->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y), *tx = dl__t_contig(tp, op, x->tangent);
    if (y->numel) dl__pool_run(tp->ctx, g, DL__AVGPOOL_FWD, x->dtype, tx->data, ty->data, NULL);
  }
  if ((n = dl_tape_record(tp, op, dl__t_avg_pool2d_bw, y, x, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP_LINEAR; /* linear */
    dl__pool_save(n, g);
  }
  return y;
}
/* y = avg_pool2d(x), PyTorch's F.avg_pool2d(x, kernel, stride, padding,
 * ceil_mode, count_include_pad = !exclude_pad): x [N, C, H, W] -> y
 * [N, C, Ho, Wo] (sizes as max_pool2d, no dilation). count_include_pad
 * counts the window's elements inside the padded input (a ceil_mode window
 * that runs past the padding counts less, as PyTorch). y lives in the
 * tape's arena (valid until dl_tape_rewind). */
DL_API dl_tensor *dl_t_avg_pool2d(dl_tape *tp, dl_tensor *x, const dl_pool2d_args *a) {
  const dl__pool_geom g = dl__pool_check("dl_t_avg_pool2d", x, a, 0);
  return dl__t_avg_pool(tp, "dl_t_avg_pool2d", x, &g);
}

/* Pooling 3-d window: kernel_d, kernel_h, kernel_w > 0 are required; stride
 * 0 means the kernel size (PyTorch's default); symmetric padding, at most
 * half the kernel on each axis (as PyTorch); exclude_pad = 0 counts padded
 * zeros in the average (count_include_pad=True, PyTorch's default), 1
 * divides by the number of elements inside the input; dil_d, dil_h, dil_w:
 * dilation, 0 = 1, max pooling only; ceil_mode: output sizes rounded up
 * (PyTorch's ceil_mode=True, the last window starting inside the input or
 * the front padding). */
typedef struct dl_pool3d_args {
  int kernel_d, kernel_h, kernel_w; /* the window, > 0 */
  int stride_d, stride_h, stride_w; /* 0: the kernel */
  int pad_d, pad_h, pad_w;          /* symmetric padding per axis */
  int exclude_pad;                  /* avg: 1 divides by the elements inside the input */
  int dil_d, dil_h, dil_w;          /* max: dilation per axis, 0: 1 */
  int ceil_mode;                    /* 1: output sizes rounded up */
} dl_pool3d_args;

/* Checks x [N, C, D, H, W] and a 3-d window (a NULL args panics: the kernel
 * size is needed); max: max pooling (the only one with dilation). */
DL_API dl__pool_geom dl__pool3d_check(const char *op, const dl_tensor *x, const dl_pool3d_args *a, int max) {
  dl__pool_geom g;
  int64_t ek[3], *out[3], *pb[3], *pe[3], n[3];
  const int k[3] = {a ? a->kernel_d : 0, a ? a->kernel_h : 0, a ? a->kernel_w : 0};
  int ax;
  dl__ops_same_float(op, x, NULL);
  if (!a) DL_PANIC(x->ctx, op, "no window given for x %s: pass dl_pool3d_args with kernel_d, kernel_h, kernel_w",
                   DL_SHAPESTR(x));
  if (x->ndim != 5)
    DL_PANIC(x->ctx, op, "x %s must be 5-d [N, C, D, H, W] (window %dx%dx%d)", DL_SHAPESTR(x), a->kernel_d,
             a->kernel_h, a->kernel_w);
  if (k[0] <= 0 || k[1] <= 0 || k[2] <= 0 || a->stride_d < 0 || a->stride_h < 0 || a->stride_w < 0 ||
      a->pad_d < 0 || a->pad_h < 0 || a->pad_w < 0 || a->dil_d < 0 || a->dil_h < 0 || a->dil_w < 0)
    DL_PANIC(x->ctx, op, "bad window for x %s: kernel %dx%dx%d (must be > 0), stride %dx%dx%d, padding %dx%dx%d, "
             "dilation %dx%dx%d (must be >= 0)", DL_SHAPESTR(x), a->kernel_d, a->kernel_h, a->kernel_w,
             a->stride_d, a->stride_h, a->stride_w, a->pad_d, a->pad_h, a->pad_w, a->dil_d, a->dil_h, a->dil_w);
  if (!max && (a->dil_d > 1 || a->dil_h > 1 || a->dil_w > 1))
    DL_PANIC(x->ctx, op, "dilation %dx%dx%d for x %s: average pooling has none (as PyTorch's avg_pool3d)",
             a->dil_d, a->dil_h, a->dil_w, DL_SHAPESTR(x));
  if (2 * a->pad_d > k[0] || 2 * a->pad_h > k[1] || 2 * a->pad_w > k[2])
    DL_PANIC(x->ctx, op, "padding %dx%dx%d is more than half of the kernel %dx%dx%d (x %s)", a->pad_d, a->pad_h,
             a->pad_w, k[0], k[1], k[2], DL_SHAPESTR(x));
  memset(&g, 0, sizeof g);
  g.N = x->shape[0];
  g.C = x->shape[1];
  g.D = x->shape[2];
  g.H = x->shape[3];
  g.W = x->shape[4];
  g.kd = k[0];
  g.kh = k[1];
  g.kw = k[2];
  g.sd = a->stride_d ? a->stride_d : k[0];
  g.sh = a->stride_h ? a->stride_h : k[1];
  g.sw = a->stride_w ? a->stride_w : k[2];
  g.dd = a->dil_d ? a->dil_d : 1;
  g.dh = a->dil_h ? a->dil_h : 1;
  g.dw = a->dil_w ? a->dil_w : 1;
  g.excl = a->exclude_pad != 0;
  out[0] = &g.Do, out[1] = &g.Ho, out[2] = &g.Wo;
  pb[0] = &g.pd, pb[1] = &g.ph, pb[2] = &g.pw;
  pe[0] = &g.pde, pe[1] = &g.phe, pe[2] = &g.pwe;
  n[0] = g.D, n[1] = g.H, n[2] = g.W;
  {
    const int64_t s[3] = {g.sd, g.sh, g.sw}, d[3] = {g.dd, g.dh, g.dw}, p[3] = {a->pad_d, a->pad_h, a->pad_w};
    for (ax = 0; ax < 3; ax++) {
      ek[ax] = (k[ax] - 1) * d[ax] + 1;
      *out[ax] = dl__window_axis(DL_PAD_SYMMETRIC, n[ax], k[ax], s[ax], d[ax], p[ax], 0, a->ceil_mode, pb[ax], pe[ax]);
    }
  }
  if (g.Do < 0 || g.Ho < 0 || g.Wo < 0)
    DL_PANIC(x->ctx, op, "window %lldx%lldx%lld larger than the padded input x %s (padding %dx%dx%d)",
             (long long)ek[0], (long long)ek[1], (long long)ek[2], DL_SHAPESTR(x), a->pad_d, a->pad_h, a->pad_w);
  if (g.D * g.H * g.W > INT32_MAX)
    DL_PANIC(x->ctx, op, "volumes of x %s hold more than 2^31 elements", DL_SHAPESTR(x));
  return g;
}
/* y = max_pool3d(x), PyTorch's F.max_pool3d(x, kernel, stride, padding,
 * dilation, ceil_mode): x [N, C, D, H, W] -> y [N, C, Do, Ho, Wo],
 *   y[n, c, z, r, q] = max over a < kd, i < kh, j < kw of
 *     x[n, c, z sd - pd + a dd, r sh - ph + i dh, q sw - pw + j dw]
 * (padding -inf), Do = (D + 2 pad_d - dil_d (kernel_d - 1) - 1) / stride_d
 * + 1 rounded down (ceil_mode: up, but the last window starts inside the
 * input or the front padding), likewise Ho, Wo; stride 0 is the kernel
 * size. Backward: the gradient goes to the first maximum of each window in
 * scan order (depth, rows, columns; a NaN wins, as PyTorch), summed where
 * windows share it; forward mode: ty is tx at the argmax. A window whose
 * taps all miss the input (possible with dilation) gives -inf and no
 * gradient. y lives in the tape's arena (valid until dl_tape_rewind); x may
 * be a strided view. */
DL_API dl_tensor *dl_t_max_pool3d(dl_tape *tp, dl_tensor *x, const dl_pool3d_args *a) {
  const dl__pool_geom g = dl__pool3d_check("dl_t_max_pool3d", x, a, 1);
  return dl__t_max_pool(tp, "dl_t_max_pool3d", x, &g, NULL);
}
/* y = avg_pool3d(x), PyTorch's F.avg_pool3d(x, kernel, stride, padding,
 * ceil_mode, count_include_pad = !exclude_pad): x [N, C, D, H, W] -> y
 * [N, C, Do, Ho, Wo] (sizes as max_pool3d, no dilation),
 *   y[n, c, z, r, q] = (sum of x over the window inside the input) / count
 * where count is the window's elements inside the padded input
 * (count_include_pad; a ceil_mode window that runs past the padding counts
 * less, as PyTorch) or inside the input (exclude_pad). Backward: each
 * element of the window gets gy / count; forward mode: ty = avg_pool3d(tx).
 * y lives in the tape's arena (valid until dl_tape_rewind); x may be a
 * strided view. */
DL_API dl_tensor *dl_t_avg_pool3d(dl_tape *tp, dl_tensor *x, const dl_pool3d_args *a) {
  const dl__pool_geom g = dl__pool3d_check("dl_t_avg_pool3d", x, a, 0);
  return dl__t_avg_pool(tp, "dl_t_avg_pool3d", x, &g);
}

/* >>unpooling -------------------------------------------------------------- */

/* Per plane, for T (sfx): n elements of x (and idx) in, m of y out:
 *   dl__unpool_fwd_<sfx>(n, m, x, idx, y, own)  y = 0, y[idx[k]] = x[k] in k
 *                                               order (the last of equal
 *                                               indices wins; idx -1 writes
 *                                               nothing); own (may be
 *                                               NULL) [m]: the k written, -1
 *   dl__unpool_bwd_<sfx>(n, gy, idx, own, gx)   gx[k] += gy[idx[k]] where
 *                                               own[idx[k]] == k */
#define DL__UNPOOL_KERNELS(T, sfx)                                                                 \
  DL_API void dl__unpool_fwd_##sfx(int64_t n, int64_t m, const T *x, const int32_t *idx, T *y,     \
                                   int32_t *own) {                                                 \
    int64_t k;                                                                                     \
    for (k = 0; k < m; k++) y[k] = 0;                                                              \
    if (own)                                                                                       \
      for (k = 0; k < m; k++) own[k] = -1;                                                         \
    for (k = 0; k < n; k++) {                                                                      \
      if (idx[k] < 0) continue; /* -1: a max pool's window that missed the input */                \
      y[idx[k]] = x[k];                                                                            \
      if (own) own[idx[k]] = (int32_t)k;                                                           \
    }                                                                                              \
  }                                                                                                \
  DL_API void dl__unpool_bwd_##sfx(int64_t n, const T *gy, const int32_t *idx, const int32_t *own, \
                                   T *gx) {                                                        \
    int64_t k;                                                                                     \
    for (k = 0; k < n; k++)                                                                        \
      if (idx[k] >= 0 && own[idx[k]] == k) gx[k] += gy[idx[k]];                                    \
  }
DL__UNPOOL_KERNELS(float, f32)
DL__UNPOOL_KERNELS(double, f64)

/* Runs the forward (bwd 0: in x, out y, own may be NULL) or the backward
 * (bwd 1: in gy, out gx) over the planes. */
DL_API void dl__unpool_run(dl_ctx *ctx, int bwd, dl_dtype dt, int64_t planes, int64_t n, int64_t m,
                           const void *in, const int32_t *idx, void *out, int32_t *own) {
  DL_PARALLEL_RUNS(ctx, planes * (n + m), planes, pl, {
    const int32_t *ip = idx + pl * n;
    int32_t *op = own ? own + pl * m : NULL;
    if (dt == DL_F32) {
      if (bwd) dl__unpool_bwd_f32(n, (const float *)in + pl * m, ip, op, (float *)out + pl * n);
      else dl__unpool_fwd_f32(n, m, (const float *)in + pl * n, ip, (float *)out + pl * m, op);
    } else {
      if (bwd) dl__unpool_bwd_f64(n, (const double *)in + pl * m, ip, op, (double *)out + pl * n);
      else dl__unpool_fwd_f64(n, m, (const double *)in + pl * n, ip, (double *)out + pl * m, op);
    }
  });
}

/* One unpooling axis: the output size PyTorch's max_unpool2d gives input
 * size n, or `want` when nonzero (it must lie strictly within one stride of
 * that size, as PyTorch's output_size). Panics naming op. */
DL_API int64_t dl__unpool_axis(const char *op, const dl_tensor *x, const char *axis, int64_t n, int64_t k,
                               int64_t s, int64_t p, int64_t want) {
  const int64_t def = (n - 1) * s - 2 * p + k;
  if (!want) {
    if (def < 1)
      DL_PANIC(x->ctx, op, "x %s: the %s of the output (%lld - 1) * stride %lld - 2 * padding %lld + kernel %lld "
               "= %lld is not positive", DL_SHAPESTR(x), axis, (long long)n, (long long)s, (long long)p,
               (long long)k, (long long)def);
    return def;
  }
  if (want <= def - s || want >= def + s)
    DL_PANIC(x->ctx, op, "x %s: output %s %lld must lie strictly between %lld and %lld (the default %lld, "
             "plus or minus the stride %lld)", DL_SHAPESTR(x), axis, (long long)want, (long long)(def - s),
             (long long)(def + s), (long long)def, (long long)s);
  return want;
}

/* The backward of max_unpool2d: gx[k] = gy[idx[k]] for the element written. */
DL_API void dl__t_max_unpool2d_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]);
  const dl_tensor *gy = n->out->grad, *idx = n->saved[0], *own = n->saved[1];
  const int64_t planes = n->i[0], per_in = n->i[1], per_out = n->i[2];
  if (!gx) return;
#ifdef DL_USE_CUDA
  if (gx->device == DL_CUDA) {
    dlg_handle *h = dl__gpu_h(gy, n->op);
    dl__gpu_ok(gy, n->op, dlg_max_unpool2d_bwd(h, (int)gx->dtype, planes, per_in, per_out, gy->data,
                                               (const int32_t *)idx->data, (const int32_t *)own->data, gx->data));
    return;
  }
#endif
  dl__unpool_run(tp->ctx, 1, gx->dtype, planes, per_in, per_out, gy->data, (const int32_t *)idx->data, gx->data,
                 (int32_t *)own->data);
}

/* y = max_unpool2d(x, indices), PyTorch's F.max_unpool2d(x, indices,
 * kernel, stride, padding, output_size): x [N, C, H, W] and indices (int32
 * or int64, the shape of x; each in [0, Ho * Wo): positions within an
 * output plane, as dl_t_max_pool2d_with_indices gives them) -> y
 * [N, C, Ho, Wo], zero but y[n, c][indices[n, c, h, w]] = x[n, c, h, w]. Ho
 * = (H - 1) stride_h - 2 pad_h + kernel_h (stride 0: the kernel) unless
 * out_h is set (likewise Wo). Where indices repeat within a plane the last
 * in scan order wins, and only it gets a gradient (PyTorch gives each of
 * them gy at the index). An index -1 (a max pool's window that missed the
 * input) writes nothing and gets no gradient. On the host any other index
 * outside the plane panics; on the device (where checking would mean
 * reading the indices back) it writes nothing too. y lives in the tape's
 * arena (valid until dl_tape_rewind). */
/* The geometry of dl_t_max_unpool2d (see above): kernel, stride, padding
 * and, optionally, the output size. */
typedef struct dl_unpool2d_args {
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, out_h, out_w; /* stride 0: the kernel; out_h, out_w 0: computed (see above) */
} dl_unpool2d_args;
/* y = max_unpool2d(x, indices) with the geometry a (see above); y in the
 * tape's arena. */
DL_API dl_tensor *dl_t_max_unpool2d(dl_tape *tp, dl_tensor *x, dl_tensor *indices, const dl_unpool2d_args *a) {
  const char *const op = "dl_t_max_unpool2d";
  int64_t Ho, Wo, planes, per_in, per_out, d;
  dl_tensor *y, *xc, *ic, *own = NULL;
  dl_node *n;
#ifdef DL_USE_CUDA
  dlg_handle *h = NULL;
#endif
  dl__ops_same_float(op, x, NULL);
  if (!a) DL_PANIC(x->ctx, op, "no window given for x %s: pass dl_unpool2d_args with kernel_h, kernel_w",
                   DL_SHAPESTR(x));
  if (x->ndim != 4) DL_PANIC(x->ctx, op, "x %s must be 4-d [N, C, H, W]", DL_SHAPESTR(x));
  if (!indices || (indices->dtype != DL_I32 && indices->dtype != DL_I64) || indices->ndim != 4)
    DL_PANIC(x->ctx, op, "indices %s must be int32 or int64 of x's shape %s", indices ? DL_SHAPESTR(indices) : "NULL",
             DL_SHAPESTR(x));
  for (d = 0; d < 4; d++)
    if (indices->shape[d] != x->shape[d])
      DL_PANIC(x->ctx, op, "indices %s must have x's shape %s", DL_SHAPESTR(indices), DL_SHAPESTR(x));
  dl__ops_same_device(op, x, indices);
#ifdef DL_USE_CUDA
  if (x->device == DL_CUDA || tp->gpu) {
    h = dl__dnn_h(tp, op, x);
    dl__dnn_tangent_dev(op, x);
  } else
#endif
    dl__ops_host_only(tp, op, x);
  if (a->kernel_h <= 0 || a->kernel_w <= 0 || a->stride_h < 0 || a->stride_w < 0 || a->pad_h < 0 || a->pad_w < 0 ||
      a->out_h < 0 || a->out_w < 0)
    DL_PANIC(x->ctx, op, "bad window for x %s: kernel %dx%d (must be > 0), stride %dx%d, padding %dx%d, output "
             "%dx%d (must be >= 0)", DL_SHAPESTR(x), a->kernel_h, a->kernel_w, a->stride_h, a->stride_w, a->pad_h,
             a->pad_w, a->out_h, a->out_w);
  Ho = dl__unpool_axis(op, x, "height", x->shape[2], a->kernel_h, a->stride_h ? a->stride_h : a->kernel_h,
                       a->pad_h, a->out_h);
  Wo = dl__unpool_axis(op, x, "width", x->shape[3], a->kernel_w, a->stride_w ? a->stride_w : a->kernel_w,
                       a->pad_w, a->out_w);
  if (Ho * Wo > INT32_MAX || x->shape[2] * x->shape[3] > INT32_MAX)
    DL_PANIC(x->ctx, op, "x %s or the output planes %lldx%lld hold more than 2^31 elements", DL_SHAPESTR(x),
             (long long)Ho, (long long)Wo);
  planes = x->shape[0] * x->shape[1];
  per_in = x->shape[2] * x->shape[3];
  per_out = Ho * Wo;
  y = dl_tape_out(tp, op, x->dtype, DL_SHAPE(x->shape[0], x->shape[1], Ho, Wo));
  xc = dl__t_contig(tp, op, x);
  if (indices->dtype == DL_I32 && dl_tensor_is_contiguous(indices)) {
    ic = indices;
  } else { /* int64 or strided, on the host: an int32 copy */
    int64_t k;
    if (indices->device != DL_CPU)
      DL_PANIC(x->ctx, op, "indices %s on the device must be contiguous int32 (as a max pool's are)",
               DL_SHAPESTR(indices));
    ic = dl_tape_out(tp, op, DL_I32, 4, indices->shape);
    for (k = 0; k < ic->numel; k++) { /* outside [-1, plane): INT32_MIN, which the check below names */
      const double v = dl__get_at(indices, dl__offset_of_linear(indices, k));
      ((int32_t *)ic->data)[k] = v < -1 || v >= (double)per_out ? INT32_MIN : (int32_t)v;
    }
  }
  if (ic->device == DL_CPU) {
    int64_t k;
    const int32_t *ip = (const int32_t *)ic->data;
    for (k = 0; k < ic->numel; k++)
      if (ip[k] < -1 || ip[k] >= per_out) {
        const double v = dl__get_at(indices, dl__offset_of_linear(indices, k));
        DL_PANIC(x->ctx, op, "indices %s: element %lld is %.0f, outside the output plane [0, %lld) of %lldx%lld "
                 "and not -1 (x %s)", DL_SHAPESTR(indices), (long long)k, v, (long long)per_out, (long long)Ho,
                 (long long)Wo, DL_SHAPESTR(x));
      }
  }
  if (dl_tape_wants(tp, 1, &x)) own = dl_tape_out(tp, op, DL_I32, 4, y->shape);
#ifdef DL_USE_CUDA
  if (h) {
    if (y->numel)
      dl__gpu_ok(x, op, dlg_max_unpool2d_fwd(h, (int)x->dtype, planes, per_in, per_out, xc->data,
                                             (const int32_t *)ic->data, y->data, own ? (int32_t *)own->data : NULL));
    if (x->tangent) {
      dl_tensor *ty = dl_tape_tangent(tp, y), *tx = dl__t_contig(tp, op, x->tangent);
      if (y->numel)
        dl__gpu_ok(x, op, dlg_max_unpool2d_fwd(h, (int)x->dtype, planes, per_in, per_out, tx->data,
                                               (const int32_t *)ic->data, ty->data, NULL));
    }
  } else
#endif
  {
    if (y->numel)
      dl__unpool_run(tp->ctx, 0, x->dtype, planes, per_in, per_out, xc->data, (const int32_t *)ic->data, y->data,
                     own ? (int32_t *)own->data : NULL);
    if (x->tangent) {
      dl_tensor *ty = dl_tape_tangent(tp, y), *tx = dl__t_contig(tp, op, x->tangent);
      if (y->numel)
        dl__unpool_run(tp->ctx, 0, x->dtype, planes, per_in, per_out, tx->data, (const int32_t *)ic->data,
                       ty->data, NULL);
    }
  }
  if ((n = dl_tape_record(tp, op, dl__t_max_unpool2d_bw, y, x, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP_LINEAR; /* a scatter: linear in the gradient */
    n->i[0] = planes;
    n->i[1] = per_in;
    n->i[2] = per_out;
    n->saved[0] = ic;
    n->saved[1] = own;
  }
  return y;
}


#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_OPS_CONV_H */
