"""Sources: where a value of a Python frame came from, as a Python expression.

A `Source` renders the expression that fetches its value from a frame, over
two names: `L` (the dict of the frame's local names, free variables included)
and `G` (the frame's globals dict). Sources are frozen and hashable, so they
serve as dict keys (one fake per source, one guard per source and kind).

    >>> weight = ParamBufferSource(ModuleSource(NNModuleSource(LocalSource("self")), "linear"), "weight")
    >>> weight.expr
    "L['self']._modules['linear']._parameters['weight']"
    >>> weight.name
    'self.linear.weight'

Modules' submodules, parameters and buffers are fetched from the module's
`_modules` / `_parameters` / `_buffers` dicts rather than through
`nn.Module.__getattr__`, which is a Python function and slow on a guard's hot
path. Sources whose value lives inside an nn.Module answer `is_nn_module()`;
inside a module whose class comes from `torch.nn`, `is_builtin_nn_module()`.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass, field
from typing import Any

from guards.errors import SourceError
from guards.hash_once import hash_once, reduce_without_hash

__all__ = [
    "AttrSource",
    "CellContentsSource",
    "ClosureSource",
    "DefaultArgSource",
    "GlobalSource",
    "GlobalStateSource",
    "HasAttrSource",
    "HeldObjectSource",
    "ItemSource",
    "LocalSource",
    "ModuleGlobalSource",
    "ModuleSource",
    "NNModuleSource",
    "ParamBufferSource",
    "Source",
    "TypeSource",
    "is_builtin_module_class",
]


def _is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _attr_expr(base: str, member: str) -> str:
    if _is_identifier(member):
        return f"{base}.{member}"
    return f"getattr({base}, {member!r})"


def is_builtin_module_class(cls: type) -> bool:
    """Whether an nn.Module class is one of torch.nn's own (Linear, LayerNorm, ...)."""
    return cls.__module__.startswith("torch.nn.")


