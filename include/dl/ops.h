/* dl/ops.h - the differentiable op library: every op takes the tape first,
 * returns its output in the tape's arena (valid until dl_tape_rewind),
 * records its backward rule when an input requires a gradient, and
 * propagates forward-mode tangents when an input carries one.
 *
 *   dl_tensor *h = dl_t_relu(tp, dl_t_linear(tp, x, w1, b1));
 *   dl_tensor *loss = dl_t_cross_entropy(tp, dl_t_linear(tp, h, w2, b2), labels, 0.0,
 *                                        DL_REDUCE_MEAN);
 *
 * Names: dl_t_NAME. (The short names dl_exp, dl_add ... are dual.h's scalar
 * generic math; dl_NAME_into / dl_NAME_backward / dl_NAME_jvp are expr.h's
 * tensor-level loops the tape ops are made of.)
 * Inputs are f32 or f64, all of one dtype (mixing panics, naming both
 * shapes); integer inputs (labels, indices) are i64 or i32. Inputs may be
 * strided views unless an op says otherwise; outputs are contiguous except
 * the views ops/shape.h documents. Note: tensor.h's dl_view_* views carry no
 * history (a view of a parameter does not require a gradient); on tensors
 * that need gradients use dl_t_transpose, dl_t_slice, dl_t_reshape ...
 *
 * Where each op lives (one file each, under dl/ops/):
 *   ops/core.h       element-wise ops from expr.h's list (DL_OPS_*: neg exp
 *                    log log1p expm1 sin cos erf sqrt abs relu sigmoid tanh gelu_tanh gelu silu
 *                    softplus square | leaky_relu elu pow_scalar add_scalar
 *                    mul_scalar | add sub mul div pow maximum minimum), clamp,
 *                    where, user element-wise ops (DL_T_MAP1/1P/2),
 *                    matmul / batched matmul, linear
 *   ops/shape.h      transpose, permute, reshape, flatten, slice,
 *                    index_select, gather, concat, stack, pad, contiguous
 *   ops/reduce.h     sum, mean, max, min, var, logsumexp along axes;
 *                    softmax, log_softmax
 *   ops/loss.h       mse, cross_entropy (label smoothing), bce_with_logits,
 *                    nll, huber / smooth_l1
 *   ops/conv.h       conv1d, conv2d, conv3d (stride, padding, dilation,
 *                    groups; explicit and SAME padding),
 *                    max_pool2d (dilation, ceil_mode, explicit and SAME
 *                    padding; with_indices), avg_pool2d, max_unpool2d,
 *                    max_pool3d (dilation, ceil_mode), avg_pool3d
 *   ops/sparse.h     embedding (row-sparse weight gradient), dropout
 *   ops/rnn.h        rnn (tanh / relu), lstm, gru: one layer, batch-first
 *   ops/attention.h  multi_head_attention (PyTorch layout, masks, causal),
 *                    scaled_dot_product_attention (fused, linear memory),
 *                    attention_qkv (heads read in place from [B, T, 3C]), rope
 *   ops/norm.h       batch_norm (running statistics), layer_norm, rms_norm
 *
 * On the GPU (DL_USE_CUDA, dl/gpu.h): each op branches to its GPU path
 * inside its own function, after its checks, when its tensors are on the
 * device (the kernels: src_gpu/, their interface: dl/gpu/abi.h).
 */
#ifndef DL_OPS_H
#define DL_OPS_H

#include "tape.h"
DL__HEADER_BEGIN

#include "ops/core.h"
#include "ops/shape.h"
#include "ops/reduce.h"
#include "ops/loss.h"
#include "ops/conv.h"
#include "ops/sparse.h"
#include "ops/rnn.h"
#include "ops/attention.h"
#include "ops/norm.h"

DL__HEADER_END
#endif /* DL_OPS_H */
