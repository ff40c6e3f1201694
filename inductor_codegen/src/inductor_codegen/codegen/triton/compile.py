"""compile_triton_graph: the Triton driver, one named pass after another.

    lower     FX graph of ATen ops -> loop IR buffers (the same GraphLowering as C++,
              with long reductions to few outputs split in two: `lowering.split`)
    schedule  buffers -> fused kernels and extern calls (the same scheduler, with
              GPU_FUSION_POLICY)
    codegen   each fused kernel -> a @triton.jit function (kernel)
    load      kernel modules written by content hash and imported in parallel
    wrapper   the Python function that allocates, launches and frees (the one wrapper
              generator, codegen/wrapper.py, with this device's hooks: wrapper)

Matmul and convolution stay extern ATen calls (cuBLAS, cuDNN). With
`cudagraphs=True` the result replays through CUDA graphs.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import torch

from guards.cache_root import cache_folder
from inductor_codegen import runtime
from inductor_codegen.codegen.triton.jit_cache import use_jit_cache_under
from inductor_codegen.codegen.triton.kernel import PERSISTENT_MAX, generate_triton_kernel
from inductor_codegen.codegen.triton.options import TritonOptions, split_device_options
from inductor_codegen.codegen.triton.random import TRITON_LOWERINGS
from inductor_codegen.column_partials import (
    ColumnPartialPolicy,
    active_column_partial_policy,
    column_partials,
)
from inductor_codegen.errors import MixedDeviceGraphError, UnsupportedGraphError
from inductor_codegen.lowering.split import SplitPolicy, active_split_policy, split_reductions
from inductor_codegen.options import Options
from inductor_codegen.pipeline import (
    Artifact,
    CompiledGraph,
    EagerGraph,
    PassRecorder,
    PortableGraph,
    finish,
    load_wrapper,
    lower_and_schedule,
    write_wrapper,
)
from inductor_codegen.scheduler import (
    FusedKernel,
    FusionPolicy,
    Schedule,
    describe,
    memoized_bodies,
)

__all__ = ["GPU_FUSION_POLICY", "compile_triton_graph", "load_triton_graph", "maybe_cudagraphs"]

# A GPU kernel runs its outer loop in parallel and each program's inner loops in
# sequence, so a horizontal fusion may neither put work in an inner pointwise loop
# nor join a reduction kernel unless it shares reads with it (a residual sum stored
# beside the norm over it: its rows are loaded once, by the norm's loop). The casts
# of three weights [768, 768], [768, 3072] and [50257, 768] joined under an outer
# loop of 768 would run as 768 programs looping over rows (1.6 ms for what three
# flat kernels do in 0.3 ms).
# Rows held in one block (a persistent reduction's longest row); about 4 programs an SM
# of an H100 or H200 (132 SMs) of 4 warps each, sized by row blocks.
COLUMN_PARTIAL_POLICY = ColumnPartialPolicy(max_row=PERSISTENT_MAX, programs=1024, min_rows=4)
GPU_FUSION_POLICY = FusionPolicy(
    horizontal_rules=(
        "index_divisions",
        "mixed_strides",
        "inner_loops_along_shared_rows",
        "reductions_need_shared_reads",
    ),
    small_reduction_elements=1 << 20,
)


def graph_device(example_inputs) -> torch.device:
    """The device of the graph's tensors: a 0-dim CPU tensor beside CUDA tensors (which
    eager reads as a scalar) does not decide it."""
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    for x in tensors:
        if x.device.type != "cpu" or x.dim() > 0:
            return x.device
    if tensors:
        return tensors[0].device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def compile_triton_graph(
    gm: torch.fx.GraphModule,
    example_inputs,
    *,
    options=None,
    device: TritonOptions | None = None,
) -> CompiledGraph:
    """Compile a functional ATen graph to Triton kernels and a Python wrapper.

    >>> compiled = compile_triton_graph(gm, [torch.randn(4, 8, device="cuda")])

    Same contract as `compile_graph` (which calls this for CUDA inputs, or for
    any inputs with `options={"device_codegen": "triton"}`). `device` holds the
    GPU options when the caller split them from `options` already.
    """
    with memoized_bodies():
        return _compile_triton_graph(gm, example_inputs, options, device)


def _compile_triton_graph(gm, example_inputs, options, device) -> CompiledGraph:
    device_options, rest = split_device_options(options)
    device_options = device or device_options
    opts = Options.from_mapping(rest)
    device = graph_device(example_inputs)
    passes = PassRecorder()
    done = passes.done

    # lower + schedule: FX graph -> loop IR buffers -> fused kernels and extern calls.
    lowerings = opts.lowerings or TRITON_LOWERINGS
    try:
        with split_reductions(active_split_policy() or SplitPolicy()):
            # NOTE: under CUDA graphs an input written in place is recorded at its own
            # address (see cudagraphs.CUDAGraphRunner's `pinned`), not copied.
            graph, plan = lower_and_schedule(
                gm,
                example_inputs,
                lowerings,
                passes,
                GPU_FUSION_POLICY,
                reinplace=opts.reinplace,
                device=device,
            )
    except MixedDeviceGraphError as error:
        return EagerGraph(gm, str(error))  # (CUDA graph replays would skip its CPU ops)
    except UnsupportedGraphError as error:
        return maybe_cudagraphs(EagerGraph(gm, str(error)), device_options)
    plan = _renamed(plan)
    done("schedule", lambda: describe(plan.steps))

    # column partials: column sums (a norm's weight gradient) computed in the row kernel
    # that reads the same rows, as partials per block of rows, then a small final sum.
    if not graph.symbolic:
        policy = active_column_partial_policy() or COLUMN_PARTIAL_POLICY
        plan = column_partials(plan, graph.buffer_by_name, policy)
        done("column_partials", lambda: describe(plan.steps))

    # templates (max_autotune): matmuls as Triton templates with their epilogue fused.
    templates = {}
    if device_options.templates_wanted() and not graph.symbolic:
        from inductor_codegen.codegen.triton.templates import plan_matmul_templates

        plan, templates = plan_matmul_templates(plan, graph)
        done("templates", lambda: _describe_templates(templates))

    # codegen: one Triton kernel per fused kernel (named like the step, for the wrapper).
    kernels = [s for s in plan.steps if isinstance(s, FusedKernel)]
    sources = {k.name: generate_triton_kernel(k, graph.buffer_by_name) for k in kernels}
    every = [*sources.values(), *templates.values()]
    every += [t.epilogue for t in templates.values() if t.epilogue is not None]
    kernel_text = "\n".join(s.source.replace("KERNEL_NAME", s.name) for s in every)
    done("codegen", lambda: kernel_text)

    # load: kernel modules written by content hash and imported in parallel (Triton's
    # own JIT cache under ember's root too, unless the user chose its folder).
    folder = cache_folder("triton", root=opts.cache_dir)
    use_jit_cache_under(opts.cache_dir)
    launchers, loaded = _launchers(
        sources, templates, device_options, folder, opts.compile_workers, device, graph.size_hints
    )
    done("load", lambda: "\n".join(str(p) for _, p in loaded.values()))

    # wrapper: the Python function that allocates buffers and launches kernels and ATen.
    from inductor_codegen.codegen.triton.wrapper import generate_triton_wrapper

    wrapper = generate_triton_wrapper(graph, plan, {**sources, **templates}, device)
    done("wrapper", lambda: wrapper.text)

    namespace = _namespace(device, {**wrapper.namespace, **graph.constants}, launchers)
    path = load_wrapper(wrapper, kernel_text, namespace, opts.cache_dir, "Triton")
    kernel_count = len(kernels) + len(templates)
    compiled = finish(graph, namespace, path, wrapper, kernel_text, passes, kernel_count)
    result = maybe_cudagraphs(compiled, device_options)
    if not templates:
        # What a later process needs to load this graph without lowering (see portable).
        result.portable = PortableGraph(
            wrapper.text, kernel_text, {**wrapper.namespace, **graph.constants},
            tuple(sources.values()), graph.output_spec, "", None, kernel_count,
            dict(graph.fallbacks), language="Triton", device=str(device),
            device_options=device_options,
            inputs_written_in_place=graph.inputs_written_in_place,
        )  # fmt: skip
    return result


def _launchers(sources, templates, device_options, folder, workers, device, size_hints=None):
    """({step: its launcher}, {kernel name: (jit function, module path)}): the kernel
    modules written by content hash and imported, each compiled for the device (kernels
    over symbolic sizes for the sizes' example values, `size_hints`, where given)."""
    from inductor_codegen.codegen.triton.runtime import TritonKernel, load_kernels

    every = [*sources.values(), *templates.values()]
    every += [t.epilogue for t in templates.values() if t.epilogue is not None]
    loaded = load_kernels(every, folder, workers)

    def launcher(src):
        return TritonKernel(
            loaded[src.name][0],
            src,
            loaded[src.name][1],
            autotune=device_options.max_autotune,
            folder=folder,
        )

    launchers = {step: launcher(src) for step, src in sources.items()}
    if templates:
        from inductor_codegen.codegen.triton.template_runtime import MatmulTemplateKernel

        mode = "auto" if device_options.matmul_templates == "auto" else None
        for step, src in templates.items():
            launchers[step] = MatmulTemplateKernel(
                loaded[src.name][0],
                src,
                launcher(src.epilogue) if src.epilogue is not None else None,
                mode=mode or device_options.matmul_templates,
                folder=folder,
            )
    if device.type == "cuda":
        from inductor_codegen.codegen.triton.runtime import precompile

        precompile(
            [k for k in launchers.values() if isinstance(k, TritonKernel)],
            workers,
            _device_index(device),
            size_hints,
        )
    return launchers, loaded


def _namespace(device: torch.device, objects: dict, launchers: dict) -> dict:
    """The namespace the wrapper runs in: its helpers, its own objects, the launchers."""
    from inductor_codegen.codegen.triton.wrapper import aligned_copies

    return {
        "torch": torch,
        "aten": torch.ops.aten,
        "empty_strided": torch.empty_strided,
        "device0": torch.device(device),
        "get_raw_stream": _stream_getter(device),
        "aligned_copies": aligned_copies,
        "reinterpret": runtime.reinterpret,
        "ensure_layout": runtime.ensure_layout,
        "check_layout": runtime.check_layout,
        **objects,
        **launchers,
    }


def load_triton_graph(
    wrapper_text: str,
    kernel_text: str,
    objects: dict,
    sources: dict,
    device: torch.device,
    device_options: TritonOptions,
    *,
    cache_dir=None,
    workers: int | None = None,
) -> tuple[dict, Path]:
    """(the wrapper's namespace, its file) for a stored Triton graph (`portable`): its
    kernels loaded through the kernel module cache, its wrapper run again."""
    folder = cache_folder("triton", root=cache_dir)
    use_jit_cache_under(cache_dir)
    launchers, _ = _launchers(sources, {}, device_options, folder, workers, device)
    namespace = _namespace(device, objects, launchers)
    path = write_wrapper(wrapper_text, kernel_text, cache_dir, "Triton")
    exec(compile(wrapper_text, str(path), "exec"), namespace)
    return namespace, path


def _stream_getter(device: torch.device):
    """`get_raw_stream()`: the current CUDA stream of the graph's device, read once per call."""
    from inductor_codegen.codegen.triton.runtime import interpreting

    if device.type != "cuda" or interpreting():
        return lambda: 0
    return functools.partial(torch._C._cuda_getCurrentRawStream, _device_index(device))


def _device_index(device: torch.device) -> int:
    """The index of a CUDA device (`cuda` alone is the current one)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def _describe_templates(templates) -> str:
    lines = ["matmul templates:"]
    for name, src in templates.items():
        size = f"{src.batch}x{src.m}x{src.n}x{src.k}"
        fused = f"epilogue {src.epilogue.name}" if src.epilogue is not None else "no epilogue"
        lines.append(f"  {name}: {src.op} {size} {src.dtype}, {fused}")
    return "\n".join(lines)


def maybe_cudagraphs(compiled: CompiledGraph, options: TritonOptions) -> CompiledGraph:
    if not options.cudagraphs:
        return compiled
    from inductor_codegen.codegen.triton.cudagraphs import CUDAGraphRunner

    written = compiled.inputs_written_in_place
    runner = CUDAGraphRunner(compiled, pinned=written)
    return CompiledGraph(
        runner.call_boxed,
        artifacts=compiled.artifacts
        + [Artifact("cudagraphs", "recorded per input signature", 0.0)],
        fallbacks=compiled.fallbacks,
        kernel_count=compiled.kernel_count,
        wrapper_path=compiled.wrapper_path,
        inputs_written_in_place=written,
        output_strides=compiled.output_strides,
    )


def _renamed(plan: Schedule) -> Schedule:
    """Kernels named triton_fused_* (the scheduler names them for the C++ printer)."""
    steps = tuple(
        replace(s, name=s.name.replace("cpp_", "triton_", 1)) if isinstance(s, FusedKernel) else s
        for s in plan.steps
    )
    return Schedule(steps, plan.buffers)
