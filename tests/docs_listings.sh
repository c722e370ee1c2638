#!/usr/bin/env bash
# tests/docs_listings.sh OUTDIR - the guides in docs/*.md, checked: every
# code listing marked by a line
#   <!-- listing: NAME [MODE] [FLAGS...] -->
# right before its ```c fence is extracted to OUTDIR/NAME.c, compiled with
# gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -Iinclude NAME.c FLAGS -lm
# and run, both inside OUTDIR (so FLAGS may name files that an earlier
# listing of the same run wrote there, e.g. generated C). A listing checks
# its own result and exits non-zero when it is wrong, so a guide that
# drifts from the library fails here. MODE:
#   (none)      a host program, built with gcc and with clang, run once
#               (a word gcc:FLAG or clang:FLAG is a flag for that compiler only)
#   @gpu-fake   built with -DDL_USE_CUDA against the fake device
#               (make gpu-fake: build/libdlgpu_fake.a) and run on it
#   @mpi        built with mpicc -DDL_USE_MPI, run under mpirun -n 2
#   @cxx        a ```cpp listing: built with g++ and clang++ -std=c++17
#               -Wall -Wextra -Wpedantic -Werror -x c++, run once
# A listing built with -DDL_FREESTANDING is also compiled (not linked) for a
# Cortex-M4 with arm-none-eabi-gcc, with the C files it names, where that
# compiler exists.
# then the API reference: the prototypes that tools/doxygen_filter.awk
# writes for generated functions must compile against dl.h, and doxygen
# docs/Doxyfile must print no warning (an undocumented public name, a
# broken comment); the warnings are listed.
# One line per check (PASS / FAIL / SKIP NAME: why), and last
#   DOCS <passed> <failed> <skipped>
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${1:-build/tests/docs}
ROOT=$(pwd)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)   # absolute: listings are built and run inside it
WARN="-std=c11 -Wall -Wextra -Wpedantic -Werror"
pass=0; fail=0; skip=0
PASS() { pass=$((pass + 1)); echo "PASS $*"; }
FAIL() { fail=$((fail + 1)); echo "FAIL $*"; }
SKIP() { skip=$((skip + 1)); echo "SKIP $*"; }

