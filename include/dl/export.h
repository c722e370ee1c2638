/* dl/export.h - a trained dl_model as a micro model (dl/micro.h): f32 or
 * int8, evaluated on the host, written as C source for firmware.
 *
 *   dl_micro_model *q;
 *   dl_micro_desc d = {.name = "fashion_mlp_int8", .precision = DLM_INT8,
 *                      .c = 1, .h = 28, .w = 28,
 *                      .norm = DL_NORM_STANDARDIZE, .mean = 0.2860, .std = 0.3530,
 *                      .calib = &train, .calib_n = 500};
 *   if (dl_micro_from_model(ctx, model, &d, &q) != DL_OK) ...   // message in ctx
 *   dl_micro_evaluate(ctx, q, &test, 0, &acc, NULL);             // the same kernels as the firmware
 *   dl_micro_write(ctx, q, "gen/fashion_mlp_int8");               // gen/fashion_mlp_int8.{c,h}
 *   dl_micro_free(q);
 *
 * What it takes from the model (its root and Sequential containers, in
 * order): Linear, Conv2d (groups 1), BatchNorm1d/2d right after a Linear
 * or Conv2d in the same container (folded into it: w * g / sqrt(var + eps),
 * (b - mean) * g / sqrt(var + eps) + beta, with the running statistics),
 * ReLU (fused into the layer before it when that is a Linear, Conv2d or a
 * residual sum; a layer of its own otherwise), MaxPool2d, AvgPool2d,
 * GlobalAvgPool, Flatten (free: a linear layer reads any tensor as a
 * vector), Dropout and Identity activations (dropped: inference), Residual
 * (an add). Anything else (another activation, an RNN, attention, a
 * Module with its own forward) is refused with a status naming the layer.
 *
 * The input: u8 pixels [c, h, w], mapped by the normalisation (as in
 * dl_batcher_desc: DL_NORM_STANDARDIZE (x * scale - mean) / std, SCALE x *
 * scale, NONE x; scale 0 = 1/255) into a 256-entry table, so the firmware
 * converts a pixel by one lookup.
 *
 * int8 post-training quantisation: weights symmetric per output channel
 * (scale max|w| / 127); activations asymmetric per tensor, their ranges
 * the minimum and maximum (with 0) seen on the first calib_n samples of
 * calib (default 500) by the f32 plan itself; pooling and ReLU keep their
 * input's parameters; bias in the accumulator's scale; requantisation by a
 * Q31 multiplier and a shift (micro.h).
 */
#ifndef DL_EXPORT_H
#define DL_EXPORT_H

#include "core.h"
#include "file.h"
#include "layers.h"
#include "data.h"
#include "micro.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* C and C++; nvcc sees only dl/micro.h (which it includes above). */
#ifndef DL__SCALAR_ONLY
DL__HEADER_BEGIN

/* How dl_micro_from_model builds a micro model (see the top of this file):
 * its name, precision, input shape and normalisation, and the int8
 * calibration samples. */
typedef struct dl_micro_desc {
  const char *name;        /* C identifier of the model (and the files' prefix); required */
  int precision;           /* DLM_F32 (0 also) or DLM_INT8 */
  int64_t c, h, w;         /* the input's shape (a vector: c = n, h = w = 1; 0 = 1) */
  dl_norm norm;            /* pixel -> input (DL_NORM_DEFAULT: SCALE) */
  double scale, mean, std; /* as dl_batcher_desc: scale 0 = 1/255, std 0 = 1 */
  const dl_dataset *calib; /* int8: u8 samples whose activations set the ranges */
  int64_t calib_n;         /* how many (0: 500; fewer if calib has fewer) */
} dl_micro_desc;

/* A micro model built on the host: the dlm_model and the arrays it points to. */
typedef struct dl_micro_model {
  dlm_model m; /* the plan (its arrays below) */
  dlm_layer *layers; /* the layers (owned) */
  dlm_tensor *tensors; /* the tensors (owned) */
  int caplayers, captensors; /* their capacities */
  float lut[256]; /* f32: pixel -> input value */
  int8_t lut_q[256]; /* int8: pixel -> quantised input */
  void **blocks; /* every array the layers point to (and the names), owned */
  int nblocks, capblocks; /* blocks and their capacity */
  char name[64]; /* the model's C identifier */
  dl_ctx *ctx; /* allocator and error reports */
} dl_micro_model;

/* Release a micro model made by dl_micro_from_model (NULL is fine). */
DL_API void dl_micro_free(dl_micro_model *q) {
  int i;
  if (!q) return;
  for (i = 0; i < q->nblocks; i++) dl_free(q->ctx, q->blocks[i]);
  dl_free(q->ctx, q->blocks);
  dl_free(q->ctx, q->layers);
  dl_free(q->ctx, q->tensors);
  dl_free(q->ctx, q);
}

/* >>building -------------------------------------------------------------------- */

/* An owned zeroed array of n bytes (NULL: out of memory, in ctx). */
DL_API void *dl__micro_block(dl_micro_model *q, size_t n) {
  void *p;
  if (!dl__grow(q->ctx, (void **)&q->blocks, &q->capblocks, q->nblocks + 1, sizeof(void *))) return NULL;
  if (!(p = dl_alloc(q->ctx, n ? n : 1))) return NULL;
  memset(p, 0, n ? n : 1);
  q->blocks[q->nblocks++] = p;
  return p;
}
DL_API int dl__micro_tensor(dl_micro_model *q, int64_t c, int64_t h, int64_t w) {
  dlm_tensor *t;
  if (c <= 0 || h <= 0 || w <= 0 || c * h * w > 0x1fffffff) {
    dl_fail(q->ctx, DL_ERR_SHAPE, "dl_micro_from_model: a tensor of [%lld, %lld, %lld] does not fit a micro model",
            (long long)c, (long long)h, (long long)w);
    return -1;
  }
  if (!dl__grow(q->ctx, (void **)&q->tensors, &q->captensors, q->m.ntensors + 1, sizeof(dlm_tensor))) return -1;
  t = &q->tensors[q->m.ntensors];
  memset(t, 0, sizeof *t);
  t->c = (int32_t)c; t->h = (int32_t)h; t->w = (int32_t)w;
  t->scale = 1;
  q->m.tensors = q->tensors;
  return q->m.ntensors++;
}
/* A new layer of op reading tensor in, named after the model layer. */
DL_API dlm_layer *dl__micro_layer(dl_micro_model *q, int op, int in, const char *name) {
  dlm_layer *l;
  char *nm;
  if (!dl__grow(q->ctx, (void **)&q->layers, &q->caplayers, q->m.nlayers + 1, sizeof(dlm_layer))) return NULL;
  if (!(nm = (char *)dl__micro_block(q, strlen(name) + 1))) return NULL;
  memcpy(nm, name, strlen(name) + 1);
  l = &q->layers[q->m.nlayers++];
  memset(l, 0, sizeof *l);
  l->op = op;
  l->in = in;
  l->in2 = -1;
  l->out = -1;
  l->name = nm;
  q->m.layers = q->layers;
  return l;
}
/* Copies a host f32/f64 parameter into a new f32 array of n elements. */
DL_API float *dl__micro_copy_param(dl_micro_model *q, const dl_tensor *t, int64_t n, const char *lname) {
  float *p;
  int64_t i;
  if (t && (t->device != DL_CPU || (t->dtype != DL_F32 && t->dtype != DL_F64) || t->numel != n)) {
    dl_fail(q->ctx, DL_ERR_UNSUPPORTED, "dl_micro_from_model: layer '%s': a parameter that is not %lld f32/f64 "
            "values on the host", lname, (long long)n);
    return NULL;
  }
  if (!(p = (float *)dl__micro_block(q, (size_t)n * sizeof(float)))) return NULL;
  if (t)
    for (i = 0; i < n; i++) {
      p[i] = t->dtype == DL_F32 ? ((const float *)t->data)[i] : (float)((const double *)t->data)[i];
      if (!isfinite(p[i])) {
        dl_fail(q->ctx, DL_ERR_FORMAT, "dl_micro_from_model: layer '%s': parameter element %lld is %g (not finite)",
                lname, (long long)i, (double)p[i]);
        return NULL;
      }
    }
  return p;
}

