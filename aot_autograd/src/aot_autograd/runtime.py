"""Running compiled graphs: the autograd.Function, input mutations, aliased outputs.

`training_function` wraps a compiled forward and backward in an
autograd.Function that saves the forward's saved values for the backward.
`assemble_outputs` does what the functional graphs cannot: copies new values
into mutated inputs and rebuilds outputs that alias an input or each other as
views, so callers see eager PyTorch's aliasing.

Compiled graphs run with autocast off. Tracing ran under the caller's autocast
state and under every autocast region the captured code entered or left, so the
casts autocast made are ops of the graph, each with its region's dtypes; running
the graph under autocast again would cast a second time, and would cast the ops
of a region that turned autocast off (a rotary embedding's float32 `cos`).
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

from aot_autograd.errors import (
    AotAutogradError,
    DoubleBackwardError,
    RestridedLeafError,
    UnsupportedMutationError,
    ValueChangedError,
)
from aot_autograd.program import BASE_ALIAS_KINDS, TracedProgram
from aot_autograd.symbolic import resolve_sizes
from aot_autograd.value_assertions import value_check_error
from guards import artifact_logger
from guards.garbage_collection import old_objects_frozen

__all__ = [
    "DeferredBackward",
    "assemble_outputs",
    "compile_together",
    "compiler_in_this_context",
    "aliased_mutated_input",
    "check_mutated_inputs_unaliased",
    "compiled_call",
    "output_assembler",
    "requires_grad_flags",
    "saved_strides_of",
    "training_function",
    "written_with_grad",
]


_any_autocast_enabled = torch._C._is_any_autocast_enabled
_autocast_off = torch._C._DisableAutocast  # excludes the autocast dispatch keys
_is_cpu = operator.attrgetter("is_cpu")
_PLAIN_TENSORS = frozenset((torch.Tensor, torch.nn.Parameter))


class _NoDoubleBackward(torch.autograd.Function):
    """Identity whose backward raises: marks grads made by a compiled backward."""

    @staticmethod
    def forward(ctx: Any, anchors: int, *tensors: torch.Tensor) -> tuple:
        return tuple(g.view_as(g) for g in tensors[anchors:])

    @staticmethod
    def backward(ctx: Any, *unused: Any) -> tuple:
        raise DoubleBackwardError(
            "double backward (a grad of a grad) through an aot_autograd-compiled function is "
            "not supported; compute higher-order grads eagerly, or compile the grad function "
            "itself"
        )


def _mark_no_double_backward(grads: list, node: Any) -> list:
    """The grads a compiled backward made under `create_graph=True`, marked so that a
    grad of them raises DoubleBackwardError. `node` is the compiled function's autograd
    node (its backward's ctx)."""
    tensors = [i for i, g in enumerate(grads) if isinstance(g, torch.Tensor)]
    if not tensors:
        return grads
    # NOTE: the compiled backward's grads need not require grad (its graph runs without
    # recording), so a grad of them would silently leave their dependence out (a
    # gradient penalty `out + g.pow(2).sum()` losing its term where eager differentiates
    # it). Anchored on the function's inputs, the marked grads require grad and reach
    # those inputs, so `torch.autograd.grad(g, x)` (with allow_unused too) runs the
    # raising backward. A leaf input is reachable through its AccumulateGrad node; a
    # non-leaf one is not, from here: such a backward raises now instead.
    anchors = []
    for next_node, _ in getattr(node, "next_functions", ()):
        if next_node is None:
            continue
        variable = getattr(next_node, "variable", None)
        if variable is None:
            raise DoubleBackwardError(
                "a backward with create_graph=True through an aot_autograd-compiled "
                "function taking a non-leaf input that requires grad is not supported "
                "(its grads could not carry their dependence on that input); compute "
                "higher-order grads eagerly"
            )
        anchors.append(variable)
    if not anchors:
        anchors.append(torch.empty(0, requires_grad=True))
    marked = _NoDoubleBackward.apply(len(anchors), *anchors, *(grads[i] for i in tensors))
    result = list(grads)
    for i, g in zip(tensors, marked):
        result[i] = g
    return result


def _boxed(fn: Callable) -> Callable[[list], Any]:
    """`fn` called with one list of arguments that it may empty as it goes.

    A GraphModule gets code that takes the list and clears it before computing, so each
    saved activation is freed after its last use in the backward, as in eager autograd.
    """
    codegen = getattr(fx.graph, "_BoxedCodeGen", None)
    if isinstance(fn, fx.GraphModule) and codegen is not None:
        graph = fx.Graph()
        graph.output(graph.graph_copy(fn.graph, {}))
        graph.set_codegen(codegen())
        return fx.GraphModule(fn, graph).forward
    if getattr(fn, "_boxed_call", False):
        return fn
    call_boxed = getattr(fn, "call_boxed", None)
    if callable(call_boxed):  # a compiled graph's own boxed entry (inductor_codegen's)
        return call_boxed

    def call(args: list) -> Any:
        return fn(*args)

    return call


def compiler_in_this_context(compiler: Callable[..., Any]) -> Callable[..., Any]:
    """`compiler`, called later from any thread, under the context variables set where
    this was called (the configuration scopes around the forward's compile), those the
    calling thread sets itself winning.

        backward_compiler = compiler_in_this_context(bw_compiler)   # at the forward's compile
        ...
        backward_compiler(graph, inputs)   # at the first backward, on autograd's thread

    NOTE: the autograd engine runs the backward of CUDA tensors on a thread of its own
    (one per device), which starts with no context variables set: a backward compiled
    there at its first use would otherwise lose the scopes the forward compiled in (a
    `column_partial_policy` block around the training step), where on the CPU, whose
    backward runs on the caller's thread, it keeps them.
    """
    captured = contextvars.copy_context()

    def compile_in_context(*args: Any, **kwargs: Any) -> Any:
        own = contextvars.copy_context()

        def compile_with_own_values() -> Any:
            for variable, value in own.items():
                variable.set(value)
            return compiler(*args, **kwargs)

        return captured.copy().run(compile_with_own_values)

    return compile_in_context


class DeferredBackward:
    """A backward compiled at its first use, not with its forward.

        backward = DeferredBackward(lambda: compiler(graph, example_inputs))
        backward.get()      # compiles (once) and returns the compiled graph
        backward.compiled   # None until then

    A training step whose calls each leave some tangent None (a model returning
    outputs nobody differentiates, such as a cache of keys and values) only ever runs
    the backwards compiled without those tangents (`absent_tangents`): compiling the
    full one with the forward would pay a compile nothing runs.

    Backwards joined by `compile_together` compile at the first use of any of them,
    all at once, inside a context their owner gives (a batch of C++ builds).
    """

    __slots__ = ("_compile", "_lock", "_together", "compiled")

    def __init__(self, compile: Callable[[], Callable]) -> None:
        self._compile = compile
        self._lock = threading.Lock()
        self._together: tuple | None = None
        self.compiled: Callable | None = None

    def get(self) -> Callable:
        if self.compiled is None:
            together, self._together = self._together, None
            if together is None:
                self._compile_once()
            else:
                backwards, around = together
                with around():
                    for backward in backwards:
                        backward._together = None
                        if backward is self:
                            backward._compile_once()
                            continue
                        try:
                            backward._compile_once()
                        except Exception as error:  # noqa: BLE001 - compiled again when used
                            _together_log.info("a backward compiled ahead failed: %r", error)
        return self.compiled  # type: ignore[return-value]

    def _compile_once(self) -> None:
        if self.compiled is None:
            with self._lock:
                if self.compiled is None:
                    # compiled as the forward was: the old objects frozen (no full
                    # collection walks the user's heap mid-compile)
                    with old_objects_frozen():
                        self.compiled = self._compile()


def compile_together(
    backwards: Sequence[DeferredBackward], around: Callable[[], contextlib.AbstractContextManager]
) -> None:
    """The first of `backwards` used compiles all of them, inside `around()`: for
    graphs whose backwards run in one step (the pieces of a graph cut into regions),
    so that their builds share one batch. Those compiled already are left out."""
    backwards = tuple(b for b in backwards if b.compiled is None)
    if len(backwards) < 2:
        return
    for backward in backwards:
        backward._together = (backwards, around)


_together_log = artifact_logger("perf_hints")


def tangent_dependencies(backward: fx.GraphModule) -> list[frozenset[int]]:
    """For each output of the backward graph, the tangent placeholders it reads.

    Tangents are the backward graph's placeholders named `tangents_*` (the last ones),
    numbered from 0 in placeholder order.
    """
    placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
    tangent_index = {
        node: i for i, node in enumerate(n for n in placeholders if "tangent" in n.name)
    }
    reads: dict[fx.Node, frozenset[int]] = {}
    for node in backward.graph.nodes:
        if node.op == "placeholder":
            reads[node] = frozenset([tangent_index[node]]) if node in tangent_index else frozenset()
        else:
            reads[node] = frozenset().union(*(reads[i] for i in node.all_input_nodes))
    output = next(n for n in backward.graph.nodes if n.op == "output")
    results = output.args[0] if isinstance(output.args[0], list | tuple) else [output.args[0]]
    return [reads[r] if isinstance(r, fx.Node) else frozenset() for r in results]


class _SavedLayout:
    """What the first forward call showed of the graph's outputs (fixed for a compiled graph).

    Which saved values are tensors, which non-differentiable outputs are tensors, and
    the dtype, device (and, for static sizes, shape) of each differentiable output,
    for the zeros a backward gets in place of a missing tangent.
    """

    __slots__ = (
        "all_tensors",
        "tensor_positions",
        "nondiff_tensors",
        "zeros_specs",
        "restrided",
        "saved_inputs",
        "saved_outputs",
        "view_outputs",
    )

    def __init__(
        self,
        outputs: Sequence,
        saved: Sequence,
        differentiable: Sequence[bool],
        saved_strides: Sequence[tuple | None],
        args: Sequence = (),
    ) -> None:
        is_tensor = [isinstance(s, torch.Tensor) for s in saved]
        self.all_tensors = all(is_tensor)
        self.tensor_positions = tuple(i for i, t in enumerate(is_tensor) if t)
        self.nondiff_tensors = tuple(
            i
            for i, (o, d) in enumerate(zip(outputs, differentiable))
            if not d and isinstance(o, torch.Tensor)
        )
        self.zeros_specs = tuple(
            (tuple(o.shape), o.dtype, o.device) for o, d in zip(outputs, differentiable) if d
        )
        # Saved tensors the forward gives in other strides than the backward was compiled
        # for (a compiled forward may lay out a saved view as a dense buffer): (position,
        # strides), copied into those strides at every call.
        self.restrided = tuple(
            (i, stride)
            for i, (value, stride) in enumerate(zip(saved, saved_strides))
            if isinstance(value, torch.Tensor)
            and stride is not None
            and not _strides_agree(value, stride)
            and _without_overlap(value.shape, stride)
        )
        # Saved values that are the call's inputs themselves: (saved position, input
        # position); kept apart from autograd's saved tensors (see training_function).
        inputs = {id(a): j for j, a in enumerate(args) if isinstance(a, torch.Tensor)}
        restrided = {i for i, _ in self.restrided}
        self.saved_inputs = tuple(
            (i, inputs[id(value)])
            for i, value in enumerate(saved)
            if isinstance(value, torch.Tensor) and id(value) in inputs and i not in restrided
        )
        # ... and saved values that are outputs, or views of one: (saved position, output
        # position); the caller may write into those after the call (see training_function).
        roots = {
            id(_alias_root(o)): j for j, o in enumerate(outputs) if isinstance(o, torch.Tensor)
        }
        held = {i for i, _ in self.saved_inputs} | restrided
        self.saved_outputs = tuple(
            (i, roots[id(_alias_root(value))])
            for i, value in enumerate(saved)
            if isinstance(value, torch.Tensor) and id(_alias_root(value)) in roots and i not in held
        )
        # Outputs the compiled forward gives as views (of a pooled buffer it reused, of an
        # intermediate, of a mutated input): autograd would mark them views made by a
        # function returning several, which no later in-place write may touch (a residual
        # `out += identity` after a cut at a DDP bucket). They are returned detached: the
        # same memory and version counter, no view. The generated code is fixed per
        # graph, so the positions are the first call's.
        self.view_outputs = tuple(
            i for i, o in enumerate(outputs) if isinstance(o, torch.Tensor) and o._is_view()
        )


def _alias_root(t: torch.Tensor) -> torch.Tensor:
    """The tensor `t` views (itself where not a view): views share its version counter."""
    return t if t._base is None else t._base


def _saved_hooks_active() -> bool:
    """Whether saved-tensor hooks (`torch.autograd.graph.saved_tensors_hooks`) are on:
    every saved value then goes through them."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top is None or top(False) is not None


def _held_apart(
    layout: _SavedLayout, saved: Sequence, args: Sequence, outputs: Sequence
) -> dict[int, torch.Tensor]:
    """Saved position -> the tensor held for it apart from autograd's saved tensors: this
    call's inputs themselves, and outputs (or views of one) detached (an alias sharing
    the version counter, holding no reference to the autograd node); see `_SavedLayout`."""
    if not (layout.saved_inputs or layout.saved_outputs) or _saved_hooks_active():
        return {}
    held = {i: saved[i] for i, j in layout.saved_inputs if saved[i] is args[j]}
    for i, j in layout.saved_outputs:
        value = saved[i]
        if _alias_root(value) is _alias_root(outputs[j]):
            held[i] = value.detach()
    return held


def _check_saved_inputs(
    args: Sequence, versions: tuple, reads: Callable[[], frozenset[int] | None]
) -> None:
    """Eager's error where the backward reads a saved input written since the forward
    (`reads()`: the saved values the backward reads, None for all; asked only then)."""
    for i, version in versions:
        tensor = args[i]
        if tensor._version == version:
            continue
        read = reads()
        if read is None or i in read:
            raise _modified_since_error(tensor, version)


def _input_readers(program: TracedProgram) -> tuple[tuple[int, frozenset[int]], ...]:
    """`program.saved_input_readers` less the inputs the graph writes: the copy back
    after the forward changes their versions (their writes after the call go unchecked)."""
    mutated = set(program.mutated_inputs)
    return tuple((i, js) for i, js in program.saved_input_readers if i not in mutated)


def _check_inputs_eager_reads(checks: tuple, unused: frozenset[int]) -> None:
    """Eager's error where a backward run for a given tangent reads, in eager, an input
    saved by the forward that was written in place since (`checks`: (input, its version
    after the forward, the tangents whose backward reads it))."""
    for tensor, version, readers in checks:
        if tensor._version != version and not readers <= unused:
            raise _modified_since_error(tensor, version)


def _modified_since_error(tensor: torch.Tensor, version: int) -> RuntimeError:
    shape = ", ".join(str(size) for size in tensor.shape)
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified "
        f"by an inplace operation: [{tensor.type()} [{shape}]] is at version "
        f"{tensor._version}; expected version {version} instead. Hint: the "
        "compiled backward reads this input or output of the compiled region, written "
        "in place after the region ran; write into a clone instead."
    )


def _strides_agree(t: torch.Tensor, stride: tuple) -> bool:
    """Whether `t` has `stride` on its dims of size > 1 (the only dims an index reads)."""
    if t.dim() != len(stride):
        return True  # not the value the backward expects here: leave it alone
    return all(size == 1 or a == b for size, a, b in zip(t.shape, t.stride(), stride))


def _without_overlap(shape: Sequence[int], stride: tuple) -> bool:
    """Whether `stride` (its stride-0 dims aside) maps no two elements to one address."""
    extent = 1
    for step, size in sorted((s, z) for z, s in zip(shape, stride) if z > 1 and s != 0):
        if step < extent:
            return False
        extent = step * size
    return True


def _in_strides(t: torch.Tensor, stride: tuple) -> torch.Tensor:
    """`t`'s values in a new tensor of `stride`; a dim of stride 0 (an expanded value,
    equal along it) is written once."""
    copy = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device)
    target, source = copy, t
    for dim, (size, step) in enumerate(zip(t.shape, stride)):
        if step == 0 and size > 1:
            target, source = target.narrow(dim, 0, 1), source.narrow(dim, 0, 1)
    target.copy_(source)
    return copy


def saved_strides_of(backward: fx.GraphModule) -> list[tuple | None]:
    """Per saved value the backward graph takes (its placeholders before the tangents),
    the strides it was traced with (SymInts where sizes are symbolic); None where not a
    tensor."""
    strides: list[tuple | None] = []
    for node in backward.graph.nodes:
        if node.op != "placeholder" or node.name.startswith("tangents"):
            continue
        value = node.meta.get("val")
        strides.append(tuple(value.stride()) if isinstance(value, torch.Tensor) else None)
    return strides


def _is_static(strides: Sequence[tuple | None]) -> bool:
    return all(s is None or all(type(x) is int for x in s) for s in strides)


def _restrided(saved: Sequence, strides: Sequence[tuple | None]) -> list:
    """`saved` with each tensor not in its `strides` copied into them (see `_SavedLayout`)."""
    saved = list(saved)
    for i, (value, stride) in enumerate(zip(saved, strides)):
        if not isinstance(value, torch.Tensor) or stride is None:
            continue
        if not _strides_agree(value, stride) and _without_overlap(value.shape, stride):
            saved[i] = _in_strides(value, stride)
    return saved


def _grad_scatter(grad_inputs: tuple[int, ...], num_inputs: int) -> Callable[[Sequence], tuple]:
    """Places the backward's grads (one per input in `grad_inputs`) among all the inputs."""
    if not grad_inputs:
        return lambda grads: (None,) * num_inputs
    first, last = grad_inputs[0], grad_inputs[-1] + 1
    if grad_inputs == tuple(range(first, last)):  # one run of inputs: pad both ends
        before, after = (None,) * first, (None,) * (num_inputs - last)
        if not before and not after:
            return tuple
        return lambda grads: (*before, *grads, *after)

    def scatter(grads: Sequence) -> tuple:
        result: list[Any] = [None] * num_inputs
        for index, grad in zip(grad_inputs, grads):
            result[index] = grad
        return tuple(result)

    return scatter


