/* dl/device.h - the device layer: a GPU handle and its caching allocator.
 *
 * Below the tensors and everything that uses them: tensor.h includes this
 * file, so ops, tapes, layers and optimizers reach the device through what
 * is defined here and in tensor.h's device section, never through a
 * declaration that a later header fills in. dl/gpu.h, at the top, adds what
 * needs models (dl_model_to_device); device tapes are in tape.h.
 *
 *   dl_gpu *gpu;
 *   if (dl_gpu_open(&gpu, &ctx, 0) != DL_OK) { puts(dl_ctx_message(&ctx)); ... }  // no GPU: a status
 *
 * Without DL_USE_CUDA nothing here calls CUDA: dl_gpu_open returns
 * DL_ERR_NO_DEVICE ("built without DL_USE_CUDA"), no tensor is ever on a
 * device, and the device-independent caching allocator below stays usable
 * with a backend of the caller's (tests/test_gpu_alloc.c gives it a fake
 * device with a byte budget).
 *
 * Memory: device memory comes from a caching allocator per device: freed
 * blocks are kept by size class (512 B steps below 1 MiB, eight steps per
 * power of two above) and reused for a request of the same class; when the
 * device is full the cache is released and the request tried once more;
 * a request that still fails is DL_ERR_NOMEM with the figures (requested,
 * in use, cached, the device's free and total) in the ctx message, never an
 * abort. dl_gpu_stats reports bytes in use, cached and their peaks.
 */
#ifndef DL_DEVICE_H
#define DL_DEVICE_H

#include "core.h"
#include "gpu/abi.h" /* plain C: the status codes a backend returns; with DL_USE_CUDA, src_gpu/'s interface */
DL__HEADER_BEGIN

#ifndef DL__SCALAR_ONLY

/* >>caching allocator --------------------------------------------------------
 * Device-independent: it calls a backend for raw memory (cudaMalloc under
 * dl_gpu_open; a test's fake device elsewhere), so it is tested without a GPU. */

/* Where the caching allocator gets raw device memory: malloc / free (and
 * optionally mem_info, message) with a user pointer; cudaMalloc under
 * dl_gpu_open. */
typedef struct dl_gpu_backend {
  int (*malloc)(void *user, void **p, size_t bytes); /* DLG_OK, DLG_OOM or DLG_ERR */
  void (*free)(void *user, void *p); /* free(user, p) */
  int (*mem_info)(void *user, size_t *free_bytes, size_t *total_bytes); /* may be NULL */
  const char *(*message)(void *user);                                    /* may be NULL */
  void *user; /* passed to the four */
} dl_gpu_backend;

/* The caching allocator's statistics (dl_gpu_get_stats): bytes in use,
 * cached and reserved, with peaks, and counts of calls, cache hits, backend
 * calls and out-of-memory retries. */
typedef struct dl_gpu_stats {
  size_t in_use, peak_in_use;     /* bytes handed out (rounded to the class) */
  size_t cached;                  /* bytes held in free blocks for reuse */
  size_t reserved, peak_reserved; /* in_use + cached: what the device gave */
  uint64_t allocs, frees;         /* calls */
  uint64_t cache_hits;            /* allocs served from a cached block */
  uint64_t device_mallocs, device_frees; /* backend calls */
  uint64_t oom_releases;          /* times a failed request released the cache and retried */
} dl_gpu_stats;

typedef struct dl__gpu_block {
  void *p;
  size_t size;  /* the class size */
  int used;     /* handed out (else cached) */
  int next;     /* next cached block of its class, or -1 */
} dl__gpu_block;

/* The caching allocator: blocks rounded to size classes and kept for reuse,
 * so a training loop's steady state calls the backend zero times.
 * dl_gpu_cache_init, then alloc / free through the dl_gpu. */
typedef struct dl_gpu_cache {
  dl_ctx *ctx; /* allocator of the cache's own tables, error reports */
  dl_gpu_backend be; /* where device memory comes from (a copy) */
  dl__gpu_block *blocks; /* every block the backend gave, live or cached; p == NULL: a free record */
  int nblocks, capblocks; /* blocks in use and capacity */
  int *ptab;             /* open addressing: pointer -> block index (-1 empty, -2 deleted) */
  int pcap; /* ptab's capacity */
  size_t *ckey;          /* open addressing: class size -> first cached block (chead) */
  int *chead; /* the first cached block of each class (with ckey) */
  int ccap; /* ckey's and chead's capacity */
  dl_gpu_stats st; /* the statistics (dl_gpu_get_stats) */
} dl_gpu_cache;

