/* dl/ops/norm.h - normalisation on the tape (see dl/ops.h for the op
 * conventions): batch_norm, layer_norm, rms_norm.
 *
 *   dl_tensor *h = dl_t_batch_norm(tp, conv, gamma, beta, run_mean, run_var, train, 0.1, 1e-5);
 *   dl_tensor *z = dl_t_layer_norm(tp, h, 1, ln_w, ln_b, 1e-5);  // over the last dim
 *   dl_tensor *r = dl_t_rms_norm(tp, h, 1, rms_w, 1e-6);
 *
 * Each op is one fused loop per pass with its own backward and tangent rule
 * (no composition of other dl_t_ ops): forward saves the per-channel (per-row)
 * mean and 1/sqrt(var + eps); backward and the tangent rule reduce two sums
 * per channel (row) and write the result in one more pass. Inputs may be
 * strided views (x is copied to contiguous arena memory first); outputs are
 * contiguous tensors in the tape's arena, valid until dl_tape_rewind. f32 and
 * f64, never mixed: weight, bias and running statistics have x's dtype.
 *
 * Accuracy. Statistics and the sums of the backward and tangent rules are
 * accumulated in double, f32 inputs too, two-pass (the mean, then the squared
 * deviations; batch norm's row form per tile, the tiles combined by Chan's
 * pairwise update); every output element is computed in double and rounded once.
 *
 * Threads. Batch norm splits the samples into at most DL__LN_MAXT tiles of
 * whole rows (or, for a small batch of large feature maps, the channels; see
 * dl__bn_run); layer and RMS norm split the rows likewise. The tiling
 * depends on the shape only. Tiles run on the ctx's OpenMP team when the work reaches
 * dl_ctx_parallel_threshold, each tile on one thread, and per-tile partial
 * sums (per channel, or layer norm's weight and bias gradients) are added in
 * tile order: the results do not depend on the thread count, bit for bit.
 *
 * Device (DL_USE_CUDA): x on the GPU, on a device tape, runs the kernels of
 * src_gpu/norm.cu (dl/gpu/norm.h): the same formulas, statistics and sums in
 * double, one block per channel (batch norm) or row (layer / RMS norm); the
 * statistics are saved in device memory, gradients are added in a fixed
 * order (no atomics).
 */
#ifndef DL_OPS_NORM_H
#define DL_OPS_NORM_H

#include "core.h"
#include "reduce.h"
#include "conv.h" /* the 2x2 max pool's plane kernel (batch norm + ReLU + pool as one op) */
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY /* the library's code (nvcc sees only the scalar math) */

/* Row tiles (batch norm's row form, layer and RMS norm) aim at DL__LN_W
 * elements, with at most DL__LN_MAXT tiles (the per-tile partial sums cost
 * DL__LN_MAXT x 2 x (C or D) doubles). */
#define DL__LN_W 16384
#define DL__LN_MAXT 64

/* Two-sum vectorised reduction (gcc + OpenMP; see reduce.h's DL__RSIMD_SUM). */
#if DL__RED_OMP_SIMD
#define DL__NSIMD_SUM2(a, b) DL__RPRAGMA(omp simd reduction(+ : a, b))
#else
#define DL__NSIMD_SUM2(a, b)
#endif

enum { DL__NM_FWD, DL__NM_TAN, DL__NM_BWD };

/* >>helpers ---------------------------------------------------------------- */

/* t's n values as a contiguous f64 tensor [n] in the arena (any strides,
 * f32 or f64); filled with dflt when t is NULL. */
DL_API dl_tensor *dl__norm_dvec(dl_tape *tp, const char *op, const dl_tensor *t, int64_t n,
                                double dflt) {
  dl_tensor *d = dl_tape_out(tp, op, DL_F64, 1, &n);
  double *p = (double *)d->data;
  int64_t i;
  if (!t) {
    for (i = 0; i < n; i++) p[i] = dflt;
  } else if (dl_tensor_is_contiguous(t) && t->dtype == DL_F32) {
    const float *s = (const float *)t->data;
    for (i = 0; i < n; i++) p[i] = (double)s[i];
  } else if (dl_tensor_is_contiguous(t)) {
    const double *s = (const double *)t->data;
    for (i = 0; i < n; i++) p[i] = s[i];
  } else {
    for (i = 0; i < n; i++) p[i] = dl__get_at(t, dl__offset_of_linear(t, i));
  }
  return d;
}
/* Runs fn(args, tile) for tile = 0 .. ntiles-1 on the ctx's team (reduce.h's
 * tile runner: parallel when `work` reaches the threshold). */
typedef void (*dl__norm_tile_fn)(const void *args, int64_t tile);
DL_API void dl__norm_run(dl_tape *tp, dl__norm_tile_fn fn, const void *args, int64_t ntiles,
                         int64_t work) {
  DL_PARALLEL_FOR(tp->ctx, work, ntiles, dl__tile, fn(args, dl__tile););
}
/* x's dtype and eps, shared by the three ops. */
DL_API void dl__norm_check_x(const char *op, const dl_tensor *x, double eps) {
  dl__ops_same_float(op, x, NULL);
  if (!(eps >= 0) || eps == HUGE_VAL)
    DL_PANIC(x->ctx, op, "eps must be finite and >= 0, not %g (x %s)", eps, DL_SHAPESTR(x));
}

/* dl_hvp's rule of the three norms, on the host, in double, group by group
 * (layer / RMS norm: a group is a row of D elements, the weight indexed by
 * the element; batch norm: a group is a channel's N S elements, the weight
 * indexed by the channel). s = 1 / sqrt(var + eps), xh = (x - mu) s (mu = 0
 * for RMS norm), gh = gy w, t* the tangents along v:
 *   statistics of the group (layer, RMS and batch norm in training):
 *     tmu = mean(tx), ts = -s^3 mean((x - mu)(tx - tmu)),
 *     txh = (tx - tmu) s + (x - mu) ts
 *     gx  = s (gh - mean(gh) - xh mean(gh xh))         (RMS: no mean(gh) term)
 *     tgx = ts (gh - m1 - xh m2) + s (tgh - tm1 - txh m2 - xh tm2),
 *           tgh = tgy w + gy tw, tm1 = mean(tgh), tm2 = mean(tgh xh + gh txh)
 *   given statistics (batch norm in evaluation): gx = gh s, tgx = tgh s, txh = tx s
 *   tgw += the sums of tgy xh + gy txh, tgb += the sums of tgy. */
typedef struct dl__norm_hvp_geom {
  int64_t G, M;          /* groups, elements per group */
  int64_t C, S;          /* batch norm: element k of channel c is ((k / S) C + c) S + k % S */
  int bn, center, stats; /* batch norm?; subtract the mean?; statistics of the group? */
} dl__norm_hvp_geom;
/* The linear index of element k of group g. */
DL_API int64_t dl__norm_hvp_at(const dl__norm_hvp_geom *q, int64_t g, int64_t k) {
  return q->bn ? ((k / q->S) * q->C + g) * q->S + k % q->S : g * q->M + k;
}
DL_API void dl__norm_hvp(const dl_node *n, const dl__norm_hvp_geom *q, const double *mean, const double *istd,
                         dl_tensor *gx, dl_tensor *gw, dl_tensor *gb) {
  const dl_tensor *x = n->saved[0], *gy = n->out->grad, *tgy = gy->tangent;
  const dl_tensor *tx = n->in[0]->tangent, *w = n->nin > 1 ? n->in[1] : NULL, *tw = w ? w->tangent : NULL;
  const double *wd = (const double *)n->saved[2]->data;
  const double Md = (double)q->M;
  int64_t g, k;
  for (g = 0; g < q->G; g++) {
    const double mu = q->center ? mean[g] : 0.0, sr = istd[g];
    double tmu = 0, cov = 0, m1 = 0, m2 = 0, tm1 = 0, tm2 = 0, ts = 0;
    int pass;
    if (tx && q->stats) {
      for (k = 0; k < q->M; k++) tmu += dl__get_at(tx, dl__offset_of_linear(tx, dl__norm_hvp_at(q, g, k)));
      tmu = q->center ? tmu / Md : 0.0;
      for (k = 0; k < q->M; k++) {
        const int64_t e = dl__norm_hvp_at(q, g, k);
        cov += (dl__get_at(x, e) - mu) * (dl__get_at(tx, dl__offset_of_linear(tx, e)) - tmu);
      }
      ts = -sr * sr * sr * cov / Md;
    }
    for (pass = 0; pass < 2; pass++) { /* the group's means, then the tangents */
      if (pass == 1) {
        m1 = q->center ? m1 / Md : 0.0;
        tm1 = q->center ? tm1 / Md : 0.0;
        m2 /= Md;
        tm2 /= Md;
      }
      for (k = 0; k < q->M; k++) {
        const int64_t e = dl__norm_hvp_at(q, g, k), pi = q->bn ? g : k;
        const double xv = dl__get_at(x, e), txv = tx ? dl__get_at(tx, dl__offset_of_linear(tx, e)) : 0.0;
        const double xh = (xv - mu) * sr, txh = (txv - tmu) * sr + (xv - mu) * ts;
        const double gyv = dl__get_at(gy, e), tgyv = dl__get_at(tgy, e);
        const double twv = tw ? dl__get_at(tw, dl__offset_of_linear(tw, pi)) : 0.0;
        const double gh = gyv * wd[pi], tgh = tgyv * wd[pi] + gyv * twv;
        if (pass == 0) {
          m1 += gh;
          m2 += gh * xh;
          tm1 += tgh;
          tm2 += tgh * xh + gh * txh;
          continue;
        }
        if (gx) {
          const double v = q->stats ? ts * (gh - m1 - xh * m2) + sr * (tgh - tm1 - txh * m2 - xh * tm2) : tgh * sr;
          if (gx->dtype == DL_F32) ((float *)gx->tangent->data)[e] += (float)v;
          else ((double *)gx->tangent->data)[e] += v;
        }
        if (gw) {
          const double v = tgyv * xh + gyv * txh;
          if (gw->dtype == DL_F32) ((float *)gw->tangent->data)[pi] += (float)v;
          else ((double *)gw->tangent->data)[pi] += v;
        }
        if (gb) {
          if (gb->dtype == DL_F32) ((float *)gb->tangent->data)[pi] += (float)tgyv;
          else ((double *)gb->tangent->data)[pi] += tgyv;
        }
      }
    }
  }
}

/* >>batch norm ------------------------------------------------------------- */

