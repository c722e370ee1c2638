/* dl/ops/sparse.h - embedding (row-sparse weight gradient) and dropout.
 * Included by dl/ops.h (see there for the conventions every op follows).
 *
 *   dl_tensor *e = dl_t_embedding(tp, table, tokens);    // [B, T] -> [B, T, D]
 *   dl_tensor *h = dl_t_dropout(tp, e, 0.1, &rng, train);
 *
 * Embedding gradients. When the weight is a leaf (a parameter), backward
 * does not touch its dense .grad: the rows the indices selected are added
 * into its row-sparse gradient (tape.h's dl_sgrad, weight->sgrad), so a step
 * costs O(rows used x D), not O(V x D). The full gradient of such a weight is
 * its dense .grad (what other ops that use it added, e.g. a tied output
 * projection) plus the sparse rows (dl_sgrad_add_to densifies them);
 * dl_zero_grad clears both. When the weight is an op's output, its gradient
 * is dense, like any other op's.
 *
 * On the GPU (weight and output device tensors; the indices may be on
 * either side). The indices are read on the host (a device index tensor is
 * copied there first, which waits for the device) and checked with the
 * CPU's message; the checked rows go to the kernels (dl/gpu/sparse.h), which
 * cannot read outside the weight. Backward adds rows with dlg_rows_scatter:
 * grouped by destination row on the host, each row summed in index order
 * by one thread, so the result is the CPU's, bit for bit, with no atomics.
 * A leaf weight's row-sparse gradient keeps its bookkeeping on the host
 * (rows in first-touch order, slot per row, as tape.h's dl_sgrad) and its
 * values [cap, D] in device memory of the weight's device: new rows are
 * appended on the host, zeroed on the device with one memset of the new
 * tail, and the capacity doubles as on the CPU (a device copy of the old
 * rows). Dropout draws its mask on the device from the same counter-based
 * hash as the CPU (core.h's dl_rng_at), so element i's mask is the CPU's;
 * the mask stays in device scratch for backward.
 */
#ifndef DL_OPS_SPARSE_H
#define DL_OPS_SPARSE_H

#include "core.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY /* the library's code (nvcc sees only the scalar math) */

/* >>embedding -------------------------------------------------------------- */

#ifdef DL_USE_CUDA

/* The row-sparse gradient s of device weight w: adds the rows of
 * rows[0..n) it does not hold yet, in first-touch order (their values zeroed
 * on the device), and sets slots[i] to the slot of rows[i]. s->values is
 * device memory of w's device (grown by doubling, as dl_sgrad_row does on
 * the host). */
DL_API void dl__sgrad_touch_gpu(dl_sgrad *s, const dl_tensor *w, const int64_t *rows, int64_t n, int64_t *slots) {
  const char *const op = "dl_t_embedding";
  dlg_handle *h = dl__gpu_h(w, op);
  const size_t rowb = dl_dtype_size(s->dtype) * (size_t)s->width;
  const int64_t k0 = s->nnz;
  int64_t i, fresh = 0;
  for (i = 0; i < n; i++) /* mark the rows not held yet */
    if (s->slot[rows[i]] == -1) {
      s->slot[rows[i]] = -2;
      fresh++;
    }
  if (s->nnz + fresh > s->cap) { /* grow: rows on the host, values on the device */
    int64_t cap = s->cap ? s->cap : 16, *nr;
    void *nv = NULL;
    while (cap < s->nnz + fresh) cap *= 2;
    if (cap > s->nrows) cap = s->nrows;
    nr = (int64_t *)dl_alloc(s->ctx, sizeof(int64_t) * (size_t)cap);
    if (!nr || dl_gpu_alloc(w->ctx->gpu, &nv, rowb * (size_t)cap + 1) != DL_OK) {
      dl_free(s->ctx, nr);
      DL_NOMEM(w->ctx, op, "cannot grow the sparse gradient of %s to %lld rows of %zu bytes", DL_SHAPESTR(w),
               (long long)cap, rowb);
    }
    if (s->nnz) {
      memcpy(nr, s->rows, sizeof(int64_t) * (size_t)s->nnz);
      dl__gpu_ok(w, op, dlg_copy(h, nv, s->values, rowb * (size_t)s->nnz, DLG_D2D));
    }
    dl_free(s->ctx, s->rows);
    if (s->values) dl_gpu_free(w->ctx->gpu, s->values);
    s->rows = nr;
    s->values = nv;
    s->cap = cap;
  }
  for (i = 0; i < n; i++) {
    const int64_t r = rows[i];
    if (s->slot[r] == -2) {
      s->slot[r] = s->nnz;
      s->rows[s->nnz++] = r;
    }
    slots[i] = s->slot[r];
  }
  if (s->nnz > k0 && rowb)
    dl__gpu_ok(w, op, dlg_memset0(h, (char *)s->values + rowb * (size_t)k0, rowb * (size_t)(s->nnz - k0)));
}
#endif

