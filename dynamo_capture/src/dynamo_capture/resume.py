"""Graph breaks at statement boundaries: a frame split into prefix, eager middle and resume.

When capture meets something it cannot put in a graph at instruction I of the
compiled frame, the frame is cut at two statement boundaries around I:

    prefix  [0, S)     captured: ends by returning (END, *locals)
    middle  [S, S2)    the unsupported statement(s), run eagerly the same way
    resume  [S2, end)  a generated function continuing at S2, itself compiled
                       (captured and cached on its first call)

A boundary is an offset where no jump crosses and the value stack holds nothing
but the `__exit__`s of the `with` blocks open there. Each part is a copy of the
frame's code object whose parameters are all its locals; the original
instructions stay in place and generated code is appended after them: an entry
jump leads to a prologue that enters a fresh copy of every open grad-mode or
autocast context (so the block's own exit, normal or by an exception, restores
the mode as in eager) and jumps to the part's first instruction; at the stop
offset a jump leads to an epilogue that leaves those `with` blocks normally and
returns `(END, *locals)`. A `return` reached inside a part returns the plain
value, so the caller can tell the two apart.

The middle stops at the first boundary after the break that every path from
its start reaches without leaving the part first: a jump to the part's own stop
(a loop body's `continue`, the end of its last branch) leaves it, and a middle
that stopped there as well would be followed by the resume part once too often.

A local unbound where a part stops is handed on as UNBOUND (the epilogue reads
a local that may be unbound under an exception table entry of its own) and the
next part's prologue deletes it again; only locals the must/may analysis of
`bound_locals` cannot prove bound get either. The first part takes the frame's
parameters alone, its other locals unbound as in the frame. Generated code gets
location table entries with the lines of the statements it stands for, so
tracebacks from any part show the user's file and line.

No boundary lies inside a loop (a backward jump crosses it). A `for` loop
holding the break gets a `LoopPlan`: its header runs eagerly and returns the
iterator, and `LoopStage` calls the body as a part per item (entered after the
target's stores with an empty stand-in iterator on the stack, stopped at the
loop's FOR_ITER). A `while` loop keeps its state in the locals: where a
`return` comes before its jump back, a part resumes inside it (inside a grad-mode
or autocast `with` block in it too, the block re-entered by the prologue) and
runs the rest of the loop, else the loop runs in the eager part; a `with` on a
context capture cannot rebuild runs eagerly as a whole. A break inside a `try` body compiles up to the
last boundary before it and runs the rest of the frame eagerly (handlers
kept), as torch does. Frames with cell variables or generator flags are not
split (they run eagerly, logged); closures are kept.

A failing call inside an expression (`f(x) + g(x)`) is cut at the call's first
instruction instead (`_call_plan`): the partial values below it travel in the
`___stack` local (stored by the epilogue, pushed back by the prologue), so the
graph before the break holds `f(x)`. A NULL among them (the break lies in another
call's arguments, `int(t.item())`) is dropped by the epilogue and pushed again by
the prologue (`_pack_stack`). Where the callable loads again without effects (a
global or local function, a plain method of a local or global object) the cut
lies at the call instruction itself (`CallArguments`): its arguments, keyword
ones included, are computed in the graph before. Inside grad-mode or autocast
`with` blocks each part re-enters them below the partial values; inside a try
block or a loop there is no instruction cut. Elsewhere cuts are at statements.
"""

from __future__ import annotations

import dis
import inspect
import re
import types
import weakref
from dataclasses import dataclass
from typing import Any

from dynamo_capture.bound_locals import (
    Binding,
    bindings,
    live_locals,
    parameter_count,
    read_before_written,
    read_not_only_handed_on,
)
from dynamo_capture.break_callees import COMPREHENSIONS
from dynamo_capture.bytecode import (
    CHECKED_LOAD_FAST,
    PY312,
    ExceptionEntry,
    append_exception_entries,
    append_line_spans,
    emit,
    emit_call,
    emit_jump,
    emit_skip_if_false,
    line_at,
)

__all__ = [
    "END",
    "ITERATOR",
    "STACK_LOCAL",
    "UNBOUND",
    "CallArguments",
    "ContextSpec",
    "LoopPlan",
    "LoopStage",
    "SplitPlan",
    "breaks_inside_loop",
    "lies_in_loop",
    "called_globals",
    "comprehension_callees",
    "cell_locals",
    "describe_split",
    "handed_on_only",
    "first_part_arity",
    "first_part_values",
    "part_locals",
    "generated_from",
    "is_end",
    "plan_rest_eager",
    "plan_split",
    "segment_function",
]


class _End:
    """Marks a part that reached its stop offset (the tuple after it holds the locals)."""

    def __repr__(self) -> str:
        return "<segment end>"


class _Unbound:
    """Stands for a local that is unbound where a part stops; the next part unbinds it."""

    def __repr__(self) -> str:
        return "<unbound local>"


END = _End()
UNBOUND = _Unbound()
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)
_UNSPLITTABLE_FLAGS = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)  # fmt: skip
_PRELUDE = ("RESUME", "COPY_FREE_VARS", "MAKE_CELL")
# A part's code -> where its generated code (prologue, epilogue) starts.
_GENERATED: weakref.WeakKeyDictionary[types.CodeType, int] = weakref.WeakKeyDictionary()
# A part's code -> the user's code it was cut from (whose locals analysis applies to it).
_ROOT: weakref.WeakKeyDictionary[types.CodeType, types.CodeType] = weakref.WeakKeyDictionary()
# The parts that stop before the frame's end (a middle, a loop body): offset of the stop.
_STOPS: weakref.WeakKeyDictionary[types.CodeType, int] = weakref.WeakKeyDictionary()
# A part's code -> the spans of its epilogues, which read its locals to hand them on.
_HANDING_ON: weakref.WeakKeyDictionary[types.CodeType, tuple[tuple[int, int], ...]] = (
    weakref.WeakKeyDictionary()
)
# A part's code -> its locals that hold the frame's cells.
_CELL_LOCALS: weakref.WeakKeyDictionary[types.CodeType, tuple[str, ...]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True, slots=True)
class ContextSpec:
    """A value a part rebuilds on its stack at entry and unwinds at its stop.

    kind "with": a grad-mode or autocast context, `factory(*args)` makes a fresh one
    (entered; left by calling its exit). kind "iter": the iterator of a `for` loop
    whose body is the part (an empty iterator; popped).
    """

    factory: Any
    args: tuple[Any, ...] = ()
    kind: str = "with"


ITERATOR = ContextSpec(None, (), "iter")
STACK_LOCAL = "___stack"  # the local that carries an instruction-level cut's stack values


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """A `for` loop holding the break: its body runs as a compiled part per iteration.

    `for_iter`: the FOR_ITER offset (the body part stops there); `body`: the first
    instruction after the loop target's stores; `targets`: the names stored,
    `unpack`: their count when the item is unpacked (0: a single name).
    """

    for_iter: int
    body: int
    targets: tuple[str, ...]
    unpack: int


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """Where a frame is cut: the eager middle is [start, stop); stop None runs to the end.

    `contexts` are the `with` contexts open at `start` (outermost first), re-entered by
    the middle; `resume_contexts` those open at `stop`, re-entered by the resume part.
    `in_try`: the break lies in a try body, so the rest of the frame runs eagerly.
    """

    start: int
    stop: int | None
    body_start: int
    contexts: tuple[ContextSpec, ...] = ()
    resume_contexts: tuple[ContextSpec, ...] = ()
    in_try: bool = False
    loop: LoopPlan | None = None
    stack: tuple[int, int] | None = None  # instruction-level cut: values at start, at stop
    call_args: CallArguments | None = None  # a cut at the call instruction itself
    stack_nulls: tuple[int, ...] = ()  # positions of NULLs among the stack values
    # a cut at the call instruction with its callable among the stack values (pushed
    # by a part's prologue): the callable's position, routed to its compiled frame
    routed: int | None = None

    @property
    def nulls_after(self) -> tuple[int, ...]:
        """The NULLs among the stack values after the cut call (a routed call took its own)."""
        if self.routed is None:
            return self.stack_nulls
        return tuple(null for null in self.stack_nulls if null != self.routed - 1)


