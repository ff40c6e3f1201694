"""`copy.deepcopy` of an object from outside the frame: copied once while capturing, the
copy's contents guarded, the copy made a value of the frame.

A frame that deep-copies a config (`copy.deepcopy(config)`, transformers'
`get_text_config()` of an encoder-decoder config) gets, as eagerly, a new object each
call whose contents are those of the config at that call. Capture copies the object
while compiling and:

- guards what the copy read (`guards.DeepcopyContentsGuard` on the object's source:
  every attribute, item and nested object deepcopy walked, by value; their sharing), so
  an entry whose config changed between calls (same identity, new values) fails and the
  frame is captured again with the new contents;
- hands the frame the copy as values made in the frame (`ObjectValue`, `ListValue`,
  `DictValue`, ...), not as one capture-time object: the frame's writes to it are
  captured as writes to any object it made, and a copy that leaves the frame (returned,
  stored) is built anew on each call, as eager's is.

An object graph the guard cannot stand for (a tensor in it, a class with its own
`__deepcopy__` or `__reduce_ex__`, a dict subclass) breaks the graph at the call, which
then runs eagerly: never a copy folded that could go stale.

`deepcopy_frame_value` copies lists, dicts, tuples, sets and plain instances the frame
made (transformers' `to_dict()` copies a config copy's `__dict__`) into new values of
the frame, as deepcopy copies them; nothing to guard but the one outside object they
may hold.
"""

from __future__ import annotations

import copy
import copyreg
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture import side_effects
from dynamo_capture.errors import Unsupported
from dynamo_capture.operations import IdentityKey, hashable_key, python_type_of
from dynamo_capture.values import (
    DictValue,
    ListValue,
    ObjectValue,
    PythonValue,
    SetValue,
    TupleValue,
    Value,
)
from guards.deepcopy_contents import (
    UncopiableContents,
    contents_snapshot,
    copied_objects,
    kept_or_valued,
)

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "copies_by_default_protocol",
    "copy_outside_object",
    "deepcopy_frame_value",
    "deepcopy_outside_object",
]


def deepcopy_outside_object(tx: Translator, value: PythonValue) -> Value:
    """`copy.deepcopy(value)` for an object known at capture time (see the module)."""
    obj = value.obj
    try:
        if _written_by_the_frame(tx, copied_objects(obj)):
            # NOTE: the writes reach the real objects only after the graph: a copy made
            # now would miss them (eager's copy has them)
            raise Unsupported(
                "copy.deepcopy() of an outside object the frame wrote to (or into something "
                "it holds); needs a graph break"
            )
        if value.source is not None:
            tx.ctx.guards.deepcopy_contents(value.source, obj)
        else:  # made while capturing by a folded call: nothing to guard, but checked
            contents_snapshot(obj)
    except UncopiableContents as error:
        raise Unsupported(
            f"copy.deepcopy() of a {type(obj).__name__} whose contents capture cannot guard "
            f"({error}); needs a graph break"
        ) from None
    return _made_in_frame(copy.deepcopy(obj), {})


def deepcopy_frame_value(tx: Translator, value: Value) -> Value:
    """`copy.deepcopy(value)` of a list, dict, tuple, set or plain instance made in the
    frame (transformers' `to_dict()` copies a config's `__dict__`): new values of the frame
    holding copies, as deepcopy makes them; objects from outside the frame inside it are
    copied under their contents guard. A tensor of the graph, a key or set item held by
    identity, or an instance of a class with a copy protocol of its own breaks."""
    return _copy_of_value(tx, value, {})


def _copy_of_value(tx: Translator, value: Value, made: dict[int, Value]) -> Value:
    known = made.get(id(value))
    if known is not None:
        return known
    if isinstance(value, PythonValue):
        if kept_or_valued(value.obj):
            return value
        if isinstance(value.obj, torch.nn.Module | torch.Tensor):
            raise Unsupported("copy.deepcopy() of a module or tensor (needs a graph break)")
        if made.setdefault(_OUTSIDE, value) is not value:
            # NOTE: each is copied on its own: objects they share would not be shared
            raise Unsupported(
                "copy.deepcopy() of values made in the frame holding two objects from "
                "outside it (needs a graph break)"
            )
        result = deepcopy_outside_object(tx, value)
    elif isinstance(value, ListValue) and value.cls is list and not value.attrs:
        made[id(value)] = result = ListValue([])
        result.items.extend(_copy_of_value(tx, item, made) for item in value.items)
    elif isinstance(value, DictValue) and value.cls is dict and not value.attrs:
        _constant_keys(value.items)
        made[id(value)] = result = DictValue({})
        for key, item in value.items.items():
            result.items[key] = _copy_of_value(tx, item, made)
    elif isinstance(value, SetValue) and value.cls in (set, frozenset):
        _constant_keys(value.items)
        result = SetValue(set(value.items), cls=value.cls)
    elif isinstance(value, TupleValue) and value.cls is tuple:
        items = [_copy_of_value(tx, item, made) for item in value.items]
        kept = all(new is old for new, old in zip(items, value.items, strict=True))
        result = value if kept else TupleValue(items)  # deepcopy keeps an unchanged tuple
    elif isinstance(value, ObjectValue) and _default_protocol(value):
        made[id(value)] = result = ObjectValue(value.cls)
        result.attrs.update({k: _copy_of_value(tx, v, made) for k, v in value.attrs.items()})
    else:
        raise Unsupported(
            f"copy.deepcopy() of a {python_type_of(value).__name__} made or traced during "
            "capture (needs a graph break)"
        )
    made[id(value)] = result
    return result


