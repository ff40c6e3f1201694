"""Every difference between CPython 3.11 and 3.12 bytecode, behind one opcode table.

`OPCODE_TABLE` maps each opcode name that either version emits for ordinary code
to the name of the handler that interprets it and the versions that have it.
`decode(code)` turns a code object into version-neutral `Instruction`s: jump
targets are absolute offsets, the 3.12 FOR_ITER exit skips END_FOR, and the
"push NULL" / "method load" bits of LOAD_GLOBAL, LOAD_ATTR and LOAD_SUPER_ATTR
are plain flags. Nothing else in the package looks at `sys.version_info`.
"""

from __future__ import annotations

import dis
import opcode
import sys
import types
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BINARY_OPERATORS",
    "CHECKED_LOAD_FAST",
    "INTRINSICS",
    "OPCODE_TABLE",
    "PY312",
    "SEND_KEEPS_RECEIVER",
    "ExceptionEntry",
    "Instruction",
    "append_exception_entries",
    "append_line_spans",
    "decode",
    "emit",
    "emit_call",
    "emit_jump",
    "emit_skip_if_false",
    "expected_stack_effect",
    "line_at",
]

PY312 = sys.version_info >= (3, 12)
# The load of a local that may be unbound: 3.12's LOAD_FAST trusts the compiler that the
# local is bound (an unbound one crashes); LOAD_FAST_CHECK raises UnboundLocalError.
CHECKED_LOAD_FAST = "LOAD_FAST_CHECK" if PY312 else "LOAD_FAST"
# When SEND finds its receiver exhausted, 3.12 keeps the receiver under the result
# (END_SEND pops it); 3.11 replaces the receiver with the result.
SEND_KEEPS_RECEIVER = PY312
V311 = frozenset({(3, 11)})
V312 = frozenset({(3, 12)})
BOTH = V311 | V312

