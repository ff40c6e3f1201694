"""Programs over tensors with no elements, forward and backward, match eager (and never crash)."""

from __future__ import annotations

import pytest
import torch

import ember


def _scatter_of_an_empty_selection(x0, x1):
    v1 = x1.max(-2, keepdim=False).values
    v1.diagonal().add_(1)
    v2 = v1[v1.shape[0] - 1]
    v4 = torch.where(v2 > 0, v2, v2)
    return (v4.index_select(0, torch.tensor([], dtype=torch.long)),)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_backward_of_a_program_over_empty_tensors_matches_eager(backend):
    def inputs():
        g = torch.Generator().manual_seed(0)
        x0 = torch.randn(2, 2, 0, generator=g, dtype=torch.float64).permute(2, 1, 0)
        x1 = torch.randn(2, 2, 0, generator=g, dtype=torch.float64)
        return [x0.detach().requires_grad_(), x1.detach().requires_grad_()]

    expected_inputs, actual_inputs = inputs(), inputs()
    expected = _scatter_of_an_empty_selection(*expected_inputs)
    actual = ember.compile(_scatter_of_an_empty_selection, backend=backend)(*actual_inputs)
    torch.testing.assert_close(actual, expected)
    sum(t.sum() for t in expected).backward()
    sum(t.sum() for t in actual).backward()
    for got, want in zip(actual_inputs, expected_inputs):
        assert (got.grad is None) == (want.grad is None)
        if want.grad is not None:
            torch.testing.assert_close(got.grad, want.grad)
