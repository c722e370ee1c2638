/* dl/layers.h - models made of layers with named parameters.
 *
 *   dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 1});
 *   dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 784, .out = 256});      // "0.weight", "0.bias"
 *   dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);                      // "1" (no parameters)
 *   dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 256, .out = 10});       // "2.weight", "2.bias"
 *   if (dl_model_status(m) != DL_OK) { ... dl_ctx_message(&ctx) ... }
 *   ...
 *   dl_tensor *logits = dl_model_forward(m, tp, x);                 // the tape ops of ops.h
 *
 * A model owns its parameters, their gradients and its buffers (BatchNorm's
 * running statistics); layers are a tree under the model's root. Every
 * make function takes (model, parent, name, desc):
 *   - parent NULL is the root; otherwise a container (Sequential, Residual,
 *     Module) made earlier in the same model;
 *   - name NULL is the next index among the parent's children ("0", "1" ...,
 *     counting children without parameters too, as nn.Sequential does);
 *   - the full name joins the parents' names with dots, and parameters are
 *     named FULLNAME.weight etc.: PyTorch's state_dict keys ("0.weight",
 *     "features.3.bias", "lstm.weight_ih_l0", "attn.out_proj.weight",
 *     "bn.running_mean"). Layouts are PyTorch's too (Linear weight [out, in],
 *     Conv2d [out, in/groups, kh, kw], LSTM gates i, f, g, o), so weights move
 *     between the two without transposes.
 *   - The desc's zero fields mean PyTorch's defaults, listed above each desc.
 * Make functions return the layer, or NULL once the model has failed (out of
 * memory, a name too long: the status and message are in the model and its
 * ctx; later makes return NULL too, so one check after building suffices).
 * A NULL model (dl_model_make out of memory) makes every make return NULL,
 * and the optimizers' makes too: dl_model_status(NULL) is DL_ERR_NOMEM.
 * Misuse (a parent from another model, a duplicate name, bad sizes) panics.
 *
 * The root's forward runs its children in order (an nn.Sequential). A
 * forward function in plain C (a ResNet block, two heads) is a Module:
 *
 *   static dl_tensor *block(dl_layer *l, dl_tape *tp, dl_tensor *x) {
 *     dl_tensor *h = dl_t_relu(tp, dl_layer_call(dl_layer_child(l, "bn1"), tp,
 *                                  dl_layer_call(dl_layer_child(l, "conv1"), tp, x)));
 *     h = dl_layer_call(dl_layer_child(l, "bn2"), tp, dl_layer_call(dl_layer_child(l, "conv2"), tp, h));
 *     return dl_t_relu(tp, dl_t_add(tp, h, x));
 *   }
 *   dl_layer *b = dl_module_make(m, NULL, "block", block, NULL);
 *   dl_conv2d_make(m, b, "conv1", &(dl_conv2d_desc){.in = 64, .out = 64, .kernel = 3, .padding = 1, .no_bias = 1});
 *   ...
 *
 * Parameters: dl_model_param(m, "0.weight") finds one by name; m->params[i]
 * lists them in creation order (buffers included, flagged). Each carries its
 * hyperparameters, set by name pattern without source edits
 * (dl_model_set, dl_model_configure("conv*.weight:lr_mult=0.1,init=xavier_uniform")):
 *   lr_mult     learning-rate multiplier (1; 0 = no update at all)
 *   wd_mult     weight-decay / L1 / L2 multiplier (1 for weights; 0 for biases
 *               and normalisation parameters)
 *   clip_value  clamp this parameter's gradient to [-v, v] (0 = off)
 *   clip_norm   scale this parameter's gradient to L2 norm <= v (0 = off)
 *   frozen      no gradient, no update
 *   init        the initialisation scheme (setting it re-initialises now)
 *
 * Memory: a parameter's values start in their own allocation; the first
 * dl_model_pack (called by the optimizer's make, or by the user) moves every
 * trainable parameter into one contiguous 64-byte-aligned buffer and gives
 * them their gradients in a second one at the same offsets (the dl_tensor
 * structs do not move, so pointers held by the caller stay valid). No layer
 * can be added after that. dl_model_free releases everything.
 *
 * Train and eval: dl_model_train(m, 1/0) (train is the default, as in
 * PyTorch): Dropout and BatchNorm read it.
 */
#ifndef DL_LAYERS_H
#define DL_LAYERS_H

#include "ops.h"
DL__HEADER_BEGIN

#if defined(__cplusplus) && !defined(DL__SCALAR_ONLY) && (defined(DL_LINK) || defined(DL_IMPLEMENTATION))
#error "dl: compile-once (DL_LINK, DL_IMPLEMENTATION) is C only: a C++ file compiles its own copy of the library, whose layers do not recognise those of another file's copy (a layer's type is its vtable's address); build the C++ files without these macros and keep each model in the file that made it"
#endif
#ifndef DL__SCALAR_ONLY

#include <float.h>
#include <stdio.h>
#include <string.h>

#ifndef DL_NAME_MAX
#define DL_NAME_MAX 96 /* longest parameter name, with its terminating 0 */
#endif

/* >>init ------------------------------------------------------------------- */

/* Initialisation schemes. fan_in = size(1) * receptive, fan_out = size(0) *
 * receptive, receptive = the product of the sizes after the second (as
 * torch.nn.init computes them; 1-d tensors have no fans and panic for the
 * fan-based schemes). `arg` per scheme:
 *   DL_INIT_DEFAULT          the layer's PyTorch default (what make used)
 *   DL_INIT_CONSTANT         every element = arg (ZEROS / ONES: 0 / 1)
 *   DL_INIT_UNIFORM          U(-arg, arg)
 *   DL_INIT_NORMAL           N(0, arg^2)
 *   DL_INIT_XAVIER_UNIFORM   U(-b, b), b = gain sqrt(6 / (fan_in + fan_out)), gain = arg or 1
 *   DL_INIT_XAVIER_NORMAL    N(0, s^2), s = gain sqrt(2 / (fan_in + fan_out)), gain = arg or 1
 *   DL_INIT_KAIMING_UNIFORM  U(-b, b), b = gain sqrt(3 / fan_in), gain = sqrt(2 / (1 + arg^2))
 *                            (arg: the leaky-ReLU slope; 0 for ReLU; fan_in mode)
 *   DL_INIT_KAIMING_NORMAL   N(0, s^2), s = gain / sqrt(fan_in), gain as above
 *   DL_INIT_LECUN_UNIFORM    U(-b, b), b = sqrt(3 / fan_in)
 *   DL_INIT_LECUN_NORMAL     N(0, 1 / fan_in)
 *   DL_INIT_ORTHOGONAL       rows (or columns, whichever are fewer) of the
 *                            tensor viewed as [size(0), numel / size(0)] are
 *                            orthonormal, times gain = arg or 1 (QR of a
 *                            Gaussian matrix with R's diagonal made positive,
 *                            as torch.nn.init.orthogonal_)
 * Random draws come from the rng given (the model's: seeded, no global state).
 * The values differ from PyTorch's (another generator); the distributions
 * are the same. */
typedef enum dl_init_kind {
  DL_INIT_DEFAULT = 0,
  DL_INIT_CONSTANT,
  DL_INIT_ZEROS,
  DL_INIT_ONES,
  DL_INIT_UNIFORM,
  DL_INIT_NORMAL,
  DL_INIT_XAVIER_UNIFORM,
  DL_INIT_XAVIER_NORMAL,
  DL_INIT_KAIMING_UNIFORM,
  DL_INIT_KAIMING_NORMAL,
  DL_INIT_LECUN_UNIFORM,
  DL_INIT_LECUN_NORMAL,
  DL_INIT_ORTHOGONAL,
  DL__INIT_COUNT
} dl_init_kind;

/* An initialisation scheme and its argument (a gain, a bound, a constant:
 * dl_init_name says which). */
typedef struct dl_init {
  dl_init_kind kind; /* the scheme */
  double arg; /* its argument (a gain, a bound or a value, as the scheme needs) */
} dl_init;
DL_API dl_init dl__init(dl_init_kind kind, double arg) {
  dl_init i;
  i.kind = kind;
  i.arg = arg;
  return i;
}

/* The scheme's name as dl_model_configure's init= takes it
 * ("kaiming_normal", ...). */
DL_API const char *dl_init_name(dl_init_kind k) {
  static const char *const names[DL__INIT_COUNT] = {
      "default", "constant", "zeros", "ones", "uniform", "normal", "xavier_uniform",
      "xavier_normal", "kaiming_uniform", "kaiming_normal", "lecun_uniform", "lecun_normal",
      "orthogonal"};
  return (unsigned)k < DL__INIT_COUNT ? names[k] : "?";
}

/* fan_in and fan_out of t as torch.nn.init computes them; 0 for ndim < 2. */
DL_API void dl_init_fans(const dl_tensor *t, double *fan_in, double *fan_out) {
  double rec = 1;
  int d;
  if (t->ndim < 2) { *fan_in = *fan_out = 0; return; }
  for (d = 2; d < t->ndim; d++) rec *= (double)t->shape[d];
  *fan_in = (double)t->shape[1] * rec;
  *fan_out = (double)t->shape[0] * rec;
}

/* Orthogonal fill: Householder-free modified Gram-Schmidt in double on a
 * Gaussian [rows, cols] (transposed when rows < cols), column signs fixed so
 * that R's diagonal is positive. Scratch: one double per element (heap). */
DL_API dl_status dl__init_orthogonal(dl_tensor *t, dl_rng *r, double gain) {
  int64_t rows = t->ndim ? t->shape[0] : 1, cols = rows ? t->numel / rows : 0, i, j, k;
  int64_t n = rows >= cols ? rows : cols, m = rows >= cols ? cols : rows; /* q is n x m, columns orthonormal */
  double *q;
  if (t->numel == 0) return DL_OK;
  q = (double *)dl_alloc(t->ctx, sizeof(double) * (size_t)(n * m));
  if (!q) return DL_ERR_NOMEM;
  for (i = 0; i < n * m; i++) q[i] = dl_rng_normal(r);
  for (j = 0; j < m; j++) { /* column j of q (row-major n x m) */
    double nrm = 0;
    for (k = 0; k < j; k++) {
      double dot = 0;
      for (i = 0; i < n; i++) dot += q[i * m + j] * q[i * m + k];
      for (i = 0; i < n; i++) q[i * m + j] -= dot * q[i * m + k];
    }
    for (i = 0; i < n; i++) nrm += q[i * m + j] * q[i * m + j];
    nrm = sqrt(nrm);
    if (nrm == 0) nrm = 1; /* a degenerate draw: probability zero */
    for (i = 0; i < n; i++) q[i * m + j] /= nrm;
  }
  /* t[a, b] = gain * (rows >= cols ? q[a, b] : q[b, a]) */
  for (i = 0; i < rows; i++)
    for (j = 0; j < cols; j++)
      dl__set_at(t, dl__offset_of_linear(t, i * cols + j), gain * (rows >= cols ? q[i * m + j] : q[j * m + i]));
  dl_free(t->ctx, q);
  return DL_OK;
}

/* Fill t by scheme `in` (DL_INIT_DEFAULT is not a scheme here: panics).
 * DL_OK, or DL_ERR_NOMEM (orthogonal's scratch). Panics, naming the tensor's
 * shape, when a fan-based scheme meets a tensor with fewer than 2 dims. */
DL_API dl_status dl_init_tensor(dl_tensor *t, dl_init in, dl_rng *r) {
  double fi, fo, gain, b;
  dl_init_fans(t, &fi, &fo);
  switch (in.kind) {
  case DL_INIT_CONSTANT: dl_tensor_fill(t, in.arg); return DL_OK;
  case DL_INIT_ZEROS: dl_tensor_fill(t, 0); return DL_OK;
  case DL_INIT_ONES: dl_tensor_fill(t, 1); return DL_OK;
  case DL_INIT_UNIFORM: dl_tensor_rand_uniform(t, r, -in.arg, in.arg); return DL_OK;
  case DL_INIT_NORMAL: dl_tensor_rand_normal(t, r, 0, in.arg); return DL_OK;
  case DL_INIT_ORTHOGONAL:
    if (t->ndim < 2) break;
    return dl__init_orthogonal(t, r, in.arg != 0 ? in.arg : 1);
  default: break;
  }
  if (in.kind <= DL_INIT_NORMAL || in.kind >= DL__INIT_COUNT)
    DL_PANIC(t->ctx, "dl_init_tensor", "no initialisation scheme %d (DL_INIT_DEFAULT is the layer's own)", (int)in.kind);
  if (t->ndim < 2 || fi == 0)
    DL_PANIC(t->ctx, "dl_init_tensor", "%s initialisation needs a tensor with at least 2 dims and fan_in > 0, not %s",
             dl_init_name(in.kind), DL_SHAPESTR(t));
  switch (in.kind) {
  case DL_INIT_XAVIER_UNIFORM:
    b = (in.arg != 0 ? in.arg : 1) * sqrt(6.0 / (fi + fo));
    dl_tensor_rand_uniform(t, r, -b, b);
    break;
  case DL_INIT_XAVIER_NORMAL:
    dl_tensor_rand_normal(t, r, 0, (in.arg != 0 ? in.arg : 1) * sqrt(2.0 / (fi + fo)));
    break;
  case DL_INIT_KAIMING_UNIFORM:
    gain = sqrt(2.0 / (1 + in.arg * in.arg));
    b = gain * sqrt(3.0 / fi);
    dl_tensor_rand_uniform(t, r, -b, b);
    break;
  case DL_INIT_KAIMING_NORMAL:
    gain = sqrt(2.0 / (1 + in.arg * in.arg));
    dl_tensor_rand_normal(t, r, 0, gain / sqrt(fi));
    break;
  case DL_INIT_LECUN_UNIFORM:
    b = sqrt(3.0 / fi);
    dl_tensor_rand_uniform(t, r, -b, b);
    break;
  default: /* DL_INIT_LECUN_NORMAL */
    dl_tensor_rand_normal(t, r, 0, 1.0 / sqrt(fi));
    break;
  }
  return DL_OK;
}

/* >>types ------------------------------------------------------------------ */

/* What a parameter is: a weight, a bias, a normalisation parameter, or a
 * buffer (running statistics: saved, not trained). */
typedef enum dl_param_kind {
  DL_PARAM_WEIGHT = 0, /* decayed by default */
  DL_PARAM_BIAS,       /* wd_mult 0 by default */
  DL_PARAM_NORM,       /* a normalisation layer's weight or bias: wd_mult 0 */
  DL_PARAM_BUFFER      /* state saved with the model, never trained (running_mean ...) */
} dl_param_kind;

/* One named tensor of a model. The tensor struct lives inside; its address
 * is stable for the model's life. */
typedef struct dl_param {
  char name[DL_NAME_MAX];  /* full name, PyTorch state_dict style */
  dl_tensor t;             /* the values (t.grad: the gradient, after dl_model_pack) */
  dl_tensor g;             /* the gradient tensor t.grad points to (a view into the model's buffer) */
  dl_param_kind kind; /* weight, bias, normalisation parameter or buffer */
  int sparse;              /* row-sparse gradient in t.sgrad (Embedding(sparse=1)): lazy updates */
  int frozen;              /* no gradient, no update */
  double lr_mult, wd_mult; /* per-parameter multipliers of the optimizer's lr and weight decay */
  double clip_value;       /* gradient clamp to [-clip_value, clip_value]; 0 = off */
  double clip_norm;        /* per-parameter gradient L2 norm cap; 0 = off */
  dl_init init;            /* the scheme last used (DL_INIT_DEFAULT: the layer's own) */
  dl_init default_init;    /* the layer's PyTorch default, as a scheme */
  int64_t offset;          /* element offset in the packed buffers; -1 before dl_model_pack or for buffers */
  void *own;               /* its own allocation before packing (and for buffers) */
  struct dl_layer *layer;  /* the layer that made it */
} dl_param;

typedef struct dl_layer dl_layer;
typedef struct dl_model dl_model;

/* What a layer type provides. forward(l, tp, x) -> y on the tape (NULL for
 * a layer that cannot be called with one input). describe writes the
 * constructor's arguments ("784, 256, bias=1"). free releases what the
 * layer allocated itself beyond its struct (usually NULL). container 1:
 * other layers may be made with it as their parent (a layer type that owns
 * named parts, like transformer.h's GPT); Sequential, Residual and Module
 * always may. */
