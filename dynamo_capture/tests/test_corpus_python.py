"""Small programs on Python values: constants, containers, builtins, calls, classes, closures."""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections import OrderedDict, namedtuple

import pytest
import torch

torch.manual_seed(1)
Pair = namedtuple("Pair", ["first", "second"])
Scaled = namedtuple("Scaled", "value scale", defaults=[2.0])
SCALE = 3.0
OFFSETS = (1, 2, 3)


@dataclasses.dataclass
class Config:
    hidden: int = 4
    act: str = "relu"
    scale: float = 0.5


@dataclasses.dataclass(frozen=True)
class Frozen:
    tensor: torch.Tensor
    factor: int = 2


class Accumulator:
    def __init__(self, start):
        self.total = start
        self.count = 0

    def add(self, value):
        self.total = self.total + value
        self.count += 1
        return self

    @property
    def mean(self):
        return self.total / self.count

    @staticmethod
    def double(x):
        return x * 2

    @classmethod
    def make(cls, x):
        return cls(x)


class Base:
    def transform(self, x):
        return x + 1


class Child(Base):
    def transform(self, x):
        return super().transform(x) * 2


class GrandChild(Child):
    def transform(self, x):
        return super(Child, self).transform(x) - super().transform(x)


class Vector:
    def __init__(self, data):
        self.data = data

    def __add__(self, other):
        return Vector(self.data + other.data)

    def __mul__(self, k):
        return Vector(self.data * k)

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return self.data[i]


def helper(x, k=2, *, bias=0.0):
    return x * k + bias


def recursive(x, n):
    if n == 0:
        return x
    return recursive(x + 1, n - 1)


def gen_squares(xs):
    for x in xs:
        yield x * x


def make_adder(n):
    def add(x):
        return x + n

    return add


ADD3 = make_adder(3)
PARTIAL = functools.partial(helper, k=5)


def _closures(x):
    scale = 2

    def inner(y):
        return y * scale

    counter = [0]

    def bump():
        counter[0] += 1
        return counter[0]

    bump()
    bump()
    return inner(x) + counter[0]


def _nonlocal(x):
    total = x

    def add(v):
        nonlocal total
        total = total + v

    add(1)
    add(x)
    return total


def _dict_ops(x):
    d = {"a": x, "b": x * 2}
    d["c"] = d["a"] + d["b"]
    d.update(e=x.sin())
    keys = sorted(d.keys())
    total = sum(d[k] for k in keys)
    popped = d.pop("e")
    return total, popped, len(d), "c" in d, d.get("zz", 7), list(d.items())[0][0]


def _list_ops(x):
    xs = [x, x + 1]
    xs.append(x * 2)
    xs.extend([x - 1])
    xs.insert(0, x.cos())
    last = xs.pop()
    xs.reverse()
    first, *rest = xs
    return first + last, len(rest), xs[1:3], xs[::-1][0]


def _set_ops(x):
    s = {1, 2, 3}
    s.add(4)
    t = {n for n in range(3)}
    return x * len(s | t) + (2 in s)


def _comprehensions(x):
    squares = [x * i for i in range(3) if i != 1]
    table = {f"k{i}": x + i for i in range(2)}
    nested = [[i * j for j in range(2)] for i in range(3)]
    pairs = list(zip(range(3), "abc"))
    return sum(squares), table["k1"], nested[2][1], pairs[-1][1]


def _builtins(x):
    values = [3, 1, 2]
    return (
        x * max(values) + min(values),
        abs(-2),
        any(v > 2 for v in values),
        all(v > 0 for v in values),
        len(values),
        sorted(values, reverse=True),
        list(reversed(values)),
        list(map(lambda v: v * 2, values)),
        list(filter(lambda v: v % 2, values)),
        isinstance(x, torch.Tensor),
        isinstance(values, (list, tuple)),
        hasattr(x, "shape"),
        getattr(x, "missing", 5),
        round(2.567, 2),
        divmod(7, 3),
        int("3") + float("1.5"),
        str(4) + repr("a"),
        tuple(range(2, 8, 3)),
        dict(a=1),
        type(values) is list,
        callable(helper),
        sum([x, x, x]),
        max(x.shape),
    )


def _fstrings(x):
    name = f"{x.shape[0]}x{x.shape[1]:03d}-{SCALE!r}"
    return x * len(name), name


