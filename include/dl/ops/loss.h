/* dl/ops/loss.h - loss functions on the tape (see dl/ops.h for the op
 * conventions): mse, cross_entropy (fused log-softmax, label smoothing),
 * nll, bce_with_logits, huber, smooth_l1.
 *
 *   dl_tensor *loss = dl_t_cross_entropy(tp, logits, labels, 0.0, DL_REDUCE_MEAN);
 *   dl_backward(tp, loss, NULL);
 *
 * Each follows torch.nn.functional's function of the same name and its
 * `reduction` argument (dl_reduction): MEAN and SUM return a 0-d tensor,
 * NONE the per-element losses (per-row, [N], for cross_entropy and nll).
 * Outputs live in the tape's arena until dl_tape_rewind. Prediction and
 * target are f32 or f64 of one dtype and the same shape (no broadcasting:
 * a mismatch panics naming both shapes); labels are i64 or i32 and every
 * label must lie in [0, C) (ignore_index is not supported). Inputs may be
 * strided views (they are copied to the arena when they are not contiguous).
 * A float target may require a gradient too.
 *
 * Sums run per fixed block of elements (rows for cross_entropy) and the
 * block sums are added in order, in double, so a loss does not depend on
 * the thread count; blocks run in parallel (OpenMP) when the work reaches
 * dl_ctx_parallel_threshold. f32 element-wise losses are computed per
 * element in float, like PyTorch; cross_entropy's per-row sums (of e^z and
 * of z) are in double; every reduction over elements or rows is in double.
 *
 * GPU (DL_USE_CUDA, device tensors on a device tape): the same formulas in
 * dl/gpu/loss.h's kernels, the sums in double in the kernels' fixed order.
 * Labels are read and checked on the host, with the CPU's messages (a
 * device label tensor is copied there first, which waits for the device);
 * the kernels get the checked labels.
 */
#ifndef DL_OPS_LOSS_H
#define DL_OPS_LOSS_H

#include "core.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY /* the library's code (nvcc sees only the scalar math) */

/* torch's reduction='mean' / 'sum' / 'none'. */
typedef enum dl_reduction { DL_REDUCE_MEAN = 0, DL_REDUCE_SUM, DL_REDUCE_NONE } dl_reduction;

/* >>block runner ----------------------------------------------------------- */

/* Work on [lo, hi) of a loss's elements (or rows); returns the block's sum. */
typedef double (*dl__loss_blk_fn)(const void *args, int64_t lo, int64_t hi);

/* Runs fn over [0, n) in blocks of `block` (a partition that does not depend
 * on the thread count), in parallel when `work` reaches the ctx's threshold;
 * with want_sum, returns the block sums added in block order. */
DL_API double dl__loss_run(dl_tape *tp, const char *op, dl__loss_blk_fn fn, const void *args,
                           int64_t n, int64_t block, int64_t work, int want_sum) {
  dl_ctx *ctx = tp->ctx;
  const int64_t nb = n > 0 ? (n + block - 1) / block : 0;
  double total = 0, *part = NULL;
  int64_t b;
  if (nb == 0) return 0;
  if (nb == 1) {
    const dl_fpmode fm = dl_ctx_fp_enter(ctx);
    total = fn(args, 0, n);
    dl_ftz_leave(fm);
    return total;
  }
  if (want_sum) part = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)nb);
  DL_PARALLEL_FOR(ctx, work, nb, k, {
    const int64_t lo = k * block, hi = lo + block < n ? lo + block : n;
    const double v = fn(args, lo, hi);
    if (part) part[k] = v;
  });
  if (part)
    for (b = 0; b < nb; b++) total += part[b];
  return total;
}

#define DL__LOSS_BLOCK 4096

/* Loop hints: with gcc and OpenMP, `omp simd` makes -O2 vectorise the
 * per-row and per-element loops (reductions then add in vector lanes: the
 * result depends on the build, never on the thread count). clang vectorises
 * without being told. */
#if defined(__GNUC__) && !defined(__clang__) && defined(_OPENMP)
#define DL__LSIMD _Pragma("omp simd")
#define DL__LSIMD_SUM(v) DL__LPRAGMA(omp simd reduction(+ : v))
#define DL__LSIMD_MAX(v) DL__LPRAGMA(omp simd reduction(max : v))
#define DL__LPRAGMA(x) _Pragma(#x)
#else
#define DL__LSIMD
#define DL__LSIMD_SUM(v)
#define DL__LSIMD_MAX(v)
#endif

/* Scalar math by the argument's type (float or double), vectorisable. */
#ifdef __cplusplus
DL__INL float dl__lexp(float v) { return dl_vexp_f32(v); }
DL__INL double dl__lexp(double v) { return dl_vexp_f64(v); }
DL__INL float dl__llog(float v) { return dl_vlog_f32(v); }
DL__INL double dl__llog(double v) { return dl_vlog_f64(v); }
DL__INL float dl__llog1p(float v) { return dl_vlog1p_f32(v); }
DL__INL double dl__llog1p(double v) { return dl_vlog1p_f64(v); }
DL__INL float dl__lsig(float v) { return dl_vsigmoid_f32(v); }
DL__INL double dl__lsig(double v) { return dl_vsigmoid_f64(v); }
#define DL__LEXP(v) dl__lexp(v)
#define DL__LLOG(v) dl__llog(v)
#define DL__LLOG1P(v) dl__llog1p(v)
#define DL__LSIG(v) dl__lsig(v)
#else
#define DL__LEXP(v) _Generic((v), float: dl_vexp_f32, default: dl_vexp_f64)(v)
#define DL__LLOG(v) _Generic((v), float: dl_vlog_f32, default: dl_vlog_f64)(v)
#define DL__LLOG1P(v) _Generic((v), float: dl_vlog1p_f32, default: dl_vlog1p_f64)(v)
#define DL__LSIG(v) _Generic((v), float: dl_vsigmoid_f32, default: dl_vsigmoid_f64)(v)
#endif

