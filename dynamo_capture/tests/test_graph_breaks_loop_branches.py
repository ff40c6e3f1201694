"""A data-dependent jump inside `for` loops (`for i in range(n): ... if t.sum() > 0:`),
counted like torch.compile (torchcheck).

capture cuts the frame at the jump itself: the graph before it holds the test, and the
loops' iterators ride on with the tested value, so the part resuming at the taken
branch continues inside the loops (each loop's next test is a cut of that part in
turn). A range iterator is made again over the range left and guarded on it exactly,
a tuple iterator over the items left (read as any argument's items), a list iterator
over the same list at the same index (what the loop appends is still read). An enumerate of
a list or tuple runs the frame eagerly, as torch.compile; an iterator a local
also holds is cut at the jump's statement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import CountingBackend
from torchcheck import check_like_torch

import dynamo_capture


def _inputs(*shifts: float) -> Callable[[], tuple[Any, ...]]:
    """Arguments `zeros(3) + shift` for successive calls, one shift a call."""
    calls = iter(shifts * 2)  # capture's calls, then torch.compile's

    def make() -> tuple[Any, ...]:
        return (torch.zeros(3) + next(calls),)

    return make


def return_in_range_loop(x):
    for i in range(4):
        x = x + 1
        if x.sum() > 0:
            return x * i
    return x - 1


def return_in_nested_range_loops(x):
    seen = []
    for i in range(3):
        for j in range(2):
            x = x + 1
            if x.sum() > 0:
                return x * i + j, seen
            seen.append(j)
    return x - 1, seen


def return_in_enumerate_of_range(x):
    for i, c in enumerate(range(1, 4)):
        x = x + c
        if x.sum() > 0:
            return x * i
    return x - 1


def return_in_tuple_of_floats_loop(x):
    for c in (1.0, 2.0, 3.0):
        x = x + c
        if x.sum() > 0:
            return x * c
    return x - 1


def return_in_for_else(x):
    for _ in range(3):
        x = x + 1
        if x.sum() > 10:
            return x
    else:
        x = x - 100
    return x


def while_loop_inside_range_loop(x):
    for i in range(3):
        n = 0
        while n < 2:
            x = x + 1
            n += 1
        if x.sum() > 0:
            return x * i
    return x


def and_of_tests_in_range_loop(x):
    for i in range(3):
        x = x + 1
        if x.sum() > 0 and x.mean() > 1:
            return x * i
    return x


def return_in_enumerate_of_list(x):
    for i, c in enumerate([1.0, 2.0, 3.0]):
        x = x + c
        if x.sum() > 0:
            return x * i
    return x - 1


def return_in_list_of_tensors_loop(xs):
    acc = xs[0] * 0
    for t in xs:
        acc = acc + t
        if acc.sum() > 0:
            return acc * 2
    return acc - 1


PROGRAMS = {
    "return_in_range_loop": (return_in_range_loop, (-10, -2, 5)),
    "return_in_nested_range_loops": (return_in_nested_range_loops, (-4, 5)),
    "return_in_enumerate_of_range": (return_in_enumerate_of_range, (-4, 5)),
    "return_in_tuple_of_floats_loop": (return_in_tuple_of_floats_loop, (-4, 5)),
    "return_in_for_else": (return_in_for_else, (-4, 5)),
    "while_loop_inside_range_loop": (while_loop_inside_range_loop, (-8, 5)),
    "and_of_tests_in_range_loop": (and_of_tests_in_range_loop, (-3, 5)),
    "return_in_enumerate_of_list_runs_eagerly": (return_in_enumerate_of_list, (-4, 5)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_jump_in_loop_is_cut_like_torch(name):
    fn, shifts = PROGRAMS[name]
    check_like_torch(fn, _inputs(*shifts), calls=len(shifts))


def test_jump_in_list_loop_is_cut_like_torch():
    lists = iter(2 * [[torch.zeros(3) - 2, torch.ones(3), torch.ones(3)], [torch.ones(3)] * 2])
    check_like_torch(return_in_list_of_tensors_loop, lambda: (next(lists),), calls=2)


def test_list_growing_while_iterated_past_the_cut_keeps_eager_results():
    def grows(xs):
        acc = xs[0] * 0
        for t in xs:
            acc = acc + t
            if len(xs) < 5:
                xs.append(t + 0.5)
            if acc.sum() > 0:
                return acc, len(xs)
        return acc - 1, len(xs)

    def made_in_frame(x):
        ws = [x, x + 1]
        acc = x * 0
        for w in ws:
            acc = acc + w
            if len(ws) < 4:
                ws.append(w * 2)
            if acc.sum() > 0:
                return acc, ws
        return acc, ws

    compiled = dynamo_capture.optimize(grows, backend=CountingBackend())
    for first in (-2.0, 1.0, -9.0, -2.0):
        xs = [torch.zeros(3) + first, torch.ones(3)]
        expected_xs = [t.clone() for t in xs]
        expected = grows(expected_xs)
        torch.testing.assert_close(compiled(xs), expected)
        torch.testing.assert_close(xs, expected_xs)  # the caller's list, as eagerly
    compiled = dynamo_capture.optimize(made_in_frame, backend=CountingBackend())
    for shift in (-3.0, 5.0, -1.0):
        x = torch.zeros(3) + shift
        torch.testing.assert_close(compiled(x), made_in_frame(x))


def test_jump_in_range_loop_resumes_inside_the_loop():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(return_in_range_loop, backend=backend)
    for shift in (-2.0, 5.0):
        x = torch.zeros(3) + shift
        torch.testing.assert_close(compiled(x), return_in_range_loop(x))
    # the part resumed after the first test holds the next iteration's test
    resumed = backend.graphs[1].graph.nodes
    assert any(node.op == "call_function" and node.target.__name__ == "gt" for node in resumed)
    seen = len(backend.graphs)
    for shift in (-2.0, 5.0):  # each part is guarded on the range left: nothing new
        x = torch.zeros(3) + shift
        torch.testing.assert_close(compiled(x), return_in_range_loop(x))
    assert len(backend.graphs) == seen


def test_iterator_held_by_a_local_keeps_eager_results():
    def iterator_in_a_local(x):
        it = iter(range(4))
        for i in it:
            x = x + 1
            if x.sum() > 0:
                return x * i, list(it)
        return x - 1, []

    compiled = dynamo_capture.optimize(iterator_in_a_local, backend=CountingBackend())
    for shift in (-2.0, 5.0, -10.0):
        x = torch.zeros(3) + shift
        torch.testing.assert_close(compiled(x), iterator_in_a_local(x))


def test_loop_over_tuple_of_tensors_keeps_every_item():
    def first_positive_prefix(xs):
        acc = xs[0] * 0
        for t in xs:
            acc = acc + t
            if acc.sum() > 0:
                return acc * 2
        return acc - 1

    compiled = dynamo_capture.optimize(first_positive_prefix, backend=CountingBackend())
    for xs in (
        (torch.zeros(3) - 2, torch.ones(3), torch.ones(3)),
        (torch.zeros(3) - 9, torch.ones(3), torch.ones(3)),
        (torch.ones(3), -torch.ones(3)),
    ):
        torch.testing.assert_close(compiled(xs), first_positive_prefix(xs))


def test_dict_items_loop_sees_values_changed_past_the_cut():
    def doubles_later_values(d):
        acc = d["a"] * 0
        for key, value in d.items():
            acc = acc + value
            if acc.sum() > 0:
                return acc, key
            d["c"] = d["c"] * 2
        return acc, "end"

    compiled = dynamo_capture.optimize(doubles_later_values, backend=CountingBackend())
    for first in (-2.0, 5.0, -9.0):
        d = {"a": torch.zeros(3) + first, "b": torch.ones(3), "c": torch.ones(3)}
        expected_d = {k: v.clone() for k, v in d.items()}
        expected = doubles_later_values(expected_d)
        got = compiled(d)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
        torch.testing.assert_close(d, expected_d)
