"""Where a captured value came from, as a Python expression over `L` and `G`.

`L` maps the frame's locals (free variables included) by name, `G` is the
frame's globals. A global of another module is reached through `M['module']`,
that module's globals. These classes follow the Source vocabulary of `guards`
(LocalSource, GlobalSource, AttrSource, ItemSource, ...); each has `.expr` (the
expression), `.name` (a short identifier for graph placeholders) and `.depth`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "AttrSource",
    "GlobalSource",
    "ItemSource",
    "LocalSource",
    "ModuleGlobalSource",
    "Source",
    "is_global_source",
]


class Source:
    """Base of every source: an expression that finds a value from a frame's L and G."""

    __slots__ = ()

    @property
    def expr(self) -> str:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return re.sub(r"[^0-9a-zA-Z_]+", "_", self.expr).strip("_") or "value"

    @property
    def depth(self) -> int:
        return 0

    def root(self) -> Source:
        return self

    def __str__(self) -> str:
        return self.expr


@dataclass(frozen=True, slots=True)
class LocalSource(Source):
    """A local variable (or free variable) of the captured frame."""

    local_name: str

    @property
    def expr(self) -> str:
        return f"L[{self.local_name!r}]"


@dataclass(frozen=True, slots=True)
class GlobalSource(Source):
    """A global of the captured frame's module."""

    global_name: str

    @property
    def expr(self) -> str:
        return f"G[{self.global_name!r}]"


@dataclass(frozen=True, slots=True)
class ModuleGlobalSource(Source):
    """A global of another module (a function inlined from elsewhere reads it)."""

    module: str
    global_name: str

    @property
    def expr(self) -> str:
        return f"M[{self.module!r}][{self.global_name!r}]"


@dataclass(frozen=True, slots=True)
class AttrSource(Source):
    """`base.attr`."""

    base: Source
    attr: str

    @property
    def expr(self) -> str:
        if self.attr.isidentifier():
            return f"{self.base.expr}.{self.attr}"
        return f"getattr({self.base.expr}, {self.attr!r})"

    @property
    def depth(self) -> int:
        return self.base.depth + 1

    def root(self) -> Source:
        return self.base.root()


@dataclass(frozen=True, slots=True)
class ItemSource(Source):
    """`base[index]` for a constant index (an int, a str, ...)."""

    base: Source
    index: object

    @property
    def expr(self) -> str:
        return f"{self.base.expr}[{self.index!r}]"

    @property
    def depth(self) -> int:
        return self.base.depth + 1

    def root(self) -> Source:
        return self.base.root()


def is_global_source(source: Source) -> bool:
    """Whether `source` starts from globals (of this module or another)."""
    return isinstance(source.root(), GlobalSource | ModuleGlobalSource)
