"""F.batch_norm on CPU keeps eager's output layout: row-major below 4 dims.

Eager's kernel lays its output out in the input's suggested memory format, so a
transposed 2-D or 3-D input gives a row-major output, in training (running stats
updated in place) and outside it. The meta function keeps the input's strides.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import ember

SHAPES = {"2d": (5, 3), "3d": (3, 5, 7), "3d_size_1_batch": (1, 2, 2)}


def _batch_norm(x, mean, var):
    return F.batch_norm(x, mean, var, training=True, momentum=0.1) * 2, mean, var


def _batch_norm_eval(x, mean, var):
    return F.batch_norm(x, mean, var, training=False) + 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("fn", [_batch_norm, _batch_norm_eval], ids=["training", "eval"])
def test_batch_norm_of_a_transposed_input_keeps_eager_strides(backend, shape, fn):
    def inputs():
        x = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)
        x = (x.sin() * 3).transpose(-1, -2)
        channels = x.shape[1]
        return x, torch.zeros(channels), torch.ones(channels)

    expected = fn(*inputs())
    compiled_inputs = inputs()
    actual = ember.compile(fn, backend=backend)(*compiled_inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want)
        assert got.stride() == want.stride()
