/* dl/data.h - datasets, a seeded shuffler, mini-batches, loaders (IDX, CSV,
 * image folders, text) and image augmentation.
 *
 *   dl_dataset train, test;
 *   dl_batcher b;
 *   if (dl_load_fashion_mnist(&ctx, NULL, &train, &test) != DL_OK)      // u8 [N, 1, 28, 28], i64 [N]
 *     fprintf(stderr, "%s\n", dl_ctx_message(&ctx));
 *   dl_batcher_make(&ctx, &b, &train, &(dl_batcher_desc){.batch_size = 128, .shuffle.seed = 1});
 *   for (epoch = 0; epoch < 10; epoch++) {
 *     dl_batch batch;
 *     while (dl_batcher_next(&b, &batch)) { ... batch.x (f32 [B, 1, 28, 28], x / 255), batch.y (i64 [B]) ... }
 *   }
 *   dl_batcher_free(&b);
 *   dl_dataset_free(&train); dl_dataset_free(&test);
 *
 * Build flags (define before including; link the library they name):
 *   DL_USE_ZLIB        gzip-compressed inputs (-lz, Debian zlib1g-dev). Every
 *                      loader recognises gzip by its magic bytes; without the
 *                      flag a gzip input gives DL_ERR_UNSUPPORTED saying so.
 *   DL_USE_STB_IMAGE   dl_image_folder_load decodes PNG/JPEG/BMP/GIF/TGA/PNM
 *                      with stb_image (Debian libstb-dev, <stb/stb_image.h>).
 *                      This header then compiles stb_image's implementation
 *                      as static functions into the including file (no
 *                      duplicate symbols across files), unless stb_image.h was
 *                      included before it, in which case that copy is used.
 *                      stb_image allocates with its own malloc, not the ctx's.
 *
 * Failures the caller must handle (a missing, truncated, corrupt or hostile
 * file, bad arguments, out of memory) return a dl_status and leave a message
 * in the ctx that names the function, the file (or "<memory>") and what was
 * wrong: expected and actual sizes, line and column. Nothing is returned and
 * nothing leaks on a failure path; every size read from a file is checked for
 * overflow and against the data actually present before anything is
 * allocated for it. Functions that cannot fail return values, not statuses.
 *
 * What is here:
 *   >>dataset   dl_dataset: inputs x [N, ...] (u8, f32, f64; i64 tokens) and
 *               targets y [N] i64 or [N, ...] f32/f64; subsets and a seeded
 *               train/validation split that share the tensors
 *   >>shuffle   dl_shuffler: seeded Fisher-Yates, a new permutation every
 *               epoch that is a pure function of (seed, epoch); shards for
 *               data parallelism; its state (seed, epoch, position) is three
 *               int64 values for checkpoints
 *   >>augment   random crop with zero padding, horizontal flip, per-channel
 *               normalisation; sample i of epoch e draws from the
 *               counter-based RNG keyed by (seed, e, i)
 *   >>batch     dl_batcher: gathers mini-batches into buffers allocated once
 *               (no allocation per batch), converting u8 inputs to f32/f64
 *               (x / 255 or standardised) and augmenting on the fly
 *   >>idx       IDX files (MNIST's format), plain or gzip, from a file or memory
 *   >>mnist     Fashion-MNIST from /usr/share/datasets/fashion-mnist/
 *   >>csv       numeric CSV with a header row and a label column
 *   >>images    a folder with one sub-folder per class, resized (bilinear)
 *   >>text      text files as byte tokens; (input, next-byte target) windows
 *
 * Ownership: datasets own the tensors they are given (DL_DATASET_OWN_*) or
 * borrow them; subsets and splits borrow their parent's tensors, so free
 * them before the parent. Tensors returned through dl_tensor ** are owned by
 * the caller (dl_tensor_free). A batch's tensors are views of the batcher's
 * buffers, valid until the next dl_batcher_next.
 *
 * Threads: the batcher gathers a batch's samples in parallel (OpenMP, above
 * the ctx's parallel threshold). Every random draw is a function of (seed,
 * epoch, sample), so batches do not depend on the thread count, and
 * augmentation does not depend on the batch size either.
 *
 * C and C++ (nvcc sees nothing of it).
 */
#ifndef DL_DATA_H
#define DL_DATA_H

#include "tensor.h"
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <dirent.h>
#include <sys/stat.h>
#define DL__HAVE_DIRENT 1
#endif

#ifdef DL_USE_ZLIB
#include <zlib.h>
#endif
#if defined(__AVX512F__) && !defined(__CUDACC__)
#include <immintrin.h> /* the batcher's u8 table lookup as a gather */
#endif

#if defined(DL_USE_STB_IMAGE) && !defined(STBI_VERSION)
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#ifdef __clang__
#pragma GCC diagnostic ignored "-Wcomma"
#pragma GCC diagnostic ignored "-Wunknown-warning-option"
#else
#pragma GCC diagnostic ignored "-Wmisleading-indentation"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif
/* a single file: stb's functions static in it; compiled once: in the
 * DL_IMPLEMENTATION file, with external names the DL_LINK files call */
#if !defined(DL__MODE_IMPL) && !defined(DL__MODE_LINK)
#define STB_IMAGE_STATIC
#endif
#ifndef DL__MODE_LINK
#define STB_IMAGE_IMPLEMENTATION
#endif
/* only the formats the loaders accept (png, jpg/jpeg, bmp, gif, tga,
 * pgm/ppm/pnm): less decoder code facing hostile files */
#ifndef DL_STB_IMAGE_ALL_FORMATS
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#define STBI_ONLY_TGA
#define STBI_ONLY_PNM
#endif
/* stb's blocks come zeroed: stb_image 2.27 (Debian 12's) decodes a JPEG scan
 * with Huffman tables no DHT segment defined, reading whatever its malloc'd
 * decoder state held and indexing far outside the tables (found by
 * fuzz/fuzz_image.c); zeroed, such a table decodes nothing and the file is
 * refused as corrupt. They go through DL_MALLOC/DL_REALLOC/DL_FREE too. */
#if !defined(STBI_MALLOC) && !defined(STBI_REALLOC) && !defined(STBI_FREE) && !defined(DL__MODE_LINK)
static void *dl__stbi_malloc(size_t n) {
  void *p = DL_MALLOC(n, NULL);
  if (p) memset(p, 0, n);
  return p;
}
#define STBI_MALLOC(sz) dl__stbi_malloc(sz)
#define STBI_REALLOC(p, newsz) DL_REALLOC((p), (newsz), NULL)
#define STBI_FREE(p) DL_FREE((p), NULL)
#endif
/* stb_image 2.27/2.28 declare stbi_set_unpremultiply_on_load_thread but
 * define it as stbi__unpremultiply_on_load_thread; gcc's "declared static
 * but never defined" ignores pragmas, so both names become one function. */
#define stbi_set_unpremultiply_on_load_thread dl__stbi_unpremultiply_on_load_thread
#define stbi__unpremultiply_on_load_thread dl__stbi_unpremultiply_on_load_thread
#include <stb/stb_image.h>
#undef stbi_set_unpremultiply_on_load_thread
#undef stbi__unpremultiply_on_load_thread
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

/* The most bytes one loaded array (an IDX file's data) may take: larger
 * dimensions are refused before anything is allocated. Default 2^32 (4 GiB);
 * define it higher for genuine larger files, lower to bound what a hostile
 * file can make a program allocate. */
#ifndef DL_DATA_MAX_BYTES
#define DL_DATA_MAX_BYTES ((uint64_t)1 << 32)
#endif

#ifndef DL_FASHION_MNIST_DIR
/* Where dl_load_fashion_mnist looks when it is given no folder (Debian's
 * dataset-fashion-mnist). */
#define DL_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#endif

/* >>keys -------------------------------------------------------------------- */

/* The RNG key of one (purpose, seed, a, b) stream: shuffles use (1, seed,
 * epoch, 0), splits (2, seed, 0, 0), augmentation (3, seed, epoch, sample). */
DL_API uint64_t dl__data_key(uint64_t seed, uint64_t domain, uint64_t a, uint64_t b) {
  uint64_t k = dl_rng_make(seed).key;
  k = dl__mix64(k ^ (domain * 0xd6e8feb86659fd93ULL));
  k = dl__mix64(k + (a + 1) * 0x9e3779b97f4a7c15ULL);
  return dl__mix64(k ^ ((b + 1) * 0xc2b2ae3d27d4eb4fULL));
}

/* perm[0..n) = a permutation of 0..n-1 drawn by Fisher-Yates from stream
 * (domain, seed, a): step i (n-1 down to 1) swaps perm[i] with perm[j], j
 * uniform in 0..i from draw i of the stream (dl__below_from, unbiased). */
