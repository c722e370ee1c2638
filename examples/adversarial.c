/* examples/adversarial.c - one shared trunk, two heads, two losses
 * back-propagated one after the other before ONE optimizer update (the
 * pattern of the Flux paper's listing 4).
 *
 * The name comes from adversarial training, which rests on the same
 * mechanics; the heads here are not adversaries (no gradient reversal, no
 * min-max game): both cooperate on the trunk. What the program shows is
 * what adversarial training, multi-task learning and auxiliary losses
 * share: dl_backward ACCUMULATES (+=) into the parameters' gradients, so
 *     h = trunk(x);  la = mse(head_a(h), a);  lb = cross_entropy(head_b(h), b);
 *     dl_backward(tp, la);  dl_backward(tp, lb);   // the trunk gets both gradients
 *     dl_optim_step(opt);   dl_model_zero_grad(m); // one update
 * and the trunk learns features that serve both heads.
 *
 * Synthetic data (made from --data-seed, so every --seed sees the same data):
 * x ~ N(0, 1)^8;
 *   head A regresses a = sin(x0) + x1 * x2       (mean squared error)
 *   head B classifies b = [x3 + x4^2 > 1]        (cross-entropy, 2 classes)
 * The two targets depend on different inputs, so the trunk has to carry
 * features for each. --detach-a is the comparison: head A then sees the
 * trunk through dl_detach, its loss no longer reaches the trunk, the trunk
 * learns for head B alone and head A can only fit a linear read-out of
 * features that were not made for it: its held-out error stays at about 60%
 * of the target's variance, against under 1% when the trunk serves both
 * (20 epochs).
 *
 * Model (PyTorch names): trunk = Sequential(Linear(8, H), Tanh), head_a =
 * Linear(H, 1), head_b = Linear(H, 2); Adam. The per-epoch line and the CSV
 * log show the sum of the two losses (what one update minimises) and head
 * B's accuracy. Ends with one line
 *   result: test_acc=0.98.. epochs=.. train_samples_per_s=.. wall_s=.. mse_a=.. var_a=.. test_loss_b=..
 * where test_acc is head B's held-out accuracy and mse_a head A's held-out
 * mean squared error next to var_a, the variance of its target.
 *
 * Build and run:
 *   cc -std=c11 -O2 -Iinclude examples/adversarial.c -o adversarial -lm && ./adversarial
 *   ./adversarial --detach-a            (the trunk no longer serves head A)
 *   ./adversarial --help
 */
#if defined(__has_include)
#if __has_include(<stb/stb_image_write.h>)
#define DL_USE_STB_IMAGE_WRITE
#endif
#endif
#include "dl.h"

enum { D = 8, N_TRAIN = 8192, N_TEST = 2048 };

/* n samples: x [n, D] from the stream rng (draw i*D + j is x[i, j], so the
 * first k samples do not depend on n) and the label b [n] of head B. */
static dl_status make_data(dl_ctx *ctx, uint64_t seed, int64_t n, dl_dataset *ds) {
  dl_tensor *x = dl_tensor_make(ctx, DL_F32, DL_SHAPE(n, D));
  dl_tensor *b = x ? dl_tensor_make(ctx, DL_I64, DL_SHAPE(n)) : NULL;
  dl_rng rng = dl_rng_make(seed);
  int64_t i;
  if (!b) return dl_tensor_free(x), ctx->status ? ctx->status : DL_ERR_NOMEM;
  dl_tensor_rand_normal(x, &rng, 0.0, 1.0);
  for (i = 0; i < n; i++) {
    const float *r = dl_f32(x) + i * D;
    dl_i64(b)[i] = r[3] + r[4] * r[4] > 1.0f;
  }
  return dl_dataset_make(ctx, ds, x, b, DL_DATASET_OWN);
}

/* Head A's target a [n] = sin(x0) + x1 * x2 of the inputs x [n, D]. */
static void fill_a(const dl_tensor *x, dl_tensor *a) {
  int64_t i;
  for (i = 0; i < x->shape[0]; i++) {
    const float *r = dl_f32(x) + i * D;
    dl_f32(a)[i] = sinf(r[0]) + r[1] * r[2];
  }
}

