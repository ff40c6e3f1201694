"""Rewrites of traced backward formulas where torch's formula for subclasses differs.

Autograd's C++ formulas take another branch for tensor subclasses (fake tensors
included) than for plain CPU tensors. Where the two branches disagree on special
values, the traced graph is rewritten to the plain branch, which eager runs:

* `evenly_distribute_backward` (the gradient of the full reductions `max()`,
  `min()`, `median()`, `nanmedian()`): for subclasses `mask * (grad / count)`, which
  spreads a NaN gradient to every element (NaN * 0); for CPU tensors
  `zeros.masked_fill_(mask, grad / count)`, NaN only at the selected elements.
  Rewritten to `where(mask, grad / count, 0)`.
"""

from __future__ import annotations

import torch
from torch import fx

__all__ = ["select_evenly_distributed_gradients"]

aten = torch.ops.aten


def select_evenly_distributed_gradients(gm: fx.GraphModule) -> None:
    """`mask * value` of the full-reduction gradients becomes `where(mask, value, 0)`.

    Mutates `gm`'s graph in place.
    """
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.mul.Tensor:
            continue
        for mask, value in (node.args, tuple(reversed(node.args))):
            if _is_selection_mask(mask) and isinstance(value, fx.Node):
                _replace_with_where(gm, node, mask, value)
                break
    gm.graph.lint()
    gm.recompile()


def _is_selection_mask(node: object) -> bool:
    """`(input == value) | (isnan(input) & isnan(value))`: the elements equal to a reduction."""
    if not _calls(node, aten.logical_or.default):
        return False
    for equal, both_nan in (node.args, tuple(reversed(node.args))):
        if not (_calls(equal, aten.eq.Tensor) and _calls(both_nan, aten.logical_and.default)):
            continue
        nans = both_nan.args
        if not all(_calls(n, aten.isnan.default) for n in nans):
            continue
        if {n.args[0] for n in nans} == set(equal.args):
            return True
    return False


def _calls(node: object, target: object) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target is target


def _replace_with_where(gm: fx.GraphModule, node: fx.Node, mask: fx.Node, value: fx.Node) -> None:
    val = node.meta.get("val")
    mask_val, value_val = mask.meta.get("val"), value.meta.get("val")
    if isinstance(mask_val, torch.Tensor) and isinstance(value_val, torch.Tensor):
        val = aten.where.ScalarOther(mask_val, value_val, 0)
        if isinstance(node.meta.get("val"), torch.Tensor) and val.dtype != node.meta["val"].dtype:
            return  # (a promotion the mask does not explain: left as it is)
    with gm.graph.inserting_before(node):
        where = gm.graph.call_function(aten.where.ScalarOther, (mask, value, 0))
    where.meta["val"] = val
    node.replace_all_uses_with(where)
    gm.graph.erase_node(node)
