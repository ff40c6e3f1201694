"""A call that must run eagerly (a disabled function, module or method; torch.autograd.grad)
is a cut at the call itself: its arguments are computed in the graph before, its result
handed to the graph after, as torch.compile does; in frames with free variables too.
A slice of a Sequential or ModuleList is a new container of the submodules read."""

from __future__ import annotations

import torch
from torch import nn

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def _compiled(fn):
    backend = CountingBackend()
    return dynamo_capture.optimize(fn, backend=backend), backend


def _closure_with_disabled_call():
    count = 0
    scale = 3.0

    @torch.compiler.disable
    def helper(a):
        return a * 2

    def fn(x):
        nonlocal count
        count += 1
        y = helper(x.sin()) * scale
        count += 10
        return y.cos() + count

    return fn


def test_disabled_call_in_a_closure_cuts_at_the_call():
    eager, (compiled, backend) = (
        _closure_with_disabled_call(),
        _compiled(_closure_with_disabled_call()),
    )
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), eager(x))
    # the sine is computed in the graph before the call, the cosine in the one after
    assert backend.frame_count == 2
    targets = [str(node.target) for gm in backend.graphs for node in gm.graph.nodes]
    assert "sin" in targets and "cos" in targets
    for _ in range(2):  # the counter read after the cut changes each call
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), eager(x))


def test_free_variables_written_after_a_cut_reach_their_cells():
    fn = _closure_with_disabled_call()
    compiled, _ = _compiled(fn)
    compiled(torch.randn(4))
    compiled(torch.randn(4))
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__, strict=True))
    assert cells["count"].cell_contents == 22


def test_disabled_module_and_method_cut_at_their_call():
    torch.manual_seed(0)
    linear = nn.Linear(4, 4)
    disabled = torch.compiler.disable(linear)

    class Model(nn.Module):
        def forward(self, x):
            return self.helper(x.sin()).cos()

        @torch.compiler.disable
        def helper(self, a):
            return a * 2

    model = Model()

    def fn(x):
        return disabled(x.relu()) + model(x)

    compiled, backend = _compiled(fn)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(x), fn(x))
    assert all(
        node.target is not torch._C._nn.linear for g in backend.graphs for node in g.graph.nodes
    )
    assert backend.frame_count == 4  # relu | (add) ... forward: sin | cos


def test_autograd_grad_breaks_the_graph_at_the_call():
    def fn(x):
        y = x.pow(3).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        return g.sum()

    compiled, backend = _compiled(fn)
    x = torch.randn(4, requires_grad=True)
    got, expected = compiled(x), fn(x)
    torch.testing.assert_close(got, expected)
    (got_grad,) = torch.autograd.grad(got, x)
    (expected_grad,) = torch.autograd.grad(expected, x)
    torch.testing.assert_close(got_grad, expected_grad)
    assert backend.frame_count == 2
    assert all(
        node.target is not torch.autograd.grad for g in backend.graphs for node in g.graph.nodes
    )


def test_sequential_slice_is_called_in_the_graph():
    torch.manual_seed(0)
    layers = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())

    def fn(x):
        return layers[1:3](x) + layers[::2](x)

    compiled, backend = _compiled(fn)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.frame_count == 1
    with torch.no_grad():
        layers[2].weight.mul_(2)  # the slice's submodules are the layers themselves
    torch.testing.assert_close(compiled(x), fn(x))


def test_module_list_slice_is_a_module_list():
    torch.manual_seed(0)
    blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def fn(x):
        tail = blocks[1:]
        return isinstance(tail, nn.ModuleList), len(tail), tail[1](x), [m(x) for m in tail]

    compiled, _ = _compiled(fn)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), fn(x))


def test_a_returned_sequential_slice_is_new_each_call():
    torch.manual_seed(0)
    layers = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def fn(x):
        return x + 1, layers[1:]

    compiled, _ = _compiled(fn)
    x = torch.randn(2, 4)
    first, second = compiled(x)[1], compiled(x)[1]
    assert first is not second and isinstance(first, nn.Sequential)
    assert first[0] is layers[1]
