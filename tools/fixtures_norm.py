#!/usr/bin/python3
"""tools/fixtures_norm.py - PyTorch reference values for dl.h's normalisation
ops (include/dl/ops/norm.h), read by tests/test_ops_norm.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_norm.py     # writes tests/fixtures/norm.txt

Every case comes in f64 and f32 (the f32 inputs are the f64 ones rounded).
Keys: inputs x, w, b (absent when affine is off), rm, rv (running statistics
before the call, absent without them); outputs y, the upstream gradient gy,
the gradients g_x, g_w, g_b of sum(y * gy), and rm_out, rv_out (running
statistics after the call). Params: training, momentum, eps, nnorm.

- batch_norm (torch.nn.functional.batch_norm): x 2-d, 3-d and 4-d; affine or
  not; training with running statistics (updated in place; compared after the
  call), evaluation with running statistics, and no running statistics with
  training=0 (what nn.BatchNorm with track_running_stats=False does in eval():
  batch statistics, i.e. F.batch_norm(training=True) without running stats).
- bn_running_m*: three consecutive training calls on x1, x2, x3 (momentum 0.1
  and 0.3), running statistics after each (rm1, rv1 ... rm3, rv3), y3.
- layer_norm (F.layer_norm, normalized_shape = x.shape[-nnorm:]): nnorm 1
  and 2, affine or not.
- rms_norm: torch 1.13 has no nn.RMSNorm; the reference is computed with
  torch autograd from the formula y = x * rsqrt(mean(x^2 over the last nnorm
  dims) + eps) * w, which is what torch 2.4's nn.RMSNorm computes.
"""
import torch
import torch.nn.functional as F

from fixture_lib import SEED, Writer

DTYPES = (torch.float64, torch.float32)


def rms_norm(x, nnorm, w, eps):
    dims = tuple(range(x.dim() - nnorm, x.dim()))
    y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
    return y * w if w is not None else y


