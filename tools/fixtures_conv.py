#!/usr/bin/python3
"""tools/fixtures_conv.py - PyTorch reference values for dl/ops/conv.h.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_conv.py     # writes tests/fixtures/conv.txt

Cases (each in f64 and f32, see fixture_lib.Writer.op):
  conv2d_*   F.conv2d(x, w, b) with params stride_h stride_w pad_h pad_w dil_h
             dil_w groups (0 = default, as in dl_conv2d_args) and has_b
  conv1d_*   F.conv1d with params stride pad dil groups has_b
  maxpool_*  F.max_pool2d with params kernel_h kernel_w stride_h stride_w
             pad_h pad_w (stride 0 = the kernel size)
  avgpool_*  F.avg_pool2d, the same params plus exclude_pad
             (count_include_pad = not exclude_pad)
Inputs x, w, b; output y, seed gy, gradients g_x, g_w, g_b.
"""
import torch
import torch.nn.functional as F

from fixture_lib import SEED, Writer


def nz(v):
    """dl.h's zero-means-default for stride / dilation / groups."""
    return v if v else 1


def conv2d(x, w, b=None, stride_h=0, stride_w=0, pad_h=0, pad_w=0, dil_h=0, dil_w=0, groups=0,
           has_b=1):
    return F.conv2d(x, w, b, stride=(nz(stride_h), nz(stride_w)), padding=(pad_h, pad_w),
                    dilation=(nz(dil_h), nz(dil_w)), groups=nz(groups))


def conv1d(x, w, b=None, stride=0, pad=0, dil=0, groups=0, has_b=1):
    return F.conv1d(x, w, b, stride=nz(stride), padding=pad, dilation=nz(dil), groups=nz(groups))


def maxpool(x, kernel_h, kernel_w, stride_h=0, stride_w=0, pad_h=0, pad_w=0):
    return F.max_pool2d(x, (kernel_h, kernel_w), (stride_h or kernel_h, stride_w or kernel_w),
                        (pad_h, pad_w))


def avgpool(x, kernel_h, kernel_w, stride_h=0, stride_w=0, pad_h=0, pad_w=0, exclude_pad=0):
    return F.avg_pool2d(x, (kernel_h, kernel_w), (stride_h or kernel_h, stride_w or kernel_w),
                        (pad_h, pad_w), count_include_pad=not exclude_pad)


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
    out.close()


if __name__ == "__main__":
    main()
