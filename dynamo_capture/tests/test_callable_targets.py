"""optimize() of callables that are not Python functions: partials, builtins, torch
functions and ops, C methods bound to a tensor; captured through a `fn(*args)` driver."""

import functools

import pytest
import torch

import dynamo_capture
from dynamo_capture.frame_target import _callable_call, frame_target


def _mul(x, y):
    return x * y


@pytest.mark.parametrize(
    "fn, arity",
    [
        (functools.partial(torch.mul, other=3.0), 1),
        (torch.cos, 1),
        (torch.ops.aten.exp.default, 1),
        (torch.Tensor.sub, 2),
        (abs, 1),
    ],
    ids=["partial_of_torch_function", "torch_function", "aten_op", "tensor_method", "builtin"],
)
def test_non_function_callable_is_captured_in_one_graph(backend, fn, arity):
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    args = [torch.randn(3) for _ in range(arity)]
    torch.testing.assert_close(compiled(*args), fn(*args))
    assert len(backend.graphs) == 1
    assert frame_target(fn).function is _callable_call


def test_bound_tensor_method_is_a_method_call_on_a_graph_input(backend):
    t = torch.randn(3)
    compiled = dynamo_capture.optimize(t.div, backend=backend, fullgraph=True)
    x = torch.rand(3) + 1
    torch.testing.assert_close(compiled(x), t / x)
    assert len([n for n in backend.graphs[0].graph.nodes if n.op == "placeholder"]) == 2


def test_not_callable_is_a_clear_error():
    with pytest.raises(TypeError, match="not callable"):
        frame_target(3)


def _printing(x, k):
    y = x.sin() * k
    print("between graphs")
    return y.cos()


def test_partial_of_a_function_captures_that_function_and_splits_at_its_break(backend, capsys):
    partial = functools.partial(_printing, k=2.0)
    compiled = dynamo_capture.optimize(partial, backend=backend)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), partial(x))
    assert frame_target(partial).function is _printing
    assert len(backend.graphs) == 2  # before and after the print
    assert capsys.readouterr().out.count("between graphs") == 4


def test_partial_with_positional_arguments_binds_them_first(backend):
    partial = functools.partial(_mul, torch.full((3,), 2.0))
    compiled = dynamo_capture.optimize(partial, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(torch.ones(3)), torch.full((3,), 2.0))
    torch.testing.assert_close(compiled(y=torch.ones(3)), torch.full((3,), 2.0))
