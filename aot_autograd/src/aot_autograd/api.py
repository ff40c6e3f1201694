"""The public entry points: aot_graph (for backends), aot_function, aot_module.

The driver, `AotCallable._compile`, is one flat list of named passes:

    trace      the callable at the ATen level, functionalized (joint when training)
    partition  the joint graph into forward and backward (training only)
    compile    each graph with the compiler the caller gave
    wrap       the compiled graphs in the run time (autograd.Function, mutations, aliases)

Each pass's graph is kept in `AotCallable.graphs` and logged under
`EMBER_LOGS=aot_graphs`.

With symbolic sizes (a graph captured with dynamic shapes), the driver also
notes what tracing assumed about the sizes (`ShapeAssumptions`); a call whose
sizes break an assumption runs a graph compiled for its static sizes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx, nn

import guards
from aot_autograd.absent_tangents import saved_values_read, without_absent_tangents
from aot_autograd.attention import dense_attention_masks, needs_dense_mask
from aot_autograd.checkpoint_regions import has_regions, running_regions
from aot_autograd.checks import checks_on, verify_functional_graph
from aot_autograd.errors import (
    AotAutogradError,
    EagerCallWarning,
    OverlappingWriteError,
    RestridedLeafError,
    SymbolicShapeError,
    UnsupportedMutationError,
)
from aot_autograd.identity_dropouts import identity_dropouts, identity_source
from aot_autograd.partitioners import default_partition, mark_mutated_primals
from aot_autograd.portable import BACKWARD_STORED_APART, CompiledGraphCache, CompiledParts
from aot_autograd.program import (
    TracedProgram,
    inputs_written_in_place,
    mark_input_mutations,
    mark_user_visible_outputs,
    trace_program,
)
from aot_autograd.runtime import (
    DeferredBackward,
    aliased_mutated_input,
    compiled_call,
    compiler_in_this_context,
    requires_grad_flags,
    saved_strides_of,
    tangent_dependencies,
    training_function,
)
from aot_autograd.saved_layouts import (
    changed_saved_strides,
    mark_saved_outputs,
    outputs_in_traced_strides,
    reported_saved_strides,
    with_saved_strides,
)
from aot_autograd.subclass_program import (
    SubclassAotCallable,
    SubclassProgramError,
    has_subclass_inputs,
    holds_subclass_values,
)
from aot_autograd.symbolic import (
    ShapeAssumptions,
    ShapeSnapshot,
    float_inputs_of,
    is_symbolic,
    shape_env_of,
)
from guards.garbage_collection import old_objects_frozen

__all__ = [
    "AotCallable",
    "AotConfig",
    "SUPPORTS_DYNAMIC_SHAPES",
    "aot_function",
    "aot_graph",
    "aot_module",
]

# aot_graph takes graphs with symbolic sizes (SymInt inputs, fakes over a ShapeEnv) and
# compiles them once for all sizes: a backend built on it may declare
# `supports_dynamic_shapes = SUPPORTS_DYNAMIC_SHAPES`.
SUPPORTS_DYNAMIC_SHAPES = True

Compiler = Callable[[fx.GraphModule, list], Callable]
PartitionFn = Callable[..., tuple[fx.GraphModule, fx.GraphModule]]


def _log(title: str, gm: fx.GraphModule, seconds: float) -> None:
    try:
        from guards import artifact_enabled, artifact_logger
        from guards.trace_events import emit, tracing
    except ImportError:  # guards is a declared dependency; logging is optional all the same
        return
    if tracing():  # the compile trace (ember.trace): each graph with its pass time
        emit("aot_graph", name=title.removesuffix(" graph"), text=gm.code, seconds=seconds)
    if artifact_enabled("aot_graphs"):
        code = gm.print_readable(print_output=False)
        message = f"===== {title} (took {seconds * 1000:.1f} ms) =====\n{code}"
        artifact_logger("aot_graphs").info(message)


@dataclass(frozen=True, slots=True)
class AotConfig:
    """What to do with the traced graphs: the compilers, the decompositions, the partitioner."""

    fw_compiler: Compiler
    bw_compiler: Compiler | None = None
    inference_compiler: Compiler | None = None
    decompositions: Mapping | None = None
    partition_fn: PartitionFn | None = None
    # Compiled graphs kept across processes (aot_autograd.portable); static graphs only.
    cache: CompiledGraphCache | None = None


@dataclass(slots=True)
class _Compiled:
    program: TracedProgram
    run: Callable[..., Any]
    training: bool
    # What tracing assumed about symbolic sizes; None for static graphs.
    assumptions: ShapeAssumptions | None = None
    # The per-call path (runtime.compiled_call): mutations, grad mode, outputs.
    call: Callable[[Sequence[Any]], Any] | None = None
    # Mutated inputs the compiled graph wrote itself (not copied back; see
    # program.mark_input_mutations).
    written_in_place: frozenset[int] = frozenset()
    # The full backward where it compiles at its first use (see `deferred_backwards`).
    backward: DeferredBackward | None = None

    def __post_init__(self) -> None:
        self.call = compiled_call(self.program, self.run, self.training, self.written_in_place)


@dataclass(slots=True)
class AotCallable:
    """A callable traced and compiled ahead of time, per grad mode, on first use.

    `graphs` maps "joint", "forward", "backward", "inference" to the last
    graphs built, for inspection.

    With symbolic example inputs (`shape_snapshot` set: what the ShapeEnv held
    before tracing), graphs are traced once for all sizes. A call whose sizes
    break what tracing assumed, or a grad mode whose symbolic compile failed,
    runs a graph compiled for the call's static sizes; `static_compiles` counts
    those.
    """

    flat_fn: Callable
    example_inputs: Sequence[Any]
    config: AotConfig
    graphs: dict[str, fx.GraphModule] = field(default_factory=dict)
    shape_snapshot: ShapeSnapshot | None = None
    # Input index -> the symbolic value of a float input (a 0-d tensor read with `.item()`)
    float_inputs: Mapping[int, torch.SymFloat] = field(default_factory=dict)
    static_compiles: int = 0
    _cache: dict[tuple, _Compiled | None] = field(default_factory=dict)
    _static: dict[tuple, AotCallable] = field(default_factory=dict)

    def __call__(self, *args: Any) -> Any:
        requires_grad, training, key = self._key(args)
        compiled = self._cache.get(key, _MISSING)
        if compiled is _MISSING:
            if requires_grad is None:
                requires_grad = requires_grad_flags(args)
            compiled = self._cache[key] = self._compile_for_call(training, requires_grad)
        if compiled is _RUN_EAGERLY:
            return self.flat_fn(*args)
        if compiled is None or (
            compiled.assumptions is not None and not _assumptions_hold(compiled, args)
        ):
            return self._static_call(args)
        try:
            if compiled.program.mutated_inputs:
                if aliased_mutated_input(compiled.program, args) is not None:
                    return self._eager_call(args)
                return compiled.call.aliasing_checked(args)
            return compiled.call(args)
        except RestridedLeafError as error:  # raised before the graph ran
            warnings.warn(
                f"running the graph's ops eagerly for this call: {error}",
                EagerCallWarning,
                stacklevel=2,
            )
            return self.flat_fn(*args)

    @staticmethod
    def _key(args: Sequence[Any]) -> tuple[tuple | None, bool, tuple]:
        """(requires_grad flags or None, training, the cache key) of a call with `args`."""
        if torch.is_grad_enabled():
            requires_grad = requires_grad_flags(args)
            training = True in requires_grad
            key = (training, requires_grad if training else ())
        else:  # inference under no_grad: nothing to look at per argument once compiled
            requires_grad, training, key = None, False, _INFERENCE_KEY
        if _any_autocast_enabled():  # a graph traced under autocast holds its casts
            key = (*key, autocast_state())
        return requires_grad, training, key

    def compile_ahead(self) -> None:
        """Compile now what a first call with arguments like the example inputs (their
        requires_grad) would compile, in the current grad mode and autocast state.

        >>> run = aot_graph(gm, example_inputs, fw_compiler=compiler)
        >>> run.aot.compile_ahead()     # traced and compiled here, not at the first call
        """
        requires_grad, training, key = self._key(self.example_inputs)
        if key in self._cache:
            return
        if requires_grad is None:
            requires_grad = requires_grad_flags(self.example_inputs)
        self._cache[key] = self._compile_for_call(training, requires_grad)

    def deferred_backwards(self) -> list[DeferredBackward]:
        """The full backwards compiled so far that wait for their first use."""
        found = []
        for compiled in self._cache.values():
            backward = getattr(compiled, "backward", None)
            if isinstance(backward, DeferredBackward) and backward.compiled is None:
                found.append(backward)
        return found

    def _eager_call(self, args: Sequence[Any]) -> Any:
        """Run the traced function itself (eager ops) on this call's arguments.

        NOTE: the graph writes an input in place that shares memory with another input
        (a view of one and its base, passed in after a graph break); the compiled graph
        treats its inputs as separate tensors, so this call runs the ops eagerly,
        where writes through one input show in the other as in eager.
        """
        _aliasing_log.info(
            "an input written in place shares memory with another input: running the "
            "graph's ops eagerly for this call"
        )
        return self.flat_fn(*args)

    def compile_symbolic(self, example_values: Sequence[Any]) -> None:
        """Compile now, for the grad mode `example_values` (fakes) imply; SymbolicShapeError
        if that fails, so a caller holding static inputs can compile for those instead."""
        requires_grad = tuple(
            isinstance(a, torch.Tensor) and a.requires_grad for a in example_values
        )
        training = torch.is_grad_enabled() and any(requires_grad)
        key = (training, requires_grad if training else ())
        if _any_autocast_enabled():
            key = (*key, autocast_state())
        try:
            self._cache[key] = self._compile(training, requires_grad)
        except SymbolicShapeError:
            raise
        except Exception as error:  # noqa: BLE001 - every failure is the caller's to handle
            raise SymbolicShapeError(
                f"compiling the graph with symbolic sizes failed ({type(error).__name__}: "
                f"{error}); compile it with static sizes (its example inputs) instead"
            ) from error

    def _compile_for_call(self, training: bool, requires_grad: Sequence[bool]) -> Any:
        """The compiled graphs for a grad mode; None when symbolic sizes failed (go static);
        _RUN_EAGERLY when tracing met a mutation functionalization cannot express."""
        if self.shape_snapshot is None:
            try:
                return self._compile(training, requires_grad)
            except OverlappingWriteError:
                raise  # eager's own error, raised as eager raises it
            except UnsupportedMutationError as error:
                # NOTE: tracing ran on private copies of the inputs: nothing the caller
                # sees was written, and eager's ops give eager's result (or its error).
                warnings.warn(
                    f"running the graph's ops eagerly for these arguments: {error}",
                    EagerCallWarning,
                    stacklevel=3,
                )
                return _RUN_EAGERLY
        try:
            return self._compile(training, requires_grad)
        except AotAutogradError as error:
            _dynamic_log.info("compiling with symbolic sizes failed (%s); static sizes", error)
        except Exception as error:  # noqa: BLE001 - a compiler failing on symbolic sizes
            _dynamic_log.info("compiling with symbolic sizes failed (%r); static sizes", error)
        return None

    def _static_call(self, args: Sequence[Any]) -> Any:
        """Run a graph compiled for these arguments' static sizes (compiled once per sizes)."""
        # NOTE: a float input's value is part of the key: traced as static, its value is
        # read into the graph (checked at each call), so each value gets its own graph.
        key = (_metadata_key(args), *(float(args[i]) for i in sorted(self.float_inputs)))
        static = self._static.get(key)
        if static is None:
            self.static_compiles += 1
            _dynamic_log.info("compiling for the static sizes of call %d", self.static_compiles)
            # NOTE: no cache: its entries are keyed by the symbolic graph, not these sizes.
            config = dataclasses.replace(self.config, cache=None)
            static = self._static[key] = AotCallable(self.flat_fn, list(args), config)
        return static(*args)

    def _examples(self, requires_grad: Sequence[bool]) -> list[Any]:
        examples = list(self.example_inputs)
        for i, flag in enumerate(requires_grad):
            if isinstance(examples[i], torch.Tensor) and examples[i].requires_grad != flag:
                examples[i] = examples[i].detach().requires_grad_(flag)
        return examples

    def _compile(self, training: bool, requires_grad: Sequence[bool]) -> _Compiled:
        # NOTE: collections during the compile scan only what it allocates (see guards).
        with old_objects_frozen():
            return self._cached_or_compiled(training, requires_grad)

    def _cached_or_compiled(self, training: bool, requires_grad: Sequence[bool]) -> _Compiled:
        cache = self.config.cache
        if cache is None:
            return self._trace_and_compile(training, requires_grad, None)
        variant = (training, tuple(requires_grad), torch.is_grad_enabled(), autocast_state())
        parts = cache.lookup(variant)
        if parts is not None and (self.shape_snapshot is None) != (parts.assumptions is None):
            parts = None  # NOTE: a static entry for symbolic sizes (or back): never its key's
        if parts is None:
            return self._trace_and_compile(training, requires_grad, (cache, variant))
        # A cached compile: the run time around its graphs, nothing traced. With symbolic
        # sizes, what its tracing assumed of them is checked at every call, as after tracing.
        written = inputs_written_in_place(parts.forward, parts.program)
        if parts.backward is None:
            return _Compiled(
                parts.program, parts.forward, False, parts.assumptions, written_in_place=written
            )
        retraced = self._retraced_backward(requires_grad, variant, parts)
        specialize = _kept_specializations(
            _retraced_specializer(retraced, self.config), self.config.cache, variant,
            keep_none=False,
        )  # fmt: skip
        # NOTE: above, a None may come of this call's autocast state: not kept for later.
        backward = parts.backward
        if backward is BACKWARD_STORED_APART:  # stored on its own once compiled
            backward = self._cached_deferred_backward(retraced, variant)
        run = training_function(
            parts.program,
            parts.forward,
            backward,
            list(parts.dependencies or ()),
            specialize,
            parts.saved_strides,
            _saved_reader(lambda: retraced(False)),
        )
        deferred = backward if isinstance(backward, DeferredBackward) else None
        return _Compiled(
            parts.program, run, True, parts.assumptions, written_in_place=written, backward=deferred
        )

    def _retraced_backward(
        self, requires_grad: Sequence[bool], variant: tuple, parts: CompiledParts
    ) -> Callable[[bool], fx.GraphModule | None]:
        """The backward graph of cached graphs, which come without it, traced and
        partitioned again (no compile) at most once, on first need.

        The trace must match the cached graphs (same forward outputs, same tangents read
        by each grad) and run under their autocast state: `retraced(False)` gives None
        when this call's autocast state differs; `retraced(True)` sets the state for the
        trace. None too when the trace does not match.
        """
        config = self.config
        found: list[fx.GraphModule | None] = []
        restrided: list[bool] = []  # (see `retraced.restrided`)

        def retraced(set_autocast: bool) -> fx.GraphModule | None:
            if found:
                return found[0]
            if autocast_state() != variant[3] and not set_autocast:
                return None
            with _autocast_as(variant[3]):
                program = trace_program(
                    self.flat_fn,
                    self._examples(requires_grad),
                    decompositions=config.decompositions,
                    joint=True,
                    float_inputs=self.float_inputs,
                )
            partition = config.partition_fn or default_partition
            mark_mutated_primals(program.graph_module, program.mutated_inputs)
            _, backward = partition(
                program.graph_module, num_forward_outputs=program.num_forward_outputs
            )
            same = program.num_forward_outputs == parts.program.num_forward_outputs and tuple(
                tangent_dependencies(backward)
            ) == tuple(parts.dependencies or ())
            # the saved values in the strides the cached forward returns them in
            changed = changed_saved_strides(backward, parts.saved_strides or ())
            if same and changed:
                backward = with_saved_strides(backward, changed)
                same = backward is not None
                restrided.append(True)
            found.append(backward if same else None)
            return found[0]

        # whether the graph retraced takes the saved values in the cached forward's
        # strides (its compiler then keeps the gradients in eager's: see saved_layouts)
        retraced.restrided = restrided  # type: ignore[attr-defined]
        return retraced

    def _cached_deferred_backward(
        self, retraced: Callable[[bool], fx.GraphModule | None], variant: tuple
    ) -> DeferredBackward:
        """The full backward of cached graphs stored apart from them: from the cache
        (`lookup_backward` with no tangent absent), else traced again and compiled."""
        config = self.config
        compiler = compiler_in_this_context(config.bw_compiler or config.fw_compiler)

        def compile_again(_absent: frozenset[int]) -> Callable:
            backward = retraced(True)
            if backward is None:
                raise AotAutogradError(
                    "the backward graph of a cached compile traced again does not match "
                    "its forward graph; clear the ember cache (EMBER_CACHE_DIR) or set "
                    "EMBER_WARM_START=0 to compile afresh"
                )
            _log("backward graph (traced again)", backward, 0.0)
            compile = outputs_in_traced_strides(compiler) if retraced.restrided else compiler
            return compile(backward, _placeholder_values(backward))

        kept = _kept_specializations(compile_again, config.cache, variant, keep_none=False)
        return DeferredBackward(lambda: kept(frozenset()) or compile_again(frozenset()))

    def _trace_and_compile(
        self, training: bool, requires_grad: Sequence[bool], store: tuple | None
    ) -> _Compiled:
        config = self.config
        examples = self._examples(requires_grad)
        # trace: ATen level, functionalized; joint graph when training.
        start = time.perf_counter()
        program = trace_program(
            self.flat_fn,
            examples,
            decompositions=config.decompositions,
            joint=training,
            float_inputs=self.float_inputs,
        )
        name = "joint" if training else "inference"
        self.graphs[name] = program.graph_module
        if checks_on():
            verify_functional_graph(program.graph_module, f"trace ({name})")
        _log(f"{name} graph", program.graph_module, time.perf_counter() - start)
        if not training or not program.grad_inputs:
            compiler = config.inference_compiler or config.fw_compiler
            gm = program.graph_module
            if not training:
                mark_user_visible_outputs(gm, program)
            mark_input_mutations(gm, program)
            run = compiler(gm, _placeholder_values(gm))
            assumptions = self._assumptions(program)
            if store is not None:
                store[0].store(store[1], CompiledParts(program, run, assumptions=assumptions))
            written = inputs_written_in_place(run, program)
            if isinstance(run, fx.GraphModule):
                run = run.forward  # NOTE: skips nn.Module call machinery (hooks) per call
            return _Compiled(program, run, False, assumptions, None, written)
        # partition: forward (saving activations) and backward.
        start = time.perf_counter()
        partition = config.partition_fn or default_partition
        mark_mutated_primals(program.graph_module, program.mutated_inputs)
        forward, backward = partition(
            program.graph_module, num_forward_outputs=program.num_forward_outputs
        )
        self.graphs["forward"], self.graphs["backward"] = forward, backward
        if checks_on():
            verify_functional_graph(forward, "partition (forward)")
            verify_functional_graph(backward, "partition (backward)")
        seconds = time.perf_counter() - start
        _log("forward graph", forward, seconds)
        _log("backward graph", backward, seconds)
        # compile: the forward with the caller's compiler; the backward at its first use
        # (a step leaving some tangent None runs only the backward without them).
        dependencies = tangent_dependencies(backward)
        mark_input_mutations(forward, program)
        mark_saved_outputs(forward, program.num_forward_outputs)
        saves_aliases = _saves_inputs_or_outputs(forward, program.num_forward_outputs)
        compiled_forward = config.fw_compiler(forward, _placeholder_values(forward))
        # the backward against the layouts the compiled forward saves (see saved_layouts)
        restrided = with_saved_strides(
            backward,
            reported_saved_strides(compiled_forward, program.num_forward_outputs, backward),
        )
        # (compiled at its first use, maybe on autograd's thread: see compiler_in_this_context)
        bw_compiler = compiler_in_this_context(config.bw_compiler or config.fw_compiler)
        if restrided is not None:
            backward = self.graphs["backward"] = restrided
            _log("backward graph (saved values in the forward's layouts)", backward, 0.0)
            bw_compiler = outputs_in_traced_strides(bw_compiler)
        saved_strides = tuple(saved_strides_of(backward))
        specialize = _specializer(backward, bw_compiler)
        saved_reads = None
        if saves_aliases:  # (a copy now: the backward's compiler may change the graph)
            copied = _graph_copy(backward)
            saved_reads = _saved_reader(lambda: copied)
        if store is not None:
            specialize = _kept_specializations(specialize, *store, keep_none=True)
        compiled_backward = _deferred_backward(
            lambda: bw_compiler(backward, _placeholder_values(backward)), store
        )
        # wrap: an autograd.Function around the compiled pair.
        assumptions = self._assumptions(program)
        if store is not None:
            parts = CompiledParts(
                program,
                compiled_forward,
                compiled_backward,
                tuple(dependencies),
                saved_strides,
                assumptions,
            )
            store[0].store(store[1], parts)
        run = training_function(
            program,
            compiled_forward,
            compiled_backward,
            dependencies,
            specialize,
            saved_strides,
            saved_reads,
        )
        written = inputs_written_in_place(compiled_forward, program)
        return _Compiled(program, run, True, assumptions, None, written, compiled_backward)

    def _assumptions(self, program: TracedProgram) -> ShapeAssumptions | None:
        """What tracing assumed about the symbolic sizes, beyond the ShapeEnv's earlier state."""
        if self.shape_snapshot is None:
            return None
        assumptions = ShapeAssumptions.since(self.shape_snapshot, program.symbol_sources)
        if assumptions.conditions:
            _dynamic_log.info("tracing assumed %s; checked at every call", assumptions.describe())
        return assumptions


