"""Launch heuristics, the kernel cache, and small real models through the Triton generator.

Heuristic tests need no Triton; the model tests run under the interpreter on
the CPU (or on CUDA where there is a GPU), like test_triton_codegen.
"""

from __future__ import annotations

import pytest
import torch
from graph_helpers import trace
from models import model_cases

from inductor_codegen import compile_graph
from inductor_codegen.triton import (
    GroupMeta,
    TritonKernelSource,
    autotune_configs,
    default_config,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def source(xnumel, groups=(), contiguous_x=False, ynumel=0):
    return TritonKernelSource("k", "", (), xnumel, tuple(groups), contiguous_x, ynumel)


@pytest.mark.parametrize("rnumel", [1, 37, 1024, 4096])
def test_persistent_blocks_cover_the_row(rnumel):
    kernel = source(100, [GroupMeta("reduction", rnumel, True)])
    for config in autotune_configs(kernel):
        assert config.rblocks[0] >= rnumel
        assert config.xblock * config.rblocks[0] <= 4 * 4096


def test_looped_reductions_pick_tiles_by_memory_order():
    along_rows = default_config(source(64, [GroupMeta("reduction", 10_000, False)]))
    across_rows = default_config(source(64, [GroupMeta("reduction", 10_000, False)], True))
    assert along_rows.xblock == 1 and along_rows.rblocks[0] >= 512
    assert across_rows.xblock > 1 and across_rows.rblocks[0] < along_rows.rblocks[0]


def test_short_column_rows_get_wide_tiles():
    kernel = TritonKernelSource(
        "k", "", (), 1 << 20, (GroupMeta("reduction", 4, True),), False, 0, column_reduction=True
    )
    config = default_config(kernel)
    assert config.rblocks == (4,) and config.xblock == 1024


@pytest.mark.parametrize(
    ("row", "xblock"), [(768, 256), (50257, 1024), (50264, 1024), (600, 128), (2048, 1024)]
)
def test_row_tiles_cover_rows_without_idle_lanes(row, xblock):
    from inductor_codegen.codegen.triton.heuristics import ROW_TILE_ELEMENTS

    kernel = TritonKernelSource("k", "", (), row, (), True, 4096, row_tiles=True)
    config = default_config(kernel)
    assert config.xblock == xblock and config.xblock * config.yblock == ROW_TILE_ELEMENTS
    assert config.num_warps == 4


def test_pointwise_and_tiled_configs():
    assert default_config(source(10)).xblock == 16  # never wider than the next power of 2
    assert default_config(source(10**7)).xblock == 1024
    tiled = default_config(source(4096, ynumel=65535 * 40))
    assert -(-65535 * 40 // tiled.yblock) <= 65535  # the grid's second dimension fits
    configs = autotune_configs(source(1 << 20))
    assert configs[0] == default_config(source(1 << 20)) and len(set(configs)) == len(configs)


# ---------------------------------------------------------------- through the interpreter or GPU


def test_kernel_files_are_cached_by_content(tmp_path):
    pytest.importorskip("triton")
    x = torch.randn(8, 8, device=DEVICE)
    gm = trace(lambda a: a.sin() * 2, x)
    options = {"device_codegen": "triton", "cache_dir": str(tmp_path)}
    compile_graph(gm, [x], options=options)
    files = sorted((tmp_path / "triton" / "kernels").glob("*.py"))
    compile_graph(gm, [x], options=options)
    assert len(files) == 1
    assert sorted((tmp_path / "triton" / "kernels").glob("*.py")) == files
    assert "@triton.jit" in files[0].read_text()


def test_max_autotune_without_gpu_uses_the_heuristic_config(tmp_path):
    pytest.importorskip("triton")
    if DEVICE == "cuda":
        pytest.skip("measures on a GPU")
    x = torch.randn(16, 300)
    gm = trace(lambda a: torch.softmax(a, -1), x)
    options = {"device_codegen": "triton", "cache_dir": str(tmp_path), "max_autotune": True}
    compiled = compile_graph(gm, [x], options=options)
    torch.testing.assert_close(compiled(x), torch.softmax(x, -1))
    assert not (tmp_path / "triton" / "autotune").exists()  # nothing was measured


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_model_inference(name):
    pytest.importorskip("triton")
    cases = {n: (m, x) for n, m, x in model_cases()}
    model, x = cases[name]
    model, x = model.to(DEVICE), x.to(DEVICE)
    with torch.no_grad():
        gm = trace(lambda inp: model(inp), x)
        compiled = compile_graph(gm, [x], options={"device_codegen": "triton"})
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert compiled.kernel_count > 0


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_training_step_gradients(name):
    pytest.importorskip("triton")
    cases = {n: (m, x) for n, m, x in model_cases()}
    model, x = cases[name]
    model, x = model.to(DEVICE), x.to(DEVICE)
    params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    names = [n for n, _ in model.named_parameters()]

    def step(inp, *weights):
        out = torch.func.functional_call(model, dict(zip(names, weights)), (inp,))
        loss = (out.float() ** 2).mean()
        return (loss, *torch.autograd.grad(loss, weights))

    gm = trace(step, x, *params)
    compiled = compile_graph(gm, [x, *params], options={"device_codegen": "triton"})
    torch.testing.assert_close(compiled(x, *params), step(x, *params), rtol=1e-3, atol=1e-4)


def test_repeated_launches_follow_argument_alignment():
    """Later calls take the launch shortcut; a misaligned view must get its own binary."""
    pytest.importorskip("triton")
    x = torch.randn(4, 1000, device=DEVICE)
    gm = trace(lambda a: (a * 2).sin() + 1, x[:, 8:808])
    compiled = compile_graph(gm, [x[:, 8:808]], options={"device_codegen": "triton"})
    for start in (8, 8, 1, 8, 3):
        view = x[:, start : start + 800]
        torch.testing.assert_close(compiled(view), (view * 2).sin() + 1)
    fresh = torch.randn(4, 1000, device=DEVICE)
    torch.testing.assert_close(compiled(fresh[:, 8:808]), (fresh[:, 8:808] * 2).sin() + 1)


@pytest.mark.parametrize(("rnumel", "xblock", "warps"), [(768, 1, 4), (512, 2, 4), (64, 16, 4)])
def test_persistent_rows_default_to_programs_of_1024_elements(rnumel, xblock, warps):
    config = default_config(source(1 << 16, [GroupMeta("reduction", rnumel, True)]))
    assert (config.xblock, config.num_warps) == (xblock, warps)
