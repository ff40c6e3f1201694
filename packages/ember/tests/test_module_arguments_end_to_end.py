"""A module passed as an argument, a new instance each call, compiled once with inductor:
guarded on its structure, its parameters and buffers graph inputs read at call time."""

import pytest
import torch

import ember
from ember.api import compiled_callable_of


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)
        self.register_buffer("shift", torch.randn(width))

    def forward(self, x):
        return self.norm(torch.relu(self.lin(x))) + self.shift


def step(model, x):
    return model(x).sum(-1)


def _block(seed: int, width: int = 8) -> Block:
    torch.manual_seed(seed)
    return Block(width)


@pytest.mark.slow
def test_new_module_each_call_runs_one_inductor_graph_with_its_weights():
    compiled = ember.compile(step, backend="inductor")
    first, second = _block(0), _block(1)
    for model in [first, second, first, _block(2), _block(3)]:
        x = torch.randn(3, 8)
        torch.testing.assert_close(compiled(model, x), step(model, x))
    assert len(compiled_callable_of(compiled).entries) == 1
    wide = _block(4, width=16)  # another structure: a compile of its own
    x = torch.randn(3, 16)
    torch.testing.assert_close(compiled(wide, x), step(wide, x))
    assert len(compiled_callable_of(compiled).entries) == 2


@pytest.mark.slow
def test_gradients_reach_each_module_parameters():
    compiled = ember.compile(step, backend="inductor")
    for seed in range(3):
        model, reference = _block(seed), _block(seed)
        x = torch.randn(3, 8)
        compiled(model, x).sum().backward()
        step(reference, x).sum().backward()
        torch.testing.assert_close(model.lin.weight.grad, reference.lin.weight.grad)
        torch.testing.assert_close(model.norm.bias.grad, reference.norm.bias.grad)
    assert len(compiled_callable_of(compiled).entries) == 1
