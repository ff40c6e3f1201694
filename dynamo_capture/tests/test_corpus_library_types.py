"""Types of the standard library and builtin subclasses in captured frames: math / sys /
keyword on constants and sizes, copy, dataclasses (fields, replace, frozen), enum
members, namedtuples made in the frame (_replace, _asdict, _make), subclasses of tuple,
list, dict, str, int and float with their own __new__ / __init__ and methods,
metaclasses with __call__, __init_subclass__, __class_getitem__, super() in classmethods
and staticmethods, descriptors and slots.

Each program gives eager's results and torch.compile's graph and op counts (two calls
each, fresh arguments). Library calls: test_corpus_library_calls.py.
"""

from __future__ import annotations

import abc
import collections
import collections.abc
import copy
import dataclasses
import enum
import functools
import keyword
import math
import sys
import typing

import pytest
import torch
from torchcheck import check_like_torch, program_registry

PROGRAMS, program = program_registry()


def r(*shape):
    return torch.randn(*shape)


@program()
def m_math_consts(x):
    return x * math.pi + math.e + math.tau + math.inf * 0 + math.isinf(math.inf)


@program()
def m_math_funcs(x):
    return (
        x * math.sqrt(16)
        + math.log(math.e)
        + math.exp(0)
        + math.floor(2.7)
        + math.ceil(2.1)
        + math.gcd(12, 18)
        + math.factorial(4)
    )


@program()
def m_math_more(x):
    return (
        x
        + math.prod([1, 2, 3])
        + math.comb(5, 2)
        + math.perm(4, 2)
        + math.isclose(1.0, 1.0 + 1e-12)
        + math.copysign(1, -0.0)
        + math.fabs(-2)
        + math.fsum([0.1] * 10)
        + math.hypot(3, 4)
        + math.log2(8)
        + math.log10(100)
        + math.trunc(-2.5)
        + math.isqrt(17)
        + math.lcm(4, 6)
    )


@program()
def m_math_on_shape(x):
    n = x.shape[0]
    return x * math.sqrt(n) + math.log2(n) + math.floor(n / 2) + math.ceil(n / 2)


@program(lambda: r(5))
def m_math_on_sym_shape_calls(x):
    return x * math.sqrt(x.shape[0]) + math.ceil(x.shape[0] / 4)


@program()
def m_math_isnan_isfinite(x):
    return (
        x
        + math.isnan(float("nan"))
        + math.isfinite(1.0) * 2
        + math.radians(180)
        + math.degrees(math.pi)
        + math.atan2(1, 1)
        + math.sin(0)
        + math.cos(0)
        + math.tanh(0)
        + math.pow(2, 3)
        + math.fmod(7, 3)
        + math.modf(2.5)[0]
        + math.frexp(8)[1]
        + math.ldexp(1, 3)
    )


@program()
def m_sys(x):
    return x + (sys.getrecursionlimit() > 10) + (sys.maxsize > 2**31) + len(
        sys.version_info[:2]
    ) + (sys.platform == "linux") + (sys.byteorder == "little"), sys.version_info >= (3, 8)


@program()
def m_keyword(x):
    return (
        x + keyword.iskeyword("for") + keyword.iskeyword("foo") * 2 + ("if" in keyword.kwlist) * 4
    )


@program()
def c_copy_dict(x):
    a = {"w": x}
    b = copy.copy(a)
    b["v"] = x + 1
    return sorted(a), b["v"]


@program()
def c_deepcopy_list_tensors(x):
    a = [x, [x * 2]]
    b = copy.deepcopy(a)
    return b[0] + b[1][0]


@program()
def c_deepcopy_dict_ints(x):
    a = {"n": [1, 2], "m": {"k": 3}}
    b = copy.deepcopy(a)
    b["n"].append(3)
    return x + len(a["n"]) + len(b["n"]) + b["m"]["k"]


@dataclasses.dataclass
class _Cfg:
    scale: float = 2.0
    shift: float = 1.0
    names: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _FCfg:
    a: int = 1
    b: int = 2


