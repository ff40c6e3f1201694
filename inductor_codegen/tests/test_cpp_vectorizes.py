"""The generated C++ loops are vectorized by the installed compiler.

Whether gcc vectorizes a loop of selects depends on its version and on how the
loop is spelled: with floating-point traps off, gcc 13 left a chain of
NaN-propagating maximums after ReLUs (a max pool over a batch norm) scalar and
branchy, about 10x slower; with traps on, gcc 12 and 13 could not if-convert a
loop storing a ReLU mask while comparisons trapped on NaN. Each program here is
compiled by the code generator, and the compiler's own report must say that
every kernel has a vectorized loop (or one turned into memcpy/memset).
A concatenation or a pad loads in a branch per piece, which gcc cannot
if-convert: the loop is split where the pieces meet. gcc 12 leaves a bool to
float conversion (a dropout mask) scalar: it goes through int32. gcc 12 leaves an
argmax spelled as three or more selects scalar where only the index is stored (max
pool's indices): an integer select is a bit blend.
"""

from __future__ import annotations

import operator
import re
import shutil

import pytest
import sympy
import torch
import torch.nn.functional as F
from graph_helpers import compile_fn

from inductor_codegen.codegen.cpp.build import KernelLibrary
from inductor_codegen.codegen.cpp.loop_split import loop_split, substitute
from inductor_codegen.codegen.cpp.vector_report import kernel_vector_notes
from inductor_codegen.ir import Constant, IndexValue, Op

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture(autouse=True)
def _kernels_compiled_into_each_cache(monkeypatch):
    """A kernel loaded earlier in the process (the same source from another test) is
    compiled again into this test's cache folder, where its report is read."""
    monkeypatch.setattr(KernelLibrary, "_loaded", {})


def _kernel_reports(cache_dir) -> dict[str, list[str]]:
    """For each generated kernel, the compiler's vectorization notes inside it."""
    reports = {}
    for source in sorted(cache_dir.rglob("*.cpp")):
        reports.update(kernel_vector_notes(source))
    return reports


def _assert_every_kernel_vectorized(cache_dir):
    reports = _kernel_reports(cache_dir)
    assert reports, "no C++ kernel was generated"
    scalar = [name for name, notes in reports.items() if not notes]
    assert not scalar, f"kernels left scalar by the installed g++: {scalar}"


def test_batch_norm_relu_max_pool_between_convolutions_is_vectorized(tmp_path):
    # a conv net's block: the convolutions run channels-last, and the kernel between
    # them (batch norm, ReLU, a 2x2 max pool) reads and writes that layout
    torch.manual_seed(0)
    x = torch.randn(8, 3, 32, 32)
    first, second = torch.randn(32, 3, 3, 3), torch.randn(16, 32, 3, 3)
    mean, var = torch.randn(32), torch.rand(32) + 0.5
    weight, bias = torch.randn(32), torch.randn(32)

    def f(x, first, mean, var, weight, bias, second):
        y = F.batch_norm(F.conv2d(x, first, padding=1), mean, var, weight, bias, training=False)
        return F.conv2d(F.max_pool2d(F.relu(y), 2), second, padding=1)

    args = (x, first, mean, var, weight, bias, second)
    compiled, _ = compile_fn(f, *args, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(*args), f(*args), rtol=1e-4, atol=1e-4)
    _assert_every_kernel_vectorized(tmp_path)


def test_relu_with_a_stored_mask_is_vectorized(tmp_path):
    x = torch.randn(4096)
    x[::7] = float("nan")

    def f(x):
        y = torch.relu(x * 2)
        return y, y <= 0, y > 1

    compiled, _ = compile_fn(f, x, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(x), f(x), equal_nan=True)
    _assert_every_kernel_vectorized(tmp_path)