def is_end(result: Any) -> bool:
    """True when a part returned at its stop offset (END, *locals), not from a `return`."""
    return type(result) is tuple and len(result) > 0 and result[0] is END


def _instructions(code: types.CodeType) -> list[dis.Instruction]:
    return [inst for inst in dis.get_instructions(code) if inst.opname != "CACHE"]


def _why_not_splittable(code: types.CodeType) -> str | None:
    if code.co_flags & _UNSPLITTABLE_FLAGS:
        return "a generator or coroutine frame"
    if not code.co_cellvars:
        return None
    if "__class__" in code.co_freevars and code.co_varnames[:1] == code.co_cellvars[:1]:
        # zero-argument super() reads the first local as a cell only in a cell slot
        return "a method whose `self` is captured by an inner function and that calls super()"
    insts = _instructions(code)
    body_start = next(inst.offset for inst in insts if inst.opname not in _PRELUDE)
    if any(inst.opname == "MAKE_CELL" and inst.offset > body_start for inst in insts):
        return "a frame making cells in its body (a comprehension's variable captured inside it)"
    return None


def cell_locals(code: types.CodeType) -> tuple[str, ...]:
    """The locals of part `code` that hold the frame's cells (the cell objects themselves).

    A frame whose locals are captured by inner functions (`co_cellvars`) is split
    into parts that share its cells: every part takes each cell as a parameter and
    keeps it in the cell's own slot, so a closure made in one part sees the writes
    of another, as in eager code.
    """
    return _CELL_LOCALS.get(code, ())


def generated_from(code: types.CodeType) -> int:
    """The offset where a part's generated code (prologue, epilogue) starts."""
    return _GENERATED.get(code, len(code.co_code))


def handed_on_only(code: types.CodeType) -> frozenset[str]:
    """The locals part `code` reads only to hand them on (in its epilogue, as `return
    (END, *locals)`): its own instructions never read them, so capture takes them as
    they are, read again when the part returns, unguarded (torch.compile guards a
    resume function's local only when its code reads it)."""
    spans = _HANDING_ON.get(code)
    if not spans:
        return frozenset()
    every = read_before_written(code)
    own = read_not_only_handed_on(code, spans)
    if every is None or own is None:
        return frozenset()
    return every - own - {STACK_LOCAL, *cell_locals(code), *code.co_cellvars}


def first_part_values(code: types.CodeType, f_locals: dict[str, Any]) -> list[Any]:
    """The arguments of a split frame's first part: its locals (UNBOUND for those not
    bound yet), and a fresh cell for each cell variable (holding the argument's value
    for a captured parameter). The part takes the first `first_part_arity` of them."""
    if not code.co_cellvars:
        return [f_locals.get(name, UNBOUND) for name in code.co_varnames]
    cellvars = set(code.co_cellvars)
    values = [
        types.CellType(f_locals[name]) if name in cellvars and name in f_locals
        else types.CellType() if name in cellvars
        else f_locals.get(name, UNBOUND)
        for name in code.co_varnames
    ]  # fmt: skip
    return values + [types.CellType() for name in _cell_only_names(code)]


def first_part_arity(code: types.CodeType) -> int:
    """How many arguments the part starting at `code`'s first instruction takes.

    It has no prologue to unbind locals passed as UNBOUND, so it takes only the frame's
    parameters and its other locals start unbound, as in the frame itself. A frame with
    cell variables that are not parameters passes those cells after its other locals,
    so its first part takes them all (plan_split keeps such a part from reading a local
    that may be unbound).
    """
    if _cell_only_names(code):
        return len(code.co_varnames) + len(_cell_only_names(code))
    return parameter_count(code)


def part_locals(code: types.CodeType) -> tuple[str, ...]:
    """The user's locals every part of a split frame takes, in order: the frame's varnames,
    then its cell variables that are not parameters (their cells)."""
    return (*code.co_varnames, *_cell_only_names(code))


def _cell_only_names(code: types.CodeType) -> tuple[str, ...]:
    """Cell variables that are not parameters: they follow the varnames in the frame."""
    return tuple(name for name in code.co_cellvars if name not in code.co_varnames)


def _depths(insts: list[dis.Instruction], entries: list[Any] | None = None) -> dict[int, int]:
    """The value-stack depth before each instruction reached by normal flow (a worklist);
    with the exception table's `entries`, also by the handlers of the instructions
    reached (`except` clauses, and the code after a try statement reached only through
    them, as after a `raise` the handler catches)."""
    index_of = {inst.offset: index for index, inst in enumerate(insts)}
    depths: dict[int, int] = {insts[0].offset: 0}
    work = [0]
    while True:
        _walk_depths(insts, index_of, depths, work)
        for entry in entries or ():
            if entry.target in depths or entry.target not in index_of:
                continue
            if any(entry.start <= at < entry.end for at in depths):
                depths[entry.target] = entry.depth + int(entry.lasti) + 1
                work.append(index_of[entry.target])
        if not work:
            return depths


def _walk_depths(
    insts: list[dis.Instruction], index_of: dict[int, int], depths: dict[int, int], work: list[int]
) -> None:
    while work:
        index = work.pop()
        inst = insts[index]
        depth = depths[inst.offset]
        arg = inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None
        successors = []
        if inst.opcode in _JUMPS:
            successors.append((inst.argval, dis.stack_effect(inst.opcode, arg, jump=True)))
        falls_through = not (
            inst.opname in ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE")
            or (inst.opname.startswith("JUMP") and "IF" not in inst.opname)
        )
        if falls_through and index + 1 < len(insts):
            effect = dis.stack_effect(inst.opcode, arg, jump=False)
            successors.append((insts[index + 1].offset, effect))
        for target, effect in successors:
            if target not in depths and target in index_of:
                depths[target] = depth + effect
                work.append(index_of[target])


@dataclass(frozen=True, slots=True)
class _Cut:
    """A statement boundary: how many `with` blocks are open there, and whether a try is."""

    offset: int
    withs: int
    in_try: bool
    in_while: bool = False  # inside `while` loops (and no `for` loop)