_dynamic_log = guards.artifact_logger("dynamic")
_aliasing_log = guards.artifact_logger("perf_hints")


def _specializer(backward: fx.GraphModule, compiler: Callable) -> Callable:
    """Compiles `backward` without the tangents a call leaves None (see `absent_tangents`)."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(backward.graph, {}))
    backward = fx.GraphModule(backward, graph)  # (the compiler may change the one it gets)

    def specialize(absent: frozenset[int]) -> Callable | None:
        gm = without_absent_tangents(backward, absent)
        if gm is None:
            return None
        _log(f"backward graph without tangents {sorted(absent)}", gm, 0.0)
        return compiler(gm, _placeholder_values(gm))

    return specialize


def _saved_reader(
    backward_graph: Callable[[], fx.GraphModule | None],
) -> Callable[[frozenset[int]], frozenset[int] | None]:
    """`saved_values_read` of the backward graph `backward_graph()` gives, copied at the
    first call (the compiler may change the one it gets); None (all read) without one."""
    copies: list[fx.GraphModule | None] = []

    def saved_reads(absent: frozenset[int]) -> frozenset[int] | None:
        if not copies:
            backward = backward_graph()
            copies.append(None if backward is None else _graph_copy(backward))
        return None if copies[0] is None else saved_values_read(copies[0], absent)

    return saved_reads


def _graph_copy(gm: fx.GraphModule) -> fx.GraphModule:
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return fx.GraphModule(gm, graph)


def _saves_inputs_or_outputs(forward: fx.GraphModule, num_forward_outputs: int) -> bool:
    """Whether the forward graph saves for the backward any of its inputs as they are,
    or any of its outputs or a view (the caller may write into those after the call)."""
    output = next(n for n in reversed(forward.graph.nodes) if n.op == "output")
    results = output.args[0]
    if not isinstance(results, (list, tuple)):
        return False
    outputs = {n for n in results[:num_forward_outputs] if isinstance(n, fx.Node)}
    return any(
        isinstance(n, fx.Node) and (n.op == "placeholder" or n in outputs or _is_view(n))
        for n in results[num_forward_outputs:]
    )


def _is_view(node: fx.Node) -> bool:
    """Whether `node` is an ATen view op's result (it may alias an output)."""
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(
        r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
    )


