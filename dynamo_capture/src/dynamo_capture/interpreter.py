"""The symbolic bytecode interpreter: one `Translator` per frame (inlined calls included).

A Translator walks the decoded instructions of one code object, keeping a stack
and locals of `Value`s, and dispatches each instruction to the handler that the
opcode table names (`opcode_handler` registers them; the registry is checked
against the table at import). With `checks_enabled()` each step's stack depth is
compared with `dis.stack_effect`.
"""

from __future__ import annotations

import contextlib
import dis
import os
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dynamo_capture.bytecode import OPCODE_TABLE, Instruction, decode, expected_stack_effect
from dynamo_capture.errors import ExceptionRaised, Unsupported, UserLocation
from dynamo_capture.output_graph import CaptureContext
from dynamo_capture.sources import (
    AttrSource,
    GlobalSource,
    ItemSource,
    ModuleGlobalSource,
    Source,
)
from dynamo_capture.values import CellValue, PythonValue, Value

__all__ = [
    "HANDLERS",
    "Callee",
    "MAX_INLINE_DEPTH",
    "MAX_STEPS",
    "Translator",
    "check_registry",
    "checks",
    "checks_enabled",
    "opcode_handler",
]

MAX_INLINE_DEPTH = 48
MAX_STEPS = 2_000_000

Handler = Callable[["Translator", Instruction], None]
HANDLERS: dict[str, Handler] = {}
_HANDLER_NAMES = {handler for handler, _ in OPCODE_TABLE.values()}
_checks = {"on": os.environ.get("EMBER_CAPTURE_CHECKS", "") == "1"}


def checks_enabled() -> bool:
    """Whether the interpreter's invariant checks (stack depth) are on."""
    return _checks["on"]


@contextlib.contextmanager
def checks(enabled: bool = True) -> Iterator[None]:
    """Turn the interpreter's invariant checks on (or off) inside the block."""
    saved = _checks["on"]
    _checks["on"] = enabled
    try:
        yield
    finally:
        _checks["on"] = saved


def opcode_handler(*names: str) -> Callable[[Handler], Handler]:
    """Register a handler for the handler names of OPCODE_TABLE; unknown or duplicate names fail."""

    def register(fn: Handler) -> Handler:
        for name in names:
            if name not in _HANDLER_NAMES:
                raise RuntimeError(
                    f"opcode_handler: {name!r} is not a handler name of OPCODE_TABLE"
                )
            if name in HANDLERS:
                raise RuntimeError(f"opcode_handler: {name!r} has two handlers")
            HANDLERS[name] = fn
        return fn

    return register


def check_registry() -> None:
    """Every handler the opcode table names has a registered function."""
    missing = sorted(_HANDLER_NAMES - set(HANDLERS))
    if missing:
        raise RuntimeError(f"opcode handlers missing for: {', '.join(missing)}")


@dataclass(frozen=True, slots=True)
class Callee:
    """An inlined call: the real function and its real first argument (a method's self).

    Either is None when capture made it (a closure built while capturing, a new object).
    The sources say where the compiled frame's locals hold them (None: nowhere known);
    a capture record of the frame finds them again there (`portable.break_record`).
    """

    function: Any = None
    receiver: Any = None
    function_source: Source | None = None
    receiver_source: Source | None = None
    receiver_class: type | None = None  # the class of a receiver capture made


# NOTE: keyed weakly: a program compiled and dropped takes its decoded bytecode with it
# (a process compiling many functions would otherwise keep every code object it saw).
_decoded: weakref.WeakKeyDictionary[types.CodeType, tuple[list[Instruction], dict[int, int]]] = (
    weakref.WeakKeyDictionary()
)


def _decode_cached(code: types.CodeType) -> tuple[list[Instruction], dict[int, int]]:
    found = _decoded.get(code)
    if found is None:
        instructions = decode(code)
        found = (instructions, {inst.offset: i for i, inst in enumerate(instructions)})
        _decoded[code] = found
    return found


# the Translators running now, innermost last (user __hash__/__eq__ of dict keys are
# traced in the one that runs the dict operation: operations.UserHashKey)
RUNNING: list[Translator] = []


