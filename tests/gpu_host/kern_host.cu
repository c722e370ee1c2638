// tests/gpu_host/kern_host.cu - the kernels of src_gpu/reduce.cu, loss.cu,
// sparse.cu and optim.cu (reductions,
// softmax, losses, embedding, dropout, optimizer updates), run on the HOST
// against the CPU ops (no GPU needed).
//
// Why: there is no GPU in CI, so tests/test_gpu.c skips there and nothing
// would ever execute these kernels. Each file writes each kernel's work for one
// element (sgd_at, dropout_at, gather_at, ...) or one output of its
// reduction engine (reduce_out, softmax_out, ce_out, ...) as a
// __host__ __device__ function; the engine's bodies are templated over a
// lane policy (EngRed in the kernels). This file #includes the four with
// DLG_HOST_TEST defined, which leaves out its launch code and dlg_* entry
// points (so no CUDA runtime function is called: only nvcc's start-up stub
// registers the file's empty device code with the static runtime, which
// needs no device or driver), calls those bodies in plain host loops over
// every element / output, and compares the results with dl.h's CPU ops,
// which kern_ref.c runs on the same inputs (forward, dl_backward, tangent,
// the optimizer updates). The engine's bodies run twice: with HostEng (one
// lane per output) and with HostLanes (4 lanes per output, each walking
// every 4th element, comb combining their values in bcomb's tree order;
// see kh_engine), which checks the lane split, that every lane makes the
// same comb calls (a block would hang otherwise) and that a spare slot past
// the last output writes nothing. The scalars a kernel gets from the C side
// (optimizer constants, dropout threshold, loss scales) are computed as the
// GPU branches in include/dl/ compute them (kern_ref.c for the optimizers
// and dropout, this file for the rest).
//
// What it checks, at f32 and at f64 (a test is one op family at one dtype):
//   - bit for bit (dl/gpu/optim.h promises it): every optimizer update (SGD plain /
//     momentum with dampening / Nesterov / weight decay / maximize; Adam,
//     AdamW, AMSGrad; RMSprop plain / centred / momentum; Adagrad with
//     lr decay; Lion), dense over 3 steps and row-sparse (the touched rows
//     of a [V, w] parameter, different rows each step, SparseAdam's eps)
//     against the CPU's dl_optim_step row loop; gradient clamp (NaN, inf)
//     and scale; dl_regularize, dense and row-sparse (via a model); the
//     dropout mask (element i kept as dl_t_dropout decided it) and y, the
//     tangent and the backward (+=); rows scatter (the embedding's sparse
//     gradient over two backward passes, the dense gradient of a weight that
//     is an op's output, dl_sgrad_add_to, out-of-range keys skipped);
//     embedding forward and tangent with contiguous, column-sliced and
//     transposed weights; nll per row and its backward; max / min values;
//   - within rounding (sums in another order): sum_axis (the bias gradient
//     and a mean); sum / mean / max / min (ties, NaN) / var (corrections 0
//     and 1) / logsumexp (+-inf, large values) over 17 shape-and-axes
//     cases, their tangents and backward (+=); softmax and log_softmax
//     forward, tangent and backward (+=) along first / middle / last axes,
//     rows of +-1e4 and -inf; mse, bce_with_logits, huber, smooth_l1 and L1
//     with reductions mean / sum / none, forward, tangent (of a and b, of
//     one) and backward (into a and b, into one); cross_entropy (label
//     smoothing 0 to 1) forward, the saved softmax, tangent and backward;
//     nll's sums; the gradient's sum of squares. Tolerance: |got - want| /
//     (1 + |want|) <= 5e-7 at f32 (a few units in the last place), 1e-14 at
//     f64, except where a comment says why the CPU op itself is less exact
//     (f32 sums in float). The worst seen is 3.5 times below that (an f64
//     sum of 1000 terms); most results are the CPU's bits.
// Outputs a body assigns start at 777 (no op gives it: an element left
// unwritten fails); gradients it adds to start at random values, and the
// CPU op adds to the same values (a leaf's gradient accumulates), so `=`
// for `+=` fails.
//
// What it does NOT check: anything that needs a device: bcomb itself
// (shared memory, barriers), eng_of's thread-to-lane mapping, tiles and the
// grid loops, launch configurations, the one-value sums' two kernels
// (k_psum, k_pfinal: here a plain loop adds the same terms), the workspace
// and the staging of host index arrays, and the dlg_* entry points
// themselves (argument checks, dispatch on dtype; the scalars' rounding to
// the dtype is mirrored here). Device arithmetic (the _rn intrinsics, nvcc's
// fused multiply-adds where the headers promise only rounding) is the host's
// here. tests/test_gpu.c covers the device where one exists.
//
// Build and run from the repository root:
//   gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -Iinclude -c tests/gpu_host/kern_ref.c -o B/kern_ref.o
//   nvcc -std=c++17 -Werror all-warnings -O1 -Iinclude -Isrc_gpu tests/gpu_host/kern_host.cu B/kern_ref.o \
//        -o B/kern_host -lm
//   B/kern_host
// (B: any build directory; clang works for kern_ref.c too.) The last line
// is the harness's "HARNESS <passed> <failed> <skipped>".
#define DLG_HOST_TEST
#include "reduce.cu" // src_gpu/reduce.cu, loss.cu, sparse.cu, optim.cu (-Isrc_gpu): the
#include "loss.cu"   // families that share src_gpu/engine.h, with their includes
#include "sparse.cu"
#include "optim.cu"
#include "../harness.h"
#include "host_check.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// The engine's lane policy for one lane per output: it visits every element
// (first 0, step 1), so its partial values are the totals and comb has
// nothing to combine; it is the lead that writes the output. EngRed's
// interface.
struct HostEng {
  __host__ __device__ int64_t first() const { return 0; }
  __host__ __device__ int64_t step() const { return 1; }
  __host__ __device__ bool lead() const { return true; }
  template <class C> __host__ __device__ double comb(double v, C) const { return v; }
};
static const HostEng kh_rd = {};
// geo_make reports errors into a handle's message: a host one, never a device.
static dlg_handle kh_h;

// Values on a grid of 0.25 in [-2, 2] (exact differences, ties, zeros).
template <class T> static std::vector<T> kh_grid(size_t n) {
  std::vector<T> v(n);
  for (auto &e : v) e = (T)(std::floor(hc_urand() * 17) * 0.25 - 2);
  return v;
}

template <class T> static double kh_tol() { return sizeof(T) == 8 ? 1e-14 : 5e-7; }
// Outputs the bodies assign, at kUnset (host_check.h).
template <class T> static std::vector<T> kh_unset(size_t n) { return std::vector<T>(n, (T)kUnset); }

// The engine's bodies run two ways. lanes 0: HostEng, one lane per output.
// lanes > 0 (a power of two): that many lanes per output, as a block's
// lanes share one (HostLanes): lane l walks elements l, l + lanes, ... and
// comb returns what bcomb returns, the lanes' values combined in bcomb's
// tree order. The lanes run one after another, so a comb call's value is
// known only once every lane has reached it: kh_engine replays the output
// (the arrays it writes restored first) until every call's value is known,
// and keeps the last pass. Lanes that make different numbers of comb calls
// (which would hang a block at its barrier) fail the check. After the
// outputs, a spare slot (an output index past the last, as the last tile's
// spare threads have) must leave the arrays as they were.
struct LaneRun {
  std::vector<double> known;                // the values of comb calls 0 .. known.size() - 1
  std::vector<double> pending;              // each lane's value at call known.size()
  std::vector<int> calls;                   // comb calls each lane made in this pass
  std::function<double(double, double)> op; // how call known.size() combines
};
struct HostLanes { // (__host__ __device__ as the bodies; only the host runs it)
  LaneRun *run;
  int64_t ty, nl;
  __host__ __device__ int64_t first() const { return ty; }
  __host__ __device__ int64_t step() const { return nl; }
  __host__ __device__ bool lead() const { return ty == 0; }
  template <class C> __host__ __device__ double comb(double v, C c) const {
#ifndef __CUDA_ARCH__
    const size_t j = (size_t)run->calls[(size_t)ty]++;
    if (j < run->known.size()) return run->known[j];
    if (j == run->known.size()) {
      run->pending[(size_t)ty] = v;
      run->op = c;
    }
#else
    (void)c;
#endif
    return v; // not known yet: the rest of this pass is replayed
  }
};
// An array a body writes (kh_engine restores it between passes).
struct Mut {
  void *p;
  size_t bytes;
};
template <class T> static Mut kh_mut(std::vector<T> &v) { return Mut{v.data(), v.size() * sizeof(T)}; }