def test_float_comparisons_with_nan_and_mixed_types_match_eager(tmp_path):
    x = torch.tensor([float("nan"), -1.0, 0.0, -0.0, 1.0, float("inf"), -float("inf")] * 9)
    i = torch.arange(63) - 30

    def f(x, i):
        return (x < 0, x <= 0, x > 0, x >= 0, x < i, i >= x, i < 3, torch.where(x > 0, x, i))

    compiled, _ = compile_fn(f, x, i, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(x, i), f(x, i), equal_nan=True)


def test_concatenation_along_the_innermost_dim_is_vectorized(tmp_path):
    # attention's backward joins the gradients of q, k and v, each (batch, head, token,
    # feature) or k's (batch, head, feature, token), into (batch, token, 3 * features):
    # each piece loads from its own input, and the loop is split where the pieces
    # meet, so no load sits in a branch
    q, k, v = torch.randn(2, 4, 64, 32), torch.randn(2, 4, 32, 64), torch.randn(2, 4, 64, 32)
    q[0, 0, 0, :4] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")])

    def f(q, k, v):
        pieces = (q * 0.5, k.transpose(-1, -2) * 0.5, v)
        return torch.cat([p.transpose(1, 2).reshape(2, 64, 128) for p in pieces], dim=-1)

    compiled, _ = compile_fn(f, q, k, v, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(q, k, v), f(q, k, v), equal_nan=True)
    _assert_every_kernel_vectorized(tmp_path)


def test_padding_and_reversed_concatenation_are_vectorized(tmp_path):
    # a pad is a select between a fill and a load (both sides of the window); the
    # flipped piece's index runs down as the loop variable runs up
    x = torch.randn(16, 37)
    x[3, 5] = -0.0

    def f(x):
        return F.pad(x, (3, 2), value=-1.5), torch.cat([x, x.flip(-1)], -1), F.pad(x, (-2, 4))

    compiled, _ = compile_fn(f, x, options={"cache_dir": tmp_path})
    for actual, expected in zip(compiled(x), f(x)):
        torch.testing.assert_close(actual, expected)
        assert torch.equal(actual.signbit(), expected.signbit())
    _assert_every_kernel_vectorized(tmp_path)


def test_dropout_mask_times_input_is_vectorized(tmp_path):
    # a stored bool mask read back and turned into float (dropout's backward)
    x, noise = torch.randn(8, 4096), torch.rand(8, 4096)

    def f(x, noise):
        keep = noise > 0.1
        return x * keep.float() * (1 / 0.9), keep, (x * keep).double()

    compiled, _ = compile_fn(f, x, noise, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(x, noise), f(x, noise))
    _assert_every_kernel_vectorized(tmp_path)


def test_split_loops_match_eager_at_the_edges_of_their_pieces(tmp_path):
    # pieces read forwards and backwards (a flipped concatenation: the index falls as
    # the loop variable rises), pads cutting into the input, empty and one-wide
    # pieces, masks stored as well as selected on
    x, y = torch.randn(5, 7, 13), torch.randn(5, 7, 1)
    x[0, 0, :4] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")])

    def f(x, y):
        joined = torch.cat([x, y, x[..., :0], x * 2], -1)
        return (
            joined.flip(-1),
            F.pad(x, (-3, 5), value=float("nan")),
            F.pad(x, (2, -4)),
            F.pad(x, (0, 0, 1, 2)) > 0,
            torch.cat([y, x.flip(-1)], -1) + 1,
        )

    compiled, _ = compile_fn(f, x, y, options={"cache_dir": tmp_path})
    for actual, expected in zip(compiled(x, y), f(x, y)):
        torch.testing.assert_close(actual, expected, equal_nan=True)
        assert torch.equal(actual.signbit(), expected.signbit())


