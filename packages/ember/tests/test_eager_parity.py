"""Compiled programs against eager: values, dtypes, strides and errors must match.

Each test is a behaviour random programs found wrong; variants of each run on
both compiling backends where the behaviour belongs to a shared stage.
"""

import pytest
import torch
import torch.nn.functional as F

import ember


def _dense_strides(t: torch.Tensor) -> list:
    """Strides of the dims of size > 1 (the others are not observable)."""
    return [st for size, st in zip(t.shape, t.stride(), strict=True) if size > 1]


def assert_like_eager(fn, *args, backend="inductor", dynamic=None, strides=True):
    expected = fn(*[a.clone() for a in args])
    actual = ember.compile(fn, backend=backend, dynamic=dynamic)(*[a.clone() for a in args])
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    for e, a in zip(expected, actual, strict=True):
        torch.testing.assert_close(a, e, equal_nan=True)
        if strides:
            assert _dense_strides(a) == _dense_strides(e), (a.stride(), e.stride())


# ---------------------------------------------------------------- in-place view ops

_PRODUCERS = {
    "cat": lambda x: torch.cat([x, x]),
    "stack": lambda x: torch.stack([x, x]),
    "mul": lambda x: x * 2,
    "pad": lambda x: F.pad(x, (1, 1)),
    "slice": lambda x: (x + 1)[1:],
    "permute": lambda x: (x + 1).t(),
    # one output of a multi-output op (the op's node holds a tuple of values)
    "sort": lambda x: x.sort(-1, descending=True).values,
}
_METADATA_MUTATIONS = {
    "unsqueeze_": lambda v: v.unsqueeze_(0),
    "unsqueeze_last": lambda v: v.unsqueeze_(-1),
    "transpose_": lambda v: v.unsqueeze_(0).transpose_(0, -1),
    "t_": lambda v: v.t_() if v.dim() <= 2 else v.transpose_(0, 1),
    "squeeze_": lambda v: v.unsqueeze_(1).squeeze_(),
    "as_strided_": lambda v: v.as_strided_((2,), (2,)),
    "swapdims_": lambda v: v.unsqueeze_(-1).swapdims_(0, -1),
}


@pytest.mark.parametrize("producer", sorted(_PRODUCERS))
@pytest.mark.parametrize("mutation", sorted(_METADATA_MUTATIONS))
def test_in_place_metadata_mutation_of_an_intermediate_keeps_its_values(producer, mutation):
    make, mutate = _PRODUCERS[producer], _METADATA_MUTATIONS[mutation]

    def fn(x):
        v = make(x)
        mutate(v)
        return v, v + 1

    for x in (torch.tensor([3.0, 1.0, 4.0, 2.0]), torch.arange(6.0).reshape(2, 3)):
        assert_like_eager(fn, x)


def test_in_place_metadata_mutation_of_an_intermediate_under_aot_eager():
    def fn(x):
        v = torch.cat([x, x])
        v.unsqueeze_(0)
        return v

    assert_like_eager(fn, torch.tensor([3.0, 1.0, 4.0, 2.0]), backend="aot_eager")


def test_as_strided_of_a_permuted_intermediate_reads_eager_storage():
    def fn(x):
        return (x + 1).t().as_strided((2, 2), (1, 2), 1)

    assert_like_eager(fn, torch.arange(6.0).reshape(2, 3))


# ---------------------------------------------------------------- symbolic sizes


@pytest.mark.parametrize("length", [3, 4])
def test_symbolic_size_guarded_to_one_broadcasts(length):
    def fn(x):
        v = x[..., ::2]
        w = v[..., 1:]  # one element, its size an expression of x's size
        return v + w, torch.atan2(v, w), v - w.expand(v.shape)

    assert_like_eager(fn, torch.arange(1.0, length + 1.0), dynamic=True)


# ---------------------------------------------------------------- in-place ops keep self's dtype

