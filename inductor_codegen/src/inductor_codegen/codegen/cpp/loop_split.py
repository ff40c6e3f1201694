"""Index-set splitting: a vector loop whose masked values switch at known positions
runs as one loop per piece, each with its masks decided.

A concatenation along the innermost dim loads `cond ? a[..] : (cond2 ? b[..] : c[..])`
where each condition compares the loop variable with where a piece starts. A load
inside a branch cannot be if-converted (it may read out of bounds when not taken),
so gcc leaves such a loop scalar. When every condition is `v < T` or `v >= T` for
the loop variable `v` and thresholds `T` whose order is known (they differ by
integer constants), the loop

    for (v = 0; v < N; ++v) body

becomes, with `b_i = clamp(T_i, 0, N)` in increasing order,

    for (v = 0; v < b_1; ++v) body[all conditions as below b_1]
    for (v = b_1; v < b_2; ++v) body[...]
    ...
    for (v = b_k; v < N; ++v) body[all conditions as at or above b_k]

Each piece's conditions are constants, its selects fold away and its loads are
unconditional. The iterations run in the same order as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch

from inductor_codegen.ir import Constant, IndexValue, Op

__all__ = ["LoopSplit", "loop_split", "substitute"]

# More pieces than this is code bloat for little gain: the loop stays whole.
MAX_BOUNDARIES = 8
_MIRRORED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


@dataclass(frozen=True, slots=True)
class LoopSplit:
    """Where a loop over `var` is split (`thresholds`, increasing; each a sympy expression
    free of `var`) and, for each condition, (index of its threshold, true below it)."""

    var: sympy.Symbol
    thresholds: tuple[sympy.Expr, ...]
    conditions: tuple[tuple[Op, int, bool], ...]

    def piece_values(self, piece: int) -> dict[Op, Constant]:
        """The value of each condition over piece `piece` (0 .. len(thresholds))."""
        return {
            cond: Constant(below == (piece <= k), torch.bool) for cond, k, below in self.conditions
        }


def loop_split(values, var: sympy.Symbol) -> LoopSplit | None:
    """How to split a loop over `var` computing `values` so that the conditions of their
    masked selects are constant in each piece, or None (nothing to gain, or unsure)."""
    found: dict[Op, tuple[sympy.Expr, bool]] = {}
    for value in values:
        for cond in _mask_conditions(value):
            if cond not in found:
                decided = _threshold(cond, var)
                if decided is not None:
                    found[cond] = decided
    if not found:
        return None
    reference = next(iter(found.values()))[0]
    offsets: dict[sympy.Expr, sympy.Integer] = {}
    for threshold, _ in found.values():
        offset = sympy.expand(threshold - reference)
        if offset.is_Integer:
            offsets[threshold] = offset
    if len(offsets) > MAX_BOUNDARIES:
        return None
    thresholds = tuple(sorted(offsets, key=lambda t: int(offsets[t])))
    conditions = tuple(
        (cond, thresholds.index(threshold), below)
        for cond, (threshold, below) in found.items()
        if threshold in offsets
    )
    return LoopSplit(var, thresholds, conditions)


def _mask_conditions(expr):
    """The comparisons that decide masked selects in `expr` (through logical_and)."""
    seen: set[int] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if not isinstance(e, Op) or id(e) in seen:
            continue
        seen.add(id(e))
        if e.name == "masked":
            conds = [e.args[0]]
            while conds:
                c = conds.pop()
                if isinstance(c, Op) and c.name == "logical_and":
                    conds.extend(c.args)
                elif isinstance(c, Op) and c.name in _MIRRORED:
                    yield c
        stack.extend(e.args)


def _side(expr) -> sympy.Expr | None:
    """An int64 comparison operand as an index expression, or None."""
    if isinstance(expr, IndexValue) and expr.dtype == torch.int64:
        return sympy.sympify(expr.index)
    if (
        isinstance(expr, Constant)
        and expr.dtype == torch.int64
        and not isinstance(expr.value, bool)
        and isinstance(expr.value, int)
    ):
        return sympy.Integer(expr.value)
    return None


def _threshold(cond: Op, var: sympy.Symbol) -> tuple[sympy.Expr, bool] | None:
    """(T, below) with `cond` equal to `var < T` (below) or `var >= T` (not below) for
    every integer `var`, or None when `cond` is not such a comparison."""
    left, right = (_side(a) for a in cond.args)
    if left is None or right is None:
        return None
    name = cond.name
    if var in right.free_symbols:
        left, right, name = right, left, _MIRRORED[name]
    if var in right.free_symbols or var not in left.free_symbols:
        return None
    slope = sympy.expand(left).coeff(var)
    rest = sympy.expand(left - slope * var)
    if slope not in (1, -1) or var in rest.free_symbols:
        return None
    # `left < bound` with integers (le, gt: the next integer up)
    bound = right + 1 if name in ("le", "gt") else right
    below = name in ("lt", "le")
    if slope == 1:  # var + rest < bound  <=>  var < bound - rest
        return sympy.expand(bound - rest), below
    # -var + rest < bound  <=>  var >= rest - bound + 1
    return sympy.expand(rest - bound + 1), not below


def substitute(expr, known: dict, memo: dict | None = None):
    """`expr` with the conditions in `known` replaced by their constants, masked selects
    and logical ops on constants folded."""
    memo = {} if memo is None else memo
    if not isinstance(expr, Op):
        return expr
    hit = memo.get(id(expr))
    if hit is not None and hit[0] is expr:
        return hit[1]
    if expr.name in _MIRRORED and expr in known:
        result = known[expr]
    else:
        args = tuple(substitute(a, known, memo) for a in expr.args)
        result = _fold(Op(expr.name, args, expr.dtype)) if args != expr.args else expr
    memo[id(expr)] = (expr, result)
    return result


def _fold(expr: Op):
    args = expr.args
    decided = [a.value for a in args if isinstance(a, Constant) and a.dtype == torch.bool]
    if expr.name == "masked" and isinstance(args[0], Constant):
        chosen = args[1] if args[0].value else args[2]
        return chosen if chosen.dtype == expr.dtype else Op("to_dtype", (chosen,), expr.dtype)
    if expr.name in ("logical_and", "logical_or") and decided and expr.dtype == torch.bool:
        absorbing = expr.name == "logical_or"
        if any(bool(v) == absorbing for v in decided):
            return Constant(absorbing, torch.bool)
        rest = [a for a in args if not isinstance(a, Constant)]
        if not rest:
            return Constant(not absorbing, torch.bool)
        if len(rest) == 1 and rest[0].dtype == torch.bool:
            return rest[0]
    return expr
