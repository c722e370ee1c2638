#!/usr/bin/env bash
# bench/run_gpt.sh - the GPT of examples/gpt.c (L4 H4 C256, context 128,
# batch 8, AdamW, clipping) against PyTorch eager (Debian's
# /usr/bin/python3 with python3-torch 1.13, bench/torch_gpt.py: the same
# model from tools/gpt_reference.py, optimizer and batch shape) in one run:
#
#   a. training tokens/s at 1 and 2 threads, both programs, ROUNDS rounds
#      (order alternating), medians; the ratio of dl.h's best to PyTorch's
#      best thread count. Goal (issue 18): >= 2x.
#   b. peak RSS of those runs (dl.h's at its best count vs PyTorch's at its).
#      Goal: <= 1/2 of PyTorch's.
#   c. attention memory: dl.h's peak RSS training at T = 256 and T = 1024
#      (batch 8, 2 steps) and the ratio of their growth beyond the T = 256
#      model's; T = 2048 trains (2 steps, batch 8). The model's own memory
#      (parameters, gradients, Adam state) is the same at every T except wpe.
#   d. generation at T = 512 (1 thread, dl_gpt_generate): tokens/s with the
#      KV cache vs recomputing the window for every token. Goal: >= 10x.
#   e. causal attention alone at T = 128 and 512 (B 8, 4 heads of 64, 1
#      thread): forward and backward microseconds of
#      dl_t_scaled_dot_product_attention and of dl_t_attention_qkv (the
#      block's path, heads read in place from [B, T, 3C]) against PyTorch's
#      softmax(q k^T / sqrt(D) + mask) v, medians of 20.
# Env: ROUNDS (3), STEPS (20), CC (gcc), PY (/usr/bin/python3).
set -u
cd "$(dirname "$0")/.." || exit 1
B=build/bench
mkdir -p "$B"
CC=${CC:-gcc}
PY=${PY:-/usr/bin/python3}
ROUNDS=${ROUNDS:-3}; STEPS=${STEPS:-20}
FAST="-std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude"
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?"; }
echo "load average at start: $(load) ($(nproc 2>/dev/null || echo ?) cores)"
$CC $FAST bench/bench_gpt.c -o $B/bench_gpt -lopenblas -lm || { echo "run_gpt: building bench_gpt failed"; exit 1; }
have_torch=1
"$PY" -c 'import torch' 2>/dev/null || { have_torch=0; echo "run_gpt: SKIP PyTorch (no torch in $PY): apt-get install python3-torch"; }
med() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
R=$(mktemp -d); trap 'rm -rf "$R"' EXIT
source bench/torch_env.sh; [ $have_torch = 1 ] && torch_env_init "$PY"

echo "== a/b: training, $ROUNDS rounds of $STEPS steps =="
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="dl1 dl2 torch1 torch2"; else order="torch2 torch1 dl2 dl1"; fi
  for who in $order; do
    th=${who: -1}
    case $who in
      dl*) out=$(OMP_NUM_THREADS=$th $B/bench_gpt train "$th" 128 "$STEPS") ;;
      torch*) [ $have_torch = 1 ] || continue
              out=$(env "${TORCH_ENV[@]}" OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th "$PY" bench/torch_gpt.py "$th" 128 "$STEPS") ;;
    esac
    echo "round $r $who: $out"
    echo "$out" | field tokens_per_s >> "$R/$who.tps"
    echo "$out" | field max_rss_kb >> "$R/$who.rss"
  done
done
best() { # PREFIX -> "threads tokens/s rss_kb" of the better median
  local a b
  a=$(med < "$R/${1}1.tps"); b=$(med < "$R/${1}2.tps")
  if awk -v a="$a" -v b="$b" 'BEGIN { exit !(a >= b) }'; then echo "1 $a $(med < "$R/${1}1.rss")"; else echo "2 $b $(med < "$R/${1}2.rss")"; fi
}
for who in dl1 dl2 torch1 torch2; do
  [ -s "$R/$who.tps" ] && printf "median %-6s %9.1f tokens/s  max RSS %8.0f KiB\n" "$who" "$(med < "$R/$who.tps")" "$(med < "$R/$who.rss")"
done
read -r dth dtps drss <<< "$(best dl)"
if [ $have_torch = 1 ]; then
  read -r tth ttps trss <<< "$(best torch)"
  awk -v a="$dtps" -v b="$ttps" -v da="$dth" -v db="$tth" 'BEGIN { printf "training: dl.h %.1f tokens/s (%d threads) / PyTorch %.1f (%d threads) = %.2fx (goal >= 2x)\n", a, da, b, db, a / b }'
  awk -v a="$drss" -v b="$trss" 'BEGIN { printf "peak RSS: dl.h %.0f KiB / PyTorch %.0f KiB = %.2f (goal <= 0.5)\n", a, b, a / b }'
fi

echo "== c: attention memory (dl.h, batch 8, 2 steps, 2 threads) =="
for T in 256 1024 2048; do
  out=$(OMP_NUM_THREADS=2 $B/bench_gpt train 2 "$T" 2) || { echo "T=$T: training failed"; continue; }
  echo "T=$T: $out"
  echo "$out" | field max_rss_kb > "$R/rss$T"
done
if [ -s "$R/rss256" ] && [ -s "$R/rss1024" ]; then
  awk -v a="$(cat "$R/rss256")" -v b="$(cat "$R/rss1024")" 'BEGIN { printf "peak RSS T=1024 / T=256: %.2f (4x the tokens; linear: <= 4, quadratic attention scores alone would add 16x theirs)\n", b / a }'
fi
[ -s "$R/rss2048" ] && echo "T=2048 trains: peak RSS $(cat "$R/rss2048") KiB"

echo "== d: generation at T = 512, 1 thread =="
out=$(OMP_NUM_THREADS=1 $B/bench_gpt gen 1 512) && echo "$out" &&
  awk -v a="$(echo "$out" | field cache_tokens_per_s)" -v b="$(echo "$out" | field recompute_tokens_per_s)" \
    'BEGIN { printf "KV cache / recompute: %.1fx (goal >= 10x)\n", a / b }'
echo "== e: causal attention alone, B 8, 4 heads of 64, 1 thread, medians of 20 =="
for T in 128 512; do
  out=$(OMP_NUM_THREADS=1 $B/bench_gpt attn 1 "$T" 20) || { echo "T=$T: bench_gpt attn failed"; continue; }
  echo "T=$T dl.h: $out"
  if [ $have_torch = 1 ]; then
    tout=$(env "${TORCH_ENV[@]}" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$PY" bench/torch_gpt.py attn 1 "$T" 20) || continue
    echo "T=$T PyTorch: $tout"
    awk -v a="$(echo "$out" | field attn_fwd_us)" -v b="$(echo "$out" | field attn_bwd_us)" \
        -v c="$(echo "$tout" | field attn_fwd_us)" -v d="$(echo "$tout" | field attn_bwd_us)" \
        'BEGIN { printf "T=%s forward + backward: dl.h %.0f us, PyTorch %.0f us: %.2fx\n", "'"$T"'", a + b, c + d, (c + d) / (a + b) }'
  fi
done
echo "load average at end: $(load)"