// body(rd, g, o) for every output o of g, with `lanes` as above; mut: every
// array the body writes. The spare slot runs as output M - 1 of a copy of g
// with one output less (its writes, if any, land inside the arrays).
template <class F>
static void kh_engine(const Geo &g, int lanes, const std::vector<Mut> &mut, const std::string &what, F body) {
  if (lanes == 0) {
    for (int64_t o = 0; o < g.M; o++) body(kh_rd, g, o);
    return;
  }
  Geo spare = g;
  spare.M = g.M - 1;
  std::string bad;
  for (int64_t o = 0; o <= g.M && bad.empty(); o++) {
    const Geo &gg = o < g.M ? g : spare;
    const int64_t oo = o < g.M ? o : g.M - 1;
    std::vector<std::vector<unsigned char>> save;
    for (const Mut &m : mut) save.emplace_back((unsigned char *)m.p, (unsigned char *)m.p + m.bytes);
    LaneRun run;
    for (;;) {
      for (size_t k = 0; k < mut.size(); k++) std::memcpy(mut[k].p, save[k].data(), mut[k].bytes);
      run.calls.assign((size_t)lanes, 0);
      run.pending.assign((size_t)lanes, 0.0);
      for (int ty = 0; ty < lanes; ty++) body(HostLanes{&run, ty, lanes}, gg, oo);
      for (int ty = 1; ty < lanes && bad.empty(); ty++)
        if (run.calls[(size_t)ty] != run.calls[0])
          bad = "output " + std::to_string(oo) + ": lane 0 made " + std::to_string(run.calls[0]) +
                " comb calls, lane " + std::to_string(ty) + " " + std::to_string(run.calls[(size_t)ty]);
      if (!bad.empty() || (size_t)run.calls[0] <= run.known.size()) break; // every call known: this pass stands
      std::vector<double> v = run.pending;
      for (int s = lanes / 2; s > 0; s >>= 1)
        for (int t = 0; t < s; t++) v[(size_t)t] = run.op(v[(size_t)t], v[(size_t)(t + s)]);
      run.known.push_back(v[0]);
    }
    if (o == g.M && bad.empty())
      for (size_t k = 0; k < mut.size(); k++)
        if (std::memcmp(mut[k].p, save[k].data(), mut[k].bytes) != 0) bad = "a spare slot wrote to the outputs";
  }
  CHECK_MSG(bad.empty(), "%s: %s", what.c_str(), bad.c_str());
}
template <class F> static void kh_elems(int64_t n, F f) {
  for (int64_t i = 0; i < n; i++) f(i);
}
// The one-value sums' result (psum: k_psum then k_pfinal): (T)(sum / div),
// the terms added in index order here.
template <class T, class F> static T kh_psum(F f, int64_t n, double div) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += f(i);
  return (T)(s / div);
}
static Geo kh_geo(int ndim, const int64_t *shape, unsigned mask) {
  Geo g;
  const int rc = geo_make(&kh_h, "kern_host", ndim, shape, mask, &g);
  CHECK_MSG(rc == DLG_OK, "geo_make: %s", kh_h.msg);
  return g;
}
static Geo kh_geo3(int64_t outer, int64_t n, int64_t inner) {
  Geo g;
  const int rc = geo_3(&kh_h, "kern_host", outer, n, inner, &g);
  CHECK_MSG(rc == DLG_OK, "geo_3: %s", kh_h.msg);
  return g;
}
// Whether geometry g has M outputs of K elements (checked): the bodies
// would write outside the arrays otherwise, so the case stops there.
static bool kh_geo_is(const Geo &g, int64_t M, int64_t K, const char *what) {
  CHECK_MSG(g.M == M && g.K == K, "%s: geometry of %lld outputs of %lld elements, want %lld of %lld", what,
            (long long)g.M, (long long)g.K, (long long)M, (long long)K);
  return g.M == M && g.K == K;
}

// >>sum_axis ---------------------------------------------------------------------

// dl_sum_to_into's GPU branch: gx [n] += the rows of g [rows, n]
// (dlg_sum_axis outer 1, scale 1, accumulate). The CPU adds the rows in
// the dtype, one by one: at f32 its own error grows with the rows, so the
// tolerance does.
template <class T> static void sum_to_case(int64_t rows, int64_t n, int lanes) {
  const int dt = sizeof(T) == 8;
  const std::vector<T> g = hc_rand<T>((size_t)(rows * n), -1, 1), gx0 = hc_rand<T>((size_t)n, -1, 1);
  std::vector<T> want = gx0, got = gx0;
  kref_sum_to(dt, rows, n, g.data(), want.data());
  char name[120];
  snprintf(name, sizeof name, "sum_to %s [%lld, %lld] lanes %d gx +=", hc_dt(dt), (long long)rows, (long long)n,
           lanes);
  const Geo geo = kh_geo3(1, rows, n);
  if (!kh_geo_is(geo, n, rows, name)) return;
  kh_engine(geo, lanes, {kh_mut(got)}, name, [&](const auto &rd, const Geo &gg, int64_t o) {
    sum_axis_out<T>(rd, gg, o, got.data(), g.data(), 1.0, 1);
  });
  hc_close(name, got, want, dt ? 1e-14 : 1e-7 * (double)(rows + 8));
}
// dlg_sum_axis(outer, n, inner, scale 1/n, assign) against dl_t_mean over axis 1.
template <class T> static void sum_axis_mean_case(int64_t outer, int64_t n, int64_t inner, int lanes) {
  const int dt = sizeof(T) == 8;
  const int64_t shape[3] = {outer, n, inner}, M = outer * inner;
  const std::vector<T> x = hc_rand<T>((size_t)(outer * n * inner), -1, 1), tx(x.size()), gy((size_t)M);
  std::vector<T> want((size_t)M), got = kh_unset<T>((size_t)M), gx(x.size());
  kref_reduce(dt, 1, 3, shape, 2u, 0, x.data(), tx.data(), gy.data(), want.data(), nullptr, gx.data());
  char name[120];
  snprintf(name, sizeof name, "sum_axis %s [%lld, %lld, %lld] lanes %d mean", hc_dt(dt), (long long)outer,
           (long long)n, (long long)inner, lanes);
  const Geo geo = kh_geo3(outer, n, inner);
  if (!kh_geo_is(geo, M, n, name)) return;
  kh_engine(geo, lanes, {kh_mut(got)}, name, [&](const auto &rd, const Geo &gg, int64_t o) {
    sum_axis_out<T>(rd, gg, o, got.data(), x.data(), 1.0 / (double)n, 0);
  });
  hc_close(name, got, want, kh_tol<T>());
}
template <class T> static void sum_axis_cases() {
  for (int lanes = 0; lanes <= 4; lanes += 4) {
    sum_to_case<T>(37, 5, lanes);
    sum_to_case<T>(1, 9, lanes);
    sum_to_case<T>(200, 3, lanes);
    sum_axis_mean_case<T>(3, 50, 7, lanes);
    sum_axis_mean_case<T>(4, 300, 1, lanes);
    sum_axis_mean_case<T>(2, 1, 5, lanes);
  }
}
static void sum_axis_f32(void) { sum_axis_cases<float>(); }
static void sum_axis_f64(void) { sum_axis_cases<double>(); }

// >>reductions -------------------------------------------------------------------

static const char *const kh_red_names[] = {"sum", "mean", "max", "min", "var", "logsumexp"};

