// tests/gpu_host/shape_host.cu - src_gpu/shape.cu's kernels (index_select,
// gather, pad), run on the HOST against the CPU ops (no GPU needed).
//
// Why: there is no GPU in CI, so tests/test_gpu.c skips there and nothing
// would ever execute these kernels. shape.cu writes each kernel's work for
// one element (isel_at, isel_bwd_at, gather_at, gather_bwd_at, pad_at,
// pad_bwd_at) as a __host__ __device__ function and builds the index_select
// backward's groups (isel_plan) and the geometries (gather_geo, pad_geo) in
// host code. This file #includes shape.cu, runs those in plain host loops
// over every element, and compares the results with dl.h's CPU ops, which
// shape_ref.c runs on the same inputs (forward, dl_backward, tangent).
//
// What it checks, bit for bit (these ops only copy and add):
//   - index_select along first / middle / last dimensions, repeated and
//     unsorted indices, an empty index: y for f32, f64, u8, f16, i32, i64
//     (element sizes 1, 2, 4, 8), the tangent and the gradient (+=, onto
//     random starting values: repeated indices add in the CPU's order);
//   - gather along each dimension of 1-, 2- and 3-d inputs, index sizes
//     smaller than x's outside dim, repeats, on contiguous x and on a
//     transposed (strided) view, y (all six dtypes), tangent, gradient (the
//     strided view's gradient starts at 0: the CPU adds it through the
//     transpose's backward, in one addition);
//   - pad with positive, negative (cropping), mixed and all-cropping pads, a
//     value (in each dtype, from sref_fill_bits as the C side makes it), a
//     0-d input, an empty one, contiguous and transposed x: y for f32, f64,
//     i8, i32, i64, tangent, gradient;
//   - out-of-range indices: zero in the forward, skipped in the backward
//     and by isel_plan (the C side never passes them).
// Outputs that the bodies assign start at a byte pattern no case yields (an
// element left unwritten fails).
//
// What it does NOT check: anything that needs a device: the kernels'
// grid-stride loops and launch configurations, the staging of the host
// index arrays into the workspace, the dlg_* entry points' dispatch, and
// the C side in include/dl/ops/shape.h (device tapes, indices on the
// device); tests/test_gpu.c covers those where a GPU exists.
//
// Build and run from the repository root:
//   gcc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -Iinclude -c tests/gpu_host/shape_ref.c -o B/shape_ref.o
//   nvcc -std=c++17 -Werror all-warnings -O1 -Iinclude -Isrc_gpu tests/gpu_host/shape_host.cu B/shape_ref.o \
//        -o B/shape_host -lm
//   B/shape_host
// (B: any build directory; clang works for shape_ref.c too.) The program
// only runs host code: the CUDA runtime that nvcc links statically is only
// told about the file's kernels at start-up, which needs no device. The
// last line is the harness's "HARNESS <passed> <failed> <skipped>"; a test
// is one op at one dtype.
#include "shape.cu" // src_gpu/shape.cu (-Isrc_gpu), with its includes
#include "../harness.h"
#include "host_check.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

// dl_dtype's values (core.h): f32, f64, i32, i64 are DLG_F32 .. DLG_I64.
enum { SH_U8 = 4, SH_I8 = 5, SH_F16 = 6 };
static int es_of(int dt) {
  return (dt == SH_U8 || dt == SH_I8) ? 1 : dt == SH_F16 ? 2 : (dt == DLG_F32 || dt == DLG_I32) ? 4 : 8;
}
static bool is_float(int dt) { return dt == DLG_F32 || dt == DLG_F64; }
static const char *dt_name(int dt) {
  switch (dt) {
    case DLG_F32: return "f32";
    case DLG_F64: return "f64";
    case DLG_I32: return "i32";
    case DLG_I64: return "i64";
    case SH_U8: return "u8";
    case SH_I8: return "i8";
    default: return "f16";
  }
}


typedef std::vector<unsigned char> Bytes;
// n elements of dtype dt: f32 / f64 uniform in [-1, 1), other dtypes random bytes.
static Bytes rnd(int dt, int64_t n) {
  Bytes b((size_t)(n * es_of(dt)) + 1); // + 1: data() valid for n = 0 too
  for (int64_t i = 0; i < n; i++) {
    if (dt == DLG_F32) {
      const float v = (float)(2 * hc_urand() - 1);
      memcpy(&b[(size_t)i * 4], &v, 4);
    } else if (dt == DLG_F64) {
      const double v = 2 * hc_urand() - 1;
      memcpy(&b[(size_t)i * 8], &v, 8);
    } else {
      for (int k = 0; k < es_of(dt); k++) b[(size_t)(i * es_of(dt) + k)] = (unsigned char)hc_next();
    }
  }
  return b;
}
static Bytes zeros(int dt, int64_t n) { return Bytes((size_t)(n * es_of(dt)) + 1, 0); }
// What outputs the bodies assign hold before the call (no case yields it).
static Bytes unset(int dt, int64_t n) { return Bytes((size_t)(n * es_of(dt)) + 1, 0xA7); }

