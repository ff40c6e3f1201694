"""In-place ops that read memory they write elsewhere: eager's error, or a clear one.

    x[1:].copy_(x[:-1])          # eager: "some elements of the input tensor and the
                                 # written-to tensor refer to a single memory location"
    x[:, 1:].add_(x[:, :-1])     # eager runs it, reading some elements before and some
                                 # after they are written (its loop order, vectorized)

A functional graph reads every input before writing, as if through a temporary, so
neither result is eager's. Eager's kernels (TensorIterator, `copy_`) sort a written
tensor and an input of the same memory by their memory ranges, where both are dense:
the same range and strides is an elementwise update (well defined), overlapping ranges
otherwise raise the error above. Where one of them is not dense eager checks nothing
and its result depends on the order its loop visits the elements: that is refused here
with an error saying so, unless no element is read from a location another element
writes (`x[0].copy_(x[:, 0])`: the one shared element is read where it is written).

Under symbolic sizes every comparison made here is a guard on the sizes (a SymInt
compared, or read as an int, records it), so a later call whose sizes would decide
otherwise (views that newly overlap) recompiles and meets the check again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from aot_autograd.errors import OverlappingWriteError, UnsupportedMutationError
from aot_autograd.mutations import mutated_arguments

__all__ = ["check_reads_of_written_memory"]

PARTIAL_OVERLAP_REFUSED = (
    "unsupported operation: some elements of the input tensor and the written-to tensor "
    "refer to a single memory location. Please clone() the tensor before performing the "
    "operation."
)
# Beyond this many elements between a view's first and last, element sets are not
# compared: overlapping memory ranges are refused as if elements were shared.
_MAX_EXTENT = 1 << 24


@dataclass(frozen=True, slots=True)
class _Layout:
    """A tensor's shape, strides and offset (ints or SymInts: every decision taken on
    them guards the sizes it depends on), and its element size."""

    shape: tuple[Any, ...]
    stride: tuple[Any, ...]
    offset: Any
    element_size: int

    @classmethod
    def of(cls, t: torch.Tensor) -> _Layout:
        return cls(tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.element_size())

    def concrete(self) -> _Layout:
        """The layout as ints (guarding every symbolic size on its value)."""
        return _Layout(
            tuple(int(n) for n in self.shape),
            tuple(int(s) for s in self.stride),
            int(self.offset),
            self.element_size,
        )

    def byte_range(self) -> tuple[Any, Any]:
        """[first, last] bytes of the elements (strides are never negative; not empty)."""
        last = self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.stride))
        return self.offset * self.element_size, (last + 1) * self.element_size - 1

    def is_dense(self) -> bool:
        """Non-overlapping and dense, in any dim order (eager's is_non_overlapping_and_dense)."""
        layout = self.concrete()  # the dim order sorts symbolic strides: guard them
        expected = 1
        for step, size in sorted((s, n) for n, s in zip(layout.shape, layout.stride) if n > 1):
            if step != expected:
                return False
            expected *= size
        return True

    def locations(self, shape: tuple[int, ...]) -> torch.Tensor:
        """The storage index of each element, broadcast to `shape` (a concrete layout)."""
        extent = self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.stride)) + 1
        with torch.no_grad():
            memory = torch.arange(extent, device="cpu")
            view = memory.as_strided(self.shape, self.stride, self.offset)
            return view.expand(shape)


