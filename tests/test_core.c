/* dl-test-cxx */
/* tests/test_core.c - status codes, context, allocation hooks, arenas, RNG,
 * denormal control. */
#include "dl/core.h"
#include "harness.h"

static int n_alloc, n_free;
static void *count_alloc(size_t n, void *user) { (void)user; n_alloc++; return malloc(n); }
static void count_free(void *p, void *user) { (void)user; n_free++; free(p); }
static void *fail_alloc(size_t n, void *user) { (void)n; (void)user; return NULL; }

static void test_status(void) {
  CHECK(strcmp(dl_status_str(DL_OK), "ok") == 0);
  CHECK(strcmp(dl_status_str(DL_ERR_NOMEM), "out of memory") == 0);
  CHECK(strcmp(dl_status_str((dl_status)999), "unknown status") == 0);
  CHECK(dl_dtype_size(DL_F64) == 8 && dl_dtype_size(DL_BF16) == 2 && dl_dtype_size((dl_dtype)77) == 0);
  CHECK(strcmp(dl_dtype_name(DL_I64), "i64") == 0);
}

static void test_ctx_messages(void) {
  dl_ctx ctx;
  dl_ctx_init(&ctx, NULL);
  CHECK(ctx.status == DL_OK && dl_ctx_message(&ctx)[0] == 0);
  CHECK(dl_fail(&ctx, DL_ERR_IO, "cannot open %s", "x.bin") == DL_ERR_IO);
  CHECK(ctx.status == DL_ERR_IO && strcmp(dl_ctx_message(&ctx), "cannot open x.bin") == 0);
  dl_ctx_clear(&ctx);
  CHECK(ctx.status == DL_OK && dl_ctx_message(&ctx)[0] == 0);
  CHECK(dl_fail(NULL, DL_ERR_FORMAT, "ignored") == DL_ERR_FORMAT); /* NULL ctx keeps nothing */
  CHECK(dl_ctx_parallel_threshold(NULL) == DL_PARALLEL_THRESHOLD);
  CHECK(dl_ctx_threads(NULL) >= 1);
}

static void test_size_checks(void) {
  size_t out = 7;
  CHECK(dl_size_mul((size_t)1 << 40, (size_t)1 << 40, &out) == 1 && out == 7);
  CHECK(dl_size_mul(3, 5, &out) == 0 && out == 15);
  CHECK(dl_size_add(SIZE_MAX, 1, &out) == 1);
}

static void test_runtime_hooks(void) {
  dl_ctx ctx;
  dl_ctx_desc d = {0};
  void *p;
  d.allocator.alloc = count_alloc;
  d.allocator.free = count_free;
  dl_ctx_init(&ctx, &d);
  n_alloc = n_free = 0;
  p = dl_alloc(&ctx, 100);
  CHECK(p != NULL && ((uintptr_t)p % DL_ALIGN) == 0);
  dl_free(&ctx, p);
  CHECK(n_alloc == 1 && n_free == 1);
  d.allocator.alloc = fail_alloc;
  dl_ctx_init(&ctx, &d);
  CHECK(dl_alloc(&ctx, 100) == NULL);
  CHECK(ctx.status == DL_ERR_NOMEM && strstr(ctx.message, "100") != NULL);
  CHECK(dl_alloc(&ctx, SIZE_MAX - 8) == NULL && ctx.status == DL_ERR_OVERFLOW);
}

