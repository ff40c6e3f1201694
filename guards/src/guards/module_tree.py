"""One guard for a module tree, whose full check runs only after the tree may have changed.

An entry compiled from `model(x)` holds guards on every submodule (identity, the
training flag where capture read it, no hooks, no `forward` of its own), on its attributes
(`conv.stride == (1, 1)`), on the keys of each `_modules`, and a tensor match on
every parameter and buffer: checked one by one, that costs time in proportion
to the depth of the model on every call. `split_module_trees` takes those
guards out of the entry's list and puts them behind one `ModuleTreeGuard` per
root module (`L['self']`):

    def guard_check(L, G):
        ...
        self = L['self']
        if not (___module_tree_3.holds(self, L, G)):
            return False

`holds` runs the generated check of the grouped guards (`structure`) only when
the root is not the module seen last time, a hook was registered anywhere
(torch numbers hook handles with one counter, `RemovableHandle.next_id`), or
one of the tree's modules' `__dict__`, `_modules`, `_parameters` or `_buffers`
dicts was written since that check passed: CPython's dict version tags say so
(dict_versions.py), for every way of writing them (setattr and `register_*`,
`train()`, `object.__setattr__`, a container's `insert`, `functional_call`, a
dict written by hand). Those dicts hold all that the grouped guards read, but
for hooks, classes and the tensors' own metadata. A hook is noticed when it is
registered; and where a covered guard requires a module's hook dicts to be empty
(`Guard.empty_module_dicts`: capture's "no hooks" guard), `any()` over those dicts
on every call sees a hook written into one by hand (`m._forward_hooks[k] = f`).
Otherwise it checks what the tags do not cover, on every call, in C loops
(`map`) rather than Python code per tensor:

- the class of each module (`module.__class__ = Other` writes no dict), against
  those the full check saw, and the identity of its `__dict__` (nor does
  `module.__dict__ = other`); the state holds the submodules for this (not the root);

- the parameters and buffers the full check saw (the same objects while their
  dicts' tags hold) have the requires_grad, dtype, device, sizes and strides
  the entry was compiled for. None of these can be trusted
  for the same object: `requires_grad_()`, `module.half()` and `.data = other`
  change them without writing a dict or bumping the tensor's version counter,
  and `t_()`, `set_()`, `as_strided_()` under no_grad change a parameter's
  layout in place. So this part costs five reads a tensor (a C loop each,
  about 0.25 us a tensor in all), in proportion to the model's size: a check
  flat in depth would need these setters intercepted or a C++ loop over the
  TensorImpls, as torch's guard manager has.

Which guards move into a tree (`_covered`) and why:

- `module_state` guards (NN_MODULE identity and training flag, no hooks, no
  instance `forward`) on a module of the tree: the parent's `_modules` and the
  module's `__dict__` tags, hook registration;
- TYPE_MATCH / DICT_KEYS / LENGTH of a module's `_modules`: its `__dict__` and
  `_modules` tags;
- EQUALS / TYPE (of a builtin type) / ID_MATCH of a module attribute that lives
  in the instance `__dict__` and is no data descriptor of the class: the
  `__dict__` tag (a class attribute changed later would not be seen, so those
  stay out);
- TENSOR_MATCH of a parameter or buffer with static sizes and strides: its dict's
  tag, and the checks above (strides exactly, those of size-1 dims too, unless
  every tensor was compiled contiguous: a tensor that differs there only
  recompiles).

A tree is not formed where a guard's module path goes through a module the guard
set has no NN_MODULE guard for, nor where dict version tags are not available;
its guards then stay in the entry's list, checked one by one as before. Module
checks cost one C call over the tags on every call (about 20 ns a tag): one per
module (its `__dict__`), one per module whose `_modules` a covered guard reads (a
parent's: a leaf's `_modules`, which no guard reads, is not watched), one per
`_parameters` / `_buffers` dict holding a guarded tensor; and the classes (about
10 ns a module). Far less than the guards they stand for, but still in proportion
to the number of modules.

After `holds` passed, the state's `tensors` are the tree's parameters and buffers
as they are now: capture's entry takes its graph inputs from there (capture.py
`held_reads`) instead of reading each through its module path again.
"""

