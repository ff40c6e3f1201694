"""A select between two reads of one buffer is one read at the picked index.

`roll` (and its backward) reads one of two pieces of a buffer, chosen by a comparison of
an outer index: `c ? p[i] : p[j]`. gcc 12 at -O3 vectorized that form wrongly over rows
3 wide (the row where c switches read the other piece: wrong gradients, no error); the
C++ generator prints `p[c ? i : j]`, the same single read, which it compiles right.
A select between reads of two buffers (the pieces of a cat) reads through the picked
address, `*(c ? &p[i] : &q[j])`: gcc 12 and 13 turned `c ? p[i] : q[j]` into masked
loads reading outside both buffers (garbage rows, no error).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("prim_decomp")  # (packages of the pipeline: tests run alone without)
from graph_helpers import check  # noqa: E402


@pytest.mark.parametrize("rows,shift", [(63, 32), (10, 4), (64, 7), (5, 2), (63, -20)])
def test_roll_of_a_computed_value_over_narrow_rows_matches_eager(rows, shift):
    def fn(x, t, w):
        centered = x - x.mean(0)
        return (centered * (centered**2).sum(0)).roll(shift, 0) * w + t

    x, t, w = torch.randn(rows, 3), torch.randn(rows, 3), torch.randn(3)
    check(fn, x, t, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows,shift", [(63, 32), (10, 4)])
def test_roll_backward_over_narrow_rows_matches_eager(rows, shift):
    def step(x, upstream):
        x = x.detach().requires_grad_()
        centered = x - x.mean(0)
        out = (centered * (centered**2).sum(0)).roll(shift, 0)
        (grad,) = torch.autograd.grad(out, x, upstream)
        return grad

    check(step, torch.randn(rows, 3), torch.randn(rows, 3), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [1025, 64, 7])
def test_batch_norm_of_a_cat_with_its_flip_matches_eager(rows):
    # found by the fuzzer (seed 179598938804): rows 1026, 1027, 1029, 1030 of 2050 read
    # garbage (1e19) where the kernel normalizing the cat selected between its pieces
    def fn(x):
        both = torch.cat([x, x.flip(0)], 0)
        weight = torch.linspace(0.5, 1.5, both.shape[1])
        return torch.nn.functional.batch_norm(both, None, None, weight, None, training=True)

    compiled = check(fn, torch.randn(rows, 6), rtol=1e-4, atol=1e-4)
    source = compiled.artifact("codegen")
    assert "? in_ptr" not in source  # no `?:` over loads of two buffers


def test_cat_of_two_half_buffers_reads_each_piece():
    def fn(a, b):
        return torch.cat([a * 2, b], 0) * torch.linspace(0.5, 1.5, 6, dtype=torch.float16)

    a, b = torch.randn(9, 6, dtype=torch.float16), torch.randn(11, 6, dtype=torch.float16)
    check(fn, a, b, rtol=1e-2, atol=1e-2)
