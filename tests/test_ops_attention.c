/* dl-test-cxx */
/* tests/test_ops_attention.c - dl_t_multi_head_attention (include/dl/ops/attention.h).
 *
 * - PyTorch agreement (tests/fixtures/attention.txt, tools/fixtures_attention.py):
 *   torch.nn.MultiheadAttention(E, heads, batch_first=True), need_weights=False:
 *   self- and cross-attention (Tq != Tk, k and v one tensor or two), 2, 3 and
 *   4 heads, float and bool masks, causal, no bias; the output and the
 *   gradients with respect to q, k, v (or x) and all four parameters, f64
 *   (element-wise relative error <= 1e-10) and f32 (norm-wise <= 5e-6).
 *   Every case also runs with all inputs strided views, and self-attention
 *   cases once more with q, k, v three separate copies of x (the three
 *   gradients must add up to x's).
 * - dl_gradcheck (f64, reverse and forward mode) of every configuration.
 * - causal == the explicit -inf mask, bool mask == the -inf float mask, bit
 *   for bit; 1 and 2 threads bit-identical; no allocation in the steady
 *   state; panics name the op and the shapes.
 */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx, ctx1, ctx2;

/* ---- helpers --------------------------------------------------------------- */

static dl_tensor *mk(dl_ctx *c, dl_dtype dt, int nd, const int64_t *shape, dl_rng *r, double sd) {
  dl_tensor *t = dl_tensor_make(c, dt, nd, shape);
  if (r) dl_tensor_rand_normal(t, r, 0, sd);
  else dl_tensor_fill(t, 0.0);
  return t;
}
static double max_abs(const dl_tensor *t) {
  double m = 0;
  int64_t i;
  for (i = 0; i < t->numel; i++) m = fmax(m, fabs(dl__get_at(t, dl__offset_of_linear(t, i))));
  return m;
}
static int same_bits(const dl_tensor *a, const dl_tensor *b) {
  return a && b && a->numel == b->numel && a->dtype == b->dtype &&
         memcmp(a->data, b->data, (size_t)a->numel * dl_dtype_size(a->dtype)) == 0;
}
static dl_tensor *copy_of(const dl_tensor *t) {
  dl_tensor *c = dl_tensor_make(&ctx, t->dtype, t->ndim, t->shape);
  dl_tensor_copy(c, t);
  return c;
}
/* A strided tensor with t's values: every other element of the last
 * dimension of a new buffer (*base, poisoned elsewhere). */
static dl_tensor strided_copy(const dl_tensor *t, dl_tensor **base) {
  int64_t sh[DL_MAX_DIMS], i;
  int d;
  dl_tensor v;
  for (d = 0; d < t->ndim; d++) sh[d] = t->shape[d];
  sh[t->ndim - 1] *= 2;
  *base = dl_tensor_make(&ctx, t->dtype, t->ndim, sh);
  dl_tensor_fill(*base, 1e30);
  v = dl_view_slice(*base, t->ndim - 1, 0, sh[t->ndim - 1], 2);
  for (i = 0; i < t->numel; i++) dl__set_at(&v, dl__offset_of_linear(&v, i), dl__get_at(t, i));
  return v;
}

static void print_gc(const char *what, const dl_gradcheck_result *r) {
  fprintf(stderr, "  gradcheck %s: max_err %.3g (grad %.3g at input %d element %lld: %.17g vs %.17g, jvp %.3g)\n",
          what, r->max_err, r->grad_err, r->input, (long long)r->index, r->analytic, r->numeric, r->jvp_err);
}
static double worst_gc;
static int gc_runs;
#define GRADCHECK(what, f, user, nin, in)                                              \
  do {                                                                                 \
    dl_gradcheck_result r_;                                                            \
    int ok_ = dl_gradcheck(&ctx, (f), (user), (nin), (in), 1e-6, 1e-6, &r_);           \
    CHECK_MSG(ok_ && r_.checked > 0, "%s", (what));                                    \
    if (!ok_ || r_.checked == 0) print_gc((what), &r_);                               \
    if (r_.max_err > worst_gc) worst_gc = r_.max_err;                                  \
    gc_runs++;                                                                         \
  } while (0)

