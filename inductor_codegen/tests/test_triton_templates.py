"""Matmul templates (mm, addmm, bmm) with fused epilogues, against eager.

On the CPU the kernels run under the Triton interpreter (TRITON_INTERPRET=1)
at small sizes; the "template" mode runs the template, "aten" the ATen call
followed by the epilogue kernel, so both ways are checked. On a GPU the
"auto" mode also times them and caches the choice.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import trace

from inductor_codegen import compile_graph
from inductor_codegen.errors import InductorError

pytest.importorskip("triton")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def run(fn, *args, mode="template", cache=None):
    gm = trace(fn, *args)
    options = {"device_codegen": "triton", "matmul_templates": mode, "max_autotune": mode == "auto"}
    if cache is not None:
        options["cache_dir"] = str(cache)
    compiled = compile_graph(gm, list(args), options=options)
    return compiled, compiled(*args)


def check(fn, *args, modes=("template", "aten"), fused=True, **tolerance):
    expected = fn(*args)
    for mode in modes:
        compiled, actual = run(fn, *args, mode=mode)
        torch.testing.assert_close(actual, expected, **tolerance)
        templates = compiled.artifact("templates")
        assert "triton_template_" in templates
        assert ("no epilogue" not in templates) == fused, templates
    return compiled


def randn(*size, dtype=torch.float32):
    return torch.randn(*size, device=DEVICE, dtype=dtype)


# ---------------------------------------------------------------- plain products


def test_mm_alone():
    check(lambda a, b: a @ b, randn(40, 48), randn(48, 24), fused=False)


def test_mm_transposed_operands_and_ragged_k():
    a, b = randn(37, 50), randn(29, 50)
    check(lambda a, b: a @ b.t(), a, b, fused=False)
    check(lambda a, b: a.t() @ b, randn(50, 37), randn(50, 29), fused=False)


def test_tiny_product_smaller_than_a_block():
    check(lambda a, b: a @ b, randn(3, 5), randn(5, 7), fused=False)


def test_addmm_scales_and_broadcasts_the_bias():
    a, b = randn(33, 40), randn(40, 18)
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), randn(18), a, b, fused=False)
    check(lambda c, a, b: torch.addmm(c, a, b), randn(33, 1), a, b, fused=False)
    check(lambda c, a, b: torch.addmm(c, a, b), randn(33, 18), a, b, fused=False)


def test_bmm_over_batches():
    check(lambda a, b: torch.bmm(a, b), randn(3, 20, 32), randn(3, 32, 24), fused=False)
    check(lambda a, b: a @ b.transpose(1, 2), randn(2, 17, 16), randn(2, 19, 16), fused=False)


# ---------------------------------------------------------------- fused epilogues


@pytest.mark.parametrize(
    "activation",
    [F.relu, F.silu, lambda y: F.gelu(y, approximate="tanh"), F.gelu, torch.sigmoid],
    ids=["relu", "silu", "gelu_tanh", "gelu_erf", "sigmoid"],
)
def test_linear_with_activation(activation):
    x, w, b = randn(40, 48), randn(24, 48), randn(24)
    check(lambda x, w, b: activation(F.linear(x, w, b)), x, w, b)


def test_residual_add_and_scale_read_other_inputs():
    x, w, r = randn(40, 32), randn(32, 32), randn(40, 32)
    check(lambda x, w, r: (x @ w) * 0.5 + r, x, w, r)


def test_linear_on_3d_input_fuses_through_views():
    x, w, b = randn(2, 20, 32), randn(48, 32), randn(48)
    check(lambda x, w, b: F.relu(F.linear(x, w, b)) * 2, x, w, b)


def test_bmm_epilogue():
    a, b, c = randn(3, 16, 32), randn(3, 32, 24), randn(3, 16, 24)
    check(lambda a, b, c: torch.tanh(torch.bmm(a, b)) + c, a, b, c)


def test_epilogue_with_two_outputs():
    x, w = randn(24, 32), randn(32, 40)

    def fn(x, w):
        y = x @ w
        return F.relu(y), torch.sigmoid(y)

    check(fn, x, w)


def test_bfloat16_rounds_the_product_like_aten():
    x, w, b = (randn(64, 64, dtype=torch.bfloat16), randn(32, 64, dtype=torch.bfloat16),
               randn(32, dtype=torch.bfloat16))  # fmt: skip
    fn = lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh")  # noqa: E731
    expected = fn(x.double(), w.double(), b.double())
    for mode in ("template", "aten"):
        _, actual = run(fn, x, w, b, mode=mode)
        assert actual.dtype == torch.bfloat16
        error = (actual.double() - expected).norm() / expected.norm()
        assert error < 1e-2, (mode, float(error))


def test_product_read_twice_is_not_fused_but_stays_correct():
    x, w = randn(16, 32), randn(32, 16)

    def fn(x, w):
        y = x @ w
        return y.relu(), y.sum(0)

    expected = fn(x, w)
    compiled, actual = run(fn, x, w)
    torch.testing.assert_close(actual, expected)
    assert "no epilogue" in compiled.artifact("templates")


def test_templates_are_off_without_max_autotune():
    x, w = randn(16, 32), randn(32, 16)
    gm = trace(lambda x, w: (x @ w).relu(), x, w)
    compiled = compile_graph(gm, [x, w], options={"device_codegen": "triton"})
    with pytest.raises(KeyError):
        compiled.artifact("templates")
    with pytest.raises(InductorError, match="matmul_templates"):
        compile_graph(gm, [x, w], options={"device_codegen": "triton", "matmul_templates": "x"})


def test_integer_products_stay_aten_calls():
    if DEVICE == "cuda":
        pytest.skip("eager has no integer matmul on CUDA")
    a, b = torch.randint(-5, 5, (8, 8)), torch.randint(-5, 5, (8, 8))
    compiled, actual = run(lambda a, b: (a @ b) + 1, a, b)
    torch.testing.assert_close(actual, a @ b + 1)
    assert "triton_template_" not in compiled.artifact("templates")


@pytest.mark.skipif(DEVICE != "cuda", reason="times kernels on a GPU")
def test_autotune_keeps_the_faster_and_caches_the_choice(tmp_path, capfd):
    x, w, b = (randn(512, 256, dtype=torch.bfloat16), randn(384, 256, dtype=torch.bfloat16),
               randn(384, dtype=torch.bfloat16))  # fmt: skip
    fn = lambda x, w, b: F.gelu(F.linear(x, w, b))  # noqa: E731
    _, actual = run(fn, x, w, b, mode="auto", cache=tmp_path)
    torch.testing.assert_close(actual, fn(x, w, b), rtol=2e-2, atol=2e-2)
    assert "autotune triton_template_addmm_0 [1/" in capfd.readouterr().err
    from guards.cache_root import load_record

    records = (tmp_path / "triton" / "autotune").glob("*.json")
    stored = [load_record(p) for p in records]  # checksummed records
    assert any(s and "config" in s for s in stored)
    run(fn, x, w, b, mode="auto", cache=tmp_path)  # the second compile reads the choice
    assert "autotune triton_template" not in capfd.readouterr().err
