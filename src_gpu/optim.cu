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
// An update's scalars (learning rate, bias corrections, decay, ...) reach its
// kernel by value, or, while the handle records a CUDA graph, as bytes staged
// on the device (d non-null: read there): a learning rate that a schedule
// changes every step then replays the captured graph instead of capturing a
// new one, as dlg_adam_multi's table and dropout's seed do. Either way the
// kernel rounds each to T once, as the host did: the same bits.
template <int N> struct Scal {
  double v[N];
};
template <int N> __host__ __device__ __forceinline__ void scal_load(Scal<N> &s, const double *__restrict__ d) {
  if (d)
    for (int k = 0; k < N; k++) s.v[k] = d[k];
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
                      const T *__restrict__ g, T *__restrict__ buf, Scal<5> s, const double *__restrict__ ds,
                      int use_buf, int first, int nesterov) {
  scal_load(s, ds);
  const T sg = (T)s.v[0], wd = (T)s.v[1], mom = (T)s.v[2], damp1 = (T)s.v[3], lr = (T)s.v[4];
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
                       const T *__restrict__ g, T *__restrict__ m, T *__restrict__ v, T *__restrict__ vm, Scal<10> s,
                       const double *__restrict__ ds) {
  scal_load(s, ds);
  const T sg = (T)s.v[0], wd = (T)s.v[1], b1 = (T)s.v[2], b1c = (T)s.v[3], b2 = (T)s.v[4], b2c = (T)s.v[5],
          dec = (T)s.v[6], ss = (T)s.v[7], bc = (T)s.v[8], eps = (T)s.v[9];
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
                          const T *__restrict__ g, T *__restrict__ sq, T *__restrict__ ga, T *__restrict__ mb,
                          Scal<7> s, const double *__restrict__ ds) {
  scal_load(s, ds);
  const T sg = (T)s.v[0], wd = (T)s.v[1], al = (T)s.v[2], al1 = (T)s.v[3], eps = (T)s.v[4], mom = (T)s.v[5],
          lr = (T)s.v[6];
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
                          const T *__restrict__ g, T *__restrict__ sum, Scal<4> s, const double *__restrict__ ds) {
  scal_load(s, ds);
  const T sg = (T)s.v[0], wd = (T)s.v[1], clr = (T)s.v[2], eps = (T)s.v[3];
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
                       const T *__restrict__ g, T *__restrict__ m, Scal<6> s, const double *__restrict__ ds) {
  scal_load(s, ds);
  const T b1 = (T)s.v[0], b1c = (T)s.v[1], b2 = (T)s.v[2], b2c = (T)s.v[3], lr = (T)s.v[4], dec = (T)s.v[5];
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
__global__ void k_lamb_mv(int64_t n, const T *__restrict__ g, T *__restrict__ m, T *__restrict__ v, Scal<10> k,
                          const double *__restrict__ dk) {
  scal_load(k, dk);
  const T b1 = (T)k.v[0], b1c = (T)k.v[1], b2 = (T)k.v[2], b2c = (T)k.v[3];
  GRID_STRIDE(i, n) lamb_mv_at(g, m, v, b1, b1c, b2, b2c, i);
}
template <typename T>
__global__ void k_lamb_apply(int64_t n, T *__restrict__ p, const T *__restrict__ m, const T *__restrict__ v,
                             const double *s, Scal<10> k, const double *__restrict__ dk) {
  scal_load(k, dk);
  const T bc1 = (T)k.v[4], bc2s = (T)k.v[5], eps = (T)k.v[6], wd = (T)k.v[7];
  const T st = lamb_scale<T>(s, k.v[8], k.v[9]);
  GRID_STRIDE(i, n) lamb_apply_at(p, m, v, bc1, bc2s, eps, wd, st, i);
}
template <typename T> struct FLambU {
  const T *p, *m, *v;
  T bc1, bc2s, eps, wd;
  const double *dk; // non-null (recording): bc1, bc2s, eps and wd are dk[4..7] (see Scal)
  __host__ __device__ double operator()(int64_t i) const {
    const double u = dk ? (double)lamb_u(p, m, v, (T)dk[4], (T)dk[5], (T)dk[6], (T)dk[7], i)
                        : (double)lamb_u(p, m, v, bc1, bc2s, eps, wd, i);
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
                             const T *__restrict__ p, Scal<2> s, const double *__restrict__ ds) {
  scal_load(s, ds);
  const T l1 = (T)s.v[0], l2 = (T)s.v[1];
  GRID_STRIDE(i, n) regularize_at(w, rows, g, p, l1, l2, i);
}


#ifndef DLG_HOST_TEST
// Into the workspace: the rows of a row-sparse step (*dev, NULL when dense)
// and, while the handle records a CUDA graph, the update's scalars (*ds, NULL
// otherwise: they go by value; see Scal). Staged, s is zeroed: the launch's
// arguments, which the recorder compares, are then the same every step.
template <int N>
inline int stage_args(dlg_handle *h, const char *op, int64_t n, int64_t width, const int64_t *rows, const int64_t **dev,
                      Scal<N> &s, const double **ds) {
  *dev = NULL;
  *ds = NULL;
  size_t rb = 0;
  if (rows && n) {
    if (width <= 0 || n % width != 0)
      return dlg_fail(h, DLG_ERR, "%s: %lld elements are not whole rows of %lld", op, (long long)n, (long long)width);
    rb = sizeof(int64_t) * (size_t)(n / width);
  }
  const bool rec = dlg_rec_h == h;
  if (!rb && !rec) return DLG_OK;
  const Carve c = carve(rb, rec ? sizeof s.v : 0);
  DLG_TRY(dlg_ws(h, c.total));
  if (rb) {
    DLG_TRY(stage(h, piece<int64_t>(h, c, 0), rows, rb, op));
    *dev = piece<int64_t>(h, c, 0);
  }
  if (rec) {
    DLG_TRY(stage(h, piece<double>(h, c, 1), s.v, sizeof s.v, op));
    *ds = piece<double>(h, c, 1);
    s = Scal<N>();
  }
  return DLG_OK;
}
template <typename T>
int lamb_run(dlg_handle *h, const char *op, int64_t n, T *p, const T *g, T *m, T *v, const double *k) {
  const unsigned nb = dlg_blocks(h, n, TPB);
  const bool rec = dlg_rec_h == h; // the ten scalars as bytes (see Scal)
  Scal<10> ks;
  for (int j = 0; j < 10; j++) ks.v[j] = k[j];
  const Carve c = carve(sizeof(double) * (size_t)psum_blocks(h, n), 2 * sizeof(double), rec ? sizeof ks.v : 0);
  DLG_TRY(dlg_ws(h, c.total));
  double *part = piece<double>(h, c, 0), *sums = piece<double>(h, c, 1), *dk = rec ? piece<double>(h, c, 2) : nullptr;
  if (dk) { // (and zeroed: the same arguments every step, see stage_args)
    DLG_TRY(stage(h, dk, ks.v, sizeof ks.v, op));
    ks = Scal<10>();
  }
  DLG_LAUNCH(nb, TPB, 0, h->stream, k_lamb_mv<T>)(n, g, m, v, ks, dk);
  DLG_TRY(dlg_launched(h, op));
  const FSq<T> fp = {p};
  DLG_TRY(psum<double>(h, op, fp, n, part, sums, 1.0));
  const FLambU<T> fu = {p, m, v, (T)ks.v[4], (T)ks.v[5], (T)ks.v[6], (T)ks.v[7], dk};
  DLG_TRY(psum<double>(h, op, fu, n, part, sums + 1, 1.0));
  DLG_LAUNCH(nb, TPB, 0, h->stream, k_lamb_apply<T>)(n, p, m, v, sums, ks, dk);
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
  Scal<5> s = {{sg, wd, momentum, damp1, lr}};
  const double *ds;
  DLG_TRY(stage_args(h, op, n, width, rows, &r, s, &ds));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_sgd<float>)(n, width, r, (float *)p, (const float *)g, (float *)buf, s, ds,
                                                    use_buf, first, nesterov);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_sgd<double>)(n, width, r, (double *)p, (const double *)g, (double *)buf, s, ds,
                                                     use_buf, first, nesterov);
  return dlg_launched(h, op);
}

