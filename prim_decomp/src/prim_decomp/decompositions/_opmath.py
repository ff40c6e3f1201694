"""Rules shared by decompositions: compute in float32 for half types; dims and strides."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from prim_decomp.type_promotion import compute_dtype

__all__ = ["aten", "cast", "is_non_overlapping_and_dense", "opmath", "normalize_dims"]

aten = torch.ops.aten


def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`x` converted to `dtype` (itself when it already is)."""
    if x.dtype == dtype:
        return x
    return aten._to_copy.default(x, dtype=dtype)


def opmath(fn: Callable) -> Callable:
    """Run `fn` with floating tensor arguments in their compute dtype.

    Tensor results are cast back to the dtype of the first tensor argument,
    which is the result dtype of the activation and backward ops using this.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        first = next(a for a in args if isinstance(a, torch.Tensor))
        wanted = first.dtype
        computing = compute_dtype(wanted)
        if computing == wanted:
            return fn(*args, **kwargs)
        args = [_upcast(a, computing) for a in args]
        result = fn(*args, **kwargs)
        if isinstance(result, torch.Tensor):
            return cast(result, wanted) if result.dtype == computing else result
        return type(result)(cast(r, wanted) if r.dtype == computing else r for r in result)

    return wrapper


def _upcast(value: object, dtype: torch.dtype) -> object:
    if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
        return cast(value, dtype)
    return value


def normalize_dims(dims: object, ndim: int) -> list[int]:
    """Reduction dims as a sorted list of non-negative ints; None or [] means all."""
    if ndim == 0:
        return []
    if dims is None:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return list(range(ndim))
    return sorted({d % max(ndim, 1) for d in dims})


def is_non_overlapping_and_dense(x: torch.Tensor) -> bool:
    """Whether `x`'s strides are a permutation of contiguous ones (its elements fill its
    memory exactly, in some order)."""
    pairs = sorted((stride, size) for size, stride in zip(x.shape, x.stride(), strict=True))
    expected = 1
    for stride, size in pairs:
        if size != 1 and stride != expected:
            return False
        expected = expected * size
    return True
