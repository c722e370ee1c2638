/* tests/gpu_host/rnn_ref.c - the CPU side of tests/gpu_host/rnn_host.cu:
 * runs dl.h's own recurrent ops (ops/rnn.h: dl_t_rnn, dl_t_lstm, dl_t_gru)
 * on the tape on plain arrays and returns the outputs, the gradients and
 * the forward-mode tangents, for the host test to compare with
 * src_gpu/rnn.cu's kernel bodies. Built as C11 (gcc or clang), linked into
 * the nvcc-built test; see the top of rnn_host.cu for the commands.
 *
 * Arrays are contiguous, of f32 (dt 0) or f64 (dt 1) elements. */
#include "host_check.h" /* rnn_ref_io, rnn_ref, dl.h, ref_init, ref_out */

enum { REF_MAX = 32 };

/* An owned tensor of io's dtype, filled from src (NULL src: no tensor). */
static dl_tensor *ref_make_io(const rnn_ref_io *io, int nd, int64_t d0, int64_t d1, int64_t d2, const void *src,
                              dl_tensor **made, int *nmade) {
  int64_t shape[3];
  dl_tensor *t;
  if (!src) return NULL;
  shape[0] = d0;
  shape[1] = d1;
  shape[2] = d2;
  t = dl_tensor_make(&ref_ctx, io->dt ? DL_F64 : DL_F32, nd, shape);
  memcpy(t->data, src, (size_t)t->numel * dl_dtype_size(t->dtype));
  made[(*nmade)++] = t;
  return t;
}

void rnn_ref(const rnn_ref_io *io) {
  const int64_t G = io->kind == 2 ? 4 : io->kind == 3 ? 3 : 1, B = io->B, T = io->T, I = io->I, H = io->H;
  dl_tensor *made[REF_MAX], *in[7], *tin[7], *y, *hn = NULL, *cn = NULL;
  const void *src[7], *tsrc[7];
  int nmade = 0, k, back = io->gy != NULL;
  dl_rnn_args a;
  dl_tape tp;
  ref_init();
  src[0] = io->x; src[1] = io->h0; src[2] = io->c0; src[3] = io->wih; src[4] = io->whh; src[5] = io->bih;
  src[6] = io->bhh;
  tsrc[0] = io->tx; tsrc[1] = io->th0; tsrc[2] = io->tc0; tsrc[3] = io->twih; tsrc[4] = io->twhh;
  tsrc[5] = io->tbih; tsrc[6] = io->tbhh;
  {
    const int nd[7] = {3, 2, 2, 2, 2, 1, 1};
    const int64_t d0[7] = {B, B, B, G * H, G * H, G * H, G * H}, d1[7] = {T, H, H, I, H, 0, 0};
    for (k = 0; k < 7; k++) {
      in[k] = ref_make_io(io, nd[k], d0[k], d1[k], I, src[k], made, &nmade);
      tin[k] = in[k] ? ref_make_io(io, nd[k], d0[k], d1[k], I, tsrc[k], made, &nmade) : NULL;
      if (in[k] && back) dl_requires_grad(in[k]);
      if (tin[k]) dl_set_tangent(in[k], tin[k]);
    }
  }
  dl_tape_init(&tp, &ref_ctx, 0);
  memset(&a, 0, sizeof a);
  a.lengths = io->lengths;
  a.gru_reset_before_linear = io->rb;
  if (io->kind <= 1)
    y = dl_t_rnn_ex(&tp, in[0], in[1], in[3], in[4], in[5], in[6], io->kind == 0, &a, &hn);
  else if (io->kind == 2)
    y = dl_t_lstm_ex(&tp, in[0], in[1], in[2], in[3], in[4], in[5], in[6], &a, &hn, &cn);
  else
    y = dl_t_gru_ex(&tp, in[0], in[1], in[3], in[4], in[5], in[6], &a, &hn);
  for (k = 0; k < 7; k++)
    if (in[k]) dl_set_tangent(in[k], NULL);
  ref_out(io->y, y);
  ref_out(io->hn, hn);
  ref_out(io->cn, cn);
  ref_out(io->ty, y->tangent);
  ref_out(io->thn, hn->tangent);
  if (cn) ref_out(io->tcn, cn->tangent);
  if (back) {
    dl_tensor *gy = ref_make_io(io, 3, B, T, H, io->gy, made, &nmade);
    dl_tensor *ghn = ref_make_io(io, 2, B, H, 0, io->ghn, made, &nmade);
    dl_tensor *loss = dl_t_sum_all(&tp, dl_t_mul(&tp, y, gy));
    loss = dl_t_add(&tp, loss, dl_t_sum_all(&tp, dl_t_mul(&tp, hn, ghn)));
    if (cn) {
      dl_tensor *gcn = ref_make_io(io, 2, B, H, 0, io->gcn, made, &nmade);
      loss = dl_t_add(&tp, loss, dl_t_sum_all(&tp, dl_t_mul(&tp, cn, gcn)));
    }
    dl_backward(&tp, loss, NULL);
    ref_out(io->gx, in[0]->grad);
    if (in[1]) ref_out(io->gh0, in[1]->grad);
    if (in[2] && cn) ref_out(io->gc0, in[2]->grad);
    ref_out(io->gwih, in[3]->grad);
    ref_out(io->gwhh, in[4]->grad);
    if (in[5]) ref_out(io->gbih, in[5]->grad);
    if (in[6]) ref_out(io->gbhh, in[6]->grad);
  }
  dl_tape_free(&tp);
  while (nmade > 0) dl_tensor_free(made[--nmade]);
}
