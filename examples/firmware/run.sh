#!/usr/bin/env bash
# examples/firmware/run.sh - `make firmware`: a Fashion-MNIST classifier
# trained with dl.h, exported as C source, running on a Cortex-M4 under QEMU.
#
#   bash examples/firmware/run.sh [--quick]
#
# 1. Trains the MLP (examples/fashion_mlp.c) and the small CNN
#    (examples/fashion_cnn.c --small) and exports each with --export:
#    f32 and int8 C source (dl/export.h), the int8 activation ranges from
#    500 training images; the example prints both accuracies on the test
#    set. FW_MLP_WEIGHTS=FILE / FW_CNN_WEIGHTS=FILE take trained weights
#    (the examples' --save files) instead of training.
# 2. Writes the first 1000 test images as C (images.c).
# 3. For each model and precision (two at a time: the MLP's while the CNN
#    trains, then the CNN's): the host build of host.c (the same
#    model source and classify.h loop; then the whole test set) and the
#    firmware image (main.c, startup.c, mps2_an386.ld; arm-none-eabi-gcc
#    -mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16
#    -ffreestanding -Os -Wall -Wextra -Wpedantic -Werror), checked with nm
#    for malloc, free, calloc and realloc, run under qemu-system-arm -M
#    mps2-an386 with semihosting; its predictions compared with the host's.
#
# Ends with one line per model and precision:
#   result: model=mlp precision=int8 qemu_acc=0.884 host_acc=0.8752 agree=1000/1000 identical=1
#           flash_bytes=250308 ram_bytes=9232 arena_bytes=1040 stack_used=540 elf=build/firmware/...
# flash_bytes: vectors, code, constants (the weights) and .data's image,
# without the embedded test images; ram_bytes: .data, .bss (the arena is
# there) and the 2 KiB stack reserved (stack_used: how deep it went).
# Fails (exit 1) when int8 predictions differ from the host's, f32 agree
# on fewer than 99.5%, int8 loses more than 1.0 point of test accuracy
# against f32 on the host, or an allocator symbol is linked in. --quick
# (the test suite): 1 epoch each, the CNN on 10000 training images.
# A missing cross compiler, QEMU or data set: "SKIP firmware: why", exit 3.
set -u
cd "$(dirname "$0")/../.."
OUT=${FW_OUT:-build/firmware}
case $OUT in /*) ;; *) OUT=./$OUT ;; esac # run its programs as $OUT/NAME, relative or absolute
GEN=$OUT/gen
QUICK=0
[ "${1:-}" = --quick ] && QUICK=1
CC=${CC:-cc}
for tool in arm-none-eabi-gcc arm-none-eabi-nm arm-none-eabi-size qemu-system-arm; do
  command -v $tool >/dev/null || { echo "SKIP firmware: $tool not found (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm)"; exit 3; }
done
DATA=${DL_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
[ -f "$DATA/t10k-images-idx3-ubyte.gz" ] || [ -f "$DATA/t10k-images-idx3-ubyte" ] ||
  { echo "SKIP firmware: Fashion-MNIST not in $DATA (apt-get install dataset-fashion-mnist)"; exit 3; }
mkdir -p "$GEN"
fail=0
die() { echo "FAIL firmware: $*"; fail=1; }

FAST="-O3 -march=native -fopenmp"
BLAS=""
if ls /usr/include/cblas.h /usr/include/*/cblas.h >/dev/null 2>&1; then BLAS="-DDL_USE_OPENBLAS -lopenblas"; fi
build_example() { # name
  $CC -std=c11 -Wall -Wextra -Wpedantic -Werror $FAST -Iinclude examples/$1.c -o "$OUT/$1" $BLAS -lz -lm ||
    { die "building examples/$1.c"; return 1; }
}

