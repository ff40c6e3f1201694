"""Which C++ printer a fused kernel takes: a scatter, or a loop nest."""

from __future__ import annotations

from inductor_codegen.codegen.cpp.kernel import KernelCodegen
from inductor_codegen.codegen.cpp.scatter import scatter_kernel_lines
from inductor_codegen.codegen.kernel import KernelSource
from inductor_codegen.lowering.scatter import Scatter
from inductor_codegen.scheduler import FusedKernel

__all__ = ["generate_kernel"]


def generate_kernel(kernel: FusedKernel, buffers: dict) -> KernelSource:
    """The C++ source of `kernel` (function named KERNEL_NAME) and its parameters."""
    codegen = KernelCodegen(kernel, buffers)
    if isinstance(buffers[kernel.nodes[0]].body, Scatter):
        return codegen.finish(scatter_kernel_lines(codegen, kernel.nodes[0]))
    return codegen.generate()
