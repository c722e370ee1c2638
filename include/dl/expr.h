/* dl/expr.h - fused element-wise loops and the element-wise op list.
 *
 * DL_ASSIGN(dst, expr) evaluates a scalar expression written with dual.h's
 * generic math over tensors and numbers, in one pass, into dst:
 *
 *   DL_ASSIGN(y, dl_tanh(dl_add(dl_mul(a, b), c)));      // y = tanh(a*b + c)
 *   DL_ASSIGN(w, dl_sub(w, dl_mul(lr, g)));              // SGD step, in place
 *   DL_ASSIGN(h, dl_relu(dl_add(h, bias)));              // bias (C) over a batch (N, C)
 *
 * - No temporaries: the expression is pasted into the loop body and every
 *   tensor operand is read at the current element.
 * - dst decides the element type (f32 or f64); every tensor operand must have
 *   the same dtype (a mismatch panics naming both, never converts); numbers
 *   take the element type.
 * - Broadcasting: an operand's shape is right-aligned with dst's, and each of
 *   its sizes must equal dst's or be 1 (so scalars, (C) over (N, C), (N, 1)
 *   over (N, C) ...). dst itself is never broadcast. Strided views work
 *   everywhere; the fastest path is all-contiguous, same-shape operands.
 * - dst may appear in expr (element i reads its own position before writing);
 *   an operand that is a *different* view of dst's memory panics.
 * - Errors name the expression text, the shapes and the caller's file:line.
 * - Evaluation contract: expr is expanded five times (a shape/dtype check and
 *   four loops) and evaluated once for the check plus once per element, so it
 *   must have no side effects. (C++: the generic names build an expression
 *   tree, evaluated once; DL_ASSIGN is a template over it, with the same
 *   checks and loops.) dst is evaluated once.
 * - Threads: core.h's DL_PARALLEL_FOR: above the ctx's parallel threshold
 *   (DL_PARALLEL_THRESHOLD elements by default) each member of an OpenMP
 *   team takes a fixed share of the blocks; below it no team is started.
 *   Its team guard falls back to one thread for a while when the team
 *   stops paying for itself, as it does when another process holds a core.
 *   Every thread flushes denormals to zero unless the ctx keeps them, and
 *   restores its mode afterwards.
 *
 * The op list: the library's element-wise ops are written once below as
 * X(name, expression in x0 [, x1] [, p0]) and each entry generates
 *   dl__op_NAME_f32/_f64/_dual/_dual64/_dual2   scalar functions (the
 *        expression; _dual2 on nested duals gives second derivatives)
 *   dl_NAME_into(y, x0 [, x1] [, p0])     forward, broadcasting, via DL_ASSIGN
 *   dl_NAME_backward(gx0 [, gx1], gy, x0 [, x1] [, p0])
 *        gx += gy * df/dx, the derivative taken by evaluating the same
 *        expression on dual numbers; gradients of broadcast inputs are summed
 *        back to their shape; a NULL gx is skipped.
 *   dl_NAME_jvp(ty, x0, tx0 [, x1, tx1] [, p0])
 *        forward mode: ty = sum_k df/dxk * txk, the same expression on dual
 *        numbers whose tangent parts are the txk (broadcast like the xk).
 * A user op is one line at file scope, the same way:
 *   DL_DEFINE_OP1(my_leaky, dl_max(dl_mul(0.2, x0), x0))
 * gives my_leaky_f32 ... my_leaky_dual64, my_leaky_dual2, my_leaky_into, my_leaky_backward and
 * my_leaky_jvp (ops.h's DL_T_MAP1(tape, my_leaky, x) records it on the tape),
 * and DL_APPLY1(my_leaky, t) uses it inside any DL_ASSIGN expression.
 */
#ifndef DL_EXPR_H
#define DL_EXPR_H

#include "dual.h"
DL__HEADER_BEGIN

/* >>op list ---------------------------------------------------------------- */

/* The library's element-wise ops: each line is the whole definition. The
 * lists are plain X-macros, visible to nvcc too, which expands them into
 * device kernels over the same generic math (dual.h's C++ templates). */
#define DL_OPS_UNARY(X)                                                                \
  X(neg, dl_neg(x0))                                                                   \
  X(exp, dl_exp(x0))                                                                   \
  X(log, dl_log(x0))                                                                   \
  X(log1p, dl_log1p(x0))                                                               \
  X(expm1, dl_expm1(x0))                                                               \
  X(sin, dl_sin(x0))                                                                   \
  X(cos, dl_cos(x0))                                                                   \
  X(erf, dl_erf(x0))                                                                   \
  X(sqrt, dl_sqrt(x0))                                                                 \
  X(abs, dl_abs(x0))                                                                   \
  X(relu, dl_relu(x0))                                                                 \
  X(sigmoid, dl_sigmoid(x0))                                                           \
  X(tanh, dl_tanh(x0))                                                                 \
  X(gelu_tanh, dl_gelu_tanh(x0))                                                       \
  X(gelu, dl_gelu(x0))                                                                 \
  X(silu, dl_silu(x0))                                                                 \
  X(softplus, dl_softplus(x0))                                                         \
  X(square, dl_square(x0))
/* The element-wise ops with one number parameter p0 (not differentiated),
 * as X(name, expression in x0 and p0). */
#define DL_OPS_UNARY_P(X)                                                              \
  X(leaky_relu, dl_leaky_relu(x0, p0))                                                 \
  X(elu, dl_elu(x0, p0))                                                               \
  X(pow_scalar, dl_pow(x0, p0))                                                        \
  X(add_scalar, dl_add(x0, p0))                                                        \
  X(mul_scalar, dl_mul(x0, p0))
/* The binary element-wise ops, as X(name, expression in x0 and x1); both
 * inputs broadcast. */
#define DL_OPS_BINARY(X)                                                               \
  X(add, dl_add(x0, x1))                                                               \
  X(sub, dl_sub(x0, x1))                                                               \
  X(mul, dl_mul(x0, x1))                                                               \
  X(div, dl_div(x0, x1))                                                               \
  X(pow, dl_pow(x0, x1))                                                               \
  X(maximum, dl_maximum(x0, x1))                                                           \
  X(minimum, dl_minimum(x0, x1))

#ifndef DL__SCALAR_ONLY

/* >>plan ------------------------------------------------------------------- */

enum { DL__K_C32 = 1, DL__K_C64, DL__K_G32, DL__K_G64 };
#define DL__ROW_CHUNK 4096

/* How a DL_ASSIGN runs, derived from the probe: the contiguous path, or the
 * general one over (rows x inner) with dimensions collapsed where possible. */
typedef struct dl__plan {
  int kind, nops, nd;
  const dl_ctx *ctx;
  int64_t numel, inner, rows, chunks, tiles;
  int64_t shape[DL_MAX_DIMS];                          /* collapsed outer shape */
  int64_t ystr[DL_MAX_DIMS];                           /* dst strides (collapsed) */
  int64_t ostr[DL__MAX_OPERANDS][DL_MAX_DIMS];         /* operand strides, 0 = broadcast */
  int64_t yinc, oinc[DL__MAX_OPERANDS];
  const dl_tensor *ops[DL__MAX_OPERANDS];
  size_t esize;
} dl__plan;

