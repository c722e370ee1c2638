// src_gpu/optim.cu - the optimizer updates, clipping and regularisation on
// the device: the ABI of dl/gpu/optim.h, for optim.h. Every update rounds
// as the CPU does (engine.h's radd/rmul/...: no fused multiply-add).
#include "engine.h"

namespace {

// >>optimizers: element i of g is element at(i) of p and the state

__host__ __device__ __forceinline__ int64_t at(int64_t i, int64_t w, const int64_t *rows) {
  if (!rows) return i;
  const int64_t k = i / w;
  return rows[k] * w + (i - k * w);
}
template <typename T> __host__ __device__ __forceinline__ T sgn(T v) {
  return rsub(v > 0 ? (T)1 : (T)0, v < 0 ? (T)1 : (T)0);
}

template <typename T>
__host__ __device__ __forceinline__ void sgd_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                const T *__restrict__ g, T *__restrict__ buf, T sg, T wd, T mom,
                                                T damp1, T lr, int use_buf, int first, int nesterov, int64_t i) {
  const int64_t k = at(i, w, rows);
  const T pk = p[k], d = radd(rmul(sg, g[i]), rmul(wd, pk));
  if (!use_buf) {
    p[k] = rsub(pk, rmul(lr, d));
    return;
  }
  const T b = first ? d : radd(rmul(buf[k], mom), rmul(damp1, d));
  buf[k] = b;
  p[k] = nesterov ? rsub(pk, rmul(lr, radd(d, rmul(mom, b)))) : rsub(pk, rmul(lr, b));
}
template <typename T>
__global__ void k_sgd(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                      const T *__restrict__ g, T *__restrict__ buf, T sg, T wd, T mom, T damp1, T lr, int use_buf,
                      int first, int nesterov) {
  GRID_STRIDE(i, n) sgd_at(w, rows, p, g, buf, sg, wd, mom, damp1, lr, use_buf, first, nesterov, i);
}
template <typename T>
__host__ __device__ __forceinline__ void adam_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                 const T *__restrict__ g, T *__restrict__ m, T *__restrict__ v,
                                                 T *__restrict__ vm, T sg, T wd, T b1, T b1c, T b2, T b2c, T dec, T ss,
                                                 T bc, T eps, int64_t i) {
  const int64_t k = at(i, w, rows);
  const T pk = p[k], d = radd(rmul(sg, g[i]), rmul(wd, pk));
  const T mi = radd(rmul(m[k], b1), rmul(b1c, d));
  T vi = radd(rmul(v[k], b2), rmul(b2c, rmul(d, d)));
  m[k] = mi;
  v[k] = vi;
  if (vm) {
    const T a = vm[k];
    vi = (a > vi || a != a) ? a : vi;
    vm[k] = vi;
  }
  p[k] = rsub(rmul(pk, dec), rdiv(rmul(ss, mi), radd(rdiv(rsqrt_(vi), bc), eps)));
}
template <typename T>
__global__ void k_adam(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                       const T *__restrict__ g, T *__restrict__ m, T *__restrict__ v, T *__restrict__ vm, T sg, T wd,
                       T b1, T b1c, T b2, T b2c, T dec, T ss, T bc, T eps) {
  GRID_STRIDE(i, n) adam_at(w, rows, p, g, m, v, vm, sg, wd, b1, b1c, b2, b2c, dec, ss, bc, eps, i);
}
// The multi-tensor Adam: blockIdx.y picks the tensor, blocks along x stride over its elements.
template <typename T> __global__ void k_adam_multi(const dlg_adam_tensor *__restrict__ tab) {
  const dlg_adam_tensor t = tab[blockIdx.y];
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < t.n; i += stride)
    adam_at<T>(0, nullptr, (T *)t.p, (const T *)t.g, (T *)t.m, (T *)t.v, (T *)t.vmax, (T)t.sg, (T)t.wd, (T)t.b1,
               (T)t.b1c, (T)t.b2, (T)t.b2c, (T)t.decay, (T)t.step_size, (T)t.bc2_sqrt, (T)t.eps, i);
}
template <typename T>
__host__ __device__ __forceinline__ void rmsprop_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                    const T *__restrict__ g, T *__restrict__ sq, T *__restrict__ ga,
                                                    T *__restrict__ mb, T sg, T wd, T al, T al1, T eps, T mom, T lr,
                                                    int64_t i) {
  const int64_t k = at(i, w, rows);
  const T pk = p[k], d = radd(rmul(sg, g[i]), rmul(wd, pk));
  const T s = radd(rmul(sq[k], al), rmul(al1, rmul(d, d)));
  T avg;
  sq[k] = s;
  if (ga) {
    const T a = radd(rmul(ga[k], al), rmul(al1, d));
    ga[k] = a;
    avg = radd(rsqrt_(rsub(s, rmul(a, a))), eps);
  } else {
    avg = radd(rsqrt_(s), eps);
  }
  if (mb) {
    const T b = radd(rmul(mb[k], mom), rdiv(d, avg));
    mb[k] = b;
    p[k] = rsub(pk, rmul(lr, b));
  } else {
    p[k] = rsub(pk, rdiv(rmul(lr, d), avg));
  }
}
template <typename T>
__global__ void k_rmsprop(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                          const T *__restrict__ g, T *__restrict__ sq, T *__restrict__ ga, T *__restrict__ mb, T sg,
                          T wd, T al, T al1, T eps, T mom, T lr) {
  GRID_STRIDE(i, n) rmsprop_at(w, rows, p, g, sq, ga, mb, sg, wd, al, al1, eps, mom, lr, i);
}
template <typename T>
__host__ __device__ __forceinline__ void adagrad_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                    const T *__restrict__ g, T *__restrict__ sum, T sg, T wd, T clr,
                                                    T eps, int64_t i) {
  const int64_t k = at(i, w, rows);
  const T pk = p[k], d = radd(rmul(sg, g[i]), rmul(wd, pk));
  const T s = radd(sum[k], rmul(d, d));
  sum[k] = s;
  p[k] = rsub(pk, rdiv(rmul(clr, d), radd(rsqrt_(s), eps)));
}
template <typename T>
__global__ void k_adagrad(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                          const T *__restrict__ g, T *__restrict__ sum, T sg, T wd, T clr, T eps) {
  GRID_STRIDE(i, n) adagrad_at(w, rows, p, g, sum, sg, wd, clr, eps, i);
}
template <typename T>
__host__ __device__ __forceinline__ void lion_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                                                 const T *__restrict__ g, T *__restrict__ m, T b1, T b1c, T b2, T b2c,
                                                 T lr, T dec, int64_t i) {
  const int64_t k = at(i, w, rows);
  const T gi = g[i], mk = m[k];
  const T c = radd(rmul(mk, b1), rmul(b1c, gi));
  p[k] = rsub(rmul(p[k], dec), rmul(lr, sgn(c)));
  m[k] = radd(rmul(mk, b2), rmul(b2c, gi));
}
template <typename T>
__global__ void k_lion(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ p,
                       const T *__restrict__ g, T *__restrict__ m, T b1, T b1c, T b2, T b2c, T lr, T dec) {
  GRID_STRIDE(i, n) lion_at(w, rows, p, g, m, b1, b1c, b2, b2c, lr, dec, i);
}
template <typename T> __host__ __device__ __forceinline__ void clamp_at(T *__restrict__ x, T lo, T hi, int64_t i) {
  const T v = x[i];
  x[i] = v < lo ? lo : v > hi ? hi : v;
}
template <typename T> __global__ void k_clamp(T *__restrict__ x, int64_t n, T lo, T hi) {
  GRID_STRIDE(i, n) clamp_at(x, lo, hi, i);
}
// LAMB (dl__lamb_<sfx>): m, v, then u = (m / bc1) / (sqrt(v) / bc2s + eps) + wd p, rounded as the CPU.
template <typename T>
__host__ __device__ __forceinline__ void lamb_mv_at(const T *__restrict__ g, T *__restrict__ m, T *__restrict__ v, T b1,
                                                    T b1c, T b2, T b2c, int64_t i) {
  const T gi = g[i];
  m[i] = radd(rmul(m[i], b1), rmul(b1c, gi));
  v[i] = radd(rmul(v[i], b2), rmul(b2c, rmul(gi, gi)));
}
template <typename T>
__host__ __device__ __forceinline__ T lamb_u(const T *p, const T *m, const T *v, T bc1, T bc2s, T eps, T wd, int64_t i) {
  return radd(rdiv(rdiv(m[i], bc1), radd(rdiv(rsqrt_(v[i]), bc2s), eps)), rmul(wd, p[i]));
}
// The step's scale (T)(lr trust) from the sums of p^2 (s[0]) and u^2 (s[1]), as dl__lamb_<sfx>.
template <typename T> __host__ __device__ __forceinline__ T lamb_scale(const double *s, double lr, double max_trust) {
  const double pn = sqrt(s[0]), un = sqrt(s[1]);
  double trust = pn > 0 && un > 0 ? pn / un : 1.0;
  if (max_trust > 0 && trust > max_trust) trust = max_trust;
  return (T)(lr * trust);
}
template <typename T>
__host__ __device__ __forceinline__ void lamb_apply_at(T *__restrict__ p, const T *__restrict__ m, const T *__restrict__ v,
                                                       T bc1, T bc2s, T eps, T wd, T st, int64_t i) {
  const T u = lamb_u(p, m, v, bc1, bc2s, eps, wd, i);
  p[i] = rsub(p[i], rmul(st, u));
}
template <typename T>
__global__ void k_lamb_mv(int64_t n, const T *__restrict__ g, T *__restrict__ m, T *__restrict__ v, T b1, T b1c, T b2,
                          T b2c) {
  GRID_STRIDE(i, n) lamb_mv_at(g, m, v, b1, b1c, b2, b2c, i);
}
template <typename T>
__global__ void k_lamb_apply(int64_t n, T *__restrict__ p, const T *__restrict__ m, const T *__restrict__ v, T bc1,
                             T bc2s, T eps, T wd, const double *s, double lr, double max_trust) {
  const T st = lamb_scale<T>(s, lr, max_trust);
  GRID_STRIDE(i, n) lamb_apply_at(p, m, v, bc1, bc2s, eps, wd, st, i);
}
template <typename T> struct FLambU {
  const T *p, *m, *v;
  T bc1, bc2s, eps, wd;
  __host__ __device__ double operator()(int64_t i) const {
    const double u = (double)lamb_u(p, m, v, bc1, bc2s, eps, wd, i);
    return u * u;
  }
};