/* The walk over a container's children: *cur is the current tensor, *last
 * the micro layer that wrote it within this container (-1: none; batch
 * norm and ReLU fold only into that one). */
DL_API dl_status dl__micro_walk(dl_micro_model *q, dl_layer *const *ch, int n, int *cur, int *last);

DL_API dl_status dl__micro_one(dl_micro_model *q, dl_layer *l, int *cur, int *last) {
  dl_ctx *ctx = q->ctx;
  const char *type = l->vt->type;
  dlm_tensor X = q->tensors[*cur];
  dlm_layer *L;
  int o;
  if (l->vt == &dl__lay_seq_vt || l->vt == &dl__lay_root_vt) {
    if (l->fn) goto unsupported;
    {
      int inner = -1;
      dl_status s = dl__micro_walk(q, l->child, l->nchild, cur, &inner);
      *last = -1; /* what the container wrote is not foldable from outside */
      return s;
    }
  }
  if (l->vt == &dl__lay_dropout_vt || l->vt == &dl__lay_flatten_vt) return DL_OK; /* inference; flatten is free */
  if (l->vt == &dl__lay_act_vt) {
    dl_act a = ((dl__lay_act_layer *)l)->act;
    if (a == DL_ACT_NONE) return DL_OK;
    if (a != DL_ACT_RELU) goto unsupported;
    if (*last >= 0 && !q->layers[*last].relu &&
        (q->layers[*last].op == DLM_OP_LINEAR || q->layers[*last].op == DLM_OP_CONV2D || q->layers[*last].op == DLM_OP_ADD)) {
      q->layers[*last].relu = 1;
      return DL_OK;
    }
    if ((o = dl__micro_tensor(q, X.c, X.h, X.w)) < 0 || !(L = dl__micro_layer(q, DLM_OP_RELU, *cur, l->name)))
      return ctx->status;
    L->out = o;
    *cur = o;
    *last = -1;
    return DL_OK;
  }
  if (l->vt == &dl__lay_linear_vt) {
    const dl__lay_linear *F = (const dl__lay_linear *)l;
    const int64_t in = (int64_t)X.c * X.h * X.w;
    if (F->d.in != in)
      return dl_fail(ctx, DL_ERR_SHAPE, "dl_micro_from_model: layer '%s' (Linear) takes %lld inputs, the tensor before it "
                     "has %lld ([%d, %d, %d])", l->name, (long long)F->d.in, (long long)in, X.c, X.h, X.w);
    if ((o = dl__micro_tensor(q, F->d.out, 1, 1)) < 0 || !(L = dl__micro_layer(q, DLM_OP_LINEAR, *cur, l->name)))
      return ctx->status;
    L->out = o;
    L->nweight = (uint32_t)(F->d.out * in);
    L->nbias = (uint32_t)F->d.out;
    if (!(L->wf = dl__micro_copy_param(q, F->w, F->d.out * in, l->name)) ||
        !(L->bf = dl__micro_copy_param(q, F->b, F->d.out, l->name)))
      return ctx->status;
    *last = (int)(L - q->layers);
    *cur = o;
    return DL_OK;
  }
  if (l->vt == &dl__lay_conv2d_vt) {
    const dl__lay_conv *C = (const dl__lay_conv *)l;
    const dl_conv2d_desc *d = &C->d;
    int32_t ho, wo;
    if (d->groups != 1)
      return dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_micro_from_model: layer '%s' (Conv2d): groups %d (only 1)", l->name,
                     d->groups);
    if (d->pad_mode != DL_PAD_SYMMETRIC)
      return dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_micro_from_model: layer '%s' (Conv2d): pad_mode %d (dl/micro.h pads "
                     "symmetrically)", l->name, d->pad_mode);
    if (d->in != X.c)
      return dl_fail(ctx, DL_ERR_SHAPE, "dl_micro_from_model: layer '%s' (Conv2d) takes %lld channels, the tensor "
                     "before it is [%d, %d, %d]", l->name, (long long)d->in, X.c, X.h, X.w);
    ho = dlm__out_dim(X.h, d->kernel, d->stride, d->padding, d->dilation);
    wo = dlm__out_dim(X.w, d->kernel_w, d->stride_w, d->padding_w, d->dilation_w);
    if ((o = dl__micro_tensor(q, d->out, ho, wo)) < 0 || !(L = dl__micro_layer(q, DLM_OP_CONV2D, *cur, l->name)))
      return ctx->status;
    L->out = o;
    L->kh = d->kernel; L->kw = d->kernel_w; L->sh = d->stride; L->sw = d->stride_w;
    L->ph = d->padding; L->pw = d->padding_w; L->dh = d->dilation; L->dw = d->dilation_w;
    L->nweight = (uint32_t)(d->out * d->in * d->kernel * d->kernel_w);
    L->nbias = (uint32_t)d->out;
    if (!(L->wf = dl__micro_copy_param(q, C->w, (int64_t)L->nweight, l->name)) ||
        !(L->bf = dl__micro_copy_param(q, C->b, d->out, l->name)))
      return ctx->status;
    *last = (int)(L - q->layers);
    *cur = o;
    return DL_OK;
  }
  if (l->vt == &dl__lay_bn1d_vt || l->vt == &dl__lay_bn2d_vt) {
    const dl__lay_batchnorm *B = (const dl__lay_batchnorm *)l;
    dlm_layer *P = *last >= 0 ? &q->layers[*last] : NULL;
    float *w, *b;
    int64_t c, k, per;
    if (!P || (P->op != DLM_OP_LINEAR && P->op != DLM_OP_CONV2D) || P->relu)
      return dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_micro_from_model: layer '%s' (%s) must follow a Linear or Conv2d in "
                     "the same container (it is folded into it)", l->name, type);
    if (!B->rm || !B->rv)
      return dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_micro_from_model: layer '%s' (%s) has no running statistics", l->name,
                     type);
    c = B->d.features;
    if (c != (int64_t)P->nbias)
      return dl_fail(ctx, DL_ERR_SHAPE, "dl_micro_from_model: layer '%s' (%s) has %lld features after %u channels",
                     l->name, type, (long long)c, (unsigned)P->nbias);
    {
      float *rm = dl__micro_copy_param(q, B->rm, c, l->name), *rv = dl__micro_copy_param(q, B->rv, c, l->name);
      float *g = B->w ? dl__micro_copy_param(q, B->w, c, l->name) : NULL;
      float *be = B->b ? dl__micro_copy_param(q, B->b, c, l->name) : NULL;
      const double eps = B->d.eps > 0 ? B->d.eps : 1e-5;
      if (!rm || !rv || (B->w && !g) || (B->b && !be)) return ctx->status;
      w = (float *)P->wf;
      b = (float *)P->bf;
      per = (int64_t)P->nweight / c;
      for (k = 0; k < c; k++) {
        const double s = (g ? g[k] : 1.0) / sqrt((double)rv[k] + eps);
        int64_t j;
        if (!((double)rv[k] + eps > 0) || !isfinite(s))
          return dl_fail(ctx, DL_ERR_FORMAT, "dl_micro_from_model: layer '%s' (%s): channel %lld has running_var %g: "
                         "no finite scale to fold", l->name, type, (long long)k, (double)rv[k]);
        for (j = 0; j < per; j++) {
          w[k * per + j] = (float)(w[k * per + j] * s);
          if (!isfinite(w[k * per + j]))
            return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_micro_from_model: layer '%s' (%s): folding channel %lld "
                           "overflows float", l->name, type, (long long)k);
        }
        b[k] = (float)(((double)b[k] - rm[k]) * s + (be ? be[k] : 0.0));
        if (!isfinite(b[k]))
          return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_micro_from_model: layer '%s' (%s): folding channel %lld overflows "
                         "float", l->name, type, (long long)k);
      }
    }
    return DL_OK; /* P stays the last layer: a ReLU after the batch norm fuses into it */
  }
  if (l->vt == &dl__lay_maxpool_vt || l->vt == &dl__lay_avgpool_vt) {
    const dl_pool2d_args *a = &((const dl__lay_pool *)l)->a;
    int32_t ho, wo;
    if (a->pad_mode != DL_PAD_SYMMETRIC || a->ceil_mode || a->dil_h > 1 || a->dil_w > 1)
      return dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_micro_from_model: layer '%s' (%s): dl/micro.h pools with symmetric "
                     "padding, floor sizes and no dilation; this one has%s%s%s", l->name, type,
                     a->pad_mode != DL_PAD_SYMMETRIC ? " explicit or SAME padding" : "",
                     a->ceil_mode ? " ceil_mode" : "", a->dil_h > 1 || a->dil_w > 1 ? " dilation" : "");
    ho = dlm__out_dim(X.h, a->kernel_h, a->stride_h, a->pad_h, 1);
    wo = dlm__out_dim(X.w, a->kernel_w, a->stride_w, a->pad_w, 1);
    if ((o = dl__micro_tensor(q, X.c, ho, wo)) < 0 ||
        !(L = dl__micro_layer(q, l->vt == &dl__lay_maxpool_vt ? DLM_OP_MAXPOOL2D : DLM_OP_AVGPOOL2D, *cur, l->name)))
      return ctx->status;
    L->out = o;
    L->kh = a->kernel_h; L->kw = a->kernel_w; L->sh = a->stride_h; L->sw = a->stride_w;
    L->ph = a->pad_h; L->pw = a->pad_w;
    L->exclude_pad = a->exclude_pad;
    *cur = o;
    *last = -1;
    return DL_OK;
  }
  if (l->vt == &dl__lay_gap_vt) {
    if ((o = dl__micro_tensor(q, X.c, 1, 1)) < 0 || !(L = dl__micro_layer(q, DLM_OP_GLOBAL_AVGPOOL, *cur, l->name)))
      return ctx->status;
    L->out = o;
    *cur = o;
    *last = -1;
    return DL_OK;
  }
  if (l->vt == &dl__lay_residual_vt) {
    const dl_act act = ((const dl__lay_residual *)l)->act;
    int h = *cur, s = *cur, hl = -1, sl = -1, i;
    dl_status st;
    dl_layer *sc = dl_layer_child(l, "shortcut");
    if (act != DL_ACT_NONE && act != DL_ACT_RELU) goto unsupported;
    for (i = 0; i < l->nchild; i++)
      if (l->child[i] != sc && (st = dl__micro_one(q, l->child[i], &h, &hl)) != DL_OK) return st;
    if (sc && (st = dl__micro_one(q, sc, &s, &sl)) != DL_OK) return st;
    if (dlm_tensor_numel(&q->tensors[h]) != dlm_tensor_numel(&q->tensors[s]) || q->tensors[h].c != q->tensors[s].c)
      return dl_fail(ctx, DL_ERR_SHAPE, "dl_micro_from_model: layer '%s' (Residual) adds [%d, %d, %d] to [%d, %d, %d]",
                     l->name, q->tensors[h].c, q->tensors[h].h, q->tensors[h].w, q->tensors[s].c, q->tensors[s].h,
                     q->tensors[s].w);
    if ((o = dl__micro_tensor(q, q->tensors[h].c, q->tensors[h].h, q->tensors[h].w)) < 0 ||
        !(L = dl__micro_layer(q, DLM_OP_ADD, h, l->name)))
      return ctx->status;
    L->in2 = s;
    L->out = o;
    L->relu = act == DL_ACT_RELU;
    *cur = o;
    *last = (int)(L - q->layers);
    return DL_OK;
  }
