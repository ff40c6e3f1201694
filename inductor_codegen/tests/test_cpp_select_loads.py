"""A where() inside a masked branch (a stack or cat piece) reads both of its sides as values.

gcc 12 and 13 turn `c ? a[i] : b[i]` into masked loads and, where they unroll the loops
fully (small static sizes), reuse the mask of the first vector for the others: silently
wrong elements. The kernels pass both sides to `ember_where` instead of `?:` over loads.
"""

from __future__ import annotations

import pytest
import torch
from graph_helpers import check


def _grid(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-8, 9, shape, generator=g) / 4).float()


@pytest.mark.parametrize("inner", [5, 6, 7, 9, 12])
def test_where_of_loads_stacked_matches_eager(inner):
    def f(c, a, b):
        picked = torch.where(c > 0, a, b)
        return torch.stack([picked, picked * 2], 0)

    c, a, b = (_grid((4, inner), seed) for seed in (1, 2, 3))
    compiled = check(f, c, a, b)
    source = compiled.artifact("codegen")
    assert "ember_where<float>" in source and "? in_ptr" not in source  # no `?:` over loads


def test_where_after_a_diagonal_fill_and_division_stacked_matches_eager():
    # found by the fuzzer: a division by zero in the condition, x0 read in the other side
    def f(x0, x1):
        v3 = torch.expm1(x0)
        v3 = v3.diagonal_scatter(torch.where(v3.diagonal() < 0, 1.0, v3.diagonal()))
        v4 = v3 / x1
        v9 = torch.where(v4 > 0, v4, x0)
        return torch.stack([v9, v9], 0)

    check(f, _grid((4, 6, 1), 179581025721), _grid((6, 1), 7))
