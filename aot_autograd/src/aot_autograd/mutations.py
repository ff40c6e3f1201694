"""In-place and mutating ATen ops and their functional variants.

`functional_variant(op)` names the op that computes the same result without
writing to its inputs, and says how its outputs map back to the arguments it
replaced: a `FunctionalForm`. The rule is the ATen naming convention
(`add_` -> `add`, `_foo` with `Tensor(a!)` arguments -> `_foo_functional`),
with `FUNCTIONAL_OVERRIDES` for the ops that break it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from aot_autograd.errors import UnsupportedMutationError

__all__ = [
    "DRAWN_IN_CONTIGUOUS_ORDER",
    "FUNCTIONAL_OVERRIDES",
    "FunctionalForm",
    "functional_variant",
    "memory_order",
    "mutated_arguments",
]

aten = torch.ops.aten


@dataclass(frozen=True, slots=True)
class FunctionalForm:
    """How to run a mutating op functionally.

    `op` takes the same arguments; `self_result` says its output 0 is the new
    value of argument 0 (the `add_` family); otherwise its outputs are the
    mutating op's own outputs followed by the new value of each mutated
    argument, in `mutated` order (the `_functional` family).
    """

    op: Any
    mutated: tuple[int, ...]
    self_result: bool
    changes_view: bool = False
    writes_out: bool = False


# In-place op -> functional op, where the name is not the in-place name less its `_`.
FUNCTIONAL_OVERRIDES: dict[Any, Any] = {
    aten.bernoulli_.float: aten.bernoulli.p,
    aten.bernoulli_.Tensor: aten.bernoulli.Tensor,
    aten.normal_.default: aten.normal_functional.default,
    aten.copy_.default: aten.copy.default,
    aten.set_.source_Tensor: None,
}


# Functional forms of random in-place ops that draw into a contiguous tensor of their
# own, where the in-place op fills `self` in its memory order: `bernoulli(t, p)` is
# `empty_like(t, contiguous).bernoulli_(p)`, so for a transposed or channels-last `t` it
# gives other elements the same numbers than `t.bernoulli_(p)` (`F.dropout`'s mask).
# Their values do not depend on `self`'s: the tracer draws on `self` permuted to its
# memory order and permutes the draw back (`memory_order`). (`uniform`, `normal_functional`
# clone `self` and fill the clone in its own memory order: alike.)
DRAWN_IN_CONTIGUOUS_ORDER = frozenset({aten.bernoulli.p})


def memory_order(t: torch.Tensor) -> list[int] | None:
    """The dims of a dense, non-overlapping `t` from the largest stride to the smallest:
    the order its memory holds its elements in. None where its strides are symbolic or
    it is not dense (a size-1 dim's stride says nothing and may sit anywhere)."""
    sizes, strides = list(t.shape), list(t.stride())
    if not all(type(n) is int for n in (*sizes, *strides)):
        return None
    order = sorted(range(t.dim()), key=lambda d: (-strides[d], d))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return None
        expected *= sizes[d]
    return order


def mutated_arguments(op: torch._ops.OpOverload) -> tuple[int, ...]:
    """Positions of the arguments `op` writes to (`Tensor(a!)` in its schema)."""
    return tuple(
        i
        for i, argument in enumerate(op._schema.arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
    )


def _signature(op: Any, skip: tuple[int, ...] = ()) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for i, a in enumerate(op._schema.arguments) if i not in skip]


def _matching_overload(packet_name: str, like: Any, skip: tuple[int, ...] = ()) -> Any:
    """The overload of aten.`packet_name` taking `like`'s arguments (less `skip`), or None."""
    packet = getattr(aten, packet_name, None)
    if packet is None:
        return None
    wanted = _signature(like, skip)
    for name in packet.overloads():
        candidate = getattr(packet, name)
        if _signature(candidate) == wanted:
            return candidate
    return None


def _is_view(op: Any) -> bool:
    return any(r.alias_info is not None for r in op._schema.returns)


def functional_variant(op: torch._ops.OpOverload) -> FunctionalForm:
    """The functional form of mutating `op`; an error naming `op` if there is none."""
    mutated = mutated_arguments(op)
    name = op._schema.name.split("::")[-1]
    if any(op._schema.arguments[i].kwarg_only for i in mutated):
        target = _matching_overload(name, op, skip=mutated)
        if target is None:
            raise UnsupportedMutationError(
                f"{op} writes its result into an out= argument and has no functional "
                "overload; call the functional form of the op instead"
            )
        return FunctionalForm(target, mutated, self_result=False, writes_out=True)
    if op in FUNCTIONAL_OVERRIDES:
        target = FUNCTIONAL_OVERRIDES[op]
        if target is None:
            raise UnsupportedMutationError(
                f"{op} changes a tensor's size or storage, which functionalization does not "
                "support; build a new tensor instead"
            )
        return FunctionalForm(target, mutated, self_result=True)
    if name.endswith("_") and mutated == (0,):
        target = _matching_overload(name[:-1], op)
        if target is not None:
            return FunctionalForm(target, mutated, self_result=True, changes_view=_is_view(target))
    target = _matching_overload(name + "_functional", op)
    if target is not None:
        return FunctionalForm(target, mutated, self_result=False)
    raise UnsupportedMutationError(
        f"{op} mutates its inputs and has no functional variant; add one to "
        "aot_autograd.mutations.FUNCTIONAL_OVERRIDES"
    )
