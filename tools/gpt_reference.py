#!/usr/bin/python3
"""tools/gpt_reference.py - a GPT written in PyTorch with dl.h's parameter
names (include/dl/transformer.h, nanoGPT's), the reference of
tests/test_gpt_parity.c and of the GPT benchmark.

  gpt_reference.py DIR      for every DIR/NAME_DT_init.safetensors (written
                            by `test_gpt_parity --write-init DIR`): load the
                            weights with load_state_dict (strict), run 10
                            AdamW steps on its tokens, write
                            DIR/NAME_DT_ref.safetensors (losses [10] f64 and
                            the final weights)
  gpt_reference.py load FILE --heads N [--ctx N] [TEXT]
                            load a weights file of examples/gpt.c (--save;
                            the architecture from its names and shapes, the
                            heads given, the context too with rope, else
                            wpe's rows) with load_state_dict
                            (strict) and print its parameter count; with
                            TEXT (a file of bytes) also its bits per byte
                            and next-byte accuracy on TEXT, scored as gpt.c
                            scores its test text (every byte after the first
                            once, from windows of ctx bytes overlapping by
                            half)

The model (config from the file's shapes and NAME):
  x = wte[idx] (+ wpe[pos]);  per block  x += c_proj(attn(ln_1(x)));
  x += mlp(ln_2(x));  logits = ln_f(x) @ W^T, W = wte (tied) or lm_head.
Token shift (when the file has h.N.attn.shift): each of ln_1's and ln_2's
outputs h becomes h + shift * (h one position back, zero at 0, - h).
attention: q, k, v = c_attn(h).split(C), heads of width C/H, rope on q and k
(rotate-half, base 10000), scores q k^T / sqrt(hd) with the causal -inf
mask, softmax, @ v. mlp: c_proj(gelu(c_fc(h))) (exact GELU) or SwiGLU
c_proj(silu(g) * u) with [g; u] = c_fc(h). RMSNorm (torch 1.13 has none):
x / sqrt(mean(x^2) + eps) * w, eps the dtype's machine epsilon.
Training: cross_entropy, clip_grad_norm_(1.0), AdamW(lr 1e-2, betas (0.9,
0.95), eps 1e-8) with weight_decay 0.1 on the 2-d parameters and 0 on the
rest (nanoGPT's configure_optimizers).
"""
import glob
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_safetensors as st  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, c, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c, dtype=dtype))
        self.eps = torch.finfo(dtype).eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def norm(cfg, c):
    if cfg["rmsnorm"]:
        return RMSNorm(c, cfg["dtype"])
    return nn.LayerNorm(c, eps=1e-5, dtype=cfg["dtype"])


def rope(x, base=10000.0):
    """x [B, H, T, D]: rotate-half rotary embedding at positions 0 .. T-1 (angles in f64)."""
    T, D = x.shape[-2], x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    c, s = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., : D // 2].double(), x[..., D // 2:].double()
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1).to(x.dtype)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, F_, bias, dt = cfg["embed"], cfg["hidden"], cfg["bias"], cfg["dtype"]
        self.cfg = cfg
        self.ln_1 = norm(cfg, C)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(C, 3 * C, bias=bias, dtype=dt)
        self.attn.c_proj = nn.Linear(C, C, bias=bias, dtype=dt)
        self.ln_2 = norm(cfg, C)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(C, 2 * F_ if cfg["swiglu"] else F_, bias=bias, dtype=dt)
        self.mlp.c_proj = nn.Linear(F_, C, bias=bias, dtype=dt)
        if cfg["shift"]:
            self.attn.shift = nn.Parameter(torch.full((C,), 0.5, dtype=dt))
            self.mlp.shift = nn.Parameter(torch.full((C,), 0.5, dtype=dt))

    @staticmethod
    def token_shift(h, mu):
        return h + mu * (F.pad(h, (0, 0, 1, 0))[:, :-1] - h)

    def forward(self, x):
        B, T, C = x.shape
        H = self.cfg["heads"]
        h = self.ln_1(x)
        if self.cfg["shift"]:
            h = self.token_shift(h, self.attn.shift)
        q, k, v = self.attn.c_attn(h).split(C, dim=2)
        q, k, v = [t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v)]
        if self.cfg["rope"]:
            q, k = rope(q), rope(k)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attn.c_proj(y)
        h = self.ln_2(x)
        if self.cfg["shift"]:
            h = self.token_shift(h, self.mlp.shift)
        h = self.mlp.c_fc(h)
        if self.cfg["swiglu"]:
            g, u = h.split(self.cfg["hidden"], dim=2)
            h = F.silu(g) * u
        else:
            h = F.gelu(h)
        return x + self.mlp.c_proj(h)


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        dt = cfg["dtype"]
        self.cfg = cfg
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(cfg["vocab"], cfg["embed"], dtype=dt)
        if not cfg["rope"]:
            self.transformer.wpe = nn.Embedding(cfg["context"], cfg["embed"], dtype=dt)
        self.transformer.h = nn.ModuleList([Block(cfg) for _ in range(cfg["layers"])])
        self.transformer.ln_f = norm(cfg, cfg["embed"])
        if cfg["untied"]:
            self.transformer.lm_head = nn.Linear(cfg["embed"], cfg["vocab"], bias=False, dtype=dt)

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx)
        if not self.cfg["rope"]:
            x = x + t.wpe(torch.arange(idx.shape[1]))
        for b in t.h:
            x = b(x)
        x = t.ln_f(x)
        w = t.lm_head.weight if self.cfg["untied"] else t.wte.weight
        return F.linear(x, w)


