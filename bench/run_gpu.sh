#!/usr/bin/env bash
# bench/run_gpu.sh - training on the GPU: examples/fashion_mlp.c and
# examples/fashion_cnn.c built with DL_USE_CUDA (`make gpu`) and run with
# --device cuda, against the same training in PyTorch on the same GPU
# (bench/torch_train.py ... cuda: eager, the way most PyTorch code is
# written; bench/torch_train_graph.py: PyTorch's best, the data on the GPU
# and the whole step captured in a CUDA graph) in the same run. Samples/s of
# training (evaluation and file loading excluded, as in run_train.sh), peak
# device memory (dl.h: with the evaluation, as torch_train.py's, and of the
# training steps alone, train_peak_mib, as torch_train_graph.py's), ROUNDS rounds, the order reversed every other round;
# medians and their ratios, at batch 64 and 512. Goal (issue 23): at least
# 1.2x the graph-captured PyTorch loop. dl.h runs twice: as the examples run
# by default (each step recorded and replayed as CUDA graphs, "dl") and with
# --no-graphs ("dlng"); each run prints the device calls per training step
# (launches, GEMMs, graph launches and captures, copies, fills, waits).
#
# Without nvcc, or without a GPU (the example then refuses --device cuda
# with "no CUDA device"), it prints SKIP and exits 0.
# Env: ROUNDS (3), MLP_SUBSET (60000), CNN_SUBSET (20000), BATCHES ("64 512"),
# DATA (Debian's dataset-fashion-mnist directory), CC (gcc), PY (python3:
# the one with a CUDA build of torch), CUDA (/usr/local/cuda).
set -u
cd "$(dirname "$0")/.." || exit 1
B=build/bench
mkdir -p "$B"
CC=${CC:-gcc}
PY=${PY:-python3}
ROUNDS=${ROUNDS:-3}; MLP_SUBSET=${MLP_SUBSET:-60000}; CNN_SUBSET=${CNN_SUBSET:-20000}; BATCHES=${BATCHES:-64 512}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
CUDA=${CUDA:-/usr/local/cuda}
NVCC=$(command -v nvcc || echo "$CUDA/bin/nvcc")
[ -x "$NVCC" ] || { echo "SKIP run_gpu: nvcc not found (the CUDA toolkit is not installed here)"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
RES=$B/gpu.txt
: > "$RES"

make -s gpu-lib CUDA="$CUDA" NVCC="$NVCC" || { echo "run_gpu: make gpu-lib failed"; exit 1; }
for ex in fashion_mlp fashion_cnn; do
  $CC -std=c11 -O3 -march=native -DDL_USE_CUDA -I"$CUDA/include" -Iinclude examples/$ex.c -o "$B/${ex}_cuda" \
    build/libdlgpu.a -L"$CUDA/lib64" -lcudnn -lcublas -lcudart -lstdc++ -lz -lm || { echo "run_gpu: building $ex failed"; exit 1; }
done
export LD_LIBRARY_PATH="$CUDA/lib64:${LD_LIBRARY_PATH:-}"

# Is there a GPU? The example says so itself.
if ! "$B/fashion_mlp_cuda" --device cuda --epochs 1 --subset 640 --quiet --data "$DATA" --save "$T/w.st" \
     --csv "$T/l.csv" > "$T/probe.txt" 2>&1; then
  if grep -q 'no CUDA device' "$T/probe.txt"; then echo "SKIP run_gpu: $(tail -1 "$T/probe.txt")"; exit 0; fi
  echo "run_gpu: the probe run failed:"; tail -5 "$T/probe.txt"; exit 1
fi
echo "device: $(sed -n 's/^device: //p' "$T/probe.txt" | head -1)"

one() { # MODEL WHO(dl|dlng|torch|graph) BATCH
  local model=$1 who=$2 bs=$3 subset out=$T/out.txt sps
  if [ "$model" = mlp ]; then subset=$MLP_SUBSET; else subset=$CNN_SUBSET; fi
  if [ "$who" = torch ] || [ "$who" = graph ]; then
    if [ "$who" = torch ]; then "$PY" bench/torch_train.py "$model" "$subset" 1 1 "$bs" "$DATA" cuda > "$out" 2>&1
    else "$PY" bench/torch_train_graph.py "$model" "$subset" 1 "$bs" "$DATA" > "$out" 2>&1; fi
    if grep -q '^SKIP' "$out"; then echo "$model $who SKIP"; head -1 "$out"; return 0; fi
    sps=$(sed -n 's/^torch_[a-z]* .*samples_per_s=\([0-9.]*\).*/\1/p' "$out")
    mem=$(sed -n 's/.* peak_mib=\([0-9.]*\).*/\1/p' "$out")
  else
    local ng=""; [ "$who" = dlng ] && ng=--no-graphs
    "$B/fashion_${model}_cuda" --device cuda --epochs 1 --subset "$subset" --batch "$bs" --quiet --data "$DATA" \
      --save "$T/w.safetensors" --csv "$T/log.csv" $ng > "$out" 2>&1
    sed -n "s/^device calls per training step: /$model $bs $who calls: /p" "$out" | tee -a "$RES"
    sps=$(sed -n 's/^result: .*train_samples_per_s=\([0-9.]*\).*/\1/p' "$out")
    mem=$(sed -n 's/^device memory: peak \([0-9.]*\) MiB.*/\1/p' "$out")
    tmem=$(sed -n 's/^device memory: .*(training steps \([0-9.]*\) MiB.*/\1/p' "$out")
    [ -n "$tmem" ] && mem="$mem train_peak_mib=$tmem"
  fi
  if [ -z "$sps" ]; then echo "run_gpu: $model $who run failed:"; tail -5 "$out"; return 1; fi
  echo "$model $bs $who sps=$sps peak_mib=${mem:--} $(grep -o 'test_acc=[0-9.]*' "$out" | head -1)" | tee -a "$RES"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}'; }

# PyTorch's eager loop (torch_train.py: batches made on the host, loss and
# accuracy read every step) and its best loop (torch_train_graph.py: data on
# the GPU, the whole step graph-captured and replayed). Goal (issue 23): dl.h
# at least 1.2x the captured loop at batch 64 and 512.
status=0
for bs in $BATCHES; do
  for model in mlp cnn; do
    echo "== $model on the GPU, batch $bs: $ROUNDS rounds of dl.h, torch eager, torch graph-captured =="
    for r in $(seq 1 "$ROUNDS"); do
      if [ $((r % 2)) = 1 ]; then order="dl dlng torch graph"; else order="graph torch dlng dl"; fi
      for who in $order; do one "$model" "$who" "$bs" || status=1; done
    done
    d=$(sed -n "s/^$model $bs dl sps=\([0-9.]*\).*/\1/p" "$RES" | median)
    n=$(sed -n "s/^$model $bs dlng sps=\([0-9.]*\).*/\1/p" "$RES" | median)
    [ -n "$d" ] && [ -n "$n" ] && awk -v m="$model" -v b="$bs" -v d="$d" -v n="$n" 'BEGIN {
      printf "%s batch %s: dl.h with CUDA graphs %.0f samples/s, --no-graphs %.0f (%.2fx)\n", m, b, d, n, d / n }'
    t=$(sed -n "s/^$model $bs torch sps=\([0-9.]*\).*/\1/p" "$RES" | median)
    g=$(sed -n "s/^$model $bs graph sps=\([0-9.]*\).*/\1/p" "$RES" | median)
    if [ -n "$d" ] && [ -n "$t" ] && [ -n "$g" ]; then
      awk -v m="$model" -v b="$bs" -v d="$d" -v t="$t" -v g="$g" 'BEGIN {
        printf "%s batch %s: dl.h %.0f samples/s; torch eager %.0f (%.2fx), torch graph-captured %.0f (%.2fx, goal >= 1.2x: %s)\n",
        m, b, d, t, d / t, g, d / g, d / g >= 1.2 ? "met" : "NOT met" }'
    fi
  done
done
exit $status