@program()
def d_fields(x):
    return x + len(dataclasses.fields(_Cfg)), [f.name for f in dataclasses.fields(_Cfg)]


@program()
def d_fields_instance(x):
    c = _Cfg(3.0)
    return sum(getattr(c, f.name) for f in dataclasses.fields(c) if f.name != "names") * x


@program()
def d_replace(x):
    c = _FCfg()
    c2 = dataclasses.replace(c, b=5)
    return x * c2.b + c.b, c2


@program()
def d_asdict_astuple(x):
    c = _FCfg(3, 4)
    return x * dataclasses.asdict(c)["a"] + dataclasses.astuple(c)[1]


@program()
def d_is_dataclass(x):
    return (
        x
        + dataclasses.is_dataclass(_Cfg)
        + dataclasses.is_dataclass(_Cfg()) * 2
        + dataclasses.is_dataclass(3) * 4
    )


@program()
def d_eq_repr(x):
    a, b = _FCfg(1, 2), _FCfg(1, 2)
    return x + (a == b), repr(a)


@program()
def d_default_factory(x):
    c = _Cfg()
    c.names.append("a")
    return x * len(c.names)


@program()
def d_frozen_setattr_raises(x):
    c = _FCfg()
    try:
        c.a = 3
    except dataclasses.FrozenInstanceError:
        return x + 1
    return x


class _Color(enum.Enum):
    RED = 1
    GREEN = 2


class _Flag(enum.IntFlag):
    A = 1
    B = 2


class _Mode(str, enum.Enum):  # noqa: UP042 - the pattern under test
    TRAIN = "train"
    EVAL = "eval"


class _Auto(enum.Enum):
    X = enum.auto()
    Y = enum.auto()


@program()
def e_members_value(x):
    return x * _Color.GREEN.value + (_Color.RED.name == "RED"), _Color.RED is _Color(1)


@program()
def e_compare(x):
    c = _Color.RED
    return (x + 1) if c == _Color.RED else x


@program()
def e_iterate(x):
    return [x * c.value for c in _Color], len(_Color)


@program()
def e_lookup_by_name(x):
    return x * _Color["GREEN"].value


@program()
def e_intflag(x):
    f = _Flag.A | _Flag.B
    return x * int(f) + (_Flag.A in f)


@program()
def e_str_enum(x):
    m = _Mode.TRAIN
    return (x * 2 if m == "train" else x), m.value.upper()


@program()
def e_auto(x):
    return x * _Auto.Y.value


@program(lambda: r(3), lambda: _Color.GREEN)
def e_arg(x, c):
    return x * c.value if c is _Color.GREEN else x


_NT = collections.namedtuple("_NT", ["a", "b"])


class _TNT(typing.NamedTuple):
    a: torch.Tensor
    b: int = 3

    def total(self):
        return self.a * self.b


@program()
def n_namedtuple_in_frame(x):
    Pt = collections.namedtuple("Pt", "x y")
    p = Pt(x, 2)
    return p.x * p.y, p._fields


@program()
def n_typing_namedtuple_in_frame(x):
    class Pair(typing.NamedTuple):
        a: torch.Tensor
        b: int = 2

    p = Pair(x)
    return p.a * p.b


@program()
def n_replace(x):
    p = _NT(x, 2)
    q = p._replace(b=5)
    return q.a * q.b, p.b


@program()
def n_asdict(x):
    p = _NT(x, 3)
    d = p._asdict()
    return d["a"] * d["b"], list(d)


@program()
def n_make(x):
    p = _NT._make([x, 4])
    return p.a + p.b


@program()
def n_typing_method_default(x):
    return _TNT(x).total(), _TNT(x, 5)._replace(b=1).total()


@program()
def n_unpack_index(x):
    a, b = _NT(x, 2)
    return a * b + _NT(x, 3)[1]


@program()
def n_namedtuple_defaults(x):
    Q = collections.namedtuple("Q", ["a", "b"], defaults=[7])
    return x * Q(1).b


@program()
def n_isinstance_tuple(x):
    p = _NT(x, 1)
    return x + isinstance(p, tuple) + isinstance(p, _NT) * 2, len(p), p == (p.a, 1)