/* The class a request of `bytes` is rounded up to. */
DL_API size_t dl_gpu_round(size_t bytes) {
  size_t step;
  int e = 0;
  if (bytes == 0) bytes = 1;
  if (bytes < ((size_t)1 << 20)) return (bytes + 511) & ~(size_t)511;
  while (((size_t)1 << (e + 1)) <= bytes) e++;
  step = (size_t)1 << (e - 3); /* eight classes between 2^e and 2^(e+1) */
  return (bytes + step - 1) / step * step;
}

DL_API size_t dl__gpu_hash(size_t x) {
  x ^= x >> 33;
  x *= (size_t)0xff51afd7ed558ccdULL;
  x ^= x >> 29;
  return x;
}
/* Slot of pointer p in ptab (its block's, or the empty slot it would take). */
DL_API int dl__gpu_pslot(const dl_gpu_cache *c, const void *p, int for_insert) {
  int i = (int)(dl__gpu_hash((size_t)p) & (size_t)(c->pcap - 1)), tomb = -1, k;
  for (k = 0; k < c->pcap; k++, i = (i + 1) & (c->pcap - 1)) {
    int b = c->ptab[i];
    if (b == -1) return for_insert && tomb >= 0 ? tomb : i;
    if (b == -2) { if (tomb < 0) tomb = i; continue; }
    if (c->blocks[b].p == p) return i;
  }
  return tomb;
}
DL_API int dl__gpu_cslot(const dl_gpu_cache *c, size_t size) {
  int i = (int)(dl__gpu_hash(size) & (size_t)(c->ccap - 1)), k;
  for (k = 0; k < c->ccap; k++, i = (i + 1) & (c->ccap - 1))
    if (c->ckey[i] == size || c->ckey[i] == 0) return i;
  return -1;
}
/* Grow the tables so that one more block and one more class fit. */
DL_API int dl__gpu_cache_grow(dl_gpu_cache *c) {
  int i;
  if (c->nblocks + 1 > c->capblocks) {
    int cap = c->capblocks ? c->capblocks * 2 : 64;
    dl__gpu_block *nb = (dl__gpu_block *)dl_alloc(c->ctx, sizeof *nb * (size_t)cap);
    if (!nb) return 0;
    if (c->nblocks) memcpy(nb, c->blocks, sizeof *nb * (size_t)c->nblocks);
    dl_free(c->ctx, c->blocks);
    c->blocks = nb;
    c->capblocks = cap;
  }
  if ((c->nblocks + 1) * 2 > c->pcap) { /* rehash pointers at load 1/2 */
    int cap = c->pcap ? c->pcap * 2 : 128, *nt = (int *)dl_alloc(c->ctx, sizeof(int) * (size_t)cap), *old = c->ptab;
    if (!nt) return 0;
    for (i = 0; i < cap; i++) nt[i] = -1;
    c->ptab = nt;
    c->pcap = cap;
    for (i = 0; i < c->nblocks; i++)
      if (c->blocks[i].p) c->ptab[dl__gpu_pslot(c, c->blocks[i].p, 1)] = i;
    dl_free(c->ctx, old);
  }
  {
    int used = 0;
    for (i = 0; i < c->ccap; i++) used += c->ckey[i] != 0;
    if ((used + 1) * 2 > c->ccap) {
      int cap = c->ccap ? c->ccap * 2 : 64, oldcap = c->ccap, *oh = c->chead;
      size_t *ok = c->ckey, *nk = (size_t *)dl_alloc(c->ctx, sizeof(size_t) * (size_t)cap);
      int *nh = (int *)dl_alloc(c->ctx, sizeof(int) * (size_t)cap);
      if (!nk || !nh) { dl_free(c->ctx, nk); dl_free(c->ctx, nh); return 0; }
      memset(nk, 0, sizeof(size_t) * (size_t)cap);
      for (i = 0; i < cap; i++) nh[i] = -1;
      c->ckey = nk;
      c->chead = nh;
      c->ccap = cap;
      for (i = 0; i < oldcap; i++)
        if (ok[i]) {
          int s = dl__gpu_cslot(c, ok[i]);
          c->ckey[s] = ok[i];
          c->chead[s] = oh[i];
        }
      dl_free(c->ctx, ok);
      dl_free(c->ctx, oh);
    }
  }
  return 1;
}

