"""The standard library and builtins real code calls in captured frames: functools
(partial of partial, reduce, lru_cache / cache, wraps, cached_property, singledispatch),
itertools, operator's getters and its functions as values, builtins with keys, defaults
and starts, f-string format specs, str methods and number conversions.

Each program gives eager's results and torch.compile's graph and op counts (two calls
each, fresh arguments). Types of the standard library: test_corpus_library_types.py.
"""

from __future__ import annotations

import abc
import bisect
import collections
import collections.abc
import copy
import dataclasses
import enum
import functools
import heapq
import itertools
import math
import numbers
import operator
import string
import typing

import pytest
import torch
from torchcheck import check_like_torch, program_registry

PROGRAMS, program = program_registry()


def r(*shape):
    return torch.randn(*shape)


def _lin(x, a, b=0.0, *, c=1.0):
    return x * a + b * c


@program()
def partial_of_partial(x):
    f = functools.partial(functools.partial(_lin, a=2.0), b=3.0)
    return f(x, c=0.5)


@program()
def partial_keywords_attr(x):
    p = functools.partial(_lin, 2.0, c=4.0)
    return p(x), p.keywords["c"], len(p.args)


@program()
def partial_func_attr(x):
    p = functools.partial(_lin, a=3.0)
    return p.func(x, 1.0)


@program()
def reduce_add_tensors(x):
    return functools.reduce(operator.add, [x, x * 2, x * 3])


@program()
def reduce_with_initial(x):
    return functools.reduce(lambda acc, v: acc * v, [1, 2, 3], x)


@program()
def reduce_ints(x):
    return x + functools.reduce(operator.mul, range(1, 5))


@functools.cache
def _cached_scale(n):
    return n * 2 + 1


@program()
def lru_cache_called(x):
    return x * _cached_scale(3)


@functools.cache
def _cached_shape(a, b):
    return (a, b)


@program()
def cache_called(x):
    return x.reshape(_cached_shape(1, 3))


def _deco(f):
    @functools.wraps(f)
    def inner(*a, **k):
        return f(*a, **k) + 1

    return inner


@_deco
def _wrapped(x):
    return x * 2


@program()
def wraps_called(x):
    return _wrapped(x), _wrapped.__name__


@program()
def wraps_in_frame(x):
    def base(v):
        return v.sin()

    @functools.wraps(base)
    def w(v):
        return base(v) * 2

    return w(x), w.__name__, w.__wrapped__ is base


class _CP:
    def __init__(self, n):
        self.n = n

    @functools.cached_property
    def double(self):
        return self.n * 2


_cp = _CP(3)


@program()
def cached_property_global(x):
    return x * _cp.double


@program()
def cached_property_in_frame(x):
    c = _CP(4)
    return x * c.double + c.double


@functools.singledispatch
def _sd(v):
    return "base"


@_sd.register
def _(v: int):
    return "int"


@_sd.register(float)
def _(v):
    return "float"


@program()
def singledispatch_called(x):
    return x + len(_sd(1)) + len(_sd(1.0)) + len(_sd("s"))


@program()
def partial_in_map(x):
    f = functools.partial(torch.add, alpha=2)
    return list(map(f, [x, x * 2], [x, x]))


@program()
def partial_of_method(x):
    f = functools.partial(torch.Tensor.add, other=1)
    return f(x)


@program()
def total_ordering_free_cmp_to_key(x):
    def cmp(a, b):
        return (a > b) - (a < b)

    return x + sorted([3, 1, 2], key=functools.cmp_to_key(cmp))[0]


@program()
def it_accumulate(x):
    return list(itertools.accumulate([x, x, x]))


@program()
def it_accumulate_func_initial(x):
    return list(itertools.accumulate([1, 2, 3], operator.mul, initial=x))


@program()
def it_chain_from_iterable(x):
    return list(itertools.chain.from_iterable([[x, x + 1], [x * 2]]))


@program()
def it_chain(x):
    return sum(itertools.chain([x], (x * 2,), [x * 3]))


@program()
def it_product(x):
    return [x * a + b for a, b in itertools.product([1, 2], [3, 4])]


