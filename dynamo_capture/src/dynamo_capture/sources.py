"""Where a captured value came from: the Source vocabulary of `guards`, plus small helpers.

Every source renders as a Python expression over `L` (the frame's locals, free
variables included) and `G` (its globals); entry code and guards both use it.
"""

from __future__ import annotations

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

__all__ = [
    "AttrSource",
    "CellContentsSource",
    "ClosureSource",
    "DefaultArgSource",
    "GlobalSource",
    "ItemSource",
    "LocalSource",
    "ModuleGlobalSource",
    "ModuleSource",
    "NNModuleSource",
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
