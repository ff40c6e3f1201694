"""An input written in place after a value computed from it: the backward does not
recompute that value from the input, whose new value the run time writes after the
forward (eager saved the value, not the input, and its backward runs)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import ember


def _scatter_then_zero(x):
    v1 = x.scatter(0, torch.zeros_like(x, dtype=torch.long), 3.0)
    with torch.no_grad():
        x.zero_()
    return v1.amax() * 2


def _pointwise_then_write_a_view(x):
    v1 = (x * 3).exp()
    with torch.no_grad():
        x.narrow(0, 0, 1).fill_(5)
    return (v1 * x.detach()).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", [_scatter_then_zero, _pointwise_then_write_a_view])
def test_backward_of_a_value_computed_before_its_input_is_written_in_place(backend, fn):
    def run(f):
        x = torch.linspace(-1, 1, 6).reshape(3, 2).requires_grad_()
        out = f(x)
        out.backward()
        return out, x.grad, x.detach()

    expected = run(fn)
    actual = run(ember.compile(fn, backend=backend))
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(
    "drop", [lambda x: F.dropout(x, p=0.0), lambda x: F.dropout(x, 0.3, training=False)]
)
def test_a_dropout_that_drops_nothing_returns_its_input_itself(drop, backend, dynamic):
    """Eager's dropout returns its input when it drops nothing: a write through the result
    writes the input (under symbolic sizes too, where torch's Python decomposition copies)."""

    def fn(x):
        v = drop(x)
        v.mul_(2)
        return v + 1

    x, want = torch.ones(4, 3), torch.ones(4, 3)
    expected = fn(want)
    got = ember.compile(fn, backend=backend, dynamic=dynamic)(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x, want)


def _pool_then_break_then_zero(x):
    """The pool's backward reads `x`; only the scatter's output reaches the loss."""
    v1 = x.scatter(0, torch.zeros_like(x, dtype=torch.long), 3.0)
    v2 = F.adaptive_avg_pool2d(x, (2, 3))
    if v2.float().mean().item() > -100:  # a graph break: the write is in the next graph
        with torch.no_grad():
            x.narrow(1, 0, 1).zero_()
    return v1.amax() * 2, v2


def _read_then_break_then_zero(x):
    """Both outputs' backwards read `x` (the pools save it), written after the graph break."""
    v1 = F.adaptive_avg_pool2d(x, (1, 2))
    v2 = F.adaptive_max_pool2d(x, (1, 1))
    if v2.float().mean().item() > -100:
        with torch.no_grad():
            x.zero_()
    return v1, v2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_write_after_graph_break_into_an_input_only_an_unused_backward_reads(backend, dtype):
    def run(f):
        x = torch.linspace(-1, 1, 24, dtype=dtype).reshape(2, 3, 4).requires_grad_()
        used, unused = f(x)
        used.backward()
        return used, unused, x.grad, x.detach()

    expected = run(_pool_then_break_then_zero)
    actual = run(ember.compile(_pool_then_break_then_zero, backend=backend))
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("which", [0, 1])
def test_write_after_graph_break_into_an_input_a_used_backward_reads_raises(backend, which):
    def run(f):
        x = torch.linspace(-1, 1, 24).reshape(2, 3, 4).requires_grad_()
        f(x)[which].sum().backward()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(_read_then_break_then_zero)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(ember.compile(_read_then_break_then_zero, backend=backend))


def _then_break_then_zero(compute):
    """`compute(x)`'s outputs, with `x` zeroed in place after a graph break."""

    def fn(x):
        outs = compute(x)
        if outs[0].float().mean().item() > -100:
            with torch.no_grad():
                x.zero_()
        return outs

    return fn


# (outputs of x, which output the loss takes): eager raises where that output's backward
# reads x saved, whatever the compiled forward saves in its place (sin's backward reads
# x, and cos(x) is an output: the partitioner may save it instead of x).
EAGER_SAVES = {
    "sin_of_sin_cos": (lambda x: (x.sin(), x.cos()), 0),
    "cos_of_sin_cos": (lambda x: (x.sin(), x.cos()), 1),
    "sin_of_a_view": (lambda x: (x[0].sin(), x[0].cos()), 0),
    "sin_among_scaled": (lambda x: (x * 2, x.sin().cos()), 1),
    "mul_by_itself": (lambda x: (x * x, (x * x).cos()), 1),
}
# ... and where it does not: the loss's output saves no x (a scale, exp saves its
# result), though another output's backward would read it.
EAGER_SAVES_NOT = {
    "scaled_beside_sin": (lambda x: (x * 2, x.sin()), 0),
    "exp_beside_cos": (lambda x: (x.exp(), x.cos()), 0),
    "tanh_beside_sin": (lambda x: (x.tanh(), x.sin()), 0),
    "sigmoid_of_a_scale_beside_cos": (lambda x: ((x * 2).sigmoid(), x.cos()), 0),
    "shifted_beside_sin_cos": (lambda x: (x + 1, x.sin(), x.cos()), 0),
}


def _loss_of(fn, which):
    x = torch.linspace(-1, 1, 8).reshape(2, 4).requires_grad_()
    y = x * 1  # a non-leaf: written in place under no_grad as eager allows
    fn(y)[which].sum().backward()
    return x.grad


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("case", sorted(EAGER_SAVES))
def test_write_into_an_input_eager_backward_reads_raises_whatever_is_saved(backend, case):
    compute, which = EAGER_SAVES[case]
    fn = _then_break_then_zero(compute)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _loss_of(fn, which)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _loss_of(ember.compile(fn, backend=backend), which)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("case", sorted(EAGER_SAVES_NOT))
def test_write_into_an_input_only_another_outputs_backward_reads(backend, case):
    compute, which = EAGER_SAVES_NOT[case]
    fn = _then_break_then_zero(compute)
    expected = _loss_of(fn, which)
    torch.testing.assert_close(_loss_of(ember.compile(fn, backend=backend), which), expected)


def _exp_and_scale_then_write_exp(x):
    """exp saves its result, written in place after a graph break; only the scale's
    output reaches the loss when `which` is 1."""
    v2 = torch.exp(x)
    v5 = x * -1.5
    if (v2 > 0).any():
        v2.abs_()
    return v2, v5


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("which", [0, 1])
def test_write_after_graph_break_into_a_saved_output_raises_only_where_eager_reads_it(
    backend, which
):
    def run(f):
        x = torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_()
        f(x)[which].sum().backward()
        return x.grad

    compiled = ember.compile(_exp_and_scale_then_write_exp, backend=backend)
    if which == 0:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            run(_exp_and_scale_then_write_exp)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            run(compiled)
    else:
        torch.testing.assert_close(run(compiled), run(_exp_and_scale_then_write_exp))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_parameter_written_after_the_forward_raises_as_eager(backend):
    """The second linear's backward reads its weight (for the first's output grad); the
    first's does not (its input needs no grad): only a write into the former raises."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    x = torch.randn(3, 4)
    results = []
    for m in (model, ember.compile(model, backend=backend)):
        grads = []
        for layer in (0, 2):
            model.zero_grad()
            loss = m(x).sin().sum()
            with torch.no_grad():
                model[layer].weight.mul_(1.0)  # a write (the version moves), values kept
            try:
                loss.backward()
                grads.append(model[0].weight.grad.clone())
            except RuntimeError as error:
                assert "modified by an inplace operation" in str(error)
                grads.append(None)
        results.append(grads)
    assert results[0][1] is None
    assert results[1][1] is None
    torch.testing.assert_close(results[1][0], results[0][0])


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_no_grad_view_written_in_place_then_used_with_grad_raises(backend):
    def fn(x):
        v1 = x * 2
        with torch.no_grad():
            v4 = v1.narrow(0, 1, 2)
            v4.mul_(v4)
        return v1.sin(), torch.cat([v4, v4], 0)

    x = torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        fn(x)
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        ember.compile(fn, backend=backend)(x)


def _no_grad_view_of_an_intermediate_written(x):
    v1 = x * 2
    with torch.no_grad():
        v4 = v1.narrow(0, 1, 2)
        v4.mul_(v4)
    return v4, v1


def _no_grad_view_alone_written(x):
    return _no_grad_view_of_an_intermediate_written(x)[0]


def _no_grad_view_of_an_input_written(x):
    with torch.no_grad():
        v = x.narrow(0, 1, 2)
        v.add_(1)
    return v, x.sin()


NO_GRAD_VIEWS_WRITTEN = {
    "of_an_intermediate": _no_grad_view_of_an_intermediate_written,
    "alone": _no_grad_view_alone_written,
    "of_an_input": _no_grad_view_of_an_input_written,
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("case", sorted(NO_GRAD_VIEWS_WRITTEN))
def test_returned_no_grad_view_written_in_place_refuses_grad_mode_use_as_eager(backend, case):
    """The view comes back (its use in no_grad mode runs, as eager's); a use in grad mode
    raises eager's error, and the other outputs' backward runs as eager's."""
    fn = NO_GRAD_VIEWS_WRITTEN[case]

    def run(f):
        x = torch.linspace(-1, 1, 4).requires_grad_()
        y = x * 1  # a non-leaf: written in place under no_grad as eager allows
        outs = f(y)
        view = outs[0] if isinstance(outs, tuple) else outs
        with torch.no_grad():
            value = view * 3
        with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
            view * 3
        if isinstance(outs, tuple):
            outs[1].sum().backward()
        return value, x.grad

    expected = run(fn)
    actual = run(ember.compile(fn, backend=backend))
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want)


def _disabled_saved_hooks_around_breaks(x):
    y = x.cos()
    with torch.autograd.graph.disable_saved_tensors_hooks("hooks are off here"):
        y = y * 2
        z = torch.tensor(y.tolist())  # a graph break
        y = y.exp() + z
        print("a graph break")
        y = y * 3
    return y.sin()


def _nested_disabled_saved_hooks_around_a_break(x):
    y = x.cos()
    with torch.autograd.graph.disable_saved_tensors_hooks("outer"):
        y = y * 2
        with torch.autograd.graph.disable_saved_tensors_hooks("inner"):
            print("a graph break")
            y = y.exp()
    return y.sin()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(
    "fn", [_disabled_saved_hooks_around_breaks, _nested_disabled_saved_hooks_around_a_break]
)
def test_disable_saved_tensors_hooks_block_in_the_frame_runs_as_eager(fn, backend, capsys):
    def run(f):
        x = torch.linspace(-1, 1, 6, requires_grad=True)
        out = f(x)
        out.sum().backward()
        return out, x.grad

    expected = run(fn)
    actual = run(ember.compile(fn, backend=backend))
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # (sin of exp, fused)
    assert torch._C._autograd._saved_tensors_hooks_is_enabled()


def _exp_written_in_the_graph_then_beside_a_scale(x):
    """exp's result written in place inside the first graph (its backward would raise);
    the next graph takes it with `x`, and the loss reads only the scale of `x`."""
    v2 = torch.exp(x)
    v2.abs_()
    if (v2 > 0).any():  # a graph break
        v2.abs_()
    v4 = v2.masked_fill(v2 > 0, 0)
    v5 = x * -1.5
    if int((v5 != 0).sum()) >= 2:  # a graph break
        v6 = v5.sum(-1) / v5.shape[-1]
    else:
        v6 = v5.sum(-1)
    return v6, v4


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 2, 2)], ids=str)
def test_backward_missing_only_from_an_output_beside_the_loss_runs_as_eager(backend, shape):
    def run(f, which):
        x = torch.linspace(-1, 1, math.prod(shape)).reshape(shape).requires_grad_()
        f(x)[which].sum().backward()
        return x.grad

    fn = _exp_written_in_the_graph_then_beside_a_scale
    compiled = ember.compile(fn, backend=backend)
    torch.testing.assert_close(run(compiled, 0), run(fn, 0))
    for f in (fn, compiled):  # the loss of the written exp: eager's error
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            run(f, 1)
