// src_gpu/sparse.cu - embedding, the row scatter of its backward, and
// dropout on the device: the ABI of dl/gpu/sparse.h, for ops/sparse.h.
#include "engine.h"

namespace {

// >>embedding, row scatter, dropout

template <typename T>
__host__ __device__ __forceinline__ void gather_at(T *__restrict__ y, const T *__restrict__ w, int64_t s0, int64_t s1,
                                                   int64_t V, int64_t D, const int64_t *__restrict__ rows, int64_t k) {
  const int64_t i = k / D, j = k - i * D, r = rows[i];
  y[k] = (r >= 0 && r < V) ? w[r * s0 + j * s1] : (T)0;
}
template <typename T>
__global__ void k_gather(T *__restrict__ y, const T *__restrict__ w, int64_t s0, int64_t s1, int64_t V, int64_t D,
                         const int64_t *__restrict__ rows, int64_t n) {
  GRID_STRIDE(k, n * D) gather_at(y, w, s0, s1, V, D, rows, k);
}
// Element k of the batch gather (dlg_batch_gather): row rows[k / D] of x [V, D], converted.
template <typename T, int CONVERT>
__host__ __device__ __forceinline__ void batch_gather_at(T *__restrict__ y, const void *__restrict__ x, int64_t V,
                                                         int64_t D, const int64_t *__restrict__ rows,
                                                         const T *__restrict__ lut, T mul, T add, int64_t k) {
  const int64_t i = k / D, j = k - i * D, r = rows[i];
  if (r < 0 || r >= V) {
    y[k] = (T)0;
    return;
  }
  if (CONVERT == 1) y[k] = lut[((const uint8_t *)x)[r * D + j]];
  else if (CONVERT == 2) y[k] = radd(rmul(((const T *)x)[r * D + j], mul), add);
  else y[k] = ((const T *)x)[r * D + j];
}
template <typename T, int CONVERT>
__global__ void k_batch_gather(T *__restrict__ y, const void *__restrict__ x, int64_t V, int64_t D,
                               const int64_t *__restrict__ rows, const T *__restrict__ lut, T mul, T add, int64_t n) {
  GRID_STRIDE(k, n * D) batch_gather_at<T, CONVERT>(y, x, V, D, rows, lut, mul, add, k);
}
// The groups of dlg_rows_scatter, built on the host: the indices i with a
// key in [0, nrows), stably sorted by key, then one group per distinct key,
// into all = [dst_row (ng) | beg (ng + 1) | order (m)]: group q adds src
// rows order[beg[q] .. beg[q+1]) into dst row dst_row[q]. Returns ng (0:
// nothing to add; all is then empty).
int64_t scatter_plan(const int64_t *key, int64_t n, int64_t nrows, std::vector<int64_t> &all) {
  std::vector<int64_t> idx;
  all.clear();
  idx.reserve((size_t)n);
  for (int64_t i = 0; i < n; i++)
    if (key[i] >= 0 && key[i] < nrows) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [key](int64_t a, int64_t b) { return key[a] < key[b]; });
  const int64_t m = (int64_t)idx.size();
  if (m == 0) return 0;
  std::vector<int64_t> dst_row, beg;
  for (int64_t p = 0; p < m; p++)
    if (p == 0 || key[idx[(size_t)p]] != key[idx[(size_t)p - 1]]) {
      dst_row.push_back(key[idx[(size_t)p]]);
      beg.push_back(p);
    }
  beg.push_back(m);
  const int64_t ng = (int64_t)dst_row.size();
  all.reserve((size_t)(2 * ng + 1 + m));
  all.insert(all.end(), dst_row.begin(), dst_row.end());
  all.insert(all.end(), beg.begin(), beg.end());
  all.insert(all.end(), idx.begin(), idx.end());
  return ng;
}
// Column j of group q (k = q D + j): its rows added in order, in the dtype.
template <typename T>
__host__ __device__ __forceinline__ void scatter_at(T *__restrict__ dst, int64_t D, const int64_t *__restrict__ dst_row,
                                                    const int64_t *__restrict__ beg,
                                                    const int64_t *__restrict__ order, const T *__restrict__ src,
                                                    int64_t k) {
  const int64_t q = k / D, j = k - q * D;
  T *d = dst + dst_row[q] * D + j;
  T v = *d;
  for (int64_t p = beg[q]; p < beg[q + 1]; p++) v = radd(v, src[order[p] * D + j]);
  *d = v;
}
template <typename T>
__global__ void k_scatter(T *__restrict__ dst, int64_t D, const int64_t *__restrict__ dst_row,
                          const int64_t *__restrict__ beg, const int64_t *__restrict__ order, int64_t ngroups,
                          const T *__restrict__ src) {
  GRID_STRIDE(k, ngroups * D) scatter_at(dst, D, dst_row, beg, order, src, k);
}
template <typename T>
__host__ __device__ __forceinline__ void dropout_at(const T *__restrict__ x, T *__restrict__ y,
                                                    unsigned char *__restrict__ mask, uint64_t key, uint64_t base,
                                                    uint64_t thr, T s, int64_t i) {
  const uint64_t u = mix64(key + (base + (uint64_t)i + 1) * 0x9e3779b97f4a7c15ULL);
  const unsigned char k = (unsigned char)((u >> 11) >= thr);
  mask[i] = k;
  y[i] = rmul(x[i], rmul(s, (T)k));
}
// kb non-null: key and base read from the device (kb[0], kb[1]): while the
// handle records a CUDA graph they travel as bytes, so a new seed each step
// replays the same graph instead of capturing a new one.
template <typename T>
__global__ void k_dropout(int64_t n, const T *__restrict__ x, T *__restrict__ y, unsigned char *__restrict__ mask,
                          uint64_t key, uint64_t base, const uint64_t *__restrict__ kb, uint64_t thr, T s) {
  if (kb) {
    key = kb[0];
    base = kb[1];
  }
  GRID_STRIDE(i, n) dropout_at(x, y, mask, key, base, thr, s, i);
}
template <typename T>
__host__ __device__ __forceinline__ void dropout_apply_at(T *__restrict__ y, const T *__restrict__ x,
                                                          const unsigned char *__restrict__ mask, T s, int accumulate,
                                                          int64_t i) {
  const T v = rmul(x[i], rmul(s, (T)mask[i]));
  y[i] = accumulate ? radd(y[i], v) : v;
}
template <typename T>
__global__ void k_dropout_apply(int64_t n, T *__restrict__ y, const T *__restrict__ x,
                                const unsigned char *__restrict__ mask, T s, int accumulate) {
  GRID_STRIDE(i, n) dropout_apply_at(y, x, mask, s, accumulate, i);
}


} // namespace

