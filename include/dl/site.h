/* dl/site.h - the caller's file:line in every panic of a public op or layer.
 *
 * dl.h includes this header last. Each public op (dl_t_*, the element-wise
 * list's included), dl_model_forward, dl_layer_call and each layer
 * constructor becomes a macro of the same name that records the caller's
 * __FILE__ and __LINE__ (core.h's call site, per thread) around the call:
 *
 *   prog.c:41   y = dl_t_matmul(&tp, a, w);
 *   dl: dl_t_matmul: shape mismatch: f32[8, 3] @ f32[4, 2] [raised at include/dl/ops/core.h:399] (prog.c:41)
 *
 * and a panic handler (dl_ctx_desc.panic) receives prog.c and 41. In a
 * nested expression the outermost call's line is the one recorded. The
 * macros are function-like: the names stay functions everywhere else
 * (&dl_t_matmul, a call through a pointer, (dl_t_matmul)(...) without
 * the site). The library's own calls come before this header, so they are
 * plain calls. tests/test_site.c checks that every public dl_t_* function
 * and layer constructor has its macro here. A program that jumps out of a
 * wrapped call with its own longjmp calls dl_site_reset() after it (core.h).
 * Inside a Module's forward, the ops it calls are nested in the outer
 * dl_model_forward call: an error there names the dl_model_forward line
 * (and the library's line and the layer's name), not the line inside the
 * forward function.
 */
#ifndef DL_SITE_H
#define DL_SITE_H

#include "layers.h"
#include "transformer.h"

#ifndef DL__SCALAR_ONLY
DL__HEADER_BEGIN

DL__INL dl_tensor *dl__site_t(dl_tensor *t) {
  dl__site_leave();
  return t;
}
DL__INL dl_layer *dl__site_l(dl_layer *l) {
  dl__site_leave();
  return l;
}
/* fn(...) with the caller's site entered before and left after. */
#define DL__AT_T(fn, ...) (dl__site_enter(__FILE__, __LINE__), dl__site_t(fn(__VA_ARGS__)))
#define DL__AT_L(fn, ...) (dl__site_enter(__FILE__, __LINE__), dl__site_l(fn(__VA_ARGS__)))