_OUTSIDE = -1  # the key of `made` holding the one outside object met


def _constant_keys(keys: Any) -> None:
    """Dict keys and set items deepcopy copies: capture-time constants only."""
    if any(isinstance(key, IdentityKey) for key in keys):
        raise Unsupported("copy.deepcopy() of a dict or set keyed by objects (needs a graph break)")


def _default_protocol(value: ObjectValue) -> bool:
    return copies_by_default_protocol(value.cls, value.attrs, "__deepcopy__")


def copies_by_default_protocol(cls: type, attributes: Any, hook: str) -> bool:
    """Whether copy.copy (`hook` "__copy__") or deepcopy ("__deepcopy__") copies an
    instance of `cls` whose instance attributes are named `attributes` by the default
    protocol (`object.__new__`, then its `__dict__` copied), decided on its class:
    attribute lookup, reduction, state and construction all object's own."""
    own = (hook, "__reduce_ex__", "__reduce__", "__getstate__", "__setstate__")
    return (
        cls.__getattribute__ is object.__getattribute__
        and not hasattr(cls, "__getattr__")
        and copyreg.dispatch_table.get(cls) is None
        and getattr(cls, hook, None) is None
        and cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and getattr(cls, "__getstate__", object.__getstate__) is object.__getstate__
        and not hasattr(cls, "__setstate__")
        and cls.__new__ is object.__new__
        and not hasattr(cls, "__getnewargs_ex__")
        and not hasattr(cls, "__getnewargs__")
        and "__slots__" not in {name for klass in cls.__mro__ for name in vars(klass)}
        and not any(name in attributes for name in own)
    )


def copy_outside_object(tx: Translator, value: PythonValue) -> Value | None:
    """`copy.copy(value)` of a user object from outside the frame copied by the default
    protocol: a new instance of the frame holding its attributes, each read (and
    guarded) where it is, their names guarded (`obj.__dict__`'s keys); None for any
    other object (copy.copy's Python is traced then)."""
    from dynamo_capture.attributes import get_attr
    from dynamo_capture.sources import AttrSource

    obj, source = value.obj, value.source
    attributes = getattr(obj, "__dict__", None)
    if (
        source is None
        or type(attributes) is not dict
        or isinstance(obj, torch.nn.Module | torch.Tensor | type)
        or type(type(obj)) is not type
        or type(obj).__module__ == "builtins"
        or not copies_by_default_protocol(type(obj), attributes, "__copy__")
        or not all(type(name) is str for name in attributes)
        or any(_data_descriptor(type(obj), name) for name in attributes)
    ):
        return None
    if _written_by_the_frame(tx, [obj]):
        # NOTE: its attributes as the frame left them would be read one by one, but
        # the names guarded are those it has now
        raise Unsupported("copy.copy() of an outside object the frame wrote to")
    tx.ctx.guards.dict_keys(AttrSource(source, "__dict__"), attributes)
    return ObjectValue(type(obj), {name: get_attr(tx, value, name) for name in attributes})


def _data_descriptor(cls: type, name: str) -> bool:
    """Whether `cls` has a data descriptor `name` (a property): reading `obj.name` would
    give its value, not the `__dict__` entry a copy copies."""
    import inspect

    found = inspect.getattr_static(cls, name, None)
    return hasattr(type(found), "__set__") or hasattr(type(found), "__delete__")


def _written_by_the_frame(tx: Translator, objects: list[Any]) -> bool:
    """Whether the frame wrote an item or attribute of one of `objects` so far."""
    written = {id(target) for target, _, _ in tx.ctx.attr_writes.values()}
    return any(side_effects.shadow_of(o) is not None or id(o) in written for o in objects)


def _made_in_frame(obj: Any, made: dict[int, Value]) -> Value:
    """The value of the frame standing for `obj`, a copy no one else holds: its
    containers and instances as values made in the frame (one value for an object met
    twice), the rest (constants, classes, functions) as they are."""
    known = made.get(id(obj))
    if known is not None:
        return known
    cls = type(obj)
    if kept_or_valued(obj):
        return PythonValue(obj)
    if cls is list:
        made[id(obj)] = result = ListValue([])
        result.items.extend(_made_in_frame(item, made) for item in obj)
    elif cls is dict:
        made[id(obj)] = result = DictValue({})
        for key, item in obj.items():
            result.items[hashable_key(PythonValue(key))] = _made_in_frame(item, made)
    elif cls is set:
        result = SetValue({hashable_key(PythonValue(item)) for item in obj})
    elif cls is tuple:
        items = [_made_in_frame(item, made) for item in obj]
        if all(isinstance(item, PythonValue) for item in items):
            result = PythonValue(obj)  # deepcopy kept it (nothing in it was copied)
        else:
            result = TupleValue(items)
    elif cls is not frozenset:
        # an instance copied by the default protocol (the contents check said so)
        made[id(obj)] = result = ObjectValue(cls)
        try:
            instance_dict = object.__getattribute__(obj, "__dict__")
        except AttributeError:  # `object()`
            instance_dict = {}
        result.attrs.update({k: _made_in_frame(v, made) for k, v in instance_dict.items()})
    else:
        result = PythonValue(obj)
    made[id(obj)] = result
    return result
