"""Splitting a joint graph into a forward graph and a backward graph.

Both partitioners take the joint graph (placeholders `primals_*` then
`tangents_*`; outputs: `num_forward_outputs` forward outputs, then the input
grads) and return `(forward, backward)` GraphModules:

    forward(*primals)            -> (*forward_outputs, *saved)
    backward(*saved, *tangents)  -> (*grads)

`default_partition` computes in the forward everything that does not depend
on a tangent and saves each such value the backward reads.

`min_cut_rematerialization_partition` chooses what to save by a minimum cut
(networkx max-flow) in the graph of forward values the backward needs, where
saving a value costs its size in bytes. The recompute policy:

- recomputable: pointwise ops (`torch.Tag.pointwise`), views and reshapes,
  getitem, dtype casts, cheap constant factories (`RECOMPUTABLE_OPS`), and
  arithmetic on symbolic sizes (`operator.mul(s0, 4)`, `aten.sym_size.int`);
- never recomputed: everything else, in particular matmuls, convolutions,
  reductions, gathers and random ops (`torch.Tag.nondeterministic_seeded`:
  recomputing them would draw different numbers).

An input the graph writes in place (`x.zero_()` under no_grad after `y = f(x)`) is
not saved, nor a view of it, unless the backward reads it itself (as eager saves
it): the run time writes its new value into the input after the forward, so a value
recomputed from it in the backward would read the new value (`mark_mutated_primals`).

A recomputable value on the backward side of the cut is recomputed in the
backward from saved values; so the backward saves, for example, the input of
a chain of pointwise ops instead of each intermediate. A value is not recomputed
from more than `MAX_RECOMPUTE_READS` large saved values: a residual stream added
to after every layer would otherwise be rebuilt from every layer's output at the
start of the backward, all layers in one kernel (GPT2: 109 loads, 32 stores).

An input the graph writes (placeholder meta `MUTATED_INPUT`) and its views are
saved by min-cut only where no other cut exists: the run time copies the input's
new value in after the forward, and the backward would read that (eager's backward
raises then too, by autograd's version check).

A forward output eager's backward reads saved (exp's, tanh's, sigmoid's result: node meta
`EAGER_SAVED`) is saved by min-cut, not recomputed from the inputs: the caller may write
into an input after the call, and eager's backward of that output reads only the output
(the run time checks the version of what the backward reads).

The nodes of a checkpoint region (`must_recompute`: tagged by capture for
`torch.utils.checkpoint.checkpoint`, random ops excepted) are recomputed in the
backward by both partitioners, whatever their op (a matmul too), from the region's
inputs and its random ops' results: the default partitioner saves those instead of
the region's values; min-cut may save a region's value only where no other cut
exists (it costs `MUST_RECOMPUTE_COST`). A value a selective checkpoint's policy
said to save (`saved_by_policy`) is saved by both, never recomputed. A region's value that is a forward output,
another region's input, or computed from an input the graph writes, is saved as
before. The backward's ops that read no tangent, cheap ones reading a recomputed value,
are recomputed with it.

Both partitioners order the backward as the autograd engine runs it: a
recomputed value comes just before its first use, not at the start of the
backward, so it is alive only while needed and fuses with its readers.

With symbolic sizes, a value's cost is its size at the example inputs, and both
partitioners give the backward a SymInt input for every size symbol its shapes
use (the forward returns it among the saved values).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

from aot_autograd.checkpoint_regions import CHECKPOINT_REGION, must_recompute, saved_by_policy
from aot_autograd.program import MUTATED_INPUT
from aot_autograd.saved_tensors import EAGER_SAVED
from aot_autograd.symbolic import concrete_hint

__all__ = [
    "RECOMPUTABLE_OPS",
    "default_partition",
    "is_recomputable",
    "mark_mutated_primals",
    "min_cut_rematerialization_partition",
    "saved_bytes",
]

aten = torch.ops.aten

# Cheap ops that are not tagged pointwise but are fine to recompute.
RECOMPUTABLE_OPS = frozenset(
    {
        "getitem",
        aten._to_copy.default,
        aten.clone.default,
        aten.full.default,
        aten.zeros.default,
        aten.ones.default,
        aten.scalar_tensor.default,
        aten.arange.start_step,
        aten.arange.default,
        aten.empty.memory_format,
        aten.full_like.default,
        aten.zeros_like.default,
        aten.ones_like.default,
        aten.expand.default,
        aten.copy.default,
    }
)


# How many heavy saved values one recomputed value may read (see `_many_read_bans`).
MAX_RECOMPUTE_READS = 8
LIGHT_READ_FRACTION = 16
# The cost of saving an input the graph writes, or a view of it: above any tensor's bytes.
OVERWRITTEN_COST = 2.0**62
# The cost of saving a checkpointed value (`must_recompute`): above any tensor's bytes,
# below an overwritten input's.
MUST_RECOMPUTE_COST = 2.0**60


def _is_view(target: object) -> bool:
    return isinstance(target, torch._ops.OpOverload) and any(
        r.alias_info is not None for r in target._schema.returns
    )


def mark_mutated_primals(joint: fx.GraphModule, mutated_inputs: Iterable[int]) -> None:
    """Mark the placeholders of the inputs the graph writes in place (by index)."""
    placeholders = [n for n in joint.graph.nodes if n.op == "placeholder"]
    for index in mutated_inputs:
        placeholders[index].meta[MUTATED_INPUT] = True


def _is_size_computation(node: fx.Node) -> bool:
    """Arithmetic on symbolic sizes (`operator.mul(s0, 4)`, `aten.sym_size.int(x, 0)`)."""
    return isinstance(node.meta.get("val"), torch.SymInt | torch.SymFloat) and (
        node.target in _SIZE_OPS or getattr(node.target, "__module__", None) == "_operator"
    )


_SIZE_OPS = frozenset(
    {
        aten.sym_size.int,
        aten.sym_stride.int,
        aten.sym_numel.default,
        torch.sym_max,
        torch.sym_min,
        torch.sym_float,
    }
)


def is_recomputable(node: fx.Node) -> bool:
    """Whether min-cut may recompute `node` in the backward instead of saving it."""
    if node.op == "get_attr":
        return True
    if node.op != "call_function":
        return False
    target = node.target
    if getattr(target, "__name__", None) == "getitem" or _is_size_computation(node):
        return True
    if target in RECOMPUTABLE_OPS:
        return True
    tags = getattr(target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    return torch.Tag.pointwise in tags or _is_view(target)


def _size_in_bytes(node: fx.Node) -> float:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        return _numel(node) * value.element_size()
    if isinstance(value, (tuple, list)):
        return math.inf  # a multi-output node is saved through its getitems
    return 1.0


def saved_bytes(backward: fx.GraphModule) -> int:
    """Bytes of the values a backward graph reads from the forward (its non-tangent inputs)."""
    total = 0.0
    for node in backward.graph.nodes:
        if node.op == "placeholder" and not node.name.startswith("tangents"):
            total += _size_in_bytes(node)
    return int(total)


class _Joint:
    """The parts of a joint graph the partitioners need."""

    def __init__(self, joint: fx.GraphModule, num_forward_outputs: int) -> None:
        self.module = joint
        nodes = list(joint.graph.nodes)
        self.primals = [n for n in nodes if n.op == "placeholder" and "tangents" not in n.name]
        self.tangents = [n for n in nodes if n.op == "placeholder" and "tangents" in n.name]
        outputs = list(nodes[-1].args[0])
        self.forward_outputs = outputs[:num_forward_outputs]
        self.grads = outputs[num_forward_outputs:]
        self.tangent_dependent = _descendants(self.tangents)
        self.backward_needed = _ancestors(n for n in self.grads if isinstance(n, fx.Node))

    def forward_region(self) -> list[fx.Node]:
        """Nodes the backward needs that do not depend on a tangent, in graph order."""
        return [
            n
            for n in self.module.graph.nodes
            if n in self.backward_needed and n not in self.tangent_dependent and n.op != "output"
        ]

    def read_by_backward(self, node: fx.Node) -> bool:
        return (
            any(u in self.tangent_dependent and u in self.backward_needed for u in node.users)
            or node in self.grads
        )


def _reachable(
    roots: Iterable[fx.Node], step: Callable[[fx.Node], Iterable[fx.Node]]
) -> set[fx.Node]:
    """`roots` and every node reached from them by repeating `step`."""
    seen: set[fx.Node] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(step(node))
    return seen


def _descendants(roots: Iterable[fx.Node]) -> set[fx.Node]:
    return _reachable(roots, lambda node: node.users)


def _ancestors(roots: Iterable[fx.Node]) -> set[fx.Node]:
    return _reachable(roots, lambda node: node.all_input_nodes)


def _copy_graph(
    joint: fx.GraphModule,
    inputs: list[fx.Node],
    outputs: list,
    first: set[fx.Node] | None = None,
) -> fx.GraphModule:
    """A graph with `inputs` as placeholders computing `outputs` from them (copies nodes).

    Nodes keep the joint graph's order, except with `first` (the nodes that depend on
    a tangent): those keep it, and every other node comes just before its first user
    (`_autograd_order`).
    """
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    needed = _ancestors_until(outputs, set(inputs))
    order = [n for n in joint.graph.nodes if n in needed and n not in env]
    if first is not None:
        order = _autograd_order(order, first, outputs)
    for node in order:
        if node.op == "placeholder":
            raise AssertionError(f"partition lost input {node.name}; it must be saved")
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[o] if isinstance(o, fx.Node) else o for o in outputs))
    return fx.GraphModule(joint, graph)


def _autograd_order(nodes: list[fx.Node], first: set[fx.Node], outputs: list) -> list[fx.Node]:
    """`nodes` (in graph order) ordered as the autograd engine would run them: the nodes
    in `first` in their order, each preceded by those of its ancestors among `nodes` not
    placed yet (in graph order); then what only the outputs read."""
    position = {node: k for k, node in enumerate(nodes)}
    placed: set[fx.Node] = set()
    result: list[fx.Node] = []

    def place(root: fx.Node) -> None:
        pending, stack = [], [root]
        while stack:
            node = stack.pop()
            if node in placed or node not in position:
                continue
            placed.add(node)
            pending.append(node)
            stack.extend(node.all_input_nodes)
        result.extend(sorted(pending, key=position.__getitem__))

    for node in nodes:
        if node in first:
            place(node)
    for node in outputs:
        if isinstance(node, fx.Node):
            place(node)
    return result


def _ancestors_until(outputs: list, stop: set[fx.Node]) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    stack = [o for o in outputs if isinstance(o, fx.Node)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            stack.extend(node.all_input_nodes)
    return seen


def _size_symbols(value: Any) -> set:
    """The sympy symbols in the sizes and strides of a value (tensor, SymInt, tuple)."""
    symbols: set = set()
    for leaf in pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            sizes = (*leaf.shape, *leaf.stride(), leaf.storage_offset())
        else:
            sizes = (leaf,)
        for size in sizes:
            if isinstance(size, torch.SymInt | torch.SymFloat):
                symbols |= size.node.expr.free_symbols
    return symbols


def _with_size_inputs(joint: _Joint, saved: list[fx.Node]) -> list[fx.Node]:
    """`saved` plus the SymInt primals and float input reads whose symbols the
    backward's values have.

    So the backward graph has a SymInt input for every symbol its shapes use (and a
    SymFloat input for every float input symbol its numbers use), and a downstream
    compiler can bind them without reading tensors' sizes or values.
    """
    providers = {}
    for node in joint.primals:
        value = node.meta.get("val")
        if isinstance(value, torch.SymInt) and value.node.expr.is_Symbol:
            providers.setdefault(value.node.expr, node)
    for node in joint.module.graph.nodes:
        value = node.meta.get("val")
        if node.target is aten._local_scalar_dense.default and isinstance(value, torch.SymFloat):
            if value.node.expr.is_Symbol:
                providers.setdefault(value.node.expr, node)
    if not providers:
        return saved
    inputs = set(saved) | set(joint.tangents)
    region = _ancestors_until(joint.grads, inputs)
    symbols: set = set()
    for node in region:
        symbols |= _size_symbols(node.meta.get("val"))
    extra = [providers[s] for s in sorted(symbols, key=str) if s in providers]
    return list(dict.fromkeys([*saved, *extra]))


def _split(joint: _Joint, saved: list[fx.Node]) -> tuple[fx.GraphModule, fx.GraphModule]:
    saved = _with_size_inputs(joint, saved)
    forward = _copy_graph(joint.module, joint.primals, [*joint.forward_outputs, *saved])
    backward = _copy_graph(
        joint.module, [*saved, *joint.tangents], joint.grads, first=joint.tangent_dependent
    )
    return forward, backward


def default_partition(
    joint: fx.GraphModule, *, num_forward_outputs: int
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Compute everything tangent-independent in the forward; save what the backward reads."""
    parts = _Joint(joint, num_forward_outputs)
    region = parts.forward_region()
    saved = [n for n in region if parts.read_by_backward(n)]
    saved = _recomputed_from_region_inputs(saved, _checkpointed(parts, region))
    saved = _expand_multi_outputs(saved)
    return _split(parts, saved)