static void test_arena_buffer_no_malloc(void) {
  static unsigned char buf[4096];
  dl_ctx ctx;
  dl_ctx_desc d = {0};
  dl_arena a;
  unsigned char *p, *q;
  dl_arena_mark m;
  d.allocator.alloc = count_alloc;
  d.allocator.free = count_free;
  dl_ctx_init(&ctx, &d);
  n_alloc = 0;
  dl_arena_init_buffer(&a, &ctx, buf + 3, sizeof buf - 3); /* misaligned on purpose */
  p = (unsigned char *)dl_arena_alloc(&a, 10);
  CHECK(p != NULL && (uintptr_t)p % DL_ALIGN == 0 && p >= buf && p < buf + sizeof buf);
  m = dl_arena_get_mark(&a);
  q = (unsigned char *)dl_arena_alloc(&a, 100);
  CHECK(q != NULL && q >= p + 10 && (uintptr_t)q % DL_ALIGN == 0);
  CHECK(dl_arena_used(&a) == 64 + 128);
  dl_arena_rewind(&a, m);
  CHECK(dl_arena_used(&a) == 64);
  CHECK(dl_arena_alloc(&a, 100) == q); /* rewound space is reused */
  CHECK(dl_arena_high_water(&a) == 192);
  /* too big: fails with a message, records what would have been needed */
  CHECK(dl_arena_alloc(&a, 10000) == NULL);
  CHECK(ctx.status == DL_ERR_NOMEM && strstr(ctx.message, "arena full") != NULL);
  CHECK(dl_arena_bytes_needed(&a) == 192 + 10048);
  CHECK(dl_arena_used(&a) == 192); /* failed request left the arena as it was */
  CHECK(n_alloc == 0);              /* a caller's buffer never calls the allocator */
  dl_arena_free(&a);
  CHECK(n_alloc == 0);
}

static void test_arena_grow_then_steady(void) {
  dl_ctx ctx;
  dl_ctx_desc d = {0};
  dl_arena a;
  int step, k;
  uint64_t allocs_after_first = 0;
  d.allocator.alloc = count_alloc;
  d.allocator.free = count_free;
  dl_ctx_init(&ctx, &d);
  n_alloc = n_free = 0;
  CHECK(dl_arena_init(&a, &ctx, 1024, 1) == DL_OK);
  for (step = 0; step < 5; step++) {
    /* a "training step": 40 allocations of 1000 bytes, written to */
    for (k = 0; k < 40; k++) {
      unsigned char *p = (unsigned char *)dl_arena_alloc(&a, 1000);
      CHECK(p != NULL);
      if (p) memset(p, k, 1000);
    }
    dl_arena_reset(&a);
    if (step == 0) allocs_after_first = a.allocs;
  }
  CHECK(allocs_after_first >= 2);     /* it grew, then consolidated */
  CHECK(a.allocs == allocs_after_first); /* steady state: no allocator calls */
  CHECK(a.cap >= 40 * 1024 && a.over == NULL);
  CHECK(dl_arena_high_water(&a) == 40 * 1024);
  dl_arena_free(&a);
  CHECK(n_alloc == n_free);
  /* fixed (non-growing) heap arena fails cleanly */
  CHECK(dl_arena_init(&a, &ctx, 256, 0) == DL_OK);
  CHECK(dl_arena_alloc(&a, 300) == NULL && ctx.status == DL_ERR_NOMEM);
  dl_arena_free(&a);
}

static void test_arena_rewind_inside_overflow(void) {
  dl_arena a;
  void *p1, *p2, *p3;
  dl_arena_mark m;
  CHECK(dl_arena_init(&a, NULL, 128, 1) == DL_OK);
  p1 = dl_arena_alloc(&a, 100);          /* main block */
  p2 = dl_arena_alloc(&a, 100);          /* overflow block */
  m = dl_arena_get_mark(&a);
  p3 = dl_arena_alloc(&a, 100);          /* same overflow block */
  CHECK(p1 && p2 && p3 && p3 == (char *)p2 + 128);
  dl_arena_rewind(&a, m);
  CHECK(dl_arena_alloc(&a, 100) == p3);  /* reused after a rewind inside the block */
  dl_arena_free(&a);
}

static void test_rng(void) {
  dl_rng a = dl_rng_make(123), b = dl_rng_make(123), c = dl_rng_make(124);
  int i, same = 1, differ = 0, hist[10] = {0};
  double sum = 0, sum2 = 0, usum = 0;
  for (i = 0; i < 1000; i++) {
    uint64_t x = dl_rng_u64(&a), y = dl_rng_u64(&b), z = dl_rng_u64(&c);
    same &= x == y;
    differ += x != z;
  }
  CHECK(same && differ == 1000);
  CHECK(a.counter == 1000);
  CHECK(dl_rng_at(&b, 5) == dl_rng_at(&a, 5)); /* random access by index */
  a = dl_rng_make(7);
  for (i = 0; i < 200000; i++) {
    double n = dl_rng_normal(&a), u = dl_rng_uniform(&a);
    float uf = dl_rng_uniform_f32(&a);
    sum += n;
    sum2 += n * n;
    usum += u;
    CHECK_MSG(u >= 0 && u < 1 && uf >= 0.0f && uf < 1.0f, "uniform out of range");
    hist[dl_rng_below(&a, 10)]++;
  }
  CHECK_NEAR(sum / 200000, 0.0, 0.01);
  CHECK_NEAR(sum2 / 200000, 1.0, 0.015);
  CHECK_NEAR(usum / 200000, 0.5, 0.003);
  for (i = 0; i < 10; i++) CHECK_NEAR(hist[i] / 200000.0, 0.1, 0.004);
  /* below() with a bound near 2^64 stays in range */
  for (i = 0; i < 1000; i++) CHECK(dl_rng_below(&a, UINT64_MAX - 5) < UINT64_MAX - 5);
  CHECK(dl_rng_below(&a, 1) == 0);
}

