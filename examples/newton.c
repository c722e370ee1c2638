/* examples/newton.c - forward-mode automatic differentiation with dual
 * numbers on ordinary C functions: no tape, no tensors.
 *
 *   cc -std=c11 -O2 -Iinclude examples/newton.c -o newton -lm && ./newton
 *
 * 1. Newton's method for a root of f(x) = x^3 - 2x - 5 (Wallis' example):
 *    f'(x) comes from evaluating f on the dual number (x, 1).
 * 2. Newton's method for a 2-D system F(x, y) = 0, with the Jacobian built
 *    one column per evaluation (seed dx = 1, then dy = 1).
 * 3. A fused tensor expression: y = tanh(a*b + c) over a million floats in
 *    one loop, compared with the same computation done naively.
 */
#include <stdio.h>
#include "dl.h"

/* The user's function, written once with the generic math: the scalar
 * context says which type it computes in. */
static dl_dual64 wallis(dl_dual64 x) {
  DL_SCALAR(dl_dual64);
  return dl_sub(dl_sub(dl_mul(x, dl_mul(x, x)), dl_mul(2, x)), 5);
}

/* F(x, y) = (x^2 + y^2 - 4, e^x + y - 1): a circle meeting an exponential. */
static void system2(const dl_dual64 in[2], dl_dual64 out[2]) {
  DL_SCALAR(dl_dual64);
  out[0] = dl_sub(dl_add(dl_mul(in[0], in[0]), dl_mul(in[1], in[1])), 4);
  out[1] = dl_sub(dl_add(dl_exp(in[0]), in[1]), 1);
}

int main(void) {
  double x = 2.0, v[2] = {1.0, -1.7};
  int it;

  printf("1. root of x^3 - 2x - 5 by Newton's method with dual numbers\n");
  for (it = 0; it < 8; it++) {
    dl_dual64 f = wallis(dl_dual64_make(x, 1.0));    /* (f(x), f'(x)) in one call */
    printf("   step %d: x = %.17g  f(x) = % .3e  f'(x) = %.6f\n", it, x, f.v, f.d);
    if (f.v == 0.0 || fabs(f.v / f.d) < 1e-16 * fabs(x)) break;
    x -= f.v / f.d;
  }
  printf("   root = %.15f\n", x);

  printf("2. the system x^2 + y^2 = 4, e^x + y = 1 with a dual-number Jacobian\n");
  for (it = 0; it < 8; it++) {
    dl_dual64 in[2], out[2];
    double J[2][2], F[2], det, dx, dy;
    int col;
    for (col = 0; col < 2; col++) {              /* column col of J: seed that input */
      in[0] = dl_dual64_make(v[0], col == 0);
      in[1] = dl_dual64_make(v[1], col == 1);
      system2(in, out);
      J[0][col] = out[0].d;
      J[1][col] = out[1].d;
    }
    F[0] = out[0].v;
    F[1] = out[1].v;
    det = J[0][0] * J[1][1] - J[0][1] * J[1][0];
    dx = (F[0] * J[1][1] - F[1] * J[0][1]) / det;
    dy = (J[0][0] * F[1] - J[1][0] * F[0]) / det;
    v[0] -= dx;
    v[1] -= dy;
    printf("   step %d: (x, y) = (% .15f, % .15f)  |F| = %.3e\n", it, v[0], v[1], fabs(F[0]) + fabs(F[1]));
    if (fabs(dx) + fabs(dy) < 1e-15) break;
  }

  printf("3. a fused expression over tensors: y = tanh(a*b + c)\n");
  {
    int64_t n = 1 << 20, i;
    dl_rng rng = dl_rng_make(42);
    dl_tensor *a = dl_tensor_make(NULL, DL_F32, DL_SHAPE(n)), *b = dl_tensor_make(NULL, DL_F32, DL_SHAPE(n));
    dl_tensor *c = dl_tensor_make(NULL, DL_F32, DL_SHAPE(n)), *y = dl_tensor_make(NULL, DL_F32, DL_SHAPE(n));
    double worst = 0;
    if (!a || !b || !c || !y) { fprintf(stderr, "out of memory\n"); return 1; }
    dl_tensor_rand_normal(a, &rng, 0, 1);
    dl_tensor_rand_normal(b, &rng, 0, 1);
    dl_tensor_rand_normal(c, &rng, 0, 1);
    DL_ASSIGN(y, dl_tanh(dl_add(dl_mul(a, b), c)));
    for (i = 0; i < n; i++) {
      double want = tanh((double)(dl_f32(a)[i] * dl_f32(b)[i] + dl_f32(c)[i]));
      double err = fabs(dl_f32(y)[i] - want);
      if (err > worst) worst = err;
    }
    printf("   %lld elements, largest difference from libm tanh in double: %.2e\n", (long long)n, worst);
    dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(c); dl_tensor_free(y);
  }
  printf("result: root=%.15f system_x=%.15f system_y=%.15f\n", x, v[0], v[1]);
  return 0;
}
