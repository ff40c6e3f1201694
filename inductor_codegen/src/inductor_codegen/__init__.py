"""inductor_codegen: loop-level IR, fusion, and C++-OpenMP code generation.

    from inductor_codegen import compile_graph
    compiled = compile_graph(gm, example_inputs)   # gm: functional ATen FX graph
    outputs = compiled(*inputs)

Stable API: everything in `__all__`.
"""

from inductor_codegen.codegen.cpp.build import deferred_builds
from inductor_codegen.codegen.triton.cudagraphs import cudagraph_compiler
from inductor_codegen.compile import (
    SUPPORTS_DYNAMIC_SHAPES,
    Artifact,
    CompiledGraph,
    compile_graph,
)
from inductor_codegen.errors import (
    CppCompileError,
    DynamicShapeError,
    InductorError,
    LoweringError,
    MixedDeviceGraphError,
    UnsupportedGraphError,
)
from inductor_codegen.lowering import LOWERINGS, register_lowering
from inductor_codegen.options import Options, default_cache_dir

__version__ = "0.1.0"

__all__ = [
    "Artifact",
    "CompiledGraph",
    "CppCompileError",
    "DynamicShapeError",
    "InductorError",
    "LOWERINGS",
    "LoweringError",
    "MixedDeviceGraphError",
    "Options",
    "SUPPORTS_DYNAMIC_SHAPES",
    "UnsupportedGraphError",
    "compile_graph",
    "cudagraph_compiler",
    "default_cache_dir",
    "deferred_builds",
    "register_lowering",
]
