"""Generated Triton kernels against eager PyTorch.

Without a GPU the kernels run under the Triton interpreter on the CPU
(TRITON_INTERPRET=1, which conftest.py sets before triton is imported) and the graphs are
compiled with `options={"device_codegen": "triton"}`; with a GPU the same
tests run the compiled kernels on CUDA tensors.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import trace

from inductor_codegen import InductorError, compile_graph

pytest.importorskip("triton")
pytestmark = pytest.mark.triton_interpret

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPTIONS = {"device_codegen": "triton"}


def compile_triton(fn, *args, options=None):
    gm = trace(fn, *args)
    return compile_graph(gm, list(args), options={**OPTIONS, **(options or {})})


def check(fn, *args, rtol=None, atol=None, options=None):
    args = [a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args]
    compiled = compile_triton(fn, *args, options=options)
    expected = fn(*args)
    actual = compiled(*args)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    return compiled


def randn(*size, dtype=torch.float32):
    return torch.randn(*size).to(dtype)


# ---------------------------------------------------------------- pointwise


def test_pointwise_chain_is_one_triton_kernel():
    compiled = check(lambda x, y: (x.sin() + y * 2).relu().exp(), randn(8, 16), randn(16))
    assert compiled.kernel_count == 1
    assert "@triton.jit" in compiled.artifact("codegen")
    assert "triton_fused" in compiled.artifact("wrapper")


UNARY = {
    "exp": torch.exp,
    "log_abs": lambda x: torch.log(x.abs() + 0.1),
    "sqrt_abs": lambda x: x.abs().sqrt(),
    "rsqrt_abs": lambda x: (x.abs() + 0.5).rsqrt(),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": lambda x: F.silu(x),
    "erf": torch.erf,
    "log1p_expm1": lambda x: torch.log1p(x.abs()) + torch.expm1(x),
    "trig": lambda x: x.sin() * x.cos() + x.atan(),
    "rounding": lambda x: (x * 3).floor() + (x * 3).ceil() + (x * 3).round() + (x * 3).trunc(),
    "sign_abs_neg": lambda x: x.sign() - x.abs() * -x,
    "reciprocal": lambda x: (x.abs() + 1).reciprocal(),
    "pow": lambda x: x.abs().pow(1.5) + x.pow(2) + x.pow(3) + x.abs().pow(0.5),
    "nan_checks": lambda x: torch.where(torch.isnan(x.log()), 0.0, 1.0),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name):
    check(UNARY[name], randn(7, 33), rtol=1e-4, atol=1e-5)


def test_binary_with_broadcast_and_scalars():
    check(
        lambda x, y: (x * y + 3.5 - x / 2, torch.maximum(x, y), torch.minimum(x, y), x > y),
        randn(4, 1, 6),
        randn(5, 1),
    )


def test_nan_propagating_maximum_and_clamp():
    x = randn(4, 8)
    x[0, 0] = float("nan")
    check(lambda a: (torch.maximum(a, a * 0), a.clamp(-0.5, 0.5), F.relu(a)), x)


def test_fmax_and_fmin_ignore_a_nan_operand():
    nan = float("nan")
    x = torch.tensor([1.0, nan, nan, -2.0, 3.0, 0.5])
    y = torch.tensor([nan, 2.0, nan, -1.0, 1.0, 0.5])
    compiled = check(lambda a, b: torch.stack([torch.fmax(a, b), torch.fmin(a, b)]), x, y)
    assert "libdevice.fmax" not in compiled.artifact("codegen")


def test_every_libdevice_function_the_op_table_names_exists_for_cuda():
    """The interpreter maps libdevice names onto NumPy, so a name CUDA's libdevice lacks
    passes there and fails only on a GPU (fmax and fmin did): check the names."""
    libdevice = pytest.importorskip("triton.language.extra.cuda.libdevice")
    from inductor_codegen.codegen.ops import TRITON_OPS

    names = set()
    for emit in TRITON_OPS.values():
        for dtype in (torch.float32, torch.int64):
            try:
                text = emit(["a", "b", "c"], [dtype] * 3, dtype)
            except Exception:  # an op spelled for some dtypes or arities only
                continue
            names |= set(re.findall(r"libdevice\.(\w+)", text))
    assert names, "no libdevice call found: the check reads the wrong table"
    assert sorted(n for n in names if not hasattr(libdevice, n)) == []


def test_integer_ops():
    a = torch.randint(-50, 50, (6, 9))
    b = torch.randint(1, 7, (6, 9)) * torch.where(torch.rand(6, 9) > 0.5, 1, -1)
    check(lambda x, y: (x + y, x * y, x // y, x % y, x & y, x | y, x ^ y, ~x, x > y), a, b)


def test_float_floordiv_and_remainder():
    check(lambda x, y: (x // y, x % y, torch.fmod(x, y)), randn(5, 7) * 5, randn(5, 7) + 3)


def test_bool_ops():
    a, b = torch.rand(5, 7) > 0.5, torch.rand(5, 7) > 0.3
    check(lambda x, y: (x & y, x | ~y, x ^ y, torch.logical_not(x)), a, b)


def test_where_and_scalar_input():
    check(lambda x, s: torch.where(x > 0, x * s, -x), randn(9, 5), 2.5)


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_computes_in_float32(dtype):
    x, y = randn(16, 40, dtype=dtype), randn(16, 40, dtype=dtype)
    check(
        lambda a, b: ((a * b).sigmoid() + a, (a.float() * 2).to(dtype), a.sum(1)),
        x,
        y,
        rtol=2e-2,
        atol=2e-2,
    )


def test_casts():
    x = randn(6, 10) * 100
    check(
        lambda a: (a.to(torch.int32), a.to(torch.int64) + 1, (a > 0).to(torch.float32), a.double()),
        x,
    )


def test_float64():
    check(lambda a: (a.exp() * 2).sum(0), randn(6, 10, dtype=torch.float64))


# ---------------------------------------------------------------- views and masks


def test_views():
    check(
        lambda x: (x.permute(2, 0, 1) * 2, x[:, 1:5, ::2].exp(), x.reshape(6, 20).t() + 1),
        randn(3, 8, 5),
    )


@pytest.mark.parametrize("shape", [(70, 50), (3, 33, 65), (1, 5, 7)])
def test_transposes_use_2d_tiles(shape):
    compiled = check(lambda x: x.transpose(-1, -2).contiguous() * 2 + 1, randn(*shape))
    if shape[0] > 1:
        assert "YBLOCK" in compiled.artifact("codegen")


def test_non_contiguous_and_expanded_inputs():
    x = randn(6, 8).t()
    y = randn(16, 6)[::2]
    z = randn(6, 1).expand(6, 8).t()
    check(lambda a, b, c: a.exp() + b.cos() * c, x, y, z)


def test_cat_and_pad_use_masked_loads():
    check(
        lambda x, y: (torch.cat([x, y], 1) * 2, F.pad(x, (2, 3, 1, 0), value=-1.0)),
        randn(4, 5),
        randn(4, 3),
    )


def test_ragged_sizes():
    for shape in [(1,), (7,), (1000,), (3, 4097), (33, 17)]:
        check(lambda x: (x * 2).sum(-1), randn(*shape))


def test_zero_size():
    check(lambda x: (x.exp() + 1, x.sum(1)), randn(0, 4))


def test_iota():
    check(
        lambda x: x + torch.arange(x.shape[-1], dtype=torch.float32, device=x.device), randn(3, 11)
    )


# ---------------------------------------------------------------- reductions


REDUCTIONS = {
    "sum": lambda x, d: x.sum(d),
    "mean": lambda x, d: x.mean(d),
    "amax": lambda x, d: x.amax(d),
    "amin": lambda x, d: x.amin(d),
    "prod": lambda x, d: (x * 0.1 + 1).prod(d),
    "argmax": lambda x, d: x.argmax(d),
    "argmin": lambda x, d: x.argmin(d),
    "any_all": lambda x, d: ((x > 1).any(d), (x > -3).all(d)),
    "var": lambda x, d: x.var(d),
    "var_mean": lambda x, d: torch.var_mean(x, d, correction=0),
    "full": lambda x, d: (x.sum(), x.amax()),
}
# Rows of 37 fit one block (persistent); rows of 5000 are reduced in a loop.
SHAPES = {"persistent": (6, 37), "looped": (3, 5000)}


@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("kind", list(SHAPES))
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions(name, kind, dim):
    rows, width = SHAPES[kind]
    x = randn(rows, width) if dim == -1 else randn(width, rows)
    check(lambda t: REDUCTIONS[name](t, dim), x, rtol=1e-4, atol=1e-4)


def test_reduction_of_middle_dim():
    check(lambda x: x.reshape(4, -1, 5).sum(1), randn(20, 60))


def test_reduction_along_outer_dim_of_wide_rows():
    check(lambda x: (x.sum(0), x.amax(0)), randn(300, 70))


def test_argmax_ties_and_nan():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [float("nan"), 1.0, float("nan"), 5.0]])
    check(lambda a: (a.argmax(-1), a.argmin(-1), a.amax(-1)), x)


def test_softmax_loads_input_once():
    compiled = check(lambda x: torch.softmax(x, -1), randn(8, 100))
    assert compiled.kernel_count == 1
    assert compiled.artifact("codegen").count("tl.load(") == 1


@pytest.mark.parametrize("width", [64, 2000])
def test_layer_norm_and_log_softmax(width):
    w, b = randn(width), randn(width)
    check(
        lambda x, w, b: (F.layer_norm(x, (width,), w, b), F.log_softmax(x, -1)),
        randn(6, width),
        w,
        b,
        rtol=1e-4,
        atol=1e-4,
    )


def test_mlp_with_extern_matmul():
    w1, w2 = randn(32, 64), randn(64, 16)
    compiled = check(
        lambda x, a, b: torch.softmax(F.gelu(x @ a) @ b, -1),
        randn(8, 32),
        w1,
        w2,
        rtol=1e-4,
        atol=1e-4,
    )
    assert "extern kernel" in compiled.artifact("wrapper")


# ---------------------------------------------------------------- options


def test_unknown_device_codegen_is_an_error():
    with pytest.raises(InductorError, match="device_codegen"):
        compile_graph(trace(torch.sin, randn(3)), [randn(3)], options={"device_codegen": "ptx"})


def test_cpu_default_stays_cpp():
    if DEVICE == "cuda":
        pytest.skip("CPU inputs only")
    x = randn(4, 4)
    compiled = compile_graph(trace(torch.sin, x), [x])
    assert "cpp_fused" in compiled.artifact("wrapper")


def test_max_autotune_and_cudagraphs_options_give_same_results():
    check(
        lambda x: torch.softmax(x * 2, -1).sum(0),
        randn(16, 300),
        options={"max_autotune": True, "cudagraphs": True},
        rtol=1e-4,
        atol=1e-4,
    )


# ---------------------------------------------------------------- random numbers


def test_dropout_uses_philox_in_the_kernel():
    p = 0.3
    x = torch.ones(64, 128, device=DEVICE)

    def fn(a):
        out, mask = torch.ops.aten.native_dropout.default(a, p, True)
        return out * 2, mask

    compiled = compile_triton(fn, x)
    assert "tl.rand(" in compiled.artifact("codegen")
    out, mask = compiled(x)
    kept = mask.float().mean().item()
    assert abs(kept - (1 - p)) < 0.03
    torch.testing.assert_close(out, torch.where(mask, 2 / (1 - p), 0.0))
    out_again, _ = compiled(x)
    assert not torch.equal(out, out_again)  # a new seed each call


def test_rand_and_bernoulli_are_uniform():
    x = torch.full((256, 64), 0.25, device=DEVICE)

    def fn(a):
        return torch.ops.aten.bernoulli.p(a, 0.25), torch.rand(256, 64, device=a.device) + a

    hits, uniform = compile_triton(fn, x)(x)
    assert abs(hits.mean().item() - 0.25) < 0.02
    assert 0.25 <= uniform.min().item() and uniform.max().item() < 1.25
    assert abs(uniform.mean().item() - 0.75) < 0.02


def test_every_branch_of_a_cat_loads_only_where_it_is_taken():
    """A piece of a cat read outside its rows would index before or past its buffer."""
    import re

    a, b, c = (torch.randn(3, n, 8, device=DEVICE) for n in (1, 4, 2))
    compiled = check(lambda a, b, c: torch.cat([a, b, c], 1) * 2, a, b, c)
    kernels = compiled.artifact("codegen")
    loads = re.findall(r"tl\.load\((in_ptr\d+) \+ .*?, (.*?), other=0\)", kernels)
    assert len(loads) == 3
    for pointer, mask in loads:
        assert "tmp" in mask, f"{pointer} loads under {mask} only"


def test_a_stored_reduction_is_reused_from_registers():
    # a norm's statistics (Welford, as on GPUs): stored for the backward and used at once
    # by the same kernel, from registers and not read back from memory
    from torch.fx.experimental.proxy_tensor import make_fx

    from prim_decomp import inductor_default

    x = torch.randn(16, 96, device=DEVICE)

    def fn(x):
        var, mean = torch.var_mean(x, dim=1, keepdim=True, correction=0)
        return mean, (x - mean) * torch.rsqrt(var + 1e-5)

    table = dict(inductor_default.without(torch.ops.aten.var_mean.correction))
    gm = make_fx(fn, decomposition_table=table)(x)
    compiled = compile_graph(gm, [x], options=OPTIONS)
    assert "welford" in compiled.artifact("codegen")
    assert "tl.load(out_ptr" not in compiled.artifact("codegen")
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)


def _kernel_sources(monkeypatch, fn, *args, **kwargs):
    """The TritonKernelSource of every kernel `check(fn, *args)` compiles."""
    import inductor_codegen.codegen.triton.compile as triton_compile

    sources = []
    generate = triton_compile.generate_triton_kernel

    def recording(kernel, buffers):
        sources.append(generate(kernel, buffers))
        return sources[-1]

    monkeypatch.setattr(triton_compile, "generate_triton_kernel", recording)
    check(fn, *args, **kwargs)
    return sources


def _masked_softmax(scores, mask):
    return torch.softmax(scores.float() * 0.125 + mask, -1).to(scores.dtype)


def test_a_value_read_by_later_groups_of_a_persistent_row_stays_in_registers(monkeypatch):
    # softmax's exp is read by its sum and by the division: with the whole row in
    # registers, it is never written to memory (only the bf16 result is)
    scores, mask = randn(6, 512, dtype=torch.bfloat16), randn(6, 512)
    (source,) = _kernel_sources(monkeypatch, _masked_softmax, scores, mask, atol=1e-2, rtol=1e-2)
    assert all(g.persistent for g in source.groups)
    assert source.source.count("tl.store(") == 1
    assert [a.kind for a in source.args].count("out") == 1


def test_a_value_read_by_a_later_loop_is_still_stored(monkeypatch):
    # rows too long for registers: the sum and the division loop over the row again,
    # and read the exp back from memory
    scores, mask = randn(3, 5000, dtype=torch.bfloat16), randn(3, 5000)
    sources = _kernel_sources(monkeypatch, _masked_softmax, scores, mask, atol=1e-2, rtol=1e-2)
    assert not any(g.persistent for s in sources for g in s.groups)
    assert sum(s.source.count("tl.store(") for s in sources) == 2


def test_long_row_reductions_read_along_the_row(monkeypatch):
    # logsumexp's last step reads the row's max and sum at one element per row: that
    # does not make the kernel's loads run along its outputs (one row per program, a
    # long step along the row, not a tile of 64 rows by 16)
    from inductor_codegen.codegen.triton.heuristics import default_config

    (source,) = _kernel_sources(
        monkeypatch, lambda x: torch.logsumexp(x.float(), -1), randn(4, 5000, dtype=torch.bfloat16)
    )
    assert not source.contiguous_x
    config = default_config(source)
    assert config.xblock == 1 and min(config.rblocks) >= 512


def test_a_returned_residual_sum_joins_the_norm_over_it(monkeypatch):
    # x + residual is returned and normalized: one kernel loads x and residual once,
    # stores the sum and the norm (not a second kernel reading both again)
    def fn(x, residual, w, b):
        y = x + residual
        return y, F.layer_norm(y, (768,), w, b)

    args = [randn(8, 768, dtype=torch.bfloat16) for _ in range(2)]
    args += [randn(768, dtype=torch.bfloat16), randn(768, dtype=torch.bfloat16)]
    (source,) = _kernel_sources(monkeypatch, fn, *args, atol=5e-2, rtol=5e-2)
    assert source.source.count("tl.load(") == 4  # x, residual, w, b
    assert source.source.count("tl.store(") == 2


def test_a_cast_sharing_no_read_stays_out_of_a_reduction_kernel():
    # a weight's cast beside an unrelated row sum: two kernels, the cast flat
    compiled = check(
        lambda x, w: (x.sum(-1), w.to(torch.bfloat16)), randn(64, 768), randn(768, 3072)
    )
    assert compiled.kernel_count == 2


def test_a_copy_across_the_rows_of_a_norm_it_shares_reads_with_stays_out():
    # stored along the rows it joins (x * 2): one kernel; stored transposed, each program
    # would write a column of it: its own flat kernel
    x = randn(64, 768)
    assert check(lambda t: (t.sum(-1), t * 2), x).kernel_count == 1
    assert check(lambda t: (t.sum(-1), (t * 2).t().contiguous()), x).kernel_count == 2


def test_small_reductions_over_the_same_loops_share_a_launch(monkeypatch):
    import dataclasses

    import inductor_codegen.codegen.triton.compile as triton_compile

    def fn(x, y):
        return x.sum(0), y.sum(0)

    args = randn(32, 768), randn(32, 768)
    assert check(fn, *args).kernel_count == 1
    policy = dataclasses.replace(triton_compile.GPU_FUSION_POLICY, small_reduction_elements=1000)
    monkeypatch.setattr(triton_compile, "GPU_FUSION_POLICY", policy)  # now too large to join
    assert check(fn, *args).kernel_count == 2


def test_layer_norm_backward_sums_its_weight_and_bias_partials_in_one_launch():
    # dx and the partials of dw and db over each program's rows in one row kernel (dy and
    # x read once, see column_partials), their last sums in one
    def fn(x, dy, w, mean, rstd):
        xhat = (x - mean) * rstd
        g = dy * w
        dx = rstd / 768 * (768 * g - g.sum(-1, keepdim=True) - xhat * (g * xhat).sum(-1, True))
        return dx, (dy * xhat).sum(0), dy.sum(0)

    x, dy = randn(4096, 768), randn(4096, 768)
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)
    compiled = check(fn, x, dy, randn(768), mean, rstd, rtol=1e-4, atol=1e-3)
    assert compiled.kernel_count == 2
    assert "column partials, 4 rows a program" in compiled.artifact("column_partials")


@pytest.mark.parametrize("width", [768, 96])  # 64-output tiles within one chunk, or across
def test_a_column_reduction_loads_a_value_per_reduced_row_once_per_tile(monkeypatch, width):
    # layer norm's weight gradient sums dy * (x - mean) * rstd over rows: mean and rstd
    # are per row, the same for every output of a tile; when the tile stays within one
    # chunk of rows they load as one [1, RBLOCK] row, else as before
    def fn(x, dy, mean, rstd):
        return (dy * ((x - mean) * rstd)).sum(0), dy.sum(0)

    x, dy = randn(4096, width), randn(4096, width)
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)
    sources = _kernel_sources(monkeypatch, fn, x, dy, mean, rstd, rtol=1e-4, atol=1e-3)
    (partials,) = [s for s in sources if "xu0" in s.source]
    assert f"if {width} % XBLOCK == 0:" in partials.source
    assert partials.source.count(", r0mask, other=0)") == 2  # mean and rstd


def test_per_row_loads_of_a_three_dim_column_reduction(monkeypatch):
    # outputs [6, 128] summed over 4096 rows, each scaled by m[row, a]: a tile of 64
    # outputs shares (chunk, a), read as (first // 768, first // 128 % 6)
    def fn(t, m):
        return (t * m[:, :, None]).sum(0), m[:, :, None].expand(-1, -1, 128).sum(0)

    sources = _kernel_sources(
        monkeypatch, fn, randn(4096, 6, 128), randn(4096, 6), rtol=1e-4, atol=1e-3
    )
    uniform = [s.source for s in sources if "xu1" in s.source]
    assert uniform, [s.source for s in sources]
    assert "xu1 = (((tl.program_id(0) * XBLOCK) // 128) % 6)" in uniform[0]
    assert "if 128 % XBLOCK == 0:" in uniform[0]


def test_a_flat_kernel_of_software_math_takes_more_elements_a_thread(monkeypatch):
    # erf is a libdevice polynomial: a large GELU kernel is bound by instructions and gets
    # 2048 elements a program (4 warps); a ReLU of the same size keeps 1024; so does a
    # small GELU, whose programs would not fill the device
    from dataclasses import replace

    from inductor_codegen.codegen.triton.heuristics import MATH_MIN_NUMEL, default_config

    x = randn(4, 384, dtype=torch.bfloat16)
    (gelu,) = _kernel_sources(monkeypatch, F.gelu, x, atol=2e-2, rtol=2e-2)
    (tanh_gelu,) = _kernel_sources(
        monkeypatch, lambda v: F.gelu(v, approximate="tanh"), x, atol=2e-2, rtol=2e-2
    )
    (relu,) = _kernel_sources(monkeypatch, lambda v: torch.relu(v).exp(), x)
    assert (gelu.math_calls, tanh_gelu.math_calls, relu.math_calls) == (1, 1, 0)
    assert "* 0.7071067811865476" in gelu.source  # as ATen writes it: no division
    large = {"xnumel": 4 * MATH_MIN_NUMEL}
    assert default_config(replace(gelu, **large)).xblock == 2048
    assert default_config(replace(gelu, **large)).num_warps == 4
    assert default_config(replace(tanh_gelu, **large)).xblock == 2048
    assert default_config(replace(relu, **large)).xblock == 1024
    assert default_config(replace(gelu, xnumel=MATH_MIN_NUMEL // 2)).xblock == 1024


def test_independent_parts_of_a_flat_kernel_run_in_programs_of_their_own(monkeypatch):
    # five weight casts fused into one launch: each program runs one cast over its block
    # (the grid holds five times the blocks), not all five one after another; a value
    # computed from the first weight shares its read and runs in the first cast's part,
    # and a chain of nodes stays in one part
    def fn(*ws):
        casts = [w.to(torch.bfloat16) for w in ws]
        return [*casts, ws[0].sin() * 2, (ws[1] + 1).exp()]

    ws = [randn(48, 40) for _ in range(5)]
    (source,) = _kernel_sources(monkeypatch, fn, *ws, atol=1e-2, rtol=1e-2)
    assert source.segments == 5
    assert "xsegment = tl.program_id(0) // xblocks" in source.source
    assert source.source.count("if xsegment == ") == 5
    assert source.source.count("tl.load(") == 5  # the shared reads load once


def test_a_flat_kernel_of_one_chain_is_not_split(monkeypatch):
    (source,) = _kernel_sources(monkeypatch, lambda x: ((x + 1).sin(), x * 2), randn(300))
    assert source.segments == 0 and "xsegment" not in source.source


def test_independent_parts_run_at_every_symbolic_size():
    from dynamic_graphs import trace_symbolic

    def fn(a, b, c):
        return a.to(torch.bfloat16), (b * 2).sin(), c.exp()

    def make(n):
        return tuple(torch.randn(n, 3, device=DEVICE) for _ in range(3))

    gm, examples = trace_symbolic(fn, *make(700), dynamic={0: [0], 1: [0], 2: [0]})
    compiled = compile_graph(gm, examples, options={"device_codegen": "triton"})
    assert compiled.kernel_count == 1
    assert compiled.artifact("codegen").count("if xsegment == ") == 3
    for n in (700, 1, 2049):
        args = make(n)
        torch.testing.assert_close(list(compiled(*args)), list(fn(*args)))


def test_symbolic_sizes_are_not_specialized():
    """A kernel over symbolic sizes takes them with `do_not_specialize`: Triton compiles
    it once for every size (it would compile it again for a size that is a multiple of
    16, or 1: a decode step's cache length every 16 tokens)."""
    import ast

    from dynamic_graphs import trace_symbolic

    def fn(a, b):
        return (a * 2).sin() + b

    def make(n):
        return tuple(torch.randn(n, 3, device=DEVICE) for _ in range(2))

    gm, examples = trace_symbolic(fn, *make(700), dynamic={0: [0], 1: [0]})
    compiled = compile_graph(gm, examples, options={"device_codegen": "triton"})
    source = compiled.artifact("codegen")
    (header,) = re.findall(r"@triton\.jit\((.*)\)\ndef \w+\((.*)\):", source)
    settings, params = header
    (sizes,) = re.findall(r"do_not_specialize=(\[.*?\])", settings)
    sizes = ast.literal_eval(sizes)
    assert sizes and all(name in params.split(", ") for name in sizes)
    for n in (700, 16, 1, 2048):  # a multiple of 16 and 1 run the one kernel
        args = make(n)
        (out,) = compiled(*args)
        torch.testing.assert_close(out, fn(*args))
    static = compile_triton(fn, *make(700))
    assert "do_not_specialize" not in static.artifact("codegen")


def test_kernels_over_different_symbols_share_one_function():
    """Two copies of one computation over sizes of their own (each layer's key/value cache
    length in a decode step) have one kernel text, one Triton function: size parameters
    are named by position, not after the graph's symbols."""
    from dynamic_graphs import trace_symbolic

    def fn(a, b, c, d):
        return torch.cat([a, c], 0) * 2, torch.cat([b, d], 0) * 2

    def make(n, m):
        return (
            torch.randn(n, 8, device=DEVICE),
            torch.randn(m, 8, device=DEVICE),
            torch.randn(1, 8, device=DEVICE),
            torch.randn(1, 8, device=DEVICE),
        )

    gm, examples = trace_symbolic(fn, *make(5, 7), dynamic={0: [0], 1: [0]})
    compiled = compile_graph(gm, examples, options={"device_codegen": "triton"})
    source = compiled.artifact("codegen")
    kernels = re.findall(r"def (\w+)\(", source)
    assert len(kernels) == 2 and "ks0" in source
    bodies = re.split(r"@triton\.jit.*\n", source)[1:]
    assert len({re.sub(r"def \w+\(", "def K(", body).strip() for body in bodies}) == 1
    for n, m in ((5, 7), (9, 2), (16, 1)):
        args = make(n, m)
        for got, expected in zip(compiled(*args), fn(*args), strict=True):
            torch.testing.assert_close(got, expected)


def test_a_tile_reading_few_contiguous_rows_is_wide_and_short(monkeypatch):
    # a [keys, heads] bias broadcast into [batch, heads, queries, keys]: the transposed
    # reads are contiguous over the 8 heads only, so tiles are 256 wide by 16 rows; a
    # plain transpose keeps 64 x 64
    from inductor_codegen.codegen.triton.heuristics import default_config

    def broadcast(bias):
        return bias.permute(1, 0)[None, :, None, :].expand(2, 8, 16, 64).contiguous()

    (bias_tile,) = _kernel_sources(monkeypatch, broadcast, randn(64, 8))
    assert bias_tile.ynumel and bias_tile.yrun == 8
    config = default_config(bias_tile)
    assert (config.xblock, config.yblock) == (64, 16)  # XBLOCK capped by the 64 keys
    from dataclasses import replace

    wide = default_config(replace(bias_tile, xnumel=4096))
    assert (wide.xblock, wide.yblock) == (256, 16)
    (transpose,) = _kernel_sources(monkeypatch, lambda x: x.t().contiguous(), randn(256, 128))
    assert transpose.yrun == 128  # all of y: the whole [256, 128] source is contiguous
    config = default_config(transpose)
    assert (config.xblock, config.yblock) == (64, 64)


# ---------------------------------------------------------------- division


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_floor_division_is_eager_quotient_of_a_minus_fmod(dtype):
    """floor(a / b) is not eager's floor division: 1.0 // 0.1 is 9 (1 - fmod(1, 0.1) is
    just below 0.9), while 1.0 / 0.1 rounds to 10; x // x is 1, a zero divisor gives inf
    or nan, a zero quotient keeps the sign of a / b."""
    a = torch.tensor([1.0, 1.0, -1.0, 7.5, -7.5, 0.0, -0.0, 3.0, 2.25, 0.3, 5.0, 0.0], dtype=dtype)
    b = torch.tensor([0.1, -0.1, 0.1, 2.0, 2.0, 3.0, 3.0, 0.0, 2.25, 0.1, -0.0, 0.0], dtype=dtype)
    check(lambda x, y: (x // y, torch.div(x, y, rounding_mode="floor"), x // 0.1), a, b)
    check(lambda x, y: (torch.div(x, y, rounding_mode="trunc"), x / y, 1 / y), a, b)


def test_float32_division_is_correctly_rounded():
    """Triton's `/` on float32 is div.full.f32 (2 ulp): x / x may fall just below 1 and
    x // x to 0. Every float32 quotient goes through tl.div_rn, as eager's IEEE division."""
    from cuda_target import compile_for_cuda

    def fn(x, y):
        v = torch.bmm(x, x.mT)
        return v // v, x / y, torch.div(x, y, rounding_mode="trunc"), 2.0 / y, y.reciprocal()

    x = torch.randint(-8, 9, (2, 3, 4)).float() / 4
    y = torch.rand(2, 3, 4) + 0.5
    compiled = check(fn, x, y)
    source = compiled.artifact("codegen")
    assert " / " not in source.replace("tl.div_rn", "")
    assert "tl.div_rn" in source
    compile_for_cuda(source, pointer="*fp32")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_fmod_and_remainder_are_exact(dtype):
    """Triton's `%` of floats is a - trunc(a / b) * b, off where the quotient rounds
    (large quotients; fmod(1.0, 0.1) came out negative): libdevice's fmod is exact."""
    from cuda_target import compile_for_cuda

    def fn(x, y):
        return torch.fmod(x, y), torch.remainder(x, y), x % 0.1, torch.fmod(x, 3.0), x // y

    x = torch.tensor([1.0, -1.0, 1e10, -1e10, 7.5, 0.3, 123456.7], dtype=dtype)
    y = torch.tensor([0.1, 0.1, 3.0, 3.0, -2.0, 0.1, 0.01], dtype=dtype)
    compiled = check(fn, x, y)
    source = compiled.artifact("codegen")
    assert " % " not in source
    compile_for_cuda(source, pointer="*fp64" if dtype == torch.float64 else "*fp32")


# ---------------------------------------------------------------- correctly rounded division


def test_sigmoid_divides_correctly_rounded():
    x = torch.linspace(-20, 20, 4001)
    compiled = check(torch.sigmoid, x)
    source = compiled.artifact("codegen")
    assert "ember_sigmoid(" in source
    assert "1.0 / (" not in source


@pytest.mark.parametrize("kind", list(SHAPES))
def test_welford_mean_and_combine_divide_correctly_rounded(kind):
    import inspect

    from inductor_codegen.codegen.triton import prelude

    rows, width = SHAPES[kind]
    compiled = check(lambda t: torch.var_mean(t, -1), randn(rows, width), rtol=1e-5, atol=1e-5)
    source = compiled.artifact("codegen")
    assert "div_rn(" in source
    assert "_delta / " not in source and ", 1) / " not in source
    combine = inspect.getsource(prelude.ember_welford_combine.fn)
    assert "ember_div_rn(" in combine and "n_b / " not in combine


# ------------------------------------------------- transcendental functions' accuracy
# What torch.compile's Triton spells (torch/_inductor/codegen/triton.py, defaults):
# exp, exp2, log2, tanh and erf through libdevice; log as tl_math.log; sigmoid as
# tl.sigmoid (1 / (1 + tl.exp(-x)), both approximate). Ember spells each at least as
# accurately: libdevice for all of them, and a correctly rounded division in sigmoid.
ACCURATE_MATH = {
    "exp": (torch.exp, "libdevice.exp("),
    "exp2": (torch.exp2, "libdevice.exp2("),
    "log": (lambda x: torch.log(x.abs() + 0.1), "libdevice.log("),
    "log2": (lambda x: torch.log2(x.abs() + 0.1), "libdevice.log2("),
    "tanh": (torch.tanh, "libdevice.tanh("),
    "erf": (torch.erf, "libdevice.erf("),
    "sigmoid": (torch.sigmoid, "ember_sigmoid("),
}
APPROXIMATE_SPELLINGS = ("tl.exp(", "tl.exp2(", "tl.log(", "tl.log2(", "tl.erf(", "tl.sigmoid(")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("name", sorted(ACCURATE_MATH))
def test_float32_transcendentals_use_libdevice_not_fast_approximations(name, dtype):
    fn, spelling = ACCURATE_MATH[name]
    compiled = check(fn, randn(8, 16, dtype=dtype), rtol=1e-3, atol=1e-3)
    source = compiled.artifact("codegen")
    assert spelling in source
    kernel = source[source.index("def triton_fused") :]  # the kernels, after the prelude
    assert not any(approximate in kernel for approximate in APPROXIMATE_SPELLINGS)


def test_sigmoid_helper_uses_libdevice_exp_and_a_rounded_division():
    import inspect

    from inductor_codegen.codegen.triton import prelude

    source = inspect.getsource(prelude)
    helper = source[source.index("def ember_sigmoid") :]
    helper = helper[: helper.index("@triton.jit")]
    assert "libdevice.exp(" in helper and "tl.exp(" not in helper
    assert "ember_div_rn(" in helper
    check(torch.sigmoid, randn(8, 16))


@pytest.mark.parametrize("reduce", ["amin", "amax"])
def test_min_and_max_of_bools_accumulate_in_int8(reduce):
    """Triton's tl.min / tl.max do not compile over int1: the minimum of bools is all(), the
    maximum any(), accumulated in int8."""

    def f(x):
        return getattr(x.to(torch.bool), reduce)(dim=[-2], keepdim=True)

    for shape in [(2, 1), (5, 3)]:
        x = ((torch.randn(shape) > 0).half() * torch.randn(shape).half()).to(DEVICE)
        compiled = compile_triton(f, x)
        source = compiled.artifact("codegen")
        assert "tl.int1)" not in source.split("tl.store")[0]
        assert torch.equal(compiled(x), f(x))


def test_a_tile_loads_values_shared_by_its_columns_once_per_row(monkeypatch):
    # a row's statistics (a max, a log-sum) read by every column of a tile of rows:
    # one load per row of the tile (a [YBLOCK, 1] block), not one per element, which
    # left a cross-entropy backward's tile at a quarter of copy speed on an H200
    (source,) = _kernel_sources(
        monkeypatch,
        lambda x, s, t: (x.float() - s[:, None]).exp() * t[:, None] + 0.5,
        randn(64, 5001, dtype=torch.bfloat16),
        randn(64),
        randn(64),
        atol=1e-2,
        rtol=1e-2,
    )
    assert source.ynumel
    assert re.findall(r"tl\.load\(\w+ \+ \(yindex\), ymask, other=0\)", source.source)
    assert len(re.findall(r"tl\.load\(.*xmask", source.source)) == 1
    assert len(re.findall(r"tl\.store\(.*xmask\)", source.source)) == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_reduction_read_in_its_kernel_is_rounded_as_stored(dtype):
    # amax's backward compares x with amax(x): the max kept in registers must be the
    # rounded value its buffer holds, or no element of a recomputed x matches it
    x = torch.tensor([[1.0, 0.75], [3.0, 2.25], [0.3, 0.7]], dtype=dtype)
    s = torch.tensor(1.1, dtype=dtype)

    def f(x, s):
        y = x * s
        return y == y.amax(-1, keepdim=True), y.amax(-1) * 2

    check(f, x, s)