typedef struct dl_layer_vt {
  const char *type; /* "Linear", "Conv2d" ... */
  dl_tensor *(*forward)(dl_layer *l, dl_tape *tp, dl_tensor *x); /* y = forward(l, tp, x); NULL for a layer called part by part */
  void (*describe)(const dl_layer *l, char *buf, size_t n); /* the constructor's arguments as text, for dl_model_summary */
  void (*free)(dl_layer *l); /* releases what the layer allocated beyond its struct (usually NULL) */
  int container; /* 1: other layers may be made with it as their parent */
} dl_layer_vt;

/* A Module's forward in plain C (dl_module_make): y from x, its parts
 * reached with dl_layer_child. */
typedef dl_tensor *(*dl_forward_fn)(dl_layer *l, dl_tape *tp, dl_tensor *x);

/* A layer: its kind, name, parent and children, and its parameters (in the
 * model's list). Made by the dl_*_make constructors, owned by the model. */
struct dl_layer {
  const dl_layer_vt *vt; /* its kind */
  dl_model *model; /* the model that owns it */
  dl_layer *parent;         /* NULL for the root */
  char name[DL_NAME_MAX];   /* full name ("" for the root) */
  const char *local;        /* the last component of name */
  dl_layer **child;         /* children, in order */
  int nchild, capchild; /* children and capacity */
  int first_param, nparam;  /* the params it made itself: model->params[first_param ..] */
  dl_forward_fn fn;         /* a Module's forward */
  void *user;               /* a Module's user pointer */
  int64_t out_shape[DL_MAX_DIMS]; /* the output shape seen by dl_model_summary */
  int out_ndim;             /* -1: not traced */
  int keeps_nothing;        /* 1: a library layer type, whose forward keeps no tensor past its call (dl__lay_keeps_nothing) */
  dl_forward_fn fwd_relu;   /* a library layer's forward and a ReLU after it as one op, or NULL (BatchNorm) */
  dl_forward_fn fwd_relu_pool; /* likewise with a 2x2 max pool after the ReLU (BatchNorm2d) */
  int is_relu;              /* 1: the library's ReLU activation layer (dl__lay_seq_forward fuses it into fwd_relu) */
  int is_pool2;             /* 1: the library's MaxPool2d(2): 2x2, stride 2, no padding, dilation, ceil_mode */
};

/* Model options; zero = default. */
typedef struct dl_model_desc {
  dl_dtype dtype;  /* of every parameter: DL_F32 (default) or DL_F64 */
  uint64_t seed;   /* initialisation and dropout streams (0 is a seed like any other) */
} dl_model_desc;

/* A model: its layers (a tree under root), every parameter by its full
 * name, the packed parameter and gradient buffers, the training mode and
 * the first failure. dl_model_make / dl_model_free. */
struct dl_model {
  dl_ctx *ctx; /* allocator and error reports */
  dl_dtype dtype; /* of every parameter */
  uint64_t seed; /* as in the desc */
  dl_rng rng;              /* initialisation draws */
  dl_param **params;       /* nparams, creation order (buffers included) */
  int nparams, capparams; /* parameters and capacity */
  dl_layer root;           /* nn.Sequential-like top level */
  dl_layer **layers;       /* every layer but the root, creation order (to free them) */
  int nlayers, caplayers; /* layers and capacity */
  int training;            /* 1: train mode (default) */
  int packed;              /* dl_model_pack done */
  void *pbuf, *gbuf;       /* packed values and gradients of the trainable parameters */
  int64_t pnumel;          /* elements in each packed buffer (with alignment padding) */
  int tracing;             /* dl_model_summary is running */
  dl_status status;        /* first failure while building */
};

/* >>names and patterns ----------------------------------------------------- */

/* Glob match: '*' any run of characters (dots included), '?' one character,
 * everything else literal. "conv*.weight" matches "conv1.weight" and
 * "conv2.block.weight"; "*" matches every name. */
DL_API int dl_name_match(const char *pat, const char *s) {
  const char *star = NULL, *back = NULL;
  while (*s) {
    if (*pat == '*') { star = pat++; back = s; }
    else if (*pat == '?' || *pat == *s) { pat++; s++; }
    else if (star) { pat = star + 1; s = ++back; }
    else return 0;
  }
  while (*pat == '*') pat++;
  return *pat == 0;
}

/* dst = a "." b (just b when a is empty); the caller checked that it fits
 * in DL_NAME_MAX. */
DL_API void dl__join_name(char *dst, const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  memcpy(dst, a, na);
  if (na) dst[na++] = '.';
  memcpy(dst + na, b, nb + 1);
}

/* Whether scheme `in` can fill t (the fan-based ones need >= 2 dims). */
DL_API int dl_init_applicable(const dl_tensor *t, dl_init in) {
  return in.kind <= DL_INIT_NORMAL || (t->ndim >= 2 && t->shape[1] > 0);
}

/* >>model ------------------------------------------------------------------ */

DL_API void dl__model_fail(dl_model *m, dl_status st) {
  if (m->status == DL_OK) m->status = st;
}
DL_API int dl__grow(dl_ctx *ctx, void **arr, int *cap, int need, size_t elem) {
  void *n;
  int nc;
  if (need <= *cap) return 1;
  nc = *cap ? *cap * 2 : 8;
  while (nc < need) nc *= 2;
  n = dl_alloc(ctx, elem * (size_t)nc);
  if (!n) return 0;
  if (*arr) { memcpy(n, *arr, elem * (size_t)*cap); dl_free(ctx, *arr); }
  *arr = n;
  *cap = nc;
  return 1;
}

/* The container types (defined with the containers): a layer's type is its
 * vtable, compared by address. */
DL__GLOBAL_DECL(const dl_layer_vt dl__lay_root_vt, dl__lay_seq_vt, dl__lay_residual_vt, dl__lay_module_vt)

/* A new empty model on the heap, in train mode. NULL when out of memory
 * (message in ctx). Free with dl_model_free. */
DL_API dl_model *dl_model_make(dl_ctx *ctx, const dl_model_desc *desc) {
  dl_model *m = (dl_model *)dl_alloc(ctx, sizeof *m);
  dl_dtype dt = desc && desc->dtype ? desc->dtype : DL_F32;
  if (!m) return NULL;
  if (dt != DL_F32 && dt != DL_F64) {
    dl_free(ctx, m);
    DL_PANIC(ctx, "dl_model_make", "parameters are f32 or f64, not %s", dl_dtype_name(dt));
  }
  memset(m, 0, sizeof *m);
  m->ctx = ctx;
  m->dtype = dt;
  m->seed = desc ? desc->seed : 0;
  m->rng = dl_rng_make(m->seed);
  m->training = 1;
  m->root.vt = &dl__lay_root_vt;
  m->root.model = m;
  m->root.local = m->root.name;
  m->root.out_ndim = -1;
  m->root.keeps_nothing = 1; /* (its children decide, and a forward set by dl_model_set_forward) */
  return m;
}

/* DL_OK, or the first failure met while building (the message is in ctx). */
DL_API dl_status dl_model_status(const dl_model *m) { return m ? m->status : DL_ERR_NOMEM; }

/* Release the model, its layers and parameters (NULL is fine). */
DL_API void dl_model_free(dl_model *m) {
  int i;
  if (!m) return;
  for (i = m->nlayers - 1; i >= 0; i--) {
    dl_layer *l = m->layers[i];
    if (l->vt->free) l->vt->free(l);
    dl_free(m->ctx, l->child);
    dl_free(m->ctx, l);
  }
  dl_free(m->ctx, m->root.child);
#ifdef DL_USE_CUDA
  if (m->nparams && m->params[0]->t.device == DL_CUDA) { /* gpu.h's dl_model_to_device */
    for (i = 0; i < m->nparams; i++)
      if (m->params[i]->kind == DL_PARAM_BUFFER && m->params[i]->t.numel)
        dl__gpu_release(m->ctx->gpu, m->params[i]->t.data);
    dl__gpu_release(m->ctx->gpu, m->pbuf);
    dl__gpu_release(m->ctx->gpu, m->gbuf);
    m->pbuf = m->gbuf = NULL;
  }
#endif
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    if (p->t.grad && (p->t.grad->flags & DL_TENSOR_OWNS_TANGENT)) { /* dl_hvp's H v */
      dl_tensor_free(p->t.grad->tangent);
      p->t.grad->tangent = NULL;
      p->t.grad->flags &= ~(unsigned)DL_TENSOR_OWNS_TANGENT;
    }
    dl_sgrad_free((dl_sgrad *)p->t.sgrad);
    dl_free(m->ctx, p->own);
    dl_free(m->ctx, p);
  }
  dl_free(m->ctx, m->params);
  dl_free(m->ctx, m->layers);
  dl_free(m->ctx, m->pbuf);
  dl_free(m->ctx, m->gbuf);
  dl_free(m->ctx, m);
}

/* The parameter (or buffer) named `name`, or NULL. */
DL_API dl_param *dl_model_param(const dl_model *m, const char *name) {
  int i;
  for (i = 0; i < m->nparams; i++)
    if (strcmp(m->params[i]->name, name) == 0) return m->params[i];
  return NULL;
}
/* Its tensor, or NULL. */
DL_API dl_tensor *dl_model_tensor(const dl_model *m, const char *name) {
  dl_param *p = dl_model_param(m, name);
  return p ? &p->t : NULL;
}
/* Number of trainable parameter elements (buffers excluded). */
DL_API int64_t dl_model_numel(const dl_model *m) {
  int64_t n = 0;
  int i;
  for (i = 0; i < m->nparams; i++)
    if (m->params[i]->kind != DL_PARAM_BUFFER) n += m->params[i]->t.numel;
  return n;
}

/* Train (1) or eval (0) mode for every layer. */
DL_API void dl_model_train(dl_model *m, int on) { m->training = on != 0; }

/* Move the trainable parameters into one contiguous buffer and give each its
 * gradient (zeroed) at the same offset of a second one; frozen parameters get
 * theirs too but do not require a gradient. Idempotent. DL_OK or
 * DL_ERR_NOMEM (the model unchanged). */
DL_API dl_status dl_model_pack(dl_model *m) {
  int64_t total = 0, align = (int64_t)(DL_ALIGN / dl_dtype_size(m->dtype));
  size_t es = dl_dtype_size(m->dtype);
  unsigned char *pb, *gb;
  int i;
  if (m->packed) return DL_OK;
  if (m->status != DL_OK) return m->status;
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    if (p->kind == DL_PARAM_BUFFER) continue;
    p->offset = total;
    total += (p->t.numel + align - 1) / align * align;
  }
  pb = (unsigned char *)dl_alloc(m->ctx, (size_t)(total ? total : 1) * es);
  gb = pb ? (unsigned char *)dl_alloc(m->ctx, (size_t)(total ? total : 1) * es) : NULL;
  if (!gb) {
    dl_free(m->ctx, pb);
    for (i = 0; i < m->nparams; i++) m->params[i]->offset = -1;
    return dl_fail(m->ctx, DL_ERR_NOMEM, "dl_model_pack: out of memory for %lld parameters and their gradients (2 x %zu bytes)",
                   (long long)total, (size_t)(total ? total : 1) * es);
  }
  memset(pb, 0, (size_t)(total ? total : 1) * es);
  memset(gb, 0, (size_t)(total ? total : 1) * es);
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    if (p->kind == DL_PARAM_BUFFER) continue;
    if (p->t.numel) memcpy(pb + (size_t)p->offset * es, p->t.data, (size_t)p->t.numel * es);
    dl_free(m->ctx, p->own);
    p->own = NULL;
    p->t.data = p->t.numel ? pb + (size_t)p->offset * es : NULL;
    dl_tensor_wrap(&p->g, m->ctx, m->dtype, p->t.ndim, p->t.shape, p->t.numel ? gb + (size_t)p->offset * es : NULL);
    p->t.grad = &p->g;
    if (!p->frozen) p->t.flags |= DL_TENSOR_REQUIRES_GRAD;
  }
  m->pbuf = pb;
  m->gbuf = gb;
  m->pnumel = total;
  m->packed = 1;
  return DL_OK;
}

DL_API void dl__model_zero_grad(dl_model *m, int dense);
/* Zero every gradient (the packed buffer in one pass; row-sparse gradients
 * forget their rows). */
DL_API void dl_model_zero_grad(dl_model *m) { dl__model_zero_grad(m, 1); }
/* dl_model_zero_grad; without `dense` the packed buffer is left as it is
 * (dl__apply_grads: the optimizer step has zeroed it). */
DL_API void dl__model_zero_grad(dl_model *m, int dense) {
  int i;
#ifdef DL_USE_CUDA
  if (m->gbuf && m->nparams && m->params[0]->t.device == DL_CUDA)
    dl__gpu_ok(&m->params[0]->t, "dl_model_zero_grad",
               dlg_memset0(dl__gpu_h(&m->params[0]->t, "dl_model_zero_grad"), m->gbuf,
                           (size_t)m->pnumel * dl_dtype_size(m->dtype)));
  else
#endif
  if (m->gbuf && dense) memset(m->gbuf, 0, (size_t)m->pnumel * dl_dtype_size(m->dtype));
  for (i = 0; i < m->nparams; i++) {
    dl_tensor *g = m->params[i]->t.grad;
    m->params[i]->t.flags &= ~(unsigned)DL_TENSOR_DENSE_GRAD;
    if (m->params[i]->t.sgrad) dl_sgrad_clear((dl_sgrad *)m->params[i]->t.sgrad);
    if (g && (g->flags & DL_TENSOR_OWNS_TANGENT)) dl_tensor_fill(g->tangent, 0.0); /* dl_hvp's H v, as dl_zero_grad */
  }
}

/* >>hyperparameters by name ------------------------------------------------ */

/* The per-parameter settings dl_model_set changes (dl_model_configure's
 * keys lr_mult, wd_mult, clip_value, clip_norm, frozen). */
typedef enum dl_param_key {
  DL_LR_MULT,     /* double */
  DL_WD_MULT,     /* double */
  DL_CLIP_VALUE,  /* double, >= 0 */
  DL_CLIP_NORM,   /* double, >= 0 */
  DL_FROZEN       /* 0 or 1 */
} dl_param_key;

DL_API void dl__param_set_frozen(dl_param *p, int on) {
  p->frozen = on != 0;
  if (p->t.grad) {
    if (p->frozen) p->t.flags &= ~(unsigned)DL_TENSOR_REQUIRES_GRAD;
    else p->t.flags |= DL_TENSOR_REQUIRES_GRAD;
  }
}

/* Set one hyperparameter on every trainable parameter whose name matches the
 * glob `pattern` (buffers are skipped). Returns how many matched (0 is not
 * an error here: dl_model_configure reports it). Panics on a negative clip. */
DL_API int dl_model_set(dl_model *m, const char *pattern, dl_param_key key, double value) {
  int i, n = 0;
  if ((key == DL_CLIP_VALUE || key == DL_CLIP_NORM) && !(value >= 0))
    DL_PANIC(m->ctx, "dl_model_set", "%s: a clip must be >= 0, not %g", pattern, value);
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    if (p->kind == DL_PARAM_BUFFER || !dl_name_match(pattern, p->name)) continue;
    switch (key) {
    case DL_LR_MULT: p->lr_mult = value; break;
    case DL_WD_MULT: p->wd_mult = value; break;
    case DL_CLIP_VALUE: p->clip_value = value; break;
    case DL_CLIP_NORM: p->clip_norm = value; break;
    case DL_FROZEN: dl__param_set_frozen(p, value != 0); break;
    }
    n++;
  }
  return n;
}

/* Re-initialise every trainable parameter matching `pattern` with scheme
 * `in` now, from the model's rng (DL_INIT_DEFAULT: the layer's PyTorch
 * default). Returns how many, or -1 on DL_ERR_NOMEM. */
DL_API int dl_model_set_init(dl_model *m, const char *pattern, dl_init in) {
  int i, n = 0;
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    if (p->kind == DL_PARAM_BUFFER || !dl_name_match(pattern, p->name)) continue;
    if (dl_init_tensor(&p->t, in.kind == DL_INIT_DEFAULT ? p->default_init : in, &m->rng) != DL_OK) return -1;
    p->init = in;
    n++;
  }
  return n;
}

