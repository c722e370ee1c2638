/* tests/test_io.c - include/dl/io.h: f16/bf16 conversions, the safetensors
 * reader and writer, model weights, checkpoints and atomic writes.
 *
 * - Conversions: hand-checked cases (ties to even, overflow to infinity,
 *   subnormals, NaN), then every f16 and bf16 bit pattern: it round-trips
 *   through f32, and for every pair of neighbours the midpoint rounds to the
 *   even one and the float just above / below it to the upper / lower one,
 *   from f32 and from f64 (where a detour through f32 would round twice).
 *   With torch: dl equals torch's f32 -> f16 / bf16 on 16k values and an
 *   exact rational reference for f64 -> f16 / bf16 on 12k values (numpy for
 *   f16), and every f16/bf16 pattern -> f32.
 * - Writer/reader round trip (memory and file, the same bytes) of every
 *   dtype, a 0-d and an empty tensor, a strided view, explicit f16/bf16
 *   storage, metadata; the header is sorted, padded and aligned as io.h
 *   says; writer misuse (duplicate / bad names, integer conversion).
 * - A foreign-style file (shuffled names, data in another order, unaligned,
 *   escapes, unknown nested fields, whitespace) loads with the right values.
 * - 47 hostile headers, each refused with the expected status and a message
 *   naming the tensor or the byte offset; every truncation of a valid file
 *   is DL_ERR_TRUNCATED; every one-bit flip of its header is survived.
 * - Models: save / load into a fresh model is bit-identical (CNN with
 *   BatchNorm, f32; MLP, f64; from memory too); a bf16 save loads only with
 *   convert = 1, as the correctly rounded values; a load into a different
 *   architecture reports each missing, unexpected and mismatched name and
 *   changes nothing; partial = 1 loads what matches.
 * - PyTorch (when /usr/bin/python3 imports torch; SKIP otherwise):
 *   tools/check_safetensors.py writes torch-side files that load here (the
 *   torch models' eval outputs reproduced by the dl models), and checks the
 *   files written here (load_state_dict(strict=True) + the same eval outputs
 *   in torch, layout, bf16 bits, conversions).
 * - Atomic writes: a model save through hooks that write at most 61 bytes a
 *   call; a failure injected at every create / write / fsync / close /
 *   rename / folder-fsync call in turn leaves the previous file
 *   byte-identical and no temporary behind (a failed folder fsync leaves the
 *   complete new file); EEXIST on a temporary name tries the next one.
 * - Checkpoints: training 2 epochs (Adam, Dropout, BatchNorm, shuffled
 *   batches, a decaying lr, clipping) == 1 epoch, checkpoint, then a FRESH
 *   PROCESS (this binary run again with --io-resume-child) that builds the
 *   model with another seed, loads and trains 1 epoch: the two final
 *   checkpoints are byte-identical; resuming with the dropout rng one draw
 *   off is not. A checkpoint that does not fit (another optimizer, a value
 *   not saved) is refused with nothing changed.
 */
#include "dl.h"
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Scratch files go to build/tests/io.<pid>/ (and its py/ for the Python
 * side), removed at the end unless DL_IO_KEEP=1: two runs of the suite at
 * once do not meet. */
static char tmpdir[64], pydir[80];
/* "<tmpdir>/name" or "<pydir>/name", from a ring of buffers. */
static const char *in_dir(const char *dir, const char *name) {
  static char ring[8][200];
  static int k;
  char *b = ring[k++ % 8];
  snprintf(b, sizeof ring[0], "%s/%s", dir, name);
  return b;
}
#define TP(name) in_dir(tmpdir, name)
#define PP(name) in_dir(pydir, name)

static dl_ctx ctx;
static const char *self_path;
static int torch_ok = -1;

/* >>helpers ---------------------------------------------------------------- */

static void *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  char *b;
  long sz;
  *n = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  b = (char *)malloc((size_t)sz + 1);
  if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) { free(b); b = NULL; }
  fclose(f);
  if (b) *n = (size_t)sz;
  return b;
}
static int same_file(const char *path, const void *bytes, size_t n) {
  size_t m;
  void *b = slurp(path, &m);
  int same = b && m == n && memcmp(b, bytes, n) == 0;
  free(b);
  return same;
}
/* Files in tmpdir whose name starts with `prefix` (leftover temporaries). */
static int count_prefixed(const char *prefix) {
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  closedir(d);
  return n;
}
/* Remove the files of a folder and the folder (no subfolders but py/). */
static void remove_all(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "py")) remove(in_dir(dir, e->d_name));
  closedir(d);
  rmdir(dir);
}
static int have_torch(void) {
  if (torch_ok < 0)
    torch_ok = access("/usr/bin/python3", X_OK) == 0 &&
               system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") == 0;
  return torch_ok;
}
/* Same bits, or both NaN (with the same sign unless any_sign: torch turns
 * an f32 NaN into bf16 0xffff whatever its sign). */
static int nan_or_same(uint16_t a, uint16_t b, int bf16, int any_sign) {
  const uint16_t em = bf16 ? 0x7f80 : 0x7c00, mm = bf16 ? 0x7f : 0x3ff;
  int na = (a & em) == em && (a & mm), nb = (b & em) == em && (b & mm);
  if (na || nb) return na && nb && (any_sign || (a & 0x8000) == (b & 0x8000));
  return a == b;
}
#define bits_same_or_nan16(a, b, bf16) nan_or_same((a), (b), (bf16), 0)
#define bits_same_as_torch(a, b, bf16) nan_or_same((a), (b), (bf16), 1)
/* The dtype test tensors' element i (as tools/check_safetensors.py formula). */
static double formula(dl_dtype dt, int64_t i) {
  switch (dt) {
  case DL_I64: return (double)((i * 7919 - 20000) * 1000003);
  case DL_I32: return (double)(i * 7919 - 20000);
  case DL_I8: return (double)((i * 37) % 256 - 128);
  case DL_U8: return (double)((i * 37) % 256);
  default: return (double)((i * 37) % 101 - 50) / 8;
  }
}
static int64_t formula_i64(int64_t i) { return (i * 7919 - 20000) * 1000003; }
static void fill_formula(dl_tensor *t) {
  int64_t i;
  for (i = 0; i < t->numel; i++) {
    char *p = (char *)t->data + (size_t)i * dl_dtype_size(t->dtype);
    double v = formula(t->dtype, i);
    switch (t->dtype) {
    case DL_F16: { uint16_t h = dl_f64_to_f16(v); memcpy(p, &h, 2); break; }
    case DL_BF16: { uint16_t h = dl_f64_to_bf16(v); memcpy(p, &h, 2); break; }
    case DL_I64: { int64_t x = formula_i64(i); memcpy(p, &x, 8); break; }
    default: dl__set_at(t, i, v);
    }
  }
}
static int check_formula(const dl_tensor *t) {
  int64_t i;
  for (i = 0; i < t->numel; i++) {
    const char *p = (const char *)t->data + (size_t)i * dl_dtype_size(t->dtype);
    double v;
    if (t->dtype == DL_I64) {
      int64_t x;
      memcpy(&x, p, 8);
      if (x != formula_i64(i)) return 0;
      continue;
    }
    v = dl_dtype_is_float(t->dtype) ? dl__float_load(t->dtype, p) : dl__get_at(t, i);
    if (v != formula(t->dtype, i)) return 0;
  }
  return 1;
}

static const struct { const char *name; dl_dtype dt; int ndim; int64_t shape[3]; } dtype_tensors[] = {
    {"f32", DL_F32, 2, {2, 3}}, {"f64", DL_F64, 1, {3}}, {"f16", DL_F16, 3, {2, 2, 2}}, {"bf16", DL_BF16, 1, {5}},
    {"i64", DL_I64, 1, {4}},    {"i32", DL_I32, 2, {3, 1}}, {"i8", DL_I8, 1, {7}},         {"u8", DL_U8, 1, {3}},
    {"scalar", DL_F32, 0, {0}}, {"empty", DL_F32, 2, {0, 3}}};
enum { NDT = sizeof dtype_tensors / sizeof dtype_tensors[0] };

/* A writer holding the dtype tensors (owned in t[]) and two metadata keys. */
static void dtype_writer(dl_st_writer *w, dl_tensor **t) {
  int k;
  dl_st_writer_init(w, &ctx);
  for (k = NDT - 1; k >= 0; k--) { /* added in reverse: the writer sorts */
    t[k] = dl_tensor_make(&ctx, dtype_tensors[k].dt, dtype_tensors[k].ndim, dtype_tensors[k].shape);
    fill_formula(t[k]);
    CHECK(dl_st_writer_add(w, dtype_tensors[k].name, t[k]) == DL_OK);
  }
  CHECK(dl_st_writer_meta(w, "writer", "test_io.c") == DL_OK);
  CHECK(dl_st_writer_meta(w, "format", "pt") == DL_OK);
}

/* A little-endian u64 + header text + data as a file in memory (malloc). */
static unsigned char *make_file(const char *hdr, size_t hn, const void *data, size_t dn, size_t *n) {
  unsigned char *b = (unsigned char *)malloc(8 + hn + dn + 1);
  int k;
  for (k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)hn >> (8 * k));
  memcpy(b + 8, hdr, hn);
  if (dn) memcpy(b + 8 + hn, data, dn);
  *n = 8 + hn + dn;
  return b;
}

/* >>conversions -------------------------------------------------------------- */

