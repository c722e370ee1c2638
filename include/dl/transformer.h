/* dl/transformer.h - transformer blocks, a GPT, a KV cache and sampling.
 *
 *   dl_gpt_desc g = {0};
 *   g.vocab = 256; g.context = 128; g.embed = 256; g.layers = 4; g.heads = 4;
 *   dl_layer *gpt = dl_gpt_make(m, NULL, NULL, &g);      // one layer of the model
 *   dl_tensor *logits = dl_model_forward(m, &tp, idx);   // idx i64 [B, T] -> [B, T, vocab]
 *   ...
 *   dl_kv_cache kv;                                      // generation, O(T) per token
 *   dl_kv_cache_init(&kv, gpt, 1, 0);
 *   int64_t next = dl_sample(row_logits, &(dl_sample_desc){0.8, 40, 0.95}, &rng);
 *
 * Names and layouts are nanoGPT's (the PyTorch model in tools/gpt_reference.py
 * loads a model's safetensors file with load_state_dict, strict):
 *   wte.weight [V, C]          token embedding (the output projection too, tied)
 *   wpe.weight [context, C]    learned positions (absent with rope)
 *   h.N.ln_1.weight/.bias      pre-attention norm (RMSNorm: weight only)
 *   h.N.attn.c_attn.weight [3C, C], .bias [3C]   fused q, k, v projection
 *   h.N.attn.c_proj.weight [C, C], .bias [C]
 *   h.N.ln_2.weight/.bias
 *   h.N.mlp.c_fc.weight [F, C] (SwiGLU: [2F, C], gate rows then up rows), .bias
 *   h.N.mlp.c_proj.weight [C, F], .bias [C]
 *   ln_f.weight/.bias          final norm
 *   lm_head.weight [V, C]      only when untied
 *   h.N.attn.shift [C], h.N.mlp.shift [C]   token shift's mixes (only with shift; init 0.5)
 * Initialisation as nanoGPT (and GPT-2): every Linear and embedding weight
 * N(0, 0.02), the two c_proj weights N(0, 0.02/sqrt(2 layers)), biases 0,
 * norms 1 and 0.
 *
 * A block (pre-norm, as GPT-2):
 *   x = x + drop(c_proj(attn(rope(q), rope(k), v)))  with q, k, v = split(c_attn(ln_1(x)))
 *   x = x + drop(mlp(ln_2(x))),  mlp = c_proj(gelu(c_fc(h))) or c_proj(silu(gate) * up)
 * attention is dl_t_attention_qkv on c_attn's output (each head read in
 * place; never stores the T x T scores), or with rotary embeddings or a KV
 * cache the split heads through dl_t_scaled_dot_product_attention. Dropout is on the two residual branches and on the embeddings
 * (not on the attention probabilities).
 *
 * Token shift (desc.shift = 1; off by default, GPT-2 has none): each of the
 * two normed inputs h becomes h + mu * (h[t - 1] - h[t]) before its
 * projection (h[-1] = 0), with a learned mix mu [C] per block and branch,
 * as in RWKV's time mixing. It gives every layer the previous byte's
 * features directly, which attention must otherwise learn to fetch: on the
 * fortunes text a 2-block GPT of width 128 reached 2.40 bits per byte in one
 * epoch with it against 2.56 without (examples/gpt.c --shift). With a KV
 * cache the previous position's h is kept in the cache (dl_kv_cache.prev).
 *
 * Tied embeddings: the logits are ln_f(x) wte^T, so wte's gradient is the
 * head's (dense: every row) plus the lookup's (the rows of the batch's
 * tokens); both are added into its one dense gradient. A tied wte therefore
 * always has a dense gradient (a row-sparse one would save nothing: the head
 * touches every row).
 *
 * Device: the model's ops run on the GPU on a device tape (attention as
 * dl__sdpa_composed there); the KV cache and sampling are host code.
 */
#ifndef DL_TRANSFORMER_H
#define DL_TRANSFORMER_H

#include "layers.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY

/* >>block ------------------------------------------------------------------- */

/* The normalisation of a transformer block: LayerNorm or RMSNorm. */
typedef enum dl_tf_norm { DL_TF_LAYERNORM = 0, DL_TF_RMSNORM } dl_tf_norm;
/* The MLP of a transformer block: GELU, GELU with the tanh approximation,
 * or SwiGLU. */
typedef enum dl_tf_mlp { DL_TF_GELU = 0, DL_TF_GELU_TANH, DL_TF_SWIGLU } dl_tf_mlp;

/* A transformer block; zero = the default of each field. */
typedef struct dl_block_desc {
  int64_t embed;    /* C */
  int heads;        /* divides C */
  int64_t hidden;   /* MLP width F; 0: 4C (GELU), 8C/3 rounded up to a multiple of 8 (SwiGLU) */
  dl_tf_norm norm;  /* LayerNorm (default) or RMSNorm */
  dl_tf_mlp mlp;    /* GELU exact (default), GELU tanh, SwiGLU */
  int causal;       /* 1: each position sees itself and the past only; 0: full attention */
  int rope;         /* 1: rotary embeddings on q and k */
  double rope_base; /* 0: 10000 */
  double dropout;   /* residual dropout p; 0: none */
  int no_bias;      /* 1: the Linear layers without bias (norms keep theirs) */
  double eps;       /* norm eps; 0: 1e-5 (LayerNorm), machine epsilon (RMSNorm) */
  double init_std;  /* 0: 0.02 */
  double proj_std;  /* the c_proj weights; 0: init_std */
  int shift;        /* 1: token shift on the inputs of attention and MLP (attn.shift, mlp.shift; see above) */
} dl_block_desc;

