// tests/gpu_host/dnn_host.cu - src_gpu/conv.cu's and norm.cu's own kernels (pooling, batch
// norm, layer / RMS norm, the conv bias gradient), run on the HOST against
// the CPU ops (no GPU needed).
//
// Why: there is no GPU in CI, so tests/test_gpu.c skips there and nothing
// would ever execute these kernels. The files write each kernel's work for one
// element / channel / row as a __host__ __device__ function (maxpool_fwd_at,
// chan_part_at, bn_final_at, ln_row_at, ...), templated over a reduction policy for the
// per-channel and per-row sums. This file #includes both, calls those
// bodies in plain host loops over every element / channel / row, with
// HostRed (one "thread" that does the whole sum, and is the lead) in place
// of the kernels' BlockRed, and compares the results with dl.h's CPU ops,
// which dnn_ref.c runs on the same inputs (forward, dl_backward, tangent).
//
// What it checks, at f32 and at f64:
//   - max and avg pool3d, the same bodies in 3-d: y, ty, gx bit for bit, 6
//     windows (stride, padding, exclude_pad, ceil_mode) and 2 dilated (max);
//   - max and avg pool2d: y, the tangent ty (max: through the forward's
//     idx), the gradient gx; bit for bit, over inputs with ties, NaN and
//     -inf, for 17 geometries (stride != kernel, padding, exclude_pad,
//     1x1, overlapping windows, ceil_mode, explicit and SAME padding) and
//     5 dilated ones (max; on [1, 2, 3, 2] the last has a window whose
//     taps all miss the input) on two or three shapes each;
//   - batch norm on [N, C, S]: y, ty, gx, gw, gb and the running mean and
//     variance, in training, eval with running statistics and eval without
//     them (batch statistics), with / without weight and bias, eps 0 once;
//   - layer norm and RMS norm over the last dimension of [R, D]: y, ty, gx,
//     and gw, gb through the chunked column sums (ln_chunks, ln_colpart_at,
//     ln_colsum_at), with / without weight and bias, R up to 300;
//   - conv2d's bias gradient (chan_part_at with SumGy, conv_bias_final_at),
//     the per-channel sums cut into 1 to 4 chunks as the kernels cut them.
// Outputs the bodies assign start at a value no op gives (an element left
// unwritten fails); gradients they add to (gx, gw, gb) start at random
// values, and want is the CPU's gradient plus those (for the pools, a second
// backward pass checked so). These and the norms compare |got - want| /
// (1 + |want|) <= 1e-6 (f32) or 1e-12 (f64); the worst seen is 8 times
// below that (f32 pool gx +=), the norms' 100 times (both sum in double).
//
// What it does NOT check: the cuDNN convolution calls (descriptors, algorithm
// choice, workspace) and everything else that needs a device: the
// multi-thread reductions (block_sum2's shared-memory tree, BlockRed's
// tid/lead), the kernels' launch configurations and grid-stride loops, the
// workspace, and the dlg_* entry points' argument checks. tests/test_gpu.c
// covers those where a GPU exists.
//
// Build and run from the repository root:
//   gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -Iinclude -c tests/gpu_host/dnn_ref.c -o B/dnn_ref.o
//   nvcc -std=c++17 -Werror all-warnings -O1 -Iinclude -Isrc_gpu tests/gpu_host/dnn_host.cu B/dnn_ref.o \
//        -o B/dnn_host -lm
//   B/dnn_host
// (B: any build directory; clang works for dnn_ref.c too.) The program only
// runs host code: it calls no CUDA runtime or cuDNN function, and the CUDA
// runtime that nvcc links statically is only told about the file's kernels
// at start-up, which needs no device or driver. The last line is the
// harness's "HARNESS <passed> <failed> <skipped>"; a test is one op at one
// dtype.
#include "conv.cu" // src_gpu/conv.cu and norm.cu (-Isrc_gpu), the families that share
#include "norm.cu" // src_gpu/dnn_common.h, with their includes
#include "../harness.h"
#include "host_check.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