@pytest.mark.parametrize("name", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize("slope", [1, -1])
@pytest.mark.parametrize("mirrored", [False, True])
def test_loop_split_decides_each_condition_as_the_comparison_would(name, slope, mirrored):
    # every comparison of `slope * v + 5` with 9, on either side, over v in [-20, 20)
    v, rest = sympy.Symbol("y0", integer=True), 5
    position = IndexValue(slope * v + rest, torch.int64)
    bound = Constant(9, torch.int64)
    args = (bound, position) if mirrored else (position, bound)
    cond = Op(name, args, torch.bool)
    value = Op("masked", (cond, Constant(1.0, torch.float32), Constant(0.0, torch.float32)),
               torch.float32)  # fmt: skip
    split = loop_split([value], v)
    assert split is not None and len(split.thresholds) == 1
    (threshold,) = split.thresholds
    compare = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}[name]
    for point in range(-20, 20):
        piece = 0 if point < int(threshold) else 1
        decided = substitute(value, split.piece_values(piece))
        left, right = slope * point + rest, 9
        expected = compare(right, left) if mirrored else compare(left, right)
        assert decided == Constant(float(expected), torch.float32), (point, piece)


def test_loads_of_a_piece_stay_inside_its_loop(tmp_path):
    # the second piece reads `e[batch, head - 4]`, the same for each feature: moved out
    # of its loop (before the split), it would read e[-4] for the first piece's heads
    q, e = torch.randn(2, 4, 64, 32), torch.randn(2, 4)

    def f(q, e):
        broadcast = e[:, None, :, None].expand(2, 64, 4, 32).reshape(2, 64, 128)
        return torch.cat([q.transpose(1, 2).reshape(2, 64, 128), broadcast * 2], -1)

    compiled, _ = compile_fn(f, q, e, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(q, e), f(q, e))
    (source,) = tmp_path.rglob("*.cpp")
    kernel = source.read_text().split('extern "C" void kernel_', 1)[1].splitlines()
    first_piece = next(i for i, line in enumerate(kernel) if re.search(r"< \w+_split0;", line))
    loads = [i for i, line in enumerate(kernel) if "= in_ptr" in line]
    assert loads and min(loads) > first_piece, "\n".join(kernel)


def _pool_input(shape):
    """Random values with NaNs (one or two in a window), ties and -inf windows."""
    torch.manual_seed(0)
    x = torch.randn(shape)
    x[0, 0, 0, :4] = float("nan")  # every element of a 2x2 window's top row
    x[0, 1, 2, 3] = float("nan")
    x[0, 1, 3, 2] = float("nan")
    x[0, 2, :2, :2] = float("-inf")  # a window of -inf: its first index
    x[0, 3, :4, :4] = 1.5  # ties: the first index of each window
    x[1, 0, 4:6, 4:6] = torch.tensor([[2.0, -float("inf")], [2.0, float("nan")]])
    x[1, 1, :, 1::2] = x[1, 1, :, ::2]  # ties along a row
    x[1, 2] = float("-inf")
    return x


@pytest.mark.parametrize(
    "kernel, stride, padding", [(2, 2, 0), (3, 2, 1), (3, 1, 0), (2, 1, 0), (3, 3, 0)]
)
def test_max_pool_indices_are_vectorized_and_match_eager(tmp_path, kernel, stride, padding):
    # the indices are a chain of int64 selects, one a window element, each driven by a
    # float comparison (`v > max || isnan(v)`); gcc 12 left three or more such selects
    # scalar, and vectorizes them as a bit blend
    x = _pool_input((2, 8, 16, 16))

    def f(x):
        return F.max_pool2d(x, kernel, stride, padding, return_indices=True)

    compiled, _ = compile_fn(f, x, options={"cache_dir": tmp_path})
    (values, indices), (expected_values, expected_indices) = compiled(x), f(x)
    torch.testing.assert_close(values, expected_values, equal_nan=True)
    assert torch.equal(indices, expected_indices)
    if padding == 0:  # a padded window loads under a mask, in a branch
        _assert_every_kernel_vectorized(tmp_path)


