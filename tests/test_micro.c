/* tests/test_micro.c - dl/micro.h (the firmware's inference runtime) and
 * dl/export.h (a trained dl_model as a micro model, f32 and int8).
 *
 * The f32 micro model must give what dl_model_forward gives in eval mode
 * (batch norm folded, ReLU fused, pooling, residuals); the int8 one must
 * stay close to it; requantisation is checked against exact arithmetic;
 * every damaged plan, short arena and wrong input is a status, never a
 * fault; a run on a static arena calls no allocator; the written C source
 * compiles and gives the in-memory model's bytes (the firmware test,
 * examples/firmware/, runs it on a Cortex-M under QEMU). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
static long micro_allocs; /* allocator calls through the library's hooks */
static void *micro_malloc(size_t n) { micro_allocs++; return malloc(n); }
static void *micro_realloc(void *p, size_t n) { micro_allocs++; return realloc(p, n); }
static void micro_free(void *p) { if (p) micro_allocs++; free(p); }
#define DL_MALLOC(n, u) ((void)(u), micro_malloc(n))
#define DL_REALLOC(p, n, u) ((void)(u), micro_realloc((p), (n)))
#define DL_FREE(p, u) ((void)(u), micro_free(p))
#include "dl.h"
#include "harness.h"

static dl_ctx ctx;

/* Random weights (wider than the default init) and batch-norm statistics,
 * so that folding and the ranges are exercised. */
static void randomize(dl_model *m, uint64_t seed) {
  dl_rng rng = dl_rng_make(seed);
  int i;
  for (i = 0; i < m->nparams; i++) {
    dl_param *p = m->params[i];
    int64_t k;
    if (p->t.dtype != DL_F32) continue;
    for (k = 0; k < p->t.numel; k++) {
      float *v = (float *)p->t.data + k;
      double u = dl_rng_uniform(&rng);
      if (strstr(p->name, "running_var")) *v = (float)(0.5 + u);
      else if (strstr(p->name, "running_mean")) *v = (float)(u - 0.5);
      else if (strstr(p->name, ".weight") && p->t.ndim == 1) *v = (float)(0.5 + u); /* BN gamma */
      else *v = (float)(*v * 1.5 + (u - 0.5) * 0.02);
    }
  }
}

/* Pixels -> the model's f32 input as the micro table maps them. */
static dl_tensor *input_of(const dl_micro_model *q, const uint8_t *px, int64_t c, int64_t h, int64_t w) {
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, 4, (const int64_t[]){1, c, h, w});
  int64_t k;
  for (k = 0; k < c * h * w; k++) ((float *)x->data)[k] = q->lut[px[k]];
  return x;
}

/* max |micro f32 - dl_model_forward| / max |dl_model_forward| over n random images. */
static double f32_error(dl_model *m, const dl_micro_model *q, int64_t c, int64_t h, int64_t w, int n) {
  dl_tape tp;
  dl_rng rng = dl_rng_make(9);
  static unsigned char arena[1 << 20] __attribute__((aligned(16)));
  uint8_t *px = (uint8_t *)malloc((size_t)(c * h * w));
  double worst = 0;
  int i, k;
  dl_model_train(m, 0);
  dl_tape_init(&tp, &ctx, 0);
  for (i = 0; i < n; i++) {
    dl_tensor *x, *y;
    double scale = 0, err = 0;
    dlm_error e;
    for (k = 0; k < c * h * w; k++) px[k] = (uint8_t)dl_rng_below(&rng, 256);
    x = input_of(q, px, c, h, w);
    y = dl_model_forward(m, &tp, x);
    CHECK(q->m.arena_bytes <= sizeof arena);
    CHECK(dlm_run_u8(&q->m, arena, sizeof arena, px, (size_t)(c * h * w), &e) == DLM_OK);
    CHECK(dlm_output_count(&q->m) == y->numel);
    for (k = 0; k < y->numel; k++) {
      const double a = ((const float *)y->data)[k], b = dlm_output(&q->m, arena, k);
      scale = fabs(a) > scale ? fabs(a) : scale;
      err = fabs(a - b) > err ? fabs(a - b) : err;
    }
    if (scale > 0 && err / scale > worst) worst = err / scale;
    dl_tensor_free(x);
    dl_tape_rewind(&tp);
  }
  dl_tape_free(&tp);
  free(px);
  return worst;
}

