/* dl/micro.h - inference on a microcontroller: a trained model as a plan
 * of layers over one caller-provided arena, in f32 or int8.
 *
 * This header stands alone: it includes <stddef.h>, <stdint.h>,
 * <string.h> (memcpy, memset) and <math.h> (expf, in dlm_softmax only:
 * a firmware that does not call it links no libm) and nothing else, allocates nothing, keeps no
 * state, uses no threads or thread-local storage, and compiles freestanding
 * (arm-none-eabi-gcc -ffreestanding, newlib for memcpy). dl.h includes it;
 * with -DDL_FREESTANDING dl.h includes only it (and config.h's version).
 *
 * A model is a dlm_model: a list of layers (dlm_layer) over numbered
 * tensors (dlm_tensor: [c, h, w], a byte offset into the arena, and the
 * int8 scale and zero point). Nothing here builds one by hand: on the host,
 * dl_micro_from_model (dl/export.h) turns a trained dl_model into one
 * (batch norm folded into the convolution or linear layer before it, ReLU
 * fused into the layer it follows, dropout dropped, the arena planned so
 * that tensors whose lifetimes do not overlap share bytes), and
 * dl_micro_write prints it as a C source/header pair whose weights are
 * `const` arrays (flash) and whose header defines NAME_ARENA_BYTES.
 *
 *   #include "fashion_mlp_int8.h"
 *   static unsigned char arena[FASHION_MLP_INT8_ARENA_BYTES] __attribute__((aligned(8)));
 *   dlm_error e;
 *   if (dlm_run_u8(&fashion_mlp_int8, arena, sizeof arena, pixels, 784, &e) != DLM_OK) report(e.msg);
 *   int cls = dlm_argmax(&fashion_mlp_int8, arena);
 *
 * int8 follows CMSIS-NN's and TensorFlow Lite's conventions: weights
 * symmetric per output channel (zero point 0, values in [-127, 127]),
 * activations asymmetric per tensor (real = scale * (q - zero)), int32
 * accumulators, bias in the accumulator's scale (s_in * s_w[c]), and
 * requantisation by a Q31 multiplier and a shift per output channel
 * (dlm_requant: one rounding, half up); a fused ReLU is the clamp at the
 * output's zero point. The int8 kernels use no floating point: the same
 * plan gives the same bytes on any two machines whose compilers shift
 * negative integers arithmetically (gcc and clang on every target).
 * Pooling, flatten and ReLU keep their input's scale and zero point; add
 * brings both inputs to a common scale first (TensorFlow Lite's scheme,
 * 20 bits of headroom). f32 layers are the plain loops; their sums run in
 * a fixed order, but a compiler may contract them into FMAs, so two
 * machines agree to rounding, not bit for bit.
 *
 * The input is either u8 pixels, mapped through the plan's 256-entry
 * table (the model's normalisation, computed on the host: no float at run
 * time for int8), or f32 values (quantised with the input's scale).
 *
 * Layout: tensors are C x H x W, row-major (PyTorch's NCHW without N); a
 * linear layer reads its input tensor as a vector (flatten is free).
 * Convolution weights [out][in][kh][kw], linear [out][in], as in PyTorch.
 *
 * Errors: every entry point returns a dlm_status and fills a dlm_error
 * (which may be NULL) with a message that names the layer and the sizes;
 * an arena that is too small gives DLM_ERR_ARENA with e.need, the bytes the
 * model needs. dlm_check validates a whole plan (dimensions, weight counts,
 * offsets inside the arena, inputs defined before use, outputs that do not
 * overlap their inputs, multipliers and shifts in range) and each run
 * calls it first, so a plan that does not match its weights is refused,
 * never run.
 */
#ifndef DL_MICRO_H
#define DL_MICRO_H

#include <math.h> /* expf, for dlm_softmax only */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Storage class of the functions: dl.h's (DL_API, the compile-once modes of
 * config.h) when dl.h includes this header; static inline alone. */
#ifndef DLM_API
#ifdef DL_API
#define DLM_API DL_API
#else
#define DLM_API static inline
#endif
#endif
/* restrict for the kernels' row pointers (a C++ compiler's spelling there) */
#ifdef __cplusplus
#define DLM__RESTRICT __restrict
#else
#define DLM__RESTRICT restrict
#endif

