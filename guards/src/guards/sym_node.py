"""SymNode: the node object behind `torch.SymInt` / `SymFloat` / `SymBool` for Ember.

torch's C++ side wraps any Python object that implements the SymNode protocol;
every arithmetic or comparison on a `torch.SymInt` calls a method of its node
(`add`, `mul`, `eq`, `floordiv`, ...) and every point where a concrete value is
needed calls a guard method (`guard_bool`, `guard_int`, `expect_true`,
`guard_size_oblivious`, ...). A `SymNode` holds a sympy expression over the
symbols of one `ShapeEnv`, its Python type and its hint (the value in the
example inputs); its guard methods ask the `ShapeEnv`, which answers from the
ranges when it can and otherwise from the hint, recording the assumption.

    >>> env = ShapeEnv()
    >>> n = env.create_symint(env.create_symbol(8, source))
    >>> (n * 2 + 1).node.expr, (n * 2 + 1).node.hint
    (2*s0 + 1, 17)

The operations are tables keyed by the protocol's method names
(`BINARY_OPS`, `UNARY_OPS`); `SIZES_STRIDES_OPS` answers the contiguity
questions torch asks when it builds a tensor of symbolic shape.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sympy

from guards.sym_exprs import FloorDiv

if TYPE_CHECKING:
    from guards.shape_env import ShapeEnv

__all__ = ["BINARY_OPS", "SIZES_STRIDES_OPS", "UNARY_OPS", "SymNode"]

Hint = int | float | bool


def _as_number_expr(node: SymNode) -> sympy.Expr:
    """A bool node as 0/1 for arithmetic (SymBool + int is an int in Python)."""
    if node.pytype is bool:
        return sympy.Piecewise((sympy.Integer(1), node.expr), (sympy.Integer(0), True))
    return node.expr


def _float_floordiv(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    return sympy.floor(a / b)


def _mod(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr:
    return sympy.Mod(a, b)


def _python_floordiv(a: Hint, b: Hint) -> Hint:
    return a // b


# name -> (sympy rule, hint rule, result type: "promote" | "int" | "float" | "bool")
BINARY_OPS: dict[str, tuple[Callable, Callable, str]] = {
    "add": (operator.add, operator.add, "promote"),
    "sub": (operator.sub, operator.sub, "promote"),
    "mul": (operator.mul, operator.mul, "promote"),
    "mod": (_mod, operator.mod, "promote"),
    "pow": (operator.pow, operator.pow, "promote"),
    "pow_by_natural": (operator.pow, operator.pow, "int"),
    "float_pow": (operator.pow, lambda a, b: float(a) ** b, "float"),
    "truediv": (operator.truediv, operator.truediv, "float"),
    "int_truediv": (operator.truediv, operator.truediv, "float"),
    "float_truediv": (operator.truediv, operator.truediv, "float"),
    "floordiv": (FloorDiv, _python_floordiv, "promote"),
    "int_floordiv": (FloorDiv, _python_floordiv, "int"),
    "sym_max": (sympy.Max, max, "promote"),
    "sym_min": (sympy.Min, min, "promote"),
    "eq": (sympy.Eq, operator.eq, "bool"),
    "ne": (sympy.Ne, operator.ne, "bool"),
    "lt": (sympy.Lt, operator.lt, "bool"),
    "le": (sympy.Le, operator.le, "bool"),
    "gt": (sympy.Gt, operator.gt, "bool"),
    "ge": (sympy.Ge, operator.ge, "bool"),
    "sym_and": (sympy.And, lambda a, b: bool(a and b), "bool"),
    "sym_or": (sympy.Or, lambda a, b: bool(a or b), "bool"),
    "and_": (sympy.And, lambda a, b: bool(a and b), "bool"),
    "or_": (sympy.Or, lambda a, b: bool(a or b), "bool"),
    "bitwise_and": (sympy.And, lambda a, b: bool(a and b), "bool"),
    "bitwise_or": (sympy.Or, lambda a, b: bool(a or b), "bool"),
    "lshift": (lambda a, b: a * 2**b, operator.lshift, "int"),
    "rshift": (lambda a, b: FloorDiv(a, 2**b), operator.rshift, "int"),
}

_FLOOR = {"floor": sympy.floor, "ceil": sympy.ceiling}

# name -> (sympy rule, hint rule, result type: "same" | "int" | "float" | "bool")
UNARY_OPS: dict[str, tuple[Callable, Callable, str]] = {
    "neg": (operator.neg, operator.neg, "same"),
    "pos": (lambda a: a, lambda a: a, "same"),
    "abs": (sympy.Abs, abs, "same"),
    "sym_not": (sympy.Not, operator.not_, "bool"),
    "sym_float": (lambda a: a, float, "float"),
    "sym_int": (lambda a: sympy.Integer(a) if a.is_Number else sympy.floor(a), int, "int"),
    "floor": (sympy.floor, math.floor, "int"),
    "ceil": (sympy.ceiling, math.ceil, "int"),
    "trunc": (lambda a: sympy.sign(a) * sympy.floor(sympy.Abs(a)), math.trunc, "int"),
    "is_integer": (lambda a: sympy.Eq(a, sympy.floor(a)), lambda a: float(a).is_integer(), "bool"),
    "sym_sqrt": (sympy.sqrt, math.sqrt, "float"),
    "sym_cos": (sympy.cos, math.cos, "float"),
    "sym_cosh": (sympy.cosh, math.cosh, "float"),
    "sym_sin": (sympy.sin, math.sin, "float"),
    "sym_sinh": (sympy.sinh, math.sinh, "float"),
    "sym_tan": (sympy.tan, math.tan, "float"),
    "sym_tanh": (sympy.tanh, math.tanh, "float"),
    "sym_asin": (sympy.asin, math.asin, "float"),
    "sym_acos": (sympy.acos, math.acos, "float"),
    "sym_atan": (sympy.atan, math.atan, "float"),
    "sym_log2": (lambda a: sympy.log(a, 2), math.log2, "float"),
}


def _result_type(rule: str, a: type, b: type | None = None) -> type:
    if rule == "promote":
        types = {a, b or a}
        return float if float in types else int
    if rule == "same":
        return int if a is bool else a
    return {"int": int, "float": float, "bool": bool}[rule]


class SymNode:
    """A symbolic int, float or bool: a sympy expression over one ShapeEnv's symbols.

    Attributes:
        shape_env: the ShapeEnv that owns the symbols.
        pytype: int, float or bool.
        _hint: the value at the example inputs (None when unknown).
    """

    __slots__ = ("_expr", "shape_env", "pytype", "_hint", "_version", "_simplified")

    def __init__(self, expr: Any, shape_env: ShapeEnv, pytype: type, hint: Hint | None) -> None:
        self._expr = sympy.sympify(expr)
        self.shape_env = shape_env
        self.pytype = pytype
        self._hint = hint
        self._version = -1
        self._simplified = self._expr

    # ------------------------------------------------------------------ identity

    @property
    def expr(self) -> sympy.Expr:
        """The expression with the ShapeEnv's known replacements applied."""
        env = self.shape_env
        if self._version != env.version:
            self._simplified = env.replace(self._expr)
            self._version = env.version
        return self._simplified

    @property
    def hint(self) -> Hint | None:
        return self._hint

    def has_hint(self) -> bool:
        return self._hint is not None

    def is_int(self) -> bool:
        return self.pytype is int

    def is_float(self) -> bool:
        return self.pytype is float

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_nested_int(self) -> bool:
        return False

    def nested_int(self) -> None:
        return None

    def nested_int_coeff(self) -> None:
        return None

    def is_symbolic(self) -> bool:
        return True

    def is_constant(self) -> bool:
        return False

    def maybe_as_int(self) -> int | None:
        expr = self.expr
        return int(expr) if self.pytype is int and expr.is_Integer else None

    def maybe_as_float(self) -> float | None:
        expr = self.expr
        return float(expr) if self.pytype is float and expr.is_Number else None

    def maybe_as_bool(self) -> bool | None:
        expr = self.expr
        if expr is sympy.true:
            return True
        if expr is sympy.false:
            return False
        return None

    def wrap_int(self, num: int) -> SymNode:
        return SymNode(sympy.Integer(num), self.shape_env, int, num)

    def wrap_float(self, num: float) -> SymNode:
        return SymNode(sympy.Float(num), self.shape_env, float, num)

    def wrap_bool(self, num: bool) -> SymNode:
        return SymNode(sympy.true if num else sympy.false, self.shape_env, bool, num)

    def clone(self) -> SymNode:
        return self

    def with_shape_env(self, shape_env: ShapeEnv) -> SymNode:
        return SymNode(self._expr, shape_env, self.pytype, self._hint)

    def str(self) -> str:
        return str(self.expr)

    def __str__(self) -> str:
        return str(self.expr)

    def __repr__(self) -> str:
        return f"SymNode({self.expr}, {self.pytype.__name__}, hint={self._hint})"

    def _graph_repr(self) -> str:
        return str(self.expr)

    # ------------------------------------------------------------------ operations

    def _binary(self, name: str, other: SymNode) -> SymNode:
        sym_rule, hint_rule, result = BINARY_OPS[name]
        if result == "bool" and self.pytype is not bool:
            a, b = self.expr, other.expr
        elif result == "bool":
            a, b = self.expr, other.expr
        else:
            a, b = _as_number_expr(self), _as_number_expr(other)
        pytype = _result_type(result, self.pytype, other.pytype)
        if result == "bool" and self.pytype is bool and name in ("eq", "ne"):
            expr = sympy.Equivalent(a, b) if name == "eq" else sympy.Xor(a, b)
        else:
            expr = sym_rule(a, b)
        hint = None
        if self._hint is not None and other._hint is not None:
            hint = hint_rule(self._hint, other._hint)
            hint = pytype(hint)
        return SymNode(expr, self.shape_env, pytype, hint)

    def _unary(self, name: str) -> SymNode:
        sym_rule, hint_rule, result = UNARY_OPS[name]
        pytype = _result_type(result, self.pytype)
        expr = sym_rule(_as_number_expr(self) if result != "bool" else self.expr)
        hint = None if self._hint is None else pytype(hint_rule(self._hint))
        return SymNode(expr, self.shape_env, pytype, hint)

    def sym_ite(self, then_node: SymNode, else_node: SymNode) -> SymNode:
        expr = sympy.Piecewise((then_node.expr, self.expr), (else_node.expr, True))
        hint = None
        if self._hint is not None:
            hint = then_node._hint if self._hint else else_node._hint
        return SymNode(expr, self.shape_env, then_node.pytype, hint)

    def sym_sum(self, args: list[SymNode]) -> SymNode:
        """The sum of `args` (the receiver is not one of the terms)."""
        expr = sympy.Add(*(_as_number_expr(arg) for arg in args))
        hints = [arg._hint for arg in args]
        pytype = float if any(arg.pytype is float for arg in args) else int
        hint = None if any(h is None for h in hints) else pytype(sum(hints))
        return SymNode(expr, self.shape_env, pytype, hint)

    def round(self, ndigits: int | None = None) -> SymNode:
        if ndigits is not None:
            value = self.guard_float("", 0)
            return self.wrap_float(round(value, ndigits))
        expr = sympy.floor(self.expr + sympy.Rational(1, 2))
        hint = None if self._hint is None else round(self._hint)
        return SymNode(expr, self.shape_env, int, hint)

    # ------------------------------------------------------------------ sizes and strides

    def _sizes_strides(self, name: str, sizes: list[SymNode], strides: list[SymNode]) -> SymNode:
        answer = SIZES_STRIDES_OPS[name](self.shape_env, sizes, strides)
        if name == "is_non_overlapping_and_dense_indicator":
            return self.wrap_int(int(answer))
        return self.wrap_bool(answer)

    # ------------------------------------------------------------------ guards

    def guard_bool(self, file: str = "", line: int = 0) -> bool:
        return bool(self.shape_env.evaluate(self, where=_where(file, line)))

    def guard_int(self, file: str = "", line: int = 0) -> int:
        return int(self.shape_env.evaluate(self, where=_where(file, line)))

    def guard_float(self, file: str = "", line: int = 0) -> float:
        return float(self.shape_env.evaluate(self, where=_where(file, line)))

    def expect_true(self, file: str = "", line: int = 0) -> bool:
        return bool(self.shape_env.evaluate(self, where=_where(file, line)))

    def expect_size(self, file: str = "", line: int = 0) -> bool:
        ge = self._binary("ge", self.wrap_int(0))
        return ge.expect_true(file, line)

    def guard_size_oblivious(self, file: str = "", line: int = 0) -> bool:
        where = _where(file, line)
        return bool(self.shape_env.evaluate(self, where=where, size_oblivious=True))

    def guard_or_false(self, file: str = "", line: int = 0) -> bool:
        return self.guard_bool(file, line)

    def guard_or_true(self, file: str = "", line: int = 0) -> bool:
        return self.guard_bool(file, line)

    def statically_known_true(self, file: str = "", line: int = 0) -> bool:
        return self.shape_env.static_value(self.expr) is True

    def evaluate(self, size_oblivious: bool = False) -> Hint:
        return self.shape_env.evaluate(self, size_oblivious=size_oblivious)

    def bool_(self) -> bool:
        return self.guard_bool("", 0)

    def int_(self) -> int:
        return self.guard_int("", 0)

    def float_(self) -> float:
        return self.guard_float("", 0)


