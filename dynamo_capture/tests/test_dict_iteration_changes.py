"""A dict or set whose size changes while it is iterated raises Python's RuntimeError, as
eagerly, on every path: a plain loop, reversed() of the dict or of a view, an iterator
kept in a local across a graph break and read by the part resuming after it.

| footgun                                                        | rank          |
|----------------------------------------------------------------|---------------|
| a loop over a dict that grows returns a value (eager raises)   | wrong result  |
| an iterator made before a break misses a change made after it  | wrong result  |
| a reversed() of a dict live at a break runs the frame eagerly  | slowdown      |
"""

from __future__ import annotations

import warnings

import pytest
import torch

import dynamo_capture
from dynamo_capture.fallbacks import EagerFallbackWarning
from dynamo_capture.testing import eager_backend


def _graph_break():
    torch._dynamo.graph_break()


def _reversed_growing(x, d):
    for k in reversed(d):
        x = x + d[k]
        d[k + "z"] = 1
    return x


def _reversed_keys_growing(x, d):
    for k in reversed(d.keys()):
        x = x + d[k]
        d[k + "z"] = 1
    return x


def _reversed_items_growing(x, d):
    for k, v in reversed(d.items()):
        x = x + v
        d[k + "z"] = v
    return x


def _reversed_values_shrinking(x, d):
    for v in reversed(d.values()):
        x = x + v
        d.pop("a", None)
    return x


def _reversed_grows_at_the_last_item(x, d):
    for k in reversed(d):
        x = x + d[k]
        if k == "a":
            d["late"] = 0
    return x


def _forward_keys_growing(x, d):
    for k in d.keys():
        x = x + d[k]
        d[k + "z"] = 1
    return x


def _set_growing(x, d):
    seen = set(d.values())
    for v in seen:
        x = x + v
        seen.add(v + 10)
    return x


def _reversed_made_in_the_frame_shrinking(x, d):
    local = dict(d)
    for k in reversed(local):
        x = x + local[k]
        if k == "b":
            del local["c"]
    return x


def _reversed_kept_across_a_break_then_grown(x, d):
    keys = reversed(d)
    next(keys)
    _graph_break()
    d["new"] = 1
    for _ in keys:
        x = x * 2
    return x


def _reversed_kept_across_two_breaks_then_shrunk(x, d):
    keys = reversed(d)
    next(keys)
    _graph_break()
    x = x + 1
    _graph_break()
    d.pop("a")
    for _ in keys:
        x = x * 2
    return x


def _reversed_items_kept_across_a_break_unchanged(x, d):
    items = reversed(d.items())
    _, first = next(items)
    _graph_break()
    x = x + first
    for _, v in items:
        x = x * v
    return x


def _reversed_grown_before_a_break(x, d):
    keys = reversed(d)
    next(keys)
    d["new"] = 1
    _graph_break()
    for _ in keys:
        x = x * 2
    return x


def _reversed_loop_with_data_dependent_branch(x, d):
    for k in reversed(d):
        x = x + d[k]
        if x.sum() > 4:
            d[k + "z"] = 1
        x = x * 2
    return x


PROGRAMS = [
    _reversed_growing,
    _reversed_keys_growing,
    _reversed_items_growing,
    _reversed_values_shrinking,
    _reversed_grows_at_the_last_item,
    _forward_keys_growing,
    _set_growing,
    _reversed_made_in_the_frame_shrinking,
    _reversed_kept_across_a_break_then_grown,
    _reversed_kept_across_two_breaks_then_shrunk,
    _reversed_items_kept_across_a_break_unchanged,
    _reversed_grown_before_a_break,
    _reversed_loop_with_data_dependent_branch,
]


def _outcome(program, x, d):
    try:
        return program(x.clone(), d), None
    except RuntimeError as error:
        return None, str(error)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__.lstrip("_"))
def test_dict_changing_size_while_iterated_raises_as_eagerly(program):
    compiled = dynamo_capture.optimize(program, backend=eager_backend)
    for _ in range(2):
        x = torch.randn(3)
        expected_d, got_d = {"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 2, "c": 3}
        expected, expected_error = _outcome(program, x, expected_d)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EagerFallbackWarning)
            got, got_error = _outcome(compiled, x, got_d)
        assert got_error == expected_error
        if expected is not None:
            torch.testing.assert_close(got, expected)
        assert got_d == expected_d


def test_reversed_dict_kept_across_a_break_still_compiles():
    compiled = dynamo_capture.optimize(
        _reversed_items_kept_across_a_break_unchanged, backend=eager_backend
    )
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EagerFallbackWarning)
        got = compiled(x.clone(), {"a": 1, "b": 2, "c": 3})
    expected = _reversed_items_kept_across_a_break_unchanged(x.clone(), {"a": 1, "b": 2, "c": 3})
    torch.testing.assert_close(got, expected)
