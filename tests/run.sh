#!/usr/bin/env bash
# tests/run.sh - the whole test suite; `make test` runs it. Ends with the line
# "N passed, N failed[, N skipped]" that CI reads. Exits non-zero on any failure.
#
#   1. every public header (include/dl/*.h and include/dl/ops/*.h) compiles
#      on its own: gcc and clang as C11 with -Wall -Wextra -Wpedantic -Werror
#      and linked (-lm, as every user links), and again with DL_USE_CUDA,
#      with DL_USE_MPI (where mpicc exists), with both, with DL_LINK and with
#      DL_IMPLEMENTATION; g++ (C++11) and nvcc with and without DL_USE_CUDA
#      and DL_USE_MPI (tests/header_matrix.sh, as parallel jobs)
#   1b. the headers hold one OpenMP parallel region, core.h's
#      DL_PARALLEL_REGION: every parallel loop goes through it
#   2. tests/test_*.c built with gcc -O2 -fopenmp (plus the flags a test names
#      on a "dl-test-flags:" line) and run (test_blas also with OpenBLAS),
#      2 OpenMP threads
#   2c. with nvcc: the CUDA library (make gpu-lib), tests/test_gpu*.c built with
#      DL_USE_CUDA (skips without a GPU), the op list's kernel functions and
#      the kernels' bodies of src_gpu/ run on the host against the CPU
#      (tests/gpu_host/), the examples linked with CUDA (--device cuda)
#   2d. the GPU path on a fake device on the host (make gpu-fake, no GPU or
#      CUDA needed): tests/test_gpu*.c's GPU checks run, and the Fashion
#      examples train with --device cuda to the CPU's accuracy and loss
#   2b. with Open MPI: tests/mpi/ (dist.h across 2 ranks, failing ranks,
#      the Fashion-MNIST examples under mpirun)
#   2e. C++: the unit tests marked "dl-test-cxx" built with g++ and run, and
#      tests/cxx/mlp.c built as C and as C++ (g++, clang++): the same output
#      bytes (50 training steps, the API touched once each); C++11 builds it,
#      and so does g++ -march=native (this CPU's intrinsics paths)
#   3. tests/compile_fail/*.c (gcc, clang) and *.cc (g++, clang++) must fail
#      to compile, with the message the file's "expect:" line names
#   3b. tests/macro_growth.sh: the preprocessed text of generic-math
#      expressions grows linearly with their nesting depth (gcc and clang)
#   4. examples build warning-free with `cc -std=c11 -O2 prog.c -lm` (plus the
#      libraries an example's "dl-example-flags:" line names, e.g. -lz) and run
#      their examples/NAME.check script
#   4b. compile once: examples/multi/ (three files) built with the library in
#      one DL_IMPLEMENTATION file and -DDL_LINK everywhere, and built the
#      default way; the same result, and no library code in the DL_LINK files
#   4c. installed: tests/downstream.sh stages `make install` with DESTDIR and
#      builds a consumer program against it with pkg-config, with CMake's
#      find_package(dl CONFIG COMPONENTS ...) and vendored; version checks,
#      `make uninstall`
#   4d. tests/oom_ulimit.sh: fashion_mlp (plain and with OpenBLAS) under
#      `ulimit -v` at 20 levels: it fits, or exits 1 saying "out of memory";
#      never a signal or a hang (tests/test_oom.c fails each allocation of a
#      training program through the allocator hooks)
#   4e. the guides: tests/docs_listings.sh extracts every marked listing of
#      docs/*.md, builds it warning-free (gcc and clang; the GPU guide against
#      the fake device, the MPI guide with mpicc under mpirun -n 2, the
#      firmware guide also for a Cortex-M4) and runs it; then Doxygen
#      (docs/Doxyfile, as `make docs`) must give no warning: a public name
#      without a comment fails, and the names are listed
#   5. the test programs again under -fsanitize=address,undefined (test_ops_conv
#      also built for this CPU: the Winograd convolution)
#   6. fuzz/run.sh 15: every fuzz/fuzz_*.c built with clang's libFuzzer, ASan
#      and UBSan and run for 15 s on a copy of its seed corpus; each target
#      counts as one pass or fail (skipped with a message when clang cannot
#      build a libFuzzer program)
# Set DL_TEST_QUICK=1 to skip steps 5 and 6. Compiling is most of the time:
# a step's builds run first, DL_TEST_JOBS at a time (default: the number of
# CPUs; step 5's builds join step 2's), then its programs one at a time with
# the machine to themselves. A line "time: STEP: N s" ends each step.
set -u
cd "$(dirname "$0")/.."
B=build/tests
mkdir -p "$B"
CC=${CC:-gcc}
WARN="-std=c11 -Wall -Wextra -Wpedantic -Werror"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
pass=0; fail=0; skip=0
# nvcc may be installed without being on PATH (CI's environment is minimal)
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="$PATH:/usr/local/cuda/bin"; fi
failed=()

ok()   { pass=$((pass + 1)); }
bad()  { fail=$((fail + 1)); failed+=("$1"); echo "FAILED: $1"; }
# how long each step took, on a line of its own ("time: STEP: N s")
T_STEP=$SECONDS
section() { echo "time: $1: $((SECONDS - T_STEP)) s"; T_STEP=$SECONDS; }

