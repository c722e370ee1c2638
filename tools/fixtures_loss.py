#!/usr/bin/python3
"""tools/fixtures_loss.py - PyTorch reference values for dl.h's losses
(include/dl/ops/loss.h), read by tests/test_ops_loss.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_loss.py     # writes tests/fixtures/loss.txt

Every loss, every reduction (param `reduction`: 0 mean, 1 sum, 2 none, as
dl_reduction) and every option (label_smoothing, delta, beta), in f64 and
f32 (tools/fixture_lib.py's Writer: y, the upstream gradient gy and the
input gradients g_KEY of sum(y * gy)).
"""
import torch
import torch.nn.functional as F

from fixture_lib import SEED, Writer

RED = ["mean", "sum", "none"]


def main():
    w = Writer("tests/fixtures/loss.txt", "losses (include/dl/ops/loss.h)")
    g = torch.Generator().manual_seed(SEED)

    def normal(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * scale

    def uniform(*shape, lo=0.0, hi=1.0):
        return lo + (hi - lo) * torch.rand(*shape, generator=g, dtype=torch.float64)

    def labels(n, c):
        return torch.randint(0, c, (n,), generator=g, dtype=torch.int64)

    for r, red in enumerate(RED):
        # mse: 3-d, both inputs with gradients
        w.op("mse_%s" % red, lambda x, t, reduction: F.mse_loss(x, t, reduction=RED[reduction]),
             {"x": normal(3, 4, 2), "t": normal(3, 4, 2)}, {"reduction": r})

        # cross entropy: smoothing 0 and 0.1
        for eps in (0.0, 0.1):
            tag = "ce_ls%g_%s" % (eps, red)
            w.op(tag, lambda x, labels, reduction, eps: F.cross_entropy(
                     x, labels, label_smoothing=eps, reduction=RED[reduction]),
                 {"x": normal(7, 5, scale=2.0), "labels": labels(7, 5)},
                 {"reduction": r, "eps": eps})

        # nll on log-probabilities
        w.op("nll_%s" % red, lambda x, labels, reduction: F.nll_loss(
                 x, labels, reduction=RED[reduction]),
             {"x": F.log_softmax(normal(6, 4, scale=2.0), dim=1), "labels": labels(6, 4)},
             {"reduction": r})

        # bce with logits: target may require a gradient
        w.op("bce_%s" % red, lambda x, t, reduction: F.binary_cross_entropy_with_logits(
                 x, t, reduction=RED[reduction]),
             {"x": normal(5, 6, scale=2.0), "t": uniform(5, 6)}, {"reduction": r})

        # huber: both sides of delta
        for delta in (1.0, 0.5):
            w.op("huber_d%g_%s" % (delta, red), lambda x, t, reduction, delta: F.huber_loss(
                     x, t, reduction=RED[reduction], delta=delta),
                 {"x": normal(4, 5, scale=1.5), "t": normal(4, 5)},
                 {"reduction": r, "delta": delta})

        # smooth l1: beta 1, 0.5 and 0 (the L1 loss)
        for beta in (1.0, 0.5, 0.0):
            w.op("sl1_b%g_%s" % (beta, red), lambda x, t, reduction, beta: F.smooth_l1_loss(
                     x, t, reduction=RED[reduction], beta=beta),
                 {"x": normal(4, 5, scale=1.5), "t": normal(4, 5)},
                 {"reduction": r, "beta": beta})

    # cross entropy of the MLP's shape (batch 64, 10 classes)
    w.op("ce_mlp_ls0.1_mean", lambda x, labels, reduction, eps: F.cross_entropy(
             x, labels, label_smoothing=eps, reduction=RED[reduction]),
         {"x": normal(64, 10, scale=3.0), "labels": labels(64, 10)}, {"reduction": 0, "eps": 0.1})

    # cross entropy at very large logits (exact: the row max is subtracted)
    x = torch.tensor([[1e4, 0.0, -1e4], [0.0, 1e4, 5e3], [-1e4, -1e4, 1e4], [3e3, 1e4, 1e4]],
                     dtype=torch.float64)
    for eps in (0.0, 0.1):
        w.op("ce_big_ls%g" % eps, lambda x, labels, reduction, eps: F.cross_entropy(
                 x, labels, label_smoothing=eps, reduction=RED[reduction]),
             {"x": x, "labels": torch.tensor([0, 0, 1, 2])}, {"reduction": 2, "eps": eps})
    w.close()


if __name__ == "__main__":
    main()
