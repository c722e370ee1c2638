#!/usr/bin/env bash
# bench/run_train.sh - whole training runs of the examples, as a user runs
# them, against PyTorch eager (Debian's /usr/bin/python3 with python3-torch,
# bench/torch_train.py) in the same run:
#
#   a. training samples/s of examples/fashion_mlp.c (784-256-128-10, Adam,
#      batch 64, cosine lr) and examples/fashion_cnn.c (conv 32 + BN + pool,
#      conv 64 + BN + pool, 3136-128-10 with dropout) at THREADS threads, vs
#      the same model, batch, optimizer, schedule and thread count in PyTorch,
#      and vs the dl.h program on 1 thread; also both on 1 thread (less
#      sensitive to other processes on a shared machine). Each program reports
#      training samples over training seconds (evaluation and file loading
#      excluded). ROUNDS rounds, each running dl.h and torch at THREADS and at
#      1 thread, the order reversed every other round; medians. Goals: MLP >=
#      2x torch, CNN >= 1x.
#   b. peak resident memory (max RSS) of those processes (dl.h at THREADS vs
#      torch), median over the rounds. Goal (MLP): <= 1/4 of torch's.
#   c. heap allocations per training step in steady state: bench/malloc_count.c
#      (LD_PRELOAD) counts every malloc/calloc/realloc/*memalign/aligned_alloc
#      of a whole run; runs that differ only in --subset (so only in the number
#      of training steps of the one epoch; same data loading, same evaluation
#      of the same test set, same log/chart/save) give per step
#        (allocs(1 epoch, N2 samples) - allocs(1 epoch, N1)) / (steps(N2) - steps(N1))
#      i.e. the steps after the first N1/64 (warm-up done); N1, N2 multiples of
#      64 (no partial batch). Split into calls from the program's own code (dl.h
#      and the example) and from shared libraries (libgomp, OpenBLAS, libc).
#      A third run of 2 epochs on N1 gives the cost of one more epoch beyond its
#      steps (evaluation, CSV, chart, reshuffle). Goal: 0 per step (the
#      verdicts allow |x| < 0.05, 2 stray allocations in 50 steps). The PNG
#      chart's encoder once made a number of allocations that depended on
#      the picture (+-25 per run); it takes one chunk per chart now.
#   d. compile time of `$CC -std=c11 -O2 -Iinclude examples/fashion_mlp.c -lz -lm`,
#      median of COMPILE_REPS. Goal: < 3 s.
#   e. the FMA peak of this machine, measured in the same run (bench/fma_peak.c:
#      vector FMA chains, 1 thread and THREADS threads), and each training
#      speed as a fraction of it: the MLP step is 1.007 MFLOP per sample
#      (forward, weight gradients, input gradients of layers 2 and 3), the
#      CNN's 25.0 MFLOP. Goals (issue 19): MLP at 1 thread >= 50% of one
#      core's peak, CNN >= 40% of THREADS cores'. The peak is measured three
#      times at the start (the best is printed), and again just after each
#      dl.h run (dl, dl1), followed by a 4 s pause: for about 3 s after
#      fma_peak this VM ran the 2-thread MLP at 72k samples/s instead of
#      134k (each member's share of a team loop took 91 us instead of 54)
#      and the CNN 12% slower, while the 1-thread runs and PyTorch (whose
#      start takes longer) were unchanged; measured before the runs, it
#      halved 2 of the 3 rounds' MLP figures. (The cause, found since: after
#      fma_peak the host often moves the two virtual CPUs far apart, h.;
#      twice in 4 tries, each time for tens of seconds.) The speed drifts by tens of
#      percent within minutes too (fma_peak 157-172 GFLOP/s, fashion_mlp
#      on 1 thread 45k-85k samples/s), so the judged fraction is the median
#      over the runs of each run's speed over the peak measured beside it.
#      The 2-thread/1-thread goal (>= 1.7x, MLP) is judged on the median
#      of the ratios of PAIRS pairs of dl.h runs started back to back (the
#      order alternating; no other program in between), each pair's ratio
#      printed; the 3 rounds' ratio is printed beside it.
#   f. PyTorch's plain loop too (torch_train.py loop=plain: no per-step
#      readback of the loss and accuracy), at THREADS and 1 thread, beside
#      the readback loop that matches what the C programs do.
#   g. under contention: one busy process per core (a spinning loop started
#      by this script), dl.h at THREADS threads and at 1 thread, CONTENDED
#      rounds; goal >= 0.9x of its own 1-thread speed.
#   h. how far apart the cores are: bench/core_latency.c (one cache line
#      passed between two pinned threads, the round trip) just before each
#      dl.h run, printed as rt_ns=. This VM's two cores are 55-90 ns apart
#      most of the time and 330-360 ns for stretches of minutes, where the
#      2-thread runs are slower (the MLP at about 80k samples/s against 134k,
#      the CNN about 10% slower). The pairs' goal is judged on all pairs; the
#      median of the pairs run with the cores near (both under 150 ns) is
#      printed beside it, unjudged.
# PyTorch at its best (f.): the fastest of its four medians, readback or
# plain loop, THREADS or 1 thread; goal for the CNN (issue 19): >= 3x.
#
# The CNN runs use a copy of the data set cut to the first CNN_TEST test
# images (and the first CNN_SUBSET training images) through --data, so that
# its per-epoch evaluation stays short; the MLP runs read the whole data set.
# With more runnable threads than cores (see the load average printed at
# the start and the end), OpenMP's spinning barriers make multi-threaded runs
# of both much slower than 1 thread: absolute numbers are only as good as the
# machine is quiet.
# Env: THREADS (2), ROUNDS (3), CONTENDED (3), PAIRS (7), MLP_SUBSET (20000), CNN_SUBSET (2048),
# CNN_TEST (1000), COMPILE_REPS (3), DATA (Debian's dataset-fashion-mnist
# directory), CC (gcc), PY (/usr/bin/python3).
set -u
cd "$(dirname "$0")/.." || exit 1
B=build/bench
mkdir -p "$B"
CC=${CC:-gcc}
PY=${PY:-/usr/bin/python3}
source bench/torch_env.sh; torch_env_init "$PY"
THREADS=${THREADS:-2}; ROUNDS=${ROUNDS:-3}; CONTENDED=${CONTENDED:-3}; PAIRS=${PAIRS:-7}
MLP_SUBSET=${MLP_SUBSET:-20000}; CNN_SUBSET=${CNN_SUBSET:-2048}; CNN_TEST=${CNN_TEST:-1000}
COMPILE_REPS=${COMPILE_REPS:-3}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
FAST="-std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
RES=$B/train.txt
: > "$RES"
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?"; }
echo "load average at start: $(load) ($(nproc 2>/dev/null || echo ?) cores)"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [ -r "$DATA/$f" ] || { echo "run_train: $DATA/$f is missing (apt-get install dataset-fashion-mnist)"; exit 1; }
done
# The examples draw their PNG chart only where libstb-dev is installed
# (`make bench` installs it: tools/deps.sh bench); without it they refuse
# --chart, so the runs go without one (the allocation counts then leave out
# the chart's encoder).
CHART=(--chart "$T/chart.png")
if [ ! -r /usr/include/stb/stb_image_write.h ]; then
  CHART=()
  echo "run_train: NOTE no stb_image_write.h (apt-get install libstb-dev): the runs draw no chart"
