"""What a compiled callable captures: the code object, how a call's arguments become
the frame's locals `L`, and its globals `G`.

    a function          its own code; L = its bound arguments plus free variables
    a bound method      the function's code with `self` bound
    an nn.Module        a two-line driver `self(*args, **kwargs)`, so that the module
                        call (pre-hooks, forward, hooks) is captured as user code
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["FrameTarget", "frame_target"]


def _module_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    return self(*args, **kwargs)


@dataclass(frozen=True, slots=True)
class FrameTarget:
    """The frame a compiled callable captures and runs."""

    function: types.FunctionType
    bind: Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]
    name: str

    @property
    def code(self) -> types.CodeType:
        return self.function.__code__

    @property
    def globals(self) -> dict[str, Any]:
        return self.function.__globals__


def _binder(
    function: types.FunctionType, bound_self: tuple[Any, ...]
) -> Callable[..., dict[str, Any]]:
    signature = inspect.signature(function)
    freevars = function.__code__.co_freevars
    cells = function.__closure__ or ()

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = signature.bind(*bound_self, *args, **kwargs)
        bound.apply_defaults()
        f_locals = bound.arguments
        for name, cell in zip(freevars, cells):
            try:
                f_locals[name] = cell.cell_contents
            except ValueError:
                pass
        return f_locals

    return bind


def frame_target(target: Any) -> FrameTarget:
    """The FrameTarget of a function, bound method, nn.Module or callable object."""
    if isinstance(target, torch.nn.Module):
        module = target

        def bind_module(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            return {"self": module, "args": args, "kwargs": kwargs}

        return FrameTarget(_module_call, bind_module, type(target).__qualname__)
    if isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType):
        function = target.__func__
        return FrameTarget(function, _binder(function, (target.__self__,)), function.__qualname__)
    if isinstance(target, types.FunctionType):
        return FrameTarget(target, _binder(target, ()), target.__qualname__)
    call = getattr(type(target), "__call__", None)  # noqa: B004
    if isinstance(call, types.FunctionType):
        return FrameTarget(call, _binder(call, (target,)), type(target).__qualname__)
    raise TypeError(
        f"cannot compile {target!r}: expected a Python function, a bound method, an nn.Module "
        "or an object with a Python __call__"
    )