DL_API int dl__spec_init(const char *v, size_t n, dl_init *out) {
  int k;
  char buf[64];
  const char *paren;
  if (n >= sizeof buf) return 0;
  memcpy(buf, v, n);
  buf[n] = 0;
  paren = strchr(buf, '(');
  out->arg = 0;
  if (paren) {
    char *end;
    out->arg = strtod(paren + 1, &end);
    if (end == paren + 1 || *end != ')' || end[1] != 0) return 0;
    buf[paren - buf] = 0;
  }
  for (k = 0; k < DL__INIT_COUNT; k++)
    if (strcmp(buf, dl_init_name((dl_init_kind)k)) == 0) { out->kind = (dl_init_kind)k; return 1; }
  return 0;
}

/* Apply a text spec, e.g. from a command-line flag:
 *   "PATTERN:KEY=VALUE[,KEY=VALUE...][;PATTERN:...]"
 * keys lr_mult, wd_mult, clip_value, clip_norm (numbers), frozen (0/1),
 * init (a scheme name as dl_init_name gives, optionally with its arg:
 * "xavier_uniform", "kaiming_normal(0.1)", "constant(0.5)"). Rules apply in
 * order, so later ones win. The whole spec is checked before anything is
 * applied: DL_OK, or DL_ERR_ARG with a message naming the rule (bad syntax,
 * unknown key, bad value, a pattern that matches no parameter, a fan-based
 * init on a 1-d parameter) and the model unchanged. (DL_ERR_NOMEM from an
 * orthogonal init can stop it half way.) */
DL_API int dl__count_match(const dl_model *m, const char *pat) {
  int i, n = 0;
  for (i = 0; i < m->nparams; i++) n += m->params[i]->kind != DL_PARAM_BUFFER && dl_name_match(pat, m->params[i]->name);
  return n;
}
/* Apply a text spec of per-parameter settings (see above); DL_OK, or
 * DL_ERR_ARG with the model unchanged. */
DL_API dl_status dl_model_configure(dl_model *m, const char *spec) {
  int pass;
  for (pass = 0; pass < 2; pass++) {
    const char *s = spec;
    while (*s) {
      const char *rule = s, *end = strchr(s, ';'), *colon;
      char pat[DL_NAME_MAX];
      size_t rl;
      if (!end) end = s + strlen(s);
      rl = (size_t)(end - rule);
      colon = (const char *)memchr(rule, ':', rl);
      if (!colon || colon == rule || (size_t)(colon - rule) >= sizeof pat)
        return dl_fail(m->ctx, DL_ERR_ARG, "dl_model_configure: rule '%.*s' is not PATTERN:KEY=VALUE,...", (int)rl, rule);
      memcpy(pat, rule, (size_t)(colon - rule));
      pat[colon - rule] = 0;
      s = colon + 1;
      while (s < end) {
        const char *kv = s, *kend = (const char *)memchr(s, ',', (size_t)(end - s)), *eq;
        char key[32];
        int matched = -2;
        if (!kend) kend = end;
        eq = (const char *)memchr(kv, '=', (size_t)(kend - kv));
        if (!eq || eq == kv || (size_t)(eq - kv) >= sizeof key)
          return dl_fail(m->ctx, DL_ERR_ARG, "dl_model_configure: '%.*s' in rule '%.*s' is not KEY=VALUE",
                         (int)(kend - kv), kv, (int)rl, rule);
        memcpy(key, kv, (size_t)(eq - kv));
        key[eq - kv] = 0;
        if (strcmp(key, "init") == 0) {
          dl_init in;
          if (!dl__spec_init(eq + 1, (size_t)(kend - eq - 1), &in))
            return dl_fail(m->ctx, DL_ERR_ARG, "dl_model_configure: unknown init '%.*s' in rule '%.*s'",
                           (int)(kend - eq - 1), eq + 1, (int)rl, rule);
          {
            int i;
            for (i = 0; i < m->nparams; i++)
              if (m->params[i]->kind != DL_PARAM_BUFFER && dl_name_match(pat, m->params[i]->name) &&
                  !dl_init_applicable(&m->params[i]->t, in.kind == DL_INIT_DEFAULT ? m->params[i]->default_init : in))
                return dl_fail(m->ctx, DL_ERR_ARG, "dl_model_configure: %s cannot initialise %s %s (it needs 2 or more dims)",
                               dl_init_name(in.kind), m->params[i]->name, DL_SHAPESTR(&m->params[i]->t));
          }
          matched = pass ? dl_model_set_init(m, pat, in) : dl__count_match(m, pat);
          if (matched < 0) return DL_ERR_NOMEM;
        } else {
          static const char *const keys[] = {"lr_mult", "wd_mult", "clip_value", "clip_norm", "frozen"};
          char num[64], *nend;
          double v;
          int k;
          size_t vl = (size_t)(kend - eq - 1);
          for (k = 0; k < 5; k++)
            if (strcmp(key, keys[k]) == 0) break;
          if (k == 5)
            return dl_fail(m->ctx, DL_ERR_ARG,
                           "dl_model_configure: unknown key '%s' in rule '%.*s' (lr_mult, wd_mult, clip_value, clip_norm, frozen, init)",
                           key, (int)rl, rule);
          if (vl == 0 || vl >= sizeof num)
            return dl_fail(m->ctx, DL_ERR_ARG, "dl_model_configure: no value for '%s' in rule '%.*s'", key, (int)rl, rule);
          memcpy(num, eq + 1, vl);
          num[vl] = 0;
          v = strtod(num, &nend);
          if (*nend != 0 || v != v || ((k == 2 || k == 3) && v < 0))
            return dl_fail(m->ctx, DL_ERR_ARG, "dl_model_configure: bad value '%s' for '%s' in rule '%.*s'", num, key,
                           (int)rl, rule);
          matched = pass ? dl_model_set(m, pat, (dl_param_key)k, v) : dl__count_match(m, pat);
        }
        if (matched == 0)
          return dl_fail(m->ctx, DL_ERR_ARG, "dl_model_configure: pattern '%s' matches no parameter", pat);
        s = kend < end ? kend + 1 : end;
      }
      s = *end ? end + 1 : end;
    }
  }
  return DL_OK;
}

/* >>layer base ------------------------------------------------------------- */

/* A new layer of `size` bytes (a struct starting with dl_layer), named under
 * parent; NULL once the model has failed. Panics on misuse. */
DL_API dl_layer *dl_layer_new(dl_model *m, dl_layer *parent, const char *name, const dl_layer_vt *vt, size_t size) {
  dl_layer *l, *p;
  char local[24];
  int i, len;
  if (!m || m->status != DL_OK) return NULL; /* a dl_model_make that failed, or an earlier make */
  p = parent ? parent : &m->root;
  if (m->packed)
    DL_PANIC(m->ctx, vt->type, "cannot add a layer to a packed model (add every layer before making the optimizer)");
  if (p->model != m) DL_PANIC(m->ctx, vt->type, "parent layer '%s' belongs to another model", p->name);
  if (p != &m->root && p->vt != &dl__lay_seq_vt && p->vt != &dl__lay_residual_vt && p->vt != &dl__lay_module_vt &&
      !p->vt->container)
    DL_PANIC(m->ctx, vt->type, "parent '%s' (%s) is not a container", p->name, p->vt->type);
  if (!name) {
    snprintf(local, sizeof local, "%d", p->nchild);
    name = local;
  }
  if (!*name || strchr(name, '.'))
    DL_PANIC(m->ctx, vt->type, "layer name '%s' must be non-empty and without dots", name);
  for (i = 0; i < p->nchild; i++)
    if (strcmp(p->child[i]->local, name) == 0)
      DL_PANIC(m->ctx, vt->type, "'%s' already has a child named '%s'", p->name, name);
  len = (int)strlen(p->name) + (p->name[0] ? 1 : 0) + (int)strlen(name);
  if (len + 16 >= DL_NAME_MAX) { /* room for ".weight_ih_l0" */
    dl__model_fail(m, dl_fail(m->ctx, DL_ERR_ARG, "%s: name '%s.%s' is too long (DL_NAME_MAX %d)", vt->type, p->name,
                              name, DL_NAME_MAX));
    return NULL;
  }
  if (!dl__grow(m->ctx, (void **)&p->child, &p->capchild, p->nchild + 1, sizeof(dl_layer *)) ||
      !dl__grow(m->ctx, (void **)&m->layers, &m->caplayers, m->nlayers + 1, sizeof(dl_layer *))) {
    dl__model_fail(m, DL_ERR_NOMEM);
    return NULL;
  }
  l = (dl_layer *)dl_alloc(m->ctx, size);
  if (!l) { dl__model_fail(m, DL_ERR_NOMEM); return NULL; }
  memset(l, 0, size);
  l->vt = vt;
  l->model = m;
  l->parent = p;
  dl__join_name(l->name, p->name, name);
  l->local = l->name + (len - (int)strlen(name));
  l->first_param = m->nparams;
  l->out_ndim = -1;
  p->child[p->nchild++] = l;
  m->layers[m->nlayers++] = l;
  return l;
}
/* dl_layer_new for the library's own layer types, whose forward keeps no
 * tensor past its call (dl__lay_keeps_nothing). */
DL_API dl_layer *dl__lay_lib_new(dl_model *m, dl_layer *parent, const char *name, const dl_layer_vt *vt, size_t size) {
  dl_layer *l = dl_layer_new(m, parent, name, vt, size);
  if (l) l->keeps_nothing = 1;
  return l;
}

/* A parameter (or buffer) of layer l named l->name + "." + local, shape
 * given, filled by `init` from the model's rng. NULL on failure (model
 * failed). */
DL_API dl_tensor *dl_layer_param_new(dl_layer *l, const char *local, dl_param_kind kind, int ndim, const int64_t *shape,
                                     dl_init init, dl_dtype dtype) {
  dl_model *m = l->model;
  dl_param *p;
  size_t bytes;
  if (m->status != DL_OK) return NULL;
  if (dl_shape_size(dtype, ndim, shape, NULL, &bytes) != DL_OK) {
    dl__model_fail(m, DL_ERR_OVERFLOW);
    return NULL;
  }
  if (!dl__grow(m->ctx, (void **)&m->params, &m->capparams, m->nparams + 1, sizeof(dl_param *))) {
    dl__model_fail(m, DL_ERR_NOMEM);
    return NULL;
  }
  p = (dl_param *)dl_alloc(m->ctx, sizeof *p);
  if (!p) { dl__model_fail(m, DL_ERR_NOMEM); return NULL; }
  memset(p, 0, sizeof *p);
  p->own = dl_alloc(m->ctx, bytes ? bytes : 1);
  if (!p->own) { dl_free(m->ctx, p); dl__model_fail(m, DL_ERR_NOMEM); return NULL; }
  memset(p->own, 0, bytes ? bytes : 1);
  if (strlen(l->name) + strlen(local) + 2 > DL_NAME_MAX) {
    dl_free(m->ctx, p->own);
    dl_free(m->ctx, p);
    dl__model_fail(m, dl_fail(m->ctx, DL_ERR_ARG, "parameter name '%s.%s' is too long (DL_NAME_MAX %d)", l->name, local,
                              DL_NAME_MAX));
    return NULL;
  }
  dl__join_name(p->name, l->name, local);
  dl_tensor_wrap(&p->t, m->ctx, dtype, ndim, shape, bytes ? p->own : NULL);
  p->kind = kind;
  p->lr_mult = 1;
  p->wd_mult = kind == DL_PARAM_WEIGHT ? 1 : 0;
  p->default_init = init;
  p->offset = -1;
  p->layer = l;
  if (init.kind != DL_INIT_DEFAULT && dl_init_tensor(&p->t, init, &m->rng) != DL_OK) {
    dl_free(m->ctx, p->own);
    dl_free(m->ctx, p);
    dl__model_fail(m, DL_ERR_NOMEM);
    return NULL;
  }
  m->params[m->nparams++] = p;
  l->nparam = m->nparams - l->first_param;
  return &p->t;
}

/* The child of l named `local` ("conv1", "0"), or NULL. */
DL_API dl_layer *dl_layer_child(const dl_layer *l, const char *local) {
  int i;
  for (i = 0; i < l->nchild; i++)
    if (strcmp(l->child[i]->local, local) == 0) return l->child[i];
  return NULL;
}
/* The layer with full name `name` ("features.3"), or NULL; "" is the root. */
DL_API dl_layer *dl_model_layer(dl_model *m, const char *name) {
  if (!m) return NULL; /* a dl_model_make that failed */
  int i;
  if (!*name) return &m->root;
  for (i = 0; i < m->nlayers; i++)
    if (strcmp(m->layers[i]->name, name) == 0) return m->layers[i];
  return NULL;
}
/* The tensor of l's own parameter `local` ("weight", "bias",
 * "running_mean"), or NULL. */
DL_API dl_tensor *dl_layer_param(const dl_layer *l, const char *local) {
  int i;
  size_t n = strlen(l->name);
  for (i = l->first_param; i < l->first_param + l->nparam; i++) {
    dl_param *p = l->model->params[i];
    const char *s = p->name + n + (n ? 1 : 0);
    if (strcmp(s, local) == 0) return &p->t;
  }
  return NULL;
}

/* y = l(x) on the tape: the layer's forward, recorded for the summary. */
DL_API dl_tensor *dl_layer_call(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl_tensor *y;
  if (!l) DL_PANIC(tp->ctx, "dl_layer_call", "layer is NULL (a make that failed, or a child name that does not exist)");
  if (!l->vt->forward && !l->fn)
    DL_PANIC(tp->ctx, "dl_layer_call", "%s '%s' has no one-input forward", l->vt->type, l->name);
  y = l->fn ? l->fn(l, tp, x) : l->vt->forward(l, tp, x);
  if (l->model->tracing && y) {
    int d;
    l->out_ndim = y->ndim;
    for (d = 0; d < y->ndim; d++) l->out_shape[d] = y->shape[d];
  }
  return y;
}
/* The model's forward: its root (children in order, or the root Module
 * function set by dl_model_set_forward). */
DL_API dl_tensor *dl_model_forward(dl_model *m, dl_tape *tp, dl_tensor *x) { return dl_layer_call(&m->root, tp, x); }
/* Give the root a forward function in plain C (its children stay named as
 * they are); fn NULL restores "children in order". */
DL_API void dl_model_set_forward(dl_model *m, dl_forward_fn fn, void *user) {
  m->root.fn = fn;
  m->root.user = user;
}

DL_API void dl__check_input(const dl_layer *l, const dl_tensor *x, int min_nd, int max_nd, int dim, int64_t size) {
  if (x->dtype != l->model->dtype || x->ndim < min_nd || x->ndim > max_nd ||
      (dim != 0 && x->shape[dim < 0 ? x->ndim + dim : dim] != size))
    DL_PANIC(x->ctx, l->vt->type, "'%s' expects %s input with %d..%d dims and size %lld at dim %d, got %s", l->name,
             dl_dtype_name(l->model->dtype), min_nd, max_nd, (long long)size, dim, DL_SHAPESTR(x));
}

/* >>containers ------------------------------------------------------------- */

/* 1 when l's forward, and its children's, keep no tensor past the call:
 * layers the library's make functions made (containers by their children),
 * not a Module's own C function nor a layer type of the user's (whose
 * forward might keep an output for a later layer). A flag set at the make,
 * not a comparison with the library's tables or functions: naming those
 * here would compile every layer type into every program (3 s at -O2). */
DL_API int dl__lay_keeps_nothing(const dl_layer *l) {
  int i;
  if (l->fn || !l->keeps_nothing) return 0;
  for (i = 0; i < l->nchild; i++)
    if (!dl__lay_keeps_nothing(l->child[i])) return 0;
  return 1;
}
#ifdef DL_USE_CUDA
/* A Sequential's forward under no-grad on a device tape (evaluation):
 * child i's output (and scratch) comes from bank (cur + i) % 2 of the tape's
 * device memory, and before child i >= 2 runs its bank is given back to
 * where it stood when the Sequential began: what is there (child i - 2's
 * output) is dead once child i - 1 has read it, as nothing is recorded.
 * Unless child i's input lies there (a child that returned a view of its
 * input). So an evaluation holds two layers' outputs at a time instead of
 * every layer's, as PyTorch under torch.no_grad() does; the values are the
 * same. Memory before the Sequential (its input, the caller's tensors) is
 * never touched. Only for children that keep nothing past their call
 * (dl__lay_keeps_nothing: the library's layers; a Module's own C function or
 * a layer type of the user's may hold an earlier output, as a skip
 * connection kept in its state does, so a Sequential with one runs as
 * always). */