DL_API void dl__perm(uint64_t domain, uint64_t seed, uint64_t a, int64_t n, int64_t *perm) {
  dl_rng r;
  int64_t i;
  r.key = dl__data_key(seed, domain, a, 0);
  r.counter = 0;
  for (i = 0; i < n; i++) perm[i] = i;
  for (i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)dl__below_from(dl_rng_at(&r, (uint64_t)i), (uint64_t)i + 1), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* The permutation a shuffler with this seed uses in this epoch: perm[0..n)
 * is a uniformly random permutation of 0..n-1 and a pure function of
 * (seed, epoch, n). Needs no allocation. */
DL_API void dl_shuffle_perm(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm) {
  dl__perm(1, seed, (uint64_t)epoch, n, perm);
}

/* "60000, 28, 28" */
DL_API const char *dl__dims_str(char *buf, size_t n, const int64_t *shape, int ndim) {
  size_t at = 0;
  int d;
  buf[0] = 0;
  for (d = 0; d < ndim && at < n; d++)
    at += (size_t)snprintf(buf + at, n - at, d ? ", %lld" : "%lld", (long long)shape[d]);
  return buf;
}

/* >>dataset ------------------------------------------------------------------ */

enum { DL_DATASET_OWN_X = 1u, DL_DATASET_OWN_Y = 2u, DL_DATASET_OWN = 3u };

/* A dataset of N samples. Sample k's input is row dl_dataset_row(ds, k) of x
 * (x[row, ...]) and its target the same row of y; text-window datasets
 * (window > 0) read tokens x[row * stride + j] instead (see >>text). */
typedef struct dl_dataset {
  dl_tensor *x;             /* inputs [N, ...]: u8, f32, f64 or i64; windows: the tokens [L] */
  dl_tensor *y;             /* targets [N] or [N, ...]: i64 class indices or f32/f64; NULL: none */
  int64_t n;                /* number of samples */
  int64_t *index;           /* subsets: sample k is row index[k] (owned); NULL: row k */
  int64_t window, stride;   /* text windows (dl_text_windows); 0 otherwise */
  int64_t num_classes;      /* i64 targets: 1 + the largest class index; else 0 */
  const char *const *class_names; /* [num_classes] when known (image folders, Fashion-MNIST) */
  void *names_block;        /* owned storage behind class_names (NULL if not owned) */
  unsigned own;             /* DL_DATASET_OWN_X / _Y: tensors dl_dataset_free releases */
  dl_ctx *ctx; /* allocator and error reports (may be NULL) */
} dl_dataset;

/* The row of x / y that holds sample k (0 <= k < ds->n). */
DL_API int64_t dl_dataset_row(const dl_dataset *ds, int64_t k) { return ds->index ? ds->index[k] : k; }

/* Release what the dataset owns and zero it. A zeroed dataset is a no-op. */
DL_API void dl_dataset_free(dl_dataset *ds) {
  if (!ds) return;
  if (ds->own & DL_DATASET_OWN_X) dl_tensor_free(ds->x);
  if (ds->own & DL_DATASET_OWN_Y) dl_tensor_free(ds->y);
  dl_free(ds->ctx, ds->index);
  dl_free(ds->ctx, ds->names_block);
  memset(ds, 0, sizeof *ds);
}

/* Checks y's class indices (i64: all >= 0) and returns 1 + the largest. */
DL_API dl_status dl__labels_check(dl_ctx *ctx, const char *op, const dl_tensor *y, int64_t *classes) {
  const int64_t *p = (const int64_t *)y->data;
  int64_t i, mx = -1;
  for (i = 0; i < y->numel; i++) {
    if (p[i] < 0)
      return dl_fail(ctx, DL_ERR_FORMAT, "%s: target %lld is %lld: class indices must be >= 0", op,
                     (long long)i, (long long)p[i]);
    if (p[i] > mx) mx = p[i];
  }
  *classes = mx + 1;
  return DL_OK;
}

/* Make a dataset of x [N, ...] (u8, f32, f64 or i64, contiguous, on the CPU)
 * and y [N, ...] (i64 class indices >= 0, or f32/f64 values; NULL for none).
 * own: DL_DATASET_OWN_X / _Y / DL_DATASET_OWN make the dataset the owner of
 * x / y, and it takes them even when it fails (they are freed then), so
 *   dl_dataset_make(ctx, &ds, dl_tensor_make(...), labels, DL_DATASET_OWN)
 * never leaks. DL_ERR_ARG / DL_ERR_SHAPE / DL_ERR_DTYPE / DL_ERR_FORMAT
 * (a negative class index) with a message on failure; *ds is zeroed then. */
DL_API dl_status dl_dataset_make(dl_ctx *ctx, dl_dataset *ds, dl_tensor *x, dl_tensor *y, unsigned own) {
  const char *op = "dl_dataset_make";
  dl_status st = DL_OK;
  int64_t classes = 0;
  memset(ds, 0, sizeof *ds);
  if (!x) st = dl_fail(ctx, DL_ERR_ARG, "%s: x is NULL", op);
  else if (x->ndim < 1 || !dl_tensor_is_contiguous(x) || x->device != DL_CPU)
    st = dl_fail(ctx, DL_ERR_SHAPE, "%s: x %s must be [N, ...], contiguous, on the CPU", op, DL_SHAPESTR(x));
  else if (x->dtype != DL_U8 && x->dtype != DL_F32 && x->dtype != DL_F64 && x->dtype != DL_I64)
    st = dl_fail(ctx, DL_ERR_DTYPE, "%s: x %s: inputs are u8, f32, f64 or i64", op, DL_SHAPESTR(x));
  else if (y && (y->ndim < 1 || y->shape[0] != x->shape[0] || !dl_tensor_is_contiguous(y) ||
                 y->device != DL_CPU))
    st = dl_fail(ctx, DL_ERR_SHAPE, "%s: y %s must be [N, ...] with N = %lld (x %s), contiguous, on the CPU",
                 op, DL_SHAPESTR(y), (long long)x->shape[0], DL_SHAPESTR(x));
  else if (y && y->dtype != DL_I64 && y->dtype != DL_F32 && y->dtype != DL_F64)
    st = dl_fail(ctx, DL_ERR_DTYPE, "%s: y %s: targets are i64 class indices or f32/f64 values", op,
                 DL_SHAPESTR(y));
  else if (y && y->dtype == DL_I64)
    st = dl__labels_check(ctx, op, y, &classes);
  if (st != DL_OK) {
    if (own & DL_DATASET_OWN_X) dl_tensor_free(x);
    if ((own & DL_DATASET_OWN_Y) && y != x) dl_tensor_free(y);
    return st;
  }
  ds->x = x;
  ds->y = y;
  ds->n = x->shape[0];
  ds->num_classes = classes;
  ds->own = own & DL_DATASET_OWN;
  ds->ctx = ctx;
  return DL_OK;
}

/* A dataset of the samples samples[0..k) of ds (sample numbers of ds, in that
 * order; repeats allowed). It borrows ds's tensors and class names (free it
 * before ds) and owns its index. DL_ERR_ARG on a sample out of range. */
DL_API dl_status dl_dataset_subset(dl_ctx *ctx, const dl_dataset *ds, const int64_t *samples, int64_t k,
                                   dl_dataset *out) {
  int64_t i;
  size_t bytes;
  int64_t *idx;
  memset(out, 0, sizeof *out);
  if (k < 0 || (k > 0 && !samples))
    return dl_fail(ctx, DL_ERR_ARG, "dl_dataset_subset: %lld samples", (long long)k);
  for (i = 0; i < k; i++)
    if (samples[i] < 0 || samples[i] >= ds->n)
      return dl_fail(ctx, DL_ERR_ARG, "dl_dataset_subset: samples[%lld] = %lld is outside 0..%lld",
                     (long long)i, (long long)samples[i], (long long)ds->n - 1);
  if (dl_size_mul((size_t)k, sizeof(int64_t), &bytes))
    return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_dataset_subset: %lld samples overflow", (long long)k);
  idx = (int64_t *)dl_alloc(ctx, bytes);
  if (!idx) return ctx ? ctx->status : DL_ERR_NOMEM;
  for (i = 0; i < k; i++) idx[i] = dl_dataset_row(ds, samples[i]);
  *out = *ds;
  out->index = idx;
  out->n = k;
  out->own = 0;
  out->names_block = NULL;
  out->ctx = ctx;
  return DL_OK;
}

/* The first k samples of ds (k <= 0 or k >= ds->n: all of them), as a
 * subset that borrows ds's tensors (free it before ds): what a --subset
 * flag wants. DL_ERR_NOMEM when the index cannot be allocated. */
DL_API dl_status dl_dataset_head(dl_ctx *ctx, const dl_dataset *ds, int64_t k, dl_dataset *out) {
  int64_t *rows, i;
  dl_status s;
  if (k <= 0 || k > ds->n) k = ds->n;
  memset(out, 0, sizeof *out);
  rows = (int64_t *)dl_alloc(ctx, (size_t)(k ? k : 1) * sizeof *rows);
  if (!rows) return DL_ERR_NOMEM;
  for (i = 0; i < k; i++) rows[i] = i;
  s = dl_dataset_subset(ctx, ds, rows, k, out);
  dl_free(ctx, rows);
  return s;
}

/* Split ds into train (n - n_val samples) and val (n_val samples), disjoint
 * and together all of ds: a seeded permutation's first n_val samples go to
 * val. Both keep ds's order (ascending sample numbers) and borrow its tensors
 * (free them before ds). The split is a pure function of (seed, ds->n,
 * n_val). DL_ERR_ARG when n_val is outside 0..n. */
DL_API dl_status dl_dataset_split(dl_ctx *ctx, const dl_dataset *ds, int64_t n_val, uint64_t seed,
                                  dl_dataset *train, dl_dataset *val) {
  int64_t n = ds->n, i, a = 0, b = 0, *perm, *ti, *vi;
  unsigned char *mark;
  size_t bytes;
  dl_status st;
  memset(train, 0, sizeof *train);
  memset(val, 0, sizeof *val);
  if (n_val < 0 || n_val > n)
    return dl_fail(ctx, DL_ERR_ARG, "dl_dataset_split: %lld validation samples of %lld", (long long)n_val,
                   (long long)n);
  if (dl_size_mul((size_t)n, sizeof(int64_t), &bytes))
    return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_dataset_split: %lld samples overflow", (long long)n);
  perm = (int64_t *)dl_alloc(ctx, bytes);
  mark = (unsigned char *)dl_alloc(ctx, (size_t)n);
  ti = (int64_t *)dl_alloc(ctx, bytes); /* n - n_val used: train samples, then val */
  vi = ti ? ti + (n - n_val) : NULL;
  if (!perm || !mark || !ti) {
    st = ctx ? ctx->status : DL_ERR_NOMEM;
    dl_free(ctx, perm); dl_free(ctx, mark); dl_free(ctx, ti);
    return st;
  }
  dl__perm(2, seed, 0, n, perm);
  memset(mark, 0, (size_t)n);
  for (i = 0; i < n_val; i++) mark[perm[i]] = 1;
  for (i = 0; i < n; i++) {
    if (mark[i]) vi[b++] = i;
    else ti[a++] = i;
  }
  st = dl_dataset_subset(ctx, ds, ti, n - n_val, train);
  if (st == DL_OK) st = dl_dataset_subset(ctx, ds, vi, n_val, val);
  if (st != DL_OK) dl_dataset_free(train);
  dl_free(ctx, perm); dl_free(ctx, mark); dl_free(ctx, ti);
  return st;
}

/* >>shuffle ------------------------------------------------------------------- */

/* dl_shuffler_desc: zero fields are defaults.
 *   seed        the seed of every epoch's permutation (0 is a seed like any other)
 *   no_shuffle  1: dataset order every epoch (evaluation)
 *   world       number of workers sharing the dataset (0: 1)
 *   rank        this worker, 0 <= rank < world
 *   pad         remainder policy when world does not divide N:
 *               0: each epoch's last N mod world positions of the permutation
 *                  are skipped, so every rank gets floor(N / world) samples and
 *                  the shards are disjoint (the skipped samples change with
 *                  the permutation, so none is left out for good);
 *               1: the shards wrap around to the permutation's start so that
 *                  every rank gets ceil(N / world) samples, all N are seen and
 *                  up to world - 1 samples are seen twice (PyTorch's
 *                  DistributedSampler with drop_last=False);
 *               2: uneven shards: every sample exactly once, the first
 *                  N mod world ranks get one more. For evaluation, whose
 *                  results are summed across ranks once at the end (training
 *                  needs the same number of steps on every rank: 0 or 1). */
typedef struct dl_shuffler_desc {
  uint64_t seed; /* the seed of every epoch's permutation */
  int no_shuffle; /* 1: dataset order every epoch (evaluation) */
  int world, rank; /* workers sharing the dataset (0: 1) and this one */
  int pad; /* when world does not divide N: 0 skip, 1 wrap around, 2 uneven (see above) */
} dl_shuffler_desc;

/* Rank r's sample k of epoch e is position p = k * world + r of the epoch's
 * permutation (p mod N with pad), i.e. the same permutation dealt out
 * round-robin. The permutation of epoch e is dl_shuffle_perm(seed, e, N). */
typedef struct dl_shuffler {
  int64_t n;          /* samples in the dataset */
  int64_t per_rank;   /* samples this rank sees per epoch */
  int64_t epoch;      /* current epoch */
  int64_t pos;        /* samples of this epoch already handed out (0 .. per_rank) */
  uint64_t seed; /* as in the desc */
  int world, rank, shuffle, pad; /* as in the desc (shuffle: 1 unless no_shuffle) */
  int64_t *perm;      /* [n] the current epoch's permutation (owned; NULL without shuffling) */
  dl_ctx *ctx; /* allocator and error reports */
} dl_shuffler;

/* What a checkpoint needs to resume a shuffler: seed, epoch and position;
 * n, world, rank and flags (1: shuffle, 2: pad 1, 4: pad 2) to check it is restored into
 * a shuffler of the same configuration. All int64 (the seed's bits). */
typedef struct dl_shuffler_state {
  int64_t seed, epoch, pos; /* the seed's bits, the epoch, the position in it */
  int64_t n, world, rank, flags; /* the configuration it must be restored into (flags: 1 shuffle, 2 pad 1, 4 pad 2) */
} dl_shuffler_state;

/* Make the current epoch's permutation (epoch e, position 0). */
DL_API void dl_shuffler_set_epoch(dl_shuffler *s, int64_t epoch) {
  s->epoch = epoch;
  s->pos = 0;
  if (s->perm) dl_shuffle_perm(s->seed, epoch, s->n, s->perm);
}

/* A shuffler over n samples at epoch 0, position 0. Allocates the [n]
 * permutation once; nothing after. DL_ERR_ARG on n < 0 or a bad rank/world. */
DL_API dl_status dl_shuffler_make(dl_ctx *ctx, dl_shuffler *s, int64_t n, const dl_shuffler_desc *desc) {
  dl_shuffler_desc d;
  size_t bytes;
  memset(s, 0, sizeof *s);
  memset(&d, 0, sizeof d);
  if (desc) d = *desc;
  if (d.world == 0) d.world = 1;
  if (n < 0) return dl_fail(ctx, DL_ERR_ARG, "dl_shuffler_make: %lld samples", (long long)n);
  if (d.world < 0 || d.rank < 0 || d.rank >= d.world)
    return dl_fail(ctx, DL_ERR_ARG, "dl_shuffler_make: rank %d of world %d (need 0 <= rank < world)", d.rank,
                   d.world);
  s->n = n;
  s->seed = d.seed;
  s->world = d.world;
  s->rank = d.rank;
  s->shuffle = !d.no_shuffle;
  if (d.pad < 0 || d.pad > 2) return dl_fail(ctx, DL_ERR_ARG, "dl_shuffler_make: pad %d (0, 1 or 2)", d.pad);
  s->pad = d.pad;
  s->ctx = ctx;
  s->per_rank = s->pad == 1 ? (n + d.world - 1) / d.world
              : s->pad == 2 ? (n > d.rank ? (n - d.rank + d.world - 1) / d.world : 0)
                            : n / d.world;
  if (s->shuffle && n > 0) {
    if (dl_size_mul((size_t)n, sizeof(int64_t), &bytes))
      return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_shuffler_make: %lld samples overflow", (long long)n);
    s->perm = (int64_t *)dl_alloc(ctx, bytes);
    if (!s->perm) return ctx ? ctx->status : DL_ERR_NOMEM;
  }
  dl_shuffler_set_epoch(s, 0);
  return DL_OK;
}

/* Release the shuffler's permutation (NULL is fine). */
DL_API void dl_shuffler_free(dl_shuffler *s) {
  if (!s) return;
  dl_free(s->ctx, s->perm);
  memset(s, 0, sizeof *s);
}

/* Sample number (0 .. n-1) of this rank's k-th sample of the current epoch,
 * 0 <= k < per_rank. */
DL_API int64_t dl_shuffler_index(const dl_shuffler *s, int64_t k) {
  int64_t p = k * s->world + s->rank;
  if (p >= s->n) p %= s->n;
  return s->perm ? s->perm[p] : p;
}

/* Up to max of the next sample numbers of this epoch into out; returns how
 * many (0 once the epoch is used up: call dl_shuffler_set_epoch for the
 * next; the batcher does that itself). */
DL_API int64_t dl_shuffler_next(dl_shuffler *s, int64_t *out, int64_t max) {
  int64_t k, m = s->per_rank - s->pos;
  if (m > max) m = max;
  if (m < 0) m = 0;
  for (k = 0; k < m; k++) out[k] = dl_shuffler_index(s, s->pos + k);
  s->pos += m;
  return m;
}

/* The shuffler's position (its epoch and how far into it), for a
 * checkpoint; dl_shuffler_restore puts it back. */
DL_API dl_shuffler_state dl_shuffler_get_state(const dl_shuffler *s) {
  dl_shuffler_state st;
  st.seed = (int64_t)s->seed;
  st.epoch = s->epoch;
  st.pos = s->pos;
  st.n = s->n;
  st.world = s->world;
  st.rank = s->rank;
  st.flags = (s->shuffle ? 1 : 0) | (int64_t)s->pad << 1;
  return st;
}

/* Continue from a saved state: the same seed, epoch and position, so the
 * remaining samples come out exactly as they would have. The shuffler must
 * have the same n, world, rank and flags (DL_ERR_ARG naming the difference;
 * the shuffler is unchanged then). */
DL_API dl_status dl_shuffler_restore(dl_shuffler *s, const dl_shuffler_state *st) {
  dl_shuffler_state me = dl_shuffler_get_state(s);
  if (st->n != me.n || st->world != me.world || st->rank != me.rank || st->flags != me.flags)
    return dl_fail(s->ctx, DL_ERR_ARG,
                   "dl_shuffler_restore: state is for n %lld, world %lld, rank %lld, flags %lld; this shuffler "
                   "has n %lld, world %lld, rank %lld, flags %lld",
                   (long long)st->n, (long long)st->world, (long long)st->rank, (long long)st->flags,
                   (long long)me.n, (long long)me.world, (long long)me.rank, (long long)me.flags);
  if (st->epoch < 0 || st->pos < 0 || st->pos > s->per_rank)
    return dl_fail(s->ctx, DL_ERR_ARG, "dl_shuffler_restore: epoch %lld position %lld (0..%lld)",
                   (long long)st->epoch, (long long)st->pos, (long long)s->per_rank);
  s->seed = (uint64_t)st->seed;
  dl_shuffler_set_epoch(s, st->epoch);
  s->pos = st->pos;
  return DL_OK;
}

/* >>augment ------------------------------------------------------------------- */

/* dl_augment_desc: zero fields are "off". For images [C, H, W] in f32/f64:
 *   seed          the draws for sample i of epoch e come from the stream
 *                 dl_augment_rng(seed, e, i): draw 0 picks dy, draw 1 dx,
 *                 draw 2 the flip
 *   crop_padding  p > 0: random crop with zero padding (torchvision's
 *                 RandomCrop(size=(H, W), padding=p)): out[y, x] =
 *                 in[y + dy, x + dx], 0 outside, dy and dx uniform in -p..p
 *   hflip         1: flip horizontally (x -> W-1-x) with probability 1/2
 *   channels      C, the length of mean and std; 0: no normalisation
 *   mean, std     per-channel normalisation (x - mean[c]) / std[c], last,
 *                 in the image's dtype (torchvision's Normalize)
 * Order: crop, flip, normalise (padding is 0 before normalisation). */
typedef struct dl_augment_desc {
  uint64_t seed; /* the augmentation's stream (with epoch and sample: dl_augment_rng) */
  int crop_padding; /* p > 0: random crop with zero padding p */
  int hflip; /* 1: flip horizontally with probability 1/2 */
  int channels; /* C, the length of mean and std; 0: no normalisation */
  const double *mean, *std; /* per-channel normalisation (x - mean[c]) / std[c] */
} dl_augment_desc;

/* The random stream of one sample's augmentation in one epoch: the same
 * draws whatever the order, thread or rank that processes it. */
DL_API dl_rng dl_augment_rng(uint64_t seed, int64_t epoch, int64_t sample) {
  dl_rng r;
  r.key = dl__data_key(seed, 3, (uint64_t)epoch, (uint64_t)sample);
  r.counter = 0;
  return r;
}

/* The augmentation sample `sample` gets in epoch `epoch`: the crop's offsets
 * (0 without cropping) and whether it is flipped. */
DL_API void dl_augment_draw(const dl_augment_desc *a, int64_t epoch, int64_t sample, int *dy, int *dx,
                            int *flip) {
  dl_rng r = dl_augment_rng(a->seed, epoch, sample);
  int p = a->crop_padding > 0 ? a->crop_padding : 0;
  *dy = p ? (int)dl__below_from(dl_rng_at(&r, 0), 2 * (uint64_t)p + 1) - p : 0;
  *dx = p ? (int)dl__below_from(dl_rng_at(&r, 1), 2 * (uint64_t)p + 1) - p : 0;
  *flip = a->hflip ? (int)(dl_rng_at(&r, 2) >> 63) : 0;
}

/* One image [C, H, W] in place. The crop shifts in place: walking forward
 * when the source lies ahead (dy * W + dx >= 0), backward otherwise, so a
 * source element is always read before it is overwritten. */
#define DL__AUG_IMAGE(NAME, T)                                                              \
  DL_API void NAME(const dl_augment_desc *a, T *img, int64_t C, int64_t H, int64_t W,         \
                   int64_t epoch, int64_t sample) {                                          \
    int dy, dx, flip;                                                                        \
    int64_t c, y, x, i;                                                                      \
    dl_augment_draw(a, epoch, sample, &dy, &dx, &flip);                                      \
    for (c = 0; c < C; c++) {                                                                \
      T *p = img + c * H * W;                                                                \
      if (dy || dx) {                                                                        \
        if ((int64_t)dy * W + dx >= 0) {                                                     \
          for (y = 0; y < H; y++)                                                            \
            for (x = 0; x < W; x++) {                                                        \
              int64_t sy = y + dy, sx = x + dx;                                              \
              p[y * W + x] = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? p[sy * W + sx] : (T)0; \
            }                                                                                \
        } else {                                                                             \
          for (y = H - 1; y >= 0; y--)                                                       \
            for (x = W - 1; x >= 0; x--) {                                                   \
              int64_t sy = y + dy, sx = x + dx;                                              \
              p[y * W + x] = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? p[sy * W + sx] : (T)0; \
            }                                                                                \
        }                                                                                    \
      }                                                                                      \
      if (flip)                                                                              \
        for (y = 0; y < H; y++)                                                              \
          for (x = 0; x < W / 2; x++) {                                                      \
            T t = p[y * W + x];                                                              \
            p[y * W + x] = p[y * W + W - 1 - x];                                             \
            p[y * W + W - 1 - x] = t;                                                        \
          }                                                                                  \
      if (a->channels > 0) {                                                                 \
        T m = (T)a->mean[c], s = (T)a->std[c];                                               \
        for (i = 0; i < H * W; i++) p[i] = (p[i] - m) / s;                                   \
      }                                                                                      \
    }                                                                                        \
  }
DL__AUG_IMAGE(dl__augment_f32, float)
DL__AUG_IMAGE(dl__augment_f64, double)

/* Checks an augmentation against images [C, H, W]; a message on failure. */
DL_API dl_status dl__augment_check(dl_ctx *ctx, const char *op, const dl_augment_desc *a, int64_t C) {
  int c;
  if (a->crop_padding < 0 || a->channels < 0)
    return dl_fail(ctx, DL_ERR_ARG, "%s: augment crop_padding %d, channels %d (both >= 0)", op,
                   a->crop_padding, a->channels);
  if (a->channels > 0) {
    if (a->channels != C || !a->mean || !a->std)
      return dl_fail(ctx, DL_ERR_ARG, "%s: augment normalisation has %d channels (mean %s, std %s), images have %lld",
                     op, a->channels, a->mean ? "given" : "NULL", a->std ? "given" : "NULL", (long long)C);
    for (c = 0; c < a->channels; c++)
      if (!(a->std[c] != 0) || a->std[c] != a->std[c] || a->mean[c] != a->mean[c])
        return dl_fail(ctx, DL_ERR_ARG, "%s: augment channel %d: mean %g std %g (std must be non-zero)", op, c,
                       a->mean[c], a->std[c]);
  }
  return DL_OK;
}

/* Augment a batch x [B, C, H, W] (f32 or f64, contiguous) in place; image b
 * is sample samples[b] (the dataset row: draws depend on it and the epoch,
 * never on b or the batch size). Misuse (another shape or dtype, a
 * normalisation with another channel count) panics. */
DL_API void dl_augment_batch(const dl_augment_desc *a, dl_tensor *x, const int64_t *samples, int64_t epoch) {
  int64_t b;
  if (x->ndim != 4 || (x->dtype != DL_F32 && x->dtype != DL_F64) || !dl_tensor_is_contiguous(x))
    DL_PANIC(x->ctx, "dl_augment_batch", "x %s must be a contiguous f32/f64 [B, C, H, W]", DL_SHAPESTR(x));
  if (dl__augment_check(x->ctx, "dl_augment_batch", a, x->shape[1]) != DL_OK)
    DL_PANIC(x->ctx, "dl_augment_batch", "%s (x %s)", dl_ctx_message(x->ctx), DL_SHAPESTR(x));
  for (b = 0; b < x->shape[0]; b++) {
    int64_t per = x->shape[1] * x->shape[2] * x->shape[3];
    if (x->dtype == DL_F32)
      dl__augment_f32(a, (float *)x->data + b * per, x->shape[1], x->shape[2], x->shape[3], epoch, samples[b]);
    else
      dl__augment_f64(a, (double *)x->data + b * per, x->shape[1], x->shape[2], x->shape[3], epoch, samples[b]);
  }
}

/* >>batch ---------------------------------------------------------------------- */

/* How u8 (or float) inputs become the batch's values:
 *   DL_NORM_DEFAULT      SCALE for u8 inputs, NONE for float and i64 inputs
 *   DL_NORM_NONE         copied (u8: converted, 0..255)
 *   DL_NORM_SCALE        x * scale (scale 0: 1/255 for u8, 1 for float)
 *   DL_NORM_STANDARDIZE  (x * scale - mean) / std, e.g. Fashion-MNIST's
 *                        mean 0.2860, std 0.3530 with the default scale */
typedef enum dl_norm { DL_NORM_DEFAULT = 0, DL_NORM_NONE, DL_NORM_SCALE, DL_NORM_STANDARDIZE } dl_norm;

/* dl_batcher_desc: zero fields are defaults.
 *   batch_size  samples per batch (0: 32)
 *   drop_last   1: skip an epoch's last batch when it is smaller
 *   shuffle     seed, no_shuffle, world, rank, pad (dl_shuffler_desc)
 *   dtype       batch dtype of u8 inputs: DL_F32 (0) or DL_F64. Float inputs
 *               are never converted: their dtype must equal this one (set
 *               DL_F64 for f64 inputs). i64 inputs stay i64.
 *   norm, scale, mean, std   see dl_norm
 *   augment     random crop / flip / normalisation applied to each batch
 *               after the conversion (inputs [N, C, H, W]); copied, NULL: none */
typedef struct dl_batcher_desc {
  int64_t batch_size; /* samples per batch (0: 32) */
  int drop_last; /* 1: skip an epoch's last batch when it is smaller */
  dl_shuffler_desc shuffle; /* the order: seed, no_shuffle, world, rank, pad */
  dl_dtype dtype; /* batch dtype of u8 inputs: DL_F32 (0) or DL_F64 */
  dl_norm norm; /* pixel -> value (see dl_norm) */
  double scale, mean, std; /* of the normalisation (see dl_norm) */
  const dl_augment_desc *augment; /* crop / flip / normalisation after the conversion (copied; NULL: none) */
} dl_batcher_desc;

/* A mini-batch: views of the batcher's buffers, valid until the next call. */
typedef struct dl_batch {
  dl_tensor *x;           /* [size, ...] inputs (windows: i64 [size, window]) */
  dl_tensor *y;           /* [size, ...] targets (windows: i64 [size, window]); NULL without targets */
  const int64_t *index;   /* [size] the dataset rows of the samples */
  int64_t size;           /* samples in this batch (batch_size except maybe the last) */
  int64_t epoch, step;    /* the epoch it belongs to; its number within the epoch */
} dl_batch;

/* Batches of a dataset into preallocated buffers (dl_batcher_make,
 * dl_batcher_next, dl_batcher_free): shuffled per epoch, sharded over
 * workers, converted and normalised as its desc says. */
typedef struct dl_batcher {
  const dl_dataset *ds;   /* borrowed */
  dl_shuffler shuf;       /* the order (and the checkpointable state) */
  dl_tensor *xbuf, *ybuf; /* [batch_size, ...] buffers (owned) */
  dl_tensor xv, yv;       /* the views batches hand out */
  int64_t *idx;           /* [batch_size] rows of the current batch */
  int64_t batch_size; /* as in the desc (0 replaced by 32) */
  int drop_last; /* as in the desc */
  int64_t x_elems, y_elems;  /* elements per sample */
  int convert;            /* 0: copy bytes, 1: u8 through lut, 2: float x * mul + add */
  double mul, add; /* convert 2: x * mul + add */
  float lut32[256]; /* convert 1, f32: the u8 table */
  double lut64[256]; /* convert 1, f64: the u8 table */
  dl_augment_desc aug;    /* copy; mean/std point into aug_stats */
  double *aug_stats; /* storage of aug's mean and std (owned) */
  int has_aug; /* 1: aug applies */
  dl_ctx *ctx; /* allocator and error reports */
  struct dl_gpu *gpu;     /* dl_batcher_to_device: batches made on this GPU (NULL: on the host) */
  void *dx, *dlut;        /* there: the dataset's x (its own dtype) and the u8 table */
  dl_tensor *dxbuf;       /* there: the batch buffer [batch_size, ...] */
} dl_batcher;

DL_API void dl__batcher_device_free(dl_batcher *b) {
#ifdef DL__CUDA_C
  if (b->gpu) {
    (void)dl_gpu_sync(b->gpu); /* queued batches may still read them */
    if (b->dx) dl_gpu_free(b->gpu, b->dx);
    if (b->dlut) dl_gpu_free(b->gpu, b->dlut);
    dl_tensor_free(b->dxbuf);
  }
#endif
  b->gpu = NULL;
  b->dx = b->dlut = NULL;
  b->dxbuf = NULL;
}

/* Release the batcher's buffers (NULL is fine); the dataset is borrowed and
 * stays. */
DL_API void dl_batcher_free(dl_batcher *b) {
  if (!b) return;
  dl__batcher_device_free(b);
  dl_shuffler_free(&b->shuf);
  dl_tensor_free(b->xbuf);
  dl_tensor_free(b->ybuf);
  dl_free(b->ctx, b->idx);
  dl_free(b->ctx, b->aug_stats);
  memset(b, 0, sizeof *b);
}

/* A batcher over ds (borrowed: it must outlive the batcher) at epoch 0. All
 * its memory is allocated here: batches allocate nothing. On failure
 * (DL_ERR_ARG / DL_ERR_DTYPE / DL_ERR_SHAPE with a message, DL_ERR_NOMEM)
 * *b is zeroed and nothing is held. */
DL_API dl_status dl_batcher_make(dl_ctx *ctx, dl_batcher *b, const dl_dataset *ds, const dl_batcher_desc *desc) {
  const char *op = "dl_batcher_make";
  dl_batcher_desc d;
  int64_t shape[DL_MAX_DIMS];
  dl_dtype xdt;
  dl_status st;
  int k;
  memset(b, 0, sizeof *b);
  memset(&d, 0, sizeof d);
  if (desc) d = *desc;
  b->ctx = ctx;
  b->ds = ds;
  if (!ds || !ds->x) return dl_fail(ctx, DL_ERR_ARG, "%s: no dataset", op);
  if (d.batch_size == 0) d.batch_size = 32;
  if (d.batch_size < 0)
    return dl_fail(ctx, DL_ERR_ARG, "%s: batch_size %lld", op, (long long)d.batch_size);
  if (d.dtype != DL_F32 && d.dtype != DL_F64)
    return dl_fail(ctx, DL_ERR_DTYPE, "%s: batch dtype %s: f32 or f64", op, dl_dtype_name(d.dtype));
  b->batch_size = d.batch_size;
  b->drop_last = d.drop_last;
  xdt = ds->x->dtype;
  /* buffers */
  shape[0] = d.batch_size;
  if (ds->window > 0) {
    if (d.augment || (d.norm != DL_NORM_DEFAULT && d.norm != DL_NORM_NONE))
      return dl_fail(ctx, DL_ERR_ARG, "%s: text windows are token ids: no normalisation or augmentation", op);
    shape[1] = ds->window;
    b->x_elems = b->y_elems = ds->window;
    b->xbuf = dl_tensor_make(ctx, DL_I64, 2, shape);
    b->ybuf = b->xbuf ? dl_tensor_make(ctx, DL_I64, 2, shape) : NULL;
    if (!b->xbuf || !b->ybuf) goto fail_status;
  } else {
    dl_dtype bdt = xdt == DL_U8 ? d.dtype : xdt;
    if ((xdt == DL_F32 || xdt == DL_F64) && xdt != d.dtype) {
      dl_fail(ctx, DL_ERR_DTYPE,
              "%s: x is %s but the batch dtype is %s (desc.dtype; 0 means f32): set .dtype = DL_%s, float "
              "inputs are never converted",
              op, dl_dtype_name(xdt), dl_dtype_name(d.dtype), xdt == DL_F64 ? "F64" : "F32");
      goto fail_status;
    }
    if (xdt == DL_I64 && d.norm != DL_NORM_DEFAULT && d.norm != DL_NORM_NONE) {
      dl_fail(ctx, DL_ERR_ARG, "%s: i64 inputs are not normalised", op);
      goto fail_status;
    }
    for (k = 1; k < ds->x->ndim; k++) shape[k] = ds->x->shape[k];
    for (b->x_elems = 1, k = 1; k < ds->x->ndim; k++) b->x_elems *= ds->x->shape[k];
    b->xbuf = dl_tensor_make(ctx, bdt, ds->x->ndim, shape);
    if (!b->xbuf) goto fail_status;
    if (ds->y) {
      for (k = 1; k < ds->y->ndim; k++) shape[k] = ds->y->shape[k];
      for (b->y_elems = 1, k = 1; k < ds->y->ndim; k++) b->y_elems *= ds->y->shape[k];
      b->ybuf = dl_tensor_make(ctx, ds->y->dtype, ds->y->ndim, shape);
      if (!b->ybuf) goto fail_status;
    }
    /* conversion */
    if (xdt == DL_U8 || (d.norm != DL_NORM_DEFAULT && d.norm != DL_NORM_NONE && xdt != DL_I64)) {
      double scale = d.scale != 0 ? d.scale : (xdt == DL_U8 ? 1.0 / 255.0 : 1.0);
      dl_norm norm = d.norm == DL_NORM_DEFAULT ? (xdt == DL_U8 ? DL_NORM_SCALE : DL_NORM_NONE) : d.norm;
      if (norm == DL_NORM_NONE) { b->mul = 1; b->add = 0; }
      else if (norm == DL_NORM_SCALE) { b->mul = scale; b->add = 0; }
      else if (norm == DL_NORM_STANDARDIZE) {
        if (!(d.std != 0) || d.std != d.std || d.mean != d.mean) {
          dl_fail(ctx, DL_ERR_ARG, "%s: standardisation with mean %g, std %g (std must be non-zero)", op, d.mean, d.std);
          goto fail_status;
        }
        b->mul = scale / d.std;
        b->add = -d.mean / d.std;
      } else {
        dl_fail(ctx, DL_ERR_ARG, "%s: unknown norm %d", op, (int)d.norm);
        goto fail_status;
      }
      if (xdt == DL_U8) {
        b->convert = 1;
        for (k = 0; k < 256; k++) { /* the default scale divides by 255: k / 255.0 exactly */
          double v = norm == DL_NORM_NONE ? (double)k : d.scale != 0 ? (double)k * d.scale : (double)k / 255.0;
          b->lut64[k] = norm == DL_NORM_STANDARDIZE ? (v - d.mean) / d.std : v;
          b->lut32[k] = (float)b->lut64[k];
        }
      } else {
        b->convert = 2;
      }
    }
    /* augmentation */
    if (d.augment) {
      if (ds->x->ndim != 4) {
        dl_fail(ctx, DL_ERR_SHAPE, "%s: augmentation needs images [N, C, H, W], x is %s", op, DL_SHAPESTR(ds->x));
        goto fail_status;
      }
      if (dl__augment_check(ctx, op, d.augment, ds->x->shape[1]) != DL_OK) goto fail_status;
      b->aug = *d.augment;
      if (b->aug.channels > 0) {
        b->aug_stats = (double *)dl_alloc(ctx, 2 * sizeof(double) * (size_t)b->aug.channels);
        if (!b->aug_stats) goto fail_status;
        memcpy(b->aug_stats, d.augment->mean, sizeof(double) * (size_t)b->aug.channels);
        memcpy(b->aug_stats + b->aug.channels, d.augment->std, sizeof(double) * (size_t)b->aug.channels);
        b->aug.mean = b->aug_stats;
        b->aug.std = b->aug_stats + b->aug.channels;
      } else {
        b->aug.mean = b->aug.std = NULL;
      }
      b->has_aug = 1;
    }
  }
  b->idx = (int64_t *)dl_alloc(ctx, sizeof(int64_t) * (size_t)(d.batch_size ? d.batch_size : 1));
  if (!b->idx) goto fail_status;
  st = dl_shuffler_make(ctx, &b->shuf, ds->n, &d.shuffle);
  if (st != DL_OK) goto fail;
  return DL_OK;
fail_status:
  st = ctx ? ctx->status : DL_ERR_NOMEM;
  if (st == DL_OK) st = DL_ERR_NOMEM;
fail:
  dl_batcher_free(b);
  return st;
}

/* Batches per epoch for this rank. */
DL_API int64_t dl_batcher_num_batches(const dl_batcher *b) {
  int64_t n = b->shuf.per_rank, B = b->batch_size;
  if (B <= 0) return 0;
  return b->drop_last ? n / B : (n + B - 1) / B;
}

/* Gather sample `row` into batch slot `slot`. First it asks for the first
 * 4 KiB of sample `next`'s bytes (-1: none), so that their cache misses
 * overlap this sample's conversion: rows picked at random from a data set
 * larger than the caches missed on every line (the Fashion batch of 64 x
 * 784 bytes: 61 us, 40 us with this). (Here rather than in a function of
 * its own: gcc finds such a function free of side effects and drops its
 * calls, prefetches and all.) */
DL_API void dl__batch_gather(dl_batcher *b, int64_t slot, int64_t row, int64_t next, int64_t epoch) {
  const dl_dataset *ds = b->ds;
  int64_t j, n = b->x_elems;
#if defined(__GNUC__) || defined(__clang__)
  if (next >= 0 && ds->window == 0) {
    const size_t bytes = (size_t)n * dl_dtype_size(ds->x->dtype);
    const unsigned char *nx = (const unsigned char *)ds->x->data + (size_t)next * bytes;
    size_t k;
    for (k = 0; k < bytes && k < 4096; k += 64) __builtin_prefetch(nx + k);
  }
#else
  (void)next;
#endif
  if (ds->window > 0) {
    int64_t *xo = (int64_t *)b->xbuf->data + slot * n, *yo = (int64_t *)b->ybuf->data + slot * n;
    int64_t start = row * ds->stride;
    if (ds->x->dtype == DL_U8) {
      const uint8_t *t = (const uint8_t *)ds->x->data + start;
      for (j = 0; j < n; j++) { xo[j] = t[j]; yo[j] = t[j + 1]; }
    } else {
      const int64_t *t = (const int64_t *)ds->x->data + start;
      for (j = 0; j < n; j++) { xo[j] = t[j]; yo[j] = t[j + 1]; }
    }
    return;
  }
  {
    size_t ies = dl_dtype_size(ds->x->dtype), oes = dl_dtype_size(b->xbuf->dtype);
    const unsigned char *src = (const unsigned char *)ds->x->data + (size_t)(row * n) * ies;
    unsigned char *dst = (unsigned char *)b->xbuf->data + (size_t)(slot * n) * oes;
    if (b->convert == 1) {
      /* (restrict: the table is not the output, so the compiler may gather vectors of it) */
      const unsigned char *DL__RESTRICT s = src;
      if (b->xbuf->dtype == DL_F32) {
        float *DL__RESTRICT o = (float *)(void *)dst;
        const float *DL__RESTRICT lut = b->lut32;
        j = 0;
#if defined(__AVX512F__) && !defined(__CUDACC__)
        for (; j + 16 <= n; j += 16) { /* 16 bytes widened to indices, one gather from the table */
          /* (the masked forms: with the plain ones g++ 12 warns that their undefined source "may be
           * used uninitialized") */
          const __m512i ix = _mm512_maskz_cvtepu8_epi32((__mmask16)0xFFFF,
                                                        _mm_loadu_si128((const __m128i *)(const void *)(s + j)));
          _mm512_storeu_ps(o + j, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), (__mmask16)0xFFFF, ix, lut, 4));
        }
#endif
        for (; j < n; j++) o[j] = lut[s[j]];
      } else {
        double *DL__RESTRICT o = (double *)(void *)dst;
        const double *DL__RESTRICT lut = b->lut64;
        for (j = 0; j < n; j++) o[j] = lut[s[j]];
      }
    } else if (b->convert == 2) {
      if (b->xbuf->dtype == DL_F32) {
        const float *s = (const float *)(const void *)src;
        float *o = (float *)(void *)dst, m = (float)b->mul, a = (float)b->add;
        for (j = 0; j < n; j++) o[j] = s[j] * m + a;
      } else {
        const double *s = (const double *)(const void *)src;
        double *o = (double *)(void *)dst;
        for (j = 0; j < n; j++) o[j] = s[j] * b->mul + b->add;
      }
    } else if (n) {
      memcpy(dst, src, (size_t)n * ies);
    }
    if (b->has_aug) {
      const int64_t *sh = b->xbuf->shape;
      if (b->xbuf->dtype == DL_F32) dl__augment_f32(&b->aug, (float *)(void *)dst, sh[1], sh[2], sh[3], epoch, row);
      else dl__augment_f64(&b->aug, (double *)(void *)dst, sh[1], sh[2], sh[3], epoch, row);
    }
  }
  if (ds->y && b->y_elems) {
    size_t es = dl_dtype_size(ds->y->dtype);
    memcpy((unsigned char *)b->ybuf->data + (size_t)(slot * b->y_elems) * es,
           (const unsigned char *)ds->y->data + (size_t)(row * b->y_elems) * es, (size_t)b->y_elems * es);
  }
}

