"""Container methods, their errors and builtins on Python values, in the style of
torch.compile's function and dict tests.

Programs compared with torch.compile (`check_like_torch`) give its graph and op counts
and eager's results; programs whose eager exception messages torch.compile does not
reproduce are checked against eager alone, as one graph (`check_capture`).
"""

from __future__ import annotations

import collections
import functools
import itertools

import numpy as np
import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _one():
    return (torch.randn(4),)


def _eager(gm, example_inputs):
    return gm.forward


class Plain:
    pass


class WithCall:
    def __call__(self, value):
        return value


class MappingLike:
    """A mapping by protocol only: keys() and [key], no dict base."""

    def __init__(self, value):
        self.data = {"a": value, "b": value + 1}

    def keys(self):
        return self.data.keys()

    def __getitem__(self, key):
        return self.data[key]


# ----- callable() -----------------------------------------------------------------------
def callable_of_instances_made_in_frame(x):
    r = x
    if callable(Plain()):
        r = r + 1
    if callable(WithCall()):
        r = r + 2
    if callable(Plain):
        r = r + 4
    if callable(x):
        r = r + 8
    if callable(iter([x])):
        r = r + 16
    return r, callable(lambda: 0), callable([x]), callable(collections.OrderedDict())


def callable_of_instances_from_arguments(x, plain, with_call):
    r = x
    if callable(plain):
        r = r + 1
    if callable(with_call):
        r = r * 2
    return r


def test_callable_of_instances_follows_the_class_not_its_metaclass():
    check_like_torch(callable_of_instances_made_in_frame, _one)
    check_like_torch(
        callable_of_instances_from_arguments, lambda: (torch.randn(4), Plain(), WithCall())
    )


# ----- dict.update and dict() -------------------------------------------------------------
def update_from_mapping_like(x):
    d = {"a": x - 1}
    result = d.update(MappingLike(x))
    o = collections.OrderedDict()
    o.update(MappingLike(x * 2))
    return d["a"], d["b"], result is None, o


def construct_from_mapping_like(x):
    # NOTE: torch.compile 2.13 raises here (it iterates the mapping instead)
    e = dict(MappingLike(x * 2), c=3)
    o = collections.OrderedDict(MappingLike(x))
    return e, o


def update_from_pairs_and_keywords(x):
    d = {"a": x}
    d.update([("b", x + 1), ["c", x + 2]], d=4)
    d.update(zip("ef", [x * 2, x * 3]))
    d.update()
    return d


def test_dict_update_reads_a_mapping_by_keys_and_getitem(check):
    check_like_torch(update_from_mapping_like, _one)
    check_like_torch(update_from_pairs_and_keywords, _one)
    check(construct_from_mapping_like, torch.randn(4))


def dict_argument_errors(x):
    out = []
    attempts = [
        lambda: {}.update({}, {}),
        lambda: dict({}, {}),
        lambda: collections.OrderedDict({}, {}),
        lambda: {}.update([1]),
        lambda: {}.update([(1, 2), (1, 2, 3)]),
        lambda: dict(["ab", "c"]),
    ]
    for attempt in attempts:
        try:
            attempt()
        except (TypeError, ValueError) as error:
            out.append(f"{type(error).__name__}: {error}")
    return x + len(out), out


def test_dict_update_raises_pythons_errors_for_bad_arguments(check):
    check(dict_argument_errors, torch.randn(4))


# ----- errors of container methods, caught in the frame -----------------------------------
def container_method_errors(x):
    out = []
    attempts = [
        lambda: [].pop(),
        lambda: [1, 2].pop(5),
        lambda: [1, 2].pop(-3),
        lambda: (1, 2).index(7),
        lambda: [1, 2].index(7),
        lambda: [1, 2].remove(9),
        lambda: collections.deque([1]).remove(9),
        lambda: {}.popitem(),
        lambda: collections.OrderedDict().popitem(),
        lambda: {1}.remove(3),
        lambda: {1, 2}.remove("b"),
    ]
    for attempt in attempts:
        try:
            attempt()
        except (IndexError, ValueError, KeyError) as error:
            out.append(f"{type(error).__name__}: {error}")
    return x + len(out), out


def test_container_method_errors_are_raised_in_the_captured_code(check):
    check(container_method_errors, torch.randn(4))


def index_with_bounds(x):
    items = [1, 2, 1, 3, 1]
    return (
        x + items.index(1, 1),
        items.index(1, 3),
        items.index(1, -1),
        (1, 2, 1).index(1, 1, 3),
        items.index(3, 0, 4),
    )


