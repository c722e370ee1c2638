/* examples/fashion_mlp.c - a 784-256-128-10 MLP trained on Fashion-MNIST.
 *
 * The data is Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist,
 * gzip IDX files; --data DIR for another place). Adam, cross-entropy, the
 * learning rate on a cosine from --lr down to 0 over the run, inputs
 * standardised with the training set's mean and deviation. After every epoch:
 * the test set's loss and accuracy, the CSV log, the chart, the checkpoint.
 * At the end: the confusion matrix, the weights (--save, safetensors with
 * PyTorch's names: nn.Sequential(Flatten, Linear(784, 256), ReLU,
 * Linear(256, 128), ReLU, Linear(128, 10)) loads them) and one line
 *   result: test_acc=0.8951 epochs=15 train_samples_per_s=... wall_s=... weights=... chart=...
 * Files go only where the flags say; --save, --csv and --chart that are not
 * given go to runs/fashion_mlp/ (made when needed, named on the first line).
 *
 * Build (one file; zlib reads the gzip files, stb_image_write draws the PNG
 * chart when libstb-dev is installed):
 *   cc -std=c11 -O2 -Iinclude examples/fashion_mlp.c -o fashion_mlp -lz -lm
 * faster (threads, vectorised loops, OpenBLAS GEMM):
 *   cc -std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude examples/fashion_mlp.c \
 *      -o fashion_mlp -lopenblas -lz -lm
 * Run:  ./fashion_mlp                    (./fashion_mlp --help for the flags)
 *       ./fashion_mlp --load runs/fashion_mlp/fashion_mlp.safetensors --eval
 *
 * Data-parallel over MPI (dist.h): the same file built with mpicc and
 * DL_USE_MPI runs as several processes; --batch is the global mini-batch,
 * split evenly over the ranks, so the training is the one process's up to
 * rounding:
 *   mpicc -std=c11 -O2 -DDL_USE_MPI -Iinclude examples/fashion_mlp.c -o fashion_mlp_mpi -lz -lm
 *   mpirun -np 2 ./fashion_mlp_mpi --threads 1   (as root add --allow-run-as-root)
 *
 * On an NVIDIA GPU (--device cuda; dl/gpu.h): `make gpu` builds the CUDA library and
 * build/fashion_mlp_cuda, i.e. this file with -DDL_USE_CUDA linked with build/libdlgpu.a.
 *
 * dl-example-flags: -lz
 */
#define DL_USE_ZLIB
#if defined(__has_include)
#if __has_include(<stb/stb_image_write.h>)
#define DL_USE_STB_IMAGE_WRITE
#endif
#endif
#include "dl.h"

static dl_model *make_mlp(dl_ctx *ctx, uint64_t seed, int64_t h1, int64_t h2) {
  dl_model *m = dl_model_make(ctx, &(dl_model_desc){.dtype = DL_F32, .seed = seed});
  dl_flatten_make(m, NULL, NULL, 1);                                          /* "0": [B,1,28,28] -> [B,784] */
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 28 * 28, .out = h1}); /* "1.weight", "1.bias" */
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = h1, .out = h2});      /* "3.*" */
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = h2, .out = 10});      /* "5.*" */
  return m;
}

/* Everything the program owns, zeroed first so that one cleanup frees it
 * whatever step failed. */
typedef struct prog {
  dl_ctx ctx;
  dl_dataset train_all, train, test;
  dl_batcher tb, eb;
  dl_model *m;
  dl_optim *opt;
  dl_tape tp;
  dl_run r;
  dl_confusion cm;
  dl_dist dd;
  dl_gpu *gpu; /* --device cuda */
  dl_gpu_counts calls; /* the device work of the training steps (dl_gpu_counts_add) */
  int64_t calls_steps;  /* over that many steps */
  size_t train_peak;    /* device memory in use at the training steps' peak (before the first evaluation) */
  dl_train_paths paths; /* runs/fashion_mlp/... for the outputs the flags do not name */
} prog;

static int fail(prog *p, const char *argv0) {
  if (!p->dd.agreed || dl_dist_is_root(&p->dd)) /* an agreed failure: rank 0 says it */
    fprintf(stderr, "%s: %s\n", argv0, dl_ctx_message(&p->ctx));
  return 1;
}

