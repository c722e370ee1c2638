/* dl-test-cxx */
/* tests/test_ops_rnn.c - dl_t_rnn (tanh / relu), dl_t_lstm and dl_t_gru
 * (include/dl/ops/rnn.h).
 *
 * - PyTorch agreement (tests/fixtures/rnn.txt, tools/fixtures_rnn.py):
 *   torch.nn.RNN / LSTM / GRU(batch_first=True) with and without h0/c0 and
 *   biases, outputs y, h_n, c_n and the gradients of
 *   sum(y*gy) + sum(h_n*ghn) + sum(c_n*gcn) with respect to x, h0, c0 and
 *   every weight and bias, f64 (element-wise relative error <= 1e-10) and f32
 *   (norm-wise, max abs error / max abs value, <= 5e-6). Every case runs
 *   three ways: the loss built on the tape (one backward), one backward per
 *   output with its seed (the gradients add up), and with every input a
 *   strided view. Packed sequences (pack_padded_sequence, unsorted
 *   lengths) against the _ex ops with dl_rnn_args.lengths; the GRU with the
 *   reset gate before the product (gru_reset_before_linear, no PyTorch
 *   module) against the fixture script's step-by-step GRU, whose other form
 *   it checks against torch.nn.GRU.
 * - rows of different lengths agree with each row run alone (outputs,
 *   states, tangents, gradients); past a row's end y is 0 and x gets no
 *   gradient.
 * - dl_gradcheck (f64, reverse and forward mode) of each op: all outputs,
 *   y / h_n / c_n alone, with and without h0/c0 and biases, h0 an op's
 *   output, strided inputs.
 * - no-grad runs give the same values as recording runs (one step of state);
 *   w_hh's gradient alone equals its gradient when every input needs one;
 *   tangents add up (linearity in the input tangents).
 * - 1 and 2 threads give bit-identical outputs, gradients and tangents.
 * - no allocation in the steady state of a training loop.
 * - panics name the op and the shapes.
 */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx, ctx1, ctx2;

/* K_GRU_RB: the GRU with the reset gate before the product (dl_rnn_args.gru_reset_before_linear) */
enum { K_TANH = 0, K_RELU = 1, K_LSTM = 2, K_GRU = 3, K_GRU_RB = 4 };
static const char *kind_names[] = {"rnn_tanh", "rnn_relu", "lstm", "gru", "gru_rb"};
static const int kind_gates[] = {1, 1, 4, 3, 3};

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

/* One call of the op of `kind` (c0 / c_n only for the LSTM); lengths NULL:
 * the plain op, else its _ex form with those lengths. */