#ifndef DLG_HOST_TEST
// ================================================================ the ABI

extern "C" {

int dlg_batch_gather(dlg_handle *h, int ydt, int convert, void *y, const void *x, int64_t V, int64_t D,
                     const int64_t *rows, int64_t count, const void *lut, double mul, double add) {
  static const char *op = "dlg_batch_gather";
  DLG_CHECK_DTYPE(op, ydt);
  if (convert < 0 || convert > 2 || (convert == 1 && !lut))
    return dlg_fail(h, DLG_ERR, "%s: conversion %d (0 copy, 1 table, 2 multiply-add)%s", op, convert,
                    convert == 1 ? " without its table" : "");
  if (count == 0 || D == 0) return DLG_OK;
  const Carve c = carve(sizeof(int64_t) * (size_t)count);
  int64_t *r = NULL;
  DLG_TRY(stage_index(h, op, c, rows, (size_t)count, &r));
  const unsigned nb = dlg_blocks(h, count * D, TPB);
#define DLG_BG(T, C)                                                                                          \
  DLG_LAUNCH(nb, TPB, 0, h->stream, k_batch_gather<T, C>)((T *)y, x, V, D, r, (const T *)lut, (T)mul, (T)add, count)
  if (ydt == DLG_F32) {
    if (convert == 1) DLG_BG(float, 1);
    else if (convert == 2) DLG_BG(float, 2);
    else DLG_BG(float, 0);
  } else {
    if (convert == 1) DLG_BG(double, 1);
    else if (convert == 2) DLG_BG(double, 2);
    else DLG_BG(double, 0);
  }
#undef DLG_BG
  return dlg_launched(h, op);
}

int dlg_embedding_forward(dlg_handle *h, int dtype, void *y, const void *w, int64_t s0, int64_t s1, int64_t V,
                          int64_t D, const int64_t *rows, int64_t n) {
  static const char *op = "dlg_embedding_forward";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0 || D == 0) return DLG_OK;
  const Carve c = carve(sizeof(int64_t) * (size_t)n);
  int64_t *r = NULL;
  DLG_TRY(stage_index(h, op, c, rows, (size_t)n, &r));
  const unsigned nb = dlg_blocks(h, n * D, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_gather<float>)((float *)y, (const float *)w, s0, s1, V, D, r, n);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_gather<double>)((double *)y, (const double *)w, s0, s1, V, D, r, n);
  return dlg_launched(h, op);
}