def main():
    out = Writer("tests/fixtures/norm.txt", "normalisation (include/dl/ops/norm.h)")
    g = torch.Generator().manual_seed(SEED)

    def normal(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift

    def uniform(*shape, lo=0.0, hi=1.0):
        return lo + (hi - lo) * torch.rand(*shape, generator=g, dtype=torch.float64)

    def emit(name, inputs, params, fn, grad_keys):
        """inputs: dict of f64 tensors (None: absent); fn(ins) -> y, with
        running statistics (rm, rv) updated in place when given."""
        gg = torch.Generator().manual_seed(SEED + 7 * out.n)
        gy64 = None
        for dt in DTYPES:
            ins = {k: (v.to(dt).clone() if v is not None else None) for k, v in inputs.items()}
            before = {k: v.clone() for k, v in ins.items() if v is not None}
            for k in grad_keys:
                if ins.get(k) is not None:
                    ins[k].requires_grad_(True)
            y = fn(ins)
            if gy64 is None:
                gy64 = torch.rand(y.shape, generator=gg, dtype=torch.float64) * 2 - 1
            gy = gy64.to(dt)
            keys = [k for k in grad_keys if ins.get(k) is not None]
            grads = torch.autograd.grad((y * gy).sum(), [ins[k] for k in keys])
            tensors = [(k, v) for k, v in before.items()]
            tensors += [("y", y), ("gy", gy)]
            tensors += [("g_" + k, gk) for k, gk in zip(keys, grads)]
            for k in ("rm", "rv"):
                if ins.get(k) is not None:
                    tensors.append((k + "_out", ins[k]))
            out.case(name, dt, params, tensors)

    # batch norm: shapes x modes x affine
    shapes = {"2d": (6, 4), "3d": (3, 3, 4), "4d": (2, 3, 2, 3)}
    modes = ["train", "eval", "notrack"]
    for sname, shape in shapes.items():
        C = shape[1]
        for mode in modes:
            for affine in (1, 0):
                mom = 0.1 if sname != "3d" else 0.3
                eps = 1e-5 if sname != "2d" else 1e-3
                x = normal(*shape, scale=1.5, shift=0.7)
                inputs = {
                    "x": x,
                    "w": normal(C, scale=0.5, shift=1.0) if affine else None,
                    "b": normal(C, scale=0.5) if affine else None,
                    "rm": normal(C, scale=0.3) if mode != "notrack" else None,
                    "rv": uniform(C, lo=0.5, hi=2.0) if mode != "notrack" else None,
                }
                training = 1 if mode == "train" else 0
                params = {"training": training, "momentum": mom, "eps": eps, "affine": affine,
                          "track": int(mode != "notrack")}

                def fn(ins, training=training, mom=mom, eps=eps, mode=mode):
                    # no running statistics: batch statistics whatever `training` says
                    return F.batch_norm(ins["x"], ins["rm"], ins["rv"], ins["w"], ins["b"],
                                        training=bool(training) or mode == "notrack",
                                        momentum=mom, eps=eps)

                out_name = "bn_%s_%s_%s" % (sname, mode, "affine" if affine else "plain")
                emit(out_name, inputs, params, fn, ["x", "w", "b"])

    # running statistics over three consecutive training calls
    for mom in (0.1, 0.3):
        shape = (3, 3, 2, 2)
        xs = [normal(*shape, scale=2.0, shift=0.5 * i) for i in range(3)]
        rm0, rv0 = normal(3, scale=0.2), uniform(3, lo=0.5, hi=1.5)
        w0, b0 = normal(3, scale=0.5, shift=1.0), normal(3, scale=0.5)
        for dt in DTYPES:
            rm, rv = rm0.to(dt).clone(), rv0.to(dt).clone()
            tensors = [("rm", rm.clone()), ("rv", rv.clone()), ("w", w0.to(dt)), ("b", b0.to(dt))]
            for i, x in enumerate(xs):
                y = F.batch_norm(x.to(dt), rm, rv, w0.to(dt), b0.to(dt), training=True,
                                 momentum=mom, eps=1e-5)
                tensors += [("x%d" % (i + 1), x.to(dt)), ("rm%d" % (i + 1), rm.clone()),
                            ("rv%d" % (i + 1), rv.clone())]
            tensors.append(("y3", y))
            out.case("bn_running_m%g" % mom, dt, {"momentum": mom, "eps": 1e-5}, tensors)

    # layer norm and rms norm
    row_shapes = [("2d_n1", (5, 6), 1), ("3d_n1", (2, 3, 5), 1), ("3d_n2", (2, 3, 5), 2),
                  ("4d_n2", (2, 2, 2, 4), 2)]
    for sname, shape, nnorm in row_shapes:
        nshape = shape[len(shape) - nnorm:]
        for affine in (1, 0):
            inputs = {
                "x": normal(*shape, scale=1.3, shift=0.4),
                "w": normal(*nshape, scale=0.5, shift=1.0) if affine else None,
                "b": normal(*nshape, scale=0.5) if affine else None,
            }
            params = {"nnorm": nnorm, "eps": 1e-5, "affine": affine}

            def fn(ins, nshape=nshape):
                return F.layer_norm(ins["x"], nshape, ins["w"], ins["b"], eps=1e-5)

            emit("ln_%s_%s" % (sname, "affine" if affine else "plain"), inputs, params, fn,
                 ["x", "w", "b"])
        for affine in (1, 0):
            inputs = {
                "x": normal(*shape, scale=1.3, shift=0.4),
                "w": normal(*nshape, scale=0.5, shift=1.0) if affine else None,
            }
            params = {"nnorm": nnorm, "eps": 1e-6, "affine": affine}

            def fn(ins, nnorm=nnorm):
                return rms_norm(ins["x"], nnorm, ins["w"], 1e-6)

            emit("rms_%s_%s" % (sname, "affine" if affine else "plain"), inputs, params, fn,
                 ["x", "w"])
    out.close()


if __name__ == "__main__":
    main()
