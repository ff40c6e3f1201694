"""The kinds of guard: what was assumed about a value at compile time.

Each guard is a frozen value object with two ways to check it, which must
agree (the tests check that they do on randomized inputs):

- `failure(*values)`: the reference check, slow and plain, returning `None`
  when the guard holds or a sentence saying what differs;
- `emit(names, code)`: boolean Python expressions over local names bound to the
  values, which `GuardSet.compile()` pastes into one generated function.

`rank` orders guards in the generated function: cheap and likely-to-fail
first. `guard_type` is torch's name for the kind (what guard filters see).
"""

from __future__ import annotations

import keyword
import math
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import torch

from guards.errors import GuardsError
from guards.hash_once import hash_once, reduce_without_hash
from guards.sources import HasAttrSource, HeldObjectSource, Source

__all__ = [
    "AttributeIdGuard",
    "DictKeysGuard",
    "EqualsGuard",
    "Guard",
    "GuardCode",
    "HasAttrGuard",
    "IdGuard",
    "LengthGuard",
    "MappingItemGuard",
    "ModuleStructureGuard",
    "NNModuleGuard",
    "NameAbsentGuard",
    "NotInInstanceDictGuard",
    "SetItemsGuard",
    "SubclassLayoutGuard",
    "TypeGuard",
    "typed_equal",
]


class GuardCode(Protocol):
    """What a guard needs from the code generator: names for constants it uses."""

    def const(self, value: Any, hint: str = "c") -> str:
        """A name bound to `value` in the generated function (a keyword default)."""
        ...


@dataclass(frozen=True, slots=True)
class Guard:
    """Base class of guards. `source` says which value the guard checks."""

    source: Source
    # The hash, computed once (see hash_once): guards are deduplicated in dicts.
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        hash_once(cls)

    __reduce__ = reduce_without_hash

    guard_type: ClassVar[str] = ""
    derived_guard_types: ClassVar[tuple[str, ...]] = ()
    rank: ClassVar[int] = 50
    # On a module's source: what it checks changes only by a write to that module's
    # `__dict__`, its parent's `_modules`, or a hook registration (module_tree.py
    # then checks it only after one of those).
    module_state: ClassVar[bool] = False
    # Checks only which objects its sources hold (the same one, different ones): a
    # module tree covers it where every source is one of the tree's modules or tensors,
    # which stay the same objects while the tree's dicts are not written.
    relates_identities: ClassVar[bool] = False

    def sources(self) -> tuple[Source, ...]:
        """The values this guard reads, in the order `failure` and `emit` take them."""
        return (self.source,)

    def empty_module_dicts(self) -> tuple[str, ...]:
        """For a `module_state` guard: the attributes of the module holding dicts the
        guard requires to be empty (its hook dicts), read besides the module's
        `__dict__`: a module tree checks on every call that they still are, so a
        write by hand is seen."""
        return ()

    def failure(self, *values: Any) -> str | None:
        """None if the guard holds for `values`, else what differs, in words."""
        raise NotImplementedError(type(self).__name__)

    def check(self, *values: Any) -> bool:
        """Whether the guard holds (the reference check)."""
        return self.failure(*values) is None

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        """(rank, boolean expression) pairs over `names`, all of which must be true."""
        raise NotImplementedError(type(self).__name__)

    @property
    def has_value(self) -> bool:
        """Whether `value` holds the value seen at compile time."""
        return True

    @property
    def value(self) -> Any:
        """The value seen at compile time (what guard filters see as `entry.value`)."""
        return None

    def describe(self) -> str:
        """One line for logs: kind and source."""
        return f"{self.guard_type}: {self.source.expr}"


def _type_name(cls: type) -> str:
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


# ---------------------------------------------------------------------------- type


