"""Builtins, the standard library and Python's object model in captured frames, modelled
on pytorch's test/dynamo test_misc.py and test_functions.py: bytes and bytearray, `map`,
comprehensions and generator expressions over a function that breaks, a submodule
swapped for one of another class after compiling, recursion with a break at depth, the
`.grad` setter, a metaclass's `__call__`, typing generics (Generic, TypeVar, cast,
Protocol, NamedTuple), functools.lru_cache / cache / reduce / partial, a function's
`__name__` / `__qualname__` / `__wrapped__` / `__defaults__`, `del obj.attr` on objects
from outside the frame, operator.itemgetter / attrgetter / methodcaller, itertools
(accumulate, pairwise, groupby, starmap, zip_longest, islice, chain.from_iterable),
collections.Counter / OrderedDict / deque / defaultdict, dataclasses made in the frame,
enum members and flags, str methods and f-strings of shapes.

Each program gives eager's results and torch.compile's graph and op counts (two calls
each, fresh arguments); the stateful ones also leave eager's state. WHOLE_PROGRAMS are
captured as one graph where torch.compile breaks, skips the frame or differs from
eager. Not here yet (benchmarks/RESULTS.md): `x._version` read in the frame, `map` over
a lambda that breaks, the `.data` setter."""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import itertools
import operator
import typing

import pytest
import torch
import torch._dynamo
from programcheck import check_program_like_torch
from torchcheck import check_captured_whole, check_like_torch, program_registry

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same

PROGRAMS, program = program_registry()
# captured as one graph where torch.compile breaks (bytes.count, deque.rotate and
# heapq's C functions behind Counter.most_common are not traced there), falls back to
# eager for the whole frame (it skips a metaclass's __call__ and then fails) or differs
# from eager (`__defaults__` assigned in the frame: torch 2.13 calls with the old ones)
WHOLE_PROGRAMS, whole_program = program_registry()


def r(*shape):
    return torch.randn(*shape)


def r34():
    return torch.randn(3, 4)


# ----- bytes and bytearray --------------------------------------------------------------
@whole_program()
def bytes_constant_ops(x):
    data = b"abc" + b"de"
    return x * len(data) + data[1] + data.count(b"a") + data.find(b"d"), data.upper(), data[1:3]


@program()
def bytes_decode_and_compare(x):
    name = b"relu".decode()
    y = x.relu() if name == "relu" else x
    return y, b"ab" < b"b", bytes([65, 66]), bytes(3)


@program()
def bytearray_made_and_changed(x):
    buffer = bytearray(b"xy")
    buffer.append(122)
    buffer.extend(b"!!")
    buffer[0] = 65
    return x * len(buffer), bytes(buffer), buffer[0]


@program()
def bytes_join_split(x):
    parts = b"a,b,c".split(b",")
    return x + len(parts), b"-".join(parts), b" pad ".strip()


# ----- map and comprehensions over a function that breaks ------------------------------
def _breaks_then_doubles(t):
    torch._dynamo.graph_break()
    return t * 2


def _breaks_inside(t):
    return _breaks_then_doubles(t) + 1


@program()
def map_of_breaking_function(x):
    items = [x, x.sin()]
    return list(map(_breaks_inside, items))


@program()
def comprehension_calling_breaking_function(x):
    items = (x, x.cos())
    return [_breaks_inside(t) for t in items]


@program()
def generator_of_breaking_function_summed(x):
    items = [x, x * 3]
    return sum(_breaks_inside(t) for t in items)


@program()
def map_lambda_no_break(x):
    return tuple(map(lambda a, b: a * b, [x, x + 1], [2, 3]))


# ----- recursion with a break at depth ---------------------------------------------------
def _recurse(x, depth):
    if depth == 0:
        torch._dynamo.graph_break()
        return x + 1
    return _recurse(x * 2, depth - 1).cos()


@program()
def recursion_break_at_depth_two(x):
    return _recurse(x, 2)


