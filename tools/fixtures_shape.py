#!/usr/bin/python3
"""tools/fixtures_shape.py - PyTorch reference values for dl.h's shape ops
(include/dl/ops/shape.h), read by tests/test_ops_shape.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_shape.py      # writes tests/fixtures/shape.txt

Case names are OP.VARIANT; the C test dispatches on OP. Parameters:
    pre         1: the float inputs are transposed (dims 0, 1) before the op,
                so the op sees strided views (gradients are the base's)
    i32         1: the C test passes the indices as i32
    transpose   d0 d1            permute   n p0 .. p{n-1}
    reshape     n s0 .. s{n-1}   flatten   start
    slice       dim start stop step
    index_select, gather   dim (indices in tensor `idx`)
    concat, stack          n dim (inputs x0 .. x{n-1})
    pad         n pad0 .. pad{n-1} value   (n = 2 * pairs)
    contiguous  (always pre 1)
"""
import torch
import torch.nn.functional as F

from fixture_lib import Writer, SEED

OUT = "tests/fixtures/shape.txt"
gen = torch.Generator().manual_seed(SEED)


def rnd(*shape):
    return torch.rand(shape, generator=gen, dtype=torch.float64) * 4 - 2


def pre_t(t, pre):
    return t.transpose(0, 1) if pre else t


