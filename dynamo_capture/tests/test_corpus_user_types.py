"""User subclasses of the builtin containers, namedtuples and dataclasses, operator,
itertools and functools helpers, classes with their own construction and attribute
protocols, and pure stdlib functions in captured code.

Each program gives eager's results and torch.compile's graph and op counts
(`check_like_torch`).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import itertools
import keyword
import math
import operator
import sys
import typing
import weakref

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def _one():
    return (torch.randn(4),)


# ----- subclasses of list, tuple, dict, set ----------------------------------------------
class DoublingList(list):
    def __getitem__(self, index):
        return super().__getitem__(index) * 2

    def __len__(self):
        return super().__len__() + 1


class SummingTuple(tuple):
    def total(self):
        return sum(self)


class PlusOneDict(dict):
    def __getitem__(self, key):
        return super().__getitem__(key) + 1


class TenByDefault(dict):
    def __missing__(self, key):
        return 10


class TaggedSet(set):
    def add_pair(self, value):
        self.add(value)
        self.add(value + 1)

    def total(self):
        return sum(self)


class LargestFrozenSet(frozenset):
    def largest(self):
        return max(self)


class NamedDefaultDict(collections.defaultdict):
    def names(self):
        return sorted(self)


class ReversedList(list):
    def __iter__(self):
        return iter(reversed(list(super().__iter__())))


class FirstKeyDict(collections.OrderedDict):
    def first(self):
        return next(iter(self))


class Vector(tuple):
    def __new__(cls, *values):
        return super().__new__(cls, values)

    def __add__(self, other):
        return Vector(*[p + q for p, q in zip(self, other, strict=True)])


def list_subclass_getitem_and_len(x):
    items = DoublingList([1, 2, 3])
    return x * items[1] + len(items)


def tuple_subclass_method(x):
    t = SummingTuple((1, 2, 3))
    return x * t.total() + t[0] + len(t)


def dict_subclass_getitem_calls_super(x):
    d = PlusOneDict(a=1, b=2)
    return x * d["a"] + d.get("b")


def dict_subclass_missing(x):
    d = TenByDefault(a=1)
    return x * d["z"] + d["a"]


def set_subclass_methods(x):
    s = TaggedSet({1})
    s.add_pair(5)
    return x * len(s), 6 in s, s.total()


def set_subclass_returned_and_algebra(x):
    s = TaggedSet([1, 2])
    s |= {3}
    union = s | {9}
    return x * len(union), s, union, type(union).__name__, type(s.copy()).__name__


def set_subclass_sorted_iteration(x):
    s = TaggedSet([3, 1, 2])
    for value in sorted(s):
        x = x * value
    return x, s.total(), isinstance(s, set)


def set_subclass_of_tensors(x):
    s = TaggedSet()
    s.add(x)
    s.add(x)
    return x * len(s), x in s


def frozenset_subclass_method(x):
    f = LargestFrozenSet([3, 1])
    return x * f.largest(), f, type(f & {1}).__name__, 1 in f, len(f)


def defaultdict_subclass(x):
    d = NamedDefaultDict(list)
    d["b"].append(1)
    d["a"].append(2)
    return x + len(d["a"]), d.names(), d, d.default_factory is list


def defaultdict_subclass_with_items(x):
    d = NamedDefaultDict(int, {"z": 4})
    d["q"] += 2
    return x * d["q"] + d["z"], dict(d)


def list_subclass_iter_override(x):
    out = [value for value in ReversedList([1, 2, 3])]
    return x * out[0], out


def ordered_dict_subclass_method(x):
    d = FirstKeyDict(a=1, b=2)
    d.move_to_end("a")
    return x * d[d.first()], list(d)


def tuple_subclass_new_and_operator(x):
    v = Vector(x, x + 1) + Vector(x + 2, x)
    return v[0], v[1], type(v).__name__, len(v)


# ----- namedtuples -----------------------------------------------------------------------
Triple = collections.namedtuple("Triple", "a b c", defaults=[3])


class Typed(typing.NamedTuple):
    a: int
    b: float = 2.0

    def scaled(self, value):
        return value * self.a


def namedtuple_made_in_frame_replace_asdict(x):
    Pair = collections.namedtuple("Pair", ["a", "b"])
    p = Pair(1, 2)
    q = p._replace(b=5)
    return x * q.b + p.a, q._asdict(), Pair._fields


def namedtuple_defaults_and_fields(x):
    t = Triple(1, 2)
    return x * t.c, t._fields, t._field_defaults, tuple(t)


def typed_namedtuple_method(x):
    t = Typed(3)
    return t.scaled(x) + t.b, t


def namedtuple_argument_replace_and_make(t):
    return t._replace(a=t.a * 2), t._make([1, 2, 3])


def namedtuple_unpack_count_index(x):
    t = Triple(1, 2)
    a, b, c = t
    return x * (a + b + c) + t[-1], t.count(1), t.index(2)


# ----- operator ---------------------------------------------------------------------------
class _Inner:
    c = 3


class _Outer:
    def __init__(self):
        self.a = 2
        self.b = _Inner()


def operator_itemgetter(x):
    t = (x, x + 1, x + 2)
    return operator.itemgetter(1)(t), operator.itemgetter(0, 2)(t)


def operator_attrgetter_dotted(x):
    o = _Outer()
    both = operator.attrgetter("a", "b.c")(o)
    return x * operator.attrgetter("a")(o) + operator.attrgetter("b.c")(o), both


def operator_methodcaller(x):
    return operator.methodcaller("add", 2)(x), operator.methodcaller("sum", dim=0)(x)


def operator_itemgetter_as_sort_key(x):
    items = [(3, "c"), (1, "a"), (2, "b")]
    items.sort(key=operator.itemgetter(0))
    return x + items[0][0], sorted(items, key=operator.itemgetter(1), reverse=True)


# ----- itertools --------------------------------------------------------------------------
def itertools_accumulate(x):
    scaled = [x * value for value in itertools.accumulate([1, 2, 3])]
    products = list(itertools.accumulate([1, 2, 3], operator.mul))
    return scaled, products, list(itertools.accumulate([1, 2], initial=10))


def itertools_accumulate_tensors(x):
    return list(itertools.accumulate([x, x + 1, x + 2]))


def itertools_chain_from_iterable(x):
    for value in itertools.chain.from_iterable([[1, 2], (3,)]):
        x = x + value
    return x, list(itertools.chain([1], (2,), {3: 0}))


def itertools_product_with_repeat(x):
    for a, b in itertools.product([1, 2], [3, 4]):
        x = x + a * b
    return x, list(itertools.product([0, 1], repeat=2))


def itertools_combinations_permutations(x):
    return (
        [x * a + b for a, b in itertools.combinations([1, 2, 3], 2)],
        list(itertools.permutations([1, 2, 3], 2)),
        list(itertools.combinations_with_replacement([1, 2], 2)),
    )


def itertools_groupby(x):
    runs = [(key, len(list(group))) for key, group in itertools.groupby([1, 1, 2, 3, 3, 3])]
    return x + len(runs), runs


def itertools_islice_of_count(x):
    return [x * v for v in itertools.islice(itertools.count(1), 3)], list(
        itertools.islice(range(10), 2, 8, 2)
    )


def itertools_pairwise_tensors(x):
    return [a * b for a, b in itertools.pairwise([x, x + 1, x + 2])]


def itertools_starmap(x):
    return list(itertools.starmap(operator.add, [(x, 1), (x, 2)])), list(
        itertools.starmap(pow, [(2, 3)])
    )


def itertools_takewhile_dropwhile(x):
    kept = sum(itertools.takewhile(lambda v: v < 3, [1, 2, 3, 1]))
    return x + kept, list(itertools.dropwhile(lambda v: v < 3, [1, 2, 3, 1]))


def itertools_compress_filterfalse_cycle(x):
    cycle = itertools.cycle([1, 2])
    picked = list(itertools.compress([x, x + 1, x + 2], [1, 0, 1]))
    return picked, list(itertools.filterfalse(lambda v: v % 2, range(5))), x * next(cycle)


def itertools_zip_longest_repeat(x):
    pairs = list(itertools.zip_longest([1, 2, 3], [x], fillvalue=0))
    return pairs, [x + v for v in itertools.repeat(2, 2)]


# ----- functools --------------------------------------------------------------------------
def _add_scaled(a, b, c):
    return a + b * c


_GLOBAL_PARTIAL = functools.partial(functools.partial(_add_scaled, b=2), c=5)


@functools.lru_cache(maxsize=None)  # noqa: UP033 - the lru_cache wrapper itself
def _doubled(n):
    return n * 2


class _Lazy:
    def __init__(self, value):
        self.value = value

    @functools.cached_property
    def doubled(self):
        return self.value * 2


_LAZY = _Lazy(3)


def functools_reduce(x):
    return functools.reduce(operator.add, [x, x, x]), functools.reduce(
        lambda a, b: a * b, [1, 2, 3], 10
    )


def functools_partial_of_partial(x):
    inner = functools.partial(_add_scaled, x)
    outer = functools.partial(inner, c=3)
    return outer(2), outer.func is _add_scaled, outer.keywords, _GLOBAL_PARTIAL(x)


def functools_lru_cache_and_cached_property(x):
    return x * _doubled(3) + _LAZY.doubled


# ----- classes ------------------------------------------------------------------------------
class WithNew:
    def __new__(cls, value):
        obj = super().__new__(cls)
        obj.extra = value + 1
        return obj

    def __init__(self, value):
        self.value = value


class Stored:
    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return obj.__dict__.get(self.name, 0) + 1

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value * 10


class WithDescriptor:
    field = Stored()


class WithProperty:
    def __init__(self):
        self._value = 1

    @property
    def value(self):
        return self._value

    @value.setter
    def value(self, new):
        self._value = new * 2

    @value.deleter
    def value(self):
        self._value = 0


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a


class Holder:
    pass


def class_with_own_new(x):
    o = WithNew(2)
    return x * o.value + o.extra


def data_descriptor_with_set_name(x):
    h = WithDescriptor()
    h.field = 2
    return x * h.field, WithDescriptor.field.name


def property_setter_and_deleter(x):
    p = WithProperty()
    p.value = 3
    before = p.value
    del p.value
    return x * before + p.value


def slots_class(x):
    s = Slotted(2)
    s.b = 3
    return x * s.a + s.b, hasattr(s, "c")


def delete_attribute_of_object_made_in_frame(x):
    h = Holder()
    h.a = x
    h.b = 2
    del h.a
    return x * h.b, hasattr(h, "a")


def classes_made_in_frame_compare_bases(x):
    class Base:
        scale = 1

        def f(self):
            return self.scale

    class Middle(Base):
        scale = 2

    class Leaf(Middle):
        def f(self):
            return super().f() * 10

    return x * Leaf().f(), Leaf.__mro__[1].__name__, Leaf.__bases__ == (Middle,)


def weakref_to_object_made_in_frame(x):
    p = Holder()
    p.a = 3
    ref = weakref.ref(p)
    return x * ref().a


def sequences_of_classes_compare_by_identity(x, kinds):
    same = kinds == (Holder, 1)
    return x + 1 if same else x - 1, [Holder] == [Holder], (x, 1) == (x, 1), [Holder] != (Holder,)


# ----- function attributes ------------------------------------------------------------------
def _with_defaults(a, b=2, *, c=3):
    "docstring"
    return a


def function_dunder_attributes(x):
    f = _with_defaults
    scaled = x * f.__defaults__[0] + f.__kwdefaults__["c"]
    return scaled, f.__name__, f.__qualname__, f.__module__, f.__doc__, f.__code__.co_argcount


# ----- stdlib functions, strings, enums, dataclasses ---------------------------------------
class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Mode(str, enum.Enum):  # noqa: UP042 - a str mixin enum
    TRAIN = "train"
    EVAL = "eval"


class Permission(enum.IntFlag):
    READ = 1
    WRITE = 2


@dataclasses.dataclass
class Config:
    a: int
    b: float = 2.0
    c: list = dataclasses.field(default_factory=list)


def math_functions_fold(x):
    folded = (
        math.sqrt(4) + math.floor(2.5) + math.gcd(12, 8) + math.factorial(3)
        + math.prod([1, 2, 3]) + math.comb(4, 2) + math.isqrt(10) + math.hypot(3, 4)
        + math.copysign(1, -2) + math.dist([0, 0], [3, 4]) + math.lcm(4, 6) + math.log2(8)
    )  # fmt: skip
    return x * folded, math.isclose(1.0, 1.0), math.isinf(math.inf)


def python_builtins_and_c_functions(x):
    return (
        x * sys.getrecursionlimit() / 1000,
        keyword.iskeyword("for"),
        divmod(7, 2),
        pow(2, 3, 5),
        round(2.567, 2),
        ord("a"),
        chr(98),
        hex(255),
        int("ff", 16),
    )


def string_methods_and_formatting(x):
    s = "Hello, World"
    n = x.shape[0]
    percent = "%d %s" % (n, "q")  # noqa: UP031 - %-formatting in captured code
    formatted = f"{n}-{n:03d}-{3.14159:.2f}-{'s'!r}", "{}_{k}".format(n, k="v"), percent
    return x + len(s), s.lower(), s.split(", "), s.partition(","), s.zfill(14), formatted


def enum_members_and_flags(x):
    c = Color.RED
    y = x * c.value if c is Color.RED else x
    flags = Permission.READ | Permission.WRITE
    mode = Mode("eval")
    return y, c.name, Color(2), Color["GREEN"], list(Color), int(flags), mode == "eval"


def dataclass_fields_replace_asdict(x):
    d = Config(1)
    e = dataclasses.replace(d, a=3)
    names = [f.name for f in dataclasses.fields(d)]
    return x * e.a + d.b, names, dataclasses.asdict(e), dataclasses.astuple(d), d == Config(1)


# ----- match statements and `in` with user equality -----------------------------------------
@dataclasses.dataclass
class Point:
    x: int
    y: int


class Box:
    __match_args__ = ("w", "h")

    def __init__(self, w, h):
        self.w, self.h = w, h


class Version:
    def __init__(self, number):
        self.number = number

    def __eq__(self, other):
        return isinstance(other, Version) and self.number == other.number

    __hash__ = None


def _describe(value):
    match value:
        case {"k": int(n)}:
            return n
        case [a, b, *rest]:
            return a + b + len(rest)
        case (1 | 2) as small:
            return small * 10
        case str() if len(value) > 2:
            return 100
        case _:
            return -1


def match_literal_mapping_and_sequence_patterns(x):
    found = [_describe(v) for v in ({"k": 3}, [1, 2, 3, 4], 2, "long", "s", {"q": 1}, (5, 6))]
    return x * sum(found), found


def match_class_patterns_by_match_args_and_keywords(x):
    def area(p):
        match p:
            case Point(0, y):
                return y
            case Point(x=px, y=0):
                return px * 10
            case Box(w, h=3):
                return w
            case Point(a, b):
                return a * b

    return x * area(Point(0, 5)) + area(Point(3, 0)) + area(Box(2, 3)) + area(Point(2, 2))


def match_nested_patterns_with_captures(x):
    match {"a": [1, (2, 3)], "b": "s"}:
        case {"a": [1, (p, q)], "b": str() as t}:
            return x * (p + q) + len(t)
    return x


def match_on_tensor_and_its_shape(x):
    match x:
        case torch.Tensor():
            y = x + 1
    match x.shape:
        case (n,):
            return y * n
        case (n, m):
            return y * m
    return y


def match_mapping_pattern_does_not_run_a_default_factory(x):
    d = collections.defaultdict(int, a=1)
    match d:
        case {"zz": v}:
            return x * 100, dict(d)
        case {"a": v}:
            return x * v, dict(d)


def match_argument_by_class(x, obj):
    match obj:
        case Box(w, h):
            return x * w + h
        case Point(x=a):
            return x - a
        case str(s):
            return x + len(s)
    return x


def match_argument_mapping(x, config):
    match config:
        case {"mode": "a", "scale": s}:
            return x * s
        case {"mode": m, **rest}:
            return x + len(rest) + len(m)
    return x


def in_list_of_objects_with_their_own_equality(x):
    versions = [Version(1), Version(2)]
    y = x + 1 if Version(2) in versions else x - 1
    return y, Version(5) in versions, Version(1) not in versions


def in_list_of_dataclasses(x, points):
    return x + 1 if Point(1, 2) in points else x - 1


# ----- closures leaving the frame -----------------------------------------------------------
_CALLBACKS = []


def _make_adder(k):
    def add(v):
        return v + k

    return add


def closure_stored_in_a_global_list(x):
    k = 3
    _CALLBACKS.append(lambda v: v * k)
    return _CALLBACKS[-1](x), len(_CALLBACKS) > 0


def closure_over_a_size_returned(x):
    k = x.shape[0]

    def scale(v):
        return v * k

    return x + 1, scale


def closures_from_a_factory_returned(x):
    by_size, by_tensor = _make_adder(x.shape[0]), _make_adder(x * 2)
    return by_size, by_tensor, by_size(x)


def closures_sharing_a_cell_returned(x):
    items = [1]

    def get():
        return items

    def put(value):
        items.append(value)

    items.append(2)
    return x + 1, get, put


# ----- iter(function, sentinel) --------------------------------------------------------------
def iter_of_a_bound_method_until_a_sentinel(x):
    source = iter([1, 2, 3, 0, 4])
    return x + sum(iter(source.__next__, 0)), list(source)


def iter_of_a_closure_until_a_sentinel(x):
    values = [3, 2, 1, 0, 5]

    def take():
        return values.pop(0)

    for value in iter(take, 0):
        x = x * value
    return x, values


# ----- sets: subclasses' operators, early-stopping queries, operand errors ------------------
class PlainSetSubclass(set):
    pass


class PlainFrozenSubclass(frozenset):
    pass


class AddOneSet(set):
    def add(self, item):
        return super().add(item + 1)


def _set_algebra(kind):
    p, q = kind("abc"), kind("bef")
    return [
        sorted(p - q), sorted(p | q), sorted(p & q), sorted(p ^ q),
        p < q, kind("ab") < p, p <= p, p >= kind("ab"), p == set("abc"), p != frozenset("abc"),
    ]  # fmt: skip


def set_subclass_add_calling_super(x):
    s = AddOneSet([1, 2])
    s.add(3)
    return x + (s == {1, 2, 4}), sorted(s)


def set_and_frozenset_subclass_algebra(x):
    return x + 1, _set_algebra(PlainSetSubclass), _set_algebra(PlainFrozenSubclass)


def set_subclass_equality_dunders_across_kinds(x):
    a = PlainFrozenSubclass("abc")
    kinds = (PlainFrozenSubclass, set, frozenset, PlainSetSubclass)
    return x + 1, [a == kind(a) for kind in kinds], a.__eq__(set(a)), set.__eq__(set(a), a)


def set_isdisjoint_stops_at_the_first_common_item(x):
    steps = [0]

    def numbers():
        for value in (7, 2, 9, 1):
            steps[0] += 1
            yield value

    s = {2, 5}
    disjoint = s.isdisjoint(numbers())
    superset = {7, 2, 1}.issuperset(numbers())
    return x + steps[0], disjoint, superset


def set_operator_with_a_wrong_operand_raises_type_error(x):
    s = {x}
    messages = []
    for attempt in (lambda: s - 1, lambda: s | [1]):
        try:
            attempt()
        except TypeError as error:
            messages.append(str(error))
    return x + len(messages), messages


PROGRAMS = {
    fn.__name__: (fn, _one)
    for fn in (
        list_subclass_getitem_and_len,
        tuple_subclass_method,
        dict_subclass_getitem_calls_super,
        dict_subclass_missing,
        set_subclass_methods,
        set_subclass_sorted_iteration,
        set_subclass_of_tensors,
        frozenset_subclass_method,
        defaultdict_subclass,
        defaultdict_subclass_with_items,
        list_subclass_iter_override,
        ordered_dict_subclass_method,
        tuple_subclass_new_and_operator,
        namedtuple_made_in_frame_replace_asdict,
        namedtuple_defaults_and_fields,
        typed_namedtuple_method,
        namedtuple_unpack_count_index,
        operator_itemgetter,
        operator_attrgetter_dotted,
        operator_methodcaller,
        operator_itemgetter_as_sort_key,
        itertools_accumulate,
        itertools_accumulate_tensors,
        itertools_chain_from_iterable,
        itertools_product_with_repeat,
        itertools_combinations_permutations,
        itertools_groupby,
        itertools_islice_of_count,
        itertools_pairwise_tensors,
        itertools_starmap,
        itertools_takewhile_dropwhile,
        itertools_compress_filterfalse_cycle,
        itertools_zip_longest_repeat,
        functools_reduce,
        functools_lru_cache_and_cached_property,
        class_with_own_new,
        data_descriptor_with_set_name,
        property_setter_and_deleter,
        slots_class,
        delete_attribute_of_object_made_in_frame,
        classes_made_in_frame_compare_bases,
        weakref_to_object_made_in_frame,
        function_dunder_attributes,
        math_functions_fold,
        python_builtins_and_c_functions,
        string_methods_and_formatting,
        enum_members_and_flags,
        dataclass_fields_replace_asdict,
        match_literal_mapping_and_sequence_patterns,
        match_class_patterns_by_match_args_and_keywords,
        match_nested_patterns_with_captures,
        match_on_tensor_and_its_shape,
        match_mapping_pattern_does_not_run_a_default_factory,
        in_list_of_objects_with_their_own_equality,
        closure_stored_in_a_global_list,
        iter_of_a_bound_method_until_a_sentinel,
        iter_of_a_closure_until_a_sentinel,
        set_subclass_add_calling_super,
        set_and_frozenset_subclass_algebra,
        set_subclass_equality_dunders_across_kinds,
        set_operator_with_a_wrong_operand_raises_type_error,
    )
}
PROGRAMS["namedtuple_argument_replace_and_make"] = (
    namedtuple_argument_replace_and_make,
    lambda: (Triple(torch.randn(3), 2),),
)
PROGRAMS["sequences_of_classes_compare_by_identity"] = (
    sequences_of_classes_compare_by_identity,
    lambda: (torch.randn(4), (Holder, 1)),
)


def _calls(fn, *arguments):
    """Arguments for each call in turn (a new one each call of the result)."""
    pending = iter(arguments)
    return fn, lambda: (torch.randn(4), next(pending))


# programs whose argument changes between calls: recompiled as torch.compile recompiles
SEQUENCES = {
    "match_argument_by_class": _calls(
        match_argument_by_class, Box(2, 3), Point(1, 2), Box(4, 5), "abc"
    ),
    "match_argument_mapping": _calls(
        match_argument_mapping, {"mode": "a", "scale": 2}, {"mode": "b"}, {"mode": "c", "z": 1}
    ),
    "in_list_of_dataclasses": _calls(
        in_list_of_dataclasses, [Point(1, 2)], [Point(3, 4)], [Point(0, 0), Point(1, 2)]
    ),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_user_type_programs_count_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_user_type_programs_recompile_like_torch(name):
    fn, _ = SEQUENCES[name]
    arguments = [SEQUENCES[name][1]() for _ in range(3)]  # each side sees the same three
    calls = iter(arguments * 2)
    check_like_torch(fn, lambda: next(calls), calls=3)


def test_set_subclass_made_in_frame_keeps_its_type_and_algebra_gives_a_set(check):
    # torch.compile returns the subclass as a plain set here; eager is the reference
    check(set_subclass_returned_and_algebra, torch.randn(4))


@pytest.mark.parametrize("kinds", [(Holder, 1), (Slotted, 1), [Holder, 1], (Holder,)])
def test_tuple_equality_of_classes_compares_items_by_identity(check, kinds):
    check(sequences_of_classes_compare_by_identity, torch.randn(4), kinds)


def _called(result, x):
    """The result with each function in it called (on x), for comparing with eager's."""
    return [item(x) if callable(item) else item for item in result]


