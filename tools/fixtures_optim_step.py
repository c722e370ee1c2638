#!/usr/bin/python3
"""tools/fixtures_optim_step.py - PyTorch reference trajectories for dl.h's
optimizer objects and the staged training step (include/dl/optim.h's
">>optimizer objects" and ">>clipping and regularisation"), read by
tests/test_optim_step.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_optim_step.py   # writes tests/fixtures/optim_step.txt

Two models, parameters named as PyTorch's state_dict names them:
  dense   nn.Sequential(Linear(5, 4), Linear(4, 3)):
          0.weight [4, 5], 0.bias [4], 1.weight [3, 4], 1.bias [3]
  sparse  emb = Embedding(10, 3, sparse=True), lin = Linear(3, 2):
          emb.weight [10, 3], lin.weight [2, 3], lin.bias [2]

Case `data` (f64 and f32): the initial values `i:NAME`, the fixed gradients
`g:NAME` [20, ...] of every dense-gradient parameter (written into each
gradient before each step; frozen parameters get theirs too and must ignore
them), and for the embedding the indices `idx` [20, 6] (rows 0..7, repeats
allowed, rows 8 and 9 never used) and the upstream gradients `gy` [20, 6, 3]
of each step's lookup: the embedding's gradient is the backward of
emb(idx[k]) with seed gy[k] (row-sparse in both libraries); `emb_on` [20]
is 0 at the steps without a lookup (no gradient: no update, no step counted).

Optimizer cases (f64 and f32), 20 steps each. Params:
  opt                0 SGD, 1 Adam/AdamW, 2 RMSprop, 3 Adagrad, 4 Lion, 5 Adam
                     with the embedding under torch.optim.SparseAdam
  lr momentum ...    the optimizer's settings (those given; the rest default)
  sparse             1: the sparse model
  clip_value clip_norm l1 l2   the dl_step_desc (absent = 0)
  lr_mult:NAME wd_mult:NAME clip_value:NAME clip_norm:NAME frozen:NAME
                     per-parameter settings that differ from the defaults
                     (lr_mult 1, wd_mult 1 for weights and 0 for biases)
  sched              1: cosine warm-up (base lr, warmup, total, min_lr) set
                     before each step as the group lr * lr_mult;
                     2: torch's StepLR(step_size, gamma) stepped after each step
Tensors:
  p:NAME             the parameter after steps 1, 10 and 20 ([3, ...])
  q:emb.weight       (sparse_adam) the same from LazyAdam below: torch.optim.
                     Adam's formula on the touched rows, which is optim.h's
                     rule; SparseAdam adds eps before the bias correction
  s:NAME:STATE       its optimizer state after step 20, torch's state names
                     (trained parameters only)
  norm               [20] clip_grad_norm_'s return value at each step (the
                     global gradient norm after value and per-parameter
                     clipping, before global scaling; max_norm = inf when
                     the case does not clip)

How torch runs a step (the order of dl_train_step's stages 3-5):
  1. p.grad = the fixed gradient (None for frozen parameters);
  2. clip_grad_value_(p, v) per parameter, v = its clip_value or the global
     one; clip_grad_norm_(p, clip_norm:NAME) per parameter; then
     clip_grad_norm_(all non-frozen, clip_norm or inf) -> norm;
  3. p.grad += wd_mult * (l1 * sign(p) + l2 * p) for non-frozen parameters;
  4. optimizer.step() with one param group per trained parameter
     (lr * lr_mult, weight_decay * wd_mult); frozen and lr_mult-0 parameters
     are in no group. torch's optimizers run with foreach=False; Lion, which
     torch 1.13 lacks, is the published rule (optim.h's comment) below.
"""
import math

import torch

from fixture_lib import SEED, Writer

STEPS = 20
SNAPS = (0, 9, 19)  # 0-based step indices whose results are stored
K = 6               # embedding lookups per step
EMB_OFF = (3, 11)   # steps without a lookup: the embedding has no gradient
OPT = {"sgd": 0, "adam": 1, "rmsprop": 2, "adagrad": 3, "lion": 4, "sparse_adam": 5, "lamb": 6}

DENSE = [("0.weight", (4, 5)), ("0.bias", (4,)), ("1.weight", (3, 4)), ("1.bias", (3,))]
SPARSE = [("emb.weight", (10, 3)), ("lin.weight", (2, 3)), ("lin.bias", (2,))]
STATE = {
    "sgd": ["momentum_buffer"],
    "adam": ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
    "sparse_adam": ["exp_avg", "exp_avg_sq"],
    "rmsprop": ["square_avg", "momentum_buffer", "grad_avg"],
    "adagrad": ["sum"],
    "lion": ["exp_avg"],
    "lamb": ["exp_avg", "exp_avg_sq"],
}


