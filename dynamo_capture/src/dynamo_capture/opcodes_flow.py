"""Opcode handlers for calls, `with`, jumps, loops, returns and generators (exceptions:
opcodes_exceptions)."""

from __future__ import annotations

import types

from dynamo_capture.bytecode import SEND_KEEPS_RECEIVER, Instruction
from dynamo_capture.calls import UNTRACED_CONTEXTS, call
from dynamo_capture.errors import ExceptionRaised, NeedsEagerFrame, Unsupported
from dynamo_capture.interpreter import Translator, opcode_handler
from dynamo_capture.lazy_iterators import generator_steps, next_item
from dynamo_capture.operations import (
    dict_items,
    get_iter,
    python_type_of,
    sequence_items,
    truth,
)
from dynamo_capture.values import (
    NULL,
    BuiltinMethodValue,
    ContextValue,
    IteratorValue,
    MethodValue,
    PythonValue,
    TensorValue,
    Value,
)


@opcode_handler("KW_NAMES")
def kw_names(tx: Translator, inst: Instruction) -> None:
    tx.kw_names = tuple(inst.argval)


@opcode_handler("CALL")
def call_(tx: Translator, inst: Instruction) -> None:
    args = tx.popn(inst.arg)
    tx.calling_args = args
    second = tx.pop()
    first = tx.pop()
    tx.calling_after_null = first is NULL
    if first is NULL:
        fn = second
    else:
        fn, args = first, [second, *args]
    kwargs = {}
    if tx.kw_names:
        count = len(tx.kw_names)
        kwargs = dict(zip(tx.kw_names, args[-count:], strict=True))
        args = args[:-count]
        tx.kw_names = ()
    tx.calling = fn
    tx.push(call(tx, fn, args, kwargs))


@opcode_handler("CALL_FUNCTION_EX")
def call_function_ex(tx: Translator, inst: Instruction) -> None:
    kwargs = dict_items(tx, tx.pop()) if (inst.arg or 0) & 1 else {}
    args = sequence_items(tx, tx.pop())
    fn = tx.pop()
    null = tx.pop()
    tx.calling_after_null = null is NULL
    if null is not NULL:
        fn, args = null, [fn, *args]
    tx.calling, tx.calling_args = fn, list(args)
    tx.push(call(tx, fn, args, {str(k): v for k, v in kwargs.items()}))


@opcode_handler("BEFORE_WITH")
def before_with(tx: Translator, inst: Instruction) -> None:
    from dynamo_capture.methods import known_context, outside_context

    manager = tx.pop()
    if isinstance(manager, PythonValue) and manager.source is None:
        manager = known_context(manager.obj) or manager
    elif isinstance(manager, PythonValue):
        manager = outside_context(tx, manager) or manager
    if isinstance(manager, ContextValue):
        from dynamo_capture.methods import enter_context

        tx.push(BuiltinMethodValue(manager, "__exit__"))
        tx.push(enter_context(tx, manager))
        return
    cls = python_type_of(manager)
    # NOTE: torch.compile enters only context managers made in the frame it traces, of
    # kinds it knows; any other is a break at the `with` that it cannot resume from
    # (capture.py: the part before compiled, the rest eager, or the whole frame eager)
    if isinstance(manager, PythonValue) and manager.source is not None:
        reason = f"`with` on a {cls.__name__} made outside the compiled frame"
    elif cls in UNTRACED_CONTEXTS:
        reason = f"`with` on a contextlib.{cls.__name__} (not traced, as torch.compile does)"
    else:
        enter, leave = getattr(cls, "__enter__", None), getattr(cls, "__exit__", None)
        if isinstance(enter, types.FunctionType) and isinstance(leave, types.FunctionType):
            tx.push(MethodValue(PythonValue(leave), manager))
            tx.push(call(tx, PythonValue(enter), [manager], {}))
            return
        reason = f"`with` on a {cls.__name__}, a context manager capture does not know"
    error = Unsupported(reason)
    error.outside_context = True
    raise error


# ----- jumps -------------------------------------------------------------
@opcode_handler("JUMP")
def jump(tx: Translator, inst: Instruction) -> None:
    tx.jump(inst.target)  # type: ignore[arg-type]


@opcode_handler("POP_JUMP_IF_TRUE")
def pop_jump_if_true(tx: Translator, inst: Instruction) -> None:
    if truth(tx, tx.pop()):
        tx.jump(inst.target)  # type: ignore[arg-type]


@opcode_handler("POP_JUMP_IF_FALSE")
def pop_jump_if_false(tx: Translator, inst: Instruction) -> None:
    if not truth(tx, tx.pop()):
        tx.jump(inst.target)  # type: ignore[arg-type]


def _is_none(tx: Translator, value: Value) -> bool:
    if isinstance(value, TensorValue):  # torch wraps an input where it is inspected
        tx.ctx.note_realized(value.node)
    return isinstance(value, PythonValue) and value.obj is None