@pytest.mark.parametrize("fn", [closure_over_a_size_returned, closures_from_a_factory_returned])
def test_closures_made_while_capturing_are_returned_with_their_cells(backend, fn):
    compiled = dynamo_capture.optimize(fn, backend=backend)
    for _ in range(2):
        x = torch.randn(4)
        torch.testing.assert_close(_called(compiled(x), x), _called(fn(x), x))
    assert backend.frame_count == 1


def test_closures_sharing_a_cell_share_it_when_returned(backend):
    compiled = dynamo_capture.optimize(closures_sharing_a_cell_returned, backend=backend)
    _, get, put = compiled(torch.randn(4))
    put(7)
    assert get() == [1, 2, 7]
    assert get.__closure__[0] is put.__closure__[0]
    assert backend.frame_count == 1


def test_a_returned_closure_writing_its_cell_keeps_eagers_cell():
    def counter(x):
        n = 0

        def bump():
            nonlocal n
            n += 1
            return n

        bump()
        return x + n, bump

    compiled = dynamo_capture.optimize(counter, backend=CountingBackend())
    got, bump = compiled(torch.zeros(2))
    torch.testing.assert_close(got, torch.ones(2))
    assert (bump(), bump()) == (2, 3)


def test_iter_with_a_sentinel_leaving_the_frame_runs_eagerly(backend):
    def fn(x):
        values = [3, 2, 0, 5]
        iterator = iter(lambda: values.pop(0), 0)
        return x + 1, iterator, values

    got, iterator, values = dynamo_capture.optimize(fn, backend=backend)(torch.zeros(2))
    torch.testing.assert_close(got, torch.ones(2))
    assert (list(iterator), values) == ([3, 2], [5])


