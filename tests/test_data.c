/* dl-test-flags: -DDL_USE_ZLIB -DDL_USE_STB_IMAGE -lz */
/* tests/test_data.c - datasets, shuffler, batcher, loaders and augmentation
 * (include/dl/data.h), built with zlib and stb_image (the flags above;
 * tests/test_data_nolibs.c covers the build without them).
 *
 * Inputs: tests/data/ (written by tests/data/make_inputs.py with Python's
 * struct/gzip and tests/data/make_images.c with stb_image_write, not by
 * dl.h), and the real Fashion-MNIST files of Debian's dataset-fashion-mnist
 * (skipped with a message when absent), whose checksums were computed with
 * Python's gzip module.
 *
 * - IDX: every element type against the values the generator wrote; plain,
 *   gzip and two-member gzip agree, every multi-byte type through gzip
 *   (decoded into the tensor, swapped in place) equals its plain file, short
 *   and long gzip payloads; encode -> parse round trips (strided
 *   too) and encode reproduces the committed files byte for byte; hostile
 *   input: truncation at every length (plain and gzip), wrong magic, unknown
 *   type byte, 0 and 9 dimensions, dimensions whose product overflows,
 *   dimensions that do not match the size (shorter, longer), empty, corrupt,
 *   truncated and trailing-garbage gzip, a missing file, and 3000 random
 *   mutations: each a status with a message naming the file and the sizes,
 *   *out NULL, nothing leaked (ASan in tests/run.sh step 5).
 * - Fashion-MNIST: sizes, label histogram (6000 / 1000 per class), first
 *   labels, pixel sum and a position-weighted checksum, class names; one
 *   epoch of batches sees every sample once with x = pixel / 255.
 * - Datasets: argument errors, ownership on failure; split sizes exact,
 *   disjoint, covering, seeded.
 * - Shuffler: permutations, purity in (seed, epoch), uniformity (n = 3 over
 *   6000 epochs), shards disjoint and covering with both remainder policies,
 *   state save / restore mid-epoch, restore into a mismatched shuffler.
 * - Batcher: sizes with and without drop_last, u8 -> f32/f64 scale and
 *   standardisation, float passthrough, dtype errors, every sample once per
 *   epoch, new order every epoch, resume from a saved state (bit-identical),
 *   thread-count independence, no allocation per batch (counting allocator).
 * - Augmentation: draws in range and all offsets reached, flip frequency,
 *   the crop / flip / normalisation against a direct out-of-place
 *   reference, determinism, independence of batch size.
 * - CSV: label by name / index / from the end, regression targets, no
 *   label, BOM + CRLF + quotes + spaces, gzip; ragged rows, missing values
 *   (empty and NA), bad numbers, bad labels, no header, empty file, header
 *   only, unterminated quote, unknown column: line, column and name in the
 *   message; truncation at every length.
 * - Images: bilinear resize against torch.nn.functional.interpolate values;
 *   the image folder (PNG grey/RGB/RGBA, JPEG, skipped files, classes,
 *   grey conversion), undecodable image, no classes, missing folder.
 * - Text: bytes as u8 / i64, (input, next-byte) windows through the batcher.
 * - Allocation failure injected at every allocation of each loader: a
 *   status, never a crash, every allocation freed.
 */
#define DL_DATA_MAX_BYTES ((uint64_t)64 << 20) /* a low limit to test (Fashion-MNIST's largest file is 47 MB) */
#include "dl/data.h"
#include "harness.h"

#include <math.h>

#define DATA "tests/data/"

static dl_ctx ctx;

/* >>helpers ------------------------------------------------------------------ */

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *b;
  long len;
  *n = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  fseek(f, 0, SEEK_SET);
  b = (unsigned char *)malloc((size_t)len + 1);
  if (b && fread(b, 1, (size_t)len, f) != (size_t)len) { free(b); b = NULL; }
  fclose(f);
  *n = (size_t)len;
  return b;
}

static int has(const char *msg, const char *frag) { return strstr(msg, frag) != NULL; }
#define CHECK_HAS(frag) CHECK_MSG(has(ctx.message, frag), "message \"%s\" lacks \"%s\"", ctx.message, frag)

/* counting / failing allocator */
static long n_calls, n_alloc, n_free, fail_at; /* calls, successful allocations, frees, the call to fail */
static void *cnt_alloc(size_t n, void *user) {
  (void)user;
  if (++n_calls == fail_at) return NULL;
  n_alloc++;
  return malloc(n);
}
static void cnt_free(void *p, void *user) { (void)user; if (p) n_free++; free(p); }
static void counting_ctx(dl_ctx *c) {
  dl_ctx_desc d;
  memset(&d, 0, sizeof d);
  d.allocator.alloc = cnt_alloc;
  d.allocator.free = cnt_free;
  d.panic = harness_panic;
  dl_ctx_init(c, &d);
  n_calls = n_alloc = n_free = 0;
  fail_at = 0;
}

static int64_t sum_u8(const dl_tensor *t) {
  int64_t s = 0, i;
  for (i = 0; i < t->numel; i++) s += ((const uint8_t *)t->data)[i];
  return s;
}

/* >>idx ------------------------------------------------------------------------- */

static void test_idx_files(void) {
  dl_tensor *t = NULL, *g = NULL;
  int64_t n, y, x, i;
  static const double f32v[6] = {0.5, -1.25, 3.0e38, 1.0e-40, -0.0, 7.0};
  static const double f64v[4] = {3.141592653589793, -2.5e-300, 1.0e300, -0.0};
  CHECK(dl_idx_load(&ctx, DATA "images_u8.idx", &t) == DL_OK);
  CHECK(dl_idx_load(&ctx, DATA "images_u8.idx.gz", &g) == DL_OK);
  if (t && g) {
    CHECK(t->dtype == DL_U8 && t->ndim == 3 && t->shape[0] == 5 && t->shape[1] == 3 && t->shape[2] == 4);
    CHECK(dl_tensor_same_shape(t, g) && memcmp(t->data, g->data, 60) == 0);
    for (n = 0; n < 5; n++)
      for (y = 0; y < 3; y++)
        for (x = 0; x < 4; x++) CHECK(dl_u8(t)[(n * 3 + y) * 4 + x] == (37 * n + 11 * y + 3 * x) % 256);
  }
  dl_tensor_free(t); dl_tensor_free(g);
  CHECK(dl_idx_load(&ctx, DATA "labels_u8.idx", &t) == DL_OK);
  CHECK(dl_idx_load(&ctx, DATA "labels_2members.idx.gz", &g) == DL_OK);
  if (t && g) {
    CHECK(t->ndim == 1 && t->shape[0] == 5 && dl_u8(t)[0] == 3 && dl_u8(t)[4] == 1);
    CHECK(dl_tensor_same_shape(t, g) && memcmp(t->data, g->data, 5) == 0);
  }
  dl_tensor_free(t); dl_tensor_free(g);
  CHECK(dl_idx_load(&ctx, DATA "i8.idx", &t) == DL_OK);
  if (t) CHECK(t->dtype == DL_I8 && ((int8_t *)t->data)[0] == -128 && ((int8_t *)t->data)[1] == -1 && ((int8_t *)t->data)[3] == 127);
  dl_tensor_free(t);
  CHECK(dl_idx_load(&ctx, DATA "i16.idx", &t) == DL_OK);
  if (t) CHECK(t->dtype == DL_I32 && t->ndim == 2 && dl_i32(t)[0] == -32768 && dl_i32(t)[1] == -2 && dl_i32(t)[2] == 513 && dl_i32(t)[3] == 32767);
  dl_tensor_free(t);
  CHECK(dl_idx_load(&ctx, DATA "i32.idx", &t) == DL_OK);
  if (t) CHECK(t->dtype == DL_I32 && dl_i32(t)[0] == INT32_MIN && dl_i32(t)[1] == 16909060 && dl_i32(t)[2] == INT32_MAX);
  dl_tensor_free(t);
  CHECK(dl_idx_load(&ctx, DATA "f32.idx", &t) == DL_OK);
  if (t) {
    CHECK(t->dtype == DL_F32 && t->ndim == 2 && t->shape[1] == 3);
    for (i = 0; i < 6; i++) CHECK(dl_f32(t)[i] == (float)f32v[i]);
    CHECK(signbit(dl_f32(t)[4]));
  }
  dl_tensor_free(t);
  CHECK(dl_idx_load(&ctx, DATA "f64.idx", &t) == DL_OK);
  if (t) {
    CHECK(t->dtype == DL_F64 && t->ndim == 3 && t->shape[0] == 1);
    for (i = 0; i < 4; i++) CHECK(dl_f64(t)[i] == f64v[i]);
    CHECK(signbit(dl_f64(t)[3]));
  }
  dl_tensor_free(t);
}

static void test_idx_roundtrip(void) {
  static const char *files[] = {"images_u8.idx", "labels_u8.idx", "i8.idx", "i32.idx", "f32.idx", "f64.idx"};
  static const dl_dtype dts[] = {DL_U8, DL_I8, DL_I32, DL_F32, DL_F64};
  size_t k, n, size;
  dl_rng rng = dl_rng_make(3);
  /* encode reproduces the committed files byte for byte */
  for (k = 0; k < sizeof files / sizeof *files; k++) {
    char path[256];
    unsigned char *bytes, *enc;
    dl_tensor *t = NULL;
    snprintf(path, sizeof path, DATA "%s", files[k]);
    bytes = slurp(path, &n);
    CHECK(bytes != NULL);
    if (!bytes) continue;
    CHECK(dl_idx_parse(&ctx, bytes, n, &t) == DL_OK);
    if (t) {
      CHECK(dl_idx_encode(&ctx, t, NULL, 0, &size) == DL_OK && size == n);
      enc = (unsigned char *)malloc(size);
      CHECK(dl_idx_encode(&ctx, t, enc, size, &size) == DL_OK);
      CHECK_MSG(memcmp(enc, bytes, n) == 0, "%s re-encoded differs", files[k]);
      CHECK(dl_idx_encode(&ctx, t, enc, size - 1, &size) == DL_ERR_ARG);
      free(enc);
    }
    dl_tensor_free(t);
    free(bytes);
  }
  /* random tensors of every encodable dtype, 1..4 dims, and a strided view */
  for (k = 0; k < 40; k++) {
    dl_dtype dt = dts[k % 5];
    int nd = 1 + (int)(k % 4), d;
    int64_t sh[4], i;
    dl_tensor *t, *back = NULL;
    unsigned char *enc;
    for (d = 0; d < nd; d++) sh[d] = 1 + (int64_t)dl_rng_below(&rng, 5);
    t = dl_tensor_make(&ctx, dt, nd, sh);
    for (i = 0; i < t->numel * (int64_t)dl_dtype_size(dt); i++) ((unsigned char *)t->data)[i] = (unsigned char)dl_rng_u64(&rng);
    if (dt == DL_F32) for (i = 0; i < t->numel; i++) if (isnan(dl_f32(t)[i])) dl_f32(t)[i] = 1;
    if (dt == DL_F64) for (i = 0; i < t->numel; i++) if (isnan(dl_f64(t)[i])) dl_f64(t)[i] = 1;
    CHECK(dl_idx_encode(&ctx, t, NULL, 0, &size) == DL_OK);
    enc = (unsigned char *)malloc(size);
    CHECK(dl_idx_encode(&ctx, t, enc, size, &size) == DL_OK);
    CHECK(dl_idx_parse(&ctx, enc, size, &back) == DL_OK);
    if (back) CHECK(dl_tensor_same_shape(t, back) && back->dtype == dt &&
                    memcmp(t->data, back->data, (size_t)t->numel * dl_dtype_size(dt)) == 0);
    dl_tensor_free(back);
    back = NULL;
    if (nd >= 2) { /* transposed view: encoded in its logical order */
      dl_tensor v = dl_view_transpose(t, 0, 1);
      CHECK(dl_idx_encode(&ctx, &v, enc, size, &size) == DL_OK);
      CHECK(dl_idx_parse(&ctx, enc, size, &back) == DL_OK);
      if (back) {
        int ok = 1;
        for (i = 0; i < v.numel; i++) ok &= dl__get_at(&v, dl__offset_of_linear(&v, i)) == dl__get_at(back, i);
        CHECK(back->shape[0] == v.shape[0] && back->shape[1] == v.shape[1]);
        CHECK(ok);
      }
      dl_tensor_free(back);
    }
    free(enc);
    dl_tensor_free(t);
  }
  {
    dl_tensor *t = dl_tensor_make(&ctx, DL_I64, DL_SHAPE(2));
    CHECK(dl_idx_encode(&ctx, t, NULL, 0, &size) == DL_ERR_DTYPE);
    CHECK_HAS("no IDX type");
    dl_tensor_free(t);
  }
}

