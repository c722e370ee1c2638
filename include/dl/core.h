/* dl/core.h - status codes, error reporting, the context, allocation, arenas,
 * the counter-based RNG, dtypes, denormal control.
 *
 * The context (dl_ctx) holds what other libraries keep in globals: allocator
 * hooks, the panic handler, the log hook, the last error's message, thread
 * count and the denormal policy. Every function that takes a dl_ctx * accepts
 * NULL, which means "the defaults" (DL_MALLOC/DL_FREE, print to stderr and
 * abort, OpenMP's thread count, flush denormals); NULL keeps no state, so two
 * models in one process never interfere.
 *
 * Two kinds of failure:
 *   - programmer errors (shape mismatch, wrong dtype, bad argument) call the
 *     panic handler with the operation, the shapes and the source location;
 *     the default prints "dl: <op>: <message> (file:line)" and aborts. A
 *     handler that returns is followed by abort(); tests leave with longjmp.
 *   - failures the caller must handle (out of memory, I/O, bad data) return a
 *     dl_status (or NULL) and leave a readable message in ctx->message.
 * An op (dl_t_*, a layer's forward, dl_backward) returns a tensor, not a
 * status; when its tape's arena (or the device, or a gradient) cannot grow,
 * it sets DL_ERR_NOMEM and the message in ctx, then leaves through the
 * recovery point the program gave with dl_ctx_on_nomem (a longjmp, as
 * libpng's errors do); with none it panics. Library functions that return a
 * status and run ops (dl_dist_train_step, dl_dist_evaluate, dl_model_summary)
 * set their own point, undo what they changed and return DL_ERR_NOMEM.
 */
#ifndef DL_CORE_H
#define DL_CORE_H

#include "config.h"
DL__HEADER_BEGIN
#include <setjmp.h> /* dl_ctx_on_nomem */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h> /* abort (the default panic), also with the caller's DL_MALLOC hooks */
#include <string.h>
#include <math.h>
#include <time.h> /* clock: the team guard */