DL_API void dl__loss_check_red(const char *op, const dl_tensor *x, dl_reduction r) {
  if ((int)r < (int)DL_REDUCE_MEAN || (int)r > (int)DL_REDUCE_NONE)
    DL_PANIC(x->ctx, op, "unknown reduction %d for %s (DL_REDUCE_MEAN, _SUM or _NONE)", (int)r,
             DL_SHAPESTR(x));
}
/* The output: the per-element shape for NONE, else 0-d. */
DL_API dl_tensor *dl__loss_out(dl_tape *tp, const char *op, dl_dtype dt, dl_reduction r, int ndim,
                               const int64_t *shape) {
  return r == DL_REDUCE_NONE ? dl_tape_out(tp, op, dt, ndim, shape) : dl_tape_out(tp, op, dt, 0, NULL);
}

/* >>element-wise losses ---------------------------------------------------- */

/* Kinds and modes of the element-wise kernel. */
enum { DL__LK_MSE, DL__LK_BCE, DL__LK_HUBER, DL__LK_SL1, DL__LK_L1 };
enum { DL__LM_NONE, DL__LM_SUM, DL__LM_TAN, DL__LM_BWD };

typedef struct dl__lew {
  int kind, mode;
  dl_dtype dt;
  const void *a, *b;      /* prediction (logits), target: contiguous */
  const void *ta, *tb;    /* their tangents (TAN) or NULL */
  void *out;              /* NONE / TAN per element, or NULL to sum */
  const void *gy;         /* BWD: upstream gradient, element i at gy[i * gstride] */
  double gscale;          /* BWD: 1/n for MEAN */
  int64_t gstride;
  void *ga, *gb;          /* BWD: gradients to accumulate into, or NULL */
  double p;               /* delta / beta */
} dl__lew;

/* Per element, with x_ = a, t_ = b, d_ = a - b, z_ = |d_|, p_ the parameter:
 * the loss L, its derivatives DA (by a) and DB (by b). */
#define DL__L_MSE (d_ * d_)
#define DL__DA_MSE (2 * d_)
#define DL__DB_MSE (-2 * d_)
#define DL__L_BCE ((x_ > 0 ? x_ : 0) - x_ * t_ + DL__LLOG1P(DL__LEXP(x_ < 0 ? x_ : -x_)))
#define DL__DA_BCE (DL__LSIG(x_) - t_)
#define DL__DB_BCE (-x_)
#define DL__L_HUBER (z_ < p_ ? 0.5f * d_ * d_ : p_ * (z_ - 0.5f * p_))
#define DL__DA_HUBER (d_ < -p_ ? -p_ : d_ > p_ ? p_ : d_)
#define DL__DB_HUBER (-(DL__DA_HUBER))
#define DL__L_SL1 (z_ < p_ ? 0.5f * d_ * d_ / p_ : z_ - 0.5f * p_)
#define DL__DA_SL1 ((d_ < -p_ ? -p_ : d_ > p_ ? p_ : d_) / p_)
#define DL__DB_SL1 (-(DL__DA_SL1))
#define DL__L_L1 (z_)
#define DL__DA_L1 ((d_ > 0) - (d_ < 0))
#define DL__DB_L1 ((d_ < 0) - (d_ > 0))

#define DL__LEW_VARS(T)                                                                \
  const T x_ = a[i], t_ = b[i], d_ = x_ - t_, z_ = d_ < 0 ? -d_ : d_;                  \
  (void)t_;                                                                            \
  (void)z_;

#define DL__LEW_CASE(T, L, DA, DB)                                                     \
  switch (A->mode) {                                                                   \
    case DL__LM_NONE: {                                                                \
      T *o_ = (T *)A->out;                                                             \
      DL__LSIMD                                                                        \
      for (i = lo; i < hi; i++) {                                                      \
        DL__LEW_VARS(T)                                                                \
        o_[i] = (T)(L);                                                                \
      }                                                                                \
    } break;                                                                           \
    case DL__LM_SUM:                                                                   \
      DL__LSIMD_SUM(acc)                                                               \
      for (i = lo; i < hi; i++) {                                                      \
        DL__LEW_VARS(T)                                                                \
        acc += (double)(T)(L);                                                         \
      }                                                                                \
      break;                                                                           \
    case DL__LM_TAN: {                                                                 \
      const T *ta_ = (const T *)A->ta, *tb_ = (const T *)A->tb;                        \
      T *o_ = (T *)A->out;                                                             \
      for (i = lo; i < hi; i++) {                                                      \
        DL__LEW_VARS(T)                                                                \
        T v_ = 0;                                                                      \
        if (ta_) v_ += (T)(DA) * ta_[i];                                               \
        if (tb_) v_ += (T)(DB) * tb_[i];                                               \
        if (o_) o_[i] = v_;                                                            \
        else acc += (double)v_;                                                        \
      }                                                                                \
    } break;                                                                           \
    default: {                                                                         \
      const T *gy_ = (const T *)A->gy, gsc_ = (T)A->gscale;                            \
      const int64_t gs_ = A->gstride;                                                  \
      T *ga_ = (T *)A->ga, *gb_ = (T *)A->gb;                                          \
      if (ga_ && gb_) {                                                                \
        DL__LSIMD                                                                      \
        for (i = lo; i < hi; i++) {                                                    \
          DL__LEW_VARS(T)                                                              \
          const T g_ = gy_[i * gs_] * gsc_;                                            \
          ga_[i] += (T)(DA) * g_;                                                      \
          gb_[i] += (T)(DB) * g_;                                                      \
        }                                                                              \
      } else if (ga_) {                                                                \
        DL__LSIMD                                                                      \
        for (i = lo; i < hi; i++) {                                                    \
          DL__LEW_VARS(T)                                                              \
          ga_[i] += (T)(DA) * (gy_[i * gs_] * gsc_);                                   \
        }                                                                              \
      } else {                                                                         \
        DL__LSIMD                                                                      \
        for (i = lo; i < hi; i++) {                                                    \
          DL__LEW_VARS(T)                                                              \
          gb_[i] += (T)(DB) * (gy_[i * gs_] * gsc_);                                   \
        }                                                                              \
      }                                                                                \
    } break;                                                                           \
  }