/* the ops with their own definitions */
#define dl_t_act(...) DL__AT_T(dl_t_act, __VA_ARGS__)
#define dl_t_attention_qkv(...) DL__AT_T(dl_t_attention_qkv, __VA_ARGS__)
#define dl_t_avg_pool2d(...) DL__AT_T(dl_t_avg_pool2d, __VA_ARGS__)
#define dl_t_avg_pool3d(...) DL__AT_T(dl_t_avg_pool3d, __VA_ARGS__)
#define dl_t_batch_norm(...) DL__AT_T(dl_t_batch_norm, __VA_ARGS__)
#define dl_t_bce_with_logits(...) DL__AT_T(dl_t_bce_with_logits, __VA_ARGS__)
#define dl_t_clamp(...) DL__AT_T(dl_t_clamp, __VA_ARGS__)
#define dl_t_concat(...) DL__AT_T(dl_t_concat, __VA_ARGS__)
#define dl_t_contiguous(...) DL__AT_T(dl_t_contiguous, __VA_ARGS__)
#define dl_t_conv1d(...) DL__AT_T(dl_t_conv1d, __VA_ARGS__)
#define dl_t_conv2d(...) DL__AT_T(dl_t_conv2d, __VA_ARGS__)
#define dl_t_conv3d(...) DL__AT_T(dl_t_conv3d, __VA_ARGS__)
#define dl_t_cross_entropy(...) DL__AT_T(dl_t_cross_entropy, __VA_ARGS__)
#define dl_t_custom(...) DL__AT_T(dl_t_custom, __VA_ARGS__)
#define dl_t_dropout(...) DL__AT_T(dl_t_dropout, __VA_ARGS__)
#define dl_t_embedding(...) DL__AT_T(dl_t_embedding, __VA_ARGS__)
#define dl_t_flatten(...) DL__AT_T(dl_t_flatten, __VA_ARGS__)
#define dl_t_gather(...) DL__AT_T(dl_t_gather, __VA_ARGS__)
#define dl_t_gru(...) DL__AT_T(dl_t_gru, __VA_ARGS__)
#define dl_t_gru_ex(...) DL__AT_T(dl_t_gru_ex, __VA_ARGS__)
#define dl_t_huber(...) DL__AT_T(dl_t_huber, __VA_ARGS__)
#define dl_t_index_select(...) DL__AT_T(dl_t_index_select, __VA_ARGS__)
#define dl_t_layer_norm(...) DL__AT_T(dl_t_layer_norm, __VA_ARGS__)
#define dl_t_linear(...) DL__AT_T(dl_t_linear, __VA_ARGS__)
#define dl_t_log_softmax(...) DL__AT_T(dl_t_log_softmax, __VA_ARGS__)
#define dl_t_logsumexp(...) DL__AT_T(dl_t_logsumexp, __VA_ARGS__)
#define dl_t_lstm(...) DL__AT_T(dl_t_lstm, __VA_ARGS__)
#define dl_t_lstm_ex(...) DL__AT_T(dl_t_lstm_ex, __VA_ARGS__)
#define dl_t_matmul(...) DL__AT_T(dl_t_matmul, __VA_ARGS__)
#define dl_t_max(...) DL__AT_T(dl_t_max, __VA_ARGS__)
#define dl_t_max_pool2d(...) DL__AT_T(dl_t_max_pool2d, __VA_ARGS__)
#define dl_t_max_pool2d_with_indices(...) DL__AT_T(dl_t_max_pool2d_with_indices, __VA_ARGS__)
#define dl_t_max_pool3d(...) DL__AT_T(dl_t_max_pool3d, __VA_ARGS__)
#define dl_t_max_unpool2d(...) DL__AT_T(dl_t_max_unpool2d, __VA_ARGS__)
#define dl_t_mean(...) DL__AT_T(dl_t_mean, __VA_ARGS__)
#define dl_t_mean_all(...) DL__AT_T(dl_t_mean_all, __VA_ARGS__)
#define dl_t_min(...) DL__AT_T(dl_t_min, __VA_ARGS__)
#define dl_t_mse(...) DL__AT_T(dl_t_mse, __VA_ARGS__)
#define dl_t_multi_head_attention(...) DL__AT_T(dl_t_multi_head_attention, __VA_ARGS__)
#define dl_t_nll(...) DL__AT_T(dl_t_nll, __VA_ARGS__)
#define dl_t_pad(...) DL__AT_T(dl_t_pad, __VA_ARGS__)
#define dl_t_permute(...) DL__AT_T(dl_t_permute, __VA_ARGS__)
#define dl_t_reshape(...) DL__AT_T(dl_t_reshape, __VA_ARGS__)
#define dl_t_rms_norm(...) DL__AT_T(dl_t_rms_norm, __VA_ARGS__)
#define dl_t_rnn(...) DL__AT_T(dl_t_rnn, __VA_ARGS__)
#define dl_t_rnn_ex(...) DL__AT_T(dl_t_rnn_ex, __VA_ARGS__)
#define dl_t_rope(...) DL__AT_T(dl_t_rope, __VA_ARGS__)
#define dl_t_scaled_dot_product_attention(...) DL__AT_T(dl_t_scaled_dot_product_attention, __VA_ARGS__)
#define dl_t_slice(...) DL__AT_T(dl_t_slice, __VA_ARGS__)
#define dl_t_smooth_l1(...) DL__AT_T(dl_t_smooth_l1, __VA_ARGS__)
#define dl_t_softmax(...) DL__AT_T(dl_t_softmax, __VA_ARGS__)
#define dl_t_stack(...) DL__AT_T(dl_t_stack, __VA_ARGS__)
#define dl_t_sum(...) DL__AT_T(dl_t_sum, __VA_ARGS__)
#define dl_t_sum_all(...) DL__AT_T(dl_t_sum_all, __VA_ARGS__)
#define dl_t_transpose(...) DL__AT_T(dl_t_transpose, __VA_ARGS__)
#define dl_t_var(...) DL__AT_T(dl_t_var, __VA_ARGS__)
#define dl_t_where(...) DL__AT_T(dl_t_where, __VA_ARGS__)

