/* bench/bench_util.h - timing helpers shared by the bench/ programs.
 *
 * Header-only, libc/POSIX only. Every helper is `static inline`, so a program
 * that uses only some of them still builds warning-free under
 * -std=c11 -Wall -Wextra -Wpedantic -Werror. Define _POSIX_C_SOURCE
 * (199309L or later) before the first #include of the program, as the
 * feature-test macro must precede every system header.
 */
#ifndef DL_BENCH_UTIL_H
#define DL_BENCH_UTIL_H

#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 199309L
#error "bench_util.h: define _POSIX_C_SOURCE >= 199309L before the first #include"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Wall-clock time in seconds from CLOCK_MONOTONIC (differences only). */
static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleeps ms milliseconds (lets idle OpenMP / OpenBLAS threads stop spinning). */
static inline void bench_pause_ms(int ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (long)(ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

/* qsort comparator: ascending order of doubles. */
static inline int bench_cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Median of the n samples in v (sorts v in place; mean of the middle two if n is even). */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* CPU time the rest of the machine used (in cores) since the last call:
 * /proc/stat busy time minus this process's own CPU time, over wall time.
 * Other sessions share these machines; a figure taken while this is well
 * above 0 is not a clean one. Returns -1 on the first call or where
 * /proc/stat is unreadable. */
static inline double bench_other_load(void) {
  static double busy0, own0, wall0;
  static int have;
  unsigned long long v[8] = {0};
  double busy, own, wall, load = -1;
  struct timespec ts;
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
             &v[5], &v[6], &v[7]) != 8) {
    fclose(f);
    return -1;
  }
  fclose(f);
  busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  own = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  wall = bench_now();
  if (have && wall > wall0) {
    load = ((busy - busy0) - (own - own0)) / (wall - wall0);
    if (load < 0) load = 0; /* /proc/stat ticks are coarser than our own clock */
  }
  busy0 = busy;
  own0 = own;
  wall0 = wall;
  have = 1;
  return load;
}

#endif /* DL_BENCH_UTIL_H */
