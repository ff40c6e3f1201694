"""Symbolic sizes: SymInts as graph nodes, and the shape assumptions a trace adds.

A graph captured with dynamic shapes arrives with fakes whose sizes are
`torch.SymInt`s over the symbols of one `guards.ShapeEnv`, and with SymInt
placeholders for the symbols themselves. Tracing it again at the ATen level
keeps those sizes symbolic:

- `SizeNodes` turns each SymInt an ATen op takes (`view(x, [s0 * 4])`) into FX
  nodes computing it from the SymInt placeholders (`operator.mul(s0, 4)`), one
  rule per sympy expression kind (guards' `SIZE_RULES`); a symbol with no SymInt
  placeholder is read from a tensor input's size (`aten.sym_size.int`).
- `ShapeSnapshot` records what the ShapeEnv assumed before the trace; the
  conditions the trace added afterwards (a size compared with another, a range
  narrowed, two symbols found equal) become `ShapeAssumptions`, checked at every
  call on the values the call binds to the symbols (`SymbolSource`). A call that
  breaks one runs a graph traced for its static sizes instead.

    >>> snapshot = ShapeSnapshot.of(env)
    >>> ...trace...
    >>> assumptions = ShapeAssumptions.since(snapshot, symbol_sources(example_inputs))
    >>> assumptions.hold(args)
    True
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch import fx

from aot_autograd.errors import SymbolicShapeError
from guards import (
    SIZE_RULES,
    FloorDiv,
    SizeExpressionError,
    integer_size_to_graph,
    size_to_graph,
)

__all__ = [
    "SIZE_RULES",
    "ShapeAssumptions",
    "ShapeSnapshot",
    "SizeNodes",
    "SymbolSource",
    "concrete_hint",
    "expression_of",
    "expression_text",
    "float_inputs_of",
    "is_symbolic",
    "shape_env_of",
    "symbol_sources",
]

aten = torch.ops.aten
_SYMBOLIC_SCALARS = (torch.SymInt, torch.SymFloat, torch.SymBool)


# -- what is symbolic ---------------------------------------------------------------------------


def _symbolic_int(value: Any) -> bool:
    return isinstance(value, torch.SymInt) and value.node.maybe_as_int() is None


def is_symbolic(value: Any) -> bool:
    """Whether `value` (a tree of values) holds a SymInt or a tensor of symbolic size."""
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, _SYMBOLIC_SCALARS):
            return True
        if isinstance(leaf, torch.Tensor):
            if any(_symbolic_int(d) for d in (*leaf.shape, *leaf.stride())):
                return True
    return False


def float_inputs_of(gm: fx.GraphModule) -> dict[int, torch.SymFloat]:
    """Placeholder index -> symbolic value, for each Python float input of `gm`.

    Capture passes a float input traced symbolically as a 0-d floating tensor that the
    graph reads with `.item()` (`aten._local_scalar_dense` once traced), the read's
    meta["val"] being the input's SymFloat: a symbol of the ShapeEnv, or a constant
    where capture specialized it and guards its value.

        item = scale.item();  mul = x * item
    """
    found: dict[int, torch.SymFloat] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for index, node in enumerate(placeholders):
        example = node.meta.get("val")
        if not isinstance(example, torch.Tensor) or example.dim() or example.requires_grad:
            continue
        if not example.is_floating_point():
            continue
        for user in node.users:
            value = user.meta.get("val")
            reads = (user.op == "call_method" and user.target == "item") or (
                user.op == "call_function" and user.target is aten._local_scalar_dense.default
            )
            if not reads or not isinstance(value, torch.SymFloat):
                continue
            if value.node.expr.is_Symbol or value.node.maybe_as_float() is not None:
                found[index] = value
                break
    return found


def shape_env_of(values: Sequence[Any]) -> Any:
    """The ShapeEnv of the first symbolic size in `values` (None when all are static)."""
    for leaf in pytree.tree_leaves(list(values)):
        if isinstance(leaf, _SYMBOLIC_SCALARS):
            return leaf.node.shape_env
        if isinstance(leaf, torch.Tensor):
            for d in (*leaf.shape, *leaf.stride()):
                if _symbolic_int(d):
                    return d.node.shape_env
    return None


def concrete_hint(value: Any) -> int:
    """The value of an int or SymInt at the example inputs, recording no guard."""
    if not isinstance(value, torch.SymInt):
        return int(value)
    node = value.node
    constant = node.maybe_as_int()
    if constant is not None:
        return constant
    if node.hint is not None:
        return int(node.hint)
    return int(node.shape_env.hint_of(node.expr))


# -- SymInts as graph nodes ---------------------------------------------------------------------


class SizeNodes:
    """The FX nodes computing symbolic sizes in one graph (mutates the graph it is given).

    `bind(node, value)` tells it the symbols a placeholder provides: a SymInt
    placeholder its own symbol, a tensor placeholder its sizes and strides (read
    with `aten.sym_size.int` / `aten.sym_stride.int` only when no SymInt
    placeholder provides the symbol). `node_of(symint)` returns an int for a
    constant, else the node computing it, emitting what is missing at the end of
    the graph; equal expressions share one node.
    """

    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self._nodes: dict[sympy.Expr, fx.Node] = {}
        self._reads: dict[sympy.Expr, tuple[Any, fx.Node, int, torch.SymInt]] = {}

    def bind(self, node: fx.Node, value: Any) -> None:
        """Symbols that placeholder `node`, holding example `value`, provides."""
        if isinstance(value, torch.SymInt) and _symbolic_int(value):
            expr = value.node.expr
            if expr.is_Symbol:
                self._nodes.setdefault(expr, node)
        elif isinstance(value, torch.Tensor):
            for op, sizes in (
                (aten.sym_size.int, value.shape),
                (aten.sym_stride.int, value.stride()),
            ):
                for dim, size in enumerate(sizes):
                    if _symbolic_int(size) and size.node.expr.is_Symbol:
                        self._reads.setdefault(size.node.expr, (op, node, dim, size))

    def bind_number(self, node: fx.Node, value: torch.SymFloat) -> None:
        """`node` reads symbolic float input `value` (a float input's `.item()`)."""
        self._nodes.setdefault(value.node.expr, node)

    def node_of(self, value: Any) -> Any:
        """A number for a constant SymInt / SymFloat, else the node computing it from the inputs."""
        if isinstance(value, torch.SymBool):
            raise SymbolicShapeError(
                f"a symbolic bool ({value}) is an operator argument; aot_autograd keeps sizes "
                "and numbers computed from them symbolic, not conditions: compile with "
                "static sizes"
            )
        if isinstance(value, torch.SymFloat):
            constant = value.node.maybe_as_float()
            if constant is not None:
                return constant
            node = self._emit_expr(value.node.expr)
            if isinstance(node, int) or isinstance(node.meta["val"], torch.SymInt):
                return self._emit_float(node)
            return node
        constant = value.node.maybe_as_int()
        if constant is not None:
            return constant
        try:
            return integer_size_to_graph(
                value.node.expr, emit=self._emit, leaf=self._read, memo=self._nodes
            )
        except SizeExpressionError as error:
            raise SymbolicShapeError(f"{error}; compile with static sizes") from error

    def _emit_float(self, node: Any) -> Any:
        if isinstance(node, int):
            return float(node)
        converted = self.graph.call_function(torch.sym_float, (node,))
        converted.meta["val"] = torch.sym_float(node.meta["val"])
        return converted

    def _emit_expr(self, expr: sympy.Expr) -> Any:
        try:
            return size_to_graph(expr, emit=self._emit, leaf=self._read, memo=self._nodes)
        except SizeExpressionError as error:
            raise SymbolicShapeError(f"{error}; compile with static sizes") from error

    def _read(self, symbol: sympy.Symbol) -> fx.Node:
        read = self._reads.get(symbol)
        if read is None:
            raise SymbolicShapeError(
                f"the size symbol {symbol} comes from no graph input (neither a SymInt input "
                "nor a size or stride of a tensor input); pass it as a SymInt input, or "
                "compile with static sizes"
            )
        op, tensor, dim, value = read
        node = self.graph.call_function(op, (tensor, dim))
        node.meta["val"] = value
        return node

    def _emit(self, fn: Callable, a: Any, b: Any) -> fx.Node:
        node = self.graph.call_function(fn, (a, b))
        values = [x.meta["val"] if isinstance(x, fx.Node) else x for x in (a, b)]
        node.meta["val"] = fn(*values)
        return node


# -- where each symbol's value comes from at run time -------------------------------------------


@dataclass(frozen=True, slots=True)
class SymbolSource:
    """Input `index` gives `symbol`: the int itself ("int"), its size / stride `dim`, or
    the value of a float input passed as a 0-d tensor ("item")."""

    symbol: sympy.Symbol
    index: int
    kind: str
    dim: int = 0

    def read(self, args: Sequence[Any]) -> int | float:
        value = args[self.index]
        if self.kind == "int":
            return int(value)
        if self.kind == "item":
            return float(value)
        if self.kind == "size":
            return value.shape[self.dim]
        return value.stride(self.dim)


def symbol_sources(
    values: Sequence[Any], float_inputs: Mapping[int, torch.SymFloat] | None = None
) -> tuple[SymbolSource, ...]:
    """One source per symbol of `values` (the example inputs): SymInt inputs first, then
    the float inputs (`float_inputs`: input index -> its symbolic value), then sizes."""
    found: dict[sympy.Symbol, SymbolSource] = {}
    for index, number in (float_inputs or {}).items():
        symbol = number.node.expr
        if symbol.is_Symbol:
            found.setdefault(symbol, SymbolSource(symbol, index, "item"))
    for index, value in enumerate(values):
        if _symbolic_int(value) and value.node.expr.is_Symbol:
            found.setdefault(value.node.expr, SymbolSource(value.node.expr, index, "int"))
    for index, value in enumerate(values):
        if not isinstance(value, torch.Tensor):
            continue
        for kind, sizes in (("size", value.shape), ("stride", value.stride())):
            for dim, size in enumerate(sizes):
                if _symbolic_int(size) and size.node.expr.is_Symbol:
                    symbol = size.node.expr
                    found.setdefault(symbol, SymbolSource(symbol, index, kind, dim))
    return tuple(found.values())


_NAMESPACE = {"FloorDiv": operator.floordiv, "Max": max, "Min": min}


@functools.lru_cache(maxsize=256)
def _compiled(symbols: tuple[sympy.Symbol, ...], exprs: tuple[Any, ...]) -> Callable[..., list]:
    """A Python function of the symbols' values returning `exprs`' values (cached)."""
    return sympy.lambdify(list(symbols), list(exprs), modules=[_NAMESPACE, "math"])


# -- what a trace assumed -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShapeSnapshot:
    """What a ShapeEnv assumed at one moment: replacements, ranges and relations."""

    shape_env: Any
    replacements: tuple[tuple[sympy.Symbol, sympy.Expr], ...]
    ranges: tuple[tuple[sympy.Symbol, Any], ...]
    relations: frozenset
    # float input symbols not specialized yet (a decision on one specializes it)
    float_symbols: tuple[sympy.Symbol, ...] = ()

    @classmethod
    def of(cls, env: Any) -> ShapeSnapshot:
        symbols = list(env.symbol_hints())
        return cls(
            env,
            tuple((s, env.replace(s)) for s in symbols),
            tuple(env.ranges().items()),
            frozenset(record.condition for record in env.records),
            tuple(symbol for symbol, _ in env.float_bindings()),
        )

    def added_since(self) -> list[Any]:
        """Conditions the ShapeEnv holds now that it did not hold at the snapshot."""
        env = self.shape_env
        before_replacements = dict(self.replacements)
        before_ranges = dict(self.ranges)
        conditions: list[Any] = []
        for symbol, value_range in env.ranges().items():
            now = env.replace(symbol)
            if now != symbol and before_replacements.get(symbol) != now:
                conditions.append(sympy.Eq(symbol, now))
            elif now == symbol and before_ranges.get(symbol) != value_range:
                conditions.append(_range_condition(symbol, value_range))
        for symbol in self.float_symbols:
            # NOTE: tracing decided on a float input's value (`exponent == 0` in pow's
            # backward): the graph holds that value, so each call checks it
            now = env.replace(symbol)
            if now != symbol:
                conditions.append(sympy.Eq(symbol, now))
        before = {env.replace(condition) for condition in self.relations}
        for record in env.records:
            if record.condition not in before and record.condition is not sympy.true:
                conditions.append(record.condition)
        return [c for c in conditions if c is not sympy.true]


def _range_condition(symbol: sympy.Symbol, value_range: Any) -> Any:
    parts = []
    if abs(value_range.lo) != math.inf:
        parts.append(sympy.Le(int(value_range.lo), symbol))
    if abs(value_range.hi) != math.inf:
        parts.append(sympy.Le(symbol, int(value_range.hi)))
    return sympy.And(*parts) if parts else sympy.true


_MAX_VERDICTS = 256  # values kept per compiled graph (sizes seen by a dynamic graph)


@dataclass(frozen=True, slots=True)
class ShapeAssumptions:
    """Conditions on the symbols that a compiled graph relies on, checked per call.

    `sources` bind each symbol to a value of the call's arguments; `conditions`
    are what tracing assumed beyond what the ShapeEnv held before (the caller's
    guards checked those). `hold(args)` is a few Python comparisons, once for each
    tuple of the symbols' values (`verdicts`: a layer's index into a shared cache, lifted
    as an input of the layer's graph, takes one value at each call site).
    """

    sources: tuple[SymbolSource, ...]
    conditions: tuple[Any, ...]
    check: Callable[..., list] | None
    # the symbols' values -> whether every condition holds for them (a pure function of them)
    verdicts: dict[tuple, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def since(cls, snapshot: ShapeSnapshot, sources: tuple[SymbolSource, ...]) -> ShapeAssumptions:
        """The conditions the ShapeEnv gained since `snapshot`, over the symbols `sources` bind."""
        conditions = tuple(snapshot.added_since())
        bound = {source.symbol for source in sources}
        free = set().union(*(c.free_symbols for c in conditions)) if conditions else set()
        if free - bound:
            raise SymbolicShapeError(
                f"tracing assumed {', '.join(map(str, conditions))} on size symbols "
                f"{sorted(map(str, free - bound))} that no input provides"
            )
        used = tuple(s for s in sources if s.symbol in free)
        check = _compiled(tuple(s.symbol for s in used), conditions) if conditions else None
        return cls(used, conditions, check)

    @classmethod
    def of(cls, sources: tuple[SymbolSource, ...], conditions: tuple[Any, ...]) -> ShapeAssumptions:
        """The assumptions `conditions` over the symbols `sources` bind (a stored compile's)."""
        check = _compiled(tuple(s.symbol for s in sources), conditions) if conditions else None
        return cls(sources, conditions, check)

    def hold(self, args: Sequence[Any]) -> bool:
        """Whether the call's sizes satisfy every condition."""
        if self.check is None:
            return True
        values = tuple([source.read(args) for source in self.sources])
        verdict = self.verdicts.get(values)
        if verdict is None:
            verdict = all(self.check(*values))
            # (floats are not kept: -0.0 and 0.0 are one key)
            if len(self.verdicts) < _MAX_VERDICTS and all(type(v) is int for v in values):
                self.verdicts[values] = verdict
        return verdict

    def describe(self) -> str:
        return ", ".join(str(c) for c in self.conditions) or "nothing"


_SIZE_LEAVES = (torch.SymInt, sympy.Basic)


def _expr(leaf: Any) -> sympy.Expr:
    return leaf if isinstance(leaf, sympy.Basic) else leaf.node.expr


def resolve_sizes(tree: Any, sources: Sequence[SymbolSource], args: Sequence[Any]) -> Any:
    """`tree` with every SymInt (or sympy expression) replaced by its value for the call's
    arguments."""
    leaves, spec = pytree.tree_flatten(tree)
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, _SIZE_LEAVES)]
    if not positions:
        return tree
    exprs = tuple(_expr(leaves[i]) for i in positions)
    symbols = tuple(s.symbol for s in sources)
    values = _compiled(symbols, exprs)(*(s.read(args) for s in sources))
    for i, value in zip(positions, values):
        leaves[i] = int(value)
    return pytree.tree_unflatten(leaves, spec)