def main():
    w = Writer(OUT, "shape ops: transpose permute reshape flatten slice index_select gather "
                    "concat stack pad contiguous")

    # transpose
    for name, shape, d0, d1, pre in [("02", (2, 3, 4), 0, 2, 0), ("neg", (2, 3, 4), -1, -2, 0),
                                     ("pre", (3, 2, 4), 1, 2, 1)]:
        w.op("transpose." + name, lambda x, d0, d1, pre, **k: pre_t(x, pre).transpose(d0, d1),
             {"x": rnd(*shape)}, {"d0": d0, "d1": d1, "pre": pre})

    # permute
    for name, shape, perm, pre in [("201", (2, 3, 4), (2, 0, 1), 0), ("4d", (2, 3, 2, 3), (1, 3, 0, 2), 0),
                                   ("neg", (2, 3, 4), (-1, 0, 1), 0), ("pre", (3, 2, 4), (2, 1, 0), 1)]:
        params = {"n": len(perm), "pre": pre}
        params.update({"p%d" % i: p for i, p in enumerate(perm)})
        w.op("permute." + name, lambda x, pre, perm=perm, **k: pre_t(x, pre).permute(*perm),
             {"x": rnd(*shape)}, params)

    # reshape
    for name, shape, new, pre in [("infer", (2, 3, 4), (4, -1), 0), ("flat", (2, 3, 4), (24,), 0),
                                  ("ones", (2, 3, 4), (2, 1, 12), 0), ("pre", (3, 2, 4), (3, 8), 1),
                                  ("preinfer", (3, 2, 4), (-1, 2, 2), 1)]:
        params = {"n": len(new), "pre": pre}
        params.update({"s%d" % i: s for i, s in enumerate(new)})
        w.op("reshape." + name, lambda x, pre, new=new, **k: pre_t(x, pre).reshape(*new),
             {"x": rnd(*shape)}, params)

    # flatten
    for name, shape, start, pre in [("s1", (2, 3, 2, 2), 1, 0), ("s0", (2, 3, 4), 0, 0),
                                    ("neg", (2, 3, 2, 2), -2, 0), ("last", (2, 3, 4), 2, 0),
                                    ("pre", (3, 2, 4), 1, 1)]:
        w.op("flatten." + name, lambda x, start, pre, **k: torch.flatten(pre_t(x, pre), start),
             {"x": rnd(*shape)}, {"start": start, "pre": pre})

    # slice (Python slicing along one dimension)
    def sl(x, dim, start, stop, step, pre, **k):
        x = pre_t(x, pre)
        d = dim % x.dim()
        return x[(slice(None),) * d + (slice(start, stop, step),)]

    for name, shape, dim, start, stop, step, pre in [
            ("step2", (3, 6, 2), 1, 1, 5, 2, 0), ("neg", (3, 2, 5), -1, -4, -1, 1, 0),
            ("clamp", (7, 3), 0, -100, 100, 3, 0), ("empty", (3, 4, 5), 2, 3, 1, 1, 0),
            ("pre", (3, 6, 2), 0, 1, 6, 2, 1), ("tail", (4, 6), 1, 2, 1000, 1, 0)]:
        w.op("slice." + name, sl, {"x": rnd(*shape)},
             {"dim": dim, "start": start, "stop": stop, "step": step, "pre": pre})

    # index_select (repeated indices accumulate in the gradient)
    for name, shape, dim, idx, pre, i32 in [
            ("dim0", (5, 4), 0, [4, 0, 2, 0], 0, 0), ("dim1", (3, 5, 2), 1, [1, 1, 4], 0, 1),
            ("neg", (3, 4, 2), -1, [1, 0, 1], 0, 0), ("pre", (4, 3, 2), 0, [2, 0, 2, 1, 2], 1, 0),
            ("empty", (3, 4), 1, [], 0, 0)]:
        w.op("index_select." + name,
             lambda x, idx, dim, pre, **k: torch.index_select(pre_t(x, pre), dim, idx),
             {"x": rnd(*shape), "idx": torch.tensor(idx, dtype=torch.int64)},
             {"dim": dim, "pre": pre, "i32": i32})

    # gather: idx has x's rank, sizes <= x's outside dim
    def idx_for(shape, bound):
        return torch.randint(0, bound, shape, generator=gen, dtype=torch.int64)

    for name, xshape, dim, ishape, pre, i32 in [
            ("dim0", (4, 5), 0, (3, 5), 0, 0), ("dim1", (4, 5), 1, (4, 3), 0, 1),
            ("smaller", (3, 4, 5), 1, (2, 6, 3), 0, 0), ("neg", (3, 4, 5), -1, (2, 4, 6), 0, 0),
            ("pre", (5, 3, 2), 0, (4, 2, 2), 1, 0), ("rep1d", (4,), 0, (9,), 0, 0)]:
        xs = list(xshape)
        if pre:
            xs[0], xs[1] = xs[1], xs[0]
        w.op("gather." + name, lambda x, idx, dim, pre, **k: torch.gather(pre_t(x, pre), dim, idx),
             {"x": rnd(*xshape), "idx": idx_for(ishape, xs[dim])},
             {"dim": dim, "pre": pre, "i32": i32})

    # concat
    for name, shapes, dim, pre in [("dim0", [(2, 3), (1, 3), (4, 3)], 0, 0),
                                   ("dim1", [(2, 3, 2), (2, 1, 2), (2, 4, 2)], 1, 0),
                                   ("neg", [(2, 3, 2), (2, 3, 1)], -1, 0),
                                   ("pre", [(3, 2), (3, 1), (3, 2)], 0, 1),
                                   ("one", [(2, 3)], 1, 0)]:
        ins = {"x%d" % i: rnd(*s) for i, s in enumerate(shapes)}
        w.op("concat." + name,
             lambda dim, pre, n, **k: torch.cat([pre_t(k["x%d" % i], pre) for i in range(n)], dim),
             ins, {"n": len(shapes), "dim": dim, "pre": pre})

    # stack
    for name, shape, n, dim, pre in [("dim0", (2, 3), 3, 0, 0), ("dim1", (2, 3), 3, 1, 0),
                                     ("last", (2, 3), 2, 2, 0), ("neg", (2, 3), 3, -1, 0),
                                     ("neg3", (2, 3), 2, -3, 0), ("pre", (3, 2), 2, 1, 1)]:
        ins = {"x%d" % i: rnd(*shape) for i in range(n)}
        w.op("stack." + name,
             lambda dim, pre, n, **k: torch.stack([pre_t(k["x%d" % i], pre) for i in range(n)], dim),
             ins, {"n": n, "dim": dim, "pre": pre})

    # pad (constant): pairs from the last dimension; negative pads crop
    for name, shape, pads, value, pre in [
            ("last", (2, 3, 4), (1, 2), 0.0, 0), ("two", (2, 3, 4), (1, 2, 0, 3), -1.5, 0),
            ("three", (2, 3, 2), (2, 1, 1, 0, 1, 1), 0.25, 0), ("crop", (2, 4, 5), (-1, 2, 1, -2), 3.0, 0),
            ("cropall", (3, 4), (-2, -1), 0.0, 0), ("pre", (4, 3), (1, 1, 2, 0), 0.5, 1)]:
        params = {"n": len(pads), "value": value, "pre": pre}
        params.update({"pad%d" % i: p for i, p in enumerate(pads)})
        w.op("pad." + name, lambda x, value, pre, pads=pads, **k: F.pad(pre_t(x, pre), pads, value=value),
             {"x": rnd(*shape)}, params)

    # contiguous (of a transposed view)
    w.op("contiguous.pre", lambda x, pre, **k: pre_t(x, pre).contiguous(), {"x": rnd(3, 4, 2)}, {"pre": 1})

    w.close()


if __name__ == "__main__":
    main()
