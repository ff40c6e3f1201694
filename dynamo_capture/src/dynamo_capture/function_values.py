"""Attributes of functions made while capturing (closures, lambdas, functools.wraps wrappers).

A `FunctionValue` answers the attributes a real function has from its code and
globals (`__name__`, `__qualname__`, `__module__`, `__doc__`, `__defaults__`...);
assignments (`functools.wraps` copies `__name__`, `__doc__`, `__wrapped__`, and
updates `__dict__`) go to its `attrs`, which override those and are set again on
the real function made when the value leaves the frame.
"""

from __future__ import annotations

import dis
import sys
import types
from typing import Any

from dynamo_capture.values import DictValue, FunctionValue, PythonValue, TupleValue, Value

__all__ = ["function_attr", "set_function_attr", "writes_free_variable"]

_READ_ONLY = frozenset({"__code__", "__globals__", "__closure__", "__builtins__"})


def _doc(value: FunctionValue) -> Any:
    # CPython 3.11+ puts a function's docstring, or None, first among its constants
    consts = value.code.co_consts
    return consts[0] if consts and isinstance(consts[0], str) else None


def function_attr(value: FunctionValue, name: str) -> Value | None:
    """value.name for a function made while capturing; None where it has no such attribute."""
    if name in value.attrs:
        return value.attrs[name]
    if name == "__dict__":
        return DictValue(value.attrs)  # a live view: writes go to the attributes
    code = value.code
    plain = {
        "__name__": value.name,
        "__qualname__": getattr(code, "co_qualname", value.name),
        "__module__": value.globals.get("__name__"),
        "__code__": code,
        "__doc__": None,
        "__globals__": value.globals,
    }
    if sys.version_info >= (3, 12):
        plain["__type_params__"] = ()  # a generic def (PEP 695) is not made in a frame here
    if name == "__doc__":
        return PythonValue(_doc(value))
    if name in plain:
        return PythonValue(plain[name])
    if name == "__defaults__":
        return TupleValue(list(value.defaults)) if value.defaults else PythonValue(None)
    if name == "__closure__":  # its cells (CellValue: `cell_contents` reads them)
        if value.closure_read is None:
            value.closure_read = TupleValue(list(value.closure)) if value.closure else None
        return value.closure_read if value.closure_read is not None else PythonValue(None)
    if name == "__annotations__":
        return _annotations(value)
    if name == "__kwdefaults__":
        return DictValue(dict(value.kwdefaults)) if value.kwdefaults else PythonValue(None)
    return None


def _annotations(value: FunctionValue) -> Value | None:
    """A fresh dict of the annotations MAKE_FUNCTION got (name, value, ...); {} for none."""
    if value.annotations is None:
        return DictValue({})
    items = getattr(value.annotations, "items", None)
    if not isinstance(value.annotations, TupleValue) or items is None or len(items) % 2:
        return None
    names = [getattr(item, "obj", None) for item in items[::2]]
    if not all(isinstance(name, str) for name in names):
        return None
    return DictValue(dict(zip(names, items[1::2], strict=True)))


def set_function_attr(value: FunctionValue, name: str, item: Value) -> bool:
    """value.name = item; False where capture cannot keep it (the frame then breaks).

    `__defaults__` of a function made in the frame takes a tuple (or None): later calls
    and reads see the new defaults, as eager's do."""
    if name == "__defaults__" and value.source is None:
        if isinstance(item, PythonValue) and item.obj is None:
            value.defaults = ()
            return True
        if isinstance(item, TupleValue) and item.cls is tuple:
            value.defaults = tuple(item.items)
            return True
        constants = (bool, int, float, complex, str, bytes, type(None))
        if (
            isinstance(item, PythonValue)
            and type(item.obj) is tuple
            and all(type(default) in constants for default in item.obj)
        ):
            value.defaults = tuple(PythonValue(default) for default in item.obj)
            return True
        return False
    if name in _READ_ONLY or name in ("__defaults__", "__kwdefaults__", "__dict__"):
        return False
    value.attrs[name] = item
    return True


def writes_free_variable(code: types.CodeType, name: str) -> bool:
    """Whether `code`, or a function it makes, may store to or delete its free (or cell)
    variable `name` (`nonlocal name; name = ...`)."""
    for inst in dis.get_instructions(code):
        if inst.opname in ("STORE_DEREF", "DELETE_DEREF") and inst.argval == name:
            return True
    return any(
        writes_free_variable(const, name)
        for const in code.co_consts
        if isinstance(const, types.CodeType)
    )
