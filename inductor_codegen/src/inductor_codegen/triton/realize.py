"""When the Triton lowering stores a shared value instead of recomputing it in each reader.

The shared lowering stores a value read by several nodes when its expression
is large (`GraphLowering`'s node-count rule). A residual stream is small by
that count (a chain of adds) yet reads one more buffer with every layer:
recomputed in each reader, it makes every layer's kernels read all earlier
layers' outputs again. `store_shared_reads` wraps a lowering so that a value
with several readers that reads more than READS_THRESHOLD distinct buffers
is stored once (channels-last where it reads channels-last data, see
`layouts`); its readers then read one buffer.
"""

from __future__ import annotations

import sympy

from inductor_codegen.ir import TensorValue, expr_loads
from inductor_codegen.triton.layouts import (
    CHANNELS_LAST_DTYPES,
    _channels_last,
    _reads_channels_last,
    keep_channels_last,
)

__all__ = ["READS_THRESHOLD", "store_shared_reads"]

READS_THRESHOLD = 4


def _distinct_reads(value: TensorValue) -> int:
    index = tuple(sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(value.ndim))
    return len({load.buffer for load in expr_loads(value.loader(index))})


def store_shared_reads(lowering):
    """`lowering` (channels-last aware) that stores shared values reading many buffers."""
    inner = keep_channels_last(lowering)

    def lower(ctx, node, *args, **kwargs):
        value = inner(ctx, node, *args, **kwargs)
        if (
            not isinstance(value, TensorValue)
            or value.view is not None
            or len(node.users) < 2
            or _distinct_reads(value) <= READS_THRESHOLD
        ):
            return value
        nhwc = (
            value.ndim == 4
            and value.dtype in CHANNELS_LAST_DTYPES
            and all(isinstance(s, sympy.Integer) for s in value.size)
            and not any(user.op == "output" for user in node.users)
            and _reads_channels_last(ctx, value)
        )
        return _channels_last(ctx, value) if nhwc else ctx.realize(value)

    lower.__name__ = getattr(lowering, "__name__", "lower")
    return lower
