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
from inductor_codegen.ir import ExternBuffer, InputBuffer, Layout
from inductor_codegen.scheduler import FusedKernel

__all__ = ["aligned_copies", "generate_triton_wrapper", "host_scalars"]

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


def host_scalars(graph, device: torch.device) -> tuple[list[str], list[str]]:
    """The 0-dim CPU tensors of a graph running on `device`: (input names, constant names).

    Eager lets a 0-dim CPU tensor join CUDA tensors in an op (it reads it as a scalar);
    a Triton kernel given one would read host memory through a device pointer. The
    wrapper copies such an input to the device before kernels read it (one small copy
    per call), and such a constant is copied once at compile time. None on CPU.
    """
    if device.type == "cpu":
        return [], []

    def on_host(size: tuple, tensor_device: torch.device | None) -> bool:
        return tensor_device is not None and tensor_device.type == "cpu" and not size

    inputs = [
        i.name
        for i in graph.inputs
        if isinstance(i, InputBuffer)
        and on_host(tuple(i.layout.size), graph.input_devices.get(i.name))
    ]
    constants = [
        name
        for name, value in graph.constants.items()
        if isinstance(value, torch.Tensor) and on_host(tuple(value.shape), value.device)
    ]
    return inputs, constants


class TritonWrapperCodegen(WrapperCodegen):
    # A pointwise kernel reads each element before it stores the same element, and Triton
    # assumes nothing about pointers that differ: an input dying there can hold the output.
    computes_in_place = True

    def __init__(self, graph, schedule, kernels, device: torch.device | None = None):
        super().__init__(graph, schedule, kernels)
        self.aliases: dict[str, str] = {}  # input -> the local the kernels read it through
        self.unchecked: set[str] = self._unchecked_names()
        device = device if device is not None else torch.device("cuda")
        self.host_inputs, host_constants = host_scalars(graph, device)
        for name in host_constants:  # copied to the device once, here
            self.aliases[name] = self.out.use(f"{name}_on_device", graph.constants[name].to(device))

    def allocation(self, layout: Layout) -> str:
        # torch.empty_strided itself with the graph's device (`device0`): binding the
        # device with functools.partial cost 0.6 us more per allocation (merging keywords).
        return f"empty_strided({layout_args(layout)}, dtype={layout.dtype}, device=device0)"

    def _unchecked_names(self) -> set[str]:
        """Tensors whose alignment the wrapper cannot vouch for: fallback results,
        misaligned constants and buffers computed into an input."""
        names = set()
        for step in self.schedule.steps:
            if isinstance(step, ExternBuffer) and step.is_fallback:
                names.add(step.name)
                names.update(f"{step.name}_{i}" for i in range(len(step.layouts or ())))
        for name, value in self.graph.constants.items():
            if isinstance(value, torch.Tensor) and value.data_ptr() % ALIGNMENT:
                names.add(name)
        for name, buf in self.buffers.items():  # computed into an input's own memory
            if getattr(buf, "stored_into", None) is not None:
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
        host = [n for n in tensors if n in self.host_inputs]
        for name in host:  # a 0-dim CPU tensor: copied to the device (see host_scalars)
            self.aliases[name] = f"{name}_t"
            lines.append(f"{name}_t = {name}.to(device0)")
        tensors = [n for n in tensors if n not in self.host_inputs]
        if not tensors:
            return lines
        self.aliases.update({n: f"{n}_t" for n in tensors})
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
            lines.append(f"    {kernel.name}.checked_launch({', '.join(['stream0', *names])})")
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


def generate_triton_wrapper(
    graph, schedule, kernels, device: torch.device | None = None
) -> WrapperSource:
    """The wrapper of a scheduled graph whose kernels are Triton launchers named like the steps.

    `device` is the graph's device (CUDA when None).
    """
    return TritonWrapperCodegen(graph, schedule, kernels, device).generate()
