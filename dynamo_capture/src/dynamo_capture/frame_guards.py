"""The guards of one captured frame, compiled to one straight-line Python function.

Capture records a `Guard` for every value it relied on (its source, the kind of
assumption, the value seen). `FrameGuards.compile()` generates

    def guard(L, G, M):
        return (type(L['x']) is ___c0 and ...)

registered with linecache, and `why_failed(L, G, M)` names the first guard that
does not hold. Guard kinds and filter entries use the vocabulary of `guards`
(TENSOR_MATCH, TYPE_MATCH, ID_MATCH, EQUALS_MATCH, LENGTH_CHECK, DICT_KEYS,
GLOBAL_STATE, NN_MODULE).
"""

from __future__ import annotations

import itertools
import linecache
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dynamo_capture.sources import Source, is_global_source
from guards import GuardFilterEntry, apply_guard_filter

__all__ = ["CompiledGuards", "FrameGuards", "Guard"]

_counter = itertools.count()


@dataclass(frozen=True, slots=True)
class Guard:
    """One assumption: `source` (None for global state) has `value` in the sense of `kind`."""

    kind: str
    source: Source | None
    value: Any
    expr_template: str
    is_nn_module_value: bool = False
    is_builtin_nn_module_value: bool = False

    @property
    def name(self) -> str:
        return self.source.expr if self.source is not None else "<global state>"

    def is_nn_module(self) -> bool:
        return self.is_nn_module_value

    def is_builtin_nn_module(self) -> bool:
        return self.is_builtin_nn_module_value


def _tensor_check(expr: str, value: torch.Tensor, const: Callable[[Any], str]) -> str:
    var = f"___t{next(_counter)}"
    parts = [
        f"type({var} := {expr}) is {const(type(value))}",
        f"{var}.dtype is {const(value.dtype)}",
        f"{var}.device == {const(value.device)}",
        f"{var}.shape == {tuple(value.shape)!r}",
        f"{var}.stride() == {tuple(value.stride())!r}",
        f"{var}.requires_grad is {value.requires_grad!r}",
    ]
    return "(" + " and ".join(parts) + ")"