DL_API void dl__probe_begin(dl__probe *p, const dl_tensor *dst, const char *expr,
                            const char *file, int line) {
  p->dst = dst;
  p->expr = expr;
  p->file = file;
  p->line = line;
  p->nops = 0;
  if (dst->dtype != DL_F32 && dst->dtype != DL_F64)
    dl_panic_at(dst->ctx, file, line, "DL_ASSIGN",
                "destination %s must be f32 or f64 in `%s`", DL_SHAPESTR(dst), expr);
  if (dst->device != DL_CPU)
    dl_panic_at(dst->ctx, file, line, "DL_ASSIGN",
                "destination %s is on the GPU: DL_ASSIGN runs on the host (its expression is compiled "
                "by the C compiler); on the GPU use an op of the list or a user op with its "
                "DL_GPU_DEFINE_OP line compiled by nvcc: `%s`", DL_SHAPESTR(dst), expr);
}

/* Byte range [lo, hi) that a tensor's elements span. */
DL_API void dl__span(const dl_tensor *t, const char **lo, const char **hi) {
  int64_t last = 0;
  int d;
  for (d = 0; d < t->ndim; d++) last += (t->shape[d] - 1) * t->strides[d];
  *lo = (const char *)t->data;
  *hi = t->data && t->numel > 0 ? (const char *)t->data + (size_t)(last + 1) * dl_dtype_size(t->dtype) : *lo; /* empty: no span */
}

DL_API void dl__plan_make(dl__plan *pl, const dl__probe *p) {
  const dl_tensor *y = p->dst;
  const char *ylo, *yhi;
  int k, d, contig = dl_tensor_is_contiguous(y), f64 = y->dtype == DL_F64;
  int64_t str[DL__MAX_OPERANDS + 1][DL_MAX_DIMS], shp[DL_MAX_DIMS];
  int nd;
  memset(pl, 0, sizeof *pl);
  pl->ctx = y->ctx;
  pl->nops = p->nops;
  pl->numel = y->numel;
  pl->esize = dl_dtype_size(y->dtype);
  if (y->numel == 0) { pl->kind = 0; return; }
  dl__span(y, &ylo, &yhi);
  for (k = 0; k < p->nops; k++) {
    const dl_tensor *t = p->ops[k];
    const char *lo, *hi;
    pl->ops[k] = t;
    if (t->numel == 0) continue;
    dl__span(t, &lo, &hi);
    if (lo < yhi && ylo < hi &&
        !(t->data == y->data && dl_tensor_same_shape(t, y) &&
          !memcmp(t->strides, y->strides, sizeof(int64_t) * (size_t)y->ndim)))
      dl_panic_at(y->ctx, p->file, p->line, "DL_ASSIGN",
                  "operand %s overlaps destination %s without being the same view in `%s`",
                  DL_SHAPESTR(t), DL_SHAPESTR(y), p->expr);
    if (!dl_tensor_same_shape(t, y) || !dl_tensor_is_contiguous(t)) contig = 0;
  }
  if (contig) { pl->kind = f64 ? DL__K_C64 : DL__K_C32; return; }
  /* general: operand strides aligned to dst, size-1 dims dropped, mergeable dims merged */
  nd = 0;
  for (d = 0; d < y->ndim; d++) {
    if (y->shape[d] == 1) continue;
    shp[nd] = y->shape[d];
    str[0][nd] = y->strides[d];
    for (k = 0; k < p->nops; k++) {
      const dl_tensor *t = p->ops[k];
      int td = d - (y->ndim - t->ndim);
      str[k + 1][nd] = (td < 0 || t->shape[td] == 1) ? 0 : t->strides[td];
    }
    if (nd > 0) {
      int merge = 1;
      for (k = 0; k <= p->nops && merge; k++)
        merge = str[k][nd - 1] == str[k][nd] * shp[nd];
      if (merge) {
        shp[nd - 1] *= shp[nd];
        for (k = 0; k <= p->nops; k++) str[k][nd - 1] = str[k][nd];
        continue;
      }
    }
    nd++;
  }
  if (nd == 0) { shp[0] = 1; for (k = 0; k <= p->nops; k++) str[k][0] = 0; nd = 1; }
  pl->inner = shp[nd - 1];
  pl->yinc = str[0][nd - 1];
  for (k = 0; k < p->nops; k++) pl->oinc[k] = str[k + 1][nd - 1];
  pl->nd = nd - 1;
  pl->rows = 1;
  for (d = 0; d < nd - 1; d++) {
    pl->shape[d] = shp[d];
    pl->ystr[d] = str[0][d];
    for (k = 0; k < p->nops; k++) pl->ostr[k][d] = str[k + 1][d];
    pl->rows *= shp[d];
  }
  pl->chunks = (pl->inner + DL__ROW_CHUNK - 1) / DL__ROW_CHUNK;
  pl->tiles = pl->rows * pl->chunks;
  pl->kind = f64 ? DL__K_G64 : DL__K_G32;
}

/* Set the cursor to tile `tile`; returns the dst row pointer and [*j0, *j1). */
DL_API char *dl__plan_tile(const dl__plan *pl, const dl_tensor *y, dl__gcur *g, int64_t tile,
                           int64_t *j0, int64_t *j1) {
  int64_t row = tile / pl->chunks, c = tile % pl->chunks, yoff = 0, off[DL__MAX_OPERANDS] = {0};
  int d, k;
  for (d = pl->nd - 1; d >= 0; d--) {
    int64_t i = row % pl->shape[d];
    row /= pl->shape[d];
    yoff += i * pl->ystr[d];
    for (k = 0; k < pl->nops; k++) off[k] += i * pl->ostr[k][d];
  }
  g->nops = pl->nops;
  for (k = 0; k < pl->nops; k++) {
    g->ops[k] = pl->ops[k];
    g->base[k] = (const char *)pl->ops[k]->data + (size_t)off[k] * pl->esize;
    g->inc[k] = pl->oinc[k];
  }
  *j0 = c * DL__ROW_CHUNK;
  *j1 = *j0 + DL__ROW_CHUNK < pl->inner ? *j0 + DL__ROW_CHUNK : pl->inner;
  return (char *)y->data + (size_t)yoff * pl->esize;
}

/* >>loops ------------------------------------------------------------------ */

#define DL__BLOCK 8192

/* The overlap check in dl__plan_make guarantees that an element of dst is
 * only ever read at its own index, so the loops carry no dependence. gcc
 * gets told so (with OpenMP, `omp simd` also makes -O2 vectorise); clang
 * vectorises without being told, and its assume_safety hint would warn on
 * every f64 loop that calls libm. */
#if defined(__GNUC__) && !defined(__clang__) && defined(_OPENMP)
#define DL__IVDEP _Pragma("omp simd")
#elif defined(__GNUC__) && !defined(__clang__)
#define DL__IVDEP _Pragma("GCC ivdep")
#else
#define DL__IVDEP
#endif

#ifndef __cplusplus
/* Both loops run on core.h's DL_PARALLEL_FOR: blocks (contiguous) or tiles
 * (general), a fixed share of them for each member of the ctx's team above
 * its threshold, behind the team guard, flush-to-zero per the ctx on every
 * worker. */