from __future__ import annotations

import inspect
import operator
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, ClassVar

import torch
from torch.utils.hooks import RemovableHandle

from guards import dict_versions
from guards.dict_versions import VersionTags
from guards.guard_kinds import (
    DictKeysGuard,
    EqualsGuard,
    Guard,
    GuardCode,
    IdGuard,
    LengthGuard,
    ModuleStructureGuard,
    NNModuleGuard,
    TypeGuard,
)
from guards.sources import AttrSource, ModuleSource, NNModuleSource, ParamBufferSource, Source
from guards.tensor_guards import TensorMatchGuard

__all__ = ["ModuleTreeGuard", "split_module_trees"]

_MODULE_TABLES = ("_modules",)
# A tree's fast path costs about as much as the inline guards of 3-4 modules (a method
# call, the stamp, a few C loops); smaller trees are checked inline.
MIN_MODULES = 8
_requires_grad = operator.attrgetter("requires_grad")
_dtype = operator.attrgetter("dtype")
_device = operator.attrgetter("device")
_is_cpu = operator.attrgetter("is_cpu")
_shape = operator.attrgetter("shape")
_stride = torch._C.TensorBase.stride  # the unbound method: half the cost of methodcaller
_is_contiguous = torch._C.TensorBase.is_contiguous
_CPU = torch.device("cpu")
_instance_dict = operator.attrgetter("__dict__")


def _root_of(source: Source) -> NNModuleSource | None:
    """The NNModuleSource a module source is reached from through `_modules` only."""
    while isinstance(source, ModuleSource):
        source = source.source
    return source if isinstance(source, NNModuleSource) else None


def _module_path(source: Source) -> list[Source]:
    """The module sources from `source` (a module source) up to its root, inclusive."""
    path = []
    while isinstance(source, ModuleSource):
        path.append(source)
        source = source.source
    path.append(source)
    return path


def _is_data_descriptor(cls: type, name: str) -> bool:
    found = inspect.getattr_static(cls, name, None)
    return hasattr(type(found), "__set__") or hasattr(type(found), "__delete__")


def _same_flag(flags: tuple[bool, ...]) -> bool | None:
    """The flag all of `flags` share (True for none), or None where they differ."""
    if all(flags):
        return True
    return False if not any(flags) else None


