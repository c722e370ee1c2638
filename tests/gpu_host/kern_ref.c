/* tests/gpu_host/kern_ref.c - the CPU side of tests/gpu_host/kern_host.cu:
 * runs dl.h's own ops (ops/reduce.h, ops/loss.h, ops/sparse.h, ops.h's
 * dl_sum_to_into, optim.h) on plain arrays and returns what they compute
 * (forward values, forward-mode tangents, gradients from dl_backward with a
 * given upstream gradient, updated parameters and state), for the host test
 * to compare with the kernel bodies of src_gpu/reduce.cu, loss.cu,
 * sparse.cu and optim.cu. Where the GPU branch of
 * a CPU op turns its arguments into a kernel's (optimizer scalars, dropout
 * threshold), the function also returns those, computed as that branch
 * computes them. Built as C11 (gcc or clang), linked into the nvcc-built
 * test; see the top of kern_host.cu for the commands.
 *
 * Arrays are contiguous, of f32 (dt 0) or f64 (dt 1) elements; an output
 * pointer may be NULL (not wanted). A gradient argument is in/out: it holds
 * the gradient's starting value (the leaf's .grad before dl_backward, which
 * adds to it) and receives the result. Each call makes and frees its
 * tensors. The context keeps denormals (no flush to zero), as the device
 * does by default. */
#include "host_check.h" /* the functions' declarations, dl.h, ref_make, ref_out */

static void kref_init(void) {
  dl_ctx_desc d;
  memset(&d, 0, sizeof d);
  d.keep_denormals = 1;
  ref_init_desc(&d);
}
static size_t ref_es(int dt) { return dt ? sizeof(double) : sizeof(float); }
/* A leaf needing a gradient that starts at g0 (NULL: zeros). */
static void ref_grad_from(dl_tensor *t, const void *g0) {
  dl_requires_grad(t);
  if (g0) memcpy(t->grad->data, g0, (size_t)t->numel * dl_dtype_size(t->dtype));
}
static dl_tensor *ref_labels(int64_t N, const int64_t *lab) {
  dl_tensor *t = dl_tensor_make(&ref_ctx, DL_I64, 1, &N);
  memcpy(t->data, lab, sizeof(int64_t) * (size_t)N);
  return t;
}

/* >>reductions, softmax -------------------------------------------------------- */

/* gx [n] += the rows of g [rows, n] (dl_sum_to_into: a bias gradient). */
void kref_sum_to(int dt, int64_t rows, int64_t n, const void *g, void *gx) {
  int64_t sg[2], sx[1];
  dl_tensor *G, *GX;
  sg[0] = rows; sg[1] = n; sx[0] = n;
  kref_init();
  G = ref_make(dt, 2, sg, g);
  GX = ref_make(dt, 1, sx, gx);
  dl_sum_to_into(GX, G);
  ref_out(gx, GX);
  dl_tensor_free(G);
  dl_tensor_free(GX);
}

/* Reduction `kind` of x (contiguous, shape[ndim]) over the dimensions in
 * mask (keepdim 0): 0 dl_t_sum, 1 dl_t_mean, 2 dl_t_max, 3 dl_t_min,
 * 4 dl_t_var (correction), 5 dl_t_logsumexp. y, ty (tangent for tx) [M];
 * gx (x's shape) += the gradient for upstream gy [M]. */
void kref_reduce(int dt, int kind, int ndim, const int64_t *shape, unsigned mask, double correction, const void *x,
                 const void *tx, const void *gy, void *y, void *ty, void *gx) {
  int axes[DL_MAX_DIMS], na = 0, d;
  dl_tensor *X, *TX, *G, *Y = NULL;
  dl_tape tp;
  kref_init();
  for (d = 0; d < ndim; d++)
    if ((mask >> d) & 1u) axes[na++] = d;
  X = ref_make(dt, ndim, shape, x);
  TX = ref_make(dt, ndim, shape, tx);
  ref_grad_from(X, gx);
  dl_set_tangent(X, TX);
  dl_tape_init(&tp, &ref_ctx, 0);
  switch (kind) {
    case 0: Y = dl_t_sum(&tp, X, na, axes, 0); break;
    case 1: Y = dl_t_mean(&tp, X, na, axes, 0); break;
    case 2: Y = dl_t_max(&tp, X, na, axes, 0); break;
    case 3: Y = dl_t_min(&tp, X, na, axes, 0); break;
    case 4: Y = dl_t_var(&tp, X, na, axes, correction, 0); break;
    default: Y = dl_t_logsumexp(&tp, X, na, axes, 0); break;
  }
  dl_set_tangent(X, NULL);
  G = ref_make(dt, Y->ndim, Y->shape, gy);
  dl_backward(&tp, Y, G);
  ref_out(y, Y);
  ref_out(ty, Y->tangent);
  ref_out(gx, X->grad);
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(TX);
  dl_tensor_free(G);
}

