"""Argument counts of the builtin functions and container methods capture models itself.

A modelled call (`isinstance(x, T)`, `d.setdefault(k)`, `t.count(x)`, `l.pop()`) is
made with the arguments the code gives; before its handler runs, the count (and the
keywords) are checked against the builtin's own signature, so a wrong call raises
Python's own TypeError in the captured code (where a `try` may catch it), as eagerly:

    {}.setdefault()               TypeError: setdefault expected at least 1 argument, got 0
    l.pop(1, 2)                   TypeError: pop expected at most 1 argument, got 2
    isinstance(x, T, strict=1)    TypeError: isinstance() takes no keyword arguments

The signature is the callable's text signature where CPython gives one
(`inspect.signature(list.pop)`), else, for container methods, the positional counts
declared below for the methods that take no keywords. The error itself comes from
calling the builtin on placeholder arguments (a method: on an empty stand-in of the
receiver's builtin type): CPython checks the count before it reads an argument, so
its message is eager's. A method a Python subclass overrides, or a callable neither
source describes, is not checked.
"""

from __future__ import annotations

import collections
import functools
import inspect
from typing import Any

from dynamo_capture.errors import ExceptionRaised, Unsupported, raised_by_python

__all__ = ["check_call_arguments", "check_method_arguments"]

# The builtin types whose methods capture models, most derived first.
_BUILTIN_BASES: tuple[type, ...] = (
    collections.OrderedDict,
    collections.defaultdict,
    collections.deque,
    dict,
    list,
    tuple,
    set,
    frozenset,
)

_ANY = None  # no upper bound: *args

_NO_ARGUMENTS = dict.fromkeys(("clear", "copy", "items", "keys", "values", "pop"), (0, 0))

# (fewest, most) positional arguments of the methods CPython gives no text signature,
# none of which takes a keyword
POSITIONAL_COUNTS: dict[type, dict[str, tuple[int, int | None]]] = {
    dict: {
        **_NO_ARGUMENTS,
        "pop": (1, 2),
        "__getitem__": (1, 1),
    },
    list: {"__getitem__": (1, 1)},
    set: {
        **_NO_ARGUMENTS,
        "__contains__": (1, 1),
        "add": (1, 1),
        "discard": (1, 1),
        "remove": (1, 1),
        "isdisjoint": (1, 1),
        "issubset": (1, 1),
        "issuperset": (1, 1),
        "symmetric_difference": (1, 1),
        "symmetric_difference_update": (1, 1),
        "union": (0, _ANY),
        "update": (0, _ANY),
        "intersection": (0, _ANY),
        "intersection_update": (0, _ANY),
        "difference": (0, _ANY),
        "difference_update": (0, _ANY),
    },
    collections.deque: {
        **_NO_ARGUMENTS,
        "__reversed__": (0, 0),
        "append": (1, 1),
        "appendleft": (1, 1),
        "count": (1, 1),
        "extend": (1, 1),
        "extendleft": (1, 1),
        "index": (1, 3),
        "insert": (2, 2),
        "popleft": (0, 0),
        "remove": (1, 1),
        "reverse": (0, 0),
        "rotate": (0, 1),
    },
}
POSITIONAL_COUNTS[frozenset] = POSITIONAL_COUNTS[set]
POSITIONAL_COUNTS[collections.OrderedDict] = POSITIONAL_COUNTS[dict]
POSITIONAL_COUNTS[collections.defaultdict] = POSITIONAL_COUNTS[dict]


def _builtin_base(kind: type) -> type | None:
    return next((base for base in _BUILTIN_BASES if issubclass(kind, base)), None)


@functools.cache
def _signature(base: type, name: str) -> inspect.Signature | None:
    try:
        return inspect.signature(getattr(base, name))
    except (ValueError, TypeError, AttributeError):
        return None


def _fits(base: type, name: str, positional: int, keywords: tuple[str, ...]) -> bool:
    signature = _signature(base, name)
    if signature is not None:
        try:
            signature.bind(None, *([None] * positional), **dict.fromkeys(keywords))
        except TypeError:
            return False
        return True
    counts = POSITIONAL_COUNTS.get(base, {}).get(name)
    if counts is None:
        return True  # not described: the handler checks what it reads
    fewest, most = counts
    return not keywords and fewest <= positional and (most is None or positional <= most)


def check_method_arguments(
    kind: type, name: str, positional: int, keywords: tuple[str, ...]
) -> None:
    """Raise eager's TypeError in the captured code when `kind.name` (a builtin container
    method capture models) is called with a count of arguments or keywords it rejects."""
    base = _builtin_base(kind)
    if base is None or getattr(kind, name, None) is not getattr(base, name, None):
        return  # not a builtin container method (a subclass's own)
    if _fits(base, name, positional, keywords):
        return
    raise _eager_type_error(base, name, positional, keywords)


def _eager_type_error(
    base: type, name: str, positional: int, keywords: tuple[str, ...]
) -> ExceptionRaised | Unsupported:
    stand_in: Any = base()
    try:
        getattr(stand_in, name)(*([None] * positional), **dict.fromkeys(keywords))
    except TypeError as error:
        return raised_by_python(error)
    except Exception:  # noqa: BLE001 - any other outcome: not a count error after all
        pass
    return Unsupported(f"{base.__name__}.{name}() with {positional} arguments and {keywords}")


@functools.cache
def _callable_signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (ValueError, TypeError):
        return None


def check_call_arguments(fn: Any, positional: int, keywords: tuple[str, ...]) -> None:
    """Raise eager's TypeError in the captured code when `fn` (a builtin function or
    class capture models by a handler) is called with arguments its signature rejects."""
    try:
        signature = _callable_signature(fn)
    except TypeError:  # an unhashable callable
        return
    if signature is None:
        return
    placeholders = [None] * positional
    try:
        signature.bind(*placeholders, **dict.fromkeys(keywords))
    except TypeError:
        pass
    else:
        return
    try:
        fn(*placeholders, **dict.fromkeys(keywords))
    except TypeError as error:
        raise raised_by_python(error) from None
    except Exception:  # noqa: BLE001 - any other outcome: not a count error after all
        pass
    name = getattr(fn, "__name__", fn)
    raise Unsupported(f"{name}() with {positional} arguments and keywords {keywords}")
