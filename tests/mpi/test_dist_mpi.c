/* tests/mpi/test_dist_mpi.c - dist.h across real MPI ranks. Run by
 * tests/mpi/run.sh:  mpirun -np 2 build/tests/test_dist_mpi
 *
 * The core check: 2 ranks with mini-batch B/2 each reach, after several
 * steps, the weights 1 process reaches with mini-batch B (the reference is
 * trained on rank 0 in the same run), for SGD (momentum) and Adam, with
 * global-norm clipping, overlapped or not, in one or many buckets, for an
 * MLP, a CNN and a model with a row-sparse embedding. Tolerances: f64
 * 1e-12 absolute on weights of size ~0.1-1 (only the order of additions
 * differs: per-rank mean then average, against one mean over B); f32 2e-6.
 * And: every rank holds the same bits afterwards (dl_dist_check).
 *
 * Modes for the failure tests (tests/mpi/run.sh):
 *   --hang   rank 1 stops taking part; rank 0 must fail with DL_ERR_COMM
 *            after its 1 s timeout and end the job (MPI_Abort)
 *   --die    rank 1 exits mid-training; the job must end, not hang
 *
 * Every test function's verdict is the worst over the ranks; rank 0 prints
 * the HARNESS line.
 */
#include <unistd.h>
#include "dl.h"
#include "harness.h"

static dl_ctx ctx;
static dl_dist dd;

#define RUN_MPI(fn)                                                                          \
  do {                                                                                       \
    int before_ = harness_failed_checks, f_;                                                 \
    harness_current = #fn;                                                                   \
    harness_skipped_now = 0;                                                                 \
    fn();                                                                                    \
    f_ = harness_failed_checks - before_;                                                    \
    MPI_Allreduce(MPI_IN_PLACE, &f_, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);                   \
    if (f_ == 0) harness_pass++;                                                             \
    else {                                                                                   \
      harness_fail++;                                                                        \
      if (dd.rank == 0) fprintf(stderr, "FAILED %s\n", #fn);                                 \
    }                                                                                        \
  } while (0)

enum { MLP, CNN, EMB };
#define NCLASS 4

static dl_model *build(int kind, dl_dtype dt, int64_t hidden) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = dt, .seed = 11});
  if (kind == MLP) {
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 12, .out = hidden});
    dl_act_make(m, NULL, NULL, DL_ACT_TANH, 0);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = hidden, .out = hidden});
    dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = hidden, .out = NCLASS});
  } else if (kind == CNN) {
    dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 1, .out = 3, .kernel = 3, .padding = 1});
    dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
    dl_flatten_make(m, NULL, NULL, 1);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 3 * 4 * 4, .out = NCLASS});
  } else {
    dl_embedding_make(m, NULL, NULL, &(dl_embedding_desc){.num = 40, .dim = 5, .sparse = 1});
    dl_flatten_make(m, NULL, NULL, 1);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 3 * 5, .out = NCLASS});
  }
  return m;
}

/* Sample i of the synthetic set, the same on every rank. */
static void sample(int kind, int64_t i, dl_tensor *x, int64_t row, int64_t *y) {
  dl_rng r = dl_rng_make(1000 + (uint64_t)i);
  int64_t k, n = kind == MLP ? 12 : kind == CNN ? 16 : 3;
  for (k = 0; k < n; k++) {
    int64_t at = row * n + k;
    if (kind == EMB) dl_i64(x)[at] = (int64_t)dl_rng_below(&r, 40);
    else if (x->dtype == DL_F32) dl_f32(x)[at] = (float)dl_rng_normal(&r);
    else dl_f64(x)[at] = dl_rng_normal(&r);
  }
  *y = (int64_t)dl_rng_below(&r, NCLASS);
}

typedef struct cfg {
  int kind, adam, overlap;
  dl_dtype dt;
  double clip;
  int64_t bucket;
  int dense_too; /* EMB: a penalty on the whole table gives the sparse parameter a dense gradient too */
} cfg;

/* Train `steps` steps of batch `b` on samples [k*B + off, +b) of each
 * global batch k of size B, with dd (NULL: one process). */