@program()
def recursion_break_at_depth_four(x):
    return _recurse(x.sin(), 4) + 1


def _factorial(n):
    return 1 if n <= 1 else n * _factorial(n - 1)


@program()
def recursion_without_break(x):
    return x * _factorial(5)


# ----- metaclass __call__ ---------------------------------------------------------------
class _Counting(type):
    def __call__(cls, *args, **kwargs):
        made = super().__call__(*args, **kwargs)
        made.made_by_meta = True
        return made


class _Scaler(metaclass=_Counting):
    def __init__(self, k):
        self.k = k


class _Singleton(type):
    _instances: typing.ClassVar[dict] = {}

    def __call__(cls, *args):
        if cls not in cls._instances:
            cls._instances[cls] = super().__call__(*args)
        return cls._instances[cls]


class _One(metaclass=_Singleton):
    def __init__(self):
        self.k = 3


_ONE = _One()


@whole_program()
def metaclass_call_sets_attribute(x):
    s = _Scaler(3)
    return x * s.k, s.made_by_meta


@whole_program()
def metaclass_call_returns_existing(x):
    return x * _One().k, _One() is _ONE


class _Replacing(type):
    def __call__(cls, k):
        return k * 2


class _Doubled(metaclass=_Replacing):
    pass


@whole_program()
def metaclass_call_returns_other(x):
    return x + _Doubled(4)


# ----- typing generics ------------------------------------------------------------------
T = typing.TypeVar("T")


class _Box(typing.Generic[T]):
    def __init__(self, value: T):
        self.value = value

    def get(self) -> T:
        return self.value


class _HasScale(typing.Protocol):
    scale: float


class _Scaled:
    scale = 2.0


@program()
def generic_class_made(x):
    box = _Box[torch.Tensor](x)
    other = _Box(3)
    return box.get() * other.get()


@program()
def typing_cast_and_typevar(x):
    y = typing.cast(torch.Tensor, x)
    z = typing.cast("torch.Tensor", y * 2)
    return z + len(T.__name__)


@program()
def protocol_attribute(x):
    def scale(s: _HasScale) -> float:
        return s.scale

    return x * scale(_Scaled())


@program()
def generic_isinstance(x):
    return x * isinstance(_Box(1), _Box), isinstance([1], typing.List)  # noqa: UP006


# ----- functools.lru_cache / cache ------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _cached_int(n):
    return n * 3


@functools.cache
def _cached_cos(t):
    return t.cos()


@program()
def lru_cache_on_int(x):
    return x + _cached_int(2) + _cached_int(2)


@program()
def cache_on_tensor(x):
    return _cached_cos(x) + 1


@program()
def lru_cache_wrapper_attributes(x):
    return x * _cached_int.__wrapped__(2), _cached_int.__name__


@program()
def lru_cache_made_in_frame(x):
    @functools.lru_cache
    def inner(n):
        return n + 1

    return x * inner(2)


# ----- function attributes --------------------------------------------------------------
def _with_defaults(a, b=2, *, c=3):
    return a * b + c


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args) + 1

    return wrapper


@_decorated
def _plus_one(x):
    return x * 2


@program()
def function_name_and_qualname(x):
    return x * len(_with_defaults.__name__), _with_defaults.__qualname__, _plus_one.__name__


@program()
def function_defaults(x):
    return x * sum(_with_defaults.__defaults__), _with_defaults.__kwdefaults__


@program()
def function_wrapped(x):
    return _plus_one.__wrapped__(x), _plus_one(x)


@program()
def nested_function_qualname(x):
    def inner(t):
        return t + 1

    return inner(x), inner.__name__, inner.__qualname__.split(".")[-1]


@whole_program()
def function_defaults_changed_in_frame(x):
    def scaled(t, k=2):
        return t * k

    scaled.__defaults__ = (5,)
    return scaled(x)


