/* dl/ops/loss.h - see dl/ops.h. */
