#!/usr/bin/python3
"""tools/fixtures_conv.py - PyTorch reference values for dl/ops/conv.h.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_conv.py     # writes tests/fixtures/conv.txt

Cases (each in f64 and f32, see fixture_lib.Writer.op):
  conv2d_*   F.conv2d(x, w, b) with params stride_h stride_w pad_h pad_w dil_h
             dil_w groups (0 = default, as in dl_conv2d_args) and has_b, and
             pad_mode pad_h_end pad_w_end (uneven padding: F.pad, then none)
  conv1d_*   F.conv1d with params stride pad dil groups has_b pad_mode pad_end
  maxpool_*  F.max_pool2d with params kernel_h kernel_w stride_h stride_w
             pad_h pad_w dil_h dil_w ceil_mode (stride 0 = the kernel size),
             and pad_mode pad_h_end pad_w_end as dl_pool2d_args (explicit and
             SAME padding: F.pad with -inf, then no padding)
  avgpool_*  F.avg_pool2d, the same params (no dilation) plus exclude_pad
             (count_include_pad = not exclude_pad; explicit and SAME padding:
             F.pad with zeros, divided by the window's count)
  conv3d_*   F.conv3d with params stride_d stride_h stride_w pad_d pad_h pad_w
             dil_d dil_h dil_w groups has_b, and pad_mode pad_d_end pad_h_end
             pad_w_end (uneven padding: F.pad, then none)
  maxpool3d_* F.max_pool3d with params kernel_d/h/w stride_d/h/w pad_d/h/w
             dil_d/h/w ceil_mode
  avgpool3d_* F.avg_pool3d, the same params (no dilation) plus exclude_pad
  maxunpool_* F.max_unpool2d(F.max_pool2d(x, return_indices=True)) of one
             window, params kernel, stride, padding and out_h out_w
             (output_size; 0 = the default)
Inputs x, w, b; output y, seed gy, gradients g_x, g_w, g_b.
"""
import torch
import torch.nn.functional as F

from fixture_lib import SEED, Writer


def nz(v):
    """dl.h's zero-means-default for stride / dilation / groups."""
    return v if v else 1


def conv2d(x, w, b=None, stride_h=0, stride_w=0, pad_h=0, pad_w=0, dil_h=0, dil_w=0, groups=0,
           has_b=1, pad_mode=0, pad_h_end=0, pad_w_end=0):
    """pad_mode as dl_conv2d_args (1 explicit, 2 SAME, 3 SAME_LOWER): F.pad with zeros first."""
    s, d = (nz(stride_h), nz(stride_w)), (nz(dil_h), nz(dil_w))
    if pad_mode:
        if pad_mode == 1:
            t, bo, l, r = pad_h, pad_h_end, pad_w, pad_w_end
        else:
            t, bo = same_pads(x.shape[2], w.shape[2], s[0], d[0], pad_mode == 3)
            l, r = same_pads(x.shape[3], w.shape[3], s[1], d[1], pad_mode == 3)
        x, pad_h, pad_w = F.pad(x, (l, r, t, bo)), 0, 0
    return F.conv2d(x, w, b, stride=s, padding=(pad_h, pad_w), dilation=d, groups=nz(groups))


def conv1d(x, w, b=None, stride=0, pad=0, dil=0, groups=0, has_b=1, pad_mode=0, pad_end=0):
    if pad_mode:
        if pad_mode == 1:
            l, r = pad, pad_end
        else:
            l, r = same_pads(x.shape[2], w.shape[2], nz(stride), nz(dil), pad_mode == 3)
        x, pad = F.pad(x, (l, r)), 0
    return F.conv1d(x, w, b, stride=nz(stride), padding=pad, dilation=nz(dil), groups=nz(groups))


def conv3d(x, w, b=None, stride_d=0, stride_h=0, stride_w=0, pad_d=0, pad_h=0, pad_w=0, dil_d=0, dil_h=0,
           dil_w=0, groups=0, has_b=1, pad_mode=0, pad_d_end=0, pad_h_end=0, pad_w_end=0):
    """pad_mode as dl_conv3d_args (1 explicit, 2 SAME, 3 SAME_LOWER): F.pad with zeros first."""
    s, d = (nz(stride_d), nz(stride_h), nz(stride_w)), (nz(dil_d), nz(dil_h), nz(dil_w))
    if pad_mode:
        if pad_mode == 1:
            pads = [(pad_d, pad_d_end), (pad_h, pad_h_end), (pad_w, pad_w_end)]
        else:
            pads = [same_pads(x.shape[2 + a], w.shape[2 + a], s[a], d[a], pad_mode == 3) for a in range(3)]
        x, pad_d, pad_h, pad_w = F.pad(x, pads[2] + pads[1] + pads[0]), 0, 0, 0
    return F.conv3d(x, w, b, stride=s, padding=(pad_d, pad_h, pad_w), dilation=d, groups=nz(groups))


