"""A guard on everything `copy.deepcopy(obj)` reads: the copy folded when compiling stays
valid while the object it was made from holds what it held then.

Capture folds `copy.deepcopy(config)` of an object from outside the frame (a config, a
dict of settings) into the copy it made while compiling. An identity guard on `config`
says nothing of its contents: `config.layers = 4` between calls keeps its identity. So
`contents_snapshot(obj)` walks the object graph as `copy.deepcopy` does, making the
same decisions on the same lookups, and records what it read:

- constants (None, bool, int, float, complex, str, bytes, range, dtype, device, layout,
  memory_format) by type and value (a float by `float.hex`, so -0.0 and nan compare);
- objects deepcopy keeps as they are (classes, functions, builtins, enum members) by
  identity;
- exact dicts, lists, tuples, sets and frozensets item by item (a dict's keys and a
  set's items must be constants or kept objects), in iteration order;
- instances of a class that deepcopy copies by the default protocol: no `__deepcopy__`
  found on the instance, not in `copyreg.dispatch_table`, `__reduce_ex__(4)` giving
  `copyreg.__newobj__`, `(cls,)` and the instance `__dict__` itself as state (so no
  `__getstate__`, `__reduce__`, slots or `__getnewargs__` of its own), `object.__new__`,
  and no `__setstate__` on a new instance: its class and its `__dict__`'s items;
- a mutable object (or tuple) met again as a back reference to its first visit, so the
  sharing and cycles the copy reproduces are part of what is compared.

Anything else (a tensor, a module, a class with its own `__deepcopy__` or
`__reduce_ex__`, a dict subclass) raises `UncopiableContents`: capture breaks the graph
there rather than fold a copy it cannot keep valid.

`DeepcopyContentsGuard` holds the snapshot taken when compiling and compares a fresh
one on each call. Where dict version tags work (dict_versions.py) it skips the walk of
contents while nothing it read could have changed: the root is the same object, no
walked dict (instance `__dict__`s included) was written, each walked list and set holds
the same objects in the same order; the protocol lookups on each instance (the ones
above, which a class's own `__getattribute__` may answer) are made again on every call,
as deepcopy makes them. Costs: the walk about 0.3 us an item; the fast check one C call
over the tags, a C loop a list, and a few lookups an instance.
"""

from __future__ import annotations

import copyreg
import enum
import math
import operator
import types
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from guards import dict_versions
from guards.errors import GuardsError
from guards.guard_kinds import Guard, GuardCode
from guards.stable_reads import _class_dict, _is_heap

__all__ = [
    "DeepcopyContentsGuard",
    "UncopiableContents",
    "contents_snapshot",
    "copied_objects",
    "kept_or_valued",
]


class UncopiableContents(GuardsError):
    """Something `copy.deepcopy` would copy that no snapshot can stand for (a tensor, a
    class with its own copy protocol, a dict subclass)."""


_VALUES = (
    type(None), bool, int, str, bytes, complex, range, type(Ellipsis), type(NotImplemented),
    torch.dtype, torch.device, torch.layout, torch.memory_format,
)  # fmt: skip
# kept as they are by deepcopy (copy._deepcopy_atomic), compared by identity
_KEPT = (types.FunctionType, types.BuiltinFunctionType)
_REF, _TUPLE, _LIST, _DICT, _SET, _OBJECT = "ref", "tuple", "list", "dict", "set", "object"
_object_getattribute = object.__getattribute__
_object_new = object.__new__