/* A dataset of n random u8 images [n, c, h, w] with labels from the f32 model. */
static void random_images(dl_dataset *ds, int64_t n, int64_t c, int64_t h, int64_t w, uint64_t seed) {
  dl_rng rng = dl_rng_make(seed);
  int64_t k;
  memset(ds, 0, sizeof *ds);
  ds->x = dl_tensor_make(&ctx, DL_U8, 4, (const int64_t[]){n, c, h, w});
  ds->y = dl_tensor_make(&ctx, DL_I64, 1, (const int64_t[]){n});
  ds->n = n;
  ds->own = DL_DATASET_OWN_X | DL_DATASET_OWN_Y;
  ds->ctx = &ctx;
  for (k = 0; k < ds->x->numel; k++) ((uint8_t *)ds->x->data)[k] = (uint8_t)dl_rng_below(&rng, 256);
}

static dl_model *cnn(uint64_t seed) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.seed = seed});
  dl_layer *r;
  dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 2, .out = 6, .kernel = 3, .padding = 1});
  dl_batchnorm2d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 6});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_maxpool2d_make(m, NULL, NULL, &(dl_pool2d_desc){.kernel = 2});                         /* 12 -> 6 */
  r = dl_residual_make(m, NULL, NULL, DL_ACT_RELU);                                         /* "4" */
  dl_conv2d_make(m, r, "conv", &(dl_conv2d_desc){.in = 6, .out = 6, .kernel = 3, .padding = 1});
  dl_batchnorm2d_make(m, r, "bn", &(dl_batchnorm_desc){.features = 6});
  dl_conv2d_make(m, NULL, NULL, &(dl_conv2d_desc){.in = 6, .out = 8, .kernel = 3, .stride = 2, .padding = 2,
                                                  .dilation = 2});                          /* 6 -> 3 */
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_avgpool2d_make(m, NULL, NULL, &(dl_pool2d_desc){.kernel = 3, .stride = 1, .padding = 1}); /* count_include_pad */
  dl_flatten_make(m, NULL, NULL, 1);
  dl_dropout_make(m, NULL, NULL, 0.3);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 8 * 3 * 3, .out = 5});
  return m;
}
static dl_model *mlp(uint64_t seed) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.seed = seed});
  dl_flatten_make(m, NULL, NULL, 1);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 36, .out = 20});
  dl_batchnorm1d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 20});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 20, .out = 7});
  return m;
}

static void test_f32_matches_model(void) {
  dl_micro_model *q = NULL;
  dl_model *m = cnn(1);
  randomize(m, 2);
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "cnn", .c = 2, .h = 12, .w = 12,
                                                     .norm = DL_NORM_STANDARDIZE, .mean = 0.3, .std = 0.4}, &q) == DL_OK);
  if (q) {
    double err = f32_error(m, q, 2, 12, 12, 20);
    int i, adds = 0, fused = 0;
    CHECK_MSG(err < 2e-5, "cnn: relative error %g", err);
    for (i = 0; i < q->m.nlayers; i++) {
      adds += q->m.layers[i].op == DLM_OP_ADD;
      fused += q->m.layers[i].relu;
    }
    CHECK(adds == 1);
    CHECK(fused == 3);           /* conv1+BN, the residual's sum, conv3 */
    CHECK(q->m.nlayers == 7);    /* conv, pool, conv, add, conv, avgpool, linear: BN folded, dropout gone */
  }
  dl_micro_free(q);
  dl_model_free(m);
  m = mlp(3);
  randomize(m, 4);
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "mlp", .c = 1, .h = 6, .w = 6}, &q) == DL_OK);
  if (q) CHECK_MSG(f32_error(m, q, 1, 6, 6, 20) < 2e-5, "mlp");
  dl_micro_free(q);
  dl_model_free(m);
}

