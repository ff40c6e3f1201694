"""torch functions that set global state a `with` block changes, recorded in the graph.

    torch.nn.attention._sdpa_kernel(backends, set_priority)   sdpa_kernel(...)'s body
    torch._C._autograd._saved_tensors_hooks_disable(message)   disable_saved_tensors_hooks
    torch._C._autograd._saved_tensors_hooks_enable()

torch's own context managers call these from their (inlined) generator bodies. Each
call becomes a graph node (the state changes when the graph runs, as eagerly) and is
not run while capturing: the capture's values do not depend on this state, and a
capture that stops inside the block leaves the process's state as it found it.
Arguments must be constants; an `SDPBackend` is made in the graph from its name (FX
code cannot spell an enum member), as torch.compile's graphs do.

The state such a context restores on exit is read when capturing (STATE_READERS): the
graph restores what was set when it was captured, as torch.compile's does.

`torch.set_default_dtype(dtype)` (DEFAULT_DTYPE_SETTERS) is a graph node too, and it
also sets the default dtype now, so that what the frame reads and makes later sees
it; the capture restores the dtype it was entered with (which its guards check). The
graph's later calls whose result dtype depends on it get it pinned as an argument
(CaptureContext.call), since a backend that traces the graph keeps no such switch,
and the dtype the frame leaves is set again after the graph (capture.OutputPlan).

`torch.use_deterministic_algorithms(mode, warn_only=w)` (DETERMINISTIC_SETTERS) is
alike: a `torch._C._set_deterministic_algorithms` node, as in torch.compile's graphs,
set now for what the frame reads later, put back when the capture ends, and the mode
the frame leaves set again after the graph.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.attention

from dynamo_capture.errors import Unsupported
from dynamo_capture.operations import NotConstant, as_constant, constant_arguments, sequence_items
from dynamo_capture.values import ListValue, PythonValue, TupleValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "DEFAULT_DTYPE_SETTERS",
    "DETERMINISTIC_SETTERS",
    "STATE_READERS",
    "STATE_SETTERS",
    "call_default_dtype_setter",
    "call_deterministic_setter",
    "call_state_setter",
]

STATE_SETTERS: frozenset[Callable[..., Any]] = frozenset(
    {
        torch.nn.attention._sdpa_kernel,
        torch._C._autograd._saved_tensors_hooks_disable,
        torch._C._autograd._saved_tensors_hooks_enable,
    }
)


STATE_READERS: frozenset[Callable[..., Any]] = frozenset(
    {torch.nn.attention._cur_sdpa_kernel_backends}
)

DEFAULT_DTYPE_SETTERS: frozenset[Callable[..., Any]] = frozenset(
    {torch.set_default_dtype, torch._C._set_default_dtype}
)

DETERMINISTIC_SETTERS: frozenset[Callable[..., Any]] = frozenset(
    {torch.use_deterministic_algorithms, torch._C._set_deterministic_algorithms}
)


def _node_arg(tx: Translator, value: Value) -> Any:
    """A graph-node argument for a constant Value (enum members made by a node)."""
    if isinstance(value, ListValue | TupleValue):
        items = [_node_arg(tx, item) for item in sequence_items(tx, value)]
        return items if isinstance(value, ListValue) else tuple(items)
    if isinstance(value, PythonValue) and type(value.obj) in (list, tuple):
        items = [_node_arg(tx, PythonValue(item)) for item in value.obj]
        return items if isinstance(value.obj, list) else tuple(items)
    try:
        is_member = isinstance(value, PythonValue) and hasattr(type(value.obj), "__members__")
        constant = value.obj if is_member else as_constant(value)  # type: ignore[attr-defined]
    except NotConstant:
        raise Unsupported(
            "a torch state setter called with values known only when it runs"
        ) from None
    if isinstance(constant, torch.nn.attention.SDPBackend):
        return tx.ctx.graph.call_function(torch.nn.attention._backend_from_string, (constant.name,))
    if isinstance(constant, enum.Enum):
        raise Unsupported(f"a torch state setter called with an enum {constant!r}")
    return constant


def call_state_setter(
    tx: Translator, fn: Callable[..., Any], args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """fn(*args, **kwargs) recorded as a graph node; None, as these functions return."""
    node_args = tuple(_node_arg(tx, arg) for arg in args)
    node_kwargs = {name: _node_arg(tx, arg) for name, arg in kwargs.items()}
    tx.ctx.graph.call_function(fn, node_args, node_kwargs)
    return PythonValue(None)


def call_default_dtype_setter(
    tx: Translator, fn: Callable[..., Any], args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """torch.set_default_dtype(d): the default dtype changes now and in the graph."""
    try:
        real_args, real_kwargs = constant_arguments(args, kwargs)
    except NotConstant:
        raise Unsupported("torch.set_default_dtype with a dtype known only when it runs") from None
    dtype = real_args[0] if real_args else real_kwargs.get("d")
    if len(real_args) + len(real_kwargs) != 1 or not isinstance(dtype, torch.dtype):
        raise Unsupported("torch.set_default_dtype called with other than one dtype")
    if not (dtype.is_floating_point and dtype.itemsize >= 2):
        # eager raises its own TypeError: a break lets it
        raise Unsupported(f"torch.set_default_dtype({dtype}) is refused eagerly")
    fn(dtype)
    tx.ctx.graph.call_function(torch.set_default_dtype, (dtype,))
    return PythonValue(None)


def call_deterministic_setter(
    tx: Translator, fn: Callable[..., Any], args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """torch.use_deterministic_algorithms(mode, warn_only=w): set now and in the graph."""
    try:
        real_args, real_kwargs = constant_arguments(args, kwargs)
    except NotConstant:
        raise Unsupported(
            "torch.use_deterministic_algorithms with a mode known only when it runs"
        ) from None
    if len(real_args) != 1 or set(real_kwargs) - {"warn_only"}:
        raise Unsupported("torch.use_deterministic_algorithms called with other arguments")
    mode, warn_only = real_args[0], real_kwargs.get("warn_only", False)
    if type(mode) is not bool or type(warn_only) is not bool:
        raise Unsupported("torch.use_deterministic_algorithms with other than bool flags")
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)
    tx.ctx.graph.call_function(
        torch._C._set_deterministic_algorithms, (mode,), {"warn_only": warn_only}
    )
    return PythonValue(None)
