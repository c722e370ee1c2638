#!/usr/bin/python3
"""bench/torch_fused.py - PyTorch reference for bench/bench_fused.c.

y = tanh(a*b + c) over n float32 elements (default 2^24) with 2 intra-op
threads, two ways:
  separate  y = torch.tanh(a * b + c)           three eager ops, two temporaries
  out       torch.mul(a, b, out=t); torch.add(t, c, out=t); torch.tanh(t, out=y)
            the same three passes over memory, into preallocated buffers
Medians of `reps` timed runs after two warm-up runs. GB/s counts the same
useful traffic as bench_fused's figure (4 arrays x 4 bytes per element), so
the GB/s ratio is the speed ratio.

Run with Debian's interpreter, which has python3-torch:
  /usr/bin/python3 bench/torch_fused.py [log2(n)=24] [reps=9] [threads=2]
Prints `SKIP ...` and exits 0 when torch cannot be imported.
"""
import statistics
import sys
import time


def main():
    lg = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        print(f"SKIP torch_fused: {sys.executable} cannot import torch ({e.__class__.__name__}: {e})")
        return 0
    torch.set_num_threads(threads)
    n = 1 << lg
    g = torch.Generator().manual_seed(2024)
    a = torch.rand(n, generator=g) * 2 - 1
    b = torch.rand(n, generator=g) * 2 - 1
    c = torch.rand(n, generator=g) * 2 - 1
    t = torch.empty(n)
    y = torch.empty(n)

    def separate():
        return torch.tanh(a * b + c)

    def with_out():
        torch.mul(a, b, out=t)
        torch.add(t, c, out=t)
        torch.tanh(t, out=y)
        return y

    times = {"separate": [], "out": []}
    fns = {"separate": separate, "out": with_out}
    with torch.no_grad():
        for r in range(-2, reps):
            for name, fn in fns.items():  # interleaved: both share the machine's drift
                t0 = time.perf_counter()
                fn()
                dt = time.perf_counter() - t0
                if r >= 0:
                    times[name].append(dt)
        diff = (separate() - with_out()).abs().max().item()

    print(f"# torch_fused torch={torch.__version__} n={n} threads={torch.get_num_threads()} "
          f"reps={reps} (medians) check max_abs_diff={diff:.3g}")
    for name in ("separate", "out"):
        ms = statistics.median(times[name]) * 1e3
        gbs = 16.0 * n / (ms * 1e-3) * 1e-9
        print(f"torch_{name}_ms={ms:.3f} torch_{name}_gbs={gbs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