/* Contiguous: blocks of DL__BLOCK elements. */
#define DL__LOOP_C(T, CUR, expr)                                                       \
  {                                                                                    \
    T *const dl__out = (T *)dl__y->data;                                               \
    const int64_t dl__n = dl__pl.numel;                                                \
    DL_PARALLEL_FOR(dl__y->ctx, dl__n, (dl__n + DL__BLOCK - 1) / DL__BLOCK, dl__b, {    \
      const int64_t dl__lo = dl__b * DL__BLOCK;                                        \
      const int64_t dl__hi = dl__lo + DL__BLOCK < dl__n ? dl__lo + DL__BLOCK : dl__n;  \
      int64_t dl__i;                                                                   \
      DL__IVDEP                                                                        \
      for (dl__i = dl__lo; dl__i < dl__hi; dl__i++) {                                  \
        const CUR dl__c = {dl__i};                                                     \
        const CUR *const dl__tag = &dl__c;                                             \
        const T *const dl__ptag = 0;                                                   \
        (void)dl__tag; (void)dl__ptag;                                                 \
        dl__out[dl__i] = (expr);                                                       \
      }                                                                                \
    });                                                                                \
  }

/* General: tiles of (row, chunk of the inner dimension). */
#define DL__LOOP_G(T, CUR, expr)                                                       \
  DL_PARALLEL_FOR(dl__y->ctx, dl__pl.numel, dl__pl.tiles, dl__t, {                      \
    int64_t dl__j0, dl__j1;                                                            \
    CUR dl__c;                                                                         \
    T *const dl__row = (T *)(void *)dl__plan_tile(&dl__pl, dl__y, &dl__c.g, dl__t,     \
                                                  &dl__j0, &dl__j1);                   \
    const CUR *const dl__tag = &dl__c;                                                 \
    const T *const dl__ptag = 0;                                                       \
    (void)dl__tag; (void)dl__ptag;                                                     \
    for (dl__c.g.j = dl__j0; dl__c.g.j < dl__j1; dl__c.g.j++)                          \
      dl__row[dl__c.g.j * dl__pl.yinc] = (expr);                                       \
  });