// Reduction `kind` (kref_reduce's: 0 sum ... 5 logsumexp) of x over mask:
// the bodies run as dlg_reduce / dlg_reduce_backward would, with the scales
// dl__t_reduce_gpu passes: y, ty (assigned), the means (var), then gx +=.
template <class T>
static void reduce_case(int kind, int ndim, const int64_t *shape, unsigned mask, double corr, const std::vector<T> &x,
                        const char *data, int lanes) {
  const int dt = sizeof(T) == 8;
  int64_t N = 1, M = 1;
  for (int d = 0; d < ndim; d++) {
    N *= shape[d];
    if (!((mask >> d) & 1u)) M *= shape[d];
  }
  const int64_t K = N / M;
  const std::vector<T> tx = hc_rand<T>((size_t)N, -1, 1), gy = hc_rand<T>((size_t)M, -1, 1),
                       gx0 = hc_rand<T>((size_t)N, -1, 1);
  std::vector<T> ry((size_t)M), rty((size_t)M), rgx = gx0;
  kref_reduce(dt, kind, ndim, shape, mask, corr, x.data(), tx.data(), gy.data(), ry.data(), rty.data(), rgx.data());
  // the kernel's kind and scales, as dl__t_reduce_gpu computes them
  const int gk = kind <= 1 ? DLG_RED_SUM : kind == 2 ? DLG_RED_MAX : kind == 3 ? DLG_RED_MIN
                 : kind == 4 ? DLG_RED_VAR : DLG_RED_LSE;
  double scale = 1.0, tscale = 1.0, denom = 0.0;
  if (kind == 1) scale = tscale = 1.0 / (double)K;
  if (kind == 4) {
    denom = (double)K - corr;
    if (denom < 0) denom = 0;
    scale = 1.0 / denom;
    tscale = 2.0 / denom;
  }
  const double bscale = kind == 4 ? 2.0 / denom : scale;
  std::vector<T> y = kh_unset<T>((size_t)M), ty = kh_unset<T>((size_t)M), gx = gx0;
  std::vector<double> mean((size_t)M, 777.0);
  std::string nm = std::string(kh_red_names[kind]) + " " + hc_dt(dt) + " shape [";
  for (int d = 0; d < ndim; d++) nm += (d ? ", " : "") + std::to_string(shape[d]);
  nm += "] mask " + std::to_string(mask) + " " + data;
  if (kind == 4) nm += " correction " + std::to_string(corr);
  nm += " lanes " + std::to_string(lanes);
  const Geo g = kh_geo(ndim, shape, mask);
  if (!kh_geo_is(g, M, K, nm.c_str())) return;
  kh_engine(g, lanes, {kh_mut(y), kh_mut(ty), kh_mut(mean)}, nm, [&](const auto &rd, const Geo &gg, int64_t o) {
    reduce_out<T>(rd, gg, o, gk, x.data(), y.data(), gk == DLG_RED_VAR ? mean.data() : nullptr, scale, tx.data(),
                  ty.data(), tscale);
  });
  kh_engine(g, lanes, {kh_mut(gx)}, nm, [&](const auto &rd, const Geo &gg, int64_t o) {
    reduce_bw_out<T>(rd, gg, o, gk, gx.data(), x.data(), y.data(), gy.data(),
                     gk == DLG_RED_VAR ? mean.data() : nullptr, bscale);
  });
  if (kind == 2 || kind == 3) hc_bits(nm + " y", y, ry); // the maximum is an element: exact
  else hc_close(nm + " y", y, ry, kh_tol<T>());
  hc_close(nm + " ty", ty, rty, kh_tol<T>());
  hc_close(nm + " gx +=", gx, rgx, kh_tol<T>());
}

template <class T> static void reduce_kind(int kind, int lanes) {
  struct Case {
    int ndim;
    int64_t shape[4];
    unsigned mask;
  };
  static const Case cases[] = {{3, {5, 6, 7}, 1u},    {3, {5, 6, 7}, 2u},     {3, {5, 6, 7}, 4u},
                               {3, {5, 6, 7}, 3u},    {3, {5, 6, 7}, 5u},     {3, {5, 6, 7}, 6u},
                               {3, {5, 6, 7}, 7u},    {4, {2, 1, 3, 4}, 5u},  {4, {2, 1, 3, 4}, 10u},
                               {4, {2, 1, 3, 4}, 2u}, {4, {3, 4, 1, 5}, 12u}, {1, {300}, 1u},
                               {2, {4, 1000}, 2u},    {2, {4, 1000}, 1u},     {2, {257, 3}, 1u},
                               {0, {1}, 0u},          {2, {1, 1}, 3u}};
  for (const Case &c : cases) {
    int64_t N = 1;
    for (int d = 0; d < c.ndim; d++) N *= c.shape[d];
    std::vector<T> x;
    const char *data;
    if (kind == 2 || kind == 3) { // ties
      x = std::vector<T>((size_t)N);
      for (auto &e : x) e = (T)std::floor(hc_urand() * 4) - 1;
      data = "ties";
    } else if (kind == 4) {
      x = hc_rand<T>((size_t)N, 2, 4);
      data = "[2, 4)";
    } else {
      x = hc_rand<T>((size_t)N, -2, 2);
      data = "[-2, 2)";
    }
    if (kind == 4) {
      reduce_case<T>(kind, c.ndim, c.shape, c.mask, 1.0, x, data, lanes);
      reduce_case<T>(kind, c.ndim, c.shape, c.mask, 0.0, x, data, lanes);
    } else {
      reduce_case<T>(kind, c.ndim, c.shape, c.mask, 0.0, x, data, lanes);
    }
  }
  const int64_t sh[2] = {6, 40};
  if (kind == 2 || kind == 3) { // NaN propagates; a NaN output's tangent and gradient
    std::vector<T> x((size_t)240);
    for (auto &e : x) e = hc_urand() < 0.03 ? (T)NAN : (T)std::floor(hc_urand() * 4) - 1;
    reduce_case<T>(kind, 2, sh, 2u, 0, x, "ties and NaN", lanes);
    reduce_case<T>(kind, 2, sh, 1u, 0, x, "ties and NaN", lanes);
  }
  if (kind == 5) { // rows of -inf (m taken as 0), +inf, large values
    std::vector<T> x = hc_rand<T>(240, -3, 3);
    for (int j = 0; j < 40; j++) x[(size_t)(40 + j)] = -(T)INFINITY;
    x[(size_t)(2 * 40 + 7)] = (T)INFINITY;
    for (int j = 0; j < 40; j++) x[(size_t)(3 * 40 + j)] = (T)(1e4 * (hc_urand() - 0.5));
    for (int j = 0; j < 40; j++)
      if (hc_urand() < 0.3) x[(size_t)(4 * 40 + j)] = -(T)INFINITY;
    reduce_case<T>(kind, 2, sh, 2u, 0, x, "-inf, inf, +-5e3", lanes);
  }
}
template <class T> static void reductions() {
  for (int kind = 0; kind < 6; kind++)
    for (int lanes = 0; lanes <= 4; lanes += 4) reduce_kind<T>(kind, lanes);
}
static void reductions_f32(void) { reductions<float>(); }
static void reductions_f64(void) { reductions<double>(); }

// >>softmax ----------------------------------------------------------------------

