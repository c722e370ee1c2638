/* dl/tape.h - reverse-mode tape, forward-mode tangents, custom ops, gradcheck.
 *
 * Reverse mode. A dl_tape owns an arena; every op in ops.h takes the tape as
 * its first argument, allocates its output there and, when an input requires
 * a gradient (and no no-grad scope is open), records a node: the op's
 * backward rule and what it needs. dl_backward(tp, loss, NULL) walks the
 * nodes from the loss back to the first one and ACCUMULATES (+=) into the
 * .grad of every leaf that requires a gradient, so two losses that share
 * parameters can be back-propagated one after the other before one update:
 *
 *   dl_tape tp; dl_tape_init(&tp, ctx, 0);
 *   dl_requires_grad(w);                       // heap gradient, once
 *   for (;;) {
 *     dl_tensor *loss = dl_t_mse(&tp, dl_t_matmul(&tp, x, w), y, DL_REDUCE_MEAN);
 *     dl_zero_grad(w);
 *     dl_backward(&tp, loss, NULL);            // w->grad += d loss / d w
 *     ... update w ...
 *     dl_tape_rewind(&tp);                     // forget the step; keep the memory
 *   }
 *
 * Memory: outputs, nodes and the gradients of intermediate tensors live in
 * the tape's arena and are valid until dl_tape_rewind. Gradients of leaves
 * (tensors without a node, usually parameters) are long-lived: dl_requires_grad
 * allocates them once with dl_tensor_make. After the first step the arena
 * holds one block of the high-water size, so the steady state calls no
 * allocator at all.
 *
 * Intermediate gradients are dropped when backward returns (their pointers
 * set back to NULL) unless dl_keep_grad(t) asked to keep them; a kept one is
 * valid until the rewind. dl_detach(tp, t) gives t's values with no history.
 * dl_no_grad_begin/end bracket code that records nothing (evaluation).
 *
 * Errors that say so: backward on a loss that is not a scalar without a seed,
 * backward after the tape was rewound (the loss is gone), a loss that was
 * not recorded on this tape, dtype or shape mismatches in any op.
 *
 * Forward mode. dl_set_tangent(x, v) attaches a tangent v (same shape and
 * dtype) to x; every op in ops.h that sees a tangent on an input computes the
 * output's tangent in the same forward pass (element-wise ops by dual
 * numbers, matmul by the product rule, ...), no tape needed: y->tangent is
 * J v. Tangents of outputs live in the tape's arena.
 *
 * Custom ops. dl_t_custom runs a user's forward function and records a node
 * whose backward rule is the user's, so a vendor kernel or any op the library
 * lacks takes part in backward like a built-in one (the embedding's sparse
 * gradient uses the same mechanism). In a backward rule, dl_tape_grad(tp, x)
 * returns the dense gradient to accumulate into (NULL when x needs none) and
 * dl_tape_sgrad(tp, x) a row-sparse one.
 *
 * dl_gradcheck checks a function of tensors in f64: the tape's gradient
 * against central differences, and the forward-mode tangent against a
 * directional difference.
 */
#ifndef DL_TAPE_H
#define DL_TAPE_H

#include "expr.h"
#include "blas.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY

typedef struct dl_tape dl_tape;
typedef struct dl_node dl_node;
/* A backward rule: reads n->out->grad, accumulates into the inputs' gradients
 * (dl_tape_grad). */
typedef void (*dl_backward_fn)(dl_tape *tp, dl_node *n);

/* Inputs a node keeps inline (more go in its arena). */
#define DL_NODE_SAVED 4
/* One recorded op: its name, backward rule, output and inputs, and what the
 * rule saved. */
struct dl_node {
  const char *op;                   /* op name, for messages */
  dl_backward_fn backward; /* the rule that propagates out->grad to the inputs */
  dl_tensor *out; /* the op's output */
  int nin; /* number of inputs */
  dl_tensor **in;                   /* nin inputs (arena) */
  dl_tensor *saved[DL_NODE_SAVED];  /* extra tensors the rule needs (arena or caller's) */
  double p[4];                      /* number parameters */
  int64_t i[8];                     /* integer parameters */
  void (*fn[2])(void);              /* functions the rule calls (element-wise, custom) */
  const void *cfn;                  /* a custom op's table */
  void *user;                       /* a custom op's user data */
  unsigned flags;                   /* DL_NODE_* */
  dl_node *prev;                    /* recorded just before this one */
};
/* Node flags. During dl_backward a rule's arena scratch is released when the
 * rule returns, and the output's gradient is reused for a later node's once
 * the rule has run (the walk's memory stays near the largest live set, not
 * the sum of every gradient). A node that needs otherwise says so: */
enum {
  DL_NODE_KEEP_SCRATCH = 1u << 0, /* the rule's scratch lives until the rewind (custom ops) */
  DL_NODE_KEEP_OUT_GRAD = 1u << 1, /* a later rule reads out->grad (an RNN's c_n) */
  DL_NODE_HVP = 1u << 2,           /* the rule also propagates the gradients' tangents (dl_hvp) */
  DL_NODE_HVP_LINEAR = 1u << 3     /* the rule is linear in out->grad alone (a sum, a reshape, a
                                      selection): dl_hvp runs it again on the tangents */
};

/* The reverse-mode tape: an arena for op outputs, nodes, intermediate
 * gradients and tangents, the list of nodes, the no-grad depth and the
 * device. dl_tape_init / dl_tape_rewind / dl_tape_free. */
struct dl_tape {
  dl_ctx *ctx; /* allocator, errors, threads, the panic handler */
  dl_arena arena;                   /* outputs, nodes, intermediate gradients, tangents */
  dl_node *last;                    /* newest node, NULL when empty */
  int64_t nodes;                    /* recorded since the last rewind */
  int no_grad;                      /* depth of open no-grad scopes */
  uint64_t rewinds;                 /* rewinds so far */
  uint64_t backwards;               /* backward walks so far */
  /* Called by dl_backward after each node of the walk (whether or not its
   * rule ran), newest first; NULL: none. dist.h uses it to start a gradient
   * bucket's all-reduce as soon as the bucket's parameters are final. */
  void (*on_node)(dl_tape *tp, dl_node *n, void *user);
  void *on_node_user; /* passed to on_node */
  /* A device tape (gpu.h's dl_tape_use_gpu): outputs, intermediate gradients
   * and device scratch are device memory from `dev`, a bump arena over the
   * device's caching allocator, rewound with the tape. NULL: the host. */
  struct dl_gpu *gpu;
  void *dev; /* the device bump arena (see above) */
  void *gfree;                      /* dl_backward's spent gradients, for reuse (arena) */
  int hvp;                          /* inside dl_hvp's walk: every gradient carries a tangent */
  /* A no-grad forward of a Sequential on a host tape (layers.h's
   * dl__lay_seq_nograd_host) alternates its layers' outputs and scratch
   * between these two arenas, giving back what a layer two before made.
   * Rewound with the tape, freed at the first rewind of a step that did not
   * use them (training after an evaluation). */
  dl_arena bank[2];
  int bank_cur;  /* where outputs come from: 0 `arena` (always outside such a forward), 1 or 2 bank[0] or bank[1] */
  int bank_used; /* 1: a forward used the banks since the last rewind */
};

/* >>device tapes (the device arena behind a tape on a GPU; dl_tape_use_gpu) - */

struct dl__gpu_chunk { /* a block of a device arena */
  void *p;
  size_t cap;
};
typedef struct dl__gpu_arena {
  dl_gpu *g;
  struct dl__gpu_chunk *ch; /* the blocks held, oldest first (ncap entries, from the ctx) */
  int n, ncap;    /* blocks held; entries of ch */
  size_t used;    /* in the newest chunk */
  size_t step;    /* bytes used by this step so far (all chunks) */
  size_t high;    /* the most one step has used */
} dl__gpu_arena;
/* A device tape's memory: two arenas. New outputs come from bank[cur]; only
 * a no-grad forward of a Sequential alternates into bank 1 (layers.h's
 * dl__lay_seq_nograd_dev), so that what a layer read two layers ago can be
 * given back while the forward runs. Both rewind with the tape. */
typedef struct dl__gpu_tapemem {
  dl__gpu_arena bank[2];
  int cur;
} dl__gpu_tapemem;
/* Where an arena stood (dl__gpu_arena_mark), to give back what came after. */
typedef struct dl__gpu_mark {
  int n;
  size_t used, step;
} dl__gpu_mark;

/* Makes tp a device tape on g: from now on its op outputs, intermediate
 * gradients and device scratch are g's memory (one block per step once
 * the first step has sized it). Call on a fresh or rewound tape. DL_OK or
 * DL_ERR_NOMEM / DL_ERR_NO_DEVICE. */