/* The arena is planned: tensors that are never alive together share bytes. */
static void test_arena_plan(void) {
  dl_micro_model *q = NULL;
  dl_model *m = cnn(5);
  uint32_t sum = 0;
  int t;
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "plan", .c = 2, .h = 12, .w = 12}, &q) == DL_OK);
  if (q) {
    for (t = 0; t < q->m.ntensors; t++) sum += dlm_tensor_numel(&q->m.tensors[t]) * 4;
    CHECK_MSG(q->m.arena_bytes < sum, "arena %u, all tensors %u", q->m.arena_bytes, sum);
    CHECK(q->m.arena_bytes == dlm_arena_size(&q->m));
  }
  dl_micro_free(q);
  dl_model_free(m);
}

/* dlm_requant against exact rational arithmetic: round(acc * mult * 2^(shift - 31)), half up. */
static void test_requant(void) {
  dl_rng rng = dl_rng_make(11);
  int i, bad = 0;
  for (i = 0; i < 200000; i++) {
    int32_t acc = (int32_t)(dl_rng_u64(&rng) >> 32), mult = (int32_t)(dl_rng_u64(&rng) >> 33);
    int32_t shift = (int32_t)dl_rng_below(&rng, 62) - 31, got;
    long double exact = (long double)acc * mult * powl(2.0L, shift - 31), want;
    if (i % 3 == 0) acc >>= dl_rng_below(&rng, 31); /* small accumulators too */
    exact = (long double)acc * mult * powl(2.0L, shift - 31);
    want = floorl(exact + 0.5L);
    if (want > INT32_MAX) want = INT32_MAX;
    if (want < INT32_MIN) want = INT32_MIN;
    got = dlm_requant(acc, mult, shift);
    if ((long double)got != want && bad++ < 5)
      fprintf(stderr, "  requant(%d, %d, %d) = %d, want %.0Lf\n", acc, mult, shift, got, want);
  }
  CHECK(bad == 0);
  { /* the multiplier encoding round-trips the real factor */
    const double ms[] = {0.9999999, 0.5, 0.0123, 3.7e-5, 1e-12, 2.0, 1000.5};
    int32_t mu = 0, sh = 0;
    for (i = 0; i < (int)(sizeof ms / sizeof ms[0]); i++) {
      CHECK(dl__micro_multiplier(ms[i], &mu, &sh) == 0);
      CHECK_REL(mu * pow(2.0, sh - 31), ms[i], 1e-8, 1e-300);
    }
    CHECK(dl__micro_multiplier(-1, &mu, &sh) != 0);
    CHECK(dl__micro_multiplier(NAN, &mu, &sh) != 0);
  }
}

/* int8 against f32: outputs within a few quantisation steps, the class
 * mostly the same, no float in the kernels' results (two runs, same bytes). */