def make_data():
    g = torch.Generator().manual_seed(SEED)
    init, grads = {}, {}
    for name, shape in DENSE + SPARSE:
        init[name] = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
        if name == "emb.weight":
            continue
        # per-step scales from 0.1 to 3: global clipping bites on some steps only
        scale = torch.exp(torch.rand((STEPS,) + (1,) * len(shape), generator=g, dtype=torch.float64) * 3.4 - 2.3)
        grads[name] = (torch.rand((STEPS,) + shape, generator=g, dtype=torch.float64) * 2 - 1) * scale
    idx = torch.randint(0, 8, (STEPS, K), generator=g)
    gy = torch.rand((STEPS, K, 3), generator=g, dtype=torch.float64) * 2 - 1
    return init, grads, idx, gy


def cosine_warmup(base, step, warmup, total, min_lr):
    if step < warmup:
        return base * step / warmup
    if total <= warmup:
        return min_lr
    t = min((step - warmup) / (total - warmup), 1.0)
    return min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


class GroupOptimizer:
    """torch's param groups for a rule torch 1.13 lacks: each group's
    settings are the defaults updated by the group's own."""

    def __init__(self, groups, **defaults):
        self.param_groups = [dict(defaults, **gr) for gr in groups]
        self.state = {}


class Lion(GroupOptimizer):
    """The published rule, one param group per parameter (like torch's)."""

    def __init__(self, groups, lr, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(groups, lr=lr, betas=betas, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self):
        for gr in self.param_groups:
            b1, b2 = gr["betas"]
            for p in gr["params"]:
                if p.grad is None:
                    continue
                st = self.state.setdefault(p, {"exp_avg": torch.zeros_like(p)})
                m, g = st["exp_avg"], p.grad
                c = b1 * m + (1 - b1) * g
                p.mul_(1 - gr["lr"] * gr["weight_decay"]).sub_(gr["lr"] * torch.sign(c))
                m.mul_(b2).add_((1 - b2) * g)


class Lamb(GroupOptimizer):
    """LAMB as the paper writes it (You et al. 2020, Algorithm 2), the trust
    ratio per parameter tensor; tools/fixtures_optim.py's lamb_run in a
    param-group optimizer."""

    def __init__(self, groups, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, max_trust=0.0,
                 bias_correction=1):
        super().__init__(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, max_trust=max_trust,
                         bias_correction=bias_correction)

    @torch.no_grad()
    def step(self):
        for gr in self.param_groups:
            b1, b2 = gr["betas"]
            for p in gr["params"]:
                if p.grad is None:
                    continue
                st = self.state.setdefault(p, {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p),
                                               "step": 0})
                st["step"] += 1
                t, m, v, g = st["step"], st["exp_avg"], st["exp_avg_sq"], p.grad
                m.mul_(b1).add_((1 - b1) * g)
                v.mul_(b2).add_((1 - b2) * g * g)
                mh = m / (1 - b1 ** t) if gr["bias_correction"] else m
                vh = v / (1 - b2 ** t) if gr["bias_correction"] else v
                u = mh / (vh.sqrt() + gr["eps"]) + gr["weight_decay"] * p
                pn, un = p.double().norm().item(), u.double().norm().item()
                trust = pn / un if pn > 0 and un > 0 else 1.0
                if gr["max_trust"] > 0:
                    trust = min(trust, gr["max_trust"])
                p.sub_(gr["lr"] * trust * u)


class LazyAdam:
    """torch.optim.Adam's single-tensor formula (eps added after the bias
    correction of sqrt(v)) applied to the rows of a sparse gradient only,
    the step count being the parameter's: what optim.h's lazy Adam
    computes. SparseAdam differs only in where eps enters:
    p -= lr sqrt(bc2) / bc1 * m / (sqrt(v) + eps)."""

    def __init__(self, p, lr, betas, eps):
        self.p, self.lr, self.betas, self.eps = p, lr, betas, eps
        self.m, self.v, self.step_count = torch.zeros_like(p), torch.zeros_like(p), 0

    @torch.no_grad()
    def step(self, grad):
        g = grad.coalesce()
        rows, vals = g._indices()[0], g._values()
        b1, b2 = self.betas
        self.step_count += 1
        m, v = self.m[rows], self.v[rows]
        m.mul_(b1).add_(vals, alpha=1 - b1)
        v.mul_(b2).addcmul_(vals, vals, value=1 - b2)
        step_size = self.lr / (1 - b1 ** self.step_count)
        denom = (v.sqrt() / math.sqrt(1 - b2 ** self.step_count)).add_(self.eps)
        p = self.p[rows].addcdiv_(m, denom, value=-step_size)
        self.m[rows], self.v[rows], self.p[rows] = m, v, p