@program()
def n_return_namedtuple(x):
    return _NT(x + 1, x * 2)


class Shape(tuple):
    def __new__(cls, *dims):
        return super().__new__(cls, dims)

    def numel(self):
        return math.prod(self)

    @property
    def rank(self):
        return len(self)


@program()
def s_tuple_subclass_global(x):
    return x * _SHAPE.numel(), len(_SHAPE), tuple(_SHAPE)


_SHAPE = Shape(2, 3)


class Stack(list):
    def push(self, v):
        self.append(v)
        return self

    def top(self):
        return self[-1]


@program()
def s_list_subclass(x):
    s = Stack()
    s.push(x).push(x * 2)
    return s.top() + s[0], len(s), type(s).__name__


@program()
def s_list_subclass_init(x):
    s = Stack([x, x + 1])
    s.extend([x * 3])
    return sum(s), isinstance(s, list)


class AttrDict(dict):
    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k)  # noqa: B904 - the pattern under test

    def __setattr__(self, k, v):
        self[k] = v


@program()
def s_attrdict(x):
    d = AttrDict(a=x)
    d.b = x * 2
    return d.a + d.b, sorted(d.keys())


class DefaultZero(dict):
    def __missing__(self, key):
        return 0


@program()
def s_dict_missing(x):
    d = DefaultZero(a=2)
    return x * d["a"] + d["zz"]


class Name(str):
    def __new__(cls, v):
        return super().__new__(cls, v.lower())

    def shout(self):
        return self.upper() + "!"


@program()
def s_str_subclass(x):
    n = Name("ABC")
    return x * len(n), n.shout(), n == "abc", n + "d"


class Meters(float):
    def to_cm(self):
        return self * 100


@program()
def s_float_subclass(x):
    return x * Meters(0.5).to_cm()


class Idx(int):
    def __new__(cls, v):
        return super().__new__(cls, v * 2)


@program()
def s_int_subclass_new(x):
    i = Idx(3)
    return x * i + (i == 6), isinstance(i, int)


class Registry(type):
    classes = {}

    def __new__(mcls, name, bases, ns):
        cls = super().__new__(mcls, name, bases, ns)
        mcls.classes[name] = cls
        return cls


class CountingMeta(type):
    def __call__(cls, *args, **kwargs):
        obj = super().__call__(*args, **kwargs)
        obj.made_by_meta = True
        return obj


class WithMeta(metaclass=CountingMeta):
    def __init__(self, k):
        self.k = k


class SingletonMeta(type):
    _inst = {}

    def __call__(cls, *a):
        if cls not in cls._inst:
            cls._inst[cls] = super().__call__(*a)
        return cls._inst[cls]


class Single(metaclass=SingletonMeta):
    def __init__(self, v=4):
        self.v = v


Single()


@program()
def s_singleton_meta(x):
    return x * Single().v


class Base:
    registry = []

    def __init_subclass__(cls, tag="none", **kw):
        super().__init_subclass__(**kw)
        cls.tag = tag
        Base.registry.append(tag)


class Child(Base, tag="child"):
    pass


@program()
def s_init_subclass_global(x):
    return x * len(Child.tag), Child.tag


@program()
def s_init_subclass_in_frame(x):
    class Tmp(Base, tag="tmp"):
        pass

    Base.registry.pop()
    return x * len(Tmp.tag)


class Box:
    def __class_getitem__(cls, item):
        return f"Box[{item.__name__}]"


@program()
def s_class_getitem(x):
    return x * len(Box[int]), Box[float]


class Gen(typing.Generic[typing.TypeVar("T")]):
    def __init__(self, v):
        self.v = v


@program()
def s_generic_alias(x):
    g = Gen[int](3)
    return x * g.v


class A:
    scale = 2

    @classmethod
    def make(cls, x):
        return x * cls.scale

    @staticmethod
    def helper(x):
        return x + 1


class B(A):
    scale = 3

    @classmethod
    def make(cls, x):
        return super().make(x) + 1

    @staticmethod
    def helper(x):
        return A.helper(x) * 2


