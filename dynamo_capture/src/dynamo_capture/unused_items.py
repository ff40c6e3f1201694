"""A graph pass: items of an operation's result that nothing reads are dropped.

An operation returning several tensors (`torch.topk`, `Tensor.max(dim)`,
`F.multi_head_attention_forward`) records one `operator.getitem` node an item; the
code often reads only some (`.values`, `out, _ = f(x)`). torch.compile erases the
`getitem` nodes nothing uses before it hands on its graph, so ours do likewise and
their operation counts compare equal. Only item reads of a tuple or list result are
erased: indexing a tensor (`t[i]`, which raises for an index out of range) and every
other node stay, used or not.
"""

from __future__ import annotations

import operator

import torch.fx

__all__ = ["drop_unused_items"]


def drop_unused_items(graph: torch.fx.Graph) -> None:
    """Erase (in place) the `operator.getitem` nodes without users that read an item of
    a tuple or list result, last first, so an item of an unused item goes before it."""
    for node in reversed(list(graph.nodes)):
        if node.op == "call_function" and node.target is operator.getitem and not node.users:
            source = node.args[0]
            if isinstance(source, torch.fx.Node) and isinstance(
                source.meta.get("val"), tuple | list
            ):
                graph.erase_node(node)