def _calls(x):
    return (
        helper(x),
        helper(x, 3),
        helper(x, k=4, bias=1.0),
        helper(*(x, 2)),
        helper(**{"x": x, "bias": 0.5}),
        ADD3(x),
        PARTIAL(x),
        functools.partial(helper, bias=2.0)(x),
        (lambda a, b=2: a * b)(x),
        recursive(x, 4),
        operator.add(x, 1),
        operator.getitem([x, 2 * x], 1),
        functools.reduce(operator.add, [x, x, x]),
    )


def _varargs(*args, **kwargs):
    total = args[0]
    for value in args[1:]:
        total = total + value
    for key in sorted(kwargs):
        total = total * kwargs[key]
    return total, len(args), tuple(kwargs)


def _kwonly(x, *, scale=2, shift):
    return x * scale + shift


def _objects(x):
    acc = Accumulator(x)
    acc.add(x).add(2 * x)
    made = Accumulator.make(x)
    return acc.mean, acc.count, Accumulator.double(x), made.total, acc.double(1)


def _inheritance(x):
    return Child().transform(x), GrandChild().transform(x), Base().transform(x)


def _dunder(x):
    v = Vector(x) + Vector(x * 2)
    w = v * 3
    return w.data, len(w), w[0]


def _namedtuples(x):
    p = Pair(x, x + 1)
    q = p._replace(second=x) if False else Pair(first=p.second, second=p.first)
    s = Scaled(x)
    a, b = p
    return p.first + q.first, s.scale, s.value * s.scale, a - b, Pair(1, 2)


def _dataclasses(x):
    cfg = Config(hidden=8)
    frozen = Frozen(x * cfg.scale)
    return frozen.tensor * frozen.factor, cfg.hidden, cfg.act, dataclasses.is_dataclass(cfg)


def _generators(x):
    squares = list(gen_squares([1, 2, 3]))
    total = sum(x * v for v in (1, 2))
    gen = (i for i in range(4))
    first = next(gen)
    second = next(gen)
    return total + squares[-1] + first + second


def _unpacking(x):
    a, (b, c) = 1, (2, 3)
    *head, tail = [x, x + 1, x + 2]
    (first, second), third = (x, x * 2), 3
    return a + b + c + tail + len(head) + first + second + third


def _constants_folded(x):
    n = 3 * 4 - 2
    m = n // 3 + n % 3 + 2**3
    s = "ab" * 2
    t = (1, 2) + (3,)
    return x * n + m, s, t, t[1:], t.index(3), s.upper()


def _globals(x):
    return x * SCALE + OFFSETS[1] + len(OFFSETS)


def _ordered_dict(x):
    d = OrderedDict()
    d["b"] = x
    d["a"] = x * 2
    return list(d)


def _slices(x):
    s = slice(1, 3)
    items = [0, 1, 2, 3, 4]
    return x[s], items[s], items[::2], items[-2:]


def _string_methods(x):
    name = "layer.weight"
    prefix, suffix = name.split(".")
    return x * len(prefix), suffix.startswith("w"), "-".join(["a", "b"]), name.replace(".", "_")


def _while_loop(x):
    i = 0
    while i < 3:
        x = x * 2
        i += 1
    return x


def _break_continue(x):
    total = x
    for i in range(10):
        if i % 2 == 0:
            continue
        if i > 6:
            break
        total = total + i
    else:
        total = total * 100
    return total


def _for_else(x):
    for i in range(3):
        x = x + i
    else:
        x = x * 2
    return x


def _nested_loops(x):
    out = []
    for i in range(2):
        for j in range(3):
            if j == 2:
                break
            out.append(x * i + j)
    return out


def _try_nothing_raises(x):
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    finally:
        y = y * 2
    return y


def _with_no_grad(x):
    with torch.no_grad():
        y = x * 2
    z = x * 3
    return y, z, y.requires_grad, z.requires_grad