#ifdef DL__HEADER_BEGIN /* dl.h's compile-once modes (config.h) */
DL__HEADER_BEGIN
#endif
#ifdef __cplusplus
extern "C" {
#endif

#define DLM_MAGIC 0x4d4c4455u /* "ULDM" */
#define DLM_VERSION 1 /* the layout version of dlm_model and dlm_layer */
#define DLM_MAX_TENSORS 4096 /* most tensors a plan may have */
#define DLM_MAX_LAYERS 4096 /* most layers a plan may have */

/* What a run or a check returns: DLM_OK or why it refused. */
typedef enum dlm_status {
  DLM_OK = 0,
  DLM_ERR_ARENA = 1, /* too small (e.need says how many bytes) or misaligned */
  DLM_ERR_MODEL = 2, /* the plan is inconsistent or does not match its weights */
  DLM_ERR_INPUT = 3  /* the input has the wrong size */
} dlm_status;

/* The arithmetic of a micro model: f32, or int8 with int32 accumulators. */
typedef enum dlm_precision { DLM_F32 = 1, DLM_INT8 = 2 } dlm_precision;

/* The layer kinds of a micro model. */
typedef enum dlm_op {
  DLM_OP_LINEAR = 1,     /* out[o] = b[o] + sum_i w[o][i] x[i] */
  DLM_OP_CONV2D = 2,     /* nn.Conv2d, groups 1 */
  DLM_OP_MAXPOOL2D = 3,  /* nn.MaxPool2d (padding never wins) */
  DLM_OP_AVGPOOL2D = 4,  /* nn.AvgPool2d (count_include_pad unless exclude_pad) */
  DLM_OP_GLOBAL_AVGPOOL = 5, /* [c, h, w] -> [c, 1, 1] */
  DLM_OP_ADD = 6,        /* out = in + in2 (a residual) */
  DLM_OP_RELU = 7        /* a ReLU that could not be fused */
} dlm_op;

/* One tensor of the plan: [c, h, w] at arena + offset (4-byte aligned);
 * int8: real = scale * (q - zero). */
typedef struct dlm_tensor {
  int32_t c, h, w; /* channels, height, width */
  uint32_t offset; /* byte offset in the arena (4-byte aligned) */
  float scale; /* int8: real = scale * (q - zero) */
  int32_t zero; /* int8: the zero point */
} dlm_tensor;

/* One layer. Geometry fields that an op does not use are 0. */
typedef struct dlm_layer {
  int32_t op;               /* dlm_op */
  int32_t in, in2, out;     /* tensor indices (in2: DLM_OP_ADD only, else -1) */
  int32_t kh, kw, sh, sw, ph, pw, dh, dw; /* kernel, stride, padding, dilation */
  int32_t relu;             /* 1: ReLU fused on the output */
  int32_t exclude_pad;      /* average pooling: divide by the taps inside */
  uint32_t nweight, nbias;  /* element counts of the weight and bias arrays */
  const float *wf, *bf;     /* f32 weights and bias */
  const int8_t *wq;         /* int8 weights, symmetric per output channel */
  const int32_t *bq;        /* int8: bias in the accumulator's scale */
  const int32_t *mult, *shift; /* int8: requantisation per output channel (nbias of each) */
  int32_t mult_a, shift_a, mult_b, shift_b, mult_o, shift_o; /* int8 add */
  const char *name;         /* the dl_model layer it came from ("3", "block.conv1") */
} dlm_layer;

/* A micro model: the plan of layers over numbered tensors, its precision,
 * input, output and arena size, and the input's 256-entry pixel tables.
 * Written by dl_micro_write as C source (or loaded from a blob with
 * dlm_load_blob); dlm_check validates it. */
typedef struct dlm_model {
  uint32_t magic;           /* DLM_MAGIC */
  int32_t version;          /* DLM_VERSION */
  int32_t precision;        /* dlm_precision */
  int32_t nlayers, ntensors; /* layers and tensors */
  const dlm_layer *layers; /* the layers, in order */
  const dlm_tensor *tensors; /* the tensors */
  int32_t input, output;    /* tensor indices */
  const float *input_lut;   /* f32: pixel value 0..255 -> input value */
  const int8_t *input_lut_q;/* int8: pixel value -> quantised input */
  uint32_t arena_bytes;     /* what dlm_arena_size computes */
  uint32_t scratch_offset;  /* int8 convolution accumulators (after the tensors) */
  const char *name; /* the C identifier (for messages) */
} dlm_model;

/* Why a call failed: the status, the bytes a too small arena needs, and a
 * message naming the layer and the sizes. */
typedef struct dlm_error {
  dlm_status status; /* DLM_OK or the failure */
  uint32_t need;            /* DLM_ERR_ARENA: the bytes the model needs */
  int32_t layer;            /* the layer at fault, or -1 */
  char msg[160]; /* names the layer and the sizes */
} dlm_error;

/* >>messages (no stdio: a small formatter of its own) ------------------------ */

/* Appends s to e->msg. */
DLM_API void dlm__put(dlm_error *e, const char *s) {
  size_t n = strlen(e->msg), k = strlen(s);
  if (k > sizeof e->msg - 1 - n) k = sizeof e->msg - 1 - n;
  memcpy(e->msg + n, s, k);
  e->msg[n + k] = 0;
}
DLM_API void dlm__putu(dlm_error *e, int64_t v) {
  char b[24];
  int i = 23, neg = v < 0;
  uint64_t u = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  b[i] = 0;
  do { b[--i] = (char)('0' + u % 10); u /= 10; } while (u);
  if (neg) b[--i] = '-';
  dlm__put(e, b + i);
}
/* Fails with "model NAME, layer L (NAME): what a, num, b" and returns s. */
DLM_API dlm_status dlm__fail(const dlm_model *m, dlm_error *e, dlm_status s, int layer, const char *a, int64_t num,
                             const char *b) {
  if (!e) return s;
  e->status = s;
  e->layer = layer;
  e->msg[0] = 0;
  dlm__put(e, "model ");
  dlm__put(e, m && m->name ? m->name : "?");
  if (layer >= 0) {
    dlm__put(e, ", layer ");
    dlm__putu(e, layer);
    if (m && m->layers && m->layers[layer].name) {
      dlm__put(e, " ('");
      dlm__put(e, m->layers[layer].name);
      dlm__put(e, "')");
    }
  }
  dlm__put(e, ": ");
  dlm__put(e, a);
  if (b) {
    dlm__putu(e, num);
    dlm__put(e, b);
  }
  return s;
}

/* >>plan checks ---------------------------------------------------------------- */

/* Bytes per element of the model's activations: 1 (int8) or 4 (f32). */
DLM_API uint32_t dlm_elem_size(const dlm_model *m) { return m->precision == DLM_INT8 ? 1u : 4u; }
/* 1 when the tensor's dimensions are positive and c * h * w <= 2^29 - 1
 * (checked without overflow). */
DLM_API int dlm__shape_ok(const dlm_tensor *t) {
  const int64_t lim = 0x1fffffff;
  return t->c > 0 && t->h > 0 && t->w > 0 && t->c <= lim && t->h <= lim / t->c && t->w <= lim / ((int64_t)t->c * t->h);
}
/* Elements of a tensor: c * h * w. */
DLM_API uint32_t dlm_tensor_numel(const dlm_tensor *t) { return (uint32_t)t->c * (uint32_t)t->h * (uint32_t)t->w; }

/* Bytes of int32 scratch a layer needs (an int8 convolution's output plane). */
DLM_API uint32_t dlm__scratch(const dlm_model *m, const dlm_layer *l) {
  const dlm_tensor *o = &m->tensors[l->out];
  return m->precision == DLM_INT8 && l->op == DLM_OP_CONV2D ? 4u * (uint32_t)o->h * (uint32_t)o->w : 0u;
}

/* The arena the plan needs: the end of the last tensor, rounded up to 4,
 * plus the largest scratch. 0 for a plan dlm_check refuses. */
DLM_API uint32_t dlm_arena_size(const dlm_model *m) {
  uint64_t end = 0, scratch = 0;
  int i;
  if (!m || m->magic != DLM_MAGIC || m->ntensors <= 0 || m->ntensors > DLM_MAX_TENSORS || !m->tensors ||
      m->nlayers < 0 || m->nlayers > DLM_MAX_LAYERS || (m->nlayers && !m->layers))
    return 0;
  for (i = 0; i < m->ntensors; i++) {
    const dlm_tensor *t = &m->tensors[i];
    uint64_t n;
    if (!dlm__shape_ok(t)) return 0;
    n = (uint64_t)t->c * (uint64_t)t->h * (uint64_t)t->w * dlm_elem_size(m);
    if (n > 0x7fffffffu || t->offset > 0x7fffffffu) return 0;
    if (t->offset + n > end) end = t->offset + n;
  }
  for (i = 0; i < m->nlayers; i++) {
    const dlm_layer *l = &m->layers[i];
    if (l->out < 0 || l->out >= m->ntensors) return 0;
    if (dlm__scratch(m, l) > scratch) scratch = dlm__scratch(m, l);
  }
  end = (end + 3u) & ~(uint64_t)3u;
  return end + scratch > 0x7fffffffu ? 0 : (uint32_t)(end + scratch);
}

/* Output size of a window op along one axis (0 when the window does not fit). */
DLM_API int32_t dlm__out_dim(int32_t in, int32_t k, int32_t s, int32_t p, int32_t d) {
  int64_t span = (int64_t)d * (k - 1) + 1, n = (int64_t)in + 2 * (int64_t)p - span;
  return n < 0 || s <= 0 ? 0 : (int32_t)(n / s + 1);
}

DLM_API int dlm__overlap(const dlm_model *m, int a, int b) {
  const dlm_tensor *x = &m->tensors[a], *y = &m->tensors[b];
  uint32_t xe = x->offset + dlm_tensor_numel(x) * dlm_elem_size(m), ye = y->offset + dlm_tensor_numel(y) * dlm_elem_size(m);
  return x->offset < ye && y->offset < xe;
}

/* Validates the whole plan; DLM_OK or DLM_ERR_MODEL with the first fault. */
DLM_API dlm_status dlm_check(const dlm_model *m, dlm_error *e) {
  int i, ok_int8;
  uint32_t need;
  if (e) { e->status = DLM_OK; e->need = 0; e->layer = -1; e->msg[0] = 0; }
  if (!m) return dlm__fail(m, e, DLM_ERR_MODEL, -1, "no model (NULL)", 0, NULL);
  if (m->magic != DLM_MAGIC) return dlm__fail(m, e, DLM_ERR_MODEL, -1, "not a dl.h micro model (bad magic)", 0, NULL);
  if (m->version != DLM_VERSION)
    return dlm__fail(m, e, DLM_ERR_MODEL, -1, "plan version ", m->version, " is not this header's");
  if (m->precision != DLM_F32 && m->precision != DLM_INT8)
    return dlm__fail(m, e, DLM_ERR_MODEL, -1, "unknown precision ", m->precision, "");
  if (m->ntensors <= 0 || m->ntensors > DLM_MAX_TENSORS || !m->tensors)
    return dlm__fail(m, e, DLM_ERR_MODEL, -1, "bad tensor count ", m->ntensors, "");
  if (m->nlayers < 0 || m->nlayers > DLM_MAX_LAYERS || (m->nlayers && !m->layers))
    return dlm__fail(m, e, DLM_ERR_MODEL, -1, "bad layer count ", m->nlayers, "");
  if (m->input < 0 || m->input >= m->ntensors || m->output < 0 || m->output >= m->ntensors)
    return dlm__fail(m, e, DLM_ERR_MODEL, -1, "input or output tensor out of range (", m->ntensors, " tensors)");
  for (i = 0; i < m->ntensors; i++) {
    const dlm_tensor *t = &m->tensors[i];
    if (!dlm__shape_ok(t)) return dlm__fail(m, e, DLM_ERR_MODEL, -1, "tensor ", i, " has a bad shape");
    if (t->offset & 3u) return dlm__fail(m, e, DLM_ERR_MODEL, -1, "tensor ", i, " is not 4-byte aligned in the arena");
    if (m->precision == DLM_INT8 && (!(t->scale > 0) || t->zero < -128 || t->zero > 127))
      return dlm__fail(m, e, DLM_ERR_MODEL, -1, "tensor ", i, " has a bad int8 scale or zero point");
  }
  need = dlm_arena_size(m);
  if (!need || need != m->arena_bytes)
    return dlm__fail(m, e, DLM_ERR_MODEL, -1, "the plan needs an arena of ", need,
                     " bytes, not the arena_bytes it states");
  if (m->scratch_offset & 3u || m->scratch_offset > need)
    return dlm__fail(m, e, DLM_ERR_MODEL, -1, "scratch offset ", m->scratch_offset, " is outside the arena");
  for (i = 0; i < m->ntensors; i++) /* the scratch lies above every tensor */
    if ((uint64_t)m->tensors[i].offset + dlm_tensor_numel(&m->tensors[i]) * (uint64_t)dlm_elem_size(m) > m->scratch_offset)
      return dlm__fail(m, e, DLM_ERR_MODEL, -1, "tensor ", i, " overlaps the scratch area");
  if (m->precision == DLM_F32 ? !m->input_lut && m->input_lut_q : 0) /* a LUT of the wrong kind */
    return dlm__fail(m, e, DLM_ERR_MODEL, -1, "f32 model with an int8 input table", 0, NULL);
  ok_int8 = m->precision == DLM_INT8;
  for (i = 0; i < m->nlayers; i++) {
    const dlm_layer *l = &m->layers[i];
    const dlm_tensor *x, *y;
    int j, defined = 0, defined2 = 0;
    uint32_t cout, cin;
    if (l->in < 0 || l->in >= m->ntensors || l->out < 0 || l->out >= m->ntensors ||
        (l->op == DLM_OP_ADD ? l->in2 < 0 || l->in2 >= m->ntensors : l->in2 != -1))
      return dlm__fail(m, e, DLM_ERR_MODEL, i, "tensor index out of range (", m->ntensors, " tensors)");
    for (j = -1; j < i; j++) { /* inputs: the model's input or an earlier layer's output */
      int t = j < 0 ? m->input : m->layers[j].out;
      if (t == l->in) defined = 1;
      if (t == l->in2) defined2 = 1;
      if (j >= 0 && t == l->out) return dlm__fail(m, e, DLM_ERR_MODEL, i, "writes tensor ", l->out, ", written before");
    }
    if (l->out == m->input) return dlm__fail(m, e, DLM_ERR_MODEL, i, "overwrites the input tensor", 0, NULL);
    if (!defined || (l->op == DLM_OP_ADD && !defined2))
      return dlm__fail(m, e, DLM_ERR_MODEL, i, "reads a tensor no earlier layer wrote", 0, NULL);
    if (dlm__overlap(m, l->in, l->out) || (l->op == DLM_OP_ADD && dlm__overlap(m, l->in2, l->out)))
      return dlm__fail(m, e, DLM_ERR_MODEL, i, "its output overlaps its input in the arena", 0, NULL);
    if (dlm__scratch(m, l) && m->scratch_offset + dlm__scratch(m, l) > need)
      return dlm__fail(m, e, DLM_ERR_MODEL, i, "scratch runs past the arena", 0, NULL);
    if (l->kh < 0 || l->kh > 65535 || l->kw < 0 || l->kw > 65535 || l->sh < 0 || l->sh > 65535 || l->sw < 0 ||
        l->sw > 65535 || l->ph < 0 || l->ph > 65535 || l->pw < 0 || l->pw > 65535 || l->dh < 0 || l->dh > 65535 ||
        l->dw < 0 || l->dw > 65535)
      return dlm__fail(m, e, DLM_ERR_MODEL, i, "kernel, stride, padding or dilation outside [0, 65535]", 0, NULL);
    x = &m->tensors[l->in];
    y = &m->tensors[l->out];
    cout = (uint32_t)y->c;
    cin = (uint32_t)x->c;
    if (m->precision == DLM_INT8 && l->op != DLM_OP_LINEAR && l->op != DLM_OP_CONV2D && l->op != DLM_OP_ADD &&
        (x->scale != y->scale || x->zero != y->zero))
      return dlm__fail(m, e, DLM_ERR_MODEL, i, "pooling and ReLU keep their input's scale and zero point", 0, NULL);
    switch (l->op) {
    case DLM_OP_LINEAR:
      if (y->h != 1 || y->w != 1) return dlm__fail(m, e, DLM_ERR_MODEL, i, "a linear output must be [n, 1, 1]", 0, NULL);
      if (l->nweight != (uint64_t)cout * dlm_tensor_numel(x) || l->nbias != cout)
        return dlm__fail(m, e, DLM_ERR_MODEL, i, "weight and bias counts do not match the shapes (expected ",
                         (int64_t)cout * dlm_tensor_numel(x), " weights)");
      break;
    case DLM_OP_CONV2D:
      if (l->kh <= 0 || l->kw <= 0 || l->sh <= 0 || l->sw <= 0 || l->ph < 0 || l->pw < 0 || l->dh <= 0 || l->dw <= 0 ||
          dlm__out_dim(x->h, l->kh, l->sh, l->ph, l->dh) != y->h || dlm__out_dim(x->w, l->kw, l->sw, l->pw, l->dw) != y->w)
        return dlm__fail(m, e, DLM_ERR_MODEL, i, "convolution geometry does not give the output's ", y->h, " rows");
      /* per output channel, so that the product cannot wrap: cin * kh * kw < 2^61 */
      if (l->nweight % cout || l->nweight / cout != (uint64_t)cin * (uint32_t)l->kh * (uint32_t)l->kw ||
          l->nbias != cout)
        return dlm__fail(m, e, DLM_ERR_MODEL, i, "weight and bias counts do not match the shapes (expected ",
                         (int64_t)((uint64_t)cin * (uint32_t)l->kh * (uint32_t)l->kw), " weights per output channel)");
      break;
    case DLM_OP_MAXPOOL2D:
    case DLM_OP_AVGPOOL2D:
      if (l->kh <= 0 || l->kw <= 0 || l->sh <= 0 || l->sw <= 0 || l->ph < 0 || l->pw < 0 || 2 * l->ph > l->kh ||
          2 * l->pw > l->kw || y->c != x->c || dlm__out_dim(x->h, l->kh, l->sh, l->ph, 1) != y->h ||
          dlm__out_dim(x->w, l->kw, l->sw, l->pw, 1) != y->w)
        return dlm__fail(m, e, DLM_ERR_MODEL, i, "pooling geometry does not give the output's ", y->h, " rows");
      break;
    case DLM_OP_GLOBAL_AVGPOOL:
      if (y->c != x->c || y->h != 1 || y->w != 1)
        return dlm__fail(m, e, DLM_ERR_MODEL, i, "global pooling gives [c, 1, 1], c = ", x->c, "");
      break;
    case DLM_OP_ADD:
      if (dlm_tensor_numel(&m->tensors[l->in2]) != dlm_tensor_numel(x) || dlm_tensor_numel(y) != dlm_tensor_numel(x))
        return dlm__fail(m, e, DLM_ERR_MODEL, i, "add of tensors of different sizes", 0, NULL);
      if (ok_int8 && (l->shift_a < -31 || l->shift_a > 30 || l->shift_b < -31 || l->shift_b > 30 ||
                      l->shift_o < -31 || l->shift_o > 30 || l->mult_a < 0 || l->mult_b < 0 || l->mult_o < 0))
        return dlm__fail(m, e, DLM_ERR_MODEL, i, "requantisation multiplier or shift out of range", 0, NULL);
      break;
    case DLM_OP_RELU:
      if (dlm_tensor_numel(y) != dlm_tensor_numel(x))
        return dlm__fail(m, e, DLM_ERR_MODEL, i, "ReLU changes the size", 0, NULL);
      break;
    default: return dlm__fail(m, e, DLM_ERR_MODEL, i, "unknown op ", l->op, "");
    }
    if (l->op == DLM_OP_LINEAR || l->op == DLM_OP_CONV2D) {
      uint32_t c;
      if (m->precision == DLM_F32 ? !l->wf || !l->bf : !l->wq || !l->bq || !l->mult || !l->shift)
        return dlm__fail(m, e, DLM_ERR_MODEL, i, "weights, bias or requantisation arrays missing", 0, NULL);
      if (ok_int8) {
        /* the int32 accumulator cannot overflow: |bias| + taps * 2^15 < 2^31 (each tap is at most
         * |w| |x - zero| <= 128 * 255, and the linear kernel's two sums at most 2^14 each) */
        const int64_t taps = (int64_t)l->nweight / (cout ? cout : 1);
        for (c = 0; c < cout; c++) {
          if (l->shift[c] < -31 || l->shift[c] > 30 || l->mult[c] < 0)
            return dlm__fail(m, e, DLM_ERR_MODEL, i, "requantisation multiplier or shift out of range at channel ",
                             c, "");
          if ((l->bq[c] < 0 ? -(int64_t)l->bq[c] : (int64_t)l->bq[c]) + taps * 32768 > INT32_MAX)
            return dlm__fail(m, e, DLM_ERR_MODEL, i, "bias and taps could overflow the accumulator at channel ", c, "");
        }
      }
    }
  }
  return DLM_OK;
}

/* >>int8 arithmetic ---------------------------------------------------------- */

/* round(acc * mult * 2^(shift - 31)), half up, saturated to int32: the
 * requantisation by a Q31 multiplier (mult in [0, 2^31)) and a shift in
 * [-31, 30] (positive: left). One rounding, in 64 bits. */
DLM_API int32_t dlm_requant(int32_t acc, int32_t mult, int32_t shift) {
  const int total = 31 - shift; /* 1 .. 62 */
  int64_t p = (int64_t)acc * mult, r = (p + ((int64_t)1 << (total - 1))) >> total;
  return r > INT32_MAX ? INT32_MAX : r < INT32_MIN ? INT32_MIN : (int32_t)r;
}
DLM_API int8_t dlm__clamp8(int64_t v, int32_t lo) { return (int8_t)(v < lo ? lo : v > 127 ? 127 : v); }
/* Integer division rounding half away from zero (d > 0). */
DLM_API int64_t dlm__div_round(int64_t s, int64_t d) { return s >= 0 ? (s + d / 2) / d : -((-s + d / 2) / d); }
/* a + b saturated to int32 */
DLM_API int32_t dlm__sat_add(int32_t a, int32_t b) {
  const int64_t s = (int64_t)a + b;
  return s > INT32_MAX ? INT32_MAX : s < INT32_MIN ? INT32_MIN : (int32_t)s;
}

/* >>kernels -------------------------------------------------------------------- */

DLM_API void dlm__linear_f32(const dlm_layer *l, const float *x, int32_t n, float *y, int32_t nout) {
  int32_t o, i;
  for (o = 0; o < nout; o++) {
    const float *w = l->wf + (size_t)o * (size_t)n;
    float s = 0;
    for (i = 0; i < n; i++) s += w[i] * x[i];
    s += l->bf[o];
    y[o] = l->relu && s < 0 ? 0.0f : s;
  }
}
DLM_API void dlm__linear_i8(const dlm_layer *l, const int8_t *x, int32_t zin, int32_t n, int8_t *y, int32_t nout,
                            int32_t zout) {
  const int32_t lo = l->relu ? (zout > -128 ? zout : -128) : -128;
  int32_t o, i;
  for (o = 0; o < nout; o++) {
    const int8_t *w = l->wq + (size_t)o * (size_t)n;
    int32_t acc = 0, wsum = 0;
    for (i = 0; i < n; i++) { acc += (int32_t)w[i] * x[i]; wsum += w[i]; }
    acc = acc - zin * wsum + l->bq[o]; /* sum w (x - zin), the zero point taken out of the loop */
    y[o] = dlm__clamp8((int64_t)dlm_requant(acc, l->mult[o], l->shift[o]) + zout, lo);
  }
}

/* The output columns [*a, *b) whose input column ox * s - p + k * d lies in [0, w). */
DLM_API void dlm__cols(int32_t w, int32_t wo, int32_t s, int32_t p, int32_t kd, int32_t *a, int32_t *b) {
  int32_t lo = p - kd, hi = w - 1 + p - kd; /* ox * s must lie in [lo, hi] */
  *a = lo <= 0 ? 0 : (lo + s - 1) / s;
  *b = hi < 0 ? 0 : hi / s + 1;
  if (*b > wo) *b = wo;
  if (*a > *b) *a = *b;
}

/* Convolution, one output plane at a time: for each tap (input channel,
 * ky, kx) a row-wise multiply-add over the output columns whose input
 * column exists (no padded taps, no index test in the inner loop). */
DLM_API void dlm__conv_f32(const dlm_layer *l, const dlm_tensor *X, const float *x, const dlm_tensor *Y, float *y) {
  const int32_t plane = Y->h * Y->w;
  int32_t co, ci, ky, kx, oy, ox;
  for (co = 0; co < Y->c; co++) {
    float *out = y + (size_t)co * plane;
    for (ox = 0; ox < plane; ox++) out[ox] = l->bf[co];
    for (ci = 0; ci < X->c; ci++)
      for (ky = 0; ky < l->kh; ky++)
        for (kx = 0; kx < l->kw; kx++) {
          const float wv = l->wf[(((size_t)co * X->c + ci) * l->kh + ky) * l->kw + kx];
          const int32_t sw = l->sw, off = kx * l->dw - l->pw;
          int32_t a, b;
          dlm__cols(X->w, Y->w, sw, l->pw, kx * l->dw, &a, &b);
          for (oy = 0; oy < Y->h; oy++) {
            const int32_t iy = oy * l->sh - l->ph + ky * l->dh;
            const float *DLM__RESTRICT row;
            float *DLM__RESTRICT orow = out + (size_t)oy * Y->w;
            if (iy < 0 || iy >= X->h) continue;
            row = x + ((size_t)ci * X->h + iy) * X->w + off; /* column ox * sw, inside for ox in [a, b) */
            if (sw == 1)
              for (ox = a; ox < b; ox++) orow[ox] += wv * row[ox];
            else
              for (ox = a; ox < b; ox++) orow[ox] += wv * row[ox * sw];
          }
        }
    if (l->relu)
      for (ox = 0; ox < plane; ox++) out[ox] = out[ox] < 0 ? 0.0f : out[ox];
  }
}
DLM_API void dlm__conv_i8(const dlm_layer *l, const dlm_tensor *X, const int8_t *x, const dlm_tensor *Y, int8_t *y,
                          int32_t *acc) {
  const int32_t plane = Y->h * Y->w, zin = X->zero, zout = Y->zero;
  const int32_t lo = l->relu ? (zout > -128 ? zout : -128) : -128;
  int32_t co, ci, ky, kx, oy, ox;
  for (co = 0; co < Y->c; co++) {
    for (ox = 0; ox < plane; ox++) acc[ox] = l->bq[co];
    for (ci = 0; ci < X->c; ci++)
      for (ky = 0; ky < l->kh; ky++)
        for (kx = 0; kx < l->kw; kx++) {
          const int32_t wv = l->wq[(((size_t)co * X->c + ci) * l->kh + ky) * l->kw + kx];
          /* the geometry in locals and the rows restrict: a store to acc
           * (int32_t) may alias the layer's int32_t fields and the int8_t
           * input (a char type), so the compiler loaded l's fields again at
           * every tap and kept the loop scalar */
          const int32_t sw = l->sw, off = kx * l->dw - l->pw;
          int32_t a, b;
          if (!wv) continue;
          dlm__cols(X->w, Y->w, sw, l->pw, kx * l->dw, &a, &b);
          for (oy = 0; oy < Y->h; oy++) {
            const int32_t iy = oy * l->sh - l->ph + ky * l->dh;
            const int8_t *DLM__RESTRICT row;
            int32_t *DLM__RESTRICT arow = acc + (size_t)oy * Y->w;
            if (iy < 0 || iy >= X->h) continue;
            row = x + ((size_t)ci * X->h + iy) * X->w + off; /* column ox * sw, inside for ox in [a, b) */
            if (sw == 1)
              for (ox = a; ox < b; ox++) arow[ox] += wv * ((int32_t)row[ox] - zin);
            else
              for (ox = a; ox < b; ox++) arow[ox] += wv * ((int32_t)row[ox * sw] - zin);
          }
        }
    for (ox = 0; ox < plane; ox++)
      y[(size_t)co * plane + ox] = dlm__clamp8((int64_t)dlm_requant(acc[ox], l->mult[co], l->shift[co]) + zout, lo);
  }
}

/* Pooling over one window; max: padded taps never win; avg: the sum of
 * the taps inside over kh * kw (or over the taps inside: exclude_pad). */
DLM_API void dlm__pool_f32(const dlm_layer *l, const dlm_tensor *X, const float *x, const dlm_tensor *Y, float *y) {
  int32_t c, oy, ox, ky, kx;
  for (c = 0; c < Y->c; c++)
    for (oy = 0; oy < Y->h; oy++)
      for (ox = 0; ox < Y->w; ox++) {
        float best = 0, sum = 0;
        int32_t n = 0;
        for (ky = 0; ky < l->kh; ky++) {
          const int32_t iy = oy * l->sh - l->ph + ky;
          if (iy < 0 || iy >= X->h) continue;
          for (kx = 0; kx < l->kw; kx++) {
            const int32_t ix = ox * l->sw - l->pw + kx;
            float v;
            if (ix < 0 || ix >= X->w) continue;
            v = x[((size_t)c * X->h + iy) * X->w + ix];
            if (!n || v > best) best = v;
            sum += v;
            n++;
          }
        }
        y[((size_t)c * Y->h + oy) * Y->w + ox] =
            l->op == DLM_OP_MAXPOOL2D ? best : sum / (float)(l->exclude_pad ? n : (int64_t)l->kh * l->kw);
      }
}
DLM_API void dlm__pool_i8(const dlm_layer *l, const dlm_tensor *X, const int8_t *x, const dlm_tensor *Y, int8_t *y) {
  const int32_t z = X->zero;
  int32_t c, oy, ox, ky, kx;
  for (c = 0; c < Y->c; c++)
    for (oy = 0; oy < Y->h; oy++)
      for (ox = 0; ox < Y->w; ox++) {
        int32_t best = -128, n = 0;
        int64_t sum = 0;
        for (ky = 0; ky < l->kh; ky++) {
          const int32_t iy = oy * l->sh - l->ph + ky;
          if (iy < 0 || iy >= X->h) continue;
          for (kx = 0; kx < l->kw; kx++) {
            const int32_t ix = ox * l->sw - l->pw + kx;
            int32_t v;
            if (ix < 0 || ix >= X->w) continue;
            v = x[((size_t)c * X->h + iy) * X->w + ix];
            if (v > best) best = v;
            sum += v - z;
            n++;
          }
        }
        y[((size_t)c * Y->h + oy) * Y->w + ox] =
            l->op == DLM_OP_MAXPOOL2D ? (int8_t)best
                                      : dlm__clamp8(z + dlm__div_round(sum, l->exclude_pad ? n : (int64_t)l->kh * l->kw),
                                                    -128);
      }
}

/* >>running -------------------------------------------------------------------- */

/* Runs the layers on the input already in the arena. */
DLM_API void dlm__layers(const dlm_model *m, unsigned char *arena) {
  int i;
  for (i = 0; i < m->nlayers; i++) {
    const dlm_layer *l = &m->layers[i];
    const dlm_tensor *X = &m->tensors[l->in], *Y = &m->tensors[l->out];
    void *x = arena + X->offset, *y = arena + Y->offset;
    const int32_t n = (int32_t)dlm_tensor_numel(X), nout = (int32_t)dlm_tensor_numel(Y);
    int32_t k;
    if (m->precision == DLM_F32) {
      const float *xf = (const float *)x;
      float *yf = (float *)y;
      switch (l->op) {
      case DLM_OP_LINEAR: dlm__linear_f32(l, xf, n, yf, nout); break;
      case DLM_OP_CONV2D: dlm__conv_f32(l, X, xf, Y, yf); break;
      case DLM_OP_MAXPOOL2D:
      case DLM_OP_AVGPOOL2D: dlm__pool_f32(l, X, xf, Y, yf); break;
      case DLM_OP_GLOBAL_AVGPOOL: {
        const int32_t hw = X->h * X->w;
        for (k = 0; k < X->c; k++) {
          float s = 0;
          int32_t j;
          for (j = 0; j < hw; j++) s += xf[(size_t)k * hw + j];
          yf[k] = s / (float)hw;
        }
        break;
      }
      case DLM_OP_ADD: {
        const float *bf = (const float *)(const void *)(arena + m->tensors[l->in2].offset);
        for (k = 0; k < n; k++) {
          const float s = xf[k] + bf[k];
          yf[k] = l->relu && s < 0 ? 0.0f : s;
        }
        break;
      }
      case DLM_OP_RELU:
        for (k = 0; k < n; k++) yf[k] = xf[k] < 0 ? 0.0f : xf[k];
        break;
      default: break;
      }
    } else {
      const int8_t *xq = (const int8_t *)x;
      int8_t *yq = (int8_t *)y;
      switch (l->op) {
      case DLM_OP_LINEAR: dlm__linear_i8(l, xq, X->zero, n, yq, nout, Y->zero); break;
      case DLM_OP_CONV2D: dlm__conv_i8(l, X, xq, Y, yq, (int32_t *)(void *)(arena + m->scratch_offset)); break;
      case DLM_OP_MAXPOOL2D:
      case DLM_OP_AVGPOOL2D: dlm__pool_i8(l, X, xq, Y, yq); break;
      case DLM_OP_GLOBAL_AVGPOOL: {
        const int32_t hw = X->h * X->w;
        for (k = 0; k < X->c; k++) {
          int64_t s = 0;
          int32_t j;
          for (j = 0; j < hw; j++) s += xq[(size_t)k * hw + j] - X->zero;
          yq[k] = dlm__clamp8(X->zero + dlm__div_round(s, hw), -128);
        }
        break;
      }
      case DLM_OP_ADD: { /* both to a common scale with 20 bits of headroom, summed, requantised */
        const dlm_tensor *B = &m->tensors[l->in2];
        const int8_t *bq = (const int8_t *)(arena + B->offset);
        const int32_t lo = l->relu ? (Y->zero > -128 ? Y->zero : -128) : -128;
        for (k = 0; k < n; k++) {
          const int32_t a = dlm_requant((xq[k] - X->zero) * (1 << 20), l->mult_a, l->shift_a);
          const int32_t b = dlm_requant((bq[k] - B->zero) * (1 << 20), l->mult_b, l->shift_b);
          yq[k] = dlm__clamp8((int64_t)dlm_requant(dlm__sat_add(a, b), l->mult_o, l->shift_o) + Y->zero, lo);
        }
        break;
      }
      case DLM_OP_RELU:
        for (k = 0; k < n; k++) yq[k] = xq[k] < X->zero ? (int8_t)X->zero : xq[k];
        break;
      default: break;
      }
    }
  }
}

/* Checks the plan, the arena (4-byte aligned, at least dlm_arena_size) and
 * the input (n values, the input tensor's size). */
DLM_API dlm_status dlm__prepare(const dlm_model *m, const void *arena, size_t arena_bytes, const void *in, size_t n,
                                dlm_error *e) {
  dlm_status s = dlm_check(m, e);
  const uint32_t want = s == DLM_OK ? dlm_tensor_numel(&m->tensors[m->input]) : 0;
  if (s != DLM_OK) return s;
  if (!in || n != want) return dlm__fail(m, e, DLM_ERR_INPUT, -1, "the input must have ", want, " values");
  if (!arena || ((uintptr_t)arena & 3u))
    return dlm__fail(m, e, DLM_ERR_ARENA, -1, "the arena must be a 4-byte aligned buffer", 0, NULL);
  if (arena_bytes < m->arena_bytes) {
    dlm__fail(m, e, DLM_ERR_ARENA, -1, "an arena of ", (int64_t)arena_bytes, " bytes is too small: it needs ");
    if (e) {
      e->need = m->arena_bytes;
      dlm__putu(e, m->arena_bytes);
      dlm__put(e, " bytes");
    }
    return DLM_ERR_ARENA;
  }
  return DLM_OK;
}

/* Runs the model on n pixel values (0..255) through its input table; n
 * must be the input's c * h * w. The output stays in the arena
 * (dlm_argmax, dlm_output). */
DLM_API dlm_status dlm_run_u8(const dlm_model *m, void *arena, size_t arena_bytes, const uint8_t *pixels, size_t n,
                              dlm_error *e) {
  dlm_status s = dlm__prepare(m, arena, arena_bytes, pixels, n, e);
  const dlm_tensor *X;
  size_t k;
  if (s != DLM_OK) return s;
  X = &m->tensors[m->input];
  if (m->precision == DLM_F32 ? !m->input_lut : !m->input_lut_q)
    return dlm__fail(m, e, DLM_ERR_MODEL, -1, "the model has no pixel table: use dlm_run_f32", 0, NULL);
  if (m->precision == DLM_F32) {
    float *x = (float *)(void *)((unsigned char *)arena + X->offset);
    for (k = 0; k < n; k++) x[k] = m->input_lut[pixels[k]];
  } else {
    int8_t *x = (int8_t *)((unsigned char *)arena + X->offset);
    for (k = 0; k < n; k++) x[k] = m->input_lut_q[pixels[k]];
  }
  dlm__layers(m, (unsigned char *)arena);
  return DLM_OK;
}

/* Runs the model on n float inputs (int8: quantised with the input's scale
 * and zero point, rounding to nearest). */
DLM_API dlm_status dlm_run_f32(const dlm_model *m, void *arena, size_t arena_bytes, const float *in, size_t n,
                               dlm_error *e) {
  dlm_status s = dlm__prepare(m, arena, arena_bytes, in, n, e);
  const dlm_tensor *X;
  size_t k;
  if (s != DLM_OK) return s;
  X = &m->tensors[m->input];
  if (m->precision == DLM_F32) {
    float *x = (float *)(void *)((unsigned char *)arena + X->offset);
    for (k = 0; k < n; k++) x[k] = in[k];
  } else {
    int8_t *x = (int8_t *)((unsigned char *)arena + X->offset);
    for (k = 0; k < n; k++) {
      float q = in[k] / X->scale + (float)X->zero;
      q = q < -128.0f ? -128.0f : q > 127.0f ? 127.0f : q; /* NaN stays NaN: caught below */
      x[k] = q == q ? (int8_t)(q < 0 ? q - 0.5f : q + 0.5f) : (int8_t)X->zero;
    }
  }
  dlm__layers(m, (unsigned char *)arena);
  return DLM_OK;
}

/* Number of outputs, output i as a real value (int8: dequantised), and the
 * index of the largest (the first of equals), after a run. */
DLM_API int32_t dlm_output_count(const dlm_model *m) { return (int32_t)dlm_tensor_numel(&m->tensors[m->output]); }
/* Output i of the last run, as a float (int8: dequantised). */
DLM_API float dlm_output(const dlm_model *m, const void *arena, int32_t i) {
  const dlm_tensor *Y = &m->tensors[m->output];
  const unsigned char *p = (const unsigned char *)arena + Y->offset;
  return m->precision == DLM_F32 ? ((const float *)(const void *)p)[i]
                                 : Y->scale * (float)(((const int8_t *)p)[i] - Y->zero);
}
/* The index of the largest output of the last run (the first of equals):
 * the class. */
DLM_API int32_t dlm_argmax(const dlm_model *m, const void *arena) {
  const dlm_tensor *Y = &m->tensors[m->output];
  const unsigned char *p = (const unsigned char *)arena + Y->offset;
  const int32_t n = (int32_t)dlm_tensor_numel(Y);
  int32_t i, best = 0;
  for (i = 1; i < n; i++)
    if (m->precision == DLM_F32 ? ((const float *)(const void *)p)[i] > ((const float *)(const void *)p)[best]
                                : ((const int8_t *)p)[i] > ((const int8_t *)p)[best])
      best = i;
  return best;
}

/* >>blobs: a model as one byte array --------------------------------------------
 * dl_micro_blob / dl_micro_write_blob (export.h) write a model as one
 * little-endian byte array (a file, a flash partition, an update received
 * over a radio) that dlm_load_blob turns into a dlm_model whose arrays
 * point into it: nothing is copied, so the blob must stay where it is and be
 * 4-byte aligned. The layout, in 32-bit words:
 *   header, 16 words: magic "DLMB", version, precision, nlayers, ntensors,
 *     input, output, arena_bytes, scratch_offset, total bytes, checksum
 *     (32-bit FNV-1a of every byte after the header), the input table's
 *     byte offset, 4 words of 0
 *   the name: 32 bytes, NUL-terminated
 *   tensors: 6 words each (c, h, w, offset, scale as f32 bits, zero)
 *   layers: 26 words each (op .. nbias as in dlm_layer, the add's six
 *     requantisation words, then the byte offsets of w, b, mult, shift; 0:
 *     none)
 *   the arrays, each at a 4-byte aligned offset.
 * dlm_load_blob refuses a blob whose size is not the header's, whose
 * checksum does not match, whose counts exceed the slots given, or whose
 * offsets and lengths leave the blob, then runs dlm_check. */
#define DLM_BLOB_MAGIC 0x424d4c44u /* "DLMB" read as a little-endian word */
#define DLM_BLOB_HEADER 96u        /* header and name, bytes */
#define DLM_BLOB_TENSOR_WORDS 6u /* 32-bit words per tensor record in a blob */
#define DLM_BLOB_LAYER_WORDS 26u /* 32-bit words per layer record in a blob */

DLM_API uint32_t dlm__word(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
/* FNV-1a 32-bit hash of n bytes (a blob's checksum). */
DLM_API uint32_t dlm_fnv1a(const unsigned char *p, size_t n) {
  uint32_t h = 2166136261u;
  size_t i;
  for (i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
  return h;
}

/* The layer and tensor counts a blob declares (0 when it is too short or
 * not a blob): how many slots dlm_load_blob needs. */
DLM_API void dlm_blob_counts(const void *blob, size_t n, int32_t *nlayers, int32_t *ntensors) {
  const unsigned char *b = (const unsigned char *)blob;
  *nlayers = *ntensors = 0;
  if (!b || n < DLM_BLOB_HEADER || dlm__word(b) != DLM_BLOB_MAGIC) return;
  *nlayers = (int32_t)(dlm__word(b + 12) & 0x7fffffffu);
  *ntensors = (int32_t)(dlm__word(b + 16) & 0x7fffffffu);
}

/* An array of count elements of size es at the byte offset in word k of
 * the layer record: NULL for offset 0, else checked to lie in the blob. */
DLM_API const void *dlm__blob_array(const unsigned char *b, size_t n, uint32_t off, uint64_t count, uint32_t es,
                                    size_t data_start, int *bad) {
  if (!off) return NULL;
  if (off & 3u || off < data_start || off > n || count * es > (uint64_t)(n - off)) {
    *bad = 1;
    return NULL;
  }
  return b + off;
}

/* Fills *m, layers[0 .. max_layers) and tensors[0 .. max_tensors) from the
 * blob (its arrays stay in the blob). DLM_OK, or DLM_ERR_MODEL with the
 * reason in e. */
DLM_API dlm_status dlm_load_blob(const void *blob, size_t n, dlm_model *m, dlm_layer *layers, int32_t max_layers,
                                 dlm_tensor *tensors, int32_t max_tensors, dlm_error *e) {
  const unsigned char *b = (const unsigned char *)blob;
  const uint32_t one = 1;
  uint32_t nl, nt, prec, lut;
  uint64_t need;
  size_t data_start;
  int32_t i;
  int bad = 0;
  if (e) { e->status = DLM_OK; e->need = 0; e->layer = -1; e->msg[0] = 0; }
  if (!m) return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: no model to fill (NULL)", 0, NULL);
  memset(m, 0, sizeof *m);
  if (*(const unsigned char *)&one != 1)
    return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: blobs are little-endian and this machine is not", 0, NULL);
  if (!b || ((uintptr_t)b & 3u)) return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: not a 4-byte aligned buffer", 0, NULL);
  if (n < DLM_BLOB_HEADER)
    return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: ", (int64_t)n, " bytes is shorter than a blob's header");
  if (dlm__word(b) != DLM_BLOB_MAGIC) return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: not a dl.h model blob (magic)", 0, NULL);
  if (dlm__word(b + 4) != DLM_VERSION)
    return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: version ", dlm__word(b + 4), " is not this header's");
  if (dlm__word(b + 36) != n) {
    dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: ", (int64_t)n, " bytes given, the header says ");
    if (e) dlm__putu(e, dlm__word(b + 36));
    return DLM_ERR_MODEL;
  }
  if (dlm_fnv1a(b + 64, n - 64) != dlm__word(b + 40))
    return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: checksum mismatch (damaged or truncated)", 0, NULL);
  for (i = 12; i < 16; i++)
    if (dlm__word(b + 4 * (uint32_t)i)) return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: reserved header words are not 0", 0, NULL);
  if (!memchr(b + 64, 0, 32)) return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: the name is not NUL-terminated", 0, NULL);
  prec = dlm__word(b + 8);
  nl = dlm__word(b + 12);
  nt = dlm__word(b + 16);
  if (prec != DLM_F32 && prec != DLM_INT8) return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: unknown precision ", prec, "");
  if (nl > DLM_MAX_LAYERS || nt > DLM_MAX_TENSORS || nt == 0)
    return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: bad layer or tensor count (", nt, " tensors)");
  if ((int64_t)nl > max_layers || (int64_t)nt > max_tensors || (nl && !layers) || !tensors) {
    dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: needs ", nl, " layer slots and ");
    if (e) { dlm__putu(e, nt); dlm__put(e, " tensor slots"); }
    return DLM_ERR_MODEL;
  }
  need = DLM_BLOB_HEADER + 4ull * (DLM_BLOB_TENSOR_WORDS * nt + DLM_BLOB_LAYER_WORDS * nl);
  if (need > n) return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: the records run past its end at byte ", (int64_t)need, "");
  data_start = (size_t)need;
  for (i = 0; i < (int32_t)nt; i++) {
    const unsigned char *r = b + DLM_BLOB_HEADER + 4u * DLM_BLOB_TENSOR_WORDS * (uint32_t)i;
    uint32_t sb = dlm__word(r + 16);
    tensors[i].c = (int32_t)dlm__word(r);
    tensors[i].h = (int32_t)dlm__word(r + 4);
    tensors[i].w = (int32_t)dlm__word(r + 8);
    tensors[i].offset = dlm__word(r + 12);
    memcpy(&tensors[i].scale, &sb, 4);
    tensors[i].zero = (int32_t)dlm__word(r + 20);
  }
  for (i = 0; i < (int32_t)nl; i++) {
    const unsigned char *r = b + DLM_BLOB_HEADER + 4u * (DLM_BLOB_TENSOR_WORDS * nt + DLM_BLOB_LAYER_WORDS * (uint32_t)i);
    dlm_layer *l = &layers[i];
#define DLM__W(k) ((int32_t)dlm__word(r + 4 * (k)))
    memset(l, 0, sizeof *l);
    l->op = DLM__W(0); l->in = DLM__W(1); l->in2 = DLM__W(2); l->out = DLM__W(3);
    l->kh = DLM__W(4); l->kw = DLM__W(5); l->sh = DLM__W(6); l->sw = DLM__W(7);
    l->ph = DLM__W(8); l->pw = DLM__W(9); l->dh = DLM__W(10); l->dw = DLM__W(11);
    l->relu = DLM__W(12); l->exclude_pad = DLM__W(13);
#undef DLM__W
    l->nweight = dlm__word(r + 56);
    l->nbias = dlm__word(r + 60);
    l->mult_a = (int32_t)dlm__word(r + 64);
    l->shift_a = (int32_t)dlm__word(r + 68);
    l->mult_b = (int32_t)dlm__word(r + 72);
    l->shift_b = (int32_t)dlm__word(r + 76);
    l->mult_o = (int32_t)dlm__word(r + 80);
    l->shift_o = (int32_t)dlm__word(r + 84);
    if (prec == DLM_F32) {
      l->wf = (const float *)dlm__blob_array(b, n, dlm__word(r + 88), l->nweight, 4, data_start, &bad);
      l->bf = (const float *)dlm__blob_array(b, n, dlm__word(r + 92), l->nbias, 4, data_start, &bad);
    } else {
      l->wq = (const int8_t *)dlm__blob_array(b, n, dlm__word(r + 88), l->nweight, 1, data_start, &bad);
      l->bq = (const int32_t *)dlm__blob_array(b, n, dlm__word(r + 92), l->nbias, 4, data_start, &bad);
      l->mult = (const int32_t *)dlm__blob_array(b, n, dlm__word(r + 96), l->nbias, 4, data_start, &bad);
      l->shift = (const int32_t *)dlm__blob_array(b, n, dlm__word(r + 100), l->nbias, 4, data_start, &bad);
    }
    if (bad) return dlm__fail(NULL, e, DLM_ERR_MODEL, i, "blob: an array of this layer lies outside the blob", 0, NULL);
    l->name = NULL; /* a blob names the model, not its layers */
  }
  lut = dlm__word(b + 44);
  m->magic = DLM_MAGIC;
  m->version = DLM_VERSION;
  m->precision = (int32_t)prec;
  m->nlayers = (int32_t)nl;
  m->ntensors = (int32_t)nt;
  m->layers = layers;
  m->tensors = tensors;
  m->input = (int32_t)dlm__word(b + 20);
  m->output = (int32_t)dlm__word(b + 24);
  m->arena_bytes = dlm__word(b + 28);
  m->scratch_offset = dlm__word(b + 32);
  m->name = (const char *)b + 64;
  if (prec == DLM_F32) m->input_lut = (const float *)dlm__blob_array(b, n, lut, 256, 4, data_start, &bad);
  else m->input_lut_q = (const int8_t *)dlm__blob_array(b, n, lut, 256, 1, data_start, &bad);
  if (bad) return dlm__fail(NULL, e, DLM_ERR_MODEL, -1, "blob: the input table lies outside the blob", 0, NULL);
  return dlm_check(m, e);
}

/* probs[i] = the softmax of the outputs (int8: dequantised), n =
 * dlm_output_count; the largest subtracted first. */
DLM_API void dlm_softmax(const dlm_model *m, const void *arena, float *probs) {
  const int32_t n = dlm_output_count(m);
  float mx = dlm_output(m, arena, 0), sum = 0;
  int32_t i;
  for (i = 1; i < n; i++) mx = dlm_output(m, arena, i) > mx ? dlm_output(m, arena, i) : mx;
  for (i = 0; i < n; i++) sum += probs[i] = expf(dlm_output(m, arena, i) - mx);
  for (i = 0; i < n; i++) probs[i] /= sum;
}

#ifdef __cplusplus
}
#endif
#ifdef DL__HEADER_END
DL__HEADER_END
#endif

#endif /* DL_MICRO_H */
