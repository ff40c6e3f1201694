"""Floats computed from symbolic sizes, through the whole stack (aot_eager, inductor).

`n / 2`, `float(n)`, `x.size(-1) ** 0.5`: capture keeps them symbolic (SymFloat
nodes); a backend that cannot take one gets it specialized while the sizes stay
symbolic. Each program runs at 4 sizes with dynamic=True: results and grads equal
eager's, and the compile count is the one the program's floats allow.
"""

from __future__ import annotations

import math

import pytest
import torch

import ember
from ember.api import compiled_callable_of

LENGTHS = [3, 5, 8, 11]


def _half_filled(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return torch.full((n,), n / 2) + x.sum(1)


def _mean_by_float(x: torch.Tensor) -> torch.Tensor:
    return x / float(x.shape[0]) + x.mean() * (x.shape[1] / x.shape[0])


def _positions(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return (torch.arange(n) * (1.0 / n)).unsqueeze(1) * x


def _attention(q: torch.Tensor) -> torch.Tensor:
    scores = (q @ q.transpose(-1, -2)) / (q.size(-1) ** 0.5)
    return scores.softmax(-1) @ q


def _sqrt_scaled(q: torch.Tensor) -> torch.Tensor:
    return q * math.sqrt(q.shape[-1]) + q.size(-1) ** -0.5


SYMBOLIC_FLOATS = [_half_filled, _mean_by_float, _positions]
HEAD_DIM_FLOATS = [_attention, _sqrt_scaled]  # floats of the fixed last dim only


def _check(fn, backend: str, shape_of, *, grads: bool = True) -> int:
    """Results (and grads) equal eager's at every length; returns the number of compiles."""
    torch.manual_seed(0)
    compiled = ember.compile(fn, backend=backend, dynamic=True)
    for length in LENGTHS:
        x = torch.randn(*shape_of(length), requires_grad=grads)
        got, expected = compiled(x), fn(x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        if grads:
            (grad_got,) = torch.autograd.grad(got.sin().sum(), x)
            (grad_expected,) = torch.autograd.grad(expected.sin().sum(), x)
            torch.testing.assert_close(grad_got, grad_expected, rtol=1e-4, atol=1e-4)
    return len(compiled_callable_of(compiled).entries)


def _rows(n: int) -> tuple[int, int]:
    return (n, n + 2)


def _heads(n: int) -> tuple[int, int, int]:
    return (2, n, 8)


@pytest.mark.parametrize("grads", [True, False], ids=["train", "inference"])
@pytest.mark.parametrize("fn", SYMBOLIC_FLOATS, ids=lambda fn: fn.__name__.strip("_"))
def test_symbolic_floats_compile_once_aot_eager(fn, grads):
    assert _check(fn, "aot_eager", _rows, grads=grads) == 1


@pytest.mark.parametrize("fn", SYMBOLIC_FLOATS, ids=lambda fn: fn.__name__.strip("_"))
def test_symbolic_floats_compile_once_inductor_inference(fn):
    assert _check(fn, "inductor", _rows, grads=False) == 1


@pytest.mark.parametrize("fn", SYMBOLIC_FLOATS, ids=lambda fn: fn.__name__.strip("_"))
def test_symbolic_floats_inductor_training_stays_correct(fn):
    # NOTE: inductor's backward lowers a SymFloat graph input as an OpaqueInput that
    # pointwise scalars cannot take yet, so the floats there specialize (one compile per
    # length); results and grads must equal eager's either way.
    assert 1 <= _check(fn, "inductor", _rows) <= len(LENGTHS)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", HEAD_DIM_FLOATS, ids=lambda fn: fn.__name__.strip("_"))
def test_floats_of_a_fixed_dim_keep_the_other_dims_dynamic(fn, backend):
    assert _check(fn, backend, _heads) == 1


def test_llama_over_four_sequence_lengths_compiles_once():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
        intermediate_size=128, vocab_size=100, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    compiled = ember.compile(model, backend="aot_eager", dynamic=True)
    with torch.no_grad():
        for length in LENGTHS:
            ids = torch.randint(0, 100, (2, length))
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits)
    runner = compiled_callable_of(compiled)
    assert len(runner.entries) == 1
    assert not runner.graph_breaks
