"""The Triton hooks of the one wrapper generator (`codegen/wrapper.py`): its plan,
kernels called with tensors.

Allocation, memory reuse and freeing are the generator's; only the hooks differ
(`allocation`, `prologue`, `held_names`, `kernel_call`). A kernel call: Triton takes
the tensors themselves (and scalar inputs), not data pointers, and no layout check
precedes it (every ATen result already went through `ensure_layout`, so a check
would only cost time on each call). A matmul template step is called like a kernel,
its operands as views.

Kernels are launched through `kernel.launch(stream0, ...)`: the stream is read
once per call, and the kernel is compiled for 16-byte aligned tensors (Triton
then uses wide loads) without checking each pointer per launch. What makes
that safe: buffers the wrapper allocates and the results of extern kernels
(cuBLAS, cuDNN) are fresh allocations; inputs are checked once per call, and a
misaligned one is copied (`inputs_t` names the tensors the kernels read); the
results of ATen fallbacks, which may be views at any offset, are checked the
same way before each kernel that reads them (`buf3_a`); constants that are not
aligned go through the kernel's checking entry, `kernel(...)`.
"""

from __future__ import annotations

import torch

from inductor_codegen.codegen.triton.kernel import TritonKernelSource
from inductor_codegen.codegen.triton.templates import TemplateStep
from inductor_codegen.codegen.wrapper import WrapperCodegen, WrapperSource, layout_args
from inductor_codegen.ir import ExternBuffer, Layout
from inductor_codegen.scheduler import FusedKernel

__all__ = ["aligned_copies", "generate_triton_wrapper"]

ALIGNMENT = 16


def aligned_copies(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each tensor, or a copy at an aligned address with the same sizes and strides."""
    copies = []
    for t in tensors:
        if t.data_ptr() % ALIGNMENT:
            copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
            t = copy.copy_(t)
        copies.append(t)
    return tuple(copies)


class TritonWrapperCodegen(WrapperCodegen):
    def __init__(self, graph, schedule, kernels):
        super().__init__(graph, schedule, kernels)
        self.aliases: dict[str, str] = {}  # input -> the local the kernels read it through
        self.unchecked: set[str] = self._unchecked_names()

    def allocation(self, layout: Layout) -> str:
        # torch.empty_strided itself with the graph's device (`device0`): binding the
        # device with functools.partial cost 0.6 us more per allocation (merging keywords).
        return f"empty_strided({layout_args(layout)}, dtype={layout.dtype}, device=device0)"

    def _unchecked_names(self) -> set[str]:
        """Tensors whose alignment the wrapper cannot vouch for: fallback results and
        misaligned constants."""
        names = set()
        for step in self.schedule.steps:
            if isinstance(step, ExternBuffer) and step.is_fallback:
                names.add(step.name)
                names.update(f"{step.name}_{i}" for i in range(len(step.layouts or ())))
        for name, value in self.graph.constants.items():
            if isinstance(value, torch.Tensor) and value.data_ptr() % ALIGNMENT:
                names.add(name)
        return names

    def prologue(self, input_names: list[str]) -> list[str]:
        read = {
            arg.name
            for source in self.kernels.values()
            if isinstance(source, TritonKernelSource)
            for arg in source.args
            if arg.kind == "in"
        }
        tensors = [n for n in input_names if n in read]
        lines = ["stream0 = get_raw_stream()"]
        if not tensors:
            return lines
        self.aliases = {n: f"{n}_t" for n in tensors}
        comma = "," if len(tensors) == 1 else ""
        targets = ", ".join(self.aliases[n] for n in tensors) + comma
        sources = ", ".join(tensors) + comma
        pointers = " | ".join(f"{n}.data_ptr()" for n in tensors)
        lines.append(f"{targets} = {sources}")
        lines.append(f"if ({pointers}) % {ALIGNMENT}: {targets} = aligned_copies({sources})")
        return lines

    def held_names(self, name: str) -> list[str]:
        return [name, self.aliases[name]] if name in self.aliases else [name]

    def kernel_call(self, kernel: FusedKernel | TemplateStep, pool) -> None:
        """Triton: the tensors themselves, on the launcher's direct entry when aligned."""
        lines = self.out.lines
        source = self.kernels[kernel.name]
        self._allocate_outputs(source, pool)
        names = [self.aliases.get(arg.name, arg.name) for arg in source.args]
        if isinstance(kernel, TemplateStep):
            # Operands go as views (a transposed weight, a slice); the kernel knows their strides.
            operands = [self.render(ref) for ref in kernel.operands]
            names = operands + names[len(operands) :]
            lines.append(f"    {kernel.name}({', '.join(names)})")
        elif any(self._needs_checking_entry(arg) for arg in source.args):
            lines.append(f"    {kernel.name}({', '.join(names)})")
        else:
            checked = {
                arg.name: f"{arg.name}_a" for arg in source.args if arg.name in self.unchecked
            }
            if checked:
                # A fallback's result read by the kernel: checked here (one pointer test),
                # copied when misaligned, so the kernel still takes the direct launch.
                targets = ", ".join(checked.values()) + ("," if len(checked) == 1 else "")
                sources = ", ".join(checked) + ("," if len(checked) == 1 else "")
                pointers = " | ".join(f"{n}.data_ptr()" for n in checked)
                lines.append(f"    {targets} = {sources}")
                lines.append(
                    f"    if ({pointers}) % {ALIGNMENT}: {targets} = aligned_copies({sources})"
                )
                names = [checked.get(arg.name, n) for arg, n in zip(source.args, names)]
            lines.append(f"    {kernel.name}.launch({', '.join(['stream0', *names])})")
            if checked:
                lines.append(f"    del {', '.join(checked.values())}")

    def _needs_checking_entry(self, arg) -> bool:
        """Whether a kernel argument keeps the kernel on its checking entry, `kernel(...)`:
        a misaligned constant, or a fallback's result the kernel writes."""
        if arg.name not in self.unchecked:
            return False
        return arg.name in self.graph.constants or arg.kind != "in"


def generate_triton_wrapper(graph, schedule, kernels) -> WrapperSource:
    """The wrapper of a scheduled graph whose kernels are Triton launchers named like the steps."""
    return TritonWrapperCodegen(graph, schedule, kernels).generate()
