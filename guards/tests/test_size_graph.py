"""guards.size_graph: sympy size expressions as FX nodes, evaluated against Python's values."""

from __future__ import annotations

import math
import operator

import pytest
import sympy
import torch.fx

from guards import (
    FloorDiv,
    SizeExpressionError,
    integer_quotient,
    integer_size_to_graph,
    size_to_graph,
)

s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)


def _compile(expr: sympy.Expr):
    """A function of (s0, s1) computing `expr` through the graph size_to_graph builds."""
    graph = torch.fx.Graph()
    leaves = {s0: graph.placeholder("s0"), s1: graph.placeholder("s1")}
    emitted: list = []

    def emit(fn, a, b):
        emitted.append(fn)
        return graph.call_function(fn, (a, b))

    numerator, denominator = integer_quotient(expr)
    memo: dict = {}
    node = size_to_graph(numerator, emit=emit, leaf=leaves.__getitem__, memo=memo)
    if denominator != 1:
        node = emit(operator.floordiv, node, int(denominator))
    graph.output(node)
    return torch.fx.GraphModule(torch.nn.Module(), graph), emitted


@pytest.mark.parametrize(
    "expr, python",
    [
        (s0 * 5 + s1, lambda a, b: a * 5 + b),
        (FloorDiv(s0 + 2, 3) * s1, lambda a, b: (a + 2) // 3 * b),
        (sympy.Mod(s0, s1), lambda a, b: a % b),
        (sympy.Max(s0, s1) - sympy.Min(s0, 3), lambda a, b: max(a, b) - min(a, 3)),
        (s0**2 * s1, lambda a, b: a**2 * b),
        (s0 * s1 / 4 - sympy.Rational(1, 2), lambda a, b: (a * b - 2) // 4),
    ],
)
def test_integer_sizes_evaluate_like_python(expr, python):
    module, _ = _compile(expr)
    for a, b in [(2, 3), (6, 10), (9, 2), (14, 7)]:
        if expr.has(sympy.Rational(1, 2)) and (a * b - 2) % 4:
            continue  # an exact division: only values where it is exact
        assert module(a, b) == python(a, b)
        assert type(module(a, b)) is int


def test_max_and_min_use_the_guard_free_forms():
    _, emitted = _compile(sympy.Max(s0, s1))
    assert emitted == [torch.sym_max]


def test_a_float_power_stays_a_power():
    module, _ = _compile(s0**0.5)
    assert module(9, 1) == pytest.approx(math.sqrt(9))


def test_equal_subexpressions_share_one_node():
    graph = torch.fx.Graph()
    leaf = {s0: graph.placeholder("s0")}.__getitem__
    memo: dict = {}

    def emit(fn, a, b):
        return graph.call_function(fn, (a, b))

    first = size_to_graph(s0 * 4, emit=emit, leaf=leaf, memo=memo)
    assert size_to_graph(s0 * 4, emit=emit, leaf=leaf, memo=memo) is first


def test_an_expression_without_a_rule_raises():
    with pytest.raises(SizeExpressionError, match="no graph form"):
        size_to_graph(sympy.sin(s0), emit=lambda *a: None, leaf=lambda s: s)


@pytest.mark.parametrize(
    "expr, python",
    [
        # a stride after viewing 198 elements as [1, c, 3, 3], c = s0 // 3 dividing 66
        (
            33 * sympy.Max(1, s1 + 3 - 66 / FloorDiv(s0, 3)),
            lambda a, b: 33 * max(1, b + 3 - 66 // (a // 3)),
        ),
        (sympy.Min(s1, 12 / s0) + 1, lambda a, b: min(b, 12 // a) + 1),
        (FloorDiv(s1 * 6 / s0, 2), lambda a, b: b * 6 // a // 2),
        (sympy.Mod(s1 + 12 / s0, 5), lambda a, b: (b + 12 // a) % 5),
    ],
)
def test_integer_sizes_divide_exactly_inside_max_min_floordiv_and_mod(expr, python):
    # sympy.together leaves a function's operands alone: emitted with `/`, the size was
    # a float, which ATen refused as a stride (`empty_strided`)
    graph = torch.fx.Graph()
    leaves = {s0: graph.placeholder("s0"), s1: graph.placeholder("s1")}

    def emit(fn, a, b):
        return graph.call_function(fn, (a, b))

    graph.output(integer_size_to_graph(expr, emit=emit, leaf=leaves.__getitem__))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    for a, b in [(6, 3), (6, 40), (3, 7)]:  # 12 / s0 and 66 / (s0 // 3) exact
        assert module(a, b) == python(a, b)
        assert type(module(a, b)) is int
