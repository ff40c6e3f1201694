"""The guards of one captured frame, recorded through `guards.GuardSet`.

Capture calls one method per assumption it makes (`tensor_match`, `equals_match`,
...); `compile()` gives guards' `CompiledGuards`: one generated function,
`why_failed(L, G)` in words. The guard kinds added here are `SameObjectGuard`
(two sources that must hold the very same object: a tensor passed twice) and
`NoModuleHooksGuard`, and `DistinctObjectsGuard` (tensor arguments that did not
alias); `hasattr` checks use guards' `HasAttrGuard`, which tests
presence cheaply on classes it knows (nn.Module, transformers configs).

What capture finds on a class or a module rather than in the frame (a method
inlined from an object's class, `F.relu`, a builtin) is guarded on the class or
module itself (`class_attribute`, guards' `AttributeIdGuard`): one check for all
instances of a class, whichever source reached them. A method found on the class
of an object read from the frame is also guarded against an instance attribute
of that name (`not_in_instance_dict`), and a builtin against a global shadowing it
(`builtin_not_shadowed`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dynamo_capture.sources import Source
from guards import (
    AttributeIdGuard,
    CompiledGuards,
    DeepcopyContentsGuard,
    Guard,
    GuardSet,
    HasAttrGuard,
    MappingItemGuard,
    ModuleStructureGuard,
    NameAbsentGuard,
    NotInInstanceDictGuard,
    SubclassLayoutGuard,
)

__all__ = [
    "CompiledGuards",
    "DistinctObjectsGuard",
    "FrameGuards",
    "GuardRecorder",
    "HasAttrGuard",
    "NoModuleHooksGuard",
    "SameObjectGuard",
]


@dataclass(frozen=True, slots=True)
class SameObjectGuard(Guard):
    """`source` and `other` are the same object (one graph input stands for both)."""

    other: Source

    guard_type: ClassVar[str] = "DUPLICATE_INPUT"
    rank: ClassVar[int] = 20
    relates_identities: ClassVar[bool] = True

    def sources(self) -> tuple[Source, ...]:
        return (self.source, self.other)

    def failure(self, value: Any, other: Any) -> str | None:
        if value is other:
            return None
        return f"{self.source.name!r} and {self.other.name!r} were the same object, now they differ"

    def emit(self, names: tuple[str, ...], code: Any) -> list[tuple[int, str]]:
        return [(self.rank, f"{names[0]} is {names[1]}")]


@dataclass(frozen=True, slots=True)
class DistinctObjectsGuard(Guard):
    """`source` and `others` are different objects: tensor arguments that did not alias
    when the frame was captured (one written in place and read through another would
    compute otherwise), as torch.compile's NO_TENSOR_ALIASING guard."""

    others: tuple[Source, ...] = ()

    guard_type: ClassVar[str] = "NO_TENSOR_ALIASING"
    rank: ClassVar[int] = 20
    relates_identities: ClassVar[bool] = True

    def sources(self) -> tuple[Source, ...]:
        return (self.source, *self.others)

    def failure(self, *values: Any) -> str | None:
        if len({id(value) for value in values}) == len(values):
            return None
        names = ", ".join(repr(source.name) for source in self.sources())
        return f"of {names}, which were different objects, two are now the same"

    def emit(self, names: tuple[str, ...], code: Any) -> list[tuple[int, str]]:
        ids = ", ".join(f"id({name})" for name in names)
        return [(self.rank, f"len({{{ids}}}) == {len(names)}")]


@dataclass(frozen=True, slots=True)
class NoModuleHooksGuard(Guard):
    """The module at `source` has no backward hooks and, with `forward`, no forward hooks.

    Hooks a module had when compiled were inlined (their dicts' keys are guarded);
    one registered later must make the entry fail, or it would never run.
    """

    forward: bool = True

    guard_type: ClassVar[str] = "NN_MODULE"
    rank: ClassVar[int] = 25
    module_state: ClassVar[bool] = True  # a module tree checks its hook dicts are empty

    def _tables(self) -> tuple[str, ...]:
        backward = ("_backward_hooks", "_backward_pre_hooks")
        return ("_forward_hooks", "_forward_pre_hooks", *backward) if self.forward else backward

    def empty_module_dicts(self) -> tuple[str, ...]:
        return self._tables()

    def failure(self, module: Any) -> str | None:
        found = [table for table in self._tables() if getattr(module, table)]
        if not found:
            return None
        return f"{self.source.name!r} has hooks now ({', '.join(found)}), none when compiled"

    def emit(self, names: tuple[str, ...], code: Any) -> list[tuple[int, str]]:
        name = names[0]
        return [(self.rank, f"not ({' or '.join(f'{name}.{t}' for t in self._tables())})")]


@dataclass(slots=True)
class GuardRecorder:
    """The guards asked for while it is open, duplicates included (region_reuse), and
    the sources of modules whose identity capture relied on (`is`, `id()`), not only read."""

    guards: list[Guard]
    identities: set[Source]


class _RecordedGuardSet(GuardSet):
    """A GuardSet telling the open recorders of every guard asked for."""

    def __init__(self) -> None:
        self.recorders: list[GuardRecorder] = []
        super().__init__()

    def add(self, guard: Guard) -> Guard:
        for recorder in self.recorders:
            recorder.guards.append(guard)
        return super().add(guard)


