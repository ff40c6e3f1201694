"""Fakes with symbolic sizes: which dims are dynamic, and the meta tensor that carries them.

A dim is dynamic when the caller names it (`mode.from_real(t, source, dynamic_dims=[0])`)
or the tensor carries a mark (`mark_dynamic`, `maybe_mark_dynamic`), unless it is
marked static. Such a fake's meta tensor is made with `empty_strided` over
SymInts from the mode's ShapeEnv, on a fresh meta storage of its own (a storage
of fixed size would bound the symbols), so aliasing with other inputs is not
tracked for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from guards.errors import FakeTensorError
from guards.fake_rules import register_fake_rule
from guards.marks import DynamicRange, marks_of

if TYPE_CHECKING:
    from guards.fake_tensor import FakeTensorMode

__all__ = ["dynamic_dims_of", "symbolic_meta"]

aten = torch.ops.aten
_UNBOUNDED = DynamicRange()


def dynamic_dims_of(
    mode: FakeTensorMode, tensor: torch.Tensor, requested: Any
) -> dict[int, DynamicRange | None]:
    """Dims of `tensor` to make symbolic, each with its mark_dynamic range (or None)."""
    marks = marks_of(tensor)
    dims: dict[int, DynamicRange | None] = {}
    if requested is not None:
        items = requested.items() if isinstance(requested, dict) else ((d, None) for d in requested)
        for dim, limits in items:
            if not -tensor.dim() <= dim < tensor.dim():
                raise FakeTensorError(
                    f"dynamic dim {dim} is out of range for a tensor of {tensor.dim()} dimensions"
                )
            dims[dim % tensor.dim()] = limits
    if mode.shape_env is not None:
        # mark_dynamic marks apply where sizes can be symbolic; a mode without a ShapeEnv
        # traces static sizes (dynamic=False, or a backend that takes only static graphs)
        # a marked dim gets a symbol of its own (a range, unbounded at least), never one
        # shared with an equal size (duck sizing), as torch.compile
        for dim in marks.maybe_dynamic:
            dims.setdefault(dim, _UNBOUNDED)
        for dim, limits in marks.dynamic.items():
            dims[dim] = _UNBOUNDED if limits is None else limits
    for dim in marks.static:
        dims.pop(dim, None)
    if dims and mode.shape_env is None:
        raise FakeTensorError(
            f"dims {sorted(dims)} of a tensor of shape {tuple(tensor.shape)} are dynamic but "
            "the FakeTensorMode has no ShapeEnv; build it with FakeTensorMode(shape_env=ShapeEnv())"
        )
    return dims


def symbolic_meta(
    mode: FakeTensorMode, tensor: torch.Tensor, source: Any, dims: dict[int, Any]
) -> torch.Tensor:
    """A meta tensor with `tensor`'s dtype and SymInt sizes/strides at `dims` (needs `source`)."""
    if source is None:
        raise FakeTensorError(
            "a fake with dynamic dims needs the source its sizes are read from; pass "
            "mode.from_real(t, source=LocalSource('x'), dynamic_dims=...)"
        )
    sizes, strides, offset = mode.shape_env.create_symbolic_sizes_strides(tensor, source, dims)
    meta = torch.empty_strided(sizes, strides, dtype=tensor.dtype, device="meta")
    if offset:
        meta = meta.as_strided(sizes, strides, offset)
    return meta


# NOTE: with symbolic sizes, metadata queries reach __torch_dispatch__ as ops; calling
# the op on the meta tensor then fails inside torch's argument parser, so they are
# answered from the meta tensor's own (symbolic) metadata.
_QUERIES = {
    aten.size.default: lambda meta: list(meta.size()),
    aten.stride.default: lambda meta: list(meta.stride()),
    aten.size.int: lambda meta, dim: meta.size(dim),
    aten.stride.int: lambda meta, dim: meta.stride(dim),
    aten.sym_size.int: lambda meta, dim: meta.size(dim),
    aten.sym_stride.int: lambda meta, dim: meta.stride(dim),
    aten.numel.default: lambda meta: meta.numel(),
    aten.sym_numel.default: lambda meta: meta.numel(),
    aten.sym_storage_offset.default: lambda meta: meta.storage_offset(),
}


@register_fake_rule(*_QUERIES)
def _metadata_query(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    return _QUERIES[func](args[0].meta, *args[1:], **kwargs)