#ifdef __cplusplus
extern "C" {
#endif

/* >>status ----------------------------------------------------------------- */

/* One table of (id, message): the enum and dl_status_str come from it. */
#define DL__STATUS_LIST(X)                                                    \
  X(DL_OK, "ok")                                                              \
  X(DL_ERR_NOMEM, "out of memory")                                            \
  X(DL_ERR_OVERFLOW, "size overflow")                                         \
  X(DL_ERR_IO, "input/output error")                                          \
  X(DL_ERR_FORMAT, "bad or corrupt data")                                     \
  X(DL_ERR_TRUNCATED, "truncated data")                                       \
  X(DL_ERR_ARG, "invalid argument")                                           \
  X(DL_ERR_SHAPE, "shape mismatch")                                           \
  X(DL_ERR_DTYPE, "dtype mismatch")                                           \
  X(DL_ERR_UNSUPPORTED, "unsupported")                                        \
  X(DL_ERR_NO_DEVICE, "no such device")                                       \
  X(DL_ERR_COMM, "communication failure")

/* Status codes: DL_OK or the kind of failure (out of memory, size overflow,
 * I/O, bad or truncated data, bad argument, shape or dtype mismatch,
 * unsupported, no device, communication); dl_status_str gives the text. */
typedef enum dl_status {
#define DL__X(id, msg) id,
  DL__STATUS_LIST(DL__X)
#undef DL__X
  DL_STATUS_COUNT
} dl_status;

/* Text for a status code; never NULL. */
DL_API const char *dl_status_str(dl_status s) {
  static const char *const names[] = {
#define DL__X(id, msg) msg,
      DL__STATUS_LIST(DL__X)
#undef DL__X
  };
  return ((unsigned)s < (unsigned)DL_STATUS_COUNT) ? names[s] : "unknown status";
}

/* >>dtype ------------------------------------------------------------------ */

/* Element types of tensors: f32, f64, i32, i64, u8, i8, and f16 / bf16
 * (storage in files only: io.h converts them). */
typedef enum dl_dtype {
  DL_F32 = 0, DL_F64, DL_I32, DL_I64, DL_U8, DL_I8, DL_F16, DL_BF16,
  DL_DTYPE_COUNT
} dl_dtype;

/* Bytes per element; 0 for an invalid dtype. */
DL_API size_t dl_dtype_size(dl_dtype d) {
  static const unsigned char sz[] = {4, 8, 4, 8, 1, 1, 2, 2};
  return ((unsigned)d < (unsigned)DL_DTYPE_COUNT) ? sz[d] : 0;
}
/* Short name ("f32", "i64", ...); "?" for an invalid dtype. */
DL_API const char *dl_dtype_name(dl_dtype d) {
  static const char *const nm[] = {"f32", "f64", "i32", "i64", "u8", "i8", "f16", "bf16"};
  return ((unsigned)d < (unsigned)DL_DTYPE_COUNT) ? nm[d] : "?";
}

/* >>context ---------------------------------------------------------------- */

/* Run-time allocator: alloc(size, user) and free(ptr, user); realloc is
 * optional (NULL: alloc + copy + free). Zero fields mean DL_MALLOC/DL_FREE. */
typedef struct dl_allocator {
  void *(*alloc)(size_t size, void *user); /* alloc(size, user): size bytes or NULL */
  void *(*realloc)(void *ptr, size_t size, void *user); /* realloc(ptr, size, user); NULL: alloc, copy and free instead */
  void (*free)(void *ptr, void *user); /* free(ptr, user) */
  void *user; /* passed to the three */
} dl_allocator;

/* Panic handler: op is the operation's name ("dl_matmul"), message names the
 * shapes/dtypes involved, file:line is the caller's source location. */
typedef void (*dl_panic_fn)(void *user, const char *op, const char *message,
                            const char *file, int line);
/* Log hook: level 0 = info, 1 = warning. */
typedef void (*dl_log_fn)(void *user, int level, const char *message);

/* dl_ctx_desc: zero fields are defaults.
 *   allocator          {0}: DL_MALLOC / DL_REALLOC / DL_FREE
 *   panic              NULL: print to stderr, abort()
 *   log                NULL: print to stderr
 *   threads            0: OpenMP's default (omp_get_max_threads), 1 without OpenMP
 *   parallel_threshold 0: DL_PARALLEL_THRESHOLD elements
 *   keep_denormals     0: library loops flush denormals to zero (FTZ/DAZ) on
 *                      every thread they run on, restoring the caller's
 *                      floating-point mode afterwards; 1: leave them alone
 *   conv_algo          DL_CONV_AUTO (0): in builds for AVX2 and FMA, f32 3x3
 *                      convolutions with stride 1, dilation 1, one group,
 *                      at least 16 input and output channels and enough
 *                      work run Winograd's F(2x2, 3x3) (2.25x fewer
 *                      multiply-adds, other rounding: see ops/conv.h), the
 *                      rest im2col + GEMM; DL_CONV_IM2COL: all by im2col;
 *                      DL_CONV_WINOGRAD: every f32 3x3 stride-1 convolution
 *                      of one group by Winograd (in those builds) */
typedef struct dl_ctx_desc {
  dl_allocator allocator; /* {0}: DL_MALLOC / DL_REALLOC / DL_FREE */
  dl_panic_fn panic; /* NULL: print to stderr, abort() */
  void *panic_user; /* passed to panic */
  dl_log_fn log; /* NULL: print to stderr */
  void *log_user; /* passed to log */
  int threads; /* 0: OpenMP's default (1 without OpenMP) */
  int64_t parallel_threshold; /* 0: DL_PARALLEL_THRESHOLD elements */
  int keep_denormals; /* 1: leave denormals alone (0: flush them to zero in library loops) */
  int conv_algo; /* DL_CONV_AUTO (0), DL_CONV_IM2COL or DL_CONV_WINOGRAD: see above */
} dl_ctx_desc;
/* dl_ctx_desc.conv_algo */
enum { DL_CONV_AUTO = 0, DL_CONV_IM2COL = 1, DL_CONV_WINOGRAD = 2 };

/* The team guard's record (see "team guard" below); zero is the initial
 * state. */
typedef struct dl__team_state {
  double until;  /* loops run alone until this omp_get_wtime() */
  double window; /* the last back-off in seconds (0: none) */
  double span0;  /* omp_get_wtime() at the start of the span being judged (0: none) */
  double extra;  /* the members' time in the span's team loops beyond the caller's */
  long cpu0;     /* the process's clock() at span0 */
  double tcpu0;  /* the calling thread's CPU seconds at span0 (dl__thread_cpu; < 0: unknown) */
  int loops;     /* team loops in the span */
  int started;   /* 1 after the ctx's first team loop (which starts threads) */
  double t_start; /* omp_get_wtime() at the end of that first loop */
  double last;   /* omp_get_wtime() at the end of the last team loop */
} dl__team_state;

struct dl_gpu; /* a device (gpu.h) */
/* The context: what other libraries keep in globals (the desc with its
 * defaults, the open GPU, the last failure and its message, the team
 * guard's state, the out-of-memory recovery point). Made by dl_ctx_init;
 * plain memory the caller owns. */
typedef struct dl_ctx {
  dl_ctx_desc desc;      /* as given, with defaults filled in */
  struct dl_gpu *gpu;    /* the device opened on this context (gpu.h's dl_gpu_open), NULL: none */
  dl_status status;      /* last failure reported through this context */
  char message[512];     /* its readable message ("" when none) */
  dl__team_state team;   /* whether fused loops' OpenMP teams pay (expr.h) */
  jmp_buf *nomem;        /* where an op that runs out of memory jumps (dl_ctx_on_nomem); NULL: it panics */
} dl_ctx;

/* Fill *ctx from desc (NULL desc: all defaults). The ctx is plain memory the
 * caller owns: on the stack, static, anywhere; there is nothing to free. */
DL_API void dl_ctx_init(dl_ctx *ctx, const dl_ctx_desc *desc) {
  memset(ctx, 0, sizeof *ctx);
  if (desc) ctx->desc = *desc;
  if (ctx->desc.parallel_threshold <= 0) ctx->desc.parallel_threshold = DL_PARALLEL_THRESHOLD;
  ctx->status = DL_OK;
}

/* Number of threads library loops use under ctx (1 without OpenMP). */
DL_API int dl_ctx_threads(const dl_ctx *ctx) {
#ifdef _OPENMP
  if (ctx && ctx->desc.threads > 0) return ctx->desc.threads;
  return omp_get_max_threads();
#else
  (void)ctx;
  return 1;
#endif
}
/* Elements below which library loops under ctx stay on one thread (the
 * desc's parallel_threshold, else DL_PARALLEL_THRESHOLD). */
DL_API int64_t dl_ctx_parallel_threshold(const dl_ctx *ctx) {
  return (ctx && ctx->desc.parallel_threshold > 0) ? ctx->desc.parallel_threshold
                                                   : (int64_t)DL_PARALLEL_THRESHOLD;
}

/* Record a failure in ctx (if any) and return s. printf-style message. */
DL_API dl_status dl_fail(dl_ctx *ctx, dl_status s, const char *fmt, ...) DL__PRINTF(3, 4);
DL_API dl_status dl_fail(dl_ctx *ctx, dl_status s, const char *fmt, ...) {
  if (ctx) {
    va_list ap;
    va_start(ap, fmt);
    ctx->status = s;
    vsnprintf(ctx->message, sizeof ctx->message, fmt, ap);
    va_end(ap);
  }
  return s;
}
/* The last failure's message under ctx ("" if none or ctx is NULL). */
DL_API const char *dl_ctx_message(const dl_ctx *ctx) { return ctx ? ctx->message : ""; }
/* Forget the last failure. */
DL_API void dl_ctx_clear(dl_ctx *ctx) {
  if (ctx) { ctx->status = DL_OK; ctx->message[0] = 0; }
}

/* Send a formatted message at level (0 information, otherwise a warning) to
 * the ctx's log hook; with none (or a NULL ctx) it goes to stderr as "dl:
 * [warning: ]message" (nowhere under DL_NO_STDIO). */
DL_API void dl_log_msg(const dl_ctx *ctx, int level, const char *fmt, ...) DL__PRINTF(3, 4);
DL_API void dl_log_msg(const dl_ctx *ctx, int level, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (ctx && ctx->desc.log) ctx->desc.log(ctx->desc.log_user, level, buf);
#ifndef DL_NO_STDIO
  else fprintf(stderr, "dl: %s%s\n", level ? "warning: " : "", buf);
#endif
}

/* >>call sites --------------------------------------------------------------
 * The caller's file:line of the public call in progress on this thread. dl.h's
 * last header, dl/site.h, wraps each public op (dl_t_*), dl_model_forward,
 * dl_layer_call and the layer constructors in a macro that enters the site
 * before the call and leaves it after; the outermost call of a nested
 * expression sets it. A panic reports it as the place of the error (the
 * library's own file:line after it), then resets it, as does an op that
 * leaves through the out-of-memory recovery point. Diagnostics read it,
 * nothing else. */
typedef struct dl__site {
  const char *file; /* NULL: no public call in progress */
  int line, depth;
} dl__site;
DL__GLOBAL(DL__TLS dl__site dl__cur_site, DL__ZERO_INIT);
DL__INL void dl__site_enter(const char *file, int line) {
  if (dl__cur_site.depth++ == 0) {
    dl__cur_site.file = file;
    dl__cur_site.line = line;
  }
}
DL__INL void dl__site_leave(void) {
  if (dl__cur_site.depth > 0 && --dl__cur_site.depth == 0) dl__cur_site.file = NULL;
}
DL__INL void dl__site_reset(void) {
  dl__cur_site.depth = 0;
  dl__cur_site.file = NULL;
}
/* For a program that leaves a wrapped call by its own longjmp (out of a
 * Module's forward, say; a panic handler's jump and dl_ctx_on_nomem's are
 * handled): forget the call in progress, or later errors on this thread
 * keep naming that call's line. */
DL_API void dl_site_reset(void) { dl__site_reset(); }

/* >>panic ------------------------------------------------------------------ */

/* Report a programmer error and do not return. Use DL_PANIC for the caller's
 * file:line. The message should name the op's operands: shapes and dtypes. */
DL_API DL__NORETURN void dl_panic_at(const dl_ctx *ctx, const char *file, int line,
                                     const char *op, const char *fmt, ...) DL__PRINTF(5, 6);
DL_API DL__NORETURN void dl_panic_at(const dl_ctx *ctx, const char *file, int line,
                                     const char *op, const char *fmt, ...) {
  char msg[1024];
  const char *lib_file = file;
  const int lib_line = line;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (dl__cur_site.file && (dl__cur_site.file != file || dl__cur_site.line != line)) { /* the caller's line first */
    size_t k = strlen(msg);
    file = dl__cur_site.file;
    line = dl__cur_site.line;
    if (k + 1 < sizeof msg) snprintf(msg + k, sizeof msg - k, " [raised at %s:%d]", lib_file, lib_line);
  }
  dl__site_reset(); /* a handler that jumps out leaves no site behind */
  if (ctx && ctx->desc.panic) ctx->desc.panic(ctx->desc.panic_user, op, msg, file, line);
#ifndef DL_NO_STDIO
  fprintf(stderr, "dl: %s: %s (%s:%d)\n", op, msg, file, line);
  fflush(stderr);
#endif
  abort();
}
/* DL_PANIC(ctx, op, fmt, ...): report a programmer error (shape, dtype,
 * argument) of op with this file:line through the ctx's panic handler; does
 * not return. A statement; each argument is evaluated once. */
#define DL_PANIC(ctx, op, ...) dl_panic_at((ctx), __FILE__, __LINE__, (op), __VA_ARGS__)

/* >>out of memory inside an op ----------------------------------------------- */

/* The recovery point for an op that runs out of memory (see the top of this
 * file); returns the previous one, NULL: none (such an op panics). The usual
 * use, in a function that stays active while the ops run (main):
 *
 *   jmp_buf oom;
 *   dl_ctx_on_nomem(&ctx, &oom);
 *   if (setjmp(oom)) {   // an op ran out: DL_ERR_NOMEM, message in ctx
 *     fprintf(stderr, "%s\n", dl_ctx_message(&ctx));
 *     ... free what the program owns, return 1 ...
 *   }
 *
 * The jump leaves the op half done: rewind the tape (dl_tape_rewind) and
 * zero the gradients (dl_model_zero_grad) before another step; parameters
 * and optimizer state are untouched (the update allocates nothing). The
 * usual setjmp rules hold: locals of the setjmp function changed after it
 * and read after the jump must be volatile, and that function must not
 * return while the point is set (set NULL, or the previous one, first).
 * A panic handler that leaves by longjmp (as tests do) out of a function
 * running under dl_nomem_guard skips its restore: set the point again
 * after such a jump. */
DL_API jmp_buf *dl_ctx_on_nomem(dl_ctx *ctx, jmp_buf *jb) {
  jmp_buf *prev = ctx->nomem;
  ctx->nomem = jb;
  return prev;
}
/* Out of memory inside op: DL_ERR_NOMEM and "op: out of memory: <message>"
 * in ctx, then the jump to ctx's recovery point, or a panic without one.
 * Use DL_NOMEM for the caller's file:line. */
DL_API DL__NORETURN void dl_nomem_at(dl_ctx *ctx, const char *file, int line, const char *op, const char *fmt,
                                     ...) DL__PRINTF(5, 6);
DL_API DL__NORETURN void dl_nomem_at(dl_ctx *ctx, const char *file, int line, const char *op, const char *fmt,
                                     ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (ctx) {
    ctx->status = DL_ERR_NOMEM;
    snprintf(ctx->message, sizeof ctx->message, "%s: out of memory: %s", op, msg);
    if (ctx->nomem) {
      dl__site_reset();
      longjmp(*ctx->nomem, 1);
    }
  }
  dl_panic_at(ctx, file, line, op, "out of memory: %s (dl_ctx_on_nomem makes this a status)", msg);
}
/* DL_NOMEM(ctx, op, fmt, ...): leave op through the ctx's out-of-memory
 * recovery point (dl_ctx_on_nomem) with DL_ERR_NOMEM and the message, or
 * panic when there is none; does not return. */
#define DL_NOMEM(ctx, op, ...) dl_nomem_at((ctx), __FILE__, __LINE__, (op), __VA_ARGS__)
/* fn(arg) under a recovery point of its own: DL_OK, or DL_ERR_NOMEM when an
 * op in it ran out of memory (message in ctx); ctx's previous point is back
 * either way. ctx NULL: fn(arg) with none (its ops panic). For library
 * functions that return a status and run ops: they undo what they changed
 * when this says DL_ERR_NOMEM. */
DL_API dl_status dl_nomem_guard(dl_ctx *ctx, void (*fn)(void *arg), void *arg) {
  jmp_buf jb;
  jmp_buf *volatile prev;
  if (!ctx) {
    fn(arg);
    return DL_OK;
  }
  prev = ctx->nomem;
  ctx->nomem = &jb;
  if (setjmp(jb)) {
    ctx->nomem = prev;
    return DL_ERR_NOMEM;
  }
  fn(arg);
  ctx->nomem = prev;
  return DL_OK;
}

/* >>alloc ------------------------------------------------------------------ */

/* Overflow-checked size arithmetic: return 0 and set *out, or 1 on overflow. */
DL_API int dl_size_mul(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) return 1;
  *out = a * b;
  return 0;
}
/* *out = a + b; returns 1 (and leaves *out alone) when the sum overflows
 * size_t, else 0. */