/* The keys and values of past positions, per block, for generation. */
typedef struct dl_kv_cache {
  dl_ctx *ctx; /* allocator and error reports */
  int layers; /* blocks (one k and v each) */
  int64_t batch, heads, head_dim, cap, len; /* len positions held (of cap) */
  dl_tensor **k, **v;                       /* [layers] of [batch, heads, cap, head_dim], owned */
  dl_tensor **prev; /* token shift: [layers] of [2, batch, C], each block's normed inputs at position len - 1
                       (attention's, the MLP's) between calls of dl_gpt_forward; NULL without shift. A
                       block's call replaces its own at once: each block runs once per new position, and
                       len advances after all of them (dl_gpt_forward does both) */
} dl_kv_cache;

typedef struct dl__tf_block {
  dl_layer base;
  dl_block_desc d;
  dl_tensor *ln1_w, *ln1_b, *ln2_w, *ln2_b, *attn_w, *attn_b, *proj_w, *proj_b, *fc_w, *fc_b, *fc2_w, *fc2_b;
  dl_tensor *shift1, *shift2; /* token shift's mixes [C] (attention's input, the MLP's), or NULL */
  dl_rng rng; /* dropout */
  int index;  /* position in a GPT (its KV cache slot) */
} dl__tf_block;

/* The norm d chooses (the blocks' two and the GPT's final one). */
DL_API dl_tensor *dl__tf_norm(dl_tape *tp, const dl_block_desc *d, dl_tensor *x, dl_tensor *w, dl_tensor *bias) {
  if (d->norm == DL_TF_RMSNORM) return dl_t_rms_norm(tp, x, 1, w, d->eps);
  return dl_t_layer_norm(tp, x, 1, w, bias, d->eps);
}

/* Token shift: h [B, T, C] + mu [C] * (h one position back - h), i.e. each
 * position's channel c mixes (1 - mu_c) of itself with mu_c of the position
 * before it (zero before the first). With a cache, `prev` [B, C] holds the
 * normed input at position pos0 - 1 (used when pos0 > 0) and is replaced by
 * h's last position. */
DL_API dl_tensor *dl__tf_shift(dl_tape *tp, dl_tensor *h, dl_tensor *mu, dl_tensor *prev, int64_t pos0) {
  dl_tensor *sh = dl_t_pad(tp, h, 2, DL__I64S(0, 0, 1, -1), 0.0); /* [B, T, C]: position t holds h at t - 1 */
  if (prev && h->shape[1] > 0) { /* the cache path: no gradients, host tensors (dl_block_forward checked) */
    const int64_t B = h->shape[0], T = h->shape[1];
    const size_t row = (size_t)h->shape[2] * dl_dtype_size(h->dtype);
    int64_t b;
    for (b = 0; b < B; b++) {
      if (pos0 > 0) memcpy((char *)sh->data + (size_t)(b * T) * row, (const char *)prev->data + (size_t)b * row, row);
      memcpy((char *)prev->data + (size_t)b * row, (const char *)h->data + (size_t)(b * T + T - 1) * row, row);
    }
  }
  return dl_t_add(tp, h, dl_t_mul(tp, mu, dl_t_sub(tp, sh, h)));
}

/* The block on x [B, T, C]; with a cache, the keys and values of x's
 * positions are appended to the block's slot (positions cache->len ..) and
 * attention sees the cached ones before them (the caller advances len once
 * for all blocks: dl_gpt_forward does). With token shift the call also
 * replaces the slot's previous inputs (dl_kv_cache.prev) by x's last
 * position's: a second call at the same len would shift from those. */