unsupported:
  return dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_micro_from_model: layer '%s' (%s%s%s) has no micro-model kernel "
                 "(Linear, Conv2d, BatchNorm, ReLU, pooling, Flatten, Dropout, Residual)", l->name, type,
                 l->vt == &dl__lay_act_vt ? " " : "",
                 l->vt == &dl__lay_act_vt ? dl_act_name(((dl__lay_act_layer *)l)->act) : "");
}
DL_API dl_status dl__micro_walk(dl_micro_model *q, dl_layer *const *ch, int n, int *cur, int *last) {
  int i;
  for (i = 0; i < n; i++) {
    dl_status s = dl__micro_one(q, ch[i], cur, last);
    if (s != DL_OK) return s;
  }
  return DL_OK;
}

/* Arena offsets: with reuse, each tensor at the lowest 4-aligned offset
 * where it overlaps no tensor alive at the same time (alive: from the
 * layer that writes it to the last layer that reads it; the output to the
 * end); without, one after another. Sets arena_bytes and scratch_offset. */
DL_API dl_status dl__micro_plan(dl_micro_model *q, int reuse) {
  dlm_model *m = &q->m;
  const uint32_t es = dlm_elem_size(m);
  int32_t *first, *lastu;
  int i, j, *order;
  uint64_t end = 0;
  if (!(first = (int32_t *)dl_alloc(q->ctx, (size_t)m->ntensors * 3 * sizeof(int32_t)))) return q->ctx->status;
  lastu = first + m->ntensors;
  order = (int *)(lastu + m->ntensors);
  for (i = 0; i < m->ntensors; i++) { first[i] = -1; lastu[i] = -1; }
  for (i = 0; i < m->nlayers; i++) {
    const dlm_layer *l = &m->layers[i];
    first[l->out] = i;
    lastu[l->in] = i;
    if (l->in2 >= 0) lastu[l->in2] = i;
  }
  lastu[m->output] = m->nlayers;
  for (i = 0; i < m->ntensors; i++) {
    if (lastu[i] < first[i]) lastu[i] = first[i]; /* written, never read */
    order[i] = i;
  }
  /* tensors in the order they are written (the input first) */
  for (i = 1; i < m->ntensors; i++)
    for (j = i; j > 0 && first[order[j - 1]] > first[order[j]]; j--) {
      int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
    }
  for (i = 0; i < m->ntensors; i++) {
    const int t = order[i];
    const uint32_t bytes = (dlm_tensor_numel(&q->tensors[t]) * es + 3u) & ~3u;
    uint32_t off = 0;
    int moved = 1;
    if (!reuse) off = (uint32_t)end;
    while (reuse && moved) { /* first fit: move past every live tensor it would overlap */
      moved = 0;
      for (j = 0; j < i; j++) {
        const int u = order[j];
        const uint32_t ub = (dlm_tensor_numel(&q->tensors[u]) * es + 3u) & ~3u, uo = q->tensors[u].offset;
        if (first[u] <= lastu[t] && first[t] <= lastu[u] && off < uo + ub && uo < off + bytes) {
          off = uo + ub;
          moved = 1;
        }
      }
    }
    q->tensors[t].offset = off;
    if ((uint64_t)off + bytes > end) end = (uint64_t)off + bytes;
  }
  dl_free(q->ctx, first);
  m->scratch_offset = (uint32_t)end;
  m->arena_bytes = 0;
  m->arena_bytes = dlm_arena_size(m);
  if (!m->arena_bytes) return dl_fail(q->ctx, DL_ERR_OVERFLOW, "dl_micro_from_model: the arena exceeds 2 GiB");
  return DL_OK;
}

