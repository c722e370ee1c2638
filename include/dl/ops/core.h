/* dl/ops/core.h - what every op family builds on: the helpers shared by the
 * ops, the element-wise ops of expr.h's list on the tape (dl_t_NAME), clamp,
 * where, user element-wise ops (DL_T_MAP1/1P/2), matmul and linear.
 * dl/ops.h is the index of all the families. */
#ifndef DL_OPS_CORE_H
#define DL_OPS_CORE_H

#include "../tape.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY

/* >>helpers shared by the ops ---------------------------------------------- */

/* Panics naming op when a and b (b may be NULL) are on different devices. */
DL_API void dl__ops_same_device(const char *op, const dl_tensor *a, const dl_tensor *b) {
  if (b && b->device != a->device)
    DL_PANIC(a->ctx, op, "device mismatch: %s on the %s, %s on the %s (move both to one device)", DL_SHAPESTR(a),
             a->device == DL_CPU ? "host" : "GPU", DL_SHAPESTR(b), b->device == DL_CPU ? "host" : "GPU");
}
/* Panics unless a and b are both f32 or both f64, on one device. */
DL_API void dl__ops_same_float(const char *op, const dl_tensor *a, const dl_tensor *b) {
  if ((a->dtype != DL_F32 && a->dtype != DL_F64) || (b && b->dtype != a->dtype))
    DL_PANIC(a->ctx, op, "dtype mismatch: %s and %s (both f32 or both f64, never converted)",
             DL_SHAPESTR(a), b ? DL_SHAPESTR(b) : "-");
  dl__ops_same_device(op, a, b);
}
#ifdef DL_USE_CUDA
/* The device handle for op on x: x must be on the GPU and tp a device tape
 * (dl_tape_use_gpu), else outputs would land on the wrong side: panics
 * naming op. */
DL_API dlg_handle *dl__dnn_h(const dl_tape *tp, const char *op, const dl_tensor *x) {
  if (x->device != DL_CUDA || !tp->gpu)
    DL_PANIC(x->ctx, op, "x %s is on the %s but the tape is a %s tape: run device tensors on a device tape "
             "(dl_tape_use_gpu) and host tensors on a host tape (dl_tape_input moves a batch)", DL_SHAPESTR(x),
             x->device == DL_CUDA ? "GPU" : "host", tp->gpu ? "device" : "host");
  return dl__gpu_h(x, op);
}
/* t's tangent, when it has one, on t's device (convolution, pooling, norms, rnn). */
DL_API void dl__dnn_tangent_dev(const char *op, const dl_tensor *t) {
  if (t && t->tangent) dl__ops_same_device(op, t, t->tangent);
}
#endif
/* Panics naming op when t is on the GPU or tp is a device tape: guards code
 * that runs on the host (an op's CPU path reached with host tensors on a
 * device tape, whose outputs are device memory), so that it stops instead of
 * touching device memory on the host. */
DL_API void dl__ops_host_only(const dl_tape *tp, const char *op, const dl_tensor *t) {
  if ((t && t->device != DL_CPU) || (tp && tp->gpu))
    DL_PANIC(t ? t->ctx : tp->ctx, op, "%s %s: on a device tape every tensor must be on the device "
             "(dl_tape_input), on a host tape on the host (dl_tape_host)",
             t ? DL_SHAPESTR(t) : "input", t && t->device != DL_CPU ? "is on the GPU" : "is on the host, the tape on the GPU");
}
/* The broadcast shape of a and b (right-aligned, sizes equal or 1) into
 * shape/ndim; panics naming op and both shapes when they do not broadcast. */
DL_API void dl_broadcast_shape(const char *op, const dl_tensor *a, const dl_tensor *b, int *ndim,
                               int64_t *shape) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim, d;
  for (d = 0; d < n; d++) {
    int da = d - (n - a->ndim), db = d - (n - b->ndim);
    int64_t sa = da < 0 ? 1 : a->shape[da], sb = db < 0 ? 1 : b->shape[db];
    if (sa != sb && sa != 1 && sb != 1)
      DL_PANIC(a->ctx, op, "shape mismatch: %s and %s do not broadcast", DL_SHAPESTR(a),
               DL_SHAPESTR(b));
    shape[d] = sa == 1 ? sb : sa;
  }
  *ndim = n;
}
/* gx += g summed over the dimensions where gx (right-aligned) has size 1 or
 * is missing: the gradient of a broadcast operand. gx contiguous. */
