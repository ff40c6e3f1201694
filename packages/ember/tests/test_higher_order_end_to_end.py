"""torch.cond with branches over a module and torch.utils.checkpoint, through ember.compile's
backends: values and gradients (of the inputs and of the module's parameters) equal
eager's; a cond over another module compiles again rather than reuse the first."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import ember


def _cond_over_argument_module(module, x):
    return torch.cond(x.sum() > 0, lambda a: module(a).relu(), lambda a: module(a) * 2, (x,))


def _cond_of_a_method(module, x):
    return torch.cond(x.sum() > 0, module.forward, lambda a: a * 2, (x,))


def _checkpointed(module, x):
    y = checkpoint(lambda a: module(a).tanh() * a, x, use_reentrant=False)
    return y.sum(-1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize(
    "fn", [_cond_over_argument_module, _cond_of_a_method, _checkpointed], ids=lambda f: f.__name__
)
def test_module_in_higher_order_call_gradients_match_eager(backend, fn):
    torch.manual_seed(0)
    modules = [nn.Linear(4, 4), nn.Linear(4, 4)]
    compiled = ember.compile(fn, backend=backend)
    for module in (*modules, modules[0]):  # another module: its own values, not the first's
        x = torch.randn(3, 4).abs().requires_grad_()
        expected = fn(module, x)
        expected_grads = torch.autograd.grad(expected.sum(), [x, *module.parameters()])
        got = compiled(module, x)
        got_grads = torch.autograd.grad(got.sum(), [x, *module.parameters()])
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(got_grads, expected_grads)
