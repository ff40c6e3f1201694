"""Plain reads through known `__getattribute__` overrides, where provably the same.

Some classes override `__getattribute__` in Python (transformers' configs remap
names through `attribute_map` and check a heterogeneity spec on every read), so
reading one attribute costs a Python call or two, about a microsecond and a half.
A guard function reads many such attributes on every call.

For an override listed in `FORWARDING_OVERRIDES`, the rule says exactly when it
gives what `object.__getattribute__` gives: an optional key rename through a
dict attribute, under a condition on the instance `__dict__`; classes with a
`__getattr__` get no plan. A rule covers one
function body only, named by the SHA-1 of its source text; a body that differs
in any character gets no rule and keeps the slow read. At run time the generated
guard function checks, once per call and class, that the class still resolves
`__getattribute__` to the same functions (no override patched in or out, same
MRO), and per object that the rule's condition holds; otherwise it reads the
slow way. So a fast read happens only where the override would have forwarded.
"""

from __future__ import annotations

import hashlib
import inspect
import textwrap
import weakref
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FORWARDING_OVERRIDES",
    "ForwardingOverride",
    "MODULE_ATTRIBUTE_DICTS",
    "PlainReadPlan",
    "is_plain_module_class",
    "plain_read_plan",
]


@dataclass(frozen=True, slots=True)
class ForwardingOverride:
    """What a known `__getattribute__` override does before forwarding to the next class.

    Attributes:
        qualname: the function's `__qualname__`, e.g. `PreTrainedConfig.__getattribute__`.
        source_sha1: SHA-1 digests of the dedented source texts this rule was written for.
        condition: a Python expression over `{dict}` (the instance `__dict__`) under which
            the override forwards every key unchanged (besides `key_map`); "" for always.
        key_map: the attribute naming a dict that renames keys before forwarding
            (`key = mapping[key]` when present), or "" for none.
    """

    qualname: str
    source_sha1: frozenset[str]
    condition: str = ""
    key_map: str = ""


FORWARDING_OVERRIDES: dict[str, ForwardingOverride] = {
    rule.qualname: rule
    for rule in (
        # transformers' PreTrainedConfig: renames through `attribute_map`, then super().
        ForwardingOverride(
            "PreTrainedConfig.__getattribute__",
            frozenset({"ee9ecf6152e2e9dba914ecbec08284b97137af60"}),
            key_map="attribute_map",
        ),
        # transformers' HeterogeneousConfigMixin: plain unless a heterogeneity spec is set.
        ForwardingOverride(
            "HeterogeneousConfigMixin.__getattribute__",
            frozenset({"f225e7aa6fc78a5a575db85a34564afd971b197a"}),
            condition="{dict}.get('_heterogeneity_spec') is None",
        ),
    )
}


@dataclass(frozen=True, slots=True)
class PlainReadPlan:
    """How to read attributes of instances of `cls` without its Python overrides.

    `classes` is the MRO of `cls`; `resolved` is what each of its classes but
    `object` holds under `__getattribute__` at compile time (None for none);
    `conditions` (over `{dict}`) and `key_map` come from the overrides' rules.
    """

    cls: type
    classes: tuple[type, ...]
    resolved: tuple[Any, ...]
    conditions: tuple[str, ...]
    key_map: str


def _source_sha1(function: Any) -> str | None:
    try:
        text = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return None
    return hashlib.sha1(text.encode()).hexdigest()


_plans: weakref.WeakKeyDictionary[type, PlainReadPlan | None] = weakref.WeakKeyDictionary()


def plain_read_plan(cls: type) -> PlainReadPlan | None:
    """The plan for `cls`, or None when it has no Python override or one without a rule."""
    try:
        return _plans[cls]
    except KeyError:
        pass
    plan = _make_plan(cls)
    try:
        _plans[cls] = plan
    except TypeError:
        pass  # NOTE: a class that cannot be weakly referenced is planned again next time
    return plan


def _make_plan(cls: type) -> PlainReadPlan | None:
    if cls.__getattribute__ is object.__getattribute__ or hasattr(cls, "__getattr__"):
        return None  # NOTE: with __getattr__, a missing name is not simply missing
    mro = cls.__mro__
    if mro[-1] is not object:
        return None
    resolved = tuple(vars(klass).get("__getattribute__") for klass in mro[:-1])
    conditions: list[str] = []
    key_maps: list[str] = []
    for function in resolved:
        if function is None:
            continue
        rule = FORWARDING_OVERRIDES.get(getattr(function, "__qualname__", ""))
        if rule is None or _source_sha1(function) not in rule.source_sha1:
            return None
        if rule.condition:
            conditions.append(rule.condition)
        if rule.key_map:
            key_maps.append(rule.key_map)
    if len(key_maps) > 1:
        return None  # NOTE: two renames in a row are not modelled; keep the slow read
    return PlainReadPlan(cls, mro, resolved, tuple(conditions), key_maps[0] if key_maps else "")


# nn.Module.__getattr__ looks a missing name up in these instance-dict entries, in order.
MODULE_ATTRIBUTE_DICTS = ("_parameters", "_buffers", "_modules")


def is_plain_module_class(cls: type) -> bool:
    """Whether `cls` is an nn.Module class that reads attributes as nn.Module itself does.

    For such a class `hasattr(m, name)`, when no class of the MRO has `name`, is
    `name` in the instance dict or in one of its MODULE_ATTRIBUTE_DICTS: what
    nn.Module.__getattr__ searches (and, missing, raises from, slowly).
    """
    import torch

    return (
        isinstance(cls, type)
        and issubclass(cls, torch.nn.Module)
        and cls.__getattribute__ is object.__getattribute__
        and cls.__getattr__ is torch.nn.Module.__getattr__
    )