/* What the embedding's custom-op callbacks share (tape arena, one per call). */
typedef struct dl__embedding_info {
  const int64_t *rows;  /* [n] the indices, row-major over idx, checked in [0, V) */
  int64_t *slots;       /* [n] backward scratch: the sparse slot of each index */
  int64_t n;            /* idx->numel */
  int64_t width;        /* D */
  dl_ctx *ctx;          /* threads and parallel threshold */
} dl__embedding_info;

/* dst [n, D] contiguous = rows of src [V, D] (any strides) picked by info. */
DL_API void dl__embedding_gather(dl_tensor *dst, const dl_tensor *src, const dl__embedding_info *e) {
  const int64_t n = e->n, D = e->width, s0 = src->strides[0], s1 = src->strides[1];
  if (n == 0 || D == 0) return;
#ifdef DL_USE_CUDA
  if (dst->device == DL_CUDA || src->device == DL_CUDA) {
    dl__ops_same_device("dl_t_embedding", dst, src);
    dl__gpu_ok(dst, "dl_t_embedding", dlg_embedding_forward(dl__gpu_h(dst, "dl_t_embedding"), (int)dst->dtype,
                                                            dst->data, src->data, s0, s1, src->shape[0], D, e->rows, n));
    return;
  }
#endif
  if (dst->dtype == DL_F32) {
    float *y = (float *)dst->data;
    const float *w = (const float *)src->data;
    DL_PARALLEL_FOR(e->ctx, n * D, n, i, {
      const float *r = w + e->rows[i] * s0;
      float *o = y + i * D;
      int64_t j;
      if (s1 == 1) memcpy(o, r, sizeof(float) * (size_t)D);
      else
        for (j = 0; j < D; j++) o[j] = r[j * s1];
    });
  } else {
    double *y = (double *)dst->data;
    const double *w = (const double *)src->data;
    DL_PARALLEL_FOR(e->ctx, n * D, n, i, {
      const double *r = w + e->rows[i] * s0;
      double *o = y + i * D;
      int64_t j;
      if (s1 == 1) memcpy(o, r, sizeof(double) * (size_t)D);
      else
        for (j = 0; j < D; j++) o[j] = r[j * s1];
    });
  }
}

DL_API void dl__embedding_forward(dl_tensor *out, dl_tensor *const *in, int nin, void *user) {
  (void)nin;
  dl__embedding_gather(out, in[0], (const dl__embedding_info *)user);
}
DL_API void dl__embedding_jvp(dl_tensor *tout, const dl_tensor *out, dl_tensor *const *in,
                              dl_tensor *const *tin, int nin, void *user) {
  (void)out;
  (void)in;
  (void)nin;
  if (tin[0]) dl__embedding_gather(tout, tin[0], (const dl__embedding_info *)user);
}

/* base[key[i]] row += gy row i, for i = 0..n in order. Rows are shared out
 * among `parts` parts by key (one per thread when the team runs), so each
 * row's sum is taken by one part in index order: the result does not depend
 * on the thread count. */
