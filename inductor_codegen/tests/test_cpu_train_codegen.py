"""C++ kernels of training graphs: values hoisted out of inner loops, column sums
tiled along the contiguous dim, float accumulators for short sums, parallel loops
over every node's work. Results against eager; the kernel text where the shape of
the code is the point (what runs once per row, not once per element).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import check

from inductor_codegen.codegen.cpp.kernel import FLOAT_ACCUMULATE_MAX


def _layer_norm_backward(x, g, w, b):
    y = F.layer_norm(x, (x.shape[-1],), w, b)
    return torch.autograd.grad(y, [x, w, b], g)


def _softmax_backward(x, g):
    return torch.autograd.grad(torch.softmax(x, -1), [x], g)


def _kernel_lines(compiled) -> list[str]:
    return compiled.artifact("codegen").splitlines()


@pytest.mark.parametrize("rows,width", [(64, 96), (300, 33)])
def test_layer_norm_backward_matches_eager(rows, width):
    torch.manual_seed(0)
    x = torch.randn(rows, width, requires_grad=True)
    w = torch.randn(width, requires_grad=True)
    b = torch.randn(width, requires_grad=True)
    check(_layer_norm_backward, x, torch.randn(rows, width), w, b, rtol=1e-4, atol=1e-4)


def test_row_statistics_are_computed_once_per_row():
    x = torch.randn(64, 96, requires_grad=True)
    w, b = torch.randn(96, requires_grad=True), torch.randn(96, requires_grad=True)
    compiled = check(_layer_norm_backward, x, torch.randn(64, 96), w, b, rtol=1e-4, atol=1e-4)
    # Every sqrt (the inverse standard deviation) sits outside the innermost loops:
    # after it, a loop opens before any loop closes.
    lines = _kernel_lines(compiled)
    for k, line in enumerate(lines):
        if "std::sqrt" in line:
            after = [ln for ln in lines[k + 1 :] if "for (int64_t" in ln or ln.strip() == "}"]
            assert after and "for (int64_t" in after[0], compiled.artifact("codegen")


def test_column_sum_with_row_statistics_is_tiled():
    """The layer-norm weight gradient reads per-row statistics; it still reads rows in order."""
    x = torch.randn(128, 80, requires_grad=True)
    w, b = torch.randn(80, requires_grad=True), torch.randn(80, requires_grad=True)
    compiled = check(_layer_norm_backward, x, torch.randn(128, 80), w, b, rtol=1e-4, atol=1e-4)
    assert "x0_tile" in compiled.artifact("codegen")


def test_softmax_backward_matches_eager():
    torch.manual_seed(0)
    x = torch.randn(4, 8, 50, requires_grad=True)
    check(_softmax_backward, x, torch.randn(4, 8, 50), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [FLOAT_ACCUMULATE_MAX, FLOAT_ACCUMULATE_MAX + 1, 100_000])
def test_sums_short_and_long_match_eager(size):
    torch.manual_seed(0)
    x = torch.rand(size) + 0.5  # all positive: the relative error of the sum is meaningful
    compiled = check(lambda x: (x.sum(), x.mean(), (x * 3).sum()), x, rtol=2e-6, atol=0)
    text = compiled.artifact("codegen")
    assert ("float acc" in text) == (size <= FLOAT_ACCUMULATE_MAX)


def test_bias_gradient_column_sum():
    torch.manual_seed(0)
    grad = torch.randn(256, 48)
    check(lambda g: (g.sum(0), (g * g).sum(0)), grad, rtol=1e-5, atol=1e-5)


def test_many_small_nodes_share_a_parallel_loop():
    """Eight copies of 4096 elements each: together enough work for the threads."""
    xs = [torch.randn(16, 256) for _ in range(8)]

    def fn(*xs):
        return [x.t().contiguous() * (k + 1) for k, x in enumerate(xs)]

    compiled = check(fn, *xs)
    assert "#pragma omp parallel for" in compiled.artifact("codegen")


@pytest.mark.parametrize("shape", [(2, 3, 128, 64), (3, 5, 4, 40, 48)])
def test_short_outer_loops_share_one_parallel_loop(shape):
    x = torch.randn(shape)
    compiled = check(lambda x: (x.transpose(1, 2) * 2).contiguous(), x)
    assert "for (int64_t x0_x1" in compiled.artifact("codegen")


@pytest.mark.parametrize("shape", [(40, 37), (16, 16), (3, 50, 21)])
def test_transposed_reads_go_in_square_tiles(shape):
    """A ReLU backward stored transposed (for a weight-gradient matmul) and straight."""
    torch.manual_seed(0)
    x, g = torch.randn(shape), torch.randn(shape)

    def fn(x, g):
        masked = torch.where(x <= 0, 0.0, g)
        return masked.transpose(-1, -2).contiguous() * 2, masked + 1

    compiled = check(fn, x, g)
    assert "_tile += " in compiled.artifact("codegen")


@pytest.mark.parametrize("shape", [(512, 512), (300, 77), (3, 40, 17)])
def test_transposed_stores_go_in_square_tiles(shape):
    """`x.t() + y`: the result takes the transposed input's strides, so the stores run
    along the second-last loop and `y` is read across it. The element loop the stores
    run along goes innermost, in tiles (untiled, every store missed the cache)."""
    torch.manual_seed(0)
    x, y = torch.randn(shape).transpose(-1, -2).contiguous(), torch.randn(shape)
    x[..., 0, :3] = torch.tensor([float("nan"), -0.0, float("inf")])

    def fn(x, y):
        xt = x.transpose(-1, -2)
        return xt + y * 2, torch.where(xt > 0, y, xt)

    compiled = check(fn, x, y)
    code = compiled.artifact("codegen")
    assert "_tile += " in code, code


def test_straight_reads_are_not_tiled():
    x = torch.randn(64, 48)
    compiled = check(lambda x: x.exp() * 2, x)
    assert "_tile" not in compiled.artifact("codegen")


@pytest.mark.parametrize("heads,head_dim", [(4, 32), (3, 16)])
def test_head_merge_copy_loops_without_division(heads, head_dim):
    """[batch, heads, seq, dim] -> [batch * seq, heads * dim]: split loops, linear indices."""
    torch.manual_seed(0)
    x = torch.randn(2, heads, 24, head_dim)

    def fn(x):
        return (x.permute(0, 2, 1, 3).reshape(2 * 24, heads * head_dim) * 2).contiguous()

    compiled = check(fn, x)
    text = compiled.artifact("codegen")
    assert " / " not in text and " % " not in text, text


def test_stride_two_windows_keep_their_loops():
    """Max pooling divides by 2: no loop of 2 elements is split off the vector loop."""
    x = torch.randn(3, 5, 16, 16)
    compiled = check(lambda x: F.max_pool2d(x, 2), x)
    assert "< 2; ++" not in compiled.artifact("codegen")


def test_loops_that_never_run_read_nothing():
    """Empty tensors: a load that does not depend on a loop of zero trips stays inside it."""
    table = torch.randn(5)
    empty_index, scalar_index = torch.zeros(0, dtype=torch.int64), torch.tensor(3)

    def fn(t, i, j):
        return torch.gather(t, 0, i), torch.gather(t.expand(2, 5)[:, :0], 1, j.expand(2, 0))

    check(fn, table, empty_index, scalar_index)
    rows = torch.randn(4, 0)
    check(lambda x, w: (x * w[0]).sum(-1), rows, torch.randn(3))


def test_per_channel_values_are_computed_once_per_channel():
    """Batch norm + ReLU + max pooling (inference form): the channel's scale and shift
    are computed before the loops over the channel's pixels."""
    torch.manual_seed(0)
    args = (torch.randn(4, 6, 16, 16), torch.randn(6), torch.rand(6) + 1, torch.randn(6))

    def fn(x, mean, var, weight):
        scale = torch.rsqrt(var[:, None, None] + 1e-5) * weight[:, None, None]
        return F.max_pool2d(torch.relu((x - mean[:, None, None]) * scale), 2)

    compiled = check(fn, *args)
    lines = _kernel_lines(compiled)
    for k, line in enumerate(lines):
        if "std::sqrt" in line:
            after = [ln for ln in lines[k + 1 :] if "for (int64_t" in ln or ln.strip() == "}"]
            assert after and "for (int64_t" in after[0], compiled.artifact("codegen")


