"""Custom torch.autograd.Functions in captured code: `Fn.apply` is one graph node.

Values and gradients equal eager's (the user's backward runs: most backwards here differ
from the true derivative) and graph counts equal torch.compile's. Functions whose
staticmethods print, write globals or branch on tensor data break the graph as before.
"""

from __future__ import annotations

import contextlib
import io

import autograd_function_programs as programs
import pytest
import torch
from torchcheck import torch_counts

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same, clone_inputs

# op counts that differ from torch.compile's: an output the program drops keeps its
# getitem node here (torch removes it)
_OPS_DIFFER = {"one_of_two_used"}


def _first(value):
    return value[0] if isinstance(value, tuple) else value


def _run_with_gradients(fn, make_args, backend, calls=2):
    compiled = dynamo_capture.optimize(fn, backend=backend)
    programs.check_values_and_gradients(compiled, fn, make_args, calls)


@pytest.mark.parametrize(
    ("fn", "make_args"), programs.CAPTURED, ids=[fn.__name__ for fn, _ in programs.CAPTURED]
)
def test_autograd_function_apply_is_one_graph_with_eager_gradients(fn, make_args):
    backend = CountingBackend()
    _run_with_gradients(fn, make_args, backend)
    with contextlib.redirect_stdout(io.StringIO()):
        frames, ops = torch_counts(fn, make_args)
    assert backend.frame_count == frames == 1
    if fn.__name__ not in _OPS_DIFFER:
        assert backend.op_count == ops
    targets = [
        n.target.__name__ for g in backend.graphs for n in g.graph.nodes if callable(n.target)
    ]
    assert any(name.startswith("autograd_function_apply_") for name in targets)


@pytest.mark.parametrize(
    ("fn", "make_args"), programs.INLINED, ids=[fn.__name__ for fn, _ in programs.INLINED]
)
def test_autograd_function_of_tensors_without_grad_is_traced_in_place(fn, make_args):
    backend = CountingBackend()
    _run_with_gradients(fn, make_args, backend)
    assert backend.frame_count == 1
    targets = [getattr(n.target, "__name__", "") for g in backend.graphs for n in g.graph.nodes]
    assert not any(name.startswith("autograd_function_apply_") for name in targets)


@pytest.mark.parametrize(
    ("fn", "make_args"), programs.BROKEN, ids=[fn.__name__ for fn, _ in programs.BROKEN]
)
def test_autograd_function_that_cannot_be_captured_breaks_the_graph(fn, make_args):
    backend = CountingBackend()
    _run_with_gradients(fn, make_args, backend)
    with contextlib.redirect_stdout(io.StringIO()):
        frames, _ = torch_counts(fn, make_args)
    assert backend.frame_count == frames
    targets = [getattr(n.target, "__name__", "") for g in backend.graphs for n in g.graph.nodes]
    assert not any(name.startswith("autograd_function_apply_") for name in targets)


def test_user_backward_is_used_not_the_true_derivative():
    x = torch.randn(5, requires_grad=True)
    compiled = dynamo_capture.optimize(programs.reversed_gradient, backend=CountingBackend())
    compiled(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.sin(x.detach()) * 2 * 0.5)  # reversed: -(-sin)


def test_global_written_in_backward_is_written_each_backward():
    programs.CALLS.clear()
    compiled = dynamo_capture.optimize(
        programs.writes_global_in_backward, backend=CountingBackend()
    )
    for _ in range(3):
        compiled(torch.randn(3, requires_grad=True)).sum().backward()
    assert programs.CALLS == [1, 1, 1]


def test_global_read_by_backward_is_guarded():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(programs.scaled_by_global, backend=backend)
    x = torch.randn(3, requires_grad=True)
    compiled(x).backward()
    try:
        programs.SCALE = 5.0
        y = x.detach().clone().requires_grad_()
        compiled(y).backward()
        torch.testing.assert_close(y.grad, torch.full((3,), 10.0))
    finally:
        programs.SCALE = 3.0
    assert backend.frame_count == 2  # compiled again for the new constant


def test_autograd_function_under_no_grad_matches_eager():
    def fn(x):
        with torch.no_grad():
            return programs.Square.apply(x.sin()) + 1

    backend = CountingBackend()
    x = torch.randn(4, requires_grad=True)
    got = dynamo_capture.optimize(fn, backend=backend)(x)
    assert_same(got, fn(x))
    assert backend.frame_count == 1