# opcode name -> (handler name, versions that emit it). Handler names are the
# 3.12 spelling where the two versions mean the same thing.
OPCODE_TABLE: dict[str, tuple[str, frozenset[tuple[int, int]]]] = {
    # no-ops and frame setup
    "NOP": ("NOP", BOTH),
    "RESUME": ("NOP", BOTH),
    "CACHE": ("NOP", BOTH),
    "EXTENDED_ARG": ("NOP", BOTH),
    "PRECALL": ("NOP", V311),
    "COPY_FREE_VARS": ("NOP", BOTH),
    "MAKE_CELL": ("MAKE_CELL", BOTH),
    "RETURN_GENERATOR": ("RETURN_GENERATOR", BOTH),
    # stack
    "POP_TOP": ("POP_TOP", BOTH),
    "PUSH_NULL": ("PUSH_NULL", BOTH),
    "COPY": ("COPY", BOTH),
    "SWAP": ("SWAP", BOTH),
    "END_FOR": ("END_FOR", V312),
    # loads and stores
    "LOAD_CONST": ("LOAD_CONST", BOTH),
    "RETURN_CONST": ("RETURN_CONST", V312),
    "LOAD_FAST": ("LOAD_FAST", BOTH),
    "LOAD_FAST_CHECK": ("LOAD_FAST", V312),
    "LOAD_FAST_AND_CLEAR": ("LOAD_FAST_AND_CLEAR", V312),
    "STORE_FAST": ("STORE_FAST", BOTH),
    "DELETE_FAST": ("DELETE_FAST", BOTH),
    "LOAD_GLOBAL": ("LOAD_GLOBAL", BOTH),
    "STORE_GLOBAL": ("STORE_GLOBAL", BOTH),
    "DELETE_GLOBAL": ("UNSUPPORTED", BOTH),
    "LOAD_NAME": ("LOAD_GLOBAL", BOTH),
    "LOAD_DEREF": ("LOAD_DEREF", BOTH),
    "LOAD_CLASSDEREF": ("LOAD_DEREF", V311),
    "STORE_DEREF": ("STORE_DEREF", BOTH),
    "DELETE_DEREF": ("UNSUPPORTED", BOTH),
    "LOAD_CLOSURE": ("LOAD_CLOSURE", BOTH),
    "LOAD_ATTR": ("LOAD_ATTR", BOTH),
    "LOAD_METHOD": ("LOAD_ATTR", V311),
    "LOAD_SUPER_ATTR": ("LOAD_SUPER_ATTR", V312),
    "STORE_ATTR": ("STORE_ATTR", BOTH),
    "DELETE_ATTR": ("DELETE_ATTR", BOTH),
    "LOAD_ASSERTION_ERROR": ("LOAD_ASSERTION_ERROR", BOTH),
    "IMPORT_NAME": ("IMPORT_NAME", BOTH),
    "IMPORT_FROM": ("IMPORT_FROM", BOTH),
    # operators
    "BINARY_OP": ("BINARY_OP", BOTH),
    "COMPARE_OP": ("COMPARE_OP", BOTH),
    "IS_OP": ("IS_OP", BOTH),
    "CONTAINS_OP": ("CONTAINS_OP", BOTH),
    "UNARY_NEGATIVE": ("UNARY_NEGATIVE", BOTH),
    "UNARY_NOT": ("UNARY_NOT", BOTH),
    "UNARY_INVERT": ("UNARY_INVERT", BOTH),
    "UNARY_POSITIVE": ("UNARY_POSITIVE", V311),
    "CALL_INTRINSIC_1": ("CALL_INTRINSIC_1", V312),
    "BINARY_SUBSCR": ("BINARY_SUBSCR", BOTH),
    "STORE_SUBSCR": ("STORE_SUBSCR", BOTH),
    "DELETE_SUBSCR": ("DELETE_SUBSCR", BOTH),
    "BINARY_SLICE": ("BINARY_SLICE", V312),
    "STORE_SLICE": ("STORE_SLICE", V312),
    "GET_LEN": ("GET_LEN", BOTH),
    # building values
    "BUILD_TUPLE": ("BUILD_TUPLE", BOTH),
    "BUILD_LIST": ("BUILD_LIST", BOTH),
    "BUILD_SET": ("BUILD_SET", BOTH),
    "BUILD_MAP": ("BUILD_MAP", BOTH),
    "BUILD_CONST_KEY_MAP": ("BUILD_CONST_KEY_MAP", BOTH),
    "BUILD_STRING": ("BUILD_STRING", BOTH),
    "BUILD_SLICE": ("BUILD_SLICE", BOTH),
    "FORMAT_VALUE": ("FORMAT_VALUE", BOTH),
    "LIST_APPEND": ("LIST_APPEND", BOTH),
    "LIST_EXTEND": ("LIST_EXTEND", BOTH),
    "LIST_TO_TUPLE": ("LIST_TO_TUPLE", V311),
    "SET_ADD": ("SET_ADD", BOTH),
    "SET_UPDATE": ("SET_UPDATE", BOTH),
    "MAP_ADD": ("MAP_ADD", BOTH),
    "DICT_UPDATE": ("DICT_UPDATE", BOTH),
    "DICT_MERGE": ("DICT_MERGE", BOTH),
    "UNPACK_SEQUENCE": ("UNPACK_SEQUENCE", BOTH),
    "UNPACK_EX": ("UNPACK_EX", BOTH),
    "MAKE_FUNCTION": ("MAKE_FUNCTION", BOTH),
    # calls
    "KW_NAMES": ("KW_NAMES", BOTH),
    "CALL": ("CALL", BOTH),
    "CALL_FUNCTION_EX": ("CALL_FUNCTION_EX", BOTH),
    "BEFORE_WITH": ("BEFORE_WITH", BOTH),
    # control flow
    "JUMP_FORWARD": ("JUMP", BOTH),
    "JUMP_BACKWARD": ("JUMP", BOTH),
    "JUMP_BACKWARD_NO_INTERRUPT": ("JUMP", BOTH),
    "POP_JUMP_FORWARD_IF_TRUE": ("POP_JUMP_IF_TRUE", V311),
    "POP_JUMP_BACKWARD_IF_TRUE": ("POP_JUMP_IF_TRUE", V311),
    "POP_JUMP_IF_TRUE": ("POP_JUMP_IF_TRUE", V312),
    "POP_JUMP_FORWARD_IF_FALSE": ("POP_JUMP_IF_FALSE", V311),
    "POP_JUMP_BACKWARD_IF_FALSE": ("POP_JUMP_IF_FALSE", V311),
    "POP_JUMP_IF_FALSE": ("POP_JUMP_IF_FALSE", V312),
    "POP_JUMP_FORWARD_IF_NONE": ("POP_JUMP_IF_NONE", V311),
    "POP_JUMP_BACKWARD_IF_NONE": ("POP_JUMP_IF_NONE", V311),
    "POP_JUMP_IF_NONE": ("POP_JUMP_IF_NONE", V312),
    "POP_JUMP_FORWARD_IF_NOT_NONE": ("POP_JUMP_IF_NOT_NONE", V311),
    "POP_JUMP_BACKWARD_IF_NOT_NONE": ("POP_JUMP_IF_NOT_NONE", V311),
    "POP_JUMP_IF_NOT_NONE": ("POP_JUMP_IF_NOT_NONE", V312),
    "JUMP_IF_TRUE_OR_POP": ("JUMP_IF_TRUE_OR_POP", V311),
    "JUMP_IF_FALSE_OR_POP": ("JUMP_IF_FALSE_OR_POP", V311),
    "GET_ITER": ("GET_ITER", BOTH),
    "FOR_ITER": ("FOR_ITER", BOTH),
    "RETURN_VALUE": ("RETURN_VALUE", BOTH),
    "YIELD_VALUE": ("YIELD_VALUE", BOTH),
    # exception machinery: reached by unwinding to a handler (Translator.unwind)
    "PUSH_EXC_INFO": ("PUSH_EXC_INFO", BOTH),
    "POP_EXCEPT": ("POP_EXCEPT", BOTH),
    "CHECK_EXC_MATCH": ("CHECK_EXC_MATCH", BOTH),
    "CHECK_EG_MATCH": ("EXCEPTION_PATH", BOTH),
    "WITH_EXCEPT_START": ("WITH_EXCEPT_START", BOTH),
    "RERAISE": ("RERAISE", BOTH),
    "PREP_RERAISE_STAR": ("EXCEPTION_PATH", V311),
    "CLEANUP_THROW": ("EXCEPTION_PATH", V312),
    "RAISE_VARARGS": ("RAISE_VARARGS", BOTH),
    # named, not supported in captured code
    "SEND": ("SEND", BOTH),
    "END_SEND": ("END_SEND", V312),
    "GET_YIELD_FROM_ITER": ("GET_ITER", BOTH),
    "GET_AWAITABLE": ("UNSUPPORTED", BOTH),
    "GET_AITER": ("UNSUPPORTED", BOTH),
    "GET_ANEXT": ("UNSUPPORTED", BOTH),
    "BEFORE_ASYNC_WITH": ("UNSUPPORTED", BOTH),
    "END_ASYNC_FOR": ("UNSUPPORTED", BOTH),
    "ASYNC_GEN_WRAP": ("UNSUPPORTED", V311),
    "LOAD_BUILD_CLASS": ("UNSUPPORTED", BOTH),
    "SETUP_ANNOTATIONS": ("UNSUPPORTED", BOTH),
    "IMPORT_STAR": ("UNSUPPORTED", V311),
    "PRINT_EXPR": ("UNSUPPORTED", V311),
    "MATCH_CLASS": ("MATCH_CLASS", BOTH),
    "MATCH_MAPPING": ("MATCH_MAPPING", BOTH),
    "MATCH_SEQUENCE": ("MATCH_SEQUENCE", BOTH),
    "MATCH_KEYS": ("MATCH_KEYS", BOTH),
    "STORE_NAME": ("UNSUPPORTED", BOTH),
    "DELETE_NAME": ("UNSUPPORTED", BOTH),
    "LOAD_LOCALS": ("UNSUPPORTED", V312),
    "LOAD_FROM_DICT_OR_DEREF": ("UNSUPPORTED", V312),
    "LOAD_FROM_DICT_OR_GLOBALS": ("UNSUPPORTED", V312),
    "CALL_INTRINSIC_2": ("UNSUPPORTED", V312),
    "RETURN_GENERATOR_ASYNC": ("UNSUPPORTED", frozenset()),
}

