"""Calls to functions marked `nonstrict_trace`: one graph node, the body not traced.

    @ember.nonstrict_trace
    def scaled(x, config): ...            y = scaled(x, {"scale": 2})

becomes

    nonstrict_scaled = NonstrictCall(scaled)(x, {'scale': 2})   # a tuple of tensors
    getitem = nonstrict_scaled[0]

as torch.compile makes a `flat_apply` node and a getitem per output for a function
marked with its nonstrict_trace decorator. The node's target calls the function and flattens its
result (a tensor, or tuples, lists and dicts of tensors); capture learns that
structure by running it on fake values, and rebuilds it from the getitem nodes. A
graph break inside the function cuts nothing: capture never interprets its code.
Arguments are tensors, Python constants, and tuples, lists and dicts of them; an
nn.Module or another object (whose state the node would not see change) runs the
call eagerly, a graph break at the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from dynamo_capture.errors import Unsupported
from dynamo_capture.output_graph import is_constant
from dynamo_capture.values import (
    DictValue,
    ListValue,
    PythonValue,
    TensorValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = ["NonstrictCall", "call_nonstrict_traced"]


class NonstrictCall:
    """A graph node's target: `fn(*args, **kwargs)`, its result's tensors as a flat tuple.
    `spec` is the structure of the result of its last run (on fake values, in capture)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__name__ = f"nonstrict_{getattr(fn, '__name__', 'call')}"
        self.__qualname__ = self.__name__
        self.spec: pytree.TreeSpec | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        leaves, spec = pytree.tree_flatten(self.fn(*args, **kwargs))
        if not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
            raise TypeError(f"{self.__name__} returned values other than tensors")
        self.spec = spec
        return tuple(leaves)

    def __repr__(self) -> str:
        return f"NonstrictCall({self.fn!r})"


def _check_argument(value: Value, name: str) -> None:
    if isinstance(value, TupleValue | ListValue):
        for item in value.items:
            _check_argument(item, name)
    elif isinstance(value, DictValue):
        for item in value.items.values():
            _check_argument(item, name)
    elif isinstance(value, PythonValue) and not is_constant(value.obj):
        raise Unsupported(
            f"{name} (nonstrict_trace) called with a {type(value.obj).__name__}: its node "
            "takes tensors, Python constants and tuples, lists and dicts of them, so the "
            "call runs eagerly"
        )
    elif not isinstance(value, TensorValue | PythonValue):
        raise Unsupported(f"{name} (nonstrict_trace) called with a {type(value).__name__}")


def _as_value(tree: Any) -> Value:
    if isinstance(tree, Value):
        return tree
    if type(tree) is tuple:
        return TupleValue([_as_value(item) for item in tree])
    if type(tree) is list:
        return ListValue([_as_value(item) for item in tree])
    if type(tree) is dict:
        return DictValue({key: _as_value(item) for key, item in tree.items()})
    raise Unsupported(f"a nonstrict_trace function returned a {type(tree).__name__}")


def call_nonstrict_traced(
    tx: Translator, fn: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """The value of `fn(*args, **kwargs)`, `fn` marked nonstrict_trace: one node."""
    name = getattr(fn, "__qualname__", repr(fn))
    for value in [*args, *kwargs.values()]:
        _check_argument(value, name)
    target = NonstrictCall(fn)
    try:
        flat = tx.ctx.call("call_function", target, tuple(args), kwargs)
    except Unsupported as error:
        raise Unsupported(f"{name} (nonstrict_trace) on fake values: {error}") from error
    if target.spec is None or not isinstance(flat, TupleValue):
        raise Unsupported(f"{name} (nonstrict_trace) gave no tensors")
    return _as_value(pytree.tree_unflatten(list(flat.items), target.spec))
