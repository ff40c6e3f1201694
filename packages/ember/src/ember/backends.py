"""Backends: what capture hands each graph to.

A backend is any callable `backend(gm: torch.fx.GraphModule, example_inputs: list)
-> callable` (torch.compile's contract, so backends move both ways). As in torch,
graphs may be symbolic: sizes that vary are SymInt graph inputs (their int values
in `example_inputs` and in each call). A backend that takes static graphs only sets
`backend.supports_dynamic_shapes = False` and gets one graph per size. Names resolve
through, in order: the built-ins, `register_backend`, and the entry-point group
`ember.backends` of installed distributions:

    [project.entry-points."ember.backends"]
    my_backend = "my_package.backend:compile_fn"
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ember.artifacts import BackendRecord
from ember.errors import BackendNotFoundError, InvalidArgumentError
from guards import artifact_logger

__all__ = [
    "BUILTIN_BACKENDS",
    "ENTRY_POINT_GROUP",
    "Backend",
    "list_backends",
    "lookup_backend",
    "register_backend",
]

Backend = Callable[[torch.fx.GraphModule, list], Callable[..., Any]]
ENTRY_POINT_GROUP = "ember.backends"
_dynamic_log = artifact_logger("dynamic")


def _takes_torch_symbols(compile_graph: Backend) -> Backend:
    """`compile_graph`, made correct for graphs carrying torch's own size symbols.

    Under torch.compile with dynamic sizes the example inputs hold SymInts of
    torch's shape environment, and torch runs the compiled graph for every size
    they may take. Such a graph is compiled over guards' ShapeEnv instead (once
    for all sizes); where that fails, once per distinct input signature, so no
    call runs a graph compiled for other sizes (see `ember.torch_symbols`).
    """

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        from ember.torch_symbols import SpecializingCall, adopt_torch_symbols, has_torch_symbols

        if not has_torch_symbols(gm, example_inputs):
            return compile_graph(gm, example_inputs)
        try:
            return compile_graph(gm, adopt_torch_symbols(gm, example_inputs))
        except Exception as error:  # noqa: BLE001 - compiling per signature is always sound
            _dynamic_log.info(
                "torch's symbolic sizes not carried over (%s); compiling per input sizes",
                error,
            )
            return SpecializingCall(gm, compile_graph)

    backend.__name__ = backend.__qualname__ = compile_graph.__name__
    # (float inputs made symbolic come as 0-d tensors read with `.item()`: aot_autograd
    # traces the read as the float's symbol, as it traces SymInt inputs)
    # aot_autograd does not trace torch.func transforms (saved-tensor hooks) or
    # torch.cond: those calls break the graph and run eagerly
    backend.takes_function_transforms = False  # type: ignore[attr-defined]
    # torch.func.vmap traced into the graph as functorch's batching calls: aot_autograd's
    # dispatch-mode tracer sees the ATen ops functorch's batching rules call
    backend.takes_batching_nodes = True  # type: ignore[attr-defined]
    backend.__doc__ = compile_graph.__doc__
    return backend


def _eager(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
    """Runs the captured graph as it is, with torch's eager kernels."""
    return gm.forward


def _aot_graph() -> Callable[..., Any]:
    # Imported on first use: `import ember` stays light until a stage is needed.
    from aot_autograd import aot_graph

    return aot_graph