// conv.cu's convolution entry points call cuDNN, which this program does not
// link (nothing here reaches them). Weak references let it link without
// libcudnn; a call would jump to address 0. A new cuDNN call in conv.cu shows
// up as an undefined reference at link time: add its name here.
#pragma weak cudnnConvolutionBackwardData
#pragma weak cudnnConvolutionBackwardFilter
#pragma weak cudnnConvolutionForward
#pragma weak cudnnCreateConvolutionDescriptor
#pragma weak cudnnCreateFilterDescriptor
#pragma weak cudnnCreateTensorDescriptor
#pragma weak cudnnFindConvolutionBackwardDataAlgorithm
#pragma weak cudnnFindConvolutionBackwardFilterAlgorithm
#pragma weak cudnnFindConvolutionForwardAlgorithm
#pragma weak cudnnDestroyConvolutionDescriptor
#pragma weak cudnnDestroyFilterDescriptor
#pragma weak cudnnDestroyTensorDescriptor
#pragma weak cudnnGetConvolution2dForwardOutputDim
#pragma weak cudnnGetConvolutionBackwardDataAlgorithm_v7
#pragma weak cudnnGetConvolutionBackwardDataWorkspaceSize
#pragma weak cudnnGetConvolutionBackwardFilterAlgorithm_v7
#pragma weak cudnnGetConvolutionBackwardFilterWorkspaceSize
#pragma weak cudnnGetConvolutionForwardAlgorithm_v7
#pragma weak cudnnGetConvolutionForwardWorkspaceSize
#pragma weak cudnnGetErrorString
#pragma weak cudnnSetConvolution2dDescriptor
#pragma weak cudnnSetConvolutionGroupCount
#pragma weak cudnnSetConvolutionMathType
#pragma weak cudnnSetFilter4dDescriptor
#pragma weak cudnnSetStream
#pragma weak cudnnSetTensor4dDescriptor
#pragma weak cudnnSetTensorNdDescriptorEx
#pragma weak cudnnSetFilterNdDescriptor
#pragma weak cudnnSetConvolutionNdDescriptor
#pragma weak cudnnGetConvolutionNdForwardOutputDim

// The reduction policy of one thread: it visits every item (tid 0 of nt 1),
// so its partial sums are the totals and sum2 has nothing to add; it is the
// lead that writes the item's results. BlockRed's interface.
struct HostRed {
  __host__ __device__ int64_t tid() const { return 0; }
  static constexpr int64_t nt = 1;
  __host__ __device__ bool lead() const { return true; }
  __host__ __device__ void sum2(double &, double &) const {}
};

// Random starting values for outputs that the bodies add to (gx, gw, gb),
// and want = ref + those values.
template <class T> static std::vector<T> dh_base(size_t n) {
  std::vector<T> v(n);
  hc_fill(v, -1, 1);
  return v;
}
template <class T> static std::vector<T> dh_plus(const std::vector<T> &a, const std::vector<T> &b) {
  std::vector<T> v(a.size());
  for (size_t i = 0; i < a.size() && i < b.size(); i++) v[i] = a[i] + b[i];
  return v;
}

// >>pooling -------------------------------------------------------------------

// NaN and -inf outputs seen by the max pool cases (so that the bit checks
// cover them).
static int dh_nan_out, dh_ninf_out;

