"""Shape ops outside the core set (split, stack, flatten, ...) as core views and copies."""

from __future__ import annotations

import torch

from prim_decomp.decompositions._opmath import aten
from prim_decomp.decompositions._registry import COMPOSITE

__all__: list[str] = []


def _dim(dim: int, ndim: int) -> int:
    return dim % max(ndim, 1)


def _is_contiguous(x: torch.Tensor) -> bool:
    expected = 1
    for size, stride in reversed(list(zip(x.shape, x.stride(), strict=True))):
        if size != 1 and stride != expected:
            return False
        expected = expected * size
    return True


@COMPOSITE.register(aten.transpose.int)
def transpose(x: torch.Tensor, dim0: int, dim1: int) -> torch.Tensor:
    order = list(range(x.dim()))
    if x.dim() == 0:
        return aten.alias.default(x)
    a, b = _dim(dim0, x.dim()), _dim(dim1, x.dim())
    order[a], order[b] = order[b], order[a]
    return aten.permute.default(x, order)


@COMPOSITE.register(aten.t.default)
def t(x: torch.Tensor) -> torch.Tensor:
    return transpose(x, 0, 1) if x.dim() == 2 else aten.alias.default(x)


@COMPOSITE.register(aten.reshape.default)
def reshape(x: torch.Tensor, shape) -> torch.Tensor:
    if _is_contiguous(x):
        return aten.view.default(x, shape)
    return aten.view.default(aten.clone.default(x, memory_format=torch.contiguous_format), shape)


@COMPOSITE.register(aten._unsafe_view.default)
def unsafe_view(x: torch.Tensor, shape) -> torch.Tensor:
    return aten.view.default(x, shape)


@COMPOSITE.register(aten.contiguous.default)
def contiguous(x: torch.Tensor, memory_format=torch.contiguous_format) -> torch.Tensor:
    return aten.clone.default(x, memory_format=memory_format)


@COMPOSITE.register(aten.flatten.using_ints)
def flatten(x: torch.Tensor, start_dim: int = 0, end_dim: int = -1) -> torch.Tensor:
    if x.dim() == 0:
        return reshape(x, [1])
    start, end = _dim(start_dim, x.dim()), _dim(end_dim, x.dim())
    if start == end:
        return aten.alias.default(x)
    middle = 1
    for axis in range(start, end + 1):
        middle = middle * x.shape[axis]
    return reshape(x, list(x.shape[:start]) + [middle] + list(x.shape[end + 1 :]))


@COMPOSITE.register(aten.unflatten.int)
def unflatten(x: torch.Tensor, dim: int, sizes) -> torch.Tensor:
    axis = _dim(dim, x.dim())
    sizes = list(sizes)
    if -1 in sizes:
        known = 1
        for size in sizes:
            known = known * (1 if size == -1 else size)
        sizes[sizes.index(-1)] = x.shape[axis] // known
    return aten.view.default(x, list(x.shape[:axis]) + sizes + list(x.shape[axis + 1 :]))


@COMPOSITE.register(aten.squeeze.default)
def squeeze_all(x: torch.Tensor) -> torch.Tensor:
    return aten.squeeze.dims(x, [axis for axis in range(x.dim()) if x.shape[axis] == 1])


@COMPOSITE.register(aten.split.Tensor)
def split(x: torch.Tensor, split_size, dim: int = 0):
    axis = _dim(dim, x.dim())
    length = x.shape[axis]
    if split_size == 0:
        return [aten.alias.default(x)] if length == 0 else []
    pieces = max((length + split_size - 1) // split_size, 1)
    sizes = [split_size] * (pieces - 1) + [length - split_size * (pieces - 1)]
    return aten.split_with_sizes.default(x, sizes, axis)


@COMPOSITE.register(aten.split.sizes)
def split_sizes(x: torch.Tensor, split_size, dim: int = 0):
    return aten.split_with_sizes.default(x, split_size, dim)


@COMPOSITE.register(aten.chunk.default)
def chunk(x: torch.Tensor, chunks: int, dim: int = 0):
    length = x.shape[_dim(dim, x.dim())]
    split_size = (length + chunks - 1) // chunks
    if split_size == 0 and length == 0:
        return aten.split_with_sizes.default(x, [0] * chunks, dim)
    return split(x, split_size, dim)


@COMPOSITE.register(aten.unbind.int)
def unbind(x: torch.Tensor, dim: int = 0):
    axis = _dim(dim, x.dim())
    return [aten.select.int(x, axis, i) for i in range(x.shape[axis])]


@COMPOSITE.register(aten.narrow.default)
def narrow(x: torch.Tensor, dim: int, start, length) -> torch.Tensor:
    axis = _dim(dim, x.dim())
    if start < 0:
        start = start + x.shape[axis]
    return aten.slice.Tensor(x, axis, start, start + length)


@COMPOSITE.register(aten.stack.default)
def stack(tensors, dim: int = 0) -> torch.Tensor:
    axis = dim % (tensors[0].dim() + 1)
    return aten.cat.default([aten.unsqueeze.default(t, axis) for t in tensors], axis)


@COMPOSITE.register(aten.expand_as.default)
def expand_as(x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return aten.expand.default(x, list(other.shape))


@COMPOSITE.register(aten.view_as.default)
def view_as(x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    return aten.view.default(x, list(other.shape))


@COMPOSITE.register(aten.swapaxes.default, aten.swapdims.default)
def swapaxes(x: torch.Tensor, axis0: int, axis1: int) -> torch.Tensor:
    return transpose(x, axis0, axis1)


@COMPOSITE.register(aten.movedim.int)
def movedim(x: torch.Tensor, source: int, destination: int) -> torch.Tensor:
    order = list(range(x.dim()))
    moved = order.pop(_dim(source, x.dim()))
    order.insert(_dim(destination, x.dim()), moved)
    return aten.permute.default(x, order)


@COMPOSITE.register(aten.roll.default)
def roll(x: torch.Tensor, shifts, dims=()) -> torch.Tensor:
    if len(dims) == 0:
        flat = reshape(x, [-1])
        return aten.view.default(roll(flat, shifts, [0]), list(x.shape))
    for shift, dim in zip(shifts, dims, strict=True):
        axis = _dim(dim, x.dim())
        length = x.shape[axis]
        if length == 0:
            continue
        start = (length - shift % length) % length
        tail = aten.slice.Tensor(x, axis, start, length)
        head = aten.slice.Tensor(x, axis, 0, start)
        x = aten.cat.default([tail, head], axis)
    return x


@COMPOSITE.register(aten.lift_fresh_copy.default)
def lift_fresh_copy(x: torch.Tensor) -> torch.Tensor:
    return aten.clone.default(x)


@COMPOSITE.register(aten.detach.default)
def detach(x: torch.Tensor) -> torch.Tensor:
    return aten.alias.default(x)


@COMPOSITE.register(aten.repeat_interleave.self_int)
def repeat_interleave(x, repeats: int, dim=None, *, output_size=None):
    if dim is None:
        x, dim = reshape(x, [-1]), 0
    axis = _dim(dim, x.dim())
    expanded = aten.unsqueeze.default(x, axis + 1)
    shape = list(expanded.shape)
    shape[axis + 1] = repeats
    expanded = aten.expand.default(expanded, shape)
    final = list(x.shape)
    final[axis] = x.shape[axis] * repeats
    return reshape(aten.clone.default(expanded), final)