static void test_half_cases(void) {
  static const struct { float x; uint16_t h, b; } f[] = {
      {1.0f, 0x3c00, 0x3f80},         {-2.0f, 0xc000, 0xc000},        {65504.0f, 0x7bff, 0x4780},
      {65519.99f, 0x7bff, 0x4780},    {65520.0f, 0x7c00, 0x4780},     {5.9604644775390625e-08f, 0x0001, 0x3380},
      {2.98023223876953125e-08f, 0x0000, 0x3300}, /* 2^-25: a tie, to even 0 */
      {4.4703483581542969e-08f, 0x0001, 0x3340},  /* 0.75 * 2^-24 */
      {8.9406967163085938e-08f, 0x0002, 0x33c0},  /* 1.5 * 2^-24: a tie, to 2 */
      {1.4901161193847656e-07f, 0x0002, 0x3420},  /* 2.5 * 2^-24: a tie, to 2 */
      {6.103515625e-05f, 0x0400, 0x3880},         {-0.0f, 0x8000, 0x8000},
      {1.00048828125f, 0x3c00, 0x3f80},           /* 1 + 2^-11: tie, to even */
      {1.00146484375f, 0x3c02, 0x3f80},           /* 1 + 3 * 2^-11 */
      {1.00390625f, 0x3c04, 0x3f80},              /* 1 + 2^-8: bf16 tie, to even */
      {1.01171875f, 0x3c0c, 0x3f82},              /* 1 + 3 * 2^-8 */
      {3.4028234663852886e38f, 0x7c00, 0x7f80},   /* FLT_MAX rounds up to inf in bf16 */
      {1e-40f, 0x0000, 0x0001}};
  size_t k;
  float inf = (float)INFINITY, nanf_ = (float)NAN;
  for (k = 0; k < sizeof f / sizeof f[0]; k++) {
    CHECK_MSG(dl_f32_to_f16(f[k].x) == f[k].h, "f16(%.9g) = 0x%04x, want 0x%04x", f[k].x, dl_f32_to_f16(f[k].x), f[k].h);
    CHECK_MSG(dl_f32_to_bf16(f[k].x) == f[k].b, "bf16(%.9g) = 0x%04x, want 0x%04x", f[k].x, dl_f32_to_bf16(f[k].x), f[k].b);
    CHECK(dl_f64_to_f16((double)f[k].x) == f[k].h && dl_f64_to_bf16((double)f[k].x) == f[k].b);
  }
  CHECK(dl_f32_to_f16(inf) == 0x7c00 && dl_f32_to_f16(-inf) == 0xfc00 && dl_f32_to_bf16(-inf) == 0xff80);
  CHECK((dl_f32_to_f16(nanf_) & 0x7e00) == 0x7e00 && (dl_f32_to_bf16(nanf_) & 0x7fc0) == 0x7fc0);
  CHECK((dl_f32_to_f16(-nanf_) & 0xfe00) == 0xfe00 && (dl_f32_to_bf16(-nanf_) & 0xffc0) == 0xffc0 &&
        (dl_f64_to_f16(-(double)NAN) & 0xfe00) == 0xfe00 && (dl_f64_to_bf16(-(double)NAN) & 0xffc0) == 0xffc0);
  CHECK(isnan(dl_f16_to_f32(0x7c01)) && isnan(dl_bf16_to_f32(0xffc1)) && dl_f16_to_f32(0xfc00) == -inf);
  /* a signalling NaN's payload survives (made quiet) */
  CHECK(dl_f32_to_bf16(dl__f32_from_bits(0x7f812345u)) == 0x7fc1);
  CHECK(dl_f16_to_f32(0x0001) == 5.9604644775390625e-08f && dl_f16_to_f32(0x7bff) == 65504.0f &&
        dl_f16_to_f32(0x3555) == 0.333251953125f && dl_f16_to_f32(0x03ff) == 6.0975551605224609e-05f);
  /* f64 goes straight to the half: through f32 these would round twice */
  CHECK(dl_f64_to_f16(1.0 + ldexp(1, -11) + ldexp(1, -40)) == 0x3c01);
  CHECK(dl_f32_to_f16((float)(1.0 + ldexp(1, -11) + ldexp(1, -40))) == 0x3c00);
  CHECK(dl_f64_to_bf16(1.0 + ldexp(1, -8) + ldexp(1, -40)) == 0x3f81);
  CHECK(dl_f64_to_f16(ldexp(1, -25) + ldexp(1, -60)) == 0x0001 && dl_f64_to_f16(65519.999999) == 0x7bff);
  CHECK(dl_f64_to_f16(1e300) == 0x7c00 && dl_f64_to_bf16(-1e300) == 0xff80 && dl_f64_to_bf16(5e-324) == 0 &&
        dl_f64_to_bf16(1e-39) == 0x000b);
}

/* Every pattern: round trip, and ties / near-ties between every pair of
 * neighbours, from f32 and from f64. */
static void test_half_exhaustive(void) {
  long bad = 0, ties = 0;
  int fmt;
  for (fmt = 0; fmt < 2; fmt++) {
    const int bf = fmt == 1;
    const uint16_t top = bf ? 0x7f7f : 0x7bff; /* largest finite */
    uint32_t h;
    for (h = 0; h < 0x10000; h++) {
      float f = bf ? dl_bf16_to_f32((uint16_t)h) : dl_f16_to_f32((uint16_t)h);
      uint16_t back = bf ? dl_f32_to_bf16(f) : dl_f32_to_f16(f), back64 = bf ? dl_f64_to_bf16(f) : dl_f64_to_f16(f);
      if (!bits_same_or_nan16(back, (uint16_t)h, bf) || !bits_same_or_nan16(back64, (uint16_t)h, bf)) bad++;
    }
    for (h = 0; h <= top; h++) {
      int s;
      for (s = 0; s <= 0x8000; s += 0x8000) {
        double a = bf ? dl_bf16_to_f32((uint16_t)h) : dl_f16_to_f32((uint16_t)h);
        double b = h == top ? (bf ? ldexp(1, 128) : 65536.0) : bf ? dl_bf16_to_f32((uint16_t)(h + 1)) : dl_f16_to_f32((uint16_t)(h + 1));
        double mid = (a + b) / 2, sg = s ? -1 : 1;
        float mf = (float)mid;
        const uint16_t lo = (uint16_t)(h | s), hi = (uint16_t)((h + 1) | s), even = (h & 1) ? hi : lo;
#define CONV32(x) (bf ? dl_f32_to_bf16(x) : dl_f32_to_f16(x))
#define CONV64(x) (bf ? dl_f64_to_bf16(x) : dl_f64_to_f16(x))
        if ((double)mf != mid) { bad++; continue; } /* midpoints are exact in f32 */
        bad += CONV32((float)(sg * mid)) != even;
        bad += CONV32((float)sg * nextafterf(mf, (float)INFINITY)) != hi;
        bad += CONV32((float)sg * nextafterf(mf, 0.0f)) != lo;
        bad += CONV64(sg * mid) != even;
        bad += CONV64(sg * nextafter(mid, INFINITY)) != hi;
        bad += CONV64(sg * nextafter(mid, 0.0)) != lo;
        ties++;
#undef CONV32
#undef CONV64
      }
    }
  }
  CHECK_MSG(bad == 0, "%ld of the exhaustive f16/bf16 checks failed", bad);
  CHECK(ties == 2 * (0x7bff + 1 + 0x7f7f + 1));
}

static void test_half_vs_torch(void) {
  dl_safetensors st;
  const dl_st_tensor *x32, *x64, *e;
  dl_tensor *h;
  long bad[6] = {0};
  int64_t i;
  if (!have_torch()) SKIP("/usr/bin/python3 with torch and numpy not found (apt-get install python3-torch)");
  if (dl_safetensors_open(&st, &ctx, PP("torch_half.safetensors")) != DL_OK)
    SKIP("%s (made by test_torch_interop, which runs first)", dl_ctx_message(&ctx));
  x32 = dl_safetensors_find(&st, "x32");
  x64 = dl_safetensors_find(&st, "x64");
  CHECK(x32 && x64 && x32->dtype == DL_F32 && x64->dtype == DL_F64);
  if (!x32 || !x64) { dl_safetensors_free(&st); return; }
  for (i = 0; i < x32->numel; i++) {
    float f;
    double d;
    uint16_t w16, wb;
    memcpy(&f, x32->data + 4 * i, 4);
    memcpy(&w16, dl_safetensors_find(&st, "x32_f16")->data + 2 * i, 2);
    memcpy(&wb, dl_safetensors_find(&st, "x32_bf16")->data + 2 * i, 2);
    bad[0] += !bits_same_as_torch(dl_f32_to_f16(f), w16, 0);
    bad[1] += !bits_same_as_torch(dl_f32_to_bf16(f), wb, 1);
    if (i < x64->numel) {
      memcpy(&d, x64->data + 8 * i, 8);
      memcpy(&w16, dl_safetensors_find(&st, "x64_f16")->data + 2 * i, 2);
      memcpy(&wb, dl_safetensors_find(&st, "x64_bf16")->data + 2 * i, 2);
      bad[2] += !bits_same_or_nan16(dl_f64_to_f16(d), w16, 0);
      bad[3] += !bits_same_or_nan16(dl_f64_to_bf16(d), wb, 1);
    }
  }
  for (i = 0; i < 65536; i++) {
    float a, b;
    memcpy(&a, dl_safetensors_find(&st, "all_f16_f32")->data + 4 * i, 4);
    memcpy(&b, dl_safetensors_find(&st, "all_bf16_f32")->data + 4 * i, 4);
    bad[4] += !(dl_f16_to_f32((uint16_t)i) == a || (isnan(a) && isnan(dl_f16_to_f32((uint16_t)i))));
    bad[5] += !(dl_bf16_to_f32((uint16_t)i) == b || (isnan(b) && isnan(dl_bf16_to_f32((uint16_t)i))));
  }
  CHECK_MSG(!bad[0] && !bad[1] && !bad[2] && !bad[3] && !bad[4] && !bad[5],
            "differences from torch/reference: f32->f16 %ld, f32->bf16 %ld, f64->f16 %ld, f64->bf16 %ld, f16->f32 %ld, bf16->f32 %ld",
            bad[0], bad[1], bad[2], bad[3], bad[4], bad[5]);
  printf("  conversions vs torch: %lld f32 and %lld f64 values, every f16/bf16 pattern: 0 differences\n",
         (long long)x32->numel, (long long)x64->numel);
  /* the reader's explicit conversion is the same rounding; without convert it refuses */
  h = dl_tensor_make(&ctx, DL_F16, 1, x32->shape);
  CHECK(dl_safetensors_read(&st, x32, h, 0) == DL_ERR_DTYPE && strstr(dl_ctx_message(&ctx), "'x32'") &&
        strstr(dl_ctx_message(&ctx), "convert"));
  CHECK(dl_safetensors_read(&st, x32, h, 1) == DL_OK);
  e = dl_safetensors_find(&st, "x32_f16");
  for (i = 0, bad[0] = 0; i < h->numel; i++) {
    uint16_t a, b;
    memcpy(&a, (char *)h->data + 2 * i, 2);
    memcpy(&b, e->data + 2 * i, 2);
    bad[0] += !bits_same_as_torch(a, b, 0);
  }
  CHECK(bad[0] == 0);
  dl_tensor_free(h);
  dl_safetensors_free(&st);
}

/* >>writer and reader ---------------------------------------------------------- */