static dl_tensor *call_len(dl_tape *tp, int kind, dl_tensor *x, dl_tensor *h0, dl_tensor *c0, dl_tensor *wih,
                           dl_tensor *whh, dl_tensor *bih, dl_tensor *bhh, const int64_t *lengths, dl_tensor **hn,
                           dl_tensor **cn) {
  dl_rnn_args a;
  memset(&a, 0, sizeof a);
  a.lengths = lengths;
  a.gru_reset_before_linear = kind == K_GRU_RB;
  if (!lengths && kind != K_GRU_RB) switch (kind) {
      case K_TANH: return dl_t_rnn(tp, x, h0, wih, whh, bih, bhh, 1, hn);
      case K_RELU: return dl_t_rnn(tp, x, h0, wih, whh, bih, bhh, 0, hn);
      case K_LSTM: return dl_t_lstm(tp, x, h0, c0, wih, whh, bih, bhh, hn, cn);
      default: return dl_t_gru(tp, x, h0, wih, whh, bih, bhh, hn);
    }
  switch (kind) {
    case K_TANH: return dl_t_rnn_ex(tp, x, h0, wih, whh, bih, bhh, 1, &a, hn);
    case K_RELU: return dl_t_rnn_ex(tp, x, h0, wih, whh, bih, bhh, 0, &a, hn);
    case K_LSTM: return dl_t_lstm_ex(tp, x, h0, c0, wih, whh, bih, bhh, &a, hn, cn);
    default: return dl_t_gru_ex(tp, x, h0, wih, whh, bih, bhh, &a, hn);
  }
}
static dl_tensor *call(dl_tape *tp, int kind, dl_tensor *x, dl_tensor *h0, dl_tensor *c0, dl_tensor *wih,
                       dl_tensor *whh, dl_tensor *bih, dl_tensor *bhh, dl_tensor **hn, dl_tensor **cn) {
  return call_len(tp, kind, x, h0, c0, wih, whh, bih, bhh, NULL, hn, cn);
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

/* A strided copy of t (same values): a view taking every other element of
 * the last dimension of a new heap buffer (kept in *base to free). */
static dl_tensor strided_copy(const dl_tensor *t, dl_tensor **base) {
  int64_t sh[DL_MAX_DIMS], i;
  int d;
  dl_tensor v;
  for (d = 0; d < t->ndim; d++) sh[d] = t->shape[d];
  sh[t->ndim - 1] *= 2;
  *base = dl_tensor_make(&ctx, t->dtype, t->ndim, sh);
  dl_tensor_fill(*base, 1e30); /* poison the skipped elements */
  v = dl_view_slice(*base, t->ndim - 1, 0, sh[t->ndim - 1], 2);
  for (i = 0; i < t->numel; i++) dl__set_at(&v, dl__offset_of_linear(&v, i), dl__get_at(t, i));
  return v;
}

/* One fixture case; mode 0: the loss on the tape, one backward; 1: one
 * backward per output; 2: every input a strided view, as mode 0. Returns
 * the number of comparisons off tolerance. */
static int run_fixture(const fx2_case *c, int mode) {
  static const char *in_keys[7] = {"x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"};
  const dl_dtype dt = c->f64 ? DL_F64 : DL_F32;
  const double tol = c->f64 ? 1e-10 : 5e-6;
  const int kind = (int)fx2_param(c, "kind", -1);
  dl_tensor *own[7], views[7], *bases[7], *in[7], *gy, *ghn, *gcn, *y, *hn = NULL, *cn = NULL;
  const fx2_tensor *lt = fx2_get(c, "lengths");
  int64_t lengths[16];
  dl_tape tp;
  int k, bad = 0;
  double e;
  if (lt) {
    if (!lt->isint || lt->numel < 1 || lt->numel > 16) {
      CHECK_MSG(0, "case %s: bad lengths", c->name);
      return 1;
    }
    for (k = 0; k < lt->numel; k++) lengths[k] = (int64_t)lt->v[k];
  }
  if (kind < 0 || kind > 4) {
    CHECK_MSG(0, "case %s has no kind", c->name);
    return 1;
  }
  for (k = 0; k < 7; k++) {
    own[k] = fx2_make(c, in_keys[k], dt);
    bases[k] = NULL;
    in[k] = own[k];
    if (own[k]) {
      own[k]->ctx = &ctx;
      if (mode == 2) {
        views[k] = strided_copy(own[k], &bases[k]);
        in[k] = &views[k];
      }
      dl_requires_grad(in[k]);
    }
  }
  gy = fx2_make(c, "gy", dt);
  ghn = fx2_make(c, "ghn", dt);
  gcn = fx2_make(c, "gcn", dt);
  dl_tape_init(&tp, &ctx, 0);
  y = call_len(&tp, kind, in[0], in[1], in[2], in[3], in[4], in[5], in[6], lt ? lengths : NULL, &hn,
               kind == K_LSTM ? &cn : NULL);
  if (mode == 1) {
    dl_backward(&tp, y, gy);
    dl_backward(&tp, hn, ghn);
    if (cn) dl_backward(&tp, cn, gcn);
  } else {
    dl_tensor *loss = dl_t_add(&tp, dl_t_sum_all(&tp, dl_t_mul(&tp, y, gy)), dl_t_sum_all(&tp, dl_t_mul(&tp, hn, ghn)));
    if (cn) loss = dl_t_add(&tp, loss, dl_t_sum_all(&tp, dl_t_mul(&tp, cn, gcn)));
    dl_backward(&tp, loss, NULL);
  }
  {
    const char *okeys[3] = {"y", "hn", "cn"};
    dl_tensor *outs[3];
    outs[0] = y;
    outs[1] = hn;
    outs[2] = cn;
    for (k = 0; k < 3; k++) {
      if (!fx2_get(c, okeys[k])) continue;
      e = c->f64 ? fx2_err(outs[k], fx2_get(c, okeys[k])) : fx2_err_norm(outs[k], fx2_get(c, okeys[k]));
      worst_fx[c->f64] = fmax(worst_fx[c->f64], e);
      if (!(e <= tol)) {
        bad++;
        fprintf(stderr, "  %s %s mode %d: %s rel err %.3g (tol %g)\n", c->name, c->f64 ? "f64" : "f32", mode,
                okeys[k], e, tol);
      }
    }
  }
  for (k = 0; k < 7; k++) {
    char key[40];
    if (!in[k]) continue;
    snprintf(key, sizeof key, "g_%s", in_keys[k]);
    e = c->f64 ? fx2_err(in[k]->grad, fx2_get(c, key)) : fx2_err_norm(in[k]->grad, fx2_get(c, key));
    worst_fx[c->f64] = fmax(worst_fx[c->f64], e);
    if (!(e <= tol)) {
      bad++;
      fprintf(stderr, "  %s %s mode %d: %s rel err %.3g (tol %g)\n", c->name, c->f64 ? "f64" : "f32", mode, key,
              e, tol);
    }
  }
  fx_runs++;
  dl_tape_free(&tp);
  for (k = 0; k < 7; k++) {
    if (mode == 2 && in[k]) dl_tensor_free(in[k]->grad);
    dl_tensor_free(own[k]);
    dl_tensor_free(bases[k]);
  }
  dl_tensor_free(gy);
  dl_tensor_free(ghn);
  dl_tensor_free(gcn);
  return bad;
}

static void test_fixtures(void) {
  int i, mode, seen[5][2][2], packed[5], f32 = 0;
  memset(seen, 0, sizeof seen);
  memset(packed, 0, sizeof packed);
  if (!fx_ok) SKIP("%s", fx.err);
  for (i = 0; i < fx.n; i++) {
    const fx2_case *c = &fx.cases[i];
    const int kind = (int)fx2_param(c, "kind", -1);
    for (mode = 0; mode < 3; mode++) {
      int bad = run_fixture(c, mode);
      CHECK_MSG(bad == 0, "fixture %s %s mode %d: %d comparison(s) off PyTorch", c->name, c->f64 ? "f64" : "f32",
                mode, bad);
    }
    if (kind >= 0 && kind < 5) seen[kind][(int)fx2_param(c, "h0", 0)][(int)fx2_param(c, "bias", 0)]++;
    if (kind >= 0 && kind < 5 && fx2_param(c, "packed", 0) == 1) {
      CHECK_MSG(fx2_get(c, "lengths") != NULL, "packed case %s has no lengths", c->name);
      packed[kind]++;
    }
    f32 += !c->f64;
  }
  for (i = 0; i < 5; i++) {
    int a, b;
    for (a = 0; a < 2; a++)
      for (b = 0; b < 2; b++)
        CHECK_MSG(seen[i][a][b] > 0, "no fixture for %s h0 %d bias %d", kind_names[i], a, b);
    CHECK_MSG(packed[i] >= 2, "no packed-sequence fixtures for %s", kind_names[i]);
  }
  CHECK(f32 > 0 && f32 < fx.n);
  CHECK(fx2_find(&fx, "lstm_cn_only", 1) && fx2_find(&fx, "lstm_long", 0) && fx2_find(&fx, "gru_hn_only", 1));
  CHECK(fx2_find(&fx, "gru_rb_long", 0) && fx2_find(&fx, "gru_rb_packed", 0) && fx2_find(&fx, "gru_rb_packed", 1));
  printf("  %d fixture runs (%d cases, %d f32); worst rel error vs PyTorch: f64 %.3g, f32 %.3g\n", fx_runs, fx.n,
         f32, worst_fx[1], worst_fx[0]);
}

/* h_n is y[:, T-1]; c_n the last cell state; no-grad runs (one step of
 * state kept) agree bit for bit with recording ones; nothing is recorded
 * without a gradient. */
static void test_values_and_no_grad(void) {
  const int64_t B = 3, T = 7, I = 5, H = 6;
  int kind, f64;
  for (kind = 0; kind < 5; kind++)
    for (f64 = 0; f64 < 2; f64++) {
      const dl_dtype dt = f64 ? DL_F64 : DL_F32;
      const int64_t GH = kind_gates[kind] * H;
      dl_rng rng = dl_rng_make(100 + (uint64_t)kind);
      dl_tensor *x = mk(&ctx, dt, DL_SHAPE(B, T, I), &rng, 1.0), *h0 = mk(&ctx, dt, DL_SHAPE(B, H), &rng, 0.5);
      dl_tensor *c0 = mk(&ctx, dt, DL_SHAPE(B, H), &rng, 0.5);
      dl_tensor *wih = mk(&ctx, dt, DL_SHAPE(GH, I), &rng, 0.5), *whh = mk(&ctx, dt, DL_SHAPE(GH, H), &rng, 0.5);
      dl_tensor *bih = mk(&ctx, dt, DL_SHAPE(GH), &rng, 0.5), *bhh = mk(&ctx, dt, DL_SHAPE(GH), &rng, 0.5);
      dl_tensor *y1, *y2, *hn1, *hn2, *cn1 = NULL, *cn2 = NULL;
      dl_tape tp;
      int64_t b, j, n0;
      dl_tape_init(&tp, &ctx, 0);
      dl_requires_grad(whh);
      y1 = call(&tp, kind, x, h0, c0, wih, whh, bih, bhh, &hn1, kind == K_LSTM ? &cn1 : NULL);
      CHECK(y1->node != NULL && y1->ndim == 3 && y1->shape[0] == B && y1->shape[1] == T && y1->shape[2] == H);
      for (b = 0; b < B; b++)
        for (j = 0; j < H; j++) CHECK(dl__get_at(hn1, b * H + j) == dl__get_at(y1, (b * T + T - 1) * H + j));
      n0 = tp.nodes;
      dl_no_grad_begin(&tp);
      y2 = call(&tp, kind, x, h0, c0, wih, whh, bih, bhh, &hn2, kind == K_LSTM ? &cn2 : NULL);
      dl_no_grad_end(&tp);
      CHECK(tp.nodes == n0 && y2->node == NULL && hn2->node == NULL);
      CHECK(same_bits(y1, y2) && same_bits(hn1, hn2));
      if (kind == K_LSTM) {
        CHECK(same_bits(cn1, cn2));
        CHECK(max_abs(cn1) > 0 && max_abs(cn1) < 50);
      }
      if (kind == K_RELU) { /* some units off, some on */
        int64_t zeros = 0;
        for (b = 0; b < y1->numel; b++) zeros += dl__get_at(y1, b) == 0;
        CHECK(zeros > 0 && zeros < y1->numel);
      } else {
        CHECK(max_abs(y1) > 0.05 && max_abs(y1) < 1.0);
      }
      whh->flags &= ~(unsigned)DL_TENSOR_REQUIRES_GRAD;
      y2 = call(&tp, kind, x, NULL, NULL, wih, whh, NULL, NULL, &hn2, NULL);
      CHECK(tp.nodes == n0 && y2->node == NULL && !(y2->flags & DL_TENSOR_REQUIRES_GRAD));
      dl_tape_free(&tp);
      dl_tensor_free(x); dl_tensor_free(h0); dl_tensor_free(c0); dl_tensor_free(wih); dl_tensor_free(whh);
      dl_tensor_free(bih); dl_tensor_free(bhh);
    }
}

/* Partial requirements: w_hh's gradient alone (x, h0, w_ih need none, so
 * the pre-activation gradients go to scratch and dh_{-1} is not computed)
 * equals, bit for bit, its gradient when everything needs one. Tangents
 * are linear: the tangent for (tx, tw_hh) is the sum of those for tx and
 * for tw_hh alone. */
static void test_partial_grads_and_tangents(void) {
  const int64_t B = 3, T = 6, I = 4, H = 5;
  int kind;
  for (kind = 0; kind < 5; kind++) {
    const int64_t GH = kind_gates[kind] * H;
    dl_rng rng = dl_rng_make(300 + (uint64_t)kind);
    dl_tensor *x = mk(&ctx, DL_F64, DL_SHAPE(B, T, I), &rng, 1.0), *h0 = mk(&ctx, DL_F64, DL_SHAPE(B, H), &rng, 0.5);
    dl_tensor *c0 = mk(&ctx, DL_F64, DL_SHAPE(B, H), &rng, 0.5);
    dl_tensor *wih = mk(&ctx, DL_F64, DL_SHAPE(GH, I), &rng, 0.5), *whh = mk(&ctx, DL_F64, DL_SHAPE(GH, H), &rng, 0.5);
    dl_tensor *bhh = mk(&ctx, DL_F64, DL_SHAPE(GH), &rng, 0.5), *gy = mk(&ctx, DL_F64, DL_SHAPE(B, T, H), &rng, 1.0);
    dl_tensor *tx = mk(&ctx, DL_F64, DL_SHAPE(B, T, I), &rng, 1.0), *tw = mk(&ctx, DL_F64, DL_SHAPE(GH, H), &rng, 1.0);
    dl_tensor *gw_alone, *ty[3], *y;
    dl_tape tp;
    int64_t i;
    int m;
    dl_tape_init(&tp, &ctx, 0);
    dl_requires_grad(whh);
    y = call(&tp, kind, x, h0, c0, wih, whh, NULL, bhh, NULL, NULL);
    dl_backward(&tp, y, gy);
    gw_alone = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(GH, H));
    dl_tensor_copy(gw_alone, whh->grad);
    CHECK(max_abs(gw_alone) > 0);
    dl_tape_rewind(&tp);
    dl_zero_grad(whh);
    dl_requires_grad(x);
    dl_requires_grad(h0);
    dl_requires_grad(c0);
    dl_requires_grad(wih);
    dl_requires_grad(bhh);
    y = call(&tp, kind, x, h0, c0, wih, whh, NULL, bhh, NULL, NULL);
    dl_backward(&tp, y, gy);
    CHECK_MSG(same_bits(gw_alone, whh->grad), "%s", kind_names[kind]);
    dl_tape_rewind(&tp);
    for (m = 0; m < 3; m++) { /* tx alone, tw alone, both */
      dl_set_tangent(x, m != 1 ? tx : NULL);
      dl_set_tangent(whh, m != 0 ? tw : NULL);
      y = call(&tp, kind, x, NULL, NULL, wih, whh, NULL, bhh, NULL, NULL);
      ty[m] = y->tangent;
      CHECK(ty[m] != NULL);
    }
    for (i = 0; ty[0] && ty[1] && ty[2] && i < ty[2]->numel; i++)
      CHECK_NEAR(dl_f64(ty[2])[i], dl_f64(ty[0])[i] + dl_f64(ty[1])[i], 1e-12);
    CHECK(ty[0] && ty[1] && max_abs(ty[0]) > 0 && max_abs(ty[1]) > 0);
    dl_set_tangent(x, NULL);
    dl_set_tangent(whh, NULL);
    dl_tape_free(&tp);
    dl_tensor_free(x); dl_tensor_free(h0); dl_tensor_free(c0); dl_tensor_free(wih); dl_tensor_free(whh);
    dl_tensor_free(bhh); dl_tensor_free(gy); dl_tensor_free(tx); dl_tensor_free(tw); dl_tensor_free(gw_alone);
  }
}