static dl_model *train(const cfg *c, dl_dist *d, int64_t B, int64_t b, int64_t off, int steps) {
  dl_model *m = build(c->kind, c->dt, 16);
  dl_optim *o;
  dl_tape tp;
  dl_tensor *x, *y;
  int64_t xs[4], nx;
  int s, j;
  dl_sgd_cfg sc = dl_sgd_defaults(0.1);
  dl_adam_cfg ac = dl_adam_defaults(0.01);
  dl_step_desc sd = {0};
  sd.clip_norm = c->clip;
  sc.momentum = 0.9;
  if (d) CHECK(dl_dist_attach(d, m) == DL_OK);
  o = c->adam ? dl_optim_adam(m, &ac) : dl_optim_sgd(m, &sc);
  dl_tape_init(&tp, &ctx, 0);
  xs[0] = b;
  if (c->kind == MLP) xs[1] = 12, nx = 2;
  else if (c->kind == CNN) xs[1] = 1, xs[2] = 4, xs[3] = 4, nx = 4;
  else xs[1] = 3, nx = 2;
  x = dl_tensor_make(&ctx, c->kind == EMB ? DL_I64 : c->dt, (int)nx, xs);
  y = dl_tensor_make(&ctx, DL_I64, 1, &b);
  for (s = 0; s < steps; s++) {
    dl_tensor *logits, *loss;
    for (j = 0; j < b; j++) sample(c->kind, s * B + off + j, x, j, &dl_i64(y)[j]);
    logits = dl_model_forward(m, &tp, x);
    loss = dl_t_cross_entropy(&tp, logits, y, 0, DL_REDUCE_MEAN);
    if (c->dense_too) {
      dl_tensor *w = dl_model_tensor(m, "0.weight");
      loss = dl_t_add(&tp, loss, dl_t_mul_scalar(&tp, dl_t_sum(&tp, dl_t_square(&tp, w), 0, NULL, 0), 0.01));
    }
    if (d) CHECK(dl_dist_train_step(d, o, &tp, loss, &sd, NULL) == DL_OK);
    else dl_train_step(o, &tp, loss, &sd);
    dl_tape_rewind(&tp);
  }
  dl_tensor_free(x);
  dl_tensor_free(y);
  dl_tape_free(&tp);
  dl_optim_free(o);
  return m;
}

/* 2 ranks at B/2 against 1 process at B (on rank 0). */
static void equivalence(const cfg *c) {
  const int64_t B = 16, steps = 6;
  dl_dist_desc desc = {.bucket_bytes = c->bucket, .no_overlap = !c->overlap, .check_every = 1};
  dl_dist d2;
  dl_model *m, *ref;
  double worst = 0, tol = c->dt == DL_F64 ? 1e-12 : 2e-6;
  int64_t i;
  dl_dist_init(&d2, &ctx, NULL, NULL, &desc);
  m = train(c, &d2, B, B / d2.world, d2.rank * (B / d2.world), (int)steps);
  CHECK(dl_dist_check(&d2) == DL_OK);
  CHECK(d2.steps == steps);
  if (d2.rank == 0) {
    ref = train(c, NULL, B, B, 0, (int)steps);
    for (i = 0; i < m->pnumel; i++) {
      double a = c->dt == DL_F64 ? ((double *)m->pbuf)[i] : ((float *)m->pbuf)[i];
      double r = c->dt == DL_F64 ? ((double *)ref->pbuf)[i] : ((float *)ref->pbuf)[i];
      if (fabs(a - r) > worst) worst = fabs(a - r);
    }
    CHECK_MSG(worst <= tol, "kind %d adam %d overlap %d %s clip %g bucket %lld: max |2 ranks - 1 process| = %.3g",
              c->kind, c->adam, c->overlap, dl_dtype_name(c->dt), c->clip, (long long)c->bucket, worst);
    /* the weights did move: the comparison is not between two initialisations */
    {
      dl_model *init = build(c->kind, c->dt, 16);
      double moved = 0;
      dl_model_pack(init);
      for (i = 0; i < m->pnumel; i++) {
        double a = c->dt == DL_F64 ? ((double *)m->pbuf)[i] : ((float *)m->pbuf)[i];
        double z = c->dt == DL_F64 ? ((double *)init->pbuf)[i] : ((float *)init->pbuf)[i];
        moved += fabs(a - z);
      }
      CHECK(moved > 1e-3);
      dl_model_free(init);
    }
    dl_model_free(ref);
  }
  dl_model_free(m);
  dl_dist_finalize(&d2, 0);
}