DL_API dl_tensor *dl_block_forward(dl_layer *l, dl_tape *tp, dl_tensor *x, dl_kv_cache *cache) {
  dl__tf_block *b = (dl__tf_block *)l;
  const char *op = "TransformerBlock";
  dl_tensor *h, *qkv[3], *a, *m, prev1, prev2;
  int64_t B, T, C, H, hd, pos0 = cache ? cache->len : 0;
  static const int back[4] = {0, 2, 1, 3};
  int train;
  if (!l || strcmp(l->vt->type, "TransformerBlock") != 0)
    DL_PANIC(tp->ctx, "dl_block_forward", "'%s' is not a TransformerBlock", l ? l->name : "NULL");
  train = l->model->training;
  dl__check_input(l, x, 3, 3, 2, b->d.embed);
  B = x->shape[0];
  T = x->shape[1];
  C = b->d.embed;
  H = b->d.heads;
  hd = C / H;
  if (cache) {
    if (dl_grad_enabled(tp) && dl_requires_grad_p(b->attn_w))
      DL_PANIC(tp->ctx, op, "'%s': a KV cache is for inference: run it under dl_no_grad_begin (the cached keys and "
               "values carry no gradient, and later calls overwrite them)", l->name);
    if (b->index >= cache->layers || cache->batch != B || cache->heads != H || cache->head_dim != hd ||
        cache->k[0]->dtype != x->dtype)
      DL_PANIC(tp->ctx, op, "'%s': the KV cache [%d blocks, batch %lld, %lld heads of %lld, %s] does not fit x %s",
               l->name, cache->layers, (long long)cache->batch, (long long)cache->heads, (long long)cache->head_dim,
               dl_dtype_name(cache->k[0]->dtype), DL_SHAPESTR(x));
    if (b->shift1 && (!cache->prev || cache->prev[b->index]->shape[2] != C))
      DL_PANIC(tp->ctx, op, "'%s' has token shift but the KV cache keeps no previous inputs of width %lld for it "
               "(dl_kv_cache_init it for this block's GPT)", l->name, (long long)C);
    if (pos0 + T > cache->cap)
      DL_PANIC(tp->ctx, op, "'%s': the KV cache holds %lld positions, %lld + %lld asked", l->name,
               (long long)cache->cap, (long long)pos0, (long long)T);
    if (x->device != DL_CPU) DL_PANIC(tp->ctx, op, "'%s': the KV cache is host memory, x %s is on the GPU", l->name, DL_SHAPESTR(x));
    if (cache->prev) {
      prev1 = dl_view_slice(cache->prev[b->index], 0, 0, 1, 1); /* [1, B, C], contiguous */
      prev2 = dl_view_slice(cache->prev[b->index], 0, 1, 2, 1);
    }
  }
  /* attention */
  h = dl__tf_norm(tp, &b->d, x, b->ln1_w, b->ln1_b);
  if (b->shift1) h = dl__tf_shift(tp, h, b->shift1, cache && cache->prev ? &prev1 : NULL, pos0);
  if (!b->d.rope && !cache) { /* each head read in place from the projection: no split or merge copies */
    a = dl_t_attention_qkv(tp, dl_t_linear(tp, h, b->attn_w, b->attn_b), H, b->d.causal);
  } else {
    dl__mha_split(tp, dl_t_linear(tp, h, b->attn_w, b->attn_b), 3, H, hd, qkv); /* [B, H, T, hd] each */
    if (b->d.rope) {
      qkv[0] = dl_t_rope(tp, qkv[0], pos0, b->d.rope_base);
      qkv[1] = dl_t_rope(tp, qkv[1], pos0, b->d.rope_base);
    }
    if (cache) {
      dl_tensor *ck, *cv, kv;
      int64_t n, t;
      const size_t row = (size_t)hd * dl_dtype_size(x->dtype);
      ck = cache->k[b->index];
      cv = cache->v[b->index];
      for (n = 0; n < B * H; n++) /* copy the new rows in */
        for (t = 0; t < T; t++) {
          memcpy((char *)ck->data + ((size_t)(n * cache->cap + pos0 + t)) * row,
                 (const char *)qkv[1]->data + (size_t)(n * T + t) * row, row);
          memcpy((char *)cv->data + ((size_t)(n * cache->cap + pos0 + t)) * row,
                 (const char *)qkv[2]->data + (size_t)(n * T + t) * row, row);
        }
      kv = dl_view_slice(ck, 2, 0, pos0 + T, 1);
      qkv[1] = dl__tape_view(tp, op, &kv);
      kv = dl_view_slice(cv, 2, 0, pos0 + T, 1);
      qkv[2] = dl__tape_view(tp, op, &kv);
    }
    a = dl_t_scaled_dot_product_attention(tp, qkv[0], qkv[1], qkv[2], b->d.causal, 0);
    a = dl_t_reshape(tp, dl_t_permute(tp, a, back), 3, DL__I64S(B, T, C));
  }
  a = dl_t_linear(tp, a, b->proj_w, b->proj_b);
  if (b->d.dropout > 0) a = dl_t_dropout(tp, a, b->d.dropout, &b->rng, train);
  x = dl_t_add(tp, x, a);
  /* MLP */
  h = dl__tf_norm(tp, &b->d, x, b->ln2_w, b->ln2_b);
  if (b->shift2) h = dl__tf_shift(tp, h, b->shift2, cache && cache->prev ? &prev2 : NULL, pos0);
  m = dl_t_linear(tp, h, b->fc_w, b->fc_b);
  if (b->d.mlp == DL_TF_SWIGLU) {
    const int64_t F = b->d.hidden;
    m = dl_t_mul(tp, dl_t_silu(tp, dl_t_slice(tp, m, 2, 0, F, 1)), dl_t_slice(tp, m, 2, F, 2 * F, 1));
  } else {
    m = b->d.mlp == DL_TF_GELU_TANH ? dl_t_gelu_tanh(tp, m) : dl_t_gelu(tp, m);
  }
  m = dl_t_linear(tp, m, b->fc2_w, b->fc2_b);
  if (b->d.dropout > 0) m = dl_t_dropout(tp, m, b->d.dropout, &b->rng, train);
  return dl_t_add(tp, x, m);
}
DL_API dl_tensor *dl__tf_block_forward1(dl_layer *l, dl_tape *tp, dl_tensor *x) { return dl_block_forward(l, tp, x, NULL); }
DL_API void dl__tf_block_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__tf_block *b = (const dl__tf_block *)l;
  static const char *const mlp[3] = {"gelu", "gelu_tanh", "swiglu"};
  snprintf(buf, n, "%lld, heads=%d, mlp=%s %lld, %s%s%s%s", (long long)b->d.embed, b->d.heads, mlp[b->d.mlp],
           (long long)b->d.hidden, b->d.norm == DL_TF_RMSNORM ? "rmsnorm" : "layernorm", b->d.causal ? ", causal" : "",
           b->d.rope ? ", rope" : "", b->d.shift ? ", shift" : "");
}
DL__GLOBAL(const dl_layer_vt dl__tf_block_vt, {"TransformerBlock", dl__tf_block_forward1, dl__tf_block_describe, NULL, 0});