/* Every status from parsing bytes[0..n) must come with a message and no tensor. */
static dl_status parse_checked(const unsigned char *b, size_t n) {
  dl_tensor *t = (dl_tensor *)(uintptr_t)1;
  dl_status st;
  dl_ctx_clear(&ctx);
  st = dl_idx_parse(&ctx, b, n, &t);
  if (st == DL_OK) {
    CHECK(t != NULL);
    dl_tensor_free(t);
  } else {
    CHECK(t == NULL);
    CHECK_MSG(ctx.message[0] != 0 && has(ctx.message, "dl_idx_parse: <memory>"), "status %d message \"%s\"", (int)st,
              ctx.message);
  }
  return st;
}

/* bytes[0..n) as one gzip member (zlib's deflate, not dl.h), malloc'ed, *gn bytes. */
static unsigned char *gzip_bytes(const unsigned char *bytes, size_t n, size_t *gn) {
  z_stream zs;
  size_t cap = n + n / 100 + 1024;
  unsigned char *out = (unsigned char *)malloc(cap);
  memset(&zs, 0, sizeof zs);
  *gn = 0;
  if (!out || deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) { free(out); return NULL; }
  zs.next_in = (Bytef *)(uintptr_t)bytes;
  zs.avail_in = (uInt)n;
  zs.next_out = out;
  zs.avail_out = (uInt)cap;
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) { deflateEnd(&zs); free(out); return NULL; }
  *gn = zs.total_out;
  deflateEnd(&zs);
  return out;
}

/* gzip input decoded straight into the tensor: the multi-byte types are
 * byte-swapped (i16 widened) in place and equal the plain files' values;
 * short and long payloads keep their statuses; dimensions larger than the
 * compressed size could ever hold (1032:1) are read without trusting them. */
static void test_idx_gzip_types(void) {
  static const char *files[] = {"i8.idx", "i16.idx", "i32.idx", "f32.idx", "f64.idx", "labels_u8.idx"};
  size_t k, n, gn;
  for (k = 0; k < sizeof files / sizeof *files; k++) {
    char path[256];
    unsigned char *b, *g, *l;
    dl_tensor *t = NULL, *z = NULL;
    snprintf(path, sizeof path, DATA "%s", files[k]);
    b = slurp(path, &n);
    g = b ? gzip_bytes(b, n, &gn) : NULL;
    CHECK(b && g);
    if (!b || !g) { free(b); free(g); continue; }
    CHECK(dl_idx_parse(&ctx, b, n, &t) == DL_OK);
    CHECK_MSG(dl_idx_parse(&ctx, g, gn, &z) == DL_OK, "%s gzip: %s", files[k], ctx.message);
    if (t && z)
      CHECK_MSG(dl_tensor_same_shape(t, z) && t->dtype == z->dtype &&
                memcmp(t->data, z->data, (size_t)t->numel * dl_dtype_size(t->dtype)) == 0,
                "%s: gzip and plain differ", files[k]);
    dl_tensor_free(t);
    dl_tensor_free(z);
    free(g);
    /* one decoded byte short, and one too many */
    g = gzip_bytes(b, n - 1, &gn);
    CHECK(g && parse_checked(g, gn) == DL_ERR_TRUNCATED);
    CHECK_HAS("the decompressed data has");
    free(g);
    l = (unsigned char *)malloc(n + 1);
    memcpy(l, b, n);
    l[n] = 0;
    g = gzip_bytes(l, n + 1, &gn);
    CHECK(g && parse_checked(g, gn) == DL_ERR_FORMAT);
    CHECK_HAS("the decompressed data is longer");
    free(g);
    free(l);
    free(b);
  }
  { /* f64 [1000000]: 8 MB claimed by ~40 compressed bytes, more than they can decompress to: refused unread */
    unsigned char m[24] = {0, 0, 0x0E, 1, 0x00, 0x0F, 0x42, 0x40}, *g;
    memset(m + 8, 0x3f, 16);
    g = gzip_bytes(m, sizeof m, &gn);
    CHECK(g && gn * 1032 < 8000000);
    CHECK(g && parse_checked(g, gn) == DL_ERR_TRUNCATED);
    CHECK_HAS("dimensions [1000000] need 8000000 bytes, more than a gzip file of");
    free(g);
  }
  { /* u8 [2000001] claimed, 2000000 zeros present: within deflate's 1032:1 but above the 64:1 that is
     * trusted to allocate up front, so the data is read as it arrives and the shortfall found */
    size_t n = 2000000 + 8;
    unsigned char *m = (unsigned char *)calloc(n, 1), *g;
    m[2] = 0x08;
    m[3] = 1;
    m[4] = 0x00, m[5] = 0x1E, m[6] = 0x84, m[7] = 0x81; /* 2000001 */
    g = m ? gzip_bytes(m, n, &gn) : NULL;
    CHECK(g && gn * 64 < 2000001 && gn * 1032 >= 2000001);
    CHECK(g && parse_checked(g, gn) == DL_ERR_TRUNCATED);
    CHECK_HAS("the decompressed data has 2000008");
    free(g);
    free(m);
  }
  { /* gzip, u8 [100000000]: more than this test's DL_DATA_MAX_BYTES (64 MiB), refused before anything is read
     * (a plain file that short is truncated, which says more) */
    unsigned char m[8] = {0, 0, 0x08, 1, 0x05, 0xF5, 0xE1, 0x00}, *g = gzip_bytes(m, sizeof m, &gn);
    dl_tensor *t = NULL;
    CHECK(g && dl_idx_parse(&ctx, g, gn, &t) == DL_ERR_UNSUPPORTED && !t);
    CHECK_HAS("need 100000000 bytes, more than DL_DATA_MAX_BYTES (67108864)");
    free(g);
  }
}

static void test_idx_hostile(void) {
  size_t n, gn, k;
  unsigned char *b = slurp(DATA "images_u8.idx", &n), *g = slurp(DATA "images_u8.idx.gz", &gn), h[64] = {0};
  dl_tensor *t = NULL;
  dl_rng rng = dl_rng_make(99);
  int bad_status = 0;
  CHECK(b && g);
  if (!b || !g) { free(b); free(g); return; }
  /* truncated at every length */
  for (k = 0; k < n; k++) {
    dl_status st = parse_checked(b, k);
    if (st != DL_ERR_TRUNCATED) bad_status++;
    if (k == 40) {
      CHECK_HAS("dimensions [5, 3, 4]");
      CHECK_HAS("need 76 bytes in all (16 header + 60 data), the file has 40");
    }
    if (k == 0) CHECK_HAS("empty file");
    if (k == 10) CHECK_HAS("3 dimensions need 16 header bytes, the file has 10");
  }
  CHECK_MSG(bad_status == 0, "%d truncations gave another status than DL_ERR_TRUNCATED", bad_status);
  for (k = 0; k < gn; k++) {
    dl_status st = parse_checked(g, k);
    CHECK(st == DL_ERR_TRUNCATED || (k < 2 && st != DL_OK) || st == DL_ERR_FORMAT);
  }
  parse_checked(g, gn);
  /* wrong magic, type, dimension count */
  memcpy(h, b, 16);
  h[0] = 1;
  CHECK(parse_checked(h, 16) == DL_ERR_FORMAT);
  CHECK_HAS("bad magic 01 00 08 03");
  memcpy(h, b, 16);
  h[2] = 0x0A;
  CHECK(parse_checked(h, 16) == DL_ERR_FORMAT);
  CHECK_HAS("unknown IDX type byte 0x0a");
  h[2] = 0x08;
  h[3] = 0;
  CHECK(parse_checked(h, 16) == DL_ERR_FORMAT);
  CHECK_HAS("0 dimensions");
  h[3] = 9;
  CHECK(parse_checked(h, 64) == DL_ERR_FORMAT);
  CHECK_HAS("9 dimensions (1 to 8");
  /* dims whose product overflows: 4 x 0xffffffff f64 */
  memset(h, 0xff, sizeof h);
  h[0] = h[1] = 0; h[2] = 0x0E; h[3] = 4;
  CHECK(parse_checked(h, 20) == DL_ERR_OVERFLOW);
  CHECK_HAS("dimensions [4294967295, 4294967295, 4294967295, 4294967295] overflow");
  /* [0, 0xffffffff x 3] has no elements, but its strides would overflow */
  h[2] = 0x08; h[3] = 4; h[4] = h[5] = h[6] = h[7] = 0;
  CHECK(parse_checked(h, 20) == DL_ERR_OVERFLOW);
  CHECK_HAS("dimensions [0, 4294967295, 4294967295, 4294967295] overflow");
  memset(h + 4, 0xff, 4);
  /* [0xffffffff, 0xffff] u8 does not overflow but is far larger than the data: nothing allocated for it */
  h[2] = 0x08; h[3] = 2; h[8] = h[9] = 0;
  CHECK(parse_checked(h, 64) == DL_ERR_TRUNCATED);
  CHECK_HAS("the file has 64");
  /* Fashion-MNIST's header with 100 bytes of data */
  {
    unsigned char m[116];
    memset(m, 7, sizeof m);
    m[0] = 0; m[1] = 0; m[2] = 8; m[3] = 3;
    m[4] = 0; m[5] = 0; m[6] = 0xea; m[7] = 0x60; /* 60000 */
    m[8] = m[9] = m[10] = 0; m[11] = 28;
    m[12] = m[13] = m[14] = 0; m[15] = 28;
    CHECK(parse_checked(m, sizeof m) == DL_ERR_TRUNCATED);
    CHECK_HAS("dimensions [60000, 28, 28] (u8, 1 bytes each) need 47040016 bytes in all (16 header + 47040000 data), the file has 116");
  }
  /* longer than the dims say */
  {
    unsigned char *l = (unsigned char *)malloc(n + 3);
    memcpy(l, b, n);
    l[n] = l[n + 1] = l[n + 2] = 0;
    CHECK(parse_checked(l, n + 3) == DL_ERR_FORMAT);
    CHECK_HAS("need 76 bytes in all, the file has 79");
    free(l);
  }
  /* committed hostile files: the messages name them */
  CHECK(dl_idx_load(&ctx, DATA "corrupt.idx.gz", &t) == DL_ERR_FORMAT && !t);
  CHECK_HAS("corrupt.idx.gz: corrupt gzip data");
  CHECK(dl_idx_load(&ctx, DATA "truncated.idx.gz", &t) == DL_ERR_TRUNCATED && !t);
  CHECK_HAS("truncated.idx.gz: truncated gzip data");
  CHECK(dl_idx_load(&ctx, DATA "trailing_garbage.idx.gz", &t) == DL_ERR_FORMAT && !t);
  CHECK_HAS("not another gzip member");
  CHECK(dl_idx_load(&ctx, DATA "empty.csv", &t) == DL_ERR_TRUNCATED && !t);
  CHECK_HAS("empty.csv: truncated: empty file");
  CHECK(dl_idx_load(&ctx, DATA "no_such_file.idx", &t) == DL_ERR_IO && !t);
  CHECK_HAS("cannot open tests/data/no_such_file.idx");
  CHECK(dl_idx_load(&ctx, DATA "iris_small.csv", &t) == DL_ERR_FORMAT);
  CHECK_HAS("bad magic");
  /* random mutations of the plain and gzip files */
  for (k = 0; k < 3000; k++) {
    int gz = k & 1, flips = 1 + (int)dl_rng_below(&rng, 4), f;
    size_t len = gz ? gn : n, cut;
    unsigned char *m = (unsigned char *)malloc(len);
    memcpy(m, gz ? g : b, len);
    for (f = 0; f < flips; f++) m[dl_rng_below(&rng, len)] ^= (unsigned char)(1u << dl_rng_below(&rng, 8));
    cut = dl_rng_below(&rng, 4) == 0 ? (size_t)dl_rng_below(&rng, len + 1) : len;
    parse_checked(m, cut);
    free(m);
  }
  free(b);
  free(g);
}

