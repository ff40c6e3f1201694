"""Python's object protocols on values capture models: data descriptors (properties with
setters, user descriptors with __set__) win over instance attributes, on reads and writes,
on objects made in the frame and outside it; a user subclass of list/tuple/dict runs its
own __getitem__, __len__, __iter__, __contains__, __missing__, __setitem__ and operators,
and `super()` reaches the builtin's. Each program runs against eager and against
torch.compile's graph and op counts.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import functools
import heapq
import inspect
import itertools
import typing

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _one():
    return (torch.randn(4),)


# ----- data descriptors ----------------------------------------------------------------
class Scaled:
    def __init__(self, value):
        self._value = value

    @property
    def value(self):
        return self._value * 2

    @value.setter
    def value(self, new):
        self._value = new + 1


class Tripled:
    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, obj, owner):
        if obj is None:
            return self
        return getattr(obj, self.slot) * 3

    def __set__(self, obj, value):
        setattr(obj, self.slot, value)


class HasTripled:
    field = Tripled()

    def __init__(self, value):
        self.field = value


class ReadOnly:
    @property
    def value(self):
        return 1


class Doubles:
    def __init__(self):
        object.__setattr__(self, "value", 0)

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value * 2)


def property_setter_on_new_object(x):
    s = Scaled(x)
    s.value = x * 3
    return s.value, s._value


def user_descriptor_set_and_get(x):
    h = HasTripled(x)
    h.field = h.field + 1
    return h.field


def property_without_setter_raises(x):
    try:
        ReadOnly().value = 2
    except AttributeError:
        return x + 1
    return x


DESCRIPTOR_PROGRAMS = [
    property_setter_on_new_object,
    user_descriptor_set_and_get,
    property_without_setter_raises,
]


@pytest.mark.parametrize("fn", DESCRIPTOR_PROGRAMS, ids=[f.__name__ for f in DESCRIPTOR_PROGRAMS])
def test_data_descriptor_wins_over_instance_attribute_like_torch(fn):
    check_like_torch(fn, _one)


def test_property_setter_of_outside_object_runs_in_the_frame():
    outside = Scaled(1)

    def fn(x):
        outside.value = 4
        return x * outside.value

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 10)
    assert outside._value == 5
    outside._value = 1
    torch.testing.assert_close(fn(x), compiled(x))


def test_user_setattr_of_outside_object_runs_once():
    outside = Doubles()

    def fn(x):
        outside.value = 3
        return x * outside.value

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 6)
    assert outside.value == 6  # replayed past __setattr__: not doubled twice


# ----- builtin subclasses with their own dunders ---------------------------------------
class DoublingList(list):
    def __getitem__(self, index):
        return super().__getitem__(index) * 2


class SevenLong(list):
    def __len__(self):
        return 7


class TriplingIter(list):
    def __iter__(self):
        return iter([item * 3 for item in super().__iter__()])


class Shifted(tuple):
    def __getitem__(self, index):
        return tuple.__getitem__(self, index) + 1


class DoublingDict(dict):
    def __setitem__(self, key, value):
        super().__setitem__(key, value * 2)


class LengthDefault(dict):
    def __missing__(self, key):
        return len(key)


class Falsy(list):
    def __bool__(self):
        return False


class Pairwise(list):
    def __add__(self, other):
        return Pairwise([a + b for a, b in zip(self, other)])


def list_subclass_getitem(x):
    items = DoublingList([x, x + 1])
    return items[0] + items[1], len(items)


def list_subclass_len(x):
    return x * len(SevenLong([x]))


def list_subclass_iter(x):
    return [t for t in TriplingIter([x, x + 1])]


def tuple_subclass_getitem(x):
    t = Shifted((x, 1))
    return t[0], t[1]


def dict_subclass_setitem(x):
    d = DoublingDict()
    d["a"] = x
    return d["a"]


def dict_subclass_missing(x):
    d = LengthDefault(a=x)
    return d["a"] + d["abc"]


def list_subclass_bool(x):
    return x + 1 if Falsy([1]) else x - 1


def list_subclass_operator(x):
    return Pairwise([x, x]) + Pairwise([x, 1])


def counter_operators(x):
    a = collections.Counter(a=3, b=1)
    b = collections.Counter(a=1, b=2)
    return x * (a | b)["a"], dict(a & b)


SUBCLASS_PROGRAMS = [
    list_subclass_getitem,
    list_subclass_len,
    list_subclass_iter,
    tuple_subclass_getitem,
    dict_subclass_setitem,
    dict_subclass_missing,
    list_subclass_bool,
    list_subclass_operator,
    counter_operators,
]


@pytest.mark.parametrize("fn", SUBCLASS_PROGRAMS, ids=[f.__name__ for f in SUBCLASS_PROGRAMS])
def test_builtin_subclass_dunder_runs_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


# ----- object creation, class subscripts, builtins calling dunders ----------------------
class MadeByNew:
    def __new__(cls, value):
        obj = super().__new__(cls)
        obj.value = value * 2
        return obj


class NewThenInit(MadeByNew):
    def __init__(self, value):
        self.other = value + 1


class Interned:
    table: dict = {}

    def __new__(cls, key):
        if key in cls.table:
            return cls.table[key]
        return super().__new__(cls)


INTERNED = Interned("k")
Interned.table["k"] = INTERNED


class NotAnInstance:
    def __new__(cls, value):
        return value + 1


class Generic:
    def __class_getitem__(cls, item):
        return cls


class Indexed:
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


class Backwards:
    def __reversed__(self):
        return iter([3, 2, 1])


class Magnitude:
    def __init__(self, value):
        self.value = value

    def __abs__(self):
        return Magnitude(abs(self.value))

    def __round__(self, ndigits=None):
        return 7

    def __neg__(self):
        return Magnitude(-self.value)


def custom_new(x):
    return MadeByNew(x).value


def custom_new_then_init(x):
    o = NewThenInit(x)
    return o.value + o.other


def new_returns_an_existing_instance(x):
    return x * (Interned("k") is INTERNED), x * (Interned("z") is INTERNED)


def new_returns_another_type(x):
    return NotAnInstance(x)


def class_getitem(x):
    return x * (Generic[int] is Generic), list[int]


def reversed_user_sequence(x):
    return list(reversed(Indexed([x, x + 1, x + 2])))


def iterate_sequence_protocol(x):
    return [t * 2 for t in Indexed([x, x + 1])]


def reversed_dunder(x):
    return x * list(reversed(Backwards()))[0]


def abs_round_neg_of_user_object(x):
    m = abs(Magnitude(-x))
    return m.value + round(Magnitude(1)) + (-m).value


CREATION_PROGRAMS = [
    custom_new,
    custom_new_then_init,
    new_returns_an_existing_instance,
    new_returns_another_type,
    class_getitem,
    reversed_user_sequence,
    iterate_sequence_protocol,
    reversed_dunder,
    abs_round_neg_of_user_object,
]


@pytest.mark.parametrize("fn", CREATION_PROGRAMS, ids=[f.__name__ for f in CREATION_PROGRAMS])
def test_user_class_protocol_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


def test_partial_of_partial_is_flattened_like_eager():
    def add(a, b, c, d=0):
        return a * b + c + d

    def fn(x):
        p = functools.partial(functools.partial(add, x), 2, d=1)
        return p(3), p.args[1:], p.keywords

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(3)
    got, expected = compiled(x), fn(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:] == ((2,), {"d": 1})


# ----- id() of values made in the frame, attribute-style dicts ------------------------
class AttrDict(dict):
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self[name] = value


def id_of_values_made_in_frame(x):
    a = [x]
    b = a
    memo = {id(a): 2}
    return x * (id(a) == id(b)) + (id(a) != id([1])) + memo[id(b)]


def attribute_dict_made_in_frame(x):
    d = AttrDict(scale=2)
    d.shift = x + 1
    return d.scale * d.shift, getattr(d, "missing", 3)


OBJECT_PROGRAMS = [id_of_values_made_in_frame, attribute_dict_made_in_frame]


@pytest.mark.parametrize("fn", OBJECT_PROGRAMS, ids=[f.__name__ for f in OBJECT_PROGRAMS])
def test_frame_object_program_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


def test_id_of_value_made_in_frame_returned_runs_eagerly():
    def fn(x):
        a = [x]
        return x + 1, id(a) == id(a), id(a)

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)
    got = compiled(torch.ones(2))
    torch.testing.assert_close(got[0], torch.ones(2) + 1)
    assert got[1] is True and type(got[2]) is int


# ----- signatures, vars(), typing ------------------------------------------------------
@dataclasses.dataclass
class Settings:
    dim: int = 4


def signature_of_function_made_in_frame(x):
    def fn(a, b: int = 1, *, c=2) -> int:
        return a

    params = inspect.signature(fn).parameters
    defaults = {k: v.default for k, v in params.items() if v.default is not inspect.Parameter.empty}
    return x * defaults["b"] + defaults["c"], list(params), str(inspect.signature(fn))


def vars_of_object_made_in_frame(x):
    s = Settings()
    d = vars(s)
    s.__dict__.update(dim=6)
    return x * s.dim + len(d)


def typing_subscripts(x):
    t = typing.Union[int, float]  # noqa: UP007 - the typing forms under test
    origin = typing.get_origin(typing.List[int])  # noqa: UP006
    return x + 1, origin is list, typing.get_args(t)


SIGNATURE_PROGRAMS = [vars_of_object_made_in_frame, typing_subscripts]


@pytest.mark.parametrize("fn", SIGNATURE_PROGRAMS, ids=[f.__name__ for f in SIGNATURE_PROGRAMS])
def test_introspection_program_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


def test_signature_of_function_made_in_frame_keeps_defaults_and_annotations():
    compiled = dynamo_capture.optimize(
        signature_of_function_made_in_frame, backend=lambda gm, ex: gm.forward
    )
    x = torch.randn(3)
    got, expected = compiled(x), signature_of_function_made_in_frame(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:]


def test_function_made_in_frame_keeps_its_annotations_across_a_break():
    def fn(x):
        def inner(a: int) -> int:
            return a

        print(end="")  # a graph break: `inner` is made again for the rest of the frame
        return x + 1, inner.__annotations__

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)
    assert compiled(torch.ones(2))[1] == fn(torch.ones(2))[1] == {"a": "int", "return": "int"}


def test_writes_through_an_outside_objects_dict_are_seen_by_its_attributes():
    settings = Settings()

    def fn(x):
        d = vars(settings)
        d["dim"] = 5
        return x * settings.dim, len(d)

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)
    got = compiled(torch.ones(2))
    torch.testing.assert_close(got[0], torch.full((2,), 5.0))
    assert settings.dim == 5 and got[1] == 1


# ----- attribute rules of classes: slots, abstract methods, in-place operators ----------
class OneSlot:
    __slots__ = ("a",)


class Task(abc.ABC):
    @abc.abstractmethod
    def run(self, x): ...


class Accumulating:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return Accumulating(self.t + other.t)

    def __iadd__(self, other):
        self.t = self.t + other.t * 10
        return self


def slots_reject_other_attributes(x):
    s = OneSlot()
    s.a = 1
    try:
        s.b = 1
    except AttributeError:
        return x + s.a
    return x


def abstract_class_cannot_be_made(x):
    try:
        Task()
    except TypeError as error:
        return x - 1, str(error)
    return x, ""


def inplace_operator_of_user_class(x):
    a = Accumulating(x)
    alias = a
    a += Accumulating(x + 1)
    return a.t, alias.t, a is alias


CLASS_RULE_PROGRAMS = [slots_reject_other_attributes, inplace_operator_of_user_class]


@pytest.mark.parametrize("fn", CLASS_RULE_PROGRAMS, ids=[f.__name__ for f in CLASS_RULE_PROGRAMS])
def test_class_attribute_rules_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 1


def test_abstract_class_instantiation_raises_like_eager():
    compiled = dynamo_capture.optimize(
        abstract_class_cannot_be_made, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    x = torch.randn(3)
    got, expected = compiled(x), abstract_class_cannot_be_made(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1]


# ----- stand-ins for C helpers of the standard library ---------------------------------
def tee_iterators(x):
    a, b = itertools.tee([x, x + 1])
    return list(a)[1] + list(b)[0]


def counter_counting_and_most_common(x):
    c = collections.Counter("abracadabra")
    c.update(["a", "z"])
    return x * c["a"], c.most_common(2), heapq.nsmallest(2, [3, 1, 2])


STDLIB_PROGRAMS = [tee_iterators, counter_counting_and_most_common]


@pytest.mark.parametrize("fn", STDLIB_PROGRAMS, ids=[f.__name__ for f in STDLIB_PROGRAMS])
def test_stdlib_helper_stand_in_is_one_graph(fn):
    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(3)
    got, expected = compiled(x), fn(x)
    if isinstance(expected, tuple):
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
    else:
        torch.testing.assert_close(got, expected)


# ----- outside containers whose class defines its own protocol ------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: DoublingList([torch.ones(2), torch.ones(2) * 2]),
        lambda: TriplingIter([torch.ones(2), torch.ones(2) * 2]),
    ],
    ids=["own_getitem", "own_iter"],
)
def test_iterating_outside_list_subclass_gives_eagers_items(make):
    def fn(items):
        return [t + 1 for t in items]

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)
    for got, expected in zip(compiled(make()), fn(make()), strict=True):
        torch.testing.assert_close(got, expected)


def test_items_of_outside_dict_subclass_with_own_getitem_are_eagers():
    class PlusOne(dict):
        def __getitem__(self, key):
            return super().__getitem__(key) + 1

    def fn(d):
        return [v * 2 for _, v in d.items()], d["a"]

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)
    got, expected = compiled(PlusOne(a=torch.ones(2))), fn(PlusOne(a=torch.ones(2)))
    torch.testing.assert_close(got, expected)


def test_module_with_own_setattr_keeps_eagers_value():
    class Doubling(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 1

        def __setattr__(self, name, value):
            if name == "k":
                value = value * 2
            super().__setattr__(name, value)

        def forward(self, x):
            self.k = 3
            return x * self.k

    compiled_module, eager_module = Doubling(), Doubling()
    compiled = dynamo_capture.optimize(compiled_module, backend=lambda gm, ex: gm.forward)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), eager_module(x))
    assert compiled_module.k == eager_module.k == 6
