"""Opcode handlers for raising and handling exceptions inside captured code.

    try:                              RAISE_VARARGS  -> ExceptionRaised(value)
        raise KeyError("k")           Translator.unwind: the exception table's handler
    except KeyError as e:             PUSH_EXC_INFO, CHECK_EXC_MATCH, ... POP_EXCEPT
        y = x + 1

An exception is a real Python exception object made while capturing (a PythonValue);
raising it raises `ExceptionRaised` in the interpreter, which each Translator, from the
raising frame outwards, unwinds to the handler its code's exception table names. The
handler's bytecode then runs like any other: `except E` tests the type, `finally` and a
`with` block's exit run, `raise` re-raises. An exception that leaves the compiled frame
is a break that runs the frame eagerly (torch.compile does the same), so the caller
sees eager's exception, type and message.
"""

from __future__ import annotations

import sys
from typing import Any

from dynamo_capture.builtin_calls import handles
from dynamo_capture.bytecode import Instruction
from dynamo_capture.calls import call
from dynamo_capture.errors import ExceptionRaised, Unsupported
from dynamo_capture.interpreter import Translator, opcode_handler
from dynamo_capture.values import PythonValue, TupleValue, Value

__all__ = ["exception_instance", "raise_exception"]


def exception_instance(tx: Translator, raised: Value) -> PythonValue:
    """The exception object `raise raised` raises: an instance, or a class called with
    no arguments. It must be one made while capturing (its traceback and context are
    set when it is raised)."""
    if isinstance(raised, PythonValue) and isinstance(raised.obj, type):
        if not issubclass(raised.obj, BaseException):
            raise Unsupported("raise of a class that does not derive from BaseException")
        raised = call(tx, raised, [], {})
    if not (isinstance(raised, PythonValue) and isinstance(raised.obj, BaseException)):
        raise Unsupported("raise of an exception object capture does not know")
    if raised.source is not None:
        raise Unsupported("raise of an exception object made outside the compiled code")
    return raised


def raise_exception(tx: Translator, raised: PythonValue, cause: Value | None = None) -> None:
    """Raise `raised` in the captured code, chained as Python chains it."""
    exception = raised.obj
    handled = tx.handled_exception()
    if handled is not None and handled.obj is not exception:
        exception.__context__ = handled.obj
    if cause is not None:
        if isinstance(cause, PythonValue) and cause.obj is None:
            exception.__cause__ = None
        else:
            exception.__cause__ = exception_instance(tx, cause).obj
        exception.__suppress_context__ = True
    raise ExceptionRaised(raised)


@opcode_handler("RAISE_VARARGS")
def raise_varargs(tx: Translator, inst: Instruction) -> None:
    if inst.arg == 0:
        handled = tx.handled_exception()
        if handled is None:
            raise Unsupported("bare `raise` with no exception being handled")
        raise ExceptionRaised(handled)
    cause = tx.pop() if inst.arg == 2 else None
    try:
        raise_exception(tx, exception_instance(tx, tx.pop()), cause)
    except ExceptionRaised as raised:
        raised.plain_assert = plain_assert_raise(tx, inst, raised)
        if raised.plain_assert and not raised.where:
            raised.where = tx.where()  # a break at the assert, should it leave the frame
        raise


# what lies between an assert's LOAD_ASSERTION_ERROR and its raise: nothing, or a
# constant message passed to the AssertionError
_ASSERT_MESSAGE = ("LOAD_CONST", "PRECALL", "CALL", "CACHE")


def plain_assert_raise(tx: Translator, inst: Instruction, raised: ExceptionRaised) -> bool:
    """Whether the raise at `inst` is a failing `assert` statement with no message or a
    constant one (LOAD_ASSERTION_ERROR right before the raise, or before the message and
    the call making the AssertionError), not a `raise` statement's: torch.compile compiles
    the graph before such an assert, in the frame or a callee, and raises after it; with
    a message computed when it fails it runs the frame eagerly."""
    value = raised.value
    if not (isinstance(value, PythonValue) and type(value.obj) is AssertionError):
        return False
    index = tx.index_of[inst.offset]
    for before in reversed(tx.instructions[:index]):
        if before.opname == "LOAD_ASSERTION_ERROR":
            return True
        if before.opname not in _ASSERT_MESSAGE:
            return False
    return False


@opcode_handler("PUSH_EXC_INFO")
def push_exc_info(tx: Translator, inst: Instruction) -> None:
    exception = tx.pop()
    tx.push(tx.handling if tx.handling is not None else PythonValue(None))
    tx.handling = exception
    tx.push(exception)


@opcode_handler("POP_EXCEPT")
def pop_except(tx: Translator, inst: Instruction) -> None:
    previous = tx.pop()
    tx.handling = None if isinstance(previous, PythonValue) and previous.obj is None else previous


def _exception_types(value: Value) -> Any:
    if isinstance(value, TupleValue):
        return tuple(_exception_types(item) for item in value.items)
    if isinstance(value, PythonValue):
        if isinstance(value.obj, type) and issubclass(value.obj, BaseException):
            return value.obj
        if isinstance(value.obj, tuple) and all(
            isinstance(t, type) and issubclass(t, BaseException) for t in value.obj
        ):
            return value.obj
    raise Unsupported("`except` on something other than exception classes")


@opcode_handler("CHECK_EXC_MATCH")
def check_exc_match(tx: Translator, inst: Instruction) -> None:
    types = _exception_types(tx.pop())
    exception = tx.stack[-1]
    assert isinstance(exception, PythonValue)
    tx.push(PythonValue(isinstance(exception.obj, types)))


@opcode_handler("RERAISE")
def reraise(tx: Translator, inst: Instruction) -> None:
    exception = tx.pop()
    if inst.arg:
        tx.pop()  # the lasti of the instruction that raised
    assert isinstance(exception, PythonValue)
    raise ExceptionRaised(exception)


@opcode_handler("WITH_EXCEPT_START")
def with_except_start(tx: Translator, inst: Instruction) -> None:
    """A `with` block left by an exception: __exit__(type, value, traceback)."""
    exception = tx.stack[-1]
    leave = tx.stack[-4]
    assert isinstance(exception, PythonValue)
    traceback = PythonValue(exception.obj.__traceback__)
    args = [PythonValue(type(exception.obj)), exception, traceback]
    tx.push(call(tx, leave, args, {}))


@opcode_handler("EXCEPTION_PATH")
def exception_path(tx: Translator, inst: Instruction) -> None:
    raise Unsupported(f"exception handling ({inst.opname}) reached while capturing")


@handles(sys.exc_info)
def _exc_info(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    handled = tx.handled_exception()
    if handled is None:
        return TupleValue([PythonValue(None)] * 3)
    assert isinstance(handled, PythonValue)
    traceback = PythonValue(handled.obj.__traceback__)
    return TupleValue([PythonValue(type(handled.obj)), handled, traceback])


@handles(sys.exception)
def _exception(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    handled = tx.handled_exception()
    return handled if handled is not None else PythonValue(None)
