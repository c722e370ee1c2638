#!/usr/bin/env bash
# bench/run_step.sh - one training step (forward, backward, clip, Adam) of
# the 784-256-128-10 MLP at batch 64, f32, 2 threads: dl.h's layers.h +
# optim.h (OpenBLAS GEMM, -O2) against PyTorch eager (Debian's
# /usr/bin/python3 with python3-torch) in the same run, alternating the two
# three times; prints medians, the ratio torch_ms / dl_ms (goal >= 2) and
# dl.h's heap allocations per step (goal 0); then the Adam update alone
# against a plain C loop of its formula, f32 and f64, in cache and at the
# MLP's size (bench_adam.c, 1 thread, -O2 -march=native).  Env: REPS (7),
# STEPS (50), THREADS (2).
set -u
cd "$(dirname "$0")/.."
B=build/bench
mkdir -p "$B"
CC=${CC:-gcc}
REPS=${REPS:-7}; STEPS=${STEPS:-50}; THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
WARN="-std=c11 -Wall -Wextra -Wpedantic -Werror"
$CC $WARN -O2 -fopenmp -DDL_USE_OPENBLAS -Iinclude -Ibench bench/bench_step.c -o $B/bench_step -lopenblas -lm || exit 1
source bench/torch_env.sh; torch_env_init /usr/bin/python3
for round in 1 2 3; do
  $B/bench_step "$REPS" "$STEPS" "$THREADS"
  env "${TORCH_ENV[@]}" /usr/bin/python3 bench/torch_step.py "$REPS" "$STEPS" "$THREADS"
done | tee $B/step.txt
awk '
  /^dl_step_ms/ { split($1, a, "="); d = d " " a[2]; split($5, al, "="); allocs = al[2] }
  /^torch_step_ms/ { split($1, a, "="); t = t " " a[2] }
  function med(s,   n, x, i, j, tmp) { n = split(s, x, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { tmp = x[i]; x[i] = x[j]; x[j] = tmp }
    return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
  END {
    if (t == "") { printf "MLP training step: dl.h %.3f ms (SKIP ratio: no PyTorch), allocations per step %s\n", med(d), allocs; exit }
    printf "MLP 784-256-128-10 b64 training step (fwd, bwd, clip, Adam) f32: dl.h %.3f ms, torch %.3f ms, ratio torch/dl = %.2f (goal >= 2); dl.h allocations per step %s (goal 0)\n", med(d), med(t), med(t) / med(d), allocs
  }' $B/step.txt
echo "== Adam update alone, 1 thread (bench_adam.c): ns per element, dl_adam_update vs a plain C loop, same bits =="
$CC $WARN -O2 -march=native -fopenmp -Iinclude -Ibench bench/bench_adam.c -o $B/bench_adam -lm && $B/bench_adam
