/* dl-test-cxx */
/* tests/test_ops_sparse.c - dl_t_embedding (row-sparse weight gradient) and
 * dl_t_dropout (include/dl/ops/sparse.h).
 *
 * Embedding: forward and gradient against torch.nn.functional.embedding
 * (tests/fixtures/sparse.txt from tools/fixtures_sparse.py; every case with
 * i64 and i32 indices, sparse and dense gradient paths, strided weights), the
 * row-sparse gradient's rows (unique, first-touch order, untouched rows
 * absent, dl_zero_grad), gradcheck, thread-count independence, no allocation
 * in the steady state, and the panics.
 *
 * Dropout has no PyTorch fixtures: torch's random stream is not dl.h's
 * counter-based one, so its masks cannot agree. Instead: the mask is the
 * documented function of the rng state, its statistics, determinism across
 * seeds, dtypes and thread counts, the gradient and tangent, gradcheck with
 * a replayed rng, and the panics.
 */
#include <stdint.h>
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx, ctx1, ctx2;

/* ---- helpers --------------------------------------------------------------- */

static dl_tensor *mk(dl_ctx *c, dl_dtype dt, int nd, const int64_t *shape, dl_rng *r) {
  dl_tensor *t = dl_tensor_make(c, dt, nd, shape);
  if (r) dl_tensor_rand_normal(t, r, 0, 1);
  return t;
}
/* An index tensor with values from vals (row-major). */
static dl_tensor *mk_idx(dl_ctx *c, dl_dtype dt, int nd, const int64_t *shape, const int64_t *vals) {
  dl_tensor *t = dl_tensor_make(c, dt, nd, shape);
  int64_t i;
  for (i = 0; i < t->numel; i++) dl__set_at(t, i, (double)vals[i]);
  return t;
}
static double max_abs(const dl_tensor *t) {
  double m = 0;
  int64_t i;
  for (i = 0; i < t->numel; i++) m = fmax(m, fabs(dl__get_at(t, dl__offset_of_linear(t, i))));
  return m;
}
static void print_gc(const char *what, const dl_gradcheck_result *r) {
  fprintf(stderr, "  gradcheck %s: max_err %.3g (grad %.3g at input %d element %lld: %.17g vs %.17g, jvp %.3g)\n",
          what, r->max_err, r->grad_err, r->input, (long long)r->index, r->analytic, r->numeric, r->jvp_err);
}
static double worst_gc;
#define GRADCHECK(what, f, user, nin, in)                                              \
  do {                                                                                 \
    dl_gradcheck_result r_;                                                            \
    int ok_ = dl_gradcheck(&ctx, (f), (user), (nin), (in), 1e-6, 1e-6, &r_);           \
    CHECK(ok_ && r_.checked > 0);                                                      \
    if (!ok_ || r_.checked == 0) print_gc((what), &r_);                               \
    if (r_.max_err > worst_gc) worst_gc = r_.max_err;                                  \
  } while (0)

/* ---- embedding against PyTorch ------------------------------------------ */

static fx2_set fx;
static int fx_ok;
static double worst_f32, worst_f64;
static int fx_runs;

/* Rows of idx once each, in first-touch order; returns how many. */
static int64_t unique_rows(const dl_tensor *idx, int64_t *out) {
  int64_t i, k, n = 0;
  for (i = 0; i < idx->numel; i++) {
    int64_t r = (int64_t)dl__get_at(idx, dl__offset_of_linear(idx, i));
    for (k = 0; k < n && out[k] != r; k++) {}
    if (k == n) out[n++] = r;
  }
  return n;
}

/* One fixture case with indices of dtype it; mode 0: leaf weight (sparse
 * gradient), 1: weight is an op's output (dense gradient), 2: leaf weight
 * read through a transposed (strided) view. */
