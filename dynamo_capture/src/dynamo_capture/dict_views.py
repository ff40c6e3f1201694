"""Dict views (`d.keys()`, `d.values()`, `d.items()`) while capturing.

A view is live, as in Python: it reads its dict each time it is used, so a
write to the dict after `keys = d.keys()` shows through it. Keys and items views
compare and combine as sets (`d.keys() == {"a", "b"}`, `d.keys() | other`) through
their real counterparts, built from the dict's current constant keys (and
values, for items); a values view compares by identity only (operations.compare_op).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynamo_capture.errors import Unsupported
from dynamo_capture.values import DictViewValue, PythonValue, TupleValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = ["VIEW_TYPES", "call_view_method", "view_constant", "view_items"]

VIEW_TYPES: dict[str, type] = {
    "keys": type({}.keys()),
    "values": type({}.values()),
    "items": type({}.items()),
}


def view_items(tx: Translator, view: DictViewValue) -> list[Value]:
    """What iterating the view gives now."""
    from dynamo_capture.operations import dict_items, key_value

    items = dict_items(tx, view.mapping)
    if view.kind == "keys":
        return [key_value(key) for key in items]
    if view.kind == "values":
        return list(items.values())
    return [TupleValue([key_value(key), value]) for key, value in items.items()]


def view_constant(view: DictViewValue) -> Any:
    """The real view of the dict's constant contents (keys and items views only).

    Raises NotConstant for a values view or an items view of non-constant values.
    """
    from dynamo_capture.operations import NotConstant, as_constant, dict_items

    if view.kind == "values":
        raise NotConstant
    try:
        items = dict_items(view.tx, view.mapping)
    except Unsupported:
        raise NotConstant from None
    if view.kind == "keys":
        return dict.fromkeys(items).keys()
    return {key: as_constant(value) for key, value in items.items()}.items()


def call_view_method(
    tx: Translator, view: DictViewValue, name: str, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """view.name(*args) for the methods of dict views."""
    from dynamo_capture.operations import as_constant, contains

    if name == "__len__":
        return PythonValue(len(view_items(tx, view)))
    if name == "__contains__":
        return PythonValue(contains(tx, args[0], view))
    if name in ("__iter__", "__reversed__"):
        from dynamo_capture.values import IteratorValue

        items = view_items(tx, view)
        return IteratorValue(items if name == "__iter__" else items[::-1])
    if name == "isdisjoint":
        return PythonValue(view_constant(view).isdisjoint(as_constant(args[0])))
    raise Unsupported(f"method {name} of a dict {view.kind} view")
