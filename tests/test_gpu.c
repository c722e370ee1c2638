/* tests/test_gpu.c - the GPU backend (dl/gpu.h, src_gpu/) against the CPU.
 *
 * Every check runs one program twice: on a host tape with host tensors, and
 * on a device tape (dl_tape_use_gpu) with device copies of the same inputs
 * (dl_to_device); the device's outputs, gradients, tangents and changed
 * state come back with dl_to_host and must equal the CPU's, for f32
 * (relative 1e-5; 1e-4 where sums are involved: reductions, GEMM,
 * convolutions, gradients of broadcast inputs) and f64 (1e-10). The
 * gradient is that of sum(y * w), w a fixed random tensor (dl_t_mul, then
 * dl_t_sum_all); forward mode sets random tangents on the inputs
 * (dl_set_tangent). Relative error: |gpu - cpu| / max(|cpu|, f max|cpu|),
 * f = 1e-3 for element-wise results, 1e-2 for sums of many terms of both
 * signs (whose last bits depend on the order of the additions).
 *
 * - every element-wise op of expr.h's lists (from the lists themselves, so a
 *   new op is checked too): contiguous and transposed inputs; binary ops on
 *   equal shapes and broadcast ([4,1,5] op [3,5]). A user op's GPU kernels
 *   need nvcc (DL_GPU_DEFINE_OP1 in a .cu file): tests/gpu_ew_host.cu checks
 *   the scalar code those kernels run, on the host;
 * - dl_t_matmul (2-d, batched, shared b, transposed views), dl_t_linear;
 * - dl_t_sum / mean / max along axes, dl_t_softmax / log_softmax,
 *   dl_t_cross_entropy (i64 and i32 labels on the device; smoothing; every
 *   reduction), dl_t_mse, dl_t_embedding, dl_t_dropout (the CPU's mask),
 *   dl_t_conv2d (stride, padding, dilation, groups), dl_t_max_pool2d,
 *   dl_t_avg_pool2d, dl_t_conv3d, dl_t_max_pool3d, dl_t_avg_pool3d, dl_t_batch_norm (train: running statistics updated
 *   alike; eval), dl_t_layer_norm;
 * - dl_t_index_select, dl_t_gather, dl_t_pad: the CPU's values and tangents
 *   bit for bit (f32 tolerance 0), repeated indices (i64, i32; on the
 *   device or left on the host), transposed inputs, cropping pads;
 * - dl_t_rnn (tanh, relu), dl_t_lstm, dl_t_gru with and without h0 / c0 and
 *   biases (the biases as slices of one tensor), the gradient through y, h_n
 *   and c_n; dl_t_multi_head_attention (self, cross with k == v; causal, a
 *   float mask, a u8 mask on the device);
 * - the caching allocator on the device: a freed block is reused (cache_hits
 *   grows, device_mallocs does not), dl_gpu_release_cache empties the cache,
 *   an impossible request is DL_ERR_NOMEM with the figures in the message
 *   (after releasing the cache once), and the device works afterwards;
 * - dl_model_to_device / dl_model_to_host keep every value (buffers too);
 *   three dl_train_step steps (SGD with momentum, with value, per-parameter
 *   and global norm clipping and L1 / L2; then Adam) of an MLP and of a CNN
 *   give the CPU's losses, gradient norms and parameters.
 * A panic inside a check (an op the device lacks) fails that check with the
 * panic's text and the rest go on.
 *
 * Without a device (no GPU, no driver, or built without DL_USE_CUDA, as in
 * the normal suite) it prints one "SKIP test_gpu: no CUDA device (...)" line,
 * every test counts as skipped, and it exits 0. With a GPU:
 *   make gpu-lib && gcc -std=c11 -O2 -DDL_USE_CUDA -I/usr/local/cuda/include -Iinclude tests/test_gpu.c \
 *     build/libdlgpu.a -L/usr/local/cuda/lib64 -lcudnn -lcublas -lcudart -lstdc++ -lm
 */
#include "dl.h"
#include "harness.h"

static dl_ctx ctx;
static dl_gpu *gpu; /* NULL: no device, every test skips */

#define NEED_GPU()                                 \
  do {                                             \
    if (!gpu) SKIP("no CUDA device");              \
  } while (0)

static const char *dtn(dl_dtype dt) { return dt == DL_F32 ? "f32" : "f64"; }

/* >>resources ----------------------------------------------------------------
 * Everything a check makes is registered here and released after it, also
 * when a panic cut the check short. */

enum { POOL_MAX = 1024, MODELS_MAX = 8 };
static dl_tensor *pool[POOL_MAX];
static int npool;
static dl_model *models[MODELS_MAX];
static dl_optim *optims[MODELS_MAX];
static dl_tape tp_h, tp_d; /* the host tape and the device tape of a check */
static int tapes_on;

static void fatal(const char *what) { DL_PANIC(&ctx, "test_gpu", "%s: %s", what, dl_ctx_message(&ctx)); }

static dl_tensor *own(dl_tensor *t) {
  if (!t) fatal("out of memory");
  if (npool == POOL_MAX) {
    dl_tensor_free(t);
    fatal("the test's tensor pool is full");
  }
  pool[npool++] = t;
  return t;
}
static dl_model *own_model(dl_model *m) {
  int i;
  if (!m || dl_model_status(m) != DL_OK) fatal("model");
  for (i = 0; i < MODELS_MAX && models[i]; i++) {}
  if (i == MODELS_MAX) fatal("too many models");
  models[i] = m;
  return m;
}
static dl_optim *own_optim(dl_optim *o) {
  int i;
  if (!o) fatal("optimizer");
  for (i = 0; i < MODELS_MAX && optims[i]; i++) {}
  if (i == MODELS_MAX) fatal("too many optimizers");
  optims[i] = o;
  return o;
}
/* Frees an optimizer now (a device one must go before dl_model_to_host). */
static void drop_optim(dl_optim *o) {
  int i;
  for (i = 0; i < MODELS_MAX; i++)
    if (optims[i] == o) optims[i] = NULL;
  dl_optim_free(o);
}
static void tapes_open(void) {
  tapes_on = 1;
  if (dl_tape_init(&tp_h, &ctx, 0) != DL_OK) fatal("dl_tape_init");
  if (dl_tape_init(&tp_d, &ctx, 0) != DL_OK) fatal("dl_tape_init");
  if (dl_tape_use_gpu(&tp_d, gpu) != DL_OK) fatal("dl_tape_use_gpu");
}
static void tapes_rewind(void) {
  dl_tape_rewind(&tp_h);
  dl_tape_rewind(&tp_d);
}
/* The floor of relative errors (expect_close), in units of the expected
 * tensor's largest value: 1e-3 for element-wise results; 1e-2 for sums of
 * many terms of both signs (GEMM, convolutions, norms), whose last bits move
 * with the order of the additions. Set per case, reset by release_all. */
static double cmp_floor = 1e-3;
static void release_all(void) {
  int i;
  cmp_floor = 1e-3;
  if (tapes_on) {
    dl_tape_free(&tp_h);
    dl_tape_free(&tp_d);
    tapes_on = 0;
  }
  for (i = 0; i < MODELS_MAX; i++) {
    if (optims[i]) dl_optim_free(optims[i]);
    optims[i] = NULL;
  }
  for (i = 0; i < MODELS_MAX; i++) {
    if (models[i]) dl_model_free(models[i]);
    models[i] = NULL;
  }
  while (npool > 0) dl_tensor_free(pool[--npool]);
  dl_ctx_clear(&ctx);
}

/* Runs fn(arg) so that a panic inside fails the current test with its text
 * instead of ending the program, and releases what it made. what names the
 * check in the failure (NULL: the case being run). The state lives in
 * statics: nothing automatic is live across the setjmp. */
static void (*g_fn)(const void *);
static const void *g_arg;
static const char *g_what;
static const char *cur_label(void);
static void guarded(void (*fn)(const void *), const void *arg, const char *what) {
  g_fn = fn;
  g_arg = arg;
  g_what = what;
  harness_jmp_armed = 1;
  if (setjmp(harness_jmp) == 0) {
    g_fn(g_arg);
    harness_jmp_armed = 0;
  } else {
    int panicked = 1;
    CHECK_MSG(!panicked, "%s: %s", g_what ? g_what : cur_label(), harness_panic_text);
  }
  release_all();
}

/* >>tensors ----------------------------------------------------------------- */

static uint64_t seed_next = 1000;

/* An f64 master tensor of uniform values in [lo, hi). */
static dl_tensor *uni(int ndim, const int64_t *shape, double lo, double hi) {
  dl_tensor *t = own(dl_tensor_make(&ctx, DL_F64, ndim, shape));
  dl_rng r = dl_rng_make(seed_next++);
  dl_tensor_rand_uniform(t, &r, lo, hi);
  return t;
}
static dl_tensor *nrm(int ndim, const int64_t *shape) {
  dl_tensor *t = own(dl_tensor_make(&ctx, DL_F64, ndim, shape));
  dl_rng r = dl_rng_make(seed_next++);
  dl_tensor_rand_normal(t, &r, 0, 1);
  return t;
}
/* An integer tensor (labels, indices) with element i = (a i + b) % n. */
static dl_tensor *ints(dl_dtype dt, int ndim, const int64_t *shape, int64_t a, int64_t b, int64_t n) {
  dl_tensor *t = own(dl_tensor_make(&ctx, dt, ndim, shape));
  int64_t i;
  for (i = 0; i < t->numel; i++) dl__set_at(t, i, (double)((a * i + b) % n));
  return t;
}
/* A host copy of m: converted to dt when m is floating, as it is otherwise. */
static dl_tensor *as_dtype(const dl_tensor *m, dl_dtype dt) {
  int fl = m->dtype == DL_F32 || m->dtype == DL_F64;
  dl_tensor *t = own(dl_tensor_make(&ctx, fl ? dt : m->dtype, m->ndim, m->shape));
  if (fl) dl_tensor_convert(t, m);
  else dl_tensor_copy(t, m);
  return t;
}
static dl_tensor *dev(const dl_tensor *h) {
  dl_tensor *d = NULL;
  if (dl_to_device(gpu, &d, h) != DL_OK) fatal("dl_to_device");
  CHECK(d->device == DL_CUDA && h->device == DL_CPU);
  return own(d);
}
static dl_tensor *host(const dl_tensor *d) {
  dl_tensor *h = NULL;
  if (!d) fatal("host() of NULL");
  if (dl_to_host(&h, d) != DL_OK) fatal("dl_to_host");
  return own(h);
}

/* >>comparison ---------------------------------------------------------------- */

static double worst[2]; /* [f32, f64] over the current test */
static int nruns;

/* Worst |got - want| / max(|want|, floor max|want|) (NaN: infinity). */
static double err_floor(const dl_tensor *got, const dl_tensor *want, double floor_) {
  double scale = 0, e = 0;
  int64_t i;
  for (i = 0; i < want->numel; i++) scale = fmax(scale, fabs(dl__get_at(want, dl__offset_of_linear(want, i))));
  for (i = 0; i < want->numel; i++) {
    double g = dl__get_at(got, dl__offset_of_linear(got, i)), w = dl__get_at(want, dl__offset_of_linear(want, i));
    double d = fabs(g - w) / fmax(fmax(fabs(w), floor_ * scale), 1e-300);
    if (!(d <= e)) e = d == d ? d : HUGE_VAL;
  }
  return e;
}
static double err_of(const dl_tensor *got, const dl_tensor *want) { return err_floor(got, want, 1e-3); }

/* got (from the device) equals want (the CPU's) within tol. */
static void expect_close(const char *name, dl_dtype dt, const char *what, const dl_tensor *got,
                         const dl_tensor *want, double tol) {
  double e;
  CHECK_MSG(got->device == DL_CPU && want->device == DL_CPU, "%s (%s): %s not on the host", name, dtn(dt), what);
  CHECK_MSG(dl_tensor_same_shape(got, want) && got->dtype == want->dtype, "%s (%s): %s is %s on the GPU, %s on the CPU",
            name, dtn(dt), what, DL_SHAPESTR(got), DL_SHAPESTR(want));
  if (!dl_tensor_same_shape(got, want) || got->dtype != want->dtype) return;
  e = err_floor(got, want, cmp_floor);
  if (e > worst[dt == DL_F64]) worst[dt == DL_F64] = e;
  CHECK_MSG(e <= tol, "%s (%s): %s differs from the CPU's by %.3g (tol %g)", name, dtn(dt), what, e, tol);
}
static void print_worst(const char *what) {
  printf("  %s: %d runs; worst relative error f32 %.2g, f64 %.2g\n", what, nruns, worst[0],
         worst[1]);
  worst[0] = worst[1] = 0;
  nruns = 0;
}

/* >>the runner ----------------------------------------------------------------
 * A check is a program y = fn(tape, inputs) and its inputs; the runner runs
 * it on both devices and compares. */

enum { GC_MAXIN = 6 };
typedef dl_tensor *(*prog_fn)(dl_tape *tp, dl_tensor *const *in, const void *user);

typedef struct gcase {
  char name[96];
  prog_fn fn;
  const void *user;
  int nin;
  const dl_tensor *in[GC_MAXIN]; /* masters: f64 (converted to the run's dtype) or integer; NULL: none */
  unsigned grad;                 /* bit k: in[k] requires a gradient (compared) */
  unsigned tang;                 /* bit k: in[k] gets a tangent in the forward-mode run (0: no such run) */
  unsigned state;                /* bit k: the program changes in[k] (running statistics): compared */
  double tol32, gtol32, tol64;   /* f32 values and tangents, f32 gradients, f64 everything */
  double floor_;                 /* of the relative errors (cmp_floor) */
  void (*post)(const struct gcase *c, dl_dtype dt, const dl_tensor *y_cpu, const dl_tensor *y_gpu);
  dl_dtype dt;                   /* the run's dtype (set by run_case) */
} gcase;

