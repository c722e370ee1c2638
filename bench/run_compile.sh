#!/usr/bin/env bash
# bench/run_compile.sh - compile cost of the library on this machine: wall-clock
# time of `$CC -c` (median of RUNS runs) at -O2 and with the README's fast
# flags, and the preprocessed size, for
#   1. a C file that only includes <stdio.h> (the reference),
#   2. a C file that only includes "dl.h",
#   3. examples/fashion_mlp.c (also its longest preprocessed line), as a
#      single file and with -DDL_LINK (the library compiled elsewhere),
#   4. examples/multi/, a program of three files built the compile-once way:
#      the library (dl.c, DL_IMPLEMENTATION) once, and the rebuild of one
#      edited file (train.c, -DDL_LINK),
# against the goals of issue 16: fashion_mlp.c <= 2.0 s at -O2, <= 3.0 s fast,
# <= 3 MB preprocessed (1 MB = 1,000,000 bytes); one file of the 3-file
# program rebuilt in <= 1.0 s. Exits 0 whether the goals are
# met or not; non-zero only when a compile fails.
#
#   bash bench/run_compile.sh          DL_BENCH_RUNS=3 by default
#   DL_BENCH_RUNS=1 bash bench/run_compile.sh
set -u
cd "$(dirname "$0")/.." || exit 1
CC=${CC:-gcc}
RUNS=${DL_BENCH_RUNS:-3}
case $RUNS in '' | *[!0-9]* | 0) echo "DL_BENCH_RUNS must be a positive integer (got '$RUNS')"; exit 2 ;; esac
D=$(mktemp -d "${TMPDIR:-/tmp}/dl_bench_compile.XXXXXX")
trap 'rm -rf "$D"' EXIT

printf '#include <stdio.h>\nint main(void) { return 0; }\n' >"$D/stdio_only.c"
printf '#include "dl.h"\nint main(void) { return 0; }\n' >"$D/dl_only.c"

