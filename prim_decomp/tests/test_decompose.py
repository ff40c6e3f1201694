"""decompose(gm, table): graphs from make_fx, forward and backward, static and symbolic."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from prim_decomp import (
    PRIMS_KEPT,
    DecomposeError,
    core_aten,
    decompose,
    inductor_default,
    is_prim,
)
from prim_decomp import prims as prims_table

aten = torch.ops.aten
TO_PRIMS = core_aten | prims_table


def block(x, w, b, gamma, beta, target):
    """A transformer-ish block with a loss: linear, gelu, layer_norm, softmax, cross_entropy."""
    h = F.gelu(F.linear(x, w, b))
    h = F.layer_norm(h, [h.shape[-1]], gamma, beta)
    attn = torch.softmax(h @ h.t() / 4.0, dim=-1) @ h
    return F.cross_entropy(attn + F.silu(h), target)


def _block_inputs(rows: int = 6):
    torch.manual_seed(0)
    return [
        torch.randn(rows, 8),
        torch.randn(5, 8),
        torch.randn(5),
        torch.randn(5),
        torch.randn(5),
        torch.randint(0, 5, (rows,)),
    ]


def block_with_grads(*inputs):
    x, w = inputs[0], inputs[1]
    loss = block(*inputs)
    return (loss, *torch.autograd.grad(loss, [x, w]))


def _grad_inputs(rows: int = 6):
    inputs = _block_inputs(rows)
    inputs[0].requires_grad_(True)
    inputs[1].requires_grad_(True)
    return inputs


def _targets(gm) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("table_name", ["core_aten", "inductor_default", "prims"])
def test_forward_graph_matches_eager(table_name):
    table = {"core_aten": core_aten, "inductor_default": inductor_default, "prims": TO_PRIMS}
    table = table[table_name]
    inputs = _block_inputs()
    gm = make_fx(block, tracing_mode="fake")(*inputs)
    out = decompose(gm, table)
    torch.testing.assert_close(out(*inputs), block(*inputs))
    assert not (_targets(out) & set(table)), "an op of the table survived"
    for node in out.graph.nodes:
        if node.op in ("call_function", "placeholder"):
            assert "val" in node.meta, node.format_node()


def test_backward_graph_matches_eager():
    inputs = _grad_inputs()
    gm = make_fx(block_with_grads, tracing_mode="fake")(*inputs)
    assert aten.gelu_backward.default in _targets(gm)
    out = decompose(gm, inductor_default)
    assert aten.gelu_backward.default not in _targets(out)
    assert aten.mm.default in _targets(out)
    torch.testing.assert_close(out(*inputs), block_with_grads(*inputs))


def test_prims_table_leaves_only_prims():
    inputs = _grad_inputs()
    gm = make_fx(block_with_grads, tracing_mode="fake")(*inputs)
    out = decompose(gm, TO_PRIMS)
    allowed_python = {operator.getitem, aten.sym_size.int}
    leftover = {t for t in _targets(out) if not is_prim(t) and t not in PRIMS_KEPT | allowed_python}
    assert not leftover, f"not prims: {sorted(map(str, leftover))}"
    torch.testing.assert_close(out(*inputs), block_with_grads(*inputs))


def test_symbolic_shapes_survive():
    inputs = _block_inputs(6)
    gm = make_fx(block, tracing_mode="symbolic")(*inputs)
    for table in (inductor_default, TO_PRIMS):
        out = decompose(gm, table)
        for rows in (6, 11):
            other = _block_inputs(rows)
            torch.testing.assert_close(out(*other), block(*other))


def test_swapping_one_decomposition():
    def f(x):
        return F.gelu(x) * 2

    x = torch.randn(16)
    gm = make_fx(f, tracing_mode="fake")(x)
    mine = inductor_default.copy(name="tanh_gelu")

    @mine.register(aten.gelu.default, replace=True)
    def gelu_as_tanh(x, approximate="none"):
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + torch.tanh(inner))

    out = decompose(gm, mine)
    assert aten.tanh.default in _targets(out) and aten.erf.default not in _targets(out)
    torch.testing.assert_close(out(x), F.gelu(x, approximate="tanh") * 2)
    default = decompose(gm, inductor_default)
    assert aten.erf.default in _targets(default)


def test_without_keeps_an_op_whole():
    def f(x):
        return F.gelu(x) + F.silu(x)

    x = torch.randn(8)
    gm = make_fx(f, tracing_mode="fake")(x)
    out = decompose(gm, inductor_default.without(aten.gelu))
    assert aten.gelu.default in _targets(out)
    assert aten.silu.default not in _targets(out)
    torch.testing.assert_close(out(x), f(x))


def test_input_graph_is_not_modified():
    x = torch.randn(8)
    gm = make_fx(lambda x: F.silu(x), tracing_mode="fake")(x)
    before = gm.code
    decompose(gm, inductor_default)
    assert gm.code == before


def test_example_inputs_replace_missing_vals():
    x = torch.randn(4, 3)
    gm = make_fx(lambda x: F.hardswish(x), tracing_mode="real")(x)
    for node in gm.graph.nodes:
        node.meta.pop("val", None)
    with pytest.raises(DecomposeError, match="example_inputs"):
        decompose(gm, inductor_default)
    out = decompose(gm, inductor_default, example_inputs=[x])
    torch.testing.assert_close(out(x), F.hardswish(x))


def test_provenance_is_copied():
    x = torch.randn(4)
    gm = make_fx(lambda x: F.silu(x), tracing_mode="fake")(x)
    for node in gm.graph.nodes:
        node.meta["stack_trace"] = f"trace of {node.name}"
    out = decompose(gm, inductor_default)
    traces = {n.meta.get("stack_trace") for n in out.graph.nodes if n.op == "call_function"}
    assert traces == {"trace of silu"}


def _layer_programs():
    """(name, function of one float input, input shape): layers whose backward ops matter."""

    def embedding(x):
        table = torch.arange(40.0).view(10, 4) * x.sum()
        return F.embedding(torch.tensor([[1, 2], [2, 9]]), table)

    def smoothed_cross_entropy(x):
        return F.cross_entropy(x, torch.tensor([1, 0, 3]), label_smoothing=0.1)

    return {
        "nearest": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (2, 3, 4, 5)),
        "bilinear": (
            lambda x: F.interpolate(x, size=(7, 3), mode="bilinear", align_corners=False),
            (2, 3, 4, 5),
        ),
        "max_pool": (lambda x: F.max_pool2d(x, 3, 2, 1), (2, 3, 7, 6)),
        "avg_pool": (lambda x: F.avg_pool2d(x, 2, ceil_mode=True), (2, 3, 5, 5)),
        "adaptive_avg_pool": (lambda x: F.adaptive_avg_pool2d(x, 1), (2, 3, 4, 4)),
        "batch_norm_train": (
            lambda x: F.batch_norm(x, None, None, torch.ones(3), torch.zeros(3), training=True),
            (4, 3, 2, 2),
        ),
        "group_norm": (lambda x: F.group_norm(x, 3), (2, 6, 3)),
        "embedding": (embedding, (3,)),
        "label_smoothing": (smoothed_cross_entropy, (3, 5)),
        "pad_repeat_flip": (
            lambda x: F.pad(x, (1, 2, -1, 1), value=0.5).repeat(2, 1, 1).flip(1),
            (2, 3, 4),
        ),
        "sdpa_causal": (
            lambda x: F.scaled_dot_product_attention(x, x * 2, x + 1, is_causal=True),
            (2, 4, 5, 8),
        ),
    }


@pytest.mark.parametrize("tracing_mode", ["fake", "symbolic"])
@pytest.mark.parametrize("name", sorted(_layer_programs()))
def test_layer_forward_and_backward(name, tracing_mode):
    fn, shape = _layer_programs()[name]
    torch.manual_seed(0)
    x = torch.randn(shape, requires_grad=True)

    def with_grad(x):
        out = fn(x)
        return out, torch.autograd.grad(out.sum(), [x])[0]

    gm = make_fx(with_grad, tracing_mode=tracing_mode)(x)
    for table in (inductor_default, TO_PRIMS):
        out = decompose(gm, table)
        torch.testing.assert_close(out(x), with_grad(x))


def test_embedding_with_expanded_indices():
    # BERT passes an expanded (non-contiguous) token_type_ids buffer to embedding.
    weight = torch.randn(5, 3)
    indices = torch.tensor([[1, 4, 0]]).expand(2, 3)

    def f(w, i):
        return F.embedding(i, w)

    gm = make_fx(f, tracing_mode="fake")(weight, indices)
    decomposed = decompose(gm, inductor_default)
    assert not any(
        node.target is torch.ops.aten.embedding.default for node in decomposed.graph.nodes
    )
    torch.testing.assert_close(decomposed(weight, indices), f(weight, indices))


def test_zeros_and_ones_without_dtype_take_the_default_dtype():
    def f(x):
        return torch.zeros(x.shape), torch.ones(x.shape)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    for table in (core_aten, core_aten | prims_table):
        zeros, ones = decompose(gm, table)(torch.randn(3))
        assert zeros.dtype == ones.dtype == torch.float32


def test_arange_infers_its_dtype_from_its_arguments():
    def f(x):
        return torch.arange(x.shape[0]), torch.arange(1, 4), torch.arange(0.5, 3.0)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3))
    for table in (core_aten, inductor_default, core_aten | prims_table):
        ints, start, floats = decompose(gm, table)(torch.randn(3))
        assert ints.dtype == start.dtype == torch.int64
        assert floats.dtype == torch.float32


COMPLEX_PROGRAMS = {
    "tanh_backward": lambda g, y: aten.tanh_backward(g, y),
    "sigmoid_backward": lambda g, y: aten.sigmoid_backward(g, y),
    "logsumexp": lambda g, y: torch.logsumexp(y * 3, dim=1),
    "logsumexp_keepdim": lambda g, y: torch.logsumexp(y, dim=(0, 1), keepdim=True),
    "logsumexp_of_a_scalar": lambda g, y: torch.logsumexp(y[0, 0] * 900, dim=0),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_PROGRAMS))
def test_complex_inputs_keep_eagers_formulas(name):
    """Backward rules multiply by the conjugate derivative; logsumexp keeps a complex
    dtype, shifts by the largest real part and wraps a 0-d input's imaginary part."""
    fn = COMPLEX_PROGRAMS[name]
    g, y = torch.randn(3, 4, dtype=torch.cfloat), torch.randn(3, 4, dtype=torch.cfloat)
    gm = make_fx(fn, tracing_mode="fake")(g, y)
    for table in (core_aten, inductor_default):
        actual, expected = decompose(gm, table)(g, y), fn(g, y)
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.cfloat])
def test_logsumexp_over_an_empty_dim_is_minus_infinity(keepdim, dtype):
    """The largest element of an empty dim does not exist (amax raises); the sum is 0."""

    def fn(y):
        return torch.logsumexp(y, dim=1, keepdim=keepdim)

    y = torch.randn(3, 0, 2, dtype=dtype)
    gm = make_fx(fn, tracing_mode="fake")(y)
    for table in (core_aten, inductor_default):
        actual, expected = decompose(gm, table)(y), fn(y)
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_backward_with_an_infinite_gradient_matches_eagers_cpu_kernel(dtype, affine):
    """An inf gradient where the input is 0: eager's CPU kernel sums `g * x` (inf * 0 is
    NaN, the whole row NaN), where the `x_hat` form gives -inf in part of the row."""
    x = torch.tensor([[1.0, 0.5, -1.0, 0.0, -1.0, -1.75], [2.0, 1.0, -1.0, 0.5, 0.25, 3.0]])
    grad = torch.ones_like(x)
    grad[0, 3], grad[1, 1] = float("inf"), -float("inf")
    x, grad = x.to(dtype), grad.to(dtype)
    weight = torch.linspace(0.5, 2.0, 6, dtype=dtype)
    _, mean, rstd = torch.native_layer_norm(x, [6], weight if affine else None, None, 1e-5)

    def fn(g, x, mean, rstd, weight):
        w = weight if affine else None
        return aten.native_layer_norm_backward(
            g, x, [6], mean, rstd, w, None, [True, affine, False]
        )[0]

    args = (grad, x, mean, rstd, weight)
    gm = make_fx(fn, tracing_mode="fake")(*args)
    expected = fn(*args)
    for table in (core_aten, inductor_default):
        actual = decompose(gm, table)(*args)
        assert actual.isnan().all(dim=1).tolist() == expected.isnan().all(dim=1).tolist()
        torch.testing.assert_close(actual, expected, equal_nan=True, atol=1e-2, rtol=1e-2)