def _fast_apply(function: type) -> Callable[..., Any]:
    """`function.apply` without autograd.Function's per-argument Python work.

    The Python `apply` rebinds default arguments (only for a `setup_context`
    function, which this is not) and unwraps dead functorch wrappers before calling
    the C++ apply; outside functorch transforms the C++ apply alone does the same.
    Inside a transform (vmap, grad) the full `apply` runs.
    """
    base_apply = super(torch.autograd.Function, function).apply
    full_apply = function.apply
    transforms_active = torch._C._are_functorch_transforms_active

    def apply(*args: Any) -> Any:
        if transforms_active():
            return full_apply(*args)
        return base_apply(*args)

    apply.function = function  # type: ignore[attr-defined]  # for inspection
    return apply


def training_function(
    program: TracedProgram,
    forward: Callable,
    backward: Callable,
    dependencies: list[frozenset[int]] | None = None,
    specialize: Callable[[frozenset[int]], Callable | None] | None = None,
    saved_strides: Sequence[tuple | None] = (),
    saved_reads: Callable[[frozenset[int]], frozenset[int]] | None = None,
) -> Callable[..., tuple]:
    """A function running `forward` under autograd, with `backward` as its derivative.

    `saved_strides` (see `saved_strides_of`) are the strides the backward was
    compiled for; a saved tensor the forward gives in others is copied into them
    (symbolic strides are evaluated for each call's sizes).

    Outputs the caller never used get no gradient (None, not zeros) from autograd;
    a grad that reads only such outputs' tangents comes back None, as in eager, so
    optimizers skip those parameters as they would eagerly. `dependencies` (see
    `tangent_dependencies`) says which tangents each grad reads.

    A backward where some tangents are None runs, where `specialize` is given, the
    backward graph `specialize(those tangents' numbers)` returns (compiled once per set
    of None tangents; see `absent_tangents`): eager never runs the backward path of an
    output whose gradient is None, so zeros in its place could give `0 * inf = NaN`.
    Without it (or where it returns None) the full backward runs on zeros.
    `backward` may be a `DeferredBackward`, compiled at the first call that runs it.

    Saved values that are the call's own inputs, or its outputs (or views of one), are
    kept apart from autograd's saved tensors, with their versions: eager refuses a
    backward only where a node reading a tensor written since runs, so a write after the
    call into an input or output only an unused output's backward reads is no error
    (one autograd node serves all the outputs here, where eager has one per op). `saved_reads(None tangents' numbers)` (see
    `saved_values_read`) says which saved values the backward reads; without it, all.
    The inputs eager's own backward reads saved are checked so too, per tangent given
    (`saved_input_readers`), whatever the partitioner saved in their place.

    Everything that does not depend on the call is worked out once: index tuples
    for the differentiable outputs and the grads, and, from the first call, which
    saved values are tensors.
    """
    n_out = program.num_forward_outputs
    differentiable = program.differentiable
    backward_assertions = program.backward_assertions
    tangent_positions = tuple(i for i, d in enumerate(differentiable) if d)
    all_differentiable = len(tangent_positions) == len(differentiable)
    symbolic = bool(program.symbol_sources)
    scatter = _grad_scatter(program.grad_inputs, program.num_inputs)
    input_readers = _input_readers(program)
    boxed_full: list[Callable[[list], Any]] = []
    if not isinstance(backward, DeferredBackward):
        boxed_full.append(_boxed(backward))

    def full_backward() -> Callable[[list], Any]:
        if not boxed_full:  # a DeferredBackward: compiled at the first backward needing it
            boxed_full.append(_boxed(backward.get()))
        return boxed_full[0]

    if isinstance(forward, fx.GraphModule):
        forward = forward.forward  # NOTE: skips nn.Module call machinery (hooks) per call
    # A compiled graph's own boxed entry (inductor_codegen's call_boxed) saves a frame.
    forward_boxed = getattr(forward, "call_boxed", None)
    if not callable(forward_boxed):
        forward_boxed = None
    learned: list[_SavedLayout] = []
    symbolic_strides = not _is_static(saved_strides)
    static_strides = () if symbolic_strides else tuple(saved_strides)
    specialized: dict[frozenset[int], Callable[[list], Any]] = {}
    reads: dict[frozenset[int], frozenset[int] | None] = {}

    def saved_read(unused: frozenset[int]) -> frozenset[int] | None:
        """The saved values the backward run for `unused` reads (None: all of them)."""
        if unused not in reads:
            reads[unused] = saved_reads(unused) if saved_reads is not None else None
        return reads[unused]

    def backward_without(unused: frozenset[int]) -> Callable[[list], Any]:
        run = specialized.get(unused)
        if run is None:
            compiled = specialize(unused) if specialize is not None else None
            run = full_backward() if compiled is None else _boxed(compiled)
            specialized[unused] = run
        return run

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> tuple:
            ctx.set_materialize_grads(False)
            if _any_autocast_enabled():
                with _autocast_off():
                    results = forward_boxed(list(args)) if forward_boxed else forward(*args)
            else:
                results = forward_boxed(list(args)) if forward_boxed else forward(*args)
            outputs, saved = tuple(results[:n_out]), results[n_out:]
            layout = learned[0] if learned else _learn(outputs, saved, args)
            if symbolic_strides:
                strides = resolve_sizes(tuple(saved_strides), program.symbol_sources, args)
                saved = _restrided(saved, strides)
            elif layout.restrided:
                saved = list(saved)
                for i, stride in layout.restrided:
                    saved[i] = _in_strides(saved[i], stride)
            apart = _held_apart(layout, saved, args, outputs)
            if layout.all_tensors and not apart:
                ctx.save_for_backward(*saved)
            elif not apart:
                ctx.save_for_backward(*(saved[i] for i in layout.tensor_positions))
                ctx.saved_others = [None if isinstance(s, torch.Tensor) else s for s in saved]
            else:  # the inputs and outputs among them held apart, with their versions now
                ctx.save_for_backward(
                    *(saved[i] for i in layout.tensor_positions if i not in apart)
                )
                ctx.saved_others = [
                    apart.get(i, s) if i in apart or not isinstance(s, torch.Tensor) else None
                    for i, s in enumerate(saved)
                ]
                ctx.saved_versions = tuple((i, t._version) for i, t in apart.items())
            if input_readers and not _saved_hooks_active():
                ctx.input_versions = tuple(
                    (args[i], args[i]._version, readers) for i, readers in input_readers
                )
            if symbolic:  # the zeros for a missing tangent take this call's sizes
                ctx.output_shapes = [outputs[i].shape for i in tangent_positions]
            if layout.view_outputs:  # see _SavedLayout.view_outputs
                outputs = list(outputs)
                for i in layout.view_outputs:
                    outputs[i] = outputs[i].detach()
                outputs = tuple(outputs)
            if layout.nondiff_tensors:
                ctx.mark_non_differentiable(*(outputs[i] for i in layout.nondiff_tensors))
            return outputs

        @staticmethod
        def backward(ctx: Any, *grad_outputs: Any) -> tuple:
            layout = learned[0]
            if all_differentiable:
                tangents = grad_outputs
            else:
                tangents = tuple(grad_outputs[i] for i in tangent_positions)
            unused = frozenset(i for i, g in enumerate(tangents) if g is None)
            if input_readers and hasattr(ctx, "input_versions"):
                # before the saved values are read: a saved view of such an input would
                # raise autograd's error about views made under no_grad instead
                _check_inputs_eager_reads(ctx.input_versions, unused)
            versions = getattr(ctx, "saved_versions", None)
            if layout.all_tensors and versions is None:
                args = list(ctx.saved_tensors)
            else:
                tensors = iter(ctx.saved_tensors)
                args = [next(tensors) if s is None else s for s in ctx.saved_others]
                del tensors
            if hasattr(ctx, "maybe_clear_saved_tensors"):
                ctx.maybe_clear_saved_tensors()  # the list now holds the only references
            if versions is not None:
                _check_saved_inputs(args, versions, lambda: saved_read(unused))
            if unused:
                args += _tangents_with_zeros(ctx, tangents, layout, symbolic)
                run = backward_without(unused)
            else:
                args += [g.contiguous() for g in tangents]
                run = boxed_full[0] if boxed_full else full_backward()
            if _any_autocast_enabled():  # backward() called inside an autocast region
                with _autocast_off():
                    grads = run(args)
            else:
                grads = run(args)
            if unused and dependencies is not None:
                grads = [
                    None if reads and reads <= unused else grad
                    for grad, reads in zip(grads, dependencies)
                ]
            if backward_assertions:
                grads = _checked_backward(grads, backward_assertions)
            if torch.is_grad_enabled():
                grads = _mark_no_double_backward(list(grads), ctx)
            return scatter(grads)

    def _learn(outputs: tuple, saved: Sequence, args: Sequence) -> _SavedLayout:
        strides = list(static_strides) + [None] * (len(saved) - len(static_strides))
        learned.append(_SavedLayout(outputs, saved, differentiable, strides, args))
        return learned[0]

    return _detaching(_fast_apply(CompiledFunction), program.grad_free_inputs)