def _cuts(
    code: types.CodeType, insts: list[dis.Instruction], body_start: int
) -> tuple[list[_Cut], list[tuple[int, int]], list[int]]:
    """Every boundary of `code` after its prelude, in offset order; the user's jumps; and
    the offsets of the jumps that leave the part (to its stop offset, a loop body's
    FOR_ITER: a `continue` or the body's end)."""
    entries = list(dis.Bytecode(code).exception_entries)
    normal = _depths(insts)  # reached without an exception
    depths = _depths(insts, entries)
    generated = _GENERATED.get(code, len(code.co_code))
    # a stop offset of this part: a jump into its epilogue (a loop back to it is no loop)
    exits = {i.offset for i in insts if i.opcode in _JUMPS and i.argval >= generated}
    jumps = [
        (inst.offset, inst.argval)
        for inst in insts
        if inst.opcode in _JUMPS
        and inst.offset < generated
        and inst.argval < generated
        and inst.argval not in exits
    ]
    leaving = [
        inst.offset
        for inst in insts
        if inst.opcode in _JUMPS
        and inst.offset < generated
        and (inst.argval in exits or inst.argval >= generated)
    ]
    jumps = _without_handler_returns(jumps, normal, entries)
    try_spans = _try_spans(code, insts)
    for_iters = {inst.offset for inst in insts if inst.opname == "FOR_ITER"}
    cuts = []
    for inst in insts:
        at = inst.offset
        depth = depths.get(at)
        if at < body_start or at >= generated or depth is None or inst.opname == "FOR_ITER":
            continue  # (a loop's FOR_ITER has the loop's real iterator on the stack)
        if inst.opname == "RETURN_VALUE":
            continue  # the returned value is on the stack (after a `with` closed: no context)
        loops = [dst for src, dst in jumps if dst < at < src]
        if any(dst in for_iters for dst in loops):
            continue  # inside a `for` loop: its iterator is on the stack
        covering = [entry for entry in entries if entry.start <= at < entry.end]
        if covering and covering[0].depth != depth:
            continue  # a statement's temporaries are on the stack
        # uncovered: the stack holds `depth` values; plan_split accepts the cut only when
        # as many rebuildable values (contexts, loop iterators) lie at the stack's bottom.
        # Inside `while` loops the loops' state is the locals: a part resuming there
        # runs the rest of the loop, its jump back included
        in_try = any(low <= at < high for low, high in try_spans)
        cuts.append(_Cut(at, depth, in_try, bool(loops)))
    return cuts, jumps, leaving


def _without_handler_returns(
    jumps: list[tuple[int, int]], depths: dict[int, int], entries: list[Any]
) -> list[tuple[int, int]]:
    """`jumps` less the backward jumps from exception handlers that close no cycle.

    3.12 places handlers (a `with` block's exit, an `except` clause) after the
    function's body; a handler's jump back to the code after its block is
    backward in the layout but no loop: the block it guards lies before the
    target. Such a jump is a loop only when a try range of normal code at or
    after its target leads to a handler at or before it (`for ...: try: ...
    except: continue`); those are kept whole.
    """
    kept = []
    for source, target in jumps:
        if source in depths or target > source:
            kept.append((source, target))  # normal flow, or forward
            continue
        if any(
            entry.start in depths and entry.start >= target and entry.target <= source
            for entry in entries
        ):
            kept.append((source, target))
    return kept


def _is_with_handler(insts: list[dis.Instruction], by_offset: dict[int, int], at: int) -> bool:
    index = by_offset.get(at)
    if index is None or index + 1 >= len(insts):
        return False
    return insts[index].opname == "PUSH_EXC_INFO" and insts[index + 1].opname == (
        "WITH_EXCEPT_START"
    )


def _try_spans(code: types.CodeType, insts: list[dis.Instruction]) -> list[tuple[int, int]]:
    """The [start, end) of every try body and handler of `code`, `with` blocks left out.

    A handler's entries are merged into one span: a try body holding a `with` block has
    entries before and after it (the with's own handler covers its body).
    """
    by_offset = {inst.offset: index for index, inst in enumerate(insts)}
    spans: dict[int, tuple[int, int]] = {}
    for entry in dis.Bytecode(code).exception_entries:
        low, high = spans.get(entry.target, (entry.start, entry.end))
        spans[entry.target] = (min(low, entry.start), max(high, entry.end))
    return [
        span for target, span in spans.items() if not _is_with_handler(insts, by_offset, target)
    ]


def in_try_block(code: types.CodeType, offset: int) -> bool:
    """Whether `offset` lies in a try body or handler of `code` (a `with` block's is none)."""
    return any(low <= offset < high for low, high in _try_spans(code, _instructions(code)))


def plan_split(
    code: types.CodeType,
    offset: int,
    contexts: tuple[ContextSpec, ...] = (),
    call_cut: tuple[int, int, int, int] | None = None,
    plain_args: bool = False,
    stack_nulls: tuple[int, ...] = (),
    in_loops: bool = False,
) -> SplitPlan | str:
    """The statement boundaries around `offset`, or the reason the frame cannot be split.

    `plain_args`: the failing call's arguments are tensors or constants, so the cut may
    lie at the call instruction itself (SplitPlan.call_args). `stack_nulls`: where the
    values below the failing call hold NULLs (it lies in another call's arguments).
    `in_loops`: the call lies in `for` loops whose iterators capture hands on below its
    partial values, so `call_cut` may lie inside them.

    `contexts` are the contexts capture had entered in this frame when it stopped
    (outermost first); a boundary inside a `with` block is usable only when its
    context is one of them (a grad-mode or autocast context).
    """
    plan = _plan_split(code, offset, contexts, call_cut, plain_args, stack_nulls, in_loops)
    if isinstance(plan, SplitPlan) and code not in _ROOT and _cell_only_names(code):
        # the first part gets UNBOUND for the frame's other locals (first_part_arity)
        first = plan.loop.for_iter if plan.loop is not None else plan.stop
        end = plan.start if plan.start > plan.body_start else first
        name = _read_maybe_unbound(code, plan.body_start, end)
        if name is not None:
            return f"a frame with cells whose first part may read its local {name!r} unbound"
    return plan


def plan_rest_eager(
    code: types.CodeType, offset: int, checkpoints: tuple[tuple[int, int], ...]
) -> SplitPlan | str:
    """For a break capture cannot resume from (in a try block, in a `with` on a context
    it cannot re-enter): compile up to the last statement boundary run before it, outside
    any block, whose graph so far has more than one call, and run the rest eagerly, as
    torch.compile compiles "up to the previous resumable state"; else the reason none."""
    reason = _why_not_splittable(code)
    if reason is not None:
        return reason
    if code.co_cellvars or _cell_only_names(code):
        return "a frame with cells"
    generated = _GENERATED.get(code, len(code.co_code))
    if offset >= generated:
        return "the break lies in generated code"
    insts = _instructions(code)
    body_start = next(inst.offset for inst in insts if inst.opname not in _PRELUDE)
    cuts, _, leaving = _cuts(code, insts, body_start)
    if leaving:
        return "the part stops before the frame's end"
    usable = {cut.offset for cut in cuts if cut.withs == 0 and not cut.in_try and not cut.in_while}
    for at, calls in reversed(checkpoints):
        if at in usable and at > body_start and calls > 1:
            return SplitPlan(at, None, body_start, in_try=True)
    return "no statement before the break whose graph has more than one call"


def _read_maybe_unbound(code: types.CodeType, start: int, end: int | None) -> str | None:
    """A local that `code` may read (or delete) unbound in [start, end), if any."""
    binding = bindings(code)
    tracked = _tracked_locals(code, code.co_varnames, ())
    for inst in _instructions(code):
        if inst.offset < start or (end is not None and inst.offset >= end):
            continue
        if inst.opname in ("LOAD_FAST", "LOAD_FAST_CHECK", "DELETE_FAST"):
            known = binding.get(inst.offset)
            if inst.argval in tracked and (known is None or inst.argval not in known.must):
                return inst.argval
    return None


def lies_in_loop(code: types.CodeType, offset: int) -> bool:
    """Whether some jump after `offset` goes back to an offset before it (a loop's body,
    a `while` loop's test included), whatever lies between."""
    limit = generated_from(code)
    return any(
        inst.opcode in _JUMPS and inst.argval <= offset
        for inst in _instructions(code)
        if offset < inst.offset < limit
    )


