#!/usr/bin/python3
"""bench/torch_train.py - PyTorch reference for the training benchmark
(bench/run_train.sh): the training loop of examples/fashion_mlp.c or
examples/fashion_cnn.c, written the way a PyTorch user would, in eager mode.

  /usr/bin/python3 bench/torch_train.py MODEL [subset=20000] [threads=2]
                   [epochs=1] [batch=64] [data=/usr/share/datasets/fashion-mnist] [device=cpu]
                   [loop=readback]

loop `plain` is PyTorch's best honest loop for the same training: the same
steps without reading the loss and the number right back every step (the
loss is summed on the device and read once per epoch), the learning rate
still set every step. `readback` (default) reads both every step, as the C
programs do for their progress line.

device `cuda` (bench/run_gpu.sh) trains on the GPU: the model there, each
batch made on the host as below and copied over with .to("cuda"), as the C
programs' --device cuda does; `SKIP` when torch has no CUDA device.

MODEL is `mlp` (Flatten, Linear(784, 256), ReLU, Linear(256, 128), ReLU,
Linear(128, 10)) or `cnn` (Conv2d(1, 32, 3, padding=1), BatchNorm2d(32), ReLU,
MaxPool2d(2), Conv2d(32, 64, 3, padding=1), BatchNorm2d(64), ReLU,
MaxPool2d(2), Flatten, Linear(3136, 128), ReLU, Dropout(0.25),
Linear(128, 10)). As in the C programs: the first `subset` training images of
Fashion-MNIST (IDX gzip files read with gzip + numpy), Adam(lr=1e-3), the
learning rate on a cosine from 1e-3 down to 0 over the run, cross-entropy,
reshuffled every epoch. Each step: gather the batch from the u8 images and
standardise it ((x / 255 - 0.2860) / 0.3530, what dl.h's batcher does per
batch inside its timed loop), set the learning rate, forward, cross-entropy,
the loss and the number right as Python numbers (the C programs read both
every step for their progress line), backward, Adam step, zero_grad.

Timed: from the epoch's shuffle to its last step, summed over the epochs
(reading the files and the evaluation are not). After training, the test set
is evaluated once (batch 1000 for the MLP, 500 for the CNN, as the C programs
do), untimed, so the peak memory covers what the C program does too. Prints
one line:
  torch_train model=mlp samples_per_s=... threads=2 steps=313 ... test_acc=...
or `SKIP ...` (exit 0) when torch cannot be imported.
"""
import gzip
import math
import os
import sys
import time

MEAN, STD = 0.2860, 0.3530


def read_idx(path, header):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    import numpy as np
    return np.frombuffer(raw, dtype=np.uint8, offset=header)


def load_fashion(data, subset):
    """The first `subset` training images and labels (0: all) and the test set, as numpy u8 arrays
    (images [N, 1, 28, 28]); also used by torch_train_graph.py."""
    xtr = read_idx(os.path.join(data, "train-images-idx3-ubyte.gz"), 16).reshape(-1, 1, 28, 28)
    ytr = read_idx(os.path.join(data, "train-labels-idx1-ubyte.gz"), 8)
    xte = read_idx(os.path.join(data, "t10k-images-idx3-ubyte.gz"), 16).reshape(-1, 1, 28, 28)
    yte = read_idx(os.path.join(data, "t10k-labels-idx1-ubyte.gz"), 8)
    if subset > 0:
        xtr, ytr = xtr[:subset], ytr[:subset]
    return xtr, ytr, xte, yte


def build_model(nn, kind):
    """The C example's model (see the module's text) and its evaluation batch size."""
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10)), 1000
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10)), 500


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("mlp", "cnn"):
        print(__doc__)
        return 2
    kind = sys.argv[1]
    subset = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 64
    data = sys.argv[6] if len(sys.argv) > 6 else "/usr/share/datasets/fashion-mnist"
    device = sys.argv[7] if len(sys.argv) > 7 else "cpu"
    plain = (sys.argv[8] if len(sys.argv) > 8 else "readback") == "plain"
    try:
        import numpy  # noqa: F401
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # ImportError, or a broken install raising something else
        print(f"SKIP torch_train: {sys.executable} cannot import torch/numpy ({e.__class__.__name__}: {e})")
        return 0
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    if device != "cpu" and not torch.cuda.is_available():
        print(f"SKIP torch_train: torch {torch.__version__} sees no CUDA device")
        return 0
    dev = torch.device(device)

    xtr, ytr, xte, yte = load_fashion(data, subset)
    xtr = torch.from_numpy(xtr.copy())          # u8 [N, 1, 28, 28]
    ytr = torch.from_numpy(ytr.astype("int64"))
    n = xtr.shape[0]

    model, eval_batch = build_model(nn, kind)
    model.to(dev)
    lr0 = 1e-3
    opt = torch.optim.Adam(model.parameters(), lr=lr0)
    steps_per_epoch = (n + batch - 1) // batch
    total = steps_per_epoch * epochs
    gen = torch.Generator().manual_seed(1)

    model.train()
    step, seconds, loss_sum, right = 0, 0.0, 0.0, 0
    for _ in range(epochs):
        t0 = time.perf_counter()
        loss_acc = torch.zeros((), device=dev)
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            xb = xtr[idx].float().div_(255.0).sub_(MEAN).div_(STD).to(dev)
            yb = ytr[idx].to(dev)
            for g in opt.param_groups:
                g["lr"] = lr0 * 0.5 * (1.0 + math.cos(math.pi * step / total))
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            if plain:
                loss_acc += loss.detach()
            else:
                loss_sum += loss.item()
                right += int((logits.argmax(1) == yb).sum().item())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
        if plain:
            loss_sum += float(loss_acc)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        seconds += time.perf_counter() - t0

    model.eval()
    correct = 0
    xte_t, yte_t = torch.from_numpy(xte.copy()), torch.from_numpy(yte.astype("int64"))
    with torch.no_grad():
        for i in range(0, xte_t.shape[0], eval_batch):
            xb = xte_t[i:i + eval_batch].float().div_(255.0).sub_(MEAN).div_(STD).to(dev)
            correct += int((model(xb).argmax(1).cpu() == yte_t[i:i + eval_batch]).sum().item())
    print("torch_train model=%s samples_per_s=%.1f threads=%d steps=%d batch=%d train_s=%.3f train_loss=%.4f "
          "train_acc=%.4f test_acc=%.4f torch=%s device=%s loop=%s" % (
              kind, n * epochs / seconds, threads, step, batch, seconds, loss_sum / step, float("nan") if plain else right / (n * epochs),
              correct / xte_t.shape[0], torch.__version__,
              torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "plain" if plain else "readback"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