def maxpool3d(x, kernel_d, kernel_h, kernel_w, stride_d=0, stride_h=0, stride_w=0, pad_d=0, pad_h=0, pad_w=0,
              dil_d=0, dil_h=0, dil_w=0, ceil_mode=0):
    k = (kernel_d, kernel_h, kernel_w)
    s = (stride_d or kernel_d, stride_h or kernel_h, stride_w or kernel_w)
    return F.max_pool3d(x, k, s, (pad_d, pad_h, pad_w), (nz(dil_d), nz(dil_h), nz(dil_w)),
                        ceil_mode=bool(ceil_mode))


def avgpool3d(x, kernel_d, kernel_h, kernel_w, stride_d=0, stride_h=0, stride_w=0, pad_d=0, pad_h=0, pad_w=0,
              exclude_pad=0, ceil_mode=0):
    k = (kernel_d, kernel_h, kernel_w)
    s = (stride_d or kernel_d, stride_h or kernel_h, stride_w or kernel_w)
    return F.avg_pool3d(x, k, s, (pad_d, pad_h, pad_w), ceil_mode=bool(ceil_mode),
                        count_include_pad=not exclude_pad)


def same_pads(n, k, s, d, lower):
    """TensorFlow's SAME (lower: ONNX's SAME_LOWER): (before, after)."""
    o = (n + s - 1) // s
    tot = max((o - 1) * s + (k - 1) * d + 1 - n, 0)
    after = tot // 2 if lower else tot - tot // 2
    return tot - after, after


def window(x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, pad_mode, pad_h_end,
           pad_w_end):
    """(k, s, d, (top, bottom, left, right)) of a dl_pool2d_args."""
    k = (kernel_h, kernel_w)
    s = (stride_h or kernel_h, stride_w or kernel_w)
    d = (nz(dil_h), nz(dil_w))
    if pad_mode in (2, 3):  # DL_PAD_SAME, DL_PAD_SAME_LOWER
        t, b = same_pads(x.shape[2], k[0], s[0], d[0], pad_mode == 3)
        l, r = same_pads(x.shape[3], k[1], s[1], d[1], pad_mode == 3)
    elif pad_mode == 1:  # DL_PAD_EXPLICIT
        t, b, l, r = pad_h, pad_h_end, pad_w, pad_w_end
    else:
        t, b, l, r = pad_h, pad_h, pad_w, pad_w
    return k, s, d, (t, b, l, r)


def maxpool(x, kernel_h, kernel_w, stride_h=0, stride_w=0, pad_h=0, pad_w=0, dil_h=0, dil_w=0,
            ceil_mode=0, pad_mode=0, pad_h_end=0, pad_w_end=0):
    """PyTorch's own padding when symmetric; else F.pad with -inf, then no padding."""
    k, s, d, (t, b, l, r) = window(x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dil_h,
                                   dil_w, pad_mode, pad_h_end, pad_w_end)
    if pad_mode == 0:
        return F.max_pool2d(x, k, s, (pad_h, pad_w), d, ceil_mode=bool(ceil_mode))
    assert not ceil_mode
    return F.max_pool2d(F.pad(x, (l, r, t, b), value=float("-inf")), k, s, 0, d)


def avgpool(x, kernel_h, kernel_w, stride_h=0, stride_w=0, pad_h=0, pad_w=0, exclude_pad=0,
            ceil_mode=0, pad_mode=0, pad_h_end=0, pad_w_end=0):
    """PyTorch's own padding when symmetric; else the zero-padded input's
    window sums over the kernel size (count_include_pad) or over the window's
    count of input elements (the padded mask's sums)."""
    k, s, _, (t, b, l, r) = window(x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, 0, 0,
                                   pad_mode, pad_h_end, pad_w_end)
    if pad_mode == 0:
        return F.avg_pool2d(x, k, s, (pad_h, pad_w), ceil_mode=bool(ceil_mode),
                            count_include_pad=not exclude_pad)
    assert not ceil_mode
    xp = F.pad(x, (l, r, t, b))
    y = F.avg_pool2d(xp, k, s, 0)
    if exclude_pad:
        m = F.pad(torch.ones_like(x), (l, r, t, b))
        y = y / F.avg_pool2d(m, k, s, 0)
    return y


