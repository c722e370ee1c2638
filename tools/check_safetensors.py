#!/usr/bin/env python3
"""tools/check_safetensors.py - a reference safetensors reader and writer in
plain Python (struct + json; tensors through torch.frombuffer; the
`safetensors` package is not needed), and the PyTorch side of
tests/test_io.c.

  check_safetensors.py read FILE    validate FILE strictly, list its tensors
  check_safetensors.py make DIR     write the torch-side files into DIR:
      torch_dtypes.safetensors   every dtype, names in a shuffled order, data
                                 in another order, unaligned offsets, a
                                 __metadata__ map, non-ASCII names written as
                                 \\u escapes (one a surrogate pair), an
                                 unknown field in an entry
      torch_mlp / torch_cnn      state_dicts of torch models (BatchNorm with
        (.safetensors, _io)      running statistics moved by 3 training steps)
                                 written the same way, and an input x with the
                                 eval-mode output y = model(x)
      torch_half.safetensors     f32/f64 values and their f16/bf16 roundings
                                 (torch for f32, an exact reference for f64),
                                 every f16 and bf16 bit pattern with its f32
  check_safetensors.py check DIR    check the files tests/test_io.c wrote:
      c_dtypes                   the format as dl writes it (names sorted,
                                 __metadata__ first, header padded with spaces
                                 to 8 bytes, each tensor aligned to its element
                                 size and to 8 bytes when its size is a
                                 multiple of 8, no gaps) and every value
      c_mlp / c_cnn              torch builds the same architecture, takes the
                                 file with model.load_state_dict(sd) (strict)
                                 and reproduces the C model's eval output y
      c_mlp_bf16                 the MLP saved with cast=BF16: torch's bf16 of
                                 the f32 weights, bit for bit; loads too
      c_half                     dl's f16/bf16 conversions == torch's
  check_safetensors.py corpus DIR   small seed files for fuzz/fuzz_safetensors.c
                                 (plain Python, no torch)

Every check prints one line; the exit status is 0 when all pass.
"""
import json
import math
import os
import random
import struct
import sys
from fractions import Fraction

SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1}


class FormatError(Exception):
    pass


def _torch_dtype(name):
    import torch
    return {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
            "I64": torch.int64, "I32": torch.int32, "I8": torch.int8, "U8": torch.uint8}[name]


