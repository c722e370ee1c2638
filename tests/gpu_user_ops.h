/* tests/gpu_user_ops.h - two user element-wise ops, each written once as a
 * macro: tests/test_gpu_userop.c makes their CPU loops and tape ops from it
 * (DL_DEFINE_OP1 / DL_DEFINE_OP2) and tests/gpu_user_ops.cu their GPU
 * kernels (DL_GPU_DEFINE_OP1 / 2, nvcc), the way gpu.h tells users to. */
#ifndef TESTS_GPU_USER_OPS_H
#define TESTS_GPU_USER_OPS_H
#define MY_SOFTSIGN(x0) dl_div(x0, dl_add(1.0, dl_abs(x0)))
#define MY_HYPOT(x0, x1) dl_sqrt(dl_add(dl_mul(x0, x0), dl_mul(x1, x1)))
#endif