# extract: NAME<TAB>MODE-AND-FLAGS<TAB>FILE per listing, the code into OUTDIR/NAME.c
list="$OUT/listings.txt"; : >"$list"
for md in docs/*.md; do
  awk -v out="$OUT" -v md="$md" '
    /^<!-- listing: .* -->[ \t]*$/ { s = $0; sub(/^<!-- listing: /, "", s); sub(/ -->[ \t]*$/, "", s)
                                     name = s; sub(/ .*/, "", name); rest = s; sub(/^[^ ]* ?/, "", rest)
                                     want = 1; next }
    want == 1 && /^```(c|cpp)[ \t]*$/ { want = 2; f = out "/" name ".c"; printf "" > f
                                  printf "%s\t%s\t%s\n", name, (rest == "" ? "-" : rest), md; next }
    want == 1 { printf "%s: the listing marker of %s is not followed by a ```c (or ```cpp) fence\n", md, name > "/dev/stderr"
                printf "%s\t@orphan\t%s\n", name, md; want = 0; next }
    want == 2 && /^```[ \t]*$/ { close(f); want = 0; next }
    want == 2 { print > f }
  ' "$md" >>"$list"
done
dups=$(cut -f1 "$list" | sort | uniq -d)
[ -z "$dups" ] || FAIL "listing names used twice: $dups"

run() { # name seconds command... : run with a time limit, keep the output
  local name=$1 secs=$2; shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  ( cd "$OUT" && timeout "$secs" "$@" ) >"$OUT/$name.out" 2>&1; rc=$?   # files a listing writes land in OUT
  t1=$(date +%s.%N)
  RUN_S=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  return $rc
}
fake_ok=""
while IFS=$'\t' read -r name rest md; do
  mode=""; flags=""
  for w in $rest; do case $w in -) ;; @*) mode=$w ;; gcc:*|clang:*) ;; *) flags="$flags $w" ;; esac; done
  only() { for w in $rest; do case $w in "$1":*) printf " %s" "${w#*:}" ;; esac; done; } # COMPILER:FLAG words
  case $mode in
    @orphan) FAIL "$name ($md): marker without a \`\`\`c listing"; continue ;;
    "")
      ok=1
      for c in gcc clang; do
        command -v $c >/dev/null || continue
        # shellcheck disable=SC2086,SC2046
        if ! (cd "$OUT" && $c $WARN -O2 -I"$ROOT/include" "$name.c" -o "$name.$c" $flags $(only $c) -lm) 2>"$OUT/$name.$c.log"; then
          ok=0; FAIL "$name ($md): does not build with $c"; head -15 "$OUT/$name.$c.log"
        fi
      done
      [ $ok = 1 ] || continue
      if run "$name" 60 "$OUT/$name.gcc"; then PASS "$name ($md): built with gcc and clang, ran in ${RUN_S} s: $(tail -n 1 "$OUT/$name.out")"
      else FAIL "$name ($md): exit $? after ${RUN_S} s"; tail -n 15 "$OUT/$name.out"; fi
      if [[ " $flags " == *" -DDL_FREESTANDING "* ]]; then
        if command -v arm-none-eabi-gcc >/dev/null; then
          cfiles=""; for w in $flags; do case $w in *.c) cfiles="$cfiles $w" ;; esac; done
          # shellcheck disable=SC2086
          if (cd "$OUT" && for f in "$name.c" $cfiles; do arm-none-eabi-gcc $WARN -mcpu=cortex-m4 -mthumb -mfloat-abi=hard \
                -mfpu=fpv4-sp-d16 -ffreestanding -Os -DDL_FREESTANDING -I"$ROOT/include" -I. -c "$f" -o "$f.arm.o" || exit 1; done) \
              2>"$OUT/$name.arm.log"; then PASS "$name ($md): compiled for a Cortex-M4 (arm-none-eabi-gcc -ffreestanding)"
          else FAIL "$name ($md): does not compile for a Cortex-M4"; head -15 "$OUT/$name.arm.log"; fi
        else SKIP "$name ($md): arm-none-eabi-gcc not found (apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi)"; fi
      fi ;;
    @cxx)
      ok=1
      for c in g++ clang++; do
        command -v $c >/dev/null || { SKIP "$name ($md): $c not found"; continue; }
        # shellcheck disable=SC2086
        if ! (cd "$OUT" && $c -std=c++17 -Wall -Wextra -Wpedantic -Werror -O2 -I"$ROOT/include" -x c++ "$name.c" \
              -o "$name.$c" $flags -lm) 2>"$OUT/$name.$c.log"; then
          ok=0; FAIL "$name ($md): does not build with $c"; head -15 "$OUT/$name.$c.log"
        fi
      done
      [ $ok = 1 ] && [ -x "$OUT/$name.g++" ] || continue
      if run "$name" 60 "$OUT/$name.g++"; then PASS "$name ($md): built with g++ and clang++ as C++17, ran in ${RUN_S} s: $(tail -n 1 "$OUT/$name.out")"
      else FAIL "$name ($md): exit $? after ${RUN_S} s"; tail -n 15 "$OUT/$name.out"; fi ;;
    @gpu-fake)
      if [ -z "$fake_ok" ]; then
        fake_ok=no
        if command -v "${CXX:-g++}" >/dev/null && make -s gpu-fake >"$OUT/gpu-fake.log" 2>&1; then fake_ok=yes; fi
      fi
      if [ $fake_ok != yes ]; then SKIP "$name ($md): the fake device did not build (make gpu-fake; needs g++): $(tail -n 1 "$OUT/gpu-fake.log")"; continue; fi
      # shellcheck disable=SC2086
      if ! (cd "$OUT" && gcc $WARN -O2 -DDL_USE_CUDA -I"$ROOT/include" "$name.c" -o "$name" $flags "$ROOT/build/libdlgpu_fake.a" -lstdc++ -lm) 2>"$OUT/$name.log"; then
        FAIL "$name ($md): does not build against the fake device"; head -15 "$OUT/$name.log"; continue
      fi
      if run "$name" 120 "$OUT/$name"; then PASS "$name ($md): ran on the fake device in ${RUN_S} s: $(tail -n 1 "$OUT/$name.out")"
      else FAIL "$name ($md): exit $? after ${RUN_S} s on the fake device"; tail -n 15 "$OUT/$name.out"; fi ;;
    @mpi)
      if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
        SKIP "$name ($md): mpicc/mpirun not found (apt-get install libopenmpi-dev openmpi-bin)"; continue
      fi
      # shellcheck disable=SC2086
      if ! (cd "$OUT" && mpicc $WARN -O2 -DDL_USE_MPI -I"$ROOT/include" "$name.c" -o "$name" $flags -lm) 2>"$OUT/$name.log"; then
        FAIL "$name ($md): does not build with mpicc"; head -15 "$OUT/$name.log"; continue
      fi
      if OMP_NUM_THREADS=1 run "$name" 120 mpirun -n 2 --oversubscribe --allow-run-as-root "$OUT/$name"; then
        PASS "$name ($md): ran on 2 MPI ranks in ${RUN_S} s: $(tail -n 1 "$OUT/$name.out")"
      else FAIL "$name ($md): exit $? after ${RUN_S} s under mpirun -n 2"; tail -n 15 "$OUT/$name.out"; fi ;;
    *) FAIL "$name ($md): unknown mode $mode" ;;
  esac