/* softmax (logsm 0) or log_softmax (1) of x [outer, n, inner] along n: y,
 * its tangent ty for tx, gx += the gradient for upstream gy. */
void kref_softmax(int dt, int logsm, int64_t outer, int64_t n, int64_t inner, const void *x, const void *tx,
                  const void *gy, void *y, void *ty, void *gx) {
  int64_t s[3];
  dl_tensor *X, *TX, *G, *Y;
  dl_tape tp;
  s[0] = outer; s[1] = n; s[2] = inner;
  kref_init();
  X = ref_make(dt, 3, s, x);
  TX = ref_make(dt, 3, s, tx);
  ref_grad_from(X, gx);
  dl_set_tangent(X, TX);
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = logsm ? dl_t_log_softmax(&tp, X, 1) : dl_t_softmax(&tp, X, 1);
  dl_set_tangent(X, NULL);
  G = ref_make(dt, 3, s, gy);
  dl_backward(&tp, Y, G);
  ref_out(y, Y);
  ref_out(ty, Y->tangent);
  ref_out(gx, X->grad);
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(TX);
  dl_tensor_free(G);
}

/* >>losses --------------------------------------------------------------------- */

/* Element-wise loss of a, b [n]: kind 0 dl_t_mse, 1 dl_t_bce_with_logits,
 * 2 dl_t_huber (delta p), 3 dl_t_smooth_l1 (beta p; 0 is L1); reduction r
 * (dl_reduction: 0 mean, 1 sum, 2 none). y, ty: [n] for none, else one
 * element; ta, tb: tangents of a, b (NULL: none; ty only when one is
 * given); ga, gb (NULL: that input needs no gradient) += the gradients for
 * upstream gy ([n] or one element). */
void kref_loss_ew(int dt, int kind, double p, int r, int64_t n, const void *a, const void *b, const void *ta,
                  const void *tb, const void *gy, void *y, void *ty, void *ga, void *gb) {
  int64_t s[1];
  dl_tensor *A, *B, *TA = NULL, *TB = NULL, *G, *Y;
  dl_tape tp;
  const dl_reduction red = (dl_reduction)r;
  s[0] = n;
  kref_init();
  A = ref_make(dt, 1, s, a);
  B = ref_make(dt, 1, s, b);
  if (ga) ref_grad_from(A, ga);
  if (gb) ref_grad_from(B, gb);
  if (ta) { TA = ref_make(dt, 1, s, ta); dl_set_tangent(A, TA); }
  if (tb) { TB = ref_make(dt, 1, s, tb); dl_set_tangent(B, TB); }
  dl_tape_init(&tp, &ref_ctx, 0);
  switch (kind) {
    case 0: Y = dl_t_mse(&tp, A, B, red); break;
    case 1: Y = dl_t_bce_with_logits(&tp, A, B, red); break;
    case 2: Y = dl_t_huber(&tp, A, B, p, red); break;
    default: Y = dl_t_smooth_l1(&tp, A, B, p, red); break;
  }
  dl_set_tangent(A, NULL);
  dl_set_tangent(B, NULL);
  ref_out(y, Y);
  ref_out(ty, Y->tangent);
  if (ga || gb) {
    G = ref_make(dt, Y->ndim, Y->shape, gy);
    dl_backward(&tp, Y, G);
    dl_tensor_free(G);
    if (ga) ref_out(ga, A->grad);
    if (gb) ref_out(gb, B->grad);
  }
  dl_tape_free(&tp);
  dl_tensor_free(A);
  dl_tensor_free(B);
  if (TA) dl_tensor_free(TA);
  if (TB) dl_tensor_free(TB);
}

