"""The loop-level IR: scalar expressions, buffers and the nodes that compute them.

Two levels:

* **Scalar expressions** (`Load`, `Constant`, `IndexValue`, `ScalarArg`, `Op`):
  what one element of a buffer is, as a tree of pointwise ops over loads from
  other buffers at sympy index expressions. They are frozen values; a code
  generator (C++ today, Triton later) prints them through its own op table.
* **Buffers** (`InputBuffer`, `ComputedBuffer`, `ExternBuffer`): named memory
  with a `Layout`. A `ComputedBuffer` holds a `Pointwise` or a `Reduction`
  body: a loader from loop indices to a scalar expression.

During lowering a value that is not yet in memory is a `TensorValue`: dtype,
sizes and a loader. Pointwise ops compose loaders (so producers are inlined
into consumers); views rewrite the index a loader is called with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import sympy
import torch

from inductor_codegen.indexing import Index, contiguous_strides, flat_index

__all__ = [
    "ComputedBuffer",
    "Constant",
    "Expr",
    "ExternBuffer",
    "IndexValue",
    "InputBuffer",
    "Layout",
    "Load",
    "Op",
    "Pointwise",
    "Reduction",
    "ScalarArg",
    "StridedView",
    "TensorValue",
    "expr_loads",
    "expr_size",
]


# ---------------------------------------------------------------- scalar expressions


@dataclass(frozen=True, slots=True)
class Load:
    """Element `index` (in elements, from the buffer's data pointer) of buffer `buffer`."""

    buffer: str
    index: Index
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class Constant:
    value: bool | int | float
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class IndexValue:
    """The value of an index expression (for iota/arange and masks)."""

    index: Index
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class ScalarArg:
    """A Python number passed to the compiled graph as an input."""

    name: str
    dtype: torch.dtype


@dataclass(frozen=True, slots=True)
class Op:
    """A pointwise op named in the code generator's op table, applied to `args`."""

    name: str
    args: tuple
    dtype: torch.dtype


Expr = Load | Constant | IndexValue | ScalarArg | Op


def expr_loads(expr: Expr) -> list[Load]:
    """Every Load in `expr`, in order of first appearance, without duplicates."""
    seen: dict[Load, None] = {}
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Load):
            seen.setdefault(e, None)
        elif isinstance(e, Op):
            stack.extend(reversed(e.args))
    return list(seen)


def expr_size(expr: Expr, limit: int = 10_000) -> int:
    """Number of nodes in `expr` (counting shared subtrees each time), capped at `limit`."""
    count = 0
    stack = [expr]
    while stack and count < limit:
        e = stack.pop()
        count += 1
        if isinstance(e, Op):
            stack.extend(e.args)
    return count


# ---------------------------------------------------------------- buffers


@dataclass(frozen=True, slots=True)
class Layout:
    dtype: torch.dtype
    size: tuple[Index, ...]
    stride: tuple[Index, ...]
    offset: Index = sympy.Integer(0)

    @staticmethod
    def contiguous(dtype: torch.dtype, size: tuple[Index, ...]) -> Layout:
        return Layout(dtype, tuple(size), contiguous_strides(size))

    def index(self, idx) -> Index:
        return flat_index(idx, self.stride, self.offset)

    def storage_numel(self) -> Index:
        """Elements the data must span: 1 + the largest offset, or 0 when empty."""
        if any(s == 0 for s in self.size):
            return sympy.Integer(0)
        return 1 + self.offset + sum(((s - 1) * st for s, st in zip(self.size, self.stride)), 0)


@dataclass(frozen=True, slots=True)
class Pointwise:
    ranges: tuple[Index, ...]
    loader: Callable[[tuple[Index, ...]], Expr]


@dataclass(frozen=True, slots=True)
class Reduction:
    """Reduce `loader(index, reduction_index)` over `reduction_ranges` for each index.

    `reduction_type` is one of sum, prod, max, min, any, all, argmax, argmin,
    welford_mean, welford_m2. Reductions of one family over the same value
    share one accumulator in the generated code.
    """

    ranges: tuple[Index, ...]
    reduction_ranges: tuple[Index, ...]
    reduction_type: str
    loader: Callable[[tuple[Index, ...], tuple[Index, ...]], Expr]


@dataclass(frozen=True, slots=True)
class InputBuffer:
    name: str
    layout: Layout


@dataclass(frozen=True, slots=True)
class ComputedBuffer:
    """`stored_into`: the graph input whose memory the buffer is (a mutated input's new
    value computed in place, element by element; see lowering.reinplace), else None."""

    name: str
    layout: Layout
    body: Pointwise | Reduction
    stored_into: str | None = None


@dataclass(frozen=True, slots=True)
class ExternBuffer:
    """The result of calling an ATen op from the wrapper (an extern kernel or a fallback).

    `args`/`kwargs` hold buffer names as `BufferRef` and constants as they are.
    `layouts` gives the layout of each tensor output (one for a single tensor).
    """

    name: str
    op: object
    args: tuple
    kwargs: dict
    layouts: tuple[Layout | None, ...]
    is_fallback: bool
    reads: tuple[str, ...] = field(default=())
    tuple_result: bool = False

    @property
    def layout(self) -> Layout | None:
        """The layout of a single-tensor result (None for tuple results)."""
        return None if self.tuple_result or not self.layouts else self.layouts[0]


@dataclass(frozen=True, slots=True)
class StridedView:
    """A value that is exactly a strided window of a buffer in memory."""

    buffer: str
    layout: Layout


@dataclass(frozen=True, slots=True)
class TensorValue:
    """A tensor during lowering: dtype, sizes and how to load element `index`.

    `view` is set when the value is a strided window of a buffer (then no
    copy is needed to hand it to ATen or to return it).
    """

    dtype: torch.dtype
    size: tuple[Index, ...]
    loader: Callable[[tuple[Index, ...]], Expr]
    view: StridedView | None = None

    @staticmethod
    def of_buffer(name: str, layout: Layout) -> TensorValue:
        def load(idx, _name=name, _layout=layout):
            return Load(_name, _layout.index(idx), _layout.dtype)

        return TensorValue(layout.dtype, tuple(layout.size), load, StridedView(name, layout))

    @property
    def ndim(self) -> int:
        return len(self.size)