_VERSION = sys.version_info[:2]


def _check_table() -> None:
    for name, (_, versions) in OPCODE_TABLE.items():
        if _VERSION in versions and name not in dis.opmap:
            raise RuntimeError(f"opcode table names {name!r}, unknown to Python {_VERSION}")


_check_table()

# BINARY_OP's argument indexes this list (CPython's NB_* order, the same in 3.11 and 3.12).
BINARY_OPERATORS: tuple[str, ...] = (
    "+", "&", "//", "<<", "@", "*", "%", "|", "**", ">>", "-", "/", "^",
    "+=", "&=", "//=", "<<=", "@=", "*=", "%=", "|=", "**=", ">>=", "-=", "/=", "^=",
)  # fmt: skip

# CALL_INTRINSIC_1 (3.12) argument -> what it computes.
INTRINSICS: dict[int, str] = {
    1: "PRINT",
    2: "IMPORT_STAR",
    3: "STOPITERATION_ERROR",
    4: "ASYNC_GEN_WRAP",
    5: "UNARY_POSITIVE",
    6: "LIST_TO_TUPLE",
}


@dataclass(frozen=True, slots=True)
class Instruction:
    """One decoded instruction, the same shape on every supported Python version.

    handler: the handler name from OPCODE_TABLE. target: the absolute offset a
    jump goes to (FOR_ITER: where an exhausted loop continues, iterator popped).
    push_null: LOAD_GLOBAL pushes NULL first. method: an attribute load for a call.
    """

    opname: str
    opcode: int
    handler: str
    arg: int | None
    argval: Any
    offset: int
    line: int | None
    target: int | None
    push_null: bool = False
    method: bool = False