/* ---- variable lengths ---------------------------------------------------- */

/* A new [1, L, W] (or [1, W] when L == 0) tensor holding row b of t [B, T, W]
 * (t [B, W]), steps 0..L-1. */
static dl_tensor *row_of(const dl_tensor *t, int64_t b, int64_t L) {
  dl_tensor v = dl_view_slice(t, 0, b, b + 1, 1), *r;
  if (t->ndim == 3) {
    dl_tensor w = dl_view_slice(&v, 1, 0, L, 1);
    r = dl_tensor_make(&ctx, t->dtype, DL_SHAPE(1, L, t->shape[2]));
    dl_tensor_copy(r, &w);
  } else {
    r = dl_tensor_make(&ctx, t->dtype, DL_SHAPE(1, t->shape[1]));
    dl_tensor_copy(r, &v);
  }
  return r;
}
/* max |a - b| over row b, steps 0..L-1 of a [B, T, W] (a [B, W]) against
 * r [1, L, W] ([1, W]); and in *pad the max |a| over the steps past L. */
static double row_diff(const dl_tensor *a, int64_t b, int64_t L, const dl_tensor *r, double *pad) {
  const int64_t W = a->shape[a->ndim - 1], T = a->ndim == 3 ? a->shape[1] : 1;
  const double *pa = dl_f64(a) + b * T * W, *pr = dl_f64(r);
  double m = 0;
  int64_t i;
  if (a->ndim == 2) L = 1;
  for (i = 0; i < L * W; i++) m = fmax(m, fabs(pa[i] - pr[i]));
  if (pad) {
    *pad = 0;
    for (i = L * W; i < T * W; i++) *pad = fmax(*pad, fabs(pa[i]));
  }
  return m;
}

