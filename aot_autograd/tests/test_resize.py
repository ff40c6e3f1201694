"""resize_ / resize_as_ functionalized: a view of the tensor's own elements, or a grown
tensor of its own; every other case a clear error."""

from __future__ import annotations

import pytest
import torch

from aot_autograd import EagerCallWarning, aot_function


def identity_compiler(gm, example_inputs):
    return gm


def _shrink_then_write_through(x):
    y = x.clone()
    flat = y.view(-1)
    y.resize_(2, 3).fill_(7.0)
    return y, flat  # flat sees the write in its first six elements


def _resize_a_view_of_an_input(x):
    return x[1].resize_(3, 2) * 2


CASES = {
    "same_number_of_elements": lambda x: x.clone().resize_(10, 6),
    "fewer_elements": lambda x: x.clone().resize_(3, 7),
    "shrink_then_write_through": _shrink_then_write_through,
    "resize_as": lambda x: x.clone().resize_as_(torch.empty(6, 10)),
    "a_view_of_an_input": _resize_a_view_of_an_input,
    "grow_then_fill": lambda x: x.clone().resize_(200).fill_(3.0),
    "scalar_to_three_dims": lambda x: x.sum().clone().resize_(1, 1, 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_resize_matches_eager(name):
    fn = CASES[name]
    x = torch.randn(4, 15)
    expected = fn(x.clone())
    actual = aot_function(fn, identity_compiler)(x.clone())
    torch.testing.assert_close(actual, expected)
    for a, e in zip(actual, expected) if isinstance(expected, tuple) else [(actual, expected)]:
        assert a.stride() == e.stride()


def test_grown_tensor_keeps_its_elements_first():
    x = torch.randn(4, 15)
    actual = aot_function(lambda x: x.clone().resize_(100), identity_compiler)(x)
    assert actual.shape == (100,)
    torch.testing.assert_close(actual[:60], x.reshape(-1))  # the rest eager leaves undefined


def test_resize_of_an_input_runs_eagerly_with_a_warning():
    x = torch.randn(4)
    with pytest.warns(EagerCallWarning, match="resizes a graph input"):
        out = aot_function(lambda x: x.resize_(3), identity_compiler)(x)
    assert out is x and x.shape == (3,)


def test_growing_a_tensor_that_shares_memory_runs_eagerly_with_a_warning():
    def fn(x):
        y = x * 1
        view = y[:2]
        y.resize_(20)
        return view

    x = torch.randn(4)
    with pytest.warns(EagerCallWarning, match="grows a tensor that shares"):
        out = aot_function(fn, identity_compiler)(x)
    torch.testing.assert_close(out, fn(x))


def test_resize_of_a_non_contiguous_tensor_runs_eagerly_with_a_warning():
    x = torch.randn(2, 3)
    with pytest.warns(EagerCallWarning, match="non-contiguous"):
        out = aot_function(lambda x: (x * 1).t().resize_(6), identity_compiler)(x)
    assert out.shape == (6,)