static void run_emb_case(const fx2_case *c, dl_dtype it, int mode) {
  dl_dtype ft = c->f64 ? DL_F64 : DL_F32;
  double tol = c->f64 ? 1e-10 : 1e-5, ey, eg;
  dl_tensor *w = fx2_make(c, "w", ft), *idx = fx2_make(c, "idx", it), *gy = fx2_make(c, "gy", ft);
  dl_tensor *wt = NULL, wv, *src, *y, *gw;
  dl_tape tp;
  int64_t uniq[256], nu, k, r;
  CHECK(w && idx && gy);
  if (!w || !idx || !gy) return;
  w->ctx = idx->ctx = gy->ctx = &ctx;
  dl_tape_init(&tp, &ctx, 0);
  if (mode == 2) { /* the same values stored transposed: wv = wt^T is [V, D] with strides (1, V) */
    int64_t v, j;
    wt = mk(&ctx, ft, DL_SHAPE(w->shape[1], w->shape[0]), NULL);
    for (v = 0; v < w->shape[0]; v++)
      for (j = 0; j < w->shape[1]; j++) dl__set_at(wt, j * w->shape[0] + v, dl__get_at(w, v * w->shape[1] + j));
    wv = dl_view_transpose(wt, 0, 1);
    CHECK(!dl_tensor_is_contiguous(&wv) || w->shape[1] == 1);
    dl_requires_grad(&wv);
    src = &wv;
  } else {
    dl_requires_grad(w);
    src = mode == 1 ? dl_t_mul_scalar(&tp, w, 1.0) : w;
  }
  y = dl_t_embedding(&tp, src, idx);
  ey = fx2_err(y, fx2_get(c, "y"));
  dl_backward(&tp, y, gy);
  {
    dl_tensor *leaf = mode == 2 ? &wv : w;
    gw = mk(&ctx, ft, 2, w->shape, NULL);
    dl_tensor_copy(gw, leaf->grad);
    if (mode == 1) CHECK(leaf->sgrad == NULL);
    else {
      dl_sgrad *s = (dl_sgrad *)leaf->sgrad;
      CHECK(max_abs(leaf->grad) == 0); /* the dense gradient is untouched */
      CHECK(s != NULL);
      if (s) {
        nu = unique_rows(idx, uniq);
        CHECK(s->nnz == nu);
        for (k = 0; k < nu && k < s->nnz; k++) CHECK(s->rows[k] == uniq[k]);
        for (r = 0; r < s->nrows; r++) {
          for (k = 0; k < nu && uniq[k] != r; k++) {}
          CHECK((s->slot[r] < 0) == (k == nu)); /* untouched rows absent */
        }
        dl_sgrad_add_to(s, gw);
      }
    }
    eg = fx2_err(gw, fx2_get(c, "g_w"));
    if (mode == 2) {
      dl_tensor_free(wv.grad);
      dl_sgrad_free((dl_sgrad *)wv.sgrad);
    }
  }
  CHECK_MSG(ey <= tol && eg <= tol, "%s %s idx %s mode %d: y err %.3g, g_w err %.3g", c->name,
            c->f64 ? "f64" : "f32", dl_dtype_name(it), mode, ey, eg);
  if (c->f64) worst_f64 = fmax(worst_f64, fmax(ey, eg));
  else worst_f32 = fmax(worst_f32, fmax(ey, eg));
  fx_runs++;
  dl_tape_free(&tp);
  dl_tensor_free(w); dl_tensor_free(idx); dl_tensor_free(gy); dl_tensor_free(gw); dl_tensor_free(wt);
}

static void test_embedding_fixtures(void) {
  static const char *names[] = {"emb_1d", "emb_2d_i32", "emb_3d", "emb_scalar_idx", "emb_all_same", "emb_wide", "emb_d1"};
  int j, f64, mode, any_i32 = 0;
  if (!fx_ok) SKIP("%s", fx.err);
  for (j = 0; j < (int)(sizeof names / sizeof *names); j++)
    for (f64 = 0; f64 < 2; f64++) {
      const fx2_case *c = fx2_find(&fx, names[j], f64);
      CHECK_MSG(c != NULL, "fixture case %s %s missing", names[j], f64 ? "f64" : "f32");
      if (!c) continue;
      if (fx2_param(c, "i32", 0) != 0) any_i32 = 1;
      for (mode = 0; mode < 3; mode++) {
        run_emb_case(c, DL_I64, mode);
        run_emb_case(c, DL_I32, mode);
      }
    }
  CHECK(any_i32);
  CHECK(fx.n == 2 * (int)(sizeof names / sizeof *names));
  printf("  embedding vs PyTorch: %d runs, worst rel err f32 %.3g, f64 %.3g\n", fx_runs, worst_f32, worst_f64);
}

/* ---- the row-sparse gradient ---------------------------------------------- */