static void run_case_body(const void *arg) {
  const gcase *c = (const gcase *)arg;
  const dl_dtype dt = c->dt;
  const double tol = dt == DL_F32 ? c->tol32 : c->tol64;
  const double gtol = dt == DL_F32 ? (c->gtol32 > 0 ? c->gtol32 : c->tol32) : c->tol64;
  dl_tensor *hin[GC_MAXIN], *din[GC_MAXIN], *y, *yd;
  char what[64];
  int k;
  cmp_floor = c->floor_;
  /* device copies first: the host run may change state inputs */
  for (k = 0; k < GC_MAXIN; k++) hin[k] = din[k] = NULL;
  for (k = 0; k < c->nin; k++) {
    hin[k] = c->in[k] ? as_dtype(c->in[k], dt) : NULL;
    din[k] = hin[k] ? dev(hin[k]) : NULL;
    if (hin[k] && (c->grad >> k & 1)) {
      if (dl_requires_grad(hin[k]) != DL_OK || dl_requires_grad(din[k]) != DL_OK) fatal("dl_requires_grad");
      CHECK(din[k]->grad && din[k]->grad->device == DL_CUDA);
    }
  }
  tapes_open();
  y = c->fn(&tp_h, hin, c->user);
  yd = c->fn(&tp_d, din, c->user);
  CHECK_MSG(yd->device == DL_CUDA, "%s: the output of a device tape is on the host", c->name);
  {
    dl_tensor *yh = host(yd);
    expect_close(c->name, dt, "output", yh, y, tol);
    if (c->post) c->post(c, dt, y, yh);
  }
  if (c->grad) {
    dl_tensor *w = as_dtype(nrm(y->ndim, y->shape), dt), *wd = dev(w), *l, *ld;
    l = dl_t_sum_all(&tp_h, dl_t_mul(&tp_h, y, w));
    ld = dl_t_sum_all(&tp_d, dl_t_mul(&tp_d, yd, wd));
    dl_backward(&tp_h, l, NULL);
    dl_backward(&tp_d, ld, NULL);
    { /* a sum of terms of both signs: its error measured against sum |y w| */
      double mag = 0, lc = dl__get_at(l, 0), lg = dl__get_at(host(ld), 0);
      int64_t i;
      for (i = 0; i < y->numel; i++) mag += fabs(dl__get_at(y, dl__offset_of_linear(y, i)) * dl__get_at(w, i));
      CHECK_MSG(fabs(lg - lc) <= gtol * fmax(fabs(lc), 1e-2 * mag), "%s (%s): sum(y * w) %.17g on the GPU, %.17g on the CPU",
                c->name, dtn(dt), lg, lc);
    }
    for (k = 0; k < c->nin; k++)
      if (hin[k] && (c->grad >> k & 1)) {
        snprintf(what, sizeof what, "gradient of input %d", k);
        expect_close(c->name, dt, what, host(din[k]->grad), hin[k]->grad, gtol);
      }
  }
  for (k = 0; k < c->nin; k++)
    if (hin[k] && (c->state >> k & 1)) {
      snprintf(what, sizeof what, "input %d after the run", k);
      expect_close(c->name, dt, what, host(din[k]), hin[k], tol);
    }
  if (c->tang) {
    tapes_rewind();
    for (k = 0; k < c->nin; k++)
      if (hin[k] && (c->tang >> k & 1)) {
        dl_tensor *t = as_dtype(nrm(hin[k]->ndim, hin[k]->shape), dt);
        dl_set_tangent(hin[k], t);
        dl_set_tangent(din[k], dev(t));
      }
    y = c->fn(&tp_h, hin, c->user);
    yd = c->fn(&tp_d, din, c->user);
    CHECK_MSG(y->tangent && yd->tangent, "%s (%s): no tangent on the %s", c->name, dtn(dt), y->tangent ? "GPU" : "CPU");
    if (y->tangent && yd->tangent) {
      CHECK(yd->tangent->device == DL_CUDA);
      expect_close(c->name, dt, "tangent", host(yd->tangent), y->tangent, tol);
    }
    for (k = 0; k < c->nin; k++)
      if (hin[k]) {
        dl_set_tangent(hin[k], NULL);
        dl_set_tangent(din[k], NULL);
      }
  }
  nruns++;
}


/* >>cases ---------------------------------------------------------------------
 * A builder fills a case (its masters drawn from fixed seeds); check_case
 * builds and runs it once per dtype, each run guarded and released. */

typedef void (*case_builder)(gcase *c, const void *arg);
static gcase cur; /* static: intact after a panic's longjmp */
static case_builder cc_build;
static const void *cc_arg;

static const char *cur_label(void) {
  static char buf[128];
  snprintf(buf, sizeof buf, "%s (%s)", cur.name[0] ? cur.name : "case", dtn(cur.dt));
  return buf;
}
static void case_body(const void *dtp) {
  cur.dt = *(const dl_dtype *)dtp;
  cc_build(&cur, cc_arg);
  cur.dt = *(const dl_dtype *)dtp;
  run_case_body(&cur);
}
static void check_case(case_builder build, const void *arg) {
  static const dl_dtype dts[2] = {DL_F32, DL_F64};
  int d;
  cc_build = build;
  cc_arg = arg;
  for (d = 0; d < 2; d++) {
    memset(&cur, 0, sizeof cur);
    cur.dt = dts[d];
    seed_next = 1000;
    guarded(case_body, &dts[d], NULL);
  }
}

/* c's name, program and tolerances: f32 values 1e-5 (1e-4 when the op sums:
 * reductions, GEMM, convolutions, norms), f32 gradients 1e-4, f64 1e-10. */
static void case_init(gcase *c, const char *name, prog_fn fn, const void *user, int sums) {
  snprintf(c->name, sizeof c->name, "%s", name);
  c->fn = fn;
  c->user = user;
  c->tol32 = sums ? 1e-4 : 1e-5;
  c->gtol32 = 1e-4;
  c->tol64 = 1e-10;
  c->floor_ = sums ? 1e-2 : 1e-3;
}
/* The next input: t (NULL: the op's optional input left out), whether it
 * requires a gradient and gets a tangent. */
static void add_in(gcase *c, const dl_tensor *t, int grad, int tang) {
  if (c->nin == GC_MAXIN) fatal("too many inputs");
  if (t) {
    c->grad |= (unsigned)(grad != 0) << c->nin;
    c->tang |= (unsigned)(tang != 0) << c->nin;
  }
  c->in[c->nin++] = t;
}

/* >>element-wise ops ----------------------------------------------------------
 * The table comes from expr.h's lists. A user op (DL_DEFINE_OP1) gets its GPU
 * kernels only from a .cu file (DL_GPU_DEFINE_OP1), which a C test cannot
 * hold: tests/gpu_ew_host.cu checks that code (the kernels' scalar
 * functions, user op included) on the host. */

typedef struct ew_op {
  const char *name;
  dl_tensor *(*f1)(dl_tape *, dl_tensor *);
  dl_tensor *(*f1p)(dl_tape *, dl_tensor *, double);
  dl_tensor *(*f2)(dl_tape *, dl_tensor *, dl_tensor *);
} ew_op;
#define GT_U(name, expr) {#name, dl_t_##name, NULL, NULL},
#define GT_UP(name, expr) {#name, NULL, dl_t_##name, NULL},
#define GT_B(name, expr) {#name, NULL, NULL, dl_t_##name},
static const ew_op ew_ops[] = {DL_OPS_UNARY(GT_U) DL_OPS_UNARY_P(GT_UP) DL_OPS_BINARY(GT_B)};
#define N_EW ((int)(sizeof ew_ops / sizeof ew_ops[0]))

/* The number parameter of each UNARY_P op. */
static double ew_param(const ew_op *o) {
  if (!strcmp(o->name, "leaky_relu")) return 0.1;
  if (!strcmp(o->name, "elu")) return 0.7;
  if (!strcmp(o->name, "pow_scalar")) return 2.5;
  if (!strcmp(o->name, "add_scalar")) return 0.5;
  if (!strcmp(o->name, "mul_scalar")) return -1.5;
  return 0;
}
/* Inputs in [-2, 2), but in [0.5, 2) for log, log1p, sqrt and pow's base (x0) and
 * div's denominator (x1). */
static double ew_lo(const ew_op *o, int k) {
  if (k == 0 && (!strcmp(o->name, "log") || !strcmp(o->name, "log1p") || !strcmp(o->name, "sqrt") ||
                 !strcmp(o->name, "pow_scalar") ||
                 !strcmp(o->name, "pow")))
    return 0.5;
  if (k == 1 && !strcmp(o->name, "div")) return 0.5;
  return -2;
}

/* One op in one layout: unary ops on [4,3,5] (variant 0) and on a
 * transposed view of [5,3,4] (1); binary ops on [3,5] op [3,5] (0) and
 * [4,1,5] op [3,5] (1). */
typedef struct ew_arg {
  const ew_op *op;
  int variant;
} ew_arg;

static dl_tensor *prog_ew(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const ew_arg *a = (const ew_arg *)user;
  if (a->op->f2) return a->op->f2(tp, in[0], in[1]);
  {
    dl_tensor *x = a->variant ? dl_t_transpose(tp, in[0], 0, 2) : in[0];
    if (a->op->f1) return a->op->f1(tp, x);
    return a->op->f1p(tp, x, ew_param(a->op));
  }
}
static void build_ew(gcase *c, const void *arg) {
  const ew_arg *a = (const ew_arg *)arg;
  const ew_op *o = a->op;
  char name[96];
  snprintf(name, sizeof name, "dl_t_%s %s", o->name,
           o->f2 ? (a->variant ? "[4,1,5] op [3,5]" : "[3,5] op [3,5]") : (a->variant ? "transposed" : "contiguous"));
  case_init(c, name, prog_ew, a, 0);
  if (o->f2) {
    add_in(c, a->variant ? uni(DL_SHAPE(4, 1, 5), ew_lo(o, 0), 2) : uni(DL_SHAPE(3, 5), ew_lo(o, 0), 2), 1, 1);
    add_in(c, uni(DL_SHAPE(3, 5), ew_lo(o, 1), 2), 1, 1);
  } else {
    add_in(c, a->variant ? uni(DL_SHAPE(5, 3, 4), ew_lo(o, 0), 2) : uni(DL_SHAPE(4, 3, 5), ew_lo(o, 0), 2), 1, 1);
  }
}

static void test_elementwise_unary(void) {
  int k, v;
  NEED_GPU();
  for (k = 0; k < N_EW; k++)
    for (v = 0; v < 2; v++)
      if (!ew_ops[k].f2) {
        ew_arg a;
        a.op = &ew_ops[k];
        a.variant = v;
        check_case(build_ew, &a);
      }
  print_worst("element-wise unary ops (DL_OPS_UNARY, DL_OPS_UNARY_P)");
}
static void test_elementwise_binary(void) {
  int k, v;
  NEED_GPU();
  for (k = 0; k < N_EW; k++)
    for (v = 0; v < 2; v++)
      if (ew_ops[k].f2) {
        ew_arg a;
        a.op = &ew_ops[k];
        a.variant = v;
        check_case(build_ew, &a);
      }
  print_worst("element-wise binary ops (DL_OPS_BINARY), broadcast too");
}

/* >>matmul, linear ------------------------------------------------------------ */

enum { MM_2D, MM_BATCHED, MM_SHARED_B, MM_TRANSPOSED, MM_BATCHED_TRANSPOSED, LIN_2D, LIN_3D, LIN_NO_BIAS };
typedef struct mm_spec {
  const char *name;
  int kind;
} mm_spec;
static const mm_spec mm_specs[] = {
    {"dl_t_matmul [5,7] @ [7,3]", MM_2D},
    {"dl_t_matmul [2,5,7] @ [2,7,3]", MM_BATCHED},
    {"dl_t_matmul [2,5,7] @ [7,3] (shared b)", MM_SHARED_B},
    {"dl_t_matmul of transposed views [7,5]^T @ [3,7]^T", MM_TRANSPOSED},
    {"dl_t_matmul [2,7,5]^T @ [2,7,3] (batched, a transposed)", MM_BATCHED_TRANSPOSED},
    {"dl_t_linear [4,6] w [3,6] b [3]", LIN_2D},
    {"dl_t_linear [2,4,6] w [3,6] b [3]", LIN_3D},
    {"dl_t_linear [4,6] w [3,6] no bias", LIN_NO_BIAS},
};

static dl_tensor *prog_mm(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const mm_spec *s = (const mm_spec *)user;
  switch (s->kind) {
    case MM_TRANSPOSED: return dl_t_matmul(tp, dl_t_transpose(tp, in[0], 0, 1), dl_t_transpose(tp, in[1], 0, 1));
    case MM_BATCHED_TRANSPOSED: return dl_t_matmul(tp, dl_t_transpose(tp, in[0], 1, 2), in[1]);
    case LIN_2D:
    case LIN_3D:
    case LIN_NO_BIAS: return dl_t_linear(tp, in[0], in[1], in[2]);
    default: return dl_t_matmul(tp, in[0], in[1]);
  }
}
static void build_mm(gcase *c, const void *arg) {
  const mm_spec *s = (const mm_spec *)arg;
  case_init(c, s->name, prog_mm, s, 1);
  switch (s->kind) {
    case MM_2D:
      add_in(c, nrm(DL_SHAPE(5, 7)), 1, 1);
      add_in(c, nrm(DL_SHAPE(7, 3)), 1, 1);
      break;
    case MM_BATCHED:
      add_in(c, nrm(DL_SHAPE(2, 5, 7)), 1, 1);
      add_in(c, nrm(DL_SHAPE(2, 7, 3)), 1, 1);
      break;
    case MM_SHARED_B:
      add_in(c, nrm(DL_SHAPE(2, 5, 7)), 1, 1);
      add_in(c, nrm(DL_SHAPE(7, 3)), 1, 1);
      break;
    case MM_TRANSPOSED:
      add_in(c, nrm(DL_SHAPE(7, 5)), 1, 1);
      add_in(c, nrm(DL_SHAPE(3, 7)), 1, 1);
      break;
    case MM_BATCHED_TRANSPOSED:
      add_in(c, nrm(DL_SHAPE(2, 7, 5)), 1, 1);
      add_in(c, nrm(DL_SHAPE(2, 7, 3)), 1, 1);
      break;
    default:
      add_in(c, s->kind == LIN_3D ? nrm(DL_SHAPE(2, 4, 6)) : nrm(DL_SHAPE(4, 6)), 1, 1);
      add_in(c, nrm(DL_SHAPE(3, 6)), 1, 1);
      add_in(c, s->kind == LIN_NO_BIAS ? NULL : nrm(DL_SHAPE(3)), 1, 1);
  }
}
static void test_matmul_linear(void) {
  size_t k;
  NEED_GPU();
  for (k = 0; k < sizeof mm_specs / sizeof *mm_specs; k++) check_case(build_mm, &mm_specs[k]);
  print_worst("matmul and linear");
}

