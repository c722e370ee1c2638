/* dl/tensor.h - n-dimensional tensors, views, creation, copying, printing.
 *
 * A dl_tensor describes up to DL_MAX_DIMS (8) dimensions with int64 sizes and
 * strides. Strides count elements, not bytes, and may be 0 (an expanded
 * dimension) but never negative. `data` points at element [0, 0, ...]; a view
 * points into its base's storage.
 *
 *   shape   (2, 3)        strides (3, 1)   contiguous row-major
 *   transposed view (3, 2) strides (1, 3)   same storage, not contiguous
 *
 * Where a tensor's memory comes from, and who frees it:
 *   dl_tensor_make(ctx, ...)      heap, owned: dl_tensor_free releases struct and data
 *   dl_tensor_new(arena, ...)     arena: valid until the arena is rewound past it
 *   dl_tensor_wrap(&t, ...)       caller's memory, caller's struct: nothing to free
 *   dl_view_*(t, ...)             returned by value, borrows t's storage: valid
 *                                 while t's storage lives; never freed
 * Shapes are passed as (ndim, const int64_t *shape); DL_SHAPE(64, 784) expands
 * to `2, (const int64_t[]){64, 784}`.
 *
 * Sizes are overflow-checked: a shape whose element count or byte size does
 * not fit is refused with DL_ERR_OVERFLOW, never turned into a small
 * allocation. dtypes never change silently: dl_tensor_convert is the only
 * function that changes one, and mixing dtypes elsewhere is a panic that
 * names both.
 */
#ifndef DL_TENSOR_H
#define DL_TENSOR_H

#include "device.h"
DL__HEADER_BEGIN

#if defined(DL_USE_CUDA) && !defined(DL__SCALAR_ONLY)
#define DL__CUDA_C 1 /* the device glue below is C, as device.h is */
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Where a tensor's values live: host memory or the GPU. */
typedef enum dl_device { DL_CPU = 0, DL_CUDA = 1 } dl_device;

enum {
  DL_TENSOR_OWNED = 1u << 0,          /* heap block released by dl_tensor_free */
  DL_TENSOR_VIEW = 1u << 1,           /* borrows another tensor's storage */
  DL_TENSOR_REQUIRES_GRAD = 1u << 2,  /* recorded on the tape (tape.h) */
  DL_TENSOR_KEEP_GRAD = 1u << 3,      /* keep .grad of a non-leaf (tape.h) */
  DL_TENSOR_DENSE_GRAD = 1u << 4,     /* a leaf's dense .grad was written since its last zeroing (tape.h) */
  DL_TENSOR__GRAD_UNASKED = 1u << 5,  /* dl_backward made .grad before the rule ran; the rule has not asked for it */
  DL_TENSOR_OWNS_TANGENT = 1u << 6,   /* .tangent is a heap tensor freed with this one (a leaf gradient's H v, tape.h) */
  DL_TENSOR__ZERO_ON_READ = 1u << 7,  /* a gradient the optimizer's kernel may zero once it has read it (optim.h) */
  DL_TENSOR__UNZEROED = 1u << 8       /* a tape gradient whose buffer is not zeroed yet: its first writer zeroes
                                         it as it goes, or overwrites it (tape.h, dl__tape_grad_w) */
};

/* A row-sparse gradient of a 2-d tensor [rows, width] (tape.h; the
 * embedding's weight gradient): the rows touched since it was last cleared,
 * each once, in first-touch order, with their values. */
typedef struct dl_sgrad {
  int64_t nnz, cap;                  /* rows held, capacity */
  int64_t nrows, width;              /* the dense shape */
  int64_t *rows;                     /* [cap] row indices */
  int64_t *slot;                     /* [nrows] row -> position in rows, or -1 */
  void *values;                      /* [cap, width], the tensor's dtype; on the tensor's device */
  dl_dtype dtype; /* of the values */
  dl_device device;                  /* where values lives (rows and slot are host memory) */
  dl_ctx *ctx; /* allocator and error reports */
} dl_sgrad;

/* A strided view of up to DL_MAX_DIMS dimensions over data it may own; the
 * tape's fields (grad, node, tangent) are set by tape.h. */
typedef struct dl_tensor {
  void *data;                        /* element [0,...,0]; NULL for 0 elements */
  int64_t shape[DL_MAX_DIMS];        /* sizes, shape[ndim..] are 1 */
  int64_t strides[DL_MAX_DIMS];      /* in elements */
  int64_t numel;                     /* product of shape */
  int ndim;                          /* 0 (a scalar) .. DL_MAX_DIMS */
  dl_dtype dtype; /* element type */
  dl_device device; /* host or GPU memory */
  unsigned flags;                    /* DL_TENSOR_* */
  dl_ctx *ctx;                       /* panic handler, allocator, threads; may be NULL */
  struct dl_tensor *grad;            /* gradient, same shape and dtype (tape.h) */
  void *node;                        /* tape node that produced it (tape.h) */
  struct dl_tensor *tangent;         /* forward-mode tangent, same shape (tape.h) */
  void *sgrad;                       /* row-sparse gradient (tape.h, embedding) */
  void *block;                       /* heap block to release (owned tensors) */
} dl_tensor;

/* >>device glue (DL_USE_CUDA) ----------------------------------------------
 * What the ops need to run a tensor's work on its device: the handle and the
 * error check (defined below, after the shape helpers) and the device
 * tensors at the end of this file; the device itself is device.h's. */
#ifdef DL__CUDA_C
/* Panics naming op when t's data is on the device (host-only accessors). */
#define DL__HOST_ONLY(t, op)                                                              \
  do {                                                                                   \
    if (DL__UNLIKELY((t)->device != DL_CPU))                                             \
      DL_PANIC((t)->ctx, op, "%s is on the GPU: copy it to the host first (dl_to_host)",   \
               DL_SHAPESTR(t));                                                          \
  } while (0)