/* Start an empty cache over backend be (copied); allocation failures are
 * reported in ctx. */
DL_API void dl_gpu_cache_init(dl_gpu_cache *c, dl_ctx *ctx, const dl_gpu_backend *be) {
  memset(c, 0, sizeof *c);
  c->ctx = ctx;
  c->be = *be;
}

/* Gives every cached block back to the backend (blocks in use stay). */
DL_API void dl_gpu_cache_release(dl_gpu_cache *c) {
  int i;
  for (i = 0; i < c->ccap; i++) c->chead[i] = -1;
  for (i = 0; i < c->nblocks; i++) {
    dl__gpu_block *b = &c->blocks[i];
    if (!b->p || b->used) continue;
    c->ptab[dl__gpu_pslot(c, b->p, 0)] = -2;
    c->be.free(c->be.user, b->p);
    c->st.device_frees++;
    c->st.cached -= b->size;
    c->st.reserved -= b->size;
    b->p = NULL;
  }
}

/* size bytes of device memory: a cached block of the class, else a new one
 * from the backend; when the backend is full, the cache is released and the
 * request tried once more. DL_ERR_NOMEM with the figures in ctx otherwise. */
DL_API dl_status dl_gpu_cache_alloc(dl_gpu_cache *c, void **out, size_t bytes, const char *device) {
  size_t size = dl_gpu_round(bytes);
  int s, bi, rc, i;
  void *p = NULL;
  *out = NULL;
  if (bytes > ((size_t)1 << 62))
    return dl_fail(c->ctx, DL_ERR_OVERFLOW, "%s: a request of %zu bytes is past any device", device, bytes);
  if (!dl__gpu_cache_grow(c)) return dl_fail(c->ctx, DL_ERR_NOMEM, "%s: host out of memory for the allocator's tables", device);
  c->st.allocs++;
  s = dl__gpu_cslot(c, size);
  if (s >= 0 && c->ckey[s] == size && c->chead[s] >= 0) { /* reuse */
    bi = c->chead[s];
    c->chead[s] = c->blocks[bi].next;
    c->blocks[bi].used = 1;
    c->blocks[bi].next = -1;
    c->st.cached -= size;
    c->st.in_use += size;
    c->st.cache_hits++;
    if (c->st.in_use > c->st.peak_in_use) c->st.peak_in_use = c->st.in_use;
    *out = c->blocks[bi].p;
    return DL_OK;
  }
  rc = c->be.malloc(c->be.user, &p, size);
  if (rc == DLG_OOM && c->st.cached) {
    c->st.oom_releases++;
    dl_gpu_cache_release(c);
    rc = c->be.malloc(c->be.user, &p, size);
  }
  if (rc != DLG_OK || !p) {
    size_t fr = 0, tot = 0;
    if (c->be.mem_info) c->be.mem_info(c->be.user, &fr, &tot);
    if (rc == DLG_OOM || rc == DLG_OK)
      return dl_fail(c->ctx, DL_ERR_NOMEM,
                     "%s: out of memory allocating %zu bytes (%.1f MiB): %.1f MiB in use by dl.h, %.1f MiB "
                     "cached, peak %.1f MiB; the device has %.1f MiB free of %.1f MiB",
                     device, bytes, bytes / 1048576.0, c->st.in_use / 1048576.0, c->st.cached / 1048576.0,
                     c->st.peak_in_use / 1048576.0, fr / 1048576.0, tot / 1048576.0);
    return dl_fail(c->ctx, DL_ERR_NO_DEVICE, "%s: allocating %zu bytes failed: %s", device, bytes,
                   c->be.message ? c->be.message(c->be.user) : "device error");
  }
  c->st.device_mallocs++;
  for (bi = 0; bi < c->nblocks && c->blocks[bi].p; bi++) {}
  if (bi == c->nblocks) c->nblocks++;
  c->blocks[bi].p = p;
  c->blocks[bi].size = size;
  c->blocks[bi].used = 1;
  c->blocks[bi].next = -1;
  c->ptab[dl__gpu_pslot(c, p, 1)] = bi;
  if (s < 0 || c->ckey[s] != size) { /* register the class (for when the block comes back) */
    s = dl__gpu_cslot(c, size);
    c->ckey[s] = size;
    c->chead[s] = -1;
  }
  c->st.in_use += size;
  c->st.reserved += size;
  if (c->st.in_use > c->st.peak_in_use) c->st.peak_in_use = c->st.in_use;
  if (c->st.reserved > c->st.peak_reserved) c->st.peak_reserved = c->st.reserved;
  (void)i;
  *out = p;
  return DL_OK;
}