/* x is [N, C, S] (S = product of x's dimensions after the channel),
 * contiguous. Per channel c, with mu the mean and is = 1/sqrt(var + eps)
 * (FWD computes them in batch mode, otherwise they are given), each pass is
 *   FWD  y = (x - mu) k2 + k3                       k2 = is w, k3 = b
 *   TAN  ty = k1 tx + (x - mu) k2 + k3     from s0 = sum tx, s1 = sum tx (x - mu)
 *   BWD  gx += k1 gy + (x - mu) k2 + k3    from s0 = sum gy, s1 = sum gy (x - mu);
 *        gw += is s1, gb += s0
 * with the constants of dl__bn_consts. Two layouts of the work:
 *   row form: a tile is a block of samples (rows of C*S contiguous
 *     elements, DL__LN_W elements or more, at most DL__LN_MAXT tiles); each
 *     tile sums into its own per-channel partials, added in tile order
 *     between the phases. It streams through memory: the faster form
 *     (measured about 1.5x the plane form's speed on f32 [64, C, 16, 16] and
 *     [64, C, 32, 32], forward + backward; equal at 8 x 8).
 *   plane form, when the row form would leave fewer than DL__BN_MINT tiles
 *     and there are more channels, with S >= DL__BN_PLANE: a tile is one
 *     channel (N runs of S) and does the whole pass for it; this keeps small
 *     batches (inference) of large feature maps parallel.
 * The form depends on the shape only. */
#define DL__BN_PLANE 64
#define DL__BN_MINT 8

enum { DL__BNP_STAT, DL__BNP_SUMV, DL__BNP_MAP };

typedef struct dl__bn_args {
  int mode, batch, phase, assign; /* assign: BWD writes gx (=) instead of adding to it */
  int relu;              /* a ReLU after the norm (dl__t_batch_norm_relu): FWD writes max(y, 0) (NaN kept);
                            BWD takes gy where the output y > 0, 0 elsewhere */
  dl_dtype dt;
  int64_t N, C, S, rpt;  /* sizes; samples per tile (row form) */
  const void *x;         /* [N, C, S] contiguous */
  const void *v;         /* TAN: tx, BWD: gy ([N, C, S] contiguous), or NULL */
  void *out;             /* FWD: y, TAN: ty, BWD: gx (+=) or NULL */
  const void *y;         /* BWD with relu: the output, [N, C, S] */
  const double *w, *b;   /* [C]: weight (ones when absent), bias (zeros) */
  const double *tw, *tb; /* TAN: tangents of w and b, [C] (zeros when absent) */
  double eps;
  double *mean, *istd;   /* [C]: FWD writes in batch mode, otherwise read */
  double *var;           /* FWD batch mode: [C] biased variance */
  void *gw, *gb;         /* BWD: [C] gradients (+=), or NULL */
  double *part;          /* row form: [ntiles, 2, C] partial sums */
  double *k;             /* row form: [3, C] constants k1, k2, k3 */
} dl__bn_args;

/* The constants k1, k2, k3 of channels [c0, c0 + nc) from the sums s0, s1
 * (m elements per channel); BWD also adds is s1 to gw and s0 to gb.
 *   FWD    k1 = 0, k2 = is w, k3 = b
 *   TAN    k1 = w is, k2 = is (tw - k1 is s1/m), k3 = tb - k1 s0/m
 *          (s0 = s1 = 0 without batch statistics or without tx)
 *   BWD    k1 = w is, and in batch mode k2 = -k1 is^2 s1/m, k3 = -k1 s0/m
 *          (else 0): gx = w is (gy - mean(gy) - xh mean(gy xh)), xh = (x - mu) is */
DL_API void dl__bn_consts(const dl__bn_args *A, int64_t c0, int64_t nc, const double *s0,
                          const double *s1, double *k1, double *k2, double *k3) {
  const double m = (double)(A->N * A->S);
  int64_t k;
  for (k = 0; k < nc; k++) {
    const int64_t c = c0 + k;
    const double is = A->istd[c], w = A->w[c];
    if (A->mode == DL__NM_FWD) {
      k1[k] = 0;
      k2[k] = is * w;
      k3[k] = A->b[c];
    } else if (A->mode == DL__NM_TAN) {
      const double a0 = A->batch && A->v ? s0[k] : 0.0, a1 = A->batch && A->v ? s1[k] : 0.0;
      k1[k] = A->v ? w * is : 0.0;
      k2[k] = is * (A->tw[c] - k1[k] * is * a1 / m);
      k3[k] = A->tb[c] - k1[k] * a0 / m;
    } else {
      if (A->gw) {
        if (A->dt == DL_F32) ((float *)A->gw)[c] += (float)(is * s1[k]);
        else ((double *)A->gw)[c] += is * s1[k];
      }
      if (A->gb) {
        if (A->dt == DL_F32) ((float *)A->gb)[c] += (float)s0[k];
        else ((double *)A->gb)[c] += s0[k];
      }
      k1[k] = w * is;
      k2[k] = A->batch ? -k1[k] * is * is * s1[k] / m : 0.0;
      k3[k] = A->batch ? -k1[k] * s0[k] / m : 0.0;
    }
  }
}

/* Whether a BWD pass needs the sums (batch statistics, or gw / gb wanted). */
#define DL__BN_BWD_SUMS(A) ((A)->batch || (A)->gw || (A)->gb)

/* The value a BWD pass reads at s: gy, or with the ReLU (rb) gy where the
 * output y > 0 and 0 elsewhere (ReLU's rule: no gradient at 0 or NaN; a
 * select, so an infinite gy where y <= 0 gives 0, as PyTorch's). yr is vr
 * when rb is 0. */
#define DL__BN_G(rb, yr, vr, s) ((rb) ? (double)DL__BN_SEL((yr)[s], (vr)[s]) : (double)(vr)[s]) /* rb a constant */
/* g where y > 0, else +0, as a bit mask: gcc in ISO mode (-std=c11) does
 * not vectorise a select of the loaded g ("control flow in loop"); the
 * mask does, and g passes unchanged (an infinite gy where y <= 0 gives 0). */
#define DL__BN_SEL(y, g) (sizeof(y) == 4 ? (double)dl__bn_sel_f32((float)(y), (float)(g)) : dl__bn_sel_f64((double)(y), (double)(g)))
DL__INL float dl__bn_sel_f32(float y, float g) {
  uint32_t b, m = y > 0 ? 0xFFFFFFFFu : 0u;
  memcpy(&b, &g, sizeof b);
  b &= m;
  memcpy(&g, &b, sizeof b);
  return g;
}
DL__INL double dl__bn_sel_f64(double y, double g) {
  uint64_t b, m = y > 0 ? ~(uint64_t)0 : 0u;
  memcpy(&b, &g, sizeof b);
  b &= m;
  memcpy(&g, &b, sizeof b);
  return g;
}
/* The FWD value d rounded to T, then ReLU'd as dl_relu does (x < 0 ? 0 : x:
 * NaN and -0 kept), the same bits as dl_t_relu on dl_t_batch_norm's output. */
#define DL__BN_RELU(T, d) dl__bn_relu_##T((T)(d))
DL__INL float dl__bn_relu_float(float t) { return t < 0.0f ? 0.0f : t; }
DL__INL double dl__bn_relu_double(double t) { return t < 0.0 ? 0.0 : t; }

/* Plane form: the whole pass for channel c = tile. */
#define DL__BN_PLANE_KERNEL(T, SFX)                                                   \
  DL_API void dl__bn_plane_##SFX(const void *args, int64_t c) {                       \
    const dl__bn_args *A = (const dl__bn_args *)args;                                 \
    const T *x = (const T *)A->x, *v = A->v ? (const T *)A->v : x;                    \
    const int rb = A->relu && A->mode == DL__NM_BWD, rf = A->relu && A->mode == DL__NM_FWD; \
    const T *yy = rb ? (const T *)A->y : v; /* the mask's values (v itself: no mask) */ \
    T *out = (T *)A->out;                                                             \
    const int64_t N = A->N, C = A->C, S = A->S;                                       \
    const double m = (double)(N * S);                                                 \
    double s0 = 0, s1 = 0, k1, k2, k3, mu;                                            \
    int64_t n, s;                                                                     \
    if (A->mode == DL__NM_FWD && A->batch) {                                          \
      for (n = 0; n < N; n++) {                                                       \
        const T *xr = x + (n * C + c) * S;                                            \
        DL__RSIMD_SUM(s0)                                                             \
        for (s = 0; s < S; s++) s0 += (double)xr[s];                                  \
      }                                                                               \
      mu = s0 / m;                                                                    \
      s0 = 0;                                                                         \
      for (n = 0; n < N; n++) {                                                       \
        const T *xr = x + (n * C + c) * S;                                            \
        DL__RSIMD_SUM(s0)                                                             \
        for (s = 0; s < S; s++) s0 += ((double)xr[s] - mu) * ((double)xr[s] - mu);   \
      }                                                                               \
      A->mean[c] = mu;                                                                \
      A->var[c] = s0 / m;                                                             \
      A->istd[c] = 1.0 / sqrt(s0 / m + A->eps);                                       \
    }                                                                                 \
    mu = A->mean[c];                                                                  \
    if ((A->mode == DL__NM_TAN && A->batch && A->v) ||                                \
        (A->mode == DL__NM_BWD && DL__BN_BWD_SUMS(A))) {                              \
      for (n = 0; n < N; n++) {                                                       \
        const T *xr = x + (n * C + c) * S, *vr = v + (n * C + c) * S;                 \
        const T *yr = yy + (n * C + c) * S;                                           \
        if (rb) {                                                                     \
          DL__NSIMD_SUM2(s0, s1)                                                      \
          for (s = 0; s < S; s++) {                                                   \
            const double g = DL__BN_G(1, yr, vr, s);                                  \
            s0 += g;                                                                  \
            s1 += g * ((double)xr[s] - mu);                                           \
          }                                                                           \
        } else {                                                                      \
          DL__NSIMD_SUM2(s0, s1)                                                      \
          for (s = 0; s < S; s++) {                                                   \
            const double g = DL__BN_G(0, yr, vr, s);                                  \
            s0 += g;                                                                  \
            s1 += g * ((double)xr[s] - mu);                                           \
          }                                                                           \
        }                                                                             \
      }                                                                               \
    }                                                                                 \
    dl__bn_consts(A, c, 1, &s0, &s1, &k1, &k2, &k3);                                  \
    if (!out) return;                                                                 \
    for (n = 0; n < N; n++) {                                                         \
      const T *xr = x + (n * C + c) * S, *vr = v + (n * C + c) * S;                   \
      const T *yr = yy + (n * C + c) * S;                                             \
      T *o = out + (n * C + c) * S;                                                   \
      if (A->mode == DL__NM_BWD && !A->assign) {                                      \
        if (rb) {                                                                     \
          DL__RSIMD                                                                   \
          for (s = 0; s < S; s++) o[s] += (T)(k1 * DL__BN_G(1, yr, vr, s) + ((double)xr[s] - mu) * k2 + k3); \
        } else {                                                                      \
          DL__RSIMD                                                                   \
          for (s = 0; s < S; s++) o[s] += (T)(k1 * DL__BN_G(0, yr, vr, s) + ((double)xr[s] - mu) * k2 + k3); \
        }                                                                             \
      } else if (rf) {                                                                \
        DL__RSIMD                                                                     \
        for (s = 0; s < S; s++) o[s] = DL__BN_RELU(T, k1 * (double)vr[s] + ((double)xr[s] - mu) * k2 + k3); \
      } else {                                                                        \
        if (rb) {                                                                     \
          DL__RSIMD                                                                   \
          for (s = 0; s < S; s++) o[s] = (T)(k1 * DL__BN_G(1, yr, vr, s) + ((double)xr[s] - mu) * k2 + k3); \
        } else {                                                                      \
          DL__RSIMD                                                                   \
          for (s = 0; s < S; s++) o[s] = (T)(k1 * DL__BN_G(0, yr, vr, s) + ((double)xr[s] - mu) * k2 + k3); \
        }                                                                             \
      }                                                                               \
    }                                                                                 \
  }