/* DL_ASSIGN(dst, expr): see the top of this file. A statement. */
#define DL_ASSIGN(dst, expr)                                                           \
  do {                                                                                 \
    dl_tensor *const dl__y = (dst);                                                    \
    dl__plan dl__pl;                                                                   \
    {                                                                                  \
      dl__probe dl__pr;                                                                \
      dl__probe *const dl__tag = &dl__pr, *const dl__ptag = &dl__pr;                   \
      (void)dl__tag; (void)dl__ptag;                                                   \
      dl__probe_begin(&dl__pr, dl__y, #expr, __FILE__, __LINE__);                      \
      (void)(expr);                                                                    \
      dl__plan_make(&dl__pl, &dl__pr);                                                 \
    }                                                                                  \
    switch (dl__pl.kind) {                                                             \
      case DL__K_C32: DL__LOOP_C(float, dl__cf32, expr) break;                         \
      case DL__K_C64: DL__LOOP_C(double, dl__cf64, expr) break;                        \
      case DL__K_G32: DL__LOOP_G(float, dl__gf32, expr) break;                         \
      case DL__K_G64: DL__LOOP_G(double, dl__gf64, expr) break;                        \
      default: break;                                                                  \
    }                                                                                  \
  } while (0)
#else /* C++: the expression is a tree of nodes (dual.h), built once */

/* The loops of DL_ASSIGN in C++: the same plan, blocks and tiles as C's,
 * the element computed by the node tree e in T (file-local, as dual.h's). */
namespace {
template <class T, class E> inline void dl__xloop_c(dl_tensor *y, const dl__plan &pl, const E &e) {
  T *const out = (T *)y->data;
  const int64_t n = pl.numel;
  DL_PARALLEL_FOR(y->ctx, n, (n + DL__BLOCK - 1) / DL__BLOCK, b, {
    const int64_t lo = b * DL__BLOCK;
    const int64_t hi = lo + DL__BLOCK < n ? lo + DL__BLOCK : n;
    int64_t i;
    DL__IVDEP
    for (i = lo; i < hi; i++) {
      const dl__xcc c = {i};
      out[i] = e.template ev<T>(c);
    }
  });
}
template <class T, class E> inline void dl__xloop_g(dl_tensor *y, const dl__plan &pl, const E &e) {
  DL_PARALLEL_FOR(y->ctx, pl.numel, pl.tiles, t, {
    int64_t j0, j1;
    dl__gcur c;
    T *const row = (T *)(void *)dl__plan_tile(&pl, y, &c, t, &j0, &j1);
    for (c.j = j0; c.j < j1; c.j++) row[c.j * pl.yinc] = e.template ev<T>(c);
  });
}
template <class E> inline void dl__xassign(dl_tensor *y, const E &e, const char *text, const char *file, int line) {
  dl__plan pl;
  dl__probe pr;
  dl__probe_begin(&pr, y, text, file, line);
  e.probe(&pr);
  dl__plan_make(&pl, &pr);
  switch (pl.kind) {
    case DL__K_C32: dl__xloop_c<float>(y, pl, e); break;
    case DL__K_C64: dl__xloop_c<double>(y, pl, e); break;
    case DL__K_G32: dl__xloop_g<float>(y, pl, e); break;
    case DL__K_G64: dl__xloop_g<double>(y, pl, e); break;
    default: break;
  }
}
} /* namespace */
/* DL_ASSIGN(dst, expr) in C++: expr is evaluated once, into its tree. */
#define DL_ASSIGN(dst, expr) dl__xassign((dst), dl__xwrap(expr), #expr, __FILE__, __LINE__)
#endif /* __cplusplus */

/* >>backward machinery ----------------------------------------------------- */

/* The checks of a generated backward rule (the element-wise driver then does
 * the walk): gy f32/f64; each input of gy's dtype, broadcasting to gy; each
 * given gradient of its input's shape and dtype. Panics naming op. */
DL_API void dl__bwd_check(const char *op, const dl_tensor *gy, int n, const dl_tensor *x0, const dl_tensor *x1,
                          dl_tensor *g0, dl_tensor *g1) {
  int k, d;
  const dl_tensor *xs[2] = {x0, x1};
  dl_tensor *gs[2] = {g0, g1};
  if (gy->dtype != DL_F32 && gy->dtype != DL_F64)
    DL_PANIC(gy->ctx, op, "gradient %s must be f32 or f64", DL_SHAPESTR(gy));
  for (k = 0; k < n; k++) {
    const dl_tensor *x = xs[k];
    int off = gy->ndim - x->ndim;
    if (x->dtype != gy->dtype)
      DL_PANIC(gy->ctx, op, "dtype mismatch: gradient %s, input %s", DL_SHAPESTR(gy), DL_SHAPESTR(x));
    if (gs[k]) dl__check_same(gs[k], x, op, 1);
    if (off < 0)
      DL_PANIC(gy->ctx, op, "input %s has more dimensions than the gradient %s", DL_SHAPESTR(x), DL_SHAPESTR(gy));
    for (d = 0; d < gy->ndim; d++) {
      int xd = d - off;
      if (xd >= 0 && x->shape[xd] != 1 && x->shape[xd] != gy->shape[d])
        DL_PANIC(gy->ctx, op, "shape mismatch: input %s does not broadcast to gradient %s",
                 DL_SHAPESTR(x), DL_SHAPESTR(gy));
    }
  }
}

DL_API void dl__unused(int n, ...) { (void)n; }

/* >>element-wise driver --------------------------------------------------- */

/* The op list's tensor functions (and a user's DL_DEFINE_OP ones) run
 * through one driver: each op contributes two small kernels, float and
 * double, that do one of three things over n contiguous elements, in the
 * slots dl/gpu/abi.h uses for the GPU:
 *   DL__EW_FWD  a[0][i] = f(a[1][i], a[2][i])
 *   DL__EW_JVP  a[0][i] = df/dx0 * a[3][i] + df/dx1 * a[4][i]   (dual numbers)
 *   DL__EW_BWD  a[3][i] += a[0][i] * df/dx0,  a[4][i] += a[0][i] * df/dx1
 *               (a NULL slot is skipped)
 * The driver checks dtypes and shapes (naming the op), and runs contiguous
 * same-shape tensors straight through dl_parallel_for; contiguous operands
 * that broadcast along leading dimensions only (a bias, positions) by whole
 * rows (dl__ew_rows_plan); views whose rows are contiguous (a slice of the
 * last dimension) row by row in place (dl__ew_srows); anything else (other
 * broadcasts, other strided views) goes through tiles gathered into stack
 * buffers. A gradient whose input was
 * broadcast receives its contributions in element order (rows: each column
 * down the rows in order, the columns over the team; tiles: serially), so
 * the sums do not depend on the thread count. One op thus compiles to six short loops, whatever the layouts. */
enum { DL__EW_FWD, DL__EW_JVP, DL__EW_BWD };
/* p0 of an op's optional parameter list: DL__PV(0.0) is 0.0, DL__PV(0.0, p0) is p0. */
#define DL__PV(...) DL__PV_(__VA_ARGS__, 0.0, 0.0)
#define DL__PV_(a, b, ...) b
#define DL__EW_TILE 256
typedef void (*dl__ew_kern)(int mode, int64_t n, void *const *a, double p0);
typedef struct dl__ew_job {
  dl__ew_kern k;
  int mode, nd, bcast, zero; /* zero: bit k-3 for a gradient slot k (3, 4) to zero piece by piece */
  double p0;
  size_t es;
  int64_t shape[DL_MAX_DIMS], st[5][DL_MAX_DIMS];
  char *base[5];
  int64_t inner, rows, rc[5]; /* row form (dl__ew_rows_plan): rows of `inner` elements; slot k repeats every rc[k] rows */
} dl__ew_job;
/* Contiguous: [lo, hi) of every slot. */
DL_API void dl__ew_range(void *arg, int64_t lo, int64_t hi) {
  const dl__ew_job *j = (const dl__ew_job *)arg;
  void *a[5];
  int k;
  if (j->zero) { /* a gradient not zeroed yet (DL_TENSOR__UNZEROED): each piece just before it is added to */
    const int64_t piece = 1024;
    int64_t p;
    for (p = lo; p < hi; p += piece) {
      const int64_t e = hi - p < piece ? hi - p : piece;
      for (k = 0; k < 5; k++) a[k] = j->base[k] ? j->base[k] + (size_t)p * j->es : NULL;
      if (j->zero & 1) memset(a[3], 0, (size_t)e * j->es);
      if (j->zero & 2) memset(a[4], 0, (size_t)e * j->es);
      j->k(j->mode, e, a, j->p0);
    }
    return;
  }
  for (k = 0; k < 5; k++) a[k] = j->base[k] ? j->base[k] + (size_t)lo * j->es : NULL;
  j->k(j->mode, hi - lo, a, j->p0);
}
/* Row form: every slot contiguous and, padded with leading 1s, of shape
 * [1, ..., 1, out.shape[s:]] for some s (a bias [C] or positions [T, C]
 * added to [B, T, C]). The output is cut into rows of inner = the product
 * of out.shape[D:] (D the largest s), and row r of slot k is its row
 * r % rc[k]: the kernel runs on whole rows, no gathering. Returns 0 where
 * the slots are not of that form or the rows are short (the tiles then). */
DL_API int dl__ew_rows_plan(dl__ew_job *j, const dl_tensor *const *slot, const dl_tensor *out) {
  int k, d, D = 0;
  int64_t inner = 1;
  for (k = 0; k < 5; k++) {
    const dl_tensor *t = slot[k];
    int off, s;
    if (!t) continue;
    if (!dl_tensor_is_contiguous(t)) return 0;
    off = out->ndim - t->ndim;
    for (s = out->ndim; s > 0 && (s - 1 < off ? 1 : t->shape[s - 1 - off]) == out->shape[s - 1]; s--) {}
    for (d = 0; d < s; d++)
      if ((d < off ? 1 : t->shape[d - off]) != 1) return 0;
    if (s > D) D = s;
  }
  for (d = D; d < out->ndim; d++) inner *= out->shape[d];
  if (inner < 64 || out->numel == 0) return 0;
  j->inner = inner;
  j->rows = out->numel / inner;
  for (k = 0; k < 5; k++) j->rc[k] = slot[k] ? slot[k]->numel / inner : 1;
  return 1;
}
/* Row form: rows [lo, hi), each whole. */
DL_API void dl__ew_rows(void *arg, int64_t lo, int64_t hi) {
  const dl__ew_job *j = (const dl__ew_job *)arg;
  void *a[5];
  int64_t r;
  int k;
  for (r = lo; r < hi; r++) {
    for (k = 0; k < 5; k++) a[k] = j->base[k] ? j->base[k] + (size_t)(r % j->rc[k] * j->inner) * j->es : NULL;
    j->k(j->mode, j->inner, a, j->p0);
  }
}
/* Row form with a broadcast gradient: columns [lo, hi) of every row, the
 * rows in order, so a repeated gradient row gets its sums in element order
 * (the bits of the serial tiles) while the columns split over the team. */
DL_API void dl__ew_cols(void *arg, int64_t lo, int64_t hi) {
  const dl__ew_job *j = (const dl__ew_job *)arg;
  void *a[5];
  int64_t r;
  int k;
  for (r = 0; r < j->rows; r++) {
    for (k = 0; k < 5; k++)
      a[k] = j->base[k] ? j->base[k] + (size_t)(r % j->rc[k] * j->inner + lo) * j->es : NULL;
    j->k(j->mode, hi - lo, a, j->p0);
  }
}
/* Strided rows: every slot has unit stride along the last dimension and
 * none broadcasts there (a slice of the last dimension, as SwiGLU's two
 * halves; a view that permutes only the outer dimensions): rows [lo, hi)
 * of the output, each run by the kernel in place, nothing gathered. */
DL_API void dl__ew_srows(void *arg, int64_t lo, int64_t hi) {
  const dl__ew_job *j = (const dl__ew_job *)arg;
  const int64_t n = j->shape[j->nd - 1];
  int64_t r;
  for (r = lo; r < hi; r++) {
    int64_t q = r, off[5] = {0, 0, 0, 0, 0};
    void *a[5];
    int k, d;
    for (d = j->nd - 2; d >= 0; d--) {
      const int64_t i = q % j->shape[d];
      q /= j->shape[d];
      for (k = 0; k < 5; k++) off[k] += i * j->st[k][d];
    }
    for (k = 0; k < 5; k++) a[k] = j->base[k] ? j->base[k] + (size_t)off[k] * j->es : NULL;
    j->k(j->mode, n, a, j->p0);
  }
}
/* Whether dl__ew_srows fits the job: rows of at least 16 elements, unit
 * stride along them in every slot, no broadcast gradient (those take
 * their sums serially, in element order). */
DL_API int dl__ew_srows_fit(const dl__ew_job *j) {
  int k;
  if (j->bcast || j->nd < 2 || j->shape[j->nd - 1] < 16) return 0;
  for (k = 0; k < 5; k++)
    if (j->base[k] && j->st[k][j->nd - 1] != 1) return 0;
  return 1;
}
/* General: elements [lo, hi) of the output's row-major order, through tiles. */
DL_API void dl__ew_tiles(void *arg, int64_t lo, int64_t hi) {
  const dl__ew_job *j = (const dl__ew_job *)arg;
  union { float f[DL__EW_TILE]; double d[DL__EW_TILE]; } buf[5];
  int64_t off[5][DL__EW_TILE], i0;
  const int outs = j->mode == DL__EW_BWD ? 0x18 : 0x1; /* slots written: 3, 4 or 0 */
  for (i0 = lo; i0 < hi; i0 += DL__EW_TILE) {
    const int64_t m = hi - i0 < DL__EW_TILE ? hi - i0 : DL__EW_TILE;
    int64_t e, idx[DL_MAX_DIMS], r = i0;
    void *a[5];
    int k, d;
    for (d = j->nd - 1; d >= 0; d--) { idx[d] = r % j->shape[d]; r /= j->shape[d]; }
    for (e = 0; e < m; e++) {
      for (k = 0; k < 5; k++) {
        if (!j->base[k]) continue;
        off[k][e] = 0;
        for (d = 0; d < j->nd; d++) off[k][e] += idx[d] * j->st[k][d];
      }
      for (d = j->nd - 1; d >= 0 && ++idx[d] == j->shape[d]; d--) idx[d] = 0;
    }
    for (k = 0; k < 5; k++) {
      a[k] = j->base[k] ? (void *)buf[k].d : NULL;
      if (!j->base[k]) continue;
      if (outs >> k & 1) memset(buf[k].d, 0, (size_t)m * j->es);
      else
        for (e = 0; e < m; e++)
          memcpy((char *)buf[k].d + (size_t)e * j->es, j->base[k] + (size_t)off[k][e] * j->es, j->es);
    }
    j->k(j->mode, m, a, j->p0);
    for (k = 0; k < 5; k++) {
      if (!j->base[k] || !(outs >> k & 1)) continue;
      if (j->mode != DL__EW_BWD)
        for (e = 0; e < m; e++)
          memcpy(j->base[k] + (size_t)off[k][e] * j->es, (const char *)buf[k].d + (size_t)e * j->es, j->es);
      else if (j->es == sizeof(float))
        for (e = 0; e < m; e++) ((float *)(void *)j->base[k])[off[k][e]] += buf[k].f[e];
      else
        for (e = 0; e < m; e++) ((double *)(void *)j->base[k])[off[k][e]] += buf[k].d[e];
    }
  }
}
/* Runs op `op` (its kernels k32 / k64) in `mode` over the slots (NULL: absent);
 * slot 0 is y (FWD), ty (JVP) or gy (BWD) and sets the shape. */
DL_API void dl__ew_run(const char *op, dl__ew_kern k32, dl__ew_kern k64, int mode, const dl_tensor *out,
                       const dl_tensor *x0, const dl_tensor *x1, const dl_tensor *s3, const dl_tensor *s4,
                       double p0) {
  const dl_tensor *slot[5];
  dl__ew_job j;
  int k, d, contig;
  const char *ylo, *yhi;
  slot[0] = out; slot[1] = x0; slot[2] = x1; slot[3] = s3; slot[4] = s4;
  if (out->dtype != DL_F32 && out->dtype != DL_F64)
    DL_PANIC(out->ctx, op, "%s must be f32 or f64", DL_SHAPESTR(out));
  memset(&j, 0, sizeof j);
  j.k = out->dtype == DL_F32 ? k32 : k64;
  j.mode = mode;
  j.p0 = p0;
  j.es = dl_dtype_size(out->dtype);
  j.nd = out->ndim;
  for (d = 0; d < out->ndim; d++) j.shape[d] = out->shape[d];
  contig = dl_tensor_is_contiguous(out);
  dl__span(out, &ylo, &yhi);
  for (k = 0; k < 5; k++) {
    const dl_tensor *t = slot[k];
    int off;
    if (!t) continue;
    j.base[k] = (char *)t->data;
    if (t->dtype != out->dtype)
      DL_PANIC(out->ctx, op, "dtype mismatch: %s and %s (never converted)", DL_SHAPESTR(t), DL_SHAPESTR(out));
    if (t->device != DL_CPU)
      DL_PANIC(out->ctx, op, "%s is on the GPU and %s on the host: move both to one device", DL_SHAPESTR(t),
               DL_SHAPESTR(out));
    off = out->ndim - t->ndim;
    if (off < 0)
      DL_PANIC(out->ctx, op, "shape mismatch: %s does not broadcast to %s", DL_SHAPESTR(t), DL_SHAPESTR(out));
    for (d = 0; d < out->ndim; d++) {
      const int64_t sz = d < off ? 1 : t->shape[d - off];
      if (sz != out->shape[d] && sz != 1)
        DL_PANIC(out->ctx, op, "shape mismatch: %s does not broadcast to %s", DL_SHAPESTR(t), DL_SHAPESTR(out));
      j.st[k][d] = (sz == 1 && out->shape[d] != 1) || d < off ? 0 : t->strides[d - off];
      if (sz != out->shape[d]) {
        contig = 0;
        if (mode == DL__EW_BWD && k >= 3) j.bcast = 1;
      }
    }
    if (off != 0 || !dl_tensor_is_contiguous(t)) contig = 0;
    /* an input that overlaps the output must be the very same view (y = f(y) in place) */
    if (k > 0 && t->numel > 0 && out->numel > 0 && (mode != DL__EW_BWD || k >= 3)) {
      const char *lo, *hi;
      dl__span(t, &lo, &hi);
      if (lo < yhi && ylo < hi &&
          !(t->data == out->data && dl_tensor_same_shape(t, out) &&
            !memcmp(t->strides, out->strides, sizeof(int64_t) * (size_t)out->ndim)) && mode != DL__EW_BWD)
        DL_PANIC(out->ctx, op, "%s overlaps the output %s without being the same view", DL_SHAPESTR(t),
                 DL_SHAPESTR(out));
    }
  }
  for (k = 3; k < 5; k++) /* a tape gradient not zeroed yet (dl__tape_grad_w): zeroed here, once */
    if (mode == DL__EW_BWD && slot[k] && (slot[k]->flags & DL_TENSOR__UNZEROED)) {
      ((dl_tensor *)(void *)(size_t)slot[k])->flags &= ~(unsigned)DL_TENSOR__UNZEROED;
      if (contig && out->numel > 0) j.zero |= 1 << (k - 3);
      else if (slot[k]->data) memset(slot[k]->data, 0, (size_t)slot[k]->numel * j.es);
    }
  if (out->numel == 0) return;
  if (contig) dl_parallel_for(out->ctx, out->numel, 8192, out->numel, dl__ew_range, &j);
  else if (dl__ew_rows_plan(&j, slot, out)) {
    if (j.bcast) dl_parallel_for(out->ctx, j.inner, 256, out->numel, dl__ew_cols, &j);
    else dl_parallel_for(out->ctx, j.rows, (8192 + j.inner - 1) / j.inner, out->numel, dl__ew_rows, &j);
  } else if (dl__ew_srows_fit(&j)) {
    const int64_t inner = j.shape[j.nd - 1];
    dl_parallel_for(out->ctx, out->numel / inner, (8192 + inner - 1) / inner, out->numel, dl__ew_srows, &j);
  } else if (j.bcast) dl__ew_tiles(&j, 0, out->numel); /* one thread, in element order */
  else dl_parallel_for(out->ctx, out->numel, 8192, out->numel, dl__ew_tiles, &j);
}

/* >>device dispatch (DL_USE_CUDA) ------------------------------------------ */
#ifdef DL_USE_CUDA
#if defined(__GNUC__) || defined(__clang__)
#define DL__WEAK __attribute__((weak))
#else
#error "dl.h: DL_USE_CUDA needs gcc or clang (weak symbols find a user op's GPU launcher)"
#endif
/* Strides of operand t aligned to shape[0..nd) (0 along broadcast sizes);
 * panics naming op when t does not broadcast to it. Returns whether t is
 * contiguous with exactly that shape. */
DL_API int dl__ew_strides(const char *op, const dl_tensor *t, const dl_tensor *out, int nd,
                          const int64_t *shape, int64_t *st) {
  int d, off = nd - t->ndim, contig = t->ndim == nd && dl_tensor_is_contiguous(t);
  if (off < 0) DL_PANIC(out->ctx, op, "%s does not broadcast to %s", DL_SHAPESTR(t), DL_SHAPESTR(out));
  for (d = 0; d < nd; d++) {
    int64_t sz = d < off ? 1 : t->shape[d - off];
    if (sz != shape[d] && sz != 1)
      DL_PANIC(out->ctx, op, "%s does not broadcast to %s", DL_SHAPESTR(t), DL_SHAPESTR(out));
    st[d] = (d < off || (sz == 1 && shape[d] != 1)) ? 0 : t->strides[d - off];
    if (sz != shape[d]) contig = 0;
  }
  return contig;
}
/* One element-wise op of the list on the device: fn is its launcher
 * (FAM__gpu from src_gpu/core.cu or the user's DL_GPU_DEFINE_OP line), the
 * slots as dl/gpu/abi.h describes for `mode`; out (y, ty or gy) contiguous.
 * Every given tensor must be on the device. */
/* Fills e and ptr for the slots (see dl/gpu/abi.h); returns e->n. */
DL_API int64_t dl__gpu_ew_prep(const char *op, int mode, const dl_tensor *out, const dl_tensor *x0, const dl_tensor *x1,
                               const dl_tensor *s3, const dl_tensor *s4, dlg_ew *ep, void **ptr) {
  const dl_tensor *slot[5];
  dlg_ew e;
  int k, d, contig = 1;
  slot[0] = out; slot[1] = x0; slot[2] = x1; slot[3] = s3; slot[4] = s4;
  if (!dl_tensor_is_contiguous(out))
    DL_PANIC(out->ctx, op, "on the GPU the output %s must be contiguous", DL_SHAPESTR(out));
  memset(&e, 0, sizeof e);
  e.ndim = out->ndim;
  e.n = out->numel;
  for (d = 0; d < out->ndim; d++) e.shape[d] = out->shape[d];
  for (k = 0; k < 5; k++) {
    ptr[k] = slot[k] ? slot[k]->data : NULL;
    if (!slot[k]) continue;
    if (slot[k]->device != DL_CUDA)
      DL_PANIC(out->ctx, op, "%s is on the host and %s on the GPU: move both to one device",
               DL_SHAPESTR(slot[k]), DL_SHAPESTR(out));
    if (slot[k]->dtype != out->dtype)
      DL_PANIC(out->ctx, op, "dtype mismatch: %s and %s (never converted)", DL_SHAPESTR(slot[k]),
               DL_SHAPESTR(out));
    contig &= dl__ew_strides(op, slot[k], out, out->ndim, e.shape, e.st[k]);
    if (mode == DLG_BWD && k >= 3)
      for (d = 0; d < out->ndim; d++) e.atomic |= e.st[k][d] == 0 && e.shape[d] > 1;
  }
  e.contig = contig;
  *ep = e;
  return e.n;
}
DL_API void dl__gpu_ew(const char *op, dlg_ew_fn fn, int mode, const dl_tensor *out, const dl_tensor *x0,
                       const dl_tensor *x1, const dl_tensor *s3, const dl_tensor *s4, double p0) {
  void *ptr[5];
  dlg_ew e;
  if (!fn)
    DL_PANIC(out->ctx, op, "no GPU kernel for this op: compile its definition line with nvcc too "
             "(DL_GPU_DEFINE_OP1/1P/2 in a .cu file, see dl/gpu/ew.cuh) and link it");
  if (dl__gpu_ew_prep(op, mode, out, x0, x1, s3, s4, &e, ptr) == 0) return;
  dl__gpu_ok(out, op, fn(dl__gpu_h(out, op), (int)out->dtype, mode, &e, ptr, p0));
}
/* the launcher of family FAM (dl/gpu/ew.cuh defines it extern "C"), a weak
 * reference: NULL when no kernel was linked for it */
#ifdef __cplusplus
#define DL__GPU_EXTERN_C extern "C"
#else
#define DL__GPU_EXTERN_C
#endif
#define DL__GPU_DECL(FAM)                                                              \
  DL__GPU_EXTERN_C int FAM##__gpu(dlg_handle *h, int dtype, int mode, const dlg_ew *e, void *const ptr[5], \
                                  double p0) DL__WEAK;
