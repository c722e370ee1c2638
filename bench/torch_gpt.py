#!/usr/bin/python3
"""bench/torch_gpt.py THREADS T STEPS [B] - PyTorch's side of bench/run_gpt.sh:
the GPT of tools/gpt_reference.py (dl.h's names and architecture: L4 H4 C256,
learned positions, LayerNorm, exact GELU, tied head) with context T, batch B
(8) of random byte tokens, trained as a good PyTorch user would write it:
cross_entropy, zero_grad(set_to_none=True), backward, clip_grad_norm_(1.0),
AdamW (betas 0.9/0.95, weight decay 0.1 on the 2-d parameters, foreach
implementation, the default), 3 warm-up steps, STEPS timed, no per-step
reads of the loss. Prints "tokens_per_s=X max_rss_kb=Y" like bench_gpt.

bench/torch_gpt.py attn THREADS T REPS [B H D] - causal attention alone, as
the reference model computes it (torch 1.13 has no fused attention on the
CPU): q, k, v [B, H, T, D] (8, 4, T, 64) f32 that require gradients,
softmax(q k^T / sqrt(D) + causal mask) v, then backward of a fixed gradient;
prints "attn_fwd_us=X attn_bwd_us=Y" (medians of REPS after 3 warm-ups).
"""
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import gpt_reference as R  # noqa: E402


def attn(argv):
    th, T, reps = int(argv[2]), int(argv[3]), int(argv[4])
    B, H, D = (int(argv[5]), int(argv[6]), int(argv[7])) if len(argv) > 7 else (8, 4, 64)
    torch.set_num_threads(th)
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    gy = torch.randn(B, H, T, D)
    mask = torch.full((T, T), float("-inf")).triu(1)
    fw, bw = [], []
    for r in range(reps + 3):
        t0 = time.perf_counter()
        y = torch.softmax(q @ k.transpose(-2, -1) / D ** 0.5 + mask, dim=-1) @ v
        t1 = time.perf_counter()
        y.backward(gy)
        t2 = time.perf_counter()
        q.grad = k.grad = v.grad = None
        if r >= 3:
            fw.append(t1 - t0)
            bw.append(t2 - t1)
    fw.sort()
    bw.sort()
    print("attn_fwd_us=%.1f attn_bwd_us=%.1f" % (fw[len(fw) // 2] * 1e6, bw[len(bw) // 2] * 1e6))


def main(argv):
    if argv[1] == "attn":
        return attn(argv)
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
