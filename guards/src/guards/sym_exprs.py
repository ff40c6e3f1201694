"""Sympy pieces of symbolic shapes: integer floor division, value ranges, printing.

    >>> s0 = size_symbol(0)
    >>> FloorDiv(4 * s0, 2)
    2*s0
    >>> bound(s0 * 3 - 1, {s0: ValueRange(2, 10)})
    ValueRange(lo=5, hi=29)
    >>> python_code(sympy.Eq(FloorDiv(s0, 2), 4))
    '(s0 // 2) == 4'

`bound` is interval arithmetic over the symbols' ranges; `static_truth` uses it
to answer a condition without looking at any hint (True, False, or None when
the ranges do not decide it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import sympy
from sympy.core.assumptions import _assume_defined
from sympy.printing.str import StrPrinter

__all__ = [
    "FloorDiv",
    "INF",
    "ValueRange",
    "bound",
    "expr_data",
    "expr_of_data",
    "python_code",
    "size_symbol",
    "static_truth",
]

INF = math.inf


def size_symbol(index: int) -> sympy.Symbol:
    """The symbol of dynamic size number `index`: `s<index>`, a positive integer."""
    return sympy.Symbol(f"s{index}", integer=True, positive=True)


class FloorDiv(sympy.Function):
    """Python's `a // b` on integers (floored), kept symbolic when not decidable."""

    nargs = (2,)
    is_integer = True

    @classmethod
    def eval(cls, base: sympy.Expr, divisor: sympy.Expr) -> sympy.Expr | None:
        if divisor == 0:
            raise ZeroDivisionError("integer division by zero in a symbolic size")
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if divisor == 1:
            return base
        if base == 0:
            return sympy.Integer(0)
        if base == divisor:
            return sympy.Integer(1)
        if divisor.is_Integer and int(divisor) > 0:
            exact = _divide_exactly(base, int(divisor))
            if exact is not None:
                return exact
            if isinstance(base, FloorDiv) and base.args[1].is_Integer and int(base.args[1]) > 0:
                return FloorDiv(base.args[0], base.args[1] * divisor)
        quotient = sympy.cancel(base / divisor)
        if quotient.is_integer and quotient.is_polynomial():
            return quotient
        return None