class FrameGuards:
    """Collects the guards of one capture, in the order the values were first used."""

    def __init__(self) -> None:
        self.guards: list[Guard] = []
        self._seen: set[tuple[str, str]] = set()
        self._constants: list[Any] = []

    def _const(self, value: Any) -> str:
        for index, existing in enumerate(self._constants):
            if existing is value:
                return f"___c{index}"
        self._constants.append(value)
        return f"___c{len(self._constants) - 1}"

    def _add(
        self, kind: str, source: Source | None, value: Any, template: str, **flags: bool
    ) -> None:
        key = (kind, template)
        if key in self._seen:
            return
        self._seen.add(key)
        self.guards.append(Guard(kind, source, value, template, **flags))

    def type_match(self, source: Source, value: Any) -> None:
        self._add("TYPE_MATCH", source, value, f"type({source.expr}) is {self._const(type(value))}")

    def id_match(self, source: Source, value: Any) -> None:
        module = isinstance(value, torch.nn.Module)
        builtin = module and type(value).__module__.startswith("torch.nn")
        self._add(
            "ID_MATCH",
            source,
            value,
            f"{source.expr} is {self._const(value)}",
            is_nn_module_value=module,
            is_builtin_nn_module_value=builtin,
        )

    def equals_match(self, source: Source, value: Any) -> None:
        text = f"type({source.expr}) is {self._const(type(value))} and {source.expr} == {self._const(value)}"
        self._add("EQUALS_MATCH", source, value, f"({text})")

    def tensor_match(self, source: Source, value: torch.Tensor) -> None:
        text = _tensor_check(source.expr, value, self._const)
        self._add("TENSOR_MATCH", source, value, text)

    def length_check(self, source: Source, value: Any) -> None:
        text = f"(type({source.expr}) is {self._const(type(value))} and len({source.expr}) == {len(value)})"
        self._add("LENGTH_CHECK", source, value, text)

    def dict_keys(self, source: Source, value: dict[Any, Any]) -> None:
        keys = self._const(list(value.keys()))
        text = (
            f"(type({source.expr}) is {self._const(type(value))} and list({source.expr}) == {keys})"
        )
        self._add("DICT_KEYS", source, value, text)

    def alias(self, source: Source, other: Source) -> None:
        self._add("ID_MATCH", source, None, f"{source.expr} is {other.expr}")

    def expression(self, kind: str, source: Source | None, value: Any, text: str) -> None:
        """A guard written as a Python expression over L, G and M."""
        self._add(kind, source, value, text)

    def constant(self, value: Any) -> str:
        """The name under which `value` is visible to guard expressions."""
        return self._const(value)

    def filter_entries(self) -> list[GuardFilterEntry]:
        return [
            GuardFilterEntry(
                name=guard.name,
                has_value=guard.value is not None,
                value=guard.value,
                guard_type=guard.kind,
                derived_guard_types=("TYPE_MATCH",) if guard.kind == "TENSOR_MATCH" else (),
                is_global=guard.source is not None and is_global_source(guard.source),
                orig_guard=_FilterView(guard),
            )
            for guard in self.guards
        ]

    def compile(self, guard_filter_fn: Callable[..., Any] | None = None) -> CompiledGuards:
        """Generate and compile the guard function (after the user's filter, if any)."""
        kept = self.guards
        if guard_filter_fn is not None:
            keep = apply_guard_filter(guard_filter_fn, self.filter_entries())
            kept = [guard for guard, flag in zip(self.guards, keep, strict=True) if flag]
        return CompiledGuards(kept, list(self._constants))


@dataclass(frozen=True, slots=True)
class _FilterView:
    """What a guard filter sees as `entry.orig_guard`: the guard and its source's kind."""

    guard: Guard

    @property
    def source(self) -> Guard:
        return self.guard


@dataclass
class CompiledGuards:
    """The guard function of one cache entry, with its source text."""

    guards: list[Guard]
    constants: list[Any]
    source: str = ""
    check: Callable[[Any, Any, Any], bool] = field(default=lambda L, G, M: True)
    _single: list[Callable[[Any, Any, Any], bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        name = f"___guard_{next(_counter)}"
        body = " and\n        ".join(g.expr_template for g in self.guards) or "True"
        self.source = (
            f"def {name}(L, G, M):\n    try:\n        return bool(\n        {body}\n        )\n"
            "    except Exception:\n        return False\n"
        )
        scope = {f"___c{i}": value for i, value in enumerate(self.constants)}
        self.check = _compile_function(self.source, name, scope)
        self._single = []

    def why_failed(self, L: Any, G: Any, M: Any) -> str | None:  # noqa: N803
        """The first guard that fails on these locals, in words; None when all hold."""
        scope = {f"___c{i}": value for i, value in enumerate(self.constants)}
        for guard in self.guards:
            try:
                ok = bool(eval(guard.expr_template, scope, {"L": L, "G": G, "M": M}))  # noqa: S307
            except Exception as error:  # noqa: BLE001
                return f"{guard.kind} on {guard.name} raised {type(error).__name__}: {error}"
            if not ok:
                return f"{guard.kind} failed on {guard.name}: expected {_describe(guard.value)}"
        return None


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return (
            f"a {type(value).__name__} of dtype {value.dtype}, shape {tuple(value.shape)}, "
            f"stride {value.stride()}, requires_grad={value.requires_grad}, device {value.device}"
        )
    text = repr(value)
    return text if len(text) < 80 else text[:77] + "..."


def _compile_function(source: str, name: str, scope: dict[str, Any]) -> Callable[..., Any]:
    filename = f"<ember-{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), scope)  # noqa: S102
    return scope[name]
