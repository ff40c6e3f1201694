"""Generators, generator expressions, map and filter made in the frame run their bodies
as each item is read, in eager's order: a side effect of an item never read does not
happen, and one of an item read later happens later. Results (with the side effects
they show) equal eager's; graph and op counts equal torch.compile's
(torchcheck.check_like_torch) where it compiles them.

| footgun                                                        | rank          |
|----------------------------------------------------------------|---------------|
| a side effect of an item never read (map, genexpr, break, zip)  | wrong result  |
| a side effect of an item read later seen too early              | wrong result  |
| an unfinished generator with side effects leaving the frame     | wrong result  |
| print inside a generator read partially                         | wrong output  |
| a list or deque extended by a generator that reads it           | wrong result  |
| `yield from` a generator that returns a value                   | wrong result  |
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.fallbacks import EagerFallbackWarning
from dynamo_capture.testing import assert_same, clone_inputs, eager_backend


def _one():
    return (torch.randn(3),)


def _appending(x, acc):
    for i in range(3):
        acc.append(i)
        yield x * i


def _pure(x):
    for i in range(3):
        yield x * i


def _adding_in_place(x):
    for _ in range(3):
        x.add_(1)
        yield x.clone()


def _echo():
    sent = yield 1
    again = yield sent * 2
    yield again + 1


def _delegating(x, acc):
    yield from _appending(x, acc)
    yield x


def _two_then_raise(x):
    yield x + 1
    yield x + 2
    raise KeyError("third")


def _read_two(iterator):
    return next(iterator) + next(iterator)


# ----- side effects of items never read ----------------------------------------------
def map_never_read(x):
    acc = []
    unread = map(acc.append, [1, 2])  # noqa: F841 - never read, as eagerly
    return x + len(acc)


def generator_expression_read_once(x):
    acc = []
    steps = (acc.append(i) for i in range(3))
    next(steps)
    return x + len(acc)


def generator_function_stepped_by_next(x):
    acc = []
    items = _appending(x, acc)
    first = next(items)
    second = next(items)
    return first + second + len(acc)


def for_break_over_generator(x):
    acc = []
    out = x
    for item in _appending(x, acc):
        out = out + item
        if len(acc) == 2:
            break
    return out, len(acc)


def zip_stops_at_shorter_iterable(x):
    acc = []
    before = list(zip([1], _appending(x, acc)))  # the generator read once
    after = list(zip(_appending(x, acc), [1]))  # read twice: the second read ends zip
    return before[0][1] + after[0][0], len(acc)


def any_all_short_circuit_over_generator(x):
    acc = []
    found = any(len(acc) >= 2 for _ in _appending(x, acc))
    every = all(False for _ in _appending(x, acc))
    return x + found + every + len(acc)


def in_stops_at_the_match(x):
    acc = []
    found = 1 in (len(acc) for _ in _appending(x, acc))
    return x + len(acc) + found


def map_read_by_zip_until_the_shorter_ends(x):
    acc = []
    scaled = map(lambda v: acc.append(v) or v * x, [1, 2, 3])
    rows = list(zip(scaled, [0]))
    return rows[0][0], len(acc)


def filter_read_once(x):
    acc = []
    kept = filter(lambda v: acc.append(v) or v > 1, [1, 2, 3])
    return x * next(kept), len(acc)


def generator_mutating_a_tensor_read_once(x):
    items = _adding_in_place(x)
    first = next(items)
    return first, x.clone()


def generator_reading_a_closure_counter(x):
    count = 0

    def counting():
        nonlocal count
        for i in range(3):
            count += 1
            yield x + i

    items = counting()
    next(items)
    return x + count


def enumerate_over_generator(x):
    acc = []
    pairs = enumerate(_appending(x, acc))
    index, item = next(pairs)
    return item + index, len(acc)


def yield_from_read_partially(x):
    acc = []
    items = _delegating(x, acc)
    first = next(items)
    second = next(items)
    return first + second, len(acc)


def generator_read_in_a_callee(x):
    acc = []
    return _read_two(_appending(x, acc)), len(acc)


def send_resumes_at_the_yield(x):
    items = _echo()
    first = next(items)
    second = items.send(10)
    third = items.send(20)
    return x + first + second + third


def closed_generator_gives_nothing_more(x):
    items = _pure(x)
    next(items)
    items.close()
    return x + sum(1 for _ in items)


def generator_raising_after_the_items_read(x):
    items = _two_then_raise(x)
    return next(items) * next(items)


def generator_raising_caught_in_the_frame(x):
    items = _two_then_raise(x)
    total = x
    try:
        for item in items:
            total = total + item
    except KeyError:
        total = total * 2
    return total


def generator_read_then_drained(x):
    acc = []
    items = _appending(x, acc)
    first = next(items)
    rest = list(items)
    return first + sum(rest), len(acc), next(items, 5)


def islice_of_a_generator(x):
    acc = []
    two = list(itertools.islice(_appending(x, acc), 2))
    return two[1], len(acc)


def generator_expression_over_a_generator(x):
    acc = []
    shifted = (y + 1 for y in _appending(x, acc))
    return next(shifted), len(acc)


def generator_kept_in_a_dict(x):
    acc = []
    holder = {"items": _appending(x, acc)}
    return next(holder["items"]) + 1, len(acc)


class _Bag:
    def __init__(self, x, acc):
        self.x = x
        self.acc = acc

    def __iter__(self):
        for i in range(3):
            self.acc.append(i)
            yield self.x * i


class _Steps:
    def __init__(self, x, acc):
        self.x = x
        self.acc = acc
        self.count = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.count >= 3:
            raise StopIteration
        self.count += 1
        self.acc.append(self.count)
        return self.x * self.count


class _TwoThenKeyError:
    def __init__(self, x):
        self.x = x
        self.count = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.count += 1
        if self.count > 2:
            raise KeyError("third")
        return self.x * self.count


def loop_break_over_a_user_generator_iter(x):
    acc = []
    out = x
    for item in _Bag(x, acc):
        out = out + item
        break
    return out, len(acc)


def loop_break_over_a_user_iterator(x):
    acc = []
    out = x
    for item in _Steps(x, acc):
        out = out + item
        if len(acc) == 2:
            break
    return out, len(acc)


def next_of_iter_of_a_user_class(x):
    acc = []
    return next(iter(_Bag(x, acc))), len(acc)


def loop_break_before_a_user_iterator_raises(x):
    out = x
    for item in _TwoThenKeyError(x):
        out = out + item
        break
    return out


def reversed_generator_raises_without_running_it(x):
    acc = []
    try:
        reversed(acc.append(i) or i for i in range(3))
    except TypeError:
        return x + len(acc)
    return x


# ----- list iterators read the list as it is when an item is reached --------------------
def generator_expression_over_a_list_written_before_reading(x):
    values = [1, 2, 3]
    scaled = (v * x for v in values)
    values[0] = 10
    return next(scaled)


def loop_over_a_list_appended_inside_it(x):
    values = [1, 2]
    out = x
    for v in values:
        out = out + v
        if len(values) < 5:
            values.append(v + 1)
    return out, len(values)


def list_iterator_sees_an_append_after_it_was_made(x):
    values = [x, x + 1]
    items = iter(values)
    values.append(x * 3)
    return list(items)


def list_iterator_sees_a_slice_assignment(x):
    values = [1, 2, 3]
    items = iter(values)
    next(items)
    values[:] = [7, 8, 9]
    return x * next(items)


# ----- generators without side effects: one graph, as before ---------------------------
def sum_of_a_generator(x):
    return sum(_pure(x))


def list_of_a_map(x):
    return list(map(torch.relu, [x, -x]))


def list_of_a_generator_expression(x):
    return torch.stack([v * 2 for v in (x + i for i in range(3))])


PROGRAMS = [
    map_never_read,
    generator_expression_read_once,
    generator_function_stepped_by_next,
    for_break_over_generator,
    zip_stops_at_shorter_iterable,
    any_all_short_circuit_over_generator,
    in_stops_at_the_match,
    map_read_by_zip_until_the_shorter_ends,
    filter_read_once,
    generator_mutating_a_tensor_read_once,
    generator_reading_a_closure_counter,
    enumerate_over_generator,
    yield_from_read_partially,
    generator_read_in_a_callee,
    send_resumes_at_the_yield,
    closed_generator_gives_nothing_more,
    generator_raising_after_the_items_read,
    generator_raising_caught_in_the_frame,
    generator_read_then_drained,
    islice_of_a_generator,
    generator_expression_over_a_generator,
    generator_kept_in_a_dict,
    loop_break_over_a_user_generator_iter,
    loop_break_over_a_user_iterator,
    next_of_iter_of_a_user_class,
    loop_break_before_a_user_iterator_raises,
    reversed_generator_raises_without_running_it,
    generator_expression_over_a_list_written_before_reading,
    loop_over_a_list_appended_inside_it,
    list_iterator_sees_an_append_after_it_was_made,
    list_iterator_sees_a_slice_assignment,
    sum_of_a_generator,
    list_of_a_map,
    list_of_a_generator_expression,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_lazy_iterator_side_effects_follow_eager_like_torch(program):
    counter = check_like_torch(program, _one)
    assert counter.frame_count == 1


# ----- side effects on objects outside the frame ------------------------------------------
def _compare_with_outside_list(program):
    compiled = dynamo_capture.optimize(program, backend=eager_backend)
    for _ in range(2):
        (x,) = _one()
        expected_log, got_log = [], []
        expected = program(clone_inputs(x), expected_log)
        got = compiled(clone_inputs(x), got_log)
        assert_same(got, expected)
        assert got_log == expected_log


def test_generator_read_once_appends_once_to_an_outside_list():
    def program(x, log):
        items = _appending(x, log)
        return next(items) + 1

    _compare_with_outside_list(program)


def test_map_never_read_appends_nothing_to_an_outside_list():
    def program(x, log):
        map(log.append, [1, 2, 3])
        return x + 1

    _compare_with_outside_list(program)


def test_items_read_after_a_list_write_see_it():
    def program(x, log):
        items = (len(log) * x for _ in range(3))
        first = next(items)
        log.append(1)
        return first + next(items)

    _compare_with_outside_list(program)


def test_print_in_a_generator_read_once_prints_once(capsys):
    def printing(x):
        for i in range(3):
            print("item", i)
            yield x + i

    def program(x):
        return next(printing(x)) * 2

    (x,) = _one()
    expected = program(x)
    eager_out = capsys.readouterr().out
    got = dynamo_capture.optimize(program, backend=eager_backend)(x)
    assert_same(got, expected)
    assert capsys.readouterr().out == eager_out


# ----- unfinished generators leaving the frame ------------------------------------------
def test_unfinished_generator_with_side_effects_returned_runs_them_later():
    def program(x, log):
        items = _appending(x, log)
        return next(items), items

    (x,) = _one()
    expected_log, got_log = [], []
    expected, expected_items = program(x, expected_log)
    got, got_items = dynamo_capture.optimize(program, backend=eager_backend)(x, got_log)
    assert_same(got, expected)
    assert got_log == expected_log == [0]
    assert_same(list(got_items), list(expected_items))
    assert got_log == expected_log == [0, 1, 2]


def test_unfinished_pure_generator_returned_gives_the_rest():
    def program(x):
        items = (x * i for i in range(3))
        next(items)
        return x + 1, items

    (x,) = _one()
    expected, expected_items = program(x)
    got, got_items = dynamo_capture.optimize(program, backend=eager_backend)(x)
    assert_same(got, expected)
    assert_same(list(got_items), list(expected_items))


# ----- generators paused inside a try/finally or `with` block --------------------------
def _finishing(acc):
    try:
        yield 1
        yield 2
    finally:
        acc.append(9)


def _doubled_without_grad(x):
    with torch.no_grad():
        yield x * 2
    yield x * 3


def _compare_with_eager(program, make_args):
    compiled = dynamo_capture.optimize(program, backend=eager_backend)
    for _ in range(2):
        args = make_args()
        start = torch.is_grad_enabled()
        expected = program(*clone_inputs(args))
        eager_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(start)
        got = compiled(*clone_inputs(args))
        compiled_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(start)
        assert_same(got, expected)
        assert compiled_mode == eager_mode


def test_deleted_generator_paused_in_try_runs_its_finally():
    def program(x):
        acc = []
        items = _finishing(acc)
        next(items)
        del items
        return x + len(acc)

    _compare_with_eager(program, _one)


def test_generator_paused_in_try_at_the_frame_end_runs_its_finally_after():
    def program(x, log):
        items = _finishing(log)
        next(items)
        return x + len(log)

    _compare_with_outside_list(program)


def test_generator_paused_in_no_grad_block_keeps_eagers_grad_mode():
    def program(x):
        items = _doubled_without_grad(x)
        doubled = next(items)
        return doubled, (x * 4).requires_grad

    _compare_with_eager(program, lambda: (torch.randn(3, requires_grad=True),))


# ----- a break inside a generator's body ---------------------------------------------------
def _printing(x):
    for i in range(3):
        print("item", i)
        yield x + i


def _reading_data(x):
    for i in range(3):
        yield x * int(x.sum().item() > 0) + i


def _make_printing(x):
    return _printing(x)


def _loop_over_printing(x):
    out = x
    for item in _printing(x):
        out = out * item
    return out


def _loop_over_printing_made_in_a_callee(x):
    out = x
    for item in _make_printing(x):
        out = out * item
    return out


def _loop_over_a_data_read(x):
    out = x
    for item in _reading_data(x):
        out = out + item
    return out


def _unpacked_printing(x):
    first, second, third = _printing(x)
    return first + second + third


def _printing_read_after_other_work(x):
    items = _printing(x)
    doubled = x * 2
    return doubled + next(items) + next(items)


@pytest.mark.parametrize(
    "program",
    [
        _loop_over_printing,
        _loop_over_printing_made_in_a_callee,
        _loop_over_a_data_read,
        _unpacked_printing,
        _printing_read_after_other_work,
    ],
    ids=lambda p: p.__name__.lstrip("_"),
)
def test_break_inside_generator_body_keeps_eagers_results_and_output(program, capsys):
    compiled = dynamo_capture.optimize(program, backend=eager_backend)
    for _ in range(2):
        (x,) = _one()
        expected = program(clone_inputs(x))
        eager_out = capsys.readouterr().out
        got = compiled(clone_inputs(x))
        assert_same(got, expected)
        assert capsys.readouterr().out == eager_out


# ----- generators live at a break: read ahead only without side effects -----------------
def _random_across_a_break(x):
    draws = (torch.randn(3) for _ in range(2))
    first = next(draws)
    print("between")
    middle = torch.randn(3)
    return first, middle, next(draws) + x


def _appending_across_a_break(x):
    acc = []
    items = _appending(x, acc)
    first = next(items)
    print("between")
    seen = len(acc)
    return first + next(items), seen, len(acc)


def _in_place_across_a_break(x):
    items = _adding_in_place(x)
    first = next(items)
    print("between")
    before = x.clone()
    return first, before, next(items)


@pytest.mark.parametrize(
    "program",
    [_random_across_a_break, _appending_across_a_break, _in_place_across_a_break],
    ids=lambda p: p.__name__.lstrip("_"),
)
def test_generator_with_side_effects_live_at_a_break_keeps_eagers_order(program, capsys):
    compiled = dynamo_capture.optimize(program, backend=eager_backend)
    for _ in range(2):
        (x,) = _one()
        torch.manual_seed(0)
        expected = program(clone_inputs(x))
        torch.manual_seed(0)
        got = compiled(clone_inputs(x))
        assert_same(got, expected)


# ----- list iterators live at a break: the same list, at the same index -----------------
def test_list_iterator_live_at_a_break_sees_later_appends(capsys):
    def program(x):
        values = [1, 2]
        items = iter(values)
        next(items)
        print("between")
        values.append(3)
        return x * sum(items)

    _compare_with_eager(program, _one)


def test_outside_list_iterator_sees_appends_after_a_break(capsys):
    def program(x, log):
        items = iter(log)
        first = next(items)
        print("between")
        log.append(3)
        return x * (first + sum(items))

    compiled = dynamo_capture.optimize(program, backend=eager_backend)
    for _ in range(2):
        (x,) = _one()
        expected_log, got_log = [1, 2], [1, 2]
        expected = program(clone_inputs(x), expected_log)
        got = compiled(clone_inputs(x), got_log)
        assert_same(got, expected)
        assert got_log == expected_log


def test_loop_over_an_outside_list_follows_its_length():
    def program(x, values):
        out = x
        for v in values:
            out = out + v
        return out

    compiled = dynamo_capture.optimize(program, backend=eager_backend)
    for values in ([1, 2], [1, 2, 3], [4]):
        (x,) = _one()
        assert_same(compiled(x, list(values)), program(x, list(values)))


# ----- pure generators live at a break: later writes to what they read are seen ---------
def _doubled_after_an_in_place_write(a, b):
    xs = [a.clone(), b.clone()]
    items = (t * 2 for t in xs)
    first = next(items)
    print("between")
    xs[1].add_(1)
    return first, next(items)


def _doubled_list_after_an_in_place_write(a, b):
    xs = [a.clone(), b.clone()]
    items = (t * 2 for t in xs)
    print("between")
    xs[1].add_(1)
    return list(items)


def _map_after_an_in_place_write_to_an_input(a, b):
    items = map(lambda t: t * 2, [a, b])
    print("between")
    b.mul_(3)
    return list(items)


def _generator_after_an_item_assignment(a, b):
    xs = [a, a]
    items = (t + 1 for t in xs)
    first = next(items)
    print("between")
    xs[1] = b
    return first, next(items)


def _generator_after_an_append(a, b):
    xs = [a]
    items = (t.sum() for t in xs)
    first = next(items)
    print("between")
    xs.append(b)
    return first, list(items)


def _filter_after_an_in_place_write(a, b):
    items = filter(lambda t: bool(t.sum() > -100), [a, b])
    print("between")
    b.sub_(1)
    return list(items)


@pytest.mark.parametrize(
    "program",
    [
        _doubled_after_an_in_place_write,
        _doubled_list_after_an_in_place_write,
        _map_after_an_in_place_write_to_an_input,
        _generator_after_an_item_assignment,
        _generator_after_an_append,
        _filter_after_an_in_place_write,
    ],
    ids=lambda p: p.__name__.lstrip("_"),
)
def test_pure_generator_live_at_a_break_sees_later_writes(program, capsys):
    compiled = dynamo_capture.optimize(program, backend=eager_backend)
    for _ in range(2):
        args = (torch.randn(3), torch.randn(3))
        expected = program(*clone_inputs(args))
        got = compiled(*clone_inputs(args))
        assert_same(got, expected)


def test_pure_generator_returned_sees_the_callers_later_write():
    def program(x):
        return (x * i for i in range(3))

    x = torch.randn(3)
    expected_items = program(x.clone())
    got_x = x.clone()
    got_items = dynamo_capture.optimize(program, backend=eager_backend)(got_x)
    expected_x = x.clone()
    expected_items = program(expected_x)
    expected_x.add_(1)
    got_x.add_(1)
    assert_same(list(got_items), list(expected_items))


# ----- map, filter, zip, enumerate live at a break: made again lazily, the frame compiled --
def _map_of_an_outside_list_at_a_break(a, xs):
    items = map(lambda t: t * 2, xs)
    print("between")
    xs[1].add_(1)
    return a + sum(items)


def _map_read_once_then_written(a, xs):
    items = map(torch.neg, xs)
    first = next(items)
    print("between")
    xs[1].mul_(3)
    return a + first + next(items)


def _filter_sees_an_append(a, xs):
    items = filter(lambda t: bool(t.sum() > -100), xs)
    print("between")
    xs.append(a * 5)
    return a + sum(items)


def _zip_of_a_map_and_a_range(a, xs):
    items = zip(map(torch.relu, xs), range(10))
    print("between")
    xs[0].mul_(3)
    return a + sum(t * i for t, i in items)


def _enumerate_of_a_map_read_once(a, xs):
    items = enumerate(map(torch.neg, xs), 4)
    next(items)
    print("between")
    xs[1].mul_(3)
    i, t = next(items)
    return a + i * t


def _map_with_a_closure_appending(a, xs):
    log = []
    scale = a * 3
    items = map(lambda t: log.append(1) or t * scale, xs)
    print("between", len(log))
    xs[1].add_(1)
    total = sum(items)
    return total + len(log)


def _map_over_reversed_dict_values(a, xs):
    table = {"p": xs[0], "q": xs[1]}
    items = map(torch.neg, reversed(table.values()))
    print("between")
    xs[0].add_(1)
    return a + sum(items)


@pytest.mark.parametrize(
    "program",
    [
        _map_of_an_outside_list_at_a_break,
        _map_read_once_then_written,
        _filter_sees_an_append,
        _zip_of_a_map_and_a_range,
        _enumerate_of_a_map_read_once,
        _map_with_a_closure_appending,
        _map_over_reversed_dict_values,
    ],
    ids=lambda p: p.__name__.lstrip("_"),
)
def test_lazy_builtin_iterator_live_at_a_break_is_handed_on_lazily(program, capsys):
    compiled = dynamo_capture.optimize(program, backend=eager_backend)
    for _ in range(2):
        a = torch.randn(3)
        xs = [torch.randn(3), torch.randn(3)]
        expected_xs = clone_inputs(xs)
        expected = program(a.clone(), expected_xs)
        got_xs = clone_inputs(xs)
        with warnings.catch_warnings():
            warnings.simplefilter("error", EagerFallbackWarning)
            got = compiled(a.clone(), got_xs)
        assert_same(got, expected)
        assert_same(got_xs, expected_xs)


def test_returned_map_reads_the_callers_later_write():
    def program(x, xs):
        return x + 1, map(lambda t: t * 2, xs)

    xs = [torch.randn(3), torch.randn(3)]
    expected_xs, got_xs = clone_inputs(xs), clone_inputs(xs)
    _, expected_items = program(torch.ones(1), expected_xs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EagerFallbackWarning)
        _, got_items = dynamo_capture.optimize(program, backend=eager_backend)(
            torch.ones(1), got_xs
        )
    expected_xs[0].add_(1)
    got_xs[0].add_(1)
    assert_same(list(got_items), list(expected_items))


# ----- consumers that write between items; `yield from`'s value ------------------------
def extend_by_generator_reading_the_list(x):
    y = [1]
    y.extend(y[-1] + k for k in range(3))  # each item sees the ones appended before
    return x + 1, y


def iadd_by_generator_reading_the_list(x):
    y = [2]
    y += (y[-1] * 2 for _ in range(3))
    return x * len(y), y


def deque_extend_by_generator_reading_it(x):
    import collections

    d = collections.deque([1], maxlen=3)
    d.extend(d[-1] + k for k in range(4))
    e = collections.deque([1])
    e.extendleft(e[0] + k for k in range(3))
    return x + 1, list(d), list(e)


def _returns_after_yield(t):
    yield t.sin()
    return t.cos()


def _delegates(t):
    value = yield from _returns_after_yield(t)
    yield value * 2


def yield_from_gives_the_return_value(x):
    return list(_delegates(x))


WRITES_BETWEEN_ITEMS = [
    extend_by_generator_reading_the_list,
    iadd_by_generator_reading_the_list,
    deque_extend_by_generator_reading_it,
    yield_from_gives_the_return_value,
]


@pytest.mark.parametrize("fn", WRITES_BETWEEN_ITEMS, ids=[f.__name__ for f in WRITES_BETWEEN_ITEMS])
def test_generator_items_made_as_the_consumer_takes_them(fn):
    # torch.compile 2.13 reads the generator whole first (or drops the return value):
    # compared with eager here
    compiled = dynamo_capture.optimize(fn, backend=eager_backend)
    for _ in range(2):
        args = _one()
        assert_same(compiled(*clone_inputs(args)), fn(*clone_inputs(args)))
    assert compiled.entries


# ----- a break inside a generator the frame made ------------------------------------
def _yields_breaks_yields():
    yield 1
    torch._dynamo.graph_break()
    yield 2


def _sin_breaks_cos(t):
    yield t.sin()
    print("between")
    yield t.cos()


def break_inside_generator_made_in_frame(t):
    gen = _yields_breaks_yields()
    s = next(gen)
    s += next(gen)
    return t + s


def _reads_both(t):
    gen = _sin_breaks_cos(t)
    return next(gen), next(gen)


def break_inside_generator_made_in_callee(t):
    sin, cos = _reads_both(t)
    return sin + cos


BREAKS_IN_GENERATORS = [break_inside_generator_made_in_frame, break_inside_generator_made_in_callee]


@pytest.mark.parametrize(
    "fn", BREAKS_IN_GENERATORS, ids=[fn.__name__ for fn in BREAKS_IN_GENERATORS]
)
def test_break_inside_generator_runs_its_frame_eagerly_like_torch(fn):
    # the frame that made the paused generator runs eagerly (no part could hand it on);
    # a callee that made it runs eagerly and the frame resumes after the call
    check_like_torch(fn, _one)
