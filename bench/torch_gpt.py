#!/usr/bin/python3
"""bench/torch_gpt.py THREADS T STEPS [B] - PyTorch's side of bench/run_gpt.sh:
the GPT of tools/gpt_reference.py (dl.h's names and architecture: L4 H4 C256,
learned positions, LayerNorm, exact GELU, tied head) with context T, batch B
(8) of random byte tokens, trained as a good PyTorch user would write it:
cross_entropy, zero_grad(set_to_none=True), backward, clip_grad_norm_(1.0),
AdamW (betas 0.9/0.95, weight decay 0.1 on the 2-d parameters, foreach
implementation, the default), 3 warm-up steps, STEPS timed, no per-step
reads of the loss. Prints "tokens_per_s=X max_rss_kb=Y" like bench_gpt.
"""
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import gpt_reference as R  # noqa: E402


def main(argv):
    th, T, steps = int(argv[1]), int(argv[2]), int(argv[3])
    B = int(argv[4]) if len(argv) > 4 else 8
    torch.set_num_threads(th)
    cfg = {"vocab": 256, "embed": 256, "layers": 4, "heads": 4, "hidden": 1024, "context": T, "rope": False,
           "swiglu": False, "rmsnorm": False, "untied": False, "bias": True, "dtype": torch.float32}
    torch.manual_seed(0)
    m = R.GPT(cfg)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    rest = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95))
    x = torch.randint(0, 256, (B, T))
    y = torch.randint(0, 256, (B, T))

    def step():
        loss = F.cross_entropy(m(x).view(-1, 256), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dt = time.perf_counter() - t0
    print("tokens_per_s=%.1f max_rss_kb=%d" % (B * T * steps / dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))


if __name__ == "__main__":
    main(sys.argv)
