"""ShapeGuard: the guard on symbolic sizes, checked inside the one generated guard function.

It reads every size and stride the ShapeEnv's symbols came from
(`L['x'].size()[0]`, ...), binds each symbol to the value at its defining
source, then checks in straight-line code:

- every other source of a symbol, or of an expression, equals it
  (`L['y'].size()[0] == s0` with duck sizing, `L['x'].stride()[0] == s1`);
- every symbol is in its range (`2 <= s0`, from 0/1 specialization and mark_dynamic);
- every recorded relation (`s0 % 2 == 0`, `s0*s1 == 4*s2`, ...).

    >>> guard = ShapeGuard.of(env)
    >>> guard.failure(8, 16)
    "shape relation L['x'].size()[0] == L['y'].size()[0] violated: s0 = 8 but L['y'].size()[0] = 16"
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sympy

from guards.guard_kinds import Guard, GuardCode
from guards.shape_env import ShapeEnv, TensorPropertySource
from guards.sources import Source
from guards.sym_exprs import python_code

__all__ = ["ShapeCheck", "ShapeGuard"]


@dataclass(frozen=True, slots=True)
class ShapeCheck:
    """One check of a ShapeGuard.

    kind: "equals" (the value at property source `index` equals `expr`),
    "range" or "relation" (`expr` is a condition that must hold), "not_nan" (the float
    bound to the symbol `expr` is not NaN).
    """

    kind: str
    index: int | None
    expr: Any


@dataclass(frozen=True, slots=True)
class ShapeGuard(Guard):
    """Symbol bindings, ranges and relations of one ShapeEnv, checked together."""

    property_sources: tuple[TensorPropertySource, ...] = ()
    symbols: tuple[tuple[sympy.Symbol, int], ...] = ()
    shape_checks: tuple[ShapeCheck, ...] = ()
    # the user's code each check came from ("" where unknown), for failure messages
    origins: tuple[str, ...] = field(default=(), compare=False)

    guard_type: ClassVar[str] = "SHAPE_ENV"
    rank: ClassVar[int] = 30

    @classmethod
    def of(cls, env: ShapeEnv) -> ShapeGuard | None:
        """The guard for everything `env` assumed (None when it assumed nothing)."""
        index: dict[TensorPropertySource, int] = {}

        def slot(source: TensorPropertySource) -> int:
            return index.setdefault(source, len(index))

        symbols = tuple((b.symbol, slot(b.sources[0])) for b in env.bindings())
        symbols += tuple((symbol, slot(source)) for symbol, source in env.float_bindings())
        env_checks = env.checks()
        checks = tuple(
            ShapeCheck(kind, None if source is None else slot(source), expr)
            for kind, source, expr in env_checks
        )
        if not checks and not symbols:
            return None
        sources = tuple(index)
        origins = tuple(env.origin_of(*check) for check in env_checks)
        return cls(sources[0], sources, symbols, checks, origins)

    def sources(self) -> tuple[Source, ...]:
        return self.property_sources

    # ------------------------------------------------------------------ reference check

    def failure(self, *values: Any) -> str | None:
        bound = {symbol: _number(values[i]) for symbol, i in self.symbols}
        for position, check in enumerate(self.shape_checks):
            failure = self._check_failure(check, values, bound)
            if failure is not None:
                origin = self.origins[position] if position < len(self.origins) else ""
                return f"{failure}  # guarded by: {origin}" if origin else failure
        return None

    def _check_failure(self, check: ShapeCheck, values: tuple, bound: dict) -> str | None:
        if check.kind == "not_nan":
            if not math.isnan(float(bound[check.expr])):
                return None
            name = self._names()[check.expr]
            return f"{name} is nan, but the compiled code took it as a number (nan is specialized)"
        if check.kind == "equals":
            have = int(values[check.index])
            want = check.expr.xreplace(bound)
            if have == want:
                return None
            source = self.property_sources[check.index]
            if not check.expr.free_symbols:
                return f"{source.expr} is {have}, but the compiled code assumed {want}"
            return (
                f"shape relation {source.expr} == {self._text(check.expr)} violated: "
                f"{source.expr} = {have} but {self._text(check.expr)} = {want}"
                f"{self._values(check.expr, bound)}"
            )
        if check.expr.xreplace(bound) is sympy.true:
            return None
        what = "range" if check.kind == "range" else "relation"
        small = any(value in (0, 1) for value in bound.values())
        note = " (sizes 0 and 1 are specialized)" if check.kind == "range" and small else ""
        return (
            f"shape {what} {self._text(check.expr)} violated"
            f"{self._values(check.expr, bound, first=True)}{note}"
        )

    def _names(self) -> dict[sympy.Symbol, str]:
        return {symbol: self.property_sources[i].expr for symbol, i in self.symbols}

    def _text(self, expr: Any) -> str:
        return python_code(expr, self._names())

    def _values(self, expr: Any, bound: dict, first: bool = False) -> str:
        symbols = sorted(expr.free_symbols, key=lambda s: s.name)
        if not symbols:
            return ""
        parts = ", ".join(f"{self._names()[s]} = {bound[s]}" for s in symbols if s in bound)
        return f": {parts}" if first else f" ({parts})"

    # ------------------------------------------------------------------ generated check

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        local = {symbol: names[i] for symbol, i in self.symbols}
        out = []
        for check in self.shape_checks:
            if check.kind == "not_nan":  # NaN is the one float unequal to itself
                out.append((self.rank, f"{local[check.expr]} == {local[check.expr]}"))
                continue
            text = python_code(check.expr, local)
            if check.kind == "equals":
                text = f"{names[check.index]} == {text}"
            out.append((self.rank, text))
        return out

    @property
    def has_value(self) -> bool:
        return False

    def describe(self) -> str:
        return f"{self.guard_type}: {len(self.symbols)} symbols, {len(self.shape_checks)} checks"

    def lines(self) -> list[str]:
        """The checks in words (over source expressions), one per line."""
        out = []
        for check in self.shape_checks:
            text = self._text(check.expr)
            if check.kind == "equals":
                text = f"{self.property_sources[check.index].expr} == {text}"
            out.append(text)
        return out


def _number(value: Any) -> sympy.Expr:
    """An input's value as a sympy number (a size or int input; a float input)."""
    return sympy.Float(value) if isinstance(value, float) else sympy.Integer(int(value))