def breaks_inside_loop(code: types.CodeType, offset: int) -> bool:
    """Whether a break at `offset` counts as one inside a loop: a jump after it, before
    the first `return` that follows, goes back to an offset before it.

    torch.compile runs such a frame eagerly as a whole (its callees still compiled as
    frames of their own) and resumes after a break only where this is false. The test
    is the same approximation: a `return` inside the loop's body ends the search (so
    `if t.sum() > 0: return t` in a loop is resumed after), and a `while` loop's first
    test, whose backward jump lands after it, is not inside the loop. Generated code
    of a part (appended after the original instructions) is not searched.
    """
    limit = generated_from(code)
    insts = _instructions(code)
    after = [inst for inst in insts if offset < inst.offset < limit]
    for inst in after:
        if inst.opname in ("RETURN_VALUE", "RETURN_CONST"):
            return False
        if inst.opcode in _JUMPS and inst.argval < offset:
            return True
    return False


def _plan_split(
    code: types.CodeType,
    offset: int,
    contexts: tuple[ContextSpec, ...],
    call_cut: tuple[int, int, int, int] | None,
    plain_args: bool = False,
    stack_nulls: tuple[int, ...] = (),
    in_loops: bool = False,
) -> SplitPlan | str:
    reason = _why_not_splittable(code)
    if reason is not None:
        return reason
    if in_try_block(code, offset):
        # NOTE: torch.compile runs such a frame eagerly too (it resumes only in `with`
        # blocks it can re-enter); the rest of the frame used to run eagerly after a
        # compiled prefix, which gave other graph counts
        return "the break lies in a try block"
    if offset >= _GENERATED.get(code, len(code.co_code)):
        return "the part's values cannot leave its graph (capture failed in its epilogue)"
    insts = _instructions(code)
    body_start = next(inst.offset for inst in insts if inst.opname not in _PRELUDE)
    all_cuts, jumps, leaving = _cuts(code, insts, body_start)
    # a boundary inside a `while` loop only where the break is not inside a loop (a
    # `return` comes before any jump back): else the loop runs in the eager part
    in_loop = breaks_inside_loop(code, offset)
    cuts = [
        cut for cut in all_cuts if cut.withs <= len(contexts) and not (cut.in_while and in_loop)
    ]
    starts = [cut for cut in cuts if cut.offset <= offset]
    if not starts:
        return "no statement boundary before the unsupported instruction"
    start = starts[-1]
    at_call = _call_plan(
        code, insts, call_cut, jumps, body_start, plain_args, stack_nulls, contexts, in_loops
    )
    if at_call is not None:
        return at_call
    # (not in a part that stops somewhere: a `break` would run on to that stop, whose
    # END the loop driver would take for the end of an iteration)
    loop = _loop_plan(insts, start, offset) if not leaving else None
    if loop is not None:
        return SplitPlan(start.offset, loop[1], body_start, loop=loop[0])

    def closes(cut: _Cut) -> bool:
        # every path from `start` reaches `cut`: no jump leaves [start, cut) past it, and
        # none leaves the part (a `continue`, a branch ending a loop body): the middle
        # would end there as it ends at `cut`, and the resume part would run after it
        if any(start.offset <= src < cut.offset for src in leaving):
            return False
        return not any(start.offset <= src < cut.offset < dst for src, dst in jumps)

    stops = [
        cut for cut in cuts if cut.offset > offset and cut.withs <= start.withs and closes(cut)
    ]
    stop = stops[0] if stops and not start.in_try and not stops[0].in_try else None
    return SplitPlan(
        start.offset,
        stop.offset if stop is not None else None,
        body_start,
        contexts[: start.withs],
        contexts[: stop.withs] if stop is not None else (),
        start.in_try or (bool(stops) and stops[0].in_try),
    )


def _call_plan(
    code: types.CodeType,
    insts: list[dis.Instruction],
    call_cut: tuple[int, int, int, int] | None,
    jumps: list[tuple[int, int]],
    body_start: int,
    args_known: bool = False,
    stack_nulls: tuple[int, ...] = (),
    contexts: tuple[ContextSpec, ...] = (),
    in_loops: bool = False,
) -> SplitPlan | None:
    """An instruction-level cut around the failing call, when its statement's partial
    values lie on the stack (`f(x) + g(x)`): the graph before holds `f(x)`, the call
    runs eagerly, and the resume part continues the expression with both values.

    Inside `with` blocks on `contexts` (grad mode, autocast) each part re-enters them
    as a statement cut does; their exits lie below the partial values. Not in a try.
    Inside `for` loops only `in_loops` (their iterators lie below, handed on as at a
    data-dependent jump); inside a `while` loop its state is the locals handed on, and
    the part resuming there runs the rest of the loop (its back jump included)."""
    if call_cut is None:
        return None
    at, depth, after, depth_after = call_cut
    if at < body_start or at >= _GENERATED.get(code, len(code.co_code)):
        return None
    entries = list(dis.Bytecode(code).exception_entries)
    withs = 0
    for_iters = {inst.offset for inst in insts if inst.opname == "FOR_ITER"}
    loops = in_for = False
    for point in (at, after):
        covering = [entry for entry in entries if entry.start <= point < entry.end]
        if covering:
            if in_try_block(code, point):
                return None
            withs = covering[0].depth  # the exits of the `with` blocks open there
        back = [dst for src, dst in jumps if dst < point < src]
        if not in_loops and any(dst in for_iters for dst in back):
            return None  # inside `for` loops whose iterators stay on the stack
        if any(dst not in for_iters for dst in back) and breaks_inside_loop(code, at):
            return None  # inside a `while` loop the break is inside of
        # inside `while` loops only, the loops' state is locals, handed on; inside
        # `for` loops (`in_loops`) their iterators lie below, handed on too
        loops = loops or bool(back)
        in_for = in_for or any(dst in for_iters for dst in back)
    if in_for and withs:
        return None  # a `for` loop's iterator lies below the `with` exits

    if withs > len(contexts) or withs > depth:
        return None  # a `with` on a context capture cannot rebuild
    if any(at <= src < after < dst for src, dst in jumps):
        return None
    depths = _depths(insts, entries)
    if depths.get(at) != depth or depths.get(after) != depth_after:
        return None
    call_args = _call_arguments(insts, at, after, depths, depth) if args_known else None
    nulls = tuple(null - withs for null in stack_nulls)
    routed = None
    by_offset = {inst.offset: inst for inst in insts}
    if by_offset[at].opname in ("PRECALL", "KW_NAMES", "CALL"):  # a cut at the call itself
        call = next(inst for inst in insts if inst.offset >= at and inst.opname == "CALL")
        routed = depth - withs - (call.arg or 0) - 1
        if routed - 1 not in nulls:
            return None
    after, depth_after = _past_discarded_result(insts, jumps, depths, after, depth_after)
    return SplitPlan(
        at, after, body_start, contexts[:withs], contexts[:withs],
        stack=(depth - withs, depth_after - withs), call_args=call_args,
        stack_nulls=nulls, routed=routed,
    )  # fmt: skip


def _past_discarded_result(
    insts: list[dis.Instruction],
    jumps: list[tuple[int, int]],
    depths: dict[int, int],
    after: int,
    depth_after: int,
) -> tuple[int, int]:
    """Where the part after a cut call resumes, and its stack depth there: past the
    POP_TOP discarding the call's result (`obj.method()` as a statement), which the
    eager part then drops, so the result is not handed on (nor guarded by the part
    resuming, as torch.compile's resume function never reads it); else at `after`."""
    index = next((i for i, inst in enumerate(insts) if inst.offset == after), None)
    if index is None or index + 1 >= len(insts) or insts[index].opname != "POP_TOP":
        return after, depth_after
    past = insts[index + 1].offset
    if any(dst in (after, past) for _, dst in jumps) or depths.get(past) != depth_after - 1:
        return after, depth_after
    return past, depth_after - 1


