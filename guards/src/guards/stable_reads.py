"""Stable reads: chains of a guard function that a full check reads once and later calls reuse.

Most guards of a model built from library code are chains rooted at a module
global, through classes, functions and their closures:

    sys.modules['m'].__dict__['LlamaModel'].forward.__closure__[1].cell_contents.__defaults__[3]

Each step is one of three kinds. A *stable* step gives the same object as long
as some dicts keep their CPython version tag (dict_versions.py) and a few cheap
facts hold; nothing else can change what it reads:

- a module global (`vars(module)[name]`): that dict;
- an item of an exact dict: that dict; of an exact tuple: nothing (immutable);
- a function's `__closure__` or `__globals__` (read-only slots); any `co_*` of a code
  object (immutable; `co_varnames` is a new, equal tuple on each read: the snapshot's
  stands for it);
- an attribute of a class whose metaclass is `type`, found in the dict of a class of
  its MRO as a plain function, a property or an object of a builtin type without
  `__get__`: the real dicts of the MRO's heap classes up to that one, and the MRO
  itself (assigning `__bases__` writes no dict; it is compared on every call);
- an attribute found in the instance dict of a module object, or of an object whose
  class and bases (heap types over `object`) define neither the name nor
  `__getattribute__`; or, for such an object, found not in its instance dict but in a
  class dict as an object of a builtin type without `__get__` (a dict kept on the
  class): the instance dict, the class dicts; the object's class and its dict's
  identity are compared on every call (`__class__` and `__dict__` assignments write no
  dict).

A chain may also start at an object a guard pins by identity (`L['self']`, or
`L['args'][0]` behind a decorator's `*args`): each fast call reads it as before and
compares it with the snapshot's (a *checked root*, held weakly). A step of a source
kind defined in another package (dynamo_capture's read past a class's own
`__getattribute__`) is stable where the rule it registered (`register_stable_step`)
says so: `object.__getattribute__(obj, '__dict__')` is the instance dict while the MRO's
class dicts keep their tags and the object its class and dict.

A *checked* step (`cell_contents`, `__defaults__[i]`, `__code__`, `__name__`, ...)
can change without a dict write: the fast path reads it again from its cached base
and compares the object with the one the full check saw; a different object sends
the call to the full check. Every other step is read as before, from its base.

The generated guard function (guard_codegen.py) then has two bodies. The full
check is today's, plus a snapshot of the pinned (stable or checked) values when it
passes; `StableReads.snapshot` verifies each stable step against the rule above on
those very values and collects the dicts to watch. While the tags, MROs, classes and
instance dicts are as snapshotted, the fast body binds pinned values from the
snapshot and leaves out every guard whose answer cannot have changed: an ID_MATCH or
EQUALS_MATCH on a pinned value, a TYPE_MATCH (naming a heap class: the object's class is
then compared on every call, as `__class__` assignment writes no dict), the keys or length
of a watched dict or of a tuple, a held class or module attribute (AttributeIdGuard,
whose function's `__code__` is still compared) and a name absent from a watched
globals dict. Any other guard runs as before, on the cached value where its source
is pinned. Tags are read before the full check they stand for; a new set of
watched dicts is trusted only from the next full check on, whose tags are read first.
"""

from __future__ import annotations

import contextlib
import gc
import operator
import sys
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from guards import dict_versions
from guards.dict_versions import VersionTags
from guards.guard_kinds import (
    AttributeIdGuard,
    DictKeysGuard,
    EqualsGuard,
    Guard,
    IdGuard,
    LengthGuard,
    NameAbsentGuard,
    NNModuleGuard,
    NotInInstanceDictGuard,
    TypeGuard,
    typed_equal,
)
from guards.module_tree import ModuleTreeGuard
from guards.sources import (
    AttrSource,
    CellContentsSource,
    DefaultArgSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    ModuleGlobalSource,
    ModuleSource,
    NNModuleSource,
    ParamBufferSource,
    Source,
    TypeSource,
)

__all__ = [
    "MISSING",
    "Links",
    "StablePlan",
    "StableReads",
    "plan_stable_reads",
    "raw_attribute_link",
    "register_stable_step",
    "use_stable_reads",
]

_ENABLED = [True]


