/* dl/ops/sparse.h - see dl/ops.h. */