/* M = q * 2^(shift - 31), q in [2^30, 2^31) (or smaller at shift -31). */
DL_API int dl__micro_multiplier(double M, int32_t *mult, int32_t *shift) {
  int e;
  double f;
  long long qv;
  if (!(M >= 0) || M >= 1073741824.0) return 1;
  if (M == 0) { *mult = 0; *shift = 0; return 0; }
  f = frexp(M, &e);
  qv = llround(f * 2147483648.0);
  if (qv == 2147483648LL) { qv /= 2; e++; }
  if (e > 30) return 1;
  if (e < -31) { e = -31; qv = llround(M * 4611686018427387904.0); } /* M * 2^62 < 2^31 */
  *mult = (int32_t)qv;
  *shift = e;
  return 0;
}

/* int8: ranges from calibration, quantised weights and multipliers. The
 * f32 plan is q itself (offsets without reuse so that every tensor
 * survives a run); the int8 arrays replace the f32 ones. */
DL_API dl_status dl__micro_quantize(dl_micro_model *q, const dl_micro_desc *d) {
  dl_ctx *ctx = q->ctx;
  dlm_model *m = &q->m;
  const dl_dataset *ds = d->calib;
  int64_t n = d->calib_n > 0 ? d->calib_n : 500, k, per;
  float *lo, *hi;
  unsigned char *arena;
  int i, t;
  dl_status s;
  dlm_error e;
  if (!ds || !ds->x || ds->x->dtype != DL_U8 || ds->n <= 0)
    return dl_fail(ctx, DL_ERR_ARG, "dl_micro_from_model: int8 needs calibration samples: a dataset of u8 images");
  per = ds->x->numel / (ds->x->shape[0] ? ds->x->shape[0] : 1);
  if (per != dlm_tensor_numel(&m->tensors[m->input]))
    return dl_fail(ctx, DL_ERR_SHAPE, "dl_micro_from_model: calibration samples of %lld values for an input of %u",
                   (long long)per, (unsigned)dlm_tensor_numel(&m->tensors[m->input]));
  if (n > ds->n) n = ds->n;
  if ((s = dl__micro_plan(q, 0)) != DL_OK) return s;
  if (!(lo = (float *)dl_alloc(ctx, (size_t)m->ntensors * 2 * sizeof(float)))) return ctx->status;
  hi = lo + m->ntensors;
  for (t = 0; t < m->ntensors; t++) lo[t] = hi[t] = 0; /* every range holds 0 */
  if (!(arena = (unsigned char *)dl_alloc(ctx, m->arena_bytes))) { dl_free(ctx, lo); return ctx->status; }
  for (k = 0; k < n; k++) {
    const uint8_t *px = (const uint8_t *)ds->x->data + dl_dataset_row(ds, k) * per;
    if (dlm_run_u8(m, arena, m->arena_bytes, px, (size_t)per, &e) != DLM_OK) {
      dl_free(ctx, arena); dl_free(ctx, lo);
      return dl_fail(ctx, DL_ERR_FORMAT, "dl_micro_from_model: %s", e.msg);
    }
    for (t = 0; t < m->ntensors; t++) {
      const float *v = (const float *)(void *)(arena + m->tensors[t].offset);
      uint32_t j, nt = dlm_tensor_numel(&m->tensors[t]);
      for (j = 0; j < nt; j++) {
        if (v[j] < lo[t]) lo[t] = v[j];
        if (v[j] > hi[t]) hi[t] = v[j];
      }
    }
  }
  dl_free(ctx, arena);
  for (t = 0; t < 256; t++) { /* the input's range is the table's, exactly */
    if (q->lut[t] < lo[m->input]) lo[m->input] = q->lut[t];
    if (q->lut[t] > hi[m->input]) hi[m->input] = q->lut[t];
  }
  for (t = 0; t < m->ntensors; t++) { /* asymmetric: [lo, hi] onto [-128, 127] */
    double sc = ((double)hi[t] - lo[t]) / 255.0, z;
    if (!(sc > 1e-9)) sc = 1.0 / 255.0; /* a tensor that stayed 0 (a dead ReLU): any scale holds it; a unit range */
    z = floor(-128.0 - lo[t] / sc + 0.5);
    q->tensors[t].scale = (float)sc;
    q->tensors[t].zero = (int32_t)(z < -128 ? -128 : z > 127 ? 127 : z);
  }
  dl_free(ctx, lo);
  for (i = 0; i < m->nlayers; i++) { /* pooling and ReLU: the input's parameters */
    const dlm_layer *l = &m->layers[i];
    if (l->op != DLM_OP_LINEAR && l->op != DLM_OP_CONV2D && l->op != DLM_OP_ADD) {
      q->tensors[l->out].scale = q->tensors[l->in].scale;
      q->tensors[l->out].zero = q->tensors[l->in].zero;
    }
  }
  {
    const dlm_tensor *X = &m->tensors[m->input];
    for (t = 0; t < 256; t++) {
      double v = floor(q->lut[t] / (double)X->scale + 0.5) + X->zero;
      q->lut_q[t] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
    }
  }
  for (i = 0; i < m->nlayers; i++) {
    dlm_layer *l = &q->layers[i];
    const dlm_tensor *X = &m->tensors[l->in], *Y = &m->tensors[l->out];
    if (l->op == DLM_OP_LINEAR || l->op == DLM_OP_CONV2D) {
      const uint32_t co = l->nbias, per_c = l->nweight / co;
      int8_t *wq;
      if (per_c >= 65536) /* |bias| + taps x 2^15 must stay below 2^31 (micro.h's check) */
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_micro_from_model: layer '%s' has %u inputs per output; an int8 "
                       "layer takes at most 65535 (the int32 accumulator)", l->name, (unsigned)per_c);
      wq = (int8_t *)dl__micro_block(q, l->nweight);
      int32_t *bq = (int32_t *)dl__micro_block(q, co * sizeof(int32_t));
      int32_t *mult = (int32_t *)dl__micro_block(q, co * sizeof(int32_t));
      int32_t *shift = (int32_t *)dl__micro_block(q, co * sizeof(int32_t));
      uint32_t c, j;
      if (!wq || !bq || !mult || !shift) return ctx->status;
      for (c = 0; c < co; c++) {
        const float *w = l->wf + (size_t)c * per_c;
        double amax = 0, sw, b;
        for (j = 0; j < per_c; j++) amax = fabs(w[j]) > amax ? fabs(w[j]) : amax;
        sw = amax > 0 ? amax / 127.0 : 1.0;
        for (j = 0; j < per_c; j++) {
          double v = floor(w[j] / sw + 0.5);
          wq[(size_t)c * per_c + j] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
        }
        b = floor(l->bf[c] / ((double)X->scale * sw) + 0.5);
        if (fabs(b) > 2147483647.0)
          return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_micro_from_model: layer '%s': a bias of %g does not fit int32 at "
                         "scale %g", l->name, (double)l->bf[c], (double)X->scale * sw);
        if (fabs(b) + (double)per_c * 32768.0 > 2147483647.0)
          return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_micro_from_model: layer '%s': a bias of %g at scale %g and %u taps "
                         "could overflow the int32 accumulator", l->name, (double)l->bf[c], (double)X->scale * sw,
                         (unsigned)per_c);
        bq[c] = (int32_t)b;
        if (dl__micro_multiplier((double)X->scale * sw / Y->scale, &mult[c], &shift[c]))
          return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_micro_from_model: layer '%s': requantisation factor %g out of range",
                         l->name, (double)X->scale * sw / Y->scale);
      }
      l->wq = wq; l->bq = bq; l->mult = mult; l->shift = shift;
      l->wf = NULL; l->bf = NULL;
    } else if (l->op == DLM_OP_ADD) {
      const double sa = X->scale, sb = m->tensors[l->in2].scale, tw = 2 * (sa > sb ? sa : sb);
      if (dl__micro_multiplier(sa / tw, &l->mult_a, &l->shift_a) ||
          dl__micro_multiplier(sb / tw, &l->mult_b, &l->shift_b) ||
          dl__micro_multiplier(tw / (1048576.0 * Y->scale), &l->mult_o, &l->shift_o))
        return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_micro_from_model: layer '%s': add scales out of range", l->name);
    }
  }
  m->precision = DLM_INT8;
  m->input_lut = NULL;
  m->input_lut_q = q->lut_q;
  return DL_OK;
}

