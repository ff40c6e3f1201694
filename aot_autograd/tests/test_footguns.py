"""Footguns of compiling ahead of time, each turned into a clear error or an eager run
(with an EagerCallWarning saying why), ranked by harm.

| rank | footgun                                                     | without a check  | test |
|------|-------------------------------------------------------------|------------------|------|
| 1    | a tensor captured from outside is written in place          | silent: lost     | test_mutating_a_captured_tensor_runs_eagerly |
| 1    | two inputs share memory and one is written                   | silent: stale    | test_mutating_one_of_two_aliased_inputs_runs_like_eager (the call runs eagerly) |
| 1    | a value read into Python at trace time differs at run time   | silent: branch   | test_value_read_into_python_is_checked_at_every_call |
| 1    | torch.allclose / torch.equal returned a bool at trace time   | silent: baked    | test_allclose_and_equal_are_checked_at_every_call |
| 1    | a size assumption of a symbolic trace is broken by a call    | silent: wrong    | test_dynamic_shapes.py: a call breaking a traced assumption |
| 1    | one op writes two arguments sharing memory (batch norm stats)| silent: stale   | test_op_writing_two_arguments_that_share_memory_runs_eagerly |
| 1    | an input requiring grad written in place (a non-leaf there)  | trace error      | test_write_into_an_input_requiring_grad_matches_eager (test_grad_input_writes.py) |
| 2    | double backward through the compiled backward                | wrong grads      | test_double_backward_is_a_clear_error |
| 1    | a gradient penalty on a grad the compiled backward made       | silent: dropped  | test_grad_of_a_grad_saving_no_input_is_a_clear_error |
| 2    | set_, or resize_ growing shared memory, inside the graph     | wrong shapes     | test_set_and_growing_shared_memory_run_eagerly |
| 2    | an input's shape changed in place (t_, squeeze_)             | wrong shapes     | test_shape_change_of_an_input_is_replayed_on_the_callers_tensor |
| 3    | fakes cannot follow (value reads): traced again on real data | slower compile   | logged under EMBER_LOGS=aot_graphs |
"""

from __future__ import annotations

import pytest
import torch

from aot_autograd import DoubleBackwardError, EagerCallWarning, aot_function


def identity_compiler(gm, example_inputs):
    return gm


def test_mutating_a_captured_tensor_runs_eagerly():
    state = torch.zeros(3)

    def fn(x):
        state.add_(x)
        return x * 2

    x = torch.randn(3)
    with pytest.warns(EagerCallWarning, match="not one of its inputs"):
        out = aot_function(fn, identity_compiler)(x)
    torch.testing.assert_close(out, x * 2)
    torch.testing.assert_close(state, x)  # the update is kept, as in eager


def test_mutating_one_of_two_aliased_inputs_runs_like_eager():
    def fn(a, b):
        a.add_(1)
        return b * 2

    x, y = torch.zeros(3), torch.zeros(3)
    out = aot_function(fn, identity_compiler)(x, x)
    torch.testing.assert_close(out, fn(y, y))
    torch.testing.assert_close(x, y)


def test_mutated_input_aliasing_another_on_a_later_call_runs_like_eager():
    def fn(a, b, c):
        a.mul_(2)
        return b + c, a.sum()

    compiled = aot_function(fn, identity_compiler)
    a, b, c = torch.ones(3), torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(a, b, c), fn(torch.ones(3), b, c))

    def cases(base, a, b, c):
        return [
            (base[:3], base[3:6], c),  # views of one storage at other offsets
            (base[5:8], c, base[::3]),  # a strided view reaching the mutated slice's storage
            (base[:3], torch.nn.Parameter(base[3:6], requires_grad=False), c),  # a parameter
            (a, b, a),  # the same tensor twice
        ]

    for i in range(4):
        base, twin = torch.arange(8.0), torch.arange(8.0)
        a_twin = a.clone()
        got = compiled(*cases(base, a, b, c)[i])
        expected = fn(*cases(twin, a_twin, b, c)[i])
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close((base, a), (twin, a_twin))
    b_of_other_storage = torch.randn(3)
    got = compiled(a, b_of_other_storage, c)
    torch.testing.assert_close(got[0], b_of_other_storage + c)


def test_op_writing_two_arguments_that_share_memory_runs_eagerly():
    # Training batch norm writes running_mean, then running_var: where they share memory
    # the variance update reads the mean just written.
    def stats_in_one_buffer(x):
        stats = torch.ones(x.shape[1])
        out = torch.nn.functional.batch_norm(x, stats, stats.view(-1), training=True)
        return out, stats

    def overlapping_halves(x):
        buffer = torch.ones(x.shape[1] + 2)
        out = torch.nn.functional.batch_norm(x, buffer[:-2], buffer[2:], training=True)
        return out, buffer

    def disjoint_halves(x):
        buffer = torch.ones(2 * x.shape[1])
        mean, var = buffer[: x.shape[1]], buffer[x.shape[1] :]
        out = torch.nn.functional.batch_norm(x, mean, var, training=True, momentum=0.5)
        return out, buffer

    x = torch.randn(6, 4)
    with pytest.warns(EagerCallWarning, match="writes two arguments that share memory"):
        got = aot_function(stats_in_one_buffer, identity_compiler)(x)
    torch.testing.assert_close(got, stats_in_one_buffer(x))
    # Where the halves overlap, eager's own result depends on the order its threads write
    # the channels in (channel c's variance lands where channel c + 2's mean does): only
    # the normalized output is compared, and the buffer must stay written, not stale.
    with pytest.warns(EagerCallWarning, match="writes two arguments that share memory"):
        out, buffer = aot_function(overlapping_halves, identity_compiler)(x)
    torch.testing.assert_close(out, overlapping_halves(x)[0])
    assert not torch.equal(buffer, torch.ones_like(buffer))
    torch.testing.assert_close(
        aot_function(disjoint_halves, identity_compiler)(x), disjoint_halves(x)
    )

    def stats_passed_in(x, mean, var):
        return torch.nn.functional.batch_norm(x, mean, var, training=True) * 2

    compiled = aot_function(stats_passed_in, identity_compiler)
    compiled(x, torch.zeros(4), torch.ones(4))
    buffer, twin = torch.ones(4), torch.ones(4)
    got = compiled(x, buffer, buffer.view(-1))
    torch.testing.assert_close(got, stats_passed_in(x, twin, twin.view(-1)))
    torch.testing.assert_close(buffer, twin)


