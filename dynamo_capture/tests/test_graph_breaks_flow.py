"""Breaks inside branches, loops and try blocks.

A break inside an `if` body cuts at the statement inside the body (the prefix holds
the condition and the body's statements before the break); the eager part ends at
the first statement every path reaches. A `for` loop holding a break runs its
header eagerly and its body as a compiled part per item (split again at the break;
`break`, `continue` and `return` behave as in eager); a `while` loop holding a break
runs eagerly as a whole (logged) while the code around it compiles; a callee that
breaks inside a loop runs as a compiled frame on every iteration. A break inside a try body compiles
up to the break and runs the rest of the frame eagerly, handlers included (as torch
does). 30 programs (see breakcheck.Program)."""

from __future__ import annotations

import pytest
import torch
from breakcheck import LOG, Program, check_break_program


def in_then_branch(x, flag):
    y = x * 2
    if flag:
        z = y + 1
        print("then")
        y = z * 3
    return y.sin()


def in_else_branch(x, flag):
    y = x * 2
    if flag:
        y = y + 1
    else:
        z = y - 1
        print("else")
        y = z * 3
    return y.cos()


def in_nested_branch(x, a, b):
    y = x + 1
    if a:
        y = y * 2
        if b:
            print("nested")
            y = y - 3
        y = y.exp()
    return y


def return_in_branch_after_break(x, flag):
    y = x.relu()
    if flag:
        print("early")
        return y + 1
    return y - 1


def data_if_then_break(x):
    y = x * 2
    if y.sum() > 0:
        LOG.append(float(y.max()))
        y = y + 1
    return y.tanh()


def elif_chain(x, mode):
    y = x.abs()
    if mode == "a":
        y = y + 1
    elif mode == "b":
        print("b")
        y = y * 2
    else:
        y = y - 1
    return y.sqrt()


def for_range_break(x):
    y = x * 2
    for i in range(3):
        print("iteration", i)
        y = y + i
    return y.sin()


def for_list_break(x, scales):
    y = x + 1
    for scale in scales:
        print("scale", scale)
        y = y * scale
    return y - 1


def while_break(x):
    y = x * 3
    n = 0
    while n < 3:
        print("while", n)
        n += 1
    return y + n


def loop_with_continue(x):
    y = x.clone()
    for i in range(4):
        if i == 2:
            continue
        print("kept", i)
        y = y + i
    return y


def loop_calls_breaking_callee(x):
    y = x * 0.5
    for _ in range(3):
        y = helper(y)
    return y.cos()


def helper(t):
    u = t + 1
    print("helper")
    return u * 0.9


def break_after_loop(x):
    y = x
    for i in range(3):
        y = y * 2 + i
    print("after loop")
    return y.sin()


def in_try_body(x):
    y = x * 2
    try:
        z = y + 1
        print("in try")
        w = z * 3
    except ValueError:
        w = y
    return w.exp()


def try_finally(x):
    y = x + 1
    try:
        print("body")
        y = y * 2
    finally:
        LOG.append("finally")
    return y


def raise_caught_in_try(x):
    y = x * 2
    try:
        print("raising")
        raise KeyError("k")
    except KeyError:
        y = y - 1
    return y


def break_before_try(x):
    y = x.sin()
    print("before try")
    try:
        y = y + 1
    except ValueError:
        y = y - 1
    return y


def break_after_try(x):
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    print("after try")
    return y * 2


def loop_try_continue_then_break(x):
    # the handler's `continue` jumps back to the loop: a cycle even where handlers sit last
    for step in range(3):
        try:
            x = x + 1
            if step == 1:
                raise ValueError(step)
        except ValueError:
            continue
        print("step", step)
        x = x * 2
    return x


def break_after_try_in_loop(x):
    for step in range(2):
        try:
            x = x + step
        except ValueError:
            x = x - 1
        print("after try", step)
        x = x * 2
    return x


def conditional_expression_break(x, flag):
    y = x * 2
    z = y.sum().item() if flag else 1.0
    return y * z


def short_circuit_break(x, flag):
    y = x + 1
    if flag and y.sum() > 0:
        y = y * 2
    return y


def raise_on_data(x):
    y = x.abs() + 1
    if not bool((y > 0).all()):
        raise ValueError("not positive")
    return y.log()


