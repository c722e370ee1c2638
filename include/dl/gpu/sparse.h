/* dl/gpu/sparse.h - embedding, row scatter and dropout on the device: the ABI of
 * src_gpu/sparse.cu, for dl/ops/sparse.h. Plain C, with the conventions abi.h
 * states for the kernel families (host index arrays staged through the
 * workspace; sizes of 0 accepted). */
#ifndef DL_GPU_SPARSE_H
#define DL_GPU_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlg_handle dlg_handle;

/* >>embedding, row scatter, dropout (ops/sparse.h) ------------------------- */

/* y [n, D] contiguous = rows of w [V, D] (strides s0, s1 in elements) picked
 * by rows (HOST int64 [n]); a row outside [0, V) gives zeros (the caller
 * checks the range first: this only keeps the kernel inside w). */
int dlg_embedding_forward(dlg_handle *h, int dtype, void *y, const void *w, int64_t s0, int64_t s1, int64_t V,
                          int64_t D, const int64_t *rows, int64_t n);
/* dst[key[i], :] += src[i, :] for i = 0 .. n-1, dst [nrows, D] and src [n, D]
 * contiguous, key HOST int64 [n]. Deterministic and bit-identical to the
 * CPU's loop: the indices are grouped by key on the host (stable, so each
 * row's additions keep index order) and one thread adds a row's column in
 * that order, in the dtype. A key outside [0, nrows) is skipped. Serves the
 * embedding's backward (dense: key = the rows; row-sparse: key = the slots)
 * and dl_sgrad_add_to (dense += the sparse rows: key = s->rows). */
int dlg_rows_scatter(dlg_handle *h, int dtype, void *dst, int64_t nrows, int64_t D, const int64_t *key, int64_t n,
                     const void *src);
/* Inverted dropout, bit-identical to the CPU's mask: element i is kept when
 * (mix64(key + (base + i + 1) * 0x9e3779b97f4a7c15) >> 11) >= thr
 * (core.h's dl_rng_at(rng, base + i) with rng->key = key; thr = ceil(p 2^53)).
 * mask[i] (device bytes) = kept; y[i] = x[i] * ((T)scale * kept); x, y contiguous [n]. */
int dlg_dropout(dlg_handle *h, int dtype, int64_t n, const void *x, void *y, unsigned char *mask, uint64_t key,
                uint64_t base, uint64_t thr, double scale);
/* y[i] = (accumulate ? y[i] : 0) + x[i] * ((T)scale * mask[i]): dropout's
 * backward (accumulate 1: gx += gy * ...) and tangent (0). Bit-identical. */
int dlg_dropout_apply(dlg_handle *h, int dtype, int64_t n, void *y, const void *x, const unsigned char *mask,
                      double scale, int accumulate);

/* The batcher's gather (data.h's dl__batch_gather) on the device: y [count,
 * D] (dtype ydt, DLG_F32 / DLG_F64, contiguous) from the rows `rows` (HOST
 * int64 [count], each in [0, V); outside: zeros) of x [V, D] (contiguous),
 *   convert 0: y = x (x of ydt too: the bytes copied)
 *   convert 1: y = lut[x], x u8 (lut: 256 values of ydt on the device)
 *   convert 2: y = x * mul + add, x of ydt, rounded as two operations (no
 *              fused multiply-add: the host's bits)
 * so a batch made here is bit for bit the host batcher's. */
int dlg_batch_gather(dlg_handle *h, int ydt, int convert, void *y, const void *x, int64_t V, int64_t D,
                     const int64_t *rows, int64_t count, const void *lut, double mul, double add);

#ifdef __cplusplus
}
#endif

#endif /* DL_GPU_SPARSE_H */