static void test_embedding_sparse_rows(void) {
  dl_rng rng = dl_rng_make(11);
  dl_tensor *w = mk(&ctx, DL_F64, DL_SHAPE(10, 3), &rng);
  dl_tensor *idx = mk_idx(&ctx, DL_I64, DL_SHAPE(6), (const int64_t[]){3, 7, 3, 1, 7, 3});
  dl_tensor *idx2 = mk_idx(&ctx, DL_I32, DL_SHAPE(2), (const int64_t[]){5, 3});
  dl_tensor *gy = mk(&ctx, DL_F64, DL_SHAPE(6, 3), &rng), *gy2 = mk(&ctx, DL_F64, DL_SHAPE(2, 3), &rng);
  dl_tensor *y;
  dl_sgrad *s;
  dl_tape tp;
  double want3[3], want7[3], want1[3];
  int64_t i, j;
  const double *g = dl_f64(gy), *g2 = dl_f64(gy2), *wd = dl_f64(w);
  dl_tape_init(&tp, &ctx, 0);
  dl_requires_grad(w);
  y = dl_t_embedding(&tp, w, idx);
  CHECK(y->ndim == 2 && y->shape[0] == 6 && y->shape[1] == 3 && dl_tensor_is_contiguous(y));
  for (i = 0; i < 6; i++)
    for (j = 0; j < 3; j++) CHECK(dl_f64(y)[i * 3 + j] == wd[dl_i64(idx)[i] * 3 + j]);
  CHECK(y->node != NULL);
  dl_backward(&tp, y, gy);
  s = (dl_sgrad *)w->sgrad;
  CHECK(s != NULL && s->nnz == 3 && s->nrows == 10 && s->width == 3);
  if (!s) return;
  CHECK(s->rows[0] == 3 && s->rows[1] == 7 && s->rows[2] == 1);
  for (j = 0; j < 3; j++) { /* repeated indices summed, in index order */
    want3[j] = 0.0 + g[0 * 3 + j] + g[2 * 3 + j] + g[5 * 3 + j];
    want7[j] = 0.0 + g[1 * 3 + j] + g[4 * 3 + j];
    want1[j] = 0.0 + g[3 * 3 + j];
    CHECK(((double *)s->values)[0 * 3 + j] == want3[j]);
    CHECK(((double *)s->values)[1 * 3 + j] == want7[j]);
    CHECK(((double *)s->values)[2 * 3 + j] == want1[j]);
  }
  { /* (a table: gcc 12.2 -O2 miscompiles (x[i] >= 0) == (i == 1 || i == 3 || i == 7)) */
    static const int touched[10] = {0, 1, 0, 1, 0, 0, 0, 1, 0, 0};
    for (i = 0; i < 10; i++) CHECK((s->slot[i] >= 0) == touched[i]);
  }
  CHECK(max_abs(w->grad) == 0);
  dl_tape_rewind(&tp);
  /* a second batch without zeroing: the gradients add up, a new row joins last */
  y = dl_t_embedding(&tp, w, idx2);
  dl_backward(&tp, y, gy2);
  CHECK(s->nnz == 4 && s->rows[0] == 3 && s->rows[3] == 5);
  for (j = 0; j < 3; j++) {
    CHECK(((double *)s->values)[0 * 3 + j] == want3[j] + g2[1 * 3 + j]);
    CHECK(((double *)s->values)[3 * 3 + j] == g2[0 * 3 + j]);
  }
  dl_tape_rewind(&tp);
  /* dl_zero_grad clears the rows */
  dl_zero_grad(w);
  CHECK(s->nnz == 0);
  for (i = 0; i < 10; i++) CHECK(s->slot[i] == -1);
  y = dl_t_embedding(&tp, w, idx2);
  dl_backward(&tp, y, gy2);
  CHECK(s->nnz == 2 && s->rows[0] == 5 && s->rows[1] == 3);
  for (j = 0; j < 3; j++) {
    CHECK(((double *)s->values)[0 * 3 + j] == g2[0 * 3 + j]);
    CHECK(((double *)s->values)[1 * 3 + j] == g2[1 * 3 + j]);
  }
  dl_tape_rewind(&tp);
  /* nothing recorded without a gradient or under no-grad */
  dl_zero_grad(w);
  dl_no_grad_begin(&tp);
  y = dl_t_embedding(&tp, w, idx);
  dl_no_grad_end(&tp);
  CHECK(y->node == NULL && tp.nodes == 0);
  w->flags &= ~(unsigned)DL_TENSOR_REQUIRES_GRAD;
  y = dl_t_embedding(&tp, w, idx);
  CHECK(y->node == NULL && tp.nodes == 0 && !(y->flags & DL_TENSOR_REQUIRES_GRAD));
  CHECK(s->nnz == 0);
  dl_tape_free(&tp);
  dl_tensor_free(w); dl_tensor_free(idx); dl_tensor_free(idx2); dl_tensor_free(gy); dl_tensor_free(gy2);
}

/* Empty indices and the sparse gradient through two embedding calls of the
 * same table in one graph (y = emb(w, a) + emb(w, b)). */
static void test_embedding_edge_cases(void) {
  dl_rng rng = dl_rng_make(12);
  dl_tensor *w = mk(&ctx, DL_F32, DL_SHAPE(6, 4), &rng);
  dl_tensor *e = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(0));
  dl_tensor *a = mk_idx(&ctx, DL_I64, DL_SHAPE(3), (const int64_t[]){0, 5, 0});
  dl_tensor *b = mk_idx(&ctx, DL_I32, DL_SHAPE(3), (const int64_t[]){2, 0, 5});
  dl_tensor *y, *ya, *yb, *gy = mk(&ctx, DL_F32, DL_SHAPE(3, 4), &rng);
  dl_sgrad *s;
  dl_tape tp;
  int64_t j;
  dl_tape_init(&tp, &ctx, 0);
  dl_requires_grad(w);
  y = dl_t_embedding(&tp, w, e);
  CHECK(y->ndim == 2 && y->shape[0] == 0 && y->shape[1] == 4 && y->numel == 0);
  ya = dl_t_embedding(&tp, w, a);
  yb = dl_t_embedding(&tp, w, b);
  y = dl_t_add(&tp, ya, yb);
  dl_backward(&tp, y, gy);
  s = (dl_sgrad *)w->sgrad;
  CHECK(s && s->nnz == 3);
  if (s) {
    /* backward runs the second lookup (b) first */
    CHECK(s->rows[0] == 2 && s->rows[1] == 0 && s->rows[2] == 5);
    for (j = 0; j < 4; j++) {
      const float *g = dl_f32(gy), *v = (const float *)s->values;
      CHECK(v[0 * 4 + j] == g[0 * 4 + j]);
      CHECK(v[1 * 4 + j] == (0.0f + g[1 * 4 + j]) + g[0 * 4 + j] + g[2 * 4 + j]);
      CHECK(v[2 * 4 + j] == (0.0f + g[2 * 4 + j]) + g[1 * 4 + j]);
    }
  }
  dl_tape_free(&tp);
  dl_tensor_free(w); dl_tensor_free(e); dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(gy);
}