DL__BN_PLANE_KERNEL(float, f32)
DL__BN_PLANE_KERNEL(double, f64)

/* Row form, one phase on the samples [n0, n1) of tile `tile`:
 *   STAT  part0[c] = the tile's sum of x, part1[c] = its sum of (x - part0[c] / n)^2
 *   SUMV  part0[c] += sum v, part1[c] += sum v (x - mu)
 *   MAP   out = (or +=, BWD) k1 v + (x - mu) k2 + k3 */
#define DL__BN_ROW_KERNEL(T, SFX)                                                     \
  DL_API void dl__bn_rows_##SFX(const void *args, int64_t tile) {                     \
    const dl__bn_args *A = (const dl__bn_args *)args;                                 \
    const T *x = (const T *)A->x, *v = A->v ? (const T *)A->v : x;                    \
    const int rb = A->relu && A->mode == DL__NM_BWD, rf = A->relu && A->mode == DL__NM_FWD; \
    const T *yy = rb ? (const T *)A->y : v; /* the mask's values (v itself: no mask) */ \
    T *out = (T *)A->out;                                                             \
    const int64_t C = A->C, S = A->S, L = C * S, n0 = tile * A->rpt;                  \
    const int64_t n1 = A->N - n0 < A->rpt ? A->N : n0 + A->rpt;                       \
    const double *mu = A->mean, *k1 = A->k, *k2 = A->k + C, *k3 = A->k + 2 * C;       \
    double *p0 = A->part ? A->part + tile * 2 * C : NULL, *p1 = p0 ? p0 + C : NULL;   \
    const int ph = A->phase, acc = A->mode == DL__NM_BWD && !A->assign;               \
    int64_t n, c, s;                                                                  \
    if (ph == DL__BNP_STAT) { /* the tile's sums, then the squares about its means */ \
      const double nt = (double)((n1 - n0) * S);                                      \
      for (n = n0; n < n1; n++) {                                                     \
        const T *xr = x + n * L;                                                      \
        if (S == 1) {                                                                 \
          DL__RSIMD                                                                   \
          for (c = 0; c < C; c++) p0[c] += (double)xr[c];                             \
          continue;                                                                   \
        }                                                                             \
        for (c = 0; c < C; c++) {                                                     \
          const T *xc = xr + c * S;                                                   \
          double a0 = 0;                                                              \
          DL__RSIMD_SUM(a0)                                                           \
          for (s = 0; s < S; s++) a0 += (double)xc[s];                                \
          p0[c] += a0;                                                                \
        }                                                                             \
      }                                                                               \
      for (n = n0; n < n1; n++) { /* the tile again, from cache */                    \
        const T *xr = x + n * L;                                                      \
        if (S == 1) {                                                                 \
          DL__RSIMD                                                                   \
          for (c = 0; c < C; c++)                                                     \
            p1[c] += ((double)xr[c] - p0[c] / nt) * ((double)xr[c] - p0[c] / nt);     \
          continue;                                                                   \
        }                                                                             \
        for (c = 0; c < C; c++) {                                                     \
          const T *xc = xr + c * S;                                                   \
          const double mc = p0[c] / nt;                                               \
          double a0 = 0;                                                              \
          DL__RSIMD_SUM(a0)                                                           \
          for (s = 0; s < S; s++) a0 += ((double)xc[s] - mc) * ((double)xc[s] - mc);  \
          p1[c] += a0;                                                                \
        }                                                                             \
      }                                                                               \
      return;                                                                         \
    }                                                                                 \
    for (n = n0; n < n1; n++) {                                                       \
      const T *xr = x + n * L, *vr = v + n * L, *yr = yy + n * L;                     \
      T *o = out ? out + n * L : NULL;                                                \
      if (S == 1) {                                                                   \
        if (ph == DL__BNP_SUMV) {                                                     \
          if (rb) {                                                                   \
            DL__RSIMD                                                                 \
            for (c = 0; c < C; c++) {                                                 \
              const double g = DL__BN_G(1, yr, vr, c);                                \
              p0[c] += g;                                                             \
              p1[c] += g * ((double)xr[c] - mu[c]);                                   \
            }                                                                         \
          } else {                                                                    \
            DL__RSIMD                                                                 \
            for (c = 0; c < C; c++) {                                                 \
              const double g = DL__BN_G(0, yr, vr, c);                                \
              p0[c] += g;                                                             \
              p1[c] += g * ((double)xr[c] - mu[c]);                                   \
            }                                                                         \
          }                                                                           \
        } else if (acc) {                                                             \
          if (rb) {                                                                   \
            DL__RSIMD                                                                 \
            for (c = 0; c < C; c++) o[c] += (T)(k1[c] * DL__BN_G(1, yr, vr, c) + ((double)xr[c] - mu[c]) * k2[c] + k3[c]); \
          } else {                                                                    \
            DL__RSIMD                                                                 \
            for (c = 0; c < C; c++) o[c] += (T)(k1[c] * DL__BN_G(0, yr, vr, c) + ((double)xr[c] - mu[c]) * k2[c] + k3[c]); \
          }                                                                           \
        } else if (rf) {                                                              \
          DL__RSIMD                                                                   \
          for (c = 0; c < C; c++) o[c] = DL__BN_RELU(T, k1[c] * (double)vr[c] + ((double)xr[c] - mu[c]) * k2[c] + k3[c]); \
        } else {                                                                      \
          if (rb) {                                                                   \
            DL__RSIMD                                                                 \
            for (c = 0; c < C; c++) o[c] = (T)(k1[c] * DL__BN_G(1, yr, vr, c) + ((double)xr[c] - mu[c]) * k2[c] + k3[c]); \
          } else {                                                                    \
            DL__RSIMD                                                                 \
            for (c = 0; c < C; c++) o[c] = (T)(k1[c] * DL__BN_G(0, yr, vr, c) + ((double)xr[c] - mu[c]) * k2[c] + k3[c]); \
          }                                                                           \
        }                                                                             \
        continue;                                                                     \
      }                                                                               \
      for (c = 0; c < C; c++) {                                                       \
        const T *xc = xr + c * S, *vc = vr + c * S, *yc = yr + c * S;                 \
        const double mc = mu[c];                                                      \
        double a0 = 0, a1 = 0;                                                        \
        if (ph == DL__BNP_SUMV) {                                                     \
          if (rb) {                                                                   \
            DL__NSIMD_SUM2(a0, a1)                                                    \
            for (s = 0; s < S; s++) {                                                 \
              const double g = DL__BN_G(1, yc, vc, s);                                \
              a0 += g;                                                                \
              a1 += g * ((double)xc[s] - mc);                                         \
            }                                                                         \
          } else {                                                                    \
            DL__NSIMD_SUM2(a0, a1)                                                    \
            for (s = 0; s < S; s++) {                                                 \
              const double g = DL__BN_G(0, yc, vc, s);                                \
              a0 += g;                                                                \
              a1 += g * ((double)xc[s] - mc);                                         \
            }                                                                         \
          }                                                                           \
        } else {                                                                      \
          const double b1 = k1[c], b2 = k2[c], b3 = k3[c];                            \
          T *oc = o + c * S;                                                          \
          if (acc) {                                                                  \
            if (rb) {                                                                 \
              DL__RSIMD                                                               \
              for (s = 0; s < S; s++) oc[s] += (T)(b1 * DL__BN_G(1, yc, vc, s) + ((double)xc[s] - mc) * b2 + b3); \
            } else {                                                                  \
              DL__RSIMD                                                               \
              for (s = 0; s < S; s++) oc[s] += (T)(b1 * DL__BN_G(0, yc, vc, s) + ((double)xc[s] - mc) * b2 + b3); \
            }                                                                         \
          } else if (rf) {                                                            \
            DL__RSIMD                                                                 \
            for (s = 0; s < S; s++) oc[s] = DL__BN_RELU(T, b1 * (double)vc[s] + ((double)xc[s] - mc) * b2 + b3); \
          } else {                                                                    \
            if (rb) {                                                                 \
              DL__RSIMD                                                               \
              for (s = 0; s < S; s++) oc[s] = (T)(b1 * DL__BN_G(1, yc, vc, s) + ((double)xc[s] - mc) * b2 + b3); \
            } else {                                                                  \
              DL__RSIMD                                                               \
              for (s = 0; s < S; s++) oc[s] = (T)(b1 * DL__BN_G(0, yc, vc, s) + ((double)xc[s] - mc) * b2 + b3); \
            }                                                                         \
          }                                                                           \
          continue;                                                                   \
        }                                                                             \
        p0[c] += a0;                                                                  \
        p1[c] += a1;                                                                  \
      }                                                                               \
    }                                                                                 \
  }
DL__BN_ROW_KERNEL(float, f32)
DL__BN_ROW_KERNEL(double, f64)

/* Row form: runs one summing phase and adds the tiles' partials in tile
 * order into s0 (and s1) [C]. */
DL_API void dl__bn_rows_sum(dl_tape *tp, dl__bn_args *A, int phase, int64_t nt, double *s0, double *s1) {
  const int64_t C = A->C;
  int64_t t, c;
  memset(A->part, 0, sizeof(double) * 2 * (size_t)C * (size_t)nt);
  A->phase = phase;
  dl__norm_run(tp, A->dt == DL_F32 ? dl__bn_rows_f32 : dl__bn_rows_f64, A, nt, A->N * C * A->S);
  for (c = 0; c < C; c++) {
    double a0 = 0, a1 = 0;
    for (t = 0; t < nt; t++) {
      a0 += A->part[t * 2 * C + c];
      a1 += A->part[t * 2 * C + C + c];
    }
    s0[c] = a0;
    if (s1) s1[c] = a1;
  }
}

/* Row form, batch statistics: each tile sums its channels and then the
 * squares about the tile's means (its rows again, from cache), and the
 * tiles combine in tile order (Chan, Golub and LeVeque's pairwise update):
 *   m2 = sum_t (m2_t + n_t (mean_t - mean)^2)
 * as accurate as the two passes over the whole batch that it replaces, and
 * one pass over memory fewer. Writes mean, var, istd. */