@program()
def it_product_repeat(x):
    return len(list(itertools.product(range(2), repeat=3))) * x


@program()
def it_combinations(x):
    ts = [x, x + 1, x + 2]
    return [a * b for a, b in itertools.combinations(ts, 2)]


@program()
def it_permutations(x):
    return [a - b for a, b in itertools.permutations([x, x * 2], 2)]


@program()
def it_combinations_with_replacement(x):
    return len(list(itertools.combinations_with_replacement(range(3), 2))) + x


@program()
def it_groupby(x):
    out = []
    for k, g in itertools.groupby([1, 1, 2, 3, 3, 3]):
        out.append(x * k * len(list(g)))
    return out


@program()
def it_groupby_key(x):
    words = ["aa", "ab", "ba", "bb", "c"]
    return [(k, len(list(g))) for k, g in itertools.groupby(words, key=lambda w: w[0])], x + 1


@program()
def it_islice(x):
    return list(itertools.islice([x, x + 1, x + 2, x + 3], 1, None, 2))


@program()
def it_zip_longest(x):
    return [a if b is None else a + b for a, b in itertools.zip_longest([x, x], [x])]


@program()
def it_zip_longest_fill(x):
    return [a * b for a, b in itertools.zip_longest([1, 2, 3], [4], fillvalue=10)], x * 2


@program()
def it_starmap(x):
    return list(itertools.starmap(torch.add, [(x, 1), (x, 2)]))


@program()
def it_tee(x):
    a, b = itertools.tee([x, x * 2])
    return list(a), list(b)


@program()
def it_pairwise(x):
    ts = [x, x * 2, x * 3]
    return [b - a for a, b in itertools.pairwise(ts)]


@program()
def it_count_islice(x):
    return [x * i for i in itertools.islice(itertools.count(2, 3), 3)]


@program()
def it_repeat_islice(x):
    return list(itertools.islice(itertools.repeat(x), 2))


@program()
def it_repeat_times(x):
    return sum(itertools.repeat(x, 3))


@program()
def it_cycle_islice(x):
    return [x * c for c in itertools.islice(itertools.cycle([1, 2]), 5)]


@program()
def it_zip_count(x):
    return [x * i for i, _ in zip(itertools.count(), range(3))]


@program()
def it_compress(x):
    return list(itertools.compress([x, x + 1, x + 2], [1, 0, 1]))


@program()
def it_takewhile_dropwhile(x):
    return (
        list(itertools.takewhile(lambda v: v < 3, [1, 2, 3, 1])),
        list(itertools.dropwhile(lambda v: v < 3, [1, 2, 3, 1])),
        x + 1,
    )


@program()
def it_filterfalse(x):
    return [x * v for v in itertools.filterfalse(lambda v: v % 2, range(5))]


@program()
def it_batched_like_islice(x):
    it = iter(range(6))
    out = []
    while chunk := list(itertools.islice(it, 2)):
        out.append(x * sum(chunk))
    return out


@program()
def op_itemgetter(x):
    g = operator.itemgetter(0, 2)
    return g([x, x + 1, x + 2])


@program()
def op_itemgetter_single(x):
    return operator.itemgetter(1)((x, x * 5))


@program()
def op_attrgetter(x):
    return operator.attrgetter("shape")(x), x + 1


@program()
def op_attrgetter_dotted(x):
    return operator.attrgetter("T.shape", "ndim")(x), x + 1


@program()
def op_methodcaller(x):
    return operator.methodcaller("add", 2)(x)


@program()
def op_methodcaller_kw(x):
    return operator.methodcaller("sum", dim=0)(x)


@program()
def op_funcs_as_values(x):
    ops = [operator.add, operator.mul, operator.sub, operator.truediv]
    return [f(x, 2) for f in ops]


@program()
def op_index(x):
    return x * operator.index(3)


@program()
def op_neg_pos_not(x):
    return operator.neg(x), operator.pos(x), operator.not_(False), operator.truth(1)


@program()
def op_getitem_setitem(x):
    d = {}
    operator.setitem(d, "a", x)
    return operator.getitem(d, "a") + 1, operator.contains([1, 2], 2)


