"""Captured regions reused: a call of a block identical to one captured before replays
that call's graph nodes instead of tracing the block again.

A model looping over identical blocks (`for layer in self.layers: h = layer(h)`)
makes capture trace the same code once per block. The first call of a block
(`RegionTemplate`) keeps what tracing it made and relied on:

    the nodes it added           n0 = layer_norm(h, L0.norm.weight, ...) ... n40
    the guards it asked for      L0.training == True, L0.norm.eps == 1e-5, no hooks on L0 ...
    its arguments and result     (h,) {} -> n40

A later call of a module of the same class, with arguments of the same kind,
metadata and sources, under the same global state, is checked against it: each
guard that names the first block (`L0...`) is moved to the new block (`L1...`) and
must hold there now; a module read from it must be a module of the same class; a
tensor read from it must have the same metadata (the moved TENSOR_MATCH) and
becomes the graph input in its place. Then the nodes are copied with the new
block's tensors as inputs, the moved guards are added, and the call's result is
the copies' (fresh examples of the same metadata). Anything else falls back to
tracing the block: a guard that fails (another class, shape, training flag, a hook,
an attribute of another value), an object whose identity capture relied on (`is`,
`id()`), arguments that are not tensors, constants or values of the frame's
inputs (a KV cache object made in the frame, which each block writes), a write of
the frame the new block would read (an attribute the frame set on it) or one made
since the first call, and a first call whose trace wrote anything outside its
graph, read such a write, wrote a tensor in place or made a data-dependent shape.

Guards and graph are those tracing would have made: a guard asked for by the first
call but added before it (deduplicated) is still recorded, since a recorder sees
every guard asked for (frame_guards.GuardRecorder).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from dynamo_capture.frame_guards import GuardRecorder
from dynamo_capture.graph_printouts import name_stored_node
from dynamo_capture.output_graph import DATA_DEPENDENT_SHAPE_OPS
from dynamo_capture.sources import AttrSource, Source
from dynamo_capture.values import PythonValue, TensorValue, TupleValue, Value
from guards import Guard, ModuleStructureGuard, NNModuleGuard, artifact_logger
from guards.tensor_guards import TensorMatchGuard

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator
    from dynamo_capture.output_graph import CaptureContext

__all__ = ["ENABLED", "MIN_TEMPLATE_NODES", "MODULE_CALLS", "RegionTemplate", "module_call_counter"]
__all__ += ["record_call"]

# node.meta key: the module calls a node was made in, outermost first, each
# (call number, the module's source name, the module's class).
MODULE_CALLS = "module_calls"
module_call_counter = itertools.count()

_log = artifact_logger("perf_hints")
# Off: every call traced (tests compare the two).
ENABLED = True
# A call making fewer nodes is traced each time: checking it would cost what tracing does.
MIN_TEMPLATE_NODES = 10
# Templates kept per module class (blocks of one class in a few configurations).
MAX_TEMPLATES_PER_CLASS = 4
_PRINTED = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout)


_IN_PLACE_NAMES = (
    "iadd isub imul itruediv ifloordiv imod ipow imatmul iand ior ixor ilshift irshift"
)
_IN_PLACE_OPERATORS = frozenset(getattr(operator, name) for name in _IN_PLACE_NAMES.split())
_IN_PLACE_OPERATORS |= {operator.setitem, operator.delitem, operator.iconcat}


class _NotReusable(Exception):
    """The call cannot be replayed from this template (internal; never escapes)."""


@dataclasses.dataclass(slots=True)
class RegionTemplate:
    """The first traced call of a block: its nodes, recorded guards, arguments and result."""

    source: Source
    key: tuple
    arguments: list[TensorValue]  # the tensors among the arguments, in key order
    nodes: list[torch.fx.Node]
    inner_calls: list[tuple]  # each node's module calls inside the block, when recorded
    recorder: GuardRecorder
    result: Value
    placeholders: list[torch.fx.Node]  # graph inputs the nodes use, made for the block
    writes: tuple  # what the frame had written outside the graph (_writes)
    # the graph inputs (placeholders) the nodes use that are not arguments
    inputs: list[tuple[torch.fx.Node, TensorValue]]
    plan: Any = None  # _GuardPlan, or why there is none, made at the first replay


# ----------------------------------------------------------------- keys


def _state_key(tx: Translator) -> tuple:
    """Capture state a block's trace depends on beyond its arguments and guards."""
    ctx = tx.ctx
    autocast = tuple(
        (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        for device in ("cpu", "cuda")
    )
    return (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        autocast,
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
        ctx.state_set_in_graph,
        ctx.functorch_level,
        ctx.jvp_nesting,
        ctx.reading_ahead,
        len(ctx.open_autocasts),
        len(ctx.open_inference_modes),
    )


def _writes(ctx: CaptureContext) -> tuple:
    """What the frame has written outside the graph so far (replayed after it): a
    template is replayed only while this is as it was when the block was traced."""
    return (
        tuple((key, id(entry)) for key, entry in ctx.attr_writes.items()),
        frozenset(ctx.raw_attr_writes),
        tuple((key, id(entry)) for key, entry in ctx.shadows.items()),
        tuple((key, id(entry)) for key, entry in ctx.global_writes.items()),
        len(ctx.generators),
        len(ctx.input_hooks),  # hooks registered on inputs, replayed after the graph
    )


def _handling(tx: Translator) -> bool:
    frame: Translator | None = tx
    while frame is not None:
        if frame.handling is not None:
            return True
        frame = frame.parent
    return False


def _value_key(value: Value, tensors: list[TensorValue], nodes: dict) -> Any:
    """A hashable description of an argument; its tensors appended to `tensors`."""
    if isinstance(value, TensorValue):
        if value.data_dependent_shape:
            raise _NotReusable("a tensor of data-dependent shape")
        tensors.append(value)
        first = nodes.setdefault(value.node, len(nodes))  # the same tensor passed twice
        return ("tensor", first, _tensor_key(value.example), value.python_type)
    if isinstance(value, TupleValue) and value.source is None:
        items = tuple(_value_key(item, tensors, nodes) for item in value.items)
        return ("tuple", value.cls, items)
    if isinstance(value, PythonValue):
        if value.source is not None:
            return ("source", value.source)
        obj = value.obj
        if isinstance(obj, torch.SymInt | torch.SymFloat | torch.SymBool):
            return ("symbolic", type(obj), str(obj))
        if type(obj) in _PRINTED:
            return ("constant", type(obj), repr(obj))
        if isinstance(obj, torch.Tensor):
            raise _NotReusable("a tensor constant")
        return ("object", _Same(obj))
    raise _NotReusable(f"an argument of kind {type(value).__name__}")


class _Same:
    """An object in a key, equal only to itself (held: its id is not reused meanwhile)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _tensor_key(example: Any) -> tuple:
    return (
        example.dtype,
        example.device,
        example.layout,
        example.requires_grad,
        tuple(str(size) for size in example.shape),
        tuple(str(stride) for stride in example.stride()),
        str(example.storage_offset()),
    )


def _call_key(
    tx: Translator, module: torch.nn.Module, args: list[Value], kwargs: dict[str, Value]
) -> tuple[tuple, list[TensorValue]]:
    tensors: list[TensorValue] = []
    nodes: dict = {}
    arguments = tuple(_value_key(arg, tensors, nodes) for arg in args)
    keywords = tuple((name, _value_key(kwargs[name], tensors, nodes)) for name in sorted(kwargs))
    return (type(module), arguments, keywords, _state_key(tx)), tensors


# ----------------------------------------------------------------- sources

_MISSING = object()
_STEP_GLOBALS = {"__builtins__": __builtins__}


@functools.lru_cache(maxsize=4096)
def _step_code(step: Source) -> Any:
    """The code reading `step`'s value from its base's (bound to `b`)."""
    return compile(step.reconstruct("b"), f"<source step {type(step).__name__}>", "eval")


@functools.lru_cache(maxsize=256)
def _base_field(cls: type) -> str | None:
    """The dataclass field of a Source class holding its base (`source` by convention)."""
    names = [field.name for field in dataclasses.fields(cls) if field.init]
    return "source" if "source" in names else None


def _names_block(source: Source, block: Source) -> bool:
    """Whether `source` is reached through `block` (an error where through another
    source of the same expression: the replay could not move it)."""
    expr = block.expr
    while source is not None:
        if source == block:
            return True
        if source.expr == expr:
            raise _NotReusable(f"{source.name} names the block in another form")
        source = source.base
    return False


class _Mover:
    """Sources through the old block moved to the new one, and the values found there
    now, each computed once for a replay (blocks share their prefixes)."""

    def __init__(self, ctx: CaptureContext, old: Source, new: Source, module: Any) -> None:
        self.ctx = ctx
        self.sources: dict[Source, Source | None] = {old: new}
        self.values: dict[Source, Any] = {old: module}

    def source(self, source: Source) -> Source | None:
        """`source` moved to the new block (None: it does not name the old one)."""
        found = self.sources.get(source, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        base = source.base
        moved = None if base is None else self.source(base)
        if moved is not None:
            field = _base_field(type(source))
            if field is None or getattr(source, field) is not base:
                raise _NotReusable(f"{type(source).__name__} does not keep its base in a field")
            moved = dataclasses.replace(source, **{field: moved})
        self.sources[source] = moved
        return moved

    def value(self, source: Source) -> Any:
        """The value now at `source` moved to the new block (`source` names the old one)."""
        found = self.values.get(source, _MISSING)
        if found is not _MISSING:
            return found
        base = self.value(source.base)  # type: ignore[arg-type]
        try:
            found = eval(_step_code(source), _STEP_GLOBALS, {"b": base})  # noqa: S307
        except Exception as error:  # noqa: BLE001 - unreadable: not reusable
            raise _NotReusable(f"{source.name} cannot be read in the new block: {error}") from None
        self.values[source] = found
        return found


# ----------------------------------------------------------------- recording


def _side_effects(ctx: CaptureContext) -> tuple:
    """Capture state a block's trace must leave as it found it to be replayed."""
    return (
        _writes(ctx),
        ctx.written_reads,
        tuple(ctx._numbers),
        tuple(ctx._handed),
        len(ctx.unguarded_constants),
        ctx.transform_nodes_made,
        ctx.batching_nodes_made,
        ctx.autograd_function_nodes_made,
        bool(ctx.replaced_members),
    )


class _Recording:
    """An open recording of a block's call (see record_call)."""

    def __init__(self, tx: Translator, module_value: PythonValue, key: tuple, tensors: list):
        self.tx, self.module_value, self.key, self.tensors = tx, module_value, key, tensors
        self.before = _side_effects(tx.ctx)
        self.inputs_before = len(tx.ctx.inputs)
        self.last = tx.ctx.graph._root.prev


def _writes_in_place(node: torch.fx.Node) -> bool:
    if getattr(node.target, "__module__", None) in ("operator", "_operator"):
        return node.target in _IN_PLACE_OPERATORS  # operator.and_ and not_ compute anew
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if name.endswith("_") and not name.endswith("__"):
        return True
    if name in ("__setitem__", "__delitem__") or (name.startswith("__i") and name.endswith("__")):
        return True
    if "out" in node.kwargs:
        return True
    if node.kwargs.get("inplace") is True:
        return True
    if node.op == "call_function" and any(arg is True for arg in node.args):
        signature = _signature(node.target)
        if signature is None or "inplace" in signature.parameters:
            try:
                return (
                    signature is None or signature.bind(*node.args).arguments.get("inplace") is True
                )
            except TypeError:
                return True
    return False


def _data_dependent(node: torch.fx.Node) -> bool:
    """A result whose shape the first block's data decided (capture's examples)."""
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if name in DATA_DEPENDENT_SHAPE_OPS:
        return True
    if name in ("__getitem__", "getitem"):
        for used in node.all_input_nodes:
            example = used.meta.get("val")
            if isinstance(example, torch.Tensor) and example.dtype is torch.bool:
                return True
    return False


@functools.lru_cache(maxsize=256)
def _signature(target: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return None


def _result_ok(value: Value, inside: set) -> bool:
    if isinstance(value, TensorValue):
        example = value.example
        return (
            value.node in inside
            and not value.data_dependent_shape
            and value.source is None
            and not example._is_view()
            and example.clone().stride() == example.stride()
        )
    if isinstance(value, TupleValue):
        return value.source is None and all(_result_ok(item, inside) for item in value.items)
    if isinstance(value, PythonValue):
        return value.source is None and type(value.obj) in _PRINTED
    return False


def _finish(recording: _Recording, recorder: GuardRecorder, result: Value) -> None:
    """Keep the call as a template where replaying it would be sound (else _NotReusable)."""
    ctx = recording.tx.ctx
    source = recording.module_value.source
    if recording.before != _side_effects(ctx) or ctx.replaced_members:
        raise _NotReusable(
            "its trace wrote outside the graph, read what the frame wrote, or read symbolic numbers"
        )
    nodes, placeholders = [], []
    node = recording.last.next
    while node is not ctx.graph._root:
        (placeholders if node.op == "placeholder" else nodes).append(node)
        node = node.next
    if len(nodes) < MIN_TEMPLATE_NODES:
        return
    inside = set(nodes)
    arguments = {value.node for value in recording.tensors}
    inputs = {value.node: value for _, _, value in ctx.inputs}
    used_inputs: dict[torch.fx.Node, TensorValue] = {}
    for node in nodes:
        if node.op not in ("call_function", "call_method"):
            raise _NotReusable(f"a {node.op} node")
        if _writes_in_place(node):
            raise _NotReusable(f"it writes in place ({node.format_node()})")
        if _data_dependent(node):
            raise _NotReusable(f"its shapes depend on tensor data ({node.format_node()})")
        for used in node.all_input_nodes:
            if used in inside or used in arguments:
                continue
            if used.op != "placeholder" or used not in inputs:
                raise _NotReusable(f"it uses {used.name}, computed outside, not an argument")
            if _symbolic(inputs[used].example) or inputs[used].source is None:
                raise _NotReusable(f"its input {used.name} has symbolic sizes or no source")
            _names_block(inputs[used].source, source)  # raises where named another way
            used_inputs[used] = inputs[used]
    with ctx.fake_mode if ctx.use_fakes else contextlib.nullcontext():
        if not _result_ok(result, inside):
            raise _NotReusable(f"its result ({type(result).__name__}) is not made of its tensors")
    templates = ctx.region_templates.setdefault(type(recording.module_value.obj), [])
    if len(templates) >= MAX_TEMPLATES_PER_CLASS:
        return
    inner = [node.meta.get(MODULE_CALLS, ()) for node in nodes]
    templates.append(
        RegionTemplate(
            source, recording.key, recording.tensors, nodes, inner, recorder, result,
            placeholders, recording.before[0], list(used_inputs.items()),
        )
    )  # fmt: skip


def _symbolic(example: Any) -> bool:
    sizes = (*example.shape, *example.stride(), example.storage_offset())
    return any(not isinstance(size, int) for size in sizes)


def record_call(
    tx: Translator,
    module_value: PythonValue,
    args: list[Value],
    kwargs: dict[str, Value],
    trace: Callable[[], Value],
) -> Value:
    """`trace()` (the block's hooks and forward), replayed from a template where one
    fits, else traced and kept as a template where it may be replayed."""
    ctx = tx.ctx
    source = module_value.source
    if not ENABLED or source is None or ctx.frame_locals is None:
        return trace()
    if _handling(tx) or ctx.replaced_members:
        return trace()  # an exception being handled, or functional_call's members
    if isinstance(module_value.obj, torch.nn.modules.lazy.LazyModuleMixin):
        return trace()  # initialized by its first call
    try:
        key, tensors = _call_key(tx, module_value.obj, args, kwargs)
    except _NotReusable as why:
        _log.debug("%s traced: %s", source.name, why)
        return trace()
    for template in ctx.region_templates.get(type(module_value.obj), ()):
        if template.key != key or template.source == source:
            continue
        try:
            return _replay(tx, template, module_value, tensors)
        except _NotReusable as why:
            _log.debug(
                "%s traced, not replayed from %s: %s", source.name, template.source.name, why
            )
    recording = _Recording(tx, module_value, key, tensors)
    with ctx.guards.recording() as recorder:
        result = trace()
    try:
        _finish(recording, recorder, result)
    except _NotReusable as why:
        _log.debug("%s traced; not kept to replay: %s", source.name, why)
    return result


# ----------------------------------------------------------------- replaying


@dataclasses.dataclass(frozen=True, slots=True)
class _GuardPlan:
    """A template's recorded guards that name its block, each once, with the sources
    the guard reads (moved to the new block, read there, checked)."""

    modules: tuple[NNModuleGuard | ModuleStructureGuard, ...]
    tensors: tuple[TensorMatchGuard, ...]
    others: tuple[tuple[Guard, tuple[str, ...]], ...]  # with the fields holding sources


def _plan(template: RegionTemplate) -> _GuardPlan:
    if template.plan is None:
        template.plan = _make_plan(template)
    if isinstance(template.plan, str):
        raise _NotReusable(template.plan)
    return template.plan


def _make_plan(template: RegionTemplate) -> _GuardPlan | str:
    old = template.source
    modules, tensors, others = [], [], []
    try:
        for identity in template.recorder.identities:
            if _names_block(identity, old):
                return f"capture relied on which object {identity.name} is"
        for guard in dict.fromkeys(template.recorder.guards):
            if not any(_names_block(source, old) for source in guard.sources()):
                continue  # about something both blocks share: already in the set
            if isinstance(guard, NNModuleGuard | ModuleStructureGuard):
                modules.append(guard)
            elif isinstance(guard, TensorMatchGuard):
                if None in guard.sizes or None in guard.strides:
                    return f"{guard.source.name} has symbolic sizes"
                tensors.append(guard)
            else:
                fields = tuple(
                    field.name
                    for field in dataclasses.fields(guard)
                    if field.init and _holds_sources(getattr(guard, field.name))
                )
                others.append((guard, fields))
    except _NotReusable as why:
        return str(why)
    return _GuardPlan(tuple(modules), tuple(tensors), tuple(others))


def _holds_sources(value: Any) -> bool:
    if isinstance(value, Source):
        return True
    return isinstance(value, tuple) and bool(value) and isinstance(value[0], Source)


def _moved_guards(
    template: RegionTemplate, mover: _Mover
) -> tuple[list[Guard], list[tuple[Source, Any]]]:
    """The template's guards that name its block, moved to the new block and checked
    there now; and the tensors among them with the new block's tensors (wrapped
    rather than guarded: their guard comes with their graph input)."""
    plan = _plan(template)
    moved: list[Guard] = []
    for guard in plan.modules:
        source = mover.source(guard.source)
        assert source is not None
        module = mover.value(guard.source)
        if isinstance(guard, ModuleStructureGuard):
            if type(module) is not guard.expected_type:
                raise _NotReusable(f"{source.name} is a {type(module).__name__}")
            moved.append(ModuleStructureGuard.of(source, module))  # holding the new block's
            continue
        if type(module) is not guard.module_type:
            raise _NotReusable(f"{source.name} is a {type(module).__name__}")
        if guard.training is not None and bool(module.training) != guard.training:
            raise _NotReusable(f"{source.name} is in another training mode")
        moved.append(NNModuleGuard.of(source, module, training=guard.training is not None))
    tensors = []
    for guard in plan.tensors:
        tensor = mover.value(guard.source)
        failure = guard.failure(tensor)
        if failure is not None:
            raise _NotReusable(failure)
        tensors.append((mover.source(guard.source), tensor))
    for guard, fields in plan.others:
        changes: dict[str, Any] = {}
        for name in fields:
            value = getattr(guard, name)
            if isinstance(value, Source):
                changes[name] = mover.source(value) or value
            else:
                changes[name] = tuple(mover.source(s) or s for s in value)
        values = [_value(mover, source) for source in guard.sources()]
        try:
            failure = guard.failure(*values)
        except Exception as error:  # noqa: BLE001 - a check that raises fails
            failure = str(error)
        if failure is not None:
            raise _NotReusable(failure)
        moved.append(dataclasses.replace(guard, **changes))
    return moved, tensors


def _value(mover: _Mover, source: Source) -> Any:
    """The value the moved guard reads: the new block's, or the frame's (shared)."""
    if mover.source(source) is not None:
        return mover.value(source)
    ctx = mover.ctx
    try:
        return eval(source.expr, _STEP_GLOBALS, {"L": ctx.frame_locals, "G": ctx.frame_globals})  # noqa: S307
    except Exception as error:  # noqa: BLE001 - unreadable: not reusable
        raise _NotReusable(f"{source.name} cannot be read: {error}") from None


def _check_not_written(ctx: CaptureContext, mover: _Mover) -> None:
    """The new block's trace would read none of the frame's writes where it reads what
    the moved guards name (the old block's read none: _side_effects)."""
    for source, value in mover.values.items():
        if id(value) in ctx.shadows or id(getattr(value, "__dict__", None)) in ctx.shadows:
            raise _NotReusable(f"the frame wrote to {source.name} (in the new block)")
        if isinstance(source, AttrSource) and source.base in mover.values:
            if (id(mover.values[source.base]), source.member) in ctx.attr_writes:
                raise _NotReusable(f"the frame wrote {source.name} (in the new block)")


def _replay(
    tx: Translator, template: RegionTemplate, module_value: PythonValue, tensors: list
) -> Value:
    ctx = tx.ctx
    new = module_value.source
    assert new is not None
    if template.nodes[0].graph is not ctx.graph or any(node._erased for node in template.nodes):
        raise _NotReusable("the template's nodes left the graph")
    if _writes(ctx) != template.writes:
        raise _NotReusable("the frame wrote outside the graph since the block was traced")
    mover = _Mover(ctx, template.source, new, module_value.obj)
    guards, moved_tensors = _moved_guards(template, mover)
    if ctx.attr_writes or ctx.shadows:
        _check_not_written(ctx, mover)
    # the graph inputs the nodes use: the new block's tensors in place of the old block's
    env: dict[torch.fx.Node, Any] = {
        old.node: value.node for old, value in zip(template.arguments, tensors, strict=True)
    }
    wanted: dict[torch.fx.Node, tuple[Source, TensorValue]] = {}
    for used, value in template.inputs:
        if used in env:
            continue
        moved = mover.source(value.source)
        if moved is None:
            env[used] = used  # an input both blocks share
        else:
            wanted[used] = (moved, value)
    for guard in guards:
        ctx.guards.guard_set.add(guard)
    made = {source: ctx.wrap(tensor, source) for source, tensor in moved_tensors}
    for used, (source, value) in wanted.items():
        wrapped = made.get(source)
        # NOTE: the moved TENSOR_MATCH held, so the metadata agree; the check below
        # catches a tensor met before under another source with other metadata
        if not isinstance(wrapped, TensorValue) or _tensor_key(wrapped.example) != _tensor_key(
            value.example
        ):
            raise _NotReusable(f"{source.name} was not guarded as the block's tensor")
        env[used] = wrapped.node
    # the nodes, copied with their module calls renumbered and renamed
    renumbered: dict[tuple, tuple] = {}
    for node, inner in zip(template.nodes, template.inner_calls, strict=True):
        copy = _copied_node(ctx, node, env)
        calls = tuple(_renumbered(renumbered, tag, template.source, new) for tag in inner)
        if calls:
            copy.meta[MODULE_CALLS] = calls
        else:
            copy.meta.pop(MODULE_CALLS, None)
        env[node] = copy
    return _moved_result(ctx, template.result, env)


def _copied_node(ctx: CaptureContext, node: torch.fx.Node, env: dict) -> torch.fx.Node:
    """A copy of a template node in the graph; one named after a local is named by its
    target first and then renamed, as tracing the block again names it."""
    local = ctx.named_nodes.get(node)
    if local is None:
        return ctx.graph.node_copy(node, env.__getitem__)
    args = torch.fx.map_arg(node.args, env.__getitem__)
    kwargs = torch.fx.map_arg(node.kwargs, env.__getitem__)
    copy = ctx.graph.create_node(node.op, node.target, args, kwargs, None, node.type)
    copy.meta = dict(node.meta)
    name_stored_node(copy, local, ctx.named_nodes)
    return copy


def _renumbered(renumbered: dict[tuple, tuple], tag: tuple, old: Source, new: Source) -> tuple:
    found = renumbered.get(tag)
    if found is None:
        found = renumbered[tag] = _moved_tag(tag, old, new)
    return found


def _moved_tag(tag: tuple, old: Source, new: Source) -> tuple:
    _, name, cls = tag
    if name == old.name or name.startswith((f"{old.name}.", f"{old.name}[")):
        name = new.name + name[len(old.name) :]
    return (next(module_call_counter), name, cls)


def _moved_result(ctx: CaptureContext, value: Value, env: dict) -> Value:
    if isinstance(value, TensorValue):
        node = env[value.node]
        example = value.example
        with torch.set_grad_enabled(example.requires_grad):
            if ctx.use_fakes:
                with ctx.fake_mode:
                    fresh = example.clone()
            else:
                fresh = example.clone()
        if ctx.use_fakes:
            node.meta["val"] = fresh
        return TensorValue(node, fresh, None, value.python_type)
    if isinstance(value, TupleValue):
        return TupleValue([_moved_result(ctx, item, env) for item in value.items], value.cls)
    return value