/* The model as one function, for dl_model_summary: [B, 1 + 2], head A's
 * value and head B's two logits side by side. Training calls the parts. */
static dl_tensor *both_heads(dl_layer *root, dl_tape *tp, dl_tensor *x) {
  dl_tensor *h = dl_layer_call(dl_layer_child(root, "trunk"), tp, x), *ys[2];
  ys[0] = dl_layer_call(dl_layer_child(root, "head_a"), tp, h);
  ys[1] = dl_layer_call(dl_layer_child(root, "head_b"), tp, h);
  return dl_t_concat(tp, 2, ys, 1);
}

static dl_model *make_model(dl_ctx *ctx, uint64_t seed, int64_t hidden) {
  dl_model *m = dl_model_make(ctx, &(dl_model_desc){.dtype = DL_F32, .seed = seed});
  dl_layer *trunk = dl_sequential_make(m, NULL, "trunk");
  dl_linear_make(m, trunk, NULL, &(dl_linear_desc){.in = D, .out = hidden});   /* "trunk.0.weight", ".bias" */
  dl_act_make(m, trunk, NULL, DL_ACT_TANH, 0);                                 /* "trunk.1" */
  dl_linear_make(m, NULL, "head_a", &(dl_linear_desc){.in = hidden, .out = 1}); /* "head_a.weight", ".bias" */
  dl_linear_make(m, NULL, "head_b", &(dl_linear_desc){.in = hidden, .out = 2}); /* "head_b.*" */
  if (m) dl_model_set_forward(m, both_heads, NULL);
  return m;
}

/* Everything the program owns, zeroed first so that one cleanup frees it
 * whatever step failed. */
typedef struct prog {
  dl_ctx ctx;
  dl_dataset train, test;
  dl_batcher tb;
  dl_tensor *a_batch, *a_test; /* head A's targets: of the current batch, of the test set */
  dl_model *m;
  dl_optim *opt;
  dl_tape tp;
  dl_run r;
  dl_train_paths paths; /* runs/adversarial/... for the outputs the flags do not name */
} prog;

static int fail(prog *p, const char *argv0) {
  fprintf(stderr, "%s: %s\n", argv0, dl_ctx_message(&p->ctx));
  return 1;
}

/* The held-out numbers: head A's mean squared error, head B's mean
 * cross-entropy and accuracy; no tape history, eval mode. */
static void evaluate(prog *p, double *mse_a, double *loss_b, double *acc_b) {
  dl_tape *tp = &p->tp;
  dl_layer *root = &p->m->root;
  dl_tensor *h, *ya, *yb;
  dl_model_train(p->m, 0);
  dl_no_grad_begin(tp);
  h = dl_layer_call(dl_layer_child(root, "trunk"), tp, p->test.x);
  ya = dl_t_reshape(tp, dl_layer_call(dl_layer_child(root, "head_a"), tp, h), DL_SHAPE(-1));
  yb = dl_layer_call(dl_layer_child(root, "head_b"), tp, h);
  *mse_a = dl_f32(dl_t_mse(tp, ya, p->a_test, DL_REDUCE_MEAN))[0];
  *loss_b = dl_f32(dl_t_cross_entropy(tp, yb, p->test.y, 0, DL_REDUCE_MEAN))[0];
  *acc_b = dl_accuracy(yb, p->test.y);
  dl_tape_rewind(tp);
  dl_no_grad_end(tp);
  dl_model_train(p->m, 1);
}