def index_missing_inside_bounds(x):
    try:
        [1, 2, 1].index(2, 2)
    except ValueError as error:
        return x + 1, str(error)
    return x, ""


def test_sequence_index_searches_between_start_and_stop(check):
    check_like_torch(index_with_bounds, _one)
    check(index_missing_inside_bounds, torch.randn(4))


# ----- namedtuple made in the frame -------------------------------------------------------
def namedtuple_made_in_frame(x):
    point = collections.namedtuple("Point", ["x", "y"], defaults=(0,))
    p = point(x)
    return p.x + p.y, type(p).__module__ == __name__, type(p).__qualname__, p._fields


@pytest.mark.parametrize("calls", [1, 2])
def test_namedtuple_made_in_frame_names_the_callers_module(check, calls):
    check(namedtuple_made_in_frame, torch.randn(4))


# ----- sequence repetition and concatenation ------------------------------------------------
class Items(list):
    pass


def repeat_with_the_count_on_either_side(x):
    items = [x, 1]
    alias = items
    items *= 2
    pair = (x,)
    pair *= 3
    return alias, pair, sum(4 * [x]), 2 * (x, 1), 2 * Items([x]), Items([1]) * 2, 0 * [x]


def repeat_and_concatenate_errors(x):
    out = []
    attempts = [lambda: [1] * 2.0, lambda: (1,) + [2], lambda: [1] + (2,), lambda: 2.5 * (1,)]
    for attempt in attempts:
        try:
            attempt()
        except TypeError as error:
            out.append(str(error))
    items = [1]
    items += (2, 3)
    return x + 1, out, items


def repeat_an_argument_list_in_place(x, items):
    items *= 2
    return x + len(items)


def test_sequence_repetition_with_the_count_on_either_side(check):
    check_like_torch(repeat_with_the_count_on_either_side, _one)
    check_like_torch(repeat_an_argument_list_in_place, lambda: (torch.randn(4), [1, 2]))
    check(repeat_and_concatenate_errors, torch.randn(4))


# ----- OrderedDict comparison and fromkeys of dict types --------------------------------------
def ordered_dicts_compare_by_order(x):
    a = collections.OrderedDict(a=1, b=2)
    b = collections.OrderedDict(b=2, a=1)
    return x + 1, a == b, a != b, a == dict(b), dict(a) == dict(b), {"a": 1} == {"a": 1}


def fromkeys_of_dict_types(x, y):
    names = ["a", "b"]
    plain = dict.fromkeys(names)
    filled = dict.fromkeys(plain, x + 1)
    default = collections.defaultdict.fromkeys(iter(filled), x - 2)
    ordered = collections.OrderedDict.fromkeys(tuple(names), value=y)
    return (
        filled["a"] * default["b"] + ordered["a"],
        type(default).__name__,
        default.default_factory,
        list(ordered),
    )


def test_ordered_dict_equality_and_fromkeys_of_dict_types():
    check_like_torch(ordered_dicts_compare_by_order, _one)
    check_like_torch(fromkeys_of_dict_types, lambda: (torch.randn(4), torch.randn(4)))


# ----- attributes of partials made in the frame ---------------------------------------------
PARTIAL_ATTRIBUTES = ("func", "args", "keywords", "__call__", "__dict__", "__doc__", "__module__",
                      "__repr__", "__name__", "__qualname__", "__code__", "__defaults__", "__get__",
                      "__wrapped__", "__class__")  # fmt: skip


def partial_attributes(t):
    p = functools.partial(lambda x, y: torch.sin(x) + torch.cos(y), y=t)
    return p(t), [hasattr(p, name) for name in PARTIAL_ATTRIBUTES], p.__module__, p.__class__


def partial_missing_attribute(t):
    p = functools.partial(torch.add, other=t)
    try:
        return p.__name__
    except AttributeError as error:
        return p(t), str(error)


def test_hasattr_of_a_partial_made_in_the_frame_reads_its_class(check):
    check_like_torch(partial_attributes, _one)
    check(partial_missing_attribute, torch.randn(4))


# ----- NumPy type descriptions folded ---------------------------------------------------------
def numpy_type_queries(x):
    kind = np.dtype("float")
    return (
        x + np.iinfo(np.int16).bits,
        kind,
        np.finfo(kind).bits,
        np.promote_types(np.int8, np.float32),
        np.can_cast(np.int8, np.int64),
        np.iinfo(np.uint8).max > 200,
    )


def numpy_limits_in_tensor_arithmetic(x, kind):
    return x + np.iinfo(np.int16).max, x * np.finfo(kind).eps, np.float32(2.5) * x, x > np.int64(0)


