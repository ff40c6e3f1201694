"""The run-time entry of a compiled callable: stance, cache lookup, capture on a miss.

    compiled = optimize(fn, backend=backend)
    compiled(*args)   # 1. stance and `disable` regions may run fn eagerly
                      # 2. each cached entry's guard function runs on the frame's locals
                      #    (the entry that passed last first, then the others oldest
                      #    first); the first that passes runs its entry code
                      # 3. on a miss: capture, hand the graph to the backend, cache, run

Past `recompile_limit` entries a call no entry accepts runs eagerly, logged on the
`recompiles` artifact. A frame capture cannot handle runs eagerly under the guards
capture recorded up to the failure, so it is captured again when they change; it
warns once (fallbacks.EagerFallbackWarning), or raises Unsupported under fullgraph=True.
"""

from __future__ import annotations

import dataclasses
import types
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dynamo_capture import compile_trace
from dynamo_capture.bound_locals import read_before_written
from dynamo_capture.branches import BranchStage, breaks_inside_loop, plan_branch, root_function
from dynamo_capture.break_callees import (
    LocalFunctionRoute,
    Shadow,
    ShadowedPart,
    context_decorated_part,
    frame_shadows,
    hooks_run_eagerly,
    module_call_shadows,
    module_hooks_hidden,
    partialmethod_shadows,
    shadows_for,
)
from dynamo_capture.bytecode import line_at
from dynamo_capture.capture import CaptureArtifacts, CompiledEntry, capture_frame, compile_entry
from dynamo_capture.deferred_compile import DeferredCompile
from dynamo_capture.errors import (
    BackendCompilerFailed,
    RecompileError,
    RegionsCalledOnce,
    TensorHookEscapes,
    Unsupported,
)
from dynamo_capture.fallbacks import EagerFallback, forget_warnings, warn_eager_frame
from dynamo_capture.frame_target import FrameTarget, _module_call, frame_target
from dynamo_capture.output_graph import CaptureContext
from dynamo_capture.registry import eager_only_depth
from dynamo_capture.resume import (
    ITERATOR,
    STACK_LOCAL,
    LoopStage,
    SplitPlan,
    called_globals,
    cell_locals,
    comprehension_callees,
    describe_split,
    first_part_arity,
    first_part_values,
    is_end,
    part_locals,
    plan_rest_eager,
    plan_split,
    segment_function,
)
from dynamo_capture.stance import current_stance
from dynamo_capture.state import is_compiling
from dynamo_capture.wrapper_modules import (
    active_wrapper_backend,
    wrapped_attribute,
    wrapped_backend,
    wrapped_module,
)
from guards import (
    CompiledGuards,
    ConstraintViolationError,
    SizeHistory,
    artifact_enabled,
    artifact_logger,
    marks_of,
)
from guards.garbage_collection import old_objects_frozen
from guards.sources import LocalSource

__all__ = ["CompiledCallable", "optimize", "reset"]

Backend = Callable[..., Any]
LOOP_BREAKS = ("eager_frame", "split")  # CompiledCallable's `loop_breaks` choices
_live: weakref.WeakSet[CompiledCallable] = weakref.WeakSet()


_FUNCTION_ATTRIBUTES = frozenset(
    {"__code__", "__defaults__", "__kwdefaults__", "__globals__", "__closure__", "__name__",
     "__qualname__", "__annotations__"}
)  # fmt: skip


