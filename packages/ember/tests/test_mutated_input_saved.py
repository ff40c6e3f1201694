"""An input written in place after a value computed from it: the backward does not
recompute that value from the input, whose new value the run time writes after the
forward (eager saved the value, not the input, and its backward runs)."""

from __future__ import annotations

import pytest
import torch

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