DL_API void dl_sum_to_into(dl_tensor *gx, const dl_tensor *g) {
  int64_t i, idx[DL_MAX_DIMS];
  int d, off = g->ndim - gx->ndim;
  if (off < 0) DL_PANIC(g->ctx, "dl_sum_to_into", "%s cannot be summed to %s", DL_SHAPESTR(g), DL_SHAPESTR(gx));
  for (d = 0; d < gx->ndim; d++)
    if (gx->shape[d] != 1 && gx->shape[d] != g->shape[d + off])
      DL_PANIC(g->ctx, "dl_sum_to_into", "%s cannot be summed to %s", DL_SHAPESTR(g), DL_SHAPESTR(gx));
#ifdef DL_USE_CUDA
  if (gx->device == DL_CUDA || g->device == DL_CUDA) {
    int trailing = dl_tensor_is_contiguous(g) && dl_tensor_is_contiguous(gx) && gx->numel > 0;
    dl__ops_same_device("dl_sum_to_into", gx, g);
    for (d = 0; d < gx->ndim; d++) trailing &= gx->shape[d] == g->shape[d + off];
    if (trailing) /* a bias: rows of g summed into gx, in a fixed order */
      dl__gpu_ok(g, "dl_sum_to_into",
                 dlg_sum_axis(dl__gpu_h(g, "dl_sum_to_into"), (int)g->dtype, gx->data, g->data, 1,
                              g->numel / gx->numel, gx->numel, 1.0, 1));
    else /* any other broadcast: gx += g through the list's backward of x * 1 (atomic adds) */
      dl_mul_scalar_backward(gx, g, g, 1.0); /* x0 = g: any tensor of that shape (d(x * 1)/dx = 1) */
    return;
  }
#endif
  if (dl_tensor_same_shape(gx, g)) {
    dl_add_into(gx, gx, g); /* (the op list's function, not a DL_ASSIGN: the library's code stays short) */
    return;
  }
  if (dl_tensor_is_contiguous(g) && dl_tensor_is_contiguous(gx) && gx->numel > 0) {
    /* the common case, a bias: gx's shape is g's trailing dimensions */
    int trailing = 1;
    for (d = 0; d < gx->ndim; d++) trailing &= gx->shape[d] == g->shape[d + off];
    if (trailing) {
      int64_t r, j, n = gx->numel, rows = g->numel / n;
      if (g->dtype == DL_F32) {
        float *o = (float *)gx->data;
        const float *a = (const float *)g->data;
        for (r = 0; r < rows; r++)
          for (j = 0; j < n; j++) o[j] += a[r * n + j];
      } else {
        double *o = (double *)gx->data;
        const double *a = (const double *)g->data;
        for (r = 0; r < rows; r++)
          for (j = 0; j < n; j++) o[j] += a[r * n + j];
      }
      return;
    }
  }
  memset(idx, 0, sizeof idx);
  for (i = 0; i < g->numel; i++) {
    int64_t og = 0, ox = 0;
    for (d = 0; d < g->ndim; d++) {
      og += idx[d] * g->strides[d];
      if (d >= off && gx->shape[d - off] != 1) ox += idx[d] * gx->strides[d - off];
    }
    if (g->dtype == DL_F32) ((float *)gx->data)[ox] += ((const float *)g->data)[og];
    else ((double *)gx->data)[ox] += ((const double *)g->data)[og];
    for (d = g->ndim - 1; d >= 0; d--) {
      if (++idx[d] < g->shape[d]) break;
      idx[d] = 0;
    }
  }
}

/* >>element-wise ops from the list ---------------------------------------- */

typedef void (*dl__into1_fn)(dl_tensor *, const dl_tensor *);
typedef void (*dl__bwd1_fn)(dl_tensor *, const dl_tensor *, const dl_tensor *);
typedef void (*dl__jvp1_fn)(dl_tensor *, const dl_tensor *, const dl_tensor *);
typedef void (*dl__into1p_fn)(dl_tensor *, const dl_tensor *, double);
typedef void (*dl__bwd1p_fn)(dl_tensor *, const dl_tensor *, const dl_tensor *, double);
typedef void (*dl__jvp1p_fn)(dl_tensor *, const dl_tensor *, const dl_tensor *, double);
typedef void (*dl__into2_fn)(dl_tensor *, const dl_tensor *, const dl_tensor *);
typedef void (*dl__bwd2_fn)(dl_tensor *, dl_tensor *, const dl_tensor *, const dl_tensor *,
                            const dl_tensor *);
typedef void (*dl__jvp2_fn)(dl_tensor *, const dl_tensor *, const dl_tensor *, const dl_tensor *,
                            const dl_tensor *);

typedef void (*dl__d2_fn)(const double *x, const double *t, int k, double p0, double *d);

/* The element-wise ops' second-order rule (dl_hvp), from the op's
 * expression on nested duals (expr.h's FAM_d2): for each input k with a
 * gradient tangent tg[k],
 *   tg[k] += tgy df/dxk + gy (d2f/dxk dx0 t0 + d2f/dxk dx1 t1)
 * summed to x_k's shape; x[], t[] (NULL: zero) broadcast to gy's shape.
 * Evaluated in double for f32 too. Host only. */