@program()
def s_super_classmethod(x):
    return B.make(x), B.helper(x)


class C(B):
    @classmethod
    def make(cls, x):
        return super(B, cls).make(x) - 1


@program()
def s_super_two_arg_classmethod(x):
    return C.make(x)


class M1:
    def f(self, x):
        return x + 1


class M2(M1):
    def f(self, x):
        return super().f(x) * 2


class M3(M1):
    def f(self, x):
        return super().f(x) - 3


class M4(M2, M3):
    def f(self, x):
        return super().f(x) / 2


@program()
def s_mro_diamond_super(x):
    return M4().f(x), [k.__name__ for k in M4.__mro__]


class WithNew:
    def __new__(cls, v):
        obj = super().__new__(cls)
        obj.raw = v
        return obj

    def __init__(self, v):
        self.v = v * 2


@program()
def s_user_new(x):
    o = WithNew(3)
    return x * o.v + o.raw


class Abstract(abc.ABC):
    @abc.abstractmethod
    def go(self, x): ...
    def run(self, x):
        return self.go(x) + 1


class Concrete(Abstract):
    def go(self, x):
        return x * 3


@program()
def s_abc(x):
    c = Concrete()
    return c.run(x), isinstance(c, Abstract)


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a
        self.b = a * 2


@program()
def s_slots(x):
    s = Slotted(x)
    return s.a + s.b


class Prop:
    def __init__(self):
        self._v = 1

    @property
    def v(self):
        return self._v

    @v.setter
    def v(self, val):
        self._v = val * 10


@program()
def s_property_setter(x):
    p = Prop()
    p.v = 2
    return x * p.v


class Desc:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(obj, self.name, 0) + 1

    def __set__(self, obj, v):
        setattr(obj, self.name, v)


class HasDesc:
    d = Desc()


@program()
def s_descriptor(x):
    h = HasDesc()
    h.d = 5
    return x * h.d


class OrderedPoint(tuple):
    def __new__(cls, a, b):
        return tuple.__new__(cls, (a, b))

    def __add__(self, o):
        return OrderedPoint(self[0] + o[0], self[1] + o[1])


@program()
def s_tuple_subclass_add(x):
    p = OrderedPoint(x, 1) + OrderedPoint(x, 2)
    return p[0], p[1], type(p).__name__


class Vec(list):
    def __init__(self, *items):
        super().__init__(items)

    def scale(self, k):
        return Vec(*[v * k for v in self])


@program()
def s_list_subclass_init_super(x):
    v = Vec(x, x + 1).scale(2)
    return v[0] + v[1], len(v)


class OD(collections.OrderedDict):
    def first(self):
        return next(iter(self.values()))


@program()
def s_ordereddict_subclass(x):
    d = OD()
    d["a"] = x
    d["b"] = x * 2
    d.move_to_end("a")
    return d.first() + 1, list(d)


class CountDict(collections.defaultdict):
    def __init__(self):
        super().__init__(int)


@program()
def s_defaultdict_subclass(x):
    d = CountDict()
    for c in "abca":
        d[c] += 1
    return x * d["a"], dict(d)


class Counter2(collections.Counter):
    pass


@program()
def s_type_three_arg(x):
    T = type("T", (), {"k": 3, "f": lambda self, v: v * self.k})
    return T().f(x)


@program()
def s_classmethod_alt_constructor(x):
    class Cfg:
        def __init__(self, a):
            self.a = a

        @classmethod
        def default(cls):
            return cls(4)

    return x * Cfg.default().a


@program()
def s_staticmethod_via_instance(x):
    return A().helper(x), B().make(x)


@program()
def s_dunder_call_eq_hash(x):
    class K:
        def __init__(self, v):
            self.v = v

        def __eq__(self, o):
            return self.v == o.v

        def __hash__(self):
            return hash(self.v)

        def __call__(self, t):
            return t * self.v

    d = {K(1): "a"}
    return K(3)(x), K(1) in d, K(1) == K(1)


