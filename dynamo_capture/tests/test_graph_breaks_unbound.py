"""Locals that are unbound where a frame is split stay unbound in the next part.

A part hands its locals to the next as arguments; one that is unbound where the
part stops (deleted, assigned on one branch only, a loop variable of an empty
loop) is passed as UNBOUND and deleted again by the next part's prologue, so a
later read raises UnboundLocalError as eager does, and `del` works after a break.
"""

from __future__ import annotations

import dis
import inspect

import pytest
import torch
from breakcheck import Program, check_break_program

import dynamo_capture
from dynamo_capture.resume import UNBOUND, plan_split, segment_function
from dynamo_capture.testing import eager_backend


def del_between_breaks(x):
    y = x + 1
    print("a")
    del y
    z = x * 2
    print("b")
    return z


def del_then_read_after_break(x):
    y = x + 1
    print("a")
    del y
    print("b")
    return y  # noqa: F821 - read after del, as the test means


def assigned_on_one_branch(x, flag):
    if flag:
        y = x + 1
    print("a")
    return y * 2


def deleted_on_one_branch(x, flag):
    y = x + 1
    if flag:
        del y
    print("a")
    w = x.sin()
    print("b")
    return y + w


def unbound_then_assigned(x, flag):
    if flag:
        y = x
    print("a")
    y = x * 3
    print("b")
    return y


def loop_variable_of_empty_loop(x, items):
    for t in items:
        x = x + t
    print("a")
    return x + t


def del_inside_if_after_break(x, flag):
    y = x.cos()
    print("a")
    if flag:
        del y
        y = x * 5
    print("b")
    return y


def read_unbound_before_break(x, flag):
    if flag:
        y = x
    z = y + 1
    print("a")
    return z


def except_variable_cleared(x):
    try:
        raise ValueError("no")
    except ValueError as error:
        message = str(error)
    print("a")
    return x + len(message)


PROGRAMS = [
    # a read of the unbound local in a compiled part is a break of its own (eager raises)
    Program(del_between_breaks, (torch.randn(3),), None, 2),
    Program(del_then_read_after_break, (torch.randn(3),), None, 3),
    Program(assigned_on_one_branch, (torch.randn(3), True), None, 1),
    Program(assigned_on_one_branch, (torch.randn(3), False), None, 2),
    Program(deleted_on_one_branch, (torch.randn(3), True), None, 3),
    Program(deleted_on_one_branch, (torch.randn(3), False), None, 2),
    Program(unbound_then_assigned, (torch.randn(3), False), None, 2),
    Program(loop_variable_of_empty_loop, (torch.randn(3), []), None, 2),
    Program(loop_variable_of_empty_loop, (torch.randn(3), [torch.ones(3)]), None, 1),
    Program(del_inside_if_after_break, (torch.randn(3), True), None, 2),
    Program(del_inside_if_after_break, (torch.randn(3), False), None, 2),
    Program(read_unbound_before_break, (torch.randn(3), False), None, 1),
    Program(read_unbound_before_break, (torch.randn(3), True), None, 1),
]


@pytest.mark.parametrize(
    "program", PROGRAMS, ids=lambda p: f"{p.name}-{'-'.join(type(a).__name__ for a in p.args)}"
)
def test_unbound_local_stays_unbound_after_break(program, capsys, request):
    flag = program.args[-1] if isinstance(program.args[-1], bool) else None
    if (program.name, flag) in _RESUME_SKIPPED:
        request.applymarker(pytest.mark.xfail(strict=True, reason=_RESUME_SKIPPED_REASON))
    check_break_program(program)


# A resume part whose live locals hold no tensor runs eagerly (as torch.compile skips a
# frame without tensors); here torch.compile still compiles the part after the first
# print (its resume function is handed the deleted or unbound local), so it counts one
# break more: values equal eager's, the count differs
_RESUME_SKIPPED = {("del_then_read_after_break", None), ("assigned_on_one_branch", False)}
_RESUME_SKIPPED_REASON = "a resume part holding no live tensor runs eagerly: one break fewer"


def test_resume_after_del_runs():
    compiled = dynamo_capture.optimize(del_between_breaks, backend=eager_backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), del_between_breaks(x))
    torch.testing.assert_close(compiled(x), del_between_breaks(x))


def test_local_unbound_on_one_call_bound_on_the_next():
    compiled = dynamo_capture.optimize(assigned_on_one_branch, backend=eager_backend)
    x = torch.randn(3)
    for flag in (False, True, False, True):
        if flag:
            torch.testing.assert_close(compiled(x, flag), assigned_on_one_branch(x, flag))
        else:
            with pytest.raises(UnboundLocalError, match="'y'"):
                compiled(x, flag)