def config_of(sd, heads):
    """The architecture from a state_dict's names and shapes."""
    V, C = sd["transformer.wte.weight"].shape
    layers = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("transformer.h."))
    fc = sd["transformer.h.0.mlp.c_fc.weight"].shape[0]
    F_ = sd["transformer.h.0.mlp.c_proj.weight"].shape[1]
    return {
        "vocab": V, "embed": C, "layers": layers, "heads": heads, "hidden": F_,
        "context": sd["transformer.wpe.weight"].shape[0] if "transformer.wpe.weight" in sd else 1 << 20,
        "rope": "transformer.wpe.weight" not in sd, "swiglu": fc == 2 * F_,
        "rmsnorm": "transformer.ln_f.bias" not in sd, "untied": "transformer.lm_head.weight" in sd,
        "bias": "transformer.h.0.attn.c_attn.bias" in sd, "dtype": sd["transformer.wte.weight"].dtype,
        "shift": "transformer.h.0.attn.shift" in sd,
    }


def train(path, steps=10):
    tensors, _ = st.read(path)
    tokens = tensors.pop("tokens")
    cfg = config_of(tensors, heads=2)
    torch.manual_seed(0)
    model = GPT(cfg)
    model.load_state_dict(tensors, strict=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for s in range(steps):
        x, y = tokens[s, :, :-1], tokens[s, :, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out["losses"] = torch.tensor(losses, dtype=torch.float64)
    ref = path.replace("_init.safetensors", "_ref.safetensors")
    st.write(ref, out)
    print("%s: loss %.6f -> %.6f, wrote %s" % (os.path.basename(path), losses[0], losses[-1], ref))


def score(model, text, T, chunk=64):
    """examples/gpt.c's eval_text: windows k of T bytes starting at k * (T - T/2); window 0 scores its
    positions 0 .., the others from T/2 on; mean nats per byte and next-byte accuracy."""
    L, W = len(text), T // 2
    S = T - W
    tok = torch.tensor(list(text) + [0] * (T + 1), dtype=torch.int64)  # zeros past the end, as gpt.c
    wins, k = [], 0
    while True:
        s, j0 = k * S, (W if k else 0)
        if s + j0 + 1 > L - 1:
            break
        wins.append((s, j0, min(T, L - 1 - s)))
        k += 1
    nats, hits, count = 0.0, 0, 0
    with torch.no_grad():
        for c in range(0, len(wins), chunk):
            part = wins[c:c + chunk]
            x = torch.stack([tok[s:s + T] for s, _, _ in part])
            y = torch.stack([tok[s + 1:s + 1 + T] for s, _, _ in part])
            lp = F.log_softmax(model(x).double(), -1)
            for b, (s, j0, to) in enumerate(part):
                nats -= lp[b, torch.arange(j0, to), y[b, j0:to]].sum().item()
                hits += (lp[b, j0:to].argmax(-1) == y[b, j0:to]).sum().item()
                count += to - j0
    if not count:  # fewer than 2 bytes: nothing to predict (gpt.c prints nan)
        return math.nan, math.nan, 0
    return nats / count, hits / count, count


def load(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="gpt_reference.py load")
    ap.add_argument("file")
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--ctx", type=int, help="the context (default: wpe's rows; required with rope)")
    ap.add_argument("text", nargs="?")
    a = ap.parse_intermixed_args(argv)
    tensors, _ = st.read(a.file)
    cfg = config_of(tensors, heads=a.heads)
    if not cfg["rope"]:
        if a.ctx is None:
            a.ctx = cfg["context"]
        elif a.ctx != cfg["context"]:
            sys.exit("--ctx %d, but %s has learned positions for a context of %d" % (a.ctx, a.file, cfg["context"]))
    elif a.ctx is None or a.ctx < 1:
        sys.exit("%s has rotary positions: give its context with --ctx N (gpt.c's --ctx)" % a.file)
    model = GPT(cfg)
    model.load_state_dict(tensors, strict=True)
    model.eval()
    flags = [f for f in ("rope", "swiglu", "rmsnorm", "untied", "shift") if cfg[f]]
    print("%s: %d layers of %d, %d heads, %d parameters%s" % (
        a.file, cfg["layers"], cfg["embed"], a.heads, sum(p.numel() for p in model.parameters()),
        (", " + ", ".join(flags)) if flags else ""))
    if a.text:
        with open(a.text, "rb") as f:
            text = f.read()
        nats, acc, n = score(model, text, a.ctx)
        print("bits per byte %.6f, next-byte accuracy %.6f, %d bytes scored" % (nats / math.log(2), acc, n))
    return 0


def main(argv):
    torch.set_num_threads(1)
    if len(argv) >= 2 and argv[1] == "load":
        return load(argv[2:])
    if len(argv) == 2:
        files = sorted(glob.glob(os.path.join(argv[1], "*_init.safetensors")))
        if not files:
            sys.exit("no *_init.safetensors in %s (run test_gpt_parity --write-init %s first)" % (argv[1], argv[1]))
        for f in files:
            train(f)
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
