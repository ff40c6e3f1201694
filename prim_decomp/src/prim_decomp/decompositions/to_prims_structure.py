"""Core ATen views, copies, reductions, factories and indexing -> ember_prims."""

from __future__ import annotations

import torch

from prim_decomp.decompositions._opmath import aten, is_non_overlapping_and_dense, normalize_dims
from prim_decomp.decompositions._prim_operands import (
    broadcast_shape,
    convert,
    prim,
    to_operand,
)
from prim_decomp.decompositions._registry import TO_PRIMS
from prim_decomp.type_promotion import compute_dtype, result_dtype

__all__: list[str] = []


def _dim(dim: int, ndim: int) -> int:
    return dim % max(ndim, 1)


def _contiguous_strides(shape: list) -> list:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running = running * torch.sym_max(size, 1)
    return list(reversed(strides))


def _infer_shape(shape: list, numel) -> list:
    """`shape` with a -1 replaced by what `numel` leaves for it."""
    shape = list(shape)
    if -1 in shape:
        known = 1
        for size in shape:
            known = known * (1 if size == -1 else size)
        shape[shape.index(-1)] = numel // known if known != 0 else 0
    return shape


# --- views -----------------------------------------------------------------------
@TO_PRIMS.register(aten.view.default, aten._unsafe_view.default)
def view(x, shape):
    return prim.reshape.default(x, _infer_shape(shape, x.numel()))


@TO_PRIMS.register(aten.permute.default)
def permute(x, dims):
    return prim.permute.default(x, [_dim(d, x.dim()) for d in dims])


@TO_PRIMS.register(aten.expand.default)
def expand(x, shape, *, implicit: bool = False):
    offset = len(shape) - x.dim()
    target = [x.shape[i - offset] if size == -1 else size for i, size in enumerate(shape)]
    return prim.broadcast_in_dim.default(x, target, list(range(offset, len(shape))))


@TO_PRIMS.register(aten.unsqueeze.default)
def unsqueeze(x, dim):
    axis = _dim(dim, x.dim() + 1)
    shape = list(x.shape[:axis]) + [1] + list(x.shape[axis:])
    kept = [d for d in range(x.dim() + 1) if d != axis]
    return prim.broadcast_in_dim.default(x, shape, kept)


@TO_PRIMS.register(aten.squeeze.dims, aten.squeeze.dim)
def squeeze(x, dims):
    dims = [dims] if isinstance(dims, int) else dims
    axes = sorted({_dim(d, x.dim()) for d in dims if x.dim() > 0})
    return prim.squeeze.default(x, [d for d in axes if x.shape[d] == 1])


@TO_PRIMS.register(aten.slice.Tensor)
def slice_(x, dim=0, start=None, end=None, step=1):
    axis = _dim(dim, x.dim())
    length = x.shape[axis]
    start = 0 if start is None else start
    end = length if end is None else end
    start = start + length if start < 0 else start
    end = end + length if end < 0 else end
    start = torch.sym_min(torch.sym_max(start, 0), length)
    end = torch.sym_min(torch.sym_max(end, start), length)
    return prim.slice.default(x, axis, start, end, step)


@TO_PRIMS.register(aten.select.int)
def select(x, dim, index):
    axis = _dim(dim, x.dim())
    index = index + x.shape[axis] if index < 0 else index
    return prim.squeeze.default(prim.slice.default(x, axis, index, index + 1, 1), [axis])


@TO_PRIMS.register(aten.as_strided.default)
def as_strided(x, size, stride, storage_offset=None):
    offset = x.storage_offset() if storage_offset is None else storage_offset
    return prim.as_strided.default(x, size, stride, offset)


@TO_PRIMS.register(aten.alias.default)
def alias(x):
    return prim.as_strided.default(x, list(x.shape), list(x.stride()), x.storage_offset())


@TO_PRIMS.register(aten.split_with_sizes.default)
def split_with_sizes(x, sizes, dim=0):
    axis = _dim(dim, x.dim())
    pieces, start = [], 0
    for size in sizes:
        pieces.append(prim.slice.default(x, axis, start, start + size, 1))
        start = start + size
    return pieces


