#!/usr/bin/python3
"""bench/torch_train_graph.py - PyTorch's best GPU training loop for the
models of bench/torch_train.py: what a PyTorch user who knows the GPU writes
(the reference for bench/run_gpu.sh next to torch_train.py's eager loop).

  python3 bench/torch_train_graph.py MODEL [subset=20000] [epochs=1] [batch=64]
                                     [data=/usr/share/datasets/fashion-mnist]

- the training images live on the GPU as u8 (as dl.h keeps them on the
  host), with their labels; each step gathers its batch there through a
  shuffled index and standardises it ((x / 255 - 0.2860) / 0.3530) into the
  graph's static input;
- the whole step (forward, cross-entropy, backward, Adam with
  capturable=True and the learning rate as a device tensor, zeroed
  gradients) is captured once with torch.cuda.graph, after warm-up steps on
  a side stream, as the CUDA-graphs section of the PyTorch documentation
  shows for whole-network capture, and replayed; the cosine learning rate
  is written into its tensor before each replay;
- the loss and the number right are summed on the device inside the graph
  and read once at the end (the progress a user would print every N steps
  costs one read each).

Full batches only (a captured graph has fixed shapes: the last partial
batch of an epoch is dropped and not counted). Timed: the replayed epochs,
from the first gather to a synchronize after the last replay; the warm-up
and the capture are printed apart (capture_s). Then the test set, untimed.
Prints one line:
  torch_graph model=mlp samples_per_s=... steps=... batch=... capture_s=... peak_mib=... test_acc=...
or SKIP (exit 0) without torch or a CUDA device.
"""
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import MEAN, STD, build_model, load_fashion  # noqa: E402  the same data and models


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("mlp", "cnn"):
        print(__doc__)
        return 2
    kind = sys.argv[1]
    subset = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    data = sys.argv[5] if len(sys.argv) > 5 else "/usr/share/datasets/fashion-mnist"
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:
        print(f"SKIP torch_graph: {sys.executable} cannot import torch ({e.__class__.__name__}: {e})")
        return 0
    if not torch.cuda.is_available():
        print(f"SKIP torch_graph: torch {torch.__version__} sees no CUDA device")
        return 0
    torch.manual_seed(1)
    dev = torch.device("cuda")
    xtr, ytr, xte, yte = load_fashion(data, subset)
    X = torch.from_numpy(xtr.copy()).to(dev)                    # u8 [N, 1, 28, 28] on the GPU
    Y = torch.from_numpy(ytr.astype("int64")).to(dev)
    n = X.shape[0]
    steps_per_epoch = n // batch
    if steps_per_epoch < 4:
        print("torch_graph: fewer than 4 full batches")
        return 2

    model, eval_batch = build_model(nn, kind)
    model.to(dev).train()
    lr0 = 1e-3
    lr = torch.tensor(lr0, device=dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr, capturable=True)
    total = steps_per_epoch * epochs

    static_x = torch.empty(batch, 1, 28, 28, device=dev)
    static_y = torch.empty(batch, dtype=torch.int64, device=dev)
    loss_sum = torch.zeros((), device=dev)
    right = torch.zeros((), dtype=torch.int64, device=dev)
    gen = torch.Generator(device=dev).manual_seed(1)

    def gather(idx):
        static_x.copy_(X.index_select(0, idx).float().div_(255.0).sub_(MEAN).div_(STD))
        static_y.copy_(Y.index_select(0, idx))

    def step_body():
        logits = model(static_x)
        loss = F.cross_entropy(logits, static_y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        loss_sum.add_(loss.detach())
        right.add_((logits.argmax(1) == static_y).sum())

    # warm-up on a side stream (3 steps on the first batches), then the capture
    t0 = time.perf_counter()
    perm = torch.randperm(n, device=dev, generator=gen)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            gather(perm[i * batch:(i + 1) * batch])
            step_body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=False)
    with torch.cuda.graph(graph):
        step_body()
    torch.cuda.synchronize()
    capture_s = time.perf_counter() - t0
    loss_sum.zero_()
    right.zero_()

    torch.cuda.reset_peak_memory_stats()
    step, seconds = 0, 0.0
    for _ in range(epochs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        perm = torch.randperm(n, device=dev, generator=gen)
        for i in range(steps_per_epoch):
            gather(perm[i * batch:(i + 1) * batch])
            lr.fill_(lr0 * 0.5 * (1.0 + math.cos(math.pi * step / total)))
            graph.replay()
            step += 1
        torch.cuda.synchronize()
        seconds += time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**20

    model.eval()
    correct = 0
    xte_t, yte_t = torch.from_numpy(xte.copy()).to(dev), torch.from_numpy(yte.astype("int64")).to(dev)
    with torch.no_grad():
        for i in range(0, xte_t.shape[0], eval_batch):
            xb = xte_t[i:i + eval_batch].float().div_(255.0).sub_(MEAN).div_(STD)
            correct += int((model(xb).argmax(1) == yte_t[i:i + eval_batch]).sum().item())
    samples = steps_per_epoch * batch * epochs
    print("torch_graph model=%s samples_per_s=%.1f steps=%d batch=%d train_s=%.3f capture_s=%.3f peak_mib=%.1f "
          "train_loss=%.4f train_acc=%.4f test_acc=%.4f torch=%s device=%s" % (
              kind, samples / seconds, step, batch, seconds, capture_s, peak, loss_sum.item() / step,
              right.item() / samples, correct / xte_t.shape[0], torch.__version__, torch.cuda.get_device_name(dev)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
