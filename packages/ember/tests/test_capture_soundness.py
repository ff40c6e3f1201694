"""Graph breaks that used to give silent wrong results, through ember.compile on every backend.

Each program is compared with eager (values, or the exception and its line):
a data-dependent branch inside a loop, `type(v)` of a computed tensor, `del`
between two breaks, a local left unbound by a branch, and the user's line in the
traceback of an exception raised after a break.
"""

from __future__ import annotations

import inspect
import traceback

import pytest
import torch

import ember

BACKENDS = ["eager", "aot_eager", "inductor"]


def _xs(seed=0):
    torch.manual_seed(seed)
    return [torch.randn(3) for _ in range(3)]


def branch_in_loop(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.max() > 0.5:
            acc = acc + t
        else:
            acc = acc - t * 0.5
    return acc


def _loop_helper(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.max() > 0.5:
            acc = acc + t
        else:
            acc = acc - t * 0.5
    return acc


def branch_in_loop_of_callee(xs):
    return _loop_helper(xs) + 1


def branch_on_type(x):
    y = x * 2
    if type(y) is torch.Tensor and type(y) == torch.Tensor:  # noqa: E721
        return y + 1
    return y - 1


def del_between_breaks(x):
    y = x + 1
    print("a")
    del y
    z = x * 2
    print("b")
    return z


def assigned_on_one_branch(x, flag):
    if flag:
        y = x + 1
    print("a")
    return y * 2


def raise_after_break(x):
    y = x.sin()
    print("a")
    if y.shape[0] == 3:
        raise ValueError("after the break")  # raise here
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_branch_in_loop_matches_eager(backend):
    for fn in (branch_in_loop, branch_in_loop_of_callee):
        compiled = ember.compile(fn, backend=backend)
        for seed in (0, 1, 0):
            torch.testing.assert_close(compiled(_xs(seed)), fn(_xs(seed)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_type_of_computed_tensor_is_tensor(backend):
    compiled = ember.compile(branch_on_type, backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), branch_on_type(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_del_between_breaks_resumes(backend, capsys):
    compiled = ember.compile(del_between_breaks, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), del_between_breaks(x))
    torch.testing.assert_close(compiled(x), del_between_breaks(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_unbound_local_raises_as_in_eager(backend, capsys):
    compiled = ember.compile(assigned_on_one_branch, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, True), assigned_on_one_branch(x, True))
    with pytest.raises(UnboundLocalError, match="'y'"):
        compiled(x, False)
    torch.testing.assert_close(compiled(x, True), assigned_on_one_branch(x, True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_exception_after_break_shows_user_line(backend, capsys):
    compiled = ember.compile(raise_after_break, backend=backend)
    lines, first = inspect.getsourcelines(raise_after_break)
    line = first + next(i for i, text in enumerate(lines) if "# raise here" in text)
    with pytest.raises(ValueError) as info:
        compiled(torch.randn(3))
    text = "".join(traceback.format_exception(info.value))
    # The part after the break is named as torch.compile names it, after the function.
    where = f'File "{__file__}", line {line}, in '
    assert where + "raise_after_break" in text or (
        where + "torch_dynamo_resume_in_raise_after_break_at_" in text
    )
    tb = info.tb
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert (tb.tb_frame.f_code.co_filename, tb.tb_lineno) == (__file__, line)