/* The next batch of the current epoch into *out; returns 1. At the end of
 * the epoch (after its last batch; with drop_last, when fewer than
 * batch_size samples are left) it returns 0 with out->size = 0 and moves to
 * the next epoch, which has a new permutation, so
 *   while (dl_batcher_next(&b, &batch)) { ... }
 * is one epoch. Allocates nothing. */
DL_API int dl_batcher_next(dl_batcher *b, dl_batch *out) {
  dl_shuffler *s = &b->shuf;
  int64_t left = s->per_rank - s->pos, count, k, epoch = s->epoch, step;
  memset(out, 0, sizeof *out);
  if (left <= 0 || b->batch_size <= 0 || (b->drop_last && left < b->batch_size)) {
    dl_shuffler_set_epoch(s, s->epoch + 1);
    return 0;
  }
  count = left < b->batch_size ? left : b->batch_size;
  step = s->pos / b->batch_size;
  for (k = 0; k < count; k++) b->idx[k] = dl_dataset_row(b->ds, dl_shuffler_index(s, s->pos + k));
  s->pos += count;
#ifdef DL__CUDA_C
  if (b->gpu) { /* x gathered and converted on the device; the labels below, on the host */
    const dl_dataset *ds = b->ds;
    int64_t r;
    dl__gpu_ok(b->dxbuf, "dl_batcher_next",
               dlg_batch_gather(dl__gpu_handle(b->gpu), (int)b->dxbuf->dtype, b->convert, b->dxbuf->data, b->dx,
                                ds->x->shape[0], b->x_elems, b->idx, count, b->dlut, b->mul, b->add));
    if (b->ybuf) {
      const size_t ye = (size_t)b->y_elems * dl_dtype_size(b->ybuf->dtype);
      for (r = 0; r < count; r++)
        memcpy((unsigned char *)b->ybuf->data + (size_t)r * ye, (const unsigned char *)ds->y->data + (size_t)b->idx[r] * ye, ye);
    }
    b->xv = dl__view_base(b->dxbuf);
  } else
#endif
  {
    DL_PARALLEL_RUNS(b->ctx, count * b->x_elems * (int64_t)dl_dtype_size(b->xbuf->dtype), count, r, {
      dl__batch_gather(b, r, b->idx[r], r + 1 < count ? b->idx[r + 1] : -1, epoch);
    });
    b->xv = dl__view_base(b->xbuf);
  }
  b->xv.shape[0] = count;
  b->xv.numel = count * b->x_elems;
  out->x = &b->xv;
  if (b->ybuf) {
    b->yv = dl__view_base(b->ybuf);
    b->yv.shape[0] = count;
    b->yv.numel = count * b->y_elems;
    out->y = &b->yv;
  }
  out->index = b->idx;
  out->size = count;
  out->epoch = epoch;
  out->step = step;
  return 1;
}

