"""The shapes of op text both languages write: a function call and an infix operator.

A spelling maps the argument texts, their dtypes and the result dtype to the
expression text: `emit(args, dtypes, out) -> str` (see `codegen.ops`).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Emit", "call", "infix"]

Emit = Callable[[list[str], list, object], str]


def call(fn: str) -> Emit:
    """`fn(a, b, ...)`."""
    return lambda args, dtypes, out: f"{fn}({', '.join(args)})"


def infix(symbol: str) -> Emit:
    """`(a symbol b)`."""
    return lambda args, dtypes, out: f"({args[0]} {symbol} {args[1]})"
