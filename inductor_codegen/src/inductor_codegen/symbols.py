"""Size symbols of a graph compiled for dynamic shapes: where each is read, which kernel takes it.

A graph traced with symbolic sizes describes every size as a sympy expression
over symbols (`s0`, `s1`, ...). The generated wrapper reads each symbol once per
call from the inputs (`bind_symbols`): from a SymInt input that is exactly the
symbol, or from a tensor input's size or stride (`x.size(0)`), solving a linear
size such as `2*s0 + 1` when that is the only place the symbol appears. Kernels
take the symbols their loop bounds and index math use as `int64_t` arguments
(`kernel_size_symbols`), so one compiled kernel serves every size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import sympy
import torch

from inductor_codegen.errors import DynamicShapeError
from inductor_codegen.indexing import GuardedFacts
from inductor_codegen.ir import IndexValue, InputBuffer, Layout, Load, Op
from inductor_codegen.scheduler import FusedKernel, LoopGroup, node_body

__all__ = [
    "SymbolBinding",
    "bind_symbols",
    "expr_symbols",
    "guarded_facts_of",
    "check_bound",
    "kernel_size_symbols",
    "layout_symbols",
    "shape_env_of",
    "shape_env_state",
]

# Loop variables of generated kernels (x0, y1, r2, ...): not size symbols.
_LOOP_VARIABLE = re.compile(r"^[xyr]\d+$")


@dataclass(frozen=True, slots=True)
class SymbolBinding:
    """Size symbol `symbol` is `source`, a Python expression over the wrapper's inputs."""

    symbol: sympy.Symbol
    source: str

    @property
    def line(self) -> str:
        return f"{self.symbol.name} = {self.source}"


def _size_symbols(expr) -> set[sympy.Symbol]:
    symbols = getattr(expr, "free_symbols", set())
    return {s for s in symbols if not _LOOP_VARIABLE.match(s.name)}


def expr_symbols(expr) -> set[sympy.Symbol]:
    """The size symbols a scalar IR expression reads (in load indices and index values)."""
    found: set[sympy.Symbol] = set()
    stack = [expr]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (Load, IndexValue)):
            found |= _size_symbols(e.index)
        elif isinstance(e, Op):
            stack.extend(e.args)
    return found


def layout_symbols(layout: Layout | None) -> set[str]:
    """Names of the size symbols in a layout's sizes, strides and offset."""
    if layout is None:
        return set()
    found = _size_symbols(layout.offset)
    for value in (*layout.size, *layout.stride):
        found |= _size_symbols(value)
    return {s.name for s in found}


def kernel_size_symbols(kernel: FusedKernel, buffers: dict) -> tuple[str, ...]:
    """Names of the size symbols `kernel` uses (loop bounds, indices), in symbol order."""
    found: set[sympy.Symbol] = set()
    for extent in kernel.outer:
        found |= _size_symbols(extent)
    for item in kernel.items:
        if isinstance(item, LoopGroup):
            for extent in item.ranges:
                found |= _size_symbols(extent)
    for name in kernel.nodes:
        value, store, inner = node_body(buffers[name], kernel.outer, "y")
        found |= expr_symbols(value) | _size_symbols(store)
        for extent in inner:
            found |= _size_symbols(extent)
    return tuple(s.name for s in sorted(found, key=_symbol_order))


def _symbol_order(symbol: sympy.Symbol):
    return _name_order(symbol.name)


def _name_order(name: str):
    match = re.match(r"^([A-Za-z_]+)(\d+)$", name)
    return (match.group(1), int(match.group(2))) if match else (name, 0)


def bind_symbols(
    inputs: list, symint_inputs: dict, float_inputs: dict | None = None
) -> dict[str, SymbolBinding]:
    """Where the wrapper reads each size symbol of the graph's inputs.

    `inputs` are the graph's inputs in order (InputBuffer for tensors);
    `symint_inputs` maps a SymInt input's name to its expression; `float_inputs`
    maps a float input's symbol to the Python expression reading it (`f0 =
    scale.item()`, a 0-d tensor input). A symbol that appears only inside non-linear sizes has no
    binding (the caller raises DynamicShapeError when it is needed).
    """
    bindings: dict[str, SymbolBinding] = {}
    for symbol, source in (float_inputs or {}).items():
        bindings[symbol] = SymbolBinding(sympy.Symbol(symbol), source)
    places: list[tuple[sympy.Expr, str]] = []
    for name, expr in symint_inputs.items():
        places.append((expr, name))
    for item in inputs:
        if not isinstance(item, InputBuffer):
            continue
        for d, size in enumerate(item.layout.size):
            places.append((size, f"{item.name}.size({d})"))
        for d, stride in enumerate(item.layout.stride):
            places.append((stride, f"{item.name}.stride({d})"))
    places = [(sympy.sympify(expr), source) for expr, source in places]
    for expr, source in places:
        if expr.is_Symbol and expr.name not in bindings:
            bindings[expr.name] = SymbolBinding(expr, source)
    for expr, source in places:
        symbols = _size_symbols(expr)
        if len(symbols) != 1:
            continue
        (symbol,) = symbols
        if symbol.name in bindings:
            continue
        solved = _solve_linear(expr, symbol, source)
        if solved is not None:
            bindings[symbol.name] = SymbolBinding(symbol, solved)
    return bindings


