"""A backward graph specialised on which tangents autograd left undefined (None).

Eager autograd never runs the backward of a node whose incoming gradients are all
undefined: an output the loss does not use contributes nothing, not `0 * ...`. A
compiled backward given zeros for that output's tangent computes its path anyway,
and `0 * inf` there is NaN (the grad of `x / x` at `x = 0` reaching the input
through an output nobody used).

`without_absent_tangents(backward, absent)` copies the backward graph and treats
the tangents numbered in `absent` as absent values:

* a node whose tangent-dependent inputs are all absent is absent (eager would not
  have run it); an absent graph output becomes None;
* `add` of a present value and an absent one is the present value, `sub` its value
  or its negation (autograd's accumulation of the defined gradients only), where
  the present value already has the result's shape and dtype;
* any other node reading an absent value reads zeros of its shape and dtype in its
  place (a formula that materialises an undefined gradient, as the C++ formulas
  of multi-output nodes do); a symbolic size of those zeros is read from an input
  of the graph (a SymInt input, or a tensor input's size).

The absent tangents' placeholders stay (unused), so the specialised graph takes
the same arguments as the full one.
"""

from __future__ import annotations

from collections.abc import Collection

import torch
from torch import fx

__all__ = ["saved_values_read", "tangent_placeholders", "without_absent_tangents"]

aten = torch.ops.aten


def tangent_placeholders(graph: fx.Graph) -> list[fx.Node]:
    """The backward graph's tangent placeholders, in order (named `tangents_*`)."""
    return [n for n in graph.nodes if n.op == "placeholder" and "tangent" in n.name]


def saved_values_read(backward: fx.GraphModule, absent: Collection[int]) -> frozenset[int]:
    """The positions, among `backward`'s saved values (its placeholders other than the
    tangents, in order), that it reads with the tangents numbered in `absent` absent.

    Eager checks a saved tensor's version only where a node reading it runs: a write
    after the forward into a tensor only an unused output's backward reads is no error.
    """
    graph = backward.graph
    if absent:
        without = without_absent_tangents(backward, absent)
        graph = graph if without is None else without.graph  # None: the full graph runs
    saved = [n for n in graph.nodes if n.op == "placeholder" and "tangent" not in n.name]
    return frozenset(
        i
        for i, node in enumerate(saved)
        if any(user.target not in _METADATA_READS for user in node.users)
    )


# Ops reading only a tensor's sizes, strides, dtype and device, never its values (nor its
# version: autograd checks that only where a node saved the tensor itself).
_METADATA_READS = frozenset(
    {
        aten.empty_like.default,
        aten.zeros_like.default,
        aten.ones_like.default,
        aten.full_like.default,
        aten.new_empty.default,
        aten.new_empty_strided.default,
        aten.new_zeros.default,
        aten.new_ones.default,
        aten.new_full.default,
        aten.sym_size.int,
        aten.sym_stride.int,
        aten.sym_numel.default,
        aten.sym_storage_offset.default,
    }
)


def without_absent_tangents(
    backward: fx.GraphModule, absent: Collection[int]
) -> fx.GraphModule | None:
    """`backward` with the tangents numbered in `absent` absent (see the module docstring).

    None where an absent value must be replaced by zeros with a symbolic size no input of
    the graph holds (the caller then keeps the full graph, given zeros for the absent
    tangents).
    """
    graph = fx.Graph()
    graph.output(graph.graph_copy(backward.graph, {}))
    tangents = tangent_placeholders(graph)
    absent_nodes = {tangents[i] for i in absent}
    present = {t for i, t in enumerate(tangents) if i not in absent}
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        inputs = node.all_input_nodes
        reads_present = any(n in present for n in inputs)
        reads_absent = [n for n in inputs if n in absent_nodes]
        if not reads_absent:
            if reads_present:
                present.add(node)
            continue
        if not reads_present:
            absent_nodes.add(node)
            continue
        present.add(node)
        if not _accumulate(graph, node, absent_nodes):
            for value in reads_absent:
                zeros = _zeros(graph, node, value)
                if zeros is None:
                    return None
                node.replace_input_with(value, zeros)
    output = next(n for n in graph.nodes if n.op == "output")
    results = output.args[0]
    if isinstance(results, list | tuple):
        output.args = (type(results)(None if r in absent_nodes else r for r in results),)
    elif results in absent_nodes:
        output.args = (None,)
    graph.eliminate_dead_code()
    graph.lint()
    return fx.GraphModule(backward, graph)


def _accumulate(graph: fx.Graph, node: fx.Node, absent: set[fx.Node]) -> bool:
    """Rewrites `add`/`sub` of a present and an absent value to the present one's value."""
    if node.target not in (aten.add.Tensor, aten.sub.Tensor) or node.kwargs.get("alpha", 1) != 1:
        return False
    left, right = node.args[0], node.args[1]
    if (left in absent) == (right in absent) or not isinstance(left, fx.Node):
        return False
    value = right if left in absent else left
    if not isinstance(value, fx.Node) or not _same_value_type(value, node):
        return False
    if node.target is aten.sub.Tensor and left in absent:
        with graph.inserting_before(node):
            negated = graph.call_function(aten.neg.default, (value,))
        negated.meta = dict(node.meta)
        value = negated
    node.replace_all_uses_with(value)
    return True


def _same_value_type(value: fx.Node, node: fx.Node) -> bool:
    a, b = value.meta.get("val"), node.meta.get("val")
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    return a.dtype == b.dtype and a.device == b.device and tuple(a.shape) == tuple(b.shape)


def _zeros(graph: fx.Graph, user: fx.Node, value: fx.Node) -> fx.Node | None:
    val = value.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    with graph.inserting_before(user):
        sizes = [_size_node(graph, s) for s in val.shape]
        if any(s is None for s in sizes):
            return None
        zeros = graph.call_function(
            aten.zeros.default, (sizes,), {"dtype": val.dtype, "device": val.device}
        )
    zeros.meta["val"] = val.new_zeros(val.shape)
    return zeros


def _size_node(graph: fx.Graph, size: int | torch.SymInt) -> int | fx.Node | None:
    """`size` in the graph: an int, a SymInt input of the same expression, or the size of
    a tensor input's dim of that expression; None where no input holds it."""
    if not isinstance(size, torch.SymInt):
        return size
    expr = size.node.expr
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for node in placeholders:
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) and val.node.expr == expr:
            return node
    for node in placeholders:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for dim, dim_size in enumerate(val.shape):
            if isinstance(dim_size, torch.SymInt) and dim_size.node.expr == expr:
                size_node = graph.call_function(aten.sym_size.int, (node, dim))
                size_node.meta["val"] = dim_size
                return size_node
    return None
