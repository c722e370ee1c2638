/* dl/ops/shape.h - shape ops on the tape (included by dl/ops.h; see there).
 *
 *   dl_t_transpose dl_t_permute dl_t_slice        views, never a copy
 *   dl_t_reshape dl_t_flatten                     a view of a contiguous input,
 *                                                 otherwise a contiguous copy
 *   dl_t_contiguous                               a copy of a strided input (x itself
 *                                                 when it is already contiguous)
 *   dl_t_index_select dl_t_gather                 gathers along a dimension
 *   dl_t_concat dl_t_stack dl_t_pad               new contiguous tensors
 *
 * Views are tensor structs in the tape's arena sharing x's storage: writing
 * into x shows through them. Every output (view or not) is valid until
 * dl_tape_rewind. A view output has no gradient of its own and, when
 * recorded, its own node: backward adds the upstream gradient into the same
 * view of the input's (contiguous) gradient.
 *
 * Negative dimensions count from the end. These ops only move data, so they
 * take tensors of any dtype (gradients and tangents exist for f32 and f64);
 * the multi-input ops (concat, stack) want one dtype for all inputs and panic
 * naming both shapes otherwise. Index tensors are i64 or i32, any strides;
 * an index out of range panics naming it, its position and the size.
 *
 * Backward rules accumulate (+=) into the inputs' gradients; the scatter-adds
 * of index_select and gather add repeated indices in index order, so results
 * do not depend on the thread count. Forward mode: the output's tangent is
 * the same op applied to the inputs' tangents (zero where an input has none),
 * always contiguous. Large copies run on OpenMP threads above the ctx's
 * parallel threshold.
 */
#ifndef DL_OPS_SHAPE_H
#define DL_OPS_SHAPE_H

#include "core.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY /* the library's code (nvcc sees only the scalar math) */

/* >>helpers for the shape ops ---------------------------------------------- */

/* dim (negative counts from the end) in [0, x->ndim + extra); panics naming
 * op, the dimension and x. */
DL_API int dl__shape_dim(const char *op, const dl_tensor *x, int dim, int extra) {
  int n = x->ndim + extra, d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= n)
    DL_PANIC(x->ctx, op, "dimension %d out of range for %s (%d dimensions%s)", dim, DL_SHAPESTR(x),
             n, extra ? " with the new one" : "");
  return d;
}

/* "[a, b, c]" for messages. */
DL_API dl__shapebuf dl__shape_list(int n, const int64_t *v) {
  dl__shapebuf b;
  size_t at = 0;
  int k;
  b.s[0] = 0;
  at += (size_t)snprintf(b.s, sizeof b.s, "[");
  for (k = 0; k < n && at < sizeof b.s; k++)
    at += (size_t)snprintf(b.s + at, sizeof b.s - at, k ? ", %lld" : "%lld", (long long)v[k]);
  if (at < sizeof b.s) snprintf(b.s + at, sizeof b.s - at, "]");
  return b;
}

/* Offset under strides st of the row-major linear index lin over
 * shape[from..to). */
DL_API int64_t dl__shape_unravel(int64_t lin, int from, int to, const int64_t *shape,
                                 const int64_t *st) {
  int64_t off = 0;
  int d;
  for (d = to - 1; d >= from; d--) {
    off += (lin % shape[d]) * st[d];
    lin /= shape[d];
  }
  return off;
}

/* Two same-shape tensors walked together: size-1 dimensions dropped,
 * dimensions merged where both are contiguous across them, the innermost
 * run (inner elements, strides ia/ib) separate from the outer rows. */
typedef struct dl__shape_it {
  int nd;
  int64_t shape[DL_MAX_DIMS], sa[DL_MAX_DIMS], sb[DL_MAX_DIMS];
  int64_t inner, ia, ib, rows;
} dl__shape_it;

DL_API void dl__shape_it_init(dl__shape_it *it, const dl_tensor *a, const dl_tensor *b) {
  int64_t sh[DL_MAX_DIMS], sa[DL_MAX_DIMS], sb[DL_MAX_DIMS];
  int d, n = 0, k;
  for (d = a->ndim - 1; d >= 0; d--) {
    if (a->shape[d] == 1) continue;
    if (n > 0 && a->strides[d] == sa[n - 1] * sh[n - 1] && b->strides[d] == sb[n - 1] * sh[n - 1]) {
      sh[n - 1] *= a->shape[d];
      continue;
    }
    sh[n] = a->shape[d];
    sa[n] = a->strides[d];
    sb[n] = b->strides[d];
    n++;
  }
  if (n == 0) {
    sh[0] = 1;
    sa[0] = sb[0] = 0;
    n = 1;
  }
  it->inner = sh[0];
  it->ia = sa[0];
  it->ib = sb[0];
  it->nd = n - 1;
  it->rows = 1;
  for (k = 0; k < n - 1; k++) {
    it->shape[k] = sh[n - 1 - k];
    it->sa[k] = sa[n - 1 - k];
    it->sb[k] = sb[n - 1 - k];
    it->rows *= it->shape[k];
  }
}

/* n elements: d[j*ds] = s[j*ss], or += for f32/f64 when add. */
DL_API void dl__shape_run(dl_dtype dt, size_t es, char *d, int64_t ds, const char *s, int64_t ss,
                          int64_t n, int add) {
  int64_t j;
  if (add) {
    if (dt == DL_F32) {
      float *y = (float *)(void *)d;
      const float *x = (const float *)(const void *)s;
      if (ds == 1 && ss == 1)
        for (j = 0; j < n; j++) y[j] += x[j];
      else
        for (j = 0; j < n; j++) y[j * ds] += x[j * ss];
    } else {
      double *y = (double *)(void *)d;
      const double *x = (const double *)(const void *)s;
      if (ds == 1 && ss == 1)
        for (j = 0; j < n; j++) y[j] += x[j];
      else
        for (j = 0; j < n; j++) y[j * ds] += x[j * ss];
    }
    return;
  }
  if (ds == 1 && ss == 1) {
    memcpy(d, s, (size_t)n * es);
    return;
  }
#define DL__SHAPE_CP(ES)                                                               \
  for (j = 0; j < n; j++) memcpy(d + j * ds * (ES), s + j * ss * (ES), (ES));          \
  break;
  switch (es) {
    case 8: DL__SHAPE_CP(8)
    case 4: DL__SHAPE_CP(4)
    case 2: DL__SHAPE_CP(2)
    case 1: DL__SHAPE_CP(1)
    default: DL__SHAPE_CP((int64_t)es)
  }
#undef DL__SHAPE_CP
}

#define DL__SHAPE_CHUNK 8192

