// src_gpu/shape.cu - index_select, gather and pad on the device: the ABI of
// include/dl/gpu/shape.h, for ops/shape.h.
//
// Everything here moves data, so the results are the CPU's bit for bit:
// forward kernels copy elements as raw bits (1, 2, 4 or 8 bytes: any
// dtype), one thread per output element (grid-stride loops); backward
// kernels add in the dtype, one thread per element of the gradient that
// receives several terms, adding them in the CPU's order:
//   - index_select: the positions k are grouped by index on the host (a
//     stable sort, so each group keeps increasing k); a thread adds its
//     group's rows into one element of gx (gather form: no atomics);
//   - gather: a thread owns one position outside dim (its column) and walks
//     k = 0, 1, ... along dim, adding each term where its index points;
//     different columns never share an element of gx;
//   - pad: each element of gx receives at most one term.
//
// Layout: each kernel's work for one element is a __host__ __device__
// function (isel_at, isel_bwd_at, gather_at, gather_bwd_at, pad_at,
// pad_bwd_at) and the kernel a loop around it; isel_plan is host code.
// tests/gpu_host/shape_host.cu #includes this file and runs those bodies
// and the plan on the host against the CPU ops (there is no GPU in CI).
#include "internal.h"

#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

namespace {

constexpr int TPB = 256;

#define SHAPE_GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

#define SHAPE_TRY(x)                \
  do {                              \
    const int rc_ = (x);            \
    if (rc_ != DLG_OK) return rc_;  \
  } while (0)

// ---------------------------------------------------------------- index_select

// Element i of y [outer, m, inner]: x[o, ix[k], j] (zero for an index
// outside [0, n), which the caller never passes).
template <typename T>
__host__ __device__ __forceinline__ void isel_at(T *__restrict__ y, const T *__restrict__ x, int64_t n, int64_t m,
                                                 int64_t inner, const int64_t *__restrict__ ix, int64_t i) {
  const int64_t j = i % inner, r = i / inner, k = r % m, o = r / m, s = ix[k];
  y[i] = (s >= 0 && s < n) ? x[(o * n + s) * inner + j] : (T)0;
}
template <typename T>
__global__ void k_isel(T *__restrict__ y, const T *__restrict__ x, int64_t total, int64_t n, int64_t m, int64_t inner,
                       const int64_t *__restrict__ ix) {
  SHAPE_GRID_STRIDE(i, total) isel_at(y, x, n, m, inner, ix, i);
}

// The groups of the index_select backward, built on the host: the positions
// k with ix[k] in [0, n), stably sorted by ix[k] (so increasing k within a
// group), one group per distinct index, into
//   all = [dst (ng) | beg (ng + 1) | order (count)]:
// group q adds gy's rows order[beg[q] .. beg[q+1]) into gx's row dst[q].
// Returns ng (0: nothing to add; all is then empty).
int64_t isel_plan(const int64_t *ix, int64_t m, int64_t n, std::vector<int64_t> &all) {
  std::vector<int64_t> ord, dst, beg;
  all.clear();
  ord.reserve((size_t)m);
  for (int64_t k = 0; k < m; k++)
    if (ix[k] >= 0 && ix[k] < n) ord.push_back(k);
  std::stable_sort(ord.begin(), ord.end(), [ix](int64_t a, int64_t b) { return ix[a] < ix[b]; });
  const int64_t cnt = (int64_t)ord.size();
  if (cnt == 0) return 0;
  for (int64_t p = 0; p < cnt; p++)
    if (p == 0 || ix[ord[(size_t)p]] != ix[ord[(size_t)p - 1]]) {
      dst.push_back(ix[ord[(size_t)p]]);
      beg.push_back(p);
    }
  beg.push_back(cnt);
  all.reserve(dst.size() + beg.size() + ord.size());
  all.insert(all.end(), dst.begin(), dst.end());
  all.insert(all.end(), beg.begin(), beg.end());
  all.insert(all.end(), ord.begin(), ord.end());
  return (int64_t)dst.size();
}
// Item t = (o, q, j) of [outer, ng, inner]: gx[o, dst[q], j] += the group's
// gy[o, k, j], k in the group's order, one rounding per addition (as the
// CPU's += loop).
template <typename T>
__host__ __device__ __forceinline__ void isel_bwd_at(T *__restrict__ gx, const T *__restrict__ gy, int64_t n,
                                                     int64_t m, int64_t inner, int64_t ng,
                                                     const int64_t *__restrict__ dst, const int64_t *__restrict__ beg,
                                                     const int64_t *__restrict__ order, int64_t t) {
  const int64_t j = t % inner, r = t / inner, q = r % ng, o = r / ng;
  T *g = gx + (o * n + dst[q]) * inner + j;
  T v = *g;
  for (int64_t p = beg[q]; p < beg[q + 1]; p++) v = v + gy[(o * m + order[p]) * inner + j];
  *g = v;
}
template <typename T>
__global__ void k_isel_bwd(T *__restrict__ gx, const T *__restrict__ gy, int64_t total, int64_t n, int64_t m,
                           int64_t inner, int64_t ng, const int64_t *__restrict__ dst, const int64_t *__restrict__ beg,
                           const int64_t *__restrict__ order) {
  SHAPE_GRID_STRIDE(t, total) isel_bwd_at(gx, gy, n, m, inner, ng, dst, beg, order, t);
}

// ---------------------------------------------------------------- gather

// The geometry of a gather: the index's shape, the strides of x (gx), the
// gathered dimension and x's size there; inner = the product of the sizes
// after dim, K = shape[dim].
struct GatherGeo {
  int ndim, dim;
  int64_t shape[DLG_MAXD], st[DLG_MAXD];
  int64_t bound, inner, K;
};

// Element p of y (contiguous in g.shape): x at p's coordinates under g.st,
// with ix[p] for the coordinate at dim (zero for an index out of range).
template <typename T>
__host__ __device__ __forceinline__ void gather_at(const GatherGeo &g, T *__restrict__ y, const T *__restrict__ x,
                                                   const int64_t *__restrict__ ix, int64_t p) {
  const int64_t s = ix[p];
  if (s < 0 || s >= g.bound) {
    y[p] = (T)0;
    return;
  }
  int64_t r = p, off = 0;
  for (int d = g.ndim - 1; d >= 0; d--) {
    const int64_t c = r % g.shape[d];
    r /= g.shape[d];
    off += (d == g.dim ? s : c) * g.st[d];
  }
  y[p] = x[off];
}
template <typename T>
__global__ void k_gather(GatherGeo g, T *__restrict__ y, const T *__restrict__ x, const int64_t *__restrict__ ix,
                         int64_t total) {
  SHAPE_GRID_STRIDE(p, total) gather_at(g, y, x, ix, p);
}
// Column t = (o, j) of [outer, inner] (o over the dimensions before dim, j
// over those after it): for k = 0 .. K-1 in order, gx[o, ix[o, k, j], j] +=
// gy[o, k, j]. Only this thread writes those elements of gx.
template <typename T>
__host__ __device__ __forceinline__ void gather_bwd_at(const GatherGeo &g, T *__restrict__ gx, const T *__restrict__ gy,
                                                       const int64_t *__restrict__ ix, int64_t t) {
  const int64_t o = t / g.inner, j = t % g.inner;
  int64_t off = 0, r = j;
  for (int d = g.ndim - 1; d > g.dim; d--) {
    off += (r % g.shape[d]) * g.st[d];
    r /= g.shape[d];
  }
  r = o;
  for (int d = g.dim - 1; d >= 0; d--) {
    off += (r % g.shape[d]) * g.st[d];
    r /= g.shape[d];
  }
  const int64_t sd = g.st[g.dim];
  for (int64_t k = 0; k < g.K; k++) {
    const int64_t p = (o * g.K + k) * g.inner + j, s = ix[p];
    if (s >= 0 && s < g.bound) {
      T *e = gx + off + s * sd;
      *e = *e + gy[p];
    }
  }
}
template <typename T>
__global__ void k_gather_bwd(GatherGeo g, T *__restrict__ gx, const T *__restrict__ gy, const int64_t *__restrict__ ix,
                             int64_t total) {
  SHAPE_GRID_STRIDE(t, total) gather_bwd_at(g, gx, gy, ix, t);
}

// ---------------------------------------------------------------- pad

// The geometry of a pad: y's and x's shapes, the left pads, and the strides
// of the strided operands (forward: a = x's; backward: a = gx's, b = gy's).
struct PadGeo {
  int ndim;
  int64_t yshape[DLG_MAXD], xshape[DLG_MAXD], lo[DLG_MAXD];
  int64_t a[DLG_MAXD], b[DLG_MAXD];
};

// Element i of y (contiguous): x[c - lo] (through g.a) when inside x, else fill.
template <typename T>
__host__ __device__ __forceinline__ void pad_at(const PadGeo &g, T *__restrict__ y, const T *__restrict__ x, T fill,
                                                int64_t i) {
  int64_t r = i, off = 0;
  for (int d = g.ndim - 1; d >= 0; d--) {
    const int64_t c = r % g.yshape[d] - g.lo[d];
    r /= g.yshape[d];
    if (c < 0 || c >= g.xshape[d]) {
      y[i] = fill;
      return;
    }
    off += c * g.a[d];
  }
  y[i] = x[off];
}
template <typename T>
__global__ void k_pad(PadGeo g, T *__restrict__ y, const T *__restrict__ x, T fill, int64_t total) {
  SHAPE_GRID_STRIDE(i, total) pad_at(g, y, x, fill, i);
}
// Element i (row-major over x's shape) of gx (through g.a): += gy[c + lo]
// (through g.b) when that lies inside y; untouched otherwise (cropped).
template <typename T>
__host__ __device__ __forceinline__ void pad_bwd_at(const PadGeo &g, T *__restrict__ gx, const T *__restrict__ gy,
                                                    int64_t i) {
  int64_t r = i, ox = 0, oy = 0;
  for (int d = g.ndim - 1; d >= 0; d--) {
    const int64_t c = r % g.xshape[d], cy = c + g.lo[d];
    r /= g.xshape[d];
    if (cy < 0 || cy >= g.yshape[d]) return;
    ox += c * g.a[d];
    oy += cy * g.b[d];
  }
  gx[ox] = gx[ox] + gy[oy];
}
template <typename T>
__global__ void k_pad_bwd(PadGeo g, T *__restrict__ gx, const T *__restrict__ gy, int64_t total) {
  SHAPE_GRID_STRIDE(i, total) pad_bwd_at(g, gx, gy, i);
}

// ---------------------------------------------------------------- launch helpers

int bad_dtype(dlg_handle *h, const char *op, int dtype) {
  return dlg_fail(h, DLG_ERR, "%s: dtype %d is not DLG_F32 (%d) or DLG_F64 (%d)", op, dtype, DLG_F32, DLG_F64);
}
int bad_size(dlg_handle *h, const char *op, int es) {
  return dlg_fail(h, DLG_ERR, "%s: element size %d is not 1, 2, 4 or 8", op, es);
}
int bad_rank(dlg_handle *h, const char *op, int ndim) {
  return dlg_fail(h, DLG_ERR, "%s: %d dimensions (0 to %d)", op, ndim, DLG_MAXD);
}
size_t up256(size_t b) { return (b + 255) & ~(size_t)255; }

// n host int64 into the workspace at byte offset `at` (in the stream's order:
// after the work queued before; the host array may be reused on return).
int stage(dlg_handle *h, size_t at, const int64_t *src, int64_t n, const char *op) {
  if (n == 0) return DLG_OK;
  return dlg_cuda(h, dlg_memcpy_async(h, (char *)h->ws + at, src, sizeof(int64_t) * (size_t)n, cudaMemcpyHostToDevice),
                  op);
}
// n host int64 into the workspace (grown as needed); *dev points at them.
int stage_ix(dlg_handle *h, const int64_t *ix, int64_t n, const int64_t **dev, const char *op) {
  SHAPE_TRY(dlg_ws(h, up256(sizeof(int64_t) * (size_t)(n > 0 ? n : 1))));
  SHAPE_TRY(stage(h, 0, ix, n, op));
  *dev = (const int64_t *)h->ws;
  return DLG_OK;
}

int64_t prod(int n, const int64_t *v) {
  int64_t p = 1;
  for (int d = 0; d < n; d++) p *= v[d];
  return p;
}

// The element types of the raw copies, by size.
template <int ES> struct Bits;
template <> struct Bits<1> { typedef uint8_t T; };
template <> struct Bits<2> { typedef uint16_t T; };
template <> struct Bits<4> { typedef uint32_t T; };
template <> struct Bits<8> { typedef uint64_t T; };

template <int ES>
void isel_launch(dlg_handle *h, void *y, const void *x, int64_t total, int64_t n, int64_t m, int64_t inner,
                 const int64_t *ix) {
  typedef typename Bits<ES>::T T;
  DLG_LAUNCH(dlg_blocks(h, total, TPB), TPB, 0, h->stream, k_isel<T>)((T *)y, (const T *)x, total, n, m, inner, ix);
}
template <int ES>
void gather_launch(dlg_handle *h, const GatherGeo &g, void *y, const void *x, const int64_t *ix, int64_t total) {
  typedef typename Bits<ES>::T T;
  DLG_LAUNCH(dlg_blocks(h, total, TPB), TPB, 0, h->stream, k_gather<T>)(g, (T *)y, (const T *)x, ix, total);
}
template <int ES>
void pad_launch(dlg_handle *h, const PadGeo &g, void *y, const void *x, const void *fill, int64_t total) {
  typedef typename Bits<ES>::T T;
  T f;
  memcpy(&f, fill, sizeof f);
  DLG_LAUNCH(dlg_blocks(h, total, TPB), TPB, 0, h->stream, k_pad<T>)(g, (T *)y, (const T *)x, f, total);
}

} // namespace

