"""Containers: defaultdict made in the frame, dict views (live, compared as sets)."""

from __future__ import annotations

import collections

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture

CONFIG = {"a": 1, "b": 2}


def _one():
    return (torch.randn(4),)


def defaultdict_of_lists(x):
    groups = collections.defaultdict(list)
    groups["a"].append(x)
    groups["b"].append(x + 1)
    return groups["a"][0] + groups["b"][0]


def defaultdict_counts_returned(x):
    counts = collections.defaultdict(int)
    for key in "aab":
        counts[key] += 1
    return x * counts["a"], counts


def keys_compared_with_set(x):
    d = {"a": x, "b": x + 1}
    if d.keys() == {"a", "b"}:
        return x + 1
    return x - 1


def keys_compared_with_list(x):
    return x + ({"a": 1}.keys() == ["a"])


def items_compared_with_set(x):
    return x + ({"a": 1}.items() == {("a", 1)})


def keys_set_operations(x):
    d = {"a": 1, "b": 2}
    return x + len(d.keys() | {"c"}) + len(d.keys() & {"a", "z"}) + len(d.keys() - {"a"})


def view_sees_later_writes(x):
    d = {"a": 1}
    keys = d.keys()
    d["b"] = 2
    return x + len(keys), list(keys)


def outside_dict_views(x):
    return x + len(CONFIG.keys() | {"z"}), [x * v for _, v in CONFIG.items()]


def values_summed(x):
    d = {"a": x, "b": x * 2}
    return sum(d.values()), "a" in d.keys(), "z" not in d.keys()


PROGRAMS = [
    defaultdict_of_lists,
    defaultdict_counts_returned,
    keys_compared_with_set,
    keys_compared_with_list,
    items_compared_with_set,
    keys_set_operations,
    view_sees_later_writes,
    outside_dict_views,
    values_summed,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_container_program_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


def test_defaultdict_returned_keeps_its_factory():
    compiled = dynamo_capture.optimize(
        defaultdict_counts_returned, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    _, counts = compiled(torch.randn(2))
    assert type(counts) is collections.defaultdict and counts.default_factory is int
    assert counts == {"a": 2, "b": 1}


def test_keys_view_has_the_view_type():
    def kind(x):
        return x + (type({"a": 1}.keys()) is type({}.keys()))

    compiled = dynamo_capture.optimize(kind, backend=lambda gm, ex: gm.forward, fullgraph=True)
    torch.testing.assert_close(compiled(torch.zeros(2)), torch.ones(2))
