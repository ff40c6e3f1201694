"""Elementwise type promotion against torch.result_type."""

from __future__ import annotations

import pytest
import torch

from prim_decomp import Promotion, elementwise_dtypes, result_dtype

_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex64,
]  # fmt: skip
_OPERANDS = (
    [torch.ones(2, dtype=d) for d in _DTYPES]
    + [torch.tensor(1, dtype=d) for d in _DTYPES]
    + [True, 3, 2.5, 1j]
)


def _label(x):
    return f"{x.dtype}[{x.dim()}d]" if isinstance(x, torch.Tensor) else repr(x)


@pytest.mark.parametrize("a", _OPERANDS, ids=_label)
def test_pairs_match_torch(a):
    for b in _OPERANDS:
        if not (isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor)):
            continue
        assert result_dtype(a, b) == torch.result_type(a, b), (_label(a), _label(b))


def test_promotion_kinds():
    ints = torch.ones(2, dtype=torch.int64)
    assert elementwise_dtypes(ints, promotion=Promotion.INT_TO_FLOAT) == (
        torch.float32,
        torch.float32,
    )
    halves = torch.ones(2, dtype=torch.bfloat16)
    assert elementwise_dtypes(halves) == (torch.float32, torch.bfloat16)
    assert elementwise_dtypes(halves, 1.0, promotion=Promotion.ALWAYS_BOOL)[1] == torch.bool
    bools = torch.ones(2, dtype=torch.bool)
    assert elementwise_dtypes(bools, promotion=Promotion.BOOL_TO_LONG)[1] == torch.int64
    cplx = torch.ones(2, dtype=torch.complex64)
    assert elementwise_dtypes(cplx, promotion=Promotion.COMPLEX_TO_FLOAT)[1] == torch.float32