DL_API void dl__hvp_ew(dl_tape *tp, const char *op, dl__d2_fn f, double p0, int nin, const dl_tensor *gy,
                       const dl_tensor *tgy, dl_tensor *const *x, dl_tensor *const *t, dl_tensor *const *tg) {
  int64_t st[2][2][DL_MAX_DIMS], idx[DL_MAX_DIMS], i;
  const int nd = gy->ndim;
  int k, j, d;
  for (j = 0; j < nin; j++)
    for (k = 0; k < 2; k++) { /* strides of x[j] (k 0) and t[j] (k 1) aligned to gy's shape */
      const dl_tensor *a = k ? t[j] : x[j];
      for (d = 0; d < nd; d++) {
        const int da = d - (nd - (a ? a->ndim : 0));
        st[j][k][d] = !a || da < 0 || a->shape[da] != gy->shape[d] ? 0 : a->strides[da];
      }
    }
  for (k = 0; k < nin; k++) {
    dl_tensor *acc;
    if (!tg[k]) continue;
    acc = dl_tensor_same_shape(tg[k], gy) && dl_tensor_is_contiguous(tg[k])
              ? tg[k]
              : dl_tape_zeros(tp, op, gy->dtype, gy->ndim, gy->shape);
    memset(idx, 0, sizeof idx);
    for (i = 0; i < gy->numel; i++) {
      double xv[2] = {0, 0}, tv[2] = {0, 0}, dv[2], v;
      int64_t o;
      for (j = 0; j < nin; j++) {
        for (o = 0, d = 0; d < nd; d++) o += idx[d] * st[j][0][d];
        xv[j] = dl__get_at(x[j], o);
        if (t[j]) {
          for (o = 0, d = 0; d < nd; d++) o += idx[d] * st[j][1][d];
          tv[j] = dl__get_at(t[j], o);
        }
      }
      f(xv, tv, k, p0, dv);
      v = dl__get_at(tgy, i) * dv[0] + dl__get_at(gy, i) * dv[1];
      if (acc->dtype == DL_F32) ((float *)acc->data)[i] += (float)v;
      else ((double *)acc->data)[i] += v;
      for (d = nd - 1; d >= 0; d--) {
        if (++idx[d] < gy->shape[d]) break;
        idx[d] = 0;
      }
    }
    if (acc != tg[k]) dl_sum_to_into(tg[k], acc);
  }
}

DL_API void dl__t_map1_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl__tape_grad_w(tp, n->in[0]); /* the generated backward zeroes it as it goes (dl__ew_run) */
  if (gx) ((dl__bwd1_fn)n->fn[0])(gx, n->out->grad, n->in[0]);
  if (gx && tp->hvp)
    dl__hvp_ew(tp, n->op, (dl__d2_fn)n->fn[1], 0.0, 1, n->out->grad, n->out->grad->tangent, n->in,
               &n->in[0]->tangent, &gx->tangent);
}
DL_API void dl__t_map1p_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl__tape_grad_w(tp, n->in[0]);
  if (gx) ((dl__bwd1p_fn)n->fn[0])(gx, n->out->grad, n->in[0], n->p[0]);
  if (gx && tp->hvp)
    dl__hvp_ew(tp, n->op, (dl__d2_fn)n->fn[1], n->p[0], 1, n->out->grad, n->out->grad->tangent, n->in,
               &n->in[0]->tangent, &gx->tangent);
}
DL_API void dl__t_map2_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *ga = dl__tape_grad_w(tp, n->in[0]), *gb = dl__tape_grad_w(tp, n->in[1]);
  if (ga || gb) ((dl__bwd2_fn)n->fn[0])(ga, gb, n->out->grad, n->in[0], n->in[1]);
  if ((ga || gb) && tp->hvp) {
    dl_tensor *t[2], *tg[2];
    t[0] = n->in[0]->tangent;
    t[1] = n->in[1]->tangent;
    tg[0] = ga ? ga->tangent : NULL; /* x op x: the same tangent twice, both partials added */
    tg[1] = gb ? gb->tangent : NULL;
    dl__hvp_ew(tp, n->op, (dl__d2_fn)n->fn[1], 0.0, 2, n->out->grad, n->out->grad->tangent, n->in, t, tg);
  }
}

