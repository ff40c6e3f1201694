"""Helpers the generated wrappers call at run time."""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import torch

from inductor_codegen.errors import InductorError

__all__ = [
    "DivisorCheck",
    "IndexCheck",
    "IndexOutOfRangeError",
    "IndexStatus",
    "IntegerDivisionByZeroError",
    "check_layout",
    "empty_strided",
    "ensure_layout",
    "reinterpret",
    "select_scatter_into",
    "slice_scatter_into",
]


class IndexOutOfRangeError(InductorError, IndexError):
    """A gathered index (embedding, index_select, gather) is outside its table.

    Both an IndexError (as eager's embedding and index_select raise) and a
    RuntimeError (as eager's gather raises).
    """


class IntegerDivisionByZeroError(InductorError):
    """An integer division or remainder by zero (eager raises RuntimeError "ZeroDivisionError")."""


@dataclass(frozen=True, slots=True)
class IndexCheck:
    """One bounds check of an indirect load: the op it comes from and the checked dim."""

    op: str
    dim: int

    def error(self, index: int, size: int) -> Exception:
        return IndexOutOfRangeError(
            f"{self.op}: index {index} is out of range for dimension {self.dim} of size "
            f"{size} (valid indices are 0 to {size - 1}); pass indices in that range"
        )


@dataclass(frozen=True, slots=True)
class DivisorCheck:
    """The check that an integer division's divisor is not zero: the op dividing."""

    op: str

    def error(self, index: int, size: int) -> Exception:
        return IntegerDivisionByZeroError(
            f"ZeroDivisionError: integer {self.op} by zero; make the divisor nonzero "
            "(or divide in a floating-point dtype, where it gives inf or nan)"
        )


class IndexStatus(threading.local):
    """Where kernels record a failed check: cells (check number + 1, index, size).

    Checks are bounds checks of gathered indices (`IndexCheck`) and zero checks of
    integer divisors (`DivisorCheck`).

    The wrapper passes `address` to every kernel with checks and reads `cells[0]`
    right after the call; nonzero means a check failed, and `raise_error` raises.
    Each thread sees its own cells, so concurrent calls of one compiled graph
    never report each other's failures.
    """

    def __init__(self):
        self.cells = (ctypes.c_int64 * 3)()
        self.address = ctypes.addressof(self.cells)

    def raise_error(self, checks: tuple[IndexCheck, ...]) -> None:
        number, index, size = self.cells
        self.cells[0] = 0
        raise checks[number - 1].error(index, size)


def empty_strided(size: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device="cpu")


def reinterpret(base: torch.Tensor, size: tuple, stride: tuple, offset: int) -> torch.Tensor:
    """A view of `base`'s memory; `offset` counts elements from `base`'s data pointer."""
    # torch.as_strided binds its arguments faster than the Tensor method (about 1 us
    # against 2 us a call); the wrapper calls this for every view it passes to ATen.
    return torch.as_strided(base, size, stride, base.storage_offset() + offset)


def ensure_layout(tensor: torch.Tensor | None, size: tuple, stride: tuple) -> torch.Tensor | None:
    """`tensor` in the layout the kernels were generated for, copied only if ATen chose another.

    # NOTE: an ATen op's output strides can depend on its inputs' strides, and the
    # buffers ember passes it may be laid out differently from the traced graph's
    # meta["val"]; every later index computation assumes the traced layout.
    """
    if tensor is None:  # an optional output ATen did not produce (need_weights=False)
        return None
    # The common case first, in two tuple compares (this runs after every ATen call).
    if tensor.stride() == stride and tensor.size() == size:
        return tensor
    if tuple(tensor.shape) != size:
        # A copy would broadcast into the traced size: a wrong result, never a fix.
        raise InductorError(
            f"an ATen call returned size {tuple(tensor.shape)} where its meta rule (the traced "
            f"graph's meta['val']) said {size}; the compiled graph cannot use this result. "
            "Compile with backend='aot_eager' for this function"
        )
    if tensor.numel() <= 1 or _same_strides(tensor, size, stride):
        return tensor
    out = torch.empty_strided(size, stride, dtype=tensor.dtype, device=tensor.device)
    expanded = [d for d, (n, step) in enumerate(zip(size, stride)) if step == 0 and n > 1]
    if expanded:
        # An expanded layout (the traced value repeats along these dims, so their
        # elements agree): one element of each goes into the memory they share.
        target = out
        for d in expanded:
            target, tensor = target.narrow(d, 0, 1), tensor.narrow(d, 0, 1)
        target.copy_(tensor)
        return out
    return out.copy_(tensor)


def check_layout(tensor: torch.Tensor, size: tuple, stride: tuple) -> None:
    """Kernels index ATen results by their predicted layout; a different one is an error."""
    if tensor.stride() == stride and tensor.size() == size:
        return
    if tuple(tensor.shape) != size or (
        tensor.numel() > 1 and not _same_strides(tensor, size, stride)
    ):
        raise InductorError(
            f"an ATen call returned size {tuple(tensor.shape)} stride {tensor.stride()} but the "
            f"compiled kernels expect size {size} stride {stride}; the graph's meta['val'] "
            "does not match what ATen computes"
        )


def _same_strides(tensor, size, stride) -> bool:
    return all(s == 1 or a == b for s, a, b in zip(size, tensor.stride(), stride))


def slice_scatter_into(x: torch.Tensor, src: torch.Tensor, dim=0, start=None, end=None, step=1):
    """`aten.slice_scatter` stored into `x` itself: only the slice's elements are written."""
    torch.ops.aten.slice.Tensor(x, dim, start, end, step).copy_(src)
    return x


def select_scatter_into(x: torch.Tensor, src: torch.Tensor, dim: int, index: int):
    """`aten.select_scatter` stored into `x` itself: only the selected elements are written."""
    torch.ops.aten.select.int(x, dim, index).copy_(src)
    return x


def written_through(x: torch.Tensor, written: torch.Tensor) -> torch.Tensor:
    """`x`, after `written` (a view of `x`'s memory) was written in place: a scatter whose
    source was stored into the place it scatters to passes `x` on, in the wrapper's
    order after the write."""
    return x


# The wrapper's calls above that write their first argument (as an ATen op whose schema
# is mutable does): passes moving steps must not move a read of it across them.
WRITES_FIRST_ARGUMENT = frozenset({slice_scatter_into, select_scatter_into})
