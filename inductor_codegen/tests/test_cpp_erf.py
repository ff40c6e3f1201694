"""erf in C++ kernels: float32 through the inline vectorizable `ember_erf<float>`.

Over every float it is within 1.08 ulp of erf (1.32 ulp without fused multiply-add);
the sweep below takes every 128th float of [0, 4.5] (past it erf rounds to 1) and both
signs, with the values where the formula switches, tiny and special values, each in a
tensor long enough that the vectorized loop computes it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

aot_autograd = pytest.importorskip("aot_autograd")
prim_decomp = pytest.importorskip("prim_decomp")

MAX_ULPS = 1.5
SPECIAL = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e-45, -1e-45, 1e-38]
SPECIAL += [1e30, -1e30, 3.4e38, -3.4e38, 4.0, -4.0, 3.9192059, 1.0, -1.0, 5.0]


def _compiled(fn):
    from inductor_codegen import compile_graph

    return aot_autograd.aot_function(
        fn,
        fw_compiler=lambda gm, ex: compile_graph(gm, ex),
        bw_compiler=lambda gm, ex: compile_graph(gm, ex),
        decompositions=prim_decomp.inductor_default,
    )


def _float_sweep(stride: int = 128) -> torch.Tensor:
    """Every `stride`-th float of [0, 4.5] by bit pattern, around 1 and 4 densely, both signs."""
    end = torch.tensor(4.5, dtype=torch.float32).view(torch.int32).item()
    bits = torch.arange(0, end, stride, dtype=torch.int32)
    for seam in (1.0, 4.0):
        center = torch.tensor(seam, dtype=torch.float32).view(torch.int32).item()
        bits = torch.cat([bits, torch.arange(center - 4096, center + 4096, dtype=torch.int32)])
    positive = bits.view(torch.float32)
    return torch.cat([positive, -positive])


def _ulps(actual: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """Distance from the float64 value in float32 ulps of the exact value's binade."""
    _, exponent = torch.frexp(exact)
    spacing = torch.ldexp(torch.ones_like(exact), (exponent - 24).clamp(min=-149))
    return (actual.double() - exact).abs() / spacing


def test_float_erf_is_within_ulps_of_erf_over_a_dense_sweep():
    x = _float_sweep()
    got = _compiled(torch.special.erf)(x)
    ulps = _ulps(got, torch.special.erf(x.double()))
    worst = ulps.argmax()
    assert ulps.max().item() <= MAX_ULPS, f"{ulps.max().item():.3f} ulp at x={x[worst].item()!r}"
    torch.testing.assert_close(got, torch.special.erf(x))


def test_float_erf_special_values_match_eager_in_every_vector_lane():
    # Each special value at every position of a 64-element block, so every lane of the
    # vectorized loop (and the scalar remainder, at 61 elements) sees it.
    special = torch.tensor(SPECIAL)
    erf = _compiled(torch.special.erf)
    for n in (64, 61):
        for shift in range(n):
            x = torch.linspace(-3, 3, n)
            x[shift] = special[shift % len(SPECIAL)]
            got, expected = erf(x), torch.special.erf(x)
            torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=2e-7)
            assert torch.equal(torch.signbit(got), torch.signbit(expected))


def test_float_erf_is_odd_and_saturates_to_exactly_one():
    x = _float_sweep(stride=1024)
    erf = _compiled(torch.special.erf)
    assert torch.equal(erf(-x), -erf(x))
    big = torch.tensor([3.9192059, 4.0, 4.5, 10.0, 1e10, 3.4e38]).repeat(8)
    assert torch.equal(erf(big), torch.ones_like(big))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_erf_of_other_float_types_matches_eager(dtype):
    x = torch.linspace(-5, 5, 100_001, dtype=torch.float64).to(dtype)
    torch.testing.assert_close(_compiled(torch.special.erf)(x), torch.special.erf(x))


@pytest.mark.parametrize(
    "shape",
    [(4, 128, 3072), (2, 64, 3072)],  # BERT-base's FFN activations; GPT-2's (4 x 768)
    ids=["bert_ffn", "gpt2_mlp"],
)
def test_erf_gelu_forward_and_backward_match_eager_on_transformer_activations(shape):
    torch.manual_seed(0)
    x = torch.randn(shape) * 2
    bias = torch.randn(shape[-1]) * 0.1
    grad_out = torch.randn(shape)

    def fn(x, bias):
        return F.gelu(x + bias)

    def run(f, dtype):
        inputs = [t.to(dtype).requires_grad_() for t in (x, bias)]
        out = f(*inputs)
        return (out, *torch.autograd.grad(out, inputs, grad_out.to(dtype)))

    got, expected, exact = (
        run(_compiled(fn), torch.float32),
        run(fn, torch.float32),
        run(fn, torch.float64),
    )
    # Elementwise results (the output, x's gradient) match eager's.
    torch.testing.assert_close(got[:2], expected[:2])
    # The bias gradient sums 128 to 512 rows in another order than eager (erf is not what
    # differs there): near the float64 result within that summation's rounding.
    torch.testing.assert_close(got[2].double(), exact[2], rtol=0, atol=1e-4)