/* Rows of different lengths in one call agree with each row run alone on
 * its own steps (outputs, h_n, c_n, tangents, gradients of x, h0, c0 and the
 * weights summed over the rows); past its end a row's y and tangent are
 * exactly 0 and its x gets exactly no gradient; a no-grad run gives the
 * recording run's bits. */
static void test_lengths(void) {
  const int64_t B = 4, T = 7, I = 3, H = 5, lengths[4] = {3, 7, 1, 5};
  int kind;
  for (kind = 0; kind < 5; kind++) {
    const int64_t GH = kind_gates[kind] * H;
    const int lstm = kind == K_LSTM;
    dl_rng rng = dl_rng_make(900 + (uint64_t)kind);
    dl_tensor *x = mk(&ctx, DL_F64, DL_SHAPE(B, T, I), &rng, 1.0), *h0 = mk(&ctx, DL_F64, DL_SHAPE(B, H), &rng, 0.5);
    dl_tensor *c0 = mk(&ctx, DL_F64, DL_SHAPE(B, H), &rng, 0.5);
    dl_tensor *wih = mk(&ctx, DL_F64, DL_SHAPE(GH, I), &rng, 0.5), *whh = mk(&ctx, DL_F64, DL_SHAPE(GH, H), &rng, 0.5);
    dl_tensor *bih = mk(&ctx, DL_F64, DL_SHAPE(GH), &rng, 0.5), *bhh = mk(&ctx, DL_F64, DL_SHAPE(GH), &rng, 0.5);
    dl_tensor *gy = mk(&ctx, DL_F64, DL_SHAPE(B, T, H), &rng, 1.0), *ghn = mk(&ctx, DL_F64, DL_SHAPE(B, H), &rng, 1.0);
    dl_tensor *gcn = mk(&ctx, DL_F64, DL_SHAPE(B, H), &rng, 1.0), *tx = mk(&ctx, DL_F64, DL_SHAPE(B, T, I), &rng, 1.0);
    dl_tensor *tw = mk(&ctx, DL_F64, DL_SHAPE(GH, H), &rng, 1.0);
    dl_tensor *leaves[6], *saved[6], *y, *hn = NULL, *cn = NULL, *yb = NULL, *hnb = NULL, *cnb = NULL;
    dl_tape tp, tpr;
    double worst = 0, pad = 0, e;
    int64_t b, i;
    int k;
    leaves[0] = x; leaves[1] = h0; leaves[2] = c0; leaves[3] = wih; leaves[4] = whh; leaves[5] = bih;
    for (k = 0; k < 6; k++) dl_requires_grad(leaves[k]);
    dl_requires_grad(bhh);
    dl_set_tangent(x, tx);
    dl_set_tangent(whh, tw);
    dl_tape_init(&tp, &ctx, 0);
    y = call_len(&tp, kind, x, h0, lstm ? c0 : NULL, wih, whh, bih, bhh, lengths, &hn, lstm ? &cn : NULL);
    dl_backward(&tp, y, gy);
    dl_backward(&tp, hn, ghn);
    if (cn) dl_backward(&tp, cn, gcn);
    for (k = 0; k < 6; k++) {
      saved[k] = NULL;
      if (k == 2 && !lstm) continue;
      saved[k] = dl_tensor_make(&ctx, DL_F64, leaves[k]->grad->ndim, leaves[k]->grad->shape);
      dl_tensor_copy(saved[k], leaves[k]->grad);
      dl_zero_grad(leaves[k]);
    }
    /* past each row's end: y and its tangent exactly 0, x's gradient exactly 0 */
    for (b = 0; b < B; b++) {
      for (i = lengths[b] * H; i < T * H; i++) {
        CHECK_MSG(dl_f64(y)[b * T * H + i] == 0 && dl_f64(y->tangent)[b * T * H + i] == 0, "%s row %lld",
                  kind_names[kind], (long long)b);
      }
      for (i = lengths[b] * I; i < T * I; i++)
        CHECK_MSG(dl_f64(saved[0])[b * T * I + i] == 0, "%s: padding of row %lld got a gradient", kind_names[kind],
                  (long long)b);
    }
    /* each row alone on its own steps (on a tape of its own) */
    dl_tape_init(&tpr, &ctx, 0);
    for (b = 0; b < B; b++) {
      dl_tensor *xb = row_of(x, b, lengths[b]), *h0b = row_of(h0, b, 0), *c0b = row_of(c0, b, 0);
      dl_tensor *txb = row_of(tx, b, lengths[b]), *gyb = row_of(gy, b, lengths[b]);
      dl_tensor *ghnb = row_of(ghn, b, 0), *gcnb = row_of(gcn, b, 0);
      dl_tape_rewind(&tpr);
      dl_requires_grad(xb);
      dl_requires_grad(h0b);
      dl_requires_grad(c0b);
      dl_set_tangent(xb, txb);
      yb = call(&tpr, kind, xb, h0b, lstm ? c0b : NULL, wih, whh, bih, bhh, &hnb, lstm ? &cnb : NULL);
      worst = fmax(worst, row_diff(y, b, lengths[b], yb, &pad));
      worst = fmax(worst, row_diff(y->tangent, b, lengths[b], yb->tangent, NULL));
      worst = fmax(worst, row_diff(hn, b, 1, hnb, NULL));
      worst = fmax(worst, row_diff(hn->tangent, b, 1, hnb->tangent, NULL));
      if (lstm) {
        worst = fmax(worst, row_diff(cn, b, 1, cnb, NULL));
        worst = fmax(worst, row_diff(cn->tangent, b, 1, cnb->tangent, NULL));
      }
      dl_backward(&tpr, yb, gyb);
      dl_backward(&tpr, hnb, ghnb);
      if (cnb) dl_backward(&tpr, cnb, gcnb);
      worst = fmax(worst, row_diff(saved[0], b, lengths[b], xb->grad, NULL));
      worst = fmax(worst, row_diff(saved[1], b, 1, h0b->grad, NULL));
      if (lstm) worst = fmax(worst, row_diff(saved[2], b, 1, c0b->grad, NULL));
      dl_set_tangent(xb, NULL);
      dl_tensor_free(xb); dl_tensor_free(h0b); dl_tensor_free(c0b); dl_tensor_free(txb); dl_tensor_free(gyb);
      dl_tensor_free(ghnb); dl_tensor_free(gcnb);
    }
    dl_tape_free(&tpr);
    for (k = 3; k < 6; k++) /* the weights' gradients: the rows' sum */
      for (i = 0; i < saved[k]->numel; i++) worst = fmax(worst, fabs(dl_f64(saved[k])[i] - dl_f64(leaves[k]->grad)[i]));
    CHECK_MSG(worst < 1e-12, "%s: lengths vs rows alone: max diff %.3g", kind_names[kind], worst);
    CHECK_MSG(pad == 0, "%s: y past the end %.3g", kind_names[kind], pad);
    e = max_abs(saved[4]);
    CHECK(e > 0);
    { /* no-grad, no tangents: one step of state kept, the same bits */
      dl_tensor *y2, *hn2 = NULL, *cn2 = NULL;
      dl_tape tp2;
      dl_set_tangent(x, NULL);
      dl_set_tangent(whh, NULL);
      dl_tape_init(&tp2, &ctx, 0);
      dl_no_grad_begin(&tp2);
      y2 = call_len(&tp2, kind, x, h0, lstm ? c0 : NULL, wih, whh, bih, bhh, lengths, &hn2, lstm ? &cn2 : NULL);
      dl_no_grad_end(&tp2);
      CHECK_MSG(same_bits(y, y2) && same_bits(hn, hn2) && (!lstm || same_bits(cn, cn2)), "%s no-grad",
                kind_names[kind]);
      dl_tape_free(&tp2);
    }
    dl_tape_free(&tp);
    for (k = 0; k < 6; k++) {
      dl_tensor_free(saved[k]); /* (a tensor frees its gradient) */
      dl_tensor_free(leaves[k]);
    }
    dl_tensor_free(bhh); dl_tensor_free(gy); dl_tensor_free(ghn); dl_tensor_free(gcn);
    dl_tensor_free(tx); dl_tensor_free(tw);
  }
}

