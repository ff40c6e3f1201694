"""collections.deque made in the frame: a ListValue whose `cls` is deque.

    d = collections.deque(xs)      # ListValue(items, cls=deque)
    d.appendleft(x); d.popleft()   # DEQUE_METHODS below; list's where they agree

A `maxlen` bounds it as eagerly (an append past it drops the other end). A deque
that exists outside the frame is shadowed by one of these on its first change and
given the shadow's items after the graph (side_effects). Slicing a deque (a
TypeError eagerly) is Unsupported.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from dynamo_capture.errors import Unsupported
from dynamo_capture.lazy_iterators import each_item
from dynamo_capture.operations import NotConstant, as_constant
from dynamo_capture.values import ListValue, PythonValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = ["DEQUE_METHODS", "make_deque"]


def make_deque(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """collections.deque(iterable=(), maxlen=None)."""
    maxlen_value = args[1] if len(args) > 1 else kwargs.get("maxlen", PythonValue(None))
    try:
        maxlen = as_constant(maxlen_value)
    except NotConstant:
        raise Unsupported("collections.deque with a maxlen known only when it runs") from None
    if len(args) > 2 or set(kwargs) - {"iterable", "maxlen"}:
        raise Unsupported("collections.deque with unknown arguments")
    if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
        raise Unsupported("collections.deque with a maxlen that is not an int >= 0")
    iterable = args[0] if args else kwargs.get("iterable")
    deque = ListValue([], cls=collections.deque, maxlen=maxlen)
    if iterable is not None:
        _extend(tx, deque, [iterable], {})
    return deque


def _empty(name: str, d: ListValue) -> None:
    if not d.items:
        from dynamo_capture.errors import ExceptionRaised

        raise ExceptionRaised(PythonValue(IndexError("pop from an empty deque")))


def _bounded(d: ListValue, keep_left: bool) -> None:
    """Drop items past the deque's maxlen from the end the new items did not go to."""
    if d.maxlen is not None and len(d.items) > d.maxlen:
        excess = len(d.items) - d.maxlen
        if keep_left:
            del d.items[len(d.items) - excess :]
        else:
            del d.items[:excess]


def _append(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    d.items.append(args[0])
    _bounded(d, keep_left=False)
    return PythonValue(None)


def _appendleft(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    d.items.insert(0, args[0])
    _bounded(d, keep_left=True)
    return PythonValue(None)


def _extend(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    for item in each_item(tx, args[0]):  # added as made: a generator may read the deque
        d.items.append(item)
        _bounded(d, keep_left=False)
    return PythonValue(None)


def _extendleft(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    for item in each_item(tx, args[0]):
        d.items.insert(0, item)
        _bounded(d, keep_left=True)
    return PythonValue(None)


def _pop(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _empty("pop", d)
    return d.items.pop()


def _popleft(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _empty("popleft", d)
    return d.items.pop(0)


def _rotate(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    steps = as_constant(args[0]) if args else 1
    if d.items:
        steps %= len(d.items)
        d.items[:] = d.items[-steps:] + d.items[:-steps] if steps else d.items
    return PythonValue(None)


def _clear(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    d.items.clear()
    return PythonValue(None)


def _copy(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return ListValue(list(d.items), cls=collections.deque, maxlen=d.maxlen)


def _reverse(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    d.items.reverse()
    return PythonValue(None)


def _mutating(method: Any) -> Any:
    def checked(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if d.source is not None:
            raise Unsupported("a deque that exists outside the frame changed (a side effect)")
        return method(tx, d, args, kwargs)

    return checked


DEQUE_METHODS: dict[str, Any] = {
    name: _mutating(method)
    for name, method in {
        "append": _append,
        "appendleft": _appendleft,
        "extend": _extend,
        "extendleft": _extendleft,
        "pop": _pop,
        "popleft": _popleft,
        "rotate": _rotate,
        "clear": _clear,
        "reverse": _reverse,
    }.items()
}
DEQUE_METHODS["copy"] = _copy