def _retraced_specializer(
    retraced: Callable[[bool], fx.GraphModule | None], config: AotConfig
) -> Callable:
    """`_specializer` for cached graphs: the first backward with a None tangent traces
    and partitions again (no compile) for it; where that trace is not the cached graphs'
    (another autocast state, other outputs), the full backward runs on zeros."""
    specializers: list[Callable | None] = []
    compiler = compiler_in_this_context(config.bw_compiler or config.fw_compiler)

    def specialize(absent: frozenset[int]) -> Callable | None:
        if not specializers:
            backward = retraced(False)
            restrided = getattr(retraced, "restrided", None)
            compile = outputs_in_traced_strides(compiler) if restrided else compiler
            specializers.append(None if backward is None else _specializer(backward, compile))
        return specializers[0](absent) if specializers[0] is not None else None

    return specialize


def _deferred_backward(compile: Callable[[], Callable], store: tuple | None) -> DeferredBackward:
    """The full backward compiled at its first use; with a cache (`store`: the cache and
    the variant), stored there on its own (`store_backward` with no tangent absent)."""
    if store is None or getattr(store[0], "store_backward", None) is None:
        return DeferredBackward(compile)
    cache, variant = store

    def compile_and_store() -> Callable:
        compiled = compile()
        cache.store_backward(variant, frozenset(), compiled)
        return compiled

    return DeferredBackward(compile_and_store)