// ---------------------------------------------------------------- entry points

extern "C" int dlg_index_select(dlg_handle *h, int elem_size, void *y, const void *x, int64_t outer, int64_t n,
                                int64_t inner, const int64_t *ix, int64_t m) {
  static const char *op = "dlg_index_select";
  const int64_t total = outer * m * inner;
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8) return bad_size(h, op, elem_size);
  if (total <= 0) return DLG_OK;
  const int64_t *dix;
  SHAPE_TRY(stage_ix(h, ix, m, &dix, op));
  switch (elem_size) {
    case 1: isel_launch<1>(h, y, x, total, n, m, inner, dix); break;
    case 2: isel_launch<2>(h, y, x, total, n, m, inner, dix); break;
    case 4: isel_launch<4>(h, y, x, total, n, m, inner, dix); break;
    default: isel_launch<8>(h, y, x, total, n, m, inner, dix); break;
  }
  return dlg_launched(h, op);
}

extern "C" int dlg_index_select_backward(dlg_handle *h, int dtype, void *gx, const void *gy, int64_t outer, int64_t n,
                                         int64_t inner, const int64_t *ix, int64_t m) {
  static const char *op = "dlg_index_select_backward";
  if (dtype != DLG_F32 && dtype != DLG_F64) return bad_dtype(h, op, dtype);
  if (outer <= 0 || inner <= 0 || m <= 0) return DLG_OK;
  std::vector<int64_t> all; // [dst | beg | order], grouped on the host (isel_plan)
  const int64_t ng = isel_plan(ix, m, n, all);
  if (ng == 0) return DLG_OK;
  const int64_t *d;
  SHAPE_TRY(stage_ix(h, all.data(), (int64_t)all.size(), &d, op));
  const int64_t total = outer * ng * inner;
  const unsigned nb = dlg_blocks(h, total, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_isel_bwd<float>)((float *)gx, (const float *)gy, total, n, m, inner, ng, d, d + ng,
                                                 d + 2 * ng + 1);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_isel_bwd<double>)((double *)gx, (const double *)gy, total, n, m, inner, ng, d, d + ng,
                                                  d + 2 * ng + 1);
  return dlg_launched(h, op);
}