/* >>fashion-mnist ------------------------------------------------------------------ */

static void test_fashion_mnist(void) {
  dl_dataset tr, te, none;
  dl_batcher bt;
  dl_batch batch;
  int64_t hist[10] = {0}, i, k, seen_n = 0;
  uint64_t w = 0;
  unsigned char *seen;
  FILE *f = fopen(DL_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", "rb");
  int ok;
  CHECK(dl_load_fashion_mnist(&ctx, "/nonexistent", &none, NULL) == DL_ERR_IO);
  CHECK_HAS("apt-get install dataset-fashion-mnist");
  CHECK(none.x == NULL);
  if (!f) SKIP("%s not found: apt-get install dataset-fashion-mnist", DL_FASHION_MNIST_DIR);
  fclose(f);
  if (dl_load_fashion_mnist(&ctx, NULL, &tr, &te) != DL_OK) {
    CHECK_MSG(0, "dl_load_fashion_mnist: %s", ctx.message);
    return;
  }
  CHECK(tr.n == 60000 && te.n == 10000);
  CHECK(tr.x->dtype == DL_U8 && tr.x->ndim == 4 && tr.x->shape[1] == 1 && tr.x->shape[2] == 28 && tr.x->shape[3] == 28);
  CHECK(tr.y->dtype == DL_I64 && tr.y->ndim == 1 && te.y->shape[0] == 10000);
  CHECK(tr.num_classes == 10 && strcmp(tr.class_names[9], "Ankle boot") == 0 && strcmp(dl_fashion_mnist_class(0), "T-shirt/top") == 0);
  for (i = 0; i < tr.n; i++) hist[dl_i64(tr.y)[i]]++;
  for (k = 0; k < 10; k++) CHECK_MSG(hist[k] == 6000, "class %d: %lld", (int)k, (long long)hist[k]);
  memset(hist, 0, sizeof hist);
  for (i = 0; i < te.n; i++) hist[dl_i64(te.y)[i]]++;
  for (k = 0; k < 10; k++) CHECK(hist[k] == 1000);
  CHECK(dl_i64(tr.y)[0] == 9 && dl_i64(tr.y)[1] == 0 && dl_i64(tr.y)[3] == 3);
  CHECK(dl_i64(te.y)[0] == 9 && dl_i64(te.y)[1] == 2 && dl_i64(te.y)[4] == 6);
  CHECK(sum_u8(tr.x) == 3431114169LL);
  CHECK(sum_u8(te.x) == 573469082LL);
  for (i = 0; i < tr.x->numel; i++) w += (uint64_t)(i % 1000003 + 1) * dl_u8(tr.x)[i];
  CHECK(w == 1711471294984078ULL);
  /* one epoch of batches: each sample once, x = pixel / 255 */
  ok = dl_batcher_make(&ctx, &bt, &tr, &(dl_batcher_desc){.batch_size = 256, .shuffle.seed = 5}) == DL_OK;
  CHECK(ok);
  seen = (unsigned char *)calloc((size_t)tr.n, 1);
  if (ok) {
    int values_ok = 1;
    CHECK(dl_batcher_num_batches(&bt) == 235);
    while (dl_batcher_next(&bt, &batch)) {
      for (k = 0; k < batch.size; k++) {
        int64_t r = batch.index[k], j;
        if (!seen[r]++) seen_n++;
        for (j = 0; j < 784; j += 97)
          values_ok &= dl_f32(batch.x)[k * 784 + j] == (float)(dl_u8(tr.x)[r * 784 + j] / 255.0);
        values_ok &= dl_i64(batch.y)[k] == dl_i64(tr.y)[r];
      }
    }
    CHECK(values_ok);
    CHECK(seen_n == 60000);
    dl_batcher_free(&bt);
  }
  free(seen);
  dl_dataset_free(&tr);
  dl_dataset_free(&te);
  CHECK(tr.x == NULL && tr.n == 0);
}

/* >>dataset ------------------------------------------------------------------------ */

static void test_dataset_make(void) {
  dl_ctx c;
  dl_dataset ds;
  dl_tensor *x, *y;
  counting_ctx(&c);
  x = dl_tensor_make(&c, DL_U8, DL_SHAPE(4, 2));
  y = dl_tensor_make(&c, DL_I64, DL_SHAPE(3));
  CHECK(dl_dataset_make(&c, &ds, x, y, DL_DATASET_OWN) == DL_ERR_SHAPE);
  CHECK_MSG(has(c.message, "y i64[3] must be [N, ...] with N = 4"), "%s", c.message);
  CHECK(ds.x == NULL && n_alloc == n_free); /* owned tensors freed on failure */
  x = dl_tensor_make(&c, DL_I32, DL_SHAPE(4, 2));
  CHECK(dl_dataset_make(&c, &ds, x, NULL, 0) == DL_ERR_DTYPE);
  CHECK(has(c.message, "inputs are u8, f32, f64 or i64"));
  dl_tensor_free(x);
  x = dl_tensor_make(&c, DL_F32, DL_SHAPE(4, 2));
  y = dl_tensor_make(&c, DL_I64, DL_SHAPE(4));
  dl_i64(y)[2] = -1;
  CHECK(dl_dataset_make(&c, &ds, x, y, DL_DATASET_OWN_Y) == DL_ERR_FORMAT);
  CHECK(has(c.message, "target 2 is -1"));
  /* y was freed (owned), x was not */
  {
    dl_tensor v = dl_view_transpose(x, 0, 1);
    CHECK(dl_dataset_make(&c, &ds, &v, NULL, 0) == DL_ERR_SHAPE);
    CHECK(has(c.message, "contiguous"));
  }
  y = dl_tensor_make(&c, DL_I64, DL_SHAPE(4));
  dl_i64(y)[1] = 6;
  CHECK(dl_dataset_make(&c, &ds, x, y, DL_DATASET_OWN) == DL_OK);
  CHECK(ds.n == 4 && ds.num_classes == 7 && ds.x == x);
  dl_dataset_free(&ds);
  CHECK(n_alloc == n_free);
}

static void test_split(void) {
  dl_dataset ds, tr, va, tr2, va2, sub_tr, sub_va;
  dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(1000, 3));
  unsigned char *mark = (unsigned char *)calloc(1000, 1);
  int64_t i, sorted = 1, same = 1, diff = 0;
  for (i = 0; i < 3000; i++) dl_f32(x)[i] = (float)i;
  CHECK(dl_dataset_make(&ctx, &ds, x, NULL, DL_DATASET_OWN) == DL_OK);
  CHECK(dl_dataset_split(&ctx, &ds, 200, 11, &tr, &va) == DL_OK);
  CHECK(tr.n == 800 && va.n == 200);
  for (i = 0; i < tr.n; i++) { mark[dl_dataset_row(&tr, i)]++; if (i && tr.index[i] <= tr.index[i - 1]) sorted = 0; }
  for (i = 0; i < va.n; i++) { mark[dl_dataset_row(&va, i)]++; if (i && va.index[i] <= va.index[i - 1]) sorted = 0; }
  for (i = 0; i < 1000; i++) CHECK(mark[i] == 1);
  CHECK(sorted);
  CHECK(dl_dataset_split(&ctx, &ds, 200, 11, &tr2, &va2) == DL_OK);
  for (i = 0; i < 200; i++) same &= va.index[i] == va2.index[i];
  CHECK(same);
  dl_dataset_free(&tr2); dl_dataset_free(&va2);
  CHECK(dl_dataset_split(&ctx, &ds, 200, 12, &tr2, &va2) == DL_OK);
  for (i = 0; i < 200; i++) diff += va.index[i] != va2.index[i];
  CHECK(diff > 100);
  dl_dataset_free(&tr2); dl_dataset_free(&va2);
  /* a split of a split refers to the original rows */
  CHECK(dl_dataset_split(&ctx, &tr, 100, 1, &sub_tr, &sub_va) == DL_OK);
  CHECK(sub_tr.n == 700 && sub_va.n == 100);
  memset(mark, 0, 1000);
  for (i = 0; i < sub_tr.n; i++) mark[dl_dataset_row(&sub_tr, i)]++;
  for (i = 0; i < sub_va.n; i++) mark[dl_dataset_row(&sub_va, i)]++;
  for (i = 0; i < va.n; i++) CHECK(mark[va.index[i]] == 0);
  for (i = 0; i < tr.n; i++) CHECK(mark[tr.index[i]] == 1);
  dl_dataset_free(&sub_tr); dl_dataset_free(&sub_va);
  CHECK(dl_dataset_split(&ctx, &ds, 1001, 1, &tr2, &va2) == DL_ERR_ARG);
  CHECK_HAS("1001 validation samples of 1000");
  CHECK(dl_dataset_split(&ctx, &ds, 0, 1, &tr2, &va2) == DL_OK && tr2.n == 1000 && va2.n == 0);
  dl_dataset_free(&tr2); dl_dataset_free(&va2);
  {
    int64_t bad[2] = {3, 1000};
    CHECK(dl_dataset_subset(&ctx, &ds, bad, 2, &tr2) == DL_ERR_ARG && tr2.index == NULL);
    CHECK_HAS("samples[1] = 1000 is outside 0..999");
  }
  /* the first k samples (of a subset: its first k, i.e. the original's rows) */
  CHECK(dl_dataset_head(&ctx, &tr, 5, &tr2) == DL_OK && tr2.n == 5);
  for (i = 0; i < 5; i++) CHECK(dl_dataset_row(&tr2, i) == dl_dataset_row(&tr, i));
  dl_dataset_free(&tr2);
  CHECK(dl_dataset_head(&ctx, &ds, 0, &tr2) == DL_OK && tr2.n == 1000 && dl_dataset_row(&tr2, 999) == 999);
  dl_dataset_free(&tr2);
  CHECK(dl_dataset_head(&ctx, &ds, 5000, &tr2) == DL_OK && tr2.n == 1000);
  dl_dataset_free(&tr2);
  dl_dataset_free(&tr); dl_dataset_free(&va);
  dl_dataset_free(&ds);
  free(mark);
}

