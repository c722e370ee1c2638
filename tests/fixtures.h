/* tests/fixtures.h - reader for tests/fixtures/ops.txt, the PyTorch reference
 * values that tools/make_fixtures.py writes (format described there).
 *
 *   fx_set s;
 *   if (fx_load(&s)) { ... s.cases[i] ... }  else fprintf(stderr, "%s\n", s.err);
 *   fx_free(&s);
 *
 * The file is looked up as $DL_FIXTURES when that is set, else as
 * tests/fixtures/ops.txt relative to the working directory (the repository
 * root, where the tests run). A missing or malformed file gives 0 and a
 * message in s.err, never a crash. Values are kept as double (the f32 cases'
 * %.9g values convert back to the exact float).
 */
#ifndef DL_TEST_FIXTURES_H
#define DL_TEST_FIXTURES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX_MAX_DIMS 8
#define FX_DEFAULT_PATH "tests/fixtures/ops.txt"

typedef struct fx_case {
  char op[64];
  double p0;
  int nin;                           /* 1 or 2 inputs */
  int f64;                           /* 1: f64 case, 0: f32 case */
  int line;                          /* line of the "case" header in the file */
  int ndim[3];                       /* [0], [1]: inputs, [2]: y */
  int64_t shape[3][FX_MAX_DIMS];
  int64_t numel[3];
  double *x[2], *y, *gy, *g[2];      /* x[k], g[k]: numel[k]; y, gy: numel[2] */
} fx_case;

typedef struct fx_set {
  fx_case *cases;
  int n;
  char path[512];
  char err[1024];
} fx_set;

typedef struct fx__reader {
  FILE *f;
  int line;
} fx__reader;

/* Next whitespace-separated token into buf (comments skipped); 0 at EOF. */
static int fx__token(fx__reader *r, char *buf, size_t cap) {
  int c;
  size_t n = 0;
  for (;;) {
    c = fgetc(r->f);
    if (c == EOF) return 0;
    if (c == '\n') { r->line++; continue; }
    if (c == ' ' || c == '\t' || c == '\r') continue;
    if (c == '#') {
      while ((c = fgetc(r->f)) != EOF && c != '\n') {}
      if (c == '\n') r->line++;
      continue;
    }
    break;
  }
  while (c != EOF && c != ' ' && c != '\t' && c != '\r' && c != '\n') {
    if (n + 1 < cap) buf[n++] = (char)c;
    c = fgetc(r->f);
  }
  if (c != EOF) ungetc(c, r->f);
  buf[n] = 0;
  return 1;
}

static int fx__expect(fx__reader *r, const char *want, fx_set *s) {
  char tok[64];
  if (!fx__token(r, tok, sizeof tok) || strcmp(tok, want) != 0) {
    snprintf(s->err, sizeof s->err, "%s:%d: expected '%s'", s->path, r->line + 1, want);
    return 0;
  }
  return 1;
}

static int fx__number(fx__reader *r, double *v, fx_set *s) {
  char tok[64], *end;
  if (!fx__token(r, tok, sizeof tok)) {
    snprintf(s->err, sizeof s->err, "%s:%d: unexpected end of file", s->path, r->line + 1);
    return 0;
  }
  *v = strtod(tok, &end);
  if (end == tok || *end) {
    snprintf(s->err, sizeof s->err, "%s:%d: '%s' is not a number", s->path, r->line + 1, tok);
    return 0;
  }
  return 1;
}

static int fx__int(fx__reader *r, int64_t *v, int64_t lo, int64_t hi, fx_set *s) {
  double d;
  if (!fx__number(r, &d, s)) return 0;
  if (d != (double)(int64_t)d || d < (double)lo || d > (double)hi) {
    snprintf(s->err, sizeof s->err, "%s:%d: %g is not an integer in [%lld, %lld]", s->path,
             r->line + 1, d, (long long)lo, (long long)hi);
    return 0;
  }
  *v = (int64_t)d;
  return 1;
}

/* "NAME v v ..." with n values into a new array. */
static double *fx__values(fx__reader *r, const char *name, int64_t n, fx_set *s) {
  double *v;
  int64_t i;
  if (!fx__expect(r, name, s)) return NULL;
  v = (double *)malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (!v) { snprintf(s->err, sizeof s->err, "out of memory"); return NULL; }
  for (i = 0; i < n; i++)
    if (!fx__number(r, &v[i], s)) { free(v); return NULL; }
  return v;
}