static void test_equivalence_sgd(void) {
  cfg c = {MLP, 0, 1, DL_F64, 0, 0, 0};
  equivalence(&c);
  c.dt = DL_F32;
  equivalence(&c);
}
static void test_equivalence_adam(void) {
  cfg c = {MLP, 1, 1, DL_F64, 0, 0, 0};
  equivalence(&c);
  c.dt = DL_F32;
  equivalence(&c);
}
static void test_equivalence_clip(void) {
  cfg c = {MLP, 1, 1, DL_F64, 0.05, 0, 0}; /* the norm is far above 0.05: clipping acts every step */
  equivalence(&c);
  c.adam = 0;
  equivalence(&c);
  c.dt = DL_F32;
  equivalence(&c);
}
static void test_equivalence_buckets_overlap(void) {
  /* 256-byte buckets: many, cut through parameters; with and without overlap */
  cfg c = {MLP, 1, 1, DL_F64, 0, 256, 0};
  equivalence(&c);
  c.overlap = 0;
  equivalence(&c);
  c.kind = CNN;
  equivalence(&c);
  c.overlap = 1;
  equivalence(&c);
  c.bucket = 0;
  equivalence(&c);
}
static void test_equivalence_sparse_embedding(void) {
  cfg c = {EMB, 1, 1, DL_F64, 0, 64, 0};
  equivalence(&c);
  c.adam = 0;
  c.clip = 0.05;
  equivalence(&c);
  c.dt = DL_F32;
  equivalence(&c);
  /* the embedding's gradient dense as well (folded and all-reduced whole) */
  c.dense_too = 1; /* plain SGD: Adam and clipping would hide a wrong scale */
  c.dt = DL_F64;
  c.clip = 0;
  equivalence(&c);
  c.adam = 1;
  equivalence(&c);
}

/* Overlap does start buckets during the walk: with many buckets, when the
 * walk ends some of them were started already. */
static void test_overlap_starts_early(void) {
  dl_dist d2;
  dl_model *m;
  dl_tape tp;
  dl_tensor *x, *y, *logits, *loss;
  int64_t b = 4, xs[2] = {4, 12}, j;
  int started_during = 0;
  dl_dist_init(&d2, &ctx, NULL, NULL, &(dl_dist_desc){.bucket_bytes = 256});
  m = build(MLP, DL_F64, 16);
  CHECK(dl_dist_attach(&d2, m) == DL_OK);
  CHECK(d2.nbucket > 3);
  dl_tape_init(&tp, &ctx, 0);
  x = dl_tensor_make(&ctx, DL_F64, 2, xs);
  y = dl_tensor_make(&ctx, DL_I64, 1, &b);
  for (j = 0; j < b; j++) sample(MLP, j, x, j, &dl_i64(y)[j]);
  logits = dl_model_forward(m, &tp, x);
  loss = dl_t_cross_entropy(&tp, logits, y, 0, DL_REDUCE_MEAN);
  CHECK(dl_dist_backward(&d2, &tp, loss) == DL_OK);
  /* the buckets of the later layers were final, and so started, before the
   * walk's last node */
  for (j = 0; j < d2.nbucket; j++)
    if (d2.bucket[j].last < d2.visit - 1) started_during++;
  CHECK_MSG(started_during >= 1, "%d of %d buckets could start during the walk", started_during, d2.nbucket);
  dl_tensor_free(x);
  dl_tensor_free(y);
  dl_tape_free(&tp);
  dl_model_free(m);
  dl_dist_finalize(&d2, 0);
}