O2_FLAGS="-std=c11 -O2 -Iinclude"
FAST_FLAGS="-std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude"
have_cblas=0
for h in /usr/include/cblas.h /usr/include/*/cblas.h /usr/include/x86_64-linux-gnu/cblas.h; do
  [ -f "$h" ] && { have_cblas=1; break; }
done
if [ $have_cblas = 0 ]; then
  FAST_FLAGS="-std=c11 -O3 -march=native -fopenmp -Iinclude"
  echo "note: cblas.h not found (libopenblas-dev missing?): fast flags without -DDL_USE_OPENBLAS"
fi

now() { date +%s.%N; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# human-readable size, 1 KB = 1000 bytes, 1 MB = 1000000 bytes
human() { awk -v b="$1" 'BEGIN { if (b >= 1e6) printf "%.1f MB", b / 1e6; else printf "%.0f KB", b / 1e3 }'; }

# ctime FILE FLAGS: median wall-clock seconds of RUNS compiles; fails (with
# the compiler's messages on stderr) when a compile fails
ctime() {
  local f=$1 flags=$2 t0 t1
  : >"$D/times"
  for _ in $(seq "$RUNS"); do
    t0=$(now)
    # shellcheck disable=SC2086
    if ! $CC $flags "$f" -c -o "$D/out.o" 2>"$D/err"; then
      echo "compile failed: $CC $flags $f -c" >&2
      tail -n 20 "$D/err" >&2
      return 1
    fi
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }' >>"$D/times"
  done
  median <"$D/times"
}

ver=$($CC -dumpfullversion 2>/dev/null || $CC -dumpversion)
echo "compile cost ($(basename "${CC%% *}") $ver, median of $RUNS), seconds:"
echo "  -O2:  $CC $O2_FLAGS FILE -c"
echo "  fast: $CC $FAST_FLAGS FILE -c"
printf '%-26s%-8s%-8s%s\n' file -O2 fast preprocessed

names=("stdio.h only" "dl.h only" "examples/fashion_mlp.c")
files=("$D/stdio_only.c" "$D/dl_only.c" examples/fashion_mlp.c)
declare -a t_o2 t_fast pp_bytes
long_line=0
for i in 0 1 2; do
  f=${files[$i]}
  # shellcheck disable=SC2086
  $CC $O2_FLAGS -E "$f" >"$D/pp.i" 2>"$D/err" || { echo "preprocessing failed: $f"; tail -n 20 "$D/err"; exit 1; }
  pp_bytes[i]=$(wc -c <"$D/pp.i")
  if [ "$i" = 2 ]; then
    # bytes of the longest line, newline included
    long_line=$(LC_ALL=C awk '{ n = length($0) + 1; if (n > m) m = n } END { print m + 0 }' "$D/pp.i")
  fi
  t_o2[i]=$(ctime "$f" "$O2_FLAGS") || exit 1
  t_fast[i]=$(ctime "$f" "$FAST_FLAGS") || exit 1
  size=$(human "${pp_bytes[$i]}")
  [ "$i" = 2 ] && size="$size (longest line $(human "$long_line"))"
  printf '%-26s%-8.2f%-8.2f%s\n' "${names[$i]}" "${t_o2[$i]}" "${t_fast[$i]}" "$size"
done

t_link=$(ctime examples/fashion_mlp.c "$O2_FLAGS -DDL_LINK") || exit 1
t_link_fast=$(ctime examples/fashion_mlp.c "$FAST_FLAGS -DDL_LINK") || exit 1
printf '%-26s%-8.2f%-8.2f%s\n' "fashion_mlp.c -DDL_LINK" "$t_link" "$t_link_fast" "(the library compiled once, elsewhere)"
MULTI="-DDL_LINK -DDL_USE_ZLIB"
t_lib=$(ctime examples/multi/dl.c "$O2_FLAGS $MULTI") || exit 1
t_lib_fast=$(ctime examples/multi/dl.c "$FAST_FLAGS $MULTI") || exit 1
t_one=$(ctime examples/multi/train.c "$O2_FLAGS $MULTI") || exit 1
t_one_fast=$(ctime examples/multi/train.c "$FAST_FLAGS $MULTI") || exit 1
printf '%-26s%-8.2f%-8.2f%s\n' "multi/dl.c (the library)" "$t_lib" "$t_lib_fast" "once per program"
printf '%-26s%-8.2f%-8.2f%s\n' "multi/train.c (one file)" "$t_one" "$t_one_fast" "what an edit of one file costs"

echo "goal (issue 16): fashion_mlp.c <= 2.0 s at -O2, <= 3.0 s fast, <= 3 MB preprocessed; one file of a 3-file program <= 1.0 s"
awk -v a="${t_o2[2]}" -v b="${t_o2[1]}" -v c="${t_o2[0]}" 'BEGIN {
  if (b > 0) printf "ratio fashion_mlp / dl.h only: %.1fx (-O2)\n", a / b
  if (c > 0) printf "ratio dl.h only / stdio.h only: %.1fx (-O2)\n", b / c }'
awk -v o2="${t_o2[2]}" -v fast="${t_fast[2]}" -v pp="${pp_bytes[2]}" 'BEGIN {
  printf "goal fashion_mlp.c -O2 compile <= 2.0 s: %.2f s: %s\n", o2, (o2 <= 2.0 ? "met" : "NOT met")
  printf "goal fashion_mlp.c fast compile <= 3.0 s: %.2f s: %s\n", fast, (fast <= 3.0 ? "met" : "NOT met")
  printf "goal fashion_mlp.c preprocessed <= 3 MB (3000000 bytes): %d bytes: %s\n", pp, (pp <= 3000000 ? "met" : "NOT met") }'
awk -v a="$t_one" -v b="$t_one_fast" 'BEGIN {
  printf "goal one file of the 3-file program rebuilt <= 1.0 s: %.2f s at -O2, %.2f s fast: %s\n", a, b, (a <= 1.0 && b <= 1.0 ? "met" : "NOT met") }'
exit 0