@program()
def op_iadd(x):
    y = x.clone()
    y = operator.iadd(y, 1)
    return y


@program()
def op_matmul_pow(x):
    return operator.matmul(x, x), operator.pow(x, 2)


@program()
def op_itemgetter_sort(x):
    pairs = [(3, "c"), (1, "a"), (2, "b")]
    return [x * p[0] for p in sorted(pairs, key=operator.itemgetter(0))]


@program()
def op_eq_lt(x):
    return operator.lt(1, 2), operator.eq("a", "a"), operator.gt(x, 0)


@program()
def op_length_hint(x):
    return x + operator.length_hint([1, 2, 3])


@program()
def op_concat(x):
    return x + len(operator.concat([1], [2, 3]))


@program()
def b_sorted_key_reverse(x):
    d = {"b": 2, "a": 3, "c": 1}
    return [x * d[k] for k in sorted(d, key=d.get, reverse=True)]


@program()
def b_sorted_tensors_by_key(x):
    ts = [x * 3, x, x * 2]
    return sorted(ts, key=lambda t: t.shape[0])


@program()
def b_reversed_list_range(x):
    return [x * i for i in reversed(range(3))], list(reversed([x, x + 1]))


@program()
def b_reversed_dict(x):
    d = {"a": 1, "b": 2}
    return [x * d[k] for k in reversed(d)]


@program()
def b_enumerate_start(x):
    return [x * i for i, _ in enumerate("abc", start=2)]


@program()
def b_divmod(x):
    q, m = divmod(17, 5)
    fq, fm = divmod(7.5, 2)
    return x * q + m + fq + fm


@program()
def b_divmod_neg(x):
    return x + sum(divmod(-7, 2)), divmod(-7.0, 2.0)


@program()
def b_round(x):
    return (
        x * round(2.675, 2) + round(3.5) + round(4.5) + round(-2.5),
        round(123, -1),
        type(round(2.5)),
    )


@program()
def b_abs_sum_start(x):
    return sum([x, x], start=abs(-3)) + sum([1.5, 2], 10)


@program()
def b_sum_start_tensor(x):
    return sum([x, x * 2], x)


@program()
def b_any_all_gen(x):
    sizes = [1, 2, 3]
    return x + any(s > 2 for s in sizes) + all(s > 0 for s in sizes) * 2


@program()
def b_any_all_empty(x):
    return x + any(()) + all([]) * 2


@program()
def b_min_max_key(x):
    names = ["aaa", "b", "cc"]
    return x * len(max(names, key=len)) + len(min(names, key=len))


@program()
def b_min_max_default(x):
    return x + max([], default=5) + min((), default=-1)


@program()
def b_min_max_tensor_key(x):
    ts = [x, x + 10, x - 10]
    return max(ts, key=lambda t: t.shape[0]), min(3, 1, 2)


@program()
def b_isinstance_tuple(x):
    return x + isinstance(3, (float, int)) + isinstance(x, (list, torch.Tensor)) * 2


@program()
def b_isinstance_abc(x):
    return (
        x
        + isinstance([], collections.abc.Sequence)
        + isinstance({}, collections.abc.Mapping) * 2
        + isinstance(3, numbers.Integral) * 4
        + isinstance(3.0, numbers.Real) * 8
        + isinstance((1,), collections.abc.Iterable) * 16
        + isinstance(x, collections.abc.Sized)
    )


@program()
def b_isinstance_typing(x):
    return (
        x + isinstance([1], list) + isinstance({}, dict) * 2 + isinstance(len, typing.Callable) * 4
    )


@program()
def b_callable(x):
    return (
        x
        + callable(len)
        + callable(3) * 2
        + callable(lambda: 1) * 4
        + callable(torch.nn.ReLU()) * 8
    )


class _Obj:
    a = 1


@program()
def b_hasattr_getattr_default(x):
    o = _Obj()
    return x + hasattr(o, "a") + hasattr(o, "b") * 2 + getattr(o, "b", 10) + getattr(o, "a", 5)


@program()
def b_setattr_in_frame(x):
    o = _Obj()
    o.b = 7
    return x * o.b, o.b