/* dl_t_cross_entropy of logits x [N, C] at lab [N], label smoothing eps,
 * reduction r: y, ty ([N] or one element), prob [N, C] (the softmax the
 * node keeps for backward), gx += the gradient for upstream gy. */
void kref_ce(int dt, int64_t N, int64_t C, const void *x, const int64_t *lab, double eps, int r, const void *tx,
             const void *gy, void *prob, void *y, void *ty, void *gx) {
  int64_t s[2];
  dl_tensor *X, *TX, *L, *G, *Y;
  dl_tape tp;
  s[0] = N; s[1] = C;
  kref_init();
  X = ref_make(dt, 2, s, x);
  TX = ref_make(dt, 2, s, tx);
  L = ref_labels(N, lab);
  ref_grad_from(X, gx);
  dl_set_tangent(X, TX);
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = dl_t_cross_entropy(&tp, X, L, eps, (dl_reduction)r);
  dl_set_tangent(X, NULL);
  ref_out(y, Y);
  ref_out(ty, Y->tangent);
  ref_out(prob, ((const dl_node *)Y->node)->saved[0]);
  G = ref_make(dt, Y->ndim, Y->shape, gy);
  dl_backward(&tp, Y, G);
  ref_out(gx, X->grad);
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(TX);
  dl_tensor_free(L);
  dl_tensor_free(G);
}

/* dl_t_nll of log-probabilities x [N, C] at lab [N], reduction r: y, ty.
 * transposed 0: x, tx are [N, C] contiguous, and gx += the gradient for
 * upstream gy; 1: x, tx are stored [C, N] and the op gets their transposed
 * views (strides 1, N); no gradient then. */
void kref_nll(int dt, int64_t N, int64_t C, int transposed, const void *x, const int64_t *lab, int r, const void *tx,
              const void *gy, void *y, void *ty, void *gx) {
  int64_t s[2];
  dl_tensor *X, *TX, *L, *Y, xv, tv, *in;
  dl_tape tp;
  s[0] = transposed ? C : N;
  s[1] = transposed ? N : C;
  kref_init();
  X = ref_make(dt, 2, s, x);
  TX = ref_make(dt, 2, s, tx);
  L = ref_labels(N, lab);
  dl_tape_init(&tp, &ref_ctx, 0);
  if (transposed) {
    xv = dl_view_transpose(X, 0, 1);
    tv = dl_view_transpose(TX, 0, 1);
    in = &xv;
    dl_set_tangent(in, &tv);
  } else {
    in = X;
    ref_grad_from(X, gx);
    dl_set_tangent(X, TX);
  }
  Y = dl_t_nll(&tp, in, L, (dl_reduction)r);
  dl_set_tangent(in, NULL);
  ref_out(y, Y);
  ref_out(ty, Y->tangent);
  if (!transposed) {
    dl_tensor *G = ref_make(dt, Y->ndim, Y->shape, gy);
    dl_backward(&tp, Y, G);
    ref_out(gx, X->grad);
    dl_tensor_free(G);
  }
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(TX);
  dl_tensor_free(L);
}

/* >>embedding, dropout --------------------------------------------------------- */

/* dl_t_embedding of weight W [V, D] at idx [n]: y [n, D] and the tangent ty
 * for W's tangent. layout 0: w, tw are W [V, D]; 1: they are [V, D + 3] and
 * W is the view of their first D columns (strides D + 3, 1); 2: they are
 * [D, V] and W is their transposed view (strides 1, V). */
void kref_embedding(int dt, int64_t V, int64_t D, int layout, const void *w, const void *tw, const int64_t *idx,
                    int64_t n, void *y, void *ty) {
  int64_t s[2];
  dl_tensor *W, *TW, *I, wv, tv, *win, *Y;
  dl_tape tp;
  s[0] = layout == 2 ? D : V;
  s[1] = layout == 0 ? D : layout == 1 ? D + 3 : V;
  kref_init();
  W = ref_make(dt, 2, s, w);
  TW = ref_make(dt, 2, s, tw);
  I = ref_labels(n, idx);
  if (layout == 0) {
    win = W;
    dl_set_tangent(W, TW);
  } else {
    wv = layout == 1 ? dl_view_slice(W, 1, 0, D, 1) : dl_view_transpose(W, 0, 1);
    tv = layout == 1 ? dl_view_slice(TW, 1, 0, D, 1) : dl_view_transpose(TW, 0, 1);
    win = &wv;
    dl_set_tangent(win, &tv);
  }
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = dl_t_embedding(&tp, win, I);
  dl_set_tangent(win, NULL);
  ref_out(y, Y);
  ref_out(ty, Y->tangent);
  dl_tape_free(&tp);
  dl_tensor_free(W);
  dl_tensor_free(TW);
  dl_tensor_free(I);
}

