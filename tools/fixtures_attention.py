#!/usr/bin/python3
"""tools/fixtures_attention.py - PyTorch reference values for
dl_t_multi_head_attention (include/dl/ops/attention.h), read by
tests/test_ops_attention.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_attention.py   # writes tests/fixtures/attention.txt

Each case runs torch.nn.MultiheadAttention(E, heads, batch_first=True,
bias=bias)(q, k, v, attn_mask=..., need_weights=False) on seeded parameters
and records (tools/fixture_lib.py's format):
  params   heads, self (1: q, k and v are one tensor x), kv (1: k and v are
           one tensor k), causal (1: the C side passes causal=1, torch gets
           the mask -inf where j > i), mask (0 none, 1 float `mask`, 2 bool
           `mask_bool`, written as 0/1), bias
  inputs   x or q, k, v; in_w [3E, E], in_b [3E], out_w [E, E], out_b [E]
  output   y [B, Tq, E], seed gy, and g_KEY: the gradient of sum(y * gy)
           with respect to every input and parameter.
"""
import torch

from fixture_lib import SEED, Writer


def case(out, name, g, B, Tq, Tk, E, heads, self_=False, kv=False, causal=False, mask=0, bias=True,
         dtypes=(torch.float64,)):
    if self_:
        Tk = Tq
    vals = {}
    if self_:
        vals["x"] = torch.randn(B, Tq, E, generator=g, dtype=torch.float64)
    else:
        vals["q"] = torch.randn(B, Tq, E, generator=g, dtype=torch.float64)
        vals["k"] = torch.randn(B, Tk, E, generator=g, dtype=torch.float64)
        if not kv:
            vals["v"] = torch.randn(B, Tk, E, generator=g, dtype=torch.float64)
    vals["in_w"] = torch.randn(3 * E, E, generator=g, dtype=torch.float64) * 0.5
    vals["out_w"] = torch.randn(E, E, generator=g, dtype=torch.float64) * 0.5
    if bias:
        vals["in_b"] = torch.randn(3 * E, generator=g, dtype=torch.float64) * 0.5
        vals["out_b"] = torch.randn(E, generator=g, dtype=torch.float64) * 0.5
    fixed = {}
    float_mask = None
    if mask == 1:  # finite values and a few -inf, never a whole row
        float_mask = torch.randn(Tq, Tk, generator=g, dtype=torch.float64)
        off = torch.rand(Tq, Tk, generator=g) < 0.25
        off[:, 0] = False
        float_mask = float_mask.masked_fill(off, float("-inf"))
        fixed["mask"] = float_mask
    elif mask == 2:
        mb = torch.rand(Tq, Tk, generator=g) < 0.4
        mb[torch.arange(Tq), torch.arange(Tq) % Tk] = False  # every query keeps a key
        fixed["mask_bool"] = mb.to(torch.int64)
    gy = torch.rand(B, Tq, E, generator=g, dtype=torch.float64) * 2 - 1
    for dt in dtypes:
        m = torch.nn.MultiheadAttention(E, heads, batch_first=True, bias=bias).to(dt)
        with torch.no_grad():
            m.in_proj_weight.copy_(vals["in_w"].to(dt))
            m.out_proj.weight.copy_(vals["out_w"].to(dt))
            if bias:
                m.in_proj_bias.copy_(vals["in_b"].to(dt))
                m.out_proj.bias.copy_(vals["out_b"].to(dt))
        ins = {k: v.to(dt).clone().requires_grad_(True) for k, v in vals.items() if k in ("x", "q", "k", "v")}
        if self_:
            q = k = v = ins["x"]
        else:
            q, k = ins["q"], ins["k"]
            v = k if kv else ins["v"]
        am = None
        if mask == 1:
            am = float_mask.to(dt)
        elif mask == 2:
            am = fixed["mask_bool"].bool()
        if causal:
            cm = torch.triu(torch.full((Tq, Tk), float("-inf"), dtype=dt), diagonal=1)
            if am is None:
                am = cm
            elif am.dtype == torch.bool:
                am = torch.zeros(Tq, Tk, dtype=dt).masked_fill(am, float("-inf")) + cm
            else:
                am = am + cm
        y, _ = m(q, k, v, attn_mask=am, need_weights=False)
        loss = (y * gy.to(dt)).sum()
        wrt = [(kk, ins[kk]) for kk in ("x", "q", "k", "v") if kk in ins]
        wrt += [("in_w", m.in_proj_weight), ("out_w", m.out_proj.weight)]
        if bias:
            wrt += [("in_b", m.in_proj_bias), ("out_b", m.out_proj.bias)]
        grads = torch.autograd.grad(loss, [t for _, t in wrt])
        tensors = [(kk, vv.to(dt)) for kk, vv in vals.items()]
        tensors += [(kk, vv.to(dt) if vv.is_floating_point() else vv) for kk, vv in fixed.items()]
        tensors += [("y", y), ("gy", gy.to(dt))]
        tensors += [("g_" + kk, gk) for (kk, _), gk in zip(wrt, grads)]
        out.case(name, dt, {"heads": heads, "self": int(self_), "kv": int(kv), "causal": int(causal),
                            "mask": mask, "bias": int(bias)}, tensors)


def main():
    out = Writer("tests/fixtures/attention.txt",
                 "dl_t_multi_head_attention against torch.nn.MultiheadAttention(batch_first=True)")
    g = torch.Generator().manual_seed(SEED)
    both = (torch.float64, torch.float32)
    # B, Tq, Tk, E, heads
    case(out, "self_h2", g, 2, 4, 4, 6, 2, self_=True, dtypes=both)
    case(out, "self_h4", g, 2, 4, 4, 8, 4, self_=True, dtypes=both)
    case(out, "cross_h2", g, 2, 3, 5, 6, 2, dtypes=both)
    case(out, "cross_kv_h2", g, 2, 4, 6, 6, 2, kv=True)
    case(out, "cross_h4", g, 1, 5, 3, 8, 4)
    case(out, "self_float_mask", g, 2, 5, 5, 6, 2, self_=True, mask=1, dtypes=both)
    case(out, "cross_bool_mask", g, 2, 4, 6, 6, 3, mask=2)
    case(out, "self_causal", g, 2, 5, 5, 6, 2, self_=True, causal=True, dtypes=both)
    case(out, "cross_causal", g, 2, 4, 6, 6, 2, causal=True)
    case(out, "self_causal_float_mask", g, 1, 5, 5, 6, 2, self_=True, causal=True, mask=1)
    case(out, "self_nobias", g, 2, 4, 4, 6, 2, self_=True, bias=False)
    case(out, "cross_h4_nobias_bool", g, 2, 3, 4, 8, 4, mask=2, bias=False)
    out.close()


if __name__ == "__main__":
    main()