DL_API dl_status dl_tape_use_gpu(dl_tape *tp, dl_gpu *g) {
  if (!g) return dl_fail(tp->ctx, DL_ERR_NO_DEVICE, "dl_tape_use_gpu: no device");
#ifndef DL_USE_CUDA
  return dl_fail(tp->ctx, DL_ERR_NO_DEVICE, "dl_tape_use_gpu: built without DL_USE_CUDA");
#else
  dl__gpu_tapemem *a;
  if (tp->nodes) return dl_fail(tp->ctx, DL_ERR_ARG, "dl_tape_use_gpu: the tape holds a step; rewind it first");
  if (tp->gpu) return tp->gpu == g ? DL_OK : dl_fail(tp->ctx, DL_ERR_ARG, "dl_tape_use_gpu: already on another device");
  if (g->ctx != tp->ctx) /* device tensors find their device through their ctx */
    return dl_fail(tp->ctx, DL_ERR_ARG, "dl_tape_use_gpu: the device was opened on another ctx than the tape's");
  a = (dl__gpu_tapemem *)dl_alloc(tp->ctx, sizeof *a);
  if (!a) return DL_ERR_NOMEM;
  memset(a, 0, sizeof *a);
  a->bank[0].g = a->bank[1].g = g;
  tp->gpu = g;
  tp->dev = a;
  return DL_OK;
#endif
}

#ifdef DL_USE_CUDA
DL_API void *dl__gpu_arena_alloc(dl_tape *tp, dl__gpu_arena *a, const char *op, size_t bytes) {
  size_t b = (bytes + 255) & ~(size_t)255;
  void *p;
  if (a->n == 0 || a->used + b > a->ch[a->n - 1].cap) {
    /* A step's first block holds what the largest step so far used: once a
     * step has run, every step takes one block. Past it (the first step, or
     * a larger one), a block of what is asked, small requests sharing 256
     * KiB: the step then holds what it uses, as allocating each tensor
     * would, not up to twice that as blocks that double would. */
    size_t want = b > ((size_t)1 << 18) ? b : ((size_t)1 << 18);
    if (a->n == 0 && a->high > want) want = a->high;
    if (a->n == a->ncap) { /* a longer table of blocks */
      const int nc = a->ncap ? 2 * a->ncap : 16;
      struct dl__gpu_chunk *t = (struct dl__gpu_chunk *)dl_alloc(tp->ctx, sizeof *t * (size_t)nc);
      if (!t) DL_NOMEM(tp->ctx, op, "the device tape's table of %d blocks: host out of memory", nc);
      if (a->n) memcpy(t, a->ch, sizeof *t * (size_t)a->n);
      dl_free(tp->ctx, a->ch);
      a->ch = t;
      a->ncap = nc;
    }
    if (dl_gpu_alloc(a->g, &p, want) != DL_OK)
      DL_NOMEM(tp->ctx, op, "the device tape cannot hold %zu more bytes (%zu in use this step): %s", bytes, a->step,
               dl_ctx_message(tp->ctx));
    a->ch[a->n].p = p;
    a->ch[a->n].cap = want;
    a->n++;
    a->used = 0;
  }
  p = (unsigned char *)a->ch[a->n - 1].p + a->used;
  a->used += b;
  a->step += b;
  if (a->step > a->high) a->high = a->step;
  return p;
}
/* bytes of the tape's current bank (DL_NOMEM in op when the device is full). */
DL_API void *dl__gpu_tape_alloc(dl_tape *tp, const char *op, size_t bytes) {
  dl__gpu_tapemem *m = (dl__gpu_tapemem *)tp->dev;
  return dl__gpu_arena_alloc(tp, &m->bank[m->cur], op, bytes);
}
DL_API dl__gpu_mark dl__gpu_arena_mark(const dl__gpu_arena *a) {
  dl__gpu_mark k;
  k.n = a->n;
  k.used = a->used;
  k.step = a->step;
  return k;
}
/* Gives back what a took after mark k: the blocks it added return to the
 * device's cache (the next growth of the same size takes them back). */
DL_API void dl__gpu_arena_release(dl__gpu_arena *a, dl__gpu_mark k) {
  while (a->n > k.n) dl_gpu_free(a->g, a->ch[--a->n].p);
  a->used = k.n ? k.used : 0;
  a->step = k.step;
}
/* 1 when p lies in what a took after mark k. */
DL_API int dl__gpu_arena_holds(const dl__gpu_arena *a, dl__gpu_mark k, const void *p) {
  int i;
  for (i = k.n ? k.n - 1 : 0; i < a->n; i++) {
    const unsigned char *c = (const unsigned char *)a->ch[i].p;
    const size_t lo = i == k.n - 1 ? k.used : 0, hi = i == a->n - 1 ? a->used : a->ch[i].cap;
    if ((const unsigned char *)p >= c + lo && (const unsigned char *)p < c + hi) return 1;
  }
  return 0;
}
/* Rewinds a device arena; a step that needed several blocks makes the next
 * one take a single block of the step's size. */
DL_API void dl__gpu_arena_rewind(dl__gpu_arena *a) {
  int i;
  if (a->n > 1) {
    for (i = 0; i < a->n; i++) dl_gpu_free(a->g, a->ch[i].p);
    a->n = 0;
  }
  a->used = 0;
  a->step = 0;
}
DL_API void dl__gpu_tape_rewind(dl_tape *tp) {
  dl__gpu_tapemem *m = (dl__gpu_tapemem *)tp->dev;
  dl__gpu_mark none = {0, 0, 0};
  dl__gpu_arena_rewind(&m->bank[0]);
  dl__gpu_arena_release(&m->bank[1], none); /* evaluation's second bank back to the cache: not held while training */
  m->cur = 0;
}
DL_API void dl__gpu_tape_free(dl_tape *tp) {
  dl__gpu_tapemem *a = (dl__gpu_tapemem *)tp->dev;
  int i, b;
  if (!a) return;
  if (tp->ctx->gpu == a->bank[0].g) /* else the device was closed first: its memory went with it */
    for (b = 0; b < 2; b++)
      for (i = 0; i < a->bank[b].n; i++) dl_gpu_free(a->bank[b].g, a->bank[b].ch[i].p);
  dl_free(tp->ctx, a->bank[0].ch);
  dl_free(tp->ctx, a->bank[1].ch);
  dl_free(tp->ctx, a);
  tp->dev = NULL;
  tp->gpu = NULL;
}
#endif


/* >>tape ------------------------------------------------------------------- */

/* The tape's arena cannot hold `bytes` more for op: DL_NOMEM (core.h) with
 * what was asked, what the step holds and what it needs in all. */
DL_API DL__NORETURN void dl__tape_nomem(dl_tape *tp, const char *op, const char *what, size_t bytes) {
  DL_NOMEM(tp->ctx, op, "the tape's arena cannot hold %s of %zu bytes (%zu bytes in use this step, %zu needed in all)",
           what, bytes, tp->arena.used, dl_arena_bytes_needed(&tp->arena));
}

/* A tape whose arena starts with `capacity` bytes and grows on demand (0 is
 * fine: the first step sizes it). DL_OK or DL_ERR_NOMEM (message in ctx). */
DL_API dl_status dl_tape_init(dl_tape *tp, dl_ctx *ctx, size_t capacity) {
  memset(tp, 0, sizeof *tp);
  tp->ctx = ctx;
  return dl_arena_init(&tp->arena, ctx, capacity, 1);
}
/* A tape on a caller's buffer: never calls the allocator; an op that does
 * not fit is out of memory (dl_ctx_on_nomem; the message names
 * dl_arena_bytes_needed(&tp->arena)). For inference-only builds and firmware. */
DL_API void dl_tape_init_buffer(dl_tape *tp, dl_ctx *ctx, void *buf, size_t size) {
  memset(tp, 0, sizeof *tp);
  tp->ctx = ctx;
  dl_arena_init_buffer(&tp->arena, ctx, buf, size);
}
/* Release the tape's memory (its outputs become invalid; leaf gradients are
 * untouched). */
DL_API void dl_tape_free(dl_tape *tp) {
#ifdef DL_USE_CUDA
  if (tp->gpu) dl__gpu_tape_free(tp);
#endif
  dl_arena_free(&tp->arena);
  dl_arena_free(&tp->bank[0]);
  dl_arena_free(&tp->bank[1]);
  tp->bank_cur = tp->bank_used = 0;
  tp->last = NULL;
  tp->nodes = 0;
  tp->gfree = NULL;
}
/* Forget every node, output, intermediate gradient and tangent of the step:
 * all of them become invalid. Leaf gradients are untouched. */
