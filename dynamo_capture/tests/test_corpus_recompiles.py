"""Recompiles over a sequence of calls, counted as torch.compile counts them.

Each program runs on a sequence of inputs (one factory a call; a factory may first
change a global, an attribute or a closure the program reads) under capture and under
torch.compile, both with counting backends: the results equal eager's, and both give
as many graphs with as many operations. Covered: automatic dynamic on ints and floats
(arguments, items, attributes, globals, closures; dynamic=True and False), NaN, a
source that is a tensor in one call and a number in another, numbers returned from
the graph, frames whose capture finds no operation (run eagerly from then on), guards
on globals, attributes, closures, modules, tensor metadata, and the recompile limit.
"""

from __future__ import annotations

import collections
import math

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same, clone_inputs


def _calls(make, values):
    """One argument factory per value: `make(value)` gives the arguments of that call."""
    return [lambda value=value: make(value) for value in values]


def _run(compiled, fn, calls):
    for make in calls:
        args = make()
        expected = fn(*clone_inputs(args))
        assert_same(compiled(*args), expected)


def _counts_like_torch(fn, calls, ember=None, reference=None, **settings):
    """Ember's graph and op counts over `calls` equal torch.compile's; `ember` and
    `reference` are settings for one side only (the recompile limit, say)."""
    counter = CountingBackend()
    _run(dynamo_capture.optimize(fn, backend=counter, **settings, **(ember or {})), fn, calls)
    torch._dynamo.reset()
    torch_counter = torch._dynamo.testing.CompileCounter()
    with torch._dynamo.config.patch(**(reference or {})):
        _run(torch.compile(fn, backend=torch_counter, **settings), fn, calls)
    torch._dynamo.reset()
    got = (counter.frame_count, counter.op_count)
    assert got == (torch_counter.frame_count, torch_counter.op_count), (
        f"graphs/ops: ember {got}, torch {torch_counter.frame_count, torch_counter.op_count}"
    )


PROGRAMS = {}


def program(calls, **settings):
    def register(fn):
        PROGRAMS[fn.__name__] = (fn, calls, settings)
        return fn

    return register


def _vector_and(value):
    return (torch.randn(4), value)


# ----- automatic dynamic: ints ------------------------------------------------------------
@program(_calls(lambda n: (torch.randn(n), torch.randn(n)), [2, 3, 4, 4, 5, 5, 6]))
def sizes_that_grow(x, y):
    return x * y


@program(_calls(lambda n: (torch.randn(n), torch.randn(n)), [2, 3, 4, 4, 5, 6]), dynamic=False)
def sizes_that_grow_static(x, y):
    return x * y


@program(_calls(lambda n: (torch.randn(n), torch.randn(n)), [2, 3, 4, 5]), dynamic=True)
def sizes_that_grow_dynamic(x, y):
    return x * y


@program(_calls(lambda v: (v[0], torch.randn(v[1])), [(True, 2), (False, 2), (True, 3), (True, 5)]))
def bool_flag_and_sizes(flag, y):
    if flag:
        return y * 2
    return y * y


@program(_calls(_vector_and, [3, 4, 5, 6]))
def int_in_a_branch(x, n):
    if n > 4:
        return x + n
    return x - n


@program(_calls(lambda n: (torch.randn(8), n), [2, 3, 4, 5]))
def int_as_a_slice_bound(x, n):
    return x[:n] * 2


@program(_calls(lambda n: (n,), [2, 3, 4, 5]))
def int_as_a_size(n):
    return torch.ones(n) * 2


@program(_calls(_vector_and, [2, 3, 4]))
def int_as_a_loop_count(x, n):
    for i in range(n):
        x = x + i
    return x


@program(_calls(_vector_and, [0, 1, 2, 3, -1]))
def int_zero_one_and_negative(x, n):
    return x * n + 1


@program(_calls(_vector_and, [1, 2, 3]))
def int_arithmetic_returned(x, n):
    return x + 1, n * 2, n > 1