/* ---- PyTorch fixtures -------------------------------------------------------- */

static fx2_set fx;
static int fx_ok;
static double worst_fx[2];
static int fx_runs;

/* The error of got against fixture key (element-wise in f64, norm-wise in f32). */
static double err_of(const fx2_case *c, const dl_tensor *got, const char *key) {
  return c->f64 ? fx2_err(got, fx2_get(c, key)) : fx2_err_norm(got, fx2_get(c, key));
}

/* One fixture case. mode 0: as torch was called; 1: every input and
 * parameter a strided view; 2: tensors shared between q, k, v passed as
 * separate copies (their gradients summed for the comparison). Returns the
 * number of comparisons off tolerance. */
static int run_fixture(const fx2_case *c, int mode) {
  static const char *keys[8] = {"x", "q", "k", "v", "in_w", "in_b", "out_w", "out_b"};
  const dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  const double tol = c->f64 ? 1e-10 : 5e-6;
  const int heads = (int)fx2_param(c, "heads", 0), self = fx2_param(c, "self", 0) != 0;
  const int kv = fx2_param(c, "kv", 0) != 0, causal = fx2_param(c, "causal", 0) != 0;
  dl_tensor *own[8], views[8], *bases[8], *in[8], *extra[3] = {NULL, NULL, NULL}, *mask = NULL, *gy, *y;
  dl_tensor *q, *k, *v;
  dl_tape tp;
  int j, bad = 0;
  double e;
  for (j = 0; j < 8; j++) {
    own[j] = fx2_make(c, keys[j], dt);
    bases[j] = NULL;
    in[j] = own[j];
    if (!own[j]) continue;
    own[j]->ctx = &ctx;
    if (mode == 1) {
      views[j] = strided_copy(own[j], &bases[j]);
      in[j] = &views[j];
    }
    dl_requires_grad(in[j]);
  }
  if (fx2_get(c, "mask")) mask = fx2_make(c, "mask", dt);
  if (fx2_get(c, "mask_bool")) mask = fx2_make(c, "mask_bool", DL_U8);
  gy = fx2_make(c, "gy", dt);
  if (self) {
    q = k = v = in[0];
    if (mode == 2) {
      extra[0] = copy_of(in[0]);
      extra[1] = copy_of(in[0]);
      dl_requires_grad(extra[0]);
      dl_requires_grad(extra[1]);
      k = extra[0];
      v = extra[1];
    }
  } else {
    q = in[1];
    k = in[2];
    v = kv ? in[2] : in[3];
    if (mode == 2 && kv) {
      extra[2] = copy_of(in[2]);
      dl_requires_grad(extra[2]);
      v = extra[2];
    }
  }
  dl_tape_init(&tp, &ctx, 0);
  y = dl_t_multi_head_attention(&tp, q, k, v, in[4], in[5], in[6], in[7], heads, mask, causal);
  dl_backward(&tp, y, gy);
  e = err_of(c, y, "y");
  worst_fx[c->f64] = fmax(worst_fx[c->f64], e);
  if (!(e <= tol)) {
    bad++;
    fprintf(stderr, "  %s %s mode %d: y err %.3g (tol %g)\n", c->name, c->f64 ? "f64" : "f32", mode, e, tol);
  }
  if (extra[0]) { /* x's gradient is the sum of the three */
    DL_ASSIGN(in[0]->grad, dl_add(in[0]->grad, dl_add(extra[0]->grad, extra[1]->grad)));
  }
  if (extra[2]) DL_ASSIGN(in[2]->grad, dl_add(in[2]->grad, extra[2]->grad));
  for (j = 0; j < 8; j++) {
    char key[40];
    if (!in[j]) continue;
    snprintf(key, sizeof key, "g_%s", keys[j]);
    e = err_of(c, in[j]->grad, key);
    worst_fx[c->f64] = fmax(worst_fx[c->f64], e);
    if (!(e <= tol)) {
      bad++;
      fprintf(stderr, "  %s %s mode %d: %s err %.3g (tol %g)\n", c->name, c->f64 ? "f64" : "f32", mode, key, e, tol);
    }
  }
  fx_runs++;
  dl_tape_free(&tp);
  for (j = 0; j < 8; j++) {
    if (mode == 1 && in[j]) dl_tensor_free(in[j]->grad);
    dl_tensor_free(own[j]);
    dl_tensor_free(bases[j]);
  }
  for (j = 0; j < 3; j++) dl_tensor_free(extra[j]);
  dl_tensor_free(mask);
  dl_tensor_free(gy);
  return bad;
}