/* --export DIR: the trained model as a micro model (dl/micro.h) in f32 and
 * int8 (activation ranges from the first 500 training images), each run on
 * the whole test set with the firmware's kernels (their accuracies
 * printed), written to DIR/fashion_mlp_{f32,int8}.{c,h} (examples/firmware/). */
static int export_micro(prog *p, const char *dir, double mean, double std, const char *argv0) {
  if (!dl_dist_is_root(&p->dd)) return 0;
  if (p->gpu && dl_model_to_host(p->m) != DL_OK) return fail(p, argv0);
  dl_model_train(p->m, 0);
  if (dl_micro_export(&p->ctx, p->m,
                      &(dl_micro_desc){.name = "fashion_mlp", .c = 1, .h = 28, .w = 28, .norm = DL_NORM_STANDARDIZE,
                                       .mean = mean, .std = std, .calib = &p->train, .calib_n = 500},
                      dir, &p->test, stdout, NULL) != DL_OK)
    return fail(p, argv0);
  return 0;
}

static int run(prog *p, dl_train_opts *o, const char *export_dir, int64_t h1, int64_t h2, double wd, const char *argv0) {
  dl_ctx *ctx = &p->ctx;
  /* standardised with Fashion-MNIST's training mean and deviation of x / 255 */
  const double mean = 0.2860, std = 0.3530;
  double test_loss = NAN, test_acc = NAN;
  int64_t steps_per_epoch, total_steps;
  dl_adam_cfg ac;
  /* --save, --csv, --chart not given: into runs/fashion_mlp/, announced (never the current folder) */
  if (dl_dist_agree(&p->dd, dl_train_default_outputs(ctx, o, "fashion_mlp", &p->paths, stdout,
                                                     dl_dist_is_root(&p->dd))) != DL_OK)
    return fail(p, argv0);

  /* the data: u8 [N, 1, 28, 28] images and i64 labels */
  if (dl_dist_agree(&p->dd, dl_load_fashion_mnist(ctx, o->data, &p->train_all, &p->test)) != DL_OK ||
      dl_dataset_head(ctx, &p->train_all, o->subset, &p->train) != DL_OK) /* --subset */
    return fail(p, argv0);
  /* each rank takes every world-th sample of the epoch's permutation, and
   * batch / world of them per step; the test set is split for evaluation */
  if (o->batch % p->dd.world != 0) {
    dl_fail(ctx, DL_ERR_ARG, "--batch %lld does not split evenly over %d ranks", (long long)o->batch, p->dd.world);
    return fail(p, argv0);
  }
  if (dl_batcher_make(ctx, &p->tb, &p->train,
                      &(dl_batcher_desc){.batch_size = o->batch / p->dd.world, .dtype = DL_F32,
                                         .shuffle = {.seed = (uint64_t)o->seed, .world = p->dd.world, .rank = p->dd.rank},
                                         .norm = DL_NORM_STANDARDIZE, .mean = mean, .std = std}) != DL_OK ||
      dl_batcher_make(ctx, &p->eb, &p->test,
                      &(dl_batcher_desc){.batch_size = 1000, .dtype = DL_F32,
                                         .shuffle = {.no_shuffle = 1, .world = p->dd.world, .rank = p->dd.rank, .pad = 2},
                                         .norm = DL_NORM_STANDARDIZE, .mean = mean, .std = std}) != DL_OK)
    return fail(p, argv0);
  steps_per_epoch = (p->tb.shuf.per_rank + p->tb.batch_size - 1) / p->tb.batch_size;
  total_steps = steps_per_epoch * o->epochs;

  p->m = make_mlp(ctx, (uint64_t)o->seed, h1, h2);
  if (!p->m || dl_model_status(p->m) != DL_OK) return fail(p, argv0);
  if (dl_train_device(ctx, o, p->m, &p->gpu) != DL_OK) return fail(p, argv0); /* before the optimizer */
  /* on the GPU the images live there too (u8), and each batch is gathered and standardised there */
  if (p->gpu && (dl_batcher_to_device(&p->tb, p->gpu) != DL_OK || dl_batcher_to_device(&p->eb, p->gpu) != DL_OK))
    return fail(p, argv0);
  /* rank 0's initial weights everywhere (a model on the GPU over several ranks: refused, no NCCL path yet) */
  if (dl_dist_attach(&p->dd, p->m) != DL_OK) return fail(p, argv0);
  ac = dl_adam_defaults(o->lr);
  ac.weight_decay = wd;
  if (!(p->opt = dl_optim_adam(p->m, &ac)) || dl_tape_init(&p->tp, ctx, 0) != DL_OK ||
      (p->gpu && dl_tape_use_gpu(&p->tp, p->gpu) != DL_OK) ||
      dl_confusion_init(&p->cm, ctx, 10) != DL_OK)
    return fail(p, argv0);
  if (dl_run_begin(&p->r, ctx, &(dl_run_desc){.opts = o, .model = p->m, .optim = p->opt, .batcher = &p->tb,
                                              .steps_per_epoch = steps_per_epoch, .dist = &p->dd,
                                              .title = "784-256-128-10 MLP, Fashion-MNIST"}) != DL_OK) {
    dl_run_print_error(&p->r, stderr, argv0);
    return 1;
  }
  if (!o->eval && dl_dist_is_root(&p->dd)) {
    dl_batch first;
    if (p->dd.world > 1)
      printf("%d ranks (MPI), %lld samples per rank per step\n", p->dd.world, (long long)p->tb.batch_size);
    printf("Fashion-MNIST: %lld training images (%lld steps of %lld per epoch), %lld test images, %d threads, GEMM: %s\n",
           (long long)p->train.n, (long long)steps_per_epoch, (long long)o->batch, (long long)p->test.n,
           dl_ctx_threads(ctx), dl_gemm_backend());
    dl_batcher_set_epoch(&p->eb, 0);
    if (p->gpu) printf("device: %s\n", dl_gpu_name(p->gpu));
    else if (dl_batcher_next(&p->eb, &first) && dl_model_summary(p->m, stdout, first.x) != DL_OK) /* a host pass */
      return fail(p, argv0);
    if (p->r.epoch > 0)
      printf("resumed from %s after epoch %lld (step %lld)\n", o->resume, (long long)p->r.epoch, (long long)p->r.step);
  }

  while (dl_run_next_epoch(&p->r)) {
    /* on the GPU each step's work is recorded and replayed as CUDA graphs, captured once (--no-graphs: not) */
    dl_gpu *graphs = o->no_graphs ? NULL : p->gpu;
    const dl_gpu_counts c0 = dl_gpu_get_counts(p->gpu);
    const int64_t step0 = p->r.step;
    dl_batch b;
    int more;
    while ((more = dl_train_next(graphs, &p->tb, &b)) > 0) {
      dl_tensor *logits, *loss;
      dl_optim_set_lr(p->opt, dl_lr_cosine_warmup(o->lr, p->r.step, 0, total_steps, 0));
      logits = dl_model_forward(p->m, &p->tp, dl_tape_input(&p->tp, b.x)); /* on the GPU: made there */
      loss = dl_t_cross_entropy(&p->tp, logits, b.y, 0, DL_REDUCE_MEAN); /* labels are read on the host */
      dl_run_step_async(&p->r, b.size, loss, logits, b.y); /* on the GPU: read a step later, nothing waits */
      if (dl_dist_train_step(&p->dd, p->opt, &p->tp, loss, NULL, NULL) != DL_OK) return fail(p, argv0);
      if (dl_gpu_graph_end(graphs) != DL_OK) return fail(p, argv0);
      dl_tape_rewind(&p->tp);
    }
    if (more < 0) return fail(p, argv0);
    dl_gpu_counts_add(&p->calls, c0, dl_gpu_get_counts(p->gpu)); /* the training steps' device work, no evaluation */
    p->calls_steps += p->r.step - step0;
    dl_run_flush(&p->r); /* the epoch's last step counted before the evaluation */
    if (p->gpu && !p->train_peak) p->train_peak = dl_gpu_get_stats(p->gpu).peak_in_use;
    if (dl_dist_evaluate(&p->dd, p->m, &p->tp, &p->eb, &test_loss, &test_acc, NULL) != DL_OK) return fail(p, argv0);
    if (dl_run_end_epoch(&p->r, test_loss, test_acc) != DL_OK) return fail(p, argv0);
  }

  if (dl_dist_evaluate(&p->dd, p->m, &p->tp, &p->eb, &test_loss, &test_acc, &p->cm) != DL_OK) return fail(p, argv0);
  if (dl_dist_is_root(&p->dd)) {
    const char *names[10];
    int k;
    for (k = 0; k < 10; k++) names[k] = dl_fashion_mnist_class(k);
    printf("test set, rows: true class, columns: predicted\n");
    dl_confusion_fprint(stdout, &p->cm, names);
  }
  if (dl_run_finish(&p->r) != DL_OK) return fail(p, argv0);
  if (p->gpu) { /* torch.cuda.max_memory_allocated's figure: bytes handed out at the peak (the cache's classes) */
    const dl_gpu_stats gs = dl_gpu_get_stats(p->gpu);
    dl_gpu_counts_print(stdout, &p->calls, p->calls_steps);
    printf("device memory: peak %.1f MiB in use", gs.peak_in_use / 1048576.0);
    if (p->train_peak) printf(" (training steps %.1f MiB, then the evaluation)", p->train_peak / 1048576.0);
    printf(", %.1f MiB reserved\n", gs.peak_reserved / 1048576.0);
  }
  if (export_dir && export_micro(p, export_dir, mean, std, argv0)) return 1;
  if (!o->eval && o->save && dl_dist_is_root(&p->dd)) printf("weights: %s\n", o->save);
  if (!o->eval && o->chart && p->r.epoch > p->r.first_epoch && dl_dist_is_root(&p->dd)) printf("chart: %s\n", o->chart);
  dl_run_result(&p->r, stdout, test_acc, "test_loss=%.4f steps=%lld weights=%s", test_loss, (long long)p->r.step,
                o->eval || !o->save ? "-" : o->save);
  return 0;
}