def _disjoint(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    return bool(a[1] < b[0]) or bool(b[1] < a[0])


def _reads_written_elsewhere(written: _Layout, read: _Layout) -> bool:
    """Whether an element reads a location that another element writes (their memory
    ranges overlap). Element sets are compared at this call's sizes, guarded on them."""
    written, read = written.concrete(), read.concrete()
    w_range, r_range = written.byte_range(), read.byte_range()
    if written.element_size != read.element_size or max(w_range[1], r_range[1]) > _MAX_EXTENT:
        return True
    try:
        shape = tuple(torch.broadcast_shapes(read.shape, written.shape))
    except RuntimeError:
        return True  # (the op raises its own error)
    if shape != written.shape:
        return True
    w, r = written.locations(shape), read.locations(shape)
    extent = int(max(int(w.max()), int(r.max()))) + 1
    is_written = torch.zeros(extent, dtype=torch.bool)
    is_written[w.reshape(-1)] = True
    return bool((is_written[r] & (w != r)).any())


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def check_reads_of_written_memory(func: Any, args: tuple, kwargs: dict, same_memory: Any) -> None:
    """Raise eager's error, or a clear one (see the module docstring), for in-place op
    `func` reading memory it writes elsewhere. `same_memory(a, b)`: whether tensors `a`
    and `b` are views of one storage."""
    if not isinstance(func, torch._ops.OpOverload):
        return
    positions = _written_positions(func, args)
    if not positions:
        return
    names = [a.name for a in func._schema.arguments]
    written = []
    for i in positions:
        t = args[i] if i < len(args) else kwargs.get(names[i])
        if isinstance(t, torch.Tensor):
            written.append(t)
    _check_writes_disjoint(func, written, same_memory)
    reads = _tensors(list(args)) + _tensors(list(kwargs.values()))
    checked_by_eager = torch.Tag.pointwise in func.tags or func._schema.name == "aten::copy_"
    for out in written:
        if _is_empty(out) or out.is_complex():
            continue
        for t in reads:
            if t is out or _is_empty(t) or t.is_complex():
                continue
            if t.device != out.device or not same_memory(out, t):
                continue
            _check_pair(func, _Layout.of(out), _Layout.of(t), checked_by_eager)


def _written_positions(func: Any, args: tuple) -> tuple[int, ...]:
    """The positions of the arguments `func` writes: its schema's `Tensor(a!)`, and the
    running statistics `native_batch_norm` updates in training (its schema does not say)."""
    if func is torch.ops.aten.native_batch_norm.default and len(args) > 5 and args[5]:
        return (3, 4)
    return mutated_arguments(func)


def _check_writes_disjoint(func: Any, written: list[torch.Tensor], same_memory: Any) -> None:
    """Refuse an op writing two arguments that share memory (`F.batch_norm(x, s, s.view(-1),
    training=True)`): eager writes them one after the other, the second reading what the
    first wrote, where the functional form computes both from the values before the op."""
    for i, a in enumerate(written):
        for b in written[i + 1 :]:
            if _is_empty(a) or _is_empty(b) or a.device != b.device or not same_memory(a, b):
                continue
            if a is b or not _disjoint(_Layout.of(a).byte_range(), _Layout.of(b).byte_range()):
                raise UnsupportedMutationError(
                    f"{func} writes two arguments that share memory; eager writes them in "
                    "turn, each later write reading what the earlier one wrote: pass "
                    "separate tensors (a .clone() of one of them)"
                )


def _is_empty(t: torch.Tensor) -> bool:
    return any(bool(n == 0) for n in t.shape)


def _check_pair(func: Any, out: _Layout, read: _Layout, checked_by_eager: bool) -> None:
    same_geometry = (
        len(out.shape) == len(read.shape)
        and all(bool(a == b) for a, b in zip(out.shape, read.shape))
        and all(bool(a == b) for a, b in zip(out.stride, read.stride))
        and bool(out.offset * out.element_size == read.offset * read.element_size)
    )
    if same_geometry:
        return  # each element reads what it then writes
    if _disjoint(out.byte_range(), read.byte_range()):
        return
    if checked_by_eager and out.is_dense() and read.is_dense():
        raise OverlappingWriteError(PARTIAL_OVERLAP_REFUSED)
    if _reads_written_elsewhere(out, read):
        raise UnsupportedMutationError(
            f"{func} reads memory it writes elsewhere (a source overlapping the written "
            "tensor, such as x[:, 1:].add_(x[:, :-1])): eager's result depends on the order "
            "its kernel visits the elements; call .clone() on the source first"
        )