/* dst = src (add 0) or dst += src (add 1, f32/f64), element by element:
 * same shape and dtype, any strides (dst's elements distinct). Work is cut
 * into tiles of rb rows x cb columns (about DL__SHAPE_CHUNK elements; 64 x
 * 64 when one side is strided along the rows, as in a transpose, so both
 * sides stay in cache), run on threads above dst's ctx parallel threshold. */
DL_API void dl__shape_move(dl_tensor *dst, const dl_tensor *src, int add) {
  dl__shape_it it;
  int64_t rb, cb, rtiles, ctiles, tiles;
  size_t es = dl_dtype_size(dst->dtype);
  if (dst->numel == 0) return;
#ifdef DL_USE_CUDA
  if (dst->device == DL_CUDA || src->device == DL_CUDA) {
    dl__ops_same_device("dl_shape (copy)", dst, src);
    dl__check_same(dst, src, "dl_shape (copy)", 1);
    dl__gpu_ok(dst, "dl_shape (copy)",
               dlg_move(dl__gpu_h(dst, "dl_shape (copy)"), (int)dst->dtype, (int)es, add, dst->ndim, dst->shape,
                        dst->data, dst->strides, src->data, src->strides));
    return;
  }
#endif
  dl__shape_it_init(&it, dst, src);
  if (it.inner >= DL__SHAPE_CHUNK) {
    rb = 1;
    cb = DL__SHAPE_CHUNK;
  } else if ((it.ia != 1 || it.ib != 1) && it.inner > 64 && it.rows > 1) {
    rb = cb = 64;
  } else {
    rb = DL__SHAPE_CHUNK / it.inner;
    cb = it.inner;
  }
  rtiles = (it.rows + rb - 1) / rb;
  ctiles = (it.inner + cb - 1) / cb;
  tiles = rtiles * ctiles;
  DL_PARALLEL_FOR(dst->ctx, dst->numel, tiles, t, {
    int64_t r0 = (t / ctiles) * rb, r1 = r0 + rb, j0 = (t % ctiles) * cb, len = it.inner - j0;
    int64_t idx[DL_MAX_DIMS], od = 0, os = 0, r, q = r0;
    int k;
    if (r1 > it.rows) r1 = it.rows;
    if (len > cb) len = cb;
    for (k = it.nd - 1; k >= 0; k--) {
      idx[k] = q % it.shape[k];
      q /= it.shape[k];
      od += idx[k] * it.sa[k];
      os += idx[k] * it.sb[k];
    }
    for (r = r0; r < r1; r++) {
      dl__shape_run(dst->dtype, es, (char *)dst->data + (od + j0 * it.ia) * (int64_t)es, it.ia,
                    (const char *)src->data + (os + j0 * it.ib) * (int64_t)es, it.ib, len, add);
      for (k = it.nd - 1; k >= 0; k--) { /* next row */
        od += it.sa[k];
        os += it.sb[k];
        if (++idx[k] < it.shape[k]) break;
        od -= it.sa[k] * it.shape[k];
        os -= it.sb[k] * it.shape[k];
        idx[k] = 0;
      }
    }
  });
}

/* A contiguous tensor with t's values: t itself when it already is, else a
 * copy in the tape's arena. */
DL_API dl_tensor *dl__shape_contig(dl_tape *tp, const char *op, dl_tensor *t) {
  dl_tensor *c;
  if (dl_tensor_is_contiguous(t)) return t;
  c = dl_tape_out(tp, op, t->dtype, t->ndim, t->shape);
  dl__shape_move(c, t, 0);
  return c;
}

/* The view v as a struct in the tape's arena (v has no grad/node/tangent). */
DL_API dl_tensor *dl__shape_view_out(dl_tape *tp, const char *op, dl_tensor v) {
  dl_tensor *y = (dl_tensor *)dl_tape_scratch(tp, op, sizeof *y);
  *y = v;
  return y;
}
/* y->tangent = a contiguous copy of tv (y's shape). */
DL_API void dl__shape_tangent_copy(dl_tape *tp, dl_tensor *y, const dl_tensor *tv) {
  y->tangent = dl_tape_out(tp, "forward mode", y->dtype, y->ndim, y->shape);
  dl__shape_move(y->tangent, tv, 0);
}
/* View of t at position k of dimension dim, that dimension removed. */
DL_API dl_tensor dl__shape_select(const dl_tensor *t, int dim, int64_t k) {
  dl_tensor v = dl__view_base(t);
  int d;
  if (t->numel) v.data = (char *)t->data + k * t->strides[dim] * (int64_t)dl_dtype_size(t->dtype);
  for (d = dim; d < t->ndim - 1; d++) {
    v.shape[d] = t->shape[d + 1];
    v.strides[d] = t->strides[d + 1];
  }
  v.shape[t->ndim - 1] = 1;
  v.strides[t->ndim - 1] = 0;
  v.ndim = t->ndim - 1;
  v.numel = t->shape[dim] ? t->numel / t->shape[dim] : 0;
  return v;
}
/* The gradient g (contiguous) seen with shape (ndim, shape): same numel. */
DL_API dl_tensor dl__shape_as(const dl_tensor *g, int ndim, const int64_t *shape) {
  dl_tensor v = dl__view_base(g);
  dl__set_shape(&v, ndim, shape);
  return v;
}

/* >>transpose, permute ----------------------------------------------------- */

DL_API void dl__t_transpose_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl__tape_grad_w(tp, n->in[0]); /* v covers gx: written, or added to */
  if (gx) {
    dl_tensor v = dl_view_transpose(gx, (int)n->i[0], (int)n->i[1]);
    dl__shape_move(&v, n->out->grad, !dl__grad_take(gx));
  }
}
/* x with dimensions d0 and d1 swapped: a VIEW of x's data (no copy), in the
 * tape's arena until the rewind. Backward: gx += transpose(gy). */