/* Stale arena memory must not reach a gradient: past a row's end the
 * GRU's reset-before form multiplies a zero da_n by its saved u = r h
 * (w_hn's gradient runs over every row), so u must be written there too.
 * The tape's arena is filled with NaN first. */
static void test_stale_arena(void) {
  int rb;
  for (rb = 0; rb < 2; rb++) {
    dl_ctx lc; /* a fresh context: its tape's first block is where the NaN go */
    const int64_t B = 2, T = 5, I = 3, H = 4, lengths[2] = {5, 2};
    dl_rng rng = dl_rng_make(41);
    dl_tensor *x, *wih, *whh, *y, *junk;
    dl_rnn_args a;
    dl_tape tp;
    int64_t i, bad = 0;
    int k;
    dl_ctx_init(&lc, NULL);
    x = mk(&lc, DL_F64, DL_SHAPE(B, T, I), &rng, 1.0);
    wih = mk(&lc, DL_F64, DL_SHAPE(3 * H, I), &rng, 0.5);
    whh = mk(&lc, DL_F64, DL_SHAPE(3 * H, H), &rng, 0.5);
    dl_tape_init(&tp, &lc, 0);
    for (k = 0; k < 64; k++) { /* small pieces, so that the arena's first block fills up too */
      junk = dl_tape_out(&tp, "junk", DL_F64, 1, (const int64_t[]){256});
      for (i = 0; i < junk->numel; i++) dl_f64(junk)[i] = NAN;
    }
    dl_tape_rewind(&tp);
    dl_requires_grad(whh);
    memset(&a, 0, sizeof a);
    a.lengths = lengths;
    a.gru_reset_before_linear = rb;
    y = dl_t_gru_ex(&tp, x, NULL, wih, whh, NULL, NULL, &a, NULL);
    dl_backward(&tp, dl_t_sum_all(&tp, dl_t_mul(&tp, y, y)), NULL);
    for (i = 0; i < whh->grad->numel; i++) bad += !isfinite(dl_f64(whh->grad)[i]);
    CHECK_MSG(bad == 0, "gru reset-before %d with lengths: %lld of %lld w_hh gradients not finite", rb, (long long)bad,
              (long long)whh->grad->numel);
    dl_tape_free(&tp);
    dl_tensor_free(x);
    dl_tensor_free(wih);
    dl_tensor_free(whh);
  }
}

/* ---- gradcheck --------------------------------------------------------------- */

/* in[] = x, w_ih, w_hh, [b_ih, b_hh], [h0, [c0]]; outs: 1 y, 2 h_n, 4 c_n (concatenated) */
typedef struct gc_rnn {
  int kind, bias, h0, outs, h0_op;
  const int64_t *lengths;
} gc_rnn;

static dl_tensor *gc_fn(dl_tape *tp, dl_tensor **in, void *user) {
  const gc_rnn *u = (const gc_rnn *)user;
  dl_tensor *bih = NULL, *bhh = NULL, *h0 = NULL, *c0 = NULL, *y, *hn = NULL, *cn = NULL, *parts[3];
  int k = 3, n = 0;
  if (u->bias) {
    bih = in[k++];
    bhh = in[k++];
  }
  if (u->h0) {
    h0 = in[k++];
    if (u->kind == K_LSTM) c0 = in[k++];
    if (u->h0_op) { /* initial states made by ops (not leaves) */
      h0 = dl_t_tanh(tp, h0);
      if (c0) c0 = dl_t_mul_scalar(tp, c0, 1.5);
    }
  }
  y = call_len(tp, u->kind, in[0], h0, c0, in[1], in[2], bih, bhh, u->lengths, &hn, u->kind == K_LSTM ? &cn : NULL);
  if (u->outs & 1) parts[n++] = dl_t_reshape(tp, y, 1, (const int64_t[]){-1});
  if (u->outs & 2) parts[n++] = dl_t_reshape(tp, hn, 1, (const int64_t[]){-1});
  if ((u->outs & 4) && cn) parts[n++] = dl_t_reshape(tp, cn, 1, (const int64_t[]){-1});
  return n == 1 ? parts[0] : dl_t_concat(tp, n, parts, 0);
}