@dataclass(frozen=True, slots=True)
class TypeGuard(Guard):
    """`type(value) is expected_type` (exact type; subclasses fail)."""

    expected_type: type

    guard_type: ClassVar[str] = "TYPE_MATCH"
    rank: ClassVar[int] = 10

    def failure(self, value: Any) -> str | None:
        if type(value) is self.expected_type:
            return None
        return (
            f"{self.source.name!r} type mismatch: expected {_type_name(self.expected_type)}, "
            f"actual {_type_name(type(value))}"
        )

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        return [(self.rank, f"type({names[0]}) is {code.const(self.expected_type, 'type')}")]

    @property
    def value(self) -> Any:
        return self.expected_type


@dataclass(frozen=True, slots=True)
class ModuleStructureGuard(TypeGuard):
    """An nn.Module guarded on its structure, not its identity: `type(module) is cls`.

    What capture read of the module (attributes, the training flag, hooks, the keys of
    `_modules`, its parameters' and buffers' metadata, an instance `forward`) is guarded
    where it was read, as for a module guarded by identity; what identity alone fixed is
    the class, checked here. As a TYPE_MATCH it keeps `ref`, the module seen at compile
    time (not compared), so a module tree (module_tree.py) can hold it as one of the
    tree's modules: a submodule of the compiled module replaced by another of the same
    class and structure then passes the tree's full check instead of failing an
    identity guard.
    """

    ref: Callable[[], Any] = field(default=lambda: None, compare=False, repr=False)

    module_state: ClassVar[bool] = True

    @classmethod
    def of(cls, source: Source, module: torch.nn.Module) -> ModuleStructureGuard:
        return cls(source, type(module), _reference(module))


@dataclass(frozen=True, slots=True)
class SubclassLayoutGuard(Guard):
    """A traceable tensor subclass (see tensor_subclasses) as seen when compiling: its
    exact class, its flatten context (`==`) and each inner tensor's dtype, device, size,
    strides and offset. A compile took it apart into those inner tensors."""

    layout: Any  # a SubclassLayout

    guard_type: ClassVar[str] = "TENSOR_SUBCLASS_METADATA_MATCH"
    rank: ClassVar[int] = 30

    def failure(self, value: Any) -> str | None:
        from guards.tensor_subclasses import layout_or_none

        got = layout_or_none(value)
        if got == self.layout:
            return None
        if got is None:
            return f"{self.source.name!r} is no longer a {self.layout.describe()}"
        return (
            f"{self.source.name!r} subclass layout mismatch: expected "
            f"{self.layout.describe()}, actual {got.describe()}"
        )

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        from guards.tensor_subclasses import layout_or_none

        read = code.const(layout_or_none, "subclass_layout")
        return [(self.rank, f"{read}({names[0]}) == {code.const(self.layout, 'layout')}")]


# ---------------------------------------------------------------------------- id


def _reference(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:
        # NOTE: objects without weakref support (builtin functions, ...) are held strongly.
        return lambda: obj


@dataclass(frozen=True, slots=True)
class IdGuard(Guard):
    """`value is obj` for the object seen at compile time, held by a weak reference.

    When the object has died, the guard fails (a new object may reuse its id).
    Build with `IdGuard.of(source, obj)`.
    """

    object_id: int
    ref: Callable[[], Any] = field(compare=False, repr=False)
    type_name: str = field(default="", compare=False)

    guard_type: ClassVar[str] = "ID_MATCH"
    derived_guard_types: ClassVar[tuple[str, ...]] = ("TYPE_MATCH",)
    rank: ClassVar[int] = 40

    @classmethod
    def of(cls, source: Source, obj: Any) -> IdGuard:
        """The id guard for `obj` as seen at `source`."""
        return cls(source, id(obj), _reference(obj), _type_name(type(obj)))

    def failure(self, value: Any) -> str | None:
        expected = self.ref()
        if expected is None:
            return f"{self.source.name!r}: the {self.type_name} object seen at compile time is gone"
        if value is expected:
            return None
        return (
            f"{self.source.name!r} is not the same object as at compile time "
            f"(expected the {self.type_name} with id {self.object_id}, actual "
            f"{_type_name(type(value))} with id {id(value)})"
        )

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        same = f"{names[0]} is {code.const(self.ref, 'ref')}()"
        if self.type_name != "NoneType":
            same += " is not None"  # NOTE: a dead referent reads None; a None value must fail
        return [(self.rank, same)]

    @property
    def has_value(self) -> bool:
        return self.ref() is not None

    @property
    def value(self) -> Any:
        return self.ref()


# ---------------------------------------------------------------------------- equals

_SCALARS = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))
# torch's immutable argument values (a `memory_format=` or `layout=` passed in)
_TORCH_CONSTANTS = (torch.dtype, torch.device, torch.memory_format, torch.layout)