def _st_name(dtype):
    import torch
    return {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
            torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8"}[dtype]


def parse(b):
    """Validate a safetensors file (bytes) as strictly as dl's reader.
    Returns (entries {name: (dtype, shape, begin, end)}, metadata, info)."""
    if len(b) < 8:
        raise FormatError("fewer than 8 bytes")
    n = struct.unpack("<Q", b[:8])[0]
    if n > 100_000_000 or 8 + n > len(b):
        raise FormatError("header length %d does not fit" % n)
    text = b[8:8 + n].decode("utf-8")
    keys = []

    def pairs(kv):
        d = {}
        for k, v in kv:
            if k in d:
                raise FormatError("duplicate key %r" % k)
            d[k] = v
        return d

    header = json.loads(text, object_pairs_hook=pairs)
    if not isinstance(header, dict):
        raise FormatError("header is not an object")
    keys = list(header.keys())
    meta = header.pop("__metadata__", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise FormatError("__metadata__ is not a map of strings")
    data_len = len(b) - 8 - n
    entries = {}
    for name, e in header.items():
        dt, shape, (b0, b1) = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in SIZES:
            raise FormatError("%s: dtype %s" % (name, dt))
        numel = 1
        for s in shape:
            if not isinstance(s, int) or s < 0:
                raise FormatError("%s: bad shape" % name)
            numel *= s
        if not (0 <= b0 <= b1 <= data_len) or b1 - b0 != numel * SIZES[dt]:
            raise FormatError("%s: data_offsets [%d, %d] do not fit" % (name, b0, b1))
        entries[name] = (dt, list(shape), b0, b1)
    at = 0
    for name, (dt, shape, b0, b1) in sorted(entries.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if b0 != at:
            raise FormatError("%s: %s at data byte %d" % (name, "overlap" if b0 < at else "gap", at))
        at = b1
    if at != data_len:
        raise FormatError("%d trailing bytes" % (data_len - at))
    return entries, meta, {"keys": keys, "header_len": n, "text": text}


def read(path):
    """{name: torch tensor} and the metadata of a safetensors file."""
    import torch
    b = open(path, "rb").read()
    entries, meta, _ = parse(b)
    base = 8 + struct.unpack("<Q", b[:8])[0]
    out = {}
    for name, (dt, shape, b0, b1) in entries.items():
        if b1 == b0:
            out[name] = torch.empty(shape, dtype=_torch_dtype(dt))
        else:
            out[name] = torch.frombuffer(bytearray(b[base + b0:base + b1]), dtype=_torch_dtype(dt)).reshape(shape)
    return out, meta


def tensor_bytes(t):
    import torch
    t = t.detach().contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    return t.view(torch.uint8).numpy().tobytes()


def write(path, tensors, meta=None, header_order=None, data_order=None, pad=True, extra_field=None):
    """Write {name: tensor}. header_order / data_order: name lists (default
    sorted); pad=False leaves the data region unaligned (odd header length);
    extra_field: a name whose entry gets an unknown field."""
    names = list(tensors)
    header_order = header_order or sorted(names)
    data_order = data_order or sorted(names)
    offs, blobs, at = {}, [], 0
    for k in data_order:
        bb = tensor_bytes(tensors[k])
        offs[k] = (at, at + len(bb))
        blobs.append(bb)
        at += len(bb)
    h = {}
    if meta is not None:
        h["__metadata__"] = meta
    for k in header_order:
        e = {"dtype": _st_name(tensors[k].dtype), "shape": list(tensors[k].shape), "data_offsets": list(offs[k])}
        if k == extra_field:
            e = {"x-unknown": {"nested": [1, 2.5e-3, None, True, "s"]}, **e}
        h[k] = e
    text = json.dumps(h).encode("utf-8")  # ensure_ascii: non-ASCII names become \u escapes
    if pad:
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    elif (8 + len(text)) % 8 == 0:
        text += b" "
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ---- shared definitions with tests/test_io.c ---------------------------------

def formula(dt, shape):
    """Element i (row-major) of the dtype test tensors; the C test computes the same."""
    import torch
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.int64)
    if dt in ("F32", "F64", "F16", "BF16"):
        v = ((i * 37) % 101 - 50).double() / 8
    elif dt == "I64":
        v = (i * 7919 - 20000) * 1000003
    elif dt == "I32":
        v = i * 7919 - 20000
    elif dt == "I8":
        v = (i * 37) % 256 - 128
    else:
        v = (i * 37) % 256
    return v.to(_torch_dtype(dt)).reshape(shape)


DTYPE_TENSORS = [("f32", "F32", [2, 3]), ("f64", "F64", [3]), ("f16", "F16", [2, 2, 2]), ("bf16", "BF16", [5]),
                 ("i64", "I64", [4]), ("i32", "I32", [3, 1]), ("i8", "I8", [7]), ("u8", "U8", [3]),
                 ("scalar", "F32", []), ("empty", "F32", [0, 3])]
UNICODE_NAME = "\u540d\u524d/\U0001F600"  # two CJK characters, a slash, an emoji (a surrogate pair in JSON)


def dtype_tensors():
    d = {name: formula(dt, shape) for name, dt, shape in DTYPE_TENSORS}
    return d


def mlp():
    import torch.nn as nn
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 3))


def cnn():
    import torch.nn as nn
    from collections import OrderedDict
    return nn.Sequential(OrderedDict([
        ("features", nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))),
        ("flat", nn.Flatten()),
        ("classifier", nn.Linear(16, 5))]))


MODELS = {"mlp": (mlp, [5, 6], 3), "cnn": (cnn, [3, 2, 4, 4], 5)}


# ---- exact rounding reference -------------------------------------------------

def _small_value(bits, ebits, mbits):
    """Exact value of a binary16/bfloat16 bit pattern (inf as 2^(emax+1))."""
    bias = (1 << (ebits - 1)) - 1
    e = (bits >> mbits) & ((1 << ebits) - 1)
    m = bits & ((1 << mbits) - 1)
    if e == (1 << ebits) - 1:
        return Fraction(2) ** (bias + 1)  # "inf": where rounding overflows to
    if e == 0:
        return Fraction(m, 1 << mbits) * Fraction(2) ** (1 - bias)
    return (1 + Fraction(m, 1 << mbits)) * Fraction(2) ** (e - bias)


