"""`decompose(gm, table)`: retrace an FX graph at ATen level, applying a table.

The pass interprets the input graph node by node on its fake values
(`node.meta["val"]`) or on example inputs. An op the table holds runs its
decomposition under a TorchDispatchMode that records every op the
decomposition calls, applying the table again to those (recursively, until no
op of the table remains); any other op is recorded whole. The new graph's
nodes carry `meta["val"]` (values of the same kind as the input graph's) and
the provenance keys of the node they came from.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Mapping, Sequence

import torch
import torch.fx as fx
from torch._dispatch.python import enable_python_dispatcher
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from prim_decomp.errors import DecomposeError
from prim_decomp.symbolic_sizes import SymbolicSizes

__all__ = ["decompose"]

_PROVENANCE_KEYS = ("stack_trace", "nn_module_stack", "source_fn_stack", "seq_nr", "original_aten")


class _GraphRecorder(TorchDispatchMode):
    """Records ops into `graph`, replacing the ones `table` holds by their decompositions."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # NOTE: TorchDispatchMode's documented opt-out. Left True, torch wraps
        # `__torch_dispatch__` in its compiler-disabling wrapper, which imports torch's compiler
        # (about 1 s) at the mode's first dispatch; this mode never runs under
        # torch.compile, so there is nothing to disable.
        return False

    def __init__(self, graph: fx.Graph, root: torch.nn.Module, table: Mapping) -> None:
        super().__init__()
        self.graph = graph
        self.root = root
        self.table = table
        self.nodes: dict[int, tuple[object, fx.Node]] = {}
        self.active: list[torch._ops.OpOverload] = []
        self.provenance: dict = {}
        self.constants = 0
        self.sizes = SymbolicSizes(graph)
        self.fake_mode: object | None = None

    # --- values <-> nodes -------------------------------------------------------
    def bind(self, value: object, node: fx.Node) -> None:
        """Remember that `value` (a tensor or SymInt) is computed by `node`."""
        key = _identity(value)
        if key is not None:
            self.nodes[key] = (value, node)

    def node_for(self, value: object) -> object:
        """The graph argument standing for `value`."""
        key = _identity(value)
        if key is None:
            return value
        if key in self.nodes:
            return self.nodes[key][1]
        if isinstance(value, torch.Tensor):
            return self._constant(value)
        concrete = _concrete(value)
        if concrete is not None:
            return concrete
        node = self.sizes.node_for(value)
        if isinstance(node, fx.Node):
            self.bind(value, node)
        return node

    def _constant(self, value: torch.Tensor) -> fx.Node:
        name = f"_decomposed_constant_{self.constants}"
        self.constants += 1
        setattr(self.root, name, value)
        node = self.graph.get_attr(name)
        node.meta["val"] = value
        self.bind(value, node)
        return node

    # --- recording --------------------------------------------------------------
    def call(self, func, args: tuple, kwargs: dict):
        """Apply `func`: its decomposition when the table has one, else record it."""
        rule = self.table.get(func) if isinstance(func, torch._ops.OpOverload) else None
        if rule is not None and _all_strided(args, kwargs) and func not in self.active:
            self.active.append(func)
            try:
                with self:
                    result = rule(*args, **kwargs)
            finally:
                self.active.pop()
            if result is not NotImplemented:
                return result
        return self.record(func, args, kwargs)

    def record(self, func, args: tuple, kwargs: dict):
        result = func(*args, **kwargs)
        node_args, node_kwargs = pytree.tree_map(self.node_for, (args, kwargs))
        node = self.graph.call_function(func, tuple(node_args), node_kwargs)
        self._annotate(node, result)
        if isinstance(result, (tuple, list)):
            for index, item in enumerate(result):
                if isinstance(item, (torch.Tensor, torch.SymInt, torch.SymFloat)):
                    item_node = self.graph.call_function(operator.getitem, (node, index))
                    self._annotate(item_node, item)
                    self.bind(item, item_node)
        else:
            self.bind(result, node)
        return result

    def _annotate(self, node: fx.Node, value: object) -> None:
        node.meta["val"] = value
        node.meta.update(self.provenance)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.call(func, args, kwargs or {})


def _concrete(value: torch.SymInt | torch.SymFloat | torch.SymBool) -> object | None:
    """The plain number a symbolic value stands for, when it is a constant."""
    for method in ("maybe_as_int", "maybe_as_float", "maybe_as_bool"):
        getter = getattr(value.node, method, None)
        constant = getter() if getter is not None else None
        if constant is not None:
            return constant
    return None


def _all_strided(args: tuple, kwargs: dict) -> bool:
    """Whether every tensor argument is dense and strided (decompositions assume so)."""
    leaves = pytree.tree_leaves((args, kwargs))
    return all(t.layout == torch.strided for t in leaves if isinstance(t, torch.Tensor))