@contextlib.contextmanager
def use_stable_reads(enabled: bool) -> Iterator[None]:
    """Within the block, guard functions are generated with (default) or without the
    fast body over stable reads (a baseline for benchmarks, a check of the full path):

        with use_stable_reads(False):
            check = guards.compile()
    """
    _ENABLED.append(bool(enabled))
    try:
        yield
    finally:
        _ENABLED.pop()


def stable_reads_enabled() -> bool:
    """Whether guard functions generated now get the fast body (see `use_stable_reads`)."""
    return _ENABLED[-1]


GIVE_UP_AFTER = 16  # snapshots before a guard function may stop taking them
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE
_MISSING = object()


def _data_descriptor(value: Any) -> bool:
    kind = type(value)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")


# Names `type` itself answers for a class before its MRO (`__name__`, `__mro__`, ...).
_TYPE_NAMES = frozenset(n for n, v in vars(type).items() if _data_descriptor(v)) | {"__class__"}
_MODULE_NAMES = frozenset(vars(types.ModuleType)) | frozenset(vars(object))
# Attributes a checked step reads again on every call (they change without a dict write).
_CHECKED_MEMBERS = frozenset(
    {"__code__", "__name__", "__qualname__", "__defaults__", "__kwdefaults__", "__func__"}
)
_CONSTANTS = (type(None), bool, int, float, complex, str, bytes)
_INSTANCE_DICT = object  # the watched type of a value whose instance dict a guard reads
_CLASS = type  # the watched type of a value whose class alone a guard reads
_mro = operator.attrgetter("__mro__")
_object_getattribute = object.__getattribute__


def _is_heap(cls: type) -> bool:
    return bool(cls.__flags__ & _HEAPTYPE)


def _class_dict(cls: type, found: dict[int, dict]) -> dict:
    """The dict behind a heap class's `__dict__` mappingproxy (written by `setattr(cls, ...)`).

    `found` memoizes by class id (a class keeps its dict for life, and the dict, through
    its `__dict__` descriptor, keeps the class: a memo must not outlive its user)."""
    real = found.get(id(cls))
    if real is None:
        referents = [d for d in gc.get_referents(cls.__dict__) if type(d) is dict]
        if len(referents) != 1 or len(referents[0]) != len(cls.__dict__):
            raise LookupError(f"no dict behind {cls!r}.__dict__")
        real = found[id(cls)] = referents[0]
    return real


@dataclass(slots=True)
class Links:
    """What a stable read depends on: dicts (by tag), classes (by MRO), objects (by class
    and instance dict identity)."""

    dicts: list[dict] = field(default_factory=list)
    classes: list[type] = field(default_factory=list)
    objects: list[tuple[Any, type, dict]] = field(default_factory=list)
    typed: list[Any] = field(default_factory=list)  # objects whose class alone is compared
    class_dicts: dict[int, dict] = field(default_factory=dict)  # see `_class_dict`


def _class_attribute(cls: type, member: str, links: Links) -> Any:
    if type(cls) is not type or member in _TYPE_NAMES:
        return _MISSING
    found = _MISSING
    for klass in cls.__mro__:
        if _is_heap(klass):
            real = _class_dict(klass, links.class_dicts)
            links.dicts.append(real)
            found = real.get(member, _MISSING)
        else:
            found = vars(klass).get(member, _MISSING)
        if found is not _MISSING:
            break
    if found is _MISSING:
        return _MISSING
    kind = type(found)
    if kind is not types.FunctionType and kind is not property:
        if _is_heap(kind) or hasattr(kind, "__get__"):
            return _MISSING
    links.classes.append(cls)
    return found


