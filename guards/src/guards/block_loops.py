"""Guards of identical blocks checked as one loop over the blocks.

A model looping over identical layers (GPT-2's `h`, Llama's `layers`) gets the same
guards on every layer, differing only in the layer they start from:

    TENSOR_MATCH: L['self']._modules['h']._modules['0']._modules['attn']...c_attn.weight
    EQUALS:       L['self']._modules['h']._modules['0']._modules['attn'].split_size
    ...           (the same for '1', '2', ... '23')

`loop_identical_blocks` finds the blocks (modules of one class, the NN_MODULE guard of
each on record, children of the same module; the outermost such level), writes each
guard under a block with the block's source replaced by a placeholder (`BLOCK`, the
block check's `L`), and keeps the guards that come out equal for every block as one
`BlockLoopGuard`. Its check calls one function, generated once from those guards, on
each block in turn:

    def guard_check(L, G):              # a module tree's full check (module_tree.py)
        ...
        if not (___block_loop_7(___block_check_8, (self_h_0, ..., self_h_23), G)):
            return False

so the generated code no longer grows with the number of layers by the guards they
share. Each block is checked by exactly the guards it had: a guard written under the
placeholder and read with the placeholder bound to a block is that block's guard, and
equal guards have equal fields (the same expected type, value, object id, tensor
metadata). A guard a block does not share with every other block (its own identity,
an attribute of its own, another shape) stays checked on its own, as does every guard
not under a block; so a block replaced or changed in any way a guard sees still fails.

Used for the guards a module tree covers, checked in full only after a module
mutation. The entry's own function keeps its guards inline: there stable reads
(stable_reads.py) reuse the chains each block's guards read, which a loop, reading
them from each block again, cannot.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from guards.guard_kinds import (
    DictKeysGuard,
    EqualsGuard,
    Guard,
    GuardCode,
    HasAttrGuard,
    IdGuard,
    LengthGuard,
    ModuleStructureGuard,
    NNModuleGuard,
    NotInInstanceDictGuard,
    TypeGuard,
)
from guards.sources import ModuleSource, Source
from guards.tensor_guards import TensorMatchGuard

__all__ = ["BLOCK", "ENABLED", "BlockLoopGuard", "BlockSource", "loop_identical_blocks"]

# Off: every guard checked on its own (tests and benchmarks compare the two).
ENABLED = True


@dataclass(frozen=True, slots=True)
class BlockSource(Source):
    """The block a looped guard reads from: the block check's first argument."""

    def reconstruct(self, base_expr: str) -> str:
        return "L"

    def short_name(self, base_name: str) -> str:
        return "block"


BLOCK = BlockSource()
# Guard kinds whose check is all in their compared fields and their one source.
_LOOPED = (
    TypeGuard, EqualsGuard, IdGuard, HasAttrGuard, LengthGuard, DictKeysGuard,
    NotInInstanceDictGuard, TensorMatchGuard,
)  # fmt: skip
# A loop replaces at least this many guards (fewer: checked one by one, as cheap).
MIN_LOOPED = 4


def _rerooted(source: Source, block: Source) -> Source | None:
    """`source` with `block` replaced by BLOCK; None where it is not read through `block`."""
    if source == block:
        return BLOCK
    changes = {}
    for f in dataclasses.fields(source):
        value = getattr(source, f.name)
        if isinstance(value, Source):
            moved = _rerooted(value, block)
            if moved is None:
                return None
            changes[f.name] = moved
    return dataclasses.replace(source, **changes) if changes else None


def _blocks(guards: Sequence[Guard]) -> list[tuple[Source, ...]]:
    """Sibling module sources of one class (an NN_MODULE or structure guard on each), by
    parent."""
    siblings: dict[tuple[Source, type], list[Source]] = collections.defaultdict(list)
    for guard in guards:
        if isinstance(guard, NNModuleGuard | ModuleStructureGuard) and isinstance(
            guard.source, ModuleSource
        ):
            module = guard.ref()
            if module is not None:
                siblings[(guard.source.source, type(module))].append(guard.source)
    groups = [tuple(dict.fromkeys(group)) for group in siblings.values()]
    return [group for group in groups if len(group) >= 2]


