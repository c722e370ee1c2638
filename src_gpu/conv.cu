// src_gpu/conv.cu - convolution through cuDNN and pooling on the device: the
// ABI of include/dl/gpu/conv.h, for ops/conv.h.
//
// Why own kernels where cuDNN has a call: pooling: the CPU's max pool keeps
// the first maximum in scan order and lets a NaN win; cuDNN documents
// neither, and its backward recomputes the argmax instead of using the
// forward's. The kernels here copy the CPU's loops, so values and indices
// agree bit for bit. Backward passes gather (one thread per element
// written, sums in the CPU's order) instead of scattering with atomics, so
// they are deterministic.
#include "dnn_common.h"

#include <new>
#include <string.h>

namespace {

// >>convolution -------------------------------------------------------------

template <class T> cudnnDataType_t dnn_type();
template <> cudnnDataType_t dnn_type<float>() { return CUDNN_DATA_FLOAT; }
template <> cudnnDataType_t dnn_type<double>() { return CUDNN_DATA_DOUBLE; }

// The descriptors of one convolution, destroyed with the struct.
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t c = nullptr;
  ConvDescs() = default;
  ConvDescs(const ConvDescs &) = delete;
  ConvDescs &operator=(const ConvDescs &) = delete;
  ~ConvDescs() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (c) cudnnDestroyConvolutionDescriptor(c);
  }
};

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

// Whether g has a depth that 4-d descriptors cannot express (dlg_conv2d's
// kd == 0 is 2-d; a depth of 1 with kernel, stride, dilation 1 and no
// padding is the 2-d convolution too), and its output depth (1 in 2-d).
bool conv_3d(const dlg_conv2d *g) {
  return g->kd != 0 && !(g->D == 1 && g->kd == 1 && g->Do == 1 && g->sd == 1 && g->pd == 0 && g->dd == 1);
}
int64_t conv_do(const dlg_conv2d *g) { return g->kd != 0 ? g->Do : 1; }

// The rest of conv_descs for a 3-d g: cuDNN's Nd (5-d) descriptors, the
// same math and group count as 2-d, cuDNN's output size checked.
template <class T> int conv_descs_3d(dlg_handle *h, const char *op, const dlg_conv2d *g, ConvDescs *d) {
  const cudnnDataType_t dt = dnn_type<T>();
  const int xd[5] = {(int)g->N, (int)g->C, (int)g->D, (int)g->H, (int)g->W};
  const int yd[5] = {(int)g->N, (int)g->O, (int)g->Do, (int)g->Ho, (int)g->Wo};
  const int wd[5] = {(int)g->O, (int)(g->C / g->G), (int)g->kd, (int)g->kh, (int)g->kw};
  const int pad[3] = {(int)g->pd, (int)g->ph, (int)g->pw}, str[3] = {(int)g->sd, (int)g->sh, (int)g->sw};
  const int dil[3] = {(int)g->dd, (int)g->dh, (int)g->dw};
  int rc, out[5];
  if ((rc = dlg_dnn(h, cudnnSetTensorNdDescriptorEx(d->x, CUDNN_TENSOR_NCHW, dt, 5, xd), op)) != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnSetTensorNdDescriptorEx(d->y, CUDNN_TENSOR_NCHW, dt, 5, yd), op)) != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnSetFilterNdDescriptor(d->w, dt, CUDNN_TENSOR_NCHW, 5, wd), op)) != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetConvolutionNdDescriptor(d->c, 3, pad, str, dil, CUDNN_CROSS_CORRELATION, dt), op);
  if (rc != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnSetConvolutionGroupCount(d->c, (int)g->G), op)) != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetConvolutionMathType(d->c, dt == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH),
               op);
  if (rc != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnGetConvolutionNdForwardOutputDim(d->c, d->x, d->w, 5, out), op)) != DLG_OK) return rc;
  for (int k = 0; k < 5; k++)
    if (out[k] != yd[k])
      return dlg_fail(h, DLG_ERR, "%s: cuDNN's output [%d, %d, %d, %d, %d] is not y [%d, %d, %d, %d, %d]", op, out[0],
                      out[1], out[2], out[3], out[4], yd[0], yd[1], yd[2], yd[3], yd[4]);
  return DLG_OK;
}