@program()
def b_hash_constants(x):
    return x + (hash(3) == 3) + (hash("ab") == hash("ab")) + (hash((1, 2)) == hash((1, 2)))


@program()
def b_fstring_specs(x):
    n, f = 42, 3.14159
    return x + 1, f"{n:>5}|{f:.3f}|{n:#x}|{f:e}|{n!r}|{'s'!s:^5}|{n:+d}|{f:10.2%}"


@program()
def b_fstring_shape(x):
    return x + 1, f"{x.shape[0]:03d}-{x.dim()}"


@program()
def b_str_methods(x):
    s = " a,b,c "
    parts = s.strip().split(",")
    return (
        x * len(parts),
        "-".join(parts),
        s.replace("a", "z"),
        s.startswith(" a"),
        "{}:{}".format(1, "b"),
        s.upper().lower().title(),
    )


@program()
def b_str_methods2(x):
    s = "conv1.weight"
    return (
        x + 1,
        s.rsplit(".", 1),
        s.partition("."),
        s.endswith(("weight", "bias")),
        s.find("1"),
        s.count("o"),
        s.isidentifier(),
        "x".center(5, "*"),
        "ab".zfill(4),
    )


@program()
def b_repr_numbers(x):
    return x + 1, repr(3), repr(2.5), repr(1e20), repr(-0.0), str(1 / 3), repr(True), repr(None)


@program()
def b_int_float_conv(x):
    return x + int("12") + float("1.5") + int(3.9) + int("ff", 16), bool(""), str(12)


@program()
def b_bin_hex_oct_chr_ord(x):
    return x + ord("a"), chr(98), bin(5), hex(255), oct(8)


@program()
def b_pow_three_args(x):
    return x + pow(3, 4, 5) + pow(2, -1)


@program()
def b_zip_strict(x):
    return [a * b for a, b in zip([x, x], [1, 2], strict=True)]


@program()
def b_map_multi(x):
    return list(map(lambda a, b: a + b, [x, x], [1, 2]))


@program()
def b_filter_none(x):
    return [x * v for v in filter(None, [0, 1, 2, 0])]


@program()
def b_iter_next_default(x):
    it = iter([x])
    a = next(it)
    b = next(it, None)
    return a + 1, b


@program()
def b_dict_fromkeys_comprehension(x):
    d = dict.fromkeys(["a", "b"], 0)
    d.update(a=1)
    return x + d["a"] + len(d), dict(zip("ab", [1, 2]))


@program()
def b_slice_obj(x):
    s = slice(1, None)
    return x[s], s.start, s.stop, s.indices(5)


@program()
def b_len_of_range_tuple(x):
    return x + len(range(2, 10, 3)) + range(10)[3] + range(0, 10, 2).index(4)


@program()
def b_type_name(x):
    return x + 1, type(x).__name__, int.__name__, type(x) is torch.Tensor


@program()
def b_issubclass(x):
    return (
        x
        + issubclass(bool, int)
        + issubclass(torch.nn.ReLU, torch.nn.Module) * 2
        + issubclass(list, collections.abc.Sequence) * 4
    )


@program()
def b_max_of_shape(x):
    return x + max(x.shape) + min(x.shape[0], 2)


@program()
def b_sum_of_gen(x):
    return sum(x * i for i in range(3))


@program()
def b_bool_of_containers(x):
    return x + bool([]) + bool({1: 2}) * 2 + bool("a") * 4 + (not ())


@program()
def b_string_module(x):
    return x + len(string.ascii_lowercase), string.digits[:3]


@program()
def b_int_bit_methods(x):
    return (
        x + (10).bit_length() + (7).bit_count(),
        (3.0).is_integer(),
        (1.5).as_integer_ratio(),
        int.from_bytes(b"\x01\x00", "little"),
    )


@program()
def b_all_over_tensors_list(x):
    ts = [x, x]
    return x + all(t.dim() == 1 for t in ts)


@program()
def b_sorted_tuples(x):
    return (
        x + sorted([(2, "b"), (1, "z"), (2, "a")])[1][0],
        sorted("cab"),
        sorted({3: 1, 1: 2}.items()),
    )