def _block_of(source: Source, blocks: set[Source]) -> Source | None:
    """The outermost block `source` is read through, if any (the layers of a model, not
    the two norms of each layer)."""
    found = None
    node: Any = source
    while node is not None:
        if node in blocks:
            found = node
        node = getattr(node, "source", None)
    return found


def loop_identical_blocks(
    guards: Sequence[Guard],
    compile_check: Callable[[list[Guard], str], Callable[..., bool]],
    modules: Sequence[Guard] = (),
) -> list[Guard]:
    """`guards` (in order), the guards each of a group of identical blocks has in common
    replaced by one BlockLoopGuard; `compile_check(guards, header)` generates the check
    of one block's guards (reading the block as its `L`). The blocks are the modules whose
    NN_MODULE guards are in `guards` or `modules` (the whole set's)."""
    groups = _blocks([*guards, *modules]) if ENABLED else []
    if not groups:
        return list(guards)
    block_of_group = {block: index for index, group in enumerate(groups) for block in group}
    # group -> block -> its guards rerooted (in order), and guard -> (group, rerooted)
    per_block: list[dict[Source, dict[Guard, Guard]]] = [{b: {} for b in g} for g in groups]
    placed: dict[Guard, tuple[int, Guard]] = {}
    for guard in guards:
        if not isinstance(guard, _LOOPED) or len(guard.sources()) != 1:
            continue
        block = _block_of(guard.source, set(block_of_group))
        if block is None:
            continue
        moved = _rerooted(guard.source, block)
        if moved is None:
            continue
        rerooted = dataclasses.replace(guard, source=moved)
        index = block_of_group[block]
        per_block[index][block].setdefault(rerooted, guard)
        placed[guard] = (index, rerooted)
    loops: dict[int, BlockLoopGuard] = {}
    looped: set[int] = set()
    for index, group in enumerate(groups):
        first, *others = (per_block[index][block] for block in group)
        common = [g for g in first if all(g in other for other in others)]
        if len(common) * len(group) < MIN_LOOPED:
            continue
        header = f"one block of {len(group)} ({group[0].name} ...): {len(common)} guards"
        check = compile_check(common, header)
        loops[index] = BlockLoopGuard(group[0], group, tuple(common), check)
        kept = set(common)
        for block in group:
            looped.update(id(g) for r, g in per_block[index][block].items() if r in kept)
    result: list[Guard] = []
    for guard in guards:
        if id(guard) not in looped:
            result.append(guard)
            continue
        loop = loops.pop(placed[guard][0], None)
        if loop is not None:  # at the place of the first guard it stands for
            result.append(loop)
    return result


def _run_loop(check: Callable[..., bool], blocks: tuple[Any, ...], G: Any) -> bool:  # noqa: N803
    for block in blocks:
        if not check(block, G):
            return False
    return True


@dataclass(frozen=True, slots=True, eq=False)
class BlockLoopGuard(Guard):
    """The guards identical blocks have in common (`body`, read from the block as `L`),
    checked by one generated function `check` for each block of `blocks` in turn."""

    blocks: tuple[Source, ...]
    body: tuple[Guard, ...]
    check: Callable[..., bool] = field(repr=False)

    guard_type: ClassVar[str] = "BLOCK_LOOP"
    rank: ClassVar[int] = 45  # after the cheap checks of the frame's own values

    def sources(self) -> tuple[Source, ...]:
        return self.blocks

    def failure(self, *blocks: Any) -> str | None:
        for source, block in zip(self.blocks, blocks, strict=True):
            for guard in self.body:
                try:
                    value = eval(guard.source.expr, {}, {"L": block})  # noqa: S307
                except Exception as error:  # noqa: BLE001 - a read that fails is a failure
                    return f"{source.name}: {guard.describe()} cannot be read ({error})"
                found = guard.failure(value)
                if found is not None:
                    return f"{source.name}: {found}"
        return None

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        blocks = "".join(f"{name}, " for name in names)
        run = code.const(self.check, "block_check")
        return [(self.rank, f"{code.const(_run_loop, 'block_loop')}({run}, ({blocks}), G)")]

    def describe(self) -> str:
        return (
            f"{self.guard_type}: {len(self.body)} guards of each of {len(self.blocks)} blocks "
            f"{self.blocks[0].expr} ..."
        )