@whole_program()
def function_defaults_read_after_set(x):
    def scaled(t, k=2, m=1):
        return t * k + m

    scaled.__defaults__ = (x.sum(), 3)
    return scaled(x), scaled.__defaults__[1]


@program()
def wraps_chain_names(x):
    @_decorated
    @_decorated
    def twice(t):
        return t - 1

    return twice(x), twice.__name__, twice.__wrapped__.__wrapped__.__name__


@program()
def function_module_and_doc(x):
    return x + 1, _with_defaults.__module__ == __name__, _with_defaults.__doc__


# ----- operator.itemgetter / attrgetter / methodcaller ---------------------------------
@program()
def itemgetter_on_list(x):
    first, third = operator.itemgetter(0, 2)([x, x + 1, x + 2])
    return first * third, operator.itemgetter(1)((4, 5))


@program()
def itemgetter_sorting(x):
    pairs = sorted([(3, "c"), (1, "a"), (2, "b")], key=operator.itemgetter(0))
    return x * pairs[0][0], [p[1] for p in pairs]


@program()
def attrgetter_on_tensor(x):
    shape, dtype = operator.attrgetter("shape", "dtype")(x)
    return x.reshape(shape[::-1]) if dtype == torch.float32 else x


@program()
def attrgetter_dotted(x):
    return x * operator.attrgetter("value.real")(_Box(3))


@program()
def methodcaller_on_tensor(x):
    return operator.methodcaller("sum", 0)(x) + operator.methodcaller("mul", 2)(x).mean()


@program()
def methodcaller_on_str(x):
    return x * len(operator.methodcaller("split", ",")("a,b,c"))


# ----- itertools ------------------------------------------------------------------------
@program()
def itertools_accumulate(x):
    sums = list(itertools.accumulate([1, 2, 3]))
    tensors = list(itertools.accumulate([x, x * 2, x * 3]))
    products = list(itertools.accumulate([1, 2, 3], operator.mul, initial=1))
    return tensors[-1] * sums[-1], products


@program()
def itertools_pairwise(x):
    return [a - b for a, b in itertools.pairwise([x, x * 2, x * 3])]


@program()
def itertools_groupby(x):
    groups = [(k, len(list(g))) for k, g in itertools.groupby("aabccc")]
    return x * len(groups), groups


@program()
def itertools_groupby_key(x):
    out = x
    for parity, group in itertools.groupby([1, 3, 2, 4, 5], key=lambda n: n % 2):
        out = out + parity * sum(group)
    return out


@program()
def itertools_starmap(x):
    return sum(itertools.starmap(operator.mul, [(x, 2), (x, 3)]))


@program()
def itertools_zip_longest(x):
    pairs = list(itertools.zip_longest([x, x], [1], fillvalue=5))
    return [a * b for a, b in pairs]


@program()
def itertools_islice(x):
    return list(itertools.islice(itertools.count(1), 1, 6, 2)), x * sum(
        itertools.islice([1, 2, 3, 4], 2)
    )


@program()
def itertools_chain_from_iterable(x):
    return sum(itertools.chain.from_iterable([[x, x], [x * 2]]))


@program()
def itertools_product_permutations(x):
    return x * len(list(itertools.product([1, 2], repeat=2))), list(
        itertools.permutations([1, 2, 3], 2)
    )


# ----- collections ----------------------------------------------------------------------
@whole_program()
def counter_made_and_counted(x):
    counts = collections.Counter("abracadabra")
    return x * counts["a"], counts.most_common(2), counts["z"]


@program()
def counter_update_and_arithmetic(x):
    counts = collections.Counter([1, 1, 2])
    counts.update([2, 3])
    total = counts + collections.Counter([1])
    return x * total[1] + sum(counts.values()), sorted(total.elements())


@program()
def ordered_dict_move_and_pop(x):
    d = collections.OrderedDict(a=1, b=2, c=3)
    d.move_to_end("a")
    last = d.popitem()
    first = d.popitem(last=False)
    return x * last[1] + first[1], list(d)