def maxunpool(x, kernel_h, kernel_w, stride_h=0, stride_w=0, pad_h=0, pad_w=0, out_h=0, out_w=0):
    """F.max_unpool2d of F.max_pool2d(return_indices=True), the same window."""
    k = (kernel_h, kernel_w)
    s = (stride_h or kernel_h, stride_w or kernel_w)
    y, i = F.max_pool2d(x, k, s, (pad_h, pad_w), return_indices=True)
    return F.max_unpool2d(y, i, k, s, (pad_h, pad_w), output_size=(out_h, out_w) if out_h else None)


def main():
    out = Writer("tests/fixtures/conv.txt",
                 "dl_t_conv2d/conv1d/max_pool2d/avg_pool2d against torch.nn.functional")
    g = torch.Generator().manual_seed(SEED)

    def r(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1

    def c2(name, n, c, h, w, o, kh, kw, bias=True, **p):
        groups = nz(p.get("groups", 0))
        ins = {"x": r(n, c, h, w), "w": r(o, c // groups, kh, kw)}
        if bias:
            ins["b"] = r(o)
        p["has_b"] = int(bias)
        out.op(name, conv2d, ins, p)

    def c1(name, n, c, length, o, k, bias=True, **p):
        groups = nz(p.get("groups", 0))
        ins = {"x": r(n, c, length), "w": r(o, c // groups, k)}
        if bias:
            ins["b"] = r(o)
        p["has_b"] = int(bias)
        out.op(name, conv1d, ins, p)

    c2("conv2d_basic", 2, 3, 5, 4, 3, 3, 2)
    c2("conv2d_nobias", 1, 3, 4, 4, 2, 3, 3, bias=False)
    c2("conv2d_stride_pad", 2, 2, 5, 6, 3, 3, 3, stride_h=2, stride_w=1, pad_h=1, pad_w=2)
    c2("conv2d_dilation", 1, 2, 7, 7, 3, 3, 2, dil_h=2, dil_w=3, pad_h=1, pad_w=1)
    c2("conv2d_groups", 2, 4, 5, 4, 4, 3, 3, groups=2, stride_h=2, stride_w=2, pad_h=1, pad_w=1)
    c2("conv2d_depthwise", 1, 3, 5, 4, 6, 3, 3, groups=3, pad_h=1, pad_w=1)
    c2("conv2d_1x1", 2, 3, 3, 4, 4, 1, 1)
    c2("conv2d_1x1_groups", 2, 4, 3, 3, 6, 1, 1, groups=2, bias=False)
    c2("conv2d_1x1_stride", 2, 3, 5, 5, 4, 1, 1, stride_h=2, stride_w=2)
    c2("conv2d_all", 2, 4, 7, 8, 4, 3, 2, stride_h=2, stride_w=3, pad_h=2, pad_w=1, dil_h=2,
       dil_w=1, groups=2)
    c2("conv2d_5x5", 2, 3, 6, 6, 2, 5, 5)
    c1("conv1d_basic", 2, 3, 10, 4, 3)
    c1("conv1d_nobias", 1, 2, 7, 3, 2, bias=False)
    c1("conv1d_all", 2, 4, 11, 6, 3, stride=2, pad=1, dil=2, groups=2)
    c1("conv1d_1x1", 2, 3, 6, 2, 1)

    def mp(name, n, c, h, w, **p):
        out.op(name, maxpool, {"x": r(n, c, h, w)}, p)

    def ap(name, n, c, h, w, **p):
        out.op(name, avgpool, {"x": r(n, c, h, w)}, p)

    mp("maxpool_k2", 2, 2, 4, 5, kernel_h=2, kernel_w=2)
    mp("maxpool_k3s2p1", 2, 2, 5, 6, kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1)
    mp("maxpool_rect", 1, 2, 5, 6, kernel_h=3, kernel_w=2, stride_h=2, stride_w=1, pad_h=1, pad_w=0)
    mp("maxpool_overlap", 1, 2, 5, 5, kernel_h=3, kernel_w=3, stride_h=1, stride_w=1)
    ap("avgpool_k2", 2, 2, 4, 5, kernel_h=2, kernel_w=2)
    ap("avgpool_k3s2p1", 2, 2, 5, 6, kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1)
    ap("avgpool_k3s2p1_excl", 2, 2, 5, 6, kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=1,
       pad_w=1, exclude_pad=1)
    ap("avgpool_rect_excl", 1, 2, 5, 6, kernel_h=3, kernel_w=2, stride_h=1, stride_w=2, pad_h=1,
       pad_w=1, exclude_pad=1)
    ap("avgpool_rect", 1, 2, 5, 6, kernel_h=3, kernel_w=2, stride_h=1, stride_w=2, pad_h=1, pad_w=1)
    # dilation, ceil_mode, explicit and SAME padding (dl_pool2d_args' pad_mode: 1 explicit,
    # 2 SAME, 3 SAME_LOWER)
    mp("maxpool_dilated", 2, 2, 7, 8, kernel_h=3, kernel_w=2, stride_h=1, stride_w=2, pad_h=1, pad_w=1,
       dil_h=2, dil_w=3)
    mp("maxpool_ceil", 2, 2, 6, 7, kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_w=1, ceil_mode=1)
    mp("maxpool_ceil_dilated", 1, 2, 8, 7, kernel_h=2, kernel_w=3, stride_h=3, stride_w=2, pad_h=1,
       pad_w=1, dil_h=2, ceil_mode=1)
    mp("maxpool_explicit", 2, 2, 5, 6, kernel_h=3, kernel_w=2, stride_h=2, stride_w=2, pad_w=1,
       pad_mode=1, pad_h_end=2)
    mp("maxpool_same", 2, 2, 5, 7, kernel_h=2, kernel_w=2, pad_mode=2)
    mp("maxpool_same_dilated", 1, 2, 5, 6, kernel_h=3, kernel_w=3, stride_h=1, stride_w=1, dil_h=2,
       pad_mode=2)
    mp("maxpool_same_lower", 1, 2, 7, 8, kernel_h=4, kernel_w=4, stride_h=3, stride_w=3, pad_mode=3)
    ap("avgpool_ceil", 2, 2, 6, 7, kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1,
       ceil_mode=1)
    ap("avgpool_ceil_excl", 1, 2, 6, 7, kernel_h=3, kernel_w=2, stride_h=2, stride_w=2, pad_h=1,
       exclude_pad=1, ceil_mode=1)
    ap("avgpool_explicit", 2, 2, 5, 6, kernel_h=3, kernel_w=2, stride_h=2, stride_w=1, pad_h=2,
       pad_mode=1, pad_w_end=1)
    ap("avgpool_explicit_excl", 1, 2, 5, 6, kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=1,
       pad_w=2, pad_mode=1, pad_h_end=2, exclude_pad=1)
    ap("avgpool_same_excl", 2, 2, 6, 5, kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_mode=2,
       exclude_pad=1)
    ap("avgpool_same_lower", 1, 2, 7, 6, kernel_h=2, kernel_w=3, stride_h=2, stride_w=2, pad_mode=3)

    def up(name, n, c, h, w, **p):
        out.op(name, maxunpool, {"x": r(n, c, h, w)}, p)

    up("maxunpool_k2", 2, 2, 4, 6, kernel_h=2, kernel_w=2)
    # windows that do not overlap: where a max pool repeats an index, PyTorch's unpool backward
    # gives each copy the gradient, dl.h only the one written (tests/test_ops_conv.c checks that)
    up("maxunpool_k2s2p1_size", 1, 2, 5, 6, kernel_h=2, kernel_w=2, pad_h=1, pad_w=1, out_h=5,
       out_w=6)
    up("maxunpool_odd_size", 2, 1, 5, 7, kernel_h=2, kernel_w=2, out_h=5, out_w=7)

    # convolution with uneven padding (dl_conv2d_args' pad_mode; after the others, so that their
    # inputs stay as they were)
    c2("conv2d_explicit", 2, 2, 5, 4, 3, 3, 2, stride_h=2, pad_w=1, pad_mode=1, pad_h_end=2)
    c2("conv2d_same_s2", 2, 3, 5, 7, 2, 3, 3, stride_h=2, stride_w=2, pad_mode=2)
    c2("conv2d_same_dil_groups", 1, 4, 6, 5, 2, 2, 3, bias=False, stride_w=2, dil_h=2, groups=2,
       pad_mode=2)
    c2("conv2d_same_lower", 1, 2, 7, 8, 2, 4, 4, stride_h=3, stride_w=3, pad_mode=3)
    c1("conv1d_same", 2, 3, 9, 2, 4, stride=2, pad_mode=2)
    c1("conv1d_explicit", 1, 2, 6, 2, 3, pad=3, pad_mode=1, pad_end=1)

    # 3-d convolution and pooling (appended: the cases above keep their inputs)
    def c3(name, n, c, d, h, w, o, kd, kh, kw, bias=True, **p):
        groups = nz(p.get("groups", 0))
        ins = {"x": r(n, c, d, h, w), "w": r(o, c // groups, kd, kh, kw)}
        if bias:
            ins["b"] = r(o)
        p["has_b"] = int(bias)
        out.op(name, conv3d, ins, p)

    def mp3(name, n, c, d, h, w, **p):
        out.op(name, maxpool3d, {"x": r(n, c, d, h, w)}, p)

    def ap3(name, n, c, d, h, w, **p):
        out.op(name, avgpool3d, {"x": r(n, c, d, h, w)}, p)

    c3("conv3d_basic", 2, 3, 4, 5, 4, 2, 2, 3, 2)
    c3("conv3d_nobias", 1, 2, 3, 4, 4, 3, 3, 2, 2, bias=False)
    c3("conv3d_stride_pad", 2, 2, 5, 5, 6, 3, 3, 3, 3, stride_d=2, stride_h=1, stride_w=2, pad_d=1, pad_h=2,
       pad_w=1)
    c3("conv3d_dilation", 1, 2, 6, 5, 7, 2, 2, 3, 2, dil_d=2, dil_h=1, dil_w=3, pad_d=1, pad_w=1)
    c3("conv3d_groups", 2, 4, 4, 5, 4, 6, 3, 2, 3, groups=2, stride_h=2, pad_d=1, pad_h=1, pad_w=1)
    c3("conv3d_1x1x1", 2, 3, 3, 4, 3, 4, 1, 1, 1)
    c3("conv3d_all", 1, 4, 7, 6, 5, 4, 3, 2, 3, stride_d=2, stride_h=3, stride_w=1, pad_d=2, pad_h=1,
       pad_w=1, dil_d=2, dil_h=1, dil_w=2, groups=2)
    c3("conv3d_explicit", 1, 2, 4, 5, 4, 2, 2, 3, 2, stride_w=2, pad_d=1, pad_mode=1, pad_h_end=2, pad_w_end=1)
    c3("conv3d_same", 1, 2, 5, 4, 6, 2, 3, 2, 3, stride_d=2, stride_w=2, pad_mode=2)
    mp3("maxpool3d_k2", 2, 2, 4, 4, 5, kernel_d=2, kernel_h=2, kernel_w=2)
    mp3("maxpool3d_k3s2p1", 1, 2, 5, 6, 5, kernel_d=3, kernel_h=3, kernel_w=3, stride_d=2, stride_h=2,
        stride_w=2, pad_d=1, pad_h=1, pad_w=1)
    mp3("maxpool3d_rect_overlap", 1, 2, 4, 5, 6, kernel_d=2, kernel_h=3, kernel_w=2, stride_d=1, stride_h=1,
        stride_w=2, pad_h=1)
    mp3("maxpool3d_dilated", 1, 2, 6, 7, 6, kernel_d=2, kernel_h=3, kernel_w=2, stride_d=1, stride_h=2,
        stride_w=1, pad_d=1, pad_w=1, dil_d=2, dil_h=2, dil_w=3)
    mp3("maxpool3d_ceil", 2, 1, 5, 6, 7, kernel_d=2, kernel_h=3, kernel_w=3, stride_d=2, stride_h=2,
        stride_w=2, pad_w=1, ceil_mode=1)
    ap3("avgpool3d_k2", 2, 2, 4, 4, 5, kernel_d=2, kernel_h=2, kernel_w=2)
    ap3("avgpool3d_k3s2p1", 1, 2, 5, 6, 5, kernel_d=3, kernel_h=3, kernel_w=3, stride_d=2, stride_h=2,
        stride_w=2, pad_d=1, pad_h=1, pad_w=1)
    ap3("avgpool3d_k3s2p1_excl", 1, 2, 5, 6, 5, kernel_d=3, kernel_h=3, kernel_w=3, stride_d=2, stride_h=2,
        stride_w=2, pad_d=1, pad_h=1, pad_w=1, exclude_pad=1)
    ap3("avgpool3d_ceil", 2, 1, 5, 6, 7, kernel_d=3, kernel_h=2, kernel_w=3, stride_d=2, stride_h=2,
        stride_w=2, pad_d=1, pad_w=1, ceil_mode=1)
    ap3("avgpool3d_ceil_excl", 1, 2, 6, 5, 7, kernel_d=2, kernel_h=3, kernel_w=3, stride_d=2, stride_h=2,
        stride_w=2, pad_h=1, pad_w=1, exclude_pad=1, ceil_mode=1)
    out.close()


if __name__ == "__main__":
    main()
