#!/usr/bin/python3
"""tools/fixtures_rnn.py - PyTorch reference values for dl_t_rnn, dl_t_lstm and
dl_t_gru (include/dl/ops/rnn.h), read by tests/test_ops_rnn.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_rnn.py     # writes tests/fixtures/rnn.txt

Each case runs torch.nn.RNN (tanh / relu), LSTM or GRU with batch_first=True,
one layer, on seeded weights, and records (tools/fixture_lib.py's format):
  params   kind (0 rnn tanh, 1 rnn relu, 2 lstm, 3 gru, 4 gru with the reset
           gate before the product: dl_rnn_args.gru_reset_before_linear,
           ONNX's linear_before_reset = 0), h0 (1: h0/c0 given),
           bias (1: b_ih/b_hh present)
  inputs   x [B, T, I], h0 [B, H], c0 [B, H] (lstm), w_ih [G*H, I],
           w_hh [G*H, H], b_ih, b_hh [G*H]
           lengths [B] (i64, packed cases only): the rows' sequence lengths;
           the module runs on pack_padded_sequence(x, lengths,
           batch_first=True, enforce_sorted=False) and y is
           pad_packed_sequence(..., total_length=T)'s output (zeros past
           each row's end)
  outputs  y [B, T, H], hn [B, H], cn [B, H] (lstm)
  seeds    gy, ghn, gcn: the loss is sum(y*gy) + sum(hn*ghn) + sum(cn*gcn)
  grads    g_x, g_h0, g_c0, g_w_ih, g_w_hh, g_b_ih, g_b_hh of that loss.
Every case in f64; a subset also in f32 (the same values rounded).
"""
import torch

from fixture_lib import SEED, Writer

KINDS = {0: "rnn_tanh", 1: "rnn_relu", 2: "lstm", 3: "gru", 4: "gru_rb"}
GATES = {0: 1, 1: 1, 2: 4, 3: 3, 4: 3}


class GRUSteps(torch.nn.Module):
    """A GRU written step by step (PyTorch has no module for the reset-before
    form): reset_before False is torch.nn.GRU's formula, True applies r to
    h before w_hn (Cho et al. 2014; ONNX linear_before_reset = 0):
        n = tanh(x w_in^T + b_in + (r h) w_hn^T + b_hn).
    Rows of different lengths: past a row's end its state stays and its
    output is 0 (what pack_padded_sequence gives). Parameters named as
    torch.nn.GRU's, so case() loads them the same way."""

    def __init__(self, I, H, bias, reset_before):
        super().__init__()
        self.H, self.reset_before = H, reset_before
        self.weight_ih_l0 = torch.nn.Parameter(torch.zeros(3 * H, I))
        self.weight_hh_l0 = torch.nn.Parameter(torch.zeros(3 * H, H))
        self.bias_ih_l0 = torch.nn.Parameter(torch.zeros(3 * H)) if bias else None
        self.bias_hh_l0 = torch.nn.Parameter(torch.zeros(3 * H)) if bias else None

    def forward(self, x, h0=None, lengths=None):
        B, T, _ = x.shape
        H = self.H
        h = h0[0] if h0 is not None else torch.zeros(B, H, dtype=x.dtype)
        wi, wh, bi, bh = self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0
        ys = []
        for t in range(T):
            a = x[:, t] @ wi.T + (bi if bi is not None else 0)
            hs = h @ wh[:2 * H].T + (bh[:2 * H] if bh is not None else 0)
            r = torch.sigmoid(a[:, :H] + hs[:, :H])
            z = torch.sigmoid(a[:, H:2 * H] + hs[:, H:])
            bn = bh[2 * H:] if bh is not None else 0
            if self.reset_before:
                n = torch.tanh(a[:, 2 * H:] + ((r * h) @ wh[2 * H:].T + bn))
            else:
                n = torch.tanh(a[:, 2 * H:] + r * (h @ wh[2 * H:].T + bn))
            hn = (1 - z) * n + z * h
            if lengths is not None:
                live = (torch.tensor(lengths) > t).to(x.dtype).unsqueeze(1)
                h = live * hn + (1 - live) * h
                ys.append(live * hn)
            else:
                h = hn
                ys.append(hn)
        return torch.stack(ys, 1), h.unsqueeze(0)


