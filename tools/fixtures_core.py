#!/usr/bin/python3
"""tools/fixtures_core.py - PyTorch reference values for the ops defined in
include/dl/ops.h itself besides the element-wise list (which
tools/make_fixtures.py covers): clamp, where, matmul (2-d, batched, one
matrix shared by a batch) and linear (2-d and 3-d input, with and without
bias). Read by tests/test_tape.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_core.py     # writes tests/fixtures/core.txt
"""
import torch
import torch.nn.functional as F

from fixture_lib import SEED, Writer


def main():
    w = Writer("tests/fixtures/core.txt", "clamp, where, matmul, linear (include/dl/ops.h)")
    g = torch.Generator().manual_seed(SEED)

    def normal(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    x = normal(4, 5) * 1.5
    # keep values away from the clamp bounds, where the derivative jumps
    x = torch.where((x + 0.5).abs() < 0.05, x + 0.2, x)
    x = torch.where((x - 0.7).abs() < 0.05, x + 0.2, x)
    w.op("clamp", lambda x, lo, hi: torch.clamp(x, lo, hi), {"x": x}, {"lo": -0.5, "hi": 0.7})
    cond = (torch.rand(3, 1, generator=g) > 0.5).to(torch.float64)
    cond[0, 0], cond[1, 0] = 1.0, 0.0
    w.op("where", lambda c, a, b: torch.where(c != 0, a, b),
         {"c": cond, "a": normal(2, 3, 4), "b": normal(4)}, grad_of=["a", "b"])
    w.op("matmul", lambda a, b: a @ b, {"a": normal(3, 4), "b": normal(4, 5)})
    w.op("matmul_batched", lambda a, b: a @ b, {"a": normal(2, 3, 4), "b": normal(2, 4, 5)})
    w.op("matmul_shared", lambda a, b: a @ b, {"a": normal(2, 3, 4), "b": normal(4, 5)})
    w.op("linear", lambda x, w, b: F.linear(x, w, b), {"x": normal(5, 4), "w": normal(6, 4), "b": normal(6)})
    w.op("linear_3d", lambda x, w, b: F.linear(x, w, b), {"x": normal(2, 3, 4), "w": normal(6, 4), "b": normal(6)})
    w.op("linear_nobias", lambda x, w: F.linear(x, w), {"x": normal(5, 4), "w": normal(6, 4)})
    w.close()


if __name__ == "__main__":
    main()