/* y = f(x) for an op made by expr.h's generator (DL_T_MAP1 below). */
DL_API dl_tensor *dl__t_map1(dl_tape *tp, const char *op, dl_tensor *x, dl__into1_fn into,
                             dl__bwd1_fn bw, dl__jvp1_fn jvp, dl__d2_fn d2) {
  dl_tensor *y;
  dl_node *n;
  dl__ops_same_float(op, x, NULL);
  y = dl_tape_out(tp, op, x->dtype, x->ndim, x->shape);
  into(y, x);
  if (x->tangent) jvp(dl_tape_tangent(tp, y), x, x->tangent);
  if ((n = dl_tape_record(tp, op, dl__t_map1_bw, y, x, NULL, NULL)) != NULL) {
    n->fn[0] = (void (*)(void))bw;
    n->fn[1] = (void (*)(void))d2;
    n->flags |= DL_NODE_HVP;
  }
  return y;
}
DL_API dl_tensor *dl__t_map1p(dl_tape *tp, const char *op, dl_tensor *x, double p0,
                              dl__into1p_fn into, dl__bwd1p_fn bw, dl__jvp1p_fn jvp, dl__d2_fn d2) {
  dl_tensor *y;
  dl_node *n;
  dl__ops_same_float(op, x, NULL);
  y = dl_tape_out(tp, op, x->dtype, x->ndim, x->shape);
  into(y, x, p0);
  if (x->tangent) jvp(dl_tape_tangent(tp, y), x, x->tangent, p0);
  if ((n = dl_tape_record(tp, op, dl__t_map1p_bw, y, x, NULL, NULL)) != NULL) {
    n->fn[0] = (void (*)(void))bw;
    n->fn[1] = (void (*)(void))d2;
    n->flags |= DL_NODE_HVP;
    n->p[0] = p0;
  }
  return y;
}
/* y = f(a, b), a and b broadcast to y's shape. */
DL_API dl_tensor *dl__t_map2(dl_tape *tp, const char *op, dl_tensor *a, dl_tensor *b,
                             dl__into2_fn into, dl__bwd2_fn bw, dl__jvp2_fn jvp, dl__d2_fn d2) {
  dl_tensor *y;
  dl_node *n;
  int nd;
  int64_t shape[DL_MAX_DIMS];
  dl__ops_same_float(op, a, b);
  dl_broadcast_shape(op, a, b, &nd, shape);
  y = dl_tape_out(tp, op, a->dtype, nd, shape);
  into(y, a, b);
  if (a->tangent || b->tangent)
    jvp(dl_tape_tangent(tp, y), a, dl_tangent_or_zero(tp, a), b, dl_tangent_or_zero(tp, b));
  if ((n = dl_tape_record(tp, op, dl__t_map2_bw, y, a, b, NULL)) != NULL) {
    n->fn[0] = (void (*)(void))bw;
    n->fn[1] = (void (*)(void))d2;
    n->flags |= DL_NODE_HVP;
  }
  return y;
}

/* A user's element-wise op, defined at file scope with DL_DEFINE_OP1 /
 * DL_DEFINE_OP1P / DL_DEFINE_OP2 (expr.h), on the tape:
 *   DL_DEFINE_OP1(my_leaky, dl_max(dl_mul(0.2, x0), x0))
 *   dl_tensor *y = DL_T_MAP1(tp, my_leaky, x);
 * Its backward and tangent rules come from the same expression. */
#define DL_T_MAP1(tp, name, x) dl__t_map1((tp), #name, (x), name##_into, name##_backward, name##_jvp, name##_d2)
/* DL_T_MAP1P(tp, name, x, p0): DL_T_MAP1 for an op made by DL_DEFINE_OP1P,
 * p0 its number parameter. */