def test_layer_norm_backward_matches_eager_for_finite_values():
    torch.manual_seed(0)
    x = torch.randn(4, 8, dtype=torch.float64) * 3 + 5
    weight = torch.randn(8, dtype=torch.float64)
    out, mean, rstd = torch.native_layer_norm(x, [8], weight, None, 1e-5)
    grad = torch.randn_like(out)

    def fn(g, x, mean, rstd, weight):
        return aten.native_layer_norm_backward(
            g, x, [8], mean, rstd, weight, None, [True, True, False]
        )

    args = (grad, x, mean, rstd, weight)
    gm = make_fx(fn, tracing_mode="fake")(*args)
    for actual, expected in zip(decompose(gm, inductor_default)(*args), fn(*args)):
        if expected is not None:
            torch.testing.assert_close(actual, expected)


def _nll_backward(op, weighted: bool, reduction):
    def fn(grad, x, target, total, *weight):
        return op(grad, x, target, weight[0] if weighted else None, reduction, -100, total)

    return fn


@pytest.mark.parametrize("reduction", [0, 1, 2])  # none, mean, sum
@pytest.mark.parametrize("shape", [(5, 7), (7,), (2, 7, 3, 2)], ids=["2d", "1d", "nd"])
def test_nll_loss_backward_is_a_one_hot_comparison_not_a_scatter(shape, reduction):
    """The gradient is `where(class == target, -w * grad, 0)`: elementwise (it fuses into
    its reader), with zero rows for ignored targets even under a NaN upstream gradient."""
    torch.manual_seed(0)
    x = torch.randn(shape).log_softmax(0 if len(shape) == 1 else 1)
    target_shape = () if len(shape) == 1 else (shape[0], *shape[2:])
    target = torch.randint(0, 7, target_shape)
    if target.dim():
        target.view(-1)[1] = -100  # ignored
    weight = torch.rand(7) + 0.5
    for w in (None, weight):
        loss, total = (
            aten.nll_loss2d_forward(x, target, w, reduction, -100)
            if len(shape) == 4
            else aten.nll_loss_forward(x, target, w, reduction, -100)
        )
        grad = torch.full_like(loss, float("nan")) if reduction == 0 else torch.ones_like(loss)
        op = aten.nll_loss2d_backward if len(shape) == 4 else aten.nll_loss_backward

        fn = _nll_backward(op, w is not None, reduction)
        args = (grad, x, target, total) + ((w,) if w is not None else ())
        gm = make_fx(fn, tracing_mode="fake")(*args)
        decomposed = decompose(gm, inductor_default)
        ops = {n.target for n in decomposed.graph.nodes if n.op == "call_function"}
        assert aten.scatter.src not in ops
        torch.testing.assert_close(decomposed(*args), fn(*args), equal_nan=True)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scale_factor": 2},
        {"scale_factor": 1.5, "align_corners": True},
        {"size": (7, 3)},
        {"size": (3, 5)},  # the input's own size: weights 0 toward each neighbour
    ],
)
def test_bilinear_upsample_keeps_eagers_inf_and_nan(kwargs):
    # Beside an infinite pixel eager gives inf (a positive weight) or NaN (a zero weight
    # times inf); the lerp form a + (b - a) * w gives NaN where eager gives inf.
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[1.0, inf, 2.0, -inf, 3.0], [3.0, 4.0, nan, 5.0, 6.0], [7, -inf, 8, 9, 1]])
    x = x.expand(2, 2, 3, 5).clone()

    def fn(x):
        return F.interpolate(x, mode="bilinear", **kwargs)

    gm = make_fx(fn, tracing_mode="fake")(x)
    for table in (inductor_default, TO_PRIMS):
        torch.testing.assert_close(decompose(gm, table)(x), fn(x), equal_nan=True)