int dlg_adam_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                    void *m, void *v, void *vmax, double sg, double wd, double b1, double b1c, double b2, double b2c,
                    double decay, double step_size, double bc2_sqrt, double eps) {
  static const char *op = "dlg_adam_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  Scal<10> s = {{sg, wd, b1, b1c, b2, b2c, decay, step_size, bc2_sqrt, eps}};
  const double *ds;
  DLG_TRY(stage_args(h, op, n, width, rows, &r, s, &ds));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adam<float>)(n, width, r, (float *)p, (const float *)g, (float *)m, (float *)v,
                                                     (float *)vmax, s, ds);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adam<double>)(n, width, r, (double *)p, (const double *)g, (double *)m,
                                                      (double *)v, (double *)vmax, s, ds);
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
  Scal<7> s = {{sg, wd, alpha, alpha1, eps, momentum, lr}};
  const double *ds;
  DLG_TRY(stage_args(h, op, n, width, rows, &r, s, &ds));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_rmsprop<float>)(n, width, r, (float *)p, (const float *)g, (float *)sq,
                                                        (float *)ga, (float *)mb, s, ds);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_rmsprop<double>)(n, width, r, (double *)p, (const double *)g, (double *)sq,
                                                         (double *)ga, (double *)mb, s, ds);
  return dlg_launched(h, op);
}

int dlg_adagrad_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p,
                       const void *g, void *sum, double sg, double wd, double clr, double eps) {
  static const char *op = "dlg_adagrad_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  Scal<4> s = {{sg, wd, clr, eps}};
  const double *ds;
  DLG_TRY(stage_args(h, op, n, width, rows, &r, s, &ds));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adagrad<float>)(n, width, r, (float *)p, (const float *)g, (float *)sum, s, ds);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_adagrad<double>)(n, width, r, (double *)p, (const double *)g, (double *)sum, s,
                                                         ds);
  return dlg_launched(h, op);
}

int dlg_lion_update(dlg_handle *h, int dtype, int64_t n, int64_t width, const int64_t *rows, void *p, const void *g,
                    void *m, double b1, double b1c, double b2, double b2c, double lr, double decay) {
  static const char *op = "dlg_lion_update";
  const int64_t *r;
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  Scal<6> s = {{b1, b1c, b2, b2c, lr, decay}};
  const double *ds;
  DLG_TRY(stage_args(h, op, n, width, rows, &r, s, &ds));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_lion<float>)(n, width, r, (float *)p, (const float *)g, (float *)m, s, ds);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_lion<double>)(n, width, r, (double *)p, (const double *)g, (double *)m, s, ds);
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
  Scal<2> s = {{l1, l2}};
  const double *ds;
  DLG_TRY(stage_args(h, op, n, width, rows, &r, s, &ds));
  const unsigned nb = dlg_blocks(h, n, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_regularize<float>)(n, width, r, (float *)g, (const float *)p, s, ds);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_regularize<double>)(n, width, r, (double *)g, (const double *)p, s, ds);
  return dlg_launched(h, op);
}

} // extern "C"
#endif // DLG_HOST_TEST