DL_API void dl_tape_rewind(dl_tape *tp) {
#ifdef DL_USE_CUDA
  if (tp->gpu) dl__gpu_tape_rewind(tp);
#endif
  dl_arena_rewind(&tp->arena, 0);
  if (tp->bank_used) { /* an evaluation: kept for the next batch */
    dl_arena_rewind(&tp->bank[0], 0);
    dl_arena_rewind(&tp->bank[1], 0);
  } else if (tp->bank[0].owns) { /* not used since: given back */
    dl_arena_free(&tp->bank[0]);
    dl_arena_free(&tp->bank[1]);
  }
  tp->bank_cur = tp->bank_used = 0;
  tp->last = NULL;
  tp->nodes = 0;
  tp->gfree = NULL;
  tp->rewinds++;
}
/* The tape's arena: scratch memory valid until the next rewind. */
DL_API dl_arena *dl_tape_arena(dl_tape *tp) { return &tp->arena; }

/* No-grad scopes nest; inside one, ops record nothing and their outputs do
 * not require gradients (tangents still propagate). */
DL_API void dl_no_grad_begin(dl_tape *tp) { tp->no_grad++; }
/* Close the innermost no-grad scope (panics when none is open). */
DL_API void dl_no_grad_end(dl_tape *tp) {
  if (tp->no_grad <= 0) DL_PANIC(tp->ctx, "dl_no_grad_end", "no no-grad scope is open");
  tp->no_grad--;
}
/* 1 when ops on tp record (no no-grad scope is open). */
DL_API int dl_grad_enabled(const dl_tape *tp) { return tp->no_grad == 0; }

/* >>leaves ----------------------------------------------------------------- */

/* Whether t is flagged as needing a gradient (DL_TENSOR_REQUIRES_GRAD); 0
 * for NULL. */
DL_API int dl_requires_grad_p(const dl_tensor *t) { return t && (t->flags & DL_TENSOR_REQUIRES_GRAD); }

/* Mark t (a leaf: a parameter or an input) as needing its gradient and give
 * it a zeroed t->grad from dl_tensor_make, unless it has one. The gradient is
 * freed with t when t came from dl_tensor_make; otherwise the caller frees it
 * with dl_tensor_free(t->grad). DL_OK, or DL_ERR_NOMEM with t unchanged. */
DL_API dl_status dl_requires_grad(dl_tensor *t) {
  if (t->dtype != DL_F32 && t->dtype != DL_F64)
    DL_PANIC(t->ctx, "dl_requires_grad", "only f32 and f64 tensors have gradients, not %s",
             DL_SHAPESTR(t));
  if (!t->grad) {
#ifdef DL_USE_CUDA
    dl_tensor *g = t->device == DL_CUDA ? dl__gpu_tensor_make(t->ctx, t->dtype, t->ndim, t->shape)
                                        : dl_tensor_make(t->ctx, t->dtype, t->ndim, t->shape);
#else
    dl_tensor *g = dl_tensor_make(t->ctx, t->dtype, t->ndim, t->shape);
#endif
    if (!g) return t->ctx ? t->ctx->status : DL_ERR_NOMEM;
    t->grad = g;
  }
  t->flags |= DL_TENSOR_REQUIRES_GRAD;
  return DL_OK;
}
/* As dl_requires_grad with the caller's gradient memory g (same shape and
 * dtype, contiguous); g is not freed by the library. */
DL_API void dl_requires_grad_with(dl_tensor *t, dl_tensor *g) {
  dl__check_same(g, t, "dl_requires_grad_with", 1);
  if (!dl_tensor_is_contiguous(g))
    DL_PANIC(t->ctx, "dl_requires_grad_with", "gradient %s must be contiguous", DL_SHAPESTR(g));
  t->grad = g;
  t->flags |= DL_TENSOR_REQUIRES_GRAD;
}
/* Forget the rows of a row-sparse gradient (its memory stays). */
DL_API void dl_sgrad_clear(dl_sgrad *s) {
  int64_t k;
  for (k = 0; k < s->nnz; k++) s->slot[s->rows[k]] = -1;
  s->nnz = 0;
}
/* Zero t's gradient (dense, and the row-sparse one: its rows are cleared). */
DL_API void dl_zero_grad(dl_tensor *t) {
  t->flags &= ~(unsigned)DL_TENSOR_DENSE_GRAD;
  if (t->grad) dl_tensor_fill(t->grad, 0.0);
  if (t->grad && (t->grad->flags & DL_TENSOR_OWNS_TANGENT)) dl_tensor_fill(t->grad->tangent, 0.0);
  if (t->sgrad) dl_sgrad_clear((dl_sgrad *)t->sgrad);
}
/* Keep the gradient of an intermediate tensor after backward (valid until
 * the rewind); leaves always keep theirs. */
DL_API void dl_keep_grad(dl_tensor *t) { t->flags |= DL_TENSOR_KEEP_GRAD; }

/* >>recording -------------------------------------------------------------- */

/* An output tensor in the tape's arena (uninitialised). When the arena
 * cannot hold it: out of memory in op (DL_NOMEM, core.h), naming the bytes. */
DL_API dl_tensor *dl_tape_out(dl_tape *tp, const char *op, dl_dtype dtype, int ndim,
                              const int64_t *shape) {
  dl_tensor *t;
#ifdef DL_USE_CUDA
  if (tp->gpu) { /* the struct on the host, the data on the device */
    size_t bytes;
    dl_status st = dl_shape_size(dtype, ndim, shape, NULL, &bytes);
    if (st != DL_OK) {
      dl__shape_fail(tp->ctx, st, op, dtype, ndim, shape);
      DL_PANIC(tp->ctx, op, "%s", dl_ctx_message(tp->ctx));
    }
    t = (dl_tensor *)dl_arena_alloc(&tp->arena, sizeof *t);
    if (t) {
      memset(t, 0, sizeof *t);
      dl__set_shape(t, ndim, shape);
      t->dtype = dtype;
      t->device = DL_CUDA;
      t->ctx = tp->ctx;
      t->data = bytes ? dl__gpu_tape_alloc(tp, op, bytes) : NULL;
      return t;
    }
  } else
#endif
  t = dl_tensor_new(tp->bank_cur ? &tp->bank[tp->bank_cur - 1] : &tp->arena, dtype, ndim, shape);
  if (!t) {
    size_t bytes = 0;
    if (dl_shape_size(dtype, ndim, shape, NULL, &bytes) != DL_OK) /* not memory: a shape past size_t */
      DL_PANIC(tp->ctx, op, "%s", dl_ctx_message(tp->ctx));
    dl__tape_nomem(tp, op, "the output", bytes + sizeof *t);
  }
  return t;
}
/* The same, zero-filled. */
DL_API dl_tensor *dl_tape_zeros(dl_tape *tp, const char *op, dl_dtype dtype, int ndim,
                                const int64_t *shape) {
  dl_tensor *t = dl_tape_out(tp, op, dtype, ndim, shape);
#ifdef DL_USE_CUDA
  if (t->device == DL_CUDA) {
    if (t->data)
      dl__gpu_ok(t, op, dlg_memset0(dl__gpu_h(t, op), t->data, (size_t)t->numel * dl_dtype_size(dtype)));
    return t;
  }
#endif
  if (t->data) memset(t->data, 0, (size_t)t->numel * dl_dtype_size(dtype));
  return t;
}
#ifdef DL_USE_CUDA
/* Device scratch bytes of a device tape (valid until the rewind); out of
 * memory in op (DL_NOMEM) when the device is full. */
DL_API void *dl_tape_dev_scratch(dl_tape *tp, const char *op, size_t bytes) {
  if (!tp->gpu) DL_PANIC(tp->ctx, op, "device scratch asked of a host tape");
  return dl__gpu_tape_alloc(tp, op, bytes ? bytes : 1);
}
#endif
/* Scratch bytes in the tape's arena (valid until the rewind; in a backward
 * rule, until the rule returns unless its node has DL_NODE_KEEP_SCRATCH);
 * out of memory in op (DL_NOMEM) when it cannot hold them. */
DL_API void *dl_tape_scratch(dl_tape *tp, const char *op, size_t bytes) {
  void *p = dl_arena_alloc(tp->bank_cur ? &tp->bank[tp->bank_cur - 1] : &tp->arena, bytes ? bytes : 1);
  if (!p) dl__tape_nomem(tp, op, "scratch", bytes);
  return p;
}
/* A struct copy of t in the arena: a view of the same data with no history,
 * no gradient and no tangent. */
DL_API dl_tensor *dl__tape_view(dl_tape *tp, const char *op, const dl_tensor *t) {
  dl_tensor *v = (dl_tensor *)dl_tape_scratch(tp, op, sizeof *v);
  *v = dl__view_base(t);
  return v;
}
/* t's values without history: backward stops here; no tangent. */
DL_API dl_tensor *dl_detach(dl_tape *tp, const dl_tensor *t) { return dl__tape_view(tp, "dl_detach", t); }

/* Whether an op with these inputs must record: gradients enabled and one of
 * them requires a gradient. */
DL_API int dl_tape_wants(const dl_tape *tp, int nin, dl_tensor *const *in) {
  int k;
  if (tp->no_grad) return 0;
  for (k = 0; k < nin; k++)
    if (in[k] && (in[k]->flags & DL_TENSOR_REQUIRES_GRAD)) return 1;
  return 0;
}
/* Record a node for `out` made by `op` from in[0..nin) with rule `bw`, when
 * dl_tape_wants says so; returns it (to fill p/i/saved/fn) or NULL. out is
 * marked as requiring a gradient. The input array is copied. */