/* >>reductions, softmax -------------------------------------------------------- */

enum { R_SUM, R_MEAN, R_MAX, R_SOFTMAX, R_LOG_SOFTMAX };
typedef struct red_spec {
  const char *name;
  int kind, naxes, axes[3], keepdim, axis;
  int strided; /* the input is a transposed view of [5,4,3] */
} red_spec;
static const red_spec red_specs[] = {
    {"dl_t_sum axis 1", R_SUM, 1, {1, 0, 0}, 0, 0, 0},
    {"dl_t_sum axes 0,2 keepdim", R_SUM, 2, {0, 2, 0}, 1, 0, 0},
    {"dl_t_sum axis -1 of a transposed view", R_SUM, 1, {-1, 0, 0}, 0, 0, 1},
    {"dl_t_mean axis 2", R_MEAN, 1, {2, 0, 0}, 0, 0, 0},
    {"dl_t_mean axes 0,1", R_MEAN, 2, {0, 1, 0}, 0, 0, 0},
    {"dl_t_max axis 1", R_MAX, 1, {1, 0, 0}, 0, 0, 0},
    {"dl_t_max axis 2 keepdim", R_MAX, 1, {2, 0, 0}, 1, 0, 0},
    {"dl_t_max axes 0,2", R_MAX, 2, {0, 2, 0}, 0, 0, 0},
    {"dl_t_softmax axis -1", R_SOFTMAX, 0, {0, 0, 0}, 0, -1, 0},
    {"dl_t_softmax axis 1", R_SOFTMAX, 0, {0, 0, 0}, 0, 1, 0},
    {"dl_t_softmax axis 0 of a transposed view", R_SOFTMAX, 0, {0, 0, 0}, 0, 0, 1},
    {"dl_t_log_softmax axis -1", R_LOG_SOFTMAX, 0, {0, 0, 0}, 0, -1, 0},
    {"dl_t_log_softmax axis 0", R_LOG_SOFTMAX, 0, {0, 0, 0}, 0, 0, 0},
};
static dl_tensor *prog_red(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const red_spec *s = (const red_spec *)user;
  dl_tensor *x = s->strided ? dl_t_transpose(tp, in[0], 0, 2) : in[0];
  switch (s->kind) {
    case R_SUM: return dl_t_sum(tp, x, s->naxes, s->axes, s->keepdim);
    case R_MEAN: return dl_t_mean(tp, x, s->naxes, s->axes, s->keepdim);
    case R_MAX: return dl_t_max(tp, x, s->naxes, s->axes, s->keepdim);
    case R_SOFTMAX: return dl_t_softmax(tp, x, s->axis);
    default: return dl_t_log_softmax(tp, x, s->axis);
  }
}
static void build_red(gcase *c, const void *arg) {
  const red_spec *s = (const red_spec *)arg;
  case_init(c, s->name, prog_red, s, 1);
  add_in(c, s->strided ? nrm(DL_SHAPE(5, 4, 3)) : nrm(DL_SHAPE(3, 4, 5)), 1, 1);
}
static void test_reductions_softmax(void) {
  size_t k;
  NEED_GPU();
  for (k = 0; k < sizeof red_specs / sizeof *red_specs; k++) check_case(build_red, &red_specs[k]);
  print_worst("sum, mean, max, softmax, log_softmax");
}

/* >>losses ---------------------------------------------------------------------- */

typedef struct loss_spec {
  const char *name;
  int mse;              /* dl_t_mse, else dl_t_cross_entropy */
  double eps;           /* label smoothing */
  dl_reduction r;
  int i32;              /* labels as i32 (else i64) */
} loss_spec;
static const loss_spec loss_specs[] = {
    {"dl_t_cross_entropy mean", 0, 0, DL_REDUCE_MEAN, 0},
    {"dl_t_cross_entropy sum, smoothing 0.1", 0, 0.1, DL_REDUCE_SUM, 0},
    {"dl_t_cross_entropy none", 0, 0, DL_REDUCE_NONE, 0},
    {"dl_t_cross_entropy mean, i32 labels", 0, 0, DL_REDUCE_MEAN, 1},
    {"dl_t_mse mean", 1, 0, DL_REDUCE_MEAN, 0},
    {"dl_t_mse sum", 1, 0, DL_REDUCE_SUM, 0},
    {"dl_t_mse none", 1, 0, DL_REDUCE_NONE, 0},
};
static dl_tensor *prog_loss(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const loss_spec *s = (const loss_spec *)user;
  if (s->mse) return dl_t_mse(tp, in[0], in[1], s->r);
  return dl_t_cross_entropy(tp, in[0], in[1], s->eps, s->r);
}
static void build_loss(gcase *c, const void *arg) {
  const loss_spec *s = (const loss_spec *)arg;
  case_init(c, s->name, prog_loss, s, 1);
  if (s->mse) {
    add_in(c, nrm(DL_SHAPE(4, 5)), 1, 1);
    add_in(c, nrm(DL_SHAPE(4, 5)), 1, 1);
  } else {
    add_in(c, nrm(DL_SHAPE(6, 5)), 1, 1);
    add_in(c, ints(s->i32 ? DL_I32 : DL_I64, DL_SHAPE(6), 3, 1, 5), 0, 0); /* on the device too */
  }
}
static void test_losses(void) {
  size_t k;
  NEED_GPU();
  for (k = 0; k < sizeof loss_specs / sizeof *loss_specs; k++) check_case(build_loss, &loss_specs[k]);
  print_worst("cross entropy, mse");
}

/* >>embedding, dropout ------------------------------------------------------------ */

typedef struct emb_spec {
  const char *name;
  int i32;
} emb_spec;
static const emb_spec emb_specs[] = {{"dl_t_embedding [10,4] at i64 [3,5]", 0},
                                     {"dl_t_embedding [10,4] at i32 [3,5]", 1}};
/* The weight passes through an op first, so that its gradient is dense
 * (a leaf weight gets a row-sparse one) and can be compared. */
static dl_tensor *prog_emb(dl_tape *tp, dl_tensor *const *in, const void *user) {
  (void)user;
  return dl_t_embedding(tp, dl_t_mul_scalar(tp, in[0], 1.0), in[1]);
}
static void build_emb(gcase *c, const void *arg) {
  const emb_spec *s = (const emb_spec *)arg;
  case_init(c, s->name, prog_emb, s, 1);
  add_in(c, nrm(DL_SHAPE(10, 4)), 1, 1);
  add_in(c, ints(s->i32 ? DL_I32 : DL_I64, DL_SHAPE(3, 5), 7, 3, 10), 0, 0); /* rows repeat */
}

typedef struct drop_spec {
  const char *name;
  double p;
  uint64_t seed;
} drop_spec;
static const drop_spec drop_specs[] = {{"dl_t_dropout p 0.3", 0.3, 5}, {"dl_t_dropout p 0.5", 0.5, 6}};
/* Each run draws from the same rng state: the CPU's and the device's masks
 * must be the same. */
static dl_tensor *prog_drop(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const drop_spec *s = (const drop_spec *)user;
  dl_rng r = dl_rng_make(s->seed);
  r.counter = 3;
  return dl_t_dropout(tp, in[0], s->p, &r, 1);
}
static void drop_post(const gcase *c, dl_dtype dt, const dl_tensor *y, const dl_tensor *yg) {
  int64_t i, differ = 0, kept = 0;
  for (i = 0; i < y->numel; i++) {
    int a = dl__get_at(y, dl__offset_of_linear(y, i)) != 0, b = dl__get_at(yg, i) != 0;
    differ += a != b;
    kept += a;
  }
  CHECK_MSG(differ == 0, "%s (%s): %lld of %lld mask elements differ from the CPU's", c->name, dtn(dt),
            (long long)differ, (long long)y->numel);
  CHECK_MSG(kept > 0 && kept < y->numel, "%s: %lld of %lld kept", c->name, (long long)kept, (long long)y->numel);
}
static void build_drop(gcase *c, const void *arg) {
  const drop_spec *s = (const drop_spec *)arg;
  case_init(c, s->name, prog_drop, s, 0);
  c->post = drop_post;
  add_in(c, uni(DL_SHAPE(33, 17), 0.5, 2), 1, 1); /* no zeros: a zero output is a dropped element */
}
static void test_embedding_dropout(void) {
  size_t k;
  NEED_GPU();
  for (k = 0; k < sizeof emb_specs / sizeof *emb_specs; k++) check_case(build_emb, &emb_specs[k]);
  for (k = 0; k < sizeof drop_specs / sizeof *drop_specs; k++) check_case(build_drop, &drop_specs[k]);
  print_worst("embedding, dropout");
}

/* >>convolution, pooling ------------------------------------------------------------ */