def run(kind, cfg, dtype, data, sparse=False, hp=None, step=None, sched=None):
    """Returns (snapshots by name, final states by name, norms, the lazy
    Adam-formula snapshots of emb.weight for sparse_adam)."""
    init, grads, idx, gy = data
    hp = hp or {}
    step = step or {}
    layout = SPARSE if sparse else DENSE
    P = {n: init[n].to(dtype).clone().requires_grad_(True) for n, _ in layout}

    def h(key, name):
        d = {"lr_mult": 1.0, "wd_mult": 0.0 if name.endswith("bias") else 1.0, "clip_value": 0.0,
             "clip_norm": 0.0, "frozen": 0}[key]
        return hp.get(name, {}).get(key, d)

    for n in P:
        if h("frozen", n):
            P[n].requires_grad_(False)
    trained = [n for n in P if not h("frozen", n) and h("lr_mult", n) != 0]
    lr = cfg["lr"]
    wd = cfg.get("weight_decay", 0.0)
    groups = [{"params": [P[n]], "lr": lr * h("lr_mult", n), "weight_decay": wd * h("wd_mult", n)} for n in trained
              if not (sparse and n == "emb.weight" and kind == "sparse_adam")]
    kw = {k: v for k, v in cfg.items() if k not in ("lr", "weight_decay", "decoupled", "beta1", "beta2")}
    betas = (cfg.get("beta1", 0.9), cfg.get("beta2", 0.999 if kind != "lion" else 0.99))
    opts = []
    if kind == "sgd":
        opts.append(torch.optim.SGD(groups, lr=lr, foreach=False, **kw))
    elif kind in ("adam", "sparse_adam"):
        cls = torch.optim.AdamW if cfg.get("decoupled") else torch.optim.Adam
        opts.append(cls(groups, lr=lr, betas=betas, foreach=False, **kw))
        if kind == "sparse_adam":
            opts.append(torch.optim.SparseAdam([P["emb.weight"]], lr=lr * h("lr_mult", "emb.weight"), betas=betas,
                                               eps=cfg.get("eps", 1e-8)))
    elif kind == "rmsprop":
        opts.append(torch.optim.RMSprop(groups, lr=lr, foreach=False, **kw))
    elif kind == "adagrad":
        opts.append(torch.optim.Adagrad(groups, lr=lr, foreach=False, **kw))
    elif kind == "lamb":
        opts.append(Lamb(groups, lr=lr, betas=betas, eps=cfg.get("eps", 1e-6), weight_decay=wd,
                         max_trust=cfg.get("max_trust", 0.0), bias_correction=cfg.get("bias_correction", 1)))
    else:
        opts.append(Lion(groups, lr=lr, betas=betas, weight_decay=wd))
    steplr = None
    if sched and sched["sched"] == 2:
        steplr = [torch.optim.lr_scheduler.StepLR(o, step_size=sched["step_size"], gamma=sched["gamma"])
                  for o in opts]
    snaps = {n: [] for n in P}
    norms, lazy_snaps, lazy = [], [], None
    if kind == "sparse_adam":
        lazy = LazyAdam(init["emb.weight"].to(dtype).clone(), lr * h("lr_mult", "emb.weight"), betas,
                        cfg.get("eps", 1e-8))
    for k in range(STEPS):
        for n, p in P.items():
            p.grad = None
            if h("frozen", n):
                continue
            if n == "emb.weight":
                if k in EMB_OFF:
                    continue
                torch.nn.functional.embedding(idx[k], p, sparse=True).backward(gy[k].to(dtype))
            else:
                p.grad = grads[n][k].to(dtype).clone()
        live = [n for n in P if not h("frozen", n)]
        for n in live:
            cv = h("clip_value", n) or step.get("clip_value", 0.0)
            if cv > 0:
                torch.nn.utils.clip_grad_value_([P[n]], cv)
            if h("clip_norm", n) > 0:
                torch.nn.utils.clip_grad_norm_([P[n]], h("clip_norm", n))
        if sparse:  # clip_grad_norm_'s formula, with the sparse gradient coalesced
            ns = [(P[n].grad.coalesce()._values() if P[n].grad.is_sparse else P[n].grad).norm() for n in live
                  if P[n].grad is not None]
            norms.append(float(torch.stack(ns).norm()))
            assert not step.get("clip_norm")
        else:
            cn = step.get("clip_norm", 0.0)
            norms.append(float(torch.nn.utils.clip_grad_norm_([P[n] for n in live], cn if cn > 0 else math.inf)))
        l1, l2 = step.get("l1", 0.0), step.get("l2", 0.0)
        if l1 or l2:
            assert not sparse
            with torch.no_grad():
                for n in live:
                    wm = h("wd_mult", n)
                    if wm != 0:
                        P[n].grad.add_((l2 * wm) * P[n] + (l1 * wm) * torch.sign(P[n]))
        if sched and sched["sched"] == 1:
            base = cosine_warmup(lr, k, sched["warmup"], sched["total"], sched["min_lr"])
            for o in opts:
                for gr in o.param_groups:
                    gr["lr"] = base * h("lr_mult", name_of(P, gr["params"][0]))
        if lazy and P["emb.weight"].grad is not None:
            lazy.step(P["emb.weight"].grad)
        for o in opts:
            o.step()
        if steplr:
            for s in steplr:
                s.step()
        if k in SNAPS:
            for n, p in P.items():
                snaps[n].append(p.detach().clone())
            if lazy:
                lazy_snaps.append(lazy.p.clone())
    states = {}
    for o in opts:
        for p, st in o.state.items():
            n = name_of(P, p)
            for key in STATE[kind]:
                if st.get(key) is not None:
                    states[(n, key)] = st[key]
    return snaps, states, norms, lazy_snaps