#else
#define DL__HOST_ONLY(t, op) ((void)0)
#endif

#define DL__NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, N, ...) N
#define DL__NARGS(...) DL__NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
/* DL__I64S(a, b, ...): a temporary array of up to 8 int64 values, as a
 * const int64_t * (C: a compound literal, alive to the end of the block;
 * C++: a temporary, alive to the end of the full expression, so pass it to
 * a call, never keep it). */
#ifdef __cplusplus
} /* extern "C": a template follows */
namespace {
struct dl__i64s {
  int64_t v[DL_MAX_DIMS];
  const int64_t *p() const { return v; }
};
template <class... A> inline dl__i64s dl__i64s_of(A... a) {
  static_assert(sizeof...(A) <= DL_MAX_DIMS, "dl: more than 8 sizes");
  dl__i64s r = {{static_cast<int64_t>(a)...}};
  return r;
}
} /* namespace */
#define DL__I64S(...) (dl__i64s_of(__VA_ARGS__).p())
extern "C" {
#else
#define DL__I64S(...) ((const int64_t[]){__VA_ARGS__})
#endif
/* DL_SHAPE(a, b, ...) -> ndim, (const int64_t[]){a, b, ...}; 1 to 8 sizes
 * (in C++ an array alive to the end of the full expression: an argument). */
#define DL_SHAPE(...) DL__NARGS(__VA_ARGS__), DL__I64S(__VA_ARGS__)

/* >>shape helpers ---------------------------------------------------------- */

/* Writes "f32[2, 3]" (or "f32[] " for a scalar) into buf; returns buf. */
DL_API char *dl_shape_str(const dl_tensor *t, char *buf, size_t n) {
  size_t at = 0;
  int d;
  if (!t) { snprintf(buf, n, "(null)"); return buf; }
  at += (size_t)snprintf(buf, n, "%s[", dl_dtype_name(t->dtype));
  for (d = 0; d < t->ndim && at < n; d++)
    at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)t->shape[d]);
  if (at < n) snprintf(buf + at, n - at, "]");
  return buf;
}
/* A shape string in a temporary for panic messages: DL_SHAPESTR(t). */
typedef struct dl__shapebuf { char s[160]; } dl__shapebuf;
DL_API dl__shapebuf dl__shape_of(const dl_tensor *t) {
  dl__shapebuf b;
  dl_shape_str(t, b.s, sizeof b.s);
  return b;
}
/* DL_SHAPESTR(t): "f32[4, 3]" in a temporary, for messages (valid until the
 * end of the full expression). */
#define DL_SHAPESTR(t) (dl__shape_of(t).s)

/* Element count and byte size of a shape, overflow-checked.
 * DL_OK, DL_ERR_ARG (bad ndim or negative size) or DL_ERR_OVERFLOW. */
DL_API dl_status dl_shape_size(dl_dtype dtype, int ndim, const int64_t *shape, int64_t *numel,
                               size_t *bytes) {
  int64_t n = 1, nz = 1; /* nz: the product of the nonzero sizes (the strides) */
  size_t b;
  int d;
  if (ndim < 0 || ndim > DL_MAX_DIMS || (ndim > 0 && !shape) || !dl_dtype_size(dtype))
    return DL_ERR_ARG;
  for (d = 0; d < ndim; d++) {
    if (shape[d] < 0) return DL_ERR_ARG;
    if (shape[d] == 0) { n = 0; continue; }
    if (nz > INT64_MAX / shape[d]) return DL_ERR_OVERFLOW; /* even with a 0 elsewhere: strides overflow */
    nz *= shape[d];
  }
  if (n) n = nz;
  if ((uint64_t)n > (uint64_t)(SIZE_MAX / dl_dtype_size(dtype)) ||
      (uint64_t)n > (uint64_t)PTRDIFF_MAX / dl_dtype_size(dtype))
    return DL_ERR_OVERFLOW;
  b = (size_t)n * dl_dtype_size(dtype);
  if (numel) *numel = n;
  if (bytes) *bytes = b;
  return DL_OK;
}

/* Bytes dl_tensor_new takes from an arena for this shape (struct + data,
 * aligned); 0 if the shape is invalid or overflows. */
DL_API size_t dl_tensor_arena_bytes(dl_dtype dtype, int ndim, const int64_t *shape) {
  size_t bytes, hdr = (sizeof(dl_tensor) + DL_ALIGN - 1) & ~(size_t)(DL_ALIGN - 1), total;
  if (dl_shape_size(dtype, ndim, shape, NULL, &bytes) != DL_OK) return 0;
  bytes = (bytes + DL_ALIGN - 1) & ~(size_t)(DL_ALIGN - 1);
  if (dl_size_add(hdr, bytes, &total)) return 0;
  return total;
}

/* Sets shape, contiguous strides and numel; data/flags untouched. */
DL_API void dl__set_shape(dl_tensor *t, int ndim, const int64_t *shape) {
  int d;
  int64_t s = 1;
  t->ndim = ndim;
  for (d = DL_MAX_DIMS - 1; d >= 0; d--) {
    t->shape[d] = d < ndim ? shape[d] : 1;
    if (d < ndim) { t->strides[d] = s; s *= shape[d]; }
    else t->strides[d] = 0;
  }
  t->numel = s;
}

DL_API dl_status dl__shape_fail(dl_ctx *ctx, dl_status st, const char *op, dl_dtype dtype,
                                int ndim, const int64_t *shape) {
  char buf[200];
  size_t at = 0;
  int d;
  if (ndim < 0 || ndim > DL_MAX_DIMS || (ndim > 0 && !shape))
    return dl_fail(ctx, st, "%s: bad rank %d (at most %d)", op, ndim, DL_MAX_DIMS);
  for (d = 0; d < ndim && at < sizeof buf; d++)
    at += (size_t)snprintf(buf + at, sizeof buf - at, d ? ", %lld" : "%lld", (long long)shape[d]);
  if (ndim == 0) buf[0] = 0;
  return dl_fail(ctx, st, "%s: %s for %s[%s]", op,
                 st == DL_ERR_OVERFLOW ? "size overflows" : "invalid shape or dtype",
                 dl_dtype_name(dtype), buf);
}