def test_numpy_finfo_iinfo_and_dtype_are_folded(check):
    check(numpy_type_queries, torch.randn(4))
    check_like_torch(numpy_limits_in_tensor_arithmetic, lambda: (torch.randn(4), "float16"))


# ----- writes to a dict or set while it is iterated -------------------------------------------
def dict_grows_while_iterated(x):
    d = {"a": 1}
    try:
        for _ in d:
            d["b"] = 2
    except RuntimeError as error:
        return x + 1, str(error), d
    return x, "", d


def set_grows_while_iterated(x):
    s = {1, 2}
    try:
        for item in s:
            s.add(item + 10)
    except RuntimeError as error:
        return x + 1, str(error)
    return x, ""


def argument_dict_shrinks_while_iterated(x, d):
    try:
        for _ in d.keys():
            d.pop("b", None)
    except RuntimeError as error:
        return x + 1, str(error)
    return x, ""


def dict_values_written_while_iterated(x):
    d = {"a": x, "b": x + 1}
    seen = []
    for key in d:
        d["b"] = x * 5
        seen.append(d[key])
    values = []
    for value in d.values():
        d["a"] = x * 7
        values.append(value)
    return seen, values, list(d.items())


def test_a_dict_or_set_changing_size_while_iterated_raises(check):
    check_like_torch(dict_grows_while_iterated, _one)
    check_like_torch(
        argument_dict_shrinks_while_iterated, lambda: (torch.randn(4), {"a": 1, "b": 2})
    )
    check_like_torch(dict_values_written_while_iterated, _one)
    # NOTE: torch.compile 2.13 gives its own message for the set
    check(set_grows_while_iterated, torch.randn(4))


# ----- eager's TypeError/IndexError for unhashable keys, bad indices, unorderable sorts ------
def unhashable_keys_bad_indices_and_sorts(x):
    pair = (x, 1)
    half = 1.0
    attempts = [
        lambda: {[1]: 2},
        lambda: {1}.add([2]),
        lambda: {(1, [2]): 3},
        lambda: {}.get([1]),
        lambda: [1][half],
        lambda: [1].__getitem__("a"),
        lambda: [1, 2, 3].pop("x"),
        lambda: pair[5],
        lambda: collections.deque([1])[4],
        lambda: [3, "a"].sort(),
        lambda: sorted([1, "a"]),
    ]
    out = []
    for attempt in attempts:
        try:
            attempt()
        except (TypeError, IndexError) as error:
            out.append(f"{type(error).__name__}: {error}")
    return x + len(out), out


def lists_as_items_of_sequence_methods(x):
    nested = [[1], [2], 3]
    nested.remove([1])
    return x + nested.index([2]), nested.count([2]), [[1]].count([1]), nested


def test_unhashable_keys_bad_indices_and_unorderable_sorts_raise_eagers_errors(check):
    check(unhashable_keys_bad_indices_and_sorts, torch.randn(4))
    check_like_torch(lists_as_items_of_sequence_methods, _one)


# ----- operator dunders of containers called by name -------------------------------------------
def container_operator_dunders(x):
    items = [1, 2]
    alias = items
    items.__iadd__([3])
    joined = items.__add__([x])
    repeated = items.__mul__(2)
    flags = {1, 2}
    flags.__ior__({3})
    return (
        joined,
        alias,
        repeated,
        (1,).__rmul__(2),
        flags.__or__({9}),
        flags.__sub__({1}),
        items.__eq__([1, 2, 3]),
        items.__lt__([2]),
        {"a": 1}.__or__({"b": x}),
    )


def test_container_operator_dunders_called_by_name():
    check_like_torch(container_operator_dunders, _one)


def limit_of_a_dtype_argument(x, kind):
    return x + np.iinfo(kind).max, np.promote_types(kind, np.int8)


def test_a_numpy_dtype_argument_folds_and_is_guarded():
    compiled = dynamo_capture.optimize(limit_of_a_dtype_argument, backend=_eager, fullgraph=True)
    for kind in (np.dtype("int16"), np.dtype("int32"), np.dtype("int16"), np.dtype(">i2")):
        got = compiled(torch.zeros(2), kind)
        expected = limit_of_a_dtype_argument(torch.zeros(2), kind)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]


# ----- argument counts of modelled methods ---------------------------------------------
def wrong_argument_counts_caught_in_the_frame(x):
    caught = 0
    calls = (
        lambda: {}.setdefault(),
        lambda: dict(a=1).get(),
        lambda: (1, 2).count(),
        lambda: [1].append(),
        lambda: [1].insert(1),
        lambda: [2, 1].sort(1),
        lambda: {1}.add(),
        lambda: {1}.pop(1),
        lambda: {1: 2}.pop(),
        lambda: {1: 2}.items(1),
        lambda: [1].clear(a=1),
    )
    for call in calls:
        try:
            call()
        except TypeError:
            caught += 1
    return x + caught


