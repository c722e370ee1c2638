#!/usr/bin/env bash
# bench/run_fused.sh - fused-loop benchmarks, in one run, with their references.
#
#   1. bench_fused (-O3 -march=native, -O2 -march=native, plain -O2):
#      DL_ASSIGN(y, tanh(a*b + c))
#      over 2^24 floats vs a STREAM triad and a plain tanhf loop, 2 threads.
#   2. torch_fused.py (Debian's /usr/bin/python3 + python3-torch): the same
#      expression as separate eager ops and with out= buffers, 2 threads;
#      then dl.h fused / each PyTorch variant (goal: >= 4x vs separate ops).
#   3. bench_threads: DL_ASSIGN with 1 and 2 threads at 2^22, 2^16 and 1024
#      elements, on an idle machine and beside a busy-loop process, under
#      libgomp's default wait policy, OMP_WAIT_POLICY=passive and
#      GOMP_SPINCOUNT=1000 (requirement: with 2 threads and one core busy
#      elsewhere, throughput stays at least at the 1-thread figure); then the
#      denormal (FTZ) check.
# Every figure is a median of several runs. Takes about 2-3 minutes.
#
# Environment: CC (gcc), DL_INCLUDE (the headers to measure: include; point it
# at a patched copy to measure a change), REPS (bench_fused reps, 7), QUIET_WAIT (seconds to
# wait, at most, for other processes to go quiet before each phase: 10).
# Other sessions share these machines: each figure comes with
# other_load_cores, the CPU the rest of the machine used meanwhile; with the
# busy-loop process running it includes that process (about 0.7-1.0).
#
# When include/dl/vmath.h is missing, the script builds against a libm
# stand-in written under build/bench/shim (and says so), plus, for scale, a
# bench-only vectorisable rational tanh (build/bench/vshim).
set -u
cd "$(dirname "$0")/.."
B=build/bench
mkdir -p "$B"
CC=${CC:-gcc}
REPS=${REPS:-7}
QUIET_WAIT=${QUIET_WAIT:-10}
PY=/usr/bin/python3
source bench/torch_env.sh; torch_env_init "$PY"
WARN="-std=c11 -Wall -Wextra -Wpedantic -Werror"
export OMP_NUM_THREADS=2
unset OMP_WAIT_POLICY GOMP_SPINCOUNT OMP_DYNAMIC OMP_PROC_BIND
HOG=
cleanup() { [ -n "$HOG" ] && kill "$HOG" 2>/dev/null; HOG=; }
trap cleanup EXIT INT TERM

# CPU cores the machine keeps busy over one second (all processes).
busy_cores() {
  local a b
  a=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat)
  sleep 1
  b=$(awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat)
  awk -v a="$a" -v b="$b" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz}'
}
# Wait (at most QUIET_WAIT seconds) until other processes use < 0.3 cores.
wait_quiet() {
  local t=0 l
  while :; do
    l=$(busy_cores)
    if awk -v l="$l" 'BEGIN{exit !(l < 0.3)}'; then echo "# machine quiet (busy $l cores)"; return; fi
    t=$((t + 1))
    if [ "$t" -ge "$QUIET_WAIT" ]; then
      echo "# WARNING: machine still busy ($l cores used by other processes): figures below are not clean"
      return
    fi
  done
}

# --- build ---------------------------------------------------------------
VARIANTS="lib"
DLI=${DL_INCLUDE:-include}
INC="-I$DLI"
if [ ! -f "$DLI/dl/vmath.h" ]; then
  mkdir -p "$B/shim/dl" "$B/vshim/dl"
  cat > "$B/shim/dl/vmath.h" <<'EOF'
