#!/usr/bin/env bash
# fuzz/run.sh [SECONDS [NAME...]] - build and run every fuzz/fuzz_*.c (or
# only fuzz/fuzz_NAME.c for the NAMEs given) with libFuzzer.
#
# Each fuzz/fuzz_NAME.c is built with
#   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
#         -Iinclude fuzz/fuzz_NAME.c FLAGS -lm
# where FLAGS come from a line of its own in the file:
#   /* dl-fuzz-flags: -DDL_USE_ZLIB -lz */
# and run for SECONDS (default 20) on a COPY of fuzz/corpus/NAME/ (the
# committed seed corpus is never modified; new inputs go to the copy in
# build/fuzz/), with fuzz/fuzz_NAME.dict as its dictionary when there is one.
# Prints one line per target:
#   FUZZ PASS NAME: N executions in S s (corpus X -> Y files)
#   FUZZ FAIL NAME: ...            (build error, crash, leak, timeout, UB)
# and exits non-zero when any target failed; crash inputs are kept as
# build/fuzz/fuzz_NAME-crash-* (replay: build/fuzz/fuzz_NAME FILE).
# Environment: FUZZ_CC (default clang); FUZZ_TIMEOUT (default 10: seconds one
# input may take; give 60 beside other work, where a starved process turns a
# slow input into a false timeout). One process per target, one after another.
set -u
cd "$(dirname "$0")/.."
SECS=${1:-20}
case "$SECS" in ''|*[!0-9]*) echo "usage: $0 [SECONDS [NAME...]]" >&2; exit 2 ;; esac
shift $(( $# > 0 ? 1 : 0 ))
only=" $* "
CC=${FUZZ_CC:-clang}
B=build/fuzz
mkdir -p "$B"
fails=0; n=0
for src in fuzz/fuzz_*.c; do
  [ -f "$src" ] || continue
  t=$(basename "$src" .c)
  name=${t#fuzz_}
  if [ "$only" != "  " ] && [[ "$only" != *" $name "* ]]; then continue; fi
  n=$((n + 1))
  # a target with a line "/* dl-fuzz-ci: skip REASON */" is left out when FUZZ_CI=1 (make test's short run)
  why=$(sed -n 's|^/\* dl-fuzz-ci: skip \(.*\) \*/$|\1|p' "$src" | head -n 1)
  if [ "${FUZZ_CI:-0}" = 1 ] && [ -n "$why" ]; then echo "FUZZ SKIP $name: $why (make fuzz-long runs it)"; continue; fi
  flags=$(sed -n 's|^/\* dl-fuzz-flags: \(.*\) \*/$|\1|p' "$src" | head -n 1)
  # shellcheck disable=SC2086
  if ! $CC -std=c11 -Wall -Wextra -Werror -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
      -Iinclude "$src" -o "$B/$t" $flags -lm >"$B/$t.build.log" 2>&1; then
    echo "FUZZ FAIL $name: build failed"; head -20 "$B/$t.build.log"
    fails=$((fails + 1)); continue
  fi
  corpus="$B/corpus_$name"
  rm -rf "$corpus"; mkdir -p "$corpus"
  if [ -d "fuzz/corpus/$name" ]; then cp -R "fuzz/corpus/$name/." "$corpus/"; fi
  before=$(find "$corpus" -type f | wc -l)
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  rm -f "$B/$t"-crash-* "$B/$t"-leak-* "$B/$t"-timeout-* "$B/$t"-oom-*
  start=$(date +%s)
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
  "$B/$t" "${dict[@]}" -max_total_time="$SECS" -print_final_stats=1 -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 \
    -artifact_prefix="$B/$t-" "$corpus" >"$B/$t.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$B/$t.log" | tail -n 1)
  after=$(find "$corpus" -type f | wc -l)
  if [ $rc -eq 0 ] && [ -n "$execs" ]; then
    echo "FUZZ PASS $name: $execs executions in $secs s (corpus $before -> $after files)"
  else
    echo "FUZZ FAIL $name: exit $rc after ${execs:-?} executions in $secs s; log $B/$t.log"
    grep -m 16 -E 'ERROR|SUMMARY|runtime error|^ *#[0-9]+ |Test unit written' "$B/$t.log"
    fails=$((fails + 1))
  fi
done
if [ $n -eq 0 ]; then echo "no fuzz target (fuzz/fuzz_*.c${*:+ named $*})"; fi
[ $fails -eq 0 ]