static int run(prog *p, dl_train_opts *o, int64_t data_seed, int64_t hidden, int detach_a, const char *argv0) {
  dl_ctx *ctx = &p->ctx;
  dl_layer *root;
  dl_adam_cfg ac;
  double mse_a = NAN, loss_b = NAN, acc_b = NAN, var_a = 0, mean_a = 0;
  int64_t ntrain = o->subset > 0 && o->subset < N_TRAIN ? o->subset : N_TRAIN, steps_per_epoch, i;
  /* --save, --csv, --chart not given: into runs/adversarial/, announced (never the current folder) */
  if (dl_train_default_outputs(ctx, o, "adversarial", &p->paths, stdout, 1) != DL_OK) return fail(p, argv0);

  /* the data: the test set from its own stream, so --subset leaves it alone */
  if (make_data(ctx, (uint64_t)data_seed * 2 + 1, ntrain, &p->train) != DL_OK ||
      make_data(ctx, (uint64_t)data_seed * 2 + 2, N_TEST, &p->test) != DL_OK)
    return fail(p, argv0);
  if (!(p->a_batch = dl_tensor_make(ctx, DL_F32, DL_SHAPE(o->batch))) ||
      !(p->a_test = dl_tensor_make(ctx, DL_F32, DL_SHAPE(N_TEST))))
    return fail(p, argv0);
  fill_a(p->test.x, p->a_test);
  for (i = 0; i < N_TEST; i++) mean_a += dl_f32(p->a_test)[i] / N_TEST;
  for (i = 0; i < N_TEST; i++) var_a += (dl_f32(p->a_test)[i] - mean_a) * (dl_f32(p->a_test)[i] - mean_a) / N_TEST;
  if (dl_batcher_make(ctx, &p->tb, &p->train,
                      &(dl_batcher_desc){.batch_size = o->batch, .dtype = DL_F32,
                                         .shuffle = {.seed = (uint64_t)o->seed}}) != DL_OK)
    return fail(p, argv0);
  steps_per_epoch = (p->train.n + o->batch - 1) / o->batch;

  p->m = make_model(ctx, (uint64_t)o->seed, hidden);
  if (!p->m || dl_model_status(p->m) != DL_OK) return fail(p, argv0);
  root = &p->m->root;
  ac = dl_adam_defaults(o->lr);
  if (!(p->opt = dl_optim_adam(p->m, &ac)) || dl_tape_init(&p->tp, ctx, 0) != DL_OK) return fail(p, argv0);
  if (dl_run_begin(&p->r, ctx, &(dl_run_desc){.opts = o, .model = p->m, .optim = p->opt, .batcher = &p->tb,
                                              .steps_per_epoch = steps_per_epoch,
                                              .title = "two heads: loss A + B, accuracy of B"}) != DL_OK) {
    dl_run_print_error(&p->r, stderr, argv0);
    return 1;
  }
  if (!o->eval) {
    printf("%lld training samples (%lld steps of %lld per epoch), %lld held out; head A's loss %s\n",
           (long long)p->train.n, (long long)steps_per_epoch, (long long)o->batch, (long long)N_TEST,
           detach_a ? "stops at the trunk (--detach-a)" : "reaches the trunk");
    if (dl_model_summary(p->m, stdout, p->test.x) != DL_OK) return fail(p, argv0);
    if (p->r.epoch > 0)
      printf("resumed from %s after epoch %lld (step %lld)\n", o->resume, (long long)p->r.epoch, (long long)p->r.step);
  }

  while (dl_run_next_epoch(&p->r)) {
    dl_batch b;
    while (dl_batcher_next(&p->tb, &b)) {
      dl_tape *tp = &p->tp;
      dl_tensor a = dl_view_slice(p->a_batch, 0, 0, b.size, 1); /* the last batch may be smaller */
      dl_tensor *h, *ya, *yb, *loss_a, *loss_b;
      double lv;
      fill_a(b.x, &a);
      h = dl_layer_call(dl_layer_child(root, "trunk"), tp, b.x);                     /* shared */
      ya = dl_layer_call(dl_layer_child(root, "head_a"), tp, detach_a ? dl_detach(tp, h) : h);
      yb = dl_layer_call(dl_layer_child(root, "head_b"), tp, h);
      loss_a = dl_t_mse(tp, dl_t_reshape(tp, ya, DL_SHAPE(-1)), &a, DL_REDUCE_MEAN);
      loss_b = dl_t_cross_entropy(tp, yb, b.y, 0, DL_REDUCE_MEAN);
      lv = dl_f32(loss_a)[0] + dl_f32(loss_b)[0];
      dl_backward(tp, loss_a, NULL); /* head A's and (unless detached) the trunk's gradients += */
      dl_backward(tp, loss_b, NULL); /* head B's and the trunk's gradients += */
      dl_optim_step(p->opt);         /* ONE update from the sum */
      dl_model_zero_grad(p->m);
      dl_run_step(&p->r, b.size, lv, dl_accuracy_count(yb, b.y));
      dl_tape_rewind(tp);
    }
    evaluate(p, &mse_a, &loss_b, &acc_b);
    if (dl_run_end_epoch(&p->r, mse_a + loss_b, acc_b) != DL_OK) return fail(p, argv0);
  }

  evaluate(p, &mse_a, &loss_b, &acc_b);
  printf("held out: head A mse %.4f (target variance %.4f, R^2 %.3f), head B accuracy %.4f\n", mse_a, var_a,
         1 - mse_a / var_a, acc_b);
  if (dl_run_finish(&p->r) != DL_OK) return fail(p, argv0);
  if (!o->eval && o->save) printf("weights: %s\n", o->save);
  if (!o->eval && o->chart && p->r.epoch > p->r.first_epoch) printf("chart: %s\n", o->chart);
  dl_run_result(&p->r, stdout, acc_b, "mse_a=%.4f var_a=%.4f test_loss_b=%.4f detach_a=%d steps=%lld weights=%s",
                mse_a, var_a, loss_b, detach_a, (long long)p->r.step, o->eval || !o->save ? "-" : o->save);
  return 0;
}