_MIN_ARGUMENT_ROOM = 4  # bytes of argument code: below that they are loads only
_CALLABLE_BASES = ("LOAD_FAST", "LOAD_GLOBAL", "LOAD_DEREF")
_PUSHES = ("LOAD_FAST", "LOAD_CONST", "LOAD_GLOBAL", "LOAD_DEREF", "PUSH_NULL", "KW_NAMES")
_STORES = ("STORE_FAST", "STORE_GLOBAL", "STORE_ATTR", "STORE_SUBSCR", "STORE_DEREF")


@dataclass(frozen=True, slots=True)
class CallArguments:
    """A cut at a call instruction: its arguments are computed before the cut, in a graph.

    `args_at`: the offset after the callable's load; `call_at`: the call's first
    instruction (KW_NAMES, PRECALL or CALL); `count`: the values above the callable
    (positional and keyword arguments). `method_at`: the method load (`obj.f` of
    `obj.f(...)`) the part before the cut makes a plain attribute load, so its stack
    holds NULL and the bound method as for a function. `local`: the local the callable
    is loaded from (a function made in the frame), or None.
    """

    args_at: int
    call_at: int
    count: int
    method_at: int | None = None
    local: str | None = None


def _call_arguments(
    insts: list[dis.Instruction], at: int, after: int, depths: dict[int, int], depth: int
) -> CallArguments | None:
    """The call sequence [at, after) as a cut at its call, when it is `f(...)` of a global
    or of a local function (`PUSH_NULL; LOAD_FAST g`), or `obj.f(...)` of a local or
    global `obj`, its arguments computed in room for a jump and storing nothing; None
    otherwise (the cut then lies before the whole call)."""
    index = {inst.offset: i for i, inst in enumerate(insts)}
    first, end = index.get(at), index.get(after)
    if first is None or end is None or end - first < 3:
        return None
    call = insts[end - 1]
    if call.opname != "CALL":
        return None
    load = _callable_load(insts, first)
    if load is None:
        return None
    args_index, method_at, local = load
    call_index = end - 1
    while insts[call_index - 1].opname in ("PRECALL", "KW_NAMES"):
        call_index -= 1
    arguments = insts[args_index:call_index]
    if any(inst.opname in _STORES or inst.opcode in _JUMPS for inst in arguments):
        return None
    # the arguments leave the callable alone: each starts by pushing a value on it
    # (`torch.sigmoid(x)` is `NULL + torch`, then an attribute load on the module)
    if any(
        depths.get(inst.offset) == depth + 2 and inst.opname not in _PUSHES for inst in arguments
    ):
        return None
    args_at, call_at = insts[args_index].offset, insts[call_index].offset
    if call_at - args_at < _MIN_ARGUMENT_ROOM and local is None:
        # the arguments are loads only: the cut before the call gives the same (not for
        # a function made in the frame, whose load the cut routes to its compiled frame)
        return None
    return CallArguments(args_at, call_at, call.arg or 0, method_at, local)


def _callable_load(
    insts: list[dis.Instruction], first: int
) -> tuple[int, int | None, str | None] | None:
    """(index of the first argument instruction, offset of a method load, local name) of
    the callable's load at `insts[first]`; None for any other load."""
    load = insts[first]
    if load.opname == "LOAD_GLOBAL" and (load.arg or 0) & 1:
        # NULL + a global function, or a function of a module the file imports
        # (`np.nonzero`: NULL + np, then attribute loads)
        index = first + 1
        while index < len(insts) and insts[index].opname == "LOAD_ATTR":
            if PY312 and (insts[index].arg or 0) & 1:
                return None  # 3.12's method load
            index += 1
        return index, None, None
    if load.opname == "PUSH_NULL" and insts[first + 1].opname == "LOAD_FAST":
        return first + 2, None, insts[first + 1].argval
    if load.opname == "PUSH_NULL" and insts[first + 1].opname == "LOAD_DEREF":
        return first + 2, None, None  # NULL + a free variable: its cell read again
    pushes_null = load.opname == "LOAD_GLOBAL" and (load.arg or 0) & 1
    if load.opname not in _CALLABLE_BASES or pushes_null:
        return None
    index = first + 1  # attribute loads (`self.layer`), then the method load
    while index < len(insts) and insts[index].opname == "LOAD_ATTR":
        if PY312 and (insts[index].arg or 0) & 1:
            break  # 3.12's method load
        index += 1
    if index + 1 >= len(insts) or not _rewritable_method_load(insts, index):
        return None
    return index + 1, insts[index].offset, None


def _rewritable_method_load(insts: list[dis.Instruction], index: int) -> bool:
    """Whether the method load at `insts[index]` has room for `_plain_attribute_load`."""
    inst = insts[index]
    if not (inst.opname == "LOAD_METHOD" or (PY312 and inst.opname == "LOAD_ATTR")):
        return False
    arg = (inst.arg or 0) & ~1 if PY312 else inst.arg or 0
    size = insts[index + 1].offset - inst.offset
    room = len(emit("LOAD_ATTR", arg) + emit("PUSH_NULL") + emit("SWAP", 2))
    return arg <= 0xFF and room <= size


def _loop_plan(
    insts: list[dis.Instruction], start: _Cut, offset: int
) -> tuple[LoopPlan, int] | None:
    """The `for` loop starting at `start` whose body holds `offset`, and where it exits."""
    if start.withs or start.in_try:
        return None
    index_of = {inst.offset: index for index, inst in enumerate(insts)}
    for index, inst in enumerate(insts):
        if inst.offset < start.offset or inst.offset >= offset:
            continue
        if inst.opname != "FOR_ITER":
            continue
        exit_at = inst.argval
        ended = index_of.get(exit_at)
        if ended is not None and insts[ended].opname == "END_FOR":
            exit_at = insts[ended + 1].offset  # 3.12: the exhausted loop skips END_FOR
        if exit_at <= offset:
            return None  # the first loop after the cut ends before the break
        targets, body = _loop_targets(insts, index + 1)
        if body is None:
            return None
        unpack = insts[index + 1].arg if insts[index + 1].opname == "UNPACK_SEQUENCE" else 0
        return LoopPlan(inst.offset, body, targets, unpack or 0), exit_at
    return None


def _loop_targets(insts: list[dis.Instruction], index: int) -> tuple[tuple[str, ...], int | None]:
    """The names a loop stores its item in (a name, or a flat tuple of names)."""
    first = insts[index]
    if first.opname == "STORE_FAST":
        return (first.argval,), insts[index + 1].offset
    if first.opname == "UNPACK_SEQUENCE":
        stores = insts[index + 1 : index + 1 + first.arg]
        if len(stores) == first.arg and all(i.opname == "STORE_FAST" for i in stores):
            return tuple(i.argval for i in stores), insts[index + 1 + first.arg].offset
    return (), None


def called_globals(
    function: types.FunctionType, start: int, stop: int | None, filename: str, name: str
) -> list[str]:
    """Globals loaded in [start, stop) that hold the Python function `name` of `filename`."""
    found = []
    for inst in _instructions(function.__code__):
        if inst.opname != "LOAD_GLOBAL" or inst.offset < start:
            continue
        if stop is not None and inst.offset >= stop:
            break
        value = function.__globals__.get(inst.argval)
        code = getattr(value, "__code__", None)
        if isinstance(value, types.FunctionType) and code is not None:
            if code.co_filename == filename and code.co_name == name:
                found.append(inst.argval)
    return found


