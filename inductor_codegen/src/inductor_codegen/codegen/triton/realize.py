"""When the Triton lowering stores a shared value instead of recomputing it in each reader.

The shared lowering stores a value read by several nodes when its expression
is large (`GraphLowering`'s node-count rule). A residual stream is small by
that count (a chain of adds) yet reads one more buffer with every layer:
recomputed in each reader, it makes every layer's kernels read all earlier
layers' outputs again. `store_shared_reads` wraps a lowering so that a value
with several readers that reads more than READS_THRESHOLD distinct buffers
is stored once (channels-last where it reads channels-last data, see
`layouts`); its readers then read one buffer. Light reads (buffers a sixteenth
of the value's size or less: a batch norm's per-channel parameters) do not
count: a convolution's output normalized and cast to float32 for a hardswish
has two readers in one expression and reads five buffers, but only one of
them is large, and storing it cost a float32 buffer and a copy per layer.
"""

from __future__ import annotations

import sympy

from inductor_codegen.codegen.triton.layouts import (
    CHANNELS_LAST_DTYPES,
    as_channels_last,
    keep_channels_last,
    reads_channels_last,
)
from inductor_codegen.indexing import numel
from inductor_codegen.ir import TensorValue, expr_loads
from inductor_codegen.lowering.graph import readers

__all__ = ["READS_THRESHOLD", "store_shared_reads"]

READS_THRESHOLD = 4


# A buffer at most this fraction of the value's size (a batch norm's per-channel scale
# and shift) is a light read: its few elements stay in cache for every reader.
LIGHT_READ_FRACTION = 16


def _heavy_reads(ctx, value: TensorValue) -> int:
    """Distinct buffers `value` reads that are not light (see LIGHT_READ_FRACTION)."""
    index = tuple(sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(value.ndim))
    names = {load.buffer for load in expr_loads(value.loader(index))}
    size = numel(value.size)
    if not size.is_Integer:
        return len(names)
    heavy = 0
    for name in names:
        layout = getattr(ctx.buffer_by_name.get(name), "layout", None)
        count = layout.storage_numel() if layout is not None else None
        light = count is not None and count.is_Integer and count * LIGHT_READ_FRACTION <= size
        heavy += not light
    return heavy


def store_shared_reads(lowering):
    """`lowering` (channels-last aware) that stores shared values reading many buffers."""
    inner = keep_channels_last(lowering)

    def lower(ctx, node, *args, **kwargs):
        value = inner(ctx, node, *args, **kwargs)
        if (
            not isinstance(value, TensorValue)
            or value.view is not None
            or readers(node) < 2
            or _heavy_reads(ctx, value) <= READS_THRESHOLD
        ):
            return value
        nhwc = (
            value.ndim == 4
            and value.dtype in CHANNELS_LAST_DTYPES
            and all(isinstance(s, sympy.Integer) for s in value.size)
            and not any(user.op == "output" for user in node.users)
            and reads_channels_last(ctx, value)
        )
        return as_channels_last(ctx, value) if nhwc else ctx.realize(value)

    lower.__name__ = getattr(lowering, "__name__", "lower")
    return lower
