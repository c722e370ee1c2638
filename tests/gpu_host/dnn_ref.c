/* tests/gpu_host/dnn_ref.c - the CPU side of tests/gpu_host/dnn_host.cu:
 * runs dl.h's own ops (ops/conv.h, ops/norm.h) on the tape on plain arrays
 * and returns the forward value, the gradient (dl_backward with a given
 * upstream gy) and the forward-mode tangent, for the host test to compare
 * with src_gpu/conv.cu's and norm.cu's kernel bodies. Built as C11 (gcc or clang), linked
 * into the nvcc-built test; see the top of dnn_host.cu for the commands.
 *
 * Arrays are contiguous, of f32 (dt 0) or f64 (dt 1) elements; an output
 * pointer may be NULL (not wanted). Each call makes and frees its tensors. */
#include "host_check.h" /* the functions' declarations, dl.h, ref_init, ref_make, ref_out */

/* Pooling on x [N, C, H, W]: kind 0 max, 1 avg; q the window as
 * dl_pool2d_args (host_check.h). y = pool(x), gx = its gradient for
 * upstream gy, ty = its tangent for tangent tx of x. */
static dl_pool2d_args dnn_ref_pool_args(const int *q) {
  dl_pool2d_args a;
  a.kernel_h = q[0]; a.kernel_w = q[1]; a.stride_h = q[2]; a.stride_w = q[3];
  a.pad_h = q[4]; a.pad_w = q[5]; a.exclude_pad = q[6]; a.dil_h = q[7]; a.dil_w = q[8];
  a.ceil_mode = q[9]; a.pad_mode = q[10]; a.pad_h_end = q[11]; a.pad_w_end = q[12];
  return a;
}
void dnn_ref_pool_geom(int kind, int64_t N, int64_t C, int64_t H, int64_t W, const int *q, int64_t *g) {
  int64_t sx[4];
  const dl_pool2d_args a = dnn_ref_pool_args(q);
  dl__pool_geom pg;
  dl_tensor *X;
  sx[0] = N; sx[1] = C; sx[2] = H; sx[3] = W;
  ref_init();
  X = dl_tensor_make(&ref_ctx, DL_F64, 4, sx);
  pg = dl__pool_check("dnn_ref_pool_geom", X, &a, kind == 0);
  g[0] = pg.Ho; g[1] = pg.Wo; g[2] = pg.ph; g[3] = pg.pw; g[4] = pg.phe; g[5] = pg.pwe;
  g[6] = pg.sh; g[7] = pg.sw; g[8] = pg.dh; g[9] = pg.dw;
  dl_tensor_free(X);
}
void dnn_ref_pool(int kind, int dt, int64_t N, int64_t C, int64_t H, int64_t W, const int *q, const void *x,
                  const void *gy, const void *tx, void *y, void *gx, void *ty) {
  int64_t sx[4];
  const dl_pool2d_args a = dnn_ref_pool_args(q);
  dl_tensor *X, *TX, *G, *Y;
  dl_tape tp;
  sx[0] = N; sx[1] = C; sx[2] = H; sx[3] = W;
  ref_init();
  X = ref_make(dt, 4, sx, x);
  TX = ref_make(dt, 4, sx, tx);
  dl_requires_grad(X);
  dl_set_tangent(X, TX);
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = kind == 0 ? dl_t_max_pool2d(&tp, X, &a) : dl_t_avg_pool2d(&tp, X, &a);
  dl_set_tangent(X, NULL);
  G = ref_make(dt, 4, Y->shape, gy);
  dl_backward(&tp, Y, G);
  ref_out(y, Y);
  ref_out(gx, X->grad);
  ref_out(ty, Y->tangent);
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(TX);
  dl_tensor_free(G);
}