DL_API dl_node *dl_tape_record_n(dl_tape *tp, const char *op, dl_backward_fn bw, dl_tensor *out,
                                 int nin, dl_tensor *const *in) {
  dl_node *n;
  int k;
  if (!dl_tape_wants(tp, nin, in)) return NULL;
  n = (dl_node *)dl_tape_scratch(tp, op, sizeof *n + sizeof(dl_tensor *) * (size_t)nin);
  memset(n, 0, sizeof *n);
  n->op = op;
  n->backward = bw;
  n->out = out;
  n->nin = nin;
  n->in = (dl_tensor **)(void *)(n + 1);
  for (k = 0; k < nin; k++) n->in[k] = in[k];
  n->prev = tp->last;
  tp->last = n;
  tp->nodes++;
  out->node = n;
  out->flags |= DL_TENSOR_REQUIRES_GRAD;
  out->grad = NULL;
  return n;
}
/* dl_tape_record_n for 1..3 inputs (NULL entries allowed). */
DL_API dl_node *dl_tape_record(dl_tape *tp, const char *op, dl_backward_fn bw, dl_tensor *out,
                               dl_tensor *a, dl_tensor *b, dl_tensor *c) {
  dl_tensor *in[3];
  in[0] = a;
  in[1] = b;
  in[2] = c;
  return dl_tape_record_n(tp, op, bw, out, c ? 3 : b ? 2 : 1, in);
}

/* >>moving data in and out of a step ------------------------------------------- */

/* t where tp computes: t itself when it already is there (a host tensor on
 * a host tape, a device tensor on a device tape), else a contiguous copy in
 * the tape's arena (device memory for a device tape), valid until the
 * rewind: the batch's inputs and labels, `dl_tape_input(&tp, batch.x)`. */
DL_API dl_tensor *dl_tape_input(dl_tape *tp, const dl_tensor *t) {
  dl_tensor *c;
  dl_device want = tp->gpu ? DL_CUDA : DL_CPU;
  if (t->device == want) return (dl_tensor *)(uintptr_t)t;
  if (want == DL_CUDA) c = dl_tape_out(tp, "dl_tape_input", t->dtype, t->ndim, t->shape);
  else if (!(c = dl_tensor_new(&tp->arena, t->dtype, t->ndim, t->shape)))
    dl__tape_nomem(tp, "dl_tape_input", DL_SHAPESTR(t), (size_t)t->numel * dl_dtype_size(t->dtype));
  if (t->numel && !dl_tensor_is_contiguous(t)) {
    dl_tensor *tc;
    if (t->device != DL_CPU)
      DL_PANIC(tp->ctx, "dl_tape_input", "%s: a strided device tensor cannot go to the host", DL_SHAPESTR(t));
    if (!(tc = dl_tensor_new(&tp->arena, t->dtype, t->ndim, t->shape)))
      dl__tape_nomem(tp, "dl_tape_input", DL_SHAPESTR(t), (size_t)t->numel * dl_dtype_size(t->dtype));
    dl_tensor_copy(tc, t);
    t = tc;
  }
  if (t->numel) dl_tensor_copy(c, t);
  return c;
}
/* t's values on the host: t itself when it is there, else a copy in the
 * tape's host arena (valid until the rewind); waits for the device. For
 * host-only code such as report.h's dl_accuracy_count. */
DL_API dl_tensor *dl_tape_host(dl_tape *tp, const dl_tensor *t) {
  dl_tensor *c;
  if (t->device == DL_CPU) return (dl_tensor *)(uintptr_t)t;
  if (!(c = dl_tensor_new(&tp->arena, t->dtype, t->ndim, t->shape)))
    dl__tape_nomem(tp, "dl_tape_host", DL_SHAPESTR(t), (size_t)t->numel * dl_dtype_size(t->dtype));
  if (t->numel) dl_tensor_copy(c, t);
  return c;
}
/* >>gradients in backward rules -------------------------------------------- */

/* A gradient buffer whose rule has run (dl_backward), free for another
 * gradient of this walk or a later walk before the rewind. */
typedef struct dl__gfree {
  struct dl__gfree *next;
  void *data;
  size_t bytes;
} dl__gfree;

/* A zeroed gradient for the intermediate x: a spent buffer of at least its
 * size (at most twice: the smallest that fits) when there is one, else new
 * in the arena. With `lazy` (dl_backward's, host), a spent buffer is not
 * zeroed but flagged DL_TENSOR__UNZEROED: dl_tape_grad zeroes it when the
 * rule asks for it, dl__tape_grad_w lets the rule's first write do it. */
DL_API dl_tensor *dl__tape_grad_new1(dl_tape *tp, const dl_tensor *x, int lazy);
/* A zeroed (or lazy, see above) gradient for x (arena), with a zeroed tangent during dl_hvp. */
DL_API dl_tensor *dl__tape_grad_new(dl_tape *tp, const dl_tensor *x, int lazy) {
  dl_tensor *g = dl__tape_grad_new1(tp, x, lazy && !tp->hvp);
  if (tp->hvp && g) g->tangent = dl_tape_zeros(tp, "dl_hvp", x->dtype, x->ndim, x->shape);
  return g;
}
DL_API dl_tensor *dl__tape_grad_new1(dl_tape *tp, const dl_tensor *x, int lazy) {
  size_t bytes = (size_t)x->numel * dl_dtype_size(x->dtype);
  dl__gfree **pp, **best = NULL;
  dl_tensor *t;
  for (pp = (dl__gfree **)&tp->gfree; bytes && *pp; pp = &(*pp)->next)
    if ((*pp)->bytes >= bytes && (*pp)->bytes / 2 <= bytes && (!best || (*pp)->bytes < (*best)->bytes)) best = pp;
  if (!best || (!tp->arena.grow && tp->arena.used + sizeof *t + DL_ALIGN > tp->arena.cap) ||
      !(t = (dl_tensor *)dl_arena_alloc(&tp->arena, sizeof *t))) {
    if (!lazy || tp->gpu) return dl_tape_zeros(tp, "dl_backward", x->dtype, x->ndim, x->shape); /* (its own out-of-memory path) */
    t = dl_tape_out(tp, "dl_backward", x->dtype, x->ndim, x->shape); /* new in the arena, zeroed by its first writer */
    t->flags |= DL_TENSOR__UNZEROED;
#ifdef DL_TAPE_POISON
    if (t->data) memset(t->data, 0xff, (size_t)t->numel * dl_dtype_size(t->dtype));
#endif
    return t;
  }
  memset(t, 0, sizeof *t);
  dl__set_shape(t, x->ndim, x->shape);
  t->dtype = x->dtype;
  t->ctx = tp->ctx;
  t->data = (*best)->data;
  *best = (*best)->next;
#ifdef DL_USE_CUDA
  if (tp->gpu) {
    t->device = DL_CUDA;
    dl__gpu_ok(t, "dl_backward", dlg_memset0(dl__gpu_h(t, "dl_backward"), t->data, bytes));
    return t;
  }
#endif
  if (lazy) {
    t->flags |= DL_TENSOR__UNZEROED; /* its first writer zeroes it (dl__tape_grad_w) */
#ifdef DL_TAPE_POISON /* tests: NaN in every element, so that a rule adding to it unzeroed shows */
    memset(t->data, 0xff, bytes);
#endif
  } else {
    memset(t->data, 0, bytes);
  }
  return t;
}
/* Put g's buffer on the free list. On a caller's fixed buffer without room
 * for the note the buffer is simply not reused (and the ctx keeps no
 * out-of-memory status). */
DL_API void dl__tape_gfree_push(dl_tape *tp, const dl_tensor *g) {
  const int room = tp->arena.grow || tp->arena.used + sizeof(dl__gfree) + DL_ALIGN <= tp->arena.cap;
  dl__gfree *e = room && g->data ? (dl__gfree *)dl_arena_alloc(&tp->arena, sizeof *e) : NULL;
  if (!e) return;
  e->data = g->data;
  e->bytes = (size_t)g->numel * dl_dtype_size(g->dtype);
  e->next = (dl__gfree *)tp->gfree;
  tp->gfree = e;
}

/* The dense gradient of x to accumulate into during backward, or NULL when x
 * needs none. A leaf's is its long-lived .grad (allocated with dl_tensor_make
 * on first use if dl_requires_grad was bypassed); an intermediate's is a
 * zeroed, contiguous tensor in the arena made on first use. */
