"""Symbolic sizes as graph nodes: a SymInt's sympy expression -> FX operator nodes.

    s0 * 5        -> operator.mul(s0, 5)
    FloorDiv(s0, 2) -> operator.floordiv(s0, 2)

The symbols themselves are SymInt placeholders (`symbol_node`); each expression
kind has one rule in `_RULES`. An expression with no rule raises Unsupported,
so the compile falls back to static sizes.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.fx

from dynamo_capture.errors import Unsupported
from guards import FloorDiv

__all__ = ["emit_size"]

SymbolNode = Callable[[sympy.Symbol], torch.fx.Node]


# max / min on SymInts would compare them (a guard); the sym_ forms do not
_GUARD_FREE: dict[Any, Any] = {max: torch.sym_max, min: torch.sym_min}


def _call(graph: torch.fx.Graph, fn: Any, args: tuple[Any, ...]) -> torch.fx.Node:
    """A node `fn(*args)`; its meta["val"] is `fn` on the arguments' values (SymInts)."""
    node = graph.call_function(fn, args)
    values = [arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg for arg in args]
    if all(value is not None for value in values):
        node.meta["val"] = _GUARD_FREE.get(fn, fn)(*values)
    return node


def _fold(graph: torch.fx.Graph, fn: Any, items: list[Any]) -> Any:
    return functools.reduce(lambda a, b: _call(graph, fn, (a, b)), items)


def _add(graph: torch.fx.Graph, args: list[Any]) -> Any:
    return _fold(graph, operator.add, args)


def _mul(graph: torch.fx.Graph, args: list[Any]) -> Any:
    return _fold(graph, operator.mul, args)


def _floordiv(graph: torch.fx.Graph, args: list[Any]) -> Any:
    return _call(graph, operator.floordiv, (args[0], args[1]))


def _mod(graph: torch.fx.Graph, args: list[Any]) -> Any:
    return _call(graph, operator.mod, (args[0], args[1]))


def _pow(graph: torch.fx.Graph, args: list[Any]) -> Any:
    if not isinstance(args[1], int) or args[1] < 0:
        raise Unsupported(f"a symbolic size with the power {args[1]!r}")
    return _call(graph, operator.pow, (args[0], args[1]))


def _max(graph: torch.fx.Graph, args: list[Any]) -> Any:
    return _fold(graph, max, args)


def _min(graph: torch.fx.Graph, args: list[Any]) -> Any:
    return _fold(graph, min, args)


_RULES: dict[type, Callable[[torch.fx.Graph, list[Any]], Any]] = {
    sympy.Add: _add,
    sympy.Mul: _mul,
    FloorDiv: _floordiv,
    sympy.Mod: _mod,
    sympy.Pow: _pow,
    sympy.Max: _max,
    sympy.Min: _min,
}


def emit_size(graph: torch.fx.Graph, expr: sympy.Expr, symbol_node: SymbolNode) -> Any:
    """An FX node (or int) computing integer expression `expr` from the symbols' placeholders."""
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        return symbol_node(expr)
    rule = next((rule for kind, rule in _RULES.items() if isinstance(expr, kind)), None)
    if rule is None:
        raise Unsupported(
            f"a symbolic size {expr} ({type(expr).__name__}) cannot become a graph node"
        )
    return rule(graph, [emit_size(graph, arg, symbol_node) for arg in expr.args])
