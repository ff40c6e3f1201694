"""Repeated layers compiled once: regional compilation of identical module calls.

A model whose forward loops over identical blocks (GPT-2's `h`, Llama's `layers`,
BERT's `layer`) is captured as one graph holding N copies of the block. The
inductor and aot_eager backends cut such a graph at the block calls and compile
each distinct piece once; every call of a block runs the same compiled piece with
its own parameters, forward and backward:

    piece 0 (embeddings)    placeholders ... -> hidden
    piece 1 (block)         hidden, h.0's parameters -> hidden      compiled once,
    piece 1 (block)         hidden, h.1's parameters -> hidden      run for each block
    ...
    piece 2 (final norm)    hidden, ln_f's parameters -> output

Capture tags each node with the module calls it was made in (`MODULE_CALLS`).
Two calls are the same region when the graphs cut out of them are the same: the
same code (node by node, with canonical names), the same functions called (by
identity), the same constants, and inputs of the same kind, dtype, shape, strides,
device and requires_grad. What differs between blocks in any way the graph shows
(a hook on one block, an extra attribute read, another shape) makes their graphs
differ, so they are not merged. The outermost level with repeated calls is used;
a call of fewer than `MIN_REGION_OPS` operations is not worth a piece of its own,
and a block repeated fewer than `MIN_REGION_REPEATS` times is compiled inside the
whole graph: two copies save little compile time, and the whole graph fuses across
the blocks' edges and runs each call as one piece (2-7% faster steps on 2-layer
models).

The distinct pieces are compiled when the graph is, not at their first calls: their
C++ kernels are built in one batch (`inductor_codegen.deferred_builds`), and their
backwards in one more at the first backward (`aot_autograd.runtime.compile_together`),
so a model of any depth pays two compiler runs, as its whole graph would.

A graph that switches grad mode or autocast (`_set_grad_enabled`, `_enter_autocast`,
`_exit_autocast` nodes) is cut too. Each node's mode (grad enabled, the autocast blocks
open) is followed through the graph; a module call is a region only where its nodes all
run in one mode, or where its own switches are undone inside it (then compiled with
them, alike in every copy); its starting mode is part of its signature, so blocks run
in other modes are other regions. The switches between regions are pieces of their
own, run by the graph chaining the pieces, in the process, as eager runs them:

    piece 0 (embeddings)
    switch                  _set_grad_enabled(False)          a rotary under no_grad,
    switch                  _enter_autocast("cpu", ..., False, ...)    autocast off
    piece 1 (rotary)
    switch                  _exit_autocast(...)
    switch                  _set_grad_enabled(True)
    piece 2 (block) ...     compiled once, in the mode the switches left

A piece compiles for the grad mode and autocast state it is called in (aot_autograd
keys its compiles by them); compiled ahead, the switches are replayed around it.

The whole graph is compiled as before when nothing repeats, when its autocast blocks are
not entered and left in order within it, when it sets other process state (default
dtype, deterministic algorithms, inference mode), or when it writes in place to a tensor
other than an input of its own that shares memory with no other input (such as a
BatchNorm's counter): a piece's inputs may alias in ways its own compile cannot see. A
backend whose graphs never write an input themselves (aot_eager) compiles whole, by
default, a graph writing an input in place: every piece would copy it back
(`ember.backends`). `options={"regional": False}` always compiles the whole graph (one
piece: fusion across block boundaries, longer compiles).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import math
import operator
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from dynamo_capture.calls import MODULE_CALLS
from dynamo_capture.symbolic_indexing import assign_indexed_, basic_index, indexed_view
from ember.artifacts import BackendRecord, PiecesRecord
from guards import artifact_logger

__all__ = [
    "MIN_REGION_OPS",
    "MIN_REGION_REPEATS",
    "Piece",
    "plan_pieces",
    "regional",
    "writes_inputs",
]

MIN_REGION_OPS = 10
MIN_REGION_REPEATS = 3
_log = artifact_logger("graph_breaks")
_SET_GRAD = torch._C._set_grad_enabled
_ENTER_AUTOCAST = torch.amp.autocast_mode._enter_autocast
_EXIT_AUTOCAST = torch.amp.autocast_mode._exit_autocast
# Switches of grad mode and autocast: run by the graph chaining the pieces (see `_between`)
_MODE_SWITCHES = (_SET_GRAD, _ENTER_AUTOCAST, _EXIT_AUTOCAST)
# Other process state a graph may set: such a graph is compiled whole
_STATE_SETTERS = (
    torch.set_default_dtype,
    torch._C._set_deterministic_algorithms,
    torch.autograd.grad_mode._enter_inference_mode,
    torch.autograd.grad_mode._exit_inference_mode,
)
_IN_PLACE_OPERATORS = (
    operator.setitem,
    operator.delitem,
    operator.iadd,
    operator.isub,
    operator.imul,
    operator.itruediv,
    operator.ifloordiv,
    operator.imod,
    operator.ipow,
    operator.imatmul,
    operator.iand,
    operator.ior,
    operator.ixor,
    operator.ilshift,
    operator.irshift,
)
# Ops whose result is a view of their first argument (a write to it writes to that)
_VIEW_METHODS = frozenset(
    ("__getitem__", "select", "narrow", "view", "transpose", "permute", "unsqueeze")
    + ("squeeze", "expand", "unflatten", "diagonal", "movedim", "t", "view_as")
)
_VIEW_FUNCTIONS = frozenset(
    (operator.getitem, indexed_view, torch.select, torch.narrow, torch.transpose)
    + (torch.permute,)
    + (torch.unsqueeze, torch.squeeze, torch.diagonal, torch.movedim, torch.t)
)
# Argument values a graph's code prints as themselves; anything else is named by identity.
_PRINTED = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout)
_PRINTED += (torch.memory_format, type(Ellipsis))


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of consecutive graph nodes cut out as a graph of its own.

    The piece's graph takes `inputs` (nodes of the whole graph, in order of first
    use), then the int constants at the slots `lifted` (their values in `constants`,
    every int argument of the nodes in order), and returns `outputs`; `signature` is
    equal for pieces that compute the same thing. The graph is built only for the
    pieces compiled (`graph()`, `module()`).
    """

    nodes: tuple[torch.fx.Node, ...]
    inputs: tuple[torch.fx.Node, ...]
    outputs: tuple[torch.fx.Node, ...]
    signature: tuple
    region: str  # the module call it is cut at ("" between regions)
    constants: tuple[int, ...] = ()
    # slots of `constants` that are inputs of the graph, one input per tuple of slots
    lifted: tuple[tuple[int, ...], ...] = ()
    # the size symbols of its inputs and code, in order of first appearance (the
    # signature names them by that order); `own_symbols`: pieces alike but for which
    # symbols they read share one compile, over symbols of a ShapeEnv of its own
    symbols: tuple[str, ...] = ()
    own_symbols: bool = False
    # a switch of grad mode or autocast (one node): run by the graph chaining the pieces,
    # not compiled, so that the pieces after it run (and compile) in the mode it sets
    switch: bool = False

    def lifted_values(self) -> tuple[int, ...]:
        """This call's values of the lifted constants (the graph's last inputs)."""
        return tuple(self.constants[slots[0]] for slots in self.lifted)

    def graph(self) -> torch.fx.Graph:
        """The nodes copied into a graph of their own, with canonical names."""
        graph = torch.fx.Graph()
        local: dict[torch.fx.Node, torch.fx.Node] = {}
        for index, used in enumerate(self.inputs):
            local[used] = graph.placeholder(f"input_{index}")
            local[used].meta = dict(used.meta)
        slots: dict[int, torch.fx.Node] = {}
        for index, shared in enumerate(self.lifted):
            placeholder = graph.placeholder(f"constant_{index}")
            placeholder.meta["val"] = self.constants[shared[0]]
            slots.update(dict.fromkeys(shared, placeholder))
        counter = iter(range(len(self.constants)))
        for index, node in enumerate(self.nodes):
            args = torch.fx.map_arg(node.args, local.__getitem__)
            kwargs = torch.fx.map_arg(node.kwargs, local.__getitem__)
            target = node.target
            if slots:
                lifted_args = _lift_ints(args, counter, slots)
                kwargs = _lift_ints(kwargs, counter, slots)
                target = _symbolic_indexing(node, args, lifted_args)
                args = lifted_args
            copy = graph.create_node(node.op, target, args, kwargs, name=f"n{index}")
            copy.meta = dict(node.meta)
            local[node] = copy
        graph.output(tuple(local[node] for node in self.outputs))
        return graph

    def module(self, root: torch.nn.Module) -> torch.fx.GraphModule:
        """The piece as a graph module (made only for the pieces compiled)."""
        return torch.fx.GraphModule(root, self.graph(), class_name="region_graph")


