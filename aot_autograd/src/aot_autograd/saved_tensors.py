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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["SavedTensors", "StaleSavedTensorError", "stale_saved_tensor_errors"]


class StaleSavedTensorError(RuntimeError):
    """A tensor the backward needs was modified in place after autograd saved it."""


@dataclass(slots=True)
class _Saved:
    tensor: torch.Tensor
    version: int
    geometry: tuple
    node: fx.Node | None

    def stale(self) -> bool:
        return self.tensor._version != self.version


class SavedTensors:
    """Saved-tensor hooks of a trace; see the module docstring."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.saved: list[_Saved] = []
        self.raising = False
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def pack(self, t: torch.Tensor) -> _Saved:
        record = self.recorder.records.get(id(t))
        node = None
        if record is not None and record.version == record.base.version:
            node = record.node
        geometry = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
        entry = _Saved(t, t._version, geometry, node)
        self.saved.append(entry)
        return entry

    def unpack(self, entry: _Saved) -> torch.Tensor:
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