@contextlib.contextmanager
def _autocast_as(state: tuple[tuple[str, torch.dtype], ...]) -> Iterator[None]:
    """Autocast on for exactly the (device type, dtype) pairs of `state` (`autocast_state`)."""
    if autocast_state() == state:
        yield
        return
    on = dict(state)
    with contextlib.ExitStack() as stack:
        for device in _AUTOCAST_DEVICE_TYPES:
            if device in on:
                stack.enter_context(torch.autocast(device, dtype=on[device]))
            elif torch.is_autocast_enabled(device):
                stack.enter_context(torch.autocast(device, enabled=False))
        if autocast_state() != state:
            raise AotAutogradError(
                f"could not set the autocast state {state} to trace a cached graph again; "
                "set EMBER_WARM_START=0 to compile afresh"
            )
        yield


def _kept_specializations(
    specialize: Callable, cache: Any, variant: tuple, *, keep_none: bool
) -> Callable:
    """`specialize`, asking `cache` first for the backward compiled without those tangents
    and giving it each one compiled (a cache without `lookup_backward` / `store_backward`:
    `specialize` itself). A cached compile then pays no trace for its first backward
    with a None tangent. `keep_none`: a None (no such backward: the full one runs) is
    kept too."""
    lookup = getattr(cache, "lookup_backward", None)
    store = getattr(cache, "store_backward", None)
    if lookup is None or store is None:
        return specialize

    def kept(absent: frozenset[int]) -> Callable | None:
        found = lookup(variant, absent)
        if found is not None:
            return found[0]
        compiled = specialize(absent)
        if compiled is not None or keep_none:
            store(variant, absent, compiled)
        return compiled

    return kept


