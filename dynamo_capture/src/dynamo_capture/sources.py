"""Where a captured value came from: the Source vocabulary of `guards`, plus small helpers.

Every source renders as a Python expression over `L` (the frame's locals, free
variables included) and `G` (its globals); entry code and guards both use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guards import (
    AttrSource,
    CellContentsSource,
    ClosureSource,
    DefaultArgSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    ModuleGlobalSource,
    ModuleSource,
    NNModuleSource,
    ParamBufferSource,
    Source,
    is_builtin_module_class,
)
from guards.stable_reads import raw_attribute_link, register_stable_step

__all__ = [
    "AttrSource",
    "CellContentsSource",
    "ClosureSource",
    "DefaultArgSource",
    "FloatTensorSource",
    "GlobalSource",
    "ItemSource",
    "IteratorStateSource",
    "LocalSource",
    "ModuleGlobalSource",
    "ModuleSource",
    "ArraySizesSource",
    "BuiltinViewSource",
    "RawAttrSource",
    "TensorKeySource",
    "NumpyTensorSource",
    "NNModuleSource",
    "PlainTensorSource",
    "ParamBufferSource",
    "Source",
    "is_builtin_module_class",
    "item_source",
]

_ITEM_KEYS = (int, str, bool, type(None), float, bytes)


def item_source(base: Source | None, key: Any) -> Source | None:
    """`base[key]` where the key can be written as a constant; else None (no source)."""
    if base is None or not isinstance(key, _ITEM_KEYS):
        return None
    return ItemSource(base, key)


@dataclass(frozen=True, slots=True)
class FloatTensorSource(Source):
    """A float input handed to the graph as a 0-d float64 tensor: `___float_tensor(base)`.

    Only the entry code reads it (the graph reads the number back with `.item()`);
    guards check the float at `source` itself.
    """

    source: Source

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"___float_tensor({base_expr})"

    def short_name(self, base_name: str) -> str:
        return base_name


@dataclass(frozen=True, slots=True)
class BuiltinViewSource(Source):
    """A builtin container method's view of a subclass instance, past the subclass's own
    methods: `list.__len__(base)` (index None), `list.__getitem__(base, index)` or
    `dict.__getitem__(base, key)` (a str or int key)."""

    source: Source
    kind: str
    index: int | str | None = None

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        builtin = f"__import__('builtins').{self.kind}"
        if self.index is None:
            return f"{builtin}.__len__({base_expr})"
        return f"{builtin}.__getitem__({base_expr}, {self.index!r})"

    def short_name(self, base_name: str) -> str:
        if self.index is None:
            return f"{self.kind}.__len__({base_name})"
        return f"{self.kind}.__getitem__({base_name}, {self.index!r})"


@dataclass(frozen=True, slots=True)
class TensorKeySource(Source):
    """The item of a dict keyed by a tensor (an optimizer's `state[param]`), the key an
    input tensor read from `key`: `base[key]`. A guard reading it fails (and the frame
    compiles again) where the dict no longer holds that tensor."""

    source: Source
    key: Source

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"{base_expr}[{self.key.expr}]"

    def short_name(self, base_name: str) -> str:
        return f"{base_name}[{self.key.name}]"


@dataclass(frozen=True, slots=True)
class RawAttrSource(Source):
    """An attribute read past the class's own `__getattribute__`:
    `object.__getattribute__(base, name)`."""

    source: Source
    name: str

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"__import__('builtins').object.__getattribute__({base_expr}, {self.name!r})"

    def short_name(self, base_name: str) -> str:
        return f"object.__getattribute__({base_name}, {self.name!r})"


# A guard function's fast body may pin such a read (a transformers config's `__dict__`,
# read past the config's own `__getattribute__`) where it is stable: guards/stable_reads.py.
register_stable_step(
    RawAttrSource, lambda base, source, links: raw_attribute_link(base, source.name, links)
)


@dataclass(frozen=True, slots=True)
class IteratorStateSource(Source):
    """The state of a tuple iterator: `base.__reduce__()`, which is `(iter, (the tuple,),
    index of the next item)`, or `(iter, ((),))` once it is exhausted. Guards read the
    items not yet read through it (the iterator itself has no other view of them)."""

    source: Source

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"{base_expr}.__reduce__()"

    def short_name(self, base_name: str) -> str:
        return f"{base_name}.__reduce__()"


@dataclass(frozen=True, slots=True)
class ArraySizesSource(Source):
    """An ndarray input seen as the tensor the graph takes, for reading its sizes and
    strides (in elements) where they are symbolic: guards and entry code read
    `ArraySizesSource(L['a'])` as `torch.from_numpy(L['a'])`, which shares the array's
    memory (no copy)."""

    source: Source

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"__import__('torch').from_numpy({base_expr})"

    def short_name(self, base_name: str) -> str:
        return base_name


@dataclass(frozen=True, slots=True)
class PlainTensorSource(Source):
    """An input of a tensor subclass with its own `__torch_function__` handed to the
    graph as a plain tensor: `___as_plain(base)` (see torch_function_dispatch).

    Only the entry code reads it; guards check the tensor at `source` itself.
    """

    source: Source

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"___as_plain({base_expr})"

    def short_name(self, base_name: str) -> str:
        return base_name


@dataclass(frozen=True, slots=True)
class NumpyTensorSource(Source):
    """An ndarray (or NumPy scalar) input handed to the graph as a tensor:
    `___from_numpy(base)`.

    Only the entry code reads it; guards check the array at `source` itself.
    """

    source: Source

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"___from_numpy({base_expr})"

    def short_name(self, base_name: str) -> str:
        return base_name