def _solve_linear(expr: sympy.Expr, symbol: sympy.Symbol, source: str) -> str | None:
    """`symbol` from `source` holding `a*symbol + b` (integers a > 0, b), or None."""
    poly = sympy.Poly(expr, symbol) if expr.is_polynomial(symbol) else None
    if poly is None or poly.degree() != 1:
        return None
    a, b = poly.all_coeffs()
    if not (a.is_Integer and b.is_Integer) or int(a) <= 0:
        return None
    text = source if int(b) == 0 else f"({source} - {int(b)})"
    return text if int(a) == 1 else f"{text} // {int(a)}"


def shape_env_of(values) -> object | None:
    """The shape environment behind the first symbolic size among `values` (None if static)."""
    for value in values:
        if isinstance(value, torch.SymInt):
            return value.node.shape_env
        if isinstance(value, torch.Tensor):
            for size in (*value.shape, *value.stride()):
                if isinstance(size, torch.SymInt):
                    return size.node.shape_env
    return None


def guarded_facts_of(env) -> GuardedFacts:
    """What `env`'s guards say of its symbols beyond sizes being sizes (see
    `indexing.GuardedFacts`): the finite lower ends of the ranges of symbols not known
    positive, and each linear relation between symbols (`s3 >= s2`) as an expression
    kept >= 0. Nothing for torch's ShapeEnv and for static graphs."""
    ranges = getattr(env, "ranges", None)
    records = getattr(env, "records", None)
    if not callable(ranges) or records is None or callable(records):
        return GuardedFacts()
    bounds = {}
    for symbol, value_range in ranges().items():
        lo = value_range.lo
        if not symbol.is_positive and lo not in (-math.inf, math.inf) and lo == int(lo):
            bounds[symbol] = int(lo)
    nonnegative = []
    for record in records:
        difference = _nonnegative_difference(record.condition)
        if difference is not None:
            nonnegative.append(difference)
    return GuardedFacts(bounds, tuple(nonnegative))


def _nonnegative_difference(condition) -> sympy.Expr | None:
    """`condition` (`a >= b`, `a > b`, `a <= b`, `a < b` over integers, linear) as an
    expression that is >= 0 exactly where it holds; None for any other condition."""
    if isinstance(condition, sympy.Ge):
        difference = condition.lhs - condition.rhs
    elif isinstance(condition, sympy.Gt):
        difference = condition.lhs - condition.rhs - 1
    elif isinstance(condition, sympy.Le):
        difference = condition.rhs - condition.lhs
    elif isinstance(condition, sympy.Lt):
        difference = condition.rhs - condition.lhs - 1
    else:
        return None
    difference = sympy.expand(difference)
    symbols = difference.free_symbols
    if not symbols or not all(s.is_integer for s in symbols):
        return None
    if (
        not difference.is_polynomial(*symbols)
        or sympy.Poly(difference, *symbols).total_degree() > 1
    ):
        return None
    return difference


def shape_env_state(env) -> tuple:
    """What grows when a size is decided by its example value: guards and replacements.

    (guards' ShapeEnv: `records` and `version`; torch's: `guards` and `replacements`.)
    """
    if env is None:
        return ()
    records = getattr(env, "records", None)
    if records is not None and not callable(records):
        return (len(records), getattr(env, "version", 0))
    return (len(getattr(env, "guards", ())), len(getattr(env, "replacements", {})))


def check_bound(needed: set[str], bindings: dict, where: str) -> None:
    """DynamicShapeError naming the first symbol in `needed` that no input gives."""
    missing = sorted((s for s in needed if s not in bindings), key=_name_order)
    if missing:
        raise DynamicShapeError(
            f"{where} uses size symbol {missing[0]}, which no input size, stride or SymInt "
            "input gives directly; pass it as a SymInt input or compile with static sizes"
        )