def _assumptions_hold(compiled: _Compiled, args: Sequence[Any]) -> bool:
    return compiled.assumptions is None or compiled.assumptions.hold(args)


def _placeholder_values(gm: fx.GraphModule) -> list[Any]:
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


# -- parameters and buffers as inputs ---------------------------------------------------------


def _tensor_slots(module: nn.Module) -> tuple[list[torch.Tensor], list[list[tuple]]]:
    """Unique parameters and buffers of `module`, and every (submodule, kind, name) holding each."""
    tensors: list[torch.Tensor] = []
    slots: list[list[tuple]] = []
    index: dict[int, int] = {}
    for prefix, sub in module.named_modules(remove_duplicate=False):
        del prefix
        for kind in ("_parameters", "_buffers"):
            for name, value in getattr(sub, kind).items():
                if value is None:
                    continue
                if id(value) not in index:
                    index[id(value)] = len(tensors)
                    tensors.append(value)
                    slots.append([])
                if (sub, kind, name) not in slots[index[id(value)]]:
                    slots[index[id(value)]].append((sub, kind, name))
    return tensors, slots


@contextlib.contextmanager
def _swapped(slots: list[list[tuple]], values: Sequence[torch.Tensor]) -> Iterator[None]:
    """Temporarily make the module read `values` for its parameters and buffers."""
    saved = []
    for holders, value in zip(slots, values):
        for sub, kind, name in holders:
            saved.append((sub, kind, name, getattr(sub, kind)[name]))
            getattr(sub, kind)[name] = value
    try:
        yield
    finally:
        for sub, kind, name, original in saved:
            getattr(sub, kind)[name] = original