def _check_constant(value: Any) -> None:
    if isinstance(value, tuple):
        for item in value:
            _check_constant(item)
    elif not (type(value) in _SCALARS or isinstance(value, _TORCH_CONSTANTS)):
        raise GuardsError(
            f"EqualsGuard supports None, bool, int, float, complex, str, bytes, dtype, device, "
            f"memory_format, layout, torch.Size and tuples of those; got {_type_name(type(value))}. Guard other "
            "objects with IdGuard or TypeGuard"
        )


def typed_equal(value: Any, expected: Any) -> bool:
    """`value == expected` with equal types at every level (so 1 != 1.0 != True)."""
    if type(value) is not type(expected):
        return False
    if isinstance(expected, tuple):
        return len(value) == len(expected) and all(
            typed_equal(v, e) for v, e in zip(value, expected, strict=True)
        )
    if type(expected) is float and math.isnan(expected):
        return math.isnan(value)
    return bool(value == expected)


def _literal(value: Any) -> bool:
    """Whether repr(value) is an exact Python literal for it."""
    if type(value) in (bool, int, str, bytes) or value is None:
        return True
    return type(value) is float and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class EqualsGuard(Guard):
    """`value == expected` with the same type (None, bool, int, float, str, dtype, device,
    memory_format, layout, Size, tuples)."""

    expected: Any

    guard_type: ClassVar[str] = "EQUALS_MATCH"
    derived_guard_types: ClassVar[tuple[str, ...]] = ("TYPE_MATCH",)
    rank: ClassVar[int] = 10

    def __post_init__(self) -> None:
        _check_constant(self.expected)

    def failure(self, value: Any) -> str | None:
        if typed_equal(value, self.expected):
            return None
        if type(value) is not type(self.expected):
            return (
                f"{self.source.name!r} type mismatch: expected {_type_name(type(self.expected))}, "
                f"actual {_type_name(type(value))}"
            )
        return f"{self.source.name!r} value mismatch: expected {self.expected!r}, actual {value!r}"

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        name, expected = names[0], self.expected
        if expected is None or type(expected) is bool or expected is Ellipsis:
            return [(self.rank, f"{name} is {expected!r}")]
        if isinstance(expected, torch.dtype):
            return [(self.rank, f"{name} is {code.const(expected, 'dtype')}")]
        exact = f"type({name}) is {code.const(type(expected), 'type')}"
        if type(expected) is float and math.isnan(expected):
            return [(self.rank, f"{exact} and {name} != {name}")]
        # An immutable value is usually the very object seen when compiling (a module's
        # `stride` tuple, its `eps`): `is` answers that at once, the full check the rest.
        seen = code.const(expected, "seen")
        if _literal(expected):
            return [(self.rank, f"{name} is {seen} or ({exact} and {name} == {expected!r})")]
        if isinstance(expected, tuple) and all(_literal(item) for item in expected):
            types = tuple(type(item) for item in expected)
            return [
                (
                    self.rank,
                    f"{name} is {seen} or ({exact} and {name} == {tuple(expected)!r} and "
                    f"tuple(map(type, {name})) == {code.const(types, 'types')})",
                )
            ]
        if isinstance(expected, tuple):
            equal = code.const(typed_equal, "typed_equal")
            return [(self.rank, f"{equal}({name}, {code.const(expected, 'value')})")]
        return [(self.rank, f"{exact} and {name} == {code.const(expected, 'value')}")]

    @property
    def value(self) -> Any:
        return self.expected


