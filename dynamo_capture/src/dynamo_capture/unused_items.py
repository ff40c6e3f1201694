"""A graph pass: items of an operation's result that nothing reads are dropped.

An operation returning several tensors (`torch.topk`, `Tensor.max(dim)`,
`F.multi_head_attention_forward`) records one `operator.getitem` node an item; the
code often reads only some (`.values`, `out, _ = f(x)`). torch.compile erases the
`getitem` nodes nothing uses before it hands on its graph, so ours do likewise and
their operation counts compare equal. Item reads of a tuple or list result are erased,
and an index of a tensor that cannot raise: slices, None and Ellipsis only (the rank is
guarded), or integers into sizes the graph does not take as symbols. A tensor index
(which raises for an index out of range, known only from the data) and every other node
stay, used or not.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

__all__ = ["drop_unused_items"]


def drop_unused_items(graph: torch.fx.Graph) -> None:
    """Erase (in place) the `operator.getitem` nodes without users that read an item of
    a tuple or list result or index a tensor where that cannot raise, last first, so an
    item of an unused item goes before it."""
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and node.target is operator.getitem and not node.users:
            source = node.args[0]
            if isinstance(source, torch.fx.Node) and _cannot_raise(source, node.args[1]):
                graph.erase_node(node)


def _cannot_raise(source: torch.fx.Node, index: Any) -> bool:
    value = source.meta.get("val")
    if isinstance(value, tuple | list):
        return True
    if not isinstance(value, torch.Tensor):
        return False
    items = index if isinstance(index, tuple) else (index,)
    static = all(isinstance(size, int) for size in value.shape)
    return all((type(item) is int and static) or _never_raises(item) for item in items)


def _never_raises(item: Any) -> bool:
    """None, Ellipsis, or a slice of constant bounds and a positive step (or none)."""
    if item is None or item is Ellipsis:
        return True
    if not isinstance(item, slice):
        return False
    bounds_constant = all(type(bound) in (int, type(None)) for bound in (item.start, item.stop))
    return bounds_constant and (item.step is None or (type(item.step) is int and item.step > 0))
