"""Convolutions on the CPU: channels-last data between them.

`cpp_lowerings()` is the C++ generator's lowering table: the common one, with
convolutions on channels-last (NHWC) data (`lowering/channels_last.py`). oneDNN's NHWC
kernels need no reorder of the activations, and the pointwise kernels between
convolutions (batch norm, activation, pooling, residual additions) read and write NHWC,
fused as usual; a graph's NCHW input is copied once, a weight once per call (a few
microseconds). A convolution whose output the user gets keeps eager's layout; one saved
for the backward pass stays channels-last, and the backward's convolution_backward reads
it (and its gradient) as NHWC.

Inference graphs may instead fold the batch norm after a convolution into a prepacked
weight (`frozen_convolutions`, option `fold_convolutions`): its `mkldnn._convolution_pointwise`
calls are lowered here too (`lower_convolution_pointwise`), on the same channels-last data.
Training graphs keep `aten.convolution` and compute the batch norm in the kernel after it
(its arithmetic is free there; benchmarks/RESULTS.md).
"""

from __future__ import annotations

import torch

from inductor_codegen.lowering import LOWERINGS
from inductor_codegen.lowering.channels_last import (
    keep_channels_last,
    lower_convolution_backward_channels_last,
    lower_convolution_channels_last,
    lower_convolution_pointwise_channels_last,
)
from inductor_codegen.lowering.registry import mark_cpp_table
from inductor_codegen.lowering.shared_reads import store_shared_reads

__all__ = [
    "CHANNELS_LAST_DTYPES",
    "READS_THRESHOLD",
    "cpp_lowerings",
    "lower_convolution",
    "lower_convolution_backward",
    "lower_convolution_pointwise",
]

aten = torch.ops.aten

# dtypes whose convolutions run channels-last on the CPU (oneDNN, when torch has it).
CHANNELS_LAST_DTYPES = (
    (torch.float32, torch.bfloat16) if torch.backends.mkldnn.is_available() else ()
)


# A value several nodes read is stored once it reads more than this many heavy buffers
# (lowering/shared_reads.py): a pre-norm transformer's residual stream every few layers.
# Each C++ norm kernel passes over its row three times (mean, variance, output), each
# pass loading what the row's value reads.
READS_THRESHOLD = 3


def lower_convolution(ctx, node, *args):
    """aten.convolution on channels-last data (see lowering/channels_last.py), or as eager
    lays it out where those rules do not apply."""
    value = lower_convolution_channels_last(ctx, node, args, CHANNELS_LAST_DTYPES)
    if value is None:
        return ctx.extern(node, node.target, args, {}, is_fallback=False)
    return value


def lower_convolution_backward(ctx, node, *args):
    """aten.convolution_backward on channels-last data where its operands read saved
    channels-last activations (see lowering/channels_last.py), else as eager lays it out."""
    value = lower_convolution_backward_channels_last(ctx, node, args, CHANNELS_LAST_DTYPES)
    if value is None:
        return ctx.extern(node, node.target, args, {}, is_fallback=False)
    return value


def lower_convolution_pointwise(ctx, node, *args):
    """mkldnn._convolution_pointwise, the folded convolution `frozen_convolutions` makes,
    on channels-last data where the user does not see its output."""
    value = lower_convolution_pointwise_channels_last(ctx, node, args)
    if value is None:
        return ctx.extern(node, node.target, args, {}, is_fallback=False)
    return value


_TABLE: dict = {"source": None, "table": None}


def cpp_lowerings() -> dict:
    """The C++ generator's lowering table: the common one (as it is now, lowerings
    registered after import included), channels-last aware, storing shared values that
    read many buffers (READS_THRESHOLD), with `lower_convolution`."""
    if _TABLE["source"] != LOWERINGS:
        table = {
            op: store_shared_reads(
                keep_channels_last(fn, CHANNELS_LAST_DTYPES), lambda: READS_THRESHOLD
            )
            for op, fn in LOWERINGS.items()
        }
        table[aten.convolution.default] = lower_convolution
        table[aten.convolution_backward.default] = lower_convolution_backward
        if hasattr(torch.ops.mkldnn, "_convolution_pointwise"):
            table[torch.ops.mkldnn._convolution_pointwise.default] = lower_convolution_pointwise
        _TABLE["source"], _TABLE["table"] = dict(LOWERINGS), mark_cpp_table(table)
    return _TABLE["table"]