@program()
def s_contains_len_iter(x):
    class Bag:
        def __init__(self, *v):
            self.v = list(v)

        def __len__(self):
            return len(self.v)

        def __iter__(self):
            return iter(self.v)

        def __contains__(self, i):
            return i in self.v

        def __getitem__(self, i):
            return self.v[i]

    b = Bag(1, 2, 3)
    return x * len(b) + sum(b) + (2 in b) + b[-1], list(b)


class Named(list):
    def __init__(self, name, items):
        super().__init__(items)
        self.name = name


class Explicit(list):
    def __init__(self, items):
        list.__init__(self, items)
        self.extend([0])


class NoSuper(list):
    def __init__(self, n):
        for i in range(n):
            self.append(i)


@program()
def f_list_subclass_no_super(x):
    return x * sum(NoSuper(3)), isinstance(NoSuper(1), list)


@program()
def f_list_subclass_returned(x):
    return Explicit([x + 1])


class Clearing(list):
    def __init__(self, items):
        super().__init__(items)
        super().__init__([items[0]])


@program()
def f_list_init_twice(x):
    return len(Clearing([x, x, x])) * x


class Cache:
    def __init__(self):
        self.k = 2

    @functools.cache  # noqa: B019 - the pattern under test
    def scaled(self, n):
        return n * 3


@program()
def f_cache_method_self_attr(x):
    return x * Cache().scaled(2)


_c = Cache()


@program()
def f_cache_method_global_instance(x):
    return x * _c.scaled(4), _c.scaled.__wrapped__.__name__


class CacheProp:
    @functools.cache  # noqa: B019 - the pattern under test
    def f(self, t):
        return t * 2


@program()
def f_cache_method_tensor_arg(x):
    return CacheProp().f(x) + 1


class DInit(dict):
    def __init__(self, t):
        super().__init__(a=t)
        self["b"] = t * 2


@program()
def f_dict_subclass_init_returned(x):
    return DInit(x + 1)


class DAttr(dict):
    def __init__(self, t):
        super().__init__(a=t)
        self.tag = "z"


@program()
def f_dict_subclass_attr_returned(x):
    d = DAttr(x + 1)
    return d, d.tag


class ODInit(collections.OrderedDict):
    def __init__(self, t):
        super().__init__()
        self["z"] = t
        self["a"] = t + 1


@program()
def f_ordereddict_subclass_init_returned(x):
    d = ODInit(x)
    d.move_to_end("z")
    return d


class LSet(dict):
    def __setitem__(self, k, v):
        super().__setitem__(k, v * 2)


@program()
def f_dict_setitem_override_returned(x):
    d = LSet()
    d["a"] = x
    return d


@program()
def f_list_subclass_break_between(x):
    e = Explicit([x])
    print("break")
    return e, len(e)


class _Meth:
    def go(self, t):
        "doc"
        return t + 1

    go.tag = 5


@program()
def f_bound_method_missing_attr(x):
    m = _Meth().go
    return x + hasattr(m, "nope"), getattr(m, "nope", 3)


class Tagged(list):
    def __init__(self, items, scale):
        super().__init__(items)
        self.scale = scale

    def scaled(self):
        return [t * self.scale for t in self]


@program()
def f_list_subclass_attr_method(x):
    t = Tagged([x, x + 1], 3)
    t.scale += 1
    return t.scaled(), t.scale


@program()
def f_list_subclass_attr_returned(x):
    return Tagged([x], 2)


class SlotList(list):
    __slots__ = ("k",)

    def __init__(self, items):
        super().__init__(items)
        self.k = 2


@program()
def f_list_subclass_slots(x):
    s = SlotList([x])
    return s[0] * s.k


class SlotOnly(list):
    __slots__ = ()


@program()
def f_list_subclass_no_dict_setattr_raises(x):
    s = SlotOnly([x])
    try:
        s.k = 1
    except AttributeError:
        return x + 1
    return x


@program()
def f_list_subclass_attr_missing(x):
    t = Tagged([x], 2)
    return x * getattr(t, "missing", 5), hasattr(t, "scale")