DL_API dl_tensor *dl__lay_seq_nograd_dev(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__gpu_tapemem *m = (dl__gpu_tapemem *)tp->dev;
  const int was = m->cur;
  dl__gpu_mark k[2];
  int i;
  k[0] = dl__gpu_arena_mark(&m->bank[0]);
  k[1] = dl__gpu_arena_mark(&m->bank[1]);
  for (i = 0; i < l->nchild; i++) {
    const int b = (was + i) & 1;
    if (i >= 2 && (!x->data || !dl__gpu_arena_holds(&m->bank[b], k[b], x->data)))
      dl__gpu_arena_release(&m->bank[b], k[b]);
    m->cur = b;
    x = dl_layer_call(l->child[i], tp, x);
  }
  m->cur = was;
  return x;
}
#endif
/* The same on a host tape: child i's output and scratch from tp->bank[(s +
 * i) % 2] (s: the bank the caller was in, else 0), the bank given back to
 * its mark before child i >= 2 runs unless child i's input (its struct or
 * its data) lies there. Ops that take memory from the tape's own arena keep
 * it there, as always. */
DL_API dl_tensor *dl__lay_seq_nograd_host(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  const int was = tp->bank_cur, s = was ? was - 1 : 0;
  dl_arena_mark k[2];
  int i;
  if (!tp->bank[0].owns && (dl_arena_init(&tp->bank[0], tp->ctx, 0, 1) != DL_OK ||
                            dl_arena_init(&tp->bank[1], tp->ctx, 0, 1) != DL_OK)) {
    dl_arena_free(&tp->bank[0]); /* (capacity 0 allocates nothing: not reached) */
    for (i = 0; i < l->nchild; i++) x = dl_layer_call(l->child[i], tp, x);
    return x;
  }
  tp->bank_used = 1;
  k[0] = dl_arena_get_mark(&tp->bank[0]);
  k[1] = dl_arena_get_mark(&tp->bank[1]);
  for (i = 0; i < l->nchild; i++) {
    const int b = (s + i) & 1;
    if (i >= 2 && !dl__arena_holds(&tp->bank[b], k[b], x) && !dl__arena_holds(&tp->bank[b], k[b], x->data))
      dl_arena_rewind(&tp->bank[b], k[b]);
    tp->bank_cur = b + 1;
    x = dl_layer_call(l->child[i], tp, x);
  }
  tp->bank_cur = was;
  return x;
}
DL_API dl_tensor *dl__lay_seq_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  int i;
  if (tp->no_grad && !tp->hvp && !x->tangent && l->nchild > 2 && dl__lay_keeps_nothing(l)) {
#ifdef DL_USE_CUDA
    if (tp->dev) return dl__lay_seq_nograd_dev(l, tp, x);
#endif
    if (tp->arena.grow) return dl__lay_seq_nograd_host(l, tp, x);
  }
  for (i = 0; i < l->nchild; i++) {
    dl_layer *c = l->child[i], *nx = i + 1 < l->nchild ? l->child[i + 1] : NULL;
    dl_layer *n2 = i + 2 < l->nchild ? l->child[i + 2] : NULL;
    if (n2 && c->fwd_relu_pool && nx->is_relu && n2->is_pool2 && !c->fn && !nx->fn && !n2->fn && !l->model->tracing) {
      dl_tensor *y = c->fwd_relu_pool(c, tp, x); /* NULL: the three do not fuse here */
      if (y) {
        x = y;
        i += 2;
        continue;
      }
    }
    if (nx && c->fwd_relu && nx->is_relu && !c->fn && !nx->fn && !l->model->tracing) {
      dl_tensor *y = c->fwd_relu(c, tp, x); /* NULL: the pair does not fuse here (a device, tangents) */
      if (y) {
        x = y;
        i++;
        continue;
      }
    }
    x = dl_layer_call(c, tp, x);
  }
  return x;
}
DL__GLOBAL_LATE(const dl_layer_vt dl__lay_root_vt, {"Model", dl__lay_seq_forward, NULL, NULL, 0});
DL__GLOBAL_LATE(const dl_layer_vt dl__lay_seq_vt, {"Sequential", dl__lay_seq_forward, NULL, NULL, 0});

/* nn.Sequential: y = children in order. */
DL_API dl_layer *dl_sequential_make(dl_model *m, dl_layer *parent, const char *name) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_lib_new(m, parent, name, &dl__lay_seq_vt, sizeof(dl_layer));
}

/* A layer whose forward is fn (plain C); its children are its named parts.
 * fn may be NULL for a named group that is only called part by part. */
DL__GLOBAL_LATE(const dl_layer_vt dl__lay_module_vt, {"Module", NULL, NULL, NULL, 0});
/* Append a Module: a layer whose forward is fn (NULL: a group called part
 * by part), user passed through; add its parts as its children. NULL on
 * failure. */
DL_API dl_layer *dl_module_make(dl_model *m, dl_layer *parent, const char *name, dl_forward_fn fn, void *user) {
  dl_layer *l = dl_layer_new(m, parent, name, &dl__lay_module_vt, sizeof(dl_layer));
  if (l) { l->fn = fn; l->user = user; }
  return l;
}

/* >>activations ------------------------------------------------------------ */

/* Activation functions of dl_act_make, dl_residual_make and dl_t_act. */
typedef enum dl_act {
  DL_ACT_NONE = 0, /* identity */
  DL_ACT_RELU, DL_ACT_LEAKY_RELU, DL_ACT_ELU, DL_ACT_GELU, DL_ACT_GELU_TANH, DL_ACT_SILU,
  DL_ACT_SIGMOID, DL_ACT_TANH, DL_ACT_SOFTPLUS
} dl_act;

/* y = act(x): identity, ReLU, LeakyReLU(alpha; 0 -> 0.01), ELU(alpha; 0 -> 1),
 * GELU (erf), GELU (tanh approximation), SiLU, Sigmoid, Tanh, Softplus. */
DL_API dl_tensor *dl_t_act(dl_tape *tp, dl_tensor *x, dl_act a, double alpha) {
  switch (a) {
  case DL_ACT_NONE: return x;
  case DL_ACT_RELU: return dl_t_relu(tp, x);
  case DL_ACT_LEAKY_RELU: return dl_t_leaky_relu(tp, x, alpha != 0 ? alpha : 0.01);
  case DL_ACT_ELU: return dl_t_elu(tp, x, alpha != 0 ? alpha : 1.0);
  case DL_ACT_GELU: return dl_t_gelu(tp, x);
  case DL_ACT_GELU_TANH: return dl_t_gelu_tanh(tp, x);
  case DL_ACT_SILU: return dl_t_silu(tp, x);
  case DL_ACT_SIGMOID: return dl_t_sigmoid(tp, x);
  case DL_ACT_TANH: return dl_t_tanh(tp, x);
  case DL_ACT_SOFTPLUS: return dl_t_softplus(tp, x);
  }
  DL_PANIC(tp->ctx, "dl_t_act", "unknown activation %d", (int)a);
}
/* The activation's PyTorch name ("ReLU", ...). */
DL_API const char *dl_act_name(dl_act a) {
  static const char *const n[] = {"Identity", "ReLU", "LeakyReLU", "ELU", "GELU", "GELU(tanh)",
                                  "SiLU", "Sigmoid", "Tanh", "Softplus"};
  return (unsigned)a <= DL_ACT_SOFTPLUS ? n[a] : "?";
}

typedef struct dl__lay_act_layer {
  dl_layer base;
  dl_act act;
  double alpha;
} dl__lay_act_layer;
DL_API dl_tensor *dl__lay_act_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__lay_act_layer *a = (dl__lay_act_layer *)l;
  return dl_t_act(tp, x, a->act, a->alpha);
}
DL_API void dl__lay_act_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__lay_act_layer *a = (const dl__lay_act_layer *)l;
  snprintf(buf, n, "%s", a->alpha != 0 ? "alpha" : "");
  if (a->alpha != 0) snprintf(buf, n, "alpha=%g", a->alpha);
}
DL__GLOBAL(const dl_layer_vt dl__lay_act_vt, {"Activation", dl__lay_act_forward, dl__lay_act_describe, NULL, 0});

/* An activation as a layer (no parameters; takes an index in a Sequential
 * like nn.ReLU does). */
DL_API dl_layer *dl_act_make(dl_model *m, dl_layer *parent, const char *name, dl_act act, double alpha) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_act_layer *a = (dl__lay_act_layer *)dl__lay_lib_new(m, parent, name, &dl__lay_act_vt, sizeof(dl__lay_act_layer));
  if (a) {
    a->act = act;
    a->alpha = alpha;
    a->base.is_relu = act == DL_ACT_RELU;
  }
  return a ? &a->base : NULL;
}

/* Residual: y = act(body(x) + shortcut(x)), body = the children in order
 * except one named "shortcut" (when there is none, shortcut(x) = x). */
typedef struct dl__lay_residual {
  dl_layer base;
  dl_act act;
} dl__lay_residual;
DL_API dl_tensor *dl__lay_residual_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl_tensor *h = x, *s = x;
  int i;
  for (i = 0; i < l->nchild; i++) {
    if (strcmp(l->child[i]->local, "shortcut") == 0) s = dl_layer_call(l->child[i], tp, x);
    else h = dl_layer_call(l->child[i], tp, h);
  }
  return dl_t_act(tp, dl_t_add(tp, h, s), ((dl__lay_residual *)l)->act, 0);
}
DL_API void dl__lay_residual_describe(const dl_layer *l, char *buf, size_t n) {
  snprintf(buf, n, "+ %s", dl_layer_child(l, "shortcut") ? "shortcut" : "x");
  if (((const dl__lay_residual *)l)->act) {
    size_t k = strlen(buf);
    snprintf(buf + k, n - k, ", then %s", dl_act_name(((const dl__lay_residual *)l)->act));
  }
}
DL__GLOBAL_LATE(const dl_layer_vt dl__lay_residual_vt, {"Residual", dl__lay_residual_forward, dl__lay_residual_describe, NULL, 0});
/* Append a Residual: y = act(children(x) + x), its children run in order (a
 * container). NULL on failure. */
DL_API dl_layer *dl_residual_make(dl_model *m, dl_layer *parent, const char *name, dl_act act) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_residual *r = (dl__lay_residual *)dl__lay_lib_new(m, parent, name, &dl__lay_residual_vt, sizeof(dl__lay_residual));
  if (r) r->act = act;
  return r ? &r->base : NULL;
}

/* >>linear ----------------------------------------------------------------- */

/* nn.Linear(in, out, bias=not no_bias): weight [out, in], bias [out];
 * x [..., in] -> [..., out]. Init: kaiming_uniform(a = sqrt 5) weight
 * (U(+-1/sqrt(in))), bias U(+-1/sqrt(in)). */
typedef struct dl_linear_desc {
  int64_t in, out; /* input and output features */
  int no_bias; /* 1: no bias */
} dl_linear_desc;

typedef struct dl__lay_linear {
  dl_layer base;
  dl_linear_desc d;
  dl_tensor *w, *b;
} dl__lay_linear;
DL_API dl_tensor *dl__lay_linear_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__lay_linear *L = (dl__lay_linear *)l;
  dl__check_input(l, x, 1, DL_MAX_DIMS, -1, L->d.in);
  return dl_t_linear(tp, x, L->w, L->b);
}
DL_API void dl__lay_linear_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__lay_linear *L = (const dl__lay_linear *)l;
  snprintf(buf, n, "%lld, %lld%s", (long long)L->d.in, (long long)L->d.out, L->d.no_bias ? ", bias=0" : "");
}
DL__GLOBAL(const dl_layer_vt dl__lay_linear_vt, {"Linear", dl__lay_linear_forward, dl__lay_linear_describe, NULL, 0});
/* Append a Linear layer (torch.nn.Linear: y = x W^T + b, weight [out, in],
 * bias [out]). NULL on failure (the message in the model's ctx). */
DL_API dl_layer *dl_linear_make(dl_model *m, dl_layer *parent, const char *name, const dl_linear_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_linear *L;
  if (d->in <= 0 || d->out <= 0)
    DL_PANIC(m->ctx, "dl_linear_make", "in %lld and out %lld must be > 0", (long long)d->in, (long long)d->out);
  L = (dl__lay_linear *)dl__lay_lib_new(m, parent, name, &dl__lay_linear_vt, sizeof *L);
  if (!L) return NULL;
  L->d = *d;
  L->w = dl_layer_param_new(&L->base, "weight", DL_PARAM_WEIGHT, 2, DL__I64S(d->out, d->in),
                            dl__init(DL_INIT_KAIMING_UNIFORM, sqrt(5.0)), m->dtype);
  if (!d->no_bias)
    L->b = dl_layer_param_new(&L->base, "bias", DL_PARAM_BIAS, 1, DL__I64S(d->out),
                              dl__init(DL_INIT_UNIFORM, 1.0 / sqrt((double)d->in)), m->dtype);
  return m->status == DL_OK ? &L->base : NULL;
}

/* >>convolution ------------------------------------------------------------ */

/* nn.Conv2d(in, out, kernel, stride, padding, dilation, groups, bias):
 * weight [out, in/groups, kh, kw], bias [out]. kernel, stride, padding and
 * dilation are the height's (and the width's unless the _w field is set);
 * kernel_w/stride_w/padding_w/dilation_w 0 = the same as the height's, and
 * padding_w = DL_PAD_NONE (-1) is no width padding under a nonzero height
 * padding (PyTorch's padding=(1, 0)). stride and dilation 0 = 1. Init as
 * Linear with fan_in = in/groups * kh * kw. */
#define DL_PAD_NONE (-1)
/* torch.nn.Conv2d's options (see above; zero fields are PyTorch's
 * defaults). */
typedef struct dl_conv2d_desc {
  int64_t in, out; /* input and output channels */
  int kernel, stride, padding, dilation, groups; /* height's (and width's unless the _w field is set); 0: PyTorch's default */
  int kernel_w, stride_w, padding_w, dilation_w; /* 0: as the square value */
  int no_bias; /* 1: no bias */
  /* as dl_conv2d_args (ops/conv.h): DL_PAD_EXPLICIT reads padding /
   * padding_w as the top / left (padding_w as given, no square default) and
   * these as the bottom / right; DL_PAD_SAME(_LOWER) computes them */
  int pad_mode, padding_end, padding_w_end;
} dl_conv2d_desc;
/* nn.Conv1d: weight [out, in/groups, kernel]; pad_mode, padding_end as
 * dl_conv1d_args. */
typedef struct dl_conv1d_desc {
  int64_t in, out; /* input and output channels */
  int kernel, stride, padding, dilation, groups; /* 0: PyTorch's default (stride 1, padding 0, dilation 1, groups 1) */
  int no_bias; /* 1: no bias */
  int pad_mode, padding_end; /* as dl_conv1d_args (ops/conv.h) */
} dl_conv1d_desc;

typedef struct dl__lay_conv {
  dl_layer base;
  dl_conv2d_desc d;
  int one_d;
  dl_tensor *w, *b;
} dl__lay_conv;
DL_API dl_tensor *dl__lay_conv_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__lay_conv *C = (dl__lay_conv *)l;
  const dl_conv2d_desc *d = &C->d;
  if (C->one_d) {
    const dl_conv1d_args a1 = {d->stride, d->padding, d->dilation, d->groups, d->pad_mode, d->padding_end};
    dl__check_input(l, x, 3, 3, 1, d->in);
    return dl_t_conv1d(tp, x, C->w, C->b, &a1);
  }
  {
    const dl_conv2d_args a2 = {d->stride,   d->stride_w, d->padding,     d->padding_w,    d->dilation,
                               d->dilation_w, d->groups, d->pad_mode, d->padding_end, d->padding_w_end};
    dl__check_input(l, x, 4, 4, 1, d->in);
    return dl_t_conv2d(tp, x, C->w, C->b, &a2);
  }
}
DL_API void dl__lay_conv_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__lay_conv *C = (const dl__lay_conv *)l;
  const dl_conv2d_desc *d = &C->d;
  if (d->pad_mode == DL_PAD_SAME || d->pad_mode == DL_PAD_SAME_LOWER)
    snprintf(buf, n, "%lld, %lld, kernel=%dx%d, stride=%dx%d, padding=%s%s", (long long)d->in, (long long)d->out,
             d->kernel, C->one_d ? 1 : d->kernel_w, d->stride, C->one_d ? 1 : d->stride_w,
             d->pad_mode == DL_PAD_SAME ? "SAME" : "SAME_LOWER", d->no_bias ? ", bias=0" : "");
  else if (d->pad_mode == DL_PAD_EXPLICIT)
    snprintf(buf, n, "%lld, %lld, kernel=%dx%d, stride=%dx%d, padding=%d,%d/%d,%d%s", (long long)d->in,
             (long long)d->out, d->kernel, C->one_d ? 1 : d->kernel_w, d->stride, C->one_d ? 1 : d->stride_w,
             d->padding, d->padding_end, C->one_d ? 0 : d->padding_w, C->one_d ? 0 : d->padding_w_end,
             d->no_bias ? ", bias=0" : "");
  else if (C->one_d || (d->kernel == d->kernel_w && d->stride == d->stride_w && d->padding == d->padding_w))
    snprintf(buf, n, "%lld, %lld, kernel=%d, stride=%d, padding=%d%s%s", (long long)d->in, (long long)d->out, d->kernel,
             d->stride, d->padding, d->groups > 1 ? ", groups>1" : "", d->no_bias ? ", bias=0" : "");
  else
    snprintf(buf, n, "%lld, %lld, kernel=%dx%d, stride=%dx%d, padding=%dx%d%s", (long long)d->in, (long long)d->out,
             d->kernel, d->kernel_w, d->stride, d->stride_w, d->padding, d->padding_w, d->no_bias ? ", bias=0" : "");
}
DL__GLOBAL(const dl_layer_vt dl__lay_conv2d_vt, {"Conv2d", dl__lay_conv_forward, dl__lay_conv_describe, NULL, 0});
DL__GLOBAL(const dl_layer_vt dl__lay_conv1d_vt, {"Conv1d", dl__lay_conv_forward, dl__lay_conv_describe, NULL, 0});

