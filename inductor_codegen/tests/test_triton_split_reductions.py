"""Split reductions (partials plus a final reduction) in generated Triton kernels, against eager.

Without a GPU the kernels run under the Triton interpreter. The default split
policy is sized for GPUs (a million elements and more); most tests lower with
a small policy so that small tensors split the same way large ones do on a GPU.
"""

from __future__ import annotations

import functools
import re

import pytest
import sympy
import torch
import torch.utils._pytree
from graph_helpers import trace

from inductor_codegen import compile_graph
from inductor_codegen.lowering.split import (
    SplitPolicy,
    plan_split,
    split_reductions,
)

pytest.importorskip("triton")
pytestmark = pytest.mark.triton_interpret

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPTIONS = {"device_codegen": "triton"}
SMALL = SplitPolicy(
    min_reduction_numel=64,
    min_total_numel=256,
    min_column_total_numel=256,
    max_programs=64,
    target_programs=64,
    target_column_programs=64,
    column_block=16,
    min_chunk=16,
    min_column_chunk=8,
    max_splits=64,
)
DTYPES = [torch.float32, torch.bfloat16]


def tolerance(dtype):
    # summation order differs from eager's: float32 sums of a thousand terms differ in ulps
    return dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)


def compile_split(fn, *args, policy=SMALL):
    gm = trace(fn, *args)
    with split_reductions(policy):
        return compile_graph(gm, list(args), options=OPTIONS)


def check(fn, *args, policy=SMALL, **tol):
    args = [a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args]
    compiled = compile_split(fn, *args, policy=policy)
    torch.testing.assert_close(compiled(*args), fn(*args), equal_nan=True, **tol)
    return compiled


def reduction_loops(compiled) -> list[str]:
    return [line for line in compiled.artifact("schedule").splitlines() if "reduction loop" in line]


def nchw(dtype, shift=0.0, scale=1.0):
    # ragged sizes: no dim is a multiple of a block or of the chunk count
    return (torch.randn(6, 3, 11, 13) * scale + shift).to(dtype)


# ---------------------------------------------------------------- over (N, H, W) of a 4D tensor