int main(int argc, char **argv) {
  dl_train_opts o = {.epochs = 15, .batch = 64, .lr = 1e-3, .seed = 1};
  int64_t h1 = 256, h2 = 128;
  double wd = 0;
  const char *export_dir = NULL;
  dl_flag fl[DL_TRAIN_NFLAGS + 4];
  int nf = dl_train_flags(&o, fl), rc;
  prog *p = calloc(1, sizeof *p);
  const char *const argv0 = argv[0]; /* read after a jump: not changed after setjmp */
  jmp_buf oom;
  if (!p) return fprintf(stderr, "%s: out of memory\n", argv[0]), 1;
  fl[nf++] = (dl_flag){"hidden1", DL_FLAG_I64, &h1, 1, 65536, "units of the first hidden layer", "N"};
  fl[nf++] = (dl_flag){"hidden2", DL_FLAG_I64, &h2, 1, 65536, "units of the second hidden layer", "N"};
  fl[nf++] = (dl_flag){"wd", DL_FLAG_F64, &wd, 0, 1, "Adam's (L2) weight decay", "X"};
  fl[nf++] = (dl_flag){"export", DL_FLAG_STR, (void *)&export_dir, 0, 0,
                       "write the trained model as C source for firmware, f32 and int8 (examples/firmware)", "DIR"};
  dl_ctx_init(&p->ctx, NULL);
  if (dl_flags_main(&p->ctx, argc, argv, fl, nf, NULL, 0, NULL,
                    "Train a 784-256-128-10 MLP on Fashion-MNIST (Adam, cosine learning rate).") != DL_OK)
    rc = 2;
  else if (dl_train_opts_check(&p->ctx, &o) != DL_OK)
    rc = 2, fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&p->ctx));
  else {
    dl_ctx_init(&p->ctx, &(dl_ctx_desc){.threads = (int)o.threads});
    dl_ctx_on_nomem(&p->ctx, &oom); /* an op out of memory: its message and exit 1, not an abort (core.h) */
    if (setjmp(oom))
      rc = fail(p, argv0);
    else if (dl_dist_init(&p->dd, &p->ctx, &argc, &argv, NULL) != DL_OK)
      rc = 1, fprintf(stderr, "%s: %s\n", argv[0], dl_ctx_message(&p->ctx));
    else
      rc = run(p, &o, export_dir, h1, h2, wd, argv[0]);
    dl_ctx_on_nomem(&p->ctx, NULL);
  }
  dl_run_free(&p->r);
  dl_tape_free(&p->tp);
  dl_confusion_free(&p->cm);
  dl_optim_free(p->opt);
  dl_model_free(p->m);
  dl_batcher_free(&p->tb);
  dl_batcher_free(&p->eb);
  dl_dataset_free(&p->train);
  dl_dataset_free(&p->train_all);
  dl_dataset_free(&p->test);
  dl_gpu_close(p->gpu); /* after everything on it */
  rc = dl_dist_finalize(&p->dd, rc); /* MPI_Abort when this rank failed alone: the others may wait for it */
  free(p);
  return rc;
}