DL_API dl_layer *dl__lay_conv_make(dl_model *m, dl_layer *parent, const char *name, dl_conv2d_desc d, int one_d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_conv *C;
  const char *op = one_d ? "dl_conv1d_make" : "dl_conv2d_make";
  int64_t kw;
  double fan;
  if (!d.groups) d.groups = 1;
  if (!d.stride) d.stride = 1;
  if (!d.dilation) d.dilation = 1;
  if (!d.kernel_w) d.kernel_w = d.kernel;
  if (!d.stride_w) d.stride_w = d.stride;
  if (!d.padding_w && d.pad_mode != DL_PAD_EXPLICIT) d.padding_w = d.padding;
  if (d.padding_w == DL_PAD_NONE) d.padding_w = 0;
  if (!d.dilation_w) d.dilation_w = d.dilation;
  if (d.in <= 0 || d.out <= 0 || d.kernel <= 0 || d.kernel_w <= 0 || d.groups <= 0 || d.in % d.groups ||
      d.out % d.groups || d.padding < 0 || d.padding_w < 0 || d.stride < 0 || d.dilation < 0 || d.padding_end < 0 ||
      d.padding_w_end < 0)
    DL_PANIC(m->ctx, op, "bad sizes: in %lld, out %lld, kernel %dx%d, groups %d, padding %d (in and out divisible by groups)",
             (long long)d.in, (long long)d.out, d.kernel, d.kernel_w, d.groups, d.padding);
  C = (dl__lay_conv *)dl__lay_lib_new(m, parent, name, one_d ? &dl__lay_conv1d_vt : &dl__lay_conv2d_vt, sizeof *C);
  if (!C) return NULL;
  C->d = d;
  C->one_d = one_d;
  kw = one_d ? 1 : d.kernel_w;
  fan = (double)(d.in / d.groups) * d.kernel * (double)kw;
  if (one_d)
    C->w = dl_layer_param_new(&C->base, "weight", DL_PARAM_WEIGHT, 3, DL__I64S(d.out, d.in / d.groups, d.kernel),
                              dl__init(DL_INIT_KAIMING_UNIFORM, sqrt(5.0)), m->dtype);
  else
    C->w = dl_layer_param_new(&C->base, "weight", DL_PARAM_WEIGHT, 4,
                              DL__I64S(d.out, d.in / d.groups, d.kernel, kw),
                              dl__init(DL_INIT_KAIMING_UNIFORM, sqrt(5.0)), m->dtype);
  if (!d.no_bias)
    C->b = dl_layer_param_new(&C->base, "bias", DL_PARAM_BIAS, 1, DL__I64S(d.out),
                              dl__init(DL_INIT_UNIFORM, 1.0 / sqrt(fan)), m->dtype);
  return m->status == DL_OK ? &C->base : NULL;
}
/* Append a Conv2d layer (torch.nn.Conv2d: weight [out, in/groups, kh, kw],
 * bias [out]). NULL on failure. */
DL_API dl_layer *dl_conv2d_make(dl_model *m, dl_layer *parent, const char *name, const dl_conv2d_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_conv_make(m, parent, name, *d, 0);
}
/* Append a Conv1d layer (torch.nn.Conv1d: weight [out, in/groups, k], bias
 * [out]). NULL on failure. */
DL_API dl_layer *dl_conv1d_make(dl_model *m, dl_layer *parent, const char *name, const dl_conv1d_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl_conv2d_desc c;
  memset(&c, 0, sizeof c);
  c.in = d->in; c.out = d->out; c.kernel = d->kernel; c.stride = d->stride; c.padding = d->padding;
  c.dilation = d->dilation; c.groups = d->groups; c.no_bias = d->no_bias;
  c.pad_mode = d->pad_mode; c.padding_end = d->padding_end;
  c.kernel_w = c.stride_w = c.dilation_w = 1;
  c.padding_w = 0;
  return dl__lay_conv_make(m, parent, name, c, 1);
}

/* nn.Conv3d(in, out, kernel, stride, padding, dilation, groups, bias):
 * weight [out, in/groups, kd, kh, kw], bias [out]. kernel, stride, padding
 * and dilation are the depth's, and the height's and width's unless their
 * _h / _w field is set (0 = the same as the depth's; padding_h, padding_w =
 * DL_PAD_NONE: none on that axis, PyTorch's padding=(1, 0, 0)). stride and
 * dilation 0 = 1, groups 0 = 1. Init as nn.Conv3d: weight kaiming_uniform(a
 * = sqrt(5)), bias uniform(+-1/sqrt(fan_in)), fan_in = in/groups kd kh kw.
 * The padding is symmetric (PyTorch's). */
typedef struct dl_conv3d_desc {
  int64_t in, out; /* input and output channels */
  int kernel;      /* the kernel's depth (and height and width unless given) */
  int stride;      /* 0: 1 */
  int padding;     /* symmetric */
  int dilation;    /* 0: 1 */
  int groups;      /* 0: 1 */
  int kernel_h, kernel_w, stride_h, stride_w, padding_h, padding_w, dilation_h, dilation_w; /* 0: as the depth's */
  int no_bias;     /* 1: no bias */
} dl_conv3d_desc;
typedef struct dl__lay_conv3d {
  dl_layer base;
  int64_t in, out;
  dl_conv3d_args a; /* resolved: every field set */
  int k[3];
  dl_tensor *w, *b;
} dl__lay_conv3d;
DL_API dl_tensor *dl__lay_conv3d_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__lay_conv3d *C = (dl__lay_conv3d *)l;
  dl__check_input(l, x, 5, 5, 1, C->in);
  return dl_t_conv3d(tp, x, C->w, C->b, &C->a);
}
DL_API void dl__lay_conv3d_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__lay_conv3d *C = (const dl__lay_conv3d *)l;
  const dl_conv3d_args *a = &C->a;
  snprintf(buf, n, "%lld, %lld, kernel=%dx%dx%d, stride=%dx%dx%d, padding=%dx%dx%d%s%s%s", (long long)C->in,
           (long long)C->out, C->k[0], C->k[1], C->k[2], a->stride_d, a->stride_h, a->stride_w, a->pad_d, a->pad_h,
           a->pad_w, a->dil_d > 1 || a->dil_h > 1 || a->dil_w > 1 ? ", dilation>1" : "",
           a->groups > 1 ? ", groups>1" : "", C->b ? "" : ", bias=0");
}
DL__GLOBAL(const dl_layer_vt dl__lay_conv3d_vt, {"Conv3d", dl__lay_conv3d_forward, dl__lay_conv3d_describe, NULL, 0});
/* An axis' value of a 3-d desc: v if set, DL_PAD_NONE as 0, else the depth's. */
DL__INL int dl__lay_axis3(int v, int depth) { return v == DL_PAD_NONE ? 0 : v ? v : depth; }
/* nn.Conv3d (see dl_conv3d_desc above): parameters weight, bias. */
DL_API dl_layer *dl_conv3d_make(dl_model *m, dl_layer *parent, const char *name, const dl_conv3d_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_conv3d *C;
  const int groups = d->groups ? d->groups : 1, stride = d->stride ? d->stride : 1;
  const int dil = d->dilation ? d->dilation : 1;
  double fan;
  int k[3];
  k[0] = d->kernel;
  k[1] = d->kernel_h ? d->kernel_h : d->kernel;
  k[2] = d->kernel_w ? d->kernel_w : d->kernel;
  if (d->in <= 0 || d->out <= 0 || k[0] <= 0 || k[1] <= 0 || k[2] <= 0 || groups <= 0 || d->in % groups ||
      d->out % groups || d->padding < 0 || d->padding_h < DL_PAD_NONE || d->padding_w < DL_PAD_NONE ||
      d->stride < 0 || d->stride_h < 0 || d->stride_w < 0 || d->dilation < 0 || d->dilation_h < 0 ||
      d->dilation_w < 0)
    DL_PANIC(m->ctx, "dl_conv3d_make", "bad sizes: in %lld, out %lld, kernel %dx%dx%d, groups %d, stride %d, "
             "padding %d, dilation %d (in and out divisible by groups)", (long long)d->in, (long long)d->out, k[0],
             k[1], k[2], groups, d->stride, d->padding, d->dilation);
  C = (dl__lay_conv3d *)dl__lay_lib_new(m, parent, name, &dl__lay_conv3d_vt, sizeof *C);
  if (!C) return NULL;
  C->in = d->in;
  C->out = d->out;
  memcpy(C->k, k, sizeof k);
  C->a.stride_d = stride;
  C->a.stride_h = dl__lay_axis3(d->stride_h, stride);
  C->a.stride_w = dl__lay_axis3(d->stride_w, stride);
  C->a.pad_d = d->padding;
  C->a.pad_h = dl__lay_axis3(d->padding_h, d->padding);
  C->a.pad_w = dl__lay_axis3(d->padding_w, d->padding);
  C->a.dil_d = dil;
  C->a.dil_h = dl__lay_axis3(d->dilation_h, dil);
  C->a.dil_w = dl__lay_axis3(d->dilation_w, dil);
  C->a.groups = groups;
  fan = (double)(d->in / groups) * k[0] * k[1] * (double)k[2];
  C->w = dl_layer_param_new(&C->base, "weight", DL_PARAM_WEIGHT, 5,
                            DL__I64S(d->out, d->in / groups, k[0], k[1], k[2]),
                            dl__init(DL_INIT_KAIMING_UNIFORM, sqrt(5.0)), m->dtype);
  if (!d->no_bias)
    C->b = dl_layer_param_new(&C->base, "bias", DL_PARAM_BIAS, 1, DL__I64S(d->out),
                              dl__init(DL_INIT_UNIFORM, 1.0 / sqrt(fan)), m->dtype);
  return m->status == DL_OK ? &C->base : NULL;
}

/* >>pooling and reshaping -------------------------------------------------- */

/* nn.MaxPool2d(kernel, stride = kernel, padding, dilation, ceil_mode) /
 * nn.AvgPool2d(kernel, stride, padding, ceil_mode, count_include_pad =
 * !exclude_pad). _w fields 0 = the square value; padding_w = DL_PAD_NONE:
 * no width padding; dilation 0 = 1 (max only). pad_mode as dl_pool2d_args
 * (ops/conv.h): DL_PAD_EXPLICIT reads padding / padding_w as the top / left
 * and padding_end / padding_w_end as the bottom / right (taken as given, no
 * square default); DL_PAD_SAME and DL_PAD_SAME_LOWER compute them. */
typedef struct dl_pool2d_desc {
  int kernel, stride, padding; /* the window's height (and width); stride 0: the kernel */
  int kernel_w, stride_w, padding_w; /* the width's; 0: the square value */
  int exclude_pad; /* avg only */
  int dilation, dilation_w, ceil_mode, pad_mode, padding_end, padding_w_end; /* see above and dl_pool2d_args */
} dl_pool2d_desc;
typedef struct dl__lay_pool {
  dl_layer base;
  dl_pool2d_args a;
} dl__lay_pool;
DL_API dl_tensor *dl__lay_maxpool_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__check_input(l, x, 4, 4, 0, 0);
  return dl_t_max_pool2d(tp, x, &((dl__lay_pool *)l)->a);
}
DL_API dl_tensor *dl__lay_avgpool_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__check_input(l, x, 4, 4, 0, 0);
  return dl_t_avg_pool2d(tp, x, &((dl__lay_pool *)l)->a);
}
DL_API void dl__lay_pool_describe(const dl_layer *l, char *buf, size_t n) {
  const dl_pool2d_args *a = &((const dl__lay_pool *)l)->a;
  static const char *const modes[] = {"", "explicit", "SAME", "SAME_LOWER"};
  int k = snprintf(buf, n, "kernel=%dx%d, stride=%dx%d", a->kernel_h, a->kernel_w, a->stride_h, a->stride_w);
  if (k < 0 || (size_t)k >= n) return;
  if (a->pad_mode == DL_PAD_SYMMETRIC) k += snprintf(buf + k, n - (size_t)k, ", padding=%dx%d", a->pad_h, a->pad_w);
  else if (a->pad_mode == DL_PAD_EXPLICIT)
    k += snprintf(buf + k, n - (size_t)k, ", padding=%d,%d/%d,%d", a->pad_h, a->pad_h_end, a->pad_w, a->pad_w_end);
  else k += snprintf(buf + k, n - (size_t)k, ", padding=%s", modes[a->pad_mode & 3]);
  if (k < 0 || (size_t)k >= n) return;
  if (a->dil_h > 1 || a->dil_w > 1) k += snprintf(buf + k, n - (size_t)k, ", dilation=%dx%d", a->dil_h, a->dil_w);
  if (k < 0 || (size_t)k >= n) return;
  if (a->ceil_mode) snprintf(buf + k, n - (size_t)k, ", ceil_mode");
}
DL__GLOBAL(const dl_layer_vt dl__lay_maxpool_vt, {"MaxPool2d", dl__lay_maxpool_forward, dl__lay_pool_describe, NULL, 0});
DL__GLOBAL(const dl_layer_vt dl__lay_avgpool_vt, {"AvgPool2d", dl__lay_avgpool_forward, dl__lay_pool_describe, NULL, 0});
DL_API dl_layer *dl__lay_pool_make(dl_model *m, dl_layer *parent, const char *name, const dl_pool2d_desc *d,
                               const dl_layer_vt *vt) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_pool *P;
  if (d->kernel <= 0 || d->kernel_w < 0 || d->stride < 0 || d->padding < 0 || d->dilation < 0 || d->dilation_w < 0 ||
      d->padding_end < 0 || d->padding_w_end < 0)
    DL_PANIC(m->ctx, vt->type, "kernel %d must be > 0, stride %d, padding %d (end %d, %d) and dilation %d >= 0",
             d->kernel, d->stride, d->padding, d->padding_end, d->padding_w_end, d->dilation);
  if (vt == &dl__lay_avgpool_vt && (d->dilation > 1 || d->dilation_w > 1))
    DL_PANIC(m->ctx, vt->type, "dilation %dx%d: average pooling has none (as nn.AvgPool2d)", d->dilation,
             d->dilation_w);
  P = (dl__lay_pool *)dl__lay_lib_new(m, parent, name, vt, sizeof *P);
  if (!P) return NULL;
  P->a.kernel_h = d->kernel;
  P->a.kernel_w = d->kernel_w ? d->kernel_w : d->kernel;
  P->a.stride_h = d->stride ? d->stride : P->a.kernel_h;
  P->a.stride_w = d->stride_w ? d->stride_w : d->stride ? d->stride : P->a.kernel_w;
  P->a.pad_h = d->padding;
  P->a.pad_w = d->padding_w == DL_PAD_NONE ? 0
               : d->padding_w || d->pad_mode == DL_PAD_EXPLICIT ? d->padding_w : d->padding;
  P->a.exclude_pad = d->exclude_pad;
  P->a.dil_h = d->dilation ? d->dilation : 1;
  P->a.dil_w = d->dilation_w ? d->dilation_w : P->a.dil_h;
  P->a.ceil_mode = d->ceil_mode != 0;
  P->a.pad_mode = d->pad_mode;
  P->a.pad_h_end = d->padding_end;
  P->a.pad_w_end = d->padding_w_end;
  P->base.is_pool2 = vt == &dl__lay_maxpool_vt && P->a.kernel_h == 2 && P->a.kernel_w == 2 && P->a.stride_h == 2 &&
                     P->a.stride_w == 2 && P->a.pad_mode == DL_PAD_SYMMETRIC && P->a.pad_h == 0 && P->a.pad_w == 0 &&
                     P->a.pad_h_end == 0 && P->a.pad_w_end == 0 &&
                     P->a.dil_h == 1 && P->a.dil_w == 1 && !P->a.ceil_mode;
  return &P->base;
}
/* Append a MaxPool2d layer (torch.nn.MaxPool2d). NULL on failure. */
DL_API dl_layer *dl_maxpool2d_make(dl_model *m, dl_layer *parent, const char *name, const dl_pool2d_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_pool_make(m, parent, name, d, &dl__lay_maxpool_vt);
}
/* Append an AvgPool2d layer (torch.nn.AvgPool2d). NULL on failure. */
DL_API dl_layer *dl_avgpool2d_make(dl_model *m, dl_layer *parent, const char *name, const dl_pool2d_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_pool_make(m, parent, name, d, &dl__lay_avgpool_vt);
}