static void test_int8_close(void) {
  dl_model *ms[2];
  const int64_t shp[2][3] = {{2, 12, 12}, {1, 6, 6}};
  int i;
  ms[0] = cnn(21);
  ms[1] = mlp(22);
  for (i = 0; i < 2; i++) {
    dl_dataset cal, ev;
    dl_micro_model *f = NULL, *q = NULL;
    static unsigned char a1[1 << 18] __attribute__((aligned(16))), a2[1 << 18] __attribute__((aligned(16)));
    int64_t c = shp[i][0], h = shp[i][1], w = shp[i][2], per = c * h * w, k;
    int agree = 0, j, same = 1;
    double worst = 0, range = 0;
    randomize(ms[i], 30 + (uint64_t)i);
    random_images(&cal, 300, c, h, w, 40);
    random_images(&ev, 200, c, h, w, 41);
    CHECK(dl_micro_from_model(&ctx, ms[i], &(dl_micro_desc){.name = "f", .c = c, .h = h, .w = w}, &f) == DL_OK);
    CHECK(dl_micro_from_model(&ctx, ms[i], &(dl_micro_desc){.name = "q", .precision = DLM_INT8, .c = c, .h = h, .w = w,
                                                           .calib = &cal}, &q) == DL_OK);
    if (!f || !q) { dl_micro_free(f); dl_micro_free(q); continue; }
    CHECK(q->m.arena_bytes < f->m.arena_bytes);
    for (k = 0; k < ev.n; k++) {
      const uint8_t *px = (const uint8_t *)ev.x->data + k * per;
      CHECK(dlm_run_u8(&f->m, a1, sizeof a1, px, (size_t)per, NULL) == DLM_OK);
      CHECK(dlm_run_u8(&q->m, a2, sizeof a2, px, (size_t)per, NULL) == DLM_OK);
      agree += dlm_argmax(&f->m, a1) == dlm_argmax(&q->m, a2);
      for (j = 0; j < dlm_output_count(&f->m); j++) {
        const double a = dlm_output(&f->m, a1, j), b = dlm_output(&q->m, a2, j);
        worst = fabs(a - b) > worst ? fabs(a - b) : worst;
        range = fabs(a) > range ? fabs(a) : range;
      }
      if (k < 20) { /* f32 input quantised at run time: the class the pixel table gives; softmax sums to 1 */
        float xin[288], pr[16], sum = 0;
        int32_t cls = dlm_argmax(&q->m, a2), t;
        for (t = 0; t < per; t++) xin[t] = q->lut[px[t]];
        CHECK(dlm_run_f32(&q->m, a2, sizeof a2, xin, (size_t)per, NULL) == DLM_OK);
        CHECK(dlm_argmax(&q->m, a2) == cls);
        dlm_softmax(&q->m, a2, pr);
        for (t = 0; t < dlm_output_count(&q->m); t++) sum += pr[t];
        CHECK_NEAR(sum, 1.0, 1e-5);
        CHECK(dlm_run_u8(&q->m, a2, sizeof a2, px, (size_t)per, NULL) == DLM_OK);
      }
      if (k < 20) { /* the same input twice: the same bytes */
        unsigned char o1[64];
        const dlm_tensor *Y = &q->m.tensors[q->m.output];
        memcpy(o1, a2 + Y->offset, dlm_tensor_numel(Y));
        CHECK(dlm_run_u8(&q->m, a2, sizeof a2, px, (size_t)per, NULL) == DLM_OK);
        same &= memcmp(o1, a2 + Y->offset, dlm_tensor_numel(Y)) == 0;
      }
    }
    CHECK(same);
    CHECK_MSG(worst < 0.08 * range, "model %d: int8 off by %g of outputs up to %g", i, worst, range);
    CHECK_MSG(agree >= 180, "model %d: int8 and f32 agree on %d of 200", i, agree);
    dl_dataset_free(&cal);
    dl_dataset_free(&ev);
    dl_micro_free(f);
    dl_micro_free(q);
    dl_model_free(ms[i]);
  }
}

/* A run on a static arena calls no allocator (dl's hooks counted here). */
static void test_no_allocation(void) {
  dl_micro_model *q = NULL;
  dl_model *m = cnn(7);
  dl_dataset cal;
  static unsigned char arena[1 << 16] __attribute__((aligned(16)));
  uint8_t px[288];
  long before;
  int k;
  random_images(&cal, 50, 2, 12, 12, 3);
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "q", .precision = DLM_INT8, .c = 2, .h = 12, .w = 12,
                                                     .calib = &cal}, &q) == DL_OK);
  for (k = 0; k < 288; k++) px[k] = (uint8_t)k;
  before = micro_allocs;
  if (q)
    for (k = 0; k < 10; k++) CHECK(dlm_run_u8(&q->m, arena, sizeof arena, px, 288, NULL) == DLM_OK);
  CHECK(micro_allocs == before);
  dl_micro_free(q);
  dl_dataset_free(&cal);
  dl_model_free(m);
}

/* Damaged plans, short or misaligned arenas, wrong inputs: a status and a
 * message, never a fault (this file also runs under ASan and UBSan). */