namespace {
int gather_geo(dlg_handle *h, const char *op, int ndim, const int64_t *shape, int dim, const int64_t *st,
               int64_t bound, GatherGeo *g) {
  if (ndim < 1 || ndim > DLG_MAXD) return bad_rank(h, op, ndim);
  if (dim < 0 || dim >= ndim) return dlg_fail(h, DLG_ERR, "%s: dimension %d of %d", op, dim, ndim);
  memset(g, 0, sizeof *g);
  g->ndim = ndim;
  g->dim = dim;
  for (int d = 0; d < ndim; d++) {
    g->shape[d] = shape[d];
    g->st[d] = st[d];
  }
  g->bound = bound;
  g->inner = prod(ndim - dim - 1, shape + dim + 1);
  g->K = shape[dim];
  return DLG_OK;
}
// The geometry of a pad: a = x's (gx's) strides, b = gy's (NULL: forward).
int pad_geo(dlg_handle *h, const char *op, int ndim, const int64_t *yshape, const int64_t *xshape, const int64_t *a,
            const int64_t *b, const int64_t *lo, PadGeo *g) {
  if (ndim < 0 || ndim > DLG_MAXD) return bad_rank(h, op, ndim);
  memset(g, 0, sizeof *g);
  g->ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    g->yshape[d] = yshape[d];
    g->xshape[d] = xshape[d];
    g->a[d] = a[d];
    g->b[d] = b ? b[d] : 0;
    g->lo[d] = lo[d];
  }
  return DLG_OK;
}
} // namespace

