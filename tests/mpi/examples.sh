#!/usr/bin/env bash
# tests/mpi/examples.sh BUILD_DIR - the Fashion-MNIST examples built with
# mpicc -DDL_USE_MPI, as the README shows, under mpirun -np 2:
#   - 2 ranks train what 1 process trains (same steps, test loss within 1e-3,
#     accuracy within 0.003: only the order of float additions differs)
#   - a 2-rank run stopped after epoch 1 and resumed on 2 ranks ends exactly
#     like the uninterrupted 2-rank run; resuming it on 1 process is refused
#   - a --batch that does not split over the ranks, and a missing data set,
#     end both ranks with one message and a non-zero status
#   - the CNN example runs on 2 ranks
set -u
B=${1:-build/tests}
D=$(mktemp -d "${TMPDIR:-/tmp}/dl_mpi_ex.XXXXXX")
trap 'rm -rf "$D"' EXIT
MPIRUN="timeout 300 mpirun -np 2 --oversubscribe --allow-run-as-root"
export OMP_NUM_THREADS=1
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
field() { sed -n "s/^result: .*$1=\([^ ]*\).*/\1/p" "$2" | tail -n 1; }
for e in fashion_mlp fashion_cnn; do
  mpicc -std=c11 -O2 -Wall -Wextra -Wpedantic -Werror -DDL_USE_MPI -Iinclude examples/$e.c -o "$B/${e}_mpi" -lz -lm || exit 1
done
M="$B/fashion_mlp_mpi"
C="--subset 3000 --epochs 2 --quiet --threads 1"
cd "$D"
"$OLDPWD/$M" $C --save one.st --csv one.csv >one.log 2>&1 || no "1 process: exit $?"
$MPIRUN "$OLDPWD/$M" $C --save two.st --csv two.csv >two.log 2>&1 || no "2 ranks: exit $?"
for f in one two; do grep -q '^result:' $f.log || { no "$f: no result line"; tail -5 $f.log; }; done
[ "$(grep -c '^result:' two.log)" = 1 ] || no "2 ranks: the result line must come from rank 0 only"
[ "$(field steps one.log)" = "$(field steps two.log)" ] || no "steps differ: $(field steps one.log) vs $(field steps two.log)"
awk -v a="$(field test_loss one.log)" -v b="$(field test_loss two.log)" -v c="$(field test_acc one.log)" \
    -v d="$(field test_acc two.log)" 'BEGIN { l = a - b; k = c - d; if (l < 0) l = -l; if (k < 0) k = -k;
    exit !(a != "" && b != "" && l <= 1e-3 && k <= 0.003) }' ||
  no "1 process (loss $(field test_loss one.log), acc $(field test_acc one.log)) vs 2 ranks (loss $(field test_loss two.log), acc $(field test_acc two.log))"
[ -s two.st ] && [ -s two.csv ] || no "2 ranks: rank 0 wrote no weights or CSV"
grep -q '^2 ranks (MPI)' two.log || no "2 ranks: the program did not say it runs on 2 ranks"

# stop after epoch 1, resume on 2 ranks: the uninterrupted run's result
$MPIRUN "$OLDPWD/$M" $C --checkpoint ck.st --stop-after 1 --save s1.st --csv s.csv >s1.log 2>&1 || no "stop-after: exit $?"
$MPIRUN "$OLDPWD/$M" $C --resume ck.st --save s2.st --csv s.csv >s2.log 2>&1 || no "resume on 2 ranks: exit $?"
[ "$(field test_loss s2.log)" = "$(field test_loss two.log)" ] && [ "$(field test_acc s2.log)" = "$(field test_acc two.log)" ] ||
  no "resumed on 2 ranks: loss $(field test_loss s2.log) acc $(field test_acc s2.log); uninterrupted: $(field test_loss two.log) $(field test_acc two.log)"
"$OLDPWD/$M" $C --resume ck.st --save s3.st >s3.log 2>&1; rc=$?
{ [ $rc -ge 1 ] && [ $rc -le 127 ] && grep -q 'ranks' s3.log; } || { no "resume of a 2-rank checkpoint on 1 process: exit $rc"; tail -3 s3.log; }

# errors: one message, both ranks end
$MPIRUN "$OLDPWD/$M" $C --batch 63 >b.log 2>&1 && no "--batch 63 on 2 ranks was accepted"
grep -q 'does not split evenly over 2 ranks' b.log || { no "--batch 63: message"; tail -3 b.log; }
$MPIRUN "$OLDPWD/$M" $C --data "$D/none" >n.log 2>&1 && no "a missing data set was accepted"
[ "$(grep -c "$D/none" n.log)" = 1 ] || { no "a missing data set: want one message naming it (rank 0's)"; tail -5 n.log; }

$MPIRUN "$OLDPWD/$B/fashion_cnn_mpi" --subset 256 --test-subset 200 --epochs 1 --quiet --threads 1 \
  --save cnn.st --csv cnn.csv >cnn.log 2>&1 || no "the CNN on 2 ranks: exit $?"
grep -q '^result:' cnn.log || { no "the CNN on 2 ranks: no result"; tail -5 cnn.log; }
echo "examples under mpirun: $fails failed"
[ $fails -eq 0 ]