#ifdef DL__CUDA_C
/* The device handle of t's context; panics naming op when it has none. */
DL_API dlg_handle *dl__gpu_h(const dl_tensor *t, const char *op) {
  if (!t->ctx || !t->ctx->gpu)
    DL_PANIC(t->ctx, op, "%s is a device tensor but its ctx has no device open (dl_gpu_open)", DL_SHAPESTR(t));
  return t->ctx->gpu->h;
}
/* Panics naming op with the device's message when rc is not DLG_OK. */
DL_API void dl__gpu_ok(const dl_tensor *t, const char *op, int rc) {
  if (DL__UNLIKELY(rc != DLG_OK))
    DL_PANIC(t->ctx, op, "on the GPU, with %s: %s", DL_SHAPESTR(t),
             t->ctx && t->ctx->gpu ? dlg_message(t->ctx->gpu->h) : "no device");
}
#endif


/* >>create ----------------------------------------------------------------- */

/* A zero-filled tensor on the heap, owned: free with dl_tensor_free.
 * NULL on failure (DL_ERR_ARG, DL_ERR_OVERFLOW or DL_ERR_NOMEM in ctx). */
DL_API dl_tensor *dl_tensor_make(dl_ctx *ctx, dl_dtype dtype, int ndim, const int64_t *shape) {
  size_t bytes, hdr = (sizeof(dl_tensor) + DL_ALIGN - 1) & ~(size_t)(DL_ALIGN - 1), total;
  unsigned char *block;
  dl_tensor *t;
  dl_status st = dl_shape_size(dtype, ndim, shape, NULL, &bytes);
  if (st != DL_OK) { dl__shape_fail(ctx, st, "dl_tensor_make", dtype, ndim, shape); return NULL; }
  if (dl_size_add(hdr, bytes, &total)) {
    dl__shape_fail(ctx, DL_ERR_OVERFLOW, "dl_tensor_make", dtype, ndim, shape);
    return NULL;
  }
  block = (unsigned char *)dl_alloc(ctx, total);
  if (!block) return NULL;
  memset(block, 0, total);
  t = (dl_tensor *)(void *)block;
  dl__set_shape(t, ndim, shape);
  t->dtype = dtype;
  t->device = DL_CPU;
  t->ctx = ctx;
  t->flags = DL_TENSOR_OWNED;
  t->block = block;
  t->data = bytes ? block + hdr : NULL;
  return t;
}

/* Release a row-sparse gradient (NULL is a no-op). */
DL_API void dl_sgrad_free(dl_sgrad *s) {
  if (!s) return;
  dl_free(s->ctx, s->rows);
  dl_free(s->ctx, s->slot);
#ifdef DL__CUDA_C
  if (s->device == DL_CUDA) {
    if (s->values) dl__gpu_release(s->ctx ? s->ctx->gpu : NULL, s->values);
  } else
#endif
  dl_free(s->ctx, s->values);
  dl_free(s->ctx, s);
}
/* Release a tensor from dl_tensor_make (and its .grad and row-sparse
 * gradient when it owns them). NULL is a no-op; arena tensors and views are
 * left alone. */
DL_API void dl_tensor_free(dl_tensor *t) {
  if (!t || !(t->flags & DL_TENSOR_OWNED)) return;
  if (t->grad && t->grad != t) dl_tensor_free(t->grad);
  if ((t->flags & DL_TENSOR_OWNS_TANGENT) && t->tangent != t) dl_tensor_free(t->tangent);
  dl_sgrad_free((dl_sgrad *)t->sgrad);
#ifdef DL__CUDA_C
  if (t->device == DL_CUDA && t->data) dl__gpu_release(t->ctx ? t->ctx->gpu : NULL, t->data);
#endif
  dl_free(t->ctx, t->block);
}

/* An uninitialised tensor in an arena (struct and data), valid until the
 * arena is rewound past it. NULL when the arena is full (see its ctx). */
DL_API dl_tensor *dl_tensor_new(dl_arena *a, dl_dtype dtype, int ndim, const int64_t *shape) {
  size_t bytes, hdr = (sizeof(dl_tensor) + DL_ALIGN - 1) & ~(size_t)(DL_ALIGN - 1), total;
  unsigned char *block;
  dl_tensor *t;
  dl_status st = dl_shape_size(dtype, ndim, shape, NULL, &bytes);
  if (st != DL_OK) { dl__shape_fail(a->ctx, st, "dl_tensor_new", dtype, ndim, shape); return NULL; }
  if (dl_size_add(hdr, bytes, &total)) {
    dl__shape_fail(a->ctx, DL_ERR_OVERFLOW, "dl_tensor_new", dtype, ndim, shape);
    return NULL;
  }
  block = (unsigned char *)dl_arena_alloc(a, total);
  if (!block) return NULL;
  t = (dl_tensor *)(void *)block;
  memset(t, 0, sizeof *t);
  dl__set_shape(t, ndim, shape);
  t->dtype = dtype;
  t->ctx = a->ctx;
  t->data = bytes ? block + hdr : NULL;
  return t;
}
/* As dl_tensor_new, zero-filled. */
DL_API dl_tensor *dl_tensor_zeros(dl_arena *a, dl_dtype dtype, int ndim, const int64_t *shape) {
  dl_tensor *t = dl_tensor_new(a, dtype, ndim, shape);
  if (t && t->data) memset(t->data, 0, (size_t)t->numel * dl_dtype_size(dtype));
  return t;
}