def _where(file: str, line: int) -> str:
    return f"{file}:{line}" if file else ""


def _make_binary(name: str) -> Callable[[SymNode, SymNode], SymNode]:
    def method(self: SymNode, other: SymNode) -> SymNode:
        return self._binary(name, other)

    method.__name__ = name
    return method


def _make_unary(name: str) -> Callable[[SymNode], SymNode]:
    def method(self: SymNode) -> SymNode:
        return self._unary(name)

    method.__name__ = name
    return method


def _make_sizes_strides(name: str) -> Callable[[SymNode, list, list], SymNode]:
    def method(self: SymNode, sizes: list[SymNode], strides: list[SymNode]) -> SymNode:
        return self._sizes_strides(name, sizes, strides)

    method.__name__ = name
    return method


# ---------------------------------------------------------------------------- contiguity


def _expr(value: Any) -> sympy.Expr:
    return value.expr if isinstance(value, SymNode) else sympy.Integer(value)


def _dense_in_order(env: ShapeEnv, sizes: list, strides: list, order: list[int]) -> bool:
    """Strides are those of a dense tensor laid out with dims `order`, innermost first."""
    size_exprs = [_expr(s) for s in sizes]
    stride_exprs = [_expr(s) for s in strides]
    if any(env.decide(sympy.Eq(size, 0)) for size in size_exprs):
        return True
    expected: sympy.Expr = sympy.Integer(1)
    for dim in order:
        size = size_exprs[dim]
        if env.decide(sympy.Eq(size, 1)):
            continue
        if not env.decide(sympy.Eq(stride_exprs[dim], expected)):
            return False
        expected = expected * size
    return True


