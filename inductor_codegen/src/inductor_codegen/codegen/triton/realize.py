"""When the Triton lowering stores a shared value instead of recomputing it in each reader.

The rule is `lowering.shared_reads` (a value several nodes read that reads more than
READS_THRESHOLD heavy buffers is stored once); Triton stores it channels-last where
it reads channels-last data (see `layouts`).
"""

from __future__ import annotations

import sympy

from inductor_codegen.codegen.triton.layouts import (
    CHANNELS_LAST_DTYPES,
    as_channels_last,
    keep_channels_last,
    reads_channels_last,
)
from inductor_codegen.lowering import shared_reads

__all__ = ["READS_THRESHOLD", "store_shared_reads"]

READS_THRESHOLD = 4


def _store(ctx, node, value):
    nhwc = (
        value.ndim == 4
        and value.dtype in CHANNELS_LAST_DTYPES
        and all(isinstance(s, sympy.Integer) for s in value.size)
        and not any(user.op == "output" for user in node.users)
        and reads_channels_last(ctx, value)
    )
    return as_channels_last(ctx, value) if nhwc else ctx.realize(value)


def store_shared_reads(lowering):
    """`lowering` (channels-last aware) that stores shared values reading many buffers."""
    return shared_reads.store_shared_reads(
        keep_channels_last(lowering), lambda: READS_THRESHOLD, _store
    )