def _instance_attribute(obj: Any, member: str, links: Links, raw: bool = False) -> Any:
    """`obj.member` from the instance dict (or a plain class value), where stable; `raw`:
    read as `object.__getattribute__(obj, member)` does, past a class's own
    `__getattribute__` (which then may be defined)."""
    cls = type(obj)
    if member in ("__dict__", "__class__"):
        return _MISSING
    if cls is types.ModuleType:
        if member in _MODULE_NAMES:
            return _MISSING
    in_class = _MISSING  # the value a class of the MRO holds under `member`, first found
    if cls is not types.ModuleType:
        if not _is_heap(cls) or type(cls) is not type:
            return _MISSING
        for klass in cls.__mro__:
            if klass is object:
                continue
            if not _is_heap(klass):
                return _MISSING
            real = _class_dict(klass, links.class_dicts)
            if "__getattribute__" in real and not raw:
                return _MISSING
            if in_class is _MISSING:
                in_class = real.get(member, _MISSING)
            links.dicts.append(real)
        links.classes.append(cls)
    elif member in _MODULE_NAMES:
        return _MISSING
    instance = _object_getattribute(obj, "__dict__")
    if type(instance) is not dict:
        return _MISSING
    found = instance.get(member, _MISSING)
    if found is _MISSING:
        # NOTE: a class attribute the instance dict does not shadow (a registry kept on the
        # class): read as is where it is no descriptor and its class cannot change.
        kind = type(in_class)
        if in_class is _MISSING or _is_heap(kind) or hasattr(kind, "__get__"):
            return _MISSING
        found = in_class
    elif in_class is not _MISSING and (_is_heap(type(in_class)) or _data_descriptor(in_class)):
        # NOTE: in both: a data descriptor of the class would win; a value of a builtin
        # type that is none (a dataclass field's default: an int, a str) never does.
        return _MISSING
    links.dicts.append(instance)
    links.objects.append((obj, cls, instance))
    return found


def instance_dict_link(obj: Any, links: Links) -> Any:
    """`object.__getattribute__(obj, '__dict__')`, the instance dict, where stable, else
    `_MISSING`: a heap class over `object` (metaclass `type`) whose MRO finds `__dict__`
    as the slot's own getset descriptor. It stays the same dict while the class dicts of
    the MRO keep their tags (no `__dict__` property added), the MRO stands and the
    object keeps its class and dict (compared on every call: `obj.__dict__ = d` writes
    no dict)."""
    cls = type(obj)
    if not _is_heap(cls) or type(cls) is not type:
        return _MISSING
    found = _MISSING
    for klass in cls.__mro__:
        if klass is object:
            continue
        if not _is_heap(klass):
            return _MISSING
        real = _class_dict(klass, links.class_dicts)
        links.dicts.append(real)
        if found is _MISSING:
            found = real.get("__dict__", _MISSING)
    if type(found) is not types.GetSetDescriptorType or found.__name__ != "__dict__":
        return _MISSING
    instance = _object_getattribute(obj, "__dict__")
    if type(instance) is not dict:
        return _MISSING
    links.classes.append(cls)
    links.objects.append((obj, cls, instance))
    return instance


def raw_attribute_link(base: Any, member: str, links: Links) -> Any:
    """`object.__getattribute__(base, member)` where a stable read gives it (recording what
    it depends on), else `_MISSING`: the instance dict, or an attribute as
    `attribute_link` reads one of an object, a class's own `__getattribute__` aside."""
    if member == "__dict__":
        return instance_dict_link(base, links)
    if isinstance(base, type) or type(base) is types.FunctionType:
        return _MISSING
    return _instance_attribute(base, member, links, raw=True)


# Rules of source kinds defined outside this package: source type -> the rule reading
# `source` from `base` where stable (see `register_stable_step`).
_STEP_RULES: dict[type, Callable[[Any, Any, Links], Any]] = {}


def register_stable_step(source_type: type, rule: Callable[[Any, Any, Links], Any]) -> None:
    """Teach stable reads a step of a source kind defined outside this package: `rule(base,
    source, links)` returns the value the step reads from `base` where a stable read gives
    it (recording in `links` what it depends on), else `MISSING`. A type registered twice
    is an error.

        register_stable_step(RawAttrSource, lambda b, s, links: raw_attribute_link(b, s.name, links))
    """
    if source_type in _STEP_RULES:
        raise ValueError(f"a stable step for {source_type.__qualname__} is already registered")
    _STEP_RULES[source_type] = rule


MISSING = _MISSING  # what a step rule returns where its read is not stable