_IN_PLACE_PROMOTING = {
    "add_": lambda a, b: a.add_(b),
    "sub_": lambda a, b: a.sub_(b),
    "mul_": lambda a, b: a.mul_(b),
    "bitwise_and_": lambda a, b: a.bitwise_and_(b),
    "bitwise_or_": lambda a, b: a.bitwise_or_(b),
    "bitwise_left_shift_": lambda a, b: a.bitwise_left_shift_(b),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("op", sorted(_IN_PLACE_PROMOTING))
def test_in_place_op_keeps_the_dtype_of_self(backend, op):
    mutate = _IN_PLACE_PROMOTING[op]

    def of_intermediate(a, b):
        return mutate(a + 1, b)

    def of_view(a, b):
        c = a * 2
        mutate(c[1:], b[1:])
        return c

    a, b = torch.arange(4, dtype=torch.int32), torch.arange(4, dtype=torch.int64)
    for fn in (of_intermediate, of_view, mutate):
        expected = fn(a.clone(), b)
        actual = ember.compile(fn, backend=backend)(a.clone(), b)
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual, expected)


# ---------------------------------------------------------------- gradients of selections

_SELECTIONS = {
    "max": lambda x: x.max(),
    "min": lambda x: x.min(),
    "median": lambda x: x.median(),
    "nanmedian": lambda x: x.nanmedian(),
    "amax": lambda x: x.amax(),
    "amin_dim": lambda x: x.amin(1),
    "max_dim": lambda x: x.max(0).values,
    "median_dim": lambda x: x.median(0).values,
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("reduction", sorted(_SELECTIONS))
def test_nan_gradient_of_a_selection_reaches_the_selected_elements_only(backend, reduction):
    fn = _SELECTIONS[reduction]
    x = torch.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0], [0.0, 7.0, 2.0]])

    def grad_of(f):
        leaf = x.clone().requires_grad_(True)
        out = f(leaf)
        out.backward(torch.full_like(out, float("nan")))
        return leaf.grad

    expected = grad_of(fn)
    actual = grad_of(ember.compile(fn, backend=backend))
    torch.testing.assert_close(actual, expected, equal_nan=True)


# ---------------------------------------------------------------- integer division by zero

_INTEGER_DIVISIONS = {
    "floordiv": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "fmod": lambda a, b: torch.fmod(a, b),
    "scalar_floordiv": lambda a, b: a // 0,
    "fused_then_summed": lambda a, b: ((a + 1) // (b * 1) + 2).sum(),
    "int32": lambda a, b: a.int() % b.int(),
}


@pytest.mark.parametrize("op", sorted(_INTEGER_DIVISIONS))
def test_integer_division_by_zero_raises_like_eager(op):
    fn = _INTEGER_DIVISIONS[op]
    a, b = torch.tensor([5, -7, 3, 8]), torch.tensor([2, 0, 1, 3])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, b)
    compiled = ember.compile(fn)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(a, b)
    if op != "scalar_floordiv":  # the same compiled code runs on nonzero divisors
        torch.testing.assert_close(compiled(a, b + 4), fn(a, b + 4))


# ---------------------------------------------------------------- programs eager runs


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_floor_divide_of_a_tensor_requiring_grad_compiles(backend):
    def fn(x):
        return x // 3, x * 2 // 3, x.sin()

    x = torch.randn(4, 3, requires_grad=True)
    expected, actual = fn(x), ember.compile(fn, backend=backend)(x)
    for e, a in zip(expected, actual, strict=True):
        torch.testing.assert_close(a.detach(), e.detach())
        assert a.requires_grad == e.requires_grad
    for out in (expected[1], actual[1]):
        with pytest.raises(RuntimeError, match="derivative for aten::floor_divide"):
            out.sum().backward()
    actual[2].sum().backward()
    torch.testing.assert_close(x.grad, x.detach().cos())


