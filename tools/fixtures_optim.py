#!/usr/bin/python3
"""tools/fixtures_optim.py - PyTorch reference values for dl.h's optimizer
updates and learning-rate schedules (include/dl/optim.h), read by
tests/test_optim.c.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_optim.py    # writes tests/fixtures/optim.txt

Optimizer cases (name opt_*, in f64 and f32): params `opt` (0 SGD, 1 Adam /
AdamW, 2 RMSprop, 3 Adagrad, 4 Lion, 5 LAMB) and the optimizer's settings; tensors
p0 (the parameter before, 3x4), g (20 fixed gradients, 20x3x4) and p (the
parameter after each of the 20 steps, 20x3x4). torch's optimizer runs with
foreach=False; Lion and LAMB, which torch 1.13 lacks, are the published
rules written out below on torch tensors of the case's dtype (LAMB's norms
in double).

Schedule cases (name sched_*, f64): the settings as params and tensor lr,
the learning rate after 0, 1, ... scheduler steps (torch's StepLR,
MultiStepLR, ExponentialLR, OneCycleLR; the cosine warm-up recipe from the
formula in cosine_warmup below).
"""
import math

import torch

from fixture_lib import SEED, Writer

STEPS = 20
OPT = {"sgd": 0, "adam": 1, "rmsprop": 2, "adagrad": 3, "lion": 4, "lamb": 5}


def lion_run(p, grads, lr, beta1, beta2, weight_decay):
    m = torch.zeros_like(p)
    out = []
    for g in grads:
        c = beta1 * m + (1 - beta1) * g
        p = p * (1 - lr * weight_decay) - lr * torch.sign(c)
        m = beta2 * m + (1 - beta2) * g
        out.append(p.clone())
    return torch.stack(out)


def lamb_run(p, grads, lr, beta1, beta2, eps, weight_decay, max_trust, bias_correction):
    """LAMB as the paper writes it (You et al. 2020, Algorithm 2; phi the
    identity, or clipped at max_trust when > 0): m_hat = m / (1 - beta1^t),
    v_hat = v / (1 - beta2^t), r = m_hat / (sqrt(v_hat) + eps), u = r + wd p,
    p -= lr * |p| / |u| * u (a ratio of 1 where a norm is 0)."""
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    out = []
    for t, g in enumerate(grads, 1):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        mh = m / (1 - beta1 ** t) if bias_correction else m
        vh = v / (1 - beta2 ** t) if bias_correction else v
        u = mh / (vh.sqrt() + eps) + weight_decay * p
        pn, un = p.double().norm().item(), u.double().norm().item()
        trust = pn / un if pn > 0 and un > 0 else 1.0
        if max_trust > 0:
            trust = min(trust, max_trust)
        p = p - lr * trust * u
        out.append(p.clone())
    return torch.stack(out)


def torch_run(kind, p0, grads, kw):
    p = p0.clone().requires_grad_(True)
    if kind == "sgd":
        opt = torch.optim.SGD([p], foreach=False, **kw)
    elif kind == "adam":
        kw = dict(kw)
        cls = torch.optim.AdamW if kw.pop("decoupled") else torch.optim.Adam
        opt = cls([p], foreach=False, **kw)
    elif kind == "rmsprop":
        opt = torch.optim.RMSprop([p], foreach=False, **kw)
    else:
        opt = torch.optim.Adagrad([p], foreach=False, **kw)
    out = []
    for g in grads:
        p.grad = g.clone()
        opt.step()
        out.append(p.detach().clone())
    return torch.stack(out)


def cosine_warmup(base, step, warmup, total, min_lr):
    if step < warmup:
        return base * step / warmup
    if total <= warmup:
        return min_lr
    t = min((step - warmup) / (total - warmup), 1.0)
    return min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def sched_lrs(make, n, base=1.0):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base, momentum=0.9)
    sched = make(opt)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return torch.tensor(lrs, dtype=torch.float64)