// Checks g (sizes cuDNN can take, consistent groups) and makes the
// descriptors. Math: f32 FMA only (CUDNN_FMA_MATH: no TF32 tensor cores,
// whose 10-bit mantissa products would leave the CPU's 1e-4 tolerance);
// f64 cuDNN's default (double tensor cores, where used, are exact IEEE FMA).
template <class T> int conv_descs(dlg_handle *h, const char *op, const dlg_conv2d *g, ConvDescs *d) {
  const cudnnDataType_t dt = dnn_type<T>();
  const bool d3 = conv_3d(g);
  int rc, n, c, hh, ww;
  if (!(g->sh >= 1 && g->sw >= 1 && g->dh >= 1 && g->dw >= 1 && g->G >= 1 && g->ph >= 0 && g->pw >= 0 &&
        g->kh >= 1 && g->kw >= 1 && g->C % g->G == 0 && g->O % g->G == 0) ||
      (d3 && !(g->sd >= 1 && g->dd >= 1 && g->pd >= 0 && g->kd >= 1 && g->D >= 0 && g->Do >= 0)))
    return dlg_fail(h, DLG_ERR, "%s: bad geometry (kernel %lldx%lld, stride %lldx%lld, dilation %lldx%lld, "
                    "padding %lldx%lld, C %lld, O %lld, groups %lld)", op, (long long)g->kh, (long long)g->kw,
                    (long long)g->sh, (long long)g->sw, (long long)g->dh, (long long)g->dw, (long long)g->ph,
                    (long long)g->pw, (long long)g->C, (long long)g->O, (long long)g->G);
  {
    const int64_t v[] = {g->N, g->C, g->H, g->W, g->O, g->kh, g->kw, g->Ho, g->Wo, g->sh, g->sw, g->ph, g->pw,
                         g->dh, g->dw, g->G};
    bool ok = true;
    const int64_t vd[] = {g->D, g->kd, g->Do, g->sd, g->pd, g->dd};
    const double D = d3 ? (double)g->D : 1, kd = d3 ? (double)g->kd : 1, Do = d3 ? (double)g->Do : 1;
    for (int64_t e : v) ok = ok && fits_int(e);
    for (int64_t e : vd) ok = ok && (!d3 || fits_int(e));
    // every tensor below 2^31 elements (cuDNN's strides are int)
    ok = ok && (double)g->N * g->C * D * g->H * g->W <= INT_MAX && (double)g->N * g->O * Do * g->Ho * g->Wo <= INT_MAX &&
         (double)g->O * (g->C / g->G) * kd * g->kh * g->kw <= INT_MAX;
    if (!ok)
      return dlg_fail(h, DLG_ERR, "%s: x [%lld, %lld, %lld, %lld] or y [%lld, %lld, %lld, %lld] too large for "
                      "cuDNN (2^31 elements per tensor)", op, (long long)g->N, (long long)g->C, (long long)g->H,
                      (long long)g->W, (long long)g->N, (long long)g->O, (long long)g->Ho, (long long)g->Wo);
  }
  if ((rc = dlg_dnn(h, cudnnSetStream(h->dnn, h->stream), op)) != DLG_OK) return rc;
  h->n.dnn_descriptors += 4;
  if ((rc = dlg_dnn(h, cudnnCreateTensorDescriptor(&d->x), op)) != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnCreateTensorDescriptor(&d->y), op)) != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnCreateFilterDescriptor(&d->w), op)) != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnCreateConvolutionDescriptor(&d->c), op)) != DLG_OK) return rc;
  if (d3) return conv_descs_3d<T>(h, op, g, d);
  rc = dlg_dnn(h, cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, dt, (int)g->N, (int)g->C, (int)g->H,
                                             (int)g->W), op);
  if (rc != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, dt, (int)g->N, (int)g->O, (int)g->Ho,
                                             (int)g->Wo), op);
  if (rc != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetFilter4dDescriptor(d->w, dt, CUDNN_TENSOR_NCHW, (int)g->O, (int)(g->C / g->G),
                                             (int)g->kh, (int)g->kw), op);
  if (rc != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetConvolution2dDescriptor(d->c, (int)g->ph, (int)g->pw, (int)g->sh, (int)g->sw,
                                                  (int)g->dh, (int)g->dw, CUDNN_CROSS_CORRELATION, dt), op);
  if (rc != DLG_OK) return rc;
  if ((rc = dlg_dnn(h, cudnnSetConvolutionGroupCount(d->c, (int)g->G), op)) != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnSetConvolutionMathType(d->c, dt == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH),
               op);
  if (rc != DLG_OK) return rc;
  rc = dlg_dnn(h, cudnnGetConvolution2dForwardOutputDim(d->c, d->x, d->w, &n, &c, &hh, &ww), op);
  if (rc != DLG_OK) return rc;
  if (n != g->N || c != g->O || hh != g->Ho || ww != g->Wo)
    return dlg_fail(h, DLG_ERR, "%s: cuDNN's output [%d, %d, %d, %d] is not y [%lld, %lld, %lld, %lld]", op, n, c,
                    hh, ww, (long long)g->N, (long long)g->O, (long long)g->Ho, (long long)g->Wo);
  return DLG_OK;
}