fi

# Build: the two examples the fast way, the allocation counter.
for ex in fashion_mlp fashion_cnn; do
  rm -f "$B/$ex"
  if [ -f examples/$ex.c ]; then
    $CC $FAST examples/$ex.c -o $B/$ex -lopenblas -lz -lm || { echo "run_train: building $ex failed"; exit 1; }
  else
    echo "run_train: examples/$ex.c does not exist: skipped"
  fi
done
$CC -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -fPIC -shared bench/malloc_count.c -o $B/malloc_count.so -ldl ||
  { echo "run_train: building malloc_count.so failed"; exit 1; }
$CC -O3 -march=native -ffp-contract=fast -fopenmp bench/fma_peak.c -o $B/fma_peak -lm || { echo "run_train: building fma_peak failed"; exit 1; }
$CC -std=c11 -O2 -pthread bench/core_latency.c -o $B/core_latency || { echo "run_train: building core_latency failed"; exit 1; }

# The CNN's data: the same IDX gzip files, cut to fewer images.
cut_data() { # DIR NTRAIN NTEST
  "$PY" - "$DATA" "$1" "$2" "$3" <<'EOF'
import gzip, struct, sys
src, dst, ntrain, ntest = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for name, n in (("train-images-idx3-ubyte.gz", ntrain), ("train-labels-idx1-ubyte.gz", ntrain),
                ("t10k-images-idx3-ubyte.gz", ntest), ("t10k-labels-idx1-ubyte.gz", ntest)):
    raw = gzip.open(f"{src}/{name}", "rb").read()
    dims = raw[3]
    shape = list(struct.unpack(">%dI" % dims, raw[4:4 + 4 * dims]))
    per = 1
    for d in shape[1:]:
        per *= d
    n = min(n, shape[0])
    shape[0] = n
    head = raw[:4] + struct.pack(">%dI" % dims, *shape)
    with gzip.open(f"{dst}/{name}", "wb", compresslevel=1) as f:
        f.write(head + raw[4 + 4 * dims:4 + 4 * dims + n * per])
EOF
}
mkdir -p "$T/cnn_data"
cut_data "$T/cnn_data" $((CNN_SUBSET > 3840 ? CNN_SUBSET : 3840)) "$CNN_TEST" || { echo "run_train: cutting the CNN's data failed"; exit 1; }

