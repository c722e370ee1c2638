#!/usr/bin/python3
"""bench/torch_conv.py - PyTorch reference for bench/bench_conv.c.

One training step of a 5x5 convolution, 32 -> 64 channels, 12x12 input,
padding 0, stride 1, batch 64, float32 (shape "5x5"), or of fashion_cnn's
second convolution, 3x3, 32 -> 64 channels, 14x14 input, padding 1 (shape
"3x3"), with 2 intra-op threads:
  y = conv2d(x, w, b); y.backward(gy)
with x, w and b all requiring gradients (as in a network whose earlier
layers train). Gradients are zeroed (set to None) before each step.
Prints the median milliseconds per step over `reps` repeats of `steps`
steps each (after one warm-up repeat):
  torch_ms=...

Run with Debian's interpreter, which has python3-torch:
  /usr/bin/python3 bench/torch_conv.py [reps=7] [steps=20] [threads=2] [batch=64] [shape=5x5|3x3]
Prints `SKIP ...` and exits 0 when torch cannot be imported.
"""
import statistics
import sys
import time


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    k3 = len(sys.argv) > 5 and sys.argv[5] == "3x3"
    ks, hw, pad = (3, 14, 1) if k3 else (5, 12, 0)
    ho = hw + 2 * pad - ks + 1
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # ImportError, or a broken install raising something else
        print(f"SKIP torch_conv: {sys.executable} cannot import torch ({e.__class__.__name__}: {e})")
        return 0
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(2024)
    x = (torch.rand(batch, 32, hw, hw, generator=g) * 2 - 1).requires_grad_()
    w = ((torch.rand(64, 32, ks, ks, generator=g) * 2 - 1) * 0.05).requires_grad_()
    b = (torch.rand(64, generator=g) * 2 - 1).requires_grad_()
    gy = torch.rand(batch, 64, ho, ho, generator=g) * 2 - 1

    def step():
        x.grad = w.grad = b.grad = None
        y = F.conv2d(x, w, b, padding=pad)
        y.backward(gy)

    times = []
    for r in range(-1, reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        dt = (time.perf_counter() - t0) / steps
        if r >= 0:
            times.append(dt)
    ms = statistics.median(times) * 1e3
    print(f"# torch_conv {ks}x{ks} torch={torch.__version__} mkldnn={torch.backends.mkldnn.is_available()} "
          f"threads={torch.get_num_threads()} batch={batch} reps={reps} steps={steps} "
          f"min_ms={min(times) * 1e3:.3f} max_ms={max(times) * 1e3:.3f}")
    print(f"torch_ms={ms:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