// Whether an algorithm computes the plain sum of products (GEMM-like or
// direct): FFT and Winograd transforms round differently and are tried
// only when nothing else runs.
bool exact_algo(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}
bool exact_algo(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool exact_algo(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// The workspace an algorithm may ask for when a cheaper one would do.
constexpr size_t kWsBudget = DLG_CONV_WS_BUDGET;

// What was chosen for one pass of one convolution shape.
struct PassPlan {
  bool chosen = false, deterministic = false; // the policy it was chosen under
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t ws = 0;
};
// One convolution shape (dtype and geometry): its descriptors, made once,
// and the algorithm of each pass (0 forward, 1 data gradient, 2 filter).
struct ConvPlan {
  int dtype = 0;
  dlg_conv2d g{};
  ConvDescs d;
  PassPlan pass[3];
  uint64_t used = 0;
};

} // namespace

// The handle's plans (dlg_handle.conv): at most kPlans shapes, the least
// recently used replaced (a model has a few; eval batches and a last short
// batch add some).
struct dlg_conv_cache {
  static constexpr int kPlans = 64;
  ConvPlan *p[kPlans] = {};
  int n = 0;
  uint64_t tick = 0;
  ~dlg_conv_cache() {
    for (int i = 0; i < n; i++) delete p[i];
  }
};
void dlg_conv_cache_free(dlg_handle *h) {
  delete h->conv;
  h->conv = nullptr;
}

namespace {

// The plan of g (descriptors made the first time the shape is seen).
template <class T> int conv_plan(dlg_handle *h, const char *op, const dlg_conv2d *g, ConvPlan **out) {
  const int dtype = sizeof(T) == 4 ? DLG_F32 : DLG_F64;
  dlg_conv_cache *c = h->conv;
  int rc, slot;
  *out = nullptr;
  if (!c) {
    c = new (std::nothrow) dlg_conv_cache;
    if (!c) return dlg_fail(h, DLG_OOM, "%s: out of host memory for the convolution plans", op);
    h->conv = c;
  }
  c->tick++;
  for (int i = 0; i < c->n; i++) {
    ConvPlan *p = c->p[i];
    if (p->dtype == dtype && !memcmp(&p->g, g, sizeof *g)) {
      p->used = c->tick;
      *out = p;
      return DLG_OK;
    }
  }
  ConvPlan *p = new (std::nothrow) ConvPlan;
  if (!p) return dlg_fail(h, DLG_OOM, "%s: out of host memory for a convolution plan", op);
  if ((rc = conv_descs<T>(h, op, g, &p->d)) != DLG_OK) {
    delete p;
    return rc;
  }
  p->dtype = dtype;
  p->g = *g;
  p->used = c->tick;
  if (c->n < dlg_conv_cache::kPlans) slot = c->n++;
  else { // replace the least recently used
    slot = 0;
    for (int i = 1; i < c->n; i++)
      if (c->p[i]->used < c->p[slot]->used) slot = i;
    const int frc = dlg_graph_flush(h); // recorded passes may use its descriptors
    if (frc != DLG_OK) h->gr_rc = frc;  // reported by the next status (dlg_graph_end at the latest)
    delete c->p[slot];
  }
  c->p[slot] = p;
  *out = p;
  return DLG_OK;
}

// Chooses and runs one convolution pass from candidates perf[0..n) (in
// cuDNN's order: best first by its heuristics, or fastest first when timed),
// ranked: deterministic policy: exact and deterministic, exact, the rest;
// fastest: exact, the rest. Never with down-conversion, f32 never on
// tensor-op math (TF32). Workspace from dlg_ws: first among the candidates
// needing at most max(current workspace, kWsBudget), then any.
// size(algo, &bytes) and run(algo, ws, bytes) return cuDNN statuses; a
// candidate that cuDNN refuses (NOT_SUPPORTED, BAD_PARAM) or whose
// workspace does not fit is skipped. The one that ran is kept in *pp.
template <class Perf, class SizeFn, class RunFn>
int conv_choose(dlg_handle *h, const char *op, bool f32, bool det, cudnnConvolutionDescriptor_t cd, const Perf *perf,
                int n, PassPlan *pp, SizeFn size, RunFn run) {
  const size_t cap = h->ws_bytes > kWsBudget ? h->ws_bytes : kWsBudget;
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  int rc;
  for (int sweep = 0; sweep < 2; sweep++)
    for (int rank = 0; rank < 3; rank++)
      for (int i = 0; i < n; i++) {
        const Perf &p = perf[i];
        const bool exact = exact_algo(p.algo), pdet = p.determinism == CUDNN_DETERMINISTIC;
        const int r = !exact ? 2 : (pdet || !det) ? 0 : 1;
        size_t need = 0;
        cudnnStatus_t st;
        if (r != rank || p.status != CUDNN_STATUS_SUCCESS) continue;
        if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || (f32 && p.mathType == CUDNN_TENSOR_OP_MATH))
          continue; // no down-conversion; no TF32 for f32
        if (!f32 && (rc = dlg_dnn(h, cudnnSetConvolutionMathType(cd, p.mathType), op)) != DLG_OK) return rc;
        st = size(p.algo, &need);
        if (st != CUDNN_STATUS_SUCCESS) {
          last = st;
          continue;
        }
        if ((sweep == 0) != (need <= cap)) continue;
        if (need > 0 && dlg_ws(h, need) != DLG_OK) continue; // out of memory: one needing less may run
        st = run(p.algo, need > 0 ? h->ws : nullptr, need);
        if (st == CUDNN_STATUS_SUCCESS) {
          pp->chosen = true;
          pp->deterministic = det;
          pp->algo = (int)p.algo;
          pp->math = p.mathType;
          pp->ws = need;
          return DLG_OK;
        }
        if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED ||
            CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_BAD_PARAM) {
          last = st;
          continue;
        }
        return dlg_dnn(h, st, op);
      }
  return dlg_fail(h, DLG_ERR, "%s: no cuDNN algorithm ran (last: cuDNN error %d, %s)", op, (int)last,
                  cudnnGetErrorString(last));
}

// One pass of plan p: with the algorithm chosen before when there is one
// (under the handle's current policy), else chosen now: candidates from
// heuristics (deterministic policy) or from timing them (cudnnFind; its
// failure, e.g. no memory for its trial buffers, falls back to heuristics).
// query(find, perf, &n) fills the candidates.
// While the handle records (graph.cu), a pass with its algorithm chosen is
// recorded (run copies its operands: it holds no reference), keyed by the
// plan's geometry, the pass, its algorithm, workspace and math, and rk (the
// operands' pointers and beta); the search for an algorithm runs at once.
// The search for pass k's algorithm (conv_pass's second half), which runs
// the chosen one.
template <class Perf, int N, class QueryFn, class SizeFn, class RunFn>
int conv_search(dlg_handle *h, const char *op, bool f32, ConvPlan *p, int k, QueryFn query, SizeFn size, RunFn run) {
  const bool det = h->deterministic != 0;
  Perf perf[N];
  int n = 0, rc;
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  h->n.dnn_queries++;
  if (!det) {
    st = query(true, perf, &n);
    if (st != CUDNN_STATUS_SUCCESS) h->n.dnn_queries++;
  }
  if (det || st != CUDNN_STATUS_SUCCESS) {
    if ((rc = dlg_dnn(h, query(false, perf, &n), op)) != DLG_OK) return rc;
  }
  return conv_choose(h, op, f32, det, p->d.c, perf, n, &p->pass[k], size, run);
}

template <class Algo, class Perf, int N, class QueryFn, class SizeFn, class RunFn>
int conv_pass(dlg_handle *h, const char *op, bool f32, ConvPlan *p, int k, QueryFn query, SizeFn size, RunFn run,
              const std::string &rk) {
  PassPlan *pp = &p->pass[k];
  const bool det = h->deterministic != 0;
  int rc;
  if (pp->chosen && pp->deterministic == det) {
    cudnnStatus_t st;
    if (pp->ws > 0 && (rc = dlg_ws(h, pp->ws)) != DLG_OK) return rc;
    if (dlg_rec_h == h) {
      std::string key("D", 1);
      const Algo a = (Algo)pp->algo;
      void *const ws = pp->ws > 0 ? h->ws : nullptr;
      const size_t bytes = pp->ws;
      const cudnnMathType_t math = pp->math;
      const cudnnConvolutionDescriptor_t cd = p->d.c;
      dlg_key_val(key, p->g);
      dlg_key_val(key, k);
      dlg_key_val(key, a);
      dlg_key_val(key, ws);
      dlg_key_val(key, bytes);
      dlg_key_val(key, math);
      key += rk;
      // (run, query and size hold copies; the plan outlives the recording: its eviction flushes first)
      h->gr_add(h, std::move(key), [run, query, size, a, ws, bytes, math, cd, f32, p, k](dlg_handle *hh, const char *o) -> int {
        int r;
        if (!f32 && (r = dlg_dnn(hh, cudnnSetConvolutionMathType(cd, math), o)) != DLG_OK) return r;
        const cudnnStatus_t s2 = run(a, ws, bytes);
        if (s2 == CUDNN_STATUS_SUCCESS) return DLG_OK;
        if (CUDNN_STATUS_CATEGORY(s2) != CUDNN_STATUS_NOT_SUPPORTED && CUDNN_STATUS_CATEGORY(s2) != CUDNN_STATUS_BAD_PARAM)
          return dlg_dnn(hh, s2, o);
        p->pass[k].chosen = false; // refused now: choose again (under capture the search fails it: issued instead)
        return conv_search<Perf, N>(hh, o, f32, p, k, query, size, run);
      });
      h->gr_name(h, op);
      return DLG_OK;
    }
    if (!f32 && (rc = dlg_dnn(h, cudnnSetConvolutionMathType(p->d.c, pp->math), op)) != DLG_OK) return rc;
    st = run((Algo)pp->algo, pp->ws > 0 ? h->ws : nullptr, pp->ws);
    if (st == CUDNN_STATUS_SUCCESS) return DLG_OK;
    if (CUDNN_STATUS_CATEGORY(st) != CUDNN_STATUS_NOT_SUPPORTED &&
        CUDNN_STATUS_CATEGORY(st) != CUDNN_STATUS_BAD_PARAM)
      return dlg_dnn(h, st, op);
    pp->chosen = false; // refused now: choose again
  }
  dlg_rec_pause pause(h); // the search times its candidates now
  if (pause.rc != DLG_OK) return pause.rc;
  return conv_search<Perf, N>(h, op, f32, p, k, query, size, run);
}