/* Describe caller-owned contiguous memory as a tensor in *t (no allocation;
 * for static buffers and firmware). DL_ERR_ARG / DL_ERR_OVERFLOW on a bad
 * shape, with *t left zeroed. */
DL_API dl_status dl_tensor_wrap(dl_tensor *t, dl_ctx *ctx, dl_dtype dtype, int ndim,
                                const int64_t *shape, void *data) {
  dl_status st = dl_shape_size(dtype, ndim, shape, NULL, NULL);
  memset(t, 0, sizeof *t);
  if (st != DL_OK) return dl__shape_fail(ctx, st, "dl_tensor_wrap", dtype, ndim, shape);
  dl__set_shape(t, ndim, shape);
  t->dtype = dtype;
  t->ctx = ctx;
  t->data = data;
  return DL_OK;
}

/* >>typed access ----------------------------------------------------------- */

DL_API void dl__want_dtype(const dl_tensor *t, dl_dtype want, const char *op) {
  if (DL__UNLIKELY(t->dtype != want))
    DL_PANIC(t->ctx, op, "tensor is %s, %s was asked for", DL_SHAPESTR(t), dl_dtype_name(want));
}
/* Typed pointer to element 0; panics (naming both dtypes) on a mismatch. */
DL_API float *dl_f32(const dl_tensor *t) { dl__want_dtype(t, DL_F32, "dl_f32"); return (float *)t->data; }
/* The data as double * (panics unless t is f64). */
DL_API double *dl_f64(const dl_tensor *t) { dl__want_dtype(t, DL_F64, "dl_f64"); return (double *)t->data; }
/* The data as int32_t * (panics unless t is i32). */
DL_API int32_t *dl_i32(const dl_tensor *t) { dl__want_dtype(t, DL_I32, "dl_i32"); return (int32_t *)t->data; }
/* The data as int64_t * (panics unless t is i64). */
DL_API int64_t *dl_i64(const dl_tensor *t) { dl__want_dtype(t, DL_I64, "dl_i64"); return (int64_t *)t->data; }
/* The data as uint8_t * (panics unless t is u8). */
DL_API uint8_t *dl_u8(const dl_tensor *t) { dl__want_dtype(t, DL_U8, "dl_u8"); return (uint8_t *)t->data; }

/* Offset in elements of the element at multi-index idx (t->ndim entries).
 * Panics on an index out of range. */
DL_API int64_t dl_tensor_offset(const dl_tensor *t, const int64_t *idx) {
  int64_t off = 0;
  int d;
  for (d = 0; d < t->ndim; d++) {
    if (DL__UNLIKELY(idx[d] < 0 || idx[d] >= t->shape[d]))
      DL_PANIC(t->ctx, "dl_tensor_offset", "index %lld out of range for dimension %d of %s",
               (long long)idx[d], d, DL_SHAPESTR(t));
    off += idx[d] * t->strides[d];
  }
  return off;
}
/* Element at linear offset `off` (from dl_tensor_offset) as a double. */
DL_API double dl__get_at(const dl_tensor *t, int64_t off) {
  DL__HOST_ONLY(t, "dl_tensor_get");
  const char *p = (const char *)t->data;
  switch (t->dtype) {
    case DL_F32: return ((const float *)(const void *)p)[off];
    case DL_F64: return ((const double *)(const void *)p)[off];
    case DL_I32: return ((const int32_t *)(const void *)p)[off];
    case DL_I64: return (double)((const int64_t *)(const void *)p)[off];
    case DL_U8: return ((const uint8_t *)(const void *)p)[off];
    case DL_I8: return ((const int8_t *)(const void *)p)[off];
    default: DL_PANIC(t->ctx, "dl_tensor_get", "dtype %s has no scalar access", dl_dtype_name(t->dtype));
  }
}
DL_API void dl__set_at(dl_tensor *t, int64_t off, double v) {
  DL__HOST_ONLY(t, "dl_tensor_set");
  char *p = (char *)t->data;
  switch (t->dtype) {
    case DL_F32: ((float *)(void *)p)[off] = (float)v; break;
    case DL_F64: ((double *)(void *)p)[off] = v; break;
    case DL_I32: ((int32_t *)(void *)p)[off] = (int32_t)v; break;
    case DL_I64: ((int64_t *)(void *)p)[off] = (int64_t)v; break;
    case DL_U8: ((uint8_t *)(void *)p)[off] = (uint8_t)v; break;
    case DL_I8: ((int8_t *)(void *)p)[off] = (int8_t)v; break;
    default: DL_PANIC(t->ctx, "dl_tensor_set", "dtype %s has no scalar access", dl_dtype_name(t->dtype));
  }
}
/* Read / write one element at multi-index idx, converted to/from double.
 * For tests and printing, not for loops. */
DL_API double dl_tensor_get(const dl_tensor *t, const int64_t *idx) { return dl__get_at(t, dl_tensor_offset(t, idx)); }
/* Write one element at multi-index idx, converted from double (see
 * dl_tensor_get). */
DL_API void dl_tensor_set(dl_tensor *t, const int64_t *idx, double v) { dl__set_at(t, dl_tensor_offset(t, idx), v); }

/* Linear index i (row-major order over the shape) -> element offset. */
DL_API int64_t dl__offset_of_linear(const dl_tensor *t, int64_t i) {
  int64_t off = 0;
  int d;
  for (d = t->ndim - 1; d >= 0; d--) {
    off += (i % t->shape[d]) * t->strides[d];
    i /= t->shape[d];
  }
  return off;
}

/* 1 when t's elements are laid out row-major without gaps (dimensions of
 * size 1 may have any stride). */
