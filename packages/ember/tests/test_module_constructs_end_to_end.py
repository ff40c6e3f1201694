"""Module-level constructs through ember.compile and the tracing backends: hooks of a
compiled module (their frames compiled one by one, added and removed later), a full
backward hook's gradients, context managers entered by hand, modules made in the
frame, functools.partialmethod and `.item()`: values (and gradients) equal eager's."""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch
from torch import nn

import ember

BACKENDS = ["eager", "aot_eager", "inductor"]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, scale=1.0):
        return self.linear(x).tanh() * scale


class CountingGraphs:
    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def _x(grad=False):
    torch.manual_seed(1)
    return torch.randn(3, 4, requires_grad=grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hooks_of_a_compiled_module_replace_inputs_and_outputs(backend):
    torch.manual_seed(0)
    block = Block()
    block.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    block.register_forward_hook(
        lambda module, args, kwargs, out: out + kwargs.get("scale", 0.0), with_kwargs=True
    )
    compiled = ember.compile(block, backend=backend)
    x = _x()
    for scale in (1.0, 3.0):
        torch.testing.assert_close(compiled(x, scale=scale), block(x, scale=scale))


def test_hooks_added_and_removed_after_compiling_are_never_stale():
    torch.manual_seed(0)
    block = Block()
    block.register_forward_hook(lambda module, args, out: None)
    backend = CountingGraphs()
    compiled = ember.compile(block, backend=backend)
    x = _x()
    torch.testing.assert_close(compiled(x), block(x))
    handle = block.register_forward_hook(lambda module, args, out: out * 10)
    torch.testing.assert_close(compiled(x), block(x))
    pre = block.register_forward_pre_hook(lambda module, args: (args[0] - 1,))
    torch.testing.assert_close(compiled(x), block(x))
    handle.remove()
    pre.remove()
    graphs = backend.graphs
    torch.testing.assert_close(compiled(x), block(x))
    assert backend.graphs == graphs  # the forward's frame is kept; nothing recompiles


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_full_backward_hook_of_a_compiled_module_changes_gradients(backend):
    torch.manual_seed(0)
    block = Block()
    block.register_full_backward_hook(lambda module, grad_in, grad_out: (grad_in[0] * 3,))
    compiled = ember.compile(block, backend=backend)
    x = _x(grad=True)
    block(x).sum().backward()
    expected, weight_grad = x.grad, block.linear.weight.grad
    x.grad = None
    block.zero_grad()
    compiled(x).sum().backward()
    torch.testing.assert_close(x.grad, expected)
    torch.testing.assert_close(block.linear.weight.grad, weight_grad)


@contextlib.contextmanager
def _grad_off():
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        yield "off"
    finally:
        torch.set_grad_enabled(previous)


def _generator_context_by_hand(x):
    cm = _grad_off()
    label = cm.__enter__()
    y = x * 2
    cm.__exit__(None, None, None)
    return y, x * 3, label


def _no_grad_by_hand(x):
    cm = torch.no_grad()
    cm.__enter__()
    y = x * 2
    cm.__exit__(None, None, None)
    return y, x * 3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_generator_context_by_hand, _no_grad_by_hand])
def test_context_entered_by_hand_leaves_grad_mode_as_eager(fn, backend):
    compiled = ember.compile(fn, backend=backend)
    x = _x(grad=True)
    expected = fn(x)
    got = compiled(x)
    assert torch.is_grad_enabled()
    for a, b in zip(got, expected, strict=True):
        if isinstance(b, torch.Tensor):
            torch.testing.assert_close(a, b)
            assert a.requires_grad == b.requires_grad
        else:
            assert a == b


def _linear_made_in_frame(x):
    return nn.Linear(4, 2)(x).relu() + nn.CrossEntropyLoss()(x, torch.tensor([0, 1, 3]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_made_in_frame_matches_eager_without_recompiling(backend):
    counter = CountingGraphs()
    compiled = ember.compile(
        _linear_made_in_frame, backend=counter if backend == "eager" else backend
    )
    for _ in range(3):
        x = _x()
        torch.manual_seed(0)
        expected = _linear_made_in_frame(x)
        torch.manual_seed(0)
        torch.testing.assert_close(compiled(x), expected)
    if backend == "eager":
        assert counter.graphs == 1  # the part after the parameters' creation, once


class Scaler:
    def scale(self, x, factor, shift=0.0):
        return x * factor + shift

    double = functools.partialmethod(scale, 2, shift=1.0)


SCALER = Scaler()


def _partialmethod_and_item(x):
    y = SCALER.double(x)
    return y * y.sum().item()


@pytest.mark.parametrize("backend", BACKENDS)
def test_partialmethod_and_item_match_eager(backend):
    compiled = ember.compile(_partialmethod_and_item, backend=backend)
    for _ in range(3):
        x = torch.randn(3, 4)
        torch.testing.assert_close(compiled(x), _partialmethod_and_item(x))