/* ---- gradcheck ----------------------------------------------------------- */

/* in[0] weight, in[1] indices */
static dl_tensor *gc_emb(dl_tape *tp, dl_tensor **in, void *user) {
  (void)user;
  return dl_t_embedding(tp, in[0], in[1]);
}
static dl_tensor *gc_emb_tanh(dl_tape *tp, dl_tensor **in, void *user) {
  (void)user;
  return dl_t_tanh(tp, dl_t_embedding(tp, in[0], in[1]));
}
/* the weight is an op's output: dense gradient */
static dl_tensor *gc_emb_dense(dl_tape *tp, dl_tensor **in, void *user) {
  (void)user;
  return dl_t_tanh(tp, dl_t_embedding(tp, dl_t_mul_scalar(tp, in[0], 1.5), in[1]));
}
/* in[0] weight, in[1] indices (gradient), in[2] more indices: two lookups */
static dl_tensor *gc_emb_twice(dl_tape *tp, dl_tensor **in, void *user) {
  (void)user;
  return dl_t_mul(tp, dl_t_embedding(tp, in[0], in[1]), dl_t_embedding(tp, in[0], in[2]));
}

static void test_embedding_gradcheck(void) {
  dl_rng rng = dl_rng_make(13);
  dl_tensor *w = mk(&ctx, DL_F64, DL_SHAPE(7, 3), &rng);
  dl_tensor *wt = mk(&ctx, DL_F64, DL_SHAPE(3, 7), &rng), wv = dl_view_transpose(wt, 0, 1);
  dl_tensor *i64 = mk_idx(&ctx, DL_I64, DL_SHAPE(3, 4), (const int64_t[]){1, 6, 1, 0, 3, 3, 6, 1, 2, 2, 2, 5});
  dl_tensor *i32 = mk_idx(&ctx, DL_I32, DL_SHAPE(2, 3), (const int64_t[]){4, 0, 4, 6, 4, 1});
  dl_tensor *i0 = mk_idx(&ctx, DL_I64, 0, NULL, (const int64_t[]){5});
  dl_tensor i64t = dl_view_transpose(i64, 0, 1); /* strided indices [4, 3] */
  dl_tensor *in[3];
  dl_requires_grad(w);
  dl_requires_grad(&wv);
  in[0] = w;
  in[1] = i64;
  GRADCHECK("embedding i64", gc_emb, NULL, 2, in);
  GRADCHECK("embedding i64 + tanh", gc_emb_tanh, NULL, 2, in);
  in[1] = i32;
  GRADCHECK("embedding i32", gc_emb_tanh, NULL, 2, in);
  in[1] = i0;
  GRADCHECK("embedding 0-d index", gc_emb_tanh, NULL, 2, in);
  in[1] = &i64t;
  GRADCHECK("embedding strided indices", gc_emb_tanh, NULL, 2, in);
  in[1] = i64;
  GRADCHECK("embedding dense (weight is an op's output)", gc_emb_dense, NULL, 2, in);
  in[2] = i32;
  in[1] = mk_idx(&ctx, DL_I64, DL_SHAPE(2, 3), (const int64_t[]){0, 0, 6, 5, 4, 4});
  GRADCHECK("embedding used twice", gc_emb_twice, NULL, 3, in);
  dl_tensor_free(in[1]);
  in[0] = &wv; /* strided leaf weight */
  in[1] = i64;
  GRADCHECK("embedding strided weight", gc_emb_tanh, NULL, 2, in);
  in[1] = &i64t;
  GRADCHECK("embedding strided weight and indices", gc_emb, NULL, 2, in);
  dl_tensor_free(wv.grad);
  dl_sgrad_free((dl_sgrad *)wv.sgrad);
  dl_tensor_free(w); dl_tensor_free(wt); dl_tensor_free(i64); dl_tensor_free(i32); dl_tensor_free(i0);
}

/* ---- threads -------------------------------------------------------------- */

/* forward values and both gradients are bit-identical for 1 and 2 threads
 * (a threshold low enough that the team is used), and equal a serial sum */