#define DL_T_MAP1P(tp, name, x, p0)                                                    \
  dl__t_map1p((tp), #name, (x), (p0), name##_into, name##_backward, name##_jvp, name##_d2)
/* DL_T_MAP2(tp, name, a, b): DL_T_MAP1 for a binary op made by
 * DL_DEFINE_OP2. */
#define DL_T_MAP2(tp, name, a, b)                                                      \
  dl__t_map2((tp), #name, (a), (b), name##_into, name##_backward, name##_jvp, name##_d2)

/* The library's list: dl_t_relu(tp, x), dl_t_leaky_relu(tp, x, slope),
 * dl_t_add(tp, a, b), ... one function per entry of DL_OPS_UNARY,
 * DL_OPS_UNARY_P (number parameter p0) and DL_OPS_BINARY. */
#define DL__T_LIB1(name, expr)                                                         \
  DL_API dl_tensor *dl_t_##name(dl_tape *tp, dl_tensor *x) {                           \
    return dl__t_map1(tp, "dl_t_" #name, x, dl_##name##_into, dl_##name##_backward, dl_##name##_jvp, \
                      dl__op_##name##_d2);                                             \
  }
#define DL__T_LIB1P(name, expr)                                                        \
  DL_API dl_tensor *dl_t_##name(dl_tape *tp, dl_tensor *x, double p0) {                \
    return dl__t_map1p(tp, "dl_t_" #name, x, p0, dl_##name##_into, dl_##name##_backward, \
                       dl_##name##_jvp, dl__op_##name##_d2);                           \
  }
#define DL__T_LIB2(name, expr)                                                         \
  DL_API dl_tensor *dl_t_##name(dl_tape *tp, dl_tensor *a, dl_tensor *b) {             \
    return dl__t_map2(tp, "dl_t_" #name, a, b, dl_##name##_into, dl_##name##_backward, \
                      dl_##name##_jvp, dl__op_##name##_d2);                            \
  }
DL_OPS_UNARY(DL__T_LIB1)
DL_OPS_UNARY_P(DL__T_LIB1P)
DL_OPS_BINARY(DL__T_LIB2)

/* >>clamp, where ----------------------------------------------------------- */

/* y = min(max(x, lo), hi); the gradient passes where lo <= x <= hi. */
DL_API void dl__t_clamp_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *gx = dl_tape_grad(tp, n->in[0]), *x = n->in[0], *gy = n->out->grad;
  double lo = n->p[0], hi = n->p[1];
#ifdef DL_USE_CUDA
  if (gx && gy->device == DL_CUDA) {
    dlg_ew e;
    void *ptr[5];
    if (dl__gpu_ew_prep("dl_t_clamp", DLG_BWD, gy, x, NULL, gx, NULL, &e, ptr))
      dl__gpu_ok(gy, "dl_t_clamp", dlg_clamp_ew(dl__gpu_h(gy, "dl_t_clamp"), (int)gy->dtype, DLG_BWD, &e, ptr, lo, hi));
    return;
  }
#endif
  if (gx) DL_ASSIGN(gx, dl_add(gx, dl_mul(gy, dl_mul(dl_ge(x, lo), dl_le(x, hi)))));
}
/* y = min(max(x, lo), hi); the gradient passes where lo <= x <= hi. */
DL_API dl_tensor *dl_t_clamp(dl_tape *tp, dl_tensor *x, double lo, double hi) {
  dl_tensor *y;
  dl_node *n;
  dl__ops_same_float("dl_t_clamp", x, NULL);
  if (!(lo <= hi)) DL_PANIC(x->ctx, "dl_t_clamp", "lo %g > hi %g for %s", lo, hi, DL_SHAPESTR(x));
  y = dl_tape_out(tp, "dl_t_clamp", x->dtype, x->ndim, x->shape);
#ifdef DL_USE_CUDA
  if (y->device == DL_CUDA || x->device == DL_CUDA) {
    dlg_ew e;
    void *ptr[5];
    dlg_handle *h = dl__gpu_h(y, "dl_t_clamp");
    if (dl__gpu_ew_prep("dl_t_clamp", DLG_FWD, y, x, NULL, NULL, NULL, &e, ptr))
      dl__gpu_ok(y, "dl_t_clamp", dlg_clamp_ew(h, (int)y->dtype, DLG_FWD, &e, ptr, lo, hi));
    if (x->tangent) {
      dl_tensor *ty = dl_tape_tangent(tp, y);
      if (dl__gpu_ew_prep("dl_t_clamp", DLG_JVP, ty, x, NULL, x->tangent, NULL, &e, ptr))
        dl__gpu_ok(y, "dl_t_clamp", dlg_clamp_ew(h, (int)y->dtype, DLG_JVP, &e, ptr, lo, hi));
    }
  } else
#endif
  {
    DL_ASSIGN(y, dl_clamp(x, lo, hi));
    if (x->tangent) {
      dl_tensor *ty = dl_tape_tangent(tp, y), *tx = x->tangent;
      DL_ASSIGN(ty, dl_mul(tx, dl_mul(dl_ge(x, lo), dl_le(x, hi))));
    }
  }
  if ((n = dl_tape_record(tp, "dl_t_clamp", dl__t_clamp_bw, y, x, NULL, NULL)) != NULL) {
    n->flags |= DL_NODE_HVP_LINEAR; /* the pass-through mask is fixed: linear in the gradient */
    n->p[0] = lo;
    n->p[1] = hi;
  }
  return y;
}

/* y = cond ? a : b element by element (cond != 0), all three broadcast to
 * y's shape; cond is a mask of the same float dtype (no gradient flows to it). */
DL_API void dl__t_where_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *c = n->in[0], *ga = dl_tape_grad(tp, n->in[1]), *gb = dl_tape_grad(tp, n->in[2]);
  dl_tensor *gy = n->out->grad, *tmp;
  if (!ga && !gb) return;
#ifdef DL_USE_CUDA
  if (gy->device == DL_CUDA) { /* both gradients in one pass, summed to their shapes by atomics */
    dlg_ew e;
    void *ptr[5];
    if (dl__gpu_ew_prep("dl_t_where", DLG_BWD, gy, c, NULL, ga, gb, &e, ptr))
      dl__gpu_ok(gy, "dl_t_where", dlg_where_ew(dl__gpu_h(gy, "dl_t_where"), (int)gy->dtype, DLG_BWD, &e, ptr));
    return;
  }
#endif
  tmp = dl_tape_out(tp, "dl_t_where", gy->dtype, gy->ndim, gy->shape);
  if (ga) {
    DL_ASSIGN(tmp, dl_where(c, gy, 0.0));
    dl_sum_to_into(ga, tmp);
  }
  if (gb) {
    DL_ASSIGN(tmp, dl_where(c, 0.0, gy));
    dl_sum_to_into(gb, tmp);
  }
}
/* y = cond ? a : b element by element (cond != 0), all three broadcast to
 * y's shape; cond is a mask of the same float dtype and gets no gradient. */
