"""Methods of values that capture interprets itself: containers, strings, contexts, iterators.

One table per receiver kind, keyed by method name. Methods that would change a
container that exists outside the frame are Unsupported (a side effect).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import operator
import os
import types
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture import side_effects
from dynamo_capture.argument_counts import check_method_arguments
from dynamo_capture.errors import ExceptionRaised, Unsupported, raised_by_python
from dynamo_capture.operations import (
    IdentityKey,
    NotConstant,
    as_constant,
    builtin_contains,
    builtin_dict_item,
    builtin_get_item,
    builtin_items,
    builtin_set_item,
    comparable_key,
    dict_items,
    hashable_key,
    key_value,
    own_getitem_outside_dict,
    python_type_of,
    sequence_items,
    truth,
)
from dynamo_capture.sym_numbers import recomputed_from_values
from dynamo_capture.values import (
    ContextValue,
    DictValue,
    DictViewValue,
    IteratorValue,
    ListValue,
    ObjectValue,
    PythonValue,
    SetValue,
    TensorValue,
    TupleValue,
    Value,
    runs_eagerly_on_its_own,
)

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "call_method",
    "context_factory",
    "enter_context",
    "exit_context",
    "kept_context",
    "kept_grad_context",
    "known_context",
    "outside_context",
]

Method = Callable[["Translator", Value, list[Value], dict[str, Value]], Value]


def _none() -> PythonValue:
    return PythonValue(None)


def _key(value: Value) -> Any:
    return hashable_key(value)


def _item_key(value: Value) -> Any:
    """An item as a sequence method compares it (by `==`, no hashing)."""
    return comparable_key(value)


def _mutable(receiver: Value, name: str) -> None:
    if receiver.source is not None or isinstance(receiver, PythonValue):
        raise Unsupported(
            f"{python_type_of(receiver).__name__}.{name}() on a container that exists outside "
            "the frame (a side effect)"
        )


# ----- list ------------------------------------------------------------------
def _list_append(tx: Translator, lst: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(lst, "append")
    lst.items.append(args[0])
    return _none()


def _list_extend(tx: Translator, lst: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(lst, "extend")
    from dynamo_capture.lazy_iterators import each_item

    for item in each_item(tx, args[0]):  # appended as made: a generator may read the list
        lst.items.append(item)
    return _none()


def _list_init(tx: Translator, lst: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """list.__init__(self, iterable=()): the items become those of the iterable (a list
    subclass's own __init__ calling super().__init__(items))."""
    _mutable(lst, "__init__")
    if kwargs or len(args) > 1:
        raise Unsupported("list.__init__ with other than one positional argument")
    lst.items.clear()
    if args:
        _list_extend(tx, lst, args, kwargs)
    return _none()


def _list_insert(tx: Translator, lst: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(lst, "insert")
    lst.items.insert(_item_key(args[0]), args[1])
    return _none()


def _list_pop(tx: Translator, lst: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(lst, "pop")
    index = _item_key(args[0]) if args else -1
    if not isinstance(index, int) or not -len(lst.items) <= index < len(lst.items):
        stand_in = [None] * len(lst.items)
        raise _raised_like_python(lambda: stand_in.pop(index))
    return lst.items.pop(index)


def _list_reverse(tx: Translator, lst: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(lst, "reverse")
    lst.items.reverse()
    return _none()


def _list_clear(tx: Translator, lst: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(lst, "clear")
    lst.items.clear()
    return _none()


def _list_copy(tx: Translator, lst: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return ListValue(sequence_items(tx, lst))


def _matches(item: Value, wanted: Any) -> bool:
    """`item == wanted` as list.count/index/remove compare them: the same object, else
    `==` on constants. A tensor compared with `==` (not the same object) gives a tensor
    whose truth depends on data: Unsupported."""
    key = _item_key(item)
    if key is wanted or (isinstance(key, IdentityKey) and key == wanted):
        return True
    if isinstance(item, TensorValue) or (
        isinstance(wanted, IdentityKey) and isinstance(wanted.value, TensorValue)
    ):
        raise Unsupported("comparing a tensor with == in a sequence's count/index/remove")
    if isinstance(key, IdentityKey) or isinstance(wanted, IdentityKey):
        return False  # objects compared by identity, and not the same
    return bool(key == wanted)


def _raised_like_python(operation: Callable[[], Any]) -> ExceptionRaised:
    """The exception `operation` (Python's own method on a stand-in container) raises,
    raised in the captured code: its type and message are eager's."""
    try:
        operation()
    except Exception as error:  # noqa: BLE001 - re-raised in the captured code
        return raised_by_python(error)
    raise AssertionError("the stand-in operation was expected to raise")


def _missing_item(seq: Any, wanted: Any, method: str) -> ExceptionRaised:
    """The ValueError `seq.index(wanted)` / `seq.remove(wanted)` raises for a missing item,
    from the builtin sequence type `seq` is (its message names that type and the item)."""
    if isinstance(wanted, IdentityKey):
        # eager's message holds the item's repr (a tensor's values, an object's address)
        raise Unsupported(f"ValueError: .{method}() did not find the item")
    kind = python_type_of(seq)
    base = next(t for t in (list, tuple, collections.deque) if issubclass(kind, t))
    return _raised_like_python(lambda: getattr(base(), method)(wanted))


def _index_bounds(tx: Translator, args: list[Value], length: int) -> range:
    """The positions seq.index(x, start, stop) searches (slice rules for the bounds)."""
    bounds = [as_constant(arg) for arg in args[1:3]]
    if not all(isinstance(bound, int) for bound in bounds):
        raise Unsupported("sequence.index() with bounds that are not ints")
    start, stop = (bounds + [0, length][len(bounds) :])[:2]
    return range(*slice(start, stop).indices(length))


def _sequence_index(tx: Translator, seq: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if kwargs or not 1 <= len(args) <= 3:
        raise Unsupported("sequence.index() with unknown arguments")
    wanted = _item_key(args[0])
    items = sequence_items(tx, seq)
    for position in _index_bounds(tx, args, len(items)):
        if _matches(items[position], wanted):
            return PythonValue(position)
    raise _missing_item(seq, wanted, "index")


def _sequence_count(tx: Translator, seq: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    wanted = _item_key(args[0])
    return PythonValue(sum(_matches(item, wanted) for item in sequence_items(tx, seq)))


def _sequence_remove(
    tx: Translator, seq: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """list.remove / deque.remove: the first matching item, in place."""
    _mutable(seq, "remove")
    wanted = _item_key(args[0])
    for position, item in enumerate(seq.items):
        if _matches(item, wanted):
            del seq.items[position]
            return _none()
    raise _missing_item(seq, wanted, "remove")


def _list_sort(tx: Translator, lst: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(lst, "sort")
    from dynamo_capture.builtin_calls import sorted_values

    lst.items[:] = sorted_values(tx, list(lst.items), kwargs)
    return _none()


def _builtin_reversed(
    tx: Translator, seq: Value, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """`seq.__reversed__()` of a list, dict or deque: what `reversed(seq)` gives."""
    from dynamo_capture.calls import call

    return call(tx, PythonValue(reversed), [seq], {})


LIST_METHODS: dict[str, Method] = {
    "__reversed__": _builtin_reversed,
    "__init__": _list_init,
    "append": _list_append,
    "extend": _list_extend,
    "insert": _list_insert,
    "pop": _list_pop,
    "reverse": _list_reverse,
    "clear": _list_clear,
    "copy": _list_copy,
    "index": _sequence_index,
    "count": _sequence_count,
    "sort": _list_sort,
    "remove": _sequence_remove,
}
TUPLE_METHODS: dict[str, Method] = {"index": _sequence_index, "count": _sequence_count}


# ----- dict ------------------------------------------------------------------
def _dict_get(tx: Translator, d: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    items = dict_items(tx, d)
    key = _key(args[0])
    if key in items:
        return items[key]
    return args[1] if len(args) > 1 else _none()


def _dict_view(kind: str) -> Method:
    def view(tx: Translator, d: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
        dict_items(tx, d)  # a mapping capture can read, else Unsupported now
        return DictViewValue(d, kind, tx=tx)

    return view


_dict_keys, _dict_values, _dict_items = map(_dict_view, ("keys", "values", "items"))


def _is_mapping(value: Value) -> bool:
    """Whether dict(value) / d.update(value) read `value` as a mapping (it has keys()), not
    as pairs."""
    if not isinstance(value, PythonValue | ObjectValue):
        return False
    try:
        return hasattr(python_type_of(value), "keys")
    except Unsupported:
        return False


def _pair_items(tx: Translator, source: Value, base: type) -> dict[Any, Value]:
    """The (key, value) pairs of `source`, with the errors dict.update raises for an
    item that is not a pair."""
    items: dict[Any, Value] = {}
    for position, pair in enumerate(sequence_items(tx, source)):
        if isinstance(pair, PythonValue) and not hasattr(type(pair.obj), "__iter__"):
            raise _raised_like_python(lambda item=pair.obj: base().update([item]))
        parts = sequence_items(tx, pair)
        if len(parts) != 2:
            shaped = [(0, 0)] * position + [(0,) * len(parts)]
            raise _raised_like_python(lambda pairs=shaped: base().update(pairs))
        key, value = parts
        items[_key(key)] = value
    return items


def update_items(
    tx: Translator, base: type, call: str, args: list[Value], kwargs: dict[str, Value]
) -> dict[Any, Value]:
    """The items dict(*args, **kwargs) or d.update(*args, **kwargs) adds, in order: from a
    dict, a mapping (keys() and [key]) or an iterable of pairs, then the keywords.

    `base` is the builtin mapping type (dict, OrderedDict) whose errors are raised;
    `call` is "update" or "construct"."""
    from dynamo_capture.attributes import get_attr
    from dynamo_capture.calls import call as call_value
    from dynamo_capture.operations import get_item

    if len(args) > 1:
        fillers = [{}] * len(args)
        operation = (
            (lambda: base().update(*fillers)) if call == "update" else (lambda: base(*fillers))
        )
        raise _raised_like_python(operation)
    items: dict[Any, Value] = {}
    if args:
        source = args[0]
        if isinstance(source, DictValue) or (
            isinstance(source, PythonValue) and isinstance(source.obj, dict)
        ):
            items.update(dict_items(tx, source))
        elif _is_mapping(source):
            # a mapping that is not a dict (ChainMap, a user Mapping): keys() and
            # source[key], as dict() reads one
            for key in sequence_items(tx, call_value(tx, get_attr(tx, source, "keys"), [], {})):
                items[hashable_key(key)] = get_item(tx, source, key)
        else:
            items.update(_pair_items(tx, source, base))
    items.update(kwargs)
    return items


def _dict_update(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(d, "update")
    base = collections.OrderedDict if issubclass(d.cls, collections.OrderedDict) else dict
    d.items.update(update_items(tx, base, "update", args, kwargs))
    return _none()


def _dict_pop(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(d, "pop")
    key = _key(args[0])
    if key in d.items:
        return d.items.pop(key)
    if len(args) > 1:
        return args[1]
    from dynamo_capture.operations import missing_key

    raise missing_key(d, key)


def _dict_setdefault(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(d, "setdefault")
    key = _key(args[0])
    if key not in d.items:
        d.items[key] = args[1] if len(args) > 1 else _none()
    return d.items[key]


def _dict_popitem(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(d, "popitem")
    if not d.items:
        empty = collections.OrderedDict if issubclass(d.cls, collections.OrderedDict) else dict
        raise _raised_like_python(empty().popitem)
    last = args[0] if args else kwargs.get("last", PythonValue(True))
    if (args or kwargs) and not issubclass(d.cls, collections.OrderedDict):
        raise Unsupported("dict.popitem() takes no arguments")
    if as_constant(last):
        key, value = d.items.popitem()
    else:  # OrderedDict.popitem(last=False): the first item
        key = next(iter(d.items))
        value = d.items.pop(key)
    return TupleValue([key_value(key), value])


def _ordered_dict_move_to_end(
    tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """OrderedDict.move_to_end(key, last=True): the key's item moved last (or first)."""
    if not (isinstance(d, DictValue) and issubclass(d.cls, collections.OrderedDict)):
        raise Unsupported(f"move_to_end on a {python_type_of(d).__name__}")
    _mutable(d, "move_to_end")
    key = _key(args[0])
    last = as_constant(args[1] if len(args) > 1 else kwargs.get("last", PythonValue(True)))
    if key not in d.items:
        raise _raised_like_python(lambda: collections.OrderedDict().move_to_end(key))
    value = d.items.pop(key)
    if last:
        d.items[key] = value
    else:
        rest = dict(d.items)
        d.items.clear()
        d.items[key] = value
        d.items.update(rest)
    return _none()


def _dict_copy(tx: Translator, d: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    kind = python_type_of(d)
    if kind in (collections.OrderedDict, collections.defaultdict):  # their copy keeps the type
        attrs = (
            {"default_factory": d.attrs["default_factory"]}
            if "default_factory" in getattr(d, "attrs", {})
            else {}
        )
        return DictValue(dict_items(tx, d), kind, attrs=attrs)
    return DictValue(dict_items(tx, d))


def _dict_clear(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(d, "clear")
    d.items.clear()
    return _none()


def _dict_contains(tx: Translator, d: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return PythonValue(_key(args[0]) in dict_items(tx, d))


def _dict_setitem(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(d, "__setitem__")
    d.items[_key(args[0])] = args[1]
    return _none()


def _dict_delitem(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(d, "__delitem__")
    d.items.pop(_key(args[0]), None)
    return _none()


def _dict_init(tx: Translator, d: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(d, "__init__")
    return _dict_update(tx, d, args, kwargs)


def _dict_len(tx: Translator, d: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    return PythonValue(len(dict_items(tx, d)))


def _dict_getitem(tx: Translator, d: Value, key: Value) -> Value:
    """`dict.__getitem__(d, key)`: of an outside subclass with its own __getitem__, the
    one item read (and guarded)."""
    current = side_effects.current(tx, d)
    if own_getitem_outside_dict(current):
        return builtin_dict_item(tx, current, _key(key))  # type: ignore[arg-type]
    return dict_items(tx, d)[_key(key)]


DICT_METHODS: dict[str, Method] = {
    "__reversed__": _builtin_reversed,
    "__setitem__": _dict_setitem,
    "__delitem__": _dict_delitem,
    "__init__": _dict_init,
    "__len__": _dict_len,
    "__iter__": lambda tx, d, a, k: IteratorValue([key_value(key) for key in dict_items(tx, d)]),
    "get": _dict_get,
    "keys": _dict_keys,
    "values": _dict_values,
    "items": _dict_items,
    "update": _dict_update,
    "pop": _dict_pop,
    "setdefault": _dict_setdefault,
    "popitem": _dict_popitem,
    "move_to_end": _ordered_dict_move_to_end,
    "copy": _dict_copy,
    "clear": _dict_clear,
    "__contains__": _dict_contains,
    "__getitem__": lambda tx, d, a, k: _dict_getitem(tx, d, a[0]),
}


# ----- set -------------------------------------------------------------------
def _set_add(tx: Translator, s: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(s, "add")
    s.items.add(_key(args[0]))
    return _none()


def _set_update(tx: Translator, s: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(s, "update")
    for other in args:
        s.items.update(_key(item) for item in sequence_items(tx, other))
    return _none()


def _set_discard(tx: Translator, s: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(s, "discard")
    s.items.discard(_key(args[0]))
    return _none()


def _set_remove(tx: Translator, s: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(s, "remove")
    key = _key(args[0])
    if key not in s.items:
        if isinstance(key, IdentityKey):
            raise Unsupported("set.remove() of a missing tensor or object raises KeyError")
        raise raised_by_python(KeyError(key))
    s.items.remove(key)
    return _none()


def _set_pop(tx: Translator, s: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """set.pop(): the first item in iteration order, as CPython pops a set of constants.

    A set holding items compared by identity (tensors) is iterated in an order eager
    does not share (their hashes are addresses): Unsupported there."""
    _mutable(s, "pop")
    if args or kwargs:
        raise Unsupported("set.pop() takes no arguments")
    if any(isinstance(item, IdentityKey) for item in s.items):
        raise Unsupported("set.pop() of a set holding tensors or objects (an order by address)")
    if not s.items:
        from dynamo_capture.errors import ExceptionRaised

        raise ExceptionRaised(PythonValue(KeyError("pop from an empty set")))
    item = next(iter(s.items))
    s.items.remove(item)
    return key_value(item)


def _set_clear(tx: Translator, s: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    _mutable(s, "clear")
    s.items.clear()
    return _none()


def _set_in_place(name: str) -> Method:
    def update(tx: Translator, s: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
        _mutable(s, name)
        others = [{_key(item) for item in sequence_items(tx, other)} for other in args]
        getattr(s.items, name)(*others)
        return _none()

    return update


_SET_QUERIES = (
    "union", "intersection", "difference", "symmetric_difference", "issubset",
    "issuperset", "isdisjoint", "copy", "__contains__", "__len__",
)  # fmt: skip


def _set_query(name: str) -> Method:
    """A set method that reads the set and its arguments (constants) and makes a new value."""

    def query(tx: Translator, s: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if name in ("isdisjoint", "issuperset") and len(args) == 1 and not kwargs:
            return _set_stops_early(tx, s, name, args[0])
        others = [{_key(item) for item in sequence_items(tx, other)} for other in args]
        result = getattr(set(s.items), name)(*others)
        if isinstance(result, set):  # a subclass's set algebra makes its builtin base
            return SetValue(result, cls=frozenset if issubclass(s.cls, frozenset) else set)
        return PythonValue(result)

    return query


def _set_stops_early(tx: Translator, s: Any, name: str, other: Value) -> Value:
    """s.isdisjoint(other) / s.issuperset(other) as CPython reads an iterable: item by
    item, stopping at the first that decides (an item in s / one not in s), so a
    generator is not run past it."""
    from dynamo_capture.lazy_iterators import each_item

    mine = set(s.items)
    for item in each_item(tx, other):
        if (_key(item) in mine) == (name == "isdisjoint"):
            return PythonValue(False)
    return PythonValue(True)


SET_METHODS: dict[str, Method] = {
    "add": _set_add,
    "update": _set_update,
    "discard": _set_discard,
    "remove": _set_remove,
    "clear": _set_clear,
    "pop": _set_pop,
    **{
        name: _set_in_place(name)
        for name in ("difference_update", "intersection_update", "symmetric_difference_update")
    },
    **{name: _set_query(name) for name in _SET_QUERIES},
}


# ----- contexts and iterators ------------------------------------------------
def enter_context(tx: Translator, context: ContextValue) -> Value:
    """ctx.__enter__(): change the mode now and record the change in the graph."""
    if context.kind == "generator":
        from dynamo_capture.generator_contexts import enter_generator

        return enter_generator(tx, context)
    if context.kind == "grad":
        if context.saved is None:
            context.saved = torch.is_grad_enabled()
            set_grad_mode(tx, context.args[0])
        elif torch.is_grad_enabled() != context.args[0]:
            set_grad_mode(tx, context.args[0])  # set_grad_enabled's __enter__ sets its mode
        return _none()
    if context.kind == "null":
        return context.args[0] if context.args else _none()
    if context.kind == "torch_function":
        tx.ctx.torch_function_disabled += 1
        if context.args[0] is torch._C.DisableTorchFunction:
            tx.ctx.torch_function_all_disabled += 1
        return _none()
    if context.kind == "autocast":
        node_args = _autocast_args(context)
        ctx_node = tx.ctx.graph.call_function(torch.amp.autocast_mode._enter_autocast, node_args)
        real = torch.amp.autocast_mode._enter_autocast(*node_args)
        context.saved = (ctx_node, real)
        tx.ctx.open_autocasts.append(real)
        return _none()
    if context.kind == "inference":
        mode = context.args[0]
        ctx_node = tx.ctx.graph.call_function(
            torch.autograd.grad_mode._enter_inference_mode, (mode,)
        )
        real = torch.autograd.grad_mode._enter_inference_mode(mode)
        context.saved = (ctx_node, real)
        tx.ctx.open_inference_modes.append(real)
        return _none()
    return _none()


def exit_context(tx: Translator, context: ContextValue, exception: Value | None = None) -> Value:
    """ctx.__exit__(...): restore the mode in capture and in the graph.

    `exception` is the exception leaving the block, if any; only a generator's context
    can suppress it (the others return None: it propagates)."""
    if exception is not None and isinstance(exception, PythonValue) and exception.obj is None:
        exception = None
    if context.kind == "generator":
        from dynamo_capture.generator_contexts import exit_generator

        return exit_generator(tx, context, exception)
    if context.kind == "grad":
        set_grad_mode(tx, context.saved)
        context.saved = None
    elif context.kind == "autocast":
        ctx_node, real = context.saved
        tx.ctx.graph.call_function(torch.amp.autocast_mode._exit_autocast, (ctx_node,))
        torch.amp.autocast_mode._exit_autocast(real)
        tx.ctx.open_autocasts.remove(real)
    elif context.kind == "inference":
        ctx_node, real = context.saved
        tx.ctx.graph.call_function(torch.autograd.grad_mode._exit_inference_mode, (ctx_node,))
        torch.autograd.grad_mode._exit_inference_mode(real)
        tx.ctx.open_inference_modes.remove(real)
    elif context.kind == "torch_function":
        tx.ctx.torch_function_disabled -= 1
        if context.args[0] is torch._C.DisableTorchFunction:
            tx.ctx.torch_function_all_disabled -= 1
    return PythonValue(None)


def known_context(obj: Any) -> ContextValue | None:
    """The ContextValue for a real torch context object (one a torch decorator made for
    its call: `@torch.no_grad()`, `@torch.inference_mode()`; an autocast object, made
    anywhere); None for other objects."""
    if type(obj) in (torch.no_grad, torch.enable_grad):
        return ContextValue("grad", (type(obj) is torch.enable_grad,))
    if type(obj) is torch.inference_mode:
        return ContextValue("inference", (bool(obj.mode),))
    if isinstance(obj, torch.autocast) and type(obj).__module__.startswith("torch."):
        return autocast_context(obj)  # torch's own subclasses (torch.cpu.amp.autocast)
    return None


# context objects a compiled frame made and kept in a local across a break
_KEPT_CONTEXTS: weakref.WeakSet[Any] = weakref.WeakSet()


def kept_context(context: Any) -> Any:
    """Mark a context object made again for the part after a break (capture.OutputPlan):
    the resume part enters it as one made in its frame (guarded by its settings, not by
    its identity), as torch.compile enters the one it makes again there."""
    _KEPT_CONTEXTS.add(context)
    return context


def kept_grad_context(mode: bool, previous: bool) -> torch.set_grad_enabled:
    """A `torch.set_grad_enabled(mode)` the frame made (which set the mode then) and kept
    in a local across a break: made again without setting the mode a second time, with
    the mode it restores."""
    kept = object.__new__(torch.set_grad_enabled)
    kept.prev, kept.mode = previous, mode
    return kept_context(kept)


def outside_context(tx: Translator, manager: PythonValue) -> ContextValue | None:
    """The ContextValue for a context object from outside the frame (a global, an
    argument, a local an earlier part kept, the one a decorator holds) that torch.compile
    also enters by its settings; None for the others (a break at their `with`).

        torch.autocast (and torch's subclasses)   its settings; guarded by identity
          (by its settings where the frame made it before a break: kept_context)
        torch.set_grad_enabled(mode) the frame    mode and the mode it restores; guarded
          made before a break (kept_grad_context)
        contextlib.nullcontext()                  guarded by type (no enter_result)
    """
    from dynamo_capture.sources import AttrSource

    obj, source = manager.obj, manager.source
    if isinstance(obj, torch.autocast) and known_context(obj) is not None:
        if obj in _KEPT_CONTEXTS:
            tx.ctx.guards.type_match(source, obj)
            for name in ("device", "fast_dtype", "_enabled", "_cache_enabled"):
                tx.ctx.guards.equals_match(AttrSource(source, name), getattr(obj, name))
        else:
            tx.ctx.guards.id_match(source, obj)
        return autocast_context(obj)
    if type(obj) is torch.set_grad_enabled and obj in _KEPT_CONTEXTS:
        tx.ctx.guards.type_match(source, obj)
        tx.ctx.guards.equals_match(AttrSource(source, "mode"), obj.mode)
        tx.ctx.guards.equals_match(AttrSource(source, "prev"), obj.prev)
        return ContextValue("grad", (obj.mode,), {"set_on_construction": True}, saved=obj.prev)
    if type(obj) is contextlib.nullcontext and obj.enter_result is None:
        tx.ctx.guards.type_match(source, obj)
        tx.ctx.guards.id_match(AttrSource(source, "enter_result"), None)
        return ContextValue("null", (PythonValue(None),))
    return None


def context_factory(context: ContextValue) -> tuple[Any, tuple[Any, ...]] | None:
    """(callable, args) that make a fresh real copy of `context`, or None for other kinds."""
    if context.kind == "grad":
        return (torch.enable_grad if context.args[0] else torch.no_grad), ()
    if context.kind == "autocast":
        return torch.autocast, _autocast_args(context)
    if context.kind == "null":
        return contextlib.nullcontext, ()
    if context.kind == "inference":
        return torch.inference_mode, context.args
    if context.kind == "torch_function":  # DisableTorchFunction(Subclass)
        return context.args[0], ()
    if context.kind == "generator" and context.args:  # generator_contexts.REENTERABLE
        return context.args
    return None


def set_grad_mode(tx: Translator, mode: bool) -> torch.fx.Node:
    """Set the grad mode now and in the graph."""
    node = tx.ctx.graph.call_function(torch._C._set_grad_enabled, (mode,))
    torch._C._set_grad_enabled(mode)
    return node


def autocast_context(real: torch.autocast) -> ContextValue:
    """The ContextValue of a real autocast object (made in the frame or outside it, of
    torch.autocast or a subclass): its device, dtype, enabled and cache flags, as
    `_enter_autocast` takes them."""
    settings = (real.device, real.fast_dtype, real._enabled, real._cache_enabled)
    return ContextValue("autocast", settings)


def _autocast_args(context: ContextValue) -> tuple[Any, ...]:
    return context.args


def _context_method(tx: Translator, context: Any, name: str, args: list[Value]) -> Value:
    if name == "__enter__":
        return enter_context(tx, context)
    if name == "__exit__":
        return exit_context(tx, context, args[1] if len(args) == 3 else None)
    raise Unsupported(f"method {name} of a context manager")


def _iterator_next(tx: Translator, iterator: IteratorValue, args: list[Value]) -> Value:
    from dynamo_capture.lazy_iterators import generator_steps, next_item

    steps = generator_steps(iterator) if iterator.kind == "generator" else None
    if steps is not None:
        steps.returned = None
    item = next_item(tx, iterator)
    if item is not None:
        return item
    if args:
        return args[0]
    from dynamo_capture.errors import ExceptionRaised

    returned = steps.returned if steps is not None else None
    if returned is None or (isinstance(returned, PythonValue) and returned.obj is None):
        raise ExceptionRaised(PythonValue(StopIteration()))
    try:  # this step finished the generator: its return value is the StopIteration's
        value = as_constant(returned)
    except NotConstant:
        raise Unsupported("a generator's return value that is not a constant") from None
    raise ExceptionRaised(PythonValue(StopIteration(value)))


def _generator_method(
    tx: Translator, generator: IteratorValue, name: str, args: list[Value], kwargs: Any
) -> Value:
    """A method of a generator made in the frame, whose body capture steps as it is read:
    `send(value)` resumes it with the value at its paused yield, `close()` ends it (one
    paused inside its body has GeneratorExit raised at its yield)."""
    from dynamo_capture.errors import ExceptionRaised, NeedsEagerFrame
    from dynamo_capture.lazy_iterators import generator_steps

    steps = generator_steps(generator)
    if name == "send" and len(args) == 1 and not kwargs:
        sent = args[0]
        is_none = isinstance(sent, PythonValue) and sent.obj is None
        if steps is not None and steps.started and not steps.child.done:
            steps.send(sent)
        elif steps is not None and not steps.started and not is_none:
            error = TypeError("can't send non-None value to a just-started generator")
            raise ExceptionRaised(PythonValue(error))
        return _iterator_next(tx, generator, [])
    if name == "close" and not args and not kwargs:
        if steps is not None:
            _close_generator(steps)
        generator.produce = None
        return _none()
    raise NeedsEagerFrame(f"{name}() on a generator made in the frame")


def _close_generator(steps: Any) -> None:
    """generator.close(): GeneratorExit raised at a paused yield; the body must not yield."""
    from dynamo_capture.errors import ExceptionRaised

    child = steps.child
    if not steps.started or child.done:
        child.done = True
        return
    child.pending = ExceptionRaised(PythonValue(GeneratorExit()))
    try:
        child.run_until_yield()
    except ExceptionRaised as raised:
        child.done = True
        if isinstance(raised.value.obj, GeneratorExit | StopIteration):
            return
        raise
    child.done = True
    if child.suspended:
        error = RuntimeError("generator ignored GeneratorExit")
        raise ExceptionRaised(PythonValue(error))


# ----- the builtin dunders, called past a subclass's own (super().__getitem__(i)) ------
def _builtin_delitem(tx: Translator, container: Value, args: list[Value], kwargs: Any) -> Value:
    if not (isinstance(container, ListValue | DictValue) and container.source is None):
        raise Unsupported("del container[index] on a container outside the frame (a side effect)")
    del container.items[as_constant(args[0])]
    return _none()


def _builtin_setitem(tx: Translator, container: Value, args: list[Value], kwargs: Any) -> Value:
    builtin_set_item(tx, container, args[0], args[1])
    return _none()


def _operator_dunder(fn: Callable[..., Any], counts: bool = False) -> Method:
    """`container.__add__(other)` and the like, as the operator on the two: called with
    an operand of the container's own builtin kind (or an int count, for repetition;
    any iterable, for a list's `__iadd__`); others return NotImplemented or raise
    eagerly, which capture does not model."""
    from dynamo_capture.operations import binary_op, operator_dunders, user_override

    def builtin_operator(side: Value) -> bool:
        """The operator on `side` is its builtin type's: a builtin, or a container
        subclass made in the frame that defines none of the operator's methods."""
        if python_type_of(side).__module__ in ("builtins", "collections"):
            return True
        return isinstance(side, TupleValue | ListValue | DictValue | SetValue) and not any(
            user_override(side, name) for name in operator_dunders(fn)
        )

    def method(tx: Translator, container: Value, args: list[Value], kwargs: Any) -> Value:
        if kwargs or len(args) != 1:
            raise Unsupported(f"{fn.__name__} dunder with unknown arguments")
        other = args[0]
        kind, other_kind = _builtin_kind(container), _builtin_kind(other)
        if counts:
            ok = isinstance(other, PythonValue) and type(other.obj) in (int, bool)
        elif fn is operator.iadd and kind is list:
            ok = other_kind is not None
        else:
            ok = kind is not None and kind is other_kind
        # NOTE: a subclass's own operators (super().__add__ from one) are not modelled:
        # the operator would call them again
        if not (ok and builtin_operator(container) and builtin_operator(other)):
            raise Unsupported(f"{fn.__name__} dunder of a {python_type_of(container).__name__}")
        return binary_op(tx, fn, container, other)

    return method


def _builtin_kind(value: Value) -> type | None:
    """The builtin container type `value` is an instance of (sets and frozensets alike)."""
    try:
        kind = python_type_of(value)
    except Unsupported:
        return None
    for base in (list, tuple, dict):
        if issubclass(kind, base):
            return base
    return set if issubclass(kind, set | frozenset) else None


CONTAINER_DUNDERS: dict[str, Method] = {
    **{
        name: _operator_dunder(fn)
        for name, fn in (
            ("__add__", operator.add),
            ("__iadd__", operator.iadd),
            ("__or__", operator.or_),
            ("__and__", operator.and_),
            ("__sub__", operator.sub),
            ("__xor__", operator.xor),
            ("__ior__", operator.ior),
            ("__iand__", operator.iand),
            ("__isub__", operator.isub),
            ("__ixor__", operator.ixor),
            ("__eq__", operator.eq),
            ("__ne__", operator.ne),
            ("__lt__", operator.lt),
            ("__le__", operator.le),
            ("__gt__", operator.gt),
            ("__ge__", operator.ge),
        )
    },  # fmt: skip
    "__mul__": _operator_dunder(operator.mul, counts=True),
    "__rmul__": _operator_dunder(operator.mul, counts=True),
    "__imul__": _operator_dunder(operator.imul, counts=True),
    "__getitem__": lambda tx, c, a, k: builtin_get_item(tx, c, a[0]),
    "__setitem__": _builtin_setitem,
    "__delitem__": _builtin_delitem,
    "__len__": lambda tx, c, a, k: PythonValue(len(builtin_items(tx, c))),
    "__contains__": lambda tx, c, a, k: PythonValue(builtin_contains(tx, a[0], c)),
    "__iter__": lambda tx, c, a, k: IteratorValue(builtin_items(tx, c)),
}


# ----- dispatch ----------------------------------------------------------
def call_method(
    tx: Translator, receiver: Value, name: str, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """receiver.name(*args, **kwargs) for a receiver capture interprets."""
    if tx.ctx.reading_ahead is not None and side_effects.mutates(receiver, name):
        from dynamo_capture.lazy_iterators import check_side_effect

        check_side_effect(tx, f"{name}() on a {type(receiver).__name__}")
    receiver = side_effects.for_write(tx, receiver, name)
    if isinstance(receiver, TensorValue):
        from dynamo_capture.torch_calls import call_tensor_method

        return call_tensor_method(tx, receiver, name, args, kwargs)
    if isinstance(receiver, ContextValue):
        return _context_method(tx, receiver, name, args)
    if isinstance(receiver, IteratorValue) and name == "__next__":
        return _iterator_next(tx, receiver, args)
    if isinstance(receiver, IteratorValue) and receiver.kind == "generator":
        return _generator_method(tx, receiver, name, args, kwargs)
    if isinstance(receiver, DictViewValue):
        from dynamo_capture.dict_views import call_view_method

        return call_view_method(tx, receiver, name, args, kwargs)
    if name in _SUBCLASS_VIEWS and _outside_sequence_subclass(receiver):
        check_method_arguments(python_type_of(receiver), name, len(args), tuple(kwargs))
        return _subclass_view(tx, receiver, name, args)
    if name == "__getitem__" and _outside_dict_subclass(receiver) and len(args) == 1:
        return _dict_subclass_item(tx, receiver, args[0])
    if name in CONTAINER_DUNDERS and isinstance(
        receiver, TupleValue | ListValue | DictValue | SetValue
    ):
        check_method_arguments(python_type_of(receiver), name, len(args), tuple(kwargs))
        return CONTAINER_DUNDERS[name](tx, receiver, args, kwargs)
    if (
        isinstance(receiver, PythonValue)
        and isinstance(receiver.obj, types.MappingProxyType)
        and receiver.source is None
        and not any(isinstance(item, torch.Tensor) for item in receiver.obj.values())
    ):
        # a read-only mapping made while capturing (a Signature's parameters): its items now
        snapshot = DictValue({key: PythonValue(item) for key, item in receiver.obj.items()})
        return call_method(tx, snapshot, name, args, kwargs)
    table = _table_for(receiver)
    if table is not None and name in table:
        check_method_arguments(python_type_of(receiver), name, len(args), tuple(kwargs))
        return table[name](tx, receiver, args, kwargs)
    if name == "__iter__" and _builtin_iterable(receiver):
        # `s.__iter__()` of a str, tuple, range, ...: the iterator `iter(s)` gives (a
        # folded call would make a real iterator, whose `next()` capture cannot replay)
        check_method_arguments(python_type_of(receiver), name, len(args), tuple(kwargs))
        from dynamo_capture.operations import get_iter

        return get_iter(tx, receiver)
    return _fold_method(tx, receiver, name, args, kwargs)


_BUILTIN_ITERABLES = (str, bytes, tuple, list, range, frozenset, set, dict)


def _builtin_iterable(receiver: Value) -> bool:
    """A Python value of a builtin iterable type itself (not a subclass)."""
    return isinstance(receiver, PythonValue) and type(receiver.obj) in _BUILTIN_ITERABLES


_SUBCLASS_VIEWS = ("__len__", "__getitem__", "__iter__")


def _outside_sequence_subclass(receiver: Value) -> bool:
    """A list or tuple subclass instance from outside the frame (an argument)."""
    return (
        isinstance(receiver, PythonValue)
        and receiver.source is not None
        and isinstance(receiver.obj, list | tuple)
        and type(receiver.obj) not in (list, tuple)
        and not hasattr(receiver.obj, "_fields")  # namedtuples are read as tuples elsewhere
    )


def _outside_dict_subclass(receiver: Value) -> bool:
    """A user dict subclass instance from outside the frame (a global, an argument)."""
    return (
        isinstance(receiver, PythonValue)
        and receiver.source is not None
        and isinstance(receiver.obj, dict)
        and type(receiver.obj).__module__ not in ("builtins", "collections")
    )


def _dict_subclass_item(tx: Translator, receiver: PythonValue, key_value: Value) -> Value:
    """`super().__getitem__(key)` (or `dict.__getitem__(obj, key)`) of a dict subclass
    from outside the frame whose own `__getitem__` is in the way: dict's item, read past
    the subclass's methods and guarded there (transformers' ClassInstantier)."""
    from dynamo_capture.sources import BuiltinViewSource

    try:
        key = as_constant(key_value)
    except NotConstant:
        raise Unsupported("dict.__getitem__ with a key known only when it runs") from None
    obj = receiver.obj
    if type(key) not in (str, int) or key not in dict.keys(obj):
        raise Unsupported(f"dict.__getitem__ of a {type(obj).__name__} with key {key!r}")
    view = BuiltinViewSource(receiver.source, "dict", key)
    return tx.ctx.wrap(dict.__getitem__(obj, key), view)


def _subclass_view(tx: Translator, receiver: PythonValue, name: str, args: list[Value]) -> Value:
    """`super().__len__()`, `super().__getitem__(i)`, `super().__iter__()` of a list or
    tuple subclass from outside the frame: the builtin's view of its items (read past
    the subclass's own methods), guarded on the builtin length and items."""
    from dynamo_capture.sources import BuiltinViewSource

    obj, source = receiver.obj, receiver.source
    kind = list if isinstance(obj, list) else tuple
    length = kind.__len__(obj)
    tx.ctx.guards.equals_match(BuiltinViewSource(source, kind.__name__), length)
    if name == "__len__":
        return PythonValue(length)

    def item(index: int) -> Value:
        view = BuiltinViewSource(source, kind.__name__, index)
        return tx.ctx.wrap(kind.__getitem__(obj, index), view)

    items = [item(index) for index in range(length)]
    if name == "__iter__":
        return IteratorValue(items)
    try:
        key = as_constant(args[0])
    except NotConstant:
        raise Unsupported(
            f"{kind.__name__}.__getitem__ with an index known only when it runs"
        ) from None
    if isinstance(key, slice):
        picked = items[key]
        return ListValue(picked) if kind is list else TupleValue(picked)
    try:
        return items[operator.index(key)]
    except (IndexError, TypeError) as error:
        raise raised_by_python(error) from None


def _table_for(receiver: Value) -> dict[str, Method] | None:
    kind = python_type_of(receiver)
    from dynamo_capture.tensor_hooks import PendingHookHandle, remove_pending_handle

    if isinstance(receiver, PythonValue) and isinstance(receiver.obj, PendingHookHandle):
        return {"remove": remove_pending_handle}
    if isinstance(receiver, ListValue) and receiver.cls is collections.deque:
        from dynamo_capture.deques import DEQUE_METHODS

        return {
            **TUPLE_METHODS,
            **DEQUE_METHODS,
            "remove": _sequence_remove,
            "__reversed__": _builtin_reversed,
        }
    if isinstance(receiver, ListValue) or (isinstance(receiver, PythonValue) and kind is list):
        return LIST_METHODS
    if issubclass(kind, dict):
        return DICT_METHODS
    if isinstance(receiver, SetValue):
        if issubclass(receiver.cls, frozenset):  # no methods that change it
            return {name: SET_METHODS[name] for name in _SET_QUERIES}
        return SET_METHODS
    if issubclass(kind, tuple):
        return TUPLE_METHODS
    return None


def fold_environ_read(tx: Translator, environ: PythonValue, name: str, args: list[Value]) -> Value:
    """`os.environ.get(key)`, `os.environ[key]`, `key in os.environ`: read now, the
    variable guarded (a later change of it recompiles)."""
    if name not in ("get", "__getitem__", "__contains__"):
        raise Unsupported(f"os.environ.{name} inside captured code")
    try:
        real_args = [as_constant(a) for a in args]
    except NotConstant:
        raise Unsupported(f"os.environ.{name} of a value known only when it runs") from None
    if real_args and isinstance(real_args[0], str):
        # the variable is read now: a later change of it must recompile
        tx.ctx.guards.mapping_item(
            environ.obj, "os.environ", real_args[0], presence_only=name == "__contains__"
        )
    try:
        result = getattr(environ.obj, name)(*real_args)
    except (KeyError, TypeError) as error:
        from dynamo_capture.errors import raised_by_python

        raise raised_by_python(error) from None
    return PythonValue(result)


def _size_numel(size: torch.Size) -> Any:
    """`torch.Size.numel()` as the product of its sizes: symbolic sizes stay symbolic (the
    C method reads each as an int, which specializes them)."""
    return functools.reduce(operator.mul, size, 1)


# torch.Size methods computed in Python on the sizes, symbolic ones included
_SIZE_METHODS: dict[str, Callable[..., Any]] = {"numel": _size_numel}


def _fold_method(
    tx: Translator, receiver: Value, name: str, args: list[Value], kwargs: dict[str, Value]
) -> Value:
    """A method of a constant (str.format, tuple.count, ...) on constants: computed now."""
    if isinstance(receiver, PythonValue) and isinstance(receiver.obj, os._Environ):
        return fold_environ_read(tx, receiver, name, args)
    try:
        real = as_constant(receiver)
        # an iterator argument (`", ".join(name for name in names)`) is read whole, as eagerly
        real_args = [
            [as_constant(item) for item in sequence_items(tx, a)]
            if isinstance(a, IteratorValue) and a.endless is None
            else as_constant(a)
            for a in args
        ]
        real_kwargs = {k: as_constant(v) for k, v in kwargs.items()}
    except NotConstant:
        error = Unsupported(
            f"method {python_type_of(receiver).__name__}.{name} on values known only when it runs"
        )
        error.eager_call = runs_eagerly_on_its_own(receiver)
        raise error from None
    reads_only = name in ("copy", "index", "count") or (type(real) is set and name in _SET_QUERIES)
    if isinstance(real, list | set | dict | collections.deque | bytearray) and not reads_only:
        raise Unsupported(f"{type(real).__name__}.{name} on a container outside the frame")
    method = _SIZE_METHODS.get(name) if type(real) is torch.Size else None
    method = functools.partial(method, real) if method is not None else getattr(real, name)
    try:
        result = method(*real_args, **real_kwargs)
    except Exception as error:  # noqa: BLE001 - a method of a constant raises as eagerly
        if type(real).__module__ != "builtins":
            raise  # another object's method: capture fails, the frame runs eagerly
        raise raised_by_python(error) from None
    # `"{}".format(n)` of a symbolic size: made again from its value (the text names it)
    where = f"{type(real).__name__}.{name} of a symbolic number"
    return PythonValue(
        recomputed_from_values(
            lambda receiver, *a, **k: getattr(receiver, name)(*a, **k),
            (real, *real_args),
            real_kwargs,
            result,
            where,
        )
    )


def truth_of(tx: Translator, value: Value) -> bool:
    return truth(tx, value)