template <typename T> struct FSq {
  const T *x;
  __host__ __device__ double operator()(int64_t i) const {
    const double v = (double)x[i];
    return v * v;
  }
};
template <typename T> __host__ __device__ __forceinline__ void scale_at(T *__restrict__ x, T f, int64_t i) {
  x[i] = rmul(x[i], f);
}
template <typename T> __global__ void k_scale(T *__restrict__ x, int64_t n, T f) {
  GRID_STRIDE(i, n) scale_at(x, f, i);
}
// >>dlg_clip_multi: blockIdx.y picks the buffer; partial k * gridDim.x + blockIdx.x
template <typename T>
__global__ void __launch_bounds__(TPB) k_sumsq_multi(const dlg_gbuf *__restrict__ tab, double *__restrict__ part) {
  __shared__ double sh[TPB];
  const dlg_gbuf t = tab[blockIdx.y];
  const FSq<T> f = {(const T *)t.g};
  double a = 0;
  GRID_STRIDE(i, t.n) a += f(i);
  sh[threadIdx.x] = a;
  __syncthreads();
  for (int s = TPB / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[(int64_t)blockIdx.y * gridDim.x + blockIdx.x] = sh[0];
}
// One block: each buffer's nb partials added as k_pfinal adds them, the
// buffers' sums in their order, then the norm and the factor (see abi).
__global__ void __launch_bounds__(TPB) k_clip_final(const double *__restrict__ part, int nt, int64_t nb,
                                                    double max_norm, double *__restrict__ out) {
  __shared__ double sh[TPB];
  double total = 0; // thread 0's
  for (int k = 0; k < nt; k++) {
    double a = 0;
    for (int64_t i = threadIdx.x; i < nb; i += TPB) a += part[(int64_t)k * nb + i];
    sh[threadIdx.x] = a;
    __syncthreads();
    for (int s = TPB / 2; s > 0; s >>= 1) {
      if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) total = radd(total, sh[0]);
    __syncthreads(); // sh is refilled for the next buffer
  }
  if (threadIdx.x == 0) {
    const double norm = rsqrt_(total);
    out[0] = norm;
    out[1] = max_norm > 0 ? rdiv(max_norm, radd(norm, 1e-6)) : 1.0;
  }
}
template <typename T> __global__ void k_scale_multi(const dlg_gbuf *__restrict__ tab, const double *__restrict__ out) {
  const double f = out[1];
  if (f >= 1) return; // the CPU's rule: no scaling unless f < 1 or NaN
  const dlg_gbuf t = tab[blockIdx.y];
  GRID_STRIDE(i, t.n) scale_at((T *)t.g, (T)f, i);
}
template <typename T>
__host__ __device__ __forceinline__ void regularize_at(int64_t w, const int64_t *__restrict__ rows, T *__restrict__ g,
                                                       const T *__restrict__ p, T l1, T l2, int64_t i) {
  const T pk = p[at(i, w, rows)];
  g[i] = radd(g[i], radd(rmul(l2, pk), rmul(l1, sgn(pk))));
}
template <typename T>
__global__ void k_regularize(int64_t n, int64_t w, const int64_t *__restrict__ rows, T *__restrict__ g,
                             const T *__restrict__ p, T l1, T l2) {
  GRID_STRIDE(i, n) regularize_at(w, rows, g, p, l1, l2, i);
}


#ifndef DLG_HOST_TEST
// The rows of a row-sparse step into the workspace (NULL when dense).
inline int stage_rows(dlg_handle *h, const char *op, int64_t n, int64_t width, const int64_t *rows, const int64_t **dev) {
  *dev = NULL;
  if (!rows || n == 0) return DLG_OK;
  if (width <= 0 || n % width != 0)
    return dlg_fail(h, DLG_ERR, "%s: %lld elements are not whole rows of %lld", op, (long long)n, (long long)width);
  const size_t bytes = sizeof(int64_t) * (size_t)(n / width);
  DLG_TRY(dlg_ws(h, up256(bytes)));
  DLG_TRY(stage(h, h->ws, rows, bytes, op));
  *dev = (const int64_t *)h->ws;
  return DLG_OK;
}
template <typename T>
int lamb_run(dlg_handle *h, const char *op, int64_t n, T *p, const T *g, T *m, T *v, const double *k) {
  const unsigned nb = dlg_blocks(h, n, TPB);
  const Carve c = carve(sizeof(double) * (size_t)psum_blocks(h, n), 2 * sizeof(double));
  DLG_TRY(dlg_ws(h, c.total));
  double *part = piece<double>(h, c, 0), *sums = piece<double>(h, c, 1);
  const T bc1 = (T)k[4], bc2s = (T)k[5], eps = (T)k[6], wd = (T)k[7];
  DLG_LAUNCH(nb, TPB, 0, h->stream, k_lamb_mv<T>)(n, g, m, v, (T)k[0], (T)k[1], (T)k[2], (T)k[3]);
  DLG_TRY(dlg_launched(h, op));
  const FSq<T> fp = {p};
  DLG_TRY(psum<double>(h, op, fp, n, part, sums, 1.0));
  const FLambU<T> fu = {p, m, v, bc1, bc2s, eps, wd};
  DLG_TRY(psum<double>(h, op, fu, n, part, sums + 1, 1.0));
  DLG_LAUNCH(nb, TPB, 0, h->stream, k_lamb_apply<T>)(n, p, m, v, bc1, bc2s, eps, wd, sums, k[8], k[9]);
  return dlg_launched(h, op);
}
#endif // DLG_HOST_TEST

} // namespace