# ---------------------------------------------------------------------------- length / dict keys


@dataclass(frozen=True, slots=True)
class LengthGuard(Guard):
    """`len(value) == length` for a list, tuple or dict."""

    length: int

    guard_type: ClassVar[str] = "LENGTH_CHECK"
    rank: ClassVar[int] = 12

    def failure(self, value: Any) -> str | None:
        try:
            actual = len(value)
        except TypeError:
            return f"{self.source.name!r} has no length ({_type_name(type(value))})"
        if actual == self.length:
            return None
        return f"length of {self.source.name!r} mismatch: expected {self.length}, actual {actual}"

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        return [(self.rank, f"len({names[0]}) == {self.length}")]

    @property
    def value(self) -> Any:
        return self.length


@dataclass(frozen=True, slots=True)
class DictKeysGuard(Guard):
    """`tuple(value.keys()) == keys`: the same keys in the same order."""

    keys: tuple[Any, ...]

    guard_type: ClassVar[str] = "DICT_KEYS_MATCH"
    derived_guard_types: ClassVar[tuple[str, ...]] = ("LENGTH_CHECK",)
    rank: ClassVar[int] = 14

    def failure(self, value: Any) -> str | None:
        try:
            actual = tuple(value.keys())
        except (AttributeError, TypeError):
            return f"{self.source.name!r} is not a dict ({_type_name(type(value))})"
        if actual == self.keys:
            return None
        return (
            f"{self.source.name!r} keys mismatch: expected {list(self.keys)}, actual {list(actual)}"
        )

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        return [(self.rank, f"tuple({names[0]}.keys()) == {code.const(self.keys, 'keys')}")]

    @property
    def value(self) -> Any:
        return self.keys


def _is_constant_item(item: Any) -> bool:
    try:
        _check_constant(item)
    except GuardsError:
        return False
    return True


def same_set_items(value: Any, expected: tuple[Any, ...]) -> bool:
    """The items of set `value`, in iteration order, are `expected`'s: constants equal
    with the same type, other objects (types, modules, functions) the same object."""
    actual = tuple(value)
    return len(actual) == len(expected) and all(
        a is e or (_is_constant_item(e) and typed_equal(a, e))
        for a, e in zip(actual, expected, strict=True)
    )


@dataclass(frozen=True, slots=True)
class SetItemsGuard(Guard):
    """A set or frozenset: the same type, and the same items in the same iteration order
    (constants equal with the same type, other objects identical), so that `in`,
    iteration and set algebra folded at compile time hold for the value.

    NOTE: objects among the items are held strongly, as the set itself holds them."""

    set_type: type
    items: tuple[Any, ...]

    guard_type: ClassVar[str] = "SET_ITEMS_MATCH"
    derived_guard_types: ClassVar[tuple[str, ...]] = ("TYPE_MATCH", "LENGTH_CHECK")
    rank: ClassVar[int] = 14

    def __post_init__(self) -> None:
        if self.set_type not in (set, frozenset):
            raise GuardsError(f"SetItemsGuard guards a set or frozenset, not {self.set_type}")

    def failure(self, value: Any) -> str | None:
        if type(value) is not self.set_type:
            return (
                f"{self.source.name!r} type mismatch: expected {_type_name(self.set_type)}, "
                f"actual {_type_name(type(value))}"
            )
        if same_set_items(value, self.items):
            return None
        return (
            f"{self.source.name!r} items mismatch: expected {set(self.items)!r}, actual {value!r}"
        )

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        name = names[0]
        exact = f"type({name}) is {code.const(self.set_type, 'type')}"
        same = code.const(same_set_items, "same_set_items")
        return [(self.rank, f"{exact} and {same}({name}, {code.const(self.items, 'items')})")]

    @property
    def value(self) -> Any:
        return self.set_type(self.items)


# ---------------------------------------------------------------------------- hasattr