# Peak RSS: /usr/bin/time, else the same from Python's getrusage(RUSAGE_CHILDREN).
peak() { # RSSFILE CMD... (stdout of CMD goes to our stdout)
  local rss=$1; shift
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%M" -o "$rss" "$@"
  else
    "$PY" -c 'import resource, subprocess, sys
r = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r)' "$rss" "$@"
  fi
}

# One run; appends "MODEL WHO sps=X rss_kb=Y" to $RES. WHO: dl, dl1, torch, torch1,
# torchp, torchp1 (the plain loop), or dlc, dlc1 (dl.h under contention).
one() { # MODEL WHO
  local model=$1 who=$2 th=$THREADS prog subset data out=$T/out.txt sps loop=readback tags="" # tags: " rt_ns=..." and " peak=..." appended to the result line
  case $who in dl1 | torch1 | torchp1 | dlc1 | dlp1) th=1 ;; esac
  case $who in torchp | torchp1) loop=plain ;; esac
  if [ "$model" = mlp ]; then prog=$B/fashion_mlp subset=$MLP_SUBSET data=$DATA
  else prog=$B/fashion_cnn subset=$CNN_SUBSET data=$T/cnn_data; fi
  if [[ $who == torch* ]]; then
    # (peak is a shell function: env runs inside it, exec'ing PyTorch in the process it measures)
    peak "$T/rss" env "${TORCH_ENV[@]}" OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th "$PY" bench/torch_train.py "$model" "$subset" "$th" 1 64 "$data" cpu $loop > "$out" 2>&1
    if grep -q '^SKIP' "$out"; then echo "$model $who SKIP" >> "$RES"; head -1 "$out"; return 0; fi
    sps=$(sed -n 's/^torch_train .*samples_per_s=\([0-9.]*\).*/\1/p' "$out")
  else
    # how far apart the two cores are just before the run (see h.); not under contention,
    # where the busy processes hold the cores the two threads would pass the line between
    case $who in dlc | dlc1) ;; *) tags=" rt_ns=$($B/core_latency | sed -n 's/^core_latency roundtrip_ns=\([-0-9.]*\).*/\1/p')" ;; esac
    OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th peak "$T/rss" "$prog" --epochs 1 --subset "$subset" --threads "$th" --quiet \
      --data "$data" --save "$T/w.safetensors" --csv "$T/log.csv" "${CHART[@]}" > "$out" 2>&1
    if [ "$who" = dl ] || [ "$who" = dl1 ]; then # the FMA peak just after the run (see e.), then 4 s for it to wear off
      tags="$tags$(OMP_NUM_THREADS=$THREADS $B/fma_peak | sed -n "s/^fma_peak threads=$th gflops=\([0-9.]*\).*/ peak=\1/p")"
      sleep 4
    fi
    sps=$(sed -n 's/^result: .*train_samples_per_s=\([0-9.]*\).*/\1/p' "$out")
  fi
  if [ -z "$sps" ]; then echo "run_train: $model $who run failed:"; tail -5 "$out"; return 1; fi
  echo "$model $who sps=$sps rss_kb=$(tail -1 "$T/rss") threads=$th$tags" | tee -a "$RES"
}

