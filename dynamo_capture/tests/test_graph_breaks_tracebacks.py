"""Code generated for a split frame carries the user's file and lines.

A part of a split frame is the frame's own code with a prologue and an epilogue
appended; its location table covers the appended code with the lines of the
statements it stands for, so an exception raised in any part shows the user's
file and line, `traceback` can format it, and `inspect` / `linecache` find the
source.
"""

from __future__ import annotations

import dis
import inspect
import linecache
import sys
import traceback

import pytest
import torch

import dynamo_capture
from dynamo_capture.testing import eager_backend


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(index for index, line in enumerate(lines) if text in line)


def raise_after_break(x):
    y = x + 1
    print("a")
    z = y * 2
    raise ValueError("after the break")  # raise here
    return z


def raise_in_resume_after_two_breaks(x, flag):
    y = x + 1
    print("a")
    if flag:
        y = y * 3
    print("b")
    w = y.sum()
    if w is not None:
        raise KeyError("in the last part")  # raise here
    return y


def bad_shape_after_break(x):
    y = x + 1
    print("a")
    return y.view(5, 7)  # raise here


def _helper_raises(t):
    print("helper")
    return t.view(7, 5)  # raise here


def raise_in_callee_after_break(x):
    y = x.sin()
    return _helper_raises(y)


def raise_without_break(x):
    y = x + 1
    return y.view(5, 7)  # raise here


def read_deleted_after_break(x):
    y = x + 1
    print("a")
    del y
    return y  # noqa: F821  # raise here


def raise_in_loop_body(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.sum() > 100:
            acc = acc + t
        acc = acc + t.view(9, 9)  # raise here
    return acc


CASES = [
    (raise_after_break, (torch.ones(3),), ValueError),
    (raise_in_resume_after_two_breaks, (torch.ones(3), True), KeyError),
    (bad_shape_after_break, (torch.ones(3),), RuntimeError),
    (raise_in_callee_after_break, (torch.ones(3),), RuntimeError),
    (raise_without_break, (torch.ones(3),), RuntimeError),
    (read_deleted_after_break, (torch.ones(3),), UnboundLocalError),
    (raise_in_loop_body, ([torch.ones(3), torch.ones(3)],), RuntimeError),
]


@pytest.mark.parametrize("fn, args, kind", CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_exception_traceback_has_user_file_and_line(fn, args, kind, capsys):
    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    target = fn if fn is not raise_in_callee_after_break else _helper_raises
    expected_line = _line_of(target, "# raise here")
    for _ in range(2):  # on the compiling call and on the cached one
        with pytest.raises(kind) as info:
            compiled(*args)
        last = info.tb
        while last.tb_next is not None:
            last = last.tb_next
        frames = [
            (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
            for tb in _walk(info.tb)
            if tb.tb_frame.f_code.co_filename == __file__
        ]
        assert all(line is not None for _, line in frames), frames
        assert (__file__, expected_line) in frames, frames
        text = "".join(traceback.format_exception(info.value))
        assert f'File "{__file__}", line {expected_line}' in text
        assert "# raise here" in text
        assert linecache.getline(__file__, expected_line).strip().endswith("# raise here")


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_format_exc_inside_handler_works(capsys):
    compiled = dynamo_capture.optimize(read_deleted_after_break, backend=eager_backend)
    try:
        compiled(torch.ones(2))
    except UnboundLocalError:
        text = traceback.format_exc()
        frame = sys.exc_info()[2]
    else:
        pytest.fail("no UnboundLocalError")
    assert "read_deleted_after_break" in text
    while frame.tb_next is not None:
        frame = frame.tb_next
    info = inspect.getframeinfo(frame)
    assert info.filename == __file__
    assert info.code_context and "# raise here" in info.code_context[0]


def test_every_part_has_a_position_for_each_instruction(capsys):
    compiled = dynamo_capture.optimize(raise_in_resume_after_two_breaks, backend=eager_backend)
    with pytest.raises(KeyError):
        compiled(torch.ones(3), False)
    parts = [part.target for part in compiled.parts]
    assert parts
    first, last = inspect.getsourcelines(raise_in_resume_after_two_breaks)[1], None
    last = first + len(inspect.getsourcelines(raise_in_resume_after_two_breaks)[0])
    for part in parts:
        code = part.__code__
        positions = list(code.co_positions())
        assert len(positions) == len(code.co_code) // 2
        lines = [line for line, *_ in positions if line is not None]
        assert lines and all(first <= line < last for line in lines)
        for inst in dis.get_instructions(code):  # the tables decode
            assert inst.positions is not None
        list(dis.Bytecode(code).exception_entries)
        assert inspect.getsourcelines(part)[1] == first