#ifndef DLG_HOST_TEST
// ================================================================ the ABI

extern "C" {

int dlg_sgd_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                   void *buf, double sg, double wd, double momentum, double damp1, double lr, int first,
                   int nesterov) {
  static const char *op = "dlg_sgd_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  const int use_buf = momentum != 0;
  if (use_buf && !buf) return dlg_fail(h, DLG_ERR, "%s: momentum %g needs the momentum buffer", op, momentum);
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_sgd<float>)(n, width, r, (float *)p, (const float *)g, (float *)buf, (float)sg,
                                            (float)wd, (float)momentum, (float)damp1, (float)lr, use_buf, first,
                                            nesterov);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_sgd<double>)(n, width, r, (double *)p, (const double *)g, (double *)buf, sg, wd,
                                             momentum, damp1, lr, use_buf, first, nesterov);
  return dlg_launched(h, op);
}

int dlg_adam_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                    void *m, void *v, void *vmax, double sg, double wd, double b1, double b1c, double b2, double b2c,
                    double decay, double step_size, double bc2_sqrt, double eps) {
  static const char *op = "dlg_adam_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adam<float>)(n, width, r, (float *)p, (const float *)g, (float *)m, (float *)v,
                                             (float *)vmax, (float)sg, (float)wd, (float)b1, (float)b1c, (float)b2,
                                             (float)b2c, (float)decay, (float)step_size, (float)bc2_sqrt,
                                             (float)eps);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adam<double>)(n, width, r, (double *)p, (const double *)g, (double *)m, (double *)v,
                                              (double *)vmax, sg, wd, b1, b1c, b2, b2c, decay, step_size, bc2_sqrt,
                                              eps);
  return dlg_launched(h, op);
}