class Translator:
    """Interprets one code object on Values; inlined calls get a child Translator."""

    def __init__(
        self,
        ctx: CaptureContext,
        code: types.CodeType,
        f_locals: dict[str, Value],
        f_globals: dict[str, Any],
        *,
        cells: dict[str, CellValue] | None = None,
        real_cells: dict[str, tuple[Any, Source | None]] | None = None,
        parent: Translator | None = None,
        generator: bool = False,
        callee: Callee | None = None,
    ) -> None:
        self.ctx = ctx
        self.callee = callee
        self.code = code
        self.instructions, self.index_of = _decode_cached(code)
        self.locals = f_locals
        self.f_globals = f_globals
        self.cells: dict[str, CellValue] = dict(cells or {})
        self.real_cells = dict(real_cells or {})
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.stack: list[Value] = []
        self.kw_names: tuple[str, ...] = ()
        self.calling: Value | None = None  # the callable of the CALL now running
        self.calling_args: list[Value] = []  # and its positional arguments
        self.calling_after_null = False  # its callable lay above a NULL (no method call)
        self.result: Value | None = None
        self.yielded: list[Value] | None = [] if generator else None
        # a generator run lazily (a @contextmanager's) stops at each yield until resumed
        self.stop_at_yield = False
        self.suspended = False
        self.done = False
        self.next_index = 0
        self.current: Instruction | None = None
        # the exception an `except`/`finally` block of this frame handles (sys.exc_info())
        self.handling: Value | None = None
        # an exception thrown into a suspended generator at its yield (generator.throw)
        self.pending: ExceptionRaised | None = None
        self.steps = 0 if parent is None else parent.steps
        # (offset, stack depth before it) of every instruction run: the compiled frame's only
        self.trace: list[tuple[int, int]] | None = [] if parent is None else None
        # (offset, graph nodes so far) of every instruction of the compiled frame run with
        # an empty stack: where torch.compile may cut when it cannot resume at a break
        self.checkpoints: list[tuple[int, int]] = []
        if self.depth > MAX_INLINE_DEPTH:
            raise Unsupported(f"inlining deeper than {MAX_INLINE_DEPTH} calls (recursion?)")

    # ----- stack --------------------------------------------------------
    def push(self, value: Value) -> None:
        self.stack.append(value)

    def pop(self) -> Value:
        return self.stack.pop()

    def popn(self, count: int) -> list[Value]:
        if count == 0:
            return []
        values = self.stack[-count:]
        del self.stack[-count:]
        return values

    def jump(self, target: int) -> None:
        self.next_index = self.index_of[target]

    def finish(self, value: Value) -> None:
        self.result = value
        self.done = True

    # ----- names --------------------------------------------------------
    def global_source(self, name: str) -> Source:
        """Where guards and a resumed frame's entry read the global `name` again.

        A `ModuleGlobalSource` reads `sys.modules[m].__dict__`, so it stands for these
        globals only where that is this very dict: a function of a module that is not
        registered (made with `types.ModuleType`, loaded from a file spec) or whose name
        another module now holds reads its globals through the inlined function's
        `__globals__`; with no source for the function, capture cannot read them again.
        """
        if self.f_globals is self.ctx.frame_globals:
            return GlobalSource(name)
        module_name = self.f_globals.get("__name__", "?")
        module = sys.modules.get(module_name) if isinstance(module_name, str) else None
        if module is not None and getattr(module, "__dict__", None) is self.f_globals:
            return ModuleGlobalSource(module_name, name)
        callee = self.callee
        if (
            callee is not None
            and callee.function_source is not None
            and getattr(callee.function, "__globals__", None) is self.f_globals
        ):
            return ItemSource(AttrSource(callee.function_source, "__globals__"), name)
        raise Unsupported(
            f"the global {name!r} of module {module_name!r}, whose globals dict is not "
            f"sys.modules[{module_name!r}].__dict__ (a module not registered there, or "
            "replaced), read by a function capture has no source for: it runs eagerly"
        )

    def cell(self, name: str, *, read: bool = True) -> CellValue:
        """The cell of free or cell variable `name`. `read=False`: for a store, which
        replaces the contents at once (a real cell's contents are not read, so not
        guarded: a setter's `nonlocal x; x = v` does not recompile on the old value)."""
        cell = self.cells.get(name)
        if cell is None:
            if name not in self.real_cells:
                raise Unsupported(f"free variable {name!r} is not known to capture")
            real, source = self.real_cells[name]
            # one value per real cell, however it is reached (a split frame's cell local,
            # a closure's __closure__): a write through one is seen through the others
            known = self.ctx.real_cell_values.get(id(real))
            if known is not None:
                cell = known[1]
            else:
                contents = None  # empty (reading it fails), or a store fills it
                if read:
                    try:
                        contents = self.ctx.wrap(real.cell_contents, source)
                    except ValueError:
                        pass
                cell = CellValue(contents, source)
                self.ctx.real_cell_values[id(real)] = (real, cell)
            self.cells[name] = cell
        return cell

    # ----- locations ----------------------------------------------------
    def location(self) -> UserLocation:
        line = self.current.line if self.current is not None else self.code.co_firstlineno
        return UserLocation(self.code.co_filename, line or 0, self.code.co_name)

    def where(self) -> tuple[UserLocation, ...]:
        chain = []
        tx: Translator | None = self
        while tx is not None:
            chain.append(tx.location())
            tx = tx.parent
        return tuple(reversed(chain))

    # ----- the loop -----------------------------------------------------
    def run(self) -> Value:
        """Interpret until RETURN_VALUE; the returned Value (or a generator's yields)."""
        self.run_until_yield()
        assert self.result is not None
        return self.result

    def run_until_yield(self) -> None:
        """Interpret until RETURN_VALUE or, with `stop_at_yield`, the next yield."""
        self.suspended = False
        RUNNING.append(self)
        try:
            if self.pending is not None:
                raised, self.pending = self.pending, None
                if not self.unwind(raised):
                    raise raised
            self._loop()
        except ExceptionRaised as raised:
            if raised.plain_assert and self.depth == 1 and raised.callee is None:
                raised.callee = self.callee  # the call in the compiled frame it leaves
            raise  # the caller's handlers may catch it
        except Unsupported as error:
            located = error.located(self.where())
            if located.stop_iteration and self._in_try():
                located.stop_iteration = False  # a handler here might catch it
            if self.depth >= 1:  # a break inside an inlined call: the call breaks
                located.rest_from_checkpoint = False
            if self.depth == 1 and located.callee is None:
                located.callee = self.callee  # the call in the compiled frame that broke
            raise located from error.__cause__
        finally:
            RUNNING.pop()

    def _loop(self) -> None:
        instructions = self.instructions
        check = checks_enabled()
        while not self.done and not self.suspended:
            index = self.next_index
            inst = instructions[index]
            self.current = inst
            self.next_index = index + 1
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise Unsupported(f"capture ran more than {MAX_STEPS} instructions (a long loop?)")
            depth = len(self.stack)
            if self.trace is not None:
                self.trace.append((inst.offset, depth))
                if depth == 0:
                    self.checkpoints.append((inst.offset, len(self.ctx.graph.nodes)))
            try:
                HANDLERS[inst.handler](self, inst)
            except ExceptionRaised as raised:
                if not self.unwind(raised):
                    raise
                continue
            if check and not self.done:
                self._check_depth(inst, depth)
        if self.parent is not None:
            self.parent.steps = self.steps

    def unwind(self, raised: ExceptionRaised) -> bool:
        """Jump to the handler of the current instruction, as CPython unwinds on an
        exception: the stack cut to the handler's depth, (lasti,) and the exception pushed.
        False when no handler of this frame covers the instruction."""
        if self.current is None:
            return False
        offset = self.current.offset
        for entry in _exception_entries(self.code):
            if entry.start <= offset < entry.end:
                del self.stack[entry.depth :]
                if entry.lasti:
                    self.push(PythonValue(offset))
                self.push(raised.value)
                self.jump(entry.target)
                return True
        return False

    def handled_exception(self) -> Value | None:
        """The exception being handled here or in a calling frame (what bare `raise` raises)."""
        tx: Translator | None = self
        while tx is not None:
            if tx.handling is not None:
                return tx.handling
            tx = tx.parent
        return None

    def _in_try(self) -> bool:
        """Whether the current instruction lies in a try (or with) block of this frame."""
        if self.current is None:
            return False
        offset = self.current.offset
        entries = _exception_entries(self.code)
        return any(entry.start <= offset < entry.end for entry in entries)

    def _check_depth(self, inst: Instruction, depth: int) -> None:
        jumped = (
            inst.target is not None and self.next_index != self.index_of.get(inst.offset, -1) + 1
        )
        expected = expected_stack_effect(inst, jumped)
        if expected is not None and len(self.stack) - depth != expected:
            raise AssertionError(
                f"stack depth check: {inst.opname} {inst.argval!r} at offset {inst.offset} "
                f"changed the stack by {len(self.stack) - depth}, dis.stack_effect says {expected}"
            )


_entries: weakref.WeakKeyDictionary[types.CodeType, list[Any]] = weakref.WeakKeyDictionary()


def _exception_entries(code: types.CodeType) -> list[Any]:
    found = _entries.get(code)
    if found is None:
        found = list(dis.Bytecode(code).exception_entries)
        _entries[code] = found
    return found


def constant(value: Any) -> PythonValue:
    """A Value for a Python constant made while capturing."""
    return PythonValue(value)