/* 3-d pooling on x [N, C, D, H, W]: as dnn_ref_pool, q a dl_pool3d_args. */
static dl_pool3d_args dnn_ref_pool3d_args(const int *q) {
  dl_pool3d_args a;
  a.kernel_d = q[0]; a.kernel_h = q[1]; a.kernel_w = q[2]; a.stride_d = q[3]; a.stride_h = q[4]; a.stride_w = q[5];
  a.pad_d = q[6]; a.pad_h = q[7]; a.pad_w = q[8]; a.exclude_pad = q[9]; a.dil_d = q[10]; a.dil_h = q[11];
  a.dil_w = q[12]; a.ceil_mode = q[13];
  return a;
}
void dnn_ref_pool3d_geom(int kind, int64_t N, int64_t C, int64_t D, int64_t H, int64_t W, const int *q, int64_t *g) {
  int64_t sx[5];
  const dl_pool3d_args a = dnn_ref_pool3d_args(q);
  dl__pool_geom pg;
  dl_tensor *X;
  sx[0] = N; sx[1] = C; sx[2] = D; sx[3] = H; sx[4] = W;
  ref_init();
  X = dl_tensor_make(&ref_ctx, DL_F64, 5, sx);
  pg = dl__pool3d_check("dnn_ref_pool3d_geom", X, &a, kind == 0);
  g[0] = pg.Do; g[1] = pg.Ho; g[2] = pg.Wo; g[3] = pg.pd; g[4] = pg.ph; g[5] = pg.pw;
  g[6] = pg.sd; g[7] = pg.sh; g[8] = pg.sw; g[9] = pg.dd; g[10] = pg.dh; g[11] = pg.dw;
  dl_tensor_free(X);
}
void dnn_ref_pool3d(int kind, int dt, int64_t N, int64_t C, int64_t D, int64_t H, int64_t W, const int *q,
                    const void *x, const void *gy, const void *tx, void *y, void *gx, void *ty) {
  int64_t sx[5];
  const dl_pool3d_args a = dnn_ref_pool3d_args(q);
  dl_tensor *X, *TX, *G, *Y;
  dl_tape tp;
  sx[0] = N; sx[1] = C; sx[2] = D; sx[3] = H; sx[4] = W;
  ref_init();
  X = ref_make(dt, 5, sx, x);
  TX = ref_make(dt, 5, sx, tx);
  dl_requires_grad(X);
  dl_set_tangent(X, TX);
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = kind == 0 ? dl_t_max_pool3d(&tp, X, &a) : dl_t_avg_pool3d(&tp, X, &a);
  dl_set_tangent(X, NULL);
  G = ref_make(dt, 5, Y->shape, gy);
  dl_backward(&tp, Y, G);
  ref_out(y, Y);
  ref_out(gx, X->grad);
  ref_out(ty, Y->tangent);
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(TX);
  dl_tensor_free(G);
}

/* Batch norm on x [N, C, S] with optional w, b [C] (NULL: none; their
 * tangents tw, tb and gradients gw, gb go with them) and running statistics
 * rm, rv [C] (in/out; NULL: none). training as dl_t_batch_norm. */
void dnn_ref_bn(int dt, int64_t N, int64_t C, int64_t S, int training, double momentum, double eps, const void *x,
                const void *w, const void *b, void *rm, void *rv, const void *gy, const void *tx, const void *tw,
                const void *tb, void *y, void *gx, void *gw, void *gb, void *ty) {
  int64_t sx[3], sc[1];
  dl_tensor *X, *TX, *W = NULL, *TW = NULL, *B = NULL, *TB = NULL, *RM = NULL, *RV = NULL, *G, *Y;
  dl_tape tp;
  sx[0] = N; sx[1] = C; sx[2] = S; sc[0] = C;
  ref_init();
  X = ref_make(dt, 3, sx, x);
  TX = ref_make(dt, 3, sx, tx);
  if (w) {
    W = ref_make(dt, 1, sc, w);
    TW = ref_make(dt, 1, sc, tw);
    dl_requires_grad(W);
    dl_set_tangent(W, TW);
  }
  if (b) {
    B = ref_make(dt, 1, sc, b);
    TB = ref_make(dt, 1, sc, tb);
    dl_requires_grad(B);
    dl_set_tangent(B, TB);
  }
  if (rm) {
    RM = ref_make(dt, 1, sc, rm);
    RV = ref_make(dt, 1, sc, rv);
  }
  dl_requires_grad(X);
  dl_set_tangent(X, TX);
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = dl_t_batch_norm(&tp, X, W, B, RM, RV, training, momentum, eps);
  dl_set_tangent(X, NULL);
  if (W) dl_set_tangent(W, NULL);
  if (B) dl_set_tangent(B, NULL);
  G = ref_make(dt, 3, sx, gy);
  dl_backward(&tp, Y, G);
  ref_out(y, Y);
  ref_out(gx, X->grad);
  ref_out(ty, Y->tangent);
  if (W) ref_out(gw, W->grad);
  if (B) ref_out(gb, B->grad);
  if (RM) {
    ref_out(rm, RM);
    ref_out(rv, RV);
  }
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(TX);
  dl_tensor_free(G);
  if (W) { dl_tensor_free(W); dl_tensor_free(TW); }
  if (B) { dl_tensor_free(B); dl_tensor_free(TB); }
  if (RM) { dl_tensor_free(RM); dl_tensor_free(RV); }
}

