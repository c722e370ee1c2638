#!/usr/bin/env bash
# bench/run_mlp.sh - forward+backward of a 784-256-128-10 MLP at batch 64,
# f32, 2 threads: dl.h's tape (OpenBLAS GEMM at -O2; the built-in GEMM at
# plain -O2, where it is SSE2 only, and at -O3 -march=native) against
# PyTorch eager (Debian's /usr/bin/python3 with python3-torch) in the same
# run, alternating the two three times; prints medians and the ratio
# torch_ms / dl_ms (goal >= 2).  Env: REPS (7), STEPS (50), THREADS (2).
set -u
cd "$(dirname "$0")/.."
B=build/bench
mkdir -p "$B"
CC=${CC:-gcc}
REPS=${REPS:-7}; STEPS=${STEPS:-50}; THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
WARN="-std=c11 -Wall -Wextra -Wpedantic -Werror"
$CC $WARN -O2 -fopenmp -DDL_USE_OPENBLAS -Iinclude -Ibench bench/bench_mlp.c -o $B/bench_mlp_openblas -lopenblas -lm || exit 1
$CC $WARN -O2 -fopenmp -Iinclude -Ibench bench/bench_mlp.c -o $B/bench_mlp_builtin -lm || exit 1
$CC $WARN -O3 -march=native -fopenmp -Iinclude -Ibench -DDL_BENCH_GEMM_NAME='"builtin-native"' bench/bench_mlp.c -o $B/bench_mlp_builtin_native -lm || exit 1
source bench/torch_env.sh; torch_env_init /usr/bin/python3
for round in 1 2 3; do
  $B/bench_mlp_openblas "$REPS" "$STEPS" "$THREADS"
  $B/bench_mlp_builtin "$REPS" "$STEPS" "$THREADS"
  $B/bench_mlp_builtin_native "$REPS" "$STEPS" "$THREADS"
  env "${TORCH_ENV[@]}" /usr/bin/python3 bench/torch_mlp.py "$REPS" "$STEPS" "$THREADS"
done | tee $B/mlp.txt
awk '
  /^dl_mlp_ms/ { split($1, a, "="); split($4, gg, "="); v[gg[2]] = v[gg[2]] " " a[2] }
  /^torch_mlp_ms/ { split($1, a, "="); t = t " " a[2] }
  function med(s,   n, x, i, j, tmp) { n = split(s, x, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { tmp = x[i]; x[i] = x[j]; x[j] = tmp }
    return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
  END {
    if (t == "") { print "SKIP ratio: no PyTorch"; exit }
    tm = med(t)
    for (k in v) printf "MLP 784-256-128-10 b64 fwd+bwd f32: dl.h (%s GEMM) %.3f ms, torch %.3f ms, ratio torch/dl = %.2f (goal >= 2)\n", k, med(v[k]), tm, tm / med(v[k])
  }' $B/mlp.txt
