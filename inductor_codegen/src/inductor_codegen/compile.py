"""compile_graph: the stage's driver, one named pass after another.

    lower     FX graph of ATen ops -> loop IR buffers (GraphLowering)
    schedule  buffers -> fused kernels and extern calls (scheduler.schedule)
    codegen   each fused kernel -> a C++ function (codegen.cpp)
    fold      (inference graphs, an option) batch norms into prepacked convolution weights
    build     C++ -> shared libraries, in parallel, cached on disk (codegen.cpp.build)
    wrapper   the Python function that allocates, calls and frees (codegen.wrapper)
    load      the wrapper written to a real file and imported (pipeline)

CUDA tensors (or `options={"device_codegen": "triton"}`) take the same passes
through the Triton driver, `codegen.triton.compile`, which prints Triton
kernels and launches them from the same wrapper generator.

Each pass leaves a readable artifact with its time on the returned
CompiledGraph (`.artifacts`).

Dynamic shapes: a graph whose placeholders carry symbolic sizes (meta["val"]
fakes with torch.SymInt sizes, SymInt inputs) compiles once for every size
(`compile_graph.supports_dynamic_shapes` is True). What the code generator
cannot do for every size raises DynamicShapeError at compile time, so the
caller compiles the graph again with static sizes.
"""

from __future__ import annotations

import torch
import torch.fx

from guards import artifact_logger
from inductor_codegen.codegen.cpp.build import CompilerConfig, KernelLibrary, wrapper_namespace
from inductor_codegen.codegen.cpp.convolution import cpp_lowerings
from inductor_codegen.codegen.cpp.generate import generate_kernel
from inductor_codegen.codegen.triton.compile import compile_triton_graph
from inductor_codegen.codegen.triton.options import split_device_options, wants_triton
from inductor_codegen.codegen.wrapper import generate_wrapper
from inductor_codegen.errors import DynamicShapeError, UnsupportedGraphError
from inductor_codegen.frozen_convolutions import bytes_equal_kernel, fold_convolutions
from inductor_codegen.options import Options
from inductor_codegen.pipeline import (
    Artifact,
    CompiledGraph,
    EagerGraph,
    PassRecorder,
    PortableGraph,
    finish,
    is_symbolic_graph,
    load_wrapper,
    lower_and_schedule,
)
from inductor_codegen.scheduler import FusedKernel, describe, memoized_bodies

__all__ = [
    "Artifact",
    "CompiledGraph",
    "SUPPORTS_DYNAMIC_SHAPES",
    "compile_graph",
    "is_symbolic_graph",
]

# compile_graph takes graphs with symbolic sizes and compiles them once for all sizes.
SUPPORTS_DYNAMIC_SHAPES = True


def compile_graph(gm: torch.fx.GraphModule, example_inputs, *, options=None) -> CompiledGraph:
    """Compile a functional ATen graph to C++/OpenMP kernels and a Python wrapper.

    >>> compiled = compile_graph(gm, [torch.randn(4, 8)])
    >>> out = compiled(torch.randn(4, 8))

    `gm`'s nodes call `torch.ops.aten.*` OpOverloads and carry `meta["val"]`;
    example inputs are tensors (real or fake) and Python numbers. The result is
    specialized to the example inputs' sizes, strides and dtypes, unless the
    placeholders' meta["val"] have symbolic sizes (SymInts over size symbols): then
    it runs at every size, reading the symbols from its inputs at each call, or
    DynamicShapeError is raised at compile time (compile with static sizes then).
    """
    with memoized_bodies():
        try:
            return _compile_graph(gm, example_inputs, options)
        except RecursionError:
            # NOTE: an expression deeper than Python's recursion limit (a long chain of
            # ops fused into one value): the graph runs through ATen, as eager computes
            return EagerGraph(gm, "an expression too deep to lower: the graph runs through ATen")


def _compile_graph(gm: torch.fx.GraphModule, example_inputs, options) -> CompiledGraph:
    device_options, options = split_device_options(options)
    if wants_triton(example_inputs, device_options):
        return compile_triton_graph(gm, example_inputs, options=options, device=device_options)
    opts = Options.from_mapping(options)
    passes = PassRecorder()
    done = passes.done

    # fold: per-channel affine maps after convolutions into prepacked weights, which
    # become inputs computed per call from the graph's (frozen_convolutions).
    folded = fold_convolutions(gm, example_inputs) if opts.fold_convolutions else None
    if folded is not None:
        gm, example_inputs, weights = folded
        done("fold", lambda: f"{len(weights.folds)} convolutions folded\n{gm.code}")

    # lower + schedule: FX graph -> loop IR buffers -> fused kernels and extern calls
    # (convolutions on channels-last data: codegen/cpp/convolution.py).
    try:
        graph, plan = lower_and_schedule(
            gm, example_inputs, opts.lowerings or cpp_lowerings(), passes, reinplace=opts.reinplace
        )
    except DynamicShapeError:
        raise
    except UnsupportedGraphError as error:
        return EagerGraph(gm, str(error))
    done("schedule", lambda: describe(plan.steps))

    # codegen: one C++ function per fused kernel.
    kernels = [s for s in plan.steps if isinstance(s, FusedKernel)]
    sources = {k.name: generate_kernel(k, graph.buffer_by_name) for k in kernels}
    done("codegen", lambda: "\n".join(s.source for s in sources.values()))

    # build: compile in parallel through the disk cache.
    config = (
        CompilerConfig(opts.cxx, opts.cxx_flags) if opts.cxx_flags else CompilerConfig(opts.cxx)
    )
    library = KernelLibrary(opts.cache_dir, config)
    functions = library.build(list(sources.values()), opts.compile_workers)
    if folded is not None:
        comparison = bytes_equal_kernel()
        weights.use_comparison(library.build([comparison], 1)[comparison.name])
    done("build", lambda: f"{len(sources)} kernels; cache stats {library.stats}")

    # wrapper: the Python function that allocates buffers and calls kernels and ATen.
    try:
        wrapper = generate_wrapper(graph, plan, sources)
    except DynamicShapeError as error:
        artifact_logger("perf_hints").info("symbolic graph needs static sizes: %s", error)
        raise
    kernel_text = "\n".join(library.source_of(s) for s in sources.values())
    done("wrapper", lambda: wrapper.text)

    # load: write the wrapper to a real file (tracebacks, pdb) and import it.
    namespace = wrapper_namespace(wrapper.namespace, graph.constants, functions)
    path = load_wrapper(wrapper, kernel_text, namespace, opts.cache_dir, "C++")
    done("load", lambda: str(path))
    compiled = finish(graph, namespace, path, wrapper, kernel_text, passes, len(kernels))
    if folded is not None:
        # NOTE: the folded weights live in this process only: no portable form.
        compiled.with_folded_weights(weights)
        return compiled
    # What a later process needs to load this graph without lowering (see portable).
    compiled.portable = PortableGraph(
        wrapper.text, kernel_text, {**wrapper.namespace, **graph.constants},
        tuple(sources.values()), graph.output_spec, config.cxx,
        opts.cxx_flags and config.flags, len(kernels), dict(graph.fallbacks),
        inputs_written_in_place=graph.inputs_written_in_place,
    )  # fmt: skip
    return compiled


compile_graph.supports_dynamic_shapes = SUPPORTS_DYNAMIC_SHAPES
