"""Writes to lists, deques, dicts and sets that exist outside the frame, replayed after the graph.

The first write to an outside list, dict or set (item assignment, append, update, add,
...) gives it a shadow: a ListValue / DictValue / SetValue holding its items, which the rest of
the capture reads and writes instead. After the graph runs, the entry function
rebuilds the real object's contents from the shadow, so eager's final state and
the object's identity are both kept.

Every read of a written object goes through one lookup in the capture's table:
`current(tx, value)` where a translator is at hand, `shadow_of(obj)` where none is
(folding a constant, a graph operation's arguments), which reads the capture that
`capture.capture_frame` entered with `reading_through(ctx)`.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dynamo_capture.errors import Unsupported
from dynamo_capture.values import DictValue, ListValue, PythonValue, SetValue, TensorValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "MUTATING_METHODS",
    "attribute_written",
    "current",
    "for_write",
    "reading_through",
    "shadow_of",
    "module_members_written",
    "mutates",
    "replay_statement",
]

MUTATING_METHODS: dict[type, frozenset[str]] = {
    list: frozenset(
        {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "__setitem__"}
    ),
    dict: frozenset({"update", "pop", "popitem", "setdefault", "clear", "__setitem__"}),
    collections.deque: frozenset(
        {"append", "appendleft", "extend", "extendleft", "pop", "popleft", "rotate", "clear",
         "reverse", "remove", "__setitem__"}
    ),
    set: frozenset(
        {"add", "update", "discard", "remove", "pop", "clear", "difference_update",
         "intersection_update", "symmetric_difference_update", "__ior__", "__iand__",
         "__isub__", "__ixor__"}
    ),
}  # fmt: skip


# dict subclasses whose shadow is a DictValue of that class: a defaultdict's factory
# (read from the real object) fills a missing key, an OrderedDict keeps move_to_end's order
_DICT_SUBCLASSES = (collections.defaultdict, collections.OrderedDict)
MUTATING_METHODS[collections.OrderedDict] = MUTATING_METHODS[dict] | {"move_to_end"}
MUTATING_METHODS[collections.defaultdict] = MUTATING_METHODS[dict]


# what a list subclass must leave to list for a shadow to stand for it: item access,
# the mutating methods (which the shadow runs as list's) and attribute handling
_LIST_PROTOCOL = frozenset(
    {
        "__getitem__", "__setitem__", "__delitem__", "__iter__", "__len__", "__contains__",
        "__reversed__", "__getattr__", "__getattribute__", "__setattr__", "__delattr__",
        "__iadd__", "__imul__", "__add__", "__mul__", "__eq__", "__bool__",
        "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
    }
)  # fmt: skip


def shadow_kind(obj: Any) -> type | None:
    """The container type whose MUTATING_METHODS apply to `obj` through a shadow, else
    None: its own type, or list for a user subclass of list that overrides none of
    list's item protocol or mutating methods (its own other methods are inlined on the
    shadow, which keeps its class)."""
    kind = type(obj)
    if kind in MUTATING_METHODS:
        return kind
    if isinstance(obj, list) and kind.__module__ != "builtins":
        own = set().union(*(vars(base) for base in kind.__mro__[: kind.__mro__.index(list)]))
        instance_dict = getattr(obj, "__dict__", None)
        if not own & _LIST_PROTOCOL and isinstance(instance_dict, dict) and not instance_dict:
            return list
    return None


def _shadowable(value: Value) -> bool:
    return isinstance(value, PythonValue) and shadow_kind(value.obj) is not None


def mutates(value: Value, method: str) -> bool:
    """Whether calling `method` on `value` changes a list, dict, deque or set (or a tensor
    in place: a method named with a trailing underscore)."""
    from dynamo_capture.operations import python_type_of

    if isinstance(value, TensorValue):
        return method.endswith("_") and not method.startswith("__")
    cls = python_type_of(value)
    return any(
        issubclass(cls, base) and method in names for base, names in MUTATING_METHODS.items()
    )


def current(tx: Translator, value: Value) -> Value:
    """The shadow of an outside list/dict that was already written to, else `value`."""
    if _shadowable(value):
        if type(value.obj) is dict and global_scope_written(tx, value.obj):  # type: ignore[attr-defined]
            # NOTE: the frame's `global` assignments into this dict (a module's globals,
            # read as `module.__dict__` or `fn.__globals__`) land only after the graph
            raise Unsupported("reading or writing a module's globals dict the frame assigned into")
        shadow = _written(tx.ctx, value.obj)  # type: ignore[attr-defined]
        if shadow is not None:
            return shadow
    return value


def global_scope_written(tx: Translator, scope: dict) -> bool:
    """Whether the frame assigned a global of `scope` (a module's globals dict) by
    STORE_GLOBAL or a module attribute write: its real dict gets them after the graph."""
    return any(key[0] == id(scope) for key in tx.ctx.global_writes)


# the captures running on this thread, innermost last (capture.capture_frame enters its
# own): `shadow_of` reads the innermost one's shadows
class _Reading(threading.local):
    def __init__(self) -> None:
        self.contexts: list[Any] = []


_reading = _Reading()


@contextlib.contextmanager
def reading_through(ctx: Any) -> Iterator[None]:
    """While capturing with `ctx`, `shadow_of` reads its shadows (for code that folds
    a value with no translator at hand: `operations.as_constant`)."""
    _reading.contexts.append(ctx)
    try:
        yield
    finally:
        _reading.contexts.pop()


def shadow_of(obj: Any) -> Value | None:
    """The shadow of an outside list, dict, deque or set the running capture wrote, else
    None: what folding the object must read (the real object holds the writes only after
    the graph)."""
    if not _reading.contexts or shadow_kind(obj) is None:
        return None
    return _written(_reading.contexts[-1], obj)


def _written(ctx: Any, obj: Any) -> Value | None:
    """The shadow `ctx` keeps of `obj`, counted as a read of a write, else None: the one
    lookup behind `current` (with a translator) and `shadow_of` (without)."""
    entry = ctx.shadows.get(id(obj))
    if entry is None or entry[0] is not obj:
        return None
    ctx.written_reads += 1
    return entry[2]


def attribute_written(obj: Any, name: str) -> bool:
    """Whether the running capture set or deleted attribute `name` of `obj` (kept in its
    log until the graph has run): folding the object would read it without the write."""
    if not _reading.contexts:
        return False
    entry = _reading.contexts[-1].attr_writes.get((id(obj), name))
    return entry is not None and entry[0] is obj


def module_members_written(tx: Translator, module: Any) -> DictValue | None:
    """The shadow of the table a module container keeps its items in (`_modules`, or a
    ParameterList's `_parameters`) where the frame wrote it (`add_module`, `append`, a
    ModuleList's `+`), else None. Reads of the container's items go through it: the
    real table holds them only after the graph."""
    import torch

    tables = ("_parameters",) if isinstance(module, torch.nn.ParameterList) else ("_modules",)
    if isinstance(module, torch.nn.ParameterDict):
        tables = ("_parameters",)
    for table in tables:
        entries = module.__dict__.get(table)
        entry = tx.ctx.shadows.get(id(entries)) if entries is not None else None
        if entry is not None:
            if not isinstance(entry[2], DictValue):
                raise Unsupported(f"reading a {type(module).__name__} after its {table} changed")
            return entry[2]
    return None


def for_write(tx: Translator, value: Value, method: str = "__setitem__") -> Value:
    """The value to write through: a (new) shadow for an outside list/dict, else `value`."""
    shadow = current(tx, value)
    if shadow is not value or not _shadowable(value):
        return shadow
    obj = value.obj  # type: ignore[attr-defined]
    if method not in MUTATING_METHODS[shadow_kind(obj)]:
        return value
    from dynamo_capture.operations import dict_items, sequence_items

    if isinstance(obj, list) and type(obj) is not list:
        # a plain list subclass: its (empty) instance dict guarded, so that attributes
        # read from the shadow are the class's
        from dynamo_capture.sources import AttrSource

        if value.source is None:
            return value
        tx.ctx.guards.dict_keys(AttrSource(value.source, "__dict__"), obj.__dict__)
        shadow = ListValue(sequence_items(tx, value), cls=type(obj))
    elif isinstance(obj, list):
        shadow = ListValue(sequence_items(tx, value))
    elif isinstance(obj, collections.deque):
        shadow = ListValue(sequence_items(tx, value), cls=collections.deque, maxlen=obj.maxlen)
    elif isinstance(obj, set):
        shadow = _set_shadow(value)
    elif isinstance(obj, _DICT_SUBCLASSES):
        shadow = _dict_subclass_shadow(tx, value, dict_items(tx, value))
    else:
        shadow = DictValue(dict_items(tx, value))
    if any(
        getattr(written, "__dict__", None) is obj for written, _, _ in tx.ctx.attr_writes.values()
    ):
        # NOTE: the dict is the attribute dict of an object whose attributes the frame also
        # set: the two replays would undo each other
        raise Unsupported("writing to the __dict__ of an object whose attributes were set")
    tx.ctx.shadows[id(obj)] = (obj, value.source, shadow)  # type: ignore[attr-defined]
    return shadow


def _dict_subclass_shadow(tx: Translator, value: PythonValue, items: dict) -> DictValue:
    obj = value.obj
    if not isinstance(obj, collections.defaultdict):
        return DictValue(items, type(obj))
    from dynamo_capture.sources import AttrSource

    source = AttrSource(value.source, "default_factory") if value.source is not None else None
    factory = tx.ctx.wrap(obj.default_factory, source)
    return DictValue(items, type(obj), attrs={"default_factory": factory})


def _set_shadow(value: PythonValue) -> SetValue:
    from dynamo_capture.output_graph import is_constant

    # NOTE: only a set whose items are constants (guarded item by item) is shadowed; one
    # holding tensors or modules would need each item's source to be rebuilt after
    if not all(is_constant(item) for item in value.obj):
        raise Unsupported("a write to a set outside the frame that holds non-constant items")
    return SetValue(set(value.obj))


def replay_statement(target: str, shadow: Value, expr: Any, key_expr: Any) -> str:
    """The statement that gives the real object `target` the shadow's contents."""
    if isinstance(shadow, ListValue) and shadow.cls is collections.deque:
        items = ", ".join(expr(item) for item in shadow.items)
        return f"___items = [{items}]; {target}.clear(); {target}.extend(___items)"
    if isinstance(shadow, ListValue):
        return f"{target}[:] = [{', '.join(expr(item) for item in shadow.items)}]"
    if isinstance(shadow, SetValue):
        inner = ", ".join(key_expr(item) for item in shadow.items)
        return f"___items = {{{inner}}}; {target}.clear(); {target}.update(___items)"
    assert isinstance(shadow, DictValue)
    inner = ", ".join(f"{key_expr(key)}: {expr(item)}" for key, item in shadow.items.items())
    return f"___items = {{{inner}}}; {target}.clear(); {target}.update(___items)"