def main():
    w = Writer("tests/fixtures/optim.txt", "optimizer updates and schedules (include/dl/optim.h)")
    gen = torch.Generator().manual_seed(SEED)
    p0 = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    grads = torch.randn(STEPS, 3, 4, generator=gen, dtype=torch.float64)
    grads[3, 1, 2] = 0.0  # an exact zero gradient element

    sgd = dict(lr=0.05, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False)
    adam = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                maximize=False, decoupled=False)
    adamw = dict(adam, weight_decay=1e-2, decoupled=True)
    rms = dict(lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
               maximize=False)
    ada = dict(lr=0.05, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
               maximize=False)
    cases = [
        ("sgd_plain", "sgd", dict(sgd)),
        ("sgd_momentum", "sgd", dict(sgd, momentum=0.9)),
        ("sgd_dampening", "sgd", dict(sgd, momentum=0.9, dampening=0.3)),
        ("sgd_nesterov", "sgd", dict(sgd, momentum=0.8, nesterov=True)),
        ("sgd_wd", "sgd", dict(sgd, momentum=0.9, weight_decay=0.05)),
        ("sgd_wd_nomom", "sgd", dict(sgd, weight_decay=0.05)),
        ("sgd_maximize", "sgd", dict(sgd, momentum=0.9, weight_decay=0.05, maximize=True)),
        ("adam_plain", "adam", dict(adam)),
        ("adam_wd", "adam", dict(adam, weight_decay=0.1)),
        ("adam_amsgrad", "adam", dict(adam, amsgrad=True, betas=(0.8, 0.95))),
        ("adam_maximize", "adam", dict(adam, maximize=True, weight_decay=0.1)),
        ("adamw", "adam", dict(adamw)),
        ("adamw_amsgrad", "adam", dict(adamw, amsgrad=True, weight_decay=0.2)),
        ("rmsprop_plain", "rmsprop", dict(rms)),
        ("rmsprop_centered", "rmsprop", dict(rms, centered=True)),
        ("rmsprop_momentum", "rmsprop", dict(rms, momentum=0.9)),
        ("rmsprop_centered_momentum", "rmsprop", dict(rms, centered=True, momentum=0.5)),
        ("rmsprop_wd", "rmsprop", dict(rms, weight_decay=0.1, maximize=True)),
        ("adagrad_plain", "adagrad", dict(ada)),
        ("adagrad_lr_decay", "adagrad", dict(ada, lr_decay=0.1)),
        ("adagrad_init", "adagrad", dict(ada, initial_accumulator_value=0.5)),
        ("adagrad_wd", "adagrad", dict(ada, weight_decay=0.1, maximize=True)),
        ("lion_plain", "lion", dict(lr=1e-3, beta1=0.9, beta2=0.99, weight_decay=0.0)),
        ("lion_wd", "lion", dict(lr=3e-3, beta1=0.95, beta2=0.98, weight_decay=0.5)),
        ("lamb_plain", "lamb", dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0,
                                    max_trust=0.0, bias_correction=1)),
        ("lamb_wd", "lamb", dict(lr=5e-3, beta1=0.85, beta2=0.99, eps=1e-6, weight_decay=0.1,
                                 max_trust=0.0, bias_correction=1)),
        ("lamb_no_bias_correction", "lamb", dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-4,
                                                 weight_decay=0.01, max_trust=0.0, bias_correction=0)),
        ("lamb_clipped", "lamb", dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0,
                                      max_trust=0.05, bias_correction=1)),
    ]
    for name, kind, kw in cases:
        params = {"opt": OPT[kind]}
        for k, v in kw.items():
            if k == "betas":
                params["beta1"], params["beta2"] = float(v[0]), float(v[1])
            else:
                params[k] = float(v) if isinstance(v, float) else int(v)
        for dtype in (torch.float64, torch.float32):
            p, gs = p0.to(dtype), grads.to(dtype)
            if kind == "lion":
                out = lion_run(p.clone(), gs, **kw)
            elif kind == "lamb":
                out = lamb_run(p.clone(), gs, **kw)
            else:
                out = torch_run(kind, p, gs, kw)
            w.case("opt_" + name, dtype, params, [("p0", p), ("g", gs), ("p", out)])

    f64 = torch.float64
    lrs = torch.optim.lr_scheduler
    for base, ss, gamma in ((0.1, 3, 0.5), (1.0, 7, 0.9)):
        lr = sched_lrs(lambda o: lrs.StepLR(o, step_size=ss, gamma=gamma), 40, base)
        w.case("sched_step", f64, dict(base=base, step_size=ss, gamma=gamma), [("lr", lr)])
    for ms, gamma in (([5, 12, 30], 0.1), ([8, 3, 3, 20], 0.5)):
        lr = sched_lrs(lambda o: lrs.MultiStepLR(o, milestones=ms, gamma=gamma), 40)
        w.case("sched_multistep", f64, dict(base=1.0, gamma=gamma),
               [("milestones", torch.tensor(ms, dtype=torch.int64)), ("lr", lr)])
    for gamma in (0.95, 0.7):
        lr = sched_lrs(lambda o: lrs.ExponentialLR(o, gamma=gamma), 40)
        w.case("sched_exponential", f64, dict(base=1.0, gamma=gamma), [("lr", lr)])
    for max_lr, total, pct, div, fdiv in ((0.1, 100, 0.3, 25.0, 1e4), (1.0, 37, 0.25, 10.0, 100.0),
                                          (0.5, 10, 0.5, 4.0, 1e3)):
        lr = sched_lrs(lambda o: lrs.OneCycleLR(o, max_lr=max_lr, total_steps=total, pct_start=pct,
                                                anneal_strategy="cos", div_factor=div,
                                                final_div_factor=fdiv, three_phase=False), total)
        w.case("sched_one_cycle", f64,
               dict(max_lr=max_lr, total_steps=total, pct_start=pct, div_factor=div,
                    final_div_factor=fdiv), [("lr", lr)])
    for base, warm, total, min_lr in ((0.1, 10, 50, 1e-3), (1.0, 0, 20, 0.0), (0.3, 5, 5, 0.01)):
        lr = torch.tensor([cosine_warmup(base, s, warm, total, min_lr) for s in range(total + 5)],
                          dtype=f64)
        w.case("sched_cosine_warmup", f64,
               dict(base=base, warmup_steps=warm, total_steps=total, min_lr=min_lr), [("lr", lr)])
    w.close()


if __name__ == "__main__":
    main()
