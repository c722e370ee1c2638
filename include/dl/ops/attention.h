/* dl/ops/attention.h - attention on the tape, PyTorch's layout:
 * multi-head attention (composed), scaled dot-product attention (one fused
 * op that never stores the scores) and rotary position embeddings.
 * Included by dl/ops.h (see there for the conventions every op follows).
 *
 *   dl_tensor *y = dl_t_multi_head_attention(tp, x, x, x, w_in, b_in, w_out, b_out,
 *                                            4, NULL, 1);   // causal self-attention
 *
 * The same computation as torch.nn.MultiheadAttention(E, num_heads,
 * batch_first=True) called with need_weights=False and dropout 0, with its
 * parameters in_proj_weight [3E, E] (rows: q, k, v projections in that
 * order), in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E].
 *
 * It is composed of the library's differentiable ops (linear, reshape,
 * permute, matmul, softmax, add), so gradients and forward-mode tangents
 * come from theirs, and a tensor passed as several of q, k, v (self-
 * attention) collects the sum of its gradients. Self-attention (q, k and v
 * the same tensor) projects with one GEMM against the whole in_proj_weight;
 * k == v (encoder-decoder attention) with one GEMM against its last 2E rows.
 * On a device tape (DL_USE_CUDA) every step runs on the GPU through those
 * ops; only the additive mask [Tq, Tk] is built on the host and copied over
 * (see dl__mha_mask).
 */
#ifndef DL_OPS_ATTENTION_H
#define DL_OPS_ATTENTION_H

#include "core.h"
#include "shape.h"
#include "reduce.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY /* the library's code (nvcc sees only the scalar math) */

/* >>multi-head attention ------------------------------------------------------ */

/* p [B, T, n*E] (contiguous, the n projections side by side) as n tensors
 * [B, nh, T, hd] (contiguous, E = nh*hd): one copy for all n. */
DL_API void dl__mha_split(dl_tape *tp, dl_tensor *p, int n, int64_t nh, int64_t hd, dl_tensor **out) {
  const int64_t B = p->shape[0], T = p->shape[1];
  static const int perm[5] = {2, 0, 3, 1, 4};
  dl_tensor *a = dl_t_reshape(tp, p, 5, DL__I64S(B, T, n, nh, hd));
  int k;
  a = dl_t_contiguous(tp, dl_t_permute(tp, a, perm)); /* [n, B, nh, T, hd] */
  for (k = 0; k < n; k++)
    out[k] = dl_t_reshape(tp, dl_t_slice(tp, a, 0, k, k + 1, 1), 4, DL__I64S(B, nh, T, hd));
}

/* The additive mask [Tq, Tk] in q's dtype (tape arena): attn_mask's values
 * (float) or -inf where it is nonzero (u8), and -inf where causal and
 * j > i + off (off 0: PyTorch's square mask; Tk - Tq: the queries are the
 * last Tq positions, as with a KV cache).
 * On a device tape (DL_USE_CUDA) the mask is built on the host, in scratch of
 * the tape's host arena, and copied to the device tensor returned; an
 * attn_mask on the device is first copied to the host (both copies wait for
 * the device: the mask is [Tq, Tk], made once per call). */
DL_API dl_tensor *dl__mha_mask(dl_tape *tp, const char *op, const dl_tensor *q, const dl_tensor *attn_mask,
                               int causal, int64_t off, int64_t Tq, int64_t Tk) {
  dl_tensor *m = dl_tape_out(tp, op, q->dtype, DL_SHAPE(Tq, Tk)), *mh = m;
  int64_t i, j;
#ifdef DL_USE_CUDA
  if (m->device == DL_CUDA && !(mh = dl_tensor_new(&tp->arena, q->dtype, 2, m->shape)))
    dl__tape_nomem(tp, op, "the host mask", (size_t)(Tq * Tk) * dl_dtype_size(q->dtype));
  if (attn_mask && attn_mask->device == DL_CUDA) { /* its values on the host: contiguous on the device, then over */
    const dl_tensor *ac = attn_mask;
    dl_tensor *ah = dl_tensor_new(&tp->arena, attn_mask->dtype, 2, attn_mask->shape);
    if (!ah)
      dl__tape_nomem(tp, op, "a host copy of attn_mask", (size_t)attn_mask->numel * dl_dtype_size(attn_mask->dtype));
    if (!dl_tensor_is_contiguous(attn_mask)) {
      dl_tensor *c = dl_tape_out(tp, op, attn_mask->dtype, 2, attn_mask->shape);
      if (c->device != DL_CUDA)
        DL_PANIC(tp->ctx, op, "attn_mask %s is a strided device tensor on a host tape", DL_SHAPESTR(attn_mask));
      dl_tensor_copy(c, attn_mask);
      ac = c;
    }
    dl_tensor_copy(ah, ac);
    attn_mask = ah;
  }
#endif
  for (i = 0; i < Tq; i++)
    for (j = 0; j < Tk; j++) {
      double v = 0.0;
      if (attn_mask) {
        double a = dl__get_at(attn_mask, i * attn_mask->strides[0] + j * attn_mask->strides[1]);
        v = attn_mask->dtype == DL_U8 ? (a != 0.0 ? -INFINITY : 0.0) : a;
      }
      if (causal && j > i + off) v = -INFINITY;
      dl__set_at(mh, i * Tk + j, v);
    }
#ifdef DL_USE_CUDA
  if (mh != m) dl_tensor_copy(m, mh); /* host to device */
#endif
  return m;
}

/* Checks the arguments of dl_t_multi_head_attention; panics naming what is
 * wrong and every shape. */
DL_API void dl__mha_validate(dl_tape *tp, const char *op, const dl_tensor *q, const dl_tensor *k,
                             const dl_tensor *v, const dl_tensor *wi, const dl_tensor *bi, const dl_tensor *wo,
                             const dl_tensor *bo, int num_heads, const dl_tensor *mask) {
  const char *why = NULL;
  char all[1600], whybuf[160];
  int64_t E;
  if (!q || !k || !v || !wi || !wo)
    DL_PANIC(tp->ctx, op, "q, k, v, in_proj_weight and out_proj_weight are required (q %s, k %s, v %s)",
             q ? DL_SHAPESTR(q) : "NULL", k ? DL_SHAPESTR(k) : "NULL", v ? DL_SHAPESTR(v) : "NULL");
  E = q->ndim == 3 ? q->shape[2] : 0;
  if ((q->dtype != DL_F32 && q->dtype != DL_F64) || k->dtype != q->dtype || v->dtype != q->dtype ||
      wi->dtype != q->dtype || wo->dtype != q->dtype || (bi && bi->dtype != q->dtype) || (bo && bo->dtype != q->dtype))
    why = "dtype mismatch (all f32 or all f64)";
  else if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || q->shape[0] != k->shape[0] || v->shape[0] != q->shape[0] ||
           k->shape[1] != v->shape[1] || E < 1 || k->shape[2] != E || v->shape[2] != E)
    why = "shape mismatch (expected q [B, Tq, E], k and v [B, Tk, E])";
  else if (num_heads < 1 || E % num_heads)
    why = "num_heads must divide the embedding size E";
  else if (wi->ndim != 2 || wi->shape[0] != 3 * E || wi->shape[1] != E || wo->ndim != 2 || wo->shape[0] != E ||
           wo->shape[1] != E || (bi && (bi->ndim != 1 || bi->shape[0] != 3 * E)) ||
           (bo && (bo->ndim != 1 || bo->shape[0] != E)))
    why = "shape mismatch (expected in_proj_weight [3E, E], in_proj_bias [3E], out_proj_weight [E, E], "
          "out_proj_bias [E])";
  else if (mask && (mask->ndim != 2 || mask->shape[0] != q->shape[1] || mask->shape[1] != k->shape[1] ||
                    (mask->dtype != q->dtype && mask->dtype != DL_U8))) {
    snprintf(whybuf, sizeof whybuf, "attn_mask must be [Tq, Tk] = [%lld, %lld] of q's dtype (added to the "
             "scores) or u8 (nonzero masks out)", (long long)q->shape[1], (long long)k->shape[1]);
    why = whybuf;
  }
  if (!why) return;
  snprintf(all, sizeof all, "q %s, k %s, v %s, in_proj_weight %s, in_proj_bias %s, out_proj_weight %s, "
           "out_proj_bias %s, attn_mask %s", DL_SHAPESTR(q), DL_SHAPESTR(k), DL_SHAPESTR(v), DL_SHAPESTR(wi),
           bi ? DL_SHAPESTR(bi) : "NULL", DL_SHAPESTR(wo), bo ? DL_SHAPESTR(bo) : "NULL",
           mask ? DL_SHAPESTR(mask) : "NULL");
  DL_PANIC(q->ctx ? q->ctx : tp->ctx, op, "%s: %s, num_heads %d, E = %lld", why, all, num_heads, (long long)E);
}