/* >>shuffler ------------------------------------------------------------------------ */

static void test_shuffle_perm(void) {
  int64_t p[50], q[50], i, e, counts[6] = {0};
  int ok = 1, differ = 0, differ_seed = 0;
  unsigned char m[50];
  for (e = 0; e < 20; e++) {
    dl_shuffle_perm(77, e, 50, p);
    dl_shuffle_perm(77, e, 50, q);
    memset(m, 0, sizeof m);
    for (i = 0; i < 50; i++) { ok &= p[i] >= 0 && p[i] < 50 && !m[p[i]]; m[p[i]] = 1; ok &= p[i] == q[i]; }
    dl_shuffle_perm(77, e + 1, 50, q);
    differ += memcmp(p, q, sizeof p) != 0;
    dl_shuffle_perm(78, e, 50, q);
    differ_seed += memcmp(p, q, sizeof p) != 0;
  }
  CHECK(ok && differ == 20 && differ_seed == 20);
  /* n = 3: each of the 6 permutations ~1000 times in 6000 epochs (sd ~29) */
  for (e = 0; e < 6000; e++) {
    dl_shuffle_perm(5, e, 3, p);
    counts[p[0] * 2 + (p[1] > p[2])]++;
  }
  for (i = 0; i < 6; i++) CHECK_MSG(counts[i] > 850 && counts[i] < 1150, "permutation %d: %lld of 6000", (int)i, (long long)counts[i]);
}

static void check_shards(int64_t n, int world, int pad) {
  dl_shuffler s[8];
  int64_t *cnt = (int64_t *)calloc((size_t)n, sizeof(int64_t)), *perm = (int64_t *)malloc((size_t)n * sizeof(int64_t));
  int64_t per = pad ? (n + world - 1) / world : n / world, k, total = 0, twice = 0, missing = 0;
  int r, e, match = 1;
  for (e = 0; e < 3; e++) {
    memset(cnt, 0, (size_t)n * sizeof(int64_t));
    dl_shuffle_perm(9, e, n, perm);
    for (r = 0; r < world; r++) {
      int64_t buf[256], got, at = 0;
      if (e == 0) CHECK(dl_shuffler_make(&ctx, &s[r], n, &(dl_shuffler_desc){.seed = 9, .world = world, .rank = r, .pad = pad}) == DL_OK);
      else dl_shuffler_set_epoch(&s[r], e);
      CHECK(s[r].per_rank == per);
      while ((got = dl_shuffler_next(&s[r], buf, 7)) > 0) {
        for (k = 0; k < got; k++) {
          cnt[buf[k]]++;
          match &= buf[k] == perm[((at + k) * world + r) % n];
        }
        at += got;
      }
      CHECK(at == per);
    }
    total = twice = missing = 0;
    for (k = 0; k < n; k++) { total += cnt[k]; twice += cnt[k] > 1; missing += cnt[k] == 0; }
    CHECK(total == per * world);
    if (pad) CHECK(missing == 0 && twice == per * world - n);
    else {
      CHECK(twice == 0 && missing == n % world);
      for (k = n - n % world; k < n; k++) CHECK(cnt[perm[k]] == 0); /* the permutation's tail is skipped */
    }
  }
  CHECK(match);
  for (r = 0; r < world; r++) dl_shuffler_free(&s[r]);
  free(cnt);
  free(perm);
}

static void test_shuffler_shards(void) {
  dl_shuffler s;
  check_shards(103, 4, 0);
  check_shards(103, 4, 1);
  check_shards(100, 4, 0);
  check_shards(3, 5, 1);
  check_shards(3, 5, 0);
  check_shards(17, 1, 0);
  CHECK(dl_shuffler_make(&ctx, &s, 10, &(dl_shuffler_desc){.world = 2, .rank = 2}) == DL_ERR_ARG);
  CHECK_HAS("rank 2 of world 2");
}

static void test_shuffler_state(void) {
  dl_shuffler a, b, c;
  dl_shuffler_state st;
  int64_t ra[400], rb[400], n1, k, got;
  CHECK(dl_shuffler_make(&ctx, &a, 57, &(dl_shuffler_desc){.seed = 0xdeadbeefcafef00dULL, .world = 2, .rank = 1}) == DL_OK);
  /* one and a half epochs */
  while (dl_shuffler_next(&a, ra, 5) > 0) {}
  dl_shuffler_set_epoch(&a, a.epoch + 1);
  n1 = dl_shuffler_next(&a, ra, 13);
  CHECK(n1 == 13);
  st = dl_shuffler_get_state(&a);
  CHECK(st.epoch == 1 && st.pos == 13 && (uint64_t)st.seed == 0xdeadbeefcafef00dULL);
  /* the rest of epoch 1 and all of epoch 2 */
  for (k = 0; (got = dl_shuffler_next(&a, ra + k, 4)) > 0; k += got) {}
  dl_shuffler_set_epoch(&a, 2);
  while ((got = dl_shuffler_next(&a, ra + k, 4)) > 0) k += got;
  /* a fresh shuffler (another seed) restored from the state continues identically */
  CHECK(dl_shuffler_make(&ctx, &b, 57, &(dl_shuffler_desc){.seed = 1, .world = 2, .rank = 1}) == DL_OK);
  CHECK(dl_shuffler_restore(&b, &st) == DL_OK);
  {
    int64_t j;
    for (j = 0; (got = dl_shuffler_next(&b, rb + j, 4)) > 0; j += got) {}
    dl_shuffler_set_epoch(&b, 2);
    while ((got = dl_shuffler_next(&b, rb + j, 4)) > 0) j += got;
    CHECK(j == k && memcmp(ra, rb, (size_t)k * sizeof(int64_t)) == 0);
  }
  CHECK(dl_shuffler_make(&ctx, &c, 57, &(dl_shuffler_desc){.seed = 1, .world = 2, .rank = 0}) == DL_OK);
  CHECK(dl_shuffler_restore(&c, &st) == DL_ERR_ARG);
  CHECK_HAS("state is for n 57, world 2, rank 1");
  CHECK(c.seed == 1 && c.epoch == 0);
  st.pos = 29;
  CHECK(dl_shuffler_restore(&b, &st) == DL_ERR_ARG);
  dl_shuffler_free(&a); dl_shuffler_free(&b); dl_shuffler_free(&c);
}

/* >>batcher ------------------------------------------------------------------------- */

static void make_u8_dataset(dl_ctx *c, dl_dataset *ds, int64_t n, int64_t C, int64_t H, int64_t W) {
  dl_tensor *x = dl_tensor_make(c, DL_U8, DL_SHAPE(n, C, H, W)), *y = dl_tensor_make(c, DL_I64, DL_SHAPE(n));
  int64_t i;
  for (i = 0; i < x->numel; i++) dl_u8(x)[i] = (uint8_t)((i * 7919) % 251);
  for (i = 0; i < n; i++) dl_i64(y)[i] = i % 10;
  CHECK(dl_dataset_make(c, ds, x, y, DL_DATASET_OWN) == DL_OK);
}

static void test_batcher_basic(void) {
  dl_dataset ds, fd, gd;
  dl_batcher b;
  dl_batch batch;
  int64_t sizes[8], nb = 0, k, j, order0[10], order1[10], no = 0;
  int ok = 1;
  make_u8_dataset(&ctx, &ds, 10, 1, 2, 3);
  CHECK(dl_batcher_make(&ctx, &b, &ds, &(dl_batcher_desc){.batch_size = 4, .shuffle.seed = 2}) == DL_OK);
  CHECK(dl_batcher_num_batches(&b) == 3);
  while (dl_batcher_next(&b, &batch) && nb < 8) {
    sizes[nb] = batch.size;
    CHECK(batch.step == nb && batch.epoch == 0);
    CHECK(batch.x->dtype == DL_F32 && batch.x->ndim == 4 && batch.x->shape[0] == batch.size && batch.x->shape[3] == 3);
    CHECK(batch.y->shape[0] == batch.size && batch.y->numel == batch.size);
    for (k = 0; k < batch.size; k++) {
      int64_t r = batch.index[k];
      order0[no++] = r;
      for (j = 0; j < 6; j++) ok &= dl_f32(batch.x)[k * 6 + j] == (float)(dl_u8(ds.x)[r * 6 + j] / 255.0);
      ok &= dl_i64(batch.y)[k] == dl_i64(ds.y)[r];
    }
    nb++;
  }
  CHECK(ok);
  CHECK(nb == 3 && sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 2);
  CHECK(batch.size == 0 && batch.x == NULL && b.shuf.epoch == 1);
  {
    int64_t m = 0, seen[10] = {0};
    for (k = 0; k < 10; k++) seen[order0[k]]++;
    for (k = 0; k < 10; k++) m += seen[k] == 1;
    CHECK(m == 10);
  }
  no = 0;
  while (dl_batcher_next(&b, &batch))
    for (k = 0; k < batch.size; k++) order1[no++] = batch.index[k];
  CHECK(no == 10 && memcmp(order0, order1, sizeof order0) != 0);
  dl_batcher_free(&b);
  /* drop_last, no shuffle, f64, standardisation */
  CHECK(dl_batcher_make(&ctx, &b, &ds, &(dl_batcher_desc){.batch_size = 4, .drop_last = 1, .shuffle.no_shuffle = 1,
                                                            .dtype = DL_F64, .norm = DL_NORM_STANDARDIZE,
                                                            .mean = 0.25, .std = 0.5}) == DL_OK);
  CHECK(dl_batcher_num_batches(&b) == 2);
  nb = 0;
  ok = 1;
  while (dl_batcher_next(&b, &batch)) {
    CHECK(batch.size == 4 && batch.x->dtype == DL_F64);
    for (k = 0; k < 4; k++) {
      ok &= batch.index[k] == nb * 4 + k;
      for (j = 0; j < 6; j++)
        ok &= fabs(dl_f64(batch.x)[k * 6 + j] - (dl_u8(ds.x)[batch.index[k] * 6 + j] / 255.0 - 0.25) / 0.5) < 1e-15;
    }
    nb++;
  }
  CHECK(ok && nb == 2);
  dl_batcher_free(&b);
  /* u8 without scaling */
  CHECK(dl_batcher_make(&ctx, &b, &ds, &(dl_batcher_desc){.batch_size = 10, .norm = DL_NORM_NONE, .shuffle.no_shuffle = 1}) == DL_OK);
  CHECK(dl_batcher_next(&b, &batch) && dl_f32(batch.x)[7] == (float)dl_u8(ds.x)[7]);
  dl_batcher_free(&b);
  /* float inputs: passed through, dtype must match */
  {
    dl_tensor *x = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(5, 2)), *y = dl_tensor_make(&ctx, DL_F64, DL_SHAPE(5, 1));
    for (k = 0; k < 10; k++) dl_f64(x)[k] = 0.1 * (double)k;
    for (k = 0; k < 5; k++) dl_f64(y)[k] = -(double)k;
    CHECK(dl_dataset_make(&ctx, &fd, x, y, DL_DATASET_OWN) == DL_OK);
    CHECK(dl_batcher_make(&ctx, &b, &fd, &(dl_batcher_desc){.batch_size = 2}) == DL_ERR_DTYPE);
    CHECK_HAS("x is f64 but the batch dtype is f32");
    CHECK_HAS("set .dtype = DL_F64");
    CHECK(b.xbuf == NULL);
    CHECK(dl_batcher_make(&ctx, &b, &fd, &(dl_batcher_desc){.batch_size = 2, .dtype = DL_F64}) == DL_OK);
    ok = 1;
    nb = 0;
    while (dl_batcher_next(&b, &batch)) {
      nb += batch.size;
      CHECK(batch.y->ndim == 2 && batch.y->shape[1] == 1);
      for (k = 0; k < batch.size; k++) {
        ok &= dl_f64(batch.x)[2 * k + 1] == dl_f64(x)[2 * batch.index[k] + 1];
        ok &= dl_f64(batch.y)[k] == -(double)batch.index[k];
      }
    }
    CHECK(ok && nb == 5);
    dl_batcher_free(&b);
    /* f32 with a scale */
    {
      dl_tensor *x32 = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(3, 2));
      for (k = 0; k < 6; k++) dl_f32(x32)[k] = (float)k;
      CHECK(dl_dataset_make(&ctx, &gd, x32, NULL, DL_DATASET_OWN) == DL_OK);
      CHECK(dl_batcher_make(&ctx, &b, &gd, &(dl_batcher_desc){.batch_size = 3, .norm = DL_NORM_SCALE, .scale = 0.5,
                                                                .shuffle.no_shuffle = 1}) == DL_OK);
      CHECK(dl_batcher_next(&b, &batch) && batch.y == NULL && dl_f32(batch.x)[5] == 2.5f && dl_f32(batch.x)[0] == 0.0f);
      dl_batcher_free(&b);
      dl_dataset_free(&gd);
    }
    dl_dataset_free(&fd);
  }
  CHECK(dl_batcher_make(&ctx, &b, &ds, &(dl_batcher_desc){.norm = DL_NORM_STANDARDIZE}) == DL_ERR_ARG);
  CHECK_HAS("std must be non-zero");
  CHECK(dl_batcher_make(&ctx, &b, &ds, &(dl_batcher_desc){.dtype = DL_I32}) == DL_ERR_DTYPE);
  dl_dataset_free(&ds);
}

