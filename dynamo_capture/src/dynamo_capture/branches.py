"""Where a break is resumed as torch.compile resumes it: loops and data-dependent jumps.

`breaks_inside_loop` is torch.compile's test for a break inside a loop (such a frame
runs eagerly, its calls compiled: optimize's `loop_breaks`). A data-dependent jump
(`if t.sum() > 0:`) is cut at the jump itself (`plan_branch`), inside `for` loops too
(their iterators ride on with the tested value, made again where the part ends and
read back as guarded inputs: capture.OutputPlan, output_graph's `_handed_iterator`):
the part before it hands the tested value on (its graph holds the test), `BranchStage` takes
its truth eagerly and runs the part resuming at the jump's target or after the jump,
made from the user's function (`root_function`) so that every part resuming at one
offset is the same compiled frame, as torch.compile's resume functions are made from
the original code. Cuts elsewhere are at statements (resume.py).
"""

from __future__ import annotations

import dis
import types
from dataclasses import dataclass
from typing import Any

from dynamo_capture.resume import (
    _GENERATED,
    _PRELUDE,
    _ROOT,
    _STOPS,
    ITERATOR,
    ContextSpec,
    _depths,
    _instructions,
    _stack_path,
    _why_not_splittable,
    breaks_inside_loop,
    in_try_block,
)

__all__ = [
    "BranchPlan",
    "BranchStage",
    "branch_stack",
    "breaks_inside_loop",
    "plan_branch",
    "root_function",
]


@dataclass(frozen=True, slots=True)
class BranchPlan:
    """A data-dependent jump (`if t.sum() > 0:`) cut as torch.compile cuts it.

    The first part runs to the jump and hands on the tested value (its graph holds the
    test); `BranchStage` takes the value's truth eagerly and runs the part resuming at
    the jump's target or at the instruction after it, each to the frame's end.
    `contexts` are the `with` blocks open at the jump, re-entered by both parts.
    `iterators`: the iterators of the `for` loops around the jump (below the tested
    value): handed on with it in `___stack` and pushed back by both parts' prologues,
    so a part resumes inside the loops, as torch.compile carries a loop's iterator into
    its resume function.
    """

    jump: int
    target: int
    fallthrough: int
    jumps_if: bool  # the jump is taken when the value is true
    body_start: int
    contexts: tuple[ContextSpec, ...] = ()
    iterators: int = 0
    # the statement's own values below the tested one (`0 < t < 1` keeps `t` for the
    # second comparison), handed on above the iterators
    temporaries: int = 0
    keeps_tested: bool = False  # JUMP_IF_*_OR_POP: its target starts with the value
    nulls: tuple[int, ...] = ()  # NULLs among the values handed on (pushed back, not kept)

    @property
    def below(self) -> int:
        """The stack values below the tested one the parts hand on."""
        return self.iterators + self.temporaries

    def stack_in(self, start: int) -> int:
        """How many handed-on values the part resuming at `start` pushes back."""
        return self.below + (1 if self.keeps_tested and start == self.target else 0)


