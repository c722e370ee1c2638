// tests/nvcc_device.cu - compiled (not run) by tests/run.sh where nvcc exists:
// the generic scalar math and dual numbers must compile as device code, with
// no warnings, so the GPU backend can generate kernels from the same op text.
#include "dl.h"

__global__ void dl_test_kernel(float *y, double *y64, float *dy, const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  y[i] = dl_add(dl_mul(dl_tanh(v), dl_sigmoid(v)), dl_gelu(dl_exp(dl_mul(-0.5, v))));
  y[i] += dl_erf(v) + dl_log1p(dl_abs(v)) + dl_expm1(dl_softplus(v)) + dl_silu(dl_elu(v, 1.0));
  dl_dual d = dl_mul(dl_dual_make(v, 1.0f), dl_gelu_erf(dl_dual_make(v, 1.0f)));
  dy[i] = d.d;
  dl_dual64 e = dl_div(dl_exp(dl_dual64_make((double)v, 1.0)), dl_add(1, dl_dual64_make((double)v, 1.0)));
  y64[i] = e.d + dl_pow(dl_abs((double)v), 1.5);
}

int main(void) { return 0; }