#define DL__EMBEDDING_SCATTER(T)                                                       \
  do {                                                                                 \
    const T *g = (const T *)gy->data;                                                  \
    T *b = (T *)base;                                                                  \
    const int64_t parts = n * D >= dl_ctx_parallel_threshold(e->ctx) ? dl_ctx_threads(e->ctx) : 1; \
    DL_PARALLEL_FOR(e->ctx, n * D, parts, part_, {                                     \
      int64_t i_, j_;                                                                  \
      for (i_ = 0; i_ < n; i_++) {                                                     \
        T *dst_;                                                                       \
        const T *src_ = g + i_ * D;                                                    \
        if (key[i_] % parts != part_) continue;                                        \
        dst_ = b + key[i_] * D;                                                        \
        for (j_ = 0; j_ < D; j_++) dst_[j_] += src_[j_];                               \
      }                                                                                \
    });                                                                                \
  } while (0)

DL_API void dl__embedding_scatter(const dl_tensor *gy, void *base, const int64_t *key,
                                  const dl__embedding_info *e) {
  const int64_t n = e->n, D = e->width;
  if (n == 0 || D == 0) return;
  if (gy->dtype == DL_F32) DL__EMBEDDING_SCATTER(float);
  else DL__EMBEDDING_SCATTER(double);
}

DL_API void dl__embedding_backward(dl_tape *tp, const dl_tensor *gy, const dl_tensor *out,
                                   dl_tensor *const *in, int nin, void *user) {
  dl__embedding_info *e = (dl__embedding_info *)user;
  dl_tensor *w = in[0];
  const dl_tensor *g = gy;
  (void)out;
  (void)nin;
  if (!(w->flags & DL_TENSOR_REQUIRES_GRAD)) return;
#ifdef DL_USE_CUDA
  if (gy->device == DL_CUDA) {
    dlg_handle *h = dl__gpu_h(gy, "dl_t_embedding");
    dl__ops_same_device("dl_t_embedding", gy, w);
    g = dl__t_contig(tp, "dl_t_embedding", (dl_tensor *)(uintptr_t)gy);
    if (w->node) { /* an op's output: dense gradient */
      dl_tensor *gw = dl_tape_grad(tp, w);
      dl__gpu_ok(gy, "dl_t_embedding", dlg_rows_scatter(h, (int)gy->dtype, gw->data, gw->shape[0], e->width, e->rows,
                                                        e->n, g->data));
    } else { /* a leaf: only the touched rows, in first-touch order */
      dl_sgrad *s = dl_tape_sgrad(tp, w);
      if (e->n == 0) return;
      if (!e->slots) e->slots = (int64_t *)dl_tape_scratch(tp, "dl_t_embedding", sizeof(int64_t) * (size_t)e->n);
      dl__sgrad_touch_gpu(s, w, e->rows, e->n, e->slots);
      dl__gpu_ok(gy, "dl_t_embedding", dlg_rows_scatter(h, (int)gy->dtype, s->values, s->nnz, e->width, e->slots,
                                                        e->n, g->data));
    }
    return;
  }
#endif
  if (!dl_tensor_is_contiguous(g)) g = dl_tensor_contiguous(dl_tape_arena(tp), gy);
  if (!g) dl__tape_nomem(tp, "dl_t_embedding", "the gradient", (size_t)gy->numel * dl_dtype_size(gy->dtype));
  if (tp->hvp) { /* dl_hvp: the lookup is linear in the weight, so d(gw) = scatter(d(gy)), into the dense H v */
    const dl_tensor *tg = gy->tangent;
    dl_tensor *gw = dl_tape_grad(tp, w);
    if (!dl_tensor_is_contiguous(tg)) tg = dl_tensor_contiguous(dl_tape_arena(tp), gy->tangent);
    if (!tg) dl__tape_nomem(tp, "dl_t_embedding", "the gradient's tangent", (size_t)gy->numel * dl_dtype_size(gy->dtype));
    dl__embedding_scatter(tg, gw->tangent->data, e->rows, e);
  }
  if (w->node) { /* an op's output: dense gradient */
    dl_tensor *gw = dl_tape_grad(tp, w);
    dl__embedding_scatter(g, gw->data, e->rows, e);
  } else { /* a leaf: only the touched rows, in first-touch order */
    dl_sgrad *s = dl_tape_sgrad(tp, w);
    int64_t i;
    if (e->n == 0) return;
    if (!e->slots) e->slots = (int64_t *)dl_tape_scratch(tp, "dl_t_embedding", sizeof(int64_t) * (size_t)e->n);
    for (i = 0; i < e->n; i++) {
      (void)dl_sgrad_row(s, e->rows[i]); /* adds the row (zeroed) on first touch */
      e->slots[i] = s->slot[e->rows[i]];
    }
    dl__embedding_scatter(g, s->values, e->slots, e);
  }
}

