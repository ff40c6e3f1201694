"""In-place shape and stride changes of an input tensor run eagerly, as a graph break."""

from __future__ import annotations

import pytest
import torch

import ember


def _changes_inputs(x0, x1):
    x1.unsqueeze_(0)
    y = x1 * 2
    x1.transpose_(0, 2)
    x0.squeeze_()
    return x0 + 1, y


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_input_metadata_mutation_changes_the_callers_tensor_like_eager(backend):
    compiled = ember.compile(_changes_inputs, backend=backend)
    for shape in [(2, 3), (4, 5)]:
        eager_args = [torch.randn(1, shape[1]), torch.randn(*shape)]
        compiled_args = [t.clone() for t in eager_args]
        expected = _changes_inputs(*eager_args)
        actual = compiled(*compiled_args)
        for got, want in zip(actual, expected):
            torch.testing.assert_close(got, want)
        for got, want in zip(compiled_args, eager_args):
            assert got.shape == want.shape and got.stride() == want.stride()
            torch.testing.assert_close(got, want)
