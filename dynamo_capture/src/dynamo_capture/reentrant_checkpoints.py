"""When `checkpoint(fn, ..., use_reentrant=True)` (or use_reentrant left out, which warns
and means True) may be traced like use_reentrant=False.

Reentrant checkpointing runs fn under no_grad in the forward, as an autograd.Function,
and runs it again in the backward. Traced, fn runs once, with autograd. The values and
gradients are the same where:

- fn touches nothing outside itself: no tensor written in place, no attribute, global,
  cell or outside container written, no torch state set (eager would do each twice,
  the second time in the backward); a module's own state included (a batch norm's
  running statistics, which a traced call updates once, eager's twice);
- the outputs require grad as the Function's do: every floating output requires grad
  exactly when grad mode is on and a tensor argument requires grad (the Function's
  outputs do then, whatever fn computed them from; and none does otherwise, even one
  fn computed from a parameter);
- fn calls no `torch.autograd.grad` (capture refuses it inside the call anyway).

Elsewhere the call runs eagerly, as checkpoint itself runs it.
"""

from __future__ import annotations

import inspect
import operator
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.values import ListValue, TensorValue, TupleValue, Value

if TYPE_CHECKING:
    from dynamo_capture.output_graph import CaptureContext

__all__ = ["check_reentrant_region", "outside_state"]

# the containers of a capture that record writes outside the frame's own values
_WRITE_RECORDS = (
    "attr_writes",
    "raw_attr_writes",
    "shadows",
    "global_writes",
    "real_cell_values",
    "replaced_members",
    "input_hooks",
)

# functions whose running statistics arguments are updated in place when training
_UPDATES_STATISTICS = frozenset(
    {
        torch.nn.functional.batch_norm,
        torch.nn.functional.instance_norm,
        torch.batch_norm,
        torch.instance_norm,
    }
)


def outside_state(ctx: CaptureContext) -> tuple:
    """What a capture has written outside the graph so far (compared after the call)."""
    sizes = tuple(len(getattr(ctx, name)) for name in _WRITE_RECORDS)
    return (*sizes, ctx.state_set_in_graph)


def _writes_in_place(node: torch.fx.Node) -> bool:
    target = node.target
    if node.op == "call_module":
        return True  # a module's forward is not looked into
    if node.op not in ("call_function", "call_method"):
        return False
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if (name.endswith("_") and not name.startswith("__")) or target is operator.setitem:
        return True
    if "out" in node.kwargs or target in _UPDATES_STATISTICS:
        return True
    if callable(target) and not isinstance(target, str):
        return _inplace_argument(target, node.args, node.kwargs)
    return False


def _inplace_argument(target: Any, args: tuple, kwargs: dict) -> bool:
    """Whether a call passes `inplace=True` (F.relu(x, True), F.dropout(..., inplace=True))."""
    if "inplace" in kwargs:
        return kwargs["inplace"] is not False
    try:
        parameters = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return False
    if "inplace" not in parameters:
        return False
    position = parameters.index("inplace")
    return position < len(args) and args[position] is not False


def _tensor_outputs(result: Value) -> list[TensorValue]:
    if isinstance(result, TensorValue):
        return [result]
    if isinstance(result, TupleValue | ListValue):
        return [item for item in result.items if isinstance(item, TensorValue)]
    raise Unsupported("reentrant checkpoint of a function returning neither tensors nor a tuple")


def check_reentrant_region(
    ctx: CaptureContext, before: tuple, first: torch.fx.Node, args: list[Value], result: Value
) -> None:
    """Unsupported unless the traced reentrant call from graph node `first` on (the
    capture's writes `before` it) is sound to keep traced (see the module docstring)."""
    if outside_state(ctx) != before:
        raise Unsupported("reentrant checkpoint of a function writing state outside itself")
    node = first
    while node.op != "root":
        if _writes_in_place(node):
            raise Unsupported(f"reentrant checkpoint of a function writing in place ({node})")
        node = node.next
    grad = torch.is_grad_enabled() and any(
        isinstance(a, TensorValue) and a.example.requires_grad for a in args
    )
    for output in _tensor_outputs(result):
        example = output.example
        if (example.is_floating_point() or example.is_complex()) and (
            example.requires_grad != grad
        ):
            raise Unsupported(
                "reentrant checkpoint whose outputs would require grad otherwise than eager's"
            )