done <"$list"
n=$(grep -c . "$list")
[ "$n" -gt 0 ] || FAIL "no listing found in docs/*.md"

# the prototypes tools/doxygen_filter.awk writes for generated functions
# (the op list's dl_NAME_into ..., dl_t_NAME; blas.h's dl_gemm_*) must match
# the real ones: each is redeclared after dl.h, which gcc refuses when the
# types differ
protos="$OUT/oplist_protos.c"
{ echo '#include "dl.h"'
  for h in include/dl/expr.h include/dl/ops/core.h include/dl/blas.h; do
    # without the doc comments; (dl_t_NAME) escapes dl/site.h's macro of that name
    awk -f tools/doxygen_filter.awk "$h" | grep -E '^/\*\*.*\); $' |
      sed -E 's#/\*\*([^*]|\*+[^*/])*\*+/##g; s#\*(dl_t_[a-z_0-9]+)\(#*(\1)(#g'
  done; } >"$protos"
np=$(grep -oE 'dl_[a-z_0-9]+\)?\(' "$protos" | grep -c .)
if [ "$np" -gt 100 ] && gcc $WARN -I"$ROOT/include" -c "$protos" -o /dev/null 2>"$OUT/oplist_protos.log"; then
  PASS "the API reference's $np prototypes of generated functions match dl.h's"
else FAIL "the API reference's prototypes of generated functions ($np) do not match dl.h"; head -10 "$OUT/oplist_protos.log"; fi

# the API reference: no warning
if command -v doxygen >/dev/null; then
  mkdir -p build/docs
  if doxygen docs/Doxyfile >"$OUT/doxygen.log" 2>&1; then
    nw=$(grep -c . build/docs/warnings.log 2>/dev/null); nw=${nw:-0}
    if [ "$nw" = 0 ]; then PASS "doxygen docs/Doxyfile: no warning, every public name documented"
    else
      FAIL "doxygen docs/Doxyfile: $nw warnings (build/docs/warnings.log), e.g. undocumented:"
      sed 's|^.*/include/|include/|' build/docs/warnings.log | head -n 40
    fi
  else FAIL "doxygen docs/Doxyfile: exit $?"; tail -n 10 "$OUT/doxygen.log"; fi
else
  SKIP "the API reference: doxygen not found (apt-get install doxygen)"
fi
echo "DOCS $pass $fail $skip"
