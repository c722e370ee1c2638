/* dl/ops/conv.h - see dl/ops.h. */
