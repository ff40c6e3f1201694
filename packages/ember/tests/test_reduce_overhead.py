"""mode="reduce-overhead" (CUDA graphs) gives eager's results, also where outputs outlive a call.

The GPU tests skip without CUDA; on the CPU the mode runs the compiled graphs plainly.
"""

from __future__ import annotations

import pytest
import torch

import ember

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(
        device
    )


def _two_forwards_then_backward(model, xs):
    losses = [model(x).square().mean() for x in xs]  # both forwards before any backward
    sum(losses).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return [loss.detach() for loss in losses], grads


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_saved_activations_survive_a_second_forward_before_backward(device):
    eager = _model(device)
    compiled_model = _model(device)
    compiled = ember.compile(compiled_model, mode="reduce-overhead")
    for step in range(3):
        xs = [torch.randn(8, 16, device=device) + step, torch.randn(8, 16, device=device)]
        expected_losses, expected_grads = _two_forwards_then_backward(eager, xs)
        losses, grads = _two_forwards_then_backward_compiled(compiled, compiled_model, xs)
        torch.testing.assert_close(losses, expected_losses)
        torch.testing.assert_close(grads, expected_grads)


def _two_forwards_then_backward_compiled(compiled, model, xs):
    losses = [compiled(x).square().mean() for x in xs]
    sum(losses).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return [loss.detach() for loss in losses], grads


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_outputs_kept_across_calls_keep_their_values(device):
    model = _model(device).eval()
    compiled = ember.compile(model, mode="reduce-overhead")
    xs = [torch.randn(8, 16, device=device) for _ in range(5)]
    with torch.no_grad():
        kept = [compiled(x) for x in xs]
        for x, out in zip(xs, kept):
            torch.testing.assert_close(out, model(x))


@gpu
def test_a_cpu_scalar_input_under_reduce_overhead():
    def f(x, scale):
        return (x * scale).sin()

    compiled = ember.compile(f, mode="reduce-overhead")
    x = torch.randn(64, device="cuda")
    for value in (2.0, 3.0, 4.0):
        scale = torch.tensor(value)  # a CPU 0-dim tensor beside a CUDA tensor, as eager allows
        torch.testing.assert_close(compiled(x, scale), f(x, scale))