def make_aot_eager(options: Mapping[str, Any]) -> Backend:
    """aot_autograd's ATen graphs, run by torch's eager kernels."""

    def aot_eager(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        def run_graph(graph: torch.fx.GraphModule, inputs: list) -> Callable[..., Any]:
            # The module itself, so that aot_autograd can free saved activations early.
            return graph

        record = BackendRecord()
        run = _aot_graph()(
            gm,
            example_inputs,
            fw_compiler=run_graph,
            decompositions=options.get("decompositions"),
            partition_fn=_partitioner(options, "default"),
        )
        return record.attach(run)

    backend = _takes_torch_symbols(_regional(aot_eager, options, writes_in_place=False))
    backend.supports_dynamic_shapes = _aot_supports_dynamic()  # type: ignore[attr-defined]
    return backend


def make_inductor(options: Mapping[str, Any]) -> Backend:
    """aot_autograd + prim_decomp's inductor_default table + inductor_codegen."""

    def inductor(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        from inductor_codegen import compile_graph
        from prim_decomp import inductor_default

        table = options.get("decompositions")
        if table is None:  # an empty table is a choice, not a missing one
            table = _gpu_table() if _on_gpu(example_inputs) else inductor_default
        codegen_options = _codegen_options(options)

        def compile_part(graph: torch.fx.GraphModule, inputs: list) -> Callable[..., Any]:
            return compile_graph(graph, inputs, options=codegen_options)

        # Inference graphs (no backward) may fold batch norms into prepacked convolution
        # weights, checked against the parameters' contents on every call (opt-in: the
        # check reads every folded weight each call).
        inference_options = codegen_options
        if options.get("fold_convolutions") is True and not _on_gpu(example_inputs):
            inference_options = {**codegen_options, "fold_convolutions": True}

        def compile_inference(graph: torch.fx.GraphModule, inputs: list) -> Callable[..., Any]:
            return compile_graph(graph, inputs, options=inference_options)

        # The record keeps each graph's kernels and wrapper (ember.last_artifacts, the trace).
        record = BackendRecord()
        run = _aot_graph()(
            gm,
            example_inputs,
            fw_compiler=record.compiler("forward", compile_part),
            bw_compiler=record.compiler("backward", compile_part),
            inference_compiler=record.compiler("inference", compile_inference),
            decompositions=table,
            partition_fn=_partitioner(options, "min_cut"),
            cache=_warm_start_cache(gm, example_inputs, options),
        )
        return record.attach(run)

    # Symbolic graphs (dynamic shapes) compile once for all sizes when both stages take
    # them; what either cannot do symbolically raises, and capture compiles static.
    from inductor_codegen import SUPPORTS_DYNAMIC_SHAPES as codegen_dynamic

    backend = _takes_torch_symbols(_regional(inductor, options))
    backend.supports_dynamic_shapes = _aot_supports_dynamic() and codegen_dynamic  # type: ignore[attr-defined]
    return backend


def _regional(
    compile_graph: Backend, options: Mapping[str, Any], writes_in_place: bool = True
) -> Backend:
    """Repeated module calls compiled once (ember.regions), unless `regional` is off.

    NOTE: by default (None) only graphs on the CPU are cut: on an H100, AMP training steps
    of BERT-base, GPT-2 and a Llama-style model ran as fast or faster compiled whole (BERT
    1.92x against 1.52x over eager in one interleaved run), and whole graphs still compile
    in a third of torch.compile's time there. A backend whose compiled graphs do not
    write mutated inputs themselves (`writes_in_place=False`: aot_eager) also compiles
    whole by default a graph writing an input in place: each piece would copy the input
    back (a 12-layer decode step over one KV cache tensor: 12 copies of the cache, a
    step 1.08x the whole graph's).
    """
    setting = options.get("regional")
    if setting is False:
        return compile_graph
    from ember.regions import regional, writes_inputs

    cut = regional(compile_graph)
    if setting is True:
        return cut

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        if _on_gpu(example_inputs) or (not writes_in_place and writes_inputs(gm)):
            return compile_graph(gm, example_inputs)
        return cut(gm, example_inputs)

    return backend


def _warm_start_cache(gm: torch.fx.GraphModule, example_inputs: list, options: Mapping) -> Any:
    """Compiled graphs kept across processes (ember.warm_cache); None where not stored."""
    from ember.warm_cache import warm_start_cache

    return warm_start_cache(gm, example_inputs, options)


def _on_gpu(example_inputs: list) -> bool:
    return any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)


_GPU_TABLE: list[Any] = []


def _gpu_table() -> Any:
    """inductor_default less two rules, for Triton.

    - The variance rules: Triton's Welford lowering reads the input once where the
      two-pass rule reads it twice (long batch-norm rows). The C++ path keeps the
      two passes, which are cheaper there than Welford's divisions.
    - The embedding backward: the rule is an accumulating `index_put`, which on the
      GPU is ATen's sort-based scatter, serialized over repeated indices (T5's
      relative-position table of 32 rows, read 262144 times: 10 ms a call). ATen's
      own embedding backward, which eager runs, takes well under a millisecond.
    """
    if not _GPU_TABLE:
        from prim_decomp import inductor_default

        aten = torch.ops.aten
        _GPU_TABLE.append(
            inductor_default.without(
                aten.var_mean.correction,
                aten.var.correction,
                aten.embedding_dense_backward.default,
            )
        )
    return _GPU_TABLE[0]


def _partitioner(options: Mapping[str, Any], default: str) -> Callable[..., Any]:
    """The partition function the `partitioner` option names (`default` when unset).

    The inductor backend recomputes cheap ops in the backward (min-cut), as its
    kernels fuse them with their consumers there: fewer saved bytes, less memory
    traffic and a lower peak. aot_eager runs each op as an ATen call, so it saves.
    """
    from aot_autograd import default_partition, min_cut_rematerialization_partition

    name = options.get("partitioner") or default
    return min_cut_rematerialization_partition if name == "min_cut" else default_partition


def _aot_supports_dynamic() -> bool:
    from aot_autograd import SUPPORTS_DYNAMIC_SHAPES

    return SUPPORTS_DYNAMIC_SHAPES


def make_cudagraphs(options: Mapping[str, Any]) -> Backend:
    """aot_autograd's graphs replayed through CUDA graphs."""

    def cudagraphs(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        from inductor_codegen import cudagraph_compiler

        return _aot_graph()(gm, example_inputs, fw_compiler=cudagraph_compiler)

    # A CUDA graph replays fixed sizes: one static graph per size.
    wrapped = _takes_torch_symbols(cudagraphs)
    wrapped.supports_dynamic_shapes = False  # type: ignore[attr-defined]
    return wrapped


def _codegen_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The compile_graph options that ember.compile's options set."""
    from ember.config import OPTIONS

    codegen: dict[str, Any] = {}
    for name, value in options.items():
        option = OPTIONS[name]
        if option.codegen_name is not None and value is not None:
            codegen[option.codegen_name] = value
    return codegen


# name -> factory(options) -> backend; the options come from ember.compile.
BUILTIN_BACKENDS: dict[str, Callable[[Mapping[str, Any]], Backend]] = {
    "inductor": make_inductor,
    "eager": lambda options: _eager,
    "aot_eager": make_aot_eager,
    "cudagraphs": make_cudagraphs,
}

_registered: dict[str, Backend] = {}


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def register_backend(
    compiler_fn: Backend | None = None, name: str | None = None, tags: tuple[str, ...] = ()
) -> Any:
    """Register a backend under `name` (default: the function's name).

        @ember.register_backend
        def my_backend(gm, example_inputs):
            return gm.forward

        @ember.register_backend(name="mine")
        def another(gm, example_inputs): ...

        ember.register_backend(fn, name="third")

    Built-in names are reserved; registering a name twice with different functions
    is an error. Returns the function, so it still works undecorated.
    """
    if compiler_fn is None:
        return lambda fn: register_backend(fn, name=name, tags=tags)
    if not callable(compiler_fn):
        raise InvalidArgumentError(
            f"register_backend expects a callable backend(gm, example_inputs), "
            f"got {type(compiler_fn).__name__}"
        )
    name = name or getattr(compiler_fn, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidArgumentError(f"a backend name must be an identifier, got {name!r}")
    if name in BUILTIN_BACKENDS:
        raise InvalidArgumentError(f"backend name {name!r} is reserved for the built-in backend")
    existing = _registered.get(name)
    if existing is not None and existing is not compiler_fn:
        raise InvalidArgumentError(
            f"a different backend is already registered as {name!r} ({existing!r})"
        )
    _registered[name] = compiler_fn
    compiler_fn._ember_backend_tags = tuple(tags)  # type: ignore[attr-defined]
    return compiler_fn


def list_backends() -> list[str]:
    """Every backend name: built-ins, registered, and installed entry points, sorted."""
    return sorted(set(BUILTIN_BACKENDS) | set(_registered) | set(_entry_points()))


def _not_found(name: object) -> BackendNotFoundError:
    return BackendNotFoundError(
        f"unknown backend {name!r}; available: {', '.join(list_backends())}. "
        "Register your own with ember.register_backend(fn, name=...), or declare it in your "
        f"package's entry-point group {ENTRY_POINT_GROUP!r}, or pass the callable itself."
    )


def lookup_backend(backend: str | Backend, options: Mapping[str, Any] | None = None) -> Backend:
    """The backend callable for a name or a callable; `options` configure built-ins."""
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise _not_found(backend)
    if backend in BUILTIN_BACKENDS:
        return BUILTIN_BACKENDS[backend](options or {})
    if backend in _registered:
        return _registered[backend]
    entry_point = _entry_points().get(backend)
    if entry_point is None:
        raise _not_found(backend)
    loaded = entry_point.load()
    if not callable(loaded):
        raise InvalidArgumentError(
            f"entry point {backend!r} ({entry_point.value}) did not load a callable backend"
        )
    _registered[backend] = loaded
    return loaded


def check_backend_name(backend: object) -> str | None:
    """Validate a backend argument early; returns the built-in name, or None for others."""
    if callable(backend):
        return None
    if isinstance(backend, str) and backend in list_backends():
        return backend if backend in BUILTIN_BACKENDS else None
    raise _not_found(backend)