# --- 1. train (or load) and export -------------------------------------------------
# Both examples build at once; the MLP trains and exports first, and its
# firmware (step 3) is built and run while the CNN trains.
if [ $QUICK = 1 ]; then MLP_ARGS="--epochs 1"; CNN_ARGS="--epochs 1 --subset 10000"
else MLP_ARGS="--epochs 10"; CNN_ARGS="--epochs 4"; fi
build_example fashion_mlp & bm=$!
build_example fashion_cnn & bc=$!
wait $bm || exit 1
wait $bc || exit 1
train_export() { # example
  local ex=$1 extra="" weights="" args
  [ $ex = fashion_cnn ] && extra="--small"
  [ $ex = fashion_mlp ] && weights=${FW_MLP_WEIGHTS:-}; [ $ex = fashion_cnn ] && weights=${FW_CNN_WEIGHTS:-}
  if [ -n "$weights" ]; then args="--load $weights --eval"
  elif [ $ex = fashion_mlp ]; then args="$MLP_ARGS --save $GEN/$ex.safetensors"
  else args="$CNN_ARGS --save $GEN/$ex.safetensors"; fi
  echo "== $ex $extra $args --export $GEN"
  # shellcheck disable=SC2086
  "$OUT/$ex" $extra $args --quiet --data "$DATA" --csv "$GEN/$ex.csv" --chart "$GEN/$ex.png" --export "$GEN" \
    >"$GEN/$ex.log" 2>&1 || { tail -n 5 "$GEN/$ex.log"; echo "FAIL firmware: $ex --export"; return 1; }
  grep -E '^(micro|result)' "$GEN/$ex.log"
}
train_export fashion_mlp || exit 1

# --- 2. the test images as C ---------------------------------------------------------
$CC -std=c11 -O2 -Iinclude examples/firmware/images.c -o "$OUT/images" -lz -lm && "$OUT/images" "$OUT" 1000 "$DATA" ||
  { die "writing the test images"; exit 1; }

# --- 3. host and firmware, each model and precision ----------------------------------
ARM="arm-none-eabi-gcc -std=c11 -mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16 -ffreestanding -Os
     -Wall -Wextra -Wpedantic -Werror"