@program()
def ordered_dict_of_tensors(x):
    d = collections.OrderedDict()
    d["x"] = x
    d["y"] = x * 2
    return sum(d.values()), list(d.keys())


@whole_program()
def deque_rotate_and_pops(x):
    q = collections.deque([x, x * 2, x * 3])
    q.rotate(1)
    q.appendleft(x + 10)
    left, right = q.popleft(), q.pop()
    return left + right, len(q)


@program()
def deque_extendleft_and_index(x):
    q = collections.deque([1, 2])
    q.extendleft([3, 4])
    return x * q[0] + q.index(2), list(q)


@program()
def chain_from_generator(x):
    rows = ([x * i, x + i] for i in range(2))
    return sum(itertools.chain.from_iterable(rows))


@program()
def attrgetter_on_module_weight(x):
    layer = torch.nn.Linear(3, 2)
    shape = operator.attrgetter("weight.shape")(layer)
    return x.sum() * shape[0]


@program()
def deque_maxlen(x):
    q = collections.deque(maxlen=2)
    for i in range(4):
        q.append(x * i)
    return list(q), q.maxlen


@program()
def defaultdict_made(x):
    d = collections.defaultdict(list)
    d["a"].append(x)
    d["a"].append(x * 2)
    return sum(d["a"]), len(d["b"])


# ----- dataclasses made in the frame ----------------------------------------------------
@dataclasses.dataclass
class _Point:
    x: int
    y: int = 2


@dataclasses.dataclass(frozen=True)
class _Settings:
    scale: float = 2.0
    shift: float = 1.0


@program()
def dataclass_fields_and_replace(x):
    p = _Point(1)
    q = dataclasses.replace(p, y=5)
    names = [f.name for f in dataclasses.fields(p)]
    return x * (q.x + q.y), names, q


@program()
def dataclass_asdict_astuple(x):
    p = _Point(3, 4)
    return x * sum(dataclasses.asdict(p).values()), dataclasses.astuple(p)


@program()
def dataclass_frozen_in_frame(x):
    s = _Settings(scale=3.0)
    try:
        s.scale = 1.0
    except dataclasses.FrozenInstanceError:
        pass
    return x * s.scale + s.shift, s == _Settings(3.0)


@program()
def dataclass_holding_tensor(x):
    p = _Point(x, x * 2)
    p.y = p.y + 1
    return p.x + p.y, dataclasses.is_dataclass(p)


@dataclasses.dataclass
class _Layer:
    width: int
    sizes: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.sizes.append(self.width * 2)


@program()
def dataclass_default_factory_and_post_init(x):
    layer = _Layer(3)
    return x * sum(layer.sizes), layer.sizes


class _Pair(typing.NamedTuple):
    left: torch.Tensor
    right: int = 2


@program()
def typing_named_tuple(x):
    pair = _Pair(x)
    return pair.left * pair.right, pair._replace(right=5).right, pair._fields


@program()
def functools_reduce_and_partial(x):
    total = functools.reduce(operator.add, [x, x * 2, x * 3])
    scale = functools.partial(torch.mul, other=2)
    return scale(total), functools.reduce(operator.mul, [1, 2, 3], 1)


# ----- enum members ---------------------------------------------------------------------
class _Mode(enum.Enum):
    SUM = "sum"
    MEAN = "mean"


class _Level(enum.IntEnum):
    LOW = 1
    HIGH = 3


@program()
def enum_member_compare(x):
    mode = _Mode.SUM
    y = x.sum() if mode is _Mode.SUM else x.mean()
    return y, mode.name, mode.value


@program()
def enum_lookup_by_value(x):
    mode = _Mode("mean")
    return x.mean() if mode == _Mode.MEAN else x, _Mode["SUM"].value


