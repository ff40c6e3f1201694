"""A custom autograd Function whose output is a view (gradient reversal's `x.view_as(x)`)
keeps its own backward: the output is not rebuilt from its base at run time, which
would replay the view ops and skip the Function's backward."""

from __future__ import annotations

import pytest
import torch

from aot_autograd import aot_function


def identity_compiler(gm, example_inputs):
    return gm


class ReverseGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.neg() * 0.5


def of_intermediate(x):
    return ReverseGradient.apply(x * 1)


def of_input(x):
    return ReverseGradient.apply(x)


def viewed_after(x):
    return ReverseGradient.apply(x * 1).view(-1)


def beside_a_plain_view(x):
    y = x * 1
    return ReverseGradient.apply(y), y.view(-1)


@pytest.mark.parametrize("fn", [of_intermediate, of_input, viewed_after, beside_a_plain_view])
def test_custom_function_view_output_keeps_its_backward(fn):
    x = torch.randn(3, 2, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    got, expected = aot_function(fn, identity_compiler)(x), fn(x_eager)
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for a, e in zip(got, expected, strict=True):
        torch.testing.assert_close(a, e)
    sum(t.sum() for t in got).backward()
    sum(t.sum() for t in expected).backward()
    torch.testing.assert_close(x.grad, x_eager.grad)
