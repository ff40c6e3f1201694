"""Half-precision batch norm compiles as eager runs, forward and backward.

Eager saves batch statistics in the input's dtype on CPU and in float32 on CUDA, and in
float32 on both for a half input with float32 weight, bias or running statistics
("mixed" batch norm); its backward kernels check that dtype. Compiled programs save
them the same way, so the backward runs, and the statistics returned match eager's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import ember

BACKENDS = ["aot_eager", "inductor"]
HALF = [torch.bfloat16, torch.float16]


def _training_block(x, weight, bias, running_mean, running_var):
    y = F.batch_norm(x, running_mean, running_var, weight, bias, training=True)
    return torch.relu(y).float().square().mean(0)


def _inputs(dtype, param_dtype, shape, device="cpu", stats=True, affine=True):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
    channels = shape[1]
    weight = bias = mean = var = None
    if affine:
        weight = (torch.rand(channels, dtype=param_dtype, device=device) + 0.5).requires_grad_()
        bias = torch.randn(channels, dtype=param_dtype, device=device).requires_grad_()
    if stats:
        mean = torch.zeros(channels, dtype=param_dtype, device=device)
        var = torch.ones(channels, dtype=param_dtype, device=device)
    return [x, weight, bias, mean, var]


def _twin(values):
    twins = [None if v is None else v.detach().clone() for v in values]
    return [
        t if t is None or not v.requires_grad else t.requires_grad_() for t, v in zip(twins, values)
    ]


def _check_training(backend, dtype, param_dtype, shape, device="cpu", **options):
    eager_inputs = _inputs(dtype, param_dtype, shape, device, **options)
    compiled_inputs = _twin(eager_inputs)
    expected = _training_block(*eager_inputs)
    actual = ember.compile(_training_block, backend=backend)(*compiled_inputs)
    torch.testing.assert_close(actual, expected, atol=2e-2, rtol=2e-2)
    wants = [t for t in eager_inputs if t is not None and t.requires_grad]
    gots = [t for t in compiled_inputs if t is not None and t.requires_grad]
    expected_grads = torch.autograd.grad(expected.sum(), wants)
    actual_grads = torch.autograd.grad(actual.sum(), gots)
    for got, want in zip(actual_grads, expected_grads):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=6e-2, rtol=5e-2)
    for got, want in zip(compiled_inputs[3:], eager_inputs[3:]):  # running statistics
        if want is not None:
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4, 4)], ids=["2d", "4d"])
@pytest.mark.parametrize(
    "options",
    [{}, {"stats": False}, {"affine": False}],
    ids=["affine_with_stats", "affine_without_stats", "stats_only"],
)
def test_half_batch_norm_training_with_float32_parameters_runs_backward(
    backend, dtype, shape, options
):
    _check_training(backend, dtype, torch.float32, shape, **options)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_batch_norm_training_with_half_parameters_runs_backward(backend, dtype):
    _check_training(backend, dtype, dtype, (2, 3, 4, 4))


def _native_statistics(x, weight, bias, running_mean, running_var, training):
    return torch.ops.aten.native_batch_norm(
        x, weight, bias, running_mean, running_var, training, 0.1, 1e-5
    )


def _check_statistics(backend, dtype, param_dtype, training, device="cpu"):
    values = [t.detach() for t in _inputs(dtype, param_dtype, (2, 3, 4, 4), device)]
    expected = _native_statistics(*values, training)
    twins = _twin(values)
    actual = ember.compile(_native_statistics, backend=backend)(*twins, training)
    for got, want in zip(actual, expected):
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("param_dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_half_batch_norm_saved_statistics_keep_eager_dtype(backend, param_dtype, training):
    _check_statistics(backend, torch.bfloat16, param_dtype, training)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("param_dtype", [torch.bfloat16, torch.float32], ids=str)
def test_half_batch_norm_on_cuda_saves_float32_statistics(backend, param_dtype):
    for training in (True, False):
        _check_statistics(backend, torch.bfloat16, param_dtype, training, device="cuda")
    _check_training(backend, torch.bfloat16, param_dtype, (2, 3, 4, 4), device="cuda")
