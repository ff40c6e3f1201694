"""Graph breaks at statement boundaries: a frame split into prefix, eager middle and resume.

When capture meets something it cannot put in a graph at instruction I of the
compiled frame, the frame is cut at two statement boundaries around I (offsets
where the value stack is empty and no jump crosses):

    prefix  [0, S)     captured: ends by returning (END, *locals)
    middle  [S, S2)    the unsupported statement(s), run eagerly the same way
    resume  [S2, end)  a generated function continuing at S2, itself compiled
                       (captured and cached on its first call)

Each part is a copy of the frame's code object whose parameters are all its
locals: a jump at the start goes to the part's first instruction, and the
instruction at its stop offset becomes `return (END, *locals)`. A `return`
reached inside a part returns the plain value, so the caller can tell the two
apart. A loop, `with` or `try` statement holding the break runs eagerly as a
whole (the cut points never lie inside one; a try block whose handler code is
placed past the statement runs the rest of the frame eagerly). Frames with
closure cells or generator flags are not split (they run eagerly, logged).
"""

from __future__ import annotations

import dis
import inspect
import types
from dataclasses import dataclass
from typing import Any

__all__ = [
    "END",
    "SplitPlan",
    "called_globals",
    "describe_split",
    "is_end",
    "plan_split",
    "segment_function",
]


class _End:
    """Marks a part that reached its stop offset (the tuple after it holds the locals)."""

    def __repr__(self) -> str:
        return "<segment end>"


END = _End()
_OP = dis.opmap
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)
_UNSPLITTABLE_FLAGS = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """Where a frame is cut: the eager middle is [start, stop); stop None runs to the end."""

    start: int
    stop: int | None
    body_start: int


def is_end(result: Any) -> bool:
    """True when a part returned at its stop offset (END, *locals), not from a `return`."""
    return type(result) is tuple and len(result) > 0 and result[0] is END


def _instructions(code: types.CodeType) -> list[dis.Instruction]:
    return [inst for inst in dis.get_instructions(code) if inst.opname != "CACHE"]


def _why_not_splittable(code: types.CodeType, insts: list[dis.Instruction]) -> str | None:
    if code.co_flags & _UNSPLITTABLE_FLAGS:
        return "a generator or coroutine frame"
    if code.co_cellvars or code.co_freevars:
        return "a frame with closure cells"
    return None


def _handlers_inside(entries: list[Any], start: int, stop: int | None) -> bool:
    """Every exception range starting in [start, stop) has its handler there too."""
    for entry in entries:
        if start <= entry.start and (stop is None or entry.start < stop):
            if entry.target < start or (stop is not None and entry.target >= stop):
                return False
    return True


def _depths(insts: list[dis.Instruction]) -> dict[int, int]:
    """The value-stack depth before each instruction (loop-free code: one forward pass)."""
    depths: dict[int, int] = {insts[0].offset: 0}
    for index, inst in enumerate(insts):
        depth = depths.get(inst.offset)
        if depth is None:
            continue  # unreachable
        arg = inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None
        if inst.opcode in _JUMPS:
            depths.setdefault(inst.argval, depth + dis.stack_effect(inst.opcode, arg, jump=True))
        if inst.opname in ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"):
            continue
        if inst.opname.startswith("JUMP") and "IF" not in inst.opname:
            continue
        if index + 1 < len(insts):
            after = depth + dis.stack_effect(inst.opcode, arg, jump=False)
            depths.setdefault(insts[index + 1].offset, after)
    return depths


