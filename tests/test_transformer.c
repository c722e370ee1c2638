/* tests/test_transformer.c - include/dl/transformer.h: the block, the GPT,
 * the KV cache and sampling.
 *
 * - dl_gradcheck (f64, reverse and forward mode) of a tiny GPT's loss with
 *   respect to its parameters, for learned positions and rope, LayerNorm and
 *   RMSNorm, GELU, GELU tanh and SwiGLU, tied and untied heads, biases or
 *   none, token shift or none: the tied wte's gradient is the head's plus
 *   the lookup's.
 * - Causality: changing token t leaves the logits before t unchanged.
 * - The KV cache: token-by-token logits equal the full pass's (f64, 1e-12),
 *   prompt chunks too, with and without token shift (the cache's prev, for
 *   LayerNorm + GELU and RMSNorm + SwiGLU, mixes drawn in [0, 1]); a shift
 *   model refuses a cache made without shift; generation with and without
 *   the cache draws the same tokens within the context.
 * - dl_sample: greedy, top-k 1, top-p near 0, the frequencies of a draw
 *   match the softmax (chi-square), seeded draws repeat.
 * - Names and shapes of the parameters; panics name the layer and shapes.
 */
#include "dl.h"
#include "harness.h"

static dl_ctx ctx;

typedef struct gpt_case {
  dl_model *m;
  dl_layer *gpt;
  dl_tensor *idx, *lab;
} gpt_case;

static dl_tensor *loss_fn(dl_tape *tp, dl_tensor **in, void *user) {
  gpt_case *c = (gpt_case *)user;
  dl_tensor *lg = dl_model_forward(c->m, tp, c->idx);
  (void)in;
  return dl_t_cross_entropy(tp, dl_t_reshape(tp, lg, 2, (const int64_t[]){lg->shape[0] * lg->shape[1], lg->shape[2]}),
                            c->lab, 0, DL_REDUCE_MEAN);
}

static dl_model *tiny(dl_dtype dt, int rope, dl_tf_norm norm, dl_tf_mlp mlp, int untied, int no_bias, int shift,
                      dl_layer **gpt) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){dt, 42});
  dl_gpt_desc g;
  memset(&g, 0, sizeof g);
  g.vocab = 7;
  g.context = 6;
  g.embed = 8;
  g.layers = 2;
  g.heads = 2;
  g.rope = rope;
  g.untied = untied;
  g.block.norm = norm;
  g.block.mlp = mlp;
  g.block.no_bias = no_bias;
  g.block.shift = shift;
  g.block.init_std = 0.5; /* large weights: gradients far from zero */
  *gpt = dl_gpt_make(m, NULL, "transformer", &g);
  return m;
}

static void test_gradcheck(void) {
  static const int cfg[][6] = {{0, 0, 0, 0, 0, 0}, {1, 1, 2, 0, 0, 0}, {0, 0, 1, 1, 0, 0}, {1, 0, 2, 1, 1, 0},
                               {0, 1, 0, 0, 1, 0}, {0, 0, 0, 0, 0, 1}, {1, 1, 2, 1, 1, 1}};
  int64_t toks[10] = {1, 5, 2, 2, 6, 0, 3, 4, 1, 6}, labs[10] = {5, 2, 2, 6, 0, 4, 1, 6, 3, 3};
  size_t k;
  for (k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
    gpt_case c;
    dl_tensor idx, lab, *in[16];
    dl_gradcheck_result r;
    int i, n = 0, ok;
    c.m = tiny(DL_F64, cfg[k][0], (dl_tf_norm)cfg[k][1], (dl_tf_mlp)cfg[k][2], cfg[k][3], cfg[k][4], cfg[k][5],
                 &c.gpt);
    dl_tensor_wrap(&idx, &ctx, DL_I64, 2, (const int64_t[]){2, 5}, toks);
    dl_tensor_wrap(&lab, &ctx, DL_I64, 1, (const int64_t[]){10}, labs);
    c.idx = &idx;
    c.lab = &lab;
    /* the GPT's own parameters and block 1's, at most 16 (dl_gradcheck's limit; token shift's mixes come before the MLP's) */
    for (i = 0; i < c.m->nparams && n < 16; i++) {
      dl_param *p = c.m->params[i];
      if (strstr(p->name, ".h.0.")) continue;
      dl_requires_grad(&p->t);
      in[n++] = &p->t;
    }
    ok = dl_gradcheck(&ctx, loss_fn, &c, n, in, 1e-6, 1e-6, &r);
    CHECK_MSG(ok && r.checked > 0, "config %zu: max_err %g (grad %g at input %d [%lld] %.10g vs %.10g, jvp %g)", k,
              r.max_err, r.grad_err, r.input, (long long)r.index, r.analytic, r.numeric, r.jvp_err);
    for (i = 0; i < n; i++) { /* dl_requires_grad's gradients are the caller's (tape.h) */
      dl_tensor_free(in[i]->grad);
      in[i]->grad = NULL;
    }
    dl_model_free(c.m);
  }
}

