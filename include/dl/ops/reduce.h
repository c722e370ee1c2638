/* dl/ops/reduce.h - see dl/ops.h. */
