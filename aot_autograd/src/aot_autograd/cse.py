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
is a repeat that is itself a graph output (eager returns two tensors there,
which the caller may change independently).
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


def eliminate_common_subexpressions(gm: fx.GraphModule) -> int:
    """Replace each call that repeats an earlier one (same op, same arguments) by the
    earlier call's result; returns how many calls were removed."""
    seen: dict[Any, fx.Node] = {}
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
        if any(user.op == "output" for user in node.users):
            continue  # two outputs would be one tensor where eager returns two
        node.replace_all_uses_with(earlier)
        replaced[node] = earlier
        gm.graph.erase_node(node)
    if replaced:
        gm.recompile()
    return len(replaced)
