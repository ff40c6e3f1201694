"""The GPU options of `compile_graph`, and which code generator a graph goes to.

device_codegen: "auto" (default: Triton when an input is a CUDA tensor, C++
                otherwise), "triton" (Triton for any device; CPU tensors run
                under the Triton interpreter, TRITON_INTERPRET=1), or "cpp".
cudagraphs:     replay the compiled graph through CUDA graphs (mode
                "reduce-overhead"); see `cudagraphs.CUDAGraphRunner`.
max_autotune:   benchmark a few launch configurations per kernel on its first
                run and keep the fastest (cached on disk); matmuls become Triton
                templates with their pointwise epilogue fused, timed against
                the ATen call plus a separate epilogue kernel.
matmul_templates: "auto" (default: templates under max_autotune, the faster of
                template and ATen kept), "off", "template" (always the
                template, unmeasured) or "aten" (planned, but the ATen call
                and the epilogue kernel run; for comparisons and tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inductor_codegen.errors import InductorError

__all__ = ["DEVICE_OPTION_NAMES", "TritonOptions", "split_device_options", "wants_triton"]

DEVICE_OPTION_NAMES = ("device_codegen", "cudagraphs", "max_autotune", "matmul_templates")
CODEGENS = ("auto", "triton", "cpp")
MATMUL_TEMPLATE_MODES = ("auto", "off", "template", "aten")


@dataclass(frozen=True, slots=True)
class TritonOptions:
    device_codegen: str = "auto"
    cudagraphs: bool = False
    max_autotune: bool = False
    matmul_templates: str = "auto"

    def templates_wanted(self) -> bool:
        """Whether matmuls become templates: under max_autotune, or when a mode forces them."""
        if self.matmul_templates == "off":
            return False
        return self.max_autotune or self.matmul_templates in ("template", "aten")


def split_device_options(options) -> tuple[TritonOptions, dict | None]:
    """(the GPU options, the remaining options for `Options`)."""
    if options is None or not hasattr(options, "items"):
        return TritonOptions(), options
    rest = {k: v for k, v in options.items() if k not in DEVICE_OPTION_NAMES}
    chosen = TritonOptions(**{k: v for k, v in options.items() if k in DEVICE_OPTION_NAMES})
    if chosen.device_codegen not in CODEGENS:
        raise InductorError(
            f"unknown device_codegen {chosen.device_codegen!r}; choose one of {', '.join(CODEGENS)}"
        )
    if chosen.matmul_templates not in MATMUL_TEMPLATE_MODES:
        raise InductorError(
            f"unknown matmul_templates {chosen.matmul_templates!r}; choose one of "
            f"{', '.join(MATMUL_TEMPLATE_MODES)}"
        )
    return chosen, rest


def wants_triton(example_inputs, options: TritonOptions) -> bool:
    """Triton when asked for, or (auto) when an example input lives on a CUDA device."""
    if options.device_codegen != "auto":
        return options.device_codegen == "triton"
    return any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs)
