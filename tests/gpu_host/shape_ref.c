/* tests/gpu_host/shape_ref.c - the CPU side of tests/gpu_host/shape_host.cu:
 * runs dl.h's own shape ops (dl_t_index_select, dl_t_gather, dl_t_pad of
 * ops/shape.h) on the tape on plain arrays and returns the forward value,
 * the gradient (dl_backward with a given upstream gy) and the forward-mode
 * tangent, for the host test to compare with src_gpu/shape.cu's kernel
 * bodies. Built as C11 (gcc or clang), linked into the nvcc-built test; see
 * the top of shape_host.cu for the commands.
 *
 * dt is a dl_dtype value. Arrays are contiguous, in x's storage layout
 * (x, tx, gx) or the output's (y, ty, gy). For f32 / f64 the gradient gx is
 * in/out: it holds the leaf gradient's starting value (dl_backward adds to
 * it) and receives the result; tx and gy may be NULL (no tangent, no
 * backward), as may any output. Other dtypes: forward only. tr: the op runs
 * on dl_t_transpose(x, 0, ndim - 1), a strided view of x's storage (shape
 * the storage's with the first and last sizes swapped). Each call makes and
 * frees its tensors. */
#include "host_check.h" /* the functions' declarations, dl.h, ref_init, ref_make, ref_out */

static int64_t ref_yshape[DL_MAX_DIMS];
static int ref_float(int dt) { return dt == DL_F32 || dt == DL_F64; }

/* The op's part common to the three: X (with tangent and gradient when
 * wanted) made from x, the op run by `op` on it (through a transpose when
 * tr), then the backward with seed gy and the outputs copied out. */
typedef dl_tensor *(*ref_op)(dl_tape *tp, dl_tensor *x, const void *arg);
static void ref_run(int dt, int ndim, const int64_t *xshape, int tr, ref_op op, const void *arg, const void *x,
                    const void *tx, const void *gy, void *y, void *ty, void *gx) {
  dl_tensor *X, *TX = NULL, *G = NULL, *Y;
  int want_g = ref_float(dt) && gy != NULL, d;
  dl_tape tp;
  ref_init();
  X = ref_make(dt, ndim, xshape, x);
  if (ref_float(dt) && tx) {
    TX = ref_make(dt, ndim, xshape, tx);
    dl_set_tangent(X, TX);
  }
  if (want_g) {
    dl_requires_grad(X);
    if (gx) memcpy(X->grad->data, gx, (size_t)X->numel * dl_dtype_size(X->dtype));
  }
  dl_tape_init(&tp, &ref_ctx, 0);
  Y = op(&tp, tr && ndim > 1 ? dl_t_transpose(&tp, X, 0, ndim - 1) : X, arg);
  dl_set_tangent(X, NULL);
  for (d = 0; d < Y->ndim; d++) ref_yshape[d] = Y->shape[d];
  ref_out(y, Y);
  if (TX) ref_out(ty, Y->tangent);
  if (want_g && Y->numel) {
    G = ref_make(dt, Y->ndim, Y->shape, gy);
    dl_backward(&tp, Y, G);
  }
  if (want_g) ref_out(gx, X->grad);
  dl_tape_free(&tp);
  dl_tensor_free(X);
  if (TX) dl_tensor_free(TX);
  if (G) dl_tensor_free(G);
}

typedef struct ref_idx_arg {
  int dim;
  const dl_tensor *idx;
} ref_idx_arg;
static dl_tensor *ref_isel(dl_tape *tp, dl_tensor *x, const void *arg) {
  const ref_idx_arg *a = (const ref_idx_arg *)arg;
  return dl_t_index_select(tp, x, a->dim, a->idx);
}
static dl_tensor *ref_gather(dl_tape *tp, dl_tensor *x, const void *arg) {
  const ref_idx_arg *a = (const ref_idx_arg *)arg;
  return dl_t_gather(tp, x, a->dim, a->idx);
}

/* index_select of x [shape] (never transposed) along dim by idx[0..m). */
void sref_index_select(int dt, int ndim, const int64_t *shape, int dim, const int64_t *idx, int64_t m, const void *x,
                       const void *tx, const void *gy, void *y, void *ty, void *gx) {
  ref_idx_arg a;
  int64_t sm[1];
  dl_tensor *I;
  ref_init();
  sm[0] = m;
  I = ref_make(DL_I64, 1, sm, idx);
  a.dim = dim;
  a.idx = I;
  ref_run(dt, ndim, shape, 0, ref_isel, &a, x, tx, gy, y, ty, gx);
  dl_tensor_free(I);
}

/* gather along dim of x (storage [xshape], transposed when tr) by idx
 * [ishape] (rank ndim). */
void sref_gather(int dt, int ndim, const int64_t *xshape, int tr, int dim, const int64_t *ishape, const int64_t *idx,
                 const void *x, const void *tx, const void *gy, void *y, void *ty, void *gx) {
  ref_idx_arg a;
  dl_tensor *I;
  ref_init();
  I = ref_make(DL_I64, ndim, ishape, idx);
  a.dim = dim;
  a.idx = I;
  ref_run(dt, ndim, xshape, tr, ref_gather, &a, x, tx, gy, y, ty, gx);
  dl_tensor_free(I);
}

typedef struct ref_pad_arg {
  int npairs;
  const int64_t *pads;
  double value;
} ref_pad_arg;
static dl_tensor *ref_pad(dl_tape *tp, dl_tensor *x, const void *arg) {
  const ref_pad_arg *a = (const ref_pad_arg *)arg;
  return dl_t_pad(tp, x, a->npairs, a->pads, a->value);
}
/* dl_t_pad of x (storage [xshape], transposed when tr) by npairs pairs;
 * *yshape_out: the output's shape (valid until the next call). Call with
 * y, ty, gy NULL first to learn the shape. */
void sref_pad(int dt, int ndim, const int64_t *xshape, int tr, int npairs, const int64_t *pads, double value,
              const void *x, const void *tx, const void *gy, const int64_t **yshape_out, void *y, void *ty, void *gx) {
  ref_pad_arg a;
  a.npairs = npairs;
  a.pads = pads;
  a.value = value;
  ref_run(dt, ndim, xshape, tr, ref_pad, &a, x, tx, gy, y, ty, gx);
  if (yshape_out) *yshape_out = ref_yshape;
}

/* The pad value's bytes in dtype dt, as ops/shape.h's dl__t_pad_gpu makes
 * them for dlg_pad (dl_tensor_fill of a 0-d host tensor). */
void sref_fill_bits(int dt, double value, void *out) {
  dl_tensor *v;
  ref_init();
  v = ref_make(dt, 0, NULL, NULL);
  dl_tensor_fill(v, value);
  memcpy(out, v->data, dl_dtype_size(v->dtype));
  dl_tensor_free(v);
}