def _jump_target(inst: dis.Instruction, by_offset: dict[int, dis.Instruction]) -> int | None:
    if inst.opcode not in dis.hasjrel and inst.opcode not in dis.hasjabs:
        return None
    target = inst.argval
    if PY312 and inst.opname == "FOR_ITER":
        at_target = by_offset.get(target)
        if at_target is not None and at_target.opname == "END_FOR":
            target += 2  # an exhausted 3.12 loop pops its iterator and skips END_FOR
    return target


def _flags(inst: dis.Instruction) -> tuple[bool, bool]:
    """(push_null, method) of a load instruction."""
    name, arg = inst.opname, inst.arg or 0
    if name == "LOAD_GLOBAL":
        return bool(arg & 1), False
    if name == "LOAD_METHOD":
        return False, True
    if name == "LOAD_ATTR" and PY312:
        return False, bool(arg & 1)
    if name == "LOAD_SUPER_ATTR":
        return False, bool(arg & 1)
    return False, False


def decode(code: types.CodeType) -> list[Instruction]:
    """The instructions of `code`, CACHE entries dropped, in offset order."""
    raw = [inst for inst in dis.get_instructions(code) if inst.opname != "CACHE"]
    by_offset = {inst.offset: inst for inst in raw}
    decoded = []
    line = code.co_firstlineno
    for inst in raw:
        entry = OPCODE_TABLE.get(inst.opname)
        if entry is None or _VERSION not in entry[1]:
            handler = "UNSUPPORTED"
        else:
            handler = entry[0]
        positions = inst.positions
        if positions is not None and positions.lineno is not None:
            line = positions.lineno
        push_null, method = _flags(inst)
        argval = inst.argval
        if inst.opname == "KW_NAMES":
            argval = code.co_consts[inst.arg]
        decoded.append(
            Instruction(
                inst.opname,
                inst.opcode,
                handler,
                inst.arg,
                argval,
                inst.offset,
                line,
                _jump_target(inst, by_offset),
                push_null,
                method,
            )
        )
    return decoded


def expected_stack_effect(inst: Instruction, jumped: bool) -> int | None:
    """`dis.stack_effect` of `inst` on the path taken, or None where it does not apply."""
    if inst.opname in ("RETURN_VALUE", "RETURN_CONST", "YIELD_VALUE", "RETURN_GENERATOR"):
        return None
    arg = inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None
    if inst.opname == "PRECALL":
        return None  # 3.11 splits a call's effect between PRECALL and CALL: counted at CALL
    if inst.opname == "CALL" and not PY312:
        return dis.stack_effect(inst.opcode, arg) + dis.stack_effect(dis.opmap["PRECALL"], arg)
    try:
        if inst.target is not None:
            effect = dis.stack_effect(inst.opcode, arg, jump=jumped)
            if PY312 and jumped and inst.opname == "FOR_ITER":
                effect -= 2  # the jump skips END_FOR, which would pop two
            return effect
        return dis.stack_effect(inst.opcode, arg)
    except ValueError:
        return None


# ----- writing bytecode (the generated parts of a split frame) ---------------
_CACHES = opcode._inline_cache_entries


def _cache_count(op: int) -> int:
    if isinstance(_CACHES, dict):
        return _CACHES.get(dis.opname[op], 0)
    return _CACHES[op]