DL__GLOBAL(const dl_custom_op dl__embedding_op,
           {"dl_t_embedding", dl__embedding_forward, dl__embedding_backward, dl__embedding_jvp});

/* Embedding lookup: y[i..., :] = weight[idx[i...], :].
 * weight [V, D] f32 or f64 (may be a strided view); idx i64 or i32 of any
 * shape (may be strided; 0-d gives y [D]), every index in [0, V) (an index
 * out of range panics naming its value, its position in idx and V).
 * Returns y [idx..., D], contiguous, in the tape's arena (valid until the
 * rewind). Gradient: a leaf weight gets its row-sparse gradient (weight->sgrad:
 * the touched rows once each, in first-touch order, repeated indices summed;
 * untouched rows absent); a weight that is an op's output gets a dense one.
 * Tangent: the rows of weight's tangent. */
DL_API dl_tensor *dl_t_embedding(dl_tape *tp, dl_tensor *weight, const dl_tensor *idx) {
  const char *const op = "dl_t_embedding";
  dl__embedding_info *e;
  const dl_tensor *ix;
  int64_t shape[DL_MAX_DIMS], *rows, i, V;
  dl_tensor *in[2];
  int d, contig;
  if ((weight->dtype != DL_F32 && weight->dtype != DL_F64) || (idx->dtype != DL_I64 && idx->dtype != DL_I32))
    DL_PANIC(weight->ctx, op, "dtype mismatch: weight %s (f32 or f64), indices %s (i64 or i32)",
             DL_SHAPESTR(weight), DL_SHAPESTR(idx));
  if (weight->ndim != 2 || idx->ndim + 1 > DL_MAX_DIMS)
    DL_PANIC(weight->ctx, op, "shape mismatch: weight %s must be [V, D] and indices %s have at most %d dimensions",
             DL_SHAPESTR(weight), DL_SHAPESTR(idx), DL_MAX_DIMS - 1);
  V = weight->shape[0];
  for (d = 0; d < idx->ndim; d++) shape[d] = idx->shape[d];
  shape[idx->ndim] = weight->shape[1];
  /* the indices, row-major, as int64, each checked */
  e = (dl__embedding_info *)dl_tape_scratch(tp, op, sizeof *e);
  rows = (int64_t *)dl_tape_scratch(tp, op, sizeof(int64_t) * (size_t)idx->numel);
  ix = idx;
#ifdef DL_USE_CUDA
  if (idx->device == DL_CUDA && idx->numel) { /* read on the host: one copy, which waits for the device */
    const dl_tensor *ic = dl_tensor_is_contiguous(idx) ? idx : dl__t_contig(tp, op, (dl_tensor *)(uintptr_t)idx);
    dl_tensor *hi = dl_tensor_new(&tp->arena, idx->dtype, idx->ndim, idx->shape);
    if (!hi) dl__tape_nomem(tp, op, "the indices", (size_t)idx->numel * dl_dtype_size(idx->dtype));
    dl_tensor_copy(hi, ic);
    ix = hi;
  }
#endif
  contig = dl_tensor_is_contiguous(ix);
  for (i = 0; i < idx->numel; i++) {
    int64_t off = contig ? i : dl__offset_of_linear(ix, i);
    int64_t r = ix->dtype == DL_I64 ? ((const int64_t *)ix->data)[off]
                                    : (int64_t)((const int32_t *)ix->data)[off];
    if (r < 0 || r >= V) {
      char pos[160];
      size_t at = 0;
      int64_t rest = i;
      int64_t mi[DL_MAX_DIMS];
      for (d = idx->ndim - 1; d >= 0; d--) {
        mi[d] = rest % idx->shape[d];
        rest /= idx->shape[d];
      }
      pos[0] = 0;
      for (d = 0; d < idx->ndim && at < sizeof pos; d++)
        at += (size_t)snprintf(pos + at, sizeof pos - at, d ? ", %lld" : "%lld", (long long)mi[d]);
      DL_PANIC(weight->ctx, op,
               "index %lld at position [%s] of indices %s is out of range [0, %lld) for weight %s",
               (long long)r, pos, DL_SHAPESTR(idx), (long long)V, DL_SHAPESTR(weight));
    }
    rows[i] = r;
  }
  e->rows = rows;
  e->n = idx->numel;
  e->width = weight->shape[1];
  e->ctx = weight->ctx;
  e->slots = NULL;
  in[0] = weight;
  in[1] = (dl_tensor *)(uintptr_t)idx; /* read only */
  if (dl_tape_wants(tp, 1, in) && !weight->node)
    e->slots = (int64_t *)dl_tape_scratch(tp, op, sizeof(int64_t) * (size_t)idx->numel);
  {
    dl_tensor *y = dl__t_custom(tp, &dl__embedding_op, e, 2, in, idx->ndim + 1, shape); /* device branches inside */
    if (tp->last && tp->last->out == y) tp->last->flags |= DL_NODE_HVP; /* its rule carries dl_hvp's tangents */
    return y;
  }
}