DL_API dl_tensor *dl_t_where(dl_tape *tp, dl_tensor *cond, dl_tensor *a, dl_tensor *b) {
  dl_tensor *y, tmp;
  int nd, nd2;
  int64_t shape[DL_MAX_DIMS], shape2[DL_MAX_DIMS];
  dl__ops_same_float("dl_t_where", a, b);
  dl__ops_same_float("dl_t_where", cond, a);
  dl_broadcast_shape("dl_t_where", a, b, &nd, shape);
  memset(&tmp, 0, sizeof tmp);
  dl__set_shape(&tmp, nd, shape);
  tmp.ctx = a->ctx;
  tmp.dtype = a->dtype;
  dl_broadcast_shape("dl_t_where", cond, &tmp, &nd2, shape2);
  y = dl_tape_out(tp, "dl_t_where", a->dtype, nd2, shape2);
#ifdef DL_USE_CUDA
  if (y->device == DL_CUDA || a->device == DL_CUDA) {
    dlg_ew e;
    void *ptr[5];
    dlg_handle *h = dl__gpu_h(y, "dl_t_where");
    if (dl__gpu_ew_prep("dl_t_where", DLG_FWD, y, cond, a, b, NULL, &e, ptr))
      dl__gpu_ok(y, "dl_t_where", dlg_where_ew(h, (int)y->dtype, DLG_FWD, &e, ptr));
    if (a->tangent || b->tangent) {
      dl_tensor *ty = dl_tape_tangent(tp, y), *ta = dl_tangent_or_zero(tp, a), *tb = dl_tangent_or_zero(tp, b);
      if (dl__gpu_ew_prep("dl_t_where", DLG_JVP, ty, cond, ta, tb, NULL, &e, ptr))
        dl__gpu_ok(y, "dl_t_where", dlg_where_ew(h, (int)y->dtype, DLG_JVP, &e, ptr));
    }
  } else
#endif
  {
    DL_ASSIGN(y, dl_where(cond, a, b));
    if (a->tangent || b->tangent) {
      dl_tensor *ty = dl_tape_tangent(tp, y), *ta = dl_tangent_or_zero(tp, a),
                *tb = dl_tangent_or_zero(tp, b);
      DL_ASSIGN(ty, dl_where(cond, ta, tb));
    }
  }
  {
    dl_node *n = dl_tape_record(tp, "dl_t_where", dl__t_where_bw, y, cond, a, b);
    if (n) n->flags |= DL_NODE_HVP_LINEAR; /* the condition is fixed: linear in the gradient */
  }
  return y;
}

/* >>matmul ----------------------------------------------------------------- */

/* A contiguous tensor with t's values: t itself when it already is. */
DL_API dl_tensor *dl__t_contig(dl_tape *tp, const char *op, dl_tensor *t) {
  dl_tensor *c;
  if (dl_tensor_is_contiguous(t)) return t;
  c = dl_tape_out(tp, op, t->dtype, t->ndim, t->shape);
  dl_tensor_copy(c, t);
  return c;
}
/* g_b += a^T @ gy for y = a @ b, where b may be 2-d and shared across a's
 * batch (then the batch is folded into the rows of a). */
DL_API void dl__matmul_grad_b(dl_tape *tp, dl_tensor *gb, dl_tensor *a, const dl_tensor *gy) {
  if (gb->ndim == 2 && a->ndim > 2) {
    dl_tensor *ac = dl__t_contig(tp, "dl_t_matmul", a);
    dl_tensor a2 = dl_view_reshape(ac, DL_SHAPE(-1, a->shape[a->ndim - 1]));
    dl_tensor g2 = dl_view_reshape(gy, DL_SHAPE(-1, gy->shape[gy->ndim - 1]));
    dl_tensor at = dl_view_transpose(&a2, 0, 1);
    dl_matmul_into(gb, &at, &g2, 1.0, 1.0);
  } else {
    dl_tensor at = dl_view_transpose(a, a->ndim - 2, a->ndim - 1);
    dl_matmul_into(gb, &at, gy, 1.0, 1.0);
  }
}
/* ga += gy b^T, gb += a^T gy (either NULL: skipped). */
DL_API void dl__matmul_grads(dl_tape *tp, dl_tensor *ga, dl_tensor *gb, const dl_tensor *gy, dl_tensor *a,
                             const dl_tensor *b) {
  if (ga) {
    dl_tensor bt = dl_view_transpose(b, b->ndim - 2, b->ndim - 1);
    dl_matmul_into(ga, gy, &bt, 1.0, 1.0);
  }
  if (gb) dl__matmul_grad_b(tp, gb, a, gy);
}
DL_API void dl__t_matmul_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *a = n->in[0], *b = n->in[1], *gy = n->out->grad;
  dl_tensor *ga = dl_tape_grad(tp, a), *gb = dl_tape_grad(tp, b);
  dl__matmul_grads(tp, ga, gb, gy, a, b);
  if (tp->hvp) { /* d(ga) = d(gy) b^T + gy tb^T, d(gb) = a^T d(gy) + ta^T gy */
    dl__matmul_grads(tp, ga ? ga->tangent : NULL, gb ? gb->tangent : NULL, gy->tangent, a, b);
    if (ga && b->tangent) dl__matmul_grads(tp, ga->tangent, NULL, gy, a, b->tangent);
    if (gb && a->tangent) dl__matmul_grads(tp, NULL, gb->tangent, gy, a->tangent, b);
  }
}
/* y = a @ b: a [..., M, K], b [K, N] (shared by every batch) or [..., K, N]
 * with a's batch dimensions; y [..., M, N]. Transposed views are read
 * without copying. Tangent: ta @ b + a @ tb. */