static void fx__case_free(fx_case *c) {
  free(c->x[0]); free(c->x[1]); free(c->y); free(c->gy); free(c->g[0]); free(c->g[1]);
  memset(c, 0, sizeof *c);
}

static void fx_free(fx_set *s) {
  int i;
  for (i = 0; i < s->n; i++) fx__case_free(&s->cases[i]);
  free(s->cases);
  s->cases = NULL;
  s->n = 0;
}

/* Parse one block after its "case" token. */
static int fx__case(fx__reader *r, fx_case *c, fx_set *s) {
  static const char *const xname[2] = {"x0", "x1"}, *const gname[2] = {"g0", "g1"};
  char tok[64];
  double p0;
  int64_t v;
  int k, d;
  memset(c, 0, sizeof *c);
  c->line = r->line + 1;
  if (!fx__token(r, c->op, sizeof c->op)) goto eof;
  if (!fx__number(r, &p0, s)) return 0;
  c->p0 = p0;
  if (!fx__int(r, &v, 1, 2, s)) return 0;
  c->nin = (int)v;
  if (!fx__token(r, tok, sizeof tok)) goto eof;
  if (strcmp(tok, "f64") && strcmp(tok, "f32")) {
    snprintf(s->err, sizeof s->err, "%s:%d: dtype '%s' is not f64 or f32", s->path, r->line + 1, tok);
    return 0;
  }
  c->f64 = !strcmp(tok, "f64");
  for (k = 0; k <= c->nin; k++) {                /* the inputs, then y */
    int t = k < c->nin ? k : 2;
    if (!fx__expect(r, "shape", s) || !fx__int(r, &v, 0, FX_MAX_DIMS, s)) return 0;
    c->ndim[t] = (int)v;
    c->numel[t] = 1;
    for (d = 0; d < c->ndim[t]; d++) {
      if (!fx__int(r, &c->shape[t][d], 0, 1 << 20, s)) return 0;
      c->numel[t] *= c->shape[t][d];
    }
  }
  for (k = 0; k < c->nin; k++) {
    if (!(c->x[k] = fx__values(r, xname[k], c->numel[k], s))) return 0;
  }
  if (!(c->y = fx__values(r, "y", c->numel[2], s))) return 0;
  if (!(c->gy = fx__values(r, "gy", c->numel[2], s))) return 0;
  for (k = 0; k < c->nin; k++) {
    if (!(c->g[k] = fx__values(r, gname[k], c->numel[k], s))) return 0;
  }
  return fx__expect(r, "end", s);
eof:
  snprintf(s->err, sizeof s->err, "%s:%d: unexpected end of file", s->path, r->line + 1);
  return 0;
}

/* Load every case; 1 on success, 0 with s->err set (and no cases) on failure. */
static int fx_load(fx_set *s) {
  fx__reader r;
  char tok[64];
  int cap = 0;
  const char *env = getenv("DL_FIXTURES");
  memset(s, 0, sizeof *s);
  snprintf(s->path, sizeof s->path, "%s", env && *env ? env : FX_DEFAULT_PATH);
  r.f = fopen(s->path, "r");
  r.line = 0;
  if (!r.f) {
    snprintf(s->err, sizeof s->err,
             "cannot open fixture file '%s' (run the tests from the repository root, set "
             "DL_FIXTURES, or regenerate it: /usr/bin/python3 tools/make_fixtures.py)",
             s->path);
    return 0;
  }
  while (fx__token(&r, tok, sizeof tok)) {
    if (strcmp(tok, "case") != 0) {
      snprintf(s->err, sizeof s->err, "%s:%d: expected 'case', found '%s'", s->path, r.line + 1, tok);
      goto fail;
    }
    if (s->n == cap) {
      int ncap = cap ? 2 * cap : 64;
      fx_case *nc = (fx_case *)realloc(s->cases, sizeof(fx_case) * (size_t)ncap);
      if (!nc) { snprintf(s->err, sizeof s->err, "out of memory"); goto fail; }
      s->cases = nc;
      cap = ncap;
    }
    if (!fx__case(&r, &s->cases[s->n], s)) { fx__case_free(&s->cases[s->n]); goto fail; }
    s->n++;
  }
  fclose(r.f);
  if (s->n == 0) {
    snprintf(s->err, sizeof s->err, "%s: no cases", s->path);
    fx_free(s);
    return 0;
  }
  return 1;
fail:
  fclose(r.f);
  fx_free(s);
  return 0;
}

#endif