static void test_roundtrip(void) {
  dl_st_writer w;
  dl_tensor *t[NDT], *base, *conv;
  dl_tensor view;
  dl_safetensors st;
  void *buf;
  size_t n, pos = 0;
  uint64_t sz;
  int k, sorted = 1, aligned = 1;
  const char *hdr;
  dtype_writer(&w, t);
  /* a transposed (strided) view is written in its logical order */
  base = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3));
  fill_formula(base);
  view = dl_view_transpose(base, 0, 1);
  CHECK(dl_st_writer_add(&w, "view_t", &view) == DL_OK);
  /* explicit conversions */
  CHECK(dl_st_writer_add_as(&w, "as_f16", t[0], DL_F16) == DL_OK);
  CHECK(dl_st_writer_add_as(&w, "as_bf16", t[1], DL_BF16) == DL_OK);
  CHECK(dl_st_writer_size(&w, &sz) == DL_OK);
  CHECK(dl_st_writer_to_memory(&w, &buf, &n) == DL_OK && n == sz);
  CHECK(dl_safetensors_parse(&st, &ctx, buf, n) == DL_OK);
  CHECK(st.ntensors == NDT + 3 && st.nmeta == 2);
  CHECK(dl_safetensors_meta(&st, "writer") && strcmp(dl_safetensors_meta(&st, "writer"), "test_io.c") == 0 &&
        !dl_safetensors_meta(&st, "nope"));
  for (k = 0; k < NDT; k++) {
    const dl_st_tensor *e = dl_safetensors_find(&st, dtype_tensors[k].name);
    dl_tensor *g = dl_safetensors_get(&st, dtype_tensors[k].name);
    CHECK_MSG(e && g && e->dtype == dtype_tensors[k].dt && dl_tensor_same_shape(g, t[k]) && check_formula(g),
              "tensor %s", dtype_tensors[k].name);
    dl_tensor_free(g);
  }
  {
    dl_tensor *g = dl_safetensors_get(&st, "view_t"), *f16 = dl_safetensors_get(&st, "as_f16"),
              *b16 = dl_safetensors_get(&st, "as_bf16");
    int64_t i, j;
    int ok = g && g->ndim == 2 && g->shape[0] == 3 && g->shape[1] == 2;
    for (i = 0; ok && i < 3; i++)
      for (j = 0; j < 2; j++) ok &= dl_f32(g)[i * 2 + j] == dl_f32(base)[j * 3 + i];
    CHECK(ok);
    CHECK(f16 && f16->dtype == DL_F16 && check_formula(f16) && b16 && b16->dtype == DL_BF16 && check_formula(b16));
    /* read back into f32 with convert */
    conv = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3));
    CHECK(dl_safetensors_read(&st, dl_safetensors_find(&st, "as_f16"), conv, 1) == DL_OK && check_formula(conv));
    dl_tensor_free(conv);
    dl_tensor_free(g);
    dl_tensor_free(f16);
    dl_tensor_free(b16);
  }
  /* the header: __metadata__ first, names sorted, padded with spaces to 8 */
  hdr = (const char *)buf + 8;
  CHECK(strncmp(hdr, "{\"__metadata__\":{\"format\":\"pt\",\"writer\":\"test_io.c\"}", 52) == 0);
  for (k = 0; k < st.ntensors; k++) {
    char q[64];
    const char *at;
    snprintf(q, sizeof q, "\"%s\":{", st.tensors[k].name);
    at = strstr(hdr, q);
    sorted &= at != NULL && (size_t)(at - hdr) >= pos;
    pos = at ? (size_t)(at - hdr) : pos;
    aligned &= st.tensors[k].begin % dl_dtype_size(st.tensors[k].dtype) == 0 &&
               ((st.tensors[k].end - st.tensors[k].begin) % 8 != 0 || st.tensors[k].begin % 8 == 0);
  }
  CHECK_MSG(sorted, "names are not in sorted order in the header");
  CHECK_MSG(aligned, "a tensor is not aligned to its element size / 8 bytes");
  CHECK((8 + st.header_len) % 8 == 0);
  {
    size_t e = st.header_len;
    while (e > 0 && hdr[e - 1] == ' ') e--;
    CHECK(hdr[e - 1] == '}' && st.header_len - e < 8);
  }
  /* the data is not in the header's order: 8-byte multiples first */
  CHECK(dl_safetensors_find(&st, "f64")->begin == 0 && dl_safetensors_find(&st, "u8")->end == st.data_len);
  /* the same bytes through a file */
  CHECK(dl_st_writer_save(&w, TP("roundtrip.safetensors"), NULL) == DL_OK);
  CHECK(same_file(TP("roundtrip.safetensors"), buf, n));
  {
    dl_safetensors fs;
    CHECK(dl_safetensors_open(&fs, &ctx, TP("roundtrip.safetensors")) == DL_OK && fs.ntensors == st.ntensors);
    dl_safetensors_free(&fs);
    CHECK(dl_safetensors_open(&fs, &ctx, TP("does-not-exist")) == DL_ERR_IO &&
          strstr(dl_ctx_message(&ctx), "does-not-exist"));
  }
  dl_safetensors_free(&st);
  dl_free(&ctx, buf);
  /* misuse */
  CHECK(dl_st_writer_add(&w, "f32", t[0]) == DL_OK); /* a duplicate: found at save */
  CHECK(dl_st_writer_to_memory(&w, &buf, &n) == DL_ERR_ARG && strstr(dl_ctx_message(&ctx), "'f32' added twice") && !buf);
  CHECK(dl_st_writer_save(&w, TP("roundtrip.safetensors"), NULL) == DL_ERR_ARG); /* sticky */
  dl_st_writer_free(&w);
  dl_st_writer_init(&w, &ctx);
  CHECK(dl_st_writer_add(&w, "__metadata__", t[0]) == DL_ERR_ARG);
  dl_st_writer_free(&w);
  dl_st_writer_init(&w, &ctx);
  CHECK(dl_st_writer_add(&w, "bad\xff", t[0]) == DL_ERR_ARG);
  dl_st_writer_free(&w);
  dl_st_writer_init(&w, &ctx);
  CHECK(dl_st_writer_add_as(&w, "i", t[4], DL_F32) == DL_ERR_DTYPE && strstr(dl_ctx_message(&ctx), "'i'"));
  CHECK(dl_st_writer_add(&w, "ok", t[0]) == DL_ERR_DTYPE); /* sticky */
  dl_st_writer_free(&w);
  /* names with quotes, control characters and non-ASCII survive */
  dl_st_writer_init(&w, &ctx);
  CHECK(dl_st_writer_add(&w, "q\"\\\n\x01 \xc3\xa9", t[0]) == DL_OK);
  CHECK(dl_st_writer_to_memory(&w, &buf, &n) == DL_OK && dl_safetensors_parse(&st, &ctx, buf, n) == DL_OK &&
        st.ntensors == 1 && strcmp(st.tensors[0].name, "q\"\\\n\x01 \xc3\xa9") == 0);
  dl_safetensors_free(&st);
  dl_free(&ctx, buf);
  dl_st_writer_free(&w);
  for (k = 0; k < NDT; k++) dl_tensor_free(t[k]);
  dl_tensor_free(base);
}

/* Hand-written like another writer would: shuffled header, data in another
 * order, unaligned offsets, escapes, unknown fields, whitespace. */
static void test_foreign_layout(void) {
  static const char hdr[] =
      "{ \"z\\u00e9ta\" : {\"shape\":[2], \"data_offsets\":[5,13],\n \"dtype\":\"F32\"},\n"
      "  \"__metadata__\" : {\"k\\/1\":\"v\\ud83d\\ude00\", \"empty\":\"\"},\n"
      "  \"alpha\":{\"x-extra\":{\"a\":[1,2.5e-3,-0,true,false,null,{}]},\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[0,5]},"
      "  \"mid\" :{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[13,21]} ,\"none\":{\"dtype\":\"F64\",\"shape\":[0],\"data_offsets\":[21,21]}\t}  ";
  unsigned char data[21];
  float zf[2] = {1.5f, -2.25f};
  int64_t mv = -1234567890123LL;
  size_t n;
  unsigned char *b;
  dl_safetensors st;
  memcpy(data, "abcde", 5);
  memcpy(data + 5, zf, 8);
  memcpy(data + 13, &mv, 8);
  b = make_file(hdr, sizeof hdr - 1, data, sizeof data, &n);
  CHECK_MSG(dl_safetensors_parse(&st, &ctx, b, n) == DL_OK, "%s", dl_ctx_message(&ctx));
  if (st.ntensors == 4) {
    dl_tensor *z = dl_safetensors_get(&st, "z\xc3\xa9ta"), *a = dl_safetensors_get(&st, "alpha"), *m = dl_safetensors_get(&st, "mid");
    CHECK(strcmp(st.tensors[0].name, "alpha") == 0 && strcmp(st.tensors[3].name, "z\xc3\xa9ta") == 0);
    CHECK(z && dl_f32(z)[0] == 1.5f && dl_f32(z)[1] == -2.25f && st.tensors[3].begin == 5);
    CHECK(a && memcmp(a->data, "abcde", 5) == 0 && m && m->ndim == 0 && dl_i64(m)[0] == mv);
    CHECK(dl_safetensors_meta(&st, "k/1") && strcmp(dl_safetensors_meta(&st, "k/1"), "v\xf0\x9f\x98\x80") == 0 &&
          dl_safetensors_meta(&st, "empty") && !*dl_safetensors_meta(&st, "empty"));
    CHECK(dl_safetensors_find(&st, "none") && dl_safetensors_find(&st, "none")->numel == 0);
    dl_tensor_free(z);
    dl_tensor_free(a);
    dl_tensor_free(m);
  }
  dl_safetensors_free(&st);
  free(b);
}

/* >>hostile files ----------------------------------------------------------------- */

typedef struct hostile {
  const char *what, *hdr;
  size_t data; /* bytes of data after the header */
  dl_status st;
  const char *frag1, *frag2;
} hostile;