class CompiledCallable:
    """A callable compiled by capture; holds its cache of compiled entries.

    `entries` are the cache (newest last); `artifacts` lists the readable
    artifacts of every compile (graph code, guard code, entry code, reasons).

    `loop_breaks` says what a graph break inside a loop of the frame does (see
    branches.breaks_inside_loop for which breaks count as inside one): "eager_frame"
    (the default, as torch.compile) runs the frame eagerly, the user functions,
    methods and submodules it calls compiled as frames of their own; "split" compiles
    around the loop and, for a `for` loop, the body as a part per item.
    """

    def __init__(
        self,
        target: Callable[..., Any],
        *,
        backend: Backend,
        fullgraph: bool = False,
        dynamic: bool | None = None,
        guard_filter_fn: Callable[..., Any] | None = None,
        recompile_limit: int = 8,
        resolve_backend: Callable[[Any], Backend] | None = None,
        loop_breaks: str = "eager_frame",
        capture_cache: Any = None,
        defer_recompiles: bool = False,
    ) -> None:
        if loop_breaks not in LOOP_BREAKS:
            raise ValueError(
                f"loop_breaks={loop_breaks!r} is not one of {', '.join(map(repr, LOOP_BREAKS))}"
            )
        self.target = target
        self.loop_breaks = loop_breaks
        self.backend = backend
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.guard_filter_fn = guard_filter_fn
        self.recompile_limit = recompile_limit
        self.resolve_backend = resolve_backend
        # Capture records kept across processes (see `_installed`); None: capture always.
        self.capture_cache = capture_cache
        # Fingerprints of the capture records this process kept for this function while its
        # entries stand: their guards are those entries' guards, which just failed at a
        # miss, so `install` skips them rather than decode them again (cleared whenever an
        # entry goes).
        self.kept_records: set[str] = set()
        # A static entry made after the frame's first: its graph runs as captured on its
        # first call, the backend compiles it at its second (see deferred_compile)
        self.defer_recompiles = defer_recompiles
        self.calls = 0
        self.entries: list[CompiledEntry] = []
        self._last_hit = 0  # index in `entries` of the entry that passed last
        self.artifacts: list[CaptureArtifacts] = []
        self.graph_breaks: list[Unsupported] = []
        self.eager_frames: list[EagerFallback] = []  # frames run eagerly (all levels)
        self.parts: list[CompiledCallable] = []  # compiled parts of split frames (all levels)
        self._callees: dict[tuple[Any, ...], Any] = {}  # callee frames, shared
        self._splits: dict[tuple[Any, ...], list[Callable[..., Any]]] = {}
        self._frame: FrameTarget | None = None
        self._limit_logged = False
        self._sizes = SizeHistory()  # input sizes over compiles (automatic dynamic)
        self._static_backend = False  # the backend refused a symbolic graph: capture static
        self._specialize_floats = False  # the backend refused symbolic floats: make constants
        self._transform_nodes = True  # False: the backend refused torch.func / torch.cond nodes
        self._batching_nodes = True  # False: the backend refused vmap's functorch calls
        self._autograd_function_nodes = True  # False: the backend refused Fn.apply nodes
        self._tensor_hook_nodes = True  # False: a tensor hooked in the graph left it
        # nested_compile_region functions a graph called once: traced in place
        self._inline_regions: frozenset[Any] = frozenset()
        # NOTE: modules the frame reads (arguments, globals, attributes, closures) are
        # guarded on structure, not identity, as torch.compile's inline_inbuilt_nn_modules:
        # `f(Model(), x)` compiles once, the module's parameters graph inputs read at
        # call time. The compiled module itself (FrameTarget.bound_locals) keeps its
        # identity and module-tree guards. Its records hold the guards its capture made.
        self.modules_by_structure = True
        self.records_by_structure = True
        self.parent: CompiledCallable | None = None  # the split frame this is a part of
        # a capture of the whole frame found no operation: the code runs eagerly from then
        # on, every call (`_skips_code`)
        self.code_skipped = False
        # a frame of the user's code (a function, a resume function), not a segment of one
        # cut out by a split (the code before a break, a loop body): only those are skipped
        self.frame_of_its_own = True
        self.compile_id = ""  # of the newest compile (compile_trace)
        # a module whose own hooks, when it has some, run eagerly around its compiled frame
        self._module_target = isinstance(target, torch.nn.Module)
        _live.add(self)

    def __getattr__(self, name: str) -> Any:
        # NOTE: a compiled callable stands in for its function in a frame run eagerly
        # (break_callees); code there may read the function's own attributes
        if name in _FUNCTION_ATTRIBUTES:
            return getattr(self.__dict__["target"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def __ember_capture_target__(self) -> Callable[..., Any]:
        """What capture inlines when this compiled callable is called from captured code."""
        return self.target

    @property
    def frame(self) -> FrameTarget:
        if self._frame is None:
            self._frame = frame_target(self.target)
            if self.modules_by_structure:
                self._frame = dataclasses.replace(self._frame, modules_by_structure=True)
        return self._frame

    @property
    def last_artifacts(self) -> CaptureArtifacts | None:
        """The artifacts of the most recent compile, or None before the first."""
        return self.artifacts[-1] if self.artifacts else None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # NOTE: a graph that raises inside a torch.func transform it traced (a random op
        # under vmap's randomness="error") leaves functorch's levels open: every later
        # operation would run batched. As torch.compile, the depth of functorch's layer
        # stack on entry is restored on the way out.
        depth = _functorch_depth()
        try:
            return self._call(*args, **kwargs)
        finally:
            if _functorch_depth() != depth:
                torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(depth)

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        stance = current_stance()
        if stance.name == "force_eager" or eager_only_depth() > 0 or is_compiling():
            return self.target(*args, **kwargs)
        if stance.name == "eager_then_compile" and self.calls == 1:
            self._observe_first_call(args, kwargs)
            return self.target(*args, **kwargs)
        if self.code_skipped:
            return self.target(*args, **kwargs)
        if stance.name == "aot_eager_then_compile" and self.calls == 1:
            self._observe_first_call(args, kwargs)
            return self._run_once_with_aot_eager(args, kwargs)
        if self._module_target and _own_hooks(self.target) and hooks_run_eagerly(self.target):
            if not _global_hooks():  # else an entry of its own (_hooked_module_entry)
                return self._call_with_hooks(args, kwargs)
        frame = self.frame
        f_locals = frame.bind(args, kwargs)
        f_globals = frame.globals
        if self.parent is not None and self.frame_of_its_own and not self._tensor_related(f_locals):
            # NOTE: as torch.compile, a frame other than the compiled function's own (a
            # resume function, a function a frame run eagerly calls) that holds no
            # tensor, module or array in its locals, and names no torch or NumPy module
            # among its globals, is not compiled: it runs eagerly, its own calls compiled
            return self._run_tensor_free(args, kwargs, f_locals)
        entries = self.entries
        if stance.skip_guard_eval_unsafe and len(entries) == 1:
            return self._run(entries[0], f_locals, f_globals, args, kwargs, checked=False)
        # NOTE: the entry that passed last is checked first (as torch's cache moves a hit
        # to the front): a decode step after its prefill entries, the steady shape after
        # a warm-up one, skip the guard functions of entries they do not use. Any entry
        # whose guards pass was compiled for these inputs, so the order of the checks
        # only decides which of two such entries runs.
        last = self._last_hit
        if last < len(entries) and entries[last].check(f_locals, f_globals):
            return self._hit(entries[last], f_locals, f_globals, args, kwargs)
        for index, entry in enumerate(entries):
            if index != last and entry.check(f_locals, f_globals):
                self._last_hit = index
                return self._hit(entry, f_locals, f_globals, args, kwargs)
        if entries:
            eager = self._on_recompile(stance.name, f_locals, f_globals)
            if eager:
                return self.target(*args, **kwargs)
        # NOTE: as while compiling, collections scan only what installing allocates (a
        # full collection of a process holding a model costs more than the install).
        with old_objects_frozen():
            entry = self._installed(stance, f_locals, f_globals)
        if entry is not None:
            self.entries.append(entry)
            self._last_hit = len(self.entries) - 1
            return self._run(entry, f_locals, f_globals, args, kwargs, checked=False)
        with compile_trace.frame_compile(self), old_objects_frozen():
            entry = self._compile(f_locals, args, kwargs, stance)
            entry.artifacts.frame_name = self.frame.name
            entry.artifacts.compile_id = self.compile_id
            compile_trace.note_entry(self, entry)
        self.entries.append(entry)
        self._last_hit = len(self.entries) - 1
        return self._run(entry, f_locals, f_globals, args, kwargs, checked=False)

    def _tensor_related(self, f_locals: dict[str, Any]) -> bool:
        """Whether the frame this call runs holds something torch.compile compiles a frame
        for (`tensor_related_frame`)."""
        function = self.frame.function
        if not isinstance(function, types.FunctionType):
            return True
        # the frame's free variables are among its locals too, as a frame's f_locals
        # shows them at its start
        code = function.__code__
        cells = zip(code.co_freevars, function.__closure__ or (), strict=False)
        free = {name: cell for name, cell in cells if name not in f_locals}
        return tensor_related_frame(code, {**f_locals, **free}, function.__globals__)

    def _run_tensor_free(self, args: Any, kwargs: Any, f_locals: dict[str, Any]) -> Any:
        """The frame run eagerly, the user functions, methods and modules it calls compiled
        as frames of their own (break_callees.frame_shadows)."""
        shadows = frame_shadows(self.frame.function, f_locals, self._callee_part)
        if shadows:
            return ShadowedPart(self.target, shadows)(*args, **kwargs)
        return self.target(*args, **kwargs)

    def _hit(
        self, entry: CompiledEntry, f_locals: Any, f_globals: Any, args: Any, kwargs: Any
    ) -> Any:
        """Run `entry`, whose guards passed on these locals just now."""
        if type(entry.compiled) is DeferredCompile and entry.compiled.pending:
            entry = self._instead_of_deferred(entry, f_locals, f_globals)
        entry.hits += 1
        if not entry.hits & (entry.hits - 1):  # the 1st, 2nd, 4th... hit: traced
            compile_trace.note_hit(self, entry)
        return self._run(entry, f_locals, f_globals, args, kwargs)

    def _defers(self, frame: Any) -> bool:
        """Whether the backend compiles `frame`'s entry at its second call (its first runs
        the graph as captured): a static graph of a frame that has entries already,
        where the backend has no fallback that needs its failure now (function
        transforms, autograd.Function nodes: captured again without them)."""
        return (
            self.defer_recompiles
            and bool(self.entries)
            and not frame.ctx.symbolic
            and not frame.ctx.symbolic_float_inputs
            and not (self._transform_nodes and frame.ctx.transform_nodes_made)
            and not (self._batching_nodes and frame.ctx.batching_nodes_made)
            and not (self._autograd_function_nodes and frame.ctx.autograd_function_nodes_made)
        )

    def _instead_of_deferred(
        self, entry: CompiledEntry, f_locals: Any, f_globals: Any
    ) -> CompiledEntry:
        """The entry to run where `entry`, not compiled yet (deferred_compile), passed: an
        other entry whose guards pass as well, `entry` then dropped uncompiled (a static
        first decode step the symbolic steps after it cover); else `entry` itself."""
        for other in self.entries:
            if other is entry or other.eager or not other.check(f_locals, f_globals):
                continue
            self.entries.remove(entry)
            self.kept_records.clear()
            entry.compiled.discard()
            self._last_hit = self.entries.index(other)
            if artifact_enabled("recompiles"):
                artifact_logger("recompiles").info(
                    "%s: an entry compiled on its second call was dropped uncompiled: an "
                    "other entry covers its inputs",
                    self.frame.name,
                )
            return other
        return entry

    def _run(
        self,
        entry: CompiledEntry,
        f_locals: Any,
        f_globals: Any,
        args: Any,
        kwargs: Any,
        checked: bool = True,
    ) -> Any:
        """Run `entry`; `checked`: its guards passed on these locals just now."""
        if entry.eager:
            shadows = entry.shadows if entry.call_shadows is None else entry.call_shadows()
            if shadows:
                return ShadowedPart(self.target, shadows)(*args, **kwargs)
            return self.target(*args, **kwargs)
        if not checked and entry.run_unchecked is not None:
            return entry.run_unchecked(f_locals, f_globals)
        return entry.run(f_locals, f_globals)

    def _observe_first_call(self, args: Any, kwargs: Any) -> None:
        """Tell automatic dynamic the arguments of a first call the stance runs without
        compiling (eager_then_compile): the compile of the second call makes symbolic the
        tensor sizes and int arguments that differ between the two calls at once, as
        torch.compile compares the two calls' inputs, instead of compiling static and
        again."""
        if self.dynamic is not None or wrapped_module(self.target) is not None:
            return
        try:
            f_locals = self.frame.bind(args, kwargs)
        except TypeError:
            return  # the call itself raises, eagerly
        for name, value in f_locals.items():
            source = LocalSource(name)
            if type(value) is torch.Tensor:
                self._sizes.observe(source, value)
            elif type(value) is int:  # a float that changes stays a constant, as in torch
                self._sizes.observe_int(source, value)

    def _run_once_with_aot_eager(self, args: Any, kwargs: Any) -> Any:
        """The first call under aot_eager_then_compile: the aot_eager backend, nothing cached."""
        if self.resolve_backend is None:
            return self.target(*args, **kwargs)
        f_locals = self.frame.bind(args, kwargs)
        try:
            frame = capture_frame(self.frame, f_locals)
        except Unsupported:
            return self.target(*args, **kwargs)
        entry = compile_entry(frame, self.resolve_backend("aot_eager"))
        return self._run(entry, f_locals, self.frame.globals, args, kwargs, checked=False)

    def _on_recompile(
        self, stance: str, f_locals: dict[str, Any], f_globals: dict[str, Any]
    ) -> bool:
        """Log (or refuse) a recompile; True means: run eagerly instead.

        The log names the guard each cached entry failed, oldest entry first. Past the
        recompile limit, or under eager_on_recompile, the miss costs nothing more than
        the guard checks already run: the reasons are worked out only to be logged
        (once at the limit, when the recompiles log is on, or while tracing).
        """
        name = self.frame.name
        if stance == "fail_on_recompile":
            raise RecompileError(
                f"{name} needs a recompile under stance 'fail_on_recompile': "
                f"{self.why_entries_failed(f_locals, f_globals)}. "
                "Call it with inputs like the ones it was compiled for, or change the stance."
            )
        if stance == "eager_on_recompile":
            return True
        found: list = []

        def failures() -> list:  # worked out once, and only when something reads them
            if not found:
                found.append(compile_trace.entry_failures(self, f_locals, f_globals))
            return found[0]

        if len(self.entries) >= self.recompile_limit:
            if not self._limit_logged:
                compile_trace.note_recompile(self, failures(), limit_hit=True)
                artifact_logger("recompiles").warning(
                    "%s", compile_trace.limit_message(name, self.recompile_limit, failures())
                )
                self._limit_logged = True
            return True
        if compile_trace.tracing():
            compile_trace.note_recompile(self, failures(), limit_hit=False)
        if artifact_enabled("recompiles"):
            artifact_logger("recompiles").info(
                "%s", compile_trace.recompile_message(name, failures())
            )
        return False

    def why_failed(self, f_locals: dict[str, Any], f_globals: dict[str, Any]) -> str:
        """Why the newest cache entry's guards reject these locals."""
        if not self.entries:
            return "no compiled entry yet"
        entry = self.entries[-1]
        return entry.guards.why_failed(f_locals, f_globals) or "guards pass"

    def why_entries_failed(self, f_locals: dict[str, Any], f_globals: dict[str, Any]) -> str:
        """Why each cache entry's guards reject these locals, newest first (as torch's
        recompile log): the entry a call was meant for names the guard that differs."""
        if len(self.entries) <= 1:
            return self.why_failed(f_locals, f_globals)
        reasons = [
            f"entry {index}: {entry.guards.why_failed(f_locals, f_globals) or 'guards pass'}"
            for index, entry in reversed(list(enumerate(self.entries)))
        ]
        return "; ".join(reasons)

    def _backend_for(self, stance: Any) -> Backend:
        if stance.force_backend is not None:
            if callable(stance.force_backend):
                return stance.force_backend
            if self.resolve_backend is not None:
                return self.resolve_backend(stance.force_backend)
        return self.backend

    def _compile(
        self, f_locals: dict[str, Any], args: Any, kwargs: Any, stance: Any
    ) -> CompiledEntry:
        inner = wrapped_module(self.target)
        if inner is not None:
            return self._wrapper_entry(inner)
        if hooks_run_eagerly(self.target):
            return self._hooked_module_entry(self.target)
        contexts: list[CaptureContext] = []
        backend = active_wrapper_backend(self._backend_for(stance))
        try:
            if not takes_function_transforms(backend):
                self._transform_nodes = False
            if not takes_batching_nodes(backend):
                self._batching_nodes = False
            frame = self._capture(f_locals, contexts, takes_float_inputs(backend))
            frame.ctx.check_marked_dynamic()
        except ConstraintViolationError:
            raise  # an input outside its mark_dynamic range: the caller's error, as in torch
        except TensorHookEscapes:
            self._tensor_hook_nodes = False  # Tensor.register_hook runs eagerly from now on
            return self._compile(f_locals, args, kwargs, stance)
        except RegionsCalledOnce as once:
            self._inline_regions = once.codes  # traced in place from now on
            return self._compile(f_locals, args, kwargs, stance)
        except Unsupported as error:
            if self.fullgraph:
                raise
            entry = self._break_entry(error, contexts, f_locals)
            if self._storable(stance):
                self.capture_cache.store_break(self, contexts, error)
            return entry
        except Exception as error:
            unsupported = Unsupported(f"capture failed with {type(error).__name__}: {error}")
            if self.fullgraph:
                raise unsupported from error
            return self._eager_entry(unsupported, contexts)
        try:
            entry = self._symbolic_entry(frame, backend, f_locals)
            if entry is None:
                defer = self._defers(frame)
                entry = compile_entry(frame, backend, self.guard_filter_fn, defer=defer)
        except BackendCompilerFailed as error:
            transforms = self._transform_nodes and frame.ctx.transform_nodes_made
            batching = self._batching_nodes and frame.ctx.batching_nodes_made
            applies = self._autograd_function_nodes and frame.ctx.autograd_function_nodes_made
            if not (transforms or batching or applies):
                raise
            # a backend that cannot compile torch.func / torch.cond nodes (vmap's
            # functorch calls, Fn.apply nodes): the graph breaks at those calls instead,
            # and they run eagerly
            if transforms:
                self._transform_nodes = False
            elif batching:
                self._batching_nodes = False
            else:
                self._autograd_function_nodes = False
            if artifact_enabled("graph_breaks"):
                artifact_logger("graph_breaks").info(
                    "%s: function transforms run eagerly for this backend (%s)",
                    self.frame.name,
                    error,
                )
            return self._compile(f_locals, args, kwargs, stance)
        self.artifacts.append(entry.artifacts)
        self.code_skipped = self._skips_code(frame, f_locals)
        # NOTE: the graph of a symbolic capture the backend refused was captured again
        # statically for the entry: only the graph the entry runs is kept
        if self._storable(stance) and entry.graph_module is frame.graph_module:
            self.capture_cache.store(self, frame)
        if artifact_enabled("graph"):
            artifact_logger("graph").info(
                "captured graph of %s:\n%s", self.frame.name, entry.artifacts.graph_code
            )
        return entry

    def _skips_code(self, frame: Any, f_locals: dict[str, Any]) -> bool:
        """Whether a capture of the whole frame (to its return) makes the code run eagerly
        for good: it found no operation for a graph, as torch.compile skips such a frame
        and every later call of its code, whatever the inputs (until reset).

        Not under fullgraph, nor where the code asked whether it is being compiled, nor
        where an argument is an nn.Module class (torch.compile keeps those too).
        """
        return (
            self.frame_of_its_own
            and not self.fullgraph
            and frame.call_count == 0
            and not frame.ctx.read_compiling_state
            and not any(
                isinstance(value, type) and issubclass(value, torch.nn.Module)
                for value in f_locals.values()
            )
        )

    def _break_entry(
        self,
        error: Unsupported,
        contexts: list[CaptureContext],
        f_locals: dict[str, Any],
        guards: CompiledGuards | None = None,
    ) -> CompiledEntry:
        """The entry of a frame whose capture stopped at `error`: split around the break,
        or run eagerly. `guards`: those of a capture record installed (`contexts` empty),
        else the guards of the capture that stopped."""
        if error.escapes or error.whole_frame:  # an exception no handler catches
            return self._eager_entry(error, contexts, guards=guards)
        inside_loop = not error.rest_from_checkpoint and self._breaks_inside_loop(error)
        if (
            error.cannot_resume or self._loop_not_resumed(error) or inside_loop
        ):  # run eagerly, as torch.compile skips it
            shadows = self._frame_shadows(error, f_locals)
            return self._eager_entry(error, contexts, shadows, guards=guards)
        split = self._split_entry(error, contexts, f_locals, guards)
        if split is not None:
            return split
        shadows = self._frame_shadows(error, f_locals)
        return self._eager_entry(error, contexts, shadows, guards=guards)

    def _guards_of(
        self, contexts: list[CaptureContext], guards: CompiledGuards | None
    ) -> CompiledGuards:
        """`guards` when given (a capture record's), else those of the first capture."""
        if guards is not None:
            return guards
        from dynamo_capture.frame_guards import FrameGuards

        return (contexts[0].guards if contexts else FrameGuards()).compile(name=self.frame.name)

    def _entry_of_parts(
        self,
        guards: CompiledGuards,
        run: Callable[..., Any] | None,
        entry_code: str,
        error: Unsupported | None = None,
    ) -> CompiledEntry:
        """An entry calling no graph of its own: `run` calls the compiled parts (a split
        frame, a module's forward), or, where None, the frame runs eagerly (its calls
        compiled through the entry's shadows). Its artifacts, with the break that made
        it, are kept with the frame's."""
        reason = None if error is None else str(error)
        artifacts = CaptureArtifacts("", guards.source, entry_code, graph_break_reason=reason)
        self.artifacts.append(artifacts)
        return CompiledEntry(guards, run, artifacts, eager=run is None)

    def _storable(self, stance: Any) -> bool:
        """Whether this frame's compiles may be kept as capture records (`capture_cache`):
        no guard filter, the default stance; a frame guarding its modules on structure
        only where its records hold the guards its capture made (`records_by_structure`)."""
        return (
            self.capture_cache is not None
            and (not self.modules_by_structure or self.records_by_structure)
            and self.guard_filter_fn is None
            and stance.name == "default"
            and stance.force_backend is None
            and not stance.skip_guard_eval_unsafe
        )

    def _installed(
        self, stance: Any, f_locals: dict[str, Any], f_globals: dict[str, Any]
    ) -> CompiledEntry | None:
        """An entry made from a capture record of an earlier process whose guards pass on
        these locals: the graph goes to the backend without capturing. None: capture."""
        if not self._storable(stance):
            return None
        if wrapped_module(self.target) is not None:
            return None
        backend = active_wrapper_backend(self._backend_for(stance))
        return self.capture_cache.install(self, f_locals, f_globals, backend)

    def _capture(
        self, f_locals: dict[str, Any], contexts: list[CaptureContext], float_inputs: bool = True
    ) -> Any:
        """Capture with symbolic sizes where `dynamic` asks; statically when that fails.

        `dynamic=False` keeps every size static but the dims marked with mark_dynamic on
        the arguments (no automatic dynamic), which is what torch.compile's `dynamic=False`
        means too."""
        dynamic, history = self.dynamic, self._sizes
        if self.dynamic is False and not self._static_backend and _marked_dynamic(f_locals):
            dynamic, history = None, None  # symbolic where marked only
        elif self.dynamic is False or self._static_backend:
            return capture_frame(
                self.frame, f_locals, guard_context=contexts,
                transform_nodes=self._transform_nodes,
                batching_nodes=self._batching_nodes,
                autograd_function_nodes=self._autograd_function_nodes,
                tensor_hook_nodes=self._tensor_hook_nodes,
                inline_regions=self._inline_regions,
            )  # fmt: skip
        try:
            return capture_frame(
                self.frame, f_locals, guard_context=contexts, dynamic=dynamic,
                history=history, specialize_floats=self._specialize_floats,
                float_inputs=float_inputs, transform_nodes=self._transform_nodes,
                batching_nodes=self._batching_nodes,
                autograd_function_nodes=self._autograd_function_nodes,
                tensor_hook_nodes=self._tensor_hook_nodes,
                inline_regions=self._inline_regions,
            )  # fmt: skip
        except (ConstraintViolationError, TensorHookEscapes, RegionsCalledOnce):
            raise
        except Exception as error:
            if not (contexts and contexts[0].symbolic):
                if contexts:
                    contexts[0].guard_shape_decisions()
                raise
            symbolic_error = error
        symbolic = list(contexts)
        contexts.clear()
        try:
            frame = capture_frame(
                self.frame, f_locals, guard_context=contexts,
                transform_nodes=self._transform_nodes,
                batching_nodes=self._batching_nodes,
                autograd_function_nodes=self._autograd_function_nodes,
                tensor_hook_nodes=self._tensor_hook_nodes,
                inline_regions=self._inline_regions,
            )  # fmt: skip
        except Unsupported as static_error:
            if _same_break(symbolic_error, static_error):
                # an ordinary graph break, not one of symbolic sizes: the capture up to
                # it keeps them, and the entry its shape guards, as torch.compile's
                contexts[:] = symbolic
                symbolic[0].guard_shape_decisions()
                raise symbolic_error from symbolic_error.__cause__
            self._log_static(f"capture failed on symbolic sizes: {symbolic_error}")
            raise
        self._log_static(f"capture failed on symbolic sizes: {symbolic_error}")
        return frame

    def _symbolic_entry(
        self, frame: Any, backend: Backend, f_locals: dict[str, Any]
    ) -> CompiledEntry | None:
        """The entry of a symbolic graph; None to compile `frame` as it is.

        As with torch.compile, every backend gets the symbolic graph: SymInt sizes are
        graph inputs (placeholders whose `meta["val"]` is a SymInt), and the compiled
        callable is called with their int values. A backend that cannot take them opts
        out with `supports_dynamic_shapes = False`; it, or a backend that fails on the
        symbolic graph, gets the frame captured again with static sizes. A backend
        that fails on a graph holding symbolic floats (`d ** 0.5`) first gets the
        frame captured with those floats specialized and the sizes still symbolic.
        """
        if not frame.ctx.symbolic:
            return self._float_input_entry(frame, backend, f_locals)
        if _opts_out_of_symbolic(backend):
            reason = (
                f"backend {getattr(backend, '__name__', backend)!r} sets "
                "supports_dynamic_shapes = False"
            )
        else:
            try:
                return compile_entry(frame, backend, self.guard_filter_fn)
            except Exception as error:  # noqa: BLE001 - the static graph decides
                reason = f"the backend failed on the symbolic graph: {error}"
                retry = self._without_symbolic_floats(frame, f_locals, reason)
                if retry is not None:
                    return self._symbolic_entry(retry, backend, f_locals) or compile_entry(
                        retry, backend, self.guard_filter_fn
                    )
        self._log_static(reason)
        self._static_backend = True
        static = capture_frame(self.frame, f_locals)
        return compile_entry(static, backend, self.guard_filter_fn)

    def _float_input_entry(
        self, frame: Any, backend: Backend, f_locals: dict[str, Any]
    ) -> CompiledEntry | None:
        """The entry of a graph whose only symbolic values are float arguments; None to
        compile `frame` as it is. A backend that fails on it (one that needs a float's
        value, as a backward formula taking `log(s)` does) gets the frame captured again
        with those floats constants, guarded equal: a new value compiles again."""
        if not frame.ctx.symbolic_float_inputs:
            return None
        try:
            return compile_entry(frame, backend, self.guard_filter_fn)
        except Exception as error:  # noqa: BLE001 - the capture with constant floats decides
            reason = f"the backend failed on the graph taking symbolic floats: {error}"
            retry = self._without_symbolic_floats(frame, f_locals, reason)
            if retry is None:
                raise
            return compile_entry(retry, backend, self.guard_filter_fn)

    def _without_symbolic_floats(self, frame: Any, f_locals: dict[str, Any], reason: str) -> Any:
        """`frame` captured again with its symbolic floats specialized; None if it has none."""
        numbers = frame.ctx.sym_numbers.emitted_numbers or frame.ctx.symbolic_float_inputs
        if self._specialize_floats or not numbers:
            return None
        if artifact_enabled("dynamic"):
            artifact_logger("dynamic").info(
                "%s: symbolic floats become constants for this backend (%s)",
                self.frame.name,
                reason,
            )
        self._specialize_floats = True
        try:
            return capture_frame(
                self.frame, f_locals, dynamic=self.dynamic,
                history=self._sizes, specialize_floats=True,
            )  # fmt: skip
        except Exception:  # noqa: BLE001 - the static capture decides
            return None

    def _log_static(self, reason: str) -> None:
        if artifact_enabled("dynamic"):
            artifact_logger("dynamic").info(
                "%s: static shapes for this compile (%s)", self.frame.name, reason
            )

    def _part(self, function: Any, backend: Backend | None = None) -> CompiledCallable:
        """A compiled part of a split frame; its breaks and artifacts are reported here."""
        part = CompiledCallable(
            function,
            backend=self.backend if backend is None else backend,
            dynamic=self.dynamic,
            guard_filter_fn=self.guard_filter_fn,
            recompile_limit=self.recompile_limit,
            resolve_backend=self.resolve_backend,
            loop_breaks=self.loop_breaks,
            defer_recompiles=self.defer_recompiles,
            # the part's own capture records, keyed by its code (the same backend only)
            capture_cache=(
                self.capture_cache.for_part()
                if self.capture_cache is not None and backend is None
                else None
            ),
        )
        part.graph_breaks = self.graph_breaks
        part.eager_frames = self.eager_frames
        part.artifacts = self.artifacts
        part.parent = self
        part.modules_by_structure = self.modules_by_structure  # its `self`, say, as here
        part.records_by_structure = self.records_by_structure
        part.parts = self.parts
        part._callees = self._callees
        self.parts.append(part)
        return part

    def _segment_part(self, function: Any) -> CompiledCallable:
        """The compiled part of a segment of a split frame (the code before the break, a
        loop body): a piece of the frame's compile, never skipped on its own."""
        part = self._part(function)
        part.frame_of_its_own = False
        # NOTE: the segment is the frame's own code up to the break, as in torch.compile,
        # whose automatic dynamic follows a code object: a number that changed between
        # the frame's compiles (a recursion's depth) is symbolic in the segment's graph too
        part._sizes = self._sizes
        return part

    def _resume_part(self, function: Any) -> CompiledCallable:
        """The compiled part resuming a split frame: the modules it is handed (one the
        frame made, say `nn.Linear(4, 4)(x)` broken at its parameters' creation) are
        guarded on their structure, not their identity, as torch.compile guards the
        modules a resume function takes; a new module each call is no recompile."""
        part = self._part(function)
        part.modules_by_structure = True
        # NOTE: a resume function is a frame of its own code, not one shared by the modules
        # of a class: what its records hold are the guards its capture made (a handed
        # module's type and what was read of it), so it keeps them
        part.records_by_structure = True
        return part

    def _callee_part(
        self, callee: Any, backend: Backend | None = None, *, by_structure: bool = True
    ) -> Any:
        """The compiled frame of a function (or bound method) a split frame calls; one each.

        A method of an nn.Module (`layer.forward` for each layer of a loop) is one compiled
        frame of the function for every module of its class, as torch.compile keeps one
        cache entry for them: the module is its `self` argument, guarded on its structure
        (class, the attributes capture read, parameter and buffer metadata), its
        parameters and buffers graph inputs (`modules_by_structure`).
        """
        function = getattr(callee, "__func__", None)
        module = getattr(callee, "__self__", None)
        if (
            by_structure
            and isinstance(module, torch.nn.Module)
            and isinstance(callee, types.MethodType)
            and isinstance(function, types.FunctionType)
        ):
            key = (id(function), -1)  # no object has id -1: the key of the shared frame
            part = self._callees.get(key)
            if part is None:
                part = self._callees[key] = self._part(function, backend)
                part.modules_by_structure = True
                # NOTE: its records hold the guards its capture made (the module's class
                # and what was read of it, its tensors graph inputs), keyed apart from
                # a frame of the same function guarding modules by identity
                part.records_by_structure = True
            bound_key = (id(function), id(module), "bound")
            bound = self._callees.get(bound_key)
            if bound is None or bound.__self__ is not module:
                # one bound method a module: what a guard on the module's `forward` sees
                bound = self._callees[bound_key] = types.MethodType(part, module)
            return bound
        key = (id(getattr(callee, "__func__", callee)), id(module))
        part = self._callees.get(key)
        if part is None:
            part = self._callees[key] = self._part(callee, backend)
        return part

    def _global_callee_part(self, callee: Any) -> Any:
        """The compiled frame of a global function a split frame calls; for one a torch
        context decorator wraps, that wrapper run eagerly around the compiled function
        (break_callees.context_decorated_part)."""
        key = (id(callee), "context decorated")
        part = self._callees.get(key)
        if part is None:
            part = context_decorated_part(callee, self._callee_part)
            if part is None:
                return self._callee_part(callee)
            self._callees[key] = part
        return part

    def _local_route(
        self, code: types.CodeType, maker: types.CodeType | None = None
    ) -> LocalFunctionRoute:
        """The route to the compiled frame of the functions of `code` made in the frame
        (`maker` the frame's code); one for every call of them (as torch.compile caches
        a code's frames)."""
        key = (id(code), "made in the frame")
        route = self._callees.get(key)
        if route is None:
            route = LocalFunctionRoute(self._part, code=code, maker=maker)
            self._callees[key] = route
        return route

    def _split_entry(
        self,
        error: Unsupported,
        contexts: list[CaptureContext],
        f_locals: dict[str, Any],
        guards: CompiledGuards | None = None,
    ) -> CompiledEntry | None:
        """Break the graph at the unsupported statement: compiled prefix, eager middle, resume."""
        function = self.frame.function
        if function is _module_call:
            return self._module_forward_entry(error, contexts, guards)
        if error.offset is None:
            return None
        if error.branch_jump is not None and not error.in_unknown_with:
            branch = self._branch_entry(error, contexts, guards)
            if branch is not None:
                return branch
        if error.rest_from_checkpoint:
            plan = plan_rest_eager(function.__code__, error.offset, error.checkpoints)
        elif error.in_unknown_with:  # torch.compile cannot resume there either
            plan = "the break lies in a `with` block capture cannot re-enter"
        else:
            plan = plan_split(
                function.__code__, error.offset, error.contexts, error.call_cut,
                error.plain_args, error.stack_nulls, error.call_cut_in_loops,
            )  # fmt: skip
        if isinstance(plan, str) and (error.in_unknown_with or plan.startswith("the break lies")):
            rest = plan_rest_eager(function.__code__, error.offset, error.checkpoints)
            artifact_logger("graph_breaks").info(
                "%s: %s; %s", self.frame.name, plan,
                "the rest runs eagerly" if not isinstance(rest, str) else rest,
            )  # fmt: skip
            plan = rest
        if isinstance(plan, str):
            artifact_logger("graph_breaks").info("cannot split %s: %s", self.frame.name, plan)
            return None
        if error.rest_eager and plan.loop is None and plan.call_args is None:
            plan = dataclasses.replace(plan, stop=None, resume_contexts=(), stack=None)
        callees = _callees(function, plan, error)
        callee = error.callee if not callees and error.callee is not None else None
        key = (
            plan,
            tuple(id(function.__globals__[name]) for name in callees),
            (id(callee.function), id(callee.receiver)) if callee is not None else None,
            error.callee_code,
        )
        parts = self._splits.get(key)
        if parts is None:
            self.graph_breaks.append(error)
            compile_trace.note_break(self, error, "split: compiled parts around an eager part")
            artifact_logger("graph_breaks").info("graph break in %s: %s", self.frame.name, error)
            if plan.in_try:
                artifact_logger("graph_breaks").info(
                    "%s: the break lies in a try block; the rest of the frame runs eagerly",
                    self.frame.name,
                )
            shadows = []
            if plan.stop is None and plan.in_try:  # the rest of the frame runs eagerly
                shadows = self._frame_shadows(error, f_locals)
            elif callee is not None:
                shadows = shadows_for(callee, function, f_locals, self._callee_part)
            shadows += [
                Shadow(function.__globals__, name, self._callee_part(value), in_dict=True)
                for name, value in comprehension_callees(function, plan.start, plan.stop, error)
            ]
            route = None
            local_call = plan.call_args is not None and plan.call_args.local is not None
            if local_call or plan.routed is not None:
                known = callee.function if callee is not None else None
                if error.callee_code is not None:  # a function made in the frame
                    maker = root_function(function).__code__
                    route = self._local_route(error.callee_code, maker)
                elif isinstance(known, types.FunctionType) and "<locals>" in known.__qualname__:
                    route = self._local_route(known.__code__)  # made by an earlier part
                elif isinstance(known, types.FunctionType):  # from outside, held by a local
                    route = LocalFunctionRoute(self._callee_part, known=known)
            try:
                break_line = line_at(function.__code__, error.offset)
                parts = self._split_parts(function, plan, callees, shadows, route, break_line)
            except ValueError as no_room:  # no room for a part's entry jump
                artifact_logger("graph_breaks").info(
                    "cannot split %s: %s", self.frame.name, no_room
                )
                self.graph_breaks.pop()
                compile_trace.note_break(self, error, f"not split ({no_room})")
                return None
            self._splits[key] = parts
        code = function.__code__
        stack_slot = (
            [None] if plan.stack is not None and STACK_LOCAL not in code.co_varnames else []
        )

        arity = first_part_arity(code)

        def run_parts(f_locals: dict[str, Any], f_globals: dict[str, Any]) -> Any:
            values = first_part_values(code, f_locals) + stack_slot
            result = parts[0](*values[:arity])  # only the first takes the frame's parameters
            if not is_end(result):
                return result
            values = list(result[1:])
            for part in parts[1:]:
                result = part(*values)
                if not is_end(result):
                    return result
                values = list(result[1:])
            return result  # a part that stops (a loop body) ends in (END, *locals)

        guards = self._guards_of(contexts, guards)
        _forget_real_tensors(contexts)
        return self._entry_of_parts(guards, run_parts, describe_split(plan, parts), error)

    def _branch_entry(
        self,
        error: Unsupported,
        contexts: list[CaptureContext],
        guards: CompiledGuards | None = None,
    ) -> CompiledEntry | None:
        """Break the graph at a data-dependent jump as torch.compile does: a graph up to the
        jump (the test in it), the truth taken eagerly, the taken branch resumed in a
        compiled part of its own (resume.BranchPlan); None where the jump cannot be cut."""
        function = self.frame.function
        code = function.__code__
        plan = plan_branch(code, error.offset, error.contexts, error.branch_nulls)
        if isinstance(plan, str):
            artifact_logger("graph_breaks").info(
                "%s: the data-dependent jump is cut at its statement: %s", self.frame.name, plan
            )
            return None
        key = (plan, "branch")
        parts = self._splits.get(key)
        if parts is None:
            break_line = line_at(code, error.offset)
            body = plan.body_start
            try:
                prefix = segment_function(
                    function, body, plan.jump, body, "pre", leave=plan.contexts,
                    stack_out=plan.below + 1, stack_nulls_out=plan.nulls,
                )  # fmt: skip
            except ValueError as no_room:
                artifact_logger("graph_breaks").info(
                    "cannot cut %s at its jump: %s", self.frame.name, no_room
                )
                return None
            varnames = prefix.__code__.co_varnames
            root = root_function(function)

            def make(start: int) -> CompiledCallable:
                # NOTE: one part per offset of the user's function, shared by every part
                # that resumes there (torch.compile makes resume functions from the
                # original code, so their caches are shared the same way)
                stack_in = plan.stack_in(start)
                shared = (id(root.__code__), start, plan.contexts, stack_in, "resumed at")
                part = self._callees.get(shared)  # type: ignore[call-overload]
                if part is None:
                    resume = segment_function(
                        root, start, None, body, "resume", enter=plan.contexts,
                        stack_in=stack_in or None, stack_nulls=plan.nulls, line=break_line,
                    )  # fmt: skip
                    part = self._callees[shared] = self._resume_part(resume)  # type: ignore[index]
                return part

            # the parts take the user's locals, and `___stack` where values ride in it
            # (a frame's cells that are not parameters follow its varnames in every part)
            count = len(part_locals(root.__code__))
            stage = BranchStage(plan, varnames.index(STACK_LOCAL), count, make)
            parts = self._splits[key] = [self._segment_part(prefix), stage]
            self.graph_breaks.append(error)
            compile_trace.note_break(self, error, "split: resumed at the taken branch")
            artifact_logger("graph_breaks").info("graph break in %s: %s", self.frame.name, error)
        first, stage = parts
        arity = first_part_arity(code)

        def run_branch(f_locals: dict[str, Any], f_globals: dict[str, Any]) -> Any:
            result = first(*first_part_values(code, f_locals)[:arity])
            if not is_end(result):
                return result
            return stage(*result[1:])

        guards = self._guards_of(contexts, guards)
        _forget_real_tensors(contexts)
        return self._entry_of_parts(guards, run_branch, f"branch at offset {plan.jump}", error)

    def _module_forward_entry(
        self,
        error: Unsupported,
        contexts: list[CaptureContext],
        guards: CompiledGuards | None = None,
    ) -> CompiledEntry | None:
        """A module without hooks: its forward becomes the frame, so a break splits forward."""
        module = self.target
        if not isinstance(module, torch.nn.Module) or _has_hooks(module):
            return None
        forward = getattr(module, "forward", None)
        if not isinstance(forward, types.MethodType):
            return None
        # NOTE: one compiled part per forward function: a forward replaced on the
        # instance or the class fails this entry's guards and gets a part of its own.
        compiled_forward = self._callee_part(forward, by_structure=False)

        def run_forward(f_locals: dict[str, Any], f_globals: dict[str, Any]) -> Any:
            return compiled_forward(*f_locals["args"], **f_locals["kwargs"])

        if guards is None and not contexts:
            return None
        guards = self._guards_of(contexts, guards)
        return self._entry_of_parts(guards, run_forward, "", error)

    def _split_parts(
        self,
        function: Any,
        plan: SplitPlan,
        callees: list[str],
        shadows: list[Shadow],
        route: LocalFunctionRoute | None = None,
        break_line: int | None = None,
    ) -> list[Callable[..., Any]]:
        """The parts of a split frame; parts of the same split are shared by its entries.

        `route` gives the compiled frame of a function made in the frame whose call the
        cut lies at; `break_line` (the line of the break) names the parts after it."""
        parts: list[Callable[..., Any]] = []
        body = plan.body_start
        stack_in, stack_out = plan.stack if plan.stack is not None else (None, None)
        nulls = plan.stack_nulls
        args = plan.call_args
        if args is not None:  # the first part stops at the call, its arguments in a tuple
            prefix = segment_function(
                function, body, args.call_at, body, "pre", leave=plan.contexts,
                stack_out=(stack_in or 0) + 1, call_args=args, stack_nulls=nulls,
            )  # fmt: skip
            parts.append(self._segment_part(prefix))
        elif plan.start > body:
            prefix = segment_function(
                function, body, plan.start, body, "pre", leave=plan.contexts,
                stack_out=stack_in, stack_nulls=nulls,
            )  # fmt: skip
            parts.append(self._segment_part(prefix))
        if plan.loop is not None:
            parts.append(self._loop_stage(function, plan, break_line))
        else:
            compiled_callees = {
                name: self._global_callee_part(function.__globals__[name]) for name in callees
            }
            middle = segment_function(
                function, plan.start, plan.stop, body, "eager", compiled_callees,
                enter=plan.contexts, leave=plan.resume_contexts,
                stack_in=stack_in, stack_out=stack_out, call_args=args, route_local=route,
                stack_nulls=nulls, routed=plan.routed, stack_nulls_out=plan.nulls_after,
            )  # fmt: skip
            parts.append(ShadowedPart(middle, shadows) if shadows else middle)
        if plan.stop is not None:
            parts.append(self._shared_resume_part(function, plan, stack_out, break_line))
        return parts

    def _shared_resume_part(
        self, function: Any, plan: SplitPlan, stack_in: int | None, break_line: int | None
    ) -> CompiledCallable:
        """The part resuming a split frame at `plan.stop`: one for every split of the
        user's function that resumes there with the same locals and stack, as
        torch.compile makes one resume function of an offset of the original code (a
        break in a `while` loop meets the same offset in the part resuming after it,
        whose own resume part is then the same, recompiled as its locals change)."""
        code = function.__code__
        key = (
            id(root_function(function).__code__), plan.stop, plan.resume_contexts, stack_in,
            plan.nulls_after, code.co_varnames, cell_locals(code), id(function.__globals__),
            id(function.__closure__), "split resumed at",
        )  # fmt: skip
        part = self._callees.get(key)  # type: ignore[call-overload]
        if part is None:
            resume = segment_function(
                function, plan.stop, None, plan.body_start, "resume",
                enter=plan.resume_contexts, stack_in=stack_in, stack_nulls=plan.nulls_after,
                line=break_line,
            )  # fmt: skip
            # NOTE: the part holds `function`'s globals and closure, so the ids in the
            # key name live objects only
            part = self._callees[key] = self._resume_part(resume)  # type: ignore[index]
        return part

    def _loop_stage(
        self, function: Any, plan: SplitPlan, break_line: int | None = None
    ) -> LoopStage:
        """A `for` loop holding the break: eager header, body compiled as a part per item."""
        loop = plan.loop
        assert loop is not None
        body = plan.body_start
        header = segment_function(
            function, plan.start, loop.for_iter, body, "loop", returns_top=True
        )
        body_part = segment_function(
            function, loop.body, loop.for_iter, body, "body", enter=(ITERATOR,), leave=(ITERATOR,),
            line=break_line,
        )  # fmt: skip
        body_stage = self._segment_part(body_part)
        return LoopStage(header, body_stage, loop, function.__code__.co_varnames)

    def _loop_not_resumed(self, error: Unsupported) -> bool:
        """Whether a loop open at the break iterates what torch.compile does not resume
        inside (capture.loop_iterator_not_resumed); with loop_breaks="split", only at a
        data-dependent jump (a loop holding a statement break is driven by a LoopStage)."""
        if not error.loop_not_resumed:
            return False
        return self.loop_breaks == "eager_frame" or error.data_branch

    def _breaks_inside_loop(self, error: Unsupported) -> bool:
        """Whether the break lies in a loop of the frame (branches.breaks_inside_loop)."""
        function = self.frame.function
        if self.loop_breaks != "eager_frame" or error.offset is None:
            return False
        if not isinstance(function, types.FunctionType) or function is _module_call:
            return False  # the module's forward is split as a frame of its own
        if not breaks_inside_loop(function.__code__, error.offset):
            return False
        artifact_logger("graph_breaks").info(
            "graph break in a loop of %s: the frame runs eagerly, its calls compiled: %s",
            self.frame.name,
            error,
        )
        return True

    def _frame_shadows(self, error: Unsupported, f_locals: dict[str, Any]) -> list[Shadow]:
        """For a frame run eagerly as a whole (a break in a loop, in a try block, in a
        `with` block capture cannot re-enter): its calls of user functions, methods and
        submodules, compiled, as torch.compile compiles every frame eager code calls."""
        function = self.frame.function
        if function is _module_call or not isinstance(function, types.FunctionType):
            return self._eager_shadows(error, f_locals)
        shadows = frame_shadows(function, f_locals, self._callee_part)
        shadows += partialmethod_shadows(error.partial_methods, self._callee_part)
        named = {(id(shadow.owner), shadow.name) for shadow in shadows}
        for shadow in self._eager_shadows(error, f_locals):  # the call that broke
            if (id(shadow.owner), shadow.name) not in named:
                shadows.append(shadow)
        return shadows

    def _eager_shadows(self, error: Unsupported, f_locals: dict[str, Any]) -> list[Shadow]:
        """For a frame run eagerly: its call that broke still runs as a compiled frame.

        A module whose call cannot be captured (a hook capture cannot inline) runs its
        hooks eagerly and its forward as a compiled frame.
        """
        function = self.frame.function
        if function is _module_call:
            return self._forward_shadows(self.target)
        if error.callee is None:
            return []
        if not isinstance(function, types.FunctionType):
            return []
        return shadows_for(
            error.callee, function, f_locals, self._callee_part, global_functions=True
        )

    def _forward_shadows(self, module: Any, backend: Backend | None = None) -> list[Shadow]:
        """`module.forward` looked up as a compiled frame of it while the module's call
        machinery (hooks, a wrapper's forward) runs eagerly; none if it has no
        Python forward."""
        if not isinstance(module, torch.nn.Module) or "forward" in module.__dict__:
            return []  # a forward set on the instance (already compiled, or a wrapper)
        forward = getattr(module, "forward", None)
        if not (
            isinstance(forward, types.MethodType)
            and isinstance(forward.__func__, types.FunctionType)
        ):
            return []
        return [Shadow(module, "forward", self._callee_part(forward, backend))]

    def _wrapper_entry(self, inner: torch.nn.Module) -> CompiledEntry:
        """A wrapper module (DDP): its forward runs eagerly, the module it wraps is
        compiled (its forward, with its own hooks run eagerly around it)."""
        from dynamo_capture.frame_guards import FrameGuards
        from dynamo_capture.sources import AttrSource, LocalSource

        guard_set = FrameGuards()
        guard_set.id_match(AttrSource(LocalSource("self"), wrapped_attribute(self.target)), inner)
        guards = guard_set.compile(name=self.frame.name)
        entry = self._entry_of_parts(
            guards, None, f"{self.frame.name} runs eagerly around its compiled module"
        )
        entry.shadows = self._forward_shadows(inner, wrapped_backend(self.target, self.backend))
        return entry

    def _call_with_hooks(self, args: Any, kwargs: Any) -> Any:
        """A call of a module of a user class that has hooks of its own, as torch's compiler
        runs such a compiled module: nn.Module.__call__ runs eagerly, each user hook as a
        compiled frame of its own, and the forward as this callable's own frame with
        the hooks hidden (module_hooks_hidden). That frame is the one a call without hooks
        compiles: a hook registered after the first call compiles the hook alone, one
        removed is simply not called. (With global hooks, which a frame of the module's
        call would run a second time, the module's forward is a frame of its own.)"""
        module = self.target

        def run_forward(*forward_args: Any, **forward_kwargs: Any) -> Any:
            with module_hooks_hidden(module):
                return self(*forward_args, **forward_kwargs)

        def compile_hook(hook: Any) -> Any:
            return self._fullgraph_part(self._callee_part(hook, by_structure=False))

        shadows = module_call_shadows(module, lambda forward: run_forward, compile_hook)
        return ShadowedPart(module, shadows)(*args, **kwargs)

    def _hooked_module_entry(self, module: torch.nn.Module) -> CompiledEntry:
        """A module of a user class with hooks of its own, called as torch's compiler calls
        such a compiled module: nn.Module.__call__ runs eagerly, its forward and each user
        hook run as compiled frames of their own (break_callees.module_call_shadows). The hooks are
        read on every call, so the entry needs no guard on them: a hook added later is
        compiled when first called, one removed is simply not called."""
        from dynamo_capture.frame_guards import FrameGuards

        guards = FrameGuards().compile(name=self.frame.name)
        entry = self._entry_of_parts(
            guards, None, f"{self.frame.name}: hooks and forward compiled one by one"
        )

        def compile_forward(forward: Any) -> Any:
            return self._fullgraph_part(self._callee_part(forward))

        def compile_hook(hook: Any) -> Any:
            return self._fullgraph_part(self._callee_part(hook, by_structure=False))

        entry.call_shadows = lambda: module_call_shadows(module, compile_forward, compile_hook)
        return entry

    def _fullgraph_part(self, part: Any) -> Any:
        """A compiled frame of its own takes this callable's fullgraph setting."""
        compiled = getattr(part, "__func__", part)
        if isinstance(compiled, CompiledCallable):
            compiled.fullgraph = self.fullgraph
        return part

    def _eager_entry(
        self,
        error: Unsupported,
        contexts: list[CaptureContext],
        shadows: list[Shadow] | None = None,
        guards: CompiledGuards | None = None,
    ) -> CompiledEntry:
        """An entry that runs the frame eagerly, guarded by what capture saw before failing.

        `shadows` route the call that broke to a compiled frame of its own (break_callees).
        """
        self.graph_breaks.append(error)
        compile_trace.note_break(self, error, "the frame runs eagerly")
        artifact_logger("graph_breaks").info("running %s eagerly: %s", self.frame.name, error)
        if not shadows:  # wholly eager (with shadows, the call that broke is compiled)
            self.eager_frames.append(warn_eager_frame(self.frame.name, error))
        guards = self._guards_of(contexts, guards)
        entry = self._entry_of_parts(guards, None, "", error)
        entry.shadows = shadows or []
        return entry

    def reset(self) -> None:
        """Drop every compiled entry; the next call captures again."""
        self.calls = 0
        self.entries.clear()
        self.kept_records.clear()
        self._limit_logged = False
        self.code_skipped = False


_functorch_depth = torch._C._functorch.get_dynamic_layer_stack_depth


def tensor_related_frame(
    code: types.CodeType, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> bool:
    """Whether torch.compile compiles a frame it meets (has_tensor_in_frame): its code
    names a torch or NumPy module (or a NumPy function) among its globals, or a local it
    reads holds a tensor, a module, a module class or an array, directly or in a list,
    tuple, dict (exactly those types) or namedtuple. Objects of other types (a user
    object, a dataclass, an OrderedDict holding tensors) do not count. A resume part's
    locals it never reads are no arguments of torch's resume function: left out."""
    for name in code.co_names:
        obj = f_globals.get(name)
        if isinstance(obj, types.ModuleType) and (
            obj is torch or obj.__name__.startswith("torch.") or obj.__name__ == "numpy"
        ):
            return True
        if _numpy_object(obj):
            return True
    live = read_before_written(code)
    seen: dict[int, bool] = {}

    def holds(obj: Any) -> bool:
        known = seen.get(id(obj))
        if known is not None:
            return known
        seen[id(obj)] = False
        if isinstance(obj, torch.Tensor | torch.nn.Module) or (
            type(obj) is type and issubclass(obj, torch.nn.Module)
        ):
            found = True
        elif type(obj) is np.ndarray or isinstance(obj, np.generic):
            found = True
        elif type(obj) in (list, tuple):
            found = any(holds(item) for item in obj)
        elif type(obj) is dict:
            found = any(holds(item) for item in list(obj.values()))
        elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
            found = any(holds(getattr(obj, field)) for field in obj._fields)
        else:
            return False
        seen[id(obj)] = found
        return found

    for name, value in f_locals.items():
        if isinstance(value, types.CellType):  # a cell or free variable: its contents
            try:
                value = value.cell_contents
            except ValueError:
                continue  # an empty cell
        elif not (
            live is None
            or name in live
            or name == STACK_LOCAL
            or name in code.co_freevars
            or name in code.co_cellvars
        ):
            continue
        if holds(value):
            return True
    return False


def _numpy_object(obj: Any) -> bool:
    """An array, a NumPy scalar, or a function of NumPy's (torch's is_numpy)."""
    if isinstance(obj, np.ndarray | np.generic):
        return True
    module = getattr(obj, "__module__", None)
    function = isinstance(obj, types.FunctionType | types.BuiltinFunctionType | np.ufunc)
    return function and isinstance(module, str) and module.split(".")[0] == "numpy"


def takes_float_inputs(backend: Backend) -> bool:
    """Whether the backend takes float inputs made symbolic as torch passes them (a 0-d
    float64 tensor read back with `.item()`); one that bakes `.item()` in declares
    `takes_float_inputs = False` and gets those floats as constants (one graph each)."""
    return getattr(backend, "takes_float_inputs", True) is not False


def takes_function_transforms(backend: Backend) -> bool:
    """Whether the backend takes graphs with torch.func transforms and torch.cond as
    opaque call nodes (function_transforms); one that cannot declares
    `takes_function_transforms = False` and gets a graph break at those calls."""
    return getattr(backend, "takes_function_transforms", True) is not False


def takes_batching_nodes(backend: Backend) -> bool:
    """Whether the backend takes torch.func.vmap traced into the graph as functorch's
    batching calls (`_add_batch_dim`, ...; functorch_inline): declared by
    `takes_batching_nodes`, else as it takes function transforms. A backend tracing
    ATen through a dispatch mode (aot_autograd) traces through them to ATen ops."""
    declared = getattr(backend, "takes_batching_nodes", None)
    return takes_function_transforms(backend) if declared is None else declared is not False


def _opts_out_of_symbolic(backend: Backend) -> bool:
    """Whether the backend declares it takes static graphs only (`supports_dynamic_shapes
    = False` on it, or on the class of a callable object)."""
    return getattr(backend, "supports_dynamic_shapes", True) is False


def _callees(function: Any, plan: SplitPlan, error: Unsupported) -> list[str]:
    """Globals called in the eager statement that hold the function the break happened in."""
    if len(error.where) < 2:
        return []
    callee = error.where[1]
    return called_globals(function, plan.start, plan.stop, callee.filename, callee.function)


def _own_hooks(module: torch.nn.Module) -> bool:
    """Whether the module has hooks of its own (a cheap test on every call)."""
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
    )


def _global_hooks() -> bool:
    from torch.nn.modules import module as module_globals

    return bool(
        module_globals._global_forward_hooks
        or module_globals._global_forward_pre_hooks
        or module_globals._global_backward_hooks
        or module_globals._global_backward_pre_hooks
    )


def _has_hooks(module: torch.nn.Module) -> bool:
    """Whether calling the module runs more than its forward (any module or global hook)."""
    from torch.nn.modules import module as module_globals

    own = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks)
    shared = (
        module_globals._global_forward_hooks,
        module_globals._global_forward_pre_hooks,
        module_globals._global_backward_hooks,
    )
    return any(bool(hooks) for hooks in (*own, *shared))


def optimize(target: Callable[..., Any], *, backend: Backend, **settings: Any) -> CompiledCallable:
    """Wrap `target` for capture with `backend` (the backend contract of docs/ARCHITECTURE.md)."""
    return CompiledCallable(target, backend=backend, **settings)


def reset() -> None:
    """Forget every compiled entry of every compiled callable in this process."""
    for compiled in list(_live):
        compiled.reset()
    forget_warnings()


def _same_break(symbolic: Exception, static: Unsupported) -> bool:
    """Whether a symbolic capture stopped (`symbolic`) where and why the static one did:
    the break comes from the code, not from symbolic sizes."""
    return isinstance(symbolic, Unsupported) and (
        symbolic.offset,
        symbolic.reason,
        type(symbolic),
    ) == (static.offset, static.reason, type(static))


def _marked_dynamic(f_locals: dict[str, Any]) -> bool:
    """Whether a tensor argument (or one in a list, tuple or dict argument) has a dim
    marked with mark_dynamic."""
    for value in f_locals.values():
        items = value.values() if isinstance(value, dict) else value
        for item in items if isinstance(value, list | tuple | dict) else (value,):
            if isinstance(item, torch.Tensor) and marks_of(item).dynamic:
                return True
    return False


def _forget_real_tensors(contexts: list[Any]) -> None:
    """The captures' fake modes drop their real tensors: the entry is compiled (see
    FakeTensorConverter.forget_real_tensors)."""
    for ctx in contexts:
        ctx.fake_mode.converter.forget_real_tensors()