def check_gru_steps():
    """GRUSteps's reset-after form is torch.nn.GRU (with and without lengths), so
    the step-by-step code the reset-before cases come from is right too."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 6, 4, generator=g, dtype=torch.float64)
    h0 = torch.randn(1, 3, 5, generator=g, dtype=torch.float64)
    ref = torch.nn.GRU(4, 5, batch_first=True).double()
    mine = GRUSteps(4, 5, True, False).double()
    with torch.no_grad():
        for n, p in ref.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.6)
            getattr(mine, n).copy_(p)
    for lengths in (None, [4, 6, 1]):
        xin = x if lengths is None else torch.nn.utils.rnn.pack_padded_sequence(
            x, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
        y, hn = ref(xin, h0)
        if lengths is not None:
            y = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=6)[0]
        y2, hn2 = mine(x, h0, lengths)
        assert (y - y2).abs().max() < 1e-12 and (hn - hn2).abs().max() < 1e-12, "GRUSteps is not torch.nn.GRU"


def module(kind, I, H, bias):
    if kind in (0, 1):
        return torch.nn.RNN(I, H, nonlinearity="tanh" if kind == 0 else "relu", batch_first=True, bias=bias)
    if kind == 2:
        return torch.nn.LSTM(I, H, batch_first=True, bias=bias)
    if kind == 4:
        return GRUSteps(I, H, bias, True)
    return torch.nn.GRU(I, H, batch_first=True, bias=bias)


def case(out, name, kind, B, T, I, H, has_h0, bias, g, dtypes=(torch.float64, torch.float32), wscale=0.6,
         seeds=(1, 1, 1), lengths=None):
    """seeds: multipliers of (gy, ghn, gcn); 0 leaves that output out of the loss.
    lengths: the rows' sequence lengths (a packed sequence), or None."""
    G = GATES[kind]
    vals = {
        "x": torch.randn(B, T, I, generator=g, dtype=torch.float64),
        "w_ih": torch.randn(G * H, I, generator=g, dtype=torch.float64) * wscale,
        "w_hh": torch.randn(G * H, H, generator=g, dtype=torch.float64) * wscale,
    }
    if bias:
        vals["b_ih"] = torch.randn(G * H, generator=g, dtype=torch.float64) * wscale
        vals["b_hh"] = torch.randn(G * H, generator=g, dtype=torch.float64) * wscale
    if has_h0:
        vals["h0"] = torch.randn(B, H, generator=g, dtype=torch.float64) * 0.8
        if kind == 2:
            vals["c0"] = torch.randn(B, H, generator=g, dtype=torch.float64) * 0.8
    gy = (torch.rand(B, T, H, generator=g, dtype=torch.float64) * 2 - 1) * seeds[0]
    ghn = (torch.rand(B, H, generator=g, dtype=torch.float64) * 2 - 1) * seeds[1]
    gcn = (torch.rand(B, H, generator=g, dtype=torch.float64) * 2 - 1) * seeds[2]
    for dt in dtypes:
        m = module(kind, I, H, bias).to(dt)
        with torch.no_grad():
            for k in ("w_ih", "w_hh", "b_ih", "b_hh"):
                if k in vals:
                    getattr(m, k.replace("w_", "weight_").replace("b_", "bias_") + "_l0").copy_(vals[k].to(dt))
        ins = {k: v.to(dt).clone().requires_grad_(True) for k, v in vals.items() if k in ("x", "h0", "c0")}
        xin = ins["x"]
        if kind == 4:
            h0 = ins["h0"].unsqueeze(0) if has_h0 else None
            y, hn = m(xin, h0, lengths)
            cn = None
        elif lengths is not None:
            xin = torch.nn.utils.rnn.pack_padded_sequence(xin, torch.tensor(lengths), batch_first=True,
                                                          enforce_sorted=False)
        if kind == 4:
            pass
        elif kind == 2:
            if has_h0:
                y, (hn, cn) = m(xin, (ins["h0"].unsqueeze(0), ins["c0"].unsqueeze(0)))
            else:
                y, (hn, cn) = m(xin)
        else:
            y, hn = m(xin, ins["h0"].unsqueeze(0)) if has_h0 else m(xin)
            cn = None
        if lengths is not None and kind != 4:
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=T)
        hn = hn[0]
        loss = (y * gy.to(dt)).sum() + (hn * ghn.to(dt)).sum()
        if cn is not None:
            cn = cn[0]
            loss = loss + (cn * gcn.to(dt)).sum()
        wrt = [("x", ins["x"])] + [(k, ins[k]) for k in ("h0", "c0") if k in ins]
        wrt += [(k, getattr(m, k.replace("w_", "weight_").replace("b_", "bias_") + "_l0"))
                for k in ("w_ih", "w_hh", "b_ih", "b_hh") if k in vals]
        grads = torch.autograd.grad(loss, [t for _, t in wrt])
        tensors = [(k, v.to(dt)) for k, v in vals.items()]
        if lengths is not None:
            tensors += [("lengths", torch.tensor(lengths, dtype=torch.int64))]
        tensors += [("y", y), ("gy", gy.to(dt)), ("hn", hn), ("ghn", ghn.to(dt))]
        if cn is not None:
            tensors += [("cn", cn), ("gcn", gcn.to(dt))]
        tensors += [("g_" + k, gk) for (k, _), gk in zip(wrt, grads)]
        params = {"kind": kind, "h0": int(has_h0), "bias": int(bias)}
        if lengths is not None:
            params["packed"] = 1
        out.case(name, dt, params, tensors)