static void collect(dl_batcher *b, int batches, float *xs, int64_t *ids, int64_t per) {
  dl_batch batch;
  int i = 0;
  int64_t at = 0;
  while (i < batches) {
    if (!dl_batcher_next(b, &batch)) continue;
    memcpy(xs + at * per, batch.x->data, (size_t)(batch.size * per) * sizeof(float));
    memcpy(ids + at, batch.index, (size_t)batch.size * sizeof(int64_t));
    at += batch.size;
    i++;
  }
}

static void test_batcher_resume(void) {
  dl_dataset ds;
  dl_batcher a, b;
  dl_shuffler_state st;
  dl_augment_desc aug = {.seed = 4, .crop_padding = 2, .hflip = 1};
  const int64_t per = 3 * 6 * 6;
  float *xa = (float *)malloc(sizeof(float) * 40 * 16 * per), *xb = (float *)malloc(sizeof(float) * 40 * 16 * per);
  int64_t ia[640], ib[640];
  dl_batch batch;
  int k;
  make_u8_dataset(&ctx, &ds, 90, 3, 6, 6);
  CHECK(dl_batcher_make(&ctx, &a, &ds, &(dl_batcher_desc){.batch_size = 16, .shuffle.seed = 8, .augment = &aug}) == DL_OK);
  /* 1 epoch (6 batches + the end) and 2 batches, then save */
  for (k = 0; k < 9; k++) dl_batcher_next(&a, &batch);
  st = dl_batcher_get_state(&a);
  CHECK(st.epoch == 1 && st.pos == 32);
  collect(&a, 20, xa, ia, per);
  CHECK(dl_batcher_make(&ctx, &b, &ds, &(dl_batcher_desc){.batch_size = 16, .shuffle.seed = 8, .augment = &aug}) == DL_OK);
  CHECK(dl_batcher_restore(&b, &st) == DL_OK);
  collect(&b, 20, xb, ib, per);
  CHECK(memcmp(ia, ib, sizeof ia[0] * 300) == 0); /* 20 batches hold >= 300 samples (epochs end short) */
  CHECK(memcmp(xa, xb, sizeof(float) * 300 * per) == 0);
  dl_batcher_free(&a);
  dl_batcher_free(&b);
  dl_dataset_free(&ds);
  free(xa);
  free(xb);
}

static void test_batcher_threads(void) {
  dl_ctx c1, c4;
  dl_ctx_desc d;
  dl_dataset ds;
  dl_batcher a, b;
  dl_batch ba, bb;
  double mean[3] = {0.5, 0.4, 0.3}, std[3] = {0.2, 0.25, 0.3};
  dl_augment_desc aug = {.seed = 77, .crop_padding = 3, .hflip = 1, .channels = 3, .mean = mean, .std = std};
  int same = 1, n = 0;
  memset(&d, 0, sizeof d);
  d.threads = 1;
  dl_ctx_init(&c1, &d);
  d.threads = 4;
  d.parallel_threshold = 1;
  dl_ctx_init(&c4, &d);
  make_u8_dataset(&ctx, &ds, 300, 3, 16, 16);
  CHECK(dl_batcher_make(&c1, &a, &ds, &(dl_batcher_desc){.batch_size = 64, .shuffle.seed = 3, .augment = &aug}) == DL_OK);
  CHECK(dl_batcher_make(&c4, &b, &ds, &(dl_batcher_desc){.batch_size = 64, .shuffle.seed = 3, .augment = &aug}) == DL_OK);
  while (n < 12) {
    int ga = dl_batcher_next(&a, &ba), gb = dl_batcher_next(&b, &bb);
    same &= ga == gb;
    if (!ga) continue;
    same &= ba.size == bb.size && memcmp(ba.x->data, bb.x->data, (size_t)ba.x->numel * sizeof(float)) == 0 &&
            memcmp(ba.index, bb.index, (size_t)ba.size * sizeof(int64_t)) == 0;
    n++;
  }
  CHECK(same);
  dl_batcher_free(&a);
  dl_batcher_free(&b);
  dl_dataset_free(&ds);
}

static void test_batcher_no_alloc(void) {
  dl_ctx c;
  dl_dataset ds, tok;
  dl_batcher b, w;
  dl_batch batch;
  double mean[1] = {0.5}, std[1] = {0.25};
  dl_augment_desc aug = {.seed = 1, .crop_padding = 1, .hflip = 1, .channels = 1, .mean = mean, .std = std};
  long before;
  int e, batches = 0;
  dl_tensor *t;
  int64_t i;
  counting_ctx(&c);
  make_u8_dataset(&c, &ds, 500, 1, 8, 8);
  t = dl_tensor_make(&c, DL_U8, DL_SHAPE(300));
  for (i = 0; i < 300; i++) dl_u8(t)[i] = (uint8_t)i;
  CHECK(dl_text_windows(&c, &tok, t, 16, 3, DL_DATASET_OWN_X) == DL_OK);
  CHECK(dl_batcher_make(&c, &b, &ds, &(dl_batcher_desc){.batch_size = 64, .shuffle.seed = 1, .augment = &aug}) == DL_OK);
  CHECK(dl_batcher_make(&c, &w, &tok, &(dl_batcher_desc){.batch_size = 7, .shuffle.seed = 1}) == DL_OK);
  before = n_alloc;
  for (e = 0; e < 3; e++) {
    while (dl_batcher_next(&b, &batch)) batches++;
    while (dl_batcher_next(&w, &batch)) batches++;
  }
  dl_batcher_set_epoch(&b, 10);
  while (dl_batcher_next(&b, &batch)) batches++;
  CHECK(batches == 3 * (8 + 14) + 8);
  CHECK_MSG(n_alloc == before, "%ld allocations in %d batches", n_alloc - before, batches);
  dl_batcher_free(&b);
  dl_batcher_free(&w);
  dl_dataset_free(&ds);
  dl_dataset_free(&tok);
  CHECK(n_alloc == n_free);
}

/* >>augment ------------------------------------------------------------------------- */

/* out-of-place reference: crop by (dy, dx) with zeros, flip, normalise */
static void aug_ref(const float *in, float *out, int C, int H, int W, int dy, int dx, int flip, const double *mean,
                    const double *std) {
  int c, y, x;
  for (c = 0; c < C; c++)
    for (y = 0; y < H; y++)
      for (x = 0; x < W; x++) {
        int sx = flip ? W - 1 - x : x, yy = y + dy, xx = sx + dx;
        float v = (yy >= 0 && yy < H && xx >= 0 && xx < W) ? in[(c * H + yy) * W + xx] : 0.0f;
        if (mean) v = (v - (float)mean[c]) / (float)std[c];
        out[(c * H + y) * W + x] = v;
      }
}

static void test_augment(void) {
  dl_augment_desc a = {.seed = 21, .crop_padding = 2, .hflip = 1};
  int seen[5][5] = {{0}}, flips = 0, dy, dx, fl, dy2, dx2, fl2, all = 1, ok = 1, i, y, x, s;
  int64_t e;
  double mean[2] = {0.1, -0.2}, std[2] = {2.0, 0.5};
  float img[2 * 5 * 7], out[2 * 5 * 7], ref[2 * 5 * 7];
  for (i = 0; i < 4000; i++) {
    dl_augment_draw(&a, i % 3, i, &dy, &dx, &fl);
    dl_augment_draw(&a, i % 3, i, &dy2, &dx2, &fl2);
    ok &= dy == dy2 && dx == dx2 && fl == fl2 && dy >= -2 && dy <= 2 && dx >= -2 && dx <= 2;
    if (ok) seen[dy + 2][dx + 2]++;
    flips += fl;
  }
  CHECK(ok);
  for (y = 0; y < 5; y++)
    for (x = 0; x < 5; x++) all &= seen[y][x] > 100; /* ~160 each */
  CHECK(all);
  CHECK(flips > 1800 && flips < 2200);
  /* the in-place crop / flip / normalise against the reference, many draws
   * (both walking directions of the in-place shift) */
  a.channels = 2;
  a.mean = mean;
  a.std = std;
  for (s = 0; s < 200; s++) {
    dl_tensor t;
    int64_t id = s * 31;
    for (i = 0; i < 70; i++) img[i] = (float)(i + 1);
    memcpy(out, img, sizeof img);
    dl_tensor_wrap(&t, &ctx, DL_F32, DL_SHAPE(1, 2, 5, 7), out);
    dl_augment_batch(&a, &t, &id, 4);
    dl_augment_draw(&a, 4, id, &dy, &dx, &fl);
    aug_ref(img, ref, 2, 5, 7, dy, dx, fl, mean, std);
    ok &= memcmp(out, ref, sizeof out) == 0;
  }
  CHECK(ok);
  /* different epochs: different draws for most samples */
  {
    int differ = 0;
    for (e = 0; e < 100; e++) {
      dl_augment_draw(&a, 0, e, &dy, &dx, &fl);
      dl_augment_draw(&a, 1, e, &dy2, &dx2, &fl2);
      differ += dy != dy2 || dx != dx2 || fl != fl2;
    }
    CHECK(differ > 80);
  }
  /* through batchers of two batch sizes: sample r gets the same image */
  {
    dl_dataset ds;
    dl_batcher b7, b32;
    dl_batch batch;
    const int64_t per = 3 * 9 * 9;
    float *by7 = (float *)calloc(100 * per, sizeof(float)), *by32 = (float *)calloc(100 * per, sizeof(float));
    int64_t k, nonzero_diff = 0;
    a.channels = 0;
    make_u8_dataset(&ctx, &ds, 100, 3, 9, 9);
    CHECK(dl_batcher_make(&ctx, &b7, &ds, &(dl_batcher_desc){.batch_size = 7, .shuffle.seed = 1, .augment = &a}) == DL_OK);
    CHECK(dl_batcher_make(&ctx, &b32, &ds, &(dl_batcher_desc){.batch_size = 32, .shuffle.seed = 2, .augment = &a}) == DL_OK);
    while (dl_batcher_next(&b7, &batch))
      for (k = 0; k < batch.size; k++) memcpy(by7 + batch.index[k] * per, dl_f32(batch.x) + k * per, per * sizeof(float));
    while (dl_batcher_next(&b32, &batch))
      for (k = 0; k < batch.size; k++) memcpy(by32 + batch.index[k] * per, dl_f32(batch.x) + k * per, per * sizeof(float));
    CHECK(memcmp(by7, by32, 100 * per * sizeof(float)) == 0);
    /* and it is the reference applied to x / 255 */
    ok = 1;
    for (k = 0; k < 100; k++) {
      float src[243], r2[243];
      int j;
      for (j = 0; j < 243; j++) src[j] = (float)(dl_u8(ds.x)[k * 243 + j] / 255.0);
      dl_augment_draw(&a, 0, k, &dy, &dx, &fl);
      aug_ref(src, r2, 3, 9, 9, dy, dx, fl, NULL, NULL);
      ok &= memcmp(r2, by7 + k * per, sizeof r2) == 0;
      for (j = 0; j < 243; j++) nonzero_diff += r2[j] != src[j];
    }
    CHECK(ok && nonzero_diff > 1000);
    dl_batcher_free(&b7);
    dl_batcher_free(&b32);
    /* misuse at make: augmentation of non-images, channel count */
    a.channels = 2;
    CHECK(dl_batcher_make(&ctx, &b7, &ds, &(dl_batcher_desc){.augment = &a}) == DL_ERR_ARG);
    CHECK_HAS("2 channels");
    dl_dataset_free(&ds);
    free(by7);
    free(by32);
  }
  {
    dl_tensor *x = dl_tensor_make(&ctx, DL_F32, DL_SHAPE(2, 3));
    int64_t ids[2] = {0, 1};
    a.channels = 0;
    EXPECT_PANIC(dl_augment_batch(&a, x, ids, 0), "dl_augment_batch", "f32[2, 3]");
    dl_tensor_free(x);
  }
}

