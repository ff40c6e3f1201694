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


NARROW_SPECIAL = [
    float("nan"), float("inf"), -float("inf"), 300.7, -300.7, 127.9, 128.0, -129.0, 255.5,
    256.0, -1.5, 65539.0, 70000.0, -70000.0, 3e9, -3e9, 2.0**40 + 5, -(2.0**31) - 1000, 1e19,
]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("to", [torch.int8, torch.int16, torch.uint8])
@pytest.mark.parametrize("size", [1, 67], ids=["one", "many"])
def test_narrow_integer_casts_wrap_as_eager(dtype, to, size):
    # eager's scalar and vectorised kernels agree: int8/int16 wrap a float's int32
    # conversion, uint8 its int64 conversion; NaN and values past those ranges give 0
    def f(x):
        return (x * 1).to(to)

    values = torch.tensor(NARROW_SPECIAL, dtype=torch.float64).to(dtype)
    check(f, values.repeat_interleave(size))


@pytest.mark.parametrize("to", [torch.int8, torch.int16, torch.uint8])
def test_nan_computed_in_the_kernel_casts_to_narrow_integers_as_eager(to):
    def f(x):
        masked = x.masked_fill(x > 0, 0)
        return (masked // masked).to(to), (x * 1e10).to(to)

    check(f, torch.tensor([0.5, -0.25, 0.0, 2.0, -3.0] * 13))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("to", [torch.int32, torch.int64, torch.int16])
@pytest.mark.parametrize("size", [1, 67], ids=["one", "many"])
def test_integer_zero_from_a_negative_fraction_is_a_positive_zero(dtype, to, size):
    # (float)(int)x folded to trunc(x) would be -0.0 for x in (-1, 0): 1 / it gives -inf
    def f(x, y):
        return y / x.to(to), torch.atan2(x.to(to).to(x.dtype), y)

    x = torch.linspace(-0.9, 0.9, size, dtype=dtype)
    y = torch.linspace(-2.0, 3.0, size, dtype=dtype)
    check(f, x, y)
