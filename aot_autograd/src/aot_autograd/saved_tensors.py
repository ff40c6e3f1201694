"""Tensors autograd saves for the backward, and in-place ops that change them later.

Eager autograd stamps each saved tensor with its version counter and raises at
backward when an op needing it finds it modified in place since (`v = a - b;
y = a / v; v.mul_(2)`, or `v.unsqueeze_(0)`, which changes its shape). The joint
trace unpacks saved tensors through hooks (no version check), so the traced
backward would read the tensor's new value, or its new shape, and fail to trace.

`SavedTensors` are the hooks the trace runs under. Packing notes the tensor's
version, geometry and graph node. Unpacking a tensor modified since:
- while the backward is traced, gives a stand-in holding the value it had when
  saved (the node of that time, the geometry of that time), so the trace goes on;
- while an output is probed (`raising`), raises eager's error, which the compiled
  function raises at that output's backward (`stale_saved_tensor_errors`).

Eager's check also covers writes after the call: a backward reading an input the
forward saved raises where the caller wrote into that input since. The partitioner may
save another value in its place (`cos(x)` for `sin(x)`'s backward, an output already),
so the run time checks the inputs eager's nodes would read themselves: while the
backward is traced, each unpack of a saved input (or a view of one) notes the autograd
node reading it, and `inputs_read_by_backward` says which outputs' backward reach it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.utils._python_dispatch import _disable_current_modes

from aot_autograd.backward_formulas import autograd_nodes

__all__ = [
    "EAGER_SAVED",
    "SavedTensors",
    "StaleSavedTensorError",
    "inputs_read_by_backward",
    "stale_saved_tensor_errors",
]


# Node meta flag: a value eager's backward reads saved (a partitioner saves it, rather
# than recomputing it from inputs the caller may write into since).
EAGER_SAVED = "eager_saved"


class StaleSavedTensorError(RuntimeError):
    """A tensor the backward needs was modified in place after autograd saved it."""


@dataclass(slots=True)
class _Saved:
    tensor: torch.Tensor
    version: int
    geometry: tuple
    node: fx.Node | None
    input_index: int | None  # the input it is (or views), else None

    def stale(self) -> bool:
        return self.tensor._version != self.version


class _TraceHooks:
    """`saved_tensors_hooks(pack, unpack)`, pushed inside `disable_saved_tensors_hooks`
    too: they are the trace's own, not the user's (whose code eager runs there); the
    disabling is put back once they are popped (torch refuses it while hooks are on)."""

    def __init__(self, pack: Any, unpack: Any) -> None:
        self.hooks = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
        self.messages: list[str | None] = []

    def __enter__(self) -> None:
        message = torch._C._autograd._saved_tensors_hooks_get_disabled_error_message()
        if message is not None:
            torch._C._autograd._saved_tensors_hooks_enable()
        self.messages.append(message)
        try:
            self.hooks.__enter__()
        except BaseException:
            self._restore()
            raise

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self.hooks.__exit__(*exc_info)
        finally:
            self._restore()

    def _restore(self) -> None:
        message = self.messages.pop()
        if message is not None:
            torch._C._autograd._saved_tensors_hooks_disable(message)


class SavedTensors:
    """Saved-tensor hooks of a trace; see the module docstring."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.saved: list[_Saved] = []
        self.raising = False
        # (input index, autograd node) per unpack of a saved input, while `reads` is a list
        self.reads: list[tuple[int, Any]] | None = None
        self.hooks = _TraceHooks(self.pack, self.unpack)

    def pack(self, t: torch.Tensor) -> _Saved:
        record = self.recorder.records.get(id(t))
        node = input_index = None
        if record is not None:
            input_index = record.base.input_index
            if record.version == record.base.version:
                node = record.node
        geometry = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
        entry = _Saved(t, t._version, geometry, node, input_index)
        self.saved.append(entry)
        return entry

    def unpack(self, entry: _Saved) -> torch.Tensor:
        if self.reads is not None and entry.input_index is not None:
            self.reads.append((entry.input_index, torch._C._current_autograd_node()))
        if self.reads is not None and entry.node is not None and not entry.stale():
            entry.node.meta[EAGER_SAVED] = True
        if not entry.stale():
            return entry.tensor
        if self.raising or entry.node is None:
            t = entry.tensor
            raise StaleSavedTensorError(
                "one of the variables needed for gradient computation has been modified by "
                f"an inplace operation: [{t.dtype} {list(t.shape)}], is at version "
                f"{t._version}; expected version {entry.version} instead. Clone the tensor "
                "before modifying it in place, or modify it after the backward"
            )
        shape, stride, offset = entry.geometry
        with _disable_current_modes(), torch.no_grad():
            stand_in = entry.tensor.as_strided(shape, stride, offset)
        self.recorder._new_base(stand_in, entry.node)
        return stand_in

    def any_stale(self) -> bool:
        return any(entry.stale() for entry in self.saved)


def stale_saved_tensor_errors(
    saved: SavedTensors, outputs: Sequence[Any], leaves_of: Any
) -> dict[int, str]:
    """Per output, eager's error where its backward reads a saved tensor modified since."""
    if not saved.any_stale():
        return {}
    errors = {}
    saved.raising = True
    try:
        for i, t in enumerate(outputs):
            if not isinstance(t, torch.Tensor) or t.grad_fn is None:
                continue
            if not (t.is_floating_point() or t.is_complex()):
                continue
            leaves = leaves_of(t.grad_fn)
            if not leaves:
                continue
            grad = torch.ones(tuple(t.shape), dtype=t.dtype, device=t.device)
            try:
                with torch.enable_grad():
                    torch.autograd.grad(t, leaves, grad, allow_unused=True, retain_graph=True)
            except StaleSavedTensorError as error:
                errors[i] = str(error)
            except Exception:  # noqa: BLE001, S112 - other failures are the traced backward's
                continue
    finally:
        saved.raising = False
    return errors


def inputs_read_by_backward(
    reads: Sequence[tuple[int, Any]], outputs: Sequence[torch.Tensor]
) -> tuple[tuple[int, frozenset[int]], ...]:
    """(input index, the positions in `outputs` whose backward reads it) per input that
    eager's backward reads saved (`reads`: `SavedTensors.reads` of the traced backward
    from `outputs`): an autograd node reads it for an output whose graph reaches it."""
    if not reads:
        return ()
    # NOTE: the nodes in `reads` are held, so each has one Python object while compared.
    held = [list(autograd_nodes([t.grad_fn])) for t in outputs]
    reached = [{id(node) for node in nodes} for nodes in held]
    by_input: dict[int, set[int]] = {}
    for index, node in reads:
        if node is None:
            continue
        readers = by_input.setdefault(index, set())
        readers.update(j for j, nodes in enumerate(reached) if id(node) in nodes)
    return tuple((i, frozenset(js)) for i, js in sorted(by_input.items()) if js)
