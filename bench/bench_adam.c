/* bench/bench_adam.c - one Adam update (dl_adam_update, 1 thread) against
 * the same formula as a plain C loop (each product and sum rounded on its
 * own; gcc -O2 keeps it scalar: sqrt's errno), f32 and f64, on 20000
 * elements (in cache) and on 235146 (the 784-256-128-10 MLP's parameters). The two alternate
 * call by call; nanoseconds per element, medians of 201 calls each, and the
 * ratio plain / dl.h. Both give the same bits (checked here on every run).
 *
 *   bench_adam
 * prints per case: adam <dtype> n=<n> dl_ns=<x> plain_ns=<y> ratio=<y/x> same=<0|1>
 */
#define _POSIX_C_SOURCE 199309L
#include "dl.h"
#include "bench_util.h"

#ifdef __clang__
#pragma clang fp contract(off) /* (gcc's -std=c11 does not contract) */
#endif
#define PLAIN_ADAM(S, SQRT)                                                                           \
  static void plain_##S(S *P, const S *G, S *M, S *V, int64_t n, const dl_adam_cfg *c, int64_t step) { \
    const S b1 = (S)c->beta1, b1c = (S)(1 - c->beta1), b2 = (S)c->beta2, b2c = (S)(1 - c->beta2);      \
    const S ss = (S)(c->lr / (1 - pow(c->beta1, (double)step)));                                      \
    const S bc = (S)sqrt(1 - pow(c->beta2, (double)step)), eps = (S)c->eps;                          \
    int64_t i;                                                                                       \
    for (i = 0; i < n; i++) {                                                                        \
      const S d = G[i], mi = M[i] * b1 + b1c * d, vi = V[i] * b2 + b2c * (d * d);                    \
      M[i] = mi;                                                                                     \
      V[i] = vi;                                                                                     \
      P[i] = P[i] * (S)1 - (ss * mi) / (SQRT(vi) / bc + eps);                                        \
    }                                                                                                \
  }
PLAIN_ADAM(float, sqrtf)
PLAIN_ADAM(double, sqrt)

int main(void) {
  static const int64_t sizes[2] = {20000, 235146};
  dl_ctx ctx;
  dl_ctx_desc d;
  dl_adam_cfg c = dl_adam_defaults(1e-3);
  int dti, si, r, k;
  memset(&d, 0, sizeof d);
  d.threads = 1;
  dl_ctx_init(&ctx, &d);
  for (dti = 0; dti < 2; dti++)
    for (si = 0; si < 2; si++) {
      const dl_dtype dt = dti ? DL_F64 : DL_F32;
      const int64_t n = sizes[si];
      enum { CALLS = 201 };
      double tdl[CALLS], tpl[CALLS];
      dl_tensor *a[4], *b[4];
      dl_rng rng = dl_rng_make(5);
      int same = 1;
      for (k = 0; k < 4; k++) {
        a[k] = dl_tensor_make(&ctx, dt, DL_SHAPE(n));
        b[k] = dl_tensor_make(&ctx, dt, DL_SHAPE(n));
        if (k == 3) dl_tensor_rand_uniform(a[k], &rng, 0, 1e-3); /* v >= 0 */
        else dl_tensor_rand_normal(a[k], &rng, 0, 1);
        dl_tensor_copy(b[k], a[k]);
      }
      for (r = 0; r < CALLS; r++) {
        const int64_t step = 1 + 7 * r; /* bias corrections from 0.03 to 0.8 */
        double t0 = bench_now();
        dl_adam_update(a[0], a[1], a[2], a[3], NULL, step, &c);
        tdl[r] = bench_now() - t0;
        t0 = bench_now();
        if (dt == DL_F32)
          plain_float((float *)b[0]->data, (const float *)b[1]->data, (float *)b[2]->data, (float *)b[3]->data, n,
                      &c, step);
        else
          plain_double((double *)b[0]->data, (const double *)b[1]->data, (double *)b[2]->data,
                       (double *)b[3]->data, n, &c, step);
        tpl[r] = bench_now() - t0;
      }
      for (k = 0; k < 4; k++) same &= memcmp(a[k]->data, b[k]->data, (size_t)n * dl_dtype_size(dt)) == 0;
      {
        const double x = bench_median(tdl, CALLS) * 1e9 / (double)n, y = bench_median(tpl, CALLS) * 1e9 / (double)n;
        printf("adam %s n=%lld dl_ns=%.3f plain_ns=%.3f ratio=%.2f same=%d\n", dl_dtype_name(dt), (long long)n, x, y,
               y / x, same);
      }
      for (k = 0; k < 4; k++) {
        dl_tensor_free(a[k]);
        dl_tensor_free(b[k]);
      }
    }
  return 0;
}