@dataclass(frozen=True, slots=True)
class HasAttrGuard(Guard):
    """`hasattr(value, attr) is expected` (a branch taken on whether an attribute exists).

    It reads `HasAttrSource(source, attr)`, so the generated function can test
    presence cheaply where the value's class is known (see attribute_access.py).
    """

    attr: str
    expected: bool

    guard_type: ClassVar[str] = "HASATTR"
    rank: ClassVar[int] = 30

    def sources(self) -> tuple[Source, ...]:
        return (HasAttrSource(self.source, self.attr),)

    def failure(self, present: Any) -> str | None:
        if present is self.expected:
            return None
        state = "had" if self.expected else "did not have"
        return f"{self.source.name!r} {state} attribute {self.attr!r} when compiled"

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        return [(self.rank, f"{names[0]} is {self.expected!r}")]

    @property
    def value(self) -> Any:
        return self.expected

    def describe(self) -> str:
        return f"{self.guard_type}: hasattr({self.source.expr}, {self.attr!r}) is {self.expected}"


# ---------------------------------------------------------------------------- nn.Module


@dataclass(frozen=True, slots=True)
class NNModuleGuard(Guard):
    """The same nn.Module object as at compile time, of the same class (`__class__` can
    be assigned), and, where `training` is not None, in that training mode.

    Capture builds it with `training=False` (flag unchecked): a module whose forward
    behaviour depends on the flag reads `self.training` while it is captured (its own
    forward, `F.dropout(x, training=self.training)`, BatchNorm and Dropout), and that
    read is guarded by an EQUALS_MATCH on `m.training`, so `model.eval()` recompiles
    only the graphs that read the flag (as torch.compile does).
    """

    object_id: int
    training: bool | None
    ref: Callable[[], Any] = field(compare=False, repr=False)
    module_type: type | None = field(default=None, compare=False, repr=False)

    guard_type: ClassVar[str] = "NN_MODULE"
    derived_guard_types: ClassVar[tuple[str, ...]] = ("ID_MATCH",)
    rank: ClassVar[int] = 40
    module_state: ClassVar[bool] = True

    @classmethod
    def of(cls, source: Source, module: torch.nn.Module, *, training: bool = True) -> NNModuleGuard:
        """The guard for `module` as seen at `source`: its identity and class, and its
        training flag unless `training=False` (see the class)."""
        flag = bool(module.training) if training else None
        return cls(source, id(module), flag, _reference(module), type(module))

    def failure(self, value: Any) -> str | None:
        expected = self.ref()
        if expected is None:
            return f"module {self.source.name!r} seen at compile time is gone"
        if value is not expected:
            return f"{self.source.name!r} is not the same nn.Module object as at compile time"
        if self.module_type is not None and type(value) is not self.module_type:
            return (
                f"module {self.source.name!r} class changed: expected "
                f"{_type_name(self.module_type)}, actual {_type_name(type(value))}"
            )
        if self.training is not None and value.training is not self.training:
            return (
                f"module {self.source.name!r} training flag mismatch: expected "
                f"{self.training}, actual {value.training}"
            )
        return None

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        name = names[0]
        check = f"{name} is {code.const(self.ref, 'module')}()"
        if self.module_type is not None:
            check += f" and type({name}) is {code.const(self.module_type, 'type')}"
        if self.training is not None:
            check += f" and {name}.training is {self.training}"
        return [(self.rank, check)]

    @property
    def has_value(self) -> bool:
        return self.ref() is not None

    @property
    def value(self) -> Any:
        return self.ref()


# ---------------------------------------------------------------------------- held objects


def _held_source(owner: Any) -> HeldObjectSource:
    if isinstance(owner, type):
        return HeldObjectSource(f"class {_type_name(owner)}", id(owner))
    if isinstance(owner, types.ModuleType):
        return HeldObjectSource(f"module {owner.__name__}", id(owner))
    return HeldObjectSource(f"{_type_name(type(owner))} object", id(owner))