/* Multi-head attention (batch-first), like torch.nn.MultiheadAttention:
 *   q [B, Tq, E], k [B, Tk, E], v [B, Tk, E]; E = num_heads * hd;
 *   in_proj_weight [3E, E] = [W_q; W_k; W_v], in_proj_bias [3E] or NULL,
 *   out_proj_weight [E, E], out_proj_bias [E] or NULL;
 *   Q = q W_q^T + b_q, K = k W_k^T + b_k, V = v W_v^T + b_v, each split into
 *   num_heads heads of width hd along E;
 *   per head  A = softmax(Q_h K_h^T / sqrt(hd) + M) along the keys,
 *             O_h = A V_h;
 *   y = concat_h(O_h) out_proj_weight^T + out_proj_bias  -> [B, Tq, E].
 * M [Tq, Tk]: attn_mask's values when it is f32/f64 (q's dtype; added to
 * the scores), or -inf where a u8 (bool) attn_mask is nonzero (PyTorch's
 * bool mask: true = masked out); with causal != 0 also -inf where j > i
 * (torch's generate_square_subsequent_mask; for Tq != Tk the same rule).
 * attn_mask may be strided and gets no gradient. A query whose keys are all
 * masked gives NaN (as in PyTorch).
 * Backward: gradients to q, k, v (summed when they are the same tensor),
 * both weights and both biases. Output contiguous, in the tape's arena
 * (valid until the rewind), like every intermediate. */
DL_API dl_tensor *dl_t_multi_head_attention(dl_tape *tp, dl_tensor *q, dl_tensor *k, dl_tensor *v,
                                            dl_tensor *in_proj_weight, dl_tensor *in_proj_bias,
                                            dl_tensor *out_proj_weight, dl_tensor *out_proj_bias,
                                            int num_heads, const dl_tensor *attn_mask, int causal) {
  const char *const op = "dl_t_multi_head_attention";
  static const int back[4] = {0, 2, 1, 3};
  dl_tensor *heads[3], *qh, *kh, *vh, *s, *o;
  int64_t B, Tq, Tk, E, hd;
  dl__mha_validate(tp, op, q, k, v, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads,
                   attn_mask);
  B = q->shape[0];
  Tq = q->shape[1];
  Tk = k->shape[1];
  E = q->shape[2];
  hd = E / num_heads;

  /* projections (weights that are strided views are copied: linear reads w in place) */
  in_proj_weight = dl_t_contiguous(tp, in_proj_weight);
  out_proj_weight = dl_t_contiguous(tp, out_proj_weight);
  if (q == k && k == v) {
    dl__mha_split(tp, dl_t_linear(tp, q, in_proj_weight, in_proj_bias), 3, num_heads, hd, heads);
  } else {
    dl_tensor *wq = dl_t_slice(tp, in_proj_weight, 0, 0, E, 1);
    dl_tensor *bq = in_proj_bias ? dl_t_slice(tp, in_proj_bias, 0, 0, E, 1) : NULL;
    dl__mha_split(tp, dl_t_linear(tp, q, wq, bq), 1, num_heads, hd, heads);
    if (k == v) {
      dl_tensor *wkv = dl_t_slice(tp, in_proj_weight, 0, E, 3 * E, 1);
      dl_tensor *bkv = in_proj_bias ? dl_t_slice(tp, in_proj_bias, 0, E, 3 * E, 1) : NULL;
      dl__mha_split(tp, dl_t_linear(tp, k, wkv, bkv), 2, num_heads, hd, heads + 1);
    } else {
      dl_tensor *wk = dl_t_slice(tp, in_proj_weight, 0, E, 2 * E, 1);
      dl_tensor *wv = dl_t_slice(tp, in_proj_weight, 0, 2 * E, 3 * E, 1);
      dl_tensor *bk = in_proj_bias ? dl_t_slice(tp, in_proj_bias, 0, E, 2 * E, 1) : NULL;
      dl_tensor *bv = in_proj_bias ? dl_t_slice(tp, in_proj_bias, 0, 2 * E, 3 * E, 1) : NULL;
      dl__mha_split(tp, dl_t_linear(tp, k, wk, bk), 1, num_heads, hd, heads + 1);
      dl__mha_split(tp, dl_t_linear(tp, v, wv, bv), 1, num_heads, hd, heads + 2);
    }
  }
  qh = dl_t_mul_scalar(tp, heads[0], 1.0 / sqrt((double)hd)); /* [B, nh, Tq, hd] */
  kh = heads[1];                                              /* [B, nh, Tk, hd] */
  vh = heads[2];
  /* scores, mask, softmax over the keys, weighted values */
  s = dl_t_matmul(tp, qh, dl_t_transpose(tp, kh, 2, 3)); /* [B, nh, Tq, Tk] */
  if (attn_mask || causal) s = dl_t_add(tp, s, dl__mha_mask(tp, op, q, attn_mask, causal, 0, Tq, Tk));
  o = dl_t_matmul(tp, dl_t_softmax(tp, s, -1), vh); /* [B, nh, Tq, hd] */
  o = dl_t_reshape(tp, dl_t_permute(tp, o, back), 3, DL__I64S(B, Tq, E));
  return dl_t_linear(tp, o, out_proj_weight, out_proj_bias);
}


/* >>scaled dot-product attention ---------------------------------------------- */

/* Query rows per block and keys per tile of the fused kernels: a block's
 * scores [DL__SDPA_BQ, DL__SDPA_BK] (and in the backward their gradients),
 * its accumulators [DL__SDPA_BQ, Dv] and the tile's K and V transposed are
 * the only per-thread memory (about 83 KB in f32 at D = 64). Each product
 * of a block with a tile (S = Q K^T, P V, dP = dO V^T, dS K, P^T dO, dS^T Q)
 * runs through dl__sdpa_mm, which keeps four output rows by 16 columns in
 * registers; 64 query rows per block amortise the tile's transposition. */
#define DL__SDPA_BQ 64
#define DL__SDPA_BK 64

enum { DL__SDPA_FWD, DL__SDPA_TAN, DL__SDPA_BWD };

/* Where row i of unit n = (b, h) = (n / H, n % H) of an array starts:
 * b * lay.b + h * lay.h + i * lay.r elements from its base (its D or Dv
 * values contiguous from there). */
typedef struct dl__sdpa_lay {
  int64_t b; /* from one batch entry to the next */
  int64_t h; /* from one head to the next */
  int64_t r; /* from one row to the next */
} dl__sdpa_lay;
#define DL__SDPA_AT(A, lay, n, i) (((n) / (A)->H) * (A)->lay.b + ((n) % (A)->H) * (A)->lay.h + (i) * (A)->lay.r)

/* One call of the fused kernel over units n = 0 .. N-1 (a unit is one
 * (batch, head) pair: q [Tq, D], k [Tk, D], v [Tk, Dv], each with its
 * rows at a stride, as the layouts say). */
typedef struct dl__sdpa_args {
  int mode, causal;
  int64_t N, Tq, Tk, D, Dv, off; /* causal: query i sees keys j <= i + off */
  int64_t H;                     /* heads: unit n is (n / H, n % H) */
  dl__sdpa_lay lq, lk, lv;       /* q, k, v */
  dl__sdpa_lay lo;               /* o, go and to */
  dl__sdpa_lay lgq, lgk, lgv;    /* gq and tq, gk and tk, gv and tv */
  double scale;
  const void *q, *k, *v;
  void *o;                 /* FWD writes, TAN and BWD read */
  double *lse;             /* [N, Tq]: FWD writes max + log(sum of exp) per row */
  const void *tq, *tk, *tv; /* TAN: tangents (NULL = zero) */
  void *to;                /* TAN: the output's tangent */
  const void *go;          /* BWD: d loss / d o */
  void *gq, *gk, *gv;      /* BWD: accumulated into (NULL = not wanted) */
  unsigned char *scratch;  /* per worker: `per` bytes each */
  size_t per;
  int nw;                  /* workers with a scratch slot (1: the calling thread's only) */
} dl__sdpa_args;

/* Keys a row i may see in the tile starting at j0 of nk keys. */
DL_API int64_t dl__sdpa_lim(const dl__sdpa_args *A, int64_t i, int64_t j0, int64_t nk) {
  int64_t lim;
  if (!A->causal) return nk;
  lim = i + A->off + 1 - j0;
  return lim < nk ? lim : nk;
}

