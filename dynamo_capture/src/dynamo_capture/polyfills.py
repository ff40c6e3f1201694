"""Python stand-ins for C builtins and stdlib C functions, traced where the original is called.

Capture cannot look inside a C function. For the common ones this module keeps
three tables, consulted in this order when captured code calls a C callable:

    FOLDED          pure C callables: called at capture time when every argument is a
                    capture-time constant (keyword.iskeyword("for") -> True)
    STAND_INS       original -> Python function with the same behaviour, interpreted
                    like user code (itertools.accumulate, itertools.combinations, ...)
    INSTANCE_CALLS  C class -> how to call its instances (an operator.itemgetter made
                    outside the frame: its arguments come back from __reduce__)

    itertools.accumulate(xs, operator.mul)   # traced as _accumulate below: every
                                             # product becomes a graph node

The stand-ins are plain Python generators and functions; capture runs a generator
to its end, so an iterator with no end (`itertools.count()`, `repeat(x)`, `cycle`)
is an `IteratorValue` with an `endless` item function instead, which `zip`, `map`,
`next` and `for` read lazily.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import functools
import heapq
import itertools
import keyword
import math
import operator
import string
import sys
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from dynamo_capture.errors import Unsupported
from dynamo_capture.operations import NotConstant, as_constant, constant_arguments, sequence_items
from dynamo_capture.scalar_subclasses import BASE_NEWS
from dynamo_capture.sym_numbers import recomputed_from_values
from dynamo_capture.values import (
    ContextValue,
    IteratorValue,
    PartialValue,
    PythonValue,
    TupleValue,
    Value,
)

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = ["FOLDED", "INSTANCE_CALLS", "STAND_INS", "call_polyfill", "endless_item"]

_END = object()  # the sentinel the stand-ins give next() to learn an iterator ended


# ----- helpers the stand-ins call: pure, so folded on their constant arguments ------
def _combination_indices(n: int, r: int) -> list[tuple[int, ...]]:
    return list(itertools.combinations(range(n), r))


def _combination_with_replacement_indices(n: int, r: int) -> list[tuple[int, ...]]:
    return list(itertools.combinations_with_replacement(range(n), r))


def _permutation_indices(n: int, r: int | None) -> list[tuple[int, ...]]:
    return list(itertools.permutations(range(n), r))


def _product_indices(sizes: tuple[int, ...]) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(n) for n in sizes)))


def _islice_bounds(args: tuple[Any, ...]) -> tuple[int, int | None, int]:
    bounds = slice(*args)
    start = 0 if bounds.start is None else bounds.start
    step = 1 if bounds.step is None else bounds.step
    if start < 0 or (bounds.stop is not None and bounds.stop < 0) or step <= 0:
        raise ValueError("Indices for islice() must be None or an int >= 0; step must be > 0")
    return start, bounds.stop, step


# ----- the stand-ins ---------------------------------------------------------------
def _accumulate(iterable, func=None, *, initial=None):
    it = iter(iterable)
    total = initial
    if initial is None:
        total = next(it, _END)
        if total is _END:
            return
    yield total
    for element in it:
        total = total + element if func is None else func(total, element)
        yield total


def _chain_from_iterable(iterables):
    for iterable in iterables:
        yield from iterable


def _combinations(iterable, r):
    pool = tuple(iterable)
    for indices in _combination_indices(len(pool), r):
        yield tuple(pool[i] for i in indices)


def _combinations_with_replacement(iterable, r):
    pool = tuple(iterable)
    for indices in _combination_with_replacement_indices(len(pool), r):
        yield tuple(pool[i] for i in indices)


def _permutations(iterable, r=None):
    pool = tuple(iterable)
    for indices in _permutation_indices(len(pool), r):
        yield tuple(pool[i] for i in indices)


def _islice(iterable, *args):
    start, stop, step = _islice_bounds(args)
    it = iter(iterable)
    index = 0
    wanted = start
    while stop is None or index < stop:
        element = next(it, _END)
        if element is _END:
            return
        if index == wanted:
            yield element
            wanted += step
        index += 1


def _zip_longest(*iterables, fillvalue=None):
    iterators = [iter(it) for it in iterables]
    while True:
        row = []
        alive = 0
        for it in iterators:
            element = next(it, _END)
            if element is _END:
                element = fillvalue
            else:
                alive += 1
            row.append(element)
        if not alive:
            return
        yield tuple(row)


def _groupby(iterable, key=None):
    groups = []
    current_key = _END
    for element in iterable:
        element_key = element if key is None else key(element)
        if current_key is _END or not element_key == current_key:
            current_key = element_key
            groups.append((element_key, []))
        groups[-1][1].append(element)
    for group_key, members in groups:
        yield group_key, iter(members)


def _starmap(function, iterable):
    for args in iterable:
        yield function(*args)


def _pairwise(iterable):
    it = iter(iterable)
    previous = next(it, _END)
    if previous is _END:
        return
    for element in it:
        yield previous, element
        previous = element


def _takewhile(predicate, iterable):
    for element in iterable:
        if not predicate(element):
            return
        yield element


def _dropwhile(predicate, iterable):
    dropping = True
    for element in iterable:
        if dropping and predicate(element):
            continue
        dropping = False
        yield element


def _filterfalse(predicate, iterable):
    for element in iterable:
        if not (bool(element) if predicate is None else predicate(element)):
            yield element


def _compress(data, selectors):
    for element, keep in zip(data, selectors):
        if keep:
            yield element


def _count_elements(mapping, iterable):
    for element in iterable:
        mapping[element] = mapping.get(element, 0) + 1


def _tee(iterable, n=2):
    items = list(iterable)  # read whole, as the stand-ins read their iterables
    return tuple(iter(items) for _ in range(n))


def _nlargest(n, iterable, key=None):
    return sorted(iterable, key=key, reverse=True)[:n]  # as heapq documents it


def _nsmallest(n, iterable, key=None):
    return sorted(iterable, key=key)[:n]


class _ComparedByFunction:
    """functools.cmp_to_key's key: orders objects by a comparison function's sign."""

    __slots__ = ("compare", "obj")

    def __init__(self, obj, compare):
        self.obj = obj
        self.compare = compare

    def __lt__(self, other):
        return self.compare(self.obj, other.obj) < 0

    def __gt__(self, other):
        return self.compare(self.obj, other.obj) > 0

    def __eq__(self, other):
        return self.compare(self.obj, other.obj) == 0

    def __le__(self, other):
        return self.compare(self.obj, other.obj) <= 0

    def __ge__(self, other):
        return self.compare(self.obj, other.obj) >= 0

    __hash__ = None


def _cmp_to_key(mycmp):
    def key(obj):
        return _ComparedByFunction(obj, mycmp)

    return key


def _itemgetter_call(items, obj):
    if len(items) == 1:
        return obj[items[0]]
    return tuple(obj[item] for item in items)


def _attrgetter_call(names, obj):
    found = []
    for name in names:
        value = obj
        for part in name.split("."):
            value = getattr(value, part)
        found.append(value)
    if len(found) == 1:
        return found[0]
    return tuple(found)


def _methodcaller_call(name, args, kwargs, obj):
    return getattr(obj, name)(*args, **kwargs)


def _group_tensors_by_device_and_dtype(tensorlistlist, with_indices=False):
    # torch._C's grouping (clip_grad_norm_'s, the foreach optimizers'): the same tensors,
    # grouped by the first list's (device, dtype), each group keeping the lists' order
    groups = {}
    for index, first in enumerate(tensorlistlist[0]):
        key = (first.device, first.dtype)
        if key not in groups:
            groups[key] = ([[] for _ in tensorlistlist], [])
        lists, indices = groups[key]
        for group_list, full_list in zip(lists, tensorlistlist):
            group_list.append(full_list[index])
        if with_indices:
            indices.append(index)
    return groups


STAND_INS: dict[Any, Callable[..., Any]] = {
    itertools.accumulate: _accumulate,
    itertools.chain.from_iterable: _chain_from_iterable,
    itertools.combinations: _combinations,
    itertools.combinations_with_replacement: _combinations_with_replacement,
    itertools.permutations: _permutations,
    itertools.islice: _islice,
    itertools.zip_longest: _zip_longest,
    itertools.groupby: _groupby,
    itertools.starmap: _starmap,
    itertools.pairwise: _pairwise,
    itertools.takewhile: _takewhile,
    itertools.dropwhile: _dropwhile,
    itertools.filterfalse: _filterfalse,
    itertools.compress: _compress,
    itertools.tee: _tee,
    heapq.nlargest: _nlargest,
    heapq.nsmallest: _nsmallest,
    collections._count_elements: _count_elements,  # Counter.update's counting loop
    functools.cmp_to_key: _cmp_to_key,
    torch._C._group_tensors_by_device_and_dtype: _group_tensors_by_device_and_dtype,
}

# Pure C callables (and this module's index helpers): folded on constant arguments.
FOLDED: set[Any] = {
    keyword.iskeyword,
    keyword.issoftkeyword,
    sys.getrecursionlimit,
    sys.getdefaultencoding,
    sys.getsizeof,
    sys.intern,
    builtins.bytes,
    builtins.frozenset,
    math.gcd,
    math.lcm,
    string.capwords,
    typing.get_origin,
    typing.get_args,
    collections.namedtuple,  # a class made from constants: made once, at capture time
    operator.itemgetter,
    operator.attrgetter,
    operator.methodcaller,
    operator.concat,
    _combination_indices,
    _combination_with_replacement_indices,
    _permutation_indices,
    _product_indices,
    _islice_bounds,
}

# Folded callables that name the module of the frame calling them (sys._getframe), and
# the keyword that names it instead.
_CALLER_MODULE_KEYWORDS: dict[Any, str] = {
    collections.namedtuple: "module",
}


# ----- instances of C classes --------------------------------------------------------
def _getter_call(stand_in: Callable[..., Any]) -> Callable[[Any], tuple[Any, list[Any]]]:
    def bind(getter: Any) -> tuple[Any, list[Any]]:
        return stand_in, [getter.__reduce__()[1]]

    return bind


def _methodcaller_bind(caller: Any) -> tuple[Any, list[Any]]:
    maker, args = caller.__reduce__()
    if maker is operator.methodcaller:  # no keyword arguments: (methodcaller, (name, *args))
        return _methodcaller_call, [args[0], args[1:], {}]
    return _methodcaller_call, [maker.args[0], args, dict(maker.keywords)]


# C class -> (instance -> the stand-in and the leading arguments it takes from the instance)
INSTANCE_CALLS: dict[type, Callable[[Any], tuple[Any, list[Any]]]] = {
    operator.itemgetter: _getter_call(_itemgetter_call),
    operator.attrgetter: _getter_call(_attrgetter_call),
    operator.methodcaller: _methodcaller_bind,
}

# Constructors whose instances are callable: with arguments known only when the code
# runs, the instance becomes a partial application of the stand-in.
_CONSTRUCTORS: dict[Any, Callable[[list[Value], dict[str, Value]], Value]] = {
    operator.itemgetter: lambda args, kwargs: PartialValue(
        PythonValue(_itemgetter_call), [TupleValue(list(args))], {}
    ),
    operator.methodcaller: lambda args, kwargs: PartialValue(
        PythonValue(_methodcaller_call),
        [args[0], TupleValue(list(args[1:])), _dict_value(kwargs)],
        {},
    ),
}


def _dict_value(kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.values import DictValue

    return DictValue(dict(kwargs))


# ----- iterators without an end ------------------------------------------------------
def endless_item(iterator: IteratorValue) -> Value:
    """The next item of an endless iterator (appended to its items)."""
    assert iterator.endless is not None
    item = iterator.endless(len(iterator.items))
    iterator.items.append(item)
    return item


def _count(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    start, step = _constant_arguments("count", ("start", "step"), (0, 1), args, kwargs)
    return IteratorValue([], endless=lambda index: PythonValue(start + index * step))


def _repeat(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    element = args[0] if args else kwargs["object"]
    times_value = args[1] if len(args) > 1 else kwargs.get("times")
    if times_value is None:
        return IteratorValue([], endless=lambda index: element)
    times = as_constant(times_value)
    return IteratorValue([element] * max(times, 0))


def _cycle(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    items = sequence_items(tx, args[0])
    if not items:
        return IteratorValue([])
    return IteratorValue([], endless=lambda index: items[index % len(items)])


def _constant_arguments(
    name: str,
    names: tuple[str, ...],
    defaults: tuple[Any, ...],
    args: list[Value],
    kwargs: dict[str, Value],
) -> list[Any]:
    values = list(defaults)
    for index, value in enumerate(args):
        values[index] = value
    for key, value in kwargs.items():
        values[names.index(key)] = value
    try:
        return [as_constant(v) if isinstance(v, Value) else v for v in values]
    except NotConstant:
        raise Unsupported(f"itertools.{name}() of values known only when it runs") from None


def _nullcontext(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    enter_result = args[0] if args else kwargs.get("enter_result", PythonValue(None))
    return ContextValue("null", (enter_result,))


def _tuple_new(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """tuple.__new__(cls, iterable) for a tuple subclass (a namedtuple's _make)."""
    cls = as_constant(args[0]) if args else None
    if not (isinstance(cls, type) and issubclass(cls, tuple)) or kwargs or len(args) > 2:
        raise Unsupported("tuple.__new__ with arguments capture does not know")
    if cls.__init__ is not tuple.__init__:
        raise Unsupported(f"tuple.__new__ of {cls.__name__}, which has its own __init__")
    items = sequence_items(tx, args[1]) if len(args) > 1 else []
    return TupleValue(items, cls)


def _deque(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.deques import make_deque

    return make_deque(tx, args, kwargs)


def _generator_context(tx: Translator, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from dynamo_capture.generator_contexts import construct_generator_context

    return construct_generator_context(tx, args, kwargs)


_HANDLERS: dict[Any, Callable[[Translator, list[Value], dict[str, Value]], Value]] = {
    tuple.__new__: _tuple_new,
    **BASE_NEWS,
    contextlib.nullcontext: _nullcontext,
    contextlib._GeneratorContextManager: _generator_context,
    collections.deque: _deque,
    itertools.count: _count,
    itertools.repeat: _repeat,
    itertools.cycle: _cycle,
}


# ----- the entry -----------------------------------------------------------------
def _lookup(table: Any, obj: Any) -> Any:
    try:
        return table.get(obj) if isinstance(table, dict) else (obj if obj in table else None)
    except TypeError:  # unhashable callables
        return None


def call_polyfill(
    tx: Translator, obj: Any, args: list[Value], kwargs: dict[str, Value]
) -> Value | None:
    """Call the C callable `obj` through this module's tables; None where none applies."""
    from dynamo_capture.calls import inline_function

    if _lookup(FOLDED, obj) is not None:
        try:
            real_args, real_kwargs = constant_arguments(args, kwargs)
        except NotConstant:
            construct = _lookup(_CONSTRUCTORS, obj)
            if construct is not None:
                return construct(args, kwargs)
            if obj in (builtins.bytes, builtins.frozenset):
                return None  # the builtin table decides
            name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
            raise Unsupported(f"{name}() on values known only when it runs") from None
        keyword = _lookup(_CALLER_MODULE_KEYWORDS, obj)
        if keyword is not None and keyword not in real_kwargs:
            # NOTE: these read their caller's frame for the module they name; called
            # here, that frame is capture's own, so the user's module is passed instead.
            real_kwargs[keyword] = tx.f_globals.get("__name__")
        try:
            result = obj(*real_args, **real_kwargs)
            where = f"{getattr(obj, '__name__', obj)}() of a symbolic number"
            return PythonValue(recomputed_from_values(obj, real_args, real_kwargs, result, where))
        except Exception as error:
            name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
            raise Unsupported(f"{name}() raised {type(error).__name__}: {error}") from error
    handler = _lookup(_HANDLERS, obj)
    if handler is not None:
        return handler(tx, args, kwargs)
    stand_in = _lookup(STAND_INS, obj)
    if stand_in is not None:
        return _not_a_generator(inline_function(tx, stand_in, args, kwargs, None))
    bind = INSTANCE_CALLS.get(type(obj))
    if bind is not None:
        stand_in, leading = bind(obj)
        leading_values = [PythonValue(value) for value in leading]
        return _not_a_generator(
            inline_function(tx, stand_in, [*leading_values, *args], kwargs, None)
        )
    return None


def _not_a_generator(value: Value) -> Value:
    """A stand-in's iterator: eagerly the C callable's own iterator (an itertools.chain),
    not the generator the stand-in is."""
    if isinstance(value, IteratorValue) and value.kind == "generator":
        value.kind = "iter"
    return value
