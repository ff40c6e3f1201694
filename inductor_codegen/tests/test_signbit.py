"""signbit in every dtype: the sign bit itself (negative zero and NaN included), printed
as a bit test (gcc 12 stopped with an internal compiler error on std::signbit of a value
widened from bf16 in a vectorized loop)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("prim_decomp")  # (packages of the pipeline: tests run alone without)
from graph_helpers import check  # noqa: E402

SPECIAL = [0.0, -0.0, 1.5, -2.0, float("nan"), -float("nan"), float("inf"), -float("inf")]


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str
)
def test_signbit_of_floats_reads_the_sign_bit(dtype):
    check(torch.signbit, torch.tensor(SPECIAL * 5, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool], ids=str)
def test_signbit_of_integers(dtype):
    values = [0, 1, 3, 7] if dtype in (torch.uint8, torch.bool) else [0, -1, 3, -7]
    check(torch.signbit, torch.tensor(values * 5, dtype=dtype))
