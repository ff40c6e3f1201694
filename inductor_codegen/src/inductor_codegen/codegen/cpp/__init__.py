"""C++/OpenMP kernels for CPU tensors: kernel text, scatters, prelude, build.

kernel.py    a fused loop kernel as a C++ function (KernelCodegen)
scatter.py   a scatter kernel: a fill pass, then a scatter pass
prelude.py   the helpers every kernel file includes
build.py     compile in parallel through the disk cache, load with ctypes
"""

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