def _lifted(module: nn.Module, call: Callable) -> tuple[Callable, list[torch.Tensor], list]:
    """`call` as a function of (*parameters_and_buffers, *inputs)."""
    tensors, slots = _tensor_slots(module)
    count = len(tensors)

    def flat_fn(*flat: Any) -> Any:
        with _swapped(slots, flat[:count]):
            return call(*flat[count:])

    return flat_fn, tensors, slots


_SAVED_HOOKS_SWITCHES = (
    torch._C._autograd._saved_tensors_hooks_disable,
    torch._C._autograd._saved_tensors_hooks_enable,
)


def _drop_saved_hooks_blocks(gm: fx.GraphModule) -> bool:
    """Drop the graph's `disable_saved_tensors_hooks` blocks where the graph ends with
    them left (its last switch an enable): they refuse only pushing saved-tensor hooks,
    which no op of a graph does, while the trace runs under hooks of its own (torch
    refuses a disable then). Mutates `gm`; whether it dropped any. A graph leaving the
    hooks disabled keeps its switches (and fails while traced)."""
    disable, enable = _SAVED_HOOKS_SWITCHES
    switches = [
        n for n in gm.graph.nodes if n.op == "call_function" and n.target in (disable, enable)
    ]
    if not switches or switches[-1].target is not enable or any(n.users for n in switches):
        return False
    for node in switches:
        gm.graph.erase_node(node)
    gm.recompile()
    return True