# --- copies ----------------------------------------------------------------------
def _strides_for(x, memory_format) -> list:
    if memory_format == torch.channels_last and x.dim() == 4:
        n, c, h, w = x.shape
        return [h * w * c, 1, w * c, c]
    if memory_format in (None, torch.preserve_format) and is_non_overlapping_and_dense(x):
        return list(x.stride())
    return _contiguous_strides(list(x.shape))


@TO_PRIMS.register(aten.clone.default)
def clone(x, *, memory_format=None):
    return prim.copy_strided.default(x, _strides_for(x, memory_format))


@TO_PRIMS.register(aten._to_copy.default)
def to_copy(x, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
            memory_format=None):  # fmt: skip
    if device is not None and torch.device(device) != x.device:
        return NotImplemented
    out = prim.convert_element_type.default(x, dtype or x.dtype)
    if memory_format not in (None, torch.preserve_format):
        out = prim.copy_strided.default(out, _strides_for(out, memory_format))
    return out


@TO_PRIMS.register(aten.copy.default)
def copy(x, src, non_blocking=False):
    value = to_operand(src, x.dtype, list(x.shape), x.device)
    return prim.copy_strided.default(value, _strides_for(x, None))


# --- reductions --------------------------------------------------------------------
def _keep(result, x, dims, keepdim: bool):
    if not keepdim:
        return result
    shape = [1 if d in dims else size for d, size in enumerate(x.shape)]
    kept = [d for d in range(x.dim()) if d not in dims]
    return prim.broadcast_in_dim.default(result, shape, kept)


@TO_PRIMS.register(aten.sum.dim_IntList)
def sum_(x, dim=None, keepdim: bool = False, *, dtype=None):
    dims = normalize_dims(dim, x.dim())
    if dtype is None:
        is_integral = not (x.dtype.is_floating_point or x.dtype.is_complex)
        dtype = torch.int64 if is_integral else x.dtype
    computing = compute_dtype(dtype)
    total = prim.sum.default(convert(x, computing), dims)
    return _keep(convert(total, dtype), x, dims, keepdim)


@TO_PRIMS.register(aten.prod.dim_int)
def prod(x, dim, keepdim: bool = False, *, dtype=None):
    dims = normalize_dims(dim, x.dim())
    if dtype is None:
        is_integral = not (x.dtype.is_floating_point or x.dtype.is_complex)
        dtype = torch.int64 if is_integral else x.dtype
    total = prim.prod.default(convert(x, compute_dtype(dtype)), dims)
    return _keep(convert(total, dtype), x, dims, keepdim)


def _extremum_rule(prim_fn):
    def rule(x, dim=(), keepdim: bool = False):
        dims = normalize_dims(dim, x.dim())
        return _keep(prim_fn(x, dims), x, dims, keepdim)

    return rule


TO_PRIMS.add(aten.amax.default, _extremum_rule(prim.amax.default))
TO_PRIMS.add(aten.amin.default, _extremum_rule(prim.amin.default))


@TO_PRIMS.register(aten.any.dim, aten.any.dims, aten.any.default)
def any_(x, dim=None, keepdim: bool = False):
    dims = normalize_dims(dim, x.dim())
    truth = x if x.dtype == torch.bool else aten.ne.Scalar(x, 0)
    return _keep(prim.amax.default(truth, dims), x, dims, keepdim)


def _arg_rule(prim_fn):
    def rule(x, dim=None, keepdim: bool = False):
        if dim is None:
            flat = prim.reshape.default(x, [x.numel()])
            result = prim_fn(flat, 0)
            return prim.reshape.default(result, [1] * x.dim()) if keepdim else result
        axis = _dim(dim, x.dim())
        if x.dim() == 0:
            return prim.full.default([], 0, torch.int64, x.device)
        return _keep(prim_fn(x, axis), x, [axis], keepdim)

    return rule


TO_PRIMS.add(aten.argmax.default, _arg_rule(prim.argmax.default))
TO_PRIMS.add(aten.argmin.default, _arg_rule(prim.argmin.default))