DL_API dl_tensor *dl_tape_grad(dl_tape *tp, dl_tensor *x) {
  if (!x || !(x->flags & DL_TENSOR_REQUIRES_GRAD)) return NULL;
  if (!x->node) x->flags |= DL_TENSOR_DENSE_GRAD; /* a leaf: its dense gradient is in use */
  x->flags &= ~(unsigned)DL_TENSOR__GRAD_UNASKED;
  if (!x->node && (x->grad || dl_requires_grad(x) == DL_OK)) {
    if (tp->hvp && !x->grad->tangent) { /* a leaf's H v: long-lived, like its gradient */
      dl_tensor *t = dl_tensor_make(x->ctx, x->dtype, x->ndim, x->shape);
      if (!t)
        DL_NOMEM(tp->ctx, "dl_hvp", "the Hessian-vector product of leaf %s (%zu bytes): %s", DL_SHAPESTR(x),
                 (size_t)x->numel * dl_dtype_size(x->dtype), dl_ctx_message(x->ctx));
      dl_tensor_fill(t, 0.0);
      x->grad->tangent = t;
      x->grad->flags |= DL_TENSOR_OWNS_TANGENT;
    }
    return x->grad;
  }
  if (x->grad) {
    if (x->grad->flags & DL_TENSOR__UNZEROED) { /* made by dl_backward for this rule: zeroed when first asked for */
      x->grad->flags &= ~(unsigned)DL_TENSOR__UNZEROED;
      if (x->grad->data) memset(x->grad->data, 0, (size_t)x->grad->numel * dl_dtype_size(x->grad->dtype));
    }
    return x->grad;
  }
  if (!x->node)
    DL_NOMEM(tp->ctx, "dl_backward", "the gradient of leaf %s (%zu bytes): %s", DL_SHAPESTR(x),
             (size_t)x->numel * dl_dtype_size(x->dtype), dl_ctx_message(x->ctx));
  x->grad = dl__tape_grad_new(tp, x, 0);
  return x->grad;
}
/* dl_tape_grad for a rule whose writer adds every element of the gradient
 * in one pass: an intermediate's gradient that dl_backward made for this
 * node may come back flagged DL_TENSOR__UNZEROED (its buffer holds old
 * values). The rule then overwrites it (=, not +=) and clears the flag, or
 * hands it to a function that zeroes it as it goes (dl__ew_run zeroes each
 * piece just before adding into it, while the piece is in L1): no pass of
 * its own over the buffer. Whoever clears the flag has zeroed or written
 * every element; a rule that takes one input's gradient twice (x op x)
 * passes both to one such function, which handles the flag once. */
DL_API dl_tensor *dl__tape_grad_w(dl_tape *tp, dl_tensor *x);
/* For a writer that covers every element of g (from dl__tape_grad_w): 1 when
 * g is not zeroed yet, so that the writer overwrites it (the flag is then
 * cleared), 0 when it adds to it. */
DL_API int dl__grad_take(dl_tensor *g) {
  if (!g || !(g->flags & DL_TENSOR__UNZEROED)) return 0;
  g->flags &= ~(unsigned)DL_TENSOR__UNZEROED;
  return 1;
}
DL_API dl_tensor *dl__tape_grad_w(dl_tape *tp, dl_tensor *x) {
  if (x && x->node && x->grad && (x->flags & DL_TENSOR_REQUIRES_GRAD)) {
    x->flags &= ~(unsigned)DL_TENSOR__GRAD_UNASKED;
    return x->grad;
  }
  return dl_tape_grad(tp, x);
}

/* An empty row-sparse gradient for the 2-d tensor x, attached to it (x's
 * allocator); x's own when it has one. NULL when out of memory. */
DL_API dl_sgrad *dl_sgrad_attach(dl_tensor *x) {
  dl_sgrad *s;
  int64_t r;
  if (x->sgrad) return (dl_sgrad *)x->sgrad;
  s = (dl_sgrad *)dl_alloc(x->ctx, sizeof *s);
  if (s) {
    memset(s, 0, sizeof *s);
    s->ctx = x->ctx;
    s->dtype = x->dtype;
    s->device = x->device;
    s->nrows = x->shape[0];
    s->width = x->shape[1];
    s->slot = (int64_t *)dl_alloc(x->ctx, sizeof(int64_t) * (size_t)(s->nrows ? s->nrows : 1));
  }
  if (!s || !s->slot) {
    dl_sgrad_free(s);
    return NULL;
  }
  for (r = 0; r < s->nrows; r++) s->slot[r] = -1;
  x->sgrad = s;
  return s;
}

/* The row-sparse gradient of a 2-d leaf x [rows, width] (embedding weights),
 * made on first use (dl_tensor_make's allocator; freed with x when x is owned,
 * otherwise with dl_sgrad_free(x->sgrad)). NULL when x needs no gradient. */
DL_API dl_sgrad *dl_tape_sgrad(dl_tape *tp, dl_tensor *x) {
  dl_sgrad *s;
  if (!x || !(x->flags & DL_TENSOR_REQUIRES_GRAD)) return NULL;
  if (x->node || x->ndim != 2)
    DL_PANIC(tp->ctx, "dl_tape_sgrad", "row-sparse gradients are for 2-d leaf tensors, not %s%s",
             DL_SHAPESTR(x), x->node ? " (an op's output)" : "");
  if (x->sgrad) return (dl_sgrad *)x->sgrad;
  if (!(s = dl_sgrad_attach(x)))
    DL_NOMEM(tp->ctx, "dl_tape_sgrad", "the sparse gradient of %s: %s", DL_SHAPESTR(x), dl_ctx_message(x->ctx));
  return s;
}
/* Pointer to the values of `row` in s, adding the row (zeroed) when it is not
 * there yet. Grows by doubling (the allocator is called only while the set of
 * touched rows exceeds every earlier step's). */
DL_API void *dl_sgrad_row(dl_sgrad *s, int64_t row) {
  size_t es = dl_dtype_size(s->dtype), rowb = es * (size_t)s->width;
  int64_t k = s->slot[row];
  if (s->device != DL_CPU)
    DL_PANIC(s->ctx, "dl_sgrad_row", "the sparse gradient's rows are on the GPU: no host pointer to a row");
  if (k < 0) {
    if (s->nnz == s->cap) {
      int64_t cap = s->cap ? 2 * s->cap : 16;
      int64_t *rows;
      void *vals;
      if (cap > s->nrows) cap = s->nrows;
      rows = (int64_t *)dl_alloc(s->ctx, sizeof(int64_t) * (size_t)cap);
      vals = dl_alloc(s->ctx, rowb * (size_t)cap + 1);
      if (!rows || !vals) {
        dl_free(s->ctx, rows);
        dl_free(s->ctx, vals);
        DL_NOMEM(s->ctx, "dl_sgrad_row", "cannot grow a sparse gradient to %lld rows of %zu bytes", (long long)cap,
                 rowb);
      }
      if (s->nnz) {
        memcpy(rows, s->rows, sizeof(int64_t) * (size_t)s->nnz);
        memcpy(vals, s->values, rowb * (size_t)s->nnz);
      }
      dl_free(s->ctx, s->rows);
      dl_free(s->ctx, s->values);
      s->rows = rows;
      s->values = vals;
      s->cap = cap;
    }
    k = s->nnz++;
    s->slot[row] = k;
    s->rows[k] = row;
    memset((char *)s->values + rowb * (size_t)k, 0, rowb);
  }
  return (char *)s->values + rowb * (size_t)k;
}
/* dense += the sparse rows (dense [nrows, width], contiguous, same dtype). */
DL_API void dl_sgrad_add_to(const dl_sgrad *s, dl_tensor *dense) {
  int64_t k, j;
#ifdef DL_USE_CUDA
  if (s->device == DL_CUDA || dense->device == DL_CUDA) {
    if (s->device != dense->device || !dl_tensor_is_contiguous(dense))
      DL_PANIC(s->ctx, "dl_sgrad_add_to", "the sparse gradient and %s must be on one device (and it contiguous)",
               DL_SHAPESTR(dense));
    if (s->nnz)
      dl__gpu_ok(dense, "dl_sgrad_add_to", dlg_rows_scatter(dl__gpu_h(dense, "dl_sgrad_add_to"), (int)s->dtype,
                                                            dense->data, s->nrows, s->width, s->rows, s->nnz,
                                                            s->values));
    return;
  }
#endif
  for (k = 0; k < s->nnz; k++) {
    if (s->dtype == DL_F32) {
      float *d = (float *)dense->data + s->rows[k] * s->width;
      const float *v = (const float *)s->values + k * s->width;
      for (j = 0; j < s->width; j++) d[j] += v[j];
    } else {
      double *d = (double *)dense->data + s->rows[k] * s->width;
      const double *v = (const double *)s->values + k * s->width;
      for (j = 0; j < s->width; j++) d[j] += v[j];
    }
  }
}

/* >>backward --------------------------------------------------------------- */

/* The node that recorded t on tp (the newest one), or NULL. */
DL_API dl_node *dl_tape_node_of(const dl_tape *tp, const dl_tensor *t) {
  dl_node *n;
  for (n = tp->last; n; n = n->prev)
    if (n->out == t) return n;
  return NULL;
}

