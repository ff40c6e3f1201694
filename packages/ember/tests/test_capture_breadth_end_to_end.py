"""Constructs capture traces into one graph (activation checkpointing, functional_call,
sets from the inputs) compiled end to end: values and gradients equal eager's."""

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import ember


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.outer = torch.nn.Linear(4, 2)

    def forward(self, x):
        hidden = checkpoint(lambda t: self.inner(t).tanh() * t, x, use_reentrant=False)
        return self.outer(hidden)


def _clone(tensor):
    return tensor.detach().clone().requires_grad_(tensor.requires_grad)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_checkpointed_block_values_and_gradients_equal_eager(backend):
    torch.manual_seed(0)
    model = _Block()
    compiled = ember.compile(model, backend=backend, fullgraph=True)
    x = torch.randn(3, 4, requires_grad=True)
    eager_x, compiled_x = _clone(x), _clone(x)
    expected = model(eager_x)
    expected.sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    got = compiled(compiled_x)
    got.sum().backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(compiled_x.grad, eager_x.grad)
    for param, grad in zip(model.parameters(), eager_grads, strict=True):
        torch.testing.assert_close(param.grad, grad)


def test_functional_call_gradients_reach_the_given_parameters():
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 2)

    def loss(x, weight, bias):
        return torch.func.functional_call(linear, {"weight": weight, "bias": bias}, (x,)).sum()

    compiled = ember.compile(loss, backend="aot_eager", fullgraph=True)
    x = torch.randn(4, 3)
    weight, bias = torch.randn(2, 3, requires_grad=True), torch.randn(2, requires_grad=True)
    eager = [_clone(weight), _clone(bias)]
    ours = [_clone(weight), _clone(bias)]
    loss(x, *eager).backward()
    compiled(x, *ours).backward()
    for got, expected in zip(ours, eager, strict=True):
        torch.testing.assert_close(got.grad, expected.grad)
    assert linear.weight.grad is None


def test_set_argument_selects_the_graph():
    def fn(x, names):
        y = x.relu() if "relu" in names else x
        return y * 2 if "double" in names else y

    compiled = ember.compile(fn, backend="inductor")
    for names in ({"relu"}, {"relu", "double"}, {"relu"}, frozenset({"double"})):
        x = torch.randn(5)
        torch.testing.assert_close(compiled(x, names), fn(x, names))


def _return_in_range_loop(x, ws):
    for i in range(3):
        x = x * ws[i] + 1
        if x.sum() > 0:
            return x * i
    return x - 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_data_branch_in_loop_resumes_inside_loop_with_eager_gradients(backend):
    compiled = ember.compile(_return_in_range_loop, backend=backend)
    ws = [torch.full((3,), 0.5), torch.full((3,), 2.0), torch.full((3,), 3.0)]
    for shift in (-4.0, 5.0, -9.0):
        x = torch.zeros(3) + shift
        x.requires_grad_(True)
        eager_x, compiled_x = _clone(x), _clone(x)
        expected = _return_in_range_loop(eager_x, ws)
        expected.sum().backward()
        got = compiled(compiled_x, ws)
        got.sum().backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(compiled_x.grad, eager_x.grad)