def test_autograd_function_with_constant_from_enclosing_function_is_guarded():
    factor = 2.0

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * factor

        @staticmethod
        def backward(ctx, grad):
            return grad * factor * 10

    def fn(x):
        return Scale.apply(x)

    backend = CountingBackend()
    _run_with_gradients(fn, lambda: (torch.randn(3, requires_grad=True),), backend)
    assert backend.frame_count == 1


class _AppendsThroughModule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        programs.CALLS.append(1)  # a list reached through a module attribute
        return grad


class _CallsInnerThatWrites(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return programs.WritesGlobalInBackward.apply(x) * 2

    @staticmethod
    def backward(ctx, grad):
        return grad


class _ScaledByModuleConstant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * programs.SCALE


class _PythonRandom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * _random()

    @staticmethod
    def backward(ctx, grad):
        return grad


def _random():
    import random

    return random.random()


@pytest.mark.parametrize("function", [_AppendsThroughModule, _CallsInnerThatWrites, _PythonRandom])
def test_autograd_function_with_effects_reached_indirectly_breaks_the_graph(function):
    def fn(x):
        return function.apply(x.sin()) + 1

    programs.CALLS.clear()
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    for _ in range(2):
        compiled(torch.randn(3, requires_grad=True)).sum().backward()
    targets = [getattr(n.target, "__name__", "") for g in backend.graphs for n in g.graph.nodes]
    assert not any(name.startswith("autograd_function_apply_") for name in targets)
    if function is _AppendsThroughModule:
        assert programs.CALLS == [1, 1]


def test_module_constant_read_by_backward_is_guarded():
    def fn(x):
        return _ScaledByModuleConstant.apply(x)

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    x = torch.randn(3, requires_grad=True)
    compiled(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 3.0))
    try:
        programs.SCALE = 4.0
        y = torch.randn(3, requires_grad=True)
        compiled(y).sum().backward()
        torch.testing.assert_close(y.grad, torch.full((3,), 4.0))
    finally:
        programs.SCALE = 3.0


def _vmap_of_function(x):
    return torch.vmap(programs.VmapStyle.apply)(x)


def _grad_of_function(x):
    return torch.func.grad(lambda t: programs.SetupContextStyle.apply(t, 3).sum())(x)


@pytest.mark.parametrize("fn", [_vmap_of_function, _grad_of_function])
def test_autograd_function_under_torch_func_transform_matches_eager(fn):
    backend = CountingBackend()
    x = torch.randn(4, 3)
    assert_same(dynamo_capture.optimize(fn, backend=backend)(x), fn(x))
    assert backend.frame_count == 1


class _TakesAList(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensors):
        return tensors[0] * 2

    @staticmethod
    def backward(ctx, grad):
        return None


def test_autograd_function_with_a_list_argument_breaks_the_graph():
    def fn(x):
        return _TakesAList.apply([x.sin()]) + 1

    backend = CountingBackend()
    x = torch.randn(3)
    assert_same(dynamo_capture.optimize(fn, backend=backend)(x), fn(x))
    targets = [getattr(n.target, "__name__", "") for g in backend.graphs for n in g.graph.nodes]
    assert not any(name.startswith("autograd_function_apply_") for name in targets)


# torch.compile breaks at mark_dirty of a tensor that needs no gradient
_INFERENCE_COUNTS_DIFFER = {"dirty_in_place", "dirty_input_buffer", "dirty_then_read_again"}


def _without_grad(make_args):
    def make():
        return tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in make_args())

    return make


@pytest.mark.parametrize(
    ("fn", "make_args"),
    programs.CAPTURED + programs.INLINED + programs.BROKEN,
    ids=[fn.__name__ for fn, _ in programs.CAPTURED + programs.INLINED + programs.BROKEN],
)
def test_autograd_function_without_gradients_traces_forward_like_torch(fn, make_args):
    make = _without_grad(make_args)
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    for _ in range(2):
        args = make()
        with contextlib.redirect_stdout(io.StringIO()):
            assert_same(compiled(*clone_inputs(args)), fn(*clone_inputs(args)))
    if fn.__name__ in _INFERENCE_COUNTS_DIFFER:
        return
    with contextlib.redirect_stdout(io.StringIO()):
        frames, ops = torch_counts(fn, make)
    assert (backend.frame_count, backend.op_count) == (frames, ops)