def attribute_link(base: Any, member: str, links: Links) -> Any:
    """`base.member` where a stable read gives it (recording what it depends on), else
    `_MISSING`."""
    kind = type(base)
    if kind is types.FunctionType:
        return getattr(base, member) if member in ("__closure__", "__globals__") else _MISSING
    if kind is types.CodeType:
        return getattr(base, member) if member.startswith("co_") else _MISSING
    if isinstance(base, type):
        return _class_attribute(base, member, links)
    return _instance_attribute(base, member, links)


def stable_link(base: Any, source: Source, links: Links) -> Any:
    """The value of `source` read from `base` (its base's value; for a module global,
    the module's dict) where the read is stable, else `_MISSING`."""
    if isinstance(source, ModuleGlobalSource):
        if type(base) is not dict:
            return _MISSING
        links.dicts.append(base)
        return base.get(source.global_name, _MISSING)
    if type(source) is ItemSource:
        if type(base) is dict:
            links.dicts.append(base)
            return base.get(source.index, _MISSING)
        if type(base) is tuple and type(source.index) is int:
            return base[source.index] if -len(base) <= source.index < len(base) else _MISSING
        return _MISSING
    if type(source) is AttrSource:
        return attribute_link(base, source.member, links)
    rule = _STEP_RULES.get(type(source))
    if rule is not None:
        return rule(base, source, links)
    if type(source) is ModuleSource or type(source) is ParamBufferSource:
        table = "_modules" if type(source) is ModuleSource else None
        table = table or ("_buffers" if source.is_buffer else "_parameters")
        found = _instance_attribute(base, table, links)
        if type(found) is not dict:
            return _MISSING
        links.dicts.append(found)
        return found.get(source.member, _MISSING)
    return _MISSING


def _through(source: Source) -> Source:
    """The source an NNModuleSource marks (the same value, the same local)."""
    while isinstance(source, NNModuleSource):
        source = source.source
    return source


def _weakly_held(obj: Any) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


def _same_code_value(base: Any, value: Any, seen: Any) -> bool:
    """An attribute of a code object built anew on each read (`co_varnames` in 3.11+): a
    code object is immutable, so an equal value of the same type stands for it."""
    return type(base) is types.CodeType and type(value) is type(seen) and value == seen


def _checked_step(source: Source) -> bool:
    """A step whose object a fast call reads again and compares with the snapshot's."""
    if isinstance(source, CellContentsSource | DefaultArgSource | TypeSource):
        return True
    return type(source) is AttrSource and source.member in _CHECKED_MEMBERS


def _read(source: Source, base: Any) -> Any:
    return eval(source.reconstruct("b"), {"__builtins__": __builtins__}, {"b": base})


# ---------------------------------------------------------------------------- the plan


@dataclass(slots=True)
class StablePlan:
    """Which sources a guard function pins, which guards its fast body leaves out.

    `pinned` in dependency order (a base before its reads); `checked` of those, the
    ones read again and compared on every fast call; `skipped` the guards left out
    (value: None, or the reduced check an AttributeIdGuard keeps); `watch_values`
    pinned sources whose dict value is watched (a skipped keys or length guard).
    """

    pinned: list[Source]
    checked: set[Source]
    roots: dict[Source, dict]  # module global source -> its module's dict
    skipped: dict[Guard, bool]  # guard -> whether a code identity check stays
    watch_values: dict[Source, type]
    weak: frozenset[Source] = frozenset()  # checked roots (pinned by identity), held weakly

    def index(self, source: Source) -> int:
        return self.pinned.index(source)


def _has_instance_dict(value: Any, class_dicts: dict[int, dict]) -> bool:
    """Whether `value.__dict__` is its instance dict, read the plain way (no override)."""
    cls = type(value)
    if cls is not types.ModuleType and not (_is_heap(cls) and type(cls) is type):
        return False
    try:
        instance = _object_getattribute(value, "__dict__")
    except AttributeError:
        return False
    if type(instance) is not dict:
        return False
    for klass in cls.__mro__:
        if (
            klass is not object
            and _is_heap(klass)
            and "__getattribute__" in _class_dict(klass, class_dicts)
        ):
            return False
    return getattr(value, "__dict__", None) is instance