static void test_fixtures(void) {
  int i, mode, f32 = 0, seen_mask[3] = {0, 0, 0}, seen_causal = 0, seen_self = 0, seen_kv = 0, seen_h4 = 0,
               seen_nobias = 0, seen_cross = 0;
  if (!fx_ok) SKIP("%s", fx.err);
  for (i = 0; i < fx.n; i++) {
    const fx2_case *c = &fx.cases[i];
    for (mode = 0; mode < 3; mode++) {
      int bad = run_fixture(c, mode);
      CHECK_MSG(bad == 0, "fixture %s %s mode %d: %d comparison(s) off PyTorch", c->name, c->f64 ? "f64" : "f32",
                mode, bad);
    }
    f32 += !c->f64;
    seen_mask[(int)fx2_param(c, "mask", 0)]++;
    seen_causal += fx2_param(c, "causal", 0) != 0;
    seen_self += fx2_param(c, "self", 0) != 0;
    seen_cross += fx2_get(c, "q") != NULL && fx2_get(c, "k")->shape[1] != fx2_get(c, "q")->shape[1];
    seen_kv += fx2_param(c, "kv", 0) != 0;
    seen_h4 += fx2_param(c, "heads", 0) == 4;
    seen_nobias += fx2_param(c, "bias", 1) == 0;
  }
  CHECK(f32 > 0 && f32 < fx.n);
  CHECK(seen_mask[0] && seen_mask[1] && seen_mask[2] && seen_causal && seen_self && seen_cross && seen_kv &&
        seen_h4 && seen_nobias);
  printf("  %d fixture runs (%d cases, %d f32); worst error vs PyTorch: f64 %.3g, f32 %.3g\n", fx_runs, fx.n, f32,
         worst_fx[1], worst_fx[0]);
}

/* ---- gradcheck --------------------------------------------------------------- */

/* in[] = in_w, out_w, [in_b, out_b], then x (self) or q, k, [v] */
typedef struct gc_mha {
  int heads, self, kv, bias, causal;
  const dl_tensor *mask;
} gc_mha;

static dl_tensor *gc_fn(dl_tape *tp, dl_tensor **in, void *user) {
  const gc_mha *u = (const gc_mha *)user;
  int k = 2;
  dl_tensor *inb = NULL, *outb = NULL, *q, *kk, *v;
  if (u->bias) {
    inb = in[k++];
    outb = in[k++];
  }
  if (u->self) {
    q = kk = v = in[k];
  } else {
    q = in[k];
    kk = in[k + 1];
    v = u->kv ? kk : in[k + 2];
  }
  return dl_t_multi_head_attention(tp, q, kk, v, in[0], inb, in[1], outb, u->heads, u->mask, u->causal);
}