// One pooling case on x [N, C, H, W] (kind 0 max, 1 avg; q the window as
// dl_pool2d_args, host_check.h): x holds ties (values in {-1, 0, 1, 2}), NaN
// and -inf. The bodies run as pool_k would: forward over y, then (max) the
// tangent over y through idx, then the backward over gx.
template <class T> static void pool_case(int kind, int64_t N, int64_t C, int64_t H, int64_t W, const int *q) {
  const int dt = sizeof(T) == 8;
  int64_t geo[10];
  dlg_pool2d g = {}; // kd 0: 2-d, filled in by pool_norm as pool_run does
  dnn_ref_pool_geom(kind, N, C, H, W, q, geo);
  g.N = N; g.C = C; g.H = H; g.W = W; g.kh = q[0]; g.kw = q[1];
  g.sh = geo[6]; g.sw = geo[7]; g.ph = geo[2]; g.pw = geo[3]; g.excl = q[6];
  g.Ho = geo[0]; g.Wo = geo[1]; g.phe = geo[4]; g.pwe = geo[5]; g.dh = geo[8]; g.dw = geo[9];
  g = pool_norm(g);
  const int64_t nx = N * C * H * W, ny = N * C * g.Ho * g.Wo;
  std::vector<T> x(nx), tx(nx), gy(ny), y(ny, kUnset), ty(ny, kUnset), gx(nx, (T)0), ry(ny), rty(ny), rgx(nx);
  std::vector<int32_t> idx(ny);
  for (auto &e : x) {
    const double u = hc_urand();
    e = u < 0.03 ? (T)NAN : u < 0.08 ? -(T)INFINITY : (T)std::floor(hc_urand() * 4) - 1;
  }
  hc_fill(tx, -1, 1);
  hc_fill(gy, -1, 1);
  dnn_ref_pool(kind, dt, N, C, H, W, q, x.data(), gy.data(), tx.data(), ry.data(), rgx.data(), rty.data());
  for (int64_t e = 0; e < ny; e++) {
    if (kind == 0) {
      maxpool_fwd_at(g, x.data(), y.data(), idx.data(), e);
    } else {
      avgpool_fwd_at(g, x.data(), y.data(), e);
      avgpool_fwd_at(g, tx.data(), ty.data(), e); // avg pool is linear: its tangent is the pool of tx
    }
  }
  if (kind == 0)
    for (int64_t e = 0; e < ny; e++) maxpool_tan_at(g, tx.data(), idx.data(), ty.data(), e);
  for (int64_t e = 0; e < nx; e++) {
    if (kind == 0) maxpool_bwd_at(g, gy.data(), idx.data(), gx.data(), e);
    else avgpool_bwd_at(g, gy.data(), gx.data(), e);
  }
  if (kind == 0)
    for (const T v : ry) {
      dh_nan_out += std::isnan(v);
      dh_ninf_out += std::isinf(v) && v < 0;
    }
  char name[240];
  snprintf(name, sizeof name, "%s pool %s [%lld, %lld, %lld, %lld] kernel %dx%d stride %dx%d pad %dx%d excl %d "
           "dil %dx%d ceil %d mode %d end %dx%d", kind ? "avg" : "max", hc_dt(dt), (long long)N, (long long)C,
           (long long)H, (long long)W, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11],
           q[12]);
  const std::string n(name);
  hc_bits(n + " y", y, ry);
  hc_bits(n + " ty", ty, rty);
  hc_bits(n + " gx", gx, rgx);
  // the backward adds to gx: again onto random values
  std::vector<T> gxa(nx), want(nx);
  hc_fill(gxa, -1, 1);
  for (int64_t e = 0; e < nx; e++) want[e] = gxa[e] + rgx[e];
  for (int64_t e = 0; e < nx; e++) {
    if (kind == 0) maxpool_bwd_at(g, gy.data(), idx.data(), gxa.data(), e);
    else avgpool_bwd_at(g, gy.data(), gxa.data(), e);
  }
  hc_close(n + " gx +=", gxa, want, dt ? 1e-12 : 1e-6);
}