static void test_embedding_threads(void) {
  const int64_t V = 1000, D = 40, N = 4096;
  dl_rng rng = dl_rng_make(14);
  dl_ctx *cs[2];
  dl_tensor *w[2], *y[2], *gd[2], *idx = dl_tensor_make(&ctx, DL_I32, DL_SHAPE(64, 64));
  dl_tensor *gy = mk(&ctx, DL_F32, DL_SHAPE(64, 64, 40), &rng);
  dl_sgrad *s[2];
  dl_tape tp[2];
  float *ref = (float *)calloc((size_t)(V * D), sizeof(float));
  int k;
  int64_t i, j;
  cs[0] = &ctx1;
  cs[1] = &ctx2;
  for (i = 0; i < N; i++) dl_i32(idx)[i] = (int32_t)dl_rng_below(&rng, 300);
  for (i = 0; i < N; i++)
    for (j = 0; j < D; j++) ref[dl_i32(idx)[i] * D + j] += dl_f32(gy)[i * D + j];
  for (k = 0; k < 2; k++) {
    dl_rng r = dl_rng_make(15);
    w[k] = mk(cs[k], DL_F32, DL_SHAPE(1000, 40), &r);
    dl_requires_grad(w[k]);
    dl_tape_init(&tp[k], cs[k], 0);
    y[k] = dl_t_embedding(&tp[k], w[k], idx);
    dl_backward(&tp[k], y[k], gy);
    s[k] = (dl_sgrad *)w[k]->sgrad;
    gd[k] = dl_t_embedding(&tp[k], dl_t_mul_scalar(&tp[k], w[k], 1.0), idx);
    dl_backward(&tp[k], gd[k], gy); /* dense: w->grad */
  }
  CHECK(memcmp(y[0]->data, y[1]->data, sizeof(float) * (size_t)(N * D)) == 0);
  CHECK(s[0]->nnz == s[1]->nnz);
  CHECK(memcmp(s[0]->rows, s[1]->rows, sizeof(int64_t) * (size_t)s[0]->nnz) == 0);
  CHECK(memcmp(s[0]->values, s[1]->values, sizeof(float) * (size_t)(s[0]->nnz * D)) == 0);
  CHECK(memcmp(w[0]->grad->data, w[1]->grad->data, sizeof(float) * (size_t)(V * D)) == 0);
  CHECK(memcmp(w[0]->grad->data, ref, sizeof(float) * (size_t)(V * D)) == 0);
  for (i = 0; i < s[1]->nnz; i++)
    CHECK(memcmp((float *)s[1]->values + i * D, ref + s[1]->rows[i] * D, sizeof(float) * (size_t)D) == 0);
  for (k = 0; k < 2; k++) {
    dl_tape_free(&tp[k]);
    dl_tensor_free(w[k]);
  }
  free(ref);
  dl_tensor_free(idx); dl_tensor_free(gy);
}

/* ---- steady state: no allocation ----------------------------------------- */

static long count_allocs, count_frees;
static void *count_alloc(size_t n, void *user) { (void)user; count_allocs++; return malloc(n); }
static void count_free(void *p, void *user) { (void)user; if (p) count_frees++; free(p); }

static void test_steady_state_no_alloc(void) {
  dl_ctx cc;
  dl_ctx_desc d = {0};
  dl_tape tp;
  dl_tensor *w, *w2, *idx, *seed;
  dl_rng rng = dl_rng_make(16), drop = dl_rng_make(17);
  long before = 0;
  int step;
  int64_t i;
  d.panic = harness_panic;
  d.allocator.alloc = count_alloc;
  d.allocator.free = count_free;
  dl_ctx_init(&cc, &d);
  w = mk(&cc, DL_F32, DL_SHAPE(100, 16), &rng);
  w2 = mk(&cc, DL_F32, DL_SHAPE(100, 16), &rng);
  idx = dl_tensor_make(&cc, DL_I64, DL_SHAPE(8, 12));
  for (i = 0; i < idx->numel; i++) dl_i64(idx)[i] = (i * 37) % 41; /* repeats */
  seed = mk(&cc, DL_F32, DL_SHAPE(8, 12, 16), &rng);
  dl_requires_grad(w);
  dl_requires_grad(w2);
  CHECK(dl_tape_init(&tp, &cc, 0) == DL_OK);
  CHECK(count_allocs > 0);
  for (step = 0; step < 6; step++) {
    dl_tensor *y;
    if (step == 1) before = count_allocs;
    dl_zero_grad(w);
    dl_zero_grad(w2);
    y = dl_t_embedding(&tp, w, idx);                                      /* sparse */
    y = dl_t_add(&tp, y, dl_t_embedding(&tp, dl_t_mul_scalar(&tp, w2, 2.0), idx)); /* dense */
    y = dl_t_dropout(&tp, dl_t_tanh(&tp, y), 0.25, &drop, 1);
    dl_backward(&tp, y, seed);
    dl_tape_rewind(&tp);
  }
  CHECK_MSG(count_allocs == before, "%ld allocations in 5 steady-state steps", count_allocs - before);
  CHECK(w->sgrad && ((dl_sgrad *)w->sgrad)->nnz == 41 && max_abs(w2->grad) > 0);
  dl_tape_free(&tp);
  dl_tensor_free(w); dl_tensor_free(w2); dl_tensor_free(idx); dl_tensor_free(seed);
  CHECK(count_allocs == count_frees);
}

