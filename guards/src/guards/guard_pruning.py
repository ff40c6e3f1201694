"""Guards implied by others on the same value: left out of the generated function.

The generated function is the conjunction of its guards, so a guard that holds
whenever another one of the set holds adds nothing but its cost. The rules,
keyed by the kind of the implied guard:

- TYPE_MATCH is implied by a guard on the same value that already pins its
  exact type: ID_MATCH and NN_MODULE (the very object: its type), EQUALS_MATCH
  (which compares exact types), TENSOR_MATCH (exact tensor class, or the very
  object when identity is trusted).
- EQUALS_MATCH of `m.training` is implied by an NN_MODULE guard on `m` that
  expects the same flag.
- LENGTH_CHECK is implied by DICT_KEYS_MATCH (its keys have that length) and
  by an EQUALS_MATCH on a tuple of that length.

The implying guard's first check moves up to the implied guard's place in the
check order, so an object of the wrong type is still rejected before its
attributes are read.
`CompiledGuards.guards` keeps every guard, so `why_failed` speaks as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from guards.guard_kinds import (
    DictKeysGuard,
    EqualsGuard,
    Guard,
    IdGuard,
    LengthGuard,
    NNModuleGuard,
    TypeGuard,
)
from guards.sources import AttrSource
from guards.tensor_guards import TensorMatchGuard

__all__ = ["IMPLIED_BY", "drop_implied"]


def _exact_type(guard: Guard) -> type | None:
    """The exact type a value must have for `guard` to hold, if the guard pins one."""
    if isinstance(guard, IdGuard | NNModuleGuard):
        obj = guard.ref()
        return None if obj is None else type(obj)
    if isinstance(guard, EqualsGuard):
        return type(guard.expected)
    if isinstance(guard, TensorMatchGuard):
        return guard.tensor_type
    return None


def _type_implied(guard: Guard, other: Guard) -> bool:
    assert isinstance(guard, TypeGuard)
    return other.source.expr == guard.source.expr and _exact_type(other) is guard.expected_type


def _equals_implied(guard: Guard, other: Guard) -> bool:
    assert isinstance(guard, EqualsGuard)
    source = guard.source
    return (
        isinstance(other, NNModuleGuard)
        and isinstance(source, AttrSource)
        and source.member == "training"
        and type(guard.expected) is bool
        and other.source.expr == source.source.expr
        and other.training is guard.expected
    )


def _length_implied(guard: Guard, other: Guard) -> bool:
    assert isinstance(guard, LengthGuard)
    if other.source.expr != guard.source.expr:
        return False
    if isinstance(other, DictKeysGuard):
        return len(other.keys) == guard.length
    return (
        isinstance(other, EqualsGuard)
        and type(other.expected) is tuple
        and len(other.expected) == guard.length
    )


IMPLIED_BY: dict[type[Guard], Callable[[Guard, Guard], bool]] = {
    TypeGuard: _type_implied,
    EqualsGuard: _equals_implied,
    LengthGuard: _length_implied,
}


def drop_implied(guards: Sequence[Guard]) -> dict[Guard, Guard]:
    """The guards of `guards` implied by another of them, each mapped to one that implies it."""
    by_value: dict[str, list[Guard]] = {}
    for guard in guards:
        by_value.setdefault(guard.source.expr, []).append(guard)
    implied: dict[Guard, Guard] = {}
    for guard in guards:
        rule = IMPLIED_BY.get(type(guard))
        if rule is None:
            continue
        near = by_value.get(guard.source.expr, []) + by_value.get(_owner_expr(guard), [])
        implier = next((o for o in near if o is not guard and rule(guard, o)), None)
        if implier is not None:
            implied[guard] = implier
    return implied


def _owner_expr(guard: Guard) -> str:
    """For a guard on `m.training`, the expression of `m` (where its NN_MODULE guard lives)."""
    source = guard.source
    if isinstance(source, AttrSource) and source.member == "training":
        return source.source.expr
    return ""
