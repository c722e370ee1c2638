#!/usr/bin/python3
"""bench/torch_step.py - PyTorch reference for bench/bench_step.c.

One training step of a 784-256-128-10 MLP (ReLU, cross-entropy from logits)
at batch 64, float32, eager mode: zero the gradients (set to None), forward,
backward, clip_grad_norm_(max_norm=1), Adam(lr=1e-3) step. Medians of `reps`
repeats of `steps` steps after one warm-up repeat.

  /usr/bin/python3 bench/torch_step.py [reps=7] [steps=50] [threads=2] [batch=64]
prints: torch_step_ms=<median> ...   or `SKIP ...` when torch is missing.
"""
import statistics
import sys
import time


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:
        print(f"SKIP torch_step: {sys.executable} cannot import torch ({e.__class__.__name__}: {e})")
        return 0
    torch.set_num_threads(threads)
    torch.manual_seed(42)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(batch, 784)
    y = torch.randint(0, 10, (batch,))
    times = []
    loss = None
    for r in range(reps + 1):
        time.sleep(0.02)
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        if r > 0:
            times.append((time.perf_counter() - t0) * 1e3 / steps)
    print("torch_step_ms=%.4f batch=%d threads=%d torch=%s loss=%.4g" % (
        statistics.median(times), batch, threads, torch.__version__, loss.item()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