extern "C" int dlg_gather(dlg_handle *h, int elem_size, int ndim, const int64_t *shape, int dim, void *y,
                          const void *x, const int64_t *xstrides, int64_t bound, const int64_t *ix) {
  static const char *op = "dlg_gather";
  GatherGeo g;
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8) return bad_size(h, op, elem_size);
  SHAPE_TRY(gather_geo(h, op, ndim, shape, dim, xstrides, bound, &g));
  const int64_t total = prod(ndim, shape);
  if (total <= 0) return DLG_OK;
  const int64_t *dix;
  SHAPE_TRY(stage_ix(h, ix, total, &dix, op));
  switch (elem_size) {
    case 1: gather_launch<1>(h, g, y, x, dix, total); break;
    case 2: gather_launch<2>(h, g, y, x, dix, total); break;
    case 4: gather_launch<4>(h, g, y, x, dix, total); break;
    default: gather_launch<8>(h, g, y, x, dix, total); break;
  }
  return dlg_launched(h, op);
}

extern "C" int dlg_gather_backward(dlg_handle *h, int dtype, int ndim, const int64_t *shape, int dim, void *gx,
                                   const int64_t *gxstrides, int64_t bound, const void *gy, const int64_t *ix) {
  static const char *op = "dlg_gather_backward";
  GatherGeo g;
  if (dtype != DLG_F32 && dtype != DLG_F64) return bad_dtype(h, op, dtype);
  SHAPE_TRY(gather_geo(h, op, ndim, shape, dim, gxstrides, bound, &g));
  const int64_t n = prod(ndim, shape);
  if (n <= 0) return DLG_OK;
  const int64_t *dix;
  SHAPE_TRY(stage_ix(h, ix, n, &dix, op));
  const int64_t cols = n / g.K; // the positions outside dim (K > 0 since n > 0)
  const unsigned nb = dlg_blocks(h, cols, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_gather_bwd<float>)(g, (float *)gx, (const float *)gy, dix, cols);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_gather_bwd<double>)(g, (double *)gx, (const double *)gy, dix, cols);
  return dlg_launched(h, op);
}

