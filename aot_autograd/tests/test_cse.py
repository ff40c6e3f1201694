"""Repeated deterministic calls in a traced graph are computed once."""

from __future__ import annotations

import torch

from aot_autograd import aot_function

aten = torch.ops.aten


def _compiled(fn):
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm

    return aot_function(fn, fw_compiler=record), graphs


def _count(gm, target) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is target)


def test_autocast_style_casts_of_one_value_become_one():
    def fn(x, w1, w2, w3):
        h = x.sin()
        # as autocast casts a shared input once per linear
        return (
            h.to(torch.bfloat16) @ w1.to(torch.bfloat16),
            h.to(torch.bfloat16) @ w2.to(torch.bfloat16),
            h.to(torch.bfloat16) @ w3.to(torch.bfloat16),
        )

    compiled, graphs = _compiled(fn)
    args = [torch.randn(4, 8)] + [torch.randn(8, 8) for _ in range(3)]
    got = compiled(*args)
    torch.testing.assert_close(got, fn(*args))
    (gm,) = graphs
    casts = [n for n in gm.graph.nodes if n.target is aten._to_copy.default]
    assert len(casts) == 4  # h once, each weight once
    assert _count(gm, aten.sin.default) == 1


def test_training_graphs_keep_eager_grads():
    def fn(x, w):
        a = (x @ w).tanh()
        b = (x @ w).tanh()
        return (a * b + a).sum()

    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    compiled, graphs = _compiled(fn)
    compiled(x, w).backward()
    got = w.grad.clone()
    w.grad = None
    fn(x, w).backward()
    torch.testing.assert_close(got, w.grad)
    assert _count(graphs[0], aten.mm.default) == 1


def test_repeated_outputs_stay_distinct_tensors():
    def fn(x):
        return x.sin(), x.sin()

    compiled, graphs = _compiled(fn)
    a, b = compiled(torch.randn(3))
    assert a is not b and a.data_ptr() != b.data_ptr()
    a.add_(1)
    torch.testing.assert_close(a - 1, b)


def test_random_draws_are_not_merged():
    def fn(x):
        return torch.rand_like(x) - torch.rand_like(x)

    compiled, graphs = _compiled(fn)
    out = compiled(torch.randn(1000))
    assert out.abs().max() > 0
    assert sum(1 for n in graphs[0].graph.nodes if "rand" in str(n.target)) == 2


def _written_output_then_backward(fn, compiled):
    """Run fn, write into its first output after the call, then backward the second."""
    x = torch.randn(4, requires_grad=True)
    a, c = compiled(x)
    with torch.no_grad():
        a.add_(1)
    c.sum().backward()
    return x.grad


def test_output_written_after_call_does_not_refuse_a_repeats_backward():
    # `a` and `b` are one value; merged, `sin`'s backward would save the output `a`,
    # and the write into `a` after the call would refuse a backward eager runs
    def fn(x):
        a = x.exp()
        b = x.exp()
        return a, b.sin()

    compiled, graphs = _compiled(fn)
    torch.manual_seed(0)
    got = _written_output_then_backward(fn, compiled)
    torch.manual_seed(0)
    expected = _written_output_then_backward(fn, fn)
    torch.testing.assert_close(got, expected)
    assert _count(graphs[0], aten.exp.default) == 2


def test_view_of_an_output_keeps_its_base_unmerged():
    def fn(x):
        a = x.clone()
        b = x.clone()
        return a.view(2, 2), b * b

    compiled, graphs = _compiled(fn)
    torch.manual_seed(0)
    got = _written_output_then_backward(fn, compiled)
    torch.manual_seed(0)
    expected = _written_output_then_backward(fn, fn)
    torch.testing.assert_close(got, expected)


def test_repeats_only_used_inside_the_graph_are_still_merged():
    def fn(x):
        a = x.exp()
        b = x.exp()
        return a.sin() + b.cos()

    compiled, graphs = _compiled(fn)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), fn(x))
    assert _count(graphs[0], aten.exp.default) == 1