# one model and precision: its result line in $d/result, its failures in $d/fail
check_one() { # model prec
  local model=$1 prec=$2 name up d inc alloc start rc secs q h n agree identical qacc hacc sz flash ram arena stack line
  name=fashion_${model}_$prec
  up=$(echo "$name" | tr a-z A-Z)
  d=$OUT/$name
  mkdir -p "$d"
  rm -f "$d/result" "$d/fail"
  no() { echo "FAIL firmware: $*" | tee -a "$d/fail"; }
  printf '#include "%s.h"\n#define FW_MODEL %s\n#define FW_ARENA_BYTES %s_ARENA_BYTES\n' "$name" "$name" "$up" >"$d/model_select.h"
  inc="-Iinclude -Iexamples/firmware -I$d -I$OUT -I$GEN"
  # the host's run: the same model source, the same loop, the same images; then the whole test set
  # shellcheck disable=SC2086
  if ! $CC -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 $inc examples/firmware/host.c "$GEN/$name.c" \
      "$OUT/test_images.c" -o "$d/host" -lz -lm 2>"$d/host.log"; then
    head -20 "$d/host.log"; no "$name: host build"; return
  fi
  "$d/host" "$DATA" >"$d/host.out" 2>&1 || { tail -3 "$d/host.out"; no "$name: host run"; return; }
  # the firmware
  # shellcheck disable=SC2086
  if ! $ARM -ffunction-sections -fdata-sections -nostartfiles -Wl,--gc-sections -T examples/firmware/mps2_an386.ld \
      $inc examples/firmware/main.c examples/firmware/startup.c "$GEN/$name.c" "$OUT/test_images.c" \
      -o "$d/fw.elf" 2>"$d/fw.log"; then
    head -20 "$d/fw.log"; no "$name: firmware build"; return
  fi
  alloc=$(arm-none-eabi-nm "$d/fw.elf" | awk '$3 ~ /^_?(malloc|free|calloc|realloc)(_r)?$/ { print $3 }' | tr '\n' ' ')
  [ -z "$alloc" ] || no "$name: the firmware links an allocator: $alloc"
  start=$(date +%s)
  timeout 600 qemu-system-arm -M mps2-an386 -nographic -monitor none -serial none \
    -semihosting-config enable=on,target=native -kernel "$d/fw.elf" >"$d/qemu.out" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  [ $rc = 0 ] || { tail -3 "$d/qemu.out"; no "$name: QEMU exit $rc after ${secs} s"; return; }
  q=$(grep '^pred ' "$d/qemu.out" | cut -c6- | tr -d '\n')
  h=$(grep '^pred ' "$d/host.out" | cut -c6- | tr -d '\n')
  n=${#h}
  if [ "$n" -eq 0 ] || [ ${#q} -ne "$n" ]; then no "$name: $n host predictions, ${#q} from QEMU"; return; fi
  agree=$(awk -v a="$q" -v b="$h" 'BEGIN { s = 0; for (i = 1; i <= length(a); i++) s += substr(a, i, 1) == substr(b, i, 1); print s }')
  identical=0; [ "$q" = "$h" ] && identical=1
  qacc=$(sed -n 's/^correct \([0-9]*\) of \([0-9]*\)$/\1 \2/p' "$d/qemu.out" | awk '{ printf "%.4f", $1 / $2 }')
  hacc=$(sed -n 's/^host_acc=\([0-9.]*\).*/\1/p' "$d/host.out")
  sz=$(arm-none-eabi-size -A "$d/fw.elf")
  sec() { echo "$sz" | awk -v s="$1" '$1 == s { print $2 + 0; f = 1 } END { if (!f) print 0 }'; }
  flash=$(( $(sec .isr_vector) + $(sec .text) + $(sec .rodata) + $(sec .ARM.exidx) + $(sec .data) ))
  ram=$(( $(sec .data) + $(sec .bss) + $(sec .stack) ))
  arena=$(sed -n 's/^model .*, arena \([0-9]*\) bytes$/\1/p' "$d/qemu.out")
  stack=$(sed -n 's/^stack used \([0-9]*\) of .*/\1/p' "$d/qemu.out")
  line="result: model=$model precision=$prec qemu_acc=$qacc host_acc=$hacc agree=$agree/$n identical=$identical"
  line="$line flash_bytes=$flash ram_bytes=$ram arena_bytes=$arena stack_used=$stack qemu_s=$secs elf=$d/fw.elf"
  echo "$line" >"$d/result"
  if [ $prec = int8 ] && [ $identical != 1 ]; then no "$name: int8 predictions differ from the host's ($agree of $n agree)"; fi
  if [ $prec = f32 ] && [ $((agree * 1000)) -lt $((n * 995)) ]; then no "$name: f32 agrees with the host on $agree of $n (< 99.5%)"; fi
}
# The MLP's two while the CNN trains, then the CNN's two: each QEMU run is one
# core's work (the CNN's take about a minute each).
check_one mlp f32 & p1=$!
check_one mlp int8 & p2=$!
train_export fashion_cnn || { wait $p1 $p2; exit 1; }
wait $p1 $p2
check_one cnn f32 & p1=$!
check_one cnn int8 & p2=$!
wait $p1 $p2
results=()
for model in mlp cnn; do
  for prec in f32 int8; do
    d=$OUT/fashion_${model}_$prec
    [ -f "$d/result" ] && results+=("$(cat "$d/result")")
    [ -s "$d/fail" ] && fail=1
    if [ $prec = int8 ] && [ -f "$d/result" ]; then
      hacc=$(sed -n 's/^host_acc=\([0-9.]*\).*/\1/p' "$d/host.out")
      f=$(sed -n 's/^host_acc=\([0-9.]*\).*/\1/p' "$OUT/fashion_${model}_f32/host.out" 2>/dev/null)
      if [ -n "$f" ] && ! awk -v a="$hacc" -v b="$f" 'BEGIN { exit !(b - a <= 0.010) }'; then
        die "fashion_${model}_int8: int8 host accuracy $hacc is more than 1.0 point below f32's $f"
      fi
    fi
  done
done
printf '%s\n' "${results[@]}"
[ $fail = 0 ]
