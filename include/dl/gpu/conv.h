/* dl/gpu/conv.h - the ABI of src_gpu/conv.cu: convolution (cuDNN) and
 * pooling on the device, for ops/conv.h. Included by dl/gpu/abi.h;
 * conventions as there (first argument the handle, DLG_OK / DLG_OOM /
 * DLG_ERR with the message in dlg_message, device pointers, work queued on
 * the handle's stream, dtype DLG_F32 or DLG_F64 for every floating operand
 * of a call).
 *
 * Every call matches the CPU code of the same op:
 * same formulas, statistics and sums accumulated in double (f32 too), the
 * same rules for ties and NaN in max pooling. Gradients ADD into the buffers
 * given (gx += ..., as the CPU backward rules do); a NULL gradient pointer
 * means "not wanted". All tensors are contiguous unless a stride is given.
 * Empty sizes (a zero dimension) are accepted and do nothing (but what the
 * CPU also does for them: bias written, zero sums added). */
#ifndef DL_GPU_CONV_H
#define DL_GPU_CONV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlg_handle dlg_handle; /* as in abi.h (a repeated typedef: C11) */

/* >>convolution (cuDNN) ------------------------------------------------------
 * One 2-d convolution, PyTorch's layout and ops/conv.h's dl__conv_geom:
 * x [N, C, H, W], w [O, C/G, kh, kw], b [O], y [N, O, Ho, Wo] with
 *   Ho = (H + 2 ph - dh (kh - 1) - 1) / sh + 1   (likewise Wo),
 * symmetric zero padding ph, pw, strides sh, sw >= 1, dilations dh, dw >= 1,
 * G groups (C and O divisible by G). conv1d is H = kh = 1, sh = dh = 1,
 * ph = 0. Cross-correlation (no kernel flip), as the CPU. Every size of x,
 * w and y must fit cuDNN's int (each tensor below 2^31 elements), else
 * DLG_ERR. f32 runs on FMA kernels only (no TF32 tensor cores), f64 on
 * cuDNN's default math. The descriptors and the algorithm of each pass are
 * chosen once per shape and kept in the handle (at most 64 shapes, the
 * least recently used replaced), so a training step in the steady state
 * asks cuDNN for nothing but the convolutions themselves. The algorithm:
 * by default the fastest cuDNN times (cudnnFind, once per shape) among
 * those computing the plain sum of products (no FFT, no Winograd), with a
 * workspace of at most DLG_CONV_WS_BUDGET bytes unless nothing smaller
 * runs; with dlg_set_deterministic(h, 1), cuDNN's heuristics (the _v7
 * queries), deterministic algorithms first, so that reruns are
 * bit-identical. */
#ifndef DLG_CONV_WS_BUDGET
#define DLG_CONV_WS_BUDGET ((size_t)256 << 20)
#endif
typedef struct dlg_conv2d {
  int64_t N, C, H, W, O, kh, kw, Ho, Wo;
  int64_t sh, sw, ph, pw, dh, dw, G;
  /* conv3d: x [N, C, D, H, W], w [O, C/G, kd, kh, kw], y [N, O, Do, Ho, Wo],
   * the depth's stride sd, padding pd, dilation dd (Do as Ho). kd == 0: a
   * 2-d convolution (the other depth fields unread); a depth of 1 with
   * kd = sd = dd = 1, pd = 0 runs as the 2-d one (cuDNN's 4-d descriptors),
   * any other through its Nd descriptors. */
  int64_t D, kd, Do, sd, pd, dd;
} dlg_conv2d;

/* y = conv(x, w) + b (acc == 0) or y += conv(x, w) + b (acc != 0); b may be
 * NULL. C == 0: y = b (or += b), zeros without b. */
int dlg_conv2d_fwd(dlg_handle *h, int dtype, const dlg_conv2d *g, const void *x, const void *w,
                   const void *b, void *y, int acc);