def comprehension_callees(
    function: types.FunctionType, start: int, stop: int | None, error: Any
) -> list[tuple[str, types.FunctionType]]:
    """Globals a comprehension of the statement in [start, stop) calls that hold the
    function the break happened in (`[g(t) for t in xs]`, the break inside `g`): the
    comprehension is a code of its own (Python 3.11), run by the eager statement, whose
    loads of `g` the statement's rewrite does not reach; the eager part shadows them."""
    if len(error.where) < 3 or error.where[1].function not in COMPREHENSIONS:
        return []
    made, callee = error.where[1], error.where[2]
    nested = set()
    for inst in _instructions(function.__code__):
        if inst.offset < start or (stop is not None and inst.offset >= stop):
            continue
        const = inst.argval if inst.opname == "LOAD_CONST" else None
        if isinstance(const, types.CodeType) and const.co_name == made.function:
            nested.add(const)
    found = {}
    for code in nested:
        for inst in _instructions(code):
            if inst.opname != "LOAD_GLOBAL":
                continue
            value = function.__globals__.get(inst.argval)
            target = getattr(value, "__code__", None)
            if isinstance(value, types.FunctionType) and target is not None:
                if target.co_filename == callee.filename and target.co_name == callee.function:
                    found[inst.argval] = value
    return list(found.items())