/* The row-sparse gradient of a leaf weight [V, D] after two backward
 * passes: embedding at idx1 [n1] with upstream gy1 [n1, D], then at idx2
 * with gy2 (no zeroing between: the second adds to the first's rows).
 * rows [nnz]: the touched rows in first-touch order, values [nnz, D] their
 * sums (the sgrad's slots); returns nnz. dense [V, D] (in: a base)
 * += those rows (dl_sgrad_add_to). */
int64_t kref_embedding_sparse(int dt, int64_t V, int64_t D, const int64_t *idx1, int64_t n1, const void *gy1,
                              const int64_t *idx2, int64_t n2, const void *gy2, int64_t *rows, void *values,
                              void *dense) {
  int64_t s[2], nnz;
  dl_tensor *W, *I, *G, *Y, *DN;
  dl_sgrad *sg;
  dl_tape tp;
  int pass;
  s[0] = V; s[1] = D;
  kref_init();
  W = ref_make(dt, 2, s, NULL);
  dl_tensor_fill(W, 0.5);
  dl_requires_grad(W);
  for (pass = 0; pass < 2; pass++) {
    const int64_t n = pass ? n2 : n1;
    I = ref_labels(n, pass ? idx2 : idx1);
    dl_tape_init(&tp, &ref_ctx, 0);
    Y = dl_t_embedding(&tp, W, I);
    G = ref_make(dt, Y->ndim, Y->shape, pass ? gy2 : gy1);
    dl_backward(&tp, Y, G);
    dl_tape_free(&tp);
    dl_tensor_free(I);
    dl_tensor_free(G);
  }
  sg = (dl_sgrad *)W->sgrad;
  nnz = sg ? sg->nnz : 0;
  if (nnz) {
    memcpy(rows, sg->rows, sizeof(int64_t) * (size_t)nnz);
    memcpy(values, sg->values, ref_es(dt) * (size_t)(nnz * D));
    DN = ref_make(dt, 2, s, dense);
    dl_sgrad_add_to(sg, DN);
    ref_out(dense, DN);
    dl_tensor_free(DN);
  }
  dl_tensor_free(W);
  return nnz;
}

/* The dense gradient gw [V, D] (from zero) of an embedding weight that is
 * an op's output (W * 1) at idx [n], upstream gy [n, D]. */
void kref_embedding_dense(int dt, int64_t V, int64_t D, const int64_t *idx, int64_t n, const void *gy, void *gw) {
  int64_t s[2];
  dl_tensor *W, *W1, *I, *G, *Y;
  dl_tape tp;
  s[0] = V; s[1] = D;
  kref_init();
  W = ref_make(dt, 2, s, NULL);
  dl_tensor_fill(W, 0.5);
  dl_requires_grad(W);
  I = ref_labels(n, idx);
  dl_tape_init(&tp, &ref_ctx, 0);
  W1 = dl_t_mul_scalar(&tp, W, 1.0);
  dl_keep_grad(W1);
  Y = dl_t_embedding(&tp, W1, I);
  G = ref_make(dt, Y->ndim, Y->shape, gy);
  dl_backward(&tp, Y, G);
  ref_out(gw, W1->grad);
  dl_tape_free(&tp);
  dl_tensor_free(W);
  dl_tensor_free(I);
  dl_tensor_free(G);
}

/* Training dropout (probability p) of x [n] with the rng of `seed` after
 * `skip` draws: the mask the CPU drew (the node's, one byte per element),
 * y, ty (tangent for tx), gx += the gradient for upstream gy. key, base,
 * thr, scale: dlg_dropout's arguments, as sparse.h's GPU branch computes
 * them from the same rng and p. */