_SOFTMAXES = {
    "softmax": lambda x: torch.softmax(x.t(), 0).view(-1),
    "log_softmax": lambda x: torch.log_softmax(x.t(), 1).view(-1),
    "softmax_3d": lambda x: torch.softmax(x.reshape(3, 2, 2).permute(2, 0, 1), 1).view(-1),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("op", sorted(_SOFTMAXES))
def test_softmax_of_a_permuted_tensor_is_contiguous_like_eager(backend, op):
    fn = _SOFTMAXES[op]
    assert_like_eager(fn, torch.randn(4, 3), backend=backend)
    x = torch.randn(4, 3, requires_grad=True)
    ember.compile(fn, backend=backend)(x).pow(2).sum().backward()
    expected = x.grad
    x.grad = None
    fn(x).pow(2).sum().backward()
    torch.testing.assert_close(expected, x.grad)


# ---------------------------------------------------------------- strides and aliasing

_VIEWS_OF_INTERMEDIATES = {
    "slice": lambda y: y[1:3],
    "narrow": lambda y: y.narrow(1, 1, 2),
    "select": lambda y: y[1],
    "diagonal": lambda y: y.diagonal(),
    "strided_slice": lambda y: y[::2, 1::2],
    "split": lambda y: y.split(2, 1)[1],
    "unfold": lambda y: y.unfold(1, 2, 1),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("view", sorted(_VIEWS_OF_INTERMEDIATES))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_view_of_an_intermediate_is_returned_as_a_view_with_eager_strides(
    backend, view, requires_grad
):
    take = _VIEWS_OF_INTERMEDIATES[view]

    def fn(x):
        return take((x.t() + 1).t())

    x = torch.randn(3, 4)
    xe, xc = (x.clone().requires_grad_(requires_grad) for _ in range(2))
    expected, actual = fn(xe), ember.compile(fn, backend=backend)(xc)
    torch.testing.assert_close(actual, expected)
    assert actual.stride() == expected.stride()
    assert actual.requires_grad == expected.requires_grad
    if requires_grad:
        weights = torch.arange(expected.numel(), dtype=torch.float32).reshape(expected.shape)
        (expected * weights).sum().backward()
        (actual * weights).sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad)


def test_as_strided_scatter_of_a_permuted_intermediate_addresses_eager_storage():
    def fn(x):
        v = (x + 1).t()
        v.as_strided_((2,), (2,))
        v.add_(1)
        return v

    assert_like_eager(fn, torch.arange(6.0).reshape(2, 3), strides=False)


_PERMUTED_POINTWISE = {
    "round_flip_mT": lambda x: torch.round(x.flip(2)).mT,
    "neg_flip": lambda x: -x.flip(2),
    "mul": lambda x: x * 2,
    "add_broadcast": lambda x: x + x[:, :1],
    "abs_flip_transpose": lambda x: torch.abs(x.flip(1, 2)).transpose(0, 2),
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("op", sorted(_PERMUTED_POINTWISE))
def test_pointwise_result_of_a_permuted_input_follows_its_layout(op, dynamic):
    fn = _PERMUTED_POINTWISE[op]
    compiled = ember.compile(fn, dynamic=dynamic)
    for shape in [(3, 4, 5), (2, 3, 6), (4, 2, 3)]:
        x = torch.randint(-100, 100, shape, dtype=torch.int16).permute(2, 0, 1)
        expected, actual = fn(x), compiled(x)
        torch.testing.assert_close(actual, expected)
        assert _dense_strides(actual) == _dense_strides(expected)


_EAGER_CONTIGUOUS_RESULTS = {
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "masked_fill": lambda x: x.masked_fill(x > 0, 1.0),
    "tril": lambda x: x.tril(),
    "triu": lambda x: x.triu(1),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, 0),
}


@pytest.mark.parametrize("op", sorted(_EAGER_CONTIGUOUS_RESULTS))
def test_decomposed_op_returns_eager_strides_for_a_permuted_input(op):
    fn = _EAGER_CONTIGUOUS_RESULTS[op]
    assert_like_eager(fn, torch.randn(4, 5).t())
    assert_like_eager(fn, torch.randn(2, 3, 4).permute(2, 0, 1))
    assert_like_eager(lambda x: fn(x).view(-1), torch.randn(2, 3, 4).permute(2, 0, 1))


@pytest.mark.parametrize("producer", sorted(_PRODUCERS))
@pytest.mark.parametrize("mutation", sorted(_METADATA_MUTATIONS))
def test_intermediate_reshaped_in_place_then_written_keeps_eager_strides(producer, mutation):
    make, mutate = _PRODUCERS[producer], _METADATA_MUTATIONS[mutation]

    def fn(x):
        v = make(x)
        mutate(v)
        v.add_(1)
        return v

    for x in (torch.tensor([3.0, 1.0, 4.0, 2.0]), torch.arange(6.0).reshape(2, 3)):
        assert_like_eager(fn, x)


# ---------------------------------------------------------------- interpolation

_INTERPOLATIONS = {
    "bilinear_align_corners": lambda x: F.interpolate(
        x.unsqueeze(0), scale_factor=1.5, mode="bilinear", align_corners=True
    ),
    "bilinear": lambda x: F.interpolate(x.unsqueeze(0), scale_factor=2.0, mode="bilinear"),
    "linear": lambda x: F.interpolate(x, size=11, mode="linear"),
    "bicubic": lambda x: F.interpolate(x.unsqueeze(0), scale_factor=2.0, mode="bicubic"),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("name", sorted(_INTERPOLATIONS))
def test_interpolation_keeps_eagers_inf_and_nan_under_symbolic_sizes(backend, name):
    # Beside an infinite pixel eager's weighted sums give inf where a lerp gives NaN.
    inf, nan = float("inf"), float("nan")
    row = torch.tensor([1.0, inf, 2.0, -inf, 3.0, 4.0, nan, 5.0])
    interpolate = _INTERPOLATIONS[name]

    def fn(x):
        return interpolate(x * 1)

    compiled = ember.compile(fn, backend=backend, dynamic=True)
    for rows in (5, 7):
        x = torch.stack([row.roll(i) for i in range(rows)]).expand(2, rows, 8).clone()
        x.requires_grad_(True)
        torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_write_through_a_dropout_of_nothing_into_a_non_leaf_input_runs_like_eager(backend):
    # The dropout returns its input itself: the write reaches a graph input requiring grad.
    def fn(x, v):
        w = F.dropout(v, 0.0, training=True)
        w.index_add_(
            -1, torch.tensor([0, 4, 0]), w.index_select(-1, torch.tensor([0, 4])[[0, 1, 0]])
        )
        return w / x

    x = torch.randn(7, requires_grad=True)
    got = ember.compile(fn, backend=backend)(x, x * 2)
    expected = fn(x, x * 2)
    grads = [torch.autograd.grad(out.sum(), x)[0] for out in (got, expected)]
    torch.testing.assert_close((got, grads[0]), (expected, grads[1]))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_backward_data_of_half_grad_keeps_its_dtype(backend, dtype):
    """`_softmax_backward_data(grad, out, dim, input_dtype=float32)` with a half `grad`
    returns `grad`'s dtype, as eager's meta rule says (not `input_dtype`)."""
    aten = torch.ops.aten

    def fn(grad, output):
        return (
            aten._softmax_backward_data(grad, output, 1, torch.float32) * 2,
            aten._log_softmax_backward_data(grad, output, 1, torch.float32) + 1,
        )

    torch.manual_seed(0)
    grad = torch.randn(3, 5, dtype=dtype)
    output = torch.randn(3, 5, dtype=dtype).softmax(1)
    expected = fn(grad, output)
    actual = ember.compile(fn, backend=backend)(grad, output)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e, rtol=1e-2, atol=1e-2)