DL_API dl_tensor *dl_t_matmul(dl_tape *tp, dl_tensor *a, dl_tensor *b) {
  dl_tensor *y;
  int64_t shape[DL_MAX_DIMS];
  int d;
  dl__ops_same_float("dl_t_matmul", a, b);
  if (a->ndim < 2 || b->ndim < 2 || (b->ndim != 2 && b->ndim != a->ndim) ||
      a->shape[a->ndim - 1] != b->shape[b->ndim - 2])
    DL_PANIC(a->ctx, "dl_t_matmul", "shape mismatch: %s @ %s", DL_SHAPESTR(a), DL_SHAPESTR(b));
  for (d = 0; d < a->ndim - 2; d++) {
    if (b->ndim > 2 && b->shape[d] != a->shape[d])
      DL_PANIC(a->ctx, "dl_t_matmul", "batch dimensions differ: %s @ %s", DL_SHAPESTR(a), DL_SHAPESTR(b));
    shape[d] = a->shape[d];
  }
  shape[a->ndim - 2] = a->shape[a->ndim - 2];
  shape[a->ndim - 1] = b->shape[b->ndim - 1];
  y = dl_tape_out(tp, "dl_t_matmul", a->dtype, a->ndim, shape);
  dl_matmul_into(y, a, b, 1.0, 0.0);
  if (a->tangent || b->tangent) {
    dl_tensor *ty = dl_tape_tangent(tp, y);
    if (a->tangent) dl_matmul_into(ty, a->tangent, b, 1.0, 1.0);
    if (b->tangent) dl_matmul_into(ty, a, b->tangent, 1.0, 1.0);
  }
  {
    dl_node *nd = dl_tape_record(tp, "dl_t_matmul", dl__t_matmul_bw, y, a, b, NULL);
    if (nd) nd->flags |= DL_NODE_HVP;
  }
  return y;
}

/* gx += gy w, gw += gy^T xc, gb += the column sums of gy (each NULL: skipped);
 * xc contiguous, gx and gy contiguous (gradients). */
DL_API void dl__linear_grads(dl_tensor *gx, dl_tensor *gw, dl_tensor *gb, const dl_tensor *gy, const dl_tensor *xc,
                             const dl_tensor *w) {
  const int64_t in = w->shape[1];
  dl_tensor g2 = dl_view_reshape(gy, DL_SHAPE(-1, gy->shape[gy->ndim - 1]));
  if (gx) {
    dl_tensor gx2 = dl_view_reshape(gx, DL_SHAPE(-1, in));
    dl_matmul_into(&gx2, &g2, w, 1.0, dl__grad_take(gx) ? 0.0 : 1.0); /* a tape gradient not zeroed: written */
  }
  if (gw) {
    dl_tensor x2 = dl_view_reshape(xc, DL_SHAPE(-1, in));
    dl_tensor gt = dl_view_transpose(&g2, 0, 1);
    dl_matmul_into(gw, &gt, &x2, 1.0, 1.0);
  }
  if (gb) dl_sum_to_into(gb, gy);
}
DL_API void dl__t_linear_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *x = n->in[0], *w = n->saved[1], *b = n->nin > 2 ? n->in[2] : NULL, *gy = n->out->grad;
  dl_tensor *gx = dl__tape_grad_w(tp, x), *gw = dl_tape_grad(tp, n->in[1]), *gb = dl_tape_grad(tp, b);
  dl__linear_grads(gx, gw, gb, gy, n->saved[0], w); /* saved[0]: x, or the contiguous copy the forward made */
  if (tp->hvp) { /* d(gx) = d(gy) w + gy tw, d(gw) = d(gy)^T x + gy^T tx, d(gb) = sums of d(gy) */
    dl__linear_grads(gx ? gx->tangent : NULL, gw ? gw->tangent : NULL, gb ? gb->tangent : NULL, gy->tangent,
                     n->saved[0], w);
    if (gx && n->in[1]->tangent) {
      dl_tensor *tw = dl__t_contig(tp, n->op, n->in[1]->tangent);
      dl__linear_grads(gx->tangent, NULL, NULL, gy, n->saved[0], tw);
    }
    if (gw && x->tangent) dl__linear_grads(NULL, gw->tangent, NULL, gy, dl__t_contig(tp, n->op, x->tangent), w);
  }
}
/* y = x @ w^T + b (PyTorch's Linear: w [out, in], b [out] or NULL); x [...,
 * in] -> y [..., out]. One GEMM; the bias is its initial value. Tangent:
 * tx w^T + x tw^T + tb; second order (dl_hvp) by the product rule. */
