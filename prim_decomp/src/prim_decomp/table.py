"""`DecompositionTable`: a value mapping ATen OpOverloads to Python decompositions.

A decomposition is a plain Python function taking the op's arguments and
returning what the op returns, computed with other ops. It may return
`NotImplemented` to decline a call (the op is then kept whole).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch

from prim_decomp.errors import DuplicateDecompositionError, FrozenTableError

__all__ = ["Decomposition", "DecompositionTable", "OpLike"]

OpLike = torch._ops.OpOverload | torch._ops.OpOverloadPacket
_REPR_OPS = 8


@dataclass(frozen=True, slots=True)
class Decomposition:
    """One entry of a table: the op, its decomposition, and where that is defined."""

    op: torch._ops.OpOverload
    fn: Callable

    @property
    def location(self) -> str:
        """`module:line` of the decomposition's definition (`module` alone for builtins)."""
        fn = inspect.unwrap(self.fn)
        code = getattr(fn, "__code__", None)
        module = getattr(fn, "__module__", None) or "?"
        return f"{module}:{code.co_firstlineno}" if code is not None else module


def _overloads(op: object) -> list[torch._ops.OpOverload]:
    """The overloads `op` names: itself, or every overload of a packet."""
    if isinstance(op, torch._ops.OpOverload):
        return [op]
    if isinstance(op, torch._ops.OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    raise TypeError(
        f"expected a torch OpOverload (e.g. torch.ops.aten.add.Tensor) or an "
        f"OpOverloadPacket (e.g. torch.ops.aten.add), got {type(op).__name__}: {op!r}"
    )


def _flatten_ops(ops: Iterable[object]) -> list[torch._ops.OpOverload]:
    found: list[torch._ops.OpOverload] = []
    for op in ops:
        if isinstance(op, (list, tuple, set, frozenset)):
            found += _flatten_ops(op)
        else:
            found += _overloads(op)
    return found


class DecompositionTable(Mapping):
    """A mapping `OpOverload -> decomposition function`, used as a value.

    Stable API. Tables compose and shrink without mutating their operands:

        table = core_aten | my_rules              # right side wins on shared ops
        smaller = table.without(torch.ops.aten.gelu)   # a packet drops every overload
        "gelu.default" in smaller.describe()      # False

    A table grows in place with `register`, unless it is frozen (the named
    tables are); `copy()` gives a growable copy:

        mine = inductor_default.copy()

        @mine.register(torch.ops.aten.gelu.default, replace=True)
        def gelu(x, approximate="none"):
            ...
    """

    __slots__ = ("_entries", "name", "frozen")

    def __init__(
        self,
        entries: Mapping[torch._ops.OpOverload, Callable] | None = None,
        *,
        name: str = "table",
        frozen: bool = False,
    ) -> None:
        self._entries: dict[torch._ops.OpOverload, Callable] = {}
        for op, fn in (entries or {}).items():
            self._entries.update(dict.fromkeys(_overloads(op), fn))
        self.name = name
        self.frozen = frozen

    # --- the mapping -------------------------------------------------------
    def __getitem__(self, op: torch._ops.OpOverload) -> Callable:
        return self._entries[op]

    def __contains__(self, op: object) -> bool:
        return op in self._entries

    def __iter__(self) -> Iterator[torch._ops.OpOverload]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, op: object, default: Callable | None = None) -> Callable | None:
        """The decomposition of `op`, or `default` when the table has none."""
        return self._entries.get(op, default)

    # --- values from values ------------------------------------------------
    def __or__(self, other: Mapping) -> DecompositionTable:
        """A new table holding both; for an op in both, `other`'s decomposition wins."""
        if not isinstance(other, Mapping):
            return NotImplemented
        other_name = getattr(other, "name", type(other).__name__)
        merged = DecompositionTable(self._entries, name=f"{self.name} | {other_name}")
        for op, fn in other.items():
            merged._entries.update(dict.fromkeys(_overloads(op), fn))
        return merged

    def __ror__(self, other: Mapping) -> DecompositionTable:
        if not isinstance(other, Mapping):
            return NotImplemented
        return DecompositionTable(other, name=type(other).__name__) | self

    def without(self, *ops: OpLike | Iterable[OpLike]) -> DecompositionTable:
        """A new table without `ops` (overloads, packets, or iterables of them).

        Ops the table does not hold are ignored, so a kept-whole list can be
        shared between tables.
        """
        dropped = set(_flatten_ops(ops))
        kept = {op: fn for op, fn in self._entries.items() if op not in dropped}
        return DecompositionTable(kept, name=f"{self.name}.without(...)")

    def only(self, *ops: OpLike | Iterable[OpLike]) -> DecompositionTable:
        """A new table holding only the entries for `ops` that this table has."""
        wanted = set(_flatten_ops(ops))
        kept = {op: fn for op, fn in self._entries.items() if op in wanted}
        return DecompositionTable(kept, name=f"{self.name}.only(...)")

    def copy(self, *, name: str | None = None) -> DecompositionTable:
        """A growable (unfrozen) copy."""
        return DecompositionTable(self._entries, name=name or self.name)

    def freeze(self) -> DecompositionTable:
        """A frozen copy: `register` on it raises `FrozenTableError`."""
        return DecompositionTable(self._entries, name=self.name, frozen=True)

    # --- growing -----------------------------------------------------------
    def register(
        self, *ops: OpLike | Iterable[OpLike], replace: bool = False
    ) -> Callable[[Callable], Callable]:
        """Decorator: make the function the decomposition of `ops` in this table.

        Registering an op the table already holds raises
        `DuplicateDecompositionError` unless `replace=True`. A packet registers
        every overload it has.
        """
        overloads = _flatten_ops(ops)
        if not overloads:
            raise TypeError("register(...) needs at least one op")

        def decorator(fn: Callable) -> Callable:
            self.add(overloads, fn, replace=replace)
            return fn

        return decorator

    def add(self, ops: OpLike | Iterable[OpLike], fn: Callable, *, replace: bool = False) -> None:
        """Non-decorator form of `register`."""
        if self.frozen:
            raise FrozenTableError(
                f"table {self.name!r} is frozen; grow a copy instead: "
                f"`mine = {self.name}.copy()` then `@mine.register(op)`"
            )
        overloads = _flatten_ops([ops])
        for op in overloads:
            if op in self._entries and not replace:
                where = Decomposition(op, self._entries[op]).location
                raise DuplicateDecompositionError(
                    f"{op} already has a decomposition in table {self.name!r} "
                    f"(defined at {where}); pass replace=True to override it"
                )
        self._entries.update(dict.fromkeys(overloads, fn))

    # --- reading -----------------------------------------------------------
    def entries(self) -> list[Decomposition]:
        """Every entry, sorted by op name."""
        ordered = sorted(self._entries.items(), key=lambda item: str(item[0]))
        return [Decomposition(op, fn) for op, fn in ordered]

    def location(self, op: torch._ops.OpOverload) -> str:
        """Where `op`'s decomposition is defined (`module:line`)."""
        return Decomposition(op, self._entries[op]).location

    def describe(self) -> str:
        """One line per op: its name, the function, and `module:line`."""
        lines = [f"DecompositionTable {self.name!r}: {len(self)} ops"]
        for entry in self.entries():
            fn_name = getattr(entry.fn, "__qualname__", repr(entry.fn))
            lines.append(f"  {str(entry.op):<50} {fn_name:<36} {entry.location}")
        return "\n".join(lines)

    def fingerprint(self) -> str:
        """A stable hash of the entries (op names and where each rule is defined).

        Two tables with the same rules share a fingerprint, so it can be one part
        of a compile cache key.
        """
        digest = hashlib.sha256()
        for entry in self.entries():
            qualname = getattr(entry.fn, "__qualname__", repr(entry.fn))
            digest.update(f"{entry.op}={qualname}@{entry.location};".encode())
        return digest.hexdigest()[:16]

    def __repr__(self) -> str:
        names = sorted(str(op) for op in self._entries)
        shown = ", ".join(names[:_REPR_OPS])
        more = f", ... ({len(names) - _REPR_OPS} more; .describe() lists all)"
        tail = more if len(names) > _REPR_OPS else ""
        frozen = ", frozen" if self.frozen else ""
        return f"DecompositionTable({self.name!r}{frozen}: {len(names)} ops: {shown}{tail})"