DL_API void dl__bn_rows_stats(dl_tape *tp, dl__bn_args *A, int64_t nt) {
  const int64_t C = A->C;
  const double m = (double)(A->N * A->S);
  int64_t t, c;
  memset(A->part, 0, sizeof(double) * 2 * (size_t)C * (size_t)nt);
  A->phase = DL__BNP_STAT;
  dl__norm_run(tp, A->dt == DL_F32 ? dl__bn_rows_f32 : dl__bn_rows_f64, A, nt, A->N * C * A->S);
  for (c = 0; c < C; c++) {
    double sum = 0, m2 = 0, mean;
    for (t = 0; t < nt; t++) sum += A->part[t * 2 * C + c];
    mean = sum / m;
    for (t = 0; t < nt; t++) {
      const int64_t rows = A->N - t * A->rpt < A->rpt ? A->N - t * A->rpt : A->rpt;
      const double n_t = (double)(rows * A->S), d = A->part[t * 2 * C + c] / n_t - mean;
      m2 += A->part[t * 2 * C + C + c] + n_t * d * d;
    }
    A->mean[c] = mean;
    A->var[c] = m2 / m;
    A->istd[c] = 1.0 / sqrt(m2 / m + A->eps);
  }
}

/* One pass (A->mode) in the form x's shape calls for. */
DL_API void dl__bn_run(dl_tape *tp, dl__bn_args *A) {
  const int64_t N = A->N, C = A->C, S = A->S, L = C * S > 0 ? C * S : 1;
  int64_t nt, rpt;
  double *s0, *s1;
  rpt = (DL__LN_W + L - 1) / L;
  if (rpt < (N + DL__LN_MAXT - 1) / DL__LN_MAXT) rpt = (N + DL__LN_MAXT - 1) / DL__LN_MAXT;
  if (rpt < 1) rpt = 1;
  nt = (N + rpt - 1) / rpt;
  if (S >= DL__BN_PLANE && nt < DL__BN_MINT && C > nt) {
    dl__norm_run(tp, A->dt == DL_F32 ? dl__bn_plane_f32 : dl__bn_plane_f64, A, C, N * C * S);
    return;
  }
  A->rpt = rpt;
  A->part = (double *)dl_tape_scratch(tp, "dl_t_batch_norm",
                                      sizeof(double) * 2 * (size_t)C * (size_t)(nt ? nt : 1));
  A->k = (double *)dl_tape_scratch(tp, "dl_t_batch_norm", sizeof(double) * 5 * (size_t)C);
  s0 = A->k + 3 * C;
  s1 = A->k + 4 * C;
  memset(s0, 0, sizeof(double) * 2 * (size_t)C);
  if (A->mode == DL__NM_FWD && A->batch) {
    dl__bn_rows_stats(tp, A, nt);
  } else if ((A->mode == DL__NM_TAN && A->batch && A->v) ||
             (A->mode == DL__NM_BWD && DL__BN_BWD_SUMS(A))) {
    dl__bn_rows_sum(tp, A, DL__BNP_SUMV, nt, s0, s1);
  }
  dl__bn_consts(A, 0, C, s0, s1, A->k, A->k + C, A->k + 2 * C);
  if (!A->out) return;
  A->phase = DL__BNP_MAP;
  dl__norm_run(tp, A->dt == DL_F32 ? dl__bn_rows_f32 : dl__bn_rows_f64, A, nt, N * C * S);
}

/* >>batch norm + ReLU + 2x2 max pool --------------------------------------- */

/* Batch norm, ReLU and a 2x2, stride-2 max pool (no padding, floor) as one
 * op (dl__t_batch_norm_relu_pool): the normalised, ReLU'd values of a plane
 * go to a stack buffer and the pool's own plane kernel reads them there, so
 * that only the pooled output, its indices and x at those indices reach
 * memory. The backward takes batch norm's two sums over the pooled
 * outputs (the gradient of the ReLU's input is the pooled gradient at the
 * pool's index where the pooled value is > 0, ReLU's mask, and 0
 * elsewhere), then rebuilds each plane's gradient in a buffer for the pass
 * that writes gx. Planes up to DL__BNP_MAXHW elements. */
#define DL__BNP_MAXHW 4096

typedef struct dl__bnp_args {
  dl__pool_geom g;         /* the 2x2 pool over [N, C, H, W] */
  dl_dtype dt;
  int assign;              /* BWD: gx is written (=), not added to */
  const void *x;           /* [N, C, H, W] contiguous */
  const double *mean, *k;  /* [C]; k1, k2, k3 [3, C] (dl__bn_consts) */
  void *y;                 /* FWD: [N, C, Ho, Wo]; BWD: the op's output (the mask) */
  int32_t *idx;            /* [N, C, Ho, Wo]: the pool's indices in the plane */
  void *xs;                /* [N, C, Ho, Wo]: x at those indices (FWD writes them, BWD's sums read them) */
  const void *gy;          /* BWD: [N, C, Ho, Wo] */
  void *gx;                /* BWD: [N, C, H, W] or NULL */
  double *part;            /* BWD: [tiles, 2, C] s0 = sum g, s1 = sum g (x - mu) over each tile of DL__BNP_TILE images */
} dl__bnp_args;
/* Images a tile of the backward's sums: a member's tiles are its share of
 * the batch (DL_PARALLEL_FOR), the tiles' partial sums added in tile
 * order (the same at any thread count). Split by channel, each member read
 * every image's planes, half of them written on the other core. */
#define DL__BNP_TILE 4

#define DL__BNP_KERNELS(T, SFX)                                                                     \
  /* FWD of plane pl: pooled relu(bn(x)) and the indices */                                         \
  DL_API void dl__bnp_fwd_##SFX(const dl__bnp_args *A, int64_t pl) {                               \
    const int64_t HW = A->g.H * A->g.W, Q = A->g.Ho * A->g.Wo, C = A->g.C, c = pl % C;              \
    const T *xp = (const T *)A->x + pl * HW;                                                        \
    const double mu = A->mean[c], k1 = A->k[c], k2 = A->k[C + c], k3 = A->k[2 * C + c];            \
    T buf[DL__BNP_MAXHW];                                                                           \
    int64_t s;                                                                                      \
    DL__RSIMD                                                                                       \
    for (s = 0; s < HW; s++) buf[s] = DL__BN_RELU(T, k1 * (double)xp[s] + ((double)xp[s] - mu) * k2 + k3); \
    dl__maxpool_fwd_##SFX(&A->g, buf, (T *)A->y + pl * Q, A->idx + pl * Q);                        \
    {                                                                                               \
      const int32_t *ip = A->idx + pl * Q;                                                          \
      T *xs = (T *)A->xs + pl * Q;                                                                  \
      int64_t q;                                                                                    \
      for (q = 0; q < Q; q++) xs[q] = xp[ip[q]];                                                    \
    }                                                                                               \
  }                                                                                                 \
  /* plane pl's gradient of the ReLU's input: gy at the index where y > 0 */                        \
  DL_API void dl__bnp_grad_##SFX(const dl__bnp_args *A, int64_t pl, T *buf) {                      \
    const int64_t HW = A->g.H * A->g.W, Q = A->g.Ho * A->g.Wo;                                      \
    const T *gy = (const T *)A->gy + pl * Q, *yp = (const T *)A->y + pl * Q;                        \
    const int32_t *ip = A->idx + pl * Q;                                                            \
    int64_t q;                                                                                      \
    memset(buf, 0, sizeof(T) * (size_t)HW);                                                         \
    for (q = 0; q < Q; q++) /* (no branch: the mask is random, a branch mispredicts half the time) */ \
      buf[ip[q]] += (T)DL__BN_SEL(yp[q], gy[q]);                                                    \
  }                                                                                                 \
  /* BWD sums of the images of tile t (DL__BNP_TILE images) for every channel: only the       \
   * pool's chosen elements have a gradient, so the sums run over the outputs, with x there      \
   * saved by FWD (a quarter of the plane's work, and contiguous: a gather from x was 4-5 ns an  \
   * element, its planes far apart in memory); into part[t][2][C] */                               \
  DL_API void dl__bnp_sum_##SFX(const dl__bnp_args *A, int64_t t) {                                \
    const int64_t C = A->g.C, Q = A->g.Ho * A->g.Wo, n0 = t * DL__BNP_TILE;                         \
    const int64_t n1 = A->g.N - n0 < DL__BNP_TILE ? A->g.N : n0 + DL__BNP_TILE;                     \
    double *p0 = A->part + t * 2 * C, *p1 = p0 + C;                                                 \
    int64_t n, c, q;                                                                                \
    for (c = 0; c < C; c++) p0[c] = p1[c] = 0;                                                      \
    for (n = n0; n < n1; n++)                                                                       \
      for (c = 0; c < C; c++) {                                                                     \
        const T *gy = (const T *)A->gy + (n * C + c) * Q, *yp = (const T *)A->y + (n * C + c) * Q;  \
        const T *xs = (const T *)A->xs + (n * C + c) * Q;                                           \
        const double mu = A->mean[c];                                                               \
        double s0 = 0, s1 = 0;                                                                      \
        DL__NSIMD_SUM2(s0, s1)                                                                      \
        for (q = 0; q < Q; q++) {                                                                   \
          const double g = (double)(T)DL__BN_SEL(yp[q], gy[q]);                                     \
          s0 += g;                                                                                  \
          s1 += g * ((double)xs[q] - mu);                                                           \
        }                                                                                           \
        p0[c] += s0;                                                                                \
        p1[c] += s1;                                                                                \
      }                                                                                             \
  }                                                                                                 \
  /* BWD map of plane pl: gx (=, +=) k1 g + (x - mu) k2 + k3 */                                     \
  DL_API void dl__bnp_map_##SFX(const dl__bnp_args *A, int64_t pl) {                               \
    const int64_t HW = A->g.H * A->g.W, C = A->g.C, c = pl % C;                                     \
    const T *xp = (const T *)A->x + pl * HW;                                                        \
    T *o = (T *)A->gx + pl * HW;                                                                    \
    const double mu = A->mean[c], k1 = A->k[c], k2 = A->k[C + c], k3 = A->k[2 * C + c];            \
    T buf[DL__BNP_MAXHW];                                                                           \
    int64_t s;                                                                                      \
    dl__bnp_grad_##SFX(A, pl, buf);                                                                 \
    if (A->assign) {                                                                                \
      DL__RSIMD                                                                                     \
      for (s = 0; s < HW; s++) o[s] = (T)(k1 * (double)buf[s] + ((double)xp[s] - mu) * k2 + k3);   \
    } else {                                                                                        \
      DL__RSIMD                                                                                     \
      for (s = 0; s < HW; s++) o[s] += (T)(k1 * (double)buf[s] + ((double)xp[s] - mu) * k2 + k3);  \
    }                                                                                               \
  }
DL__BNP_KERNELS(float, f32)
DL__BNP_KERNELS(double, f64)

/* Where x at the indices starts in the fused op's saved index tensor, in
 * int32 words after nq indices (even: 8-aligned for f64). */
