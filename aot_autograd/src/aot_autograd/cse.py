"""Common subexpressions in a traced ATen graph, computed once.

Tracing repeats work the program repeats: autocast casts a layer-norm output
to bfloat16 once per Linear that reads it (q, k and v: three identical
`_to_copy` nodes), and each traced backward formula recomputes what another
already made. In a functional graph two calls of the same deterministic op on
the same arguments give equal values, so the later one can read the earlier
one's result. Downstream that is fewer kernel outputs (the three casts were
three stores of the same tensor) and fewer values to save for the backward.

Random ops (`torch.Tag.nondeterministic_seeded`), ops that mutate or return
nothing, and calls whose arguments cannot be compared are left alone, and so
is any pair where either call's result is a graph output or a view of one:
eager returns separate tensors there, which the caller may change
independently. Merging `a = x.exp(); b = x.exp(); return a, b.sin()` would
make the output `a` the value `sin`'s backward saves for `b`, so a write into
`a` after the call would refuse a backward eager runs.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

__all__ = ["eliminate_common_subexpressions"]


class _Unhashable(Exception):
    pass


def _key(value: Any, replaced: dict[fx.Node, fx.Node]) -> Any:
    if isinstance(value, fx.Node):
        return ("node", replaced.get(value, value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v, replaced) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _key(v, replaced)) for k, v in value.items())))
    if isinstance(value, float) and value != value:
        return ("nan",)  # NaN != NaN would never match
    if value is None or isinstance(
        value, (bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)
    ):
        return (type(value).__name__, value)
    raise _Unhashable


def _eligible(node: fx.Node) -> bool:
    if node.op != "call_function":
        return False
    target = node.target
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if schema.is_mutable or not schema.returns:
        return False
    return torch.Tag.nondeterministic_seeded not in target.tags


def _is_view(node: fx.Node) -> bool:
    target = node.target
    if target is operator.getitem:
        return True  # an element of a multi-output op (split, unbind) is that op's result
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target is torch.ops.aten._unsafe_view.default:
        return True  # eager's `reshape`/`view` here, whose result aliases the input
    returns = target._schema.returns
    return any(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _output_aliases(gm: fx.GraphModule) -> set[fx.Node]:
    """The graph outputs and every node one of them views (through a chain of views)."""
    stack = []
    fx.node.map_arg(gm.graph.output_node().args, stack.append)
    aliases: set[fx.Node] = set()
    while stack:
        node = stack.pop()
        if node in aliases:
            continue
        aliases.add(node)
        if node.op == "call_function" and _is_view(node) and node.args:
            base = node.args[0]
            if isinstance(base, fx.Node):
                stack.append(base)
    return aliases


def eliminate_common_subexpressions(gm: fx.GraphModule) -> int:
    """Replace each call that repeats an earlier one (same op, same arguments) by the
    earlier call's result; returns how many calls were removed."""
    seen: dict[Any, fx.Node] = {}
    user_visible = _output_aliases(gm)
    replaced: dict[fx.Node, fx.Node] = {}
    for node in list(gm.graph.nodes):
        if not _eligible(node):
            continue
        try:
            key = (node.target, _key(node.args, replaced), _key(dict(node.kwargs), replaced))
        except _Unhashable:
            continue
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node
            continue
        if node in user_visible or earlier in user_visible:
            # the caller may write into an output (or a view of one) after the call:
            # merged, that write would reach the other value, or its saved version
            continue
        node.replace_all_uses_with(earlier)
        replaced[node] = earlier
        gm.graph.erase_node(node)
    if replaced:
        gm.recompile()
    return len(replaced)