def rne_ref(d, ebits, mbits, guess):
    """Correctly rounded bits of double d in the format, found by exact
    arithmetic among guess-1, guess, guess+1 (guess: a conversion at most one
    unit off, e.g. through f32). Ties go to the even pattern."""
    if math.isnan(d):
        return None
    sign = (1 << (ebits + mbits)) if math.copysign(1.0, d) < 0 else 0
    inf = ((1 << ebits) - 1) << mbits
    if math.isinf(d):
        return sign | inf
    x = Fraction(abs(d))
    g = guess & ~sign & 0xFFFF
    best = None
    for c in (g - 1, g, g + 1):
        if c < 0 or c > inf:
            continue
        dist = abs(_small_value(c, ebits, mbits) - x)
        if best is None or dist < best[0] or (dist == best[0] and c % 2 == 0):
            best = (dist, c)
    return sign | best[1]


# ---- make: torch-side files -----------------------------------------------------

def make(out):
    import numpy as np
    import torch
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1234)
    # every dtype, shuffled header and data order, unaligned, metadata, an unknown field
    d = dtype_tensors()
    d[UNICODE_NAME] = torch.tensor([7, 9], dtype=torch.uint8)
    hdr = list(d)
    rng.shuffle(hdr)
    dat = list(d)
    rng.shuffle(dat)
    write(os.path.join(out, "torch_dtypes.safetensors"), d, meta={"writer": "check_safetensors.py", "note": "\u00e9 \"q\""},
          header_order=hdr, data_order=dat, pad=False, extra_field="f64")
    print("ok make torch_dtypes: %d tensors, header order %s" % (len(d), ",".join(hdr[:4]) + ",..."))
    # models
    for name, (ctor, xshape, ncls) in MODELS.items():
        torch.manual_seed(7)
        model = ctor()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model.train()
        for _ in range(3):
            xb = torch.randn([8] + xshape[1:])
            loss = torch.nn.functional.cross_entropy(model(xb), torch.arange(8) % ncls)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        x = torch.randn(xshape)
        with torch.no_grad():
            y = model(x)
        sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
        hdr = list(sd)
        rng.shuffle(hdr)
        dat = list(sd)
        rng.shuffle(dat)
        write(os.path.join(out, "torch_%s.safetensors" % name), sd, meta={"format": "pt", "source": "torch " + torch.__version__},
              header_order=hdr, data_order=dat, pad=False)
        write(os.path.join(out, "torch_%s_io.safetensors" % name), {"x": x, "y": y})
        print("ok make torch_%s: %d tensors (num_batches_tracked %d), y %s" % (
            name, len(sd), int([v for k, v in sd.items() if k.endswith("num_batches_tracked")][0]), list(y.shape)))
    # conversions
    x32 = half_inputs_f32(rng)
    x64 = half_inputs_f64(rng)
    with np.errstate(over="ignore"):  # values past the f16/f32 range round to infinity, as they should
        f16_64 = np.array(x64.numpy(), dtype=np.float64).astype(np.float16).view(np.uint16).astype(np.int64)
        via32_bf16 = torch.tensor(x64.numpy().astype(np.float32)).to(torch.bfloat16).view(torch.int16).numpy().astype(np.int64) & 0xFFFF
    ref_f16 = [rne_ref(v, 5, 10, int(g)) for v, g in zip(x64.tolist(), f16_64.tolist())]
    ref_bf16 = [rne_ref(v, 8, 7, int(g)) for v, g in zip(x64.tolist(), via32_bf16.tolist())]
    disagree = sum(1 for a, b in zip(ref_f16, f16_64.tolist()) if a is not None and a != b)
    if disagree:
        print("FAIL make torch_half: the exact f16 reference and numpy differ on %d values" % disagree)
        return 1
    nan16 = 0x7E00
    bits16 = lambda v: torch.from_numpy(np.array(v, dtype=np.uint16).view(np.int16))
    all16 = bits16(list(range(65536)))
    half = {
        "x32": x32,
        "x32_f16": x32.to(torch.float16),
        "x32_bf16": x32.to(torch.bfloat16),
        "x64": x64,
        "x64_f16": bits16([r if r is not None else nan16 for r in ref_f16]).view(torch.float16),
        "x64_bf16": bits16([r if r is not None else 0x7FC0 for r in ref_bf16]).view(torch.bfloat16),
        "all_f16": all16.view(torch.float16),
        "all_f16_f32": all16.view(torch.float16).to(torch.float32),
        "all_bf16": all16.view(torch.bfloat16),
        "all_bf16_f32": all16.view(torch.bfloat16).to(torch.float32),
    }
    write(os.path.join(out, "torch_half.safetensors"), half)
    dbl = sum(1 for r, g in zip(ref_bf16, via32_bf16.tolist()) if r is not None and r != g)
    print("ok make torch_half: %d f32 and %d f64 values (%d f64->bf16 cases where rounding through f32 is wrong)" % (
        len(x32), len(x64), dbl))
    return 0