DL_API int64_t dl__bnp_xs_at(int64_t nq) { return (nq + 1) & ~(int64_t)1; }

/* The pool's geometry over x [N, C, H, W]: 2x2, stride 2, no padding. */
DL_API dl__pool_geom dl__bnp_geom(const dl_tensor *x) {
  dl__pool_geom g;
  memset(&g, 0, sizeof g);
  g.N = x->shape[0];
  g.C = x->shape[1];
  g.H = x->shape[2];
  g.W = x->shape[3];
  g.kh = g.kw = g.sh = g.sw = 2;
  g.dh = g.dw = 1;
  g.D = g.kd = g.sd = g.dd = g.Do = 1;
  g.Ho = g.H / 2;
  g.Wo = g.W / 2;
  return g;
}
/* The pool's forward over every plane (consts k from dl__bn_consts). */
DL_API void dl__bnp_forward(dl_tape *tp, dl__bnp_args *P) {
  const int64_t planes = P->g.N * P->g.C, work = planes * P->g.H * P->g.W;
  DL_PARALLEL_RUNS(tp->ctx, work, planes, pl, {
    if (P->dt == DL_F32) dl__bnp_fwd_f32(P, pl);
    else dl__bnp_fwd_f64(P, pl);
  });
}

/* x [N, C, S] from x's shape. */
DL_API void dl__bn_sizes(const dl_tensor *x, int64_t *N, int64_t *C, int64_t *S) {
  int d;
  *N = x->shape[0];
  *C = x->shape[1];
  *S = 1;
  for (d = 2; d < x->ndim; d++) *S *= x->shape[d];
}

#ifdef DL_USE_CUDA
/* The device form of batch norm (src_gpu/norm.cu, one block per channel, the
 * plane form's arithmetic in double): x's sizes, the parameters (x's dtype,
 * any stride) and the running statistics read or updated in place. */
DL_API dlg_bn dl__bn_dlg(const dl_tensor *x, const dl_tensor *w, const dl_tensor *b, int batch) {
  dlg_bn p;
  memset(&p, 0, sizeof p);
  dl__bn_sizes(x, &p.N, &p.C, &p.S);
  p.batch = batch;
  p.w = w ? w->data : NULL;
  p.ws = w ? w->strides[0] : 0;
  p.b = b ? b->data : NULL;
  p.bs = b ? b->strides[0] : 0;
  return p;
}
/* Backward of a device batch norm: saved[0] x (contiguous), saved[1] the
 * device statistics [2, C] (mean, istd); the weight is the node's input. */
DL_API void dl__t_batch_norm_bw_gpu(dl_node *n, dl_tensor *gx, dl_tensor *gw, dl_tensor *gb) {
  const dl_tensor *x = n->in[0], *gy = n->out->grad;
  dlg_bn p = dl__bn_dlg(x, n->nin > 1 ? n->in[1] : NULL, NULL, (int)n->i[0]);
  p.stats = (double *)n->saved[1]->data;
  dl__gpu_ok(gy, n->op,
             dlg_batch_norm_bwd(dl__gpu_h(gy, n->op), (int)x->dtype, &p, n->saved[0]->data, gy->data,
                                gx ? gx->data : NULL, gw ? gw->data : NULL, gb ? gb->data : NULL));
}
#endif

/* Backward of batch norm + ReLU + 2x2 pool (dl__bnp_args), A set up for
 * batch norm's BWD pass by dl__t_batch_norm_bw: per channel the two sums
 * over the batch (a channel per thread), the constants (gw and gb added),
 * then gx plane by plane. */
DL_API void dl__bnp_backward(dl_tape *tp, const dl_node *n, dl__bn_args *A) {
  dl__bnp_args P;
  const int64_t C = A->C;
  double *sums = (double *)dl_tape_scratch(tp, n->op, sizeof(double) * 5 * (size_t)C), *kk = sums + 2 * C;
  int64_t planes, work, tiles, t, c;
  memset(&P, 0, sizeof P);
  P.g = dl__bnp_geom(n->in[0]);
  planes = P.g.N * C;
  work = planes * P.g.H * P.g.W;
  P.dt = A->dt;
  P.x = A->x;
  P.mean = A->mean;
  P.y = n->out->data;
  P.idx = (int32_t *)n->saved[3]->data;
  P.xs = P.idx + dl__bnp_xs_at(planes * P.g.Ho * P.g.Wo);
  P.gy = n->out->grad->data;
  P.gx = A->out;
  P.assign = A->assign;
  memset(sums, 0, sizeof(double) * 2 * (size_t)C);
  tiles = (P.g.N + DL__BNP_TILE - 1) / DL__BNP_TILE;
  if (DL__BN_BWD_SUMS(A) && P.g.Ho * P.g.Wo > 0 && tiles > 0) {
    P.part = (double *)dl_tape_scratch(tp, n->op, sizeof(double) * 2 * (size_t)C * (size_t)tiles);
    DL_PARALLEL_FOR(tp->ctx, planes * P.g.Ho * P.g.Wo, tiles, tl, {
      if (P.dt == DL_F32) dl__bnp_sum_f32(&P, tl);
      else dl__bnp_sum_f64(&P, tl);
    });
    for (t = 0; t < tiles; t++)
      for (c = 0; c < 2 * C; c++) sums[c] += P.part[t * 2 * C + c];
  }
  dl__bn_consts(A, 0, C, sums, sums + C, kk, kk + C, kk + 2 * C);
  P.k = kk;
  if (P.gx) {
    DL_PARALLEL_RUNS(tp->ctx, work, planes, pl, {
      if (P.dt == DL_F32) dl__bnp_map_f32(&P, pl);
      else dl__bnp_map_f64(&P, pl);
    });
  }
}

DL_API void dl__t_batch_norm_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *x = n->in[0], *w = n->nin > 1 ? n->in[1] : NULL, *b = n->nin > 2 ? n->in[2] : NULL;
  dl_tensor *gx = dl__tape_grad_w(tp, x), *gw = dl_tape_grad(tp, w), *gb = dl_tape_grad(tp, b);
  dl_tensor *st = n->saved[1];
  dl__bn_args A;
  if (!gx && !gw && !gb) return;
#ifdef DL_USE_CUDA
  if (n->out->grad->device == DL_CUDA) {
    dl__t_batch_norm_bw_gpu(n, gx, gw, gb);
    return;
  }
#endif
  memset(&A, 0, sizeof A);
  A.mode = DL__NM_BWD;
  A.batch = (int)n->i[0];
  A.dt = x->dtype;
  dl__bn_sizes(x, &A.N, &A.C, &A.S);
  A.x = n->saved[0]->data;
  A.v = n->out->grad->data;
  A.out = gx ? gx->data : NULL;
  A.assign = dl__grad_take(gx); /* every element is written: = instead of += on a zeroed buffer */
  A.w = (const double *)n->saved[2]->data;
  A.mean = (double *)st->data;
  A.istd = A.mean + A.C;
  A.gw = gw ? gw->data : NULL;
  A.gb = gb ? gb->data : NULL;
  A.relu = n->i[1] == 1;
  A.y = n->out->data;
  if (n->i[1] == 2 && !tp->hvp) { /* with the 2x2 pool */
    dl__bnp_backward(tp, n, &A);
    return;
  }
  if (n->i[1] && tp->hvp) { /* ReLU's (and the pool's) rule first, on gy and its tangent; then batch norm's */
    const dl_tensor *gy = n->out->grad;
    dl_tensor *gm = dl_tape_zeros(tp, n->op, x->dtype, x->ndim, x->shape);
    dl_tensor *tm = dl_tape_zeros(tp, n->op, x->dtype, x->ndim, x->shape);
    const int64_t cnt = gy->numel, Q = n->i[1] == 2 ? n->out->shape[2] * n->out->shape[3] : 1;
    const int64_t HW = n->i[1] == 2 ? x->shape[2] * x->shape[3] : 1;
    const int32_t *ip = n->i[1] == 2 ? (const int32_t *)n->saved[3]->data : NULL;
    int64_t e;
    for (e = 0; e < cnt; e++) { /* e: an output; to (its plane's) element ip[e] with the pool */
      const int64_t to = ip ? e / Q * HW + ip[e] : e;
      if (!(dl__get_at(n->out, e) > 0)) continue;
      dl__set_at(gm, to, dl__get_at(gm, to) + dl__get_at(gy, e));
      dl__set_at(tm, to, dl__get_at(tm, to) + dl__get_at(gy->tangent, e));
    }
    gm->tangent = tm;
    A.relu = 0;
    A.v = gm->data;
    dl__bn_run(tp, &A);
    {
      dl_node nc = *n; /* the node as batch norm's, its output's gradient masked */
      dl_tensor oc = *n->out;
      dl__norm_hvp_geom q;
      oc.grad = gm;
      nc.out = &oc;
      memset(&q, 0, sizeof q);
      q.bn = 1;
      q.G = q.C = A.C;
      q.M = A.N * A.S;
      q.S = A.S;
      q.center = 1;
      q.stats = A.batch;
      dl__norm_hvp(&nc, &q, A.mean, A.istd, gx, gw, gb);
    }
    return;
  }
  dl__bn_run(tp, &A);
  if (tp->hvp) {
    dl__norm_hvp_geom q;
    memset(&q, 0, sizeof q);
    q.bn = 1;
    q.G = A.C;
    q.M = A.N * A.S;
    q.C = A.C;
    q.S = A.S;
    q.center = 1;
    q.stats = A.batch;
    dl__norm_hvp(n, &q, A.mean, A.istd, gx, gw, gb);
  }
}

#ifdef DL_USE_CUDA
/* dl_t_batch_norm on the device, after its checks (batch: batch statistics). */
DL_API dl_tensor *dl__t_batch_norm_gpu(dl_tape *tp, const char *op, dl_tensor *x, dl_tensor *weight,
                                       dl_tensor *bias, dl_tensor *running_mean, dl_tensor *running_var,
                                       int training, double momentum, double eps, int batch) {
  dlg_handle *h = dl__dnn_h(tp, op, x);
  const int dt = (int)x->dtype;
  dlg_bn p = dl__bn_dlg(x, weight, bias, batch);
  dl_tensor *xc, *y, *st;
  dl_node *nd;
  dl__dnn_tangent_dev(op, x);
  dl__dnn_tangent_dev(op, weight);
  dl__dnn_tangent_dev(op, bias);
  p.update = batch && training && running_mean;
  p.eps = eps;
  p.momentum = momentum;
  p.rmean = running_mean ? running_mean->data : NULL;
  p.rms = running_mean ? running_mean->strides[0] : 0;
  p.rvar = running_var ? running_var->data : NULL;
  p.rvs = running_var ? running_var->strides[0] : 0;
  xc = dl__t_contig(tp, op, x);
  y = dl_tape_out(tp, op, x->dtype, x->ndim, x->shape);
  st = dl_tape_out(tp, op, DL_F64, DL_SHAPE(2, p.C));
  p.stats = (double *)st->data;
  dl__gpu_ok(x, op, dlg_batch_norm_fwd(h, dt, &p, xc->data, y->data));
  if (x->tangent || (weight && weight->tangent) || (bias && bias->tangent)) {
    dl_tensor *tx = x->tangent ? dl__t_contig(tp, op, x->tangent) : NULL;
    dl_tensor *tw = weight && weight->tangent ? dl__t_contig(tp, op, weight->tangent) : NULL;
    dl_tensor *tb = bias && bias->tangent ? dl__t_contig(tp, op, bias->tangent) : NULL;
    dl__gpu_ok(x, op, dlg_batch_norm_tan(h, dt, &p, xc->data, tx ? tx->data : NULL, tw ? tw->data : NULL,
                                         tb ? tb->data : NULL, dl_tape_tangent(tp, y)->data));
  }
  if ((nd = dl_tape_record(tp, op, dl__t_batch_norm_bw, y, x, weight, bias)) != NULL) {
    nd->flags |= DL_NODE_HVP;
    nd->i[0] = batch;
    nd->saved[0] = xc;
    nd->saved[1] = st;
  }
  return y;
}
#endif

