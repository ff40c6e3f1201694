"""The op table: one row per scalar IR op, with its spelling in each language.

A spelling is `emit(args, dtypes, out) -> str`: the argument texts, their
dtypes and the result dtype in, the expression text out. The C++ printer
reads the `cpp` column (`CPP_OPS`), the Triton printer the `triton` column
(`TRITON_OPS`). An op one language cannot spell has None there, and that
printer raises a clear error naming the op.

Adding an op that a lowering emits (`op("erfinv", x)`) is one row here:

    "erfinv": Spelling(cpp=call("ember_erfinv"), triton=call("libdevice.erfinv")),

The language's helpers (C++ templates over the compute type, Triton's NaN-aware
maximum, ...) live beside its types in `codegen/cpp/ops.py` and
`codegen/triton/ops.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inductor_codegen.codegen.cpp import ops as cpp
from inductor_codegen.codegen.cpp.vector_math import vector_math_call
from inductor_codegen.codegen.op_text import Emit, call, infix
from inductor_codegen.codegen.triton import ops as triton

__all__ = ["CPP_OPS", "OPS", "TRITON_OPS", "Spelling", "spellings"]


@dataclass(frozen=True, slots=True)
class Spelling:
    """How one op is written in C++ and in Triton (None: that language cannot)."""

    cpp: Emit | None
    triton: Emit | None


def same(emit: Emit) -> Spelling:
    """An op written alike in both languages (infix arithmetic, comparisons)."""
    return Spelling(cpp=emit, triton=emit)


OPS: dict[str, Spelling] = {
    "add": same(infix("+")),
    "sub": same(infix("-")),
    "mul": same(infix("*")),
    "truediv": Spelling(cpp=infix("/"), triton=triton.divide),
    "eq": same(infix("==")),
    "ne": same(infix("!=")),
    "lt": Spelling(cpp=cpp.quiet_compare("<", "__builtin_isless"), triton=infix("<")),
    "le": Spelling(cpp=cpp.quiet_compare("<=", "__builtin_islessequal"), triton=infix("<=")),
    "gt": Spelling(cpp=cpp.quiet_compare(">", "__builtin_isgreater"), triton=infix(">")),
    "ge": Spelling(cpp=cpp.quiet_compare(">=", "__builtin_isgreaterequal"), triton=infix(">=")),
    "bitwise_and": same(infix("&")),
    "bitwise_or": same(infix("|")),
    "bitwise_xor": same(infix("^")),
    "neg": same(lambda a, d, o: f"(-{a[0]})"),
    "floordiv": Spelling(
        cpp=cpp.templated("ember_floordiv"),
        triton=triton.by_kind(
            call("ember_floordiv_int"), triton.float_helper("ember_floordiv_float")
        ),
    ),
    "truncdiv": Spelling(
        cpp=cpp.templated("ember_truncdiv"),
        triton=triton.by_kind(infix("//"), triton.float_helper("ember_truncdiv_float")),
    ),
    "remainder": Spelling(
        cpp=cpp.templated("ember_remainder"),
        triton=triton.by_kind(
            call("ember_remainder_int"), triton.float_helper("ember_remainder_float")
        ),
    ),
    "fmod": Spelling(
        cpp=cpp.templated("ember_fmod"),
        triton=triton.by_kind(infix("%"), triton.float_helper("ember_fmod_float")),
    ),
    "pow": Spelling(
        cpp=cpp.integral_or(cpp.templated("ember_ipow"), vector_math_call("pow")),
        triton=triton.power,
    ),
    "maximum": Spelling(cpp=cpp.templated("ember_maximum"), triton=triton.maximum),
    "minimum": Spelling(cpp=cpp.templated("ember_minimum"), triton=triton.minimum),
    "clamp_min": Spelling(cpp=cpp.templated("ember_maximum"), triton=triton.maximum),
    "clamp_max": Spelling(cpp=cpp.templated("ember_minimum"), triton=triton.minimum),
    "fmax": Spelling(cpp=call("std::fmax"), triton=triton.fmax),
    "fmin": Spelling(cpp=call("std::fmin"), triton=triton.fmin),
    "atan2": Spelling(cpp=vector_math_call("atan2"), triton=call("libdevice.atan2")),
    "hypot": Spelling(cpp=vector_math_call("hypot"), triton=call("libdevice.hypot")),
    "copysign": Spelling(cpp=call("std::copysign"), triton=call("libdevice.copysign")),
    "logical_and": Spelling(
        cpp=cpp.bool_infix("&", "&&"), triton=lambda a, d, o: f"(({a[0]} != 0) & ({a[1]} != 0))"
    ),
    "logical_or": Spelling(
        cpp=cpp.bool_infix("|", "||"), triton=lambda a, d, o: f"(({a[0]} != 0) | ({a[1]} != 0))"
    ),
    "logical_xor": Spelling(
        cpp=infix("!="), triton=lambda a, d, o: f"(({a[0]} != 0) ^ ({a[1]} != 0))"
    ),
    "where": Spelling(
        cpp=cpp.select,
        triton=lambda a, d, o: f"tl.where({a[0]}, {a[1]}, {a[2]})",
    ),
    "abs": Spelling(cpp=call("std::abs"), triton=call("tl.abs")),
    "exp": Spelling(cpp=vector_math_call("exp"), triton=call("libdevice.exp")),
    "exp2": Spelling(cpp=vector_math_call("exp2"), triton=call("libdevice.exp2")),
    "expm1": Spelling(cpp=vector_math_call("expm1"), triton=call("libdevice.expm1")),
    "log": Spelling(cpp=vector_math_call("log"), triton=call("libdevice.log")),
    "log2": Spelling(cpp=vector_math_call("log2"), triton=call("libdevice.log2")),
    "log10": Spelling(cpp=vector_math_call("log10"), triton=call("libdevice.log10")),
    "log1p": Spelling(cpp=vector_math_call("log1p"), triton=call("libdevice.log1p")),
    "sqrt": Spelling(cpp=call("std::sqrt"), triton=triton.sqrt),
    "rsqrt": Spelling(
        cpp=lambda a, d, o: f"({cpp.compute_type(o)}(1) / std::sqrt({a[0]}))",
        triton=call("tl.rsqrt"),
    ),
    "sin": Spelling(cpp=vector_math_call("sin"), triton=call("tl.sin")),
    "cos": Spelling(cpp=vector_math_call("cos"), triton=call("tl.cos")),
    "tan": Spelling(cpp=vector_math_call("tan"), triton=call("libdevice.tan")),
    "asin": Spelling(cpp=vector_math_call("asin"), triton=call("libdevice.asin")),
    "acos": Spelling(cpp=vector_math_call("acos"), triton=call("libdevice.acos")),
    "atan": Spelling(cpp=vector_math_call("atan"), triton=call("libdevice.atan")),
    "sinh": Spelling(cpp=vector_math_call("sinh"), triton=call("libdevice.sinh")),
    "cosh": Spelling(cpp=vector_math_call("cosh"), triton=call("libdevice.cosh")),
    "tanh": Spelling(cpp=vector_math_call("tanh"), triton=call("libdevice.tanh")),
    "asinh": Spelling(cpp=vector_math_call("asinh"), triton=call("libdevice.asinh")),
    "acosh": Spelling(cpp=vector_math_call("acosh"), triton=call("libdevice.acosh")),
    "atanh": Spelling(cpp=vector_math_call("atanh"), triton=call("libdevice.atanh")),
    "erf": Spelling(cpp=cpp.templated("ember_erf"), triton=call("libdevice.erf")),
    "erfc": Spelling(cpp=vector_math_call("erfc"), triton=call("libdevice.erfc")),
    "lgamma": Spelling(cpp=call("std::lgamma"), triton=call("libdevice.lgamma")),
    "sigmoid": Spelling(
        cpp=cpp.templated("ember_sigmoid"),
        triton=call("ember_sigmoid"),
    ),
    "sign": Spelling(cpp=cpp.templated("ember_sign"), triton=triton.sign),
    "relu": Spelling(
        cpp=cpp.templated("ember_relu"), triton=lambda a, d, o: f"tl.where({a[0]} < 0, 0, {a[0]})"
    ),
    "reciprocal": Spelling(
        cpp=lambda a, d, o: f"({cpp.compute_type(o)}(1) / {a[0]})",
        triton=lambda a, d, o: triton.divide(["1.0", a[0]], [o, d[0]], o),
    ),
    "floor": Spelling(cpp=call("std::floor"), triton=call("tl.floor")),
    "ceil": Spelling(cpp=call("std::ceil"), triton=call("tl.ceil")),
    "round": Spelling(cpp=call("std::nearbyint"), triton=call("libdevice.nearbyint")),
    "trunc": Spelling(cpp=call("std::trunc"), triton=call("libdevice.trunc")),
    "frac": Spelling(
        cpp=lambda a, d, o: f"({a[0]} - std::trunc({a[0]}))",
        triton=lambda a, d, o: f"({a[0]} - libdevice.trunc({a[0]}))",
    ),
    "isnan": Spelling(cpp=call("std::isnan"), triton=lambda a, d, o: f"({a[0]} != {a[0]})"),
    "isinf": Spelling(
        cpp=call("std::isinf"), triton=lambda a, d, o: f'(tl.abs({a[0]}) == float("inf"))'
    ),
    "signbit": Spelling(
        cpp=call("ember_signbit"), triton=lambda a, d, o: f"(libdevice.signbit({a[0]}) != 0)"
    ),
    "logical_not": Spelling(
        cpp=lambda a, d, o: f"(!{a[0]})", triton=lambda a, d, o: f"({a[0]} == 0)"
    ),
    "bitwise_not": Spelling(
        cpp=lambda a, d, o: f"(!{a[0]})" if o == torch.bool else f"(~{a[0]})",
        triton=lambda a, d, o: f"({a[0]} == 0)" if o == torch.bool else f"(~{a[0]})",
    ),
    "philox_rand": Spelling(cpp=None, triton=lambda a, d, o: f"tl.rand({a[0]}, {a[1]})"),
}


def spellings(language: str) -> dict[str, Emit]:
    """One language's column of the table: op name -> emit, for the ops it can spell."""
    if language not in Spelling.__slots__:
        raise ValueError(f"unknown language {language!r}; expected one of {Spelling.__slots__}")
    column = {name: getattr(row, language) for name, row in OPS.items()}
    return {name: emit for name, emit in column.items() if emit is not None}


CPP_OPS = spellings("cpp")
TRITON_OPS = spellings("triton")
