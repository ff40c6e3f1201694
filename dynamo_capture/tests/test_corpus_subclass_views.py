"""Builtin protocols reached past user code: `super().__len__()`, `super().__getitem__`
and `super().__iter__()` of list, tuple and dict subclasses given as arguments or made
in the frame.

Each program gives eager's results and torch.compile's graph and op counts
(`check_like_torch`); where torch.compile's own values differ from eager's, capture is
checked against eager alone.
"""

from __future__ import annotations

import collections

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same


class TwiceList(list):
    def __len__(self):
        return super().__len__() * 2

    def __getitem__(self, index):
        return super().__getitem__(index) + 1

    def __iter__(self):
        return iter([item * 2 for item in super().__iter__()])


class TripleTuple(tuple):
    def __len__(self):
        return super().__len__() + 1

    def __getitem__(self, index):
        return super().__getitem__(index) * 3

    def __iter__(self):
        return (item - 1 for item in super().__iter__())


class DoubledDict(dict):
    def __len__(self):
        return super().__len__() + 5

    def __getitem__(self, key):
        return super().__getitem__(key) * 2

    def __iter__(self):
        return iter(sorted(super().__iter__()))


def list_subclass_argument_super_protocols(x, items):
    return x * len(items) + items[0] + sum(item for item in items)


def list_subclass_argument_super_slice(x, items):
    return x + len(items) + items[-1]


def dict_subclass_argument_super_protocols(x, table):
    return x * len(table) + table["a"] + sum(table[key] for key in table)


def list_subclass_made_super_protocols(x):
    items = TwiceList([x, x + 1])
    return x * len(items) + items[1] + sum(item for item in items)


def tuple_subclass_made_super_protocols(x):
    items = TripleTuple((x, x * 2))
    return x * len(items) + items[0] + [item for item in items][1]


def dict_subclass_made_super_protocols(x):
    table = DoubledDict(b=x, a=x + 1)
    return x * len(table) + table["b"] + [key for key in table].index("b")


def _list_args():
    return torch.randn(4), TwiceList([torch.randn(4), torch.randn(4)])


def _tuple_args():
    return torch.randn(4), TripleTuple((torch.randn(4), torch.randn(4)))


def _dict_args():
    return torch.randn(4), DoubledDict(a=torch.randn(4), b=torch.randn(4))


def _one():
    return (torch.randn(4),)


PROGRAMS = {
    "list_subclass_argument_super_protocols": (list_subclass_argument_super_protocols, _list_args),
    "list_subclass_argument_super_slice": (list_subclass_argument_super_slice, _list_args),
    "dict_subclass_argument_super_protocols": (dict_subclass_argument_super_protocols, _dict_args),
    "list_subclass_made_super_protocols": (list_subclass_made_super_protocols, _one),
    "tuple_subclass_made_super_protocols": (tuple_subclass_made_super_protocols, _one),
    "dict_subclass_made_super_protocols": (dict_subclass_made_super_protocols, _one),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_subclass_super_protocols_count_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


def tuple_subclass_argument_super_protocols(x, items):
    return x * len(items) + items[1] + list(items)[0]


def test_tuple_subclass_argument_reads_items_past_its_own_getitem():
    # NOTE: torch.compile reads the items through the subclass's own __getitem__ here
    # (values unlike eager's); capture reads them as tuple.__getitem__ does
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(tuple_subclass_argument_super_protocols, backend=counter)
    for _ in range(2):
        x, items = _tuple_args()
        assert_same(compiled(x, items), tuple_subclass_argument_super_protocols(x, items))
    assert counter.frame_count == 1


def test_list_subclass_argument_of_another_length_recompiles():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(list_subclass_argument_super_protocols, backend=counter)
    for length in (2, 3, 3):
        x = torch.randn(4)
        items = TwiceList([torch.randn(4) for _ in range(length)])
        expected = list_subclass_argument_super_protocols(x, items)
        assert_same(compiled(x, items), expected)
    assert counter.frame_count == 2


# ----- an outside dict subclass whose __getitem__ builds a value from the item -------
# (transformers' ACT2FN: `ACT2FN["silu"]` returns a new module from the class it holds)


class ClassInstantier(collections.OrderedDict):
    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACTIVATIONS = ClassInstantier(
    {
        "silu": torch.nn.SiLU,
        "gelu_tanh": (torch.nn.GELU, {"approximate": "tanh"}),
        "relu": torch.nn.ReLU,
    }
)


def activation_built_per_read(x):
    return ACTIVATIONS["silu"](x) + ACTIVATIONS["gelu_tanh"](x)


def test_dict_subclass_building_per_read_counts_like_torch():
    check_like_torch(activation_built_per_read, _one)


def test_dict_subclass_item_changed_recompiles():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(activation_built_per_read, backend=counter)
    x = torch.randn(4)
    assert_same(compiled(x), activation_built_per_read(x))
    ACTIVATIONS["silu"] = torch.nn.ReLU
    try:
        assert_same(compiled(x), activation_built_per_read(x))
    finally:
        ACTIVATIONS["silu"] = torch.nn.SiLU
    assert_same(compiled(x), activation_built_per_read(x))
    assert counter.frame_count == 2


def test_dict_subclass_item_not_read_is_not_guarded():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(activation_built_per_read, backend=counter)
    x = torch.randn(4)
    assert_same(compiled(x), activation_built_per_read(x))
    ACTIVATIONS["relu"] = torch.nn.Tanh
    try:
        assert_same(compiled(x), activation_built_per_read(x))
    finally:
        ACTIVATIONS["relu"] = torch.nn.ReLU
    assert counter.frame_count == 1


def activation_of_a_key_it_lacks(x):
    return ACTIVATIONS["nope"](x)


def test_dict_subclass_key_it_lacks_raises_key_error():
    compiled = dynamo_capture.optimize(activation_of_a_key_it_lacks, backend=CountingBackend())
    with pytest.raises(KeyError, match="nope"):
        compiled(torch.randn(4))


class DefaultingInstantier(ClassInstantier):
    def __missing__(self, key):
        return torch.nn.Tanh


DEFAULTING = DefaultingInstantier({"silu": torch.nn.SiLU})


def activation_of_a_missing_key(x):
    return DEFAULTING["silu"](x) + DEFAULTING["other"](x)


def test_dict_subclass_with_missing_runs_like_eager():
    # dict.__getitem__ calls __missing__ for a key the dict lacks: capture does not read
    # such a dict's items past its own __getitem__ (a break), values eager's
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(activation_of_a_missing_key, backend=counter)
    x = torch.randn(4)
    assert_same(compiled(x), activation_of_a_missing_key(x))