void kref_dropout(int dt, int64_t n, double p, uint64_t seed, uint64_t skip, const void *x, const void *tx,
                  const void *gy, unsigned char *mask, void *y, void *ty, void *gx, uint64_t *key, uint64_t *base,
                  uint64_t *thr, double *scale) {
  int64_t s[1];
  dl_tensor *X, *TX, *G, *Y;
  dl_tape tp;
  dl_rng rng = dl_rng_make(seed);
  s[0] = n;
  rng.counter = skip;
  *key = rng.key;
  *base = rng.counter;
  *thr = (uint64_t)ceil(p * 9007199254740992.0);
  *scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  kref_init();
  X = ref_make(dt, 1, s, x);
  TX = ref_make(dt, 1, s, tx);
  ref_grad_from(X, gx);
  dl_set_tangent(X, TX);
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = dl_t_dropout(&tp, X, p, &rng, 1);
  dl_set_tangent(X, NULL);
  ref_out(y, Y);
  ref_out(ty, Y->tangent);
  memcpy(mask, ((const dl_node *)Y->node)->user, (size_t)n);
  G = ref_make(dt, 1, s, gy);
  dl_backward(&tp, Y, G);
  ref_out(gx, X->grad);
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(TX);
  dl_tensor_free(G);
}

/* >>optimizers, clipping, regularisation --------------------------------------- */

/* The configurations from hp[] (opt: 0 SGD, 1 Adam, 2 RMSprop, 3 Adagrad, 4 Lion):
 *   SGD      lr, momentum, dampening, weight_decay, nesterov, maximize
 *   Adam     lr, beta1, beta2, eps, weight_decay, amsgrad, decoupled, maximize
 *   RMSprop  lr, alpha, eps, weight_decay, momentum, centered, maximize
 *   Adagrad  lr, lr_decay, weight_decay, eps, maximize
 *   Lion     lr, beta1, beta2, weight_decay
 * and the scalars optim.h's GPU branch (dl__X_gpu) passes to dlg_X_update
 * for cfg c at `step`, in the order of those arguments, into k[]:
 *   SGD      sg, wd, momentum, damp1, lr, first
 *   Adam     sg, wd, b1, b1c, b2, b2c, decay, step_size, bc2_sqrt, eps
 *   RMSprop  sg, wd, alpha, alpha1, eps, momentum, lr
 *   Adagrad  sg, wd, clr, eps
 *   Lion     b1, b1c, b2, b2c, lr, decay */
typedef struct ref_cfgs {
  dl_sgd_cfg sgd;
  dl_adam_cfg adam;
  dl_rmsprop_cfg rms;
  dl_adagrad_cfg ada;
  dl_lion_cfg lion;
} ref_cfgs;
static void ref_cfg(int opt, const double *hp, ref_cfgs *c) {
  memset(c, 0, sizeof *c);
  switch (opt) {
    case 0:
      c->sgd.lr = hp[0]; c->sgd.momentum = hp[1]; c->sgd.dampening = hp[2]; c->sgd.weight_decay = hp[3];
      c->sgd.nesterov = (int)hp[4]; c->sgd.maximize = (int)hp[5];
      break;
    case 1:
      c->adam.lr = hp[0]; c->adam.beta1 = hp[1]; c->adam.beta2 = hp[2]; c->adam.eps = hp[3];
      c->adam.weight_decay = hp[4]; c->adam.amsgrad = (int)hp[5]; c->adam.decoupled = (int)hp[6];
      c->adam.maximize = (int)hp[7];
      break;
    case 2:
      c->rms.lr = hp[0]; c->rms.alpha = hp[1]; c->rms.eps = hp[2]; c->rms.weight_decay = hp[3];
      c->rms.momentum = hp[4]; c->rms.centered = (int)hp[5]; c->rms.maximize = (int)hp[6];
      break;
    case 3:
      c->ada.lr = hp[0]; c->ada.lr_decay = hp[1]; c->ada.weight_decay = hp[2]; c->ada.eps = hp[3];
      c->ada.maximize = (int)hp[4];
      break;
    default:
      c->lion.lr = hp[0]; c->lion.beta1 = hp[1]; c->lion.beta2 = hp[2]; c->lion.weight_decay = hp[3];
      break;
  }
}
/* The kernel's scalars for cfg c (as adjusted for the step, e.g. SparseAdam's eps). */
static void ref_kargs(int opt, const ref_cfgs *c, int64_t step, double *k) {
  switch (opt) {
    case 0: /* dl__sgd_gpu */
      k[0] = c->sgd.maximize ? -1.0 : 1.0; k[1] = c->sgd.weight_decay; k[2] = c->sgd.momentum;
      k[3] = 1 - c->sgd.dampening; k[4] = c->sgd.lr; k[5] = step == 1;
      break;
    case 1: { /* dl__adam_gpu */
      const double b1 = c->adam.beta1, b2 = c->adam.beta2;
      k[0] = c->adam.maximize ? -1.0 : 1.0; k[1] = c->adam.decoupled ? 0.0 : c->adam.weight_decay;
      k[2] = b1; k[3] = 1 - b1; k[4] = b2; k[5] = 1 - b2;
      k[6] = c->adam.decoupled ? 1 - c->adam.lr * c->adam.weight_decay : 1.0;
      k[7] = c->adam.lr / (1 - pow(b1, (double)step)); k[8] = sqrt(1 - pow(b2, (double)step)); k[9] = c->adam.eps;
      break;
    }
    case 2: /* dl__rmsprop_gpu */
      k[0] = c->rms.maximize ? -1.0 : 1.0; k[1] = c->rms.weight_decay; k[2] = c->rms.alpha; k[3] = 1 - c->rms.alpha;
      k[4] = c->rms.eps; k[5] = c->rms.momentum; k[6] = c->rms.lr;
      break;
    case 3: /* dl__adagrad_gpu */
      k[0] = c->ada.maximize ? -1.0 : 1.0; k[1] = c->ada.weight_decay;
      k[2] = c->ada.lr / (1 + (double)(step - 1) * c->ada.lr_decay); k[3] = c->ada.eps;
      break;
    default: /* dl__lion_gpu */
      k[0] = c->lion.beta1; k[1] = 1 - c->lion.beta1; k[2] = c->lion.beta2; k[3] = 1 - c->lion.beta2;
      k[4] = c->lion.lr; k[5] = 1 - c->lion.lr * c->lion.weight_decay;
      break;
  }
}

