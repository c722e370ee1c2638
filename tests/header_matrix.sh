#!/usr/bin/env bash
# tests/header_matrix.sh OUTDIR - every public header (include/dl.h,
# include/dl/*.h, include/dl/ops/*.h) compiled on its own, warning-free, in
# every configuration: gcc and clang as C11 (linked with -lm), and with
# DL_USE_CUDA, DL_USE_MPI (where mpicc exists), both, DL_LINK and
# DL_IMPLEMENTATION (gcc; clang for the first header too); g++ as C++11 with
# and without DL_USE_CUDA and DL_USE_MPI; nvcc likewise, where nvcc exists.
# The checks run as parallel jobs (one per core). Prints one "FAILED: ..."
# line (and the compiler's first lines) per failing check,
# a "SKIP ..." line for what cannot run here, and last
#   HEADERS <passed> <failed> <skipped>
set -u
OUT=$1
mkdir -p "$OUT"
WARN="-std=c11 -Wall -Wextra -Wpedantic -Werror"
MPI_CFLAGS=""
if command -v mpicc >/dev/null; then MPI_CFLAGS="-DDL_USE_MPI $(mpicc --showme:compile 2>/dev/null)"; fi
skip=0
jobs="$OUT/jobs.txt"; : >"$jobs"
n=0
add() { # label compiler-command (the source comes on stdin or as $SRC_CU)
  n=$((n + 1)); printf '%s\t%s\n' "$1" "$2" >>"$jobs"
}
for h in include/dl.h include/dl/*.h include/dl/ops/*.h; do
  [ -f "$h" ] || continue
  inc="-I$(dirname "$h") -Iinclude"
  for c in gcc clang; do
    command -v $c >/dev/null || { skip=$((skip + 1)); continue; }
    add "$h alone with $c" "$c $WARN $inc -x c - -o /dev/null -lm"
    cfgs=("-DDL_USE_CUDA")
    [ -n "$MPI_CFLAGS" ] && cfgs+=("$MPI_CFLAGS" "-DDL_USE_CUDA $MPI_CFLAGS")
    if [ $c = gcc ] || [ "$h" = include/dl.h ]; then cfgs+=("-DDL_LINK" "-DDL_IMPLEMENTATION"); fi
    for cfg in "${cfgs[@]}"; do add "$h alone with $c ${cfg%% -I*}" "$c $WARN $cfg $inc -x c - -c -o /dev/null"; done
  done
  add "$h as C++ with g++" "g++ -std=c++11 -Wall -Wextra -Wpedantic -Werror $inc -x c++ - -o /dev/null"
  for cfg in "-DDL_USE_CUDA" ${MPI_CFLAGS:+"$MPI_CFLAGS"} ${MPI_CFLAGS:+"-DDL_USE_CUDA $MPI_CFLAGS"}; do
    add "$h as C++ with g++ ${cfg%% -I*}" "g++ -std=c++11 -Wall -Wextra -Wpedantic -Werror $cfg $inc -x c++ - -c -o /dev/null"
  done
  if command -v nvcc >/dev/null; then
    for cfg in "" "-DDL_USE_CUDA" ${MPI_CFLAGS:+"$MPI_CFLAGS"} ${MPI_CFLAGS:+"-DDL_USE_CUDA $MPI_CFLAGS"}; do
      add "$h with nvcc ${cfg%% -I*}" "NVCC $cfg $inc"
    done
  fi
done
# firmware: dl.h with DL_FREESTANDING (dl/micro.h alone) for a Cortex-M4, freestanding
if command -v arm-none-eabi-gcc >/dev/null; then
  for h in include/dl.h include/dl/micro.h; do
    add "$h freestanding for a Cortex-M4" "arm-none-eabi-gcc $WARN -mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16 -ffreestanding -Os -DDL_FREESTANDING -I$(dirname "$h") -Iinclude -x c - -c -o /dev/null"
  done
else
  echo "SKIP freestanding header checks: arm-none-eabi-gcc not found (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi)"
  skip=$((skip + 1))
fi
[ -n "$MPI_CFLAGS" ] || { echo "SKIP header checks with DL_USE_MPI: mpicc not found"; skip=$((skip + 1)); }
command -v nvcc >/dev/null || { echo "SKIP nvcc header checks: nvcc not found (the CUDA toolkit is not installed here)"; skip=$((skip + 1)); }
run_job() { # index
  local line label cmd h k=$1
  line=$(sed -n "${k}p" "$jobs"); label=${line%%$'\t'*}; cmd=${line#*$'\t'}
  h=${label%% *}
  if [[ $cmd == NVCC* ]]; then
    printf '#include "%s"\nint main(void) { return 0; }\n' "$(basename "$h")" >"$OUT/j$k.cu"
    # shellcheck disable=SC2086
    nvcc -std=c++17 -Werror all-warnings ${cmd#NVCC} -c "$OUT/j$k.cu" -o "$OUT/j$k.o" >"$OUT/j$k.log" 2>&1
  else
    # shellcheck disable=SC2086
    printf '#include "%s"\nint main(void) { return 0; }\n' "$(basename "$h")" | $cmd >"$OUT/j$k.log" 2>&1
  fi
  if [ $? = 0 ]; then echo "OK" >"$OUT/j$k.res"; else echo "FAILED: $label" >"$OUT/j$k.res"; fi
}
export -f run_job; export jobs OUT
seq 1 "$n" | xargs -P "$(nproc)" -I{} bash -c 'run_job {}'
pass=0; fail=0
for k in $(seq 1 "$n"); do
  if [ "$(cat "$OUT/j$k.res" 2>/dev/null)" = OK ]; then pass=$((pass + 1))
  else fail=$((fail + 1)); cat "$OUT/j$k.res" 2>/dev/null || echo "FAILED: job $k did not run"; cut -c1-300 "$OUT/j$k.log" | head -20; fi
done
echo "HEADERS $pass $fail $skip"