def is_contiguous(env: ShapeEnv, sizes: list, strides: list) -> bool:
    """torch's `is_contiguous()` on symbolic sizes and strides."""
    return _dense_in_order(env, sizes, strides, list(range(len(sizes) - 1, -1, -1)))


def _channels_last_order(ndim: int) -> list[int]:
    return [1, *range(ndim - 1, 1, -1), 0]


def is_channels_last_contiguous(env: ShapeEnv, sizes: list, strides: list, ndim: int) -> bool:
    """`is_contiguous(memory_format=torch.channels_last[_3d])` on symbolic values."""
    if len(sizes) != ndim:
        return False
    return _dense_in_order(env, sizes, strides, _channels_last_order(ndim))


def is_channels_last_strides(env: ShapeEnv, sizes: list, strides: list, ndim: int) -> bool:
    """torch's heuristic of whether strides suggest channels-last (for suggest_memory_format)."""
    if len(sizes) != ndim:
        return False
    size_exprs = [_expr(s) for s in sizes]
    stride_exprs = [_expr(s) for s in strides]
    minimum: sympy.Expr = sympy.Integer(0)
    if env.decide(sympy.Eq(stride_exprs[1], 0)):
        return False
    for dim in _channels_last_order(ndim):
        if env.decide(sympy.Eq(size_exprs[dim], 0)):
            return False
        if env.decide(sympy.Lt(stride_exprs[dim], minimum)):
            return False
        if dim == 0 and env.decide(sympy.Eq(minimum, stride_exprs[1])):
            return False
        minimum = stride_exprs[dim]
        if env.decide(sympy.Gt(size_exprs[dim], 1)):
            minimum = minimum * size_exprs[dim]
    return True


