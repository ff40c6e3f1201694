"""Lowerings of gathers (embedding, index_select, gather) as indirect loads.

An indirect load reads a buffer at an index that holds a loaded value: the op
`indirect_load` with arguments (Load, offset, marker, bound, check). The Load's
index is the address with a placeholder (`IndirectOffset`, the marker's index)
where the loaded offset goes; the C++ generator prints the offset into a
variable and the address around it. Since the placeholder never equals a store
index, the scheduler never mistakes the read for one at the producer's own index.

Every offset is checked against `bound` (an IndexValue: the table's size along
the gathered dim) as eager checks it: these three ops reject negative indices
too. A failed check is recorded in the kernel's status argument and the wrapper
raises `runtime.IndexOutOfRangeError` (an IndexError and a RuntimeError) naming
`check` (a `runtime.IndexCheck`: the op and the dim) right after the kernel.

The gather fuses with what reads its result (the token + position embedding
sum, dropout, a layer norm). Generators other than C++ do not print indirect
loads: with any lowering table but the default one these ops call ATen.
"""

from __future__ import annotations

import itertools

import sympy
import torch

from inductor_codegen.ir import IndexValue, Load, Op, TensorValue
from inductor_codegen.lowering.common import cast, node_dtype, node_size, normalize_dim
from inductor_codegen.lowering.registry import is_cpp_table, register_lowering
from inductor_codegen.runtime import IndexCheck

__all__ = ["INDIRECT_LOAD", "IndirectOffset", "indirect_load"]

aten = torch.ops.aten

INDIRECT_LOAD = "indirect_load"
_placeholders = itertools.count()


class IndirectOffset(sympy.Function):
    """Placeholder in an address for an offset loaded at run time (replaced when printed).

    A function application, not a symbol: it has no free symbols, so nothing
    takes it for a loop variable or a size.
    """

    is_integer = True


def indirect_load(table: TensorValue, index: tuple, dim: int, offset, op: str) -> Op:
    """`table[index]` with `index[dim]` replaced by the int64 expression `offset`.

    `table` must be in memory (a view of a buffer). `offset` is checked to be in
    [0, table.size[dim]); a failure raises an error naming `op`.
    """
    marker = IndirectOffset(sympy.Integer(next(_placeholders)))
    position = list(index)
    position[dim] = marker
    layout = table.view.layout
    load = Load(table.view.buffer, layout.index(tuple(position)), table.dtype)
    offset = cast(offset, torch.int64)
    bound = IndexValue(table.size[dim], torch.int64)
    check = IndexCheck(op, dim)
    args = (load, offset, IndexValue(marker, torch.int64), bound, check)
    return Op(INDIRECT_LOAD, args, table.dtype)


def _supported(ctx) -> bool:
    return is_cpp_table(ctx.lowerings)


@register_lowering(aten.index_select.default)
def index_select(ctx, node, x, dim, index):
    if not _supported(ctx) or not x.ndim:
        return ctx.fallback(node, (x, dim, index), {})
    dim = normalize_dim(dim, x.ndim)
    table = ctx.realize(x)
    dtype = node_dtype(node)
    index_loader = index.loader

    def load(idx):
        offset = index_loader((idx[dim],) if index.ndim else ())
        return cast(indirect_load(table, idx, dim, offset, "index_select"), dtype)

    return TensorValue(dtype, node_size(node), load)


@register_lowering(aten.embedding.default)
def embedding(ctx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if not _supported(ctx) or weight.ndim != 2:
        args = (weight, indices, padding_idx, scale_grad_by_freq, sparse)
        return ctx.fallback(node, args, {})
    table = ctx.realize(weight)
    dtype = node_dtype(node)
    index_loader = indices.loader
    prefix = indices.ndim

    def load(idx):
        offset = index_loader(tuple(idx[:prefix]))
        return cast(
            indirect_load(table, (sympy.Integer(0), idx[prefix]), 0, offset, "embedding"), dtype
        )

    return TensorValue(dtype, node_size(node), load)


@register_lowering(aten.gather.default)
def gather(ctx, node, x, dim, index, sparse_grad=False):
    if not _supported(ctx) or not x.ndim:
        return ctx.fallback(node, (x, dim, index), {"sparse_grad": sparse_grad})
    dim = normalize_dim(dim, x.ndim)
    table = ctx.realize(x)
    dtype = node_dtype(node)
    index_loader = index.loader

    def load(idx):
        return cast(indirect_load(table, idx, dim, index_loader(idx), "gather"), dtype)

    return TensorValue(dtype, node_size(node), load)
