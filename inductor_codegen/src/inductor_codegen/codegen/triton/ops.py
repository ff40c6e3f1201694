"""Triton types, literals and casts, and the helpers the op table's Triton column spells with.

Values are computed in float32 for bfloat16 and float16 (loads convert up,
stores round down), as on the CPU side. Functions without a `tl` builtin go
through `libdevice`, and so do exp, exp2, log, log2 and erf, whose `tl` forms are
fast approximations on float32 (ex2.approx, lg2.approx): torch.compile spells exp,
exp2, log2, tanh and erf through libdevice too. The generated module binds that name
to Triton's CUDA libdevice, or to numpy under the interpreter (see `interpreter_math`).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "POLYNOMIAL_MATH",
    "TRITON_DTYPES",
    "as_tensor_text",
    "by_kind",
    "cast_text",
    "compute_dtype",
    "divide",
    "float_helper",
    "literal",
    "maximum",
    "minimum",
    "power",
    "sign",
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
# Functions evaluated in software (libdevice's polynomials and their argument reduction,
# tens of dependent instructions an element), unlike exp, log, sin, sqrt and rsqrt, which
# map to the GPU's special function unit. A flat kernel calling one is launched with more
# elements a thread (see heuristics.MATH_XBLOCK).
POLYNOMIAL_MATH = frozenset(
    {
        "erf", "erfc", "tanh", "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh",
        "acosh", "atanh", "atan2", "hypot", "lgamma", "expm1", "log1p", "log10", "pow",
    }
)  # fmt: skip


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


def by_kind(int_emit, float_emit):
    def emit(args, dtypes, out):
        floating = out.is_floating_point or any(t.is_floating_point for t in dtypes)
        return (float_emit if floating else int_emit)(args, dtypes, out)

    return emit


SMALL_POWERS = {"2.0": 2, "3.0": 3, "2": 2, "3": 3}


def sqrt(args, dtypes, out):
    """Correctly rounded: `tl.sqrt_rn` takes float32 only; float64 goes to libdevice."""
    if out == torch.float64:
        return f"libdevice.sqrt({args[0]})"
    return f"tl.sqrt_rn({args[0]})"


def in_compute_type(text: str, dtype: torch.dtype, out: torch.dtype) -> str:
    """`text` as a tensor of out's compute type: a literal becomes one (Python floats are
    float32 to Triton), a value of another compute type is converted."""
    target = compute_dtype(out)
    wrapped = as_tensor_text(text, target)
    if wrapped != text:
        return wrapped
    if compute_dtype(dtype) != target:
        return f"{text}.to({TRITON_DTYPES[target]})"
    return text


def divide(args, dtypes, out):
    """Correctly rounded float division, as eager's: Triton's `/` on float32 is
    `div.full.f32` (2 ulp), so `x / x` may be just below 1 and a floor of a quotient off
    by one. `tl.div_rn` takes float32 only; float64's `/` is already correctly rounded."""
    if compute_dtype(out) != torch.float32:
        return f"({args[0]} / {args[1]})"
    a, b = (in_compute_type(t, d, out) for t, d in zip(args, dtypes))
    return f"tl.div_rn({a}, {b})"


def float_helper(name: str):
    """A prelude function of float tensors (`ember_floordiv_float(a, b)`), its operands in
    the result's compute type: the helpers read their dtype, which a literal has not."""

    def emit(args, dtypes, out):
        operands = [in_compute_type(t, d, out) for t, d in zip(args, dtypes)]
        return f"{name}({', '.join(operands)})"

    return emit


def power(args, dtypes, out):
    if args[1] in SMALL_POWERS:  # x**2, x**3 (GELU's tanh form) as products, not libdevice.pow
        return "(" + " * ".join([args[0]] * SMALL_POWERS[args[1]]) + ")"
    if args[1] == "0.5" and out.is_floating_point:
        return sqrt(args[:1], dtypes[:1], out)
    if out.is_floating_point:
        # libdevice.pow has (float32, float32) and (float64, float64) forms, no mixed one:
        # both operands in the result's compute type (a float64 base, a literal exponent).
        base, exponent = (in_compute_type(t, d, out) for t, d in zip(args, dtypes))
        return f"libdevice.pow({base}, {exponent})"
    base = f"{args[0]}.to(tl.float64)"
    return f"libdevice.pow({base}, {args[1]}.to(tl.float64)).to({TRITON_DTYPES[out]})"


def maximum(a, d, o):
    return f"tl.where(({a[0]} > {a[1]}) | ({a[0]} != {a[0]}), {a[0]}, {a[1]})"


def minimum(a, d, o):
    return f"tl.where(({a[0]} < {a[1]}) | ({a[0]} != {a[0]}), {a[0]}, {a[1]})"


def fmax(a, d, o):
    """torch.fmax: a NaN operand gives the other (libdevice has no fmax to call)."""
    return f"tl.where(({a[0]} > {a[1]}) | ({a[1]} != {a[1]}), {a[0]}, {a[1]})"


def fmin(a, d, o):
    """torch.fmin: a NaN operand gives the other."""
    return f"tl.where(({a[0]} < {a[1]}) | ({a[1]} != {a[1]}), {a[0]}, {a[1]})"


def sign(a, d, o):
    one = literal(1, compute_dtype(o))
    zero = literal(0, compute_dtype(o))
    return f"(tl.where({a[0]} > 0, {one}, {zero}) - tl.where({a[0]} < 0, {one}, {zero}))"