DL_API int dl_tensor_is_contiguous(const dl_tensor *t) {
  int64_t s = 1;
  int d;
  for (d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != 1 && t->strides[d] != s) return 0;
    s *= t->shape[d];
  }
  return 1;
}
/* 1 when a and b have the same number of dimensions and sizes. */
DL_API int dl_tensor_same_shape(const dl_tensor *a, const dl_tensor *b) {
  int d;
  if (a->ndim != b->ndim) return 0;
  for (d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

/* >>views ------------------------------------------------------------------ */

DL_API dl_tensor dl__view_base(const dl_tensor *t) {
  dl_tensor v = *t;
  v.flags = (t->flags & ~(unsigned)(DL_TENSOR_OWNED | DL_TENSOR_REQUIRES_GRAD | DL_TENSOR_KEEP_GRAD | DL_TENSOR__GRAD_UNASKED)) |
            DL_TENSOR_VIEW;
  v.grad = NULL;
  v.node = NULL;
  v.tangent = NULL;
  v.sgrad = NULL;
  v.block = NULL;
  return v;
}

/* The same elements in a new shape; t must be contiguous. One size may be
 * -1 (inferred). Panics on a non-contiguous t or a size mismatch. */
DL_API dl_tensor dl_view_reshape(const dl_tensor *t, int ndim, const int64_t *shape) {
  int64_t sh[DL_MAX_DIMS], known = 1;
  int d, infer = -1;
  dl_tensor v = dl__view_base(t);
  if (ndim < 0 || ndim > DL_MAX_DIMS)
    DL_PANIC(t->ctx, "dl_view_reshape", "rank %d for %s (at most %d)", ndim, DL_SHAPESTR(t), DL_MAX_DIMS);
  for (d = 0; d < ndim; d++) {
    sh[d] = shape[d];
    if (sh[d] == -1 && infer < 0) infer = d;
    else if (sh[d] < 0)
      DL_PANIC(t->ctx, "dl_view_reshape", "size %lld in new shape for %s", (long long)sh[d], DL_SHAPESTR(t));
    else if (sh[d] != 0 && known > INT64_MAX / sh[d])
      DL_PANIC(t->ctx, "dl_view_reshape", "new shape for %s overflows int64", DL_SHAPESTR(t));
    else known *= sh[d];
  }
  if (infer >= 0) {
    if (known == 0 || t->numel % known)
      DL_PANIC(t->ctx, "dl_view_reshape", "cannot infer size -1: %s has %lld elements, other sizes multiply to %lld",
               DL_SHAPESTR(t), (long long)t->numel, (long long)known);
    sh[infer] = t->numel / known;
    known *= sh[infer];
  }
  if (known != t->numel)
    DL_PANIC(t->ctx, "dl_view_reshape", "%s has %lld elements, the new shape %lld",
             DL_SHAPESTR(t), (long long)t->numel, (long long)known);
  if (!dl_tensor_is_contiguous(t))
    DL_PANIC(t->ctx, "dl_view_reshape", "%s is not contiguous (copy it with dl_tensor_contiguous first)", DL_SHAPESTR(t));
  dl__set_shape(&v, ndim, sh);
  return v;
}

/* Dimensions reordered: result dimension d is t's dimension perm[d]. */
DL_API dl_tensor dl_view_permute(const dl_tensor *t, const int *perm) {
  dl_tensor v = dl__view_base(t);
  int d, seen[DL_MAX_DIMS] = {0};
  for (d = 0; d < t->ndim; d++) {
    if (perm[d] < 0 || perm[d] >= t->ndim || seen[perm[d]]++)
      DL_PANIC(t->ctx, "dl_view_permute", "invalid permutation entry %d at %d for %s", perm[d], d, DL_SHAPESTR(t));
    v.shape[d] = t->shape[perm[d]];
    v.strides[d] = t->strides[perm[d]];
  }
  return v;
}
/* Dimensions d0 and d1 swapped (negative counts from the end). */
DL_API dl_tensor dl_view_transpose(const dl_tensor *t, int d0, int d1) {
  int perm[DL_MAX_DIMS], d;
  if (d0 < 0) d0 += t->ndim;
  if (d1 < 0) d1 += t->ndim;
  if (d0 < 0 || d1 < 0 || d0 >= t->ndim || d1 >= t->ndim)
    DL_PANIC(t->ctx, "dl_view_transpose", "dimensions %d, %d out of range for %s", d0, d1, DL_SHAPESTR(t));
  for (d = 0; d < t->ndim; d++) perm[d] = d;
  perm[d0] = d1;
  perm[d1] = d0;
  return dl_view_permute(t, perm);
}
/* Elements start, start+step, ... < stop along dim (negative dim counts from
 * the end; start/stop are clamped like Python's slices; step >= 1). */
DL_API dl_tensor dl_view_slice(const dl_tensor *t, int dim, int64_t start, int64_t stop, int64_t step) {
  dl_tensor v = dl__view_base(t);
  int64_t n, len;
  if (dim < 0) dim += t->ndim;
  if (dim < 0 || dim >= t->ndim || step < 1)
    DL_PANIC(t->ctx, "dl_view_slice", "dimension %d step %lld invalid for %s", dim, (long long)step, DL_SHAPESTR(t));
  n = t->shape[dim];
  if (start < 0) start += n;
  if (stop < 0) stop += n;
  if (start < 0) start = 0;
  if (start > n) start = n;
  if (stop > n) stop = n;
  if (stop < start) stop = start;
  len = (stop - start + step - 1) / step;
  v.shape[dim] = len;
  v.strides[dim] = t->strides[dim] * step;
  v.numel = len == 0 ? 0 : (t->numel / (n ? n : 1)) * len;
  if (v.numel == 0) v.data = NULL;
  else v.data = (char *)t->data + (size_t)(start * t->strides[dim]) * dl_dtype_size(t->dtype);
  return v;
}
/* Broadcast view: sizes of 1 (or new leading dimensions) repeated with
 * stride 0. Each t dimension must equal the new size or be 1. */
DL_API dl_tensor dl_view_expand(const dl_tensor *t, int ndim, const int64_t *shape) {
  dl_tensor v = dl__view_base(t);
  int d, off = ndim - t->ndim;
  if (ndim > DL_MAX_DIMS || off < 0)
    DL_PANIC(t->ctx, "dl_view_expand", "cannot expand %s to rank %d", DL_SHAPESTR(t), ndim);
  v.ndim = ndim;
  v.numel = 1;
  for (d = ndim - 1; d >= 0; d--) {
    int s = d - off;
    if (shape[d] < 0 || (shape[d] != 0 && v.numel > INT64_MAX / shape[d]))
      DL_PANIC(t->ctx, "dl_view_expand", "size %lld at dimension %d overflows or is negative (expanding %s)",
               (long long)shape[d], d, DL_SHAPESTR(t));
    if (s >= 0 && t->shape[s] == shape[d]) { v.shape[d] = shape[d]; v.strides[d] = t->strides[s]; }
    else if (s < 0 || t->shape[s] == 1) { v.shape[d] = shape[d]; v.strides[d] = 0; }
    else
      DL_PANIC(t->ctx, "dl_view_expand", "cannot expand %s: dimension %d is %lld, asked %lld",
               DL_SHAPESTR(t), s, (long long)t->shape[s], (long long)shape[d]);
    v.numel *= shape[d];
  }
  for (d = ndim; d < DL_MAX_DIMS; d++) { v.shape[d] = 1; v.strides[d] = 0; }
  return v;
}

/* >>copy ------------------------------------------------------------------- */

DL_API void dl__check_same(const dl_tensor *a, const dl_tensor *b, const char *op, int dtype_too) {
  if (dtype_too && a->dtype != b->dtype)
    DL_PANIC(a->ctx, op, "dtype mismatch: %s vs %s (no implicit conversion; use dl_tensor_convert)",
             DL_SHAPESTR(a), DL_SHAPESTR(b));
  if (!dl_tensor_same_shape(a, b))
    DL_PANIC(a->ctx, op, "shape mismatch: %s vs %s", DL_SHAPESTR(a), DL_SHAPESTR(b));
}

/* dst[...] = src[...] for any strides; same dtype and shape (panics otherwise). */
DL_API void dl_tensor_copy(dl_tensor *dst, const dl_tensor *src) {
  size_t es = dl_dtype_size(src->dtype);
  int64_t i;
  dl__check_same(dst, src, "dl_tensor_copy", 1);
  if (dst->numel == 0) return;
#ifdef DL__CUDA_C
  if (dst->device == DL_CUDA || src->device == DL_CUDA) {
    const dl_tensor *on = dst->device == DL_CUDA ? dst : src;
    dlg_handle *h = dl__gpu_h(on, "dl_tensor_copy");
    int kind = dst->device == src->device ? DLG_D2D : dst->device == DL_CUDA ? DLG_H2D : DLG_D2H;
    if (dl_tensor_is_contiguous(dst) && dl_tensor_is_contiguous(src))
      dl__gpu_ok(on, "dl_tensor_copy", dlg_copy(h, dst->data, src->data, (size_t)src->numel * es, kind));
    else if (kind == DLG_D2D && dl_tensor_is_contiguous(dst))
      dl__gpu_ok(on, "dl_tensor_copy", dlg_copy_strided(h, (int)es, dst->data, src->data, src->ndim, src->shape,
                                                        src->strides));
    else
      DL_PANIC(on->ctx, "dl_tensor_copy",
               "%s to %s: between devices both must be contiguous; on the device the destination must be",
               DL_SHAPESTR(src), DL_SHAPESTR(dst));
    return;
  }
#endif
  if (dl_tensor_is_contiguous(dst) && dl_tensor_is_contiguous(src)) {
    memmove(dst->data, src->data, (size_t)src->numel * es);
    return;
  }
  for (i = 0; i < src->numel; i++)
    memcpy((char *)dst->data + (size_t)dl__offset_of_linear(dst, i) * es,
           (const char *)src->data + (size_t)dl__offset_of_linear(src, i) * es, es);
}

/* dst = src converted to dst's dtype (the one explicit conversion; f16/bf16
 * are converted by io.h). Same shape; float -> integer truncates. */
DL_API void dl_tensor_convert(dl_tensor *dst, const dl_tensor *src) {
  int64_t i;
  dl__check_same(dst, src, "dl_tensor_convert", 0);
  for (i = 0; i < src->numel; i++)
    dl__set_at(dst, dl__offset_of_linear(dst, i), dl__get_at(src, dl__offset_of_linear(src, i)));
}

/* A contiguous copy of t in the arena (t itself is not changed). */
DL_API dl_tensor *dl_tensor_contiguous(dl_arena *a, const dl_tensor *t) {
  dl_tensor *c = dl_tensor_new(a, t->dtype, t->ndim, t->shape);
  if (c) dl_tensor_copy(c, t);
  return c;
}

/* Every element set to v (converted to t's dtype). */
DL_API void dl_tensor_fill(dl_tensor *t, double v) {
  int64_t i;
#ifdef DL__CUDA_C
  if (t->device == DL_CUDA) {
    if (!dl_tensor_is_contiguous(t))
      DL_PANIC(t->ctx, "dl_tensor_fill", "%s on the device must be contiguous", DL_SHAPESTR(t));
    dl__gpu_ok(t, "dl_tensor_fill", dlg_fill(dl__gpu_h(t, "dl_tensor_fill"), (int)t->dtype, t->data, t->numel, v));
    return;
  }
#endif
  if (dl_tensor_is_contiguous(t) && t->dtype == DL_F32) {
    float *p = (float *)t->data, f = (float)v;
    for (i = 0; i < t->numel; i++) p[i] = f;
  } else if (dl_tensor_is_contiguous(t) && t->dtype == DL_F64) {
    double *p = (double *)t->data;
    for (i = 0; i < t->numel; i++) p[i] = v;
  } else {
    for (i = 0; i < t->numel; i++) dl__set_at(t, dl__offset_of_linear(t, i), v);
  }
}

/* Uniform in [lo, hi) / normal(mean, std) draws into a float tensor. Element
 * i (row-major) takes draw counter+i, so the result is the same for any
 * thread count (large tensors are filled in parallel); the RNG advances by
 * numel. */
DL_API double dl__rand_value(int normal, dl_dtype dt, uint64_t x, double a, double b) {
  double v;
  if (normal) return a + b * dl__normal_from(x);
  v = a + (b - a) * (dt == DL_F32 ? (double)dl__u01_f32(x) : dl__u01_f64(x));
  if (dt == DL_F32 && (float)v >= (float)b) v = a; /* keep [lo, hi) after rounding to f32 */
  return v;
}
DL_API void dl__rand_fill(dl_tensor *t, dl_rng *r, int normal, double a, double b, const char *op) {
  DL__HOST_ONLY(t, op);
  int64_t i, n = t->numel;
  const uint64_t base = r->counter;
  const dl_rng rr = *r;
  if (t->dtype != DL_F32 && t->dtype != DL_F64)
    DL_PANIC(t->ctx, op, "needs f32 or f64, got %s", DL_SHAPESTR(t));
  if (dl_tensor_is_contiguous(t)) {
    if (t->dtype == DL_F32) {
      float *p = (float *)t->data;
      DL_PARALLEL_RANGE(t->ctx, n, n, k,
                        { p[k] = (float)dl__rand_value(normal, DL_F32, dl_rng_at(&rr, base + (uint64_t)k), a, b); });
    } else {
      double *p = (double *)t->data;
      DL_PARALLEL_RANGE(t->ctx, n, n, k, { p[k] = dl__rand_value(normal, DL_F64, dl_rng_at(&rr, base + (uint64_t)k), a, b); });
    }
  } else {
    for (i = 0; i < n; i++)
      dl__set_at(t, dl__offset_of_linear(t, i),
                 dl__rand_value(normal, t->dtype, dl_rng_at(&rr, base + (uint64_t)i), a, b));
  }
  r->counter += (uint64_t)n;
}
/* Fill t with uniform values in [lo, hi) from r's stream; the same numbers
 * for any thread count. Advances r by t's element count. */
DL_API void dl_tensor_rand_uniform(dl_tensor *t, dl_rng *r, double lo, double hi) {
  dl__rand_fill(t, r, 0, lo, hi, "dl_tensor_rand_uniform");
}
/* Fill t with normal values (mean, std) from r's stream; the same numbers
 * for any thread count. Advances r by t's element count. */
DL_API void dl_tensor_rand_normal(dl_tensor *t, dl_rng *r, double mean, double std) {
  dl__rand_fill(t, r, 1, mean, std, "dl_tensor_rand_normal");
}

/* >>print ------------------------------------------------------------------ */
#ifndef DL_NO_STDIO
DL_API void dl__print_rec(FILE *f, const dl_tensor *t, int d, int64_t off, int indent) {
  int64_t n = t->shape[d], i, edge = 3;
  int summarise = t->numel > 1000 && n > 2 * edge;
  fputc('[', f);
  for (i = 0; i < n; i++) {
    if (summarise && i == edge) {
      fprintf(f, d == t->ndim - 1 ? "..., " : "...,\n%*s", d == t->ndim - 1 ? 0 : indent + 1, "");
      i = n - edge;
    }
    if (d == t->ndim - 1) {
      double v = dl__get_at(t, off + i * t->strides[d]);
      if (t->dtype == DL_F32 || t->dtype == DL_F64) fprintf(f, "%.*g", t->dtype == DL_F32 ? 6 : 10, v);
      else fprintf(f, "%.0f", v);
      if (i + 1 < n) fputs(", ", f);
    } else {
      dl__print_rec(f, t, d + 1, off + i * t->strides[d], indent + 1);
      if (i + 1 < n) fprintf(f, ",\n%*s", indent + 1, "");
    }
  }
  fputc(']', f);
}
/* Prints "name f32[2, 3] =\n[[1, 2, 3],\n [4, 5, 6]]"; tensors over 1000
 * elements show 3 entries at each end of every dimension. */
DL_API void dl_tensor_fprint(FILE *f, const dl_tensor *t, const char *name) {
  fprintf(f, "%s%s%s =\n", name ? name : "", name ? " " : "", DL_SHAPESTR(t));
  if (t->ndim == 0) fprintf(f, "%.10g", t->numel ? dl__get_at(t, 0) : 0.0);
  else if (t->numel == 0) fputs("[]", f);
  else dl__print_rec(f, t, 0, 0, 0);
  fputc('\n', f);
}
#endif

#ifndef DL__SCALAR_ONLY
#ifdef DL_USE_CUDA
DL__STATIC_ASSERT((int)DL_F32 == DLG_F32 && (int)DL_F64 == DLG_F64 && (int)DL_I32 == DLG_I32 && (int)DL_I64 == DLG_I64,
               "dl: dl_dtype and the GPU interface's dtype codes differ");

#endif

/* >>device tensors -------------------------------------------------------------------- */

/* A zeroed, owned tensor on g (free with dl_tensor_free). NULL with the
 * status in g's ctx (DL_ERR_NOMEM with the figures). */
DL_API dl_tensor *dl_gpu_tensor(dl_gpu *g, dl_dtype dtype, int ndim, const int64_t *shape) {
  size_t bytes;
  dl_tensor *t;
  void *p = NULL;
  dl_status st = dl_shape_size(dtype, ndim, shape, NULL, &bytes);
  if (st != DL_OK) { dl__shape_fail(g->ctx, st, "dl_gpu_tensor", dtype, ndim, shape); return NULL; }
  if (bytes && dl_gpu_alloc(g, &p, bytes) != DL_OK) return NULL;
#ifdef DL_USE_CUDA
  if (bytes && dlg_memset0(g->h, p, bytes) != DLG_OK) {
    dl_fail(g->ctx, DL_ERR_NO_DEVICE, "dl_gpu_tensor: %s", dlg_message(g->h));
    dl_gpu_free(g, p);
    return NULL;
  }
#endif
  t = (dl_tensor *)dl_alloc(g->ctx, sizeof *t);
  if (!t) { dl_gpu_free(g, p); return NULL; }
  memset(t, 0, sizeof *t);
  dl__set_shape(t, ndim, shape);
  t->dtype = dtype;
  t->device = DL_CUDA;
  t->ctx = g->ctx;
  t->flags = DL_TENSOR_OWNED;
  t->block = t;
  t->data = p;
  return t;
}
#ifdef DL_USE_CUDA
DL_API dl_tensor *dl__gpu_tensor_make(dl_ctx *ctx, dl_dtype dtype, int ndim, const int64_t *shape) {
  if (!ctx || !ctx->gpu) { dl_fail(ctx, DL_ERR_NO_DEVICE, "no device open on this ctx"); return NULL; }
  return dl_gpu_tensor(ctx->gpu, dtype, ndim, shape);
}
#endif

/* Copies between any two devices: same dtype and shape; both contiguous
 * when they are on different devices. DL_OK, DL_ERR_SHAPE / DL_ERR_DTYPE
 * (message names both), DL_ERR_NO_DEVICE. */
DL_API dl_status dl_copy_to(dl_tensor *dst, const dl_tensor *src) {
  dl_ctx *ctx = dst->ctx ? dst->ctx : src->ctx;
  if (dst->dtype != src->dtype)
    return dl_fail(ctx, DL_ERR_DTYPE, "dl_copy_to: %s to %s (never converted)", DL_SHAPESTR(src), DL_SHAPESTR(dst));
  if (!dl_tensor_same_shape(dst, src))
    return dl_fail(ctx, DL_ERR_SHAPE, "dl_copy_to: %s to %s", DL_SHAPESTR(src), DL_SHAPESTR(dst));
  if (dst->device != src->device && (!dl_tensor_is_contiguous(dst) || !dl_tensor_is_contiguous(src)))
    return dl_fail(ctx, DL_ERR_ARG, "dl_copy_to: %s to %s between devices: both must be contiguous",
                   DL_SHAPESTR(src), DL_SHAPESTR(dst));
#ifndef DL_USE_CUDA
  if (dst->device != DL_CPU || src->device != DL_CPU)
    return dl_fail(ctx, DL_ERR_NO_DEVICE, "dl_copy_to: a device tensor without DL_USE_CUDA");
#endif
  dl_tensor_copy(dst, src);
  return DL_OK;
}

/* *out = a new owned device copy of src (any device) on g. DL_OK, or
 * DL_ERR_NOMEM (figures in ctx) / DL_ERR_NO_DEVICE with *out NULL. */
DL_API dl_status dl_to_device(dl_gpu *g, dl_tensor **out, const dl_tensor *src) {
  dl_tensor *t;
  dl_status st;
  *out = NULL;
  if (!g) return DL_ERR_NO_DEVICE;
  t = dl_gpu_tensor(g, src->dtype, src->ndim, src->shape);
  if (!t) return g->ctx->status != DL_OK ? g->ctx->status : DL_ERR_NOMEM;
  if (src->numel && !dl_tensor_is_contiguous(src)) {
    dl_fail(g->ctx, DL_ERR_ARG, "dl_to_device: %s is strided: make it contiguous first", DL_SHAPESTR(src));
    dl_tensor_free(t);
    return DL_ERR_ARG;
  }
  st = src->numel ? dl_copy_to(t, src) : DL_OK;
  if (st != DL_OK) { dl_tensor_free(t); return st; }
  *out = t;
  return DL_OK;
}
/* *out = a new owned host copy (dl_tensor_make on src's ctx) of a device
 * (or host) tensor; waits for the device. DL_OK or DL_ERR_NOMEM. */
DL_API dl_status dl_to_host(dl_tensor **out, const dl_tensor *src) {
  dl_tensor *t = dl_tensor_make(src->ctx, src->dtype, src->ndim, src->shape);
  dl_status st;
  *out = NULL;
  if (!t) return src->ctx ? src->ctx->status : DL_ERR_NOMEM;
  st = src->numel ? dl_copy_to(t, src) : DL_OK;
  if (st != DL_OK) { dl_tensor_free(t); return st; }
  *out = t;
  return DL_OK;
}

/* Element 0 of t (a loss) as a double, wherever t is; waits for the device. */
DL_API double dl_item(const dl_tensor *t) {
#ifdef DL_USE_CUDA
  if (t->device == DL_CUDA) {
    union { double d; int64_t i; unsigned char b[8]; } b; /* aligned for any element type */
    size_t es = dl_dtype_size(t->dtype);
    dl_tensor h;
    int64_t one = 1;
    if (!t->numel) DL_PANIC(t->ctx, "dl_item", "%s has no element", DL_SHAPESTR(t));
    dl__gpu_ok(t, "dl_item", dlg_copy(dl__gpu_h(t, "dl_item"), b.b, t->data, es, DLG_D2H));
    dl_tensor_wrap(&h, t->ctx, t->dtype, 1, &one, b.b);
    return dl__get_at(&h, 0);
  }
#endif
  if (!t->numel) DL_PANIC(t->ctx, "dl_item", "%s has no element", DL_SHAPESTR(t));
  return dl__get_at(t, 0);
}

#endif /* !DL__SCALAR_ONLY */

#ifdef __cplusplus
}
#endif
DL__HEADER_END
#endif /* DL_TENSOR_H */