def main():
    out = Writer("tests/fixtures/rnn.txt", "dl_t_rnn / dl_t_lstm / dl_t_gru against torch.nn.RNN / LSTM / GRU")
    g = torch.Generator().manual_seed(SEED)
    both, f64 = (torch.float64, torch.float32), (torch.float64,)
    for kind in (0, 1, 2, 3):
        nm = KINDS[kind]
        # B, T, I, H: several time steps, H distinct from I
        case(out, nm + "_h0_bias", kind, 2, 6, 3, 4, True, True, g, both)
        case(out, nm + "_noh0_bias", kind, 3, 5, 2, 3, False, True, g, both if kind >= 2 else f64)
        case(out, nm + "_h0_nobias", kind, 2, 5, 3, 4, True, False, g, f64)
        case(out, nm + "_noh0_nobias", kind, 2, 5, 2, 3, False, False, g, f64)
    # longer sequences with larger weights (saturating gates), batch 1
    case(out, "lstm_long", 2, 1, 12, 3, 5, True, True, g, both, wscale=1.2)
    case(out, "gru_long", 3, 1, 12, 3, 5, True, True, g, both, wscale=1.2)
    case(out, "rnn_relu_long", 1, 1, 12, 3, 5, True, True, g, f64, wscale=0.9)
    # only part of the outputs in the loss
    case(out, "lstm_cn_only", 2, 2, 5, 3, 4, True, True, g, f64, seeds=(0, 0, 1))
    case(out, "lstm_hn_only", 2, 2, 5, 3, 4, True, True, g, f64, seeds=(0, 1, 0))
    case(out, "gru_hn_only", 3, 2, 5, 3, 4, True, True, g, f64, seeds=(0, 1, 0))
    case(out, "rnn_tanh_y_only", 0, 2, 5, 3, 4, True, True, g, f64, seeds=(1, 0, 0))
    # variable lengths (packed sequences), unsorted, one row at full length, one of length 1
    for kind in (0, 1, 2, 3):
        nm = KINDS[kind]
        case(out, nm + "_packed", kind, 4, 6, 3, 4, True, True, g, both, lengths=[3, 6, 1, 4])
        case(out, nm + "_packed_noh0", kind, 3, 5, 2, 3, False, True, g, f64, lengths=[5, 2, 4])
    case(out, "lstm_packed_cn_only", 2, 3, 5, 3, 4, True, True, g, f64, seeds=(0, 0, 1), lengths=[2, 5, 3])
    case(out, "gru_packed_hn_only", 3, 3, 5, 3, 4, True, True, g, f64, seeds=(0, 1, 0), lengths=[4, 1, 5])
    # the GRU with the reset gate before the product (no PyTorch module: GRUSteps, checked against nn.GRU)
    check_gru_steps()
    case(out, "gru_rb_h0_bias", 4, 2, 6, 3, 4, True, True, g, both)
    case(out, "gru_rb_noh0_bias", 4, 3, 5, 2, 3, False, True, g, both)
    case(out, "gru_rb_h0_nobias", 4, 2, 5, 3, 4, True, False, g, f64)
    case(out, "gru_rb_noh0_nobias", 4, 2, 5, 2, 3, False, False, g, f64)
    case(out, "gru_rb_long", 4, 1, 12, 3, 5, True, True, g, both, wscale=1.2)
    case(out, "gru_rb_packed", 4, 4, 6, 3, 4, True, True, g, both, lengths=[3, 6, 1, 4])
    case(out, "gru_rb_packed_hn_only", 4, 3, 5, 3, 4, False, True, g, f64, seeds=(0, 1, 0), lengths=[4, 1, 5])
    out.close()


if __name__ == "__main__":
    main()
