"""Breaks inside `with torch.no_grad()` / `enable_grad()` / `set_grad_enabled(b)` /
`torch.autocast(...)` blocks: the graph before the break is traced under the mode, the
eager statement runs under it, the resume function re-enters the context (its graph is
traced under the mode and the block's own exit restores it). Results, requires_grad,
printed text and the grad/autocast state after the call match eager, also when the
block is left by a `return` or an exception. 34 programs (see breakcheck.Program)."""

from __future__ import annotations

import pytest
import torch
from breakcheck import LOG, Program, check_break_program

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def no_grad_middle(x):
    y = x * 2
    with torch.no_grad():
        z = y * 2
        print("grad", torch.is_grad_enabled())
        w = z + 1
    return w + y


def no_grad_first_statement(x):
    with torch.no_grad():
        print("first")
        z = x * 3
    return z + x


def no_grad_last_statement(x):
    with torch.no_grad():
        z = x * 3
        print("last", torch.is_grad_enabled())
    return z.sin() + x


def enable_grad_inside(x):
    y = x + 1
    with torch.enable_grad():
        z = y * x
        print("enabled", torch.is_grad_enabled())
        w = z.exp()
    return w, y


def set_grad_false(x):
    y = x.cos()
    with torch.set_grad_enabled(False):
        z = y * 2
        print("off")
        w = z - 1
    return w * y


def set_grad_flag(x, flag):
    with torch.set_grad_enabled(flag):
        z = x * 2
        print("flag", flag)
        w = z.tanh()
    return w + 1


def nested_no_grad_enable_grad(x):
    a = x * 2
    with torch.no_grad():
        b = a + 1
        with torch.enable_grad():
            c = b * x
            print("inner", torch.is_grad_enabled())
            d = c.sin()
        e = d + b
        print("outer", torch.is_grad_enabled())
        f = e * 2
    return f + a


def two_breaks_in_no_grad(x):
    with torch.no_grad():
        a = x + 1
        print("one")
        b = a * 2
        LOG.append(float(b.sum()))
        c = b - 3
    return c * x


def return_inside_after_break(x):
    y = x * 2
    with torch.no_grad():
        z = y + 1
        print("returning")
        return z * y


def return_grad_state_inside(x):
    with torch.no_grad():
        z = x + 1
        print("state")
        return z, torch.is_grad_enabled()


def item_in_no_grad(x):
    with torch.no_grad():
        s = x.sum().item()
        y = x * s
    return y + x


def data_if_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        if y.sum() > 0:
            y = y + 1
        else:
            y = y - 1
        z = y.exp()
    return z * x


def raise_in_eager_part(x):
    y = x + 1
    with torch.no_grad():
        z = y * 2
        LOG.append(torch.is_grad_enabled())
        raise ValueError(f"boom {z.shape[0]}")
    return z


def raise_after_break(x):
    with torch.no_grad():
        z = x * 2
        print("before raising")
        if z.shape[0] == 3:
            raise RuntimeError("after the break")
        w = z + 1
    return w


def caught_around_with(x):
    try:
        with torch.no_grad():
            z = x * 2
            print("in with in try")
            raise KeyError("k")
    except KeyError:
        z = x - 1
    return z, torch.is_grad_enabled()


def loop_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        for i in range(2):
            print("step", i)
            y = y + i
        z = y.sum()
    return z + x


