/* dl/ops/attention.h - multi-head attention on the tape, PyTorch's layout.
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

#ifndef __cplusplus /* the ops are C (C++ sees the scalar math and the op list) */

#ifndef __cplusplus

/* >>multi-head attention ------------------------------------------------------ */

/* p [B, T, n*E] (contiguous, the n projections side by side) as n tensors
 * [B, nh, T, hd] (contiguous, E = nh*hd): one copy for all n. */
DL_API void dl__mha_split(dl_tape *tp, dl_tensor *p, int n, int64_t nh, int64_t hd, dl_tensor **out) {
  const int64_t B = p->shape[0], T = p->shape[1];
  static const int perm[5] = {2, 0, 3, 1, 4};
  dl_tensor *a = dl_t_reshape(tp, p, 5, (const int64_t[]){B, T, n, nh, hd});
  int k;
  a = dl_t_contiguous(tp, dl_t_permute(tp, a, perm)); /* [n, B, nh, T, hd] */
  for (k = 0; k < n; k++)
    out[k] = dl_t_reshape(tp, dl_t_slice(tp, a, 0, k, k + 1, 1), 4, (const int64_t[]){B, nh, T, hd});
}

/* The additive mask [Tq, Tk] in q's dtype (tape arena): attn_mask's values
 * (float) or -inf where it is nonzero (u8), and -inf where causal and j > i.
 * On a device tape (DL_USE_CUDA) the mask is built on the host, in scratch of
 * the tape's host arena, and copied to the device tensor returned; an
 * attn_mask on the device is first copied to the host (both copies wait for
 * the device: the mask is [Tq, Tk], made once per call). */
DL_API dl_tensor *dl__mha_mask(dl_tape *tp, const char *op, const dl_tensor *q, const dl_tensor *attn_mask,
                               int causal, int64_t Tq, int64_t Tk) {
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
      if (causal && j > i) v = -INFINITY;
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
  if (attn_mask || causal) s = dl_t_add(tp, s, dl__mha_mask(tp, op, q, attn_mask, causal, Tq, Tk));
  o = dl_t_matmul(tp, dl_t_softmax(tp, s, -1), vh); /* [B, nh, Tq, hd] */
  o = dl_t_reshape(tp, dl_t_permute(tp, o, back), 3, (const int64_t[]){B, Tq, E});
  return dl_t_linear(tp, o, out_proj_weight, out_proj_bias);
}

#endif /* !__cplusplus */
#endif /* !__cplusplus */
DL__HEADER_END
#endif /* DL_OPS_ATTENTION_H */
