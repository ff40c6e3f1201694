"""Channels-last convolutions for the Triton generator.

cuDNN runs 16-bit 2D convolutions fastest on channels-last (NHWC) data; on
NCHW data it transposes around every call. `lower_convolution` hands cuDNN
channels-last input and weight and takes a channels-last output, so that the
pointwise kernels between convolutions (batch norm, activation, residual add)
read and write NHWC directly. The rules (what is computed into NHWC, what is
copied once, what keeps eager's layout, saved activations handed to the backward
channels-last and read there by `lower_convolution_backward`) are
`lowering/channels_last.py`'s, which
the C++ generator applies to its float32 convolutions as well; here they apply to
bfloat16 and float16 (float32 and float64 have no tensor cores to feed).
"""

from __future__ import annotations

import torch

from inductor_codegen.lowering.channels_last import (
    NHWC_ORDER,
    as_channels_last,
    channels_last_layout,
    lower_convolution_backward_channels_last,
    lower_convolution_channels_last,
    reads_channels_last,
)
from inductor_codegen.lowering.channels_last import (
    keep_channels_last as keep_channels_last_for,
)

__all__ = [
    "CHANNELS_LAST_DTYPES",
    "NHWC_ORDER",
    "as_channels_last",
    "channels_last_layout",
    "keep_channels_last",
    "lower_convolution",
    "lower_convolution_backward",
    "reads_channels_last",
]

CHANNELS_LAST_DTYPES = (torch.bfloat16, torch.float16)


def keep_channels_last(lowering):
    """`lowering`, storing its 16-bit results channels-last where the rules say so."""
    return keep_channels_last_for(lowering, CHANNELS_LAST_DTYPES)


def lower_convolution(
    ctx, node, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    """aten.convolution with channels-last input, weight and output (see the module notes)."""
    args = (x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    value = lower_convolution_channels_last(ctx, node, args, CHANNELS_LAST_DTYPES)
    if value is None:
        return ctx.extern(node, node.target, args, {}, is_fallback=False)
    return value


def lower_convolution_backward(ctx, node, *args):
    """aten.convolution_backward on channels-last data where its operands read saved
    channels-last activations (see the module notes), else as eager lays it out."""
    value = lower_convolution_backward_channels_last(ctx, node, args, CHANNELS_LAST_DTYPES)
    if value is None:
        return ctx.extern(node, node.target, args, {}, is_fallback=False)
    return value
