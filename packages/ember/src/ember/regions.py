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

The whole graph is compiled as before when nothing repeats, when the graph switches
grad mode or autocast, or when it writes in place to a tensor other than an input of
its own that shares memory with no other input (such as a BatchNorm's counter): a
piece's inputs may alias in ways its own compile cannot see. `options={"regional": False}` always
compiles the whole graph (one piece: fusion across block boundaries, longer
compiles).
"""

from __future__ import annotations

import collections
import functools
import inspect
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from dynamo_capture.calls import MODULE_CALLS
from ember.artifacts import BackendRecord, PiecesRecord
from guards import artifact_logger

__all__ = ["MIN_REGION_OPS", "MIN_REGION_REPEATS", "Piece", "plan_pieces", "regional"]

MIN_REGION_OPS = 10
MIN_REGION_REPEATS = 3
_log = artifact_logger("graph_breaks")
_MODE_SWITCHES = (
    torch._C._set_grad_enabled,
    torch.amp.autocast_mode._enter_autocast,
    torch.amp.autocast_mode._exit_autocast,
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
# Argument values a graph's code prints as themselves; anything else is named by identity.
_PRINTED = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout)
_PRINTED += (torch.memory_format, type(Ellipsis))


@dataclass(frozen=True, slots=True)
class Piece:
    """A run of consecutive graph nodes cut out as a graph of its own.

    The piece's graph takes `inputs` (nodes of the whole graph, in order of first
    use) and returns `outputs`; `signature` is equal for pieces that compute the same
    thing. The graph is built only for the pieces compiled (`graph()`, `module()`).
    """

    nodes: tuple[torch.fx.Node, ...]
    inputs: tuple[torch.fx.Node, ...]
    outputs: tuple[torch.fx.Node, ...]
    signature: tuple
    region: str  # the module call it is cut at ("" between regions)

    def graph(self) -> torch.fx.Graph:
        """The nodes copied into a graph of their own, with canonical names."""
        graph = torch.fx.Graph()
        local: dict[torch.fx.Node, torch.fx.Node] = {}
        for index, used in enumerate(self.inputs):
            local[used] = graph.placeholder(f"input_{index}")
            local[used].meta = dict(used.meta)
        for index, node in enumerate(self.nodes):
            args = torch.fx.map_arg(node.args, local.__getitem__)
            kwargs = torch.fx.map_arg(node.kwargs, local.__getitem__)
            copy = graph.create_node(node.op, node.target, args, kwargs, name=f"n{index}")
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


def _why_whole(gm: torch.fx.GraphModule, example_inputs: list | None) -> str | None:
    """Why the graph must be compiled whole (None: it may be cut).

    A piece that writes in place to one of its inputs is cut only where that input is
    an input of the whole graph sharing memory with no other (a module's buffer): the
    piece's own compile cannot see other inputs aliasing it.
    """
    separate = _separate_inputs(gm, example_inputs)
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _MODE_SWITCHES:
            return "it switches grad mode or autocast"
        if _writes_in_place(node) and not (node.args and node.args[0] in separate):
            return f"it writes to a tensor in place ({node.format_node()})"
        if node.op == "call_module":
            return "it calls a submodule"
    return None


# ----------------------------------------------------------------- cutting


def _describe_value(value: Any) -> tuple:
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            str(value.dtype),
            tuple(str(s) for s in value.shape),
            tuple(str(s) for s in value.stride()),
            str(value.storage_offset()),
            str(value.device),
            str(value.layout),
            value.requires_grad,
            type(value).__name__,
        )
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return _describe_number(value)
    if isinstance(value, _PRINTED):
        return (type(value).__name__, repr(value))
    return ("object", id(value))


def _describe_number(value: Any) -> tuple:
    """A SymInt / SymFloat / SymBool by its expression, a constant float with every digit
    (a float input capture specialized: its `.item()` read shows the value nowhere else)."""
    if not isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return ()
    expr = value.node.expr
    if isinstance(value, torch.SymFloat) and expr.is_Number:
        return (type(value).__name__, repr(float(expr)))
    return (type(value).__name__, str(value))


def _structure(value: Any, local: dict[torch.fx.Node, int]) -> Any:
    """A node argument as a hashable description: graph nodes by their place in the
    piece, printed constants by type and text, other objects by identity (the graph
    holds them, so no identity is reused meanwhile)."""
    if isinstance(value, torch.fx.Node):
        return local[value]
    if isinstance(value, list | tuple):
        return (type(value).__name__, *(_structure(item, local) for item in value))
    if isinstance(value, dict):
        items = ((_structure(k, local), _structure(v, local)) for k, v in value.items())
        return ("dict", *items)
    if isinstance(value, slice):
        return ("slice", *(_structure(v, local) for v in (value.start, value.stop, value.step)))
    if isinstance(value, _PRINTED):
        return (type(value).__name__, repr(value))
    return ("object", id(value))


def cut_piece(nodes: list[torch.fx.Node], inside: set[torch.fx.Node], region: str) -> Piece:
    """`nodes` (consecutive, `inside` as a set) as a piece: its inputs, outputs and a
    signature equal for pieces whose graphs (with canonical names) are the same code
    calling the same functions with the same constants, on inputs alike."""
    inputs: dict[torch.fx.Node, None] = {}
    for node in nodes:
        for used in node.all_input_nodes:
            if used not in inside:
                inputs.setdefault(used)
    outputs = [n for n in nodes if any(user not in inside for user in n.users)]
    # inputs numbered from -1 down, the piece's own nodes from 0 up
    local = {used: -1 - index for index, used in enumerate(inputs)}
    code = []
    for index, node in enumerate(nodes):
        target = node.target if isinstance(node.target, str) else ("object", id(node.target))
        arguments = (_structure(node.args, local), _structure(node.kwargs, local))
        code.append((node.op, target, *arguments, _describe_number(node.meta.get("val"))))
        local[node] = index
    described = tuple(_describe_value(used.meta.get("val")) for used in inputs)
    signature = (tuple(code), tuple(local[node] for node in outputs), described)
    return Piece(tuple(nodes), tuple(inputs), tuple(outputs), signature, region)


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


def _regions(compute: list[torch.fx.Node]) -> list[Piece]:
    """The module calls that repeat (the outermost level), cut as pieces."""
    position = {node: index for index, node in enumerate(compute)}
    calls = _module_calls(compute)
    chosen: set[int] = set()
    regions: list[Piece] = []
    for depth in sorted({depth for depth, _, _ in calls.values()}):
        groups: dict[str, list[Piece]] = collections.defaultdict(list)
        for call_depth, stack, nodes in calls.values():
            if call_depth != depth or any(tag[0] in chosen for tag in stack[:-1]):
                continue
            if len(nodes) < MIN_REGION_OPS:
                continue
            if position[nodes[-1]] - position[nodes[0]] + 1 != len(nodes):
                continue  # not one run of nodes
            tag = stack[-1]
            piece = cut_piece(nodes, set(nodes), f"{tag[1]} ({tag[2].__qualname__})")
            groups[piece.signature].append(piece)
        for group in groups.values():
            if len(group) < MIN_REGION_REPEATS:
                continue
            regions.extend(group)
            for piece in group:
                chosen.add(piece.nodes[0].meta[MODULE_CALLS][depth][0])
    return sorted(regions, key=lambda piece: position[piece.nodes[0]])


def plan_pieces(gm: torch.fx.GraphModule, example_inputs: list | None = None) -> list[Piece] | None:
    """The graph cut at its repeated module calls; None where it is compiled whole."""
    why = _why_whole(gm, example_inputs)
    if why is not None:
        _log.debug("%s compiled whole: %s", type(gm).__name__, why)
        return None
    compute = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    regions = _regions(compute)
    if not regions:
        return None
    pieces: list[Piece] = []
    start = 0
    position = {node: index for index, node in enumerate(compute)}
    for region in regions:
        first = position[region.nodes[0]]
        if first > start:
            between = compute[start:first]
            pieces.append(cut_piece(between, set(between), ""))
        pieces.append(region)
        start = first + len(region.nodes)
    if start < len(compute):
        rest = compute[start:]
        pieces.append(cut_piece(rest, set(rest), ""))
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
        target = functions.get(id(function))
        if target is None:
            target = functions[id(function)] = _piece_function(function, f"piece_{len(functions)}")
        call = top.call_function(target, tuple(env[used] for used in piece.inputs))
        for position, node in enumerate(piece.outputs):
            env[node] = top.call_function(operator.getitem, (call, position))
            env[node].meta = dict(node.meta)
    top.node_copy(nodes[-1], env.__getitem__)
    return torch.fx.GraphModule(torch.nn.Module(), top, class_name=f"{type(gm).__name__}_regions")


def _compile_ahead(functions: list[Callable[..., Any]]) -> None:
    """The distinct pieces traced and compiled now, not at their first calls: their C++
    kernels are built in one batch (a compiler process costs about 0.1 s before it
    reads a kernel, paid once rather than once a piece); their backwards, compiled at
    the first backward of any of them, in one batch more."""
    from aot_autograd.runtime import compile_together
    from inductor_codegen import deferred_builds

    ahead = [
        f.aot
        for f in functions
        if callable(getattr(getattr(f, "aot", None), "compile_ahead", None))
    ]
    with deferred_builds():
        for aot in ahead:
            aot.compile_ahead()
    backwards = [backward for aot in ahead for backward in aot.deferred_backwards()]
    compile_together(backwards, deferred_builds)


def regional(compile_graph: Callable[..., Any]) -> Callable[..., Any]:
    """`compile_graph`, compiling each distinct piece of a graph with repeated module
    calls once (see the module docstring); other graphs go to it whole."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[..., Any]:
        pieces = plan_pieces(gm, example_inputs)
        if pieces is None:
            return compile_graph(gm, example_inputs)
        # A piece's example inputs: the graph's own where it takes them (real tensors:
        # their memory sharing is known, so warm start may store the piece), the
        # recorded fake values of the others.
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        given = dict(zip(placeholders, example_inputs, strict=False))
        by_signature: dict[str, Any] = {}
        compiled = []
        try:
            for piece in pieces:
                function = by_signature.get(piece.signature)
                if function is None:
                    examples = [given.get(used, used.meta.get("val")) for used in piece.inputs]
                    function = compile_graph(piece.module(gm), examples)
                    by_signature[piece.signature] = function
                compiled.append(function)
            _compile_ahead(list(by_signature.values()))
        except Exception as error:  # noqa: BLE001 - the whole graph is always an option
            _log.info(
                "%s compiled whole: a piece did not compile (%s: %s)",
                type(gm).__name__, type(error).__name__, error,
            )  # fmt: skip
            return compile_graph(gm, example_inputs)
        regions = [piece.region for piece in pieces if piece.region]
        _log.info(
            "%s: %d pieces, %d compiled; repeated calls: %s",
            type(gm).__name__, len(pieces), len(by_signature), ", ".join(regions),
        )  # fmt: skip
        forward = chain(gm, pieces, compiled).forward

        def run(*args: Any) -> Any:
            return forward(*args)

        records = [getattr(f, "stage_artifacts", None) for f in by_signature.values()]
        records = [record for record in records if isinstance(record, BackendRecord)]
        run.stage_artifacts = PiecesRecord(records)  # type: ignore[attr-defined]
        return run

    backend.__name__ = backend.__qualname__ = compile_graph.__name__
    backend.__doc__ = compile_graph.__doc__
    return backend
