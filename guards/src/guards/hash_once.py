"""Frozen dataclasses that compute their hash once: sources and guards are dict keys
many times over while a frame is captured.

A source is a chain of objects (`L['self'].h[3].attn.c_attn.weight` is six), and the
`__hash__` that `dataclass(frozen=True)` generates hashes the whole chain again at each
dict lookup: capturing a 24-layer GPT-2 called it about 200,000 times, a cost that grows
with depth. `hash_once(cls)` wraps that generated `__hash__` to keep its value in the
instance's `_hash` slot (a field of the base class, not compared, not shown).

    @dataclass(frozen=True, slots=True)
    class Source:
        _hash: int | None = field(default=None, init=False, repr=False, compare=False)

        def __init_subclass__(cls, **kwargs):
            hash_once(cls)

`__init_subclass__` runs again for the class `dataclass(slots=True)` makes in place of
the one it decorates, with the generated `__hash__` already in it: that is the call
that wraps it. The base class's `__reduce__ = reduce_without_hash` leaves the value out
of a pickled or copied instance (string hashes differ between processes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["hash_once", "reduce_without_hash"]


def hash_once(cls: type) -> None:
    """Make `cls`'s own generated `__hash__` (if any) compute once per instance."""
    generated = cls.__dict__.get("__hash__")
    if generated is not None and not getattr(generated, "hash_once", False):

        def __hash__(self: Any) -> int:
            value = self._hash
            if value is None:
                value = generated(self)
                object.__setattr__(self, "_hash", value)
            return value

        __hash__.hash_once = True  # type: ignore[attr-defined]
        cls.__hash__ = __hash__  # type: ignore[method-assign]


def _rebuilt(cls: type, values: list[tuple[str, Any]]) -> Any:
    instance = object.__new__(cls)
    object.__setattr__(instance, "_hash", None)
    for name, value in values:
        object.__setattr__(instance, name, value)
    return instance


def reduce_without_hash(self: Any) -> tuple:
    """`__reduce__` of a hash-once dataclass: its fields but the hash."""
    values = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]
    return _rebuilt, (type(self), [(name, value) for name, value in values if name != "_hash"])