@program()
def f_list_subclass_del_attr(x):
    t = Tagged([x], 2)
    del t.scale
    return x + hasattr(t, "scale")


class LowerName(str):
    def __new__(cls, v):
        return super().__new__(cls, v.lower())

    def shout(self):
        return self.upper() + "!"


class PlainIndex(int):
    def double(self):
        return PlainIndex(self * 2)


class Metres(float):
    @property
    def cm(self):
        return self * 100


class Loud(int):
    def __mul__(self, o):
        print("mul")
        return int.__mul__(self, o)


class WithInit(int):
    def __init__(self, v):
        self.tag = "t"


@program()
def g_returned_str_subclass(x):
    n = LowerName("AB")
    return x + 1, n


@program()
def g_returned_twice_not_shared(x):
    return x + 1, PlainIndex(3), PlainIndex(3)


@program()
def g_int_subclass_method_chain(x):
    i = PlainIndex(2).double().double()
    return x * i, type(i).__name__, i


@program()
def g_float_property(x):
    return x * Metres(0.25).cm


@program()
def g_str_subclass_dict_key(x):
    d = {LowerName("K"): 2}
    return x * d["k"], LowerName("K") in d


@program()
def g_int_subclass_range_index(x):
    return [x * i for i in range(PlainIndex(3))], [1, 2, 3, 4][PlainIndex(1)]


@program()
def g_subclass_format_repr(x):
    return (
        x + 1,
        f"{PlainIndex(5):03d}",
        repr(LowerName("Q")),
        str(Metres(1.5)),
        "%s" % PlainIndex(2),  # noqa: UP031 - the pattern under test
    )


@program()
def g_isinstance_type(x):
    i = PlainIndex(1)
    return (
        x
        + isinstance(i, int)
        + (type(i) is PlainIndex) * 2
        + isinstance(i, PlainIndex) * 4
        + (type(i) is int) * 8
    )


@program(lambda: r(3), lambda: LowerName("ABC"))
def g_input_str_subclass(x, n):
    return x * len(n), n.shout()


@program()
def g_subclass_in_list_returned(x):
    return [PlainIndex(1), LowerName("Z")], x + 1


@program()
def g_subclass_tensor_shape_arg(x):
    return x.reshape(PlainIndex(1), PlainIndex(3)), torch.ones(PlainIndex(2))


@program()
def g_str_subclass_split_join(x):
    n = LowerName("A.B.C")
    return x * len(n.split(".")), "-".join([n, n]), n.startswith("a")


@program()
def g_subclass_bool_and_hash(x):
    return x + bool(PlainIndex(0)) + (hash(PlainIndex(7)) == 7)


@functools.total_ordering
class _V:
    def __init__(self, v):
        self.v = v

    def __eq__(self, o):
        return self.v == o.v

    def __lt__(self, o):
        return self.v < o.v


@program()
def j_total_ordering(x):
    a, b = _V(1), _V(2)
    return x + (a <= b) + (b >= a) * 2 + (a > b) * 4


@program()
def j_sorted_user_lt(x):
    vs = sorted([_V(3), _V(1), _V(2)])
    return x * vs[0].v + vs[-1].v, max([_V(1), _V(5)]).v


@dataclasses.dataclass(order=True, frozen=True)
class _Ord:
    p: int
    q: str = "a"


@program()
def j_dataclass_order(x):
    items = sorted([_Ord(2), _Ord(1, "z"), _Ord(1, "b")])
    return x * items[0].p, items[0].q, _Ord(1) < _Ord(2)


class _Phase(str, enum.Enum):  # noqa: UP042 - the pattern under test
    TRAIN = "train"
    EVAL = "eval"


@program()
def j_str_enum_format(x):
    m = _Phase.EVAL
    return x + 1, f"{m.value}", m.name.lower(), str(m.value), m == "eval", m in ("eval", "x")


class _Lvl(enum.IntEnum):
    A = 0
    B = 1


@program()
def j_enum_members_dict(x):
    return x * len(_Lvl.__members__), list(_Lvl.__members__), sorted(_Lvl, reverse=True)[0].name


