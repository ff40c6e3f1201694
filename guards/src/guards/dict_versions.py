"""Dict version tags: CPython's per-dict stamp that changes on every write to the dict.

CPython 3.11 to 3.13 keep in each dict a 64-bit `ma_version_tag` that takes a
new, process-wide unique value whenever the dict is written: an item set,
deleted, `update`, `clear`, `pop`, and an attribute stored into an object's
materialized `__dict__` (by `setattr`, `object.__setattr__` or plain
assignment). Python code cannot read it; `VersionTags` reads it through
ctypes at its fixed offset in the dict object (after the object header and
`ma_used`), and holds the dicts, so the memory it reads stays theirs.

`AVAILABLE` says whether the tags work here: the interpreter is CPython 3.11
to 3.13 and a self-test at import found `ma_used` (the length) where the
layout puts it and a new tag after each kind of write above. Elsewhere (a
free-threaded build, 3.14, which dropped the versioning, another
implementation) nothing uses them and guards are checked one by one.
"""

from __future__ import annotations

import ctypes
import operator
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["AVAILABLE", "VersionTags"]

_WORD = ctypes.sizeof(ctypes.c_void_p)
_USED_OFFSET = 2 * _WORD  # ob_refcnt, ob_type
_TAG_OFFSET = _USED_OFFSET + ctypes.sizeof(ctypes.c_ssize_t)
_value = operator.attrgetter("value")


def _tag(d: dict) -> int:
    return ctypes.c_uint64.from_address(id(d) + _TAG_OFFSET).value


def _self_test() -> bool:
    """Whether `ma_used` and `ma_version_tag` are where this module reads them, and the tag
    changes on each kind of write a module's dicts see."""
    if sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] <= (3, 13):
        return False
    if getattr(sys, "_is_gil_enabled", lambda: True)() is False:
        return False
    for d in ({}, {"a": 1}, dict.fromkeys(range(40))):
        if ctypes.c_ssize_t.from_address(id(d) + _USED_OFFSET).value != len(d):
            return False

    class Probe:
        pass

    probe = Probe()
    probe.a = 1
    instance = probe.__dict__
    writes = (
        lambda d: d.__setitem__("k", 1),
        lambda d: d.__setitem__("k", 2),
        lambda d: d.update(j=3),
        lambda d: d.pop("j"),
        lambda d: d.__delitem__("k"),
        lambda d: d.clear(),
    )
    target: dict[str, Any] = {}
    for write in writes:
        before = _tag(target)
        write(target)
        if _tag(target) == before:
            return False
    stores = (
        lambda: setattr(probe, "a", 2),
        lambda: object.__setattr__(probe, "b", 3),
        lambda: probe.__dict__.__setitem__("c", 4),
        lambda: delattr(probe, "b"),
    )
    for store in stores:
        before = _tag(instance)
        store()
        if _tag(instance) == before or probe.__dict__ is not instance:
            return False
    probe.a = 5  # plain STORE_ATTR
    return instance["a"] == 5 and _tag(instance) != 0


AVAILABLE = _self_test()


# NOTE: one array type spanning 2**47 bytes from the lowest tag read: a memoryview of
# it reads the tags of many dicts in one C call (`itemgetter` of their indices), about
# half the cost of a ctypes cell's `value` each. Only the words of held dicts are read.
_SPAN_WORDS = 1 << 44
_Span = ctypes.c_uint64 * _SPAN_WORDS


class VersionTags:
    """The tags of some dicts: `changed()` is True once any of them was written since
    `snapshot()` (or when none was taken). Holds the dicts."""

    __slots__ = ("_dicts", "_memory", "_read", "_seen")

    def __init__(self, dicts: Sequence[dict]) -> None:
        if not AVAILABLE:
            raise RuntimeError("dict version tags are not available on this interpreter")
        self._dicts = tuple(dicts)
        addresses = [id(d) + _TAG_OFFSET for d in self._dicts]
        low = min(addresses, default=0)
        words = [(address - low) // _WORD for address in addresses]
        if (
            len(addresses) > 1
            and all(address % _WORD == 0 for address in addresses)
            and max(words) < _SPAN_WORDS
        ):
            self._memory: Any = memoryview(_Span.from_address(low)).cast("B").cast("Q")
            self._read: Any = operator.itemgetter(*words)
        else:  # one dict, or addresses this layout cannot index: a ctypes cell each
            self._memory = tuple(ctypes.c_uint64.from_address(a) for a in addresses)
            self._read = _read_cells
        self._seen: Any = None

    def read(self) -> Any:
        """The tags now."""
        return self._read(self._memory)

    def snapshot(self, tags: Any) -> None:
        """Remember `tags` (read with `read()` before the check they stand for)."""
        self._seen = tags

    def changed(self) -> bool:
        return self._read(self._memory) != self._seen

    def __len__(self) -> int:
        return len(self._dicts)


def _read_cells(cells: tuple[ctypes.c_uint64, ...]) -> tuple[int, ...]:
    return tuple(map(_value, cells))


def _span_agrees() -> bool:
    """Whether the span reads the same tags as a ctypes cell each (checked at import)."""
    dicts: list[dict] = [{}, {"a": 1}, dict.fromkeys(range(40))]
    return VersionTags(dicts).read() == tuple(map(_tag, dicts))


AVAILABLE = AVAILABLE and _span_agrees()