/* One dense update at `step` of p [n] by gradient g [n] through the CPU's
 * dl_X_update, state (in/out, [n] each; NULL when the cfg uses none):
 * SGD s0 momentum buffer; Adam s0 m, s1 v, s2 vmax; RMSprop s0 square_avg,
 * s1 grad_avg, s2 momentum buffer; Adagrad s0 sum; Lion s0 m. kargs: see
 * ref_kargs. */
void kref_optim(int dt, int opt, const double *hp, int64_t step, int64_t n, void *p, const void *g, void *s0,
                void *s1, void *s2, double *kargs) {
  int64_t s[1];
  dl_tensor *P, *G, *S0 = NULL, *S1 = NULL, *S2 = NULL;
  ref_cfgs c;
  s[0] = n;
  kref_init();
  ref_cfg(opt, hp, &c);
  P = ref_make(dt, 1, s, p);
  G = ref_make(dt, 1, s, g);
  if (s0) S0 = ref_make(dt, 1, s, s0);
  if (s1) S1 = ref_make(dt, 1, s, s1);
  if (s2) S2 = ref_make(dt, 1, s, s2);
  switch (opt) {
    case 0: dl_sgd_update(P, G, S0, step, &c.sgd); break;
    case 1: dl_adam_update(P, G, S0, S1, S2, step, &c.adam); break;
    case 2: dl_rmsprop_update(P, G, S0, S1, S2, step, &c.rms); break;
    case 3: dl_adagrad_update(P, G, S0, step, &c.ada); break;
    default: dl_lion_update(P, G, S0, step, &c.lion); break;
  }
  ref_kargs(opt, &c, step, kargs);
  ref_out(p, P);
  if (S0) { ref_out(s0, S0); dl_tensor_free(S0); }
  if (S1) { ref_out(s1, S1); dl_tensor_free(S1); }
  if (S2) { ref_out(s2, S2); dl_tensor_free(S2); }
  dl_tensor_free(P);
  dl_tensor_free(G);
}

/* One LAMB step on the CPU (dl_lamb_update) of p, m, v [n] with gradient g:
 * hp = lr, beta1, beta2, eps, weight_decay, max_trust, bias_correction;
 * kargs: the ten scalars dlg_lamb_update is given. */