/* mask_kind: 0 none, 1 float, 2 u8; strided: q (or x) and in_w are views */
static void gradcheck_one(int E, int heads, int Tq, int Tk, int self, int kv, int bias, int causal, int mask_kind,
                          int strided) {
  const int64_t B = 2;
  dl_rng rng = dl_rng_make(3000 + (uint64_t)(E * 1000 + heads * 100 + Tq * 10 + Tk + self * 7 + kv * 13 +
                                             bias * 17 + causal * 19 + mask_kind * 23 + strided * 29));
  dl_tensor *own[7], *base[7], views[7], *in[7], *mask = NULL;
  gc_mha u;
  char what[160];
  int n = 0, j;
  if (self) Tk = Tq;
  for (j = 0; j < 7; j++) own[j] = base[j] = NULL;
  own[0] = mk(&ctx, DL_F64, DL_SHAPE(3 * E, E), &rng, 0.5);
  own[1] = mk(&ctx, DL_F64, DL_SHAPE(E, E), &rng, 0.5);
  if (bias) {
    own[2] = mk(&ctx, DL_F64, DL_SHAPE(3 * E), &rng, 0.5);
    own[3] = mk(&ctx, DL_F64, DL_SHAPE(E), &rng, 0.5);
  }
  own[4] = mk(&ctx, DL_F64, DL_SHAPE(B, Tq, E), &rng, 1.0);
  if (!self) {
    own[5] = mk(&ctx, DL_F64, DL_SHAPE(B, Tk, E), &rng, 1.0);
    if (!kv) own[6] = mk(&ctx, DL_F64, DL_SHAPE(B, Tk, E), &rng, 1.0);
  }
  for (j = 0; j < 7; j++) {
    if (!own[j]) continue;
    in[n] = own[j];
    if (strided && (j == 0 || j == 4)) {
      views[j] = strided_copy(own[j], &base[j]);
      in[n] = &views[j];
    }
    dl_requires_grad(in[n]);
    n++;
  }
  if (mask_kind == 1) {
    int64_t i, jj;
    mask = mk(&ctx, DL_F64, DL_SHAPE(Tq, Tk), &rng, 1.0);
    for (i = 0; i < Tq; i++)
      for (jj = 1; jj < Tk; jj++)
        if ((i + 2 * jj) % 5 == 0) dl_f64(mask)[i * Tk + jj] = -INFINITY;
  } else if (mask_kind == 2) {
    int64_t i;
    mask = dl_tensor_make(&ctx, DL_U8, DL_SHAPE(Tq, Tk));
    for (i = 0; i < Tq * Tk; i++) dl_u8(mask)[i] = (uint8_t)((i % 3 == 1) && (i % Tk) != 0);
  }
  u.heads = heads;
  u.self = self;
  u.kv = kv;
  u.bias = bias;
  u.causal = causal;
  u.mask = mask;
  snprintf(what, sizeof what, "E %d heads %d Tq %d Tk %d self %d kv %d bias %d causal %d mask %d strided %d", E,
           heads, Tq, Tk, self, kv, bias, causal, mask_kind, strided);
  GRADCHECK(what, gc_fn, &u, n, in);
  for (j = 0; j < n; j++)
    if (in[j]->flags & DL_TENSOR_VIEW) dl_tensor_free(in[j]->grad);
  for (j = 0; j < 7; j++) {
    dl_tensor_free(own[j]);
    dl_tensor_free(base[j]);
  }
  dl_tensor_free(mask);
}

static void test_gradcheck(void) {
  gradcheck_one(4, 2, 3, 3, 1, 0, 1, 0, 0, 0); /* self */
  gradcheck_one(4, 2, 3, 4, 0, 0, 1, 0, 0, 0); /* cross, Tq != Tk */
  gradcheck_one(4, 2, 4, 3, 0, 1, 1, 0, 0, 0); /* k == v */
  gradcheck_one(4, 4, 3, 3, 1, 0, 1, 0, 0, 0); /* 4 heads of width 1 */
  gradcheck_one(6, 3, 3, 3, 1, 0, 0, 0, 0, 0); /* no bias */
  gradcheck_one(4, 2, 4, 4, 1, 0, 1, 1, 0, 0); /* causal */
  gradcheck_one(4, 2, 3, 5, 0, 0, 1, 1, 0, 0); /* causal, cross */
  gradcheck_one(4, 2, 4, 4, 1, 0, 1, 0, 1, 0); /* float mask */
  gradcheck_one(4, 2, 3, 4, 0, 0, 1, 0, 2, 0); /* bool mask */
  gradcheck_one(4, 2, 4, 4, 1, 0, 1, 1, 1, 0); /* causal + float mask */
  gradcheck_one(4, 2, 3, 4, 0, 0, 1, 0, 0, 1); /* strided q and in_proj_weight */
  gradcheck_one(4, 2, 3, 3, 1, 0, 1, 1, 0, 1);
  printf("  %d gradchecks, worst error %.3g\n", gc_runs, worst_gc);
}