def _rewritten(gm: fx.GraphModule) -> Callable:
    """What the traced program runs for `gm`: where a rewrite before tracing applies
    (dropouts that drop nothing return their input, CUDA attention masks made dense),
    the rewritten code of a copy of its graph, run on `gm`'s own attributes; else `gm`.
    (A `disable_saved_tensors_hooks` block in the graph is dropped: see
    `_drop_saved_hooks_blocks`.) A graph with checkpoint regions runs node by node,
    so the ATen nodes traced carry their regions (see checkpoint_regions).

    NOTE: `gm` is left as its caller gave it. Capture keeps that graph as its record for
    later processes, and the warm-start cache keyed its entry by that graph's code: a
    rewrite made in place would have the record hold another graph than the one the
    entry was keyed by, and a later process installing the record would miss the entry.
    The rewritten code is called as `gm`'s forward (its hooks, which a captured graph
    has none of, are not run).
    """
    nodes = gm.graph.nodes
    if not any(
        identity_source(n) is not None or needs_dense_mask(n) or n.target in _SAVED_HOOKS_SWITCHES
        for n in nodes
    ):
        return running_regions(gm) if has_regions(gm.graph) else gm
    private = fx.GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    dropouts = identity_dropouts(private)
    masks = dense_attention_masks(private)
    if masks:
        guards.artifact_logger("perf_hints").info(
            "attention masks with a broadcast last dim made contiguous for fused attention"
        )
    switches = _drop_saved_hooks_blocks(private)
    if not dropouts and not masks and not switches:
        return running_regions(gm) if has_regions(gm.graph) else gm
    if has_regions(private.graph):
        return running_regions(gm, private.graph)
    return functools.partial(type(private).forward, gm)


# -- entry points ------------------------------------------------------------------------------


def aot_graph(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    inference_compiler: Compiler | None = None,
    decompositions: Mapping | None = None,
    partition_fn: PartitionFn | None = None,
    cache: CompiledGraphCache | None = None,
) -> Callable:
    """Compile a captured Torch-level FX graph; the backend-facing entry point (stable).

    >>> compiled = aot_graph(gm, example_inputs, fw_compiler=lambda g, ex: g)
    >>> outputs = compiled(*inputs)

    Parameters and buffers held by `gm` become graph inputs, so their grads
    flow and their in-place updates (BatchNorm statistics) are kept.
    Compilers receive functional ATen graphs with meta["val"] on every node.

    Symbolic sizes: when `gm`'s placeholders carry symbolic meta["val"]s (fakes
    with SymInt sizes over a `guards.ShapeEnv`, SymInt inputs), as capture gives
    a backend declaring `supports_dynamic_shapes`, the graphs are traced on those
    values, once for all sizes; the compilers get graphs with SymInt inputs and
    symbolic meta["val"]s, and are called with ints for them. The graphs for the
    current grad mode are compiled before this returns; a failure raises
    `SymbolicShapeError` (catch it to compile with static sizes).

    `cache` (see `aot_autograd.portable`) is asked for each grad mode's compiled
    graphs before tracing, and given them after compiling (with symbolic sizes,
    with what tracing assumed of them: `CompiledParts.assumptions`).
    """
    config = AotConfig(
        fw_compiler, bw_compiler, inference_compiler, decompositions, partition_fn, cache
    )
    flat_fn, tensors, slots = _lifted(gm, _rewritten(gm))
    if has_subclass_inputs([*tensors, *example_inputs]) or holds_subclass_values(gm):
        symbolic = is_symbolic(_placeholder_values(gm)) or bool(float_inputs_of(gm))
        return _subclass_graph(flat_fn, tensors, slots, example_inputs, config, symbolic)
    values = _placeholder_values(gm)
    floats = {len(tensors) + i: v for i, v in float_inputs_of(gm).items()}
    symbolic_floats = any(v.node.expr.is_Symbol for v in floats.values())
    if len(values) == len(example_inputs) and (is_symbolic(values) or symbolic_floats):
        env = shape_env_of([*values, *floats.values()])
        compiled = AotCallable(
            flat_fn,
            [*tensors, *values],
            config,
            shape_snapshot=ShapeSnapshot.of(env),
            float_inputs=floats,
        )
        compiled.compile_symbolic([*tensors, *values])
    else:
        compiled = AotCallable(flat_fn, [*tensors, *example_inputs], config)

    if slots:

        def run(*args: Any) -> Any:
            current = [getattr(holders[0][0], holders[0][1])[holders[0][2]] for holders in slots]
            return compiled(*current, *args)

    else:  # a graph holding no tensors of its own (a region's piece): no list to build

        def run(*args: Any) -> Any:
            return compiled(*args)

    run.aot = compiled  # type: ignore[attr-defined]
    return run


def _subclass_graph(
    flat_fn: Callable,
    tensors: list,
    slots: list,
    example_inputs: Sequence[Any],
    config: AotConfig,
    symbolic: bool,
) -> Callable:
    """aot_graph of a graph taking traceable tensor subclasses (see subclass_program);
    where that path refuses the graph, its own operations run (eager's)."""
    try:
        if symbolic:
            # NOTE: the example inputs are one call's; the graph serves every size its
            # guards accept, which a trace on those examples would specialize
            raise SubclassProgramError("symbolic sizes with tensor subclass values")
        compiled = SubclassAotCallable(
            flat_fn,
            [*tensors, *example_inputs],
            config.fw_compiler,
            config.bw_compiler,
            config.inference_compiler,
            config.decompositions,
            config.partition_fn,
        )
    except SubclassProgramError as error:
        _subclass_log.info("running the graph's operations eagerly: %s", error)
        compiled = flat_fn
    state = {"eager": False}

    def call(*flat: Any) -> Any:
        if state["eager"]:
            return flat_fn(*flat)
        try:
            return compiled(*flat)
        except SubclassProgramError as error:
            # NOTE: raised while tracing, before anything ran: eager's operations give
            # eager's result, for this call and the later ones
            _subclass_log.info("running the graph's operations eagerly: %s", error)
            state["eager"] = True
            return flat_fn(*flat)

    def run(*args: Any) -> Any:
        current = [getattr(holders[0][0], holders[0][1])[holders[0][2]] for holders in slots]
        return call(*current, *args)

    run.aot = compiled  # type: ignore[attr-defined]
    return run