@program()
def x_partial_class(x):
    mk = functools.partial(collections.namedtuple("Q", "a b"), b=2)
    q = mk(x)
    return q.a * q.b


@program()
def x_reduce_dicts(x):
    ds = [{"a": 1}, {"b": 2}, {"a": 3}]
    merged = functools.reduce(lambda acc, d: {**acc, **d}, ds, {})
    return x * merged["a"] + merged["b"]


@program()
def x_reduce_or_sets(x):
    return x + len(functools.reduce(operator.or_, [{1}, {2}, {1, 3}]))


@program()
def x_accumulate_max(x):
    return x + list(itertools.accumulate([3, 1, 4, 1, 5], max))[-1]


@program()
def x_product_tensors(x):
    return [a * b for a, b in itertools.product([x, x + 1], [2, 3])]


@program()
def x_groupby_sorted_dict(x):
    items = sorted([("b", 1), ("a", 2), ("b", 3)], key=operator.itemgetter(0))
    return {
        k: x * sum(v for _, v in g) for k, g in itertools.groupby(items, key=operator.itemgetter(0))
    }


@program()
def x_islice_gen(x):
    def gen():
        i = 0
        while True:
            yield x * i
            i += 1

    return list(itertools.islice(gen(), 3))


@program()
def x_chain_dict_items(x):
    a, b = {"p": 1}, {"q": 2}
    return {k: x * v for k, v in itertools.chain(a.items(), b.items())}


@program()
def x_zip_longest_three(x):
    return [
        tuple(v for v in t if v is not None) for t in itertools.zip_longest([1, 2], [3], [4, 5, 6])
    ], x + 1


@program()
def x_starmap_pow(x):
    return x + sum(itertools.starmap(pow, [(2, 3), (3, 2)]))


@program()
def x_sorted_by_attrgetter(x):
    NT = collections.namedtuple("NT", "k v")
    items = [NT(2, x), NT(1, x * 2)]
    return [i.v for i in sorted(items, key=operator.attrgetter("k"))]


@program()
def x_methodcaller_str(x):
    return x + 1, list(map(operator.methodcaller("upper"), ["a", "b"]))


@program()
def x_min_with_key_tuple(x):
    d = {"a": (2, 1), "b": (1, 5)}
    return x * d[min(d, key=lambda k: d[k])][1]


@program()
def x_enumerate_reversed(x):
    return [x * i + v for i, v in enumerate(reversed([1, 2, 3]), 1)]


@program()
def x_sum_lists(x):
    return x + len(sum([[1], [2, 3]], []))


@program()
def x_divmod_shape(x):
    q, m = divmod(x.shape[0], 2)
    return x * q + m


@program()
def x_round_tensor_item_free(x):
    return x * round(x.shape[0] / 2)


@program()
def x_abs_tensor_min_max_builtins(x):
    return abs(x), max(x.shape[0], 1) * x


@program()
def x_copy_deepcopy_nested_obj(x):
    class Holder:
        def __init__(self):
            self.items = [1, 2]

    h = Holder()
    h2 = copy.deepcopy(h)
    h2.items.append(3)
    return x * len(h.items) + len(h2.items)


@program()
def x_copy_copy_obj(x):
    class Holder:
        def __init__(self, t):
            self.t = t

    h2 = copy.copy(Holder(x))
    return h2.t + 1


class _Box:
    def __init__(self, t):
        self.t = t
        self.scale = 2


class _CopyingBox(_Box):
    def __copy__(self):
        other = _Box(self.t * 3)
        return other


class _SlotBox:
    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t


def _box():
    return _Box(torch.randn(3))


@program(lambda: torch.randn(3), _box)
def x_copy_copy_argument_object(x, box):
    # a shallow copy of an argument: its attributes read where they are, the copy's
    # writes leave the argument as it was
    other = copy.copy(box)
    other.t = other.t * other.scale
    return x + other.t + box.t


@program()
def x_copy_copy_frame_object_then_write(x):
    box = _Box(x.sin())
    other = copy.copy(box)
    other.scale = 5
    return box.t * box.scale + other.t * other.scale


@program()
def x_copy_copy_own_copy_method(x):
    return copy.copy(_CopyingBox(x)).t + 1


