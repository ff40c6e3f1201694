"""Max and average pooling lowered to window expressions, against eager.

Covers values and argmax indices (ties, NaN, padding, dilation, ceil mode),
the backward through the indices, and fusion of the pointwise producer.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import check, compile_fn

aten = torch.ops.aten

POOL_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    ((2, 2), (2, 2), (0, 0), (1, 1), False),
    ((3, 3), (2, 2), (1, 1), (1, 1), False),
    ((3, 2), (2, 1), (1, 0), (1, 1), True),
    ((2, 2), (2, 2), (0, 0), (2, 2), False),
]


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", POOL_CASES)
def test_max_pool2d_values_and_indices(kernel, stride, padding, dilation, ceil_mode):
    def fn(x):
        return aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)

    x = torch.randn(2, 3, 11, 9)
    x[0, 0, :4, :4] = 1.0  # ties: the first point wins
    x[1, 2, 5, 5] = float("nan")
    compiled = check(fn, x)
    assert not compiled.fallbacks


def test_max_pool2d_three_dims_and_all_negative_infinity():
    def fn(x):
        return aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [1, 1])

    x = torch.full((3, 6, 6), float("-inf"))
    x[1] = torch.randn(6, 6)
    assert not check(fn, x).fallbacks


def test_max_pool2d_fuses_its_producer_and_skips_unused_indices():
    def fn(x, scale):
        return F.max_pool2d((x * scale).relu(), 2)

    compiled = check(fn, torch.randn(4, 8, 16, 16), torch.randn(8, 1, 1))
    assert compiled.kernel_count == 1
    assert not compiled.fallbacks


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", POOL_CASES)
def test_max_pool2d_backward(kernel, stride, padding, dilation, ceil_mode):
    x = torch.randn(2, 3, 11, 9)
    values, indices = aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
    grad = torch.randn_like(values)

    def fn(grad, x, indices):
        return aten.max_pool2d_with_indices_backward(
            grad, x, kernel, stride, padding, dilation, ceil_mode, indices
        )

    assert not check(fn, grad, x, indices).fallbacks


def test_max_pool2d_training_step_matches_autograd():
    x = torch.randn(2, 4, 8, 8, requires_grad=True)

    def step(x):
        out = F.max_pool2d(x.relu(), 3, 2, 1)
        return torch.autograd.grad(out.sin().sum(), x)[0]

    compiled, _ = compile_fn(step, x)
    torch.testing.assert_close(compiled(x), step(x))


@pytest.mark.parametrize(
    "kernel,stride,padding,ceil_mode,divisor,count_include_pad",
    [
        (3, 2, 1, True, None, True),
        ((3, 2), (2, 1), (1, 0), True, None, False),
        (3, 1, 1, False, 4, True),
    ],
)
def test_avg_pool2d(kernel, stride, padding, ceil_mode, divisor, count_include_pad):
    def fn(x):
        return F.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor)

    compiled = check(fn, torch.randn(2, 3, 10, 9))
    assert not compiled.fallbacks


def test_avg_pool2d_bfloat16():
    check(lambda x: F.avg_pool2d(x, 2), torch.randn(2, 3, 8, 8).bfloat16(), rtol=2e-2, atol=2e-2)