@dataclass(frozen=True, slots=True)
class AttributeIdGuard(Guard):
    """`owner.attr is obj`: a class or module capture read from still holds that object.

    The owner is held by capture, not read from the frame (a method found on the
    class of an object, a function of `torch.nn.functional`): the guard keeps it
    and the object seen as constants, so one check serves every instance of the
    class. A constant (int, float, str, ...) also passes when equal with the same type;
    a function must also keep its `__code__` (replaced in place by autoreload).
    Build with `AttributeIdGuard.of(owner, attr, obj)`.
    """

    attr: str
    object_id: int
    bound: bool = False
    owner: Any = field(default=None, compare=False, repr=False)
    expected: Any = field(default=None, compare=False, repr=False)
    code: Any = field(default=None, compare=False, repr=False)

    guard_type: ClassVar[str] = "ID_MATCH"
    rank: ClassVar[int] = 38

    @classmethod
    def of(cls, owner: Any, attr: str, obj: Any, *, bound: bool = False) -> AttributeIdGuard:
        """The guard that `owner.attr` is still `obj`.

        `bound`: reading the attribute binds a method each time (a classmethod):
        the guard compares the bound method's `__func__` with `obj`.
        """
        code = obj.__code__ if isinstance(obj, types.FunctionType) else None
        return cls(_held_source(owner), attr, id(obj), bound, owner, obj, code)

    def sources(self) -> tuple[Source, ...]:
        return ()

    def failure(self) -> str | None:
        try:
            value = getattr(self.owner, self.attr)
            if self.bound:
                value = value.__func__
        except AttributeError:
            return f"{self.source.name} has no attribute {self.attr!r} now"
        if value is self.expected:
            if self.code is not None and self.expected.__code__ is not self.code:
                return f"the code of {self.source.name}.{self.attr} was replaced"
            return None
        if _literal(self.expected) and typed_equal(value, self.expected):
            return None
        return (
            f"{self.source.name}.{self.attr} is not the same object as at compile time "
            f"(expected {_short(self.expected)}, actual {_short(value)})"
        )

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        owner = code.const(self.owner, "owner")
        seen = code.const(self.expected, "seen")
        if _identifier(self.attr):
            read = f"{owner}.{self.attr}"
        else:
            read = f"getattr({owner}, {self.attr!r})"
        if self.bound:
            read += ".__func__"
        if _literal(self.expected):
            equal = code.const(typed_equal, "typed_equal")
            return [(self.rank, f"{read} is {seen} or {equal}({read}, {seen})")]
        if self.code is not None:  # a function's code replaced in place (autoreload)
            return [
                (
                    self.rank,
                    f"{read} is {seen} and {seen}.__code__ is {code.const(self.code, 'code')}",
                )
            ]
        return [(self.rank, f"{read} is {seen}")]

    @property
    def value(self) -> Any:
        return self.expected

    def describe(self) -> str:
        return f"{self.guard_type}: {self.source.name}.{self.attr} is {_short(self.expected)}"


@dataclass(frozen=True, slots=True)
class NameAbsentGuard(Guard):
    """`name not in namespace`: a name capture resolved to a builtin is not shadowed.

    The namespace (a module's globals dict) is held by capture, like the owner of
    an AttributeIdGuard. Build with `NameAbsentGuard.of(namespace, name)`.
    """

    name: str
    namespace: dict[str, Any] = field(compare=False, repr=False)

    guard_type: ClassVar[str] = "DICT_CONTAINS"
    rank: ClassVar[int] = 36

    @classmethod
    def of(cls, namespace: dict[str, Any], name: str) -> NameAbsentGuard:
        """The guard that `name` stays out of `namespace`."""
        module = namespace.get("__name__", "?")
        return cls(HeldObjectSource(f"globals of {module}", id(namespace)), name, namespace)

    def sources(self) -> tuple[Source, ...]:
        return ()

    def failure(self) -> str | None:
        if self.name not in self.namespace:
            return None
        return f"{self.name!r} is defined in the {self.source.name} now (it was a builtin)"

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        return [(self.rank, f"{self.name!r} not in {code.const(self.namespace, 'globals')}")]

    @property
    def value(self) -> Any:
        return self.name

    def describe(self) -> str:
        return f"{self.guard_type}: {self.name!r} not in {self.source.name}"


