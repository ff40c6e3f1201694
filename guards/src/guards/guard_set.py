"""GuardSet: the guards of one compiled entry, compiled to one fast function.

    >>> guards = GuardSet()
    >>> guards.add_tensor(LocalSource("x"), x)
    >>> guards.add_global_state()
    >>> check = guards.compile()
    >>> check(frame.f_locals, frame.f_globals)          # or check.check(L, G), the raw function
    True
    >>> check.why_failed({"x": torch.randn(16, 16)}, {})
    "tensor 'x' size mismatch at index 0: expected 8, actual 16"

`compile()` orders guards cheapest and most-likely-to-fail first, logs the
generated source to the `guards` artifact (EMBER_LOGS=guards) and returns a
`CompiledGuards`. `why_failed` runs the reference checks in the same order and
names the first guard that fails, in words.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch

from guards.block_loops import loop_identical_blocks
from guards.filters import GuardFilterEntry, apply_guard_filter
from guards.global_state import GlobalStateGuard
from guards.guard_codegen import generate_guard_function
from guards.guard_kinds import (
    DictKeysGuard,
    EqualsGuard,
    Guard,
    HasAttrGuard,
    IdGuard,
    LengthGuard,
    NNModuleGuard,
    SetItemsGuard,
    TypeGuard,
)
from guards.guard_pruning import drop_implied
from guards.logs import artifact_enabled, artifact_logger
from guards.module_tree import ModuleTreeGuard, split_module_trees
from guards.sources import Source
from guards.tensor_guards import (
    NoTensorAliasingGuard,
    TensorMatchGuard,
    with_real_examples,
    without_example,
)

__all__ = ["CompiledGuards", "GuardSet"]

_log = artifact_logger("guards")


class _SourceReader:
    """Evaluates source expressions on (L, G), compiling each expression once."""

    def __init__(self) -> None:
        self._code: dict[Source, Any] = {}

    def read(self, source: Source, frame_locals: Any, frame_globals: Any) -> Any:
        code = self._code.get(source)
        if code is None:
            code = compile(source.expr, f"<source {source.name}>", "eval")
            self._code[source] = code
        return eval(code, {"__builtins__": __builtins__}, {"L": frame_locals, "G": frame_globals})


def _guard_failure(
    guard: Guard, reader: _SourceReader, frame_locals: Any, frame_globals: Any
) -> str | None:
    values = []
    for source in guard.sources():
        try:
            values.append(reader.read(source, frame_locals, frame_globals))
        except Exception as error:  # noqa: BLE001 - any failure to fetch fails the guard
            return f"{source.name!r} could not be read ({type(error).__name__}: {error})"
    try:
        return guard.failure(*values)
    except Exception as error:  # noqa: BLE001 - a check that raises fails
        return f"{guard.describe()} raised {type(error).__name__}: {error}"


def _first_failure(
    guards: Sequence[Guard], reader: _SourceReader, frame_locals: Any, frame_globals: Any
) -> str | None:
    for guard in guards:
        failure = _guard_failure(guard, reader, frame_locals, frame_globals)
        if failure is not None:
            return failure
    return None


def _all_failures(
    guards: Sequence[Guard], reader: _SourceReader, frame_locals: Any, frame_globals: Any
) -> list[str]:
    found = (_guard_failure(guard, reader, frame_locals, frame_globals) for guard in guards)
    return list(dict.fromkeys(failure for failure in found if failure is not None))


class CompiledGuards:
    """The compiled check of a GuardSet: `compiled(L, G) -> bool`.

    Attributes:
        check: the generated function itself, `check(L, G) -> bool`; call it
            directly on a hot path to skip this object's call overhead.
        source: its Python source text.
        filename: the file holding that source (tracebacks and pdb show it).
        guards: the guards in check order.
        trees: the ModuleTreeGuards that check some of `guards` together (module_tree.py).
    """

    __slots__ = ("check", "filename", "guards", "source", "trees", "_reader")

    def __init__(
        self,
        check: Callable[[Any, Any], bool],
        source: str,
        filename: str,
        guards: tuple[Guard, ...],
        trees: tuple[ModuleTreeGuard, ...] = (),
    ) -> None:
        self.check = check
        self.source = source
        self.filename = filename
        self.guards = guards
        self.trees = trees  # each stands for some of `guards` in the generated function
        self._reader = _SourceReader()

    def __call__(self, L: Any, G: Any) -> bool:  # noqa: N803 - the frame's names
        return self.check(L, G)

    def why_failed(self, L: Any, G: Any) -> str | None:  # noqa: N803
        """The first failing guard in words, or None when every guard holds."""
        return _first_failure((*self.guards, *self.trees), self._reader, L, G)

    def failures(self, L: Any, G: Any) -> list[str]:  # noqa: N803
        """Every failing guard in words, in check order (for recompile logs)."""
        return _all_failures((*self.guards, *self.trees), self._reader, L, G)

    def __len__(self) -> int:
        return len(self.guards)

    def __repr__(self) -> str:
        return f"<CompiledGuards: {len(self.guards)} guards in {self.filename}>"


def _with_module_classes(guards: list[Guard]) -> list[Guard]:
    """`guards`, with each NN_MODULE guard checking the class its module has now, when the
    set is compiled: capture may have changed it (a lazy module's first call turns
    `LazyLinear` into `Linear`) after the guard was made."""
    result = []
    for guard in guards:
        if isinstance(guard, NNModuleGuard):
            module = guard.ref()
            if module is not None and type(module) is not guard.module_type:
                guard = replace(guard, module_type=type(module))
        result.append(guard)
    return result


def _module_trees(guards: list[Guard], name: str) -> tuple[list[Guard], list[ModuleTreeGuard]]:
    """The guards to check one by one, in order, with a ModuleTreeGuard standing for the
    guards of each module tree (module_tree.py); and those tree guards."""
    rest, groups = split_module_trees(guards)
    trees = []
    for tree, covered in groups:
        root = tree.root
        header = f"module tree {root.name} of {name or 'a compiled entry'}: {len(covered)} guards"
        # NOTE: no stable reads: the tree runs this check only after one of its dicts was
        # written, when a snapshot of them would be stale.
        looped = loop_identical_blocks(covered, _block_check, guards)
        structure = generate_guard_function(
            looped, header, drop_implied(looped), stable_reads=False
        )
        if artifact_enabled("guards"):
            _log.info("%s\n%s", structure.filename, structure.source)
        module = tree.modules[root]
        trees.append(ModuleTreeGuard.of(root, module, covered, structure.check, list(tree.modules)))
    checked = sorted([*rest, *trees], key=lambda guard: guard.rank)
    return checked, trees


def _block_check(guards: list[Guard], header: str) -> Callable[[Any, Any], bool]:
    """The generated check of the guards one of identical blocks has (block_loops.py)."""
    generated = generate_guard_function(guards, header, drop_implied(guards), stable_reads=False)
    if artifact_enabled("guards"):
        _log.info("%s\n%s", generated.filename, generated.source)
    return generated.check


class GuardSet:
    """An ordered set of guards (adding one twice keeps one)."""

    def __init__(self, guards: Iterable[Guard] = ()) -> None:
        self._guards: dict[Guard, None] = {}
        self._reader = _SourceReader()
        # objects guarded on their class only that stable reads may still pin by
        # identity for their fast path (`pin_for_stable_reads`), held weakly
        self._pins: dict[Source, weakref.ref] = {}
        for guard in guards:
            self.add(guard)

    def pin_for_stable_reads(self, source: Source, obj: Any) -> None:
        """Let stable reads pin `obj` (at `source`, guarded on its class only, say an
        nn.Module guarded on structure) as a checked root: the fast path runs only while
        `source` holds the object the last full check passed on; another object of the
        class goes to the full check, which snapshots it. Adds no guard."""
        try:
            self._pins[source] = weakref.ref(obj)
        except TypeError:  # not weakly referenceable: simply not pinned
            pass

    # ------------------------------------------------------------------ the set

    def add(self, guard: Guard) -> Guard:
        """Add `guard` (no-op if an equal guard is there); returns it."""
        if not isinstance(guard, Guard):
            raise TypeError(f"GuardSet.add expects a Guard, got {type(guard).__name__}")
        self._guards.setdefault(guard, None)
        return guard

    def update(self, guards: Iterable[Guard]) -> None:
        """Add every guard of `guards`."""
        for guard in guards:
            self.add(guard)

    def __iter__(self) -> Iterator[Guard]:
        return iter(self._guards)

    def __len__(self) -> int:
        return len(self._guards)

    def __contains__(self, guard: object) -> bool:
        return guard in self._guards

    def __repr__(self) -> str:
        return f"GuardSet({len(self)} guards)"

    def __str__(self) -> str:
        """One line per guard, in check order."""
        return "\n".join(guard.describe() for guard in self.ordered())

    # ------------------------------------------------------------------ builders

    def add_type(self, source: Source, value: Any) -> Guard:
        """Guard that the value at `source` has exactly `type(value)`."""
        return self.add(TypeGuard(source, type(value)))

    def add_id(self, source: Source, obj: Any) -> Guard:
        """Guard that the value at `source` is `obj` itself (held weakly)."""
        return self.add(IdGuard.of(source, obj))

    def add_equals(self, source: Source, value: Any) -> Guard:
        """Guard that the value at `source` equals constant `value`, with the same type."""
        return self.add(EqualsGuard(source, value))

    def add_length(self, source: Source, value: Any) -> Guard:
        """Guard the exact type and the length of a list, tuple or dict."""
        self.add_type(source, value)
        return self.add(LengthGuard(source, len(value)))

    def add_dict_keys(self, source: Source, value: dict) -> Guard:
        """Guard the exact type and the keys (in order) of a dict."""
        self.add_type(source, value)
        return self.add(DictKeysGuard(source, tuple(value.keys())))

    def add_set_items(self, source: Source, value: set | frozenset) -> Guard:
        """Guard the exact type and the items (in iteration order) of a set of constants."""
        return self.add(SetItemsGuard(source, type(value), tuple(value)))

    def add_has_attr(self, source: Source, attr: str, expected: bool) -> Guard:
        """Guard that `hasattr(value at source, attr)` is `expected`."""
        return self.add(HasAttrGuard(source, attr, bool(expected)))

    def add_tensor(
        self,
        source: Source,
        tensor: torch.Tensor,
        dynamic_dims: tuple[int, ...] = (),
        trust_identity: bool | None = None,
    ) -> Guard:
        """Guard a tensor's class, dtype, device, requires_grad, sizes and strides.

        See TensorMatchGuard for `trust_identity` (default: on for parameters and buffers).
        """
        return self.add(TensorMatchGuard.of(source, tensor, dynamic_dims, trust_identity))

    def add_nn_module(
        self, source: Source, module: torch.nn.Module, *, training: bool = True
    ) -> Guard:
        """Guard that `source` is this very module (of its class), in the same training
        mode unless `training=False` (then a guard on a read of `m.training` stands for
        it: see NNModuleGuard)."""
        return self.add(NNModuleGuard.of(source, module, training=training))

    def add_global_state(self) -> Guard:
        """Guard grad mode, inference mode, autocast, determinism and default dtype as now."""
        return self.add(GlobalStateGuard.current())

    def add_no_aliasing(self, sources: Sequence[Source]) -> Guard | None:
        """Guard that the tensors at `sources` share no storage (nothing for fewer than two)."""
        if len(sources) < 2:
            return None
        return self.add(NoTensorAliasingGuard.of(tuple(sources)))

    def add_shape_env(self, shape_env: Any) -> Guard | None:
        """Guard the symbolic sizes of `shape_env` (a ShapeEnv): bindings, ranges, relations.

        Add it once, after the ShapeEnv has seen the whole trace (nothing when it has
        no symbols).
        """
        guard = shape_env.guard()
        return None if guard is None else self.add(guard)

    # ------------------------------------------------------------------ order, filter, compile

    def ordered(self) -> list[Guard]:
        """The guards in check order: by rank (cheap, likely-to-fail first), then as added."""
        return sorted(self._guards, key=lambda guard: guard.rank)

    def filter_entries(self) -> list[GuardFilterEntry]:
        """One GuardFilterEntry per guard, in insertion order, as torch's guard filters see them."""
        return [
            GuardFilterEntry(
                name=guard.source.expr,
                has_value=guard.has_value,
                value=guard.value,
                guard_type=guard.guard_type,
                derived_guard_types=guard.derived_guard_types,
                is_global=guard.source.is_global(),
                orig_guard=guard,
            )
            for guard in self._guards
        ]

    def filter(
        self, guard_filter_fn: Callable[[list[GuardFilterEntry]], Sequence[bool]]
    ) -> GuardSet:
        """A new GuardSet with the guards `guard_filter_fn(entries)` keeps (see filters.py)."""
        keep = apply_guard_filter(guard_filter_fn, self.filter_entries())
        return GuardSet(guard for guard, kept in zip(self._guards, keep, strict=True) if kept)

    def compile(
        self,
        *,
        guard_filter_fn: Callable[[list[GuardFilterEntry]], Sequence[bool]] | None = None,
        name: str = "",
    ) -> CompiledGuards:
        """Generate the one check function; `guard_filter_fn` first drops guards it rejects."""
        if guard_filter_fn is not None:
            return self.filter(guard_filter_fn).compile(name=name)
        guards = _with_module_classes(with_real_examples(self.ordered()))
        # NOTE: the compiled guards keep no tensor they were built on (see tensor_guards.held).
        guards = [without_example(guard) for guard in guards]
        checked, trees = _module_trees(guards, name)
        implied = drop_implied(checked)
        # NOTE: no counter in the header: equal guard sets share one content-named file.
        header = f"guards of {name or 'a compiled entry'}: {len(guards)} guards"
        if trees:
            covered = sum(len(tree.covered) for tree in trees)
            header += f" ({covered} of them behind {len(trees)} module-tree guard(s))"
        if implied:
            header += f" ({len(implied)} implied by others, not checked again)"
        pins = {source: ref() for source, ref in self._pins.items()}
        pins = {source: obj for source, obj in pins.items() if obj is not None}
        generated = generate_guard_function(checked, header, implied, pins=pins)
        if artifact_enabled("guards"):
            _log.info("%s\n%s", generated.filename, generated.source)
        # NOTE: `guards` keeps every covered guard, so why_failed names the one that failed.
        return CompiledGuards(
            generated.check, generated.source, generated.filename, tuple(guards), tuple(trees)
        )

    def why_failed(self, L: Any, G: Any) -> str | None:  # noqa: N803 - the frame's names
        """The first failing guard in words, or None when every guard holds."""
        return _first_failure(self.ordered(), self._reader, L, G)

    def check(self, L: Any, G: Any) -> bool:  # noqa: N803
        """The reference check (slow; `compile()` gives the fast one)."""
        return self.why_failed(L, G) is None