DL_API int dl_size_add(size_t a, size_t b, size_t *out) {
  if (b > SIZE_MAX - a) return 1;
  *out = a + b;
  return 0;
}

/* Raw allocation through ctx's hooks (or DL_MALLOC). NULL on failure, with
 * DL_ERR_NOMEM recorded in ctx. Not aligned beyond what the hook gives. */
DL_API void *dl_raw_alloc(dl_ctx *ctx, size_t size) {
  void *p;
  if (size == 0) size = 1;
  if (ctx && ctx->desc.allocator.alloc) p = ctx->desc.allocator.alloc(size, ctx->desc.allocator.user);
  else p = DL_MALLOC(size, ctx ? ctx->desc.allocator.user : NULL);
  if (!p) dl_fail(ctx, DL_ERR_NOMEM, "out of memory allocating %zu bytes", size);
  return p;
}
/* Free p from dl_raw_alloc with the same ctx's hooks; NULL is ignored. */
DL_API void dl_raw_free(dl_ctx *ctx, void *p) {
  if (!p) return;
  if (ctx && ctx->desc.allocator.free) ctx->desc.allocator.free(p, ctx->desc.allocator.user);
  else DL_FREE(p, ctx ? ctx->desc.allocator.user : NULL);
}

/* DL_ALIGN-aligned allocation of size bytes; free with dl_free (same ctx).
 * NULL on failure (DL_ERR_NOMEM or DL_ERR_OVERFLOW in ctx). */
DL_API void *dl_alloc(dl_ctx *ctx, size_t size) {
  size_t total;
  unsigned char *raw, *p;
  if (dl_size_add(size, DL_ALIGN + sizeof(void *), &total)) {
    dl_fail(ctx, DL_ERR_OVERFLOW, "allocation of %zu bytes overflows size_t", size);
    return NULL;
  }
  raw = (unsigned char *)dl_raw_alloc(ctx, total);
  if (!raw) {
    dl_fail(ctx, DL_ERR_NOMEM, "out of memory allocating %zu bytes", size);
    return NULL;
  }
  p = raw + sizeof(void *);
  p += (DL_ALIGN - ((uintptr_t)p % DL_ALIGN)) % DL_ALIGN;
  memcpy(p - sizeof(void *), &raw, sizeof raw);
  return p;
}
/* Free p from dl_alloc (same ctx); NULL is ignored. */
DL_API void dl_free(dl_ctx *ctx, void *p) {
  void *raw;
  if (!p) return;
  memcpy(&raw, (unsigned char *)p - sizeof(void *), sizeof raw);
  dl_raw_free(ctx, raw);
}

/* >>arena ------------------------------------------------------------------ */