int dlg_adam_multi(dlg_handle *h, int dtype, int nt, const dlg_adam_tensor *t) {
  static const char *op = "dlg_adam_multi";
  int64_t most = 0;
  DLG_CHECK_DTYPE(op, dtype);
  if (nt <= 0) return DLG_OK;
  if (nt > 65535) return dlg_fail(h, DLG_ERR, "%s: %d tensors (at most 65535 per launch)", op, nt);
  for (int k = 0; k < nt; k++) most = t[k].n > most ? t[k].n : most;
  if (most == 0) return DLG_OK;
  const size_t bytes = sizeof(dlg_adam_tensor) * (size_t)nt;
  DLG_TRY(dlg_ws(h, bytes));
  DLG_TRY(dlg_cuda(h, dlg_memcpy_async(h, h->ws, t, bytes, cudaMemcpyHostToDevice), op));
  unsigned bx = dlg_blocks(h, most, TPB), cap = (unsigned)((h->sm_count > 0 ? h->sm_count : 80) * 8 / nt + 1);
  if (bx > cap) bx = cap; // all tensors together: about eight blocks per multiprocessor
  const dim3 grid(bx, (unsigned)nt);
  if (dtype == DLG_F32)
    DLG_LAUNCH(grid, TPB, 0, h->stream, k_adam_multi<float>)((const dlg_adam_tensor *)h->ws);
  else
    DLG_LAUNCH(grid, TPB, 0, h->stream, k_adam_multi<double>)((const dlg_adam_tensor *)h->ws);
  return dlg_launched(h, op);
}