static void test_hostile_headers(void) {
  static char deep[400];
  static const hostile cases[] = {
      {"not an object", "[1]", 0, DL_ERR_FORMAT, "does not start with '{'", "file offset 8"},
      {"unterminated string", "{\"a", 0, DL_ERR_FORMAT, "unterminated string", "header byte 3"},
      {"bad escape", "{\"a\\x\":1}", 0, DL_ERR_FORMAT, "invalid escape", "header byte 3"},
      {"lone high surrogate", "{\"\\ud800\":1}", 0, DL_ERR_FORMAT, "unpaired UTF-16 surrogate", NULL},
      {"lone low surrogate", "{\"\\udc00x\":1}", 0, DL_ERR_FORMAT, "unpaired UTF-16 surrogate \\udc00", NULL},
      {"short \\u", "{\"\\u12\":1}", 0, DL_ERR_FORMAT, "bad \\u escape", NULL},
      {"invalid UTF-8", "{\"a\xff\":1}", 0, DL_ERR_FORMAT, "invalid UTF-8", "header byte 3"},
      {"overlong UTF-8", "{\"\xc0\xaf\":1}", 0, DL_ERR_FORMAT, "invalid UTF-8", NULL},
      {"UTF-8 surrogate", "{\"\xed\xa0\x80\":1}", 0, DL_ERR_FORMAT, "invalid UTF-8", NULL},
      {"control character", "{\"a\nb\":1}", 0, DL_ERR_FORMAT, "control character 0x0a", NULL},
      {"NUL escape", "{\"a\\u0000\":1}", 0, DL_ERR_FORMAT, "NUL character", NULL},
      {"trailing comma", "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},}", 4, DL_ERR_FORMAT,
       "expected a string", NULL},
      {"missing colon", "{\"a\" {}}", 0, DL_ERR_FORMAT, "expected ':' after a tensor name", "header byte 5"},
      {"garbage after the object", "{} x", 0, DL_ERR_FORMAT, "after the header's closing brace", "header byte 3"},
      {"entry not an object", "{\"ab\":7}", 0, DL_ERR_FORMAT, "expected '{'", "tensor 'ab'"},
      {"empty entry", "{\"a\":{}}", 0, DL_ERR_FORMAT, "no 'dtype'", "tensor 'a'"},
      {"no shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, DL_ERR_FORMAT, "no 'shape'", "tensor 'a'"},
      {"no offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[]}}", 4, DL_ERR_FORMAT, "no 'data_offsets'", "tensor 'a'"},
      {"field twice", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, DL_ERR_FORMAT,
       "'dtype' appears twice", "tensor 'a'"},
      {"unknown dtype", "{\"w\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, DL_ERR_UNSUPPORTED,
       "dtype 'BOOL'", "tensor 'w'"},
      {"dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, DL_ERR_FORMAT,
       "expected a string", "tensor 'w'"},
      {"shape not an array", "{\"w\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1, DL_ERR_FORMAT,
       "expected '['", NULL},
      {"leading zero", "{\"w\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1, DL_ERR_FORMAT, "leading zero", NULL},
      {"negative size", "{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, DL_ERR_FORMAT, "negative", NULL},
      {"fractional size", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1, DL_ERR_FORMAT,
       "must be an integer", NULL},
      {"exponent size", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1e0],\"data_offsets\":[0,1]}}", 1, DL_ERR_FORMAT,
       "must be an integer", NULL},
      {"offset past 2^64", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,18446744073709551616]}}", 1,
       DL_ERR_OVERFLOW, "does not fit in 64 bits", "tensor 'w'"},
      {"size past int64", "{\"w\":{\"dtype\":\"U8\",\"shape\":[9223372036854775808],\"data_offsets\":[0,1]}}", 1,
       DL_ERR_OVERFLOW, "does not fit in int64", NULL},
      {"three offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, DL_ERR_FORMAT,
       "two integers", NULL},
      {"nine dims", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
       DL_ERR_UNSUPPORTED, "more than 8 dimensions", NULL},
      {"element count overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,4]}}", 4,
       DL_ERR_OVERFLOW, "more elements than fit", "tensor 'w'"},
      {"a zero size hiding an overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[0,4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
       DL_ERR_OVERFLOW, "more elements than fit", "tensor 'w'"},
      {"byte count overflow", "{\"w\":{\"dtype\":\"F64\",\"shape\":[1152921504606846976],\"data_offsets\":[0,8]}}", 8,
       DL_ERR_OVERFLOW, "overflow a byte count", "tensor 'w'"},
      {"begin after end", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, DL_ERR_FORMAT,
       "end before they begin", "tensor 'w'"},
      {"size mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, DL_ERR_FORMAT,
       "take 8 bytes, its data_offsets [0, 4] span 4", "tensor 'w'"},
      {"duplicate name", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
       2, DL_ERR_FORMAT, "'a' appears twice", "header bytes 1 and"},
      {"duplicate metadata key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, DL_ERR_FORMAT, "key 'k' appears twice", NULL},
      {"metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, DL_ERR_FORMAT, "'__metadata__' appears twice", NULL},
      {"metadata not a string", "{\"__metadata__\":{\"k\":1}}", 0, DL_ERR_FORMAT, "value of 'k' is not a string", NULL},
      {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
       8, DL_ERR_FORMAT, "'b' (data_offsets [4, 8]) overlaps tensor 'a'", "file offset"},
      {"gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
       12, DL_ERR_FORMAT, "a gap of 4 bytes at data bytes [4, 8)", "'b'"},
      {"trailing bytes", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, DL_ERR_FORMAT,
       "2 trailing bytes", "file offset"},
      {"data without tensors", "{}", 3, DL_ERR_FORMAT, "3 bytes after the header but no tensor", NULL},
      {"truncated data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 5, DL_ERR_TRUNCATED,
       "truncated: tensor 'a' ends at data byte 8", NULL},
      {"bad literal", "{\"a\":{\"x\":tru,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, DL_ERR_FORMAT, "bad literal", NULL},
      {"bad number", "{\"a\":{\"x\":-.5,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, DL_ERR_FORMAT, "bad number", NULL},
      {"too deep", deep, 1, DL_ERR_FORMAT, "nested deeper than 64", "tensor 'a'"},
  };
  size_t k, n;
  int d;
  unsigned char zeros[64] = {0};
  /* an unknown field nested 70 deep */
  strcpy(deep, "{\"a\":{\"x\":");
  for (d = 0; d < 70; d++) strcat(deep, "[");
  for (d = 0; d < 70; d++) strcat(deep, "]");
  strcat(deep, ",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
  for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const hostile *c = &cases[k];
    unsigned char *b = make_file(c->hdr, strlen(c->hdr), zeros, c->data, &n);
    dl_safetensors st;
    dl_status s;
    dl_ctx_clear(&ctx);
    s = dl_safetensors_parse(&st, &ctx, b, n);
    CHECK_MSG(s == c->st && strstr(dl_ctx_message(&ctx), c->frag1) && (!c->frag2 || strstr(dl_ctx_message(&ctx), c->frag2)),
              "%s: status %s, message \"%s\"", c->what, dl_status_str(s), dl_ctx_message(&ctx));
    CHECK(st.ntensors == 0 && st.tensors == NULL && st.strings == NULL);
    free(b);
  }
  /* the length field itself */
  {
    unsigned char b[16] = {0};
    dl_safetensors st;
    CHECK(dl_safetensors_parse(&st, &ctx, b, 5) == DL_ERR_TRUNCATED && strstr(dl_ctx_message(&ctx), "fewer than the 8-byte"));
    b[0] = 0x00; b[1] = 0xc2; b[2] = 0xeb; b[3] = 0x0b; /* 200,000,000 */
    CHECK(dl_safetensors_parse(&st, &ctx, b, 16) == DL_ERR_FORMAT && strstr(dl_ctx_message(&ctx), "over the cap"));
    memset(b, 0, 8);
    b[0] = 100;
    CHECK(dl_safetensors_parse(&st, &ctx, b, 16) == DL_ERR_TRUNCATED && strstr(dl_ctx_message(&ctx), "runs past the end"));
    b[0] = 0;
    CHECK(dl_safetensors_parse(&st, &ctx, b, 8) == DL_ERR_FORMAT);
    memset(b, 0xff, 8);
    CHECK(dl_safetensors_parse(&st, &ctx, b, 16) == DL_ERR_FORMAT);
  }
  /* valid edge cases: empty file object, zero-size tensors sharing an offset */
  {
    static const char ok1[] = "{}", ok2[] = "{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                                            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    unsigned char *b = make_file(ok1, 2, zeros, 0, &n);
    dl_safetensors st;
    CHECK(dl_safetensors_parse(&st, &ctx, b, n) == DL_OK && st.ntensors == 0);
    dl_safetensors_free(&st);
    free(b);
    b = make_file(ok2, sizeof ok2 - 1, zeros, 4, &n);
    CHECK(dl_safetensors_parse(&st, &ctx, b, n) == DL_OK && st.ntensors == 2);
    dl_safetensors_free(&st);
    free(b);
  }
  printf("  %d hostile headers refused with the expected status and message\n", (int)(sizeof cases / sizeof cases[0]));
}

/* Every prefix of a valid file is truncated; every one-bit flip of its
 * header is either a valid file or a clean refusal. */
static void test_truncation_and_flips(void) {
  dl_st_writer w;
  dl_tensor *t[NDT];
  void *buf;
  size_t n, len;
  long wrong = 0, ok = 0, refused = 0;
  int k;
  dtype_writer(&w, t);
  CHECK(dl_st_writer_to_memory(&w, &buf, &n) == DL_OK);
  for (len = 0; len < n; len++) {
    dl_safetensors st;
    unsigned char *c = (unsigned char *)malloc(len ? len : 1);
    memcpy(c, buf, len);
    wrong += dl_safetensors_parse(&st, &ctx, c, len) != DL_ERR_TRUNCATED;
    free(c);
  }
  CHECK_MSG(wrong == 0, "%ld prefixes were not refused as truncated", wrong);
  {
    const uint64_t hl = dl__io_le64((const unsigned char *)buf);
    size_t i;
    unsigned char *c = (unsigned char *)malloc(n);
    for (i = 0; i < 8 + hl; i++)
      for (k = 0; k < 8; k++) {
        dl_safetensors st;
        dl_status s;
        memcpy(c, buf, n);
        c[i] ^= (unsigned char)(1u << k);
        s = dl_safetensors_parse(&st, &ctx, c, n);
        if (s == DL_OK) {
          int j;
          ok++;
          for (j = 0; j < st.ntensors; j++) { /* whatever it says must be readable */
            dl_tensor *g = dl_safetensors_get(&st, st.tensors[j].name);
            wrong += g == NULL;
            dl_tensor_free(g);
          }
        } else refused++;
        dl_safetensors_free(&st);
      }
    free(c);
  }
  CHECK(wrong == 0 && refused > ok && ok > 0);
  printf("  %zu truncations refused; %ld one-bit header flips: %ld refused, %ld still valid\n", n, ok + refused, refused, ok);
  dl_free(&ctx, buf);
  dl_st_writer_free(&w);
  for (k = 0; k < NDT; k++) dl_tensor_free(t[k]);
}

/* >>models ---------------------------------------------------------------------- */

static dl_model *make_mlp(dl_dtype dt, uint64_t seed, int out) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = dt, .seed = seed});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 6, .out = 8});
  dl_batchnorm1d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 8});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_dropout_make(m, NULL, NULL, 0.2);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 8, .out = out});
  CHECK(dl_model_status(m) == DL_OK);
  return m;
}
static dl_model *make_cnn(uint64_t seed) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = seed});
  dl_layer *f = dl_sequential_make(m, NULL, "features");
  dl_conv2d_make(m, f, NULL, &(dl_conv2d_desc){.in = 2, .out = 4, .kernel = 3, .padding = 1});
  dl_batchnorm2d_make(m, f, NULL, &(dl_batchnorm_desc){.features = 4});
  dl_act_make(m, f, NULL, DL_ACT_RELU, 0);
  dl_maxpool2d_make(m, f, NULL, &(dl_pool2d_desc){.kernel = 2});
  dl_flatten_make(m, NULL, "flat", 1);
  dl_linear_make(m, NULL, "classifier", &(dl_linear_desc){.in = 16, .out = 5});
  CHECK(dl_model_status(m) == DL_OK);
  return m;
}
/* 3 SGD steps in train mode (so BatchNorm's running statistics and
 * num_batches_tracked move), then eval mode. */
