#!/usr/bin/env bash
# bench/run_all.sh - every benchmark with its reference in the same run
# (`make bench`). Timings are medians; these machines are shared and noisy.
#
#   1. GEMM: dl_gemm_f32 over OpenBLAS vs cblas_sgemm directly at the shapes of
#      a 784-256-128-10 MLP at batch 64, and the built-in kernel vs OpenBLAS
#      at 512 and 1024 square (bench_gemm.c)
#   2. vectorisable math vs glibc's scalar functions (bench_vmath.c)
#   3. fused element-wise loops vs a STREAM triad and PyTorch eager, thread
#      behaviour on a shared machine, denormals (run_fused.sh)
#   4. forward+backward of a 784-256-128-10 MLP at batch 64 on the tape vs
#      PyTorch eager (run_mlp.sh; goal >= 2x)
#   5. forward+backward of conv2d 5x5 32->64 on 12x12, batch 64, vs PyTorch
#      (run_conv.sh; goal >= 1x)
#   6. a whole training step of that MLP (forward, backward, clip, Adam) from
#      layers.h + optim.h vs PyTorch, and allocations per step (run_step.sh;
#      goals >= 2x and 0)
#   7. whole training runs of examples/fashion_mlp.c and fashion_cnn.c vs
#      PyTorch: samples/s (and vs 1 thread), peak RSS, heap allocations per
#      step, -O2 compile time (run_train.sh; goals >= 2x / >= 1x, <= 1/4, 0,
#      < 3 s)
#   8. the MLP example data-parallel over MPI: 1 rank vs 2 ranks, 1 thread
#      each, speed-up and scaling efficiency (run_dist.sh)
#   9. the Fashion examples trained on the GPU (--device cuda) vs PyTorch on
#      the same GPU, eager and graph-captured (run_gpu.sh; goal >= 1.2x the captured loop; SKIP without a GPU)
#  11. the GPT of examples/gpt.c: training tokens/s and peak RSS vs PyTorch,
#      attention memory at T = 256 / 1024 / 2048, KV-cache generation
#      (run_gpt.sh; goals >= 2x, <= 1/2, linear, >= 10x)
#  12. the language models of examples/ on the fortunes text: held-out bits
#      per byte and wall time of char_lm.c (LSTM) and a small gpt.c with
#      token shift, alternating (run_lm.sh; goal: the GPT lower in no more
#      time)
#  10. compile cost: -O2 and fast-flag compile time and preprocessed size of
#      a stdio.h-only file, a dl.h-only file and examples/fashion_mlp.c
#      (run_compile.sh; goals <= 2 s -O2, <= 3 s fast, <= 3 MB preprocessed)
set -u
cd "$(dirname "$0")/.."
B=build/bench
mkdir -p "$B"
CC=${CC:-gcc}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
status=0

echo "== GEMM (2 threads) =="
if $CC -std=c11 -O3 -march=native -fopenmp -DDL_USE_OPENBLAS -Iinclude bench/bench_gemm.c -o $B/bench_gemm -lopenblas -lm; then
  $B/bench_gemm || status=1
else echo "bench_gemm: build failed (libopenblas-dev missing?)"; status=1; fi

echo
echo "== vectorisable math (1 thread) =="
if $CC -std=c11 -O3 -march=native -Iinclude bench/bench_vmath.c -o $B/bench_vmath -lm; then
  $B/bench_vmath || status=1
else echo "bench_vmath: build failed"; status=1; fi

echo
echo "== fused element-wise loops =="
bash bench/run_fused.sh || status=1

echo
echo "== MLP forward+backward on the tape vs PyTorch =="
bash bench/run_mlp.sh || status=1

echo
echo "== conv2d forward+backward vs PyTorch =="
bash bench/run_conv.sh || status=1

echo
echo "== MLP training step (layers + Adam) vs PyTorch =="
bash bench/run_step.sh || status=1

echo
echo "== training runs of the examples vs PyTorch =="
bash bench/run_train.sh || status=1
echo
echo "== the GPT: training, memory and generation vs PyTorch (run_gpt.sh) =="
bash bench/run_gpt.sh || status=1
echo
echo "== the language models: char_lm vs a small GPT in bits per byte and wall time (run_lm.sh) =="
bash bench/run_lm.sh || status=1
echo
echo "== data-parallel training over MPI (run_dist.sh) =="
bash bench/run_dist.sh || status=1
echo
echo "== training on the GPU vs PyTorch CUDA (run_gpu.sh) =="
bash bench/run_gpu.sh || status=1
echo
echo "== compile cost of the library (run_compile.sh) =="
bash bench/run_compile.sh || status=1
exit $status
