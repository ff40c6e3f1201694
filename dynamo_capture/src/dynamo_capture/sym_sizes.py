"""Symbolic sizes as graph nodes: a SymInt's sympy expression -> FX operator nodes.

    s0 * 5          -> operator.mul(s0, 5)
    FloorDiv(s0, 2) -> operator.floordiv(s0, 2)

The symbols themselves are SymInt placeholders (`symbol_node`); the rules per
expression kind are guards' `SIZE_RULES` (the same aot_autograd uses). An integer
written with a quotient becomes one exact floor division; an expression with no
rule raises Unsupported, so the compile falls back to static sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.fx

from dynamo_capture.errors import Unsupported
from guards import SizeExpressionError, integer_size_to_graph

__all__ = ["emit_size"]

SymbolNode = Callable[[sympy.Symbol], torch.fx.Node]


def _call(graph: torch.fx.Graph, fn: Any, a: Any, b: Any) -> torch.fx.Node:
    """A node `fn(a, b)`; its meta["val"] is `fn` on the arguments' values (SymInts)."""
    node = graph.call_function(fn, (a, b))
    values = [arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg for arg in (a, b)]
    if all(value is not None for value in values):
        node.meta["val"] = fn(*values)
    return node


def emit_size(graph: torch.fx.Graph, expr: sympy.Expr, symbol_node: SymbolNode) -> Any:
    """An FX node (or int) computing integer expression `expr` from the symbols' placeholders."""

    def emit(fn: Any, a: Any, b: Any) -> torch.fx.Node:
        return _call(graph, fn, a, b)

    try:
        node = integer_size_to_graph(expr, emit=emit, leaf=symbol_node)
    except SizeExpressionError as error:
        raise Unsupported(f"a symbolic size cannot become a graph node: {error}") from error
    return node