static void train3(dl_model *m, int cnn, int ncls) {
  dl_optim *o = dl_optim_sgd(m, &(dl_sgd_cfg){.lr = 0.1});
  dl_tape tp;
  dl_rng r = dl_rng_make(3);
  dl_tensor *x = cnn ? dl_tensor_make(&ctx, m->dtype, DL_SHAPE(8, 2, 4, 4)) : dl_tensor_make(&ctx, m->dtype, DL_SHAPE(8, 6));
  dl_tensor *y = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(8));
  int s;
  int64_t i;
  for (i = 0; i < 8; i++) dl_i64(y)[i] = i % ncls;
  CHECK(o && dl_tape_init(&tp, &ctx, 0) == DL_OK);
  dl_model_train(m, 1);
  for (s = 0; s < 3; s++) {
    dl_tensor_rand_normal(x, &r, 0, 1);
    dl_train_step(o, &tp, dl_t_cross_entropy(&tp, dl_model_forward(m, &tp, x), y, 0, DL_REDUCE_MEAN), NULL);
    dl_tape_rewind(&tp);
  }
  dl_model_train(m, 0);
  dl_tape_free(&tp);
  dl_optim_free(o);
  dl_tensor_free(x);
  dl_tensor_free(y);
}
/* y = m(x) in eval mode, an owned copy. */
static dl_tensor *eval(dl_model *m, dl_tensor *x) {
  dl_tape tp;
  dl_tensor *y, *c;
  dl_tape_init(&tp, &ctx, 0);
  dl_model_train(m, 0);
  dl_no_grad_begin(&tp);
  y = dl_model_forward(m, &tp, x);
  c = dl_tensor_make(&ctx, y->dtype, y->ndim, y->shape);
  dl_tensor_copy(c, y);
  dl_no_grad_end(&tp);
  dl_tape_free(&tp);
  return c;
}
static int models_equal(const dl_model *a, const dl_model *b) {
  int i;
  if (a->nparams != b->nparams) return 0;
  for (i = 0; i < a->nparams; i++) {
    const dl_tensor *x = &a->params[i]->t, *y = &b->params[i]->t;
    if (strcmp(a->params[i]->name, b->params[i]->name) || x->dtype != y->dtype || !dl_tensor_same_shape(x, y) ||
        memcmp(x->data, y->data, (size_t)x->numel * dl_dtype_size(x->dtype)))
      return 0;
  }
  return 1;
}
/* A bitwise snapshot of every parameter and buffer (malloc). */
static void *snapshot(const dl_model *m, size_t *n) {
  int i;
  size_t at = 0;
  char *b;
  *n = 0;
  for (i = 0; i < m->nparams; i++) *n += (size_t)m->params[i]->t.numel * dl_dtype_size(m->params[i]->t.dtype);
  b = (char *)malloc(*n + 1);
  for (i = 0; i < m->nparams; i++) {
    size_t k = (size_t)m->params[i]->t.numel * dl_dtype_size(m->params[i]->t.dtype);
    memcpy(b + at, m->params[i]->t.data, k);
    at += k;
  }
  return b;
}
static int snapshot_same(const dl_model *m, const void *s, size_t n) {
  size_t k;
  void *now = snapshot(m, &k);
  int same = k == n && memcmp(now, s, n) == 0;
  free(now);
  return same;
}

static void test_model_roundtrip(void) {
  dl_model *a = make_cnn(5), *b = make_cnn(6), *c, *d;
  dl_load_report rep;
  dl_safetensors st;
  void *buf, *snap;
  size_t n, sn;
  int i, conv_ok = 1;
  train3(a, 1, 5);
  CHECK(!models_equal(a, b));
  CHECK(dl_model_save(a, TP("cnn.safetensors"), NULL) == DL_OK);
  CHECK(dl_model_load(b, TP("cnn.safetensors"), &rep) == DL_OK);
  CHECK(models_equal(a, b) && rep.nloaded == a->nparams && rep.nloaded == 9 && !rep.nmissing && !rep.nunexpected &&
        !rep.nmismatch && !rep.text[0]);
  CHECK(dl_i64(dl_model_tensor(b, "features.1.num_batches_tracked"))[0] == 3);
  /* the memory serialisation is the file's bytes */
  CHECK(dl_model_save_memory(a, NULL, &buf, &n) == DL_OK && same_file(TP("cnn.safetensors"), buf, n));
  c = make_cnn(7);
  CHECK(dl_safetensors_parse(&st, &ctx, buf, n) == DL_OK && dl_model_load_st(c, &st, NULL, NULL) == DL_OK &&
        models_equal(a, c));
  CHECK(dl_safetensors_meta(&st, "format") && strcmp(dl_safetensors_meta(&st, "format"), "pt") == 0);
  dl_safetensors_free(&st);
  dl_free(&ctx, buf);
  /* f64 */
  {
    dl_model *p = make_mlp(DL_F64, 1, 3), *q = make_mlp(DL_F64, 2, 3);
    const char *meta[] = {"epoch", "3", "note", "f64"};
    train3(p, 0, 3);
    CHECK(dl_model_save(p, TP("mlp64.safetensors"), &(dl_save_desc){.meta = meta, .nmeta = 2}) == DL_OK);
    CHECK(dl_model_load(q, TP("mlp64.safetensors"), NULL) == DL_OK && models_equal(p, q));
    CHECK(dl_safetensors_open(&st, &ctx, TP("mlp64.safetensors")) == DL_OK && st.nmeta == 3 &&
          strcmp(dl_safetensors_meta(&st, "epoch"), "3") == 0);
    dl_safetensors_free(&st);
    /* f64 file into an f32 model: a dtype mismatch, unless converted */
    d = make_mlp(DL_F32, 2, 3);
    snap = snapshot(d, &sn);
    CHECK(dl_model_load(d, TP("mlp64.safetensors"), &rep) == DL_ERR_DTYPE && rep.nmismatch == 8 && snapshot_same(d, snap, sn));
    CHECK(dl_model_load_desc(d, TP("mlp64.safetensors"), &(dl_load_desc){.convert = 1}, &rep) == DL_OK && rep.nloaded == 9);
    for (i = 0; i < d->nparams; i++) {
      const dl_tensor *x = &d->params[i]->t, *y = &p->params[i]->t;
      int64_t j;
      for (j = 0; j < x->numel && x->dtype == DL_F32; j++) conv_ok &= dl_f32(x)[j] == (float)dl_f64(y)[j];
    }
    CHECK(conv_ok);
    free(snap);
    dl_model_free(d);
    dl_model_free(p);
    dl_model_free(q);
  }
  /* bf16 storage on request */
  d = make_cnn(8);
  snap = snapshot(d, &sn);
  CHECK(dl_model_save(a, TP("cnn_bf16.safetensors"), &(dl_save_desc){.cast = DL_ST_AS_BF16}) == DL_OK);
  CHECK(dl_model_load(d, TP("cnn_bf16.safetensors"), &rep) == DL_ERR_DTYPE && rep.nmismatch == 8 && snapshot_same(d, snap, sn));
  CHECK(strstr(rep.text, "mismatch: features.0.weight: file BF16[4, 2, 3, 3], model f32[4, 2, 3, 3]") != NULL);
  CHECK(dl_model_load_desc(d, TP("cnn_bf16.safetensors"), &(dl_load_desc){.convert = 1}, &rep) == DL_OK);
  for (i = 0, conv_ok = 1; i < d->nparams; i++) {
    const dl_tensor *x = &d->params[i]->t, *y = &a->params[i]->t;
    int64_t j;
    for (j = 0; j < x->numel && x->dtype == DL_F32; j++) conv_ok &= dl_f32(x)[j] == dl_bf16_to_f32(dl_f32_to_bf16(dl_f32(y)[j]));
    if (x->dtype == DL_I64) conv_ok &= dl_i64(x)[0] == 3;
  }
  CHECK(conv_ok);
  free(snap);
  dl_model_free(a);
  dl_model_free(b);
  dl_model_free(c);
  dl_model_free(d);
}