static void test_buffers_synced(void) {
  dl_dist d2;
  dl_model *m;
  dl_optim *o;
  dl_tape tp;
  dl_tensor *x, *y;
  int64_t b = 4, xs[2] = {4, 6}, j;
  int pass, s;
  for (pass = 0; pass < 2; pass++) {
    dl_dist_init(&d2, &ctx, NULL, NULL, &(dl_dist_desc){.no_buffer_sync = pass, .check_every = -1});
    m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F64, .seed = 5});
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 6, .out = 5});
    dl_batchnorm1d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 5});
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 5, .out = NCLASS});
    CHECK(dl_dist_attach(&d2, m) == DL_OK);
    o = dl_optim_sgd(m, &(dl_sgd_cfg){.lr = 0.1});
    dl_tape_init(&tp, &ctx, 0);
    x = dl_tensor_make(&ctx, DL_F64, 2, xs);
    y = dl_tensor_make(&ctx, DL_I64, 1, &b);
    for (s = 0; s < 3; s++) {
      dl_tensor *loss;
      for (j = 0; j < b; j++) { /* different data per rank: different batch statistics */
        int64_t k;
        dl_rng r = dl_rng_make(77 + (uint64_t)(d2.rank * 100 + s * 10 + j));
        for (k = 0; k < 6; k++) dl_f64(x)[j * 6 + k] = dl_rng_normal(&r) + d2.rank;
        dl_i64(y)[j] = (int64_t)dl_rng_below(&r, NCLASS);
      }
      loss = dl_t_cross_entropy(&tp, dl_model_forward(m, &tp, x), y, 0, DL_REDUCE_MEAN);
      CHECK(dl_dist_train_step(&d2, o, &tp, loss, NULL, NULL) == DL_OK);
      dl_tape_rewind(&tp);
    }
    /* the check covers buffers only when they are synced */
    CHECK(dl_dist_check(&d2) == DL_OK);
    {
      dl_tensor *rm = dl_model_tensor(m, "1.running_mean");
      double v[1];
      CHECK(rm != NULL);
      v[0] = rm ? (d2.rank == 0 ? 1 : -1) * dl_f64(rm)[0] : 0;
      CHECK(dl_dist_sum(&d2, v, 1) == DL_OK);
      if (pass == 0) CHECK_MSG(v[0] == 0, "rank 0's running_mean[0] - rank 1's = %g", v[0]);
      else CHECK_MSG(fabs(v[0]) > 1e-3, "the ranks' running means should differ without the sync: %g", v[0]);
    }
    dl_tensor_free(x);
    dl_tensor_free(y);
    dl_tape_free(&tp);
    dl_optim_free(o);
    dl_model_free(m);
    dl_dist_finalize(&d2, 0);
  }
}

static void test_divergence_check(void) {
  dl_dist d2;
  dl_model *m = build(MLP, DL_F32, 8);
  dl_dist_init(&d2, &ctx, NULL, NULL, NULL);
  CHECK(dl_dist_attach(&d2, m) == DL_OK); /* rank 0's weights everywhere */
  CHECK(dl_dist_check(&d2) == DL_OK);
  if (d2.rank == 1) dl_f32(dl_model_tensor(m, "2.bias"))[3] += 1e-6f;
  CHECK(dl_dist_check(&d2) == DL_ERR_COMM);
  CHECK_MSG(strstr(dl_ctx_message(&ctx), "2.bias") && !strstr(dl_ctx_message(&ctx), "0.weight"), "%s",
            dl_ctx_message(&ctx));
  dl_model_free(m);
  dl_dist_finalize(&d2, 0);
}

static void test_attach_different_models(void) {
  dl_dist d2;
  dl_model *m = build(MLP, DL_F32, dd.rank == 1 ? 9 : 8);
  dl_dist_init(&d2, &ctx, NULL, NULL, NULL);
  CHECK(dl_dist_attach(&d2, m) == DL_ERR_SHAPE);
  CHECK_MSG(strstr(dl_ctx_message(&ctx), "different models") != NULL, "%s", dl_ctx_message(&ctx));
  dl_model_free(m);
  dl_dist_finalize(&d2, 0);
}