@pytest.mark.parametrize("with_indices", [False, True])
def test_max_pool_input_is_stored_when_its_indices_are_read(with_indices):
    torch.manual_seed(0)
    args = (torch.randn(2, 4, 12, 12), torch.randn(4), torch.randn(4))

    def fn(x, w, b):
        y = torch.relu(x * w[:, None, None] + b[:, None, None])
        values, indices = torch.ops.aten.max_pool2d_with_indices(y, [2, 2], [2, 2])
        return (values, indices) if with_indices else values

    compiled = check(fn, *args)
    # inference: one kernel (the producer inside the window); training: two
    assert compiled.kernel_count == (2 if with_indices else 1)


def test_max_pool_backward_through_a_stored_input():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    w = torch.randn(3, requires_grad=True)

    def fn(x, w, g):
        y = F.max_pool2d(torch.relu(x * w[:, None, None] + 1), 2)
        return torch.autograd.grad(y, [x, w], g)

    check(fn, x, w, torch.randn(2, 3, 4, 4), rtol=1e-5, atol=1e-5)


def test_column_mean_with_an_epilogue_is_tiled():
    # A mean over the rows of [N, H*W, C] (channels-last average pooling): the sum and
    # its division in one kernel, still read along C in tiles.
    x = torch.randn(4, 96, 40)
    compiled = check(lambda t: (t.mean(1) * 2.0).relu(), x, rtol=1e-5, atol=1e-5)
    assert "x1_tile" in compiled.artifact("codegen"), compiled.artifact("codegen")
