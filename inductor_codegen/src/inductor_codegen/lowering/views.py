"""Lowerings of view ops: a new index into the same loader, or new strides over a buffer.

When the input is a strided window of a buffer (`TensorValue.view`), the result
stays one (permute, expand, slice, select, reshape of compatible strides), so
returning it or passing it to ATen needs no copy. Otherwise the view is index
arithmetic composed into the loader.
"""

from __future__ import annotations

import sympy
import torch

from inductor_codegen.errors import UnsupportedGraphError
from inductor_codegen.indexing import FloorDiv, IndexMod, as_index, reshape_index, view_strides
from inductor_codegen.ir import ComputedBuffer, Layout, TensorValue
from inductor_codegen.lowering.common import broadcasts, node_size, node_val, normalize_dim
from inductor_codegen.lowering.graph import meta_layout
from inductor_codegen.lowering.registry import register_lowering

__all__ = ["reshape_value"]

aten = torch.ops.aten


def _strided(value: TensorValue, size, stride, offset) -> TensorValue:
    base = value.view
    layout = Layout(value.dtype, tuple(size), tuple(stride), offset)
    result = TensorValue.of_buffer(base.buffer, layout)
    return result


def reshape_value(value: TensorValue, new_size) -> TensorValue:
    new_size = tuple(new_size)
    if value.view is not None:
        lay = value.view.layout
        strides = view_strides(lay.size, lay.stride, new_size)
        if strides is not None:
            return _strided(value, new_size, strides, lay.offset)
    old_size, loader = value.size, value.loader

    def load(idx):
        return loader(tuple(reshape_index(old_size, new_size, idx)))

    return TensorValue(value.dtype, new_size, load)