/* >>dropout ---------------------------------------------------------------- */

DL_API void dl__t_dropout_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]), *gy = n->out->grad;
  const uint8_t *m = (const uint8_t *)n->user;
  const int64_t N = gy->numel;
  if (!gx) return;
  if (!dl_tensor_is_contiguous(gy)) gy = dl__t_contig(tp, "dl_t_dropout", gy);
#ifdef DL_USE_CUDA
  if (gx->device == DL_CUDA) { /* the mask is device scratch (dl_t_dropout) */
    dl__gpu_ok(gx, "dl_t_dropout", dlg_dropout_apply(dl__gpu_h(gx, "dl_t_dropout"), (int)gx->dtype, N, gx->data,
                                                     gy->data, m, n->p[0], 1));
    return;
  }
#endif
  if (gx->dtype == DL_F32) {
    float *g = (float *)gx->data, s = (float)n->p[0];
    const float *u = (const float *)gy->data;
    DL_PARALLEL_RANGE(gy->ctx, N, N, i, { g[i] += u[i] * (s * (float)m[i]); });
  } else {
    double *g = (double *)gx->data, s = n->p[0];
    const double *u = (const double *)gy->data;
    DL_PARALLEL_RANGE(gy->ctx, N, N, i, { g[i] += u[i] * (s * (double)m[i]); });
  }
}

/* y[i] = x[i] * (m[i] * s) with x contiguous (branch-free: the mask is random). */
DL_API void dl__dropout_apply(dl_tensor *y, const dl_tensor *x, const uint8_t *m, double s) {
  const int64_t N = y->numel;
  if (y->dtype == DL_F32) {
    float *o = (float *)y->data, sf = (float)s;
    const float *a = (const float *)x->data;
    DL_PARALLEL_RANGE(y->ctx, N, N, i, { o[i] = a[i] * (sf * (float)m[i]); });
  } else {
    double *o = (double *)y->data;
    const double *a = (const double *)x->data;
    DL_PARALLEL_RANGE(y->ctx, N, N, i, { o[i] = a[i] * (s * (double)m[i]); });
  }
}

/* Inverted dropout. With train == 0 or p == 0 it returns x itself (no copy,
 * no node, the rng untouched). Otherwise y = x * mask / (1 - p), where
 * element i (row-major) is kept when the uniform draw
 * dl__u01_f64(dl_rng_at(rng, rng->counter + i)) >= p; then rng->counter
 * advances by x->numel. The mask depends only on the rng state, not on the
 * thread count or dtype, so a copied dl_rng replays it. p in [0, 1]; p == 1
 * gives zeros. A dropped element is x * 0 (NaN where x is inf or NaN, as in
 * PyTorch). x f32 or f64, any strides; y contiguous in the tape's arena
 * (valid until the rewind). Backward: gx += gy * mask / (1 - p); the tangent
 * gets the same mask. */