#define DL__SDPA_S(c) ((double)s[c])
#define DL__SDPA_KERNEL(T, SFX, EXP, W, VT)                                               \
  /* Y[a][0..w) += sum_b C[a*cr + b*cc] * X[b][0..w) for a < ny, b < nx (the \
   * tile products), each sum in the order of b. */                               \
  DL_API DL__GEMM_CONTRACT void dl__sdpa_mm_##SFX(T *Y, int64_t ys, const T *C, int64_t cr, int64_t cc, \
                                                  const T *X, int64_t xs, int64_t ny, int64_t nx, int64_t w) { \
    int64_t a, b, d = 0, e;                                                           \
    for (a = 0; a + 4 <= ny; a += 4) {                                                \
      const T *c = C + a * cr;                                                        \
      d = 0;                                                                          \
      DL__SDPA_MM_VEC(T, VT)                                                          \
      for (; d + W <= w; d += W) { /* four rows by W columns in registers */          \
        T y0[W], y1[W], y2[W], y3[W];                                                 \
        T *Y0 = Y + a * ys + d, *Y1 = Y0 + ys, *Y2 = Y1 + ys, *Y3 = Y2 + ys;          \
        for (e = 0; e < W; e++) {                                                     \
          y0[e] = Y0[e]; y1[e] = Y1[e]; y2[e] = Y2[e]; y3[e] = Y3[e];                 \
        }                                                                             \
        for (b = 0; b < nx; b++) {                                                    \
          const T *x = X + b * xs + d;                                                \
          const T c0 = c[b * cc], c1 = c[cr + b * cc], c2 = c[2 * cr + b * cc], c3 = c[3 * cr + b * cc]; \
          for (e = 0; e < W; e++) {                                                   \
            y0[e] += c0 * x[e]; y1[e] += c1 * x[e]; y2[e] += c2 * x[e]; y3[e] += c3 * x[e]; \
          }                                                                           \
        }                                                                             \
        for (e = 0; e < W; e++) {                                                     \
          Y0[e] = y0[e]; Y1[e] = y1[e]; Y2[e] = y2[e]; Y3[e] = y3[e];                 \
        }                                                                             \
      }                                                                               \
      if (d < w) /* the last columns of these four rows */                            \
        for (e = 0; e < 4; e++)                                                       \
          for (b = 0; b < nx; b++) {                                                  \
            const T c0 = c[e * cr + b * cc];                                          \
            int64_t f;                                                                \
            for (f = d; f < w; f++) Y[(a + e) * ys + f] += c0 * X[b * xs + f];        \
          }                                                                           \
    }                                                                                 \
    for (; a < ny; a++) /* the last rows (a single query: generation) as axpys */     \
      for (b = 0; b < nx; b++) {                                                      \
        const T c0 = C[a * cr + b * cc];                                              \
        T *y = Y + a * ys;                                                            \
        const T *x = X + b * xs;                                                      \
        DL__RSIMD                                                                     \
        for (e = 0; e < w; e++) y[e] += c0 * x[e];                                    \
      }                                                                               \
  }                                                                                   \
  /* Xt[d][c] = X[c * xr + d] for c < nk, d < D (row stride of Xt         \
   * DL__SDPA_BK): 4 x 4 blocks through the GEMM's packing transpose where it \
   * has one. */                                                                  \
  DL_API void dl__sdpa_tr_##SFX(const T *X, int64_t xr, int64_t D, int64_t nk, T *Xt) { \
    int64_t c = 0, d;                                                                 \
    if (DL__GEMM_TR4 && sizeof(T) == 4)                                               \
      for (; c + 4 <= nk; c += 4) {                                                   \
        for (d = 0; d + 4 <= D; d += 4) DL__GEMM_TR4_CALL(X + c * xr + d, xr, Xt + d * DL__SDPA_BK + c, DL__SDPA_BK); \
        for (; d < D; d++) {                                                          \
          Xt[d * DL__SDPA_BK + c] = X[c * xr + d];                                    \
          Xt[d * DL__SDPA_BK + c + 1] = X[(c + 1) * xr + d];                          \
          Xt[d * DL__SDPA_BK + c + 2] = X[(c + 2) * xr + d];                          \
          Xt[d * DL__SDPA_BK + c + 3] = X[(c + 3) * xr + d];                          \
        }                                                                             \
      }                                                                               \
    for (; c < nk; c++)                                                               \
      for (d = 0; d < D; d++) Xt[d * DL__SDPA_BK + c] = X[c * xr + d];                \
  }                                                                                   \
  DL_API T dl__sdpa_dot_##SFX(const T *a, const T *b, int64_t n) {                    \
    T s = 0;                                                                          \
    int64_t d;                                                                        \
    DL__RSIMD_SUM(s)                                                                  \
    for (d = 0; d < n; d++) s += a[d] * b[d];                                         \
    return s;                                                                         \
  }                                                                                   \
  DL_API void dl__sdpa_axpy_##SFX(T *y, T a, const T *x, int64_t n) {                 \
    int64_t d;                                                                        \
    DL__RSIMD                                                                         \
    for (d = 0; d < n; d++) y[d] += a * x[d];                                         \
  }                                                                                   \
  DL_API void dl__sdpa_unit_##SFX(const dl__sdpa_args *A, int64_t n) {                \
    const int64_t Tq = A->Tq, Tk = A->Tk, D = A->D, Dv = A->Dv;                       \
    const T sc = (T)A->scale;                                                         \
    const int64_t qr = A->lq.r, kr = A->lk.r, vr = A->lv.r, orr = A->lo.r;            \
    const T *Q = (const T *)A->q + DL__SDPA_AT(A, lq, n, 0);                          \
    const T *K = (const T *)A->k + DL__SDPA_AT(A, lk, n, 0);                          \
    const T *V = (const T *)A->v + DL__SDPA_AT(A, lv, n, 0);                          \
    T *O = (T *)A->o + DL__SDPA_AT(A, lo, n, 0);                                      \
    const T *GO = A->go ? (const T *)A->go + DL__SDPA_AT(A, lo, n, 0) : NULL;         \
    double *L = A->lse + n * Tq;                                                      \
    const int slot = A->nw > 1 && dl_worker() < A->nw ? dl_worker() : 0;            \
    double *m = (double *)(void *)(A->scratch + (size_t)slot * A->per);               \
    double *l = m + DL__SDPA_BQ;                                                      \
    T *S = (T *)(void *)(l + DL__SDPA_BQ), *acc = S + DL__SDPA_BQ * DL__SDPA_BK;      \
    T *Kt = acc + DL__SDPA_BQ * (Dv > DL__SDPA_BK ? Dv : DL__SDPA_BK); /* acc: [BQ, Dv]; BWD: dP [BQ, BK] */ \
    T *Vt = Kt + D * DL__SDPA_BK; /* the tile's K and V, transposed */              \
    T *dS = Vt + Dv * DL__SDPA_BK; /* BWD: the tile's score gradients [BQ, BK] */  \
    int64_t i0, j0, r, c, d, lv;                                                      \
    for (i0 = 0; i0 < Tq; i0 += DL__SDPA_BQ) {                                        \
      const int64_t nq = Tq - i0 < DL__SDPA_BQ ? Tq - i0 : DL__SDPA_BQ;               \
      int64_t jend = Tk;                                                              \
      if (A->causal && i0 + nq + A->off < Tk) jend = i0 + nq + A->off;                \
      for (r = 0; r < nq; r++) {                                                      \
        m[r] = A->mode == DL__SDPA_TAN ? 0.0 : -HUGE_VAL; /* TAN: mu */              \
        l[r] = 0;                                                                     \
        for (d = 0; d < Dv; d++) acc[r * Dv + d] = 0;                                 \
      }                                                                               \
      if (A->mode == DL__SDPA_BWD)                                                    \
        for (r = 0; r < nq; r++) /* l: rowsum(dO * O) */                              \
          l[r] = (double)dl__sdpa_dot_##SFX(GO + (i0 + r) * orr, O + (i0 + r) * orr, Dv); \
      for (j0 = 0; j0 < jend; j0 += DL__SDPA_BK) {                                    \
        const int64_t nk = jend - j0 < DL__SDPA_BK ? jend - j0 : DL__SDPA_BK;         \
        /* K (and for BWD V) of the tile as [D, nk]: rows vectorise over keys */     \
        dl__sdpa_tr_##SFX(K + j0 * kr, kr, D, nk, Kt);                                \
        if (A->mode == DL__SDPA_BWD) dl__sdpa_tr_##SFX(V + j0 * vr, vr, Dv, nk, Vt);  \
        /* the block's scores S = Q K^T (and for BWD dP = dO V^T in acc), every   \
         * row against the tile's nk keys; the rows use their first lim */          \
        for (r = 0; r < nq * DL__SDPA_BK; r++) S[r] = 0;                              \
        dl__sdpa_mm_##SFX(S, DL__SDPA_BK, Q + i0 * qr, qr, 1, Kt, DL__SDPA_BK, nq, D, nk); \
        if (A->mode == DL__SDPA_BWD) {                                                \
          for (r = 0; r < nq * DL__SDPA_BK; r++) acc[r] = 0;                          \
          dl__sdpa_mm_##SFX(acc, DL__SDPA_BK, GO + i0 * orr, orr, 1, Vt, DL__SDPA_BK, nq, Dv, nk); \
        }                                                                             \
        for (r = 0; r < nq; r++) {                                                    \
          const int64_t i = i0 + r, lim = dl__sdpa_lim(A, i, j0, nk);                 \
          const T *qi = Q + i * qr;                                                   \
          T *s = S + r * DL__SDPA_BK, *ar = acc + r * Dv;                             \
          if (lim <= 0) { /* no key of the tile: a zero row of the tile products */   \
            for (c = 0; c < nk; c++) s[c] = dS[r * DL__SDPA_BK + c] = 0;              \
            continue;                                                                 \
          }                                                                           \
          /* FWD and BWD run their loops to lv, lim rounded up to whole vectors  \
           * of 16: the masked keys in between get -inf, which exp makes 0, so \
           * no loop ends in a scalar remainder (a causal tile's rows have any \
           * length; a scalar exp costs about what a vector of 16 does) */         \
          lv = A->mode == DL__SDPA_TAN || (lim + 15) / 16 * 16 > nk ? lim : (lim + 15) / 16 * 16; \
          for (c = lim; c < lv; c++) s[c] = (T)-HUGE_VAL;                             \
          DL__RSIMD                                                                   \
          for (c = 0; c < lv; c++) s[c] *= sc;                                        \
          if (A->mode == DL__SDPA_FWD) { /* online softmax over the tiles */          \
            double mt = m[r], alpha, sum = 0;                                         \
            T mn, mxr;                                                                \
            int64_t e;                                                                \
            DL__ROW_MAX16(T, s, lv, mxr, c, e); /* the row's largest score */         \
            if ((double)mxr > mt) mt = (double)mxr;                                   \
            alpha = exp(m[r] - mt);                                                   \
            if (alpha != 1.0) {                                                       \
              l[r] *= alpha;                                                          \
              for (d = 0; d < Dv; d++) ar[d] *= (T)alpha;                             \
            }                                                                         \
            mn = (T)mt;                                                               \
            DL__RSIMD                                                                 \
            for (c = 0; c < lv; c++) s[c] = EXP(s[c] - mn);                           \
            DL__RED_LANES(sum, c, lv, DL__SDPA_S);                                    \
            for (c = lv; c < nk; c++) s[c] = 0; /* acc += S V after the rows */       \
            l[r] += sum;                                                              \
            m[r] = mt;                                                                \
          } else if (A->mode == DL__SDPA_TAN) {                                       \
            const T li = (T)L[i];                                                     \
            const T *tqi = A->tq ? (const T *)A->tq + DL__SDPA_AT(A, lgq, n, i) : NULL; \
            DL__RSIMD                                                                 \
            for (c = 0; c < lim; c++) s[c] = EXP(s[c] - li);                          \
            for (c = 0; c < lim; c++) {                                               \
              const int64_t j = j0 + c;                                               \
              T ts = 0;                                                               \
              if (tqi) ts += dl__sdpa_dot_##SFX(tqi, K + j * kr, D);                  \
              if (A->tk) ts += dl__sdpa_dot_##SFX(qi, (const T *)A->tk + DL__SDPA_AT(A, lgk, n, j), D); \
              ts *= sc;                                                               \
              m[r] += (double)(s[c] * ts); /* m: mu = sum_j p ts */                   \
              dl__sdpa_axpy_##SFX(ar, s[c] * ts, V + j * vr, Dv);                     \
              if (A->tv) dl__sdpa_axpy_##SFX(ar, s[c], (const T *)A->tv + DL__SDPA_AT(A, lgv, n, j), Dv); \
            }                                                                         \
          } else {                                                                    \
            const T li = (T)L[i], di = (T)l[r];                                       \
            const T *dp = acc + r * DL__SDPA_BK; /* dO_i . V_j (acc is free in BWD) */ \
            T *ds = dS + r * DL__SDPA_BK;                                             \
            DL__RSIMD                                                                 \
            for (c = 0; c < lv; c++) s[c] = EXP(s[c] - li);                           \
            DL__RSIMD                                                                 \
            for (c = 0; c < lv; c++) ds[c] = s[c] * (dp[c] - di) * sc;                \
            for (c = lim; c < nk; c++) s[c] = ds[c] = 0;                              \
          }                                                                           \
        }                                                                             \
        if (A->mode == DL__SDPA_FWD) /* acc += P V */                                 \
          dl__sdpa_mm_##SFX(acc, Dv, S, DL__SDPA_BK, 1, V + j0 * vr, vr, nq, nk, Dv);  \
        if (A->mode == DL__SDPA_BWD) { /* dV += P^T dO, dQ += dS K, dK += dS^T Q */   \
          if (A->gv)                                                                  \
            dl__sdpa_mm_##SFX((T *)A->gv + DL__SDPA_AT(A, lgv, n, j0), A->lgv.r, S, 1, DL__SDPA_BK, \
                              GO + i0 * orr, orr, nk, nq, Dv);                        \
          if (A->gq)                                                                  \
            dl__sdpa_mm_##SFX((T *)A->gq + DL__SDPA_AT(A, lgq, n, i0), A->lgq.r, dS, DL__SDPA_BK, 1, \
                              K + j0 * kr, kr, nq, nk, D);                            \
          if (A->gk)                                                                  \
            dl__sdpa_mm_##SFX((T *)A->gk + DL__SDPA_AT(A, lgk, n, j0), A->lgk.r, dS, 1, DL__SDPA_BK, \
                              Q + i0 * qr, qr, nk, nq, D);                            \
        }                                                                             \
      }                                                                               \
      if (A->mode == DL__SDPA_FWD) {                                                  \
        for (r = 0; r < nq; r++) {                                                    \
          const T inv = (T)(1.0 / l[r]);                                              \
          T *oi = O + (i0 + r) * orr;                                                 \
          for (d = 0; d < Dv; d++) oi[d] = acc[r * Dv + d] * inv;                     \
          L[i0 + r] = m[r] + log(l[r]);                                               \
        }                                                                             \
      } else if (A->mode == DL__SDPA_TAN) {                                           \
        for (r = 0; r < nq; r++) {                                                    \
          const T mu = (T)m[r];                                                       \
          const T *oi = O + (i0 + r) * orr;                                           \
          T *ti = (T *)A->to + DL__SDPA_AT(A, lo, n, i0 + r);                         \
          for (d = 0; d < Dv; d++) ti[d] = acc[r * Dv + d] - mu * oi[d];              \
        }                                                                             \
      }                                                                               \
    }                                                                                 \
  }
