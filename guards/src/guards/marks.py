"""Marks on tensors that say which dimensions capture treats as dynamic or static.

The marks are plain attributes on the tensor, read by capture when it makes a
fake for that tensor; they cost nothing at run time and survive until cleared.

    >>> x = torch.randn(8, 3)
    >>> mark_dynamic(x, 0, min=2, max=1024)   # dim 0 gets a symbol, guarded to [2, 1024]
    >>> maybe_mark_dynamic(x, 1)              # a symbol if nothing forces it static
    >>> mark_static(x, 1)                     # never a symbol

torch's own marks (its compiler's `mark_dynamic`, `maybe_mark_dynamic`,
`mark_static`, which set `_dynamo_dynamic_indices`, `_dynamo_dynamic_range`,
`_dynamo_weak_dynamic_indices` and `_dynamo_static_indices` on the tensor) are
read as the same marks (`mark_unbacked`'s `_dynamo_unbacked_indices` as
mark_dynamic's: capture has no unbacked sizes), so library code that marks its inputs for torch.compile
marks them for ember too. torch's mark_dynamic wins over its mark_static, as in
torch; ember's mark_static wins over any dynamic mark.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

__all__ = [
    "DimensionMarks",
    "DynamicRange",
    "mark_dynamic",
    "mark_static",
    "marks_of",
    "maybe_mark_dynamic",
]

_ATTRIBUTE = "_ember_dimension_marks"


@dataclass(frozen=True, slots=True)
class DynamicRange:
    """The inclusive range a dynamic dimension is guarded to; None means unbounded."""

    min: int | None = None
    max: int | None = None


@dataclass(frozen=True, slots=True)
class DimensionMarks:
    """Everything marked on one tensor, by dimension index (non-negative)."""

    dynamic: dict[int, DynamicRange]
    maybe_dynamic: frozenset[int]
    static: frozenset[int]


def _dims(tensor: torch.Tensor, dim: int | Iterable[int], api: str) -> list[int]:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{api} expects a torch.Tensor, got {type(tensor).__name__}")
    if not isinstance(dim, (int, Iterable)) or isinstance(dim, str):
        raise TypeError(f"{api}: dim must be an int or a list of ints, got {dim!r}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    normalized = []
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool):
            raise TypeError(f"{api}: dimension must be an int, got {d!r}")
        if not -tensor.dim() <= d < max(tensor.dim(), 1):
            raise IndexError(
                f"{api}: dimension {d} is out of range for a tensor of {tensor.dim()} dimensions"
            )
        normalized.append(d % tensor.dim() if tensor.dim() else 0)
    return normalized


def marks_of(tensor: torch.Tensor) -> DimensionMarks:
    """The marks on `tensor`, ember's and torch's (empty marks when there are none)."""
    marks = getattr(tensor, _ATTRIBUTE, None)
    if marks is None:
        marks = DimensionMarks({}, frozenset(), frozenset())
    # NOTE: the mark attributes themselves, not `_has_dynamo_dim_marking`: torch 2.11's
    # mark_static and maybe_mark_dynamic set no such flag.
    state = getattr(tensor, "__dict__", None)
    if state and any(name in state for name in _TORCH_MARK_ATTRIBUTES):
        marks = _with_torch_marks(tensor, marks)
    return marks


_TORCH_MARK_ATTRIBUTES = (
    "_dynamo_dynamic_indices",
    "_dynamo_unbacked_indices",
    "_dynamo_weak_dynamic_indices",
    "_dynamo_static_indices",
)


def _torch_dims(tensor: torch.Tensor, name: str) -> set[int]:
    """Dims of one of torch's index-set marks, made non-negative; out-of-range ones dropped."""
    rank = tensor.dim()
    return {
        d % rank
        for d in getattr(tensor, name, None) or ()
        if isinstance(d, int) and rank and -rank <= d < rank
    }


