#!/usr/bin/env bash
# tests/downstream.sh OUTDIR - dl.h as someone else's project gets it: a staged
# `make install DESTDIR=... PREFIX=/usr/local`, then tests/downstream/consumer.c
# (it trains a small MLP and checks that it learned) built against it
#   1. plain cc with `pkg-config --cflags --libs dl`,
#   2. cc with `pkg-config ... dl dl-openmp dl-openblas` (the optional parts),
#   3. CMake: find_package(dl MAJOR.MINOR CONFIG REQUIRED COMPONENTS OpenMP OpenBLAS),
#   4. vendored: the installed headers copied next to the .c file, `cc file.c -lm`,
# plus the version checks (config.h's four macros agree, CHANGELOG.md's newest
# entry, pkg-config --modversion, CMake's version compatibility), CMake's
# refusal of an unknown component, and `make uninstall` leaving nothing.
# Prints one "PASS name" / "FAIL name: why" / "SKIP name: why" line per check
# and ends with "DOWNSTREAM passed failed skipped". pkg-config reads the staged
# .pc files through PKG_CONFIG_SYSROOT_DIR (prefix=/usr/local inside them, as
# an install writes them); the modules dl-openblas requires (openblas) get
# the sysroot too, which gcc ignores (nonexistent -I/-L), so the system's
# cblas.h and libopenblas are found as usual.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${1:-build/tests/downstream}
rm -rf "$OUT"; mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CC=${CC:-gcc}
WARN="-std=c11 -Wall -Wextra -Wpedantic -Werror"
pass=0; fail=0; skip=0
ok()   { pass=$((pass + 1)); echo "PASS $1"; }
bad()  { fail=$((fail + 1)); echo "FAIL $1"; }
skp()  { skip=$((skip + 1)); echo "SKIP $1"; }
finish() { echo "DOWNSTREAM $pass $fail $skip"; exit 0; }

# --- the version, written once ------------------------------------------------
v=$(make -s --no-print-directory version)
maj=$(sed -n 's/^#define DL_VERSION_MAJOR \([0-9]*\)$/\1/p' include/dl/config.h)
min=$(sed -n 's/^#define DL_VERSION_MINOR \([0-9]*\)$/\1/p' include/dl/config.h)
pat=$(sed -n 's/^#define DL_VERSION_PATCH \([0-9]*\)$/\1/p' include/dl/config.h)
if [ -n "$v" ] && [ "$v" = "$maj.$min.$pat" ]; then ok "version: config.h says $v in all its macros"
else bad "version: DL_VERSION_STRING '$v' is not MAJOR.MINOR.PATCH '$maj.$min.$pat'"; fi
top=$(sed -n 's/^## \([0-9][0-9.]*\).*/\1/p' CHANGELOG.md | head -n 1)
if [ "$top" = "$v" ]; then ok "version: CHANGELOG.md's newest entry is $v"
else bad "version: CHANGELOG.md's newest entry is '$top', config.h says $v"; fi

# --- a staged install ---------------------------------------------------------
STAGE=$OUT/stage
P=/usr/local
if make -s --no-print-directory install DESTDIR="$STAGE" PREFIX=$P >"$OUT/install.log" 2>&1; then
  ok "make install DESTDIR=... PREFIX=$P"
else
  bad "make install DESTDIR=... PREFIX=$P: $(tail -n 3 "$OUT/install.log" | tr '\n' ' ')"; finish
fi
I=$STAGE$P
n_src=$(find include -name '*.h' -o -name '*.cuh' | wc -l)
n_inst=$(find "$I/include" -name '*.h' -o -name '*.cuh' | wc -l)
missing=""
for f in lib/pkgconfig/dl.pc lib/pkgconfig/dl-openblas.pc lib/pkgconfig/dl-openmp.pc lib/cmake/dl/dlConfig.cmake \
         lib/cmake/dl/dlConfigVersion.cmake share/doc/dl/CHANGELOG.md include/dl.h include/dl/ops/core.h; do
  [ -f "$I/$f" ] || missing="$missing $f"
done
if [ "$n_src" = "$n_inst" ] && [ -z "$missing" ]; then ok "installed: $n_inst headers, pkg-config, CMake package, documents"
else bad "installed: $n_inst of $n_src headers; missing:$missing"; fi
if [ -f build/libdlgpu.a ] || [ ! -f "$I/lib/pkgconfig/dl-cuda.pc" ]; then ok "dl-cuda.pc only with build/libdlgpu.a"
else bad "dl-cuda.pc installed without build/libdlgpu.a"; fi