_PIECEWISE_ACTIVATIONS = {
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "hardtanh": F.hardtanh,
    "relu6": F.relu6,
    "relu": F.relu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "elu": F.elu,
    "celu": F.celu,
    "selu": F.selu,
    "softshrink": F.softshrink,
    "hardshrink": F.hardshrink,
    "threshold": lambda x: F.threshold(x, 1.0, -2.0),
    "softplus": lambda x: F.softplus(x, beta=2.0, threshold=2.0),
}


@pytest.mark.parametrize("name", sorted(_PIECEWISE_ACTIVATIONS))
def test_piecewise_activation_gradient_at_its_breakpoints_is_eagers(name):
    # At a breakpoint the slope is a convention of eager's kernel (hardswish: 0 at -3,
    # 1 at 3): the decomposition must pick the same piece.
    fn = _PIECEWISE_ACTIVATIONS[name]
    x = torch.tensor([-6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, -2.0, 2.0, 1.5])
    x.requires_grad_(True)

    def with_grad(x):
        out = fn(x)
        return out, torch.autograd.grad(out.sum(), [x])[0]

    gm = make_fx(with_grad, tracing_mode="fake")(x)
    for table in (inductor_default, TO_PRIMS):
        torch.testing.assert_close(decompose(gm, table)(x), with_grad(x))