/* With the GEMM's vector type (GNU C vector extensions, dl/blas.h), the
 * tile products keep four rows by two vectors of Y in registers: eight
 * independent FMA chains, enough to hide the FMA's latency (four chains of
 * plain scalar code, which gcc does not contract under -std=c11, ran at a
 * quarter of the peak). Where the columns do not fill two vectors, and
 * without the extensions, four rows by W columns of plain code. */
#if DL__GEMM_VEC
#define DL__SDPA_MM_VEC(T, VT)                                                        \
  {                                                                                   \
    enum { L = DL__GEMM_VBYTES / sizeof(T) };                                         \
    const VT zero = {0};                                                              \
    for (; d + 2 * L <= w; d += 2 * L) {                                              \
      VT y[4][2];                                                                     \
      T *Yd = Y + a * ys + d;                                                         \
      DL__GEMM_UNROLL                                                                 \
      for (e = 0; e < 4; e++) {                                                       \
        memcpy(&y[e][0], Yd + e * ys, sizeof(VT));                                    \
        memcpy(&y[e][1], Yd + e * ys + L, sizeof(VT));                                \
      }                                                                               \
      for (b = 0; b < nx; b++) {                                                      \
        const T *x = X + b * xs + d;                                                  \
        VT x0, x1;                                                                    \
        memcpy(&x0, x, sizeof x0);                                                    \
        memcpy(&x1, x + L, sizeof x1);                                                \
        DL__GEMM_UNROLL                                                               \
        for (e = 0; e < 4; e++) {                                                     \
          const VT ce = c[e * cr + b * cc] - zero; /* broadcast */                    \
          y[e][0] += ce * x0;                                                         \
          y[e][1] += ce * x1;                                                         \
        }                                                                             \
      }                                                                               \
      DL__GEMM_UNROLL                                                                 \
      for (e = 0; e < 4; e++) {                                                       \
        memcpy(Yd + e * ys, &y[e][0], sizeof(VT));                                    \
        memcpy(Yd + e * ys + L, &y[e][1], sizeof(VT));                                \
      }                                                                               \
    }                                                                                 \
  }