/* Gradients of y = conv(x, w) + b from gy [N, O, Ho, Wo], each added into
 * (NULL: skipped): gx [N, C, H, W] += conv_transpose(gy, w),
 * gw [O, C/G, kh, kw] += corr(x, gy), gb [O] += gy summed over N, Ho, Wo
 * (in double per channel, rounded once, as the CPU). */
int dlg_conv2d_bwd(dlg_handle *h, int dtype, const dlg_conv2d *g, const void *x, const void *w,
                   const void *gy, void *gx, void *gw, void *gb);

/* >>pooling (own kernels: the CPU's tie, NaN and divisor rules) --------------
 * x [N, C, H, W], y [N, C, Ho, Wo] (3-d: with the depth, see below; Ho, Wo given: ops/conv.h's
 * dl__pool_geom works them out); the window of (oh, ow) is the rows
 * oh sh - ph + j dh (j < kh) and columns ow sw - pw + l dw (l < kw) inside
 * the input (ph, pw: the padding at the top and left; phe, pwe at the
 * bottom and right). Average pooling has dh = dw = 1; excl: it divides by
 * the number of elements inside the input, else by those inside the padded
 * input [-ph, H + phe) x [-pw, W + pwe) (count_include_pad). Max pooling
 * pads with -inf; idx [N, C, Ho, Wo] (int32) holds ih W + iw of the first
 * maximum of the window in scan order (rows, then columns; a NaN wins, the
 * last NaN of the window; a window of -inf keeps its first element; a
 * window with no tap inside the input gives -inf and -1). */
typedef struct dlg_pool2d {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo;
  int excl;
  int64_t dh, dw, phe, pwe;
  /* 3-d pooling: x [N, C, D, H, W], y [N, C, Do, Ho, Wo], the depth's
   * kernel kd, stride sd, padding pd (front) and pde (back), dilation dd;
   * idx holds (id H + ih) W + iw, the scan runs depth, rows, columns.
   * kd == 0: 2-d pooling (the same as D = Do = kd = sd = dd = 1, pd = pde
   * = 0). */
  int64_t D, kd, sd, pd, pde, dd, Do;
} dlg_pool2d;

/* y = window max of x; idx (may be NULL) its position in the plane. */
int dlg_max_pool2d_fwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *x, void *y,
                       int32_t *idx);
/* gx [N, C, H, W] += gy [N, C, Ho, Wo] at idx; an element that is the max
 * of several windows sums their gy in (oh, ow) order, as the CPU
 * (deterministic: one thread per element of gx, no atomics). */
int dlg_max_pool2d_bwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *gy,
                       const int32_t *idx, void *gx);
/* ty [N, C, Ho, Wo] = tx [N, C, H, W] at idx (forward-mode tangent). */
int dlg_max_pool2d_tan(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *tx,
                       const int32_t *idx, void *ty);
/* y = window sum of x (in x's dtype, scan order) / count; 0 when count is 0. */
int dlg_avg_pool2d_fwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *x, void *y);
/* gx += gy / count over each window, summed per element in (oh, ow) order
 * (deterministic, no atomics). */
int dlg_avg_pool2d_bwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *gy, void *gx);

/* max_unpool2d over `planes` planes of n elements in, m out: y [planes, m]
 * = 0 but y[p][idx[p][k]] = x[p][k], the largest k of equal indices winning
 * (the CPU's last in scan order; atomicMax on own, so deterministic); an
 * index outside [0, m) writes nothing. own (NULL: the workspace holds it)
 * [planes, m] = the k written, -1 elsewhere. */
int dlg_max_unpool2d_fwd(dlg_handle *h, int dtype, int64_t planes, int64_t n, int64_t m, const void *x,
                         const int32_t *idx, void *y, int32_t *own);
/* gx [planes, n] += gy[p][idx[p][k]] where own[p][idx[p][k]] == k. */
int dlg_max_unpool2d_bwd(dlg_handle *h, int dtype, int64_t planes, int64_t n, int64_t m, const void *gy,
                         const int32_t *idx, const int32_t *own, void *gx);

#ifdef __cplusplus
}
#endif

#endif /* DL_GPU_CONV_H */