# Builds run in the background, $JOBS at a time (DL_TEST_JOBS, default the
# number of CPUs): build P CMD... runs CMD with its output in P.log and, when
# it succeeds, leaves P.built; built P says whether it did. built_all waits for
# every build queued. Programs run one at a time, after their builds.
JOBS=${DL_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
build() {
  local p=$1; shift
  rm -f "$p.built"
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  { "$@" >"$p.log" 2>&1 && : >"$p.built"; } &
}
built() { [ -f "$1.built" ]; }
built_all() { wait; }

# --- 1. headers on their own -------------------------------------------------
# the whole matrix (compilers x configurations), in parallel: tests/header_matrix.sh
hm=$(bash tests/header_matrix.sh "$B/headers")
echo "$hm" | grep -v '^HEADERS '
set -- $(echo "$hm" | grep '^HEADERS ' | tail -n 1)
if [ $# = 4 ]; then
  pass=$((pass + $2)); skip=$((skip + $4))
  [ "$3" -gt 0 ] && { fail=$((fail + $3)); failed+=("headers alone ($3 configurations)"); }
else bad "tests/header_matrix.sh (no result line)"; fi
if command -v nvcc >/dev/null; then
  if nvcc -std=c++17 -Werror all-warnings -Iinclude -c tests/nvcc_device.cu -o "$B/nvcc_device.o" 2>"$B/hdr.log"; then ok
  else bad "tests/nvcc_device.cu (generic math as CUDA device code)"; cut -c1-300 "$B/hdr.log" | head -20; fi
else
  echo "SKIP nvcc checks: nvcc not found (the CUDA toolkit is not installed here)"; skip=$((skip + 1))
fi
echo "headers: $pass passed, $fail failed"
section "1. headers"

# --- 1b. one parallel construct ----------------------------------------------
# Every parallel loop of the library is core.h's DL_PARALLEL_REGION (threads,
# thresholds, the team guard, flush-to-zero in one place): an OpenMP parallel
# region written anywhere else in the headers fails this.
par_sites=$(grep -rnE '"omp parallel|#[[:space:]]*pragma[[:space:]]+omp[[:space:]]+parallel' include --include=*.h)
if [ "$(echo "$par_sites" | grep -c .)" = 1 ] && echo "$par_sites" | grep -q '^include/dl/core.h:.*num_threads(dl__pnt)'; then ok
else bad "an omp parallel region outside core.h's DL_PARALLEL_REGION:"; echo "$par_sites"; fi

# --- 2. unit tests ------------------------------------------------------------
run_test() { # name command...
  local name=$1 out
  out=$("${@:2}" 2>&1); local rc=$?
  echo "$out" | grep -v '^HARNESS' | tail -n 40
  local line; line=$(echo "$out" | grep '^HARNESS' | tail -n 1)
  if [ -z "$line" ]; then bad "$name (crashed, exit $rc)"; return; fi
  set -- $line
  pass=$((pass + $2)); skip=$((skip + $4))
  if [ "$3" -gt 0 ]; then fail=$((fail + $3)); failed+=("$name")
  elif [ $rc -ne 0 ]; then bad "$name (exit $rc)"; fi
}
BLAS_FLAGS=""
if [ -f /usr/include/x86_64-linux-gnu/cblas.h ] || [ -f /usr/include/cblas.h ] || ls /usr/include/*/cblas.h >/dev/null 2>&1; then
  BLAS_FLAGS="-DDL_USE_OPENBLAS"
fi
# A test file may name extra build flags (libraries, feature macros) on a
# line of its own:  /* dl-test-flags: -DDL_USE_ZLIB -lz */
test_flags() { sed -n 's|^/\* dl-test-flags: \(.*\) \*/$|\1|p' "$1" | head -n 1; }
# The builds first, $JOBS at a time (compiling is most of the suite's time),
# then the programs one after another, each with the machine to itself, in
# the order queue NAME CMD... queued them (NAME: the program in $B and the
# name its results go under).
programs=()
queue() { programs+=("$1"); build "$B/$1" "${@:2}"; }
for t in tests/test_*.c; do
  n=$(basename "$t" .c)
  # DL_TAPE_POISON: gradients dl_backward leaves unzeroed hold NaN, so a rule that adds to one unzeroed shows
  queue "$n" $CC $WARN -O2 -fopenmp -DDL_TAPE_POISON -Iinclude -Itests "$t" -o "$B/$n" $(test_flags "$t") -lm
  if [ "$n" = test_blas ] || [ "$n" = test_matmul ]; then
    if [ -n "$BLAS_FLAGS" ]; then
      queue "${n}_openblas" $CC $WARN -O2 -fopenmp $BLAS_FLAGS -Iinclude -Itests "$t" -o "$B/${n}_openblas" -lopenblas -lm
      # built for this CPU: dl_gemm may leave an OpenBLAS that runs older kernels (blas.h)
      [ "$n" = test_blas ] && queue "${n}_openblas_native" $CC $WARN -O2 -march=native -fopenmp $BLAS_FLAGS -Iinclude \
        -Itests "$t" -o "$B/${n}_openblas_native" -lopenblas -lm
    else echo "SKIP $n with OpenBLAS: cblas.h not found (apt-get install libopenblas-dev)"; skip=$((skip + 1)); fi
  fi
  # the widest vector bodies (AVX-512 or AVX where this CPU has it), under gcc and clang: the
  # optimizers', the batcher's table gather, the fused attention's tile products, the GEMM's
  # dot-product kernel and the 2x2 max pool (AVX-512 or AVX2)
  case $n in test_optim|test_data|test_ops_sdpa|test_blas|test_ops_conv)
    for nc in gcc clang; do
      command -v $nc >/dev/null && queue "${n}_native_$nc" $nc $WARN -O2 -march=native -fopenmp -Iinclude -Itests "$t" \
        -o "$B/${n}_native_$nc" $(test_flags "$t") -lm
    done ;;
  esac
  # on an AVX-512 CPU, the 2x2 max pool's AVX2 form too (-march=native builds the AVX-512 one)
  if [ "$n" = test_ops_conv ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null && grep -qw avx2 /proc/cpuinfo; then
    queue "${n}_avx2" $CC $WARN -O2 -mavx2 -mfma -fopenmp -Iinclude -Itests "$t" -o "$B/${n}_avx2" $(test_flags "$t") -lm
  fi
  # step 5's sanitizer builds join the queue now (run there): it is the longest
  [ "${DL_TEST_QUICK:-0}" != 1 ] && build "$B/${n}_san" $CC $WARN -O1 -g -fopenmp -fsanitize=address,undefined \
    -fno-sanitize-recover=all -Iinclude -Itests "$t" -o "$B/${n}_san" $(test_flags "$t") -lm
  # and built for this CPU: the Winograd convolution (AVX2 + FMA) under the sanitizers too
  [ "${DL_TEST_QUICK:-0}" != 1 ] && [ "$n" = test_ops_conv ] && build "$B/${n}_native_san" $CC $WARN -O1 -g -march=native \
    -fopenmp -fsanitize=address,undefined -fno-sanitize-recover=all -Iinclude -Itests "$t" -o "$B/${n}_native_san" \
    $(test_flags "$t") -lm
done
built_all
for p in "${programs[@]}"; do
  if built "$B/$p"; then run_test "$p" "$B/$p"; else bad "$p (build)"; head -30 "$B/$p.log"; fi
done
section "2. unit tests"

# --- 2e. C++: the library as a C++ program uses it ------------------------------
# The unit tests marked "dl-test-cxx" built as C++ too (g++ -std=c++17; their
# own C idioms aside: {0} initializers), and tests/cxx/mlp.c, one source
# built as C (gcc) and as C++ (g++, clang++): the MLP trained 50 steps and the
# API touched; the outputs must be the same bytes (bar the C++-only line).
if command -v g++ >/dev/null; then
  mkdir -p "$B/cxx"
  cxx_tests=$(grep -l '^/\* dl-test-cxx \*/$' tests/test_*.c)
  for t in $cxx_tests; do
    n=$(basename "$t" .c)
    build "$B/${n}_cxx" g++ -std=c++17 -Wall -Wextra -Wno-missing-field-initializers -Werror -O2 -fopenmp -Iinclude -Itests \
      -x c++ "$t" -o "$B/${n}_cxx" $(test_flags "$t") -lm
  done
  build "$B/cxx/mlp_c" $CC $WARN -O2 -fopenmp -Iinclude tests/cxx/mlp.c -o "$B/cxx/mlp_c" -lz -lm
  for cxx in g++ clang++; do
    command -v $cxx >/dev/null && build "$B/cxx/mlp_$cxx" $cxx -std=c++17 -Wall -Wextra -Wpedantic -Werror -O2 -fopenmp \
      -Iinclude -x c++ tests/cxx/mlp.c -o "$B/cxx/mlp_$cxx" -lz -lm
  done
  # C++11 is enough for the whole API
  build "$B/cxx/mlp11" g++ -std=c++11 -Wall -Wextra -Wpedantic -Werror -O0 -fopenmp -Iinclude -x c++ tests/cxx/mlp.c -c \
    -o "$B/cxx/mlp11.o"
  # and this CPU's vector paths (AVX-512 intrinsics) compile as C++ too: g++ 12 warned on some at -O2
  build "$B/cxx/mlp_native" g++ -std=c++17 -Wall -Wextra -Wpedantic -Werror -O2 -march=native -fopenmp -Iinclude \
    -x c++ tests/cxx/mlp.c -c -o "$B/cxx/mlp_native.o"
  built_all
  for t in $cxx_tests; do
    n=$(basename "$t" .c)
    if built "$B/${n}_cxx"; then run_test "${n}_cxx" "$B/${n}_cxx"
    else bad "${n}_cxx (built as C++)"; head -30 "$B/${n}_cxx.log"; fi
  done
  if ! built "$B/cxx/mlp_c"; then
    bad "tests/cxx/mlp.c as C (build)"; head -20 "$B/cxx/mlp_c.log"
  else
    (cd "$B/cxx" && ./mlp_c mlp_c.safetensors >mlp_c.out 2>&1); rc=$?
    grep '^SKIP' "$B/cxx/mlp_c.out" && skip=$((skip + 1)) # no Fashion-MNIST: the 50 steps are skipped, the rest compared
    if [ $rc != 0 ]; then bad "tests/cxx/mlp.c as C (exit $rc)"; tail -5 "$B/cxx/mlp_c.out"
    else
      for cxx in g++ clang++; do
        command -v $cxx >/dev/null || { echo "SKIP tests/cxx/mlp.c with $cxx: not installed"; skip=$((skip + 1)); continue; }
        built "$B/cxx/mlp_$cxx" || { bad "tests/cxx/mlp.c with $cxx (build)"; head -20 "$B/cxx/mlp_$cxx.log"; continue; }
        (cd "$B/cxx" && "./mlp_$cxx" "mlp_$cxx.safetensors" >"mlp_$cxx.out" 2>&1) || { bad "tests/cxx/mlp.c with $cxx (exit)"; tail -5 "$B/cxx/mlp_$cxx.out"; continue; }
        if ! grep -q '^c++ ' "$B/cxx/mlp_$cxx.out"; then bad "tests/cxx/mlp.c with $cxx: no C++ line"
        elif grep -v '^c++ ' "$B/cxx/mlp_$cxx.out" | cmp -s - "$B/cxx/mlp_c.out"; then ok; echo "tests/cxx/mlp.c: $cxx's build gives C's bytes ($(grep -c '^step' "$B/cxx/mlp_c.out") steps, $(grep '^weights' "$B/cxx/mlp_c.out"))"
        else bad "tests/cxx/mlp.c with $cxx: output differs from C's"; grep -v '^c++ ' "$B/cxx/mlp_$cxx.out" | diff - "$B/cxx/mlp_c.out" | head -10; fi
      done
    fi
  fi
  if built "$B/cxx/mlp11"; then ok
  else bad "tests/cxx/mlp.c as C++11 (build)"; head -20 "$B/cxx/mlp11.log"; fi
  if built "$B/cxx/mlp_native"; then ok
  else bad "tests/cxx/mlp.c as C++17 at -march=native (build)"; head -20 "$B/cxx/mlp_native.log"; fi
else
  echo "SKIP the C++ checks: g++ not found (apt-get install g++)"; skip=$((skip + 1))
fi
section "2e. C++"

# --- 2c. the GPU backend (gpu.h, src_gpu/) ---------------------------------------
# Where nvcc exists: `make gpu-lib` builds build/libdlgpu.a; tests/test_gpu*.c
# are built again with DL_USE_CUDA and linked with it (they check every op on
# the GPU against the CPU, or skip with a message when there is no GPU);
# tests/gpu_ew_host.cu runs the op list's generated kernel functions on the
# host; the Fashion examples link with CUDA and, without a GPU, must refuse
# --device cuda with a status (with one, train a few steps on it).
if command -v nvcc >/dev/null; then
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
  GPU_LINK="build/libdlgpu.a -L$CUDA_HOME/lib64 -lcudnn -lcublas -lcudart -lstdc++"
  # what needs no library: the op list's kernel functions and the kernels'
  # element and row bodies of src_gpu/X.cu on the host against the CPU ops
  # (tests/gpu_host/X_host.cu + X_ref.c)
  [ -f tests/gpu_ew_host.cu ] && build "$B/gpu_ew_host" nvcc -std=c++17 -Werror all-warnings -Iinclude tests/gpu_ew_host.cu \
    -o "$B/gpu_ew_host"
  for t in tests/gpu_host/*_host.cu; do
    [ -f "$t" ] || continue
    n=$(basename "$t" _host.cu)
    build "$B/${n}_host" bash -c "$CC $WARN -O1 -Iinclude -c tests/gpu_host/${n}_ref.c -o $B/${n}_ref.o &&
      nvcc -std=c++17 -Werror all-warnings -O1 -Iinclude -Isrc_gpu $t $B/${n}_ref.o -o $B/${n}_host -lm"
  done
  if make -s -j"$JOBS" gpu-lib CUDA="$CUDA_HOME" >"$B/gpu.log" 2>&1; then
    ok
    # a user's op kernels (tests/gpu_user_ops.cu), linked as an object as gpu.h says
    if nvcc -std=c++17 -Werror all-warnings -O3 -Iinclude -Itests -gencode arch=compute_80,code=sm_80 \
      -gencode arch=compute_90,code=sm_90 -c tests/gpu_user_ops.cu -o "$B/gpu_user_ops.o" 2>"$B/gpu.log"; then :
    else bad "tests/gpu_user_ops.cu (build)"; head -20 "$B/gpu.log"; fi
    for t in tests/test_gpu*.c; do
      n=$(basename "$t" .c)_cuda
      build "$B/$n" $CC $WARN -O2 -fopenmp -DDL_USE_CUDA -I"$CUDA_HOME/include" -Iinclude -Itests "$t" \
          -o "$B/$n" "$B/gpu_user_ops.o" $GPU_LINK -lm
    done
    for ex in fashion_mlp fashion_cnn; do
      build "$B/${ex}_cuda" $CC $WARN -O2 -DDL_USE_CUDA -I"$CUDA_HOME/include" -Iinclude examples/$ex.c -o "$B/${ex}_cuda" \
          $GPU_LINK -lz -lm
    done
    built_all
    for t in tests/test_gpu*.c; do
      n=$(basename "$t" .c)_cuda
      if built "$B/$n"; then run_test "$n" env LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}" "$B/$n"
      else bad "$n (build with DL_USE_CUDA)"; head -30 "$B/$n.log"; fi
    done
    # the library's element-wise launchers are reached through weak references:
    # each must have been linked from the archive (a weak one left unresolved
    # would panic "no GPU kernel" on a GPU)
    if [ -x "$B/test_gpu_cuda" ]; then
      weak=$(nm "$B/test_gpu_cuda" | awk '$1 == "w" && $2 ~ /^dl__op_.*__gpu$/ {print $2}')
      if [ -z "$weak" ]; then ok; else bad "element-wise launchers not linked: $(echo $weak | head -c 300)"; fi
    fi
    for ex in fashion_mlp fashion_cnn; do
      if built "$B/${ex}_cuda"; then
        out=$(cd "$B" && LD_LIBRARY_PATH="$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}" timeout 600 ./${ex}_cuda \
              --device cuda --epochs 1 --subset 2000 --quiet --save ${ex}_cuda.safetensors --csv ${ex}_cuda.csv 2>&1); rc=$?
        if [ $rc -eq 0 ] && echo "$out" | grep -q '^result: test_acc='; then ok; echo "$ex --device cuda: $(echo "$out" | tail -n 1)"
        elif [ $rc -eq 1 ] && echo "$out" | grep -q 'no CUDA device'; then ok; echo "$ex --device cuda, no GPU here: $(echo "$out" | tail -n 1)"
        else bad "$ex --device cuda (exit $rc)"; echo "$out" | tail -n 15; fi
      else bad "$ex with DL_USE_CUDA (build)"; head -30 "$B/${ex}_cuda.log"; fi
    done
  else bad "make gpu-lib (nvcc build of src_gpu/)"; grep -v '^$' "$B/gpu.log" | head -40; fi
  built_all
  if [ -f tests/gpu_ew_host.cu ]; then
    if built "$B/gpu_ew_host"; then run_test gpu_ew_host "$B/gpu_ew_host"
    else bad "tests/gpu_ew_host.cu (build)"; cut -c1-300 "$B/gpu_ew_host.log" | head -20; fi
  fi
  for t in tests/gpu_host/*_host.cu; do
    [ -f "$t" ] || continue
    n=$(basename "$t" _host.cu)
    if built "$B/${n}_host"; then run_test "gpu_host_$n" "$B/${n}_host"
    else bad "$t (build)"; cut -c1-300 "$B/${n}_host.log" | head -20; fi
  done
else
  echo "SKIP GPU build: nvcc not found (the CUDA toolkit is not installed here)"; skip=$((skip + 1))
fi
section "2c. the GPU backend"

# --- 2d. the GPU path on the fake device (src_gpu/fake/) -----------------------
# No GPU here: `make gpu-fake` compiles the same src_gpu/*.cu with g++ for a
# fake device on the host (threads as fibers, device memory unreadable by
# host code outside device calls, cuBLAS / cuDNN as loops), so the GPU
# checks of tests/test_gpu*.c really run, and both Fashion examples train
# with --device cuda and must report the CPU run's test accuracy and loss.
CXX=${CXX:-g++}
if command -v "$CXX" >/dev/null && make -s -j"$JOBS" gpu-fake CXX="$CXX" >"$B/fake.log" 2>&1; then
  ok
  # the programs below, built together
  for ex in fashion_mlp fashion_cnn gpt char_lm; do
    case $ex in gpt|char_lm) [ -d /usr/share/games/fortunes ] || continue; lz= ;; *) lz=-lz ;; esac
    build "$B/${ex}_fake" $CC $WARN -O2 -DDL_USE_CUDA -Iinclude examples/$ex.c -o "$B/${ex}_fake" build/libdlgpu_fake.a \
      -lstdc++ $lz -lm
    build "$B/${ex}_host" $CC $WARN -O2 -Iinclude examples/$ex.c -o "$B/${ex}_host" $lz -lm
  done
  if $CXX -std=c++17 -O1 -DDLG_FAKE -Iinclude -Isrc_gpu -Itests -Wall -Wextra -Werror -x c++ -c tests/gpu_user_ops.cu \
      -o "$B/gpu_user_ops_fake.o" 2>"$B/fake.log"; then
    for t in tests/test_gpu*.c; do
      n=$(basename "$t" .c)_fake
      build "$B/$n" $CC $WARN -O2 -DDL_USE_CUDA -Iinclude -Itests "$t" -o "$B/$n" "$B/gpu_user_ops_fake.o" \
          build/libdlgpu_fake.a -lstdc++ -lm
    done
    for t in $(grep -l '^/\* dl-test-cxx \*/$' tests/test_gpu*.c); do
      n=$(basename "$t" .c)_fake_cxx
      build "$B/$n" $CXX -std=c++17 -Wall -Wextra -Wno-missing-field-initializers -Werror -O2 -DDL_USE_CUDA -Iinclude -Itests \
          -x c++ "$t" -x none -o "$B/$n" "$B/gpu_user_ops_fake.o" build/libdlgpu_fake.a -lstdc++ -lm
    done
    built_all
    for t in tests/test_gpu*.c; do
      n=$(basename "$t" .c)_fake
      if built "$B/$n"; then
        out=$(timeout 600 "$B/$n" 2>&1)
        if echo "$out" | grep -q '^SKIP test_gpu.*no CUDA device' && [ "$n" != test_gpu_alloc_fake ]; then
          bad "$n: the fake device was not found"; echo "$out" | tail -5
        else run_test "$n" timeout 600 "$B/$n"; fi
      else bad "$n (build against the fake device)"; head -30 "$B/$n.log"; fi
    done
    # the same GPU tests from C++ (those marked dl-test-cxx): a C++ host's launchers and kernels
    for t in $(grep -l '^/\* dl-test-cxx \*/$' tests/test_gpu*.c); do
      n=$(basename "$t" .c)_fake_cxx
      if built "$B/$n"; then run_test "$n" timeout 600 "$B/$n"
      else bad "$n (C++ build against the fake device)"; head -30 "$B/$n.log"; fi
    done
  else bad "tests/gpu_user_ops.cu (build for the fake device)"; head -20 "$B/fake.log"; fi
  built_all
  for ex in fashion_mlp fashion_cnn; do
    extra=""; [ $ex = fashion_cnn ] && extra="--subset 256 --test-subset 256"
    [ $ex = fashion_mlp ] && extra="--subset 2000"
    if built "$B/${ex}_fake" && built "$B/${ex}_host"; then
      gpu_out=$(cd "$B" && timeout 900 ./${ex}_fake --device cuda --epochs 1 $extra --quiet --threads 1 \
                --save ${ex}_fake.safetensors --csv ${ex}_fake.csv 2>&1 | tail -n 1)
      cpu_out=$(cd "$B" && timeout 900 ./${ex}_host --epochs 1 $extra --quiet --threads 1 \
                --save ${ex}_host.safetensors --csv ${ex}_host.csv 2>&1 | tail -n 1)
      g=$(echo "$gpu_out" | grep -o 'test_acc=[0-9.]*.*test_loss=[0-9.]*' | sed 's/ epochs.*test_loss/ test_loss/')
      c=$(echo "$cpu_out" | grep -o 'test_acc=[0-9.]*.*test_loss=[0-9.]*' | sed 's/ epochs.*test_loss/ test_loss/')
      if [ -n "$g" ] && [ "$g" = "$c" ]; then ok; echo "$ex --device cuda on the fake device: $g (the CPU: $c)"
      else bad "$ex --device cuda on the fake device: '$gpu_out' vs the CPU '$cpu_out'"; fi
      # the steps replayed as CUDA graphs (the default) and issued call by call: the same weights, bit for bit
      (cd "$B" && timeout 900 ./${ex}_fake --device cuda --epochs 1 $extra --quiet --threads 1 --no-graphs \
                --save ${ex}_fake_ng.safetensors >/dev/null 2>&1)
      if cmp -s "$B/${ex}_fake.safetensors" "$B/${ex}_fake_ng.safetensors"; then ok
        echo "$ex --device cuda on the fake device: the same weights with CUDA graphs and with --no-graphs"
      else bad "$ex --device cuda on the fake device: the weights differ between CUDA graphs and --no-graphs"; fi
    else bad "$ex against the fake device (build)"; head -30 "$B/${ex}_fake.log" "$B/${ex}_host.log"; fi
  done
  # the GPT (rotary positions, token shift, composed attention on the device): 2 steps, the CPU's bits per byte
  gx="--subset 16 --ctx 16 --batch 8 --layers 1 --embed 16 --heads 2 --rope --shift --eval-chars 300 --samples 1 --sample-len 20 --threads 1 --quiet"
  if [ -d /usr/share/games/fortunes ] && built "$B/gpt_fake" && built "$B/gpt_host"; then
    g=$(cd "$B" && timeout 600 ./gpt_fake --device cuda $gx --save gpt_fake.st --csv gpt_fake.csv 2>&1 | grep -o 'test_acc=[0-9.]*\|test_bpb=[0-9.]*' | tr '\n' ' ')
    c=$(cd "$B" && timeout 600 ./gpt_host $gx --save gpt_host.st --csv gpt_host.csv 2>&1 | grep -o 'test_acc=[0-9.]*\|test_bpb=[0-9.]*' | tr '\n' ' ')
    if [ -n "$g" ] && [ "$g" = "$c" ]; then ok; echo "gpt --device cuda on the fake device: $g(the CPU: $c)"
    else bad "gpt --device cuda on the fake device: '$g' vs the CPU '$c'"; fi
  elif [ -d /usr/share/games/fortunes ]; then bad "gpt against the fake device (build)"; head -30 "$B/gpt_fake.log" "$B/gpt_host.log"; fi
  # the character LSTM: 2 steps, the CPU's bits per character; CUDA graphs and --no-graphs give the same weights
  cx="--subset 16 --seq 16 --batch 8 --hidden 32 --embed 16 --eval-chars 300 --samples 1 --sample-len 20 --threads 1 --quiet"
  if [ -d /usr/share/games/fortunes ] && built "$B/char_lm_fake" && built "$B/char_lm_host"; then
    g=$(cd "$B" && timeout 600 ./char_lm_fake --device cuda $cx --save clm_fake.st --csv clm_fake.csv 2>&1 | grep -o 'test_acc=[0-9.]*\|test_bpc=[0-9.]*' | tr '\n' ' ')
    c=$(cd "$B" && timeout 600 ./char_lm_host $cx --save clm_host.st --csv clm_host.csv 2>&1 | grep -o 'test_acc=[0-9.]*\|test_bpc=[0-9.]*' | tr '\n' ' ')
    (cd "$B" && timeout 600 ./char_lm_fake --device cuda $cx --no-graphs --save clm_fake_ng.st --csv clm_fake_ng.csv >/dev/null 2>&1)
    if [ -n "$g" ] && [ "$g" = "$c" ] && cmp -s "$B/clm_fake.st" "$B/clm_fake_ng.st"; then ok
      echo "char_lm --device cuda on the fake device: $g(the CPU: $c); the same weights with and without CUDA graphs"
    else bad "char_lm --device cuda on the fake device: '$g' vs the CPU '$c' (or the weights differ with --no-graphs)"; fi
  elif [ -d /usr/share/games/fortunes ]; then bad "char_lm against the fake device (build)"; head -30 "$B/char_lm_fake.log" "$B/char_lm_host.log"; fi
else
  bad "make gpu-fake (the fake device)"; grep -v '^$' "$B/fake.log" | head -40
fi
section "2d. the fake device"

# --- 2b. across MPI ranks (dist.h) ---------------------------------------------
# tests/mpi/test_dist_mpi.c under mpirun -np 2 (2 ranks = 1 process at twice
# the batch, buffers, divergence check, agreement), then a hung rank and a
# dead rank must end the job, then the Fashion-MNIST examples under 2 ranks
# against 1 process, and resume on 2 ranks (tests/mpi/examples.sh).
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  MPIRUN="mpirun -np 2 --oversubscribe --allow-run-as-root"
  if mpicc $WARN -O2 -fopenmp -DDL_USE_MPI -Iinclude -Itests tests/mpi/test_dist_mpi.c -o "$B/test_dist_mpi" -lm \
      2>"$B/mpi.log"; then
    OMP_NUM_THREADS=1 run_test test_dist_mpi timeout 300 $MPIRUN "$B/test_dist_mpi"
    for mode in hang die; do
      t0=$(date +%s)
      OMP_NUM_THREADS=1 timeout 120 $MPIRUN "$B/test_dist_mpi" --$mode >"$B/mpi.log" 2>&1; rc=$?
      dt=$(( $(date +%s) - t0 ))
      if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $dt -lt 60 ] &&
         { [ $mode = die ] || grep -q "no answer after" "$B/mpi.log"; }; then ok
      else bad "mpi: a $mode rank must end the job with an error (exit $rc after ${dt} s)"; tail -20 "$B/mpi.log"; fi
    done
  else bad "test_dist_mpi (build with mpicc)"; head -30 "$B/mpi.log"; fi
  if bash tests/mpi/examples.sh "$B" >"$B/mpi_ex.log" 2>&1; then ok; else bad "mpi: examples under 2 ranks"; tail -30 "$B/mpi_ex.log"; fi
else
  echo "SKIP MPI tests: mpicc/mpirun not found (apt-get install libopenmpi-dev openmpi-bin)"; skip=$((skip + 1))
fi
section "2b. MPI"

# --- 3. misuse that must not compile -----------------------------------------
for t in tests/compile_fail/*.c tests/compile_fail/*.cc; do
  [ -f "$t" ] || continue
  want=$(grep -m1 -o 'expect: .*' "$t" | sed 's/expect: //; s/ *\*\/.*$//')
  if [[ $t == *.cc ]]; then cs="g++ clang++"; flags="-std=c++17 -Wall -Wextra -Wpedantic -Werror -x c++"
  else cs="gcc clang"; flags=$WARN; fi
  for c in $cs; do
    command -v $c >/dev/null || continue
    if $c $flags -Iinclude -c "$t" -o /dev/null 2>"$B/cf.log"; then bad "$t compiled with $c but must not"
    elif grep -q -- "$want" "$B/cf.log"; then ok
    else bad "$t with $c: message lacks '$want'"; head -5 "$B/cf.log"; fi
  done
done

section "3. compile failures"

# --- 3b. macro text grows linearly with nesting -------------------------------
for c in gcc clang; do
  command -v $c >/dev/null || continue
  if bash tests/macro_growth.sh $c "$B/growth_$c" >"$B/growth.log" 2>&1; then ok; cat "$B/growth.log"
  else bad "macro text growth with $c"; cat "$B/growth.log"; fi
done
section "3b. macro growth"

# --- 4. examples as a user builds them ---------------------------------------
# an example's link flags beyond -lm (its " * dl-example-flags: -lz" line)
example_flags() { sed -n 's|^ \* dl-example-flags: \(.*\)$|\1|p' "$1" | head -n 1; }
for e in examples/*.c; do
  [ -f "$e" ] || continue
  build "$B/ex_$(basename "$e" .c)" cc -std=c11 -O2 -Wall -Wextra -Wpedantic -Werror -Iinclude "$e" -o "$B/ex_$(basename "$e" .c)" \
    $(example_flags "$e") -lm
done
built_all
for e in examples/*.c; do
  [ -f "$e" ] || continue
  n=$(basename "$e" .c)
  if built "$B/ex_$n"; then ok
  else bad "example $n (build with cc -O2 $(example_flags "$e") -lm)"; head -20 "$B/ex_$n.log"; continue; fi
  if [ -f "examples/$n.check" ]; then
    if bash "examples/$n.check" "$B/ex_$n" >"$B/ex.log" 2>&1; then ok; else bad "example $n run"; tail -20 "$B/ex.log"; fi
  fi
done
section "4. examples"

# --- 4b. compile once: a program of several files ---------------------------
# examples/multi/ (three files) built the compile-once way (dl.c defines
# DL_IMPLEMENTATION, every file -DDL_LINK) and the default way (each file its
# own static copy of what it uses): both train to the same result line; the
# DL_LINK objects define none of the library's symbols (they compile none
# of it) and the library object defines them all once.
if [ -d /usr/share/datasets/fashion-mnist ] || [ -n "${DL_FASHION_MNIST_DIR:-}" ]; then
  M="$B/multi"; mkdir -p "$M"
  MF="$WARN -O2 -DDL_USE_ZLIB -Iinclude -Iexamples/multi"
  built=1
  for f in dl model data train; do
    $CC $MF -DDL_LINK -c "examples/multi/$f.c" -o "$M/$f.o" 2>"$M/build.log" || { built=0; bad "multi: $f.c with -DDL_LINK"; head -20 "$M/build.log"; }
    [ "$f" = dl ] && continue
    $CC $MF -c "examples/multi/$f.c" -o "$M/${f}_own.o" 2>"$M/build.log" || { built=0; bad "multi: $f.c (default)"; head -20 "$M/build.log"; }
  done
  if [ $built = 1 ] && $CC "$M/dl.o" "$M/model.o" "$M/data.o" "$M/train.o" -o "$M/multi_once" -lz -lm 2>"$M/build.log" &&
     $CC "$M/model_own.o" "$M/data_own.o" "$M/train_own.o" -o "$M/multi_own" -lz -lm 2>>"$M/build.log"; then
    ok
    leaked=$(for f in model data train; do nm "$M/$f.o" | awk '$2 ~ /^[TtDdBbRr]$/ && $3 ~ /^(dl_|dl__|stbi)/ {print FILENAME": "$3}' FILENAME="$f.o"; done)
    if [ -z "$leaked" ] && nm "$M/dl.o" | grep -q " T dl_train_step$"; then ok
    else bad "multi: -DDL_LINK objects compile library code (or dl.o lacks it): $(echo $leaked | head -c 300)"; fi
    once=$("$M/multi_once" --epochs 1 --train 2000 --test 500 2>&1); own=$("$M/multi_own" --epochs 1 --train 2000 --test 500 2>&1)
    echo "multi (compile once): $once"; echo "multi (each file its own): $own"
    acc=$(echo "$once" | sed -n 's/^result: test_acc=\([0-9.]*\).*/\1/p')
    if [ -n "$acc" ] && [ "$once" = "$own" ] && awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }'; then ok
    else bad "multi: the two builds differ or did not learn (test_acc '$acc' <= 0.6)"; fi
  else bad "multi: link"; head -20 "$M/build.log"; fi