typedef struct conv_spec {
  const char *name;
  int64_t C, O, G, H, W, kh, kw;
  int bias;
  dl_conv2d_args a;
} conv_spec;
static const conv_spec conv_specs[] = {
    {"dl_t_conv2d 3x3 pad 1", 4, 6, 1, 7, 6, 3, 3, 1, {1, 1, 1, 1, 1, 1, 1, 0, 0, 0}},
    {"dl_t_conv2d 3x3 stride 2 pad 1", 4, 6, 1, 7, 6, 3, 3, 1, {2, 2, 1, 1, 1, 1, 1, 0, 0, 0}},
    {"dl_t_conv2d 3x3 groups 2, no bias", 4, 6, 2, 7, 6, 3, 3, 0, {1, 1, 1, 1, 1, 1, 2, 0, 0, 0}},
    {"dl_t_conv2d 3x2 stride (2,1) pad (0,1) dilation 2", 4, 6, 1, 9, 7, 3, 2, 1, {2, 1, 0, 1, 2, 2, 1, 0, 0, 0}},
    {"dl_t_conv2d 1x1", 4, 6, 1, 5, 5, 1, 1, 1, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {"dl_t_conv2d 3x3 depthwise (groups 4)", 4, 4, 4, 6, 6, 3, 3, 1, {1, 1, 1, 1, 1, 1, 4, 0, 0, 0}},
    {"dl_t_conv2d 3x3 stride 2 SAME (a padded copy of x)", 4, 6, 1, 7, 6, 3, 3, 1, {2, 2, 0, 0, 1, 1, 1, DL_PAD_SAME, 0, 0}},
    {"dl_t_conv2d 2x3 explicit pads 0,1 / 2,0", 4, 6, 1, 7, 6, 2, 3, 0, {1, 1, 0, 2, 1, 1, 1, DL_PAD_EXPLICIT, 1, 0}},
};
static dl_tensor *prog_conv(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const conv_spec *s = (const conv_spec *)user;
  return dl_t_conv2d(tp, in[0], in[1], in[2], &s->a);
}
static void build_conv(gcase *c, const void *arg) {
  const conv_spec *s = (const conv_spec *)arg;
  case_init(c, s->name, prog_conv, s, 1);
  add_in(c, nrm(DL_SHAPE(2, s->C, s->H, s->W)), 1, 1);
  add_in(c, nrm(DL_SHAPE(s->O, s->C / s->G, s->kh, s->kw)), 1, 1);
  add_in(c, s->bias ? nrm(DL_SHAPE(s->O)) : NULL, 1, 1);
}

typedef struct pool_spec {
  const char *name;
  int max; /* 1 max, 0 avg, 2 max with indices then max_unpool2d (of ua, or of the same window to 7x6) */
  dl_pool2d_args a;
  dl_unpool2d_args ua;
} pool_spec;
static const pool_spec pool_specs[] = {
    {"dl_t_max_pool2d 2x2", 1, {.kernel_h = 2, .kernel_w = 2}, {0}},
    {"dl_t_max_pool2d 3x3 stride 2 pad 1", 1, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, {0}},
    {"dl_t_max_pool2d 3x2 dilation 2x3 ceil_mode", 1,
     {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .pad_h = 1, .dil_h = 2, .dil_w = 3, .ceil_mode = 1}, {0}},
    {"dl_t_max_pool2d 3x3 stride 2 explicit pads 0,2 / 1,0", 1,
     {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_w = 1, .pad_mode = DL_PAD_EXPLICIT, .pad_h_end = 2}, {0}},
    {"dl_t_max_pool2d 2x2 SAME", 1, {.kernel_h = 2, .kernel_w = 2, .pad_mode = DL_PAD_SAME}, {0}},
    {"dl_t_avg_pool2d 2x2", 0, {.kernel_h = 2, .kernel_w = 2}, {0}},
    {"dl_t_avg_pool2d 3x3 stride 2 pad 1", 0, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, {0}},
    {"dl_t_avg_pool2d 3x3 stride 2 pad 1 exclude_pad", 0,
     {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .exclude_pad = 1}, {0}},
    {"dl_t_avg_pool2d 3x3 stride 2 pad 1 ceil_mode", 0,
     {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .ceil_mode = 1}, {0}},
    {"dl_t_avg_pool2d 3x2 SAME_LOWER exclude_pad", 0,
     {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .exclude_pad = 1, .pad_mode = DL_PAD_SAME_LOWER}, {0}},
    {"dl_t_max_unpool2d of max_pool2d_with_indices 2x2", 2, {.kernel_h = 2, .kernel_w = 2}, {0}},
    {"dl_t_max_unpool2d of max_pool2d_with_indices 3x3 stride 1 (repeated indices)", 2,
     {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1}, {0}},
    {"dl_t_max_unpool2d of a dilated max pool with windows that miss the input (index -1)", 2,
     {.kernel_h = 1, .kernel_w = 2, .stride_w = 1, .dil_w = 7, .pad_mode = DL_PAD_EXPLICIT, .pad_w = 6, .pad_w_end = 6},
     {.kernel_h = 1, .kernel_w = 2, .stride_w = 1, .pad_w = 3}},
};
static dl_tensor *prog_pool(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const pool_spec *s = (const pool_spec *)user;
  if (s->max == 2) {
    dl_tensor *idx = NULL, *y = dl_t_max_pool2d_with_indices(tp, in[0], &s->a, &idx);
    const dl_unpool2d_args ua = {s->a.kernel_h, s->a.kernel_w, s->a.stride_h, s->a.stride_w, s->a.pad_h, s->a.pad_w,
                                 7, 6};
    return dl_t_max_unpool2d(tp, y, idx, s->ua.kernel_h ? &s->ua : &ua);
  }
  return s->max ? dl_t_max_pool2d(tp, in[0], &s->a) : dl_t_avg_pool2d(tp, in[0], &s->a);
}
static void build_pool(gcase *c, const void *arg) {
  const pool_spec *s = (const pool_spec *)arg;
  case_init(c, s->name, prog_pool, s, 1);
  add_in(c, nrm(DL_SHAPE(2, 3, 7, 6)), 1, 1);
}
/* 3-d: conv3d through cuDNN's Nd descriptors (a depth-1 case through the
 * 4-d ones), the 3-d pools through the same kernels as 2-d. */
typedef struct conv3d_spec {
  const char *name;
  int64_t C, O, G, D, H, W, kd, kh, kw;
  int bias;
  dl_conv3d_args a;
} conv3d_spec;
static const conv3d_spec conv3d_specs[] = {
    {"dl_t_conv3d 3x3x3 pad 1", 3, 4, 1, 5, 6, 5, 3, 3, 3, 1, {.pad_d = 1, .pad_h = 1, .pad_w = 1}},
    {"dl_t_conv3d 2x3x2 stride (2,1,2) dilation (1,2,1) groups 2, no bias", 4, 6, 2, 6, 7, 5, 2, 3, 2, 0,
     {.stride_d = 2, .stride_w = 2, .pad_d = 1, .pad_w = 1, .dil_h = 2, .groups = 2}},
    {"dl_t_conv3d 1x1x1", 3, 4, 1, 3, 4, 5, 1, 1, 1, 1, {0}},
    {"dl_t_conv3d depth 1 (as conv2d)", 3, 4, 1, 1, 6, 5, 1, 3, 3, 1, {.pad_h = 1}},
    {"dl_t_conv3d SAME stride 2 (a padded copy of x)", 2, 3, 1, 5, 6, 5, 3, 2, 3, 1,
     {.stride_d = 2, .stride_h = 2, .stride_w = 2, .pad_mode = DL_PAD_SAME}},
};
static dl_tensor *prog_conv3d(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const conv3d_spec *s = (const conv3d_spec *)user;
  return dl_t_conv3d(tp, in[0], in[1], in[2], &s->a);
}
static void build_conv3d(gcase *c, const void *arg) {
  const conv3d_spec *s = (const conv3d_spec *)arg;
  case_init(c, s->name, prog_conv3d, s, 1);
  add_in(c, nrm(DL_SHAPE(2, s->C, s->D, s->H, s->W)), 1, 1);
  add_in(c, nrm(DL_SHAPE(s->O, s->C / s->G, s->kd, s->kh, s->kw)), 1, 1);
  add_in(c, s->bias ? nrm(DL_SHAPE(s->O)) : NULL, 1, 1);
}
typedef struct pool3d_spec {
  const char *name;
  int max;
  dl_pool3d_args a;
} pool3d_spec;
static const pool3d_spec pool3d_specs[] = {
    {"dl_t_max_pool3d 2x2x2", 1, {.kernel_d = 2, .kernel_h = 2, .kernel_w = 2}},
    {"dl_t_max_pool3d 3x3x3 stride 2 pad 1", 1,
     {.kernel_d = 3, .kernel_h = 3, .kernel_w = 3, .stride_d = 2, .stride_h = 2, .stride_w = 2, .pad_d = 1, .pad_h = 1,
      .pad_w = 1}},
    {"dl_t_max_pool3d 2x3x2 dilation (2,1,2) ceil_mode", 1,
     {.kernel_d = 2, .kernel_h = 3, .kernel_w = 2, .stride_d = 1, .stride_h = 2, .stride_w = 2, .pad_h = 1,
      .dil_d = 2, .dil_w = 2, .ceil_mode = 1}},
    {"dl_t_avg_pool3d 2x2x2", 0, {.kernel_d = 2, .kernel_h = 2, .kernel_w = 2}},
    {"dl_t_avg_pool3d 3x3x3 stride 2 pad 1 exclude_pad", 0,
     {.kernel_d = 3, .kernel_h = 3, .kernel_w = 3, .stride_d = 2, .stride_h = 2, .stride_w = 2, .pad_d = 1, .pad_h = 1,
      .pad_w = 1, .exclude_pad = 1}},
    {"dl_t_avg_pool3d 3x2x3 stride 2 pad 1 ceil_mode", 0,
     {.kernel_d = 3, .kernel_h = 2, .kernel_w = 3, .stride_d = 2, .stride_h = 2, .stride_w = 2, .pad_d = 1, .pad_w = 1,
      .ceil_mode = 1}},
};
static dl_tensor *prog_pool3d(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const pool3d_spec *s = (const pool3d_spec *)user;
  return s->max ? dl_t_max_pool3d(tp, in[0], &s->a) : dl_t_avg_pool3d(tp, in[0], &s->a);
}
static void build_pool3d(gcase *c, const void *arg) {
  const pool3d_spec *s = (const pool3d_spec *)arg;
  case_init(c, s->name, prog_pool3d, s, 1);
  add_in(c, nrm(DL_SHAPE(2, 2, 5, 6, 7)), 1, 1);
}
static void test_conv_pool(void) {
  size_t k;
  NEED_GPU();
  for (k = 0; k < sizeof conv_specs / sizeof *conv_specs; k++) check_case(build_conv, &conv_specs[k]);
  for (k = 0; k < sizeof pool_specs / sizeof *pool_specs; k++) check_case(build_pool, &pool_specs[k]);
  print_worst("conv2d, max_pool2d, avg_pool2d, max_unpool2d");
  for (k = 0; k < sizeof conv3d_specs / sizeof *conv3d_specs; k++) check_case(build_conv3d, &conv3d_specs[k]);
  for (k = 0; k < sizeof pool3d_specs / sizeof *pool3d_specs; k++) check_case(build_pool3d, &pool3d_specs[k]);
  print_worst("conv3d, max_pool3d, avg_pool3d");
}

/* >>normalisation ---------------------------------------------------------------- */

typedef struct bn_spec {
  const char *name;
  int nd, training, stats, affine;
} bn_spec;
static const bn_spec bn_specs[] = {
    {"dl_t_batch_norm train [4,3,5]", 3, 1, 1, 1},
    {"dl_t_batch_norm train [6,3]", 2, 1, 1, 1},
    {"dl_t_batch_norm train [2,3,4,4]", 4, 1, 1, 1},
    {"dl_t_batch_norm train, no running statistics", 3, 1, 0, 1},
    {"dl_t_batch_norm train, no weight and bias", 3, 1, 1, 0},
    {"dl_t_batch_norm eval [4,3,5]", 3, 0, 1, 1},
    {"dl_t_batch_norm eval [2,3,4,4]", 4, 0, 1, 1},
};
static dl_tensor *prog_bn(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const bn_spec *s = (const bn_spec *)user;
  return dl_t_batch_norm(tp, in[0], in[1], in[2], in[3], in[4], s->training, 0.1, 1e-5);
}
static void build_bn(gcase *c, const void *arg) {
  const bn_spec *s = (const bn_spec *)arg;
  case_init(c, s->name, prog_bn, s, 1);
  add_in(c, s->nd == 2 ? nrm(DL_SHAPE(6, 3)) : s->nd == 3 ? nrm(DL_SHAPE(4, 3, 5)) : nrm(DL_SHAPE(2, 3, 4, 4)), 1, 1);
  add_in(c, s->affine ? uni(DL_SHAPE(3), 0.5, 1.5) : NULL, 1, 1);
  add_in(c, s->affine ? nrm(DL_SHAPE(3)) : NULL, 1, 1);
  add_in(c, s->stats ? uni(DL_SHAPE(3), -0.3, 0.3) : NULL, 0, 0);
  add_in(c, s->stats ? uni(DL_SHAPE(3), 0.5, 1.5) : NULL, 0, 0);
  if (s->stats && s->training) c->state = 1u << 3 | 1u << 4; /* updated in place: compared after */
}

typedef struct ln_spec {
  const char *name;
  int nnorm, affine;
} ln_spec;
static const ln_spec ln_specs[] = {
    {"dl_t_layer_norm [4,3,6] over 1 dim", 1, 1},
    {"dl_t_layer_norm [4,3,6] over 2 dims", 2, 1},
    {"dl_t_layer_norm [4,3,6] over 1 dim, no weight and bias", 1, 0},
};
static dl_tensor *prog_ln(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const ln_spec *s = (const ln_spec *)user;
  return dl_t_layer_norm(tp, in[0], s->nnorm, in[1], in[2], 1e-5);
}
static void build_ln(gcase *c, const void *arg) {
  const ln_spec *s = (const ln_spec *)arg;
  case_init(c, s->name, prog_ln, s, 1);
  add_in(c, nrm(DL_SHAPE(4, 3, 6)), 1, 1);
  if (!s->affine) {
    add_in(c, NULL, 0, 0);
    add_in(c, NULL, 0, 0);
  } else if (s->nnorm == 1) {
    add_in(c, uni(DL_SHAPE(6), 0.5, 1.5), 1, 1);
    add_in(c, nrm(DL_SHAPE(6)), 1, 1);
  } else {
    add_in(c, uni(DL_SHAPE(3, 6), 0.5, 1.5), 1, 1);
    add_in(c, nrm(DL_SHAPE(3, 6)), 1, 1);
  }
}
static void test_norms(void) {
  size_t k;
  NEED_GPU();
  for (k = 0; k < sizeof bn_specs / sizeof *bn_specs; k++) check_case(build_bn, &bn_specs[k]);
  for (k = 0; k < sizeof ln_specs / sizeof *ln_specs; k++) check_case(build_ln, &ln_specs[k]);
  print_worst("batch_norm, layer_norm");
}

/* >>index_select, gather, pad ------------------------------------------------------- */

enum { SHP_ISEL, SHP_GATHER, SHP_PAD };
typedef struct shp_spec {
  const char *name;
  int op;
  int nd;           /* x's rank and shape (before the transpose when tr) */
  int64_t x[4];
  int tr;           /* the op sees dl_t_transpose(x, 0, nd - 1), a strided view */
  int dim;          /* index_select, gather: the dimension (of the view) */
  int ind;          /* the index's rank and shape, entries (a i + b) % n */
  int64_t ix[4];
  int64_t a, b, n;
  int i32, host_idx; /* i32 indices (else i64); left on the host (else moved to the device) */
  int npairs;       /* pad: (left, right) pairs from the last dimension, value */
  int64_t pads[8];
  double value;
} shp_spec;
static const shp_spec shp_specs[] = {
    {"dl_t_index_select [5,4] dim 0 by i64 [7]", SHP_ISEL, 2, {5, 4}, 0, 0, 1, {7}, 3, 1, 5, 0, 0, 0, {0}, 0},
    {"dl_t_index_select [3,5,4] dim 1 by i32 [8]", SHP_ISEL, 3, {3, 5, 4}, 0, 1, 1, {8}, 2, 1, 5, 1, 0, 0, {0}, 0},
    {"dl_t_index_select [3,5,4] dim -1 by host i64 [6]", SHP_ISEL, 3, {3, 5, 4}, 0, -1, 1, {6}, 1, 2, 4, 0, 1, 0,
     {0}, 0},
    {"dl_t_index_select [4,6]^T dim 0 by i64 [9]", SHP_ISEL, 2, {4, 6}, 1, 0, 1, {9}, 5, 2, 6, 0, 0, 0, {0}, 0},
    {"dl_t_gather [4,5] dim 0 by i64 [6,5]", SHP_GATHER, 2, {4, 5}, 0, 0, 2, {6, 5}, 3, 1, 4, 0, 0, 0, {0}, 0},
    {"dl_t_gather [4,5] dim 1 by i32 [3,7]", SHP_GATHER, 2, {4, 5}, 0, 1, 2, {3, 7}, 2, 3, 5, 1, 0, 0, {0}, 0},
    {"dl_t_gather [5,4,3]^T dim 2 by host i64 [3,2,9]", SHP_GATHER, 3, {5, 4, 3}, 1, 2, 3, {3, 2, 9}, 7, 1, 5, 0, 1,
     0, {0}, 0},
    {"dl_t_gather [3,4,5] dim -2 by i64 [2,6,5]", SHP_GATHER, 3, {3, 4, 5}, 0, -2, 3, {2, 6, 5}, 1, 0, 4, 0, 0, 0,
     {0}, 0},
    {"dl_t_pad [3,4] by (1,2) value 0.5", SHP_PAD, 2, {3, 4}, 0, 0, 0, {0}, 0, 0, 1, 0, 0, 1, {1, 2}, 0.5},
    {"dl_t_pad [2,3,4] by (2,1,1,0,1,1) value -1", SHP_PAD, 3, {2, 3, 4}, 0, 0, 0, {0}, 0, 0, 1, 0, 0, 3,
     {2, 1, 1, 0, 1, 1}, -1},
    {"dl_t_pad [3,5] by (-1,2,1,-2) (crops)", SHP_PAD, 2, {3, 5}, 0, 0, 0, {0}, 0, 0, 1, 0, 0, 2, {-1, 2, 1, -2}, 0},
    {"dl_t_pad [4,3,2]^T by (1,-1,0,2) value 3", SHP_PAD, 3, {4, 3, 2}, 1, 0, 0, {0}, 0, 0, 1, 0, 0, 2,
     {1, -1, 0, 2}, 3},
};
static dl_tensor *prog_shp(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const shp_spec *s = (const shp_spec *)user;
  dl_tensor *x = s->tr ? dl_t_transpose(tp, in[0], 0, s->nd - 1) : in[0], *ix;
  if (s->op == SHP_PAD) return dl_t_pad(tp, x, s->npairs, s->pads, s->value);
  ix = s->host_idx && in[1]->device == DL_CUDA ? host(in[1]) : in[1];
  return s->op == SHP_ISEL ? dl_t_index_select(tp, x, s->dim, ix) : dl_t_gather(tp, x, s->dim, ix);
}
static void build_shp(gcase *c, const void *arg) {
  const shp_spec *s = (const shp_spec *)arg;
  case_init(c, s->name, prog_shp, s, 0);
  c->tol32 = 0; /* values and tangents: copies, the CPU's bits */
  add_in(c, uni(s->nd, s->x, -2, 2), 1, 1);
  if (s->op != SHP_PAD) add_in(c, ints(s->i32 ? DL_I32 : DL_I64, s->ind, s->ix, s->a, s->b, s->n), 0, 0);
}
static void test_index_gather_pad(void) {
  size_t k;
  NEED_GPU();
  for (k = 0; k < sizeof shp_specs / sizeof *shp_specs; k++) check_case(build_shp, &shp_specs[k]);
  print_worst("index_select, gather, pad");
}

/* >>recurrent layers, attention ------------------------------------------------------ */

typedef struct rnn_spec {
  const char *name;
  int kind;     /* 0 rnn tanh, 1 rnn relu, 2 lstm, 3 gru, 4 gru with the reset gate before the product */
  int h0, bias; /* h0 (and c0) given; b_ih, b_hh given (one [2 G H] input, sliced) */
  int lengths;  /* the _ex op with rows of lengths {4, 1, 3} (T = 4); 2: also the reverse
                   direction as dl_rnn_forward_lengths runs it (each row read backwards) */
} rnn_spec;
static const rnn_spec rnn_specs[] = {
    {"dl_t_rnn tanh, h0, biases", 0, 1, 1, 0},  {"dl_t_rnn relu, no h0, no biases", 1, 0, 0, 0},
    {"dl_t_lstm, h0 and c0, biases", 2, 1, 1, 0}, {"dl_t_lstm, no h0 and c0, biases", 2, 0, 1, 0},
    {"dl_t_gru, h0, biases", 3, 1, 1, 0},       {"dl_t_gru, no h0, no biases", 3, 0, 0, 0},
    {"dl_t_rnn_ex tanh, lengths 4 1 3, h0", 0, 1, 1, 1}, {"dl_t_rnn_ex relu, lengths 4 1 3", 1, 0, 0, 1},
    {"dl_t_lstm_ex, lengths 4 1 3, h0 and c0", 2, 1, 1, 1}, {"dl_t_gru_ex, lengths 4 1 3", 3, 0, 1, 1},
    {"dl_t_lstm_ex both directions, lengths 4 1 3", 2, 1, 1, 2},
    {"dl_t_gru_ex reset before linear, h0, biases", 4, 1, 1, 0},
    {"dl_t_gru_ex reset before linear, lengths 4 1 3", 4, 0, 0, 1},
};
/* in: x [3,4,5], h0, c0 [3,6] (or NULL), w_ih [G*6,5], w_hh [G*6,6], b [2*G*6]
 * (b_ih, b_hh side by side; or NULL). y + h_n + c_n (the last two broadcast
 * over the steps), so that the gradient flows through all three outputs. */
static dl_tensor *prog_rnn(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const rnn_spec *s = (const rnn_spec *)user;
  const int64_t GH = in[4]->shape[0], B = in[0]->shape[0], H = in[4]->shape[1];
  dl_tensor *bih = in[5] ? dl_t_slice(tp, in[5], 0, 0, GH, 1) : NULL;
  dl_tensor *bhh = in[5] ? dl_t_slice(tp, in[5], 0, GH, 2 * GH, 1) : NULL;
  dl_tensor *y, *hn = NULL, *cn = NULL;
  static const int64_t lengths[3] = {4, 1, 3};
  dl_rnn_args a;
  memset(&a, 0, sizeof a);
  a.lengths = s->lengths ? lengths : NULL;
  a.gru_reset_before_linear = s->kind == 4;
  if (s->kind <= 1) y = dl_t_rnn_ex(tp, in[0], in[1], in[3], in[4], bih, bhh, s->kind == 0, &a, &hn);
  else if (s->kind == 2) y = dl_t_lstm_ex(tp, in[0], in[1], in[2], in[3], in[4], bih, bhh, &a, &hn, &cn);
  else y = dl_t_gru_ex(tp, in[0], in[1], in[3], in[4], bih, bhh, &a, &hn);
  y = dl_t_add(tp, y, dl_t_reshape(tp, hn, 3, (const int64_t[]){B, 1, H}));
  if (cn) y = dl_t_add(tp, y, dl_t_reshape(tp, cn, 3, (const int64_t[]){B, 1, H}));
  if (s->lengths == 2) { /* the reverse direction (layers.h): each row's steps reversed, the same weights */
    dl_tensor *both[2], *yr = dl_t_lstm_ex(tp, dl__rnn_reverse(tp, in[0], lengths), in[1], in[2], in[3], in[4], bih,
                                           bhh, &a, NULL, NULL);
    both[0] = y;
    both[1] = dl__rnn_reverse(tp, yr, lengths);
    y = dl_t_concat(tp, 2, both, 2);
  }
  return y;
}
static void build_rnn(gcase *c, const void *arg) {
  const rnn_spec *s = (const rnn_spec *)arg;
  const int64_t G = s->kind == 2 ? 4 : s->kind >= 3 ? 3 : 1;
  case_init(c, s->name, prog_rnn, s, 1);
  add_in(c, uni(DL_SHAPE(3, 4, 5), -1, 1), 1, 1);
  add_in(c, s->h0 ? uni(DL_SHAPE(3, 6), -1, 1) : NULL, 1, 1);
  add_in(c, s->h0 && s->kind == 2 ? uni(DL_SHAPE(3, 6), -1, 1) : NULL, 1, 1);
  add_in(c, uni(DL_SHAPE(G * 6, 5), -0.6, 0.6), 1, 1);
  add_in(c, uni(DL_SHAPE(G * 6, 6), -0.6, 0.6), 1, 1);
  add_in(c, s->bias ? uni(DL_SHAPE(2 * G * 6), -0.5, 0.5) : NULL, 1, 1);
}

typedef struct mha_spec {
  const char *name;
  int self;   /* q = k = v = in[0]; else q in[0], k = v in[1] */
  int mask;   /* 0 none, 1 float [Tq, Tk], 2 u8 [Tq, Tk] (nonzero masks out; a device tensor) */
  int causal;
} mha_spec;
static const mha_spec mha_specs[] = {
    {"dl_t_multi_head_attention self, no mask", 1, 0, 0},
    {"dl_t_multi_head_attention self, causal", 1, 0, 1},
    {"dl_t_multi_head_attention self, float mask", 1, 1, 0},
    {"dl_t_multi_head_attention self, u8 mask", 1, 2, 0},
    {"dl_t_multi_head_attention cross (k == v), Tq 3 Tk 5", 0, 0, 0},
    {"dl_t_multi_head_attention cross (k == v), causal", 0, 0, 1},
};
/* in: self: x [2,4,6], w_in [18,6], b_in [18], w_out [6,6], b_out [6], mask
 * [4,4] or NULL; cross: q [2,3,6], kv [2,5,6], then the four parameters. 2 heads. */
static dl_tensor *prog_mha(dl_tape *tp, dl_tensor *const *in, const void *user) {
  const mha_spec *s = (const mha_spec *)user;
  if (s->self)
    return dl_t_multi_head_attention(tp, in[0], in[0], in[0], in[1], in[2], in[3], in[4], 2, in[5], s->causal);
  return dl_t_multi_head_attention(tp, in[0], in[1], in[1], in[2], in[3], in[4], in[5], 2, NULL, s->causal);
}
static void build_mha(gcase *c, const void *arg) {
  const mha_spec *s = (const mha_spec *)arg;
  case_init(c, s->name, prog_mha, s, 1);
  add_in(c, s->self ? uni(DL_SHAPE(2, 4, 6), -1, 1) : uni(DL_SHAPE(2, 3, 6), -1, 1), 1, 1);
  if (!s->self) add_in(c, uni(DL_SHAPE(2, 5, 6), -1, 1), 1, 1);
  add_in(c, uni(DL_SHAPE(18, 6), -0.5, 0.5), 1, 1);
  add_in(c, uni(DL_SHAPE(18), -0.5, 0.5), 1, 1);
  add_in(c, uni(DL_SHAPE(6, 6), -0.5, 0.5), 1, 1);
  add_in(c, uni(DL_SHAPE(6), -0.5, 0.5), 1, 1);
  if (s->self) /* the u8 mask (i + 1) % 3 leaves every row a key (no all-masked row: NaN) */
    add_in(c, s->mask == 1 ? uni(DL_SHAPE(4, 4), -1, 1) : s->mask == 2 ? ints(DL_U8, DL_SHAPE(4, 4), 1, 1, 3) : NULL,
           0, 0);
}
static void test_rnn_attention(void) {
  size_t k;
  NEED_GPU();
  for (k = 0; k < sizeof rnn_specs / sizeof *rnn_specs; k++) check_case(build_rnn, &rnn_specs[k]);
  for (k = 0; k < sizeof mha_specs / sizeof *mha_specs; k++) check_case(build_mha, &mha_specs[k]);
  print_worst("rnn, lstm, gru, multi_head_attention");
}

/* >>the caching allocator ------------------------------------------------------------ */

static void alloc_body(const void *arg) {
  const size_t n = (size_t)3 << 20, cls = dl_gpu_round(n);
  dl_gpu_stats s0, s1, s2, s3, s4;
  void *p = NULL, *q = NULL;
  dl_tensor *x, *g, *h;
  int64_t i;
  (void)arg;
  CHECK(dl_gpu_sync(gpu) == DL_OK);
  if (dl_gpu_alloc(gpu, &p, n) != DL_OK) fatal("dl_gpu_alloc");
  s0 = dl_gpu_get_stats(gpu);
  dl_gpu_free(gpu, p);
  s1 = dl_gpu_get_stats(gpu);
  CHECK(s1.in_use == s0.in_use - cls && s1.cached == s0.cached + cls && s1.frees == s0.frees + 1);
  if (dl_gpu_alloc(gpu, &q, n) != DL_OK) fatal("dl_gpu_alloc");
  s2 = dl_gpu_get_stats(gpu);
  CHECK_MSG(q == p, "the same size after a free gets another block");
  CHECK_MSG(s2.cache_hits == s1.cache_hits + 1 && s2.device_mallocs == s1.device_mallocs,
            "cache hits %llu -> %llu, device mallocs %llu -> %llu", (unsigned long long)s1.cache_hits,
            (unsigned long long)s2.cache_hits, (unsigned long long)s1.device_mallocs,
            (unsigned long long)s2.device_mallocs);
  CHECK(s2.cached == s1.cached - cls && s2.in_use == s0.in_use);
  dl_gpu_free(gpu, q);
  dl_gpu_release_cache(gpu);
  s3 = dl_gpu_get_stats(gpu);
  CHECK_MSG(s3.cached == 0 && s3.reserved == s3.in_use && s3.device_frees > s2.device_frees,
            "after dl_gpu_release_cache: %zu bytes cached, %zu reserved, %zu in use", s3.cached, s3.reserved,
            s3.in_use);
  /* after the release the same request is a new block from the device */
  if (dl_gpu_alloc(gpu, &p, n) != DL_OK) fatal("dl_gpu_alloc");
  s4 = dl_gpu_get_stats(gpu);
  CHECK(s4.device_mallocs == s3.device_mallocs + 1 && s4.cache_hits == s3.cache_hits);
  dl_gpu_free(gpu, p);
  /* the blocks are real memory: values make the round trip, new tensors are zero */
  x = as_dtype(uni(DL_SHAPE(1000), -1, 1), DL_F32);
  h = host(dev(x));
  CHECK(err_of(h, x) == 0 && !memcmp(h->data, x->data, 1000 * sizeof(float)));
  g = own(dl_gpu_tensor(gpu, DL_F64, DL_SHAPE(7, 3)));
  CHECK(g->device == DL_CUDA && g->dtype == DL_F64 && g->numel == 21);
  h = host(g);
  for (i = 0; i < h->numel; i++) CHECK(dl_f64(h)[i] == 0);
  CHECK(dl_gpu_sync(gpu) == DL_OK);
}

static void oom_body(const void *arg) {
  const size_t huge = (size_t)1 << 50;
  dl_gpu_stats s0, s1;
  void *p = NULL;
  dl_tensor *t;
  dl_status st;
  const char *msg;
  (void)arg;
  /* a cached block first: the failed request releases the cache and tries once more */
  if (dl_gpu_alloc(gpu, &p, (size_t)1 << 20) != DL_OK) fatal("dl_gpu_alloc");
  dl_gpu_free(gpu, p);
  s0 = dl_gpu_get_stats(gpu);
  CHECK(s0.cached > 0);
  dl_ctx_clear(&ctx);
  p = &p;
  st = dl_gpu_alloc(gpu, &p, huge);
  msg = dl_ctx_message(&ctx);
  CHECK_MSG(st == DL_ERR_NOMEM && ctx.status == DL_ERR_NOMEM, "dl_gpu_alloc of 2^50 bytes: %s, \"%s\"",
            dl_status_str(st), msg);
  CHECK(p == NULL);
  CHECK_MSG(strstr(msg, "1125899906842624") && strstr(msg, "in use") && strstr(msg, "cached") &&
                strstr(msg, "free of"),
            "the message lacks the figures: \"%s\"", msg);
  s1 = dl_gpu_get_stats(gpu);
  CHECK_MSG(s1.oom_releases == s0.oom_releases + 1 && s1.cached == 0 && s1.in_use == s0.in_use,
            "oom releases %llu -> %llu, cached %zu", (unsigned long long)s0.oom_releases,
            (unsigned long long)s1.oom_releases, s1.cached);
  printf("  an impossible request: \"%s\"\n", msg);
  /* a tensor of 2^40 floats (4 TiB) */
  dl_ctx_clear(&ctx);
  t = dl_gpu_tensor(gpu, DL_F32, DL_SHAPE((int64_t)1 << 20, (int64_t)1 << 20));
  msg = dl_ctx_message(&ctx);
  CHECK_MSG(t == NULL && ctx.status == DL_ERR_NOMEM, "dl_gpu_tensor of 4 TiB: %s, \"%s\"",
            dl_status_str(ctx.status), msg);
  if (t) own(t);
  CHECK_MSG(strstr(msg, "4398046511104") && strstr(msg, "free of"), "the message lacks the figures: \"%s\"", msg);
  dl_ctx_clear(&ctx);
  CHECK(dl_gpu_sync(gpu) == DL_OK);
}

static void test_allocator(void) {
  NEED_GPU();
  guarded(alloc_body, NULL, "caching allocator");
}
static void test_out_of_memory(void) {
  static const ew_arg after = {&ew_ops[0], 0};
  int k;
  NEED_GPU();
  guarded(oom_body, NULL, "out of device memory");
  /* the device still works: element-wise ops, GEMM, a reduction */
  for (k = 0; k < N_EW; k++)
    if (!strcmp(ew_ops[k].name, "mul")) {
      ew_arg a;
      a.op = &ew_ops[k];
      a.variant = 1;
      check_case(build_ew, &a);
    }
  check_case(build_ew, &after);
  check_case(build_mm, &mm_specs[MM_BATCHED]);
  check_case(build_red, &red_specs[0]);
  print_worst("after the failed allocations");
}

/* >>models ------------------------------------------------------------------------ */

static void roundtrip_body(const void *arg) {
  const dl_dtype dt = *(const dl_dtype *)arg;
  dl_model *m = own_model(dl_model_make(&ctx, &(dl_model_desc){.dtype = dt, .seed = 11}));
  dl_tensor *snap[32];
  dl_rng r = dl_rng_make(3);
  int i;
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 6, .out = 8});
  dl_batchnorm1d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 8});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 8, .out = 3});
  CHECK(dl_model_status(m) == DL_OK && m->nparams <= 32);
  if (dl_model_status(m) != DL_OK || m->nparams > 32 || dl_model_pack(m) != DL_OK) fatal("the model");
  /* buffers and the BatchNorm weight away from their initial constants */
  dl_tensor_rand_uniform(dl_model_tensor(m, "1.running_mean"), &r, -1, 1);
  dl_tensor_rand_uniform(dl_model_tensor(m, "1.running_var"), &r, 0.5, 2);
  dl_tensor_rand_uniform(dl_model_tensor(m, "1.weight"), &r, 0.5, 2);
  for (i = 0; i < m->nparams; i++) {
    const dl_tensor *t = &m->params[i]->t;
    snap[i] = own(dl_tensor_make(&ctx, t->dtype, t->ndim, t->shape));
    dl_tensor_copy(snap[i], t);
  }
  CHECK(dl_model_to_device(m, gpu) == DL_OK);
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    CHECK_MSG(p->t.device == DL_CUDA, "%s is on the host after dl_model_to_device", p->name);
    if (p->kind != DL_PARAM_BUFFER) CHECK_MSG(p->g.device == DL_CUDA, "%s's gradient is on the host", p->name);
    expect_close(p->name, dt, "value on the device", host(&p->t), snap[i], 0);
  }
  CHECK(dl_model_to_device(m, gpu) == DL_OK); /* already there: nothing to do */
  CHECK(dl_model_to_host(m) == DL_OK);
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    CHECK_MSG(p->t.device == DL_CPU && p->g.device == DL_CPU, "%s is not back on the host", p->name);
    CHECK_MSG(err_of(&p->t, snap[i]) == 0, "%s changed in the round trip", p->name);
    if (p->kind != DL_PARAM_BUFFER) {
      int64_t j;
      for (j = 0; j < p->g.numel; j++) CHECK(dl__get_at(&p->g, j) == 0);
    }
  }
  nruns++;
}
static void test_model_round_trip(void) {
  static const dl_dtype dts[2] = {DL_F32, DL_F64};
  NEED_GPU();
  guarded(roundtrip_body, &dts[0], "dl_model_to_device / dl_model_to_host (f32)");
  guarded(roundtrip_body, &dts[1], "dl_model_to_device / dl_model_to_host (f64)");
  print_worst("model round trips (exact)");
}

