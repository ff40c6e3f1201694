"""Symbolic sizes as FX graph nodes: a sympy size expression -> operator calls.

    s0 * 5                     -> operator.mul(s0, 5)
    FloorDiv(s0, 2)            -> operator.floordiv(s0, 2)
    Max(s0, s1)                -> torch.sym_max(s0, s1)   (no comparison, so no guard)
    s0 ** 0.5                  -> operator.pow(s0, 0.5)   (a float of sizes)
    s0*s1/4 - 1/2 (an integer) -> (s0*s1 - 2) // 4        (`integer_quotient`)
    Max(1, s1 + 3 - 66/s0)     -> sym_max(1, (s1*s0 + 3*s0 - 66) // s0)
                                  (`integer_size_to_graph`: inside functions too)

One rule per expression kind (`SIZE_RULES`), shared by every stage that puts
size arithmetic into graphs (capture, aot_autograd). The caller says how a
symbol becomes a node (`leaf`) and how a node is added (`emit(fn, a, b)`, which
also sets its meta["val"]); `memo` lets equal sub-expressions share one node. An
expression kind with no rule raises SizeExpressionError.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import sympy
import torch

from guards.errors import GuardsError
from guards.sym_exprs import FloorDiv

__all__ = [
    "SIZE_RULES",
    "SizeExpressionError",
    "integer_quotient",
    "integer_size_to_graph",
    "size_to_graph",
]

Emit = Callable[[Callable[..., Any], Any, Any], Any]
Rule = Callable[[Emit, list[Any]], Any]


class SizeExpressionError(GuardsError):
    """A size expression has no graph form (the caller compiles with static sizes)."""


def _fold(fn: Callable[..., Any]) -> Rule:
    def rule(emit: Emit, args: list[Any]) -> Any:
        return functools.reduce(lambda a, b: emit(fn, a, b), args)

    return rule


def _binary(fn: Callable[..., Any]) -> Rule:
    def rule(emit: Emit, args: list[Any]) -> Any:
        return emit(fn, args[0], args[1])

    return rule


def _power(emit: Emit, args: list[Any]) -> Any:
    base, exponent = args
    if isinstance(exponent, float):  # a float of sizes: sqrt(s0) arrives as s0 ** 0.5
        return emit(operator.pow, base, exponent)
    if not isinstance(exponent, int):
        raise SizeExpressionError(f"a symbolic size raised to the power {exponent!r}")
    if exponent < 0:  # a division: 1 / base ** -exponent
        divisor = base if exponent == -1 else emit(operator.pow, base, -exponent)
        return emit(operator.truediv, 1.0, divisor)
    return emit(operator.pow, base, exponent)


# sympy expression kind -> rule(emit, operands) -> node
SIZE_RULES: dict[type, Rule] = {
    sympy.Add: _fold(operator.add),
    sympy.Mul: _fold(operator.mul),
    FloorDiv: _binary(operator.floordiv),
    sympy.Mod: _binary(operator.mod),
    sympy.Pow: _power,
    sympy.Max: _fold(torch.sym_max),
    sympy.Min: _fold(torch.sym_min),
}


def integer_quotient(expr: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """An integer size as (numerator, denominator) polynomials; denominator 1 for most.

    Known-exact divisions reach sympy as rational coefficients (`s0*s1/4 - 1/2`) or
    negative powers (`s0/(s0 // 2)`); emitted as they are they would make the size a
    float, so they become one exact floor division: `(s0*s1 - 2) // 4`, `s0 // (s0 // 2)`.
    """
    has_division = any(
        (atom.is_Rational and not atom.is_Integer) for atom in expr.atoms(sympy.Rational)
    ) or any(p.exp.is_negative for p in expr.atoms(sympy.Pow))
    if not has_division:
        return expr, sympy.Integer(1)
    numerator, denominator = sympy.fraction(sympy.together(expr))
    return sympy.expand(numerator), denominator


def integer_size_to_graph(
    expr: sympy.Expr,
    *,
    emit: Emit,
    leaf: Callable[[sympy.Symbol], Any],
    memo: dict[sympy.Expr, Any] | None = None,
) -> Any:
    """A node (or int) computing integer expression `expr`, every known-exact division in
    it one floor division (`integer_quotient`), at the top and inside the operands of
    Max, Min, FloorDiv and Mod (integers too).

    # NOTE: a division inside a function is out of `sympy.together`'s reach: emitted as
    # `/`, `Max(1, s1 + 3 - 66/s0)` (a stride after `x.view(...)` of a size that
    # `s0` divides) computed a float, and ATen refused it as a size or stride.
    """
    return _integer_node(expr, emit, leaf, memo)


def _integer_node(expr: sympy.Expr, emit: Emit, leaf: Any, memo: Any) -> Any:
    numerator, denominator = integer_quotient(expr)
    if denominator != 1:
        return emit(
            operator.floordiv,
            _integer_node(numerator, emit, leaf, memo),
            _integer_node(denominator, emit, leaf, memo),
        )
    return size_to_graph(expr, emit=emit, leaf=leaf, memo=memo, integer=True)


_INTEGER_FUNCTIONS = (sympy.Max, sympy.Min, FloorDiv, sympy.Mod)


def size_to_graph(
    expr: sympy.Expr,
    *,
    emit: Emit,
    leaf: Callable[[sympy.Symbol], Any],
    memo: dict[sympy.Expr, Any] | None = None,
    integer: bool = False,
) -> Any:
    """A node (or number) computing `expr`: numbers as Python numbers, symbols by `leaf`.

    `integer`: `expr` is an integer with no division at its top (see
    integer_size_to_graph); the operands of its integer functions are emitted as
    integers.
    """
    if expr.is_Integer:
        return int(expr)
    if expr.is_Number:
        return float(expr)
    if memo is not None and expr in memo:
        return memo[expr]
    if expr.is_Symbol:
        node = leaf(expr)
    else:
        rule = next((r for kind, r in SIZE_RULES.items() if isinstance(expr, kind)), None)
        if rule is None:
            raise SizeExpressionError(
                f"the symbolic size {expr} ({type(expr).__name__}) has no graph form; add a "
                "rule to guards.size_graph.SIZE_RULES, or compile with static sizes"
            )
        if integer and isinstance(expr, _INTEGER_FUNCTIONS):
            operands = [_integer_node(arg, emit, leaf, memo) for arg in expr.args]
        else:
            operands = [
                size_to_graph(arg, emit=emit, leaf=leaf, memo=memo, integer=integer)
                for arg in expr.args
            ]
        node = rule(emit, operands)
    if memo is not None:
        memo[expr] = node
    return node
