"""When a lowering stores a shared value instead of recomputing it in each reader.

The graph lowering stores a value read by several nodes when its expression is large
(`GraphLowering`'s node-count rule). A residual stream is small by that count (a chain
of adds) yet reads one more buffer with every layer: recomputed in each reader, it makes
every layer's kernels read all earlier layers' outputs again (a pre-norm transformer's
last norm, three passes over each row, loads every layer's output three times).
`store_shared_reads` wraps a lowering so that a value with several readers that reads
more than a threshold of distinct buffers is stored once; its readers then read one
buffer. Each code generator wraps its table with its own threshold and way of storing
(Triton: channels-last where the value reads channels-last data; C++: as laid out).

Light reads (buffers a sixteenth of the value's size or less: a batch norm's
per-channel parameters, a norm's weight) do not count: their few elements stay in
cache for every reader. A convolution's output normalized and cast to float32 for a
hardswish has two readers in one expression and reads five buffers, but only one of
them is large, and storing it cost a float32 buffer and a copy per layer.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy

from inductor_codegen.indexing import numel
from inductor_codegen.ir import TensorValue, expr_loads
from inductor_codegen.lowering.graph import readers

__all__ = ["LIGHT_READ_FRACTION", "heavy_reads", "store_shared_reads"]

# A buffer at most this fraction of the value's size (a batch norm's per-channel scale
# and shift) is a light read: its few elements stay in cache for every reader.
LIGHT_READ_FRACTION = 16


def heavy_reads(ctx, value: TensorValue) -> int:
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


def _realize(ctx, node, value: TensorValue) -> TensorValue:
    return ctx.realize(value)


def store_shared_reads(
    lowering: Callable,
    threshold: Callable[[], int],
    store: Callable = _realize,
) -> Callable:
    """`lowering`, storing (by `store(ctx, node, value)`) a value several nodes read that
    reads more than `threshold()` heavy buffers (read at each call: a module constant
    stays patchable)."""

    def lower(ctx, node, *args, **kwargs):
        value = lowering(ctx, node, *args, **kwargs)
        if (
            not isinstance(value, TensorValue)
            or value.view is not None
            or readers(node) < 2
            or heavy_reads(ctx, value) <= threshold()
        ):
            return value
        return store(ctx, node, value)

    lower.__name__ = getattr(lowering, "__name__", "lower")
    return lower