/* The op behind dl_t_batch_norm and the fused forms below (relu 0: batch
 * norm alone, 1: a ReLU after it, 2: a ReLU and a 2x2 max pool). */
DL_API dl_tensor *dl__t_batch_norm_op(dl_tape *tp, dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                      dl_tensor *running_mean, dl_tensor *running_var, int training,
                                      double momentum, double eps, int relu);
/* Batch normalisation (torch.nn.functional.batch_norm). x [N, C, ...]
 * (ndim >= 2, channels in dimension 1: [N, C], [N, C, L], [N, C, H, W] ...);
 * weight, bias [C] or NULL (affine=False: weight 1, bias 0); running_mean,
 * running_var [C], both or neither (NULL: track_running_stats=False).
 * Per channel c over the m = N * (positions) elements of the channel:
 *   y = (x - mu_c) / sqrt(var_c + eps) * w_c + b_c
 * Batch mode (training != 0, or no running statistics, like PyTorch's module
 * without them): mu, var are the batch mean and BIASED variance (accumulated
 * in double, f32 too; m must be > 1); when training and the running
 * statistics are given they are updated in place as PyTorch does:
 *   running_mean = (1 - momentum) running_mean + momentum mu
 *   running_var  = (1 - momentum) running_var  + momentum var m / (m - 1)
 * (the unbiased variance; momentum is a number, PyTorch's momentum=None
 * cumulative average is not offered). Evaluation (training == 0 with running
 * statistics): mu, var are the running statistics, nothing is updated. The
 * running statistics never require or receive a gradient and carry no tangent.
 * Backward, with xh = (x - mu) is, is = 1/sqrt(var + eps), sums over the
 * channel's elements:
 *   batch  gx = w is (gy - sum(gy)/m - xh sum(gy xh)/m)
 *   eval   gx = w is gy
 *   gw += sum(gy xh), gb += sum(gy)
 * Tangent (tx, tw, tb): batch ty = w is (tx - sum(tx)/m - xh sum(xh tx)/m)
 * + xh tw + tb; eval ty = w is tx + xh tw + tb.
 * Output: x's shape, contiguous, in the tape's arena. Panics (naming the op
 * and the shapes) on a dtype mismatch, x with fewer than 2 dimensions, a
 * parameter or statistic that is not [C], only one running statistic, eps < 0,
 * or batch statistics over m <= 1 elements per channel. */
DL_API dl_tensor *dl_t_batch_norm(dl_tape *tp, dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                  dl_tensor *running_mean, dl_tensor *running_var, int training,
                                  double momentum, double eps) {
  return dl__t_batch_norm_op(tp, x, weight, bias, running_mean, running_var, training, momentum, eps, 0);
}
/* Whether dl__t_batch_norm_relu applies: x on the host, on a host tape, and
 * no tangent on x, weight or bias (forward mode has no fused rule). */
DL_API int dl__bn_relu_fits(const dl_tape *tp, const dl_tensor *x, const dl_tensor *weight, const dl_tensor *bias) {
  return x->device == DL_CPU && !tp->gpu && !x->tangent && !(weight && weight->tangent) && !(bias && bias->tangent);
}
/* dl_t_relu(dl_t_batch_norm(...)) as one op, where dl__bn_relu_fits: the
 * normalised value is rounded to x's dtype and ReLU'd in the pass that
 * writes it, and the backward takes ReLU's mask from the output in its
 * own two passes (a ReLU pass forward, one backward and a gradient buffer
 * fewer). The output has the two ops' bits; the gradients differ from
 * theirs at most by the order of the double sums, where the masked loop
 * vectorises otherwise than the plain one. Used by a Sequential for a
 * BatchNorm layer followed by a ReLU (dl__lay_seq_forward). Second order
 * (dl_hvp) applies ReLU's rule, then batch norm's. */
DL_API dl_tensor *dl__t_batch_norm_relu(dl_tape *tp, dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                        dl_tensor *running_mean, dl_tensor *running_var, int training,
                                        double momentum, double eps) {
  if (!dl__bn_relu_fits(tp, x, weight, bias))
    DL_PANIC(x->ctx, "dl_t_batch_norm", "the fused ReLU is for host tensors without tangents (x %s)", DL_SHAPESTR(x));
  return dl__t_batch_norm_op(tp, x, weight, bias, running_mean, running_var, training, momentum, eps, 1);
}
/* Whether dl__t_batch_norm_relu_pool applies: dl__bn_relu_fits, x 4-d with
 * planes of 4 .. DL__BNP_MAXHW elements, H and W >= 2. */
DL_API int dl__bn_relu_pool_fits(const dl_tape *tp, const dl_tensor *x, const dl_tensor *weight,
                                 const dl_tensor *bias) {
  return dl__bn_relu_fits(tp, x, weight, bias) && x->ndim == 4 && x->shape[2] >= 2 && x->shape[3] >= 2 &&
         x->shape[2] * x->shape[3] <= DL__BNP_MAXHW;
}
/* dl_t_max_pool2d(dl_t_relu(dl_t_batch_norm(...)), 2x2) as one op, where
 * dl__bn_relu_pool_fits: see dl__bnp_args. The output is the three ops'
 * (the same bits, the same pool indices); the gradients differ from theirs
 * at most by the order of the double sums. Used by a Sequential for a
 * BatchNorm2d, ReLU, MaxPool2d(2) run (dl__lay_seq_forward). */
DL_API dl_tensor *dl__t_batch_norm_relu_pool(dl_tape *tp, dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                             dl_tensor *running_mean, dl_tensor *running_var, int training,
                                             double momentum, double eps) {
  if (!dl__bn_relu_pool_fits(tp, x, weight, bias))
    DL_PANIC(x->ctx, "dl_t_batch_norm", "the fused ReLU and 2x2 pool are for host tensors [N, C, H, W] without "
             "tangents, planes of at most %d elements (x %s)", DL__BNP_MAXHW, DL_SHAPESTR(x));
  return dl__t_batch_norm_op(tp, x, weight, bias, running_mean, running_var, training, momentum, eps, 2);
}
DL_API dl_tensor *dl__t_batch_norm_op(dl_tape *tp, dl_tensor *x, dl_tensor *weight, dl_tensor *bias,
                                      dl_tensor *running_mean, dl_tensor *running_var, int training,
                                      double momentum, double eps, int relu) {
  const char *op = relu == 2 ? "dl_t_batch_norm + relu + max_pool2d" : relu ? "dl_t_batch_norm + relu" : "dl_t_batch_norm";
  dl_tensor *xc, *y, *st, *wd, *par[4], *idx = NULL;
  dl__bnp_args P;
  dl__bn_args A;
  dl_node *nd;
  int64_t C, k;
  int batch, j;
  static const char *const names[4] = {"weight", "bias", "running_mean", "running_var"};
  dl__norm_check_x(op, x, eps);
  if (x->ndim < 2)
    DL_PANIC(x->ctx, op, "x %s must have at least 2 dimensions [N, C, ...]", DL_SHAPESTR(x));
  C = x->shape[1];
  par[0] = weight;
  par[1] = bias;
  par[2] = running_mean;
  par[3] = running_var;
  for (j = 0; j < 4; j++) {
    if (!par[j]) continue;
    dl__ops_same_float(op, x, par[j]);
    if (par[j]->ndim != 1 || par[j]->shape[0] != C)
      DL_PANIC(x->ctx, op, "%s %s must be [C] = [%lld] for x %s", names[j], DL_SHAPESTR(par[j]),
               (long long)C, DL_SHAPESTR(x));
  }
  if (!running_mean != !running_var)
    DL_PANIC(x->ctx, op, "running_mean %s and running_var %s: give both or neither (x %s)",
             running_mean ? DL_SHAPESTR(running_mean) : "NULL",
             running_var ? DL_SHAPESTR(running_var) : "NULL", DL_SHAPESTR(x));
  batch = training || !running_mean;
  memset(&A, 0, sizeof A);
  A.dt = x->dtype;
  A.batch = batch;
  A.eps = eps;
  dl__bn_sizes(x, &A.N, &A.C, &A.S);
  if (batch && A.N * A.S <= 1)
    DL_PANIC(x->ctx, op, "batch statistics need more than 1 value per channel, x %s has %lld",
             DL_SHAPESTR(x), (long long)(A.N * A.S));
#ifdef DL_USE_CUDA
  if (x->device == DL_CUDA || tp->gpu)
    return dl__t_batch_norm_gpu(tp, op, x, weight, bias, running_mean, running_var, training, momentum, eps, batch);
#endif
  xc = dl__t_contig(tp, op, x);
  if (relu == 2) { /* the pooled output and the pool's indices; batch norm's pass writes nothing */
    memset(&P, 0, sizeof P);
    P.g = dl__bnp_geom(x);
    y = dl_tape_out(tp, op, x->dtype, DL_SHAPE(P.g.N, C, P.g.Ho, P.g.Wo));
    { /* the indices, then (8-aligned) x at them: one tensor, the node's fourth saved */
      const int64_t nq = P.g.N * C * P.g.Ho * P.g.Wo;
      idx = dl_tape_out(tp, op, DL_I32, DL_SHAPE(dl__bnp_xs_at(nq) + nq * (int64_t)dl_dtype_size(x->dtype) / 4));
    }
  } else {
    y = dl_tape_out(tp, op, x->dtype, x->ndim, x->shape);
  }
  st = dl_tape_out(tp, op, DL_F64, DL_SHAPE(2, C));
  wd = dl__norm_dvec(tp, op, weight, C, 1.0);
  A.mode = DL__NM_FWD;
  A.relu = relu == 1;
  A.x = xc->data;
  A.out = relu == 2 ? NULL : y->data;
  A.w = (const double *)wd->data;
  A.b = (const double *)dl__norm_dvec(tp, op, bias, C, 0.0)->data;
  A.mean = (double *)st->data;
  A.istd = A.mean + C;
  if (batch) {
    A.var = (double *)dl_tape_scratch(tp, op, sizeof(double) * (size_t)C);
  } else {
    for (k = 0; k < C; k++) {
      A.mean[k] = dl__get_at(running_mean, k * running_mean->strides[0]);
      A.istd[k] = 1.0 / sqrt(dl__get_at(running_var, k * running_var->strides[0]) + eps);
    }
  }
  dl__bn_run(tp, &A);
  if (relu == 2) {
    double *kk = (double *)dl_tape_scratch(tp, op, sizeof(double) * 3 * (size_t)C);
    dl__bn_consts(&A, 0, C, NULL, NULL, kk, kk + C, kk + 2 * C);
    P.dt = x->dtype;
    P.x = xc->data;
    P.mean = A.mean;
    P.k = kk;
    P.y = y->data;
    P.idx = (int32_t *)idx->data;
    P.xs = P.idx + dl__bnp_xs_at(y->numel);
    if (y->numel) dl__bnp_forward(tp, &P);
  }
  if (batch && training && running_mean) {
    const double m = (double)(A.N * A.S);
    for (k = 0; k < C; k++) {
      const int64_t om = k * running_mean->strides[0], ov = k * running_var->strides[0];
      dl__set_at(running_mean, om, (1 - momentum) * dl__get_at(running_mean, om) + momentum * A.mean[k]);
      dl__set_at(running_var, ov,
                 (1 - momentum) * dl__get_at(running_var, ov) + momentum * A.var[k] * m / (m - 1));
    }
  }
  if (x->tangent || (weight && weight->tangent) || (bias && bias->tangent)) {
    dl__bn_args T = A;
    T.mode = DL__NM_TAN;
    T.v = x->tangent ? dl__t_contig(tp, op, x->tangent)->data : NULL;
    T.out = dl_tape_tangent(tp, y)->data;
    T.tw = (const double *)dl__norm_dvec(tp, op, weight ? weight->tangent : NULL, C, 0.0)->data;
    T.tb = (const double *)dl__norm_dvec(tp, op, bias ? bias->tangent : NULL, C, 0.0)->data;
    dl__bn_run(tp, &T);
  }
  if ((nd = dl_tape_record(tp, op, dl__t_batch_norm_bw, y, x, weight, bias)) != NULL) {
    nd->flags |= DL_NODE_HVP;
    nd->i[0] = batch;
    nd->i[1] = relu;
    nd->saved[0] = xc;
    nd->saved[1] = st;
    nd->saved[2] = wd;
    nd->saved[3] = idx; /* the pool's indices, then x at them (x's bits, not converted: dl__bnp_xs_at) */
  }
  return y;
}

