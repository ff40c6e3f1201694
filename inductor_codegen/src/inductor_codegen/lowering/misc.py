"""Lowerings of creation ops, concatenation and padding, and the extern kernels.

Extern kernels (matmul, convolution, attention, random numbers) are ATen calls
from the wrapper by design; they are not counted as fallbacks.
"""

from __future__ import annotations

import sympy
import torch

from inductor_codegen.ir import IndexValue, Op, TensorValue
from inductor_codegen.lowering.common import (
    broadcast_loader,
    cast,
    const,
    node_dtype,
    node_size,
    normalize_dim,
    op,
    scalar_expr,
)
from inductor_codegen.lowering.registry import register_lowering

__all__ = ["EXTERN_KERNELS"]

aten = torch.ops.aten


@register_lowering(aten.full.default)
def full(ctx, node, size, fill_value, **kwargs):
    dtype = node_dtype(node)
    value = scalar_expr(fill_value, dtype)
    return TensorValue(dtype, node_size(node), lambda idx: value)


@register_lowering(aten.full_like.default)
def full_like(ctx, node, x, fill_value, **kwargs):
    return full(ctx, node, None, fill_value)


@register_lowering(aten.zeros_like.default)
def zeros_like(ctx, node, x, **kwargs):
    return full(ctx, node, None, 0)


@register_lowering(aten.ones_like.default)
def ones_like(ctx, node, x, **kwargs):
    return full(ctx, node, None, 1)


@register_lowering(aten.scalar_tensor.default)
def scalar_tensor(ctx, node, value, **kwargs):
    return full(ctx, node, None, value)


@register_lowering(aten.fill.Scalar)
def fill(ctx, node, x, value):
    return full(ctx, node, None, value)


@register_lowering(aten.arange.start_step, aten.arange.start, aten.arange.default)
def arange(ctx, node, start, end=None, step=1, **kwargs):
    if end is None:
        start, end = 0, start
    dtype = node_dtype(node)
    size = node_size(node)
    if dtype.is_floating_point and not all(isinstance(v, int) for v in (start, step)):
        return ctx.fallback(node, (start, end, step), kwargs)

    def load(idx):
        value = IndexValue(idx[0] * int(step) + int(start), torch.int64)
        return cast(value, dtype)

    return TensorValue(dtype, size, load)


def _guarded_where(cond, a, b, dtype):
    """where() whose branches are evaluated only when taken (they may load out of bounds)."""
    return Op("masked", (cond, a, b), dtype)


@register_lowering(aten.cat.default)
def cat(ctx, node, tensors, dim=0):
    dtype = node_dtype(node)
    size = node_size(node)
    dim = normalize_dim(dim, len(size))
    pieces = [t for t in tensors if not (t.ndim == 1 and t.size[0] == 0)]
    if not pieces:
        return full(ctx, node, None, 0)  # every input is empty: so is the result
    if len(pieces) == 1:
        return TensorValue(dtype, size, broadcast_loader(pieces[0], size, dtype))
    offsets = []
    running = sympy.Integer(0)
    for piece in pieces:
        offsets.append(running)
        running = running + piece.size[dim]

    def load(idx):
        result = None
        for piece, start in reversed(list(zip(pieces, offsets))):
            inner = list(idx)
            inner[dim] = idx[dim] - start
            value = cast(piece.loader(tuple(inner)), dtype)
            if result is None:
                result = value
                continue
            end = start + piece.size[dim]
            cond = op(
                "lt",
                IndexValue(idx[dim], torch.int64),
                scalar_expr(end, torch.int64),
                dtype=torch.bool,
            )
            result = _guarded_where(cond, value, result, dtype)
        return result

    return TensorValue(dtype, size, load)


@register_lowering(aten.constant_pad_nd.default)
def constant_pad_nd(ctx, node, x, pad, value=0):
    dtype = node_dtype(node)
    size = node_size(node)
    ndim = len(size)
    fill_value = const(value, dtype)
    pads = []
    for k in range(len(pad) // 2):
        pads.append((ndim - 1 - k, pad[2 * k], pad[2 * k + 1]))

    def load(idx):
        inner = list(idx)
        conds = []
        for d, before, _after in pads:
            inner[d] = idx[d] - before
            position = IndexValue(inner[d], torch.int64)
            if before > 0:
                conds.append(op("ge", position, const(0, torch.int64), dtype=torch.bool))
            conds.append(op("lt", position, scalar_expr(x.size[d], torch.int64), dtype=torch.bool))
            if before < 0:
                conds.append(op("ge", position, const(0, torch.int64), dtype=torch.bool))
        value_expr = cast(x.loader(tuple(inner)), dtype)
        if not conds:
            return value_expr
        cond = conds[0]
        for c in conds[1:]:
            cond = op("logical_and", cond, c, dtype=torch.bool)
        return _guarded_where(cond, value_expr, fill_value, dtype)

    return TensorValue(dtype, size, load)


EXTERN_KERNELS = [
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten.baddbmm.default,
    aten.addmv.default,
    aten.mv.default,
    aten.dot.default,
    aten.convolution.default,
    aten.convolution_backward.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten.native_dropout.default,
    aten.rand.default,
    aten.randn.default,
    aten.bernoulli.p,
    aten.embedding_dense_backward.default,
    aten.cumsum.default,
    aten.sort.default,
    aten.topk.default,
]


def _extern(ctx, node, *args, **kwargs):
    return ctx.extern(node, node.target, args, kwargs, is_fallback=False)


for _op in EXTERN_KERNELS:
    register_lowering(_op)(_extern)


@register_lowering(aten.empty.memory_format, aten.empty_like.default, aten.new_empty.default)
def empty(ctx, node, *args, **kwargs):
    """Uninitialized memory: any value is correct; zeros keep results reproducible."""
    return full(ctx, node, None, 0)


@register_lowering(aten.empty_strided.default)
def empty_strided(ctx, node, size, stride, **kwargs):
    return full(ctx, node, None, 0)


def masked_value(conds, value_fn, dtype):
    """`value_fn()` where every (comparison, index, bound) in `conds` holds, else 0.

    The value is evaluated only where the conditions hold (it may load out of bounds).
    """
    cond = None
    for name, position, bound in conds:
        c = op(
            name,
            IndexValue(sympy.sympify(position), torch.int64),
            const(int(bound), torch.int64),
            dtype=torch.bool,
        )
        cond = c if cond is None else op("logical_and", cond, c, dtype=torch.bool)
    value = value_fn()
    if cond is None:
        return value
    return _guarded_where(cond, value, const(0, dtype), dtype)