def plan_branch(
    code: types.CodeType,
    offset: int,
    contexts: tuple[ContextSpec, ...] = (),
    nulls: tuple[int, ...] = (),
) -> BranchPlan | str:
    """The branch cut at the data-dependent jump at `offset`, or why there is none (the
    frame then splits at statements around the jump's statement)."""
    reason = _why_not_splittable(code)
    if reason is not None:
        return reason
    if code.co_cellvars or code.co_freevars:
        return "a frame with cells hands no stack values on"
    if code in _STOPS or ITERATOR in contexts:
        return "the part stops before the frame's end (a loop body, an eager middle)"
    if in_try_block(code, offset):
        return "the jump lies in a try block"
    generated = _GENERATED.get(code, len(code.co_code))
    insts = _instructions(code)
    index = next((i for i, inst in enumerate(insts) if inst.offset == offset), None)
    if offset >= generated or index is None or index + 1 >= len(insts):
        return "the jump lies in generated code"
    inst = insts[index]
    keeps_tested = inst.opname in _KEEPING_JUMPS
    if not (inst.opname.startswith("POP_JUMP") or keeps_tested) or "NONE" in inst.opname:
        return f"{inst.opname} is not a jump on a value's truth"
    target, fallthrough = inst.argval, insts[index + 1].offset
    if target >= generated or fallthrough >= generated:
        return "a branch leaves the frame's own code"
    entries = list(dis.Bytecode(code).exception_entries)
    covering = [e for e in entries if e.start <= offset < e.end]
    withs = covering[0].depth if covering else 0
    depths = _depths(insts, entries)  # the jump may follow a try whose handler ran
    if withs > len(contexts):
        return "the jump lies in a `with` block capture cannot re-enter"
    loops = _enclosing_loops(insts, offset, generated)
    if loops and withs:
        return "the jump lies in both a loop and a `with` block"
    temporaries = depths.get(offset, 0) - withs - loops - 1
    if temporaries < 0:
        return "the stack at the jump is not known"
    below = withs + loops + temporaries
    if depths.get(target) != below + keeps_tested or depths.get(fallthrough) != below:
        return "a branch starts with values on the stack other than those handed on"
    body_start = next(i.offset for i in insts if i.opname not in _PRELUDE)
    return BranchPlan(
        offset, target, fallthrough, "TRUE" in inst.opname, body_start, contexts[:withs], loops,
        temporaries, keeps_tested, nulls,
    )  # fmt: skip


# the jumps on a value's truth that leave the value on the stack when they jump
_KEEPING_JUMPS = ("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")


def branch_stack(code: types.CodeType, offset: int) -> tuple[int, int]:
    """Below the value a data-dependent jump at `offset` tests: how many loops'
    iterators, and how many values of the statement itself above them (and above the
    `with` blocks' exits)."""
    insts = _instructions(code)
    depth = _depths(insts).get(offset)
    generated = _GENERATED.get(code, len(code.co_code))
    loops = _enclosing_loops(insts, offset, generated)
    if depth is None:
        return loops, 0
    covering = [e for e in dis.Bytecode(code).exception_entries if e.start <= offset < e.end]
    withs = covering[0].depth if covering else 0
    return loops, max(depth - withs - loops - 1, 0)


def _enclosing_loops(insts: list[dis.Instruction], offset: int, generated: int) -> int:
    """How many `for` loops of the frame's own code hold `offset` in their body (from
    their FOR_ITER to its exit target); each keeps its iterator on the stack there."""
    return sum(
        1
        for inst in insts
        if inst.opname == "FOR_ITER" and inst.offset < offset < inst.argval <= generated
    )


def root_function(function: types.FunctionType) -> types.FunctionType:
    """The user's function a part was cut from (itself for a user's function): a part
    resuming at an offset is made from it, so it is the same whichever part it follows."""
    root = _ROOT.get(function.__code__)
    if root is None:
        return function
    return types.FunctionType(root, function.__globals__, root.co_name, None, function.__closure__)


class BranchStage:
    """Runs the part of the taken branch on the first part's locals (BranchPlan).

    `slot`: where the first part's locals hold the handed-on stack (the tested value);
    `count`: how many of the user's locals the branch parts take (and `___stack` after
    them where the part pushes handed-on values back). A branch part is made and
    compiled when its branch is first taken (`make(target)`), as torch.compile makes a
    resume function when it first runs.
    """

    def __init__(self, plan: BranchPlan, slot: int, count: int, make: Any) -> None:
        self.plan = plan
        self.slot = slot
        self.count = count
        self.make = make
        self.parts: dict[int, Any] = {}

    def __call__(self, *values: Any) -> Any:
        tested = values[self.slot]  # above the values handed on, if any
        for index in _stack_path(self.plan.below, self.plan.nulls):
            tested = tested[index]
        taken = bool(tested) is self.plan.jumps_if  # as the jump takes its value's truth
        start = self.plan.target if taken else self.plan.fallthrough
        part = self.parts.get(start)
        if part is None:
            part = self.parts[start] = self.make(start)
        # a part pushing no handed-on value back has no `___stack` parameter
        return part(*values[: self.count + (1 if self.plan.stack_in(start) else 0)])