def _checked_backward(results: Sequence, assertions: tuple) -> Sequence:
    """The grads among a backward's results, after raising eager's error for the first of
    its checks (the last `len(assertions)` results, see backward_checks) not all true. A
    check given None (it read only absent tangents) is one eager does not make."""
    count = len(results) - len(assertions)
    for check, assertion in zip(results[count:], assertions):
        if check is not None and not bool(check.all()):
            raise value_check_error(assertion)
    return results[:count]


def _detaching(apply: Callable[..., Any], positions: tuple[int, ...]) -> Callable[..., Any]:
    """`apply` taking the arguments at `positions` detached: no autograd edge to them."""
    if not positions:
        return apply
    tensor = torch.Tensor

    def apply_detached(*args: Any) -> Any:
        args_list = list(args)
        for i in positions:
            if isinstance(args_list[i], tensor):
                args_list[i] = args_list[i].detach()
        return apply(*args_list)

    apply_detached.function = apply.function  # type: ignore[attr-defined]
    return apply_detached


def _tangents_with_zeros(
    ctx: Any, tangents: Sequence, layout: _SavedLayout, symbolic: bool
) -> list:
    """The tangents, contiguous, with zeros of the output's shape where autograd gave None."""
    result = []
    for k, g in enumerate(tangents):
        if g is not None:
            result.append(g.contiguous())
            continue
        shape, dtype, device = layout.zeros_specs[k]
        if symbolic:
            shape = ctx.output_shapes[k]
        result.append(torch.zeros(shape, dtype=dtype, device=device))
    return result