static void gradcheck_len(int kind, int bias, int h0, int outs, int h0_op, int strided, const int64_t *lengths);
/* gradcheck of kind with the options; strided: x, w_hh and h0 are
 * transposed views; lengths (B = 2, T = 4) or NULL. */
static void gradcheck_one(int kind, int bias, int h0, int outs, int h0_op, int strided) {
  gradcheck_len(kind, bias, h0, outs, h0_op, strided, NULL);
}
static void gradcheck_len(int kind, int bias, int h0, int outs, int h0_op, int strided, const int64_t *lengths) {
  const int64_t B = 2, T = 4, I = 3, H = 3, GH = kind_gates[kind] * H;
  dl_rng rng = dl_rng_make(500 + (uint64_t)(kind * 64 + bias * 32 + h0 * 16 + outs * 2 + h0_op + strided * 128));
  dl_tensor *own[7], views[7], *in[7];
  int64_t shapes[7][3] = {{B, T, I}, {GH, I, 0}, {GH, H, 0}, {GH, 0, 0}, {GH, 0, 0}, {B, H, 0}, {B, H, 0}};
  int nds[7] = {3, 2, 2, 1, 1, 2, 2}, k, n = 0;
  gc_rnn u;
  char what[160];
  for (k = 0; k < 7; k++) {
    own[k] = NULL;
    if ((k == 3 || k == 4) && !bias) continue;
    if ((k == 5 || k == 6) && !h0) continue;
    if (k == 6 && kind != K_LSTM) continue;
    if (strided && (k == 0 || k == 2 || k == 5)) { /* stored transposed, seen through a view */
      int64_t sh[3];
      int d;
      for (d = 0; d < nds[k]; d++) sh[d] = shapes[k][d];
      sh[nds[k] - 2] = shapes[k][nds[k] - 1];
      sh[nds[k] - 1] = shapes[k][nds[k] - 2];
      own[k] = mk(&ctx, DL_F64, nds[k], sh, &rng, 0.7);
      views[k] = dl_view_transpose(own[k], nds[k] - 2, nds[k] - 1);
      in[n] = &views[k];
    } else {
      own[k] = mk(&ctx, DL_F64, nds[k], shapes[k], &rng, 0.7);
      in[n] = own[k];
    }
    dl_requires_grad(in[n]);
    n++;
  }
  u.kind = kind;
  u.bias = bias;
  u.h0 = h0;
  u.outs = outs;
  u.h0_op = h0_op;
  u.lengths = lengths;
  snprintf(what, sizeof what, "%s bias %d h0 %d outs %d h0_op %d strided %d lengths %s", kind_names[kind], bias, h0,
           outs, h0_op, strided, lengths ? (lengths[0] == 1 ? "{1, 3}" : "{4, 2}") : "none");
  GRADCHECK(what, gc_fn, &u, n, in);
  for (k = 0; k < n; k++)
    if (in[k]->flags & DL_TENSOR_VIEW) dl_tensor_free(in[k]->grad);
  for (k = 0; k < 7; k++) dl_tensor_free(own[k]);
}

static void test_gradcheck(void) {
  int kind;
  for (kind = 0; kind < 5; kind++) {
    const int all = kind == K_LSTM ? 7 : 3;
    gradcheck_one(kind, 1, 1, all, 0, 0);
    gradcheck_one(kind, 0, 0, all, 0, 0);
    gradcheck_one(kind, 1, 0, all, 0, 0);
    gradcheck_one(kind, 0, 1, all, 0, 0);
    gradcheck_one(kind, 1, 1, 1, 0, 0); /* y alone */
    gradcheck_one(kind, 1, 1, 2, 0, 0); /* h_n alone */
    if (kind == K_LSTM) {
      gradcheck_one(kind, 1, 1, 4, 0, 0); /* c_n alone */
      gradcheck_one(kind, 1, 0, 4, 0, 0);
      gradcheck_one(kind, 1, 1, 6, 0, 0);
    }
    gradcheck_one(kind, 1, 1, all, 1, 0); /* h0 (c0) made by ops */
    gradcheck_one(kind, 1, 1, all, 0, 1); /* strided x, w_hh, h0 */
    { /* variable lengths: one row shorter than T, then one of length 1 */
      static const int64_t l42[2] = {4, 2}, l13[2] = {1, 3};
      gradcheck_len(kind, 1, 1, all, 0, 0, l42);
      gradcheck_len(kind, 0, 0, all, 0, 0, l13);
      gradcheck_len(kind, 1, 1, 2, 0, 1, l13); /* h_n alone, strided */
      if (kind == K_LSTM) gradcheck_len(kind, 1, 1, 4, 0, 0, l42); /* c_n alone */
    }
  }
  printf("  %d gradchecks, worst error %.3g\n", gc_runs, worst_gc);
}

/* ---- threads ----------------------------------------------------------------- */

/* outputs, gradients and tangents are bit-identical with 1 and 2 threads
 * (threshold 256: the kernels and the larger GEMMs use the team) */