def half_inputs_f32(rng):
    """Special values, ties and near-ties of f16 and bf16, random bit patterns."""
    import numpy as np
    import torch
    v = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, -65520.0, 65536.0, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26,
         1.5 * 2.0 ** -24, 2.5 * 2.0 ** -24, 2.0 ** -14, 2.0 ** -15, 1e-8, 1e-40, -1e-45, 3.4028234663852886e38,
         float("inf"), float("-inf"), float("nan"), 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8,
         1.0 + 3 * 2.0 ** -8, 3.3895313892515355e38, 3.3961775292304266e38, 2.0 ** -133, 2.0 ** -134, 2.0 ** -126]
    bits = set()
    for _ in range(4000):  # random finite patterns
        b = rng.getrandbits(32)
        if (b >> 23) & 0xFF != 0xFF:
            bits.add(b)
    for _ in range(1500):  # f16 ties and their neighbours
        h = rng.randrange(0, 0x7BFF)
        lo = float(np.array([h], dtype=np.uint16).view(np.float16)[0])
        hi = float(np.array([h + 1], dtype=np.uint16).view(np.float16)[0])
        mid = np.float32((lo + hi) / 2)
        m = int(np.array([mid], dtype=np.float32).view(np.uint32)[0])
        bits.update([m, m - 1, m + 1, m | 0x80000000])
    for _ in range(1500):  # bf16 ties and neighbours
        h = rng.randrange(0, 0x7F7F) << 16
        bits.update([h | 0x8000, h | 0x7FFF, h | 0x8001, h | 0x18000, (h | 0x8000) | 0x80000000])
    arr = np.array(sorted(bits), dtype=np.uint32).view(np.float32)
    return torch.tensor(np.concatenate([np.array(v, dtype=np.float32), arr]))


def half_inputs_f64(rng):
    """f64 values at and just off the ties of f16/bf16 (where going through
    f32 rounds twice), plus specials and random values."""
    import numpy as np
    import torch
    v = [0.0, -0.0, 1.0, 65504.0, 65520.0, 65519.999999, 2.0 ** -25, 2.0 ** -25 + 2.0 ** -60, -(2.0 ** -25),
         1e300, -1e300, 1e-300, float("inf"), float("-inf"), float("nan"), 5e-324,
         1.0 + 2.0 ** -11 + 2.0 ** -40, 1.0 + 2.0 ** -11 - 2.0 ** -40, 1.0 + 2.0 ** -8 + 2.0 ** -40]
    out = list(v)
    for _ in range(1500):
        h = rng.randrange(0, 0x7BFF)
        lo = float(np.array([h], dtype=np.uint16).view(np.float16)[0])
        hi = float(np.array([h + 1], dtype=np.uint16).view(np.float16)[0])
        mid = (lo + hi) / 2
        eps = (hi - lo) * 2.0 ** -30
        out += [mid, mid + eps, mid - eps, -mid - eps]
    for _ in range(1500):
        e = rng.randrange(-130, 127)
        m = rng.randrange(0, 128)
        lo = (1 + m / 128) * 2.0 ** e
        hi = (1 + (m + 1) / 128) * 2.0 ** e
        mid = (lo + hi) / 2
        eps = (hi - lo) * 2.0 ** -35
        out += [mid, mid + eps, mid - eps]
    for _ in range(2000):
        out.append(rng.uniform(-1, 1) * 2.0 ** rng.randrange(-140, 130))
    return torch.tensor(out, dtype=torch.float64)


# ---- check: C-written files -------------------------------------------------------

