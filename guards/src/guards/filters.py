"""Guard filtering: the user decides which guards of a compiled frame to keep.

`ember.compile(fn, options={"guard_filter_fn": fn})` calls `fn(entries)` once
per compiled frame with one `GuardFilterEntry` per guard and expects one bool per
entry (True keeps the guard). The six helpers below have torch's
semantics; all of them are unsafe in the sense that a dropped guard can let a
stale compiled entry run on inputs it was not compiled for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "GuardFilterEntry",
    "GuardFilterError",
    "apply_guard_filter",
    "keep_portable_guards_unsafe",
    "keep_tensor_guards_unsafe",
    "skip_all_guards_unsafe",
    "skip_guard_on_all_nn_modules_unsafe",
    "skip_guard_on_globals_unsafe",
    "skip_guard_on_inbuilt_nn_modules_unsafe",
]


class GuardFilterError(TypeError):
    """A guard filter function gave an answer that is not one bool per entry."""


@dataclass(frozen=True, slots=True)
class GuardFilterEntry:
    """What a guard filter sees of one guard; the fields torch's compiler gives.

    name: the source expression the guard checks (e.g. "L['x']").
    has_value / value: the value seen at compile time, where there is one.
    guard_type: e.g. "TENSOR_MATCH", "TYPE_MATCH", "ID_MATCH", "EQUALS_MATCH",
        "GLOBAL_STATE", "SHAPE_ENV", "NN_MODULE", "DICT_KEYS", "LENGTH_CHECK".
    derived_guard_types: guard types this guard implies (e.g. a TENSOR_MATCH
        implies TYPE_MATCH on the same source).
    is_global: whether the source is rooted in the frame's globals.
    orig_guard: the guard itself; its `source` answers `is_nn_module()` and
        `is_builtin_nn_module()`.
    """

    name: str
    has_value: bool
    value: Any
    guard_type: str
    derived_guard_types: tuple[str, ...]
    is_global: bool
    orig_guard: Any


def apply_guard_filter(
    filter_fn: Callable[[list[GuardFilterEntry]], Sequence[bool]],
    entries: list[GuardFilterEntry],
) -> list[bool]:
    """Run `filter_fn` and check its answer: a list of exactly one bool per entry."""
    answer = filter_fn(entries)
    name = getattr(filter_fn, "__qualname__", repr(filter_fn))
    if not isinstance(answer, list | tuple):
        raise GuardFilterError(
            f"guard_filter_fn {name} returned {type(answer).__name__}; "
            f"it must return a list of bools, one per guard entry ({len(entries)} entries)"
        )
    if len(answer) != len(entries):
        raise GuardFilterError(
            f"guard_filter_fn {name} returned {len(answer)} values for {len(entries)} "
            "guard entries; it must return exactly one bool per entry"
        )
    for index, keep in enumerate(answer):
        if not isinstance(keep, bool):
            raise GuardFilterError(
                f"guard_filter_fn {name} returned {keep!r} ({type(keep).__name__}) at index "
                f"{index} (guard {entries[index].name!r}); every value must be True or False"
            )
    return list(answer)


def skip_guard_on_inbuilt_nn_modules_unsafe(entries: list[GuardFilterEntry]) -> list[bool]:
    """Drop guards on torch.nn's own modules (Linear, LayerNorm, ...) and their attributes.

    Safe when model code never changes such a module's attributes after compiling.
    """
    return [not entry.orig_guard.source.is_builtin_nn_module() for entry in entries]


def skip_guard_on_all_nn_modules_unsafe(entries: list[GuardFilterEntry]) -> list[bool]:
    """Drop guards on every nn.Module, user-defined ones included, and their attributes."""
    return [not entry.orig_guard.source.is_nn_module() for entry in entries]


def keep_tensor_guards_unsafe(
    entries: list[GuardFilterEntry], keep_parameters: bool = False
) -> list[bool]:
    """Keep only tensor guards; parameters' tensor guards too when `keep_parameters`."""
    return [
        entry.guard_type == "TENSOR_MATCH"
        and (keep_parameters or not isinstance(entry.value, torch.nn.Parameter))
        for entry in entries
    ]


def skip_guard_on_globals_unsafe(entries: list[GuardFilterEntry]) -> list[bool]:
    """Drop every guard whose source is rooted in the frame's globals."""
    return [not entry.is_global for entry in entries]


def skip_all_guards_unsafe(entries: list[GuardFilterEntry]) -> list[bool]:
    """Drop every guard: the first compiled entry runs for any input. No safety left."""
    return [False for _ in entries]


def keep_portable_guards_unsafe(entries: list[GuardFilterEntry]) -> list[bool]:
    """Keep what holds outside this process: global state, shapes, and local tensors' metadata."""
    return [
        entry.guard_type in ("GLOBAL_STATE", "SHAPE_ENV")
        or (entry.guard_type == "TENSOR_MATCH" and not entry.is_global)
        for entry in entries
    ]
