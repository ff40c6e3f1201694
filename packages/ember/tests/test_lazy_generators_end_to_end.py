"""Generators, map and filter made in the compiled function run as each item is read,
through ember.compile: a side effect of an item never read does not happen (it did,
silently, when capture ran them to their end as they were made)."""

from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ["eager", "aot_eager"]


def _scaled(x, log):
    for i in range(3):
        log.append(i)
        yield x * i


def read_twice(x, log):
    items = _scaled(x, log)
    return next(items) + next(items) + len(log)


def loop_with_break(x, log):
    out = x
    for item in _scaled(x, log):
        out = out + item
        if len(log) == 2:
            break
    return out


def map_never_read(x, log):
    map(log.append, [1, 2, 3])
    return x.sin()


def any_stops_early(x, log):
    return x + any(i >= 1 for i in map(lambda v: log.append(v) or v, range(5)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "program", [read_twice, loop_with_break, map_never_read, any_stops_early],
    ids=lambda p: p.__name__,
)  # fmt: skip
def test_generator_side_effects_happen_as_items_are_read(program, backend):
    compiled = ember.compile(program, backend=backend)
    for _ in range(2):
        x = torch.randn(3)
        expected_log, got_log = [], []
        expected = program(x, expected_log)
        got = compiled(x, got_log)
        torch.testing.assert_close(got, expected)
        assert got_log == expected_log
