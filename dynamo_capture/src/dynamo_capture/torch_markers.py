"""torch's own compiler markers, read as their ember equivalents.

Library code (transformers, torchvision, torch.distributed) marks functions with
torch's decorators; capture honours them as it honours ember's:

    torch.compiler.disable(fn) (and its older alias)     ember.disable(fn): a graph break
        sets `_torchdynamo_disable`, `_torchdynamo_disable_msg`   at the call, fn runs eagerly
    torch.compiler.assume_constant_result(fn)            ember.assume_constant_result(fn)
        sets `_dynamo_marked_constant`
    a torch.compile'd function, torch.jit.trace output   the function it wraps is inlined
        sets `_torchdynamo_inline`
    torch.compiler.disable(fn) called in the frame       folded: the marked wrapper it
                                                          makes, a graph break where called
    torch's `graph_break()` marker function              a graph break at the call, as
        a function of the torch package named             torch.compile makes there
        `graph_break` (its root module and name)

Tensor marks (torch's `mark_dynamic` and friends) are read by `guards.marks`.

NOTE: these are read as attributes only; nothing here imports or reads torch's
compiler stack. `torch.compiler.allow_in_graph` leaves no attribute on the function
(only an entry in a private registry of torch's), so it is not read: such a function
is captured like any other, or breaks the graph where capture cannot trace it; mark
it with `ember.allow_in_graph` to keep it one node.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import torch

_Module = torch.nn.Module
_FUNCTION = types.FunctionType

__all__ = [
    "is_torch_disable_factory",
    "is_torch_graph_break",
    "torch_constant_result",
    "torch_disabled_reason",
    "torch_inline_target",
]

_DISABLED = "disabled with torch.compiler.disable"
# torch's disable decorators: the public `torch.compiler.disable` and the function it
# forwards to, known by its name and parameters (its module is never named or imported)
_DISABLE_NAME = "disable"
_DISABLE_PARAMETERS = ("fn", "recursive", "reason")
# torch's graph-break marker: the plain function of the torch package with this name
# (its defining module is never named, imported or read).
_GRAPH_BREAK_NAME = "graph_break"


def _instance_attribute(obj: object, name: str) -> Any:
    """`obj.name` when it is set on the object itself (or its function), without __getattr__."""
    target = getattr(obj, "__func__", obj) if inspect.ismethod(obj) else obj
    if type(target) is _FUNCTION:  # most calls: attributes of a plain function are its own
        return target.__dict__.get(name)
    try:
        return inspect.getattr_static(target, name, None)
    except Exception:  # noqa: BLE001 - an object whose introspection fails has no marker
        return None


def _is_torch_disabled_module(obj: object) -> bool:
    """A module wrapped by `torch.compiler.disable(module)`: a wrapper of the module it
    disables (`_orig_mod`) holding a disabling context, read as attributes only."""
    state = getattr(obj, "__dict__", {})
    submodules = state.get("_modules") if isinstance(state, dict) else None
    if type(submodules) is not dict or not isinstance(submodules.get("_orig_mod"), _Module):
        return False  # (a scripted module's `_modules` is a table of TorchScript's own)
    return type(state.get("dynamo_ctx")).__name__ == "DisableContext"


def torch_disabled_reason(obj: object) -> str | None:
    """The reason torch's `disable` was given for `obj` (a default one if none); None if
    torch does not mark `obj` disabled."""
    if _instance_attribute(obj, "_torchdynamo_disable") is True:
        message = _instance_attribute(obj, "_torchdynamo_disable_msg")
        return message if isinstance(message, str) and message else _DISABLED
    if _is_torch_disabled_module(obj):
        return _DISABLED
    return None


def torch_constant_result(obj: object) -> bool:
    """Whether `obj` is marked with `torch.compiler.assume_constant_result`."""
    return _instance_attribute(obj, "_dynamo_marked_constant") is True


def torch_inline_target(obj: object) -> Callable[..., Any] | None:
    """The function torch inlines in place of `obj` (a torch.compile'd or traced function)."""
    target = _instance_attribute(obj, "_torchdynamo_inline")
    if target is None or target is obj or not callable(target):
        return None
    return target


def is_torch_graph_break(obj: object) -> bool:
    """Whether `obj` is torch's `graph_break()`, a call that forces a graph break."""
    if not inspect.isfunction(obj) or obj.__name__ != _GRAPH_BREAK_NAME:
        return False
    module = obj.__module__
    return isinstance(module, str) and module.partition(".")[0] == "torch"


def is_torch_disable_factory(obj: object) -> bool:
    """Whether `obj` is torch's disable decorator: the public `torch.compiler.disable`,
    or the function of torch it forwards to (a plain function of torch named `disable`
    taking `fn`, `recursive` and `reason`). No module of torch's compiler stack is
    imported or read."""
    if type(obj) is not _FUNCTION or obj.__name__ != _DISABLE_NAME:
        return False
    if obj is torch.compiler.disable:
        return True
    module = obj.__module__
    if not (isinstance(module, str) and module.partition(".")[0] == "torch"):
        return False
    names = obj.__code__.co_varnames[: obj.__code__.co_argcount + obj.__code__.co_kwonlyargcount]
    return all(name in names for name in _DISABLE_PARAMETERS)