def _checkpointed(parts: _Joint, region: list[fx.Node]) -> set[fx.Node]:
    """The nodes of `region` the backward recomputes: the `must_recompute` ones, less the
    forward outputs (alive anyway), another region's inputs (`_feeds_another_region`)
    and the nodes reading an input the graph writes, or a view of it (the backward would
    read its new value); and the backward's own cheap ops reading only those, or the
    inputs of those.

    NOTE: the backward's ops that read no tangent (the cos of sin's derivative, the
    transposes a matmul's derivative takes) are traced apart from the forward's,
    untagged, and no forward output is computed from them; saved, they would take the
    place of the region's values.
    """
    overwritten = _aliases_of_mutated_inputs(region)
    outputs = set(parts.forward_outputs)
    forward = _ancestors(n for n in parts.forward_outputs if isinstance(n, fx.Node))
    checkpointed: set[fx.Node] = set()
    readable: set[fx.Node] = set()  # what a recomputed backward op may read
    for node in region:  # (graph order: a node's inputs come first)
        inputs = node.all_input_nodes
        if node in outputs or any(i in overwritten for i in inputs):
            continue
        if saved_by_policy(node):
            readable.add(node)
        elif must_recompute(node):
            readable.add(node)
            if not _feeds_another_region(node):
                checkpointed.add(node)
                readable.update(inputs)
        elif (
            node not in forward
            and node.meta.get(CHECKPOINT_REGION) is None
            and is_recomputable(node)
            and inputs
            and all(i in readable for i in inputs)
        ):
            checkpointed.add(node)
            readable.add(node)
    return checkpointed