DL_API void dl__backward_walk(dl_tape *tp, dl_tensor *loss, const dl_tensor *seed, const char *who);
/* dl_hvp's tangent rule of a node whose rule is linear in out->grad alone
 * (DL_NODE_HVP_LINEAR): the rule again, with out->grad and the inputs'
 * gradients swapped for their tangents (an input without a gradient is
 * held out), so d(gx)/dv = rule(d(gy)/dv). */
DL_API void dl__hvp_rerun(dl_tape *tp, dl_node *n) {
  const int nin = n->nin;
  dl_tensor *go = n->out->grad, **g = (dl_tensor **)dl_tape_scratch(tp, n->op, sizeof(dl_tensor *) * (size_t)(nin + 1));
  unsigned *fl = (unsigned *)dl_tape_scratch(tp, n->op, sizeof(unsigned) * (size_t)(nin + 1));
  int k, j;
  for (k = 0; k < nin; k++) {
    dl_tensor *x = n->in[k];
    g[k] = NULL;
    fl[k] = 0;
    if (!x) continue;
    for (j = 0; j < k && n->in[j] != x; j++) {}
    if (j < k) continue; /* the same tensor twice: swapped once */
    g[k] = x->grad;
    fl[k] = x->flags;
    if (x->grad && x->grad->tangent) x->grad = x->grad->tangent;
    else x->flags &= ~(unsigned)DL_TENSOR_REQUIRES_GRAD;
  }
  n->out->grad = go->tangent;
  tp->hvp = 0;
  n->backward(tp, n);
  tp->hvp = 1;
  n->out->grad = go;
  for (k = 0; k < nin; k++) {
    dl_tensor *x = n->in[k];
    for (j = 0; j < k && x && n->in[j] != x; j++) {}
    if (!x || j < k) continue;
    x->grad = g[k];
    x->flags = (x->flags & DL_TENSOR_DENSE_GRAD) | fl[k];
  }
}
/* Back-propagate from `loss`: with seed NULL, loss must hold one element and
 * its gradient is 1; otherwise seed (loss's shape and dtype) is the gradient
 * of some scalar with respect to loss. Accumulates into the leaves' .grad
 * (and row-sparse gradients). Can be called again for another loss recorded
 * on the same tape before the rewind (gradients add up). */
DL_API void dl_backward(dl_tape *tp, dl_tensor *loss, const dl_tensor *seed) {
  tp->hvp = 0;
  dl__backward_walk(tp, loss, seed, "dl_backward");
}
/* Hessian-vector products (forward over reverse): dl_backward that also
 * carries each gradient's tangent. With tangents v set on the parameters
 * (dl_set_tangent) before the forward pass, every tensor of the pass has
 * its tangent J v; this walk then propagates, with each gradient g, its
 * derivative along v: a leaf that requires a gradient ends with
 * leaf->grad->tangent += H v, the Hessian of the loss (of sum(loss * seed))
 * times v, next to leaf->grad += the gradient. The tangent of a leaf's
 * gradient is allocated on the first call (owned by the gradient, freed
 * with it, zeroed by dl_zero_grad). Element-wise ops (the list's and a
 * user's DL_DEFINE_OP) get their second-order rule from the same
 * expression on nested dual numbers (dl_dual2); every other op of the
 * library has its own rule (flag DL_NODE_HVP, or DL_NODE_HVP_LINEAR for a
 * rule linear in the output's gradient). A node without one (a user's
 * custom op) panics naming it. On the host only, for now. */
DL_API void dl_hvp(dl_tape *tp, dl_tensor *loss, const dl_tensor *seed) {
  if (tp->gpu || loss->device != DL_CPU)
    DL_PANIC(tp->ctx, "dl_hvp", "Hessian-vector products run on the host: %s is on a device tape",
             DL_SHAPESTR(loss));
  tp->hvp = 1;
  dl__backward_walk(tp, loss, seed, "dl_hvp");
  tp->hvp = 0;
}
/* Frees the H v that dl_hvp allocated for leaf x (x->grad->tangent) when x's
 * gradient is memory the library does not free (dl_requires_grad_with);
 * dl_tensor_free and dl_model_free release it themselves. */
DL_API void dl_hvp_release(dl_tensor *x) {
  if (x && x->grad && (x->grad->flags & DL_TENSOR_OWNS_TANGENT)) {
    dl_tensor_free(x->grad->tangent);
    x->grad->tangent = NULL;
    x->grad->flags &= ~(unsigned)DL_TENSOR_OWNS_TANGENT;
  }
}
DL_API void dl__backward_walk(dl_tape *tp, dl_tensor *loss, const dl_tensor *seed, const char *who) {
  dl_node *n, *from = dl_tape_node_of(tp, loss);
  dl_tensor *g;
  if (!from) {
    if (tp->nodes == 0 && tp->rewinds > 0) /* rewound, nothing recorded since */
      DL_PANIC(tp->ctx, who,
               "the tape was rewound after this loss was computed: its history is gone "
               "(backward twice across a rewind?); run the forward pass again");
    if (loss->flags & DL_TENSOR_REQUIRES_GRAD && !loss->node) {
      /* a leaf is its own loss: d loss / d loss */
      dl_tensor *lg = dl_tape_grad(tp, loss);
      if (seed) dl_add_into(lg, lg, seed); /* (functions of the op list: no DL_ASSIGN text here) */
      else dl_add_scalar_into(lg, lg, 1.0);
      return;
    }
    DL_PANIC(tp->ctx, who,
             "loss %s was not recorded on this tape (made under no-grad, from inputs that "
             "require no gradient - a dl_model's parameters require theirs from dl_model_pack "
             "or the optimizer's make on - or on another tape)", DL_SHAPESTR(loss));
  }
  if (!seed && loss->numel != 1)
    DL_PANIC(tp->ctx, who,
             "loss %s is not a scalar: pass a seed gradient of the same shape", DL_SHAPESTR(loss));
  if (seed) dl__check_same(seed, loss, "dl_backward (seed)", 1);
  /* gradients of intermediates are per walk */
  for (n = from; n; n = n->prev) n->out->grad = NULL;
  g = dl_tape_out(tp, "dl_backward", loss->dtype, loss->ndim, loss->shape);
  if (seed) dl_tensor_copy(g, seed);
  else dl_tensor_fill(g, 1.0);
  loss->grad = g;
  if (tp->hvp) g->tangent = dl_tape_zeros(tp, who, loss->dtype, loss->ndim, loss->shape); /* the seed is constant */
  for (n = from; n; n = n->prev) {
    if (n->out->grad) {
      dl_arena_mark m;
      int k;
      if (tp->hvp && !(n->flags & (DL_NODE_HVP | DL_NODE_HVP_LINEAR))) {
        tp->hvp = 0;
        DL_PANIC(tp->ctx, who, "%s has no second-order rule yet: its backward does not propagate tangents "
                 "(the library's ops have one; a custom op does not)", n->op);
      }
      /* the inputs' gradients first, so that the rule's scratch after them
       * can go when it returns; one the rule never asks for (where's
       * condition, a custom op's mask) is taken back, so that no gradient
       * flows there, as if it had not been made */
      for (k = 0; k < n->nin; k++) {
        dl_tensor *x = n->in[k];
        if (x && x->node && (x->flags & DL_TENSOR_REQUIRES_GRAD) && !x->grad) {
          x->grad = dl__tape_grad_new(tp, x, 1);
          x->flags |= DL_TENSOR__GRAD_UNASKED;
        }
      }
      m = dl_arena_get_mark(&tp->arena);
      n->backward(tp, n);
      if (tp->hvp && (n->flags & DL_NODE_HVP_LINEAR)) dl__hvp_rerun(tp, n);
      if (!(n->flags & DL_NODE_KEEP_SCRATCH)) dl_arena_rewind(&tp->arena, m);
      for (k = 0; k < n->nin; k++) {
        dl_tensor *x = n->in[k];
        if (x && (x->flags & DL_TENSOR__GRAD_UNASKED)) {
          x->flags &= ~(unsigned)DL_TENSOR__GRAD_UNASKED;
          dl__tape_gfree_push(tp, x->grad);
          x->grad = NULL;
        }
      }
    }
    if (tp->on_node) tp->on_node(tp, n, tp->on_node_user);
    if (n->out->grad && !(n->out->flags & DL_TENSOR_KEEP_GRAD) && !(n->flags & DL_NODE_KEEP_OUT_GRAD) &&
        n->out != loss) {
      dl__tape_gfree_push(tp, n->out->grad);
      n->out->grad = NULL;
    }
  }
  for (n = from; n; n = n->prev)
    if (!(n->out->flags & DL_TENSOR_KEEP_GRAD)) n->out->grad = NULL;
  tp->backwards++;
}

/* >>forward mode ----------------------------------------------------------- */

