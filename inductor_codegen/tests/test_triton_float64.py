"""float64 in Triton kernels: Welford accumulators and square roots keep float64.

Triton rejects a loop-carried float32 accumulator that a float64 value updates, and
`tl.sqrt_rn` of a float64; these check the generated source and run it (under
TRITON_INTERPRET=1 on the CPU, which checks values but not those types).
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from inductor_codegen import compile_graph
from inductor_codegen.codegen.ops import OPS

pytest.importorskip("triton")
pytestmark = pytest.mark.triton_interpret

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _compile(fn, x, tmp_path):
    gm = make_fx(fn)(x)  # aten.var / aten.std kept: the Welford lowering
    options = {"device_codegen": "triton", "cache_dir": str(tmp_path)}
    return compile_graph(gm, [x], options=options)


@pytest.mark.parametrize("rows", [3, 5000])
def test_float64_welford_accumulates_in_float64(rows, tmp_path):
    def fn(x):
        return x.var(0, correction=0), torch.std(x, 1)

    x = torch.randn(rows, 7, dtype=torch.float64, device=DEVICE)
    compiled = _compile(fn, x, tmp_path)
    source = compiled.artifact("codegen")
    assert "welford" in source
    assert "tl.zeros([XBLOCK, R0BLOCK], tl.float32)" not in source
    torch.testing.assert_close(compiled(x), fn(x))


def test_float32_welford_keeps_float32_accumulators(tmp_path):
    x = torch.randn(6, 5, device=DEVICE)
    compiled = _compile(lambda x: x.var(0), x, tmp_path)
    assert "tl.float32)" in compiled.artifact("codegen")
    torch.testing.assert_close(compiled(x), x.var(0))


def test_sqrt_of_float64_is_libdevices_and_of_float32_rounds_to_nearest():
    spell = OPS["sqrt"].triton
    assert spell(["a"], [torch.float64], torch.float64) == "libdevice.sqrt(a)"
    assert spell(["a"], [torch.float32], torch.float32) == "tl.sqrt_rn(a)"


def test_float64_sqrt_kernel_matches_eager(tmp_path):
    x = torch.rand(33, dtype=torch.float64, device=DEVICE)
    compiled = _compile(lambda x: (x * 2).sqrt() + x**0.5, x, tmp_path)
    assert "tl.sqrt_rn" not in compiled.artifact("codegen")
    torch.testing.assert_close(compiled(x), (x * 2).sqrt() + x**0.5)


@pytest.mark.parametrize("exponent", [-1.5, 2.5, -0.25])
def test_float64_pow_of_fractional_exponent_compiles_for_cuda(exponent, tmp_path):
    """libdevice.pow has no (float64, float32) form: the literal exponent is a float64."""
    from cuda_target import compile_for_cuda

    def fn(x):
        return x**exponent

    x = torch.rand(5, 3, dtype=torch.float64, device=DEVICE) + 0.5
    compiled = _compile(fn, x, tmp_path)
    torch.testing.assert_close(compiled(x), fn(x))
    compile_for_cuda(compiled.artifact("codegen"), pointer="*fp64")