/* >>layer norm, rms norm ----------------------------------------------------- */

/* One layer/RMS-norm pass over the row tiles of x [R, D] (contiguous). Per
 * row, mu the mean (0 for RMS norm: center == 0) and is = 1/sqrt(mean((x -
 * mu)^2) + eps), both saved by FWD, xh = (x - mu) is:
 *   FWD  y = xh w + b
 *   TAN  ty = w (is tx - (x - mu) is^3 s1/D - center is s0/D) + xh tw + tb,
 *        s0 = sum tx, s1 = sum tx (x - mu)
 *   BWD  gx += is u - (x - mu) is^3 s1/D - center is s0/D, u = gy w,
 *        s0 = sum u, s1 = sum u (x - mu); the tile's partials of gw (gy xh)
 *        and gb (gy) go to part[tile] */
typedef struct dl__ln_args {
  int mode, center;
  dl_dtype dt;
  int64_t R, D, rpt;      /* rows, row length, rows per tile */
  const void *x;          /* [R, D] contiguous */
  const void *v;          /* TAN: tx or NULL; BWD: gy */
  void *out;              /* FWD: y, TAN: ty, BWD: gx (+=) or NULL */
  const double *w, *b;    /* [D]: weight (ones when absent), bias (zeros) */
  const double *tw, *tb;  /* TAN: [D] tangents of w and b (zeros when absent) */
  double eps;
  double *mean, *istd;    /* [R]: FWD writes, TAN and BWD read */
  double *part;           /* BWD: [ntiles, 2, D] zeroed partials, or NULL */
} dl__ln_args;

#define DL__LN_KERNEL(T, SFX)                                                         \
  DL_API void dl__ln_tile_##SFX(const void *args, int64_t tile) {                     \
    const dl__ln_args *A = (const dl__ln_args *)args;                                 \
    const T *x = (const T *)A->x, *v = (const T *)A->v;                               \
    T *out = (T *)A->out;                                                             \
    const int64_t D = A->D, r0 = tile * A->rpt;                                       \
    const int64_t r1 = A->R - r0 < A->rpt ? A->R : r0 + A->rpt;                       \
    const double dD = (double)D, *w = A->w, *b = A->b;                                \
    int64_t r, j;                                                                     \
    for (r = r0; r < r1; r++) {                                                       \
      const T *xr = x + r * D;                                                        \
      if (A->mode == DL__NM_FWD) {                                                    \
        double mu = 0, a = 0, is;                                                     \
        T *o = out + r * D;                                                           \
        if (A->center) {                                                              \
          DL__RSIMD_SUM(a)                                                            \
          for (j = 0; j < D; j++) a += (double)xr[j];                                 \
          mu = a / dD;                                                                \
          a = 0;                                                                      \
        }                                                                             \
        DL__RSIMD_SUM(a)                                                              \
        for (j = 0; j < D; j++) a += ((double)xr[j] - mu) * ((double)xr[j] - mu);     \
        is = 1.0 / sqrt(a / dD + A->eps);                                             \
        A->mean[r] = mu;                                                              \
        A->istd[r] = is;                                                              \
        DL__RSIMD                                                                     \
        for (j = 0; j < D; j++) o[j] = (T)(((double)xr[j] - mu) * is * w[j] + b[j]);  \
      } else if (A->mode == DL__NM_TAN) {                                             \
        const double mu = A->mean[r], is = A->istd[r];                                \
        const double *tw = A->tw, *tb = A->tb;                                        \
        const T *vr = v ? v + r * D : xr;                                             \
        const double k1 = v ? is : 0.0;                                               \
        double s0 = 0, s1 = 0, k2, k3;                                                \
        T *o = out + r * D;                                                           \
        if (v) {                                                                      \
          DL__NSIMD_SUM2(s0, s1)                                                      \
          for (j = 0; j < D; j++) {                                                   \
            s0 += (double)vr[j];                                                      \
            s1 += (double)vr[j] * ((double)xr[j] - mu);                               \
          }                                                                           \
        }                                                                             \
        k2 = -is * is * is * s1 / dD;                                                 \
        k3 = A->center ? -is * s0 / dD : 0.0;                                         \
        DL__RSIMD                                                                     \
        for (j = 0; j < D; j++) {                                                     \
          const double xm = (double)xr[j] - mu;                                       \
          o[j] = (T)(w[j] * (k1 * (double)vr[j] + xm * k2 + k3) + xm * is * tw[j] + tb[j]); \
        }                                                                             \
      } else {                                                                        \
        const double mu = A->mean[r], is = A->istd[r];                                \
        const T *gr = v + r * D;                                                      \
        if (out) {                                                                    \
          double s0 = 0, s1 = 0, k2, k3;                                              \
          T *o = out + r * D;                                                         \
          DL__NSIMD_SUM2(s0, s1)                                                      \
          for (j = 0; j < D; j++) {                                                   \
            const double u = (double)gr[j] * w[j];                                    \
            s0 += u;                                                                  \
            s1 += u * ((double)xr[j] - mu);                                           \
          }                                                                           \
          k2 = -is * is * is * s1 / dD;                                               \
          k3 = A->center ? -is * s0 / dD : 0.0;                                       \
          DL__RSIMD                                                                   \
          for (j = 0; j < D; j++)                                                     \
            o[j] += (T)(is * (double)gr[j] * w[j] + ((double)xr[j] - mu) * k2 + k3);  \
        }                                                                             \
        if (A->part) {                                                                \
          double *pw = A->part + tile * 2 * D, *pb = pw + D;                          \
          DL__RSIMD                                                                   \
          for (j = 0; j < D; j++) {                                                   \
            pw[j] += (double)gr[j] * ((double)xr[j] - mu) * is;                       \
            pb[j] += (double)gr[j];                                                   \
          }                                                                           \
        }                                                                             \
      }                                                                               \
    }                                                                                 \
  }
DL__LN_KERNEL(float, f32)
DL__LN_KERNEL(double, f64)

/* Tiling of [R, D] rows; returns the tile count. */
DL_API int64_t dl__ln_tiles(dl__ln_args *A) {
  const int64_t D = A->D > 0 ? A->D : 1;
  int64_t rpt = (DL__LN_W + D - 1) / D, min_rpt = (A->R + DL__LN_MAXT - 1) / DL__LN_MAXT;
  if (rpt < min_rpt) rpt = min_rpt;
  if (rpt < 1) rpt = 1;
  A->rpt = rpt;
  return (A->R + rpt - 1) / rpt;
}
DL_API void dl__ln_run(dl_tape *tp, dl__ln_args *A) {
  const int64_t nt = dl__ln_tiles(A);
  dl__norm_run(tp, A->dt == DL_F32 ? dl__ln_tile_f32 : dl__ln_tile_f64, A, nt, A->R * A->D);
}
/* x [R, D] with D the product of the last nnorm dimensions. */
DL_API void dl__ln_sizes(const dl_tensor *x, int nnorm, int64_t *R, int64_t *D) {
  int d;
  *R = 1;
  *D = 1;
  for (d = 0; d < x->ndim; d++) {
    if (d < x->ndim - nnorm) *R *= x->shape[d];
    else *D *= x->shape[d];
  }
}

#ifdef DL_USE_CUDA
/* Backward of a device layer / RMS norm: saved[0] x (contiguous), saved[1]
 * the device statistics [2, R], saved[2] the contiguous weight or NULL. */
DL_API void dl__t_layer_norm_bw_gpu(dl_node *n, dl_tensor *gx, dl_tensor *gw, dl_tensor *gb) {
  const dl_tensor *x = n->in[0], *gy = n->out->grad;
  dlg_ln p;
  memset(&p, 0, sizeof p);
  dl__ln_sizes(x, (int)n->i[0], &p.R, &p.D);
  p.center = (int)n->i[1];
  p.w = n->saved[2] ? n->saved[2]->data : NULL;
  p.stats = (double *)n->saved[1]->data;
  dl__gpu_ok(gy, n->op,
             dlg_layer_norm_bwd(dl__gpu_h(gy, n->op), (int)x->dtype, &p, n->saved[0]->data, gy->data,
                                gx ? gx->data : NULL, gw ? gw->data : NULL, gb ? gb->data : NULL));
}
#endif