def _feeds_another_region(node: fx.Node) -> bool:
    """Whether a checkpointed node is read by another checkpoint region: that region's
    input, which checkpoint saves (two checkpoint calls in a row keep their boundary)."""
    region = node.meta.get(CHECKPOINT_REGION)
    return any(user.meta.get(CHECKPOINT_REGION) not in (None, region) for user in node.users)


def _recomputed_from_region_inputs(saved: list[fx.Node], checkpointed: set[fx.Node]) -> list:
    """`saved` with each checkpointed node replaced by the values it is recomputed from
    (the first ones, walking up, that are not checkpointed), in graph order."""
    if not checkpointed:
        return saved
    result: set[fx.Node] = set()
    seen: set[fx.Node] = set()
    stack = list(saved)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node in checkpointed:
            stack.extend(node.all_input_nodes)
        else:
            result.add(node)
    order = {n: k for k, n in enumerate(next(iter(saved)).graph.nodes)}
    return sorted(result, key=order.__getitem__)


def _many_read_bans(region: list[fx.Node]) -> set[fx.Node]:
    """Nodes min-cut must save: each recomputable node whose recomputation would read
    more than MAX_RECOMPUTE_READS heavy saved values (a residual stream rebuilt from
    every layer's output), walking the region in graph order and counting from the
    last such node saved on the way.

    A value read is heavy when it has at least 1/LIGHT_READ_FRACTION of the node's
    elements: a norm's per-row statistics or a bias are light, and an activation's
    long chain of ops on one input (GELU) reads one value, however long.
    """
    reads: dict[fx.Node, frozenset[fx.Node]] = {}
    banned: set[fx.Node] = set()
    for node in region:
        if node.op == "placeholder" or not is_recomputable(node):
            reads[node] = frozenset({node})
            continue
        size = _numel(node)
        heavy: set[fx.Node] = set()
        for source in node.all_input_nodes:
            heavy |= {s for s in reads.get(source, ()) if _numel(s) * LIGHT_READ_FRACTION >= size}
        if len(heavy) > MAX_RECOMPUTE_READS:
            banned.add(node)
            heavy = {node}
        reads[node] = frozenset(heavy)
    return banned


