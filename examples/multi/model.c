/* examples/multi/model.c - the network (see mlp.h). */
#include "mlp.h"

dl_model *mlp_make(dl_ctx *ctx, uint64_t seed, int64_t hidden) {
  dl_model *m = dl_model_make(ctx, &(dl_model_desc){.dtype = DL_F32, .seed = seed});
  dl_flatten_make(m, NULL, NULL, 1);                                              /* [B,1,28,28] -> [B,784] */
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = 28 * 28, .out = hidden}); /* "1.weight", "1.bias" */
  dl_act_make(m, NULL, NULL, DL_ACT_RELU, 0);
  dl_linear_make(m, NULL, NULL, &(dl_linear_desc){.in = hidden, .out = 10});      /* "3.*" */
  return m; /* NULL or a failed status: dl_model_status says which */
}