/* Batches made on the GPU from now on: the dataset's x is copied there once
 * (in its own dtype: u8 images stay one byte a pixel, the dataset's bytes
 * again on the device), and each batch's rows are gathered and converted
 * there by one kernel (dlg_batch_gather), bit for bit the host batcher's
 * values; the batch's x is a device tensor (give it to the model as
 * before: dl_tape_input passes it through), its labels stay on the host,
 * where the loss checks them. Per step the host sends only the batch's row
 * indices. Order, epochs, resume: as on the host. The batcher's device
 * memory is freed by dl_batcher_free (before dl_gpu_close).
 * DL_OK; DL_ERR_UNSUPPORTED for what only the host does (augmentation, text
 * windows, integer inputs), with the reason; DL_ERR_NOMEM (the figures in
 * the message) or DL_ERR_NO_DEVICE (g NULL, a build without DL_USE_CUDA).
 * On failure the batcher is unchanged (on the host). */
DL_API dl_status dl_batcher_to_device(dl_batcher *b, struct dl_gpu *g) {
  const char *op = "dl_batcher_to_device";
#ifdef DL__CUDA_C
  const dl_dataset *ds = b->ds;
  dl_dtype bdt = b->xbuf->dtype;
  size_t xbytes;
  dl_status st;
  if (!g) return dl_fail(b->ctx, DL_ERR_NO_DEVICE, "%s: no GPU (NULL)", op);
  if (b->gpu == g) return DL_OK;
  if (b->gpu) return dl_fail(b->ctx, DL_ERR_ARG, "%s: the batcher is on another GPU already", op);
  if (ds->window > 0 || b->has_aug || (bdt != DL_F32 && bdt != DL_F64) ||
      (b->convert == 0 && ds->x->dtype != bdt))
    return dl_fail(b->ctx, DL_ERR_UNSUPPORTED, "%s: %s batches are made on the host only (x %s, batch %s)", op,
                   ds->window > 0 ? "text-window" : b->has_aug ? "augmented" : "these", DL_SHAPESTR(ds->x),
                   dl_dtype_name(bdt));
  if (!dl_tensor_is_contiguous(ds->x))
    return dl_fail(b->ctx, DL_ERR_UNSUPPORTED, "%s: x %s is not contiguous", op, DL_SHAPESTR(ds->x));
  xbytes = (size_t)ds->x->numel * dl_dtype_size(ds->x->dtype);
  b->gpu = g;
  if ((st = dl_gpu_alloc(g, &b->dx, xbytes ? xbytes : 1)) != DL_OK) goto fail;
  if (xbytes && dlg_copy(dl__gpu_handle(g), b->dx, ds->x->data, xbytes, DLG_H2D) != DLG_OK) {
    st = dl_fail(b->ctx, DL_ERR_NO_DEVICE, "%s: %s", op, dlg_message(dl__gpu_handle(g)));
    goto fail;
  }
  if (b->convert == 1) {
    const size_t lb = 256 * dl_dtype_size(bdt);
    if ((st = dl_gpu_alloc(g, &b->dlut, lb)) != DL_OK) goto fail;
    if (dlg_copy(dl__gpu_handle(g), b->dlut, bdt == DL_F32 ? (const void *)b->lut32 : (const void *)b->lut64, lb,
                 DLG_H2D) != DLG_OK) {
      st = dl_fail(b->ctx, DL_ERR_NO_DEVICE, "%s: %s", op, dlg_message(dl__gpu_handle(g)));
      goto fail;
    }
  }
  if (!(b->dxbuf = dl_gpu_tensor(g, bdt, b->xbuf->ndim, b->xbuf->shape))) {
    st = b->ctx->status != DL_OK ? b->ctx->status : DL_ERR_NOMEM;
    goto fail;
  }
  (void)dl_gpu_sync(g); /* the uploads done before the host's copies may change */
  return DL_OK;
fail:
  dl__batcher_device_free(b);
  b->gpu = NULL;
  return st;
#else
  (void)b;
  (void)g;
  return dl_fail(b->ctx, DL_ERR_NO_DEVICE, "%s: dl.h was built without DL_USE_CUDA (see dl/gpu.h)", op);
#endif
}

/* Jump to the start of epoch e. */
DL_API void dl_batcher_set_epoch(dl_batcher *b, int64_t epoch) { dl_shuffler_set_epoch(&b->shuf, epoch); }
/* The batcher's position for a checkpoint (its shuffler's state). */
DL_API dl_shuffler_state dl_batcher_get_state(const dl_batcher *b) { return dl_shuffler_get_state(&b->shuf); }
/* Resume from dl_batcher_get_state: with the same batch size the following
 * batches are identical to the ones the saved batcher would have given. */
DL_API dl_status dl_batcher_restore(dl_batcher *b, const dl_shuffler_state *st) {
  return dl_shuffler_restore(&b->shuf, st);
}

/* >>reader (private) ------------------------------------------------------------ */

/* A byte source (a FILE or memory), decoded through zlib when it starts with
 * the gzip magic 1f 8b. Concatenated gzip members are read as one stream;
 * anything else after a member is an error. */
typedef struct dl__reader {
  dl_ctx *ctx;
  const char *op, *name;
  FILE *f;
  const unsigned char *mem;
  size_t mem_n, mem_pos;
  unsigned char peek[2];
  size_t npeek, peek_pos;
  int64_t size;      /* source bytes when known, else -1 */
  int gz, done, between;
#ifdef DL_USE_ZLIB
  z_stream zs;
  int zinit;
  unsigned char in[16384];
#endif
} dl__reader;

#ifdef DL_USE_ZLIB
DL_API voidpf dl__zalloc(voidpf opaque, uInt items, uInt size) {
  size_t b;
  if (dl_size_mul(items, size, &b)) return Z_NULL;
  return dl_raw_alloc((dl_ctx *)opaque, b);
}
DL_API void dl__zfree(voidpf opaque, voidpf p) { dl_raw_free((dl_ctx *)opaque, p); }
#endif

DL_API void dl__reader_close(dl__reader *r) {
#ifdef DL_USE_ZLIB
  if (r->zinit) inflateEnd(&r->zs);
  r->zinit = 0;
#endif
  if (r->f) fclose(r->f);
  r->f = NULL;
}

DL_API dl_status dl__reader_start(dl__reader *r, const unsigned char *head, size_t nhead) {
  r->gz = nhead >= 2 && head[0] == 0x1f && head[1] == 0x8b;
  if (!r->gz) return DL_OK;
#ifdef DL_USE_ZLIB
  memset(&r->zs, 0, sizeof r->zs);
  r->zs.zalloc = dl__zalloc;
  r->zs.zfree = dl__zfree;
  r->zs.opaque = (voidpf)r->ctx;
  if (inflateInit2(&r->zs, 15 + 16) != Z_OK) {
    dl__reader_close(r);
    return dl_fail(r->ctx, DL_ERR_NOMEM, "%s: %s: cannot start zlib (out of memory)", r->op, r->name);
  }
  r->zinit = 1;
  return DL_OK;
#else
  dl__reader_close(r);
  return dl_fail(r->ctx, DL_ERR_UNSUPPORTED,
                 "%s: %s is gzip-compressed: build with -DDL_USE_ZLIB -lz (Debian: zlib1g-dev) or gunzip it",
                 r->op, r->name);
#endif
}

DL_API dl_status dl__reader_open_file(dl__reader *r, dl_ctx *ctx, const char *op, const char *path) {
  memset(r, 0, sizeof *r);
  r->ctx = ctx;
  r->op = op;
  r->name = path;
  r->size = -1;
  if (!path) return dl_fail(ctx, DL_ERR_ARG, "%s: path is NULL", op);
  r->f = fopen(path, "rb");
  if (!r->f) return dl_fail(ctx, DL_ERR_IO, "%s: cannot open %s: %s", op, path, strerror(errno));
  if (fseek(r->f, 0, SEEK_END) == 0) {
    long e = ftell(r->f);
    if (e >= 0) r->size = (int64_t)e;
    if (fseek(r->f, 0, SEEK_SET) != 0) r->size = -1;
  }
  r->npeek = fread(r->peek, 1, 2, r->f);
  if (r->npeek < 2 && ferror(r->f)) {
    int e = errno;
    dl__reader_close(r);
    return dl_fail(ctx, DL_ERR_IO, "%s: cannot read %s: %s", op, path, strerror(e));
  }
  return dl__reader_start(r, r->peek, r->npeek);
}

DL_API dl_status dl__reader_open_mem(dl__reader *r, dl_ctx *ctx, const char *op, const char *name,
                                     const void *bytes, size_t n) {
  memset(r, 0, sizeof *r);
  r->ctx = ctx;
  r->op = op;
  r->name = name ? name : "<memory>";
  r->size = (int64_t)n;
  if (!bytes && n) return dl_fail(ctx, DL_ERR_ARG, "%s: NULL data of %zu bytes", op, n);
  r->mem = (const unsigned char *)bytes;
  r->mem_n = bytes ? n : 0;
  return dl__reader_start(r, r->mem, r->mem_n);
}

/* Up to n raw source bytes. */
DL_API dl_status dl__reader_raw(dl__reader *r, unsigned char *buf, size_t n, size_t *got) {
  size_t k = 0;
  while (k < n && r->peek_pos < r->npeek) buf[k++] = r->peek[r->peek_pos++];
  if (r->f) {
    k += fread(buf + k, 1, n - k, r->f);
    if (k < n && ferror(r->f)) {
      *got = k;
      return dl_fail(r->ctx, DL_ERR_IO, "%s: error reading %s: %s", r->op, r->name, strerror(errno));
    }
  } else {
    size_t m = r->mem_n - r->mem_pos;
    if (m > n - k) m = n - k;
    if (m) memcpy(buf + k, r->mem + r->mem_pos, m);
    r->mem_pos += m;
    k += m;
  }
  *got = k;
  return DL_OK;
}

/* Up to n decoded bytes into buf; *got < n only at the end of the data. */
DL_API dl_status dl__reader_read(dl__reader *r, void *buf, size_t n, size_t *got) {
  if (!r->gz) return dl__reader_raw(r, (unsigned char *)buf, n, got);
#ifdef DL_USE_ZLIB
  *got = 0;
  while (*got < n && !r->done) {
    size_t chunk = n - *got;
    int ret;
    if (r->zs.avail_in == 0) {
      size_t k;
      if (r->f || r->peek_pos < r->npeek) {
        dl_status st = dl__reader_raw(r, r->in, sizeof r->in, &k);
        if (st != DL_OK) return st;
        r->zs.next_in = r->in;
      } else {
        k = r->mem_n - r->mem_pos;
        if (k > UINT_MAX) k = UINT_MAX;
        r->zs.next_in = (Bytef *)(uintptr_t)(r->mem + r->mem_pos);
        r->mem_pos += k;
      }
      r->zs.avail_in = (uInt)k;
      if (k == 0) {
        if (r->between) { r->done = 1; break; }
        return dl_fail(r->ctx, DL_ERR_TRUNCATED,
                       "%s: %s: truncated gzip data: the compressed stream ends before its end marker "
                       "(%zu bytes decoded so far in this read)", r->op, r->name, *got);
      }
    }
    if (chunk > UINT_MAX) chunk = UINT_MAX;
    r->zs.next_out = (Bytef *)buf + *got;
    r->zs.avail_out = (uInt)chunk;
    ret = inflate(&r->zs, Z_NO_FLUSH);
    *got += chunk - r->zs.avail_out;
    if (ret == Z_STREAM_END) {
      r->between = 1;
      if (inflateReset(&r->zs) != Z_OK)
        return dl_fail(r->ctx, DL_ERR_FORMAT, "%s: %s: zlib reset failed", r->op, r->name);
    } else if (ret == Z_OK) {
      r->between = 0;
    } else if (ret == Z_BUF_ERROR && r->zs.avail_in == 0) {
      /* needs more input: loop */
    } else if (ret == Z_MEM_ERROR) {
      return dl_fail(r->ctx, DL_ERR_NOMEM, "%s: %s: out of memory in zlib", r->op, r->name);
    } else if (r->between) {
      return dl_fail(r->ctx, DL_ERR_FORMAT, "%s: %s: data after the end of the gzip stream is not another gzip member (%s)",
                     r->op, r->name, r->zs.msg ? r->zs.msg : "bad header");
    } else {
      return dl_fail(r->ctx, DL_ERR_FORMAT, "%s: %s: corrupt gzip data (zlib: %s)", r->op, r->name,
                     r->zs.msg ? r->zs.msg : "error");
    }
  }
  return DL_OK;
#else
  (void)buf; (void)n;
  *got = 0;
  return dl_fail(r->ctx, DL_ERR_UNSUPPORTED, "%s: %s: gzip needs -DDL_USE_ZLIB -lz", r->op, r->name);
#endif
}

/* The rest of the decoded data, at most `limit` bytes, into a new buffer
 * (dl_alloc'ed, free with dl_free; NULL when empty) of *len bytes. Memory
 * grows with the data actually present, never with a size a file claims. */