@program()
def j_enum_sorted_by_value(x):
    return [x * m.value for m in sorted(_Lvl, key=lambda m: -m.value)]


class _Meta(type):
    def __call__(cls, *a, **k):
        inst = super().__call__(*a, **k)
        inst.ready = True
        return inst

    @property
    def kind(cls):
        return cls.__name__.lower()


class _UsesMeta(metaclass=_Meta):
    def __init__(self, v):
        self.v = v


@program()
def j_metaclass_property(x):
    return x * len(_UsesMeta.kind)


class _Plugin:
    registry = {}

    def __init_subclass__(cls, /, name=None, **kw):
        super().__init_subclass__(**kw)
        _Plugin.registry[name or cls.__name__] = cls


class _Alpha(_Plugin, name="alpha"):
    scale = 2


class _Beta(_Plugin):
    scale = 3


@program()
def j_registry_lookup(x):
    return x * _Plugin.registry["alpha"].scale + _Plugin.registry["_Beta"].scale, sorted(
        _Plugin.registry
    )


def _register(cls):
    cls.registered = True
    return cls


@_register
class _Deco:
    pass


@program()
def j_class_decorator_attr(x):
    return x + _Deco.registered


@program()
def j_type_self_method(x):
    class K:
        def name(self):
            return type(self).__name__ + self.__class__.__qualname__

        @classmethod
        def mro_names(cls):
            return [c.__name__ for c in cls.__mro__]

    return x + 1, K().name(), K.mro_names()


class _P1:
    @classmethod
    def build(cls, v):
        return cls.scale * v

    scale = 1


class _P2(_P1):
    scale = 2

    @classmethod
    def build(cls, v):
        return super().build(v) + super().build(v)


class _P3(_P2):
    scale = 3


@program()
def j_super_classmethod_chain(x):
    return _P3.build(x), _P2.build(x)


class _S1:
    @staticmethod
    def f(v):
        return v + 1


class _S2(_S1):
    @staticmethod
    def f(v):
        return super(_S2, _S2).f(v) * 2


@program()
def j_super_in_staticmethod_explicit(x):
    return _S2.f(x)


class _AbsProp(abc.ABC):
    @property
    @abc.abstractmethod
    def size(self): ...
    def total(self, x):
        return x * self.size


class _ConcProp(_AbsProp):
    @property
    def size(self):
        return 4


@program()
def j_abstract_property(x):
    return _ConcProp().total(x)


@program()
def j_namedtuple_subclass_method(x):
    class Pt(collections.namedtuple("Pt", "a b")):
        __slots__ = ()

        def norm(self):
            return math.hypot(self.a, self.b)

    return x * Pt(3, 4).norm()


@program()
def j_dict_subclass_methods(x):
    class Cfg(dict):
        def scale(self):
            return self.get("scale", 1)

        def with_(self, **k):
            c = Cfg(self)
            c.update(k)
            return c

    c = Cfg(scale=2).with_(shift=1)
    return x * c.scale() + c["shift"], sorted(c)


@program()
def j_str_subclass_plain_methods(x):
    class Tag(str):
        def parts(self):
            return self.split(":")

    t = Tag("a:b:c")
    return x * len(t.parts()), t.upper(), t[0], t + "!"


@program()
def j_int_subclass_arith_result_type(x):
    class N(int):
        def half(self):
            return self // 2

    n = N(9)
    return x * n.half(), type(n + 1).__name__, type(n.half()).__name__


@program()
def j_float_subclass_repr(x):
    class F(float):
        pass

    return x * F(1.5), repr(F(1.5)), F(2.5) > 2


class _MetaM(type):
    def make(cls, v):
        return cls(v)

    def describe(cls):
        return cls.__name__ + "!"

    level = 3


class _WithMetaM(metaclass=_MetaM):
    def __init__(self, v):
        self.v = v


@program()
def j_metaclass_method(x):
    return x * _WithMetaM.make(2).v, _WithMetaM.describe(), _WithMetaM.level


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_library_type_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)