/* run_fused.sh: libm stand-in for the missing dl/vmath.h (glibc scalar functions). */
#ifndef DL_VMATH_H
#define DL_VMATH_H
#include <math.h>
#define DL__BENCH_VMATH "libm stand-in for missing dl/vmath.h (glibc scalar tanhf)"
static inline float dl_vexp_f32(float x) { return expf(x); }
static inline float dl_vlog_f32(float x) { return logf(x); }
static inline float dl_vlog1p_f32(float x) { return log1pf(x); }
static inline float dl_vexpm1_f32(float x) { return expm1f(x); }
static inline float dl_vtanh_f32(float x) { return tanhf(x); }
static inline float dl_verf_f32(float x) { return erff(x); }
static inline float dl_vsigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
#endif
EOF
  # bench-only: the same, with a branch-free rational tanh (Eigen's ptanh_float
  # coefficients, |error| < 3e-7 here) that the compiler can vectorise.
  sed -e 's|static inline float dl_vtanh_f32(float x) { return tanhf(x); }|static inline float dl_vtanh_f32(float x) {\
  const float c = 7.90531110763549805f;\
  float x2, p, q;\
  x = x > c ? c : (x < -c ? -c : x);\
  x2 = x * x;\
  p = -2.76076847742355e-16f;\
  p = p * x2 + 2.00018790482477e-13f;\
  p = p * x2 + -8.60467152213735e-11f;\
  p = p * x2 + 5.12229709037114e-08f;\
  p = p * x2 + 1.48572235717979e-05f;\
  p = p * x2 + 6.37261928875436e-04f;\
  p = p * x2 + 4.89352455891786e-03f;\
  p = p * x;\
  q = 1.19825839466702e-06f;\
  q = q * x2 + 1.18534705686654e-04f;\
  q = q * x2 + 2.26843463243900e-03f;\
  q = q * x2 + 4.89352518554385e-03f;\
  return p / q;\
}|' -e 's|#define DL__BENCH_VMATH .*|#define DL__BENCH_VMATH "bench-only vectorisable rational tanh (dl/vmath.h missing)"|' \
    "$B/shim/dl/vmath.h" > "$B/vshim/dl/vmath.h"
  echo '#include "dl/vmath.h"' > "$B/shim/vmath.h"
  echo '#include "dl/vmath.h"' > "$B/vshim/vmath.h"
  INC="-I$DLI -I$B/shim"
  VARIANTS="lib vtanh"
  echo "NOTE: $DLI/dl/vmath.h is missing: building with a libm stand-in ($B/shim);"
  echo "      the 'vtanh' rows use a bench-only vectorisable tanh ($B/vshim) to show the loop itself."
fi
build() { # out opt inc src
  $CC $WARN $2 -fopenmp $3 "$4" -o "$1" -lm || { echo "FAILED to build $1"; exit 1; }
}
build "$B/bench_fused_O3" "-O3 -march=native" "$INC" bench/bench_fused.c
build "$B/bench_fused_O2native" "-O2 -march=native" "$INC" bench/bench_fused.c
build "$B/bench_fused_O2" "-O2" "$INC" bench/bench_fused.c
build "$B/bench_threads" "-O3 -march=native" "$INC" bench/bench_threads.c
if [ "$VARIANTS" != lib ]; then
  build "$B/bench_fused_vtanh" "-O3 -march=native" "-I$DLI -I$B/vshim" bench/bench_fused.c
  build "$B/bench_threads_vtanh" "-O3 -march=native" "-I$DLI -I$B/vshim" bench/bench_threads.c
fi
echo "# headers: $DLI"
echo "# $(uname -m) $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $($CC --version | head -1)"

# --- 1 + 2: fused vs triad vs PyTorch ----------------------------------------
echo
echo "== 1. fused loop vs memory bandwidth (n = 2^24 floats, 2 threads, medians of $REPS)"
wait_quiet
declare -A FUSED
for v in O3 O2native O2 $( [ "$VARIANTS" != lib ] && echo vtanh ); do
  case $v in O3) fl="-O3 -march=native" ;; O2native) fl="-O2 -march=native" ;; O2) fl="-O2" ;; vtanh) fl="-O3 -march=native, vectorisable tanh stand-in" ;; esac
  echo "-- $fl"
  out=$("$B/bench_fused_$v" 24 "$REPS" 2)
  echo "$out"
  FUSED[$v]=$(echo "$out" | sed -n 's/^fused_gbs=\([0-9.]*\) .*/\1/p')
done

echo
echo "== 2. PyTorch eager, same expression, same n, 2 threads"
tout=$(env "${TORCH_ENV[@]}" $PY bench/torch_fused.py 24 "$REPS" 2 2>&1)
echo "$tout"
if echo "$tout" | grep -q '^SKIP'; then
  echo "SKIP dl.h vs PyTorch ratios: no torch for $PY"