#define DL__LEW_KERNEL(T, SFX)                                                         \
  DL_API double dl__lew_##SFX(const dl__lew *A, int64_t lo, int64_t hi) {              \
    const T *a = (const T *)A->a, *b = (const T *)A->b;                                \
    const T p_ = (T)A->p;                                                              \
    double acc = 0;                                                                    \
    int64_t i;                                                                         \
    (void)p_;                                                                          \
    switch (A->kind) {                                                                 \
      case DL__LK_MSE: DL__LEW_CASE(T, DL__L_MSE, DL__DA_MSE, DL__DB_MSE) break;       \
      case DL__LK_BCE: DL__LEW_CASE(T, DL__L_BCE, DL__DA_BCE, DL__DB_BCE) break;       \
      case DL__LK_HUBER: DL__LEW_CASE(T, DL__L_HUBER, DL__DA_HUBER, DL__DB_HUBER) break; \
      case DL__LK_SL1: DL__LEW_CASE(T, DL__L_SL1, DL__DA_SL1, DL__DB_SL1) break;       \
      default: DL__LEW_CASE(T, DL__L_L1, DL__DA_L1, DL__DB_L1) break;                  \
    }                                                                                  \
    return acc;                                                                        \
  }
DL__LEW_KERNEL(float, f32)
DL__LEW_KERNEL(double, f64)

DL_API double dl__lew_blk(const void *args, int64_t lo, int64_t hi) {
  const dl__lew *A = (const dl__lew *)args;
  return A->dt == DL_F32 ? dl__lew_f32(A, lo, hi) : dl__lew_f64(A, lo, hi);
}

/* dl_hvp's rule of the element-wise losses: the rule on the gradient's
 * tangent (A, as the backward set it, with gy's tangent), then per element
 * the Hessian of the loss in (a, b) times (ta, tb), scaled as the gradient:
 *   mse    [[2, -2], [-2, 2]]
 *   bce    [[s(1 - s), -1], [-1, 0]]                 (a the logits, s = sigmoid(a))
 *   huber  [[1, -1], [-1, 1]] where |a - b| < delta, 0 elsewhere
 *   smooth l1  the same over beta;  l1  0 (kinks aside) */
DL_API void dl__loss_ew_hvp(dl_tape *tp, dl_node *n, dl__lew *A, dl_tensor *ga, dl_tensor *gb) {
  const dl_tensor *a = n->saved[0], *b = n->saved[1], *gy = n->out->grad;
  const dl_tensor *ta = n->in[0]->tangent, *tb = n->in[1]->tangent;
  const double p = n->p[0];
  int64_t i;
  A->gy = gy->tangent->data;
  A->ga = ga ? ga->tangent->data : NULL;
  A->gb = gb ? gb->tangent->data : NULL;
  dl__loss_run(tp, n->op, dl__lew_blk, A, a->numel, DL__LOSS_BLOCK, a->numel, 0);
  if (!ta && !tb) return;
  for (i = 0; i < a->numel; i++) {
    const double av = dl__get_at(a, i), bv = dl__get_at(b, i), d = av - bv;
    const double tav = ta ? dl__get_at(ta, dl__offset_of_linear(ta, i)) : 0.0;
    const double tbv = tb ? dl__get_at(tb, dl__offset_of_linear(tb, i)) : 0.0;
    const double g = dl__get_at(gy, i * A->gstride) * A->gscale;
    double haa = 0, hab = 0, hbb = 0;
    switch (A->kind) {
      case DL__LK_MSE: haa = hbb = 2; hab = -2; break;
      case DL__LK_BCE: {
        const double sg = 1 / (1 + exp(-av));
        haa = sg * (1 - sg);
        hab = -1;
        break;
      }
      case DL__LK_HUBER: if (fabs(d) < p) { haa = hbb = 1; hab = -1; } break;
      case DL__LK_SL1: if (fabs(d) < p) { haa = hbb = 1 / p; hab = -1 / p; } break;
      default: break; /* l1 */
    }
    if (ga) {
      const double v = g * (haa * tav + hab * tbv);
      if (ga->dtype == DL_F32) ((float *)ga->tangent->data)[i] += (float)v;
      else ((double *)ga->tangent->data)[i] += v;
    }
    if (gb) {
      const double v = g * (hab * tav + hbb * tbv);
      if (gb->dtype == DL_F32) ((float *)gb->tangent->data)[i] += (float)v;
      else ((double *)gb->tangent->data)[i] += v;
    }
  }
}
DL_API void dl__loss_ew_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *ga = dl_tape_grad(tp, n->in[0]), *gb = dl_tape_grad(tp, n->in[1]);
  const dl_tensor *gy = n->out->grad, *a = n->saved[0];
  const dl_reduction r = (dl_reduction)n->i[0];
  dl__lew A;
  if (!ga && !gb) return;
#ifdef DL_USE_CUDA
  if (a->device == DL_CUDA) {
    dl__gpu_ok(a, n->op, dlg_loss_ew_backward(dl__gpu_h(a, n->op), (int)a->dtype, (int)n->i[1], a->numel, a->data,
                                              n->saved[1]->data, n->p[0], gy->data, r == DL_REDUCE_NONE ? 1 : 0,
                                              r == DL_REDUCE_MEAN ? 1.0 / (double)a->numel : 1.0,
                                              ga ? ga->data : NULL, gb ? gb->data : NULL));
    return;
  }
#endif
  memset(&A, 0, sizeof A);
  A.kind = (int)n->i[1];
  A.mode = DL__LM_BWD;
  A.dt = a->dtype;
  A.a = a->data;
  A.b = n->saved[1]->data;
  A.p = n->p[0];
  A.gy = gy->data;
  A.gstride = r == DL_REDUCE_NONE ? 1 : 0;
  A.gscale = r == DL_REDUCE_MEAN ? 1.0 / (double)a->numel : 1.0;
  A.ga = ga ? ga->data : NULL;
  A.gb = gb ? gb->data : NULL;
  dl__loss_run(tp, n->op, dl__lew_blk, &A, a->numel, DL__LOSS_BLOCK, a->numel, 0);
  if (tp->hvp) dl__loss_ew_hvp(tp, n, &A, ga, gb);
}