def _view(base: torch.Tensor, geometry: tuple, spec: Any) -> torch.Tensor:
    """The view of `base` with `geometry`, with the traced view's autograd flag and bits.

    A view that required grad when traced is built differentiably (a dtype change between
    real and complex through view_as_complex / view_as_real, as eager does); one that did
    not (a `detach()`, a `view(dtype)`) is built from `base.detach()`.
    """
    size, stride, offset_bytes, dtype = geometry
    if not spec.requires_grad and base.requires_grad:
        base = base.detach()
        if _same_geometry(base, geometry):  # eager's `x.detach()`, `x.data`: not a view
            return base
    start = base.storage_offset() * base.element_size() + offset_bytes
    if dtype == base.dtype:
        view = None
        if spec.requires_grad and 0 in stride:
            view = _as_expand(base, size, stride, start // base.element_size())
        if view is None:
            view = base.as_strided(size, stride, start // base.element_size())
    elif spec.requires_grad:
        view = _differentiable_dtype_view(base, size, stride, start, dtype)
    else:
        view = _dtype_view(base, size, stride, start, dtype)
    if view.is_conj() != spec.conj:
        view = view.conj()
    if view.is_neg() != spec.neg:
        view = torch._neg_view(view)
    if view.requires_grad != (spec.requires_grad and torch.is_grad_enabled()):
        raise AotAutogradError(
            f"an output view of dtype {dtype} could not be rebuilt with requires_grad="
            f"{spec.requires_grad} from a {base.dtype} tensor; return a copy (.clone()) of it"
        )
    return view


def _same_geometry(base: torch.Tensor, geometry: tuple) -> bool:
    size, stride, offset_bytes, dtype = geometry
    if not all(type(n) is int for n in (*size, *stride, offset_bytes)):
        return False  # (symbolic sizes of a graph not resolved here: built as a view)
    return (
        offset_bytes == 0
        and dtype == base.dtype
        and tuple(size) == tuple(base.shape)
        and tuple(stride) == tuple(base.stride())
        and not base.is_conj()
        and not base.is_neg()
    )


def _as_expand(base: torch.Tensor, size: Any, stride: Any, offset: Any) -> Any:
    """The view (size, stride, offset) of `base`, which repeats elements (a stride 0), built
    with `expand`: `base.expand(size)` where that is the view, else `expand` of a view
    without the repeated dims (eager's `x.expand(...)` followed by another view, such as
    a `transpose` or a slice). None where neither gives the view.

    Each gives the same tensor as `as_strided`; their backwards differ in rounding.
    as_strided's sums the gradient over one expanded dim at a time, rounding to a
    bfloat16 or half gradient's dtype between; expand's (eager's, for
    `broadcast_tensors`, `expand`) sums over all of them at once.
    """
    if offset == base.storage_offset() and len(size) >= base.dim():
        lead = len(size) - base.dim()
        if all(have in (want, 1) for have, want in zip(base.shape, size[lead:])):
            expanded = base.expand(size)
            if tuple(expanded.stride()) == tuple(stride):
                return expanded
    # The inner view keeps size 1 where the view repeats an element along a dim; where it
    # repeats none otherwise, its backward only places the gradient, and every sum over
    # an expanded dim happens in `expand`'s backward at once.
    inner = [1 if step == 0 and n > 1 else n for n, step in zip(size, stride)]
    if list(inner) == list(size):
        return None
    return base.as_strided(inner, stride, offset).expand(size)


def _view_without_grad(base: torch.Tensor, geometry: tuple, spec: Any) -> torch.Tensor:
    """The view of `base` made with grad mode off, as eager made it (see OutputSpec): it
    requires grad as `base` does, and no gradient flows through it into `base`."""
    size, stride, offset_bytes, dtype = geometry
    if dtype != base.dtype or spec.conj != base.is_conj() or spec.neg != base.is_neg():
        return _view(base, geometry, spec)
    start = base.storage_offset() * base.element_size() + offset_bytes
    if spec.written_since_made:
        return _view_made_before_a_write(base, size, stride, start // base.element_size())
    with torch.no_grad():
        return base.as_strided(size, stride, start // base.element_size())


def _view_made_before_a_write(base: torch.Tensor, size: Any, stride: Any, offset: Any) -> Any:
    """A no_grad view of `base` that autograd sees as made before a write into `base`,
    as eager's was (the write is in the graph): it refuses use in grad mode with eager's
    error. Made while `base`'s version reads one more, then put back: the version of
    `base` (which saved tensors compare) is unchanged."""
    version = base._version
    set_version = torch._C._autograd._unsafe_set_version_counter
    set_version((base,), (version + 1,))
    try:
        with torch.no_grad():
            return base.as_strided(size, stride, offset)
    finally:
        set_version((base,), (version,))


def _dtype_view(base: torch.Tensor, size: Any, stride: Any, start: int, dtype: Any) -> Any:
    """A view of `base`'s memory as `dtype` (not differentiable, like `view(dtype)`)."""
    alias = torch.empty(0, dtype=dtype, device=base.device)
    return alias.set_(base.untyped_storage(), start // alias.element_size(), size, stride)


def _differentiable_dtype_view(
    base: torch.Tensor, size: Any, stride: Any, start: int, dtype: Any
) -> torch.Tensor:
    """A real view of complex `base` or a complex view of real `base`, keeping autograd."""
    if dtype.is_complex and base.dtype == dtype.to_real():
        pairs = base.as_strided(
            (*size, 2), (*(2 * s for s in stride), 1), start // base.element_size()
        )
        return torch.view_as_complex(pairs)
    if base.is_complex() and dtype == base.dtype.to_real() and not base.is_conj():
        real = torch.view_as_real(base)
        return real.as_strided(size, stride, start // real.element_size())
    raise AotAutogradError(
        f"an output is a {dtype} view of a {base.dtype} tensor that requires grad; only views "
        "between a complex dtype and its real dtype are rebuilt; return a copy (.clone()) of it"
    )


def _geometry(program: TracedProgram, spec: Any, args: Sequence[Any]) -> tuple:
    """The view's (size, stride, offset, dtype), symbolic sizes evaluated for this call."""
    if not program.symbol_sources:
        return spec.geometry
    return resolve_sizes(spec.geometry, program.symbol_sources, args)


def _storage_key(t: torch.Tensor) -> Any:
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:  # tensors without data (fakes): not checked
        return None


def _overlaps_itself(t: Any) -> bool:
    """Whether elements of `t` surely share memory (a stride 0 on a dim of size > 1), the
    overlap eager's in-place kernels refuse."""
    return isinstance(t, torch.Tensor) and torch._debug_has_internal_overlap(t) == 1


def aliased_mutated_input(program: TracedProgram, args: Sequence[Any]) -> int | None:
    """A mutated input sharing memory with another input (the graph assumed none do),
    or None. (One whose elements share memory, an expanded tensor, is written through
    its compact memory: see `_compact`.)"""
    if not program.mutated_inputs:
        return None
    keys: dict[Any, int] = {}
    for a in args:
        if isinstance(a, torch.Tensor):
            key = _storage_key(a)
            if key is not None and key != 0:
                keys.setdefault(key, 0)
                keys[key] += 1
    for index in program.mutated_inputs:
        if keys.get(_storage_key(args[index]), 0) > 1:
            return index
    return None


def check_mutated_inputs_unaliased(program: TracedProgram, args: Sequence[Any]) -> None:
    """A mutated input must not share memory with another input (the graph assumed not):
    raises before the graph runs."""
    index = aliased_mutated_input(program, args)
    if index is not None:
        raise UnsupportedMutationError(
            f"input {index} is written in place and shares memory with another input; "
            "the compiled graph treats inputs as separate tensors. Pass a .clone() of one "
            "of them"
        )


def _compact(target: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`target`, an expanded tensor (stride 0 on dims of size above 1), and its new value,
    both narrowed to one element along those dims: the memory `target` covers. The
    traced graph made the aliases of each location agree (tracer._merged_into_input)."""
    for d, (size, stride) in enumerate(zip(target.shape, target.stride())):
        if stride == 0 and size > 1:
            target, value = target.narrow(d, 0, 1), value.narrow(d, 0, 1)
    return target, value


_VALUE_CHANGED = (
    "a tensor value that the traced code read into Python (.item(), bool(t), "
    "int(t)) differs from its value when traced, so the compiled graph took a "
    "branch this call would not; compile again for these inputs, or keep the "
    "value a tensor (torch.where instead of `if`)"
)


def _flat_sequence(spec: Any) -> bool:
    """Whether `spec` is a tuple or a list of leaves."""
    if not isinstance(spec, pytree.TreeSpec) or spec.type not in (tuple, list):
        return False
    method = getattr(spec, "children", None)
    children = list(method()) if callable(method) else list(spec.children_specs)
    return all(c.is_leaf() for c in children)


def _rebuild(program: TracedProgram) -> Callable[[Sequence], Any]:
    """The user's output structure from the flat outputs (no pytree walk for flat tuples)."""
    spec = program.out_spec
    if isinstance(spec, pytree.TreeSpec) and spec.is_leaf():
        return lambda flat: flat[0]
    if _flat_sequence(spec):
        return tuple if spec.type is tuple else list
    return lambda flat: pytree.tree_unflatten(list(flat), spec)


class _MissingDerivative(torch.autograd.Function):
    """An output requiring grad whose backward raises `message` (as eager's would).

    Reached with no gradient (autograd gives None: a compiled graph taking this output
    and others among its inputs, whose backward gives it none for the tangents present)
    it gives none on, without raising: eager's nodes, one an op, would not reach it.
    """

    @staticmethod
    def forward(ctx: Any, message: str, value: torch.Tensor, *inputs: Any) -> torch.Tensor:
        ctx.message = message
        ctx.set_materialize_grads(False)
        return value.detach()

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        if all(g is None for g in grads):
            return (None,) * len(ctx.needs_input_grad)
        raise RuntimeError(ctx.message)


def _without_derivative(value: Any, message: str, args: Sequence) -> Any:
    """`value` requiring grad, as eager's result of an op without a derivative does."""
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    if not torch.is_grad_enabled() or not inputs or not isinstance(value, torch.Tensor):
        return value
    return _MissingDerivative.apply(message, value, *inputs)


def _flat_outputs(program: TracedProgram) -> Callable[[Sequence, Sequence], Sequence]:
    """(args, graph outputs) -> the flat user outputs, one getter per OutputSpec."""
    specs = program.outputs
    if all(spec.kind == "graph" for spec in specs) and not program.missing_derivatives:
        positions = tuple(spec.index for spec in specs)
        if positions == tuple(range(len(positions))):
            count = len(positions)
            return lambda args, outputs: outputs[:count]
        return lambda args, outputs: [outputs[i] for i in positions]
    getters = tuple(_output_getter(program, spec) for spec in specs)
    return lambda args, outputs: [get(args, outputs) for get in getters]


def _output_getter(program: TracedProgram, spec: Any) -> Callable[[Sequence, Sequence], Any]:
    index = spec.index
    if spec.kind == "graph" and index in program.missing_derivatives:
        message = program.missing_derivatives[index]
        return lambda args, outputs: _without_derivative(outputs[index], message, args)
    if spec.kind == "graph":
        return lambda args, outputs: outputs[index]
    if spec.kind == "input":
        return lambda args, outputs: args[index]
    if spec.kind == "input_alias":
        return lambda args, outputs: _view(args[index], _geometry(program, spec, args), spec)
    if spec.kind == "input_alias_no_grad":
        return lambda args, outputs: _view_without_grad(
            args[index], _geometry(program, spec, args), spec
        )
    if spec.kind == "base_alias" and index in program.missing_derivatives:
        # A view of a result without a derivative (`(x // x).narrow(...)`): requires grad
        # as eager's does, and a backward through it raises eager's error.
        message = program.missing_derivatives[index]
        return lambda args, outputs: _view(
            _without_derivative(outputs[index], message, args), _geometry(program, spec, args), spec
        )
    if spec.kind == "base_alias":
        return lambda args, outputs: _view(outputs[index], _geometry(program, spec, args), spec)
    if spec.kind == "base_alias_no_grad":
        message = program.missing_derivatives.get(index)

        def base_view(args: Sequence, outputs: Sequence) -> torch.Tensor:
            base = outputs[index]
            if message is not None:
                base = _without_derivative(base, message, args)
            return _view_without_grad(base, _geometry(program, spec, args), spec)

        return base_view
    value = spec.value
    return lambda args, outputs: value


def _copy_back(inputs: list, values: Sequence) -> None:
    if any(map(_overlaps_itself, inputs)):
        pairs = [_compact(t, v) if _overlaps_itself(t) else (t, v) for t, v in zip(inputs, values)]
        inputs, values = [t for t, _ in pairs], [v for _, v in pairs]
    _copy_pairs(inputs, values)


def _copy_pairs(inputs: list, values: Sequence) -> None:
    """`input.copy_(value)` for each mutated input; on the GPU the pairs of one dtype go
    in one multi-tensor launch (a BatchNorm model's running statistics: two launches
    instead of three per layer). On the CPU, plain tensors go in one `_foreach_copy_`
    call, which runs `copy_` on each pair in C++ (broadcasting and casting as `copy_`
    does), saving a Python dispatch per tensor; subclasses each get their own `copy_`."""
    if len(inputs) >= 2 and all(map(_is_cpu, inputs)):
        if _PLAIN_TENSORS.issuperset(map(type, inputs)) and _PLAIN_TENSORS.issuperset(
            map(type, values)
        ):
            torch._foreach_copy_(inputs, list(values))
            return
    if len(inputs) < 2 or not inputs[0].is_cuda:
        for target, value in zip(inputs, values):
            target.copy_(value)
        return
    groups: dict = {}
    for target, value in zip(inputs, values):
        if target.shape != value.shape:  # a broadcasting copy: alone
            target.copy_(value)
            continue
        key = (target.device, target.dtype, value.dtype)
        groups.setdefault(key, ([], []))
        groups[key][0].append(target)
        groups[key][1].append(value)
    for targets, group_values in groups.values():
        if len(targets) == 1:
            targets[0].copy_(group_values[0])
        else:
            torch._foreach_copy_(targets, group_values)


def _same_layout(t: torch.Tensor, stride: Sequence[int]) -> bool:
    """Whether `t`'s elements sit where `stride` puts them (size-1 dims' strides aside)."""
    if t.stride() == tuple(stride) or t.numel() == 0:
        return True
    return all(n == 1 or a == b for n, a, b in zip(t.shape, t.stride(), stride))


def _base_conformer(program: TracedProgram) -> Callable[[Sequence, Sequence], Sequence] | None:
    """Graph outputs with each aliased output's base in the strides its views assume.

    The views are rebuilt from the base's traced geometry; a backend running eager
    kernels on the functional graph may return a base laid out otherwise (an op on a
    value written in place while tracing, functional now), and viewing that base with
    the traced strides would read its elements in the wrong places.
    """
    bases: dict[int, tuple] = {}
    for spec in program.outputs:
        if spec.kind in BASE_ALIAS_KINDS and spec.base_stride is not None:
            bases[spec.index] = spec.base_stride
    if not bases:
        return None
    symbolic = bool(program.symbol_sources)

    def conform(args: Sequence, outputs: Sequence) -> Sequence:
        fixed = None
        for index, stride in bases.items():
            base = outputs[index]
            if symbolic:
                stride = resolve_sizes(stride, program.symbol_sources, args)
            if _same_layout(base, stride):
                continue
            if fixed is None:
                fixed = list(outputs)
            copy = torch.empty_strided(base.shape, stride, dtype=base.dtype, device=base.device)
            fixed[index] = copy.copy_(base)  # differentiable where the base requires grad
        return outputs if fixed is None else fixed

    return conform


def output_assembler(
    program: TracedProgram, written_in_place: frozenset[int] = frozenset()
) -> Callable[[Sequence, Sequence], Any]:
    """`assemble_outputs` for one program, with everything not depending on the call precomputed.

    Mutated inputs in `written_in_place` (the compiled graph stored their new values into
    them itself; see program.mark_input_mutations) are not copied back.
    """
    first_mutation = program.num_forward_outputs - len(program.mutated_inputs)
    first_check = first_mutation - program.num_value_checks
    copied = [
        (index, first_mutation + k)
        for k, index in enumerate(program.mutated_inputs)
        if index not in written_in_place
    ]
    # NOTE: a differentiable new value (see written_with_grad) is copied in apart, with
    # grad mode on, so autograd records the copy into the caller's tensor as eager
    # recorded its write; the others are copied under no_grad.
    recorded = frozenset(written_with_grad(program))
    recorded_copies = tuple((i, p) for i, p in copied if i in recorded)
    copied = [(i, p) for i, p in copied if i not in recorded]
    mutated = tuple(index for index, _ in copied)
    new_values = tuple(position for _, position in copied)
    all_copied = len(copied) == len(program.mutated_inputs)
    flat_outputs = _flat_outputs(program)
    conform = _base_conformer(program)
    if conform is not None:
        views = flat_outputs

        def flat_outputs(args: Sequence, outputs: Sequence) -> Sequence:
            return views(args, conform(args, outputs))

    if program.inference_outputs:
        normal = flat_outputs

        def flat_outputs(args: Sequence, outputs: Sequence) -> Sequence:
            return _as_inference_tensors(normal(args, outputs), program.inference_outputs)

    rebuild = _rebuild(program)
    if program.metadata_mutations:
        unrestrided = flat_outputs

        def flat_outputs(args: Sequence, outputs: Sequence) -> Sequence:
            flat = unrestrided(args, outputs)  # (views of inputs made in their old geometry)
            _restride_inputs(program, args)
            return flat

    if not mutated and not program.num_value_checks and not recorded_copies:
        return lambda args, outputs: rebuild(flat_outputs(args, outputs))

    assertions = program.value_assertions

    def assemble(args: Sequence, graph_outputs: Sequence) -> Any:
        for k, check in enumerate(graph_outputs[first_check:first_mutation]):
            if not bool(check.all()):
                if k in assertions:
                    raise value_check_error(assertions[k])
                raise ValueChangedError(_VALUE_CHANGED)
        if mutated:
            if all_copied:
                values = graph_outputs[first_mutation : first_mutation + len(mutated)]
            else:
                values = [graph_outputs[position] for position in new_values]
            with torch.no_grad():
                _copy_back([args[i] for i in mutated], values)
        for index, position in recorded_copies:
            args[index].copy_(graph_outputs[position])
        return rebuild(flat_outputs(args, graph_outputs))

    return assemble


def written_with_grad(program: TracedProgram) -> tuple[int, ...]:
    """The mutated inputs whose new value is a differentiable output of the graph: written
    in place in grad mode while requiring grad (a residual `out += identity` into a
    non-leaf input). The run time copies the new value into the caller's tensor with
    autograd recording the copy, so its `grad_fn` and backward are eager's; the caller's
    tensor must not be a leaf (`_check_no_leaf_written`)."""
    first_mutation = program.num_forward_outputs - len(program.mutated_inputs)
    differentiable = program.differentiable
    return tuple(
        index
        for k, index in enumerate(program.mutated_inputs)
        if first_mutation + k < len(differentiable) and differentiable[first_mutation + k]
    )


_LEAF_WRITE_ERROR = "leaf Variable that requires grad is being used in an in-place operation."


def _check_no_leaf_written(args: Sequence[Any], written: tuple[int, ...]) -> None:
    """Eager's error where an input the graph writes with autograd recording the write
    (see `written_with_grad`) is a leaf requiring grad, or a view of one: traced as a
    non-leaf, the graph was compiled for the callers' tensors eager may write. Raised
    before the graph runs (nothing written yet)."""
    for index in written:
        arg = args[index]
        if not arg.requires_grad:
            continue
        if arg.is_leaf:
            raise RuntimeError(f"a {_LEAF_WRITE_ERROR}")
        base = arg._base
        if base is not None and base.is_leaf and base.requires_grad:
            raise RuntimeError(f"a view of a {_LEAF_WRITE_ERROR}")


def _as_inference_tensors(flat: Sequence, positions: tuple[int, ...]) -> list:
    """`flat` with the tensors at `positions` as inference tensors over the same memory.

    The compiled graph runs outside `inference_mode` (its other outputs are normal
    tensors); eager made these inside a block of it. An inference tensor is a tensor of
    its own kind, not a flag: each is remade, without a copy, as a tensor set to the
    same storage, sizes, strides and offset inside `inference_mode`.
    """
    flat = list(flat)
    for i in positions:
        t = flat[i]
        if not isinstance(t, torch.Tensor) or t.is_inference():
            continue
        with torch.inference_mode():
            made = torch.empty(0, dtype=t.dtype, device=t.device).set_(
                t.untyped_storage(), t.storage_offset(), t.size(), t.stride()
            )
        if t.requires_grad and t.is_leaf:  # `torch.ones(2, requires_grad=True)` in the block
            made.requires_grad_(True)
        flat[i] = made
    return flat


def _check_no_leaf_restrided(args: Sequence[Any], restrided: tuple[int, ...]) -> None:
    """Refuse a leaf requiring grad that the graph restrides in place (`w.t_()` under
    no_grad): autograd takes its gradient in the shape it has when the graph runs, the
    old one, where eager's is in the new one. Raised before the graph runs, so the
    caller (AotCallable) runs the call's ops eagerly instead."""
    for index in restrided:
        arg = args[index]
        if arg.is_leaf and arg.requires_grad:
            raise RestridedLeafError(
                f"input {index} is a leaf tensor requiring grad whose shape or strides the "
                "compiled code changes in place (t_, unsqueeze_, as_strided_ under no_grad); "
                "restride it before calling the compiled function, or assign a view "
                "(w = w.t()) instead, to run the compiled graph"
            )


def _restride_inputs(program: TracedProgram, args: Sequence[Any]) -> None:
    """Give each input the graph restrided in place (`x.t_()`) its final geometry, as
    eager's in-place op left the caller's tensor: `as_strided_` on the caller's tensor,
    after its new data (if any) was copied back in its old geometry."""
    for index, geometry, from_storage_start in program.metadata_mutations:
        if program.symbol_sources:
            geometry = resolve_sizes(geometry, program.symbol_sources, args)
        size, stride, offset_bytes, _ = geometry
        arg = args[index]
        start = offset_bytes // arg.element_size()
        if not from_storage_start:
            start += arg.storage_offset()
        # (a leaf requiring grad is restrided only where grad mode was off, as tracing saw)
        version = arg._version
        with torch.no_grad() if arg.is_leaf else contextlib.nullcontext():
            arg.as_strided_(size, stride, start)
        # NOTE: the version bump of eager's in-place op was made before the graph ran
        # (`_bump_restrided_versions`): bumping again here would fail the backward of
        # the views of the input the graph saved, as in eager it does not.
        torch._C._autograd._unsafe_set_version_counter((arg,), (version,))


def _bump_restrided_versions(args: Sequence[Any], restrided: tuple[int, ...]) -> None:
    """Bump the version of each input the graph restrides in place, before the graph
    runs, as eager's `x.unsqueeze_(0)` does before the ops after it: the views of the
    input the graph saves for the backward (`x * w` saves `unsqueeze(x)`) record the
    bumped version, and the restride after the graph keeps it (`_restride_inputs`)."""
    for index in restrided:
        torch.autograd.graph.increment_version(args[index])


def _bump_stored_versions(args: Sequence[Any], stored: tuple[int, ...]) -> None:
    """Bump the version of each input the compiled graph stores its new value into itself
    (`written_in_place`: no `copy_` after the graph bumps it), as eager's in-place op
    does: a tensor saved for an earlier backward that the call overwrote must fail that
    backward, not give a gradient of the new value. Bumped before the graph runs, as
    eager's op bumps before the ops after it read the input: a value the graph saves
    records the bumped version. Inference tensors keep no version."""
    for index in stored:
        arg = args[index]
        if not arg.is_inference():
            torch.autograd.graph.increment_version(arg)


def assemble_outputs(program: TracedProgram, args: Sequence[Any], graph_outputs: Sequence) -> Any:
    """Copy back mutated inputs and build the user's outputs from the graph's."""
    return output_assembler(program)(args, graph_outputs)


_requires_grad = operator.attrgetter("requires_grad")


def requires_grad_flags(args: Sequence[Any]) -> tuple[bool, ...]:
    """Per argument, whether it is a tensor requiring grad (part of the compiled-graph key).

    Read in one C loop (`map`) where every argument is a plain tensor or parameter (a
    module's graph: its parameters and buffers), told by a set of their types: two
    thirds of the time of a Python loop per argument.
    """
    if _PLAIN_TENSORS.issuperset(map(type, args)):
        return tuple(map(_requires_grad, args))
    tensor = torch.Tensor
    return tuple([isinstance(a, tensor) and a.requires_grad for a in args])


def compiled_call(
    program: TracedProgram,
    run: Callable[..., Any],
    training: bool,
    written_in_place: frozenset[int] = frozenset(),
) -> Callable[[Sequence], Any]:
    """The per-call path of one compiled program: `call(args)` gives the user's outputs.

    Checks that mutated inputs do not share memory, runs the graphs (an inference
    graph under no_grad), copies mutations back (but those in `written_in_place`, which
    the compiled graph wrote itself) and builds aliased outputs.
    """
    assemble = output_assembler(program, written_in_place)
    checks_aliasing = bool(program.mutated_inputs)
    is_grad_enabled = torch.is_grad_enabled
    no_grad = torch.no_grad
    run_boxed = getattr(run, "call_boxed", None)
    if callable(run_boxed):  # a compiled graph's own boxed entry: one frame less
        boxed = run_boxed
        run = lambda *args: boxed(list(args))  # noqa: E731 - only for the no_grad branch
    else:
        run_boxed = None

    restrided = tuple(index for index, _, _ in program.metadata_mutations)
    written = written_with_grad(program) if training else ()
    stored = tuple(sorted(written_in_place))

    def call(args: Sequence) -> Any:
        if checks_aliasing:
            check_mutated_inputs_unaliased(program, args)
        return aliasing_checked(args)

    def aliasing_checked(args: Sequence) -> Any:
        if written:
            _check_no_leaf_written(args, written)
        if restrided:
            if training:
                _check_no_leaf_restrided(args, restrided)
            _bump_restrided_versions(args, restrided)
        if stored:
            _bump_stored_versions(args, stored)
        if _any_autocast_enabled():
            with _autocast_off():
                return _run(args)
        return _run(args)

    def _run(args: Sequence) -> Any:
        if training or not is_grad_enabled():
            return assemble(args, run_boxed(list(args)) if run_boxed else run(*args))
        with no_grad():
            outputs = run(*args)
        return assemble(args, outputs)

    if not checks_aliasing and not restrided and run_boxed is not None:
        # NOTE: nothing to check before the graph runs (no mutated input, no restrided
        # one): one frame per call instead of three, on every call of every graph.
        def plain(args: Sequence) -> Any:
            if _any_autocast_enabled():
                with _autocast_off():
                    return _run(args)
            if training or not is_grad_enabled():
                return assemble(args, run_boxed(list(args)))
            with no_grad():
                outputs = run(*args)
            return assemble(args, outputs)

        plain.aliasing_checked = plain  # type: ignore[attr-defined]
        return plain

    # NOTE: for a caller that ran `aliased_mutated_input` on these arguments itself (the
    # check reads the storage of every argument: a module's hundreds of tensors).
    call.aliasing_checked = aliasing_checked  # type: ignore[attr-defined]
    return call