def _with_enable_grad(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * 2
        w = x + 1
    return y, w


def _set_grad_enabled(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
    return y, y.requires_grad


def _autocast(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
    return y, y.dtype


def _is_compiling(x):
    import dynamo_capture

    if dynamo_capture.is_compiling():
        return x + 1
    return x - 1


def _ternary_and_or(x):
    flag = None
    value = flag or 3
    other = flag and 4
    return x * value if other is None else x, value


def _chained_compare(x):
    n = x.shape[0]
    return x * (1 if 0 < n < 10 else 2)


def _is_none(x, y=None):
    if y is None:
        y = x * 2
    if x is not None:
        return x + y
    return y


def _enumerate_zip(x, y):
    out = 0
    for i, (a, b) in enumerate(zip(x, y)):
        out = out + a * b * i
    return out


def _dict_iteration(x):
    weights = {"a": 1.0, "b": 2.0}
    total = x
    for _key, value in weights.items():
        total = total + value
    for key in weights:
        total = total * weights[key]
    return total, list(weights.values())


def _list_input(xs):
    return sum(xs) / len(xs), xs[0] * xs[-1]


def _dict_input(d):
    return d["a"] * d["b"], sorted(d)


def _tuple_of_ints_input(x, shape):
    return x.view(shape), shape[0] * 2


def _assert(x):
    assert x.shape[0] == 3, "bad shape"
    return x + 1


def _local_import(x):
    import math as m

    from torch.nn import functional as fn

    return fn.relu(x) * m.e


def _isinstance_dispatch(x):
    def apply(v):
        if isinstance(v, (list, tuple)):
            return [apply(i) for i in v]
        if isinstance(v, dict):
            return {k: apply(i) for k, i in v.items()}
        return v * 2

    return apply([x, (x + 1, {"k": x})])


def _del_and_walrus(x):
    y = x + 1
    del y
    if (n := x.shape[0]) > 1:
        return x * n
    return x


def _star_call(x):
    parts = [x, 2]
    options = {"bias": 1.0}
    return helper(*parts, **options)


def _match_on_constants(x):
    mode = "double"
    if mode in ("double", "triple"):
        return x * {"double": 2, "triple": 3}[mode]
    return x


PROGRAMS = {
    "closures": (_closures, (torch.randn(3),)),
    "nonlocal": (_nonlocal, (torch.randn(3),)),
    "dict_ops": (_dict_ops, (torch.randn(3),)),
    "list_ops": (_list_ops, (torch.randn(3),)),
    "set_ops": (_set_ops, (torch.randn(3),)),
    "comprehensions": (_comprehensions, (torch.randn(3),)),
    "builtins": (_builtins, (torch.randn(3, 4),)),
    "fstrings": (_fstrings, (torch.randn(3, 4),)),
    "calls": (_calls, (torch.randn(3),)),
    "varargs": (_varargs, (torch.randn(2), torch.randn(2), torch.randn(2))),
    "kwonly": (lambda x: _kwonly(x, shift=1.0), (torch.randn(2),)),
    "objects": (_objects, (torch.randn(3),)),
    "inheritance": (_inheritance, (torch.randn(3),)),
    "dunder": (_dunder, (torch.randn(3),)),
    "namedtuples": (_namedtuples, (torch.randn(3),)),
    "dataclasses": (_dataclasses, (torch.randn(3),)),
    "generators": (_generators, (torch.randn(3),)),
    "unpacking": (_unpacking, (torch.randn(3),)),
    "constants_folded": (_constants_folded, (torch.randn(3),)),
    "globals": (_globals, (torch.randn(3),)),
    "ordered_dict": (_ordered_dict, (torch.randn(3),)),
    "slices": (_slices, (torch.randn(5),)),
    "string_methods": (_string_methods, (torch.randn(3),)),
    "while_loop": (_while_loop, (torch.randn(3),)),
    "break_continue": (_break_continue, (torch.randn(3),)),
    "for_else": (_for_else, (torch.randn(3),)),
    "nested_loops": (_nested_loops, (torch.randn(3),)),
    "try_nothing_raises": (_try_nothing_raises, (torch.randn(3),)),
    "with_no_grad": (_with_no_grad, (torch.randn(3, requires_grad=True),)),
    "with_enable_grad": (_with_enable_grad, (torch.randn(3, requires_grad=True),)),
    "set_grad_enabled": (_set_grad_enabled, (torch.randn(3, requires_grad=True),)),
    "autocast": (_autocast, (torch.randn(4, 8), torch.randn(8, 4))),
    "ternary_and_or": (_ternary_and_or, (torch.randn(3),)),
    "chained_compare": (_chained_compare, (torch.randn(3),)),
    "is_none_default": (_is_none, (torch.randn(3),)),
    "is_none_given": (_is_none, (torch.randn(3), torch.randn(3))),
    "enumerate_zip": (_enumerate_zip, (torch.randn(3, 2), torch.randn(3, 2))),
    "dict_iteration": (_dict_iteration, (torch.randn(3),)),
    "list_input": (_list_input, ([torch.randn(2), torch.randn(2), torch.randn(2)],)),
    "dict_input": (_dict_input, ({"a": torch.randn(2), "b": torch.randn(2)},)),
    "tuple_of_ints_input": (_tuple_of_ints_input, (torch.randn(6), (2, 3))),
    "assert": (_assert, (torch.randn(3),)),
    "local_import": (_local_import, (torch.randn(3),)),
    "isinstance_dispatch": (_isinstance_dispatch, (torch.randn(3),)),
    "del_and_walrus": (_del_and_walrus, (torch.randn(3),)),
    "star_call": (_star_call, (torch.randn(3),)),
    "match_on_constants": (_match_on_constants, (torch.randn(3),)),
    "lambda_default_closure": ((lambda x, f=lambda v: v * 3: f(x) + 1), (torch.randn(2),)),
    "int_and_float_args": ((lambda x, n, s: x * n + s), (torch.randn(2), 3, 0.5)),
    "bool_arg": ((lambda x, flag: x.relu() if flag else x.sigmoid()), (torch.randn(3), True)),
    "str_arg": ((lambda x, mode: x.sum() if mode == "sum" else x.mean()), (torch.randn(3), "mean")),
    "none_output": ((lambda x: None), (torch.randn(3),)),
    "constant_output": ((lambda x: (1, "a", 2.5, None, torch.float32)), (torch.randn(3),)),
    "return_input": ((lambda x, y: (x, y * 2, x)), (torch.randn(3), torch.randn(3))),
    "return_view": ((lambda x: (x.view(-1), x[0], x.t())), (torch.randn(2, 3),)),
    "nested_output": ((lambda x: {"a": [x, (x + 1,)], "b": {"c": x * 2}}), (torch.randn(3),)),
    "same_tensor_twice": ((lambda x: (x + 1,) * 2), (torch.randn(3),)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_python_program(name, check):
    fn, args = PROGRAMS[name]
    check(fn, *args)


def test_is_compiling_is_true_inside_capture(backend):
    import dynamo_capture

    compiled = dynamo_capture.optimize(_is_compiling, backend=backend, fullgraph=True)
    x = torch.zeros(3)
    torch.testing.assert_close(compiled(x), x + 1)
    torch.testing.assert_close(_is_compiling(x), x - 1)


def _full_signature(a, b=2, /, c=3, *args, d, e=5, **kw):
    return a * b + c + sum(args) + d * e + sum(kw.values())


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((torch.ones(2),), {"d": 1}),
        ((torch.ones(2), 3, 4, 5, 6), {"d": 2, "e": 1, "z": 7}),
        ((torch.ones(2), 3), {"c": 1, "d": 2}),
    ],
)
def test_full_signature_binding(args, kwargs, check):
    check(_full_signature, *args, **kwargs)


def test_wrong_arguments_raise_like_eager(backend):
    import dynamo_capture

    compiled = dynamo_capture.optimize(_full_signature, backend=backend)
    with pytest.raises(TypeError):
        compiled(torch.ones(2))  # d is missing


# ----- isinstance by the metaclass's own check ------------------------------------------
class _AcceptsAll(type):
    def __instancecheck__(cls, instance):
        return True


class _Anything(metaclass=_AcceptsAll):
    pass


def isinstance_of_legacy_tensor_types(x):
    wide = torch.empty(4, dtype=torch.float64)
    return (
        x + 1,
        isinstance(x, torch.FloatTensor),
        isinstance(wide, torch.DoubleTensor),
        isinstance(x, torch.LongTensor),
        isinstance(x, (int, (torch.DoubleTensor, torch.FloatTensor))),
        isinstance(3, torch.FloatTensor),
    )


def isinstance_by_a_metaclass_check(x):
    return (
        x * 2,
        isinstance(x, _Anything),
        isinstance([x], _Anything),
        isinstance(x, (int, _Anything)),
    )


@pytest.mark.parametrize("fn", [isinstance_of_legacy_tensor_types, isinstance_by_a_metaclass_check])
def test_isinstance_follows_the_metaclass_instancecheck(fn, check):
    check(fn, torch.randn(4))