/* ---- masks and self-attention ------------------------------------------------ */

/* causal == an explicit -inf mask and a u8 mask == its -inf float mask, bit
 * for bit; the mask changes the result; x as q, k and v collects the sum of
 * the three gradients. */
static void test_masks_and_self(void) {
  const int64_t B = 2, T = 5, E = 8;
  dl_rng rng = dl_rng_make(4000);
  dl_tensor *x = mk(&ctx, DL_F64, DL_SHAPE(B, T, E), &rng, 1.0), *wi = mk(&ctx, DL_F64, DL_SHAPE(3 * E, E), &rng, 0.5);
  dl_tensor *bi = mk(&ctx, DL_F64, DL_SHAPE(3 * E), &rng, 0.5), *wo = mk(&ctx, DL_F64, DL_SHAPE(E, E), &rng, 0.5);
  dl_tensor *bo = mk(&ctx, DL_F64, DL_SHAPE(E), &rng, 0.5), *gy = mk(&ctx, DL_F64, DL_SHAPE(B, T, E), &rng, 1.0);
  dl_tensor *fm = mk(&ctx, DL_F64, DL_SHAPE(T, T), NULL, 0), *bm = dl_tensor_make(&ctx, DL_U8, DL_SHAPE(T, T));
  dl_tensor *xs[3], *g3, *y1, *y2, *y0;
  dl_tape tp;
  int64_t i, j;
  int k;
  for (i = 0; i < T; i++)
    for (j = 0; j < T; j++) {
      dl_f64(fm)[i * T + j] = j > i ? -INFINITY : 0.0;
      dl_u8(bm)[i * T + j] = (uint8_t)(j > i);
    }
  dl_tape_init(&tp, &ctx, 0);
  y0 = dl_t_multi_head_attention(&tp, x, x, x, wi, bi, wo, bo, 2, NULL, 0);
  y1 = dl_t_multi_head_attention(&tp, x, x, x, wi, bi, wo, bo, 2, NULL, 1);
  y2 = dl_t_multi_head_attention(&tp, x, x, x, wi, bi, wo, bo, 2, fm, 0);
  CHECK(same_bits(y1, y2));
  y2 = dl_t_multi_head_attention(&tp, x, x, x, wi, bi, wo, bo, 2, bm, 0);
  CHECK(same_bits(y1, y2));
  y2 = dl_t_multi_head_attention(&tp, x, x, x, wi, bi, wo, bo, 2, bm, 1); /* both: the same mask */
  CHECK(same_bits(y1, y2));
  CHECK(!same_bits(y0, y1));
  { /* a strided (transposed) float mask reads the same values */
    dl_tensor *fmt = mk(&ctx, DL_F64, DL_SHAPE(T, T), NULL, 0), fmv;
    for (i = 0; i < T; i++)
      for (j = 0; j < T; j++) dl_f64(fmt)[j * T + i] = dl_f64(fm)[i * T + j];
    fmv = dl_view_transpose(fmt, 0, 1);
    y2 = dl_t_multi_head_attention(&tp, x, x, x, wi, bi, wo, bo, 2, &fmv, 0);
    CHECK(same_bits(y1, y2));
    dl_tensor_free(fmt);
  }
  /* the first query sees only the first key under the causal mask: changing
   * the later positions of x leaves its output alone */
  {
    dl_tensor *x2 = copy_of(x);
    for (i = 0; i < B; i++)
      for (j = 1; j < T; j++)
        for (k = 0; k < E; k++) dl_f64(x2)[(i * T + j) * E + k] += 1.0;
    y2 = dl_t_multi_head_attention(&tp, x2, x2, x2, wi, bi, wo, bo, 2, NULL, 1);
    for (i = 0; i < B; i++)
      CHECK(memcmp(dl_f64(y1) + i * T * E, dl_f64(y2) + i * T * E, sizeof(double) * (size_t)E) == 0);
    CHECK(memcmp(dl_f64(y1) + E, dl_f64(y2) + E, sizeof(double) * (size_t)E) != 0);
    dl_tensor_free(x2);
  }
  dl_tape_rewind(&tp);
  /* self-attention gradient: x once vs three copies */
  dl_requires_grad(x);
  for (k = 0; k < 3; k++) {
    xs[k] = copy_of(x);
    dl_requires_grad(xs[k]);
  }
  y1 = dl_t_multi_head_attention(&tp, x, x, x, wi, bi, wo, bo, 2, NULL, 1);
  dl_backward(&tp, y1, gy);
  y2 = dl_t_multi_head_attention(&tp, xs[0], xs[1], xs[2], wi, bi, wo, bo, 2, NULL, 1);
  dl_backward(&tp, y2, gy);
  g3 = copy_of(xs[0]->grad);
  DL_ASSIGN(g3, dl_add(g3, dl_add(xs[1]->grad, xs[2]->grad)));
  for (k = 0; k < 3; k++) CHECK(max_abs(xs[k]->grad) > 1e-3);
  for (i = 0; i < x->numel; i++) CHECK_REL(dl_f64(x->grad)[i], dl_f64(g3)[i], 1e-12, 1e-6);
  for (i = 0; i < y1->numel; i++) CHECK_REL(dl_f64(y1)[i], dl_f64(y2)[i], 1e-13, 1e-6);
  dl_tape_free(&tp);
  for (k = 0; k < 3; k++) dl_tensor_free(xs[k]);
  dl_tensor_free(g3); dl_tensor_free(x); dl_tensor_free(wi); dl_tensor_free(bi); dl_tensor_free(wo);
  dl_tensor_free(bo); dl_tensor_free(gy); dl_tensor_free(fm); dl_tensor_free(bm);
}

