"""Channels-last convolutions for the Triton generator.

cuDNN runs 16-bit 2D convolutions fastest on channels-last (NHWC) data; on
NCHW data it transposes around every call. `lower_convolution` hands cuDNN
channels-last input and weight and takes a channels-last output, so that the
pointwise kernels between convolutions (batch norm, activation, residual add)
read and write NHWC directly:

* an input that is not in memory yet (the previous convolution's batch norm
  and activation, say) is computed straight into an NHWC buffer, its loop
  nest running over (N, H, W, C) so that loads and stores stay contiguous;
* an input already in memory in another layout is copied once per graph,
  however many convolutions read it;
* the output gets channels-last strides; every later read goes through them;
* a value that reads channels-last data and would be stored anyway (it has
  several readers, a residual block's output say) is stored channels-last
  too (`keep_channels_last` wraps the lowerings), so the next convolution
  needs no copy.

Only where nobody outside the graph sees the layouts: a convolution whose
output is a graph output (returned, or saved for the backward pass) keeps
the eager layout, and so do transposed and non-2D convolutions and float32
and float64 (no tensor cores to feed).
"""

from __future__ import annotations

import operator
import weakref

import sympy
import torch

from inductor_codegen.ir import (
    ExternBuffer,
    Layout,
    TensorValue,
    expr_loads,
)
from inductor_codegen.lowering import BufferRef
from inductor_codegen.lowering.graph import (
    MAX_INLINE_SIZE,
    MAX_SHARED_INLINE_SIZE,
    inline_size,
    readers,
)

__all__ = [
    "as_channels_last",
    "channels_last_layout",
    "keep_channels_last",
    "lower_convolution",
    "reads_channels_last",
]

CHANNELS_LAST_DTYPES = (torch.bfloat16, torch.float16)
# Per GraphLowering: the channels-last copy of each value already made, and the
# names of the buffers stored channels-last.
_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_NHWC: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def channels_last_layout(dtype: torch.dtype, size) -> Layout:
    """NCHW sizes with NHWC strides."""
    n, c, h, w = size
    return Layout(dtype, tuple(size), (h * w * c, sympy.Integer(1), w * c, c))


# NCHW dims from outermost to innermost in memory for channels-last storage.
NHWC_ORDER = (0, 2, 3, 1)


def _is_channels_last(layout: Layout) -> bool:
    wanted = channels_last_layout(layout.dtype, layout.size)
    return all(size == 1 or a == b for size, a, b in zip(layout.size, layout.stride, wanted.stride))


def as_channels_last(ctx, value: TensorValue) -> TensorValue:
    """`value` as an NHWC buffer: itself when it is one, else computed or copied into one."""
    if value.view is not None and value.view.layout.offset == 0:
        if _is_channels_last(value.view.layout):
            return value
    copies = _COPIES.setdefault(ctx, {})
    key = (value.view.buffer, value.view.layout) if value.view is not None else id(value)
    if key in copies:
        return copies[key][1]
    # Computed (or copied, for a view) over N, H, W, C into a buffer stored in that order.
    result = ctx.realize(TensorValue(value.dtype, value.size, value.loader), order=NHWC_ORDER)
    copies[key] = (value, result)  # the value is kept so that its id stays unique
    _NHWC.setdefault(ctx, set()).add(result.view.buffer)
    return result


def reads_channels_last(ctx, value: TensorValue) -> bool:
    """Whether `value` (4-d) loads a buffer that this graph stores channels-last."""
    names = _NHWC.get(ctx)
    if not names:
        return False
    index = tuple(sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(4))
    return any(load.buffer in names for load in expr_loads(value.loader(index)))


def keep_channels_last(lowering):
    """`lowering`, storing its result channels-last where it reads channels-last data and
    would be stored anyway (the rule of `GraphLowering` for shared and large values).
    A tuple result (max pooling's values and indices) is decided per element, from the
    readers of the `getitem` taking it."""

    def lower(ctx, node, *args, **kwargs):
        value = lowering(ctx, node, *args, **kwargs)
        if isinstance(value, tuple):
            taken = {
                u.args[1]: u
                for u in node.users
                if u.target is operator.getitem and isinstance(u.args[1], int) and u.users
            }
            return tuple(_kept(ctx, taken[k], v) if k in taken else v for k, v in enumerate(value))
        return _kept(ctx, node, value)

    lower.__name__ = getattr(lowering, "__name__", "lower")
    return lower


def _kept(ctx, node, value):
    """`value` (the result `node` names) channels-last when the rule above stores it."""
    if (
        not isinstance(value, TensorValue)
        or value.view is not None
        or value.ndim != 4
        or value.dtype not in CHANNELS_LAST_DTYPES
        or any(user.op == "output" for user in node.users)
        or not all(isinstance(s, sympy.Integer) for s in value.size)
    ):
        return value
    size = inline_size(value)
    shared = readers(node) > 1 and size > MAX_SHARED_INLINE_SIZE
    if (shared or size > MAX_INLINE_SIZE) and reads_channels_last(ctx, value):
        return as_channels_last(ctx, value)
    return value


def _wanted(node, x, weight, transposed) -> bool:
    val = node.meta.get("val")
    return (
        isinstance(val, torch.Tensor)
        and val.dim() == 4
        and val.dtype in CHANNELS_LAST_DTYPES
        and not transposed
        and isinstance(x, TensorValue)
        and isinstance(weight, TensorValue)
        and x.ndim == 4
        and weight.ndim == 4
        and all(isinstance(s, int) for s in val.shape)
        and not any(user.op == "output" for user in node.users)
    )


def lower_convolution(
    ctx, node, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    """aten.convolution with channels-last input, weight and output (see the module notes)."""
    args = (x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if not _wanted(node, x, weight, transposed):
        return ctx.extern(node, node.target, args, {}, is_fallback=False)
    args = (as_channels_last(ctx, x), as_channels_last(ctx, weight), *args[2:])
    ext_args = ctx.extern_arg(args)
    reads = tuple(a.name for a in ext_args if isinstance(a, BufferRef))
    val = node.meta["val"]
    layout = channels_last_layout(val.dtype, tuple(sympy.Integer(s) for s in val.shape))
    name = ctx.new_name()
    ctx.add_buffer(ExternBuffer(name, node.target, ext_args, {}, (layout,), False, reads))
    _NHWC.setdefault(ctx, set()).add(name)
    return TensorValue.of_buffer(name, layout)
