"""Captured graphs printed as torch.compile prints its own: the rules that make
`gm.print_readable()` of a graph handed to a backend read as torch's text.

    placeholder targets   torch's source names with every run of other characters
                          made `_`: `L['x']` -> `L_x_`, `L['self']._modules['lin']
                          ._parameters['weight']` -> `L_self_modules_lin_parameters_weight_`,
                          `G['W']` -> `G_W_`, `L['xs'][0]` -> `L_xs_0_`; FX names the
                          node in snake case (`l_x_`) and the printout begins `l_x_ = L_x_`
    a compiled module     its forward's frame names the inputs (`L['x']`, not the
                          driver's `L['args'][0]`): `module_driver_names`
    placeholder order     torch wraps a frame's argument when an operation first reads
                          it and a module's parameter or buffer when it is read
                          (`order_placeholders`)
    node names            a tensor stored to a local takes the local's name the first
                          time (`name_stored_node`, torch's `set_name_hint`)
    stack traces          `meta["stack_trace"]` as torch writes it, the user's frames
                          outside torch/nn/modules innermost last (`CaptureGraph`), so
                          the printout's blank lines fall where torch's do
    annotations           `"f32[2, 3]"` for a capture fake (`TorchStyleCodeGen`)

Nothing here changes what a graph computes; guards and entry code read the sources,
not these names.
"""

from __future__ import annotations

import inspect
import os
import re
import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.graph import CodeGen
from torch.fx.passes.shape_prop import TensorMetadata

from dynamo_capture.sources import (
    ArraySizesSource,
    FloatTensorSource,
    ItemSource,
    LocalSource,
    NNModuleSource,
    NumpyTensorSource,
    ParamBufferSource,
    PlainTensorSource,
    Source,
)
from guards.fake_tensor import FakeTensor

__all__ = [
    "CaptureGraph",
    "TorchStyleCodeGen",
    "graph_input_name",
    "lend_stack_traces",
    "module_driver_names",
    "name_stored_node",
    "order_placeholders",
    "read_on_load",
    "torch_source_name",
]

# sources capture hands the graph through a conversion: torch names the value read
_CONVERSIONS = (
    FloatTensorSource,
    PlainTensorSource,
    NumpyTensorSource,
    ArraySizesSource,
    NNModuleSource,
)
_NN_MODULES_FILES = re.compile(r".*torch/nn/modules.*")
# capture's own frames (a compiled module's driver, Python stand-ins): no user frames
_CAPTURE_FOLDER = os.path.dirname(os.path.abspath(__file__))


def torch_source_name(source: Source, renamed: dict[Source, str] | None = None) -> str:
    """torch.compile's `Source.name` of a capture source: the expression over `L` and
    `G` (`L['self']._modules['lin']._parameters['weight']`), a module driver's
    arguments read as its forward's locals (`renamed`)."""
    if renamed and source in renamed:
        return renamed[source]
    if isinstance(source, _CONVERSIONS):
        return torch_source_name(source.base, renamed)
    base = source.base
    if base is None:
        return source.expr
    return source.reconstruct(torch_source_name(base, renamed))


def graph_input_name(source: Source, renamed: dict[Source, str] | None = None) -> str:
    """A placeholder's target as torch.compile writes it: its source name with every run
    of characters outside `[a-zA-Z0-9]` made `_` (`L['x']` -> `L_x_`)."""
    return re.sub(r"[^a-zA-Z0-9]+", "_", torch_source_name(source, renamed))