def is_non_overlapping_and_dense(env: ShapeEnv, sizes: list, strides: list) -> bool:
    """Whether the strides are a permutation of a dense layout (no gaps, no overlap)."""
    size_exprs = [_expr(s) for s in sizes]
    stride_exprs = [_expr(s) for s in strides]
    if len(sizes) == 1:
        return env.decide(sympy.Lt(size_exprs[0], 2)) or env.decide(sympy.Eq(stride_exprs[0], 1))

    def compare(a: int, b: int) -> int:
        if env.decide(sympy.Lt(stride_exprs[a], stride_exprs[b])):
            return -1
        if env.decide(sympy.Lt(stride_exprs[b], stride_exprs[a])):
            return 1
        return 0

    order = sorted(range(len(sizes)), key=functools.cmp_to_key(compare))
    return _dense_in_order(env, sizes, strides, order)


SIZES_STRIDES_OPS: dict[str, Callable[[Any, list, list], bool]] = {
    "is_contiguous": is_contiguous,
    "is_channels_last_contiguous_2d": functools.partial(is_channels_last_contiguous, ndim=4),
    "is_channels_last_contiguous_3d": functools.partial(is_channels_last_contiguous, ndim=5),
    "is_channels_last_strides_2d": functools.partial(is_channels_last_strides, ndim=4),
    "is_channels_last_strides_3d": functools.partial(is_channels_last_strides, ndim=5),
    "is_non_overlapping_and_dense_indicator": is_non_overlapping_and_dense,
    "is_non_overlapping_and_dense": is_non_overlapping_and_dense,
}

for _name in BINARY_OPS:
    setattr(SymNode, _name, _make_binary(_name))
for _name in UNARY_OPS:
    setattr(SymNode, _name, _make_unary(_name))
for _name in SIZES_STRIDES_OPS:
    setattr(SymNode, _name, _make_sizes_strides(_name))
del _name