@pytest.mark.parametrize(
    "op", [aten._softmax_backward_data.default, aten._log_softmax_backward_data.default]
)
@pytest.mark.parametrize(
    "dtype, input_dtype",
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.bfloat16),
        (torch.float32, torch.float32),
        (torch.float64, torch.float32),
    ],
)
def test_softmax_backward_data_keeps_grad_dtype(op, dtype, input_dtype):
    """The result has `grad`'s dtype whatever `input_dtype` says (eager's meta rule)."""
    torch.manual_seed(0)
    grad = torch.randn(4, 6, dtype=dtype)
    output = torch.randn(4, 6, dtype=dtype).softmax(1)

    def fn(grad, output):
        return op(grad, output, 1, input_dtype)

    gm = make_fx(fn, tracing_mode="fake")(grad, output)
    actual = decompose(gm, inductor_default)(grad, output)
    expected = fn(grad, output)
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, rtol=1e-2, atol=1e-2)


def test_log_sigmoid_forward_and_backward_follow_the_devices_buffer():
    """ATen's log_sigmoid_forward returns its buffer `exp(-|x|)` on the CPU and an empty
    one on CUDA (a graph whose buffer had the CPU's size failed on a GPU)."""
    from prim_decomp.decompositions.activations import log_sigmoid_backward, log_sigmoid_forward

    x = torch.randn(64, dtype=torch.float64) * 10
    grad = torch.randn(64, dtype=torch.float64)
    out, buffer = log_sigmoid_forward(x)
    eager_out, eager_buffer = torch.ops.aten.log_sigmoid_forward(x)
    torch.testing.assert_close((out, buffer), (eager_out, eager_buffer))
    torch.testing.assert_close(
        log_sigmoid_backward(grad, x, buffer),
        torch.ops.aten.log_sigmoid_backward(grad, x, eager_buffer),
    )
    # the backward reads no buffer: an empty one (CUDA's) gives the same gradient
    torch.testing.assert_close(
        log_sigmoid_backward(grad, x, x.new_zeros(0)),
        torch.ops.aten.log_sigmoid_backward(grad, x, eager_buffer),
    )
    with torch.device("meta"):
        assert log_sigmoid_forward(torch.empty(5))[1].shape == (5,)  # ATen's meta rule
    if torch.cuda.is_available():
        on_gpu = torch.randn(5, device="cuda")
        eager_shape = torch.ops.aten.log_sigmoid_forward(on_gpu)[1].shape
        assert log_sigmoid_forward(on_gpu)[1].shape == eager_shape == (0,)