extern "C" int dlg_pad(dlg_handle *h, int elem_size, int ndim, const int64_t *yshape, void *y, const void *x,
                       const int64_t *xshape, const int64_t *xstrides, const int64_t *lo, const void *fill) {
  static const char *op = "dlg_pad";
  PadGeo g;
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8) return bad_size(h, op, elem_size);
  SHAPE_TRY(pad_geo(h, op, ndim, yshape, xshape, xstrides, NULL, lo, &g));
  const int64_t total = prod(ndim, yshape);
  if (total <= 0) return DLG_OK;
  switch (elem_size) {
    case 1: pad_launch<1>(h, g, y, x, fill, total); break;
    case 2: pad_launch<2>(h, g, y, x, fill, total); break;
    case 4: pad_launch<4>(h, g, y, x, fill, total); break;
    default: pad_launch<8>(h, g, y, x, fill, total); break;
  }
  return dlg_launched(h, op);
}

extern "C" int dlg_pad_backward(dlg_handle *h, int dtype, int ndim, const int64_t *xshape, void *gx,
                                const int64_t *gxstrides, const int64_t *yshape, const void *gy,
                                const int64_t *gystrides, const int64_t *lo) {
  static const char *op = "dlg_pad_backward";
  PadGeo g;
  if (dtype != DLG_F32 && dtype != DLG_F64) return bad_dtype(h, op, dtype);
  SHAPE_TRY(pad_geo(h, op, ndim, yshape, xshape, gxstrides, gystrides, lo, &g));
  const int64_t total = prod(ndim, xshape);
  if (total <= 0 || prod(ndim, yshape) <= 0) return DLG_OK;
  const unsigned nb = dlg_blocks(h, total, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_pad_bwd<float>)(g, (float *)gx, (const float *)gy, total);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_pad_bwd<double>)(g, (double *)gx, (const double *)gy, total);
  return dlg_launched(h, op);
}