// One check: got and want hold the same bits, element by element (es bytes).
static void same_bits(const std::string &what, int dt, const Bytes &got, const Bytes &want, int64_t n) {
  const int es = es_of(dt);
  int64_t i = 0;
  while (i < n && memcmp(&got[(size_t)(i * es)], &want[(size_t)(i * es)], (size_t)es) == 0) i++;
  double g = 0, w = 0;
  if (i < n && dt == DLG_F32) {
    float a, b;
    memcpy(&a, &got[(size_t)(i * 4)], 4);
    memcpy(&b, &want[(size_t)(i * 4)], 4);
    g = a;
    w = b;
  } else if (i < n && dt == DLG_F64) {
    memcpy(&g, &got[(size_t)(i * 8)], 8);
    memcpy(&w, &want[(size_t)(i * 8)], 8);
  }
  CHECK_MSG(i == n && got.size() == want.size(), "%s %s: element %lld of %lld differs (got %.17g, want %.17g)",
            what.c_str(), dt_name(dt), (long long)i, (long long)n, g, w);
}

// f(T()) with T the unsigned integer of es bytes (the forward's raw copies).
template <class F> static void by_size(int es, F f) {
  switch (es) {
    case 1: f(uint8_t()); break;
    case 2: f(uint16_t()); break;
    case 4: f(uint32_t()); break;
    default: f(uint64_t()); break;
  }
}
// f(T()) with T float or double (the backward's additions).
template <class F> static void by_float(int dt, F f) {
  if (dt == DLG_F32) f(float());
  else f(double());
}

static int64_t prod(const std::vector<int64_t> &v) {
  int64_t p = 1;
  for (int64_t e : v) p *= e;
  return p;
}
static std::string shape_str(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); k++) s += (k ? ", " : "") + std::to_string((long long)v[k]);
  return s + "]";
}
static std::vector<int64_t> strides_of(const std::vector<int64_t> &sh) {
  std::vector<int64_t> st(sh.size());
  int64_t s = 1;
  for (size_t k = sh.size(); k-- > 0;) {
    st[k] = s;
    s *= sh[k];
  }
  return st;
}

// >>index_select ----------------------------------------------------------------

static void isel_case(int dt, const std::vector<int64_t> &shape, int dim, const std::vector<int64_t> &idx) {
  const int nd = (int)shape.size(), es = es_of(dt);
  const bool fl = is_float(dt);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; d++) outer *= shape[(size_t)d];
  for (int d = dim + 1; d < nd; d++) inner *= shape[(size_t)d];
  const int64_t n = shape[(size_t)dim], m = (int64_t)idx.size(), nx = prod(shape), ny = outer * m * inner;
  const Bytes x = rnd(dt, nx), tx = rnd(dt, nx), gy = rnd(dt, ny), gx0 = rnd(dt, nx);
  Bytes ry = unset(dt, ny), rty = unset(dt, ny), rgx = gx0;
  sref_index_select(dt, nd, shape.data(), dim, idx.data(), m, x.data(), fl ? tx.data() : nullptr,
                    fl ? gy.data() : nullptr, ry.data(), fl ? rty.data() : nullptr, fl ? rgx.data() : nullptr);
  Bytes y = unset(dt, ny), ty = unset(dt, ny), gx = gx0;
  by_size(es, [&](auto z) {
    typedef decltype(z) T;
    for (int64_t i = 0; i < ny; i++) isel_at((T *)y.data(), (const T *)x.data(), n, m, inner, idx.data(), i);
    if (fl)
      for (int64_t i = 0; i < ny; i++) isel_at((T *)ty.data(), (const T *)tx.data(), n, m, inner, idx.data(), i);
  });
  const std::string nm = "index_select " + shape_str(shape) + " dim " + std::to_string(dim) + " by " +
                         std::to_string((long long)m);
  same_bits(nm + " y", dt, y, ry, ny);
  if (!fl) return;
  same_bits(nm + " ty", dt, ty, rty, ny);
  std::vector<int64_t> all;
  const int64_t ng = isel_plan(idx.data(), m, n, all);
  CHECK_MSG(ng == 0 ? all.empty() : (int64_t)all.size() == 2 * ng + 1 + m, "%s: plan of %lld groups, %zu entries",
            nm.c_str(), (long long)ng, all.size());
  if (ng > 0) {
    const int64_t *d = all.data();
    by_float(dt, [&](auto z) {
      typedef decltype(z) T;
      for (int64_t t = 0; t < outer * ng * inner; t++)
        isel_bwd_at((T *)gx.data(), (const T *)gy.data(), n, m, inner, ng, d, d + ng, d + 2 * ng + 1, t);
    });
  }
  same_bits(nm + " gx +=", dt, gx, rgx, nx);
}