/* nn.MaxPool3d(kernel, stride = kernel, padding, dilation, ceil_mode) /
 * nn.AvgPool3d(kernel, stride, padding, ceil_mode, count_include_pad =
 * !exclude_pad). kernel, stride, padding, dilation are the depth's, and the
 * height's and width's unless their _h / _w field is set (0 = the same as
 * the depth's; padding_h, padding_w = DL_PAD_NONE: none on that axis);
 * stride 0 = the kernel; dilation 0 = 1 (max only). Padding symmetric, at
 * most half the kernel (as PyTorch). */
typedef struct dl_pool3d_desc {
  int kernel;      /* the window's depth (and height and width unless given) */
  int stride;      /* 0: the kernel */
  int padding;     /* symmetric */
  int kernel_h, kernel_w, stride_h, stride_w, padding_h, padding_w; /* 0: as the depth's */
  int exclude_pad; /* avg only: 1 divides by the elements inside the input */
  int dilation;    /* max only: 0 = 1 */
  int dilation_h, dilation_w; /* max only: 0: as the depth's */
  int ceil_mode;   /* 1: output sizes rounded up */
} dl_pool3d_desc;
typedef struct dl__lay_pool3d {
  dl_layer base;
  dl_pool3d_args a;
} dl__lay_pool3d;
DL_API dl_tensor *dl__lay_maxpool3d_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__check_input(l, x, 5, 5, 0, 0);
  return dl_t_max_pool3d(tp, x, &((dl__lay_pool3d *)l)->a);
}
DL_API dl_tensor *dl__lay_avgpool3d_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__check_input(l, x, 5, 5, 0, 0);
  return dl_t_avg_pool3d(tp, x, &((dl__lay_pool3d *)l)->a);
}
DL_API void dl__lay_pool3d_describe(const dl_layer *l, char *buf, size_t n) {
  const dl_pool3d_args *a = &((const dl__lay_pool3d *)l)->a;
  snprintf(buf, n, "kernel=%dx%dx%d, stride=%dx%dx%d, padding=%dx%dx%d%s%s%s", a->kernel_d, a->kernel_h, a->kernel_w,
           a->stride_d, a->stride_h, a->stride_w, a->pad_d, a->pad_h, a->pad_w,
           a->dil_d > 1 || a->dil_h > 1 || a->dil_w > 1 ? ", dilation>1" : "", a->ceil_mode ? ", ceil_mode" : "",
           a->exclude_pad ? ", exclude_pad" : "");
}
DL__GLOBAL(const dl_layer_vt dl__lay_maxpool3d_vt, {"MaxPool3d", dl__lay_maxpool3d_forward, dl__lay_pool3d_describe, NULL, 0});
DL__GLOBAL(const dl_layer_vt dl__lay_avgpool3d_vt, {"AvgPool3d", dl__lay_avgpool3d_forward, dl__lay_pool3d_describe, NULL, 0});
DL_API dl_layer *dl__lay_pool3d_make(dl_model *m, dl_layer *parent, const char *name, const dl_pool3d_desc *d,
                                     const dl_layer_vt *vt) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_pool3d *P;
  if (d->kernel <= 0 || d->kernel_h < 0 || d->kernel_w < 0 || d->stride < 0 || d->stride_h < 0 || d->stride_w < 0 ||
      d->padding < 0 || d->padding_h < DL_PAD_NONE || d->padding_w < DL_PAD_NONE || d->dilation < 0 ||
      d->dilation_h < 0 || d->dilation_w < 0)
    DL_PANIC(m->ctx, vt->type, "kernel %d must be > 0, stride %d, padding %d and dilation %d >= 0", d->kernel,
             d->stride, d->padding, d->dilation);
  if (vt == &dl__lay_avgpool3d_vt && (d->dilation > 1 || d->dilation_h > 1 || d->dilation_w > 1))
    DL_PANIC(m->ctx, vt->type, "dilation %dx%dx%d: average pooling has none (as nn.AvgPool3d)", d->dilation,
             d->dilation_h, d->dilation_w);
  P = (dl__lay_pool3d *)dl__lay_lib_new(m, parent, name, vt, sizeof *P);
  if (!P) return NULL;
  P->a.kernel_d = d->kernel;
  P->a.kernel_h = d->kernel_h ? d->kernel_h : d->kernel;
  P->a.kernel_w = d->kernel_w ? d->kernel_w : d->kernel;
  P->a.stride_d = d->stride ? d->stride : P->a.kernel_d;
  P->a.stride_h = d->stride_h ? d->stride_h : d->stride ? d->stride : P->a.kernel_h;
  P->a.stride_w = d->stride_w ? d->stride_w : d->stride ? d->stride : P->a.kernel_w;
  P->a.pad_d = d->padding;
  P->a.pad_h = dl__lay_axis3(d->padding_h, d->padding);
  P->a.pad_w = dl__lay_axis3(d->padding_w, d->padding);
  P->a.exclude_pad = d->exclude_pad;
  P->a.dil_d = d->dilation ? d->dilation : 1;
  P->a.dil_h = dl__lay_axis3(d->dilation_h, P->a.dil_d);
  P->a.dil_w = dl__lay_axis3(d->dilation_w, P->a.dil_d);
  P->a.ceil_mode = d->ceil_mode != 0;
  return &P->base;
}
/* nn.MaxPool3d (see dl_pool3d_desc above); no parameters. */
DL_API dl_layer *dl_maxpool3d_make(dl_model *m, dl_layer *parent, const char *name, const dl_pool3d_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_pool3d_make(m, parent, name, d, &dl__lay_maxpool3d_vt);
}
/* nn.AvgPool3d (see dl_pool3d_desc above); no parameters. */
DL_API dl_layer *dl_avgpool3d_make(dl_model *m, dl_layer *parent, const char *name, const dl_pool3d_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_pool3d_make(m, parent, name, d, &dl__lay_avgpool3d_vt);
}

/* Global average pooling: [N, C, ...] -> [N, C] (the mean over every dim
 * after the second; nn.AdaptiveAvgPool2d(1) followed by flatten). */
DL_API dl_tensor *dl__lay_gap_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  int axes[DL_MAX_DIMS], d;
  dl__check_input(l, x, 3, DL_MAX_DIMS, 0, 0);
  for (d = 2; d < x->ndim; d++) axes[d - 2] = d;
  return dl_t_mean(tp, x, x->ndim - 2, axes, 0);
}
DL__GLOBAL(const dl_layer_vt dl__lay_gap_vt, {"GlobalAvgPool", dl__lay_gap_forward, NULL, NULL, 0});
/* Append a global average pooling layer: [N, C, ...] -> [N, C], the mean
 * over every dimension after the second. NULL on failure. */
DL_API dl_layer *dl_global_avgpool_make(dl_model *m, dl_layer *parent, const char *name) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_lib_new(m, parent, name, &dl__lay_gap_vt, sizeof(dl_layer));
}

/* nn.Flatten(start_dim): [N, C, H, W] -> [N, C*H*W] for start_dim 1 (0 = 1:
 * the default; pass -1 ... as in PyTorch for others). */
typedef struct dl__lay_flatten {
  dl_layer base;
  int start;
} dl__lay_flatten;
DL_API dl_tensor *dl__lay_flatten_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  int s = ((dl__lay_flatten *)l)->start;
  return dl_t_flatten(tp, x, s < 0 ? x->ndim + s : s);
}
DL__GLOBAL(const dl_layer_vt dl__lay_flatten_vt, {"Flatten", dl__lay_flatten_forward, NULL, NULL, 0});
/* Append a Flatten layer (torch.nn.Flatten(start_dim), a negative start_dim
 * counted from the end). NULL on failure. */
DL_API dl_layer *dl_flatten_make(dl_model *m, dl_layer *parent, const char *name, int start_dim) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_flatten *F = (dl__lay_flatten *)dl__lay_lib_new(m, parent, name, &dl__lay_flatten_vt, sizeof *F);
  if (F) F->start = start_dim ? start_dim : 1;
  return F ? &F->base : NULL;
}

/* >>dropout and embedding -------------------------------------------------- */

/* nn.Dropout(p): in train mode zeroes each element with probability p and
 * scales the rest by 1/(1-p); identity in eval mode. Its random stream is
 * its own, seeded from the model's seed and the layer's position, so two
 * dropout layers never share draws and a run replays from the seed. */
typedef struct dl__lay_dropout {
  dl_layer base;
  double p;
  dl_rng rng;
} dl__lay_dropout;
DL_API dl_tensor *dl__lay_dropout_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__lay_dropout *D = (dl__lay_dropout *)l;
  return dl_t_dropout(tp, x, D->p, &D->rng, l->model->training);
}
DL_API void dl__lay_dropout_describe(const dl_layer *l, char *buf, size_t n) {
  snprintf(buf, n, "p=%g", ((const dl__lay_dropout *)l)->p);
}
DL__GLOBAL(const dl_layer_vt dl__lay_dropout_vt, {"Dropout", dl__lay_dropout_forward, dl__lay_dropout_describe, NULL, 0});
/* Append a Dropout layer of probability p (its own random stream, saved in
 * checkpoints; identity in eval mode). NULL on failure. */
DL_API dl_layer *dl_dropout_make(dl_model *m, dl_layer *parent, const char *name, double p) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_dropout *D;
  if (!(p >= 0 && p <= 1)) DL_PANIC(m->ctx, "dl_dropout_make", "p = %g is not in [0, 1]", p);
  D = (dl__lay_dropout *)dl__lay_lib_new(m, parent, name, &dl__lay_dropout_vt, sizeof *D);
  if (!D) return NULL;
  D->p = p;
  D->rng = dl_rng_make(m->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(m->nlayers + 1)));
  return &D->base;
}
/* The dropout layer's rng (for checkpoints), or NULL if l is not one. */
DL_API dl_rng *dl_dropout_rng(dl_layer *l) {
  return l && l->vt == &dl__lay_dropout_vt ? &((dl__lay_dropout *)l)->rng : NULL;
}

/* nn.Embedding(num, dim, sparse): weight [num, dim] ~ N(0, 1); input i64/i32
 * indices of any shape -> [..., dim]. sparse = 1: the gradient is row-sparse
 * (only the looked-up rows) and the optimizers update only those rows (lazy:
 * see optim.h); sparse = 0: a dense gradient and ordinary updates, as in
 * PyTorch. */
typedef struct dl_embedding_desc {
  int64_t num, dim; /* rows (vocabulary) and their width */
  int sparse; /* 1: row-sparse gradients and lazy updates */
} dl_embedding_desc;
typedef struct dl__embedding {
  dl_layer base;
  dl_embedding_desc d;
  dl_tensor *w;
} dl__embedding;
DL_API dl_tensor *dl__lay_embedding_forward(dl_layer *l, dl_tape *tp, dl_tensor *idx) {
  dl__embedding *E = (dl__embedding *)l;
  if (idx->dtype != DL_I64 && idx->dtype != DL_I32)
    DL_PANIC(idx->ctx, "Embedding", "'%s' takes i64 or i32 indices, not %s", l->name, DL_SHAPESTR(idx));
  if (!E->d.sparse && dl_requires_grad_p(E->w) && dl_grad_enabled(tp)) /* a dense gradient: look up in a view node */
    return dl_t_embedding(tp, dl_t_reshape(tp, E->w, 2, E->w->shape), idx);
  return dl_t_embedding(tp, E->w, idx);
}
DL_API void dl__lay_embedding_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__embedding *E = (const dl__embedding *)l;
  snprintf(buf, n, "%lld, %lld%s", (long long)E->d.num, (long long)E->d.dim, E->d.sparse ? ", sparse" : "");
}
DL__GLOBAL(const dl_layer_vt dl__lay_embedding_vt, {"Embedding", dl__lay_embedding_forward, dl__lay_embedding_describe, NULL, 0});
/* Append an Embedding layer (torch.nn.Embedding: weight [num, dim]; .sparse
 * = 1 for row-sparse gradients). NULL on failure. */
DL_API dl_layer *dl_embedding_make(dl_model *m, dl_layer *parent, const char *name, const dl_embedding_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__embedding *E;
  if (d->num <= 0 || d->dim <= 0)
    DL_PANIC(m->ctx, "dl_embedding_make", "num %lld and dim %lld must be > 0", (long long)d->num, (long long)d->dim);
  E = (dl__embedding *)dl__lay_lib_new(m, parent, name, &dl__lay_embedding_vt, sizeof *E);
  if (!E) return NULL;
  E->d = *d;
  E->w = dl_layer_param_new(&E->base, "weight", DL_PARAM_WEIGHT, 2, DL__I64S(d->num, d->dim),
                            dl__init(DL_INIT_NORMAL, 1.0), m->dtype);
  if (E->w && d->sparse) m->params[m->nparams - 1]->sparse = 1;
  return m->status == DL_OK ? &E->base : NULL;
}

/* >>normalisation ---------------------------------------------------------- */

/* nn.BatchNorm1d ([N, C] or [N, C, L]) and nn.BatchNorm2d ([N, C, H, W]):
 * weight [C] = 1, bias [C] = 0 (unless no_affine); buffers running_mean [C]
 * = 0, running_var [C] = 1, num_batches_tracked (i64, 0-d) (unless
 * no_running_stats). Train mode normalises with the batch statistics and
 * updates the running ones (momentum); eval mode uses the running ones.
 * eps 0 = 1e-5, momentum 0 = 0.1 (a cumulative average, momentum=None in
 * PyTorch, is not offered). */
typedef struct dl_batchnorm_desc {
  int64_t features; /* C, the channels */
  double eps, momentum; /* 0: 1e-5 and 0.1 */
  int no_affine, no_running_stats; /* 1: no weight and bias; 1: no running statistics (batch statistics in eval mode too) */
} dl_batchnorm_desc;
typedef struct dl__lay_batchnorm {
  dl_layer base;
  dl_batchnorm_desc d;
  int nd_min, nd_max;
  dl_tensor *w, *b, *rm, *rv, *nbt;
} dl__lay_batchnorm;
/* The layer's forward; relu 1: a ReLU after it in the same op, 2: and a
 * 2x2 max pool (NULL when dl__bn_relu_fits or dl__bn_relu_pool_fits says
 * no, before anything is counted). */
