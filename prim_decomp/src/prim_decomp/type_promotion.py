"""Elementwise type promotion, written out as rules.

The result dtype of an elementwise op depends on its operands' categories
(bool < integer < floating < complex) and on how "strong" each operand is:
a tensor with dimensions beats a zero-dimensional tensor, which beats a Python
number. A weaker operand changes the result only by raising its category
(`int_tensor + 1.5` is floating, in the default dtype).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import torch

__all__ = ["Promotion", "result_dtype", "elementwise_dtypes", "compute_dtype"]


class Promotion(enum.Enum):
    """How an op maps the promoted dtype to its result dtype."""

    DEFAULT = "default"  # the promoted dtype
    INT_TO_FLOAT = "int_to_float"  # bool/int results become the default float
    ALWAYS_BOOL = "always_bool"  # comparisons
    BOOL_TO_LONG = "bool_to_long"  # sum of bools is int64
    COMPLEX_TO_FLOAT = "complex_to_float"  # abs of complex is real


_BOOL, _INT, _FLOAT, _COMPLEX = range(4)
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _category(dtype: torch.dtype) -> int:
    if dtype == torch.bool:
        return _BOOL
    if dtype.is_complex:
        return _COMPLEX
    if dtype.is_floating_point:
        return _FLOAT
    return _INT


def _scalar_dtype(value: object) -> torch.dtype:
    """The dtype a Python number takes on its own."""
    if isinstance(value, (bool, torch.SymBool)):
        return torch.bool
    if isinstance(value, (int, torch.SymInt)):
        return torch.int64
    if isinstance(value, (float, torch.SymFloat)):
        return torch.get_default_dtype()
    if isinstance(value, complex):
        return torch.complex64 if torch.get_default_dtype() == torch.float32 else torch.complex128
    raise TypeError(f"no dtype for operand of type {type(value).__name__}: {value!r}")


def _promote_pair(a: torch.dtype | None, b: torch.dtype) -> torch.dtype:
    """The smallest dtype both `a` and `b` convert to without loss of category."""
    if a is None or a == b:
        return b
    if _category(a) != _category(b):
        low, high = (a, b) if _category(a) < _category(b) else (b, a)
        if _category(high) == _COMPLEX and _category(low) == _FLOAT:
            return _promote_pair(_COMPLEX_OF.get(low, torch.complex64), high)
        return high
    if _category(a) == _BOOL:
        return a
    if _category(a) == _INT:
        return _promote_ints(a, b)
    if {a, b} == {torch.float16, torch.bfloat16}:
        return torch.float32
    return a if a.itemsize >= b.itemsize else b


def _promote_ints(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    if a.is_signed == b.is_signed:
        return a if a.itemsize >= b.itemsize else b
    unsigned, signed = (a, b) if not a.is_signed else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    return _SIGNED_OF_SIZE.get(unsigned.itemsize * 2, torch.int64)


_SIGNED_OF_SIZE = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _lift(dtype: torch.dtype, weak: torch.dtype, weak_is_tensor: bool) -> torch.dtype:
    """Raise `dtype` to the category of a weaker operand of dtype `weak`.

    A zero-dimensional tensor lends its own dtype; a Python number lends the
    default dtype of its category, sized to a floating `dtype` for complex.
    """
    category = _category(weak)
    if category <= _category(dtype):
        return dtype
    if category == _COMPLEX and _category(dtype) == _FLOAT:
        return _COMPLEX_OF.get(dtype, torch.complex64)
    if weak_is_tensor:
        return weak
    if category == _COMPLEX:
        return _scalar_dtype(1j)
    if category == _FLOAT:
        return torch.get_default_dtype()
    return torch.int64


_COMPLEX_OF = {
    torch.float16: torch.complex32,
    torch.float32: torch.complex64,
    torch.float64: torch.complex128,
}


def result_dtype(*operands: object) -> torch.dtype:
    """The promoted dtype of tensors and Python numbers, as elementwise ops compute it."""
    tiers: list[list[torch.dtype]] = [[], [], []]  # dimensioned, zero-dim, number
    for operand in operands:
        if operand is None:
            continue
        if isinstance(operand, torch.Tensor):
            tiers[0 if operand.dim() > 0 else 1].append(operand.dtype)
        else:
            tiers[2].append(_scalar_dtype(operand))
    if not any(tiers):
        raise TypeError("result_dtype needs at least one tensor or number")
    result: torch.dtype | None = None
    for tier in tiers:
        strongest: torch.dtype | None = None
        for dtype in tier:
            strongest = _promote_pair(strongest, dtype)
        if strongest is None:
            continue
        if result is None:
            result = strongest
        else:
            result = _lift(result, strongest, weak_is_tensor=tier is tiers[1])
    return result


def elementwise_dtypes(
    *operands: object, promotion: Promotion = Promotion.DEFAULT
) -> tuple[torch.dtype, torch.dtype]:
    """(computation dtype, result dtype) of an elementwise op on `operands`.

    The computation dtype is float32 where the result is float16/bfloat16, as
    eager CPU kernels compute in it.
    """
    promoted = result_dtype(*operands)
    if promotion is Promotion.INT_TO_FLOAT and _category(promoted) < _FLOAT:
        promoted = torch.get_default_dtype()
    if promotion is Promotion.ALWAYS_BOOL:
        return promoted, torch.bool
    if promotion is Promotion.BOOL_TO_LONG and promoted == torch.bool:
        return torch.int64, torch.int64
    result = promoted
    if promotion is Promotion.COMPLEX_TO_FLOAT and promoted.is_complex:
        result = promoted.to_real()
    return compute_dtype(promoted), result


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype to compute in for results of `dtype` (float32 for half types)."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def tensor_dtypes(operands: Sequence[object]) -> list[torch.dtype]:
    """The dtypes of the tensors among `operands` (helper for rules)."""
    return [op.dtype for op in operands if isinstance(op, torch.Tensor)]