int dlg_rmsprop_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p,
                       const void *g, void *sq, void *ga, void *mb, double sg, double wd, double alpha, double alpha1,
                       double eps, double momentum, double lr) {
  static const char *op = "dlg_rmsprop_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_rmsprop<float>)(n, width, r, (float *)p, (const float *)g, (float *)sq, (float *)ga,
                                                (float *)mb, (float)sg, (float)wd, (float)alpha, (float)alpha1,
                                                (float)eps, (float)momentum, (float)lr);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_rmsprop<double>)(n, width, r, (double *)p, (const double *)g, (double *)sq,
                                                 (double *)ga, (double *)mb, sg, wd, alpha, alpha1, eps, momentum,
                                                 lr);
  return dlg_launched(h, op);
}

int dlg_adagrad_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p,
                       const void *g, void *sum, double sg, double wd, double clr, double eps) {
  static const char *op = "dlg_adagrad_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adagrad<float>)(n, width, r, (float *)p, (const float *)g, (float *)sum, (float)sg,
                                                (float)wd, (float)clr, (float)eps);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adagrad<double>)(n, width, r, (double *)p, (const double *)g, (double *)sum, sg, wd,
                                                 clr, eps);
  return dlg_launched(h, op);
}

int dlg_lion_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                    void *m, double b1, double b1c, double b2, double b2c, double lr, double decay) {
  static const char *op = "dlg_lion_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_lion<float>)(n, width, r, (float *)p, (const float *)g, (float *)m, (float)b1,
                                             (float)b1c, (float)b2, (float)b2c, (float)lr, (float)decay);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_lion<double>)(n, width, r, (double *)p, (const double *)g, (double *)m, b1, b1c, b2,
                                              b2c, lr, decay);
  return dlg_launched(h, op);
}

int dlg_lamb_update(dlg_handle *h, int dtype, int64_t n, void *p, const void *g, void *m, void *v, const double *k) {
  static const char *op = "dlg_lamb_update";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  if (dtype == DLG_F32) return lamb_run<float>(h, op, n, (float *)p, (const float *)g, (float *)m, (float *)v, k);
  return lamb_run<double>(h, op, n, (double *)p, (const double *)g, (double *)m, (double *)v, k);
}

