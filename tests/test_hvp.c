/* dl-test-cxx */
/* tests/test_hvp.c - Hessian-vector products (dl_hvp, tape.h): forward over
 * reverse, checked with dl_hvpcheck (H v against central differences of the
 * gradient, f64, 1e-6) for every family that has a second-order rule:
 * every element-wise op of the list (from the nested-dual expression),
 * broadcasting and an input used twice, a user's one-line op, matmul
 * (shared and batched right side), linear (bias, a strided input), the
 * reductions (sum, mean, max, var, logsumexp), the shape ops, the losses
 * (cross-entropy with and without label smoothing, every reduction, nll; mse,
 * bce with logits, huber, smooth l1),
 * softmax and log_softmax along rows and columns, layer, RMS and batch norm,
 * convolution (1-d, 2-d with groups and dilation, 3-d) and pooling, a small CNN,
 * attention (fused scaled dot-product, self-attention with RoPE, multi-head);
 * a two-layer MLP end to end; PyTorch's double backward on three small
 * MLPs (tests/fixtures/hvp.txt) in f64 and f32. Then the bookkeeping: H v accumulates over
 * two calls like the gradient, dl_zero_grad clears it, the plain gradient
 * of dl_hvp equals dl_backward's bit for bit, and an op without a rule
 * panics naming itself.
 */
#include "dl.h"
#include "harness.h"
#include "fixtures2.h"

static dl_ctx ctx;

DL_DEFINE_OP1(test_softsign, dl_div(x0, dl_add(1, dl_abs(x0))))

enum {
  P_UNARY, P_UNARY_P, P_BINARY, P_BINARY_BCAST, P_SAME_TWICE, P_USER, P_MATMUL, P_MATMUL_BATCH, P_LINEAR,
  P_LINEAR_STRIDED, P_REDUCE, P_SHAPE, P_CE, P_MSE, P_SOFTMAX, P_NORM, P_MASKS, P_EMBED, P_CONV, P_CNN, P_ATTN, P_RNN, P_MANY, P_MLP
};
typedef struct prog {
  int kind, which; /* which: the op's index in its list, or a variant */
  const char *name;
} prog;