def test_max_pool_indices_channels_last_and_three_dims_match_eager(tmp_path):
    x = _pool_input((2, 8, 16, 16)).contiguous(memory_format=torch.channels_last)
    y = _pool_input((2, 8, 16, 16)).reshape(2, 8, 4, 8, 8)

    def f(x, y):
        return (
            F.max_pool2d(x, 2, return_indices=True),
            F.max_pool3d(y, 2, return_indices=True),
            F.max_pool2d(-x, (1, 3), (1, 2), return_indices=True),
        )

    compiled, _ = compile_fn(f, x, y, options={"cache_dir": tmp_path})
    for actual, expected in zip(compiled(x, y), f(x, y)):
        torch.testing.assert_close(actual[0], expected[0], equal_nan=True)
        assert torch.equal(actual[1], expected[1])


@pytest.mark.parametrize("stages", [3, 5])
@pytest.mark.parametrize(
    "dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64], ids=str
)
def test_argmax_chain_of_integer_selects_is_vectorized_and_exact(tmp_path, dtype, stages):
    # an argmax over columns spelled as selects: the running maximum only decides, the
    # index is stored; gcc 12 left three or more such stages scalar. The indices run
    # between the type's extremes (a blend must not overflow); NaN, ties and -inf
    torch.manual_seed(0)
    xs = torch.randn(stages, 4096)
    xs[:, ::7] = xs[0, ::7]
    xs[1, ::5] = float("nan")
    xs[2, ::3] = float("nan")
    xs[:, ::11] = -float("inf")
    info = torch.iinfo(dtype)
    ramp = torch.linspace(info.min, info.max, 4096, dtype=torch.float64).to(dtype)

    def f(xs, ramp):
        best, index = torch.full_like(xs[0], -float("inf")), ramp
        for k in range(stages):
            take = (xs[k] > best) | xs[k].isnan()
            best = torch.where(take, xs[k], best)
            index = torch.where(take, ramp.flip(0) if k % 2 else ramp - k, index)
        return index

    compiled, _ = compile_fn(f, xs, ramp, options={"cache_dir": tmp_path})
    actual, expected = compiled(xs, ramp), f(xs, ramp)
    assert actual.dtype == expected.dtype and torch.equal(actual, expected)
    _assert_every_kernel_vectorized(tmp_path)


def test_integer_select_inside_a_padded_window_matches_eager(tmp_path):
    # a select in a masked branch (a pad's window) keeps `?:`: its sides are loads
    x, i, j = torch.randn(6, 9), torch.randint(-50, 50, (6, 9)), torch.randint(-50, 50, (6, 9))

    def f(x, i, j):
        return F.pad(torch.where(x > 0, i, j), (2, 3), value=7), F.pad(
            torch.where(x > 0, i, i), (1, 0)
        )

    compiled, _ = compile_fn(f, x, i, j, options={"cache_dir": tmp_path})
    for actual, expected in zip(compiled(x, i, j), f(x, i, j)):
        assert torch.equal(actual, expected)


@pytest.mark.parametrize("shape", [(64, 48), (3, 40, 37), (16, 16)])
def test_transposed_tiles_are_vectorized_and_exact(tmp_path, shape):
    # a kernel reading its nest transposed runs in 16 x 16 tiles; the transposed read of
    # each whole tile goes through vector registers into a stack copy read in order
    # (gcc 12 left the strided read scalar). Partial tiles at the edges, the stores
    # along the last loop (f) or the second-last (g: the results take the transposed
    # input's strides), NaN / -0.0 / inf, int32 bits
    torch.manual_seed(0)
    x, y = torch.randn(shape), torch.randn(shape).transpose(-1, -2).contiguous()
    x.view(-1)[:4] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")])
    i = torch.randint(-(2**31), 2**31 - 1, shape, dtype=torch.int32)

    def f(x, y, i):
        yt = y.transpose(-1, -2)
        return x + yt, (x.transpose(-1, -2) * 0.5).contiguous(), i.mT.contiguous() + 1

    def g(x, y):
        yt = y.transpose(-1, -2)
        return yt * 2 - x, yt.double() + torch.where(x > 0, x, -x).double()

    for fn, args in ((f, (x, y, i)), (g, (x, y))):
        compiled, _ = compile_fn(fn, *args, options={"cache_dir": tmp_path})
        for actual, expected in zip(compiled(*args), fn(*args)):
            assert actual.dtype == expected.dtype and actual.stride() == expected.stride()
            torch.testing.assert_close(actual, expected, equal_nan=True, rtol=0, atol=0)
            assert torch.equal(actual.signbit(), expected.signbit())
    source = "".join(p.read_text() for p in tmp_path.rglob("*.cpp"))
    assert "ember_transpose_tile<float>" in source and "ember_transpose_tile<int32_t>" in source
    _assert_every_kernel_vectorized(tmp_path)


