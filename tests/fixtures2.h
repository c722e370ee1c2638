/* tests/fixtures2.h - reader for the op fixtures tools/fixture_lib.py writes
 * (tests/fixtures/NAME.txt; the format is described there).
 *
 *   fx2_set s;
 *   if (!fx2_load(&s, "tests/fixtures/shape.txt")) { SKIP("%s", s.err); }
 *   const fx2_case *c = fx2_find(&s, "concat_dim1", 1);       // the f64 case
 *   dl_tensor *x = fx2_make(c, "x", DL_F64);                   // heap, owned
 *   double err = fx2_err(got, fx2_get(c, "y"));               // max rel error
 *   fx2_free(&s);
 *
 * A missing or malformed file gives 0 and a message in s.err, never a crash.
 */
#ifndef DL_TEST_FIXTURES2_H
#define DL_TEST_FIXTURES2_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX2_MAX_T 24
#define FX2_MAX_P 24

typedef struct fx2_tensor {
  char key[32];
  int isint;                 /* i64 values */
  int ndim;
  int64_t shape[8];
  int64_t numel;
  double *v;
} fx2_tensor;

typedef struct fx2_case {
  char name[64];
  int f64, line, np, nt;
  char pkey[FX2_MAX_P][32];
  double pval[FX2_MAX_P];
  fx2_tensor t[FX2_MAX_T];
} fx2_case;

typedef struct fx2_set {
  fx2_case *cases;
  int n, cap;
  char err[512];
} fx2_set;

static inline int fx2__tok(FILE *f, int *line, char *buf, size_t cap) {
  int c;
  size_t n = 0;
  for (;;) {
    c = fgetc(f);
    if (c == EOF) return 0;
    if (c == '\n') { (*line)++; continue; }
    if (c == ' ' || c == '\t' || c == '\r') continue;
    if (c == '#') {
      while ((c = fgetc(f)) != EOF && c != '\n') {}
      if (c == '\n') (*line)++;
      continue;
    }
    break;
  }
  while (c != EOF && c != ' ' && c != '\t' && c != '\r' && c != '\n') {
    if (n + 1 < cap) buf[n++] = (char)c;
    c = fgetc(f);
  }
  if (c != EOF) ungetc(c, f);
  buf[n] = 0;
  return 1;
}

static inline void fx2_free(fx2_set *s) {
  int i, k;
  for (i = 0; i < s->n; i++)
    for (k = 0; k < s->cases[i].nt; k++) free(s->cases[i].t[k].v);
  free(s->cases);
  s->cases = NULL;
  s->n = s->cap = 0;
}

static inline int fx2_load(fx2_set *s, const char *path) {
  FILE *f = fopen(path, "r");
  char tok[128];
  int line = 1;
  fx2_case *c = NULL;
  memset(s, 0, sizeof *s);
  if (!f) { snprintf(s->err, sizeof s->err, "cannot open %s (run from the repository root)", path); return 0; }
#define FX2_FAIL(...) do { snprintf(s->err, sizeof s->err, __VA_ARGS__); fclose(f); fx2_free(s); return 0; } while (0)
  while (fx2__tok(f, &line, tok, sizeof tok)) {
    if (!strcmp(tok, "case")) {
      char dt[16];
      if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        fx2_case *nc = (fx2_case *)realloc(s->cases, sizeof *nc * (size_t)cap);
        if (!nc) FX2_FAIL("%s: out of memory", path);
        s->cases = nc;
        s->cap = cap;
      }
      c = &s->cases[s->n++];
      memset(c, 0, sizeof *c);
      c->line = line;
      if (!fx2__tok(f, &line, c->name, sizeof c->name) || !fx2__tok(f, &line, dt, sizeof dt))
        FX2_FAIL("%s:%d: truncated case header", path, line);
      c->f64 = !strcmp(dt, "f64");
    } else if (!strcmp(tok, "param")) {
      char v[64];
      if (!c || c->np == FX2_MAX_P) FX2_FAIL("%s:%d: param outside a case or too many", path, line);
      if (!fx2__tok(f, &line, c->pkey[c->np], sizeof c->pkey[0]) || !fx2__tok(f, &line, v, sizeof v))
        FX2_FAIL("%s:%d: truncated param", path, line);
      c->pval[c->np++] = strtod(v, NULL);
    } else if (!strcmp(tok, "tensor")) {
      fx2_tensor *t;
      char dt[16], v[64];
      int64_t i;
      int d;
      if (!c || c->nt == FX2_MAX_T) FX2_FAIL("%s:%d: tensor outside a case or too many", path, line);
      t = &c->t[c->nt++];
      memset(t, 0, sizeof *t);
      if (!fx2__tok(f, &line, t->key, sizeof t->key) || !fx2__tok(f, &line, dt, sizeof dt) ||
          !fx2__tok(f, &line, v, sizeof v))
        FX2_FAIL("%s:%d: truncated tensor header", path, line);
      t->isint = !strcmp(dt, "i64");
      t->ndim = atoi(v);
      if (t->ndim < 0 || t->ndim > 8) FX2_FAIL("%s:%d: bad rank %d", path, line, t->ndim);
      t->numel = 1;
      for (d = 0; d < t->ndim; d++) {
        if (!fx2__tok(f, &line, v, sizeof v)) FX2_FAIL("%s:%d: truncated shape", path, line);
        t->shape[d] = atoll(v);
        if (t->shape[d] < 0 || t->shape[d] > 100000000) FX2_FAIL("%s:%d: bad size", path, line);
        t->numel *= t->shape[d];
      }
      t->v = (double *)malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
      if (!t->v) FX2_FAIL("%s: out of memory", path);
      for (i = 0; i < t->numel; i++) {
        if (!fx2__tok(f, &line, v, sizeof v)) FX2_FAIL("%s:%d: truncated values of %s", path, line, t->key);
        t->v[i] = strtod(v, NULL);
      }
    } else if (!strcmp(tok, "end")) {
      c = NULL;
    } else {
      FX2_FAIL("%s:%d: unexpected '%s'", path, line, tok);
    }
  }
