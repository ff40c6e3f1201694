"""Op text that the C++ and Triton printers write alike.

An op table maps an op name to `emit(args, dtypes, out) -> str`: the argument
texts, their dtypes and the result dtype in, the expression text out. The
infix arithmetic, comparisons, bitwise operators and negation read the same in
C++ and Triton; each printer's table starts from `SHARED_OPS` and adds its own
functions (`std::exp` or `tl.exp`, ...).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SHARED_OPS", "call", "infix"]

Emit = Callable[[list[str], list, object], str]


def call(fn: str) -> Emit:
    """`fn(a, b, ...)`."""
    return lambda args, dtypes, out: f"{fn}({', '.join(args)})"


def infix(symbol: str) -> Emit:
    """`(a symbol b)`."""
    return lambda args, dtypes, out: f"({args[0]} {symbol} {args[1]})"


_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "bitwise_and": "&",
    "bitwise_or": "|",
    "bitwise_xor": "^",
}

SHARED_OPS: dict[str, Emit] = {name: infix(symbol) for name, symbol in _INFIX.items()}
SHARED_OPS["neg"] = lambda args, dtypes, out: f"(-{args[0]})"