def check_layout(path):
    """dl's writer layout: names sorted, __metadata__ first, spaces to an
    8-byte boundary, natural / 8-byte alignment, no gaps."""
    b = open(path, "rb").read()
    entries, meta, info = parse(b)
    names = [k for k in info["keys"] if k != "__metadata__"]
    problems = []
    if meta and info["keys"][0] != "__metadata__":
        problems.append("__metadata__ is not first")
    if names != sorted(names, key=lambda s: s.encode("utf-8")):
        problems.append("names are not sorted")
    if (8 + info["header_len"]) % 8:
        problems.append("data region not 8-byte aligned")
    stripped = info["text"].rstrip(" ")
    if not stripped.endswith("}") or len(info["text"]) - len(stripped) > 7:
        problems.append("header padding is not 0-7 spaces")
    for name, (dt, shape, b0, b1) in entries.items():
        if b0 % SIZES[dt]:
            problems.append("%s not aligned to its element size" % name)
        if (b1 - b0) % 8 == 0 and b0 % 8:
            problems.append("%s (a multiple of 8 bytes) not 8-byte aligned" % name)
    return problems, entries, meta


def same_bits(a, b):
    """Same values bit for bit, NaN == NaN (any payload, same sign)."""
    import torch
    a, b = a.reshape(-1), b.reshape(-1)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False, a.numel()
    ia = a.view(torch.int16 if a.element_size() == 2 else torch.int32).to(torch.int64)
    ib = b.view(torch.int16 if b.element_size() == 2 else torch.int32).to(torch.int64)
    na, nb = torch.isnan(a.float()), torch.isnan(b.float())
    bad = ((ia != ib) & ~(na & nb)) | (na != nb)
    return int(bad.sum()) == 0, int(bad.sum())


def check(out):
    import torch
    fails = 0

    def report(ok, what):
        nonlocal fails
        print(("ok " if ok else "FAIL ") + what)
        fails += 0 if ok else 1

    # dtypes
    p = os.path.join(out, "c_dtypes.safetensors")
    problems, entries, meta = check_layout(p)
    report(not problems, "c_dtypes layout (sorted names, __metadata__ first, alignment)%s" % (": " + "; ".join(problems) if problems else ""))
    t, meta = read(p)
    want = dtype_tensors()
    bad = [k for k, v in want.items() if k not in t or t[k].dtype != v.dtype or list(t[k].shape) != list(v.shape)
           or not torch.equal(t[k], v)]
    report(not bad and meta.get("writer") == "test_io.c" and set(t) == set(want),
           "c_dtypes values of %d tensors via torch.frombuffer%s" % (len(want), (": " + ",".join(bad)) if bad else ""))
    # models
    for name, (ctor, xshape, ncls) in MODELS.items():
        p = os.path.join(out, "c_%s.safetensors" % name)
        problems, _, _ = check_layout(p)
        sd, meta = read(p)
        model = ctor()
        try:
            res = model.load_state_dict(sd, strict=True)
            loaded = not res.missing_keys and not res.unexpected_keys
        except RuntimeError as e:
            print(e)
            loaded = False
        io, _ = read(os.path.join(out, "c_%s_io.safetensors" % name))
        model.eval()
        with torch.no_grad():
            y = model(io["x"])
        err = float((y - io["y"]).abs().max() / io["y"].abs().max())
        nbt = [int(v) for k, v in sd.items() if k.endswith("num_batches_tracked")]
        report(loaded and not problems and err < 1e-5 and nbt == [3],
               "c_%s: load_state_dict(strict=True) took %d tensors, eval output vs the C model: max rel err %.2e, num_batches_tracked %s%s"
               % (name, len(sd), err, nbt, ("; " + "; ".join(problems)) if problems else ""))
    # bf16 cast
    f32, _ = read(os.path.join(out, "c_mlp.safetensors"))
    b16, _ = read(os.path.join(out, "c_mlp_bf16.safetensors"))
    ok = set(f32) == set(b16)
    for k, v in f32.items():
        if v.is_floating_point():
            ok = ok and b16[k].dtype == torch.bfloat16 and same_bits(b16[k], v.to(torch.bfloat16))[0]
        else:
            ok = ok and torch.equal(b16[k], v)
    model = mlp()
    model.load_state_dict(b16, strict=True)
    report(ok, "c_mlp_bf16: every float tensor is torch's bf16 of the f32 weights, bit for bit; integer buffers kept")
    # conversions
    h, _ = read(os.path.join(out, "c_half.safetensors"))
    ok16, n16 = same_bits(h["as_f16"], h["x32"].to(torch.float16))
    okb, nb = same_bits(h["as_bf16"], h["x32"].to(torch.bfloat16))
    report(ok16 and okb, "c_half: dl's f32->f16 and f32->bf16 of %d values == torch's (%d, %d differ)" % (h["x32"].numel(), n16, nb))
    return 1 if fails else 0