def _with_torch_marks(tensor: torch.Tensor, marks: DimensionMarks) -> DimensionMarks:
    """`marks` with torch's marks on `tensor` added (ember's own take precedence)."""
    rank = tensor.dim()
    ranges: dict[int, DynamicRange] = {}
    for limit in getattr(tensor, "_dynamo_dynamic_range", None) or ():
        dim = getattr(limit, "dim", None)
        if isinstance(dim, int) and rank and -rank <= dim < rank:
            ranges[dim % rank] = DynamicRange(
                getattr(limit, "min", None), getattr(limit, "max", None)
            )
    # NOTE: torch's mark_unbacked asks for a size no guard may read; capture has no
    # unbacked sizes and takes it as mark_dynamic (a symbol from the first compile,
    # guarded, or an error where the graph must specialize it)
    torch_dynamic = _torch_dims(tensor, "_dynamo_dynamic_indices") | _torch_dims(
        tensor, "_dynamo_unbacked_indices"
    )
    dynamic = dict(marks.dynamic)
    for dim in torch_dynamic - marks.static:
        dynamic.setdefault(dim, ranges.get(dim, DynamicRange()))
    maybe = marks.maybe_dynamic | (
        _torch_dims(tensor, "_dynamo_weak_dynamic_indices") - marks.static
    )
    static = marks.static | (_torch_dims(tensor, "_dynamo_static_indices") - set(dynamic))
    return DimensionMarks(dynamic, frozenset(maybe) - static, frozenset(static))


def _store(tensor: torch.Tensor, marks: DimensionMarks) -> None:
    setattr(tensor, _ATTRIBUTE, marks)


def mark_dynamic(
    tensor: torch.Tensor,
    dim: int | Iterable[int],
    *,
    min: int | None = None,
    max: int | None = None,
) -> None:
    """Make `dim` of `tensor` a symbolic size from the first compile on.

    `min`/`max` bound the size (inclusive) and are checked by the guards; a
    compile that must specialize such a dimension raises instead of silently
    making it static. Marking a dimension that is also marked static is an error.
    """
    for name, bound in (("min", min), ("max", max)):
        if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool)):
            raise TypeError(f"mark_dynamic: {name} must be None or an int, got {bound!r}")
        if bound is not None and bound < 0:
            raise ValueError(f"mark_dynamic: {name}={bound} is negative; sizes are >= 0")
    if min is not None and max is not None and min > max:
        raise ValueError(f"mark_dynamic: min={min} is greater than max={max}")
    current = marks_of(tensor)
    dynamic = dict(current.dynamic)
    for d in _dims(tensor, dim, "mark_dynamic"):
        if d in current.static:
            raise ValueError(f"mark_dynamic: dimension {d} is already marked static")
        dynamic[d] = DynamicRange(min, max)
    _store(tensor, DimensionMarks(dynamic, current.maybe_dynamic, current.static))


def maybe_mark_dynamic(tensor: torch.Tensor, dim: int | Iterable[int]) -> None:
    """Make `dim` symbolic where possible; unlike mark_dynamic, specializing it is allowed."""
    current = marks_of(tensor)
    dims = frozenset(_dims(tensor, dim, "maybe_mark_dynamic"))
    _store(tensor, DimensionMarks(current.dynamic, current.maybe_dynamic | dims, current.static))


def mark_static(tensor: torch.Tensor, dim: int | Iterable[int] | None = None) -> None:
    """Keep `dim` (every dimension when None) static even under dynamic=True."""
    if dim is None:
        dim = range(tensor.dim()) if isinstance(tensor, torch.Tensor) else 0
    dims = _dims(tensor, dim, "mark_static")
    current = marks_of(tensor)
    static = current.static | frozenset(dims)
    dynamic = {d: r for d, r in current.dynamic.items() if d not in static}
    _store(tensor, DimensionMarks(dynamic, current.maybe_dynamic - static, static))