static void test_model_load_report(void) {
  dl_model *a = make_mlp(DL_F32, 1, 3), *b, *c;
  dl_st_writer w;
  dl_load_report rep;
  dl_tensor *extra = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2));
  void *snap;
  size_t sn;
  dl_status s;
  /* the file: a's tensors plus one nothing expects */
  dl_st_writer_init(&w, &ctx);
  CHECK(dl_st_writer_add_model(&w, a, DL_ST_KEEP) == DL_OK && dl_st_writer_add(&w, "head.weight", extra) == DL_OK);
  CHECK(dl_st_writer_save(&w, TP("report.safetensors"), NULL) == DL_OK);
  dl_st_writer_free(&w);
  /* b: the last layer 8 -> 4 (shape mismatch) and one more layer (missing) */
  b = make_mlp(DL_F32, 2, 4);
  dl_linear_make(b, NULL, NULL, &(dl_linear_desc){.in = 4, .out = 2});
  snap = snapshot(b, &sn);
  dl_ctx_clear(&ctx);
  s = dl_model_load(b, TP("report.safetensors"), &rep);
  CHECK(s == DL_ERR_SHAPE && rep.nmismatch == 2 && rep.nmissing == 2 && rep.nunexpected == 1 && rep.nloaded == 0);
  CHECK(strstr(rep.text, "mismatch: 4.weight: file F32[3, 8], model f32[4, 8]") && strstr(rep.text, "mismatch: 4.bias") &&
        strstr(rep.text, "missing: 5.weight (model f32[2, 4])") && strstr(rep.text, "missing: 5.bias") &&
        strstr(rep.text, "unexpected: head.weight (file F32[2])"));
  CHECK(strstr(dl_ctx_message(&ctx), "report.safetensors") && strstr(dl_ctx_message(&ctx), "nothing was changed") &&
        strstr(dl_ctx_message(&ctx), "2 missing, 1 unexpected, 2 mismatched"));
  CHECK_MSG(snapshot_same(b, snap, sn), "a failed load changed the model");
  /* partial: mismatches still fail, and nothing changes */
  CHECK(dl_model_load_desc(b, TP("report.safetensors"), &(dl_load_desc){.partial = 1}, &rep) == DL_ERR_SHAPE &&
        snapshot_same(b, snap, sn));
  free(snap);
  /* c: a plus a layer: strict fails (missing 5.*, unexpected head.weight), partial loads the rest */
  c = make_mlp(DL_F32, 3, 3);
  dl_linear_make(c, NULL, NULL, &(dl_linear_desc){.in = 3, .out = 2});
  snap = snapshot(c, &sn);
  CHECK(dl_model_load(c, TP("report.safetensors"), &rep) == DL_ERR_ARG && rep.nmissing == 2 && rep.nunexpected == 1 &&
        snapshot_same(c, snap, sn));
  CHECK(dl_model_load_desc(c, TP("report.safetensors"), &(dl_load_desc){.partial = 1}, &rep) == DL_OK &&
        rep.nloaded == 9 && rep.nmissing == 2 && rep.nunexpected == 1);
  {
    int i, same = 1;
    for (i = 0; i < a->nparams; i++)
      same &= memcmp(a->params[i]->t.data, c->params[i]->t.data, (size_t)a->params[i]->t.numel * dl_dtype_size(a->params[i]->t.dtype)) == 0;
    /* 5.weight [2, 3] and 5.bias [2] are the last 32 bytes of the snapshot: untouched */
    CHECK(same && memcmp(dl_model_tensor(c, "5.weight")->data, (char *)snap + sn - 32, 24) == 0);
  }
  free(snap);
  snap = snapshot(c, &sn);
  /* a file that is not there, a corrupt one */
  CHECK(dl_model_load(c, TP("nope.safetensors"), NULL) == DL_ERR_IO);
  {
    FILE *f = fopen(TP("corrupt.safetensors"), "wb");
    fwrite("\x10\0\0\0\0\0\0\0{\"a\":1}        ", 1, 24, f);
    fclose(f);
    CHECK(dl_model_load(c, TP("corrupt.safetensors"), &rep) == DL_ERR_FORMAT && snapshot_same(c, snap, sn) &&
          strstr(dl_ctx_message(&ctx), "corrupt.safetensors: safetensors:"));
  }
  free(snap);
  dl_tensor_free(extra);
  dl_model_free(a);
  dl_model_free(b);
  dl_model_free(c);
}

/* >>PyTorch ------------------------------------------------------------------------ */

static void write_io(const char *path, dl_tensor *x, dl_tensor *y) {
  dl_st_writer w;
  dl_st_writer_init(&w, &ctx);
  dl_st_writer_add(&w, "x", x);
  dl_st_writer_add(&w, "y", y);
  CHECK(dl_st_writer_save(&w, path, NULL) == DL_OK);
  dl_st_writer_free(&w);
}
static double max_rel(const dl_tensor *a, const dl_tensor *b) {
  double d = 0, s = 0;
  int64_t i;
  for (i = 0; i < a->numel; i++) {
    d = fmax(d, fabs(dl__get_at(a, i) - dl__get_at(b, i)));
    s = fmax(s, fabs(dl__get_at(b, i)));
  }
  return d / (s > 0 ? s : 1);
}

static void test_torch_interop(void) {
  dl_safetensors st;
  int k, cnn, rc;
  if (!have_torch()) SKIP("/usr/bin/python3 with torch and numpy not found (apt-get install python3-torch python3-numpy)");
  {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/check_safetensors.py make %s", pydir);
    rc = system(cmd);
  }
  CHECK_MSG(rc == 0, "tools/check_safetensors.py make failed (%d)", rc);
  /* torch -> dl: every dtype, shuffled, unaligned, escaped names, metadata */
  CHECK_MSG(dl_safetensors_open(&st, &ctx, PP("torch_dtypes.safetensors")) == DL_OK, "%s", dl_ctx_message(&ctx));
  for (k = 0; k < NDT; k++) {
    dl_tensor *g = dl_safetensors_get(&st, dtype_tensors[k].name);
    CHECK_MSG(g && g->dtype == dtype_tensors[k].dt && g->ndim == dtype_tensors[k].ndim && check_formula(g), "torch's %s",
              dtype_tensors[k].name);
    dl_tensor_free(g);
  }
  {
    const dl_st_tensor *u = dl_safetensors_find(&st, "\xe5\x90\x8d\xe5\x89\x8d/\xf0\x9f\x98\x80");
    CHECK(u && u->numel == 2 && u->data[0] == 7 && u->data[1] == 9);
    CHECK(dl_safetensors_meta(&st, "note") && strcmp(dl_safetensors_meta(&st, "note"), "\xc3\xa9 \"q\"") == 0);
    CHECK((8 + st.header_len) % 8 != 0); /* really unaligned */
  }
  dl_safetensors_free(&st);
  for (cnn = 0; cnn < 2; cnn++) {
    const char *nm = cnn ? "cnn" : "mlp";
    char p[128], pio[128];
    dl_model *m = cnn ? make_cnn(99) : make_mlp(DL_F32, 99, 3);
    dl_load_report rep;
    dl_tensor *x, *y, *yc;
    double err;
    snprintf(p, sizeof p, "%s/torch_%s.safetensors", pydir, nm);
    snprintf(pio, sizeof pio, "%s/torch_%s_io.safetensors", pydir, nm);
    CHECK_MSG(dl_model_load(m, p, &rep) == DL_OK && rep.nloaded == 9, "%s: %s", nm, dl_ctx_message(&ctx));
    CHECK(dl_safetensors_open(&st, &ctx, pio) == DL_OK);
    x = dl_safetensors_get(&st, "x");
    y = dl_safetensors_get(&st, "y");
    dl_safetensors_free(&st);
    if (!x || !y) { dl_model_free(m); continue; }
    yc = eval(m, x);
    err = max_rel(yc, y);
    CHECK_MSG(err < 1e-5, "torch %s eval output vs dl: max rel err %.3g", nm, err);
    CHECK(dl_i64(dl_model_tensor(m, cnn ? "features.1.num_batches_tracked" : "1.num_batches_tracked"))[0] == 3);
    printf("  torch_%s.safetensors -> dl: 9 tensors, eval output max rel err %.2e\n", nm, err);
    dl_tensor_free(x);
    dl_tensor_free(y);
    dl_tensor_free(yc);
    dl_model_free(m);
  }
  /* dl -> torch */
  {
    dl_st_writer w;
    dl_tensor *t[NDT];
    dtype_writer(&w, t);
    CHECK(dl_st_writer_save(&w, PP("c_dtypes.safetensors"), NULL) == DL_OK);
    dl_st_writer_free(&w);
    for (k = 0; k < NDT; k++) dl_tensor_free(t[k]);
  }
  for (cnn = 0; cnn < 2; cnn++) {
    dl_model *m = cnn ? make_cnn(11) : make_mlp(DL_F32, 11, 3);
    dl_rng r = dl_rng_make(12);
    dl_tensor *x = cnn ? dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3, 2, 4, 4)) : dl_tensor_make(&ctx, DL_F32, DL_SHAPE(5, 6)), *y;
    char p[128];
    train3(m, cnn, cnn ? 5 : 3);
    dl_tensor_rand_normal(x, &r, 0, 1);
    y = eval(m, x);
    snprintf(p, sizeof p, "%s/c_%s.safetensors", pydir, cnn ? "cnn" : "mlp");
    CHECK(dl_model_save(m, p, NULL) == DL_OK);
    snprintf(p, sizeof p, "%s/c_%s_io.safetensors", pydir, cnn ? "cnn" : "mlp");
    write_io(p, x, y);
    if (!cnn) CHECK(dl_model_save(m, PP("c_mlp_bf16.safetensors"), &(dl_save_desc){.cast = DL_ST_AS_BF16}) == DL_OK);
    dl_tensor_free(x);
    dl_tensor_free(y);
    dl_model_free(m);
  }
  CHECK(dl_safetensors_open(&st, &ctx, PP("torch_half.safetensors")) == DL_OK);
  {
    dl_tensor *x = dl_safetensors_get(&st, "x32");
    dl_st_writer w;
    dl_st_writer_init(&w, &ctx);
    dl_st_writer_add(&w, "x32", x);
    dl_st_writer_add_as(&w, "as_f16", x, DL_F16);
    dl_st_writer_add_as(&w, "as_bf16", x, DL_BF16);
    CHECK(dl_st_writer_save(&w, PP("c_half.safetensors"), NULL) == DL_OK);
    dl_st_writer_free(&w);
    dl_tensor_free(x);
  }
  dl_safetensors_free(&st);
  fflush(stdout);
  {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/check_safetensors.py check %s", pydir);
    rc = system(cmd);
  }
  CHECK_MSG(rc == 0, "tools/check_safetensors.py check found problems (%d)", rc);
}

/* >>atomic writes ------------------------------------------------------------------- */

typedef struct inject {
  long calls, fail_at; /* fail the call with this number (0-based); -1: none */
  int eexist_first;    /* the first create says EEXIST */
  const char *failed;  /* which kind of call failed */
} inject;
static int inj_hit(inject *j, const char *what) {
  if (j->calls++ == j->fail_at) {
    j->failed = what;
    errno = EIO;
    return 1;
  }
  return 0;
}
static int inj_create(const char *p, void *u) {
  inject *j = (inject *)u;
  if (inj_hit(j, "create")) return -1;
  if (j->eexist_first) {
    j->eexist_first = 0;
    errno = EEXIST;
    return -1;
  }
  return dl_io_posix()->create(p, NULL);
}
static ptrdiff_t inj_write(int fd, const void *b, size_t n, void *u) {
  if (inj_hit((inject *)u, "write")) return -1;
  return dl_io_posix()->write(fd, b, n > 61 ? 61 : n, NULL); /* short writes */
}
static int inj_fsync(int fd, void *u) { return inj_hit((inject *)u, "fsync") ? -1 : dl_io_posix()->fsync(fd, NULL); }
static int inj_close(int fd, void *u) {
  if (inj_hit((inject *)u, "close")) {
    dl_io_posix()->close(fd, NULL); /* the descriptor is gone either way, as with POSIX close */
    errno = EIO;
    return -1;
  }
  return dl_io_posix()->close(fd, NULL);
}
static int inj_rename(const char *a, const char *b, void *u) {
  return inj_hit((inject *)u, "rename") ? -1 : dl_io_posix()->rename(a, b, NULL);
}
static int inj_sync_dir(const char *d, void *u) {
  return inj_hit((inject *)u, "sync_dir") ? -1 : dl_io_posix()->sync_dir(d, NULL);
}