def _identity(value: object) -> int | None:
    if isinstance(value, torch.Tensor):
        return id(value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return id(value.node)
    return None


def _input_values(gm: fx.GraphModule, example_inputs: Sequence | None) -> list:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if example_inputs is not None:
        if len(example_inputs) != len(placeholders):
            raise DecomposeError(
                f"decompose got {len(example_inputs)} example inputs for a graph with "
                f"{len(placeholders)} placeholders; pass one value per placeholder"
            )
        return list(example_inputs)
    missing = [n.name for n in placeholders if "val" not in n.meta]
    if missing:
        raise DecomposeError(
            f"placeholders {missing} have no meta['val']; pass example_inputs= "
            f"(real or fake tensors, one per placeholder)"
        )
    return [n.meta["val"] for n in placeholders]


def _fake_mode(values: list) -> object | None:
    """The fake-tensor mode the input values belong to, if they are fake."""
    tensors = [v for v in pytree.tree_leaves(values) if isinstance(v, torch.Tensor)]
    return next((t.fake_mode for t in tensors if hasattr(t, "fake_mode")), None)


def _tracing_context(values: list, fake_mode: object | None) -> contextlib.ExitStack:
    """Enter the fake mode the values belong to (so factories make fakes) and the
    python dispatcher (so meta kernels accept symbolic sizes)."""
    stack = contextlib.ExitStack()
    tensors = [v for v in pytree.tree_leaves(values) if isinstance(v, torch.Tensor)]
    if fake_mode is not None:
        stack.enter_context(fake_mode)
    symbolic = any(isinstance(s, torch.SymInt) for t in tensors for s in t.shape)
    if symbolic or any(isinstance(v, torch.SymInt) for v in pytree.tree_leaves(values)):
        stack.enter_context(enable_python_dispatcher())
    return stack


def decompose(
    gm: fx.GraphModule, table: Mapping, example_inputs: Sequence | None = None
) -> fx.GraphModule:
    """A new GraphModule computing `gm` with every op in `table` decomposed.

    Stable API. `gm` is not modified. Values come from each placeholder's
    `meta["val"]`, or from `example_inputs` (real tensors are computed for
    real; fake ones only propagate metadata).

        gm = make_fx(f, tracing_mode="fake")(x)
        small = decompose(gm, core_aten | prims)
    """
    values = _input_values(gm, example_inputs)
    root = torch.nn.Module()
    graph = fx.Graph()
    recorder = _GraphRecorder(graph, root, table)
    recorder.fake_mode = _fake_mode(values)
    env: dict[fx.Node, object] = {}
    inputs = iter(values)
    with _tracing_context(values, recorder.fake_mode):
        for node in gm.graph.nodes:
            recorder.provenance = {k: node.meta[k] for k in _PROVENANCE_KEYS if k in node.meta}
            env[node] = _run_node(node, gm, recorder, env, inputs)
    graph.eliminate_dead_code()
    graph.lint()
    return fx.GraphModule(root, graph, class_name=type(gm).__name__)


def _run_node(node: fx.Node, gm, recorder: _GraphRecorder, env: dict, inputs) -> object:
    """Interpret one node of the input graph, recording its replacement."""
    args, kwargs = pytree.tree_map(
        lambda a: env[a] if isinstance(a, fx.Node) else a, (node.args, node.kwargs)
    )
    if node.op == "placeholder":
        value = next(inputs)
        new = recorder.graph.placeholder(node.name)
        new.meta.update(node.meta)
        new.meta["val"] = value
        recorder.bind(value, new)
        recorder.sizes.add_input(new, value)
        return value
    if node.op == "get_attr":
        stored = _fetch_attr(gm, node.target)
        setattr(recorder.root, node.target.replace(".", "_"), stored)
        new = recorder.graph.get_attr(node.target.replace(".", "_"))
        new.meta.update(node.meta)
        value = node.meta.get("val", _as_fake(stored, recorder.fake_mode))
        new.meta["val"] = value
        recorder.bind(value, new)
        recorder.sizes.add_input(new, value)
        return value
    if node.op == "output":
        recorder.graph.output(pytree.tree_map(recorder.node_for, args[0]))
        return None
    if node.op != "call_function":
        raise DecomposeError(
            f"decompose handles call_function graphs; node {node.name} is {node.op}; "
            f"inline modules first (e.g. trace with make_fx or aot_autograd)"
        )
    if node.target is operator.getitem and isinstance(args[0], (tuple, list)):
        return args[0][args[1]]
    if isinstance(node.target, torch._ops.OpOverload):
        return recorder.call(node.target, tuple(args), kwargs)
    return recorder.record(node.target, tuple(args), kwargs)


def _as_fake(value: object, fake_mode: object | None) -> object:
    """A real constant as a fake value of `fake_mode`, so it mixes with fake inputs."""
    if fake_mode is None or not isinstance(value, torch.Tensor) or hasattr(value, "fake_mode"):
        return value
    from_tensor = getattr(fake_mode, "from_tensor", None)
    if from_tensor is None:
        return value
    try:
        return from_tensor(value, static_shapes=True)
    except TypeError:  # a fake mode without the static_shapes option
        return from_tensor(value)


def _fetch_attr(gm: torch.nn.Module, target: str) -> object:
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value