DL_API dl_status dl__reader_all(dl__reader *r, size_t limit, unsigned char **out, size_t *len) {
  unsigned char *buf = NULL;
  size_t cap = (size_t)1 << 16, n = 0, got, want;
  dl_status st;
  *out = NULL;
  *len = 0;
  if (r->size >= 0 && !r->gz) { /* plain source of known size: one exact allocation */
    int64_t used = -1;
    if (r->f) {
      long at = ftell(r->f);
      if (at >= 0) used = (int64_t)at - (int64_t)(r->npeek - r->peek_pos);
    } else {
      used = (int64_t)r->mem_pos;
    }
    if (used >= 0 && used <= r->size) cap = (size_t)(r->size - used) + 1;
  }
  if (cap > limit) cap = limit;
  if (cap == 0) return DL_OK;
  for (;;) {
    if (!buf || n == cap) {
      size_t ncap = cap;
      unsigned char *nb;
      if (buf) {
        if (cap >= limit) break; /* read as much as was asked for */
        ncap = cap > limit / 2 ? limit : cap * 2;
      }
      nb = (unsigned char *)dl_alloc(r->ctx, ncap);
      if (!nb) { dl_free(r->ctx, buf); return r->ctx ? r->ctx->status : DL_ERR_NOMEM; }
      if (n) memcpy(nb, buf, n);
      dl_free(r->ctx, buf);
      buf = nb;
      cap = ncap;
    }
    want = cap - n;
    st = dl__reader_read(r, buf + n, want, &got);
    if (st != DL_OK) { dl_free(r->ctx, buf); return st; }
    n += got;
    if (got < want) break; /* end of the data */
  }
  if (n == 0) { dl_free(r->ctx, buf); buf = NULL; }
  *out = buf;
  *len = n;
  return DL_OK;
}

/* >>idx --------------------------------------------------------------------------- */

/* IDX (the MNIST format): bytes 0, 0, a type byte, the number of dimensions
 * d (1..8), d big-endian uint32 sizes, then the elements in row-major order,
 * big-endian. Type bytes and the dtypes they load as:
 *   0x08 u8, 0x09 i8, 0x0B i16 (loaded as i32: dl.h has no i16), 0x0C i32,
 *   0x0D f32, 0x0E f64.
 * The file must hold exactly the bytes its dimensions call for: shorter is
 * DL_ERR_TRUNCATED, longer DL_ERR_FORMAT, an element count that overflows
 * DL_ERR_OVERFLOW; each message names the file, the dimensions and both
 * sizes.
 * Memory: dimensions needing more than DL_DATA_MAX_BYTES, or more than a
 * gzip file of its size can decompress to (1032 bytes per compressed byte,
 * deflate's limit), are refused before anything is allocated. When the
 * source's size is known and can be trusted to hold the data (plain: the
 * bytes left after the header; gzip: 64 decoded bytes per compressed byte),
 * the tensor is allocated after the header and the data is decoded
 * straight into it (multi-byte types then byte-swapped in place), so the
 * data exists once. Otherwise (a pipe, or dimensions larger than that) the
 * data is read into a buffer that grows with what is actually there, and
 * the tensor is made only once the size has been checked: a header that
 * claims more than the file holds costs no memory. */
DL_API dl_status dl__idx_read(dl__reader *r, dl_tensor **out) {
  dl_ctx *ctx = r->ctx;
  unsigned char h[4 + 4 * DL_MAX_DIMS], *buf = NULL, *o;
  char dims[200];
  size_t got, es, hdr, D, len, bound = 0;
  int ndim, d;
  int64_t shape[DL_MAX_DIMS], numel, i;
  dl_dtype dt;
  dl_status st;
  dl_tensor *t = NULL;
  *out = NULL;
  st = dl__reader_read(r, h, 4, &got);
  if (st != DL_OK) return st;
  if (got < 4)
    return dl_fail(ctx, DL_ERR_TRUNCATED, "%s: %s: truncated: %s%zu bytes, an IDX header needs at least 4",
                   r->op, r->name, got == 0 ? "empty file, " : "", got);
  if (h[0] || h[1])
    return dl_fail(ctx, DL_ERR_FORMAT,
                   "%s: %s: bad magic %02x %02x %02x %02x: an IDX file starts with 00 00, a type byte and a "
                   "dimension count", r->op, r->name, h[0], h[1], h[2], h[3]);
  switch (h[2]) {
    case 0x08: dt = DL_U8; es = 1; break;
    case 0x09: dt = DL_I8; es = 1; break;
    case 0x0B: dt = DL_I32; es = 2; break;
    case 0x0C: dt = DL_I32; es = 4; break;
    case 0x0D: dt = DL_F32; es = 4; break;
    case 0x0E: dt = DL_F64; es = 8; break;
    default:
      return dl_fail(ctx, DL_ERR_FORMAT,
                     "%s: %s: unknown IDX type byte 0x%02x (0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)",
                     r->op, r->name, h[2]);
  }
  ndim = h[3];
  if (ndim < 1 || ndim > DL_MAX_DIMS)
    return dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: %d dimensions (1 to %d supported)", r->op, r->name, ndim, DL_MAX_DIMS);
  hdr = 4 + 4 * (size_t)ndim;
  st = dl__reader_read(r, h + 4, hdr - 4, &got);
  if (st != DL_OK) return st;
  if (got < hdr - 4)
    return dl_fail(ctx, DL_ERR_TRUNCATED, "%s: %s: truncated header: %d dimensions need %zu header bytes, the %s has %zu",
                   r->op, r->name, ndim, hdr, r->gz ? "decompressed data" : "file", got + 4);
  for (d = 0; d < ndim; d++) {
    const unsigned char *p = h + 4 + 4 * d;
    shape[d] = (int64_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
  }
  dl__dims_str(dims, sizeof dims, shape, ndim);
  st = dl_shape_size(dt, ndim, shape, &numel, NULL);
  { /* the product of the non-zero sizes must fit too: a tensor's strides are
     * products of its trailing sizes even when another size is 0 */
    int64_t nz = 1;
    for (d = 0; d < ndim && st == DL_OK; d++)
      if (shape[d] != 0) {
        if (nz > INT64_MAX / shape[d]) st = DL_ERR_OVERFLOW;
        else nz *= shape[d];
      }
  }
  if (st != DL_OK || dl_size_mul((size_t)numel, es, &D) || D > (size_t)PTRDIFF_MAX - hdr - 1)
    return dl_fail(ctx, DL_ERR_OVERFLOW, "%s: %s: dimensions [%s] overflow: the element count or byte size does not fit",
                   r->op, r->name, dims);
  /* refused before anything is allocated: more than the limit, or more
   * than a gzip file of this size can decompress to (deflate: at most 1032
   * bytes per compressed byte) */
  /* (the tensor's bytes: i16 data becomes i32, twice the file's) */
  if ((uint64_t)numel * dl_dtype_size(dt) > (uint64_t)DL_DATA_MAX_BYTES &&
      !(r->size >= 0 && !r->gz && (uint64_t)D + hdr > (uint64_t)r->size)) /* (a short plain file: truncated, below) */
    return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: %s: dimensions [%s] need %llu bytes, more than DL_DATA_MAX_BYTES "
                   "(%llu): refused before reading (define DL_DATA_MAX_BYTES higher for a genuine file)", r->op, r->name,
                   dims, (unsigned long long)((uint64_t)numel * dl_dtype_size(dt)), (unsigned long long)DL_DATA_MAX_BYTES);
  if (r->size >= 0 && r->gz && (uint64_t)r->size < (uint64_t)SIZE_MAX / 1032 && D > (size_t)r->size * 1032)
    return dl_fail(ctx, DL_ERR_TRUNCATED, "%s: %s: dimensions [%s] need %zu bytes, more than a gzip file of %lld bytes "
                   "can hold (1032 decompressed bytes per byte at most): truncated or wrong dimensions", r->op, r->name,
                   dims, D, (long long)r->size);
  /* the data bytes the source can be trusted to hold (0: unknown or too
   * few): a plain file's bytes left; gzip: 64 decompressed bytes per
   * compressed byte, more than real data compresses (a file that claims
   * more is read into a buffer that grows with what actually arrives, so a
   * header that lies costs no memory) */
  if (r->size >= 0 && !r->gz) bound = (uint64_t)r->size >= hdr ? (size_t)((uint64_t)r->size - hdr) : 0;
  else if (r->size >= 0) bound = (uint64_t)r->size > SIZE_MAX / 64 ? SIZE_MAX : (size_t)r->size * 64;
  if (r->size >= 0 && D <= bound) { /* straight into the tensor, then one byte more to find trailing data */
    unsigned char extra;
    size_t more = 0;
    t = dl_tensor_make(ctx, dt, ndim, shape);
    if (!t) return ctx ? ctx->status : DL_ERR_NOMEM;
    len = 0;
    if (D) st = dl__reader_read(r, t->data, D, &len);
    if (st == DL_OK && len == D) st = dl__reader_read(r, &extra, 1, &more);
    if (st != DL_OK) { dl_tensor_free(t); return st; }
    len += more;
  } else {
    st = dl__reader_all(r, D + 1, &buf, &len);
    if (st != DL_OK) return st;
  }
  if (len < D) {
    dl_free(ctx, buf);
    dl_tensor_free(t);
    return dl_fail(ctx, DL_ERR_TRUNCATED,
                   "%s: %s: truncated: dimensions [%s] (%s, %zu bytes each) need %zu bytes in all (%zu header + "
                   "%zu data), the %s has %zu", r->op, r->name, dims, h[2] == 0x0B ? "i16" : dl_dtype_name(dt), es,
                   hdr + D, hdr, D, r->gz ? "decompressed data" : "file", hdr + len);
  }
  if (len > D) {
    dl_free(ctx, buf);
    dl_tensor_free(t);
    if (r->size >= 0 && !r->gz)
      return dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: dimensions [%s] need %zu bytes in all, the file has %lld: "
                     "wrong dimensions or trailing data", r->op, r->name, dims, hdr + D, (long long)r->size);
    return dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: dimensions [%s] need %zu bytes in all, the decompressed data "
                   "is longer: wrong dimensions or trailing data", r->op, r->name, dims, hdr + D);
  }
  if (!t) {
    t = dl_tensor_make(ctx, dt, ndim, shape);
    if (!t) { dl_free(ctx, buf); return ctx ? ctx->status : DL_ERR_NOMEM; }
    if (D) memcpy(t->data, buf, D);
    dl_free(ctx, buf);
  }
  /* big-endian file order to the host's, in place; i16 widens to i32 from
   * the last element down, so no source byte is overwritten before it is read */
  o = (unsigned char *)t->data;
  switch (h[2]) {
    case 0x0B:
      for (i = numel - 1; i >= 0; i--) {
        uint16_t u = (uint16_t)(((unsigned)o[2 * i] << 8) | o[2 * i + 1]);
        int16_t v;
        int32_t w;
        memcpy(&v, &u, 2);
        w = v;
        memcpy(o + 4 * i, &w, 4);
      }
      break;
    case 0x0C: case 0x0D:
      for (i = 0; i < numel; i++) {
        unsigned char *p = o + 4 * i;
        uint32_t u = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
        memcpy(p, &u, 4);
      }
      break;
    case 0x0E:
      for (i = 0; i < numel; i++) {
        unsigned char *p = o + 8 * i;
        uint64_t u = 0;
        for (d = 0; d < 8; d++) u = (u << 8) | p[d];
        memcpy(p, &u, 8);
      }
      break;
    default: break;
  }
  *out = t;
  return DL_OK;
}

/* Parse an IDX file held in memory (plain, or gzip with DL_USE_ZLIB) into a
 * new tensor *out (owned by the caller). *out is NULL on failure. */
DL_API dl_status dl_idx_parse(dl_ctx *ctx, const void *bytes, size_t n, dl_tensor **out) {
  dl__reader r;
  dl_status st;
  *out = NULL;
  st = dl__reader_open_mem(&r, ctx, "dl_idx_parse", NULL, bytes, n);
  if (st != DL_OK) return st;
  st = dl__idx_read(&r, out);
  dl__reader_close(&r);
  return st;
}

/* Load an IDX file (plain, or gzip with DL_USE_ZLIB, recognised by its
 * first bytes) into a new tensor *out (owned by the caller). */
DL_API dl_status dl_idx_load(dl_ctx *ctx, const char *path, dl_tensor **out) {
  dl__reader r;
  dl_status st;
  *out = NULL;
  st = dl__reader_open_file(&r, ctx, "dl_idx_load", path);
  if (st != DL_OK) return st;
  st = dl__idx_read(&r, out);
  dl__reader_close(&r);
  return st;
}

/* The IDX encoding of t (u8, i8, i32, f32 or f64; 1 to 8 dimensions, each
 * < 2^32; any strides) into buf[0..cap). *size gets the bytes needed; with
 * buf NULL only the size is computed. DL_ERR_DTYPE, DL_ERR_SHAPE, DL_ERR_ARG
 * (cap too small) with a message. */
DL_API dl_status dl_idx_encode(dl_ctx *ctx, const dl_tensor *t, void *buf, size_t cap, size_t *size) {
  unsigned char type, *o = (unsigned char *)buf;
  size_t es = dl_dtype_size(t->dtype), need, hdr = 4 + 4 * (size_t)t->ndim;
  int64_t i;
  int d, k;
  switch (t->dtype) {
    case DL_U8: type = 0x08; break;
    case DL_I8: type = 0x09; break;
    case DL_I32: type = 0x0C; break;
    case DL_F32: type = 0x0D; break;
    case DL_F64: type = 0x0E; break;
    default: return dl_fail(ctx, DL_ERR_DTYPE, "dl_idx_encode: %s has no IDX type", DL_SHAPESTR(t));
  }
  if (t->ndim < 1 || t->ndim > DL_MAX_DIMS)
    return dl_fail(ctx, DL_ERR_SHAPE, "dl_idx_encode: %s: IDX needs 1 to %d dimensions", DL_SHAPESTR(t), DL_MAX_DIMS);
  for (d = 0; d < t->ndim; d++)
    if (t->shape[d] > (int64_t)UINT32_MAX)
      return dl_fail(ctx, DL_ERR_SHAPE, "dl_idx_encode: %s: size %lld does not fit IDX's 32 bits", DL_SHAPESTR(t),
                     (long long)t->shape[d]);
  if (dl_size_mul((size_t)t->numel, es, &need) || dl_size_add(need, hdr, &need))
    return dl_fail(ctx, DL_ERR_OVERFLOW, "dl_idx_encode: %s overflows", DL_SHAPESTR(t));
  *size = need;
  if (!buf) return DL_OK;
  if (cap < need)
    return dl_fail(ctx, DL_ERR_ARG, "dl_idx_encode: %s needs %zu bytes, the buffer has %zu", DL_SHAPESTR(t), need, cap);
  o[0] = o[1] = 0;
  o[2] = type;
  o[3] = (unsigned char)t->ndim;
  for (d = 0; d < t->ndim; d++) {
    uint32_t s = (uint32_t)t->shape[d];
    o[4 + 4 * d] = (unsigned char)(s >> 24);
    o[5 + 4 * d] = (unsigned char)(s >> 16);
    o[6 + 4 * d] = (unsigned char)(s >> 8);
    o[7 + 4 * d] = (unsigned char)s;
  }
  o += hdr;
  for (i = 0; i < t->numel; i++) {
    const unsigned char *p = (const unsigned char *)t->data + (size_t)dl__offset_of_linear(t, i) * es;
    uint64_t u = 0;
    if (es == 1) { *o++ = *p; continue; }
    if (es == 4) { uint32_t v; memcpy(&v, p, 4); u = v; }
    else memcpy(&u, p, 8);
    for (k = (int)es - 1; k >= 0; k--) *o++ = (unsigned char)(u >> (8 * k));
  }
  return DL_OK;
}

/* >>mnist ---------------------------------------------------------------------------- */

/* A dataset from an IDX images file ([N, ...] any dtype the batcher takes;
 * [N, H, W] becomes [N, 1, H, W]) and an IDX labels file ([N], u8 / i8 /
 * i32, converted to i64 class indices >= 0). Sizes must agree. */
DL_API dl_status dl_load_idx_dataset(dl_ctx *ctx, const char *images, const char *labels, dl_dataset *out) {
  const char *op = "dl_load_idx_dataset";
  dl_tensor *x = NULL, *l = NULL, *y;
  dl_status st;
  int64_t i;
  memset(out, 0, sizeof *out);
  st = dl_idx_load(ctx, images, &x);
  if (st != DL_OK) return st;
  st = dl_idx_load(ctx, labels, &l);
  if (st != DL_OK) { dl_tensor_free(x); return st; }
  if (l->ndim != 1 || (l->dtype != DL_U8 && l->dtype != DL_I8 && l->dtype != DL_I32) || l->shape[0] != x->shape[0]) {
    st = dl_fail(ctx, DL_ERR_FORMAT, "%s: %s holds %s, the labels for %s in %s must be integers [%lld]", op, labels,
                 DL_SHAPESTR(l), DL_SHAPESTR(x), images, (long long)x->shape[0]);
    dl_tensor_free(x);
    dl_tensor_free(l);
    return st;
  }
  if (x->ndim == 3) {
    int64_t sh[4];
    sh[0] = x->shape[0]; sh[1] = 1; sh[2] = x->shape[1]; sh[3] = x->shape[2];
    dl__set_shape(x, 4, sh);
  }
  y = dl_tensor_make(ctx, DL_I64, 1, l->shape);
  if (!y) { st = ctx ? ctx->status : DL_ERR_NOMEM; dl_tensor_free(x); dl_tensor_free(l); return st; }
  for (i = 0; i < l->numel; i++) dl_i64(y)[i] = (int64_t)dl__get_at(l, i);
  dl_tensor_free(l);
  return dl_dataset_make(ctx, out, x, y, DL_DATASET_OWN);
}