class _Flags(enum.Flag):
    SCALE = enum.auto()
    SHIFT = enum.auto()


@program()
def enum_flag_members(x):
    flags = _Flags.SCALE | _Flags.SHIFT
    y = x * 2 if _Flags.SCALE in flags else x
    return y + 1 if flags & _Flags.SHIFT else y


@program()
def int_enum_arithmetic(x):
    return x * _Level.HIGH + _Level.LOW, [m.name for m in _Level], len(_Level)


# ----- str methods and f-strings of shapes ----------------------------------------------
@program(r34)
def fstring_of_shape(x):
    key = f"{x.shape[0]}x{x.shape[1]}"
    return x * len(key), key, f"{x.dim()=}".startswith("x.dim()")


@program(r34)
def str_methods_on_shape(x):
    text = str(tuple(x.shape)).replace(" ", "")
    parts = "relu,gelu".split(",")
    return x.relu() if parts[0].upper() == "RELU" else x, text, "-".join(parts).title()


@program(r34)
def format_spec_of_size(x):
    spec = "{:>4}|{:03d}"  # str.format on the sizes
    return x.sum(), spec.format(x.size(0), x.size(1)), f"{x.numel():,}"


@program(r34)
def str_of_dtype_and_device(x):
    name = str(x.dtype).split(".")[-1]
    return x.double() if name == "float32" else x, f"{x.device}", repr(x.shape)


@program(r34)
def fstring_key_into_dict(x):
    table = {"3x4": 2.0, "4x3": 3.0}
    return x * table[f"{x.shape[0]}x{x.shape[1]}"]


@program()
def str_predicates(x):
    name = "layer_3"
    idx = int(name.rsplit("_", 1)[1]) if name[-1].isdigit() else 0
    return x * idx, name.partition("_"), name.zfill(9), name.center(9, "*")


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_misc_builtin_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


@pytest.mark.parametrize("name", list(WHOLE_PROGRAMS))
def test_program_captured_whole_where_torch_breaks(name):
    check_captured_whole(*WHOLE_PROGRAMS[name], fullgraph=True)


# ----- stateful programs: setters, attributes deleted, submodules swapped ---------------
class _Holder:
    def __init__(self):
        self.cache = 1
        self.scale = 2


def _delete_attribute_outside():
    holder = _Holder()

    def fn(x):
        y = x * holder.scale
        if hasattr(holder, "cache"):
            del holder.cache
        return y + hasattr(holder, "cache")

    return {"fn": fn, "args": lambda: (r(3),), "state": lambda fn: vars(holder)}


def _delete_module_attribute():
    module = torch.nn.Linear(3, 3)
    module.extra = 5

    def fn(x):
        y = module(x) + module.extra
        del module.extra
        return y

    def between(i, fn):
        module.extra = 5 + i

    return {"fn": fn, "args": lambda: (r(3),), "between": between, "state": lambda fn: None}


def _grad_setter():
    weight = torch.nn.Parameter(torch.ones(3))

    def fn(x):
        weight.grad = x.clone()
        return weight.grad * 2

    return {"fn": fn, "args": lambda: (r(3),), "state": lambda fn: weight.grad.clone()}


def _grad_set_to_none():
    weight = torch.nn.Parameter(torch.ones(3))
    weight.grad = torch.ones(3)

    def fn(x):
        weight.grad = None
        return x + 1, weight.grad is None

    return {"fn": fn, "args": lambda: (r(3),), "state": lambda fn: weight.grad}


class _Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2


class _Plus(torch.nn.Module):
    def forward(self, x):
        return x + 3


def _submodule_swapped_for_other_class():
    model = torch.nn.Sequential(torch.nn.ReLU(), _Twice())

    def between(i, fn):
        if i == 2:
            model[1] = _Plus()

    return {"fn": model, "args": lambda: (r(3),), "between": between, "calls": 4}


