"""Batch norm's saved statistics keep eager's dtype and shape on each device.

CPU saves them in the input's dtype, CUDA in the accumulate dtype (float32 for a half
input); a half input with float32 parameters ("mixed" batch norm) saves float32 ones on
both. Outside training CPU saves empty statistics and CUDA the running mean and the
inverse standard deviation. The backward kernels check the saved dtype, so a wrong
one fails there.
"""

from __future__ import annotations

import pytest
import torch

from prim_decomp import inductor_default

aten = torch.ops.aten
HALF = [torch.bfloat16, torch.float16]
OPS = {
    "native": aten.native_batch_norm.default,
    "legit": aten._native_batch_norm_legit.default,
    "functional": aten._native_batch_norm_legit_functional.default,
}


def _inputs(dtype, param_dtype, device="cpu"):
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, dtype=dtype, device=device)
    params = [
        torch.rand(4, dtype=param_dtype, device=device) + 0.5,
        torch.randn(4, dtype=param_dtype, device=device),
        torch.randn(4, dtype=param_dtype, device=device),
        torch.rand(4, dtype=param_dtype, device=device) + 0.5,
    ]
    return x, params


@pytest.mark.parametrize("mixed", [False, True], ids=["same_dtype", "mixed"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize("name", OPS)
def test_half_batch_norm_statistics_keep_eager_dtype_on_cpu(name, training, dtype, mixed):
    op = OPS[name]
    x, params = _inputs(dtype, torch.float32 if mixed else dtype)
    eager_params = [p.clone() for p in params]
    expected = op(x, *eager_params, training, 0.1, 1e-5)
    actual = inductor_default[op](x, *params, training, 0.1, 1e-5)
    for got, want in zip(actual, expected):
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    for got, want in zip(params, eager_params):  # running statistics updated as eager's
        torch.testing.assert_close(got, want)


def test_batch_norm_of_refused_dtypes_raises_eager_error():
    x, params = _inputs(torch.float32, torch.float64)
    with pytest.raises(RuntimeError, match="mixed dtype"):
        aten.native_batch_norm.default(x, *params, True, 0.1, 1e-5)
    assert inductor_default[OPS["functional"]](x, *params, True, 0.1, 1e-5) is NotImplemented


@pytest.mark.parametrize("mixed", [False, True], ids=["same_dtype", "mixed"])
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_half_batch_norm_statistics_on_cuda_fakes_are_float32(training, mixed):
    """On CUDA fakes (no GPU needed) the decomposition agrees with the meta kernel,
    written for CUDA: float32 statistics, the running ones outside training. (The updated
    running statistics keep their own dtype, checked against eager on CPU above.)"""
    from guards import FakeTensor, FakeTensorMode

    mode = FakeTensorMode()
    cuda = torch.device("cuda")

    def fake(t):
        return FakeTensor(mode, torch.empty_like(t, device="meta"), cuda)

    x, params = _inputs(torch.bfloat16, torch.float32 if mixed else torch.bfloat16)
    x, params = fake(x), [fake(p) for p in params]
    op = OPS["functional"]
    with mode:
        expected = op(x, *params, training, 0.1, 1e-5)
        actual = inductor_default[op](x, *params, training, 0.1, 1e-5)
    for got, want in zip(actual[:3], expected[:3]):
        assert (got.dtype, tuple(got.shape)) == (want.dtype, tuple(want.shape))
        assert got.device.type == "cuda"
