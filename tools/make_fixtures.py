#!/usr/bin/python3
"""tools/make_fixtures.py - PyTorch reference values for dl.h's element-wise ops.

Run from the repository root with the Python that has torch:

    /usr/bin/python3 tools/make_fixtures.py            # writes tests/fixtures/ops.txt

For every op in include/dl/expr.h's DL_OPS_UNARY / DL_OPS_UNARY_P /
DL_OPS_BINARY lists it writes PyTorch's forward values and the input
gradients of sum(y * gy) (autograd), once computed in float64 and once with
the same inputs cast to float32 and computed by torch in float32.
Deterministic: fixed seed, inputs drawn in float64.

File format (read by tests/fixtures.h), one block per case:

    case NAME P0 NIN DTYPE          DTYPE is f64 or f32
    shape NDIM D0 D1 ...            one line per input, then one for y
    x0 v v v ...                    row-major values; x1 for binary ops
    y v ...
    gy v ...                        upstream gradient (shape of y)
    g0 v ...                        d sum(y*gy) / d x0 (shape of x0)
    g1 v ...                        binary ops only
    end

Values are printed round-trip exact: %.17g for f64, %.9g for f32.
Lines starting with # are comments.
"""
import os
import re
import sys

import torch
import torch.nn.functional as F

SEED = 20240601
OUT = os.path.join("tests", "fixtures", "ops.txt")
EXPR_H = os.path.join("include", "dl", "expr.h")

# Input domains: (lo, hi) uniform, or "normal" (scaled standard normal).
# "away0" pushes values away from 0 (kinks at 0), "pos" keeps them positive.
UNARY = {
    "neg": (lambda x: -x, ("normal", 1.5)),
    "exp": (torch.exp, ("normal", 1.0)),
    "log": (torch.log, ("uniform", 0.2, 3.0)),
    "log1p": (torch.log1p, ("uniform", -0.5, 3.0)),
    "expm1": (torch.expm1, ("normal", 1.0)),
    "sin": (torch.sin, ("normal", 2.0)),
    "cos": (torch.cos, ("normal", 2.0)),
    "erf": (torch.erf, ("normal", 1.5)),
    "sqrt": (torch.sqrt, ("uniform", 0.2, 3.0)),
    "abs": (torch.abs, ("away0", 1.5)),
    "relu": (torch.relu, ("away0", 1.5)),
    "sigmoid": (torch.sigmoid, ("normal", 2.0)),
    "tanh": (torch.tanh, ("normal", 1.5)),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), ("normal", 1.5)),
    "gelu": (lambda x: F.gelu(x), ("normal", 1.5)),
    "silu": (F.silu, ("normal", 2.0)),
    "softplus": (F.softplus, ("normal", 3.0)),
    "square": (torch.square, ("normal", 1.5)),
}
UNARY_P = {
    "leaky_relu": (lambda x, p: F.leaky_relu(x, p), 0.1, ("away0", 1.5)),
    "elu": (lambda x, p: F.elu(x, alpha=p), 1.3, ("away0", 1.5)),
    "pow_scalar": (lambda x, p: torch.pow(x, p), 2.5, ("uniform", 0.2, 3.0)),
    "add_scalar": (lambda x, p: x + p, 0.75, ("normal", 1.5)),
    "mul_scalar": (lambda x, p: x * p, -1.5, ("normal", 1.5)),
}
BINARY = {
    "add": (torch.add, ("normal", 1.5), ("normal", 1.5)),
    "sub": (torch.sub, ("normal", 1.5), ("normal", 1.5)),
    "mul": (torch.mul, ("normal", 1.5), ("normal", 1.5)),
    "div": (torch.div, ("normal", 1.5), ("away0", 2.0, 0.4)),
    "pow": (torch.pow, ("uniform", 0.3, 2.5), ("uniform", -2.0, 2.0)),
    "maximum": (torch.maximum, ("normal", 1.5), ("normal", 1.5)),
    "minimum": (torch.minimum, ("normal", 1.5), ("normal", 1.5)),
}
UNARY_SHAPES = [((3, 4),)]
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (4, 3))]
GAP = 1e-3  # no input within GAP of a kink, no max/min tie within GAP


def draw(shape, dom, gen):
    kind = dom[0]
    if kind == "normal":
        return torch.randn(shape, dtype=torch.float64, generator=gen) * dom[1]
    if kind == "uniform":
        lo, hi = dom[1], dom[2]
        return lo + (hi - lo) * torch.rand(shape, dtype=torch.float64, generator=gen)
    if kind == "away0":
        floor = dom[2] if len(dom) > 2 else 0.05
        x = torch.randn(shape, dtype=torch.float64, generator=gen) * dom[1]
        sign = torch.where(x < 0, -1.0, 1.0).to(torch.float64)
        return sign * torch.clamp(x.abs(), min=floor)
    raise ValueError(kind)