def test_part_epilogue_passes_unbound_locals_on():
    def fn(x, flag):
        if flag:
            y = x + 1  # noqa: F841 - unbound on the path taken
        z = x * 2
        return z

    store_z = next(i.offset for i in dis.get_instructions(fn) if i.argval == "z")
    plan = plan_split(fn.__code__, store_z)
    assert not isinstance(plan, str)
    first = segment_function(fn, plan.body_start, plan.stop, plan.body_start, "a")
    rest = segment_function(fn, plan.stop, None, plan.body_start, "b")
    x = torch.randn(2)
    ended = first(x, False)
    assert ended[3] is UNBOUND  # y, never assigned
    torch.testing.assert_close(rest(*ended[1:]), fn(x, False))


def test_cell_frame_first_part_reading_maybe_unbound_runs_eagerly(capsys):
    def fn(x, flag):
        if flag:
            y = x
        z = y + 1
        print("a")
        return (lambda: z + x)()

    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, True), fn(x, True))
    with pytest.raises(UnboundLocalError):
        compiled(x, False)


# ----- the parts as plain functions (no capture): the generated bytecode alone --------
def _split_and_run(fn, marker, *args):
    """Cut `fn` at the statement holding `marker`, run its parts eagerly one after another."""
    from dynamo_capture.resume import (
        ITERATOR,
        LoopStage,
        first_part_arity,
        first_part_values,
        is_end,
    )

    code = fn.__code__
    lines, first = inspect.getsourcelines(fn)
    line = first + next(index for index, text in enumerate(lines) if marker in text)
    offset = next(
        inst.offset
        for inst in dis.get_instructions(code)
        if inst.positions.lineno == line and inst.opname != "CACHE"
    )
    plan = plan_split(code, offset)
    assert not isinstance(plan, str), plan
    body, parts = plan.body_start, []
    if plan.start > body:
        parts.append(segment_function(fn, body, plan.start, body, "pre"))
    if plan.loop is not None:
        loop = plan.loop
        header = segment_function(fn, plan.start, loop.for_iter, body, "loop", returns_top=True)
        loop_body = segment_function(
            fn, loop.body, loop.for_iter, body, "body", enter=(ITERATOR,), leave=(ITERATOR,)
        )
        parts.append(LoopStage(header, loop_body, loop, code.co_varnames))
    else:
        parts.append(segment_function(fn, plan.start, plan.stop, body, "mid"))
    if plan.stop is not None:
        parts.append(segment_function(fn, plan.stop, None, body, "resume"))
    bound = inspect.signature(fn).bind(*args)
    values = first_part_values(code, dict(bound.arguments))[: first_part_arity(code)]
    for part in parts:
        result = part(*values)
        if not is_end(result):
            return result
        values = list(result[1:])
    return result


def _plain_del(x):
    y = x + 1
    mark = 0  # cut
    del y
    z = x * 2
    return z, mark


def _plain_branch(x, flag):
    if flag:
        y = x + 1
    mark = 0  # cut
    return y * 2 + mark


def _plain_read_deleted(x):
    y = x + 1
    mark = 0  # cut
    del y
    return y + mark  # noqa: F821 - read after del, as the test means


def _plain_loop(xs):
    acc = 0
    for t in xs:
        if t > 0.5:  # cut
            acc = acc + t
        else:
            acc = acc - t * 0.5
    return acc, t


def _plain_loop_else(xs):
    acc = 0
    for t in xs:
        if t > 2:  # cut
            break
        acc += t
    else:
        acc = -1
    return acc


def _plain_comprehension(x):
    i = 5
    made = [i * 2 for i in range(3)]  # cut
    return i, made, x


@pytest.mark.parametrize(
    "fn, args",
    [
        (_plain_del, (1,)),
        (_plain_branch, (1, True)),
        (_plain_branch, (1, False)),
        (_plain_read_deleted, (1,)),
        (_plain_loop, ([0.1, 0.9, 0.7],)),
        (_plain_loop, ([],)),
        (_plain_loop_else, ([1, 2, 3],)),
        (_plain_loop_else, ([1],)),
        (_plain_comprehension, (1,)),
    ],
    ids=lambda value: getattr(value, "__name__", repr(value)),
)
def test_parts_keep_unbound_locals_unbound(fn, args):
    try:
        expected = ("value", fn(*args))
    except UnboundLocalError as error:
        expected = ("error", str(error))
    try:
        got = ("value", _split_and_run(fn, "# cut", *args))
    except UnboundLocalError as error:
        got = ("error", str(error))
        tb = error.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        assert tb.tb_lineno is not None and tb.tb_frame.f_code.co_filename == __file__
    assert got == expected