/* Layer norm (center 1) or RMS norm (center 0; b unused) of x [R, D] over
 * the last dimension, optional w, b [D] as in dnn_ref_bn. */
void dnn_ref_ln(int dt, int center, int64_t R, int64_t D, double eps, const void *x, const void *w, const void *b,
                const void *gy, const void *tx, const void *tw, const void *tb, void *y, void *gx, void *gw,
                void *gb, void *ty) {
  int64_t sx[2], sc[1];
  dl_tensor *X, *TX, *W = NULL, *TW = NULL, *B = NULL, *TB = NULL, *G, *Y;
  dl_tape tp;
  sx[0] = R; sx[1] = D; sc[0] = D;
  ref_init();
  X = ref_make(dt, 2, sx, x);
  TX = ref_make(dt, 2, sx, tx);
  if (w) {
    W = ref_make(dt, 1, sc, w);
    TW = ref_make(dt, 1, sc, tw);
    dl_requires_grad(W);
    dl_set_tangent(W, TW);
  }
  if (b && center) {
    B = ref_make(dt, 1, sc, b);
    TB = ref_make(dt, 1, sc, tb);
    dl_requires_grad(B);
    dl_set_tangent(B, TB);
  }
  dl_requires_grad(X);
  dl_set_tangent(X, TX);
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = center ? dl_t_layer_norm(&tp, X, 1, W, B, eps) : dl_t_rms_norm(&tp, X, 1, W, eps);
  dl_set_tangent(X, NULL);
  if (W) dl_set_tangent(W, NULL);
  if (B) dl_set_tangent(B, NULL);
  G = ref_make(dt, 2, sx, gy);
  dl_backward(&tp, Y, G);
  ref_out(y, Y);
  ref_out(gx, X->grad);
  ref_out(ty, Y->tangent);
  if (W) ref_out(gw, W->grad);
  if (B) ref_out(gb, B->grad);
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(TX);
  dl_tensor_free(G);
  if (W) { dl_tensor_free(W); dl_tensor_free(TW); }
  if (B) { dl_tensor_free(B); dl_tensor_free(TB); }
}

/* conv2d's bias gradient gb [O] for upstream gy [N, O, Hh, Ww]: a 1x1
 * convolution of a [N, 1, Hh, Ww] input, so y has gy's shape. */
void dnn_ref_conv_gb(int dt, int64_t N, int64_t O, int64_t Hh, int64_t Ww, const void *gy, void *gb) {
  int64_t sx[4], sw[4], sb[1];
  dl_tensor *X, *Wt, *B, *G, *Y;
  dl_tape tp;
  sx[0] = N; sx[1] = 1; sx[2] = Hh; sx[3] = Ww;
  sw[0] = O; sw[1] = 1; sw[2] = 1; sw[3] = 1;
  sb[0] = O;
  ref_init();
  X = ref_make(dt, 4, sx, NULL);
  dl_tensor_fill(X, 0.5);
  Wt = ref_make(dt, 4, sw, NULL);
  dl_tensor_fill(Wt, 1.0);
  B = ref_make(dt, 1, sb, NULL);
  dl_requires_grad(B);
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = dl_t_conv2d(&tp, X, Wt, B, NULL);
  G = ref_make(dt, 4, Y->shape, gy);
  dl_backward(&tp, Y, G);
  ref_out(gb, B->grad);
  dl_tape_free(&tp);
  dl_tensor_free(X);
  dl_tensor_free(Wt);
  dl_tensor_free(B);
  dl_tensor_free(G);
}
