"""Triton text of scalar IR ops: a table keyed by op name, literals and casts.

Values are computed in float32 for bfloat16 and float16 (loads convert up,
stores round down), as on the CPU side. Functions without a `tl` builtin go
through `libdevice`; the generated module binds that name to Triton's CUDA
libdevice, or to numpy under the interpreter (see `interpreter_math`).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "TRITON_DTYPES",
    "TRITON_OPS",
    "as_tensor_text",
    "cast_text",
    "compute_dtype",
    "literal",
]

TRITON_DTYPES = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.bfloat16: "tl.bfloat16",
    torch.float16: "tl.float16",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}
LOW_PRECISION = (torch.bfloat16, torch.float16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a value of `dtype` is computed in (float32 for 16-bit floats)."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def literal(value, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            return f'float("{value}")'
        return repr(value)
    return str(int(value))


def as_tensor_text(text: str, dtype: torch.dtype) -> str:
    """A literal as a one-element tensor (Python numbers have no `.to`); other text as is."""
    if text in ("True", "False") or text.startswith('float("'):
        return f"tl.full([1], {text}, {TRITON_DTYPES[compute_dtype(dtype)]})"
    try:
        float(text)
    except ValueError:
        return text
    return f"tl.full([1], {text}, {TRITON_DTYPES[compute_dtype(dtype)]})"


def cast_text(text: str, src: torch.dtype, dst: torch.dtype) -> str:
    """`text` (computed in compute_dtype(src)) converted to the compute type of `dst`."""
    text = as_tensor_text(text, src)
    if dst == torch.bool:
        return f"({text} != 0)"
    if dst in LOW_PRECISION:
        return f"{text}.to({TRITON_DTYPES[dst]}).to(tl.float32)"
    if compute_dtype(src) == dst:
        return text
    return f"{text}.to({TRITON_DTYPES[dst]})"


def _call(fn):
    return lambda a, d, o: f"{fn}({', '.join(a)})"


def _infix(symbol):
    return lambda a, d, o: f"({a[0]} {symbol} {a[1]})"


def _by_kind(int_emit, float_emit):
    def emit(args, dtypes, out):
        floating = out.is_floating_point or any(t.is_floating_point for t in dtypes)
        return (float_emit if floating else int_emit)(args, dtypes, out)

    return emit


SMALL_POWERS = {"2.0": 2, "3.0": 3, "2": 2, "3": 3}


def _pow(args, dtypes, out):
    if args[1] in SMALL_POWERS:  # x**2, x**3 (GELU's tanh form) as products, not libdevice.pow
        return "(" + " * ".join([args[0]] * SMALL_POWERS[args[1]]) + ")"
    if args[1] == "0.5" and out.is_floating_point:
        return f"tl.sqrt_rn({args[0]})"
    if out.is_floating_point:
        return f"libdevice.pow({args[0]}, {args[1]})"
    base = f"{args[0]}.to(tl.float64)"
    return f"libdevice.pow({base}, {args[1]}.to(tl.float64)).to({TRITON_DTYPES[out]})"


def _maximum(a, d, o):
    return f"tl.where(({a[0]} > {a[1]}) | ({a[0]} != {a[0]}), {a[0]}, {a[1]})"


def _minimum(a, d, o):
    return f"tl.where(({a[0]} < {a[1]}) | ({a[0]} != {a[0]}), {a[0]}, {a[1]})"


def _sign(a, d, o):
    one = literal(1, compute_dtype(o))
    zero = literal(0, compute_dtype(o))
    return f"(tl.where({a[0]} > 0, {one}, {zero}) - tl.where({a[0]} < 0, {one}, {zero}))"


TRITON_OPS = {
    "add": _infix("+"),
    "sub": _infix("-"),
    "mul": _infix("*"),
    "truediv": _infix("/"),
    "floordiv": _by_kind(_call("ember_floordiv_int"), _call("ember_floordiv_float")),
    "truncdiv": _by_kind(_infix("//"), _call("ember_truncdiv_float")),
    "remainder": _by_kind(_call("ember_remainder_int"), _call("ember_remainder_float")),
    "fmod": _infix("%"),
    "pow": _pow,
    "maximum": _maximum,
    "minimum": _minimum,
    "clamp_min": _maximum,
    "clamp_max": _minimum,
    "fmax": _call("libdevice.fmax"),
    "fmin": _call("libdevice.fmin"),
    "atan2": _call("libdevice.atan2"),
    "hypot": _call("libdevice.hypot"),
    "copysign": _call("libdevice.copysign"),
    "eq": _infix("=="),
    "ne": _infix("!="),
    "lt": _infix("<"),
    "le": _infix("<="),
    "gt": _infix(">"),
    "ge": _infix(">="),
    "logical_and": lambda a, d, o: f"(({a[0]} != 0) & ({a[1]} != 0))",
    "logical_or": lambda a, d, o: f"(({a[0]} != 0) | ({a[1]} != 0))",
    "logical_xor": lambda a, d, o: f"(({a[0]} != 0) ^ ({a[1]} != 0))",
    "bitwise_and": _infix("&"),
    "bitwise_or": _infix("|"),
    "bitwise_xor": _infix("^"),
    "where": lambda a, d, o: f"tl.where({a[0]}, {a[1]}, {a[2]})",
    "neg": lambda a, d, o: f"(-{a[0]})",
    "abs": _call("tl.abs"),
    "exp": _call("tl.exp"),
    "exp2": _call("tl.exp2"),
    "expm1": _call("libdevice.expm1"),
    "log": _call("tl.log"),
    "log2": _call("tl.log2"),
    "log10": _call("libdevice.log10"),
    "log1p": _call("libdevice.log1p"),
    "sqrt": _call("tl.sqrt_rn"),
    "rsqrt": _call("tl.rsqrt"),
    "sin": _call("tl.sin"),
    "cos": _call("tl.cos"),
    "tan": _call("libdevice.tan"),
    "asin": _call("libdevice.asin"),
    "acos": _call("libdevice.acos"),
    "atan": _call("libdevice.atan"),
    "sinh": _call("libdevice.sinh"),
    "cosh": _call("libdevice.cosh"),
    "tanh": _call("libdevice.tanh"),
    "asinh": _call("libdevice.asinh"),
    "acosh": _call("libdevice.acosh"),
    "atanh": _call("libdevice.atanh"),
    "erf": _call("tl.erf"),
    "erfc": _call("libdevice.erfc"),
    "lgamma": _call("libdevice.lgamma"),
    "sigmoid": lambda a, d, o: f"(1.0 / (1.0 + tl.exp(-{a[0]})))",
    "sign": _sign,
    "relu": lambda a, d, o: f"tl.where({a[0]} < 0, 0, {a[0]})",
    "reciprocal": lambda a, d, o: f"(1.0 / {a[0]})",
    "floor": _call("tl.floor"),
    "ceil": _call("tl.ceil"),
    "round": _call("libdevice.nearbyint"),
    "trunc": _call("libdevice.trunc"),
    "frac": lambda a, d, o: f"({a[0]} - libdevice.trunc({a[0]}))",
    "isnan": lambda a, d, o: f"({a[0]} != {a[0]})",
    "isinf": lambda a, d, o: f'(tl.abs({a[0]}) == float("inf"))',
    "signbit": lambda a, d, o: f"(libdevice.signbit({a[0]}) != 0)",
    "logical_not": lambda a, d, o: f"({a[0]} == 0)",
    "philox_rand": lambda a, d, o: f"tl.rand({a[0]}, {a[1]})",
    "bitwise_not": lambda a, d, o: f"({a[0]} == 0)" if o == torch.bool else f"(~{a[0]})",
}
