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


def _decode_step(cache, count, pos, k):
    cache.index_copy_(1, pos, k)  # a static cache's update, written in place by the graph
    count.add_(1)
    return (cache.sum(1) * count).cos()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_static_cache_written_in_place_under_reduce_overhead_matches_eager(device):
    def fresh():
        return torch.zeros(2, 8, 4, device=device), torch.zeros(1, device=device)

    cache, count = fresh()
    ref_cache, ref_count = fresh()
    compiled = ember.compile(_decode_step, mode="reduce-overhead")
    for i in range(6):
        pos = torch.tensor([i], device=device)
        k = torch.randn(2, 1, 4, device=device)
        expected = _decode_step(ref_cache, ref_count, pos, k)
        torch.testing.assert_close(compiled(cache, count, pos, k), expected)
        torch.testing.assert_close(cache, ref_cache)
        torch.testing.assert_close(count, ref_count)
    other_cache, other_count = fresh()  # another cache object: its own recording
    pos, k = torch.tensor([0], device=device), torch.randn(2, 1, 4, device=device)
    torch.testing.assert_close(
        compiled(other_cache, other_count, pos, k), _decode_step(*fresh(), pos, k)
    )
    torch.testing.assert_close(cache, ref_cache)