// softmax / log_softmax of x [outer, n, inner] along n: the bodies run as
// dl__t_softmax's GPU branch: dlg_softmax (y assigned), then the tangent
// through dlg_softmax_backward (kind 0 softmax, 2 log_softmax) into a zeroed
// ty, and the backward (kind 0, 1) into gx (+=).
template <class T>
static void softmax_case(int logsm, int64_t outer, int64_t n, int64_t inner, const std::vector<T> &x,
                         const char *data, int lanes) {
  const int dt = sizeof(T) == 8;
  const int64_t N = outer * n * inner;
  const std::vector<T> tx = hc_rand<T>((size_t)N, -1, 1), gy = hc_rand<T>((size_t)N, -1, 1),
                       gx0 = hc_rand<T>((size_t)N, -1, 1);
  std::vector<T> ry((size_t)N), rty((size_t)N), rgx = gx0;
  kref_softmax(dt, logsm, outer, n, inner, x.data(), tx.data(), gy.data(), ry.data(), rty.data(), rgx.data());
  std::vector<T> y = kh_unset<T>((size_t)N), ty((size_t)N, (T)0), gx = gx0;
  char name[160];
  snprintf(name, sizeof name, "%s %s [%lld, %lld, %lld] %s lanes %d", logsm ? "log_softmax" : "softmax",
           hc_dt(dt), (long long)outer, (long long)n, (long long)inner, data, lanes);
  const std::string nm(name);
  const Geo g = kh_geo3(outer, n, inner);
  if (!kh_geo_is(g, outer * inner, n, name)) return;
  kh_engine(g, lanes, {kh_mut(y)}, nm,
            [&](const auto &rd, const Geo &gg, int64_t o) { softmax_out<T>(rd, gg, o, x.data(), y.data(), logsm); });
  kh_engine(g, lanes, {kh_mut(ty)}, nm, [&](const auto &rd, const Geo &gg, int64_t o) {
    softmax_bw_out<T>(rd, gg, o, logsm ? 2 : 0, y.data(), tx.data(), ty.data());
  });
  kh_engine(g, lanes, {kh_mut(gx)}, nm, [&](const auto &rd, const Geo &gg, int64_t o) {
    softmax_bw_out<T>(rd, gg, o, logsm ? 1 : 0, y.data(), gy.data(), gx.data());
  });
  hc_close(nm + " y", y, ry, kh_tol<T>());
  hc_close(nm + " ty", ty, rty, kh_tol<T>());
  hc_close(nm + " gx +=", gx, rgx, kh_tol<T>());
}
template <class T> static void softmaxes(int logsm, int lanes) {
  static const int64_t shapes[][3] = {{4, 10, 1}, {3, 7, 5}, {2, 100, 1}, {1, 1, 1}, {2, 3, 40}, {1, 65, 3}};
  for (const auto &s : shapes)
    softmax_case<T>(logsm, s[0], s[1], s[2], hc_rand<T>((size_t)(s[0] * s[1] * s[2]), -4, 4), "[-4, 4)", lanes);
  // rows of +-1e4, some -inf entries, one row all -inf (NaN), in the long-row and the column form
  std::vector<T> x = hc_rand<T>(5 * 70, -1e4, 1e4);
  for (auto &e : x)
    if (hc_urand() < 0.05) e = -(T)INFINITY;
  for (int j = 0; j < 70; j++) x[(size_t)(2 * 70 + j)] = -(T)INFINITY;
  softmax_case<T>(logsm, 5, 70, 1, x, "+-1e4, -inf", lanes);
  softmax_case<T>(logsm, 1, 70, 5, x, "+-1e4, -inf", lanes);
}
template <class T> static void softmaxes(int logsm) {
  softmaxes<T>(logsm, 0);
  softmaxes<T>(logsm, 4);
}
static void softmax_f32(void) { softmaxes<float>(0); }
static void softmax_f64(void) { softmaxes<double>(0); }
static void log_softmax_f32(void) { softmaxes<float>(1); }
static void log_softmax_f64(void) { softmaxes<double>(1); }

// >>element-wise losses ----------------------------------------------------------

static const char *const kh_red_r[] = {"mean", "sum", "none"};

// One element-wise loss (kref_loss_ew's kind: 0 mse, 1 bce, 2 huber,
// 3 smooth_l1 (p 0: L1)) with reduction r; variant 0: tangents of a and b,
// gradients into a and b; 1: a's tangent, a's gradient; 2: b's. The bodies
// run as dl__loss_ew_gpu and dl__loss_ew_bw would call dlg_loss_ew,
// dlg_loss_ew_tangent and dlg_loss_ew_backward.
template <class T> static void loss_case(int kind, double p, int r, int64_t n, int variant) {
  const int dt = sizeof(T) == 8;
  const int none = r == 2;
  const int64_t ny = none ? n : 1;
  const double div = r == 0 ? (double)n : 1.0;
  std::vector<T> a, b;
  if (kind == 1) { // logits (some large), targets in [0, 1]
    a = hc_rand<T>((size_t)n, -6, 6);
    for (auto &e : a)
      if (hc_urand() < 0.1) e = (T)(60 * (hc_urand() - 0.5));
    b = hc_rand<T>((size_t)n, 0, 1);
  } else { // half on a grid (|d| == p, d == 0 happen), half uniform
    a = kh_grid<T>((size_t)n);
    b = kh_grid<T>((size_t)n);
    for (int64_t i = 0; i < n; i += 2) {
      a[(size_t)i] = (T)(6 * hc_urand() - 3);
      b[(size_t)i] = (T)(6 * hc_urand() - 3);
    }
  }
  const std::vector<T> ta = hc_rand<T>((size_t)n, -1, 1), tb = hc_rand<T>((size_t)n, -1, 1),
                       gy = hc_rand<T>((size_t)ny, -1, 1), ga0 = hc_rand<T>((size_t)n, -1, 1),
                       gb0 = hc_rand<T>((size_t)n, -1, 1);
  const bool wa = variant != 2, wb = variant != 1;
  std::vector<T> ry((size_t)ny), rty((size_t)ny), rga = ga0, rgb = gb0;
  kref_loss_ew(dt, kind, p, r, n, a.data(), b.data(), wa ? ta.data() : nullptr, wb ? tb.data() : nullptr,
               gy.data(), ry.data(), rty.data(), wa ? rga.data() : nullptr, wb ? rgb.data() : nullptr);
  // the kernel's arguments
  const int gk = kind == 3 && p == 0 ? DLG_LOSS_L1 : kind;
  LossArgs<T> A = {gk, a.data(), b.data(), nullptr, nullptr, (T)p};
  std::vector<T> y = kh_unset<T>((size_t)ny), ty = kh_unset<T>((size_t)ny), ga = ga0, gb = gb0;
  if (none) kh_elems(n, [&](int64_t i) { loss_none_at(A, 0, y.data(), i); });
  else y[0] = kh_psum<T>(FLoss<T>{A, 0}, n, div);
  A.ta = wa ? ta.data() : nullptr;
  A.tb = wb ? tb.data() : nullptr;
  if (none) kh_elems(n, [&](int64_t i) { loss_none_at(A, 1, ty.data(), i); });
  else ty[0] = kh_psum<T>(FLoss<T>{A, 1}, n, div);
  A.ta = A.tb = nullptr;
  const T gsc = (T)(r == 0 ? 1.0 / (double)n : 1.0);
  kh_elems(n, [&](int64_t i) {
    loss_bw_at(A, gy.data(), none ? 1 : 0, gsc, wa ? ga.data() : (T *)nullptr, wb ? gb.data() : (T *)nullptr, i);
  });
  static const char *const names[] = {"mse", "bce_with_logits", "huber", "smooth_l1"};
  char name[160];
  snprintf(name, sizeof name, "%s %s p %g %s n %lld variant %d", gk == DLG_LOSS_L1 ? "l1" : names[kind], hc_dt(dt),
           p, kh_red_r[r], (long long)n, variant);
  const std::string nm(name);
  hc_close(nm + " y", y, ry, kh_tol<T>());
  hc_close(nm + " ty", ty, rty, kh_tol<T>());
  if (wa) hc_close(nm + " ga +=", ga, rga, kh_tol<T>());
  if (wb) hc_close(nm + " gb +=", gb, rgb, kh_tol<T>());
}
template <class T> static void losses() {
  static const struct {
    int kind;
    double p;
  } ks[] = {{0, 0}, {1, 0}, {2, 1.0}, {2, 0.5}, {3, 0.75}, {3, 1.0}, {3, 0}};
  for (const auto &k : ks)
    for (int r = 0; r < 3; r++)
      for (int v = 0; v < 3; v++) loss_case<T>(k.kind, k.p, r, v == 0 ? 301 : 37, v);
}
static void losses_ew_f32(void) { losses<float>(); }
static void losses_ew_f64(void) { losses<double>(); }

// >>cross entropy, nll -----------------------------------------------------------