@opcode_handler("POP_JUMP_IF_NONE")
def pop_jump_if_none(tx: Translator, inst: Instruction) -> None:
    if _is_none(tx, tx.pop()):
        tx.jump(inst.target)  # type: ignore[arg-type]


@opcode_handler("POP_JUMP_IF_NOT_NONE")
def pop_jump_if_not_none(tx: Translator, inst: Instruction) -> None:
    if not _is_none(tx, tx.pop()):
        tx.jump(inst.target)  # type: ignore[arg-type]


@opcode_handler("JUMP_IF_TRUE_OR_POP")
def jump_if_true_or_pop(tx: Translator, inst: Instruction) -> None:
    if truth(tx, tx.stack[-1]):
        tx.jump(inst.target)  # type: ignore[arg-type]
    else:
        tx.pop()


@opcode_handler("JUMP_IF_FALSE_OR_POP")
def jump_if_false_or_pop(tx: Translator, inst: Instruction) -> None:
    if not truth(tx, tx.stack[-1]):
        tx.jump(inst.target)  # type: ignore[arg-type]
    else:
        tx.pop()


# ----- loops -------------------------------------------------------------
@opcode_handler("GET_ITER")
def get_iter_(tx: Translator, inst: Instruction) -> None:
    tx.push(get_iter(tx, tx.pop()))


@opcode_handler("FOR_ITER")
def for_iter(tx: Translator, inst: Instruction) -> None:
    iterator = tx.stack[-1]
    if not isinstance(iterator, IteratorValue):
        # a loop's iterator a part was handed that capture does not read (a zip, an
        # enumerate made again by the part before): the part runs eagerly, as
        # torch.compile skips a resume function whose loop reads one
        error = Unsupported(f"a loop over a {python_type_of(iterator).__name__} handed on")
        error.loop_not_resumed = True
        raise error
    lazy = iterator.produce is not None
    try:
        item = next_item(tx, iterator)
    except ExceptionRaised:
        raise
    except Unsupported as error:
        if tx.parent is not None or not lazy:
            raise
        # NOTE: a break inside the body of a generator (or a map's function) the frame's
        # own loop reads: the loop cannot resume at its FOR_ITER with the generator paused
        # inside that body, so the frame runs eagerly.
        raise NeedsEagerFrame(
            f"a break inside an iterator the frame's loop reads: {error.reason}"
        ) from error
    if item is not None:
        tx.push(item)
    else:
        tx.pop()
        tx.jump(inst.target)  # type: ignore[arg-type]


@opcode_handler("SEND")
def send(tx: Translator, inst: Instruction) -> None:
    """`yield from` over an iterator capture knows; a generator's own paused yield gets the sent value."""
    receiver = tx.stack[-2]
    if not isinstance(receiver, IteratorValue):
        raise Unsupported("yield from / send on an object capture does not know")
    sent = tx.stack[-1]
    steps = generator_steps(receiver)
    if steps is not None and steps.started and not steps.child.done:
        steps.send(sent)  # what the inner generator's paused yield evaluates to
    elif not (isinstance(sent, PythonValue) and sent.obj is None):
        raise Unsupported("yield from an iterator sent a value other than None")
    item = next_item(tx, receiver)
    if item is not None:
        tx.stack[-1] = item
        return
    tx.pop()
    # `yield from` evaluates to the return value of a generator it ran to its end
    # (`steps`, read before next_item dropped the finished generator's stepper)
    returned = steps.child.result if steps is not None and steps.child.done else None
    result = returned if returned is not None else PythonValue(None)
    if SEND_KEEPS_RECEIVER:
        tx.push(result)
    else:
        tx.stack[-1] = result
    tx.jump(inst.target)  # type: ignore[arg-type]


@opcode_handler("END_SEND")
def end_send(tx: Translator, inst: Instruction) -> None:
    result = tx.pop()
    tx.pop()
    tx.push(result)


# ----- returns and generators --------------------------------------------
@opcode_handler("RETURN_VALUE")
def return_value(tx: Translator, inst: Instruction) -> None:
    tx.finish(tx.pop())


@opcode_handler("RETURN_CONST")
def return_const(tx: Translator, inst: Instruction) -> None:
    tx.finish(PythonValue(inst.argval))


@opcode_handler("RETURN_GENERATOR")
def return_generator(tx: Translator, inst: Instruction) -> None:
    if tx.yielded is None:
        raise Unsupported("a generator frame captured on its own")
    tx.push(PythonValue(None))


@opcode_handler("YIELD_VALUE")
def yield_value(tx: Translator, inst: Instruction) -> None:
    if tx.yielded is None:
        raise Unsupported("yield outside a generator consumed inside the frame")
    tx.yielded.append(tx.pop())
    tx.push(PythonValue(None))
    if tx.stop_at_yield:
        tx.suspended = True


# ----- the rest ----------------------------------------------------------
@opcode_handler("UNSUPPORTED")
def unsupported(tx: Translator, inst: Instruction) -> None:
    raise Unsupported(f"bytecode {inst.opname} is not supported in captured code")
