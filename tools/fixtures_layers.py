#!/usr/bin/python3
"""tools/fixtures_layers.py - PyTorch reference values for dl.h's layers
(include/dl/layers.h), read by tests/test_layers.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_layers.py     # writes tests/fixtures/layers.txt

Layer cases, each in f64 and f32 (the f32 module is the f64 one cast, so both
hold the same weights up to rounding). The torch module is built under a
root whose state_dict names are the ones the C model gives (a root
nn.Sequential index "0": "0.weight"), and the case stores:
    KIND:NAME   every state_dict entry BEFORE the forward, by name; KIND is
                pw (a weight parameter), pb (a bias), pn (a normalisation
                layer's parameter) or pr (a buffer: running statistics)
    x ...       the inputs (x; x2, x3 for later forward calls; h0, c0; k, v,
                mask for attention), seeded
    y, gy       the output and a seeded upstream gradient; more outputs:
                hn/ghn, cn/gcn (recurrent final states)
    g_KEY       the gradient of sum(y * gy) (+ sum(hn * ghn) ...) with respect
                to input KEY
    g:NAME      ... with respect to parameter NAME (a sparse embedding's
                gradient densified)
    s:NAME      the buffers AFTER every forward call (BatchNorm: after 3 calls
                in train mode; unchanged in eval mode)
and params: train (1/0) and the layer's constructor arguments.
Constant-initialised entries (norm weights and biases, attention biases,
running statistics) are randomised so that they test something.

A case holds at most 24 tensors (tests/fixtures2.h); the rest go to
continuation cases NAME+1, NAME+2 ... of the same dtype.

Init cases (init_*) hold, per state_dict entry of a freshly made module,
the statistics of PyTorch's default initialisation pooled over many
constructions: tensor st:NAME = [max |w|, mean, std, numel of one draw].
Case init_schemes holds, for torch.nn.init's functions on a [256, 256] and a
[64, 32, 3, 3] tensor, the same statistics: SCHEME_sq and SCHEME_4d.
"""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from fixture_lib import SEED, Writer

MAXT = 24  # tensors per case in tests/fixtures2.h
KEYMAX = 31  # key characters in tests/fixtures2.h


def split_case(w, name, dtype, params, tensors):
    for key, _ in tensors:
        assert len(key) <= KEYMAX, key
    assert len(name) + 3 < 64, name
    for part in range(0, max(len(tensors), 1), MAXT):
        w.case(name if part == 0 else "%s+%d" % (name, part // MAXT), dtype,
               params if part == 0 else {}, tensors[part:part + MAXT])


class RMSNorm(nn.Module):
    """torch 2.4's nn.RMSNorm (torch 1.13 has none): x * rsqrt(mean(x^2) + eps) * w."""

    def __init__(self, shape, eps=None):
        super().__init__()
        self.shape = tuple(shape)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.shape))

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        dims = tuple(range(-len(self.shape), 0))
        return x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps) * self.weight


class GAP(nn.Module):
    def forward(self, x):
        return x.mean((2, 3))


class Residual(nn.Module):
    """dl_residual_make: relu(body(x) + shortcut(x)), body = the children in
    order except "shortcut"."""

    def __init__(self, children):
        super().__init__()
        for n, m in children:
            self.add_module(n, m)

    def forward(self, x):
        h = x
        for n, m in self.named_children():
            if n != "shortcut":
                h = m(h)
        return torch.relu(h + self.shortcut(x))


class Block(nn.Module):
    """The Flux paper's ResNet block: conv-bn-relu-conv-bn, + x, relu."""

    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + x)


class Root(nn.Module):
    def __init__(self, **children):
        super().__init__()
        for n, m in children.items():
            self.add_module(n, m)

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, RMSNorm)


def kinds(root):
    """state_dict name -> pw / pb / pn / pr."""
    buffers = dict(root.named_buffers())
    out = {}
    for name in root.state_dict():
        owner = root.get_submodule(name.rsplit(".", 1)[0]) if "." in name else root
        last = name.rsplit(".", 1)[-1]
        if name in buffers:
            out[name] = "pr"
        elif isinstance(owner, NORMS):
            out[name] = "pn"
        elif "bias" in last:
            out[name] = "pb"
        else:
            out[name] = "pw"
    return out


