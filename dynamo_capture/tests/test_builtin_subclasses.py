"""User subclasses of tuple and list, namedtuples and dataclasses made in the frame."""

from __future__ import annotations

import collections
import dataclasses
import typing

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _one():
    return (torch.randn(4),)


class Pair(tuple):
    def total(self):
        return self[0] + self[1]


class Doubling(list):
    def doubled(self):
        return [t * 2 for t in self]


class Built(tuple):
    def __new__(cls, a, b):
        return super().__new__(cls, (a, b))


class Point(collections.namedtuple("Point", "a b")):
    def total(self):
        return self.a + self.b


class Typed(typing.NamedTuple):
    a: torch.Tensor
    b: int = 2


@dataclasses.dataclass
class PostInit:
    a: torch.Tensor
    b: torch.Tensor = None

    def __post_init__(self):
        self.b = self.a * 2


def tuple_subclass_method(x):
    return Pair((x, x + 1)).total()


def tuple_subclass_returned(x):
    return Pair((x, x * 2))


def tuple_subclass_builtin_methods(x):
    p = Pair((1, 2, 1))
    return x * p.count(1) + p.index(2) + len(p) + isinstance(p, tuple)


def list_subclass_methods(x):
    items = Doubling([x, x + 1])
    items.append(x * 3)
    return items.doubled()


def list_subclass_returned(x):
    items = Doubling([x])
    items.extend([x + 1])
    return items


def namedtuple_subclass(x):
    p = Point(x, x + 1)
    return p.total(), p, p._replace(a=x * 3)


def tuple_subclass_own_new(x):
    t = Built(x, x * 2)
    return t[0] + t[1], t


def typed_namedtuple_default(x):
    p = Typed(x)
    return p.a * p.b


def dataclass_post_init(x):
    return PostInit(x).b + 1


PROGRAMS = [
    tuple_subclass_method,
    tuple_subclass_returned,
    tuple_subclass_builtin_methods,
    list_subclass_methods,
    list_subclass_returned,
    namedtuple_subclass,
    tuple_subclass_own_new,
    typed_namedtuple_default,
    dataclass_post_init,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_builtin_subclass_program_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_builtin_subclass_program_is_one_graph(fn):
    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(4)
    got, expected = compiled(x), fn(x)
    assert type(got) is type(expected)
    torch.testing.assert_close(got, expected)
