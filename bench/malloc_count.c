/* bench/malloc_count.c - an LD_PRELOAD shim that counts heap allocations.
 *
 * Counts every call of malloc, calloc, realloc, posix_memalign,
 * aligned_alloc, memalign and valloc (from any thread) made by the program
 * and the libraries it loads, and at exit writes one line
 *   malloc_count: total=N malloc=N calloc=N realloc=N aligned=N program=N libs=N
 * to the file named by $DL_MALLOC_COUNT_OUT (appended), or to stderr when
 * that is unset. program: the calls made directly from the executable's own
 * code (for a dl.h program: dl.h and the example, compiled in); libs: the
 * rest (libc's stdio, libgomp's thread teams, OpenBLAS, the loader), after
 * this shim's constructor has run (earlier ones count in total only). The
 * allocations themselves go to the next definitions (glibc's), unchanged.
 *
 *   cc -std=c11 -O2 -fPIC -shared bench/malloc_count.c -o malloc_count.so -ldl
 *   LD_PRELOAD=./malloc_count.so DL_MALLOC_COUNT_OUT=count.txt ./program ...
 *
 * dlsym may itself allocate (calloc) before the real functions are known:
 * those few early requests are served from a static arena and never freed
 * to glibc (free of such a pointer is not intercepted, so it must not
 * reach glibc: we wrap free only to drop them).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);

static atomic_long n_malloc, n_calloc, n_realloc, n_aligned, n_program, n_libs;

/* the executable segments of the main program, found by the constructor */
#define MAX_SEGS 8
static uintptr_t seg_lo[MAX_SEGS], seg_hi[MAX_SEGS];
static int nsegs, attributing;

static int find_main(struct dl_phdr_info *info, size_t size, void *data) {
  int i;
  (void)size;
  (void)data;
  for (i = 0; i < info->dlpi_phnum && nsegs < MAX_SEGS; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      seg_lo[nsegs] = info->dlpi_addr + ph->p_vaddr;
      seg_hi[nsegs] = seg_lo[nsegs] + ph->p_memsz;
      nsegs++;
    }
  }
  return 1; /* the first object listed is the main program: stop there */
}

__attribute__((constructor)) static void find_program(void) {
  dl_iterate_phdr(find_main, NULL);
  attributing = 1;
}

/* Count one allocation made from `caller` as the program's or the libraries'. */
static void attribute(const void *caller) {
  uintptr_t a = (uintptr_t)caller;
  int i;
  if (!attributing) return;
  for (i = 0; i < nsegs; i++)
    if (a >= seg_lo[i] && a < seg_hi[i]) {
      atomic_fetch_add_explicit(&n_program, 1, memory_order_relaxed);
      return;
    }
  atomic_fetch_add_explicit(&n_libs, 1, memory_order_relaxed);
}
#define ATTRIBUTE() attribute(__builtin_return_address(0))
static atomic_int resolving;

/* the early arena for dlsym's own requests */
static _Alignas(64) unsigned char early[16384];
static size_t early_used;

static int is_early(const void *p) {
  return (const unsigned char *)p >= early && (const unsigned char *)p < early + sizeof early;
}

static void *early_alloc(size_t n) {
  size_t at = (early_used + 63) & ~(size_t)63;
  if (at + n > sizeof early) return NULL;
  early_used = at + n;
  return early + at;
}

/* dlsym's object pointer into a function pointer (POSIX: same representation) */
static void sym(void *fn, const char *name) {
  void *p = dlsym(RTLD_NEXT, name);
  memcpy(fn, &p, sizeof p);
}

static void resolve(void) {
  if (real_malloc) return;
  atomic_store(&resolving, 1);
  sym(&real_calloc, "calloc");
  sym(&real_realloc, "realloc");
  sym(&real_free, "free");
  sym(&real_posix_memalign, "posix_memalign");
  sym(&real_aligned_alloc, "aligned_alloc");
  sym(&real_memalign, "memalign");
  sym(&real_valloc, "valloc");
  sym(&real_malloc, "malloc"); /* last: the others are ready once this is set */
  atomic_store(&resolving, 0);
}

void *malloc(size_t n) {
  if (!real_malloc) {
    if (atomic_load(&resolving)) return early_alloc(n);
    resolve();
  }
  atomic_fetch_add_explicit(&n_malloc, 1, memory_order_relaxed);
  ATTRIBUTE();
  return real_malloc(n);
}

void *calloc(size_t k, size_t n) {
  if (!real_calloc) {
    if (atomic_load(&resolving)) {
      void *p = n && k > (size_t)-1 / n ? NULL : early_alloc(k * n);
      if (p) memset(p, 0, k * n);
      return p;
    }
    resolve();
  }
  atomic_fetch_add_explicit(&n_calloc, 1, memory_order_relaxed);
  ATTRIBUTE();
  return real_calloc(k, n);
}

void *realloc(void *p, size_t n) {
  if (!real_realloc) resolve();
  atomic_fetch_add_explicit(&n_realloc, 1, memory_order_relaxed);
  ATTRIBUTE();
  if (is_early(p)) { /* move an early block to the real heap (its size is unknown: copy what fits) */
    void *q = real_malloc(n);
    size_t have = (size_t)(early + sizeof early - (unsigned char *)p);
    if (q) memcpy(q, p, n < have ? n : have);
    return q;
  }
  return real_realloc(p, n);
}

void free(void *p) {
  if (!p || is_early(p)) return;
  if (!real_free) resolve();
  real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n) {
  if (!real_posix_memalign) resolve();
  atomic_fetch_add_explicit(&n_aligned, 1, memory_order_relaxed);
  ATTRIBUTE();
  return real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n) {
  if (!real_aligned_alloc) resolve();
  atomic_fetch_add_explicit(&n_aligned, 1, memory_order_relaxed);
  ATTRIBUTE();
  return real_aligned_alloc(align, n);
}

void *memalign(size_t align, size_t n) {
  if (!real_memalign) resolve();
  atomic_fetch_add_explicit(&n_aligned, 1, memory_order_relaxed);
  ATTRIBUTE();
  return real_memalign(align, n);
}

void *valloc(size_t n) {
  if (!real_valloc) resolve();
  atomic_fetch_add_explicit(&n_aligned, 1, memory_order_relaxed);
  ATTRIBUTE();
  return real_valloc(n);
}

/* At exit: one line, written with write(2) so that reporting allocates nothing. */
__attribute__((destructor)) static void report(void) {
  char line[256];
  const char *path = getenv("DL_MALLOC_COUNT_OUT");
  long m = atomic_load(&n_malloc), c = atomic_load(&n_calloc), r = atomic_load(&n_realloc),
       a = atomic_load(&n_aligned), pr = atomic_load(&n_program), li = atomic_load(&n_libs);
  int len = snprintf(line, sizeof line,
                     "malloc_count: total=%ld malloc=%ld calloc=%ld realloc=%ld aligned=%ld program=%ld libs=%ld\n",
                     m + c + r + a, m, c, r, a, pr, li);
  int fd = 2, own = 0;
  if (len <= 0) return;
  if (path && *path) {
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) fd = 2;
    else own = 1;
  }
  if (write(fd, line, (size_t)len) < 0) { /* nothing to do about it */
  }
  if (own) close(fd);
}
