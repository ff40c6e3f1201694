"""Through ember.compile (aot_eager, inductor): every matmul rank combination and complex
views give eager's shape, dtype, requires_grad, values and grads, with and without grad."""

from __future__ import annotations

import pytest
import torch

import ember

MATMUL_SHAPES = [
    ((5,), (5,)),
    ((5,), (5, 3)),
    ((3, 5), (5,)),
    ((3, 5), (5, 4)),
    ((2, 3, 5), (5,)),
    ((5,), (2, 5, 3)),
    ((5,), (2, 3, 5, 4)),
    ((2, 1, 3, 5), (4, 5, 2)),
    ((2, 3, 5), (5, 4)),
    ((3, 5), (2, 5, 4)),
]
MATMULS = {
    "matmul": lambda a, b: torch.matmul(a, b),
    "operator": lambda a, b: a @ b,
    "rmatmul": lambda a, b: b.__rmatmul__(a),
}


def _check(fn, inputs, backend, grad_mode):
    compiled = ember.compile(fn, backend=backend)
    with torch.set_grad_enabled(grad_mode):
        expected, actual = fn(*inputs), compiled(*inputs)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    assert actual.requires_grad == expected.requires_grad
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
    if expected.requires_grad:
        wanted = [t for t in inputs if t.requires_grad]
        real = [
            torch.view_as_real(t.resolve_conj()) if t.is_complex() else t
            for t in (expected, actual)
        ]
        weight = torch.randn(real[0].shape)
        grads_e = torch.autograd.grad((real[0] * weight).sum(), wanted)
        grads_a = torch.autograd.grad((real[1] * weight).sum(), wanted)
        torch.testing.assert_close(grads_a, grads_e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("grad_mode", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
@pytest.mark.parametrize("name", sorted(MATMULS))
def test_matmul_every_rank_combination_matches_eager_shape(name, requires_grad, grad_mode, backend):
    for a, b in MATMUL_SHAPES:
        inputs = [torch.randn(a, requires_grad=requires_grad), torch.randn(b)]
        _check(MATMULS[name], inputs, backend, grad_mode)


COMPLEX_VIEWS = {
    "view_as_complex": (lambda x: torch.view_as_complex(x), (3, 4, 2), torch.float32),
    "view_as_complex_of_intermediate": (
        lambda x: torch.view_as_complex(x * 2),
        (3, 4, 2),
        torch.float32,
    ),
    "view_as_real": (lambda x: torch.view_as_real(x), (3, 4), torch.complex64),
    "real": (lambda x: x.real, (3, 4), torch.complex64),
    "imag": (lambda x: x.imag, (3, 4), torch.complex64),
    "conj": (lambda x: x.conj(), (3, 4), torch.complex64),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("name", sorted(COMPLEX_VIEWS))
def test_complex_and_real_views_keep_requires_grad_and_grads(name, backend):
    fn, shape, dtype = COMPLEX_VIEWS[name]
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    _check(fn, [x], backend, grad_mode=True)


def _opinfo(name):
    module = pytest.importorskip(
        "torch.testing._internal.common_methods_invocations",
        reason="OpInfo needs expecttest (the test extra installs it)",
    )
    return next(op for op in module.op_db if op.name == name)


def _copies(args):
    return [
        a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
        for a in args
    ]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(
    "name",
    [
        "quantile",
        "nanquantile",
        "nn.functional.embedding_bag",
        "nn.functional.triplet_margin_with_distance_loss",
        "resize_",
        "resize_as_",
    ],
)
def test_opinfo_samples_match_eager_in_value_shape_and_grad(name, backend):
    """quantile's in-place squeeze_, CPU embedding_bag's bookkeeping sizes, a module as
    distance_function, resize_ of a fresh tensor: every sample, with and without grad."""
    op = _opinfo(name)
    for grad_mode in (False, True):
        wants_grad = grad_mode and op.supports_autograd
        samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=wants_grad))
        for sample in samples[:12]:
            kwargs = sample.kwargs

            def program(*args, _kwargs=kwargs):
                return op.op(*args, **_kwargs)

            args = [sample.input, *sample.args]
            eager_args, compiled_args = _copies(args), _copies(args)
            tensors = [a for a in eager_args if isinstance(a, torch.Tensor)]
            _check_against(program, eager_args, compiled_args, tensors, backend, grad_mode)


def _check_against(program, eager_args, compiled_args, tensors, backend, grad_mode):
    with torch.set_grad_enabled(grad_mode):
        expected = program(*eager_args)
        actual = ember.compile(program, backend=backend)(*compiled_args)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert actual.requires_grad == expected.requires_grad
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, equal_nan=True)
    if expected.requires_grad:
        wanted = [i for i, t in enumerate(tensors) if t.requires_grad]
        compiled_tensors = [a for a in compiled_args if isinstance(a, torch.Tensor)]
        weight = torch.rand(expected.shape)
        grads_e = torch.autograd.grad((expected * weight).sum(), [tensors[i] for i in wanted])
        grads_a = torch.autograd.grad(
            (actual * weight).sum(), [compiled_tensors[i] for i in wanted]
        )
        torch.testing.assert_close(grads_a, grads_e, rtol=1e-4, atol=1e-5, equal_nan=True)