status=0
echo "== FMA peak =="
for _ in 1 2 3; do $B/fma_peak | tee -a "$RES"; done
for model in mlp cnn; do
  [ -x $B/fashion_$model ] || continue
  echo "== $model: $ROUNDS rounds of dl.h and torch (readback and plain loops), $THREADS threads and 1 thread =="
  for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="dl torch torchp dl1 torch1 torchp1"; else order="torchp1 torch1 dl1 torchp torch dl"; fi
    for who in $order; do one "$model" "$who" || status=1; done
  done
done
# N rounds of runs A and B back to back, the order alternating
alternate() { # MODEL N A B
  local r who order
  for r in $(seq 1 "$2"); do
    if [ $((r % 2)) = 1 ]; then order="$3 $4"; else order="$4 $3"; fi
    for who in $order; do one "$1" "$who" || status=1; done
  done
}
# scaling: PAIRS back-to-back pairs of dl.h at THREADS and at 1 thread (dlp,
# dlp1), judged on the median of the pairs' ratios
for model in mlp cnn; do
  [ -x $B/fashion_$model ] || continue
  echo "== $model: $PAIRS back-to-back pairs of dl.h at $THREADS threads and 1 thread =="
  alternate "$model" "$PAIRS" dlp dlp1
done
# contention: one spinning process per core, started here, for the dlc runs
busy_pids=()
busy_start() { local k; for k in $(seq 1 "$(nproc 2>/dev/null || echo 2)"); do ( while :; do :; done ) & busy_pids+=($!); done; }
busy_stop() { kill "${busy_pids[@]}" 2>/dev/null; wait "${busy_pids[@]}" 2>/dev/null; busy_pids=(); }
trap 'busy_stop; rm -rf "$T"' EXIT
for model in mlp cnn; do
  [ -x $B/fashion_$model ] || continue
  echo "== $model under contention: one busy process per core, $CONTENDED rounds of dl.h at $THREADS threads and 1 thread =="
  busy_start
  alternate "$model" "$CONTENDED" dlc dlc1
  busy_stop
done

# Allocations: 1 epoch on N1 and on N2 samples, 2 epochs on N1.
allocs() { # MODEL N1 N2 DATA
  local model=$1 n1=$2 n2=$3 data=$4 e n c
  for run in "1 $n1" "1 $n2" "2 $n1"; do
    set -- $run
    e=$1 n=$2
    rm -f "$T/count"
    OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS LD_PRELOAD="$PWD/$B/malloc_count.so" DL_MALLOC_COUNT_OUT="$T/count" \
      $B/fashion_$model --epochs "$e" --subset "$n" --threads "$THREADS" --quiet --data "$data" \
      --save "$T/w.safetensors" --csv "$T/log.csv" "${CHART[@]}" > "$T/out.txt" 2>&1 ||
      { echo "run_train: $model allocation run failed:"; tail -5 "$T/out.txt"; return 1; }
    c=$(cat "$T/count" 2>/dev/null)
    [ -n "$c" ] || { echo "run_train: malloc_count.so wrote nothing"; return 1; }
    echo "$model allocs epochs=$e subset=$n steps=$(( (n + 63) / 64 * e )) ${c#malloc_count: }" | tee -a "$RES"
  done
}
echo "== heap allocations ($THREADS threads) =="
[ -x $B/fashion_mlp ] && { allocs mlp 6400 19200 "$DATA" || status=1; }
[ -x $B/fashion_cnn ] && { allocs cnn 640 3840 "$T/cnn_data" || status=1; }