DL_API dl_tensor *dl_t_dropout(dl_tape *tp, dl_tensor *x, double p, dl_rng *rng, int train) {
  const char *const op = "dl_t_dropout";
  dl_tensor *y, *xc;
  dl_node *nd;
  uint8_t *m;
  int64_t N;
  uint64_t base;
  double s;
  if (x->dtype != DL_F32 && x->dtype != DL_F64)
    DL_PANIC(x->ctx, op, "dtype mismatch: input %s must be f32 or f64", DL_SHAPESTR(x));
  if (!(p >= 0.0 && p <= 1.0))
    DL_PANIC(x->ctx, op, "probability p = %g is not in [0, 1] (input %s)", p, DL_SHAPESTR(x));
  if (!train || p == 0.0) return x;
  if (!rng) DL_PANIC(x->ctx, op, "training dropout of %s needs an rng, got NULL", DL_SHAPESTR(x));
  N = x->numel;
  s = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  y = dl_tape_out(tp, op, x->dtype, x->ndim, x->shape);
#ifdef DL_USE_CUDA
  dl__ops_same_device(op, x, y); /* a device tensor on a host tape, or the reverse */
  if (x->device == DL_CUDA) { /* the same mask, drawn on the device; kept there for backward */
    dlg_handle *h = dl__gpu_h(x, op);
    m = (uint8_t *)dl_tape_dev_scratch(tp, op, (size_t)N);
    xc = dl__t_contig(tp, op, x);
    dl__gpu_ok(x, op, dlg_dropout(h, (int)x->dtype, N, xc->data, y->data, m, rng->key, rng->counter,
                                  (uint64_t)ceil(p * 9007199254740992.0), s));
    rng->counter += (uint64_t)N;
    if (x->tangent) {
      dl_tensor *ty = dl_tape_tangent(tp, y);
      dl__ops_same_device(op, x, x->tangent);
      dl__gpu_ok(x, op, dlg_dropout_apply(h, (int)x->dtype, N, ty->data, dl__t_contig(tp, op, x->tangent)->data, m, s, 0));
    }
    if ((nd = dl_tape_record(tp, op, dl__t_dropout_bw, y, x, NULL, NULL)) != NULL) {
    nd->flags |= DL_NODE_HVP_LINEAR; /* a fixed mask: linear in the gradient */
      nd->flags |= DL_NODE_HVP_LINEAR; /* a fixed mask: linear in the gradient */
      nd->p[0] = s;
      nd->p[1] = p;
      nd->user = m;
    }
    return y;
  }
#endif
  m = (uint8_t *)dl_tape_scratch(tp, op, (size_t)N);
  base = rng->counter;
  xc = dl__t_contig(tp, op, x);
  { /* mask and output in one pass, branch-free. dl__u01_f64(u) >= p is
     * (u >> 11) * 2^-53 >= p, i.e. (u >> 11) >= ceil(p * 2^53): exact, as
     * both sides are integers below 2^53 + 1 (p == 1 keeps nothing). */
    const dl_rng r = *rng;
    const uint64_t thr = (uint64_t)ceil(p * 9007199254740992.0);
    if (x->dtype == DL_F32) {
      float *o = (float *)y->data, sf = (float)s;
      const float *a = (const float *)xc->data;
      DL_PARALLEL_RANGE(x->ctx, N, N, i, {
        const uint8_t k = (uint8_t)((dl_rng_at(&r, base + (uint64_t)i) >> 11) >= thr);
        m[i] = k;
        o[i] = a[i] * (sf * (float)k);
      });
    } else {
      double *o = (double *)y->data;
      const double *a = (const double *)xc->data;
      DL_PARALLEL_RANGE(x->ctx, N, N, i, {
        const uint8_t k = (uint8_t)((dl_rng_at(&r, base + (uint64_t)i) >> 11) >= thr);
        m[i] = k;
        o[i] = a[i] * (s * (double)k);
      });
    }
  }
  rng->counter += (uint64_t)N;
  if (x->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    dl__dropout_apply(ty, dl__t_contig(tp, op, x->tangent), m, s);
  }
  if ((nd = dl_tape_record(tp, op, dl__t_dropout_bw, y, x, NULL, NULL)) != NULL) {
    nd->flags |= DL_NODE_HVP_LINEAR; /* a fixed mask: linear in the gradient */
    nd->p[0] = s;
    nd->p[1] = p;
    nd->user = m;
  }
  return y;
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_OPS_SPARSE_H */
