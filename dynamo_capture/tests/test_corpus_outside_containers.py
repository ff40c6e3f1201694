"""Containers that exist outside the frame (arguments, globals, attributes) written in
it: each write goes to a shadow the rest of the capture reads, and the real object is
given the shadow's contents after the graph runs, keeping its identity, its type and
(for a defaultdict) its factory. Compared with eager's final state and torch.compile's
graph counts.
"""

from __future__ import annotations

import collections

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same


class State:
    def __init__(self):
        self.cache = collections.defaultdict(list)
        self.cache["old"].append(1)
        self.totals = collections.defaultdict(lambda: torch.zeros(3))
        self.order = collections.OrderedDict(a=1, b=2, c=3)


GLOBAL_COUNTS = collections.defaultdict(int)
GLOBAL_ORDER = collections.OrderedDict(a=1, b=2)


def write_outside_dict_subclasses(x, state):
    state.cache["new"] = x * 2
    state.cache["appended"].append(x + 1)  # a missing key: the factory's list, then written
    state.totals["a"] = state.totals["a"] + x
    state.totals["b"] += 1
    state.order.move_to_end("a")
    state.order["d"] = x
    state.order.move_to_end("c", last=False)
    return x + len(state.cache) + len(state.order)


def _assert_same_state(got, expected):
    for name in ("cache", "totals", "order"):
        real, eager = getattr(got, name), getattr(expected, name)
        assert type(real) is type(eager)
        assert list(real) == list(eager), name
        for key in eager:
            torch.testing.assert_close(real[key], eager[key])
    assert got.cache.default_factory is list


def test_defaultdict_and_ordered_dict_outside_the_frame_written_in_one_graph():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(write_outside_dict_subclasses, backend=counter)
    for _ in range(3):
        x = torch.randn(3)
        got_state, eager_state = State(), State()
        torch.testing.assert_close(
            compiled(x, got_state), write_outside_dict_subclasses(x, eager_state)
        )
        _assert_same_state(got_state, eager_state)
        torch.testing.assert_close(got_state.totals["fresh"], torch.zeros(3))  # factory kept
    assert counter.frame_count == 1


def count_into_a_global_defaultdict(x):
    for key in "abca":
        GLOBAL_COUNTS[key] += 1
    GLOBAL_ORDER.move_to_end("a")
    return x * GLOBAL_COUNTS["a"]


def test_global_defaultdict_and_ordered_dict_written_like_eager():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(count_into_a_global_defaultdict, backend=counter)
    GLOBAL_COUNTS.clear()
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2)
    assert dict(GLOBAL_COUNTS) == {"a": 2, "b": 1, "c": 1}
    assert list(GLOBAL_ORDER) == ["b", "a"]
    assert type(GLOBAL_COUNTS) is collections.defaultdict
    assert counter.frame_count == 1


def move_missing_key_to_end(x):
    try:
        GLOBAL_ORDER.move_to_end("z")
    except KeyError as error:
        return x + len(str(error))
    return x


def test_ordered_dict_move_to_end_of_a_missing_key_raises_key_error_like_eager():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(move_missing_key_to_end, backend=counter)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), move_missing_key_to_end(x))
    assert counter.frame_count == 1


def read_missing_key_of_outside_defaultdict(x, state):
    return x + len(state.cache["missing"]), sorted(state.cache)


@pytest.mark.parametrize("calls", [1, 3])
def test_reading_a_missing_key_of_an_outside_defaultdict_inserts_it_once(calls):
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(read_missing_key_of_outside_defaultdict, backend=counter)
    for _ in range(calls):
        state, eager_state = State(), State()
        x = torch.randn(3)
        got = compiled(x, state)
        expected = read_missing_key_of_outside_defaultdict(x, eager_state)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
        assert sorted(state.cache) == sorted(eager_state.cache)
    assert counter.frame_count == 1


