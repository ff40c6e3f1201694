"""ATen-level tracing with functionalization, on any tensors (real or fake).

`AtenTracer` is a TorchDispatchMode: every ATen call that reaches it runs on
the tensors it was given and is recorded into an FX graph by a
`GraphRecorder`. Decompositions from the table passed in run under the same
mode, so the ops they call are traced (and decomposed) in turn.

The recorder functionalizes as it records: it knows, for every tensor it has
seen, its base (the tensor owning the memory) and the chain of view ops from
that base. An in-place op is recorded as its functional variant; the new
value is scattered into the base through the inverse view chain, and every
other view of that base is replayed from the new base value the next time it
is read. No mutating op reaches the graph.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch import fx
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import guards
from aot_autograd.checkpoint_regions import current_region, tag_nodes_after
from aot_autograd.device_checks import check_devices_agree
from aot_autograd.errors import (
    AotAutogradError,
    OverlappingWriteError,
    UnsupportedMutationError,
)
from aot_autograd.kernel_checks import check_kernel_accepts, checks_values
from aot_autograd.mutations import (
    DRAWN_IN_CONTIGUOUS_ORDER,
    functional_variant,
    memory_order,
    mutated_arguments,
)
from aot_autograd.overlap import check_reads_of_written_memory
from aot_autograd.symbolic import SizeNodes
from aot_autograd.value_assertions import ValueAssertion
from aot_autograd.views import (
    ViewStep,
    merge_aliases,
    normalized_args,
    replay,
    scatter_into_parent,
)
from guards.tensor_subclasses import is_traceable_subclass_type

__all__ = ["AtenTracer", "BaseState", "GraphRecorder", "KernelChecks", "TensorRecord"]

aten = torch.ops.aten

# NOTE: ops reach this mode after autocast cast their arguments (the Python key sits
# below the autocast keys); what a decomposition calls here is already in its region's
# dtypes and must not be cast again, whichever autocast state is on.
_autocast_off = torch._C._DisableAutocast

_FRESH_CONSTANT_OPS = (aten.lift_fresh.default,)
_RESIZE_OPS = (aten.resize_.default, aten.resize_as_.default)
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
# Ops returning a Python bool computed from tensor data: checked at every call like `.item()`.
_DATA_READ_OPS = (aten.allclose.default, aten.equal.default)


@dataclass(slots=True)
class BaseState:
    """The memory a family of aliasing tensors shares: its current value and version."""

    node: fx.Node
    version: int = 0
    input_index: int | None = None
    constant: bool = False
    fresh: bool = False
    storage_offset: int = 0
    tensor: Any = None
    # (shape, strides, offset) `tensor` had when it became a base (`unsqueeze_` and
    # friends may change the tensor's own geometry later).
    geometry: tuple = ()
    # The last write's value before it was restrided to the base's layout (see
    # GraphRecorder._in_layout_of), else None: a mutated input's new value as the graph
    # returns it, so a compiler sees the write itself (a scatter it can do in place).
    written: Any = None


@dataclass(slots=True)
class TensorRecord:
    """What the recorder knows of one traced tensor: its node (as of `version`) and its view chain."""

    node: fx.Node
    base: BaseState
    chain: tuple[ViewStep, ...]
    version: int
    geometry: tuple = field(default=())


def _geometry(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _numel(shape: tuple) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _is_contiguous(shape: tuple, stride: tuple) -> bool:
    expected = 1
    for size, step in reversed(list(zip(shape, stride))):
        if size != 1 and step != expected:
            return False
        expected *= size
    return True


def _has_no_elements(t: torch.Tensor) -> bool:
    """Whether `t` surely has no elements (a size 0 that is not symbolic)."""
    return any(isinstance(s, int) and s == 0 for s in t.shape)


def _has_symbolic_geometry(t: torch.Tensor) -> bool:
    return any(isinstance(s, torch.SymInt) for s in (*t.shape, *t.stride()))


def _size_expression(value: Any) -> sympy.Expr:
    return value.node.expr if isinstance(value, torch.SymInt) else sympy.Integer(value)


def _contiguous_by_expression(t: torch.Tensor) -> bool:
    """Whether `t`'s strides are, as expressions of its sizes, the row-major ones (no
    guard: sizes that make other strides row-major too are not considered)."""
    expected = sympy.Integer(1)
    for size, stride in reversed(list(zip(t.shape, t.stride()))):
        size = _size_expression(size)
        if size != 1 and sympy.expand(_size_expression(stride) - expected) != 0:
            return False
        expected = expected * size
    return True


def _is_dense(t: torch.Tensor) -> bool:
    """Whether `t`'s elements fill its memory exactly (no holes, no overlap), in any order."""
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride()), key=lambda p: p[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def _aliased_dims(geometry: tuple) -> list[int]:
    """Dims of a (shape, stride, offset) geometry whose elements share memory (stride 0)."""
    if not geometry:
        return []
    shape, stride, _ = geometry
    return [
        d
        for d, (n, step) in enumerate(zip(shape, stride))
        if isinstance(n, int) and isinstance(step, int) and step == 0 and n > 1
    ]


def _symbolic_aliased_dims(geometry: tuple) -> list[int]:
    """Dims of stride 0 whose size is symbolic (never 0 or 1: those are specialized)."""
    if not geometry:
        return []
    shape, stride, _ = geometry
    return [
        d
        for d, (n, step) in enumerate(zip(shape, stride))
        if isinstance(n, torch.SymInt) and isinstance(step, int) and step == 0
    ]


def _keyword_only(op: Any, kwargs: dict) -> dict:
    names = [a.name for a in op._schema.arguments if a.kwarg_only]
    return {name: kwargs[name] for name in names if name in kwargs}


def _is_view_op(op: Any) -> bool:
    return isinstance(op, torch._ops.OpOverload) and any(
        r.alias_info is not None and not r.alias_info.is_write for r in op._schema.returns
    )


def _returns_fresh(op: Any) -> bool:
    """Whether `op`'s schema says its results are new tensors: no view, no in-place write."""
    return (
        isinstance(op, torch._ops.OpOverload)
        and not _is_view_op(op)
        and not mutated_arguments(op)
        and not any(r.alias_info is not None for r in op._schema.returns)
    )


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


class GraphRecorder:
    """Builds a functional ATen FX graph from the calls an `AtenTracer` sees."""

    def __init__(self) -> None:
        self.graph = fx.Graph()
        self.records: dict[int, TensorRecord] = {}
        self.constants: dict[str, torch.Tensor] = {}
        # Nodes computing `value == traced value` for each tensor read into Python.
        self.value_checks: list[fx.Node] = []
        # Position in value_checks -> what a failed check raises, for checks of values
        # eager makes (value_assertions); the others say a value read changed.
        self.value_assertions: dict[int, ValueAssertion] = {}
        # Results of ops whose kernels check their arguments' values (an index in range,
        # an integer divisor not zero): kept even where unused.
        self.value_checked_results: list[torch.Tensor] = []
        self.allow_value_reads = True
        self._alive: list[Any] = []  # keeps traced tensors alive so their ids stay unique
        # Symbolic sizes an op takes (SymInts) become nodes computing them from the inputs.
        self.sizes = SizeNodes(self.graph)
        # Input index -> the symbolic value of a float input (a 0-d tensor read with
        # `.item()`), and the node reading it once read.
        self.float_inputs: dict[int, torch.SymFloat] = {}
        self._float_reads: dict[int, fx.Node] = {}

    # -- tensors and their nodes ---------------------------------------------------------
    def add_input(self, name: str, value: Any, index: int) -> fx.Node:
        """A placeholder for graph input `index`, holding example `value`."""
        node = self._placeholder(name)
        node.meta["val"] = value
        self.sizes.bind(node, value)
        if isinstance(value, torch.Tensor):
            self._new_base(value, node, input_index=index)
        return node

    def _placeholder(self, name: str) -> fx.Node:
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        if placeholders:
            with self.graph.inserting_after(placeholders[-1]):
                return self.graph.placeholder(name)
        first = next(iter(self.graph.nodes), None)
        if first is None:
            return self.graph.placeholder(name)
        with self.graph.inserting_before(first):
            return self.graph.placeholder(name)

    def _new_base(self, t: torch.Tensor, node: fx.Node, **state: Any) -> TensorRecord:
        base = BaseState(node, storage_offset=t.storage_offset(), tensor=t, **state)
        base.geometry = _geometry(t)
        record = TensorRecord(node, base, (), 0, _geometry(t))
        self.records[id(t)] = record
        self._alive.append(t)
        return record

    def aliases_any(self, results: Any, tensors: Any) -> bool:
        """Whether a tensor of `results` is one of `tensors` or shares a base with one."""
        bases = set()
        for t in _tensors(tensors):
            record = self.records.get(id(t))
            bases.add(id(record.base) if record is not None else None)
        for r in _tensors(results):
            if any(r is t for t in _tensors(tensors)):
                return True
            record = self.records.get(id(r))
            if record is not None and id(record.base) in bases:
                return True
        return False

    def make_fresh(self, results: Any) -> None:
        """Each tensor of `results` becomes a base of its own, holding its current value.

        For the results of an op whose schema says they are new tensors, computed by a
        decomposition as views of the decomposition's own intermediates: to autograd and
        to eager they alias nothing, and a write into one must reach neither the
        intermediate nor another result (the gradient follows the op's autograd history).
        """
        tensors = _tensors(results)
        for r in tensors:
            record = self.records.get(id(r))
            if record is None:
                continue
            shared = any(
                o is not r
                and (o_record := self.records.get(id(o))) is not None
                and o_record.base is record.base
                for o in tensors
            )
            if record.chain or shared or record.base.tensor is not r:
                self._new_base(r, self.node_of(r))

    def same_memory(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        """Whether traced tensors `a` and `b` are views of one storage."""
        record_a, record_b = self.records.get(id(a)), self.records.get(id(b))
        if record_a is None or record_b is None:
            return False
        return record_a.base is record_b.base

    def record_of(self, t: torch.Tensor) -> TensorRecord:
        """The record of `t`; a tensor never seen before becomes a graph constant."""
        record = self.records.get(id(t))
        if record is None:
            name = f"_tensor_constant{len(self.constants)}"
            self.constants[name] = t
            node = self.graph.get_attr(name)
            node.meta["val"] = t
            record = self._new_base(t, node, constant=True)
        return record

    def node_of(self, t: torch.Tensor) -> fx.Node:
        """The node holding `t`'s current value, replaying its views if its base was written."""
        record = self.record_of(t)
        base = record.base
        if record.version != base.version:
            node = base.node
            for step in record.chain:
                node = replay(step, node, self.emit)
            record.node, record.version = node, base.version
        return record.node

    def _to_nodes(self, tree: Any) -> Any:
        tree = pytree.tree_map_only(torch.Tensor, self.node_of, tree)
        return pytree.tree_map_only(_SYMBOLIC, self.sizes.node_of, tree)

    # -- emitting nodes --------------------------------------------------------------------
    def emit(self, op: Any, args: tuple, kwargs: dict | None = None) -> fx.Node:
        """A new node computing `op(*args, **kwargs)`; its value is computed from the args' values."""
        kwargs = kwargs or {}
        target = operator.getitem if op == "getitem" else op
        args, kwargs = pytree.tree_map_only(_SYMBOLIC, self.sizes.node_of, (args, kwargs))
        node = self.graph.call_function(target, args, kwargs)
        values = fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        with torch.no_grad():
            node.meta["val"] = target(*values[0], **values[1])
        self._alive.append(node.meta["val"])
        return node

    def _call(self, op: Any, args: tuple, kwargs: dict, value: Any) -> fx.Node:
        node = self.graph.call_function(op, self._to_nodes(args), self._to_nodes(kwargs))
        node.meta["val"] = value
        return node

    def _items(self, node: fx.Node, value: Any) -> list[tuple[fx.Node, torch.Tensor]]:
        """(getitem node, tensor) for each tensor output of a multi-output node."""
        items = []
        for i, element in enumerate(value):
            if isinstance(element, torch.Tensor):
                item = self.graph.call_function(operator.getitem, (node, i))
                item.meta["val"] = element
                items.append((item, element))
        return items

    # -- recording one ATen call -----------------------------------------------------------
    def record_call(self, op: Any, args: tuple, kwargs: dict, out: Any) -> None:
        """Record `out = op(*args, **kwargs)` (already run) functionally."""
        if op is aten._local_scalar_dense.default:
            self._record_value_read(self.node_of(args[0]), out)
            return
        if op in _DATA_READ_OPS:
            self._record_data_read(op, args, kwargs, out)
            return
        if op in _FRESH_CONSTANT_OPS:
            # A tensor made from Python data inside the traced code: the graph keeps a copy
            # of its value now, and later writes to it stay local to the graph.
            record = self.record_of(args[0])
            record.base.fresh = True
            if record.node.op == "get_attr":
                with _disable_current_modes():  # a real copy, even under a fake mode
                    self.constants[record.node.target] = args[0].detach().clone()
            if out is not args[0]:  # under a fake mode, the fake of the new tensor
                self.records[id(out)] = record
                self._alive.append(out)
            return
        if op in _RESIZE_OPS:
            self._record_resize(op, args, kwargs)
            return
        if op is aten.native_batch_norm.default and args[5] and args[3] is not None:
            self._record_batch_norm(args, kwargs, out)
        elif mutated_arguments(op):
            self._record_mutation(op, args, kwargs, out)
        elif _is_view_op(op) and isinstance(args[0], torch.Tensor):
            # (autograd formulas call some view ops on a Python scalar: `_conj(2j)`)
            self._record_view(op, args, kwargs, out)
        else:
            self._record_plain(op, args, kwargs, out)

    def read_float_input(self, t: torch.Tensor) -> torch.SymFloat | float | None:
        """The symbolic value of `t.item()` where `t` is a float input as the caller
        passed it (not written, not a view), else None (the value is read as usual);
        a float input specialized to a constant (which the caller guards) is that float.

        The graph reads the input once (`aten._local_scalar_dense`); arithmetic on the
        value stays symbolic, computed by nodes from that read (`SizeNodes`).
        """
        record = self.records.get(id(t)) if isinstance(t, torch.Tensor) else None
        if record is None or record.chain or record.base.version:
            return None
        index = record.base.input_index
        value = self.float_inputs.get(index) if index is not None else None
        if value is None or record.base.tensor is not t:
            return None
        constant = value.node.maybe_as_float()
        if constant is not None:
            return constant
        if index not in self._float_reads:
            node = self.graph.call_function(aten._local_scalar_dense.default, (record.node,))
            node.meta["val"] = value
            self._float_reads[index] = node
            self.sizes.bind_number(node, value)
        return value

    def _record_value_read(self, node: fx.Node, value: Any) -> None:
        """`.item()` and friends: the traced value is baked in, and checked at every call."""
        if not self.allow_value_reads:
            raise AotAutogradError(
                "the backward reads a tensor's value into Python (.item(), int(t), bool(t)); "
                "aot_autograd traces values as tensors only: keep the value a tensor"
            )
        check = self.emit(aten.eq.Scalar, (node, value))
        self.value_checks.append(check)

    def record_value_assertion(self, predicate: torch.Tensor, assertion: ValueAssertion) -> None:
        """A check eager makes of values (`predicate` must be all true), raising `assertion`."""
        if not self.allow_value_reads:
            raise AotAutogradError(
                f"the backward checks values ({assertion.message}); aot_autograd checks "
                "values in the forward only"
            )
        self.value_assertions[len(self.value_checks)] = assertion
        self.value_checks.append(self.node_of(predicate))

    def _record_data_read(self, op: Any, args: tuple, kwargs: dict, out: bool) -> None:
        """`torch.allclose` / `torch.equal`: the bool is baked in, its tensor form checked."""
        a, b = args[0], args[1]
        if op is aten.equal.default and (a.shape != b.shape or a.dtype != b.dtype):
            return  # decided by metadata, which the caller's guards cover
        first, second = self.node_of(a), self.node_of(b)
        if op is aten.equal.default:
            same = self.emit(aten.eq.Tensor, (first, second))
        else:
            rest = normalized_args(op, args, kwargs)[2:]
            same = self.emit(aten.isclose.default, (first, second, *rest))
        self._record_value_read(self.emit(aten.all.default, (same,)), out)

    def _record_plain(self, op: Any, args: tuple, kwargs: dict, out: Any) -> None:
        node = self._call(op, args, kwargs, out)
        if isinstance(out, torch.Tensor):
            self._output(out, node)
        elif isinstance(out, (tuple, list)):
            for item, element in self._items(node, out):
                self._output(element, item)

    def _output(self, t: torch.Tensor, node: fx.Node) -> None:
        existing = self.records.get(id(t))
        if existing is not None:  # an op handed back a tensor it was given
            existing.node, existing.version = node, existing.base.version
        else:
            self._new_base(t, node)

    def _record_view(self, op: Any, args: tuple, kwargs: dict, out: Any) -> None:
        parent = self.record_of(args[0])
        node = self._call(op, args, kwargs, out)
        rest = normalized_args(op, args, kwargs)[1:]
        shape = tuple(args[0].shape)
        if isinstance(out, torch.Tensor):
            pairs = [(node, out, None)]
        else:
            pairs = [(item, t, i) for i, (item, t) in enumerate(self._items(node, out))]
        for item, t, index in pairs:
            step = ViewStep(op, tuple(rest), index, shape)
            record = TensorRecord(item, parent.base, (*parent.chain, step), parent.base.version)
            record.geometry = _geometry(t)
            self.records[id(t)] = record
            self._alive.append(t)

    def _record_mutation(self, op: Any, args: tuple, kwargs: dict, out: Any) -> None:
        form = functional_variant(op)
        args, kwargs = normalized_args(op, args, kwargs), _keyword_only(op, kwargs)
        if form.changes_view:
            self._record_view_change(form.op, args, kwargs)
            return
        if form.self_result:
            self.write(args[0], self._in_place_result(form.op, args, kwargs))
            return
        if form.writes_out:
            self._record_out_variant(op, form, args, kwargs)
            return
        values = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        mutated = tuple(args[i] for i in form.mutated)
        node = self._call(form.op, args, kwargs, (*values, *mutated))
        items = self._items(node, (*values, *mutated))
        for item, t in items[: len(values)]:
            self._output(t, item)
        for (item, _), t in zip(items[len(values) :], mutated):
            self.write(t, item)

    def _in_place_result(self, op: Any, args: tuple, kwargs: dict) -> fx.Node:
        """`op(self, ...)`, the functional form of an in-place op, in `self`'s dtype.

        An in-place op keeps its self's dtype (`int32.add_(int64)` stays int32), where the
        functional form promotes: its result is cast back.
        """
        target = args[0]
        order = memory_order(target) if op in DRAWN_IN_CONTIGUOUS_ORDER else None
        if order is not None and order != sorted(order):  # drawn in target's memory order
            permuted = self.emit(aten.permute.default, (self._to_nodes(target), order), {})
            rest = self._to_nodes(args[1:])
            drawn = self.emit(op, (permuted, *rest), self._to_nodes(kwargs))
            inverse = [order.index(d) for d in range(len(order))]
            node = self.emit(aten.permute.default, (drawn, inverse), {})
        else:
            node = self.emit(op, self._to_nodes(args), self._to_nodes(kwargs))
        value = node.meta["val"]
        if isinstance(value, torch.Tensor) and value.dtype != target.dtype:
            node = self.emit(aten._to_copy.default, (node,), {"dtype": target.dtype})
        return node

    def _record_out_variant(self, op: Any, form: Any, args: tuple, kwargs: dict) -> None:
        """`op(..., out=t)` recorded as the functional op, its results written into the outs."""
        names = [op._schema.arguments[i].name for i in form.mutated]
        outs = [kwargs[name] for name in names]
        rest = {k: v for k, v in kwargs.items() if k not in names}
        for t in outs:
            if tuple(t.shape) != self.record_of(t).geometry[0]:
                raise UnsupportedMutationError(
                    f"{op} resized its out= tensor; functionalization supports out= tensors "
                    "of the result's size only: call the functional form of the op"
                )
        value = outs[0] if len(outs) == 1 else tuple(outs)
        node = self._call(form.op, args, rest, value)
        if len(outs) == 1:
            self.write(outs[0], node)
            return
        for (item, _), t in zip(self._items(node, value), outs):
            self.write(t, item)

    def _record_view_change(self, op: Any, args: tuple, kwargs: dict) -> None:
        """`squeeze_`-like ops: the tensor becomes a view of what it was; no data changes.

        A graph input so changed stays its own base (its value as passed in); the run time
        gives the caller's tensor the final geometry after the graph (program.py
        `_metadata_mutations`, runtime.py `_restride_inputs`)."""
        t = args[0]
        record = self.record_of(t)
        base = record.base
        self._freeze_values_of(t, record.geometry)
        parent = self.node_of(t)
        node = self.graph.call_function(op, (parent, *self._to_nodes(args[1:])), kwargs)
        node.meta["val"] = t
        step = ViewStep(op, normalized_args(op, args, kwargs)[1:], None, record.geometry[0])
        new = TensorRecord(node, base, (*record.chain, step), base.version, _geometry(t))
        self.records[id(t)] = new

    def _record_resize(self, op: Any, args: tuple, kwargs: dict) -> None:
        """`t.resize_(size)`: a view of `t`'s own elements, or a grown tensor owning them.

        Within its elements a contiguous `t` becomes the view `t.view(-1)[:n].view(size)`,
        so writes through it still reach its base. Growing is supported for a tensor that
        is its storage's only tensor: its new value is the old elements then zeros (eager
        leaves the new elements uninitialized, so zeros are one of its possible values).
        """
        t = args[0]
        record = self.record_of(t)
        base = record.base
        shape, stride, _ = record.geometry
        old_numel, new_numel = _numel(shape), t.numel()
        if base.tensor is t and base.input_index is not None:
            raise UnsupportedMutationError(
                f"{op} resizes a graph input in place, which cannot be replayed on the caller's "
                "tensor; resize a copy (x.clone().resize_(...)) or use reshape"
            )
        if not _is_contiguous(shape, stride):
            raise UnsupportedMutationError(
                f"{op} on a non-contiguous tensor reinterprets its memory, which "
                "functionalization does not support; call .contiguous() before resizing"
            )
        self._freeze_values_of(t, record.geometry)
        size = list(t.shape)
        if new_numel > old_numel:
            self._record_growth(op, t, record, old_numel, new_numel, size)
            return
        steps = [ViewStep(aten.view.default, ([old_numel],), None, tuple(shape))]
        if new_numel < old_numel:
            steps.append(ViewStep(aten.slice.Tensor, (0, 0, new_numel, 1), None, (old_numel,)))
        steps.append(ViewStep(aten.view.default, (size,), None, (new_numel,)))
        node = self.node_of(t)
        for step in steps:
            node = replay(step, node, self.emit)
        new = TensorRecord(node, base, (*record.chain, *steps), base.version, _geometry(t))
        self.records[id(t)] = new

    def _record_growth(
        self, op: Any, t: torch.Tensor, record: TensorRecord, old: int, new: int, size: list
    ) -> None:
        base = record.base
        others = [r for r in self.records.values() if r.base is base and r is not record]
        if record.chain or others or base.constant or base.input_index is not None:
            raise UnsupportedMutationError(
                f"{op} grows a tensor that shares its memory with other tensors (a view, its "
                "base, an input); functionalization supports growing a tensor of its own only: "
                "resize a .clone()"
            )
        flat = self.emit(aten.view.default, (self.node_of(t), [old]))
        padded = self.emit(aten.constant_pad_nd.default, (flat, [0, new - old], 0))
        node = self.emit(aten.view.default, (padded, size))
        base.node, base.storage_offset = node, t.storage_offset()
        base.version += 1
        self.records[id(t)] = TensorRecord(node, base, (), base.version, _geometry(t))

    def _freeze_values_of(self, t: torch.Tensor, geometry: tuple) -> None:
        """Nodes whose value is `t` get a view of it with the geometry `t` had before now.

        An op such as `unsqueeze_` changes `t`'s shape and strides in place, after the
        nodes that computed `t` recorded `t` itself as their value: they keep what they
        computed (its shape, strides and offset), not what `t` becomes.
        """
        shape, stride, offset = geometry
        if (tuple(t.shape), tuple(t.stride()), t.storage_offset()) == geometry:
            return
        with _disable_current_modes(), torch.no_grad():
            old = t.as_strided(shape, stride, offset)
        self._alive.append(old)
        for node in self.graph.nodes:
            value = node.meta.get("val")
            if value is t:
                node.meta["val"] = old
            elif isinstance(value, (tuple, list)) and any(v is t for v in value):
                # one result of a multi-output op (`sort(x).values`): its tuple too
                replaced = [old if v is t else v for v in value]
                node.meta["val"] = replaced if isinstance(value, list) else tuple(replaced)

    def _record_batch_norm(self, args: tuple, kwargs: dict, out: Any) -> None:
        # NOTE: native_batch_norm updates running_mean/var in place although its schema does
        # not say so; its functional twin returns the updated statistics as outputs 3 and 4.
        rest = normalized_args(aten.native_batch_norm.default, args, kwargs)
        running_mean, running_var = rest[3], rest[4]
        value = (*out, running_mean, running_var)
        op = aten._native_batch_norm_legit_functional.default
        node = self._call(op, rest, {}, value)
        items = self._items(node, value)
        for item, t in items[:3]:
            self._output(t, item)
        self.write(running_mean, items[3][0])
        self.write(running_var, items[4][0])

    def write(self, t: torch.Tensor, new_value: fx.Node) -> None:
        """`t` now holds `new_value`: scatter it into its base, making every other alias stale."""
        if _has_no_elements(t):
            # NOTE: a write of no elements changes no memory, so it is not recorded: eager
            # runs it even into a tensor whose elements share memory (an empty slice of an
            # expanded input), which a copy back would refuse.
            return
        record = self.record_of(t)
        base = record.base
        if base.constant and not base.fresh:
            raise UnsupportedMutationError(
                "the graph mutates a tensor that is not one of its inputs (a tensor captured "
                "from outside, such as a module buffer read through get_attr); pass it as an "
                "input (aot_module lifts parameters and buffers) so the update can be kept"
            )
        raw = new_value
        # A view keeps its strides too: later reads of it (`v = x.t(); v.masked_fill_(m, 0);
        # v + v`) must see eager's layout, not the functional form's.
        new_value = self._in_layout_of(tuple(t.shape), tuple(t.stride()), new_value)
        child = new_value
        if record.chain:
            parents = [base.node]
            for step in record.chain[:-1]:
                parents.append(replay(step, parents[-1], self.emit))
            for step, parent in zip(reversed(record.chain), reversed(parents)):
                child = scatter_into_parent(step, parent, child, self.emit)
            raw = child
            if base.geometry:
                child = self._in_layout_of(base.geometry[0], base.geometry[1], child)
        merged = any(step.op is aten.expand.default for step in record.chain)
        if base.input_index is not None and _symbolic_aliased_dims(base.geometry):
            raise UnsupportedMutationError(
                f"an in-place op writes into input {base.input_index}, an expanded tensor of "
                "symbolic size whose elements share memory; functionalization merges such "
                "writes for static sizes only: pass a .clone() of it, or mark its sizes static"
            )
        if base.input_index is not None and _aliased_dims(base.geometry):
            child = raw = self._merged_into_input(base, child)
            merged = True
        base.written = raw if raw is not child else None
        base.node = child
        base.version += 1
        record.node, record.version = new_value, base.version
        if merged:  # the aliases of a location now agree: `t` is read again from its base
            record.version = base.version - 1

    def _merged_into_input(self, base: BaseState, value: fx.Node) -> fx.Node:
        """`value`, written into an expanded input, with each memory location's aliases
        agreeing (see views.merge_aliases): what later reads of the input see, and what
        is copied back into the caller's memory."""
        compact = base.node
        shape = list(base.geometry[0])
        for d in _aliased_dims(base.geometry):
            compact = self.emit(aten.slice.Tensor, (compact, d, 0, 1, 1))
        merged = merge_aliases(self.emit, compact, value)
        expanded = self.emit(aten.expand.default, (merged, shape))
        # NOTE: a copy: a compiler may lay out views of it apart from their traced
        # strides, and a copy into the traced (overlapping) strides is refused.
        return self.emit(
            aten.clone.default, (expanded,), {"memory_format": torch.contiguous_format}
        )

    def _in_layout_of(self, shape: tuple, stride: tuple, value: fx.Node) -> fx.Node:
        """`value` with the strides of the tensor it is written into (`shape`, `stride`).

        An in-place op keeps its tensor's strides, where the functional form may not
        (`masked_fill` of a transposed tensor is contiguous): later reads of the tensor
        must see eager's layout (a result computed from it keeps it). Dense layouts only;
        other cases keep the functional form's strides. Symbolic sizes and strides are
        compared as expressions, without guards.
        """
        new = value.meta.get("val")
        if not isinstance(new, torch.Tensor):
            return value
        symbolic = _has_symbolic_geometry(new)
        if symbolic or any(isinstance(v, torch.SymInt) for v in (*shape, *stride)):
            return self._in_symbolic_layout_of(shape, stride, value, new)
        if tuple(new.shape) != tuple(shape):
            return value
        significant = [(size, step) for size, step in zip(shape, stride) if size != 1]
        if all(new.stride(d) == step for d, (size, step) in enumerate(zip(shape, stride))
               if size != 1):  # fmt: skip
            return value
        if not _is_dense_layout(significant):
            # A layout with gaps (a padded or sliced input): the dense one of the same dim
            # order, which later ops read as eager's kernels read the tensor itself.
            stride = _dense_in_order(tuple(shape), tuple(stride))
            if stride is None or all(
                new.stride(d) == step for d, (size, step) in enumerate(zip(shape, stride))
                if size != 1
            ):  # fmt: skip
                return value
        empty = self.emit(
            aten.empty_strided.default,
            (list(shape), list(stride)),
            {"dtype": new.dtype, "device": new.device},
        )
        return self.emit(aten.copy.default, (empty, value))

    def _in_symbolic_layout_of(
        self, shape: tuple, stride: tuple, value: fx.Node, new: torch.Tensor
    ) -> fx.Node:
        exprs = [(_size_expression(n), _size_expression(s)) for n, s in zip(shape, stride)]
        new_exprs = [
            (_size_expression(n), _size_expression(s)) for n, s in zip(new.shape, new.stride())
        ]
        if [n for n, _ in exprs] != [n for n, _ in new_exprs]:
            return value
        significant = [(n, s) for n, s in exprs if n != 1]
        if all(
            sympy.expand(s - t) == 0 for (n, s), (_, t) in zip(exprs, new_exprs) if n != 1
        ) or not _is_dense_by_expression(significant):
            return value
        empty = self.emit(
            aten.empty_strided.default,
            (list(shape), list(stride)),
            {"dtype": new.dtype, "device": new.device},
        )
        return self.emit(aten.copy.default, (empty, value))


def _is_dense_by_expression(sizes_and_strides: list[tuple[sympy.Expr, sympy.Expr]]) -> bool:
    """`_is_dense_layout` of size and stride expressions: each stride, taken in turn, is
    the product of the sizes taken before it (the innermost stride 1), as expressions."""
    remaining = list(sizes_and_strides)
    expected = sympy.Integer(1)
    while remaining:
        match = next((p for p in remaining if sympy.expand(p[1] - expected) == 0), None)
        if match is None:
            return False
        remaining.remove(match)
        expected = expected * match[0]
    return True


def _dense_in_order(shape: tuple, stride: tuple) -> tuple | None:
    """Dense strides ordering the dims of size > 1 as `stride` does (size-1 dims keep
    theirs); None where `stride` overlaps or ties two such dims."""
    dims = sorted((d for d, n in enumerate(shape) if n != 1), key=lambda d: stride[d])
    out = list(stride)
    expected, reach = 1, 0
    for d in dims:
        if stride[d] < reach or stride[d] <= 0:
            return None
        reach = stride[d] * shape[d]
        out[d] = expected
        expected *= shape[d]
    return tuple(out)


def _is_dense_layout(sizes_and_strides: list[tuple[int, int]]) -> bool:
    """The (size, stride) pairs, sizes above 1, cover their memory without gaps or overlaps."""
    expected = 1
    for size, step in sorted(sizes_and_strides, key=lambda pair: pair[1]):
        if step != expected:
            return False
        expected *= size
    return True


# In-place ops whose eager kernels write into a tensor whose elements share memory (an
# expanded tensor): each writes one value to all the aliases it touches. Eager refuses
# every other in-place op there.
_WRITES_INTO_OVERLAP = frozenset(
    {
        aten.fill_.Scalar,
        aten.zero_.default,
        aten.masked_fill_.Scalar,
        aten.masked_fill_.Tensor,
        aten.index_fill_.int_Scalar,
        aten.index_fill_.int_Tensor,
        aten.index_put_.default,
        aten._index_put_impl_.default,
    }
)
_OVERLAP_REFUSED = (
    "unsupported operation: more than one element of the written-to tensor refers to a "
    "single memory location. Please clone() the tensor before performing the operation."
)


_INDEX_PUTS = (aten.index_put_.default, aten._index_put_impl_.default)


def _accumulates_into_overlap(func: Any, args: tuple, kwargs: dict) -> bool:
    """`index_put_(..., accumulate=True)` into a tensor whose only aliasing is expanded
    dims of static size (stride 0), the other dims apart in memory: eager adds every
    value, in turn, to the memory location its index names, so a location gains the sum
    of what its aliases were given (see `AtenTracer._accumulate_into_overlap`)."""
    if func not in _INDEX_PUTS:
        return False
    values = normalized_args(func, args, kwargs)
    target, accumulate = values[0], values[3]
    geometry = _geometry(target)
    if not accumulate or not _aliased_dims(geometry) or _symbolic_aliased_dims(geometry):
        return False
    if _has_no_elements(target) or _has_symbolic_geometry(target):
        return False
    shape, stride, _ = geometry
    apart = sorted((step, n) for n, step in zip(shape, stride) if n > 1 and step != 0)
    return all(outer >= step * n for (step, n), (outer, _) in zip(apart, apart[1:]))


def _check_index_put_into_overlap(func: Any, args: tuple, kwargs: dict) -> None:
    """`index_put_` into an expanded tensor: eager writes each value in turn to the
    memory its index names, so aliases written with different values depend on eager's
    order; supported where all writes put one value (`x[mask] = 0`), and for sums
    (`accumulate=True`, whose order changes only the rounding)."""
    values = normalized_args(func, args, kwargs)
    target, source, accumulate = values[0], values[2], values[3]
    if not _aliased_dims(_geometry(target)) and not _symbolic_aliased_dims(_geometry(target)):
        return
    if _has_no_elements(target) or (not accumulate and source.numel() == 1):
        return
    if _accumulates_into_overlap(func, args, kwargs):
        return
    raise UnsupportedMutationError(
        f"{func} writes {'sums' if accumulate else 'several values'} into an expanded tensor "
        "(elements sharing memory), where eager's result depends on the order of its writes; "
        "functionalization supports writing one value only: call .clone() on the expanded "
        "tensor before writing to it"
    )


def _check_no_overlapping_write(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise eager's error for an in-place op writing into a tensor whose elements share
    memory (a stride 0 on a dim of size above 1), unless eager's kernel allows it."""
    if func in _INDEX_PUTS:
        _check_index_put_into_overlap(func, args, kwargs)
        return
    if func in _WRITES_INTO_OVERLAP or not isinstance(func, torch._ops.OpOverload):
        return
    positions = mutated_arguments(func)
    if not positions:
        return
    values = normalized_args(func, args, kwargs)
    names = [a.name for a in func._schema.arguments]
    for i in positions:
        t = values[i] if i < len(values) else kwargs.get(names[i])
        if not isinstance(t, torch.Tensor):
            continue
        if not _aliased_dims(_geometry(t)) and not _symbolic_aliased_dims(_geometry(t)):
            continue
        if _has_no_elements(t):  # eager checks nothing where nothing is written
            continue
        if func in _RESIZE_OPS or func._schema.name in ("aten::set_", "aten::detach_"):
            return
        try:
            if functional_variant(func).changes_view:  # squeeze_ and friends: no data
                return
        except UnsupportedMutationError:
            pass
        raise OverlappingWriteError(_OVERLAP_REFUSED)


class KernelChecks(TorchDispatchMode):
    """Runs each op after the tracer's checks that eager's kernel accepts its arguments
    (fake kernels accept more; eager refuses most writes into elements sharing memory),
    recording nothing."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # as AtenTracer's: TorchDispatchMode's default would import torch's own capture
        # stage at the first dispatch, to ask it whether to skip this mode
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        check_devices_agree(func, args, kwargs)
        check_kernel_accepts(func, args, kwargs)
        _check_no_overlapping_write(func, args, kwargs)
        return func(*args, **kwargs)


class AtenTracer(TorchDispatchMode):
    """Records every ATen call into `recorder`, applying `decompositions` recursively."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # NOTE: TorchDispatchMode's documented opt-out. Left True, torch wraps
        # `__torch_dispatch__` in its compiler-disabling wrapper, which imports torch's compiler
        # (about 1 s) at the mode's first dispatch; this mode never runs under
        # torch.compile, so there is nothing to disable.
        return False

    def __init__(
        self,
        recorder: GraphRecorder,
        decompositions: Mapping | None = None,
        *,
        keep_views: bool = False,
    ) -> None:
        super().__init__()
        self.recorder = recorder
        self.decompositions = decompositions or {}
        # NOTE: while functionalizing, view ops must stay views (a decomposition may turn
        # a view into a copy, and writes through it would be lost); they are decomposed
        # afterwards, on the functional graph.
        self.keep_views = keep_views
        # Depth of decompositions running: the ops they call are not the traced code's.
        self._decomposing = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if any(is_traceable_subclass_type(kind) for kind in types):
            # NOTE: an op on a traceable tensor subclass runs its own `__torch_dispatch__`,
            # whose ops on the inner tensors come back here (subclass_program)
            return NotImplemented
        kwargs = kwargs or {}
        if self._decomposing:
            return self._dispatch(func, args, kwargs)
        tag = current_region()
        if tag is None:
            return self._traced_call(func, args, kwargs)
        # the nodes recorded for an op of a checkpoint region carry its tag
        save = tag.saves(func, args, kwargs)
        last = self.recorder.graph._root.prev
        out = self._traced_call(func, args, kwargs)
        tag_nodes_after(last, tag.region, save)
        return out

    def _traced_call(self, func: Any, args: tuple, kwargs: dict) -> Any:
        check_devices_agree(func, args, kwargs)
        check_kernel_accepts(func, args, kwargs)
        _check_no_overlapping_write(func, args, kwargs)
        check_reads_of_written_memory(func, args, kwargs, self.recorder.same_memory)
        if _accumulates_into_overlap(func, args, kwargs):
            return self._accumulate_into_overlap(func, args, kwargs)
        out = self._dispatch(func, args, kwargs)
        if func is aten._linalg_check_errors.default:
            self._assert_factorization_succeeded(*args, **kwargs)
        if checks_values(func, out):
            first = out[0] if isinstance(out, (tuple, list)) and out else out
            if isinstance(first, torch.Tensor):
                self.recorder.value_checked_results.append(first)
        return out

    def _assert_factorization_succeeded(
        self, info: torch.Tensor, api_name: str, *, is_matrix: bool
    ) -> None:
        """`_linalg_check_errors(info, ...)` returns nothing, so a graph whose outputs
        are all that is kept (a training graph's partition) would drop it, and with it
        eager's error for a singular or not positive-definite input: its check (every
        `info` zero) becomes a value check of the forward graph."""
        if not self.recorder.allow_value_reads:
            return  # a backward's check stays the op itself
        with self:
            succeeded = aten.all.default(aten.eq.Scalar(info, 0))
        message = f"{api_name}: the factorization could not be completed (its info is not 0)"
        self.recorder.record_value_assertion(succeeded, ValueAssertion("RuntimeError", message))

    def _dispatch(self, func: Any, args: tuple, kwargs: dict) -> Any:
        decomposition = self.decompositions.get(func)
        if self.keep_views and _is_view_op(func):
            decomposition = None
        if decomposition is not None:
            self._decomposing += 1
            try:
                with self, _autocast_off():
                    out = decomposition(*args, **kwargs)
            finally:
                self._decomposing -= 1
            if out is not NotImplemented:
                out = self._in_eager_layout(func, args, kwargs, out)
                if not _returns_fresh(func):
                    return out
                if not self.keep_views:
                    return self._apart_from_inputs(out)
                # NOTE: while functionalizing, a result the schema calls new must alias
                # nothing: a view of the decomposition's own intermediates becomes a base
                # of its own; one aliasing an argument (`_unsafe_view` decomposes into
                # `view`) is dropped, and the op is recorded whole, decomposed afterwards
                # on the functional graph, as views are.
                if not self.recorder.aliases_any(out, (args, kwargs)):
                    self.recorder.make_fresh(out)
                    return out
        elif self.decompositions and mutated_arguments(func) == (0,) and not _is_view_op(func):
            out = self._decompose_in_place(func, args, kwargs)
            if out is not NotImplemented:
                return out
        if func is aten._local_scalar_dense.default:
            number = self.recorder.read_float_input(args[0])
            if number is not None:
                return number
        if func in _DATA_READ_OPS and any(guards.is_fake(a) for a in args[:2]):
            raise guards.DataDependentError(
                f"{func} returns a bool computed from tensor values, which fakes do not have",
                op=str(func),
            )
        out = func(*args, **kwargs)
        self.recorder.record_call(func, args, kwargs, out)
        return out

    def _apart_from_inputs(self, out: Any) -> Any:
        """`out`, a decomposition's results of an op whose schema calls them new, with a
        copy for each that is a graph input or a view of one (`logsumexp` of a 0-d
        tensor decomposes to its input): the compiled graph would otherwise return the
        caller's own memory where eager returns a new tensor."""
        results = out if isinstance(out, (tuple, list)) else (out,)
        fixed = []
        for r in results:
            record = self.recorder.records.get(id(r)) if isinstance(r, torch.Tensor) else None
            if record is None or record.base.input_index is None:
                fixed.append(r)
                continue
            copy = aten.clone.default(r)
            self.recorder.record_call(aten.clone.default, (r,), {}, copy)
            fixed.append(copy)
        if all(f is r for f, r in zip(fixed, results)):
            return out
        return type(out)(fixed) if isinstance(out, (tuple, list)) else fixed[0]

    def _in_eager_layout(self, func: Any, args: tuple, kwargs: dict, out: Any) -> Any:
        """`out`, the decomposition of `func`, copied to the strides `func` gives eagerly.

        Decompositions compute values; their strides follow from the ops they use (a
        softmax of a transposed input comes back transposed), where eager kernels may
        return another layout (contiguous), which later views rely on. Checked where
        strides can differ: a fake operand that is not contiguous, static sizes.
        """
        results = out if isinstance(out, (tuple, list)) else (out,)
        if not all(isinstance(r, torch.Tensor) for r in results) or mutated_arguments(func):
            return out
        tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        if not tensors or not all(guards.is_fake(t) for t in tensors):
            return out
        if any(_has_symbolic_geometry(t) for t in (*tensors, *results)):
            return self._in_eager_symbolic_layout(func, args, kwargs, out, tensors)
        if all(t.is_contiguous() for t in tensors):
            return out
        expected = func(*args, **kwargs)  # (on fakes: metadata only, nothing traced)
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        if len(expected) != len(results):
            return out
        fixed = [self._restrided(r, e) for r, e in zip(results, expected)]
        if all(f is r for f, r in zip(fixed, results)):
            return out
        return type(out)(fixed) if isinstance(out, (tuple, list)) else fixed[0]

    def _in_eager_symbolic_layout(
        self, func: Any, args: tuple, kwargs: dict, out: Any, tensors: list
    ) -> Any:
        """`_in_eager_layout` with symbolic sizes, compared as expressions, without guards:
        a result eager gives row-major strides (`masked_fill` of a transposed tensor)
        that the decomposition does not is copied to them. Other layouts are kept."""
        if all(_contiguous_by_expression(t) for t in tensors):
            return out
        results = out if isinstance(out, (tuple, list)) else (out,)
        expected = func(*args, **kwargs)  # (on fakes: metadata only, nothing traced)
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        if len(expected) != len(results):
            return out
        fixed = []
        for r, e in zip(results, expected):
            if (
                isinstance(e, torch.Tensor)
                and len(e.shape) == len(r.shape)
                and _contiguous_by_expression(e)
                and not _contiguous_by_expression(r)
            ):
                with self:
                    r = aten.clone.default(r, memory_format=torch.contiguous_format)
            fixed.append(r)
        if all(f is r for f, r in zip(fixed, results)):
            return out
        return type(out)(fixed) if isinstance(out, (tuple, list)) else fixed[0]

    def _restrided(self, value: torch.Tensor, expected: Any) -> torch.Tensor:
        """`value` copied to `expected`'s strides where they differ (and are dense)."""
        if (
            not isinstance(expected, torch.Tensor)
            or expected.shape != value.shape
            or expected.stride() == value.stride()
            or _has_symbolic_geometry(expected)
            or not _is_dense(expected)
        ):
            return value
        with self:
            copy = torch.empty_strided(
                tuple(value.shape), tuple(expected.stride()), dtype=value.dtype, device=value.device
            )
            copy.copy_(value)
        return copy

    def _accumulate_into_overlap(self, func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
        """`index_put_(..., accumulate=True)` into an expanded tensor, traced as the sums
        it adds to each memory location: the values are accumulated into zeros of the
        target's shape, summed over the expanded dims (the aliases of one location) and
        added to the target, so every alias of a location holds the location's new value
        (which the write into the expanded tensor's base then keeps)."""
        values = normalized_args(func, args, kwargs)
        target, indices, source = values[0], values[1], values[2]
        dims = _aliased_dims(_geometry(target))
        with self, _autocast_off():
            added = torch.zeros(target.shape, dtype=target.dtype, device=target.device)
            added = added.index_put_(indices, source, accumulate=True)
            if target.dtype == torch.bool:
                value = torch.logical_or(target, added.any(dim=dims, keepdim=True))
            else:
                value = target + added.sum(dim=dims, keepdim=True, dtype=target.dtype)
        with _disable_current_modes():  # the data (none for fakes) follows eager's kernel
            func(*args, **kwargs)
        self.recorder.write(target, self.recorder.node_of(value))
        return target

    def _decompose_in_place(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """`x.op_(...)` traced as `op`'s decomposition, written into x, when the table has `op`."""
        try:
            form = functional_variant(func)
        except UnsupportedMutationError:
            return NotImplemented
        decomposition = self.decompositions.get(form.op)
        if decomposition is None or not form.self_result or form.changes_view:
            return NotImplemented
        target = args[0]
        if _aliased_dims(_geometry(target)):  # expanded: eager's kernel writes it (fill_)
            return NotImplemented
        self._decomposing += 1
        try:
            with self, _autocast_off():
                value = decomposition(*args, **kwargs)
                if value is NotImplemented:
                    return NotImplemented
                if value.dtype != target.dtype:
                    value = value.to(target.dtype)
                if value.shape != target.shape:
                    value = value.expand(target.shape).clone()
        finally:
            self._decomposing -= 1
        with _disable_current_modes():  # the data (none for fakes) follows; nothing is traced
            target.copy_(value)
        self.recorder.write(target, self.recorder.node_of(value))
        return target
