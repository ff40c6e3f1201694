"""The functions a higher-order call takes (a cond's branches, a while_loop's body, what
torch.func transforms), rebuilt when the graph runs from the tensors capture hands it.

    torch.cond(p, lambda a: a * w[0] + self.lin(a), f, (x,))
        -> a node cond(p, w0, x): the branch is made again each call from its code,
           its globals and cells rebuilt from the node's tensor inputs
           (the list `w` of tensors -> [w0]; `self` guarded to be that module)

A function is a branch (`function_maker`) when it is known now (a global function, a
module from the inputs or globals, a lambda without cells) or was made in the frame and
its cells hold, recursively: tensors (node inputs, as torch.compile lifts them),
constants, modules guarded by identity, functions of this same kind, tuples, lists and
dicts of these, and `functools.partial`s of these. A container is rebuilt fresh each
call: the branch sees its items as they were when the call was made.

Capture runs a branch's Python on fake tensors to learn its outputs, outside its own
interpreter, so `check_branch_is_pure` first checks its code (and that of what it calls)
the way an autograd.Function's staticmethods are checked: no print, no write of a global
or closure cell, no object read that the run could change (a list, an arbitrary object);
tensors and modules may be read. Anything else is Unsupported: the graph breaks there
and the call runs eagerly.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.operations import NotConstant, as_constant
from dynamo_capture.values import (
    CellValue,
    DictValue,
    FunctionValue,
    ListValue,
    MethodValue,
    PartialValue,
    PythonValue,
    TensorValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    from dynamo_capture.frame_guards import FrameGuards
    from dynamo_capture.interpreter import Translator

__all__ = [
    "TRANSFORMED",
    "Maker",
    "check_branch_is_pure",
    "closure_over_tensors",
    "function_maker",
    "function_name",
    "known_function",
    "name_node_target",
]

TRANSFORMED = "__ember_transformed__"  # set on the functions made for graph nodes
_NESTING = 8  # how deep cells holding functions holding cells are followed

Maker = Callable[[tuple[Any, ...]], Any]  # the node's tensor inputs -> the object


def function_maker(
    value: Value, what: str, guards: FrameGuards | None = None
) -> tuple[Maker, list[Value]]:
    """A maker of the function `value` stands for from the tensors its cells hold, and
    those tensors (none for a function known now). With `guards`, a module (`self` of a
    closure, a method's `self`) is kept, guarded to be that very module."""
    method = _module_method(value, guards)
    if method is not None:
        return (lambda cells: method), []
    try:
        function = known_function(value, what)
    except Unsupported:
        tensors: list[Value] = []
        maker = _maker(value, tensors, guards, 0)
        if maker is None:
            raise
        return maker, tensors
    return (lambda cells: function), []


def closure_over_tensors(
    value: Value, guards: FrameGuards | None = None
) -> tuple[Maker, list[Value]] | None:
    """For a function made in the frame with closure cells of the kinds above: a maker
    of the real function from the cells' tensors, and those tensors; else None."""
    if not isinstance(value, FunctionValue) or not value.closure:
        return None
    tensors: list[Value] = []
    maker = _maker(value, tensors, guards, 0)
    return None if maker is None else (maker, tensors)


def _maker(value: Value | None, tensors: list[Value], guards: Any, depth: int) -> Maker | None:
    """How to make `value` again from the node's tensor inputs (its tensors appended
    to `tensors`), or None where it is of no kind a branch may hold."""
    if depth > _NESTING or value is None:
        return None
    if isinstance(value, TensorValue):
        index = len(tensors)
        tensors.append(value)
        return lambda flat: flat[index]
    if isinstance(value, FunctionValue):
        return _function_maker(value, tensors, guards, depth + 1)
    if isinstance(value, PartialValue):
        return _partial_maker(value, tensors, guards, depth + 1)
    if isinstance(value, TupleValue | ListValue) and type(value) in (TupleValue, ListValue):
        kind = value.cls if isinstance(value, ListValue) else value.cls
        if kind not in (list, tuple):
            return None
        parts = [_maker(item, tensors, guards, depth + 1) for item in value.items]
        if any(part is None for part in parts):
            return None
        return lambda flat: kind(part(flat) for part in parts)  # type: ignore[misc]
    if isinstance(value, DictValue) and value.cls is dict and not value.attrs:
        entries = [(k, _maker(v, tensors, guards, depth + 1)) for k, v in value.items.items()]
        if any(part is None for _, part in entries):
            return None
        return lambda flat: {k: part(flat) for k, part in entries}  # type: ignore[misc]
    method = _module_method(value, guards)
    if method is not None:
        return lambda flat: method
    module = _guarded_module(value, guards)
    if module is not None:
        return lambda flat: module
    if isinstance(value, PythonValue) and _is_plain_function(value.obj):
        obj = value.obj
        return lambda flat: obj
    try:
        constant = as_constant(value)
    except NotConstant:
        return None
    return lambda flat: constant


def _function_maker(
    value: FunctionValue, tensors: list[Value], guards: Any, depth: int
) -> Maker | None:
    if value.kwdefaults:
        return None
    try:
        defaults = tuple(as_constant(item) for item in value.defaults)
    except NotConstant:
        return None
    parts = []
    for cell in value.closure:
        contents = cell.contents if isinstance(cell, CellValue) else None
        part = _maker(contents, tensors, guards, depth)
        if part is None:
            return None
        parts.append(part)
    code, scope, name = value.code, value.globals, value.name

    def make(flat: tuple[Any, ...]) -> Callable[..., Any]:
        cells = tuple(types.CellType(part(flat)) for part in parts)
        function = types.FunctionType(code, scope, name, defaults or None, cells or None)
        function.__ember_rebuilt__ = True  # type: ignore[attr-defined]
        return function

    return make


def _partial_maker(
    value: PartialValue, tensors: list[Value], guards: Any, depth: int
) -> Maker | None:
    func = _maker(value.func, tensors, guards, depth)
    args = [_maker(arg, tensors, guards, depth) for arg in value.args]
    kwargs = {k: _maker(v, tensors, guards, depth) for k, v in value.kwargs.items()}
    if func is None or any(p is None for p in (*args, *kwargs.values())):
        return None
    return lambda flat: functools.partial(
        func(flat),
        *(arg(flat) for arg in args),  # type: ignore[misc]
        **{k: v(flat) for k, v in kwargs.items()},  # type: ignore[misc]
    )


def _is_plain_function(obj: Any) -> bool:
    """A function without cells (its code and globals are all it is) or a builtin."""
    if isinstance(obj, types.FunctionType):
        return not obj.__closure__
    return isinstance(obj, types.BuiltinFunctionType)


def _guarded_module(value: Any, guards: FrameGuards | None) -> torch.nn.Module | None:
    """The module `value` holds when it was read from where the guards can check it is
    the same module each call (an input, a global, an attribute of one), guarded so."""
    if guards is None or not isinstance(value, PythonValue):
        return None
    if not isinstance(value.obj, torch.nn.Module) or value.source is None:
        return None
    guards.id_match(value.source, value.obj)
    return value.obj


def _module_method(value: Any, guards: FrameGuards | None) -> Callable[..., Any] | None:
    """`module.f` for a method of a module from the inputs or globals, a plain function
    of its class (its lookup guarded where capture made the method); else None."""
    if not isinstance(value, MethodValue) or not isinstance(value.func, PythonValue):
        return None
    function = value.func.obj
    if not isinstance(function, types.FunctionType) or function.__closure__:
        return None
    module = _guarded_module(value.self_value, guards)
    return types.MethodType(function, module) if module is not None else None


def known_function(value: Value, what: str) -> Callable[..., Any]:
    """The real callable `value` stands for: known now, and the same in every call the
    guards let through (a function without cells or a module from the inputs or
    globals, a lambda made in the frame without closure cells)."""
    if isinstance(value, PythonValue) and callable(value.obj):
        if isinstance(value.obj, types.FunctionType) and value.obj.__closure__:
            # its guards check the code, not the cells: another closure would pass them
            raise Unsupported(f"{what} is a closure (its cells are not guarded)")
        return value.obj
    if isinstance(value, FunctionValue) and not value.closure and not value.kwdefaults:
        try:
            defaults = tuple(as_constant(item) for item in value.defaults)
        except NotConstant:
            raise Unsupported(f"{what} has defaults that are not constants") from None
        return types.FunctionType(value.code, value.globals, value.name, defaults or None)
    raise Unsupported(f"{what} is not a function capture knows now (a closure over the frame)")


def check_branch_is_pure(tx: Translator, function: Any, what: str) -> None:
    """Unsupported unless running `function` on fakes at capture time has no effect
    outside it (autograd_functions' check of a Function's staticmethods, which here may
    also read tensors and modules: a module's class is checked in turn)."""
    from dynamo_capture.autograd_functions import check_pure

    while isinstance(function, functools.partial):
        function = function.func
    if isinstance(function, torch.nn.Module):
        check_pure(tx, type(function).forward, what, reads_objects=True)
        return
    check_pure(tx, function, what, reads_objects=True)


def function_name(function: Any) -> str:
    while isinstance(function, functools.partial):
        function = function.func
    name = getattr(function, "__name__", type(function).__name__)
    return "".join(c if c.isalnum() else "_" for c in name).strip("_") or "fn"


def name_node_target(function: Any, name: str) -> None:
    """Name a function made as a graph node's target (and mark it as one)."""
    function.__name__ = function.__qualname__ = name
    setattr(function, TRANSFORMED, True)