/* Fashion-MNIST's class names, index 0..9. */
DL_API const char *const *dl__fashion_names(void) {
  static const char *const names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                        "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

DL_API dl_status dl__fashion_one(dl_ctx *ctx, const char *dir, const char *split, dl_dataset *out) {
  char img[1024], lab[1024];
  const char *ext[2] = {"", ".gz"};
  int e, have_i = 0, have_l = 0, n;
  dl_status st;
  for (e = 0; e < 2; e++) {
    FILE *f;
    if (!have_i) {
      n = snprintf(img, sizeof img, "%s/%s-images-idx3-ubyte%s", dir, split, ext[e]);
      if (n < 0 || (size_t)n >= sizeof img) return dl_fail(ctx, DL_ERR_ARG, "dl_load_fashion_mnist: directory name too long");
      if ((f = fopen(img, "rb")) != NULL) { fclose(f); have_i = 1; }
    }
    if (!have_l) {
      n = snprintf(lab, sizeof lab, "%s/%s-labels-idx1-ubyte%s", dir, split, ext[e]);
      if (n < 0 || (size_t)n >= sizeof lab) return dl_fail(ctx, DL_ERR_ARG, "dl_load_fashion_mnist: directory name too long");
      if ((f = fopen(lab, "rb")) != NULL) { fclose(f); have_l = 1; }
    }
  }
  if (!have_i || !have_l)
    return dl_fail(ctx, DL_ERR_IO,
                   "dl_load_fashion_mnist: %s/%s-%s-idx%d-ubyte[.gz] not found (Debian: apt-get install "
                   "dataset-fashion-mnist)", dir, split, have_i ? "labels" : "images", have_i ? 1 : 3);
  st = dl_load_idx_dataset(ctx, img, lab, out);
  if (st != DL_OK) return st;
  if (out->x->dtype != DL_U8 || out->x->ndim != 4 || out->x->shape[2] != 28 || out->x->shape[3] != 28 ||
      out->num_classes > 10) {
    st = dl_fail(ctx, DL_ERR_FORMAT, "dl_load_fashion_mnist: %s is %s with %lld classes, not u8 [N, 28, 28] images of 10 classes",
                 img, DL_SHAPESTR(out->x), (long long)out->num_classes);
    dl_dataset_free(out);
    return st;
  }
  out->num_classes = 10;
  out->class_names = dl__fashion_names();
  return DL_OK;
}

/* Fashion-MNIST from dir (NULL: DL_FASHION_MNIST_DIR,
 * /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist):
 * {train,t10k}-{images-idx3,labels-idx1}-ubyte, plain or .gz (gzip needs
 * DL_USE_ZLIB). Images stay u8 [N, 1, 28, 28] (a quarter of f32's memory;
 * the batcher converts, x / 255 by default); labels i64 [N] in 0..9,
 * class_names set. train or test may be NULL to skip it. On failure both are
 * zeroed and nothing is held. */
DL_API dl_status dl_load_fashion_mnist(dl_ctx *ctx, const char *dir, dl_dataset *train, dl_dataset *test) {
  dl_status st;
  if (!dir) dir = DL_FASHION_MNIST_DIR;
  if (train) memset(train, 0, sizeof *train);
  if (test) memset(test, 0, sizeof *test);
  if (train && (st = dl__fashion_one(ctx, dir, "train", train)) != DL_OK) return st;
  if (test && (st = dl__fashion_one(ctx, dir, "t10k", test)) != DL_OK) {
    if (train) dl_dataset_free(train);
    return st;
  }
  return DL_OK;
}

/* Name of Fashion-MNIST class k (0..9), or "?". */
DL_API const char *dl_fashion_mnist_class(int k) { return k >= 0 && k < 10 ? dl__fashion_names()[k] : "?"; }

/* >>csv -------------------------------------------------------------------------------- */

/* dl_csv_desc: zero fields are defaults.
 *   label         the label column's header name; NULL: label_column
 *   label_column  0-based index of the label column (default 0, the first);
 *                 negative counts from the end (-1: the last)
 *   no_label      1: every column is an input and y is NULL
 *   regression    1: the label is a float value: y [N, 1] of dtype;
 *                 0: a class index (a whole number 0..2^31-1): y [N] i64
 *   dtype         x (and regression y) dtype: DL_F32 (0) or DL_F64
 *   delimiter     0: ','
 * The file: a header row naming the columns (required: a first row of
 * numbers only is refused), then one row per sample, every row with as many
 * fields as the header. Fields may be surrounded by spaces and double
 * quotes ("" is a quote inside one); line ends \n or \r\n; blank lines are
 * skipped; a UTF-8 byte-order mark is skipped. Values are decimal numbers
 * (digits, sign, '.', exponent; no hex, inf or nan; within f32's range when
 * the dtype is f32). An empty field or NA, N/A, NaN, nan, null, NULL, ? is a
 * missing value: an error, like anything that is not a number, reported
 * with its line (1-based, the header is line 1), column (1-based) and column
 * name. Memory: the text, then x and y, sized after every row was checked.
 * Numbers are read with strtod: call it in the "C" numeric locale. */
typedef struct dl_csv_desc {
  const char *label; /* the label column's header name; NULL: label_column */
  int label_column; /* 0-based index of the label column; negative counts from the end */
  int no_label; /* 1: every column is an input and y is NULL */
  int regression; /* 1: the label is a float (y [N, 1]); 0: a class index (y [N] i64) */
  dl_dtype dtype; /* x (and regression y) dtype: DL_F32 (0) or DL_F64 */
  char delimiter; /* 0: ',' */
} dl_csv_desc;

/* One field of a line starting at *at: its text (quotes removed, spaces
 * trimmed, "" still doubled) in [*fs, *fs + *fn). Returns 0 at the end of the
 * line, 1 with a field, -1 on an unterminated quote, -2 on text after a
 * closing quote. *at moves past the delimiter. */
DL_API int dl__csv_field(const char *p, size_t n, size_t *at, char delim, const char **fs, size_t *fn, int *quoted) {
  size_t i = *at, s, e;
  *quoted = 0;
  if (i > n) return 0;
  while (i < n && (p[i] == ' ' || p[i] == '\t') && p[i] != delim) i++;
  if (i < n && p[i] == '"') {
    s = ++i;
    for (;;) {
      if (i >= n) return -1;
      if (p[i] == '"') {
        if (i + 1 < n && p[i + 1] == '"') { i += 2; continue; }
        break;
      }
      i++;
    }
    e = i++;
    while (i < n && (p[i] == ' ' || p[i] == '\t') && p[i] != delim) i++;
    if (i < n && p[i] != delim) return -2;
    *quoted = 1;
  } else {
    s = i;
    while (i < n && p[i] != delim) i++;
    e = i;
    while (e > s && (p[e - 1] == ' ' || p[e - 1] == '\t')) e--;
  }
  *fs = p + s;
  *fn = e - s;
  *at = i + 1; /* past the delimiter (or n + 1 at the end) */
  return 1;
}

/* Whether a header field (quoted: "" stands for one quote) reads name. */
DL_API int dl__csv_name_eq(const char *fs, size_t fn, int quoted, const char *name) {
  size_t i = 0, k = 0;
  while (i < fn) {
    if (!name[k] || fs[i] != name[k]) return 0;
    i += (quoted && fs[i] == '"' && i + 1 < fn && fs[i + 1] == '"') ? 2 : 1;
    k++;
  }
  return name[k] == 0;
}

/* Next line [*ls, *ls + *ln) of buf from *pos, without its \n or \r\n. */
DL_API int dl__csv_line(const char *buf, size_t len, size_t *pos, const char **ls, size_t *ln) {
  const char *nl;
  size_t e;
  if (*pos >= len) return 0;
  nl = (const char *)memchr(buf + *pos, '\n', len - *pos);
  e = nl ? (size_t)(nl - buf) : len;
  *ls = buf + *pos;
  *ln = e - *pos;
  if (*ln && (*ls)[*ln - 1] == '\r') (*ln)--;
  *pos = nl ? e + 1 : len;
  return 1;
}

DL_API int dl__csv_blank(const char *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

/* 0: a number in *v; 1: missing; 2: not a number. */
DL_API int dl__csv_number(const char *s, size_t n, double *v) {
  static const char *const missing[] = {"NA", "N/A", "NaN", "nan", "null", "NULL", "?", "na", "NAN"};
  char tmp[128], *end;
  size_t i;
  int digits = 0;
  if (n == 0) return 1;
  for (i = 0; i < sizeof missing / sizeof *missing; i++)
    if (strlen(missing[i]) == n && memcmp(missing[i], s, n) == 0) return 1;
  if (n >= sizeof tmp) return 2;
  for (i = 0; i < n; i++) {
    char c = s[i];
    if (c >= '0' && c <= '9') digits = 1;
    else if (c != '+' && c != '-' && c != '.' && c != 'e' && c != 'E') return 2;
  }
  if (!digits) return 2;
  memcpy(tmp, s, n);
  tmp[n] = 0;
  *v = strtod(tmp, &end);
  if (end != tmp + n || !(*v == *v) || *v > DBL_MAX || *v < -DBL_MAX) return 2;
  return 0;
}

DL_API dl_status dl__csv_parse(dl_ctx *ctx, const char *op, const char *name, const char *buf, size_t len,
                               const dl_csv_desc *desc, dl_dataset *out) {
  dl_csv_desc d;
  const char *ls, *fs, *hs = NULL;
  size_t ln, fn, pos = 0, at, hn = 0;
  int64_t ncols = 0, nrows = 0, line = 0, header_line = 0, row, col, labcol = -1, F, xi;
  int r, q, all_numeric = 1, pass;
  double v;
  char delim;
  dl_tensor *x = NULL, *y = NULL;
  dl_status st;
  memset(out, 0, sizeof *out);
  memset(&d, 0, sizeof d);
  if (desc) d = *desc;
  delim = d.delimiter ? d.delimiter : ',';
  if (d.dtype != DL_F32 && d.dtype != DL_F64)
    return dl_fail(ctx, DL_ERR_DTYPE, "%s: dtype %s: f32 or f64", op, dl_dtype_name(d.dtype));
  if (len >= 3 && (unsigned char)buf[0] == 0xEF && (unsigned char)buf[1] == 0xBB && (unsigned char)buf[2] == 0xBF)
    pos = 3;
  /* header: the first non-blank line */
  while (dl__csv_line(buf, len, &pos, &ls, &ln)) {
    line++;
    if (!dl__csv_blank(ls, ln)) { hs = ls; hn = ln; header_line = line; break; }
  }
  if (!hs) return dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: empty file: a header row naming the columns is required", op, name);
  at = 0;
  while ((r = dl__csv_field(hs, hn, &at, delim, &fs, &fn, &q)) == 1) {
    ncols++;
    if (q || dl__csv_number(fs, fn, &v) != 0) all_numeric = 0;
  }
  if (r < 0)
    return dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: line %lld (header): %s", op, name, (long long)header_line,
                   r == -1 ? "unterminated quote" : "text after a closing quote");
  if (all_numeric)
    return dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: line %lld is data (every field is a number), not a header row: the "
                   "first row must name the columns", op, name, (long long)header_line);
  /* label column */
  if (d.no_label) labcol = -1;
  else if (d.label) {
    at = 0;
    for (col = 0; (r = dl__csv_field(hs, hn, &at, delim, &fs, &fn, &q)) == 1; col++)
      if (dl__csv_name_eq(fs, fn, q, d.label)) { labcol = col; break; }
    if (labcol < 0)
      return dl_fail(ctx, DL_ERR_ARG, "%s: %s: no column named \"%s\" in the header \"%.*s\"", op, name, d.label,
                     (int)(hn > 200 ? 200 : hn), hs);
  } else {
    labcol = d.label_column < 0 ? ncols + d.label_column : d.label_column;
    if (labcol < 0 || labcol >= ncols)
      return dl_fail(ctx, DL_ERR_ARG, "%s: %s: label column %d, the header has %lld columns", op, name, d.label_column,
                     (long long)ncols);
  }
  F = ncols - (labcol >= 0 ? 1 : 0);
  if (F < 1) return dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: no input columns (the header has %lld)", op, name, (long long)ncols);
  /* Pass 0 checks every row (errors in file order) and counts them; pass 1
   * stores the values into x and y, allocated in between: their size is
   * bounded by the fields actually present. */
  for (pass = 0; pass < 2; pass++) {
    size_t p = pos;
    int64_t ln_no = line;
    if (pass == 1) {
      int64_t sh[2];
      if (nrows == 0) return dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: no data rows after the header", op, name);
      sh[0] = nrows; sh[1] = F;
      x = dl_tensor_make(ctx, d.dtype, 2, sh);
      if (!x) return ctx ? ctx->status : DL_ERR_NOMEM;
      if (labcol >= 0) {
        sh[1] = 1;
        y = d.regression ? dl_tensor_make(ctx, d.dtype, 2, sh) : dl_tensor_make(ctx, DL_I64, 1, sh);
        if (!y) { dl_tensor_free(x); return ctx ? ctx->status : DL_ERR_NOMEM; }
      }
    }
    row = 0;
    while (dl__csv_line(buf, len, &p, &ls, &ln)) {
      ln_no++;
      if (dl__csv_blank(ls, ln)) continue;
      at = 0;
      xi = 0;
      for (col = 0; (r = dl__csv_field(ls, ln, &at, delim, &fs, &fn, &q)) == 1; col++) {
        int k;
        if (col >= ncols) break;
        k = dl__csv_number(fs, fn, &v);
        if (k != 0) {
          /* the column's name for the message */
          const char *cs = "";
          size_t cn = 0, a2 = 0;
          int64_t c2;
          int q2;
          for (c2 = 0; c2 <= col && dl__csv_field(hs, hn, &a2, delim, &cs, &cn, &q2) == 1; c2++) {}
          if (k == 1)
            st = dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: line %lld, column %lld (\"%.*s\"): missing value%s%.*s%s", op,
                         name, (long long)ln_no, (long long)col + 1, (int)(cn > 60 ? 60 : cn), cs, fn ? " (" : "",
                         (int)(fn > 20 ? 20 : fn), fs, fn ? ")" : "");
          else
            st = dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: line %lld, column %lld (\"%.*s\"): \"%.*s\" is not a number", op,
                         name, (long long)ln_no, (long long)col + 1, (int)(cn > 60 ? 60 : cn), cs,
                         (int)(fn > 40 ? 40 : fn), fs);
          goto fail;
        }
        if (d.dtype == DL_F32 && (col != labcol || d.regression) && (v > FLT_MAX || v < -FLT_MAX)) {
          st = dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: line %lld, column %lld: %.*s is out of f32's range (use dtype "
                       "DL_F64)", op, name, (long long)ln_no, (long long)col + 1, (int)(fn > 40 ? 40 : fn), fs);
          goto fail;
        }
        if (col == labcol) {
          if (!d.regression && !(v >= 0 && v <= 2147483647.0 && v == (double)(int64_t)v)) {
            st = dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: line %lld, column %lld: label %.*s is not a class index (a whole "
                         "number 0..2147483647; set regression = 1 for float targets)", op, name, (long long)ln_no,
                         (long long)col + 1, (int)(fn > 40 ? 40 : fn), fs);
            goto fail;
          }
          if (pass == 1) {
            if (!d.regression) ((int64_t *)y->data)[row] = (int64_t)v;
            else if (d.dtype == DL_F32) ((float *)y->data)[row] = (float)v;
            else ((double *)y->data)[row] = v;
          }
        } else {
          if (pass == 1) {
            if (d.dtype == DL_F32) ((float *)x->data)[row * F + xi] = (float)v;
            else ((double *)x->data)[row * F + xi] = v;
          }
          xi++;
        }
      }
      if (r < 0) {
        st = dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: line %lld, column %lld: %s", op, name, (long long)ln_no,
                     (long long)col + 1, r == -1 ? "unterminated quote" : "text after a closing quote");
        goto fail;
      }
      if (col != ncols || r == 1) {
        int64_t fields = col;
        if (r == 1) { /* more fields than the header: count them */
          while ((r = dl__csv_field(ls, ln, &at, delim, &fs, &fn, &q)) == 1) fields++;
          fields++;
        }
        st = dl_fail(ctx, DL_ERR_FORMAT, "%s: %s: line %lld has %lld fields, the header (line %lld) has %lld", op, name,
                     (long long)ln_no, (long long)fields, (long long)header_line, (long long)ncols);
        goto fail;
      }
      row++;
    }
    nrows = row;
  }
  return dl_dataset_make(ctx, out, x, y, DL_DATASET_OWN);
fail:
  dl_tensor_free(x);
  dl_tensor_free(y);
  return st;
}

/* Parse CSV text held in memory (plain, or gzip with DL_USE_ZLIB) into a
 * dataset: x [rows, inputs] of desc->dtype, y as desc says. On failure *out
 * is zeroed; the message has the line and column. */