static void test_names(void) {
  dl_layer *gpt;
  dl_model *m = tiny(DL_F32, 0, DL_TF_LAYERNORM, DL_TF_GELU, 0, 0, 0, &gpt);
  static const char *const want[] = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                                     "transformer.ln_f.bias", "transformer.h.0.ln_1.weight",
                                     "transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_proj.bias"};
  size_t i;
  for (i = 0; i < sizeof want / sizeof want[0]; i++) CHECK_MSG(dl_model_param(m, want[i]) != NULL, "%s", want[i]);
  CHECK(dl_model_tensor(m, "transformer.h.0.attn.c_attn.weight")->shape[0] == 24);
  CHECK(dl_model_tensor(m, "transformer.h.0.mlp.c_fc.weight")->shape[0] == 32);
  CHECK(dl_model_param(m, "transformer.lm_head.weight") == NULL);
  CHECK(dl_model_param(m, "transformer.h.0.attn.shift") == NULL && dl_model_param(m, "transformer.h.0.mlp.shift") == NULL);
  dl_model_free(m);
  m = tiny(DL_F32, 1, DL_TF_RMSNORM, DL_TF_SWIGLU, 1, 1, 1, &gpt);
  CHECK(dl_model_tensor(m, "transformer.h.1.attn.shift")->shape[0] == 8);
  CHECK(dl_model_tensor(m, "transformer.h.1.mlp.shift")->ndim == 1 && dl__get_at(dl_model_tensor(m, "transformer.h.0.mlp.shift"), 3) == 0.5);
  CHECK(dl_model_param(m, "transformer.wpe.weight") == NULL && dl_model_param(m, "transformer.lm_head.weight"));
  CHECK(dl_model_param(m, "transformer.ln_f.bias") == NULL && dl_model_param(m, "transformer.h.1.attn.c_attn.bias") == NULL);
  CHECK(dl_model_tensor(m, "transformer.h.0.mlp.c_fc.weight")->shape[0] == 2 * 24); /* 8*8/3 -> 24 */
  dl_model_free(m);
}

/* logits of idx [B, T] with the cache fed in chunks vs one full pass (a
 * function per rope setting: EXPECT_PANIC's setjmp must not sit inside a
 * loop whose counter changes after it) */
