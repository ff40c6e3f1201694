"""Swapping a decomposition end to end: ember.compile(..., options={"decompositions": t}).

Skipped when the ember umbrella and its stages are not installed beside prim_decomp.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from prim_decomp import inductor_default

ember = pytest.importorskip("ember")
pytest.importorskip("aot_autograd")
pytest.importorskip("dynamo_capture")

aten = torch.ops.aten


def _tanh_gelu_table():
    calls = []
    mine = inductor_default.copy(name="tanh_gelu")

    @mine.register(aten.gelu.default, replace=True)
    def gelu_as_tanh(x, approximate="none"):
        calls.append(approximate)
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + torch.tanh(inner))

    return mine, calls


def test_swapped_gelu_runs_inside_ember_compile():
    mine, calls = _tanh_gelu_table()

    def f(x):
        return F.gelu(x) * 2

    x = torch.randn(32)
    compiled = ember.compile(f, backend="aot_eager", options={"decompositions": mine})
    torch.testing.assert_close(compiled(x), F.gelu(x, approximate="tanh") * 2)
    assert calls, "the swapped decomposition never ran"
    assert not torch.allclose(compiled(x), f(x), atol=1e-7, rtol=0)


def test_default_table_keeps_eager_results_in_training():
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 4)
    )
    x = torch.randn(5, 8)
    options = {"decompositions": inductor_default}
    compiled = ember.compile(model, backend="aot_eager", options=options)
    expected = model(x)
    expected.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    actual = compiled(x)
    actual.sum().backward()
    torch.testing.assert_close(actual, expected)
    for got, want in zip((p.grad for p in model.parameters()), grads, strict=True):
        torch.testing.assert_close(got, want)