# ----- keys and items that are not constants ---------------------------------------------
def dict_keyed_by_tuples_holding_tensors(x):
    y = x + 1
    d = {(0, x): 1, (1, y): 2}
    d[(0, x)] += 5
    return x * d[(0, x)] + len(d), [key[0] for key in d], (1, y) in d, (1, x) in d


def set_of_tuples_holding_tensors(x):
    y = x * 2
    s = {(x, "a"), (y, "b"), (x, "a")}
    return x + len(s), (x, "a") in s, (y, "a") in s


@pytest.mark.parametrize(
    "fn", [dict_keyed_by_tuples_holding_tensors, set_of_tuples_holding_tensors]
)
def test_tuple_holding_tensors_as_a_key_hashes_them_by_identity(fn):
    counter = check_like_torch(fn, lambda: (torch.randn(3),))
    assert counter.frame_count == 1


def test_set_of_tuples_holding_tensors_returned_keeps_the_tensors():
    def make(x):
        y = x * 2
        return {(x, "a"), (y, "b"), (x, "a")}, y

    compiled = dynamo_capture.optimize(make, backend=CountingBackend())
    x = torch.randn(3)
    items, y = compiled(x)
    assert type(items) is set and len(items) == 2
    assert any(tensor is x for tensor, _ in items) and any(tensor is y for tensor, _ in items)


def values_views_compared(x, d):
    v = d.values()
    w = d.values()
    return x + (v == v) + (v == w) * 2 + (v != w) * 4


def values_view_compared_with_constants(x, d):
    return x + 1, d.values() == [1, 2], d.values() != {1, 2}


def test_dict_values_views_compare_by_identity_like_eager():
    counter = CountingBackend()
    for fn in (values_views_compared, values_view_compared_with_constants):
        compiled = dynamo_capture.optimize(fn, backend=counter)
        x = torch.randn(3)
        assert_same(compiled(x, {"a": 1, "b": 2}), fn(x, {"a": 1, "b": 2}))
    assert counter.frame_count == 2


# ----- containers held by an object the frame is given --------------------------------------
class Holder:
    def __init__(self):
        self.items = [1, 2, 3, 2]
        self.seen = {"x", "y"}
        self.queue = collections.deque([1, 2, 3], maxlen=4)
        self.nested = collections.defaultdict(lambda: collections.defaultdict(int))


def list_remove_on_an_attribute(x, holder):
    holder.items.remove(2)
    return x + len(holder.items)


def set_discard_and_add_on_an_attribute(x, holder):
    holder.seen.discard("x")
    holder.seen.discard("absent")
    holder.seen.add("z")
    return x + len(holder.seen)


def deque_operations_on_an_attribute(x, holder):
    holder.queue.append(4)
    holder.queue.appendleft(0)
    holder.queue.rotate(2)
    return x + holder.queue.popleft() + len(holder.queue)


def nested_defaultdict_on_an_attribute(x, holder):
    holder.nested["a"]["b"] += 2
    holder.nested["a"]["c"] = 1
    return x * holder.nested["a"]["b"]


@pytest.mark.parametrize(
    "fn",
    [
        list_remove_on_an_attribute,
        set_discard_and_add_on_an_attribute,
        deque_operations_on_an_attribute,
        nested_defaultdict_on_an_attribute,
    ],
)
def test_containers_held_by_an_argument_written_like_eager(fn):
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter)
    for _ in range(2):
        x = torch.randn(3)
        got_holder, eager_holder = Holder(), Holder()
        torch.testing.assert_close(compiled(x, got_holder), fn(x, eager_holder))
        assert got_holder.items == eager_holder.items
        assert got_holder.seen == eager_holder.seen
        assert got_holder.queue == eager_holder.queue
        assert got_holder.queue.maxlen == eager_holder.queue.maxlen
        nested = {key: dict(inner) for key, inner in got_holder.nested.items()}
        assert nested == {key: dict(inner) for key, inner in eager_holder.nested.items()}
    assert counter.frame_count == 1
