"""What a compiled callable captures: the code object, how a call's arguments become
the frame's locals `L`, and its globals `G`.

    a function          its own code; L = its bound arguments plus free variables
    a bound method      the function's code with `self` bound
    an nn.Module        a two-line driver `self(*args, **kwargs)`, so that the module
                        call (pre-hooks, forward, hooks) is captured as user code
    an object with a    its class's `__call__` with `self` bound
      Python __call__
    a partial of a      that function's frame, the partial's arguments bound first
      function
    anything else       a driver `fn(*args, **kwargs)` with `fn` in L: another
      callable          functools.partial, a builtin, a torch function or op, a C
                        method; capture handles the call as it would in user code
"""

from __future__ import annotations

import functools
import inspect
import keyword
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["FrameTarget", "drives_module", "frame_target"]


def _module_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    return self(*args, **kwargs)


def drives_module(target: FrameTarget) -> bool:
    """Whether the frame is the driver `self(*args, **kwargs)` of a compiled module."""
    return target.function is _module_call


def _callable_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def _is_python_routine(fn: Any) -> bool:
    """A Python function, or a method bound to one."""
    return isinstance(fn, types.FunctionType) or (
        isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType)
    )


def _callable_name(target: Any) -> str:
    inner = target
    while isinstance(inner, functools.partial):
        inner = inner.func
    name = getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None)
    return name if isinstance(name, str) else type(target).__qualname__


@dataclass(frozen=True, slots=True)
class FrameTarget:
    """The frame a compiled callable captures and runs."""

    function: types.FunctionType
    bind: Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]
    name: str
    # nn.Module arguments are guarded on their structure, not their identity (one frame
    # compiled for every module of a class: CompiledCallable._callee_part)
    modules_by_structure: bool = False
    # locals the target binds itself (the compiled module's `self`, the object a compiled
    # method is bound to, a partial's arguments): the same objects every call, their
    # modules guarded by identity (and their trees by guards' module-tree guards) where
    # the frame guards other modules on structure
    bound_locals: frozenset[str] = frozenset()

    @property
    def code(self) -> types.CodeType:
        return self.function.__code__

    @property
    def globals(self) -> dict[str, Any]:
        return self.function.__globals__


def _spelled(name: str, index: int) -> str:
    """`name` as a parameter of generated source: a local whose name is no identifier
    (pytest's rewritten asserts bind `@py_assert0`) is spelled `___local<index>`."""
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    return f"___local{index}"


def _parameter_list(code: types.CodeType) -> tuple[str, list[str]]:
    """The parameter list of `code` as source text (names spelled by `_spelled`), and
    the parameter names as the code has them."""
    names = tuple(_spelled(name, index) for index, name in enumerate(code.co_varnames))
    positional = list(names[: code.co_argcount])
    keyword_only = list(names[code.co_argcount : code.co_argcount + code.co_kwonlyargcount])
    index = code.co_argcount + code.co_kwonlyargcount
    parts = list(positional)
    if code.co_posonlyargcount:
        parts.insert(code.co_posonlyargcount, "/")
    all_names = positional + keyword_only
    if code.co_flags & inspect.CO_VARARGS:
        parts.append("*" + names[index])
        all_names.append(names[index])
        index += 1
    elif keyword_only:
        parts.append("*")
    parts.extend(keyword_only)
    if code.co_flags & inspect.CO_VARKEYWORDS:
        parts.append("**" + names[index])
        all_names.append(names[index])
    return ", ".join(parts), all_names


def _binder(
    function: types.FunctionType, bound_self: tuple[Any, ...]
) -> Callable[..., dict[str, Any]]:
    """A generated function with `function`'s signature that returns the frame's locals L."""
    code = function.__code__
    params, names = _parameter_list(code)
    spelled = {_spelled(name, index): name for index, name in enumerate(code.co_varnames)}
    items = ", ".join(f"{spelled[name]!r}: {name}" for name in names)
    freevars = code.co_freevars
    lines = [f"def {code.co_name if code.co_name.isidentifier() else 'bind'}({params}):"]
    if freevars:
        lines.append(f"    L = {{{items}}}")
        for index, name in enumerate(freevars):
            lines.append(f"    L[{name!r}] = ___cells[{index}].cell_contents")
        lines.append("    return L")
    else:
        lines.append(f"    return {{{items}}}")
    scope: dict[str, Any] = {"___cells": function.__closure__ or ()}
    exec("\n".join(lines) + "\n", scope)  # noqa: S102
    bind_locals = next(v for k, v in scope.items() if k not in ("___cells", "__builtins__"))
    bind_locals.__defaults__ = function.__defaults__
    bind_locals.__kwdefaults__ = function.__kwdefaults__
    if bound_self:
        receiver = bound_self[0]
        return lambda args, kwargs: bind_locals(receiver, *args, **kwargs)
    return lambda args, kwargs: bind_locals(*args, **kwargs)


def _first_parameters(function: types.FunctionType, count: int, start: int = 0) -> frozenset[str]:
    """The names of `function`'s `count` positional parameters from the `start`th."""
    code = function.__code__
    return frozenset(code.co_varnames[start : min(start + count, code.co_argcount)])


def frame_target(target: Any) -> FrameTarget:
    """The FrameTarget of a function, bound method, nn.Module or callable object."""
    if isinstance(target, torch.nn.Module):
        module = target

        def bind_module(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            return {"self": module, "args": args, "kwargs": kwargs}

        return FrameTarget(
            _module_call, bind_module, type(target).__qualname__, bound_locals=frozenset({"self"})
        )
    if isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType):
        function = target.__func__
        return FrameTarget(
            function,
            _binder(function, (target.__self__,)),
            function.__qualname__,
            bound_locals=_first_parameters(function, 1),
        )
    if isinstance(target, types.FunctionType):
        return FrameTarget(target, _binder(target, ()), target.__qualname__)
    if isinstance(target, functools.partial) and _is_python_routine(target.func):
        # the function's own frame, the partial's arguments bound first
        inner = frame_target(target.func)
        bound_args, bound_kwargs = target.args, target.keywords

        def bind_partial(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            return inner.bind((*bound_args, *args), {**bound_kwargs, **kwargs})

        # NOTE: partial(partial(f, a), b) is flattened by functools: the only positional
        # argument bound before the partial's is a bound method's object
        start = 1 if isinstance(target.func, types.MethodType) else 0
        bound = inner.bound_locals | _first_parameters(inner.function, len(bound_args), start)
        bound |= frozenset(bound_kwargs)
        return FrameTarget(inner.function, bind_partial, inner.name, bound_locals=bound)
    call = getattr(type(target), "__call__", None)  # noqa: B004
    torch_class = type(target).__module__.split(".")[0] == "torch"  # OpOverload and the like
    if isinstance(call, types.FunctionType) and not torch_class:
        return FrameTarget(
            call,
            _binder(call, (target,)),
            type(target).__qualname__,
            bound_locals=_first_parameters(call, 1),
        )
    if callable(target):
        return FrameTarget(
            _callable_call, _binder(_callable_call, (target,)), _callable_name(target)
        )
    raise TypeError(f"cannot compile {target!r}: it is not callable")