static void test_atomic_injection(void) {
  const char *path = TP("atomic.safetensors");
  static const char old[] = "the previous file, which must survive";
  dl_model *m = make_cnn(21);
  inject j;
  dl_io_hooks io = {inj_create, inj_write, inj_fsync, inj_close, inj_rename, NULL, inj_sync_dir, &j};
  void *want;
  size_t wn;
  long k, total, writes = 0, ok_old = 0, ok_new = 0, clean = 0;
  int kinds = 0;
  const char *seen[6] = {0};
  train3(m, 1, 5);
  CHECK(dl_model_save_memory(m, NULL, &want, &wn) == DL_OK);
  /* count the calls of one save */
  CHECK(dl_atomic_write(&ctx, path, old, sizeof old, NULL) == DL_OK && same_file(path, old, sizeof old));
  memset(&j, 0, sizeof j);
  j.fail_at = -1;
  CHECK(dl_model_save(m, path, &(dl_save_desc){.io = &io}) == DL_OK && same_file(path, want, wn));
  total = j.calls;
  writes = total - 5;
  CHECK_MSG(total > 5 && writes >= (long)(wn / 61), "%ld calls for %zu bytes", total, wn);
  /* fail each call in turn */
  for (k = 0; k < total; k++) {
    dl_status s;
    int i;
    CHECK(dl_atomic_write(&ctx, path, old, sizeof old, NULL) == DL_OK);
    memset(&j, 0, sizeof j);
    j.fail_at = k;
    s = dl_model_save(m, path, &(dl_save_desc){.io = &io});
    for (i = 0; i < 6 && seen[i] && strcmp(seen[i], j.failed ? j.failed : ""); i++) {}
    if (i < 6 && !seen[i] && j.failed) { seen[i] = j.failed; kinds++; }
    if (s != DL_ERR_IO || !j.failed) continue;
    if (strcmp(j.failed, "sync_dir") == 0) ok_new += same_file(path, want, wn) && strstr(dl_ctx_message(&ctx), "fsync of its folder");
    else ok_old += same_file(path, old, sizeof old) && strstr(dl_ctx_message(&ctx), "left as it was");
    clean += count_prefixed("atomic.safetensors.tmp.") == 0;
  }
  CHECK_MSG(ok_old == total - 1 && ok_new == 1 && clean == total && kinds == 6,
            "%ld calls: %ld left the old file, %ld the new one (folder fsync), %ld left no temporary, %d kinds of call",
            total, ok_old, ok_new, clean, kinds);
  printf("  atomic save: a failure injected at each of %ld calls (%ld writes of <= 61 bytes, create, fsync, close, rename, "
         "folder fsync): previous file intact every time, no temporary left\n", total, writes);
  /* EEXIST on the first temporary name: the next one is used */
  memset(&j, 0, sizeof j);
  j.fail_at = -1;
  j.eexist_first = 1;
  CHECK(dl_model_save(m, path, &(dl_save_desc){.io = &io}) == DL_OK && same_file(path, want, wn) &&
        count_prefixed("atomic.safetensors.tmp.") == 0);
  /* a folder that does not exist */
  CHECK(dl_model_save(m, TP("no/such/dir/x.safetensors"), NULL) == DL_ERR_IO && strstr(dl_ctx_message(&ctx), "temporary file"));
  dl_free(&ctx, want);
  dl_model_free(m);
}

/* >>checkpoints ----------------------------------------------------------------------- */

enum { RN = 48, RB = 8, RIN = 8, RCLS = 3 };

/* The data order is data.h's: a dataset, a batcher whose shuffler state
 * (seed, epoch, position) goes into the checkpoint as extra values. */
typedef struct run {
  dl_model *m;
  dl_optim *o;
  dl_tape tp;
  dl_dataset ds;
  dl_batcher bat;
  int64_t epoch, step, shuffle_seed, shuffle_epoch, pos;
  double last_loss;
} run;

static dl_model *resume_model(uint64_t seed) {
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = seed});
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = RIN, .out = 16});
  dl_batchnorm1d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 16});
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_dropout_make(m, NULL, NULL, 0.3);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 16, .out = RCLS});
  return m;
}
static void run_init(run *r, uint64_t seed) {
  dl_rng g = dl_rng_make(2024); /* the data set: always the same */
  dl_tensor *X, *Y;
  int64_t i;
  memset(r, 0, sizeof *r);
  r->m = resume_model(seed);
  r->o = dl_optim_adam(r->m, &(dl_adam_cfg){.lr = 0.02, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-3});
  dl_tape_init(&r->tp, &ctx, 0);
  X = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(RN, RIN));
  Y = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(RN));
  dl_tensor_rand_normal(X, &g, 0, 1);
  for (i = 0; i < RN; i++) dl_i64(Y)[i] = (int64_t)dl_rng_below(&g, RCLS);
  CHECK(dl_dataset_make(&ctx, &r->ds, X, Y, DL_DATASET_OWN) == DL_OK);
  r->shuffle_seed = 77;
  CHECK(dl_batcher_make(&ctx, &r->bat, &r->ds,
                        &(dl_batcher_desc){.batch_size = RB, .dtype = DL_F32, .shuffle = {.seed = 77}}) == DL_OK);
}
static void run_free(run *r) {
  dl_tape_free(&r->tp);
  dl_optim_free(r->o);
  dl_model_free(r->m);
  dl_batcher_free(&r->bat);
  dl_dataset_free(&r->ds);
}
/* The batcher's position into the values a checkpoint saves, and back. */
static void run_sync_out(run *r) {
  dl_shuffler_state st = dl_batcher_get_state(&r->bat);
  r->shuffle_seed = st.seed;
  r->shuffle_epoch = st.epoch;
  r->pos = st.pos;
}
static int run_sync_in(run *r) {
  dl_shuffler_state st = dl_batcher_get_state(&r->bat);
  st.seed = r->shuffle_seed;
  st.epoch = r->shuffle_epoch;
  st.pos = r->pos;
  return dl_batcher_restore(&r->bat, &st) == DL_OK;
}
/* One epoch of the batcher's shuffled batches, Adam with global clipping,
 * the lr decayed after every step. */
static void run_epoch(run *r) {
  const dl_step_desc sd = {.clip_norm = 1.0};
  dl_batch bt;
  dl_model_train(r->m, 1);
  while (dl_batcher_next(&r->bat, &bt)) {
    dl_tensor *loss = dl_t_cross_entropy(&r->tp, dl_model_forward(r->m, &r->tp, bt.x), bt.y, 0, DL_REDUCE_MEAN);
    r->last_loss = dl__get_at(loss, 0);
    dl_train_step(r->o, &r->tp, loss, &sd);
    dl_tape_rewind(&r->tp);
    dl_optim_set_lr(r->o, dl_optim_lr(r->o) * 0.97);
    r->step++;
  }
  r->epoch++;
  run_sync_out(r);
}
static int run_values(run *r, dl_named_value *v) {
  v[0] = (dl_named_value){"epoch", &r->epoch, NULL, NULL};
  v[1] = (dl_named_value){"step", &r->step, NULL, NULL};
  v[2] = (dl_named_value){"shuffle_seed", &r->shuffle_seed, NULL, NULL};
  v[3] = (dl_named_value){"shuffle_pos", &r->pos, NULL, NULL};
  v[4] = (dl_named_value){"last_loss", NULL, &r->last_loss, NULL};
  v[5] = (dl_named_value){"shuffle_epoch", &r->shuffle_epoch, NULL, NULL};
  return 6;
}

/* The child: a fresh process resumes from ckpt, trains one epoch, saves. */
static int resume_child(const char *ckpt, const char *out) {
  run r;
  dl_named_value v[6];
  int n, rc = 0;
  dl_load_report rep;
  dl_ctx_init(&ctx, NULL);
  run_init(&r, 999); /* another initialisation: everything must come from the file */
  r.shuffle_seed = 0; /* and the data order too */
  r.shuffle_epoch = 0;
  n = run_values(&r, v);
  if (dl_checkpoint_load(r.m, r.o, ckpt, v, n, &rep) != DL_OK || r.epoch != 1 || r.shuffle_seed != 77 ||
      r.shuffle_epoch != 1 || !run_sync_in(&r)) {
    fprintf(stderr, "resume child: %s\n%s", dl_ctx_message(&ctx), rep.text);
    rc = 1;
  } else {
    run_epoch(&r);
    if (dl_checkpoint_save(r.m, r.o, out, v, n, NULL) != DL_OK) {
      fprintf(stderr, "resume child: %s\n", dl_ctx_message(&ctx));
      rc = 1;
    }
  }
  run_free(&r);
  dl_gemm_release_cache();
  return rc;
}