static void test_bad_input(void) {
  dl_micro_model *q = NULL;
  dl_model *m = cnn(8);
  dl_dataset cal;
  static unsigned char arena[1 << 16] __attribute__((aligned(16)));
  uint8_t px[288] = {0};
  dlm_error e;
  dlm_layer L[16];
  dlm_tensor T[16];
  dlm_model bad;
  dl_rng rng = dl_rng_make(5);
  int k, refused = 0, ran = 0;
  random_images(&cal, 50, 2, 12, 12, 3);
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "bad", .precision = DLM_INT8, .c = 2, .h = 12, .w = 12,
                                                     .calib = &cal}, &q) == DL_OK);
  if (!q) goto done;
  CHECK(dlm_run_u8(&q->m, arena, q->m.arena_bytes - 1, px, 288, &e) == DLM_ERR_ARENA);
  CHECK(e.need == q->m.arena_bytes);
  CHECK(strstr(e.msg, "too small") != NULL);
  CHECK(dlm_run_u8(&q->m, arena + 1, sizeof arena - 1, px, 288, &e) == DLM_ERR_ARENA);
  CHECK(dlm_run_u8(&q->m, arena, sizeof arena, px, 287, &e) == DLM_ERR_INPUT);
  CHECK(strstr(e.msg, "288") != NULL);
  CHECK(dlm_run_u8(&q->m, NULL, sizeof arena, px, 288, &e) == DLM_ERR_ARENA);
  CHECK(dlm_run_u8(NULL, arena, sizeof arena, px, 288, &e) == DLM_ERR_MODEL);
  CHECK(dlm_run_f32(&q->m, arena, sizeof arena, NULL, 288, &e) == DLM_ERR_INPUT);
  CHECK(q->m.nlayers <= 16 && q->m.ntensors <= 16);
  /* a weight count that does not match the geometry */
  memcpy(L, q->m.layers, sizeof(dlm_layer) * (size_t)q->m.nlayers);
  memcpy(T, q->m.tensors, sizeof(dlm_tensor) * (size_t)q->m.ntensors);
  bad = q->m;
  bad.layers = L;
  bad.tensors = T;
  L[0].nweight--;
  CHECK(dlm_run_u8(&bad, arena, sizeof arena, px, 288, &e) == DLM_ERR_MODEL);
  CHECK(strstr(e.msg, "layer 0") != NULL && strstr(e.msg, "weight") != NULL);
  L[0].nweight++;
  T[1].offset = T[0].offset; /* the first layer's output on its input */
  CHECK(dlm_run_u8(&bad, arena, sizeof arena, px, 288, &e) == DLM_ERR_MODEL);
  T[1].offset = q->m.tensors[1].offset;
  bad.arena_bytes += 4; /* a stated size that is not the plan's */
  CHECK(dlm_check(&bad, &e) == DLM_ERR_MODEL);
  bad.arena_bytes -= 4;
  CHECK(dlm_check(&bad, &e) == DLM_OK);
  /* random damage to one field of the plan: refused or run, never a fault */
  for (k = 0; k < 20000; k++) {
    int32_t *f;
    memcpy(L, q->m.layers, sizeof(dlm_layer) * (size_t)q->m.nlayers);
    memcpy(T, q->m.tensors, sizeof(dlm_tensor) * (size_t)q->m.ntensors);
    bad = q->m;
    bad.layers = L;
    bad.tensors = T;
    if (dl_rng_below(&rng, 3) == 0) f = &T[dl_rng_below(&rng, (uint64_t)bad.ntensors)].c + dl_rng_below(&rng, 4);
    else f = &L[dl_rng_below(&rng, (uint64_t)bad.nlayers)].op + dl_rng_below(&rng, 16); /* the integers, not the pointers */
    if (f == (int32_t *)&T[0].scale) continue; /* a float: not damaged here */
    switch (dl_rng_below(&rng, 4)) {
    case 0: *f += 1; break;
    case 1: *f -= 1; break;
    case 2: *f = (int32_t)(dl_rng_u64(&rng) >> 32); break;
    default: *f = -*f; break;
    }
    bad.arena_bytes = dl_rng_below(&rng, 2) ? q->m.arena_bytes : dlm_arena_size(&bad);
    if (dlm_run_u8(&bad, arena, sizeof arena, px, 288, &e) == DLM_OK) ran++;
    else refused++;
  }
  CHECK(refused > 1000 && ran > 100);
done:
  dl_micro_free(q);
  dl_dataset_free(&cal);
  dl_model_free(m);
}

/* A blob: loaded in place, the same output bytes as the in-memory model;
 * a blob of the wrong size, damaged, cut short or with too few slots is
 * refused with a message. */