/* The desc with its defaults filled in; panics (naming `op`) on bad values. */
DL_API dl_block_desc dl__tf_block_defaults(dl_ctx *ctx, const char *op, const dl_block_desc *in, dl_dtype dt) {
  dl_block_desc d = *in;
  if (d.embed <= 0 || d.heads <= 0 || d.embed % d.heads || d.hidden < 0 || !(d.dropout >= 0 && d.dropout < 1) ||
      d.eps < 0 || d.init_std < 0 || d.proj_std < 0 || (unsigned)d.norm > DL_TF_RMSNORM ||
      (unsigned)d.mlp > DL_TF_SWIGLU || (d.rope && (d.embed / d.heads) % 2) || (d.rope_base != 0 && !(d.rope_base > 1)) ||
      (unsigned)d.shift > 1)
    DL_PANIC(ctx, op, "embed %lld must be > 0 and divisible by heads %d (head width even with rope), hidden %lld >= 0, "
             "dropout %g in [0, 1), eps, init_std, proj_std >= 0, rope_base 0 or > 1, shift %d 0 or 1, norm and mlp one "
             "of the enums", (long long)d.embed, d.heads, (long long)d.hidden, d.dropout, d.shift);
  if (!d.hidden) d.hidden = d.mlp == DL_TF_SWIGLU ? ((8 * d.embed + 2) / 3 + 7) / 8 * 8 : 4 * d.embed;
  if (!d.eps) d.eps = d.norm == DL_TF_RMSNORM ? (dt == DL_F32 ? (double)FLT_EPSILON : DBL_EPSILON) : 1e-5;
  if (!d.init_std) d.init_std = 0.02;
  if (!d.proj_std) d.proj_std = d.init_std;
  return d;
}

/* A pre-norm transformer block (GPT-2's, with the options above) as a layer
 * of m: called with x [B, T, C] it returns [B, T, C] (dl_block_forward for
 * a KV cache). Parameters as in the header comment, under `name`. */
DL_API dl_layer *dl_block_make(dl_model *m, dl_layer *parent, const char *name, const dl_block_desc *desc) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__tf_block *b;
  dl_block_desc d = dl__tf_block_defaults(m->ctx, "dl_block_make", desc, m->dtype);
  const int64_t C = d.embed, C3 = 3 * d.embed, F = d.hidden, Fin = d.mlp == DL_TF_SWIGLU ? 2 * d.hidden : d.hidden;
  const dl_init w = {DL_INIT_NORMAL, d.init_std}, wp = {DL_INIT_NORMAL, d.proj_std}, z = {DL_INIT_ZEROS, 0};
  const dl_init one = {DL_INIT_ONES, 0}, half = {DL_INIT_CONSTANT, 0.5};
  const int bias = !d.no_bias, ln = d.norm == DL_TF_LAYERNORM;
  b = (dl__tf_block *)dl_layer_new(m, parent, name, &dl__tf_block_vt, sizeof *b);
  if (!b) return NULL;
  b->d = d;
  b->rng = dl_rng_make(m->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(m->nlayers + 1)));
  b->ln1_w = dl_layer_param_new(&b->base, "ln_1.weight", DL_PARAM_NORM, 1, &C, one, m->dtype);
  if (ln) b->ln1_b = dl_layer_param_new(&b->base, "ln_1.bias", DL_PARAM_NORM, 1, &C, z, m->dtype);
  if (d.shift) b->shift1 = dl_layer_param_new(&b->base, "attn.shift", DL_PARAM_NORM, 1, &C, half, m->dtype);
  b->attn_w = dl_layer_param_new(&b->base, "attn.c_attn.weight", DL_PARAM_WEIGHT, 2, DL__I64S(C3, C), w, m->dtype);
  if (bias) b->attn_b = dl_layer_param_new(&b->base, "attn.c_attn.bias", DL_PARAM_BIAS, 1, &C3, z, m->dtype);
  b->proj_w = dl_layer_param_new(&b->base, "attn.c_proj.weight", DL_PARAM_WEIGHT, 2, DL__I64S(C, C), wp, m->dtype);
  if (bias) b->proj_b = dl_layer_param_new(&b->base, "attn.c_proj.bias", DL_PARAM_BIAS, 1, &C, z, m->dtype);
  b->ln2_w = dl_layer_param_new(&b->base, "ln_2.weight", DL_PARAM_NORM, 1, &C, one, m->dtype);
  if (ln) b->ln2_b = dl_layer_param_new(&b->base, "ln_2.bias", DL_PARAM_NORM, 1, &C, z, m->dtype);
  if (d.shift) b->shift2 = dl_layer_param_new(&b->base, "mlp.shift", DL_PARAM_NORM, 1, &C, half, m->dtype);
  b->fc_w = dl_layer_param_new(&b->base, "mlp.c_fc.weight", DL_PARAM_WEIGHT, 2, DL__I64S(Fin, C), w, m->dtype);
  if (bias) b->fc_b = dl_layer_param_new(&b->base, "mlp.c_fc.bias", DL_PARAM_BIAS, 1, &Fin, z, m->dtype);
  b->fc2_w = dl_layer_param_new(&b->base, "mlp.c_proj.weight", DL_PARAM_WEIGHT, 2, DL__I64S(C, F), wp, m->dtype);
  if (bias) b->fc2_b = dl_layer_param_new(&b->base, "mlp.c_proj.bias", DL_PARAM_BIAS, 1, &C, z, m->dtype);
  return m->status == DL_OK ? &b->base : NULL;
}
/* The block's dropout rng (for checkpoints), or NULL if l is not a block. */
DL_API dl_rng *dl_block_rng(dl_layer *l) {
  return l && l->vt == &dl__tf_block_vt ? &((dl__tf_block *)l)->rng : NULL;
}