/* >>csv ------------------------------------------------------------------------------ */

static void test_csv(void) {
  dl_dataset ds, g;
  static const float iris0[4] = {5.1f, 3.5f, 1.4f, 0.2f}, iris5[4] = {5.8f, 2.7f, 5.1f, 1.9f};
  static const int64_t lab[6] = {0, 0, 1, 1, 2, 2};
  CHECK(dl_csv_load(&ctx, DATA "iris_small.csv", &(dl_csv_desc){.label = "species"}, &ds) == DL_OK);
  if (ds.x) {
    CHECK(ds.n == 6 && ds.x->ndim == 2 && ds.x->shape[1] == 4 && ds.x->dtype == DL_F32 && ds.num_classes == 3);
    CHECK(memcmp(dl_f32(ds.x), iris0, sizeof iris0) == 0 && memcmp(dl_f32(ds.x) + 20, iris5, sizeof iris5) == 0);
    CHECK(memcmp(dl_i64(ds.y), lab, sizeof lab) == 0);
  }
  CHECK(dl_csv_load(&ctx, DATA "iris_small.csv.gz", &(dl_csv_desc){.label_column = -1}, &g) == DL_OK);
  if (g.x && ds.x) CHECK(memcmp(g.x->data, ds.x->data, 24 * 4) == 0 && memcmp(g.y->data, ds.y->data, 6 * 8) == 0);
  dl_dataset_free(&g);
  CHECK(dl_csv_load(&ctx, DATA "iris_small.csv", &(dl_csv_desc){.label_column = 4, .dtype = DL_F64}, &g) == DL_OK);
  if (g.x) CHECK(g.x->dtype == DL_F64 && dl_f64(g.x)[1] == 3.5 && dl_i64(g.y)[5] == 2);
  dl_dataset_free(&g);
  dl_dataset_free(&ds);
  /* the first column as label: 5.1 is no class index */
  CHECK(dl_csv_load(&ctx, DATA "iris_small.csv", NULL, &ds) == DL_ERR_FORMAT && ds.x == NULL);
  CHECK_HAS("iris_small.csv: line 2, column 1: label 5.1 is not a class index");
  /* BOM, CRLF, quotes, spaces, regression target by its quoted name */
  CHECK(dl_csv_load(&ctx, DATA "regression_crlf.csv", &(dl_csv_desc){.label = "target \"y\"", .regression = 1, .dtype = DL_F64}, &ds) == DL_OK);
  if (ds.x) {
    static const double xv[6] = {1, 2, -3.5, 400, 0, 0.5}, yv[3] = {0.5, -0.125, 7};
    CHECK(ds.n == 3 && ds.x->shape[1] == 2 && ds.y->ndim == 2 && ds.y->shape[1] == 1 && ds.y->dtype == DL_F64);
    CHECK(memcmp(dl_f64(ds.x), xv, sizeof xv) == 0 && memcmp(dl_f64(ds.y), yv, sizeof yv) == 0);
  }
  dl_dataset_free(&ds);
  CHECK(dl_csv_load(&ctx, DATA "regression_crlf.csv", &(dl_csv_desc){.label = "x,2", .regression = 1}, &ds) == DL_OK);
  if (ds.x) CHECK(dl_f32(ds.y)[1] == 400 && dl_f32(ds.x)[3] == -0.125f);
  dl_dataset_free(&ds);
  CHECK(dl_csv_load(&ctx, DATA "regression_crlf.csv", &(dl_csv_desc){.no_label = 1}, &ds) == DL_OK);
  if (ds.x) CHECK(ds.y == NULL && ds.x->shape[1] == 3 && dl_f32(ds.x)[8] == 7);
  dl_dataset_free(&ds);
  /* hostile files */
#define CSV_BAD(file, desc, status, frag)                                   \
  do {                                                                      \
    CHECK(dl_csv_load(&ctx, DATA file, desc, &ds) == (status) && ds.x == NULL); \
    CHECK_HAS(frag);                                                        \
  } while (0)
  CSV_BAD("ragged.csv", &(dl_csv_desc){.label = "label"}, DL_ERR_FORMAT, "ragged.csv: line 3 has 2 fields, the header (line 1) has 3");
  CSV_BAD("missing.csv", &(dl_csv_desc){.label = "label"}, DL_ERR_FORMAT, "missing.csv: line 3, column 2 (\"b\"): missing value");
  CSV_BAD("missing_na.csv", &(dl_csv_desc){.label = "label"}, DL_ERR_FORMAT, "line 2, column 2 (\"b\"): missing value (NA)");
  CSV_BAD("badnum.csv", &(dl_csv_desc){.label = "label"}, DL_ERR_FORMAT, "badnum.csv: line 4, column 2 (\"b\"): \"six\" is not a number");
  CSV_BAD("badlabel.csv", &(dl_csv_desc){.label = "label"}, DL_ERR_FORMAT, "label 0.5 is not a class index");
  CSV_BAD("noheader.csv", NULL, DL_ERR_FORMAT, "noheader.csv: line 1 is data (every field is a number), not a header row");
  CSV_BAD("empty.csv", NULL, DL_ERR_FORMAT, "empty.csv: empty file: a header row naming the columns is required");
  CSV_BAD("header_only.csv", NULL, DL_ERR_FORMAT, "no data rows after the header");
  CSV_BAD("unterminated.csv", NULL, DL_ERR_FORMAT, "line 2, column 2: unterminated quote");
  CSV_BAD("iris_small.csv", &(dl_csv_desc){.label = "class"}, DL_ERR_ARG, "no column named \"class\"");
  CSV_BAD("iris_small.csv", &(dl_csv_desc){.label_column = 5}, DL_ERR_ARG, "label column 5, the header has 5 columns");
  CSV_BAD("no_such.csv", NULL, DL_ERR_IO, "cannot open tests/data/no_such.csv");
  CSV_BAD("iris_small.csv", &(dl_csv_desc){.dtype = DL_U8}, DL_ERR_DTYPE, "f32 or f64");
  /* more fields than the header */
  {
    static const char extra[] = "a,b\n1,2\n3,4,5,6\n";
    CHECK(dl_csv_parse(&ctx, extra, sizeof extra - 1, NULL, &ds) == DL_ERR_FORMAT);
    CHECK_HAS("<memory>: line 3 has 4 fields, the header (line 1) has 2");
    static const char semi[] = "a;b\n1;2\n\n3;4\n";
    CHECK(dl_csv_parse(&ctx, semi, sizeof semi - 1, &(dl_csv_desc){.delimiter = ';', .label_column = 1}, &ds) == DL_OK);
    if (ds.x) CHECK(ds.n == 2 && dl_f32(ds.x)[1] == 3 && dl_i64(ds.y)[1] == 4);
    dl_dataset_free(&ds);
    static const char big[] = "a,b\n1,2\n-3e51,1\n";
    CHECK(dl_csv_parse(&ctx, big, sizeof big - 1, &(dl_csv_desc){.label_column = 1}, &ds) == DL_ERR_FORMAT);
    CHECK_HAS("line 3, column 1: -3e51 is out of f32's range");
    CHECK(dl_csv_parse(&ctx, big, sizeof big - 1, &(dl_csv_desc){.label_column = 1, .dtype = DL_F64}, &ds) == DL_OK);
    if (ds.x) CHECK(dl_f64(ds.x)[1] == -3e51);
    dl_dataset_free(&ds);
    static const char hex[] = "a,b\n0x10,1\n";
    CHECK(dl_csv_parse(&ctx, hex, sizeof hex - 1, &(dl_csv_desc){.label_column = 1}, &ds) == DL_ERR_FORMAT);
    CHECK_HAS("\"0x10\" is not a number");
  }
  /* truncated at every length: OK or a status with a message, never a crash */
  {
    size_t n, k;
    unsigned char *b = slurp(DATA "iris_small.csv", &n);
    int okc = 0;
    for (k = 0; b && k <= n; k++) {
      dl_status st;
      dl_ctx_clear(&ctx);
      st = dl_csv_parse(&ctx, b, k, &(dl_csv_desc){.label = "species"}, &ds);
      if (st == DL_OK) { okc++; CHECK(ds.x != NULL); dl_dataset_free(&ds); }
      else CHECK(ds.x == NULL && ctx.message[0]);
    }
    CHECK(okc > 5);
    free(b);
  }
}

/* >>images ---------------------------------------------------------------------------- */

static void test_image_resize(void) {
  static const uint8_t src1[15] = {3, 32, 119, 8, 211, 88, 117, 204, 93, 40, 173, 202, 33, 178, 125};
  static const uint8_t want1[8] = {25, 59, 78, 72, 142, 112, 195, 165};
  static const uint8_t src2[18] = {11, 61, 111, 81, 131, 181, 35, 85, 135, 51, 101, 151, 121, 171, 221, 75, 125, 175};
  static const uint8_t want2[60] = {11, 55, 64, 35, 15, 59, 68, 39, 31, 75, 84, 55, 47, 91, 100, 71, 51, 95, 104, 75,
                                    61, 105, 114, 85, 65, 109, 118, 89, 81, 125, 134, 105, 97, 141, 150, 121, 101, 145, 154, 125,
                                    111, 155, 164, 135, 115, 159, 168, 139, 131, 175, 184, 155, 147, 191, 200, 171, 151, 195, 204, 175};
  uint8_t out[64], same[18];
  int i, d1 = 0, d2 = 0;
  dl_image_resize(src1, 3, 5, 1, out, 4, 2);        /* values from torch interpolate, bilinear */
  for (i = 0; i < 8; i++) d1 += out[i] != want1[i];
  dl_image_resize(src2, 2, 3, 3, out, 5, 4);
  for (i = 0; i < 60; i++) d2 += out[i] != want2[i];
  CHECK_MSG(d1 == 0 && d2 == 0, "%d and %d pixels differ from torch", d1, d2);
  dl_image_resize(src2, 2, 3, 3, same, 2, 3);         /* same size: HWC -> CHW only */
  for (i = 0; i < 18; i++) CHECK(same[(i % 3) * 6 + i / 3] == src2[i]);
}