// conv_pass's rk: a pass's three operands and its beta.
template <class T> std::string conv_rkey(const void *a, const void *b, const void *c, T beta) {
  std::string k;
  const void *p[3] = {a, b, c};
  dlg_key_val(k, p);
  dlg_key_val(k, beta);
  return k;
}

// y[n, o, p] = (acc ? y : 0) + b[o] over y [N, O, P] (C == 0) or y += b[o].
template <class T> __global__ void conv_bias_k(int64_t total, int64_t O, int64_t P, const T *b, T *y, int keep) {
  for (int64_t e = gtid(); e < total; e += gstride()) {
    const int64_t o = (e / P) % O;
    y[e] = keep ? y[e] + b[o] : b[o];
  }
}
// gb[o] += sum over n, p of gy[n, o, p], in double: the sums split over
// blocks (dnn_common.h's chan_part_k), then one thread per channel adds its
// chunk sums in order and rounds once.
template <class T> struct SumGy {
  const T *gy;
  __host__ __device__ void operator()(int64_t i, int64_t, double &a, double &) const { a += (double)gy[i]; }
};
template <class T> __host__ __device__ void conv_bias_final_at(const double *part, int64_t split, T *gb, int64_t o) {
  double s, z;
  chan_total(part, split, o, &s, &z);
  gb[o] += (T)s;
}
template <class T> __global__ void conv_bias_final_k(int64_t O, const double *part, int64_t split, T *gb) {
  for (int64_t o = gtid(); o < O; o += gstride()) conv_bias_final_at<T>(part, split, gb, o);
}

template <class T>
int conv_fwd(dlg_handle *h, const dlg_conv2d *g, const void *xv, const void *wv, const void *bv, void *yv, int acc) {
  const char *op = "dlg_conv2d_fwd";
  const int64_t ny = g->N * g->O * conv_do(g) * g->Ho * g->Wo;
  T *y = (T *)yv;
  const T *b = (const T *)bv;
  int rc;
  if (ny <= 0) return DLG_OK;
  if (g->C == 0) { // no input channels: y is the bias (or zero)
    if (b) {
      DLG_LAUNCH(dlg_blocks(h, ny, kThreads), kThreads, 0, h->stream, conv_bias_k<T>)(ny, g->O, conv_do(g) * g->Ho * g->Wo,
                                                                                      b, y, acc);
      return dlg_launched(h, op);
    }
    return acc ? DLG_OK : dlg_cuda(h, dlg_memset_async(h, y, 0, (size_t)ny * sizeof(T)), op);
  }
  {
    ConvPlan *p;
    const T one = 1, beta = acc ? 1 : 0;
    if ((rc = conv_plan<T>(h, op, g, &p)) != DLG_OK) return rc;
    const ConvDescs &d = p->d;
    rc = conv_pass<cudnnConvolutionFwdAlgo_t, cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        h, op, sizeof(T) == 4, p, 0,
        [h, xd = d.x, wd = d.w, cd = d.c, yd = d.y](bool find, cudnnConvolutionFwdAlgoPerf_t *perf, int *n) {
          return find ? cudnnFindConvolutionForwardAlgorithm(h->dnn, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                             n, perf)
                      : cudnnGetConvolutionForwardAlgorithm_v7(h->dnn, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                               n, perf);
        },
        [h, xd = d.x, wd = d.w, cd = d.c, yd = d.y](cudnnConvolutionFwdAlgo_t a, size_t *bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(h->dnn, xd, wd, cd, yd, a, bytes);
        },
        [h, xd = d.x, wd = d.w, cd = d.c, yd = d.y, xv, wv, yv, one, beta](cudnnConvolutionFwdAlgo_t a, void *ws,
                                                                            size_t bytes) {
          return cudnnConvolutionForward(h->dnn, &one, xd, xv, wd, wv, cd, a, ws, bytes, &beta, yd, yv);
        },
        conv_rkey(xv, wv, yv, beta));
    if (rc != DLG_OK) return rc;
  }
  if (b) {
    DLG_LAUNCH(dlg_blocks(h, ny, kThreads), kThreads, 0, h->stream, conv_bias_k<T>)(ny, g->O, conv_do(g) * g->Ho * g->Wo,
                                                                                    b, y, 1);
    return dlg_launched(h, op);
  }
  return DLG_OK;
}

