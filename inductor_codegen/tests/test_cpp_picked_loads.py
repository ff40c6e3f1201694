"""A select between two reads of one buffer is one read at the picked index.

`roll` (and its backward) reads one of two pieces of a buffer, chosen by a comparison of
an outer index: `c ? p[i] : p[j]`. gcc 12 at -O3 vectorized that form wrongly over rows
3 wide (the row where c switches read the other piece: wrong gradients, no error); the
C++ generator prints `p[c ? i : j]`, the same single read, which it compiles right.
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