def op_lists():
    """Op names in expr.h's three lists, to check this script covers them all."""
    names = {}
    cur = None
    for line in open(EXPR_H):
        m = re.match(r"#define (DL_OPS_\w+)\(X\)", line)
        if m:
            cur = names.setdefault(m.group(1), [])
        if cur is not None:
            cur += re.findall(r"\bX\((\w+),", line)
            if not line.rstrip().endswith("\\"):
                cur = None
    return names


def fmt(t, f64):
    f = "%.17g" if f64 else "%.9g"
    return " ".join(f % v for v in t.detach().reshape(-1).double().tolist())


def shape_line(shape):
    return "shape %d %s" % (len(shape), " ".join(str(d) for d in shape))


def write_case(out, name, p0, fn, xs64, gy64):
    for f64 in (True, False):
        dt = torch.float64 if f64 else torch.float32
        xs = [x.to(dt).clone().requires_grad_(True) for x in xs64]
        gy = gy64.to(dt)
        y = fn(*xs)
        assert y.dtype == dt and y.shape == gy.shape, (name, y.dtype, y.shape)
        grads = torch.autograd.grad((y * gy).sum(), xs)
        out.append("case %s %.17g %d %s" % (name, p0, len(xs), "f64" if f64 else "f32"))
        for x in xs:
            out.append(shape_line(tuple(x.shape)))
        out.append(shape_line(tuple(y.shape)))
        for i, x in enumerate(xs):
            out.append("x%d %s" % (i, fmt(x, f64)))
        out.append("y %s" % fmt(y, f64))
        out.append("gy %s" % fmt(gy, f64))
        for i, g in enumerate(grads):
            out.append("g%d %s" % (i, fmt(g, f64)))
        out.append("end")


def main():
    lists = op_lists()
    for lst in ("DL_OPS_UNARY", "DL_OPS_UNARY_P", "DL_OPS_BINARY"):
        if not lists.get(lst):
            sys.exit("make_fixtures.py: op list %s not found in %s" % (lst, EXPR_H))
    missing = [n for n in lists["DL_OPS_UNARY"] if n not in UNARY]
    missing += [n for n in lists["DL_OPS_UNARY_P"] if n not in UNARY_P]
    missing += [n for n in lists["DL_OPS_BINARY"] if n not in BINARY]
    if missing:
        sys.exit("make_fixtures.py: no PyTorch reference for op(s): %s" % ", ".join(missing))

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    out = ["# tests/fixtures/ops.txt - generated by `/usr/bin/python3 tools/make_fixtures.py`",
           "# (do not edit): PyTorch %s reference values for include/dl/expr.h's op lists," % torch.__version__,
           "# seed %d; y = op(x0[, x1][, p0]), gK = d sum(y*gy)/d xK by autograd;" % SEED,
           "# each case in f64 and again with the inputs cast to f32 and computed by torch in f32."]
    ncases = 0
    for name in lists["DL_OPS_UNARY"] + lists["DL_OPS_UNARY_P"]:
        if name in UNARY:
            fn, dom = UNARY[name]
            p0, call = 0.0, fn
        else:
            f, p0, dom = UNARY_P[name]
            call = (lambda f_, p_: (lambda x: f_(x, p_)))(f, p0)
        for (shape,) in UNARY_SHAPES:
            x = draw(shape, dom, gen)
            gy = torch.randn(shape, dtype=torch.float64, generator=gen)
            write_case(out, name, p0, call, [x], gy)
            ncases += 2
    for name in lists["DL_OPS_BINARY"]:
        fn, d0, d1 = BINARY[name]
        for s0, s1 in BINARY_SHAPES:
            for _ in range(1000):
                x0, x1 = draw(s0, d0, gen), draw(s1, d1, gen)
                a, b = torch.broadcast_tensors(x0, x1)
                if name not in ("maximum", "minimum"):
                    break
                # no ties, in f64 or after the cast to f32
                if (a - b).abs().min() > GAP:
                    break
            else:
                sys.exit("make_fixtures.py: could not draw tie-free inputs for " + name)
            gy = torch.randn(a.shape, dtype=torch.float64, generator=gen)
            write_case(out, name, 0.0, fn, [x0, x1], gy)
            ncases += 2
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote %s: %d cases, %d bytes" % (OUT, ncases, os.path.getsize(OUT)))


if __name__ == "__main__":
    main()
