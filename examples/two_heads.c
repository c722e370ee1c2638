/* examples/two_heads.c - reverse mode on the tape: one shared trunk, two heads,
 * two losses back-propagated one after the other before ONE update (the
 * pattern of the Flux paper's listing 4). Gradients accumulate (+=) into the
 * shared parameters, so the trunk learns features that serve both heads.
 *
 * Synthetic data, where the effect can be checked: x ~ N(0, 1)^8;
 *   head A regresses a = sin(x0) + x1 * x2            (mean squared error)
 *   head B classifies b = [x3 + x4^2 > 1]             (cross-entropy, 2 classes)
 * Build and run:  cc -std=c11 -O2 examples/two_heads.c -Iinclude -lm && ./a.out
 * Ends with: result: mse_a=... acc_b=... (held-out data)
 */
#include "dl.h"

enum { N = 256, D = 8, H = 32, NTEST = 1024 };

static void make_data(dl_rng *rng, dl_tensor *x, dl_tensor *a, dl_tensor *b) {
  int64_t i, n = x->shape[0];
  float *xp = dl_f32(x), *ap = dl_f32(a);
  int64_t *bp = dl_i64(b);
  dl_tensor_rand_normal(x, rng, 0.0, 1.0);
  for (i = 0; i < n; i++) {
    const float *r = xp + i * D;
    ap[i] = sinf(r[0]) + r[1] * r[2];
    bp[i] = r[3] + r[4] * r[4] > 1.0f;
  }
}

/* the model's parameters: trunk W1 b1, head A wa ba, head B wb bb */
typedef struct model { dl_tensor *p[6]; } model;

static dl_tensor *trunk(dl_tape *tp, const model *m, dl_tensor *x) {
  return dl_t_tanh(tp, dl_t_linear(tp, x, m->p[0], m->p[1]));
}
static dl_tensor *head_a(dl_tape *tp, const model *m, dl_tensor *h) {
  return dl_t_reshape(tp, dl_t_linear(tp, h, m->p[2], m->p[3]), DL_SHAPE(-1));
}
static dl_tensor *head_b(dl_tape *tp, const model *m, dl_tensor *h) { return dl_t_linear(tp, h, m->p[4], m->p[5]); }

int main(void) {
  static const int64_t shapes[6][2] = {{H, D}, {H, 0}, {1, H}, {1, 0}, {2, H}, {2, 0}};
  static const int ndims[6] = {2, 1, 2, 1, 2, 1};
  dl_rng rng = dl_rng_make(7);
  dl_tape tp;
  model m;
  dl_tensor *x = dl_tensor_make(NULL, DL_F32, DL_SHAPE(N, D)), *a = dl_tensor_make(NULL, DL_F32, DL_SHAPE(N));
  dl_tensor *b = dl_tensor_make(NULL, DL_I64, DL_SHAPE(N));
  dl_tensor *xt = dl_tensor_make(NULL, DL_F32, DL_SHAPE(NTEST, D)), *at = dl_tensor_make(NULL, DL_F32, DL_SHAPE(NTEST));
  dl_tensor *bt = dl_tensor_make(NULL, DL_I64, DL_SHAPE(NTEST));
  int k, step;
  double mse = 0, acc = 0;
  if (!x || !a || !b || !xt || !at || !bt || dl_tape_init(&tp, NULL, 0) != DL_OK) return 1;
  for (k = 0; k < 6; k++) {
    double bound = 1.0 / sqrt(k < 2 ? (double)D : (double)H); /* PyTorch's Linear: 1/sqrt(in) */
    m.p[k] = dl_tensor_make(NULL, DL_F32, ndims[k], shapes[k]);
    if (!m.p[k] || dl_requires_grad(m.p[k]) != DL_OK) return 1;
    dl_tensor_rand_uniform(m.p[k], &rng, -bound, bound);
  }
  make_data(&rng, xt, at, bt);
  for (step = 0; step < 1500; step++) {
    dl_tensor *h, *loss_a, *loss_b;
    make_data(&rng, x, a, b); /* a fresh batch each step */
    for (k = 0; k < 6; k++) dl_zero_grad(m.p[k]);
    h = trunk(&tp, &m, x);                                        /* forward, shared */
    loss_a = dl_t_mse(&tp, head_a(&tp, &m, h), a, DL_REDUCE_MEAN);
    loss_b = dl_t_cross_entropy(&tp, head_b(&tp, &m, h), b, 0.0, DL_REDUCE_MEAN);
    dl_backward(&tp, loss_a, NULL);                               /* trunk grads += from A */
    dl_backward(&tp, loss_b, NULL);                               /* trunk grads += from B */
    for (k = 0; k < 6; k++) DL_ASSIGN(m.p[k], dl_sub(m.p[k], dl_mul(0.05, m.p[k]->grad))); /* one update */
    if (step % 300 == 0)
      printf("step %4d  loss_a %.4f  loss_b %.4f\n", step, dl_f32(loss_a)[0], dl_f32(loss_b)[0]);
    dl_tape_rewind(&tp);
  }
  /* held-out evaluation: no tape history */
  dl_no_grad_begin(&tp);
  {
    dl_tensor *h = trunk(&tp, &m, xt), *pa = head_a(&tp, &m, h), *pb = head_b(&tp, &m, h);
    int64_t i;
    for (i = 0; i < NTEST; i++) {
      double e = dl_f32(pa)[i] - dl_f32(at)[i];
      const float *lg = dl_f32(pb) + 2 * i;
      mse += e * e / NTEST;
      acc += (int64_t)(lg[1] > lg[0]) == dl_i64(bt)[i] ? 1.0 / NTEST : 0.0;
    }
  }
  dl_no_grad_end(&tp);
  {
    double var = 0, mean = 0;
    int64_t i;
    for (i = 0; i < NTEST; i++) mean += dl_f32(at)[i] / NTEST;
    for (i = 0; i < NTEST; i++) var += (dl_f32(at)[i] - mean) * (dl_f32(at)[i] - mean) / NTEST;
    printf("result: mse_a=%.4f var_a=%.4f acc_b=%.4f\n", mse, var, acc);
  }
  dl_tape_free(&tp);
  for (k = 0; k < 6; k++) dl_tensor_free(m.p[k]);
  dl_tensor_free(x); dl_tensor_free(a); dl_tensor_free(b); dl_tensor_free(xt); dl_tensor_free(at); dl_tensor_free(bt);
  return 0;
}
