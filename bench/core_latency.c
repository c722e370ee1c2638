/* bench/core_latency.c - how far apart two cores are: one cache line passed
 * back and forth between a thread on each (cores 0 and 1 where the system
 * lets a thread be pinned, else wherever the scheduler puts two busy
 * threads), the median round trip of ROUNDS runs of N trips each.
 *
 *   core_latency roundtrip_ns=68.4
 *
 * On the 2-core VM the benchmarks ran on, the round trip was 55-90 ns most
 * of the time and 330-360 ns for stretches of minutes (the host had put the
 * two virtual CPUs far apart), and the multi-threaded training runs were
 * slower in those stretches: bench/run_train.sh prints this figure beside
 * each run. Build: cc -O2 -pthread bench/core_latency.c -o core_latency */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* pthread_setaffinity_np */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sched.h>
#endif

enum { N = 20000, ROUNDS = 5 };

static _Alignas(64) atomic_int ball; /* 1: the partner's turn, 0: ours */
static _Alignas(64) atomic_int stop;

static void pin(int cpu) {
#ifdef __linux__
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  (void)pthread_setaffinity_np(pthread_self(), sizeof s, &s); /* best effort */
#else
  (void)cpu;
#endif
}

static void *partner(void *arg) {
  (void)arg;
  pin(1);
  for (;;) {
    while (atomic_load_explicit(&ball, memory_order_acquire) != 1)
      if (atomic_load_explicit(&stop, memory_order_relaxed)) return NULL;
    atomic_store_explicit(&ball, 0, memory_order_release);
  }
}

static double now(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(void) {
  pthread_t th;
  double ns[ROUNDS];
  int r, i;
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) { /* the two threads would take turns on one CPU */
    printf("core_latency roundtrip_ns=-1 (one CPU)\n");
    return 0;
  }
  pin(0);
  if (pthread_create(&th, NULL, partner, NULL) != 0) {
    fprintf(stderr, "core_latency: cannot start a thread\n");
    return 1;
  }
  for (r = 0; r < ROUNDS; r++) {
    const double t0 = now();
    for (i = 0; i < N; i++) {
      atomic_store_explicit(&ball, 1, memory_order_release);
      while (atomic_load_explicit(&ball, memory_order_acquire) != 0) {
      }
    }
    ns[r] = (now() - t0) * 1e9 / N;
  }
  atomic_store_explicit(&stop, 1, memory_order_relaxed);
  pthread_join(th, NULL);
  qsort(ns, ROUNDS, sizeof ns[0], cmp);
  printf("core_latency roundtrip_ns=%.1f\n", ns[ROUNDS / 2]);
  return 0;
}