static dl_tensor *unary_op(dl_tape *tp, int which, dl_tensor *x) {
  int k = 0;
#define UN(name, expr)                                                                 \
  if (k++ == which) {                                                                  \
    if (!strcmp(#name, "log") || !strcmp(#name, "sqrt") || !strcmp(#name, "log1p"))     \
      x = dl_t_exp(tp, x); /* keep the argument in the domain */                     \
    return dl_t_##name(tp, x);                                                         \
  }
  DL_OPS_UNARY(UN)
#undef UN
  return NULL;
}
static dl_tensor *binary_op(dl_tape *tp, int which, dl_tensor *a, dl_tensor *b) {
  int k = 0;
#define BI(name, expr)                                                                 \
  if (k++ == which) {                                                                  \
    if (!strcmp(#name, "pow")) a = dl_t_exp(tp, a); /* a positive base */            \
    return dl_t_##name(tp, a, b);                                                      \
  }
  DL_OPS_BINARY(BI)
#undef BI
  return NULL;
}

static dl_tensor *run(dl_tape *tp, dl_tensor **in, void *user) {
  const prog *p = (const prog *)user;
  dl_tensor *x = in[0];
  switch (p->kind) {
    case P_UNARY: return unary_op(tp, p->which, x);
    case P_UNARY_P:
      switch (p->which) {
        case 0: return dl_t_leaky_relu(tp, x, 0.1);
        case 1: return dl_t_elu(tp, x, 1.2);
        case 2: return dl_t_pow_scalar(tp, dl_t_exp(tp, x), 2.5);
        case 3: return dl_t_mul(tp, dl_t_add_scalar(tp, x, 0.3), x);
        default: return dl_t_tanh(tp, dl_t_mul_scalar(tp, x, -1.7));
      }
    case P_BINARY: return binary_op(tp, p->which, x, in[1]);
    case P_BINARY_BCAST: return binary_op(tp, p->which, x, in[1]); /* [3, 4] with [4] */
    case P_SAME_TWICE: return dl_t_mul(tp, dl_t_sin(tp, x), dl_t_sin(tp, x)) /* distinct nodes */
                              ? dl_t_div(tp, dl_t_tanh(tp, x), dl_t_add_scalar(tp, dl_t_mul(tp, x, x), 1.0))
                              : NULL;
    case P_USER: return DL_T_MAP1(tp, test_softsign, dl_t_mul(tp, x, in[1]));
    case P_MATMUL: return dl_t_tanh(tp, dl_t_matmul(tp, x, in[1]));
    case P_MATMUL_BATCH: return dl_t_sigmoid(tp, dl_t_matmul(tp, dl_t_tanh(tp, x), in[1]));
    case P_LINEAR: return dl_t_tanh(tp, dl_t_linear(tp, x, in[1], in[2]));
    case P_LINEAR_STRIDED: {
      dl_tensor *xt = dl_t_transpose(tp, x, 0, 1); /* x stored [in, N] */
      return dl_t_gelu(tp, dl_t_linear(tp, xt, in[1], in[2]));
    }
    case P_REDUCE: {
      const int ax1[1] = {1};
      dl_tensor *sq = dl_t_mul(tp, x, x);
      if (p->which == 0) return dl_t_exp(tp, dl_t_sum(tp, sq, 1, ax1, 0));
      if (p->which == 1) return dl_t_log(tp, dl_t_add_scalar(tp, dl_t_mean(tp, sq, 1, ax1, 1), 1.0));
      if (p->which == 2) return dl_t_square(tp, dl_t_max(tp, dl_t_tanh(tp, x), 1, ax1, 0));
      if (p->which == 3) return dl_t_sin(tp, dl_t_var(tp, dl_t_tanh(tp, x), 1, ax1, 1.0, 1));
      {
        const int ax0[1] = {0};
        return dl_t_exp(tp, dl_t_mul_scalar(tp, dl_t_logsumexp(tp, dl_t_sin(tp, x), 1, ax0, 0), 0.5));
      }
    }
    case P_SHAPE: {
      dl_tensor *t = dl_t_tanh(tp, x); /* [3, 4] */
      dl_tensor *parts[2];
      int64_t ix[3] = {2, 0, 2}, sh2[2] = {4, 3}, pads[2] = {1, 2};
      int perm[2] = {1, 0};
      static dl_tensor idx; /* (static: the tape keeps pointers to an op's inputs until the walk) */
      int64_t three = 3;
      dl_tensor_wrap(&idx, &ctx, DL_I64, 1, &three, ix);
      parts[0] = dl_t_reshape(tp, t, 2, sh2);                              /* [4, 3] */
      parts[1] = dl_t_permute(tp, dl_t_sin(tp, x), perm);                 /* [4, 3] */
      t = dl_t_concat(tp, 2, parts, 0);                                    /* [8, 3] */
      t = dl_t_index_select(tp, t, 1, &idx);                               /* [8, 3] */
      t = dl_t_slice(tp, t, 0, 1, 7, 2);                                   /* [3, 3] */
      t = dl_t_pad(tp, dl_t_mul(tp, t, t), 1, pads, 0.5);                  /* [3, 6] */
      parts[0] = t;
      parts[1] = dl_t_exp(tp, t);
      return dl_t_stack(tp, 2, parts, 0);
    }
    case P_CE: {
      static const int64_t lab[5] = {2, 0, 3, 3, 1};
      static const int64_t five = 5;
      static dl_tensor labels;
      dl_tensor_wrap(&labels, &ctx, DL_I64, 1, &five, (void *)lab);
      if (p->which == 0) return dl_t_cross_entropy(tp, dl_t_tanh(tp, x), &labels, 0.0, DL_REDUCE_MEAN);
      if (p->which == 1) return dl_t_cross_entropy(tp, x, &labels, 0.2, DL_REDUCE_SUM);
      if (p->which == 3) return dl_t_nll(tp, dl_t_log_softmax(tp, dl_t_tanh(tp, x), 1), &labels, DL_REDUCE_MEAN);
      return dl_t_cross_entropy(tp, dl_t_mul(tp, x, x), &labels, 0.1, DL_REDUCE_NONE);
    }
    case P_MSE:
      switch (p->which) {
        case 0: return dl_t_mse(tp, dl_t_tanh(tp, x), dl_t_sin(tp, in[1]), DL_REDUCE_MEAN);
        case 1: return dl_t_bce_with_logits(tp, dl_t_mul(tp, x, in[1]), dl_t_sigmoid(tp, in[1]), DL_REDUCE_SUM);
        case 2: return dl_t_huber(tp, dl_t_tanh(tp, x), dl_t_sin(tp, in[1]), 0.8, DL_REDUCE_NONE);
        default: return dl_t_smooth_l1(tp, dl_t_mul(tp, x, x), in[1], 1.5, DL_REDUCE_MEAN);
      }
    case P_NORM: { /* x [3, 4, 5]; layer norm over the last 1 or 2 dims, rms norm; w, b [5] (or [4, 5]) */
      dl_tensor *y;
      if (p->which == 0) y = dl_t_layer_norm(tp, x, 1, in[1], in[2], 1e-5);
      else if (p->which == 1) y = dl_t_layer_norm(tp, dl_t_transpose(tp, x, 0, 1), 2, in[1], NULL, 1e-5);
      else if (p->which == 2) y = dl_t_rms_norm(tp, x, 1, in[1], 1e-6);
      else if (p->which == 3) y = dl_t_layer_norm(tp, x, 1, NULL, NULL, 1e-5);
      else if (p->which == 4) y = dl_t_batch_norm(tp, x, in[1], in[2], NULL, NULL, 1, 0.1, 1e-5); /* C = 4 */
      else { /* evaluation: running statistics (fixed) */
        static double rm[4] = {0.1, -0.3, 0.2, 0.0}, rv[4] = {0.5, 1.5, 0.9, 2.0};
        static const int64_t four = 4;
        static dl_tensor m, v;
        dl_tensor_wrap(&m, &ctx, DL_F64, 1, &four, rm);
        dl_tensor_wrap(&v, &ctx, DL_F64, 1, &four, rv);
        y = dl_t_batch_norm(tp, x, in[1], in[2], &m, &v, 0, 0.1, 1e-5);
      }
      return dl_t_mul(tp, dl_t_tanh(tp, y), y);
    }
    case P_MASKS: { /* clamp, where and dropout (a seeded mask) between smooth ops */
      dl_tensor *c = dl_t_clamp(tp, dl_t_sin(tp, x), -0.6, 0.7), *cond = dl_tape_out(tp, "mask", x->dtype, 2, x->shape);
      dl_tensor *wh;
      DL_ASSIGN(cond, dl_gt(in[1], 0.0)); /* a mask, no history */
      wh = dl_t_where(tp, cond, dl_t_exp(tp, x), dl_t_mul(tp, in[1], x));
      dl_rng r = dl_rng_make(3);
      return dl_t_mul(tp, dl_t_dropout(tp, dl_t_mul(tp, c, wh), 0.3, &r, 1), c);
    }
    case P_EMBED: { /* a repeated index; the rows, then a nonlinearity mixing them */
      static const int64_t ix[6] = {2, 0, 2, 4, 1, 2};
      static const int64_t six = 6;
      static dl_tensor idx;
      dl_tensor_wrap(&idx, &ctx, DL_I64, 1, &six, (void *)ix);
      return dl_t_tanh(tp, dl_t_matmul(tp, dl_t_embedding(tp, x, &idx), in[1]));
    }
    case P_CONV: { /* in = x, w, b */
      if (p->which == 0) { /* conv2d stride 2, padding 1, then max pool */
        dl_conv2d_args a = {.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1};
        dl_pool2d_args pa = {.kernel_h = 2, .kernel_w = 2};
        return dl_t_max_pool2d(tp, dl_t_tanh(tp, dl_t_conv2d(tp, x, in[1], in[2], &a)), &pa);
      }
      if (p->which == 1) { /* conv2d, 2 groups, dilation 2, then average pool */
        dl_conv2d_args a = {.pad_h = 2, .pad_w = 1, .dil_h = 2, .dil_w = 2, .groups = 2};
        dl_pool2d_args pa = {.kernel_h = 2, .kernel_w = 3, .stride_h = 1, .stride_w = 2};
        return dl_t_avg_pool2d(tp, dl_t_sin(tp, dl_t_conv2d(tp, x, in[1], NULL, &a)), &pa);
      }
      if (p->which == 2) { /* conv1d */
        dl_conv1d_args a = {.stride = 2, .pad = 1};
        return dl_t_silu(tp, dl_t_conv1d(tp, x, in[1], in[2], &a));
      }
      { /* conv3d, then a 3-d max pool */
        dl_conv3d_args a = {.pad_d = 1, .pad_h = 1};
        dl_pool3d_args pa = {.kernel_d = 2, .kernel_h = 2, .kernel_w = 2};
        return dl_t_max_pool3d(tp, dl_t_tanh(tp, dl_t_conv3d(tp, x, in[1], in[2], &a)), &pa);
      }
    }
    case P_CNN: { /* x [2, 1, 6, 6] -> conv 3x3 (3 channels) -> gelu -> max pool 2 -> linear 27 -> 4, cross-entropy */
      static const int64_t lab[2] = {3, 1};
      static const int64_t two = 2;
      static dl_tensor labels;
      dl_tensor *h;
      dl_conv2d_args a = {.pad_h = 0};
      dl_pool2d_args pa = {.kernel_h = 2, .kernel_w = 2};
      dl_tensor_wrap(&labels, &ctx, DL_I64, 1, &two, (void *)lab);
      h = dl_t_max_pool2d(tp, dl_t_gelu(tp, dl_t_conv2d(tp, x, in[1], in[2], &a)), &pa); /* [2, 3, 2, 2] */
      h = dl_t_flatten(tp, h, 1);
      return dl_t_cross_entropy(tp, dl_t_linear(tp, h, in[3], in[4]), &labels, 0.0, DL_REDUCE_MEAN);
    }
    case P_ATTN:
      if (p->which == 0) /* q [2, 3, 4], k [2, 5, 4], v [2, 5, 3], causal (the queries the last 3) */
        return dl_t_tanh(tp, dl_t_scaled_dot_product_attention(tp, x, in[1], in[2], 1, 0.0));
      if (p->which == 1) /* self-attention: q = k = v, rotary positions */
        return dl_t_sin(tp, dl_t_scaled_dot_product_attention(tp, dl_t_rope(tp, x, 0, 10000.0),
                                                               dl_t_rope(tp, x, 0, 10000.0), x, 0, 0.7));
      /* torch's MultiheadAttention, 2 heads, causal: x [2, 3, 4], in_proj [12, 4] + [12], out_proj [4, 4] + [4] */
      return dl_t_tanh(tp, dl_t_multi_head_attention(tp, x, x, x, in[1], in[2], in[3], in[4], 2, NULL, 1));
    case P_RNN: { /* x [3, 4, 2]; in = x, w_ih [G*3, 2], w_hh [G*3, 3], b [G*3], h0 [3, 3], c0 [3, 3]; which: kind + 5 lengths */
      static const int64_t len[3] = {4, 1, 3};
      dl_rnn_args a;
      dl_tensor *y, *hn = NULL, *cn = NULL, *l;
      const int kind = p->which % 5, lens = p->which >= 5;
      memset(&a, 0, sizeof a);
      a.lengths = lens ? len : NULL;
      a.gru_reset_before_linear = kind == 4;
      if (kind <= 1) y = dl_t_rnn_ex(tp, x, in[4], in[1], in[2], in[3], NULL, kind == 0, &a, &hn);
      else if (kind == 2) y = dl_t_lstm_ex(tp, x, in[4], in[5], in[1], in[2], NULL, in[3], &a, &hn, &cn);
      else y = dl_t_gru_ex(tp, x, in[4], in[1], in[2], in[3], NULL, &a, &hn);
      l = dl_t_add(tp, dl_t_sum_all(tp, dl_t_mul(tp, y, dl_t_sin(tp, y))), dl_t_sum_all(tp, dl_t_mul(tp, hn, hn)));
      if (cn) l = dl_t_add(tp, l, dl_t_sum_all(tp, dl_t_tanh(tp, cn)));
      return l;
    }
    case P_MANY: { /* an op of more than 64 inputs: 70 rows stacked, each x_i^2 */
      dl_tensor *rows[70];
      int i;
      for (i = 0; i < 70; i++) rows[i] = dl_t_square(tp, dl_t_slice(tp, x, 0, i, i + 1, 1));
      {
        dl_tensor *st = dl_t_stack(tp, 70, rows, 0);
        return dl_t_mul(tp, st, dl_t_sin(tp, st));
      }
    }
    case P_SOFTMAX: { /* softmax / log_softmax along the last axis (rows) or the first (strided) */
      dl_tensor *y = p->which < 2 ? dl_t_softmax(tp, dl_t_mul_scalar(tp, x, 1.3), p->which ? 0 : 1)
                                  : dl_t_log_softmax(tp, x, p->which == 2 ? 1 : 0);
      return dl_t_mul(tp, dl_t_sin(tp, y), y);
    }
    default: { /* P_MLP: x [6, 5] -> 7 (gelu) -> 3, cross-entropy; in = x, w1, b1, w2, b2 */
      static const int64_t lab[6] = {0, 2, 1, 1, 0, 2};
      static const int64_t six = 6;
      static dl_tensor labels;
      dl_tensor_wrap(&labels, &ctx, DL_I64, 1, &six, (void *)lab);
      return dl_t_cross_entropy(tp, dl_t_linear(tp, dl_t_gelu(tp, dl_t_linear(tp, x, in[1], in[2])), in[3], in[4]),
                                &labels, 0.0, DL_REDUCE_MEAN);
    }
  }
}

static dl_tensor *mk(int nd, const int64_t *shape, dl_rng *r, double sd) {
  dl_tensor *t = dl_tensor_make(&ctx, DL_F64, nd, shape);
  dl_tensor_rand_normal(t, r, 0, sd);
  return t;
}
static double worst;
static int nchecks;
static void check(const prog *p, int nin, dl_tensor **in) {
  dl_gradcheck_result r;
  int ok, k;
  for (k = 0; k < nin; k++) dl_requires_grad(in[k]);
  ok = dl_hvpcheck(&ctx, run, (void *)p, nin, in, 1e-5, 1e-6, &r);
  CHECK_MSG(ok && r.checked > 0, "%s: H v off by %.3g at input %d element %lld (%.12g vs differences %.12g)", p->name,
            r.grad_err, r.input, (long long)r.index, r.analytic, r.numeric);
  if (r.grad_err > worst) worst = r.grad_err;
  nchecks++;
}
static void run_case(int kind, int which, const char *name, int nin, const int64_t (*shapes)[3], const int *nds,
                     double sd) {
  prog p;
  dl_tensor *in[8];
  dl_rng rng = dl_rng_make(1000 + (uint64_t)(kind * 40 + which));
  int k;
  p.kind = kind;
  p.which = which;
  p.name = name;
  for (k = 0; k < nin; k++) in[k] = mk(nds[k], shapes[k], &rng, sd);
  check(&p, nin, in);
  for (k = 0; k < nin; k++) dl_tensor_free(in[k]);
}

/* run_case with shapes of up to 4 or 5 dimensions */
static void run_case_n(int kind, int which, const char *name, int nin, const int64_t *shapes, int stride,
                       const int *nds, double sd) {
  prog p;
  dl_tensor *in[8];
  dl_rng rng = dl_rng_make(2000 + (uint64_t)(kind * 40 + which));
  int k;
  p.kind = kind;
  p.which = which;
  p.name = name;
  for (k = 0; k < nin; k++) in[k] = mk(nds[k], shapes + k * stride, &rng, sd);
  check(&p, nin, in);
  for (k = 0; k < nin; k++) dl_tensor_free(in[k]);
}
#define run_case4(kind, which, name, nin, shapes, nds, sd) run_case_n(kind, which, name, nin, &shapes[0][0], 4, nds, sd)
#define run_case5(kind, which, name, nin, shapes, nds, sd) run_case_n(kind, which, name, nin, &shapes[0][0], 5, nds, sd)

static void test_elementwise(void) {
  static const int64_t s34[2][3] = {{3, 4, 0}, {3, 4, 0}}, sb[2][3] = {{3, 4, 0}, {4, 0, 0}};
  static const int nd2[2] = {2, 2}, ndb[2] = {2, 1};
  const char *un[] = {
#define NM(name, expr) #name,
      DL_OPS_UNARY(NM)
  };
  const char *bi[] = {DL_OPS_BINARY(NM)};
#undef NM
  int i;
  for (i = 0; i < (int)(sizeof un / sizeof *un); i++) run_case(P_UNARY, i, un[i], 1, s34, nd2, 1.0);
  for (i = 0; i < 5; i++) run_case(P_UNARY_P, i, "unary with a parameter", 1, s34, nd2, 1.0);
  for (i = 0; i < (int)(sizeof bi / sizeof *bi); i++) {
    run_case(P_BINARY, i, bi[i], 2, s34, nd2, 1.0);
    run_case(P_BINARY_BCAST, i, bi[i], 2, sb, ndb, 1.0); /* the [4] side summed back */
  }
  run_case(P_SAME_TWICE, 0, "x * x, sin x twice", 1, s34, nd2, 1.0);
  run_case(P_USER, 0, "DL_DEFINE_OP1 user op", 2, s34, nd2, 1.0);
}
static void test_matmul_linear(void) {
  static const int64_t mm[2][3] = {{2, 3, 4}, {4, 5, 0}}, mb[2][3] = {{2, 3, 4}, {2, 4, 2}};
  static const int64_t li[3][3] = {{5, 4, 0}, {3, 4, 0}, {3, 0, 0}}, ls[3][3] = {{4, 5, 0}, {3, 4, 0}, {3, 0, 0}};
  static const int nmm[2] = {3, 2}, nmb[2] = {3, 3}, nli[3] = {2, 2, 1};
  run_case(P_MATMUL, 0, "matmul, shared right side", 2, mm, nmm, 0.7);
  run_case(P_MATMUL_BATCH, 0, "matmul, batched", 2, mb, nmb, 0.7);
  run_case(P_LINEAR, 0, "linear", 3, li, nli, 0.7);
  run_case(P_LINEAR_STRIDED, 0, "linear, strided x", 3, ls, nli, 0.7);
}
static void test_reductions_shapes(void) {
  static const int64_t s34[1][3] = {{3, 4, 0}};
  static const int nd[1] = {2};
  run_case(P_REDUCE, 0, "sum", 1, s34, nd, 0.6);
  run_case(P_REDUCE, 1, "mean keepdim", 1, s34, nd, 0.6);
  run_case(P_REDUCE, 2, "max", 1, s34, nd, 1.0);
  run_case(P_REDUCE, 3, "var keepdim, correction 1", 1, s34, nd, 1.0);
  run_case(P_REDUCE, 4, "logsumexp over the first axis", 1, s34, nd, 1.0);
  run_case(P_SHAPE, 0, "reshape, permute, concat, index_select, slice, pad, stack", 1, s34, nd, 1.0);
}
static void test_losses(void) {
  static const int64_t s54[2][3] = {{5, 4, 0}, {5, 4, 0}};
  static const int nd[2] = {2, 2};
  run_case(P_CE, 0, "cross-entropy mean", 1, s54, nd, 1.0);
  run_case(P_CE, 1, "cross-entropy sum, label smoothing", 1, s54, nd, 1.0);
  run_case(P_CE, 2, "cross-entropy none, label smoothing", 1, s54, nd, 1.0);
  run_case(P_CE, 3, "nll of log_softmax", 1, s54, nd, 1.0);
  run_case(P_MSE, 0, "mse", 2, s54, nd, 1.0);
  run_case(P_MSE, 1, "bce_with_logits, both sides differentiated", 2, s54, nd, 1.0);
  run_case(P_MSE, 2, "huber (both branches), no reduction", 2, s54, nd, 1.0);
  run_case(P_MSE, 3, "smooth_l1 (both branches)", 2, s54, nd, 1.0);
  {
    static const int64_t ln[3][3] = {{3, 4, 5}, {5, 0, 0}, {5, 0, 0}}, ln2[2][3] = {{3, 4, 5}, {3, 5, 0}};
    static const int ndl[3] = {3, 1, 1}, ndl2[2] = {3, 2};
    run_case(P_NORM, 0, "layer_norm, weight and bias", 3, ln, ndl, 1.0);
    run_case(P_NORM, 1, "layer_norm over 2 dims of a transposed x, weight", 2, ln2, ndl2, 1.0);
    run_case(P_NORM, 2, "rms_norm, weight", 2, ln, ndl, 1.0);
    run_case(P_NORM, 3, "layer_norm, no affine", 1, ln, ndl, 1.0);
    {
      static const int64_t bn[3][3] = {{3, 4, 5}, {4, 0, 0}, {4, 0, 0}};
      run_case(P_NORM, 4, "batch_norm, training", 3, bn, ndl, 1.0);
      run_case(P_NORM, 5, "batch_norm, evaluation", 3, bn, ndl, 1.0);
    }
  }
  run_case(P_MASKS, 0, "clamp, where, dropout", 2, s54, nd, 1.0);
  {
    static const int64_t em[2][3] = {{5, 4, 0}, {4, 3, 0}};
    run_case(P_EMBED, 0, "embedding (a leaf: H v dense beside the row-sparse gradient)", 2, em, nd, 1.0);
  }
  run_case(P_SOFTMAX, 0, "softmax, rows", 1, s54, nd, 1.0);
  run_case(P_SOFTMAX, 1, "softmax, columns", 1, s54, nd, 1.0);
  run_case(P_SOFTMAX, 2, "log_softmax, rows", 1, s54, nd, 1.0);
  run_case(P_SOFTMAX, 3, "log_softmax, columns", 1, s54, nd, 1.0);
}
static void test_conv_pool(void) {
  static const int64_t c2[3][4] = {{2, 2, 5, 4}, {3, 2, 3, 2}, {3, 0, 0, 0}};
  static const int nd2[3] = {4, 4, 1};
  static const int64_t g2[2][4] = {{2, 4, 7, 8}, {4, 2, 2, 2}};
  static const int ng2[2] = {4, 4};
  static const int64_t c1[3][3] = {{2, 3, 9}, {4, 3, 3}, {4, 0, 0}};
  static const int nd1[3] = {3, 3, 1};
  static const int64_t c3[3][5] = {{1, 2, 3, 4, 4}, {2, 2, 2, 3, 2}, {2, 0, 0, 0, 0}};
  static const int nd3[3] = {5, 5, 1};
  static const int64_t cnn[5][4] = {{2, 1, 6, 6}, {3, 1, 3, 3}, {3, 0, 0, 0}, {4, 12, 0, 0}, {4, 0, 0, 0}};
  static const int ndc[5] = {4, 4, 1, 2, 1};
  run_case4(P_CONV, 0, "conv2d stride, padding, bias; max_pool2d", 3, c2, nd2, 0.8);
  run_case4(P_CONV, 1, "conv2d groups, dilation; avg_pool2d", 2, g2, ng2, 0.8);
  run_case(P_CONV, 2, "conv1d", 3, c1, nd1, 0.8);
  run_case5(P_CONV, 3, "conv3d; max_pool3d", 3, c3, nd3, 0.8);
  run_case4(P_CNN, 0, "CNN: conv, gelu, max pool, linear, cross-entropy", 5, cnn, ndc, 0.8);
}
static void test_attention(void) {
  static const int64_t sd[3][3] = {{2, 3, 4}, {2, 5, 4}, {2, 5, 3}}, self[1][3] = {{2, 5, 4}};
  static const int64_t mha[5][3] = {{2, 3, 4}, {12, 4, 0}, {12, 0, 0}, {4, 4, 0}, {4, 0, 0}};
  static const int nd3[3] = {3, 3, 3}, ndm[5] = {3, 2, 1, 2, 1};
  run_case(P_ATTN, 0, "scaled dot-product attention, causal, Tq < Tk", 3, sd, nd3, 0.8);
  run_case(P_ATTN, 1, "self-attention q = k = v with rotary positions", 1, self, nd3, 0.8);
  run_case(P_ATTN, 2, "multi-head attention, 2 heads, causal", 5, mha, ndm, 0.6);
}
static void test_rnn(void) {
  static const int gates[5] = {1, 1, 4, 3, 3};
  static const char *names[10] = {"rnn tanh", "rnn relu", "lstm (h0, c0, c_n)", "gru", "gru, reset before the product",
                                  "rnn tanh, lengths", "rnn relu, lengths", "lstm, lengths", "gru, lengths",
                                  "gru reset before, lengths"};
  int w;
  for (w = 0; w < 10; w++) {
    const int64_t G = gates[w % 5];
    const int64_t sh[6][3] = {{3, 4, 2}, {G * 3, 2, 0}, {G * 3, 3, 0}, {G * 3, 0, 0}, {3, 3, 0}, {3, 3, 0}};
    static const int nd[6] = {3, 2, 2, 1, 2, 2};
    run_case(P_RNN, w, names[w], w % 5 == 2 ? 6 : 5, sh, nd, 0.7);
  }
}
/* more than 64 inputs to one node (a stack of 70, an RNN of 70 steps, whose
 * second-order rule stacks its steps); a packed model's H v cleared by
 * dl_model_zero_grad */
static void test_many_inputs_and_models(void) {
  static const int64_t many[1][3] = {{70, 2, 0}};
  static const int nd[1] = {2};
  static const int64_t rn[5][3] = {{2, 70, 2}, {3, 2, 0}, {3, 3, 0}, {3, 0, 0}, {2, 3, 0}};
  static const int ndr[5] = {3, 2, 2, 1, 2};
  const dl_model_desc md = {DL_F64, 4};
  const dl_linear_desc l45 = {4, 5, 0}, l52 = {5, 2, 0};
  dl_model *m = dl_model_make(&ctx, &md);
  dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 4)), *v[4];
  dl_rng rng = dl_rng_make(8);
  dl_tape tp;
  int i, k, it;
  run_case(P_MANY, 0, "stack of 70 inputs", 1, many, nd, 1.0);
  run_case(P_RNN, 0, "rnn tanh, 70 steps", 5, rn, ndr, 0.5);
  dl_linear_make(m, NULL, NULL, &l45);
  dl_act_make(m, NULL, NULL, DL_ACT_TANH, 0);
  dl_linear_make(m, NULL, NULL, &l52);
  CHECK(dl_model_pack(m) == DL_OK && m->nparams == 4);
  dl_tensor_rand_normal(x, &rng, 0, 1);
  for (k = 0; k < 4; k++) {
    v[k] = dl_tensor_make(&ctx, DL_F64, m->params[k]->t.ndim, m->params[k]->t.shape);
    dl_tensor_rand_normal(v[k], &rng, 0, 1);
    dl_set_tangent(&m->params[k]->t, v[k]);
  }
  dl_tape_init(&tp, &ctx, 0);
  {
    double first = 0;
    for (it = 0; it < 3; it++) { /* zeroed each time: the same H v each time */
      dl_model_zero_grad(m);
      dl_hvp(&tp, dl_t_sum_all(&tp, dl_t_square(&tp, dl_model_forward(m, &tp, x))), NULL);
      dl_tape_rewind(&tp);
      if (it == 0) first = dl_f64(m->params[0]->t.grad->tangent)[0];
      else CHECK_MSG(dl_f64(m->params[0]->t.grad->tangent)[0] == first, "step %d: H v %.17g, first %.17g", it,
                     dl_f64(m->params[0]->t.grad->tangent)[0], first);
    }
    CHECK(first != 0);
  }
  dl_tape_free(&tp);
  for (k = 0; k < 4; k++) {
    dl_set_tangent(&m->params[k]->t, NULL);
    dl_tensor_free(v[k]);
  }
  dl_model_free(m); /* frees the H v too (ASan's leak check) */
  dl_tensor_free(x);
  (void)i;
}
static void test_mlp(void) {
  static const int64_t sh[5][3] = {{6, 5, 0}, {7, 5, 0}, {7, 0, 0}, {3, 7, 0}, {3, 0, 0}};
  static const int nd[5] = {2, 2, 1, 2, 1};
  run_case(P_MLP, 0, "MLP 5-7-3, gelu, cross-entropy", 5, sh, nd, 0.8);
  printf("  %d H v checks, worst error %.3g\n", nchecks, worst);
}

/* PyTorch's double backward on small MLPs and a CNN (tools/fixtures_hvp.py): the
 * loss, the gradient and H v of the input and every parameter, f64 to
 * 1e-10 element-wise, f32 to 1e-5 norm-wise (H v in f32 is the f32 forward
 * and backward with each element-wise op's second-order term in double). */
static void test_torch_fixtures(void) {
  static const char *keys[5] = {"x", "w1", "b1", "w2", "b2"};
  fx2_set fx;
  double worst64 = 0, worst32 = 0;
  int c, k, ncase = 0;
  if (!fx2_load(&fx, "tests/fixtures/hvp.txt")) SKIP("%s", fx.err);
  for (c = 0; c < fx.n; c++) {
    const fx2_case *fc = &fx.cases[c];
    const dl_dtype dt = fc->f64 ? DL_F64 : DL_F32;
    const int act = (int)fx2_param(fc, "act", -1), cnn = (int)fx2_param(fc, "cnn", 0);
    dl_tensor *in[5], *v[5], *labels = fx2_make(fc, "labels", DL_I64), *h, *logits, *loss;
    dl_tape tp;
    for (k = 0; k < 5; k++) {
      char key[16];
      in[k] = fx2_make(fc, keys[k], dt);
      snprintf(key, sizeof key, "v_%s", keys[k]);
      v[k] = fx2_make(fc, key, dt);
      in[k]->ctx = &ctx;
      dl_requires_grad(in[k]);
      dl_set_tangent(in[k], v[k]);
    }
    dl_tape_init(&tp, &ctx, 0);
    if (cnn) { /* conv 3x3, gelu, max pool 2, flatten */
      dl_conv2d_args a = {.groups = 1};
      dl_pool2d_args pa = {.kernel_h = 2, .kernel_w = 2};
      h = dl_t_flatten(&tp, dl_t_max_pool2d(&tp, dl_t_gelu(&tp, dl_t_conv2d(&tp, in[0], in[1], in[2], &a)), &pa), 1);
    } else {
      h = dl_t_linear(&tp, in[0], in[1], in[2]);
      h = act == 0 ? dl_t_gelu(&tp, h) : act == 1 ? dl_t_tanh(&tp, h) : dl_t_silu(&tp, h);
    }
    logits = dl_t_linear(&tp, h, in[3], in[4]);
    loss = dl_t_cross_entropy(&tp, logits, labels, 0.0, DL_REDUCE_MEAN);
    dl_hvp(&tp, loss, NULL);
    for (k = 0; k < 11; k++) {
      char key[16];
      const dl_tensor *got = k == 0 ? loss : k <= 5 ? in[k - 1]->grad : in[k - 6]->grad->tangent;
      double e;
      if (k == 0) snprintf(key, sizeof key, "loss");
      else snprintf(key, sizeof key, "%s_%s", k <= 5 ? "g" : "hv", keys[(k - 1) % 5]);
      e = fc->f64 ? fx2_err(got, fx2_get(fc, key)) : fx2_err_norm(got, fx2_get(fc, key));
      CHECK_MSG(e <= (fc->f64 ? 1e-10 : 1e-5), "%s %s %s: error %.3g", fc->name, fc->f64 ? "f64" : "f32", key, e);
      if (fc->f64) worst64 = fmax(worst64, e);
      else worst32 = fmax(worst32, e);
    }
    ncase++;
    dl_tape_free(&tp);
    for (k = 0; k < 5; k++) {
      dl_set_tangent(in[k], NULL);
      dl_tensor_free(in[k]);
      dl_tensor_free(v[k]);
    }
    dl_tensor_free(labels);
  }
  CHECK(ncase == 8 && fx2_find(&fx, "cnn_gelu_maxpool", 1) != NULL);
  printf("  %d PyTorch double-backward cases: worst error f64 %.3g, f32 %.3g (norm-wise)\n", ncase, worst64, worst32);
  fx2_free(&fx);
}

/* a user's custom op (y = 2 x) with no second-order rule */
static void twice_fwd(dl_tensor *out, dl_tensor *const *in, int nin, void *user) {
  (void)nin;
  (void)user;
  DL_ASSIGN(out, dl_mul(in[0], 2.0));
}
static void twice_bwd(dl_tape *tp, const dl_tensor *gy, const dl_tensor *out, dl_tensor *const *in, int nin,
                      void *user) {
  dl_tensor *g = dl_tape_grad(tp, in[0]);
  (void)out;
  (void)nin;
  (void)user;
  if (g) DL_ASSIGN(g, dl_add(g, dl_mul(gy, 2.0)));
}
static void twice_jvp(dl_tensor *tout, const dl_tensor *out, dl_tensor *const *in, dl_tensor *const *tin, int nin,
                      void *user) {
  (void)out;
  (void)in;
  (void)nin;
  (void)user;
  if (tin[0]) DL_ASSIGN(tout, dl_mul(tin[0], 2.0));
}
static const dl_custom_op twice_op = {"twice (a custom op)", twice_fwd, twice_bwd, twice_jvp};

/* H v accumulates like the gradient; dl_zero_grad clears it; dl_hvp's
 * gradient is dl_backward's; an op without a rule panics naming it. */
static void test_bookkeeping(void) {
  static const int64_t sh[5][3] = {{6, 5, 0}, {7, 5, 0}, {7, 0, 0}, {3, 7, 0}, {3, 0, 0}};
  dl_rng rng = dl_rng_make(5);
  dl_tensor *in[5], *v[5], *g1[5], *h1[5];
  prog p = {P_MLP, 0, "mlp"};
  dl_tape tp;
  int k;
  int64_t i;
  for (k = 0; k < 5; k++) {
    in[k] = mk(k == 2 || k == 4 ? 1 : 2, sh[k], &rng, 0.8);
    v[k] = mk(k == 2 || k == 4 ? 1 : 2, sh[k], &rng, 1.0);
    dl_requires_grad(in[k]);
  }
  dl_tape_init(&tp, &ctx, 0);
  for (k = 0; k < 5; k++) dl_set_tangent(in[k], v[k]);
  dl_hvp(&tp, run(&tp, in, &p), NULL);
  dl_tape_rewind(&tp);
  for (k = 0; k < 5; k++) {
    g1[k] = dl_tensor_make(&ctx, DL_F64, in[k]->ndim, in[k]->shape);
    h1[k] = dl_tensor_make(&ctx, DL_F64, in[k]->ndim, in[k]->shape);
    dl_tensor_copy(g1[k], in[k]->grad);
    dl_tensor_copy(h1[k], in[k]->grad->tangent);
  }
  dl_hvp(&tp, run(&tp, in, &p), NULL); /* a second call adds the same again */
  dl_tape_rewind(&tp);
  for (k = 0; k < 5; k++)
    for (i = 0; i < in[k]->numel; i++) {
      /* (a GEMM that adds into the gradient sums in its own order: not bit for bit) */
      CHECK_NEAR(dl_f64(in[k]->grad)[i], 2 * dl_f64(g1[k])[i], 1e-12 * (1 + fabs(dl_f64(g1[k])[i])));
      CHECK_NEAR(dl_f64(in[k]->grad->tangent)[i], 2 * dl_f64(h1[k])[i], 1e-12 * (1 + fabs(dl_f64(h1[k])[i])));
      CHECK(fabs(dl_f64(h1[k])[i]) > 0 || k == 0);
    }
  for (k = 0; k < 5; k++) { /* dl_backward with the same tangents: the same gradient, bit for bit */
    dl_zero_grad(in[k]);
    for (i = 0; i < in[k]->numel; i++) CHECK(dl_f64(in[k]->grad->tangent)[i] == 0);
  }
  dl_backward(&tp, run(&tp, in, &p), NULL);
  dl_tape_rewind(&tp);
  for (k = 0; k < 5; k++)
    for (i = 0; i < in[k]->numel; i++) {
      CHECK(dl_f64(in[k]->grad)[i] == dl_f64(g1[k])[i]);
      CHECK(dl_f64(in[k]->grad->tangent)[i] == 0); /* dl_backward leaves H v alone */
    }
  { /* an op without a second-order rule */
    dl_tensor *x = mk(2, sh[0], &rng, 1.0);
    dl_requires_grad(x);
    dl_set_tangent(x, v[0]);
    EXPECT_PANIC(dl_hvp(&tp, dl_t_sum_all(&tp, dl_t_custom(&tp, &twice_op, NULL, 1, &x, x->ndim, x->shape)), NULL),
                 "dl_hvp", "twice (a custom op)", "no second-order rule");
    dl_tape_rewind(&tp);
    dl_set_tangent(x, NULL);
    dl_tensor_free(x);
  }
  dl_tape_free(&tp);
  for (k = 0; k < 5; k++) {
    dl_set_tangent(in[k], NULL);
    dl_tensor_free(in[k]);
    dl_tensor_free(v[k]);
    dl_tensor_free(g1[k]);
    dl_tensor_free(h1[k]);
  }
}

int main(void) {
  dl_ctx_desc d = {0};
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  RUN(test_elementwise);
  RUN(test_matmul_linear);
  RUN(test_reductions_shapes);
  RUN(test_losses);
  RUN(test_conv_pool);
  RUN(test_attention);
  RUN(test_rnn);
  RUN(test_many_inputs_and_models);
  RUN(test_mlp);
  RUN(test_torch_fixtures);
  RUN(test_bookkeeping);
  return harness_finish();
}
