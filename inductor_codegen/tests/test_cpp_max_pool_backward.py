"""Max pooling's backward on the C++ path is a scatter per plane (lowering/pooling.py):
each plane of the input gradient zeroed, then each output's gradient added at its
argmax, outputs in order. That is eager's CPU kernel, so the results are equal bit for
bit, ties (an input the argmax of several overlapping windows: its gradients add in
eager's order) and non-finite gradients included, in both memory formats.
"""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from graph_helpers import compile_fn

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

aten = torch.ops.aten


def _backward(grad, x, indices):
    return aten.max_pool2d_with_indices_backward(
        grad, x, [3, 3], [2, 2], [1, 1], [1, 1], False, indices
    )


def _tied_inputs(size, dtype=torch.float32, channels_last=False):
    """Inputs of few distinct values (windows tie; overlapping windows pick one input) and
    gradients of mixed magnitudes (the order of their additions shows in the sum)."""
    x = torch.randint(0, 3, size).to(dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    _, indices = aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])
    grad = torch.randn(indices.shape, dtype=dtype) * 10.0 ** torch.randint(-6, 6, indices.shape)
    if channels_last:
        grad = grad.to(memory_format=torch.channels_last)
    return grad, x, indices


def _assert_equal_to_eager(grad, x, indices):
    compiled, _ = compile_fn(_backward, grad, x, indices)
    assert "+=" in compiled.artifact("codegen")  # the scatter, not the gather
    expected = _backward(grad, x, indices)
    actual = compiled(grad, x, indices)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    return compiled


def test_max_pool_backward_adds_tied_gradients_in_eager_order():
    grad, x, indices = _tied_inputs((2, 8, 15, 16))
    assert len(indices.unique()) < indices.numel()  # several windows pick one input
    compiled = _assert_equal_to_eager(grad, x, indices)
    assert compiled.artifact("wrapper").count("torch.empty_strided") == 1


def test_max_pool_backward_channels_last_keeps_eager_layout_and_order():
    compiled = _assert_equal_to_eager(*_tied_inputs((2, 16, 14, 13), channels_last=True))
    # the channel loop scatters (an argmax per channel): left to gcc without ivdep, it
    # stays scalar, not AVX-512 scatters (microcoded on AMD, 10x slower)
    code = compiled.artifact("codegen")
    assert not re.search(r"ivdep\n\s*for \(int64_t u3", code), code


def test_max_pool_backward_of_unbatched_float64_input():
    _assert_equal_to_eager(*_tied_inputs((4, 11, 12), torch.float64))


def test_max_pool_backward_non_finite_gradients():
    grad, x, indices = _tied_inputs((1, 4, 12, 12))
    grad[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    grad[0, 1, 2, 2] = -0.0
    _assert_equal_to_eager(grad, x, indices)


def test_max_pool_backward_skips_index_minus_one_as_eager():
    grad, x, indices = _tied_inputs((1, 2, 8, 8))
    indices[0, 0, 1, 1] = -1
    _assert_equal_to_eager(grad, x, indices)


def test_max_pool_backward_after_relu_feeds_batch_norm_backward():
    """The block of a ResNet stem: the scatter's result read by the ReLU's backward."""

    def block(grad, x, indices, mask):
        return torch.where(mask, _backward(grad, x, indices), 0.0).sum(dim=(0, 2, 3))

    grad, x, indices = _tied_inputs((2, 8, 18, 18))
    mask = torch.rand(x.shape) > 0.3
    compiled, _ = compile_fn(block, grad, x, indices, mask)
    torch.testing.assert_close(compiled(grad, x, indices, mask), block(grad, x, indices, mask))


def test_max_pool_backward_of_disjoint_windows_stays_a_fused_gather():
    """2x2 windows, stride 2: each input position has one candidate window, one load,
    computed inside the kernel that reads it (no buffer of the gradient)."""

    def block(grad, x, indices, mask):
        gradient = aten.max_pool2d_with_indices_backward(
            grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, indices
        )
        return torch.where(mask, gradient, 0.0)

    x = torch.randint(0, 3, (2, 8, 16, 16)).float()
    _, indices = aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
    grad = torch.randn(indices.shape)
    mask = torch.rand(x.shape) > 0.3
    compiled, _ = compile_fn(block, grad, x, indices, mask)
    assert "+=" not in compiled.artifact("codegen")
    assert compiled.kernel_count == 1
    expected = block(grad, x, indices, mask)
    torch.testing.assert_close(compiled(grad, x, indices, mask), expected, rtol=0, atol=0)