#ifdef DL_USE_CUDA
/* The kernels' kinds are the CPU's (dl/gpu/loss.h). */
DL__STATIC_ASSERT((int)DL__LK_MSE == (int)DLG_LOSS_MSE && (int)DL__LK_BCE == (int)DLG_LOSS_BCE &&
                   (int)DL__LK_HUBER == (int)DLG_LOSS_HUBER && (int)DL__LK_SL1 == (int)DLG_LOSS_SL1 &&
                   (int)DL__LK_L1 == (int)DLG_LOSS_L1,
               "dl: loss kinds differ between loss.h and gpu/loss.h");
/* dl__loss_ew on the device (checks done): the same outputs and node. */
DL_API dl_tensor *dl__loss_ew_gpu(dl_tape *tp, const char *op, int kind, dl_tensor *a, dl_tensor *b, double p,
                                  dl_reduction r) {
  dl_tensor *ac, *bc, *y;
  dl_node *n;
  const int64_t N = a->numel;
  const int none = r == DL_REDUCE_NONE;
  const double div = r == DL_REDUCE_MEAN ? (double)N : 1.0;
  dlg_handle *h = dl__gpu_h(a, op);
  y = dl__loss_out(tp, op, a->dtype, r, a->ndim, a->shape);
  dl__ops_same_device(op, a, y); /* a device tensor on a host tape */
  ac = dl__t_contig(tp, op, a);
  bc = dl__t_contig(tp, op, b);
  dl__gpu_ok(a, op, dlg_loss_ew(h, (int)a->dtype, kind, N, ac->data, bc->data, p, none ? y->data : NULL,
                                none ? NULL : y->data, div));
  if (a->tangent || b->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y), *ta = NULL, *tb = NULL;
    if (a->tangent) { dl__ops_same_device(op, a, a->tangent); ta = dl__t_contig(tp, op, a->tangent); }
    if (b->tangent) { dl__ops_same_device(op, a, b->tangent); tb = dl__t_contig(tp, op, b->tangent); }
    dl__gpu_ok(a, op, dlg_loss_ew_tangent(h, (int)a->dtype, kind, N, ac->data, bc->data, p, ta ? ta->data : NULL,
                                          tb ? tb->data : NULL, none ? ty->data : NULL, none ? NULL : ty->data, div));
  }
  if ((n = dl_tape_record(tp, op, dl__loss_ew_bw, y, a, b, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP;
    n->i[0] = (int64_t)r;
    n->i[1] = kind;
    n->p[0] = p;
    n->saved[0] = ac;
    n->saved[1] = bc;
  }
  return y;
}
#endif

/* The element-wise losses: a (prediction or logits) and b (target), same
 * shape and dtype; parameter p (delta, beta). */
DL_API dl_tensor *dl__loss_ew(dl_tape *tp, const char *op, int kind, dl_tensor *a, dl_tensor *b,
                              double p, dl_reduction r) {
  dl_tensor *ac, *bc, *y;
  dl_node *n;
  dl__lew A;
  double s;
  const int64_t N = a->numel;
  dl__ops_same_float(op, a, b);
  if (!dl_tensor_same_shape(a, b))
    DL_PANIC(a->ctx, op, "shape mismatch: %s and %s (the shapes must be equal; no broadcasting)",
             DL_SHAPESTR(a), DL_SHAPESTR(b));
  dl__loss_check_red(op, a, r);
#ifdef DL_USE_CUDA
  if (a->device == DL_CUDA) return dl__loss_ew_gpu(tp, op, kind, a, b, p, r);
#endif
  dl__ops_host_only(tp, op, a); /* host tensors on a device tape */
  ac = dl__t_contig(tp, op, a);
  bc = dl__t_contig(tp, op, b);
  y = dl__loss_out(tp, op, a->dtype, r, a->ndim, a->shape);
  memset(&A, 0, sizeof A);
  A.kind = kind;
  A.dt = a->dtype;
  A.a = ac->data;
  A.b = bc->data;
  A.p = p;
  if (r == DL_REDUCE_NONE) {
    A.mode = DL__LM_NONE;
    A.out = y->data;
    dl__loss_run(tp, op, dl__lew_blk, &A, N, DL__LOSS_BLOCK, N, 0);
  } else {
    A.mode = DL__LM_SUM;
    s = dl__loss_run(tp, op, dl__lew_blk, &A, N, DL__LOSS_BLOCK, N, 1);
    dl__set_at(y, 0, r == DL_REDUCE_MEAN ? s / (double)N : s);
  }
  if (a->tangent || b->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    A.mode = DL__LM_TAN;
    A.ta = a->tangent ? dl__t_contig(tp, op, a->tangent)->data : NULL;
    A.tb = b->tangent ? dl__t_contig(tp, op, b->tangent)->data : NULL;
    A.out = r == DL_REDUCE_NONE ? ty->data : NULL;
    s = dl__loss_run(tp, op, dl__lew_blk, &A, N, DL__LOSS_BLOCK, N, r != DL_REDUCE_NONE);
    if (r != DL_REDUCE_NONE) dl__set_at(ty, 0, r == DL_REDUCE_MEAN ? s / (double)N : s);
  }
  if ((n = dl_tape_record(tp, op, dl__loss_ew_bw, y, a, b, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP;
    n->i[0] = (int64_t)r;
    n->i[1] = kind;
    n->p[0] = p;
    n->saved[0] = ac;
    n->saved[1] = bc;
  }
  return y;
}

/* Mean squared error (torch.nn.functional.mse_loss): (pred - target)^2 per
 * element, then reduced. pred and target: same shape and dtype, either may
 * require a gradient. Returns a 0-d tensor (MEAN, SUM) or pred's shape (NONE),
 * in the tape's arena. */
DL_API dl_tensor *dl_t_mse(dl_tape *tp, dl_tensor *pred, dl_tensor *target, dl_reduction r) {
  return dl__loss_ew(tp, "dl_t_mse", DL__LK_MSE, pred, target, 0.0, r);
}

/* Binary cross-entropy on logits (torch's binary_cross_entropy_with_logits
 * without weight / pos_weight), in the stable form
 * max(x, 0) - x t + log1p(exp(-|x|)). target: probabilities in [0, 1], same
 * shape and dtype as logits; its gradient (when it requires one) is -x.
 * Gradient by logits: sigmoid(x) - t. 0-d (MEAN, SUM) or logits' shape (NONE),
 * in the tape's arena. */
DL_API dl_tensor *dl_t_bce_with_logits(dl_tape *tp, dl_tensor *logits, dl_tensor *target,
                                       dl_reduction r) {
  return dl__loss_ew(tp, "dl_t_bce_with_logits", DL__LK_BCE, logits, target, 0.0, r);
}

/* Huber loss (torch.nn.functional.huber_loss), z = |pred - target|:
 * 0.5 z^2 where z < delta, else delta (z - 0.5 delta); delta > 0 (panics
 * otherwise). Shapes and result as dl_t_mse. */
DL_API dl_tensor *dl_t_huber(dl_tape *tp, dl_tensor *pred, dl_tensor *target, double delta,
                             dl_reduction r) {
  if (!(delta > 0))
    DL_PANIC(pred->ctx, "dl_t_huber", "delta must be > 0, not %g (pred %s, target %s)", delta,
             DL_SHAPESTR(pred), DL_SHAPESTR(target));
  return dl__loss_ew(tp, "dl_t_huber", DL__LK_HUBER, pred, target, delta, r);
}

/* Smooth L1 loss (torch.nn.functional.smooth_l1_loss), z = |pred - target|:
 * 0.5 z^2 / beta where z < beta, else z - 0.5 beta; beta = 0 is the L1 loss
 * |pred - target| (gradient sign(d), 0 at d = 0); beta < 0 panics. Shapes
 * and result as dl_t_mse. */
DL_API dl_tensor *dl_t_smooth_l1(dl_tape *tp, dl_tensor *pred, dl_tensor *target, double beta,
                                 dl_reduction r) {
  if (!(beta >= 0))
    DL_PANIC(pred->ctx, "dl_t_smooth_l1", "beta must be >= 0, not %g (pred %s, target %s)", beta,
             DL_SHAPESTR(pred), DL_SHAPESTR(target));
  return dl__loss_ew(tp, "dl_t_smooth_l1", beta == 0 ? DL__LK_L1 : DL__LK_SL1, pred, target, beta,
                     r);
}

/* >>labels ----------------------------------------------------------------- */

/* x [N, C] float and labels [N] i64 / i32 with every label in [0, C):
 * returns the labels as a contiguous i64 tensor in the arena; panics naming
 * both shapes (or the bad label, its position and C) otherwise. */
DL_API dl_tensor *dl__loss_labels(dl_tape *tp, const char *op, const dl_tensor *x,
                                  const dl_tensor *labels) {
  dl_tensor *lab;
  int64_t i, N, C, *l;
  if (x->dtype != DL_F32 && x->dtype != DL_F64)
    DL_PANIC(x->ctx, op, "input must be f32 or f64: input %s, labels %s", DL_SHAPESTR(x),
             DL_SHAPESTR(labels));
  if (labels->dtype != DL_I64 && labels->dtype != DL_I32)
    DL_PANIC(x->ctx, op, "labels must be i64 or i32: input %s, labels %s", DL_SHAPESTR(x),
             DL_SHAPESTR(labels));
  if (x->ndim != 2 || labels->ndim != 1 || labels->shape[0] != x->shape[0])
    DL_PANIC(x->ctx, op, "shape mismatch: input %s and labels %s (want input [N, C], labels [N])",
             DL_SHAPESTR(x), DL_SHAPESTR(labels));
  N = x->shape[0];
  C = x->shape[1];
#ifdef DL_USE_CUDA
  if (labels->device == DL_CUDA || x->device == DL_CUDA || tp->gpu) {
    /* device labels are read on the host (one copy, which waits for the
     * device); the checked labels stay in host memory (the tape's host
     * arena): the kernels take them from there */
    if (labels->device == DL_CUDA) {
      const dl_tensor *lc = dl_tensor_is_contiguous(labels) ? labels : dl__t_contig(tp, op, (dl_tensor *)labels);
      dl_tensor *hl = dl_tensor_new(&tp->arena, labels->dtype, 1, &N);
      if (!hl) dl__tape_nomem(tp, op, "the labels", (size_t)N * dl_dtype_size(labels->dtype));
      dl_tensor_copy(hl, lc);
      labels = hl;
    }
    lab = dl_tensor_new(&tp->arena, DL_I64, 1, &N);
    if (!lab) dl__tape_nomem(tp, op, "the labels", (size_t)N * sizeof(int64_t));
  } else
#endif
  lab = dl_tape_out(tp, op, DL_I64, 1, &N);
  l = (int64_t *)lab->data;
  for (i = 0; i < N; i++) {
    const int64_t off = i * labels->strides[0];
    const int64_t v = labels->dtype == DL_I64 ? ((const int64_t *)labels->data)[off]
                                              : (int64_t)((const int32_t *)labels->data)[off];
    if (v < 0 || v >= C)
      DL_PANIC(x->ctx, op, "label %lld at position %lld is out of range: %lld classes (valid 0..%lld); "
               "input %s, labels %s", (long long)v, (long long)i, (long long)C, (long long)(C - 1),
               DL_SHAPESTR(x), DL_SHAPESTR(labels));
    l[i] = v;
  }
  return lab;
}

/* >>cross entropy ---------------------------------------------------------- */

enum { DL__CE_FWD, DL__CE_TAN, DL__CE_BWD };

typedef struct dl__ce {
  int mode;
  dl_dtype dt;
  int64_t C;
  const int64_t *lab;     /* [N] labels */
  double eps;             /* label smoothing */
  const void *x;          /* FWD: logits [N, C], contiguous */
  void *prob;             /* FWD: softmax out [N, C]; TAN, BWD: softmax in */
  void *loss;             /* FWD, TAN: per-row values [N] or NULL */
  const void *t;          /* TAN: tangent of the logits [N, C], contiguous */
  const void *gy;         /* BWD: upstream gradient, row i at gy[i * gstride] */
  double gscale;          /* BWD: 1/N for MEAN */
  int64_t gstride;
  void *gx;               /* BWD: gradient of the logits [N, C] */
} dl__ce;

/* Rows [r0, r1). FWD: per row, with m the row max and z = x - m,
 *   loss = log(sum e^z) - (1 - eps) z_label - eps / C sum z
 * (torch's (1 - eps) nll + eps / C sum(-log p)); e^z / sum e^z saved as the
 * softmax (prob doubles as the scratch of exp). TAN: sum_c (p_c - s_c) t_c with
 * s the smoothed one-hot.
 * BWD: g += (p - s) gy. Returns the sum of the rows' values. */
#define DL__CE_KERNEL(T, SFX)                                                          \
  DL_API double dl__ce_##SFX(const dl__ce *A, int64_t r0, int64_t r1) {                \
    const int64_t C = A->C;                                                            \
    const int64_t *lab = A->lab;                                                       \
    const T keep = (T)(1.0 - A->eps), eoc = (T)(A->eps / (double)C);                   \
    T *out = (T *)A->loss, *prob = (T *)A->prob;                                       \
    double acc = 0;                                                                    \
    int64_t i, c;                                                                      \
    if (A->mode == DL__CE_FWD) {                                                       \
      /* chunks of rows: z = x - max per row, then exp over the whole chunk  \
       * in one long (vectorisable) loop, then per-row sums */                   \
      const T *x = (const T *)A->x;                                                    \
      const int smooth = A->eps != 0;                                                  \
      const double epc = A->eps / (double)C;                                           \
      const int64_t rows = C >= 2048 ? 1 : C > 32 ? 2048 / C : 64;                     \
      double part[64];                                                                 \
      int64_t i0, i1, j;                                                               \
      for (i0 = r0; i0 < r1; i0 = i1) {                                                \
        i1 = i0 + rows < r1 ? i0 + rows : r1;                                          \
        for (i = i0; i < i1; i++) {                                                    \
          const T *xr = x + i * C;                                                     \
          T *pr = prob + i * C;                                                        \
          T m = xr[0];                                                                 \
          double sz = 0;                                                               \
          DL__LSIMD_MAX(m)                                                             \
          for (c = 1; c < C; c++) m = xr[c] > m ? xr[c] : m;                           \
          DL__LSIMD_SUM(sz)                                                            \
          for (c = 0; c < C; c++) {                                                    \
            const T z = xr[c] - m;                                                     \
            pr[c] = z;                                                                 \
            sz += (double)z;                                                           \
          }                                                                            \
          part[i - i0] = -(1.0 - A->eps) * (double)pr[lab[i]] - (smooth ? epc * sz : 0); \
        }                                                                              \
        {                                                                              \
          T *pc = prob + i0 * C;                                                       \
          const int64_t nc = (i1 - i0) * C;                                            \
          DL__LSIMD                                                                    \
          for (j = 0; j < nc; j++) pc[j] = DL__LEXP(pc[j]);                            \
        }                                                                              \
        for (i = i0; i < i1; i++) {                                                    \
          T *pr = prob + i * C;                                                        \
          double s = 0, li, inv;                                                       \
          DL__LSIMD_SUM(s)                                                             \
          for (c = 0; c < C; c++) s += (double)pr[c];                                  \
          li = DL__LLOG(s) + part[i - i0];                                             \
          inv = 1 / s;                                                                 \
          DL__LSIMD                                                                    \
          for (c = 0; c < C; c++) pr[c] = (T)((double)pr[c] * inv);                    \
          if (out) out[i] = (T)li;                                                     \
          acc += (double)(T)li;                                                        \
        }                                                                              \
      }                                                                                \
    } else if (A->mode == DL__CE_TAN) {                                                \
      const T *t = (const T *)A->t;                                                    \
      for (i = r0; i < r1; i++) {                                                      \
        const T *pr = prob + i * C, *tr = t + i * C;                                   \
        T v = 0;                                                                       \
        DL__LSIMD_SUM(v)                                                               \
        for (c = 0; c < C; c++) v += (pr[c] - eoc) * tr[c];                            \
        v -= keep * tr[lab[i]];                                                        \
        if (out) out[i] = v;                                                           \
        acc += (double)v;                                                              \
      }                                                                                \
    } else {                                                                           \
      const T *gy = (const T *)A->gy, gsc = (T)A->gscale;                              \
      T *gx = (T *)A->gx;                                                              \
      for (i = r0; i < r1; i++) {                                                      \
        const T *pr = prob + i * C;                                                    \
        T *gr = gx + i * C;                                                            \
        const T g = gy[i * A->gstride] * gsc;                                          \
        DL__LSIMD                                                                      \
        for (c = 0; c < C; c++) gr[c] += (pr[c] - eoc) * g;                            \
        gr[lab[i]] -= keep * g;                                                        \
      }                                                                                \
    }                                                                                  \
    return acc;                                                                        \
  }
DL__CE_KERNEL(float, f32)
DL__CE_KERNEL(double, f64)

DL_API double dl__ce_blk(const void *args, int64_t lo, int64_t hi) {
  const dl__ce *A = (const dl__ce *)args;
  return A->dt == DL_F32 ? dl__ce_f32(A, lo, hi) : dl__ce_f64(A, lo, hi);
}
/* Rows per block: about DL__LOSS_BLOCK elements. */
DL_API int64_t dl__ce_rows_per_block(int64_t C) { return C > 0 && C < DL__LOSS_BLOCK ? DL__LOSS_BLOCK / C : 1; }

DL_API void dl__t_cross_entropy_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]), *prob = n->saved[0];
  const dl_tensor *gy = n->out->grad;
  const dl_reduction r = (dl_reduction)n->i[0];
  const int64_t N = prob->shape[0], C = prob->shape[1];
  dl__ce A;
  if (!gx) return;