// dl_t_cross_entropy of x [N, C], smoothing eps, reduction r, as
// dl__cross_entropy_gpu and its backward call the kernels: ce_out per row
// (prob, the row values), ce_tan_out per row from that prob, ce_bw_at.
template <class T> static void ce_case(int64_t N, int64_t C, double eps, int r, double span, int lanes) {
  const int dt = sizeof(T) == 8;
  const int none = r == 2;
  const int64_t ny = none ? N : 1;
  const double div = r == 0 ? (double)N : 1.0;
  const std::vector<T> x = hc_rand<T>((size_t)(N * C), -span, span), tx = hc_rand<T>((size_t)(N * C), -1, 1),
                       gy = hc_rand<T>((size_t)ny, -1, 1), gx0 = hc_rand<T>((size_t)(N * C), -1, 1);
  std::vector<int64_t> lab((size_t)N);
  for (auto &l : lab) l = (int64_t)(hc_urand() * (double)C);
  std::vector<T> rprob((size_t)(N * C)), ry((size_t)ny), rty((size_t)ny), rgx = gx0;
  kref_ce(dt, N, C, x.data(), lab.data(), eps, r, tx.data(), gy.data(), rprob.data(), ry.data(), rty.data(),
          rgx.data());
  std::vector<T> prob = kh_unset<T>((size_t)(N * C)), y = kh_unset<T>((size_t)ny), ty = kh_unset<T>((size_t)ny),
                 gx = gx0;
  std::vector<double> rowv((size_t)N, 777.0);
  char name[160];
  snprintf(name, sizeof name, "cross_entropy %s [%lld, %lld] eps %g %s logits +-%g lanes %d", hc_dt(dt),
           (long long)N, (long long)C, eps, kh_red_r[r], span, lanes);
  const std::string nm(name);
  const int64_t shape[2] = {N, C};
  const Geo g = kh_geo(2, shape, 2u);
  if (!kh_geo_is(g, N, C, name)) return;
  kh_engine(g, lanes, {kh_mut(prob), kh_mut(y), kh_mut(rowv)}, nm, [&](const auto &rd, const Geo &gg, int64_t o) {
    ce_out<T>(rd, gg, o, C, x.data(), lab.data(), eps, prob.data(), none ? y.data() : nullptr, rowv.data());
  });
  if (!none) y[0] = kh_psum<T>(FRead{rowv.data()}, N, div);
  std::fill(rowv.begin(), rowv.end(), 777.0);
  kh_engine(g, lanes, {kh_mut(ty), kh_mut(rowv)}, nm, [&](const auto &rd, const Geo &gg, int64_t o) {
    ce_tan_out<T>(rd, gg, o, C, prob.data(), lab.data(), eps, tx.data(), none ? ty.data() : nullptr, rowv.data());
  });
  if (!none) ty[0] = kh_psum<T>(FRead{rowv.data()}, N, div);
  const T keep = (T)(1.0 - eps), eoc = (T)(eps / (double)C), gsc = (T)(r == 0 ? 1.0 / (double)N : 1.0);
  kh_elems(N * C, [&](int64_t k) {
    ce_bw_at(C, prob.data(), lab.data(), keep, eoc, gy.data(), none ? 1 : 0, gsc, gx.data(), k);
  });
  hc_close(nm + " prob", prob, rprob, kh_tol<T>());
  hc_close(nm + " y", y, ry, kh_tol<T>());
  // the CPU sums a row's tangent in the dtype (the kernel in double): at f32
  // its error grows with C
  hc_close(nm + " ty", ty, rty, dt ? 1e-14 : 1e-7 * (double)(C + 8));
  hc_close(nm + " gx +=", gx, rgx, kh_tol<T>());
}
template <class T> static void cross_entropy() {
  static const struct {
    int64_t N, C;
    double eps, span;
  } cs[] = {{5, 7, 0, 4}, {6, 10, 0.1, 4}, {3, 300, 0.2, 6}, {70, 4, 1.0, 3}, {2, 1, 0.3, 2}, {9, 33, 0.05, 1e4}};
  for (const auto &c : cs)
    for (int r = 0; r < 3; r++)
      for (int lanes = 0; lanes <= 4; lanes += 4) ce_case<T>(c.N, c.C, c.eps, r, c.span, lanes);
}
static void cross_entropy_f32(void) { cross_entropy<float>(); }
static void cross_entropy_f64(void) { cross_entropy<double>(); }

// dl_t_nll of x [N, C] (contiguous, or the transposed view of a [C, N]
// buffer: strides 1, N), reduction r: nll_at per row for the value and the
// tangent (same strides), nll_bw_at (contiguous gx) for the backward.
template <class T> static void nll_case(int64_t N, int64_t C, int transposed, int r) {
  const int dt = sizeof(T) == 8;
  const int none = r == 2;
  const int64_t ny = none ? N : 1, s0 = transposed ? 1 : C, s1 = transposed ? N : 1;
  const double div = r == 0 ? (double)N : 1.0;
  const std::vector<T> x = hc_rand<T>((size_t)(N * C), -5, 0), tx = hc_rand<T>((size_t)(N * C), -1, 1),
                       gy = hc_rand<T>((size_t)ny, -1, 1), gx0 = hc_rand<T>((size_t)(N * C), -1, 1);
  std::vector<int64_t> lab((size_t)N);
  for (auto &l : lab) l = (int64_t)(hc_urand() * (double)C);
  std::vector<T> ry((size_t)ny), rty((size_t)ny), rgx = gx0;
  kref_nll(dt, N, C, transposed, x.data(), lab.data(), r, tx.data(), gy.data(), ry.data(), rty.data(),
           transposed ? nullptr : rgx.data());
  std::vector<T> y = kh_unset<T>((size_t)ny), ty = kh_unset<T>((size_t)ny), gx = gx0;
  std::vector<double> rowv((size_t)N, 777.0);
  kh_elems(N, [&](int64_t i) { nll_at(C, x.data(), s0, s1, lab.data(), none ? y.data() : nullptr, rowv.data(), i); });
  if (!none) y[0] = kh_psum<T>(FRead{rowv.data()}, N, div);
  kh_elems(N, [&](int64_t i) { nll_at(C, tx.data(), s0, s1, lab.data(), none ? ty.data() : nullptr, rowv.data(), i); });
  if (!none) ty[0] = kh_psum<T>(FRead{rowv.data()}, N, div);
  char name[160];
  snprintf(name, sizeof name, "nll %s [%lld, %lld]%s %s", hc_dt(dt), (long long)N, (long long)C,
           transposed ? " transposed" : "", kh_red_r[r]);
  const std::string nm(name);
  if (none) {
    hc_bits(nm + " y", y, ry);
    hc_bits(nm + " ty", ty, rty);
  } else {
    hc_close(nm + " y", y, ry, kh_tol<T>());
    hc_close(nm + " ty", ty, rty, kh_tol<T>());
  }
  if (!transposed) {
    const T f = (T)(r == 0 ? 1.0 / (double)N : 1.0);
    kh_elems(N, [&](int64_t i) { nll_bw_at(C, lab.data(), gy.data(), none ? 1 : 0, f, gx.data(), i); });
    hc_bits(nm + " gx +=", gx, rgx);
  }
}
template <class T> static void nlls() {
  for (int r = 0; r < 3; r++)
    for (int tr = 0; tr < 2; tr++) {
      nll_case<T>(6, 5, tr, r);
      nll_case<T>(40, 3, tr, r);
    }
}
static void nll_f32(void) { nlls<float>(); }
static void nll_f64(void) { nlls<double>(); }

// >>embedding, rows scatter ------------------------------------------------------

// dlg_rows_scatter's work on the host: its plan (scatter_plan), then
// scatter_at over every column of every group.
template <class T>
static void kh_scatter(T *dst, int64_t nrows, int64_t D, const int64_t *key, int64_t n, const T *src) {
  if (n == 0 || D == 0) return;
  std::vector<int64_t> all;
  const int64_t ng = scatter_plan(key, n, nrows, all);
  if (ng == 0) return;
  const int64_t *d = all.data();
  kh_elems(ng * D, [&](int64_t k) { scatter_at(dst, D, d, d + ng, d + 2 * ng + 1, src, k); });
}