typedef struct train_arg {
  int cnn, adam;
  dl_dtype dt;
} train_arg;

static dl_model *build_net(dl_dtype dt, int cnn) {
  dl_model *m = own_model(dl_model_make(&ctx, &(dl_model_desc){.dtype = dt, .seed = 21}));
  if (cnn) { /* [N, 1, 8, 8] -> [N, 4, 8, 8] -> [N, 4, 4, 4] -> [N, 64] -> [N, 3] */
    dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 1, .out = 4, .kernel = 3, .padding = 1});
    dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
    dl_maxpool2d_make(m, NULL, NULL, &(dl_pool2d_desc){.kernel = 2});
    dl_flatten_make(m, NULL, NULL, 1);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 64, .out = 3});
  } else {
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 6, .out = 8});
    dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 8, .out = 3});
  }
  if (dl_model_status(m) != DL_OK || dl_model_pack(m) != DL_OK) fatal("the model");
  return m;
}
static dl_optim *make_optim(dl_model *m, int adam) {
  if (adam == 2) { /* LAMB: the trust ratio's norms are summed on the device */
    dl_lamb_cfg c = dl_lamb_defaults(0.02);
    c.weight_decay = 0.01;
    return own_optim(dl_optim_lamb(m, &c));
  }
  if (adam) {
    dl_adam_cfg c = dl_adam_defaults(0.01);
    return own_optim(dl_optim_adam(m, &c));
  } else {
    dl_sgd_cfg c = dl_sgd_defaults(0.1);
    c.momentum = 0.9;
    return own_optim(dl_optim_sgd(m, &c));
  }
}