/* Attach tangent v to x (same shape and dtype; v is borrowed); NULL removes it. */
DL_API void dl_set_tangent(dl_tensor *x, dl_tensor *v) {
  if (v) dl__check_same(v, x, "dl_set_tangent", 1);
  x->tangent = v;
}
/* Whether any input carries a tangent. */
DL_API int dl_tangent_wants(int nin, dl_tensor *const *in) {
  int k;
  for (k = 0; k < nin; k++)
    if (in[k] && in[k]->tangent) return 1;
  return 0;
}
/* A zeroed tangent for out in the arena, attached to it. */
DL_API dl_tensor *dl_tape_tangent(dl_tape *tp, dl_tensor *out) {
  out->tangent = dl_tape_zeros(tp, "forward mode", out->dtype, out->ndim, out->shape);
  return out->tangent;
}
/* x's tangent, or a 0-d zero of x's dtype (broadcasts anywhere) when it has none. */
DL_API dl_tensor *dl_tangent_or_zero(dl_tape *tp, const dl_tensor *x) {
  if (x->tangent) return x->tangent;
  return dl_tape_zeros(tp, "forward mode", x->dtype, 0, NULL);
}

/* >>custom ops ------------------------------------------------------------- */

/* A user's op: forward computes out (allocated by dl_t_custom with the shape
 * given there, dtype of in[0]) from the inputs; backward accumulates into
 * dl_tape_grad(tp, in[k]) (or dl_tape_sgrad) given gy = d loss / d out;
 * jvp (optional) sets tout from the inputs' tangents tin[k] (NULL = zero).
 * An input with a tangent and no jvp rule panics. */
typedef struct dl_custom_op {
  const char *name; /* in panics and traces */
  /* forward(out, in, nin, user): fill out from the inputs */
  void (*forward)(dl_tensor *out, dl_tensor *const *in, int nin, void *user);
  /* backward(tp, gy, out, in, nin, user): accumulate into dl_tape_grad(tp,
   * in[k]) (NULL: no gradient wanted) */
  void (*backward)(dl_tape *tp, const dl_tensor *gy, const dl_tensor *out, dl_tensor *const *in,
                   int nin, void *user);
  /* jvp(tout, out, in, tin, nin, user): forward mode, tout from the
   * tangents tin[k] (NULL: zero); optional */
  void (*jvp)(dl_tensor *tout, const dl_tensor *out, dl_tensor *const *in,
              dl_tensor *const *tin, int nin, void *user);
} dl_custom_op;

DL_API void dl__custom_backward(dl_tape *tp, dl_node *n) {
  const dl_custom_op *op = (const dl_custom_op *)n->cfn;
  op->backward(tp, n->out->grad, n->out, n->in, n->nin, n->user);
}
/* dl_t_custom without its host-only check: for the library's own ops whose
 * callbacks have device branches (dl_t_embedding). */
DL_API dl_tensor *dl__t_custom(dl_tape *tp, const dl_custom_op *op, void *user, int nin,
                               dl_tensor *const *in, int ndim, const int64_t *shape) {
  dl_tensor *out;
  dl_node *n;
  if (nin < 1 || !in[0]) DL_PANIC(tp->ctx, op->name, "a custom op needs at least one input");
  out = dl_tape_out(tp, op->name, in[0]->dtype, ndim, shape);
  op->forward(out, in, nin, user);
  if (dl_tangent_wants(nin, in)) {
    dl_tensor *tin[16];
    int k;
    if (!op->jvp) DL_PANIC(tp->ctx, op->name, "an input carries a tangent but the op has no jvp rule");
    if (nin > 16) DL_PANIC(tp->ctx, op->name, "forward mode takes at most 16 inputs, not %d", nin);
    for (k = 0; k < nin; k++) tin[k] = in[k] ? in[k]->tangent : NULL;
    op->jvp(dl_tape_tangent(tp, out), out, in, tin, nin, user);
  }
  if (!op->backward) return out;
  n = dl_tape_record_n(tp, op->name, dl__custom_backward, out, nin, in);
  if (n) {
    n->cfn = op;
    n->user = user;
    n->flags |= DL_NODE_KEEP_SCRATCH;
  }
  return out;
}
/* out = op(in[0..nin)) with out of the given shape; recorded for backward. */
DL_API dl_tensor *dl_t_custom(dl_tape *tp, const dl_custom_op *op, void *user, int nin,
                              dl_tensor *const *in, int ndim, const int64_t *shape) {
  if (nin >= 1 && in[0] && (tp->gpu || in[0]->device != DL_CPU)) /* its callbacks are host code over host memory */
    DL_PANIC(tp->ctx, op->name, "custom ops run on the host: %s %s", DL_SHAPESTR(in[0]),
             tp->gpu ? "is on a device tape" : "is on the GPU");
  return dl__t_custom(tp, op, user, nin, in, ndim, shape);
}

/* >>gradcheck -------------------------------------------------------------- */

/* The function under test: builds its output from in[] on the tape. */
typedef dl_tensor *(*dl_gradcheck_fn)(dl_tape *tp, dl_tensor **in, void *user);

/* What dl_gradcheck found: the worst relative errors (overall, reverse
 * mode, forward mode), where the worst gradient error was, and how many
 * elements were compared. */
typedef struct dl_gradcheck_result {
  double max_err;        /* worst |analytic - numeric| / max(1, |numeric|) over all checks */
  double grad_err;       /* the same, reverse mode only */
  double jvp_err;        /* the same, forward mode only */
  int input;             /* where grad_err was reached: input ... */
  int64_t index;         /* ... and element (row-major) */
  double analytic, numeric; /* the two values compared there */
  int64_t checked;       /* gradient elements compared */
} dl_gradcheck_result;

DL_API double dl__sum_weighted(const dl_tensor *y, const dl_tensor *w) {
  double s = 0;
  int64_t i;
  for (i = 0; i < y->numel; i++) s += dl__get_at(y, dl__offset_of_linear(y, i)) * dl__get_at(w, i);
  return s;
}

/* The start of dl_gradcheck and dl_hvpcheck (`who`): res cleared, at most
 * 16 inputs, those that require a gradient in f64, tp and keep made. */
DL_API void dl__check_begin(dl_ctx *ctx, const char *who, int nin, dl_tensor **in, dl_gradcheck_result *res,
                            dl_tape *tp, dl_arena *keep) {
  int k;
  memset(res, 0, sizeof *res);
  res->input = -1;
  if (nin > 16) DL_PANIC(ctx, who, "at most 16 inputs, not %d", nin);
  for (k = 0; k < nin; k++)
    if ((in[k]->flags & DL_TENSOR_REQUIRES_GRAD) && in[k]->dtype != DL_F64)
      DL_PANIC(ctx, who, "input %d is %s: %s runs in f64", k, DL_SHAPESTR(in[k]), who + 3);
  if (dl_tape_init(tp, ctx, 0) != DL_OK || dl_arena_init(keep, ctx, 0, 1) != DL_OK) DL_PANIC(ctx, who, "out of memory");
}
/* x += a v element by element (x may be strided, v contiguous of x's shape):
 * plain loops, so that the library's own code expands no DL_ASSIGN. */
DL_API void dl__check_axpy(dl_tensor *x, double a, const dl_tensor *v) {
  int64_t i;
  for (i = 0; i < x->numel; i++) {
    const int64_t o = dl__offset_of_linear(x, i);
    dl__set_at(x, o, dl__get_at(x, o) + a * dl__get_at(v, i));
  }
}
/* One compared element (input k, element i): the error |a - num| /
 * max(1, |num|) (NaN: the worst) into res's count, worst and its place. */
DL_API void dl__check_note(dl_gradcheck_result *res, int k, int64_t i, double a, double num) {
  double err = fabs(a - num) / (fabs(num) > 1 ? fabs(num) : 1);
  if (!(err <= HUGE_VAL)) err = HUGE_VAL; /* NaN fails */
  res->checked++;
  if (err > res->grad_err || res->input < 0) {
    if (err > res->grad_err) res->grad_err = err;
    res->input = k;
    res->index = i;
    res->analytic = a;
    res->numeric = num;
  }
}

/* Check f at the f64 inputs in[0..nin): for every input flagged with
 * DL_TENSOR_REQUIRES_GRAD (set it with dl_requires_grad) the tape's gradient
 * of L = sum(f(in) * w), w random, is compared element by element with
 * central differences of step eps; and the forward-mode tangent of f for a
 * random direction v is compared with (L(x + eps v) - L(x - eps v)) / 2eps
 * along w. Inputs without the flag (labels, indices) are held fixed.
 * Returns 1 when every error is <= tol (relative to max(1, |numeric|)).
 * Inputs may be strided views; the inputs' .grad are zeroed and left holding
 * the analytic gradient. */
