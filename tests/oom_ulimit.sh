#!/usr/bin/env bash
# tests/oom_ulimit.sh BUILD_DIR - out of memory as the system reports it:
# examples/fashion_mlp.c, built plainly and with OpenBLAS (when installed),
# trains one epoch on 2000 images under `ulimit -v` at 20 levels from 40 MB
# to 300 MB. Every run must end by itself within 60 s with exit 0 (it fit),
# or exit 1 and a message that says "out of memory" (what failed and the
# bytes); the loader's refusal to map a shared library (exit 127) and
# libgomp's "Thread creation failed" (exit 1: OpenMP cannot map a thread's
# stack) come before or outside our code and are counted apart; never a
# signal, an abort or a hang. (Before the fix OpenBLAS's worker threads spun
# for ever in their own allocator at 5 levels of 24.) Both outcomes, fits
# and refusals, must occur. Prints "OOM_ULIMIT passed failed skipped".
set -u
cd "$(dirname "$0")/.."
B=${1:-build/tests}/oom
mkdir -p "$B"
pass=0; fail=0; skip=0
if [ ! -d /usr/share/datasets/fashion-mnist ] && [ -z "${DL_FASHION_MNIST_DIR:-}" ]; then
  echo "SKIP oom_ulimit: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  echo "OOM_ULIMIT 0 0 1"; exit 0
fi
builds="plain"
cc -std=c11 -O2 -Iinclude examples/fashion_mlp.c -o "$B/plain" -lz -lm || { echo "FAIL: plain build"; echo "OOM_ULIMIT 0 1 0"; exit 1; }
if echo '#include <cblas.h>' | cc -E -x c - >/dev/null 2>&1; then
  if cc -std=c11 -O2 -fopenmp -DDL_USE_OPENBLAS -Iinclude examples/fashion_mlp.c -o "$B/openblas" -lopenblas -lz -lm; then
    builds="plain openblas"
  else echo "FAIL: OpenBLAS build"; fail=$((fail + 1)); fi
else
  echo "SKIP oom_ulimit with OpenBLAS: cblas.h not found (apt-get install libopenblas-dev)"; skip=$((skip + 1))
fi
for b in $builds; do
  fits=0; refused=0; other=0; bad=0
  for mb in 40 50 55 60 65 70 75 80 90 100 110 120 130 140 150 160 180 200 240 300; do
    ( ulimit -v $((mb * 1024)); exec timeout -s KILL 60 "$B/$b" --epochs 1 --subset 2000 --threads 2 --quiet \
        --save "$B/w.safetensors" --csv "$B/l.csv" --checkpoint "$B/c.ckpt" ) > "$B/out" 2> "$B/err"
    rc=$?
    if [ $rc = 0 ]; then fits=$((fits + 1))
    elif [ $rc = 1 ] && grep -q "out of memory" "$B/err"; then refused=$((refused + 1))
    elif [ $rc = 127 ] && grep -q "error while loading shared libraries" "$B/err"; then other=$((other + 1))
    elif [ $rc = 1 ] && grep -q "^libgomp: Thread creation failed" "$B/err"; then other=$((other + 1))
    else
      bad=$((bad + 1))
      echo "FAIL: $b under ulimit -v ${mb} MB: exit $rc: $(tail -c 300 "$B/err")"
    fi
  done
  echo "$b: 20 limits: $fits fit, $refused out of memory with our message, $other refused by the loader or libgomp, $bad bad"
  # not vacuous: both outcomes were seen
  if [ $bad = 0 ] && [ $fits -gt 0 ] && [ $refused -gt 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
echo "OOM_ULIMIT $pass $fail $skip"
[ $fail = 0 ]