template <class T>
int conv_bwd(dlg_handle *h, const dlg_conv2d *g, const void *xv, const void *wv, const void *gyv, void *gxv,
             void *gwv, void *gbv) {
  const char *op = "dlg_conv2d_bwd";
  const int64_t P = conv_do(g) * g->Ho * g->Wo;
  int rc;
  if (gbv && g->O > 0) { // before cuDNN's passes: the same order as the CPU
    const ChanGeo cg = {g->N, g->O, P};
    const int64_t split = chan_split(cg, h->sm_count);
    double *part;
    if ((rc = dlg_ws(h, sizeof(double) * 2 * (size_t)split * (size_t)g->O)) != DLG_OK) return rc;
    part = (double *)h->ws;
    DLG_LAUNCH(dlg_blocks(h, g->O * split, 1), kThreads, 0, h->stream, chan_part_k<SumGy<T>>)(
        cg, split, SumGy<T>{(const T *)gyv}, part);
    if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
    DLG_LAUNCH(dlg_blocks(h, g->O, kThreads), kThreads, 0, h->stream, conv_bias_final_k<T>)(g->O, part, split,
                                                                                          (T *)gbv);
    if ((rc = dlg_launched(h, op)) != DLG_OK) return rc;
  }
  // nothing flows when x, w or gy is empty
  if ((!gxv && !gwv) || g->N == 0 || g->C == 0 || g->O == 0 || P == 0 || g->H == 0 || g->W == 0 ||
      (g->kd != 0 && g->D == 0))
    return DLG_OK;
  {
    ConvPlan *p;
    const T one = 1;
    if ((rc = conv_plan<T>(h, op, g, &p)) != DLG_OK) return rc;
    const ConvDescs &d = p->d;
    if (gxv) {
      rc = conv_pass<cudnnConvolutionBwdDataAlgo_t, cudnnConvolutionBwdDataAlgoPerf_t,
                     CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
          h, op, sizeof(T) == 4, p, 1,
          [h, xd = d.x, wd = d.w, cd = d.c, yd = d.y](bool find, cudnnConvolutionBwdDataAlgoPerf_t *perf, int *n) {
            return find ? cudnnFindConvolutionBackwardDataAlgorithm(h->dnn, wd, yd, cd, xd,
                                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, n, perf)
                        : cudnnGetConvolutionBackwardDataAlgorithm_v7(h->dnn, wd, yd, cd, xd,
                                                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, n, perf);
          },
          [h, xd = d.x, wd = d.w, cd = d.c, yd = d.y](cudnnConvolutionBwdDataAlgo_t a, size_t *bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(h->dnn, wd, yd, cd, xd, a, bytes);
          },
          [h, xd = d.x, wd = d.w, cd = d.c, yd = d.y, wv, gyv, gxv, one](cudnnConvolutionBwdDataAlgo_t a, void *ws,
                                                                        size_t bytes) { // beta = 1: gx += ...
            return cudnnConvolutionBackwardData(h->dnn, &one, wd, wv, yd, gyv, cd, a, ws, bytes, &one, xd, gxv);
          },
          conv_rkey(wv, gyv, gxv, one));
      if (rc != DLG_OK) return rc;
    }
    if (gwv) {
      rc = conv_pass<cudnnConvolutionBwdFilterAlgo_t, cudnnConvolutionBwdFilterAlgoPerf_t,
                     CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
          h, op, sizeof(T) == 4, p, 2,
          [h, xd = d.x, wd = d.w, cd = d.c, yd = d.y](bool find, cudnnConvolutionBwdFilterAlgoPerf_t *perf, int *n) {
            return find ? cudnnFindConvolutionBackwardFilterAlgorithm(h->dnn, xd, yd, cd, wd,
                                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, n, perf)
                        : cudnnGetConvolutionBackwardFilterAlgorithm_v7(h->dnn, xd, yd, cd, wd,
                                                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, n,
                                                                        perf);
          },
          [h, xd = d.x, wd = d.w, cd = d.c, yd = d.y](cudnnConvolutionBwdFilterAlgo_t a, size_t *bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(h->dnn, xd, yd, cd, wd, a, bytes);
          },
          [h, xd = d.x, wd = d.w, cd = d.c, yd = d.y, xv, gyv, gwv, one](cudnnConvolutionBwdFilterAlgo_t a, void *ws,
                                                                        size_t bytes) { // beta = 1: gw += ...
            return cudnnConvolutionBackwardFilter(h->dnn, &one, xd, xv, yd, gyv, cd, a, ws, bytes, &one, wd, gwv);
          },
          conv_rkey(xv, gyv, gwv, one));
      if (rc != DLG_OK) return rc;
    }
  }
  return DLG_OK;
}

// >>pooling -------------------------------------------------------------------
// Copies of ops/conv.h's DL__POOL_KERNELS (2-d and 3-d: 2-d is the depth-1
// case), one thread per element written.

// Each body below is the work of one element e (host and device, so that
// it can be checked against the CPU's loops without a GPU).
// The taps j in [*lo, *hi) of a window starting at s (k taps d apart) inside [0, n), as dl__conv_range.
__host__ __device__ inline void pool_taps(int64_t s, int64_t d, int64_t n, int64_t k, int64_t *lo, int64_t *hi) {
  int64_t a = s >= 0 ? 0 : (-s + d - 1) / d;
  int64_t b = n - 1 - s >= 0 ? (n - 1 - s) / d + 1 : 0;
  if (a > k) a = k;
  if (b > k) b = k;
  if (b < a) b = a;
  *lo = a;
  *hi = b;
}

// g with its depth filled in: a 2-d window (kd == 0) as the depth-1 case.
__host__ __device__ inline dlg_pool2d pool_norm(dlg_pool2d g) {
  if (g.kd == 0) {
    g.D = g.kd = g.sd = g.dd = g.Do = 1;
    g.pd = g.pde = 0;
  }
  return g;
}

