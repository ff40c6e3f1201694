"""Data-dependent jumps (`if t.sum() > 0:`) and tensors made Python numbers (`int(t)`,
`float(t)`, `bool(t)`), counted like torch.compile (torchcheck).

capture breaks at the jump as torch.compile does: the graph before it holds the test,
the truth is taken eagerly, and the code of the taken branch onwards is a compiled
part of its own, made when that branch is first taken. Each program runs on fresh
arguments four times (both branches taken); results, and what flows out of the frame,
equal eager's, and the graph and op counts torch.compile's.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torchcheck import check_like_torch

_SEEDS = (0, 1, 2, 3, 4, 5, 6, 7)
_calls = itertools.cycle(_SEEDS)  # capture's calls and torch.compile's see the same values


def _pair():
    torch.manual_seed(next(_calls))
    return torch.randn(4), torch.randn(4)


def _helper(t):
    if t.sum() > 0:
        return t * 3
    return t - 3


def if_else_on_sum(x, y):
    a = x * 2
    if a.sum() > 0:
        b = a + y
    else:
        b = a - y
    return b.sin()


def if_then_return(x, y):
    if x.max() > 0.5:
        return x * y
    return x + y


def nested_data_ifs(x, y):
    z = x * y
    if z.sum() > 0:
        if x.mean() > 0:
            z = z + 1
        else:
            z = z - 1
    return z * 2


def elif_chain_on_data(x, y):
    s = (x + y).sum()
    if s > 1:
        out = x.exp()
    elif s > -1:
        out = y.cos()
    else:
        out = x - y
    return out, s


def and_of_two_tests(x, y):
    if x.sum() > 0 and y.sum() > 0:
        return x + y
    return x - y


def not_of_test(x, y):
    z = x.abs()
    if not (z.max() > 1.0):
        z = z * 10
    return z + y


def conditional_expression(x, y):
    z = x.relu() if y.sum() > 0 else y.relu()
    return z * 2


def branch_in_no_grad(x, y):
    with torch.no_grad():
        z = x * y
        if z.sum() > 0:
            z = z + x
    return z * 2, z.requires_grad


def branch_appends_to_list(x, y, out):
    z = x + y
    if z.mean() > 0:
        out.append(z * 2)
    else:
        out.append(z)
    return len(out)


def branch_sets_item(x, y, state):
    if (x - y).sum() > 0:
        state["hits"] += 1
        state["last"] = x
    return state["hits"], state.get("last")


def branch_in_callee(x, y):
    return _helper(x) + y


def branch_then_print(x, y):
    a = x.sin()
    if a.sum() > 0:
        print("positive")
        a = a + y
    return a.cos()


def while_on_data(x, y):
    while x.abs().sum() < 20:  # the loop's test at its top: no back jump follows it
        x = x * 2 + y.abs()
    return x


# ----- a tensor made a Python number: the graph before holds the tensor --------------
def raise_unless_bool_of_test(x, y):
    z = x.abs() + 1
    if not bool((z > 0).all()):
        raise ValueError("not positive")
    return z.log() + y


def int_of_count(x, y):
    n = int((x > 0).sum())
    return y * n + 1


def float_of_max_in_expression(x, y):
    a = x.sin()
    return a + float(y.max()) * a.cos()


PROGRAMS = {
    name: (fn, _pair())
    for name, fn in {
        "if_else_on_sum": if_else_on_sum,
        "if_then_return": if_then_return,
        "nested_data_ifs": nested_data_ifs,
        "elif_chain_on_data": elif_chain_on_data,
        "and_of_two_tests": and_of_two_tests,
        "not_of_test": not_of_test,
        "conditional_expression": conditional_expression,
        "branch_in_no_grad": branch_in_no_grad,
        "branch_in_callee": branch_in_callee,
        "branch_then_print": branch_then_print,
        "while_on_data": while_on_data,
        "raise_unless_bool_of_test": raise_unless_bool_of_test,
        "int_of_count": int_of_count,
        "float_of_max_in_expression": float_of_max_in_expression,
    }.items()
}
PROGRAMS["branch_appends_to_list"] = (branch_appends_to_list, (*_pair(), []))
PROGRAMS["branch_sets_item"] = (branch_sets_item, (*_pair(), {"hits": 0}))

FRESH = {
    "branch_appends_to_list": lambda: (*_pair(), []),
    "branch_sets_item": lambda: (*_pair(), {"hits": 0}),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_data_dependent_branch_counts_like_torch(name):
    check_like_torch(PROGRAMS[name][0], FRESH.get(name, _pair), calls=len(_SEEDS))


@pytest.mark.parametrize("outer", [torch.no_grad, torch.enable_grad], ids=["no_grad", "grad"])
def test_branch_under_outer_grad_mode_like_torch(outer):
    def needs_grad():
        torch.manual_seed(next(_calls))
        return torch.randn(4, requires_grad=True), torch.randn(4)

    with outer():
        check_like_torch(if_else_on_sum, needs_grad, calls=len(_SEEDS))