static void isel_cases(int dt) {
  isel_case(dt, {4, 5, 3}, 0, {2, 0, 2, 3, 1, 2, 0});
  isel_case(dt, {4, 5, 3}, 1, {4, 4, 1, 0, 4, 3, 1, 4});
  isel_case(dt, {4, 5, 3}, 2, {2, 2, 2, 0});
  isel_case(dt, {9}, 0, {8, 0, 8, 8, 3, 0, 5, 8, 1, 8, 8, 2});
  isel_case(dt, {2, 3, 4, 5}, 2, {3, 1, 3});
  isel_case(dt, {6, 70}, 0, {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 0, 5, 5, 5, 5, 5});
  isel_case(dt, {3, 4}, 1, {});
  isel_case(dt, {1, 1}, 0, {0, 0, 0});
}

// >>gather ------------------------------------------------------------------------

// x's storage is [xshape]; tr: the op sees the view with the first and last
// dimensions swapped. idx: random in [0, size at dim) with repeats.
static void gather_case(int dt, const std::vector<int64_t> &xshape, int tr, int dim,
                        const std::vector<int64_t> &ishape) {
  const int nd = (int)xshape.size();
  const bool fl = is_float(dt);
  std::vector<int64_t> vs = xshape, vst = strides_of(xshape);
  if (tr && nd > 1) {
    std::swap(vs[0], vs[(size_t)nd - 1]);
    std::swap(vst[0], vst[(size_t)nd - 1]);
  }
  const int64_t nx = prod(xshape), ny = prod(ishape), bound = vs[(size_t)dim];
  std::vector<int64_t> idx((size_t)ny);
  for (auto &e : idx) e = (int64_t)(hc_urand() * (double)bound);
  const Bytes x = rnd(dt, nx), tx = rnd(dt, nx), gy = rnd(dt, ny), gx0 = tr ? zeros(dt, nx) : rnd(dt, nx);
  Bytes ry = unset(dt, ny), rty = unset(dt, ny), rgx = gx0;
  sref_gather(dt, nd, xshape.data(), tr, dim, ishape.data(), idx.data(), x.data(), fl ? tx.data() : nullptr,
              fl ? gy.data() : nullptr, ry.data(), fl ? rty.data() : nullptr, fl ? rgx.data() : nullptr);
  dlg_handle h;
  memset(&h, 0, sizeof h);
  GatherGeo g;
  const std::string nm = "gather " + shape_str(xshape) + (tr ? " transposed" : "") + " dim " + std::to_string(dim) +
                         " by " + shape_str(ishape);
  CHECK_MSG(gather_geo(&h, "test", nd, ishape.data(), dim, vst.data(), bound, &g) == DLG_OK, "%s: gather_geo: %s",
            nm.c_str(), h.msg);
  Bytes y = unset(dt, ny), ty = unset(dt, ny), gx = gx0;
  by_size(es_of(dt), [&](auto z) {
    typedef decltype(z) T;
    for (int64_t p = 0; p < ny; p++) gather_at(g, (T *)y.data(), (const T *)x.data(), idx.data(), p);
    if (fl)
      for (int64_t p = 0; p < ny; p++) gather_at(g, (T *)ty.data(), (const T *)tx.data(), idx.data(), p);
  });
  same_bits(nm + " y", dt, y, ry, ny);
  if (!fl) return;
  same_bits(nm + " ty", dt, ty, rty, ny);
  if (ny > 0)
    by_float(dt, [&](auto z) {
      typedef decltype(z) T;
      for (int64_t t = 0; t < ny / g.K; t++) gather_bwd_at(g, (T *)gx.data(), (const T *)gy.data(), idx.data(), t);
    });
  same_bits(nm + (tr ? " gx" : " gx +="), dt, gx, rgx, nx);
}

