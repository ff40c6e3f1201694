"""Layer and group norm keep their saved statistics (mean, rstd) in eager's dtype.

Eager's CPU kernels keep them in the input's dtype, except for a half input with
float32 parameters ("mixed"), whose statistics are float32; layer norm off the CPU keeps
them in the accumulate dtype (the meta kernel, as CUDA's). The backward kernels check
the saved dtype, so a wrong one fails there.
"""

from __future__ import annotations

import pytest
import torch

from prim_decomp import inductor_default

aten = torch.ops.aten
HALF = [torch.bfloat16, torch.float16]
PARAMS = ["none", "weight", "bias", "both"]


def _params(which, size, dtype, device="cpu"):
    weight = torch.rand(size, dtype=dtype, device=device) + 0.5
    bias = torch.randn(size, dtype=dtype, device=device)
    return (
        weight if which in ("weight", "both") else None,
        bias if which in ("bias", "both") else None,
    )


def _assert_like_eager(actual, expected):
    for got, want in zip(actual, expected):
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        if want.device.type != "meta":
            torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("which", PARAMS)
@pytest.mark.parametrize("mixed", [False, True], ids=["same_dtype", "mixed"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_layer_norm_statistics_keep_eager_dtype(dtype, mixed, which, device):
    torch.manual_seed(0)
    x = torch.randn(3, 4, 8, dtype=dtype, device=device)
    weight, bias = _params(which, 8, torch.float32 if mixed else dtype, device)
    op = aten.native_layer_norm.default
    _assert_like_eager(
        inductor_default[op](x, [8], weight, bias, 1e-5), op(x, [8], weight, bias, 1e-5)
    )


@pytest.mark.parametrize("which", PARAMS)
@pytest.mark.parametrize("mixed", [False, True], ids=["same_dtype", "mixed"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_group_norm_statistics_keep_eager_dtype(dtype, mixed, which):
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, dtype=dtype)
    weight, bias = _params(which, 4, torch.float32 if mixed else dtype)
    op = aten.native_group_norm.default
    args = (x, weight, bias, 3, 4, 5, 2, 1e-5)
    _assert_like_eager(inductor_default[op](*args), op(*args))


def test_norms_of_refused_dtypes_run_eager_kernel():
    x = torch.randn(3, 4, 8)
    weight = torch.rand(8, dtype=torch.float64)
    with pytest.raises(RuntimeError):
        aten.native_layer_norm.default(x, [8], weight, None, 1e-5)
    assert inductor_default[aten.native_layer_norm.default](x, [8], weight, None, 1e-5) is (
        NotImplemented
    )
    group = (x, weight[:4], None, 3, 4, 8, 2, 1e-5)
    with pytest.raises(RuntimeError):
        aten.native_group_norm.default(*group)
    assert inductor_default[aten.native_group_norm.default](*group) is NotImplemented


@pytest.mark.parametrize("batch", [0, 2])
def test_group_norm_of_an_empty_batch_decomposes(batch):
    """The group norm decompositions spell their view sizes out: `view(x, [0, G, -1])`
    of an empty batch is ambiguous and raises where eager's kernel returns empty."""
    x = torch.randn(batch, 6, 5, dtype=torch.float64)
    weight, bias = torch.rand(6, dtype=torch.float64) + 0.5, torch.randn(6, dtype=torch.float64)
    args = (x, weight, bias, batch, 6, 5, 3, 1e-5)
    forward = inductor_default[aten.native_group_norm.default]
    expected = aten.native_group_norm.default(*args)
    actual = forward(*args)
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want)
    grad = torch.randn_like(x)
    backward_args = (grad, x, expected[1], expected[2], weight, batch, 6, 5, 3, [True] * 3)
    backward = inductor_default[aten.native_group_norm_backward.default]
    for got, want in zip(
        backward(*backward_args), aten.native_group_norm_backward.default(*backward_args)
    ):
        torch.testing.assert_close(got, want)