// dl_t_embedding's forward and tangent (gather_at) for a weight [V, D] in
// layout 0 (contiguous), 1 (the first D columns of [V, D + 3]), 2 (the
// transpose of [D, V]).
template <class T> static void embedding_fwd_case(int layout) {
  const int dt = sizeof(T) == 8;
  const int64_t V = 11, D = 6, n = 17, nw = layout == 1 ? V * (D + 3) : V * D;
  const int64_t s0 = layout == 0 ? D : layout == 1 ? D + 3 : 1, s1 = layout == 2 ? V : 1;
  const std::vector<T> w = hc_rand<T>((size_t)nw, -1, 1), tw = hc_rand<T>((size_t)nw, -1, 1);
  std::vector<int64_t> idx((size_t)n);
  for (auto &r : idx) r = (int64_t)(hc_urand() * (double)V);
  idx[3] = idx[9] = V - 1;
  idx[4] = 0;
  std::vector<T> ry((size_t)(n * D)), rty((size_t)(n * D));
  kref_embedding(dt, V, D, layout, w.data(), tw.data(), idx.data(), n, ry.data(), rty.data());
  std::vector<T> y = kh_unset<T>((size_t)(n * D)), ty = kh_unset<T>((size_t)(n * D));
  kh_elems(n * D, [&](int64_t k) { gather_at(y.data(), w.data(), s0, s1, V, D, idx.data(), k); });
  kh_elems(n * D, [&](int64_t k) { gather_at(ty.data(), tw.data(), s0, s1, V, D, idx.data(), k); });
  const std::string nm = std::string("embedding ") + hc_dt(dt) + " layout " + std::to_string(layout);
  hc_bits(nm + " y", y, ry);
  hc_bits(nm + " ty", ty, rty);
  // an index out of range gives zeros (dl/gpu/sparse.h: the kernel stays inside w)
  int64_t bad[2] = {-1, V};
  std::vector<T> z = kh_unset<T>((size_t)(2 * D));
  kh_elems(2 * D, [&](int64_t k) { gather_at(z.data(), w.data(), s0, s1, V, D, bad, k); });
  hc_bits(nm + " rows out of range", z, std::vector<T>((size_t)(2 * D), (T)0));
}

// The embedding's backward through dlg_rows_scatter, as sparse.h's GPU
// branch does it: a leaf weight's row-sparse gradient over two backward
// passes (new rows appended in first-touch order, zeroed, then the indices'
// slots scattered into the values), dl_sgrad_add_to into a dense base
// (key = the rows), and the dense gradient of a weight that is an op's
// output (key = the indices, from zero).
template <class T> static void scatter_cases() {
  const int dt = sizeof(T) == 8;
  const int64_t V = 13, D = 5, n1 = 40, n2 = 25;
  std::vector<int64_t> i1((size_t)n1), i2((size_t)n2);
  for (auto &r : i1) r = (int64_t)(hc_urand() * 6) * 2; // even rows, many repeats
  for (auto &r : i2) r = (int64_t)(hc_urand() * (double)V);
  const std::vector<T> gy1 = hc_rand<T>((size_t)(n1 * D), -1, 1), gy2 = hc_rand<T>((size_t)(n2 * D), -1, 1),
                       base = hc_rand<T>((size_t)(V * D), -1, 1);
  std::vector<int64_t> rrows((size_t)V);
  std::vector<T> rvals((size_t)(V * D)), rdense = base;
  const int64_t rnnz = kref_embedding_sparse(dt, V, D, i1.data(), n1, gy1.data(), i2.data(), n2, gy2.data(),
                                             rrows.data(), rvals.data(), rdense.data());
  rrows.resize((size_t)rnnz);
  rvals.resize((size_t)(rnnz * D));
  // the device path: slots by first touch (dl__sgrad_touch_gpu), then the scatter
  std::vector<int64_t> slot((size_t)V, -1), rows;
  std::vector<T> vals;
  for (int pass = 0; pass < 2; pass++) {
    const std::vector<int64_t> &ix = pass ? i2 : i1;
    std::vector<int64_t> slots(ix.size());
    for (size_t i = 0; i < ix.size(); i++) {
      if (slot[(size_t)ix[i]] < 0) {
        slot[(size_t)ix[i]] = (int64_t)rows.size();
        rows.push_back(ix[i]);
        vals.resize(rows.size() * (size_t)D, (T)0);
      }
      slots[i] = slot[(size_t)ix[i]];
    }
    kh_scatter(vals.data(), (int64_t)rows.size(), D, slots.data(), (int64_t)ix.size(), (pass ? gy2 : gy1).data());
  }
  const std::string nm = std::string("rows scatter ") + hc_dt(dt);
  CHECK_MSG(rows == rrows, "%s: the touched rows differ from the CPU's (%zu vs %zu)", nm.c_str(), rows.size(),
            rrows.size());
  hc_bits(nm + " sparse values (two passes)", vals, rvals);
  std::vector<T> dense = base;
  kh_scatter(dense.data(), V, D, rrows.data(), rnnz, rvals.data());
  hc_bits(nm + " dl_sgrad_add_to", dense, rdense);
  // keys outside [0, nrows) are skipped
  std::vector<int64_t> k2 = rrows;
  std::vector<T> v2 = rvals;
  k2.insert(k2.begin() + 1, -1);
  k2.push_back(V);
  v2.insert(v2.begin() + D, (size_t)D, (T)100);
  v2.insert(v2.end(), (size_t)D, (T)100);
  dense = base;
  kh_scatter(dense.data(), V, D, k2.data(), (int64_t)k2.size(), v2.data());
  hc_bits(nm + " keys out of range skipped", dense, rdense);
  // a weight that is an op's output: dense gradient, from zero
  std::vector<T> rgw((size_t)(V * D)), gw((size_t)(V * D), (T)0);
  kref_embedding_dense(dt, V, D, i2.data(), n2, gy2.data(), rgw.data());
  kh_scatter(gw.data(), V, D, i2.data(), n2, gy2.data());
  hc_bits(nm + " dense gradient", gw, rgw);
}
template <class T> static void embeddings() {
  for (int layout = 0; layout < 3; layout++) embedding_fwd_case<T>(layout);
  scatter_cases<T>();
}
static void embedding_f32(void) { embeddings<float>(); }
static void embedding_f64(void) { embeddings<double>(); }

// >>dropout ----------------------------------------------------------------------

// dl_t_dropout(p) of x [n] with the rng of seed after skip draws: dropout_at
// (mask, y) with dlg_dropout's arguments, dropout_apply_at for the tangent
// (assigned) and the backward (+=), all bit for bit.
template <class T> static void dropout_case(double p, uint64_t seed, uint64_t skip) {
  const int dt = sizeof(T) == 8;
  const int64_t n = 1000;
  std::vector<T> x = hc_rand<T>((size_t)n, -2, 2);
  x[5] = (T)INFINITY; // a dropped inf gives NaN, as the CPU
  x[6] = -(T)INFINITY;
  const std::vector<T> tx = hc_rand<T>((size_t)n, -1, 1), gy = hc_rand<T>((size_t)n, -1, 1),
                       gx0 = hc_rand<T>((size_t)n, -1, 1);
  std::vector<unsigned char> rmask((size_t)n);
  std::vector<T> ry((size_t)n), rty((size_t)n), rgx = gx0;
  uint64_t key, base, thr;
  double scale;
  kref_dropout(dt, n, p, seed, skip, x.data(), tx.data(), gy.data(), rmask.data(), ry.data(), rty.data(),
               rgx.data(), &key, &base, &thr, &scale);
  std::vector<unsigned char> mask((size_t)n, 7);
  std::vector<T> y = kh_unset<T>((size_t)n), ty = kh_unset<T>((size_t)n), gx = gx0;
  const T s = (T)scale;
  kh_elems(n, [&](int64_t i) { dropout_at(x.data(), y.data(), mask.data(), key, base, thr, s, i); });
  kh_elems(n, [&](int64_t i) { dropout_apply_at(ty.data(), tx.data(), mask.data(), s, 0, i); });
  kh_elems(n, [&](int64_t i) { dropout_apply_at(gx.data(), gy.data(), mask.data(), s, 1, i); });
  char name[120];
  snprintf(name, sizeof name, "dropout %s p %g seed %llu skip %llu", hc_dt(dt), p, (unsigned long long)seed,
           (unsigned long long)skip);
  const std::string nm(name);
  int kept = 0;
  for (const unsigned char k : rmask) kept += k;
  CHECK_MSG(p == 1.0 ? kept == 0 : kept > 0 && kept < n, "%s: the CPU kept %d of %lld", nm.c_str(), kept,
            (long long)n);
  hc_bits(nm + " mask", mask, rmask);
  hc_bits(nm + " y", y, ry);
  hc_bits(nm + " ty", ty, rty);
  hc_bits(nm + " gx +=", gx, rgx);
}
template <class T> static void dropouts() {
  dropout_case<T>(0.1, 1, 0);
  dropout_case<T>(0.5, 12345, 777);
  dropout_case<T>(0.9, 99, 1ull << 40);
  dropout_case<T>(1.0, 5, 3);
}
static void dropout_f32(void) { dropouts<float>(); }
static void dropout_f64(void) { dropouts<double>(); }