def randomise(root, g):
    """Constant-initialised entries get random values (a test of a copy of
    ones and zeros proves little); num_batches_tracked starts at 5."""
    with torch.no_grad():
        for name, t in root.state_dict().items():
            if not t.is_floating_point():
                t.fill_(5)
                continue
            flat = t.reshape(-1)
            if flat.numel() > 1 and bool((flat == flat[0]).all()):
                if name.endswith("running_var"):
                    t.copy_(0.5 + 1.5 * torch.rand(t.shape, generator=g, dtype=torch.float64))
                elif kinds(root)[name] == "pn" and name.endswith("weight"):
                    t.copy_(0.5 + torch.rand(t.shape, generator=g, dtype=torch.float64))
                else:
                    t.copy_(0.3 * torch.randn(t.shape, generator=g, dtype=torch.float64))


class Cases:
    def __init__(self, w):
        self.w = w
        self.idx = 0

    def layer(self, name, build, inputs, fwd, params, train=True, state_after=False, no_grad=()):
        """build() -> the root module (f64 after .double()); inputs: dict of
        f64 / int64 tensors; fwd(root, ins) -> [(key, output)]."""
        self.idx += 1
        torch.manual_seed(SEED + self.idx)
        g = torch.Generator().manual_seed(SEED + 1000 + self.idx)
        root64 = build().double()
        randomise(root64, g)
        kind = kinds(root64)
        params = dict(params)
        params["train"] = int(train)
        for dtype in (torch.float64, torch.float32):
            root = copy.deepcopy(root64).to(dtype)
            root.train(train)
            sd0 = {k: v.detach().clone() for k, v in root.state_dict().items()}
            ins, grad_keys = {}, []
            for k, v in inputs.items():
                if v.is_floating_point():
                    v = v.to(dtype).clone()
                    if k not in no_grad:
                        v.requires_grad_(True)
                        grad_keys.append(k)
                ins[k] = v
            outs = fwd(root, ins)
            gg = torch.Generator().manual_seed(SEED + 7 * self.idx)
            tensors = [(kind[k] + ":" + k, v) for k, v in sd0.items()]
            tensors += [(k, v) for k, v in ins.items()]
            loss = 0
            for key, y in outs:
                gy = (torch.rand(y.shape, generator=gg, dtype=torch.float64) * 2 - 1).to(dtype)
                tensors += [(key, y), ("g" + key, gy)]
                loss = loss + (y * gy).sum()
            named = [(n, p) for n, p in root.named_parameters()]
            wrt = [ins[k] for k in grad_keys] + [p for _, p in named]
            grads = torch.autograd.grad(loss, wrt, allow_unused=True)
            for k, gk, t in zip(grad_keys + ["g:" + n for n, _ in named], grads, wrt):
                if gk is None:
                    gk = torch.zeros_like(t)
                if gk.is_sparse:
                    gk = gk.to_dense()
                tensors.append((k if k.startswith("g:") else "g_" + k, gk))
            if state_after:
                tensors += [("s:" + k, v) for k, v in root.state_dict().items() if kind[k] == "pr"]
            split_case(self.w, name, dtype, params, tensors)