/* ---- threads ----------------------------------------------------------------- */

static void test_threads(void) {
  const int64_t B = 3, Tq = 40, Tk = 33, E = 64;
  dl_ctx *cs[2];
  dl_tensor *p[2][7], *y[2], *ys[2], *gy, *tq;
  dl_tape tp[2];
  dl_rng src = dl_rng_make(5000);
  int t, k;
  cs[0] = &ctx1;
  cs[1] = &ctx2;
  gy = mk(&ctx, DL_F32, DL_SHAPE(B, Tq, E), &src, 1.0);
  tq = mk(&ctx, DL_F32, DL_SHAPE(B, Tq, E), &src, 1.0);
  for (t = 0; t < 2; t++) {
    dl_rng r = dl_rng_make(5001);
    p[t][0] = mk(cs[t], DL_F32, DL_SHAPE(B, Tq, E), &r, 1.0);
    p[t][1] = mk(cs[t], DL_F32, DL_SHAPE(B, Tk, E), &r, 1.0);
    p[t][2] = mk(cs[t], DL_F32, DL_SHAPE(B, Tk, E), &r, 1.0);
    p[t][3] = mk(cs[t], DL_F32, DL_SHAPE(3 * E, E), &r, 0.2);
    p[t][4] = mk(cs[t], DL_F32, DL_SHAPE(3 * E), &r, 0.2);
    p[t][5] = mk(cs[t], DL_F32, DL_SHAPE(E, E), &r, 0.2);
    p[t][6] = mk(cs[t], DL_F32, DL_SHAPE(E), &r, 0.2);
    for (k = 0; k < 7; k++) dl_requires_grad(p[t][k]);
    dl_set_tangent(p[t][0], tq);
    dl_tape_init(&tp[t], cs[t], 0);
    y[t] = dl_t_multi_head_attention(&tp[t], p[t][0], p[t][1], p[t][2], p[t][3], p[t][4], p[t][5], p[t][6], 4,
                                     NULL, 1);
    dl_backward(&tp[t], y[t], gy);
    ys[t] = dl_t_multi_head_attention(&tp[t], p[t][0], p[t][0], p[t][0], p[t][3], p[t][4], p[t][5], p[t][6], 8,
                                      NULL, 1);
    dl_backward(&tp[t], ys[t], gy);
  }
  CHECK(same_bits(y[0], y[1]) && same_bits(ys[0], ys[1]));
  CHECK(same_bits(y[0]->tangent, y[1]->tangent) && max_abs(y[0]->tangent) > 0);
  for (k = 0; k < 7; k++) {
    CHECK_MSG(same_bits(p[0][k]->grad, p[1][k]->grad), "grad of input %d", k);
    CHECK(max_abs(p[0][k]->grad) > 0);
  }
  for (t = 0; t < 2; t++) {
    dl_set_tangent(p[t][0], NULL);
    dl_tape_free(&tp[t]);
    for (k = 0; k < 7; k++) dl_tensor_free(p[t][k]);
  }
  dl_tensor_free(gy);
  dl_tensor_free(tq);
}

