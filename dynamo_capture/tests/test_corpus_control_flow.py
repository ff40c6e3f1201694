"""torch.cond, torch.while_loop and torch's map in captured code, as torch.compile
captures them: one graph, each operator one node (its outputs read by getitem nodes),
the functions known now or closures made in the frame over tensors and constants
(whose tensors the node takes as inputs, as torch.compile lifts them)."""

from __future__ import annotations

import sys

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend

_map = sys.modules["torch._higher_order_ops.map"].map


def _pair():
    return torch.randn(3), torch.randn(3)


def cond_branches_close_over_tensors(x, y):
    shift = y * 2
    return torch.cond(x.sum() > 0, lambda a: a + shift, lambda a: a * shift, (x,))


def cond_branches_close_over_a_constant_and_an_input(x, y):
    k = 3
    return torch.cond(x.sum() > 0, lambda a: a * k, lambda a: a + y, (x,))


def cond_closures_return_tuples(x, y):
    s = y.cos()
    return torch.cond(x.sum() > 0, lambda a: (a + s, a * s), lambda a: (a - s, a / 2), (x,))


def cond_inside_a_branch(x, y):
    def outer(a):
        return torch.cond(a.sum() > 1, lambda b: b * 2, lambda b: b * 3, (a,))

    return torch.cond(x.sum() > 0, outer, lambda a: a - 1, (x,))


def while_loop_counts_to_three(x, y):
    def below_three(i, v):
        return i < 3

    def step(i, v):
        return i + 1, v * 2

    return torch.while_loop(below_three, step, (torch.tensor(0), x))


def while_loop_body_closes_over_an_input(x, y):
    def step(i, v):
        return i + 1, v + y

    return torch.while_loop(lambda i, v: i < 4, step, (torch.tensor(0), x))


def while_loop_carries_a_list(x, y):
    return torch.while_loop(lambda i, v: i < 2, lambda i, v: [i + 1, v * 3], [torch.tensor(0), x])


def while_loop_on_data_returns_a_tensor(x, y):
    return torch.while_loop(lambda v: v.sum() < 100, lambda v: v.abs() * 2 + 1, (x,))


def while_loop_results_used_after(x, y):
    i, v = torch.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v.sin()), (torch.tensor(0), x))
    return v * y + i


def cond_inside_a_while_loop_body(x, y):
    def step(i, v):
        return i + 1, torch.cond(v.sum() > 0, lambda q: q - 1, lambda q: q + 1, (v,))

    return torch.while_loop(lambda i, v: i < 3, step, (torch.tensor(0), x))


def map_with_an_argument(x, y):
    return _map(lambda a, b: a * b, torch.stack([x, x + 1]), y)


def map_closes_over_an_input(x, y):
    return _map(lambda a: a * y, torch.stack([x, x + 1, x + 2]))


def map_returns_a_tuple(x, y):
    return _map(lambda a, b: (a * b, a + b), torch.stack([x, x]), y)


PROGRAMS = [
    cond_branches_close_over_tensors,
    cond_branches_close_over_a_constant_and_an_input,
    cond_closures_return_tuples,
    cond_inside_a_branch,
    while_loop_counts_to_three,
    while_loop_body_closes_over_an_input,
    while_loop_carries_a_list,
    while_loop_on_data_returns_a_tensor,
    while_loop_results_used_after,
    cond_inside_a_while_loop_body,
    map_with_an_argument,
    map_closes_over_an_input,
    map_returns_a_tuple,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_control_flow_operator_like_torch(fn):
    counter = check_like_torch(fn, _pair)
    assert counter.frame_count == 1


def test_cond_closure_reads_its_cells_each_call():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(cond_branches_close_over_tensors, backend=backend)
    for _ in range(3):
        x, y = _pair()
        torch.testing.assert_close(compiled(x, y), cond_branches_close_over_tensors(x, y))
    assert len(backend.graphs) == 1


def test_eager_cond_works_after_capturing_a_nested_cond():
    """Capture runs the branches on fakes without torch's own torch.cond, which would
    leave torch.compile's state such that later eager calls of torch.cond fail."""
    compiled = dynamo_capture.optimize(cond_inside_a_branch, backend=CountingBackend())
    x, y = _pair()
    torch.testing.assert_close(compiled(x, y), cond_inside_a_branch(x, y))
    torch.testing.assert_close(cond_inside_a_branch(x, y), cond_inside_a_branch(x, y))