# programs where torch.compile's results differ from eager's: eager is the reference
@pytest.mark.parametrize(
    "fn", [set_isdisjoint_stops_at_the_first_common_item, functools_partial_of_partial]
)
def test_user_type_programs_equal_eager(check, fn):
    check(fn, torch.randn(4))


class DoublingArgumentList(list):
    def __getitem__(self, index):
        return super().__getitem__(index) * 2


def test_slice_of_a_list_subclass_argument_runs_its_getitem_once(backend):
    # l[1:] is the override's result ([3] * 2), whose [0] is a plain list's item
    def fn(x, items):
        return x * items[1:][0] + items[0]

    compiled = dynamo_capture.optimize(fn, backend=backend)
    for _ in range(2):
        items = DoublingArgumentList([2, 3])
        torch.testing.assert_close(compiled(torch.ones(2), items), fn(torch.ones(2), items))


class ProtocolArgumentList(list):
    def __len__(self):
        return 10

    def __iter__(self):
        return iter([7, 7])

    def __contains__(self, value):
        return value == 99


def test_protocol_methods_of_a_list_subclass_argument_are_its_own(backend):
    def fn(x, items):
        return x + len(items) + sum(items) + (99 in items) + (2 in items), list(items)

    compiled = dynamo_capture.optimize(fn, backend=backend)
    for _ in range(2):
        items = ProtocolArgumentList([1, 2])
        got, expected = compiled(torch.zeros(1), items), fn(torch.zeros(1), items)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