/* Builds the micro model of a trained model (eval-mode semantics: running
 * batch-norm statistics, no dropout). DL_OK and *out, or a status with
 * the message in ctx (the layer and why). */
DL_API dl_status dl_micro_from_model(dl_ctx *ctx, dl_model *model, const dl_micro_desc *d, dl_micro_model **out) {
  dl_micro_model *q;
  dl_status s;
  int cur, last = -1, i;
  double sc, mean, sd;
  dl_norm norm;
  *out = NULL;
  if (!model || !d || !d->name || !*d->name)
    return dl_fail(ctx, DL_ERR_ARG, "dl_micro_from_model: a model and a desc with a name are required");
  if (model->status != DL_OK) return dl_fail(ctx, model->status, "dl_micro_from_model: the model failed to build");
  for (i = 0; d->name[i]; i++)
    if (!(d->name[i] == '_' || (d->name[i] >= 'a' && d->name[i] <= 'z') || (d->name[i] >= 'A' && d->name[i] <= 'Z') ||
          (i > 0 && d->name[i] >= '0' && d->name[i] <= '9')) || i >= 63)
      return dl_fail(ctx, DL_ERR_ARG, "dl_micro_from_model: name '%.80s' is not a C identifier of at most 63 characters",
                     d->name);
  if (d->precision != 0 && d->precision != DLM_F32 && d->precision != DLM_INT8)
    return dl_fail(ctx, DL_ERR_ARG, "dl_micro_from_model: precision %d: DLM_F32 or DLM_INT8", d->precision);
  if (!(q = (dl_micro_model *)dl_alloc(ctx, sizeof *q))) return ctx->status;
  memset(q, 0, sizeof *q);
  q->ctx = ctx;
  memcpy(q->name, d->name, strlen(d->name) + 1);
  q->m.magic = DLM_MAGIC;
  q->m.version = DLM_VERSION;
  q->m.precision = DLM_F32;
  q->m.name = q->name;
  /* the pixel table */
  norm = d->norm == DL_NORM_DEFAULT ? DL_NORM_SCALE : d->norm;
  sc = d->scale != 0 ? d->scale : 1.0 / 255.0;
  mean = d->mean;
  sd = d->std != 0 ? d->std : 1.0;
  for (i = 0; i < 256; i++)
    q->lut[i] = (float)(norm == DL_NORM_NONE ? i : norm == DL_NORM_SCALE ? i * sc : (i * sc - mean) / sd);
  q->m.input_lut = q->lut;
  for (i = 0; i < 256; i++)
    if (!isfinite(q->lut[i])) {
      dl_fail(ctx, DL_ERR_ARG, "dl_micro_from_model: the normalisation (scale %g, mean %g, std %g) maps pixel %d to %g",
              sc, mean, sd, i, (double)q->lut[i]);
      goto fail;
    }
  if ((cur = dl__micro_tensor(q, d->c ? d->c : 1, d->h ? d->h : 1, d->w ? d->w : 1)) < 0) goto fail;
  q->m.input = cur;
  if ((s = dl__micro_walk(q, model->root.child, model->root.nchild, &cur, &last)) != DL_OK) goto fail;
  if (q->m.nlayers == 0) {
    dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_micro_from_model: the model has no layer with a micro-model kernel");
    goto fail;
  }
  q->m.output = cur;
  if (d->precision == DLM_INT8 && dl__micro_quantize(q, d) != DL_OK) goto fail;
  if (dl__micro_plan(q, 1) != DL_OK) goto fail;
  {
    dlm_error e;
    if (dlm_check(&q->m, &e) != DLM_OK) { /* a bug here, not the user's */
      dl_fail(ctx, DL_ERR_FORMAT, "dl_micro_from_model: the plan built is inconsistent: %s", e.msg);
      goto fail;
    }
  }
  *out = q;
  return DL_OK;
fail:
  s = ctx && ctx->status != DL_OK ? ctx->status : DL_ERR_NOMEM;
  dl_micro_free(q);
  return s;
}

/* >>evaluation ------------------------------------------------------------------ */

/* Runs the first n samples of ds (0: all; u8 images of the model's input
 * size, i64 labels) through the micro model on the host, the firmware's
 * kernels; *acc the fraction classified right, preds[k] (optional) each
 * sample's class. One arena allocation for the whole pass. */
DL_API dl_status dl_micro_evaluate(dl_ctx *ctx, const dl_micro_model *q, const dl_dataset *ds, int64_t n, double *acc,
                                   int32_t *preds) {
  const dlm_model *m = q ? &q->m : NULL;
  int64_t per, k, right = 0;
  void *arena;
  dlm_error e;
  if (!m) return dl_fail(ctx, DL_ERR_ARG, "dl_micro_evaluate: no model (NULL)");
  if (!ds || !ds->x || ds->x->dtype != DL_U8 || !ds->y || ds->y->dtype != DL_I64)
    return dl_fail(ctx, DL_ERR_ARG, "dl_micro_evaluate: a dataset of u8 images and i64 labels");
  per = ds->x->numel / (ds->x->shape[0] ? ds->x->shape[0] : 1);
  if (n <= 0 || n > ds->n) n = ds->n;
  if (!(arena = dl_alloc(ctx, m->arena_bytes))) return ctx->status;
  for (k = 0; k < n; k++) {
    const int64_t r = dl_dataset_row(ds, k);
    int32_t c;
    if (dlm_run_u8(m, arena, m->arena_bytes, (const uint8_t *)ds->x->data + r * per, (size_t)per, &e) != DLM_OK) {
      dl_free(ctx, arena);
      return dl_fail(ctx, e.status == DLM_ERR_INPUT ? DL_ERR_SHAPE : DL_ERR_FORMAT, "dl_micro_evaluate: %s", e.msg);
    }
    c = dlm_argmax(m, arena);
    if (preds) preds[k] = c;
    right += c == ((const int64_t *)ds->y->data)[r];
  }
  dl_free(ctx, arena);
  if (acc) *acc = n ? (double)right / (double)n : 0;
  return DL_OK;
}