/* A bump allocator for activations, tape nodes and temporaries.
 *
 * Three ways to make one:
 *   dl_arena_init(a, ctx, capacity, grow)  capacity bytes from the allocator;
 *       with grow != 0 an allocation that does not fit takes an overflow
 *       block, and the next rewind to the start replaces everything with one
 *       block of the high-water size, so a training loop's steady state does
 *       not allocate. With grow == 0 it fails instead.
 *   dl_arena_init_buffer(a, ctx, buf, size)  a caller-supplied buffer: no
 *       malloc ever, allocations past its end fail with DL_ERR_NOMEM.
 * Either way, dl_arena_bytes_needed() reports the most the arena has been
 * asked to hold (including a request that failed), i.e. the size to pass next
 * time: run one step against a small buffer, then size the real one.
 *
 * Pointers from dl_arena_alloc are DL_ALIGN-aligned and valid until the arena
 * is rewound past them (dl_arena_rewind) or freed. */
typedef struct dl__arena_block {
  struct dl__arena_block *prev;
  size_t start;  /* arena offset of this block's first byte */
  size_t cap;
  size_t pad;
} dl__arena_block;

/* A bump allocator (see above): make it with dl_arena_init or
 * dl_arena_init_buffer, release with dl_arena_free. */
typedef struct dl_arena {
  dl_ctx *ctx; /* allocator and error reports (may be NULL) */
  unsigned char *base;      /* main block */
  size_t cap;               /* its capacity */
  size_t used;              /* current offset (main block and overflow blocks) */
  size_t high;              /* high-water mark of used */
  size_t needed;            /* high-water including failed requests */
  dl__arena_block *over;    /* newest overflow block */
  size_t over_used;         /* bytes used in *over */
  int grow, owns; /* may take overflow blocks; allocated its main block (else the caller's buffer) */
  uint64_t allocs;          /* calls to the allocator so far (for tests/benchmarks) */
} dl_arena;

/* A position in an arena (dl_arena_get_mark) to rewind to later
 * (dl_arena_rewind). */
typedef size_t dl_arena_mark;

/* An arena of capacity bytes from ctx's allocator (0: none yet); grow != 0
 * lets it take overflow blocks (see above). DL_OK or DL_ERR_NOMEM. */
DL_API dl_status dl_arena_init(dl_arena *a, dl_ctx *ctx, size_t capacity, int grow) {
  memset(a, 0, sizeof *a);
  a->ctx = ctx;
  a->grow = grow;
  a->owns = 1;
  if (capacity) {
    a->base = (unsigned char *)dl_alloc(ctx, capacity);
    if (!a->base) return ctx ? ctx->status : DL_ERR_NOMEM;
    a->allocs++;
  }
  a->cap = capacity;
  return DL_OK;
}
/* An arena over the caller's buffer of size bytes (aligned to DL_ALIGN
 * inside it): it never allocates, and a request past the end fails with
 * DL_ERR_NOMEM. */
DL_API void dl_arena_init_buffer(dl_arena *a, dl_ctx *ctx, void *buf, size_t size) {
  size_t skip = (DL_ALIGN - ((uintptr_t)buf % DL_ALIGN)) % DL_ALIGN;
  memset(a, 0, sizeof *a);
  a->ctx = ctx;
  a->base = (unsigned char *)buf + (skip < size ? skip : size);
  a->cap = skip < size ? size - skip : 0;
}

DL_API void dl__arena_free_overflow(dl_arena *a, size_t keep_from) {
  while (a->over && a->over->start >= keep_from) {
    dl__arena_block *b = a->over;
    a->over = b->prev;
    dl_free(a->ctx, b);
    a->over_used = a->over ? a->over->cap : 0; /* older blocks were full */
  }
}

/* Release the arena's memory (not a caller's buffer); every pointer from it
 * becomes invalid. */
DL_API void dl_arena_free(dl_arena *a) {
  dl__arena_free_overflow(a, 0);
  if (a->owns) dl_free(a->ctx, a->base);
  memset(a, 0, sizeof *a);
}

/* size bytes, DL_ALIGN-aligned, uninitialised. NULL when the arena is full
 * (DL_ERR_NOMEM in the ctx, with the bytes needed). */
DL_API void *dl_arena_alloc(dl_arena *a, size_t size) {
  size_t rounded, end;
  if (dl_size_add(size, DL_ALIGN - 1, &rounded)) {
    dl_fail(a->ctx, DL_ERR_OVERFLOW, "arena request of %zu bytes overflows size_t", size);
    return NULL;
  }
  rounded &= ~(size_t)(DL_ALIGN - 1);
  if (rounded == 0) rounded = DL_ALIGN;
  if (dl_size_add(a->used, rounded, &end)) {
    dl_fail(a->ctx, DL_ERR_OVERFLOW, "arena offset overflows size_t");
    return NULL;
  }
  if (end > a->needed) a->needed = end;
  if (!a->over && end <= a->cap) {
    void *p = a->base + a->used;
    a->used = end;
    if (end > a->high) a->high = end;
    return p;
  }
  if (a->over && a->over_used + rounded <= a->over->cap) {
    void *p = (unsigned char *)(a->over + 1) + a->over_used;
    a->over_used += rounded;
    a->used = end;
    if (end > a->high) a->high = end;
    return p;
  }
  if (!a->grow) {
    dl_fail(a->ctx, DL_ERR_NOMEM,
            "arena full: %zu bytes requested with %zu of %zu used; bytes needed so far: %zu",
            size, a->used, a->cap, a->needed);
    return NULL;
  }
  {
    size_t cap = rounded > a->cap / 2 ? rounded : a->cap / 2, total;
    dl__arena_block *b;
    if (cap < (size_t)1 << 16) cap = (size_t)1 << 16;
    if (dl_size_add(cap, sizeof(dl__arena_block), &total)) {
      dl_fail(a->ctx, DL_ERR_OVERFLOW, "arena block size overflows size_t");
      return NULL;
    }
    b = (dl__arena_block *)dl_alloc(a->ctx, total);
    if (!b) return NULL;
    a->allocs++;
    b->prev = a->over;
    b->start = a->used;
    b->cap = cap;
    a->over = b;
    a->over_used = rounded;
    a->used = end;
    if (end > a->high) a->high = end;
    return (void *)(b + 1);
  }
}

/* Zero-filled variant of dl_arena_alloc. */
DL_API void *dl_arena_calloc(dl_arena *a, size_t size) {
  void *p = dl_arena_alloc(a, size);
  if (p) memset(p, 0, size);
  return p;
}

/* The current position, for a later dl_arena_rewind. */
DL_API dl_arena_mark dl_arena_get_mark(const dl_arena *a) { return a->used; }

/* Release everything allocated after mark. Rewinding a growable arena to 0
 * after it overflowed replaces its blocks with one of the high-water size. */
DL_API void dl_arena_rewind(dl_arena *a, dl_arena_mark mark) {
  if (mark > a->used) return;
  dl__arena_free_overflow(a, mark);
  if (a->over) a->over_used = mark - a->over->start;
  a->used = mark;
  if (mark == 0 && a->grow && a->owns && a->high > a->cap) {
    unsigned char *nb = (unsigned char *)dl_alloc(a->ctx, a->high);
    if (nb) {
      dl_free(a->ctx, a->base);
      a->base = nb;
      a->cap = a->high;
      a->allocs++;
    }
  }
}
/* 1 when p lies in what a handed out after mark (its main block or an
 * overflow block, up to its current offset). */
