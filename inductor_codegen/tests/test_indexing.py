"""Index arithmetic against torch: reshape index maps, view strides, range-aware simplification."""

from __future__ import annotations

import itertools
import math

import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inductor_codegen.indexing import (
    FloorDiv,
    IndexMod,
    contiguous_strides,
    reshape_index,
    simplify_with_ranges,
    view_strides,
)

S = sympy.Integer


def _factorizations(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def reshape_pairs(draw):
    numel = draw(st.sampled_from([1, 2, 6, 8, 12, 24, 30]))

    def shape():
        dims, left = [], numel
        while left > 1 and len(dims) < 4:
            d = draw(st.sampled_from(_factorizations(left)))
            dims.append(d)
            left //= d
        dims.append(left)
        if draw(st.booleans()):
            dims.insert(draw(st.integers(0, len(dims))), 1)
        return tuple(dims)

    return shape(), shape()


@settings(max_examples=60, deadline=None)
@given(reshape_pairs())
def test_reshape_index_matches_torch_view(pair):
    old, new = pair
    base = torch.arange(math.prod(old)).view(old)
    viewed = base.view(new)
    strides = contiguous_strides([S(s) for s in old])
    for idx in itertools.product(*(range(s) for s in new)):
        old_idx = reshape_index([S(s) for s in old], [S(s) for s in new], [S(i) for i in idx])
        flat = sum(int(i) * int(st) for i, st in zip(old_idx, strides))
        assert flat == int(viewed[idx])


@settings(max_examples=60, deadline=None)
@given(reshape_pairs(), st.permutations(range(6)))
def test_view_strides_agree_with_torch(pair, perm):
    old, new = pair
    base = torch.empty(old)
    if len(old) >= 2:
        order = [p for p in perm if p < len(old)]
        base = torch.empty([old[p] for p in order]).permute(
            *[order.index(d) for d in range(len(old))]
        )
    ours = view_strides(
        [S(s) for s in base.shape], [S(s) for s in base.stride()], [S(s) for s in new]
    )
    try:
        expected = base.view(new).stride()
    except RuntimeError:
        assert ours is None
        return
    assert ours is not None
    for size, a, b in zip(new, ours, expected):
        if size != 1:
            assert int(a) == b


def test_simplify_with_ranges_removes_trivial_division():
    a, b = sympy.symbols("a b", integer=True, nonnegative=True)
    ranges = {a: 4, b: 16}
    assert simplify_with_ranges(FloorDiv(16 * a + b, 16), ranges) == a
    assert simplify_with_ranges(IndexMod(16 * a + b, 16), ranges) == b
    # b may reach 16 here, so the division must stay.
    assert simplify_with_ranges(FloorDiv(16 * a + b, 16), {a: 4, b: 17}).has(FloorDiv)