def branch_on_list_len(x, items):
    y = x * 2
    if len(items) > 1:
        items.append(y.sum().item())
        y = y + len(items)
    return y


def loop_with_break_statement(x):
    y = x * 2
    for i in range(5):
        print("before break", i)
        if i == 2:
            break
        y = y + i
    return y * i


def loop_returns_inside(x):
    y = x + 1
    for i in range(4):
        print("ret", i)
        if i == 1:
            return y * 10
        y = y.cos()
    return y


def for_else(x, n):
    y = x.sin()
    for i in range(n):
        print("else loop", i)
        y = y + 1
    else:
        y = y * 3
    return y


def enumerate_unpack(x, tensors):
    y = x.clone()
    for i, t in enumerate(tensors):
        print("pair", i)
        y = y + t * i
    return y, i


def nested_loops(x):
    y = x * 1
    for i in range(2):
        for j in range(2):
            print("cell", i, j)
            y = y + (i * 2 + j)
        y = y * 2
    return y


def unpack_error_in_loop(x, pairs):
    y = x * 2
    for a, b in pairs:
        print("pair", a)
        y = y + a * b
    return y


def loop_variable_after_loop(x):
    y = x - 1
    for k in range(3):
        y = y * 2 + k
        LOG.append(float(y.sum()))
    return y + k


class Layered(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        h = x * 2
        for index, layer in enumerate(self.layers):
            h = layer(h).relu()
            print("layer", index, h.shape)
        return h.sum(-1)


torch.manual_seed(0)
LAYERED = Layered()
X = torch.randn(4)

PROGRAMS = [
    Program(in_then_branch, (X, True), 2, 1),
    Program(in_else_branch, (X, False), 2, 1),
    Program(in_nested_branch, (X, True, True), 2, 1),
    Program(return_in_branch_after_break, (X, True), 2, 1),
    Program(data_if_then_break, (torch.ones(4),), None, 2),  # at the jump, at float()
    Program(elif_chain, (X, "b"), 2, 1),
    Program(for_range_break, (X,), None, 2),
    Program(for_list_break, (X, [2.0, 3.0]), None, 2),
    Program(while_break, (X,), 2, 1),
    Program(loop_with_break_statement, (X,), None, 2),
    Program(loop_returns_inside, (X,), None, 2),
    Program(for_else, (X, 2), None, 2),
    Program(for_else, (X, 3), None, 2),
    Program(enumerate_unpack, (X, [torch.randn(4), torch.randn(4)]), None, 2),
    Program(nested_loops, (X,), None, 2),
    Program(unpack_error_in_loop, (X, [(1, 2), (3,)]), None, 2),
    Program(loop_variable_after_loop, (X,), None, 2),
    Program(LAYERED, (torch.randn(2, 4),), None, 2),
    # the loop body part recompiles once for a new loop index, then takes it as a
    # symbolic int (automatic dynamic): two breaks logged, not one per index
    Program(loop_with_continue, (X,), None, 2),
    Program(loop_calls_breaking_callee, (X,), None, 3),
    Program(break_after_loop, (X,), 2, 1),
    Program(in_try_body, (X,), 0, 1),  # in a try block: eager, as torch.compile
    Program(try_finally, (X,), 0, 1),  # in a try block: eager, as torch.compile
    Program(raise_caught_in_try, (X,), 0, 1),  # in a try block: eager, as torch.compile
    Program(break_before_try, (X,), 2, 1),
    Program(break_after_try, (X,), 2, 1),
    Program(loop_try_continue_then_break, (X,), None, 2),  # the raise is caught in a graph
    Program(break_after_try_in_loop, (X,), None, 2),
    Program(conditional_expression_break, (X, True), None, 1),
    Program(short_circuit_break, (X, True), None, 1),
    Program(raise_on_data, (X,), None, 1),
    Program(branch_on_list_len, (X, [1, 2]), None, 1),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_break_in_control_flow(program):
    check_break_program(program, loop_breaks="split")


def test_a_callee_breaking_in_a_loop_is_compiled_once():
    compiled = check_break_program(Program(loop_calls_breaking_callee, (X,), None, 2))
    # the helper's own frame (its split's first part is named `helper` too)
    helpers = [part for part in compiled.parts if part.frame.function is helper]
    assert len(helpers) == 1 and len(helpers[0].entries) == 1