/* ---- embedding panics ----------------------------------------------------- */

static void test_embedding_panics(void) {
  dl_tape tp;
  dl_tensor *w = mk(&ctx, DL_F64, DL_SHAPE(10, 3), NULL), *w3 = mk(&ctx, DL_F64, DL_SHAPE(2, 3, 4), NULL);
  dl_tensor *wi = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(10, 3)), *fidx = mk(&ctx, DL_F64, DL_SHAPE(5), NULL);
  dl_tensor *idx = mk_idx(&ctx, DL_I64, DL_SHAPE(3), (const int64_t[]){1, 2, 10});
  dl_tensor *neg = mk_idx(&ctx, DL_I32, DL_SHAPE(2, 2), (const int64_t[]){0, 9, -1, 4});
  dl_tensor *ok = mk_idx(&ctx, DL_I64, DL_SHAPE(5), (const int64_t[]){0, 1, 2, 3, 4});
  dl_tensor *deep = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(1, 1, 1, 1, 1, 1, 1, 1));
  dl_tape_init(&tp, &ctx, 0);
  EXPECT_PANIC(dl_t_embedding(&tp, w3, ok), "dl_t_embedding", "f64[2, 3, 4]", "i64[5]");
  EXPECT_PANIC(dl_t_embedding(&tp, w, fidx), "dl_t_embedding", "f64[10, 3]", "f64[5]", "i64 or i32");
  EXPECT_PANIC(dl_t_embedding(&tp, wi, ok), "dl_t_embedding", "i64[10, 3]", "i64[5]");
  EXPECT_PANIC(dl_t_embedding(&tp, w, deep), "dl_t_embedding", "f64[10, 3]", "i64[1, 1, 1, 1, 1, 1, 1, 1]");
  EXPECT_PANIC(dl_t_embedding(&tp, w, idx), "dl_t_embedding", "index 10", "position [2]", "[0, 10)",
               "i64[3]", "f64[10, 3]");
  EXPECT_PANIC(dl_t_embedding(&tp, w, neg), "dl_t_embedding", "index -1", "position [1, 0]", "[0, 10)",
               "i32[2, 2]");
  dl_tape_free(&tp);
  dl_tensor_free(w); dl_tensor_free(w3); dl_tensor_free(wi); dl_tensor_free(fidx);
  dl_tensor_free(idx); dl_tensor_free(neg); dl_tensor_free(ok); dl_tensor_free(deep);
}

/* ---- dropout ---------------------------------------------------------------- */

/* The documented mask of element i. */
static int mask_at(const dl_rng *r, uint64_t counter, int64_t i, double p) {
  return dl__u01_f64(dl_rng_at(r, counter + (uint64_t)i)) >= p;
}

static void test_dropout_identity(void) {
  dl_tape tp;
  dl_rng rng = dl_rng_make(20);
  dl_tensor *x = mk(&ctx, DL_F32, DL_SHAPE(3, 4), &rng);
  uint64_t c0 = rng.counter;
  dl_tape_init(&tp, &ctx, 0);
  dl_requires_grad(x);
  CHECK(dl_t_dropout(&tp, x, 0.5, &rng, 0) == x);
  CHECK(dl_t_dropout(&tp, x, 0.0, &rng, 1) == x);
  CHECK(dl_t_dropout(&tp, x, 0.5, NULL, 0) == x); /* no rng needed in evaluation */
  CHECK(rng.counter == c0 && tp.nodes == 0);
  dl_tape_free(&tp);
  dl_tensor_free(x);
}