static void test_image_folder(void) {
  dl_dataset ds;
  int64_t y, x, c;
  int ok = 1;
  CHECK(dl_image_folder_load(&ctx, DATA "images", &(dl_image_folder_desc){.height = 4, .width = 4}, &ds) == DL_OK);
  if (!ds.x) { CHECK_MSG(0, "%s", ctx.message); return; }
  CHECK(ds.n == 5 && ds.x->dtype == DL_U8 && ds.x->ndim == 4 && ds.x->shape[1] == 3 && ds.x->shape[2] == 4);
  CHECK(ds.num_classes == 2 && strcmp(ds.class_names[0], "cat") == 0 && strcmp(ds.class_names[1], "dog") == 0);
  CHECK(dl_i64(ds.y)[0] == 0 && dl_i64(ds.y)[2] == 0 && dl_i64(ds.y)[3] == 1 && dl_i64(ds.y)[4] == 1);
  /* cat/a.png: 4x4, kept exactly */
  for (y = 0; y < 4; y++)
    for (x = 0; x < 4; x++) {
      const uint8_t *p = dl_u8(ds.x);
      ok &= p[(0 * 4 + y) * 4 + x] == 10 * y + x && p[(1 * 4 + y) * 4 + x] == 50 + 20 * x && p[(2 * 4 + y) * 4 + x] == 200 - 30 * y;
    }
  CHECK(ok);
  /* cat/b.png: grey 8x8 (16x + 2y) halved: the mean of each 2x2 block, 32x + 4y + 9, in all channels */
  ok = 1;
  for (c = 0; c < 3; c++)
    for (y = 0; y < 4; y++)
      for (x = 0; x < 4; x++) ok &= dl_u8(ds.x)[48 + (c * 4 + y) * 4 + x] == 32 * x + 4 * y + 9;
  CHECK(ok);
  /* JPEGs of solid colours, approximately */
  ok = 1;
  for (y = 0; y < 16; y++) {
    ok &= abs(dl_u8(ds.x)[96 + y] - 200) <= 3 && abs(dl_u8(ds.x)[96 + 16 + y] - 100) <= 3 && abs(dl_u8(ds.x)[96 + 32 + y] - 50) <= 3;
    ok &= abs(dl_u8(ds.x)[192 + y] - 20) <= 3 && abs(dl_u8(ds.x)[192 + 16 + y] - 180) <= 3 && abs(dl_u8(ds.x)[192 + 32 + y] - 90) <= 3;
  }
  CHECK(ok);
  /* dog/a.png: RGBA 2x2 upscaled, alpha dropped: the corners are the source pixels */
  {
    const uint8_t *p = dl_u8(ds.x) + 144;
    CHECK(p[0] == 255 && p[16] == 0 && p[32] == 0);           /* (0,0) red */
    CHECK(p[15] == 255 && p[31] == 255 && p[47] == 255);      /* (3,3) white */
    CHECK(p[3] == 0 && p[19] == 255 && p[35] == 0);           /* (0,3) green */
  }
  dl_dataset_free(&ds);
  /* grey, another size */
  CHECK(dl_image_folder_load(&ctx, DATA "images", &(dl_image_folder_desc){.height = 4, .width = 4, .channels = 1}, &ds) == DL_OK);
  if (ds.x) {
    CHECK(ds.x->shape[1] == 1);
    /* stb's luma: (77 r + 150 g + 29 b) >> 8 at cat/a.png (1, 2) = (12, 90, 170) */
    CHECK(dl_u8(ds.x)[1 * 4 + 2] == ((77 * 12 + 150 * 90 + 29 * 170) >> 8));
  }
  dl_dataset_free(&ds);
  CHECK(dl_image_folder_load(&ctx, DATA "images", &(dl_image_folder_desc){.height = 3, .width = 7}, &ds) == DL_OK);
  if (ds.x) CHECK(ds.x->shape[2] == 3 && ds.x->shape[3] == 7 && ds.n == 5);
  dl_dataset_free(&ds);
  /* errors */
  CHECK(dl_image_folder_load(&ctx, DATA "images_bad", &(dl_image_folder_desc){.height = 4, .width = 4}, &ds) == DL_ERR_FORMAT);
  CHECK_HAS("images_bad/only/broken.png: cannot decode the image");
  CHECK(dl_image_folder_load(&ctx, DATA "images_empty", &(dl_image_folder_desc){.height = 4, .width = 4}, &ds) == DL_ERR_FORMAT);
  CHECK_HAS("has no class sub-folders");
  CHECK(dl_image_folder_load(&ctx, DATA "no_such_dir", &(dl_image_folder_desc){.height = 4, .width = 4}, &ds) == DL_ERR_IO);
  CHECK_HAS("cannot open folder tests/data/no_such_dir");
  CHECK(dl_image_folder_load(&ctx, DATA "images", &(dl_image_folder_desc){.width = 4}, &ds) == DL_ERR_ARG);
  CHECK(dl_image_folder_load(&ctx, DATA "images", &(dl_image_folder_desc){.height = 4, .width = 4, .channels = 2}, &ds) == DL_ERR_ARG);
  CHECK(ds.x == NULL);
  /* a decode bomb: 74 bytes declaring 32000 x 32000 grey (1 GB), refused from its header */
  CHECK(dl_image_folder_load(&ctx, DATA "images_bomb", &(dl_image_folder_desc){.height = 4, .width = 4}, &ds) ==
        DL_ERR_UNSUPPORTED);
  CHECK_HAS("images_bomb/big/huge.png: declares 32000 x 32000 pixels, more than DL_IMAGE_MAX_PIXELS (67108864)");
  CHECK(ds.x == NULL);
  {
    int w = -1, h = -1;
    unsigned char *px = dl_image_load(&ctx, DATA "images_bomb/big/huge.png", 1, &w, &h);
    CHECK(!px && w == 0 && h == 0 && ctx.status == DL_ERR_UNSUPPORTED);
    px = dl_image_load(&ctx, DATA "images/cat/a.png", 3, &w, &h);
    CHECK(px && w == 4 && h == 4 && px[0] == 0 && px[1] == 50 && px[2] == 200);
    dl_image_free(px);
    CHECK(!dl_image_load(&ctx, DATA "images_bad/only/broken.png", 3, &w, &h) && ctx.status == DL_ERR_FORMAT);
    CHECK_HAS("broken.png: cannot decode the image");
    CHECK(!dl_image_load(&ctx, DATA "no_such.png", 3, &w, &h) && ctx.status == DL_ERR_IO);
    CHECK_HAS("no_such.png: cannot open it");
    { /* a JPEG whose Huffman table claims 551 codes (the shape of what fuzz/fuzz_image.c found): stb_image
       * 2.27 would write past its 257-entry table; refused before stb sees it */
      static const unsigned char dht[] = {0xFF, 0xD8, 0xFF, 0xC4, 0x00, 0x14, 0x00, 79, 255, 217};
      size_t n;
      unsigned char *b;
      static const unsigned char fill[] = {0xFF, 0xFF, 0xFF, 0xD8, 0xFF, 0xC4, 0x00, 0x14, 0x00, 79, 255, 217};
      CHECK(!dl_image_load_memory(&ctx, dht, sizeof dht, "dht.jpg", 3, &w, &h) && ctx.status == DL_ERR_FORMAT);
      CHECK_HAS("dht.jpg: cannot decode the image (a JPEG Huffman table of more than 256 codes: corrupt)");
      /* stb reads FF fill bytes before the start marker as a JPEG too: so does the check */
      CHECK(!dl_image_load_memory(&ctx, fill, sizeof fill, "fill.jpg", 3, &w, &h) && ctx.status == DL_ERR_FORMAT);
      CHECK_HAS("fill.jpg: cannot decode the image (a JPEG Huffman table");
      { /* a PNM whose height overflows stb 2.27's int (what fuzz_image found); one that fits still decodes */
        static const char big[] = "P5\n# a comment\n2 99999999999\n255\n\x01\x02";
        static const char ok2[] = "P5 2 1 # two pixels\n255\n\x07\x09";
        unsigned char *g;
        CHECK(!dl_image_load_memory(&ctx, big, sizeof big - 1, "big.pgm", 1, &w, &h) && ctx.status == DL_ERR_FORMAT);
        CHECK_HAS("big.pgm: cannot decode the image (a PNM header number past 2147483647: corrupt)");
        g = dl_image_load_memory(&ctx, ok2, sizeof ok2 - 1, "ok.pgm", 1, &w, &h);
        CHECK(g && w == 2 && h == 1 && g[0] == 7 && g[1] == 9);
        dl_image_free(g);
      }
      { /* what fuzz_image found next: a 16-bit P6 with no pixel data, asked for other channels than its own: stb
         * 2.27 converts 16-bit samples with its 8-bit routine and reads past its buffer. A PNM shorter than its
         * header is refused; a whole 16-bit one decodes to any channel count, converted by dl.h */
        static const char cut[] = "P6\n6666 6 6663\n", cut8[] = "P5 3 1 255\n\x01\x02";
        /* 2 x 1 RGB, 16-bit big-endian samples: (0x1234, 0xFF00, 0x0101), (0x8000, 0x0000, 0xFFFF) */
        static const unsigned char rgb16[] = {'P', '6', ' ', '2', ' ', '1', ' ', '6', '5', '5', '3', '5', '\n',
                                              0x12, 0x34, 0xFF, 0x00, 0x01, 0x01, 0x80, 0x00, 0x00, 0x00, 0xFF, 0xFF};
        unsigned char *g;
        int c;
        CHECK(!dl_image_load_memory(&ctx, cut, sizeof cut - 1, "cut.ppm", 1, &w, &h) && ctx.status == DL_ERR_FORMAT);
        CHECK_HAS("cut.ppm: cannot decode the image (a PNM whose pixel data is shorter than its header declares: "
                  "truncated)");
        CHECK(!dl_image_load_memory(&ctx, cut8, sizeof cut8 - 1, "cut8.pgm", 1, &w, &h) && w == 0 && h == 0);
        CHECK_HAS("cut8.pgm: cannot decode the image (a PNM whose pixel data is shorter");
        { /* the next fuzz_image find: a header ending at the end of the data, where stb reads the maximum value
           * one digit short (66020 as 6602: a 16-bit image through its 8-bit channel conversion); and a maximum
           * past 65535 with data after it */
          static const char eof[] = "P66\v06\v66020", big[] = "P5 1 1 70000\n\x01\x02";
          CHECK(!dl_image_load_memory(&ctx, eof, sizeof eof - 1, "eof.ppm", 1, &w, &h) && ctx.status == DL_ERR_FORMAT);
          CHECK_HAS("eof.ppm: cannot decode the image (a PNM whose pixel data is shorter");
          CHECK(!dl_image_load_memory(&ctx, big, sizeof big - 1, "big.pgm", 3, &w, &h) && ctx.status == DL_ERR_FORMAT);
          CHECK_HAS("big.pgm: cannot decode the image (a PNM maximum value past 65535)");
        }
        for (c = 1; c <= 4; c++) { /* 16 -> 8 bits keeps the high byte (stb 2.27 took the low one) */
          static const unsigned char want[5][8] = {{0}, {(77 * 0x12 + 150 * 0xFF + 29 * 0x01) >> 8, (77 * 0x80 + 29 * 0xFF) >> 8},
                                                   {(77 * 0x12 + 150 * 0xFF + 29 * 0x01) >> 8, 255, (77 * 0x80 + 29 * 0xFF) >> 8, 255},
                                                   {0x12, 0xFF, 0x01, 0x80, 0x00, 0xFF},
                                                   {0x12, 0xFF, 0x01, 255, 0x80, 0x00, 0xFF, 255}};
          g = dl_image_load_memory(&ctx, rgb16, sizeof rgb16, "rgb16.ppm", c, &w, &h);
          CHECK(g && w == 2 && h == 1 && !memcmp(g, want[c], (size_t)(2 * c)));
          dl_image_free(g);
        }
      }
      { /* a PNG declaring 1 x 1 grey whose data inflates to 4 MB: stb inflates all of it (a few KB of file, GBs of
         * memory at scale); refused after a bounded inflate */
        static unsigned char zeros[4 << 20], png[64 << 10];
        uLongf zn = sizeof png - 64;
        size_t at = 0;
        uint32_t crc;
        static const unsigned char head[8 + 25] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, 'I', 'H', 'D',
                                                   'R', 0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0};
        memcpy(png, head, sizeof head);
        crc = (uint32_t)crc32(0, png + 12, 17);
        png[29] = (unsigned char)(crc >> 24), png[30] = (unsigned char)(crc >> 16), png[31] = (unsigned char)(crc >> 8);
        png[32] = (unsigned char)crc;
        at = 33;
        CHECK(compress2(png + at + 8, &zn, zeros, sizeof zeros, 9) == Z_OK && zn < 8000);
        png[at] = (unsigned char)(zn >> 24), png[at + 1] = (unsigned char)(zn >> 16), png[at + 2] = (unsigned char)(zn >> 8);
        png[at + 3] = (unsigned char)zn;
        memcpy(png + at + 4, "IDAT", 4);
        crc = (uint32_t)crc32(0, png + at + 4, (uInt)(4 + zn));
        at += 8 + zn;
        png[at] = (unsigned char)(crc >> 24), png[at + 1] = (unsigned char)(crc >> 16), png[at + 2] = (unsigned char)(crc >> 8);
        png[at + 3] = (unsigned char)crc;
        at += 4;
        memcpy(png + at, "\0\0\0\0IEND\xae\x42\x60\x82", 12);
        at += 12;
        CHECK(!dl_image_load_memory(&ctx, png, at, "inflate.png", 1, &w, &h) && ctx.status == DL_ERR_FORMAT);
        CHECK_HAS("inflate.png: cannot decode the image (its PNG data is corrupt or inflates to more than its size needs)");
        /* the same file, its image-data chunk declaring 1 GiB: stb would allocate that before reading (found
         * by fuzz_image in CI); refused */
        png[33] = 0x40, png[34] = 0, png[35] = 0, png[36] = 0;
        CHECK(!dl_image_load_memory(&ctx, png, at, "idat.png", 1, &w, &h) && ctx.status == DL_ERR_FORMAT);
        CHECK_HAS("idat.png: cannot decode the image (its PNG data is corrupt");
      }
      /* a valid JPEG still decodes through the memory path */
      b = slurp(DATA "images/cat/c.jpg", &n);
      px = b ? dl_image_load_memory(&ctx, b, n, NULL, 3, &w, &h) : NULL;
      CHECK(px && w > 0 && h > 0);
      dl_image_free(px);
      free(b);
    }
  }
}