/* >>gpt --------------------------------------------------------------------- */

/* A GPT's shape and options (see above): vocabulary, context, width,
 * layers, heads, positions and head. */
typedef struct dl_gpt_desc {
  int64_t vocab, context, embed; /* V, the longest sequence, C */
  int layers, heads; /* blocks and attention heads */
  int rope;        /* 1: rotary embeddings in every block, no wpe; 0: learned positions wpe */
  int untied;      /* 1: a separate lm_head.weight; 0: the head reuses wte (GPT-2) */
  double dropout;  /* embedding and residual dropout */
  dl_block_desc block; /* the rest of each block's options (embed, heads, causal, rope, dropout and
                          proj_std are set from the fields above: causal always) */
} dl_gpt_desc;

typedef struct dl__gpt {
  dl_layer base;
  dl_gpt_desc d;
  dl_tensor *wte, *wpe, *lnf_w, *lnf_b, *head;
  dl_layer *h;        /* Sequential of the blocks */
  dl_rng rng;         /* embedding dropout */
} dl__gpt;

DL_API dl__gpt *dl__gpt_of(dl_ctx *ctx, const char *op, dl_layer *l) {
  if (!l || strcmp(l->vt->type, "GPT") != 0) DL_PANIC(ctx, op, "'%s' is not a GPT layer", l ? l->name : "NULL");
  return (dl__gpt *)l;
}

/* The GPT on token indices idx [B, T] (i64 or i32, each in [0, vocab)):
 * logits [B, T, vocab] on the tape. With a cache (dl_kv_cache_init), idx
 * continues the cached sequence: positions cache->len .. len + T - 1,
 * attention over the cached keys too, and the cache advances by T. T (plus
 * the cached length) must not pass the context. */
DL_API dl_tensor *dl_gpt_forward(dl_layer *l, dl_tape *tp, dl_tensor *idx, dl_kv_cache *cache) {
  dl__gpt *g = dl__gpt_of(tp->ctx, "dl_gpt_forward", l);
  const int64_t pos0 = cache ? cache->len : 0;
  dl_tensor *x, *w;
  int64_t T;
  int i;
  if ((idx->dtype != DL_I64 && idx->dtype != DL_I32) || idx->ndim != 2)
    DL_PANIC(tp->ctx, "GPT", "'%s' takes i64 or i32 token indices [B, T], not %s", l->name, DL_SHAPESTR(idx));
  T = idx->shape[1];
  if (pos0 + T > g->d.context)
    DL_PANIC(tp->ctx, "GPT", "'%s': positions %lld .. %lld pass the context %lld (idx %s)", l->name, (long long)pos0,
             (long long)(pos0 + T - 1), (long long)g->d.context, DL_SHAPESTR(idx));
  /* the embedding through a view node: a dense gradient, which the tied head adds to */
  w = dl_requires_grad_p(g->wte) && dl_grad_enabled(tp) ? dl_t_reshape(tp, g->wte, 2, g->wte->shape) : g->wte;
  x = dl_t_embedding(tp, w, idx); /* [B, T, C] */
  if (g->wpe) x = dl_t_add(tp, x, dl_t_slice(tp, g->wpe, 0, pos0, pos0 + T, 1));
  if (g->d.dropout > 0) x = dl_t_dropout(tp, x, g->d.dropout, &g->rng, l->model->training);
  for (i = 0; i < g->h->nchild; i++) x = dl_block_forward(g->h->child[i], tp, x, cache);
  if (cache) cache->len += T;
  x = dl__tf_norm(tp, &g->d.block, x, g->lnf_w, g->lnf_b);
  return dl_t_linear(tp, x, g->head ? g->head : g->wte, NULL);
}
DL_API dl_tensor *dl__gpt_forward1(dl_layer *l, dl_tape *tp, dl_tensor *x) { return dl_gpt_forward(l, tp, x, NULL); }
DL_API void dl__gpt_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__gpt *g = (const dl__gpt *)l;
  snprintf(buf, n, "vocab=%lld, context=%lld, %d x %lld, heads=%d%s%s%s", (long long)g->d.vocab,
           (long long)g->d.context, g->d.layers, (long long)g->d.embed, g->d.heads, g->d.rope ? ", rope" : "",
           g->d.untied ? ", untied" : "", g->d.block.shift ? ", shift" : "");
}
DL__GLOBAL(const dl_layer_vt dl__gpt_vt, {"GPT", dl__gpt_forward1, dl__gpt_describe, NULL, 1});

