"""`type(v)` inside captured code is the type the value has in eager.

Tensors computed in the frame are plain tensors (not the fake tensors capture
computes with), operations on a tensor subclass keep the subclass as torch's
default `__torch_function__` does, nn.Parameter results are plain tensors, and
sizes traced symbolically are ints.
"""

from __future__ import annotations

import pytest
import torch

import dynamo_capture
from dynamo_capture.testing import eager_backend


class Tagged(torch.Tensor):
    """A subclass keeping torch's default __torch_function__."""


class MoreTagged(Tagged):
    pass


def branch_on_exact_type(x):
    y = x + 1
    if type(y) is torch.Tensor:
        return y * 2
    return y * 3


def branch_on_type_equality(x):
    y = x.sin()
    if type(y) == torch.Tensor:  # noqa: E721 - the comparison under test
        return y - 1
    return y + 1


def types_of_values(x, n):
    y = x + 1
    return (
        type(y),
        type(x),
        type(n),
        type(x.shape[0]),
        type(x.size(0) * 2),
        type(y.shape),
        y.__class__,
        type(y) is not torch.Tensor,
        isinstance(x.shape[0], int),
    )


def parameter_types(module, x):
    w = module.weight
    return type(w), type(w * 1), type(module(x)), type(w) is torch.nn.Parameter


def subclass_types(x, y):
    a = x + 1
    b = x + y
    c = torch.cat([y, y])
    d = torch.relu(a)
    return type(a), type(b), type(c), type(d), type(a) is Tagged, a.__class__


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("fn", [branch_on_exact_type, branch_on_type_equality])
def test_type_of_computed_tensor_is_tensor(fn, dynamic):
    compiled = dynamo_capture.optimize(fn, backend=eager_backend, dynamic=dynamic)
    for size in (3, 5):
        x = torch.randn(size)
        torch.testing.assert_close(compiled(x), fn(x))
    assert not compiled.graph_breaks


@pytest.mark.parametrize("dynamic", [False, True, None])
def test_type_of_values_matches_eager(dynamic):
    compiled = dynamo_capture.optimize(types_of_values, backend=eager_backend, dynamic=dynamic)
    for size, n in ((3, 2), (4, 7), (6, 9)):
        x = torch.randn(size)
        assert compiled(x, n) == types_of_values(x, n)


def test_type_of_parameter_and_its_results():
    module = torch.nn.Linear(2, 2)
    x = torch.randn(3, 2)
    compiled = dynamo_capture.optimize(parameter_types, backend=eager_backend)
    assert compiled(module, x) == parameter_types(module, x)


def test_type_of_subclass_results_follows_torch_function():
    x = torch.randn(3).as_subclass(Tagged)
    y = torch.randn(3).as_subclass(MoreTagged)
    compiled = dynamo_capture.optimize(subclass_types, backend=eager_backend)
    assert compiled(x, y) == subclass_types(x, y)
    plain = torch.randn(3), torch.randn(3)
    assert compiled(*plain) == subclass_types(*plain)