DL_API int dl__arena_holds(const dl_arena *a, dl_arena_mark mark, const void *p) {
  const unsigned char *q = (const unsigned char *)p;
  const dl__arena_block *b;
  const size_t main_end = a->used < a->cap ? a->used : a->cap;
  if (!p || mark >= a->used) return 0;
  if (a->base && mark < main_end && q >= a->base + mark && q < a->base + main_end) return 1;
  for (b = a->over; b; b = b->prev) {
    const unsigned char *d = (const unsigned char *)(b + 1);
    const size_t lo = mark > b->start ? mark - b->start : 0, hi = b == a->over ? a->over_used : b->cap;
    if (lo < hi && q >= d + lo && q < d + hi) return 1;
    if (b->start + b->cap <= mark) break; /* older blocks end before the mark */
  }
  return 0;
}
/* Rewind to the start: dl_arena_rewind(a, 0). */
DL_API void dl_arena_reset(dl_arena *a) { dl_arena_rewind(a, 0); }
/* Bytes allocated now. */
DL_API size_t dl_arena_used(const dl_arena *a) { return a->used; }
/* The most bytes allocated at once so far. */
DL_API size_t dl_arena_high_water(const dl_arena *a) { return a->high; }
/* The capacity that would have served every request so far. */
DL_API size_t dl_arena_bytes_needed(const dl_arena *a) { return a->needed; }

/* >>rng -------------------------------------------------------------------- */

/* Counter-based RNG: draw k of a stream is mix(key + (k + 1) * golden), a
 * SplitMix64 output. Because any draw can be computed from its index, filling
 * a tensor in parallel gives the same numbers for any thread count. The state
 * is two integers, copyable and checkpointable. */
typedef struct dl_rng {
  uint64_t key; /* the stream: every draw is mix(key + (index + 1) * golden) */
  uint64_t counter;  /* draws consumed so far */
} dl_rng;

DL_API uint64_t dl__mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
/* A stream from a seed (any value, 0 included); the counter starts at 0. */
DL_API dl_rng dl_rng_make(uint64_t seed) {
  dl_rng r;
  r.key = dl__mix64(seed ^ 0x6a09e667f3bcc909ULL);
  r.counter = 0;
  return r;
}
/* Draw number `index` of the stream (independent of the counter). */
DL_API uint64_t dl_rng_at(const dl_rng *r, uint64_t index) {
  return dl__mix64(r->key + (index + 1) * 0x9e3779b97f4a7c15ULL);
}
/* The next 64 random bits of the stream. */
DL_API uint64_t dl_rng_u64(dl_rng *r) { return dl_rng_at(r, r->counter++); }
/* Uniform in [0, 1) from 53 (f64) or 24 (f32) random bits. */
DL_API double dl__u01_f64(uint64_t x) { return (double)(x >> 11) * (1.0 / 9007199254740992.0); }
DL_API float dl__u01_f32(uint64_t x) { return (float)(x >> 40) * (1.0f / 16777216.0f); }
/* Uniform double in [0, 1) from the next draw. */
DL_API double dl_rng_uniform(dl_rng *r) { return dl__u01_f64(dl_rng_u64(r)); }
/* Uniform float in [0, 1) from the next draw. */
DL_API float dl_rng_uniform_f32(dl_rng *r) { return dl__u01_f32(dl_rng_u64(r)); }
/* Standard normal from one 64-bit draw: Box-Muller on its two 32-bit halves
 * would lose precision, so the two uniforms come from two mixes of it. */
DL_API double dl__normal_from(uint64_t x) {
  double u1 = ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0); /* (0,1) */
  double u2 = dl__u01_f64(dl__mix64(x ^ 0xd1b54a32d192ed03ULL));
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}
/* A standard normal (mean 0, deviation 1) from the next draw. */
DL_API double dl_rng_normal(dl_rng *r) { return dl__normal_from(dl_rng_u64(r)); }
/* Uniform integer in [0, n), unbiased (Lemire's method with rejection; the
 * retries draw from a sub-stream of this one draw, so each call consumes
 * exactly one counter value). n must be > 0. */
DL_API uint64_t dl__below_from(uint64_t x, uint64_t n) {
  uint64_t threshold = (0 - n) % n, sub = x;
  for (;;) {
    /* 64x64 -> 128 multiply-high, portable */
    uint64_t a_lo = x & 0xffffffffu, a_hi = x >> 32, b_lo = n & 0xffffffffu, b_hi = n >> 32;
    uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
    uint64_t mid = (p0 >> 32) + (p1 & 0xffffffffu) + (p2 & 0xffffffffu);
    uint64_t hi = p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
    uint64_t lo = x * n;
    if (lo >= threshold) return hi;
    sub = dl__mix64(sub + 0x9e3779b97f4a7c15ULL);
    x = sub;
  }
}
/* Uniform integer in [0, n) from the next draw, unbiased (n > 0; one draw
 * per call). */
DL_API uint64_t dl_rng_below(dl_rng *r, uint64_t n) { return dl__below_from(dl_rng_u64(r), n); }

/* >>team guard ------------------------------------------------------------ */

/* Team guard (shared machines). When another process holds one of the
 * cores, a team costs the caller time two ways: a member that is not
 * running when a loop starts, or loses its core while it holds a block,
 * makes the loop wait for its next time slice (milliseconds, against loops
 * of 20 us to 1 ms: the Fashion MLP's team loops took 4-8 ms under one busy
 * process per core, 0.05-0.5 ms idle); and between loops libgomp's idle
 * members spin (GOMP_SPINCOUNT) on the cores the caller needs, which no
 * single loop's timing shows (OMP_WAIT_POLICY=passive would stop that, but
 * it is read before main() and a header cannot set it). So the guard
 * watches both, and the ctx's loops run alone for a while when either shows:
 *   - a stall: a team loop's last member began more than DL__TEAM_STALL
 *     (2 ms) after the loop (idle, a member parked by libgomp starts within
 *     tens of microseconds; this VM's idle core took up to 2.4 ms to wake,
 *     which the team does not earn back on loops that short either);
 *   - a short CPU share: over a span of at least 10 ms and 2 team loops
 *     (4 loops before: under load a loop took 4-8 ms, and the first
 *     back-off came 48 ms into the run instead of 24),
 *     the process's CPU time (clock()) is below 0.8 of what its threads
 *     would use running freely: the span's wall time for the caller, less
 *     its waits at the loops' ends, plus each member's time from the start
 *     to the end of its share (idle the ratio is 1 or more, spinning
 *     members adding to it; under one busy process per core it is
 *     0.5-0.7). A member's wait for the others is left out because a long
 *     one sleeps: an unbalanced loop on an idle machine is not a stall.
 *     Or, where the system has a per-thread CPU clock (POSIX's
 *     CLOCK_THREAD_CPUTIME_ID), the calling thread's own CPU time is below
 *     0.7 of the span's wall time: it does not sleep inside a span (libgomp
 *     spins at a loop's end for longer than these loops wait), so idle it
 *     ran 0.79-1.0 of the time (median 0.997; the dips, a system thread
 *     taking a core), and under one busy process per core 0.33-0.62 (the
 *     MLP and the CNN). The process's share alone missed the load for the
 *     MLP's first 0.3 s and again later (its spinning members filled it to
 *     about 0.8); the caller's share backed off 37 ms after the start.
 * The first back-off lasts 200 ms, each next one in a row twice as long (at
 * most 2 s); a span judged clean halves the back-off, and forgets it from
 * 0.2 s. (It forgot them all at once before: under one busy process per
 * core a 10 ms span now and then came out clean, so the back-offs went back
 * to 200 ms every 0.2-0.4 s, each return to the team costing 10-30 ms at
 * half speed: the MLP ran 0.96x its 1-thread speed there, 1.01x halving;
 * medians of 8 alternated rounds.) A span does not reach over
 * a gap of more than DL__TEAM_GAP (10 ms) between two team loops: it starts
 * again after it. A caller that sleeps, waits for a file or does long work
 * of its own between steps uses no CPU time, or its own only, in the gap,
 * which read as a short share: a benchmark's 20 ms pause between repeats
 * backed the idle MLP step off to one thread for 200 ms, then 400 ms (its
 * loops come every 20-200 us; under load a caller waits for its core a few
 * ms). The ctx's first team loop, which starts the threads, is not judged,
 * nor are stalls in the DL__TEAM_WARMUP (0.1 s) after it (the CPU shares
 * are: the caller spins while a member is late): on the idle VM
 * the members came 3-8 ms late to the second, third and fourth team loops
 * of every run (then 20 us), and the back-offs that followed (200 + 400
 * ms) ran the first 0.6 s of each run on one thread, a third of a short
 * run such as bench/run_train.sh's CNN rounds. On an idle machine neither
 * sign shows (members start within tens of microseconds), so the team is never
 * stopped there. (An earlier guard estimated each loop's gain from the
 * fastest member's pace: under load it kept teams that cost 13-25% of the
 * 1-thread speed, and on an idle machine a start-up cost in its balance
 * stopped teams that won.) Where clock() is wall time (Windows) only stalls
 * count. The state lives in the ctx (dl_ctx.team); with a NULL ctx, in one
 * static per translation unit. It only ever chooses between 1 and the ctx's
 * thread count: results are the same either way (loops that reduce keep
 * one partial per piece). */