def _contiguous(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a tensor of these sizes and strides is contiguous, as `is_contiguous()`
    tells (the strides of size-1 dims do not matter, nor any of an empty tensor)."""
    if 0 in sizes:
        return True
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


@dataclass(frozen=True, slots=True)
class _Tree:
    """What grouping learned about one root: its modules (by source) and their objects."""

    root: NNModuleSource
    modules: dict[Source, torch.nn.Module]


def _module_owner(source: Source) -> Source | None:
    """The module source whose state `source` is part of, for the sources a tree covers."""
    if isinstance(source, ModuleSource | NNModuleSource):
        return source
    if isinstance(source, ParamBufferSource | AttrSource):
        base = source.source
        if isinstance(base, ModuleSource | NNModuleSource):
            return base
    return None


def _covered(guard: Guard, modules: dict[Source, torch.nn.Module]) -> bool:
    """Whether `guard` checks only state that a counted module mutation must change."""
    source = guard.source
    if len(guard.sources()) != 1:
        return False
    if isinstance(source, ModuleSource | NNModuleSource):
        return type(guard).module_state
    if isinstance(source, ParamBufferSource):
        return _fast_tensor(guard)
    if not isinstance(source, AttrSource) or source.source not in modules:
        return False
    if source.member in _MODULE_TABLES:
        return isinstance(guard, TypeGuard | DictKeysGuard | LengthGuard)
    module = modules[source.source]
    if source.member not in vars(module) or _is_data_descriptor(type(module), source.member):
        return False
    if isinstance(guard, TypeGuard):
        return guard.expected_type.__module__ == "builtins"
    return isinstance(guard, EqualsGuard | IdGuard)


def _fast_tensor(guard: Guard) -> bool:
    """A tensor match the tree can check in its C loops (static, not complex, alive)."""
    return (
        isinstance(guard, TensorMatchGuard)
        and all(size is not None for size in guard.sizes)
        and all(stride is not None for stride in guard.strides)
        and not guard.dtype.is_complex
        and not guard.is_inference
    )


def _trees(guards: Sequence[Guard]) -> dict[NNModuleSource, _Tree]:
    """The modules the guards know, by root: a root by its NN_MODULE guard (identity),
    the modules below it by theirs or by a structure guard (ModuleStructureGuard: a
    submodule of the compiled module, which another of the same structure may replace)."""
    trees: dict[NNModuleSource, _Tree] = {}
    modules: dict[Source, torch.nn.Module] = {}
    roots: set[Source] = set()
    for guard in guards:
        if isinstance(guard, NNModuleGuard | ModuleStructureGuard):
            module = guard.ref()
            if module is not None:
                modules[guard.source] = module
                if isinstance(guard, NNModuleGuard):
                    roots.add(guard.source)
    for source, module in modules.items():
        root = _root_of(source)
        if root is not None and root in roots:
            trees.setdefault(root, _Tree(root, {})).modules[source] = module
    return trees


def _identities_covered(guard: Guard, tree: _Tree, tensors: set[Source]) -> bool:
    """Whether `guard` relates only the identities of the tree's modules and of tensors
    whose tables the tree watches (`tensors`): they stay the same objects while its
    dicts' tags hold, so the guard holds while the tree's fast path does."""
    return type(guard).relates_identities and all(
        source in tree.modules or source in tensors for source in guard.sources()
    )


def split_module_trees(
    guards: Sequence[Guard],
) -> tuple[list[Guard], list[tuple[_Tree, list[Guard]]]]:
    """Split `guards` into those checked one by one and, per root module, the tree
    (its modules by source) and the guards a `ModuleTreeGuard` covers (in the given
    order). No tree without dict version tags (see dict_versions.py)."""
    if not dict_versions.AVAILABLE:
        return list(guards), []
    trees = _trees(guards)
    grouped: dict[NNModuleSource, list[Guard]] = {}
    for guard in guards:
        owner = _module_owner(guard.source)
        root = None if owner is None else _root_of(owner)
        tree = trees.get(root) if root is not None else None
        if (
            tree is not None
            and all(step in tree.modules for step in _module_path(owner))
            and _covered(guard, tree.modules)
        ):
            grouped.setdefault(root, []).append(guard)
    # The tensors each group matches, kept as the groups grow (a set per guard made this
    # loop quadratic: seconds for a 12-layer model's 2,000 guards).
    tensors = {
        root: {g.source for g in group if isinstance(g, TensorMatchGuard)}
        for root, group in grouped.items()
    }
    for guard in guards:  # identity relations among what the groups hold
        for root, group in grouped.items():
            if _identities_covered(guard, trees[root], tensors[root]):
                group.append(guard)
                if isinstance(guard, TensorMatchGuard):
                    tensors[root].add(guard.source)
                break
    groups = [
        (trees[root], group)
        for root, group in grouped.items()
        if len(trees[root].modules) >= MIN_MODULES
    ]
    kept = {id(guard) for _, group in groups for guard in group}
    return [guard for guard in guards if id(guard) not in kept], groups


def _reads_modules_table(covered: Sequence[Guard], modules: Sequence[Source]) -> tuple[bool, ...]:
    """For each module source, whether a covered guard reads its `_modules` dict.

    Covered guards reach a module through its parent's `_modules` (a ModuleSource) and
    read `_modules` itself (an AttrSource), its `__dict__` (other attributes, the
    `_parameters` / `_buffers` tables) or a tensor of those tables. A write to the
    `_modules` of a module no guard reads it of (a leaf's, in most models) cannot change
    what the guards check, so its tag need not be watched. A source of another kind on
    the way to the root watches them all.
    """
    readers: set[Source] = set()
    for guard in covered:
        for source in guard.sources():
            node: Source | None = source
            while isinstance(node, ModuleSource | AttrSource | ParamBufferSource):
                if isinstance(node, ModuleSource) or (
                    isinstance(node, AttrSource) and node.member in _MODULE_TABLES
                ):
                    readers.add(node.source)
                node = node.source
            if not isinstance(node, NNModuleSource):
                return (True,) * len(modules)
    return tuple(source in readers for source in modules)


def _empty_dicts(
    covered: Sequence[Guard], modules: Sequence[Source]
) -> tuple[tuple[int, str], ...]:
    """(index in `modules`, attribute) of each dict a covered guard requires to be empty
    (`Guard.empty_module_dicts`: hook dicts), checked on every call."""
    index = {source: position for position, source in enumerate(modules)}
    found = set()
    for guard in covered:
        for name in guard.empty_module_dicts():
            if guard.source not in index:
                raise ValueError(f"{guard.describe()} reads a module the tree does not hold")
            found.add((index[guard.source], name))
    return tuple(sorted(found))


class _TreeState:
    """What a tree's last full check saw: its dicts' tags, its modules and their classes,
    the tensor dicts and the tensors."""

    __slots__ = (
        "guard",
        "root",
        "tags",
        "handles",
        "root_class",
        "root_dict",
        "dicts",
        "modules",
        "classes",
        "empty",
        "tables",
        "tensors",
        "__weakref__",
    )

    def __init__(self, guard: ModuleTreeGuard, root: torch.nn.Module) -> None:
        self.guard = guard
        state = weakref.ref(self)
        self.root = weakref.ref(root, lambda _: _forget(state))
        self.tags: VersionTags | None = None  # of each module's __dict__ and _modules
        self.handles = -1  # RemovableHandle.next_id when the full check last passed
        # NOTE: `__class__` can be assigned without a dict write: the classes are compared.
        # The submodules are held (not the root: its death clears the state).
        self.root_class: type | None = None
        self.modules: tuple[torch.nn.Module, ...] = ()
        self.classes: tuple[type, ...] = ()
        # NOTE: `module.__dict__ = other` writes no dict either: the dicts are compared too.
        self.root_dict: dict | None = None
        self.dicts: tuple[dict, ...] = ()
        self.empty: tuple[dict, ...] = ()  # dicts the guards require empty (hook dicts)
        self.tables: tuple[dict, ...] = ()
        self.tensors: tuple[torch.Tensor, ...] = ()

    def holds(self, root: Any, L: Any, G: Any) -> bool:  # noqa: N803 - the frame's names
        """The tree's guards hold for this call (the fast path; see the module docstring)."""
        tags = self.tags
        if (
            root is not self.root()
            or self.handles != RemovableHandle.next_id
            or tags is None
            or tags.changed()
            or type(root) is not self.root_class
            or tuple(map(type, self.modules)) != self.classes
            or _instance_dict(root) is not self.root_dict
            or not all(map(operator.is_, map(_instance_dict, self.modules), self.dicts))
            or any(self.empty)
        ):
            return self.recheck(L, G)
        guard, tensors = self.guard, self.tensors  # their dicts' tags are unchanged
        return guard.metadata_holds(tensors) and guard.layout_holds(tensors)

    def recheck(self, L: Any, G: Any) -> bool:  # noqa: N803
        """Run the full check; on success remember what it saw, for the fast path."""
        guard = self.guard
        self.tags = None
        handles = RemovableHandle.next_id
        modules = guard.read_modules(L, G)
        tables = guard.read_tables(L, G)
        dicts = [vars(module) for module in modules]
        dicts += [vars(m)["_modules"] for m in compress(modules, guard.module_tables)]
        dicts += {id(table): table for table in tables}.values()
        tags = VersionTags(dicts)
        seen = tags.read()  # NOTE: read before the check they stand for
        if not guard.structure(L, G):
            return False
        tensors = tuple(map(operator.getitem, tables, guard.names))
        if not (guard.metadata_holds(tensors) and guard.layout_holds(tensors)):
            return False
        tags.snapshot(seen)
        self.tags, self.handles = tags, handles
        root = self.root()
        self.root_class = type(root)
        self.modules = tuple(module for module in modules if module is not root)
        self.classes = tuple(map(type, self.modules))
        self.root_dict = _instance_dict(root)
        self.dicts = tuple(map(_instance_dict, self.modules))
        self.empty = tuple(getattr(modules[index], name) for index, name in guard.empty_dicts)
        self.tables, self.tensors = tables, tensors
        return True


def _forget(state_ref: Callable[[], _TreeState | None]) -> None:
    """The root module died: drop the dicts and tensors held for the fast path."""
    state = state_ref()
    if state is not None:
        state.tags, state.modules, state.empty = None, (), ()
        state.tables, state.tensors = (), ()
        state.root_dict, state.dicts = None, ()


@dataclass(frozen=True, slots=True, eq=False)
class ModuleTreeGuard(Guard):
    """The guards on one module tree (`covered`), checked in full only after it may have changed.

    Build with `ModuleTreeGuard.of(root_source, root_module, covered, structure, modules)`,
    where `structure(L, G)` is the generated check of `covered` and `modules` the
    sources of the tree's modules (whose `__dict__` and `_modules` are watched).
    """

    covered: tuple[Guard, ...]
    structure: Callable[[Any, Any], bool] = field(repr=False)
    tensor_sources: tuple[ParamBufferSource, ...] = field(repr=False)
    names: tuple[str, ...] = field(repr=False)
    requires_grad: tuple[bool, ...] = field(repr=False)
    dtypes: tuple[torch.dtype, ...] = field(repr=False)
    devices: tuple[torch.device, ...] | None = field(repr=False)
    shapes: tuple[torch.Size, ...] = field(repr=False)
    strides: tuple[tuple[int, ...], ...] = field(repr=False)
    read_tables: Callable[[Any, Any], tuple[dict, ...]] = field(repr=False)
    read_modules: Callable[[Any, Any], tuple[torch.nn.Module, ...]] = field(repr=False)
    module_tables: tuple[bool, ...] = field(default=(), repr=False)  # whose _modules is watched
    empty_dicts: tuple[tuple[int, str], ...] = field(default=(), repr=False)  # (module, attr)
    all_requires_grad: bool | None = field(default=None, repr=False)  # None: mixed
    contiguous: bool = field(default=False, repr=False)  # every tensor compiled contiguous
    state: _TreeState | None = field(default=None, repr=False)

    guard_type: ClassVar[str] = "MODULE_TREE"
    rank: ClassVar[int] = 24

    @classmethod
    def of(
        cls,
        root: NNModuleSource,
        module: torch.nn.Module,
        covered: Sequence[Guard],
        structure: Callable[[Any, Any], bool],
        modules: Sequence[Source] = (),
    ) -> ModuleTreeGuard:
        tensors = [g for g in covered if isinstance(g, TensorMatchGuard)]
        sources = tuple(g.source for g in tensors)
        assert all(isinstance(s, ParamBufferSource) for s in sources)
        devices = tuple(g.device for g in tensors)
        guard = cls(
            root,
            tuple(covered),
            structure,
            sources,  # type: ignore[arg-type]
            tuple(s.member for s in sources),  # type: ignore[attr-defined]
            tuple(g.requires_grad for g in tensors),
            tuple(g.dtype for g in tensors),
            None if all(d == _CPU for d in devices) else devices,
            tuple(torch.Size(g.sizes) for g in tensors),  # type: ignore[arg-type]
            tuple(tuple(g.strides) for g in tensors),  # type: ignore[arg-type]
            _tables_reader(sources),  # type: ignore[arg-type]
            _reader(tuple(modules)),
            _reads_modules_table(covered, modules),
            _empty_dicts(covered, modules),
            _same_flag(tuple(g.requires_grad for g in tensors)),
            all(_contiguous(g.sizes, g.strides) for g in tensors),  # type: ignore[arg-type]
        )
        object.__setattr__(guard, "state", _TreeState(guard, module))
        return guard

    def metadata_holds(self, tensors: tuple[torch.Tensor, ...]) -> bool:
        """requires_grad, dtype and device as compiled, for the tensors in source order."""
        flags = map(_requires_grad, tensors)
        if self.all_requires_grad is None:
            if tuple(flags) != self.requires_grad:
                return False
        elif self.all_requires_grad:
            if not all(flags):
                return False
        elif any(flags):
            return False
        if tuple(map(_dtype, tensors)) != self.dtypes:
            return False
        if self.devices is None:
            return all(map(_is_cpu, tensors))
        return tuple(map(_device, tensors)) == self.devices

    def layout_holds(self, tensors: tuple[torch.Tensor, ...]) -> bool:
        """Sizes and strides as compiled, for the tensors in source order (where all were
        contiguous, `is_contiguous()`: cheaper than `stride()`, blind to size-1 dims)."""
        if tuple(map(_shape, tensors)) != self.shapes:
            return False
        if self.contiguous:
            return all(map(_is_contiguous, tensors))
        return tuple(map(_stride, tensors)) == self.strides

    def failure(self, root: Any) -> str | None:
        # NOTE: CompiledGuards.why_failed reports the covered guards one by one before
        # this one; what is left is the tensors' check (exact strides, even of size-1 dims,
        # or where every tensor was compiled contiguous, is_contiguous()).
        prefix = len(self.source.expr)
        for index, source in enumerate(self.tensor_sources):
            text = "root" + source.expr[prefix:]
            tensor = eval(compile(text, "<ember module_tree>", "eval"), {}, {"root": root})
            expected = (
                self.requires_grad[index],
                self.dtypes[index],
                _CPU if self.devices is None else self.devices[index],
                self.shapes[index],
                True if self.contiguous else self.strides[index],
            )
            actual = (
                tensor.requires_grad,
                tensor.dtype,
                tensor.device,
                tensor.shape,
                tensor.is_contiguous() if self.contiguous else tensor.stride(),
            )
            if actual != expected:
                layout = "is_contiguous" if self.contiguous else "stride"
                return (
                    f"tensor {source.name!r} changed: expected (requires_grad, dtype, device, "
                    f"size, {layout}) {expected}, actual {actual}"
                )
        return None

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        return [(self.rank, f"{code.const(self.state, 'module_tree')}.holds({names[0]}, L, G)")]

    def describe(self) -> str:
        tensors = len(self.tensor_sources)
        return (
            f"{self.guard_type}: {self.source.expr} ({len(self.covered)} guards, {tensors} "
            "tensors; in full after a module mutation)"
        )


def _tables_reader(sources: tuple[ParamBufferSource, ...]) -> Callable[[Any, Any], tuple]:
    """`read(L, G)`: the `_parameters` / `_buffers` dict holding each tensor source."""
    return _reader(
        tuple(
            AttrSource(source.source, "_buffers" if source.is_buffer else "_parameters")
            for source in sources
        )
    )


def _reader(sources: tuple[Source, ...]) -> Callable[[Any, Any], tuple]:
    """`read(L, G)`: the values of `sources`, as a tuple (for full checks, not the fast path)."""
    text = f"lambda L, G: ({''.join(source.expr + ', ' for source in sources)})"
    return eval(compile(text, "<ember module_tree reader>", "eval"), {"__builtins__": {}})