DL_API dl_status dl_csv_parse(dl_ctx *ctx, const void *bytes, size_t n, const dl_csv_desc *desc, dl_dataset *out) {
  dl__reader r;
  unsigned char *buf;
  size_t len;
  dl_status st;
  memset(out, 0, sizeof *out);
  st = dl__reader_open_mem(&r, ctx, "dl_csv_parse", NULL, bytes, n);
  if (st != DL_OK) return st;
  if (!r.gz) {
    dl__reader_close(&r);
    return dl__csv_parse(ctx, "dl_csv_parse", "<memory>", (const char *)bytes, bytes ? n : 0, desc, out);
  }
  st = dl__reader_all(&r, SIZE_MAX, &buf, &len);
  dl__reader_close(&r);
  if (st != DL_OK) return st;
  st = dl__csv_parse(ctx, "dl_csv_parse", "<memory>", (const char *)buf, len, desc, out);
  dl_free(ctx, buf);
  return st;
}

/* Load a CSV file (plain or gzip) as dl_csv_parse does. */
DL_API dl_status dl_csv_load(dl_ctx *ctx, const char *path, const dl_csv_desc *desc, dl_dataset *out) {
  dl__reader r;
  unsigned char *buf;
  size_t len;
  dl_status st;
  memset(out, 0, sizeof *out);
  st = dl__reader_open_file(&r, ctx, "dl_csv_load", path);
  if (st != DL_OK) return st;
  st = dl__reader_all(&r, SIZE_MAX, &buf, &len);
  dl__reader_close(&r);
  if (st != DL_OK) return st;
  st = dl__csv_parse(ctx, "dl_csv_load", path, (const char *)buf, len, desc, out);
  dl_free(ctx, buf);
  return st;
}

/* >>images ------------------------------------------------------------------------------- */

/* Bilinear resize of an interleaved image src [sh, sw, c] (stb_image's
 * layout) into a planar one dst [c, dh, dw], with half-pixel centres: the
 * source coordinate of output pixel y is (y + 0.5) * sh / dh - 0.5, clamped
 * at 0 (PyTorch's interpolate(mode="bilinear", align_corners=False,
 * antialias=False), OpenCV's INTER_LINEAR), rounded to the nearest integer.
 * No antialiasing: shrinking by much more than 2x aliases. */
DL_API void dl_image_resize(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw) {
  int y, x, ch;
  double ry = (double)sh / dh, rx = (double)sw / dw;
  for (y = 0; y < dh; y++) {
    double fy = ((double)y + 0.5) * ry - 0.5, ly;
    int y0, y1;
    if (fy < 0) fy = 0;
    y0 = (int)fy;
    if (y0 > sh - 1) y0 = sh - 1;
    y1 = y0 < sh - 1 ? y0 + 1 : y0;
    ly = fy - y0;
    if (ly > 1) ly = 1;
    for (x = 0; x < dw; x++) {
      double fx = ((double)x + 0.5) * rx - 0.5, lx;
      int x0, x1;
      if (fx < 0) fx = 0;
      x0 = (int)fx;
      if (x0 > sw - 1) x0 = sw - 1;
      x1 = x0 < sw - 1 ? x0 + 1 : x0;
      lx = fx - x0;
      if (lx > 1) lx = 1;
      for (ch = 0; ch < c; ch++) {
        double p00 = src[((size_t)y0 * sw + x0) * c + ch], p01 = src[((size_t)y0 * sw + x1) * c + ch];
        double p10 = src[((size_t)y1 * sw + x0) * c + ch], p11 = src[((size_t)y1 * sw + x1) * c + ch];
        double v = (1 - ly) * ((1 - lx) * p00 + lx * p01) + ly * ((1 - lx) * p10 + lx * p11) + 0.5;
        dst[((size_t)ch * dh + y) * dw + x] = (uint8_t)(v >= 255 ? 255 : v <= 0 ? 0 : v);
      }
    }
  }
}

/* >>image files -------------------------------------------------------------- */

/* The most pixels an image file may declare (width x height) before it is
 * decoded: a small file can declare a huge image (a 1 MB PNG of 32000 x
 * 32000 decodes into 2 GB), so dl_image_load and the folder loader read the
 * header first and refuse beyond this. Default 2^26 (8192 x 8192); define
 * it higher for genuine large images. */
#ifndef DL_IMAGE_MAX_PIXELS
#define DL_IMAGE_MAX_PIXELS ((int64_t)1 << 26)
#endif

#ifdef DL_USE_STB_IMAGE
/* 1 when every Huffman table of a JPEG holds at most 256 codes, or the
 * data is not a JPEG; 0 otherwise. stb_image 2.27 (Debian 12's) writes
 * past a 257-byte array for a table that claims more (fixed in 2.28): such
 * files are refused before stb sees them. Every FF C4 (DHT) in the data is
 * checked the way stb reads a DHT segment (tables while its length lasts,
 * zeros past the end of the data), wherever stb's own parse would meet it:
 * a superset of the segments stb processes (valid entropy-coded data never
 * holds FF C4), so a table stb would build is never missed. */
/* Checks a binary PNM (P5, P6: what stb reads) before stb_image 2.27
 * (Debian 12's) sees it; data that is not such a PNM returns 1.
 * - 0 when a header number (width, height, maximum value) is past INT_MAX:
 *   stb reads them as int with no overflow check (signed overflow,
 *   undefined behaviour, found by fuzz/fuzz_image.c). The header is walked
 *   the way stb walks it (whitespace, # comments to the end of the line,
 *   digits).
 * - -1 when the pixel data after the header (one whitespace byte after the
 *   maximum value, then width * height * channels samples of 1 byte, or 2
 *   above 255) is shorter than the header declares: stb fills the rest with
 *   whatever its buffer held, so a truncated file would load as an image;
 *   -2 when the maximum value is past 65535.
 * - 1 otherwise; *bits16 = 1 when the samples are 16-bit, *data_at the
 *   offset of the first sample. stb 2.27 mishandles 16-bit PNMs twice: it
 *   converts channels with its 8-bit routine over 16-bit data and reads past
 *   its buffer (found by fuzz/fuzz_image.c), and it keeps the samples in
 *   file (big-endian) order, so on a little-endian host every sample's low
 *   byte becomes the 8-bit value. dl_image_load decodes them itself. */
DL_API int dl__pnm_check(const unsigned char *p, size_t n, int *bits16, size_t *data_at) {
  size_t i = 2;
  int k;
  int64_t v[3] = {0, 0, 0};
  *bits16 = 0;
  *data_at = 0;
  if (n < 2 || p[0] != 'P' || (p[1] != '5' && p[1] != '6')) return 1;
  for (k = 0; k < 3; k++) { /* width, height, maximum value */
    for (;;) {
      while (i < n && (p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r'))) i++;
      if (i >= n || p[i] != '#') break;
      while (i < n && p[i] != '\n' && p[i] != '\r') i++;
    }
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++)
      if ((v[k] = v[k] * 10 + (p[i] - '0')) > INT_MAX) return 0;
  }
  if (v[0] <= 0 || v[1] <= 0 || v[2] <= 0) return 1; /* stb refuses these itself */
  *data_at = i + 1; /* the one whitespace byte stb consumes after the maximum value */
  /* a header that runs to the end of the data is refused before the maximum value is looked at: stb stops
   * reading a number at the end of its input one digit early (maximum 66020 read as 6602: 16-bit) */
  if (*data_at > n) return -1;
  if (v[2] > 65535) return -2;
  *bits16 = v[2] > 255;
  {
    const double need = (double)v[0] * (double)v[1] * (p[1] == '6' ? 3.0 : 1.0) * (*bits16 ? 2.0 : 1.0);
    if ((double)(n - *data_at) < need) return -1;
  }
  return 1;
}
/* Converts pixels of `from` channels (1 grey, 3 RGB), each sample `bytes`
 * wide (1, or 2 big-endian: its high byte is the 8-bit value, as stb_image
 * reduces 16-bit PNGs), to `to` channels (1 grey, 2 grey+alpha, 3 RGB,
 * 4 RGBA): grey from RGB as (77 r + 150 g + 29 b) >> 8 (what stb_image
 * computes), alpha 255. Returns a block from stb's allocator (freed by
 * dl_image_free), or NULL when out of memory. */
static unsigned char *dl__image_channels(const unsigned char *src, int w, int h, int from, int bytes, int to) {
  const size_t np = (size_t)w * (size_t)h;
  unsigned char *o = (unsigned char *)STBI_MALLOC(np * (size_t)to);
  size_t q;
  if (!o) return NULL;
  for (q = 0; q < np; q++) {
    const unsigned char *s = src + q * (size_t)from * (size_t)bytes;
    unsigned char *d = o + q * (size_t)to;
    const int r = s[0], g = from == 3 ? s[bytes] : r, b = from == 3 ? s[2 * bytes] : r;
    if (to <= 2) {
      d[0] = (unsigned char)(from == 3 ? (77 * r + 150 * g + 29 * b) >> 8 : r);
      if (to == 2) d[1] = 255;
    } else {
      d[0] = (unsigned char)r;
      d[1] = (unsigned char)g;
      d[2] = (unsigned char)b;
      if (to == 4) d[3] = 255;
    }
  }
  return o;
}
DL_API int dl__jpeg_tables_ok(const unsigned char *p, size_t n) {
  size_t i = 1;
  /* a JPEG as stb tells one: FF, any number of FF fill bytes, D8 */
  if (n < 2 || p[0] != 0xFF) return 1;
  while (i < n && p[i] == 0xFF) i++;
  if (i >= n || p[i] != 0xD8) return 1;
  for (i = 0; i + 1 < n; i++) {
    long L;
    size_t at;
    if (p[i] != 0xFF || p[i + 1] != 0xC4) continue;
    L = (long)(((i + 2 < n ? (unsigned)p[i + 2] : 0u) << 8) | (i + 3 < n ? (unsigned)p[i + 3] : 0u)) - 2;
    at = i + 4;
    while (L > 0) {
      size_t k, codes = 0;
      for (k = 1; k <= 16; k++) codes += at + k < n ? p[at + k] : 0;
      if (codes > 256) return 0;
      L -= 17 + (long)codes;
      at += 17 + codes;
    }
  }
  return 1;
}

/* DL_OK when a PNG's image data inflates to no more than its header's
 * size needs (2 x the filtered rows + 4096 bytes, which covers
 * interlacing), or the data is not a PNG, or not one stb can read;
 * DL_ERR_FORMAT when it inflates to more, is corrupt, or an image-data
 * chunk declares more bytes than the file holds; DL_ERR_NOMEM. stb inflates all of it into a buffer that grows with
 * the output, whatever the header says: a 261 KB PNG declaring 1 x 1
 * pixels made 256 MB. Checked with stb's own inflater into a buffer of the
 * bound (stbi_zlib_decode_buffer fails past its end), so the memory is
 * bounded by the header's size; the price is inflating twice. */
DL_API dl_status dl__png_data_ok(dl_ctx *ctx, const unsigned char *p, size_t n) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  size_t at = 8, total = 0, rowbytes, bound;
  uint32_t w = 0, h = 0;
  int ch = 0, depth = 0, ok;
  unsigned char *idat, *out;
  if (n < 8 || memcmp(p, sig, 8) != 0) return DL_OK;
  while (at + 8 <= n) { /* the chunks: IHDR's size, the IDAT bytes the file holds */
    uint32_t len = ((uint32_t)p[at] << 24) | ((uint32_t)p[at + 1] << 16) | ((uint32_t)p[at + 2] << 8) | p[at + 3];
    const unsigned char *t = p + at + 4, *d = p + at + 8;
    size_t have = n - at - 8 < len ? n - at - 8 : len;
    if (!memcmp(t, "IHDR", 4) && have >= 13) {
      static const int chans[7] = {1, 0, 3, 1, 2, 0, 4};
      w = ((uint32_t)d[0] << 24) | ((uint32_t)d[1] << 16) | ((uint32_t)d[2] << 8) | d[3];
      h = ((uint32_t)d[4] << 24) | ((uint32_t)d[5] << 16) | ((uint32_t)d[6] << 8) | d[7];
      depth = d[8];
      ch = d[9] < 7 ? chans[d[9]] : 0;
    } else if (!memcmp(t, "IDAT", 4)) {
      /* stb grows its buffer to a chunk's declared length before it reads the data: a few bytes declaring
       * a 2 GB chunk made it allocate 2 GB. An image-data chunk must be there whole. */
      if (have < len) return DL_ERR_FORMAT;
      total += have;
    } else if (!memcmp(t, "IEND", 4)) {
      break;
    }
    if (len > n - at - 8 || n - at - 8 - len < 4) break; /* cut short: what is there was counted */
    at += 12 + (size_t)len;
  }
  if (!w || !h || !ch || depth < 1 || depth > 16 || total == 0 || total > (size_t)INT_MAX) return DL_OK;
  if ((uint64_t)w * h > (uint64_t)DL_IMAGE_MAX_PIXELS) return DL_OK; /* refused by the caller's pixel check */
  rowbytes = ((size_t)w * (size_t)ch * (size_t)depth + 7) / 8;
  bound = 2 * (size_t)h * (rowbytes + 1) + 4096;
  if (bound > (size_t)INT_MAX) return DL_OK; /* stb refuses such sizes itself */
  if ((uint64_t)total * 1032 <= bound) return DL_OK; /* cannot inflate past the bound */
  idat = (unsigned char *)dl_alloc(ctx, total);
  out = idat ? (unsigned char *)dl_alloc(ctx, bound) : NULL;
  if (!out) {
    dl_free(ctx, idat);
    return ctx ? ctx->status : DL_ERR_NOMEM;
  }
  for (at = 8, total = 0; at + 8 <= n;) {
    uint32_t len = ((uint32_t)p[at] << 24) | ((uint32_t)p[at + 1] << 16) | ((uint32_t)p[at + 2] << 8) | p[at + 3];
    size_t have = n - at - 8 < len ? n - at - 8 : len;
    if (!memcmp(p + at + 4, "IDAT", 4)) {
      memcpy(idat + total, p + at + 8, have);
      total += have;
    } else if (!memcmp(p + at + 4, "IEND", 4)) {
      break;
    }
    if (len > n - at - 8 || n - at - 8 - len < 4) break;
    at += 12 + (size_t)len;
  }
  ok = stbi_zlib_decode_buffer((char *)out, (int)bound, (const char *)idat, (int)total) >= 0;
  dl_free(ctx, out);
  dl_free(ctx, idat);
  return ok ? DL_OK : DL_ERR_FORMAT;
}

/* Decode the image file at path (PNG, JPEG, BMP, GIF, TGA, PNM: stb_image)
 * into 8-bit pixels, row-major, `channels` (1..4) per pixel, converted as
 * stb_image does; *w and *h get the size. Its header is read first: more
 * than DL_IMAGE_MAX_PIXELS pixels is refused (DL_ERR_UNSUPPORTED) before
 * anything is allocated. Returns the pixels (free them with
 * dl_image_free), or NULL with a message naming the file in ctx. */
DL_API unsigned char *dl_image_load_memory(dl_ctx *ctx, const void *data, size_t n, const char *name, int channels,
                                           int *w, int *h);
DL_API unsigned char *dl_image_load(dl_ctx *ctx, const char *path, int channels, int *w, int *h) {
  FILE *f;
  unsigned char *buf = NULL, *img;
  size_t n = 0, cap = 0;
  *w = *h = 0;
  if (channels < 1 || channels > 4) {
    dl_fail(ctx, DL_ERR_ARG, "dl_image_load: %s: channels %d (1 to 4)", path, channels);
    return NULL;
  }
  if (!(f = fopen(path, "rb"))) {
    dl_fail(ctx, DL_ERR_IO, "dl_image_load: %s: cannot open it: %s", path, strerror(errno));
    return NULL;
  }
  for (;;) { /* the whole file (an image file's size is bounded by DL_DATA_MAX_BYTES) */
    size_t got;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 65536;
      unsigned char *nb;
      /* stb reads at most INT_MAX bytes; an image file larger than that or DL_DATA_MAX_BYTES is refused */
      uint64_t most = (uint64_t)DL_DATA_MAX_BYTES < (uint64_t)INT_MAX ? (uint64_t)DL_DATA_MAX_BYTES : (uint64_t)INT_MAX;
      if ((uint64_t)nc > most + 1) nc = (size_t)most + 1;
      if (nc <= cap) {
        fclose(f);
        dl_free(ctx, buf);
        dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_image_load: %s: more than %llu bytes (DL_DATA_MAX_BYTES, or stb's int "
                "sizes): refused", path, (unsigned long long)most);
        return NULL;
      }
      if (!(nb = (unsigned char *)dl_alloc(ctx, nc))) {
        fclose(f);
        dl_free(ctx, buf);
        return NULL;
      }
      if (n) memcpy(nb, buf, n);
      dl_free(ctx, buf);
      buf = nb;
      cap = nc;
    }
    got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    fclose(f);
    dl_free(ctx, buf);
    dl_fail(ctx, DL_ERR_IO, "dl_image_load: %s: read error: %s", path, strerror(errno));
    return NULL;
  }
  fclose(f);
  img = dl_image_load_memory(ctx, buf, n, path, channels, w, h);
  dl_free(ctx, buf);
  return img;
}
/* dl_image_load from the bytes of an image file in memory (`name` for the
 * messages; NULL: "<memory>"): the same header check before decoding. */
