"""DeepcopyContentsGuard: a snapshot of what copy.deepcopy reads, compared on each call;
the fast check (dict version tags) agrees with a fresh walk after every kind of write."""

from __future__ import annotations

import collections
import enum
import math

import pytest
import torch

from guards import (
    DeepcopyContentsGuard,
    GuardSet,
    LocalSource,
    UncopiableContents,
    contents_snapshot,
)


class Plain:
    def __init__(self):
        self.n = 3
        self.items = [1, 2.5, "a"]
        self.table = {"k": (1, 2), 2: None}
        self.tags = {"x", "y"}


class Color(enum.Enum):
    RED = 1


class Lookup(Plain):
    """Answers attribute lookups itself, as transformers configs do."""

    aliases: dict = {"size": "n"}

    def __getattribute__(self, name):
        if name != "aliases" and name in type(self).aliases:
            name = type(self).aliases[name]
        return super().__getattribute__(name)


def _replace_item_by_equal(obj):
    obj.items[0] = int("1")  # equal value, maybe another object


WRITES = {
    "attribute": lambda o: setattr(o, "n", 4),
    "new_attribute": lambda o: setattr(o, "m", 1),
    "deleted_attribute": lambda o: delattr(o, "tags"),
    "list_item": lambda o: o.items.__setitem__(1, 3.5),
    "list_append": lambda o: o.items.append(None),
    "dict_value": lambda o: o.table.__setitem__("k", (1, 3)),
    "dict_key": lambda o: o.table.__setitem__("j", 0),
    "set_item": lambda o: o.tags.add("z"),
    "int_to_bool": lambda o: setattr(o, "n", True),
    "negative_zero": lambda o: o.items.__setitem__(1, -0.0) or setattr(o, "n", 0.0),
    "nested_object": lambda o: setattr(o, "n", Plain()),
    "enum_member": lambda o: setattr(o, "n", Color.RED),
    "class": lambda o: setattr(o, "__class__", type("Other", (type(o),), {})),
    "class_deepcopy": lambda o: setattr(type(o), "__deepcopy__", lambda self, memo: self),
    "sharing": lambda o: setattr(o, "alias", o.items),
}


@pytest.mark.parametrize("cls", [Plain, Lookup])
@pytest.mark.parametrize("write", list(WRITES))
def test_fast_check_agrees_with_a_fresh_walk(write, cls):
    cls = type(cls.__name__, (cls,), {})  # a class of its own: writes to it stay here
    obj = cls()
    guard = DeepcopyContentsGuard.of(LocalSource("config"), obj)
    assert guard.state.holds(obj) and guard.state.holds(obj)  # the second: fast
    assert guard.failure(obj) is None
    WRITES[write](obj)
    fresh = guard.failure(obj) is None
    assert guard.state.holds(obj) == fresh == guard.state.holds(obj)
    assert not fresh


def test_an_equal_item_replaced_still_holds():
    obj = Plain()
    guard = DeepcopyContentsGuard.of(LocalSource("config"), obj)
    assert guard.state.holds(obj)
    _replace_item_by_equal(obj)
    obj.items = list(obj.items)
    assert guard.state.holds(obj) and guard.state.holds(obj)
    assert guard.state.holds(Plain())  # another object, the same contents


def test_generated_check_reads_the_contents():
    obj = {"layers": [1, 2], "eps": 1e-5}
    guards = GuardSet([DeepcopyContentsGuard.of(LocalSource("config"), obj)])
    check = guards.compile()
    assert check({"config": obj}, {})
    obj["layers"][0] = 5
    assert not check({"config": obj}, {})
    assert "other contents" in check.why_failed({"config": obj}, {})
    obj["layers"][0] = 1
    assert check({"config": obj}, {})
    assert not check({"config": {"layers": [1, 2], "eps": 1e-4}}, {})


def test_snapshot_compares_values_with_their_types():
    assert contents_snapshot([1]) != contents_snapshot([1.0]) != contents_snapshot([True])
    assert contents_snapshot([math.nan]) == contents_snapshot([math.nan])
    assert contents_snapshot([0.0]) != contents_snapshot([-0.0])
    shared = [1]
    assert contents_snapshot([shared, shared]) != contents_snapshot([[1], [1]])
    looped: list = [1]
    looped.append(looped)
    assert contents_snapshot(looped) == contents_snapshot(looped)


class Slotted:
    __slots__ = ("a",)

    def __init__(self):
        self.a = 1


class OwnState(Plain):
    def __getstate__(self):
        return {"n": self.n}


class OwnSetState(Plain):
    def __setstate__(self, state):
        self.__dict__.update(state)


class OwnReduce(Plain):
    def __reduce__(self):
        return (OwnReduce, ())


class Key:
    pass


@pytest.mark.parametrize(
    "obj",
    [
        torch.ones(2),
        {"weight": torch.nn.Parameter(torch.ones(1))},
        torch.nn.Linear(1, 1),
        Slotted(),
        OwnState(),
        OwnSetState(),
        OwnReduce(),
        collections.OrderedDict(a=1),
        {Key(): 1},
        bytearray(b"ab"),
    ],
    ids=lambda obj: type(obj).__name__,
)
def test_contents_deepcopy_copies_otherwise_are_refused(obj):
    with pytest.raises(UncopiableContents):
        contents_snapshot(obj)