DL_API void dl__t_layer_norm_bw(dl_tape *tp, dl_node *n) {
  dl_tensor *x = n->in[0], *w = n->nin > 1 ? n->in[1] : NULL, *b = n->nin > 2 ? n->in[2] : NULL;
  dl_tensor *gx = dl_tape_grad(tp, x), *gw = dl_tape_grad(tp, w), *gb = dl_tape_grad(tp, b);
  dl__ln_args A;
  int64_t nt, t, j;
  if (!gx && !gw && !gb) return;
#ifdef DL_USE_CUDA
  if (n->out->grad->device == DL_CUDA) {
    dl__t_layer_norm_bw_gpu(n, gx, gw, gb);
    return;
  }
#endif
  memset(&A, 0, sizeof A);
  A.mode = DL__NM_BWD;
  A.center = (int)n->i[1];
  A.dt = x->dtype;
  dl__ln_sizes(x, (int)n->i[0], &A.R, &A.D);
  A.x = n->saved[0]->data;
  A.v = n->out->grad->data;
  A.out = gx ? gx->data : NULL;
  A.w = (const double *)n->saved[2]->data;
  A.mean = (double *)n->saved[1]->data;
  A.istd = A.mean + A.R;
  nt = dl__ln_tiles(&A);
  if (gw || gb) {
    const size_t bytes = sizeof(double) * 2 * (size_t)A.D * (size_t)nt;
    A.part = (double *)dl_tape_scratch(tp, n->op, bytes);
    memset(A.part, 0, bytes);
  }
  dl__norm_run(tp, A.dt == DL_F32 ? dl__ln_tile_f32 : dl__ln_tile_f64, &A, nt, A.R * A.D);
  if (tp->hvp) {
    dl__norm_hvp_geom q;
    memset(&q, 0, sizeof q);
    q.G = A.R;
    q.M = A.D;
    q.center = A.center;
    q.stats = 1;
    dl__norm_hvp(n, &q, A.mean, A.istd, gx, gw, gb);
  }
  if (!A.part) return;
  /* tile partials, added in tile order */
  for (j = 0; j < A.D; j++) {
    double sw = 0, sb = 0;
    for (t = 0; t < nt; t++) {
      sw += A.part[t * 2 * A.D + j];
      sb += A.part[t * 2 * A.D + A.D + j];
    }
    if (gw) {
      if (gw->dtype == DL_F32) ((float *)gw->data)[j] += (float)sw;
      else ((double *)gw->data)[j] += sw;
    }
    if (gb) {
      if (gb->dtype == DL_F32) ((float *)gb->data)[j] += (float)sb;
      else ((double *)gb->data)[j] += sb;
    }
  }
}

#ifdef DL_USE_CUDA
/* dl__t_row_norm on the device, after its checks. */
DL_API dl_tensor *dl__t_row_norm_gpu(dl_tape *tp, const char *op, int center, dl_tensor *x, int nnorm,
                                     dl_tensor *weight, dl_tensor *bias, double eps) {
  dlg_handle *h = dl__dnn_h(tp, op, x);
  const int dt = (int)x->dtype;
  dl_tensor *xc, *y, *st, *wc, *bc;
  dl_node *nd;
  dlg_ln p;
  dl__dnn_tangent_dev(op, x);
  dl__dnn_tangent_dev(op, weight);
  dl__dnn_tangent_dev(op, bias);
  memset(&p, 0, sizeof p);
  dl__ln_sizes(x, nnorm, &p.R, &p.D);
  p.center = center;
  p.eps = eps;
  xc = dl__t_contig(tp, op, x);
  y = dl_tape_out(tp, op, x->dtype, x->ndim, x->shape);
  st = dl_tape_out(tp, op, DL_F64, DL_SHAPE(2, p.R));
  wc = weight ? dl__t_contig(tp, op, weight) : NULL;
  bc = bias ? dl__t_contig(tp, op, bias) : NULL;
  p.w = wc ? wc->data : NULL;
  p.b = bc ? bc->data : NULL;
  p.stats = (double *)st->data;
  dl__gpu_ok(x, op, dlg_layer_norm_fwd(h, dt, &p, xc->data, y->data));
  if (x->tangent || (weight && weight->tangent) || (bias && bias->tangent)) {
    dl_tensor *tx = x->tangent ? dl__t_contig(tp, op, x->tangent) : NULL;
    dl_tensor *tw = weight && weight->tangent ? dl__t_contig(tp, op, weight->tangent) : NULL;
    dl_tensor *tb = bias && bias->tangent ? dl__t_contig(tp, op, bias->tangent) : NULL;
    dl__gpu_ok(x, op, dlg_layer_norm_tan(h, dt, &p, xc->data, tx ? tx->data : NULL, tw ? tw->data : NULL,
                                         tb ? tb->data : NULL, dl_tape_tangent(tp, y)->data));
  }
  if ((nd = dl_tape_record(tp, op, dl__t_layer_norm_bw, y, x, weight, bias)) != NULL) {
    nd->flags |= DL_NODE_HVP;
    nd->i[0] = nnorm;
    nd->i[1] = center;
    nd->saved[0] = xc;
    nd->saved[1] = st;
    nd->saved[2] = wc;
  }
  return y;
}
#endif

/* Layer norm (center = 1) and RMS norm (center = 0, no bias). */
DL_API dl_tensor *dl__t_row_norm(dl_tape *tp, const char *op, int center, dl_tensor *x, int nnorm,
                                 dl_tensor *weight, dl_tensor *bias, double eps) {
  dl_tensor *xc, *y, *st, *wd, *par[2];
  dl__ln_args A;
  dl_node *nd;
  int j, d;
  static const char *const names[2] = {"weight", "bias"};
  dl__norm_check_x(op, x, eps);
  if (nnorm < 1 || nnorm > x->ndim)
    DL_PANIC(x->ctx, op, "nnorm %d out of range for x %s (normalises the last 1..%d dimensions)", nnorm,
             DL_SHAPESTR(x), x->ndim);
  par[0] = weight;
  par[1] = bias;
  for (j = 0; j < 2; j++) {
    int ok;
    if (!par[j]) continue;
    dl__ops_same_float(op, x, par[j]);
    ok = par[j]->ndim == nnorm;
    for (d = 0; ok && d < nnorm; d++) ok = par[j]->shape[d] == x->shape[x->ndim - nnorm + d];
    if (!ok)
      DL_PANIC(x->ctx, op, "%s %s must be the last %d dimension(s) of x %s", names[j],
               DL_SHAPESTR(par[j]), nnorm, DL_SHAPESTR(x));
  }
#ifdef DL_USE_CUDA
  if (x->device == DL_CUDA || tp->gpu) return dl__t_row_norm_gpu(tp, op, center, x, nnorm, weight, bias, eps);
#endif
  memset(&A, 0, sizeof A);
  A.mode = DL__NM_FWD;
  A.center = center;
  A.dt = x->dtype;
  A.eps = eps;
  dl__ln_sizes(x, nnorm, &A.R, &A.D);
  xc = dl__t_contig(tp, op, x);
  y = dl_tape_out(tp, op, x->dtype, x->ndim, x->shape);
  st = dl_tape_out(tp, op, DL_F64, DL_SHAPE(2, A.R));
  wd = dl__norm_dvec(tp, op, weight, A.D, 1.0);
  A.x = xc->data;
  A.out = y->data;
  A.w = (const double *)wd->data;
  A.b = (const double *)dl__norm_dvec(tp, op, bias, A.D, 0.0)->data;
  A.mean = (double *)st->data;
  A.istd = A.mean + A.R;
  dl__ln_run(tp, &A);
  if (x->tangent || (weight && weight->tangent) || (bias && bias->tangent)) {
    dl__ln_args T = A;
    T.mode = DL__NM_TAN;
    T.v = x->tangent ? dl__t_contig(tp, op, x->tangent)->data : NULL;
    T.out = dl_tape_tangent(tp, y)->data;
    T.tw = (const double *)dl__norm_dvec(tp, op, weight ? weight->tangent : NULL, A.D, 0.0)->data;
    T.tb = (const double *)dl__norm_dvec(tp, op, bias ? bias->tangent : NULL, A.D, 0.0)->data;
    dl__ln_run(tp, &T);
  }
  if ((nd = dl_tape_record(tp, op, dl__t_layer_norm_bw, y, x, weight, bias)) != NULL) {
    nd->flags |= DL_NODE_HVP;
    nd->i[0] = nnorm;
    nd->i[1] = center;
    nd->saved[0] = xc;
    nd->saved[1] = st;
    nd->saved[2] = wd;
  }
  return y;
}

/* Layer normalisation (torch.nn.functional.layer_norm with normalized_shape
 * = x.shape[-nnorm:]): per row r of the last nnorm dimensions (D elements),
 *   y = (x - mu_r) / sqrt(var_r + eps) * w + b
 * with mu, var the row's mean and biased variance (in double, f32 too).
 * weight, bias: x's last nnorm dimensions, or NULL (weight 1, bias 0).
 * Backward, xh = (x - mu) is, is = 1/sqrt(var + eps), u = gy w, row sums:
 *   gx = is (u - sum(u)/D - xh sum(u xh)/D), gw += sum over rows of gy xh,
 *   gb += sum over rows of gy.
 * Tangent: ty = w is (tx - sum(tx)/D - xh sum(xh tx)/D) + xh tw + tb.
 * Output: x's shape, contiguous, in the tape's arena. Panics (naming the op
 * and the shapes) on nnorm outside 1..ndim, a weight or bias of another
 * shape, a dtype mismatch or eps < 0. */
DL_API dl_tensor *dl_t_layer_norm(dl_tape *tp, dl_tensor *x, int nnorm, dl_tensor *weight,
                                  dl_tensor *bias, double eps) {
  return dl__t_row_norm(tp, "dl_t_layer_norm", 1, x, nnorm, weight, bias, eps);
}

/* RMS normalisation (torch 2.4's nn.RMSNorm with normalized_shape =
 * x.shape[-nnorm:]): per row of the last nnorm dimensions (D elements),
 *   y = x / sqrt(mean(x^2) + eps) * w
 * (the mean of squares in double, f32 too); weight: x's last nnorm
 * dimensions, or NULL (1). Backward, r = 1/sqrt(mean(x^2) + eps), u = gy w:
 *   gx = r u - r^3 x sum(u x)/D, gw += sum over rows of gy x r.
 * Tangent: ty = w (r tx - r^3 x sum(x tx)/D) + x r tw.
 * Output: x's shape, contiguous, in the tape's arena. Panics as
 * dl_t_layer_norm. */
DL_API dl_tensor *dl_t_rms_norm(dl_tape *tp, dl_tensor *x, int nnorm, dl_tensor *weight, double eps) {
  return dl__t_row_norm(tp, "dl_t_rms_norm", 0, x, nnorm, weight, NULL, eps);
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_OPS_NORM_H */
