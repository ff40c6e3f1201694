"""Breaks at the exact instruction: when the unsupported call sits inside an expression
whose partial values are on the stack (`y = f(x) + print_and_return(x) * 2`), the graph
before the break holds `f(x)`, the call runs eagerly, and the resume part continues the
expression with those values rebuilt from the graph's outputs (`___stack`). Where the
values below the call cannot leave a graph (a bound method, NULL), or inside try/with
bodies and loops, the cut falls back to the statement. 10 programs."""

from __future__ import annotations

import pytest
import torch
from breakcheck import LOG, Program, check_break_program

import dynamo_capture
from dynamo_capture.testing import CountingBackend


@dynamo_capture.disable
def print_and_return(t):
    print("value", t.shape)
    return t


@dynamo_capture.disable
def log_and_scale(t):
    LOG.append(t.shape[0])
    return 3.0


def sum_with_eager_term(x):
    y = x.sin() + print_and_return(x) * 2
    return y.cos()


def item_in_expression(x):
    a = x.exp()
    return a * 2 + a.sum().item()


def call_in_list(x):
    parts = [x.sin(), print_and_return(x.cos()), x.tan()]
    return torch.stack(parts)


def scale_from_eager(x):
    y = (x + 1) * log_and_scale(x) - x.relu()
    return y


def nested_partials(x):
    y = x.abs() * (x.exp() - print_and_return(x)) + x.sigmoid()
    return y


def print_or_value(x):
    y = x * 2 + (print("side") or 1)
    return y.tanh()


def call_in_tuple_return(x):
    return x.sin(), print_and_return(x + 1), x.cos()


def method_on_partial(x):
    # a tensor's bound method below the call: handed on, the graph before holds `x + 1`
    # (torch.compile's too: 2 graphs, its `add` run eagerly in its resume function)
    y = (x + 1).add(print_and_return(x))
    return y * 2


def two_eager_terms(x):
    y = x.exp() + print_and_return(x) + log_and_scale(x)
    return y


def kwargs_call_in_expression(x):
    y = x.sin() * torch.tensor(log_and_scale(x)) + torch.add(x, x, alpha=2)
    return y


X = torch.randn(3)
PROGRAMS = [
    Program(sum_with_eager_term, (X,), 2, 1),
    Program(item_in_expression, (X,), 2, 1),
    Program(call_in_list, (X,), 2, 1),
    Program(scale_from_eager, (X,), 2, 1),
    Program(nested_partials, (X,), 2, 1),
    Program(print_or_value, (X,), 2, 1),
    Program(call_in_tuple_return, (X,), 2, 1),
    Program(method_on_partial, (X,), 2, 1),
    Program(two_eager_terms, (X,), None, 2),
    Program(kwargs_call_in_expression, (X,), None, 1),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_break_at_the_exact_instruction(program):
    check_break_program(program)


def test_graph_before_the_break_holds_the_partial_value():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(sum_with_eager_term, backend=backend)
    torch.testing.assert_close(compiled(X), sum_with_eager_term(X))
    first, second = (gm.code for gm in backend.graphs)
    assert "sin" in first and "sin" not in second
    assert "cos" in second
    placeholders = [n.name for n in backend.graphs[1].graph.find_nodes(op="placeholder")]
    assert any("stack" in name for name in placeholders)  # l___stack0_, as torch names it