@dataclass(frozen=True, slots=True)
class Source:
    """Base class: where a value came from. Subclasses define `base` and `reconstruct`."""

    # The hash, computed once (see hash_once): sources are dict keys many times over.
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)
    # The expression, built once: guards and reads render a source's chain many times over.
    _expr: str | None = field(default=None, init=False, repr=False, compare=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        hash_once(cls)

    __reduce__ = reduce_without_hash

    @property
    def base(self) -> Source | None:
        """The source this one is reached from (None for a root: a local or a global)."""
        return None

    def reconstruct(self, base_expr: str) -> str:
        """The expression for this value, given an expression for `base`'s value."""
        raise NotImplementedError(type(self).__name__)

    def short_name(self, base_name: str) -> str:
        """The log name for this value, given the log name of `base`."""
        raise NotImplementedError(type(self).__name__)

    @property
    def expr(self) -> str:
        """The Python expression over `L` and `G` that fetches the value, e.g. `L['x']`."""
        expr = self._expr
        if expr is None:
            base = self.base
            expr = self.reconstruct(base.expr if base is not None else "")
            object.__setattr__(self, "_expr", expr)
        return expr

    @property
    def name(self) -> str:
        """A short name for logs and messages, e.g. `x`, `self.linear.weight`."""
        base = self.base
        return self.short_name(base.name if base is not None else "")

    def root(self) -> Source:
        """The local or global this source starts from."""
        source: Source = self
        while source.base is not None:
            source = source.base
        return source

    def is_global(self) -> bool:
        """Whether the value is reached from the frame's globals."""
        return isinstance(self.root(), GlobalSource | ModuleGlobalSource)

    def _nearest_module(self) -> ModuleSource | NNModuleSource | None:
        source: Source | None = self
        while source is not None:
            if isinstance(source, ModuleSource | NNModuleSource):
                return source
            source = source.base
        return None

    def is_nn_module(self) -> bool:
        """Whether the value is an nn.Module or is reached through one."""
        return self._nearest_module() is not None

    def is_builtin_nn_module(self) -> bool:
        """Whether the nearest nn.Module on the way to the value is one of torch.nn's own."""
        module = self._nearest_module()
        return module is not None and module.builtin

    def __str__(self) -> str:
        return self.expr


@dataclass(frozen=True, slots=True)
class LocalSource(Source):
    """A local variable (argument, cell or free variable) of the frame: `L['x']`."""

    local_name: str

    def reconstruct(self, base_expr: str) -> str:
        return f"L[{self.local_name!r}]"

    def short_name(self, base_name: str) -> str:
        return self.local_name


@dataclass(frozen=True, slots=True)
class ClosureSource(LocalSource):
    """A free variable of the frame (a closure cell's contents), read from `L` by name."""


@dataclass(frozen=True, slots=True)
class GlobalSource(Source):
    """A global of the frame's module: `G['W']`."""

    global_name: str

    def reconstruct(self, base_expr: str) -> str:
        return f"G[{self.global_name!r}]"

    def short_name(self, base_name: str) -> str:
        return self.global_name


@dataclass(frozen=True, slots=True)
class ModuleGlobalSource(Source):
    """A global of another module (a function defined there was inlined and reads it).

    The expression reads the module's dict through `sys.modules`; the
    generated guard function binds that dict once as a constant.
    """

    module_name: str
    global_name: str

    def reconstruct(self, base_expr: str) -> str:
        return f"__import__('sys').modules[{self.module_name!r}].__dict__[{self.global_name!r}]"

    def short_name(self, base_name: str) -> str:
        return f"{self.module_name}.{self.global_name}"


@dataclass(frozen=True, slots=True)
class GlobalStateSource(Source):
    """The process-wide state a graph depends on (grad mode, autocast, default dtype)."""

    def reconstruct(self, base_expr: str) -> str:
        return "None"

    def short_name(self, base_name: str) -> str:
        return "<global state>"

    def is_global(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class HeldObjectSource(Source):
    """An object capture holds itself, not read from the frame: a class whose method
    was inlined, a module whose function was called, the globals dict a name was
    looked up in. Guards on it keep the object as a constant of the guard function.

    `object_id` tells two held objects apart; `description` names it in messages.
    """

    description: str
    object_id: int

    def reconstruct(self, base_expr: str) -> str:
        return f"<{self.description}>"

    def short_name(self, base_name: str) -> str:
        return self.description

    def is_global(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class AttrSource(Source):
    """An attribute: `base.member` (`getattr(base, 'member')` when not an identifier)."""

    source: Source
    member: str

    def __post_init__(self) -> None:
        if not isinstance(self.member, str) or not self.member:
            raise SourceError(f"AttrSource member must be a non-empty str, got {self.member!r}")

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return _attr_expr(base_expr, self.member)

    def short_name(self, base_name: str) -> str:
        return f"{base_name}.{self.member}"


@dataclass(frozen=True, slots=True)
class HasAttrSource(Source):
    """Whether a value has an attribute: `hasattr(base, 'member')` (a bool)."""

    source: Source
    member: str

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"hasattr({base_expr}, {self.member!r})"

    def short_name(self, base_name: str) -> str:
        return f"hasattr({base_name}, {self.member!r})"


_ITEM_TYPES = (int, str, bool, type(None), float, bytes)


@dataclass(frozen=True, slots=True)
class ItemSource(Source):
    """An item of a list, tuple or dict: `base[index]` (an int, str or other constant key)."""

    source: Source
    index: Any

    def __post_init__(self) -> None:
        if not isinstance(self.index, _ITEM_TYPES):
            raise SourceError(
                f"ItemSource index must be an int, str, float, bool, bytes or None constant, "
                f"got {type(self.index).__name__}; guard such keys through a dict-keys guard"
            )

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"{base_expr}[{self.index!r}]"

    def short_name(self, base_name: str) -> str:
        return f"{base_name}[{self.index!r}]"


@dataclass(frozen=True, slots=True)
class CellContentsSource(Source):
    """A closure cell of a function value: `base.__closure__[index].cell_contents`."""

    source: Source
    index: int
    var_name: str = ""

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"{base_expr}.__closure__[{self.index}].cell_contents"

    def short_name(self, base_name: str) -> str:
        return f"{base_name}.<closure {self.var_name or self.index}>"


@dataclass(frozen=True, slots=True)
class DefaultArgSource(Source):
    """A default argument of a function value.

    An int index reads `base.__defaults__[index]`; a str reads the keyword-only
    default `base.__kwdefaults__['name']`.
    """

    source: Source
    index: int | str

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        if isinstance(self.index, str):
            return f"{base_expr}.__kwdefaults__[{self.index!r}]"
        return f"{base_expr}.__defaults__[{self.index}]"

    def short_name(self, base_name: str) -> str:
        return f"{base_name}.<default {self.index}>"


@dataclass(frozen=True, slots=True)
class TypeSource(Source):
    """The type of a value: `type(base)` (for guards on class attributes)."""

    source: Source

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"type({base_expr})"

    def short_name(self, base_name: str) -> str:
        return f"type({base_name})"


@dataclass(frozen=True, slots=True)
class NNModuleSource(Source):
    """Marks a source whose value is an nn.Module (e.g. `L['self']`); the expression is unchanged.

    `builtin` says whether the module's class is one of torch.nn's own
    (see `is_builtin_module_class`).
    """

    source: Source
    builtin: bool = False

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return base_expr

    def short_name(self, base_name: str) -> str:
        return base_name


@dataclass(frozen=True, slots=True)
class ModuleSource(Source):
    """A submodule of an nn.Module, from its `_modules` dict: `base._modules['linear']`."""

    source: Source
    member: str
    builtin: bool = False

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"{base_expr}._modules[{self.member!r}]"

    def short_name(self, base_name: str) -> str:
        return f"{base_name}.{self.member}"


@dataclass(frozen=True, slots=True)
class ParamBufferSource(Source):
    """A parameter (`base._parameters['w']`) or buffer (`base._buffers['w']`) of an nn.Module."""

    source: Source
    member: str
    is_buffer: bool = False

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        table = "_buffers" if self.is_buffer else "_parameters"
        return f"{base_expr}.{table}[{self.member!r}]"

    def short_name(self, base_name: str) -> str:
        return f"{base_name}.{self.member}"