def _attribute_submodule_swapped():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.ReLU()

        def forward(self, x):
            return self.act(x) + 1

    net = Net()

    def between(i, fn):
        if i == 1:
            net.act = torch.nn.Tanh()

    return {"fn": net, "args": lambda: (r(3),), "between": between, "calls": 3}


def _delete_then_read_with_default():
    holder = _Holder()

    def fn(x):
        del holder.scale
        return x * getattr(holder, "scale", 5), hasattr(holder, "scale")

    def between(i, fn):
        holder.scale = 2 + i

    return {"fn": fn, "args": lambda: (r(3),), "between": between, "state": lambda fn: vars(holder)}


def _delete_missing_attribute():
    holder = _Holder()

    def fn(x):
        del holder.missing
        return x + 1

    return {"fn": fn, "args": lambda: (r(3),), "state": lambda fn: vars(holder)}


def _write_then_delete_outside():
    holder = _Holder()

    def fn(x):
        holder.extra = x * 2
        y = holder.extra + 1
        del holder.extra
        return y

    return {"fn": fn, "args": lambda: (r(3),), "state": lambda fn: sorted(vars(holder))}


def _grad_set_then_changed_in_place():
    weight = torch.nn.Parameter(torch.ones(3))

    def fn(x):
        weight.grad = torch.zeros(3)
        weight.grad.add_(x)
        return weight.grad.sum()

    return {"fn": fn, "args": lambda: (r(3),), "state": lambda fn: weight.grad.clone()}


def test_grad_set_of_other_shape_raises_before_later_writes():
    """Eager's setter raises on a gradient of another size before the statements after
    it run; torch.compile replays the write after its graph (the graph's in-place
    `add_` has run by then). Capture breaks at such a write: the input stays as eager
    leaves it."""
    weight = torch.nn.Parameter(torch.ones(3))

    def fn(x):
        weight.grad = x
        x.add_(1)
        return x

    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    for run in (fn, compiled):
        x = torch.zeros(4)
        with pytest.raises(RuntimeError, match="assign a gradient of size"):
            run(x)
        assert_same(x, torch.zeros(4))
        assert weight.grad is None


def _grad_read_then_set():
    weight = torch.nn.Parameter(torch.ones(3))
    weight.grad = torch.full((3,), 2.0)

    def fn(x):
        old = weight.grad
        weight.grad = old * x
        return old + 1

    return {"fn": fn, "args": lambda: (r(3),), "state": lambda fn: weight.grad.clone()}


class _Registry(type):
    made: typing.ClassVar[list] = []

    def __call__(cls, *args):
        made = super().__call__(*args)
        _Registry.made.append(type(made).__name__)
        return made


class _Registered(metaclass=_Registry):
    def __init__(self, k):
        self.k = k


def _made_by_registry(x):
    return x * _Registered(2).k


def test_metaclass_call_writing_outside_list_is_replayed():
    """The metaclass's __call__ traced whole: its append to a list of the metaclass is
    replayed after the graph, once a call, as eagerly."""
    _Registry.made.clear()
    x = r(3)
    expected = _made_by_registry(x)
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(_made_by_registry, backend=backend, fullgraph=True)
    assert_same(compiled(x), expected)
    assert_same(compiled(x), expected)
    assert _Registry.made == ["_Registered"] * 3
    assert not compiled.graph_breaks


STATEFUL = {
    make.__name__.lstrip("_"): make
    for make in [
        _delete_attribute_outside,
        _delete_then_read_with_default,
        _delete_missing_attribute,
        _write_then_delete_outside,
        _grad_set_then_changed_in_place,
        _grad_read_then_set,
        _delete_module_attribute,
        _grad_setter,
        _grad_set_to_none,
        _submodule_swapped_for_other_class,
        _attribute_submodule_swapped,
    ]
}


@pytest.mark.parametrize("name", list(STATEFUL))
def test_stateful_misc_program_like_torch(name):
    check_program_like_torch(STATEFUL[name])
