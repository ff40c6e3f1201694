"""Sets and frozensets from the inputs and globals, functools.lru_cache / cache / wraps
functions, and torch.utils.checkpoint.checkpoint in captured code.

Each program is captured as one graph (fullgraph=True) with eager's results, and gives
torch.compile's graph count (and op count, except where torch.compile keeps an
opaque higher-order node for checkpoint).
"""

from __future__ import annotations

import collections
import collections.abc
import functools

import pytest
import torch
from torch.utils.checkpoint import checkpoint
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import clone_inputs, eager_backend

torch.manual_seed(3)
MODES = {"sum", "mean"}
FLAGS = frozenset({"scale", "shift"})


def r(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


# ----- sets and frozensets -------------------------------------------------------------
def _set_membership_and_sorted(x, s):
    y = x
    if 2 in s:
        y = y + 1
    for item in sorted(s):
        y = y * item
    return y, len(s), 7 not in s


def _set_algebra_on_argument(x, s):
    union, common, rest, either = s | {10}, s & {1, 2}, s - {1}, s ^ {3, 4}
    y = x + len(union) + len(common) * 10 + len(rest) * 100
    return y, union, common, rest, either, s <= {1, 2, 3, 4}, s.issubset(union)


def _set_queries_on_argument(x, s):
    y = x * len(s.union([5, 6]))
    return y, s.isdisjoint({9}), s.intersection({1, 3}), s.difference({1}), s.copy()


def _global_sets(x):
    y = x.sum() if "sum" in MODES else x.mean()
    if "scale" in FLAGS:
        y = y * len(FLAGS | {"other"})
    return y, sorted(MODES)


def _set_of_strings(x, names):
    y = x
    for name in sorted(names):
        y = y * 2 if name.startswith("a") else y + 1
    return y, "bb" in names


def _frozenset_of_tuples(x, pairs):
    return x + sum(a * b for a, b in sorted(pairs))


def _iterate_small_int_set(x, s):
    y = x
    for item in s:  # small ints iterate in one order for equal sets built alike
        y = y + item
    return y


_ACTIVATIONS = {torch.nn.ReLU, torch.nn.Tanh}
_NUMBER_TYPES = frozenset({int, float})


def _global_sets_of_classes(x, k):
    y = x * 2 if type(k) in _NUMBER_TYPES else x
    return y if torch.nn.GELU in _ACTIVATIONS else y + 1, len(_ACTIVATIONS)


def _set_of_tensors_by_identity(x, y):
    seen = {x, y}
    z = x + 1 if x in seen else x
    return z, len(seen), len({x, x})


class _AddOne(torch.nn.Module):
    def forward(self, x):
        return x + 1


_MODULES = [_AddOne(), _AddOne()]


def _set_of_modules_by_identity(x):
    chosen = {_MODULES[0]}
    for module in _MODULES:
        if module in chosen:
            x = module(x)
    return x


def _dict_keyed_by_tensors(x, y):
    names = {}
    for name, tensor in (("a", x), ("b", y), ("c", x)):
        if tensor not in names:
            names[tensor] = set()
        names[tensor].add(name)
    return [sorted(group) for group in names.values()], x * len(names), y in names


def _deque_and_list_remove(x, y):
    queue = collections.deque([1, 2, 3, 2], maxlen=4)
    queue.remove(2)
    items = [3, x, y]
    items.remove(3)
    return x * len(queue) + queue.index(3), list(queue), queue.count(2), len(items), items[0]


def _count_and_index_by_identity(x, y):
    same, numbers = [x, x], [1, 2, 1, x]
    return same.count(x), numbers.index(2), y + len(numbers)


class _TwoKeys(collections.abc.Mapping):
    def __init__(self):
        self.data = {"ab": 1, "cd": 2}

    def __getitem__(self, key):
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


def _dict_of_mappings(x):
    chained = collections.ChainMap({"ab": 1}, {"cd": 2})
    chained["ef"] = 3
    return x * len(dict(chained)), dict(chained), dict(_TwoKeys())


def _sorted_with_cmp_to_key(x):
    order = sorted([3, 1, 2], key=functools.cmp_to_key(lambda a, b: b - a))
    words = sorted(["b", "a", "c"], key=functools.cmp_to_key(lambda a, b: (a > b) - (a < b)))
    return [x * i for i in order], words


class _Ranked:
    def __init__(self, rank):
        self.rank = rank

    def __lt__(self, other):
        return self.rank < other.rank


def _sorted_user_objects(x):
    ranked = sorted([_Ranked(3), _Ranked(1), _Ranked(2)])
    backwards = sorted([_Ranked(1), _Ranked(5)], reverse=True)
    return [x * item.rank for item in ranked], [item.rank for item in backwards]


# ----- functools.lru_cache / cache / wraps ------------------------------------------------
@functools.lru_cache(maxsize=16)
def _cached_scale(n):
    return n * 2


@functools.cache
def _cached_sin(x):
    return x.sin()


@functools.lru_cache(maxsize=8)
def _cached_affine(x, k=2):
    return x * k + _cached_scale(k)


class _Cached:
    @functools.lru_cache  # noqa: B019 - the object lives as long as the module
    def cos(self, x):
        return x.cos()


_CACHED = _Cached()


def _lru_cache_on_constant(x):
    return x * _cached_scale(3)


def _cache_on_tensor(x):
    return _cached_sin(x) + 1


def _lru_cache_with_keywords(x):
    return _cached_affine(x, k=3) + _cached_affine(x)


def _lru_cache_method(x):
    return _CACHED.cos(x) * 2


def _lru_cache_made_in_frame(x):
    @functools.lru_cache
    def inner(y):
        return y + 1

    return inner(x) * inner(x)


def _plus_one(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) + 1

    return wrapper


@_plus_one
def _doubled(x):
    return x * 2


def _wraps_decorated_call(x):
    return _doubled(x), _doubled.__name__, _doubled.__wrapped__(x)


def _wraps_made_in_frame(x):
    def base(y):
        return y.cos()

    wrapped = _plus_one(base)
    return wrapped(x), wrapped.__name__, wrapped.__wrapped__ is base


# ----- torch.utils.checkpoint.checkpoint ---------------------------------------------------
def _sin_mul_cos(a, b):
    return (a.sin() * b).cos()


_LINEAR = torch.nn.Linear(3, 3)


def _checkpoint_function(x, y):
    return checkpoint(_sin_mul_cos, x, y, use_reentrant=False) + 1


def _checkpoint_module(x):
    return checkpoint(_LINEAR, x, use_reentrant=False).relu()


def _checkpoint_closure(x, w):
    return checkpoint(lambda a: (a @ w).tanh(), x, use_reentrant=False)


def _checkpoint_keywords_for_function(x):
    return checkpoint(lambda a, scale=1.0: a * scale, x, use_reentrant=False, scale=3.0)


def _checkpoint_tuple_output(x):
    a, b = checkpoint(lambda t: (t.sin(), t.cos()), x, use_reentrant=False)
    return a * b


PROGRAMS = {
    "set_membership_and_sorted": (_set_membership_and_sorted, (r(3), {1, 2, 3})),
    "frozenset_membership_and_sorted": (_set_membership_and_sorted, (r(3), frozenset({4, 2}))),
    "set_algebra_on_argument": (_set_algebra_on_argument, (r(3), {1, 2, 3})),
    "set_queries_on_argument": (_set_queries_on_argument, (r(3), {1, 2, 3})),
    "global_sets": (_global_sets, (r(3),)),
    "set_of_strings": (_set_of_strings, (r(3), {"ab", "bb", "ac"})),
    "frozenset_of_tuples": (_frozenset_of_tuples, (r(3), frozenset({(1, 2), (3, 4)}))),
    "iterate_small_int_set": (_iterate_small_int_set, (r(3), {3, 1, 2})),
    "global_sets_of_classes": (_global_sets_of_classes, (r(3), 2)),
    "set_of_tensors_by_identity": (_set_of_tensors_by_identity, (r(3), r(3))),
    "set_of_modules_by_identity": (_set_of_modules_by_identity, (r(3),)),
    "dict_keyed_by_tensors": (_dict_keyed_by_tensors, (r(3), r(3))),
    "deque_and_list_remove": (_deque_and_list_remove, (r(3), r(3))),
    "count_and_index_by_identity": (_count_and_index_by_identity, (r(3), r(3))),
    "dict_of_mappings": (_dict_of_mappings, (r(3),)),
    "sorted_with_cmp_to_key": (_sorted_with_cmp_to_key, (r(3),)),
    "sorted_user_objects": (_sorted_user_objects, (r(3),)),
    "lru_cache_on_constant": (_lru_cache_on_constant, (r(3),)),
    "cache_on_tensor": (_cache_on_tensor, (r(3),)),
    "lru_cache_with_keywords": (_lru_cache_with_keywords, (r(3),)),
    "lru_cache_method": (_lru_cache_method, (r(3),)),
    "wraps_decorated_call": (_wraps_decorated_call, (r(3),)),
    "wraps_made_in_frame": (_wraps_made_in_frame, (r(3),)),
    "checkpoint_function": (_checkpoint_function, (r(3, grad=True), r(3))),
    "checkpoint_module": (_checkpoint_module, (r(2, 3, grad=True),)),
    "checkpoint_closure": (_checkpoint_closure, (r(2, 3, grad=True), r(3, 3, grad=True))),
    "checkpoint_keywords_for_function": (_checkpoint_keywords_for_function, (r(3, grad=True),)),
    "checkpoint_tuple_output": (_checkpoint_tuple_output, (r(3, grad=True),)),
}

# torch.compile keeps checkpoint's function as one higher-order node: its op count differs
_OPAQUE_IN_TORCH = {name for name in PROGRAMS if name.startswith("checkpoint")}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_stdlib_programs(name, check):
    fn, args = PROGRAMS[name]
    check(fn, *args)


# programs torch.compile splits too (an lru_cache wrapper made in the frame)
BREAK_PROGRAMS = {
    "lru_cache_made_in_frame": (_lru_cache_made_in_frame, (r(3),)),
}


@pytest.mark.parametrize("name", [*PROGRAMS, *BREAK_PROGRAMS])
def test_stdlib_programs_count_like_torch(name):
    fn, args = PROGRAMS.get(name) or BREAK_PROGRAMS[name]
    check_like_torch(fn, lambda: clone_inputs(args), ops=name not in _OPAQUE_IN_TORCH)


def test_set_argument_with_other_items_recompiles():
    backend_calls = []

    def backend(gm, example_inputs):
        backend_calls.append(gm)
        return gm.forward

    compiled = dynamo_capture.optimize(_set_membership_and_sorted, backend=backend)
    for items in ({1, 2}, {1, 2}, {1, 3}, frozenset({1, 2}), {1.0, 2}):
        x = r(3)
        torch.testing.assert_close(compiled(x, items), _set_membership_and_sorted(x, items))
    assert len(backend_calls) == 4  # {1, 2} again is the same entry; the others are not


def _mutate_argument_set(x, s):
    s.add(5)
    s.discard(1)
    s -= {2}
    return x * len(s), 5 in s, sorted(s)


def test_writes_to_an_argument_set_are_replayed_after_the_graph():
    compiled = dynamo_capture.optimize(_mutate_argument_set, backend=eager_backend, fullgraph=True)
    for _ in range(2):
        x = r(3)
        eager_set, compiled_set = {1, 2, 3}, {1, 2, 3}
        expected = _mutate_argument_set(x, eager_set)
        got = compiled(x, compiled_set)
        torch.testing.assert_close(got, expected)
        assert compiled_set == eager_set


def test_checkpoint_gradients_equal_eager():
    for fn, args in (
        (_checkpoint_function, (r(3, grad=True), r(3))),
        (_checkpoint_closure, (r(2, 3, grad=True), r(3, 3, grad=True))),
        (_checkpoint_module, (r(2, 3, grad=True),)),
    ):
        eager_args, compiled_args = clone_inputs(args), clone_inputs(args)
        fn(*eager_args).sum().backward()
        compiled = dynamo_capture.optimize(fn, backend=eager_backend, fullgraph=True)
        compiled(*compiled_args).sum().backward()
        for eager, got in zip(eager_args, compiled_args, strict=True):
            if eager.requires_grad:
                torch.testing.assert_close(got.grad, eager.grad)


def test_checkpoint_with_a_context_fn_runs_eagerly_and_a_pure_reentrant_one_is_traced():
    def reentrant(x):
        return checkpoint(_sin_mul_cos, x, x, use_reentrant=True) + 1

    def context(x):
        return checkpoint(
            torch.sin,
            x,
            use_reentrant=False,
            context_fn=lambda: (torch.enable_grad(), torch.enable_grad()),
        )

    x = r(3, grad=True)
    with pytest.raises(dynamo_capture.Unsupported, match="checkpoint"):
        dynamo_capture.optimize(context, backend=eager_backend, fullgraph=True)(x)
    torch.testing.assert_close(
        dynamo_capture.optimize(context, backend=eager_backend)(x), context(x)
    )
    # a reentrant checkpoint of a function writing nothing outside is one region
    compiled = dynamo_capture.optimize(reentrant, backend=eager_backend, fullgraph=True)
    torch.testing.assert_close(compiled(x), reentrant(x))


def _in_place_operators(x, items, table, flags, queue):
    items += [1]
    items += (2,)
    table |= {"k": 2}
    flags |= {9}
    flags -= {1}
    flags &= {9, 2, 3}
    flags ^= {3, 4}
    queue += [5]
    local = [x]
    local += [x + 1]
    return x * len(items), len(local), sorted(flags)


def test_in_place_operators_write_argument_containers():
    def make():
        return r(2), [0], {}, {1, 2, 3}, collections.deque([1])

    compiled = dynamo_capture.optimize(_in_place_operators, backend=eager_backend, fullgraph=True)
    for _ in range(2):
        eager_args, compiled_args = make(), make()
        compiled_args = (eager_args[0], *compiled_args[1:])
        expected = _in_place_operators(*eager_args)
        got = compiled(*compiled_args)
        torch.testing.assert_close(got, expected)
        assert compiled_args[1:] == eager_args[1:]


def _functorch_level_changed_in_frame(x):
    level = torch._C._functorch._grad_increment_nesting()
    torch._C._functorch._grad_decrement_nesting()
    return x + level


def test_functions_changing_torch_state_are_not_run_while_capturing():
    compiled = dynamo_capture.optimize(_functorch_level_changed_in_frame, backend=eager_backend)
    for _ in range(2):
        x = r(3)
        torch.testing.assert_close(compiled(x), _functorch_level_changed_in_frame(x))
        assert torch._C._functorch.maybe_current_level() is None
    with pytest.raises(dynamo_capture.Unsupported, match="changes torch's global state"):
        dynamo_capture.optimize(
            _functorch_level_changed_in_frame, backend=eager_backend, fullgraph=True
        )(r(3))


def test_global_set_of_classes_is_guarded_on_its_items():
    compiled = dynamo_capture.optimize(_global_sets_of_classes, backend=eager_backend)
    x = r(3)
    torch.testing.assert_close(compiled(x, 2), _global_sets_of_classes(x, 2))
    _ACTIVATIONS.add(torch.nn.GELU)
    try:
        torch.testing.assert_close(compiled(x, 2), _global_sets_of_classes(x, 2))
    finally:
        _ACTIVATIONS.discard(torch.nn.GELU)
    assert len(compiled.entries) == 2


def _set_of_tensors_argument(x, tensors):
    return x + len(tensors), x in tensors


def test_set_of_tensors_from_outside_runs_eagerly():
    x, y = r(2), r(2)
    compiled = dynamo_capture.optimize(_set_of_tensors_argument, backend=eager_backend)
    torch.testing.assert_close(compiled(x, {x, y}), _set_of_tensors_argument(x, {x, y}))
    with pytest.raises(dynamo_capture.Unsupported, match="set of tensors"):
        dynamo_capture.optimize(_set_of_tensors_argument, backend=eager_backend, fullgraph=True)(
            x, {y}
        )


def _in_place_operators_on_subclasses(x, ordered, counts, defaults):
    ordered |= {"k": 2}
    counts += collections.Counter(a=1)
    defaults |= {"z": 1}
    return x + len(ordered) + counts["a"]


def test_in_place_operators_write_argument_dict_subclasses():
    def make():
        return (
            collections.OrderedDict(a=1),
            collections.Counter(a=2),
            collections.defaultdict(int, b=2),
        )

    compiled = dynamo_capture.optimize(_in_place_operators_on_subclasses, backend=eager_backend)
    for _ in range(2):
        x = r(2)
        eager_args, compiled_args = make(), make()
        expected = _in_place_operators_on_subclasses(x, *eager_args)
        torch.testing.assert_close(compiled(x, *compiled_args), expected)
        assert compiled_args == eager_args


def _set_pops(x, s):
    first = s.pop()
    made = {5, 6, 300, 44}
    second, third = made.pop(), made.pop()
    empty = set()
    try:
        empty.pop()
    except KeyError as error:
        message = str(error)
    return x + first + second + third + len(s) + len(made), sorted(s), sorted(made), message


def test_set_pop_takes_items_in_eager_order():
    compiled = dynamo_capture.optimize(_set_pops, backend=eager_backend, fullgraph=True)
    for _ in range(2):
        x = r(2)
        eager_set, compiled_set = {1, 2, 3}, {1, 2, 3}
        expected = _set_pops(x, eager_set)
        got = compiled(x, compiled_set)
        torch.testing.assert_close(got[:3], expected[:3])
        assert got[3] == expected[3]
        assert compiled_set == eager_set


def _deque_methods_not_modelled(x):
    queue = collections.deque([1])
    queue.insert(0, 5)
    return x + 1, list(queue)


def test_deque_methods_capture_does_not_model_are_not_folded_on_a_copy():
    """deque.insert was run on a copy made at compile time: the deque kept its items."""
    with pytest.raises(dynamo_capture.Unsupported, match="deque.insert"):
        dynamo_capture.optimize(_deque_methods_not_modelled, backend=eager_backend, fullgraph=True)(
            r(2)
        )
    x = r(2)
    got = dynamo_capture.optimize(_deque_methods_not_modelled, backend=eager_backend)(x)
    expected = _deque_methods_not_modelled(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1]


def _remove_from_argument_containers(x, queue, items):
    queue.remove(2)
    items.remove(1)
    return x + len(queue) + len(items)


def test_remove_from_argument_deque_and_list_is_replayed():
    compiled = dynamo_capture.optimize(_remove_from_argument_containers, backend=eager_backend)
    x = r(2)
    eager_args = (collections.deque([1, 2, 3]), [1, 2])
    compiled_args = (collections.deque([1, 2, 3]), [1, 2])
    expected = _remove_from_argument_containers(x, *eager_args)
    torch.testing.assert_close(compiled(x, *compiled_args), expected)
    assert compiled_args == eager_args


def _prints_then_sin(a):
    print("checkpointed")
    return a.sin()


def _checkpoint_of_function_that_breaks(x):
    y = x * 2
    return checkpoint(_prints_then_sin, y, use_reentrant=False) + 1


def test_checkpoint_whose_function_breaks_runs_it_eagerly_whole(capsys):
    """Parts of fn compiled for the forward would differ from the code the backward
    recomputes (checkpoint refuses that): the checkpoint call runs eagerly whole."""
    x = r(3, grad=True)
    eager_x, compiled_x = clone_inputs(x), clone_inputs(x)
    compiled = dynamo_capture.optimize(_checkpoint_of_function_that_breaks, backend=eager_backend)
    got = compiled(compiled_x)
    got.sum().backward()
    expected = _checkpoint_of_function_that_breaks(eager_x)
    expected.sum().backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(compiled_x.grad, eager_x.grad)
    assert "checkpointed" in capsys.readouterr().out
