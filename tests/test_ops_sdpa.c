/* dl-test-cxx */
/* tests/test_ops_sdpa.c - dl_t_scaled_dot_product_attention and dl_t_rope
 * (include/dl/ops/attention.h).
 *
 * - The fused attention against its composition of matmul, mask and softmax
 *   (dl__sdpa_composed, which stores the scores): output, gradients of q, k,
 *   v and the forward-mode tangent, f64 (1e-12) and f32 (1e-5 relative), for
 *   full and causal attention, Tq == Tk and Tq < Tk (a KV cache's queries),
 *   sequences longer than a key tile and a query block, D != Dv, 3-d and 4-d
 *   inputs, strided inputs, and q, k, v one tensor.
 * - dl_gradcheck (f64, reverse and forward mode) of both ops.
 * - RoPE against its formula computed here in long double, its rotation
 *   property (norms kept, relative positions only: <rope(q,m), rope(k,n)>
 *   depends on m - n), and PyTorch (tests/fixtures/sdpa.txt when present).
 * - Memory: the tape's arena high-water mark of forward + backward grows
 *   linearly in T (T = 1024 against T = 256 uses about 4x, not 16x).
 * - 1 and 2 threads bit-identical; panics name the op and the shapes.
 */
#include "dl.h"
#include "harness.h"