int dlg_rows_scatter(dlg_handle *h, int dtype, void *dst, int64_t nrows, int64_t D, const int64_t *key, int64_t n,
                     const void *src) {
  static const char *op = "dlg_rows_scatter";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0 || D == 0) return DLG_OK;
  std::vector<int64_t> all; // grouped by key on the host (scatter_plan)
  const int64_t ng = scatter_plan(key, n, nrows, all);
  if (ng == 0) return DLG_OK;
  const Carve c = carve(sizeof(int64_t) * all.size());
  int64_t *d = NULL;
  DLG_TRY(stage_index(h, op, c, all.data(), all.size(), &d));
  const unsigned nb = dlg_blocks(h, ng * D, TPB);
  if (dtype == DLG_F32)
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_scatter<float>)((float *)dst, D, d, d + ng, d + 2 * ng + 1, ng, (const float *)src);
  else
    DLG_LAUNCH(nb, TPB, 0, h->stream, k_scatter<double>)((double *)dst, D, d, d + ng, d + 2 * ng + 1, ng,
                                                 (const double *)src);
  return dlg_launched(h, op);
}

int dlg_dropout(dlg_handle *h, int dtype, int64_t n, const void *x, void *y, unsigned char *mask, uint64_t key,
                uint64_t base, uint64_t thr, double scale) {
  static const char *op = "dlg_dropout";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  const uint64_t *kb = nullptr;
  if (dlg_rec_h == h) { // recording: the seed as bytes (see k_dropout)
    const uint64_t v[2] = {key, base};
    const Carve c = carve(sizeof v);
    DLG_TRY(dlg_ws(h, c.total));
    kb = piece<uint64_t>(h, c, 0);
    DLG_TRY(stage(h, (void *)kb, v, sizeof v, op));
    key = base = 0;
  }
  if (dtype == DLG_F32)
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_dropout<float>)(n, (const float *)x, (float *)y, mask, key, base,
                                                                    kb, thr, (float)scale);
  else
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_dropout<double>)(n, (const double *)x, (double *)y, mask, key,
                                                                     base, kb, thr, scale);
  return dlg_launched(h, op);
}

int dlg_dropout_apply(dlg_handle *h, int dtype, int64_t n, void *y, const void *x, const unsigned char *mask,
                      double scale, int accumulate) {
  static const char *op = "dlg_dropout_apply";
  DLG_CHECK_DTYPE(op, dtype);
  if (n == 0) return DLG_OK;
  if (dtype == DLG_F32)
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_dropout_apply<float>)(n, (float *)y, (const float *)x, mask,
                                                                          (float)scale, accumulate);
  else
    DLG_LAUNCH(dlg_blocks(h, n, TPB), TPB, 0, h->stream, k_dropout_apply<double>)(n, (double *)y, (const double *)x, mask,
                                                                           scale, accumulate);
  return dlg_launched(h, op);
}

} // extern "C"
#endif // DLG_HOST_TEST
