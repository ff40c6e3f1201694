"""An input written in place after a value computed from it: the backward does not
recompute that value from the input, whose new value the run time writes after the
forward (eager saved the value, not the input, and its backward runs)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember


def _scatter_then_zero(x):
    v1 = x.scatter(0, torch.zeros_like(x, dtype=torch.long), 3.0)
    with torch.no_grad():
        x.zero_()
    return v1.amax() * 2


def _pointwise_then_write_a_view(x):
    v1 = (x * 3).exp()
    with torch.no_grad():
        x.narrow(0, 0, 1).fill_(5)
    return (v1 * x.detach()).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", [_scatter_then_zero, _pointwise_then_write_a_view])
def test_backward_of_a_value_computed_before_its_input_is_written_in_place(backend, fn):
    def run(f):
        x = torch.linspace(-1, 1, 6).reshape(3, 2).requires_grad_()
        out = f(x)
        out.backward()
        return out, x.grad, x.detach()

    expected = run(fn)
    actual = run(ember.compile(fn, backend=backend))
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(
    "drop", [lambda x: F.dropout(x, p=0.0), lambda x: F.dropout(x, 0.3, training=False)]
)
def test_a_dropout_that_drops_nothing_returns_its_input_itself(drop, backend, dynamic):
    """Eager's dropout returns its input when it drops nothing: a write through the result
    writes the input (under symbolic sizes too, where torch's Python decomposition copies)."""

    def fn(x):
        v = drop(x)
        v.mul_(2)
        return v + 1

    x, want = torch.ones(4, 3), torch.ones(4, 3)
    expected = fn(want)
    got = ember.compile(fn, backend=backend, dynamic=dynamic)(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x, want)