/* >>writing C ------------------------------------------------------------------- */

typedef struct dl__micro_text {
  char *p;
  size_t n, cap;
  int failed;
  dl_ctx *ctx;
} dl__micro_text;
DL_API void dl__micro_printf(dl__micro_text *t, const char *fmt, ...) DL__PRINTF(2, 3);
DL_API void dl__micro_printf(dl__micro_text *t, const char *fmt, ...) {
  va_list ap;
  int k;
  if (t->failed) return;
  for (;;) {
    va_start(ap, fmt);
    k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) { t->failed = 1; return; }
    if (t->p && t->n + (size_t)k < t->cap) { t->n += (size_t)k; return; }
    {
      size_t nc = t->cap ? t->cap * 2 : 65536;
      char *np;
      while (nc < t->n + (size_t)k + 1) nc *= 2;
      if (!(np = (char *)dl_alloc(t->ctx, nc))) { t->failed = 1; return; }
      if (t->p) memcpy(np, t->p, t->n);
      dl_free(t->ctx, t->p);
      t->p = np;
      t->cap = nc;
    }
  }
}
/* A layer name inside a C comment: letters, digits, '.', '-' and '_' as they
 * are, anything else (a '*' before '/', a '?' of a trigraph) as '_'. */
DL_API void dl__micro_comment_name(dl__micro_text *t, const char *name) {
  const char *p;
  for (p = name; *p; p++) {
    const char ch = *p;
    const int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                   ch == '-' || ch == '_';
    dl__micro_printf(t, "%c", ok ? ch : '_');
  }
}
/* A float as a C literal that reads back to the same float ("1.0f", "-2.5e-07f"). */
DL_API void dl__micro_float(dl__micro_text *t, const char *sep, float v) {
  char b[40];
  snprintf(b, sizeof b, "%.9g", (double)v);
  dl__micro_printf(t, "%s%s%sf", sep, b, strpbrk(b, ".e") ? "" : ".0");
}
DL_API void dl__micro_floats(dl__micro_text *t, const char *id, const float *v, size_t n) {
  size_t i;
  dl__micro_printf(t, "static const float %s[%zu] = {", id, n);
  for (i = 0; i < n; i++) dl__micro_float(t, i == 0 ? "\n  " : i % 8 ? ", " : ",\n  ", v[i]);
  dl__micro_printf(t, "\n};\n");
}
DL_API void dl__micro_ints(dl__micro_text *t, const char *type, const char *id, const void *v, size_t n, int bytes) {
  size_t i;
  dl__micro_printf(t, "static const %s %s[%zu] = {", type, id, n);
  for (i = 0; i < n; i++) {
    long long x = bytes == 1 ? ((const int8_t *)v)[i] : ((const int32_t *)v)[i];
    dl__micro_printf(t, "%s%lld", i == 0 ? "\n  " : i % 16 ? ", " : ",\n  ", x);
  }
  dl__micro_printf(t, "\n};\n");
}

#ifdef DL__IO_FILES /* writing files: not under DL_NO_STDIO */
/* Writes PREFIX.h (the declaration and NAME_ARENA_BYTES, NAME upper-cased)
 * and PREFIX.c (the weights as const arrays, the plan, the model), each
 * atomically. The .c file includes "dl/micro.h" and the header by its
 * base name. */