static void gather_cases(int dt) {
  for (int tr = 0; tr < 2; tr++) {
    gather_case(dt, {4, 5}, tr, 0, {9, 3});
    gather_case(dt, {4, 5}, tr, 1, {3, 11});
    gather_case(dt, {5, 4}, tr, 0, {4, 4});
    gather_case(dt, {3, 4, 5}, tr, 1, {2, 6, 3});
    gather_case(dt, {3, 4, 5}, tr, 0, {7, 4, 2});
    gather_case(dt, {3, 4, 5}, tr, 2, {3, 1, 8});
    gather_case(dt, {2, 3, 4, 5}, tr, 3, {2, 3, 2, 6});
  }
  gather_case(dt, {7}, 0, 0, {20});
  gather_case(dt, {7}, 0, 0, {0});
}

// >>pad -----------------------------------------------------------------------------

static void pad_case(int dt, const std::vector<int64_t> &xshape, int tr, const std::vector<int64_t> &pads,
                     double value) {
  const int nd = (int)xshape.size(), np = (int)pads.size() / 2;
  const bool fl = is_float(dt);
  std::vector<int64_t> vs = xshape, vst = strides_of(xshape);
  if (tr && nd > 1) {
    std::swap(vs[0], vs[(size_t)nd - 1]);
    std::swap(vst[0], vst[(size_t)nd - 1]);
  }
  const int64_t nx = prod(xshape);
  const int64_t *ysh = nullptr;
  const Bytes x = rnd(dt, nx), tx = rnd(dt, nx), gx0 = tr ? zeros(dt, nx) : rnd(dt, nx);
  sref_pad(dt, nd, xshape.data(), tr, np, pads.data(), value, x.data(), nullptr, nullptr, &ysh, nullptr, nullptr,
           nullptr); // the output's shape
  const std::vector<int64_t> yshape(ysh, ysh + nd);
  const int64_t ny = prod(yshape);
  const Bytes gy = rnd(dt, ny);
  Bytes ry = unset(dt, ny), rty = unset(dt, ny), rgx = gx0;
  sref_pad(dt, nd, xshape.data(), tr, np, pads.data(), value, x.data(), fl ? tx.data() : nullptr,
           fl ? gy.data() : nullptr, nullptr, ry.data(), fl ? rty.data() : nullptr, fl ? rgx.data() : nullptr);
  std::vector<int64_t> lo((size_t)nd + 1, 0);
  for (int p = 0; p < np; p++) lo[(size_t)(nd - 1 - p)] = pads[(size_t)(2 * p)];
  const std::vector<int64_t> yst = strides_of(yshape);
  dlg_handle h;
  memset(&h, 0, sizeof h);
  PadGeo gf, gb;
  std::string pn;
  for (size_t k = 0; k < pads.size(); k++) pn += (k ? "," : "") + std::to_string((long long)pads[k]);
  const std::string nm = "pad " + shape_str(xshape) + (tr ? " transposed" : "") + " by (" + pn + ") value " +
                         std::to_string(value);
  CHECK_MSG(pad_geo(&h, "test", nd, yshape.data(), vs.data(), vst.data(), nullptr, lo.data(), &gf) == DLG_OK &&
                pad_geo(&h, "test", nd, yshape.data(), vs.data(), vst.data(), yst.data(), lo.data(), &gb) == DLG_OK,
            "%s: pad_geo: %s", nm.c_str(), h.msg);
  uint64_t fill = 0;
  sref_fill_bits(dt, value, &fill);
  Bytes y = unset(dt, ny), ty = unset(dt, ny), gx = gx0;
  by_size(es_of(dt), [&](auto z) {
    typedef decltype(z) T;
    T f;
    memcpy(&f, &fill, sizeof f);
    for (int64_t i = 0; i < ny; i++) pad_at(gf, (T *)y.data(), (const T *)x.data(), f, i);
    if (fl)
      for (int64_t i = 0; i < ny; i++) pad_at(gf, (T *)ty.data(), (const T *)tx.data(), (T)0, i);
  });
  same_bits(nm + " y", dt, y, ry, ny);
  if (!fl) return;
  same_bits(nm + " ty", dt, ty, rty, ny);
  if (ny > 0)
    by_float(dt, [&](auto z) {
      typedef decltype(z) T;
      for (int64_t i = 0; i < nx; i++) pad_bwd_at(gb, (T *)gx.data(), (const T *)gy.data(), i);
    });
  same_bits(nm + (tr ? " gx" : " gx +="), dt, gx, rgx, nx);
}