/* >>text ------------------------------------------------------------------------------- */

static void test_text(void) {
  static const char text[] = "hello, world\nthe quick brown fox\n";
  dl_tensor *t = NULL, *t64 = NULL;
  dl_dataset ds;
  dl_batcher b;
  dl_batch batch;
  int64_t k, j, n = 0;
  int ok = 1;
  CHECK(dl_text_load(&ctx, DATA "text.txt", DL_U8, &t) == DL_OK);
  CHECK(dl_text_load(&ctx, DATA "text.txt", DL_I64, &t64) == DL_OK);
  if (!t || !t64) return;
  CHECK(t->numel == 33 && memcmp(t->data, text, 33) == 0 && dl_i64(t64)[4] == 'o');
  CHECK(dl_text_windows(&ctx, &ds, t, 4, 1, 0) == DL_OK);
  CHECK(ds.n == 29 && ds.num_classes == 256);
  CHECK(dl_batcher_make(&ctx, &b, &ds, &(dl_batcher_desc){.batch_size = 8, .shuffle.no_shuffle = 1}) == DL_OK);
  while (dl_batcher_next(&b, &batch)) {
    CHECK(batch.x->dtype == DL_I64 && batch.x->shape[1] == 4 && batch.y->shape[1] == 4);
    for (k = 0; k < batch.size; k++, n++)
      for (j = 0; j < 4; j++) ok &= dl_i64(batch.x)[k * 4 + j] == text[n + j] && dl_i64(batch.y)[k * 4 + j] == text[n + j + 1];
  }
  CHECK(ok && n == 29);
  dl_batcher_free(&b);
  dl_dataset_free(&ds);
  CHECK(dl_text_windows(&ctx, &ds, t64, 4, 0, DL_DATASET_OWN_X) == DL_OK); /* stride = window */
  CHECK(ds.n == 8 && ds.stride == 4 && ds.num_classes == 'x' + 1);
  CHECK(dl_batcher_make(&ctx, &b, &ds, &(dl_batcher_desc){.batch_size = 3, .shuffle.seed = 6}) == DL_OK);
  n = 0;
  ok = 1;
  while (dl_batcher_next(&b, &batch))
    for (k = 0; k < batch.size; k++, n++)
      for (j = 0; j < 4; j++) ok &= dl_i64(batch.y)[k * 4 + j] == text[batch.index[k] * 4 + j + 1];
  CHECK(ok && n == 8);
  dl_batcher_free(&b);
  CHECK(dl_batcher_make(&ctx, &b, &ds, &(dl_batcher_desc){.norm = DL_NORM_SCALE}) == DL_ERR_ARG);
  CHECK_HAS("token ids");
  dl_dataset_free(&ds); /* frees t64 */
  CHECK(dl_text_windows(&ctx, &ds, t, 33, 1, 0) == DL_ERR_ARG);
  CHECK_HAS("33 tokens, a window of 33 needs 34");
  dl_tensor_free(t);
  CHECK(dl_text_load(&ctx, DATA "empty.csv", DL_U8, &t) == DL_OK && t->numel == 0);
  dl_tensor_free(t);
  CHECK(dl_text_load(&ctx, DATA "text.txt", DL_F32, &t) == DL_ERR_DTYPE && t == NULL);
}

/* >>allocation failures ------------------------------------------------------------------ */

typedef int (*job_fn)(dl_ctx *c);

static int job_idx_gz(dl_ctx *c) {
  dl_tensor *t;
  dl_status st = dl_idx_load(c, DATA "images_u8.idx.gz", &t);
  if (st == DL_OK) dl_tensor_free(t);
  return st;
}
static int job_mnist_pair(dl_ctx *c) {
  dl_dataset ds;
  dl_status st = dl_load_idx_dataset(c, DATA "images_u8.idx.gz", DATA "labels_u8.idx", &ds);
  dl_dataset_free(&ds);
  return st;
}
static int job_csv(dl_ctx *c) {
  dl_dataset ds;
  dl_status st = dl_csv_load(c, DATA "iris_small.csv.gz", &(dl_csv_desc){.label = "species"}, &ds);
  dl_dataset_free(&ds);
  return st;
}
static int job_images(dl_ctx *c) {
  dl_dataset ds;
  dl_status st = dl_image_folder_load(c, DATA "images", &(dl_image_folder_desc){.height = 5, .width = 5}, &ds);
  dl_dataset_free(&ds);
  return st;
}
static int job_batcher_split(dl_ctx *c) {
  dl_dataset ds, tr, va;
  dl_batcher b;
  dl_batch batch;
  double m[1] = {0}, s[1] = {1};
  dl_augment_desc aug = {.crop_padding = 1, .channels = 1, .mean = m, .std = s};
  dl_tensor *x = dl_tensor_make(c, DL_U8, DL_SHAPE(20, 1, 4, 4)), *y = x ? dl_tensor_make(c, DL_I64, DL_SHAPE(20)) : NULL;
  dl_status st;
  if (!x || !y) { dl_tensor_free(x); return c->status; }
  st = dl_dataset_make(c, &ds, x, y, DL_DATASET_OWN);
  if (st != DL_OK) return st;
  st = dl_dataset_split(c, &ds, 5, 1, &tr, &va);
  if (st == DL_OK) {
    st = dl_batcher_make(c, &b, &tr, &(dl_batcher_desc){.batch_size = 4, .augment = &aug});
    if (st == DL_OK) { while (dl_batcher_next(&b, &batch)) {} dl_batcher_free(&b); }
    dl_dataset_free(&tr);
    dl_dataset_free(&va);
  }
  dl_dataset_free(&ds);
  return st;
}

static void test_alloc_failures(void) {
  static const job_fn jobs[] = {job_idx_gz, job_mnist_pair, job_csv, job_images, job_batcher_split};
  static const char *names[] = {"idx gzip", "idx dataset", "csv gzip", "image folder", "split + batcher"};
  size_t j;
  for (j = 0; j < sizeof jobs / sizeof *jobs; j++) {
    dl_ctx c;
    long k, total;
    int failures = 0, leaks = 0, nomem = 0;
    counting_ctx(&c);
    CHECK_MSG(jobs[j](&c) == DL_OK, "%s: %s", names[j], c.message);
    total = n_alloc;
    CHECK(n_alloc == n_free && total > 0);
    for (k = 1; k <= total; k++) {
      dl_status st;
      counting_ctx(&c);
      fail_at = k;
      st = (dl_status)jobs[j](&c);
      failures += st != DL_OK;
      nomem += st == DL_ERR_NOMEM;
      leaks += n_alloc != n_free;
    }
    CHECK_MSG(failures == total && leaks == 0 && nomem == total, "%s: %ld allocations, %d failed, %d NOMEM, %d leaked",
              names[j], total, failures, nomem, leaks);
  }
}

int main(void) {
  dl_ctx_desc d;
  memset(&d, 0, sizeof d);
  d.panic = harness_panic;
  dl_ctx_init(&ctx, &d);
  RUN(test_idx_files);
  RUN(test_idx_roundtrip);
  RUN(test_idx_hostile);
  RUN(test_idx_gzip_types);
  RUN(test_fashion_mnist);
  RUN(test_dataset_make);
  RUN(test_split);
  RUN(test_shuffle_perm);
  RUN(test_shuffler_shards);
  RUN(test_shuffler_state);
  RUN(test_batcher_basic);
  RUN(test_batcher_resume);
  RUN(test_batcher_threads);
  RUN(test_batcher_no_alloc);
  RUN(test_augment);
  RUN(test_csv);
  RUN(test_image_resize);
  RUN(test_image_folder);
  RUN(test_text);
  RUN(test_alloc_failures);
  return harness_finish();
}