/* A GPT (token embedding, positions, `layers` causal blocks, final norm,
 * head) as one layer of m: dl_model_forward(m, tp, idx [B, T]) gives the
 * logits [B, T, vocab] when it is the model's only layer. Parameter names in
 * the header comment. */
DL_API dl_layer *dl_gpt_make(dl_model *m, dl_layer *parent, const char *name, const dl_gpt_desc *desc) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__gpt *g;
  dl_gpt_desc d = *desc;
  dl_block_desc bd;
  const dl_init one = {DL_INIT_ONES, 0}, z = {DL_INIT_ZEROS, 0};
  int i;
  if (d.vocab <= 0 || d.context <= 0 || d.layers <= 0)
    DL_PANIC(m->ctx, "dl_gpt_make", "vocab %lld, context %lld and layers %d must be > 0", (long long)d.vocab,
             (long long)d.context, d.layers);
  bd = d.block;
  bd.embed = d.embed;
  bd.heads = d.heads;
  bd.causal = 1;
  bd.rope = d.rope;
  bd.dropout = d.dropout;
  if (!bd.init_std) bd.init_std = 0.02;
  if (!bd.proj_std) bd.proj_std = bd.init_std / sqrt(2.0 * d.layers);
  d.block = dl__tf_block_defaults(m->ctx, "dl_gpt_make", &bd, m->dtype);
  g = (dl__gpt *)dl_layer_new(m, parent, name, &dl__gpt_vt, sizeof *g);
  if (!g) return NULL;
  g->d = d;
  g->rng = dl_rng_make(m->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(m->nlayers + 1)));
  /* its own parameters first (a layer's are consecutive), then the blocks */
  g->wte = dl_layer_param_new(&g->base, "wte.weight", DL_PARAM_WEIGHT, 2, DL__I64S(d.vocab, d.embed),
                              dl__init(DL_INIT_NORMAL, d.block.init_std), m->dtype);
  if (!d.rope)
    g->wpe = dl_layer_param_new(&g->base, "wpe.weight", DL_PARAM_WEIGHT, 2, DL__I64S(d.context, d.embed),
                                dl__init(DL_INIT_NORMAL, d.block.init_std), m->dtype);
  g->lnf_w = dl_layer_param_new(&g->base, "ln_f.weight", DL_PARAM_NORM, 1, &d.embed, one, m->dtype);
  if (d.block.norm == DL_TF_LAYERNORM)
    g->lnf_b = dl_layer_param_new(&g->base, "ln_f.bias", DL_PARAM_NORM, 1, &d.embed, z, m->dtype);
  if (d.untied)
    g->head = dl_layer_param_new(&g->base, "lm_head.weight", DL_PARAM_WEIGHT, 2, DL__I64S(d.vocab, d.embed),
                                 dl__init(DL_INIT_NORMAL, d.block.init_std), m->dtype);
  g->h = dl_sequential_make(m, &g->base, "h");
  for (i = 0; i < d.layers && m->status == DL_OK; i++) {
    dl_layer *b = dl_block_make(m, g->h, NULL, &d.block);
    if (b) ((dl__tf_block *)b)->index = i;
  }
  return m->status == DL_OK ? &g->base : NULL;
}

/* >>kv cache ----------------------------------------------------------------- */

/* Empties c (its memory stays). */
DL_API void dl_kv_cache_reset(dl_kv_cache *c) { c->len = 0; }
/* Releases c's tensors (c itself is the caller's). */
DL_API void dl_kv_cache_free(dl_kv_cache *c) {
  int i;
  if (!c) return;
  for (i = 0; i < c->layers; i++) {
    if (c->k && c->k[i]) dl_tensor_free(c->k[i]);
    if (c->v && c->v[i]) dl_tensor_free(c->v[i]);
    if (c->prev && c->prev[i]) dl_tensor_free(c->prev[i]);
  }
  if (c->k) dl_free(c->ctx, c->k);
  if (c->v) dl_free(c->ctx, c->v);
  if (c->prev) dl_free(c->ctx, c->prev);
  memset(c, 0, sizeof *c);
}
/* A cache for `gpt` (host memory, the model's dtype): batch sequences of up
 * to cap positions (0: the context). DL_OK or DL_ERR_NOMEM (nothing held). */