// The bodies below take a normalised g (pool_norm): e indexes the volumes
// [N*C, Do, Ho, Wo] (outputs) or [N*C, D, H, W] (inputs), the depth 1 in 2-d.
template <class T>
__host__ __device__ inline void maxpool_fwd_at(const dlg_pool2d &g, const T *x, T *y, int32_t *idx, int64_t e) {
  const int64_t ow = e % g.Wo, t = e / g.Wo, oh = t % g.Ho, t2 = t / g.Ho, od = t2 % g.Do, pl = t2 / g.Do;
  const int64_t HW = g.H * g.W;
  const T *xp = x + pl * g.D * HW;
  const int64_t ds = od * g.sd - g.pd, hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  int64_t d0, d1, h0, h1, w0, w1, at = -1;
  T m = -(T)INFINITY;
  pool_taps(ds, g.dd, g.D, g.kd, &d0, &d1);
  pool_taps(hs, g.dh, g.H, g.kh, &h0, &h1);
  pool_taps(ws, g.dw, g.W, g.kw, &w0, &w1);
  if (d0 < d1 && h0 < h1 && w0 < w1) { // the first tap starts the scan (it may be NaN or -inf)
    at = (ds + d0 * g.dd) * HW + (hs + h0 * g.dh) * g.W + ws + w0 * g.dw;
    m = xp[at];
  }
  for (int64_t jd = d0; jd < d1; jd++)
    for (int64_t jh = h0; jh < h1; jh++) {
      const int64_t r = (ds + jd * g.dd) * HW + (hs + jh * g.dh) * g.W + ws;
      for (int64_t jw = w0; jw < w1; jw++) {
        const int64_t p = r + jw * g.dw;
        const T v = xp[p];
        if (v > m || v != v) {
          m = v;
          at = p;
        }
      }
    }
  y[e] = m;
  if (idx) idx[e] = (int32_t)at;
}

// The outputs [*lo, *hi] (inclusive; empty when lo > hi) along one axis whose
// window [o s - p, o s - p + k) holds input position i; n outputs.
__host__ __device__ inline void pool_range(int64_t i, int64_t k, int64_t s, int64_t p, int64_t n, int64_t *lo,
                                           int64_t *hi) {
  const int64_t a = i + p - k + 1; // o s >= a
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  *hi = (i + p) / s;               // o s <= i + p (i + p >= 0)
  if (*hi > n - 1) *hi = n - 1;
}

// gx[pl, id, ih, iw] += gy[pl, od, oh, ow] for every output whose idx is
// (id, ih, iw), in (od, oh, ow) order, as the CPU's loop over k adds them (e
// indexes gx). The windows that span (id, ih, iw) (dilated: (k - 1) d + 1
// wide) are searched.
template <class T>
__host__ __device__ inline void maxpool_bwd_at(const dlg_pool2d &g, const T *gy, const int32_t *idx, T *gx,
                                               int64_t e) {
  const int64_t iw = e % g.W, t = e / g.W, ih = t % g.H, t2 = t / g.H, id = t2 % g.D, pl = t2 / g.D;
  const int64_t pos = (id * g.H + ih) * g.W + iw;
  int64_t dlo, dhi, hlo, hhi, wlo, whi;
  T v = gx[e];
  bool hit = false;
  pool_range(id, (g.kd - 1) * g.dd + 1, g.sd, g.pd, g.Do, &dlo, &dhi);
  pool_range(ih, (g.kh - 1) * g.dh + 1, g.sh, g.ph, g.Ho, &hlo, &hhi);
  pool_range(iw, (g.kw - 1) * g.dw + 1, g.sw, g.pw, g.Wo, &wlo, &whi);
  for (int64_t od = dlo; od <= dhi; od++)
    for (int64_t oh = hlo; oh <= hhi; oh++)
      for (int64_t ow = wlo; ow <= whi; ow++) {
        const int64_t k = ((pl * g.Do + od) * g.Ho + oh) * g.Wo + ow;
        if (idx[k] == pos) {
          v += gy[k];
          hit = true;
        }
      }
  if (hit) gx[e] = v;
}

template <class T>
__host__ __device__ inline void maxpool_tan_at(const dlg_pool2d &g, const T *tx, const int32_t *idx, T *ty,
                                               int64_t e) {
  const int64_t pl = e / (g.Do * g.Ho * g.Wo);
  ty[e] = idx[e] >= 0 ? tx[pl * g.D * g.H * g.W + idx[e]] : (T)0;
}

// One axis of the average's window of output o: [*s, *e) inside the input,
// and the length inside the padded input [-p, n + pe).
__host__ __device__ inline void avgpool_axis(int64_t o, int64_t k, int64_t st, int64_t p, int64_t pe, int64_t n,
                                             int64_t *s, int64_t *e, int64_t *padded) {
  int64_t a = o * st - p, b = a + k < n + pe ? a + k : n + pe;
  *padded = b - a;
  if (a < 0) a = 0;
  if (b > n) b = n;
  if (b < a) b = a;
  *s = a;
  *e = b;
}
// The average's window of (od, oh, ow) inside the input, [ds, de) x [hs, he)
// x [ws, we) in w[0..6), and its divisor, as ops/conv.h's DL__AVGPOOL_COUNT.
__host__ __device__ inline void avgpool_window(const dlg_pool2d &g, int64_t od, int64_t oh, int64_t ow, int64_t *w,
                                               int64_t *cnt) {
  int64_t pd, ph, pw;
  avgpool_axis(od, g.kd, g.sd, g.pd, g.pde, g.D, &w[0], &w[1], &pd);
  avgpool_axis(oh, g.kh, g.sh, g.ph, g.phe, g.H, &w[2], &w[3], &ph);
  avgpool_axis(ow, g.kw, g.sw, g.pw, g.pwe, g.W, &w[4], &w[5], &pw);
  *cnt = g.excl ? (w[1] - w[0]) * (w[3] - w[2]) * (w[5] - w[4]) : pd * ph * pw;
}

template <class T> __host__ __device__ inline void avgpool_fwd_at(const dlg_pool2d &g, const T *x, T *y, int64_t e) {
  const int64_t ow = e % g.Wo, t = e / g.Wo, oh = t % g.Ho, t2 = t / g.Ho, od = t2 % g.Do, pl = t2 / g.Do;
  const T *xp = x + pl * g.D * g.H * g.W;
  int64_t w[6], cnt;
  T s = 0;
  avgpool_window(g, od, oh, ow, w, &cnt);
  for (int64_t id = w[0]; id < w[1]; id++)
    for (int64_t ih = w[2]; ih < w[3]; ih++)
      for (int64_t iw = w[4]; iw < w[5]; iw++) s += xp[(id * g.H + ih) * g.W + iw];
  y[e] = cnt > 0 ? s / (T)cnt : (T)0;
}