static void test_dropout_mask_and_statistics(void) {
  const int64_t N = 100000;
  static const double ps[] = {0.1, 0.3, 0.5, 0.9};
  dl_tape tp;
  int pi, f64;
  dl_tensor *x32 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(N)), *x64 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(N));
  dl_tape_init(&tp, &ctx, 0);
  dl_tensor_fill(x32, 1.0);
  dl_tensor_fill(x64, 1.0);
  for (pi = 0; pi < 4; pi++) {
    double p = ps[pi], s = 1.0 / (1.0 - p);
    dl_tensor *y[2];
    for (f64 = 0; f64 < 2; f64++) {
      dl_rng rng = dl_rng_make(21 + (uint64_t)pi);
      dl_rng r0;
      int64_t i, dropped = 0, bad = 0;
      double sum = 0, frac, mean;
      rng.counter = 1000; /* starts mid-stream */
      r0 = rng;
      y[f64] = dl_t_dropout(&tp, f64 ? x64 : x32, p, &rng, 1);
      CHECK(rng.counter == r0.counter + (uint64_t)N);
      for (i = 0; i < N; i++) {
        double v = dl__get_at(y[f64], i);
        int m = mask_at(&r0, r0.counter, i, p);
        if (m ? v != (f64 ? s : (double)(float)s) : v != 0) bad++;
        dropped += !m;
        sum += v;
      }
      CHECK_MSG(bad == 0, "%lld elements differ from the documented mask (p %g)", (long long)bad, p);
      frac = (double)dropped / (double)N;
      mean = sum / (double)N;
      CHECK_MSG(fabs(frac - p) <= 4 * sqrt(p * (1 - p) / (double)N), "dropped %.5f, p %g", frac, p);
      CHECK_MSG(fabs(mean - 1.0) <= 4 * sqrt(p / (1 - p) / (double)N), "mean %.5f, p %g", mean, p);
    }
    { /* the same mask in f32 and f64 */
      int64_t i, same = 1;
      for (i = 0; i < N; i++) same &= (dl__get_at(y[0], i) == 0) == (dl__get_at(y[1], i) == 0);
      CHECK(same);
    }
    dl_tape_rewind(&tp);
  }
  { /* the same seed gives the same mask; the next call a different one */
    dl_rng a = dl_rng_make(30), b = dl_rng_make(30);
    dl_tensor *y1 = dl_t_dropout(&tp, x64, 0.5, &a, 1), *y2 = dl_t_dropout(&tp, x64, 0.5, &b, 1);
    dl_tensor *y3 = dl_t_dropout(&tp, x64, 0.5, &a, 1);
    CHECK(memcmp(y1->data, y2->data, sizeof(double) * (size_t)N) == 0);
    CHECK(memcmp(y1->data, y3->data, sizeof(double) * (size_t)N) != 0);
    CHECK(a.counter == 2 * (uint64_t)N && b.counter == (uint64_t)N);
  }
  { /* p == 1: zeros (no division by zero) */
    dl_rng a = dl_rng_make(31);
    dl_tensor *y = dl_t_dropout(&tp, x32, 1.0, &a, 1);
    CHECK(max_abs(y) == 0 && a.counter == (uint64_t)N);
  }
  dl_tape_free(&tp);
  dl_tensor_free(x32); dl_tensor_free(x64);
}

/* bit-identical for 1 and 2 threads, with a strided input too */
static void test_dropout_threads(void) {
  dl_ctx *cs[2];
  dl_tensor *x[2], *y[2], *ys[2], *gy, *gx[2];
  dl_tape tp[2];
  dl_rng src = dl_rng_make(40);
  int k;
  cs[0] = &ctx1;
  cs[1] = &ctx2;
  gy = mk(&ctx, DL_F32, DL_SHAPE(300, 700), &src);
  for (k = 0; k < 2; k++) {
    dl_rng r = dl_rng_make(41), drop = dl_rng_make(42);
    dl_tensor xt;
    x[k] = mk(cs[k], DL_F32, DL_SHAPE(300, 700), &r);
    dl_requires_grad(x[k]);
    dl_tape_init(&tp[k], cs[k], 0);
    y[k] = dl_t_dropout(&tp[k], x[k], 0.35, &drop, 1);
    dl_backward(&tp[k], y[k], gy);
    gx[k] = x[k]->grad;
    xt = dl_view_transpose(x[k], 0, 1);
    ys[k] = dl_t_dropout(&tp[k], &xt, 0.35, &drop, 1);
  }
  CHECK(memcmp(y[0]->data, y[1]->data, sizeof(float) * 300 * 700) == 0);
  CHECK(memcmp(gx[0]->data, gx[1]->data, sizeof(float) * 300 * 700) == 0);
  CHECK(memcmp(ys[0]->data, ys[1]->data, sizeof(float) * 300 * 700) == 0);
  { /* the strided input: y[i] follows x's row-major order over its (transposed) shape */
    dl_rng drop = dl_rng_make(42);
    dl_tensor xt = dl_view_transpose(x[0], 0, 1);
    int64_t i, bad = 0;
    float s = (float)(1.0 / 0.65);
    for (i = 0; i < ys[0]->numel; i++) {
      float want = mask_at(&drop, 300 * 700, i, 0.35) ? dl_f32(x[0])[dl__offset_of_linear(&xt, i)] * s : 0.0f;
      bad += dl_f32(ys[0])[i] != want;
    }
    CHECK(bad == 0);
  }
  for (k = 0; k < 2; k++) {
    dl_tape_free(&tp[k]);
    dl_tensor_free(x[k]);
  }
  dl_tensor_free(gy);
}

