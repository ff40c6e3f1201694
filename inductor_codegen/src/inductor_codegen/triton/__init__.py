"""Triton code generation for GPUs: the same IR and scheduler as the C++ side, another printer.

    from inductor_codegen import compile_graph
    compiled = compile_graph(gm, cuda_inputs)                       # Triton for CUDA inputs
    compiled = compile_graph(gm, cpu_inputs, options={"device_codegen": "triton"})
                                                   # CPU tensors, under TRITON_INTERPRET=1
    compiled = compile_graph(gm, cuda_inputs, options={"cudagraphs": True, "max_autotune": True})

Importing this package does not import triton; compiling a graph does.
"""

from inductor_codegen.triton.codegen import GroupMeta, TritonKernelSource, generate_triton_kernel
from inductor_codegen.triton.compile import compile_triton_graph
from inductor_codegen.triton.cudagraphs import CUDAGraphRunner, cudagraph_compiler
from inductor_codegen.triton.heuristics import LaunchConfig, autotune_configs, default_config
from inductor_codegen.triton.options import TritonOptions, split_device_options, wants_triton

__all__ = [
    "CUDAGraphRunner",
    "GroupMeta",
    "LaunchConfig",
    "TritonKernelSource",
    "TritonOptions",
    "autotune_configs",
    "compile_triton_graph",
    "cudagraph_compiler",
    "default_config",
    "generate_triton_kernel",
    "split_device_options",
    "wants_triton",
]
