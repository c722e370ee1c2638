/* examples/fortunes.h - the fortune cookies of Debian's `fortunes` package
 * as a training text and a test text, for char_lm.c and gpt.c.
 *
 * Every regular file without a dot in its name in the folder (the .dat
 * index files and the .u8 links are skipped that way), except ascii-art
 * (pictures, not language), read in bytewise order of their names. A file
 * is a list of fortunes separated by lines holding only "%"; fortune k of
 * that list (k = 0, 1, ... over all files) is held out as test text when
 * k % 10 == 9, the rest is the training text. Either text is its fortunes,
 * each followed by a "%" line, so a model learns where a fortune ends. On
 * the Debian files: 2.3 M training bytes, 0.26 M test bytes.
 *
 *   fortunes f = {0};
 *   if (fortunes_load(ctx, &f, "/usr/share/games/fortunes") != DL_OK) ...   // f.train, f.test: u8 [L]
 *   fortunes_free(&f);
 */
#ifndef EXAMPLES_FORTUNES_H
#define EXAMPLES_FORTUNES_H

#include "dl.h"

#include <dirent.h>
#include <sys/stat.h>

typedef struct fortunes {
  dl_tensor *train, *test;    /* u8 [L], owned */
  int64_t nfiles, nfortunes;
  char *names;                /* the file list, while loading */
  unsigned char *buf[2];      /* the two texts while they are gathered */
  size_t len[2], cap[2];
} fortunes;

/* Everything f holds; f is zeroed. */
static void fortunes_free(fortunes *f) {
  dl_tensor_free(f->train);
  dl_tensor_free(f->test);
  free(f->names);
  free(f->buf[0]);
  free(f->buf[1]);
  memset(f, 0, sizeof *f);
}


static int fortunes_append(fortunes *p, int which, const unsigned char *s, size_t n) {
  if (p->len[which] + n > p->cap[which]) {
    size_t cap = p->cap[which] ? p->cap[which] : 1 << 16;
    unsigned char *nb;
    while (cap < p->len[which] + n) cap *= 2;
    if (!(nb = (unsigned char *)realloc(p->buf[which], cap))) return 0;
    p->buf[which] = nb;
    p->cap[which] = cap;
  }
  memcpy(p->buf[which] + p->len[which], s, n);
  p->len[which] += n;
  return 1;
}

static int fortunes_name_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Append fortune s[0..n) (unless blank) to the training or the test text,
 * ending it with a newline and a "%" line; *k counts the fortunes. */
static int fortunes_add(fortunes *p, const unsigned char *s, size_t n, int64_t *k) {
  size_t i;
  int which;
  for (i = 0; i < n && (s[i] == '\n' || s[i] == '\r' || s[i] == ' ' || s[i] == '\t'); i++) {}
  if (i == n) return 1;
  which = *k % 10 == 9;
  ++*k;
  return fortunes_append(p, which, s, n) && (s[n - 1] == '\n' || fortunes_append(p, which, (const unsigned char *)"\n", 1)) &&
         fortunes_append(p, which, (const unsigned char *)"%\n", 2);
}

/* Split one file's bytes into fortunes at the lines holding only "%". */
static int fortunes_split(fortunes *p, const unsigned char *s, size_t n, int64_t *k) {
  size_t at = 0, start = 0;
  while (at < n) {
    size_t e = at;
    while (e < n && s[e] != '\n') e++;
    if (s[at] == '%' && (e - at == 1 || (e - at == 2 && s[at + 1] == '\r'))) {
      if (!fortunes_add(p, s + start, at - start, k)) return 0;
      start = e < n ? e + 1 : n;
    }
    at = e + 1;
  }
  return fortunes_add(p, s + start, n - start, k);
}

/* The training and test texts from the fortune files in dir. */
static dl_status fortunes_load(dl_ctx *ctx, fortunes *p, const char *dir) {
  int64_t *nfiles = &p->nfiles, *nfortunes = &p->nfortunes;
  DIR *d = opendir(dir);
  struct dirent *e;
  char **list = NULL, *path = NULL;
  size_t n = 0, cap = 0, used = 0, i, pathcap = 0;
  dl_status st = DL_OK;
  *nfiles = *nfortunes = 0;
  if (!d) return dl_fail(ctx, DL_ERR_IO, "cannot open the folder %s: %s", dir, strerror(errno));
  /* the names, packed in one block (p->names) with pointers to them */
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name) + 1;
    char *nb;
    if (strchr(e->d_name, '.') || strcmp(e->d_name, "ascii-art") == 0) continue;
    if (used + l > cap) {
      cap = (used + l) * 2 + 256;
      if (!(nb = (char *)realloc(p->names, cap))) { st = dl_fail(ctx, DL_ERR_NOMEM, "out of memory"); break; }
      p->names = nb;
    }
    memcpy(p->names + used, e->d_name, l);
    used += l;
    n++;
  }
  closedir(d);
  if (st != DL_OK) return st;
  if (n && !(list = (char **)malloc(n * sizeof *list))) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
  for (i = 0, used = 0; i < n; i++) {
    list[i] = p->names + used;
    used += strlen(list[i]) + 1;
  }
  if (n) qsort(list, n, sizeof *list, fortunes_name_cmp);
  for (i = 0; i < n && st == DL_OK; i++) {
    struct stat sb;
    size_t need = strlen(dir) + strlen(list[i]) + 2;
    dl_tensor *t = NULL;
    if (need > pathcap) {
      char *np = (char *)realloc(path, need);
      if (!np) { st = dl_fail(ctx, DL_ERR_NOMEM, "out of memory"); break; }
      path = np;
      pathcap = need;
    }
    snprintf(path, need, "%s/%s", dir, list[i]);
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    if ((st = dl_text_load(ctx, path, DL_U8, &t)) != DL_OK) break;
    if (!fortunes_split(p, dl_u8(t), (size_t)t->numel, nfortunes)) st = dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
    dl_tensor_free(t);
    ++*nfiles;
  }
  free(list);
  free(path);
  if (st != DL_OK) return st;
  if (*nfiles == 0) return dl_fail(ctx, DL_ERR_IO, "%s holds no fortune files (files without a dot in their name)", dir);
  if (p->len[0] < 1000 || p->len[1] < 100)
    return dl_fail(ctx, DL_ERR_FORMAT, "%s: too little text (%zu training, %zu test characters)", dir, p->len[0], p->len[1]);
  for (i = 0; i < 2; i++) {
    dl_tensor *t = dl_tensor_make(ctx, DL_U8, DL_SHAPE((int64_t)p->len[i]));
    if (!t) return ctx->status;
    memcpy(t->data, p->buf[i], p->len[i]);
    if (i == 0) p->train = t; else p->test = t;
    free(p->buf[i]);
    p->buf[i] = NULL;
  }
  return DL_OK;
}

#endif /* EXAMPLES_FORTUNES_H */
