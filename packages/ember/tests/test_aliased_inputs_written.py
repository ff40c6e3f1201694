"""A graph whose input written in place shares memory with another of its inputs gives
eager's results: the call runs the graph's ops eagerly.

A view and its base become two inputs of the graph after a graph break (a branch on a
value, a metadata change in place), and a caller may pass two views of one tensor. The
compiled graph treats its inputs as separate tensors, so a write through one would not
show in the other; such a call used to raise a clear error.

| rank | footgun                                                     | before        | test |
|------|-------------------------------------------------------------|---------------|------|
| 1    | a view and its base, written in place after a graph break   | error         | test_view_and_base_written_after_a_graph_break_match_eager |
| 1    | ... an intermediate that requires grad                       | error         | test_view_of_intermediate_written_after_a_graph_break_has_eager_gradient |
| 1    | two views of one tensor passed by the caller, one written    | error         | test_aliased_arguments_written_in_place_match_eager |
"""

from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ("aot_eager", "inductor")


pytestmark = pytest.mark.usefixtures("fresh_ember")


@pytest.mark.parametrize("backend", BACKENDS)
def test_view_and_base_written_after_a_graph_break_match_eager(backend):
    def fn(x, y):
        v = y.unsqueeze(0).expand(2, *y.shape)
        w = y[1:]
        if (x > 0).any():  # a graph break: y, v and w reach the rest as inputs
            v.narrow(1, 0, 1).zero_()
            w.mul_(3)
        return v * 1, y + 0, w.sum()

    compiled = ember.compile(fn, backend=backend)
    for x in (torch.ones(3), -torch.ones(3), torch.ones(3)):
        y, y_twin = torch.arange(12.0).view(4, 3), torch.arange(12.0).view(4, 3)
        torch.testing.assert_close(compiled(x, y), fn(x, y_twin))
        torch.testing.assert_close(y, y_twin)


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_reshaped_in_place_then_written_matches_eager(backend):
    def fn(x):
        v = x.unsqueeze(-1)
        v.squeeze_()
        v.neg_()
        return x * 2, v + 1

    compiled = ember.compile(fn, backend=backend)
    for shape in ((2, 3), (4, 3)):
        x = torch.randn(shape)
        x_twin = x.clone()
        torch.testing.assert_close(compiled(x), fn(x_twin))
        torch.testing.assert_close(x, x_twin)


@pytest.mark.parametrize("backend", BACKENDS)
def test_view_of_intermediate_written_after_a_graph_break_has_eager_gradient(backend):
    def fn(a):
        v = a * 2
        row = v[0]
        if v.sum() > 0:
            row.add_(a[1] * a[1])
        return v.cos()

    results = []
    for run in (fn, ember.compile(fn, backend=backend)):
        a = torch.linspace(-1, 2, 6).view(2, 3).requires_grad_()
        out = run(a)
        out.sum().backward()
        results.append((out.detach(), a.grad))
    torch.testing.assert_close(results[1], results[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_aliased_arguments_written_in_place_match_eager(backend):
    def fn(a, b):
        a.add_(1)
        return b * 2, a.sum()

    compiled = ember.compile(fn, backend=backend)
    separate = (torch.zeros(3), torch.ones(3))
    torch.testing.assert_close(compiled(*separate), fn(torch.zeros(3), torch.ones(3)))
    base, twin = torch.arange(6.0), torch.arange(6.0)
    torch.testing.assert_close(compiled(base[:4], base[2:]), fn(twin[:4], twin[2:]))
    torch.testing.assert_close(base, twin)