@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_over_nhw_is_partials_then_final(dtype):
    compiled = check(lambda x: x.sum(dim=(0, 2, 3)), nchw(dtype), **tolerance(dtype))
    assert compiled.kernel_count == 2
    assert len(reduction_loops(compiled)) == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_mean_over_nhw(dtype):
    check(lambda x: x.mean(dim=(0, 2, 3), keepdim=True), nchw(dtype), **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_mean_over_nhw_combines_welford_partials(dtype, keepdim):
    # a large mean next to a small spread: a naive sum of squares loses the variance
    x = nchw(dtype, shift=50.0, scale=0.5)
    compiled = check(
        lambda x: torch.var_mean(x, dim=(0, 2, 3), correction=0, keepdim=keepdim),
        x,
        **tolerance(dtype),
    )
    assert len(reduction_loops(compiled)) >= 3  # partial Welford, then two over the partials


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["amax", "amin"])
def test_amax_amin_over_nhw(dtype, name):
    fn = getattr(torch, name)
    check(lambda x: fn(x, dim=(0, 2, 3)), nchw(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_over_a_long_dim_picks_the_first_of_ties(dtype):
    x = torch.randint(0, 5, (3, 997)).to(dtype)  # many ties across chunks
    compiled = check(lambda x: torch.argmax(x, dim=1), x)
    assert compiled.kernel_count == 2
    check(lambda x: torch.argmin(x.reshape(-1)), x)


def test_argmax_with_nan_returns_the_first_nan():
    x = torch.randn(2, 1500)
    x[0, 1400] = float("nan")
    x[0, 1450] = float("nan")
    x[1, 3] = float("nan")
    check(lambda x: torch.argmax(x, dim=1), x)
    check(lambda x: x.amax(dim=1), x)


def test_max_propagates_nan_from_any_chunk():
    x = torch.randn(3000)
    x[2999] = float("nan")
    check(lambda x: x.amax(), x)


# ---------------------------------------------------------------- scalars and columns


@pytest.mark.parametrize("dtype", DTYPES)
def test_scalar_loss_with_a_short_last_chunk(dtype):
    # 4001 is prime: the chunks cannot divide it; the last one is masked
    x, y = torch.randn(4001).to(dtype), torch.randn(4001).to(dtype)
    compiled = check(lambda x, y: ((x - y) ** 2).mean(), x, y, **tolerance(dtype))
    assert compiled.kernel_count == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_var_of_a_prime_length_counts_only_real_elements(dtype):
    x = (torch.randn(4001) * 3 + 7).to(dtype)
    check(lambda x: torch.var(x), x, **tolerance(dtype))
    check(lambda x: torch.var_mean(x, correction=0), x, **tolerance(dtype))


def test_prod_and_any_all():
    x = torch.rand(2000) * 0.2 + 0.9
    check(lambda x: x.prod(), x, rtol=1e-4, atol=1e-6)
    flags = torch.rand(3001) > 0.999
    check(lambda f: (f.any(), f.all(), (~f).all()), flags)


@pytest.mark.parametrize("dtype", DTYPES)
def test_column_sum_partials_keep_the_contiguous_dim_innermost(dtype):
    # the bias gradient of a linear layer: sum over tokens of [tokens, hidden]
    grad = torch.randn(1001, 37).to(dtype)
    compiled = check(lambda g: g.sum(dim=0), grad, **tolerance(dtype))
    schedule = compiled.artifact("schedule")
    assert re.search(r"outer=\[\d+, 37\]", schedule)  # partials [S, hidden]: hidden contiguous
    check(lambda g: (g * 2).sum(dim=0, keepdim=True), grad, **tolerance(dtype))
    check(lambda g: torch.var_mean(g, dim=0), grad, **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_weight_gradient_is_a_column_reduction(dtype):
    # sum over tokens of grad * x * rstd[token]: the per-token factor is read along the
    # rows, but it is one value per row for every output, so the split stays by columns
    grad, x = torch.randn(1001, 37).to(dtype), torch.randn(1001, 37).to(dtype)
    rstd = torch.rand(1001, 1) + 0.5
    fn = lambda g, x, r: (g.float() * x.float() * r).sum(dim=0)  # noqa: E731
    compiled = check(fn, grad, x, rstd, **tolerance(dtype))
    assert re.search(r"outer=\[\d+, 37\]", compiled.artifact("schedule"))


def test_large_column_reduction_loops_over_wide_tiles():
    # compiled, not run: the bias gradient of [16384 tokens, 768]
    grad = torch.empty(16384, 768)
    compiled = compile_split(lambda g: g.sum(dim=0), grad, policy=SplitPolicy())
    partial, final = compiled.artifact("codegen").split("@triton.jit")[1:]
    assert "for r0offset in range" in partial  # XBLOCK columns by R0BLOCK rows a step
    assert "for r0offset in range" not in final  # the partials in one block


def test_short_column_reduction_reads_whole_rows():
    # grouped-query attention's backward: 4 query heads' gradients summed per key head,
    # [8, 4 kv heads, 4 repeats, 512 * 64] summed over the repeats (compiled, not run)
    grad = torch.empty(8, 4, 4, 512 * 64)
    compiled = compile_split(lambda g: g.sum(dim=2), grad, policy=SplitPolicy())
    (kernel,) = compiled.artifact("codegen").split("@triton.jit")[1:]
    assert "for r0offset in range" not in kernel  # one block of 4 rows, not a 64-row tile
    # just over the size where column reductions loop, run against eager
    check(lambda g: g.sum(dim=2), torch.randn(2, 4, 4, 8200), policy=SplitPolicy())


def test_partial_kernel_keeps_its_pointwise_producers():
    x, y = torch.randn(6, 3, 11, 13), torch.randn(3, 1, 1)
    compiled = check(lambda x, y: (torch.relu(x * y) + 1).sum(dim=(0, 2, 3)), x, y)
    assert compiled.kernel_count == 2  # no kernel of its own for relu(x * y) + 1


# ---------------------------------------------------------------- when to split


def test_no_split_without_a_policy_or_with_many_outputs():
    x = torch.randn(6, 3, 11, 13)
    gm = trace(lambda x: x.sum(dim=(0, 2, 3)), x)
    with split_reductions(SplitPolicy(enabled=False)):
        assert compile_graph(gm, [x], options=OPTIONS).kernel_count == 1
    many = torch.randn(100, 300)
    compiled = check(lambda x: x.sum(dim=1), many)
    assert compiled.kernel_count == 1  # 100 programs (one per row) > max_programs


def _loader(idx, ridx):
    from inductor_codegen.ir import Load

    return Load("x", idx[0] * 4096 + ridx[0], torch.float32)


def _column(idx, ridx, width=4096):
    from inductor_codegen.ir import Load

    return Load("x", idx[0] + ridx[0] * width, torch.float32)


def test_plan_from_static_sizes_only():
    big = (sympy.Integer(64),), (sympy.Integer(100352),)
    with split_reductions(SplitPolicy()):
        plan = plan_split(*big, _loader, "sum")
        assert plan is not None and plan.splits * plan.chunk >= 100352
        assert 64 * plan.splits >= 1024  # enough programs for a GPU
        column = plan_split((sympy.Integer(4096),), (sympy.Integer(100352),), _column, "sum")
        assert column is not None and column.outer_first  # 64 programs of 64 columns
        s0 = sympy.Symbol("s0", integer=True, positive=True)
        assert plan_split((sympy.Integer(64),), (s0,), _loader, "sum") is None
        small = (sympy.Integer(64),), (sympy.Integer(512),)
        assert plan_split(*small, _loader, "sum") is None
        many = (sympy.Integer(4096),), (sympy.Integer(100352),)
        assert plan_split(*many, _loader, "sum") is None
    assert plan_split(*big, _loader, "sum") is None  # no policy: C++ and plain lowering


def test_small_column_reduction_splits_where_a_row_reduction_would_not():
    # T5's norm weight gradient: 512 columns summed over 1024 tokens is 8 programs of
    # 64 columns unsplit; a row reduction of that size has 512 programs and stays whole
    sizes = (sympy.Integer(512),), (sympy.Integer(1024),)
    with split_reductions(SplitPolicy()):
        plan = plan_split(*sizes, functools.partial(_column, width=512), "sum")
        assert plan is not None and plan.outer_first and plan.splits >= 8
        assert plan_split(*sizes, _loader, "sum") is None
        tiny = (sympy.Integer(64),), (sympy.Integer(1024),)  # 64K elements: not worth two launches
        assert plan_split(*tiny, functools.partial(_column, width=64), "sum") is None


def test_default_policy_splits_a_million_element_loss():
    x = torch.randn(1 << 20)
    compiled = check(lambda x: (x * x).sum(), x, policy=SplitPolicy(), rtol=1e-4, atol=1e-2)
    assert compiled.kernel_count == 2


# ---------------------------------------------------------------- batch norm through ember


def test_batch_norm_training_through_ember_compile(monkeypatch):
    ember = pytest.importorskip("ember")
    import inductor_codegen.codegen.triton.options as triton_options

    monkeypatch.setattr(triton_options, "wants_triton", lambda inputs, options: True)
    torch.manual_seed(0)
    eager_bn = torch.nn.BatchNorm2d(3).train().to(DEVICE)
    compiled_bn = torch.nn.BatchNorm2d(3).train().to(DEVICE)
    compiled_bn.load_state_dict(eager_bn.state_dict())
    x = torch.randn(6, 3, 11, 13, device=DEVICE) * 2 + 3
    x_eager, x_compiled = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad = torch.randn(6, 3, 11, 13, device=DEVICE)
    with split_reductions(SMALL):
        out = ember.compile(compiled_bn, backend="inductor")(x_compiled)
        out.backward(grad)
    expected = eager_bn(x_eager)
    expected.backward(grad)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x_compiled.grad, x_eager.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled_bn.weight.grad, eager_bn.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled_bn.bias.grad, eager_bn.bias.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled_bn.running_mean, eager_bn.running_mean)
    torch.testing.assert_close(compiled_bn.running_var, eager_bn.running_var)


# ---------------------------------------------------------------- batch norm's x_hat, NHWC -> NCHW


@pytest.mark.parametrize("dtype", DTYPES)
def test_channels_last_to_nchw_tiles_run_along_channels(dtype):
    # batch norm's backward recomputes (x - mean) * rstd from channels-last x into NCHW
    x = torch.randn(2, 8, 5, 6).to(dtype).contiguous(memory_format=torch.channels_last)
    mean, rstd = torch.randn(1, 8, 1, 1), torch.rand(1, 8, 1, 1)

    def x_hat(x, mean, rstd):
        return ((x[:, :, :, :5].float() - mean) * rstd).contiguous()

    compiled = check(x_hat, x, mean, rstd)
    source = compiled.artifact("codegen")
    assert "YBLOCK" in source  # a 2D tile: W contiguous for the store ...
    assert "x1 = (yindex % 8)" in source  # ... and C, contiguous for the load, along yindex


# ---------------------------------------------------------------- OpInfo reductions, split


# Splits even OpInfo's small samples: every reduction of two or more elements.
TINY = SplitPolicy(
    min_reduction_numel=2,
    min_total_numel=2,
    min_column_total_numel=2,
    max_programs=1 << 20,
    target_programs=64,
    target_column_programs=64,
    column_block=4,
    min_chunk=1,
    min_column_chunk=1,
    max_splits=8,
)
SPLIT_OPS = {
    "sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "var", "var_mean", "std",
    "std_mean", "any", "all", "max", "min", "nansum", "logsumexp", "softmax", "log_softmax",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "linalg.vector_norm",
}  # fmt: skip


def _split_cases():
    try:  # torch's OpInfo database needs expecttest (not every torch install has it)
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError:
        return [pytest.param(None, marks=pytest.mark.skip(reason="OpInfo needs expecttest"))]

    cases = []
    for info in op_db:
        if info.name in SPLIT_OPS and torch.float32 in info.supported_dtypes(DEVICE):
            name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
            cases.append(pytest.param(info, id=name))
    return cases


@pytest.mark.parametrize("info", list(_split_cases()))
def test_opinfo_reductions_split(info):
    from opinfo_samples import sample_fns

    checked = 0
    for fn, tensors in sample_fns(info, DEVICE, limit=4):
        try:
            expected = fn(*tensors)
            gm = trace(fn, *tensors)
        except Exception:  # the reference front end cannot trace this sample
            continue
        with split_reductions(TINY):
            compiled = compile_graph(gm, list(tensors), options=OPTIONS)
        got = compiled(*[t.clone() for t in tensors])
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=1e-4, atol=1e-5)
        checked += 1
    if not checked:
        pytest.skip("no sample could be traced by make_fx")


# ---------------------------------------------------------------- symbolic sizes


def test_symbolic_sizes_are_not_split_and_run_at_every_size():
    from dynamic_graphs import trace_symbolic

    def fn(x):
        return x.sum(0), torch.var_mean(x, dim=0), x.amax()

    def make(n):
        return (torch.randn(n, 4, device=DEVICE),)

    gm, examples = trace_symbolic(fn, *make(600), dynamic={0: [0]})
    with split_reductions(SMALL):
        compiled = compile_graph(gm, examples, options=OPTIONS)
    assert "range(0, ks0, R0BLOCK)" in compiled.artifact("codegen")  # one kernel for every size
    assert all("outer=[4]" in line or "outer=[]" in line for line in _kernel_lines(compiled))
    for n in (600, 2, 1001):
        (x,) = make(n)
        expected = torch.utils._pytree.tree_leaves(fn(x))
        torch.testing.assert_close(list(compiled(x)), expected, rtol=1e-4, atol=1e-4)


def _kernel_lines(compiled) -> list[str]:
    return [line for line in compiled.artifact("schedule").splitlines() if "kernel " in line]