DL_API dl_tensor *dl_t_transpose(dl_tape *tp, dl_tensor *x, int d0, int d1) {
  int a = dl__shape_dim("dl_t_transpose", x, d0, 0), b = dl__shape_dim("dl_t_transpose", x, d1, 0);
  dl_tensor *y = dl__shape_view_out(tp, "dl_t_transpose", dl_view_transpose(x, a, b));
  dl_node *n;
  if (x->tangent) {
    dl_tensor tv = dl_view_transpose(x->tangent, a, b);
    dl__shape_tangent_copy(tp, y, &tv);
  }
  if ((n = dl_tape_record(tp, "dl_t_transpose", dl__t_transpose_bw, y, x, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP_LINEAR;
    n->i[0] = a;
    n->i[1] = b;
  }
  return y;
}

DL_API void dl__t_permute_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl__tape_grad_w(tp, n->in[0]); /* v covers gx: written, or added to */
  int perm[DL_MAX_DIMS], d;
  if (!gx) return;
  for (d = 0; d < gx->ndim; d++) perm[d] = (int)n->i[d];
  {
    dl_tensor v = dl_view_permute(gx, perm);
    dl__shape_move(&v, n->out->grad, !dl__grad_take(gx));
  }
}
/* x's dimensions reordered: output dimension d is x's dimension perm[d]
 * (x->ndim entries, each dimension once, negative counts from the end). A
 * VIEW of x's data, in the tape's arena until the rewind. */
DL_API dl_tensor *dl_t_permute(dl_tape *tp, dl_tensor *x, const int *perm) {
  int p[DL_MAX_DIMS] = {0}, seen[DL_MAX_DIMS] = {0}, d;
  int64_t shown[DL_MAX_DIMS];
  dl_tensor *y;
  dl_node *n;
  if (x->ndim > 0 && !perm) DL_PANIC(x->ctx, "dl_t_permute", "no permutation given for %s", DL_SHAPESTR(x));
  for (d = 0; d < x->ndim; d++) shown[d] = perm[d];
  for (d = 0; d < x->ndim; d++) {
    p[d] = perm[d] < 0 ? perm[d] + x->ndim : perm[d];
    if (p[d] < 0 || p[d] >= x->ndim || seen[p[d]]++)
      DL_PANIC(x->ctx, "dl_t_permute", "%s is not a permutation of the %d dimensions of %s",
               dl__shape_list(x->ndim, shown).s, x->ndim, DL_SHAPESTR(x));
  }
  y = dl__shape_view_out(tp, "dl_t_permute", dl_view_permute(x, p));
  if (x->tangent) {
    dl_tensor tv = dl_view_permute(x->tangent, p);
    dl__shape_tangent_copy(tp, y, &tv);
  }
  if ((n = dl_tape_record(tp, "dl_t_permute", dl__t_permute_bw, y, x, NULL, NULL)) != NULL) {
    for (d = 0; d < x->ndim; d++) n->i[d] = p[d];
    n->flags |= DL_NODE_HVP_LINEAR;
  }
  return y;
}

/* >>reshape, flatten, contiguous ------------------------------------------- */

DL_API void dl__t_reshape_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl__tape_grad_w(tp, n->in[0]), *gy = n->out->grad; /* v covers gx: written, or added to */
  if (gx) {
    dl_tensor v = dl__shape_as(gx, gy->ndim, gy->shape);
    dl__shape_move(&v, gy, !dl__grad_take(gx));
  }
}
/* x's elements in row-major order with shape (ndim, sh) (already checked):
 * a view when x is contiguous, else a contiguous copy. */
DL_API dl_tensor *dl__t_reshape_to(dl_tape *tp, const char *op, dl_tensor *x, int ndim,
                                   const int64_t *sh) {
  dl_tensor *y;
  if (dl_tensor_is_contiguous(x)) {
    dl_tensor v = dl__view_base(x);
    dl__set_shape(&v, ndim, sh);
    y = dl__shape_view_out(tp, op, v);
  } else {
    dl_tensor yv;
    y = dl_tape_out(tp, op, x->dtype, ndim, sh);
    yv = dl__shape_as(y, x->ndim, x->shape);
    dl__shape_move(&yv, x, 0);
  }
  if (x->tangent) {
    dl_tensor tv;
    y->tangent = dl_tape_out(tp, "forward mode", y->dtype, ndim, sh);
    tv = dl__shape_as(y->tangent, x->ndim, x->shape);
    dl__shape_move(&tv, x->tangent, 0);
  }
  {
    dl_node *n = dl_tape_record(tp, op, dl__t_reshape_bw, y, x, NULL, NULL);
    if (n) n->flags |= DL_NODE_HVP_LINEAR;
  }
  return y;
}

/* x's elements (row-major) in a new shape of ndim sizes, one of which may be
 * -1 (inferred). A VIEW of x's data when x is contiguous, otherwise a
 * contiguous copy; in the tape's arena until the rewind either way. */
DL_API dl_tensor *dl_t_reshape(dl_tape *tp, dl_tensor *x, int ndim, const int64_t *shape) {
  int64_t sh[DL_MAX_DIMS], known = 1;
  int d, infer = -1;
  if (ndim < 0 || ndim > DL_MAX_DIMS || (ndim > 0 && !shape))
    DL_PANIC(x->ctx, "dl_t_reshape", "cannot reshape %s to rank %d (at most %d)", DL_SHAPESTR(x), ndim,
             DL_MAX_DIMS);
  for (d = 0; d < ndim; d++) {
    sh[d] = shape[d];
    if (sh[d] == -1 && infer < 0) {
      infer = d;
      continue;
    }
    if (sh[d] < 0 || (sh[d] != 0 && known > INT64_MAX / sh[d]))
      DL_PANIC(x->ctx, "dl_t_reshape", "cannot reshape %s to %s: bad size %lld (one -1 at most)",
               DL_SHAPESTR(x), dl__shape_list(ndim, shape).s, (long long)sh[d]);
    known *= sh[d];
  }
  if (infer >= 0) {
    if (known == 0 || x->numel % known)
      DL_PANIC(x->ctx, "dl_t_reshape", "cannot reshape %s (%lld elements) to %s: no size fits the -1",
               DL_SHAPESTR(x), (long long)x->numel, dl__shape_list(ndim, shape).s);
    sh[infer] = x->numel / known;
    known *= sh[infer];
  }
  if (known != x->numel)
    DL_PANIC(x->ctx, "dl_t_reshape", "cannot reshape %s (%lld elements) to %s (%lld elements)",
             DL_SHAPESTR(x), (long long)x->numel, dl__shape_list(ndim, shape).s, (long long)known);
  return dl__t_reshape_to(tp, "dl_t_reshape", x, ndim, sh);
}

/* torch.flatten(x, start_dim): dimensions start_dim .. last merged into one,
 * e.g. (N, C, H, W) with start_dim 1 -> (N, C*H*W); a 0-d x gives (1). A
 * view or a copy as dl_t_reshape; arena until the rewind. */