DL__SDPA_KERNEL(float, f32, dl_vexp_f32, 16, dl__gemm_vf32)
DL__SDPA_KERNEL(double, f64, dl_vexp_f64, 8, dl__gemm_vf64)
#else
#define DL__SDPA_MM_VEC(T, VT)
DL__SDPA_KERNEL(float, f32, dl_vexp_f32, 16, float)
DL__SDPA_KERNEL(double, f64, dl_vexp_f64, 8, double)
#endif
#undef DL__SDPA_MM_VEC
#undef DL__SDPA_S

DL_API void dl__sdpa_run(dl_tape *tp, const char *op, dl__sdpa_args *A, dl_dtype dt) {
  const size_t es = dl_dtype_size(dt);
  /* a slot per team member; inside a caller's own parallel region no team
   * starts (the loop runs on the calling thread, whose omp thread number is
   * the caller's): one slot, in this tape's arena, private to that thread */
#ifdef _OPENMP
  const int nw = omp_in_parallel() ? 1 : (dl_ctx_threads(tp->ctx) > 0 ? dl_ctx_threads(tp->ctx) : 1);
#else
  const int nw = 1;
#endif
  const size_t accn = (size_t)DL__SDPA_BQ * (size_t)(A->Dv > DL__SDPA_BK ? A->Dv : DL__SDPA_BK);
  A->per = (sizeof(double) * 2 * DL__SDPA_BQ +
            es * ((size_t)2 * DL__SDPA_BQ * DL__SDPA_BK + accn + (size_t)DL__SDPA_BK * (size_t)(A->D + A->Dv)) + 63) &
           ~(size_t)63;
  A->nw = nw;
  A->scratch = (unsigned char *)dl_tape_scratch(tp, op, A->per * (size_t)nw);
  {
    void (*const unit)(const dl__sdpa_args *, int64_t) = dt == DL_F32 ? dl__sdpa_unit_f32 : dl__sdpa_unit_f64;
    DL_PARALLEL_FOR(tp->ctx, A->N * A->Tq * A->Tk * (A->D + A->Dv), A->N, dl__u, unit(A, dl__u););
  }
}

/* The layouts of dl_t_scaled_dot_product_attention: q, k, v with packed
 * rows, unit strides qs, ks, vs (dl__sdpa_ustride); o, the gradients and
 * the tangents contiguous. */
DL_API void dl__sdpa_packed(dl__sdpa_args *A, int64_t qs, int64_t ks, int64_t vs) {
  A->H = 1;
  A->lq.b = qs;
  A->lk.b = ks;
  A->lv.b = vs;
  A->lq.r = A->lk.r = A->lgq.r = A->lgk.r = A->D;
  A->lv.r = A->lo.r = A->lgv.r = A->Dv;
  A->lq.h = A->lk.h = A->lv.h = A->lo.h = A->lgq.h = A->lgk.h = A->lgv.h = 0;
  A->lo.b = A->Tq * A->Dv;
  A->lgq.b = A->Tq * A->D;
  A->lgk.b = A->Tk * A->D;
  A->lgv.b = A->Tk * A->Dv;
}

/* saved[0..2] q, k, v (rows packed, see dl__sdpa_ustride), saved[3] lse,
 * the output o; i[0] causal, i[1] off, i[2..4] the unit strides of q, k,
 * v; p[0] scale. */
DL_API void dl__sdpa_fill(dl__sdpa_args *A, const dl_node *nd) {
  const dl_tensor *q = nd->saved[0], *k = nd->saved[1], *v = nd->saved[2];
  memset(A, 0, sizeof *A);
  A->Tq = q->shape[q->ndim - 2];
  A->Tk = k->shape[k->ndim - 2];
  A->D = q->shape[q->ndim - 1];
  A->Dv = v->shape[v->ndim - 1];
  A->N = A->Tq ? q->numel / (A->Tq * A->D) : 0;
  A->causal = (int)nd->i[0];
  A->off = nd->i[1];
  A->scale = nd->p[0];
  dl__sdpa_packed(A, nd->i[2], nd->i[3], nd->i[4]);
  A->q = q->data;
  A->k = k->data;
  A->v = v->data;
  A->o = nd->out->data;
  A->lse = (double *)nd->saved[3]->data;
}

/* dl_hvp's rule of scaled dot-product attention, on the host, in double,
 * one (batch, head) unit at a time with its [Tq, Tk] scores materialised
 * (the flash scheme keeps them out of the training step; a Hessian-vector
 * product is a second walk that may store one unit's). With S = scale q k^T
 * + M, P = softmax(S), dP = dO v^T, dS = P (dP - r), r = rowsum(dP P), and
 * the tangents along v (tq, tk, tv from the forward, tdO the gradient's):
 *   tS = scale (tq k^T + q tk^T),  tP = P (tS - rowsum(P tS))
 *   t(gv) = tP^T dO + P^T tdO,  t(dP) = tdO v^T + dO tv^T
 *   t(dS) = tP (dP - r) + P (t(dP) - rowsum(t(dP) P + dP tP))
 *   t(gq) = scale (t(dS) k + dS tk),  t(gk) = scale (t(dS)^T q + dS^T tq). */
DL_API void dl__sdpa_hvp(dl_tape *tp, dl_node *n, dl_tensor *gq, dl_tensor *gk, dl_tensor *gv) {
  const char *op = n->op;
  const dl_tensor *q = dl__t_contig(tp, op, n->saved[0]), *k = dl__t_contig(tp, op, n->saved[1]);
  const dl_tensor *v = dl__t_contig(tp, op, n->saved[2]), *gy = n->out->grad;
  const dl_tensor *go = dl__t_contig(tp, op, (dl_tensor *)(uintptr_t)gy), *tgo = gy->tangent;
  const dl_tensor *tq = n->in[0]->tangent ? dl__t_contig(tp, op, n->in[0]->tangent) : NULL;
  const dl_tensor *tk = n->in[1]->tangent ? dl__t_contig(tp, op, n->in[1]->tangent) : NULL;
  const dl_tensor *tv = n->in[2]->tangent ? dl__t_contig(tp, op, n->in[2]->tangent) : NULL;
  const int nd = q->ndim, causal = (int)n->i[0];
  const int64_t Tq = q->shape[nd - 2], Tk = k->shape[nd - 2], D = q->shape[nd - 1], Dv = v->shape[nd - 1];
  const int64_t off = n->i[1], N = Tq && D ? q->numel / (Tq * D) : 0;
  const double scale = n->p[0];
  double *P = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)(6 * Tq * Tk + 2 * Tq + 1));
  double *tP = P + Tq * Tk, *dP = tP + Tq * Tk, *tdP = dP + Tq * Tk, *dS = tdP + Tq * Tk, *tdS = dS + Tq * Tk;
  double *r = tdS + Tq * Tk, *tr = r + Tq;
  int64_t u, i, j, c;