def autocast_bf16(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        print("autocast", torch.is_autocast_enabled("cpu"))
        b = a @ w
    return b, a.dtype


def autocast_then_float(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = torch.mm(x, w)
        print(a.dtype)
    c = a.float() @ w
    return c


def autocast_nested_disabled(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        with torch.autocast("cpu", enabled=False):
            b = a.float() @ w
            print("disabled", torch.is_autocast_enabled("cpu"))
            c = b @ w
        d = c @ w
    return a, b, c, d


def autocast_in_no_grad(x, w):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        print("both")
        b = a @ w
    return b


def autocast_return_inside(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        print("return in autocast")
        return a @ w


def autocast_amp_spelling(x, w):
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        a = x @ w
        s = a.float().sum().item()
        b = a * s
    return b


def enable_grad_in_no_grad_caller(x):
    with torch.enable_grad():
        y = x * x
        print("enable under no_grad")
        z = y.sum()
    return z


def no_grad_then_backward_usable(x):
    with torch.no_grad():
        scale = x.abs().max()
        print("scale")
    return x * scale


def break_before_with(x):
    print("before")
    with torch.no_grad():
        y = x * 2
    return y + x


def break_after_with(x):
    with torch.no_grad():
        y = x * 2
    print("after")
    return y + x


class Tracker:
    """A context manager capture cannot rebuild: a break inside runs the block eagerly."""

    def __enter__(self):
        LOG.append("enter")
        return self

    def __exit__(self, *exc):
        LOG.append("exit")
        return False


def user_context_around_break(x):
    y = x * 2
    with Tracker():
        print("tracked")
        z = y + 1
    return z * 3


def no_grad_in_user_context(x):
    with Tracker():
        with torch.no_grad():
            a = x + 1
            print("deep")
            b = a * 2
    return b


def callee_breaks_in_no_grad_helper(x):
    z = x * 2
    print("callee")
    return z + 1


def call_in_no_grad(x):
    with torch.no_grad():
        a = x.sin()
        b = callee_breaks_in_no_grad_helper(a)
        c = b.cos()
    return c + x


def module_in_no_grad(x):
    with torch.no_grad():
        y = _LINEAR(x)
        print("linear")
        z = _LINEAR(y)
    return z


_LINEAR = torch.nn.Linear(4, 4)


def inference_statistics(x):
    with torch.no_grad():
        mean = x.mean()
        LOG.append(round(float(mean), 4))
        centred = x - mean
    return centred * x


X = torch.randn(3, requires_grad=True)
M = torch.randn(4, 4)
W = torch.randn(4, 4)

PROGRAMS = [
    Program(no_grad_middle, (X,), 2, 1),
    Program(no_grad_first_statement, (X,), 1, 1),
    Program(no_grad_last_statement, (X,), 2, 1),
    Program(enable_grad_inside, (X,), 2, 1, grad=False),
    Program(enable_grad_inside, (X,), 2, 1),
    Program(set_grad_false, (X,), 2, 1),
    Program(set_grad_flag, (X, False), 2, 1),
    Program(set_grad_flag, (X, True), 2, 1, grad=False),
    Program(nested_no_grad_enable_grad, (X,), 3, 2),
    Program(two_breaks_in_no_grad, (X,), 3, 2),
    Program(return_inside_after_break, (X,), 2, 1),
    Program(return_grad_state_inside, (X,), 1, 1),
    Program(item_in_no_grad, (X,), 2, 1),
    Program(data_if_in_no_grad, (X,), 2, 1),
    Program(raise_in_eager_part, (X,), 0, 1),  # escapes the frame: eager, as torch.compile
    Program(raise_after_break, (X,), 1, 2),
    Program(caught_around_with, (X,), None, 1),
    Program(loop_in_no_grad, (X,), 0, 1),  # runs eagerly: a break in a loop, as torch
    Program(autocast_bf16, (M, W), 2, 1),
    Program(autocast_then_float, (M, W), 2, 1),
    Program(autocast_nested_disabled, (M, W), 2, 1),
    Program(autocast_in_no_grad, (M, W), 2, 1),
    Program(autocast_return_inside, (M, W), 2, 1),
    Program(autocast_amp_spelling, (M, W), 2, 1),
    Program(enable_grad_in_no_grad_caller, (X,), 2, 1, grad=False),
    Program(no_grad_then_backward_usable, (X,), 2, 1),
    Program(break_before_with, (X,), 1, 1),
    Program(break_after_with, (X,), 2, 1),
    Program(user_context_around_break, (X,), 0, 1),  # eager, as torch.compile
    Program(no_grad_in_user_context, (X,), None, 1),
    Program(call_in_no_grad, (X,), 4, 2),
    Program(module_in_no_grad, (torch.randn(2, 4),), 2, 1),
    Program(inference_statistics, (X,), 2, 1),
    Program(inference_statistics, (X.detach(),), 2, 1, grad=False),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_break_inside_a_with_block(program):
    check_break_program(program)


def test_graph_after_the_break_is_traced_under_the_mode():
    compiled = check_break_program(Program(no_grad_middle, (X,), 2, 1))
    resume = [a.graph_code for a in compiled.artifacts if a.graph_code][-1]
    assert "_set_grad_enabled(False)" in resume and "_set_grad_enabled(True)" in resume


def test_autocast_resume_graph_enters_autocast():
    compiled = check_break_program(Program(autocast_bf16, (M, W), 2, 1))
    resume = [a.graph_code for a in compiled.artifacts if a.graph_code][-1]
    assert "_enter_autocast" in resume and "_exit_autocast" in resume


def test_gradients_flow_through_parts_outside_the_block():
    compiled = dynamo_capture.optimize(no_grad_then_backward_usable, backend=CountingBackend())
    x1 = X.detach().clone().requires_grad_()
    x2 = X.detach().clone().requires_grad_()
    no_grad_then_backward_usable(x1).sum().backward()
    compiled(x2).sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad)