static void cache_case(const int rope, const int shift, const int llama) {
  {
    dl_layer *gpt;
    dl_model *m = llama ? tiny(DL_F64, rope, DL_TF_RMSNORM, DL_TF_SWIGLU, 1, 1, shift, &gpt)
                        : tiny(DL_F64, rope, DL_TF_LAYERNORM, DL_TF_GELU, 0, 0, shift, &gpt);
    int64_t toks[12] = {1, 5, 2, 2, 6, 0, 3, 4, 1, 6, 0, 2}, t2[12];
    dl_tensor idx, *full, *chg;
    dl_tape tp;
    dl_kv_cache kv;
    double worst = 0, before = 0, after = 0;
    int64_t t, b, v;
    static const int64_t chunks[3] = {2, 1, 3};
    dl_tape_init(&tp, &ctx, 0);
    dl_model_train(m, 0);
    if (shift) { /* mixes of every value in [0, 1], not the initial 0.5 */
      dl_rng r = dl_rng_make(7);
      int i;
      int64_t j;
      for (i = 0; i < m->nparams; i++)
        if (strstr(m->params[i]->name, ".shift"))
          for (j = 0; j < m->params[i]->t.numel; j++) dl_f64(&m->params[i]->t)[j] = dl_rng_uniform(&r);
    }
    dl_tensor_wrap(&idx, &ctx, DL_I64, 2, (const int64_t[]){2, 6}, toks);
    full = dl_model_forward(m, &tp, &idx);
    memcpy(t2, toks, sizeof toks);
    t2[3] = 0; /* token 3 of sequence 0 changed */
    dl_tensor_wrap(&idx, &ctx, DL_I64, 2, (const int64_t[]){2, 6}, t2);
    chg = dl_model_forward(m, &tp, &idx);
    for (t = 0; t < 6; t++)
      for (v = 0; v < 7; v++) {
        const double d = fabs(dl__get_at(full, t * 7 + v) - dl__get_at(chg, t * 7 + v));
        if (t < 3) before = fmax(before, d);
        else after = fmax(after, d);
      }
    CHECK_MSG(before == 0 && after > 1e-6, "rope %d shift %d llama %d: causality: before %g after %g", rope, shift, llama,
              before, after);
    CHECK(dl_kv_cache_init(&kv, gpt, 2, 0) == DL_OK);
    {
      int64_t at = 0;
      int k;
      for (k = 0; k < 3; k++) {
        int64_t piece[2 * 3];
        dl_tensor pi, *o;
        for (b = 0; b < 2; b++)
          for (t = 0; t < chunks[k]; t++) piece[b * chunks[k] + t] = toks[b * 6 + at + t];
        dl_tensor_wrap(&pi, &ctx, DL_I64, 2, (const int64_t[]){2, chunks[k]}, piece);
        o = dl_gpt_forward(gpt, &tp, &pi, &kv);
        for (b = 0; b < 2; b++)
          for (t = 0; t < chunks[k]; t++)
            for (v = 0; v < 7; v++)
              worst = fmax(worst, fabs(dl__get_at(o, (b * chunks[k] + t) * 7 + v) -
                                       dl__get_at(full, (b * 6 + at + t) * 7 + v)));
        at += chunks[k];
      }
      CHECK(kv.len == 6);
    }
    CHECK_MSG(worst < 1e-12, "rope %d shift %d llama %d: cache vs full %g", rope, shift, llama, worst);
    {
      int64_t one = 1;
      dl_tensor pi;
      dl_tensor_wrap(&pi, &ctx, DL_I64, 2, (const int64_t[]){1, 1}, &one);
      EXPECT_PANIC(dl_gpt_forward(gpt, &tp, &pi, &kv), "GPT", "transformer", "positions 6 .. 6", "context 6");
      dl_kv_cache_reset(&kv);
      EXPECT_PANIC(dl_gpt_forward(gpt, &tp, &pi, &kv), "TransformerBlock", "KV cache", "batch 2");
    }
    dl_kv_cache_free(&kv);
    dl_tape_free(&tp);
    dl_model_free(m);
  }
}
/* a GPT with token shift refuses a cache made for one without */
static void cache_without_shift(void) {
  dl_layer *gs, *gn;
  dl_model *ms = tiny(DL_F32, 1, DL_TF_LAYERNORM, DL_TF_GELU, 0, 0, 1, &gs);
  dl_model *mn = tiny(DL_F32, 1, DL_TF_LAYERNORM, DL_TF_GELU, 0, 0, 0, &gn);
  int64_t one2[2] = {1, 2};
  dl_tensor pi;
  dl_tape tp;
  dl_kv_cache kv;
  dl_tape_init(&tp, &ctx, 0);
  CHECK(dl_kv_cache_init(&kv, gn, 2, 0) == DL_OK && kv.prev == NULL);
  dl_tensor_wrap(&pi, &ctx, DL_I64, 2, (const int64_t[]){2, 1}, one2);
  EXPECT_PANIC(dl_gpt_forward(gs, &tp, &pi, &kv), "TransformerBlock", "token shift", "KV cache", "width 8");
  dl_kv_cache_free(&kv);
  dl_tape_free(&tp);
  dl_model_free(ms);
  dl_model_free(mn);
}
/* with gradients on (the parameters require them), the cache refuses */
static void cache_refuses_grad(dl_model *m, dl_layer *gpt) {
  int64_t one2[2] = {1, 2};
  dl_tensor pi;
  dl_tape tp;
  dl_kv_cache kv;
  dl_tape_init(&tp, &ctx, 0);
  CHECK(dl_kv_cache_init(&kv, gpt, 2, 0) == DL_OK);
  dl_tensor_wrap(&pi, &ctx, DL_I64, 2, (const int64_t[]){2, 1}, one2);
  EXPECT_PANIC(dl_gpt_forward(gpt, &tp, &pi, &kv), "TransformerBlock", "dl_no_grad_begin");
  dl_kv_cache_free(&kv);
  dl_tape_free(&tp);
  (void)m;
}
static void test_cache_and_causality(void) {
  dl_layer *gpt;
  dl_model *m = tiny(DL_F32, 0, DL_TF_LAYERNORM, DL_TF_GELU, 0, 0, 0, &gpt);
  int i;
  cache_case(0, 0, 0);
  cache_case(1, 0, 0);
  cache_case(0, 1, 0);
  cache_case(1, 1, 0);
  cache_case(1, 1, 1);
  cache_without_shift();
  for (i = 0; i < m->nparams; i++) dl_requires_grad(&m->params[i]->t);
  cache_refuses_grad(m, gpt);
  for (i = 0; i < m->nparams; i++) { /* dl_requires_grad's gradients are the caller's */
    dl_tensor_free(m->params[i]->t.grad);
    m->params[i]->t.grad = NULL;
  }
  dl_model_free(m);
}