static void test_ftz(void) {
  volatile float tiny = 1e-39f, half = 0.5f; /* 1e-39 is subnormal in f32 */
  volatile float r;
  dl_fpmode m;
#if defined(__SSE__) || defined(__x86_64__) || defined(__aarch64__)
  m = dl_ftz_enter(1);
  r = tiny * half;
  CHECK(r == 0.0f);
  dl_ftz_leave(m);
  r = tiny * half;
  CHECK(r != 0.0f);
#else
  (void)m; (void)r; (void)tiny; (void)half;
  SKIP("no flush-to-zero control on this target");
#endif
}

#ifdef _OPENMP
/* One team loop of two members judged by the guard, its times faked: the
 * second member began `late` seconds after the loop, the calling thread
 * waited `wait` seconds for it at the end, the loop took `wall`. Returns
 * whether the guard let the team run it. */
static int team_loop(dl_ctx *ctx, double late, double wait, double wall) {
  dl__team tm;
  double now;
  dl__team_begin(&tm, ctx, 1);
  if (!tm.par) return 0;
  now = omp_get_wtime();
  tm.t0 = now - wall;
  tm.nt = 2;
  tm.enter[0] = tm.t0;
  tm.enter[1] = tm.t0 + late;
  tm.leave[0] = now - wait;
  tm.leave[1] = now;
  dl__team_end(&tm, ctx);
  return 1;
}
/* A span of team loops judged by the guard: 20 ms (faked: its start moved
 * back) in which the process used cpu seconds of CPU time and the calling
 * thread tcpu (< 0: its clock left as the span found it). */
static void span_judged(dl_ctx *ctx, double cpu, double tcpu) {
  int k;
  ctx->team.until = 0;
  team_loop(ctx, 20e-6, 0, 0.001); /* starts a span, or goes on with one */
  ctx->team.span0 -= 0.020;
  ctx->team.cpu0 = (long)clock() - (long)(cpu * CLOCKS_PER_SEC);
  if (tcpu >= 0) ctx->team.tcpu0 = dl__thread_cpu() - tcpu;
  for (k = 0; k < 4; k++) team_loop(ctx, 20e-6, 0, 0.0001);
}
#endif

/* The team guard: a team loop whose member started late (a stall: 2 ms),
 * or a span of team loops in which the process got less than 0.8 of the CPU
 * time its threads would use, or its calling thread less than 0.7 of the
 * span's wall time, makes the ctx's loops run alone for 200 ms,
 * doubling on the next one (at most 2 s); a clean span halves it, and
 * forgets it from 0.2 s; the
 * ctx's first team loop is not judged, nor stalls in the 0.1 s after it;
 * a span starts again after a gap of over 10 ms between team
 * loops; an unbalanced loop on an idle machine is no stall; small or
 * nested loops never start a team; a real 2-thread region runs every index
 * once. */