DL_API int dl__gpu_on(const dl_tensor *a, const dl_tensor *b, const dl_tensor *c, const dl_tensor *d,
                      const dl_tensor *e) {
  return (a && a->device == DL_CUDA) || (b && b->device == DL_CUDA) || (c && c->device == DL_CUDA) ||
         (d && d->device == DL_CUDA) || (e && e->device == DL_CUDA);
}
#define DL__GPU_EW(op, FAM, mode, out, a, b, c, d, p)                                  \
  if (dl__gpu_on(out, a, b, c, d)) {                                                   \
    dl__gpu_ew(op, FAM##__gpu, mode, out, a, b, c, d, p);                               \
    return;                                                                            \
  }
#else
#define DL__GPU_DECL(FAM)
#define DL__GPU_EW(op, FAM, mode, out, a, b, c, d, p)
#endif


/* >>op generators ---------------------------------------------------------- */

/* One-input op: FAM the scalar family prefix, TN the tensor function prefix,
 * PD/PA extra number parameters (", double p0" / ", p0", or empty). */
#define DL__EW_KERN1(SC, FAM, S, sfx, dsfx, MK, ...)                                   \
  SC void FAM##_ewk_##sfx(int mode, int64_t n, void *const *a, double p0) {         \
    S *const DL__RESTRICT o = (S *)a[0];                                               \
    const S *const DL__RESTRICT x = (const S *)a[1];                                   \
    int64_t i;                                                                         \
    (void)p0;                                                                          \
    if (mode == DL__EW_FWD) {                                                          \
      DL__IVDEP for (i = 0; i < n; i++) o[i] = FAM##_##sfx(x[i] __VA_ARGS__);                  \
    } else if (mode == DL__EW_JVP) {                                                   \
      const S *const DL__RESTRICT t = (const S *)a[3];                                 \
      DL__IVDEP for (i = 0; i < n; i++) o[i] = FAM##_##dsfx(MK(x[i], t[i]) __VA_ARGS__).d;     \
    } else {                                                                           \
      S *const DL__RESTRICT g = (S *)a[3];                                             \
      DL__IVDEP for (i = 0; i < n; i++) g[i] += o[i] * FAM##_##dsfx(MK(x[i], (S)1) __VA_ARGS__).d; \
    }                                                                                  \
  }
