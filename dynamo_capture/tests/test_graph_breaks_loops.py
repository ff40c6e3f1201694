"""Graph breaks inside loops: every variant gives eager's values, or runs eagerly.

A break in a `for` body splits the body part again at the break; a branch that
ends the body (the loop's back jump, a `continue`) leaves the eager middle, so
the middle runs to the body's end and nothing after it runs twice. Compared with
eager on two calls each (the second reuses what the first compiled).
"""

from __future__ import annotations

import pytest
import torch
from breakcheck import LOG, assert_same

import dynamo_capture


def _eager_backend(gm, example_inputs):
    return gm.forward


def _xs(n=3, seed=0):
    torch.manual_seed(seed)
    return [torch.randn(3) for _ in range(n)]


def branch_in_for(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.max() > 0.5:
            acc = acc + t
        else:
            acc = acc - t * 0.5
    return acc


def _branchy_helper(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.max() > 0.5:
            acc = acc + t
        else:
            acc = acc - t * 0.5
    return acc


def branch_in_for_in_callee(xs):
    return _branchy_helper(xs) * 2


def branch_not_last_in_body(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.sum() > 0:
            acc = acc + t
        acc = acc * 1.5
    return acc


def if_without_else_last(xs):
    acc = torch.ones(3)
    for t in xs:
        acc = acc * 0.9
        if t.mean() > 0:
            acc = acc + t
    return acc


def print_in_body(xs):
    acc = torch.zeros(3)
    for t in xs:
        acc = acc + t
        print("step")
        acc = acc * 2
    return acc


def continue_on_data(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.sum() < 0:
            continue
        acc = acc + t
    return acc


def break_on_data(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.max() > 1.0:
            break
        acc = acc + t
    return acc * 3


def return_on_data(xs):
    acc = torch.zeros(3)
    for t in xs:
        acc = acc + t
        if acc.sum() > 0.5:
            return acc * 10
    return acc


def over_range(xs):
    acc = torch.zeros(3)
    for i in range(len(xs)):
        if xs[i].max() > 0.5:
            acc = acc + xs[i] * i
        else:
            acc = acc - xs[i]
    return acc, i


def over_enumerate(xs):
    acc = torch.zeros(3)
    for i, t in enumerate(xs):
        if t.min() < -0.5:
            acc = acc + t * (i + 1)
        else:
            acc = acc - t
    return acc, i, t


def over_zip(xs):
    acc = torch.zeros(3)
    for a, b in zip(xs, reversed(xs)):
        if (a - b).sum() > 0:
            acc = acc + a
        else:
            acc = acc + b * 2
    return acc


def over_nested_unpack(xs):
    acc = torch.zeros(3)
    for i, (a, b) in enumerate(zip(xs, xs[1:])):
        if (a * b).sum() > 0:
            acc = acc + a * i
        else:
            acc = acc - b
    return acc


def over_dict_items(xs):
    d = {f"k{i}": t for i, t in enumerate(xs)}
    acc = torch.zeros(3)
    for key, t in d.items():
        if t.max() > 0.5:
            acc = acc + t
        else:
            acc = acc - t
        LOG.append(key)
    return acc


def while_on_data(xs):
    acc = xs[0].clone()
    steps = 0
    while acc.abs().sum() < 10:
        acc = acc * 2 + 0.1
        steps += 1
    return acc, steps


def while_with_index(xs):
    i = 0
    acc = torch.zeros(3)
    while i < len(xs):
        if xs[i].sum() > 0:
            acc = acc + xs[i]
        else:
            acc = acc - xs[i]
        i += 1
    return acc


def nested_loops(xs):
    acc = torch.zeros(3)
    for a in xs:
        for b in xs:
            if (a * b).sum() > 0:
                acc = acc + a * b
            else:
                acc = acc - b
        acc = acc * 0.5
    return acc


def nested_break_inner(xs):
    acc = torch.zeros(3)
    for a in xs:
        for b in xs:
            if (a + b).max() > 1.5:
                break
            acc = acc + b
        acc = acc + a
    return acc


def _noisy(t):
    print("callee")
    return t * 2


def break_in_callee(xs):
    acc = torch.zeros(3)
    for t in xs:
        acc = acc + _noisy(t)
        acc = acc.sin()
    return acc


def _branchy_callee(t):
    if t.sum() > 0:
        return t * 2
    return -t


def data_branch_in_callee(xs):
    acc = torch.zeros(3)
    for t in xs:
        acc = acc + _branchy_callee(t)
    return acc


def loop_var_after_loop(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.sum() > 0:
            acc = acc + t
    return acc + t


def for_else(xs):
    acc = torch.zeros(3)
    for t in xs:
        if t.max() > 5:
            break
        acc = acc + t
    else:
        acc = acc * 100
    return acc


def loop_carried_list(xs):
    outs = []
    for t in xs:
        if t.sum() > 0:
            outs.append(t * 2)
        else:
            outs.append(t)
    return torch.stack(outs)


def augmented_in_branch(xs):
    acc = torch.zeros(3)
    n = 0
    for t in xs:
        if t.max() > 0.5:
            acc += t
            n += 1
        else:
            acc -= t * 0.5
    return acc, n


def print_then_break_then_tail(xs):
    acc = torch.zeros(3)
    for t in xs:
        acc = acc + t
        if t.sum() > 0:
            print("stop")
            break
    acc = acc * 2
    print("after")
    return acc + 1


def print_before_data_break(xs):
    acc = torch.zeros(3)
    for t in xs:
        print("in")
        if t.sum() > 0:
            acc = acc + 1
            break
        acc = acc - t
    return acc * 3


def while_true_with_break(xs):
    i = 0
    acc = torch.zeros(3)
    while True:
        acc = acc + xs[i]
        if acc.sum() > 1 or i == len(xs) - 1:
            break
        i += 1
    return acc, i


def try_finally_break(xs):
    acc = torch.zeros(3)
    for t in xs:
        try:
            if t.sum() > 0:
                break
            acc = acc + t
        finally:
            acc = acc * 1.1
    return acc


def with_block_in_body(xs):
    acc = torch.zeros(3)
    for t in xs:
        with torch.no_grad():
            if t.sum() > 0:
                acc = acc + t
            print("w")
        acc = acc - 1
    return acc


def return_from_loop_in_with(xs):
    acc = torch.zeros(3)
    with torch.enable_grad():
        for t in xs:
            if t.sum() > 0:
                return acc + t
            acc = acc - t
    return acc


class _Box:
    pass


def attribute_loop_target(xs):
    box = _Box()
    acc = torch.zeros(3)
    for box.value in xs:
        if box.value.sum() > 0:
            acc = acc + box.value
    return acc


def starred_loop_target(xs):
    acc = torch.zeros(3)
    for first, *rest in [xs, xs[1:]]:
        if first.sum() > 0:
            acc = acc + first + len(rest)
    return acc


def while_else(xs):
    i = 0
    acc = torch.zeros(3)
    while i < len(xs):
        if xs[i].sum() > 1:
            break
        acc = acc + xs[i]
        i += 1
    else:
        acc = acc * 10
    return acc


def three_nested_with_continue(xs):
    acc = torch.zeros(3)
    for a in xs:
        for b in xs:
            for c in xs:
                if (a + b + c).sum() > 0:
                    acc = acc + c
                else:
                    continue
                acc = acc * 0.5
    return acc


PROGRAMS = [
    try_finally_break,
    with_block_in_body,
    return_from_loop_in_with,
    attribute_loop_target,
    starred_loop_target,
    while_else,
    three_nested_with_continue,
    print_then_break_then_tail,
    print_before_data_break,
    while_true_with_break,
    branch_in_for,
    branch_in_for_in_callee,
    branch_not_last_in_body,
    if_without_else_last,
    print_in_body,
    continue_on_data,
    break_on_data,
    return_on_data,
    over_range,
    over_enumerate,
    over_zip,
    over_nested_unpack,
    over_dict_items,
    while_on_data,
    while_with_index,
    nested_loops,
    nested_break_inner,
    break_in_callee,
    data_branch_in_callee,
    loop_var_after_loop,
    for_else,
    loop_carried_list,
    augmented_in_branch,
]


def _check(fn, make_args, capsys=None, loop_breaks="eager_frame"):
    compiled = dynamo_capture.optimize(fn, backend=_eager_backend, loop_breaks=loop_breaks)
    for seed in (0, 1, 2, 3, 0):
        LOG.clear()
        expected = fn(*make_args(seed))
        eager_log = list(LOG)
        eager_text = capsys.readouterr().out if capsys is not None else ""
        LOG.clear()
        got = compiled(*make_args(seed))
        assert_same(got, expected)
        assert LOG == eager_log
        if capsys is not None:
            assert capsys.readouterr().out == eager_text, "printed differently"
    return compiled


@pytest.mark.parametrize("loop_breaks", ["eager_frame", "split"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda fn: fn.__name__)
def test_break_inside_loop_matches_eager(fn, loop_breaks, capsys):
    _check(fn, lambda seed: (_xs(3, seed),), capsys, loop_breaks)


def test_data_branch_in_loop_is_not_halved():
    compiled = dynamo_capture.optimize(branch_in_for, backend=_eager_backend, loop_breaks="split")
    xs = _xs()
    expected = branch_in_for(xs)
    torch.testing.assert_close(compiled(xs), expected)
    torch.testing.assert_close(compiled(xs), expected)
    assert compiled.graph_breaks


def test_loop_over_generator_input():
    def consume(gen):
        acc = torch.zeros(3)
        for t in gen:
            if t.sum() > 0:
                acc = acc + t
            else:
                acc = acc - t
        return acc

    compiled = dynamo_capture.optimize(consume, backend=_eager_backend, loop_breaks="split")
    for seed in (0, 1):
        expected = consume(iter(_xs(4, seed)))
        got = compiled(t for t in _xs(4, seed))
        torch.testing.assert_close(got, expected)


def test_loop_over_iterator_advanced_in_body():
    def pairs(xs):
        it = iter(xs)
        acc = torch.zeros(3)
        for a in it:
            b = next(it)
            if (a - b).sum() > 0:
                acc = acc + a
            else:
                acc = acc + b
        return acc

    _check(pairs, lambda seed: (_xs(4, seed),), loop_breaks="split")


def test_no_loop_driver_inside_a_part_that_stops():
    """A loop inside a part with a stop after it runs as a whole in the eager part: a
    `break` would run on to the part's stop, which a loop driver takes for the end of
    an iteration."""
    import dis

    from dynamo_capture.resume import plan_split, segment_function

    def fn(xs):
        acc = 0
        for t in xs:
            if t > 1:  # inner
                break
            acc += t
        mark = 0  # outer
        return acc + mark

    def offset_of(code, marker):
        lines, first = __import__("inspect").getsourcelines(fn)
        line = first + next(i for i, text in enumerate(lines) if marker in text)
        return next(i.offset for i in dis.get_instructions(code) if i.positions.lineno == line)

    root = plan_split(fn.__code__, offset_of(fn.__code__, "# outer"))
    assert not isinstance(root, str) and root.loop is None
    prefix = segment_function(fn, root.body_start, root.start, root.body_start, "pre")
    inner = plan_split(prefix.__code__, offset_of(prefix.__code__, "# inner"))
    assert not isinstance(inner, str)
    assert inner.loop is None and inner.stop is None
