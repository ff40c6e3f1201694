"""Factory and random ops outside the core set, as `full`, `empty_strided`, `rand`."""

from __future__ import annotations

import torch

from prim_decomp.decompositions._opmath import aten, is_non_overlapping_and_dense
from prim_decomp.decompositions._registry import COMPOSITE, COMPOUND

__all__: list[str] = []


def _options(dtype, layout, device, pin_memory) -> dict:
    return {"dtype": dtype, "layout": layout, "device": device, "pin_memory": pin_memory}


def _float_options(dtype, layout, device, pin_memory) -> dict:
    # zeros/ones without a dtype take the default dtype; full would infer int64 from 0.
    dtype = dtype if dtype is not None else torch.get_default_dtype()
    return _options(dtype, layout, device, pin_memory)


@COMPOSITE.register(aten.zeros.default)
def zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(size, 0, **_float_options(dtype, layout, device, pin_memory))


@COMPOSITE.register(aten.ones.default)
def ones(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(size, 1, **_float_options(dtype, layout, device, pin_memory))


def _like(x, dtype, device):
    return {"dtype": dtype or x.dtype, "device": device or x.device}


@COMPOSITE.register(aten.zeros_like.default)
def zeros_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return aten.full_like.default(x, 0, **_like(x, dtype, device), memory_format=memory_format)


@COMPOSITE.register(aten.ones_like.default)
def ones_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return aten.full_like.default(x, 1, **_like(x, dtype, device), memory_format=memory_format)


@COMPOSITE.register(aten.new_zeros.default)
def new_zeros(x, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(size, 0, **_like(x, dtype, device))


@COMPOSITE.register(aten.new_ones.default)
def new_ones(x, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(size, 1, **_like(x, dtype, device))


@COMPOSITE.register(aten.new_full.default)
def new_full(x, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.full.default(size, fill_value, **_like(x, dtype, device))


@COMPOSITE.register(aten.new_empty.default)
def new_empty(x, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.empty.memory_format(size, **_like(x, dtype, device))


@COMPOSITE.register(aten.empty_like.default)
def empty_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    if memory_format in (None, torch.preserve_format) and is_non_overlapping_and_dense(x):
        return aten.empty_strided.default(x.shape, x.stride(), **_like(x, dtype, device))
    return aten.empty.memory_format(x.shape, **_like(x, dtype, device))


@COMPOSITE.register(aten.arange.default)
def arange(end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.arange.start_step(0, end, 1, **_options(dtype, layout, device, pin_memory))


@COMPOSITE.register(aten.arange.start)
def arange_start(start, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.arange.start_step(start, end, 1, **_options(dtype, layout, device, pin_memory))


@COMPOSITE.register(aten.rand_like.default)
def rand_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _drawn_like(aten.rand.default, x, memory_format, **_like(x, dtype, device))


@COMPOSITE.register(aten.randn_like.default)
def randn_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # NOTE: not `_drawn_like`: eager's CPU normal_ fills a contiguous tensor by a
    # vectorized Box-Muller over blocks of 16 and a strided one element by element, other
    # numbers than a permuted contiguous draw; a strided `x` still differs from eager here.
    return aten.randn.default(x.shape, **_like(x, dtype, device))


def _drawn_like(draw, x, memory_format, **options):
    """`draw` (rand) shaped like `x`, its numbers in eager's order: `rand_like` is
    `empty_like(x).uniform_()`, which keeps a dense `x`'s layout (transposed,
    channels-last) and fills it in memory order. The draw is made contiguous over `x`'s
    dims from the largest stride to the smallest and permuted back; a contiguous `x`,
    another memory format, or symbolic strides draw as `x.shape`."""
    order = None
    if memory_format in (None, torch.preserve_format) and is_non_overlapping_and_dense(x):
        strides = list(x.stride())
        if all(type(n) is int for n in (*x.shape, *strides)):
            order = sorted(range(x.dim()), key=lambda d: (-strides[d], d))
    if order is None or order == list(range(x.dim())):
        return draw(x.shape, **options)
    drawn = draw([x.shape[d] for d in order], **options)
    return aten.permute.default(drawn, [order.index(d) for d in range(x.dim())])


@COMPOSITE.register(aten.fill.Tensor)
def fill_tensor(x, value):
    return aten.full_like.default(x, 0) + aten._to_copy.default(value, dtype=x.dtype)


@COMPOUND.register(aten.fill.Scalar)
def fill_scalar(x, value):
    return aten.full_like.default(x, value)