# ---- corpus for the fuzzer ----------------------------------------------------------

def _raw(entries, meta=None, order=None, pad=True, extra=b"", tail=b""):
    """entries: [(name, dtype, shape, bytes)] laid out in order."""
    at, h, blobs = 0, {}, []
    if meta is not None:
        h["__metadata__"] = meta
    for name, dt, shape, data in entries:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(h, separators=(",", ":")).encode() + extra
    if pad:
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs) + tail


def corpus(out):
    os.makedirs(out, exist_ok=True)
    f = lambda n: struct.pack("<%df" % n, *[i * 0.5 - 1 for i in range(n)])
    seeds = {
        "all_dtypes": _raw([("a", "F32", [2, 2], f(4)), ("b", "F64", [2], struct.pack("<2d", 1.5, -2)),
                            ("c", "F16", [3], bytes([0, 0x3c, 0, 0xc0, 0x00, 0x7e])), ("d", "BF16", [2], bytes([0x80, 0x3f, 0x80, 0x7f])),
                            ("e", "I64", [1], struct.pack("<q", -5)), ("f", "I32", [2], struct.pack("<2i", 7, -9)),
                            ("g", "I8", [3], bytes([1, 0xff, 3])), ("h", "U8", [1], bytes([200]))],
                           meta={"format": "pt", "k": "v"}),
        "scalar_empty": _raw([("s", "F32", [], f(1)), ("z", "F64", [0, 4], b""), ("w", "I64", [], struct.pack("<q", 3))]),
        "unaligned_foreign": _raw([("x.weight", "F32", [3], f(3)), ("a", "U8", [3], b"abc"), ("b", "F16", [1], b"\x00\x3c")],
                                  pad=False, meta={}),
        "escapes": struct.pack("<Q", 0) + b"",  # replaced below
        "empty": _raw([]),
        "nested_unknown": b"",
        "bad_overlap": _raw([("a", "F32", [2], f(2)), ("b", "F32", [1], f(1))]),
        "bad_trailing": _raw([("a", "F32", [1], f(1))], tail=b"\x00\x00"),
    }
    # hand-written headers: escapes, reversed data order, unknown nested fields
    def hdr(text, data):
        text = text.encode()
        return struct.pack("<Q", len(text)) + text + data
    seeds["escapes"] = hdr('{"\\u540d\\ud83d\\ude00\\n\\"q\\"":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
                           '"__metadata__":{"a\\/b":"\\t\\u00e9"}}', b"xy")
    seeds["nested_unknown"] = hdr('{"t":{"x":{"y":[1,-2.5e+3,true,false,null,{"z":[]}]},"dtype":"I32","shape":[1,1],'
                                  '"data_offsets":[4,8]},"u":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}',
                                  struct.pack("<2i", 1, 2))
    seeds["bad_overlap"] = hdr('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
                               f(2))
    for name, b in seeds.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as fh:
            fh.write(b)
    print("ok corpus: %d seed files in %s" % (len(seeds), out))
    return 0


def main(argv):
    if len(argv) != 3 or argv[1] not in ("read", "make", "check", "corpus"):
        print(__doc__)
        return 2
    if argv[1] == "read":
        try:
            b = open(argv[2], "rb").read()
            entries, meta, info = parse(b)
        except (FormatError, ValueError, KeyError, TypeError) as e:
            print("FAIL %s: %s" % (argv[2], e))
            return 1
        for name, (dt, shape, b0, b1) in sorted(entries.items()):
            print("%-40s %-5s %-16s [%d, %d)" % (name, dt, shape, b0, b1))
        print("ok %s: %d tensors, metadata %s" % (argv[2], len(entries), meta))
        return 0
    if argv[1] == "corpus":
        return corpus(argv[2])
    return make(argv[2]) if argv[1] == "make" else check(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