DL_API dl_tensor *dl_t_flatten(dl_tape *tp, dl_tensor *x, int start_dim) {
  int64_t sh[DL_MAX_DIMS];
  int s, d;
  if (x->ndim == 0) {
    if (start_dim != 0 && start_dim != -1)
      DL_PANIC(x->ctx, "dl_t_flatten", "start_dim %d out of range for %s", start_dim, DL_SHAPESTR(x));
    sh[0] = 1;
    return dl__t_reshape_to(tp, "dl_t_flatten", x, 1, sh);
  }
  s = dl__shape_dim("dl_t_flatten", x, start_dim, 0);
  for (d = 0; d < s; d++) sh[d] = x->shape[d];
  sh[s] = 1;
  for (d = s; d < x->ndim; d++) sh[s] *= x->shape[d];
  return dl__t_reshape_to(tp, "dl_t_flatten", x, s + 1, sh);
}

/* A contiguous tensor with x's values: x itself (nothing recorded) when it
 * is already contiguous, else a copy in the tape's arena (valid until the
 * rewind) whose backward adds gy into gx. */
DL_API dl_tensor *dl_t_contiguous(dl_tape *tp, dl_tensor *x) {
  if (dl_tensor_is_contiguous(x)) return x;
  return dl__t_reshape_to(tp, "dl_t_contiguous", x, x->ndim, x->shape);
}

/* >>slice ------------------------------------------------------------------ */

DL_API void dl__t_slice_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]);
  if (gx) {
    dl_tensor v = dl_view_slice(gx, (int)n->i[0], n->i[1], n->i[2], n->i[3]);
    dl__shape_move(&v, n->out->grad, 1);
  }
}
/* x[..., start:stop:step, ...] along dim, Python's slice rules: negative
 * start/stop count from the end, both are clamped to [0, size], step >= 1;
 * an empty range gives size 0. A VIEW of x's data, arena until the rewind. */
DL_API dl_tensor *dl_t_slice(dl_tape *tp, dl_tensor *x, int dim, int64_t start, int64_t stop,
                             int64_t step) {
  int d = dl__shape_dim("dl_t_slice", x, dim, 0);
  dl_tensor *y;
  dl_node *n;
  if (step < 1)
    DL_PANIC(x->ctx, "dl_t_slice", "step %lld must be >= 1 (slicing %s along dimension %d)",
             (long long)step, DL_SHAPESTR(x), dim);
  y = dl__shape_view_out(tp, "dl_t_slice", dl_view_slice(x, d, start, stop, step));
  if (x->tangent) {
    dl_tensor tv = dl_view_slice(x->tangent, d, start, stop, step);
    dl__shape_tangent_copy(tp, y, &tv);
  }
  if ((n = dl_tape_record(tp, "dl_t_slice", dl__t_slice_bw, y, x, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP_LINEAR;
    n->i[0] = d;
    n->i[1] = start;
    n->i[2] = stop;
    n->i[3] = step;
  }
  return y;
}

/* >>index_select, gather --------------------------------------------------- */

#ifdef DL_USE_CUDA
/* index_select, gather and pad on the GPU (src_gpu/shape.cu through
 * dl/gpu/shape.h): the same helpers branch to kernels that copy and add
 * exactly as the CPU loops do, so results are bit-identical (repeated
 * indices added in index order there too). The index lists and pads stay on
 * the host: the kernels get them from there. */

/* Whether op on x runs on the GPU: x on the device goes with a device tape
 * (whose outputs are device memory), a host x with a host tape; a mix
 * panics naming op, as does a tangent on the other device. */
DL_API int dl__shape_on_gpu(const dl_tape *tp, const char *op, const dl_tensor *x) {
  if ((x->device == DL_CUDA) != (tp->gpu != NULL))
    DL_PANIC(x->ctx, op, "x %s is on the %s but the tape is a %s tape: run device tensors on a device tape "
             "(dl_tape_use_gpu) and host tensors on a host tape", DL_SHAPESTR(x),
             x->device == DL_CUDA ? "GPU" : "host", tp->gpu ? "device" : "host");
  if (x->tangent) dl__ops_same_device(op, x, x->tangent);
  return x->device == DL_CUDA;
}
/* A tensor in the tape's arena in HOST memory, on a device tape too (where
 * dl_tape_out gives device memory): for what the host reads (indices,
 * pads). Uninitialised; out of memory in op (DL_NOMEM) when the arena is full. */
DL_API dl_tensor *dl__shape_host_out(dl_tape *tp, const char *op, dl_dtype dtype, int ndim, const int64_t *shape) {
  dl_tensor *t = dl_tensor_new(&tp->arena, dtype, ndim, shape);
  if (!t) {
    size_t bytes = 0;
    (void)dl_shape_size(dtype, ndim, shape, NULL, &bytes);
    dl__tape_nomem(tp, op, "host scratch", bytes);
  }
  return t;
}
#endif

/* idx (i64 or i32, any strides) as a contiguous i64 tensor in the arena,
 * every entry checked to lie in [0, bound) (the size of dimension dim of x).
 * Host memory always: indices on the device are copied to the host first. */
DL_API dl_tensor *dl__shape_idx64(dl_tape *tp, const char *op, const dl_tensor *x,
                                  const dl_tensor *idx, int dim, int64_t bound) {
  dl_tensor *c;
  int64_t i, *p;
  if (!idx || (idx->dtype != DL_I64 && idx->dtype != DL_I32))
    DL_PANIC(x->ctx, op, "indices %s must be i64 or i32 (indexing %s)", idx ? DL_SHAPESTR(idx) : "(null)",
             DL_SHAPESTR(x));
#ifdef DL_USE_CUDA
  if (idx->device == DL_CUDA) { /* read on the host: one copy, which waits for the device */
    const dl_tensor *ic = dl_tensor_is_contiguous(idx) ? idx : dl__t_contig(tp, op, (dl_tensor *)(uintptr_t)idx);
    dl_tensor *hi = dl__shape_host_out(tp, op, idx->dtype, idx->ndim, idx->shape);
    dl_tensor_copy(hi, ic);
    idx = hi;
  }
  c = dl__shape_host_out(tp, op, DL_I64, idx->ndim, idx->shape);
#else
  c = dl_tape_out(tp, op, DL_I64, idx->ndim, idx->shape);
#endif
  p = (int64_t *)c->data;
  for (i = 0; i < idx->numel; i++) {
    int64_t off = dl__offset_of_linear(idx, i), v;
    v = idx->dtype == DL_I64 ? ((const int64_t *)idx->data)[off] : ((const int32_t *)idx->data)[off];
    if (v < 0 || v >= bound)
      DL_PANIC(x->ctx, op, "index %lld (entry %lld of %s) out of range for size %lld of dimension %d of %s",
               (long long)v, (long long)i, DL_SHAPESTR(idx), (long long)bound, dim, DL_SHAPESTR(x));
    p[i] = v;
  }
  return c;
}

/* y[o, k, :] = x[o, ix[k], :] (x contiguous; o over the dimensions before
 * dim, the trailing ones flattened). */
DL_API void dl__index_select_fwd(dl_tensor *y, const dl_tensor *x, const int64_t *ix, int dim) {
  int64_t outer = 1, inner = 1, n = x->shape[dim], m = y->shape[dim], rows;
  size_t es = dl_dtype_size(x->dtype);
  int d;
  if (y->numel == 0) return;
  for (d = 0; d < dim; d++) outer *= x->shape[d];
  for (d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
#ifdef DL_USE_CUDA
  if (y->device == DL_CUDA || x->device == DL_CUDA) {
    dl__ops_same_device("dl_t_index_select", y, x);
    dl__gpu_ok(y, "dl_t_index_select", dlg_index_select(dl__gpu_h(y, "dl_t_index_select"), (int)es, y->data,
                                                        x->data, outer, n, inner, ix, m));
    return;
  }
#endif
  rows = outer * m;
  DL_PARALLEL_FOR(y->ctx, y->numel, rows, r, {
    int64_t o = r / m, k = r % m;
    memcpy((char *)y->data + (size_t)(r * inner) * es,
           (const char *)x->data + (size_t)((o * n + ix[k]) * inner) * es, (size_t)inner * es);
  });
}
/* gx[o, ix[k], :] += gy[o, k, :] (both contiguous, f32/f64); each tile of
 * (o, column chunk) adds its k in order, so repeated indices accumulate the
 * same way for any thread count. */
DL_API void dl__index_select_bwd(dl_tensor *gx, const dl_tensor *gy, const int64_t *ix, int dim) {
  int64_t outer = 1, inner = 1, n = gx->shape[dim], m = gy->shape[dim], chunks, tiles;
  int64_t es = (int64_t)dl_dtype_size(gx->dtype);
  int d;
  if (gy->numel == 0) return;
  for (d = 0; d < dim; d++) outer *= gx->shape[d];
  for (d = dim + 1; d < gx->ndim; d++) inner *= gx->shape[d];
#ifdef DL_USE_CUDA
  if (gx->device == DL_CUDA || gy->device == DL_CUDA) {
    dl__ops_same_device("dl_t_index_select", gx, gy);
    dl__gpu_ok(gx, "dl_t_index_select",
               dlg_index_select_backward(dl__gpu_h(gx, "dl_t_index_select"), (int)gx->dtype, gx->data, gy->data,
                                         outer, n, inner, ix, m));
    return;
  }
#endif
  chunks = (inner + DL__SHAPE_CHUNK - 1) / DL__SHAPE_CHUNK;
  tiles = outer * chunks;
  DL_PARALLEL_FOR(gx->ctx, gy->numel, tiles, t, {
    int64_t o = t / chunks, j0 = (t % chunks) * DL__SHAPE_CHUNK, len = inner - j0, k;
    if (len > DL__SHAPE_CHUNK) len = DL__SHAPE_CHUNK;
    for (k = 0; k < m; k++)
      dl__shape_run(gx->dtype, (size_t)es, (char *)gx->data + ((o * n + ix[k]) * inner + j0) * es, 1,
                    (const char *)gy->data + ((o * m + k) * inner + j0) * es, 1, len, 1);
  });
}
DL_API void dl__t_index_select_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]);
  if (gx) dl__index_select_bwd(gx, n->out->grad, (const int64_t *)n->saved[0]->data, (int)n->i[0]);
}
/* x's entries idx[0], idx[1], ... along dim (torch.index_select): idx is
 * 1-d i64 or i32 (repeats allowed); the output has x's shape with size
 * numel(idx) at dim; contiguous, in the tape's arena until the rewind. An
 * index outside [0, size) panics naming it and the size. Backward adds gy
 * back at the selected positions (repeats accumulate). */
