"""The Triton generator's public names (it lives in `inductor_codegen.codegen.triton`).

from inductor_codegen.triton import TritonOptions, cudagraph_compiler, default_config
"""

from inductor_codegen.codegen.triton.compile import compile_triton_graph
from inductor_codegen.codegen.triton.cudagraphs import CUDAGraphRunner, cudagraph_compiler
from inductor_codegen.codegen.triton.heuristics import (
    LaunchConfig,
    autotune_configs,
    default_config,
)
from inductor_codegen.codegen.triton.kernel import (
    GroupMeta,
    TritonKernelSource,
    generate_triton_kernel,
)
from inductor_codegen.codegen.triton.options import (
    TritonOptions,
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
