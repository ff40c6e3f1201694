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
"""

from __future__ import annotations

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


def _is_static(t: torch.Tensor) -> bool:
    values = (*t.shape, *t.stride(), t.storage_offset())
    return not any(isinstance(v, torch.SymInt) for v in values)


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    """[first, last] bytes of `t`'s elements (non-negative strides; not empty)."""
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.storage_offset() * t.element_size(), (last + 1) * t.element_size() - 1


def _is_dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense, in any dim order (eager's is_non_overlapping_and_dense)."""
    expected = 1
    for step, size in sorted((s, n) for n, s in zip(t.shape, t.stride()) if n > 1):
        if step != expected:
            return False
        expected *= size
    return True


def _locations(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The element index into the storage of each element of `t` broadcast to `shape`."""
    extent = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
    with torch.no_grad():
        memory = torch.arange(extent, device="cpu")
        return memory.as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset()).expand(
            shape
        )


def _reads_written_elsewhere(written: torch.Tensor, read: torch.Tensor) -> bool:
    """Whether an element reads a location that another element writes."""
    (w_first, w_last), (r_first, r_last) = _byte_range(written), _byte_range(read)
    if w_last < r_first or r_last < w_first:
        return False
    if written.element_size() != read.element_size() or max(w_last, r_last) > _MAX_EXTENT:
        return True
    try:
        shape = torch.broadcast_shapes(read.shape, written.shape)
    except RuntimeError:
        return True  # (the op raises its own error)
    if shape != written.shape:
        return True
    w, r = _locations(written, shape), _locations(read, shape)
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
    positions = mutated_arguments(func)
    if not positions:
        return
    names = [a.name for a in func._schema.arguments]
    written = []
    for i in positions:
        t = args[i] if i < len(args) else kwargs.get(names[i])
        if isinstance(t, torch.Tensor):
            written.append(t)
    reads = _tensors(list(args)) + _tensors(list(kwargs.values()))
    checked_by_eager = torch.Tag.pointwise in func.tags or func._schema.name == "aten::copy_"
    for out in written:
        if out.numel() == 0 or not _is_static(out) or out.is_complex():
            continue
        for t in reads:
            if t is out or t.numel() == 0 or not _is_static(t) or t.is_complex():
                continue
            if t.device != out.device or not same_memory(out, t):
                continue
            _check_pair(func, out, t, checked_by_eager)


def _check_pair(func: Any, out: torch.Tensor, read: torch.Tensor, checked_by_eager: bool) -> None:
    same_geometry = (
        out.shape == read.shape
        and out.stride() == read.stride()
        and out.storage_offset() * out.element_size() == read.storage_offset() * read.element_size()
    )
    if same_geometry:
        return  # each element reads what it then writes
    if checked_by_eager and _is_dense(out) and _is_dense(read):
        (w_first, w_last), (r_first, r_last) = _byte_range(out), _byte_range(read)
        if not (w_last < r_first or r_last < w_first):
            raise OverlappingWriteError(PARTIAL_OVERLAP_REFUSED)
        return
    if _reads_written_elsewhere(out, read):
        raise UnsupportedMutationError(
            f"{func} reads memory it writes elsewhere (a source overlapping the written "
            "tensor, such as x[:, 1:].add_(x[:, :-1])): eager's result depends on the order "
            "its kernel visits the elements; call .clone() on the source first"
        )