static void test_blob(void) {
  dl_micro_model *q = NULL;
  dl_model *m = cnn(17);
  dl_dataset cal;
  static unsigned char arena[1 << 16] __attribute__((aligned(16))), a2[1 << 16] __attribute__((aligned(16)));
  dlm_layer L[16];
  dlm_tensor T[16];
  dlm_model bm;
  dlm_error e;
  unsigned char *blob = NULL, *copy;
  size_t n = 0, k;
  uint8_t px[288];
  int32_t nl, nt, prec;
  for (k = 0; k < 288; k++) px[k] = (uint8_t)(k * 13);
  random_images(&cal, 50, 2, 12, 12, 3);
  randomize(m, 18);
  for (prec = DLM_F32; prec <= DLM_INT8; prec++) {
    CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "blobbed", .precision = prec, .c = 2, .h = 12, .w = 12,
                                                       .calib = &cal}, &q) == DL_OK);
    if (!q) break;
    CHECK(dl_micro_blob(&ctx, q, (void **)&blob, &n) == DL_OK);
    dlm_blob_counts(blob, n, &nl, &nt);
    CHECK(nl == q->m.nlayers && nt == q->m.ntensors);
    CHECK(dlm_load_blob(blob, n, &bm, L, 16, T, 16, &e) == DLM_OK);
    CHECK(strcmp(bm.name, "blobbed") == 0);
    CHECK(dlm_run_u8(&q->m, arena, sizeof arena, px, 288, NULL) == DLM_OK);
    CHECK(dlm_run_u8(&bm, a2, sizeof a2, px, 288, NULL) == DLM_OK);
    CHECK(memcmp(arena + q->m.tensors[q->m.output].offset, a2 + bm.tensors[bm.output].offset,
                 dlm_tensor_numel(&bm.tensors[bm.output]) * dlm_elem_size(&bm)) == 0);
    /* wrong size, too few slots, every single flipped byte */
    CHECK(dlm_load_blob(blob, n - 4, &bm, L, 16, T, 16, &e) == DLM_ERR_MODEL && strstr(e.msg, "header says"));
    CHECK(dlm_load_blob(blob, n, &bm, L, 2, T, 16, &e) == DLM_ERR_MODEL && strstr(e.msg, "slots"));
    CHECK(dlm_load_blob(blob + 1, n - 1, &bm, L, 16, T, 16, &e) == DLM_ERR_MODEL);
    copy = (unsigned char *)dl_alloc(&ctx, n);
    for (k = 0; copy && k < n; k += (k < 4096 ? 1 : 97)) {
      memcpy(copy, blob, n);
      copy[k] ^= 0x40;
      if (dlm_load_blob(copy, n, &bm, L, 16, T, 16, &e) == DLM_OK) {
        CHECK_MSG(0, "a blob with byte %zu flipped loaded", k);
        break;
      }
    }
    dl_free(&ctx, copy);
    dl_free(&ctx, blob);
    blob = NULL;
    dl_micro_free(q);
    q = NULL;
  }
  { /* written to a file, read back: the same bytes */
    char path[] = "/tmp/dl_micro_blob_XXXXXX";
    int fd = mkstemp(path);
    FILE *f;
    unsigned char *back;
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "w", .c = 2, .h = 12, .w = 12}, &q) == DL_OK);
    if (q && fd >= 0) {
      CHECK(dl_micro_write_blob(&ctx, q, path) == DL_OK);
      CHECK(dl_micro_blob(&ctx, q, (void **)&blob, &n) == DL_OK);
      back = (unsigned char *)dl_alloc(&ctx, n + 1);
      f = fopen(path, "rb");
      CHECK(f && fread(back, 1, n + 1, f) == n);
      if (f) fclose(f);
      CHECK(memcmp(back, blob, n) == 0);
      dl_free(&ctx, back);
      dl_free(&ctx, blob);
      remove(path);
    }
    dl_micro_free(q);
  }
  dl_dataset_free(&cal);
  dl_model_free(m);
}