void kref_lamb(int dt, const double *hp, int64_t step, int64_t n, void *p, const void *g, void *m, void *v,
               double *kargs) {
  int64_t s[1];
  dl_tensor *P, *G, *M, *V;
  dl_lamb_cfg c = dl_lamb_defaults(hp[0]);
  c.beta1 = hp[1]; c.beta2 = hp[2]; c.eps = hp[3]; c.weight_decay = hp[4]; c.max_trust = hp[5];
  c.bias_correction = (int)hp[6];
  s[0] = n;
  kref_init();
  P = ref_make(dt, 1, s, p);
  G = ref_make(dt, 1, s, g);
  M = ref_make(dt, 1, s, m);
  V = ref_make(dt, 1, s, v);
  dl_lamb_update(P, G, M, V, step, &c);
  dl__lamb_scalars(&c, step, kargs);
  ref_out(p, P);
  ref_out(m, M);
  ref_out(v, V);
  dl_tensor_free(P);
  dl_tensor_free(G);
  dl_tensor_free(M);
  dl_tensor_free(V);
}

/* A row-sparse step as dl_optim_step takes it on the CPU: for each touched
 * row rows[j] of p [V, w] (j < k, each row once), the optimizer's
 * per-parameter update (dl__optim_update_X with sparse = 1: SparseAdam's
 * eps) on the row views of p and the state ([V, w] each, as in kref_optim)
 * with row j of g [k, w] as the gradient. The optimizer's lr and the
 * parameter's multipliers are 1 (the cfg's own values apply). kargs: the
 * scalars its GPU branch passes for the whole step. */
void kref_optim_sparse(int dt, int opt, const double *hp, int64_t step, int64_t V, int64_t w, const int64_t *rows,
                       int64_t k, void *p, const void *g, void *s0, void *s1, void *s2, double *kargs) {
  int64_t s[2], sg[2], j;
  dl_tensor *P, *G, *S[3] = {NULL, NULL, NULL};
  void *sv[3];
  dl_optim o;
  dl_param pr;
  ref_cfgs c;
  int q, ns = 0, order[3];
  s[0] = V; s[1] = w; sg[0] = k; sg[1] = w;
  sv[0] = s0; sv[1] = s1; sv[2] = s2;
  kref_init();
  ref_cfg(opt, hp, &c);
  memset(&o, 0, sizeof o);
  memset(&pr, 0, sizeof pr);
  pr.lr_mult = 1;
  pr.wd_mult = 1;
  switch (opt) {
    case 0: o.cfg.sgd = c.sgd; o.lr = c.sgd.lr; break;
    case 1: o.cfg.adam = c.adam; o.lr = c.adam.lr; break;
    case 2: o.cfg.rmsprop = c.rms; o.lr = c.rms.lr; break;
    case 3: o.cfg.adagrad = c.ada; o.lr = c.ada.lr; break;
    default: o.cfg.lion = c.lion; o.lr = c.lion.lr; break;
  }
  /* the optimizer's state order: RMSprop keeps square_avg, momentum buffer, grad_avg */
  if (opt == 2) {
    order[ns++] = 0;
    if (c.rms.momentum > 0) order[ns++] = 2;
    if (c.rms.centered) order[ns++] = 1;
  } else {
    for (q = 0; q < 3; q++)
      if (sv[q]) order[ns++] = q;
  }
  o.nstate = ns;
  P = ref_make(dt, 2, s, p);
  G = ref_make(dt, 2, sg, g);
  for (q = 0; q < 3; q++)
    if (sv[q]) S[q] = ref_make(dt, 2, s, sv[q]);
  for (j = 0; j < k; j++) {
    dl_tensor pv = dl__row(P, rows[j], w), gv = dl__row(G, j, w), st[DL_OPTIM_MAX_STATE];
    for (q = 0; q < ns; q++) st[q] = dl__row(S[order[q]], rows[j], w);
    switch (opt) {
      case 0: dl__optim_update_sgd(&o, &pr, &pv, &gv, st, step, 1); break;
      case 1: dl__optim_update_adam(&o, &pr, &pv, &gv, st, step, 1); break;
      case 2: dl__optim_update_rmsprop(&o, &pr, &pv, &gv, st, step, 1); break;
      case 3: dl__optim_update_adagrad(&o, &pr, &pv, &gv, st, step, 1); break;
      default: dl__optim_update_lion(&o, &pr, &pv, &gv, st, step, 1); break;
    }
  }
  /* the GPU branch's scalars: dl__optim_update_adam adjusts eps before either path */
  if (opt == 1) c.adam.eps /= sqrt(1 - pow(c.adam.beta2, (double)step));
  ref_kargs(opt, &c, step, kargs);
  ref_out(p, P);
  for (q = 0; q < 3; q++)
    if (S[q]) {
      ref_out(sv[q], S[q]);
      dl_tensor_free(S[q]);
    }
  dl_tensor_free(P);
  dl_tensor_free(G);
}

