#!/usr/bin/python3
"""tools/fixtures_sparse.py - PyTorch reference values for dl_t_embedding.

Run from the repository root with Debian's python3 (it has torch):

    /usr/bin/python3 tools/fixtures_sparse.py     # writes tests/fixtures/sparse.txt

Each case: weight `w` [V, D], indices `idx` (written as integers; param
`i32` says whether the case was computed by torch with int32 indices; the C
test runs every case with both i64 and i32), output `y`, seed `gy` and
torch.nn.functional.embedding's dense weight gradient `g_w` (repeated indices
summed). The C test compares it with the densified row-sparse gradient.

Dropout has no fixtures: PyTorch's random stream differs from dl.h's
counter-based one, so the C test checks dropout's statistics, determinism
and gradients instead.
"""
import torch
import torch.nn.functional as F

from fixture_lib import SEED, Writer


def embedding(w, idx, i32):
    return F.embedding(idx.to(torch.int32) if i32 else idx, w)


def main():
    out = Writer("tests/fixtures/sparse.txt", "dl_t_embedding against torch.nn.functional.embedding")
    g = torch.Generator().manual_seed(SEED)

    def weight(v, d):
        return torch.randn(v, d, generator=g, dtype=torch.float64)

    def rand_idx(v, shape):
        return torch.randint(0, v, shape, generator=g, dtype=torch.int64)

    # 1-d indices with repeats (3 three times, 7 twice), i64
    out.op("emb_1d", embedding, {"w": weight(10, 4), "idx": torch.tensor([3, 7, 3, 1, 7, 3, 0, 9])},
           {"i32": 0})
    # 2-d indices (a batch of sequences), int32 in torch
    out.op("emb_2d_i32", embedding, {"w": weight(12, 5), "idx": rand_idx(12, (3, 4))}, {"i32": 1})
    # 3-d indices, i64
    out.op("emb_3d", embedding, {"w": weight(6, 3), "idx": rand_idx(6, (2, 2, 3))}, {"i32": 0})
    # a 0-d index gives one row [D]
    out.op("emb_scalar_idx", embedding, {"w": weight(5, 6), "idx": torch.tensor(2)}, {"i32": 0})
    # every index the same row: the gradient is the sum of all seed rows
    out.op("emb_all_same", embedding, {"w": weight(4, 3), "idx": torch.full((5,), 2, dtype=torch.int64)},
           {"i32": 1})
    # larger: vocabulary 30, width 8, 64 tokens with many repeats, int32
    out.op("emb_wide", embedding, {"w": weight(30, 8), "idx": rand_idx(12, (8, 8))}, {"i32": 1})
    # width 1 and first / last rows
    out.op("emb_d1", embedding, {"w": weight(7, 1), "idx": torch.tensor([[0, 6], [6, 0], [3, 3]])},
           {"i32": 0})
    out.close()


if __name__ == "__main__":
    main()