DL_API dl_status dl_micro_write(dl_ctx *ctx, const dl_micro_model *q, const char *prefix) {
  const dlm_model *m = &q->m;
  dl__micro_text h = {NULL, 0, 0, 0, ctx}, c = {NULL, 0, 0, 0, ctx};
  const char *base = prefix ? strrchr(prefix, '/') : NULL;
  char up[64], *path = NULL;
  size_t pl = prefix ? strlen(prefix) : 0;
  int i;
  dl_status s = DL_OK;
  if (!q || !prefix) return dl_fail(ctx, DL_ERR_ARG, "dl_micro_write: no model or no path (NULL)");
  base = base ? base + 1 : prefix;
  for (i = 0; q->name[i]; i++) up[i] = (char)(q->name[i] >= 'a' && q->name[i] <= 'z' ? q->name[i] - 32 : q->name[i]);
  up[i] = 0;
  dl__micro_printf(&h, "/* %s: a dl.h micro model (%s), written by dl_micro_write. */\n#ifndef %s_H\n#define %s_H\n"
                   "#include \"dl/micro.h\"\n\n/* bytes of the arena dlm_run_* needs (tensors %u, scratch %u) */\n"
                   "#define %s_ARENA_BYTES %uu\n#define %s_INPUTS %uu\n#define %s_OUTPUTS %uu\n\n"
                   "#ifdef __cplusplus\nextern \"C\" {\n#endif\nextern const dlm_model %s;\n#ifdef __cplusplus\n}\n"
                   "#endif\n#endif\n",
                   q->name, m->precision == DLM_INT8 ? "int8" : "f32", up, up, m->scratch_offset,
                   m->arena_bytes - m->scratch_offset, up, m->arena_bytes, up, dlm_tensor_numel(&m->tensors[m->input]),
                   up, dlm_tensor_numel(&m->tensors[m->output]), q->name);
  dl__micro_printf(&c, "/* %s: a dl.h micro model (%s), written by dl_micro_write: %d layers, arena %u bytes. */\n"
                   "#include \"%.*s.h\"\n\n", q->name, m->precision == DLM_INT8 ? "int8" : "f32", m->nlayers,
                   m->arena_bytes, (int)strlen(base), base);
  for (i = 0; i < m->nlayers; i++) {
    const dlm_layer *l = &m->layers[i];
    char id[96];
    if (l->op != DLM_OP_LINEAR && l->op != DLM_OP_CONV2D) continue;
    dl__micro_printf(&c, "/* layer %d (", i);
    dl__micro_comment_name(&c, l->name);
    dl__micro_printf(&c, ") */\n");
    if (m->precision == DLM_F32) {
      snprintf(id, sizeof id, "%s_w%d", q->name, i); dl__micro_floats(&c, id, l->wf, l->nweight);
      snprintf(id, sizeof id, "%s_b%d", q->name, i); dl__micro_floats(&c, id, l->bf, l->nbias);
    } else {
      snprintf(id, sizeof id, "%s_w%d", q->name, i); dl__micro_ints(&c, "int8_t", id, l->wq, l->nweight, 1);
      snprintf(id, sizeof id, "%s_b%d", q->name, i); dl__micro_ints(&c, "int32_t", id, l->bq, l->nbias, 4);
      snprintf(id, sizeof id, "%s_m%d", q->name, i); dl__micro_ints(&c, "int32_t", id, l->mult, l->nbias, 4);
      snprintf(id, sizeof id, "%s_s%d", q->name, i); dl__micro_ints(&c, "int32_t", id, l->shift, l->nbias, 4);
    }
  }
  {
    char id[96];
    snprintf(id, sizeof id, "%s_lut", q->name);
    if (m->precision == DLM_F32) dl__micro_floats(&c, id, q->lut, 256);
    else dl__micro_ints(&c, "int8_t", id, q->lut_q, 256, 1);
  }
  dl__micro_printf(&c, "\nstatic const dlm_tensor %s_tensors[%d] = {\n", q->name, m->ntensors);
  for (i = 0; i < m->ntensors; i++) {
    const dlm_tensor *t = &m->tensors[i];
    dl__micro_printf(&c, "  {%d, %d, %d, %uu, ", t->c, t->h, t->w, t->offset);
    dl__micro_float(&c, "", t->scale);
    dl__micro_printf(&c, ", %d},\n", t->zero);
  }
  dl__micro_printf(&c, "};\n\nstatic const dlm_layer %s_layers[%d] = {\n", q->name, m->nlayers);
  for (i = 0; i < m->nlayers; i++) {
    const dlm_layer *l = &m->layers[i];
    const int w = l->op == DLM_OP_LINEAR || l->op == DLM_OP_CONV2D, f = w && m->precision == DLM_F32, k = w && !f;
    dl__micro_printf(&c, "  {%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, ", l->op, l->in, l->in2, l->out, l->kh,
                     l->kw, l->sh, l->sw, l->ph, l->pw, l->dh, l->dw, l->relu, l->exclude_pad);
    if (w) /* the counts from the arrays themselves: a plan and weights that do not match are refused at run time */
      dl__micro_printf(&c, "sizeof %s_w%d / sizeof %s_w%d[0], sizeof %s_b%d / sizeof %s_b%d[0],\n", q->name, i, q->name,
                       i, q->name, i, q->name, i);
    else dl__micro_printf(&c, "0u, 0u,\n");
    if (f) dl__micro_printf(&c, "   %s_w%d, %s_b%d, NULL, NULL, NULL, NULL,\n", q->name, i, q->name, i);
    else if (k)
      dl__micro_printf(&c, "   NULL, NULL, %s_w%d, %s_b%d, %s_m%d, %s_s%d,\n", q->name, i, q->name, i, q->name, i,
                       q->name, i);
    else dl__micro_printf(&c, "   NULL, NULL, NULL, NULL, NULL, NULL,\n");
    dl__micro_printf(&c, "   %d, %d, %d, %d, %d, %d, \"", l->mult_a, l->shift_a, l->mult_b, l->shift_b, l->mult_o,
                     l->shift_o);
    { /* the name as a C string: printable ASCII, quotes and backslashes escaped */
      const char *p;
      for (p = l->name; *p; p++) { /* quotes, backslashes and '?' (trigraphs) escaped, other bytes in octal */
        const unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\' || ch == '?') dl__micro_printf(&c, "\\%c", ch);
        else if (ch < 32 || ch > 126) dl__micro_printf(&c, "\\%03o", ch);
        else dl__micro_printf(&c, "%c", ch);
      }
    }
    dl__micro_printf(&c, "\"},\n");
  }
  dl__micro_printf(&c, "};\n\nconst dlm_model %s = {\n  DLM_MAGIC, DLM_VERSION, %s, %d, %d, %s_layers, %s_tensors, %d, %d,\n"
                   "  %s%s, %s%s, %uu, %uu, \"%s\"\n};\n", q->name, m->precision == DLM_INT8 ? "DLM_INT8" : "DLM_F32",
                   m->nlayers, m->ntensors, q->name, q->name, m->input, m->output,
                   m->precision == DLM_F32 ? q->name : "NULL", m->precision == DLM_F32 ? "_lut" : "",
                   m->precision == DLM_INT8 ? q->name : "NULL", m->precision == DLM_INT8 ? "_lut" : "", m->arena_bytes,
                   m->scratch_offset, q->name);
  if (h.failed || c.failed) {
    s = dl_fail(ctx, DL_ERR_NOMEM, "dl_micro_write %.200s: out of memory formatting the source", prefix);
    goto done;
  }
  if (!(path = (char *)dl_alloc(ctx, pl + 3))) { s = ctx->status; goto done; }
  memcpy(path, prefix, pl);
  memcpy(path + pl, ".h", 3);
  if ((s = dl_atomic_write(ctx, path, h.p, h.n, NULL)) != DL_OK) goto done;
  path[pl + 1] = 'c';
  s = dl_atomic_write(ctx, path, c.p, c.n, NULL);
done:
  dl_free(ctx, path);
  dl_free(ctx, h.p);
  dl_free(ctx, c.p);
  return s;
}

/* >>blobs ----------------------------------------------------------------------- */

#endif /* DL__IO_FILES */

DL_API void dl__micro_put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}
/* Appends n bytes of src at the 4-aligned end *at of buf (NULL buf: counts
 * only); returns the offset written at (0 for no array). */
DL_API uint32_t dl__micro_put_array(unsigned char *buf, size_t *at, const void *src, size_t n) {
  uint32_t off;
  if (!src) return 0;
  off = (uint32_t)*at;
  if (buf) memcpy(buf + off, src, n);
  *at = (*at + n + 3u) & ~(size_t)3u;
  return off;
}
/* Lays the blob out in buf (NULL: measures it); returns its size. */
DL_API size_t dl__micro_blob_layout(const dl_micro_model *q, unsigned char *buf) {
  const dlm_model *m = &q->m;
  const int f = m->precision == DLM_F32;
  size_t at = DLM_BLOB_HEADER + 4u * (DLM_BLOB_TENSOR_WORDS * (size_t)m->ntensors + DLM_BLOB_LAYER_WORDS * (size_t)m->nlayers);
  uint32_t lut;
  int i, k;
  lut = dl__micro_put_array(buf, &at, f ? (const void *)q->lut : (const void *)q->lut_q, f ? 1024 : 256);
  for (i = 0; i < m->nlayers; i++) {
    const dlm_layer *l = &m->layers[i];
    unsigned char *r = buf ? buf + DLM_BLOB_HEADER + 4u * (DLM_BLOB_TENSOR_WORDS * (size_t)m->ntensors +
                                                           DLM_BLOB_LAYER_WORDS * (size_t)i)
                           : NULL;
    const int32_t v[22] = {l->op, l->in, l->in2, l->out, l->kh, l->kw, l->sh, l->sw, l->ph, l->pw, l->dh,
                           l->dw, l->relu, l->exclude_pad, (int32_t)l->nweight, (int32_t)l->nbias, l->mult_a,
                           l->shift_a, l->mult_b, l->shift_b, l->mult_o, l->shift_o};
    uint32_t off[4];
    off[0] = dl__micro_put_array(buf, &at, f ? (const void *)l->wf : (const void *)l->wq, (size_t)l->nweight * (f ? 4 : 1));
    off[1] = dl__micro_put_array(buf, &at, f ? (const void *)l->bf : (const void *)l->bq, (size_t)l->nbias * 4);
    off[2] = f ? 0 : dl__micro_put_array(buf, &at, l->mult, (size_t)l->nbias * 4);
    off[3] = f ? 0 : dl__micro_put_array(buf, &at, l->shift, (size_t)l->nbias * 4);
    if (r) {
      for (k = 0; k < 22; k++) dl__micro_put32(r + 4 * k, (uint32_t)v[k]);
      for (k = 0; k < 4; k++) dl__micro_put32(r + 88 + 4 * k, off[k]);
    }
  }
  if (buf) {
    uint32_t hdr[12];
    hdr[0] = DLM_BLOB_MAGIC; hdr[1] = DLM_VERSION; hdr[2] = (uint32_t)m->precision; hdr[3] = (uint32_t)m->nlayers;
    hdr[4] = (uint32_t)m->ntensors; hdr[5] = (uint32_t)m->input; hdr[6] = (uint32_t)m->output; hdr[7] = m->arena_bytes;
    hdr[8] = m->scratch_offset; hdr[9] = (uint32_t)at; hdr[10] = 0; hdr[11] = lut;
    memset(buf, 0, 96);
    for (k = 0; k < 12; k++) dl__micro_put32(buf + 4 * k, hdr[k]);
    memcpy(buf + 64, q->name, strlen(q->name) < 31 ? strlen(q->name) : 31);
    for (i = 0; i < m->ntensors; i++) {
      const dlm_tensor *t = &m->tensors[i];
      unsigned char *r = buf + DLM_BLOB_HEADER + 4u * DLM_BLOB_TENSOR_WORDS * (size_t)i;
      uint32_t sb;
      memcpy(&sb, &t->scale, 4);
      dl__micro_put32(r, (uint32_t)t->c); dl__micro_put32(r + 4, (uint32_t)t->h); dl__micro_put32(r + 8, (uint32_t)t->w);
      dl__micro_put32(r + 12, t->offset); dl__micro_put32(r + 16, sb); dl__micro_put32(r + 20, (uint32_t)t->zero);
    }
    dl__micro_put32(buf + 40, dlm_fnv1a(buf + 64, at - 64));
  }
  return at;
}