class _Same:
    """An object compared by identity inside a snapshot (a class with a metaclass
    `__eq__`, an enum member whose mixin compares by value)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return type(other) is _Same and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"<the object {self.obj!r}>"


def _leaf(x: Any) -> Any:
    """The record of a value deepcopy does not recurse into, or None for another value."""
    cls = type(x)
    if cls in _VALUES:
        return (cls, x)
    if cls is float:
        return (float, x.hex()) if math.isfinite(x) else (float, repr(x))
    if cls is type or cls in _KEPT:
        return x  # compared by identity (their `==` is identity)
    if isinstance(x, type) or (
        isinstance(x, enum.Enum) and getattr(cls, "__deepcopy__", None) is enum.Enum.__deepcopy__
    ):
        return _Same(x)
    return None


def _default_state(x: Any, cls: type) -> dict | None:
    """The state deepcopy copies for an instance of `cls` by the default protocol (its
    `__dict__`, or None when empty), mirroring copy.deepcopy's lookups; raises
    UncopiableContents where it would take another path."""
    name = cls.__qualname__
    if copyreg.dispatch_table.get(cls) is not None:
        raise UncopiableContents(f"{name} has a copyreg reducer")
    if getattr(x, "__deepcopy__", None) is not None:
        if isinstance(x, torch.Tensor):
            raise UncopiableContents(f"a tensor ({name}) among the contents")
        raise UncopiableContents(f"{name} defines __deepcopy__")
    reductor = getattr(x, "__reduce_ex__", None)
    reduced = reductor(4) if reductor is not None else None
    if not (
        type(reduced) is tuple
        and 2 <= len(reduced) <= 5
        and reduced[0] is copyreg.__newobj__
        and type(reduced[1]) is tuple
        and len(reduced[1]) == 1
        and reduced[1][0] is cls
        and all(item is None for item in reduced[3:])
    ):
        what = "a module" if isinstance(x, torch.nn.Module) else name
        raise UncopiableContents(f"{what} reduces otherwise than by its class and __dict__")
    state = reduced[2] if len(reduced) > 2 else None
    if state is not None and state is not _instance_dict(x):
        raise UncopiableContents(f"{name}'s state is not its __dict__ (__getstate__ or slots)")
    if getattr(cls, "__new__", None) is not _object_new:
        raise UncopiableContents(f"{name} has a __new__ of its own")
    if _new_instance_has_setstate(cls):
        raise UncopiableContents(f"{name} has a __setstate__")
    return state


def _instance_dict(x: Any) -> dict | None:
    try:
        return _object_getattribute(x, "__dict__")
    except AttributeError:
        return None


def _new_instance_has_setstate(cls: type) -> bool:
    """`hasattr(cls.__new__(cls), "__setstate__")`, which deepcopy asks of the copy before
    it fills it: found on the class where lookup is the default, else asked of a new
    instance (its class's `__getattribute__` or `__getattr__` answers)."""
    if cls.__getattribute__ is _object_getattribute and not hasattr(cls, "__getattr__"):
        return hasattr(cls, "__setstate__")
    try:
        return hasattr(_object_new(cls), "__setstate__")
    except TypeError:  # an abstract class: no instance either way
        return True


class _Walk:
    """One walk of an object graph as deepcopy walks it; `record(x)` gives its snapshot.
    Keeps what a fast check needs: the dicts, lists and sets walked and each instance."""

    __slots__ = ("seen", "dicts", "sequences", "instances")

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}
        self.dicts: list[dict] = []
        self.sequences: list[tuple[Any, tuple]] = []  # a list or set, and its items
        self.instances: list[tuple[Any, type, dict | None]] = []

    def record(self, x: Any) -> Any:
        leaf = _leaf(x)
        if leaf is not None:
            return leaf
        index = self.seen.get(id(x))
        if index is not None:
            return (_REF, index)
        self.seen[id(x)] = len(self.seen)
        cls = type(x)
        if cls is tuple:
            return (_TUPLE, tuple(map(self.record, x)))
        if cls is list:
            items = tuple(x)
            self.sequences.append((x, items))
            return (_LIST, tuple(map(self.record, items)))
        if cls is dict:
            self.dicts.append(x)
            return (_DICT, tuple((self._key(k), self.record(v)) for k, v in x.items()))
        if cls is set or cls is frozenset:
            items = tuple(x)
            if cls is set:
                self.sequences.append((x, items))
            return (_SET, cls, tuple(map(self._key, items)))
        state = _default_state(x, cls)
        instance_dict = _instance_dict(x)
        if instance_dict is not None and state is None:
            self.dicts.append(instance_dict)  # empty now: an attribute set later is seen
        self.instances.append((x, cls, instance_dict))
        return (_OBJECT, cls, None if state is None else self.record(state))

    def _key(self, key: Any) -> Any:
        if type(key) is tuple:
            return (_TUPLE, tuple(map(self._key, key)))
        leaf = _leaf(key)
        if leaf is None:
            raise UncopiableContents(
                f"a {type(key).__qualname__} as a dict key or set item (constants only)"
            )
        return leaf


def kept_or_valued(obj: Any) -> bool:
    """Whether deepcopy gives `obj` itself or an equal constant (no container or instance
    of its own in the copy): a constant, a class, a function, an enum member."""
    return _leaf(obj) is not None


def copied_objects(obj: Any) -> list[Any]:
    """The dicts, lists, sets and instances `copy.deepcopy(obj)` walks (`obj` included
    where it is one); raises UncopiableContents as `contents_snapshot` does."""
    walk = _Walk()
    walk.record(obj)
    return [
        *walk.dicts,
        *(seq for seq, _ in walk.sequences),
        *(instance for instance, _, _ in walk.instances),
    ]


def contents_snapshot(obj: Any) -> tuple:
    """What `copy.deepcopy(obj)` reads, as a comparable, hashable value; raises
    UncopiableContents for an object graph it cannot stand for.

        >>> contents_snapshot({"layers": [1, 2]}) == contents_snapshot({"layers": [1, 2]})
        True
    """
    return _Walk().record(obj)


def _default_lookup(cls: type) -> bool:
    """Whether attribute lookup on instances of `cls` is object's own (what it finds
    depends only on the class dicts along the MRO and the instance dict)."""
    return cls.__getattribute__ is _object_getattribute and not hasattr(cls, "__getattr__")