#define DL__SD(t, base, idx) dl__get_at((t), (base) + (idx))
#define DL__SD_ADD(g, base, idx, val)                                                  \
  do {                                                                                 \
    if ((g)->dtype == DL_F32) ((float *)(g)->tangent->data)[(base) + (idx)] += (float)(val); \
    else ((double *)(g)->tangent->data)[(base) + (idx)] += (val);                      \
  } while (0)
  for (u = 0; u < N; u++) {
    const int64_t bq = u * Tq * D, bk = u * Tk * D, bv = u * Tk * Dv, bo = u * Tq * Dv;
    for (i = 0; i < Tq; i++) { /* P and tP row by row */
      double mx = -HUGE_VAL, sum = 0, ts = 0;
      for (j = 0; j < Tk; j++) {
        double sv = -HUGE_VAL;
        if (!causal || j <= i + off) {
          sv = 0;
          for (c = 0; c < D; c++) sv += DL__SD(q, bq, i * D + c) * DL__SD(k, bk, j * D + c);
          sv *= scale;
        }
        P[i * Tk + j] = sv;
        if (sv > mx) mx = sv;
      }
      for (j = 0; j < Tk; j++) {
        P[i * Tk + j] = P[i * Tk + j] == -HUGE_VAL ? 0.0 : exp(P[i * Tk + j] - mx);
        sum += P[i * Tk + j];
      }
      for (j = 0; j < Tk; j++) {
        double t = 0;
        P[i * Tk + j] /= sum;
        if (P[i * Tk + j] != 0) {
          for (c = 0; c < D; c++)
            t += (tq ? DL__SD(tq, bq, i * D + c) * DL__SD(k, bk, j * D + c) : 0) +
                 (tk ? DL__SD(q, bq, i * D + c) * DL__SD(tk, bk, j * D + c) : 0);
          t *= scale;
        }
        tP[i * Tk + j] = t; /* tS for now */
        ts += P[i * Tk + j] * t;
      }
      for (j = 0; j < Tk; j++) tP[i * Tk + j] = P[i * Tk + j] * (tP[i * Tk + j] - ts);
    }
    for (i = 0; i < Tq; i++) { /* dP, t(dP), r, tr, dS, t(dS) */
      r[i] = tr[i] = 0;
      for (j = 0; j < Tk; j++) {
        double a = 0, b = 0;
        for (c = 0; c < Dv; c++) {
          a += DL__SD(go, bo, i * Dv + c) * DL__SD(v, bv, j * Dv + c);
          b += DL__SD(tgo, bo, i * Dv + c) * DL__SD(v, bv, j * Dv + c) +
               (tv ? DL__SD(go, bo, i * Dv + c) * DL__SD(tv, bv, j * Dv + c) : 0);
        }
        dP[i * Tk + j] = a;
        tdP[i * Tk + j] = b;
        r[i] += a * P[i * Tk + j];
        tr[i] += b * P[i * Tk + j] + a * tP[i * Tk + j];
      }
      for (j = 0; j < Tk; j++) {
        dS[i * Tk + j] = P[i * Tk + j] * (dP[i * Tk + j] - r[i]);
        tdS[i * Tk + j] = tP[i * Tk + j] * (dP[i * Tk + j] - r[i]) + P[i * Tk + j] * (tdP[i * Tk + j] - tr[i]);
      }
    }
    if (gv)
      for (j = 0; j < Tk; j++)
        for (c = 0; c < Dv; c++) {
          double a = 0;
          for (i = 0; i < Tq; i++)
            a += tP[i * Tk + j] * DL__SD(go, bo, i * Dv + c) + P[i * Tk + j] * DL__SD(tgo, bo, i * Dv + c);
          DL__SD_ADD(gv, bv, j * Dv + c, a);
        }
    if (gq)
      for (i = 0; i < Tq; i++)
        for (c = 0; c < D; c++) {
          double a = 0;
          for (j = 0; j < Tk; j++)
            a += tdS[i * Tk + j] * DL__SD(k, bk, j * D + c) + (tk ? dS[i * Tk + j] * DL__SD(tk, bk, j * D + c) : 0);
          DL__SD_ADD(gq, bq, i * D + c, scale * a);
        }
    if (gk)
      for (j = 0; j < Tk; j++)
        for (c = 0; c < D; c++) {
          double a = 0;
          for (i = 0; i < Tq; i++)
            a += tdS[i * Tk + j] * DL__SD(q, bq, i * D + c) + (tq ? dS[i * Tk + j] * DL__SD(tq, bq, i * D + c) : 0);
          DL__SD_ADD(gk, bk, j * D + c, scale * a);
        }
  }
#undef DL__SD
#undef DL__SD_ADD
}

DL_API void dl__t_sdpa_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gq = dl_tape_grad(tp, n->in[0]), *gk = dl_tape_grad(tp, n->in[1]), *gv = dl_tape_grad(tp, n->in[2]);
  dl__sdpa_args A;
  if (!gq && !gk && !gv) return;
  dl__sdpa_fill(&A, n);
  if (!A.N || !A.Tq || !A.Dv) return; /* nothing was computed (forward skipped the kernel too) */
  A.mode = DL__SDPA_BWD;
  A.go = dl__t_contig(tp, n->op, n->out->grad)->data;
  A.gq = gq ? gq->data : NULL;
  A.gk = gk ? gk->data : NULL;
  A.gv = gv ? gv->data : NULL;
  /* q, k, v one tensor: their gradients alias, which += allows (the kernel reads the saved values only) */
  dl__sdpa_run(tp, n->op, &A, n->out->dtype);
  if (tp->hvp) dl__sdpa_hvp(tp, n, gq, gk, gv);
}

/* The elements between consecutive units ([T, D] blocks, the leading
 * dimensions flattened) of t, when each unit's rows are packed (last
 * stride 1, row stride D) and the leading dimensions collapse to one stride
 * (a KV cache's [B, H, len, D] view of [B, H, cap, D] does); else -1. */
DL_API int64_t dl__sdpa_ustride(const dl_tensor *t) {
  const int nd = t->ndim;
  int64_t us = -1, expect = 0;
  int d;
  if ((t->strides[nd - 1] != 1 && t->shape[nd - 1] > 1) ||
      (t->strides[nd - 2] != t->shape[nd - 1] && t->shape[nd - 2] > 1))
    return -1;
  for (d = nd - 3; d >= 0; d--) {
    if (t->shape[d] == 1) continue;
    if (us < 0) {
      us = t->strides[d];
      expect = us * t->shape[d];
    } else {
      if (t->strides[d] != expect) return -1;
      expect *= t->shape[d];
    }
  }
  return us < 0 ? t->shape[nd - 2] * t->shape[nd - 1] : us;
}

/* The same attention composed of the library's ops (matmul, an additive
 * -inf mask, softmax): it stores the [.., Tq, Tk] scores. The device path
 * (every step on the GPU through those ops' kernels) and the tests'
 * independent reference. */
DL_API dl_tensor *dl__sdpa_composed(dl_tape *tp, const char *op, dl_tensor *q, dl_tensor *k, dl_tensor *v,
                                    int causal, double scale) {
  const int nd = q->ndim;
  const int64_t Tq = q->shape[nd - 2], Tk = k->shape[nd - 2];
  dl_tensor *s = dl_t_matmul(tp, dl_t_mul_scalar(tp, q, scale), dl_t_transpose(tp, k, nd - 2, nd - 1));
  if (causal) s = dl_t_add(tp, s, dl__mha_mask(tp, op, q, NULL, 1, Tk - Tq, Tq, Tk));
  return dl_t_matmul(tp, dl_t_softmax(tp, s, -1), v);
}

/* Scaled dot-product attention, torch.nn.functional.scaled_dot_product_attention
 * (dropout 0) in one op:
 *   q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] (the same leading
 *   dimensions, e.g. [B, heads]), scale 0 = 1/sqrt(D);
 *   o = softmax(scale q k^T + M) v   -> [..., Tq, Dv],
 * M = 0, or with causal != 0 -inf where key j > i + (Tk - Tq): the queries
 * are the last Tq positions of the keys' sequence, as when they continue a
 * KV cache (Tq == Tk: PyTorch's is_causal; causal needs Tk >= Tq).
 * The scores are never stored whole (the flash-attention scheme): forward
 * walks the keys in tiles of DL__SDPA_BK with a running max and sum per
 * query row, and keeps only o and each row's log-sum-exp [..., Tq]; the
 * backward and tangent rules recompute each tile's probabilities from them:
 *   backward  P = exp(S - lse), dP = dO v^T, dS = P (dP - rowsum(dO o)),
 *             gq += scale dS k, gk += scale dS^T q, gv += P^T dO;
 *   tangent   tS = scale (tq k^T + q tk^T), to = P (tS - rowsum(P tS)) v + P tv.
 * Activation memory is linear in T. Each (batch, head) pair runs on one
 * thread, in a fixed order: results do not depend on the thread count.
 * Inputs may be strided: read in place when each [T, D] block's rows are
 * packed (as in a KV cache's view), else copied first; f32 sums in f32, the
 * softmax's running sum in double. On a device tape (DL_USE_CUDA) it runs as
 * the composition dl__sdpa_composed on the GPU's ops (which store the
 * scores). Output contiguous, in the tape's arena until the rewind. */