static void test_checkpoint_resume(void) {
  const char *full = TP("ckpt_full.safetensors"), *half = TP("ckpt_half.safetensors"),
             *resumed = TP("ckpt_resumed.safetensors"), *skewed = TP("ckpt_skewed.safetensors");
  run a, b;
  dl_named_value va[6], vb[6];
  int na, nb, status = -1;
  void *f1, *f2;
  size_t n1, n2;
  pid_t pid;
  /* 2 epochs in one go */
  run_init(&a, 1);
  na = run_values(&a, va);
  run_epoch(&a);
  run_epoch(&a);
  CHECK(dl_checkpoint_save(a.m, a.o, full, va, na, NULL) == DL_OK);
  /* 1 epoch, checkpoint */
  run_init(&b, 1);
  nb = run_values(&b, vb);
  run_epoch(&b);
  CHECK(dl_checkpoint_save(b.m, b.o, half, vb, nb, NULL) == DL_OK);
  /* the rest in a fresh process */
  remove(resumed);
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid == 0) {
    char *argv[] = {(char *)self_path, (char *)"--io-resume-child", (char *)half, (char *)resumed, NULL};
    execv(self_path, argv);
    _exit(127);
  }
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the resumed process failed (status %d)", status);
  f1 = slurp(full, &n1);
  f2 = slurp(resumed, &n2);
  CHECK_MSG(f1 && f2 && n1 == n2 && memcmp(f1, f2, n1) == 0,
            "2 epochs in one process and 1 + 1 across a checkpoint and a fresh process differ");
  CHECK(!same_file(half, f1, n1));
  {
    dl_safetensors st;
    int64_t steps = -1;
    CHECK(dl_safetensors_open(&st, &ctx, resumed) == DL_OK);
    if (dl_safetensors_find(&st, "optim/0.weight/step")) memcpy(&steps, dl_safetensors_find(&st, "optim/0.weight/step")->data, 8);
    CHECK(steps == 2 * RN / RB && dl_safetensors_find(&st, "rng/layer/3") && dl_safetensors_find(&st, "optim/4.bias/exp_avg_sq") &&
          dl_safetensors_find(&st, "extra/shuffle_seed") && strcmp(dl_safetensors_meta(&st, "dl.optimizer"), "adam") == 0);
    dl_safetensors_free(&st);
  }
  printf("  resume: 2 epochs == 1 epoch + checkpoint + 1 epoch in a fresh process, %zu-byte checkpoints byte-identical\n", n1);
  free(f2);
  /* the test can fail: one dropout draw off and the run diverges */
  {
    run c;
    dl_named_value vc[6];
    int nc;
    run_init(&c, 5);
    nc = run_values(&c, vc);
    CHECK(dl_checkpoint_load(c.m, c.o, half, vc, nc, NULL) == DL_OK && run_sync_in(&c));
    dl_dropout_rng(dl_model_layer(c.m, "3"))->counter++;
    run_epoch(&c);
    CHECK(dl_checkpoint_save(c.m, c.o, skewed, vc, nc, NULL) == DL_OK);
    CHECK(!same_file(skewed, f1, n1));
    run_free(&c);
  }
  free(f1);
  run_free(&a);
  run_free(&b);
}

/* A counter in a weight file (BatchNorm's num_batches_tracked, I64 0-d) is
 * range-checked like a checkpoint's: -1 or 2^62 are refused by name, and
 * nothing in the model changes; 5 loads. */
static void test_counter_ranges(void) {
  static const int64_t vals[] = {-1, (int64_t)1 << 62, 5};
  dl_model *m = dl_model_make(&ctx, &(dl_model_desc){.dtype = DL_F32, .seed = 4});
  void *buf = NULL;
  size_t n = 0, k;
  dl_batchnorm1d_make(m, NULL, NULL, &(dl_batchnorm_desc){.features = 3});
  CHECK(dl_model_status(m) == DL_OK && dl_model_save_memory(m, NULL, &buf, &n) == DL_OK);
  for (k = 0; buf && k < sizeof vals / sizeof *vals; k++) {
    dl_safetensors st;
    const dl_st_tensor *e;
    dl_status s = DL_ERR_ARG;
    CHECK(dl_safetensors_parse(&st, &ctx, buf, n) == DL_OK);
    e = dl_safetensors_find(&st, "0.num_batches_tracked");
    CHECK(e && e->dtype == DL_I64 && e->ndim == 0);
    if (e) {
      unsigned char *at = (unsigned char *)buf + (e->data - (const unsigned char *)buf);
      int64_t v = vals[k];
      memcpy(at, &v, 8); /* little-endian hosts, as the format */
      dl_safetensors_free(&st);
      CHECK(dl_safetensors_parse(&st, &ctx, buf, n) == DL_OK);
      s = dl_model_load_st(m, &st, NULL, NULL);
    }
    dl_safetensors_free(&st);
    if (vals[k] == 5) {
      CHECK_MSG(s == DL_OK && dl_i64(dl_model_tensor(m, "0.num_batches_tracked"))[0] == 5, "%s", dl_ctx_message(&ctx));
    } else {
      CHECK_MSG(s == DL_ERR_FORMAT && strstr(dl_ctx_message(&ctx), "'0.num_batches_tracked' is") &&
                    strstr(dl_ctx_message(&ctx), "nothing was changed"),
                "%lld: %s", (long long)vals[k], dl_ctx_message(&ctx));
      CHECK(dl_i64(dl_model_tensor(m, "0.num_batches_tracked"))[0] == 0);
    }
  }
  dl_free(&ctx, buf);
  dl_model_free(m);
}

static void test_checkpoint_refuses(void) {
  const char *path = TP("ckpt_refuse.safetensors");
  run a;
  dl_named_value v[6];
  int n;
  dl_load_report rep;
  run_init(&a, 1);
  n = run_values(&a, v);
  run_epoch(&a);
  CHECK(dl_checkpoint_save(a.m, a.o, path, v, n, NULL) == DL_OK);
  /* another optimizer (SGD with momentum): nothing changes */
  {
    dl_model *m = resume_model(4);
    dl_optim *o = dl_optim_sgd(m, &(dl_sgd_cfg){.lr = 0.1, .momentum = 0.9});
    int64_t epoch = 42, step = 0, seed = 0, pos = 0;
    double loss = 0;
    dl_named_value w[5] = {{"epoch", &epoch, NULL, NULL}, {"step", &step, NULL, NULL}, {"shuffle_seed", &seed, NULL, NULL},
                           {"shuffle_pos", &pos, NULL, NULL}, {"last_loss", NULL, &loss, NULL}};
    size_t sn;
    void *snap = snapshot(m, &sn);
    dl_rng dr = *dl_dropout_rng(dl_model_layer(m, "3"));
    CHECK(dl_checkpoint_load(m, o, path, w, 5, &rep) == DL_ERR_ARG);
    CHECK(rep.nmissing == 6 && rep.nunexpected == 13 && strstr(rep.text, "missing: optim/0.weight/momentum_buffer") &&
          strstr(rep.text, "unexpected: optim/0.weight/exp_avg"));
    CHECK(snapshot_same(m, snap, sn) && epoch == 42 && o->lr == 0.1 && o->nsteps == 0 &&
          *dl_optim_param_steps(o, "0.weight") == 0 && dl_dropout_rng(dl_model_layer(m, "3"))->counter == dr.counter);
    free(snap);
    dl_optim_free(o);
    dl_model_free(m);
  }
  /* a value the checkpoint does not have; a value with no pointer */
  {
    run b;
    dl_named_value w[7];
    int64_t other = 5;
    size_t sn;
    void *snap;
    run_init(&b, 2);
    run_values(&b, w);
    w[6] = (dl_named_value){"not_saved", &other, NULL, NULL};
    snap = snapshot(b.m, &sn);
    CHECK(dl_checkpoint_load(b.m, b.o, path, w, 7, &rep) == DL_ERR_ARG && rep.nmissing == 1 &&
          strstr(rep.text, "missing: extra/not_saved (model i64[])") && snapshot_same(b.m, snap, sn) && b.epoch == 0);
    /* a checkpoint loads as model weights too, with partial */
    CHECK(dl_model_load(b.m, path, &rep) == DL_ERR_ARG && rep.nunexpected > 0);
    CHECK(dl_model_load_desc(b.m, path, &(dl_load_desc){.partial = 1}, &rep) == DL_OK && rep.nloaded == b.m->nparams &&
          models_equal(a.m, b.m));
    w[6] = (dl_named_value){"bad", NULL, NULL, NULL};
    CHECK(dl_checkpoint_save(b.m, b.o, path, w, 7, NULL) == DL_ERR_ARG);
    CHECK(dl_checkpoint_save(b.m, b.o, path, w, 6, &(dl_save_desc){.cast = DL_ST_AS_BF16}) == DL_ERR_ARG);
    w[6] = (dl_named_value){"two", &other, NULL, &b.m->params[0]->t};
    CHECK(dl_checkpoint_save(b.m, b.o, path, w, 7, NULL) == DL_ERR_ARG);
    /* a tensor value (a history): saved, loaded back exactly; a load into
     * another shape fails and changes nothing */
    {
      dl_tensor *h = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 4)), *h2 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(3, 4)),
                *h3 = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 3));
      dl_tensor *tv = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(4, 4)), view = dl_view_slice(tv, 1, 0, 3, 1);
      int64_t k;
      for (k = 0; k < 12; k++) dl_f64(h)[k] = 0.1 * (double)k - 0.3;
      dl_tensor_fill(h2, 7.0);
      dl_tensor_fill(h3, 7.0);
      w[6] = (dl_named_value){"history", NULL, NULL, h};
      CHECK(dl_checkpoint_save(b.m, b.o, path, w, 7, NULL) == DL_OK);
      w[6].t = h2;
      CHECK(dl_checkpoint_load(b.m, b.o, path, w, 7, &rep) == DL_OK && memcmp(h->data, h2->data, 12 * sizeof(double)) == 0);
      w[6].t = h3;
      CHECK(dl_checkpoint_load(b.m, b.o, path, w, 7, &rep) != DL_OK && strstr(rep.text, "extra/history") &&
            dl_f64(h3)[0] == 7.0 && dl_f64(h3)[11] == 7.0);
      /* view: [4, 3] with row stride 4, not contiguous */
      w[6].t = &view;
      CHECK(dl_checkpoint_save(b.m, b.o, path, w, 7, NULL) == DL_ERR_ARG && strstr(dl_ctx_message(&ctx), "contiguous"));
      dl_tensor_free(h); dl_tensor_free(h2); dl_tensor_free(h3); dl_tensor_free(tv);
    }
    free(snap);
    run_free(&b);
  }
  run_free(&a);
}

int main(int argc, char **argv) {
  dl_ctx_desc d = {0};
  if (argc == 4 && strcmp(argv[1], "--io-resume-child") == 0) return resume_child(argv[2], argv[3]);
  self_path = argv[0];
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  mkdir("build", 0777);
  mkdir("build/tests", 0777);
  snprintf(tmpdir, sizeof tmpdir, "build/tests/io.%ld", (long)getpid());
  snprintf(pydir, sizeof pydir, "%s/py", tmpdir);
  mkdir(tmpdir, 0777);
  mkdir(pydir, 0777);
  RUN(test_half_cases);
  RUN(test_half_exhaustive);
  RUN(test_roundtrip);
  RUN(test_foreign_layout);
  RUN(test_hostile_headers);
  RUN(test_truncation_and_flips);
  RUN(test_model_roundtrip);
  RUN(test_model_load_report);
  RUN(test_torch_interop);
  RUN(test_half_vs_torch);
  RUN(test_atomic_injection);
  RUN(test_checkpoint_resume);
  RUN(test_checkpoint_refuses);
  RUN(test_counter_ranges);
  dl_gemm_release_cache();
  if (!getenv("DL_IO_KEEP")) {
    remove_all(pydir);
    remove_all(tmpdir);
  }
  return harness_finish();
}
