#!/usr/bin/python3
"""tools/fixtures_reduce.py - PyTorch reference values for dl/ops/reduce.h.

Run from the repository root with Debian's python3 (it has torch):
    /usr/bin/python3 tools/fixtures_reduce.py
Writes tests/fixtures/reduce.txt, read by tests/test_ops_reduce.c.

Each case names the op in its `op` param (1 sum, 2 mean, 3 max, 4 min, 5 var,
6 logsumexp, 7 softmax, 8 log_softmax, 9 sum_all, 10 mean_all) with its
options: naxes and a0, a1, ... (the axes; naxes 0 = all), keepdim,
correction (var), axis (softmax).
"""
import torch

from fixture_lib import Writer

OPS = {"sum": 1, "mean": 2, "max": 3, "min": 4, "var": 5, "logsumexp": 6,
       "softmax": 7, "log_softmax": 8, "sum_all": 9, "mean_all": 10}

g = torch.Generator().manual_seed(20240611)


def randn(*shape, scale=1.0):
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def ties(*shape):
    """Small integers: many exact ties, the same in f32 and f64."""
    return torch.randint(0, 3, shape, generator=g).to(torch.float64)


def reduce_fn(name, axes, keepdim, correction=None):
    dims = tuple(axes) if axes else None

    def fn(x):
        if name == "sum":
            return x.sum(dim=dims, keepdim=keepdim) if dims else (
                x.sum().reshape([1] * x.dim()) if keepdim else x.sum())
        if name == "mean":
            return x.mean(dim=dims, keepdim=keepdim) if dims else (
                x.mean().reshape([1] * x.dim()) if keepdim else x.mean())
        d = dims if dims else tuple(range(x.dim()))
        if name == "max":
            return torch.amax(x, dim=d, keepdim=keepdim)
        if name == "min":
            return torch.amin(x, dim=d, keepdim=keepdim)
        if name == "var":
            return torch.var(x, dim=d, correction=correction, keepdim=keepdim)
        if name == "logsumexp":
            return torch.logsumexp(x, dim=d, keepdim=keepdim)
        raise ValueError(name)
    return fn


def main():
    w = Writer("tests/fixtures/reduce.txt", "reductions and softmax (dl/ops/reduce.h)")

    def red(case, name, x, axes, keepdim, correction=None):
        params = {"op": OPS[name], "naxes": len(axes), "keepdim": int(keepdim)}
        for k, a in enumerate(axes):
            params["a%d" % k] = a
        if correction is not None:
            params["correction"] = float(correction)
        fn = reduce_fn(name, axes, keepdim, correction)
        w.op(case, lambda x, **_: fn(x), {"x": x}, params)

    for name in ("sum", "mean", "max", "min", "var", "logsumexp"):
        corr = 1 if name == "var" else None
        red(name + "_axis0", name, randn(6, 5), [0], False, corr)
        red(name + "_axis1_keep", name, randn(3, 4, 3), [1], True, corr)
        red(name + "_neg_axes", name, randn(2, 3, 2, 4), [-1, 1], False, corr)
        red(name + "_axes02_keep", name, randn(3, 4, 5), [0, 2], True, corr)
        red(name + "_all", name, randn(3, 4), [], False, corr)
        red(name + "_all_keep", name, randn(2, 3, 4), [], True, corr)
        red(name + "_last_1d", name, randn(9), [0], False, corr)
    for name in ("max", "min"):
        red(name + "_ties_axis1", name, ties(5, 6), [1], False)
        red(name + "_ties_axis0_keep", name, ties(6, 4), [0], True)
        red(name + "_ties_all", name, ties(3, 4), [], False)
    red("var_pop_axis1", "var", randn(4, 6), [1], False, 0)
    red("var_pop_all_keep", "var", randn(3, 5), [], True, 0)
    red("var_corr2_axes01", "var", randn(3, 4, 2), [0, 1], False, 2)
    red("var_offset_axis0", "var", randn(7, 3) + 1e4, [0], False, 1)
    red("logsumexp_large", "logsumexp", torch.tensor(
        [[1000.0, -1000.0, 999.0], [-1000.0, -1001.0, -999.5]], dtype=torch.float64), [1], False)

    for name in ("softmax", "log_softmax"):
        f = torch.softmax if name == "softmax" else torch.log_softmax
        for case, x, axis in (("last", randn(5, 7), -1),
                              ("axis0", randn(6, 3), 0),
                              ("middle", randn(2, 5, 3), 1),
                              ("first3d", randn(4, 2, 3), 0),
                              ("1d", randn(11), 0),
                              ("wide", randn(2, 37), 1),
                              ("long", randn(2, 70), -1),
                              ("ones", randn(4, 1), 1),
                              ("large", randn(3, 6, scale=1e4), -1)):
            w.op("%s_%s" % (name, case), lambda x, axis, op, f=f: f(x, dim=axis), {"x": x},
                 {"op": OPS[name], "axis": axis})

    w.op("sum_all_fn", lambda x, op: x.sum(), {"x": randn(4, 5)}, {"op": OPS["sum_all"]})
    w.op("mean_all_fn", lambda x, op: x.mean(), {"x": randn(2, 3, 4)}, {"op": OPS["mean_all"]})
    w.close()


if __name__ == "__main__":
    main()