FLOOR_DIVISIONS = {
    "by_a_sum": lambda x: x.t() // x.sum(),
    "by_the_untransposed": lambda x: x.mT // x,
    "div_floor": lambda x: torch.div(x.t(), x.sum() + 3, rounding_mode="floor"),
    "copysign": lambda x: torch.copysign(x.t(), x.sum()),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", sorted(FLOOR_DIVISIONS))
def test_floor_division_of_a_transposed_tensor_keeps_eager_strides(name, dynamic, backend):
    fn = FLOOR_DIVISIONS[name]
    compiled = ember.compile(fn, backend=backend, dynamic=dynamic)
    for size in (3, 5):
        x = torch.randn(size, size)
        expected, actual = fn(x), compiled(x)
        torch.testing.assert_close(actual, expected)
        assert actual.stride() == expected.stride()


CONTIGUOUS_RESULTS = {
    "masked_fill": lambda x: x.masked_fill(x > 0, 0),
    "masked_fill_bool": lambda x: (x > 0).masked_fill(x > 1, False),
    "masked_fill_tensor": lambda x: x.masked_fill(x > 0, x.sum()),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", sorted(CONTIGUOUS_RESULTS))
def test_contiguous_result_of_a_permuted_input_keeps_eager_strides_with_symbolic_sizes(
    name, dynamic, backend
):
    """Eager's masked_fill returns a row-major tensor; its decomposition (a where)
    follows the permuted input, which a copy sets right for symbolic sizes too."""
    fn = CONTIGUOUS_RESULTS[name]
    compiled = ember.compile(fn, backend=backend, dynamic=dynamic)
    for rows, cols in ((1, 1), (2, 5), (4, 3)):
        x = torch.randn(rows, cols).permute(1, 0)
        expected, actual = fn(x), compiled(x)
        torch.testing.assert_close(actual, expected)
        assert actual.stride() == expected.stride()


VIEWS_WRITTEN_THEN_READ = {
    "transpose_masked_fill_": lambda x: x.transpose(1, 0).masked_fill_(x.t() < 0, 0) * 2,
    "movedim_masked_fill_": lambda x: x.unsqueeze(0).movedim(2, 1).masked_fill_(x.t() > 1, 1) / 3,
    "transpose_clamp_": lambda x: x.t().clamp_(min=0) + 1,
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("name", sorted(VIEWS_WRITTEN_THEN_READ))
def test_view_written_in_place_is_read_in_its_own_layout(name, dynamic, backend):
    """A view keeps its strides through an in-place write; a result computed from it
    follows them (eager's TensorIterator), not the functional form's row-major ones."""
    fn = VIEWS_WRITTEN_THEN_READ[name]
    compiled = ember.compile(fn, backend=backend, dynamic=dynamic)
    for rows, cols in ((3, 4), (5, 2), (4, 7)):
        x = torch.randn(rows, cols)
        expected, actual = fn(x.clone()), compiled(x.clone())
        torch.testing.assert_close(actual, expected)
        sized = [d for d in range(expected.dim()) if expected.shape[d] > 1]  # a size-1
        assert [actual.stride(d) for d in sized] == [expected.stride(d) for d in sized]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "op",
    [
        lambda x: torch.cummax(x, 0),
        lambda x: torch.max(x, 1),
        lambda x: torch.aminmax(x, dim=0),
        lambda x: torch.frexp(x),
        lambda x: torch.kthvalue(x, 2, 1),
    ],
    ids=["cummax", "max_dim", "aminmax", "frexp", "kthvalue"],
)
def test_structseq_results_keep_their_type(op, dtype):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0)).to(dtype)
    expected = op(x)
    actual = ember.compile(op, backend="inductor", fullgraph=True)(x)
    assert type(actual) is type(expected)
    torch.testing.assert_close(tuple(actual), tuple(expected))