static void test_dropout_backward_and_tangent(void) {
  dl_rng rng = dl_rng_make(50), drop = dl_rng_make(51), d0;
  dl_tensor *x = mk(&ctx, DL_F64, DL_SHAPE(7, 9), &rng), *gy = mk(&ctx, DL_F64, DL_SHAPE(7, 9), &rng);
  dl_tensor *tx = mk(&ctx, DL_F64, DL_SHAPE(7, 9), &rng), *y;
  dl_tape tp;
  const double p = 0.4, s = 1.0 / (1.0 - p);
  int64_t i;
  int kept = 0;
  dl_tape_init(&tp, &ctx, 0);
  dl_requires_grad(x);
  dl_set_tangent(x, tx);
  d0 = drop;
  y = dl_t_dropout(&tp, x, p, &drop, 1);
  CHECK(y->tangent != NULL && y->node != NULL);
  dl_backward(&tp, y, gy);
  for (i = 0; i < 63; i++) {
    int m = mask_at(&d0, d0.counter, i, p);
    kept += m;
    CHECK(dl_f64(y)[i] == (m ? dl_f64(x)[i] * s : 0.0));
    CHECK(dl_f64(x->grad)[i] == (m ? dl_f64(gy)[i] * s : 0.0));
    CHECK(dl_f64(y->tangent)[i] == (m ? dl_f64(tx)[i] * s : 0.0));
  }
  CHECK(kept > 0 && kept < 63);
  dl_tape_rewind(&tp);
  /* p == 1: zero output, zero gradient, zero tangent */
  dl_zero_grad(x);
  y = dl_t_dropout(&tp, x, 1.0, &drop, 1);
  dl_backward(&tp, y, gy);
  CHECK(max_abs(y) == 0 && max_abs(x->grad) == 0 && max_abs(y->tangent) == 0);
  dl_set_tangent(x, NULL);
  dl_tape_free(&tp);
  dl_tensor_free(x); dl_tensor_free(gy); dl_tensor_free(tx);
}

/* gradcheck calls the function many times: each call replays the saved rng */
typedef struct gc_drop { dl_rng rng; double p; } gc_drop;
static dl_tensor *gc_dropout(dl_tape *tp, dl_tensor **in, void *user) {
  gc_drop *g = (gc_drop *)user;
  dl_rng r = g->rng;
  return dl_t_tanh(tp, dl_t_dropout(tp, in[0], g->p, &r, 1));
}
static dl_tensor *gc_dropout_chain(dl_tape *tp, dl_tensor **in, void *user) {
  gc_drop *g = (gc_drop *)user;
  dl_rng r = g->rng;
  return dl_t_dropout(tp, dl_t_mul(tp, in[0], in[0]), g->p, &r, 1);
}

static void test_dropout_gradcheck(void) {
  dl_rng rng = dl_rng_make(60);
  dl_tensor *x = mk(&ctx, DL_F64, DL_SHAPE(5, 6), &rng), *b = mk(&ctx, DL_F64, DL_SHAPE(6, 5), &rng);
  dl_tensor xv = dl_view_transpose(b, 0, 1); /* strided [5, 6] */
  dl_tensor *in[1];
  gc_drop g;
  static const double ps[] = {0.2, 0.5, 1.0};
  int k;
  dl_requires_grad(x);
  dl_requires_grad(&xv);
  g.rng = dl_rng_make(61);
  g.rng.counter = 7;
  for (k = 0; k < 3; k++) {
    g.p = ps[k];
    in[0] = x;
    GRADCHECK("dropout", gc_dropout, &g, 1, in);
    GRADCHECK("dropout of an op's output", gc_dropout_chain, &g, 1, in);
    in[0] = &xv;
    GRADCHECK("dropout strided input", gc_dropout, &g, 1, in);
  }
  dl_tensor_free(xv.grad);
  dl_tensor_free(x); dl_tensor_free(b);
}

static void test_dropout_panics(void) {
  dl_tape tp;
  dl_rng rng = dl_rng_make(70);
  dl_tensor *x = mk(&ctx, DL_F32, DL_SHAPE(3, 4), NULL), *xi = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(3));
  dl_tape_init(&tp, &ctx, 0);
  EXPECT_PANIC(dl_t_dropout(&tp, x, -0.1, &rng, 1), "dl_t_dropout", "f32[3, 4]", "-0.1", "[0, 1]");
  EXPECT_PANIC(dl_t_dropout(&tp, x, 1.5, &rng, 0), "dl_t_dropout", "f32[3, 4]", "1.5");
  EXPECT_PANIC(dl_t_dropout(&tp, x, NAN, &rng, 1), "dl_t_dropout", "f32[3, 4]", "nan");
  EXPECT_PANIC(dl_t_dropout(&tp, xi, 0.5, &rng, 1), "dl_t_dropout", "i64[3]", "f32 or f64");
  EXPECT_PANIC(dl_t_dropout(&tp, x, 0.5, NULL, 1), "dl_t_dropout", "f32[3, 4]", "rng");
  CHECK(rng.counter == 0);
  dl_tape_free(&tp);
  dl_tensor_free(x); dl_tensor_free(xi);
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
  fx_ok = fx2_load(&fx, "tests/fixtures/sparse.txt");
  RUN(test_embedding_fixtures);
  RUN(test_embedding_sparse_rows);
  RUN(test_embedding_edge_cases);
  RUN(test_embedding_gradcheck);
  RUN(test_embedding_threads);
  RUN(test_steady_state_no_alloc);
  RUN(test_embedding_panics);
  RUN(test_dropout_identity);
  RUN(test_dropout_mask_and_statistics);
  RUN(test_dropout_threads);
  RUN(test_dropout_backward_and_tangent);
  RUN(test_dropout_gradcheck);
  RUN(test_dropout_panics);
  printf("  gradcheck worst max_err %.3g\n", worst_gc);
  fx2_free(&fx);
  return harness_finish();
}
