"""Float arguments given to operators that take a number: under dynamic=True, and after a
second value makes them symbolic (automatic dynamic). torch.compile keeps some symbolic
(`x ** s`, `torch.lerp(a, b, s)`, `x.clamp(min=s)`) and specializes others
(`F.layer_norm(..., eps=s)`, `F.dropout(p=s)`): capture makes as many graphs, of as
many operations, and each call's values equal eager's."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torchcheck import check_like_torch


def power_then_abs(x, s):
    return (x**s).abs()


def abs_then_power(x, s):
    return x.abs() ** s


def float_base_of_a_power(x, s):
    return torch.pow(s, x)


def lerp_weight(x, s):
    return torch.lerp(x, x * 2, s)


def layer_norm_eps(x, s):
    return F.layer_norm(x, (4,), eps=s)


def clamp_min(x, s):
    return x.clamp(min=s)


def clamp_max_and_scale(x, s):
    return x.clamp(max=s) * s


def dropout_probability_in_eval(x, s):
    return F.dropout(x, p=s / 10, training=False)


def leaky_relu_slope(x, s):
    return F.leaky_relu(x, s) + F.elu(x, alpha=s)


PROGRAMS = [
    power_then_abs,
    abs_then_power,
    float_base_of_a_power,
    lerp_weight,
    layer_norm_eps,
    clamp_min,
    clamp_max_and_scale,
    dropout_probability_in_eval,
    leaky_relu_slope,
]


def _arguments():
    """A new float value on each call (ember's calls, then torch.compile's)."""
    values = itertools.cycle([0.5, 1.5, 2.5])
    return lambda: (torch.randn(3, 4), next(values))


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_float_operator_argument_symbolic_or_specialized_like_torch(fn, dynamic):
    settings = {"dynamic": True} if dynamic else {}
    check_like_torch(fn, _arguments(), calls=3, **settings)