def _divide_exactly(expr: sympy.Expr, divisor: int) -> sympy.Expr | None:
    """expr / divisor when every term's integer coefficient is a multiple of divisor."""
    terms = sympy.Add.make_args(expr)
    out = []
    for term in terms:
        coefficient, rest = term.as_coeff_Mul()
        if not coefficient.is_Integer or int(coefficient) % divisor:
            return None
        out.append(sympy.Integer(int(coefficient) // divisor) * rest)
    return sympy.Add(*out)


@dataclass(frozen=True, slots=True)
class ValueRange:
    """An inclusive interval [lo, hi]; the ends may be -inf / inf."""

    lo: float | int
    hi: float | int

    def is_singleton(self) -> bool:
        """Whether the interval holds exactly one value."""
        return self.lo == self.hi

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int | float) and self.lo <= value <= self.hi

    def __str__(self) -> str:
        return f"[{_end(self.lo)}, {_end(self.hi)}]"


def _end(value: float | int) -> str:
    if value == INF:
        return "inf"
    if value == -INF:
        return "-inf"
    return str(value)


_ANY = ValueRange(-INF, INF)


def _mul(a: float, b: float) -> float:
    if a == 0 or b == 0:
        return 0
    return a * b


def _times(x: ValueRange, y: ValueRange) -> ValueRange:
    products = [_mul(a, b) for a in (x.lo, x.hi) for b in (y.lo, y.hi)]
    return ValueRange(min(products), max(products))


def _floordiv(x: ValueRange, y: ValueRange) -> ValueRange:
    if y.lo <= 0 or x.lo < 0:
        return _ANY
    lo = math.floor(x.lo / y.hi) if y.hi != INF else 0
    hi = INF if x.hi == INF else math.floor(x.hi / y.lo)
    return ValueRange(lo, hi)


def _power(x: ValueRange, exponent: sympy.Expr) -> ValueRange:
    if not exponent.is_Integer or int(exponent) < 0 or x.lo < 0:
        return _ANY
    e = int(exponent)
    return ValueRange(x.lo**e, x.hi**e if x.hi != INF else INF)


def bound(expr: sympy.Expr, ranges: dict[sympy.Symbol, ValueRange]) -> ValueRange:
    """The interval `expr` can take when each symbol stays in its range."""
    if expr.is_Number:
        value = int(expr) if expr.is_Integer else float(expr)
        return ValueRange(value, value)
    if expr.is_Symbol:
        return ranges.get(expr, _ANY)
    args = expr.args
    if isinstance(expr, sympy.Add):
        parts = [bound(arg, ranges) for arg in args]
        return ValueRange(sum(p.lo for p in parts), sum(p.hi for p in parts))
    if isinstance(expr, sympy.Mul):
        result = ValueRange(1, 1)
        for arg in args:
            result = _times(result, bound(arg, ranges))
        return result
    if isinstance(expr, sympy.Pow):
        return _power(bound(args[0], ranges), args[1])
    if isinstance(expr, FloorDiv):
        return _floordiv(bound(args[0], ranges), bound(args[1], ranges))
    if isinstance(expr, sympy.Mod):
        inner, divisor = bound(args[0], ranges), bound(args[1], ranges)
        if divisor.lo > 0 and 0 <= inner.lo and inner.hi < divisor.lo:
            return inner
        if divisor.lo > 0 and inner.lo >= 0:
            return ValueRange(0, divisor.hi - 1)
    if isinstance(expr, sympy.Max | sympy.Min):
        parts = [bound(arg, ranges) for arg in args]
        pick = max if isinstance(expr, sympy.Max) else min
        return ValueRange(pick(p.lo for p in parts), pick(p.hi for p in parts))
    return _ANY


_RELATIONS = {
    sympy.Eq: "eq",
    sympy.Ne: "ne",
    sympy.Lt: "lt",
    sympy.Le: "le",
    sympy.Gt: "gt",
    sympy.Ge: "ge",
}


def _relation_truth(kind: str, diff: ValueRange) -> bool | None:
    """Whether `lhs - rhs` in `diff` makes relation `kind` always true / false."""
    if kind in ("gt", "ge"):
        kind, diff = {"gt": "lt", "ge": "le"}[kind], ValueRange(-diff.hi, -diff.lo)
    if kind == "eq" or kind == "ne":
        if diff.lo == diff.hi == 0:
            truth: bool | None = True
        elif diff.lo > 0 or diff.hi < 0:
            truth = False
        else:
            return None
        return truth if kind == "eq" else not truth
    if kind == "lt":
        return True if diff.hi < 0 else False if diff.lo >= 0 else None
    return True if diff.hi <= 0 else False if diff.lo > 0 else None


def static_truth(condition: Any, ranges: dict[sympy.Symbol, ValueRange]) -> bool | None:
    """True / False when the symbols' ranges decide `condition`, else None."""
    if condition is sympy.true or condition is True:
        return True
    if condition is sympy.false or condition is False:
        return False
    kind = _RELATIONS.get(type(condition))
    if kind is not None:
        diff = bound(sympy.expand(condition.lhs - condition.rhs), ranges)
        return _relation_truth(kind, diff)
    if isinstance(condition, sympy.Not):
        inner = static_truth(condition.args[0], ranges)
        return None if inner is None else not inner
    if isinstance(condition, sympy.And | sympy.Or):
        wanted = isinstance(condition, sympy.Or)
        unknown = False
        for arg in condition.args:
            truth = static_truth(arg, ranges)
            if truth is wanted:
                return wanted
            unknown = unknown or truth is None
        return None if unknown else not wanted
    return None


class _PythonPrinter(StrPrinter):
    """Prints sympy expressions as Python source over the symbols' local names."""

    _OPS = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

    def __init__(self, names: dict[sympy.Symbol, str] | None = None) -> None:
        super().__init__()
        self._names = names or {}

    def _print_Symbol(self, expr: Any) -> str:
        return self._names.get(expr, expr.name)

    def _print_Relational(self, expr: Any) -> str:
        lhs = self._print(expr.lhs)
        rhs = self._print(expr.rhs)
        return f"{lhs} {self._OPS[expr.rel_op]} {rhs}"

    def _operand(self, expr: Any) -> str:
        text = self._print(expr)
        return text if expr.is_Atom or isinstance(expr, FloorDiv | sympy.Mod) else f"({text})"

    def _print_FloorDiv(self, expr: Any) -> str:
        return f"({self._operand(expr.args[0])} // {self._operand(expr.args[1])})"

    def _print_Mod(self, expr: Any) -> str:
        return f"({self._operand(expr.args[0])} % {self._operand(expr.args[1])})"

    def _print_Max(self, expr: Any) -> str:
        return f"max({', '.join(self._print(arg) for arg in expr.args)})"

    def _print_Min(self, expr: Any) -> str:
        return f"min({', '.join(self._print(arg) for arg in expr.args)})"

    def _print_And(self, expr: Any) -> str:
        chained = _chained_range(expr)
        if chained is not None:
            lo, symbol, hi = chained
            return f"{lo} <= {self._print(symbol)} <= {hi}"
        return "(" + " and ".join(self._print(arg) for arg in expr.args) + ")"

    def _print_Or(self, expr: Any) -> str:
        return "(" + " or ".join(self._print(arg) for arg in expr.args) + ")"

    def _print_Not(self, expr: Any) -> str:
        return f"(not {self._print(expr.args[0])})"

    def _print_BooleanTrue(self, expr: Any) -> str:
        return "True"

    def _print_BooleanFalse(self, expr: Any) -> str:
        return "False"

    def _print_Piecewise(self, expr: Any) -> str:
        (value, condition), (other, _) = expr.args[0], expr.args[-1]
        cond = self._print(condition)
        return f"({self._print(value)} if {cond} else {self._print(other)})"

    def _print_Float(self, expr: Any) -> str:
        return repr(float(expr))  # every digit: a guard on a float input compares exactly

    def _print_floor(self, expr: Any) -> str:
        return f"({self._print(expr.args[0])} // 1)"

    def _print_ceiling(self, expr: Any) -> str:
        return f"(-(-{self._print(expr.args[0])} // 1))"

    def _print_Abs(self, expr: Any) -> str:
        return f"abs({self._print(expr.args[0])})"

    def _print_sign(self, expr: Any) -> str:  # sympy's `Abs(x)` may come back as x*sign(x)
        value = self._operand(expr.args[0])
        return f"(({value} > 0) - ({value} < 0))"


def _chained_range(expr: Any) -> tuple[Any, Any, Any] | None:
    """(lo, x, hi) for `And(lo <= x, x <= hi)` with constant ends, else None."""
    if len(expr.args) != 2 or not all(isinstance(arg, sympy.Le) for arg in expr.args):
        return None
    for low, high in (expr.args, expr.args[::-1]):
        if low.lhs.is_Number and high.rhs.is_Number and low.rhs == high.lhs:
            return low.lhs, low.rhs, high.rhs
    return None


_PRINTER = _PythonPrinter()


def python_code(expr: Any, names: dict[sympy.Symbol, str] | None = None) -> str:
    """`expr` as a Python expression; `names` renames symbols (default: their own names)."""
    printer = _PythonPrinter(names) if names else _PRINTER
    return printer.doprint(expr)


# ----------------------------------------------------------------- expressions as data

# The expression classes `expr_data` writes, by name: what shape guards and symbolic
# sizes are made of. Anything else is refused (a later process must rebuild the same).
_DATA_CLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        sympy.Add, sympy.Mul, sympy.Pow, sympy.Mod, sympy.Max, sympy.Min, sympy.Abs,
        sympy.floor, sympy.ceiling, sympy.And, sympy.Or, sympy.Not, sympy.Eq, sympy.Ne,
        sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge, FloorDiv,
    )
}  # fmt: skip
_SYMBOL_ASSUMPTIONS = ("integer", "positive", "real")