def test_a_wrong_argument_count_raises_pythons_type_error_in_the_graph():
    check_like_torch(wrong_argument_counts_caught_in_the_frame, _one)


def wrong_argument_count_leaves_the_list(x):
    items = [1, 2]
    try:
        items.pop(1, 2)
    except TypeError:
        x = x + 1
    return x * len(items), items


def test_a_pop_with_too_many_arguments_leaves_the_list_unchanged():
    check_like_torch(wrong_argument_count_leaves_the_list, _one)


def unhashable_and_wrong_type_operands_caught(x):
    caught = 0
    for check in (
        lambda: [1] in {1: 2},
        lambda: [1] in {1, 2},
        lambda: 1 in "abc",
        lambda: frozenset({1}).union(1),
        lambda: "a".upper(1),
    ):
        try:
            check()
        except TypeError:
            caught += 1
    return x * caught


def test_unhashable_and_wrong_type_operands_raise_in_the_graph():
    check_like_torch(unhashable_and_wrong_type_operands_caught, _one)


def wrong_argument_count_propagates(x):
    x = x + 1
    {}.setdefault()
    return x


def test_a_wrong_argument_count_propagates_eagers_message():
    check_like_torch(wrong_argument_count_propagates, _one)


def keyword_and_subclass_argument_errors_caught(x):
    caught = 0
    for call in (
        lambda: dict(a=1).get(1, default=2),
        lambda: collections.defaultdict(int).copy(1),
        lambda: collections.deque([1]).rotate(1, 2),
    ):
        try:
            call()
        except TypeError as error:
            caught += len(str(error))
    return x + caught


def test_keyword_and_subclass_argument_errors_raise_eagers_messages(check):
    # torch.compile does not raise for the first two: compared with eager alone
    check(keyword_and_subclass_argument_errors_caught, torch.randn(4))


# ----- dunders called by name, NumPy limits from outside ------------------------------
def reversed_dunders_called_by_name(x):
    items = [1, 2, 3]
    names = {"a": 1, "b": 2}
    queue = collections.deque([4, 5])
    return (
        [x * i for i in items.__reversed__()],
        list(names.__reversed__()),
        [x + i for i in queue.__reversed__()],
    )


def test_reversed_dunder_of_a_list_dict_or_deque_is_reversed():
    check_like_torch(reversed_dunders_called_by_name, _one)


def limits_of_an_iinfo_argument(x, info):
    return x + info.max, x - info.min, info.bits


def test_an_iinfo_argument_gives_its_limits_and_is_guarded():
    kinds = itertools.cycle([np.int32, np.int32, np.int16, np.uint8, np.int16])
    check_like_torch(
        limits_of_an_iinfo_argument, lambda: (torch.randn(4), np.iinfo(next(kinds))), calls=5
    )


# ----- argument counts of modelled builtins ---------------------------------------------
def wrong_builtin_arguments_caught(x):
    caught = 0
    for call in (
        lambda: isinstance(x, torch.Tensor, strict=True),
        lambda: len(),
        lambda: abs(1, 2),
        lambda: sorted([2, 1], None),
        lambda: reversed([1], [2]),
        lambda: list(1, 2),
    ):
        try:
            call()
        except TypeError as error:
            caught += len(str(error))
    return x + caught


def test_a_builtin_called_with_wrong_arguments_raises_eagers_type_error(check):
    check(wrong_builtin_arguments_caught, torch.randn(4))


def isinstance_with_a_keyword(x):
    x = x.sin()
    if isinstance(x, torch.Tensor, strict=True):
        x = x.sin()
    return x


def test_isinstance_with_a_keyword_raises_not_ignores_it():
    compiled = dynamo_capture.optimize(isinstance_with_a_keyword, backend=_eager)
    with pytest.raises(TypeError, match="isinstance\\(\\) takes no keyword arguments"):
        compiled(torch.randn(4))


def subdtype_of_an_argument_type(x, n):
    return x + np.issubdtype(type(n), np.integer), np.issubdtype(np.float32, np.floating)


def test_numpy_issubdtype_of_types_folds():
    values = itertools.cycle([4096, 7, 2.5, 3])
    check_like_torch(subdtype_of_an_argument_type, lambda: (torch.randn(4), next(values)), calls=4)