echo "== compile time: $CC -std=c11 -O2 -Iinclude examples/fashion_mlp.c -lz -lm =="
for _ in $(seq 1 "$COMPILE_REPS"); do
  t0=$EPOCHREALTIME
  $CC -std=c11 -O2 -Iinclude examples/fashion_mlp.c -o "$T/fashion_mlp_O2" -lz -lm || { echo "run_train: -O2 build failed"; status=1; break; }
  t1=$EPOCHREALTIME
  echo "compile_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" | tee -a "$RES"
done
echo "load average at the end: $(load)"
if awk -v n="$(nproc 2>/dev/null || echo 2)" '{ exit !($1 > n) }' /proc/loadavg 2>/dev/null; then
  echo "NOTE: more runnable threads than cores: the multi-threaded timings measure contention as much as code"
fi

echo
awk -v th="$THREADS" -v rounds="$ROUNDS" '
  function med(s,   n, x, i, j, tmp) { n = split(s, x, " "); if (n == 0) return -1
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] + 0 < x[i] + 0) { tmp = x[i]; x[i] = x[j]; x[j] = tmp }
    return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
  function val(f,   a) { split(f, a, "="); return a[2] }
  $1 == "fma_peak" { split($2, a, "="); g = val($3) + 0; if (g > peak[a[2]]) peak[a[2]] = g; next }
  $2 ~ /^(dl|dl1|dlc|dlc1|dlp|dlp1|torch|torch1|torchp|torchp1)$/ { if ($3 == "SKIP") { skip[$1] = 1; next }
    sps[$1, $2] = sps[$1, $2] " " val($3); rss[$1, $2] = rss[$1, $2] " " val($4)
    for (i = 6; i <= NF; i++) {
      if ($i ~ /^peak=/) { pk[$1, $2] = pk[$1, $2] " " val($i); fr[$1, $2] = fr[$1, $2] " " val($3) / val($i) }
      if ($i ~ /^rt_ns=/) rt[$1, $2] = rt[$1, $2] " " val($i) } }
  $2 == "allocs" { k = $1 SUBSEP val($3) SUBSEP val($4)
    for (i = 5; i <= NF; i++) { split($i, a, "="); al[k, a[1]] = a[2] }
    if (val($3) == 1) { if (!(($1, "n1") in al)) al[$1, "n1"] = val($4); else al[$1, "n2"] = val($4) } }
  /^compile_s=/ { cs = cs " " val($1) }
  function ok(c) { return c ? "ok" : "MISSED" }
  function row(name, a, b, r, goal, verdict) { printf "%-44s %12s %12s %9s   %-8s %s\n", name, a, b, r, goal, verdict }
  END {
    printf "%-44s %12s %12s %9s   %-8s %s\n", "training (medians of " rounds " rounds)", "dl.h", "reference", "ratio", "goal", ""
    for (m = 0; m < 2; m++) {
      mod = m == 0 ? "mlp" : "cnn"; M = m == 0 ? "MLP" : "CNN"; goal = m == 0 ? 2 : 1
      if (sps[mod, "dl"] == "") continue
      d = med(sps[mod, "dl"]); d1 = med(sps[mod, "dl1"])
      if (skip[mod] || sps[mod, "torch"] == "") row(M " samples/s, " th " thr, vs torch", sprintf("%.0f", d), "SKIP", "SKIP", ">= " goal "x", "")
      else { t = med(sps[mod, "torch"]); row(M " samples/s, " th " thr, vs torch", sprintf("%.0f", d), sprintf("%.0f", t), sprintf("%.2fx", d / t), ">= " goal "x", ok(d / t >= goal)) }
      if (skip[mod] || sps[mod, "torch1"] == "") row(M " samples/s, 1 thr, vs torch 1 thr", sprintf("%.0f", d1), "SKIP", "SKIP", "", "")
      else { t1 = med(sps[mod, "torch1"]); row(M " samples/s, 1 thr, vs torch 1 thr", sprintf("%.0f", d1), sprintf("%.0f", t1), sprintf("%.2fx", d1 / t1), "(" goal "x)", ok(d1 / t1 >= goal)) }
      if (!skip[mod] && sps[mod, "torchp"] != "") {
        tp = med(sps[mod, "torchp"]); tp1 = med(sps[mod, "torchp1"])
        row(M " samples/s, " th " thr, vs torch plain loop", sprintf("%.0f", d), sprintf("%.0f", tp), sprintf("%.2fx", d / tp), "", "")
        row(M " samples/s, 1 thr, vs torch plain loop 1 thr", sprintf("%.0f", d1), sprintf("%.0f", tp1), sprintf("%.2fx", d1 / tp1), m == 0 ? ">= 1.8x" : "", m == 0 ? ok(d1 / tp1 >= 1.8) : "")
        # PyTorch at its best: the fastest of its four medians (either loop, THREADS or 1 thread)
        tb = t; tbn = "readback, " th " thr"
        if (t1 > tb) { tb = t1; tbn = "readback, 1 thr" }
        if (tp > tb) { tb = tp; tbn = "plain, " th " thr" }
        if (tp1 > tb) { tb = tp1; tbn = "plain, 1 thr" }
        row(M " samples/s, " th " thr, vs torch at its best", sprintf("%.0f", d), sprintf("%.0f", tb), sprintf("%.2fx", d / tb), m == 1 ? ">= 3x" : "", m == 1 ? ok(d / tb >= 3) : "")
        printf "    (torch at its best: the %s loop)\n", tbn
      }
      row(M " samples/s, " th " thr vs dl.h on 1 thr", sprintf("%.0f", d), sprintf("%.0f", d1), sprintf("%.2fx", d / d1), "", "")
      nr = split(substr(sps[mod, "dl"], 2), xa, " "); split(substr(sps[mod, "dl1"], 2), xb, " "); rr = ""
      for (i = 1; i <= nr; i++) if (xb[i] > 0) rr = rr " " xa[i] / xb[i]
      if (rr != "") row("  the same, median of per-round ratios", "", "", sprintf("%.2fx", med(rr)), "", "")
      np = split(substr(sps[mod, "dlp"], 2), xa, " "); split(substr(sps[mod, "dlp1"], 2), xb, " "); rr = ""; rl = ""
      for (i = 1; i <= np; i++) if (xb[i] > 0) { rr = rr " " xa[i] / xb[i]; rl = rl sprintf(" %.2f", xa[i] / xb[i]) }
      if (rr != "") {
        row("  median of " np " back-to-back pair ratios", sprintf("%.0f", med(sps[mod, "dlp"])), sprintf("%.0f", med(sps[mod, "dlp1"])), sprintf("%.2fx", med(rr)), m == 0 ? ">= 1.7x" : "", m == 0 ? ok(med(rr) >= 1.7) : "")
        printf "    ratio of each pair:%s\n", rl
        # how far apart the cores were (core_latency, h.): a pair counts as near when both runs began under 150 ns
        split(substr(rt[mod, "dlp"], 2), ya, " "); split(substr(rt[mod, "dlp1"], 2), yb, " "); rl = ""; rn = ""; nn = 0
        for (i = 1; i <= np; i++) if (xb[i] > 0 && (i in ya) && (i in yb)) {
          q = ya[i] + 0 > yb[i] + 0 ? ya[i] + 0 : yb[i] + 0; rl = rl sprintf(" %.0f", q)
          if (q >= 0 && q < 150) { rn = rn " " xa[i] / xb[i]; nn++ } }
        if (rl != "") {
          printf "    cores round trip (ns), each pair:%s\n", rl
          if (nn > 0) row("  median of the " nn " pairs run with the cores near", "", "", sprintf("%.2fx", med(rn)), "", "")
        }
      }
      fl = m == 0 ? 1.007e6 : 25.0e6
      if (peak[1] > 0) row(M " GFLOP/s, 1 thr, of the 1-core FMA peak", sprintf("%.1f", d1 * fl / 1e9), sprintf("%.1f", peak[1]), sprintf("%.0f%%", 100 * d1 * fl / 1e9 / peak[1]), "", "")
      if (fr[mod, "dl1"] != "") { f1 = med(fr[mod, "dl1"]) * fl / 1e9
        row("  of the peak measured just after each run", "", sprintf("%.1f", med(pk[mod, "dl1"])), sprintf("%.0f%%", 100 * f1), m == 0 ? ">= 50%" : "", m == 0 ? ok(f1 >= 0.5) : "") }
      if (peak[th] > 0) row(M " GFLOP/s, " th " thr, of " th "-core FMA peak", sprintf("%.1f", d * fl / 1e9), sprintf("%.1f", peak[th]), sprintf("%.0f%%", 100 * d * fl / 1e9 / peak[th]), "", "")
      if (fr[mod, "dl"] != "") { f2 = med(fr[mod, "dl"]) * fl / 1e9
        row("  of the peak measured just after each run", "", sprintf("%.1f", med(pk[mod, "dl"])), sprintf("%.0f%%", 100 * f2), m == 1 ? ">= 40%" : "", m == 1 ? ok(f2 >= 0.4) : "") }
      if (sps[mod, "dlc"] != "" && sps[mod, "dlc1"] != "") {
        c = med(sps[mod, "dlc"]); c1 = med(sps[mod, "dlc1"])
        row(M " under contention: " th " thr vs 1 thr", sprintf("%.0f", c), sprintf("%.0f", c1), sprintf("%.2fx", c / c1), ">= 0.9x", ok(c / c1 >= 0.9))
      }
      dr = med(rss[mod, "dl"]) / 1024
      if (skip[mod] || rss[mod, "torch"] == "") row(M " peak RSS MB (" th " thr), vs torch", sprintf("%.1f", dr), "SKIP", "SKIP", m == 0 ? "<= 0.25" : "", "")
      else { tr = med(rss[mod, "torch"]) / 1024; row(M " peak RSS MB (" th " thr), vs torch", sprintf("%.1f", dr), sprintf("%.1f", tr), sprintf("%.2f", dr / tr), m == 0 ? "<= 0.25" : "", m == 0 ? ok(dr / tr <= 0.25) : "") }
    }
    for (m = 0; m < 2; m++) {
      mod = m == 0 ? "mlp" : "cnn"; M = m == 0 ? "MLP" : "CNN"
      if (!((mod, "n1") in al) || !((mod, "n2") in al)) continue
      n1 = al[mod, "n1"]; n2 = al[mod, "n2"]
      a1 = mod SUBSEP 1 SUBSEP n1; a2 = mod SUBSEP 1 SUBSEP n2; a3 = mod SUBSEP 2 SUBSEP n1
      ds = al[a2, "steps"] - al[a1, "steps"]
      per = (al[a2, "total"] - al[a1, "total"]) / ds
      row(M " allocations per step (steps " (al[a1, "steps"] + 1) "-" al[a2, "steps"] ")", sprintf("%.2f", per), "", "", "0", ok(per < 0.05 && per > -0.05))
      pp = (al[a2, "program"] - al[a1, "program"]) / ds
      row("  of which from dl.h / the program itself", sprintf("%.2f", pp), "", "", "0", ok(pp < 0.05 && pp > -0.05))
      row("  of which from libraries (libgomp, BLAS, libc)", sprintf("%.2f", (al[a2, "libs"] - al[a1, "libs"]) / ds), "", "", "", "")
      if ((a3, "total") in al)
        row("  one more epoch beyond its steps (eval, log)", sprintf("%.0f", al[a3, "total"] - al[a1, "total"] - per * al[a1, "steps"]), "", "", "", "")
      row("  whole 1-epoch run of " n1 " samples", al[a1, "total"], "", "", "", "")
    }
    if (cs != "") { c = med(cs); row("compile -O2 examples/fashion_mlp.c (s)", sprintf("%.2f", c), "", "", "< 3", ok(c < 3)) }
  }' "$RES"
exit $status