static dl_ctx ctx, ctx1, ctx2;

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
/* max |a - b| / max(1, max |b|) */
static double rel_diff(const dl_tensor *a, const dl_tensor *b) {
  double m = 0, s = fmax(1.0, max_abs(b));
  int64_t i;
  if (!a || !b || a->numel != b->numel) return 1e30;
  for (i = 0; i < a->numel; i++)
    m = fmax(m, fabs(dl__get_at(a, dl__offset_of_linear(a, i)) - dl__get_at(b, dl__offset_of_linear(b, i))));
  return m / s;
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

/* ---- fused == composed ----------------------------------------------------- */

typedef struct cfg {
  int nd, causal, strided, same;
  int64_t B, H, Tq, Tk, D, Dv;
} cfg;

/* Runs fused (which = 0) or composed (1) attention of the inputs with
 * tangents, backward with gy; returns the output (grads on the inputs). */
static dl_tensor *run_attn(dl_tape *tp, int which, dl_tensor *q, dl_tensor *k, dl_tensor *v, int causal,
                           const dl_tensor *gy) {
  dl_tensor *y = which ? dl__sdpa_composed(tp, "test", q, k, v, causal, 1.0 / sqrt((double)q->shape[q->ndim - 1]))
                       : dl_t_scaled_dot_product_attention(tp, q, k, v, causal, 0);
  dl_backward(tp, y, gy);
  return y;
}

static void one_case(dl_dtype dt, cfg c) {
  int64_t sq[4], sk[4], sv[4];
  dl_rng r = dl_rng_make(77 + (uint64_t)c.Tq * 31 + (uint64_t)c.Tk);
  dl_tensor *q, *k, *v, *gy, *tq, *tk, *tv, *y[2], *g[2][3], *ty[2], *qb = NULL, qview;
  dl_tape tp;
  const double tol = dt == DL_F64 ? 1e-12 : 1e-5;
  int w, j, nd = c.nd;
  if (nd == 4) {
    sq[0] = sk[0] = sv[0] = c.B; sq[1] = sk[1] = sv[1] = c.H;
    sq[2] = c.Tq; sk[2] = sv[2] = c.Tk; sq[3] = sk[3] = c.D; sv[3] = c.Dv;
  } else {
    sq[0] = sk[0] = sv[0] = c.B * c.H;
    sq[1] = c.Tq; sk[1] = sv[1] = c.Tk; sq[2] = sk[2] = c.D; sv[2] = c.Dv;
  }
  q = mk(&ctx, dt, nd, sq, &r, 1.0);
  k = c.same ? q : mk(&ctx, dt, nd, sk, &r, 1.0);
  v = c.same ? q : mk(&ctx, dt, nd, sv, &r, 1.0);
  if (c.strided) { /* q as every other element of a wider buffer */
    int64_t sb[4];
    int64_t i;
    for (j = 0; j < nd; j++) sb[j] = sq[j];
    sb[nd - 1] *= 2;
    qb = mk(&ctx, dt, nd, sb, NULL, 0);
    dl_tensor_fill(qb, 1e30);
    qview = dl_view_slice(qb, nd - 1, 1, sb[nd - 1], 2);
    for (i = 0; i < q->numel; i++) dl__set_at(&qview, dl__offset_of_linear(&qview, i), dl__get_at(q, i));
  }
  {
    int64_t so[4];
    for (j = 0; j < nd; j++) so[j] = sq[j];
    so[nd - 1] = c.same ? c.D : c.Dv;
    gy = mk(&ctx, dt, nd, so, &r, 1.0);
  }
  tq = mk(&ctx, dt, nd, sq, &r, 1.0);
  tk = c.same ? tq : mk(&ctx, dt, nd, sk, &r, 1.0);
  tv = c.same ? tq : mk(&ctx, dt, nd, sv, &r, 1.0);
  dl_tape_init(&tp, &ctx, 0);
  for (w = 0; w < 2; w++) {
    dl_tensor *qq = c.strided ? &qview : q;
    dl_requires_grad(q);
    dl_requires_grad(k);
    dl_requires_grad(v);
    if (c.strided) {
      qview.flags |= DL_TENSOR_REQUIRES_GRAD;
      qview.grad = NULL;
    }
    dl_zero_grad(q);
    dl_zero_grad(k);
    dl_zero_grad(v);
    dl_set_tangent(qq, c.strided ? NULL : tq);
    dl_set_tangent(k, c.same ? (c.strided ? NULL : tq) : tk);
    dl_set_tangent(v, c.same ? (c.strided ? NULL : tq) : tv);
    y[w] = run_attn(&tp, w, qq, c.same && c.strided ? qq : k, c.same && c.strided ? qq : v, c.causal, gy);
    ty[w] = y[w]->tangent ? copy_of(y[w]->tangent) : NULL;
    y[w] = copy_of(y[w]);
    g[w][0] = copy_of(c.strided ? qview.grad : q->grad);
    g[w][1] = c.same ? NULL : copy_of(k->grad);
    g[w][2] = c.same ? NULL : copy_of(v->grad);
    dl_set_tangent(qq, NULL);
    dl_set_tangent(k, NULL);
    dl_set_tangent(v, NULL);
    if (c.strided && qview.grad) {
      dl_tensor_free(qview.grad);
      qview.grad = NULL;
    }
    dl_tape_rewind(&tp);
  }
  CHECK_MSG(rel_diff(y[0], y[1]) <= tol, "output: %g (Tq %lld Tk %lld causal %d)", rel_diff(y[0], y[1]),
            (long long)c.Tq, (long long)c.Tk, c.causal);
  for (j = 0; j < 3; j++)
    if (g[0][j]) CHECK_MSG(rel_diff(g[0][j], g[1][j]) <= tol * 4, "grad %d: %g", j, rel_diff(g[0][j], g[1][j]));
  if (!c.strided) CHECK_MSG(ty[0] && ty[1] && rel_diff(ty[0], ty[1]) <= tol * 4, "tangent %g", rel_diff(ty[0], ty[1]));
  CHECK(max_abs(g[0][0]) > 0);
  for (w = 0; w < 2; w++) {
    dl_tensor_free(y[w]);
    if (ty[w]) dl_tensor_free(ty[w]);
    for (j = 0; j < 3; j++)
      if (g[w][j]) dl_tensor_free(g[w][j]);
  }
  dl_tape_free(&tp);
  if (!c.same) {
    dl_tensor_free(k);
    dl_tensor_free(v);
    dl_tensor_free(tk);
    dl_tensor_free(tv);
  }
  dl_tensor_free(q);
  dl_tensor_free(tq);
  dl_tensor_free(gy);
  if (qb) dl_tensor_free(qb);
}

static void test_fused_equals_composed(void) {
  int t;
  for (t = 0; t < 2; t++) {
    const dl_dtype dt = t ? DL_F32 : DL_F64;
    one_case(dt, (cfg){4, 0, 0, 0, 2, 3, 5, 5, 4, 4});
    one_case(dt, (cfg){4, 1, 0, 0, 2, 3, 5, 5, 4, 4});
    one_case(dt, (cfg){4, 1, 0, 0, 2, 2, 70, 70, 8, 8});   /* > one key tile, > one query block */
    one_case(dt, (cfg){4, 0, 0, 0, 1, 2, 33, 150, 8, 6});  /* cross, Tk past two tiles, Dv != D */
    one_case(dt, (cfg){4, 1, 0, 0, 1, 2, 3, 130, 8, 8});   /* a KV cache's last 3 queries */
    one_case(dt, (cfg){4, 1, 0, 0, 2, 1, 1, 64, 16, 16});  /* one new token */
    one_case(dt, (cfg){3, 1, 0, 0, 3, 1, 40, 40, 5, 7});   /* 3-d */
    one_case(dt, (cfg){4, 1, 1, 0, 2, 2, 20, 20, 6, 6});   /* strided q */
    one_case(dt, (cfg){4, 1, 0, 1, 2, 2, 20, 20, 6, 6});   /* q, k, v one tensor */
  }
}

/* ---- gradcheck ------------------------------------------------------------- */

typedef struct gcu {
  int causal, rope;
  int64_t pos0;
} gcu;
static dl_tensor *gc_sdpa(dl_tape *tp, dl_tensor **in, void *user) {
  const gcu *u = (const gcu *)user;
  return dl_t_scaled_dot_product_attention(tp, in[0], in[1], in[2], u->causal, 0);
}
static dl_tensor *gc_rope(dl_tape *tp, dl_tensor **in, void *user) {
  const gcu *u = (const gcu *)user;
  return dl_t_rope(tp, in[0], u->pos0, 0);
}
/* rope on q and k, then attention: the block's path */
static dl_tensor *gc_both(dl_tape *tp, dl_tensor **in, void *user) {
  const gcu *u = (const gcu *)user;
  return dl_t_scaled_dot_product_attention(tp, dl_t_rope(tp, in[0], u->pos0, 100.0),
                                           dl_t_rope(tp, in[1], u->pos0, 100.0), in[2], u->causal, 0.7);
}

static void test_gradcheck(void) {
  dl_rng r = dl_rng_make(9);
  struct { int64_t Tq, Tk, D, Dv; int causal; } cs[] = {{4, 4, 4, 2, 0}, {4, 4, 4, 3, 1}, {2, 5, 4, 3, 1},
                                                        {70, 70, 2, 2, 1}, {3, 66, 2, 1, 0}, {70, 75, 20, 18, 1},
                                                        {5, 70, 17, 16, 0}}; /* the last two: the tile products' 16-column blocks and their remainder */
  size_t c;
  for (c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    dl_tensor *in[3];
    dl_gradcheck_result res;
    gcu u = {cs[c].causal, 0, 0};
    int j, ok;
    in[0] = mk(&ctx, DL_F64, DL_SHAPE(1, 2, cs[c].Tq, cs[c].D), &r, 1.0);
    in[1] = mk(&ctx, DL_F64, DL_SHAPE(1, 2, cs[c].Tk, cs[c].D), &r, 1.0);
    in[2] = mk(&ctx, DL_F64, DL_SHAPE(1, 2, cs[c].Tk, cs[c].Dv), &r, 1.0);
    for (j = 0; j < 3; j++) dl_requires_grad(in[j]);
    ok = dl_gradcheck(&ctx, gc_sdpa, &u, 3, in, 1e-6, 1e-6, &res);
    CHECK_MSG(ok && res.checked > 0, "sdpa case %zu: max_err %g (grad %g jvp %g)", c, res.max_err, res.grad_err,
              res.jvp_err);
    if (c < 2) {
      u.pos0 = 3;
      ok = dl_gradcheck(&ctx, gc_both, &u, 3, in, 1e-6, 1e-6, &res);
      CHECK_MSG(ok && res.checked > 0, "rope + sdpa case %zu: max_err %g", c, res.max_err);
      ok = dl_gradcheck(&ctx, gc_rope, &u, 1, in, 1e-6, 1e-6, &res);
      CHECK_MSG(ok && res.checked > 0, "rope case %zu: max_err %g", c, res.max_err);
    }
    for (j = 0; j < 3; j++) dl_tensor_free(in[j]);
  }
}

/* ---- rope ------------------------------------------------------------------ */

static void test_rope_formula(void) {
  const int64_t B = 2, H = 3, T = 9, D = 10, h = D / 2;
  dl_rng r = dl_rng_make(4);
  int t;
  for (t = 0; t < 2; t++) {
    const dl_dtype dt = t ? DL_F32 : DL_F64;
    dl_tensor *x = mk(&ctx, dt, DL_SHAPE(B, H, T, D), &r, 1.0), *y;
    dl_tape tp;
    double worst = 0;
    int64_t n, p, i;
    dl_tape_init(&tp, &ctx, 0);
    y = dl_t_rope(&tp, x, 5, 500.0);
    for (n = 0; n < B * H; n++)
      for (p = 0; p < T; p++)
        for (i = 0; i < h; i++) {
          const long double f = powl(500.0L, -(long double)(2 * i) / (long double)D), a = (long double)(5 + p) * f;
          const long double x1 = dl__get_at(x, (n * T + p) * D + i), x2 = dl__get_at(x, (n * T + p) * D + i + h);
          const long double e1 = x1 * cosl(a) - x2 * sinl(a), e2 = x2 * cosl(a) + x1 * sinl(a);
          worst = fmax(worst, (double)fabsl(e1 - (long double)dl__get_at(y, (n * T + p) * D + i)));
          worst = fmax(worst, (double)fabsl(e2 - (long double)dl__get_at(y, (n * T + p) * D + i + h)));
        }
    CHECK_MSG(worst <= (t ? 1e-6 : 1e-14), "%s worst %g", t ? "f32" : "f64", worst);
    dl_tape_free(&tp);
    dl_tensor_free(x);
  }
}

/* <rope(q, m), rope(k, n)> depends on m - n only */
static void test_rope_relative(void) {
  dl_rng r = dl_rng_make(8);
  dl_tensor *q = mk(&ctx, DL_F64, DL_SHAPE(1, 16), &r, 1.0), *k = mk(&ctx, DL_F64, DL_SHAPE(1, 16), &r, 1.0);
  dl_tape tp;
  double d1 = 0, d2 = 0, nq = 0, nr = 0;
  int64_t i;
  dl_tensor *a1, *b1, *a2, *b2;
  dl_tape_init(&tp, &ctx, 0);
  a1 = dl_t_rope(&tp, q, 7, 0);
  b1 = dl_t_rope(&tp, k, 3, 0);
  a2 = dl_t_rope(&tp, q, 107, 0);
  b2 = dl_t_rope(&tp, k, 103, 0);
  for (i = 0; i < 16; i++) {
    d1 += dl__get_at(a1, i) * dl__get_at(b1, i);
    d2 += dl__get_at(a2, i) * dl__get_at(b2, i);
    nq += dl__get_at(q, i) * dl__get_at(q, i);
    nr += dl__get_at(a2, i) * dl__get_at(a2, i);
  }
  CHECK_NEAR(d1, d2, 1e-12);
  CHECK_NEAR(nq, nr, 1e-12);
  dl_tape_free(&tp);
  dl_tensor_free(q);
  dl_tensor_free(k);
}

/* ---- memory ------------------------------------------------------------------ */

static size_t attn_high(int64_t T) {
  dl_rng r = dl_rng_make(3);
  const int64_t B = 1, H = 2, D = 16;
  dl_tensor *q = mk(&ctx1, DL_F32, DL_SHAPE(B, H, T, D), &r, 1.0), *k = mk(&ctx1, DL_F32, DL_SHAPE(B, H, T, D), &r, 1.0);
  dl_tensor *v = mk(&ctx1, DL_F32, DL_SHAPE(B, H, T, D), &r, 1.0), *y;
  dl_tape tp;
  size_t high;
  dl_requires_grad(q);
  dl_requires_grad(k);
  dl_requires_grad(v);
  dl_tape_init(&tp, &ctx1, 0);
  y = dl_t_scaled_dot_product_attention(&tp, q, k, v, 1, 0);
  dl_backward(&tp, dl_t_sum_all(&tp, y), NULL);
  high = tp.arena.high;
  dl_tape_free(&tp);
  dl_tensor_free(q);
  dl_tensor_free(k);
  dl_tensor_free(v);
  return high;
}
static void test_memory_linear(void) {
  const size_t h256 = attn_high(256), h1024 = attn_high(1024);
  const double ratio = (double)h1024 / (double)h256;
  printf("  tape arena high-water: T=256 %zu bytes, T=1024 %zu bytes (x%.2f; the scores alone would be x16)\n",
         h256, h1024, ratio);
  CHECK_MSG(ratio < 5.0, "ratio %.2f", ratio);
  CHECK(h1024 < (size_t)1024 * 1024 * 2 * 4); /* less than one head's [T, T] f32 scores */
}

/* ---- threads --------------------------------------------------------------- */

static void test_threads(void) {
  dl_tensor *in[2][3], *y[2], *gy;
  dl_tape tp[2];
  dl_ctx *cs[2] = {&ctx1, &ctx2};
  dl_rng src = dl_rng_make(11);
  int t, j;
  gy = mk(&ctx, DL_F32, DL_SHAPE(3, 4, 90, 16), &src, 1.0);
  for (t = 0; t < 2; t++) {
    dl_rng r = dl_rng_make(12);
    for (j = 0; j < 3; j++) {
      in[t][j] = mk(cs[t], DL_F32, DL_SHAPE(3, 4, 90, 16), &r, 1.0);
      dl_requires_grad(in[t][j]);
    }
    dl_tape_init(&tp[t], cs[t], 0);
    y[t] = dl_t_scaled_dot_product_attention(&tp[t], dl_t_rope(&tp[t], in[t][0], 0, 0), in[t][1], in[t][2], 1, 0);
    dl_backward(&tp[t], y[t], gy);
  }
  CHECK(same_bits(y[0], y[1]));
  for (j = 0; j < 3; j++) CHECK_MSG(same_bits(in[0][j]->grad, in[1][j]->grad), "grad %d", j);
  for (t = 0; t < 2; t++) {
    dl_tape_free(&tp[t]);
    for (j = 0; j < 3; j++) dl_tensor_free(in[t][j]);
  }
  dl_tensor_free(gy);
}

/* empty shapes; the op called from the caller's own OpenMP threads, each
 * with its own tape (the scratch is per calling thread then) */
static void test_edges(void) {
  dl_rng r = dl_rng_make(21);
  dl_tensor *q = mk(&ctx, DL_F64, DL_SHAPE(2, 0, 4), &r, 1.0), *v0 = mk(&ctx, DL_F64, DL_SHAPE(2, 3, 0), &r, 1.0);
  dl_tensor *k = mk(&ctx, DL_F64, DL_SHAPE(2, 3, 4), &r, 1.0), *q3 = mk(&ctx, DL_F64, DL_SHAPE(2, 3, 4), &r, 1.0), *y;
  dl_tape tp;
  int bad = 0;
  dl_requires_grad(q3);
  dl_requires_grad(k);
  dl_tape_init(&tp, &ctx, 0);
  CHECK(dl_t_rope(&tp, q, 0, 0)->numel == 0);
  y = dl_t_scaled_dot_product_attention(&tp, q3, k, v0, 1, 0); /* Dv = 0 */
  CHECK(y->numel == 0);
  dl_backward(&tp, dl_t_sum_all(&tp, y), NULL);
  CHECK(max_abs(q3->grad) == 0 && max_abs(k->grad) == 0);
  dl_tape_free(&tp);
#ifdef _OPENMP
#pragma omp parallel num_threads(4) reduction(+ : bad)
  {
    dl_rng rr = dl_rng_make(30 + (uint64_t)omp_get_thread_num());
    dl_tensor *a = mk(&ctx1, DL_F32, DL_SHAPE(2, 2, 40, 8), &rr, 1.0), *o;
    dl_tape t2;
    dl_requires_grad(a);
    dl_tape_init(&t2, &ctx1, 0);
    o = dl_t_scaled_dot_product_attention(&t2, a, a, a, 1, 0);
    dl_backward(&t2, dl_t_sum_all(&t2, o), NULL);
    bad += !(max_abs(a->grad) > 0);
    dl_tape_free(&t2);
    dl_tensor_free(a);
  }
#endif
  CHECK(bad == 0);
  dl_tensor_free(q);
  dl_tensor_free(v0);
  dl_tensor_free(k);
  dl_tensor_free(q3);
}

static void test_panics(void) {
  dl_tape tp;
  dl_tensor *q = mk(&ctx, DL_F32, DL_SHAPE(2, 5, 8), NULL, 0), *k = mk(&ctx, DL_F32, DL_SHAPE(2, 3, 8), NULL, 0);
  dl_tensor *k7 = mk(&ctx, DL_F32, DL_SHAPE(2, 5, 7), NULL, 0), *q64 = mk(&ctx, DL_F64, DL_SHAPE(2, 5, 8), NULL, 0);
  dl_tensor *x7 = mk(&ctx, DL_F32, DL_SHAPE(2, 5, 7), NULL, 0);
  const char *op = "dl_t_scaled_dot_product_attention";
  dl_tape_init(&tp, &ctx, 0);
  EXPECT_PANIC(dl_t_scaled_dot_product_attention(&tp, q, k7, k7, 0, 0), op, "f32[2, 5, 8]", "f32[2, 5, 7]");
  EXPECT_PANIC(dl_t_scaled_dot_product_attention(&tp, q, k, k, 1, 0), op, "at least as many keys", "f32[2, 3, 8]");
  EXPECT_PANIC(dl_t_scaled_dot_product_attention(&tp, q, q64, q, 0, 0), op, "dtype", "f64[2, 5, 8]");
  EXPECT_PANIC(dl_t_scaled_dot_product_attention(&tp, q, q, q, 0, -1), op, "scale");
  EXPECT_PANIC(dl_t_rope(&tp, x7, 0, 0), "dl_t_rope", "f32[2, 5, 7]", "even");
  EXPECT_PANIC(dl_t_rope(&tp, q, -1, 0), "dl_t_rope", "pos0 -1");
  dl_tape_free(&tp);
  dl_tensor_free(q);
  dl_tensor_free(k);
  dl_tensor_free(k7);
  dl_tensor_free(q64);
  dl_tensor_free(x7);
}

/* ---- dl_t_attention_qkv: heads read in place from [B, T, 3C] ------------- */

/* The composition it replaces: split qkv into [B, H, T, hd] heads (copies),
 * fused attention, heads merged back into [B, T, C]. */
static dl_tensor *qkv_composed(dl_tape *tp, dl_tensor *qkv, int64_t H, int causal) {
  static const int back[4] = {0, 2, 1, 3};
  const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3;
  dl_tensor *h[3];
  dl__mha_split(tp, qkv, 3, H, C / H, h);
  return dl_t_reshape(tp, dl_t_permute(tp, dl_t_scaled_dot_product_attention(tp, h[0], h[1], h[2], causal, 0), back),
                      DL_SHAPE(B, T, C));
}
static dl_tensor *gc_qkv(dl_tape *tp, dl_tensor **in, void *user) {
  const gcu *u = (const gcu *)user;
  return dl_t_attention_qkv(tp, in[0], u->pos0, u->causal);
}

/* Output and gradient of qkv equal the composition's (to rounding: the
 * same sums, other copies), on 1 and 2 threads bit for bit the same; f64
 * gradcheck; dl_hvp through it (its rule is linear in the output's
 * gradient); the tangent path; panics. */
static void test_attention_qkv(void) {
  struct { int64_t B, T, C, H; int causal; } cs[] = {{2, 70, 12, 3, 1}, {1, 5, 8, 2, 0}, {1, 130, 128, 2, 1},
                                                     {2, 64, 64, 1, 0}, {1, 1, 6, 3, 1}};
  size_t c;
  int t;
  for (t = 0; t < 2; t++) {
    const dl_dtype dt = t ? DL_F32 : DL_F64;
    const double tol = t ? 2e-5 : 1e-12;
    for (c = 0; c < sizeof cs / sizeof cs[0]; c++) {
      const int64_t B = cs[c].B, T = cs[c].T, C = cs[c].C, H = cs[c].H;
      dl_rng r = dl_rng_make(40 + c);
      dl_tensor *x = mk(&ctx, dt, DL_SHAPE(B, T, 3 * C), &r, 1.0), *gy = mk(&ctx, dt, DL_SHAPE(B, T, C), &r, 1.0);
      dl_tensor *y[3], *g[3];
      dl_ctx *cx[3] = {&ctx1, &ctx1, &ctx2};
      int w;
      for (w = 0; w < 3; w++) { /* fused on 1 thread, composed, fused on 2 threads */
        dl_tape tp;
        dl_tensor *xi = dl_tensor_make(cx[w], dt, 3, x->shape);
        dl_tensor_copy(xi, x);
        dl_requires_grad(xi);
        dl_tape_init(&tp, cx[w], 0);
        y[w] = w == 1 ? qkv_composed(&tp, xi, H, cs[c].causal) : dl_t_attention_qkv(&tp, xi, H, cs[c].causal);
        CHECK(y[w]->ndim == 3 && y[w]->shape[0] == B && y[w]->shape[1] == T && y[w]->shape[2] == C);
        dl_backward(&tp, y[w], gy);
        y[w] = copy_of(y[w]);
        g[w] = copy_of(xi->grad);
        dl_tape_free(&tp);
        dl_tensor_free(xi);
      }
      CHECK_MSG(rel_diff(y[0], y[1]) <= tol, "%s case %zu: output differs by %g", dl_dtype_name(dt), c,
                rel_diff(y[0], y[1]));
      CHECK_MSG(rel_diff(g[0], g[1]) <= tol, "%s case %zu: grad of qkv differs by %g", dl_dtype_name(dt), c,
                rel_diff(g[0], g[1]));
      CHECK_MSG(same_bits(y[0], y[2]) && same_bits(g[0], g[2]), "%s case %zu: 1 and 2 threads differ",
                dl_dtype_name(dt), c);
      CHECK(max_abs(g[0]) > 0);
      for (w = 0; w < 3; w++) {
        dl_tensor_free(y[w]);
        dl_tensor_free(g[w]);
      }
      dl_tensor_free(x);
      dl_tensor_free(gy);
    }
  }
  { /* a strided qkv (a transposed view on the tape): read through a copy, the gradient back through the view */
    dl_rng r = dl_rng_make(49);
    dl_tensor *L = mk(&ctx, DL_F64, DL_SHAPE(2, 18, 11), &r, 1.0), *gy = mk(&ctx, DL_F64, DL_SHAPE(2, 11, 6), &r, 1.0);
    dl_tensor *y[2], *g[2];
    int w;
    dl_requires_grad(L);
    for (w = 0; w < 2; w++) {
      dl_tape tp;
      dl_tensor *x;
      dl_zero_grad(L);
      dl_tape_init(&tp, &ctx, 0);
      x = dl_t_transpose(&tp, L, 1, 2); /* [2, 11, 18] */
      CHECK(!dl_tensor_is_contiguous(x));
      y[w] = w ? qkv_composed(&tp, x, 3, 1) : dl_t_attention_qkv(&tp, x, 3, 1);
      dl_backward(&tp, y[w], gy);
      y[w] = copy_of(y[w]);
      g[w] = copy_of(L->grad);
      dl_tape_free(&tp);
    }
    CHECK_MSG(rel_diff(y[0], y[1]) <= 1e-12 && rel_diff(g[0], g[1]) <= 1e-12 && max_abs(g[0]) > 0,
              "strided qkv: output %g, grad %g", rel_diff(y[0], y[1]), rel_diff(g[0], g[1]));
    for (w = 0; w < 2; w++) {
      dl_tensor_free(y[w]);
      dl_tensor_free(g[w]);
    }
    dl_tensor_free(L);
    dl_tensor_free(gy);
  }
  { /* gradcheck in f64 (its jvp part goes through the composition: qkv then has a tangent) */
    dl_rng r = dl_rng_make(50);
    dl_tensor *in[1];
    dl_gradcheck_result res;
    gcu u = {1, 0, 2}; /* causal, 2 heads */
    in[0] = mk(&ctx, DL_F64, DL_SHAPE(2, 5, 12), &r, 1.0);
    dl_requires_grad(in[0]);
    CHECK_MSG(dl_gradcheck(&ctx, gc_qkv, &u, 1, in, 1e-6, 1e-6, &res) && res.checked > 0, "gradcheck: max_err %g",
              res.max_err);
    u.causal = 0;
    CHECK_MSG(dl_gradcheck(&ctx, gc_qkv, &u, 1, in, 1e-6, 1e-6, &res) && res.checked > 0, "gradcheck: max_err %g",
              res.max_err);
    dl_tensor_free(in[0]);
  }
  { /* dl_hvp: loss = sum((attn(x) w)^2), the direction on w only, so x has no
     * tangent and the fused op is recorded; H v for x and w equal the
     * composition's */
    dl_rng r = dl_rng_make(51);
    dl_tensor *x = mk(&ctx, DL_F64, DL_SHAPE(2, 9, 24), &r, 1.0), *w = mk(&ctx, DL_F64, DL_SHAPE(8, 3), &r, 1.0);
    dl_tensor *v = mk(&ctx, DL_F64, DL_SHAPE(8, 3), &r, 1.0), *hx[2], *hw[2];
    int k;
    for (k = 0; k < 2; k++) {
      dl_tape tp;
      dl_tensor *a, *o;
      dl_requires_grad(x);
      dl_requires_grad(w);
      dl_zero_grad(x);
      dl_zero_grad(w);
      dl_set_tangent(w, v);
      dl_tape_init(&tp, &ctx, 0);
      a = k ? qkv_composed(&tp, x, 2, 1) : dl_t_attention_qkv(&tp, x, 2, 1);
      o = dl_t_matmul(&tp, a, w);
      dl_hvp(&tp, dl_t_sum_all(&tp, dl_t_mul(&tp, o, o)), NULL);
      hx[k] = copy_of(x->grad->tangent);
      hw[k] = copy_of(w->grad->tangent);
      dl_tape_free(&tp);
      dl_set_tangent(w, NULL);
    }
    CHECK_MSG(max_abs(hx[1]) > 0 && rel_diff(hx[0], hx[1]) <= 1e-12, "H v for x differs by %g", rel_diff(hx[0], hx[1]));
    CHECK_MSG(rel_diff(hw[0], hw[1]) <= 1e-12, "H v for w differs by %g", rel_diff(hw[0], hw[1]));
    for (k = 0; k < 2; k++) {
      dl_tensor_free(hx[k]);
      dl_tensor_free(hw[k]);
    }
    dl_tensor_free(x);
    dl_tensor_free(w);
    dl_tensor_free(v);
  }
  { /* panics name the op and the shape */
    dl_tape tp;
    dl_tensor *a = mk(&ctx, DL_F32, DL_SHAPE(2, 5, 10), NULL, 0), *b = mk(&ctx, DL_F32, DL_SHAPE(2, 5, 12), NULL, 0);
    dl_tape_init(&tp, &ctx, 0);
    EXPECT_PANIC(dl_t_attention_qkv(&tp, a, 1, 1), "dl_t_attention_qkv", "f32[2, 5, 10]", "3C");
    EXPECT_PANIC(dl_t_attention_qkv(&tp, b, 3, 1), "dl_t_attention_qkv", "f32[2, 5, 12]", "3 heads");
    EXPECT_PANIC(dl_t_attention_qkv(&tp, b, 0, 1), "dl_t_attention_qkv", "0 heads");
    dl_tape_free(&tp);
    dl_tensor_free(a);
    dl_tensor_free(b);
  }
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
  RUN(test_fused_equals_composed);
  RUN(test_gradcheck);
  RUN(test_rope_formula);
  RUN(test_rope_relative);
  RUN(test_memory_linear);
  RUN(test_threads);
  RUN(test_attention_qkv);
  RUN(test_edges);
  RUN(test_panics);
  return harness_finish();
}