/* Returns p (from dl_gpu_cache_alloc) to the cache; NULL is a no-op. A pointer
 * the cache never gave panics. */
DL_API void dl_gpu_cache_free(dl_gpu_cache *c, void *p) {
  int slot, bi, s;
  if (!p) return;
  slot = c->pcap ? dl__gpu_pslot(c, p, 0) : -1;
  bi = slot >= 0 ? c->ptab[slot] : -1;
  if (bi < 0 || !c->blocks[bi].used)
    DL_PANIC(c->ctx, "dl_gpu_free", "%p was not allocated by this device's allocator (or was freed twice)", p);
  c->blocks[bi].used = 0;
  s = dl__gpu_cslot(c, c->blocks[bi].size);
  c->blocks[bi].next = c->chead[s];
  c->chead[s] = bi;
  c->st.frees++;
  c->st.in_use -= c->blocks[bi].size;
  c->st.cached += c->blocks[bi].size;
}

/* Releases everything (blocks still in use too) and the tables. */
DL_API void dl_gpu_cache_destroy(dl_gpu_cache *c) {
  int i;
  for (i = 0; i < c->nblocks; i++)
    if (c->blocks[i].p) c->be.free(c->be.user, c->blocks[i].p);
  dl_free(c->ctx, c->blocks);
  dl_free(c->ctx, c->ptab);
  dl_free(c->ctx, c->ckey);
  dl_free(c->ctx, c->chead);
  memset(c, 0, sizeof *c);
}

/* >>the device --------------------------------------------------------------- */

/* An open GPU (dl_gpu_open): the ctx, the device number and name, the
 * backend's handle (stream, cuBLAS, cuDNN) and the caching allocator. Close
 * with dl_gpu_close. */
typedef struct dl_gpu {
  dl_ctx *ctx; /* the context it was opened on */
  int device; /* the device number */
  char name[160]; /* the device's name (dl_gpu_name) */
#ifdef DL_USE_CUDA
  dlg_handle *h;
#endif
  dl_gpu_cache cache; /* the caching allocator of its memory */
} dl_gpu;

#ifdef DL_USE_CUDA
DL_API int dl__gpu_be_malloc(void *u, void **p, size_t n) { return dlg_malloc((dlg_handle *)u, p, n); }
DL_API void dl__gpu_be_free(void *u, void *p) { (void)dlg_free((dlg_handle *)u, p); }
DL_API int dl__gpu_be_info(void *u, size_t *f, size_t *t) { return dlg_mem_info((dlg_handle *)u, f, t); }
DL_API const char *dl__gpu_be_msg(void *u) { return dlg_message((const dlg_handle *)u); }
#endif

/* Number of CUDA devices this process sees (0 without a driver, a device or
 * DL_USE_CUDA). DL_OK, or DL_ERR_NO_DEVICE with the reason in ctx. */
DL_API dl_status dl_gpu_count(dl_ctx *ctx, int *n) {
#ifdef DL_USE_CUDA
  char msg[256];
  *n = 0;
  if (dlg_device_count(n, msg, sizeof msg) != DLG_OK) return dl_fail(ctx, DL_ERR_NO_DEVICE, "%s", msg);
  return DL_OK;
#else
  *n = 0;
  return dl_fail(ctx, DL_ERR_NO_DEVICE, "no GPU: dl.h was built without DL_USE_CUDA");
#endif
}

/* Opens device `device` on ctx (ctx->gpu = it): stream, cuBLAS, cuDNN, the
 * caching allocator. One device per ctx. DL_OK; DL_ERR_NO_DEVICE (no driver,
 * no such device, built without DL_USE_CUDA) or DL_ERR_NOMEM, with the
 * reason in ctx. Close with dl_gpu_close once nothing on it is in use. */