static void test_threads(void) {
  const int64_t B = 24, T = 5, I = 32, H = 96;
  int kind;
  for (kind = 0; kind < 5; kind++) {
    const int64_t GH = kind_gates[kind] * H;
    dl_ctx *cs[2];
    dl_tensor *p[2][7], *y[2], *hn[2], *cn[2], *tv[7], *seed, *seedh;
    dl_tape tp[2];
    dl_rng src = dl_rng_make(700 + (uint64_t)kind);
    int t, k;
    cs[0] = &ctx1;
    cs[1] = &ctx2;
    seed = mk(&ctx, DL_F32, DL_SHAPE(B, T, H), &src, 1.0);
    seedh = mk(&ctx, DL_F32, DL_SHAPE(B, H), &src, 1.0);
    tv[0] = mk(&ctx, DL_F32, DL_SHAPE(B, T, I), &src, 1.0);
    tv[1] = mk(&ctx, DL_F32, DL_SHAPE(B, H), &src, 1.0);
    tv[2] = mk(&ctx, DL_F32, DL_SHAPE(B, H), &src, 1.0);
    tv[3] = mk(&ctx, DL_F32, DL_SHAPE(GH, I), &src, 0.1);
    tv[4] = mk(&ctx, DL_F32, DL_SHAPE(GH, H), &src, 0.1);
    tv[5] = mk(&ctx, DL_F32, DL_SHAPE(GH), &src, 0.1);
    tv[6] = mk(&ctx, DL_F32, DL_SHAPE(GH), &src, 0.1);
    for (t = 0; t < 2; t++) {
      dl_rng r = dl_rng_make(800 + (uint64_t)kind);
      p[t][0] = mk(cs[t], DL_F32, DL_SHAPE(B, T, I), &r, 1.0);
      p[t][1] = mk(cs[t], DL_F32, DL_SHAPE(B, H), &r, 0.5);
      p[t][2] = mk(cs[t], DL_F32, DL_SHAPE(B, H), &r, 0.5);
      p[t][3] = mk(cs[t], DL_F32, DL_SHAPE(GH, I), &r, 0.15);
      p[t][4] = mk(cs[t], DL_F32, DL_SHAPE(GH, H), &r, 0.15);
      p[t][5] = mk(cs[t], DL_F32, DL_SHAPE(GH), &r, 0.15);
      p[t][6] = mk(cs[t], DL_F32, DL_SHAPE(GH), &r, 0.15);
      for (k = 0; k < 7; k++) {
        dl_requires_grad(p[t][k]);
        dl_set_tangent(p[t][k], tv[k]);
      }
      dl_tape_init(&tp[t], cs[t], 0);
      cn[t] = NULL;
      y[t] = call(&tp[t], kind, p[t][0], p[t][1], p[t][2], p[t][3], p[t][4], p[t][5], p[t][6], &hn[t],
                  kind == K_LSTM ? &cn[t] : NULL);
      dl_backward(&tp[t], y[t], seed);
      dl_backward(&tp[t], hn[t], seedh);
      if (cn[t]) dl_backward(&tp[t], cn[t], seedh);
    }
    CHECK_MSG(same_bits(y[0], y[1]) && same_bits(hn[0], hn[1]), "%s forward", kind_names[kind]);
    CHECK_MSG(same_bits(y[0]->tangent, y[1]->tangent) && same_bits(hn[0]->tangent, hn[1]->tangent), "%s tangent",
              kind_names[kind]);
    if (kind == K_LSTM) CHECK(same_bits(cn[0], cn[1]) && same_bits(cn[0]->tangent, cn[1]->tangent));
    for (k = 0; k < 7; k++) {
      if (k == 2 && kind != K_LSTM) continue;
      CHECK_MSG(same_bits(p[0][k]->grad, p[1][k]->grad), "%s grad of input %d", kind_names[kind], k);
      CHECK(max_abs(p[0][k]->grad) > 0);
    }
    CHECK(max_abs(y[0]->tangent) > 0);
    for (t = 0; t < 2; t++) {
      dl_tape_free(&tp[t]);
      for (k = 0; k < 7; k++) dl_tensor_free(p[t][k]);
    }
    for (k = 0; k < 7; k++) dl_tensor_free(tv[k]);
    dl_tensor_free(seed);
    dl_tensor_free(seedh);
  }
}

/* ---- steady state: no allocation -------------------------------------------- */

static long count_allocs, count_frees;
static void *count_alloc(size_t n, void *user) { (void)user; count_allocs++; return malloc(n); }
static void count_free(void *p, void *user) { (void)user; if (p) count_frees++; free(p); }

static void test_steady_state_no_alloc(void) {
  dl_ctx cc;
  dl_ctx_desc d = {0};
  dl_tape tp;
  const int64_t B = 8, T = 6, I = 10, H = 16;
  dl_tensor *x, *wl[4], *wg[4], *h0;
  dl_rng rng = dl_rng_make(900);
  long before = 0;
  int step, k;
  d.panic = harness_panic;
  d.allocator.alloc = count_alloc;
  d.allocator.free = count_free;
  dl_ctx_init(&cc, &d);
  x = mk(&cc, DL_F32, DL_SHAPE(B, T, I), &rng, 1.0);
  h0 = mk(&cc, DL_F32, DL_SHAPE(B, H), &rng, 1.0);
  wl[0] = mk(&cc, DL_F32, DL_SHAPE(4 * H, I), &rng, 0.3);
  wl[1] = mk(&cc, DL_F32, DL_SHAPE(4 * H, H), &rng, 0.3);
  wl[2] = mk(&cc, DL_F32, DL_SHAPE(4 * H), &rng, 0.3);
  wl[3] = mk(&cc, DL_F32, DL_SHAPE(4 * H), &rng, 0.3);
  wg[0] = mk(&cc, DL_F32, DL_SHAPE(3 * H, H), &rng, 0.3);
  wg[1] = mk(&cc, DL_F32, DL_SHAPE(3 * H, H), &rng, 0.3);
  wg[2] = mk(&cc, DL_F32, DL_SHAPE(3 * H), &rng, 0.3);
  wg[3] = mk(&cc, DL_F32, DL_SHAPE(3 * H), &rng, 0.3);
  for (k = 0; k < 4; k++) {
    dl_requires_grad(wl[k]);
    dl_requires_grad(wg[k]);
  }
  dl_requires_grad(h0);
  CHECK(dl_tape_init(&tp, &cc, 0) == DL_OK);
  for (step = 0; step < 6; step++) {
    dl_tensor *y, *hn, *cn, *loss;
    if (step == 1) before = count_allocs;
    for (k = 0; k < 4; k++) {
      dl_zero_grad(wl[k]);
      dl_zero_grad(wg[k]);
    }
    dl_zero_grad(h0);
    y = dl_t_lstm(&tp, x, h0, NULL, wl[0], wl[1], wl[2], wl[3], &hn, &cn);
    y = dl_t_gru(&tp, y, hn, wg[0], wg[1], wg[2], wg[3], NULL);
    loss = dl_t_add(&tp, dl_t_mean_all(&tp, dl_t_square(&tp, y)), dl_t_mean_all(&tp, cn));
    dl_backward(&tp, loss, NULL);
    dl_tape_rewind(&tp);
  }
  CHECK_MSG(count_allocs == before, "%ld allocations in 5 steady-state steps", count_allocs - before);
  CHECK(max_abs(wl[1]->grad) > 0 && max_abs(wg[1]->grad) > 0 && max_abs(h0->grad) > 0);
  dl_tape_free(&tp);
  dl_gemm_release_cache();
  dl_tensor_free(x);
  dl_tensor_free(h0);
  for (k = 0; k < 4; k++) {
    dl_tensor_free(wl[k]);
    dl_tensor_free(wg[k]);
  }
  CHECK(count_allocs == count_frees);
}