DL_API dl_tensor *dl_t_linear(dl_tape *tp, dl_tensor *x, dl_tensor *w, dl_tensor *b) {
  dl_tensor *y, *xc, *wc, x2, y2, wt;
  int64_t shape[DL_MAX_DIMS];
  int d;
  dl__ops_same_float("dl_t_linear", x, w);
  if (b) dl__ops_same_float("dl_t_linear", x, b);
  if (x->ndim < 1 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[1] ||
      (b && (b->ndim != 1 || b->shape[0] != w->shape[0])))
    DL_PANIC(x->ctx, "dl_t_linear", "shape mismatch: x %s, weight %s, bias %s", DL_SHAPESTR(x),
             DL_SHAPESTR(w), b ? DL_SHAPESTR(b) : "none");
  for (d = 0; d < x->ndim - 1; d++) shape[d] = x->shape[d];
  shape[x->ndim - 1] = w->shape[0];
  y = dl_tape_out(tp, "dl_t_linear", x->dtype, x->ndim, shape);
#ifdef DL_USE_CUDA
  if (b && y->device == DL_CUDA) dl_mul_scalar_into(y, b, 1.0); /* the bias broadcast over the rows */
  else
#endif
  if (b && b->device == DL_CPU && y->device == DL_CPU && dl_tensor_is_contiguous(b)) { /* each row a copy of b, for beta = 1 below */
    const size_t row = (size_t)b->numel * dl_dtype_size(b->dtype);
    const int64_t rows = b->numel ? y->numel / b->numel : 0, per = 64; /* rows per task */
    DL_PARALLEL_FOR(tp->ctx, y->numel, (rows + per - 1) / per, dl__t, {
      int64_t r;
      for (r = dl__t * per; r < rows && r < (dl__t + 1) * per; r++) memcpy((char *)y->data + (size_t)r * row, b->data, row);
    });
  } else if (b) {
    dl_mul_scalar_into(y, b, 1.0); /* b broadcast over the rows, exactly */
  }
  xc = dl__t_contig(tp, "dl_t_linear", x);
  /* GEMM reads a matrix with a unit stride in one of its dims; a weight
   * view with neither (every other column) is copied once */
  wc = w->strides[0] == 1 || w->strides[1] == 1 ? w : dl__t_contig(tp, "dl_t_linear", w);
  x2 = dl_view_reshape(xc, DL_SHAPE(-1, x->shape[x->ndim - 1]));
  y2 = dl_view_reshape(y, DL_SHAPE(-1, w->shape[0]));
  wt = dl_view_transpose(wc, 0, 1);
  dl_matmul_into(&y2, &x2, &wt, 1.0, b ? 1.0 : 0.0);
  if (x->tangent || w->tangent || (b && b->tangent)) {
    dl_tensor *ty = dl_tape_tangent(tp, y), ty2 = dl_view_reshape(ty, DL_SHAPE(-1, w->shape[0]));
    if (b && b->tangent) dl_mul_scalar_into(ty, b->tangent, 1.0); /* host or device */
    if (x->tangent) {
      dl_tensor *tc = dl__t_contig(tp, "dl_t_linear", x->tangent);
      dl_tensor t2 = dl_view_reshape(tc, DL_SHAPE(-1, x->shape[x->ndim - 1]));
      dl_matmul_into(&ty2, &t2, &wt, 1.0, 1.0);
    }
    if (w->tangent) {
      dl_tensor twt = dl_view_transpose(w->tangent, 0, 1);
      dl_matmul_into(&ty2, &x2, &twt, 1.0, 1.0);
    }
  }
  {
    dl_node *n = dl_tape_record(tp, "dl_t_linear", dl__t_linear_bw, y, x, w, b);
    if (n) {
      n->saved[0] = xc;
      n->saved[1] = wc;
      n->flags |= DL_NODE_HVP;
    }
  }
  return y;
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_OPS_CORE_H */