#undef FX2_FAIL
  fclose(f);
  if (s->n == 0) { snprintf(s->err, sizeof s->err, "%s: no cases", path); return 0; }
  return 1;
}

static inline const fx2_case *fx2_find(const fx2_set *s, const char *name, int f64) {
  int i;
  for (i = 0; i < s->n; i++)
    if (s->cases[i].f64 == f64 && !strcmp(s->cases[i].name, name)) return &s->cases[i];
  return NULL;
}
static inline const fx2_tensor *fx2_get(const fx2_case *c, const char *key) {
  int k;
  for (k = 0; c && k < c->nt; k++)
    if (!strcmp(c->t[k].key, key)) return &c->t[k];
  return NULL;
}
static inline double fx2_param(const fx2_case *c, const char *key, double dflt) {
  int k;
  for (k = 0; c && k < c->np; k++)
    if (!strcmp(c->pkey[k], key)) return c->pval[k];
  return dflt;
}

#ifdef DL_H
/* A heap tensor (dl_tensor_make, owned) holding fixture tensor `key` as dtype;
 * NULL when the case lacks it. */
static inline dl_tensor *fx2_make(const fx2_case *c, const char *key, dl_dtype dtype) {
  const fx2_tensor *t = fx2_get(c, key);
  dl_tensor *x;
  int64_t i;
  if (!t) return NULL;
  x = dl_tensor_make(NULL, dtype, t->ndim, t->shape);
  for (i = 0; x && i < t->numel; i++) dl__set_at(x, i, t->v[i]);
  return x;
}
/* Largest |got - want| / max(|want|, 1e-3 * max|want|, tiny) over the elements;
 * shapes must agree (a mismatch gives INFINITY). */
static inline double fx2_err(const dl_tensor *got, const fx2_tensor *want) {
  double worst = 0, scale = 0;
  int64_t i;
  int d;
  if (!got || !want || got->ndim != want->ndim) return INFINITY;
  for (d = 0; d < got->ndim; d++)
    if (got->shape[d] != want->shape[d]) return INFINITY;
  for (i = 0; i < want->numel; i++) scale = fmax(scale, fabs(want->v[i]));
  for (i = 0; i < want->numel; i++) {
    double g = dl__get_at(got, dl__offset_of_linear(got, i)), w = want->v[i];
    double e = fabs(g - w) / fmax(fmax(fabs(w), 1e-3 * scale), 1e-30);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}
/* Norm-wise relative error max|got - want| / max|want|: the measure GEMM
 * error bounds are stated in (an output that cancels to near zero carries
 * the rounding of its largest terms, in PyTorch's f32 result as in ours). */
static inline double fx2_err_norm(const dl_tensor *got, const fx2_tensor *want) {
  double worst = 0, scale = 0;
  int64_t i;
  int d;
  if (!got || !want || got->ndim != want->ndim) return INFINITY;
  for (d = 0; d < got->ndim; d++)
    if (got->shape[d] != want->shape[d]) return INFINITY;
  for (i = 0; i < want->numel; i++) {
    double e = fabs(dl__get_at(got, dl__offset_of_linear(got, i)) - want->v[i]);
    scale = fmax(scale, fabs(want->v[i]));
    if (!(e <= worst)) worst = e;
  }
  return worst / fmax(scale, 1e-30);
}
#endif

#endif /* DL_TEST_FIXTURES2_H */
