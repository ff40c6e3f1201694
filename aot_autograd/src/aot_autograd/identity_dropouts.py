"""Dropouts that drop nothing return their input itself, as eager's do.

Eager's `dropout(x, p, train)` returns `x` (the same tensor) when `train` is False or
`p` is 0: a write through the result writes `x`. Traced under the Python dispatcher
(symbolic sizes), torch's Python decomposition of `aten.dropout` returns a copy
instead, so such a write would be lost on the input. A captured graph's dropout
calls whose `p` and `train` are constants that drop nothing are replaced by their
input before tracing, whatever the sizes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import fx

__all__ = ["identity_dropouts", "identity_source"]

# (callable, its parameters in order, their defaults)
_DROPOUTS = {
    F.dropout: (("input", "p", "training", "inplace"), (None, 0.5, True, False)),
    torch.dropout: (("input", "p", "train"), (None, None, None)),
    torch.ops.aten.dropout.default: (("input", "p", "train"), (None, None, None)),
}


def _arguments(node: fx.Node) -> dict | None:
    names, defaults = _DROPOUTS[node.target]
    if len(node.args) > len(names) or set(node.kwargs) - set(names):
        return None
    values = dict(zip(names, defaults))
    values.update(zip(names, node.args))
    values.update(node.kwargs)
    return values


def identity_source(node: fx.Node) -> fx.Node | None:
    """The input a dropout call returns itself (constant `p == 0` or `train == False`), or
    None: not such a call."""
    if node.op != "call_function" or node.target not in _DROPOUTS:
        return None
    values = _arguments(node)
    if values is None or values.get("inplace"):
        return None
    p = values["p"]
    train = values.get("training", values.get("train"))
    if not isinstance(p, (int, float)) or not isinstance(train, bool):
        return None
    if isinstance(p, bool) or (train and p != 0):
        return None
    source = values["input"]
    return source if isinstance(source, fx.Node) else None


def identity_dropouts(gm: fx.GraphModule) -> int:
    """Replace dropouts of constant `p == 0` or `train == False` by their input; how many."""
    replaced = 0
    for node in list(gm.graph.nodes):
        source = identity_source(node)
        if source is None:
            continue
        node.replace_all_uses_with(source)
        gm.graph.erase_node(node)
        replaced += 1
    if replaced:
        gm.recompile()
    return replaced