def plan_split(code: types.CodeType, offset: int) -> SplitPlan | str:
    """The statement boundaries around `offset`, or the reason the frame cannot be split."""
    insts = _instructions(code)
    reason = _why_not_splittable(code, insts)
    if reason is not None:
        return reason
    body_start = next(inst.offset for inst in insts if inst.opname != "RESUME")
    depths = _depths(insts)
    jumps = [(inst.offset, inst.argval) for inst in insts if inst.opcode in _JUMPS]
    entries = list(dis.Bytecode(code).exception_entries)

    def boundary(at: int) -> bool:
        # the stack is empty, no jump (forward or back: loops) and no try block spans it
        return (
            depths.get(at) == 0
            and not any(min(src, dst) < at < max(src, dst) for src, dst in jumps)
            and not any(entry.start < at < entry.end for entry in entries)
        )

    starts = [i.offset for i in insts if body_start <= i.offset <= offset and boundary(i.offset)]
    stops = [i.offset for i in insts if i.offset > offset and boundary(i.offset)]
    if not starts:
        return "no statement boundary before the unsupported instruction (a loop or try block)"
    start, stop = starts[-1], stops[0] if stops else None
    if not _handlers_inside(entries, body_start, start):
        return "a try block before the break has its handler after it"
    if not _handlers_inside(entries, start, stop):
        stop = None  # the statement's handlers lie past it: run the rest of the frame eagerly
    if stop is not None and not _handlers_inside(entries, stop, None):
        return "a try block after the break has its handler before it"
    return SplitPlan(start, stop, body_start)


def _emit(opname: str, arg: int = 0) -> bytes:
    out = b""
    for shift in (24, 16, 8):
        if arg >> shift:
            out += bytes([_OP["EXTENDED_ARG"], (arg >> shift) & 0xFF])
    return out + bytes([_OP[opname], arg & 0xFF])


def _jump_forward(at: int, target: int) -> bytes:
    for size in (2, 4, 6):
        code = _emit("JUMP_FORWARD", (target - at - size) // 2)
        if len(code) == size:
            return code
    raise ValueError("jump too far")


def _epilogue(code: types.CodeType, end_index: int) -> bytes:
    out = _emit("LOAD_CONST", end_index)
    for index in range(len(code.co_varnames)):
        out += _emit("LOAD_FAST", index)
    return out + _emit("BUILD_TUPLE", len(code.co_varnames) + 1) + _emit("RETURN_VALUE")


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
        load = (_emit("PUSH_NULL") if inst.arg & 1 else b"") + _emit("LOAD_CONST", len(consts) - 1)
        if len(load) > size:
            continue
        raw[inst.offset : inst.offset + size] = load + _emit("NOP") * ((size - len(load)) // 2)


def segment_function(
    function: types.FunctionType,
    start: int,
    stop: int | None,
    body_start: int,
    tag: str,
    replacements: dict[str, Any] | None = None,
) -> types.FunctionType:
    """A function running `function`'s code from `start` to `stop`; every local is a parameter.

    `replacements` maps globals called in the part to what is called instead (the
    compiled callee of a break inside an inlined call).
    """
    code = function.__code__
    raw = bytearray(code.co_code)
    const_list = list(code.co_consts)
    if replacements:
        _replace_global_loads(code, raw, const_list, replacements, (start, stop))
    consts = (*const_list, END)
    if start > body_start:
        jump = _jump_forward(body_start, start)
        if body_start + len(jump) > start:
            raise ValueError("no room for the entry jump")
        raw[body_start : body_start + len(jump)] = jump
    if stop is not None:
        tail = _epilogue(code, len(consts) - 1)
        raw[stop:] = tail
        if len(raw) < len(code.co_code):
            raw += _emit("NOP") * ((len(code.co_code) - len(raw)) // 2)
    nlocals = len(code.co_varnames)
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    new_code = code.replace(
        co_code=bytes(raw),
        co_consts=consts,
        co_argcount=nlocals,
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=flags,
        co_stacksize=max(code.co_stacksize, nlocals + 2),
        co_name=f"{code.co_name}_{tag}",
        co_qualname=f"{code.co_qualname}_{tag}",
    )
    return types.FunctionType(new_code, function.__globals__, new_code.co_name)


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