int dlg_clamp(dlg_handle *h, int dtype, void *x, int64_t n, double v) {
  static const char *op = "dlg_clamp";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  if (dtype == DLG_F32)
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_clamp<float>)((float *)x, n, (float)-v, (float)v);
  else
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_clamp<double>)((double *)x, n, -v, v);
  return dlg_launched(h, op);
}

int dlg_sumsq(dlg_handle *h, int dtype, const void *x, int64_t n, double *out) {
  static const char *op = "dlg_sumsq";
  DLG_CHECK_DTYPE(op, dtype);
  const Carve c = carve(sizeof(double) * (size_t)psum_blocks(h, n));
  DLG_TRY(dlg_ws(h, c.total));
  if (dtype == DLG_F32) {
    const FSq<float> f = {(const float *)x};
    return psum<double>(h, op, f, n, piece<double>(h, c, 0), out, 1.0);
  }
  const FSq<double> f = {(const double *)x};
  return psum<double>(h, op, f, n, piece<double>(h, c, 0), out, 1.0);
}

int dlg_scale(dlg_handle *h, int dtype, void *x, int64_t n, double f) {
  static const char *op = "dlg_scale";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  if (dtype == DLG_F32) DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_scale<float>)((float *)x, n, (float)f);
  else DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_scale<double>)((double *)x, n, f);
  return dlg_launched(h, op);
}

int dlg_clip_multi(dlg_handle *h, int dtype, int nt, const dlg_gbuf *t, double max_norm, double *out) {
  static const char *op = "dlg_clip_multi";
  int64_t most = 0;
  DLG_CHECK_DTYPE(op, dtype);
  if (nt < 0 || nt > 65535) return dlg_fail(h, DLG_ERR, "%s: %d buffers (0 to 65535 per launch)", op, nt);
  for (int k = 0; k < nt; k++) most = t[k].n > most ? t[k].n : most;
  // about eight blocks per multiprocessor over all buffers (as dlg_adam_multi), one at least per buffer
  unsigned bx = dlg_blocks(h, most ? most : 1, TPB), cap = (unsigned)((h->sm_count > 0 ? h->sm_count : 80) * 8 / (nt ? nt : 1) + 1);
  if (bx > cap) bx = cap;
  const Carve c = carve(sizeof(dlg_gbuf) * (size_t)(nt ? nt : 1), sizeof(double) * (size_t)bx * (size_t)(nt ? nt : 1));
  DLG_TRY(dlg_ws(h, c.total));
  dlg_gbuf *tab = piece<dlg_gbuf>(h, c, 0);
  double *part = piece<double>(h, c, 1);
  if (nt > 0) {
    DLG_TRY(stage(h, tab, t, sizeof(dlg_gbuf) * (size_t)nt, op));
    const dim3 grid(bx, (unsigned)nt);
    if (dtype == DLG_F32) DLG_LAUNCH(grid, TPB, 0, h->stream, k_sumsq_multi<float>)(tab, part);
    else DLG_LAUNCH(grid, TPB, 0, h->stream, k_sumsq_multi<double>)(tab, part);
    DLG_TRY(dlg_launched(h, op));
  }
  DLG_LAUNCH(1, TPB, 0, h->stream, k_clip_final)(part, nt, (int64_t)bx, max_norm, out);
  DLG_TRY(dlg_launched(h, op));
  if (!(max_norm > 0) || nt == 0) return DLG_OK;
  const dim3 grid(bx, (unsigned)nt);
  if (dtype == DLG_F32) DLG_LAUNCH(grid, TPB, 0, h->stream, k_scale_multi<float>)(tab, out);
  else DLG_LAUNCH(grid, TPB, 0, h->stream, k_scale_multi<double>)(tab, out);
  return dlg_launched(h, op);
}

int dlg_regularize(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *g, const void *p,
                   double l1, double l2) {
  static const char *op = "dlg_regularize";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  DLG_TRY(stage_rows(h, op, n, width, rows, &r));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_regularize<float>)(n, width, r, (float *)g, (const float *)p, (float)l1, (float)l2);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_regularize<double>)(n, width, r, (double *)g, (const double *)p, l1, l2);
  return dlg_launched(h, op);
}

} // extern "C"
#endif // DLG_HOST_TEST
