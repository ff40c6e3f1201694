"""A generator made in the frame and still unfinished at a graph break: the frame runs
eagerly (its calls compiled), as torch.compile skips it; no item is read ahead of the
code between. One finished, or not read after the break, leaves the frame split.

Each program gives eager's results and torch.compile's graph and op counts
(`check_like_torch`); where torch.compile's own values differ from eager's (it reads
ahead), capture is checked against eager alone.
"""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same


def _break():
    torch._dynamo.graph_break()


def generator_expression_read_across_a_break(x):
    scaled = (x * i for i in range(3))
    first = next(scaled)
    _break()
    second = next(scaled)
    return first + second + sum(scaled)


def generator_expression_over_a_list_across_a_break(x):
    items = [x, x + 1, x + 2]
    doubled = (item * 2 for item in items)
    first = next(doubled)
    _break()
    return first + next(doubled)


def generator_function_across_a_break(x):
    def steps():
        for i in range(4):
            yield x + i

    walk = steps()
    first = next(walk)
    _break()
    return first + next(walk)


def generator_function_across_a_print(x):
    def steps():
        for i in range(4):
            yield x + i

    walk = steps()
    first = next(walk)
    print("")
    return first + next(walk)


def generator_not_read_after_the_break(x):
    scaled = (x * i for i in range(3))
    first = next(scaled)
    _break()
    return first * 2


def generator_finished_before_the_break(x):
    total = sum(x * i for i in range(2))
    _break()
    return total + 1


def generator_with_side_effects_across_a_break(x):
    seen = []

    def steps():
        for i in range(3):
            seen.append(i)
            yield x * i

    walk = steps()
    first = next(walk)
    _break()
    return first, list(walk), seen


def generator_over_a_list_appended_after(x):
    items = [x, x + 1]
    doubled = (item * 2 for item in items)
    first = next(doubled)
    items.append(x * 9)
    _break()
    return first + sum(doubled)


def generator_made_before_the_break_started_after(x):
    scaled = (x * i for i in range(3))
    _break()
    return sum(scaled)


def _one():
    return (torch.randn(4),)


PROGRAMS = {
    fn.__name__: (fn, _one)
    for fn in (
        generator_expression_read_across_a_break,
        generator_expression_over_a_list_across_a_break,
        generator_function_across_a_break,
        generator_function_across_a_print,
        generator_not_read_after_the_break,
        generator_finished_before_the_break,
        generator_with_side_effects_across_a_break,
        generator_over_a_list_appended_after,
        generator_made_before_the_break_started_after,
    )
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_generator_at_break_programs_count_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


def generator_over_a_tensor_written_after_the_break(x):
    y = x.clone()
    scaled = (y * i for i in range(3))
    first = next(scaled)
    _break()
    y.add_(1)
    return first + next(scaled)


def test_generator_items_are_made_after_the_writes_between():
    # NOTE: torch.compile reads the generator ahead here (values unlike eager's)
    fn = generator_over_a_tensor_written_after_the_break
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    for _ in range(2):
        (x,) = _one()
        assert_same(compiled(x), fn(x))