_subclass_log = guards.artifact_logger("aot_graphs")
_LEAF_TYPES = (torch.Tensor, int, float, bool, type(None))
_INFERENCE_KEY = (False, ())
_MISSING = object()
_RUN_EAGERLY = object()  # a cache entry: this grad mode's calls run the graph's ops eagerly


def _metadata_key(flat_args: Sequence[Any]) -> tuple:
    key = []
    for a in flat_args:
        if isinstance(a, torch.Tensor):
            key.append((a.dtype, a.device, tuple(a.shape), tuple(a.stride()), a.requires_grad))
        else:
            try:
                hash(a)
                key.append((type(a), a))
            except TypeError:
                key.append((type(a), id(a)))
    return (torch.is_grad_enabled(), autocast_state(), *key)


_any_autocast_enabled = torch._C._is_any_autocast_enabled
_AUTOCAST_DEVICE_TYPES = tuple(
    getattr(torch._C, "_autocast_supported_devices", lambda: ["cpu", "cuda"])()
)


def autocast_state() -> tuple[tuple[str, torch.dtype], ...]:
    """(device type, dtype) for each device type whose autocast is on; () when none is.

    Tracing records the casts autocast makes, so a graph holds for the autocast
    state it was traced under: the state is part of every compiled-graph key.
    """
    if not _any_autocast_enabled():
        return ()
    return tuple(
        (device, torch.get_autocast_dtype(device))
        for device in _AUTOCAST_DEVICE_TYPES
        if torch.is_autocast_enabled(device)
    )


def aot_function(
    fn: Callable,
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    *,
    inference_compiler: Compiler | None = None,
    decompositions: Mapping | None = None,
    partition_fn: PartitionFn | None = None,
) -> Callable:
    """`fn` traced and compiled on first call, again for new input shapes/dtypes (stable).

    >>> f = aot_function(lambda x, y: (x * y).sin(), fw_compiler=lambda g, ex: g)
    >>> f(torch.randn(3, requires_grad=True), torch.randn(3)).sum().backward()
    """
    config = AotConfig(fw_compiler, bw_compiler, inference_compiler, decompositions, partition_fn)
    cache: dict[tuple, AotCallable] = {}

    def run(*args: Any, **kwargs: Any) -> Any:
        if not kwargs and all(isinstance(a, _LEAF_TYPES) for a in args):
            flat, spec = list(args), len(args)  # fast path: positional tensors and scalars
        else:
            flat, spec = pytree.tree_flatten((args, kwargs))
        key = (spec, _metadata_key(flat))
        compiled = cache.get(key)
        if compiled is None:

            def flat_fn(*flat_values: Any, spec: Any = spec) -> Any:
                if isinstance(spec, int):
                    return fn(*flat_values)
                call_args, call_kwargs = pytree.tree_unflatten(list(flat_values), spec)
                return fn(*call_args, **call_kwargs)

            compiled = cache[key] = AotCallable(flat_fn, flat, config)
        run.last = compiled  # type: ignore[attr-defined]
        return compiled(*flat)

    return run


class AotModule(nn.Module):
    """`module` with its forward traced and compiled by aot_function; parameters stay shared."""

    def __init__(self, module: nn.Module, config: AotConfig) -> None:
        super().__init__()
        self.orig_module = module
        _, self._slots = _tensor_slots(module)
        slots = self._slots

        def call(tensors: list, args: tuple, kwargs: dict) -> Any:
            with _swapped(slots, tensors):
                return module(*args, **kwargs)

        self._function = aot_function(
            call,
            config.fw_compiler,
            config.bw_compiler,
            inference_compiler=config.inference_compiler,
            decompositions=config.decompositions,
            partition_fn=config.partition_fn,
        )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        current = [getattr(h[0][0], h[0][1])[h[0][2]] for h in self._slots]
        return self._function(current, args, kwargs)


def aot_module(
    module: nn.Module,
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    *,
    inference_compiler: Compiler | None = None,
    decompositions: Mapping | None = None,
    partition_fn: PartitionFn | None = None,
) -> nn.Module:
    """`module` compiled ahead of time; parameters and buffers are graph inputs (stable).

    >>> m = aot_module(torch.nn.Linear(4, 2), fw_compiler=lambda g, ex: g)
    >>> m(torch.randn(3, 4)).sum().backward()
    """
    config = AotConfig(fw_compiler, bw_compiler, inference_compiler, decompositions, partition_fn)
    return AotModule(module, config)
