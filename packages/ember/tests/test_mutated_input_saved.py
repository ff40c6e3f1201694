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


def _pool_then_break_then_zero(x):
    """The pool's backward reads `x`; only the scatter's output reaches the loss."""
    v1 = x.scatter(0, torch.zeros_like(x, dtype=torch.long), 3.0)
    v2 = F.adaptive_avg_pool2d(x, (2, 3))
    if v2.float().mean().item() > -100:  # a graph break: the write is in the next graph
        with torch.no_grad():
            x.narrow(1, 0, 1).zero_()
    return v1.amax() * 2, v2


def _read_then_break_then_zero(x):
    """Both outputs' backwards read `x` (the pools save it), written after the graph break."""
    v1 = F.adaptive_avg_pool2d(x, (1, 2))
    v2 = F.adaptive_max_pool2d(x, (1, 1))
    if v2.float().mean().item() > -100:
        with torch.no_grad():
            x.zero_()
    return v1, v2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_write_after_graph_break_into_an_input_only_an_unused_backward_reads(backend, dtype):
    def run(f):
        x = torch.linspace(-1, 1, 24, dtype=dtype).reshape(2, 3, 4).requires_grad_()
        used, unused = f(x)
        used.backward()
        return used, unused, x.grad, x.detach()

    expected = run(_pool_then_break_then_zero)
    actual = run(ember.compile(_pool_then_break_then_zero, backend=backend))
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("which", [0, 1])
def test_write_after_graph_break_into_an_input_a_used_backward_reads_raises(backend, which):
    def run(f):
        x = torch.linspace(-1, 1, 24).reshape(2, 3, 4).requires_grad_()
        f(x)[which].sum().backward()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(_read_then_break_then_zero)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(ember.compile(_read_then_break_then_zero, backend=backend))