DL_API dl_status dl_gpu_open(dl_gpu **out, dl_ctx *ctx, int device) {
#ifdef DL_USE_CUDA
  char msg[256];
  dl_gpu *g;
  dlg_handle *h;
  dl_gpu_backend be;
  *out = NULL;
  if (ctx->gpu) return dl_fail(ctx, DL_ERR_ARG, "dl_gpu_open: this ctx already has a device open");
  (void)dlg_ew_linked(); /* a strong reference: links src_gpu/core.cu's launchers (see gpu/abi.h) */
  if (dlg_create(&h, device, msg, sizeof msg) != DLG_OK) return dl_fail(ctx, DL_ERR_NO_DEVICE, "%s", msg);
  g = (dl_gpu *)dl_alloc(ctx, sizeof *g);
  if (!g) { dlg_destroy(h); return DL_ERR_NOMEM; }
  memset(g, 0, sizeof *g);
  g->ctx = ctx;
  g->device = device;
  g->h = h;
  if (dlg_device_name(h, g->name, sizeof g->name) != DLG_OK) snprintf(g->name, sizeof g->name, "cuda:%d", device);
  be.malloc = dl__gpu_be_malloc;
  be.free = dl__gpu_be_free;
  be.mem_info = dl__gpu_be_info;
  be.message = dl__gpu_be_msg;
  be.user = h;
  dl_gpu_cache_init(&g->cache, ctx, &be);
  ctx->gpu = g;
  *out = g;
  return DL_OK;
#else
  (void)device;
  *out = NULL;
  return dl_fail(ctx, DL_ERR_NO_DEVICE, "no GPU: dl.h was built without DL_USE_CUDA (see dl/gpu.h)");
#endif
}

/* Waits for the device's queued work. DL_OK or DL_ERR_NO_DEVICE with the
 * message of an asynchronous failure. */
DL_API dl_status dl_gpu_sync(dl_gpu *g) {
#ifdef DL_USE_CUDA
  if (dlg_sync(g->h) != DLG_OK) return dl_fail(g->ctx, DL_ERR_NO_DEVICE, "%s", dlg_message(g->h));
#else
  (void)g;
#endif
  return DL_OK;
}

/* Frees the device's memory (cached and in use: close it last) and handles. */
DL_API void dl_gpu_close(dl_gpu *g) {
  if (!g) return;
  (void)dl_gpu_sync(g);
  dl_gpu_cache_destroy(&g->cache);
#ifdef DL_USE_CUDA
  dlg_destroy(g->h);
#endif
  if (g->ctx->gpu == g) g->ctx->gpu = NULL;
  dl_free(g->ctx, g);
}

/* The device's name ("none" for NULL). */
DL_API const char *dl_gpu_name(const dl_gpu *g) { return g ? g->name : "none"; }
/* The caching allocator's statistics. */
DL_API dl_gpu_stats dl_gpu_get_stats(const dl_gpu *g) { return g->cache.st; }
/* What the device was asked since dl_gpu_open (gpu/abi.h's dlg_counts:
 * kernel launches, GEMM calls, host waits, cudaMalloc / cudaFree, copies,
 * fills, cuDNN algorithm queries and descriptors made). The difference of
 * two readings around a training step is its cost; in the steady state it
 * asks for no algorithm and no descriptor and allocates nothing. Zeros
 * without DL_USE_CUDA. */
typedef dlg_counts dl_gpu_counts;
/* Those counts for g now (see dl_gpu_counts). */
DL_API dl_gpu_counts dl_gpu_get_counts(const dl_gpu *g) {
  dl_gpu_counts c;
  memset(&c, 0, sizeof c);
#ifdef DL_USE_CUDA
  if (g) dlg_counters(g->h, &c);
#else
  (void)g;
#endif
  return c;
}
/* acc += now - since, field by field: the work between two readings of
 * dl_gpu_get_counts added up (e.g. over the training steps of an epoch,
 * leaving out its evaluation). */