@program()
def x_copy_copy_slotted_object(x):
    return copy.copy(_SlotBox(x)).t + 1


@program()
def x_lru_cache_method(x):
    return x * _Helper().k(3)


class _Helper:
    @functools.lru_cache(maxsize=8)  # noqa: B019 - the pattern under test
    def k(self, n):
        return n + 1


@program()
def x_cache_info_free(x):
    @functools.lru_cache
    def f(n):
        return n * 3

    return x * f(2)


@program()
def x_singledispatchmethod(x):
    class T:
        @functools.singledispatchmethod
        def f(self, v):
            return 0

        @f.register
        def _(self, v: int):
            return v * 2

    return x * T().f(3)


@program()
def x_isinstance_abc_user(x):
    class Sz:
        def __len__(self):
            return 1

    return (
        x + isinstance(Sz(), collections.abc.Sized) + isinstance(Sz(), collections.abc.Iterable) * 2
    )


@program()
def x_str_join_map(x):
    return (
        x + 1,
        ",".join(map(str, [1, 2, 3])),
        "".join(reversed("abc")),
        "a b  c".split(),
        "%d-%s" % (3, "x"),  # noqa: UP031 - the pattern under test
        f"{1}/{2}",
    )


@program()
def x_fstring_nested_spec(x):
    w, p = 8, 3
    return x + 1, f"{3.14159:{w}.{p}f}", f"{'ab':<{w}}|"


@program()
def x_bool_int_arith(x):
    return x * (True + True), int(True), float(False)


@program()
def x_complex(x):
    c = complex(1, 2) * 2
    return x * c.real + c.imag + abs(complex(3, 4))


@program()
def x_frozen_dataclass_hash(x):
    @dataclasses.dataclass(frozen=True)
    class K:
        a: int

    d = {K(1): 3}
    return x * d[K(1)]


@program()
def x_dataclass_post_init(x):
    @dataclasses.dataclass
    class D:
        a: int
        b: int = 0

        def __post_init__(self):
            self.b = self.a * 2

    return x * D(3).b


@program()
def x_dataclass_tensor_field(x):
    @dataclasses.dataclass
    class Out:
        y: torch.Tensor
        n: int = 1

    o = Out(x * 2)
    o.n += 1
    return o.y * o.n


@program()
def x_enum_in_dict(x):
    class Act(enum.Enum):
        RELU = "relu"
        TANH = "tanh"

    fns = {Act.RELU: torch.relu, Act.TANH: torch.tanh}
    return fns[Act("tanh")](x)


@program()
def x_intenum_arith(x):
    class Lvl(enum.IntEnum):
        LOW = 1
        HIGH = 3

    return x * (Lvl.HIGH + 1) + (Lvl.LOW < Lvl.HIGH)


@program()
def x_namedtuple_iter_zip(x):
    NT = collections.namedtuple("NT", "a b c")
    t = NT(x, x * 2, x * 3)
    return {f: v for f, v in zip(t._fields, t)}


@program()
def i_isinstance_union(x):
    return (
        x
        + isinstance(3, int | float)
        + isinstance(None, typing.Optional[int]) * 2  # noqa: UP045 - the pattern under test
        + isinstance("a", typing.Union[int, str]) * 4  # noqa: UP007 - the pattern under test
    )


@typing.runtime_checkable
class _HasGo(typing.Protocol):
    def go(self): ...


class _Goer:
    def go(self):
        return 1


@program()
def i_runtime_protocol(x):
    return x + isinstance(_Goer(), _HasGo) + isinstance(3, _HasGo) * 2


@program()
def i_sorted_key_str_lower(x):
    return x + 1, sorted(["b", "A", "c"], key=str.lower), sorted(["bb", "a"], key=len, reverse=True)


class _Rev:
    def __init__(self):
        self.v = [1, 2, 3]

    def __reversed__(self):
        return iter(self.v[::-1])


@program()
def i_user_reversed(x):
    return [x * v for v in reversed(_Rev())]


@program()
def i_zip_star(x):
    m = [[1, 2], [3, 4]]
    return [x * sum(col) for col in zip(*m)]