static void generate_case(int shift) {
  dl_layer *gpt;
  dl_model *m = tiny(DL_F32, 1, DL_TF_LAYERNORM, DL_TF_GELU, 0, 0, shift, &gpt);
  int64_t prompt[2] = {3, 1}, a[4], b[4], c[12];
  dl_rng r1 = dl_rng_make(5), r2 = dl_rng_make(5), r3 = dl_rng_make(5);
  const dl_sample_desc s = {1.0, 0, 0};
  CHECK(dl_gpt_generate(gpt, prompt, 2, 4, &s, &r1, 1, a) == DL_OK);
  CHECK(dl_gpt_generate(gpt, prompt, 2, 4, &s, &r2, 0, b) == DL_OK);
  CHECK(memcmp(a, b, sizeof a) == 0); /* within the context: the same tokens */
  CHECK(dl_gpt_generate(gpt, prompt, 2, 12, &s, &r3, 1, c) == DL_OK); /* past the context: the window slides */
  CHECK(memcmp(a, c, sizeof a) == 0);
  CHECK(m->training == 1);
  dl_model_free(m);
}
static void test_generate(void) {
  generate_case(0);
  generate_case(1);
}

static void test_sample(void) {
  double lg[5] = {0.5, 2.0, -1.0, 1.0, 0.0}, p[5], z = 0, chi = 0;
  int64_t cnt[5] = {0}, i, n = 20000;
  dl_tensor t;
  dl_rng r = dl_rng_make(1), r2 = dl_rng_make(9), r3 = dl_rng_make(9);
  dl_tensor_wrap(&t, &ctx, DL_F64, 1, (const int64_t[]){5}, lg);
  CHECK(dl_sample(&t, &(dl_sample_desc){0, 0, 0}, &r) == 1);
  CHECK(dl_sample(&t, &(dl_sample_desc){1, 1, 0}, &r) == 1);
  CHECK(dl_sample(&t, &(dl_sample_desc){1, 0, 1e-9}, &r) == 1);
  for (i = 0; i < 5; i++) z += (p[i] = exp(lg[i] / 0.7));
  for (i = 0; i < n; i++) cnt[dl_sample(&t, &(dl_sample_desc){0.7, 0, 0}, &r)]++;
  for (i = 0; i < 5; i++) {
    const double e = n * p[i] / z;
    chi += (cnt[i] - e) * (cnt[i] - e) / e;
  }
  CHECK_MSG(chi < 18.5, "chi-square %g (4 dof, p = 0.001)", chi); /* 18.47 */
  /* top_k 2: only tokens 1 and 3; top_p 0.8 of {1: .53, 3: .19, 0: .12 ...} keeps 1, 3, 0 */
  for (i = 0; i < 2000; i++) {
    const int64_t a = dl_sample(&t, &(dl_sample_desc){1, 2, 0}, &r);
    CHECK(a == 1 || a == 3);
    if (a != 1 && a != 3) break;
  }
  for (i = 0; i < 2000; i++) {
    const int64_t a = dl_sample(&t, &(dl_sample_desc){1, 0, 0.8}, &r);
    if (!(a == 1 || a == 3 || a == 0)) {
      CHECK_MSG(0, "top_p drew %lld", (long long)a);
      break;
    }
  }
  for (i = 0; i < 50; i++) CHECK(dl_sample(&t, &(dl_sample_desc){1, 3, 0.9}, &r2) == dl_sample(&t, &(dl_sample_desc){1, 3, 0.9}, &r3));
  EXPECT_PANIC(dl_sample(&t, &(dl_sample_desc){-1, 0, 0}, &r), "dl_sample", "temperature -1");
}

static void test_panics(void) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){DL_F32, 1});
  dl_block_desc b = {0};
  b.embed = 10;
  b.heads = 3;
  EXPECT_PANIC(dl_block_make(m, NULL, "blk", &b), "dl_block_make", "embed 10", "heads 3");
  b.heads = 2;
  {
    dl_layer *l = dl_block_make(m, NULL, "blk", &b);
    dl_tape tp;
    dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3, 8));
    CHECK(l != NULL);
    dl_tape_init(&tp, &ctx, 0);
    EXPECT_PANIC(dl_layer_call(l, &tp, x), "TransformerBlock", "blk", "f32[2, 3, 8]");
    dl_tape_free(&tp);
    dl_tensor_free(x);
  }
  dl_model_free(m);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  RUN(test_gradcheck);
  RUN(test_names);
  RUN(test_cache_and_causality);
  RUN(test_generate);
  RUN(test_sample);
  RUN(test_panics);
  return harness_finish();
}
