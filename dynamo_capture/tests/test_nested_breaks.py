"""Graph breaks inside functions the compiled frame calls, one and two calls deep: the
callee runs as a compiled frame of its own and the caller resumes after the call, with
every frame's locals live across the break (graph counts as torch.compile's)."""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch


def _one():
    return (torch.randn(4, requires_grad=True),)


def _inner(t):
    u = t + 1
    torch._dynamo.graph_break()
    return u * 2


def _middle(t):
    v = t * 3
    w = _inner(v)
    return v + w


def _loop_then_break(t):
    for step in range(2):
        t = t + step
    torch._dynamo.graph_break()
    return t


class _Breaking(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, t):
        h = self.linear(t)
        torch._dynamo.graph_break()
        return h.relu()


torch.manual_seed(0)
_MODULE = _Breaking()


def one_call_deep(x):
    a = x.sin()
    b = _inner(a)
    return a + b


def two_calls_deep(x):
    a = x.cos()
    b = _middle(a)
    return a * b


def callee_result_used_in_the_return(x):
    return _loop_then_break(x) * 2


def module_forward_breaks(x):
    return _MODULE(x) + 1


def callee_result_in_an_expression(x):
    y = x.exp()
    return _inner(y) * 2 + y


def callee_in_no_grad(x):
    with torch.no_grad():
        y = _inner(x)
    return y + x


PROGRAMS = [
    one_call_deep,
    two_calls_deep,
    callee_result_used_in_the_return,
    module_forward_breaks,
    callee_result_in_an_expression,
    callee_in_no_grad,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_break_inside_a_callee_resumes_like_torch(fn):
    check_like_torch(fn, _one)