#ifdef _OPENMP
#if !defined(__cplusplus) && !defined(CLOCK_THREAD_CPUTIME_ID) && defined(__linux__)
/* glibc hides clock_gettime under plain -std=c11 (as report.h notes);
 * Linux's clockid_t is an int and CLOCK_THREAD_CPUTIME_ID is 3 in its ABI. */
extern int clock_gettime(int, struct timespec *);
#define DL__LINUX_CLOCK_THREAD_CPUTIME 3
#endif
/* The calling thread's CPU time in seconds (user and system), or -1 where
 * the system has no such clock (the team guard then judges the process's
 * share alone; on Windows, where clock() is wall time too, only stalls). A
 * ctx that several threads of the caller's own use in turn gives the rule
 * another thread's clock now and then: at worst a back-off, never other
 * results. */
DL_API double dl__thread_cpu(void) {
#if !defined(_WIN32) && (defined(CLOCK_THREAD_CPUTIME_ID) || defined(DL__LINUX_CLOCK_THREAD_CPUTIME))
  struct timespec ts;
#if defined(CLOCK_THREAD_CPUTIME_ID)
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
#else
  if (clock_gettime(DL__LINUX_CLOCK_THREAD_CPUTIME, &ts) != 0) return -1;
#endif
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#else
  return -1;
#endif
}

#define DL__TEAM_MAX 64
#define DL__TEAM_STALL 0.002
#define DL__TEAM_WARMUP 0.1
#define DL__TEAM_GAP 0.01
typedef struct dl__team {
  double t0;                  /* when the loop began */
  double enter[DL__TEAM_MAX]; /* when each member began its share */
  double leave[DL__TEAM_MAX]; /* and when it ended it */
  int par, nt;                /* whether the team runs it; its size */
} dl__team;
DL__GLOBAL(dl__team_state dl__team_null, DL__ZERO_INIT);
/* Decide how a loop runs: with the team when `par` (the caller's
 * conditions: threads, size) holds, it is not nested in a team and the ctx
 * is not backing off. */
DL_API void dl__team_begin(dl__team *tm, dl_ctx *ctx, int par) {
  dl__team_state *st = ctx ? &ctx->team : &dl__team_null;
  double until;
  tm->nt = 0;
  tm->t0 = omp_get_wtime();
  DL__OMP("omp atomic read")
  until = st->until;
  tm->par = par && !omp_in_parallel() && tm->t0 >= until;
}
/* Called by every member as it begins its share, and as it ends it. */
DL_API void dl__team_enter(dl__team *tm) {
  const int id = omp_get_thread_num();
  if (id == 0) tm->nt = omp_get_num_threads();
  if (id < DL__TEAM_MAX) tm->enter[id] = omp_get_wtime();
}
DL_API void dl__team_leave(dl__team *tm) {
  const int id = omp_get_thread_num();
  if (id < DL__TEAM_MAX) tm->leave[id] = omp_get_wtime();
}
/* After a team loop: judge it and the span (see above). */
DL_API void dl__team_end(dl__team *tm, dl_ctx *ctx) {
  dl__team_state *st = ctx ? &ctx->team : &dl__team_null;
  double now, late = 0, extra;
  int k, stall;
  if (!tm->par) return;
  now = omp_get_wtime();
  /* the members' working time beyond the caller's, minus the caller's wait
   * at the loop's end (a member that waits may sleep, using no CPU) */
  extra = tm->leave[0] - now;
  for (k = 0; k < tm->nt && k < DL__TEAM_MAX; k++) {
    if (tm->enter[k] - tm->t0 > late) late = tm->enter[k] - tm->t0;
    if (k > 0) extra += tm->leave[k] - tm->enter[k];
  }
  stall = late > DL__TEAM_STALL;
  DL__OMP("omp critical (dl__team)")
  {
    int back = 0;
    if (!st->started) {
      st->started = 1; /* thread start-up: not judged */
      st->t_start = now;
    } else if (stall && now - st->t_start >= DL__TEAM_WARMUP) {
      back = 1; /* (a late member in the warm-up is the members settling) */
    } else if (st->span0 == 0 || tm->t0 - st->last > DL__TEAM_GAP) {
      st->span0 = now;
      st->cpu0 = (long)clock();
      st->tcpu0 = dl__thread_cpu();
      st->extra = 0;
      st->loops = 0;
    } else {
      st->extra += extra;
      if (++st->loops >= 2 && now - st->span0 >= 0.01) {
        const long c = (long)clock();
        const double tc = dl__thread_cpu(), wall = now - st->span0;
        const double cpu = (double)(c - st->cpu0) / (double)CLOCKS_PER_SEC;
        if ((cpu >= 0 && cpu < 0.8 * (wall + st->extra)) ||
            (tc >= 0 && st->tcpu0 >= 0 && tc - st->tcpu0 < 0.7 * wall)) {
          back = 1;
        } else { /* clean: halve the back-off (forget it below 0.2 s), judge the next span */
          st->window = st->window > 0.2 ? st->window / 2 : 0;
          st->span0 = now;
          st->cpu0 = c;
          st->tcpu0 = tc;
          st->extra = 0;
          st->loops = 0;
        }
      }
    }
    if (back) {
      st->window = st->window > 0 ? (2 * st->window < 2.0 ? 2 * st->window : 2.0) : 0.2;
      DL__OMP("omp atomic write")
      st->until = now + st->window;
      st->span0 = 0;
    }
    st->last = now;
  }
}
#endif /* _OPENMP */

/* >>fpenv ------------------------------------------------------------------ */