def emit(opname: str, arg: int = 0) -> bytes:
    """One instruction: EXTENDED_ARG prefixes, the opcode, and its zeroed inline caches."""
    op = dis.opmap[opname]
    out = b""
    for shift in (24, 16, 8):
        if arg >> shift:
            out += bytes([dis.opmap["EXTENDED_ARG"], (arg >> shift) & 0xFF])
    return out + bytes([op, arg & 0xFF]) + b"\x00\x00" * _cache_count(op)


def emit_call(argc: int) -> bytes:
    """Call the callable under `argc` arguments (3.11 precedes CALL with PRECALL)."""
    if PY312:
        return emit("CALL", argc)
    return emit("PRECALL", argc) + emit("CALL", argc)


def emit_jump(at: int, target: int) -> bytes:
    """An unconditional jump placed at offset `at` to offset `target`, forward or backward."""
    forward = target >= at
    opname = "JUMP_FORWARD" if forward else "JUMP_BACKWARD"
    for units in range(1, 5):
        size = 2 * units + 2 * _cache_count(dis.opmap[opname])
        end = at + size
        arg = (target - end) // 2 if forward else (end - target) // 2
        if arg < 0:
            continue
        code = emit(opname, arg)
        if len(code) < size:  # the argument fits in fewer units: pad with EXTENDED_ARG 0
            code = bytes([dis.opmap["EXTENDED_ARG"], 0]) * ((size - len(code)) // 2) + code
        if len(code) == size:
            return code
    raise ValueError(f"no jump from {at} to {target}")


def emit_skip_if_false(skip: int) -> bytes:
    """Pop the top of the stack; when it is false, skip the next `skip` bytes (forward)."""
    opname = "POP_JUMP_IF_FALSE" if PY312 else "POP_JUMP_FORWARD_IF_FALSE"
    return emit(opname, skip // 2)


# ----- the tables beside the bytecode (generated code carries its own entries) ------
@dataclass(frozen=True, slots=True)
class ExceptionEntry:
    """A `co_exceptiontable` entry in byte offsets: [start, end) jumps to `target` with the
    value stack cut to `depth` (then the exception pushed); `lasti` pushes the offset too."""

    start: int
    end: int
    target: int
    depth: int
    lasti: bool = False


def _exception_varint(value: int, first: bool) -> bytes:
    """The exception table's varint: 6-bit chunks, most significant first, bit 6 marks
    a chunk that more follow, bit 7 marks the first byte of an entry."""
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    out = bytearray(chunk | 64 for chunk in chunks[:-1]) + bytes([chunks[-1]])
    if first:
        out[0] |= 128
    return bytes(out)


def append_exception_entries(table: bytes, entries: list[ExceptionEntry]) -> bytes:
    """`table` with `entries` added after its own (they must start after its last one)."""
    out = bytearray(table)
    for entry in entries:
        out += _exception_varint(entry.start // 2, first=True)
        out += _exception_varint((entry.end - entry.start) // 2, first=False)
        out += _exception_varint(entry.target // 2, first=False)
        out += _exception_varint(entry.depth << 1 | entry.lasti, first=False)
    return bytes(out)


def _location_varint(value: int) -> bytes:
    """The location table's varint: 6-bit chunks, least significant first (PEP 626/657)."""
    out = bytearray()
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)
    return bytes(out)


_NO_COLUMNS = 13  # a location table entry with a line and no columns (3.11 and 3.12)


def line_at(code: types.CodeType, offset: int) -> int:
    """The source line of the instruction at `offset` (the line before it if it has none)."""
    found = code.co_firstlineno
    for start, _, line in code.co_lines():
        if start > offset:
            break
        if line is not None:
            found = line
    return found


def append_line_spans(code: types.CodeType, spans: list[tuple[int, int]]) -> bytes:
    """`code.co_linetable` extended over code appended after `code.co_code`.

    `spans` are (bytes, line) in order: each run of appended code takes the line of the
    user's instruction it stands for, so a traceback, a debugger or a profiler stopped
    there shows the user's file and line (entries with a line and no columns).
    """
    out = bytearray(code.co_linetable)
    line = code.co_firstlineno
    for lineno, *_ in code.co_positions():  # the table's line where its entries end
        if lineno is not None:
            line = lineno
    for size, target in spans:
        units = size // 2
        while units > 0:
            length = min(units, 8)
            delta = target - line
            out.append(128 | (_NO_COLUMNS << 3) | (length - 1))
            out += _location_varint(-delta << 1 | 1 if delta < 0 else delta << 1)
            line = target
            units -= length
    return bytes(out)
