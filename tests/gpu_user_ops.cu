// tests/gpu_user_ops.cu - the GPU kernels of tests/gpu_user_ops.h's user
// ops, from the same expressions (linked into tests/test_gpu*.c's CUDA
// builds by tests/run.sh). my_unported has no line here on purpose.
#include "dl/gpu/ew.cuh"
#include "gpu_user_ops.h"

DL_GPU_DEFINE_OP1(my_softsign, MY_SOFTSIGN(x0))
DL_GPU_DEFINE_OP2(my_hypot, MY_HYPOT(x0, x1))