static void test_team_guard(void) {
#ifdef _OPENMP
  dl_ctx ctx;
  dl__team tm;
  int k, ok = 1;
  dl_ctx_init(&ctx, NULL);
  /* the first team loop starts the threads: a late member is not a stall */
  CHECK(team_loop(&ctx, 0.010, 0, 0.011) && ctx.team.until == 0.0 && ctx.team.started == 1);
  /* nor are the loops of the next 0.1 s (members still settling; the start
   * moved to now, so a slow machine cannot end the warm-up in between) */
  ctx.team.t_start = omp_get_wtime();
  CHECK(team_loop(&ctx, 0.008, 0, 0.009) && team_loop(&ctx, 0.004, 0, 0.005) && ctx.team.until == 0.0);
  ctx.team.t_start -= 0.2; /* (faked: the warm-up is over) */
  /* idle: members start within 20 us, 0.2 ms of imbalance in 1 ms loops
   * (no span is judged: each loop starts a new one; spans below) */
  for (k = 0; k < 100; k++) {
    ctx.team.span0 = 0;
    ok &= team_loop(&ctx, 20e-6, 0.0002, 0.001);
  }
  CHECK(ok && ctx.team.until == 0.0 && ctx.team.window == 0.0);
  /* unbalanced loops (the caller waited 3 ms of 4 for the other member), a
   * member 1.5 ms late: no stall */
  CHECK(team_loop(&ctx, 20e-6, 0.003, 0.004) && team_loop(&ctx, 0.0015, 0, 0.002));
  CHECK(ctx.team.until == 0.0);
  /* a member 6 ms late: back off 200 ms */
  CHECK(team_loop(&ctx, 0.006, 0, 0.0065));
  CHECK(ctx.team.window == 0.2 && ctx.team.until > omp_get_wtime());
  dl__team_begin(&tm, &ctx, 1);
  CHECK(tm.par == 0);                             /* so the next loop runs alone */
  CHECK(!dl_parallel_allowed(&ctx));
  /* after the back-off, the next stall (3 ms late) doubles it */
  ctx.team.until = 0;
  CHECK(team_loop(&ctx, 0.003, 0, 0.004));
  CHECK(ctx.team.window == 0.4);
  for (k = 0; k < 8; k++) {                       /* stalls one after another: at most 2 s */
    ctx.team.until = 0;
    team_loop(&ctx, 0.01, 0, 0.011);
  }
  CHECK(ctx.team.window == 2.0);
  /* the CPU share: a span of 20 ms in which the process used no CPU time
   * backs off... */
  ctx.team.window = 0;
  span_judged(&ctx, 0, -1);
  CHECK(ctx.team.window == 0.2 && ctx.team.until > omp_get_wtime());
  /* ...one in which it used 50 ms of CPU time in 20 ms (the caller all of
   * it) is clean: it halves a back-off of 2 s, and forgets one of 0.2 s */
  ctx.team.window = 2.0;
  span_judged(&ctx, 0.050, 0.020);
  CHECK(ctx.team.window == 1.0 && ctx.team.until == 0.0);
  ctx.team.window = 0.2;
  span_judged(&ctx, 0.050, 0.020);
  CHECK(ctx.team.window == 0.0 && ctx.team.until == 0.0);
  /* the caller's own share, where the system has a per-thread CPU clock: a
   * span in which the process had 50 ms of CPU time (its spinning members)
   * but the calling thread none backs off, also in the warm-up (where
   * stalls are not judged) */
  if (dl__thread_cpu() >= 0) {
    span_judged(&ctx, 0.050, 0);
    CHECK(ctx.team.window == 0.2 && ctx.team.until > omp_get_wtime());
    span_judged(&ctx, 0.050, 0.020);
    CHECK(ctx.team.window == 0.0 && ctx.team.until == 0.0);
    ctx.team.t_start = omp_get_wtime();
    span_judged(&ctx, 0.050, 0);
    CHECK(ctx.team.window == 0.2 && ctx.team.until > omp_get_wtime());
    ctx.team.until = 0;
    ctx.team.window = 0;
    ctx.team.t_start -= 0.2;
  } else {
    printf("note: no per-thread CPU clock here; the caller's share is not judged\n");
  }
  /* a gap of over 10 ms before a team loop (the caller slept, or read a
   * file) starts the span again: the same 20 ms without CPU time does not
   * back off when it holds such a gap */
  team_loop(&ctx, 20e-6, 0, 0.001);
  ctx.team.span0 -= 0.020;
  ctx.team.cpu0 = (long)clock();
  ctx.team.last -= 0.015;
  for (k = 0; k < 4; k++) team_loop(&ctx, 20e-6, 0, 0.0001);
  CHECK(ctx.team.window == 0.0 && ctx.team.until == 0.0 && omp_get_wtime() - ctx.team.span0 < 0.010);
  /* small work, or inside a team: never a team */
  dl_ctx_init(&ctx, NULL);
  dl__team_begin(&tm, &ctx, 0);
  CHECK(tm.par == 0);
  {
    int inner = 1;
    DL__OMP("omp parallel num_threads(2)")
    {
      dl__team t2;
      dl__team_begin(&t2, &ctx, 1);
      DL__OMP("omp atomic")
      inner &= t2.par == 0;
    }
    CHECK(inner);
  }
  /* a real region on a 2-thread ctx: every index once, alone or not */
  {
    dl_ctx c2;
    dl_ctx_desc d;
    int hits[64], r;
    memset(&d, 0, sizeof d);
    d.threads = 2;
    d.parallel_threshold = 1;
    dl_ctx_init(&c2, &d);
    ok = 1;
    for (r = 0; r < 30; r++) {
      memset(hits, 0, sizeof hits);
      DL_PARALLEL_FOR(&c2, 64, 64, i, { hits[i]++; });
      for (k = 0; k < 64; k++) ok &= hits[k] == 1;
    }
    CHECK(ok);
  }
#else
  SKIP("built without OpenMP: no team to guard");
#endif
}