DL_API dl_tensor *dl_t_index_select(dl_tape *tp, dl_tensor *x, int dim, const dl_tensor *idx) {
  int d = dl__shape_dim("dl_t_index_select", x, dim, 0);
  int64_t sh[DL_MAX_DIMS];
  dl_tensor *ix, *y, *xc;
  dl_node *n;
  if (!idx || idx->ndim != 1)
    DL_PANIC(x->ctx, "dl_t_index_select", "indices %s must be 1-d (selecting from %s)",
             idx ? DL_SHAPESTR(idx) : "(null)", DL_SHAPESTR(x));
#ifdef DL_USE_CUDA
  (void)dl__shape_on_gpu(tp, "dl_t_index_select", x);
#endif
  ix = dl__shape_idx64(tp, "dl_t_index_select", x, idx, d, x->shape[d]);
  memcpy(sh, x->shape, sizeof sh);
  sh[d] = idx->numel;
  y = dl_tape_out(tp, "dl_t_index_select", x->dtype, x->ndim, sh);
  xc = dl__shape_contig(tp, "dl_t_index_select", x);
  dl__index_select_fwd(y, xc, (const int64_t *)ix->data, d);
  if (x->tangent) {
    y->tangent = dl_tape_out(tp, "forward mode", y->dtype, y->ndim, y->shape);
    dl__index_select_fwd(y->tangent, dl__shape_contig(tp, "dl_t_index_select", x->tangent),
                         (const int64_t *)ix->data, d);
  }
  if ((n = dl_tape_record(tp, "dl_t_index_select", dl__t_index_select_bw, y, x, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP_LINEAR;
    n->i[0] = d;
    n->saved[0] = ix;
  }
  return y;
}

/* Offsets under strides st of the row-major positions over shape[from..to)
 * (count entries), into the arena. */
DL_API int64_t *dl__shape_offsets(dl_tape *tp, const char *op, int64_t count, int from, int to,
                                  const int64_t *shape, const int64_t *st) {
  int64_t *o = (int64_t *)dl_tape_scratch(tp, op, sizeof(int64_t) * (size_t)count), j;
  for (j = 0; j < count; j++) o[j] = dl__shape_unravel(j, from, to, shape, st);
  return o;
}

/* y[p] = x[p with coordinate dim replaced by ix[p]] for every position p of
 * y (contiguous, the index's shape); x any strides. */
DL_API void dl__gather_fwd(dl_tape *tp, dl_tensor *y, const dl_tensor *x, const int64_t *ix, int dim) {
  int64_t outer = 1, inner = 1, K = y->shape[dim], rows, *ioff;
  int64_t sd = x->strides[dim];
  size_t es = dl_dtype_size(x->dtype);
  int d;
  if (y->numel == 0) return;
#ifdef DL_USE_CUDA
  if (y->device == DL_CUDA || x->device == DL_CUDA) {
    dl__ops_same_device("dl_t_gather", y, x);
    dl__gpu_ok(y, "dl_t_gather", dlg_gather(dl__gpu_h(y, "dl_t_gather"), (int)es, y->ndim, y->shape, dim, y->data,
                                            x->data, x->strides, x->shape[dim], ix));
    return;
  }
#endif
  for (d = 0; d < dim; d++) outer *= y->shape[d];
  for (d = dim + 1; d < y->ndim; d++) inner *= y->shape[d];
  ioff = dl__shape_offsets(tp, "dl_t_gather", inner, dim + 1, y->ndim, y->shape, x->strides);
  rows = outer * K;
#define DL__GATHER_CP(ES)                                                              \
  for (j = 0; j < inner; j++) memcpy(yr + j * (ES), xd + (base + ir[j] * sd + ioff[j]) * (ES), (ES)); \
  break;
  DL_PARALLEL_FOR(y->ctx, y->numel, rows, r, {
    int64_t base = dl__shape_unravel(r / K, 0, dim, y->shape, x->strides), j;
    const int64_t *ir = ix + r * inner;
    char *yr = (char *)y->data + (size_t)(r * inner) * es;
    const char *xd = (const char *)x->data;
    switch (es) {
      case 8: DL__GATHER_CP(8)
      case 4: DL__GATHER_CP(4)
      case 2: DL__GATHER_CP(2)
      case 1: DL__GATHER_CP(1)
      default: DL__GATHER_CP((int64_t)es)
    }
  });
#undef DL__GATHER_CP
}
/* gx[p with coordinate dim replaced by ix[p]] += gy[p] (gx, gy contiguous,
 * f32/f64). Tiles of (outer position, column chunk) run k in order, so
 * repeated indices accumulate the same way for any thread count. */
DL_API void dl__gather_bwd(dl_tape *tp, dl_tensor *gx, const dl_tensor *gy, const int64_t *ix, int dim) {
  int64_t outer = 1, inner = 1, K = gy->shape[dim], chunks, tiles, *ioff, sd = gx->strides[dim];
  int d;
  if (gy->numel == 0) return;
#ifdef DL_USE_CUDA
  if (gx->device == DL_CUDA || gy->device == DL_CUDA) {
    dl__ops_same_device("dl_t_gather", gx, gy);
    dl__gpu_ok(gx, "dl_t_gather", dlg_gather_backward(dl__gpu_h(gx, "dl_t_gather"), (int)gx->dtype, gy->ndim,
                                                      gy->shape, dim, gx->data, gx->strides, gx->shape[dim],
                                                      gy->data, ix));
    return;
  }
#endif
  for (d = 0; d < dim; d++) outer *= gy->shape[d];
  for (d = dim + 1; d < gy->ndim; d++) inner *= gy->shape[d];
  ioff = dl__shape_offsets(tp, "dl_t_gather", inner, dim + 1, gy->ndim, gy->shape, gx->strides);
  chunks = (inner + DL__SHAPE_CHUNK - 1) / DL__SHAPE_CHUNK;
  tiles = outer * chunks;
  DL_PARALLEL_FOR(gx->ctx, gy->numel, tiles, t, {
    int64_t o = t / chunks, j0 = (t % chunks) * DL__SHAPE_CHUNK, j1 = j0 + DL__SHAPE_CHUNK, k, j;
    int64_t base = dl__shape_unravel(o, 0, dim, gy->shape, gx->strides);
    if (j1 > inner) j1 = inner;
    for (k = 0; k < K; k++) {
      int64_t r = (o * K + k) * inner;
      if (gx->dtype == DL_F32) {
        float *g = (float *)gx->data;
        const float *s = (const float *)gy->data + r;
        for (j = j0; j < j1; j++) g[base + ix[r + j] * sd + ioff[j]] += s[j];
      } else {
        double *g = (double *)gx->data;
        const double *s = (const double *)gy->data + r;
        for (j = j0; j < j1; j++) g[base + ix[r + j] * sd + ioff[j]] += s[j];
      }
    }
  });
}
DL_API void dl__t_gather_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]);
  if (gx) dl__gather_bwd(tp, gx, n->out->grad, (const int64_t *)n->saved[0]->data, (int)n->i[0]);
}
/* torch.gather(x, dim, idx): idx (i64 or i32) has x's rank and, outside dim,
 * sizes no larger than x's; y has idx's shape and y[..., i, ...] =
 * x[..., idx[..., i, ...], ...] along dim. Contiguous, in the tape's arena
 * until the rewind. An index outside [0, x size at dim) panics naming it.
 * Backward scatter-adds gy into gx (repeated indices accumulate). */