DL_API unsigned char *dl_image_load_memory(dl_ctx *ctx, const void *data, size_t n, const char *name, int channels,
                                           int *w, int *h) {
  int comp, pnm, pnm16;
  size_t pnm_at;
  unsigned char *img;
  const char *nm = name ? name : "<memory>";
  *w = *h = 0;
  if (channels < 1 || channels > 4 || n > (size_t)INT_MAX) {
    dl_fail(ctx, DL_ERR_ARG, "dl_image_load: %s: channels %d (1 to 4), %zu bytes (at most %d)", nm, channels, n, INT_MAX);
    return NULL;
  }
  if (!dl__jpeg_tables_ok((const unsigned char *)data, n)) {
    dl_fail(ctx, DL_ERR_FORMAT, "dl_image_load: %s: cannot decode the image (a JPEG Huffman table of more than 256 "
            "codes: corrupt)", nm);
    return NULL;
  }
  pnm = dl__pnm_check((const unsigned char *)data, n, &pnm16, &pnm_at);
  if (pnm <= 0) {
    if (pnm == 0)
      dl_fail(ctx, DL_ERR_FORMAT, "dl_image_load: %s: cannot decode the image (a PNM header number past %d: corrupt)",
              nm, INT_MAX);
    else if (pnm == -2)
      dl_fail(ctx, DL_ERR_FORMAT, "dl_image_load: %s: cannot decode the image (a PNM maximum value past 65535)", nm);
    else
      dl_fail(ctx, DL_ERR_FORMAT, "dl_image_load: %s: cannot decode the image (a PNM whose pixel data is shorter "
              "than its header declares: truncated)", nm);
    return NULL;
  }
  {
    dl_status ps = dl__png_data_ok(ctx, (const unsigned char *)data, n);
    if (ps == DL_ERR_FORMAT)
      dl_fail(ctx, DL_ERR_FORMAT, "dl_image_load: %s: cannot decode the image (its PNG data is corrupt or inflates "
              "to more than its size needs)", nm);
    if (ps != DL_OK) return NULL;
  }
  if (!stbi_info_from_memory((const stbi_uc *)data, (int)n, w, h, &comp)) {
    const char *why = stbi_failure_reason();
    dl_fail(ctx, DL_ERR_FORMAT, "dl_image_load: %s: cannot decode the image (stb_image: %s)", nm, why ? why : "unknown");
    *w = *h = 0;
    return NULL;
  }
  if (*w <= 0 || *h <= 0 || (int64_t)*w * (int64_t)*h > (int64_t)DL_IMAGE_MAX_PIXELS) {
    dl_fail(ctx, DL_ERR_UNSUPPORTED, "dl_image_load: %s: declares %d x %d pixels, more than DL_IMAGE_MAX_PIXELS (%lld): "
            "refused before decoding (define DL_IMAGE_MAX_PIXELS higher for genuine large images)", nm, *w, *h,
            (long long)DL_IMAGE_MAX_PIXELS);
    *w = *h = 0;
    return NULL;
  }
  if (pnm16) { /* a 16-bit PNM: decoded here (see dl__pnm_check) */
    img = dl__image_channels((const unsigned char *)data + pnm_at, *w, *h, comp, 2, channels);
    if (!img) {
      dl_fail(ctx, DL_ERR_NOMEM, "dl_image_load: %s: out of memory decoding %d x %d pixels", nm, *w, *h);
      *w = *h = 0;
    }
    return img;
  }
  img = stbi_load_from_memory((const stbi_uc *)data, (int)n, w, h, &comp, channels);
  if (!img) {
    const char *why = stbi_failure_reason();
    dl_fail(ctx, DL_ERR_FORMAT, "dl_image_load: %s: cannot decode the image (stb_image: %s)", nm, why ? why : "unknown");
    *w = *h = 0;
  }
  return img;
}
/* Free what dl_image_load returned (NULL is fine). */
DL_API void dl_image_free(unsigned char *pixels) { stbi_image_free(pixels); }
#endif

/* dl_image_folder_desc:
 *   height, width  the size every image is resized to (required, > 0)
 *   channels       1 (grey), 3 (RGB) or 4 (RGBA); 0: 3. stb_image converts. */
typedef struct dl_image_folder_desc {
  int height, width; /* the size every image is resized to (required, > 0) */
  int channels; /* 1, 3 or 4; 0: 3 */
} dl_image_folder_desc;

typedef struct dl__names {
  char **v;
  int64_t n, cap;
} dl__names;

DL_API void dl__names_free(dl_ctx *ctx, dl__names *l) {
  int64_t i;
  for (i = 0; i < l->n; i++) dl_free(ctx, l->v[i]);
  dl_free(ctx, l->v);
  memset(l, 0, sizeof *l);
}
DL_API dl_status dl__names_push(dl_ctx *ctx, dl__names *l, const char *a, const char *b) {
  size_t na = strlen(a), nb = b ? strlen(b) : 0, tot;
  char *s;
  if (l->n == l->cap) {
    int64_t nc = l->cap ? 2 * l->cap : 16;
    char **nv = (char **)dl_alloc(ctx, (size_t)nc * sizeof(char *));
    if (!nv) return ctx ? ctx->status : DL_ERR_NOMEM;
    if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof(char *));
    dl_free(ctx, l->v);
    l->v = nv;
    l->cap = nc;
  }
  if (dl_size_add(na, nb + 2, &tot)) return dl_fail(ctx, DL_ERR_OVERFLOW, "path too long");
  s = (char *)dl_alloc(ctx, tot);
  if (!s) return ctx ? ctx->status : DL_ERR_NOMEM;
  memcpy(s, a, na);
  if (b) { s[na] = '/'; memcpy(s + na + 1, b, nb); s[na + 1 + nb] = 0; }
  else s[na] = 0;
  l->v[l->n++] = s;
  return DL_OK;
}
DL_API int dl__strcmp_p(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

DL_API int dl__image_ext(const char *name) {
  static const char *const ext[] = {"png", "jpg", "jpeg", "bmp", "gif", "tga", "pgm", "ppm", "pnm"};
  const char *dot = strrchr(name, '.');
  size_t i, k;
  if (!dot) return 0;
  dot++;
  for (i = 0; i < sizeof ext / sizeof *ext; i++) {
    const char *e = ext[i];
    for (k = 0; e[k] && dot[k]; k++) {
      char c = dot[k];
      if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
      if (c != e[k]) break;
    }
    if (!e[k] && !dot[k]) return 1;
  }
  return 0;
}

#ifdef DL__HAVE_DIRENT
/* The names in dir (not starting with '.') that are directories (want_dirs)
 * or regular image files, sorted bytewise. */
DL_API dl_status dl__list_dir(dl_ctx *ctx, const char *op, const char *dir, int want_dirs, dl__names *out) {
  DIR *d;
  struct dirent *e;
  dl_status st = DL_OK;
  dl__names paths = {0, 0, 0};
  memset(out, 0, sizeof *out);
  d = opendir(dir);
  if (!d) return dl_fail(ctx, DL_ERR_IO, "%s: cannot open folder %s: %s", op, dir, strerror(errno));
  while ((e = readdir(d)) != NULL) {
    struct stat sb;
    if (e->d_name[0] == '.') continue;
    if ((st = dl__names_push(ctx, &paths, dir, e->d_name)) != DL_OK) break;
    if (stat(paths.v[paths.n - 1], &sb) != 0 || (want_dirs ? !S_ISDIR(sb.st_mode) : (!S_ISREG(sb.st_mode) || !dl__image_ext(e->d_name)))) {
      dl_free(ctx, paths.v[--paths.n]);
      continue;
    }
    if ((st = dl__names_push(ctx, out, e->d_name, NULL)) != DL_OK) break;
  }
  closedir(d);
  dl__names_free(ctx, &paths);
  if (st != DL_OK) { dl__names_free(ctx, out); return st; }
  if (out->n) qsort(out->v, (size_t)out->n, sizeof(char *), dl__strcmp_p);
  return DL_OK;
}
#endif

/* Load an image folder: dir/CLASS/IMAGE, one sub-folder per class, classes
 * numbered in bytewise order of their names (class_names set), images in
 * each sorted by name; files other than png, jpg, jpeg, bmp, gif, tga, pgm,
 * ppm, pnm (any case) and names starting with '.' are skipped. x is u8 [N,
 * C, H, W] (each image resized with dl_image_resize), y i64 [N]. An image
 * that does not decode is an error naming it. Needs DL_USE_STB_IMAGE
 * (DL_ERR_UNSUPPORTED otherwise) and a POSIX directory API. */
DL_API dl_status dl_image_folder_load(dl_ctx *ctx, const char *dir, const dl_image_folder_desc *desc, dl_dataset *out) {
  const char *op = "dl_image_folder_load";
#if defined(DL_USE_STB_IMAGE) && defined(DL__HAVE_DIRENT)
  dl__names classes = {0, 0, 0}, files = {0, 0, 0};
  int64_t *cls = NULL, ncls_cap = 0, c, i, shape[4];
  int C, H, W;
  dl_tensor *x = NULL, *y = NULL;
  dl_status st = DL_OK;
  size_t names_bytes = 0;
  memset(out, 0, sizeof *out);
  if (!desc || desc->height <= 0 || desc->width <= 0 || desc->height > 65535 || desc->width > 65535)
    return dl_fail(ctx, DL_ERR_ARG, "%s: desc must give height and width in 1..65535", op);
  C = desc->channels ? desc->channels : 3;
  if (C != 1 && C != 3 && C != 4) return dl_fail(ctx, DL_ERR_ARG, "%s: channels %d (1, 3 or 4)", op, C);
  H = desc->height;
  W = desc->width;
  if ((st = dl__list_dir(ctx, op, dir, 1, &classes)) != DL_OK) return st;
  if (classes.n == 0) { st = dl_fail(ctx, DL_ERR_FORMAT, "%s: %s has no class sub-folders", op, dir); goto done; }
  for (c = 0; c < classes.n; c++) {
    dl__names in = {0, 0, 0};
    char *sub;
    dl__names tmp = {0, 0, 0};
    if ((st = dl__names_push(ctx, &tmp, dir, classes.v[c])) != DL_OK) { dl__names_free(ctx, &tmp); goto done; }
    sub = tmp.v[0];
    st = dl__list_dir(ctx, op, sub, 0, &in);
    for (i = 0; st == DL_OK && i < in.n; i++) {
      if ((st = dl__names_push(ctx, &files, sub, in.v[i])) != DL_OK) break;
      if (files.n > ncls_cap) {
        int64_t nc = ncls_cap ? 2 * ncls_cap : 64, *nv = (int64_t *)dl_alloc(ctx, (size_t)nc * sizeof(int64_t));
        if (!nv) { st = ctx ? ctx->status : DL_ERR_NOMEM; break; }
        if (files.n > 1) memcpy(nv, cls, (size_t)(files.n - 1) * sizeof(int64_t));
        dl_free(ctx, cls);
        cls = nv;
        ncls_cap = nc;
      }
      cls[files.n - 1] = c;
    }
    dl__names_free(ctx, &in);
    dl__names_free(ctx, &tmp);
    if (st != DL_OK) goto done;
  }
  if (files.n == 0) { st = dl_fail(ctx, DL_ERR_FORMAT, "%s: no images in the class folders of %s", op, dir); goto done; }
  shape[0] = files.n; shape[1] = C; shape[2] = H; shape[3] = W;
  x = dl_tensor_make(ctx, DL_U8, 4, shape);
  y = x ? dl_tensor_make(ctx, DL_I64, 1, shape) : NULL;
  if (!x || !y) { st = ctx ? ctx->status : DL_ERR_NOMEM; goto done; }
  for (i = 0; i < files.n; i++) {
    int w, h;
    unsigned char *img = dl_image_load(ctx, files.v[i], C, &w, &h);
    if (!img) {
      char msg[sizeof ctx->message];
      st = ctx ? ctx->status : DL_ERR_FORMAT;
      snprintf(msg, sizeof msg, "%s", dl_ctx_message(ctx));
      st = dl_fail(ctx, st, "%s: %s", op, msg);
      goto done;
    }
    dl_image_resize(img, h, w, C, dl_u8(x) + (size_t)i * (size_t)C * (size_t)H * (size_t)W, H, W);
    dl_image_free(img);
    dl_i64(y)[i] = cls[i];
  }
  /* class names in one block: pointers, then the strings */
  names_bytes = (size_t)classes.n * sizeof(char *);
  for (c = 0; c < classes.n; c++) names_bytes += strlen(classes.v[c]) + 1;
  {
    char **np = (char **)dl_alloc(ctx, names_bytes), *sp;
    if (!np) { st = ctx ? ctx->status : DL_ERR_NOMEM; goto done; }
    sp = (char *)(np + classes.n);
    for (c = 0; c < classes.n; c++) {
      size_t k = strlen(classes.v[c]) + 1;
      memcpy(sp, classes.v[c], k);
      np[c] = sp;
      sp += k;
    }
    st = dl_dataset_make(ctx, out, x, y, DL_DATASET_OWN);
    x = y = NULL;
    if (st != DL_OK) { dl_free(ctx, np); goto done; }
    out->names_block = np;
    out->class_names = (const char *const *)np;
    out->num_classes = classes.n;
  }
done:
  dl_tensor_free(x);
  dl_tensor_free(y);
  dl_free(ctx, cls);
  dl__names_free(ctx, &classes);
  dl__names_free(ctx, &files);
  return st;
#else
  (void)dir; (void)desc;
  memset(out, 0, sizeof *out);
#ifndef DL_USE_STB_IMAGE
  return dl_fail(ctx, DL_ERR_UNSUPPORTED,
                 "%s: built without DL_USE_STB_IMAGE: define it (and install Debian's libstb-dev) to decode images", op);
#else
  return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: no directory listing on this platform", op);
#endif
#endif
}

/* >>text ----------------------------------------------------------------------------------- */

/* A file's bytes (plain, or gzip with DL_USE_ZLIB) as tokens [L]: dtype
 * DL_U8, or DL_I64 (values 0..255). An empty file gives [0]. */
DL_API dl_status dl_text_load(dl_ctx *ctx, const char *path, dl_dtype dtype, dl_tensor **out) {
  dl__reader r;
  unsigned char *buf;
  size_t len, i;
  int64_t shape[1];
  dl_status st;
  *out = NULL;
  if (dtype != DL_U8 && dtype != DL_I64)
    return dl_fail(ctx, DL_ERR_DTYPE, "dl_text_load: tokens are u8 or i64, not %s", dl_dtype_name(dtype));
  st = dl__reader_open_file(&r, ctx, "dl_text_load", path);
  if (st != DL_OK) return st;
  st = dl__reader_all(&r, (size_t)PTRDIFF_MAX / 8, &buf, &len);
  dl__reader_close(&r);
  if (st != DL_OK) return st;
  shape[0] = (int64_t)len;
  *out = dl_tensor_make(ctx, dtype, 1, shape);
  if (!*out) { dl_free(ctx, buf); return ctx ? ctx->status : DL_ERR_NOMEM; }
  if (dtype == DL_U8) { if (len) memcpy((*out)->data, buf, len); }
  else for (i = 0; i < len; i++) dl_i64(*out)[i] = buf[i];
  dl_free(ctx, buf);
  return DL_OK;
}

/* A character language model's dataset over tokens [L] (u8 or i64 >= 0,
 * contiguous): sample k is the window starting at k * stride, input
 * tokens[k*stride .. k*stride + window) and target the next token of each,
 * tokens[k*stride + 1 .. k*stride + window + 1). There are (L - window - 1)
 * / stride + 1 samples (every window needs window + 1 tokens). stride 0:
 * window (non-overlapping). The batcher gives x and y as i64 [B, window].
 * num_classes: 256 for u8, else 1 + the largest token. own: as
 * dl_dataset_make (DL_DATASET_OWN_X hands the tokens over, even on failure). */
DL_API dl_status dl_text_windows(dl_ctx *ctx, dl_dataset *ds, dl_tensor *tokens, int64_t window, int64_t stride,
                                 unsigned own) {
  const char *op = "dl_text_windows";
  dl_status st = DL_OK;
  int64_t classes = 256;
  memset(ds, 0, sizeof *ds);
  if (stride == 0) stride = window;
  if (!tokens || tokens->ndim != 1 || !dl_tensor_is_contiguous(tokens) || (tokens->dtype != DL_U8 && tokens->dtype != DL_I64))
    st = dl_fail(ctx, DL_ERR_ARG, "%s: tokens %s must be contiguous u8 or i64 [L]", op, tokens ? DL_SHAPESTR(tokens) : "NULL");
  else if (window < 1 || stride < 1)
    st = dl_fail(ctx, DL_ERR_ARG, "%s: window %lld, stride %lld (both >= 1)", op, (long long)window, (long long)stride);
  else if (tokens->numel < window + 1)
    st = dl_fail(ctx, DL_ERR_ARG, "%s: %lld tokens, a window of %lld needs %lld (input and the next token)", op,
                 (long long)tokens->numel, (long long)window, (long long)window + 1);
  else if (tokens->dtype == DL_I64)
    st = dl__labels_check(ctx, op, tokens, &classes);
  if (st != DL_OK) {
    if (own & DL_DATASET_OWN_X) dl_tensor_free(tokens);
    return st;
  }
  ds->x = tokens;
  ds->n = (tokens->numel - window - 1) / stride + 1;
  ds->window = window;
  ds->stride = stride;
  ds->num_classes = classes;
  ds->own = own & DL_DATASET_OWN_X;
  ds->ctx = ctx;
  return DL_OK;
}

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_DATA_H */