DL_API dl_status dl_kv_cache_init(dl_kv_cache *c, dl_layer *gpt, int64_t batch, int64_t cap) {
  dl__gpt *g = dl__gpt_of(gpt ? gpt->model->ctx : NULL, "dl_kv_cache_init", gpt);
  dl_ctx *ctx = gpt->model->ctx;
  int i;
  memset(c, 0, sizeof *c);
  if (batch <= 0 || cap < 0 || cap > g->d.context)
    DL_PANIC(ctx, "dl_kv_cache_init", "batch %lld must be > 0 and cap %lld in 0 .. context %lld", (long long)batch,
             (long long)cap, (long long)g->d.context);
  c->ctx = ctx;
  c->layers = g->d.layers;
  c->batch = batch;
  c->heads = g->d.heads;
  c->head_dim = g->d.embed / g->d.heads;
  c->cap = cap ? cap : g->d.context;
  c->k = (dl_tensor **)dl_alloc(ctx, sizeof(dl_tensor *) * (size_t)c->layers);
  c->v = (dl_tensor **)dl_alloc(ctx, sizeof(dl_tensor *) * (size_t)c->layers);
  if (g->d.block.shift) c->prev = (dl_tensor **)dl_alloc(ctx, sizeof(dl_tensor *) * (size_t)c->layers);
  if (!c->k || !c->v || (g->d.block.shift && !c->prev)) {
    dl_free(ctx, c->k);
    dl_free(ctx, c->v);
    dl_free(ctx, c->prev);
    memset(c, 0, sizeof *c);
    return DL_ERR_NOMEM;
  }
  memset(c->k, 0, sizeof(dl_tensor *) * (size_t)c->layers);
  memset(c->v, 0, sizeof(dl_tensor *) * (size_t)c->layers);
  if (c->prev) memset(c->prev, 0, sizeof(dl_tensor *) * (size_t)c->layers);
  for (i = 0; i < c->layers; i++) {
    const int64_t sh[4] = {batch, c->heads, c->cap, c->head_dim}, shp[3] = {2, batch, g->d.embed};
    c->k[i] = dl_tensor_make(ctx, gpt->model->dtype, 4, sh);
    c->v[i] = dl_tensor_make(ctx, gpt->model->dtype, 4, sh);
    if (c->prev) c->prev[i] = dl_tensor_make(ctx, gpt->model->dtype, 3, shp);
    if (!c->k[i] || !c->v[i] || (c->prev && !c->prev[i])) {
      dl_kv_cache_free(c);
      return DL_ERR_NOMEM;
    }
  }
  return DL_OK;
}

/* >>sampling ----------------------------------------------------------------- */

/* temperature 0: the most likely token (greedy); top_k 0: all tokens;
 * top_p 0 or 1: no nucleus cut. */
typedef struct dl_sample_desc {
  double temperature; /* 0: the most likely token (greedy) */
  int top_k; /* 0: all tokens */
  double top_p; /* 0 or 1: no nucleus cut */
} dl_sample_desc;

/* One token drawn from logits [V] (any strides, f32 or f64, on the host):
 * p proportional to exp(logit / temperature) over the top_k most likely
 * tokens, cut further to the smallest set whose probability reaches top_p
 * (ties by the lower index first), one uniform draw from r; temperature
 * 0 takes the largest logit and draws nothing. Scratch of V (double,
 * int64) pairs from logits->ctx's allocator; O(V) without top-k or top-p,
 * O(V k) for a small top-k, O(V log V) otherwise. Returns the token, or -1
 * when out of memory. */
typedef struct dl__sample_pair {
  double p;
  int64_t i;
} dl__sample_pair;
/* Descending p, ties by the lower index. */
DL_API int dl__sample_cmp(const void *a, const void *b) {
  const dl__sample_pair *x = (const dl__sample_pair *)a, *y = (const dl__sample_pair *)b;
  if (x->p != y->p) return x->p > y->p ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}
/* Draw a token from logits (a [V] row) as s says (temperature, top-k,
 * top-p; temperature 0: the argmax) from r. */
DL_API int64_t dl_sample(const dl_tensor *logits, const dl_sample_desc *s, dl_rng *r) {
  const int64_t V = logits->numel;
  const int nucleus = s->top_p > 0 && s->top_p < 1;
  double mx = -HUGE_VAL, sum = 0, u, acc;
  dl__sample_pair *q;
  int64_t i, j, n, best = 0;
  if (logits->device != DL_CPU) DL_PANIC(logits->ctx, "dl_sample", "logits %s are on the GPU", DL_SHAPESTR(logits));
  if (logits->dtype != DL_F32 && logits->dtype != DL_F64)
    DL_PANIC(logits->ctx, "dl_sample", "logits %s must be f32 or f64", DL_SHAPESTR(logits));
  if (V <= 0 || !(s->temperature >= 0) || s->top_k < 0 || !(s->top_p >= 0 && s->top_p <= 1))
    DL_PANIC(logits->ctx, "dl_sample", "logits %s, temperature %g >= 0, top_k %d >= 0, top_p %g in [0, 1]",
             DL_SHAPESTR(logits), s->temperature, s->top_k, s->top_p);
  for (i = 0; i < V; i++) {
    const double x = dl__get_at(logits, dl__offset_of_linear(logits, i));
    if (x > mx) {
      mx = x;
      best = i;
    }
  }
  if (s->temperature == 0) return best;
  q = (dl__sample_pair *)dl_alloc(logits->ctx, sizeof *q * (size_t)V);
  if (!q) return -1;
  for (i = 0; i < V; i++) {
    q[i].p = exp((dl__get_at(logits, dl__offset_of_linear(logits, i)) - mx) / s->temperature);
    q[i].i = i;
  }
  n = s->top_k > 0 && s->top_k < V ? s->top_k : V;
  if (n < V && (int64_t)s->top_k * 16 < V) { /* a small k: the k largest by insertion, O(V k) */
    for (i = 1; i < V; i++) {
      const dl__sample_pair t = q[i];
      j = i < n ? i : n - 1;
      if (i >= n && dl__sample_cmp(&t, &q[n - 1]) >= 0) continue;
      while (j > 0 && dl__sample_cmp(&t, &q[j - 1]) < 0) {
        q[j] = q[j - 1];
        j--;
      }
      q[j] = t;
    }
  } else if (n < V || nucleus) { /* sorted whole, O(V log V) */
    qsort(q, (size_t)V, sizeof *q, dl__sample_cmp);
  } /* else: every token, any order */
  for (i = 0; i < n; i++) sum += q[i].p;
  if (nucleus) { /* the smallest prefix reaching top_p of the kept mass */
    acc = 0;
    for (i = 0; i < n; i++) {
      acc += q[i].p;
      if (acc >= s->top_p * sum) {
        n = i + 1;
        break;
      }
    }
    sum = acc;
  }
  u = dl_rng_uniform(r) * sum;
  acc = 0;
  best = q[n - 1].i;
  for (i = 0; i < n; i++) {
    acc += q[i].p;
    if (u < acc) {
      best = q[i].i;
      break;
    }
  }
  dl_free(logits->ctx, q);
  return best;
}

