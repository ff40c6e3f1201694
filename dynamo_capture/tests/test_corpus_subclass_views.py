"""Builtin protocols reached past user code: `super().__len__()`, `super().__getitem__`
and `super().__iter__()` of list, tuple and dict subclasses given as arguments or made
in the frame.

Each program gives eager's results and torch.compile's graph and op counts
(`check_like_torch`); where torch.compile's own values differ from eager's, capture is
checked against eager alone.
"""

from __future__ import annotations

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