class FrameGuards:
    """Collects the guards of one capture."""

    def __init__(self) -> None:
        self.guard_set = _RecordedGuardSet()

    @contextlib.contextmanager
    def recording(self) -> Iterator[GuardRecorder]:
        """Record the guards asked for inside the block (nested recorders all see them)."""
        recorder = GuardRecorder([], set())
        self.guard_set.recorders.append(recorder)
        try:
            yield recorder
        finally:
            self.guard_set.recorders.remove(recorder)

    def type_match(self, source: Source, value: Any) -> None:
        self.guard_set.add_type(source, value)

    def structure_match(self, source: Source, module: torch.nn.Module) -> None:
        """A module guarded on its structure: its class here (what capture read of it is
        guarded where read); stable reads may pin it while the same module comes back."""
        self.guard_set.add(ModuleStructureGuard.of(source, module))
        self.guard_set.pin_for_stable_reads(source, module)

    def module_match(self, source: Source, module: torch.nn.Module) -> None:
        """A module read from the frame: the same module (its state is guarded where
        capture reads it); unlike `id_match`, capture did not rely on which object it is."""
        self.guard_set.add_nn_module(source, module, training=False)

    def id_match(self, source: Source, value: Any) -> None:
        if isinstance(value, torch.nn.Module):
            for recorder in self.guard_set.recorders:
                recorder.identities.add(source)
            # NOTE: the training flag is guarded where capture reads it (an EQUALS_MATCH
            # on `m.training`), so `eval()` recompiles only graphs that depend on it.
            self.guard_set.add_nn_module(source, value, training=False)
        else:
            self.guard_set.add_id(source, value)

    def equals_match(self, source: Source, value: Any) -> None:
        if type(value) in (set, frozenset):
            self.guard_set.add_set_items(source, value)
        else:
            self.guard_set.add_equals(source, value)

    def tensor_match(self, source: Source, value: torch.Tensor) -> None:
        self.guard_set.add_tensor(source, value)

    def subclass_layout(self, source: Source, layout: Any) -> None:
        """A traceable tensor subclass's class, flatten context and inner metadata."""
        self.guard_set.add(SubclassLayoutGuard(source, layout))

    def deepcopy_contents(self, source: Source, value: Any) -> None:
        """What `copy.deepcopy(value)` reads stays as it is now (raises
        guards' UncopiableContents where no snapshot can stand for it)."""
        self.guard_set.add(DeepcopyContentsGuard.of(source, value))

    def length_check(self, source: Source, value: Any) -> None:
        self.guard_set.add_length(source, value)

    def set_items(self, source: Source, value: set[Any] | frozenset[Any]) -> None:
        self.guard_set.add_set_items(source, value)

    def dict_keys(self, source: Source, value: dict[Any, Any]) -> None:
        self.guard_set.add_dict_keys(source, value)

    def alias(self, source: Source, other: Source) -> None:
        self.guard_set.add(SameObjectGuard(source, other))

    def distinct(self, sources: list[Source]) -> None:
        """The objects at `sources` (two or more) are all different objects."""
        if len(sources) > 1:
            self.guard_set.add(DistinctObjectsGuard(sources[0], tuple(sources[1:])))

    def has_attr(self, source: Source, attr: str, expected: bool) -> None:
        self.guard_set.add(HasAttrGuard(source, attr, expected))

    def class_attribute(self, owner: Any, attr: str, value: Any, *, bound: bool = False) -> None:
        """`owner.attr` (a class or module attribute capture used) is still `value`.

        `bound`: `owner.attr` binds a method each read (a classmethod); its `__func__`
        is compared.
        """
        self.guard_set.add(AttributeIdGuard.of(owner, attr, value, bound=bound))

    def not_in_instance_dict(self, source: Source | None, obj: Any, attr: str) -> None:
        """The object at `source` does not override class attribute `attr` in its own dict."""
        if source is not None and isinstance(getattr(obj, "__dict__", None), dict):
            self.guard_set.add(NotInInstanceDictGuard(source, attr))

    def builtin_not_shadowed(self, namespace: dict[str, Any], name: str) -> None:
        """No global `name` in `namespace` hides the builtin capture used."""
        self.guard_set.add(NameAbsentGuard.of(namespace, name))

    def mapping_item(
        self, mapping: Any, description: str, key: str, *, presence_only: bool = False
    ) -> None:
        """`mapping[key]` (os.environ), or only whether it is there, stays as it is now."""
        self.guard_set.add(
            MappingItemGuard.of(mapping, description, key, presence_only=presence_only)
        )

    def no_module_hooks(self, source: Source, *, forward: bool = True) -> None:
        """No backward hooks on the module at `source` (and, with `forward`, no forward hooks)."""
        self.guard_set.add(NoModuleHooksGuard(source, forward))

    def global_state(self) -> None:
        self.guard_set.add_global_state()

    def compile(
        self, guard_filter_fn: Callable[..., Any] | None = None, name: str = ""
    ) -> CompiledGuards:
        """The generated guard function (after the user's filter, if any)."""
        return self.guard_set.compile(guard_filter_fn=guard_filter_fn, name=name)