/* Three steps on each device from the same model, batch and optimizer. */
static void train_body(const void *arg) {
  const train_arg *a = (const train_arg *)arg;
  const dl_dtype dt = a->dt;
  const double tol = dt == DL_F32 ? 1e-4 : 1e-10;
  dl_model *mc = build_net(dt, a->cnn), *mg = build_net(dt, a->cnn);
  dl_tensor *x = a->cnn ? nrm(DL_SHAPE(4, 1, 8, 8)) : nrm(DL_SHAPE(8, 6));
  dl_tensor *lab = ints(DL_I64, DL_SHAPE(x->shape[0]), 2, 1, 3), *xc = as_dtype(x, dt), *xg = dev(xc), *lg = dev(lab);
  dl_tensor *init = own(dl_tensor_make(&ctx, dt, DL_SHAPE(mc->pnumel))), pc, pg;
  dl_optim *oc, *og;
  const dl_step_desc clip = {.clip_value = 0.05, .clip_norm = 0.1, .l1 = 1e-4, .l2 = 1e-3};
  /* Adam: the global norm only (no parameter's own clip_norm: dlg_clip_multi's path), small enough to clip */
  const dl_step_desc gclip = {.clip_norm = 0.05};
  char name[64];
  int step;
  snprintf(name, sizeof name, "%s, %s", a->cnn ? "CNN" : "MLP",
           a->adam == 2 ? "LAMB" : a->adam ? "Adam" : "SGD momentum, clipped");
  CHECK(mc->pnumel == mg->pnumel && !memcmp(mc->pbuf, mg->pbuf, (size_t)mc->pnumel * dl_dtype_size(dt)));
  memcpy(init->data, mc->pbuf, (size_t)mc->pnumel * dl_dtype_size(dt));
  CHECK(dl_model_to_device(mg, gpu) == DL_OK);
  CHECK(mg->params[0]->t.device == DL_CUDA);
  oc = make_optim(mc, a->adam);
  og = make_optim(mg, a->adam); /* after the move: its state on the device */
  if (!a->adam) { /* the SGD runs clip and regularise too (dl_clip_grads, dl_regularize on the device) */
    CHECK(dl_model_set(mc, "*weight", DL_CLIP_NORM, 0.2) > 0 && dl_model_set(mg, "*weight", DL_CLIP_NORM, 0.2) > 0);
  }
  tapes_open();
  for (step = 0; step < 3; step++) {
    dl_tensor *lc = dl_t_cross_entropy(&tp_h, dl_model_forward(mc, &tp_h, xc), lab, 0, DL_REDUCE_MEAN);
    dl_tensor *ld = dl_t_cross_entropy(&tp_d, dl_model_forward(mg, &tp_d, xg), lg, 0, DL_REDUCE_MEAN);
    double vc = dl__get_at(lc, 0), vg = dl__get_at(host(ld), 0), nc, ng;
    nc = dl_train_step(oc, &tp_h, lc, a->adam == 1 ? &gclip : a->adam ? NULL : &clip);
    ng = dl_train_step(og, &tp_d, ld, a->adam == 1 ? &gclip : a->adam ? NULL : &clip);
    if (a->adam == 1) CHECK_MSG(nc > gclip.clip_norm, "%s step %d: norm %g, not clipped by %g", name, step, nc, gclip.clip_norm);
    CHECK_MSG(fabs(vg - vc) <= tol * fabs(vc), "%s (%s) step %d: loss %.17g on the GPU, %.17g on the CPU", name,
              dtn(dt), step, vg, vc);
    CHECK_MSG(fabs(ng - nc) <= tol * fabs(nc), "%s (%s) step %d: gradient norm %.17g on the GPU, %.17g on the CPU",
              name, dtn(dt), step, ng, nc);
    tapes_rewind();
  }
  drop_optim(og); /* a device optimizer goes before the model leaves the device */
  CHECK(dl_model_to_host(mg) == DL_OK);
  CHECK(mg->params[0]->t.device == DL_CPU);
  dl_tensor_wrap(&pc, &ctx, dt, DL_SHAPE(mc->pnumel), mc->pbuf);
  dl_tensor_wrap(&pg, &ctx, dt, DL_SHAPE(mg->pnumel), mg->pbuf);
  CHECK_MSG(err_of(&pc, init) > 1e-3, "%s: training did not change the parameters", name);
  expect_close(name, dt, "parameters after 3 steps", &pg, &pc, tol);
  nruns++;
}
static void test_training(void) {
  static train_arg args[12];
  static const char *const kinds[2][3] = {{"MLP SGD momentum", "MLP Adam", "MLP LAMB"},
                                          {"CNN SGD momentum", "CNN Adam", "CNN LAMB"}};
  int k;
  NEED_GPU();
  for (k = 0; k < 12; k++) {
    args[k].cnn = k / 6;
    args[k].adam = k / 2 % 3;
    args[k].dt = k & 1 ? DL_F64 : DL_F32;
    guarded(train_body, &args[k], kinds[args[k].cnn][args[k].adam]);
  }
  print_worst("training steps (MLP, CNN; SGD momentum, Adam, LAMB)");
}

/* What a training step asks of the device once warm (dl_gpu_get_counts: counted on the host, so the fake device
 * shows what a GPU would be asked): no cuDNN algorithm query or descriptor, no cudaMalloc, and no host wait
 * (dl_dist_train_step without a norm wanted: nothing is read back; the batch on the device, the labels on the
 * host, staged to the device without a wait).
 * The MLP and the CNN (convolution, pooling, linear), Adam. */