def name_of(P, t):
    for n, p in P.items():
        if p is t:
            return n
    raise KeyError


def main():
    w = Writer("tests/fixtures/optim_step.txt", "optimizer objects and the staged training step")
    data = make_data()
    init, grads, idx, gy = data
    for dtype in (torch.float64, torch.float32):
        t = [("i:" + n, init[n].to(dtype)) for n, _ in DENSE + SPARSE]
        t += [("g:" + n, grads[n].to(dtype)) for n in grads]
        on = torch.tensor([0 if k in EMB_OFF else 1 for k in range(STEPS)])
        t += [("idx", idx), ("gy", gy.to(dtype)), ("emb_on", on)]
        w.case("data", dtype, {"steps": STEPS, "k": K}, t)

    B = {"1.bias": {"wd_mult": 1.0}}  # a bias that decays, as a torch group would allow
    cases = [
        ("sgd_plain", "sgd", dict(lr=0.1), {}),
        ("sgd_momentum_dampening", "sgd", dict(lr=0.05, momentum=0.9, dampening=0.3), {}),
        ("sgd_nesterov_wd", "sgd", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1), {}),
        ("adam", "adam", dict(lr=0.02), {}),
        ("adam_wd", "adam", dict(lr=0.02, weight_decay=0.1, beta1=0.8, beta2=0.99), {}),
        ("adamw", "adam", dict(lr=0.02, weight_decay=0.1, decoupled=1), {}),
        ("adam_amsgrad", "adam", dict(lr=0.02, amsgrad=True, weight_decay=0.05, eps=1e-6), {}),
        ("rmsprop_centered_momentum", "rmsprop", dict(lr=0.01, alpha=0.9, momentum=0.5, centered=True,
                                                      weight_decay=0.05), {}),
        ("rmsprop_plain", "rmsprop", dict(lr=0.01), {}),
        ("adagrad", "adagrad", dict(lr=0.1, lr_decay=0.05, initial_accumulator_value=0.1, weight_decay=0.05), {}),
        ("lion", "lion", dict(lr=0.01, weight_decay=0.5), {}),
        ("lamb", "lamb", dict(lr=0.02, weight_decay=0.1), {}),
        ("lamb_clipped", "lamb", dict(lr=0.02, max_trust=0.3, bias_correction=0, beta1=0.8), {}),
        # per-parameter hyperparameters = torch param groups
        ("groups_sgd", "sgd", dict(lr=0.05, momentum=0.9, weight_decay=0.1),
         dict(hp={"1.weight": {"lr_mult": 0.1}, "1.bias": {"lr_mult": 0.1, "wd_mult": 1.0},
                  "0.weight": {"wd_mult": 0.5}})),
        ("groups_adamw", "adam", dict(lr=0.02, weight_decay=0.2, decoupled=1),
         dict(hp={"1.weight": {"lr_mult": 0.1}, "1.bias": {"lr_mult": 0.1, "wd_mult": 1.0},
                  "0.weight": {"wd_mult": 0.5}})),
        ("groups_lion", "lion", dict(lr=0.01, weight_decay=0.5),
         dict(hp={"0.weight": {"lr_mult": 3.0, "wd_mult": 0.25}, "0.bias": {"wd_mult": 2.0}})),
        ("groups_lamb", "lamb", dict(lr=0.02, weight_decay=0.2),
         dict(hp={"1.weight": {"lr_mult": 0.1}, "0.bias": {"wd_mult": 1.0}}, step={"clip_norm": 1.5})),
        ("freeze_adam", "adam", dict(lr=0.02, weight_decay=0.1),
         dict(hp={"0.bias": {"lr_mult": 0.0}, "1.weight": {"frozen": 1}}, step={"clip_norm": 1.5, "l2": 0.1})),
        ("freeze_adagrad", "adagrad", dict(lr=0.1, initial_accumulator_value=0.3),
         dict(hp={"0.weight": {"lr_mult": 0.0}, "1.bias": {"frozen": 1}})),
        # clipping
        ("clip_norm_sgd", "sgd", dict(lr=0.05, momentum=0.9), dict(step={"clip_norm": 2.0})),
        ("clip_value_adam", "adam", dict(lr=0.02), dict(step={"clip_value": 0.3})),
        ("clip_per_param", "sgd", dict(lr=0.05, momentum=0.5),
         dict(hp={"0.weight": {"clip_norm": 0.7}, "1.weight": {"clip_value": 0.2}, "1.bias": {"clip_value": 0.9}},
              step={"clip_norm": 1.5, "clip_value": 0.5})),
        # regularisation
        ("reg_l1_l2_sgd", "sgd", dict(lr=0.05, momentum=0.9), dict(step={"l1": 0.03, "l2": 0.2}, hp=B)),
        ("reg_l2_clip_rmsprop", "rmsprop", dict(lr=0.01, momentum=0.3),
         dict(step={"l2": 0.5, "clip_norm": 1.0}, hp={"0.weight": {"wd_mult": 0.5}})),
        # schedules
        ("sched_cosine_adam", "adam", dict(lr=0.05),
         dict(sched={"sched": 1, "warmup": 5, "total": 20, "min_lr": 0.001}, hp={"1.weight": {"lr_mult": 0.5}})),
        ("sched_steplr_sgd", "sgd", dict(lr=0.1, momentum=0.9),
         dict(sched={"sched": 2, "step_size": 6, "gamma": 0.3}, hp={"0.bias": {"lr_mult": 2.0}})),
        # row-sparse embedding gradients
        ("sparse_adam", "sparse_adam", dict(lr=0.05), dict(sparse=True, hp={"lin.weight": {"lr_mult": 0.5}})),
        ("sparse_sgd", "sgd", dict(lr=0.2), dict(sparse=True, hp={"emb.weight": {"lr_mult": 1.5}})),
    ]
    for name, kind, cfg, extra in cases:
        for dtype in (torch.float64, torch.float32):
            snaps, states, norms, lazy = run(kind, cfg, dtype, data, **extra)
            params = {"opt": OPT[kind]}
            for k, v in cfg.items():
                params[k] = float(v) if isinstance(v, float) else int(v)
            if extra.get("sparse"):
                params["sparse"] = 1
            for k, v in extra.get("step", {}).items():
                params[k] = float(v)
            for n, d in extra.get("hp", {}).items():
                for k, v in d.items():
                    params["%s:%s" % (k, n)] = float(v) if k != "frozen" else int(v)
            for k, v in (extra.get("sched") or {}).items():
                params[k] = v
            t = [("p:" + n, torch.stack(s)) for n, s in snaps.items()]
            t += [("s:%s:%s" % k, v) for k, v in states.items()]
            t += [("norm", torch.tensor(norms, dtype=torch.float64))]
            if lazy:
                t += [("q:emb.weight", torch.stack(lazy))]
            w.case(name, dtype, params, t)
    w.close()


if __name__ == "__main__":
    main()