/* What has no kernel is refused, naming the layer. */
static void test_unsupported(void) {
  dl_micro_model *q = (dl_micro_model *)1;
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.seed = 1});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 4, .out = 4});
  dl_act_make(m, NULL, NULL, DL_ACT_GELU, 0);
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "g", .c = 4}, &q) == DL_ERR_UNSUPPORTED);
  CHECK(q == NULL);
  CHECK(strstr(dl_ctx_message(&ctx), "layer '1'") && strstr(dl_ctx_message(&ctx), "GELU"));
  dl_model_free(m);
  /* pooling the firmware has no kernel for: ceil_mode, dilation, SAME padding */
  m = dl_model_make(&ctx, &(dl_model_desc){.seed = 1});
  dl_maxpool2d_make(m, NULL, NULL, &(dl_pool2d_desc){.kernel = 2, .ceil_mode = 1});
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "p", .c = 1, .h = 5, .w = 5}, &q) == DL_ERR_UNSUPPORTED);
  CHECK(q == NULL && strstr(dl_ctx_message(&ctx), "layer '0'") && strstr(dl_ctx_message(&ctx), "ceil_mode"));
  dl_model_free(m);
  m = dl_model_make(&ctx, &(dl_model_desc){.seed = 1});
  dl_avgpool2d_make(m, NULL, NULL, &(dl_pool2d_desc){.kernel = 3, .pad_mode = DL_PAD_SAME, .exclude_pad = 1});
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "p", .c = 1, .h = 5, .w = 5}, &q) == DL_ERR_UNSUPPORTED);
  CHECK(q == NULL && strstr(dl_ctx_message(&ctx), "SAME padding"));
  dl_model_free(m);
  { /* 3-d convolution and pooling: no firmware kernels */
    int k;
    for (k = 0; k < 3; k++) {
      static const char *const types[] = {"Conv3d", "MaxPool3d", "AvgPool3d"};
      m = dl_model_make(&ctx, &(dl_model_desc){.seed = 1});
      if (k == 0) dl_conv3d_make(m, NULL, "vol", &(dl_conv3d_desc){.in = 1, .out = 2, .kernel = 3});
      else if (k == 1) dl_maxpool3d_make(m, NULL, "vol", &(dl_pool3d_desc){.kernel = 2});
      else dl_avgpool3d_make(m, NULL, "vol", &(dl_pool3d_desc){.kernel = 2});
      q = (dl_micro_model *)1;
      CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "v", .c = 1, .h = 5, .w = 5}, &q) ==
            DL_ERR_UNSUPPORTED);
      CHECK_MSG(q == NULL && strstr(dl_ctx_message(&ctx), "layer 'vol'") && strstr(dl_ctx_message(&ctx), types[k]),
                "%s", dl_ctx_message(&ctx));
      dl_model_free(m);
    }
  }
  m = mlp(1);
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "s", .c = 1, .h = 5, .w = 5}, &q) == DL_ERR_SHAPE);
  CHECK(strstr(dl_ctx_message(&ctx), "36 inputs") && strstr(dl_ctx_message(&ctx), "25"));
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "1x", .c = 36}, &q) == DL_ERR_ARG);
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "i", .precision = DLM_INT8, .c = 36}, &q) == DL_ERR_ARG);
  /* a normalisation that overflows the pixel table */
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "n", .c = 36, .norm = DL_NORM_STANDARDIZE, .std = 1e-45},
                            &q) == DL_ERR_ARG);
  CHECK(strstr(dl_ctx_message(&ctx), "maps pixel") != NULL);
  dl_model_free(m);
  { /* an int8 layer whose fan-in could overflow the accumulator is refused by name */
    dl_dataset cal;
    m = dl_model_make(&ctx, &(dl_model_desc){.seed = 1});
    dl_flatten_make(m, NULL, NULL, 1);
    dl_linear_make(m, NULL, "wide", &(dl_linear_desc){.in = 65536, .out = 2});
    random_images(&cal, 2, 1, 256, 256, 1);
    CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "w", .precision = DLM_INT8, .c = 1, .h = 256, .w = 256,
                                                       .calib = &cal}, &q) == DL_ERR_UNSUPPORTED);
    CHECK(strstr(dl_ctx_message(&ctx), "'wide'") && strstr(dl_ctx_message(&ctx), "65536"));
    dl_dataset_free(&cal);
    dl_model_free(m);
  }
  { /* a layer that stays 0 on every calibration sample (a dead ReLU) still quantises */
    dl_dataset cal;
    int i, k;
    m = dl_model_make(&ctx, &(dl_model_desc){.seed = 1});
    dl_flatten_make(m, NULL, NULL, 1);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 4, .out = 3});
    dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
    dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 3, .out = 2});
    for (i = 0; i < m->nparams; i++)
      if (!strcmp(m->params[i]->name, "1.bias"))
        for (k = 0; k < 3; k++) ((float *)m->params[i]->t.data)[k] = -100;
    random_images(&cal, 20, 4, 1, 1, 2);
    CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "dead", .precision = DLM_INT8, .c = 4, .calib = &cal},
                              &q) == DL_OK);
    dl_micro_free(q);
    dl_dataset_free(&cal);
    dl_model_free(m);
  }
}