def _skippable(guard: Guard, value: Any) -> tuple[bool, type | None]:
    """Whether a guard on a pinned value can be left out (and the value's type to watch)."""
    if isinstance(guard, IdGuard | EqualsGuard):
        return True, None
    if isinstance(guard, TypeGuard):
        cls = guard.expected_type
        if issubclass(cls, types.ModuleType):
            return False, None
        # NOTE: an instance of a heap class can have its `__class__` assigned (no dict
        # written): its class is compared on every fast call.
        return True, (_CLASS if _is_heap(cls) else None)
    if isinstance(guard, NotInInstanceDictGuard):
        return _has_instance_dict(value, {}), _INSTANCE_DICT
    if isinstance(guard, LengthGuard | DictKeysGuard):
        if type(value) is dict or (type(value) is tuple and isinstance(guard, LengthGuard)):
            return True, type(value)
    return False, None


def plan_stable_reads(
    guards: Sequence[Guard], pins: dict[Source, Any] | None = None
) -> StablePlan | None:
    """The plan for `guards` (those the function checks), or None when nothing is pinned
    or dict version tags are not available. `pins`: objects at sources the guards check
    by class only that may be checked roots too (GuardSet.pin_for_stable_reads)."""
    if not dict_versions.AVAILABLE:
        return None
    values: dict[Source, Any] = {}
    kinds: dict[Source, str] = {}  # "stable" | "checked"
    roots: dict[Source, dict] = {}
    seen: set[Source] = set()
    class_dicts: dict[int, dict] = {}
    # Objects guards pin by identity: any source holding one is a checked root.
    known: dict[Source, Any] = {}
    for guard in guards:
        obj = None
        if isinstance(guard, IdGuard | NNModuleGuard):
            obj = guard.ref()
        elif isinstance(guard, ModuleTreeGuard) and guard.state is not None:
            obj = guard.state.root()  # the tree's root module (its NN_MODULE guard is covered)
        if obj is not None:
            known[_through(guard.source)] = obj
    for source, obj in (pins or {}).items():
        known.setdefault(_through(source), obj)

    roots_by_identity: set[Source] = set()  # checked roots, held weakly

    def pin_by_identity(source: Source) -> None:
        # NOTE: an object a guard pins by identity is a checked root wherever it is read
        # from (a local, or `L['args'][0]`: a model passed on by a decorator's `*args`):
        # each fast call reads it from its base as before and compares it.
        if source in known and _weakly_held(known[source]):
            values[source], kinds[source] = known[source], "checked"
            roots_by_identity.add(source)

    def visit(source: Source) -> None:
        source = _through(source)
        if source in seen:
            return
        seen.add(source)
        if isinstance(source, ModuleGlobalSource):
            module = sys.modules.get(source.module_name)
            if module is None:
                return
            value = stable_link(vars(module), source, Links(class_dicts=class_dicts))
            if value is not _MISSING:
                values[source], kinds[source] = value, "stable"
                roots[source] = vars(module)
            return
        if isinstance(source, LocalSource | GlobalSource):
            pin_by_identity(source)
            return
        if source.base is None:
            return
        visit(source.base)
        base = _through(source.base)
        if base in kinds:
            try:
                value = stable_link(values[base], source, Links(class_dicts=class_dicts))
                if value is not _MISSING and (
                    value is _read(source, values[base]) or type(values[base]) is types.CodeType
                ):
                    values[source], kinds[source] = value, "stable"
                elif _checked_step(source):
                    values[source], kinds[source] = _read(source, values[base]), "checked"
            except Exception:  # noqa: BLE001 - a read that fails now is simply not pinned
                pass
        if source not in kinds:
            pin_by_identity(source)

    for guard in guards:
        for source in guard.sources():
            visit(source)
    skipped: dict[Guard, bool] = {}
    watch_values: dict[Source, type] = {}
    for guard in guards:
        if isinstance(guard, AttributeIdGuard):
            if not guard.bound and _held_attribute(guard, Links(class_dicts=class_dicts)):
                skipped[guard] = guard.code is not None
            continue
        if isinstance(guard, NameAbsentGuard):
            if type(guard.namespace) is dict:
                skipped[guard] = False
            continue
        sources = tuple(map(_through, guard.sources()))
        if len(sources) != 1 or sources[0] not in kinds:
            continue
        skip, watched = _skippable(guard, values[sources[0]])
        if skip:
            skipped[guard] = False
            # NOTE: the instance dict's watch compares the class too: it is never narrowed
            # to the class alone.
            if watched is not None and watch_values.get(sources[0]) is not _INSTANCE_DICT:
                watch_values[sources[0]] = watched
    # A checked step is worth its comparison only where something rests on its object.
    useful = {_through(s) for g in skipped for s in g.sources()}
    for source in reversed(list(kinds)):
        if source not in useful and kinds[source] == "checked":
            del kinds[source]
        elif source.base is not None:
            useful.add(_through(source.base))
    skipped = {
        g: code for g, code in skipped.items() if all(_through(s) in kinds for s in g.sources())
    }
    if not skipped:
        return None
    pinned = [s for s in kinds]  # visit order: a base before its reads
    checked = {s for s, kind in kinds.items() if kind == "checked"}
    return StablePlan(
        pinned,
        checked,
        {s: roots[s] for s in pinned if s in roots},
        skipped,
        {s: t for s, t in watch_values.items() if s in kinds},
        frozenset(s for s in pinned if s in roots_by_identity),
    )


