"""Triton helper functions the generated kernels call (combine functions, integer division).

Imported by generated kernel modules only: importing it imports triton.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from inductor_codegen.codegen.triton.runtime import libdevice_module

libdevice = libdevice_module()

__all__ = [
    "ember_any_combine",
    "ember_argmax_combine",
    "ember_argmin_combine",
    "ember_div_rn",
    "ember_sigmoid",
    "ember_dot",
    "ember_dot_ieee",
    "ember_floordiv_float",
    "ember_fmod_float",
    "ember_floordiv_int",
    "ember_max_combine",
    "ember_min_combine",
    "ember_prod_combine",
    "ember_remainder_float",
    "ember_remainder_int",
    "ember_truncdiv_float",
    "ember_welford_combine",
]


@triton.jit
def ember_floordiv_int(a, b):
    q = a // b
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)


@triton.jit
def ember_remainder_int(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def ember_div_rn(a, b):
    """Correctly rounded division of two float tensors (`/` is 2 ulp on float32)."""
    if a.dtype == tl.float64:
        q = a / b
    else:
        q = tl.div_rn(a, b)
    return q


@triton.jit
def ember_sigmoid(x):
    """1 / (1 + exp(-x)), its exp libdevice's (tl.exp is ex2.approx on float32) and its
    division correctly rounded, as eager's."""
    denominator = 1.0 + libdevice.exp(-x)
    return ember_div_rn(tl.zeros_like(denominator) + 1.0, denominator)


@triton.jit
def ember_fmod_float(a, b):
    """C's fmod, exact as eager's: Triton's `%` of floats is a - trunc(a / b) * b, off
    (even in sign) where the quotient rounds (fmod(1.0, 0.1) came out -1.5e-8)."""
    return libdevice.fmod(a, b)


@triton.jit
def ember_floordiv_float(a, b):
    """Eager's floor division of float tensors: the exact quotient of a - fmod(a, b), not
    floor(a / b) (1.0 // 0.1 is 9, while 1.0 / 0.1 rounds to 10)."""
    quotient = ember_div_rn(a, b)
    mod = ember_fmod_float(a, b)
    div = ember_div_rn(a - mod, b)
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floordiv = tl.floor(div)
    floordiv = tl.where(div - floordiv > 0.5, floordiv + 1, floordiv)
    floordiv = tl.where(div == 0, quotient * 0, floordiv)  # a zero with the quotient's sign
    return tl.where(b == 0, quotient, floordiv)


@triton.jit
def ember_truncdiv_float(a, b):
    q = ember_div_rn(a, b)
    return tl.where(q < 0, tl.ceil(q), tl.floor(q))


@triton.jit
def ember_remainder_float(a, b):
    r = ember_fmod_float(a, b)
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def ember_max_combine(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def ember_min_combine(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def ember_prod_combine(a, b):
    return a * b


@triton.jit
def ember_any_combine(a, b):
    return a | b


@triton.jit
def ember_argmax_combine(value_a, index_a, value_b, index_b):
    a_nan = value_a != value_a
    b_nan = value_b != value_b
    better = (value_b > value_a) | (b_nan & ~a_nan)
    tie = (value_b == value_a) | (a_nan & b_nan)
    take_b = better | (tie & (index_b < index_a))
    return tl.where(take_b, value_b, value_a), tl.where(take_b, index_b, index_a)


@triton.jit
def ember_argmin_combine(value_a, index_a, value_b, index_b):
    a_nan = value_a != value_a
    b_nan = value_b != value_b
    better = (value_b < value_a) | (b_nan & ~a_nan)
    tie = (value_b == value_a) | (a_nan & b_nan)
    take_b = better | (tie & (index_b < index_a))
    return tl.where(take_b, value_b, value_a), tl.where(take_b, index_b, index_a)


@triton.jit
def ember_welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    delta = mean_b - mean_a
    weight = tl.where(n == 0, 0.0, ember_div_rn(n_b, tl.where(n == 0, 1.0, n)))
    return mean_a + delta * weight, m2_a + m2_b + delta * delta * n_a * weight, n


if os.environ.get("TRITON_INTERPRET", "0") == "1":
    # The interpreter's dot of 16-bit floats gives wrong results (triton 3.9): widen first.
    @triton.jit
    def ember_dot(a, b, acc):
        return acc + tl.dot(a.to(tl.float32), b.to(tl.float32))

    @triton.jit
    def ember_dot_ieee(a, b, acc):
        return acc + tl.dot(a.to(tl.float32), b.to(tl.float32))

else:

    @triton.jit
    def ember_dot(a, b, acc):
        return tl.dot(a, b, acc)

    @triton.jit
    def ember_dot_ieee(a, b, acc):  # float32 in full precision, as cuBLAS without TF32
        return tl.dot(a, b, acc, input_precision="ieee")
