"""C++ types of each dtype and the helpers the op table's C++ column spells with."""

from __future__ import annotations

import torch

__all__ = [
    "COMPUTE_TYPES",
    "STORAGE_TYPES",
    "bool_infix",
    "compute_type",
    "integral_or",
    "select",
    "templated",
]

STORAGE_TYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.bfloat16: "uint16_t",
    torch.float16: "_Float16",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.int16: "int16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    # NOTE: bytes, not C++ bool: gcc does not vectorize loops that store a
    # comparison through a bool pointer. Values in registers stay bool.
    torch.bool: "uint8_t",
}
COMPUTE_TYPES = {
    **STORAGE_TYPES,
    torch.bfloat16: "float",
    torch.float16: "float",
    torch.bool: "bool",
}


def compute_type(dtype: torch.dtype) -> str:
    return COMPUTE_TYPES[dtype]


def bool_infix(bitwise, logical):
    """The bitwise form on two bools already in variables (no branch keeps the loop
    from vectorizing); the short-circuit one otherwise (inline text may guard a load)."""

    def emit(args, dtypes, out):
        computed = all(d == torch.bool for d in dtypes) and all(a.isidentifier() for a in args)
        return f"({args[0]} {bitwise if computed else logical} {args[1]})"

    return emit


def quiet_compare(symbol: str, builtin: str):
    """An ordered comparison; of floats through gcc's quiet builtin (same result, false
    when either side is NaN, but no invalid-operation trap), which gcc may evaluate
    unconditionally, so a loop comparing values computed by selects still vectorizes."""

    def emit(args, dtypes, out):
        if any(d.is_floating_point for d in dtypes):
            return f"{builtin}({args[0]}, {args[1]})"
        return f"({args[0]} {symbol} {args[1]})"

    return emit


def select(args, dtypes, out):
    """`where(cond, a, b)` on values already evaluated (both sides are, as in eager).

    Integers are blended bitwise (`ember_select_bits`): gcc 12 leaves a loop of three or
    more int64 selects driven by float comparisons (a max pool's indices) scalar, and
    vectorizes the blend. Two equal sides need no select. Floats keep `?:`, which gcc
    vectorizes and a blend would not keep bit-exact.
    """
    cond, a, b = args
    if a == b:
        return a
    if all(_is_integer(d) for d in (out, *dtypes[1:])):
        return f"ember_select_bits<{compute_type(out)}>({cond}, {a}, {b})"
    return f"({cond} ? {a} : {b})"


def _is_integer(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def templated(fn):
    return lambda args, dtypes, out: f"{fn}<{compute_type(out)}>({', '.join(args)})"


def integral_or(int_fn, float_fn):
    def emit(args, dtypes, out):
        fn = int_fn if not out.is_floating_point and out != torch.bool else float_fn
        return fn(args, dtypes, out)

    return emit