# --- the consumer, four ways ---------------------------------------------------
# run_consumer NAME BINARY: runs it, checks that it learned, keeps its lines
run_consumer() {
  local name=$1 bin=$2
  if "$bin" "$v" >"$OUT/$name.out" 2>&1; then
    ok "$name: $(grep '^result:' "$OUT/$name.out")"
  else
    bad "$name: run failed: $(tail -n 3 "$OUT/$name.out" | tr '\n' ' ')"
  fi
}
# config_is NAME WANT: the consumer's config line has every field of WANT
config_is() {
  local name=$1 want=$2 w
  for w in $want; do
    grep -q "^config: .* $w\( \|$\)" "$OUT/$name.out" || { bad "$name: config lacks $w: $(grep '^config:' "$OUT/$name.out")"; return; }
  done
  ok "$name: $want"
}

if command -v pkg-config >/dev/null; then
  export PKG_CONFIG_PATH=$I/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$STAGE
  mv_ver=$(pkg-config --modversion dl 2>&1)
  if [ "$mv_ver" = "$v" ] && pkg-config --exists "dl >= $maj.$min" && ! pkg-config --exists "dl > $v"; then
    ok "pkg-config --modversion dl: $mv_ver"
  else bad "pkg-config --modversion dl: '$mv_ver' (want $v)"; fi
  # pc_build NAME "MODULES" "CONFIG WANTED": the consumer built with
  # `pkg-config --cflags --libs MODULES`, run, and its config line checked
  pc_build() {
    local name=$1 mods=$2 want=$3 flags
    flags=$(pkg-config --cflags --libs $mods)
    # shellcheck disable=SC2086
    if $CC $WARN -O2 tests/downstream/consumer.c -o "$OUT/$name" $flags 2>"$OUT/$name.log"; then
      ok "pkg-config build ($mods): $CC $WARN -O2 consumer.c $flags"
      run_consumer "$name" "$OUT/$name"
      config_is "$name" "$want"
    else bad "pkg-config build ($mods): $(head -n 5 "$OUT/$name.log" | tr '\n' ' ')"; fi
  }
  pc_build pkgconfig "dl" "openmp=0 openblas=0"
  if pkg-config --exists openblas; then pc_build pkgconfig_opt "dl dl-openmp dl-openblas" "openmp=1 openblas=1"
  else skp "pkg-config dl-openblas: no openblas.pc (apt-get install libopenblas-dev)"; fi
  # the GPU library, when `make gpu-lib` built it (tests/run.sh's step 2c does
  # where nvcc exists): the consumer links it; it runs on the CPU, so no GPU
  # is needed to run it
  if [ -f "$I/lib/pkgconfig/dl-cuda.pc" ]; then pc_build pkgconfig_cuda "dl dl-cuda" "cuda=1"
  else skp "pkg-config dl-cuda: no build/libdlgpu.a was installed (make gpu-lib needs nvcc)"; fi
  unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
else
  skp "pkg-config builds: pkg-config not found (apt-get install pkgconf)"
fi

