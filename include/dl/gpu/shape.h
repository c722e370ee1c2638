/* dl/gpu/shape.h - the ABI of src_gpu/shape.cu: index_select, gather and
 * pad (ops/shape.h) on the device. Included by dl/gpu/abi.h; conventions as
 * there (first argument the handle, DLG_OK / DLG_OOM / DLG_ERR with the
 * message in dlg_message, device pointers unless a comment says host, work
 * queued on the handle's stream).
 *
 * These ops only move data, so every result is bit-identical to the CPU's:
 * the forward calls copy elements of elem_size bytes (1, 2, 4 or 8: any
 * dtype); the backward calls ADD (+=) in dtype DLG_F32 / DLG_F64, one
 * rounding per addition, and where several elements add into one place
 * they are added in the CPU's order (increasing index position), by one
 * thread, never with atomics: the results do not vary from run to run.
 *
 * Index arrays are HOST int64 arrays (ops/shape.h checks and converts the
 * user's i64 / i32 indices on the host first); each call copies its array
 * into the handle's workspace before its kernel runs, so the host array may
 * be reused when the call returns. The caller checks their range (the CPU's
 * messages); the kernels still never read or write outside the tensors: an
 * index out of range gives a zero element (forward) or is skipped
 * (backward). Shapes and strides are host arrays of ndim <= DLG_MAXD
 * entries, strides in elements. Sizes of 0 are accepted (nothing done). */
#ifndef DL_GPU_SHAPE_H
#define DL_GPU_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlg_handle dlg_handle; /* as in abi.h (a repeated typedef: C11) */

/* >>index_select --------------------------------------------------------------
 * x contiguous [outer, n, inner], y contiguous [outer, m, inner] (the
 * dimensions before the selected one flattened into outer, those after it
 * into inner); ix: m host indices in [0, n). */

/* y[o, k, :] = x[o, ix[k], :] (ops/shape.h's dl__index_select_fwd). */
int dlg_index_select(dlg_handle *h, int elem_size, void *y, const void *x, int64_t outer, int64_t n, int64_t inner,
                     const int64_t *ix, int64_t m);
/* gx[o, ix[k], :] += gy[o, k, :] for k = 0, 1, ..., m-1 in that order
 * (dl__index_select_bwd): the positions k are grouped by their index on
 * the host, and one thread adds a group's rows into one element of gx. */
int dlg_index_select_backward(dlg_handle *h, int dtype, void *gx, const void *gy, int64_t outer, int64_t n,
                              int64_t inner, const int64_t *ix, int64_t m);

/* >>gather --------------------------------------------------------------------
 * torch.gather along dim (0 <= dim < ndim): shape[ndim] is the index's (and
 * y's / gy's) shape; x (gx) has the same rank, size `bound` at dim and sizes
 * >= shape elsewhere, read (written) through xstrides (gxstrides); ix:
 * numel(shape) host indices in [0, bound), contiguous in shape. */

/* y[p] = x[p with coordinate dim replaced by ix[p]] for every position p of
 * y (contiguous) (dl__gather_fwd). */
int dlg_gather(dlg_handle *h, int elem_size, int ndim, const int64_t *shape, int dim, void *y, const void *x,
               const int64_t *xstrides, int64_t bound, const int64_t *ix);
/* gx[p with coordinate dim replaced by ix[p]] += gy[p], gy contiguous
 * (dl__gather_bwd): one thread per position outside dim adds its
 * shape[dim] terms in order; gx's elements must be distinct (no zero
 * strides). */
int dlg_gather_backward(dlg_handle *h, int dtype, int ndim, const int64_t *shape, int dim, void *gx,
                        const int64_t *gxstrides, int64_t bound, const void *gy, const int64_t *ix);

/* >>pad -----------------------------------------------------------------------
 * Constant padding (dl_t_pad) of x [xshape] into y [yshape], both of rank
 * ndim: lo[d] is the left pad of dimension d (negative: cropped), so y's
 * coordinate c_d holds x's c_d - lo[d]. */

/* y (contiguous) = x where every c_d - lo[d] lies in [0, xshape[d]), else
 * the element at `fill` (a HOST pointer to elem_size bytes: the pad value
 * in the dtype). x read through xstrides. */
int dlg_pad(dlg_handle *h, int elem_size, int ndim, const int64_t *yshape, void *y, const void *x,
            const int64_t *xshape, const int64_t *xstrides, const int64_t *lo, const void *fill);
/* gx[c] += gy[c + lo] for the positions c of gx [xshape] whose c_d + lo[d]
 * lie in [0, yshape[d]); the others (cropped) are left as they are. gx read
 * and written through gxstrides (distinct elements), gy read through
 * gystrides. */
int dlg_pad_backward(dlg_handle *h, int dtype, int ndim, const int64_t *xshape, void *gx, const int64_t *gxstrides,
                     const int64_t *yshape, const void *gy, const int64_t *gystrides, const int64_t *lo);

#ifdef __cplusplus
}
#endif

#endif /* DL_GPU_SHAPE_H */