def test_write_into_an_input_requiring_grad_matches_eager():
    # Traced as a non-leaf, the write is differentiated; the caller's tensor is a leaf
    # (eager refuses the write, and so does every call) or not (eager writes it).
    def fn(x, v):
        v.mul_(2)
        return v / x

    x = torch.randn(5, requires_grad=True)
    compiled = aot_function(fn, identity_compiler)
    got = compiled(x, x * 3)
    (got_grad,) = torch.autograd.grad(got.sum(), x)
    expected = fn(x, x * 3)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    torch.testing.assert_close((got, got_grad), (expected, expected_grad))
    leaf = torch.randn(5, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        compiled(x, leaf)


def test_value_read_into_python_is_checked_at_every_call():
    from aot_autograd import ValueChangedError

    def fn(x):
        if bool((x > 0).all()):
            return x * 2
        return x * 3

    f = aot_function(fn, identity_compiler)
    positive = torch.rand(4) + 0.1
    torch.testing.assert_close(f(positive), positive * 2)
    torch.testing.assert_close(f(positive + 1), (positive + 1) * 2)
    with pytest.raises(ValueChangedError, match="differs from its value when traced"):
        f(-positive)


def test_double_backward_is_a_clear_error():
    f = aot_function(lambda x: x.sin() * x, identity_compiler)
    x = torch.randn(4, requires_grad=True)
    (grad,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    with pytest.raises(DoubleBackwardError, match="double backward"):
        grad.sum().backward()


def test_grad_of_a_grad_saving_no_input_is_a_clear_error():
    # the compiled backward reads only values not requiring grad (x ** 3 saves x ** 2):
    # the grad it gives must still refuse a second grad, not drop the penalty's term
    f = aot_function(lambda x: x**3, identity_compiler)
    x = torch.randn(4, requires_grad=True)
    out = f(x)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    assert grad.requires_grad
    with pytest.raises(DoubleBackwardError, match="double backward"):
        (out.sum() + grad.pow(2).sum()).backward()


def test_grad_of_a_grad_with_allow_unused_is_a_clear_error_not_none():
    # eager gives the second derivative; the marked grad must reach x (its leaf input),
    # so the raising backward runs instead of autograd answering None for an unused x
    f = aot_function(lambda x: x**3, identity_compiler)
    x = torch.randn(4, requires_grad=True)
    (grad,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    with pytest.raises(DoubleBackwardError, match="double backward"):
        torch.autograd.grad(grad.sum(), x, allow_unused=True)


def test_create_graph_through_a_non_leaf_input_is_a_clear_error():
    f = aot_function(lambda x: x**3, identity_compiler)
    leaf = torch.randn(4, requires_grad=True)
    x = leaf * 2  # a non-leaf: the compiled grads could not carry their tie to it
    with pytest.raises(DoubleBackwardError, match="non-leaf input"):
        torch.autograd.grad(f(x).sum(), leaf, create_graph=True)


def test_set_and_growing_shared_memory_run_eagerly():
    def grow(x):
        y = x * 1
        view = y[:2]
        y.resize_(20)
        return view + 1

    x = torch.randn(4)
    with pytest.warns(EagerCallWarning, match="grows a tensor that shares"):
        torch.testing.assert_close(aot_function(grow, identity_compiler)(x), grow(x))

    def set_storage(x):
        y = x * 1
        y.set_(torch.zeros(8))
        return y

    with pytest.warns(EagerCallWarning, match="size or storage"):
        torch.testing.assert_close(aot_function(set_storage, identity_compiler)(x), torch.zeros(8))


def test_shape_change_of_an_input_is_replayed_on_the_callers_tensor():
    def fn(x):
        x.t_()
        x.add_(1)
        return x, x * 2

    eager_x = torch.randn(2, 3)
    got_x = eager_x.clone()
    expected = fn(eager_x)
    got = aot_function(fn, identity_compiler)(got_x)
    torch.testing.assert_close(got, expected)
    assert got[0] is got_x
    assert (got_x.shape, got_x.stride()) == (eager_x.shape, eager_x.stride())
    torch.testing.assert_close(got_x, eager_x)


@pytest.mark.parametrize("read", [torch.allclose, torch.equal])
def test_allclose_and_equal_are_checked_at_every_call(read):
    from aot_autograd import ValueChangedError

    def fn(a, b):
        return a * 2 if read(a, b) else a * 3

    compiled = aot_function(fn, identity_compiler)
    a = torch.randn(4)
    torch.testing.assert_close(compiled(a, a.clone()), a * 2)
    with pytest.raises(ValueChangedError, match="differs from its value when traced"):
        compiled(a, a + 1)