def _numel(node: fx.Node) -> float:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        total = 1
        for d in value.shape:
            total *= concrete_hint(d)  # symbolic sizes count their example size, no guard
        return float(total)
    return 0.0


def _expand_multi_outputs(saved: list[fx.Node]) -> list[fx.Node]:
    """A tuple-valued node is saved as its getitems."""
    result: list[fx.Node] = []
    for node in saved:
        if isinstance(node.meta.get("val"), (tuple, list)):
            result.extend(u for u in node.users if getattr(u.target, "__name__", "") == "getitem")
        else:
            result.append(node)
    return list(dict.fromkeys(result))


def _saved_outputs_eager_reads(parts: _Joint, region: set[fx.Node]) -> set[fx.Node]:
    """The forward outputs eager's backward reads saved (`EAGER_SAVED`: exp's, tanh's,
    sigmoid's result), which min-cut saves rather than recomputes: recomputed from the
    inputs, the backward would read inputs the caller may write into after the call, where
    eager's reads only the output (and its version check raises only where that changed).
    Saving an output costs no memory it does not hold anyway."""
    return {
        node
        for node in parts.forward_outputs
        if isinstance(node, fx.Node)
        and node.op != "placeholder"
        and node in region
        and node.meta.get(EAGER_SAVED)
    }