@pytest.mark.parametrize(
    "shape, kernel, stride, padding, vectorized",
    [
        ((2, 8, 16, 16), 2, 2, 0, True),
        ((2, 8, 16, 16), 3, 2, 1, True),
        ((2, 4, 15, 96), 3, 3, 0, True),
        ((2, 8, 14, 16), 4, 4, 1, True),
        ((2, 8, 16, 14), 3, 2, 1, True),
        ((2, 8, 16, 16), 3, 1, 1, True),
        # gcc 12 leaves it scalar: three residues and a clamped row (16 rows, stride 3)
        ((2, 4, 16, 96), 3, 3, 0, False),
        ((2, 8, 18, 17), 2, 2, 0, False),  # odd width: the loop is not unrolled by residue
    ],
)
def test_max_pool_backward_is_vectorized_and_matches_eager(
    tmp_path, shape, kernel, stride, padding, vectorized
):
    # windows that do not overlap: the gradient of input column w gathers from window
    # column (w + padding) // stride: the loop runs over the window column with each
    # residue of w unrolled (plain loads, no gathers), split where the candidate windows
    # leave the output; candidate rows outside it are read clamped and not picked.
    # Overlapping windows scatter per plane (test_cpp_max_pool_backward.py): the plane's
    # fill is vectorized. NaN, -inf windows and ties pick as eager does
    even = (*shape[:-1], shape[-1] + shape[-1] % 2)
    x = _pool_input(even)[..., : shape[-1]].contiguous()
    _, indices = F.max_pool2d(x, kernel, stride, padding, return_indices=True)
    grad = torch.randn(indices.shape)
    grad[0, 0, 0, :3] = torch.tensor([-0.0, float("inf"), float("nan")])

    def f(grad, x, indices):
        return torch.ops.aten.max_pool2d_with_indices_backward(
            grad, x, [kernel] * 2, [stride] * 2, [padding] * 2, [1, 1], False, indices
        )

    compiled, _ = compile_fn(f, grad, x, indices, options={"cache_dir": tmp_path})
    torch.testing.assert_close(compiled(grad, x, indices), f(grad, x, indices), equal_nan=True)
    if vectorized:
        _assert_every_kernel_vectorized(tmp_path)


def test_loops_indexing_by_a_quotient_unroll_their_residues_and_match_eager(tmp_path):
    # an input column read at (v + k) // s (nearest upsampling, a repeat_interleave) or
    # (v + k) % s (a tiled repeat) runs over the quotient, the s residues of v unrolled
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 16)
    x[0, 0, 0, :4] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")])
    y = torch.randn(5, 24)

    def f(x, y):
        return (
            F.interpolate(x, scale_factor=2, mode="nearest") * 2,
            F.interpolate(x, scale_factor=(1, 3), mode="nearest") + 1,
            y.repeat_interleave(4, dim=-1) - y.repeat(1, 4),
            F.pad(y, (1, 0)).repeat_interleave(2, dim=-1),
        )

    compiled, _ = compile_fn(f, x, y, options={"cache_dir": tmp_path})
    for actual, expected in zip(compiled(x, y), f(x, y)):
        torch.testing.assert_close(actual, expected, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(actual.signbit(), expected.signbit())