# ----------------------------------------------------------------- what may be cut


def _name(target: Any) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", "")


@functools.lru_cache(maxsize=256)
def _inplace_parameter(target: Any) -> inspect.Signature | None:
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    return signature if "inplace" in signature.parameters else None


def _writes_in_place(node: torch.fx.Node) -> bool:
    """The node may write to a tensor it is given (conservatively)."""
    if node.op not in ("call_function", "call_method"):
        return False
    if getattr(node.target, "__module__", None) in ("operator", "_operator"):
        return node.target in _IN_PLACE_OPERATORS  # operator.and_ and not_ compute anew
    name = _name(node.target)
    if name.endswith("_") and not name.endswith("__"):
        return True
    if name in ("__setitem__", "__delitem__") or (name.startswith("__i") and name.endswith("__")):
        return True  # x[i] = y, x += y
    if node.target in _IN_PLACE_OPERATORS or "out" in node.kwargs:
        return True
    if node.kwargs.get("inplace") is True:
        return True
    if node.op == "call_function" and any(a is True for a in node.args):
        signature = _inplace_parameter(node.target)
        if signature is not None:
            try:
                bound = signature.bind(*node.args, **node.kwargs)
            except TypeError:
                return True
            return bound.arguments.get("inplace") is True
    return False


def writes_inputs(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph writes in place to a tensor (an input, as a cut graph may only):
    each piece doing so copies that input back after it runs, where no kernel of its
    own writes the input (aot_eager)."""
    return any(_writes_in_place(node) for node in gm.graph.nodes)


def _separate_inputs(gm: torch.fx.GraphModule, example_inputs: list | None) -> set:
    """The graph's tensor inputs that share memory with no other input (by their examples)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if example_inputs is None or len(example_inputs) != len(placeholders):
        return set()
    owners: dict[int, list[torch.fx.Node]] = collections.defaultdict(list)
    for node, example in zip(placeholders, example_inputs, strict=True):
        if not isinstance(example, torch.Tensor) or type(example) is not torch.Tensor:
            if type(example) is not torch.nn.Parameter:
                continue
        try:
            pointer = example.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            continue
        if pointer:
            owners[pointer].append(node)
    return {nodes[0] for nodes in owners.values() if len(nodes) == 1}


def _view_base(value: Any) -> Any:
    """The node `value` is a view of, through view ops of the graph (`cache[i][0, :, p]`,
    `cache.select(0, i)`): the written tensor of a write through a view."""
    while isinstance(value, torch.fx.Node) and value.args:
        viewing = value.op == "call_method" and value.target in _VIEW_METHODS
        viewing = viewing or value.op == "call_function" and value.target in _VIEW_FUNCTIONS
        if not viewing or not isinstance(value.meta.get("val"), torch.Tensor):
            return value
        value = value.args[0]
    return value


def _why_whole(gm: torch.fx.GraphModule, example_inputs: list | None) -> str | None:
    """Why the graph must be compiled whole (None: it may be cut).

    A piece that writes in place to one of its inputs (or to a view of one) is cut only
    where that input is an input of the whole graph sharing memory with no other (a
    module's buffer, a cache tensor): the piece's own compile cannot see other inputs
    aliasing it.
    """
    separate = _separate_inputs(gm, example_inputs)
    if _autocast_on() and any(
        node.op == "call_function" and node.target in (_ENTER_AUTOCAST, _EXIT_AUTOCAST)
        for node in gm.graph.nodes
    ):
        # NOTE: cut at its autocast switches, an AMP training step of a Llama whose rotary
        # embedding turns autocast off ran 1.11x slower than whole (RESULTS.md)
        return "it switches autocast inside an enabled autocast region"
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _STATE_SETTERS:
            return f"it sets process state ({node.format_node()})"
        if _writes_in_place(node) and not (node.args and _view_base(node.args[0]) in separate):
            return f"it writes to a tensor in place ({node.format_node()})"
        if node.op == "call_module":
            return "it calls a submodule"
    return None


# ----------------------------------------------------------------- grad mode and autocast


def _autocast_on() -> bool:
    return any(torch.is_autocast_enabled(device) for device in ("cpu", "cuda"))


# The mode a node runs in: (grad enabled, the autocast blocks open, innermost last, each by
# its `_enter_autocast` arguments: device type, dtype, enabled, cache enabled).
Mode = tuple[bool, tuple[tuple, ...]]


def _is_switch(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in _MODE_SWITCHES


def _modes(compute: list[torch.fx.Node]) -> list[Mode] | str:
    """The mode each node of `compute` runs in (a switch: the mode before it), then the
    mode after the last; or why the switches cannot be followed (the graph is then
    compiled whole).

    The graph starts in the grad mode of the process now (capture guards it); autocast
    blocks are described relative to the caller's state (the switches run as they do
    in eager, over whatever autocast state the caller set).
    """
    grad = torch.is_grad_enabled()
    blocks: list[torch.fx.Node] = []
    modes: list[Mode] = []
    for node in compute:
        modes.append((grad, tuple(tuple(block.args) for block in blocks)))
        if not _is_switch(node):
            continue
        if node.kwargs:
            return f"a switch with keyword arguments ({node.format_node()})"
        if node.target is _SET_GRAD:
            if len(node.args) != 1 or type(node.args[0]) is not bool:
                return f"a grad mode known only when it runs ({node.format_node()})"
            grad = node.args[0]
        elif node.target is _ENTER_AUTOCAST:
            if node.all_input_nodes or not all(
                user.target is _EXIT_AUTOCAST for user in node.users
            ):
                return f"an autocast block used otherwise than left ({node.format_node()})"
            blocks.append(node)
        elif len(node.args) != 1 or not blocks or node.args[0] is not blocks.pop():
            return f"autocast blocks left out of order ({node.format_node()})"
    if blocks:
        return "it enters autocast without leaving it"
    modes.append((grad, ()))
    return modes


def _closed_switches(nodes: list[torch.fx.Node], modes: list[Mode], first: int) -> bool:
    """The switches among `nodes` (consecutive, from position `first`) are undone inside
    them: every autocast block they enter or leave is entered and left there, and the mode
    after them is the mode before. Such a call is a region of its own switches, compiled
    with them; a call that leaves a mode switched is not one."""
    inside = set(nodes)
    switches = [node for node in nodes if _is_switch(node)]
    for node in switches:
        partners = node.users if node.target is _ENTER_AUTOCAST else node.all_input_nodes
        if any(partner not in inside for partner in partners):
            return False
    return not switches or modes[first + len(nodes)] == modes[first]


class _ModesReplayed:
    """The switches of a graph run as they come, as the graph chaining the pieces runs
    them (to compile the pieces ahead, each in its own mode); leaving the context leaves
    the autocast blocks still open and sets back the grad mode it found."""

    def __init__(self) -> None:
        self.grad = torch.is_grad_enabled()
        self.blocks: dict[torch.fx.Node, Any] = {}

    def __enter__(self) -> _ModesReplayed:
        return self

    def run(self, node: torch.fx.Node) -> None:
        if node.target is _SET_GRAD:
            _SET_GRAD(*node.args)
        elif node.target is _ENTER_AUTOCAST:
            self.blocks[node] = _ENTER_AUTOCAST(*node.args)
        else:
            _EXIT_AUTOCAST(self.blocks.pop(node.args[0]))

    def __exit__(self, *exc: object) -> None:
        for block in reversed(list(self.blocks.values())):
            _EXIT_AUTOCAST(block)
        self.blocks.clear()
        _SET_GRAD(self.grad)


_chain_blocks = threading.local()  # the autocast blocks the chaining graphs entered, by thread


def _open_blocks() -> list[Any]:
    blocks = getattr(_chain_blocks, "blocks", None)
    if blocks is None:
        blocks = _chain_blocks.blocks = []
    return blocks


def _chain_enter_autocast(*args: Any) -> Any:
    """`_enter_autocast` in a chaining graph, recorded so that a piece raising leaves no
    block open (see `_chained`)."""
    block = _ENTER_AUTOCAST(*args)
    _open_blocks().append(block)
    return block


def _chain_exit_autocast(block: Any) -> None:
    """`_exit_autocast` in a chaining graph."""
    blocks = _open_blocks()
    if blocks and blocks[-1] is block:
        blocks.pop()
    _EXIT_AUTOCAST(block)


_CHAIN_SWITCHES = {_ENTER_AUTOCAST: _chain_enter_autocast, _EXIT_AUTOCAST: _chain_exit_autocast}


# ----------------------------------------------------------------- cutting


class _CanonicalSymbols:
    """Size symbols named by their order of first appearance in a piece (`c0`, `c1`, ...),
    so that pieces reading other symbols the same way are described alike; each one's
    range is part of the description."""

    def __init__(self) -> None:
        self.names: dict[Any, Any] = {}  # the graph's symbol -> its canonical symbol
        self.ranges: list[tuple[str, str]] = []

    def text(self, value: Any) -> str:
        if not isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
            return str(value)
        import sympy

        node = value.node
        expr = node.expr
        for symbol in sorted(expr.free_symbols, key=str):
            if symbol not in self.names:
                self.names[symbol] = sympy.Symbol(f"c{len(self.names)}", **symbol.assumptions0)
                bounds = node.shape_env.bound_sympy(symbol)
                self.ranges.append((str(bounds.lo), str(bounds.hi)))
        return str(expr.xreplace(self.names))


def _describe_value(value: Any, names: _CanonicalSymbols) -> tuple:
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            str(value.dtype),
            tuple(names.text(s) for s in value.shape),
            tuple(names.text(s) for s in value.stride()),
            names.text(value.storage_offset()),
            str(value.device),
            str(value.layout),
            value.requires_grad,
            type(value).__name__,
        )
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return _describe_number(value, names)
    if isinstance(value, _PRINTED):
        return (type(value).__name__, repr(value))
    return ("object", id(value))


def _describe_number(value: Any, names: _CanonicalSymbols) -> tuple:
    """A SymInt / SymFloat / SymBool by its expression, a constant float with every digit
    (a float input capture specialized: its `.item()` read shows the value nowhere else)."""
    if not isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return ()
    expr = value.node.expr
    if isinstance(value, torch.SymFloat) and expr.is_Number:
        return (type(value).__name__, repr(float(expr)))
    return (type(value).__name__, names.text(value))


def _is_int(value: Any) -> bool:
    return type(value) is int  # not a bool, not an int subclass (an enum member)


def _structure(value: Any, local: dict[torch.fx.Node, int], ints: list[int]) -> Any:
    """A node argument as a hashable description: graph nodes by their place in the
    piece, ints by their slot (their values appended to `ints`, in the order
    `_lift_ints` walks them), other printed constants by type and text, other objects
    by identity (the graph holds them, so no identity is reused meanwhile)."""
    if isinstance(value, torch.fx.Node):
        return local[value]
    if _is_int(value):
        ints.append(value)
        return ("int", len(ints) - 1)
    if isinstance(value, list | tuple):
        return (type(value).__name__, *(_structure(item, local, ints) for item in value))
    if isinstance(value, dict):
        items = ((_structure(k, local, []), _structure(v, local, ints)) for k, v in value.items())
        return ("dict", *items)
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
        return ("slice", *(_structure(v, local, ints) for v in parts))
    if isinstance(value, _PRINTED):
        return (type(value).__name__, repr(value))
    return ("object", id(value))


def _lift_ints(value: Any, counter: Any, slots: dict[int, torch.fx.Node]) -> Any:
    """`value` with the ints at `slots` replaced by those placeholders; `counter` numbers
    the ints as `_structure` does (every int, lifted or not, in the same order)."""
    if _is_int(value):
        return slots.get(next(counter), value)
    if isinstance(value, list | tuple):
        items = [_lift_ints(item, counter, slots) for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if hasattr(type(value), "_fields"):  # a named tuple
            return type(value)(*items)
        return type(value)(items)
    if isinstance(value, dict):
        lifted = {key: _lift_ints(item, counter, slots) for key, item in value.items()}
        if all(lifted[key] is item for key, item in value.items()):
            return value
        return type(value)(lifted)
    if isinstance(value, slice):
        parts = [_lift_ints(v, counter, slots) for v in (value.start, value.stop, value.step)]
        return slice(*parts)
    return value


def _symbolic_indexing(node: torch.fx.Node, args: tuple, lifted_args: tuple) -> Any:
    """The target of a piece's copy of `node`: `indexed_view` / `assign_indexed_` for
    basic indexing of a tensor at a lifted int (Tensor.__getitem__ and __setitem__ read
    a SymInt index as an int, which would specialize it), else the node's own."""
    if node.op != "call_function" or node.target not in (operator.getitem, operator.setitem):
        return node.target
    if args == lifted_args or not isinstance(node.args[0], torch.fx.Node):
        return node.target
    if not isinstance(node.args[0].meta.get("val"), torch.Tensor):
        return node.target
    if not basic_index(lifted_args[1], _basic_entry):
        return node.target
    return indexed_view if node.target is operator.getitem else assign_indexed_


def _basic_entry(entry: Any) -> bool:
    """An int of a basic index: a constant or a lifted int (a placeholder of int value)."""
    if isinstance(entry, torch.fx.Node):
        return entry.op == "placeholder" and _is_int(entry.meta.get("val"))
    return _is_int(entry)


def cut_piece(
    nodes: list[torch.fx.Node], inside: set[torch.fx.Node], region: str, mode: Mode | None = None
) -> Piece:
    """`nodes` (consecutive, `inside` as a set) as a piece: its inputs, outputs and a
    signature equal for pieces whose graphs (with canonical names) are the same code
    calling the same functions with the same constants, on inputs alike, starting in the
    same grad mode and autocast blocks (`mode`). The signature
    without its last part (the int constants) is the same for pieces that differ only
    in their ints (`_lift_varying_ints`)."""
    inputs: dict[torch.fx.Node, None] = {}
    for node in nodes:
        for used in node.all_input_nodes:
            if used not in inside:
                inputs.setdefault(used)
    outputs = [n for n in nodes if any(user not in inside for user in n.users)]
    # inputs numbered from -1 down, the piece's own nodes from 0 up
    local = {used: -1 - index for index, used in enumerate(inputs)}
    names = _CanonicalSymbols()
    described = tuple(_describe_value(used.meta.get("val"), names) for used in inputs)
    code = []
    ints: list[int] = []
    for index, node in enumerate(nodes):
        target = node.target if isinstance(node.target, str) else ("object", id(node.target))
        arguments = (_structure(node.args, local, ints), _structure(node.kwargs, local, ints))
        code.append((node.op, target, *arguments, _describe_number(node.meta.get("val"), names)))
        local[node] = index
    outputs_at = tuple(local[node] for node in outputs)
    signature = (tuple(code), outputs_at, described, tuple(names.ranges), mode, tuple(ints))
    symbols = tuple(str(symbol) for symbol in names.names)
    return Piece(
        tuple(nodes), tuple(inputs), tuple(outputs), signature, region, tuple(ints), (), symbols
    )


def _module_calls(
    compute: list[torch.fx.Node],
) -> dict[int, tuple[int, tuple, list[torch.fx.Node]]]:
    """call number -> (depth, the calls it is made in, its nodes in graph order)."""
    calls: dict[int, tuple[int, tuple, list[torch.fx.Node]]] = {}
    for node in compute:
        stack = node.meta.get(MODULE_CALLS, ())
        for depth, tag in enumerate(stack):
            entry = calls.get(tag[0])
            if entry is None:
                entry = calls[tag[0]] = (depth, stack[: depth + 1], [])
            entry[2].append(node)
    return calls


def _regions(compute: list[torch.fx.Node], lift_ints: bool, modes: list[Mode]) -> list[Piece]:
    """The module calls that repeat (the outermost level), cut as pieces: calls whose
    nodes all run in one mode, or whose switches are undone inside them."""
    position = {node: index for index, node in enumerate(compute)}
    calls = _module_calls(compute)
    chosen: set[int] = set()
    regions: list[Piece] = []
    for depth in sorted({depth for depth, _, _ in calls.values()}):
        pieces: list[Piece] = []
        for call_depth, stack, nodes in calls.values():
            if call_depth != depth or any(tag[0] in chosen for tag in stack[:-1]):
                continue
            if len(nodes) < MIN_REGION_OPS:
                continue
            first = position[nodes[0]]
            if position[nodes[-1]] - first + 1 != len(nodes):
                continue  # not one run of nodes
            if not _closed_switches(nodes, modes, first):
                continue  # a mode switched inside and left so, or a block left outside
            tag = stack[-1]
            region = f"{tag[1]} ({tag[2].__qualname__})"
            pieces.append(cut_piece(nodes, set(nodes), region, modes[first]))
        for group in _alike_groups(pieces, lift_ints):
            if len(group) < MIN_REGION_REPEATS:
                continue
            regions.extend(group)
            for piece in group:
                chosen.add(piece.nodes[0].meta[MODULE_CALLS][depth][0])
    return sorted(regions, key=lambda piece: position[piece.nodes[0]])


def _alike_groups(pieces: list[Piece], lift_ints: bool) -> list[list[Piece]]:
    """`pieces` grouped into pieces compiled once: those equal but for their int constants
    (a layer's index into a cache shared by all layers) share one graph taking the ints
    that differ as inputs; where that cannot be (symbolic inputs), equal pieces."""
    loose: dict[tuple, list[Piece]] = collections.defaultdict(list)
    for piece in pieces:
        loose[piece.signature[:-1]].append(piece)
    groups: list[list[Piece]] = []
    for group in loose.values():
        many = len(group) >= MIN_REGION_REPEATS
        lifted = _lift_varying_ints(group) if lift_ints and many else None
        if lifted is not None:
            groups.append(lifted)
            continue
        strict: dict[tuple, list[Piece]] = collections.defaultdict(list)
        for piece in group:
            strict[piece.signature].append(piece)
        groups.extend(strict.values())
    return [_with_own_symbols(group) for group in groups]


def _with_own_symbols(group: list[Piece]) -> list[Piece]:
    """`group`, compiled over symbols of its own where its pieces read other symbols."""
    if len({piece.symbols for piece in group}) == 1:
        return group
    return [dataclasses.replace(piece, own_symbols=True) for piece in group]


def _lift_varying_ints(group: list[Piece]) -> list[Piece] | None:
    """`group` (pieces equal but for their int constants) as pieces of one graph taking the
    ints that differ between them as inputs; the group itself where none differ; None
    where an input is unknown (the ints are lifted as symbols of a ShapeEnv of the
    piece's own, over fakes of its inputs: an input of symbolic sizes gets symbols of
    that ShapeEnv in place of the graph's, see `_symbolic_module`).

    The piece's compile traces the ints as symbols: what it assumes of them (an index in
    range, or a value it had to specialize) is checked at every call, and a call
    breaking an assumption runs a graph compiled for its own values.
    """
    slots = range(len(group[0].constants))
    values = {s: tuple(piece.constants[s] for piece in group) for s in slots}
    varying = [s for s in slots if len(set(values[s])) > 1]
    if not varying:
        return group
    if not all(_liftable_input(used.meta.get("val")) for used in group[0].inputs):
        return None
    if any(value < 0 for s in varying for value in values[s]):
        return None  # an index from the end: left as a constant (see `indexed_view`)
    # slots holding the same value in every call (one index used four times) share an input
    shared: dict[tuple[int, ...], list[int]] = collections.defaultdict(list)
    for s in varying:
        shared[values[s]].append(s)
    lifted = tuple(tuple(same) for same in shared.values())
    kept = tuple(None if s in varying else group[0].constants[s] for s in slots)
    signature = (*group[0].signature[:-1], kept, ("lifted", lifted))
    return [dataclasses.replace(p, signature=signature, lifted=lifted) for p in group]


def _liftable_input(value: Any) -> bool:
    """`value` (a piece's input) is a tensor whose sizes, strides and offset are ints or
    SymInts with hints, a SymInt with a hint, or a plain constant."""
    if isinstance(value, torch.Tensor):
        numbers = (*value.shape, *value.stride(), value.storage_offset())
        return all(type(n) is int or _hinted(n) for n in numbers)
    if isinstance(value, torch.SymInt):
        return _hinted(value)
    return isinstance(value, _PRINTED) and value is not None


def _hinted(number: Any) -> bool:
    return isinstance(number, torch.SymInt) and number.node.hint is not None


def plan_pieces(
    gm: torch.fx.GraphModule, example_inputs: list | None = None, *, lift_ints: bool = True
) -> list[Piece] | None:
    """The graph cut at its repeated module calls; None where it is compiled whole.

    With `lift_ints`, calls that differ only in int constants of their code (a layer's
    index into a cache tensor shared by all layers) are one region taking those ints
    as inputs; without, they are alike only where their ints are equal too.
    """
    compute = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    why = _why_whole(gm, example_inputs)
    modes = _modes(compute)
    if why is None and isinstance(modes, str):
        why = modes
    if why is not None:
        _log.debug("%s compiled whole: %s", type(gm).__name__, why)
        return None
    regions = _regions(compute, lift_ints, modes)
    if not regions:
        return None
    pieces: list[Piece] = []
    start = 0
    position = {node: index for index, node in enumerate(compute)}
    for region in regions:
        first = position[region.nodes[0]]
        pieces.extend(_between(compute, start, first, modes))
        pieces.append(region)
        start = first + len(region.nodes)
    pieces.extend(_between(compute, start, len(compute), modes))
    return pieces


def _between(compute: list[torch.fx.Node], start: int, stop: int, modes: list[Mode]) -> list[Piece]:
    """The nodes from `start` to `stop` (between regions) as pieces, each switch of grad
    mode or autocast a piece of its own run by the chaining graph, so that every piece
    compiled runs in one mode."""
    pieces: list[Piece] = []
    run: list[torch.fx.Node] = []
    for index in range(start, stop + 1):
        node = compute[index] if index < stop else None
        if run and (node is None or _is_switch(node)):
            pieces.append(cut_piece(run, set(run), "", modes[index - len(run)]))
            run = []
        if node is not None and _is_switch(node):
            outputs = (node,) if node.users else ()
            signature = ("switch", id(node))
            inputs = tuple(node.all_input_nodes)
            pieces.append(Piece((node,), inputs, outputs, signature, "", switch=True))
        elif node is not None:
            run.append(node)
    return pieces


# ----------------------------------------------------------------- running


def _piece_function(compiled: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`compiled` under the name the chaining graph calls it by."""

    def piece(*args: Any) -> Any:
        return compiled(*args)

    piece.__name__ = piece.__qualname__ = name
    return piece


def chain(gm: torch.fx.GraphModule, pieces: list[Piece], compiled: list[Any]) -> Any:
    """A graph module calling the compiled pieces in order.

    # NOTE: the pieces are functions the graph calls (call_function), not submodules: a
    # submodule's call goes through `Module.__call__` (hooks, tracing state), about 1.5 us
    # a piece on every call of the model.
    """
    top = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    nodes = list(gm.graph.nodes)
    for node in nodes:
        if node.op == "placeholder":
            env[node] = top.node_copy(node)
    functions: dict[int, Callable[..., Any]] = {}  # equal pieces share one function
    for piece, function in zip(pieces, compiled, strict=True):
        if piece.switch:  # run here, in the process: the pieces after it run in its mode
            (node,) = piece.nodes
            env[node] = top.node_copy(node, env.__getitem__)
            env[node].target = _CHAIN_SWITCHES.get(node.target, node.target)
            continue
        target = functions.get(id(function))
        if target is None:
            target = functions[id(function)] = _piece_function(function, f"piece_{len(functions)}")
        arguments = (*(env[used] for used in piece.inputs), *piece.lifted_values())
        call = top.call_function(target, arguments)
        for position, node in enumerate(piece.outputs):
            env[node] = top.call_function(operator.getitem, (call, position))
            env[node].meta = dict(node.meta)
    top.node_copy(nodes[-1], env.__getitem__)
    return torch.fx.GraphModule(torch.nn.Module(), top, class_name=f"{type(gm).__name__}_regions")


def _compile_ahead(pieces: list[Piece], compiled: list[Any]) -> None:
    """The distinct pieces traced and compiled now, not at their first calls, each in the
    grad mode and autocast blocks it runs in: their C++ kernels are built in one batch (a
    compiler process costs about 0.1 s before it reads a kernel, paid once rather than
    once a piece); their backwards, compiled at the first backward of any of them, in
    one batch more."""
    from aot_autograd.runtime import compile_together
    from inductor_codegen import deferred_builds

    ahead: dict[int, Any] = {}
    with deferred_builds(), _ModesReplayed() as replay:
        for piece, function in zip(pieces, compiled, strict=True):
            if piece.switch:
                replay.run(piece.nodes[0])
                continue
            aot = getattr(function, "aot", None)
            if id(function) in ahead or not callable(getattr(aot, "compile_ahead", None)):
                continue
            ahead[id(function)] = aot
            aot.compile_ahead()
    backwards = [backward for aot in ahead.values() for backward in aot.deferred_backwards()]
    compile_together(backwards, deferred_builds)


def regional(compile_graph: Callable[..., Any]) -> Callable[..., Any]:
    """`compile_graph`, compiling each distinct piece of a graph with repeated module
    calls once (see the module docstring); other graphs go to it whole."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        pieces = plan_pieces(gm, example_inputs)
        if pieces is not None and any(piece.lifted for piece in pieces):
            try:
                return _compile_chained(gm, example_inputs, pieces, compile_graph)
            except Exception as error:  # noqa: BLE001 - cutting at equal ints is always an option
                _log.info(
                    "%s: a piece taking its ints as inputs did not compile (%s: %s); "
                    "cutting at calls with equal ints only",
                    type(gm).__name__, type(error).__name__, error,
                )  # fmt: skip
                pieces = plan_pieces(gm, example_inputs, lift_ints=False)
        if pieces is None:
            return compile_graph(gm, example_inputs)
        try:
            return _compile_chained(gm, example_inputs, pieces, compile_graph)
        except Exception as error:  # noqa: BLE001 - the whole graph is always an option
            _log.info(
                "%s compiled whole: a piece did not compile (%s: %s)",
                type(gm).__name__, type(error).__name__, error,
            )  # fmt: skip
            return compile_graph(gm, example_inputs)

    backend.__name__ = backend.__qualname__ = compile_graph.__name__
    backend.__doc__ = compile_graph.__doc__
    return backend


def _compile_chained(
    gm: torch.fx.GraphModule,
    example_inputs: list,
    pieces: list[Piece],
    compile_graph: Callable[..., Any],
) -> Callable[..., Any]:
    """Each distinct piece compiled once, the pieces run in order."""
    # A piece's example inputs: the graph's own where it takes them (real tensors:
    # their memory sharing is known, so warm start may store the piece), the
    # recorded fake values of the others, then its lifted ints.
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    given = dict(zip(placeholders, example_inputs, strict=False))
    by_signature: dict[tuple, Any] = {}
    compiled: list[Any] = []
    for piece in pieces:
        if piece.switch:
            compiled.append(None)
            continue
        function = by_signature.get(piece.signature)
        if function is None:
            examples = [given.get(used, used.meta.get("val")) for used in piece.inputs]
            examples.extend(piece.lifted_values())
            own = piece.lifted or piece.own_symbols
            module = _symbolic_module(piece, gm) if own else piece.module(gm)
            function = compile_graph(module, examples)
            by_signature[piece.signature] = function
        compiled.append(function)
    _compile_ahead(pieces, compiled)
    return _chained(gm, pieces, by_signature, compiled)


def _symbolic_module(piece: Piece, root: torch.nn.Module) -> torch.fx.GraphModule:
    """The graph module of a piece with lifted ints: its placeholders' values are fakes
    of a FakeTensorMode of its own (static sizes, as the inputs have) and the ints are
    symbols of that mode's ShapeEnv, so the piece compiles once for every value."""
    from guards import FakeTensorMode, LocalSource, ShapeEnv

    module = piece.module(root)
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    own = _OwnSymbols(env)
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    for node in placeholders[: len(piece.inputs)]:
        value = node.meta.get("val")
        if isinstance(value, torch.SymInt):
            node.meta["val"] = own.number(value, node.name)
        elif isinstance(value, torch.Tensor):
            shape = tuple(own.number(n, f"{node.name}_size{d}") for d, n in enumerate(value.shape))
            stride = tuple(
                own.number(n, f"{node.name}_stride{d}") for d, n in enumerate(value.stride())
            )
            offset = own.number(value.storage_offset(), f"{node.name}_offset")
            extent = offset + sum((n - 1) * st for n, st in zip(shape, stride))
            with mode:
                base = torch.empty(extent + 1, dtype=value.dtype, device=value.device)
                fake = base.as_strided(shape, stride, offset)
            node.meta["val"] = fake.requires_grad_(value.requires_grad)
    for node, value in zip(placeholders[len(piece.inputs) :], piece.lifted_values(), strict=True):
        symbol = env.create_int_symbol(value, LocalSource(node.name))
        node.meta["val"] = env.create_symint(symbol, value)
    return module


class _OwnSymbols:
    """The graph's size symbols re-made in a piece's own ShapeEnv: each symbol of the
    graph's ShapeEnv gets one of `env` with its hint and range, and a symbolic size the
    expression of those (`s0 * 64`), so the piece compiles for every size the graph
    does; the piece checks what it assumes of them on its own inputs at each call."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.symbols: dict[Any, Any] = {}  # the graph's symbol -> the piece's

    def number(self, value: Any, name: str) -> Any:
        from guards import LocalSource

        if not isinstance(value, torch.SymInt):
            return value
        node = value.node
        outer = node.shape_env
        expr = node.expr
        for symbol in sorted(expr.free_symbols, key=str):
            if symbol in self.symbols:
                continue
            hint = outer.hint_of(symbol)
            bounds = outer.bound_sympy(symbol)
            source = LocalSource(f"{name}_{symbol}")
            if bounds.lo >= 2:
                high = None if math.isinf(float(bounds.hi)) else int(bounds.hi)
                made = self.env.create_symbol(
                    hint, source, min=int(bounds.lo), max=high, duck=False
                )
            else:
                made = self.env.create_int_symbol(hint, source)
            self.symbols[symbol] = made
        return self.env.create_symint(expr.xreplace(self.symbols), node.hint)


def _chained(
    gm: torch.fx.GraphModule, pieces: list[Piece], by_signature: dict, compiled: list
) -> Callable[..., Any]:
    """The compiled pieces run in order, with the record of what was compiled."""
    regions = [piece.region for piece in pieces if piece.region]
    _log.info(
        "%s: %d pieces, %d compiled; repeated calls: %s",
        type(gm).__name__, len(pieces), len(by_signature), ", ".join(regions),
    )  # fmt: skip
    forward = chain(gm, pieces, compiled).forward

    def run(*args: Any) -> Any:
        return forward(*args)

    if any(piece.switch for piece in pieces):

        def run(*args: Any) -> Any:  # noqa: F811 - the chain switches modes as it runs
            grad, blocks = torch.is_grad_enabled(), _open_blocks()
            depth = len(blocks)
            try:
                return forward(*args)
            except BaseException:
                # NOTE: a piece raised: the modes the chain switched are set back, as the
                # `with` blocks of eager code would on the way out
                while len(blocks) > depth:
                    _EXIT_AUTOCAST(blocks.pop())
                _SET_GRAD(grad)
                raise

    records = [getattr(f, "stage_artifacts", None) for f in by_signature.values()]
    records = [record for record in records if isinstance(record, BackendRecord)]
    run.stage_artifacts = PiecesRecord(records)  # type: ignore[attr-defined]
    return run