@program()
def i_map_builtin(x):
    return x + sum(map(int, ["1", "2"])) + sum(map(abs, [-1, -2])), list(map(str.upper, ["a"]))


@program()
def i_max_dict_items_key(x):
    d = {"a": 3, "b": 5}
    k, v = max(d.items(), key=operator.itemgetter(1))
    return x * v, k


@program()
def i_min_gen_default(x):
    return x + min((v for v in [] if v), default=7)


@dataclasses.dataclass
class _Base:
    a: int = 1


@dataclasses.dataclass
class _Derived(_Base):
    b: int = 2
    c: int = dataclasses.field(init=False, default=5)
    k: typing.ClassVar[int] = 9


@program()
def i_dataclass_inheritance(x):
    d = _Derived(3)
    return x * (d.a + d.b + d.c + d.k), [f.name for f in dataclasses.fields(d)]


class _NTM(typing.NamedTuple):
    a: int
    b: int

    @classmethod
    def zero(cls):
        return cls(0, 0)

    @property
    def total(self):
        return self.a + self.b


@program()
def i_namedtuple_classmethod_property(x):
    return x * _NTM(1, 2).total + _NTM.zero().total


class _Act(enum.Enum):
    RELU = "relu"
    GELU = "gelu"

    def fn(self):
        return {"relu": torch.relu, "gelu": torch.nn.functional.gelu}[self.value]


@program()
def i_enum_method(x):
    return _Act.GELU.fn()(x), _Act("relu").fn()(x)


class _Perm(enum.Flag):
    R = enum.auto()
    W = enum.auto()
    X = enum.auto()


@program()
def i_enum_flag(x):
    p = _Perm.R | _Perm.W
    return x * (bool(p & _Perm.W) + bool(p & _Perm.X) * 2), p.value


@program()
def i_partial_key(x):
    key = functools.partial(operator.getitem, b=None) if False else functools.partial(pow, exp=2)
    return x * sorted([-3, 2, 1], key=key)[0]


@program()
def i_partial_class(x):
    Lin = functools.partial(collections.OrderedDict, a=1)
    return x * Lin()["a"]


@program()
def i_reduce_lambda_tensor_initial(x):
    return functools.reduce(lambda a, b: a * 0.5 + b, [x, x + 1, x + 2], torch.zeros(3))


@program()
def i_chain_generators(x):
    return sum(itertools.chain((x * i for i in range(2)), (x + i for i in range(2))))


@program()
def i_chainmap(x):
    cm = collections.ChainMap({"a": 1}, {"a": 2, "b": 3})
    return x * cm["a"] + cm["b"], len(cm), sorted(cm)


@program()
def i_counter_ops(x):
    c = collections.Counter(a=2, b=1) + collections.Counter(a=1)
    return x * c["a"], sorted(c.elements())


@program()
def i_heapq(x):
    h = [5, 1, 3]
    heapq.heapify(h)
    heapq.heappush(h, 0)
    return x * heapq.heappop(h) + h[0], heapq.nlargest(2, [1, 5, 3])  # noqa: F821 - the pattern under test


@program()
def i_bisect(x):
    return x * bisect.bisect_left([1, 3, 5], 4) + bisect.bisect([1, 2], 2)  # noqa: F821 - the pattern under test


@program()
def i_getattr_module_default(x):
    return x * getattr(math, "tau", 1) + getattr(math, "nope", 0), hasattr(torch, "relu")


@program()
def i_setattr_obj_in_frame_loop(x):
    class O:  # noqa: E742 - the pattern under test
        pass

    o = O()
    for k, v in zip("abc", range(3)):
        setattr(o, k, v)
    return x * (o.a + o.b + o.c), sorted(vars(o))


@program()
def i_callable_class_and_instance(x):
    class C:
        def __call__(self):
            return 1

    return x + callable(C) + callable(C()) * 2 + callable(x) * 4


@program()
def i_str_methods_more(x):
    s = "Hello_World"
    return (
        x + 1,
        s.casefold(),
        s.swapcase(),
        s.ljust(13, "."),
        s.rjust(13),
        s.splitlines(),
        s.lstrip("H"),
        s.removeprefix("Hello"),
        s.removesuffix("World"),
        s.isalpha(),
        s.index("o"),
        s.rfind("o"),
        s.expandtabs(),
        "a\tb".expandtabs(4),
        s.translate(str.maketrans("lo", "01")),
    )