/* Flush-to-zero / denormals-are-zero on the calling thread. dl_ftz_enter
 * returns the previous mode for dl_ftz_leave. On targets without a known
 * control register they do nothing. Library loops call them on every worker
 * thread unless the ctx sets keep_denormals. */
typedef struct dl_fpmode { unsigned long bits; int changed; /* the previous mode; whether it was changed */ } dl_fpmode;

#if defined(__SSE__) || defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
/* Switch flush-to-zero and denormals-are-zero on (on != 0) or off for the
 * calling thread; returns the previous mode for dl_ftz_leave. */
DL_API dl_fpmode dl_ftz_enter(int on) {
  dl_fpmode m;
  unsigned int csr = _mm_getcsr();
  unsigned int want = on ? (csr | 0x8040u) : (csr & ~0x8040u);
  m.bits = csr;
  m.changed = want != csr;
  if (m.changed) _mm_setcsr(want);
  return m;
}
/* Restore the mode dl_ftz_enter returned. */
DL_API void dl_ftz_leave(dl_fpmode m) {
  if (m.changed) _mm_setcsr((unsigned int)m.bits);
}
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
DL_API dl_fpmode dl_ftz_enter(int on) {
  dl_fpmode m;
  unsigned long fpcr, want;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  want = on ? (fpcr | (1ul << 24)) : (fpcr & ~(1ul << 24));
  m.bits = fpcr;
  m.changed = want != fpcr;
  if (m.changed) __asm__ __volatile__("msr fpcr, %0" : : "r"(want));
  return m;
}
DL_API void dl_ftz_leave(dl_fpmode m) {
  if (m.changed) __asm__ __volatile__("msr fpcr, %0" : : "r"(m.bits));
}
#else
DL_API dl_fpmode dl_ftz_enter(int on) { dl_fpmode m = {0, 0}; (void)on; return m; }
DL_API void dl_ftz_leave(dl_fpmode m) { (void)m; }
#endif
/* Enter the ctx's policy (FTZ unless keep_denormals). */
DL_API dl_fpmode dl_ctx_fp_enter(const dl_ctx *ctx) {
  if (ctx && ctx->desc.keep_denormals) { dl_fpmode m = {0, 0}; return m; }
  return dl_ftz_enter(1);
}

/* >>parallel for ------------------------------------------------------------ */

/* The library's one parallel construct: every loop that runs on several
 * threads is a DL_PARALLEL_REGION (tests/run.sh fails on an `omp parallel`
 * anywhere else); DL_PARALLEL_FOR, DL_PARALLEL_RANGE and dl_parallel_for
 * below are its everyday forms.
 *
 * DL_PARALLEL_REGION(ctx, work, units, (team statements), (alone statements)):
 * when the ctx has more than one thread, `units` > 1 (the pieces of work
 * the region hands out in all), `work` (elements, bytes, flops: the
 * caller's measure of the job) reaches the ctx's parallel threshold and the
 * team guard above lets the team run (it does not while teams stall),
 * every worker of the ctx's team runs the team statements, which share their
 * loops out with `omp for`; otherwise the calling thread runs the alone statements, the
 * same work as plain loops, and no team is started (an `omp for` there would
 * bind to a caller's own team). Both lists are parenthesised. Every worker,
 * the caller included, runs with the ctx's floating-point mode
 * (flush-to-zero unless keep_denormals) and restores its own afterwards.
 * dl_worker() is the running worker's number (0 .. dl_ctx_threads(ctx) - 1),
 * for per-worker scratch; nested regions run alone, and there dl_worker() is
 * the caller's own thread number, not 0: a region that may run alone inside
 * a caller's team uses slot 0 of scratch it allocated for that call. Results never depend on
 * the thread count as long as each piece writes its own outputs (a reduction
 * keeps one partial per piece and adds them in order afterwards).
 *
 * DL_PARALLEL_FOR(ctx, work, n, I, statements...): the statements for
 * I = 0 .. n-1 (an int64_t the macro declares), member t of a team of nt
 * taking the consecutive indices [n t / nt, n (t + 1) / nt) in order
 * (alone, the caller all of them). So every loop over a batch gives member
 * t the same share of it (images [N t / nt, ...), and of N C planes those
 * of about the same images; of the elements of a tensor, the same part),
 * and what one loop wrote the next reads from its own core's cache. It
 * handed out one index at a time to whichever member was free (OpenMP's
 * dynamic schedule) before: an image's convolution, its batch norm and its
 * pooling, and a block's gradient and its Adam update, ran on whichever
 * member came first, and half the data crossed between the cores at each
 * op. On this VM that cost little while its two cores shared a cache (a
 * cache line's round trip 55-90 ns) but a lot in the stretches, minutes
 * long, where they sat far apart (330-360 ns): there fashion_cnn's
 * im2col took 4x its time, the fused batch norm, ReLU and pool 2.4x, the
 * MLP's Adam 4.5x, and the MLP at 2 threads ran 73k samples/s against
 * 78k on one thread; with fixed shares 82k (alternated runs, far stretches
 * only; the CNN 3700 -> 4600), and the same speed where the cores are near
 * (the CNN 2-3% faster). Under one busy process per core, where the team
 * guard lets a team run, a fixed share waits for a descheduled member
 * where a dynamic one would not; measured there: the same speed.
 * n is evaluated more than once. Statement macros; the statements may not
 * contain preprocessor directives or `break` out of the loop. */
#define DL__UNPAREN(...) __VA_ARGS__
#ifdef _OPENMP
/* DL_PARALLEL_REGION(ctx, work, units, (team statements), (alone
 * statements)): the library's one OpenMP parallel region (see above): the
 * team statements on a team when work is above the ctx's threshold and the
 * team guard allows it, the alone statements on the calling thread
 * otherwise; flush-to-zero on every thread unless the ctx keeps denormals.
 * A statement macro. */
#define DL_PARALLEL_REGION(ctx_, work_, units_, TEAM, ALONE)                             \
  do {                                                                                  \
    dl_ctx *const dl__prc = (ctx_);                                                     \
    dl__team dl__prt;                                                                   \
    dl__team_begin(&dl__prt, dl__prc,                                                   \
                   dl_ctx_threads(dl__prc) > 1 && (units_) > 1 &&                       \
                       (int64_t)(work_) >= dl_ctx_parallel_threshold(dl__prc));         \
    DL__PARALLEL_REGION_AS(&dl__prt, dl__prc, TEAM, ALONE);                              \
    dl__team_end(&dl__prt, dl__prc);                                                    \
  } while (0)
/* DL__PARALLEL_REGION_AS(tm, ctx, (team statements), (alone statements)):
 * the region as the guard already decided (tm from dl__team_begin; the
 * caller calls dl__team_end after it), for a caller that plans its work by
 * that decision (blas.h). */
#define DL__PARALLEL_REGION_AS(tm_, ctx_, TEAM, ALONE)                                   \
  do {                                                                                  \
    dl_ctx *const dl__pc = (ctx_);                                                      \
    const int dl__pnt = dl_ctx_threads(dl__pc);                                         \
    if ((tm_)->par) {                                                                   \
      DL__OMP("omp parallel num_threads(dl__pnt)")                                      \
      {                                                                                 \
        const dl_fpmode dl__pfm = dl_ctx_fp_enter(dl__pc);                              \
        dl__team_enter(tm_);                                                            \
        DL__UNPAREN TEAM                                                                \
        dl__team_leave(tm_);                                                            \
        dl_ftz_leave(dl__pfm);                                                          \
      }                                                                                 \
    } else {                                                                            \
      const dl_fpmode dl__pfm = dl_ctx_fp_enter(dl__pc);                                \
      DL__UNPAREN ALONE                                                                 \
      dl_ftz_leave(dl__pfm);                                                            \
    }                                                                                   \
  } while (0)