// gx[pl, id, ih, iw] += gy[pl, od, oh, ow] / count for every window holding
// (id, ih, iw), in (od, oh, ow) order, as the CPU adds them (e indexes gx).
template <class T> __host__ __device__ inline void avgpool_bwd_at(const dlg_pool2d &g, const T *gy, T *gx, int64_t e) {
  const int64_t iw = e % g.W, t = e / g.W, ih = t % g.H, t2 = t / g.H, id = t2 % g.D, pl = t2 / g.D;
  int64_t dlo, dhi, hlo, hhi, wlo, whi;
  T v = gx[e];
  bool hit = false;
  pool_range(id, g.kd, g.sd, g.pd, g.Do, &dlo, &dhi);
  pool_range(ih, g.kh, g.sh, g.ph, g.Ho, &hlo, &hhi);
  pool_range(iw, g.kw, g.sw, g.pw, g.Wo, &wlo, &whi);
  for (int64_t od = dlo; od <= dhi; od++)
    for (int64_t oh = hlo; oh <= hhi; oh++)
      for (int64_t ow = wlo; ow <= whi; ow++) {
        int64_t w[6], cnt;
        avgpool_window(g, od, oh, ow, w, &cnt);
        if (cnt <= 0) continue;
        v += gy[((pl * g.Do + od) * g.Ho + oh) * g.Wo + ow] / (T)cnt;
        hit = true;
      }
  if (hit) gx[e] = v;
}

enum { kMaxFwd, kMaxBwd, kMaxTan, kAvgFwd, kAvgBwd };

// One thread per element written: y (forward kinds) or gx (backward kinds).
template <class T>
__global__ void pool_k(int kind, dlg_pool2d g, const T *in, T *out, const int32_t *cidx, int32_t *idx, int64_t total) {
  for (int64_t e = gtid(); e < total; e += gstride()) {
    switch (kind) {
      case kMaxFwd: maxpool_fwd_at(g, in, out, idx, e); break;
      case kMaxBwd: maxpool_bwd_at(g, in, cidx, out, e); break;
      case kMaxTan: maxpool_tan_at(g, in, cidx, out, e); break;
      case kAvgFwd: avgpool_fwd_at(g, in, out, e); break;
      default: avgpool_bwd_at(g, in, out, e); break;
    }
  }
}

int pool_check(dlg_handle *h, const char *op, const dlg_pool2d *g) {
  if (g->N < 0 || g->C < 0 || g->H < 0 || g->W < 0 || g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 ||
      g->ph < 0 || g->pw < 0 || g->Ho < 0 || g->Wo < 0 || g->D * g->H * g->W > INT32_MAX || g->dh < 1 || g->dw < 1 ||
      g->phe < 0 || g->pwe < 0 || g->D < 0 || g->kd < 1 || g->sd < 1 || g->dd < 1 || g->pd < 0 || g->pde < 0 ||
      g->Do < 0)
    return dlg_fail(h, DLG_ERR, "%s: bad window (kernel %lldx%lld, stride %lldx%lld, padding %lldx%lld, end "
                    "%lldx%lld, dilation %lldx%lld) or input [%lld, %lld, %lld, %lld]", op, (long long)g->kh,
                    (long long)g->kw, (long long)g->sh, (long long)g->sw, (long long)g->ph, (long long)g->pw,
                    (long long)g->phe, (long long)g->pwe, (long long)g->dh, (long long)g->dw, (long long)g->N,
                    (long long)g->C, (long long)g->H, (long long)g->W);
  return DLG_OK;
}

template <class T> int pool_run(dlg_handle *h, const char *op, int kind, const dlg_pool2d *g2, const void *in,
                                void *out, const int32_t *cidx, int32_t *idx) {
  const dlg_pool2d gn = pool_norm(*g2), *g = &gn;
  const int bwd = kind == kMaxBwd || kind == kAvgBwd;
  const int64_t total = g->N * g->C * (bwd ? g->D * g->H * g->W : g->Do * g->Ho * g->Wo);
  const unsigned nb = dlg_blocks(h, total, kThreads);
  int rc;
  if ((rc = pool_check(h, op, g)) != DLG_OK) return rc;
  if (total <= 0 || g->Do * g->Ho * g->Wo <= 0) return DLG_OK;
  DLG_LAUNCH(nb, kThreads, 0, h->stream, pool_k<T>)(kind, *g, (const T *)in, (T *)out, cidx, idx, total);
  return dlg_launched(h, op);
}

int pool_any(dlg_handle *h, const char *op, int dtype, int kind, const dlg_pool2d *g, const void *in, void *out,
             const int32_t *cidx, int32_t *idx) {
  if (dtype == DLG_F32) return pool_run<float>(h, op, kind, g, in, out, cidx, idx);
  if (dtype == DLG_F64) return pool_run<double>(h, op, kind, g, in, out, cidx, idx);
  return bad_dtype(h, op, dtype);
}

// >>unpooling -------------------------------------------------------------------
// ops/conv.h's DL__UNPOOL_KERNELS in three grid-wide passes, deterministic
// without a thread per plane: y = 0 and own = -1; each input element k
// claims its output with atomicMax(own, k), so the last in scan order wins
// as on the CPU; the winner writes y. The backward is one element of gx per
// thread. An index outside [0, m) (a max pool's -1) writes nothing.