def _held_attribute(guard: AttributeIdGuard, links: Links) -> bool:
    """Whether an AttributeIdGuard's read is stable and passes now (the same object, or
    an equal constant of the same builtin type, as its check allows)."""
    value = attribute_link(guard.owner, guard.attr, links)
    if value is guard.expected:
        return True
    return type(value) in _CONSTANTS and typed_equal(value, guard.expected)


# ---------------------------------------------------------------------------- the state


_call = operator.call


def _holder(obj: Any) -> Callable[[], Any]:
    """A weak reference to `obj`, or (for an object without) a strong one."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _same_objects(left: Sequence[Any], right: Sequence[Any]) -> bool:
    return len(left) == len(right) and all(map(operator.is_, left, right))


class StableReads:
    """The snapshot a guard function's fast body reads: see the module docstring.

    `unchanged()` is true while every watched dict keeps its tag, every watched class
    its MRO and every watched object its class and instance dict; `values` are the
    pinned values of the last full check that passed."""

    __slots__ = (
        "plan",
        "values",
        "_watch",
        "_dicts",
        "_seen",
        "_pending",
        "_classes",
        "_mros",
        "_objects",
        "_types",
        "_instance_dicts",
        "_names",
        "_calls",
        "_snapshots",
        "_steps",
        "_watched",
        "_held",
        "_namespaces",
        "_weak",
        "__weakref__",
    )

    def __init__(self, plan: StablePlan) -> None:
        self.plan = plan
        self.values: tuple = ()
        self._watch: VersionTags | None = None
        self._dicts: tuple[dict, ...] = ()
        self._seen: Any = None
        self._pending: Any = None
        self._classes: tuple[type, ...] = ()
        self._mros: tuple = ()
        self._objects: tuple = ()
        self._types: tuple[type, ...] = ()
        self._instance_dicts: tuple[dict, ...] = ()
        self._names: tuple[str, ...] = ()
        self._calls = 0  # calls (fast path tried), and snapshots taken: see `snapshot`
        self._snapshots = 0
        # What `snapshot` verifies, by index in `values`: (index, base index or -1, the
        # module dict of a root, source) of each stable read; watched values and their
        # kind; held attributes; namespaces a name must stay out of.
        position = {source: index for index, source in enumerate(plan.pinned)}
        self._steps = tuple(
            (index, position.get(_through(source.base), -1), plan.roots.get(source), source)
            for index, source in enumerate(plan.pinned)
            if source not in plan.checked
        )
        self._watched = tuple((position[s], kind) for s, kind in plan.watch_values.items())
        self._held = tuple(g for g in plan.skipped if isinstance(g, AttributeIdGuard))
        self._weak = tuple(index for index, s in enumerate(plan.pinned) if s in plan.weak)
        self._namespaces = [g.namespace for g in plan.skipped if isinstance(g, NameAbsentGuard)]

    def __repr__(self) -> str:  # NOTE: no address: equal guard sources share one file
        return f"<StableReads: {len(self.plan.pinned)} pinned, {len(self.plan.skipped)} left out>"

    def unchanged(self) -> bool:
        """Whether the snapshot still stands (the fast body may run)."""
        self._calls += 1
        watch = self._watch
        return (
            watch is not None
            and watch.read() == self._seen
            and tuple(map(_mro, self._classes)) == self._mros
            and tuple(map(type, objects := tuple(map(_call, self._objects)))) == self._types
            and all(
                map(
                    operator.is_,
                    map(_object_getattribute, objects, self._names),
                    self._instance_dicts,
                )
            )
        )

    def begin(self) -> None:
        """Read the watched tags before a full check (the snapshot after it may use them)."""
        watch = self._watch
        self._pending = None if watch is None else watch.read()

    def snapshot(self, values: tuple) -> None:
        """After a full check passed: verify the stable reads on `values` and remember them.

        Where the snapshot keeps going stale (a watched dict written on most calls: a
        counter in a module global), taking it costs more than it saves: after
        `GIVE_UP_AFTER` snapshots, more than one in four calls, none is taken any more and
        every call runs the full check, as without stable reads.
        """
        self._snapshots += 1
        if self._snapshots > GIVE_UP_AFTER and 4 * self._snapshots > self._calls:
            self._watch, self._seen, self.values = None, None, ()
            self._snapshots = -(1 << 62)  # never again
            return
        if self._snapshots < 0:
            return
        try:
            links = self._links(values)
        except Exception:  # noqa: BLE001 - an unexpected object: no fast path until next time
            links = None
        if links is None:
            self._watch, self._seen, self.values = None, None, ()
            return
        dicts = tuple({id(d): d for d in links.dicts}.values())
        if (
            self._watch is not None
            and self._pending is not None
            and _same_objects(dicts, self._dicts)
        ):
            self._seen = self._pending
        else:  # NOTE: new dicts: their tags were not read before this check; trust the next.
            self._watch, self._dicts, self._seen = VersionTags(dicts), dicts, None
        classes = tuple({id(c): c for c in links.classes}.values())
        self._classes, self._mros = classes, tuple(map(_mro, classes))
        objects = [
            *{id(o[0]): (*o, "__dict__") for o in links.objects}.values(),
            *{id(o): (o, type(o), type(o), "__class__") for o in links.typed}.values(),
        ]
        # NOTE: the objects and the roots (a local, `self`) are held weakly: a snapshot must
        # not keep a model alive; the death of a root drops the snapshot. An object is
        # compared by its class and, read past any `__getattribute__`, its instance dict
        # (or, where a guard reads its class alone, its class again).
        self._objects = tuple(_holder(o[0]) for o in objects)
        self._types = tuple(o[1] for o in objects)
        self._instance_dicts = tuple(o[2] for o in objects)
        self._names = tuple(o[3] for o in objects)
        if self._weak:
            held = list(values)
            for index in self._weak:
                held[index] = weakref.ref(held[index], self._lost)
            values = tuple(held)
        self.values = values

    def _lost(self, _ref: Any) -> None:
        """A root of the snapshot died: drop the snapshot (the next call runs in full)."""
        self._watch, self._seen, self.values = None, None, ()
        self._objects = self._types = self._instance_dicts = self._names = ()
        self._dicts, self._classes, self._mros = (), (), ()

    def _links(self, values: tuple) -> Links | None:
        links = Links(class_dicts={})
        for index, base_index, root, source in self._steps:
            base = root if base_index < 0 else values[base_index]
            value = stable_link(base, source, links)
            if value is not values[index] and not _same_code_value(base, value, values[index]):
                return None
        for index, kind in self._watched:
            value = values[index]
            if kind is _INSTANCE_DICT:
                if not _has_instance_dict(value, links.class_dicts):
                    return None
                instance = _object_getattribute(value, "__dict__")
                links.dicts.append(instance)
                links.objects.append((value, type(value), instance))
                links.classes.append(type(value))
                links.dicts += [
                    _class_dict(k, links.class_dicts) for k in type(value).__mro__ if _is_heap(k)
                ]
                continue
            if kind is _CLASS:
                links.typed.append(value)
                continue
            if type(value) is not kind:
                return None
            if kind is dict:
                links.dicts.append(value)
        for guard in self._held:
            if not _held_attribute(guard, links):
                return None
        links.dicts += self._namespaces
        return links
