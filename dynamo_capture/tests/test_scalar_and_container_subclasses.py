"""User subclasses of int, float and str, and list and dict subclasses with their own
__init__, made in captured code; functools.lru_cache methods read through an instance."""

from __future__ import annotations

import collections
import functools

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same, eager_backend


def _one():
    return (torch.randn(3),)


class Name(str):
    def __new__(cls, text):
        return super().__new__(cls, text.lower())

    def shout(self):
        return self.upper() + "!"


class Index(int):
    def doubled(self):
        return Index(self * 2)


class Meters(float):
    @property
    def centimetres(self):
        return self * 100


class Noisy(int):
    def __mul__(self, other):
        print("multiplied")
        return int.__mul__(self, other)


class Tagged(int):
    pass


class Items(list):
    def __init__(self, first, rest):
        super().__init__([first])
        self.extend(rest)
        self.append(0)


class Mapping(dict):
    def __init__(self, value):
        super().__init__(a=value)
        self["b"] = value * 2


class Ordered(collections.OrderedDict):
    def __init__(self, value):
        super().__init__()
        self["z"] = value
        self["a"] = value + 1


class Cached:
    def __init__(self):
        self.k = 2

    @functools.lru_cache(maxsize=8)  # noqa: B019 - the pattern under test
    def scaled(self, n):
        return n * 3


def str_subclass_with_own_new(x):
    name = Name("ABC")
    return x * len(name), name.shout(), name == "abc", name + "d", {name: 1}["abc"]


def int_subclass_methods_and_graph_arguments(x):
    index = Index(2).doubled()
    return x * index, x.reshape(Index(1), Index(3)), type(index).__name__, f"{index:03d}"


def float_subclass_property(x):
    return x * Meters(0.25).centimetres


def list_subclass_with_own_init(x):
    items = Items(x, [x * 2])
    return items[0] + items[1], len(items)


def lru_cache_method_through_instance(x):
    return x * Cached().scaled(3)


@pytest.mark.parametrize(
    "fn",
    [
        str_subclass_with_own_new,
        int_subclass_methods_and_graph_arguments,
        float_subclass_property,
        list_subclass_with_own_init,
        lru_cache_method_through_instance,
    ],
)
def test_subclass_program_is_one_graph_like_torch(fn):
    check_like_torch(fn, _one)
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter, fullgraph=True)
    x = torch.randn(3)
    assert_same(compiled(x), fn(x))
    assert counter.frame_count == 1


def test_int_subclass_passed_to_a_graph_operation_is_its_int():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(lambda x: x * Index(3), backend=counter, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 3)
    (mul,) = [n for n in counter.graphs[0].graph.nodes if n.op == "call_function"]
    assert type(mul.args[1]) is int


def test_scalar_subclass_returned_is_a_new_instance_each_call():
    def fn(x):
        return x + 1, Index(3), Name("Q")

    compiled = dynamo_capture.optimize(fn, backend=eager_backend, fullgraph=True)
    first, second = compiled(torch.randn(2)), compiled(torch.randn(2))
    assert type(first[1]) is Index and first[1] == 3 and type(first[2]) is Name
    assert first[1] is not second[1]  # eager makes one per call: an attribute set stays on it


def test_scalar_subclass_with_its_own_dunder_runs_it_eagerly(capsys):
    def fn(x):
        return x * (Noisy(3) * 2)

    x = torch.randn(3)
    got = dynamo_capture.optimize(fn, backend=eager_backend)(x)
    torch.testing.assert_close(got, x * 6)
    assert "multiplied" in capsys.readouterr().out
    with pytest.raises(dynamo_capture.Unsupported):
        dynamo_capture.optimize(fn, backend=eager_backend, fullgraph=True)(x)


def test_attribute_write_on_a_scalar_subclass_made_in_frame_breaks():
    def fn(x):
        index = Tagged(3)
        index.tag = "t"
        return x * index, index.tag

    x = torch.randn(3)
    got = dynamo_capture.optimize(fn, backend=eager_backend)(x)
    torch.testing.assert_close(got[0], x * 3)
    assert got[1] == "t"
    with pytest.raises(dynamo_capture.Unsupported, match="setting 'tag'"):
        dynamo_capture.optimize(fn, backend=eager_backend, fullgraph=True)(x)


@pytest.mark.parametrize("cls", [Items, Mapping, Ordered])
def test_container_subclass_returned_does_not_run_its_init_again(cls):
    def fn(x):
        if cls is Items:
            return cls(x + 1, [])
        return cls(x + 1)

    compiled = dynamo_capture.optimize(fn, backend=eager_backend, fullgraph=True)
    x = torch.randn(3)
    got, expected = compiled(x), fn(x)
    assert type(got) is cls
    if isinstance(got, dict):
        assert list(got) == list(expected)
        got, expected = list(got.values()), list(expected.values())
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


class Labelled(dict):
    def __init__(self, value):
        super().__init__(a=value)
        self.label = "kept"


def test_dict_subclass_returned_keeps_its_attributes():
    compiled = dynamo_capture.optimize(lambda x: Labelled(x * 2), backend=eager_backend)
    x = torch.randn(3)
    got = compiled(x)
    assert type(got) is Labelled and got.label == "kept"
    torch.testing.assert_close(got["a"], x * 2)


def test_bound_method_reads_its_function_attributes():
    cached = Cached()

    def fn(x):
        method = cached.scaled
        return x * method(2), method.__wrapped__.__name__, method.__name__

    check_like_torch(fn, _one)


class Scaled(list):
    def __init__(self, items, scale):
        super().__init__(items)
        self.scale = scale

    def scaled(self):
        return [t * self.scale for t in self]


class SlottedItems(list):
    __slots__ = ("k",)

    def __init__(self, items):
        super().__init__(items)
        self.k = 2


def list_subclass_attributes(x):
    items = Scaled([x, x + 1], 3)
    items.scale += 1
    return items.scaled(), items.scale, SlottedItems([x])[0] * SlottedItems([x]).k


def test_list_subclass_with_attributes_is_one_graph_like_torch():
    check_like_torch(list_subclass_attributes, _one)
    dynamo_capture.optimize(list_subclass_attributes, backend=eager_backend, fullgraph=True)(
        torch.randn(3)
    )


def test_list_subclass_returned_keeps_its_attributes():
    compiled = dynamo_capture.optimize(
        lambda x: (Scaled([x], 2), SlottedItems([x])), backend=eager_backend, fullgraph=True
    )
    x = torch.randn(3)
    scaled, slotted = compiled(x)
    assert type(scaled) is Scaled and scaled.scale == 2 and vars(scaled) == {"scale": 2}
    assert type(slotted) is SlottedItems and slotted.k == 2
    torch.testing.assert_close(scaled[0], x)


def test_int_subclass_from_outside_is_guarded_on_type_and_value():
    def fn(x, index):
        return x * index.doubled() if isinstance(index, Index) else x * index

    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter)
    x = torch.randn(3)
    for index, graphs in ((Index(4), 1), (Index(4), 1), (Index(5), 2), (5, 3), (Index(5), 3)):
        torch.testing.assert_close(compiled(x, index), fn(x, index))
        assert counter.frame_count == graphs


def test_int_subclass_kept_across_a_graph_break():
    def fn(x):
        index = Index(3)
        print("break")
        return x * index.doubled(), index

    check_like_torch(fn, _one)
