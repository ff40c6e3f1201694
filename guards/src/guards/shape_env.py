"""ShapeEnv: the sympy symbols of dynamic dimensions, their ranges and the guards on them.

    >>> env = ShapeEnv()
    >>> x = torch.randn(8, 16)
    >>> sizes, strides, offset = env.create_symbolic_sizes_strides(x, LocalSource("x"), [0])
    >>> sizes                       # dim 0 is s0 (hint 8), dim 1 stays 16
    (s0, 16)
    >>> bool(sizes[0] > 4)          # decided by the hint (8), recorded as a guard
    True
    >>> print(env.format_guards())
    s0 = L['x'].size()[0]  # hint 8
    5 <= s0

Each symbol stands for one dynamic dimension; its hint is the size in the
example inputs and its range starts at [2, inf] (sizes 0 and 1 are not made
symbolic: they stay static). With duck sizing (the default) dimensions of equal
size share one symbol, which the guards then check are still equal. A question
on symbols is answered from the ranges when they decide it (no guard), else by
the hints; the answer is recorded once as a guard: a single-symbol inequality
narrows the symbol's range, an equality between symbols (or with a constant)
becomes a replacement, anything else is kept as a relation. `guard()` turns the
lot into one `ShapeGuard` for a `GuardSet`.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from guards.errors import GuardsError
from guards.logs import artifact_enabled, artifact_logger
from guards.sources import Source
from guards.sym_exprs import (
    INF,
    FloorDiv,
    ValueRange,
    bound,
    python_code,
    size_symbol,
    static_truth,
)
from guards.sym_node import SymNode

__all__ = [
    "ShapeEnv",
    "ConstraintViolationError",
    "ShapeEnvError",
    "ShapeEnvState",
    "ShapeRecord",
    "SymbolBinding",
    "TensorPropertySource",
]


_log = artifact_logger("dynamic")


class ShapeEnvError(GuardsError):
    """A symbolic-shape request that cannot be honoured (e.g. a mark_dynamic range violated)."""


class ConstraintViolationError(ShapeEnvError, RuntimeError):
    """A size outside the range `mark_dynamic(min=, max=)` gave it: the user's error, as in
    torch, never a reason to run eagerly."""


@dataclass(frozen=True, slots=True)
class TensorPropertySource(Source):
    """A size, stride or storage offset of a tensor: `L['x'].size()[0]`."""

    source: Source
    prop: str
    index: int = 0

    _EXPRS = {"size": "{}.size()[{}]", "stride": "{}.stride()[{}]"}

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        if self.prop == "storage_offset":
            return f"{base_expr}.storage_offset()"
        return f"{base_expr}.{self.prop}()[{self.index}]"

    def short_name(self, base_name: str) -> str:
        if self.prop == "storage_offset":
            return f"{base_name}.storage_offset()"
        return f"{base_name}.{self.prop}()[{self.index}]"


@dataclass(slots=True)
class _Symbol:
    symbol: sympy.Symbol
    hint: int
    range: ValueRange
    sources: list[TensorPropertySource] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SymbolBinding:
    """A symbol whose value comes from input sizes: what capture turns into a SymInt input.

    `sources[0]` defines the value (e.g. `L['x'].size()[0]`); further sources
    must be equal to it (duck sizing) and are checked by the guard.
    """

    symbol: sympy.Symbol
    hint: int
    range: ValueRange
    sources: tuple[TensorPropertySource, ...]

    @property
    def name(self) -> str:
        return self.symbol.name


@dataclass(frozen=True, slots=True)
class ShapeRecord:
    """A guard on symbols: `condition` held at the hints (`where` says who asked)."""

    condition: Any
    where: str = ""


@dataclass(frozen=True, slots=True)
class ShapeEnvState:
    """A ShapeEnv's symbols (each with its range and sources), replacements, exact
    divisions, recorded relations and source expressions: `ShapeEnv.state`."""

    duck_shape: bool
    specialize_zero_one: bool
    next_index: int
    symbols: tuple[tuple[sympy.Symbol, Any, Any, tuple[Source, ...]], ...]
    replacements: tuple[tuple[sympy.Symbol, Any], ...]
    exact_divisions: tuple[tuple[Any, Any], ...]
    records: tuple[tuple[Any, str], ...]
    seen: tuple[Any, ...]
    source_exprs: tuple[tuple[Source, Any], ...]


class ShapeEnv:
    """Symbols of dynamic dimensions, their hints and ranges, and the guards on them.

    Args:
        duck_shape: give dimensions of equal size one symbol (checked equal by the guard).
        specialize_zero_one: keep sizes 0 and 1 static (ranges of symbols start at 2).
        symbol_source_name: number an int or size symbol as torch 2.13's ShapeEnv does,
            from the name this gives its source (`L['x'].size()[0]` -> `s77`: the
            name's sha256 mod 100, the next number where that one is taken; a float
            symbol `zf<number>`); None numbers them in order (`s0`, `s1`, `f2`).
    """

    def __init__(
        self,
        *,
        duck_shape: bool = True,
        specialize_zero_one: bool = True,
        symbol_source_name: Callable[[Source], str] | None = None,
    ) -> None:
        self.duck_shape = duck_shape
        self.symbol_source_name = symbol_source_name
        self.specialize_zero_one = specialize_zero_one
        self.version = 0
        self._symbols: dict[sympy.Symbol, _Symbol] = {}
        self._by_hint: dict[int, sympy.Symbol] = {}
        self._replacements: dict[sympy.Symbol, sympy.Expr] = {}
        # FloorDiv(a, c) -> a / c for divisions known to be exact (a % c == 0 was guarded)
        self._exact_divisions: dict[sympy.Expr, sympy.Expr] = {}
        self._records: list[ShapeRecord] = []
        self._seen: set[Any] = set()
        # (property source, expression) pairs the guard checks, besides symbol definitions
        self._source_exprs: dict[TensorPropertySource, sympy.Expr] = {}
        self._counter = itertools.count()
        # float inputs traced symbolically: symbol -> (hint, source); an equality on one
        # specializes it (`specialized_floats`, checked by the caller's guards)
        self._floats: dict[sympy.Symbol, tuple[float, Source]] = {}
        self.specialized_floats: dict[Source, float] = {}
        # the user's code a guard came from: set by the front end tracing that code (a
        # function returning `if n > 4:  # file.py:12 in f`, or "" where none runs);
        # recompile reasons name it, as torch.compile's do
        self.user_location: Callable[[], str] | None = None
        # a symbol (its range or replacement) or a recorded condition -> the user's code
        # whose guards made it, in order (messages only; not part of `state`)
        self._origins: dict[Any, list[str]] = {}

    # ------------------------------------------------------------------ symbols

    def create_symbol(
        self,
        hint: int,
        source: Source,
        *,
        min: int | None = None,
        max: int | None = None,
        duck: bool | None = None,
    ) -> sympy.Expr:
        """The symbol for a dynamic size with value `hint` read at `source` (or a constant).

        `source` is usually a TensorPropertySource (`L['x'].size()[0]`); an int input
        (`LocalSource('n')`) works the same way (its TypeGuard is the caller's).

        0 and 1 stay constants (with `specialize_zero_one`); with duck sizing a
        size equal to an earlier one reuses its symbol. `min`/`max` bound the
        range (mark_dynamic); a hint outside them is an error.
        """
        hint = int(hint)
        if (min is not None and hint < min) or (max is not None and hint > max):
            raise ConstraintViolationError(
                f"{source.expr} is {hint}, not in range [{min}, {max}] given to "
                "mark_dynamic; pass inputs in that range or widen it"
            )
        if self.specialize_zero_one and hint in (0, 1):
            self._source_exprs.setdefault(source, sympy.Integer(hint))
            return sympy.Integer(hint)
        duck = self.duck_shape if duck is None else duck
        bounded = min is not None or max is not None
        if duck and not bounded and hint in self._by_hint:
            symbol = self._by_hint[hint]
            self._symbols[symbol].sources.append(source)
            self._source_exprs.setdefault(source, symbol)
            return self.replace(symbol)
        symbol = size_symbol(self._symbol_index(source))
        low = 2 if self.specialize_zero_one else 0
        value_range = ValueRange(
            low if min is None else _max(min, low), INF if max is None else max
        )
        self._symbols[symbol] = _Symbol(symbol, hint, value_range, [source])
        if artifact_enabled("dynamic"):
            _log.info(
                "create_symbol %s = %s (hint %d, range %s)", symbol, source.expr, hint, value_range
            )
        if duck and not bounded:
            self._by_hint[hint] = symbol
        return symbol

    def _symbol_index(self, source: Source) -> int:
        """The number of a new int or size symbol read at `source` (see `symbol_source_name`)."""
        if self.symbol_source_name is None:
            return next(self._counter)
        taken = {int(symbol.name.lstrip("sz")) for symbol in self._symbols}
        taken |= {int(symbol.name.lstrip("zf")) for symbol in self._floats}
        name = self.symbol_source_name(source)
        index = int(hashlib.sha256(name.encode()).hexdigest(), 16) % 100
        while index in taken:
            index += 1
        return index

    def create_int_symbol(self, hint: int, source: Source) -> sympy.Symbol:
        """The symbol of an int input traced symbolically (`LocalSource('n')`).

        Unlike a size, the int may be any integer: 0, 1 and negative values are not
        specialized, its range is unbounded and it never shares a size's symbol
        (no duck sizing), as torch does for int inputs made dynamic.
        """
        symbol = sympy.Symbol(f"s{self._symbol_index(source)}", integer=True)
        self._symbols[symbol] = _Symbol(symbol, int(hint), ValueRange(-INF, INF), [source])
        if artifact_enabled("dynamic"):
            _log.info("create_int_symbol %s = %s (hint %d)", symbol, source.expr, int(hint))
        return symbol

    def create_float_symbol(self, hint: float, source: Source) -> sympy.Symbol:
        """The symbol of a float input traced symbolically (`LocalSource('scale')`).

        Arithmetic on it stays symbolic; a decision on it (a comparison, `int(...)`)
        specializes it instead of recording a relation: the symbol becomes `hint`
        and `specialized_floats[source]` asks the caller to guard the input equal; an
        order on it (`s > 0`) is a relation the shape guard checks on the float.
        """
        if self.symbol_source_name is None:
            symbol = sympy.Symbol(f"f{next(self._counter)}", real=True)
        else:  # torch's float symbols: `zf` and the number of the source's name
            symbol = sympy.Symbol(f"zf{self._symbol_index(source)}", real=True)
        self._floats[symbol] = (float(hint), source)
        if artifact_enabled("dynamic"):
            _log.info("create_float_symbol %s = %s (hint %r)", symbol, source.expr, hint)
        return symbol

    def float_bindings(self) -> list[tuple[sympy.Symbol, Source]]:
        """(symbol, source) of each float input symbol not specialized; the guard reads them."""
        return [
            (symbol, source)
            for symbol, (_, source) in self._floats.items()
            if symbol not in self._replacements
        ]

    def _specialize_floats(self, expr: Any) -> Any:
        """`expr` with its float input symbols specialized to their hints, where it is an
        equality (`s == 0.5`, a float read with `guard_float`); an order (`s > 0`) stays a
        relation the guard checks on the float, and so does an equality of integers made
        from it (`floor(8.0*f0) == 12`, an output size), as torch.compile keeps them."""
        if not (isinstance(expr, sympy.Basic) and expr.has(sympy.Eq)):
            return expr
        if all(arg.is_integer for eq in expr.atoms(sympy.Eq) for arg in eq.args):
            return expr
        symbols = [s for s in getattr(expr, "free_symbols", ()) if s in self._floats]
        for symbol in symbols:
            hint, source = self._floats[symbol]
            self.specialized_floats[source] = hint
            self._replacements[symbol] = sympy.Float(hint)
            self.version += 1
            if artifact_enabled("dynamic"):
                _log.info("specialize_float %s = %r (at %s)", source.expr, hint, _user_location())
        return self.replace(expr) if symbols else expr

    def create_symint(self, expr: sympy.Expr, hint: int) -> torch.SymInt | int:
        """A `torch.SymInt` for `expr` (a plain int when `expr` is a constant)."""
        if expr.is_Integer:
            return int(expr)
        return torch.SymInt(SymNode(expr, self, int, int(hint)))

    def create_symbolic_sizes_strides(
        self,
        tensor: torch.Tensor,
        source: Source,
        dynamic_dims: Iterable[int] | dict[int, Any],
    ) -> tuple[tuple, tuple, int]:
        """Sizes (SymInts at `dynamic_dims`), strides (expressed through the sizes where
        they follow from them, else new symbols) and the storage offset of `tensor`.

        `dynamic_dims` may map dims to a range object with `min`/`max` (a DynamicRange);
        a dim given a range (an unbounded one too) gets a symbol of its own, never a
        duck-sized one.
        """
        ranges = dynamic_dims if isinstance(dynamic_dims, dict) else dict.fromkeys(dynamic_dims)
        size_exprs: list[sympy.Expr] = []
        for dim, size in enumerate(tensor.shape):
            if dim in ranges:
                limits = ranges[dim]
                expr = self.create_symbol(
                    size,
                    TensorPropertySource(source, "size", dim),
                    min=getattr(limits, "min", None),
                    max=getattr(limits, "max", None),
                    duck=False if limits is not None else None,  # a range: a symbol its own
                )
            else:
                expr = sympy.Integer(int(size))
            size_exprs.append(expr)
        stride_exprs = self._stride_exprs(tensor, source, size_exprs) if ranges else None
        if stride_exprs is None:
            stride_exprs = [sympy.Integer(int(s)) for s in tensor.stride()]
        sizes = tuple(
            self.create_symint(e, h) for e, h in zip(size_exprs, tensor.shape, strict=True)
        )
        strides = tuple(
            self.create_symint(e, h) for e, h in zip(stride_exprs, tensor.stride(), strict=True)
        )
        return sizes, strides, int(tensor.storage_offset())

    def _stride_exprs(
        self, tensor: torch.Tensor, source: Source, sizes: list[sympy.Expr]
    ) -> list[sympy.Expr]:
        """Each stride as a product of inner sizes when its value says so, else a new symbol."""
        real_strides = [int(s) for s in tensor.stride()]
        real_sizes = [int(s) for s in tensor.shape]
        exprs: list[sympy.Expr | None] = [None] * len(real_strides)
        candidates: dict[int, sympy.Expr] = {1: sympy.Integer(1)}
        for dim in sorted(range(len(real_strides)), key=lambda d: (real_strides[d], -d)):
            stride = real_strides[dim]
            if stride in candidates:
                exprs[dim] = candidates[stride]
            elif stride in (0, 1):
                exprs[dim] = sympy.Integer(stride)
            else:
                exprs[dim] = self.create_symbol(stride, TensorPropertySource(source, "stride", dim))
            candidates.setdefault(stride * real_sizes[dim], exprs[dim] * sizes[dim])
        for dim, expr in enumerate(exprs):
            if real_sizes[dim] != 1 and 0 not in real_sizes:
                self._source_exprs.setdefault(TensorPropertySource(source, "stride", dim), expr)
        return exprs  # type: ignore[return-value]

    def bindings(self) -> list[SymbolBinding]:
        """The symbols whose values come from inputs, in creation order (not replaced ones).

        Capture passes these as SymInt graph inputs: the value is read at `sources[0]`.
        """
        return [
            SymbolBinding(info.symbol, info.hint, info.range, tuple(info.sources))
            for info in self._symbols.values()
            if info.symbol not in self._replacements
        ]

    def graph_inputs(self) -> list[tuple[SymbolBinding, torch.SymInt]]:
        """One (binding, SymInt) per input symbol, for SymInt graph inputs.

        The SymInt is the placeholder's `meta["val"]`; the example input is
        `binding.hint` (an int); at run time the value is read at `binding.sources[0]`.
        """
        return [(b, torch.SymInt(SymNode(b.symbol, self, int, b.hint))) for b in self.bindings()]

    def symbol_hints(self) -> dict[sympy.Symbol, int]:
        """Every symbol's hint (its value in the example inputs)."""
        return {symbol: info.hint for symbol, info in self._symbols.items()}

    def ranges(self) -> dict[sympy.Symbol, ValueRange]:
        """Every symbol's current value range."""
        return {symbol: info.range for symbol, info in self._symbols.items()}

    # ------------------------------------------------------------------ simplification

    def specialized_value(self, source: Any) -> int | None:
        """The constant the symbol made for `source` (a TensorPropertySource) was
        specialized to by a guard since (`x.shape[0] == 4` taken), or None: no symbol
        was made for it (a static size, 0 or 1) or it is still symbolic."""
        for info in self._symbols.values():
            if source in info.sources:
                value = self.replace(info.symbol)
                return int(value) if isinstance(value, sympy.Integer) else None
        return None

    def replace(self, expr: Any) -> Any:
        """`expr` with known replacements applied (symbols proven equal to others or constants)."""
        if not self._replacements or not getattr(expr, "free_symbols", None):
            if not self._exact_divisions:
                return expr
        if self._replacements:
            expr = expr.xreplace(self._replacements)
        if self._exact_divisions:
            expr = expr.xreplace(self._exact_divisions)
        return expr

    def static_value(self, expr: Any, *, size_oblivious: bool = False) -> Any:
        """The value of `expr` when constants and ranges decide it, else None (no guard)."""
        expr = self.replace(expr)
        if isinstance(expr, sympy.Expr) and expr.is_Number:
            return int(expr) if expr.is_Integer else float(expr)
        if expr is sympy.true or expr is sympy.false:
            return bool(expr)
        ranges = self.ranges()
        if size_oblivious:
            # NOTE: a size-oblivious question treats sizes as if they were never 0 or 1.
            ranges = {s: ValueRange(_max(r.lo, 2), _max(r.hi, 2)) for s, r in ranges.items()}
        if isinstance(expr, sympy.Expr):
            value_range = bound(expr, ranges)
            return value_range.lo if value_range.is_singleton() else None
        return static_truth(expr, ranges)

    def hint_of(self, expr: Any) -> Any:
        """The value of `expr` at the symbols' hints."""
        hints = {s: sympy.Integer(info.hint) for s, info in self._symbols.items()}
        hints.update({s: sympy.Float(hint) for s, (hint, _) in self._floats.items()})
        value = self.replace(expr).xreplace(hints)
        if value is sympy.true or value is sympy.false:
            return bool(value)
        if isinstance(value, sympy.Expr) and value.is_Number:
            return int(value) if value.is_Integer else float(value)
        raise ShapeEnvError(f"cannot evaluate {expr} at the hints (left with {value})")

    # ------------------------------------------------------------------ decisions

    def decide(self, condition: Any, where: str = "") -> bool:
        """A condition on symbols: statically when possible, else by hints, recorded."""
        static = self.static_value(condition)
        if static is not None:
            return bool(static)
        value = bool(self.hint_of(condition))
        self.record(condition if value else sympy.Not(condition), where)
        return value

    def evaluate(self, node: SymNode, *, where: str = "", size_oblivious: bool = False) -> Any:
        """The concrete value of `node` (guard_bool / guard_int / expect_true / ...)."""
        expr = node.expr
        static = self.static_value(expr, size_oblivious=size_oblivious)
        if static is not None:
            return node.pytype(static)
        hint = node.hint if node.hint is not None else self.hint_of(expr)
        if node.pytype is bool:
            self.record(expr if hint else sympy.Not(expr), where)
        else:
            self.record(sympy.Eq(expr, hint), where)
        return node.pytype(hint)

    def record(self, condition: Any, where: str = "") -> None:
        """Record that `condition` holds (it must hold at the hints)."""
        condition = self._specialize_floats(self.replace(condition))
        if condition is sympy.true or static_truth(condition, self.ranges()) is True:
            return
        condition = _divisibility(condition)
        if condition in self._seen:
            return
        self._seen.add(condition)
        if isinstance(condition, sympy.Eq) and isinstance(condition.lhs, sympy.Mod):
            dividend, divisor = condition.lhs.args
            self._exact_divisions[FloorDiv(dividend, divisor)] = dividend / divisor
            self.version += 1
        origin = self.user_location() if self.user_location is not None else ""
        if artifact_enabled("dynamic"):
            _log.info("guard %s (at %s)", python_code(condition), origin or _user_location())
        if self._narrow(condition):
            self.version += 1
            if origin:
                for symbol in condition.free_symbols:
                    self._add_origin(symbol, origin)
            return
        if origin:
            self._add_origin(condition, origin)
        self._records.append(ShapeRecord(condition, where))

    def _add_origin(self, key: Any, origin: str) -> None:
        origins = self._origins.setdefault(key, [])
        if origin not in origins:
            origins.append(origin)

    def origin_of(self, kind: str, source: Any, expr: Any) -> str:
        """The user's code whose guards made check (`kind`, `source`, `expr`) of
        `checks()`: its lines joined by " and ", or "" where none is known (0/1
        specialization, a mark, a ShapeEnv restored from its state)."""
        keys: list[Any] = []
        if kind == "relation":
            keys = [c for c in self._origins if c == expr or self.replace(c) == expr]
        elif kind == "range":
            keys = sorted(getattr(expr, "free_symbols", ()), key=str)
        elif kind == "equals":  # a symbol replaced (by a constant or another symbol)
            keys = [i.symbol for i in self._symbols.values() if source in i.sources]
            keys += sorted(getattr(expr, "free_symbols", ()), key=str)
        origins: list[str] = []
        for key in keys:
            for origin in self._origins.get(key, ()):
                if origin not in origins:
                    origins.append(origin)
        return " and ".join(origins)

    def _narrow(self, condition: Any) -> bool:
        """Turn a single-symbol linear condition into a range or a replacement."""
        if isinstance(condition, sympy.Eq) and _is_symbol_pair(condition):
            older, newer = sorted(condition.free_symbols, key=_symbol_number)
            self._replace(newer, older)
            return True
        if not isinstance(condition, sympy.Eq | sympy.Le | sympy.Lt | sympy.Ge | sympy.Gt):
            return False
        diff = sympy.expand(condition.lhs - condition.rhs)
        if len(diff.free_symbols) != 1:
            return False
        (symbol,) = diff.free_symbols
        if symbol not in self._symbols:
            return False
        poly = sympy.Poly(diff, symbol) if diff.is_polynomial(symbol) else None
        if poly is None or poly.degree() != 1:
            return False
        a, b = (int(c) if c.is_Integer else None for c in poly.all_coeffs())
        if a is None or b is None:
            return False
        return self._narrow_linear(symbol, type(condition), a, b)

    def _narrow_linear(self, symbol: sympy.Symbol, relation: type, a: int, b: int) -> bool:
        """a*symbol + b RELATION 0."""
        info = self._symbols[symbol]
        if relation is sympy.Eq:
            if b % a:
                return False
            self._replace(symbol, sympy.Integer(-b // a))
            return True
        if a < 0:
            a, b = -a, -b
            relation = {
                sympy.Le: sympy.Ge,
                sympy.Lt: sympy.Gt,
                sympy.Ge: sympy.Le,
                sympy.Gt: sympy.Lt,
            }[relation]
        # symbol RELATION -b / a
        lo, hi = info.range.lo, info.range.hi
        if relation is sympy.Le:
            hi = min(hi, (-b) // a)
        elif relation is sympy.Lt:
            hi = min(hi, -(b // a) - 1)
        elif relation is sympy.Ge:
            lo = max(lo, -(b // a))
        else:
            lo = max(lo, (-b) // a + 1)
        info.range = ValueRange(lo, hi)
        if lo == hi:
            self._replace(symbol, sympy.Integer(int(lo)))
        return True

    def _replace(self, symbol: sympy.Symbol, value: sympy.Expr) -> None:
        info = self._symbols[symbol]
        if value.is_Symbol and value in self._symbols:
            other = self._symbols[value]
            lo, hi = _max(other.range.lo, info.range.lo), min(other.range.hi, info.range.hi)
            other.range = ValueRange(lo, hi)
        self._replacements = {s: e.xreplace({symbol: value}) for s, e in self._replacements.items()}
        self._replacements[symbol] = value
        self.version += 1

    # ------------------------------------------------------------------ reading the guards

    @property
    def records(self) -> list[ShapeRecord]:
        """The relations recorded so far (ranges and replacements not included)."""
        return [ShapeRecord(self.replace(r.condition), r.where) for r in self._records]

    def checks(self) -> list[tuple[str, TensorPropertySource | None, Any]]:
        """Every check the guard makes, as (kind, property source or None, expression).

        kinds: "equals" (source == expression), "range" (lo <= symbol <= hi, as a
        sympy condition), "relation" (a recorded condition) and "not_nan" (the float
        input of the symbol, the expression, is a number: NaN is specialized, as in
        torch.compile, since the relations and equalities above mean nothing for it).
        """
        out: list[tuple[str, TensorPropertySource | None, Any]] = []
        definitions = self._definitions()
        for source, expr in self._source_exprs.items():
            if definitions.get(source) != expr:
                out.append(("equals", source, self.replace(expr)))
        for info in self._symbols.values():
            if info.symbol in self._replacements:
                for source in info.sources:
                    if definitions.get(source) is None:
                        out.append(("equals", source, self.replace(info.symbol)))
                continue
            condition = _range_condition(info.symbol, info.range)
            if condition is not sympy.true:
                out.append(("range", None, condition))
        seen = set()
        for record in self.records:
            if record.condition not in seen and record.condition is not sympy.true:
                seen.add(record.condition)
                out.append(("relation", None, record.condition))
        out.extend(("not_nan", None, symbol) for symbol, _ in self.float_bindings())
        return _dedupe(out)

    def _definitions(self) -> dict[TensorPropertySource, sympy.Symbol]:
        """The source that defines each live symbol's value (its first source)."""
        return {
            info.sources[0]: info.symbol
            for info in self._symbols.values()
            if info.symbol not in self._replacements
        }

    def format_guards(self) -> str:
        """The symbols and their guards, one per line, in terms of the input sources."""
        lines = [f"{b.name} = {b.sources[0].expr}  # hint {b.hint}" for b in self.bindings()]
        names = {b.symbol: b.sources[0].expr for b in self.bindings()}
        names.update({symbol: source.expr for symbol, source in self.float_bindings()})
        for kind, source, expr in self.checks():
            text = python_code(expr, names)
            if kind == "not_nan":
                text = f"not math.isnan({text})"
            text = f"{source.expr} == {text}" if kind == "equals" else text
            origin = self.origin_of(kind, source, expr)
            lines.append(f"{text}  # {origin}" if origin else text)  # as torch's guard log
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_guards()

    def guard(self, source_order: Sequence[Source] = ()) -> Any:
        """The `ShapeGuard` checking every symbol binding, range and relation (None if none)."""
        from guards.symbolic_guards import ShapeGuard

        if artifact_enabled("dynamic") and self._symbols:
            _log.info("symbolic shape guards:\n%s", self.format_guards())
        return ShapeGuard.of(self) if self._symbols or self.float_bindings() else None

    # ------------------------------------------------------------------ state as values

    def state(self) -> ShapeEnvState:
        """What this ShapeEnv knows, but the hints: `restore` makes an equal one for other
        input sizes that pass its guard (a capture record's graph, in a later process)."""
        if self._floats or self.specialized_floats:
            raise ShapeEnvError("a ShapeEnv with float symbols has no state to restore")
        symbols = tuple(
            (info.symbol, info.range.lo, info.range.hi, tuple(info.sources))
            for info in self._symbols.values()
        )
        names = [info.symbol.name for info in self._symbols.values()]
        return ShapeEnvState(
            duck_shape=self.duck_shape,
            specialize_zero_one=self.specialize_zero_one,
            next_index=1 + max((int(name[1:]) for name in names), default=-1),
            symbols=symbols,
            replacements=tuple(self._replacements.items()),
            exact_divisions=tuple(self._exact_divisions.items()),
            records=tuple((r.condition, r.where) for r in self._records),
            seen=tuple(self._seen),
            source_exprs=tuple(self._source_exprs.items()),
        )

    @classmethod
    def restore(cls, state: ShapeEnvState, hints: dict[sympy.Symbol, int]) -> ShapeEnv:
        """The ShapeEnv `state` describes, each symbol's hint from `hints`."""
        env = cls(duck_shape=state.duck_shape, specialize_zero_one=state.specialize_zero_one)
        env._counter = itertools.count(state.next_index)
        for symbol, lo, hi, sources in state.symbols:
            env._symbols[symbol] = _Symbol(
                symbol, int(hints[symbol]), ValueRange(lo, hi), list(sources)
            )
        env._replacements = dict(state.replacements)
        env._exact_divisions = dict(state.exact_divisions)
        env._records = [ShapeRecord(condition, where) for condition, where in state.records]
        env._seen = set(state.seen)
        env._source_exprs = dict(state.source_exprs)
        return env

    # ------------------------------------------------------------------ torch's names

    def evaluate_sym_node(
        self, sym_node: SymNode, size_oblivious: bool = False, fallback_value: Any = None
    ) -> Any:
        return self.evaluate(sym_node, size_oblivious=size_oblivious)

    def _maybe_evaluate_static(self, expr: Any, **kwargs: Any) -> Any:
        value = self.static_value(expr)
        if value is None:
            return None
        return sympy.sympify(value)

    def optimization_hint(self, expr: Any, fallback: int | None = None) -> Any:
        try:
            return self.hint_of(expr)
        except ShapeEnvError:
            return fallback

    def bound_sympy(self, expr: Any, size_oblivious: bool = False) -> ValueRange:
        return bound(self.replace(expr), self.ranges())

    def is_unbacked_symint(self, symbol: Any) -> bool:
        return False


_LIBRARY_FOLDERS = (os.path.dirname(torch.__file__), os.path.dirname(__file__))


def _user_location() -> str:
    """file:line of the innermost frame outside torch and this package (for logs)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_LIBRARY_FOLDERS) and "<" not in filename[:1]:
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _divisibility(condition: Any) -> Any:
    """`a == c*(a // c)` (how view checks divisibility) as `a % c == 0`; else unchanged."""
    if not isinstance(condition, sympy.Eq):
        return condition
    if condition.rhs == 0 and isinstance(condition.lhs, sympy.Mod):
        return condition
    for whole, part in ((condition.lhs, condition.rhs), (condition.rhs, condition.lhs)):
        coefficient, rest = part.as_coeff_Mul()
        if isinstance(rest, FloorDiv) and rest.args[0] == whole and rest.args[1] == coefficient:
            return sympy.Eq(sympy.Mod(whole, coefficient), 0)
    return condition


def _max(a: Any, b: Any) -> Any:
    return a if a >= b else b


def _symbol_number(symbol: sympy.Symbol) -> int:
    return int(symbol.name.lstrip("szf"))


def _is_symbol_pair(condition: Any) -> bool:
    return condition.lhs.is_Symbol and condition.rhs.is_Symbol


def _range_condition(symbol: sympy.Symbol, value_range: ValueRange) -> Any:
    parts = []
    if value_range.lo != -INF:
        parts.append(sympy.Le(int(value_range.lo), symbol, evaluate=False))
    if value_range.hi != INF:
        parts.append(sympy.Le(symbol, int(value_range.hi), evaluate=False))
    return sympy.And(*parts) if parts else sympy.true


def _dedupe(checks: list) -> list:
    seen, out = set(), []
    for check in checks:
        key = (check[0], check[1], check[2])
        if key not in seen:
            seen.add(key)
            out.append(check)
    return out