if command -v cmake >/dev/null; then
  # cmake_consumer NAME ARGS...: configure tests/downstream/ in OUT/NAME
  cmake_consumer() {
    local name=$1; shift
    cmake -S tests/downstream -B "$OUT/$name" -DCMAKE_C_COMPILER="$CC" -DCMAKE_PREFIX_PATH="$I" \
      -DCMAKE_BUILD_TYPE=Release -DDL_VERSION_WANTED="$maj.$min" "$@" >"$OUT/$name.log" 2>&1
  }
  if cmake_consumer cmake -DDL_COMPONENTS="OpenMP;OpenBLAS" &&
     cmake --build "$OUT/cmake" >>"$OUT/cmake.log" 2>&1; then
    ok "CMake build: find_package(dl $maj.$min CONFIG REQUIRED COMPONENTS OpenMP OpenBLAS), dl::dl"
    run_consumer cmake "$OUT/cmake/consumer"
    config_is cmake "openmp=1 openblas=1"
  else bad "CMake build: $(grep -iE 'error|not found|missing' "$OUT/cmake.log" | head -n 5 | tr '\n' ' ')"; fi
  if cmake_consumer cmake_plain -DDL_COMPONENTS="" && cmake --build "$OUT/cmake_plain" >>"$OUT/cmake_plain.log" 2>&1; then
    run_consumer cmake_plain "$OUT/cmake_plain/consumer"
    config_is cmake_plain "openmp=0 openblas=0"
  else bad "CMake build without components: $(grep -iE 'error' "$OUT/cmake_plain.log" | head -n 5 | tr '\n' ' ')"; fi
  # every optional part this machine has (tools/deps.sh test installs them all)
  comps="OpenMP;OpenBLAS" want_cfg="openmp=1 openblas=1"
  [ -f /usr/include/zlib.h ] && comps="$comps;ZLIB" want_cfg="$want_cfg zlib=1"
  [ -f /usr/include/stb/stb_image_write.h ] && comps="$comps;STB" want_cfg="$want_cfg stb=1"
  command -v mpicc >/dev/null && comps="$comps;MPI" want_cfg="$want_cfg mpi=1"
  if cmake_consumer cmake_all -DDL_COMPONENTS="$comps" && cmake --build "$OUT/cmake_all" >>"$OUT/cmake_all.log" 2>&1; then
    ok "CMake build with COMPONENTS $comps"
    run_consumer cmake_all "$OUT/cmake_all/consumer"
    config_is cmake_all "$want_cfg"
  else bad "CMake build with COMPONENTS $comps: $(grep -iE 'error|missing' "$OUT/cmake_all.log" | head -n 5 | tr '\n' ' ')"; fi
  if [ -f "$I/lib/libdlgpu.a" ]; then
    if cmake_consumer cmake_cuda -DDL_COMPONENTS="CUDA" -DCUDAToolkit_ROOT="${CUDA:-/usr/local/cuda}" &&
       cmake --build "$OUT/cmake_cuda" >>"$OUT/cmake_cuda.log" 2>&1; then
      ok "CMake build with COMPONENTS CUDA"
      run_consumer cmake_cuda "$OUT/cmake_cuda/consumer"
      config_is cmake_cuda "cuda=1"
    else bad "CMake build with COMPONENTS CUDA: $(grep -iE 'error|missing' "$OUT/cmake_cuda.log" | head -n 5 | tr '\n' ' ')"; fi
  else skp "CMake CUDA component: no build/libdlgpu.a was installed (make gpu-lib needs nvcc)"; fi
  if cmake_consumer cmake_bad -DDL_COMPONENTS="OpenMP;Nope"; then
    bad "CMake: an unknown required component (Nope) was accepted"
  elif tr '\n' ' ' <"$OUT/cmake_bad.log" | tr -s ' ' | grep -q "required components missing: Nope: no such component"; then
    ok "CMake: an unknown required component is refused, named"
  else bad "CMake: an unknown component failed without naming it: $(grep -i error "$OUT/cmake_bad.log" | head -n 3 | tr '\n' ' ')"; fi
  # 0.x: another minor version, older or newer, is not compatible (the same
  # one is: the builds above asked for it)
  for want in "$maj.$((min + 1))" $([ "$maj" = 0 ] && [ "$min" -gt 0 ] && echo "$maj.$((min - 1))"); do
    if cmake_consumer "want_$want" -DDL_COMPONENTS="" -DDL_VERSION_WANTED="$want"; then
      bad "CMake: find_package(dl $want) accepted version $v"
    elif tr '\n' ' ' <"$OUT/want_$want.log" | tr -s ' ' | grep -q "compatible with requested version \"$want\""; then
      ok "CMake: find_package(dl $want) refuses $v"
    else bad "CMake: find_package(dl $want) failed for another reason: $(grep -v '^--' "$OUT/want_$want.log" | head -n 5 | tr '\n' ' ')"; fi
  done
else
  skp "CMake builds: cmake not found (apt-get install cmake)"
fi

# vendored: the headers next to the .c file, no -I, no other flag
VD=$OUT/vendored
mkdir -p "$VD" && cp -r "$I/include/." "$VD/" && cp tests/downstream/consumer.c "$VD/"
if (cd "$VD" && $CC $WARN -O2 consumer.c -o consumer -lm) 2>"$OUT/vendored.log"; then
  ok "vendored build: $CC $WARN -O2 consumer.c -lm (headers next to it)"
  run_consumer vendored "$VD/consumer"
  if [ -f "$OUT/pkgconfig.out" ] && cmp -s "$OUT/pkgconfig.out" "$OUT/vendored.out"; then
    ok "vendored and pkg-config builds print the same lines"
  elif [ -f "$OUT/pkgconfig.out" ]; then bad "vendored and pkg-config builds differ: $(diff "$OUT/pkgconfig.out" "$OUT/vendored.out" | tr '\n' ' ')"; fi
else bad "vendored build: $(head -n 5 "$OUT/vendored.log" | tr '\n' ' ')"; fi

# --- uninstall -------------------------------------------------------------------
if make -s --no-print-directory uninstall DESTDIR="$STAGE" PREFIX=$P >"$OUT/uninstall.log" 2>&1; then
  left=$(find "$STAGE" -type f | sed "s|^$STAGE||")
  if [ -z "$left" ]; then ok "make uninstall leaves no file"
  else bad "make uninstall left: $(echo $left | head -c 300)"; fi
else bad "make uninstall: $(tail -n 3 "$OUT/uninstall.log" | tr '\n' ' ')"; fi
finish