DL_API dl_tensor *dl_t_scaled_dot_product_attention(dl_tape *tp, dl_tensor *q, dl_tensor *k, dl_tensor *v,
                                                    int causal, double scale) {
  const char *const op = "dl_t_scaled_dot_product_attention";
  dl_tensor *qc, *kc, *vc, *o, *lse;
  dl__sdpa_args A;
  dl_node *nd;
  int64_t oshape[DL_MAX_DIMS];
  int d, ok;
  if (!q || !k || !v) DL_PANIC(tp->ctx, op, "q, k and v are required");
  dl__ops_same_float(op, q, k);
  dl__ops_same_float(op, q, v);
  ok = q->ndim >= 2 && k->ndim == q->ndim && v->ndim == q->ndim && q->shape[q->ndim - 1] > 0 &&
       k->shape[q->ndim - 1] == q->shape[q->ndim - 1] && v->shape[q->ndim - 2] == k->shape[q->ndim - 2] &&
       k->shape[q->ndim - 2] > 0;
  for (d = 0; ok && d < q->ndim - 2; d++) ok = k->shape[d] == q->shape[d] && v->shape[d] == q->shape[d];
  if (!ok)
    DL_PANIC(q->ctx, op, "shape mismatch: q %s, k %s, v %s (expected q [..., Tq, D], k [..., Tk, D], "
             "v [..., Tk, Dv], the same leading dimensions)", DL_SHAPESTR(q), DL_SHAPESTR(k), DL_SHAPESTR(v));
  if (causal && k->shape[k->ndim - 2] < q->shape[q->ndim - 2])
    DL_PANIC(q->ctx, op, "causal attention needs at least as many keys as queries: q %s, k %s", DL_SHAPESTR(q),
             DL_SHAPESTR(k));
  if (!(scale >= 0) || scale == HUGE_VAL)
    DL_PANIC(q->ctx, op, "scale must be finite and >= 0 (0: 1/sqrt(D)), not %g (q %s)", scale, DL_SHAPESTR(q));
  if (scale == 0) scale = 1.0 / sqrt((double)q->shape[q->ndim - 1]);
#ifdef DL_USE_CUDA
  if (q->device == DL_CUDA || tp->gpu) return dl__sdpa_composed(tp, op, q, k, v, causal, scale);
#endif
  dl__ops_host_only(tp, op, q);
  /* strided inputs are read in place when their rows are packed, else copied */
  qc = dl__sdpa_ustride(q) >= 0 ? q : dl__t_contig(tp, op, q);
  kc = dl__sdpa_ustride(k) >= 0 ? k : dl__t_contig(tp, op, k);
  vc = dl__sdpa_ustride(v) >= 0 ? v : dl__t_contig(tp, op, v);
  for (d = 0; d < q->ndim - 1; d++) oshape[d] = q->shape[d];
  oshape[q->ndim - 1] = v->shape[v->ndim - 1];
  o = dl_tape_out(tp, op, q->dtype, q->ndim, oshape);
  lse = dl_tape_out(tp, op, DL_F64, q->ndim - 1, q->shape);
  memset(&A, 0, sizeof A);
  A.mode = DL__SDPA_FWD;
  A.causal = causal != 0;
  A.Tq = q->shape[q->ndim - 2];
  A.Tk = k->shape[k->ndim - 2];
  A.off = A.Tk - A.Tq;
  A.D = q->shape[q->ndim - 1];
  A.Dv = oshape[q->ndim - 1];
  A.N = A.Tq ? q->numel / (A.Tq * A.D) : 0;
  A.scale = scale;
  dl__sdpa_packed(&A, dl__sdpa_ustride(qc), dl__sdpa_ustride(kc), dl__sdpa_ustride(vc));
  A.q = qc->data;
  A.k = kc->data;
  A.v = vc->data;
  A.o = o->data;
  A.lse = (double *)lse->data;
  if (A.N && A.Tq && A.Dv) dl__sdpa_run(tp, op, &A, q->dtype);
  if (A.N && A.Tq && A.Dv && (q->tangent || k->tangent || v->tangent)) {
    dl__sdpa_args T = A;
    T.mode = DL__SDPA_TAN;
    T.tq = q->tangent ? dl__t_contig(tp, op, q->tangent)->data : NULL;
    T.tk = k->tangent ? dl__t_contig(tp, op, k->tangent)->data : NULL;
    T.tv = v->tangent ? dl__t_contig(tp, op, v->tangent)->data : NULL;
    T.to = dl_tape_tangent(tp, o)->data;
    dl__sdpa_run(tp, op, &T, q->dtype);
  }
  if ((nd = dl_tape_record(tp, op, dl__t_sdpa_bw, o, q, k, v)) != NULL) {
    nd->flags |= DL_NODE_HVP;
    nd->i[0] = A.causal;
    nd->i[1] = A.off;
    nd->i[2] = A.lq.b;
    nd->i[3] = A.lk.b;
    nd->i[4] = A.lv.b;
    nd->p[0] = scale;
    nd->saved[0] = qc;
    nd->saved[1] = kc;
    nd->saved[2] = vc;
    nd->saved[3] = lse;
  }
  return o;
}

/* >>attention of packed heads ------------------------------------------------- */

/* The layouts of dl_t_attention_qkv: unit n = (b, h) reads head h of q, k
 * and v in place from qkv [B, T, 3C] (columns [0, C), [C, 2C), [2C, 3C),
 * head h at h * hd within each) and writes head h of o [B, T, C]; the
 * gradient of qkv has qkv's layout, o's gradient o's. */
DL_API void dl__sdpa_qkv_fill(dl__sdpa_args *A, const dl_tensor *qkv, void *o, double *lse, int64_t H, int causal) {
  const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, hd = C / H;
  const size_t es = dl_dtype_size(qkv->dtype);
  memset(A, 0, sizeof *A);
  A->causal = causal != 0;
  A->N = B * H;
  A->Tq = A->Tk = T;
  A->D = A->Dv = hd;
  A->scale = 1.0 / sqrt((double)hd);
  A->H = H;
  A->lq.b = T * 3 * C;
  A->lq.h = hd;
  A->lq.r = 3 * C;
  A->lk = A->lv = A->lgq = A->lgk = A->lgv = A->lq;
  A->lo.b = T * C;
  A->lo.h = hd;
  A->lo.r = C;
  A->q = qkv->data;
  A->k = (const char *)qkv->data + (size_t)C * es;
  A->v = (const char *)qkv->data + (size_t)(2 * C) * es;
  A->o = o;
  A->lse = lse;
}

/* saved[0] qkv, saved[1] lse [B, H, T]; i[0] heads, i[1] causal. The rule
 * is linear in the output's gradient (the op is only recorded when qkv
 * carries no tangent, so q, k, v are constants along dl_hvp's direction). */
DL_API void dl__t_attention_qkv_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *g = dl_tape_grad(tp, n->in[0]);
  dl__sdpa_args A;
  if (!g) return;
  dl__sdpa_qkv_fill(&A, n->saved[0], n->out->data, (double *)n->saved[1]->data, n->i[0], (int)n->i[1]);
  if (!A.N || !A.Tq || !A.D) return;
  A.mode = DL__SDPA_BWD;
  A.go = dl__t_contig(tp, n->op, n->out->grad)->data;
  { /* q, k, v's gradients: the column blocks [0, C), [C, 2C), [2C, 3C) of qkv's */
    const size_t cb = (size_t)(n->saved[0]->shape[2] / 3) * dl_dtype_size(g->dtype);
    A.gq = g->data;
    A.gk = (char *)g->data + cb;
    A.gv = (char *)g->data + 2 * cb;
  }
  dl__sdpa_run(tp, n->op, &A, n->out->dtype);
}

/* Multi-head self-attention on a fused projection, as a GPT block runs it:
 * qkv [B, T, 3C] (q, k, v side by side, each C = heads x hd, head h at
 * columns h*hd of each) -> [B, T, C] with head h's output at columns h*hd:
 * the same values as splitting qkv into [B, heads, T, hd] q, k, v,
 * dl_t_scaled_dot_product_attention(q, k, v, causal, 0) and merging the
 * heads back, without the copies that split and merge (and their
 * backward) would make: the fused kernel reads each head in place and
 * writes the gradient of qkv directly. With forward-mode tangents on qkv,
 * or on a device tape, it is that composition. Output contiguous, in the
 * tape's arena until the rewind. */
DL_API dl_tensor *dl_t_attention_qkv(dl_tape *tp, dl_tensor *qkv, int64_t heads, int causal) {
  const char *const op = "dl_t_attention_qkv";
  dl_tensor *xc, *y, *lse;
  dl__sdpa_args A;
  dl_node *nd;
  int64_t B, T, C;
  dl__ops_same_float(op, qkv, NULL);
  if (qkv->ndim != 3 || heads <= 0 || qkv->shape[2] % 3 || (qkv->shape[2] / 3) % heads || qkv->shape[2] == 0)
    DL_PANIC(qkv->ctx, op, "qkv %s with %lld heads: expected [B, T, 3C] with C a positive multiple of the heads",
             DL_SHAPESTR(qkv), (long long)heads);
  B = qkv->shape[0];
  T = qkv->shape[1];
  C = qkv->shape[2] / 3;
  if (qkv->tangent || tp->gpu || qkv->device != DL_CPU) {
    static const int back[4] = {0, 2, 1, 3};
    dl_tensor *h[3], *a;
    dl__mha_split(tp, qkv, 3, heads, C / heads, h);
    a = dl_t_scaled_dot_product_attention(tp, h[0], h[1], h[2], causal, 0);
    return dl_t_reshape(tp, dl_t_permute(tp, a, back), 3, DL__I64S(B, T, C));
  }
  xc = dl__t_contig(tp, op, qkv);
  y = dl_tape_out(tp, op, qkv->dtype, 3, DL__I64S(B, T, C));
  lse = dl_tape_out(tp, op, DL_F64, 3, DL__I64S(B, heads, T));
  dl__sdpa_qkv_fill(&A, xc, y->data, (double *)lse->data, heads, causal);
  A.mode = DL__SDPA_FWD;
  if (A.N && A.Tq) dl__sdpa_run(tp, op, &A, qkv->dtype);
  if ((nd = dl_tape_record(tp, op, dl__t_attention_qkv_bw, y, qkv, NULL, NULL)) != NULL) {
    nd->flags |= DL_NODE_HVP_LINEAR;
    nd->i[0] = heads;
    nd->i[1] = causal != 0;
    nd->saved[0] = xc;
    nd->saved[1] = lse;
  }
  return y;
}