@dataclass(frozen=True, slots=True)
class MappingItemGuard(Guard):
    """`mapping.get(key) == expected` for a mapping capture holds (os.environ), or
    `is expected` for an object other than a literal (a class dict's classmethod).

    With `presence_only`, the guard checks `(key in mapping) is expected` instead
    (capture read only whether the key is there). Build with `MappingItemGuard.of`.
    """

    key: str
    expected: Any
    presence_only: bool = False
    mapping: Any = field(default=None, compare=False, repr=False)

    guard_type: ClassVar[str] = "DICT_CONTAINS"
    rank: ClassVar[int] = 36

    @classmethod
    def of(
        cls, mapping: Any, description: str, key: str, *, presence_only: bool = False
    ) -> MappingItemGuard:
        """The guard that `mapping[key]` (or only its presence) stays as it is now."""
        expected = (key in mapping) if presence_only else mapping.get(key)
        return cls(
            HeldObjectSource(description, id(mapping)), key, expected, presence_only, mapping
        )

    def sources(self) -> tuple[Source, ...]:
        return ()

    def _now(self) -> Any:
        return (self.key in self.mapping) if self.presence_only else self.mapping.get(self.key)

    def failure(self) -> str | None:
        now = self._now()
        if now is self.expected or (_literal(self.expected) and now == self.expected):
            return None
        what = "presence of" if self.presence_only else "value of"
        return (
            f"{what} {self.source.name}[{self.key!r}] changed: was {self.expected!r}, now {now!r}"
        )

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        mapping = code.const(self.mapping, "mapping")
        if self.presence_only:
            return [(self.rank, f"({self.key!r} in {mapping}) is {self.expected!r}")]
        if not _literal(self.expected):  # an object (a class's classmethod): the same one
            seen = code.const(self.expected, "seen")
            return [(self.rank, f"{mapping}.get({self.key!r}) is {seen}")]
        return [(self.rank, f"{mapping}.get({self.key!r}) == {self.expected!r}")]

    @property
    def value(self) -> Any:
        return self.expected

    def describe(self) -> str:
        read = "in" if self.presence_only else "=="
        return f"{self.guard_type}: {self.source.name}[{self.key!r}] {read} {self.expected!r}"


@dataclass(frozen=True, slots=True)
class NotInInstanceDictGuard(Guard):
    """`attr not in value.__dict__`: an attribute capture found on the class is not
    overridden on the instance (a method replaced by assigning to the object)."""

    attr: str

    guard_type: ClassVar[str] = "DICT_CONTAINS"
    rank: ClassVar[int] = 36
    module_state: ClassVar[bool] = True  # an instance attribute is set through __setattr__

    # NOTE: the instance dict is read with `object.__getattribute__`: it is the dict an
    # attribute lookup consults, and a class's own `__getattribute__` (a transformers
    # config's: about 1.5 us a read) is not run on every check.

    def failure(self, value: Any) -> str | None:
        try:
            instance_dict = object.__getattribute__(value, "__dict__")
        except AttributeError:
            instance_dict = None
        if not isinstance(instance_dict, dict):
            return f"{self.source.name!r} has no instance dict ({_type_name(type(value))})"
        if self.attr not in instance_dict:
            return None
        return f"{self.source.name!r} has its own attribute {self.attr!r} now (not the class's)"

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        read = code.const(object.__getattribute__, "object_getattribute")
        return [(self.rank, f"{self.attr!r} not in {read}({names[0]}, '__dict__')")]

    @property
    def value(self) -> Any:
        return self.attr

    def describe(self) -> str:
        return f"{self.guard_type}: {self.attr!r} not in {self.source.expr}.__dict__"


def _identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _short(value: Any) -> str:
    text = getattr(value, "__qualname__", None) or repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
