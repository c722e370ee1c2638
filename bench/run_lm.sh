#!/usr/bin/env bash
# bench/run_lm.sh - the two language models of examples/ on the fortunes
# text, in one run: held-out bits per byte and wall time of
#
#   char_lm   examples/char_lm.c as shipped (LSTM, 1 epoch)
#   gpt       examples/gpt.c --embed 128 --layers 2 --ctx 48 --batch 24
#             --lr 5e-3 --rope --shift (a small GPT with token shift, 1 epoch)
#
# each at the default thread count, ROUNDS rounds in the order char_lm, gpt,
# gpt, char_lm, ... (alternating, so that a machine that slows down mid-run
# does not favour one); the GPT's seed is the round number (the LSTM's is
# its default: its bits per byte repeat exactly, the GPT's show the spread
# over seeds). Wall time is each program's own wall_s (data loading,
# training, evaluation, samples, saving). Goal (issue 18): the GPT's bits
# per byte below the LSTM's in no more wall time. Prints every run, the
# medians and the verdict.
# Env: ROUNDS (2), CC (gcc), DATA (/usr/share/games/fortunes).
set -u
cd "$(dirname "$0")/.." || exit 1
B=build/bench
mkdir -p "$B"
CC=${CC:-gcc}
ROUNDS=${ROUNDS:-2}
DATA=${DATA:-/usr/share/games/fortunes}
FAST="-std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude"
GPT_FLAGS="--embed 128 --layers 2 --ctx 48 --batch 24 --lr 5e-3 --rope --shift"
[ -d "$DATA" ] || { echo "run_lm: SKIP: no $DATA (apt-get install fortunes)"; exit 0; }
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
for ex in char_lm gpt; do
  $CC $FAST examples/$ex.c -o $B/$ex -lopenblas -lm || { echo "run_lm: building $ex failed"; exit 1; }
done
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
med() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
run() { # name seed
  local out
  if [ "$1" = char_lm ]; then out=$(cd "$T" && "$OLDPWD/$B/char_lm" --data "$DATA" --quiet 2>&1 | grep '^result:')
  else out=$(cd "$T" && "$OLDPWD/$B/gpt" --data "$DATA" $GPT_FLAGS --seed "$2" --quiet 2>&1 | grep '^result:'); fi
  [ -n "$out" ] || { echo "run_lm: $1 gave no result line"; return 1; }
  local bpb wall
  bpb=$(echo "$out" | field 'test_bp[bc]')
  wall=$(echo "$out" | field wall_s)
  printf '%-8s seed %-2s  %s bits per byte  %7.1f s\n' "$1" "${2:-1}" "$bpb" "$wall"
  echo "$bpb" >> "$T/$1.bpb"; echo "$wall" >> "$T/$1.wall"
}
status=0
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run char_lm || status=1; run gpt "$r" || status=1
  else run gpt "$r" || status=1; run char_lm || status=1; fi
done
[ $status = 0 ] || exit 1
cb=$(med < "$T/char_lm.bpb"); cw=$(med < "$T/char_lm.wall")
gb=$(med < "$T/gpt.bpb"); gw=$(med < "$T/gpt.wall")
echo "medians: char_lm $cb bits per byte in $cw s; gpt ($GPT_FLAGS) $gb in $gw s"
awk -v cb="$cb" -v cw="$cw" -v gb="$gb" -v gw="$gw" 'BEGIN {
  printf "gpt / char_lm wall time %.2fx, bits per byte %+.4f: %s\n", gw / cw, gb - cb,
         (gb < cb && gw <= cw) ? "goal met (lower bits per byte in no more time)" : "goal MISSED" }'
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