/* A run with what dl_run_step_async needs of one: its ctx and a progress that prints lines. */
static void async_run(dl_run *r) {
  memset(r, 0, sizeof *r);
  r->ctx = &ctx;
  dl_progress_init(&r->pg, &(dl_progress_desc){.stream = stdout, .mode = DL_PROGRESS_LINES, .every_frac = -1,
                                               .every_s = -1});
  dl_progress_begin(&r->pg, 1);
}
typedef struct counts_arg {
  int cnn;
  int deterministic;
} counts_arg;
static void counts_body(const void *arg) {
  const counts_arg *a = (const counts_arg *)arg;
  dl_model *m = build_net(DL_F32, a->cnn);
  dl_tensor *x = a->cnn ? nrm(DL_SHAPE(4, 1, 8, 8)) : nrm(DL_SHAPE(8, 6)), *xg, *lg;
  dl_tensor *lab = ints(DL_I64, DL_SHAPE(x->shape[0]), 2, 1, 3);
  dl_optim *o;
  dl_gpu_counts c0 = dl_gpu_get_counts(gpu), c1;
  double first = 0, want_loss = 0;
  int64_t want_correct = 0;
  dl_run r; /* what dl_run_step_async needs of a run: its ctx and progress */
  int step;
  async_run(&r);
  CHECK(dl_model_to_device(m, gpu) == DL_OK);
  o = make_optim(m, 1);
  xg = dev(as_dtype(x, DL_F32));
  lg = lab; /* on the host, as the examples' batches give them: device labels are read back for the range check */
  dl_gpu_set_deterministic(gpu, a->deterministic);
  tapes_open();
  for (step = 0; step < 6; step++) {
    dl_tensor *l;
    if (step == 2) c0 = dl_gpu_get_counts(gpu);
    {
      dl_tensor *logits = dl_model_forward(m, &tp_d, xg);
      l = dl_t_cross_entropy(&tp_d, logits, lg, 0, DL_REDUCE_MEAN);
      { /* the values dl_run_step_async must count, read here the slow way (and not counted as the step's) */
        dl_gpu_counts cw = dl_gpu_get_counts(gpu);
        want_loss += dl_item(l) * (double)x->shape[0];
        want_correct += dl_accuracy_count(host(logits), lab);
        if (step >= 2) {
          c0.syncs += dl_gpu_get_counts(gpu).syncs - cw.syncs;
          c0.copies += dl_gpu_get_counts(gpu).copies - cw.copies;
        }
      }
      dl_run_step_async(&r, x->shape[0], l, logits, lg);
    }
    if (step == 0) { /* the norm read back: a wait */
      first = dl_train_step(o, &tp_d, l, NULL);
    } else {
      CHECK(dl_dist_train_step(NULL, o, &tp_d, l, NULL, NULL) == DL_OK);
    }
    dl_tape_rewind(&tp_d);
  }
  c1 = dl_gpu_get_counts(gpu);
  CHECK_MSG(r.step == 6 && r.pg.samples == 5 * x->shape[0], "dl_run_step_async: %lld steps, %lld samples in the "
            "progress (6 steps; 5 shown, one pending)", (long long)r.step, (long long)r.pg.samples);
  dl_run_flush(&r);
  CHECK(r.step == 6 && r.pg.samples == 6 * x->shape[0] && !r.dev->pending);
  CHECK_MSG(fabs(r.pg.loss_sum - want_loss) <= 1e-12 * fabs(want_loss) && r.pg.correct == want_correct &&
                r.pg.acc_samples == 6 * x->shape[0],
            "dl_run_step_async: loss sum %.17g, %lld correct; read on the host: %.17g, %lld", r.pg.loss_sum,
            (long long)r.pg.correct, want_loss, (long long)want_correct);
  dl_run_free(&r);
  {
    const double k = 4; /* steps counted */
    printf("  per step (%s, %s): %.1f launches, %.1f GEMMs, %.1f host waits, %.1f copies, %.1f fills, %.1f cudaMalloc, "
           "%.1f cuDNN queries, %.1f descriptors\n", a->cnn ? "CNN" : "MLP", a->deterministic ? "deterministic" : "fastest",
           (double)(c1.launches - c0.launches) / k, (double)(c1.blas - c0.blas) / k, (double)(c1.syncs - c0.syncs) / k,
           (double)(c1.copies - c0.copies) / k, (double)(c1.memsets - c0.memsets) / k,
           (double)(c1.mallocs - c0.mallocs) / k, (double)(c1.dnn_queries - c0.dnn_queries) / k,
           (double)(c1.dnn_descriptors - c0.dnn_descriptors) / k);
  }
  CHECK_MSG(c1.dnn_queries == c0.dnn_queries, "%lld cuDNN algorithm queries in 4 warm steps",
            (long long)(c1.dnn_queries - c0.dnn_queries));
  CHECK_MSG(c1.dnn_descriptors == c0.dnn_descriptors, "%lld cuDNN descriptors made in 4 warm steps",
            (long long)(c1.dnn_descriptors - c0.dnn_descriptors));
  CHECK_MSG(c1.mallocs == c0.mallocs, "%lld cudaMalloc in 4 warm steps", (long long)(c1.mallocs - c0.mallocs));
  CHECK_MSG(c1.syncs == c0.syncs, "%lld host waits in 4 warm steps (none: nothing is read back)",
            (long long)(c1.syncs - c0.syncs));
  CHECK(c1.launches > c0.launches);
  if (a->cnn) CHECK(c0.dnn_queries >= 3 && c0.dnn_descriptors >= 4); /* the first step chose the algorithms */
  { /* clipping by the global norm without the norm wanted: three launches whatever the parameter count, no wait
     * (dlg_clip_multi); the gradients scaled as dl_clip_grads (which reads the norm back: one wait) scales them */
    const dl_step_desc cd = {.clip_norm = 1e-3}, none = {.clip_norm = 0};
    dl_gpu_counts u0, u1;
    dl_tensor *gw = NULL, *gn;
    double norm;
    dl_backward(&tp_d, dl_t_cross_entropy(&tp_d, dl_model_forward(m, &tp_d, xg), lg, 0, DL_REDUCE_MEAN), NULL);
    gn = own(dl_tensor_make(&ctx, DL_F32, DL_SHAPE(m->params[0]->g.numel)));
    u0 = dl_gpu_get_counts(gpu);
    CHECK(isnan(dl__clip_grads(m, &cd, 0)));
    u1 = dl_gpu_get_counts(gpu);
    CHECK_MSG(u1.launches - u0.launches == 3 && u1.syncs == u0.syncs && u1.copies - u0.copies == 1,
              "clipping by norm, %d parameters, norm not wanted: %lld launches (3), %lld waits (0), %lld copies (1)",
              m->nparams, (long long)(u1.launches - u0.launches), (long long)(u1.syncs - u0.syncs),
              (long long)(u1.copies - u0.copies));
    gw = host(&m->params[0]->g);
    memcpy(gn->data, gw->data, (size_t)gn->numel * sizeof(float));
    u0 = dl_gpu_get_counts(gpu);
    norm = dl_clip_grads(m, &none); /* the norm only (clipped to 1e-3 / (1 + 1e-6 / norm) before), nothing scaled */
    u1 = dl_gpu_get_counts(gpu);
    CHECK_MSG(fabs(norm - 1e-3) <= 1e-8 && u1.syncs - u0.syncs == 1,
              "dl_clip_grads after clipping to 1e-3: norm %.17g, %lld waits (1)", norm, (long long)(u1.syncs - u0.syncs));
    CHECK(!memcmp(host(&m->params[0]->g)->data, gn->data, (size_t)gn->numel * sizeof(float)));
    dl_model_zero_grad(m);
    dl_tape_rewind(&tp_d);
  }
  { /* Adam's update of every parameter: one launch (dlg_adam_multi) */
    dl_gpu_counts u0, u1;
    dl_backward(&tp_d, dl_t_cross_entropy(&tp_d, dl_model_forward(m, &tp_d, xg), lg, 0, DL_REDUCE_MEAN), NULL);
    u0 = dl_gpu_get_counts(gpu);
    dl_optim_step(o);
    u1 = dl_gpu_get_counts(gpu);
    CHECK_MSG(u1.launches - u0.launches == 1 && u1.syncs == u0.syncs,
              "dl_optim_step (Adam, %d parameters): %lld launches, %lld waits", m->nparams,
              (long long)(u1.launches - u0.launches), (long long)(u1.syncs - u0.syncs));
    dl_model_zero_grad(m);
    dl_tape_rewind(&tp_d);
  }
  CHECK(first == first);
  dl_gpu_set_deterministic(gpu, 0);
  nruns++;
}
static void test_step_counts(void) {
  static const counts_arg args[3] = {{0, 0}, {1, 0}, {1, 1}};
  NEED_GPU();
  guarded(counts_body, &args[0], "MLP step counts");
  guarded(counts_body, &args[1], "CNN step counts");
  guarded(counts_body, &args[2], "CNN step counts (deterministic)");
}

/* CUDA graphs (dl_gpu_graph_begin / _end): the same training run twice on the device, step by step and recorded
 * into graphs, gives the same bits (losses summed by dl_run_step_async, every parameter): each step a new batch
 * copied into the same device tensor and new labels, the learning rate changed half way, clipping by the global
 * norm; on the fake device the graphs are captured and replayed as a GPU would (src_gpu/fake/cuda_fake.h). Once
 * warm a step without dropout replays what it captured: no capture, no single launch, no GEMM, no wait, no
 * allocation, one graph launch and one copy (its host bytes) per segment (the step is cut at the progress
 * line's event). With dropout too: each step's seed reaches the kernel as bytes, not as an argument. With
 * the other optimizers (SGD with Nesterov momentum, centred RMSprop with momentum, Adagrad with lr_decay, Lion,
 * LAMB) the learning rate changes every step, as under a schedule: their scalars too travel as bytes while
 * recording, so a warm step still captures nothing. */
typedef struct graph_arg {
  int cnn, dropout, opt; /* opt 0: Adam (the learning rate changed once); 1-5: SGD, RMSprop, Adagrad, Lion, LAMB */
} graph_arg;
static const char *const graph_opt_names[6] = {"Adam", "SGD", "RMSprop", "Adagrad", "Lion", "LAMB"};
static dl_optim *graph_optim(dl_model *m, int opt) {
  switch (opt) {
  case 1: {
    dl_sgd_cfg c = dl_sgd_defaults(0.05);
    c.momentum = 0.9;
    c.nesterov = 1;
    c.weight_decay = 1e-3;
    return own_optim(dl_optim_sgd(m, &c));
  }
  case 2: {
    dl_rmsprop_cfg c = dl_rmsprop_defaults(0.01);
    c.centered = 1;
    c.momentum = 0.5;
    return own_optim(dl_optim_rmsprop(m, &c));
  }
  case 3: {
    dl_adagrad_cfg c = dl_adagrad_defaults(0.05);
    c.lr_decay = 0.01;
    return own_optim(dl_optim_adagrad(m, &c));
  }
  case 4: {
    dl_lion_cfg c = dl_lion_defaults(0.001);
    c.weight_decay = 0.01;
    return own_optim(dl_optim_lion(m, &c));
  }
  case 5: return make_optim(m, 2);
  default: return make_optim(m, 1);
  }
}
static double graph_run(const graph_arg *a, int graphs, dl_model **mout, dl_gpu_counts *warm) {
  const uint64_t seed0 = seed_next; /* both runs draw the same batches */
  dl_model *m;
  dl_optim *o;
  dl_tape tp;
  dl_run r;
  dl_gpu_counts c0;
  const dl_step_desc sd = {.clip_norm = 0.5};
  dl_tensor *xg = dev(as_dtype(a->cnn ? nrm(DL_SHAPE(4, 1, 8, 8)) : nrm(DL_SHAPE(8, 6)), DL_F32));
  const int64_t n = xg->shape[0];
  int step;
  async_run(&r);
  if (!a->dropout) m = build_net(DL_F32, a->cnn);
  else { /* the MLP with dropout after its hidden layer */
    m = own_model(dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 21}));
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 6, .out = 8});
    dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
    dl_dropout_make(m, NULL, NULL, 0.3);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 8, .out = 3});
    if (dl_model_status(m) != DL_OK || dl_model_pack(m) != DL_OK) fatal("the model");
  }
  CHECK(dl_model_to_device(m, gpu) == DL_OK);
  o = graph_optim(m, a->opt);
  if (dl_tape_init(&tp, &ctx, 0) != DL_OK || dl_tape_use_gpu(&tp, gpu) != DL_OK) fatal("the tape");
  c0 = dl_gpu_get_counts(gpu);
  for (step = 0; step < 8; step++) {
    dl_tensor *xs = as_dtype(a->cnn ? nrm(DL_SHAPE(4, 1, 8, 8)) : nrm(DL_SHAPE(8, 6)), DL_F32);
    dl_tensor *lab = ints(DL_I64, DL_SHAPE(n), 2, 1, 3), *logits, *l;
    int64_t i;
    for (i = 0; i < n; i++) ((int64_t *)lab->data)[i] = (i + step) % 3;
    if (step == 3) c0 = dl_gpu_get_counts(gpu);
    if (a->opt) dl_optim_set_lr(o, o->lr * 0.9); /* a schedule: a new learning rate every step */
    else if (step == 4) dl_optim_set_lr(o, 0.003);
    if (graphs) CHECK(dl_gpu_graph_begin(gpu) == DL_OK);
    CHECK(dl_copy_to(xg, xs) == DL_OK); /* the step's batch into the same device tensor */
    logits = dl_model_forward(m, &tp, xg);
    l = dl_t_cross_entropy(&tp, logits, lab, 0, DL_REDUCE_MEAN);
    dl_run_step_async(&r, n, l, logits, lab);
    dl_train_step_nowait(o, &tp, l, &sd);
    if (graphs) CHECK(dl_gpu_graph_end(gpu) == DL_OK);
    dl_tape_rewind(&tp);
  }
  *warm = dl_gpu_get_counts(gpu);
  if (!graphs) seed_next = seed0;
  warm->launches -= c0.launches;
  warm->blas -= c0.blas;
  warm->syncs -= c0.syncs;
  warm->mallocs -= c0.mallocs;
  warm->copies -= c0.copies;
  warm->memsets -= c0.memsets;
  warm->graph_launches -= c0.graph_launches;
  warm->graph_builds -= c0.graph_builds;
  dl_run_flush(&r);
  dl_run_free(&r);
  dl_tape_free(&tp);
  drop_optim(o);
  CHECK(dl_model_to_host(m) == DL_OK);
  *mout = m;
  return r.pg.loss_sum;
}
static void graph_body(const void *arg) {
  const graph_arg *a = (const graph_arg *)arg;
  dl_model *m0, *m1;
  dl_gpu_counts w0, w1;
  char name[64];
  snprintf(name, sizeof name, "%s, %s", a->dropout ? "MLP with dropout" : a->cnn ? "CNN" : "MLP",
           graph_opt_names[a->opt]);
  const double l0 = graph_run(a, 0, &m0, &w0), l1 = graph_run(a, 1, &m1, &w1);
  CHECK_MSG(l0 == l1 && l0 > 0, "%s: loss sum %.17g recorded into graphs, %.17g step by step", name, l1, l0);
  CHECK_MSG(m0->pnumel == m1->pnumel && !memcmp(m0->pbuf, m1->pbuf, (size_t)m0->pnumel * sizeof(float)),
            "%s: the parameters after 8 steps differ with graphs", name);
  printf("  per warm step with graphs (%s): %.1f graph launches, %.1f captures, %.1f launches, %.1f GEMMs, "
         "%.1f waits, %.1f copies, %.1f fills (without: %.1f launches, %.1f GEMMs, %.1f copies, %.1f fills)\n", name,
         w1.graph_launches / 5.0, w1.graph_builds / 5.0, w1.launches / 5.0, w1.blas / 5.0, w1.syncs / 5.0,
         w1.copies / 5.0, w1.memsets / 5.0, w0.launches / 5.0, w0.blas / 5.0, w0.copies / 5.0, w0.memsets / 5.0);
  CHECK(w0.graph_launches == 0 && w0.graph_builds == 0 && w0.launches > 0);
  CHECK_MSG(w1.syncs == 0 && w1.mallocs == 0, "%s with graphs: %lld waits, %lld cudaMalloc in 5 warm steps", name,
            (long long)w1.syncs, (long long)w1.mallocs);
  if (!a->dropout) {
    CHECK_MSG(w1.graph_builds == 0 && w1.launches == 0 && w1.blas == 0 && w1.memsets == 0,
              "%s with graphs, 5 warm steps: %lld captures, %lld launches, %lld GEMMs, %lld fills (all 0: replays)",
              name, (long long)w1.graph_builds, (long long)w1.launches, (long long)w1.blas, (long long)w1.memsets);
    CHECK_MSG(w1.graph_launches >= 5 && w1.graph_launches <= 10 && w1.copies == w1.graph_launches,
              "%s with graphs, 5 warm steps: %lld graph launches, %lld copies (one or two segments a step, one "
              "copy each)", name, (long long)w1.graph_launches, (long long)w1.copies);
  } else { /* a new seed each step travels as bytes: the same graphs replayed */
    CHECK_MSG(w1.graph_builds == 0 && w1.launches == 0 && w1.graph_launches >= 5,
              "%s with graphs, 5 warm steps: %lld captures, %lld launches, %lld graph launches (a new seed is no new "
              "work)", name, (long long)w1.graph_builds, (long long)w1.launches, (long long)w1.graph_launches);
  }
  nruns++;
}
/* A recorded call that fails (a GEMM cuBLAS refuses: lda 1 for a 2-row A) fails where its work is issued, with
 * cuBLAS's message and not a stand-in: at dl_gpu_graph_end, or at the copy to the host that flushed it; a step
 * left without dl_gpu_graph_end (a longjmp out of it) does not keep the device recording. */