DL_API dl_tensor *dl__lay_batchnorm_run(dl_layer *l, dl_tape *tp, dl_tensor *x, int relu) {
  dl__lay_batchnorm *B = (dl__lay_batchnorm *)l;
  int train = l->model->training || !B->rm;
  dl__check_input(l, x, B->nd_min, B->nd_max, 1, B->d.features);
  if (relu == 1 && !dl__bn_relu_fits(tp, x, B->w, B->b)) return NULL;
  if (relu == 2 && !dl__bn_relu_pool_fits(tp, x, B->w, B->b)) return NULL;
#ifdef DL_USE_CUDA
  if (l->model->training && B->nbt && B->nbt->device == DL_CUDA) /* a model on the GPU (gpu.h) */
    dl__gpu_ok(B->nbt, "BatchNorm", dlg_add_i64(dl__gpu_h(B->nbt, "BatchNorm"), (int64_t *)B->nbt->data, 1));
  else
#endif
  if (l->model->training && B->nbt) ((int64_t *)B->nbt->data)[0]++;
  if (relu == 2) return dl__t_batch_norm_relu_pool(tp, x, B->w, B->b, B->rm, B->rv, train, B->d.momentum, B->d.eps);
  if (relu) return dl__t_batch_norm_relu(tp, x, B->w, B->b, B->rm, B->rv, train, B->d.momentum, B->d.eps);
  return dl_t_batch_norm(tp, x, B->w, B->b, B->rm, B->rv, train, B->d.momentum, B->d.eps);
}
DL_API dl_tensor *dl__lay_batchnorm_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  return dl__lay_batchnorm_run(l, tp, x, 0);
}
DL_API dl_tensor *dl__lay_batchnorm_relu(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  return dl__lay_batchnorm_run(l, tp, x, 1);
}
DL_API dl_tensor *dl__lay_batchnorm_relu_pool(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  return dl__lay_batchnorm_run(l, tp, x, 2);
}
DL_API void dl__lay_batchnorm_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__lay_batchnorm *B = (const dl__lay_batchnorm *)l;
  snprintf(buf, n, "%lld, eps=%g, momentum=%g%s%s", (long long)B->d.features, B->d.eps, B->d.momentum,
           B->d.no_affine ? ", affine=0" : "", B->d.no_running_stats ? ", running=0" : "");
}
DL__GLOBAL(const dl_layer_vt dl__lay_bn1d_vt, {"BatchNorm1d", dl__lay_batchnorm_forward, dl__lay_batchnorm_describe, NULL, 0});
DL__GLOBAL(const dl_layer_vt dl__lay_bn2d_vt, {"BatchNorm2d", dl__lay_batchnorm_forward, dl__lay_batchnorm_describe, NULL, 0});
DL_API dl_layer *dl__lay_batchnorm_make(dl_model *m, dl_layer *parent, const char *name, const dl_batchnorm_desc *d,
                                    int two_d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_batchnorm *B;
  const int64_t c = d->features;
  if (c <= 0 || d->eps < 0 || d->momentum < 0 || d->momentum > 1)
    DL_PANIC(m->ctx, two_d ? "dl_batchnorm2d_make" : "dl_batchnorm1d_make",
             "features %lld must be > 0, eps %g >= 0, momentum %g in [0, 1]", (long long)c, d->eps, d->momentum);
  B = (dl__lay_batchnorm *)dl__lay_lib_new(m, parent, name, two_d ? &dl__lay_bn2d_vt : &dl__lay_bn1d_vt, sizeof *B);
  if (!B) return NULL;
  B->d = *d;
  B->base.fwd_relu = dl__lay_batchnorm_relu;
  if (two_d) B->base.fwd_relu_pool = dl__lay_batchnorm_relu_pool;
  if (B->d.eps == 0) B->d.eps = 1e-5;
  if (B->d.momentum == 0) B->d.momentum = 0.1;
  B->nd_min = two_d ? 4 : 2;
  B->nd_max = two_d ? 4 : 3;
  if (!d->no_affine) {
    B->w = dl_layer_param_new(&B->base, "weight", DL_PARAM_NORM, 1, &c, dl__init(DL_INIT_ONES, 0), m->dtype);
    B->b = dl_layer_param_new(&B->base, "bias", DL_PARAM_NORM, 1, &c, dl__init(DL_INIT_ZEROS, 0), m->dtype);
  }
  if (!d->no_running_stats) {
    B->rm = dl_layer_param_new(&B->base, "running_mean", DL_PARAM_BUFFER, 1, &c, dl__init(DL_INIT_ZEROS, 0), m->dtype);
    B->rv = dl_layer_param_new(&B->base, "running_var", DL_PARAM_BUFFER, 1, &c, dl__init(DL_INIT_ONES, 0), m->dtype);
    B->nbt = dl_layer_param_new(&B->base, "num_batches_tracked", DL_PARAM_BUFFER, 0, &c, dl__init(DL_INIT_DEFAULT, 0),
                                DL_I64);
  }
  return m->status == DL_OK ? &B->base : NULL;
}
/* Append a BatchNorm1d layer (torch.nn.BatchNorm1d over [N, C] or [N, C,
 * L]). NULL on failure. */
DL_API dl_layer *dl_batchnorm1d_make(dl_model *m, dl_layer *parent, const char *name, const dl_batchnorm_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_batchnorm_make(m, parent, name, d, 0);
}
/* Append a BatchNorm2d layer (torch.nn.BatchNorm2d over [N, C, H, W]). NULL
 * on failure. */
DL_API dl_layer *dl_batchnorm2d_make(dl_model *m, dl_layer *parent, const char *name, const dl_batchnorm_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_batchnorm_make(m, parent, name, d, 1);
}

/* nn.LayerNorm(shape, eps, elementwise_affine) and RMSNorm (torch 2.4's
 * nn.RMSNorm): normalise over the last `ndims` dims, whose sizes are
 * shape[0 .. ndims-1] (ndims 0 = 1). weight (= 1) and, for LayerNorm, bias
 * (= 0) have that shape, unless no_affine. eps 0 = 1e-5 for LayerNorm, and
 * for RMSNorm the dtype's machine epsilon (PyTorch's eps=None). */
typedef struct dl_norm_desc {
  int ndims; /* how many last dimensions are normalised (0: 1) */
  int64_t shape[4]; /* their sizes */
  double eps; /* 0: 1e-5 (LayerNorm), the dtype's epsilon (RMSNorm) */
  int no_affine; /* 1: no weight (and bias) */
} dl_norm_desc;
typedef struct dl__lay_norm {
  dl_layer base;
  dl_norm_desc d;
  int rms;
  dl_tensor *w, *b;
} dl__lay_norm;
DL_API dl_tensor *dl__lay_norm_forward(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl__lay_norm *N = (dl__lay_norm *)l;
  int k;
  dl__check_input(l, x, N->d.ndims, DL_MAX_DIMS, 0, 0);
  for (k = 0; k < N->d.ndims; k++)
    if (x->shape[x->ndim - N->d.ndims + k] != N->d.shape[k])
      DL_PANIC(x->ctx, l->vt->type, "'%s' normalises trailing dims of size %lld%s, got %s", l->name,
               (long long)N->d.shape[0], N->d.ndims > 1 ? ", ..." : "", DL_SHAPESTR(x));
  if (N->rms) return dl_t_rms_norm(tp, x, N->d.ndims, N->w, N->d.eps);
  return dl_t_layer_norm(tp, x, N->d.ndims, N->w, N->b, N->d.eps);
}
DL_API void dl__lay_norm_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__lay_norm *N = (const dl__lay_norm *)l;
  snprintf(buf, n, "%lld%s, eps=%g%s", (long long)N->d.shape[0], N->d.ndims > 1 ? " ..." : "", N->d.eps,
           N->d.no_affine ? ", affine=0" : "");
}
DL__GLOBAL(const dl_layer_vt dl__lay_layernorm_vt, {"LayerNorm", dl__lay_norm_forward, dl__lay_norm_describe, NULL, 0});
DL__GLOBAL(const dl_layer_vt dl__lay_rmsnorm_vt, {"RMSNorm", dl__lay_norm_forward, dl__lay_norm_describe, NULL, 0});
DL_API dl_layer *dl__lay_norm_make(dl_model *m, dl_layer *parent, const char *name, const dl_norm_desc *d, int rms) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_norm *N;
  int k, nd = d->ndims ? d->ndims : 1;
  if (nd < 0 || nd > 4 || d->eps < 0)
    DL_PANIC(m->ctx, rms ? "dl_rmsnorm_make" : "dl_layernorm_make", "ndims %d must be 1..4 and eps %g >= 0", nd, d->eps);
  for (k = 0; k < nd; k++)
    if (d->shape[k] <= 0)
      DL_PANIC(m->ctx, rms ? "dl_rmsnorm_make" : "dl_layernorm_make", "normalised size %lld must be > 0",
               (long long)d->shape[k]);
  N = (dl__lay_norm *)dl__lay_lib_new(m, parent, name, rms ? &dl__lay_rmsnorm_vt : &dl__lay_layernorm_vt, sizeof *N);
  if (!N) return NULL;
  N->d = *d;
  N->d.ndims = nd;
  N->rms = rms;
  if (N->d.eps == 0) N->d.eps = rms ? (m->dtype == DL_F32 ? (double)FLT_EPSILON : DBL_EPSILON) : 1e-5;
  if (!d->no_affine) {
    N->w = dl_layer_param_new(&N->base, "weight", DL_PARAM_NORM, nd, d->shape, dl__init(DL_INIT_ONES, 0), m->dtype);
    if (!rms)
      N->b = dl_layer_param_new(&N->base, "bias", DL_PARAM_NORM, nd, d->shape, dl__init(DL_INIT_ZEROS, 0), m->dtype);
  }
  return m->status == DL_OK ? &N->base : NULL;
}
/* Append a LayerNorm layer (torch.nn.LayerNorm over the last dimensions,
 * d->shape). NULL on failure. */
DL_API dl_layer *dl_layernorm_make(dl_model *m, dl_layer *parent, const char *name, const dl_norm_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_norm_make(m, parent, name, d, 0);
}
/* Append an RMSNorm layer (torch.nn.RMSNorm over the last dimensions,
 * d->shape). NULL on failure. */
DL_API dl_layer *dl_rmsnorm_make(dl_model *m, dl_layer *parent, const char *name, const dl_norm_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_norm_make(m, parent, name, d, 1);
}

/* >>recurrent -------------------------------------------------------------- */

/* nn.RNN / nn.LSTM / nn.GRU(input, hidden, num_layers, bias, batch_first=True):
 * x [B, T, input] -> output [B, T, hidden] (the last layer's h_t). Layer k
 * has weight_ih_lk [G*hidden, in_k], weight_hh_lk [G*hidden, hidden],
 * bias_ih_lk, bias_hh_lk [G*hidden] (G = 1, 4 (gates i, f, g, o), 3 (r, z,
 * n)); in_0 = input, else hidden. Every one ~ U(+-1/sqrt(hidden)).
 * num_layers 0 = 1; relu (RNN only): ReLU instead of tanh. No dropout
 * between layers. bidirectional (nn.X(bidirectional=True)): each layer also
 * runs over the reversed sequence with its own weight_ih_lk_reverse,
 * weight_hh_lk_reverse, bias_ih_lk_reverse, bias_hh_lk_reverse; the output
 * is [B, T, 2 hidden] (the forward direction's h_t, then the reverse
 * direction's h_t for the same t), in_k = 2 hidden for k > 0, and h0 / c0 /
 * h_n / c_n are [2 num_layers, B, hidden] in PyTorch's order (layer 0
 * forward, layer 0 reverse, layer 1 forward, ...). The reverse direction
 * is the one-direction op on the sequence reversed along time (an
 * index_select each way). gru_reset_before_linear (GRU only): the reset
 * gate applied to h before w_hn, n = tanh(x w_in^T + b_in + (r h) w_hn^T +
 * b_hn), as ONNX's GRU with linear_before_reset = 0 and Keras's
 * reset_after=False (0: PyTorch's form; the same parameters either way). */
typedef struct dl_rnn_desc {
  int64_t input, hidden; /* input features and hidden size */
  int num_layers; /* stacked layers (0: 1) */
  int no_bias; /* 1: no biases */
  int relu; /* RNN only: ReLU instead of tanh */
  int bidirectional; /* 1: both directions (see above) */
  int gru_reset_before_linear; /* GRU only: 1 the reset gate before w_hn (see above) */
} dl_rnn_desc;
typedef enum dl__lay_rnn_kind { DL__LAY_RNN, DL__LAY_LSTM, DL__LAY_GRU } dl__lay_rnn_kind;
/* Most stacked layers an RNN, LSTM or GRU layer may have. */
#define DL_RNN_MAX_LAYERS 16
DL__GLOBAL_DECL(const dl_layer_vt dl__lay_rnn_vt, dl__lay_lstm_vt, dl__lay_gru_vt, dl__lay_mha_vt) /* defined below */
typedef struct dl__lay_rnn {
  dl_layer base;
  dl_rnn_desc d;
  dl__lay_rnn_kind kind;
  /* [2 k + d]: layer k, direction d (1: reverse) */
  dl_tensor *w_ih[2 * DL_RNN_MAX_LAYERS], *w_hh[2 * DL_RNN_MAX_LAYERS], *b_ih[2 * DL_RNN_MAX_LAYERS],
      *b_hh[2 * DL_RNN_MAX_LAYERS];
} dl__lay_rnn;

/* x [B, T, F] reversed along time (an index_select, so its gradient flows);
 * with lengths, each row's first lengths[b] steps are reversed and the
 * padding after them stays where it is (x seen as [B T, F]). */
DL_API dl_tensor *dl__rnn_reverse(dl_tape *tp, dl_tensor *x, const int64_t *lengths) {
  const int64_t B = x->shape[0], T = x->shape[1], F = x->shape[2], n = lengths ? B * T : T;
  int64_t *ix = (int64_t *)dl_tape_scratch(tp, "dl_rnn_forward", sizeof(int64_t) * (size_t)(n ? n : 1)), b, t;
  dl_tensor idx;
  if (!lengths) {
    for (t = 0; t < T; t++) ix[t] = T - 1 - t;
    dl_tensor_wrap(&idx, tp->ctx, DL_I64, 1, &T, ix);
    return dl_t_index_select(tp, x, 1, &idx);
  }
  for (b = 0; b < B; b++)
    for (t = 0; t < T; t++) ix[b * T + t] = b * T + (t < lengths[b] ? lengths[b] - 1 - t : t);
  dl_tensor_wrap(&idx, tp->ctx, DL_I64, 1, &n, ix);
  return dl_t_reshape(tp, dl_t_index_select(tp, dl_t_reshape(tp, x, 2, DL__I64S(B * T, F)), 0, &idx), 3,
                      x->shape);
}

/* dl_rnn_forward on a batch of sequences of different lengths, padded to
 * x [B, T, input]: row b holds lengths[b] steps (1..T; a host array, NULL:
 * all T), as PyTorch's layer on pack_padded_sequence(x, lengths,
 * batch_first=True, enforce_sorted=False), its output padded back to T.
 * The output is 0 past each row's end (and gets no gradient there), the
 * padding of x gets none, h_n / c_n hold each row's state after its last
 * step; the reverse direction of a bidirectional layer reads each row's
 * lengths[b] steps backwards, from its own last step. */