DL_API void dl_gpu_counts_add(dl_gpu_counts *acc, dl_gpu_counts since, dl_gpu_counts now) {
  int64_t a[sizeof(dl_gpu_counts) / sizeof(int64_t)], b[sizeof a / sizeof a[0]], c[sizeof a / sizeof a[0]];
  size_t i;
  typedef char dl__counts_are_int64[sizeof(dl_gpu_counts) % sizeof(int64_t) == 0 ? 1 : -1];
  (void)sizeof(dl__counts_are_int64);
  memcpy(a, acc, sizeof a);
  memcpy(b, &since, sizeof b);
  memcpy(c, &now, sizeof c);
  for (i = 0; i < sizeof a / sizeof a[0]; i++) a[i] += c[i] - b[i];
  memcpy(acc, a, sizeof a);
}
/* Convolution algorithms on this device: 0 (after dl_gpu_open): the
 * fastest that cuDNN times for each shape, once (results may differ in the
 * last bits between runs: some add with atomics); 1: deterministic ones,
 * so that a rerun gives the same bits (what --deterministic sets). The
 * CPU is always deterministic. */
DL_API void dl_gpu_set_deterministic(dl_gpu *g, int on) {
#ifdef DL_USE_CUDA
  if (g) dlg_set_deterministic(g->h, on);
#else
  (void)g;
  (void)on;
#endif
}
/* CUDA graphs for a training step that repeats. Between dl_gpu_graph_begin
 * and dl_gpu_graph_end the work the library asks of g is recorded instead
 * of issued, then compared with the previous step's: the same work (the
 * same kernels, argument values and tensors, whatever bytes the host sends)
 * is replayed as one CUDA graph launch, captured once; new or changed work
 * (a new shape, a new parameter) is captured again; the optimizers'
 * scalars and dropout's seed travel as bytes while recording, so a learning
 * rate schedule replays the same graph. A call that needs the device at once (dl_item, a copy to
 * the host, the progress line's event, a user's kernel) cuts the step into
 * segments, each replayed the same way. Results are bit-identical to the
 * step without graphs; the host code of the step runs as before (tape,
 * checks, the optimizer's state), only the device work is batched.
 *   dl_gpu_graph_begin(gpu); forward; loss; dl_train_step_nowait(...);
 *   dl_gpu_graph_end(gpu); dl_tape_rewind(&tp);
 * Errors of recorded work come back from dl_gpu_graph_end (DL_ERR_NO_DEVICE
 * with the op's message). g NULL (a run on the CPU): nothing, DL_OK. */
DL_API dl_status dl_gpu_graph_begin(dl_gpu *g) {
#ifdef DL_USE_CUDA
  if (g && dlg_graph_begin(g->h) != DLG_OK) return dl_fail(g->ctx, DL_ERR_NO_DEVICE, "%s", dlg_message(g->h));
#else
  (void)g;
#endif
  return DL_OK;
}
/* The end of a recorded step (see dl_gpu_graph_begin): its last segment is
 * replayed or captured and launched. DL_OK or DL_ERR_NO_DEVICE. */
DL_API dl_status dl_gpu_graph_end(dl_gpu *g) {
#ifdef DL_USE_CUDA
  if (g && dlg_graph_end(g->h) != DLG_OK) return dl_fail(g->ctx, DL_ERR_NO_DEVICE, "%s", dlg_message(g->h));
#else
  (void)g;
#endif
  return DL_OK;
}
/* Gives the cached (free) blocks back to the device, e.g. for another
 * process; blocks in use stay. */
DL_API void dl_gpu_release_cache(dl_gpu *g) {
  (void)dl_gpu_sync(g); /* queued kernels may still use a block freed to the cache */
  dl_gpu_cache_release(&g->cache);
}

/* bytes of device memory through the cache. DL_OK or DL_ERR_NOMEM (figures in ctx). */
DL_API dl_status dl_gpu_alloc(dl_gpu *g, void **p, size_t bytes) {
  return dl_gpu_cache_alloc(&g->cache, p, bytes, g->name);
}
/* Back to the cache. Kernels already queued on the stream may still use it:
 * that is safe because the next user of the block queues after them. */
DL_API void dl_gpu_free(dl_gpu *g, void *p) { dl_gpu_cache_free(&g->cache, p); }

#ifdef DL_USE_CUDA
/* the handle and memory release that tensor.h and the ops use */
DL_API dlg_handle *dl__gpu_handle(struct dl_gpu *g) { return g ? g->h : NULL; }
DL_API void dl__gpu_release(struct dl_gpu *g, void *p) {
  if (g) dl_gpu_free(g, p);
}
#endif

#endif /* !DL__SCALAR_ONLY */
DL__HEADER_END
#endif /* DL_DEVICE_H */