template <class T> static void pool_cases(int kind) {
  // kernel h, w; stride h, w (0: the kernel); padding h, w (<= kernel / 2); exclude_pad; dilation h, w
  // (max only); ceil_mode; pad_mode (1 explicit, 2 SAME, 3 SAME_LOWER); padding at the bottom, right
  static const int geo[][13] = {{2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0},
                                {3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0}, {3, 3, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0},
                                {3, 2, 1, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0}, {4, 4, 3, 1, 2, 2, 0, 0, 0, 0, 0, 0, 0},
                                {4, 4, 3, 1, 2, 2, 1, 0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                                {5, 3, 2, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0}, {2, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0},
                                {3, 3, 2, 2, 1, 0, 0, 0, 0, 1, 0, 0, 0}, {3, 2, 2, 2, 1, 1, 1, 0, 0, 1, 0, 0, 0},
                                {3, 2, 2, 1, 0, 1, 0, 0, 0, 0, 1, 2, 0}, {3, 3, 2, 2, 2, 0, 1, 0, 0, 0, 1, 1, 2},
                                {2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0}, {3, 3, 2, 2, 0, 0, 1, 0, 0, 0, 2, 0, 0},
                                {4, 3, 3, 2, 0, 0, 0, 0, 0, 0, 3, 0, 0}};
  // dilated (max pooling only)
  static const int dil[][13] = {{3, 2, 1, 2, 1, 1, 0, 2, 3, 0, 0, 0, 0}, {2, 3, 3, 2, 1, 1, 0, 2, 1, 1, 0, 0, 0},
                                {3, 3, 1, 1, 0, 0, 0, 2, 2, 0, 2, 0, 0}, {2, 2, 1, 1, 0, 0, 0, 4, 4, 0, 1, 3, 3},
                                {1, 2, 1, 1, 0, 2, 0, 1, 3, 0, 1, 0, 2}};
  for (const auto &q : geo) {
    pool_case<T>(kind, 2, 3, 7, 9, q);
    pool_case<T>(kind, 1, 2, 5, 5, q);
  }
  if (kind == 0)
    for (const auto &q : dil) {
      pool_case<T>(kind, 2, 3, 7, 9, q);
      pool_case<T>(kind, 1, 2, 5, 5, q);
      pool_case<T>(kind, 1, 2, 3, 2, q); // the last case: the window at columns -1 and 2 misses W = 2
    }
}
template <class T> static void max_pools() {
  dh_nan_out = dh_ninf_out = 0;
  pool_cases<T>(0);
  CHECK_MSG(dh_nan_out > 0 && dh_ninf_out > 0, "the cases gave %d NaN and %d -inf outputs: the NaN / -inf paths "
            "went unchecked", dh_nan_out, dh_ninf_out);
}
// One 3-d pooling case on x [N, C, D, H, W] (q a dl_pool3d_args, host_check.h), as pool_case: the bodies'
// y, ty, gx bit for bit against dl_t_max_pool3d / dl_t_avg_pool3d.
template <class T>
static void pool3d_case(int kind, int64_t N, int64_t C, int64_t D, int64_t H, int64_t W, const int *q) {
  const int dt = sizeof(T) == 8;
  int64_t geo[12];
  dlg_pool2d g = {};
  dnn_ref_pool3d_geom(kind, N, C, D, H, W, q, geo);
  g.N = N; g.C = C; g.D = D; g.H = H; g.W = W; g.kd = q[0]; g.kh = q[1]; g.kw = q[2];
  g.Do = geo[0]; g.Ho = geo[1]; g.Wo = geo[2]; g.pd = g.pde = geo[3]; g.ph = g.phe = geo[4]; g.pw = g.pwe = geo[5];
  g.sd = geo[6]; g.sh = geo[7]; g.sw = geo[8]; g.dd = geo[9]; g.dh = geo[10]; g.dw = geo[11]; g.excl = q[9];
  const int64_t nx = N * C * D * H * W, ny = N * C * g.Do * g.Ho * g.Wo;
  std::vector<T> x(nx), tx(nx), gy(ny), y(ny, kUnset), ty(ny, kUnset), gx(nx, (T)0), ry(ny), rty(ny), rgx(nx);
  std::vector<int32_t> idx(ny);
  for (auto &e : x) {
    const double u = hc_urand();
    e = u < 0.03 ? (T)NAN : u < 0.08 ? -(T)INFINITY : (T)std::floor(hc_urand() * 4) - 1;
  }
  hc_fill(tx, -1, 1);
  hc_fill(gy, -1, 1);
  dnn_ref_pool3d(kind, dt, N, C, D, H, W, q, x.data(), gy.data(), tx.data(), ry.data(), rgx.data(), rty.data());
  for (int64_t e = 0; e < ny; e++) {
    if (kind == 0) {
      maxpool_fwd_at(g, x.data(), y.data(), idx.data(), e);
    } else {
      avgpool_fwd_at(g, x.data(), y.data(), e);
      avgpool_fwd_at(g, tx.data(), ty.data(), e);
    }
  }
  if (kind == 0)
    for (int64_t e = 0; e < ny; e++) maxpool_tan_at(g, tx.data(), idx.data(), ty.data(), e);
  for (int64_t e = 0; e < nx; e++) {
    if (kind == 0) maxpool_bwd_at(g, gy.data(), idx.data(), gx.data(), e);
    else avgpool_bwd_at(g, gy.data(), gx.data(), e);
  }
  char name[240];
  snprintf(name, sizeof name, "%s pool3d %s [%lld, %lld, %lld, %lld, %lld] kernel %dx%dx%d stride %dx%dx%d pad "
           "%dx%dx%d excl %d dil %dx%dx%d ceil %d", kind ? "avg" : "max", hc_dt(dt), (long long)N, (long long)C,
           (long long)D, (long long)H, (long long)W, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10],
           q[11], q[12], q[13]);
  const std::string n(name);
  hc_bits(n + " y", y, ry);
  hc_bits(n + " ty", ty, rty);
  hc_bits(n + " gx", gx, rgx);
}
template <class T> static void pool3d_cases(int kind) {
  // kernel d, h, w; stride d, h, w (0: the kernel); padding d, h, w; exclude_pad; dilation d, h, w (max only);
  // ceil_mode
  static const int geo[][14] = {{2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {3, 3, 3, 2, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0},
                                {3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0}, {2, 3, 2, 1, 1, 2, 1, 1, 0, 0, 0, 0, 0, 0},
                                {3, 2, 3, 2, 2, 2, 1, 0, 1, 0, 0, 0, 0, 1}, {2, 3, 3, 2, 2, 2, 0, 1, 1, 1, 0, 0, 0, 1}};
  static const int dil[][14] = {{2, 3, 2, 1, 2, 1, 1, 0, 1, 0, 2, 2, 3, 0}, {2, 2, 2, 2, 1, 1, 0, 1, 0, 0, 3, 1, 2, 1}};
  for (const auto &q : geo) {
    pool3d_case<T>(kind, 2, 2, 5, 6, 7, q);
    pool3d_case<T>(kind, 1, 1, 4, 3, 5, q);
  }
  if (kind == 0)
    for (const auto &q : dil) {
      pool3d_case<T>(kind, 2, 2, 6, 7, 7, q);
      pool3d_case<T>(kind, 1, 1, 4, 5, 5, q);
    }
}
static void pool3d_f32(void) {
  pool3d_cases<float>(0);
  pool3d_cases<float>(1);
}
static void pool3d_f64(void) {
  pool3d_cases<double>(0);
  pool3d_cases<double>(1);
}
static void max_pool_f32(void) { max_pools<float>(); }
static void max_pool_f64(void) { max_pools<double>(); }
static void avg_pool_f32(void) { pool_cases<float>(1); }
static void avg_pool_f64(void) { pool_cases<double>(1); }

// >>batch norm ----------------------------------------------------------------

// The bodies as bn_run runs them, on the host: each channel's sums in
// `split` chunks (chan_part_at), then bn_final_at per channel.
template <class T>
static void bn_host(int mode, const dlg_bn &p, const T *x, const T *v, const T *tw, const T *tb, T *gw, T *gb,
                    double *k, int64_t split) {
  const HostRed rd;
  const ChanGeo g = {p.N, p.C, p.S};
  std::vector<double> part((size_t)(2 * p.C * split), -1.0);
  const bool sums = bn_needs_sums(mode, p, v != nullptr, gw != nullptr, gb != nullptr);
  auto parts = [&](const auto &f) {
    for (int64_t c = 0; c < p.C; c++)
      for (int64_t j = 0; j < split; j++) chan_part_at(rd, g, split, f, part.data(), c, j);
  };
  if (mode == kFwd && p.batch) {
    parts(BnSumX<T>{x});
    for (int64_t c = 0; c < p.C; c++)
      bn_final_at<T>(mode, 0, p, part.data(), split, false, nullptr, nullptr, nullptr, nullptr, k, c);
    parts(BnSumSq<T>{x, p.stats});
  } else if (sums) {
    parts(BnSumV<T>{x, v, p.stats});
  }
  for (int64_t c = 0; c < p.C; c++)
    bn_final_at<T>(mode, 1, p, sums ? part.data() : nullptr, split, v != nullptr, tw, tb, gw, gb, k, c);
}

// One batch norm case on x [N, C, S]: training (batch statistics, running
// update when track), eval with running statistics (track), or eval without
// them (!track: batch statistics, no update); hw, hb: weight, bias. The
// bodies run as bn_run would (bn_host), then bn_map_at over the elements,
// for FWD, TAN (tx, tw, tb) and BWD (gy; gx += ).
template <class T>
static void bn_case(int64_t N, int64_t C, int64_t S, int training, int track, int hw, int hb, double mom,
                    double eps) {
  const int dt = sizeof(T) == 8;
  const double tol = dt ? 1e-12 : 1e-6;
  const int64_t n = N * C * S;
  std::vector<T> x(n), gy(n), tx(n), w(C), b(C), tw(C), tb(C), rm(C), rv(C);
  hc_fill(x, 1, 4);
  hc_fill(gy, -1, 1);
  hc_fill(tx, -1, 1);
  hc_fill(w, 0.5, 1.5);
  hc_fill(b, -1, 1);
  hc_fill(tw, -1, 1);
  hc_fill(tb, -1, 1);
  hc_fill(rm, 1, 3);
  hc_fill(rv, 1, 3);
  std::vector<T> ry(n), rgx(n), rty(n), rgw(C), rgb(C), rrm = rm, rrv = rv;
  dnn_ref_bn(dt, N, C, S, training, mom, eps, x.data(), hw ? w.data() : nullptr, hb ? b.data() : nullptr,
             track ? rrm.data() : nullptr, track ? rrv.data() : nullptr, gy.data(), tx.data(), tw.data(), tb.data(),
             ry.data(), rgx.data(), rgw.data(), rgb.data(), rty.data());
  // y, ty assigned; gx, gw, gb added to (from random values)
  std::vector<T> y(n, kUnset), ty(n, kUnset), gx = dh_base<T>(n), gw = dh_base<T>(C), gb = dh_base<T>(C);
  const std::vector<T> gx0 = gx, gw0 = gw, gb0 = gb;
  std::vector<double> stats(2 * C), k(3 * C);
  dlg_bn p;
  std::memset(&p, 0, sizeof p);
  p.N = N; p.C = C; p.S = S;
  p.batch = training || !track;
  p.update = p.batch && training && track;
  p.eps = eps; p.momentum = mom;
  p.w = hw ? w.data() : nullptr; p.ws = 1;
  p.b = hb ? b.data() : nullptr; p.bs = 1;
  p.rmean = track ? rm.data() : nullptr; p.rvar = track ? rv.data() : nullptr; p.rms = 1; p.rvs = 1;
  p.stats = stats.data();
  const int64_t split = 1 + (N * S) % 4; // 1 to 4 chunks per channel (uneven ones too)
  bn_host<T>(kFwd, p, x.data(), nullptr, nullptr, nullptr, nullptr, nullptr, k.data(), split);
  for (int64_t e = 0; e < n; e++) bn_map_at(0, C, S, x.data(), x.data(), stats.data(), k.data(), y.data(), e);
  bn_host<T>(kTan, p, x.data(), tx.data(), hw ? tw.data() : nullptr, hb ? tb.data() : nullptr, nullptr, nullptr,
             k.data(), split);
  for (int64_t e = 0; e < n; e++) bn_map_at(0, C, S, x.data(), tx.data(), stats.data(), k.data(), ty.data(), e);
  bn_host<T>(kBwd, p, x.data(), gy.data(), nullptr, nullptr, hw ? gw.data() : nullptr, hb ? gb.data() : nullptr,
             k.data(), split);
  for (int64_t e = 0; e < n; e++) bn_map_at(1, C, S, x.data(), gy.data(), stats.data(), k.data(), gx.data(), e);
  char name[200];
  snprintf(name, sizeof name, "batch norm %s [%lld, %lld, %lld] %s weight %d bias %d momentum %g eps %g",
           hc_dt(dt), (long long)N, (long long)C, (long long)S,
           training ? "training" : track ? "eval" : "eval without running stats", hw, hb, mom, eps);
  const std::string nm(name);
  hc_close(nm + " y", y, ry, tol);
  hc_close(nm + " ty", ty, rty, tol);
  hc_close(nm + " gx", gx, dh_plus(gx0, rgx), tol);
  if (hw) hc_close(nm + " gw", gw, dh_plus(gw0, rgw), tol);
  if (hb) hc_close(nm + " gb", gb, dh_plus(gb0, rgb), tol);
  if (track) {
    hc_close(nm + " running mean", rm, rrm, tol);
    hc_close(nm + " running var", rv, rrv, tol);
  }
}

template <class T> static void bn_cases() {
  static const int64_t shapes[][3] = {{4, 3, 1}, {2, 5, 7}, {3, 4, 20}, {5, 2, 70}, {1, 3, 9}};
  for (const auto &s : shapes)
    for (int mode = 0; mode < 3; mode++)  // training, eval, eval without running stats
      for (int aff = 0; aff < 3; aff++)   // weight and bias, bias only, weight only
        bn_case<T>(s[0], s[1], s[2], mode == 0, mode != 2, aff != 1, aff != 2, 0.1, 1e-5);
  bn_case<T>(6, 3, 4, 1, 1, 1, 1, 0.3, 0.0);
}
static void batch_norm_f32(void) { bn_cases<float>(); }
static void batch_norm_f64(void) { bn_cases<double>(); }

// >>layer norm, rms norm ------------------------------------------------------

// One layer norm (center) or RMS norm case on x [R, D]. The bodies run as
// ln_run would: ln_row_at per row for FWD, TAN, BWD (gx +=), then the
// weight / bias gradient as column sums over ln_chunks' row chunks.
template <class T> static void ln_case(int center, int64_t R, int64_t D, int hw, int hb, double eps) {
  const int dt = sizeof(T) == 8;
  const double tol = dt ? 1e-12 : 1e-6;
  const int64_t n = R * D;
  if (!center) hb = 0; // RMS norm has no bias
  std::vector<T> x(n), gy(n), tx(n), w(D), b(D), tw(D), tb(D);
  hc_fill(x, 1, 4);
  hc_fill(gy, -1, 1);
  hc_fill(tx, -1, 1);
  hc_fill(w, 0.5, 1.5);
  hc_fill(b, -1, 1);
  hc_fill(tw, -1, 1);
  hc_fill(tb, -1, 1);
  std::vector<T> ry(n), rgx(n), rty(n), rgw(D), rgb(D);
  dnn_ref_ln(dt, center, R, D, eps, x.data(), hw ? w.data() : nullptr, hb ? b.data() : nullptr, gy.data(),
             tx.data(), tw.data(), tb.data(), ry.data(), rgx.data(), rgw.data(), rgb.data(), rty.data());
  // y, ty assigned; gx, gw, gb added to (from random values)
  std::vector<T> y(n, kUnset), ty(n, kUnset), gx = dh_base<T>(n), gw = dh_base<T>(D), gb = dh_base<T>(D);
  const std::vector<T> gx0 = gx, gw0 = gw, gb0 = gb;
  std::vector<double> stats(2 * R);
  dlg_ln p;
  std::memset(&p, 0, sizeof p);
  p.R = R; p.D = D; p.center = center; p.eps = eps;
  p.w = hw ? w.data() : nullptr;
  p.b = hb ? b.data() : nullptr;
  p.stats = stats.data();
  const HostRed rd;
  for (int64_t r = 0; r < R; r++) ln_row_at<T>(rd, kFwd, p, x.data(), nullptr, nullptr, nullptr, y.data(), r);
  for (int64_t r = 0; r < R; r++)
    ln_row_at<T>(rd, kTan, p, x.data(), tx.data(), hw ? tw.data() : nullptr, hb ? tb.data() : nullptr, ty.data(), r);
  for (int64_t r = 0; r < R; r++) ln_row_at<T>(rd, kBwd, p, x.data(), gy.data(), nullptr, nullptr, gx.data(), r);
  int64_t nch, rpc;
  ln_chunks(R, &nch, &rpc);
  std::vector<double> part(2 * D * nch);
  for (int64_t ch = 0; ch < nch; ch++)
    for (int64_t j = 0; j < D; j++) ln_colpart_at(p, x.data(), gy.data(), rpc, part.data(), ch, j);
  for (int64_t j = 0; j < D; j++)
    ln_colsum_at(D, nch, part.data(), hw ? gw.data() : (T *)nullptr, hb ? gb.data() : (T *)nullptr, j);
  char name[200];
  snprintf(name, sizeof name, "%s %s [%lld, %lld] weight %d bias %d", center ? "layer norm" : "rms norm", hc_dt(dt),
           (long long)R, (long long)D, hw, hb);
  const std::string nm(name);
  hc_close(nm + " y", y, ry, tol);
  hc_close(nm + " ty", ty, rty, tol);
  hc_close(nm + " gx", gx, dh_plus(gx0, rgx), tol);
  if (hw) hc_close(nm + " gw", gw, dh_plus(gw0, rgw), tol);
  if (hb) hc_close(nm + " gb", gb, dh_plus(gb0, rgb), tol);
}

template <class T> static void ln_cases(int center) {
  static const int64_t shapes[][2] = {{3, 5}, {7, 64}, {40, 33}, {300, 12}, {1, 1000}};
  for (const auto &s : shapes)
    for (int aff = 0; aff < 3; aff++) // weight and bias, bias only, weight only (RMS: no bias)
      ln_case<T>(center, s[0], s[1], aff != 1, aff != 2, 1e-5);
}
static void layer_norm_f32(void) { ln_cases<float>(1); }
static void layer_norm_f64(void) { ln_cases<double>(1); }
static void rms_norm_f32(void) { ln_cases<float>(0); }
static void rms_norm_f64(void) { ln_cases<double>(0); }

// >>conv bias gradient --------------------------------------------------------

// gb [O] += the sums of gy [N, O, Hh, Ww] over n and the plane, per o.
template <class T> static void conv_gb_case(int64_t N, int64_t O, int64_t Hh, int64_t Ww) {
  const int dt = sizeof(T) == 8;
  std::vector<T> gy(N * O * Hh * Ww), gb = dh_base<T>(O), rgb(O);
  const std::vector<T> gb0 = gb;
  hc_fill(gy, -1, 1);
  dnn_ref_conv_gb(dt, N, O, Hh, Ww, gy.data(), rgb.data());
  const HostRed rd;
  const ChanGeo g = {N, O, Hh * Ww};
  const int64_t split = 1 + (N * Hh * Ww) % 3; // as conv_bwd, with 1 to 3 chunks per channel
  std::vector<double> part((size_t)(2 * O * split), -1.0);
  for (int64_t o = 0; o < O; o++)
    for (int64_t j = 0; j < split; j++) chan_part_at(rd, g, split, SumGy<T>{gy.data()}, part.data(), o, j);
  for (int64_t o = 0; o < O; o++) conv_bias_final_at<T>(part.data(), split, gb.data(), o);
  char name[120];
  snprintf(name, sizeof name, "conv bias grad %s gy [%lld, %lld, %lld, %lld]", hc_dt(dt), (long long)N,
           (long long)O, (long long)Hh, (long long)Ww);
  hc_close(name, gb, dh_plus(gb0, rgb), dt ? 1e-13 : 1e-7); // added to gb's random values
}
template <class T> static void conv_gb_cases() {
  conv_gb_case<T>(3, 4, 5, 6);
  conv_gb_case<T>(1, 2, 1, 1);
}
static void conv_bias_grad_f32(void) { conv_gb_cases<float>(); }
static void conv_bias_grad_f64(void) { conv_gb_cases<double>(); }

int main(void) {
  RUN(max_pool_f32);
  RUN(max_pool_f64);
  RUN(avg_pool_f32);
  RUN(avg_pool_f64);
  RUN(pool3d_f32);
  RUN(pool3d_f64);
  RUN(batch_norm_f32);
  RUN(batch_norm_f64);
  RUN(layer_norm_f32);
  RUN(layer_norm_f64);
  RUN(rms_norm_f32);
  RUN(rms_norm_f64);
  RUN(conv_bias_grad_f32);
  RUN(conv_bias_grad_f64);
  return harness_finish();
}