static void pad_cases(int dt) {
  for (int tr = 0; tr < 2; tr++) {
    pad_case(dt, {3, 4}, tr, {1, 2}, 0.5);
    pad_case(dt, {2, 3, 4}, tr, {2, 1, 1, 0, 1, 1}, -1);
    pad_case(dt, {3, 5}, tr, {-1, 2, 1, -2}, 0);
    pad_case(dt, {3, 4}, tr, {1, 1, 2, 0}, 3);
    pad_case(dt, {4, 3}, tr, {-2, -1}, 2);      // last dimension cropped to nothing
    pad_case(dt, {4, 3}, tr, {2, -3}, 7);       // all cropped, all padded
    pad_case(dt, {4, 3}, tr, {-4, 2, 0, 0}, 1); // the cropped part past the end
    pad_case(dt, {2, 3, 2, 3}, tr, {1, -1, -1, 1, 2, 0}, -2.5);
  }
  pad_case(dt, {5}, 0, {0, 0}, 1);
  pad_case(dt, {}, 0, {}, 1);
  pad_case(dt, {0, 3}, 0, {1, 1, 1, 1}, 4);
}

// >>indices out of range ------------------------------------------------------------
// The C side checks every index; the kernels still stay inside the tensors.

static void out_of_range(void) {
  const float x[6] = {1, 2, 3, 4, 5, 6}; // [3, 2]
  const int64_t idx[4] = {2, -1, 3, 0};
  float y[8];
  for (int64_t i = 0; i < 8; i++) isel_at(y, x, 3, 4, 2, idx, i);
  const float want[8] = {5, 6, 0, 0, 0, 0, 1, 2};
  CHECK(memcmp(y, want, sizeof y) == 0);
  std::vector<int64_t> all;
  const int64_t ng = isel_plan(idx, 4, 3, all);
  CHECK_MSG(ng == 2 && all.size() == 7 && all[0] == 0 && all[1] == 2 && all[2] == 0 && all[3] == 1 && all[4] == 2 &&
                all[5] == 3 && all[6] == 0,
            "plan of {2, -1, 3, 0} in [0, 3): %lld groups", (long long)ng);
  // gather along dim 0 of [3, 2] by [2, 2] {{2, -1}, {3, 0}}: y {{5, 0}, {0, 2}}; backward adds only the valid two
  dlg_handle h;
  memset(&h, 0, sizeof h);
  GatherGeo g;
  const int64_t ish[2] = {2, 2}, st[2] = {2, 1};
  CHECK(gather_geo(&h, "test", 2, ish, 0, st, 3, &g) == DLG_OK);
  float gy4[4] = {10, 20, 30, 40}, gx[6] = {0, 0, 0, 0, 0, 0}, y4[4];
  for (int64_t p = 0; p < 4; p++) gather_at(g, y4, x, idx, p);
  const float wy4[4] = {5, 0, 0, 2};
  CHECK(memcmp(y4, wy4, sizeof y4) == 0);
  for (int64_t t = 0; t < 2; t++) gather_bwd_at(g, gx, gy4, idx, t);
  const float wgx[6] = {0, 40, 0, 0, 10, 0};
  CHECK(memcmp(gx, wgx, sizeof gx) == 0);
  CHECK(gather_geo(&h, "test", 2, ish, 2, st, 3, &g) == DLG_ERR); // dim past the rank
  CHECK(gather_geo(&h, "test", DLG_MAXD + 1, ish, 0, st, 3, &g) == DLG_ERR);
}

// The copies of every element size: u8 (1), f16 (2), i32 (4), i64 (8); pad
// takes i8, i32, i64 (the CPU fills through dl_tensor_fill, which has no
// f16 and would convert the negative values to u8 outside its range).
static const int kCopyDts[] = {SH_U8, SH_F16, DLG_I32, DLG_I64};
static const int kPadDts[] = {SH_I8, DLG_I32, DLG_I64};
#define SH_TESTS(op, dts)                                  \
  static void op##_f32(void) { op##_cases(DLG_F32); }      \
  static void op##_f64(void) { op##_cases(DLG_F64); }      \
  static void op##_other_dtypes(void) {                    \
    for (int dt : dts) op##_cases(dt);                     \
  }
SH_TESTS(isel, kCopyDts)
SH_TESTS(gather, kCopyDts)
SH_TESTS(pad, kPadDts)

int main(void) {
  RUN(isel_f32);
  RUN(isel_f64);
  RUN(isel_other_dtypes);
  RUN(gather_f32);
  RUN(gather_f64);
  RUN(gather_other_dtypes);
  RUN(pad_f32);
  RUN(pad_f64);
  RUN(pad_other_dtypes);
  RUN(out_of_range);
  return harness_finish();
}