else
  sep=$(echo "$tout" | sed -n 's/.*torch_separate_gbs=\([0-9.]*\).*/\1/p')
  outb=$(echo "$tout" | sed -n 's/.*torch_out_gbs=\([0-9.]*\).*/\1/p')
  for v in "${!FUSED[@]}"; do
    awk -v v="$v" -v f="${FUSED[$v]}" -v s="$sep" -v o="$outb" 'BEGIN{
      printf "ratio_%s fused_vs_torch_separate=%.2f fused_vs_torch_out=%.2f  (goal >= 4 vs separate: %s)\n",
             v, f/s, f/o, (f/s >= 4 ? "met" : "NOT met") }'
  done | sort
fi

# --- 3: threads, idle and beside a busy loop ----------------------------------
echo
echo "== 3. DL_ASSIGN tanh(a*b+c): 1 vs 2 threads, idle and with one core busy elsewhere"
run_threads() { # label bin env...
  local label=$1 bin=$2
  shift 2
  env "$@" timeout 60 "$bin" scale "$label" 7 4194304 || echo "threads_bench cond=$label TIMEOUT/FAILED"
}
TOUT=$B/threads.txt
: > "$TOUT"
for tb in "$B/bench_threads" $( [ "$VARIANTS" != lib ] && echo "$B/bench_threads_vtanh" ); do
  tag=lib; [ "$tb" = "$B/bench_threads_vtanh" ] && tag=vtanh
  for pol in default passive spin1000; do
    case $pol in
      default) envs="DL_BENCH_POLICY=default" ;;
      passive) envs="OMP_WAIT_POLICY=passive" ;;
      spin1000) envs="GOMP_SPINCOUNT=1000" ;;
    esac
    wait_quiet
    run_threads idle "$tb" $envs | sed "s/^/math=$tag pol=$pol /" >> "$TOUT"
    timeout 60 sh -c 'while :; do :; done' &
    HOG=$!
    sleep 0.2
    run_threads hog "$tb" $envs | sed "s/^/math=$tag pol=$pol /" >> "$TOUT"
    cleanup
  done
done
echo "# Melem/s, medians of 7 samples of 2^22 elements each (each after a 30 ms pause, 1- and 2-thread"
echo "# samples alternating); hog = a busy-loop process; ratio = 2 threads with hog / 1 thread with hog"
echo "# (requirement: ratio >= 1; 'ok' >= 0.95 to allow for noise, 'below' >= 0.5, else 'COLLAPSE')."
echo "# other load = CPU used by other processes (the hog included) during the idle / hog runs."
awk '
  { for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    k = f["math"] " " f["pol"] " " f["size"]
    if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    t1[k, f["cond"]] = f["t1_melems"]; t2[k, f["cond"]] = f["t2_melems"]; ol[k, f["cond"]] = f["other_load_cores"]
    if (f["team_started"] != "") team[k] = f["team_started"] }
  END {
    printf "%-6s %-9s %8s | %9s %9s %5s | %9s %9s | %6s %-8s | %s\n", "math", "policy", "size",
           "1t idle", "2t idle", "2t/1t", "1t hog", "2t hog", "ratio", "verdict", "other load idle/hog"
    for (j = 1; j <= n; j++) {
      k = order[j]; split(k, p, " ")
      r = (t1[k, "hog"] > 0) ? t2[k, "hog"] / t1[k, "hog"] : 0
      ri = (t1[k, "idle"] > 0) ? t2[k, "idle"] / t1[k, "idle"] : 0
      printf "%-6s %-9s %8s | %9s %9s %5.2f | %9s %9s | %6.2f %-8s | %s/%s%s\n", p[1], p[2], p[3],
             t1[k, "idle"], t2[k, "idle"], ri, t1[k, "hog"], t2[k, "hog"], r,
             (r >= 0.95 ? "ok" : r >= 0.5 ? "below" : "COLLAPSE"), ol[k, "idle"], ol[k, "hog"],
             (k in team) ? "  team started at 1024: " team[k] : ""
    }
  }' "$TOUT"

echo
echo "== 4. denormals: keep_denormals=1 vs 0 (FTZ/DAZ on every worker), 2 threads"
wait_quiet
"$B/bench_threads" ftz 7
echo "# done"
