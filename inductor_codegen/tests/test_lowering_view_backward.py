"""slice_backward and select_backward lowered to guarded loads, against eager."""

from __future__ import annotations

import pytest
import torch
from graph_helpers import check

aten = torch.ops.aten


@pytest.mark.parametrize(
    "dim,start,end,step",
    [(1, 2, 7, 1), (0, 1, 9, 3), (-1, -4, None, 2), (1, 5, 5, 1), (2, 0, 100, 1)],
)
def test_slice_backward(dim, start, end, step):
    sizes = [6, 9, 5]
    sliced = torch.empty(sizes)[(slice(None),) * (dim % 3) + (slice(start, end, step),)]

    def fn(grad):
        return aten.slice_backward(grad, sizes, dim, start, end if end is not None else 2**62, step)

    compiled = check(fn, torch.randn(sliced.shape))
    assert not compiled.fallbacks


@pytest.mark.parametrize("dim,index", [(0, 3), (1, -1), (2, 0)])
def test_select_backward(dim, index):
    sizes = [4, 5, 6]

    def fn(grad):
        return aten.select_backward(grad, sizes, dim, index)

    grad_size = [s for d, s in enumerate(sizes) if d != dim]
    assert not check(fn, torch.randn(grad_size)).fallbacks


def test_slice_backward_fused_with_its_consumer():
    def fn(grad, other):
        return aten.slice_backward(grad * 2, [8, 10], 1, 2, 6, 1) + other

    compiled = check(fn, torch.randn(8, 4), torch.randn(8, 10))
    assert compiled.kernel_count == 1
