"""Which locals of a frame are bound at each instruction: a must / may dataflow.

A frame split at a graph break hands its locals from part to part. A local that
is unbound where a part stops (assigned on one branch only, deleted, a loop
variable of an empty loop) must be unbound again where the next part starts, so
that reading it raises UnboundLocalError as in eager. `bindings(code)` says, for
each instruction of a function's own code, which locals are bound before it on
every path (`must`) and on some path (`may`); resume uses it to generate checks
only for the locals that need them.

    def f(x, flag):          offset of `return`:  must = {x, flag}
        if flag:                                  may  = {x, flag, y}
            y = x + 1
        return x             y: maybe unbound: checked where a part stops or starts

Cell variables are not tracked (a split frame's parts always hold their cells).
A local that 3.12's inlined comprehensions save and restore (LOAD_FAST_AND_CLEAR)
is never counted as surely bound.
"""

from __future__ import annotations

import dis
import inspect
import types
import weakref
from dataclasses import dataclass

__all__ = [
    "Binding",
    "bindings",
    "live_locals",
    "parameter_count",
    "read_before_written",
    "read_not_only_handed_on",
]

_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)
_ENDS = ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE")


@dataclass(frozen=True, slots=True)
class Binding:
    """The locals bound before an instruction on every path (`must`) and on some path."""

    must: frozenset[str]
    may: frozenset[str]

    def maybe_unbound(self, names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(name for name in names if name not in self.must)

    def merge(self, other: Binding) -> Binding:
        return Binding(self.must & other.must, self.may | other.may)


_CACHE: weakref.WeakKeyDictionary[types.CodeType, dict[int, Binding]] = weakref.WeakKeyDictionary()
_LIVE_CACHE: weakref.WeakKeyDictionary[types.CodeType, frozenset[str]] = weakref.WeakKeyDictionary()


def parameter_count(code: types.CodeType) -> int:
    """How many of `code`'s first varnames are its parameters (`*args`, `**kwargs` too)."""
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & inspect.CO_VARARGS)
    count += bool(code.co_flags & inspect.CO_VARKEYWORDS)
    return count


def bindings(code: types.CodeType) -> dict[int, Binding]:
    """The Binding before each instruction reached from the entry (normal or exception flow)."""
    found = _CACHE.get(code)
    if found is None:
        found = _CACHE[code] = _solve(code)
    return found


# reads of a local by name; DELETE_FAST too (it raises on an unbound local)
_LOCAL_READS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "DELETE_FAST")
# names through which code may read every local of its frame
_FRAME_READERS = frozenset({"locals", "vars", "_getframe", "currentframe", "exec", "eval"})
# names through which code may see when an object dies: eagerly a frame keeps every local
# alive until it returns, so a part hands on even the locals no later code reads
_LIFETIME_WATCHERS = frozenset(
    {"weakref", "ref", "proxy", "finalize", "WeakMethod", "WeakSet", "WeakKeyDictionary",
     "WeakValueDictionary", "getrefcount"}
)  # fmt: skip


def read_before_written(code: types.CodeType) -> frozenset[str] | None:
    """The locals some path from the entry may read before storing them (a backward
    liveness over normal and exception flow); None where the code may read all of its
    locals another way (`locals()`, `sys._getframe()`, zero-argument `super()`), or may
    see when a local's object dies (`weakref.ref`).

    A part of a split frame hands its locals on by reading them in its epilogue, and
    hands on a local no later part reads as UNBOUND (resume), so a local is left out
    only where no later part needs it either: capture need not take it as an input,
    nor guard it (as torch.compile's resume functions take only their live locals).
    """
    live = live_locals(code)
    if live is None:
        return None
    return live.get(min(live), frozenset()) if live else frozenset()


def live_locals(code: types.CodeType) -> dict[int, frozenset[str]] | None:
    """Before each instruction, the locals some path from there may read before storing
    them; None where the code may read all its locals another way (read_before_written)."""
    if (_FRAME_READERS | _LIFETIME_WATCHERS) & set(code.co_names):
        return None
    if "super" in code.co_names and "__class__" in code.co_freevars:
        # zero-argument super() reads the first argument from the frame, not by name
        return None
    found = _LIVE_CACHE.get(code)
    if found is None:
        found = _LIVE_CACHE[code] = _solve_live(code)
    return found


