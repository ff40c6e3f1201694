"""Graphs with symbolic sizes, traced the way the stages before codegen make them.

`trace_symbolic(fn, *args, dynamic={arg_index: dims})` turns the arguments into
guards fakes over one ShapeEnv (the listed dims get size symbols), then records
every ATen call `fn` makes under a small TorchDispatchMode, decomposing with
prim_decomp's `inductor_default` table. The graph it returns has what a backend
receives from capture + aot_autograd with dynamic shapes: placeholders whose
meta["val"] are fakes with torch.SymInt sizes, `aten.sym_size.int` nodes for the
symbols an op takes, raw SymInt arguments for composite sizes (`view(x, [4*s0])`),
and optionally SymInt placeholders (`symint_inputs=True`).
"""

from __future__ import annotations

import operator
import warnings

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from guards import FakeTensorMode, LocalSource, ShapeEnv, fake_mode_of, is_fake
from prim_decomp import inductor_default

_DECOMPOSITIONS = dict(inductor_default)


class _Recorder(TorchDispatchMode):
    """Records each ATen call on traced tensors as an FX node (meta["val"] = its fake result)."""

    def __init__(self) -> None:
        super().__init__()
        self.graph = fx.Graph()
        self.nodes: dict[int, fx.Node] = {}
        self.size_nodes: dict[object, fx.Node] = {}
        self.inputs: list[tuple[fx.Node, object]] = []
        self.alive: list[object] = []
        self.constants: dict[str, torch.Tensor] = {}

    def add_input(self, name: str, value) -> None:
        node = self.graph.placeholder(name)
        node.meta["val"] = value
        self.inputs.append((node, value))
        if isinstance(value, torch.Tensor):
            self.nodes[id(value)] = node
            self.alive.append(value)
        elif isinstance(value, torch.SymInt):
            self.size_nodes[value.node.expr] = node

    def _size_node(self, value: torch.SymInt):
        expr = value.node.expr
        if expr in self.size_nodes:
            return self.size_nodes[expr]
        if not expr.is_Symbol:
            return value  # a composite size stays a raw SymInt argument
        for node, example in self.inputs:
            if not isinstance(example, torch.Tensor):
                continue
            for d, size in enumerate(example.shape):
                if isinstance(size, torch.SymInt) and size.node.expr == expr:
                    with self.graph.inserting_after(node):
                        size_node = self.graph.call_function(torch.ops.aten.sym_size.int, (node, d))
                    size_node.meta["val"] = size
                    self.size_nodes[expr] = size_node
                    return size_node
        return value

    def _arg(self, value):
        if isinstance(value, torch.Tensor):
            if id(value) not in self.nodes:
                self._constant(value)
            return self.nodes[id(value)]
        if isinstance(value, torch.SymInt) and value.node.maybe_as_int() is None:
            return self._size_node(value)
        return value

    def _constant(self, value: torch.Tensor) -> None:
        """A real tensor the traced code closes over becomes a graph constant (get_attr)."""
        if is_fake(value):
            raise RuntimeError("a fake tensor that is not a traced value reached an ATen call")
        name = f"_constant{len(self.constants)}"
        self.constants[name] = value
        with self.graph.inserting_before(next(iter(self.graph.find_nodes(op="output")), None)):
            node = self.graph.get_attr(name)
        node.meta["val"] = value
        self.nodes[id(value)] = node
        self.alive.append(value)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        decomposition = _DECOMPOSITIONS.get(func)
        if decomposition is not None:
            with self:
                out = decomposition(*args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        node_args, node_kwargs = pytree.tree_map(self._arg, (args, kwargs))
        node = self.graph.call_function(func, tuple(node_args), node_kwargs)
        node.meta["val"] = out
        self._register(node, out)
        return out

    def _register(self, node, out) -> None:
        if isinstance(out, torch.Tensor):
            self.nodes[id(out)] = node
            self.alive.append(out)
        elif isinstance(out, (tuple, list)):
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor):
                    item_node = self.graph.call_function(operator.getitem, (node, i))
                    item_node.meta["val"] = item
                    self._register(item_node, item)


def symbolic_fakes(args, dynamic: dict, *, symint_inputs: bool = False):
    """(fakes of `args` with size symbols at `dynamic` dims, SymInts of the symbols, ShapeEnv)."""
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    fakes = [
        mode.from_real(a, LocalSource(f"arg{i}"), dynamic_dims=dynamic.get(i, []))
        if isinstance(a, torch.Tensor)
        else a
        for i, a in enumerate(args)
    ]
    symints = [symint for _, symint in env.graph_inputs()] if symint_inputs else []
    return mode, fakes, symints


def trace_symbolic(fn, *args, dynamic: dict, symint_inputs: bool = False):
    """(graph module, fake example inputs) of fn(*args) with symbolic sizes at `dynamic`."""
    mode, fakes, symints = symbolic_fakes(args, dynamic, symint_inputs=symint_inputs)
    recorder = _Recorder()
    for i, value in enumerate(fakes):
        recorder.add_input(f"arg{i}", value)
    for symint in symints:
        recorder.add_input(symint.node.expr.name, symint)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Raw Sym")
        with torch.no_grad(), mode, recorder:
            out = fn(*fakes)
        flat, _ = pytree.tree_flatten(out)
        recorder.graph.output(tuple(recorder.nodes[id(t)] for t in flat))
    root = torch.nn.Module()
    for name, value in recorder.constants.items():
        root.register_buffer(name, value)
    gm = fx.GraphModule(root, recorder.graph)
    return gm, [*fakes, *symints]


def trace_graph_module(gm: fx.GraphModule) -> fx.GraphModule:
    """The ATen graph of a captured graph, traced on its placeholders' meta["val"] fakes.

    What aot_autograd does for a backend (without autograd): SymInt placeholders
    stay SymInt placeholders; tensor placeholders keep their symbolic sizes.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = [n.meta["val"] for n in placeholders]
    mode = fake_mode_of(values)
    recorder = _Recorder()
    for node, value in zip(placeholders, values):
        recorder.add_input(node.name, value)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Raw Sym")
        with torch.no_grad(), mode, recorder:
            out = gm.forward(*values)
        flat, _ = pytree.tree_flatten(out)
        recorder.graph.output(tuple(recorder.nodes[id(t)] for t in flat))
    root = torch.nn.Module()
    for name, value in recorder.constants.items():
        root.register_buffer(name, value)
    return fx.GraphModule(root, recorder.graph)