def _class_dicts(classes: Any, found: dict[int, dict]) -> list[dict]:
    """The dicts behind the heap classes along the MROs of `classes` and their metaclasses."""
    dicts = []
    for cls in classes:
        for klass in (*cls.__mro__, *type(cls).__mro__):
            if _is_heap(klass):
                dicts.append(_class_dict(klass, found))
    return dicts


def _lookups_unchanged(instances: tuple[tuple[Any, type, dict | None], ...]) -> bool:
    """deepcopy's lookups on instances whose class has its own `__getattribute__` or
    `__getattr__`, made again (that method answers them, from whatever it reads)."""
    for x, cls, instance_dict in instances:
        if type(x) is not cls or _instance_dict(x) is not instance_dict:
            return False
        try:
            _default_state(x, cls)
        except UncopiableContents:
            return False
    return True


def _same_objects(instances: tuple[tuple[Any, type, dict | None], ...]) -> bool:
    return all(type(x) is cls and _instance_dict(x) is d for x, cls, d in instances)


_mro = operator.attrgetter("__mro__")


class _ContentsState:
    """The last object graph a full walk found equal to the snapshot, for the fast check.

    Holds that graph's containers and instances (as the copy folded from it holds their
    contents) until a walk of another graph passes."""

    __slots__ = ("snapshot", "root", "tags", "sequences", "plain", "custom", "classes", "mros")

    def __init__(self, snapshot: tuple) -> None:
        self.snapshot = snapshot
        self.root: Any = None
        self.tags: dict_versions.VersionTags | None = None
        self.sequences: tuple[tuple[Any, tuple], ...] = ()
        self.plain: tuple[tuple[Any, type, dict | None], ...] = ()  # default lookup
        self.custom: tuple[tuple[Any, type, dict | None], ...] = ()  # their own lookup
        self.classes: tuple[type, ...] = ()
        self.mros: tuple[tuple[type, ...], ...] = ()

    def holds(self, obj: Any) -> bool:
        """Whether deepcopy of `obj` would read what it read when the snapshot was taken."""
        tags = self.tags
        if (
            tags is not None
            and obj is self.root
            and not tags.changed()
            and all(
                len(seq) == len(items) and all(map(operator.is_, seq, items))
                for seq, items in self.sequences
            )
            and all(map(operator.is_, map(_mro, self.classes), self.mros))
            and _same_objects(self.plain)
            and _lookups_unchanged(self.custom)
        ):
            return True
        self.tags = None
        walk = _Walk()
        try:
            if walk.record(obj) != self.snapshot:
                return False
        except UncopiableContents:
            return False
        self._remember(obj, walk)
        return True

    def _remember(self, obj: Any, walk: _Walk) -> None:
        """Keep what the fast check compares (where dict version tags work)."""
        if not dict_versions.AVAILABLE:
            return
        classes = tuple({id(cls): cls for _, cls, _ in walk.instances}.values())
        try:
            class_dicts = _class_dicts(classes, {})
        except LookupError:  # a class whose dict cannot be found: every call walks
            return
        dicts = [*walk.dicts, *class_dicts, copyreg.dispatch_table]
        self.root, self.sequences = obj, tuple(walk.sequences)
        self.plain = tuple(item for item in walk.instances if _default_lookup(item[1]))
        self.custom = tuple(item for item in walk.instances if not _default_lookup(item[1]))
        self.classes = tuple({id(k): k for c in classes for k in (c, type(c))}.values())
        self.mros = tuple(map(_mro, self.classes))
        # NOTE: the tags are read after the walk: a write during it (a class's own
        # `__getattribute__`) only makes the next call walk again.
        self.tags = dict_versions.VersionTags(dicts)
        self.tags.snapshot(self.tags.read())


@dataclass(frozen=True, slots=True)
class DeepcopyContentsGuard(Guard):
    """`copy.deepcopy(value)` would read what it read when compiling (`snapshot`): the
    copy folded then is the copy eager would make. Build with
    `DeepcopyContentsGuard.of(source, obj)` (raises UncopiableContents)."""

    snapshot: tuple
    state: _ContentsState | None = field(default=None, init=False, repr=False, compare=False)

    guard_type: ClassVar[str] = "DEEPCOPY_CONTENTS"
    rank: ClassVar[int] = 60  # a walk at worst: after the cheap guards

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", _ContentsState(self.snapshot))

    @classmethod
    def of(cls, source: Any, obj: Any) -> DeepcopyContentsGuard:
        return cls(source, contents_snapshot(obj))

    def failure(self, value: Any) -> str | None:
        try:
            now = contents_snapshot(value)
        except UncopiableContents as error:
            return f"{self.source.name!r} cannot be deep-copied as when compiled: {error}"
        if now == self.snapshot:
            return None
        return f"{self.source.name!r} holds other contents than when its deepcopy was compiled"

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        return [(self.rank, f"{code.const(self.state, 'contents')}.holds({names[0]})")]

    @property
    def value(self) -> Any:
        return self.snapshot