@TO_PRIMS.register(aten.cumsum.default)
def cumsum(x, dim, *, dtype=None):
    if dtype is None:
        is_integral = not (x.dtype.is_floating_point or x.dtype.is_complex)
        dtype = torch.int64 if is_integral else x.dtype
    if x.dim() == 0:
        return convert(aten.clone.default(x), dtype)
    return prim.cumsum.default(convert(x, dtype), _dim(dim, x.dim()))


# --- factories ---------------------------------------------------------------------
def _device(device):
    return torch.device("cpu") if device is None else device


@TO_PRIMS.register(aten.full.default)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or result_dtype(fill_value)
    return prim.full.default(list(size), fill_value, dtype, _device(device))


@TO_PRIMS.register(aten.full_like.default)
def full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):  # fmt: skip
    out = prim.full.default(list(x.shape), fill_value, dtype or x.dtype, device or x.device)
    strides = _strides_for(x, memory_format)
    if strides != _contiguous_strides(list(x.shape)):
        out = prim.copy_strided.default(out, strides)
    return out


@TO_PRIMS.register(aten.scalar_tensor.default)
def scalar_tensor(value, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    return prim.full.default([], value, dtype, _device(device))


@TO_PRIMS.register(aten.empty.memory_format)
def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or torch.get_default_dtype()
    return prim.empty_strided.default(
        list(size), _contiguous_strides(list(size)), dtype, _device(device)
    )


@TO_PRIMS.register(aten.empty_strided.default)
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    return prim.empty_strided.default(list(size), list(stride), dtype, _device(device))


@TO_PRIMS.register(aten.arange.start_step)
def arange(start, end=None, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    if dtype is None:
        dtype = result_dtype(start, end, step)
        dtype = torch.get_default_dtype() if dtype.is_floating_point else torch.int64
    device = _device(device)
    all_ints = all(isinstance(v, (int, torch.SymInt)) for v in (start, end, step))
    if all_ints and not dtype.is_floating_point:
        length = torch.sym_max((end - start + step - (1 if step > 0 else -1)) // step, 0)
        return prim.iota.default(length, start, step, dtype, device)
    return NotImplemented


@TO_PRIMS.register(aten.rand.default)
def rand(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    return prim.uniform.default(list(size), 0.0, 1.0, dtype, _device(device))


@TO_PRIMS.register(aten.randn.default)
def randn(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    return prim.normal.default(list(size), 0.0, 1.0, dtype, _device(device))


# --- joining and indexing ------------------------------------------------------------
@TO_PRIMS.register(aten.cat.default)
def cat(tensors, dim=0):
    dtype = result_dtype(*tensors)
    kept = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)] or [tensors[0]]
    axis = _dim(dim, kept[0].dim())
    return prim.cat.default([convert(t, dtype) for t in kept], axis)


@TO_PRIMS.register(aten.gather.default)
def gather(x, dim, index, *, sparse_grad: bool = False):
    if x.dim() == 0:
        return aten.clone.default(x) if index.dim() == 0 else NotImplemented
    return prim.gather.default(x, _dim(dim, x.dim()), index)


@TO_PRIMS.register(aten.scatter.src)
def scatter(x, dim, index, src):
    if x.dim() == 0:
        return NotImplemented
    return prim.scatter.default(x, _dim(dim, x.dim()), index, convert(src, x.dtype))


@TO_PRIMS.register(aten.scatter.value)
def scatter_value(x, dim, index, value):
    if x.dim() == 0:
        return NotImplemented
    src = prim.full.default(list(index.shape), value, x.dtype, x.device)
    return prim.scatter.default(x, _dim(dim, x.dim()), index, src)


@TO_PRIMS.register(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    if x.dim() == 0:
        return NotImplemented
    return prim.scatter_add.default(x, _dim(dim, x.dim()), index, convert(src, x.dtype))


def _leading_indices(x, indices):
    """(x with the indexed dims moved first, broadcast indices, where the result dims go).

    None when the indices are not integer tensors (boolean masks stay whole).
    """
    positions = [d for d, index in enumerate(indices) if index is not None]
    if not positions or any(indices[d].dtype in (torch.bool, torch.uint8) for d in positions):
        return None
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    order = positions + [d for d in range(x.dim()) if d not in positions]
    moved = prim.permute.default(x, order) if order != list(range(x.dim())) else x
    shape = broadcast_shape(*[indices[d] for d in positions])
    wrapped = [_wrap_index(indices[d], x.shape[d], shape) for d in positions]
    return moved, wrapped, (positions[0] if adjacent else 0), len(shape)


def _wrap_index(index, size, shape):
    """Negative indices counted from the end, broadcast to `shape`."""
    index = to_operand(index, torch.int64, shape, index.device)
    negative = prim.lt.default(index, prim.full.default(shape, 0, torch.int64, index.device))
    shifted = prim.add.default(index, prim.full.default(shape, size, torch.int64, index.device))
    return prim.where.default(negative, shifted, index)


@TO_PRIMS.register(aten.index.Tensor)
def index(x, indices):
    found = _leading_indices(x, list(indices) + [None] * (x.dim() - len(indices)))
    if found is None:
        return NotImplemented
    moved, wrapped, position, index_ndim = found
    out = prim.index.default(moved, wrapped)
    if position == 0:
        return out
    order = list(range(index_ndim, index_ndim + position)) + list(range(index_ndim))
    order += list(range(index_ndim + position, out.dim()))
    return prim.permute.default(out, order)


@TO_PRIMS.register(aten.index_select.default)
def index_select(x, dim, index):
    if x.dim() == 0:
        return aten.clone.default(x)
    axis = _dim(dim, x.dim())
    indices = [None] * axis + [prim.reshape.default(index, [index.numel()])]
    return aten.index.Tensor(x, indices)


@TO_PRIMS.register(aten.index_put.default)
def index_put(x, indices, values, accumulate: bool = False):
    positions = [d for d, index in enumerate(indices) if index is not None]
    if positions != list(range(len(positions))) or not positions:
        return NotImplemented
    if any(indices[d].dtype in (torch.bool, torch.uint8) for d in positions):
        return NotImplemented
    shape = broadcast_shape(*[indices[d] for d in positions])
    wrapped = [_wrap_index(indices[d], x.shape[d], shape) for d in positions]
    target = shape + list(x.shape[len(positions) :])
    values = to_operand(values, x.dtype, target, x.device)
    return prim.index_put.default(x, wrapped, values, accumulate)


# --- repeat, flip, pad ------------------------------------------------------------------
@TO_PRIMS.register(aten.repeat.default)
def repeat(x, repeats):
    repeats = list(repeats)
    shape = [1] * (len(repeats) - x.dim()) + list(x.shape)
    x = prim.reshape.default(x, shape) if len(shape) != x.dim() else x
    interleaved, kept = [], []
    for axis, (times, size) in enumerate(zip(repeats, shape, strict=True)):
        interleaved += [times, size]
        kept.append(2 * axis + 1)
    expanded = prim.broadcast_in_dim.default(x, interleaved, kept)
    return prim.reshape.default(expanded, [t * s for t, s in zip(repeats, shape, strict=True)])


@TO_PRIMS.register(aten.flip.default)
def flip(x, dims):
    for dim in dims:
        axis = _dim(dim, x.dim())
        size = x.shape[axis]
        reversed_index = prim.iota.default(size, size - 1, -1, torch.int64, x.device)
        x = aten.index_select.default(x, axis, reversed_index)
    return aten.clone.default(x) if not dims else x


@TO_PRIMS.register(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    """Negative pads slice; positive pads concatenate blocks of `value`."""
    for pair in range(len(pad) // 2):
        axis = x.dim() - 1 - pair
        before, after = pad[2 * pair], pad[2 * pair + 1]
        length = x.shape[axis]
        x = slice_(x, axis, torch.sym_max(-before, 0), length - torch.sym_max(-after, 0))
        pieces = []
        for amount in (before, after):
            shape = list(x.shape)
            shape[axis] = torch.sym_max(amount, 0)
            pieces.append(prim.full.default(shape, value, x.dtype, x.device))
        x = prim.cat.default([pieces[0], x, pieces[1]], axis)
    return x if pad else aten.clone.default(x)