#define DL__GEN_OP1(SC, VSC, FAM, TN, PD, PA, expr)                                    \
  DL_HD VSC float FAM##_f32(float x0 PD) { DL_SCALAR(float); return (expr); }            \
  DL_HD VSC double FAM##_f64(double x0 PD) { DL_SCALAR(double); return (expr); }         \
  DL_HD VSC dl_dual FAM##_dual(dl_dual x0 PD) { DL_SCALAR(dl_dual); return (expr); }     \
  DL_HD VSC dl_dual64 FAM##_dual64(dl_dual64 x0 PD) { DL_SCALAR(dl_dual64); return (expr); } \
  DL_HD VSC dl_dual2 FAM##_dual2(dl_dual2 x0 PD) { DL_SCALAR(dl_dual2); return (expr); } \
  /* second order at x[0] along t[0]: d[0] = f', d[1] = f'' t (seed k = 0) */         \
  SC void FAM##_d2(const double *x, const double *t, int k, double p0, double *d) {   \
    const dl_dual2 r_ = FAM##_dual2(dl_dual2_make(x[0], t[0], 1.0) PA);                \
    (void)k;                                                                           \
    (void)p0;                                                                          \
    d[0] = r_.d.v;                                                                     \
    d[1] = r_.d.d;                                                                     \
  }                                                                                    \
  SC dl__probe *FAM##_probe(dl__probe *x0 PD) { dl__unused(0 PA); return x0; }        \
  DL__GPU_DECL(FAM)                                                                    \
  DL__EW_KERN1(SC, FAM, float, f32, dual, dl_dual_make, PA)                            \
  DL__EW_KERN1(SC, FAM, double, f64, dual64, dl_dual64_make, PA)                       \
  /* y = f(x0), x0 broadcast to y */                                                   \
  SC void TN##_into(dl_tensor *y, const dl_tensor *x0_ PD) {                       \
    DL__GPU_EW(#TN, FAM, DLG_FWD, y, x0_, NULL, NULL, NULL, DL__PV(0.0 PA))            \
    dl__ew_run(#TN "_into", FAM##_ewk_f32, FAM##_ewk_f64, DL__EW_FWD, y, x0_, NULL, NULL, NULL, \
               DL__PV(0.0 PA));                                                        \
  }                                                                                    \
  /* forward mode: ty = f'(x0) * tx0, by the dual numbers; tx0 broadcasts to ty */     \
  SC void TN##_jvp(dl_tensor *ty, const dl_tensor *x0_, const dl_tensor *tx0_ PD) { \
    DL__GPU_EW(#TN "_jvp", FAM, DLG_JVP, ty, x0_, NULL, tx0_, NULL, DL__PV(0.0 PA))    \
    dl__ew_run(#TN "_jvp", FAM##_ewk_f32, FAM##_ewk_f64, DL__EW_JVP, ty, x0_, NULL, tx0_, NULL, \
               DL__PV(0.0 PA));                                                        \
  }                                                                                    \
  /* gx0 += gy * f'(x0); gx0 has x0's shape (summed over broadcast dims) */           \
  SC void TN##_backward(dl_tensor *gx0, const dl_tensor *gy, const dl_tensor *x0_ PD) { \
    if (!gx0) return;                                                                  \
    DL__GPU_EW(#TN "_backward", FAM, DLG_BWD, gy, x0_, NULL, gx0, NULL, DL__PV(0.0 PA)) \
    dl__bwd_check(#TN "_backward", gy, 1, x0_, NULL, gx0, NULL);                       \
    dl__ew_run(#TN "_backward", FAM##_ewk_f32, FAM##_ewk_f64, DL__EW_BWD, gy, x0_, NULL, gx0, NULL, \
               DL__PV(0.0 PA));                                                        \
  }

/* Two-input op (no extra parameters). */
#define DL__EW_KERN2(SC, FAM, S, sfx, dsfx, MK)                                        \
  SC void FAM##_ewk_##sfx(int mode, int64_t n, void *const *a, double p0) {         \
    S *const DL__RESTRICT o = (S *)a[0];                                               \
    const S *const DL__RESTRICT x = (const S *)a[1];                                   \
    const S *const DL__RESTRICT y = (const S *)a[2];                                   \
    int64_t i;                                                                         \
    (void)p0;                                                                          \
    if (mode == DL__EW_FWD) {                                                          \
      DL__IVDEP for (i = 0; i < n; i++) o[i] = FAM##_##sfx(x[i], y[i]);                \
    } else if (mode == DL__EW_JVP) {                                                   \
      const S *const DL__RESTRICT t0 = (const S *)a[3];                                \
      const S *const DL__RESTRICT t1 = (const S *)a[4];                                \
      DL__IVDEP for (i = 0; i < n; i++) o[i] = FAM##_##dsfx(MK(x[i], t0[i]), MK(y[i], t1[i])).d; \
    } else {                                                                           \
      S *const DL__RESTRICT g0 = (S *)a[3];                                            \
      S *const DL__RESTRICT g1 = (S *)a[4];                                            \
      if (g0) {                                                                        \
        DL__IVDEP for (i = 0; i < n; i++)                                              \
          g0[i] += o[i] * FAM##_##dsfx(MK(x[i], (S)1), MK(y[i], (S)0)).d;              \
      }                                                                                \
      if (g1) {                                                                        \
        DL__IVDEP for (i = 0; i < n; i++)                                              \
          g1[i] += o[i] * FAM##_##dsfx(MK(x[i], (S)0), MK(y[i], (S)1)).d;              \
      }                                                                                \
    }                                                                                  \
  }
