"""Lowering of FX graphs of ATen ops to the loop IR.

Importing this package fills `LOWERINGS` (one module per family of ops).
"""

from inductor_codegen.lowering import (  # noqa: F401
    indirect,
    misc,
    pointwise,
    pooling,
    reductions,
    scatter,
    views,
)
from inductor_codegen.lowering.graph import BufferRef, GraphLowering, OpaqueInput
from inductor_codegen.lowering.misc import EXTERN_KERNELS
from inductor_codegen.lowering.registry import LOWERINGS, LoweringTable, register_lowering

__all__ = [
    "BufferRef",
    "EXTERN_KERNELS",
    "GraphLowering",
    "LOWERINGS",
    "LoweringTable",
    "OpaqueInput",
    "register_lowering",
]