def _replace_global_loads(
    code: types.CodeType,
    raw: bytearray,
    consts: list[Any],
    replacements: dict[str, Any],
    span: tuple[int, int | None],
) -> None:
    """LOAD_GLOBAL name -> [PUSH_NULL] LOAD_CONST replacement, padded to the same size."""
    insts = _instructions(code)
    for index, inst in enumerate(insts):
        if inst.opname != "LOAD_GLOBAL" or inst.argval not in replacements:
            continue
        if inst.offset < span[0] or (span[1] is not None and inst.offset >= span[1]):
            continue
        size = insts[index + 1].offset - inst.offset
        consts.append(replacements[inst.argval])
        load = (emit("PUSH_NULL") if inst.arg & 1 else b"") + emit("LOAD_CONST", len(consts) - 1)
        if len(load) > size:
            continue
        raw[inst.offset : inst.offset + size] = load + emit("NOP") * ((size - len(load)) // 2)


RESUME_PREFIX = "torch_dynamo_resume_in"
_RESUME_TAGS = ("resume", "body")
_RESUMED_NAME = re.compile(rf"{RESUME_PREFIX}_(.+)_at_\d+")


def part_name(name: str, tag: str, line: int | None) -> str:
    """The name (or qualified name) of a part of a split frame, as torch.compile names its
    frames: the parts up to the break and the eager one keep the function's name, a part
    after it is `torch_dynamo_resume_in_<name>_at_<line of the break>`, in the same
    class or enclosing function (`Model.torch_dynamo_resume_in_forward_at_12`).

        part_name("f", "resume", 7) == "torch_dynamo_resume_in_f_at_7"
        part_name("torch_dynamo_resume_in_f_at_7", "resume", 9) == "torch_dynamo_resume_in_f_at_9"
    """
    if tag not in _RESUME_TAGS:
        return name
    outer, dot, inner = name.rpartition(".")
    resumed = _RESUMED_NAME.fullmatch(inner)
    if resumed is not None:  # a part of a part: named after the original function
        inner = resumed.group(1)
    return f"{outer}{dot}{RESUME_PREFIX}_{inner}_at_{line}"


def segment_function(
    function: types.FunctionType,
    start: int,
    stop: int | None,
    body_start: int,
    tag: str,
    replacements: dict[str, Any] | None = None,
    *,
    enter: tuple[ContextSpec, ...] = (),
    leave: tuple[ContextSpec, ...] = (),
    returns_top: bool = False,
    stack_in: int | None = None,
    stack_out: int | None = None,
    call_args: CallArguments | None = None,
    route_local: Any = None,
    stack_nulls: tuple[int, ...] = (),
    routed: int | None = None,
    stack_nulls_out: tuple[int, ...] | None = None,
    line: int | None = None,
) -> types.FunctionType:
    """A function running `function`'s code from `start` to `stop`; every local is a parameter.

    Its name is `function`'s, or for a part after a break (`tag` "resume" or "body")
    torch.compile's name of a resume function, with `line` the line of the break (see
    `part_name`).

    The original code stays in place (exception handlers past `stop` keep working); an
    entry jump at `body_start` goes to generated code appended after it, which enters
    the `enter` contexts (a fresh one each, outermost first) and jumps to `start`. At
    `stop` a jump goes to an appended epilogue that unwinds the `leave` values (with
    blocks left the normal way, innermost first) and returns (END, *locals), or
    (END, top of stack, *locals) with `returns_top`. With `stack_in` / `stack_out` (an
    instruction-level cut) the part has one more local, `___stack`, a tuple of values
    pushed at entry and stored at the stop; the NULLs at `stack_nulls` (the callable
    slot of an enclosing call) are pushed again, not stored (see `_pack_stack`), and
    stack value `routed` (the callable of a cut at a call) through `route_local`;
    `stack_nulls_out` are the NULLs at the stop where they differ. `replacements` maps globals
    called in the part to what is called instead (the compiled callee of a break
    inside an inlined call). With `call_args` (a cut at a call instruction, see
    SplitPlan) a part stopping at the call hands on its arguments as one more stack
    value (the callable and its NULL are dropped: the next part loads the callable
    again), and a part starting at the call's load jumps over the arguments' code to
    push them from that value; there a callable loaded from a local (a function made in
    the frame) is passed through `route_local` (which gives its compiled frame).
    """
    code = function.__code__
    raw = bytearray(code.co_code)
    consts = list(code.co_consts)
    load_at = None
    if call_args is not None and stop != call_args.call_at:
        load_at, start = start, call_args.call_at  # the part starts at the call itself
    if call_args is not None and stop == call_args.call_at and call_args.method_at is not None:
        _plain_attribute_load(code, raw, call_args.method_at)
    if replacements:
        _replace_global_loads(code, raw, consts, replacements, (load_at or start, stop))

    def const(value: Any) -> int:
        for index, existing in enumerate(consts):
            if existing is value:
                return index
        consts.append(value)
        return len(consts) - 1

    varnames = code.co_varnames
    cells = code.co_cellvars
    if cells:
        # the cells come in as parameters (their slots keep their places: the cell
        # variables that are not parameters follow the varnames), not made afresh
        varnames = (*varnames, *_cell_only_names(code))
        _clear_make_cells(code, raw)
    stacked = stack_in is not None or stack_out is not None
    if stacked and STACK_LOCAL not in varnames:
        varnames = (*varnames, STACK_LOCAL)
    slot = varnames.index(STACK_LOCAL) if stacked else -1
    _shift_free_slots(code, raw, len(varnames))
    root = _ROOT.get(code, code)
    tracked = _tracked_locals(root, varnames, (*cell_locals(code), *cells))
    spans: list[tuple[int, int]] = []  # (bytes, user's line) of each run of generated code
    entries: list[ExceptionEntry] = []
    unbind = b""
    if start > body_start:
        unbind = _unbind_code(varnames, tracked, _binding_at(root, start), const)
    if unbind or enter or stack_in or load_at is not None:
        prologue_at = len(raw)
        raw += unbind + _enter_code(enter, const)
        for index in range(stack_in or 0):
            if index in stack_nulls:
                raw += emit("PUSH_NULL")
                continue
            routing = index == routed and route_local is not None
            if routing:
                raw += emit("PUSH_NULL") + emit("LOAD_CONST", const(route_local))
            raw += emit("LOAD_FAST", slot)
            for step in _stack_path(index, stack_nulls):
                raw += emit("LOAD_CONST", const(step)) + emit("BINARY_SUBSCR")
            if routing:
                raw += emit_call(1)
        if load_at is not None and call_args is not None:
            # the callable's load (NULL + the function, replaced by its compiled part),
            # then the arguments from the last stack value, then the call
            if call_args.local is not None and route_local is not None:
                raw += (
                    emit("PUSH_NULL") + emit("PUSH_NULL") + emit("LOAD_CONST", const(route_local))
                )
                raw += emit("LOAD_FAST", varnames.index(call_args.local)) + emit_call(1)
            else:
                raw += raw[load_at : call_args.args_at]
            for index in range(call_args.count):
                raw += emit("LOAD_FAST", slot)
                for step in (*_stack_path(stack_in or 0, stack_nulls), index):
                    raw += emit("LOAD_CONST", const(step)) + emit("BINARY_SUBSCR")
        raw += emit_jump(len(raw), start)
        spans.append((len(raw) - prologue_at, line_at(code, start)))
        _place_jump(raw, body_start, prologue_at, limit=start)
    elif start > body_start:
        _place_jump(raw, body_start, start, limit=start)
    handing_on = _HANDING_ON.get(code, ())
    if stop is not None:
        epilogue_at = len(raw)
        if call_args is not None and stop == call_args.call_at:
            # [..., NULL, callable, *args] -> [..., args]: the NULL is consumed by a call
            # of `tuple` on the arguments' tuple (no instruction pops a NULL)
            raw += emit("BUILD_TUPLE", call_args.count) + emit("SWAP", 2) + emit("POP_TOP")
            raw += emit("LOAD_CONST", const(tuple)) + emit("SWAP", 2) + emit_call(1)
        if stack_out is not None:  # the values above the `with` blocks' exits
            nulls_out = stack_nulls if stack_nulls_out is None else stack_nulls_out
            raw += _pack_stack(stack_out, nulls_out, const) + emit("STORE_FAST", slot)
        raw += _leave_code(leave, const(None))
        # NOTE: a part starting at a call cut loads the callable again (code before
        # `stop`): liveness at `stop` does not see that read, so every local is handed on
        live = None if call_args is not None else _live_at(root, stop)
        reads = _local_reads(varnames, tracked, _binding_at(root, stop), live)
        handing_at = len(raw)
        entries += _epilogue(raw, reads, const, returns_top)
        handing_on = (*handing_on, (handing_at, len(raw)))
        spans.append((len(raw) - epilogue_at, line_at(code, stop)))
        _place_jump(raw, stop, epilogue_at, limit=None)
    if sum(size for size, _ in spans) != len(raw) - len(code.co_code):
        raise ValueError("generated code without a line table entry")
    nlocals = len(varnames)
    arity = nlocals if start > body_start else min(first_part_arity(code), nlocals)
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    new_code = code.replace(
        co_varnames=varnames,
        co_cellvars=(),
        co_nlocals=nlocals,
        co_code=bytes(raw),
        co_consts=tuple(consts),
        co_argcount=arity,
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=flags,
        co_stacksize=max(
            code.co_stacksize + (stack_in or 0) + 2,
            nlocals + 3,
            len(enter) + 8,
            len(leave) + 6,
            (stack_out or 0) + 2,
        ),
        co_name=part_name(code.co_name, tag, line),
        co_qualname=part_name(code.co_qualname, tag, line),
        co_linetable=append_line_spans(code, spans),
        co_exceptiontable=append_exception_entries(code.co_exceptiontable, entries),
    )
    _GENERATED[new_code] = min(_GENERATED.get(code, len(code.co_code)), len(code.co_code))
    _ROOT[new_code] = root
    if handing_on:
        _HANDING_ON[new_code] = handing_on
    if stop is not None or code in _STOPS:
        _STOPS[new_code] = stop if stop is not None else _STOPS[code]
    if cells or code in _CELL_LOCALS:
        _CELL_LOCALS[new_code] = (*cell_locals(code), *cells)
    return types.FunctionType(
        new_code, function.__globals__, new_code.co_name, None, function.__closure__
    )


_DEREFS = frozenset(
    dis.opmap[name]
    for name in (
        "LOAD_DEREF",
        "STORE_DEREF",
        "DELETE_DEREF",
        "LOAD_CLOSURE",
        "LOAD_CLASSDEREF",  # Python 3.11
        "LOAD_FROM_DICT_OR_DEREF",  # Python 3.12
    )
    if name in dis.opmap
)


def _shift_free_slots(code: types.CodeType, raw: bytearray, free_base: int) -> None:
    """Point `code`'s free-variable accesses (in `raw`, its bytes) at their slots in a
    part whose free variables start at `free_base`.

    A frame's fast slots are its varnames, then its cell variables that are not
    parameters, then its free variables, and LOAD_DEREF and its kin name a slot by that
    index. A part adds locals (`___stack`) before the free variables, so their indices
    move by as many. An index that would no longer fit in its byte raises ValueError
    (the frame then runs eagerly)."""
    cell_only = sum(1 for name in code.co_cellvars if name not in code.co_varnames)
    old_base = len(code.co_varnames) + cell_only
    shift = free_base - old_base
    if shift == 0 or not code.co_freevars:
        return
    extended = False
    for inst in dis.get_instructions(code):
        if inst.opcode in _DEREFS and inst.arg is not None and inst.arg >= old_base:
            if extended or inst.arg + shift > 255 or raw[inst.offset] != inst.opcode:
                raise ValueError("a free variable's slot cannot move in place")
            raw[inst.offset + 1] = inst.arg + shift
        extended = inst.opname == "EXTENDED_ARG"


def _pack_stack(count: int, nulls: tuple[int, ...], const: Any) -> bytes:
    """Pack the top `count` stack values into one tuple; NULLs (at positions `nulls`,
    counted from the bottom) cannot be in a tuple and no instruction pops one, so each
    is consumed by a call of `tuple` on a tuple of the values above it:

        [a, NULL, b, c] -> [a, NULL, (b, c)] -> [a, (b, c)] -> (a, (b, c))

    `_stack_path` gives the indexes that read a value back."""
    out = b""
    top, nested = count, 0
    for null in sorted(nulls, reverse=True):
        out += emit("BUILD_TUPLE", top - null - 1 + nested)
        out += emit("LOAD_CONST", const(tuple)) + emit("SWAP", 2) + emit_call(1)
        top, nested = null, 1
    return out + emit("BUILD_TUPLE", top + nested)


def _stack_path(position: int, nulls: tuple[int, ...]) -> list[int]:
    """The indexes reading stack value `position` from the tuple `_pack_stack` made."""
    path, low = [], 0
    for null in sorted(nulls):
        if position < null:
            break
        path.append(null - low)  # the nested tuple of the values above this NULL
        low = null + 1
    return [*path, position - low]


def _plain_attribute_load(code: types.CodeType, raw: bytearray, at: int) -> None:
    """The method load at `at` becomes `LOAD_ATTR; PUSH_NULL; SWAP 2` (NULL, then the
    bound method: what a method load leaves for a callable that is no plain method), so
    the part's epilogue drops a NULL it knows is there. Raises ValueError without room."""
    insts = _instructions(code)
    index = next(i for i, inst in enumerate(insts) if inst.offset == at)
    inst, size = insts[index], insts[index + 1].offset - at
    arg = inst.arg & ~1 if PY312 else inst.arg
    if arg > 0xFF:
        raise ValueError("no room for the attribute load of a method call")
    load = emit("LOAD_ATTR", arg) + emit("PUSH_NULL") + emit("SWAP", 2)
    if len(load) > size:
        raise ValueError("no room for the attribute load of a method call")
    raw[at : at + size] = load + emit("NOP") * ((size - len(load)) // 2)


def _tracked_locals(
    root: types.CodeType, varnames: tuple[str, ...], cell_slots: tuple[str, ...]
) -> tuple[str, ...]:
    """The user's locals a part hands on that may be unbound (not its cells, not `___stack`)."""
    own = set(root.co_varnames) - set(root.co_cellvars) - set(cell_slots)
    return tuple(name for name in varnames if name in own)


def _binding_at(root: types.CodeType, offset: int) -> Binding | None:
    """The root frame's Binding before `offset` (None: not reached, so nothing is known)."""
    return bindings(root).get(offset)


def _unbind_code(
    varnames: tuple[str, ...], tracked: tuple[str, ...], binding: Binding | None, const: Any
) -> bytes:
    """For each local that may be unbound where the part starts: `if x is UNBOUND: del x`."""
    names = tracked if binding is None else binding.maybe_unbound(tracked)
    out = b""
    for name in names:
        index = varnames.index(name)
        delete = emit("DELETE_FAST", index)
        out += emit("LOAD_FAST", index) + emit("LOAD_CONST", const(UNBOUND))
        out += emit("IS_OP", 0) + emit_skip_if_false(len(delete)) + delete
    return out


def _live_at(root: types.CodeType, offset: int) -> frozenset[str] | None:
    """The root frame's locals read later before being stored, at `offset` (None: any)."""
    live = live_locals(root)
    return None if live is None or offset not in live else live[offset]


def _local_reads(
    varnames: tuple[str, ...],
    tracked: tuple[str, ...],
    binding: Binding | None,
    live: frozenset[str] | None = None,
) -> list[str]:
    """How the epilogue reads each local: "bound" (LOAD_FAST), "unbound" (UNBOUND on every
    path, or no later code reads it before storing it: `live`) or "maybe" (LOAD_FAST,
    UNBOUND when it raises UnboundLocalError)."""
    reads = []
    for name in varnames:
        if name in tracked and live is not None and name not in live:
            reads.append("unbound")  # dead here: the next parts need not take it
        elif name not in tracked or (binding is not None and name in binding.must):
            reads.append("bound")
        elif binding is not None and name not in binding.may:
            reads.append("unbound")
        else:
            reads.append("maybe")
    return reads


def _clear_make_cells(code: types.CodeType, raw: bytearray) -> None:
    """The prelude's MAKE_CELLs become NOPs: a part's cell slots hold the cells passed in."""
    nop = emit("NOP", 0)
    for inst in _instructions(code):
        if inst.opname == "MAKE_CELL":
            raw[inst.offset : inst.offset + len(nop)] = nop
        elif inst.opname not in _PRELUDE:
            break


def _place_jump(raw: bytearray, at: int, target: int, limit: int | None) -> None:
    jump = emit_jump(at, target)
    if limit is not None and at + len(jump) > limit:
        raise ValueError("no room for the entry jump")
    raw[at : at + len(jump)] = jump


def _enter_code(contexts: tuple[ContextSpec, ...], const: Any) -> bytes:
    """factory(*args).__enter__() for each context; its __exit__ stays on the stack."""
    out = b""
    for spec in contexts:
        if spec.kind == "iter":
            out += emit("LOAD_CONST", const(())) + emit("GET_ITER")
            continue
        out += emit("PUSH_NULL") + emit("LOAD_CONST", const(spec.factory))
        for arg in spec.args:
            out += emit("LOAD_CONST", const(arg))
        out += emit_call(len(spec.args)) + emit("BEFORE_WITH") + emit("POP_TOP")
    return out


def _leave_code(values: tuple[ContextSpec, ...], none_index: int) -> bytes:
    """Unwind the stack's values, innermost first: exit(None, None, None) a with block (as
    its normal end does), pop a loop iterator."""
    none = emit("LOAD_CONST", none_index)
    out = b""
    for spec in reversed(values):
        if spec.kind == "iter":
            out += emit("POP_TOP")
        else:
            out += none * 3 + emit_call(2) + emit("POP_TOP")
    return out


def _epilogue(
    raw: bytearray, reads: list[str], const: Any, returns_top: bool
) -> list[ExceptionEntry]:
    """Append `return (END, [top,] *locals)`; a local that may be unbound reads as UNBOUND.

    Such a read is a LOAD_FAST covered by an exception table entry of its own: when it
    raises UnboundLocalError, a handler after the epilogue drops the error, pushes
    UNBOUND and jumps back after the read. Returns those entries.
    """
    raw += emit("LOAD_CONST", const(END))
    if returns_top:
        raw += emit("SWAP", 2)
    depth = 1 + returns_top
    guarded: list[tuple[int, int, int]] = []  # (read at, continue at, stack depth)
    for index, how in enumerate(reads):
        at = len(raw)
        if how == "unbound":
            raw += emit("LOAD_CONST", const(UNBOUND))
        else:
            raw += emit(CHECKED_LOAD_FAST if how == "maybe" else "LOAD_FAST", index)
        if how == "maybe":
            guarded.append((at, len(raw), depth + index))
    raw += emit("BUILD_TUPLE", depth + len(reads)) + emit("RETURN_VALUE")
    entries = []
    for at, after, depth_there in guarded:
        handler = len(raw)
        raw += emit("POP_TOP") + emit("LOAD_CONST", const(UNBOUND))
        raw += emit_jump(len(raw), after)
        entries.append(ExceptionEntry(at, after, handler, depth_there))
    return entries


class LoopStage:
    """Runs a `for` loop holding a break: the header part evaluates the iterable (it
    returns the iterator), then the body part runs once per item, the loop target
    bound in its locals; a `break` or `return` inside the body returns the frame's
    value from the body part, which ends the loop here too."""

    def __init__(self, header: Any, body: Any, loop: LoopPlan, varnames: tuple[str, ...]) -> None:
        self.header = header
        self.body = body
        self.loop = loop
        self.slots = [varnames.index(name) for name in loop.targets]
        self.__code__ = header.__code__

    def __call__(self, *values: Any) -> Any:
        result = self.header(*values)
        if not is_end(result):
            return result
        iterator, current = result[1], list(result[2:])
        for item in iterator:
            items = _unpack(item, self.loop.unpack) if self.loop.unpack else (item,)
            for slot, value in zip(self.slots, items, strict=True):
                current[slot] = value
            result = self.body(*current)
            if not is_end(result):
                return result
            current = list(result[1:])
        return (END, *current)


def _unpack(item: Any, count: int) -> tuple[Any, ...]:
    """`a, b = item` as Python does it, with its error messages."""
    iterator = iter(item)
    values = []
    for _ in range(count):
        try:
            values.append(next(iterator))
        except StopIteration:
            raise ValueError(
                f"not enough values to unpack (expected {count}, got {len(values)})"
            ) from None
    try:
        next(iterator)
    except StopIteration:
        return tuple(values)
    raise ValueError(f"too many values to unpack (expected {count})")


def describe_split(plan: SplitPlan, parts: list[Any]) -> str:
    """Readable text of a split: each part's name, range and generated bytecode."""
    lines = [f"split at offsets {plan.start}..{plan.stop} (eager statement between)"]
    for part in parts:
        function = getattr(part, "target", part)
        code = function.__code__
        compiled = "compiled" if function is not part else "eager"
        lines.append(f"--- {code.co_qualname} ({compiled}), parameters {code.co_varnames}")
        lines.append(dis.Bytecode(code).dis())
    return "\n".join(lines)