/* ---- panics ------------------------------------------------------------------ */

static void test_panics(void) {
  dl_tape tp;
  dl_tensor *x = mk(&ctx, DL_F32, DL_SHAPE(2, 5, 3), NULL, 0), *x2 = mk(&ctx, DL_F32, DL_SHAPE(5, 3), NULL, 0);
  dl_tensor *x0 = mk(&ctx, DL_F32, DL_SHAPE(2, 0, 3), NULL, 0);
  dl_tensor *wih = mk(&ctx, DL_F32, DL_SHAPE(16, 3), NULL, 0), *whh = mk(&ctx, DL_F32, DL_SHAPE(16, 4), NULL, 0);
  dl_tensor *wih5 = mk(&ctx, DL_F32, DL_SHAPE(16, 5), NULL, 0), *whh3 = mk(&ctx, DL_F32, DL_SHAPE(12, 4), NULL, 0);
  dl_tensor *b16 = mk(&ctx, DL_F32, DL_SHAPE(16), NULL, 0), *b12 = mk(&ctx, DL_F32, DL_SHAPE(12), NULL, 0);
  dl_tensor *h0 = mk(&ctx, DL_F32, DL_SHAPE(2, 4), NULL, 0), *h0b = mk(&ctx, DL_F32, DL_SHAPE(3, 4), NULL, 0);
  dl_tensor *w64 = mk(&ctx, DL_F64, DL_SHAPE(16, 4), NULL, 0), *xi = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(2, 5, 3));
  dl_tensor *w43 = mk(&ctx, DL_F32, DL_SHAPE(4, 3), NULL, 0), *w44 = mk(&ctx, DL_F32, DL_SHAPE(4, 4), NULL, 0);
  dl_tensor *hn;
  dl_tape_init(&tp, &ctx, 0);
  EXPECT_PANIC(dl_t_lstm(&tp, x2, NULL, NULL, wih, whh, NULL, NULL, NULL, NULL), "dl_t_lstm", "f32[5, 3]",
               "f32[16, 3]", "f32[16, 4]", "[B, T, I]");
  EXPECT_PANIC(dl_t_lstm(&tp, x0, NULL, NULL, wih, whh, NULL, NULL, NULL, NULL), "dl_t_lstm", "f32[2, 0, 3]");
  EXPECT_PANIC(dl_t_lstm(&tp, x, NULL, NULL, wih5, whh, NULL, NULL, NULL, NULL), "dl_t_lstm", "f32[2, 5, 3]",
               "f32[16, 5]");
  EXPECT_PANIC(dl_t_gru(&tp, x, NULL, wih, whh, NULL, NULL, NULL), "dl_t_gru", "f32[16, 4]", "[3*H, H]");
  EXPECT_PANIC(dl_t_gru(&tp, x, NULL, b12, whh3, NULL, NULL, NULL), "dl_t_gru", "f32[12]", "f32[12, 4]");
  EXPECT_PANIC(dl_t_lstm(&tp, x, NULL, NULL, wih, whh, b12, NULL, NULL, NULL), "dl_t_lstm", "b_ih", "f32[12]",
               "[16]");
  EXPECT_PANIC(dl_t_lstm(&tp, x, NULL, NULL, wih, whh, b16, b12, NULL, NULL), "dl_t_lstm", "b_hh", "f32[12]");
  EXPECT_PANIC(dl_t_rnn(&tp, x, h0b, w43, w44, NULL, NULL, 1, &hn), "dl_t_rnn", "h0", "f32[3, 4]", "[2, 4]");
  EXPECT_PANIC(dl_t_lstm(&tp, x, h0, h0b, wih, whh, NULL, NULL, NULL, NULL), "dl_t_lstm", "c0", "f32[3, 4]", "[2, 4]");
  EXPECT_PANIC(dl_t_lstm(&tp, x, NULL, NULL, wih, w64, NULL, NULL, NULL, NULL), "dl_t_lstm", "dtype", "f64[16, 4]",
               "f32[2, 5, 3]");
  EXPECT_PANIC(dl_t_lstm(&tp, xi, NULL, NULL, wih, whh, NULL, NULL, NULL, NULL), "dl_t_lstm", "i64[2, 5, 3]",
               "f32 or f64");
  EXPECT_PANIC(dl_t_lstm(&tp, x, NULL, NULL, NULL, whh, NULL, NULL, NULL, NULL), "dl_t_lstm", "required");
  {
    static const int64_t l0[2] = {3, 0}, l6[2] = {6, 2};
    dl_rnn_args a0 = {.lengths = l0}, a6 = {.lengths = l6}, agru;
    memset(&agru, 0, sizeof agru);
    agru.gru_reset_before_linear = 1;
    EXPECT_PANIC(dl_t_lstm_ex(&tp, x, NULL, NULL, wih, whh, NULL, NULL, &a0, NULL, NULL), "dl_t_lstm_ex",
                 "lengths[1] = 0", "1..T = 5", "f32[2, 5, 3]");
    EXPECT_PANIC(dl_t_rnn_ex(&tp, x, NULL, w43, w44, NULL, NULL, 1, &a6, NULL), "dl_t_rnn_ex", "lengths[0] = 6");
    EXPECT_PANIC(dl_t_lstm_ex(&tp, x, NULL, NULL, wih, whh, NULL, NULL, &agru,
                              NULL, NULL),
                 "dl_t_lstm_ex", "gru_reset_before_linear 1", "GRU only");
  }
  dl_tape_free(&tp);
  dl_tensor_free(x); dl_tensor_free(x2); dl_tensor_free(x0); dl_tensor_free(wih); dl_tensor_free(whh);
  dl_tensor_free(wih5); dl_tensor_free(whh3); dl_tensor_free(b16); dl_tensor_free(b12); dl_tensor_free(h0);
  dl_tensor_free(h0b); dl_tensor_free(w64); dl_tensor_free(xi); dl_tensor_free(w43); dl_tensor_free(w44);
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
  fx_ok = fx2_load(&fx, "tests/fixtures/rnn.txt");
  RUN(test_fixtures);
  RUN(test_values_and_no_grad);
  RUN(test_partial_grads_and_tangents);
  RUN(test_lengths);
  RUN(test_stale_arena);
  RUN(test_gradcheck);
  RUN(test_threads);
  RUN(test_steady_state_no_alloc);
  RUN(test_panics);
  fx2_free(&fx);
  return harness_finish();
}