DL_API dl_tensor *dl_t_gather(dl_tape *tp, dl_tensor *x, int dim, const dl_tensor *idx) {
  int d = dl__shape_dim("dl_t_gather", x, dim, 0), e;
  dl_tensor *ix, *y;
  dl_node *n;
  if (!idx || idx->ndim != x->ndim)
    DL_PANIC(x->ctx, "dl_t_gather", "indices %s must have the rank of %s", idx ? DL_SHAPESTR(idx) : "(null)",
             DL_SHAPESTR(x));
  for (e = 0; e < x->ndim; e++)
    if (e != d && idx->shape[e] > x->shape[e])
      DL_PANIC(x->ctx, "dl_t_gather", "indices %s larger than %s at dimension %d (gathering along %d)",
               DL_SHAPESTR(idx), DL_SHAPESTR(x), e, d);
#ifdef DL_USE_CUDA
  (void)dl__shape_on_gpu(tp, "dl_t_gather", x);
#endif
  ix = dl__shape_idx64(tp, "dl_t_gather", x, idx, d, x->shape[d]);
  y = dl_tape_out(tp, "dl_t_gather", x->dtype, idx->ndim, idx->shape);
  dl__gather_fwd(tp, y, x, (const int64_t *)ix->data, d);
  if (x->tangent) {
    y->tangent = dl_tape_out(tp, "forward mode", y->dtype, y->ndim, y->shape);
    dl__gather_fwd(tp, y->tangent, x->tangent, (const int64_t *)ix->data, d);
  }
  if ((n = dl_tape_record(tp, "dl_t_gather", dl__t_gather_bw, y, x, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP_LINEAR;
    n->i[0] = d;
    n->saved[0] = ix;
  }
  return y;
}

/* >>concat, stack ---------------------------------------------------------- */

/* Checks xs[0..n) exist and share xs[0]'s dtype and rank, and (shapes 2)
 * its shape, (shapes 1) its sizes outside dimension skip, (shapes 0) nothing
 * more. */
DL_API void dl__shape_check_list(dl_tape *tp, const char *op, int n, dl_tensor *const *xs, int skip,
                                 int shapes) {
  int k, d;
  if (n < 1 || !xs) DL_PANIC(tp->ctx, op, "needs at least one tensor, got %d", n);
  for (k = 0; k < n; k++)
    if (!xs[k]) DL_PANIC(tp->ctx, op, "input %d of %d is NULL", k, n);
  for (k = 1; k < n; k++) {
    if (xs[k]->dtype != xs[0]->dtype)
      DL_PANIC(xs[0]->ctx, op, "dtype mismatch: %s (input 0) and %s (input %d), never converted",
               DL_SHAPESTR(xs[0]), DL_SHAPESTR(xs[k]), k);
    if (xs[k]->ndim != xs[0]->ndim)
      DL_PANIC(xs[0]->ctx, op, "rank mismatch: %s (input 0) and %s (input %d)", DL_SHAPESTR(xs[0]),
               DL_SHAPESTR(xs[k]), k);
    for (d = 0; shapes && d < xs[0]->ndim; d++)
      if ((shapes == 2 || d != skip) && xs[k]->shape[d] != xs[0]->shape[d])
        DL_PANIC(xs[0]->ctx, op, "shape mismatch: %s (input 0) and %s (input %d)%s", DL_SHAPESTR(xs[0]),
                 DL_SHAPESTR(xs[k]), k, shapes == 2 ? "" : " differ outside the concatenated dimension");
  }
}

DL_API void dl__t_concat_bw(dl_tape *tp, dl_node *n) {
  int d = (int)n->i[0], k;
  int64_t off = 0;
  for (k = 0; k < n->nin; k++) {
    dl_tensor *g = dl_tape_grad(tp, n->in[k]);
    int64_t len = n->in[k]->shape[d];
    if (g) {
      dl_tensor v = dl_view_slice(n->out->grad, d, off, off + len, 1);
      dl__shape_move(g, &v, 1);
    }
    off += len;
  }
}
/* torch.cat: xs[0..n) joined along dim; they share dtype, rank and every
 * size but dim's. Contiguous, in the tape's arena until the rewind. */
DL_API dl_tensor *dl_t_concat(dl_tape *tp, int n, dl_tensor *const *xs, int dim) {
  int64_t sh[DL_MAX_DIMS], off = 0;
  dl_tensor *y;
  dl_node *nd;
  int d, k;
  dl__shape_check_list(tp, "dl_t_concat", n, xs, 0, 0);
  d = dl__shape_dim("dl_t_concat", xs[0], dim, 0);
  dl__shape_check_list(tp, "dl_t_concat", n, xs, d, 1);
  memcpy(sh, xs[0]->shape, sizeof sh);
  for (k = 1; k < n; k++) sh[d] += xs[k]->shape[d];
  y = dl_tape_out(tp, "dl_t_concat", xs[0]->dtype, xs[0]->ndim, sh);
  for (k = 0; k < n; k++) {
    dl_tensor v = dl_view_slice(y, d, off, off + xs[k]->shape[d], 1);
    dl__shape_move(&v, xs[k], 0);
    off += xs[k]->shape[d];
  }
  if (dl_tangent_wants(n, xs)) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    for (off = 0, k = 0; k < n; k++) {
      if (xs[k]->tangent) {
        dl_tensor v = dl_view_slice(ty, d, off, off + xs[k]->shape[d], 1);
        dl__shape_move(&v, xs[k]->tangent, 0);
      }
      off += xs[k]->shape[d];
    }
  }
  if ((nd = dl_tape_record_n(tp, "dl_t_concat", dl__t_concat_bw, y, n, xs)) != NULL) {
    nd->i[0] = d;
    nd->flags |= DL_NODE_HVP_LINEAR;
  }
  return y;
}

DL_API void dl__t_stack_bw(dl_tape *tp, dl_node *n) {
  int d = (int)n->i[0], k;
  for (k = 0; k < n->nin; k++) {
    dl_tensor *g = dl_tape_grad(tp, n->in[k]);
    if (g) {
      dl_tensor v = dl__shape_select(n->out->grad, d, k);
      dl__shape_move(g, &v, 1);
    }
  }
}
/* torch.stack: xs[0..n) (same dtype and shape) joined along a new dimension
 * dim (0 .. rank; negative counts from the end of the result), of size n.
 * Contiguous, in the tape's arena until the rewind. */
DL_API dl_tensor *dl_t_stack(dl_tape *tp, int n, dl_tensor *const *xs, int dim) {
  int64_t sh[DL_MAX_DIMS];
  dl_tensor *y;
  dl_node *nd;
  int d, k, e;
  dl__shape_check_list(tp, "dl_t_stack", n, xs, 0, 2);
  d = dl__shape_dim("dl_t_stack", xs[0], dim, 1);
  if (xs[0]->ndim >= DL_MAX_DIMS)
    DL_PANIC(xs[0]->ctx, "dl_t_stack", "stacking %s would need %d dimensions (at most %d)",
             DL_SHAPESTR(xs[0]), xs[0]->ndim + 1, DL_MAX_DIMS);
  for (e = 0, k = 0; e <= xs[0]->ndim; e++) sh[e] = e == d ? n : xs[0]->shape[k++];
  y = dl_tape_out(tp, "dl_t_stack", xs[0]->dtype, xs[0]->ndim + 1, sh);
  for (k = 0; k < n; k++) {
    dl_tensor v = dl__shape_select(y, d, k);
    dl__shape_move(&v, xs[k], 0);
  }
  if (dl_tangent_wants(n, xs)) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    for (k = 0; k < n; k++)
      if (xs[k]->tangent) {
        dl_tensor v = dl__shape_select(ty, d, k);
        dl__shape_move(&v, xs[k]->tangent, 0);
      }
  }
  if ((nd = dl_tape_record_n(tp, "dl_t_stack", dl__t_stack_bw, y, n, xs)) != NULL) {
    nd->i[0] = d;
    nd->flags |= DL_NODE_HVP_LINEAR;
  }
  return y;
}