@program(_calls(lambda n: (torch.randn(4), (n, n + 1), [n, 2], {"a": n}), [1, 2, 3]))
def ints_in_containers(x, pair, items, table):
    return x * pair[0] + pair[1] + items[0] * table["a"]


@program(_calls(lambda n: (list(range(50)), n), [48, 47, 46]))
def int_indexing_a_list(items, index):
    return torch.zeros(index), items[index], items[index:]


def _adder(value):
    def add(y):
        return y + value

    return add


@program(_calls(lambda n: (torch.randn(5), _adder(n)), range(5)))
def int_in_a_closure(x, add):
    return add(x)


@program(
    _calls(
        lambda v: (torch.randn(v[0]), v[1] if v[1] is not None else torch.randn(v[0])),
        [(2, None), (3, 3), (4, None), (4, None), (5, 4), (6, None)],
    )  # fmt: skip
)
def tensor_then_number(x, y):
    return x * y


@program(
    _calls(
        lambda v: (torch.randn(v[0]), v[1] if v[1] is not None else torch.randn(v[0])),
        [(2, 3), (3, None), (4, None), (5, 4), (6, 7)],
    )  # fmt: skip
)
def number_then_tensor(x, y):
    return x * y


@program(_calls(_vector_and, [2, 2.5, 3, 3.5]))
def int_then_float(x, y):
    return x * y


@program(_calls(lambda v: (torch.randn(4), v[0], v[1]), [(2, 5), (3, 1), (4, 4), (7, 2)]))
def int_max_and_min(x, n, m):
    return x * max(n, 3, m) + min(n, 3), max([n, m]), min(n, m)


@program(_calls(_vector_and, [1, 2, 3, 4]))
def tensor_of_an_int(x, n):
    return x + torch.tensor(n), torch.tensor(n, dtype=torch.float16)


Pair = collections.namedtuple("Pair", "count scale")


@program(_calls(lambda n: (torch.randn(4), Pair(n, n + 0.5)), [1, 2, 3]))
def namedtuple_fields(x, pair):
    count, scale = pair
    return x * pair.count + pair[1] + count * scale


# ----- automatic dynamic: floats ----------------------------------------------------------
@program(_calls(_vector_and, [1.5, 2.5, 3.5, 4.5]))
def float_scale(x, s):
    return x * math.sqrt(s) + math.floor(s)


@program(_calls(_vector_and, [3.0, 4.0, 5.0, 6.0, math.nan, math.nan, 7.0, math.inf]))
def float_equality_and_nan(x, y):
    if y == 5.0:
        return x + 2
    return x + y


@program(_calls(_vector_and, [3.0, 4.0, 5.0]))
def float_returned(x, y):
    return x + 1, y * 2


@program(_calls(_vector_and, [1.5, 2.5, 3.5]))
def float_returned_in_a_dict_and_compared(x, s):
    return {"y": x * s, "s": s * 2, "big": s > 2.0}


@program(_calls(_vector_and, [1.5, 2.5, 3.5]))
def float_handed_across_a_break(x, s):
    t = s * 2
    torch._dynamo.graph_break()
    return x * t


# Under dynamic=True torch makes float arguments symbolic from the first call; ember waits
# for a change (the AOT backends would turn a graph with a symbolic float static): the
# counts differ, the values do not (test_floats_under_dynamic_true_give_eager_values).
def float_under_dynamic_true(x, s):
    return x + s, s + 1


def float_order_under_dynamic_true(x, s):
    if s > 2.0:
        return x * s
    return x - s


@program(_calls(_vector_and, [1.5, 2.5, 3.5, 2.5]), dynamic=False)
def float_under_dynamic_false(x, s):
    return x * s


@program(_calls(_vector_and, [0.5, 1.5, 3.5, 2.0]))
def float_max_and_min(x, s):
    return x * max(s, 1.0), min(s, 2.5)


