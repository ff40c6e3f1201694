"""The Python wrapper for Triton kernels: the CPU wrapper's plan, kernels called with tensors.

Allocation, memory reuse and freeing are the CPU wrapper's (`wrapper.py`);
only a kernel call differs: Triton takes the tensors themselves (and scalar
inputs), not data pointers, and no layout check precedes it (every ATen
result already went through `ensure_layout`, so a check would only cost
time on each call). A matmul template step is called like a kernel,
its operands as views.
"""

from __future__ import annotations

from inductor_codegen.ir import Layout
from inductor_codegen.scheduler import FusedKernel
from inductor_codegen.triton.templates import TemplateStep
from inductor_codegen.wrapper import WrapperCodegen, WrapperSource, layout_args

__all__ = ["generate_triton_wrapper"]


class TritonWrapperCodegen(WrapperCodegen):
    def allocation(self, layout: Layout) -> str:
        # `empty_strided` is bound to the graph's device when the wrapper is loaded.
        return f"empty_strided({layout_args(layout)}, {layout.dtype})"

    def _kernel(self, kernel: FusedKernel | TemplateStep, pool) -> None:
        lines = self.out.lines
        source = self.kernels[kernel.name]
        self._allocate_outputs(source, pool)
        names = [arg.name for arg in source.args]
        if isinstance(kernel, TemplateStep):
            # Operands go as views (a transposed weight, a slice); the kernel knows their strides.
            operands = [self.render(ref) for ref in kernel.operands]
            names = operands + names[len(operands) :]
        lines.append(f"    {kernel.name}({', '.join(names)})")


def generate_triton_wrapper(graph, schedule, kernels) -> WrapperSource:
    """The wrapper of a scheduled graph whose kernels are Triton launchers named like the steps."""
    return TritonWrapperCodegen(graph, schedule, kernels).generate()
