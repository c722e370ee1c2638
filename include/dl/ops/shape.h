/* dl/ops/shape.h - see dl/ops.h. */
