"""The Triton generator's public names, kept at their former import path.

The generator lives in `inductor_codegen.codegen.triton`.
"""

from inductor_codegen.codegen.triton import (
    CUDAGraphRunner,
    GroupMeta,
    LaunchConfig,
    TritonKernelSource,
    TritonOptions,
    autotune_configs,
    compile_triton_graph,
    cudagraph_compiler,
    default_config,
    generate_triton_kernel,
    split_device_options,
    wants_triton,
)

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