#define DL__GEN_OP2(SC, VSC, FAM, TN, expr)                                             \
  DL_HD VSC float FAM##_f32(float x0, float x1) { DL_SCALAR(float); return (expr); }     \
  DL_HD VSC double FAM##_f64(double x0, double x1) { DL_SCALAR(double); return (expr); } \
  DL_HD VSC dl_dual FAM##_dual(dl_dual x0, dl_dual x1) { DL_SCALAR(dl_dual); return (expr); } \
  DL_HD VSC dl_dual64 FAM##_dual64(dl_dual64 x0, dl_dual64 x1) { DL_SCALAR(dl_dual64); return (expr); } \
  DL_HD VSC dl_dual2 FAM##_dual2(dl_dual2 x0, dl_dual2 x1) { DL_SCALAR(dl_dual2); return (expr); } \
  /* second order at (x[0], x[1]) along (t[0], t[1]), the seed on input k:      \
   * d[0] = df/dxk, d[1] = d2f/dxk dx0 t0 + d2f/dxk dx1 t1 */                     \
  SC void FAM##_d2(const double *x, const double *t, int k, double p0, double *d) {   \
    const dl_dual2 r_ = FAM##_dual2(dl_dual2_make(x[0], t[0], k == 0), dl_dual2_make(x[1], t[1], k == 1)); \
    (void)p0;                                                                          \
    d[0] = r_.d.v;                                                                     \
    d[1] = r_.d.d;                                                                     \
  }                                                                                    \
  SC dl__probe *FAM##_probe(dl__probe *x0, dl__probe *x1) { (void)x1; return x0; }     \
  DL__GPU_DECL(FAM)                                                                    \
  DL__EW_KERN2(SC, FAM, float, f32, dual, dl_dual_make)                                \
  DL__EW_KERN2(SC, FAM, double, f64, dual64, dl_dual64_make)                           \
  /* y = f(x0, x1), both broadcast to y */                                             \
  SC void TN##_into(dl_tensor *y, const dl_tensor *x0_, const dl_tensor *x1_) {    \
    DL__GPU_EW(#TN, FAM, DLG_FWD, y, x0_, x1_, NULL, NULL, 0.0)                        \
    dl__ew_run(#TN "_into", FAM##_ewk_f32, FAM##_ewk_f64, DL__EW_FWD, y, x0_, x1_, NULL, NULL, 0.0); \
  }                                                                                    \
  /* forward mode: ty = df/dx0 * tx0 + df/dx1 * tx1 (a 0-d zero tensor for no tangent) */ \
  SC void TN##_jvp(dl_tensor *ty, const dl_tensor *x0_, const dl_tensor *tx0_,      \
                       const dl_tensor *x1_, const dl_tensor *tx1_) {                  \
    DL__GPU_EW(#TN "_jvp", FAM, DLG_JVP, ty, x0_, x1_, tx0_, tx1_, 0.0)                \
    dl__ew_run(#TN "_jvp", FAM##_ewk_f32, FAM##_ewk_f64, DL__EW_JVP, ty, x0_, x1_, tx0_, tx1_, 0.0); \
  }                                                                                    \
  /* gx0 += gy * df/dx0, gx1 += gy * df/dx1, each summed to its input's shape */       \
  SC void TN##_backward(dl_tensor *gx0, dl_tensor *gx1, const dl_tensor *gy,        \
                            const dl_tensor *x0_, const dl_tensor *x1_) {              \
    DL__GPU_EW(#TN "_backward", FAM, DLG_BWD, gy, x0_, x1_, gx0, gx1, 0.0)             \
    dl__bwd_check(#TN "_backward", gy, 2, x0_, x1_, gx0, gx1);                         \
    if (!gx0 && !gx1) return;                                                          \
    dl__ew_run(#TN "_backward", FAM##_ewk_f32, FAM##_ewk_f64, DL__EW_BWD, gy, x0_, x1_, gx0, gx1, 0.0); \
  }

/* User ops: one line at file scope. x0 (and x1) are the inputs; in OP1P the
 * number p0 is a parameter of the op (not differentiated). */
#define DL_DEFINE_OP1(name, expr) DL__GEN_OP1(DL__LOCAL_GEN, DL__LOCAL_VAPI, name, name, , , expr) DL__CXX_USER1(name)
/* DL_DEFINE_OP1P(name, expr in x0 and p0): DL_DEFINE_OP1 with a number
 * parameter p0 that is not differentiated (name_into(y, x, p0) ...;
 * DL_T_MAP1P on the tape). */
#define DL_DEFINE_OP1P(name, expr)                                                     \
  DL__GEN_OP1(DL__LOCAL_GEN, DL__LOCAL_VAPI, name, name, DL__P1D, DL__P1A, expr) DL__CXX_USER1P(name)
/* DL_DEFINE_OP2(name, expr in x0 and x1): a binary user op, both inputs
 * broadcast (name_into(y, a, b), name_backward(ga, gb, gy, a, b) ...;
 * DL_T_MAP2 on the tape). */
#define DL_DEFINE_OP2(name, expr) DL__GEN_OP2(DL__LOCAL_GEN, DL__LOCAL_VAPI, name, name, expr) DL__CXX_USER2(name)
/* In C++ a user's op also gets its generic name, name(x) (name(x, p0),
 * name(a, b)): scalar math of any of the five types, or a node inside
 * DL_ASSIGN, as the library's dl_exp(x) ... are; DL_APPLY1(name, x) is
 * name(x). File-local (an unnamed namespace), as the C functions are. */
#ifdef __cplusplus
#define DL__CXX_USER1(name)                                                            \
  namespace {                                                                          \
  DL__CXX_FO1(name##__fo, name)                                                        \
  template <class A> inline typename dl__cxx_u<name##__fo, A>::type name(A a) {        \
    return dl__cxx_u<name##__fo, A>::go(a);                                            \
  }                                                                                    \
  }
#define DL__CXX_USER1P(name)                                                           \
  namespace {                                                                          \
  DL__CXX_FO1P(name##__fo, name, double)                                               \
  template <class A> inline auto name(A a, double p0)->decltype(dl__cxx_u<name##__fo, A>::go(a, p0)) { \
    return dl__cxx_u<name##__fo, A>::go(a, p0);                                        \
  }                                                                                    \
  }
#define DL__CXX_USER2(name)                                                            \
  namespace {                                                                          \
  DL__CXX_FO2(name##__fo, name)                                                        \
  template <class A, class B> inline typename dl__cxx_b<name##__fo, A, B>::type name(A a, B b) { \
    return dl__cxx_b<name##__fo, A, B>::go(a, b);                                      \
  }                                                                                    \
  }
#else
#define DL__CXX_USER1(name)
#define DL__CXX_USER1P(name)
#define DL__CXX_USER2(name)
#endif
#define DL__P1D , double p0
#define DL__P1A , p0

/* >>op list instantiation ------------------------------------------------- */

#define DL__LIB_OP1(name, expr) DL__GEN_OP1(DL_API, DL__VAPI, dl__op_##name, dl_##name, , , expr)
#define DL__LIB_OP1P(name, expr) DL__GEN_OP1(DL_API, DL__VAPI, dl__op_##name, dl_##name, DL__P1D, DL__P1A, expr)
#define DL__LIB_OP2(name, expr) DL__GEN_OP2(DL_API, DL__VAPI, dl__op_##name, dl_##name, expr)
DL_OPS_UNARY(DL__LIB_OP1)
DL_OPS_UNARY_P(DL__LIB_OP1P)
DL_OPS_BINARY(DL__LIB_OP2)

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_EXPR_H */