# -- size expressions as text (a stored compile's) ----------------------------------------------

# Every name `sympy.srepr` writes for a size expression: sympy's classes and guards' FloorDiv.
_EXPRESSION_NAMES = {name: getattr(sympy, name) for name in dir(sympy) if name[0].isupper()}
_EXPRESSION_NAMES |= {"FloorDiv": FloorDiv, "Integer": sympy.Integer, "true": sympy.true}


def expression_text(expr: Any) -> str:
    """`expr` (a sympy expression or condition over size symbols) as text `expression_of` reads.

    The text names each symbol with its assumptions (`Symbol('s0', integer=True,
    positive=True)`), so the expression read back is equal to `expr`.
    """
    if isinstance(expr, bool):
        expr = sympy.true if expr else sympy.false
    return sympy.srepr(expr)


def expression_of(text: str) -> Any:
    """The sympy expression `expression_text` wrote; ValueError for anything else."""
    if not isinstance(text, str) or "__" in text or "lambda" in text:
        raise ValueError(f"{text!r} is not a size expression")
    try:
        expr = eval(text, {"__builtins__": {}}, _EXPRESSION_NAMES)  # noqa: S307 - names above only
    except Exception as error:  # noqa: BLE001 - any failure: not an expression
        raise ValueError(f"{text!r} is not a size expression: {error}") from error
    if not isinstance(expr, sympy.Basic):
        raise ValueError(f"{text!r} is not a size expression")
    return expr