/* the element-wise list (DL_OPS_UNARY, DL_OPS_UNARY_P, DL_OPS_BINARY) */
#define dl_t_neg(...) DL__AT_T(dl_t_neg, __VA_ARGS__)
#define dl_t_exp(...) DL__AT_T(dl_t_exp, __VA_ARGS__)
#define dl_t_log(...) DL__AT_T(dl_t_log, __VA_ARGS__)
#define dl_t_log1p(...) DL__AT_T(dl_t_log1p, __VA_ARGS__)
#define dl_t_expm1(...) DL__AT_T(dl_t_expm1, __VA_ARGS__)
#define dl_t_sin(...) DL__AT_T(dl_t_sin, __VA_ARGS__)
#define dl_t_cos(...) DL__AT_T(dl_t_cos, __VA_ARGS__)
#define dl_t_erf(...) DL__AT_T(dl_t_erf, __VA_ARGS__)
#define dl_t_sqrt(...) DL__AT_T(dl_t_sqrt, __VA_ARGS__)
#define dl_t_abs(...) DL__AT_T(dl_t_abs, __VA_ARGS__)
#define dl_t_relu(...) DL__AT_T(dl_t_relu, __VA_ARGS__)
#define dl_t_sigmoid(...) DL__AT_T(dl_t_sigmoid, __VA_ARGS__)
#define dl_t_tanh(...) DL__AT_T(dl_t_tanh, __VA_ARGS__)
#define dl_t_gelu_tanh(...) DL__AT_T(dl_t_gelu_tanh, __VA_ARGS__)
#define dl_t_gelu(...) DL__AT_T(dl_t_gelu, __VA_ARGS__)
#define dl_t_silu(...) DL__AT_T(dl_t_silu, __VA_ARGS__)
#define dl_t_softplus(...) DL__AT_T(dl_t_softplus, __VA_ARGS__)
#define dl_t_square(...) DL__AT_T(dl_t_square, __VA_ARGS__)
#define dl_t_leaky_relu(...) DL__AT_T(dl_t_leaky_relu, __VA_ARGS__)
#define dl_t_elu(...) DL__AT_T(dl_t_elu, __VA_ARGS__)
#define dl_t_pow_scalar(...) DL__AT_T(dl_t_pow_scalar, __VA_ARGS__)
#define dl_t_add_scalar(...) DL__AT_T(dl_t_add_scalar, __VA_ARGS__)
#define dl_t_mul_scalar(...) DL__AT_T(dl_t_mul_scalar, __VA_ARGS__)
#define dl_t_add(...) DL__AT_T(dl_t_add, __VA_ARGS__)
#define dl_t_sub(...) DL__AT_T(dl_t_sub, __VA_ARGS__)
#define dl_t_mul(...) DL__AT_T(dl_t_mul, __VA_ARGS__)
#define dl_t_div(...) DL__AT_T(dl_t_div, __VA_ARGS__)
#define dl_t_pow(...) DL__AT_T(dl_t_pow, __VA_ARGS__)
#define dl_t_maximum(...) DL__AT_T(dl_t_maximum, __VA_ARGS__)
#define dl_t_minimum(...) DL__AT_T(dl_t_minimum, __VA_ARGS__)

/* models and layers */
#define dl_model_forward(...) DL__AT_T(dl_model_forward, __VA_ARGS__)
#define dl_layer_call(...) DL__AT_T(dl_layer_call, __VA_ARGS__)
#define dl_block_forward(...) DL__AT_T(dl_block_forward, __VA_ARGS__)
#define dl_gpt_forward(...) DL__AT_T(dl_gpt_forward, __VA_ARGS__)
#define dl_sequential_make(...) DL__AT_L(dl_sequential_make, __VA_ARGS__)
#define dl_module_make(...) DL__AT_L(dl_module_make, __VA_ARGS__)
#define dl_act_make(...) DL__AT_L(dl_act_make, __VA_ARGS__)
#define dl_residual_make(...) DL__AT_L(dl_residual_make, __VA_ARGS__)
#define dl_linear_make(...) DL__AT_L(dl_linear_make, __VA_ARGS__)
#define dl_conv2d_make(...) DL__AT_L(dl_conv2d_make, __VA_ARGS__)
#define dl_conv3d_make(...) DL__AT_L(dl_conv3d_make, __VA_ARGS__)
#define dl_conv1d_make(...) DL__AT_L(dl_conv1d_make, __VA_ARGS__)
#define dl_maxpool2d_make(...) DL__AT_L(dl_maxpool2d_make, __VA_ARGS__)
#define dl_maxpool3d_make(...) DL__AT_L(dl_maxpool3d_make, __VA_ARGS__)
#define dl_avgpool2d_make(...) DL__AT_L(dl_avgpool2d_make, __VA_ARGS__)
#define dl_avgpool3d_make(...) DL__AT_L(dl_avgpool3d_make, __VA_ARGS__)
#define dl_global_avgpool_make(...) DL__AT_L(dl_global_avgpool_make, __VA_ARGS__)
#define dl_flatten_make(...) DL__AT_L(dl_flatten_make, __VA_ARGS__)
#define dl_dropout_make(...) DL__AT_L(dl_dropout_make, __VA_ARGS__)
#define dl_embedding_make(...) DL__AT_L(dl_embedding_make, __VA_ARGS__)
#define dl_batchnorm1d_make(...) DL__AT_L(dl_batchnorm1d_make, __VA_ARGS__)
#define dl_batchnorm2d_make(...) DL__AT_L(dl_batchnorm2d_make, __VA_ARGS__)
#define dl_layernorm_make(...) DL__AT_L(dl_layernorm_make, __VA_ARGS__)
#define dl_rmsnorm_make(...) DL__AT_L(dl_rmsnorm_make, __VA_ARGS__)
#define dl_rnn_make(...) DL__AT_L(dl_rnn_make, __VA_ARGS__)
#define dl_lstm_make(...) DL__AT_L(dl_lstm_make, __VA_ARGS__)
#define dl_gru_make(...) DL__AT_L(dl_gru_make, __VA_ARGS__)
#define dl_mha_make(...) DL__AT_L(dl_mha_make, __VA_ARGS__)
#define dl_block_make(...) DL__AT_L(dl_block_make, __VA_ARGS__)
#define dl_gpt_make(...) DL__AT_L(dl_gpt_make, __VA_ARGS__)

DL__HEADER_END
#endif /* !DL__SCALAR_ONLY */

#endif /* DL_SITE_H */