/* ---- steady state: no allocation -------------------------------------------- */

static long count_allocs, count_frees;
static void *count_alloc(size_t n, void *user) { (void)user; count_allocs++; return malloc(n); }
static void count_free(void *p, void *user) { (void)user; if (p) count_frees++; free(p); }

static void test_steady_state_no_alloc(void) {
  dl_ctx cc;
  dl_ctx_desc d = {0};
  dl_tape tp;
  const int64_t B = 2, T = 6, Tk = 4, E = 8;
  dl_tensor *x, *m, *w[4], *mask;
  dl_rng rng = dl_rng_make(6000);
  long before = 0;
  int step, k;
  d.panic = harness_panic;
  d.allocator.alloc = count_alloc;
  d.allocator.free = count_free;
  dl_ctx_init(&cc, &d);
  x = mk(&cc, DL_F32, DL_SHAPE(B, T, E), &rng, 1.0);
  m = mk(&cc, DL_F32, DL_SHAPE(B, Tk, E), &rng, 1.0);
  w[0] = mk(&cc, DL_F32, DL_SHAPE(3 * E, E), &rng, 0.3);
  w[1] = mk(&cc, DL_F32, DL_SHAPE(3 * E), &rng, 0.3);
  w[2] = mk(&cc, DL_F32, DL_SHAPE(E, E), &rng, 0.3);
  w[3] = mk(&cc, DL_F32, DL_SHAPE(E), &rng, 0.3);
  mask = dl_tensor_make(&cc, DL_U8, DL_SHAPE(T, Tk));
  for (k = 0; k < T * Tk; k++) dl_u8(mask)[k] = (uint8_t)(k % Tk == 3);
  for (k = 0; k < 4; k++) dl_requires_grad(w[k]);
  dl_requires_grad(x);
  CHECK(dl_tape_init(&tp, &cc, 0) == DL_OK);
  for (step = 0; step < 6; step++) {
    dl_tensor *y;
    if (step == 1) before = count_allocs;
    for (k = 0; k < 4; k++) dl_zero_grad(w[k]);
    dl_zero_grad(x);
    y = dl_t_multi_head_attention(&tp, x, x, x, w[0], w[1], w[2], w[3], 2, NULL, 1);
    y = dl_t_multi_head_attention(&tp, y, m, m, w[0], w[1], w[2], w[3], 4, mask, 0);
    dl_backward(&tp, dl_t_mean_all(&tp, dl_t_square(&tp, y)), NULL);
    dl_tape_rewind(&tp);
  }
  CHECK_MSG(count_allocs == before, "%ld allocations in 5 steady-state steps", count_allocs - before);
  CHECK(max_abs(w[0]->grad) > 0 && max_abs(x->grad) > 0);
  dl_tape_free(&tp);
  dl_gemm_release_cache();
  dl_tensor_free(x);
  dl_tensor_free(m);
  dl_tensor_free(mask);
  for (k = 0; k < 4; k++) dl_tensor_free(w[k]);
  CHECK(count_allocs == count_frees);
}

/* ---- panics ------------------------------------------------------------------ */