def _aliases_of_mutated_inputs(region: list[fx.Node]) -> set[fx.Node]:
    """The placeholders of inputs the graph writes (`MUTATED_INPUT`) and the views of
    them: the run time copies the inputs' new values in after the forward, so a saved
    one would hold the new value (and fail autograd's version check) in the backward."""
    aliases: set[fx.Node] = set()
    for node in region:
        if node.op == "placeholder" and node.meta.get(MUTATED_INPUT):
            aliases.add(node)
        elif _is_view(node.target) and node.args and node.args[0] in aliases:
            aliases.add(node)
    return aliases


def min_cut_rematerialization_partition(
    joint: fx.GraphModule, *, num_forward_outputs: int
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Save the cheapest set of values (bytes) from which the backward can recompute the rest."""
    # NOTE: imported here: networkx takes a quarter of a second to import, and a process
    # whose graphs all load from the warm-start cache never partitions.
    import networkx as nx
    from networkx.algorithms.flow import boykov_kolmogorov

    parts = _Joint(joint, num_forward_outputs)
    region = parts.forward_region()
    in_region = set(region)
    flow = nx.DiGraph()
    flow.add_node("source")
    flow.add_node("sink")
    overwritten = _aliases_of_mutated_inputs(region)
    eager_saved = _saved_outputs_eager_reads(parts, in_region) - overwritten
    checkpointed = _checkpointed(parts, region) - eager_saved
    # a region's input made by another region is saved, as checkpoint saves it
    boundaries = {n for n in region if must_recompute(n) and n not in checkpointed}
    boundaries |= {n for n in region if saved_by_policy(n)}  # and what a policy saves
    banned = (_many_read_bans(region) - checkpointed) | eager_saved | boundaries
    # only a region's own nodes cost more to save than anything else
    checkpointed = {n for n in checkpointed if must_recompute(n)}
    for node in region:
        name = node.name
        recomputable = is_recomputable(node) or node in checkpointed
        if node.op == "placeholder" or not recomputable or node in banned:
            flow.add_edge("source", name + "_in", capacity=math.inf)
        if parts.read_by_backward(node):
            flow.add_edge(name + "_out", "sink", capacity=math.inf)
        # NOTE: +1 on views breaks ties toward saving the base rather than a view of it.
        cost = _size_in_bytes(node) + (1.0 if _is_view(node.target) else 0.0)
        if node in overwritten and not parts.read_by_backward(node):
            # saved only where nothing else can be (eager raises then)
            cost = OVERWRITTEN_COST
        elif node in eager_saved:
            cost = 0.0  # an output: alive anyway, and saved itself, cut at it first
        elif node in checkpointed:
            cost = MUST_RECOMPUTE_COST
        flow.add_edge(name + "_in", name + "_out", capacity=cost)
        for user in node.users:
            if user in in_region:
                flow.add_edge(name + "_out", user.name + "_in", capacity=math.inf)
    # Boykov-Kolmogorov finds the same cut as networkx's default preflow-push (the cut
    # networkx reads off the residual graph is the same for every maximum flow) about ten
    # times faster on these graphs (GPT2 training: 0.03 s against 0.39 s).
    _, (source_side, _) = nx.minimum_cut(flow, "source", "sink", flow_func=boykov_kolmogorov)
    saved = [
        n for n in region if n.name + "_in" in source_side and n.name + "_out" not in source_side
    ]
    return _split(parts, _expand_multi_outputs(saved))