/* The model as one blob (dlm_load_blob reads it): *out (free with dl_free
 * on ctx) of *n bytes, 64-byte aligned. */
DL_API dl_status dl_micro_blob(dl_ctx *ctx, const dl_micro_model *q, void **out, size_t *n) {
  size_t size;
  unsigned char *buf;
  *out = NULL;
  *n = 0;
  if (!q) return dl_fail(ctx, DL_ERR_ARG, "dl_micro_blob: no model (NULL)");
  size = dl__micro_blob_layout(q, NULL);
  if (size > 0x7fffffffu) return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_micro_blob: %zu bytes is more than a blob holds", size);
  if (!(buf = (unsigned char *)dl_alloc(ctx, size))) return ctx->status;
  memset(buf, 0, size);
  dl__micro_blob_layout(q, buf);
  *out = buf;
  *n = size;
  return DL_OK;
}
#ifdef DL__IO_FILES
/* The blob written to path, atomically. */
DL_API dl_status dl_micro_write_blob(dl_ctx *ctx, const dl_micro_model *q, const char *path) {
  void *b;
  size_t n;
  dl_status s = dl_micro_blob(ctx, q, &b, &n);
  if (s != DL_OK) return s;
  s = dl_atomic_write(ctx, path, b, n, NULL);
  dl_free(ctx, b);
  return s;
}
#endif /* DL__IO_FILES */

/* >>one call: both precisions --------------------------------------------------- */

/* Bytes of constant data the model puts in flash: weights, biases,
 * requantisation arrays, the input table, the plan itself. */
DL_API size_t dl_micro_const_bytes(const dl_micro_model *q) {
  const dlm_model *m = &q->m;
  size_t n = sizeof(dlm_model) + (size_t)m->nlayers * sizeof(dlm_layer) + (size_t)m->ntensors * sizeof(dlm_tensor);
  int i;
  n += m->precision == DLM_INT8 ? 256 : 256 * sizeof(float);
  for (i = 0; i < m->nlayers; i++) {
    const dlm_layer *l = &m->layers[i];
    n += m->precision == DLM_INT8 ? l->nweight + 3 * 4 * (size_t)l->nbias : 4 * ((size_t)l->nweight + l->nbias);
  }
  return n;
}

/* What dl_micro_export measured. */
typedef struct dl_micro_report {
  double acc_f32, acc_int8;   /* on the test set given, through the micro kernels */
  uint32_t arena_f32, arena_int8; /* the arena bytes of each precision */
  size_t const_f32, const_int8; /* dl_micro_const_bytes */
} dl_micro_report;

#ifdef DL__IO_FILES
/* The model in both precisions: d->name is the base name, the files are
 * DIR/NAME_f32.{c,h} and DIR/NAME_int8.{c,h} (identifiers NAME_f32 and
 * NAME_int8); d->precision is ignored, d->calib is required. When test is
 * given, both are evaluated on it (u8 images, i64 labels) and, when out is
 * given, one line each is printed there:
 *   micro f32:  test_acc=0.8911 arena=4160 const=939,048 bytes -> DIR/NAME_f32.c
 *   micro int8: test_acc=0.8903 (-0.08 points) arena=1040 const=238,504 bytes -> DIR/NAME_int8.c */
DL_API dl_status dl_micro_export(dl_ctx *ctx, dl_model *model, const dl_micro_desc *d, const char *dir,
                                 const dl_dataset *test, FILE *out, dl_micro_report *rep) {
  dl_micro_report r;
  dl_status s = DL_OK;
  int k;
  memset(&r, 0, sizeof r);
  if (!d || !d->name || strlen(d->name) > 50 || !dir || strlen(dir) > 3900)
    return dl_fail(ctx, DL_ERR_ARG, "dl_micro_export: a desc with a name (at most 50 characters) and a folder");
  for (k = 0; k < 2 && s == DL_OK; k++) {
    dl_micro_desc e = *d;
    dl_micro_model *q = NULL;
    char name[64], prefix[4096];
    double acc = NAN;
    snprintf(name, sizeof name, "%s_%s", d->name, k ? "int8" : "f32");
    snprintf(prefix, sizeof prefix, "%s/%s", dir, name);
    e.name = name;
    e.precision = k ? DLM_INT8 : DLM_F32;
    if ((s = dl_micro_from_model(ctx, model, &e, &q)) != DL_OK) break;
    if (test && (s = dl_micro_evaluate(ctx, q, test, 0, &acc, NULL)) == DL_OK) {
      if (k) r.acc_int8 = acc; else r.acc_f32 = acc;
    }
    if (s == DL_OK) s = dl_micro_write(ctx, q, prefix);
    if (s == DL_OK) {
      if (k) { r.arena_int8 = q->m.arena_bytes; r.const_int8 = dl_micro_const_bytes(q); }
      else { r.arena_f32 = q->m.arena_bytes; r.const_f32 = dl_micro_const_bytes(q); }
      if (out) {
        fprintf(out, "micro %s: ", k ? "int8" : "f32 ");
        if (test) fprintf(out, "test_acc=%.4f ", acc);
        if (test && k) fprintf(out, "(%+.2f points) ", 100 * (r.acc_int8 - r.acc_f32));
        fprintf(out, "arena=%u const=%zu bytes -> %s.c\n", q->m.arena_bytes, dl_micro_const_bytes(q), prefix);
      }
    }
    dl_micro_free(q);
  }
  if (rep) *rep = r;
  return s;
}
#endif /* DL__IO_FILES */

DL__HEADER_END
#endif /* !DL__SCALAR_ONLY */

#endif /* DL_EXPORT_H */