/* Generate n_new tokens after prompt[0 .. n_prompt) (batch 1) with gpt in
 * eval mode, on a scratch tape of ctx's: with use_cache, the prompt fills a
 * KV cache once and each new token costs one position; without, each token
 * recomputes the whole window (the reference for the cache's speed-up).
 * Past the context the window slides: without the cache it is the last
 * `context` tokens at every step; with it, the cache is refilled from the
 * last context/2 tokens when full (so past the context the two modes see
 * different windows and may draw differently). out[0 .. n_new) gets the
 * tokens. DL_OK, DL_ERR_NOMEM. The model's mode is restored. */
DL_API dl_status dl_gpt_generate(dl_layer *gpt, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                                 const dl_sample_desc *s, dl_rng *r, int use_cache, int64_t *out) {
  dl__gpt *g = dl__gpt_of(gpt ? gpt->model->ctx : NULL, "dl_gpt_generate", gpt);
  dl_model *m = gpt->model;
  dl_ctx *ctx = m->ctx;
  const int64_t W = g->d.context;
  const int was = m->training;
  dl_kv_cache kv;
  dl_tape tp;
  dl_status st;
  int64_t *seq, len, t, fed = 0;
  if (n_prompt < 1 || n_new < 0) DL_PANIC(ctx, "dl_gpt_generate", "a prompt of at least one token (%lld) and n_new %lld >= 0",
                                          (long long)n_prompt, (long long)n_new);
  seq = (int64_t *)dl_alloc(ctx, sizeof(int64_t) * (size_t)(n_prompt + n_new));
  if (!seq) return DL_ERR_NOMEM;
  memcpy(seq, prompt, sizeof(int64_t) * (size_t)n_prompt);
  len = n_prompt;
  if ((st = dl_tape_init(&tp, ctx, 0)) != DL_OK) {
    dl_free(ctx, seq);
    return st;
  }
  if (use_cache && (st = dl_kv_cache_init(&kv, gpt, 1, 0)) != DL_OK) {
    dl_tape_free(&tp);
    dl_free(ctx, seq);
    return st;
  }
  m->training = 0;
  dl_no_grad_begin(&tp);
  for (t = 0; t < n_new; t++) {
    int64_t start, n;
    dl_tensor idx, *logits, row;
    if (use_cache) {
      if (fed == 0) { /* the prompt (its last W tokens) */
        start = len > W ? len - W : 0;
      } else if (kv.len + len - fed > W) { /* full: refill from the last W/2 tokens */
        start = len - (W / 2 > 0 ? W / 2 : 1);
        dl_kv_cache_reset(&kv);
      } else {
        start = fed;
      }
      n = len - start;
    } else {
      start = len > W ? len - W : 0;
      n = len - start;
    }
    dl_tensor_wrap(&idx, ctx, DL_I64, 2, DL__I64S(1, n), seq + start);
    logits = dl_gpt_forward(gpt, &tp, &idx, use_cache ? &kv : NULL);
    fed = len;
    row = dl_view_slice(logits, 1, n - 1, n, 1);
    row = dl_view_reshape(&row, 1, &g->d.vocab);
    if (row.device != DL_CPU) { /* not expected: the cache is host-only; a no-cache model on the GPU */
      dl_tensor *h = dl_tape_host(&tp, dl__tape_view(&tp, "dl_gpt_generate", &row));
      row = *h;
    }
    seq[len] = dl_sample(&row, s, r);
    if (seq[len] < 0) {
      st = DL_ERR_NOMEM;
      break;
    }
    out[t] = seq[len++];
    dl_tape_rewind(&tp);
  }
  dl_no_grad_end(&tp);
  m->training = was;
  if (use_cache) dl_kv_cache_free(&kv);
  dl_tape_free(&tp);
  dl_free(ctx, seq);
  return st;
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_TRANSFORMER_H */