/* The written source compiles (as C, -Werror) and its model gives the
 * in-memory model's output bytes. */
static void test_written_source(void) {
  char dir[] = "/tmp/dl_micro_XXXXXX", path[256], cmd[1024];
  dl_micro_model *q = NULL;
  dl_model *m = cnn(13);
  dl_dataset cal;
  static unsigned char arena[1 << 16] __attribute__((aligned(16)));
  uint8_t px[288];
  FILE *f;
  /* a last layer whose name would end a comment and make a trigraph: the source still compiles */
  dl_linear_make(m, NULL, "x*/q?" "?/\"", &(dl_linear_desc){.in = 5, .out = 4}); /* split: no trigraph here */
  int k;
  if (!mkdtemp(dir)) { CHECK(0); return; }
  random_images(&cal, 50, 2, 12, 12, 3);
  randomize(m, 14);
  CHECK(dl_micro_from_model(&ctx, m, &(dl_micro_desc){.name = "wq", .precision = DLM_INT8, .c = 2, .h = 12, .w = 12,
                                                     .calib = &cal}, &q) == DL_OK);
  if (!q) goto done;
  snprintf(path, sizeof path, "%s/wq", dir);
  CHECK(dl_micro_write(&ctx, q, path) == DL_OK);
  snprintf(path, sizeof path, "%s/main.c", dir);
  f = fopen(path, "w");
  fprintf(f, "#include \"wq.h\"\n#include <stdio.h>\nstatic unsigned char a[WQ_ARENA_BYTES] __attribute__((aligned(8)));\n"
             "int main(void) { unsigned char px[WQ_INPUTS]; int k; for (k = 0; k < (int)WQ_INPUTS; k++) px[k] = (unsigned char)k;\n"
             "  if (dlm_run_u8(&wq, a, sizeof a, px, WQ_INPUTS, NULL)) return 1;\n"
             "  for (k = 0; k < (int)WQ_OUTPUTS; k++) printf(\"%%d \", ((signed char *)a)[wq.tensors[wq.output].offset + k]);\n"
             "  return 0; }\n");
  fclose(f);
  snprintf(cmd, sizeof cmd, "cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -Iinclude -I%s %s/main.c %s/wq.c -o %s/run "
           "2>%s/cc.log && %s/run > %s/out.txt", dir, dir, dir, dir, dir, dir, dir);
  CHECK_MSG(system(cmd) == 0, "%s", cmd);
  for (k = 0; k < 288; k++) px[k] = (uint8_t)k;
  CHECK(dlm_run_u8(&q->m, arena, sizeof arena, px, 288, NULL) == DLM_OK);
  {
    char want[512] = "", got[512] = "";
    const dlm_tensor *Y = &q->m.tensors[q->m.output];
    for (k = 0; k < dlm_output_count(&q->m); k++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%d ", ((int8_t *)arena)[Y->offset + (uint32_t)k]);
    snprintf(path, sizeof path, "%s/out.txt", dir);
    if ((f = fopen(path, "r"))) {
      if (!fgets(got, sizeof got, f)) got[0] = 0;
      fclose(f);
    }
    CHECK_MSG(strcmp(want, got) == 0, "in memory '%s', compiled '%s'", want, got);
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
done:
  dl_micro_free(q);
  dl_dataset_free(&cal);
  dl_model_free(m);
}

int main(void) {
  (void)micro_realloc; /* the hooks come in threes */
  dl_ctx_init(&ctx, NULL);
  RUN(test_f32_matches_model);
  RUN(test_arena_plan);
  RUN(test_requant);
  RUN(test_int8_close);
  RUN(test_no_allocation);
  RUN(test_bad_input);
  RUN(test_blob);
  RUN(test_unsupported);
  RUN(test_written_source);
  return harness_finish();
}
