"""Float inputs traced symbolically: one trace serves every value, forward and backward.

A graph as capture hands over a Python float traced symbolically: a 0-d float64
tensor placeholder read with `.item()`, the read's meta["val"] the float's
SymFloat over a guards.ShapeEnv. aot_autograd traces the read as that symbol
(`aten._local_scalar_dense` of the input, arithmetic on it as nodes), so the
compiled graphs take the float as an input; no value is baked in or checked.
"""

from __future__ import annotations

import operator

import pytest
import torch
from torch import fx

from aot_autograd import aot_graph
from aot_autograd.symbolic import float_inputs_of
from guards import FakeTensorMode, LocalSource, ShapeEnv
from guards.sym_node import SymNode

aten = torch.ops.aten


def _float_graph(body, hint: float = 0.5) -> fx.GraphModule:
    """`body(graph, x, s)` over placeholder x (a 4-vector) and float input s (read once)."""
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    symbol = env.create_float_symbol(hint, LocalSource("s"))
    number = torch.SymFloat(SymNode(symbol, env, float, hint))
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = mode.from_real(torch.randn(4))
    s = graph.placeholder("s")
    s.meta["val"] = mode.from_real(torch.tensor(hint, dtype=torch.float64))
    item = graph.call_method("item", (s,))
    item.meta["val"] = number
    graph.output((body(graph, x, item),))
    return fx.GraphModule(torch.nn.Module(), graph)


def _scaled_and_shifted(graph, x, item):
    # x * (2 * s + 1) - s ** 0.5
    twice = graph.call_function(operator.mul, (item, 2))
    factor = graph.call_function(operator.add, (twice, 1))
    root = graph.call_function(operator.pow, (item, 0.5))
    scaled = graph.call_function(operator.mul, (x, factor))
    return graph.call_function(operator.sub, (scaled, root))


def _reference(x, s):
    return x * (2 * s + 1) - s**0.5


def test_float_input_found_by_its_item_read():
    gm = _float_graph(_scaled_and_shifted)
    found = float_inputs_of(gm)
    assert list(found) == [1] and str(found[1]) == "f0"


@pytest.mark.parametrize("training", [True, False], ids=["train", "inference"])
def test_float_input_traced_once_for_every_value(training):
    gm = _float_graph(_scaled_and_shifted)
    graphs = []

    def compiler(graph, example_inputs):
        graphs.append(graph)
        return graph

    x0 = torch.randn(4, requires_grad=training)
    run = aot_graph(gm, [x0, torch.tensor(0.5, dtype=torch.float64)], fw_compiler=compiler)
    compiled_after_first_call = None
    for s in (0.5, 1.5, 2.5, 0.25):
        if s == 1.5:
            compiled_after_first_call = len(graphs)
        x = torch.randn(4, requires_grad=training)
        got = run(x, torch.tensor(s, dtype=torch.float64))[0]
        expected = _reference(x, s)
        torch.testing.assert_close(got, expected)
        if training:
            (grad,) = torch.autograd.grad(got.sum(), x)
            torch.testing.assert_close(grad, torch.full((4,), 2 * s + 1))
    traced = run.aot.graphs["joint" if training else "inference"]
    targets = [node.target for node in traced.graph.nodes]
    assert aten._local_scalar_dense.default in targets
    assert aten.eq.Scalar not in targets  # no value baked in and checked
    assert run.aot.static_compiles == 0
    assert len(graphs) == compiled_after_first_call  # nothing compiled for a new value
