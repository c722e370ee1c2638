#!/usr/bin/env bash
# bench/run_dist.sh - data-parallel throughput of examples/fashion_mlp.c
# under mpirun: 1 rank against 2 ranks, 1 thread each, OpenBLAS, on this
# machine's cores; the reference is the same program on 1 process in the
# same run. Global batch 64 (each rank 32) and 256 (each rank 128). Prints
# the median train_samples_per_s of RUNS runs of EPOCHS epochs each, the
# speed-up and the scaling efficiency (speed-up / ranks); checks that the
# two runs' test accuracy agree.
#
#   bash bench/run_dist.sh            RUNS=3 EPOCHS=2 by default
#   MCA="--mca coll_libnbc_iallreduce_algorithm 1" bash bench/run_dist.sh
#     (Open MPI's ring non-blocking all-reduce: 2x faster than its default
#      for a 1 MB gradient on 2 ranks on this machine, see the README)
set -u
cd "$(dirname "$0")/.."
B=build/bench
mkdir -p "$B"
RUNS=${RUNS:-3}
EPOCHS=${EPOCHS:-2}
MCA=${MCA:-}
command -v mpicc >/dev/null && command -v mpirun >/dev/null ||
  { echo "SKIP distributed benchmark: no mpicc/mpirun (apt-get install libopenmpi-dev openmpi-bin)"; exit 0; }
mpicc -std=c11 -O3 -march=native -fopenmp -DDL_USE_MPI -DDL_USE_OPENBLAS -DNDEBUG -Iinclude examples/fashion_mlp.c \
  -o "$B/fashion_mlp_mpi" -lopenblas -lz -lm || exit 1
D=$(mktemp -d "${TMPDIR:-/tmp}/dl_bench_dist.XXXXXX")
trap 'rm -rf "$D"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { sed -n "s/^result: .*$1=\([^ ]*\).*/\1/p" "$2" | tail -n 1; }
echo "== data-parallel MLP (784-256-128-10, Adam), $EPOCHS epochs, median of $RUNS runs, 1 thread per rank =="
echo "   $(getconf _NPROCESSORS_ONLN) cores; $(mpirun --version 2>/dev/null | head -n 1)${MCA:+; $MCA}"
for batch in 64 256; do
  for np in 1 2; do
    : >"$D/sps"
    for r in $(seq "$RUNS"); do
      (cd "$D" && timeout 600 mpirun -np $np --oversubscribe --allow-run-as-root $MCA "$OLDPWD/$B/fashion_mlp_mpi" \
        --threads 1 --epochs "$EPOCHS" --batch $batch --quiet --save x.st --csv x.csv >"$D/out" 2>&1) ||
        { echo "run failed:"; tail -5 "$D/out"; exit 1; }
      field train_samples_per_s "$D/out" >>"$D/sps"
      acc=$(field test_acc "$D/out")
    done
    m=$(median <"$D/sps")
    eval "sps_$np=$m acc_$np=$acc"
    printf "   batch %4d, %d rank(s): %9.0f samples/s (runs: %s), test_acc %s\n" $batch $np "$m" "$(tr '\n' ' ' <"$D/sps")" "$acc"
  done
  awk -v a="$sps_1" -v b="$sps_2" -v x="$acc_1" -v y="$acc_2" -v batch=$batch 'BEGIN {
    printf "   batch %4d: 2 ranks / 1 rank = %.2fx, scaling efficiency %.0f%%; |test_acc difference| %.4f\n",
      batch, b / a, 50 * b / a, (x > y ? x - y : y - x) }'
done