static void graph_errors_body(const void *arg) {
#ifdef DL_USE_CUDA /* (the dlg_* calls; without it test_graphs skips before this) */
  dlg_handle *h = dl__gpu_handle(gpu);
  dl_tensor *a = dev(as_dtype(nrm(DL_SHAPE(2, 2)), DL_F32)), *c = dev(as_dtype(nrm(DL_SHAPE(2, 2)), DL_F32));
  float back[4];
  (void)arg;
  CHECK(dl_gpu_graph_begin(gpu) == DL_OK);
  CHECK(dlg_gemm(h, DLG_F32, 0, 0, 2, 2, 2, 1.0, a->data, 1, a->data, 2, 0.0, c->data, 2) == DLG_OK); /* recorded */
  CHECK(dl_gpu_graph_end(gpu) == DL_ERR_NO_DEVICE);
  CHECK_MSG(strstr(dl_ctx_message(&ctx), "cuBLAS") != NULL, "the failure at dl_gpu_graph_end: %s", dl_ctx_message(&ctx));
  CHECK(dl_gpu_graph_begin(gpu) == DL_OK);
  CHECK(dlg_gemm(h, DLG_F32, 0, 0, 2, 2, 2, 1.0, a->data, 1, a->data, 2, 0.0, c->data, 2) == DLG_OK);
  CHECK(dlg_copy(h, back, c->data, sizeof back, DLG_D2H) == DLG_ERR); /* the copy flushes the failing GEMM */
  CHECK_MSG(strstr(dlg_message(h), "cuBLAS") != NULL, "the failure at the copy: %s", dlg_message(h));
  CHECK(dl_gpu_graph_end(gpu) == DL_OK); /* reported already */
  CHECK(dl_gpu_graph_begin(gpu) == DL_OK);
  CHECK(dlg_gemm(h, DLG_F32, 0, 0, 2, 2, 2, 1.0, a->data, 2, a->data, 2, 0.0, c->data, 2) == DLG_OK);
  CHECK(dl_gpu_graph_begin(gpu) == DL_OK); /* no end: the step's work issued, a new step */
  CHECK(dlg_graph_recording(h));
  CHECK(dl_gpu_graph_end(gpu) == DL_OK && !dlg_graph_recording(h));
  CHECK(dlg_copy(h, back, c->data, sizeof back, DLG_D2H) == DLG_OK && back[0] == back[0]);
  nruns++;
#else
  (void)arg;
#endif
}
static void test_graphs(void) {
  static const graph_arg args[8] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 0, 2}, {0, 0, 3}, {0, 0, 4}, {0, 0, 5}};
  int k;
  NEED_GPU();
  guarded(graph_body, &args[0], "MLP with CUDA graphs");
  guarded(graph_body, &args[1], "CNN with CUDA graphs");
  guarded(graph_body, &args[2], "MLP with dropout, CUDA graphs");
  for (k = 3; k < 8; k++) guarded(graph_body, &args[k], graph_opt_names[args[k].opt]);
  guarded(graph_errors_body, NULL, "failures of recorded work");
}

/* Evaluation on a device tape: under no-grad a Sequential's children alternate between the tape's two banks of
 * device memory, so the forward holds about two layers' outputs instead of all of them (layers.h,
 * dl__lay_seq_nograd_dev). The logits are the grad-mode forward's bit for bit, through children that return a
 * view of their input (Dropout in eval mode, Flatten of a 2-D input: their input must not be given back), a
 * nested Sequential, and two forwards on one tape without a rewind (the first one's output stays intact). */
/* A Module that keeps its output for a later one (a skip connection held in its state): such a Sequential runs
 * as always under no-grad, its memory not given back early. */
static dl_tensor *eval_keep(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  dl_tensor **slot = (dl_tensor **)l->user;
  return *slot = dl_t_relu(tp, x);
}
static dl_tensor *eval_add_kept(dl_layer *l, dl_tape *tp, dl_tensor *x) {
  return dl_t_add(tp, x, *(dl_tensor **)l->user);
}
static void eval_skip_case(void) {
  static dl_tensor *kept;
  const int64_t W = 64;
  dl_model *m = own_model(dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 6}));
  dl_tensor *x = dev(as_dtype(nrm(DL_SHAPE(512, W)), DL_F32)), *hg;
  dl_tape tg, tn;
  int k;
  dl_module_make(m, NULL, "keep", eval_keep, &kept);
  for (k = 0; k < 3; k++) dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = W, .out = W});
  dl_module_make(m, NULL, "add", eval_add_kept, &kept);
  if (dl_model_status(m) != DL_OK || dl_model_pack(m) != DL_OK) fatal("the model");
  CHECK(dl_model_to_device(m, gpu) == DL_OK);
  dl_model_train(m, 0);
  if (dl_tape_init(&tg, &ctx, 0) != DL_OK || dl_tape_use_gpu(&tg, gpu) != DL_OK) fatal("the tape");
  if (dl_tape_init(&tn, &ctx, 0) != DL_OK || dl_tape_use_gpu(&tn, gpu) != DL_OK) fatal("the tape");
  hg = host(dl_model_forward(m, &tg, x));
  dl_no_grad_begin(&tn);
  CHECK_MSG(!memcmp(hg->data, host(dl_model_forward(m, &tn, x))->data, (size_t)hg->numel * sizeof(float)),
            "a Sequential whose Module keeps an output for a later one: no-grad logits differ");
  dl_no_grad_end(&tn);
  dl_tape_free(&tg);
  dl_tape_free(&tn);
}
static void eval_mem_body(const void *arg) {
  const int64_t N = 2048, W = 256; /* each hidden output 2 MiB */
  dl_model *m = own_model(dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 5}));
  dl_layer *inner;
  dl_tensor *x = dev(as_dtype(nrm(DL_SHAPE(N, 16)), DL_F32)), *yg, *yn, *yn2, *hg;
  dl_tape tg, tn;
  dl_gpu_stats s0, s1, s2;
  size_t grad_bytes, nograd_bytes;
  (void)arg;
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 16, .out = W});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_dropout_make(m, NULL, NULL, 0.5);
  dl_flatten_make(m, NULL, NULL, 1);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = W, .out = W});
  inner = dl_sequential_make(m, NULL, "inner");
  dl_act_make(m, inner, NULL, DL_ACT_TANH, 0);
  dl_linear_make(m, inner, NULL, &(dl_linear_desc){.in = W, .out = W});
  dl_act_make(m, inner, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = W, .out = W});
  dl_act_make(m, NULL, NULL, DL_ACT_GELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = W, .out = 10});
  if (dl_model_status(m) != DL_OK || dl_model_pack(m) != DL_OK) fatal("the model");
  CHECK(dl_model_to_device(m, gpu) == DL_OK);
  dl_model_train(m, 0);
  if (dl_tape_init(&tg, &ctx, 0) != DL_OK || dl_tape_use_gpu(&tg, gpu) != DL_OK) fatal("the tape");
  if (dl_tape_init(&tn, &ctx, 0) != DL_OK || dl_tape_use_gpu(&tn, gpu) != DL_OK) fatal("the tape");
  s0 = dl_gpu_get_stats(gpu);
  yg = dl_model_forward(m, &tg, x); /* grad mode: every output kept for the backward */
  s1 = dl_gpu_get_stats(gpu);
  dl_no_grad_begin(&tn);
  yn = dl_model_forward(m, &tn, x);
  s2 = dl_gpu_get_stats(gpu);
  grad_bytes = s1.in_use - s0.in_use;
  nograd_bytes = s2.in_use - s1.in_use;
  { /* the first step on a tape holds what it asked for (blocks of the requests' sizes), not up to twice that */
    const size_t asked = ((const dl__gpu_tapemem *)tg.dev)->bank[0].step;
    CHECK_MSG(grad_bytes <= asked + asked / 16 + ((size_t)1 << 20),
              "a first forward on a fresh device tape: %zu bytes in use for %zu asked", grad_bytes, asked);
  }
  hg = host(yg);
  CHECK_MSG(!memcmp(hg->data, host(yn)->data, (size_t)hg->numel * sizeof(float)),
            "the no-grad forward's logits differ from the grad-mode forward's");
  yn2 = dl_model_forward(m, &tn, x); /* a second forward on the same tape: the first output stays */
  CHECK_MSG(!memcmp(hg->data, host(yn)->data, (size_t)hg->numel * sizeof(float)) &&
                !memcmp(hg->data, host(yn2)->data, (size_t)hg->numel * sizeof(float)),
            "a second no-grad forward on the tape changed the first one's output, or differs");
  dl_no_grad_end(&tn);
  printf("  evaluation of a 10-layer MLP, batch %lld (hidden outputs 2 MiB): device tape %.1f MiB with gradients "
         "on, %.1f MiB under no-grad\n", (long long)N, grad_bytes / 1048576.0, nograd_bytes / 1048576.0);
  CHECK_MSG(nograd_bytes * 2 <= grad_bytes && nograd_bytes <= (size_t)10 << 20,
            "device memory of the forward: %zu bytes under no-grad, %zu with gradients on (want at most half, "
            "and at most 10 MiB)", nograd_bytes, grad_bytes);
  dl_tape_free(&tg);
  dl_tape_free(&tn);
  eval_skip_case();
  nruns++;
}
static void test_eval_memory(void) {
  NEED_GPU();
  guarded(eval_mem_body, NULL, "no-grad forward memory");
}

/* dl_batcher_to_device: batches made on the device are the host batcher's bit for bit (u8 through the table,
 * f32 and f64 through multiply-add, a subset's row map, a short last batch), over two epochs, labels on the host;
 * what only the host does is refused with a status, the batcher left as it was. */
static void batcher_body(const void *arg) {
  static const dl_dtype xdts[3] = {DL_U8, DL_F32, DL_F64};
  const dl_dtype xdt = xdts[*(const int *)arg];
  const dl_dtype bdt = xdt == DL_F64 ? DL_F64 : DL_F32;
  const int64_t N = 37, xs[4] = {N, 2, 3, 5};
  dl_dataset ds;
  dl_batcher bh, bd;
  dl_batcher_desc desc;
  int64_t i, sub[29];
  int e;
  memset(&ds, 0, sizeof ds);
  memset(&desc, 0, sizeof desc);
  ds.x = own(dl_tensor_make(&ctx, xdt, 4, xs));
  ds.y = ints(DL_I64, DL_SHAPE(N), 3, 1, 10);
  for (i = 0; i < ds.x->numel; i++) dl__set_at(ds.x, i, xdt == DL_U8 ? (double)((i * 37) % 256) : sin((double)i) * 3);
  for (i = 0; i < 29; i++) sub[i] = (i * 5) % N; /* a subset: sample k is row sub[k] */
  ds.n = 29;
  ds.index = sub;
  ds.ctx = &ctx;
  desc.batch_size = 8;
  desc.dtype = bdt;
  desc.shuffle.seed = 11;
  desc.norm = DL_NORM_STANDARDIZE;
  desc.mean = 0.25;
  desc.std = 0.75;
  CHECK(dl_batcher_make(&ctx, &bh, &ds, &desc) == DL_OK && dl_batcher_make(&ctx, &bd, &ds, &desc) == DL_OK);
  CHECK(dl_batcher_to_device(&bd, gpu) == DL_OK && bd.gpu == gpu);
  for (e = 0; e < 2; e++) {
    dl_batch a, b;
    int64_t nb = 0;
    while (dl_batcher_next(&bh, &a)) {
      dl_tensor *bx;
      CHECK(dl_batcher_next(&bd, &b) == 1);
      CHECK(b.x->device == DL_CUDA && b.y->device == DL_CPU && b.size == a.size && b.epoch == a.epoch);
      bx = host(b.x);
      CHECK_MSG(dl_tensor_same_shape(bx, a.x) && !memcmp(bx->data, a.x->data, (size_t)a.x->numel * dl_dtype_size(bdt)),
                "%s batch %lld of epoch %d: the device's x differs from the host's", dl_dtype_name(xdt), (long long)nb, e);
      CHECK(!memcmp(b.y->data, a.y->data, (size_t)a.y->numel * sizeof(int64_t)));
      nb++;
    }
    CHECK(nb == 4 && dl_batcher_next(&bd, &b) == 0);
  }
  dl_batcher_free(&bd);
  dl_batcher_free(&bh);
  if (xdt == DL_U8) { /* augmentation is the host's: refused, nothing changed */
    dl_augment_desc aug;
    memset(&aug, 0, sizeof aug);
    aug.hflip = 1;
    desc.augment = &aug;
    ds.x = own(dl_tensor_make(&ctx, xdt, 4, xs));
    CHECK(dl_batcher_make(&ctx, &bd, &ds, &desc) == DL_OK);
    CHECK(dl_batcher_to_device(&bd, gpu) == DL_ERR_UNSUPPORTED && !bd.gpu && !bd.dx);
    CHECK_MSG(strstr(dl_ctx_message(&ctx), "dl_batcher_to_device") && strstr(dl_ctx_message(&ctx), "augmented"),
              "message: %s", dl_ctx_message(&ctx));
    dl_ctx_clear(&ctx);
    dl_batcher_free(&bd);
  }
  nruns++;
}
static void test_batcher(void) {
  static const int k[3] = {0, 1, 2};
  NEED_GPU();
  guarded(batcher_body, &k[0], "dl_batcher_to_device (u8)");
  guarded(batcher_body, &k[1], "dl_batcher_to_device (f32)");
  guarded(batcher_body, &k[2], "dl_batcher_to_device (f64)");
}

int main(void) {
  dl_ctx_desc d;
  memset(&d, 0, sizeof d);
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  if (dl_gpu_open(&gpu, &ctx, 0) != DL_OK) {
    printf("SKIP test_gpu: no CUDA device (%s)\n", dl_ctx_message(&ctx));
    gpu = NULL;
    dl_ctx_clear(&ctx);
  } else {
    printf("  device: %s\n", dl_gpu_name(gpu));
  }
  RUN(test_elementwise_unary);
  RUN(test_elementwise_binary);
  RUN(test_matmul_linear);
  RUN(test_reductions_softmax);
  RUN(test_losses);
  RUN(test_embedding_dropout);
  RUN(test_conv_pool);
  RUN(test_norms);
  RUN(test_index_gather_pad);
  RUN(test_rnn_attention);
  RUN(test_allocator);
  RUN(test_out_of_memory);
  RUN(test_model_round_trip);
  RUN(test_training);
  RUN(test_step_counts);
  RUN(test_graphs);
  RUN(test_eval_memory);
  RUN(test_batcher);
  if (gpu) {
    dl_gpu_stats s = dl_gpu_get_stats(gpu);
    printf("  device memory: peak %.1f MiB in use, %.1f MiB reserved; %llu allocations, %llu from the cache\n",
           s.peak_in_use / 1048576.0, s.peak_reserved / 1048576.0, (unsigned long long)s.allocs,
           (unsigned long long)s.cache_hits);
    dl_gpu_close(gpu);
  }
  return harness_finish();
}