@program(_calls(lambda s: (torch.randn(5), _adder(s)), [1.5, 2.5, 3.5]))
def float_in_a_closure(x, add):
    return add(x)


class Settings:
    eps = 1e-5


SETTINGS = Settings()
SCALE = 0.5
COUNT = 1


def _set_global(name, value):
    globals()[name] = value
    return (torch.randn(4),)


def _set_attribute(obj, name, value, args):
    setattr(obj, name, value)
    return args


@program(_calls(lambda v: _set_global("SCALE", v), [0.5, 0.25, 0.125]))
def global_float(x):
    if SCALE > 0.3:
        return x * SCALE
    return x - SCALE, SCALE * 3


@program(
    _calls(lambda v: _set_attribute(SETTINGS, "eps", v, (torch.randn(4),)), [1e-5, 1e-6, 1e-7])
)
def float_attribute_of_a_global(x):
    return x + SETTINGS.eps


@program(_calls(lambda v: _set_global("SCALE", v), [0.5, 0.25, 0.125]))
def global_float_read_in_a_callee(x):
    return _scaled_by_global(x)


def _scaled_by_global(x):
    return x * SCALE


@program(_calls(lambda v: _set_global("COUNT", v), [1, 2, 3, 4]))
def global_int_stays_static(x):
    return x * COUNT