/* x[i] clamped to [-v, v] (dl__clamp_buf). */
void kref_clamp(int dt, void *x, int64_t n, double v) {
  kref_init();
  dl__clamp_buf(&ref_ctx, x, n, dt ? DL_F64 : DL_F32, v);
}
/* sum of x[i]^2 in double (dl__sumsq). */
double kref_sumsq(int dt, const void *x, int64_t n) {
  kref_init();
  return dl__sumsq(&ref_ctx, x, n, dt ? DL_F64 : DL_F32);
}
/* x[i] *= f (dl__scale). */
void kref_scale(int dt, void *x, int64_t n, double f) {
  kref_init();
  dl__scale(&ref_ctx, x, n, dt ? DL_F64 : DL_F32, f);
}

/* dl_regularize (l1, l2) on a model of Embedding(V, D, sparse) and
 * Linear(in, out), every parameter with wd_mult 1: p0 [V, D], p1 [out, in],
 * p2 [out] the values; g1, g2 (in/out) the Linear's dense gradients; the
 * embedding's row-sparse gradient comes from a backward pass at idx [n]
 * with upstream gy [n, D]: rows [nnz] its rows (first-touch order), its
 * values [nnz, D] before and after. Returns nnz. */
int64_t kref_regularize(int dt, double l1, double l2, int64_t V, int64_t D, int64_t in, int64_t out,
                        const void *p0, const void *p1, const void *p2, void *g1, void *g2, const int64_t *idx,
                        int64_t n, const void *gy, int64_t *rows, void *vals_before, void *vals_after) {
  dl_model_desc md;
  dl_embedding_desc ed;
  dl_linear_desc ld;
  dl_step_desc sd;
  dl_model *m;
  dl_tensor *I, *G, *Y;
  dl_tape tp;
  dl_sgrad *s;
  const size_t es = ref_es(dt);
  int64_t nnz;
  int i;
  kref_init();
  memset(&md, 0, sizeof md);
  md.dtype = dt ? DL_F64 : DL_F32;
  md.seed = 7;
  m = dl_model_make(&ref_ctx, &md);
  ed.num = V; ed.dim = D; ed.sparse = 1;
  ld.in = in; ld.out = out; ld.no_bias = 0;
  dl_embedding_make(m, NULL, "emb", &ed);
  dl_linear_make(m, NULL, "fc", &ld);
  dl_model_pack(m);
  for (i = 0; i < m->nparams; i++) m->params[i]->wd_mult = 1;
  memcpy(m->params[0]->t.data, p0, es * (size_t)(V * D));
  memcpy(m->params[1]->t.data, p1, es * (size_t)(in * out));
  memcpy(m->params[2]->t.data, p2, es * (size_t)out);
  memcpy(m->params[1]->g.data, g1, es * (size_t)(in * out));
  memcpy(m->params[2]->g.data, g2, es * (size_t)out);
  I = ref_labels(n, idx);
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = dl_t_embedding(&tp, &m->params[0]->t, I);
  G = ref_make(dt, Y->ndim, Y->shape, gy);
  dl_backward(&tp, Y, G);
  s = (dl_sgrad *)m->params[0]->t.sgrad;
  nnz = s->nnz;
  memcpy(rows, s->rows, sizeof(int64_t) * (size_t)nnz);
  memcpy(vals_before, s->values, es * (size_t)(nnz * D));
  memset(&sd, 0, sizeof sd);
  sd.l1 = l1;
  sd.l2 = l2;
  dl_regularize(m, &sd);
  memcpy(vals_after, s->values, es * (size_t)(nnz * D));
  memcpy(g1, m->params[1]->g.data, es * (size_t)(in * out));
  memcpy(g2, m->params[2]->g.data, es * (size_t)out);
  dl_tape_free(&tp);
  dl_tensor_free(I);
  dl_tensor_free(G);
  dl_model_free(m);
  return nnz;
}
