/* fuzz/fuzz_checkpoint.c - libFuzzer target for checkpoint loading in
 * include/dl/io.h (dl_checkpoint_load_st on a parsed safetensors file;
 * built and run by fuzz/run.sh under ASan and UBSan).
 *
 * A small model (Linear 4->3, Dropout, Linear 3->2) with Adam and two named
 * values (an I64 and an F64) is the target of every input. For each input
 * that parses as safetensors, dl_checkpoint_load_st either refuses it, and
 * then nothing changed (weights, optimizer state and step counts, RNGs and
 * the values are byte for byte as before), or accepts it, and then the
 * optimizer's counts are in 0 .. 2^53 and its lr finite and >= 0 (range-
 * checked before anything is copied) and a whole training step (forward,
 * backward, clip, Adam) on the loaded state runs without a fault. Before
 * the range checks an optimizer step of -3 loaded and the first step
 * aborted.
 * Seed corpus: fuzz/corpus/checkpoint/, written by this file itself:
 *   clang -std=c11 -DFUZZ_CHECKPOINT_SEED -Iinclude fuzz/fuzz_checkpoint.c -o /tmp/seed -lm
 *   /tmp/seed fuzz/corpus/checkpoint/valid.safetensors
 * (a checkpoint after 3 training steps).
 */
#include "dl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "fuzz_checkpoint: %s failed (line %d)\n", #c, __LINE__); abort(); } } while (0)

typedef struct fz {
  dl_ctx ctx;
  dl_model *m;
  dl_optim *o;
  dl_tape tp;
  dl_tensor *x, *y;
  int64_t epoch;
  double best;
  dl_named_value vals[2];
} fz;

static void fz_make(fz *f) {
  dl_adam_cfg a = dl_adam_defaults(1e-2);
  dl_rng r = dl_rng_make(9);
  int i;
  memset(f, 0, sizeof *f);
  dl_ctx_init(&f->ctx, NULL);
  f->m = dl_model_make(&f->ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 1});
  dl_linear_make(f->m, NULL, NULL, &(dl_linear_desc){.in = 4, .out = 3});
  dl_dropout_make(f->m, NULL, NULL, 0.25);
  dl_linear_make(f->m, NULL, NULL, &(dl_linear_desc){.in = 3, .out = 2});
  REQUIRE(dl_model_status(f->m) == DL_OK);
  f->o = dl_optim_adam(f->m, &a);
  REQUIRE(f->o && dl_tape_init(&f->tp, &f->ctx, 0) == DL_OK);
  f->x = dl_tensor_make(&f->ctx, DL_F32, DL_SHAPE(5, 4));
  f->y = dl_tensor_make(&f->ctx, DL_I64, DL_SHAPE(5));
  dl_tensor_rand_normal(f->x, &r, 0, 1);
  for (i = 0; i < 5; i++) dl_i64(f->y)[i] = i % 2;
  f->vals[0] = (dl_named_value){"epoch", &f->epoch, NULL, NULL};
  f->vals[1] = (dl_named_value){"best", NULL, &f->best, NULL};
}
static void fz_step(fz *f) {
  dl_tensor *loss = dl_t_cross_entropy(&f->tp, dl_model_forward(f->m, &f->tp, f->x), f->y, 0, DL_REDUCE_MEAN);
  dl_train_step(f->o, &f->tp, loss, NULL);
  dl_tape_rewind(&f->tp);
}
static void fz_free(fz *f) {
  dl_tape_free(&f->tp);
  dl_optim_free(f->o);
  dl_model_free(f->m);
  dl_tensor_free(f->x);
  dl_tensor_free(f->y);
}
/* Everything a load may change, as bytes: weights, optimizer state, steps, lr, rngs, the values. */
static size_t fz_snapshot(const fz *f, unsigned char *buf, size_t cap) {
  size_t n = 0;
  int i, k;
#define PUT(p, len) do { REQUIRE(n + (len) <= cap); memcpy(buf + n, (p), (len)); n += (len); } while (0)
  for (i = 0; i < f->m->nparams; i++) {
    const dl_tensor *t = &f->m->params[i]->t;
    PUT(t->data, (size_t)t->numel * dl_dtype_size(t->dtype));
    for (k = 0; k < f->o->nstate; k++) {
      const dl_tensor *s = &f->o->state[i * DL_OPTIM_MAX_STATE + k];
      if (s->data) PUT(s->data, (size_t)s->numel * dl_dtype_size(s->dtype));
    }
    PUT(&f->o->steps[i], sizeof f->o->steps[i]);
  }
  PUT(&f->o->lr, sizeof f->o->lr);
  PUT(&f->o->nsteps, sizeof f->o->nsteps);
  PUT(&f->m->rng, sizeof f->m->rng);
  for (i = 0; i < f->m->nlayers; i++) {
    dl_rng *r = dl_dropout_rng(f->m->layers[i]);
    if (r) PUT(r, sizeof *r);
  }
  PUT(&f->epoch, sizeof f->epoch);
  PUT(&f->best, sizeof f->best);
#undef PUT
  return n;
}

#ifdef FUZZ_CHECKPOINT_SEED
size_t (*fz_unused)(const fz *, unsigned char *, size_t) = fz_snapshot; /* used by the fuzz entry below */
int main(int argc, char **argv) {
  fz f;
  int i;
  if (argc != 2) return 2;
  fz_make(&f);
  for (i = 0; i < 3; i++) fz_step(&f);
  f.epoch = 3;
  f.best = 0.5;
  if (dl_checkpoint_save(f.m, f.o, argv[1], f.vals, 2, NULL) != DL_OK) {
    fprintf(stderr, "%s\n", dl_ctx_message(&f.ctx));
    return 1;
  }
  fz_free(&f);
  return 0;
}
#else
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static unsigned char before[1 << 14], after[1 << 14];
  dl_safetensors st;
  dl_load_report rep;
  fz f;
  size_t nb, na;
  int i;
  dl_status s;
  fz_make(&f);
  fz_step(&f); /* some optimizer state to keep or replace */
  if (dl_safetensors_parse(&st, &f.ctx, data, size) != DL_OK) {
    fz_free(&f);
    return 0;
  }
  nb = fz_snapshot(&f, before, sizeof before);
  s = dl_checkpoint_load_st(f.m, f.o, &st, f.vals, 2, &rep);
  dl_safetensors_free(&st);
  if (s != DL_OK) {
    REQUIRE(f.ctx.message[0] != 0);
    na = fz_snapshot(&f, after, sizeof after);
    REQUIRE(na == nb && memcmp(before, after, nb) == 0); /* refused: nothing changed */
  } else {
    REQUIRE(rep.nloaded > 0);
    REQUIRE(f.o->nsteps >= 0 && (double)f.o->nsteps <= 9007199254740992.0);
    REQUIRE(f.o->lr >= 0 && f.o->lr <= 1.7976931348623157e308);
    for (i = 0; i < f.m->nparams; i++)
      REQUIRE(f.o->steps[i] >= 0 && (double)f.o->steps[i] <= 9007199254740992.0);
    fz_step(&f); /* the loaded state trains (NaN weights may give NaN losses, never a fault) */
  }
  fz_free(&f);
  return 0;
}
#endif