#ifdef DL_USE_CUDA
  if (gx->device == DL_CUDA) { /* the labels are host memory (dl__loss_labels) */
    dl__gpu_ok(gx, n->op, dlg_cross_entropy_backward(dl__gpu_h(gx, n->op), (int)gx->dtype, N, C, prob->data,
                                                     (const int64_t *)n->saved[1]->data, n->p[0], gy->data,
                                                     r == DL_REDUCE_NONE ? 1 : 0,
                                                     r == DL_REDUCE_MEAN ? 1.0 / (double)N : 1.0, gx->data));
    return;
  }
#endif
  memset(&A, 0, sizeof A);
  A.mode = DL__CE_BWD;
  A.dt = prob->dtype;
  A.C = C;
  A.lab = (const int64_t *)n->saved[1]->data;
  A.eps = n->p[0];
  A.prob = prob->data;
  A.gy = gy->data;
  A.gstride = r == DL_REDUCE_NONE ? 1 : 0;
  A.gscale = r == DL_REDUCE_MEAN ? 1.0 / (double)N : 1.0;
  A.gx = gx->data;
  dl__loss_run(tp, n->op, dl__ce_blk, &A, N, dl__ce_rows_per_block(C), N * C, 0);
  if (tp->hvp) { /* d(gx) = (p - target) d(g) + g p (t - <p, t>) per row, t the logits' tangent */
    const dl_tensor *tz = n->in[0]->tangent;
    int64_t i, c;
    A.gy = gy->tangent->data;
    A.gx = gx->tangent->data;
    dl__loss_run(tp, n->op, dl__ce_blk, &A, N, dl__ce_rows_per_block(C), N * C, 0);
    if (tz)
      for (i = 0; i < N; i++) {
        const double g = dl__get_at(gy, i * A.gstride) * A.gscale;
        double dot = 0;
        for (c = 0; c < C; c++) dot += dl__get_at(prob, i * C + c) * dl__get_at(tz, dl__offset_of_linear(tz, i * C + c));
        for (c = 0; c < C; c++) {
          const double pc = dl__get_at(prob, i * C + c), v = g * pc * (dl__get_at(tz, dl__offset_of_linear(tz, i * C + c)) - dot);
          if (gx->dtype == DL_F32) ((float *)gx->tangent->data)[i * C + c] += (float)v;
          else ((double *)gx->tangent->data)[i * C + c] += v;
        }
      }
  }
}