/* >>pad -------------------------------------------------------------------- */

/* The part of a (x's shape) and b (padded shape) that correspond under
 * lr = (left, right) per dimension: a and b become views of it. */
DL_API void dl__pad_region(dl_tensor *a, dl_tensor *b, const int64_t *lr) {
  int d;
  for (d = 0; d < a->ndim; d++) {
    int64_t L = lr[2 * d], R = lr[2 * d + 1], n = a->shape[d];
    int64_t xs = L < 0 ? -L : 0, xe = n - (R < 0 ? -R : 0), len = xe > xs ? xe - xs : 0;
    int64_t ys = L > 0 ? L : 0;
    if (!L && !R) continue;
    if (len == 0) xs = ys = 0;
    *a = dl_view_slice(a, d, xs, xs + len, 1);
    *b = dl_view_slice(b, d, ys, ys + len, 1);
  }
}
#ifdef DL_USE_CUDA
/* The left pads lo[d] of lr's (left, right) pairs. */
DL_API void dl__pad_lo(int ndim, const int64_t *lr, int64_t *lo) {
  int d;
  for (d = 0; d < ndim; d++) lo[d] = lr[2 * d];
}
/* dl_t_pad's forward on the device: y (and y's tangent when x has one) in
 * one pass each: x's part, the rest the value (the tangent: zero). */