// >>optimizers -------------------------------------------------------------------

// kern_ref.c's hp[] per optimizer (its ref_cfg comment) and what state each uses.
struct OptCase {
  int opt;
  double hp[8];
};
static const OptCase kh_opt_cases[] = {
    // SGD: lr, momentum, dampening, weight_decay, nesterov, maximize
    {0, {0.1, 0, 0, 0, 0, 0}},
    {0, {0.05, 0.9, 0.1, 0.01, 0, 0}},
    {0, {0.05, 0.9, 0, 0.01, 1, 0}},
    {0, {0.1, 0.5, 0, 0, 0, 1}},
    {0, {0.1, 0, 0, 0.02, 0, 1}},
    // Adam: lr, beta1, beta2, eps, weight_decay, amsgrad, decoupled, maximize
    {1, {1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0}},
    {1, {1e-2, 0.9, 0.99, 1e-6, 0.1, 0, 1, 0}},
    {1, {1e-2, 0.8, 0.95, 1e-8, 0.05, 1, 0, 1}},
    {1, {3e-3, 0.9, 0.999, 1e-8, 0.01, 1, 1, 0}},
    // RMSprop: lr, alpha, eps, weight_decay, momentum, centered, maximize
    {2, {1e-2, 0.99, 1e-8, 0, 0, 0, 0}},
    {2, {1e-2, 0.9, 1e-6, 0.01, 0, 1, 0}},
    {2, {1e-2, 0.9, 1e-8, 0, 0.9, 0, 0}},
    {2, {1e-2, 0.95, 1e-8, 0.01, 0.5, 1, 1}},
    // Adagrad: lr, lr_decay, weight_decay, eps, maximize (sum starts at 0.1)
    {3, {0.1, 0, 0, 1e-10, 0}},
    {3, {0.05, 0.01, 0.01, 1e-8, 1}},
    // Lion: lr, beta1, beta2, weight_decay
    {4, {1e-3, 0.9, 0.99, 0}},
    {4, {3e-3, 0.95, 0.98, 0.1}},
};
static const char *const kh_opt_names[] = {"sgd", "adam", "rmsprop", "adagrad", "lion"};
// Which of the three state slots the case uses (kref_optim's s0, s1, s2).
static void kh_opt_state(const OptCase &c, bool use[3]) {
  use[0] = use[1] = use[2] = false;
  switch (c.opt) {
    case 0: use[0] = c.hp[1] != 0; break;
    case 1: use[0] = use[1] = true; use[2] = c.hp[5] != 0; break;
    case 2: use[0] = true; use[1] = c.hp[5] != 0; use[2] = c.hp[4] > 0; break;
    default: use[0] = true; break;
  }
}

// The update's kernel body over n elements (rows == NULL: dense; else the
// row-sparse form of width w), with the scalars k[] of the C side (kern_ref.c's
// ref_kargs) rounded to the dtype as the dlg_*_update entry points do.
template <class T>
static void kh_opt_apply(const OptCase &c, const double *k, int64_t n, int64_t w, const int64_t *rows, T *p,
                         const T *g, T *s0, T *s1, T *s2) {
  switch (c.opt) {
    case 0: {
      const int use_buf = k[2] != 0; // dlg_sgd_update: momentum != 0
      kh_elems(n, [&](int64_t i) {
        sgd_at(w, rows, p, g, s0, (T)k[0], (T)k[1], (T)k[2], (T)k[3], (T)k[4], use_buf, (int)k[5], (int)c.hp[4], i);
      });
      break;
    }
    case 1:
      kh_elems(n, [&](int64_t i) {
        adam_at(w, rows, p, g, s0, s1, s2, (T)k[0], (T)k[1], (T)k[2], (T)k[3], (T)k[4], (T)k[5], (T)k[6], (T)k[7],
                (T)k[8], (T)k[9], i);
      });
      break;
    case 2:
      kh_elems(n, [&](int64_t i) {
        rmsprop_at(w, rows, p, g, s0, s1, s2, (T)k[0], (T)k[1], (T)k[2], (T)k[3], (T)k[4], (T)k[5], (T)k[6], i);
      });
      break;
    case 3:
      kh_elems(n, [&](int64_t i) { adagrad_at(w, rows, p, g, s0, (T)k[0], (T)k[1], (T)k[2], (T)k[3], i); });
      break;
    default:
      kh_elems(n, [&](int64_t i) {
        lion_at(w, rows, p, g, s0, (T)k[0], (T)k[1], (T)k[2], (T)k[3], (T)k[4], (T)k[5], i);
      });
      break;
  }
}

// Three dense steps (n elements) or three row-sparse steps (parameter
// [V, w], different touched rows each step), each checked bit for bit:
// the parameter and every state the update uses.
template <class T> static void optim_case(const OptCase &c, bool sparse) {
  const int dt = sizeof(T) == 8;
  const int64_t V = 9, w = 5, n = sparse ? V * w : 37;
  static const int64_t steprows[3][4] = {{3, 0, 7, -1}, {7, 8, 1, 3}, {2, 5, -1, -1}};
  bool use[3];
  kh_opt_state(c, use);
  std::vector<T> p = hc_rand<T>((size_t)n, -1, 1), st[3];
  for (int q = 0; q < 3; q++)
    st[q] = use[q] ? std::vector<T>((size_t)n, (T)(c.opt == 3 ? 0.1 : 0.0)) : std::vector<T>();
  std::vector<T> rp = p, rst[3] = {st[0], st[1], st[2]};
  char name[200];
  snprintf(name, sizeof name, "%s %s%s hp {%g, %g, %g, %g, %g, %g, %g, %g}", kh_opt_names[c.opt], hc_dt(dt),
           sparse ? " row-sparse" : "", c.hp[0], c.hp[1], c.hp[2], c.hp[3], c.hp[4], c.hp[5], c.hp[6], c.hp[7]);
  for (int64_t step = 1; step <= 3; step++) {
    std::vector<int64_t> rows;
    if (sparse)
      for (int j = 0; j < 4; j++)
        if (steprows[step - 1][j] >= 0) rows.push_back(steprows[step - 1][j]);
    const int64_t ng = sparse ? (int64_t)rows.size() * w : n;
    std::vector<T> g = hc_rand<T>((size_t)ng, -1, 1);
    if (step == 2 && ng > 2) g[1] = (T)0; // a zero gradient (Lion's sign 0)
    double k[10];
    auto sp = [](std::vector<T> &v) { return v.empty() ? (T *)nullptr : v.data(); };
    if (sparse)
      kref_optim_sparse(dt, c.opt, c.hp, step, V, w, rows.data(), (int64_t)rows.size(), rp.data(), g.data(),
                        sp(rst[0]), sp(rst[1]), sp(rst[2]), k);
    else
      kref_optim(dt, c.opt, c.hp, step, n, rp.data(), g.data(), sp(rst[0]), sp(rst[1]), sp(rst[2]), k);
    kh_opt_apply<T>(c, k, ng, sparse ? w : 0, sparse ? rows.data() : nullptr, p.data(), g.data(), sp(st[0]),
                    sp(st[1]), sp(st[2]));
    const std::string nm = std::string(name) + " step " + std::to_string(step);
    hc_bits(nm + " p", p, rp);
    for (int q = 0; q < 3; q++)
      if (use[q]) hc_bits(nm + " state " + std::to_string(q), st[q], rst[q]);
  }
}
template <class T> static void optimizers() {
  for (const OptCase &c : kh_opt_cases) {
    optim_case<T>(c, false);
    optim_case<T>(c, true);
  }
}
// LAMB: lamb_mv_at over the elements, the two sums of the FSq and FLambU
// terms in the CPU's order (element i into partial i mod 4; dlg_lamb_update
// sums them on the device in another order), lamb_scale, lamb_apply_at:
// p, m and v bit for bit against dl_lamb_update, three steps.
template <class T> static void lamb_case(const double *hp, int64_t n) {
  const int dt = sizeof(T) == 8;
  std::vector<T> p = hc_rand<T>((size_t)n, -1, 1), m((size_t)n, (T)0), v((size_t)n, (T)0);
  std::vector<T> rp = p, rm = m, rv = v;
  char name[160];
  snprintf(name, sizeof name, "lamb %s n %lld hp {%g, %g, %g, %g, %g, %g, %g}", hc_dt(dt), (long long)n, hp[0],
           hp[1], hp[2], hp[3], hp[4], hp[5], hp[6]);
  for (int64_t step = 1; step <= 3; step++) {
    std::vector<T> g = hc_rand<T>((size_t)n, -1, 1);
    double k[10], sp[4] = {0, 0, 0, 0}, su[4] = {0, 0, 0, 0}, sums[2];
    kref_lamb(dt, hp, step, n, rp.data(), g.data(), rm.data(), rv.data(), k);
    const T bc1 = (T)k[4], bc2s = (T)k[5], eps = (T)k[6], wd = (T)k[7];
    kh_elems(n, [&](int64_t i) { lamb_mv_at(g.data(), m.data(), v.data(), (T)k[0], (T)k[1], (T)k[2], (T)k[3], i); });
    const FSq<T> fp = {p.data()};
    const FLambU<T> fu = {p.data(), m.data(), v.data(), bc1, bc2s, eps, wd};
    for (int64_t i = 0; i < n; i++) {
      sp[i & 3] += fp(i);
      su[i & 3] += fu(i);
    }
    sums[0] = (sp[0] + sp[1]) + (sp[2] + sp[3]);
    sums[1] = (su[0] + su[1]) + (su[2] + su[3]);
    const T st = lamb_scale<T>(sums, k[8], k[9]);
    kh_elems(n, [&](int64_t i) { lamb_apply_at(p.data(), m.data(), v.data(), bc1, bc2s, eps, wd, st, i); });
    const std::string nm = std::string(name) + " step " + std::to_string(step);
    hc_bits(nm + " p", p, rp);
    hc_bits(nm + " m", m, rm);
    hc_bits(nm + " v", v, rv);
  }
}
template <class T> static void lambs() {
  // lr, beta1, beta2, eps, weight_decay, max_trust, bias_correction
  static const double hp[][7] = {{1e-2, 0.9, 0.999, 1e-6, 0, 0, 1},
                                 {5e-3, 0.85, 0.99, 1e-6, 0.1, 0, 1},
                                 {1e-2, 0.9, 0.999, 1e-4, 0.01, 0, 0},
                                 {1e-2, 0.9, 0.999, 1e-6, 0, 0.05, 1}};
  for (const auto &h : hp) {
    lamb_case<T>(h, 37);
    lamb_case<T>(h, 1003);
  }
}
static void optimizers_f32(void) { optimizers<float>(); lambs<float>(); }
static void optimizers_f64(void) { optimizers<double>(); lambs<double>(); }