#ifdef DL_USE_CUDA
/* dl_t_cross_entropy on the device (checks done, lab the checked labels in
 * host memory): the same outputs and node. */
DL_API dl_tensor *dl__cross_entropy_gpu(dl_tape *tp, const char *op, dl_tensor *logits, dl_tensor *lab,
                                        double eps, dl_reduction r) {
  const int64_t N = logits->shape[0], C = logits->shape[1];
  const int none = r == DL_REDUCE_NONE;
  const double div = r == DL_REDUCE_MEAN ? (double)N : 1.0;
  const int64_t *l = (const int64_t *)lab->data;
  dlg_handle *h = dl__gpu_h(logits, op);
  dl_tensor *xc, *prob, *y;
  dl_node *n;
  y = dl__loss_out(tp, op, logits->dtype, r, 1, &N);
  dl__ops_same_device(op, logits, y); /* a device tensor on a host tape */
  xc = dl__t_contig(tp, op, logits);
  prob = dl_tape_out(tp, op, logits->dtype, 2, logits->shape);
  dl__gpu_ok(logits, op, dlg_cross_entropy(h, (int)logits->dtype, N, C, xc->data, l, eps, prob->data,
                                           none ? y->data : NULL, none ? NULL : y->data, div));
  if (logits->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y), *tc;
    dl__ops_same_device(op, logits, logits->tangent);
    tc = dl__t_contig(tp, op, logits->tangent);
    dl__gpu_ok(logits, op, dlg_cross_entropy_tangent(h, (int)logits->dtype, N, C, prob->data, l, eps, tc->data,
                                                     none ? ty->data : NULL, none ? NULL : ty->data, div));
  }
  if ((n = dl_tape_record(tp, op, dl__t_cross_entropy_bw, y, logits, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP;
    n->i[0] = (int64_t)r;
    n->p[0] = eps;
    n->saved[0] = prob;
    n->saved[1] = lab;
  }
  return y;
}
#endif

/* Cross-entropy of logits [N, C] against class labels [N] (i64 or i32, each
 * in [0, C): a label out of range panics naming it, its position and C), as
 * torch.nn.functional.cross_entropy(logits, labels,
 * label_smoothing=label_smoothing, reduction=...): per row
 *   (1 - eps) (-log p_label) + eps / C sum_c (-log p_c),  p = softmax(row),
 * eps = label_smoothing in [0, 1]. One fused pass: the row max is
 * subtracted before exp (finite and exact for logits of any size), and the
 * softmax is kept for backward, whose gradient is
 * (p - ((1 - eps) onehot + eps / C)) * gy (/ N for MEAN). Returns a 0-d
 * tensor (MEAN, SUM) or the per-row losses [N] (NONE), in the tape's arena. */
DL_API dl_tensor *dl_t_cross_entropy(dl_tape *tp, dl_tensor *logits, const dl_tensor *labels,
                                     double label_smoothing, dl_reduction r) {
  const char *op = "dl_t_cross_entropy";
  dl_tensor *lab, *xc, *y, *prob;
  dl_node *n;
  dl__ce A;
  int64_t N, C;
  double s;
  lab = dl__loss_labels(tp, op, logits, labels);
  dl__loss_check_red(op, logits, r);
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    DL_PANIC(logits->ctx, op, "label_smoothing must be in [0, 1], not %g (logits %s, labels %s)",
             label_smoothing, DL_SHAPESTR(logits), DL_SHAPESTR(labels));
#ifdef DL_USE_CUDA
  if (logits->device == DL_CUDA) return dl__cross_entropy_gpu(tp, op, logits, lab, label_smoothing, r);
#endif
  dl__ops_host_only(tp, op, logits); /* host logits on a device tape */
  N = logits->shape[0];
  C = logits->shape[1];
  xc = dl__t_contig(tp, op, logits);
  prob = dl_tape_out(tp, op, logits->dtype, 2, logits->shape); /* also exp's scratch */
  y = dl__loss_out(tp, op, logits->dtype, r, 1, &N);
  memset(&A, 0, sizeof A);
  A.mode = DL__CE_FWD;
  A.dt = logits->dtype;
  A.C = C;
  A.lab = (const int64_t *)lab->data;
  A.eps = label_smoothing;
  A.x = xc->data;
  A.prob = prob->data;
  A.loss = r == DL_REDUCE_NONE ? y->data : NULL;
  s = dl__loss_run(tp, op, dl__ce_blk, &A, N, dl__ce_rows_per_block(C), N * C, 1);
  if (r != DL_REDUCE_NONE) dl__set_at(y, 0, r == DL_REDUCE_MEAN ? s / (double)N : s);
  if (logits->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    A.mode = DL__CE_TAN;
    A.t = dl__t_contig(tp, op, logits->tangent)->data;
    A.loss = r == DL_REDUCE_NONE ? ty->data : NULL;
    s = dl__loss_run(tp, op, dl__ce_blk, &A, N, dl__ce_rows_per_block(C), N * C, 1);
    if (r != DL_REDUCE_NONE) dl__set_at(ty, 0, r == DL_REDUCE_MEAN ? s / (double)N : s);
  }
  if ((n = dl_tape_record(tp, op, dl__t_cross_entropy_bw, y, logits, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP;
    n->i[0] = (int64_t)r;
    n->p[0] = label_smoothing;
    n->saved[0] = prob;
    n->saved[1] = lab;
  }
  return y;
}

/* >>nll -------------------------------------------------------------------- */

DL_API void dl__t_nll_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]);
  const dl_tensor *gy = n->out->grad;
  const int64_t *l = (const int64_t *)n->saved[0]->data;
  const dl_reduction r = (dl_reduction)n->i[0];
  const int64_t N = gx ? gx->shape[0] : 0, C = gx ? gx->shape[1] : 0;
  const int64_t gs = r == DL_REDUCE_NONE ? 1 : 0;
  const double sc = r == DL_REDUCE_MEAN ? 1.0 / (double)N : 1.0;
  int64_t i;
  if (!gx) return;
#ifdef DL_USE_CUDA
  if (gx->device == DL_CUDA) { /* l is host memory (dl__loss_labels) */
    dl__gpu_ok(gx, n->op, dlg_nll_backward(dl__gpu_h(gx, n->op), (int)gx->dtype, N, C, l, gy->data, gs, sc, gx->data));
    return;
  }
#endif
  if (gx->dtype == DL_F32) {
    const float *g = (const float *)gy->data, f = (float)sc;
    float *o = (float *)gx->data;
    for (i = 0; i < N; i++) o[i * C + l[i]] -= g[i * gs] * f;
  } else {
    const double *g = (const double *)gy->data;
    double *o = (double *)gx->data;
    for (i = 0; i < N; i++) o[i * C + l[i]] -= g[i * gs] * sc;
  }
}
/* sum / mean / list of -v[i, label_i] over rows i of v [N, C] (strided). */
DL_API double dl__nll_rows(const dl_tensor *v, const int64_t *l, void *out) {
  const int64_t N = v->shape[0], s0 = v->strides[0], s1 = v->strides[1];
  double acc = 0;
  int64_t i;
  if (v->dtype == DL_F32) {
    const float *x = (const float *)v->data;
    for (i = 0; i < N; i++) {
      const float e = -x[i * s0 + l[i] * s1];
      if (out) ((float *)out)[i] = e;
      acc += (double)e;
    }
  } else {
    const double *x = (const double *)v->data;
    for (i = 0; i < N; i++) {
      const double e = -x[i * s0 + l[i] * s1];
      if (out) ((double *)out)[i] = e;
      acc += e;
    }
  }
  return acc;
}
/* Negative log-likelihood (torch.nn.functional.nll_loss, no weights) of
 * log-probabilities logp [N, C] (any strides) at labels [N] (i64 or i32, each
 * in [0, C)): per row -logp[i, label_i]. Returns a 0-d tensor (MEAN: sum / N,
 * SUM) or [N] (NONE), in the tape's arena. */
