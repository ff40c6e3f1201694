"""Comparisons of half-precision values computed inside a kernel see eager's rounding.

Compiled kernels keep float16/bfloat16 intermediates in float32. A comparison jumps at a
rounding boundary, so its operands are rounded to their dtype first: `x == amax(x)` (the
backward of amax, amin, max and min) of a recomputed `x` against the stored, rounded
maximum must still pick the maximum, or the gradient is 0/0.
"""

from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ["aot_eager", "inductor"]
HALF = [torch.bfloat16, torch.float16]


def _grads(fn, x, *args):
    x = x.detach().clone().requires_grad_()
    out = fn(x, *args)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.double() * (torch.arange(o.numel()).view_as(o) + 0.5)).sum() for o in outs)
    loss.backward()
    return outs, x.grad


def _check(fn, x, *args, backend):
    expected, expected_grad = _grads(fn, x, *args)
    got, got_grad = _grads(ember.compile(fn, backend=backend), x, *args)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)
    assert not got_grad.isnan().any()
    torch.testing.assert_close(got_grad, expected_grad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", HALF)
def test_half_amax_backward_of_computed_values_has_no_nan(backend, dtype):
    def fn(x, s):
        return (x * s).amax(dim=-1, keepdim=True)

    x = (torch.arange(24, dtype=torch.float32).view(4, 6) / 4 - 2).to(dtype)
    _check(fn, x, 0.3, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", HALF)
def test_half_reductions_with_ties_backward_of_computed_values(backend, dtype):
    def fn(x):
        y = torch.sin(x) * 0.7 + 0.1
        return y.amin(dim=0), y.max(dim=1).values, y.amax()

    torch.manual_seed(0)
    x = torch.randn(7, 9).to(dtype)
    _check(fn, x, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", HALF)
def test_half_comparison_of_computed_values_matches_eager(backend, dtype):
    def fn(x, y):
        a = x * 0.3
        b = y * 0.3
        return (a == b), (a < b), (x * 0.1 >= 0.1)

    x = torch.arange(64, dtype=torch.float32).to(dtype)
    y = (x + 1e-3 * torch.arange(64)).to(dtype)
    expected = fn(x, y)
    got = ember.compile(fn, backend=backend)(x, y)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)