// >>clipping, regularisation -----------------------------------------------------

// dl_clip_grads' GPU steps: clamp_at (dlg_clamp: (T)-v, (T)v), the sum of
// squares' terms (FSq; dlg_sumsq), scale_at (dlg_scale: (T)f).
template <class T> static void clip_cases() {
  const int dt = sizeof(T) == 8;
  const int64_t n = 103;
  std::vector<T> x = hc_rand<T>((size_t)n, -3, 3);
  x[4] = (T)NAN;
  x[9] = (T)INFINITY;
  x[10] = -(T)INFINITY;
  x[11] = (T)1.5;
  x[12] = (T)-1.5;
  const std::string nm = std::string("clip ") + hc_dt(dt);
  std::vector<T> rx = x, cx = x;
  kref_clamp(dt, rx.data(), n, 1.5);
  kh_elems(n, [&](int64_t i) { clamp_at(cx.data(), (T)-1.5, (T)1.5, i); });
  hc_bits(nm + " clamp 1.5", cx, rx);
  rx = x;
  cx = x;
  kref_clamp(dt, rx.data(), n, 0.1);
  kh_elems(n, [&](int64_t i) { clamp_at(cx.data(), (T)-0.1, (T)0.1, i); });
  hc_bits(nm + " clamp 0.1", cx, rx);
  const std::vector<T> y = hc_rand<T>((size_t)n, -3, 3);
  const double want = kref_sumsq(dt, y.data(), n), got = kh_psum<double>(FSq<T>{y.data()}, n, 1.0);
  CHECK_MSG(std::fabs(got - want) <= 1e-13 * want, "%s sumsq: got %.17g, want %.17g", nm.c_str(), got, want);
  std::vector<T> ry = y, cy = y;
  kref_scale(dt, ry.data(), n, 0.3);
  kh_elems(n, [&](int64_t i) { scale_at(cy.data(), (T)0.3, i); });
  hc_bits(nm + " scale 0.3", cy, ry);
}
static void clip_f32(void) { clip_cases<float>(); }
static void clip_f64(void) { clip_cases<double>(); }

// dl_regularize's GPU branch (dlg_regularize): a Linear's weight and bias
// (dense: every element) and an Embedding's row-sparse gradient (the
// touched rows' values, p indexed through the rows).
template <class T> static void regularize_case(double l1, double l2) {
  const int dt = sizeof(T) == 8;
  const int64_t V = 8, D = 4, in = 5, out = 3, n = 11;
  std::vector<T> p0 = kh_grid<T>((size_t)(V * D)), p1 = kh_grid<T>((size_t)(in * out)), p2 = kh_grid<T>((size_t)out);
  p1[0] = p0[0] = (T)0;
  const std::vector<T> g1_0 = hc_rand<T>((size_t)(in * out), -1, 1), g2_0 = hc_rand<T>((size_t)out, -1, 1),
                       gy = hc_rand<T>((size_t)(n * D), -1, 1);
  std::vector<int64_t> idx((size_t)n);
  for (auto &r : idx) r = (int64_t)(hc_urand() * (double)V);
  std::vector<T> rg1 = g1_0, rg2 = g2_0, vb((size_t)(V * D)), va((size_t)(V * D));
  std::vector<int64_t> rows((size_t)V);
  const int64_t nnz = kref_regularize(dt, l1, l2, V, D, in, out, p0.data(), p1.data(), p2.data(), rg1.data(),
                                      rg2.data(), idx.data(), n, gy.data(), rows.data(), vb.data(), va.data());
  vb.resize((size_t)(nnz * D));
  va.resize((size_t)(nnz * D));
  std::vector<T> g1 = g1_0, g2 = g2_0, v = vb;
  const int64_t *dense = nullptr; // rows NULL: dense
  kh_elems(in * out, [&](int64_t i) { regularize_at(0, dense, g1.data(), p1.data(), (T)l1, (T)l2, i); });
  kh_elems(out, [&](int64_t i) { regularize_at(0, dense, g2.data(), p2.data(), (T)l1, (T)l2, i); });
  kh_elems(nnz * D, [&](int64_t i) { regularize_at(D, rows.data(), v.data(), p0.data(), (T)l1, (T)l2, i); });
  char name[120];
  snprintf(name, sizeof name, "regularize %s l1 %g l2 %g", hc_dt(dt), l1, l2);
  const std::string nm(name);
  hc_bits(nm + " linear weight", g1, rg1);
  hc_bits(nm + " linear bias", g2, rg2);
  hc_bits(nm + " embedding rows", v, va);
}
template <class T> static void regularizes() {
  regularize_case<T>(0.01, 0.1);
  regularize_case<T>(0, 0.05);
  regularize_case<T>(0.02, 0);
}
static void regularize_f32(void) { regularizes<float>(); }
static void regularize_f64(void) { regularizes<double>(); }

int main(void) {
  RUN(sum_axis_f32);
  RUN(sum_axis_f64);
  RUN(reductions_f32);
  RUN(reductions_f64);
  RUN(softmax_f32);
  RUN(softmax_f64);
  RUN(log_softmax_f32);
  RUN(log_softmax_f64);
  RUN(losses_ew_f32);
  RUN(losses_ew_f64);
  RUN(cross_entropy_f32);
  RUN(cross_entropy_f64);
  RUN(nll_f32);
  RUN(nll_f64);
  RUN(embedding_f32);
  RUN(embedding_f64);
  RUN(dropout_f32);
  RUN(dropout_f64);
  RUN(optimizers_f32);
  RUN(optimizers_f64);
  RUN(clip_f32);
  RUN(clip_f64);
  RUN(regularize_f32);
  RUN(regularize_f64);
  return harness_finish();
}