else
  echo "SKIP examples/multi: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"; skip=$((skip + 1))
fi
section "4b. compile once"

# --- 4b. firmware: a trained model on a Cortex-M4 under QEMU ----------------------
# examples/firmware/run.sh --quick: the MLP and the small CNN trained one
# epoch, exported in f32 and int8, built for the Cortex-M4 (no allocator
# symbol), run under qemu-system-arm; int8 predictions identical to the
# host's, f32 agreeing on 99.5%, int8 within a point of f32 on the test set.
if [ "${DL_TEST_QUICK:-0}" = 1 ]; then
  echo "SKIP firmware: not in a quick run (make test or make firmware runs it)"; skip=$((skip + 1))
else
  fw=$(FW_OUT="$B/firmware" bash examples/firmware/run.sh --quick 2>&1); rc=$?
  echo "$fw" | grep -E '^(result|FAIL|SKIP|micro)'
  if [ $rc = 3 ]; then skip=$((skip + 1))
  elif [ $rc = 0 ] && [ "$(echo "$fw" | grep -c '^result: model=')" = 4 ]; then pass=$((pass + 4))
  else bad "firmware (examples/firmware/run.sh --quick, exit $rc)"; echo "$fw" | tail -n 15; fi
fi
section "4b. firmware"

# --- 4c. installed, as another project uses it -------------------------------
ds=$(bash tests/downstream.sh "$B/downstream" 2>&1)
echo "$ds" | grep -v '^PASS'
set -- $(echo "$ds" | grep '^DOWNSTREAM ' | tail -n 1)
if [ $# = 4 ]; then
  pass=$((pass + $2)); skip=$((skip + $4))
  [ "$3" -gt 0 ] && { fail=$((fail + $3)); failed+=("installed and used downstream ($3 checks)"); }
else bad "tests/downstream.sh (no result line)"; echo "$ds" | tail -n 20; fi
section "4c. installed"

# --- 4d. out of memory as the system reports it ----------------------------------
om=$(bash tests/oom_ulimit.sh "$B" 2>&1)
echo "$om" | grep -v '^OOM_ULIMIT '
set -- $(echo "$om" | grep '^OOM_ULIMIT ' | tail -n 1)
if [ $# = 4 ]; then
  pass=$((pass + $2)); skip=$((skip + $4))
  [ "$3" -gt 0 ] && { fail=$((fail + $3)); failed+=("out of memory under ulimit -v ($3 builds)"); }
else bad "tests/oom_ulimit.sh (no result line)"; echo "$om" | tail -n 20; fi
section "4d. out of memory"

# --- 4e. the guides and the API reference -------------------------------------
dl=$(bash tests/docs_listings.sh "$B/docs" 2>&1)
echo "$dl" | grep -v '^DOCS '
set -- $(echo "$dl" | grep '^DOCS ' | tail -n 1)
if [ $# = 4 ]; then
  pass=$((pass + $2)); skip=$((skip + $4))
  [ "$3" -gt 0 ] && { fail=$((fail + $3)); failed+=("docs: guides' listings or the API reference ($3 checks)"); }
else bad "tests/docs_listings.sh (no result line)"; echo "$dl" | tail -n 20; fi
section "4e. guides"

# --- 5. sanitizers ------------------------------------------------------------
if [ "${DL_TEST_QUICK:-0}" != 1 ]; then
  for t in tests/test_*.c; do
    n=$(basename "$t" .c)
    # built with step 2's
    if built "$B/${n}_san"; then ASAN_OPTIONS=detect_leaks=1 DL_TEST_SANITIZER=1 run_test "${n}_sanitized" "$B/${n}_san"
    else bad "$n (sanitizer build)"; head -30 "$B/${n}_san.log"; fi
    if [ "$n" = test_ops_conv ]; then
      if built "$B/${n}_native_san"; then
        ASAN_OPTIONS=detect_leaks=1 DL_TEST_SANITIZER=1 run_test "${n}_native_sanitized" "$B/${n}_native_san"
      else bad "$n (sanitizer build for this CPU)"; head -30 "$B/${n}_native_san.log"; fi
    fi
  done
  section "5. sanitizers (runs)"
fi

# --- 6. fuzzing ---------------------------------------------------------------
if [ "${DL_TEST_QUICK:-0}" != 1 ]; then
  if echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' |
      clang -fsanitize=fuzzer,address,undefined -x c - -o "$B/fuzz_probe" >/dev/null 2>&1; then
    while read -r word verdict name rest; do
      [ "$word" = FUZZ ] || continue
      if [ "$verdict" = PASS ]; then ok; echo "fuzz $name $rest"
      elif [ "$verdict" = SKIP ]; then skip=$((skip + 1)); echo "SKIP fuzz $name $rest"
      else bad "fuzz ${name%:} $rest"; fi
    done < <(FUZZ_CI=1 bash fuzz/run.sh 15 2>&1 | tee "$B/fuzz.log")
    grep -v '^FUZZ' "$B/fuzz.log" | head -40
  else
    echo "SKIP fuzzing: clang cannot build a libFuzzer program (apt-get install clang)"; skip=$((skip + 1))
  fi
  section "6. fuzzing"
fi

echo "time: the whole suite: $SECONDS s"
echo
if [ $fail -gt 0 ]; then printf 'failed: %s\n' "${failed[@]}"; fi
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