def expr_data(expr: Any) -> list:
    """`expr` (a sympy expression or condition) as JSON data; ValueError for a kind of
    expression `expr_of_data` would not rebuild."""
    if expr is sympy.true or expr is sympy.false:
        return ["bool", expr is sympy.true]
    if isinstance(expr, sympy.Symbol):
        # the assumptions it was made with (those implied print otherwise, as in srepr)
        given = getattr(expr, "_assumptions_orig", None)
        if given is None:
            given = {name: expr.assumptions0.get(name) for name in _SYMBOL_ASSUMPTIONS}
        return ["symbol", expr.name, {k: v for k, v in given.items() if v is not None}]
    if isinstance(expr, sympy.Integer):
        return ["integer", str(int(expr))]
    if isinstance(expr, sympy.Rational):
        return ["rational", str(expr.p), str(expr.q)]
    if isinstance(expr, sympy.Float):
        return ["float", repr(float(expr))]
    if expr in (sympy.oo, -sympy.oo):
        return ["infinity", expr == sympy.oo]
    name = type(expr).__name__
    if _DATA_CLASSES.get(name) is not type(expr):
        raise ValueError(f"a symbolic expression of kind {name} ({expr})")
    return ["apply", name, [expr_data(arg) for arg in expr.args]]


def expr_of_data(data: list) -> Any:
    """The expression `expr_data` gave `data` for."""
    tag = data[0]
    if tag == "bool":
        return sympy.true if data[1] else sympy.false
    if tag == "symbol":
        assumptions = {k: bool(v) for k, v in data[2].items() if k in _assume_defined}
        return sympy.Symbol(str(data[1]), **assumptions)
    if tag == "integer":
        return sympy.Integer(int(data[1]))
    if tag == "rational":
        return sympy.Rational(int(data[1]), int(data[2]))
    if tag == "float":
        return sympy.Float(float(data[1]))
    if tag == "infinity":
        return sympy.oo if data[1] else -sympy.oo
    if tag == "apply":
        return _DATA_CLASSES[data[1]](*(expr_of_data(arg) for arg in data[2]))
    raise ValueError(f"unknown expression tag {tag!r}")