@register_lowering(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(ctx, node, x, size):
    return reshape_value(x, node_size(node))


@register_lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def squeeze(ctx, node, x, dim=None):
    return reshape_value(x, node_size(node))


@register_lowering(aten.unsqueeze.default)
def unsqueeze(ctx, node, x, dim):
    return reshape_value(x, node_size(node))


@register_lowering(aten.alias.default, aten.detach.default)
def alias(ctx, node, x):
    return x


@register_lowering(aten.permute.default)
def permute(ctx, node, x, dims):
    dims = [normalize_dim(d, x.ndim) for d in dims]
    size = tuple(x.size[d] for d in dims)
    if x.view is not None:
        lay = x.view.layout
        return _strided(x, size, [lay.stride[d] for d in dims], lay.offset)
    inverse = [0] * len(dims)
    for new_d, old_d in enumerate(dims):
        inverse[old_d] = new_d
    loader = x.loader
    return TensorValue(
        x.dtype, size, lambda idx: loader(tuple(idx[inverse[d]] for d in range(len(dims))))
    )


@register_lowering(aten.t.default)
def t(ctx, node, x):
    return permute(ctx, node, x, list(reversed(range(x.ndim))))


@register_lowering(aten.transpose.int)
def transpose(ctx, node, x, dim0, dim1):
    dims = list(range(x.ndim))
    if x.ndim:
        a, b = normalize_dim(dim0, x.ndim), normalize_dim(dim1, x.ndim)
        dims[a], dims[b] = dims[b], dims[a]
    return permute(ctx, node, x, dims)


@register_lowering(aten.expand.default)
def expand(ctx, node, x, size, implicit=False):
    size = node_size(node)
    offset = len(size) - x.ndim
    if x.view is not None:
        lay = x.view.layout
        strides = [sympy.Integer(0)] * offset + [
            sympy.Integer(0) if broadcasts(x.size[d], size[d + offset]) else lay.stride[d]
            for d in range(x.ndim)
        ]
        return _strided(x, size, strides, lay.offset)
    keep = [not broadcasts(x.size[d], size[d + offset]) for d in range(x.ndim)]
    loader = x.loader
    return TensorValue(
        x.dtype,
        size,
        lambda idx: loader(
            tuple(idx[d + offset] if keep[d] else sympy.Integer(0) for d in range(len(keep)))
        ),
    )


@register_lowering(aten.slice.Tensor)
def slice_(ctx, node, x, dim=0, start=None, end=None, step=1):
    dim = normalize_dim(dim, x.ndim)
    size = node_size(node)
    start = _slice_start(x.size[dim], 0 if start is None else start)
    if x.view is not None:
        lay = x.view.layout
        strides = list(lay.stride)
        strides[dim] = lay.stride[dim] * step
        return _strided(x, size, strides, lay.offset + start * lay.stride[dim])
    loader = x.loader

    def load(idx):
        idx = list(idx)
        idx[dim] = idx[dim] * step + start
        return loader(tuple(idx))

    return TensorValue(x.dtype, size, load)


def _slice_start(length, start):
    """Where a slice starts: `start` wrapped (if negative) and clamped to [0, length]."""
    if length.is_Integer and not isinstance(start, sympy.Expr):
        length = int(length)
        return max(0, min(length, start + length if start < 0 else start))
    start = sympy.sympify(start)
    if start.is_Integer and int(start) < 0:
        start = start + length
    return sympy.Max(0, sympy.Min(length, start))


@register_lowering(aten.select.int)
def select(ctx, node, x, dim, index):
    dim = normalize_dim(dim, x.ndim)
    if isinstance(index, int) and index < 0:
        index = index + x.size[dim]
    size = node_size(node)
    if x.view is not None:
        lay = x.view.layout
        strides = [s for d, s in enumerate(lay.stride) if d != dim]
        return _strided(x, size, strides, lay.offset + index * lay.stride[dim])
    loader = x.loader
    return TensorValue(
        x.dtype, size, lambda idx: loader((*idx[:dim], sympy.sympify(index), *idx[dim:]))
    )


@register_lowering(aten.as_strided.default)
def as_strided(ctx, node, x, size, stride, storage_offset=None):
    """A window of the storage `x` shares with its base, addressed as eager lays it out.

    The window reads storage positions, so the buffer under `x` must hold the base's
    elements where eager keeps them: the base (the first node of `x`'s view chain that
    is not a view) is stored in its traced layout when its value is not already.
    """
    source = node.args[0]
    if storage_offset is None:
        storage_offset = node_val(source).storage_offset()
    owner = _storage_owner(source)
    if x.view is not None and _holds_storage_as_traced(ctx, x, source, owner):
        if not isinstance(ctx.buffer_by_name.get(x.view.buffer), ComputedBuffer):
            return ctx.fallback(node, (x, size, stride, storage_offset), {})
        buffer = x.view.buffer
        storage_offset = storage_offset - node_val(owner).storage_offset()
    else:
        owner_val = node_val(owner)
        traced = meta_layout(owner)
        if traced is None or owner_val.storage_offset() != 0:
            raise UnsupportedGraphError(
                f"node {node.name} (as_strided) reads the storage of {owner.name}, which "
                "eager lays out with holes or an offset; compute the window with view ops"
            )
        value = ctx.env[owner]
        stored = ctx.realize(TensorValue(value.dtype, value.size, value.loader), traced)
        buffer = stored.view.buffer
    layout = Layout(
        x.dtype,
        tuple(as_index(s) for s in size),
        tuple(as_index(s) for s in stride),
        as_index(storage_offset),
    )
    return TensorValue.of_buffer(buffer, layout)


def _is_view(node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None:
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _storage_owner(node):
    """The node whose result owns the storage `node` views (`node` itself if not a view)."""
    while _is_view(node) and node.args and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def _holds_storage_as_traced(ctx, x: TensorValue, source, owner) -> bool:
    """Whether `x` is a window of a buffer laid out as eager lays out `owner`'s storage."""
    buffer = ctx.buffer_by_name.get(x.view.buffer)
    if buffer is None or buffer.layout is None:
        return False
    traced, owner_val = node_val(source), node_val(owner)
    relative = as_index(traced.storage_offset() - owner_val.storage_offset())
    return (
        tuple(buffer.layout.size) == tuple(as_index(s) for s in owner_val.shape)
        and tuple(buffer.layout.stride) == tuple(as_index(s) for s in owner_val.stride())
        and tuple(x.view.layout.stride) == tuple(as_index(s) for s in traced.stride())
        and x.view.layout.offset - buffer.layout.offset == relative
    )


@register_lowering(aten.split_with_sizes.default)
def split_with_sizes(ctx, node, x, split_sizes, dim=0):
    return _split(x, split_sizes, dim)


@register_lowering(aten.split.Tensor)
def split(ctx, node, x, split_size, dim=0):
    length = int(x.size[normalize_dim(dim, x.ndim)])
    sizes = [min(split_size, length - start) for start in range(0, length, split_size)] or [0]
    return _split(x, sizes, dim)


def _split(x, sizes, dim):
    dim = normalize_dim(dim, x.ndim)
    pieces, start = [], 0
    for size in sizes:
        pieces.append(_narrow(x, dim, start, size))
        start += size
    return tuple(pieces)


def _narrow(x: TensorValue, dim: int, start: int, length: int) -> TensorValue:
    size = tuple(as_index(length) if d == dim else s for d, s in enumerate(x.size))
    if x.view is not None:
        lay = x.view.layout
        return _strided(x, size, lay.stride, lay.offset + start * lay.stride[dim])
    loader = x.loader

    def load(idx):
        idx = list(idx)
        idx[dim] = idx[dim] + start
        return loader(tuple(idx))

    return TensorValue(x.dtype, size, load)


@register_lowering(aten.slice_backward.default)
def slice_backward(ctx, node, grad, input_sizes, dim, start, end, step):
    """Zeros of the input's size holding `grad` at the sliced positions."""
    from inductor_codegen.lowering.misc import masked_value

    size = node_size(node)
    dim = normalize_dim(dim, len(size))
    length = int(size[dim])
    start = 0 if start is None else (start + length if start < 0 else start)
    start = max(0, min(length, start))
    count = int(grad.size[dim])
    last = start + (count - 1) * step
    loader, dtype = grad.loader, grad.dtype

    def load(idx):
        position = idx[dim]
        conds = [("ge", position, start), ("lt", position, last + 1)] if count else [("lt", 0, -1)]
        inner = position - start
        if step != 1:
            conds.append(("eq", IndexMod(inner, step), 0))
            inner = FloorDiv(inner, step)
        return masked_value(conds, lambda: loader((*idx[:dim], inner, *idx[dim + 1 :])), dtype)

    return TensorValue(dtype, size, load)


@register_lowering(aten.select_backward.default)
def select_backward(ctx, node, grad, input_sizes, dim, index):
    """Zeros of the input's size holding `grad` at position `index` of `dim`."""
    from inductor_codegen.lowering.misc import masked_value

    size = node_size(node)
    dim = normalize_dim(dim, len(size))
    index = index + int(size[dim]) if index < 0 else index
    loader, dtype = grad.loader, grad.dtype

    def load(idx):
        conds = [("eq", idx[dim], index)]
        return masked_value(conds, lambda: loader((*idx[:dim], *idx[dim + 1 :])), dtype)

    return TensorValue(dtype, size, load)
