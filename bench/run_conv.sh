#!/usr/bin/env bash
# bench/run_conv.sh - one training step of a conv layer, dl.h against PyTorch.
#
# The step (bench/bench_conv.c, bench/torch_conv.py): conv2d 5x5, 32 -> 64
# channels, 12x12 input, padding 0, batch 64, f32, forward + backward with
# x, w and b requiring gradients, 2 threads. dl.h is built the way the issue
# asks: gcc -O2 (no -march), OpenMP, OpenBLAS for the GEMMs. PyTorch is
# Debian's python3-torch (oneDNN), torch.set_num_threads(2).
#
# Each program prints the median ms per step over REPS repeats of STEPS
# steps; the two run alternately ROUNDS times (other sessions share these
# machines: alternating lets both see the same drift), and the summary line
# uses the median of each side's figures:
#   conv2d 5x5 32->64 12x12 b64 fwd+bwd: dl.h X ms, torch Y ms, ratio torch/dl = Z
# (Z >= 1: dl.h is at least as fast). other_load_cores in dl.h's lines is
# the CPU the rest of the machine used meanwhile.
#
# Then the same step on fashion_cnn's second convolution (3x3, padding 1),
# dl.h's default (Winograd where the CPU has AVX2) and im2col beside
# PyTorch; then bench/bench_im2col.c (im2col of the Fashion CNN's two layers against
# a plain loop and memcpy), built with -O2 and with -O2 -march=native, the
# same for bench/bench_pool.c (the 2x2 max pool with indices), and
# bench/bench_pack.c (the packs and the kernel of one image's products of
# the CNN's second convolution).
#
# Environment: CC (gcc), REPS (7), STEPS (20), ROUNDS (3), THREADS (2).
set -u
cd "$(dirname "$0")/.."
B=build/bench
mkdir -p "$B"
CC=${CC:-gcc}
REPS=${REPS:-7}
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
PY=/usr/bin/python3
source bench/torch_env.sh; torch_env_init "$PY"
export OMP_NUM_THREADS=$THREADS
unset OMP_WAIT_POLICY GOMP_SPINCOUNT OMP_DYNAMIC OMP_PROC_BIND OPENBLAS_NUM_THREADS

$CC -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -fopenmp -DDL_USE_OPENBLAS -Iinclude \
  bench/bench_conv.c -o "$B/bench_conv" -lopenblas -lm || { echo "FAILED to build bench_conv"; exit 1; }
echo "# $(uname -m) $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $($CC --version | head -1)"
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"

DL=()
TORCH=()
for r in $(seq 1 "$ROUNDS"); do
  out=$("$B/bench_conv" "$REPS" "$STEPS" "$THREADS")
  echo "$out"
  DL+=("$(echo "$out" | sed -n 's/^dl_ms=\([0-9.]*\).*/\1/p')")
  tout=$(env "${TORCH_ENV[@]}" $PY bench/torch_conv.py "$REPS" "$STEPS" "$THREADS" 2>&1)
  echo "$tout"
  if echo "$tout" | grep -q '^SKIP'; then
    echo "SKIP conv2d ratio: no torch for $PY"
    exit 0
  fi
  TORCH+=("$(echo "$tout" | sed -n 's/^torch_ms=\([0-9.]*\).*/\1/p')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
d=$(median "${DL[@]}")
t=$(median "${TORCH[@]}")
awk -v d="$d" -v t="$t" 'BEGIN {
  printf "conv2d 5x5 32->64 12x12 b64 fwd+bwd: dl.h %.2f ms, torch %.2f ms, ratio torch/dl = %.2f\n", d, t, t / d }'

# fashion_cnn's second convolution (3x3, 32 -> 64, 14x14, padding 1, batch
# 64), built for this CPU (-O2 -march=native: Winograd F(2x2, 3x3) where it
# has AVX2 and FMA, see dl/ops/conv.h), with the default algorithm and
# with conv_algo = DL_CONV_IM2COL, beside PyTorch, alternating, medians:
#   conv2d 3x3 32->64 14x14 b64 fwd+bwd: dl.h X ms (Winograd), im2col Y ms, torch Z ms, ratios ...
$CC -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude \
  bench/bench_conv.c -o "$B/bench_conv_native" -lopenblas -lm || { echo "FAILED to build bench_conv (native)"; exit 1; }
W=(); I=(); T3=()
for r in $(seq 1 "$ROUNDS"); do
  out=$("$B/bench_conv_native" "$REPS" "$STEPS" "$THREADS" 64 3x3 auto); echo "$out"
  W+=("$(echo "$out" | sed -n 's/^dl_ms=\([0-9.]*\).*/\1/p')")
  algo=$(echo "$out" | sed -n 's/.*(median) \([A-Za-z0-9]*\),.*/\1/p')
  out=$("$B/bench_conv_native" "$REPS" "$STEPS" "$THREADS" 64 3x3 im2col); echo "$out"
  I+=("$(echo "$out" | sed -n 's/^dl_ms=\([0-9.]*\).*/\1/p')")
  tout=$(env "${TORCH_ENV[@]}" $PY bench/torch_conv.py "$REPS" "$STEPS" "$THREADS" 64 3x3 2>&1); echo "$tout"
  T3+=("$(echo "$tout" | sed -n 's/^torch_ms=\([0-9.]*\).*/\1/p')")
done
w=$(median "${W[@]}"); i=$(median "${I[@]}"); t=$(median "${T3[@]}")
awk -v w="$w" -v i="$i" -v t="$t" -v a="$algo" 'BEGIN {
  printf "conv2d 3x3 32->64 14x14 b64 fwd+bwd: dl.h %.2f ms (%s), im2col %.2f ms, torch %.2f ms; im2col/dl = %.2f, torch/dl = %.2f\n", w, a, i, t, i / w, t / w }'

# Two passes of the CNN's layers, each on one thread, built plain and for
# this CPU: im2col, the copy the convolutions above multiply
# (bench/bench_im2col.c), and the 2x2 max pool with indices
# (bench/bench_pool.c: the block form plain, the AVX2 / AVX-512 form built
# for such a CPU); each against a plain loop and memcpy of as many bytes.
for prog in bench_im2col bench_pool; do
  for march in "" "-march=native"; do
    $CC -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 $march -Iinclude bench/$prog.c -o "$B/$prog" -lm ||
      { echo "FAILED to build $prog"; exit 1; }
    echo "# $prog built with -O2 $march"
    "$B/$prog" || exit 1
  done
done

# the parts of one image's product of the CNN's second convolution on the
# built-in GEMM (bench/bench_pack.c): packing op(A) and op(B), the kernel
$CC -std=c11 -Wall -Wextra -Wpedantic -Werror -O3 -march=native -Iinclude bench/bench_pack.c -o "$B/bench_pack" -lm ||
  { echo "FAILED to build bench_pack"; exit 1; }
echo "# bench_pack built with -O3 -march=native"
"$B/bench_pack" || exit 1