def module_driver_names(module: torch.nn.Module, args: tuple, kwargs: dict) -> dict[Source, str]:
    """The names torch.compile gives a compiled module's inputs, which it reads in the
    frame of `forward` (the driver `self(*args, **kwargs)` reads them at `L['args'][i]`
    and `L['kwargs'][k]`): `L['self']` as forward's first parameter, a positional
    argument as the parameter it binds (`L['args'][1]` where forward takes `*args`
    from there), a keyword argument as its parameter or `L['kwargs'][k]`."""
    forward = getattr(type(module), "forward", None)
    try:
        parameters = list(inspect.signature(forward).parameters.values())
    except (TypeError, ValueError):
        return {}
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return {}
    names: dict[Source, str] = {LocalSource("self"): f"L[{parameters[0].name!r}]"}
    positional = [
        p
        for p in parameters[1:]
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    var_positional = next(
        (p for p in parameters if p.kind is inspect.Parameter.VAR_POSITIONAL), None
    )
    var_keyword = next((p for p in parameters if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    for index in range(len(args)):
        read = ItemSource(LocalSource("args"), index)
        if index < len(positional):
            names[read] = f"L[{positional[index].name!r}]"
        elif var_positional is not None:
            names[read] = f"L[{var_positional.name!r}][{index - len(positional)!r}]"
    named = {p.name for p in parameters[1:] if p.kind is not inspect.Parameter.VAR_POSITIONAL}
    for key in kwargs:
        read = ItemSource(LocalSource("kwargs"), key)
        if key in named and key != getattr(var_keyword, "name", None):
            names[read] = f"L[{key!r}]"
        elif var_keyword is not None:
            names[read] = f"L[{var_keyword.name!r}][{key!r}]"
    return names


def read_on_load(source: Source) -> bool:
    """Whether torch.compile wraps the input where the code reads it (a module's
    parameter or buffer) rather than where an operation first uses it (a frame's
    argument, an item of one, a global)."""
    while source is not None:
        if isinstance(source, ParamBufferSource):
            return True
        source = source.base
    return False


def order_placeholders(
    graph: torch.fx.Graph, realized: dict[torch.fx.Node, tuple[int, int]]
) -> None:
    """Put the placeholders in the order torch.compile makes them (mutates `graph`).

    torch wraps a frame's arguments lazily: an argument becomes a graph input when an
    operation first uses it (in the order of the operation's arguments), or earlier
    where the code inspects it (`y is None`, `x.shape`); a module's parameter or buffer
    where the code reads it (`F.linear(input, self.weight, self.bias)` takes `weight`,
    `bias`, then `input`). `realized` holds the inputs wrapped before a use, each with
    the number of call nodes the graph had then and the order of those events. A size
    symbol's placeholder goes right before the first tensor input with that symbol as
    a size, in the order of its dims.
    """
    placeholders = list(graph.find_nodes(op="placeholder"))
    if len(placeholders) < 2:
        return
    calls = [node for node in graph.nodes if node.op not in ("placeholder", "output")]
    position = {node: index for index, node in enumerate(calls)}
    end = len(calls)

    def first_use(node: torch.fx.Node) -> tuple[int, int]:
        users = list(node.users)
        if len(users) == 1 and users[0].op == "call_method" and users[0].target == "item":
            return first_use(users[0])  # a float input's read: where the number is used
        uses = [user for user in users if user in position]
        if not uses:
            return (end, 0)
        user = min(uses, key=position.__getitem__)
        return (position[user], user.all_input_nodes.index(node))

    symbols: list[torch.fx.Node] = []
    keyed: list[tuple[tuple[int, int, int, int], torch.fx.Node]] = []
    for order, node in enumerate(placeholders):
        if isinstance(node.meta.get("val"), torch.SymInt):
            symbols.append(node)
        else:  # wrapped where first used or, when earlier, where first inspected or read
            at, argument = first_use(node)
            key = (at, 1, argument, order)
            if node in realized:
                calls_then, event = realized[node]
                key = min(key, (calls_then, 0, event, order))
            keyed.append((key, node))
    inputs = [node for _, node in sorted(keyed, key=lambda item: item[0])]
    # a size symbol is lifted right before the first tensor input with it as a size
    lifted: dict[torch.fx.Node, list[tuple[int, torch.fx.Node]]] = {}
    for symbol in symbols:
        holder = next(
            (
                (node, dim)
                for node in inputs
                if (dim := _dim_of(node.meta.get("val"), symbol.meta["val"])) is not None
            ),
            None,
        )
        if holder is None:  # an int input's symbol: where an operation first uses it
            at, argument = first_use(symbol)
            keyed.append(((at, 1, argument, len(placeholders)), symbol))
        else:
            lifted.setdefault(holder[0], []).append((holder[1], symbol))
    ordered: list[torch.fx.Node] = []
    for _, node in sorted(keyed, key=lambda item: item[0]):
        ordered += [symbol for _, symbol in sorted(lifted.get(node, []), key=lambda i: i[0])]
        ordered.append(node)
    if len(ordered) != len(placeholders):  # NOTE: cannot happen; keep the graph's order
        return
    if all(a is b for a, b in zip(ordered, placeholders)):
        return
    first_other = next((n for n in graph.nodes if n.op != "placeholder"), None)
    if first_other is None:  # no output node yet: nothing to order before
        return
    for node in ordered:
        first_other.prepend(node)


def lend_stack_traces(graph: torch.fx.Graph) -> None:
    """A node made before any user code ran (a float input's `.item()` read, made where
    the input is wrapped) takes the stack trace of its first user, where torch.compile
    makes it (mutates node metadata)."""
    position = {node: index for index, node in enumerate(graph.nodes)}
    for node in reversed(graph.nodes):
        if node.op in ("placeholder", "output") or "stack_trace" in node.meta:
            continue
        traced = [user for user in node.users if "stack_trace" in user.meta]
        if traced:
            first = min(traced, key=position.__getitem__)
            node.meta["stack_trace"] = first.meta["stack_trace"]


def _dim_of(tensor: Any, size: torch.SymInt) -> int | None:
    """The first dim of `tensor` whose size is the symbol `size` stands for."""
    if not isinstance(tensor, torch.Tensor):
        return None
    expr = size.node.expr
    for dim, each in enumerate(tensor.shape):
        if isinstance(each, torch.SymInt) and each.node.expr == expr:
            return dim
    return None


def name_stored_node(node: torch.fx.Node, local_name: str, named: dict[torch.fx.Node, str]) -> None:
    """A tensor's node takes the name of the local it is first stored to (torch's
    `TensorVariable.set_name_hint`): `z = a + b` prints `z: "f32[3]" = a + b`. A
    placeholder keeps its name, and a node is renamed once: `named` holds each renamed
    node with the local's name (a copy of it is named in the same steps, region_reuse)."""
    if node.op == "placeholder" or node in named or node.graph is None:
        return
    if not local_name.isidentifier() or any(
        other.target == local_name for other in node.graph.find_nodes(op="placeholder")
    ):  # a local named as an input's target (`L_x_`) would shadow the argument
        return
    named[node] = local_name
    node._rename(local_name)


class CaptureGraph(torch.fx.Graph):
    """The capture graph: every node made while user code runs gets
    `meta["stack_trace"]` as torch.compile writes it (the running frames outside
    torch/nn/modules, outermost first, formatted by `traceback`)."""

    def __init__(self, frames: Callable[[], list[tuple[str, int, str]]]) -> None:
        super().__init__()
        self._frames = frames

    def create_node(self, *args: Any, **kwargs: Any) -> torch.fx.Node:
        node = super().create_node(*args, **kwargs)
        if node.op in ("placeholder", "output") or "stack_trace" in node.meta:
            return node
        frames = [
            traceback.FrameSummary(filename, line, function)
            for filename, line, function in self._frames()
            if not _NN_MODULES_FILES.match(filename)
            and not os.path.abspath(filename).startswith(_CAPTURE_FOLDER + os.sep)
        ]
        if frames:
            node.meta["stack_trace"] = "".join(traceback.StackSummary.from_list(frames).format())
        return node


class TorchStyleCodeGen(CodeGen):
    """FX's code generator, which annotates a capture fake as torch annotates its own
    FakeTensor (`"f32[2, 3]"`, not `"FakeTensor(f32[2, 3])"`) in verbose printouts."""

    def _gen_python_code(self, nodes: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("verbose"):
            return super()._gen_python_code(nodes, *args, **kwargs)
        # NOTE: FX's printer tells torch's FakeTensor from a subclass by class; the
        # capture fake is shown to it as the metadata it prints for the duration of
        # the printing, and put back
        swapped = []
        for node in nodes:
            value = node.meta.get("val")
            if type(value) is FakeTensor:
                swapped.append((node, value))
                node.meta["val"] = TensorMetadata(
                    value.shape, value.dtype, value.requires_grad, (), None, False, {}
                )
        try:
            return super()._gen_python_code(nodes, *args, **kwargs)
        finally:
            for node, value in swapped:
                node.meta["val"] = value
