// tests/nvcc_device.cu - compiled (not run) by tests/run.sh where nvcc exists:
// the generic scalar math and dual numbers must compile as device code, with
// no warnings, so the GPU backend can generate kernels from the same op text.
#include "dl.h"

__global__ void dl_test_kernel(float *y, double *y64, float *dy, const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  y[i] = dl_add(dl_mul(dl_tanh(v), dl_sigmoid(v)), dl_gelu_tanh(dl_exp(dl_mul(-0.5, v))));
  y[i] += dl_erf(v) + dl_log1p(dl_abs(v)) + dl_expm1(dl_softplus(v)) + dl_silu(dl_elu(v, 1.0));
  dl_dual d = dl_mul(dl_dual_make(v, 1.0f), dl_gelu(dl_dual_make(v, 1.0f)));
  dy[i] = d.d;
  dl_dual64 e = dl_div(dl_exp(dl_dual64_make((double)v, 1.0)), dl_add(1, dl_dual64_make((double)v, 1.0)));
  y64[i] = e.d + dl_pow(dl_abs((double)v), 1.5);
}

// The op list itself expands into device kernels: forward for every op and
// the derivative by dual numbers, from the same text the CPU loops use.
#define DL_TEST_K1(name, expr)                                                     \
  __global__ void dl_test_fwd_##name(float *y, const float *x, int n) {           \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                \
    if (i < n) { float x0 = x[i]; y[i] = (expr); }                                \
  }                                                                               \
  __global__ void dl_test_grad_##name(float *g, const float *x, int n) {          \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                \
    if (i < n) { dl_dual x0 = dl_dual_make(x[i], 1.0f); g[i] = (expr).d; }        \
  }
DL_OPS_UNARY(DL_TEST_K1)
#define DL_TEST_KP(name, expr)                                                     \
  __global__ void dl_test_fwdp_##name(float *y, const float *x, float p0, int n) { \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                \
    if (i < n) { float x0 = x[i]; y[i] = (expr); }                                \
  }
DL_OPS_UNARY_P(DL_TEST_KP)
#define DL_TEST_K2(name, expr)                                                     \
  __global__ void dl_test_fwd2_##name(float *y, const float *a, const float *b, int n) { \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                \
    if (i < n) { float x0 = a[i], x1 = b[i]; y[i] = (expr); }                     \
  }
DL_OPS_BINARY(DL_TEST_K2)

int main(void) { return 0; }
