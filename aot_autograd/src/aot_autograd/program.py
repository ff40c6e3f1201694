"""Tracing a callable into one functional ATen graph, joint or forward-only.

`trace_program` runs the callable under an `AtenTracer` and describes what
the run time must do around the graph: which inputs were mutated (their new
values are extra graph outputs, copied back), which outputs alias an input or
each other (rebuilt as views), and which outputs are differentiable. With
`joint=True` autograd then runs on the traced forward, under the same tracer,
so the graph is (primals, tangents) -> (forward outputs, grads of the inputs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx
from torch.utils import _python_dispatch

import guards
from aot_autograd.backward_checks import check_backward_values
from aot_autograd.backward_formulas import autograd_nodes, override_backward_formulas
from aot_autograd.checkpoint_regions import RegionInterpreter
from aot_autograd.cse import eliminate_common_subexpressions
from aot_autograd.eager_kernels import EagerKernelMode
from aot_autograd.errors import (
    AotAutogradError,
    OverlappingWriteError,
    SymbolicShapeError,
    UnsupportedMutationError,
)
from aot_autograd.gradient_fixes import select_evenly_distributed_gradients
from aot_autograd.saved_tensors import (
    SavedTensors,
    inputs_read_by_backward,
    stale_saved_tensor_errors,
)
from aot_autograd.symbolic import (
    SymbolSource,
    float_inputs_of,
    is_symbolic,
    shape_env_of,
    symbol_sources,
)
from aot_autograd.tracer import (
    AtenTracer,
    GraphRecorder,
    KernelChecks,
    TensorRecord,
    _is_view_op,
)
from aot_autograd.value_assertions import ValueAssertion, ValueAssertionMode

__all__ = [
    "INPUTS_WRITTEN_IN_PLACE",
    "INPUT_MUTATIONS",
    "MUTATED_INPUT",
    "USER_VISIBLE_OUTPUTS",
    "OutputSpec",
    "TracedProgram",
    "inputs_written_in_place",
    "mark_input_mutations",
    "mark_user_visible_outputs",
    "trace_program",
    "tracing_value",
]

# The output node's meta key naming the graph outputs handed to the user as they
# are; a compiler may return those in other strides (see mark_user_visible_outputs).
USER_VISIBLE_OUTPUTS = "user_visible_output_idxs"

# The in-place contract between aot_autograd and a compiler (see mark_input_mutations):
# the output node's meta key pairing each mutated input's new value (an output index)
# with the input (a placeholder index), and the attribute of a compiled callable naming
# the inputs it wrote itself, which the run time then does not copy back.
INPUT_MUTATIONS = "input_mutation_idxs"
INPUTS_WRITTEN_IN_PLACE = "inputs_written_in_place"
# Placeholder meta flag: an input the graph writes (its new value is copied back).
MUTATED_INPUT = "mutated_input"

_log = guards.artifact_logger("aot_graphs")


# Kinds of OutputSpec viewing a forward graph output.
BASE_ALIAS_KINDS = ("base_alias", "base_alias_no_grad")


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """How the run time produces one (flattened) user output.

    kind: "graph" (forward graph output `index`), "input" (input `index` itself),
    "input_alias" (a view of input `index`), "base_alias" (a view of forward graph
    output `index`), "input_alias_no_grad" and "base_alias_no_grad" (such views made
    while grad mode was off: they require grad as their base does, and no gradient
    flows through them into it), "constant" (`value`, not a tensor).
    `geometry` is (size, stride, storage offset from the base in bytes, dtype) for views;
    `requires_grad`, `conj` and `neg` are the view's autograd flag and lazy conjugate and
    negative bits as traced (a `detach()` view does not require grad, `conj()` sets a bit).
    `base_stride` (a view of a graph output only) is the strides the base had when traced, which
    `geometry` assumes: a backend whose kernels return the base in another layout (eager
    kernels on a functionalized graph may) gets it copied to these strides first.
    `written_since_made` (a no_grad view only): the view or its base was written in place
    after the view was made, so eager's view refuses any use in grad mode (autograd cannot
    say whether the write was meant to be tracked); the rebuilt view refuses as well.
    """

    kind: str
    index: int | None = None
    geometry: tuple | None = None
    value: Any = None
    requires_grad: bool = False
    conj: bool = False
    neg: bool = False
    base_stride: tuple | None = None
    written_since_made: bool = False


def mark_user_visible_outputs(gm: fx.GraphModule, program: TracedProgram) -> None:
    """Record on `gm`'s output node which outputs reach the user untouched.

    Those are user outputs of kind "graph" that no other user output is a view of:
    nothing at run time reads their strides, so a compiler may return them in a
    layout of its own (a padded matmul's rows). Bases of aliased outputs, value
    checks and mutated inputs' new values are left out; so is every output of a
    forward graph, whose saved values the backward was compiled against.
    """
    bases = {spec.index for spec in program.outputs if spec.kind in BASE_ALIAS_KINDS}
    visible = sorted({spec.index for spec in program.outputs if spec.kind == "graph"} - bases)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    output.meta[USER_VISIBLE_OUTPUTS] = tuple(visible)


def mark_input_mutations(gm: fx.GraphModule, program: TracedProgram) -> None:
    """Record on `gm`'s output node which outputs are new values of which inputs.

    `output.meta[INPUT_MUTATIONS]` holds one (output index, placeholder index) pair per
    mutated input. `gm` is an inference graph or a forward graph (whose placeholders are
    the program's inputs and whose outputs start with the program's forward outputs).
    A compiler may store such a new value into the input's own memory as it computes
    it, where nothing else reads the input's old value; it then names those inputs in
    the INPUTS_WRITTEN_IN_PLACE attribute (a frozenset of placeholder indices) of the
    callable it returns, and the run time skips their copy back. A compiler that sets
    nothing gets every mutated input copied back.

    Inputs that get a gradient are left out (their copy back stays): the forward runs
    inside an autograd.Function, which must not change its inputs unannounced.
    """
    first = program.num_forward_outputs - len(program.mutated_inputs)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    differentiated = set(program.grad_inputs) if program.joint else set()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    pairs = tuple(
        (first + k, index)
        for k, index in enumerate(program.mutated_inputs)
        if index not in differentiated and not _expanded(placeholders[index])
    )
    output.meta[INPUT_MUTATIONS] = pairs


def _expanded(placeholder: fx.Node) -> bool:
    """Whether the input's elements share memory (a stride 0 on a dim of size above 1):
    its new value is copied back into its compact memory (runtime._compact)."""
    value = placeholder.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return False
    return any(
        isinstance(n, int) and isinstance(s, int) and s == 0 and n > 1
        for n, s in zip(value.shape, value.stride())
    )


def inputs_written_in_place(compiled: Any, program: TracedProgram) -> frozenset[int]:
    """The mutated inputs `compiled` (a compiler's result) wrote itself (see above)."""
    written = getattr(compiled, INPUTS_WRITTEN_IN_PLACE, None)
    if not written:
        return frozenset()
    written = frozenset(written)
    if not written <= set(program.mutated_inputs):
        raise AotAutogradError(
            f"the compiled graph says it wrote inputs {sorted(written)} in place, but the "
            f"graph mutates only inputs {list(program.mutated_inputs)}; a compiler may name "
            f"only inputs the graph's {INPUT_MUTATIONS!r} output meta pairs with an output"
        )
    return written


@dataclass(frozen=True, slots=True)
class TracedProgram:
    """A traced functional graph and what the run time does around it.

    Forward graph outputs are, in order: user outputs computed by the graph,
    intermediate bases of aliased outputs, `num_value_checks` boolean checks
    (a tensor value read into Python while tracing, such as `bool(t)`, still
    equals the traced value; or, for checks in `value_assertions`, a check of values
    eager makes, such as `F.one_hot`'s classes being in range), new values of
    `mutated_inputs`.
    A joint graph adds tangent placeholders (one per `differentiable` output)
    and, after the forward outputs, one grad per input in `grad_inputs`.
    With symbolic sizes, `symbol_sources` says which input gives each size
    symbol at run time (an OutputSpec's geometry may hold SymInts over them).
    """

    graph_module: fx.GraphModule
    num_inputs: int
    outputs: tuple[OutputSpec, ...]
    out_spec: Any
    num_forward_outputs: int
    mutated_inputs: tuple[int, ...]
    num_value_checks: int
    differentiable: tuple[bool, ...]
    grad_inputs: tuple[int, ...]
    joint: bool
    symbol_sources: tuple[SymbolSource, ...] = ()
    # Forward output index -> the error a backward through it raises (eager's message):
    # outputs computed with an op that has no derivative (`x // 3`).
    missing_derivatives: dict[int, str] = field(default_factory=dict)
    # Inputs in `grad_inputs` whose grad is None (no output's gradient reaches them): the
    # backward's autograd.Function takes them detached, so a backward never calls their
    # grad_fn, as eager's never reaches it (one without a derivative would raise).
    grad_free_inputs: tuple[int, ...] = ()
    # Value check index (0 is the first check) -> what its failure raises (eager's error),
    # for checks of values eager makes; a failed check not here says a value read changed.
    value_assertions: dict[int, ValueAssertion] = field(default_factory=dict)
    # Inputs whose shape, strides or offset the graph changed in place (`x.t_()`,
    # `x.unsqueeze_(0)`), each with its final (size, stride, offset in bytes, dtype) and
    # whether that offset is from the storage's start (after `as_strided_`) rather than
    # from the input's own offset: the run time restrides the caller's tensor so.
    metadata_mutations: tuple[tuple[int, tuple, bool], ...] = ()
    # Inputs eager's backward reads saved (or views of them), each with the tangent
    # numbers whose backward reads it: the run time raises eager's error where one of
    # those tangents is given and the input was written in place since the forward,
    # whatever the partitioner saved in its place (`cos(x)` for `sin(x)`'s backward).
    saved_input_readers: tuple[tuple[int, frozenset[int]], ...] = ()
    # Flat user outputs eager makes as inference tensors (made under an
    # `inference_mode()` block of the traced code): the run time returns them so
    # (`is_inference()`, and autograd refuses to save them, as eager's).
    inference_outputs: tuple[int, ...] = ()
    # What each backward check raises (eager's error) where it is not all true: checks of
    # values autograd's formulas make (see backward_checks), output by the joint graph
    # after the grads, and so by the backward graph after its grads.
    backward_assertions: tuple[ValueAssertion, ...] = ()


def _grad_free(grad_inputs: Sequence[int], grad_nodes: Sequence[Any]) -> tuple[int, ...]:
    """The inputs of `grad_inputs` whose gradient is None, unless that is all of them:
    outputs then still require grad through them, as eager's do (`torch.norm(x, 0)`
    requires grad, its gradient is zeros)."""
    free = tuple(i for i, g in zip(grad_inputs, grad_nodes) if g is None)
    return free if len(free) < len(grad_inputs) else ()


def _materialize(x: torch.Tensor) -> torch.Tensor:
    """A real tensor with `x`'s dtype, device, shape and strides (for fake inputs)."""
    real = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device=x.device)
    if real.is_floating_point() or real.is_complex():
        return real.uniform_(0.0, 1.0)
    return real.zero_()  # zeros are valid indices for embeddings and gathers


def _is_real(x: torch.Tensor) -> bool:
    return x.device.type != "meta" and type(x) in (torch.Tensor, torch.nn.Parameter)


def tracing_value(x: Any, requires_grad: bool) -> Any:
    """A private copy of example input `x` to trace on (tracing may write to it)."""
    if not isinstance(x, torch.Tensor):
        return x
    with torch.no_grad():
        if not _is_real(x):
            value = _materialize(x)
        else:  # a copy of the whole storage, so views beyond x's own elements stay valid
            storage = x.untyped_storage().clone()
            value = torch.empty(0, dtype=x.dtype, device=x.device)
            value.set_(storage, x.storage_offset(), tuple(x.shape), tuple(x.stride()))
    return value.requires_grad_(requires_grad)


def _relative_geometry(t: torch.Tensor, record: TensorRecord) -> tuple:
    """(size, stride, offset from the base in bytes, dtype) of view `t`."""
    base = record.base
    offset = t.storage_offset() * t.element_size()
    offset -= base.storage_offset * base.tensor.element_size()
    return (tuple(t.shape), tuple(t.stride()), offset, t.dtype)


def _metadata_mutations(
    recorder: Any, values: Sequence[Any]
) -> tuple[tuple[int, tuple, bool], ...]:
    """Each input the graph restrided in place (`x.t_()`), with its final geometry
    relative to itself as passed in (see TracedProgram.metadata_mutations)."""
    mutations = []
    for index, value in enumerate(values):
        if not isinstance(value, torch.Tensor):
            continue
        record = recorder.record_of(value)
        base = record.base
        if not record.chain or base.tensor is not value:
            continue
        if base.input_index != index:
            raise UnsupportedMutationError(
                f"input {index} is restrided in place while it shares memory with another "
                "input; restride a view of it (x = x.t()) instead"
            )
        geometry = _relative_geometry(value, record)
        if geometry[:3] == (*base.geometry[:2], 0):
            continue
        if any(step.op is torch.ops.aten.as_strided.default for step in record.chain):
            # as_strided_'s offset is one into the storage, whatever the input's own
            size, stride, _, dtype = geometry
            offset = value.storage_offset() * value.element_size()
            mutations.append((index, (size, stride, offset, dtype), True))
        else:
            mutations.append((index, geometry, False))
    return tuple(mutations)


def _alias_spec(kind: str, index: int, t: torch.Tensor, record: TensorRecord) -> OutputSpec:
    """How the run time rebuilds view `t` of input or graph output `index`."""
    geometry = _relative_geometry(t, record)
    # NOTE: a guards fake keeps the lazy conjugate and negative bits on its meta tensor only.
    bits = t.meta if guards.is_fake(t) else t
    flags = {"requires_grad": t.requires_grad, "conj": bits.is_conj(), "neg": bits.is_neg()}
    return OutputSpec(kind, index, geometry, **flags)


def _written_since_made(view: torch.Tensor) -> bool:
    """Whether no_grad `view` refuses use in grad mode: it or its base was written in place
    since it was made (autograd then refuses even to give its `grad_fn`)."""
    try:
        view.grad_fn  # noqa: B018 - the read is the check
    except RuntimeError:
        return True
    return False


def _cut_from_autograd(view: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether `view` of `base` requires grad but autograd's graph from it does not reach
    `base` (its node, or its leaf's): a view made while grad mode was off (`with
    torch.no_grad(): v = x.view(-1)`, then maybe viewed again), which requires grad as
    its base does while no gradient flows through it into the base."""
    if view is base or not (view.requires_grad and base.requires_grad):
        return False
    try:
        node = view.grad_fn
    except RuntimeError:  # a no_grad view whose base or itself was then modified in place
        return True
    if node is None:
        return True
    target = base.grad_fn  # (held: a node's Python object is the same while referenced)
    for fn in autograd_nodes([node]):
        if fn is target or (target is None and getattr(fn, "variable", None) is base):
            return False
    return True


_CUSTOM_FUNCTION_NODE = torch.autograd.function.BackwardCFunction


def _through_custom_function(view: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether autograd's path from output `view` back to its `base` passes a custom
    autograd Function's node (`x.view_as(x)` returned by a Function with a backward
    of its own): replaying the view ops on the base would skip that backward."""
    if not view.requires_grad:
        return False
    try:
        node = view.grad_fn
    except RuntimeError:
        return False
    target = base.grad_fn if base.requires_grad else None
    for _ in range(256):  # a chain of views, each node with the viewed tensor first
        if node is None or node is target or getattr(node, "variable", None) is base:
            return False
        if isinstance(node, _CUSTOM_FUNCTION_NODE):
            return True
        inputs = [n for n, _ in node.next_functions if n is not None]
        if len(inputs) != 1:
            return False
        node = inputs[0]
    return False


def _differentiable(t: Any) -> bool:
    if not isinstance(t, torch.Tensor):
        return False  # a size (SymInt) output
    if not (t.requires_grad and (t.is_floating_point() or t.is_complex())):
        return False
    return not _reaches_missing_derivative(t.grad_fn)


def _missing_derivatives(outputs: Sequence[Any]) -> dict[int, str]:
    """Per output needing a gradient that autograd cannot give, the error eager raises."""
    missing = {}
    for i, t in enumerate(outputs):
        if not isinstance(t, torch.Tensor) or not t.requires_grad:
            continue
        if not (t.is_floating_point() or t.is_complex()):
            continue
        if _reaches_missing_derivative(t.grad_fn):
            missing[i] = _backward_error(t)
    return missing


def _backward_error(t: torch.Tensor) -> str:
    """The message of the error autograd raises running a backward from `t`."""
    grad = torch.ones(tuple(t.shape), dtype=t.dtype, device=t.device)
    leaves = _leaves(t.grad_fn)
    try:
        with torch.enable_grad():
            if leaves:
                torch.autograd.grad(t, leaves, grad, allow_unused=True, retain_graph=True)
            else:  # (a graph without leaves: nothing to accumulate into, and autograd.grad
                # refuses an empty list of inputs)
                torch.autograd.backward(t, grad, retain_graph=True)
    except RuntimeError as error:
        return str(error)
    return "the derivative of an op computing this output is not implemented"


def _raising_backwards(
    outputs: Sequence[Any], differentiable: Sequence[bool], messages: Sequence[str]
) -> dict[int, str]:
    """The outputs whose own backward raises one of `messages`, the traced backwards' errors.

    A backward formula can fail where the forward ran (`atan2(bool_tensor, x)`: its
    gradient negates the bool operand); eager raises then at `backward()`, not at the
    call. Each differentiable output's backward is run alone, before the traced one
    (not traced: only the tracer's kernel checks and formula overrides); only those
    failing with one of the messages are kept, so a failure of tracing itself is never
    turned into a backward error. The position autograd names in a message (`invalid
    gradient at index 1`: the output's place among those differentiated together) is
    not compared, and each output keeps its own run's message.
    """
    errors = {}
    for i, (t, wanted) in enumerate(zip(outputs, differentiable)):
        leaves = _leaves(t.grad_fn) if wanted else []
        if not leaves:
            continue
        grad = torch.ones(tuple(t.shape), dtype=t.dtype, device=t.device)
        handles = override_backward_formulas([t])
        try:
            with torch.enable_grad(), torch._C._DisableAutocast(), KernelChecks():
                torch.autograd.grad(t, leaves, grad, allow_unused=True, retain_graph=True)
        except RuntimeError as error:
            if _without_positions(str(error)) in {_without_positions(m) for m in messages}:
                errors[i] = str(error)
        finally:
            for handle in handles:
                handle.remove()
    return errors


_POSITION = re.compile(r"\bat index \d+")


def _without_positions(message: str) -> str:
    """`message` with the output positions autograd names in it (`at index 1`) blanked."""
    return _POSITION.sub("at index _", message)


def _leaves(grad_fn: Any) -> list[torch.Tensor]:
    """The leaf tensors autograd's graph from `grad_fn` accumulates into."""
    leaves = []
    for fn in autograd_nodes([grad_fn]):
        variable = getattr(fn, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.append(variable)
    return leaves


def _reaches_missing_derivative(grad_fn: Any) -> bool:
    """Whether autograd's graph from `grad_fn` holds an op without a derivative.

    Such an output (`x // 3`: floor_divide has none) has no gradient to trace; it is
    returned without one, and a backward through it raises.
    """
    return any(type(fn).__name__ == "NotImplemented" for fn in autograd_nodes([grad_fn]))


class _OutputPlan:
    """Sorts the traced outputs into graph outputs, aliases and constants."""

    def __init__(
        self,
        recorder: GraphRecorder,
        values: Sequence[Any],
        flat_outs: list,
        views_as_outputs: bool | frozenset[int] = False,
    ) -> None:
        self.recorder = recorder
        self.views_as_outputs = views_as_outputs
        self._base_strides: dict[int, tuple] = {}  # per base output: the strides it has
        self.values = values
        self.graph_tensors: list[torch.Tensor] = []
        self.graph_nodes: list[fx.Node] = []
        self.specs: list[OutputSpec] = []
        family: dict[int, int] = {}
        for leaf in flat_outs:
            if isinstance(leaf, torch.Tensor):
                base = recorder.record_of(leaf).base
                family[id(base)] = family.get(id(base), 0) + 1
        base_index: dict[int, int] = {}
        for leaf in flat_outs:
            self.specs.append(self._spec(leaf, family, base_index))

    def _graph_output(self, t: torch.Tensor, node: fx.Node) -> int:
        self.graph_tensors.append(t)
        self.graph_nodes.append(node)
        return len(self.graph_nodes) - 1

    def _fresh(self, node: fx.Node, shape: Sequence, stride: Sequence) -> fx.Node:
        """`node`'s value as a tensor of its own where the graph computes it as a view
        (`t(copy(t(v), ...))`: a value written through a view of it), laid out with
        `shape` and `stride`.

        A graph output that is a view would come back from the autograd Function as a
        view made inside it, which autograd refuses to modify in place (`v.unsqueeze_(0)`
        after the call), and as a view of a buffer eager's output is not.
        """
        val = node.meta.get("val")
        if not (node.op == "call_function" and _is_view_op(node.target)) or not isinstance(
            val, torch.Tensor
        ):
            return node
        emit = self.recorder.emit
        empty = emit(
            torch.ops.aten.empty_strided.default,
            (tuple(shape), tuple(stride)),
            {"dtype": val.dtype, "device": val.device},
        )
        return emit(torch.ops.aten.copy.default, (empty, node))

    def _in_layout_of(self, geometry: tuple, node: fx.Node) -> fx.Node:
        """`node`'s value laid out with `geometry`'s shape and strides, its base's when
        made (a base written through a view may have come back from the writes in
        another layout; its views are taken with the base's strides)."""
        shape, stride, _ = geometry
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or tuple(val.stride()) == tuple(stride):
            return node
        emit = self.recorder.emit
        aten = torch.ops.aten
        empty = emit(
            aten.empty_strided.default,
            (tuple(shape), tuple(stride)),
            {"dtype": val.dtype, "device": val.device},
        )
        return emit(aten.copy.default, (empty, node))

    def _spec(self, leaf: Any, family: dict[int, int], base_index: dict[int, int]) -> OutputSpec:
        if isinstance(leaf, torch.SymInt) and leaf.node.maybe_as_int() is None:
            return OutputSpec("graph", self._graph_output(leaf, self.recorder.sizes.node_of(leaf)))
        if not isinstance(leaf, torch.Tensor):
            return OutputSpec("constant", value=leaf)
        record = self.recorder.record_of(leaf)
        base = record.base
        is_input = base.input_index is not None and base.input_index >= 0
        base_tensor = self.values[base.input_index] if is_input else base.tensor
        if leaf is not base_tensor and _through_custom_function(leaf, base_tensor):
            # NOTE: a view rebuilt from its base at run time would lose the custom
            # Function's backward between them: the graph returns it as its own output
            return OutputSpec("graph", self._graph_output(leaf, self.recorder.node_of(leaf)))
        if is_input:
            if leaf is self.values[base.input_index]:  # (restrided in place or not)
                return OutputSpec("input", base.input_index)
            if isinstance(self.views_as_outputs, frozenset) and (
                base.input_index in self.views_as_outputs
            ):
                return OutputSpec("graph", self._graph_output(leaf, self.recorder.node_of(leaf)))
            spec = _alias_spec("input_alias", base.input_index, leaf, record)
            if _cut_from_autograd(leaf, self.values[base.input_index]):
                written = _written_since_made(leaf)
                spec = dataclasses.replace(
                    spec, kind="input_alias_no_grad", written_since_made=written
                )
            return spec
        if self.views_as_outputs is not False and record.chain and not base.constant:
            return OutputSpec("graph", self._graph_output(leaf, self.recorder.node_of(leaf)))
        # A view of an intermediate comes back as eager returns it: a view of its base,
        # which the graph returns (in eager's layout) for the run time to view.
        shared = family[id(base)] > 1 and not base.constant
        if shared or (record.chain and _views_base(leaf, record)):
            t = base.tensor
            current = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
            if id(base) not in base_index:
                if current == base.geometry or t.numel() != math.prod(base.geometry[0]):
                    layout, node = base.geometry, base.node
                else:  # reshaped in place (`unsqueeze_`): the base as it is now, which
                    # autograd (and the tangent traced for it) knows by its new shape
                    layout, node = current, self.recorder.node_of(t)
                node = self._fresh(self._in_layout_of(layout, node), *layout[:2])
                base_index[id(base)] = self._graph_output(t, node)
                self._base_strides[id(base)] = tuple(layout[1])
            index = base_index[id(base)]
            if not record.chain:
                return OutputSpec("graph", index)
            spec = _alias_spec("base_alias", index, leaf, record)
            if _cut_from_autograd(leaf, t):
                written = _written_since_made(leaf)
                spec = dataclasses.replace(
                    spec, kind="base_alias_no_grad", written_since_made=written
                )
            return dataclasses.replace(spec, base_stride=self._base_strides[id(base)])
        node = self._fresh(self.recorder.node_of(leaf), leaf.shape, leaf.stride())
        return OutputSpec("graph", self._graph_output(leaf, node))


def _views_base(leaf: torch.Tensor, record: Any) -> bool:
    """Whether output `leaf` can come back as a view of its base's value: the base is an
    intermediate with the geometry it was made with (not reshaped in place by
    `unsqueeze_` and friends), and autograd sees `leaf` through the base (no detach)."""
    base = record.base
    t = base.tensor
    current = (tuple(t.shape), tuple(t.stride()), t.storage_offset())
    detached = any(step.op is torch.ops.aten.detach.default for step in record.chain)
    # (A base reshaped in place stands for its value as made only where no gradient
    # flows: autograd knows the tensor by its new shape.)
    no_grad = not leaf.requires_grad and not t.requires_grad
    return (
        not base.constant
        and (current == base.geometry or no_grad)
        and not detached
        and leaf.requires_grad == t.requires_grad
    )


def _fake_value(value: Any) -> Any:
    """A stand-in for a traced value: same dtype, device, shape and strides, no data kept."""

    def convert(t: torch.Tensor) -> torch.Tensor:
        if not _is_real(t):
            return t
        return torch.empty_strided(
            tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=t.device
        )

    return pytree.tree_map_only(torch.Tensor, convert, value)


_ALIAS_OPS = (torch.ops.aten.detach.default, torch.ops.aten.alias.default)


def _drop_aliases(graph: fx.Graph) -> None:
    """Remove detach/alias nodes: in a functional graph they are the identity (mutates graph)."""
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in _ALIAS_OPS:
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)


def _finish(recorder: GraphRecorder, outputs: list) -> fx.GraphModule:
    recorder.graph.output(tuple(outputs))
    _drop_aliases(recorder.graph)
    recorder.graph.eliminate_dead_code()
    for node in recorder.graph.nodes:
        if "val" in node.meta:
            node.meta["val"] = _fake_value(node.meta["val"])
    recorder._alive.clear()
    gm = fx.GraphModule(dict(recorder.constants), recorder.graph)
    gm.graph.lint()
    return gm


def decompose_functional(gm: fx.GraphModule, decompositions: Mapping) -> fx.GraphModule:
    """`gm` (functional) traced again with `decompositions` applied, views included.

    Placeholders keep their names. Tracing runs on guards fakes, or where they
    cannot follow, on real tensors made up for the placeholders.
    """
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = next((v.fake_mode for v in vals if guards.is_fake(v)), None) or guards.FakeTensorMode()
    fakes = [
        mode.from_real(v) if isinstance(v, torch.Tensor) and not guards.is_fake(v) else v
        for v in vals
    ]
    # NOTE: entering a mode already on the stack would put it there twice: meta kernels
    # would then dispatch back into it with plain meta tensors (and specialize their sizes).
    active = mode in _python_dispatch._get_current_dispatch_mode_stack()
    try:
        with contextlib.nullcontext() if active else mode:
            return _retrace(gm, decompositions, fakes)
    except Exception as error:  # noqa: BLE001 - the real retrace decides
        if is_symbolic(vals) or float_inputs_of(gm):
            raise _symbolic_failure("decomposing", error) from error
        _log.info("decomposing on fakes failed (%s); using real tensors", error)
    reals = [_materialize(v) if isinstance(v, torch.Tensor) else v for v in vals]
    with torch.random.fork_rng(devices=_cuda_devices(reals)):
        return _retrace(gm, decompositions, reals)


def _retrace(gm: fx.GraphModule, decompositions: Mapping, values: list) -> fx.GraphModule:
    recorder = GraphRecorder()
    recorder.float_inputs = float_inputs_of(gm)
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    for index, (name, value) in enumerate(zip(names, values)):
        recorder.add_input(name, value, index if index in recorder.float_inputs else -1)
    tracer = AtenTracer(recorder, decompositions)
    # The graph is ATen after autocast: its casts are ops of their own, not to be redone.
    with torch.no_grad(), torch._C._DisableAutocast(), tracer:
        outputs = RegionInterpreter(gm).run(*values)  # (keeps checkpoint regions' tags)
    return _finish(recorder, [_retraced_output(recorder, o) for o in outputs])


def _retraced_output(recorder: GraphRecorder, value: Any) -> Any:
    """The node of a retraced graph's output: a tensor's, or for a symbolic size (`x.shape[0]`
    returned, or handed to the frame's side effects) the node computing it from the inputs
    (a SymInt left in the output is the trace's own symbol, returned as is at run time)."""
    if isinstance(value, torch.Tensor):
        return recorder.node_of(value)
    if isinstance(value, torch.SymInt | torch.SymFloat):
        return recorder.sizes.node_of(value)
    return value


def _cuda_devices(values: Sequence[Any]) -> list[int]:
    """The CUDA devices whose generators tracing forks: none without a GPU (fakes on a
    "cuda" device stand for CUDA tensors there, and draw nothing)."""
    if not torch.cuda.is_available():
        return []
    return sorted(
        {v.device.index or 0 for v in values if isinstance(v, torch.Tensor) and v.is_cuda}
    )


def _fake_mode_for(example_inputs: Sequence[Any]) -> Any:
    """The guards FakeTensorMode of the example inputs' fakes, or a new one."""
    for x in example_inputs:
        if guards.is_fake(x):
            return x.fake_mode
    return guards.FakeTensorMode(shape_env=shape_env_of(example_inputs))


def _fake_tracing_value(x: Any, requires_grad: bool, mode: Any) -> Any:
    """A fake of example input `x` to trace on, a leaf requiring grad if asked."""
    if not isinstance(x, torch.Tensor):
        return x
    if guards.is_fake(x):
        value = x.detach()
    else:
        # NOTE: the fake is detached, not the real tensor: `x.detach()` under the active
        # mode shares `x`'s version counter with the fake it gives, and a write into the
        # input while tracing bumped the caller's tensor's version.
        value = mode.from_real(x if _is_real(x) else _materialize(x)).detach()
    return value.requires_grad_(requires_grad)


def trace_program(
    fn: Callable,
    example_inputs: Sequence[Any],
    *,
    decompositions: Mapping | None = None,
    joint: bool = True,
    fake: bool = True,
    float_inputs: Mapping[int, torch.SymFloat] | None = None,
    views_as_outputs: bool | frozenset[int] = False,
) -> TracedProgram:
    """Trace `fn(*example_inputs)` to a functional ATen graph (joint when `joint`).

    With `fake` (the default) tracing runs on guards fakes: no real compute. Where
    fakes cannot follow (a value read into Python, an op without a fake rule, a
    fake kernel error) it runs again on private copies of the inputs, and logs why;
    an error of the traced code itself then comes from that real run.

    Example inputs with symbolic sizes (fakes over a `guards.ShapeEnv`, SymInts)
    give a graph with symbolic sizes: SymInt inputs stay placeholders, and sizes
    ops take are computed from them. There is no real run to fall back on then:
    a failure raises `SymbolicShapeError`.

    `float_inputs` (input index -> a `torch.SymFloat` over that ShapeEnv) names the
    inputs that are Python floats passed as 0-d tensors: their `.item()` is that
    symbolic value, and arithmetic on it is traced as nodes, not read as a constant.

    `views_as_outputs`: an output that views an intermediate is the graph's output
    itself (its view node), not rebuilt by the run time from its base's
    (`OutputSpec("graph")`, for a caller that takes the graph's outputs as they come:
    subclass_program); a frozenset of input indices says the same of views of those
    inputs as well (a gradient viewing its tangent).
    """
    float_inputs = dict(float_inputs or {})
    symbolic = is_symbolic(list(example_inputs)) or bool(float_inputs)
    # Read before tracing: a symbol that tracing finds constant no longer shows in the sizes.
    sources = symbol_sources(example_inputs, float_inputs)
    if fake or symbolic:
        mode = _fake_mode_for(example_inputs)
        made_here = not any(guards.is_fake(x) for x in example_inputs)
        try:
            with mode:
                program = _trace(
                    fn, example_inputs, decompositions, joint, mode, float_inputs, views_as_outputs
                )
            return dataclasses.replace(program, symbol_sources=sources)
        except AotAutogradError:
            raise
        except Exception as error:  # noqa: BLE001 - any fake failure: the real trace decides
            if symbolic:
                raise _symbolic_failure("tracing", error) from error
            _log.info(
                "tracing on fakes failed (%s: %s); tracing on real tensors",
                type(error).__name__,
                error,
            )
        finally:
            # NOTE: a mode made here converted the caller's real inputs, and its converter
            # holds each (real, fake) pair, while each fake holds the mode: the caller's
            # tensors, the fakes and the graph outlived the compiled function, a cycle
            # `gc.collect()` did not free (tests/test_trace_lifetimes.py). Capture drops
            # its own mode's reals the same way.
            if made_here:
                mode.converter.forget_real_tensors()
    return _trace(fn, example_inputs, decompositions, joint, None, None, views_as_outputs)


def _symbolic_failure(what: str, error: Exception) -> SymbolicShapeError:
    return SymbolicShapeError(
        f"{what} with symbolic sizes failed ({type(error).__name__}: {error}); compile the "
        "graph with static sizes (its example inputs) instead"
    )


class _BackwardRaises(Exception):  # noqa: N818 - a signal between two traces, never raised out
    """The traced backward raised `message`: trace again, finding the outputs whose own
    backward raises it (a formula eager fails in too) and leaving them out."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _trace(
    fn: Callable,
    example_inputs: Sequence[Any],
    decompositions: Mapping | None,
    joint: bool,
    mode: Any,
    float_inputs: Mapping[int, torch.SymFloat] | None = None,
    views_as_outputs: bool | frozenset[int] = False,
) -> TracedProgram:
    # NOTE: a captured graph's torch.set_default_dtype nodes run while tracing (the
    # ATen graph keeps no such switch, its factories carry their dtypes): the default
    # dtype in force is put back after the trace, or the graph would run under another
    # NOTE: outputs whose backwards fail with different messages (a root's shape check,
    # a formula's returned gradient) are found one message at a time: each trace leaves
    # out the outputs failing with the messages seen so far; a message seen twice is
    # tracing's own failure, raised as it is.
    default_dtype = torch.get_default_dtype()
    backward_errors: tuple[str, ...] = ()
    writable = False
    try:
        while True:
            try:
                with _functorch_levels_closed():
                    return _trace_once(
                        fn, example_inputs, decompositions, joint, mode, backward_errors,
                        float_inputs, views_as_outputs, writable,
                    )  # fmt: skip
            except _WritesGradInput:
                writable = True
            except _BackwardRaises as raised:
                seen = {_without_positions(m) for m in backward_errors}
                if _without_positions(raised.message) in seen:
                    raise raised.__cause__ from None
                backward_errors += (raised.message,)
    finally:
        torch.set_default_dtype(default_dtype)


@contextlib.contextmanager
def _functorch_levels_closed() -> Iterator[None]:
    """A trace that raises inside a vmap traced from the graph (its `_vmap_increment_nesting`
    run, its decrement not: functorch's randomness="error" refusing a random op) leaves
    functorch's level open: the next trace, and every later operation, would run
    batched. The layer stack's depth found is put back, as torch.compile does."""
    depth = torch._C._functorch.get_dynamic_layer_stack_depth()
    try:
        yield
    finally:
        if torch._C._functorch.get_dynamic_layer_stack_depth() != depth:
            torch._C._functorch.pop_dynamic_layer_stack_and_undo_to_depth(depth)


_LEAF_WRITE = "a leaf Variable that requires grad is being used in an in-place operation"


class _WritesGradInput(Exception):  # noqa: N818 - a signal between two traces, never raised out
    """The traced code wrote in place into an input requiring grad, traced as a leaf:
    trace again with those inputs as non-leaves (see `_writable_value`)."""


class _NonLeafAlias(torch.autograd.Function):
    """The identity, as a non-leaf over the same memory and geometry (not a view)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def _writable_value(value: Any) -> tuple[Any, Any]:
    """(the value to trace on, the leaf to differentiate with respect to) for an input.

    An input requiring grad is traced as a non-leaf (an untraced identity of a leaf,
    with its storage, offset and strides) where the graph writes into it in place, as
    eager allows for the caller's non-leaf tensors: autograd then records the write,
    and the input's new value comes out as a differentiable graph output whose gradient
    flows back into the input's old value, which is the hidden leaf's. Whether the
    caller's tensor is a leaf (eager refuses the write then) is checked at every call
    (runtime `_check_no_leaf_written`).
    """
    if not isinstance(value, torch.Tensor) or not value.requires_grad:
        return value, value
    with torch.enable_grad():
        return _NonLeafAlias.apply(value), value


def _trace_once(
    fn: Callable,
    example_inputs: Sequence[Any],
    decompositions: Mapping | None,
    joint: bool,
    mode: Any,
    backward_errors: tuple[str, ...] = (),
    float_inputs: Mapping[int, torch.SymFloat] | None = None,
    views_as_outputs: bool | frozenset[int] = False,
    writable: bool = False,
) -> TracedProgram:
    """One trace. `backward_errors`: the errors earlier traces' backwards raised on real
    tensors; the outputs whose own backward raises one of them are left out of the traced
    backward, and the compiled function raises it at their backward, as eager does.
    `writable`: inputs requiring grad are traced as non-leaves (see `_writable_value`)."""
    wants_grad = [joint and isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs]
    if mode is None:
        values = [tracing_value(x, g) for x, g in zip(example_inputs, wants_grad)]
    else:
        values = [_fake_tracing_value(x, g, mode) for x, g in zip(example_inputs, wants_grad)]
    leaves = values
    if writable:
        values, leaves = map(list, zip(*map(_writable_value, values))) if values else ([], [])
    nodes_before = [v.grad_fn if isinstance(v, torch.Tensor) else None for v in values]
    recorder = GraphRecorder()
    recorder.float_inputs = dict(float_inputs or {})
    for i, value in enumerate(values):
        recorder.add_input(f"primals_{i + 1}", value, i)
    tracer = AtenTracer(recorder, decompositions, keep_views=True)
    saved = SavedTensors(recorder)
    hooks = saved.hooks
    # NOTE: tracing on real tensors draws random numbers; forking the RNG keeps compiling
    # invisible to the caller's seed, so compiled runs reproduce eager-style seeding.
    rng = torch.random.fork_rng(devices=_cuda_devices(values))
    assertions = ValueAssertionMode(recorder.record_value_assertion)
    with rng, torch.set_grad_enabled(joint), hooks, tracer, assertions, EagerKernelMode():
        try:
            outs = fn(*values)
        except RuntimeError as error:
            if _LEAF_WRITE not in str(error):
                raise
            if joint and not writable and any(wants_grad):
                # NOTE: traced, every input is a leaf; the caller's tensor may be a leaf
                # (eager raises this, checked at each call) or not (eager writes it).
                raise _WritesGradInput from error
            # (a leaf the traced code made itself: eager's ops give eager's error)
            raise UnsupportedMutationError(
                "the graph writes in place into a leaf tensor that requires grad, which "
                "eager refuses too; .clone() the tensor before writing to it"
            ) from error
    flat_outs, out_spec = pytree.tree_flatten(outs)
    plan = _OutputPlan(recorder, values, flat_outs, views_as_outputs)
    states = {id(r.base): r.base for r in recorder.records.values()}.values()
    mutated = sorted(
        (s.input_index, s.node if s.written is None else s.written)
        for s in states
        if s.input_index is not None and s.version > 0
    )
    _keep_unused_checked_ops(recorder, [*plan.graph_nodes, *(node for _, node in mutated)])
    checks = list(recorder.value_checks)
    recorder.allow_value_reads = False
    forward_nodes = [*plan.graph_nodes, *checks, *(node for _, node in mutated)]
    differentiable = [_differentiable(t) for t in plan.graph_tensors]
    raising_backward = {}
    if joint and backward_errors:
        raising_backward = _raising_backwards(plan.graph_tensors, differentiable, backward_errors)
        differentiable = [d and i not in raising_backward for i, d in enumerate(differentiable)]
    missing = {}
    if joint:
        missing = stale_saved_tensor_errors(saved, plan.graph_tensors, _leaves)
        missing.update(_missing_derivatives(plan.graph_tensors))
        missing.update(raising_backward)
    written = [values[i] for i, _ in mutated]
    metadata_mutations = _metadata_mutations(recorder, values)
    differentiable += [False] * len(checks)
    # NOTE: an input not requiring grad written with a value that does (`x.add_(w)`)
    # requires grad afterwards in eager, its new value's gradient flowing into `w`:
    # its write is differentiable too, traced as a leaf or not
    if writable or joint:
        writes = _differentiable_writes(mutated, values, nodes_before)
        restrided = {index for index, _, _ in metadata_mutations}
        if any(w and i in restrided for w, (i, _) in zip(writes, mutated)):
            # NOTE: the new value comes back in the input's old geometry, its gradient
            # in the new one; not expressed yet
            raise UnsupportedMutationError(
                "the graph writes in place into an input that requires grad and changes "
                "its shape or strides in place (t_, unsqueeze_); restride a view of it "
                "(x = x.t()) instead"
            )
        differentiable += writes
    else:
        differentiable += [False] * len(mutated)
    grad_inputs: list[int] = []
    grad_nodes: list[Any] = []
    backward_checks: list[tuple[fx.Node, ValueAssertion]] = []
    saved_input_readers: tuple = ()
    if joint:
        grad_inputs = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
        grad_inputs = [i for i in grad_inputs if values[i].requires_grad]
        with torch.random.fork_rng(devices=_cuda_devices(values)):
            try:
                saved.reads = []
                tensors = [*plan.graph_tensors, *([None] * len(checks)), *written]
                grad_nodes, backward_checks = _trace_backward(
                    recorder, tracer, hooks, tensors, leaves, grad_inputs, differentiable
                )
                outputs = [t for t, d in zip(tensors, differentiable) if d]
                saved_input_readers = inputs_read_by_backward(saved.reads, outputs)
                saved.reads = None
            except OverlappingWriteError as error:
                # Eager's refusal, decided by the strides (fakes have them): autograd's
                # backward of a write into an expanded view copies into the overlap.
                raise _BackwardRaises(str(error)) from error
            except AotAutogradError:
                raise
            except RuntimeError as error:
                # NOTE: on fakes a failure may be the fakes' own (a data-dependent size):
                # trace_program traces on real tensors then, where this is eager's error.
                if mode is not None:
                    raise
                raise _BackwardRaises(str(error)) from error
    check_nodes = [node for node, _ in backward_checks]
    gm = _finish(recorder, [*forward_nodes, *grad_nodes, *check_nodes])
    if joint:
        select_evenly_distributed_gradients(gm)
    if decompositions and any(n.target in decompositions for n in gm.graph.nodes):
        gm = decompose_functional(gm, decompositions)
    eliminate_common_subexpressions(gm)
    _mark_mutated_inputs(gm, [i for i, _ in mutated])
    return TracedProgram(
        graph_module=gm,
        num_inputs=len(values),
        outputs=tuple(plan.specs),
        out_spec=out_spec,
        num_forward_outputs=len(forward_nodes),
        mutated_inputs=tuple(i for i, _ in mutated),
        metadata_mutations=metadata_mutations,
        num_value_checks=len(checks),
        differentiable=tuple(differentiable),
        grad_inputs=tuple(grad_inputs),
        joint=joint,
        missing_derivatives=missing,
        grad_free_inputs=_grad_free(grad_inputs, grad_nodes),
        backward_assertions=tuple(assertion for _, assertion in backward_checks),
        value_assertions=dict(recorder.value_assertions),
        saved_input_readers=saved_input_readers,
        inference_outputs=_inference_outputs(flat_outs),
    )


def _differentiable_writes(
    mutated: Sequence[tuple[int, Any]], values: Sequence[Any], nodes_before: Sequence[Any]
) -> list[bool]:
    """Per mutated input (traced as a non-leaf, see `_writable_value`, or not requiring
    grad before the write), whether its new
    value is differentiable: autograd recorded a write into it (its `grad_fn` changed),
    as eager records one made in grad mode. A write made under no_grad only is not
    (eager's tensor keeps its node and takes the new data unrecorded)."""
    flags = []
    for index, _ in mutated:
        value = values[index]
        if not value.requires_grad or value.grad_fn is nodes_before[index]:
            flags.append(False)
            continue
        if not _differentiable(value):
            raise UnsupportedMutationError(
                f"input {index} is written in place by an op without a derivative while it "
                "requires grad; write into a clone of it, or detach it first"
            )
        flags.append(True)
    return flags


def _inference_outputs(flat_outs: Sequence[Any]) -> tuple[int, ...]:
    return tuple(
        i for i, t in enumerate(flat_outs) if isinstance(t, torch.Tensor) and t.is_inference()
    )


def _mark_mutated_inputs(gm: fx.GraphModule, indices: Sequence[int]) -> None:
    """Flag the placeholders of the inputs the graph writes (`meta[MUTATED_INPUT]`): the
    run time copies new values into them after the forward, so a partitioner must not
    save them (or views of them) for the backward where it can save something else."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for index in indices:
        placeholders[index].meta[MUTATED_INPUT] = True


def _keep_unused_checked_ops(recorder: GraphRecorder, outputs: Sequence[Any]) -> None:
    """Keep the ops whose kernels check values (`checks_values`: an index tensor, an
    integer divisor) where nothing uses their results, as value checks.

    Eager raises on an index out of range or an integer division by zero even where the
    result is not used; dead code elimination would drop the op and its check. Each such
    result gets a check that is always true but reads it (`isnan(r) | ~isnan(r)`, or
    `r == r` for integers), so the compiled graph computes the op, and its check, at
    every call.
    """
    live: set[fx.Node] = set()
    stack = [n for n in [*outputs, *recorder.value_checks] if isinstance(n, fx.Node)]
    while stack:
        node = stack.pop()
        if node not in live:
            live.add(node)
            stack.extend(node.all_input_nodes)
    for result in recorder.value_checked_results:
        node = recorder.node_of(result)
        if node in live or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        if node.meta["val"].dtype.is_floating_point or node.meta["val"].dtype.is_complex:
            is_nan = recorder.emit(torch.ops.aten.isnan.default, (node,))
            not_nan = recorder.emit(torch.ops.aten.logical_not.default, (is_nan,))
            check = recorder.emit(torch.ops.aten.logical_or.default, (is_nan, not_nan))
        else:  # `isnan` of an integer is constant, and compilers fold it away
            check = recorder.emit(torch.ops.aten.eq.Tensor, (node, node))
        recorder.value_checks.append(check)
        live.add(node)
    recorder.value_checked_results.clear()


def _cut_no_grad_view(t: torch.Tensor) -> bool:
    """Whether `t` is a view made under no_grad: it requires grad, and no grad_fn leads
    from it to what it views."""
    return t._is_view() and t.grad_fn is None and t.requires_grad


def _trace_backward(
    recorder: GraphRecorder,
    tracer: AtenTracer,
    hooks: Any,
    tensors: Sequence[Any],
    values: Sequence[Any],
    grad_inputs: list[int],
    differentiable: Sequence[bool],
) -> tuple[list[Any], list[tuple[fx.Node, ValueAssertion]]]:
    """Run autograd on the traced forward under the tracer, from the forward outputs'
    `tensors` that are `differentiable` to the `values` of `grad_inputs`; the nodes of the
    input grads, and those of the backward's checks of values (see backward_checks)
    with their errors."""
    outputs = [t for t, d in zip(tensors, differentiable) if d]
    if not outputs or not grad_inputs:
        return [None] * len(grad_inputs), []
    tangents = []
    for j, t in enumerate(outputs):
        tangent = torch.ones(tuple(t.shape), dtype=t.dtype, device=t.device)
        recorder.add_input(f"tangents_{j + 1}", tangent, -1)
        tangents.append(tangent)
    # NOTE: the backward is traced with autocast off, as eager runs a `backward()` called
    # after the autocast block: each backward op takes the dtypes its forward op's casts
    # gave (an autocast-disabled float32 region differentiates in float32).
    # NOTE: formulas that branch on tensor data are replaced (see backward_formulas).
    checks: list[tuple[torch.Tensor, ValueAssertion]] = []

    def assert_value(predicate: torch.Tensor, error: str, message: str) -> None:
        checks.append((predicate, ValueAssertion(error, message)))

    # A view made under no_grad of a tensor that requires grad (`with no_grad: v =
    # x.narrow(...)`) requires grad without a grad_fn: no gradient flows from it to the
    # inputs, as in eager, and autograd refuses it as an output to differentiate.
    # (Its tangent stays a placeholder, unused.)
    reaching = [(t, g) for t, g in zip(outputs, tangents) if not _cut_no_grad_view(t)]
    if not reaching:
        return [None] * len(grad_inputs), []
    outputs, tangents = [t for t, _ in reaching], [g for _, g in reaching]
    handles = override_backward_formulas(outputs) + check_backward_values(outputs, assert_value)
    try:
        with torch.enable_grad(), torch._C._DisableAutocast(), hooks, tracer:
            grads = torch.autograd.grad(
                outputs, [values[i] for i in grad_inputs], tangents, allow_unused=True
            )
    finally:
        for handle in handles:
            handle.remove()
    grad_nodes = [None if g is None else recorder.node_of(g) for g in grads]
    return grad_nodes, [(recorder.node_of(t), assertion) for t, assertion in checks]