__global__ void unpool_init_k(int64_t total, int32_t *own) {
  for (int64_t e = gtid(); e < total; e += gstride()) own[e] = -1;
}
template <class T> __global__ void unpool_zero_k(int64_t total, T *y) {
  for (int64_t e = gtid(); e < total; e += gstride()) y[e] = (T)0;
}
__global__ void unpool_claim_k(int64_t total, int64_t n, int64_t m, const int32_t *idx, int32_t *own) {
  for (int64_t e = gtid(); e < total; e += gstride()) {
    const int32_t p = idx[e];
    if (p >= 0 && p < m) atomicMax(own + (e / n) * m + p, (int32_t)(e % n));
  }
}
template <class T>
__global__ void unpool_write_k(int64_t total, int64_t n, int64_t m, const T *x, const int32_t *idx, const int32_t *own,
                               T *y) {
  for (int64_t e = gtid(); e < total; e += gstride()) {
    const int32_t p = idx[e];
    const int64_t o = (e / n) * m + p;
    if (p >= 0 && p < m && own[o] == (int32_t)(e % n)) y[o] = x[e];
  }
}
template <class T>
__host__ __device__ inline void unpool_bwd_at(int64_t n, int64_t m, const T *gy, const int32_t *idx,
                                              const int32_t *own, T *gx, int64_t e) {
  const int64_t pl = e / n, k = e % n;
  const int32_t p = idx[e];
  if (p >= 0 && p < m && own[pl * m + p] == k) gx[e] += gy[pl * m + p];
}
template <class T>
__global__ void unpool_bwd_k(int64_t total, int64_t n, int64_t m, const T *gy, const int32_t *idx,
                             const int32_t *own, T *gx) {
  for (int64_t e = gtid(); e < total; e += gstride()) unpool_bwd_at(n, m, gy, idx, own, gx, e);
}
template <class T>
int unpool_run(dlg_handle *h, int bwd, int64_t planes, int64_t n, int64_t m, const void *in, const int32_t *idx,
               void *out, int32_t *own) {
  const char *op = bwd ? "dlg_max_unpool2d_bwd" : "dlg_max_unpool2d_fwd";
  if (planes < 0 || n < 0 || m < 0 || m > INT32_MAX || n > INT32_MAX || (bwd && !own))
    return dlg_fail(h, DLG_ERR, "%s: bad sizes (planes %lld, %lld in, %lld out)%s", op, (long long)planes,
                    (long long)n, (long long)m, bwd && !own ? " or no owner map" : "");
  if (planes == 0 || m == 0 || (n == 0 && bwd)) return DLG_OK;
  const int64_t tin = planes * n, tout = planes * m;
  if (bwd) {
    DLG_LAUNCH(dlg_blocks(h, tin, kThreads), kThreads, 0, h->stream, unpool_bwd_k<T>)(tin, n, m, (const T *)in, idx,
                                                                                    own, (T *)out);
    return dlg_launched(h, op);
  }
  if (!own) { /* no gradient wanted: the owner map in the workspace */
    int rc = dlg_ws(h, sizeof(int32_t) * (size_t)tout);
    if (rc != DLG_OK) return rc;
    own = (int32_t *)h->ws;
  }
  DLG_LAUNCH(dlg_blocks(h, tout, kThreads), kThreads, 0, h->stream, unpool_zero_k<T>)(tout, (T *)out);
  DLG_LAUNCH(dlg_blocks(h, tout, kThreads), kThreads, 0, h->stream, unpool_init_k)(tout, own);
  if (tin) {
    DLG_LAUNCH(dlg_blocks(h, tin, kThreads), kThreads, 0, h->stream, unpool_claim_k)(tin, n, m, idx, own);
    DLG_LAUNCH(dlg_blocks(h, tin, kThreads), kThreads, 0, h->stream, unpool_write_k<T>)(tin, n, m, (const T *)in, idx,
                                                                                      own, (T *)out);
  }
  return dlg_launched(h, op);
}

} // namespace

// >>the ABI ---------------------------------------------------------------------

extern "C" int dlg_conv2d_fwd(dlg_handle *h, int dtype, const dlg_conv2d *g, const void *x, const void *w,
                              const void *b, void *y, int acc) {
  if (dtype == DLG_F32) return conv_fwd<float>(h, g, x, w, b, y, acc);
  if (dtype == DLG_F64) return conv_fwd<double>(h, g, x, w, b, y, acc);
  return bad_dtype(h, "dlg_conv2d_fwd", dtype);
}
extern "C" int dlg_conv2d_bwd(dlg_handle *h, int dtype, const dlg_conv2d *g, const void *x, const void *w,
                              const void *gy, void *gx, void *gw, void *gb) {
  if (dtype == DLG_F32) return conv_bwd<float>(h, g, x, w, gy, gx, gw, gb);
  if (dtype == DLG_F64) return conv_bwd<double>(h, g, x, w, gy, gx, gw, gb);
  return bad_dtype(h, "dlg_conv2d_bwd", dtype);
}

extern "C" int dlg_max_pool2d_fwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *x, void *y,
                                  int32_t *idx) {
  return pool_any(h, "dlg_max_pool2d_fwd", dtype, kMaxFwd, g, x, y, nullptr, idx);
}
extern "C" int dlg_max_pool2d_bwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *gy, const int32_t *idx,
                                  void *gx) {
  return pool_any(h, "dlg_max_pool2d_bwd", dtype, kMaxBwd, g, gy, gx, idx, nullptr);
}
extern "C" int dlg_max_pool2d_tan(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *tx, const int32_t *idx,
                                  void *ty) {
  return pool_any(h, "dlg_max_pool2d_tan", dtype, kMaxTan, g, tx, ty, idx, nullptr);
}
extern "C" int dlg_avg_pool2d_fwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *x, void *y) {
  return pool_any(h, "dlg_avg_pool2d_fwd", dtype, kAvgFwd, g, x, y, nullptr, nullptr);
}
extern "C" int dlg_avg_pool2d_bwd(dlg_handle *h, int dtype, const dlg_pool2d *g, const void *gy, void *gx) {
  return pool_any(h, "dlg_avg_pool2d_bwd", dtype, kAvgBwd, g, gy, gx, nullptr, nullptr);
}
extern "C" int dlg_max_unpool2d_fwd(dlg_handle *h, int dtype, int64_t planes, int64_t n, int64_t m, const void *x,
                                    const int32_t *idx, void *y, int32_t *own) {
  if (dtype == DLG_F32) return unpool_run<float>(h, 0, planes, n, m, x, idx, y, own);
  if (dtype == DLG_F64) return unpool_run<double>(h, 0, planes, n, m, x, idx, y, own);
  return bad_dtype(h, "dlg_max_unpool2d_fwd", dtype);
}
extern "C" int dlg_max_unpool2d_bwd(dlg_handle *h, int dtype, int64_t planes, int64_t n, int64_t m, const void *gy,
                                    const int32_t *idx, const int32_t *own, void *gx) {
  if (dtype == DLG_F32) return unpool_run<float>(h, 1, planes, n, m, gy, idx, (void *)gx, (int32_t *)own);
  if (dtype == DLG_F64) return unpool_run<double>(h, 1, planes, n, m, gy, idx, (void *)gx, (int32_t *)own);
  return bad_dtype(h, "dlg_max_unpool2d_bwd", dtype);
}
