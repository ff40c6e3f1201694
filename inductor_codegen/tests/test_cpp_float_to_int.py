"""Float to integer casts in C++ kernels give eager's values for NaN and out-of-range floats."""

from __future__ import annotations

import pytest
import torch
from graph_helpers import check


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("to", [torch.int32, torch.int64])
def test_nan_computed_in_the_kernel_casts_as_eager(dtype, to):
    # 0 // 0 is NaN; the C++ compiler sees the NaN it computes and may fold the cast
    def f(x):
        masked = x.masked_fill(x > 0, 0)
        return (masked // masked).to(to)

    check(f, torch.tensor([0.5, -0.25, 0.0, 2.0], dtype=dtype))


@pytest.mark.parametrize("to", [torch.int32, torch.int64])
def test_out_of_range_and_special_floats_cast_as_eager(to):
    def f(x):
        return (x * 1).to(to)

    special = [float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e19, -1e19, 2.7, -2.7]
    check(f, torch.tensor(special, dtype=torch.float32))
    check(f, torch.tensor(special, dtype=torch.float64))