/* >>rotary position embeddings ------------------------------------------------- */

/* cos and sin of position pos0 + t times base^(-2i/D): a host f64 tensor
 * [2, T, D/2] in the tape's arena. */
DL_API dl_tensor *dl__rope_table(dl_tape *tp, const char *op, int64_t T, int64_t D, int64_t pos0, double base) {
  const int64_t h = D / 2;
  dl_tensor *tab = dl_tensor_new(&tp->arena, DL_F64, 3, DL__I64S(2, T, h));
  double *cs;
  int64_t t, i;
  if (!tab) dl__tape_nomem(tp, op, "the rotary table", sizeof(double) * 2 * (size_t)(T * h));
  cs = (double *)tab->data;
  for (i = 0; i < h; i++) {
    const double f = 1.0 / pow(base, (double)(2 * i) / (double)D);
    for (t = 0; t < T; t++) {
      const double a = (double)(pos0 + t) * f;
      cs[t * h + i] = cos(a);
      cs[T * h + t * h + i] = sin(a);
    }
  }
  return tab;
}
/* Rows of x [R = N*T, D] rotated by the table: dir = 1 forward (and the
 * tangent), -1 the transpose (backward, added into out). */
#define DL__ROPE_KERNEL(T_, SFX)                                                      \
  DL_API void dl__rope_rows_##SFX(const T_ *x, T_ *out, const double *cs, int64_t R, int64_t T, \
                                  int64_t D, int dir) {                               \
    const int64_t h = D / 2;                                                          \
    int64_t r, i;                                                                     \
    for (r = 0; r < R; r++) {                                                         \
      const double *c = cs + (r % T) * h, *s = cs + T * h + (r % T) * h;              \
      const T_ *a = x + r * D, *b = a + h;                                            \
      T_ *oa = out + r * D, *ob = oa + h;                                             \
      if (dir > 0) {                                                                  \
        DL__RSIMD                                                                     \
        for (i = 0; i < h; i++) {                                                     \
          oa[i] = (T_)((double)a[i] * c[i] - (double)b[i] * s[i]);                    \
          ob[i] = (T_)((double)b[i] * c[i] + (double)a[i] * s[i]);                    \
        }                                                                             \
      } else {                                                                        \
        DL__RSIMD                                                                     \
        for (i = 0; i < h; i++) {                                                     \
          oa[i] += (T_)((double)a[i] * c[i] + (double)b[i] * s[i]);                   \
          ob[i] += (T_)((double)b[i] * c[i] - (double)a[i] * s[i]);                   \
        }                                                                             \
      }                                                                               \
    }                                                                                 \
  }
DL__ROPE_KERNEL(float, f32)
DL__ROPE_KERNEL(double, f64)

DL_API void dl__rope_apply(dl_tape *tp, const dl_tensor *x, void *out, const double *cs, int64_t T, int dir) {
  const int64_t D = x->shape[x->ndim - 1], R = D ? x->numel / D : 0;
  const int64_t per = T; /* rows per task: one sequence */
  if (!x->numel || T <= 0) return;
  DL_PARALLEL_FOR(tp->ctx, x->numel, (R + per - 1) / per, dl__b, {
    const int64_t r0 = dl__b * per, nr = R - r0 < per ? R - r0 : per;
    if (x->dtype == DL_F32)
      dl__rope_rows_f32((const float *)x->data + r0 * D, (float *)out + r0 * D, cs, nr, T, D, dir);
    else
      dl__rope_rows_f64((const double *)x->data + r0 * D, (double *)out + r0 * D, cs, nr, T, D, dir);
  });
}
/* saved[0] the table as a [2, T, D/2] f64 tensor. */
DL_API void dl__t_rope_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]);
  if (!gx) return;
  dl__rope_apply(tp, dl__t_contig(tp, n->op, n->out->grad), gx->data, (const double *)n->saved[0]->data,
                 n->saved[0]->shape[1], -1);
}

/* Rotary position embedding (RoFormer; the "rotate half" layout of GPT-NeoX,
 * Llama and Hugging Face's apply_rotary_pos_emb): x [..., T, D], D even,
 * position p = pos0 + t for row t, frequencies f_i = base^(-2i/D), i < D/2:
 *   y[i]       = x[i] cos(p f_i) - x[i + D/2] sin(p f_i)
 *   y[i + D/2] = x[i + D/2] cos(p f_i) + x[i] sin(p f_i)
 * (angles, cos and sin in double, each output rounded once). base 0 =
 * 10000. A rotation: backward applies its transpose, the tangent the same
 * rotation. pos0 >= 0 places the rows after a KV cache's. Apply it to q and
 * k (per head) before attention. On a device tape it is composed of slice,
 * mul, add and concat on the GPU with the table copied over. Output
 * contiguous, in the tape's arena until the rewind. */
DL_API dl_tensor *dl_t_rope(dl_tape *tp, dl_tensor *x, int64_t pos0, double base) {
  const char *const op = "dl_t_rope";
  dl_tensor *xc, *y, *tab;
  dl_node *nd;
  int64_t T, D;
  const double *cs;
  dl__ops_same_float(op, x, NULL);
  if (x->ndim < 2 || x->shape[x->ndim - 1] % 2 || x->shape[x->ndim - 1] == 0)
    DL_PANIC(x->ctx, op, "x %s must be [..., T, D] with D even and > 0", DL_SHAPESTR(x));
  if (pos0 < 0 || !(base >= 0) || base == HUGE_VAL || (base > 0 && base <= 1))
    DL_PANIC(x->ctx, op, "pos0 %lld must be >= 0 and base %g > 1 (0: 10000) (x %s)", (long long)pos0, base,
             DL_SHAPESTR(x));
  if (base == 0) base = 10000.0;
  T = x->shape[x->ndim - 2];
  D = x->shape[x->ndim - 1];
  tab = dl__rope_table(tp, op, T, D, pos0, base);
  cs = (const double *)tab->data;
#ifdef DL_USE_CUDA
  if (x->device == DL_CUDA || tp->gpu) { /* composed: x1 c - x2 s, x2 c + x1 s */
    const int e = x->ndim - 1;
    dl_tensor *ch = dl_tensor_new(&tp->arena, x->dtype, 2, DL__I64S(T, D / 2));
    dl_tensor *sh = dl_tensor_new(&tp->arena, x->dtype, 2, DL__I64S(T, D / 2));
    dl_tensor *c, *s, *x1, *x2, *parts[2];
    int64_t j;
    if (!ch || !sh) dl__tape_nomem(tp, op, "the rotary table", (size_t)(T * D) * dl_dtype_size(x->dtype));
    for (j = 0; j < T * (D / 2); j++) {
      dl__set_at(ch, j, cs[j]);
      dl__set_at(sh, j, cs[T * (D / 2) + j]);
    }
    c = dl_tape_input(tp, ch);
    s = dl_tape_input(tp, sh);
    x1 = dl_t_slice(tp, x, e, 0, D / 2, 1);
    x2 = dl_t_slice(tp, x, e, D / 2, D, 1);
    parts[0] = dl_t_sub(tp, dl_t_mul(tp, x1, c), dl_t_mul(tp, x2, s));
    parts[1] = dl_t_add(tp, dl_t_mul(tp, x2, c), dl_t_mul(tp, x1, s));
    return dl_t_concat(tp, 2, parts, e);
  }
#endif
  dl__ops_host_only(tp, op, x);
  xc = dl__t_contig(tp, op, x);
  y = dl_tape_out(tp, op, x->dtype, x->ndim, x->shape);
  dl__rope_apply(tp, xc, y->data, cs, T, 1);
  if (x->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    dl__rope_apply(tp, dl__t_contig(tp, op, x->tangent), ty->data, cs, T, 1);
  }
  if ((nd = dl_tape_record(tp, op, dl__t_rope_bw, y, x, NULL, NULL)) != NULL) {
    nd->saved[0] = tab;
    nd->flags |= DL_NODE_HVP_LINEAR; /* a rotation: linear */
  }
  return y;
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_OPS_ATTENTION_H */