class Epsilon(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 0.1
        self.k = 1

    def forward(self, x):
        return x * self.k + self.eps


EPSILON = Epsilon()


@program(_calls(lambda v: _set_attribute(EPSILON, "eps", v, (EPSILON, torch.randn(3))), [0.1, 0.2]))
def module_float_attribute(module, x):
    return module(x)


@program(_calls(lambda v: _set_attribute(EPSILON, "k", v, (EPSILON, torch.randn(3))), [1, 2, 3]))
def module_int_attribute_stays_static(module, x):
    return module(x)


# ----- frames whose capture finds no operation --------------------------------------------
@program(_calls(lambda v: (torch.randn(4), None if v else torch.randn(4)), [1, 0, 1, 0]))
def nothing_to_compute_first(x, y):
    if y is None:
        return x
    return x + y


@program(_calls(_vector_and, [0, 1, 2, 3]))
def input_returned_first(x, n):
    if n == 0:
        return x
    return x * n


@program(_calls(_vector_and, [0, 1, 0, 1]))
def resumed_without_operations_first(x, n):
    x = x + 1
    torch._dynamo.graph_break()
    if n:
        return x * 2
    return x


@program(_calls(lambda n: (torch.randn(4), [n]), [0, 1, 2]))
def list_written_without_operations(x, items):
    items.append(1)
    if items[0]:
        return x * items[0]
    return x


@program(_calls(lambda n: (torch.randn(n),), [2, 3, 4]))
def size_arithmetic_only(x):
    return x.shape[0] * 2 + 1


def _callee_returning(x, n):
    if n == 0:
        return x
    return x * n


@program(_calls(_vector_and, [0, 1, 2]))
def callee_without_operations_inlined(x, n):
    return _callee_returning(x, n) + 1


# ----- other guards -----------------------------------------------------------------------
@program(
    _calls(lambda d: (torch.randn(4, dtype=d),), [torch.float32, torch.float64, torch.float32])
)
def dtype_changes(x):
    return x * 2


@program(_calls(lambda r: (torch.randn(4, requires_grad=r),), [False, True, False]))
def requires_grad_changes(x):
    return x * 2


@program(_calls(lambda n: (torch.randn(*([2] * n)),), [1, 2, 3, 2]))
def rank_changes(x):
    return x * 2


@program(_calls(_vector_and, ["add", "sub", "add", "mul"]))
def string_argument(x, mode):
    if mode == "add":
        return x + 1
    if mode == "sub":
        return x - 1
    return x * 2


@program(_calls(lambda n: (tuple(torch.randn(4) for _ in range(n)),), [2, 3, 4]))
def tuple_length_changes(xs):
    return sum(xs)


@program(_calls(_vector_and, [{1, 2}, {1, 2}, {1, 3}]))
def set_argument_items(x, items):
    for item in sorted(items):
        x = x + item
    return x


@program(_calls(_vector_and, [{"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"a": 2, "b": 2}]))
def dict_keys_change(x, table):
    return x * sum(table.values())


class Dropping(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dropout = torch.nn.Dropout(0.5)
        self.linear = torch.nn.Linear(10, 1)

    def forward(self, x):
        return self.dropout(self.linear(x)) * 0 + self.linear(x)


DROPPING = Dropping()


@program(_calls(lambda e: (DROPPING.train(not e), (DROPPING, torch.randn(10)))[1], [1, 0] * 3))
def train_and_eval_flop(module, x):
    return module(x)


WEIGHT = torch.nn.Parameter(torch.randn(3, 2))


@program(_calls(lambda n: (torch.nn.Parameter(torch.randn(n, 3)),), [1, 10, 11, 15, 15]))
def parameter_inputs_stay_static(x):
    return x @ WEIGHT


# ----- the recompile limit ----------------------------------------------------------------
def _inner(x, n):
    return x + n


@program(_calls(lambda n: (torch.randn(3), n), range(10)), dynamic=False)
def past_the_limit(x, n):
    return _inner(x + n, n)


@program(_calls(lambda n: (torch.randn(3), n), range(10)), dynamic=False)
def past_the_limit_with_a_break(x, n):
    x = x + n
    torch._dynamo.graph_break()
    return x * n


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_recompiles_like_torch(name):
    fn, calls, settings = PROGRAMS[name]
    _counts_like_torch(fn, calls, **settings)


@pytest.mark.parametrize("values", [range(10), [0, 1, 2, 3, 0, 1]])
def test_a_smaller_recompile_limit_runs_later_calls_eagerly(values):
    _counts_like_torch(
        past_the_limit,
        _calls(lambda n: (torch.randn(3), n), values),
        ember={"recompile_limit": 2},
        reference={"recompile_limit": 2},
        dynamic=False,
    )


def test_frame_captured_without_operations_runs_eagerly_from_then_on():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(input_returned_first, backend=counter)
    x = torch.randn(4)
    assert compiled(x, 0) is x
    assert compiled.code_skipped
    for n in (1, 2, 3):
        torch.testing.assert_close(compiled(x, n), x * n)
    assert counter.frame_count == 0 and len(compiled.entries) == 1
    compiled.reset()
    torch.testing.assert_close(compiled(x, 2), x * 2)
    assert counter.frame_count == 1  # compiled again after a reset


def test_frame_without_operations_is_kept_under_fullgraph_or_when_it_asks_if_compiling():
    def asks(x, n):
        if torch.compiler.is_compiling():
            return x
        return x + n

    fullgraph = dynamo_capture.optimize(
        input_returned_first, backend=CountingBackend(), fullgraph=True
    )
    fullgraph(torch.randn(4), 0)
    asking = dynamo_capture.optimize(asks, backend=CountingBackend())
    asking(torch.randn(4), 0)
    assert not fullgraph.code_skipped and not asking.code_skipped


def test_code_before_a_break_without_operations_is_not_skipped():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(float_handed_across_a_break, backend=counter)
    _run(compiled, float_handed_across_a_break, _calls(_vector_and, [1.5, 2.5, 3.5]))
    assert not any(part.code_skipped for part in compiled.parts)
    # the part before the break: the float made symbolic, `s * 2` handed on from its graph
    assert any(
        node.target is torch.scalar_tensor for gm in counter.graphs for node in gm.graph.nodes
    )


@pytest.mark.parametrize("fn", [float_under_dynamic_true, float_order_under_dynamic_true])
def test_floats_under_dynamic_true_give_eager_values(fn):
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend(), dynamic=True)
    for value in (1.5, 2.5, math.nan, 3.5):
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, value), fn(x, value), equal_nan=True)
