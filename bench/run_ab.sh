#!/usr/bin/env bash
# bench/run_ab.sh BASE [ROUNDS] - the library at commit BASE (A) against this
# working tree (B), built the same way and run alternately in one script, so
# that a refactoring can show its figures stayed within noise:
#   - examples/fashion_mlp.c and examples/fashion_cnn.c, training samples/s
#     (their own train_samples_per_s) at 2 threads and at 1 thread, built with
#     the README's fast flags (-O3 -march=native -fopenmp -DDL_USE_OPENBLAS);
#     the MLP also at plain -O2 (built-in GEMM, no threads);
#   - bench/bench_fused.c (DL_ASSIGN y = tanh(a*b + c) and y = a*b + c, GB/s)
#     at 2 threads;
# ROUNDS rounds (default 3), A then B in odd rounds, B then A in even ones;
# medians, and the ratio B/A. Needs the Fashion-MNIST package for the
# examples. Prints the figures and exits 0 (a benchmark, not a test).
set -u
cd "$(dirname "$0")/.." || exit 1
BASE=${1:?usage: bench/run_ab.sh BASE_COMMIT [ROUNDS]}
ROUNDS=${2:-3}
# the examples refuse --chart without libstb-dev (make bench installs it)
CHART=""; [ -r /usr/include/stb/stb_image_write.h ] && CHART=1
W=$(mktemp -d "${TMPDIR:-/tmp}/dl_ab.XXXXXX")
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/A" "$W/B"
git archive "$BASE" include examples bench | tar -x -C "$W/A" || { echo "no such commit: $BASE"; exit 1; }
cp -r include examples bench "$W/B/"
FAST="-std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS"
for v in A B; do
  ( cd "$W/$v" &&
    gcc $FAST -Iinclude examples/fashion_mlp.c -o mlp -lopenblas -lz -lm &&
    gcc -std=c11 -O2 -Iinclude examples/fashion_mlp.c -o mlp_o2 -lz -lm &&
    gcc $FAST -Iinclude examples/fashion_cnn.c -o cnn -lopenblas -lz -lm &&
    gcc -std=c11 -O3 -march=native -fopenmp -Iinclude -Ibench bench/bench_fused.c -o fused -lm ) 2>"$W/build_$v.log" ||
    { echo "build of $v failed:"; tail -20 "$W/build_$v.log"; exit 1; }
done
sps() { sed -n 's/.*train_samples_per_s=\([0-9.]*\).*/\1/p' | tail -n 1; }
run_one() { # variant key
  local v=$1 key=$2 d="$W/$v" out
  case $key in
    mlp2) out=$("$d/mlp" --epochs 1 --subset 20000 --threads 2 --save "$d/w.st" --csv "$d/l.csv" ${CHART:+--chart "$d/c.png"} --quiet 2>&1 | sps) ;;
    mlp1) out=$("$d/mlp" --epochs 1 --subset 20000 --threads 1 --save "$d/w.st" --csv "$d/l.csv" ${CHART:+--chart "$d/c.png"} --quiet 2>&1 | sps) ;;
    mlpo2) out=$("$d/mlp_o2" --epochs 1 --subset 10000 --threads 1 --save "$d/w.st" --csv "$d/l.csv" ${CHART:+--chart "$d/c.png"} --quiet 2>&1 | sps) ;;
    cnn2) out=$("$d/cnn" --epochs 1 --subset 2048 --test-subset 512 --threads 2 --save "$d/w.st" --csv "$d/l.csv" ${CHART:+--chart "$d/c.png"} --quiet 2>&1 | sps) ;;
    cnn1) out=$("$d/cnn" --epochs 1 --subset 2048 --test-subset 512 --threads 1 --save "$d/w.st" --csv "$d/l.csv" ${CHART:+--chart "$d/c.png"} --quiet 2>&1 | sps) ;;
    fused) out=$(OMP_NUM_THREADS=2 "$d/fused" 24 7 2 | sed -n 's/^fused_gbs=\([0-9.]*\) .*/\1/p') ;;
    fma) out=$(OMP_NUM_THREADS=2 "$d/fused" 24 7 2 | sed -n 's/.*fused_fma_gbs=\([0-9.]*\).*/\1/p') ;;
  esac
  echo "${out:-nan}"
}
keys="mlp2 mlp1 mlpo2 cnn2 cnn1 fused fma"
for r in $(seq "$ROUNDS"); do
  order="A B"; [ $((r % 2)) = 0 ] && order="B A"
  for k in $keys; do for v in $order; do echo "$k $v $(run_one "$v" "$k")" >>"$W/results"; done; done
done
med() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "A = $BASE, B = this working tree; medians of $ROUNDS rounds (each figure: higher is better)"
printf '%-36s %12s %12s %8s\n' figure A B B/A
for k in $keys; do
  a=$(awk -v k="$k" '$1 == k && $2 == "A" { print $3 }' "$W/results" | med)
  b=$(awk -v k="$k" '$1 == k && $2 == "B" { print $3 }' "$W/results" | med)
  case $k in
    mlp2) n="MLP samples/s, 2 threads (fast)" ;; mlp1) n="MLP samples/s, 1 thread (fast)" ;;
    mlpo2) n="MLP samples/s, -O2 built-in GEMM" ;; cnn2) n="CNN samples/s, 2 threads (fast)" ;;
    cnn1) n="CNN samples/s, 1 thread (fast)" ;; fused) n="fused tanh(a*b+c) GB/s, 2 threads" ;;
    fma) n="fused a*b+c GB/s, 2 threads" ;;
  esac
  awk -v n="$n" -v a="$a" -v b="$b" 'BEGIN { printf "%-36s %12.1f %12.1f %8.3f\n", n, a, b, (a > 0 ? b / a : 0) }'
done
echo "all runs (figure variant value):"; cat "$W/results" | tr '\n' ';'; echo
exit 0