static void test_panics(void) {
  dl_tape tp;
  dl_tensor *q = mk(&ctx, DL_F32, DL_SHAPE(2, 3, 8), NULL, 0), *k = mk(&ctx, DL_F32, DL_SHAPE(2, 5, 8), NULL, 0);
  dl_tensor *k7 = mk(&ctx, DL_F32, DL_SHAPE(2, 5, 7), NULL, 0), *v4 = mk(&ctx, DL_F32, DL_SHAPE(2, 4, 8), NULL, 0);
  dl_tensor *q2 = mk(&ctx, DL_F32, DL_SHAPE(3, 8), NULL, 0), *q64 = mk(&ctx, DL_F64, DL_SHAPE(2, 3, 8), NULL, 0);
  dl_tensor *wi = mk(&ctx, DL_F32, DL_SHAPE(24, 8), NULL, 0), *wo = mk(&ctx, DL_F32, DL_SHAPE(8, 8), NULL, 0);
  dl_tensor *wi2 = mk(&ctx, DL_F32, DL_SHAPE(16, 8), NULL, 0), *b8 = mk(&ctx, DL_F32, DL_SHAPE(8), NULL, 0);
  dl_tensor *m35 = mk(&ctx, DL_F32, DL_SHAPE(3, 5), NULL, 0), *m33 = mk(&ctx, DL_F32, DL_SHAPE(3, 3), NULL, 0);
  dl_tensor *m64 = mk(&ctx, DL_F64, DL_SHAPE(3, 5), NULL, 0), *mi = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(3, 5));
  const char *op = "dl_t_multi_head_attention";
  dl_tape_init(&tp, &ctx, 0);
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q2, k, k, wi, NULL, wo, NULL, 2, NULL, 0), op, "f32[3, 8]",
               "f32[2, 5, 8]", "[B, Tq, E]");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k7, k7, wi, NULL, wo, NULL, 2, NULL, 0), op, "f32[2, 5, 7]");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k, v4, wi, NULL, wo, NULL, 2, NULL, 0), op, "f32[2, 4, 8]",
               "f32[2, 5, 8]");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k, k, wi, NULL, wo, NULL, 3, NULL, 0), op, "num_heads 3", "E = 8");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k, k, wi, NULL, wo, NULL, 0, NULL, 0), op, "num_heads 0");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k, k, wi2, NULL, wo, NULL, 2, NULL, 0), op, "f32[16, 8]", "[3E, E]");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k, k, wi, b8, wo, NULL, 2, NULL, 0), op, "in_proj_bias f32[8]");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k, k, wi, NULL, wi, NULL, 2, NULL, 0), op,
               "out_proj_weight f32[24, 8]");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q64, k, k, wi, NULL, wo, NULL, 2, NULL, 0), op, "dtype", "f64[2, 3, 8]");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k, k, wi, NULL, wo, NULL, 2, m33, 0), op, "attn_mask f32[3, 3]",
               "[3, 5]");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k, k, wi, NULL, wo, NULL, 2, m64, 0), op, "attn_mask f64[3, 5]");
  EXPECT_PANIC(dl_t_multi_head_attention(&tp, q, k, k, wi, NULL, wo, NULL, 2, mi, 0), op, "attn_mask i64[3, 5]");
  (void)dl_t_multi_head_attention(&tp, q, k, k, wi, NULL, wo, NULL, 2, m35, 1); /* fits */
  dl_tape_free(&tp);
  dl_tensor_free(q); dl_tensor_free(k); dl_tensor_free(k7); dl_tensor_free(v4); dl_tensor_free(q2);
  dl_tensor_free(q64); dl_tensor_free(wi); dl_tensor_free(wo); dl_tensor_free(wi2); dl_tensor_free(b8);
  dl_tensor_free(m35); dl_tensor_free(m33); dl_tensor_free(m64); dl_tensor_free(mi);
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  d.threads = 1;
  d.parallel_threshold = 256;
  dl_ctx_init(&ctx1, &d);
  d.threads = 2;
  dl_ctx_init(&ctx2, &d);
  fx_ok = fx2_load(&fx, "tests/fixtures/attention.txt");
  RUN(test_fixtures);
  RUN(test_gradcheck);
  RUN(test_masks_and_self);
  RUN(test_threads);
  RUN(test_steady_state_no_alloc);
  RUN(test_panics);
  fx2_free(&fx);
  return harness_finish();
}
