"""Attention calls get their tensors in the strides the graph was traced with.

Fused attention kernels (cuDNN, flash, memory-efficient, and their backward
passes) assume more about their inputs than their schemas say: the backward
pass reads `out` and `grad_out` with the forward's strides, the kernels want
the last dimension dense and 16-byte aligned rows. The graph's meta["val"]
holds the strides eager handed them; `lower_attention` copies a tensor
argument into exactly those strides when the generated code holds it in
another layout (a buffer it stored contiguous, say), and passes it through
untouched otherwise.
"""

from __future__ import annotations

import torch
import torch.fx

from inductor_codegen.errors import UnsupportedGraphError
from inductor_codegen.ir import Layout, TensorValue
from inductor_codegen.lowering import LOWERINGS
from inductor_codegen.lowering.graph import layout_of

__all__ = ["ATTENTION_OPS", "lower_attention"]

aten = torch.ops.aten
ATTENTION_OPS = tuple(
    getattr(aten, name).default
    for name in (
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_cudnn_attention_backward",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_efficient_attention_backward",
        "_efficient_attention_forward",
        "_efficient_attention_backward",
        "_flash_attention_forward",
        "_flash_attention_backward",
    )
    if hasattr(aten, name)
)


ALIGNMENT = 16  # bytes: the fused kernels' loads want 16-byte aligned rows


def _same_strides(have: Layout, want: Layout) -> bool:
    """`have` is `want`'s strides at an offset that keeps rows 16-byte aligned (q, k
    and v sliced from one projection sit at offsets 0, E and 2E of it)."""
    offset = have.offset
    aligned = offset == 0 or (
        getattr(offset, "is_Integer", False) and int(offset) * have.dtype.itemsize % ALIGNMENT == 0
    )
    return aligned and all(
        size == 1 or a == b for size, a, b in zip(want.size, have.stride, want.stride)
    )


def _traced(ctx, value, node_arg):
    """`value` in the layout of `node_arg`'s meta["val"] (copied when it is not)."""
    if not isinstance(value, TensorValue) or not isinstance(node_arg, torch.fx.Node):
        return value
    meta = node_arg.meta.get("val")
    if not isinstance(meta, torch.Tensor):
        return value
    try:
        want = layout_of(meta, where=node_arg.name)
    except UnsupportedGraphError:  # symbolic strides: nothing to match
        return value
    if value.view is not None and _same_strides(value.view.layout, want):
        return value
    if tuple(want.size) != tuple(value.size) or want.offset != 0:
        return value
    if value.view is None:
        # The value itself, stored once: a graph output or another reader wanting the same
        # layout takes this buffer (a decode step's new key/value cache, which the step
        # also returns, was computed twice).
        return ctx.realize(value, layout_hint=want)
    return ctx.realize(TensorValue(value.dtype, value.size, value.loader), layout_hint=want)


def lower_attention(ctx, node, *args, **kwargs):
    """An attention call (see the module notes): an ATen call on tensors in traced strides."""
    args = tuple(_traced(ctx, a, n) for a, n in zip(args, node.args))
    kwargs = {k: _traced(ctx, v, node.kwargs.get(k)) for k, v in kwargs.items()}
    if node.target not in LOWERINGS:
        return ctx.fallback(node, args, kwargs)  # counted and logged as an ATen fallback
    return ctx.extern(node, node.target, args, kwargs, is_fallback=False)