DL_API dl_tensor *dl_t_nll(dl_tape *tp, dl_tensor *logp, const dl_tensor *labels, dl_reduction r) {
  const char *op = "dl_t_nll";
  dl_tensor *lab, *y;
  dl_node *n;
  int64_t N;
  double s;
  lab = dl__loss_labels(tp, op, logp, labels);
  dl__loss_check_red(op, logp, r);
  N = logp->shape[0];
  y = dl__loss_out(tp, op, logp->dtype, r, 1, &N);
#ifdef DL_USE_CUDA
  dl__ops_same_device(op, logp, y); /* a device tensor on a host tape, or the reverse */
  if (logp->device == DL_CUDA) { /* lab is host memory (dl__loss_labels) */
    const int none = r == DL_REDUCE_NONE;
    const double div = r == DL_REDUCE_MEAN ? (double)N : 1.0;
    const int64_t C = logp->shape[1], *l = (const int64_t *)lab->data;
    dlg_handle *h = dl__gpu_h(logp, op);
    dl__gpu_ok(logp, op, dlg_nll(h, (int)logp->dtype, N, C, logp->data, logp->strides[0], logp->strides[1], l,
                                 none ? y->data : NULL, none ? NULL : y->data, div));
    if (logp->tangent) {
      dl_tensor *ty = dl_tape_tangent(tp, y), *t = logp->tangent;
      dl__ops_same_device(op, logp, t);
      dl__gpu_ok(logp, op, dlg_nll(h, (int)logp->dtype, N, C, t->data, t->strides[0], t->strides[1], l,
                                   none ? ty->data : NULL, none ? NULL : ty->data, div));
    }
    if ((n = dl_tape_record(tp, op, dl__t_nll_bw, y, logp, NULL, NULL)) != NULL) {
      n->flags |= DL_NODE_HVP_LINEAR; /* a selection of log-probabilities: linear in the gradient */
      n->i[0] = (int64_t)r;
      n->saved[0] = lab;
    }
    return y;
  }
#endif
  s = dl__nll_rows(logp, (const int64_t *)lab->data, r == DL_REDUCE_NONE ? y->data : NULL);
  if (r != DL_REDUCE_NONE) dl__set_at(y, 0, r == DL_REDUCE_MEAN ? s / (double)N : s);
  if (logp->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    s = dl__nll_rows(logp->tangent, (const int64_t *)lab->data,
                     r == DL_REDUCE_NONE ? ty->data : NULL);
    if (r != DL_REDUCE_NONE) dl__set_at(ty, 0, r == DL_REDUCE_MEAN ? s / (double)N : s);
  }
  if ((n = dl_tape_record(tp, op, dl__t_nll_bw, y, logp, NULL, NULL)) != NULL) {
      n->flags |= DL_NODE_HVP_LINEAR; /* a selection of log-probabilities: linear in the gradient */
    n->i[0] = (int64_t)r;
    n->saved[0] = lab;
  }
  return y;
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_OPS_LOSS_H */