static void test_agree(void) {
  dl_status s = DL_OK;
  if (dd.rank == 1) s = dl_fail(&ctx, DL_ERR_IO, "cannot open /nonexistent/data");
  s = dl_dist_agree(&dd, s);
  CHECK(s == DL_ERR_IO);
  if (dd.rank == 0)
    CHECK_MSG(strstr(dl_ctx_message(&ctx), "rank 1 of 2") && strstr(dl_ctx_message(&ctx), "/nonexistent/data"), "%s",
              dl_ctx_message(&ctx));
  CHECK(dd.agreed == 1);
  dd.agreed = 0;
  CHECK(dl_dist_agree(&dd, DL_OK) == DL_OK);
}

static void test_sums(void) {
  double v[2] = {1.5 + dd.rank, 10};
  int64_t c[3] = {dd.rank, 1, -2};
  CHECK(dl_dist_sum(&dd, v, 2) == DL_OK);
  CHECK(v[0] == 4.0 && v[1] == 20.0);
  CHECK(dl_dist_sum_i64(&dd, c, 3) == DL_OK);
  CHECK(c[0] == 1 && c[1] == 2 && c[2] == -4);
}

/* Rank 1 stops taking part: rank 0's all-reduce must give DL_ERR_COMM
 * after its timeout, then the job ends through MPI_Abort. */
static int hang(void) {
  dl_dist d2;
  dl_model *m = build(MLP, DL_F32, 8);
  dl_dist_init(&d2, &ctx, NULL, NULL, &(dl_dist_desc){.timeout_s = 1});
  if (dl_dist_attach(&d2, m) != DL_OK) return dl_dist_finalize(&d2, 2);
  if (d2.rank == 1) {
    sleep(60); /* hung: never joins the next collective */
    return dl_dist_finalize(&d2, 0);
  }
  if (dl_dist_allreduce_grads(&d2) == DL_ERR_COMM) {
    fprintf(stderr, "rank 0: %s\n", dl_ctx_message(&ctx));
    return dl_dist_finalize(&d2, 3);
  }
  fprintf(stderr, "rank 0: the all-reduce returned without its peer\n");
  return dl_dist_finalize(&d2, 4);
}

/* Rank 1 dies after two steps. */
static int die(void) {
  cfg c = {MLP, 1, 1, DL_F32, 0, 0, 0};
  dl_dist d2;
  dl_model *m;
  dl_dist_init(&d2, &ctx, NULL, NULL, NULL);
  m = train(&c, &d2, 16, 8, d2.rank * 8, 2);
  if (d2.rank == 1) _exit(7);
  dl_model_free(m);
  m = train(&c, &d2, 16, 8, 0, 1000000); /* would wait for ever for rank 1 */
  dl_model_free(m);
  return dl_dist_finalize(&d2, 0);
}

int main(int argc, char **argv) {
  int f;
  dl_ctx_init(&ctx, &(dl_ctx_desc){.threads = 1});
  if (dl_dist_init(&dd, &ctx, &argc, &argv, NULL) != DL_OK) {
    fprintf(stderr, "%s\n", dl_ctx_message(&ctx));
    return 1;
  }
  if (argc > 1 && strcmp(argv[1], "--hang") == 0) return hang();
  if (argc > 1 && strcmp(argv[1], "--die") == 0) return die();
  if (dd.world != 2) {
    fprintf(stderr, "run with mpirun -np 2 (this is %d ranks)\n", dd.world);
    return dl_dist_finalize(&dd, 1);
  }
  RUN_MPI(test_sums);
  RUN_MPI(test_agree);
  RUN_MPI(test_equivalence_sgd);
  RUN_MPI(test_equivalence_adam);
  RUN_MPI(test_equivalence_clip);
  RUN_MPI(test_equivalence_buckets_overlap);
  RUN_MPI(test_equivalence_sparse_embedding);
  RUN_MPI(test_overlap_starts_early);
  RUN_MPI(test_buffers_synced);
  RUN_MPI(test_divergence_check);
  RUN_MPI(test_attach_different_models);
  f = dd.rank == 0 ? harness_finish() : (harness_fail ? 1 : 0);
  return dl_dist_finalize(&dd, 0) + f;
}
