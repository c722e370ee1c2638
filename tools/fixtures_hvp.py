#!/usr/bin/python3
"""tools/fixtures_hvp.py - PyTorch reference values for dl_hvp (include/dl/tape.h),
read by tests/test_hvp.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_hvp.py     # writes tests/fixtures/hvp.txt

Each case is a small MLP, x [N, I] -> Linear(I, H) -> act -> Linear(H, C),
or a small CNN, x [N, 1, S, S] -> Conv2d(1, K, 3) -> GELU -> MaxPool2d(2) ->
flatten -> Linear(K (S-2)^2 / 4, C), cross-entropy against labels
(reduction mean), in f64 and in f32. With a
direction v over the input and every parameter, PyTorch's double backward
gives the Hessian-vector product: g = grad(loss, (x, w1, b1, w2, b2),
create_graph=True), Hv = grad(sum_k <g_k, v_k>, (x, w1, b1, w2, b2)).
  params   act (0 gelu exact, 1 tanh, 2 silu), cnn (1: the CNN; w1, b1 the
           convolution's, w2, b2 the linear layer's)
  tensors  x, w1, b1, w2, b2, labels, v_x, v_w1, v_b1, v_w2, v_b2,
           loss, g_x ... g_b2 (the gradient), hv_x ... hv_b2
"""
import torch

from fixture_lib import SEED, Writer

ACTS = {0: torch.nn.functional.gelu, 1: torch.tanh, 2: torch.nn.functional.silu}
KEYS = ("x", "w1", "b1", "w2", "b2")


def record(out, name, vals, labels, vs, net, params):
    """One case per dtype: net(x, w1, b1, w2, b2) -> logits; the loss, its
    gradient and PyTorch's double backward H v along vs."""
    for dt in (torch.float64, torch.float32):
        ins = [vals[k].to(dt).clone().requires_grad_(True) for k in KEYS]
        loss = torch.nn.functional.cross_entropy(net(*ins), labels)
        grads = torch.autograd.grad(loss, ins, create_graph=True)
        gv = sum((gk * vs[k].to(dt)).sum() for gk, k in zip(grads, KEYS))
        hv = torch.autograd.grad(gv, ins)
        tensors = [(k, vals[k].to(dt)) for k in KEYS] + [("labels", labels)]
        tensors += [("v_" + k, vs[k].to(dt)) for k in KEYS] + [("loss", loss)]
        tensors += [("g_" + k, gk) for k, gk in zip(KEYS, grads)] + [("hv_" + k, h) for k, h in zip(KEYS, hv)]
        out.case(name, dt, params, tensors)


def case(out, name, act, N, I, H, C, g):
    vals = {"x": torch.randn(N, I, generator=g, dtype=torch.float64),
            "w1": torch.randn(H, I, generator=g, dtype=torch.float64) * 0.6,
            "b1": torch.randn(H, generator=g, dtype=torch.float64) * 0.3,
            "w2": torch.randn(C, H, generator=g, dtype=torch.float64) * 0.6,
            "b2": torch.randn(C, generator=g, dtype=torch.float64) * 0.3}
    labels = torch.randint(0, C, (N,), generator=g)
    vs = {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in vals.items()}
    lin = torch.nn.functional.linear
    record(out, name, vals, labels, vs, lambda x, w1, b1, w2, b2: lin(ACTS[act](lin(x, w1, b1)), w2, b2),
           {"act": act})


def cnn_case(out, name, N, S, K, C, g):
    F = K * ((S - 2) // 2) ** 2
    vals = {"x": torch.randn(N, 1, S, S, generator=g, dtype=torch.float64),
            "w1": torch.randn(K, 1, 3, 3, generator=g, dtype=torch.float64) * 0.6,
            "b1": torch.randn(K, generator=g, dtype=torch.float64) * 0.3,
            "w2": torch.randn(C, F, generator=g, dtype=torch.float64) * 0.4,
            "b2": torch.randn(C, generator=g, dtype=torch.float64) * 0.3}
    labels = torch.randint(0, C, (N,), generator=g)
    vs = {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in vals.items()}
    F_ = torch.nn.functional

    def net(x, w1, b1, w2, b2):
        return F_.linear(F_.max_pool2d(F_.gelu(F_.conv2d(x, w1, b1)), 2).flatten(1), w2, b2)
    record(out, name, vals, labels, vs, net, {"act": 0, "cnn": 1})


def main():
    out = Writer("tests/fixtures/hvp.txt", "dl_hvp against PyTorch's double backward (an MLP, cross-entropy)")
    g = torch.Generator().manual_seed(SEED)
    case(out, "mlp_gelu", 0, 6, 5, 7, 3, g)
    case(out, "mlp_tanh", 1, 4, 3, 6, 4, g)
    case(out, "mlp_silu", 2, 8, 6, 5, 5, g)
    cnn_case(out, "cnn_gelu_maxpool", 3, 8, 3, 4, g)
    out.close()


if __name__ == "__main__":
    main()