/* The running worker's number inside a parallel region (0 to
 * dl_ctx_threads(ctx) - 1), for per-worker scratch (see above). */
DL_API int dl_worker(void) { return omp_get_thread_num(); }
/* Whether the ctx's next region may start a team (threads, not inside
 * another team, the guard not backing off). */
DL_API int dl_parallel_allowed(dl_ctx *ctx) {
  const dl__team_state *st = ctx ? &ctx->team : &dl__team_null;
  double until;
  DL__OMP("omp atomic read")
  until = st->until;
  return dl_ctx_threads(ctx) > 1 && !omp_in_parallel() && omp_get_wtime() >= until;
}
#else
#define DL_PARALLEL_REGION(ctx_, work_, units_, TEAM, ALONE)                             \
  do {                                                                                  \
    (void)(work_);                                                                      \
    DL__PARALLEL_REGION_AS((dl__team *)0, ctx_, TEAM, ALONE);                            \
  } while (0)
#define DL__PARALLEL_REGION_AS(tm_, ctx_, TEAM, ALONE)                                   \
  do {                                                                                  \
    const dl_fpmode dl__pfm = dl_ctx_fp_enter(ctx_);                                    \
    (void)(tm_);                                                                        \
    DL__UNPAREN ALONE                                                                   \
    dl_ftz_leave(dl__pfm);                                                              \
  } while (0)
/* Without OpenMP every loop runs alone. */
typedef struct dl__team { int par; } dl__team;
DL_API void dl__team_begin(dl__team *tm, dl_ctx *ctx, int par) {
  (void)ctx; (void)par;
  tm->par = 0;
}
DL_API void dl__team_end(dl__team *tm, dl_ctx *ctx) { (void)tm; (void)ctx; }
DL_API int dl_worker(void) { return 0; }
DL_API int dl_parallel_allowed(dl_ctx *ctx) { (void)ctx; return 0; }
#endif
/* DL_PARALLEL_FOR(ctx, work, n, I, statements...): the statements for I
 * from 0 to n-1 on the ctx's team, one index at a time (see above). A
 * statement macro; n is evaluated more than once. */
#define DL_PARALLEL_FOR(ctx_, work_, n_, I, ...)                                        \
  DL_PARALLEL_REGION(ctx_, work_, (n_), DL__PFOR_TEAM(n_, I, __VA_ARGS__), DL__PFOR_ALONE(n_, I, __VA_ARGS__))
/* DL__PARALLEL_FOR_AS(tm, ctx, n, I, statements...): DL_PARALLEL_FOR as the
 * guard already decided (see DL__PARALLEL_REGION_AS). */
#define DL__PARALLEL_FOR_AS(tm_, ctx_, n_, I, ...)                                      \
  DL__PARALLEL_REGION_AS(tm_, ctx_, DL__PFOR_TEAM(n_, I, __VA_ARGS__), DL__PFOR_ALONE(n_, I, __VA_ARGS__))
#define DL__PFOR_TEAM(n_, I, ...)                                                       \
  ({                                                                                    \
    const int64_t dl__pfn = (n_), dl__pft = omp_get_thread_num(), dl__pfk = omp_get_num_threads(); \
    int64_t I;                                                                          \
    for (I = dl__pfn * dl__pft / dl__pfk; I < dl__pfn * (dl__pft + 1) / dl__pfk; I++) { \
      __VA_ARGS__                                                                       \
    }                                                                                   \
  })
#define DL__PFOR_ALONE(n_, I, ...)                                                      \
  ({                                                                                    \
    int64_t I;                                                                          \
    for (I = 0; I < (n_); I++) {                                                        \
      __VA_ARGS__                                                                       \
    }                                                                                   \
  })

/* DL__PARALLEL_RUNS_OF(ctx, work, n, per, I, statements...): DL_PARALLEL_FOR
 * over runs of `per` consecutive indices of 0 .. n-1 (the last shorter), in
 * order within a run; per may name dl__run_n (n, evaluated once). For
 * DL_PARALLEL_RANGE below. */
#define DL__PARALLEL_RUNS_OF(ctx_, work_, n_, per_, I, ...)                             \
  do {                                                                                  \
    const int64_t dl__run_n = (n_), dl__run_per = (per_);                               \
    DL_PARALLEL_FOR(ctx_, work_, (dl__run_n + dl__run_per - 1) / dl__run_per, dl__run_b, { \
      const int64_t dl__run_hi = (dl__run_b + 1) * dl__run_per < dl__run_n ? (dl__run_b + 1) * dl__run_per : dl__run_n; \
      int64_t I;                                                                        \
      for (I = dl__run_b * dl__run_per; I < dl__run_hi; I++) {                          \
        __VA_ARGS__                                                                     \
      }                                                                                 \
    });                                                                                 \
  } while (0)
/* DL_PARALLEL_RUNS(ctx, work, n, I, statements...): DL_PARALLEL_FOR, kept
 * under this name for the loops over many small items that write
 * neighbouring memory (the planes of a batch), which it once handed out in
 * runs of consecutive indices, about 8 a thread, dynamically. Every member
 * now takes one run (see DL_PARALLEL_FOR), so two members share a cache
 * line only at the one boundary between their runs. A statement macro. */
#define DL_PARALLEL_RUNS(ctx_, work_, n_, I, ...) DL_PARALLEL_FOR(ctx_, work_, n_, I, __VA_ARGS__)

/* Indices per block of DL_PARALLEL_RANGE. */
#define DL_PARALLEL_BLOCK 4096
/* DL_PARALLEL_RANGE(ctx, work, n, I, statements...): DL_PARALLEL_FOR for
 * element loops: I = 0 .. n-1 in blocks of DL_PARALLEL_BLOCK consecutive
 * indices (one block per team step), in order within a block. A statement
 * macro. */
#define DL_PARALLEL_RANGE(ctx_, work_, n_, I, ...)                                      \
  DL__PARALLEL_RUNS_OF(ctx_, work_, n_, DL_PARALLEL_BLOCK, I, __VA_ARGS__)

/* dl_parallel_for(ctx, n, block, work, fn, arg): DL_PARALLEL_FOR over the
 * blocks of [0, n), `block` indices each, calling fn(arg, lo, hi) for each
 * ([lo, hi) never crosses a block boundary: the partition is the same
 * whatever the thread count). For loops that are functions already. */
typedef void (*dl_range_fn)(void *arg, int64_t lo, int64_t hi);
/* dl_parallel_for(ctx, n, block, work, fn, arg): fn(arg, lo, hi) over [0,
 * n) in blocks of `block` indices on the ctx's team (see above). */
DL_API void dl_parallel_for(dl_ctx *ctx, int64_t n, int64_t block, int64_t work, dl_range_fn fn, void *arg) {
  const int64_t nb = block > 0 && n > 0 ? (n + block - 1) / block : 0;
  DL_PARALLEL_FOR(ctx, work, nb, b, {
    const int64_t lo = b * block;
    fn(arg, lo, lo + block < n ? lo + block : n);
  });
}

#ifdef __cplusplus
}
#endif
DL__HEADER_END
#endif /* DL_CORE_H */