DL_API dl_tensor *dl_rnn_forward_lengths(dl_layer *l, dl_tape *tp, dl_tensor *x, const int64_t *lengths,
                                         dl_tensor *h0, dl_tensor *c0, dl_tensor **h_n, dl_tensor **c_n) {
  dl__lay_rnn *R = (dl__lay_rnn *)l;
  const int D = R->d.bidirectional ? 2 : 1, L = R->d.num_layers * D;
  dl_tensor *hs[2 * DL_RNN_MAX_LAYERS], *cs[2 * DL_RNN_MAX_LAYERS], *y = x, *fwd = NULL;
  dl_rnn_args a;
  int k;
  if (l->vt != &dl__lay_rnn_vt && l->vt != &dl__lay_lstm_vt && l->vt != &dl__lay_gru_vt)
    DL_PANIC(tp->ctx, "dl_rnn_forward", "'%s' is a %s, not an RNN, LSTM or GRU", l->name, l->vt->type);
  memset(&a, 0, sizeof a);
  a.lengths = lengths;
  a.gru_reset_before_linear = R->d.gru_reset_before_linear;
  dl__check_input(l, x, 3, 3, 2, R->d.input);
  dl__rnn_check_lengths(tp, l->vt->type, x, lengths);
  if ((h0 && (h0->ndim != 3 || h0->shape[0] != L || h0->shape[1] != x->shape[0] || h0->shape[2] != R->d.hidden)) ||
      (c0 && (R->kind != DL__LAY_LSTM || c0->ndim != 3 || c0->shape[0] != L || c0->shape[1] != x->shape[0] ||
              c0->shape[2] != R->d.hidden)))
    DL_PANIC(tp->ctx, l->vt->type, "'%s': h0 %s / c0 %s must be [%d, %lld, %lld] for x %s", l->name,
             h0 ? DL_SHAPESTR(h0) : "none", c0 ? DL_SHAPESTR(c0) : "none", L, (long long)x->shape[0],
             (long long)R->d.hidden, DL_SHAPESTR(x));
  for (k = 0; k < L; k++) { /* k: layer k / D, direction k % D (PyTorch's order of h0 and h_n) */
    dl_tensor *h0k = NULL, *c0k = NULL, *in = y, *out;
    const int64_t bh[2] = {x->shape[0], R->d.hidden};
    const int j = D == 2 ? k : 2 * k; /* the weights' slot */
    if (h0) h0k = dl_t_reshape(tp, dl_t_slice(tp, h0, 0, k, k + 1, 1), 2, bh);
    if (c0) c0k = dl_t_reshape(tp, dl_t_slice(tp, c0, 0, k, k + 1, 1), 2, bh);
    cs[k] = NULL;
    if (D == 2 && k % 2) in = dl__rnn_reverse(tp, in, lengths); /* the reverse direction reads backwards */
    if (R->kind == DL__LAY_LSTM)
      out = dl_t_lstm_ex(tp, in, h0k, c0k, R->w_ih[j], R->w_hh[j], R->b_ih[j], R->b_hh[j], &a, &hs[k], &cs[k]);
    else if (R->kind == DL__LAY_GRU)
      out = dl_t_gru_ex(tp, in, h0k, R->w_ih[j], R->w_hh[j], R->b_ih[j], R->b_hh[j], &a, &hs[k]);
    else
      out = dl_t_rnn_ex(tp, in, h0k, R->w_ih[j], R->w_hh[j], R->b_ih[j], R->b_hh[j], !R->d.relu, &a, &hs[k]);
    if (D == 1) {
      y = out;
    } else if (k % 2 == 0) {
      fwd = out; /* the forward direction's output, until the reverse one joins it */
    } else {
      dl_tensor *both[2];
      both[0] = fwd;
      both[1] = dl__rnn_reverse(tp, out, lengths);
      y = dl_t_concat(tp, 2, both, 2);
    }
  }
  if (h_n) *h_n = dl_t_stack(tp, L, hs, 0);
  if (c_n) *c_n = R->kind == DL__LAY_LSTM ? dl_t_stack(tp, L, cs, 0) : NULL;
  return y;
}
/* The full recurrent forward: h0 / c0 [num_layers, B, hidden] or NULL
 * (zeros; c0 only for LSTM, must be NULL otherwise); h_n / c_n (may be
 * NULL) receive the last states [num_layers, B, hidden] on the tape
 * ([2 num_layers, B, hidden] when bidirectional). Returns the output
 * [B, T, hidden] ([B, T, 2 hidden]). Panics if l is not an RNN/LSTM/GRU. */
DL_API dl_tensor *dl_rnn_forward(dl_layer *l, dl_tape *tp, dl_tensor *x, dl_tensor *h0, dl_tensor *c0,
                                 dl_tensor **h_n, dl_tensor **c_n) {
  return dl_rnn_forward_lengths(l, tp, x, NULL, h0, c0, h_n, c_n);
}
DL_API dl_tensor *dl__lay_rnn_forward1(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  return dl_rnn_forward(l, tp, x, NULL, NULL, NULL, NULL);
}
DL_API void dl__lay_rnn_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__lay_rnn *R = (const dl__lay_rnn *)l;
  snprintf(buf, n, "%lld, %lld, layers=%d%s%s%s%s", (long long)R->d.input, (long long)R->d.hidden, R->d.num_layers,
           R->d.no_bias ? ", bias=0" : "", R->d.relu ? ", relu" : "", R->d.bidirectional ? ", bidirectional" : "",
           R->d.gru_reset_before_linear ? ", reset before linear" : "");
}
DL__GLOBAL_LATE(const dl_layer_vt dl__lay_rnn_vt, {"RNN", dl__lay_rnn_forward1, dl__lay_rnn_describe, NULL, 0});
DL__GLOBAL_LATE(const dl_layer_vt dl__lay_lstm_vt, {"LSTM", dl__lay_rnn_forward1, dl__lay_rnn_describe, NULL, 0});
DL__GLOBAL_LATE(const dl_layer_vt dl__lay_gru_vt, {"GRU", dl__lay_rnn_forward1, dl__lay_rnn_describe, NULL, 0});
DL_API dl_layer *dl__lay_rnn_make(dl_model *m, dl_layer *parent, const char *name, const dl_rnn_desc *d, dl__lay_rnn_kind kind) {
  if (!m) return NULL; /* a dl_model_make that failed */
  static const dl_layer_vt *const vts[] = {&dl__lay_rnn_vt, &dl__lay_lstm_vt, &dl__lay_gru_vt};
  const int G = kind == DL__LAY_LSTM ? 4 : kind == DL__LAY_GRU ? 3 : 1;
  dl__lay_rnn *R;
  int k, L = d->num_layers ? d->num_layers : 1;
  double bound;
  if (d->input <= 0 || d->hidden <= 0 || L < 1 || L > DL_RNN_MAX_LAYERS || (d->relu && kind != DL__LAY_RNN) ||
      (d->gru_reset_before_linear && (kind != DL__LAY_GRU || d->gru_reset_before_linear != 1)))
    DL_PANIC(m->ctx, vts[kind]->type, "input %lld and hidden %lld must be > 0, num_layers %d in 1..%d%s%s",
             (long long)d->input, (long long)d->hidden, L, DL_RNN_MAX_LAYERS, d->relu && kind != DL__LAY_RNN ? ", relu is for RNN only" : "",
             d->gru_reset_before_linear ? ", gru_reset_before_linear 0 or 1, GRU only" : "");
  R = (dl__lay_rnn *)dl__lay_lib_new(m, parent, name, vts[kind], sizeof *R);
  if (!R) return NULL;
  R->d = *d;
  R->d.num_layers = L;
  R->kind = kind;
  bound = 1.0 / sqrt((double)d->hidden);
  for (k = 0; k < L * (d->bidirectional ? 2 : 1); k++) { /* PyTorch's order: l0, l0_reverse, l1, ... */
    char nm[4][32];
    const int lk = d->bidirectional ? k / 2 : k, rev = d->bidirectional && k % 2, j = 2 * lk + rev;
    const int64_t gh = G * d->hidden, in = lk ? d->hidden * (d->bidirectional ? 2 : 1) : d->input;
    const char *sfx = rev ? "_reverse" : "";
    snprintf(nm[0], sizeof nm[0], "weight_ih_l%d%s", lk, sfx);
    snprintf(nm[1], sizeof nm[1], "weight_hh_l%d%s", lk, sfx);
    snprintf(nm[2], sizeof nm[2], "bias_ih_l%d%s", lk, sfx);
    snprintf(nm[3], sizeof nm[3], "bias_hh_l%d%s", lk, sfx);
    R->w_ih[j] = dl_layer_param_new(&R->base, nm[0], DL_PARAM_WEIGHT, 2, DL__I64S(gh, in),
                                    dl__init(DL_INIT_UNIFORM, bound), m->dtype);
    R->w_hh[j] = dl_layer_param_new(&R->base, nm[1], DL_PARAM_WEIGHT, 2, DL__I64S(gh, d->hidden),
                                    dl__init(DL_INIT_UNIFORM, bound), m->dtype);
    if (!d->no_bias) {
      R->b_ih[j] = dl_layer_param_new(&R->base, nm[2], DL_PARAM_BIAS, 1, &gh, dl__init(DL_INIT_UNIFORM, bound), m->dtype);
      R->b_hh[j] = dl_layer_param_new(&R->base, nm[3], DL_PARAM_BIAS, 1, &gh, dl__init(DL_INIT_UNIFORM, bound), m->dtype);
    }
  }
  return m->status == DL_OK ? &R->base : NULL;
}
/* Append an RNN layer (torch.nn.RNN, batch_first; tanh, or ReLU with
 * .relu). NULL on failure. */
DL_API dl_layer *dl_rnn_make(dl_model *m, dl_layer *parent, const char *name, const dl_rnn_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_rnn_make(m, parent, name, d, DL__LAY_RNN);
}
/* Append an LSTM layer (torch.nn.LSTM, batch_first). NULL on failure. */
DL_API dl_layer *dl_lstm_make(dl_model *m, dl_layer *parent, const char *name, const dl_rnn_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_rnn_make(m, parent, name, d, DL__LAY_LSTM);
}
/* Append a GRU layer (torch.nn.GRU, batch_first). NULL on failure. */
DL_API dl_layer *dl_gru_make(dl_model *m, dl_layer *parent, const char *name, const dl_rnn_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  return dl__lay_rnn_make(m, parent, name, d, DL__LAY_GRU);
}

/* >>attention -------------------------------------------------------------- */

/* nn.MultiheadAttention(embed, heads, bias, batch_first=True), no dropout:
 * in_proj_weight [3E, E] (xavier_uniform), in_proj_bias [3E] (0),
 * out_proj.weight [E, E] (Linear's default), out_proj.bias [E] (0).
 * Called as a layer it is self-attention, y = attn(x, x, x), causal when
 * desc.causal. */
typedef struct dl_mha_desc {
  int64_t embed; /* E, the model width */
  int heads; /* attention heads (E divisible by it) */
  int no_bias; /* 1: no biases */
  int causal; /* 1: position t attends to positions <= t only */
} dl_mha_desc;
typedef struct dl__lay_mha {
  dl_layer base;
  dl_mha_desc d;
  dl_tensor *in_w, *in_b, *out_w, *out_b;
} dl__lay_mha;
/* Attention with separate query [B, Tq, E], key and value [B, Tk, E], and
 * an optional mask [Tq, Tk] (float: added to the scores; u8/bool: nonzero
 * masks out), plus the layer's causal flag. Returns [B, Tq, E]. */
DL_API dl_tensor *dl_mha_forward(dl_layer *l, dl_tape *tp, dl_tensor *q, dl_tensor *k, dl_tensor *v,
                                 const dl_tensor *mask) {
  dl__lay_mha *A = (dl__lay_mha *)l;
  if (l->vt != &dl__lay_mha_vt)
    DL_PANIC(tp->ctx, "dl_mha_forward", "'%s' is a %s, not a MultiheadAttention", l->name, l->vt->type);
  dl__check_input(l, q, 3, 3, 2, A->d.embed);
  return dl_t_multi_head_attention(tp, q, k, v, A->in_w, A->in_b, A->out_w, A->out_b, A->d.heads, mask, A->d.causal);
}
DL_API dl_tensor *dl__lay_mha_forward1(dl_layer *l, dl_tape *tp, dl_tensor *x) { return dl_mha_forward(l, tp, x, x, x, NULL); }
DL_API void dl__lay_mha_describe(const dl_layer *l, char *buf, size_t n) {
  const dl__lay_mha *A = (const dl__lay_mha *)l;
  snprintf(buf, n, "%lld, heads=%d%s%s", (long long)A->d.embed, A->d.heads, A->d.no_bias ? ", bias=0" : "",
           A->d.causal ? ", causal" : "");
}
DL__GLOBAL_LATE(const dl_layer_vt dl__lay_mha_vt, {"MultiheadAttention", dl__lay_mha_forward1, dl__lay_mha_describe, NULL, 0});
/* Append a MultiheadAttention layer (torch.nn.MultiheadAttention,
 * batch_first; self-attention on its input). NULL on failure. */
DL_API dl_layer *dl_mha_make(dl_model *m, dl_layer *parent, const char *name, const dl_mha_desc *d) {
  if (!m) return NULL; /* a dl_model_make that failed */
  dl__lay_mha *A;
  const int64_t E = d->embed, E3 = 3 * d->embed;
  if (E <= 0 || d->heads <= 0 || E % d->heads)
    DL_PANIC(m->ctx, "dl_mha_make", "embed %lld must be > 0 and divisible by heads %d", (long long)E, d->heads);
  A = (dl__lay_mha *)dl__lay_lib_new(m, parent, name, &dl__lay_mha_vt, sizeof *A);
  if (!A) return NULL;
  A->d = *d;
  A->in_w = dl_layer_param_new(&A->base, "in_proj_weight", DL_PARAM_WEIGHT, 2, DL__I64S(E3, E),
                               dl__init(DL_INIT_XAVIER_UNIFORM, 0), m->dtype);
  if (!d->no_bias)
    A->in_b = dl_layer_param_new(&A->base, "in_proj_bias", DL_PARAM_BIAS, 1, &E3, dl__init(DL_INIT_ZEROS, 0), m->dtype);
  A->out_w = dl_layer_param_new(&A->base, "out_proj.weight", DL_PARAM_WEIGHT, 2, DL__I64S(E, E),
                                dl__init(DL_INIT_KAIMING_UNIFORM, sqrt(5.0)), m->dtype);
  if (!d->no_bias)
    A->out_b = dl_layer_param_new(&A->base, "out_proj.bias", DL_PARAM_BIAS, 1, &E, dl__init(DL_INIT_ZEROS, 0), m->dtype);
  return m->status == DL_OK ? &A->base : NULL;
}

/* >>summary ---------------------------------------------------------------- */

DL_API void dl__layer_counts(const dl_layer *l, int64_t *nparam, int64_t *bytes) {
  int i;
  for (i = l->first_param; i < l->first_param + l->nparam; i++) {
    const dl_param *p = l->model->params[i];
    if (p->kind != DL_PARAM_BUFFER) *nparam += p->t.numel;
    *bytes += p->t.numel * (int64_t)dl_dtype_size(p->t.dtype);
  }
  for (i = 0; i < l->nchild; i++) dl__layer_counts(l->child[i], nparam, bytes);
}
DL_API void dl__summary_rec(FILE *f, const dl_layer *l, int depth) {
  char args[96] = "", shape[64] = "-", label[DL_NAME_MAX + 16];
  int64_t np = 0, nb = 0;
  int i;
  if (l->vt->describe) l->vt->describe(l, args, sizeof args);
  if (l->out_ndim >= 0) {
    size_t k = 0;
    k += (size_t)snprintf(shape + k, sizeof shape - k, "[");
    for (i = 0; i < l->out_ndim && k < sizeof shape; i++)
      k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", i ? ", " : "", (long long)l->out_shape[i]);
    if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
  }
  dl__layer_counts(l, &np, &nb);
  snprintf(label, sizeof label, "%*s%s", 2 * depth, "", l->name[0] ? l->name : "(model)");
  fprintf(f, "%-28s %-13s %-20s %11lld %12lld  %s\n", label,
          l->vt == &dl__lay_act_vt ? dl_act_name(((const dl__lay_act_layer *)l)->act) : l->vt->type, shape, (long long)np,
          (long long)nb, args);
  for (i = 0; i < l->nchild; i++) dl__summary_rec(f, l->child[i], depth + 1);
}

typedef struct dl__summary_args {
  dl_model *m;
  dl_tape tp;
  dl_tensor *x;
} dl__summary_args;
DL_API void dl__summary_pass(void *arg) {
  dl__summary_args *a = (dl__summary_args *)arg;
  dl_no_grad_begin(&a->tp);
  (void)dl_model_forward(a->m, &a->tp, a->x);
  dl_no_grad_end(&a->tp);
}
/* Print the layer tree: each layer's name, type, output shape (from one
 * forward pass of `example` in eval mode on a scratch tape, no gradients;
 * NULL skips it and prints "-"), parameter count and bytes (its own and its
 * children's, buffers in the bytes), and its arguments; then the totals.
 * The model's mode and parameters are unchanged. DL_OK, or DL_ERR_NOMEM (the
 * scratch tape, or the pass: nothing printed then). */
DL_API dl_status dl_model_summary(dl_model *m, FILE *f, dl_tensor *example) {
  int64_t np = 0, nb = 0;
  int i;
  for (i = 0; i < m->nlayers; i++) m->layers[i]->out_ndim = -1;
  m->root.out_ndim = -1;
  if (example) {
    dl__summary_args a;
    const int was = m->training;
    dl_status st = dl_tape_init(&a.tp, m->ctx, 0);
    if (st != DL_OK) return st;
    a.m = m;
    a.x = example;
    m->training = 0;
    m->tracing = 1;
    st = dl_nomem_guard(m->ctx, dl__summary_pass, &a); /* out of memory: nothing printed */
    m->tracing = 0;
    m->training = was;
    dl_tape_free(&a.tp);
    if (st != DL_OK) return st;
  }
  fprintf(f, "%-28s %-13s %-20s %11s %12s  %s\n", "layer", "type", "output", "params", "bytes", "arguments");
  dl__summary_rec(f, &m->root, 0);
  dl__layer_counts(&m->root, &np, &nb);
  fprintf(f, "total: %lld trainable parameters, %lld bytes with buffers (%s)\n", (long long)np, (long long)nb,
          dl_dtype_name(m->dtype));
  return DL_OK;
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_LAYERS_H */