/* DL_PARALLEL_FOR's fixed shares: on a team of nt, member t runs the
 * indices [n t / nt, n (t + 1) / nt), in order, so that two loops over the
 * same batch (64 images, then their 64 * 3 planes) give each image's data
 * to the same member; alone (one thread, or the guard backed off) the
 * caller runs them all, in order. */
static int shares_ok(const int *who, const int *order, int n, int nt) {
  int k, t, ok = 1;
  for (k = 0; k < n; k++) {
    int want = 0;
    for (t = 0; t < nt; t++)
      if (k >= n * t / nt && k < n * (t + 1) / nt) want = t;
    ok &= who[k] == want;
    if (k > 0 && who[k] == who[k - 1]) ok &= order[k] == order[k - 1] + 1; /* one member's indices in order */
  }
  return ok;
}
static void test_parallel_shares(void) {
#ifdef _OPENMP
  dl_ctx c2;
  dl_ctx_desc d;
  int img[64], imgo[64], pl[192], plo[192], r, k, teams = 0, ok = 1;
  memset(&d, 0, sizeof d);
  d.threads = 2;
  d.parallel_threshold = 1;
  dl_ctx_init(&c2, &d);
  for (r = 0; r < 20; r++) {
    int seen[2] = {0, 0}, nt1 = 1, nt2 = 1;
    DL_PARALLEL_FOR(&c2, 64, 64, i, {
      const int w = dl_worker();
      img[i] = w;
      imgo[i] = w >= 0 && w < 2 ? seen[w]++ : -1; /* the member's count so far */
    });
    seen[0] = seen[1] = 0;
    DL_PARALLEL_FOR(&c2, 192, 192, i, {
      const int w = dl_worker();
      pl[i] = w;
      plo[i] = w >= 0 && w < 2 ? seen[w]++ : -1;
    });
    for (k = 0; k < 64; k++) nt1 = img[k] + 1 > nt1 ? img[k] + 1 : nt1;
    for (k = 0; k < 192; k++) nt2 = pl[k] + 1 > nt2 ? pl[k] + 1 : nt2;
    ok &= shares_ok(img, imgo, 64, nt1) && shares_ok(pl, plo, 192, nt2);
    if (nt1 == 2 && nt2 == 2) {
      teams++;
      for (k = 0; k < 192; k++) ok &= pl[k] == img[k / 3]; /* an image's planes on its member */
    }
  }
  CHECK_MSG(ok, "a member ran indices outside its share, or out of order");
  if (!teams) printf("note: every loop ran alone (the team guard backed off): the shares were not seen\n");
#else
  SKIP("built without OpenMP: no team");
#endif
}

int main(void) {
  RUN(test_status);
  RUN(test_ctx_messages);
  RUN(test_size_checks);
  RUN(test_runtime_hooks);
  RUN(test_arena_buffer_no_malloc);
  RUN(test_arena_grow_then_steady);
  RUN(test_arena_rewind_inside_overflow);
  RUN(test_rng);
  RUN(test_ftz);
  RUN(test_team_guard);
  RUN(test_parallel_shares);
  return harness_finish();
}