def read_not_only_handed_on(
    code: types.CodeType, handing_on: tuple[tuple[int, int], ...]
) -> frozenset[str] | None:
    """As read_before_written, not counting the reads in the spans `handing_on` (a
    part's epilogues, which hand its locals on to the next part): the locals some path
    reads for the code's own use."""
    if live_locals(code) is None:
        return None
    live = _solve_live(code, handing_on)
    return live.get(min(live), frozenset()) if live else frozenset()


def _solve_live(
    code: types.CodeType, ignored: tuple[tuple[int, int], ...] = ()
) -> dict[int, frozenset[str]]:
    insts = [inst for inst in dis.get_instructions(code) if inst.opname != "CACHE"]
    skipped = {inst.offset for inst in insts if any(lo <= inst.offset < hi for lo, hi in ignored)}
    index_of = {inst.offset: index for index, inst in enumerate(insts)}
    handlers: dict[int, list[int]] = {}
    for entry in dis.Bytecode(code).exception_entries:
        for inst in insts:
            if entry.start <= inst.offset < entry.end:
                handlers.setdefault(inst.offset, []).append(entry.target)
    successors = [_successors(insts, index, handlers) for index in range(len(insts))]
    live: list[frozenset[str]] = [frozenset()] * len(insts)
    changed = True
    while changed:
        changed = False
        for index in reversed(range(len(insts))):
            inst = insts[index]
            out: set[str] = set()
            raised: set[str] = set()  # a handler runs before or after this store
            for target in successors[index]:
                if target not in index_of:
                    continue
                into = live[index_of[target]]
                (raised if target in handlers.get(inst.offset, ()) else out).update(into)
            if inst.opname == "STORE_FAST":
                out.discard(inst.argval)
            if inst.opname in _LOCAL_READS and inst.offset not in skipped:
                out.add(inst.argval)
            new = frozenset(out | raised)
            if new != live[index]:
                live[index] = new
                changed = True
    return {inst.offset: live[index] for index, inst in enumerate(insts)}


def _successors(
    insts: list[dis.Instruction], index: int, handlers: dict[int, list[int]]
) -> list[int]:
    inst = insts[index]
    out = list(handlers.get(inst.offset, ()))
    if inst.opcode in _JUMPS:
        out.append(inst.argval)
    unconditional = inst.opname.startswith("JUMP") and "IF" not in inst.opname
    if inst.opname not in _ENDS and not unconditional and index + 1 < len(insts):
        out.append(insts[index + 1].offset)
    return out


def _solve(code: types.CodeType) -> dict[int, Binding]:
    insts = [inst for inst in dis.get_instructions(code) if inst.opname != "CACHE"]
    if not insts:
        return {}
    index_of = {inst.offset: index for index, inst in enumerate(insts)}
    cells = set(code.co_cellvars) | set(code.co_freevars)
    cleared = {
        inst.argval for inst in insts if inst.opname == "LOAD_FAST_AND_CLEAR"
    }  # saved and restored around an inlined comprehension: maybe unbound after it
    handlers: dict[int, list[int]] = {}
    for entry in dis.Bytecode(code).exception_entries:
        for inst in insts:
            if entry.start <= inst.offset < entry.end:
                handlers.setdefault(inst.offset, []).append(entry.target)
    params = frozenset(code.co_varnames[: parameter_count(code)]) - cells
    state: dict[int, Binding] = {insts[0].offset: Binding(params - cleared, params)}
    work = [0]
    while work:
        index = work.pop()
        inst = insts[index]
        after = _transfer(state[inst.offset], inst, cells, cleared)
        for target in _successors(insts, index, handlers):
            if target not in index_of:
                continue
            incoming = after
            if target in handlers.get(inst.offset, ()):  # raised before or after its store
                before = state[inst.offset]
                incoming = Binding(before.must & after.must, before.may | after.may)
            known = state.get(target)
            merged = incoming if known is None else known.merge(incoming)
            if merged != known:
                state[target] = merged
                work.append(index_of[target])
    return state


def _transfer(
    before: Binding, inst: dis.Instruction, cells: set[str], cleared: set[str]
) -> Binding:
    name = inst.argval
    if not isinstance(name, str) or name in cells:
        return before
    if inst.opname == "STORE_FAST":
        must = before.must if name in cleared else before.must | {name}
        return Binding(must, before.may | {name})
    if inst.opname in ("DELETE_FAST", "LOAD_FAST_AND_CLEAR"):
        return Binding(before.must - {name}, before.may - {name})
    return before