DL_API void dl__t_pad_gpu(dl_tape *tp, dl_tensor *x, dl_tensor *y, const int64_t *lr, double value) {
  dlg_handle *h = dl__gpu_h(y, "dl_t_pad");
  dl_tensor *v = dl__shape_host_out(tp, "dl_t_pad", x->dtype, 0, NULL);
  int64_t lo[DL_MAX_DIMS], zero = 0;
  int es = (int)dl_dtype_size(x->dtype);
  dl__pad_lo(x->ndim, lr, lo);
  dl_tensor_fill(v, value); /* the value in x's dtype, as the CPU's fill writes it */
  dl__gpu_ok(y, "dl_t_pad", dlg_pad(h, es, x->ndim, y->shape, y->data, x->data, x->shape, x->strides, lo, v->data));
  if (x->tangent) {
    y->tangent = dl_tape_out(tp, "forward mode", y->dtype, y->ndim, y->shape);
    dl__gpu_ok(y, "dl_t_pad", dlg_pad(h, es, x->ndim, y->shape, y->tangent->data, x->tangent->data,
                                      x->tangent->shape, x->tangent->strides, lo, &zero));
  }
}
/* dl_t_pad's backward on the device: gx += the part of gy that came from x. */
DL_API void dl__t_pad_bw_gpu(dl_tensor *gx, const dl_tensor *gy, const int64_t *lr) {
  int64_t lo[DL_MAX_DIMS];
  dl__ops_same_device("dl_t_pad", gx, gy);
  if (!gx->numel || !gy->numel) return;
  dl__pad_lo(gx->ndim, lr, lo);
  dl__gpu_ok(gx, "dl_t_pad", dlg_pad_backward(dl__gpu_h(gx, "dl_t_pad"), (int)gx->dtype, gx->ndim, gx->shape, gx->data,
                                              gx->strides, gy->shape, gy->data, gy->strides, lo));
}
#endif
DL_API void dl__t_pad_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]);
#ifdef DL_USE_CUDA
  if (gx && (gx->device == DL_CUDA || n->out->grad->device == DL_CUDA)) {
    dl__t_pad_bw_gpu(gx, n->out->grad, (const int64_t *)n->saved[0]->data);
    return;
  }
#endif
  if (gx && gx->numel && n->out->numel) {
    dl_tensor a = dl__view_base(gx), b = dl__view_base(n->out->grad);
    dl__pad_region(&a, &b, (const int64_t *)n->saved[0]->data);
    dl__shape_move(&a, &b, 1);
  }
}
/* torch.nn.functional.pad(x, pads, value=value), constant mode: pads holds
 * npairs (left, right) pairs, the first for x's LAST dimension, the next for
 * the one before it, ... (npairs <= rank). Negative pads crop; a dimension
 * may not end up negative. Contiguous, in the tape's arena until the
 * rewind. Backward: gx += the part of gy that came from x. */
DL_API dl_tensor *dl_t_pad(dl_tape *tp, dl_tensor *x, int npairs, const int64_t *pads, double value) {
  int64_t sh[DL_MAX_DIMS];
  dl_tensor *y, *lrt;
  int64_t *lr;
  dl_node *n;
  int p;
  if (npairs < 0 || npairs > x->ndim || (npairs > 0 && !pads))
    DL_PANIC(x->ctx, "dl_t_pad", "%d (left, right) pairs for %s (at most one per dimension)", npairs,
             DL_SHAPESTR(x));
#ifdef DL_USE_CUDA
  if (dl__shape_on_gpu(tp, "dl_t_pad", x)) { /* the pads are read on the host: host memory */
    lrt = dl__shape_host_out(tp, "dl_t_pad", DL_I64, DL_SHAPE(2 * (x->ndim ? x->ndim : 1)));
    memset(lrt->data, 0, (size_t)lrt->numel * sizeof(int64_t));
  } else
#endif
  lrt = dl_tape_zeros(tp, "dl_t_pad", DL_I64, DL_SHAPE(2 * (x->ndim ? x->ndim : 1)));
  lr = (int64_t *)lrt->data;
  memcpy(sh, x->shape, sizeof sh);
  for (p = 0; p < npairs; p++) {
    int d = x->ndim - 1 - p;
    lr[2 * d] = pads[2 * p];
    lr[2 * d + 1] = pads[2 * p + 1];
    sh[d] = x->shape[d] + pads[2 * p] + pads[2 * p + 1];
    if (sh[d] < 0)
      DL_PANIC(x->ctx, "dl_t_pad", "pads %s make dimension %d of %s negative (%lld)",
               dl__shape_list(2 * npairs, pads).s, d, DL_SHAPESTR(x), (long long)sh[d]);
  }
  y = dl_tape_out(tp, "dl_t_pad", x->dtype, x->ndim, sh);
#ifdef DL_USE_CUDA
  if (y->device == DL_CUDA) {
    dl__t_pad_gpu(tp, x, y, lr, value);
    if ((n = dl_tape_record(tp, "dl_t_pad", dl__t_pad_bw, y, x, NULL, NULL)) != NULL) {
      n->saved[0] = lrt;
      n->flags |= DL_NODE_HVP_LINEAR;
    }
    return y;
  }
#endif
  dl_tensor_fill(y, value);
  if (x->numel && y->numel) {
    dl_tensor a = dl__view_base(x), b = dl__view_base(y);
    dl__pad_region(&a, &b, lr);
    dl__shape_move(&b, &a, 0);
  }
  if (x->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    if (x->numel && y->numel) {
      dl_tensor a = dl__view_base(x->tangent), b = dl__view_base(ty);
      dl__pad_region(&a, &b, lr);
      dl__shape_move(&b, &a, 0);
    }
  }
  if ((n = dl_tape_record(tp, "dl_t_pad", dl__t_pad_bw, y, x, NULL, NULL)) != NULL) {
    n->saved[0] = lrt;
    n->flags |= DL_NODE_HVP_LINEAR;
  }
  return y;
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_OPS_SHAPE_H */
