"""Lowerings of scatters (index_put, index_add, scatter, scatter_add) as scatter kernels.

A scatter is a buffer with a `Scatter` body, computed by a kernel of its own in
two passes: the output is first filled with `base` (zeros, or the input being
scattered into), then for each element `u` of the update space `ranges` the
kernel stores, or adds, `value(u)` at the output element `target(u)`. Each
coordinate of `target(u)` is either an index expression over `u` (a direct
coordinate) or an int64 expression (an index loaded from a tensor), which the
kernel checks against the output's size along that dim as eager checks it.

The embedding backward (`index_put` of the rows of the gradient into a zeroed
table, accumulating) is the case that matters: the zero fill, the `where` that
masks the padding index and the casts fuse into the one kernel.

Producers fuse into `value`, `base` and the loaded indices (they are inlined
loaders), but the scatter kernel never fuses with another kernel: readers of
its output come in later kernels. With any lowering table but the default one
(the Triton generator) these ops call ATen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sympy
import torch

from inductor_codegen.indexing import Index, is_symbolic
from inductor_codegen.ir import ComputedBuffer, Expr, Layout, Op, TensorValue
from inductor_codegen.lowering.common import (
    broadcast_loader,
    cast,
    node_dtype,
    node_size,
    normalize_dim,
    scalar_expr,
)
from inductor_codegen.lowering.registry import is_cpp_table, register_lowering
from inductor_codegen.runtime import IndexCheck

__all__ = ["SCATTER_DTYPES", "Scatter", "Target"]

aten = torch.ops.aten

# Output dtypes a scatter kernel computes in place (others call ATen).
SCATTER_DTYPES = frozenset({torch.float32, torch.float64, torch.int64, torch.int32})
INDEX_DTYPES = frozenset({torch.int64, torch.int32})


@dataclass(frozen=True, slots=True)
class Target:
    """A loaded output coordinate: `offset` (int64) checked against the output's size.

    `wrap_negative`: a negative offset counts from the end (index_put); otherwise
    it is out of range (scatter, index_add), as eager decides. `skip_out_of_range`:
    an offset out of range writes nothing, instead of failing `check` (max pooling's
    backward, whose eager kernel skips an index of -1).
    """

    offset: Expr
    check: IndexCheck
    wrap_negative: bool = False
    skip_out_of_range: bool = False


@dataclass(frozen=True, slots=True)
class Scatter:
    """The body of a scatter buffer (see the module docstring).

    `target(u)` gives one entry per output dim: an Index over `u` or a `Target`.
    """

    base: Callable[[tuple[Index, ...]], Expr]
    ranges: tuple[Index, ...]
    target: Callable[[tuple[Index, ...]], tuple]
    value: Callable[[tuple[Index, ...]], Expr]
    accumulate: bool


def _supported(ctx, node, *tensors) -> bool:
    """The default table (C++), static sizes and dtypes the scatter kernel computes."""
    if not is_cpp_table(ctx.lowerings) or node_dtype(node) not in SCATTER_DTYPES:
        return False
    sizes = [*node_size(node)]
    for t in tensors:
        if isinstance(t, TensorValue):
            sizes += t.size
    return not any(is_symbolic(s) for s in sizes) and all(
        not isinstance(s, sympy.Expr) or s.is_Integer for s in sizes
    )


def scatter_buffer(ctx, node, body: Scatter, layout: Layout | None = None) -> TensorValue:
    """A new buffer computed by the scatter `body` (contiguous unless `layout` is given);
    returns a view of it."""
    if layout is None:
        layout = Layout.contiguous(node_dtype(node), node_size(node))
    buf = ComputedBuffer(ctx.new_name(), layout, body)
    ctx.add_buffer(buf)
    return TensorValue.of_buffer(buf.name, layout)


def _base(x: TensorValue, dtype) -> Callable:
    loader = x.loader
    return lambda idx: cast(loader(idx), dtype)


@register_lowering(aten.index_put.default)
def index_put(ctx, node, x, indices, values, accumulate=False):
    indices = list(indices)
    if (
        not _supported(ctx, node, x, values, *indices)
        or not indices
        or len(indices) > x.ndim
        or any(not isinstance(i, TensorValue) or i.dtype not in INDEX_DTYPES for i in indices)
    ):
        return ctx.fallback(node, (x, indices, values, accumulate), {})
    dtype = node_dtype(node)
    batch = tuple(sympy.Integer(s) for s in torch.broadcast_shapes(*[_ints(i) for i in indices]))
    ranges = batch + tuple(x.size[len(indices) :])
    index_loaders = [broadcast_loader(i, batch, torch.int64) for i in indices]
    value_loader = broadcast_loader(values, ranges, dtype)
    n = len(batch)
    checks = [IndexCheck("index_put", d) for d in range(len(indices))]

    def target(u):
        loaded = [Target(ld(u[:n]), check, True) for ld, check in zip(index_loaders, checks)]
        return (*loaded, *u[n:])

    body = Scatter(_base(x, dtype), ranges, target, value_loader, bool(accumulate))
    return scatter_buffer(ctx, node, body)


def _scatter_along(ctx, node, x, dim, index, value, accumulate: bool, op: str):
    """scatter / scatter_add: out[..., index[u], ...] (=|+=) value(u) for u over index."""
    dtype = node_dtype(node)
    dim = normalize_dim(dim, x.ndim)
    index_loader = index.loader
    check = IndexCheck(op, dim)

    def target(u):
        position = list(u)
        position[dim] = Target(cast(index_loader(u), torch.int64), check)
        return tuple(position)

    body = Scatter(_base(x, dtype), tuple(index.size), target, value, accumulate)
    return scatter_buffer(ctx, node, body)


def _scatter_ok(ctx, node, x, index, src=None) -> bool:
    return (
        _supported(ctx, node, x, index, src)
        and index.dtype in INDEX_DTYPES
        and x.ndim > 0
        and index.ndim == x.ndim
        and (src is None or src.ndim == index.ndim)
    )


def _scatter_of_src(accumulate: bool, kind: str) -> Callable:
    """The lowering of a scatter of a source tensor (`scatter_add` adds, `scatter` stores)."""

    def lower(ctx, node, x, dim, index, src):
        if not _scatter_ok(ctx, node, x, index, src):
            return ctx.fallback(node, (x, dim, index, src), {})
        value = _cast_loader(src, node_dtype(node))
        return _scatter_along(ctx, node, x, dim, index, value, accumulate, kind)

    return lower


scatter_add = register_lowering(aten.scatter_add.default)(_scatter_of_src(True, "scatter_add"))
scatter_src = register_lowering(aten.scatter.src)(_scatter_of_src(False, "scatter"))


@register_lowering(aten.scatter.value)
def scatter_value(ctx, node, x, dim, index, value):
    if not _scatter_ok(ctx, node, x, index):
        return ctx.fallback(node, (x, dim, index, value), {})
    expr = scalar_expr(value, node_dtype(node))
    return _scatter_along(ctx, node, x, dim, index, lambda u: expr, False, "scatter")


@register_lowering(aten.index_add.default)
def index_add(ctx, node, x, dim, index, source, alpha=1):
    if (
        not _supported(ctx, node, x, index, source)
        or index.dtype not in INDEX_DTYPES
        or index.ndim != 1
        or not x.ndim
        or source.ndim != x.ndim
    ):
        return ctx.fallback(node, (x, dim, index, source), {"alpha": alpha})
    dtype = node_dtype(node)
    dim = normalize_dim(dim, x.ndim)
    index_loader = index.loader
    source_loader = _cast_loader(source, dtype)
    scale = scalar_expr(alpha, dtype)
    check = IndexCheck("index_add", dim)

    def value(u):
        if alpha == 1:
            return source_loader(u)
        return Op("mul", (source_loader(u), scale), dtype)

    def target(u):
        position = list(u)
        position[dim] = Target(cast(index_loader((u[dim],)), torch.int64), check)
        return tuple(position)

    body = Scatter(_base(x, dtype), tuple(source.size), target, value, True)
    return scatter_buffer(ctx, node, body)


def _cast_loader(value: TensorValue, dtype) -> Callable:
    loader = value.loader
    return lambda u: cast(loader(u), dtype)


def _ints(value: TensorValue) -> tuple[int, ...]:
    return tuple(int(s) for s in value.size)