int main(int argc, char **argv) {
  dl_train_opts o = {.epochs = 20, .batch = 64, .lr = 3e-3, .seed = 1};
  int64_t data_seed = 7, hidden = 64;
  int detach_a = 0, i;
  dl_flag fl[DL_TRAIN_NFLAGS + 3];
  int nf = dl_train_flags(&o, fl), rc;
  prog *p = calloc(1, sizeof *p);
  const char *const argv0 = argv[0]; /* read after a jump: not changed after setjmp */
  jmp_buf oom;
  if (!p) return fprintf(stderr, "%s: out of memory\n", argv[0]), 1;
  for (i = 0; i < nf; i++)
    if (strcmp(fl[i].name, "data") == 0) fl[i].help = "not used: the data are generated (see --data-seed)";
  fl[nf++] = (dl_flag){"data-seed", DL_FLAG_I64, &data_seed, 0, 1e15,
                       "seed of the synthetic data (--seed leaves them alone)", "N"};
  fl[nf++] = (dl_flag){"hidden", DL_FLAG_I64, &hidden, 1, 65536, "units of the trunk", "N"};
  fl[nf++] = (dl_flag){"detach-a", DL_FLAG_SWITCH, &detach_a, 0, 0,
                       "head A's loss stops at the trunk (the comparison: the trunk learns for B only)", NULL};
  dl_ctx_init(&p->ctx, NULL);
  if (dl_flags_main(&p->ctx, argc, argv, fl, nf, NULL, 0, NULL,
                    "A shared trunk with two heads and two losses, back-propagated one after the other before one "
                    "Adam update.") != DL_OK)
    rc = 2;
  else if (o.data)
    rc = 2, fprintf(stderr, "%s: --data %s: this program generates its data (--data-seed N chooses them)\n", argv[0],
                    o.data);
  else if (dl_train_opts_check(&p->ctx, &o) != DL_OK)
    rc = 2, fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&p->ctx));
  else {
    dl_ctx_init(&p->ctx, &(dl_ctx_desc){.threads = (int)o.threads});
    dl_ctx_on_nomem(&p->ctx, &oom); /* an op out of memory: its message and exit 1, not an abort (core.h) */
    if (setjmp(oom))
      rc = fail(p, argv0);
    else
      rc = run(p, &o, data_seed, hidden, detach_a, argv[0]);
    dl_ctx_on_nomem(&p->ctx, NULL);
  }
  dl_run_free(&p->r);
  dl_tape_free(&p->tp);
  dl_optim_free(p->opt);
  dl_model_free(p->m);
  dl_batcher_free(&p->tb);
  dl_tensor_free(p->a_batch);
  dl_tensor_free(p->a_test);
  dl_dataset_free(&p->train);
  dl_dataset_free(&p->test);
  free(p);
  return rc;
}
