"""Residue unrolling: a vector loop indexing by `v // s` runs over the quotient, the `s`
residues of `v` unrolled in its body.

A gather whose index divides the loop variable (max pooling's backward reads the
indices and gradients of window `(v + padding) // stride` for input column `v`) loads
the same element for `s` neighbouring iterations: gcc vectorizes such a loop, if at
all, with gathers, several times slower than plain loads. With `v = s * q + r`,

    for (v = 0; v < N; ++v) body(v)

becomes, for N a multiple of s,

    for (q = 0; q < N / s; ++q) { body(s*q + 0) ... body(s*q + s-1) }

where `FloorDiv(s*q + r + k, s)` is `q + (r + k) // s` and `IndexMod(s*q + r + k, s)`
is `(r + k) % s` (k a non-negative integer): each residue's loads step by 1 with q and
its stores, s apart, together fill whole vectors (gcc interleaves them). The loop
counter keeps the name of `v` (it is the loop's variable for every other rule of the
code generator); only the printed expressions change.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from inductor_codegen.indexing import FloorDiv, IndexMod
from inductor_codegen.ir import IndexValue, Load, Op

__all__ = ["ResidueUnroll", "residue_unroll"]

# Residues unrolled at most (the body is printed this many times).
MAX_RESIDUES = 4


@dataclass(frozen=True, slots=True)
class ResidueUnroll:
    """A loop over `var` (`extent` iterations) run over `var // divisor`."""

    var: sympy.Symbol
    divisor: int
    extent: int

    def index(self, index, residue: int):
        """`index` at `var = divisor * var + residue`, its divisions by `divisor` folded."""
        s, q = self.divisor, self.var

        def fold(function):
            offset = sympy.expand(function.args[0] - s * q)  # r + k, an integer >= 0
            quotient, remainder = divmod(int(offset), s)
            return q + quotient if isinstance(function, FloorDiv) else sympy.Integer(remainder)

        index = sympy.sympify(index).xreplace({q: s * q + residue})
        index = index.replace(
            lambda e: isinstance(e, (FloorDiv, IndexMod)) and q in e.free_symbols, fold
        )
        return sympy.expand(index)

    def rewrite(self, expr, residue: int, memo: dict | None = None):
        """The expression `expr` with every index at the residue `residue`."""
        memo = {} if memo is None else memo
        hit = memo.get(id(expr))
        if hit is not None and hit[0] is expr:
            return hit[1]
        if isinstance(expr, Load):
            result = Load(expr.buffer, self.index(expr.index, residue), expr.dtype)
        elif isinstance(expr, IndexValue):
            result = IndexValue(self.index(expr.index, residue), expr.dtype)
        elif isinstance(expr, Op):
            args = tuple(self.rewrite(a, residue, memo) for a in expr.args)
            result = Op(expr.name, args, expr.dtype) if args != expr.args else expr
        else:
            result = expr
        memo[id(expr)] = (expr, result)
        return result


def residue_unroll(indices, var: sympy.Symbol, extent) -> ResidueUnroll | None:
    """How to unroll a loop over `var` (`extent` iterations) whose expressions index by
    `indices`, or None: every division of `var` must be `(var + k) // s` or
    `(var + k) % s` with one divisor `s` (2 to MAX_RESIDUES) and integers k >= 0, and
    `extent` a multiple of s."""
    divisors = set()
    for index in indices:
        for function in sympy.sympify(index).atoms(FloorDiv, IndexMod):
            if var not in function.free_symbols:
                continue
            a, b = function.args
            offset = sympy.expand(a - var)
            if not (b.is_Integer and offset.is_Integer and int(offset) >= 0):
                return None
            divisors.add(int(b))
    if len(divisors) != 1:
        return None
    (divisor,) = divisors
    if not (2 <= divisor <= MAX_RESIDUES and extent.is_Integer):
        return None
    if int(extent) < divisor or int(extent) % divisor:
        return None
    return ResidueUnroll(var, divisor, int(extent))


def expr_indices(expr) -> list:
    """Every index `expr` loads at or computes."""
    found, stack, seen = [], [expr], set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (Load, IndexValue)):
            found.append(e.index)
        elif isinstance(e, Op):
            stack.extend(e.args)
    return found