DL_API int dl_gradcheck(dl_ctx *ctx, dl_gradcheck_fn f, void *user, int nin, dl_tensor **in,
                        double eps, double tol, dl_gradcheck_result *res) {
  dl_tape tp;
  dl_tensor *y, *w;
  dl_tensor *tang[16];
  dl_rng rng = dl_rng_make(0x9e3779b97f4a7c15ull);
  dl_arena keep;
  double jvp_dot, lp, lm;
  int k;
  int64_t i;
  dl__check_begin(ctx, "dl_gradcheck", nin, in, res, &tp, &keep);
  /* reverse mode */
  y = f(&tp, in, user);
  w = dl_tensor_new(&keep, y->dtype, y->ndim, y->shape);
  if (!w) DL_PANIC(ctx, "dl_gradcheck", "out of memory");
  dl_tensor_rand_uniform(w, &rng, -1.0, 1.0);
  for (k = 0; k < nin; k++)
    if (in[k]->flags & DL_TENSOR_REQUIRES_GRAD) {
      if (!in[k]->grad && dl_requires_grad(in[k]) != DL_OK) DL_PANIC(ctx, "dl_gradcheck", "out of memory");
      dl_zero_grad(in[k]);
    }
  if (y->flags & DL_TENSOR_REQUIRES_GRAD) dl_backward(&tp, y, w);
  for (k = 0; k < nin; k++)
    if (in[k]->sgrad) { /* the sparse rows join the dense gradient */
      dl_sgrad_add_to((dl_sgrad *)in[k]->sgrad, in[k]->grad);
      dl_sgrad_clear((dl_sgrad *)in[k]->sgrad);
    }
  dl_tape_rewind(&tp);
  /* central differences, element by element */
  dl_no_grad_begin(&tp);
  for (k = 0; k < nin; k++) {
    dl_tensor *x = in[k];
    if (!(x->flags & DL_TENSOR_REQUIRES_GRAD)) continue;
    for (i = 0; i < x->numel; i++) {
      int64_t off = dl__offset_of_linear(x, i);
      double x0 = dl__get_at(x, off), a = dl__get_at(x->grad, i);
      dl__set_at(x, off, x0 + eps);
      lp = dl__sum_weighted(f(&tp, in, user), w);
      dl_tape_rewind(&tp);
      dl__set_at(x, off, x0 - eps);
      lm = dl__sum_weighted(f(&tp, in, user), w);
      dl_tape_rewind(&tp);
      dl__set_at(x, off, x0);
      dl__check_note(res, k, i, a, (lp - lm) / (2 * eps));
    }
  }
  /* forward mode: tangent of f along random v, against the directional difference */
  for (k = 0; k < nin; k++) {
    tang[k] = NULL;
    if (!(in[k]->flags & DL_TENSOR_REQUIRES_GRAD)) continue;
    tang[k] = dl_tensor_new(&keep, in[k]->dtype, in[k]->ndim, in[k]->shape);
    if (!tang[k]) DL_PANIC(ctx, "dl_gradcheck", "out of memory");
    dl_tensor_rand_uniform(tang[k], &rng, -1.0, 1.0);
    dl_set_tangent(in[k], tang[k]);
  }
  y = f(&tp, in, user);
  jvp_dot = y->tangent ? dl__sum_weighted(y->tangent, w) : 0.0;
  dl_tape_rewind(&tp);
  for (k = 0; k < nin; k++) dl_set_tangent(in[k], NULL);
  {
    double num, err;
    for (k = 0; k < nin; k++)
      if (tang[k]) dl__check_axpy(in[k], eps, tang[k]);
    lp = dl__sum_weighted(f(&tp, in, user), w);
    dl_tape_rewind(&tp);
    for (k = 0; k < nin; k++)
      if (tang[k]) dl__check_axpy(in[k], -2 * eps, tang[k]);
    lm = dl__sum_weighted(f(&tp, in, user), w);
    dl_tape_rewind(&tp);
    for (k = 0; k < nin; k++)
      if (tang[k]) dl__check_axpy(in[k], eps, tang[k]);
    num = (lp - lm) / (2 * eps);
    err = fabs(jvp_dot - num) / (fabs(num) > 1 ? fabs(num) : 1);
    res->jvp_err = err <= HUGE_VAL ? err : HUGE_VAL;
  }
  dl_no_grad_end(&tp);
  res->max_err = res->grad_err > res->jvp_err ? res->grad_err : res->jvp_err;
  dl_tape_free(&tp);
  dl_arena_free(&keep);
  return res->max_err <= tol;
}

/* Check Hessian-vector products (dl_hvp) of f at the f64 inputs in[0..nin):
 * for a random direction v over the inputs flagged with
 * DL_TENSOR_REQUIRES_GRAD and a random seed w, H v of L = sum(f(in) * w)
 * (each input's grad->tangent after one dl_hvp) against central
 * differences of the gradient, (g(x + eps v) - g(x - eps v)) / 2 eps, from
 * dl_backward, element by element. res->grad_err (and max_err) is the worst
 * |Hv - numeric| / max(1, |numeric|); jvp_err is 0. Returns 1 when it is
 * <= tol. The inputs' .grad and their tangents are left holding the last
 * values computed. */
DL_API int dl_hvpcheck(dl_ctx *ctx, dl_gradcheck_fn f, void *user, int nin, dl_tensor **in, double eps, double tol,
                       dl_gradcheck_result *res) {
  dl_tape tp;
  dl_tensor *y, *w = NULL, *v[16], *hv[16], *gp[16];
  dl_rng rng = dl_rng_make(0x51ed270b27a5c3f1ull);
  dl_arena keep;
  int k, side;
  int64_t i;
  dl__check_begin(ctx, "dl_hvpcheck", nin, in, res, &tp, &keep);
  for (k = 0; k < nin; k++) {
    v[k] = hv[k] = gp[k] = NULL;
    if (!(in[k]->flags & DL_TENSOR_REQUIRES_GRAD)) continue;
    v[k] = dl_tensor_new(&keep, DL_F64, in[k]->ndim, in[k]->shape);
    hv[k] = dl_tensor_new(&keep, DL_F64, in[k]->ndim, in[k]->shape);
    gp[k] = dl_tensor_new(&keep, DL_F64, in[k]->ndim, in[k]->shape);
    if (!v[k] || !hv[k] || !gp[k] || (!in[k]->grad && dl_requires_grad(in[k]) != DL_OK))
      DL_PANIC(ctx, "dl_hvpcheck", "out of memory");
    dl_tensor_rand_uniform(v[k], &rng, -1.0, 1.0);
    dl_zero_grad(in[k]);
    dl_set_tangent(in[k], v[k]);
  }
  /* H v by forward over reverse */
  y = f(&tp, in, user);
  w = dl_tensor_new(&keep, y->dtype, y->ndim, y->shape);
  if (!w) DL_PANIC(ctx, "dl_hvpcheck", "out of memory");
  dl_tensor_rand_uniform(w, &rng, -1.0, 1.0);
  if (y->flags & DL_TENSOR_REQUIRES_GRAD) dl_hvp(&tp, y, w);
  dl_tape_rewind(&tp);
  for (k = 0; k < nin; k++)
    if (v[k]) {
      dl_set_tangent(in[k], NULL);
      if (in[k]->grad->tangent) dl_tensor_copy(hv[k], in[k]->grad->tangent);
      else dl_tensor_fill(hv[k], 0.0);
    }
  /* central differences of the gradient along v */
  for (side = 0; side < 2; side++) {
    const double step = side ? -2 * eps : eps;
    for (k = 0; k < nin; k++)
      if (v[k]) {
        dl__check_axpy(in[k], step, v[k]);
        dl_zero_grad(in[k]);
      }
    y = f(&tp, in, user);
    if (y->flags & DL_TENSOR_REQUIRES_GRAD) dl_backward(&tp, y, w);
    dl_tape_rewind(&tp);
    for (k = 0; k < nin; k++)
      if (v[k]) {
        if (in[k]->sgrad) {
          dl_sgrad_add_to((dl_sgrad *)in[k]->sgrad, in[k]->grad);
          dl_sgrad_clear((dl_sgrad *)in[k]->sgrad);
        }
        if (side == 0) dl_tensor_copy(gp[k], in[k]->grad);
        else
          for (i = 0; i < gp[k]->numel; i++)
            dl_f64(gp[k])[i] = (dl_f64(gp[k])[i] - dl__get_at(in[k]->grad, i)) / (2 * eps);
      }
  }
  for (k = 0; k < nin; k++)
    if (v[k]) dl__check_axpy(in[k], eps, v[k]);
  for (k = 0; k < nin; k++) {
    if (!v[k]) continue;
    for (i = 0; i < v[k]->numel; i++) dl__check_note(res, k, i, dl_f64(hv[k])[i], dl_f64(gp[k])[i]);
  }
  res->max_err = res->grad_err;
  dl_tape_free(&tp);
  dl_arena_free(&keep);
  return res->max_err <= tol;
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_TAPE_H */