@program()
def i_fstring_conversions(x):
    v = 3.5
    return x + 1, f"{v!r:>8}", f"{'x'!a}", f"{v=}", "{literal}", f"{[1, 2]}"


@program()
def i_format_spec_variety(x):
    return (
        x + 1,
        format(0.000123, ".2e"),
        format(1234.5, "_.1f"),
        format(42, "^7d"),
        format(-3, "+05d"),
        format(0.5, "%"),
        format(10, "o"),
        format(3, "c") if False else "",
        format(True, "d"),
    )


@program()
def i_repr_of_floats(x):
    return (
        x + 1,
        repr(0.1 + 0.2),
        repr(float("inf")),
        repr(float("nan")),
        repr(1e-7),
        repr(123456789.0),
        str(2**70),
    )


@program()
def i_round_variants(x):
    return (
        x + round(0.5) + round(1.5) + round(2.675, 2) + round(-0.5),
        round(1234.5678, -2),
        round(7, 1),
        type(round(2.5, 0)),
    )


@program()
def i_divmod_float_neg(x):
    return x + 1, divmod(-7.5, 2), divmod(7, -2), -7 // 2, -7 % 2, 7.5 % -2


@program()
def i_sum_start_list_and_floats(x):
    return x + sum([0.1] * 10), sum([[1], [2]], [0]), sum((x, x), start=x)


@program()
def i_any_all_tensor_conditions(x):
    shapes = [(1, 2), (1, 3)]
    return x * any(s[1] > 2 for s in shapes) + all(len(s) == 2 for s in shapes)


@program()
def i_min_max_multiple_args_key(x):
    return x * max(1, 5, 3, key=lambda v: -v) + min("bb", "a", key=len).__len__()


@program()
def i_enumerate_start_negative(x):
    return [x * i for i, _ in enumerate(range(3), -1)]


@program()
def i_getattr_dunder_name(x):
    return x + 1, torch.relu.__name__, type(x).__module__, math.sqrt.__name__


@program()
def i_hash_eq_consistency(x):
    return (
        x
        + (hash(1) == hash(1.0))
        + (hash(True) == hash(1))
        + (hash(frozenset({1})) == hash(frozenset({1})))
    )


@program()
def i_abc_register(x):
    class Base(abc.ABC):  # noqa: B024 - the pattern under test
        pass

    class Other:
        pass

    Base.register(Other)
    return x + isinstance(Other(), Base)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_library_call_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


def test_copy_of_an_argument_object_with_other_attributes_recompiles():
    # the copy holds every attribute of the object: their names are guarded
    import dynamo_capture
    from dynamo_capture.testing import CountingBackend, assert_same

    def copy_and_sum(x, box):
        other = copy.copy(box)
        return x + sum(value for value in vars(other).values() if isinstance(value, int))

    counter = CountingBackend()
    compiled = dynamo_capture.optimize(copy_and_sum, backend=counter)
    x, box = torch.randn(3), _Box(torch.randn(3))
    assert_same(compiled(x, box), copy_and_sum(x, box))
    box.extra = 7
    assert_same(compiled(x, box), copy_and_sum(x, box))
    assert counter.frame_count == 2


class _ShadowedBox:
    def __init__(self, t):
        self.__dict__["t"] = t

    @property
    def t(self):
        return 5

    @t.setter
    def t(self, value):
        pass


def test_copy_of_an_object_whose_property_shadows_an_entry_copies_the_entry():
    # a copy copies `__dict__`; reading `obj.t` would give the property's value
    import dynamo_capture
    from dynamo_capture.testing import CountingBackend, assert_same

    def copy_entry(x, box):
        return x + copy.copy(box).__dict__["t"]

    compiled = dynamo_capture.optimize(copy_entry, backend=CountingBackend())
    x, box = torch.randn(3), _ShadowedBox(torch.randn(3))
    assert_same(compiled(x, box), copy_entry(x, box))