def main():
    w = Writer("tests/fixtures/layers.txt", "layers (include/dl/layers.h)")
    c = Cases(w)
    g = torch.Generator().manual_seed(SEED)

    def normal(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    def plain(root, ins):
        return [("y", root(ins["x"]))]

    def seq(m):
        return lambda: nn.Sequential(m())

    # Linear
    c.layer("linear", seq(lambda: nn.Linear(5, 4)), {"x": normal(3, 5)}, plain, {"in": 5, "out": 4})
    c.layer("linear_nobias_3d", seq(lambda: nn.Linear(5, 4, bias=False)), {"x": normal(2, 3, 5)}, plain,
            {"in": 5, "out": 4, "no_bias": 1})
    c.layer("linear_3d", seq(lambda: nn.Linear(6, 3)), {"x": normal(2, 4, 6)}, plain, {"in": 6, "out": 3})

    # Convolutions
    c.layer("conv1d", seq(lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2)),
            {"x": normal(2, 4, 11)}, plain,
            {"in": 4, "out": 6, "kernel": 3, "stride": 2, "padding": 1, "dilation": 2, "groups": 2})
    c.layer("conv2d_rect", seq(lambda: nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2),
                                                 groups=2)),
            {"x": normal(2, 4, 4, 4)}, plain,
            {"in": 4, "out": 6, "kernel": 3, "kernel_w": 2, "stride": 2, "stride_w": 1, "padding": 1,
             "padding_w": 2, "dilation": 1, "dilation_w": 2, "groups": 2})
    c.layer("conv2d_nobias", seq(lambda: nn.Conv2d(2, 3, 3, padding=1, bias=False)), {"x": normal(2, 2, 4, 4)},
            plain, {"in": 2, "out": 3, "kernel": 3, "padding": 1, "no_bias": 1})

    # Pooling and reshaping (no parameters)
    c.layer("maxpool_k3s2p1", seq(lambda: nn.MaxPool2d(3, stride=2, padding=1)), {"x": normal(2, 2, 5, 5)}, plain,
            {"kernel": 3, "stride": 2, "padding": 1})
    c.layer("maxpool_k2", seq(lambda: nn.MaxPool2d(2)), {"x": normal(2, 2, 4, 6)}, plain, {"kernel": 2})
    c.layer("avgpool_k3s2p1", seq(lambda: nn.AvgPool2d(3, stride=2, padding=1)), {"x": normal(2, 2, 5, 5)}, plain,
            {"kernel": 3, "stride": 2, "padding": 1})
    c.layer("avgpool_rect_excl", seq(lambda: nn.AvgPool2d((3, 2), stride=(2, 1), padding=1,
                                                            count_include_pad=False)),
            {"x": normal(2, 2, 5, 4)}, plain,
            {"kernel": 3, "kernel_w": 2, "stride": 2, "stride_w": 1, "padding": 1, "exclude_pad": 1})
    c.layer("gap", seq(GAP), {"x": normal(2, 2, 3, 4)}, plain, {})
    c.layer("flatten", seq(nn.Flatten), {"x": normal(2, 3, 2, 2)}, plain, {"start_dim": 1})
    c.layer("flatten_2", seq(lambda: nn.Flatten(2)), {"x": normal(2, 3, 2, 2)}, plain, {"start_dim": 2})

    # BatchNorm: train mode (3 forward calls; y and the gradients are the
    # first call's) and eval mode
    def bn3(root, ins):
        y = root(ins["x"])
        with torch.no_grad():
            root(ins["x2"])
            root(ins["x3"])
        return [("y", y)]

    for shape, tag, mk, extra in (((6, 4), "bn1d_2d", lambda: nn.BatchNorm1d(4), {}),
                                  ((3, 3, 4), "bn1d_3d", lambda: nn.BatchNorm1d(3), {}),
                                  ((2, 3, 3, 3), "bn2d", lambda: nn.BatchNorm2d(3, eps=1e-3, momentum=0.3),
                                   {"eps": 1e-3, "momentum": 0.3})):
        p = dict(extra)
        p["features"] = shape[1]
        p["two_d"] = int(len(shape) == 4)
        c.layer(tag + "_train", seq(mk), {"x": normal(*shape, scale=2.0) + 0.5, "x2": normal(*shape),
                                          "x3": normal(*shape, scale=0.5) - 1},
                bn3, p, train=True, state_after=True, no_grad=("x2", "x3"))
        c.layer(tag + "_eval", seq(mk), {"x": normal(*shape, scale=2.0) + 0.5}, plain, p, train=False,
                state_after=True)

    # LayerNorm and RMSNorm over 1 and 2 trailing dims
    c.layer("layernorm_1", seq(lambda: nn.LayerNorm(5)), {"x": normal(2, 3, 5)}, plain, {"ndims": 1, "d0": 5})
    c.layer("layernorm_2", seq(lambda: nn.LayerNorm((4, 5), eps=1e-6)), {"x": normal(2, 4, 5)}, plain,
            {"ndims": 2, "d0": 4, "d1": 5, "eps": 1e-6})
    c.layer("rmsnorm_1", seq(lambda: RMSNorm((5,), eps=1e-6)), {"x": normal(2, 3, 5)}, plain,
            {"ndims": 1, "d0": 5, "eps": 1e-6})
    c.layer("rmsnorm_2_default_eps", seq(lambda: RMSNorm((4, 5))), {"x": normal(2, 4, 5, scale=0.01)}, plain,
            {"ndims": 2, "d0": 4, "d1": 5})

    # Dropout: p = 0 in train mode and p = 0.5 in eval mode are the identity
    c.layer("dropout_p0_train", seq(lambda: nn.Dropout(0.0)), {"x": normal(3, 4)}, plain, {"p": 0.0})
    c.layer("dropout_eval", seq(lambda: nn.Dropout(0.5)), {"x": normal(3, 4)}, plain, {"p": 0.5}, train=False)

    # Embedding (indices with repeats), dense and sparse gradients
    idx = torch.tensor([[1, 3, 3, 0], [7, 1, 9, 3], [2, 2, 2, 8]], dtype=torch.int64)
    c.layer("embedding", seq(lambda: nn.Embedding(10, 4)), {"x": idx}, plain, {"num": 10, "dim": 4})
    c.layer("embedding_sparse", seq(lambda: nn.Embedding(10, 4, sparse=True)), {"x": idx}, plain,
            {"num": 10, "dim": 4, "sparse": 1})

    # Recurrent, 2 layers, batch-first, T = 5
    def rec(root, ins):
        r = root[0]
        h0 = ins.get("h0")
        x = ins["x"]
        lengths = ins.get("lengths")
        if lengths is not None:  # rows of different lengths: a packed sequence, padded back to T
            x = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)

        def unpack(y):
            if lengths is None:
                return y
            return nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=ins["x"].shape[1])[0]
        if isinstance(r, nn.LSTM):
            hc = (ins["h0"], ins["c0"]) if h0 is not None else None
            y, (hn, cn) = r(x, hc)
            return [("y", unpack(y)), ("hn", hn), ("cn", cn)]
        y, hn = r(x, h0)
        return [("y", unpack(y)), ("hn", hn)]

    B, T, I, H, L = 2, 5, 2, 3, 2
    rp = {"input": I, "hidden": H, "num_layers": L}
    c.layer("rnn_tanh_h0", seq(lambda: nn.RNN(I, H, L, batch_first=True)),
            {"x": normal(B, T, I), "h0": normal(L, B, H, scale=0.5)}, rec, rp)
    c.layer("rnn_relu", seq(lambda: nn.RNN(I, H, L, nonlinearity="relu", batch_first=True)),
            {"x": normal(B, T, I)}, rec, dict(rp, relu=1))
    c.layer("lstm", seq(lambda: nn.LSTM(I, H, L, batch_first=True)), {"x": normal(B, T, I)}, rec, rp)
    c.layer("lstm_h0c0", seq(lambda: nn.LSTM(I, H, L, batch_first=True)),
            {"x": normal(B, T, I), "h0": normal(L, B, H, scale=0.5), "c0": normal(L, B, H, scale=0.5)}, rec, rp)
    c.layer("gru_h0", seq(lambda: nn.GRU(I, H, L, batch_first=True)),
            {"x": normal(B, T, I), "h0": normal(L, B, H, scale=0.5)}, rec, rp)

    # Multi-head attention, E = 6, 2 heads
    def mha(root, ins):
        a = root[0]
        q = ins["x"]
        k = ins.get("k", q)
        v = ins.get("v", q)
        return [("y", a(q, k, v, need_weights=False, attn_mask=ins.get("mask"))[0])]

    causal = torch.triu(torch.full((4, 4), float("-inf"), dtype=torch.float64), diagonal=1)
    c.layer("mha_self", seq(lambda: nn.MultiheadAttention(6, 2, batch_first=True)), {"x": normal(2, 3, 6)}, mha,
            {"embed": 6, "heads": 2})
    c.layer("mha_causal", seq(lambda: nn.MultiheadAttention(6, 2, batch_first=True)),
            {"x": normal(2, 4, 6), "mask": causal}, mha, {"embed": 6, "heads": 2, "causal": 1}, no_grad=("mask",))
    c.layer("mha_cross_nobias", seq(lambda: nn.MultiheadAttention(6, 2, bias=False, batch_first=True)),
            {"x": normal(2, 3, 6), "k": normal(2, 4, 6), "v": normal(2, 4, 6), "mask": normal(3, 4)}, mha,
            {"embed": 6, "heads": 2, "no_bias": 1}, no_grad=("mask",))

    # Containers
    c.layer("mlp", lambda: nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3)), {"x": normal(4, 5)}, plain,
            {})
    c.layer("residual", lambda: nn.Sequential(Residual([
        ("0", nn.Conv2d(2, 3, 3, padding=1, bias=False)), ("1", nn.BatchNorm2d(3)), ("2", nn.ReLU()),
        ("3", nn.Conv2d(3, 3, 3, padding=1, bias=False)), ("4", nn.BatchNorm2d(3)),
        ("shortcut", nn.Conv2d(2, 3, 1))])),
        {"x": normal(2, 2, 3, 3)}, plain, {}, state_after=True)
    c.layer("resblock", lambda: Root(res=Block(2)), {"x": normal(2, 2, 4, 4)}, plain, {}, state_after=True)
    c.layer("resblock_eval", lambda: Root(res=Block(2)), {"x": normal(2, 2, 4, 4)}, plain, {}, train=False,
            state_after=True)
    # Pooling's dilation and ceil_mode (after the others: their inputs do not shift earlier cases)
    c.layer("maxpool_dil_ceil", seq(lambda: nn.MaxPool2d((3, 2), stride=2, padding=1, dilation=(2, 1),
                                                           ceil_mode=True)),
            {"x": normal(2, 2, 8, 7)}, plain,
            {"kernel": 3, "kernel_w": 2, "stride": 2, "padding": 1, "dilation": 2, "dilation_w": 1,
             "ceil_mode": 1})
    c.layer("avgpool_ceil_excl", seq(lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                                                            count_include_pad=False)),
            {"x": normal(2, 2, 6, 7)}, plain,
            {"kernel": 3, "stride": 2, "padding": 1, "ceil_mode": 1, "exclude_pad": 1})
    # Bidirectional recurrent layers (nn.X(bidirectional=True)), 2 layers
    bp = dict(rp, bidirectional=1)
    c.layer("lstm_bi_h0c0", seq(lambda: nn.LSTM(I, H, L, batch_first=True, bidirectional=True)),
            {"x": normal(B, T, I), "h0": normal(2 * L, B, H, scale=0.5), "c0": normal(2 * L, B, H, scale=0.5)},
            rec, bp)
    c.layer("gru_bi", seq(lambda: nn.GRU(I, H, L, batch_first=True, bidirectional=True)),
            {"x": normal(B, T, I)}, rec, bp)
    c.layer("rnn_bi_h0", seq(lambda: nn.RNN(I, H, 1, batch_first=True, bidirectional=True)),
            {"x": normal(B, T, I), "h0": normal(2, B, H, scale=0.5)}, rec,
            {"input": I, "hidden": H, "num_layers": 1, "bidirectional": 1})
    # Rows of different lengths (pack_padded_sequence, unsorted), T = 5
    lens = torch.tensor([3, 5, 1], dtype=torch.int64)
    c.layer("lstm_bi_packed_h0c0", seq(lambda: nn.LSTM(I, H, L, batch_first=True, bidirectional=True)),
            {"x": normal(3, T, I), "h0": normal(2 * L, 3, H, scale=0.5), "c0": normal(2 * L, 3, H, scale=0.5),
             "lengths": lens}, rec, bp)
    c.layer("gru_packed", seq(lambda: nn.GRU(I, H, L, batch_first=True)), {"x": normal(3, T, I), "lengths": lens},
            rec, rp)
    c.layer("rnn_bi_packed", seq(lambda: nn.RNN(I, H, 1, batch_first=True, bidirectional=True)),
            {"x": normal(3, T, I), "h0": normal(2, 3, H, scale=0.5), "lengths": lens}, rec,
            {"input": I, "hidden": H, "num_layers": 1, "bidirectional": 1})

    n_layer_cases = w.n

    # Default initialisation statistics over many constructions
    def init_stats(name, make, reps):
        acc = {}
        for r in range(reps):
            torch.manual_seed(SEED + 77 * r)
            root = nn.Sequential(make())
            for k, t in root.state_dict().items():
                if t.is_floating_point():
                    acc.setdefault(k, []).append(t.detach().to(torch.float64).reshape(-1))
        tensors = []
        for k, ts in acc.items():
            a = torch.cat(ts)
            tensors.append(("st:" + k, torch.tensor([a.abs().max().item(), a.mean().item(), a.std().item(),
                                                     float(ts[0].numel())], dtype=torch.float64)))
        split_case(w, name, torch.float64, {}, tensors)

    init_stats("init_linear", lambda: nn.Linear(256, 128), 40)
    init_stats("init_conv2d", lambda: nn.Conv2d(16, 32, 3), 100)
    init_stats("init_conv2d_groups", lambda: nn.Conv2d(16, 32, (3, 5), groups=4), 100)
    init_stats("init_conv1d", lambda: nn.Conv1d(8, 16, 5), 200)
    init_stats("init_embedding", lambda: nn.Embedding(500, 32), 20)
    init_stats("init_rnn", lambda: nn.RNN(32, 64), 50)
    init_stats("init_lstm", lambda: nn.LSTM(32, 64, 2), 20)
    init_stats("init_gru", lambda: nn.GRU(32, 64), 30)
    init_stats("init_mha", lambda: nn.MultiheadAttention(64, 4, batch_first=True), 30)
    init_stats("init_batchnorm2d", lambda: nn.BatchNorm2d(16), 2)
    init_stats("init_layernorm", lambda: nn.LayerNorm(32), 2)

    # torch.nn.init's schemes (lecun = kaiming with nonlinearity 'linear')
    I = nn.init
    schemes = [
        ("xavier_uniform", lambda t: I.xavier_uniform_(t)),
        ("xavier_uniform_g2", lambda t: I.xavier_uniform_(t, gain=2.0)),
        ("xavier_normal", lambda t: I.xavier_normal_(t)),
        ("kaiming_uniform", lambda t: I.kaiming_uniform_(t, a=0.0)),
        ("kaiming_uniform_a5", lambda t: I.kaiming_uniform_(t, a=math.sqrt(5))),
        ("kaiming_normal", lambda t: I.kaiming_normal_(t, a=0.0)),
        ("kaiming_normal_a01", lambda t: I.kaiming_normal_(t, a=0.1)),
        ("lecun_uniform", lambda t: I.kaiming_uniform_(t, nonlinearity="linear")),
        ("lecun_normal", lambda t: I.kaiming_normal_(t, nonlinearity="linear")),
        ("uniform_03", lambda t: I.uniform_(t, -0.3, 0.3)),
        ("normal_05", lambda t: I.normal_(t, 0.0, 0.5)),
    ]
    tensors = []
    for nm, fn in schemes:
        for tag, shape in (("sq", (256, 256)), ("4d", (64, 32, 3, 3))):
            torch.manual_seed(SEED)
            draws = []
            for _ in range(20):
                t = torch.empty(shape, dtype=torch.float64)
                fn(t)
                draws.append(t.reshape(-1))
            a = torch.cat(draws)
            tensors.append(("%s_%s" % (nm, tag), torch.tensor([a.abs().max().item(), a.mean().item(),
                                                                a.std().item(), float(draws[0].numel())],
                                                               dtype=torch.float64)))
    split_case(w, "init_schemes", torch.float64, {}, tensors)

    # 3-d convolution and pooling (appended: the cases above keep their inputs and seeds)
    c.layer("conv3d_rect", seq(lambda: nn.Conv3d(4, 6, (3, 2, 2), stride=(2, 1, 2), padding=(1, 0, 1),
                                                 dilation=(1, 2, 1), groups=2)),
            {"x": normal(2, 4, 5, 5, 4)}, plain,
            {"in": 4, "out": 6, "kernel": 3, "kernel_h": 2, "kernel_w": 2, "stride": 2, "stride_h": 1,
             "stride_w": 2, "padding": 1, "padding_h": -1, "padding_w": 1, "dilation": 1, "dilation_h": 2,
             "groups": 2})
    c.layer("conv3d_nobias", seq(lambda: nn.Conv3d(2, 3, 3, padding=1, bias=False)), {"x": normal(1, 2, 4, 4, 3)},
            plain, {"in": 2, "out": 3, "kernel": 3, "padding": 1, "no_bias": 1})
    c.layer("maxpool3d_k3s2p1", seq(lambda: nn.MaxPool3d(3, stride=2, padding=1)), {"x": normal(2, 2, 5, 5, 5)},
            plain, {"kernel": 3, "stride": 2, "padding": 1})
    c.layer("maxpool3d_dil_ceil", seq(lambda: nn.MaxPool3d((2, 3, 2), stride=2, padding=(1, 1, 0),
                                                             dilation=(1, 2, 1), ceil_mode=True)),
            {"x": normal(1, 2, 5, 8, 7)}, plain,
            {"kernel": 2, "kernel_h": 3, "stride": 2, "padding": 1, "padding_w": -1, "dilation_h": 2,
             "ceil_mode": 1})
    c.layer("avgpool3d_rect_excl", seq(lambda: nn.AvgPool3d((3, 2, 2), stride=(2, 1, 2), padding=1,
                                                              count_include_pad=False)),
            {"x": normal(2, 2, 5, 4, 5)}, plain,
            {"kernel": 3, "kernel_h": 2, "kernel_w": 2, "stride": 2, "stride_h": 1, "padding": 1,
             "exclude_pad": 1})
    c.layer("avgpool3d_ceil", seq(lambda: nn.AvgPool3d(2, ceil_mode=True)), {"x": normal(1, 3, 5, 4, 3)}, plain,
            {"kernel": 2, "ceil_mode": 1})
    init_stats("init_conv3d", lambda: nn.Conv3d(8, 16, (3, 3, 2), groups=2), 100)
    w.close()
    print("layer cases: %d (with continuations)" % n_layer_cases)


if __name__ == "__main__":
    main()
