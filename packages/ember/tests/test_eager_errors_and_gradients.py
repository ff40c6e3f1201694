"""End to end through ember.compile: errors eager raises, and gradients eager gives on
special values, are the compiled function's too (found by the differential fuzzer).

| rank | footgun                                                   | before            | test |
|------|-----------------------------------------------------------|-------------------|------|
| 1    | NaN grad through an output the loss does not use           | silent: NaN grad  | test_unused_output_does_not_spread_nan_into_gradient |
| 1    | ... an unused output of unbind, with dynamic sizes          | silent: NaN grad  | test_unused_part_of_a_multi_output_op_gets_zeros_with_dynamic_sizes |
| 1    | prod backward with inf/NaN and no zero                     | silent: finite    | test_prod_gradient_with_inf_matches_eager |
| 1    | prod backward over a negative dim of a 3-D tensor          | silent: wrong dim | test_prod_gradient_over_a_negative_dim_matches_eager |
| 1    | a saved view the forward lays out densely, read by the backward with the view's strides | silent: wrong grad | test_saved_view_laid_out_densely_gives_eager_gradient |
| 2    | an op eager's kernel rejects (dtype, empty, an index out of range, an integer divisor of zero), live or dead | missing error | test_compiled_raises_where_eager_kernel_rejects |
| 2    | a value without a derivative carried across a graph break, unused after | error at backward | test_value_without_derivative_across_a_graph_break_is_not_differentiated |
| 2    | a saved tensor modified in place (`unsqueeze_`, `mul_`) before the backward | error in tracing | test_backward_raises_where_a_saved_tensor_was_modified_in_place |
| 2    | two equal ops merged, one an output written after the call (`exp`, `clone`) | spurious "modified by an inplace operation" at backward | test_output_written_after_call_beside_an_equal_value_backwards_as_eager |
| 2    | tensors made under `inference_mode()` in the frame          | silent: normal tensors, missing "cannot be saved for backward" | test_inference_mode_outputs_are_inference_tensors |
| 1    | eig backward where the loss depends on the eigenvectors' phase | silent: a gradient eager refuses | test_eig_backward_refuses_a_phase_dependent_loss_as_eager |
| 3    | a backward formula eager fails in (`x ** bool_tensor`, `atan2(bool_tensor, x)`) | error at the call, not at backward | test_backward_formula_eager_fails_in_raises_at_backward_only |
| 3    | in-place ops eager runs and the graph cannot express (a leaf restrided under no_grad, an output written through its view then modified, an input restrided or written after being read) | error at the call or backward | test_mutations_the_graph_cannot_express_match_eager |
"""

from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ("aot_eager", "inductor")
inf = float("inf")


@pytest.mark.parametrize("backend", BACKENDS)
def test_unused_output_does_not_spread_nan_into_gradient(backend):
    def fn(x):
        kept = x.masked_fill(x > 0, 0)
        ratio = torch.div(x, x)
        mask = torch.ge(x, ratio)
        _ = mask[mask]  # a data-dependent shape: a graph break after `ratio`
        return kept

    x = torch.tensor([[0.0, -1.0, 2.0], [0.5, 0.0, -2.0]])
    expected_x = x.clone().requires_grad_()
    fn(expected_x).sum().backward()
    compiled_x = x.clone().requires_grad_()
    ember.compile(fn, backend=backend)(compiled_x).sum().backward()
    torch.testing.assert_close(compiled_x.grad, expected_x.grad, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unused_part_of_a_multi_output_op_gets_zeros_with_dynamic_sizes(backend):
    def fn(x):
        first, second = x.unbind(1)
        return first * 2, second / second

    compiled = ember.compile(fn, backend=backend, dynamic=True)
    for rows in (3, 5):
        x = torch.zeros(rows, 2)
        x[0, 1] = inf
        expected_x, compiled_x = x.clone().requires_grad_(), x.clone().requires_grad_()
        fn(expected_x)[0].sum().backward()
        compiled(compiled_x)[0].sum().backward()
        torch.testing.assert_close(compiled_x.grad, expected_x.grad, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_prod_gradient_with_inf_matches_eager(backend, keepdim):
    def fn(x):
        return x.prod(1, keepdim=keepdim), x.prod()

    compiled = ember.compile(fn, backend=backend)
    for values in ([[inf], [2.0]], [[inf], [0.0]], [[float("nan")], [3.0]]):
        grads = []
        for f in (fn, compiled):
            x = torch.tensor(values, requires_grad=True)
            per_row, total = f(x)
            (per_row.sum() + total).backward()
            grads.append(x.grad)
        torch.testing.assert_close(grads[1], grads[0], equal_nan=True)


REJECTED = {
    "bool_minus_int": (lambda a: a - a.int(), torch.tensor([True, False])),
    "argmax_of_bool": (lambda a: a.argmax(), torch.tensor([True, False])),
    "abs_of_bool": (lambda a: a.abs(), torch.tensor([True, False])),
    "std_of_int": (lambda a: a.std(), torch.tensor([1, 2, 3])),
    "dead_argmax_of_bool": (lambda a: (a.argmax(), a.float())[1], torch.tensor([True, False])),
    "dead_max_of_empty": (lambda a: (a.max(), a + 1)[1], torch.ones(0)),
    "in_place_float_into_int": (lambda a: a.mul_(1.5), torch.tensor([1, 2])),
    "dead_index_out_of_range": (lambda a: (a[a.long() + 5], a + 1)[1], torch.ones(3)),
    "dead_gather_out_of_range": (lambda a: (a.gather(0, a.long() + 5), a * 2)[1], torch.ones(3)),
    "dead_int_gather_out_of_range": (
        lambda a: (a.gather(0, a.long() + 5), a * 2)[1],
        torch.ones(3, dtype=torch.int32),
    ),
    "dead_nll_loss_target_out_of_range": (
        lambda a: (torch.nn.functional.nll_loss(a.view(1, 3), a.long()[:1] + 5), a * 2)[1],
        torch.ones(3),
    ),
    "dead_sub_of_bool_scalar": (lambda a: (torch.sub(a, True), a * 2)[1], torch.ones(3)),
    "dead_remainder_by_zero": (
        lambda a: (a % (a > 1), a * 2)[1],
        torch.tensor([1, 2], dtype=torch.int32),
    ),
    "dead_arange_of_bool": (
        lambda a: (torch.arange(a.shape[0], dtype=torch.bool), a * 2)[1],
        torch.ones(3),
    ),
    "dead_arange_of_complex": (
        lambda a: (torch.arange(0, a.shape[0], 1, dtype=torch.complex64), a * 2)[1],
        torch.ones(3),
    ),
    "dead_linspace_of_bool": (
        lambda a: (torch.linspace(0, 1, a.shape[0], dtype=torch.bool), a * 2)[1],
        torch.ones(3),
    ),
    "dead_floor_divide_by_zero": (lambda a: (a // (a - 1), a * 2)[1], torch.tensor([1, 2])),
    "dead_in_place_fmod_by_zero": (
        lambda a: ((a + 1).fmod_(a - 1), a * 2)[1],
        torch.tensor([1, 2]),
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn, value", REJECTED.values(), ids=REJECTED.keys())
def test_compiled_raises_where_eager_kernel_rejects(fn, value, backend):
    with pytest.raises(Exception) as eager:
        fn(value.clone())
    with pytest.raises(type(eager.value)):
        ember.compile(fn, backend=backend)(value.clone())


@pytest.mark.parametrize("backend", BACKENDS)
def test_factory_of_a_dtype_its_kernel_lacks_raises_with_dynamic_sizes(backend):
    def fn(a):
        return (torch.arange(a.shape[0], dtype=torch.bool), a * 2)[1]

    compiled = ember.compile(fn, backend=backend, dynamic=True)
    for rows in (3, 5):
        with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
            compiled(torch.ones(rows))


MODIFIED_AFTER_SAVED = {
    "unsqueeze_": lambda v: v.unsqueeze_(-1),
    "mul_": lambda v: v.mul_(2),
    "transpose_": lambda v: v.transpose_(0, 1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mutate", MODIFIED_AFTER_SAVED.values(), ids=MODIFIED_AFTER_SAVED.keys())
def test_backward_raises_where_a_saved_tensor_was_modified_in_place(mutate, backend):
    def fn(a, b):
        v = b - a
        ratio = b / v  # saves v
        mutate(v)
        return ratio, b.cos()

    a = torch.linspace(-1, 1, 6).reshape(2, 3)
    results = []
    for run in (fn, ember.compile(fn, backend=backend)):
        b = torch.linspace(2, 3, 6).reshape(2, 3).requires_grad_()
        ratio, cosine = run(a, b)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            ratio.sum().backward(retain_graph=True)
        cosine.sum().backward()
        results.append((ratio.detach(), cosine.detach(), b.grad))
    torch.testing.assert_close(results[1], results[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_value_without_derivative_across_a_graph_break_is_not_differentiated(backend):
    def fn(x, y):
        quotient = x // x  # noqa: F841 - no derivative; a local of the graph after the break
        positive = y[y > 0]  # data-dependent shape: a graph break
        return positive**3

    grads = []
    for run in (fn, ember.compile(fn, backend=backend)):
        x = torch.tensor([1.0, 3.0], requires_grad=True)
        y = torch.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
        run(x, y).sum().backward()
        grads.append((x.grad, y.grad))
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dim", [-3, -2, -1])
def test_prod_gradient_over_a_negative_dim_matches_eager(backend, dim):
    def fn(x):
        return x.prod(dim)

    x = torch.linspace(-2, 2, 27, dtype=torch.float64).reshape(3, 3, 3) + 0.125
    grads = []
    for run in (fn, ember.compile(fn, backend=backend)):
        leaf = x.clone().requires_grad_()
        out = run(leaf)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_saved_view_laid_out_densely_gives_eager_gradient(backend):
    # the compiled forward gives the saved slice as a dense buffer; the backward was
    # compiled for the slice's strides
    def fn(x):
        return torch.nn.functional.normalize((x + x)[:, 1:], dim=0)

    small = torch.tensor([[[-0.5], [-0.25]], [[0.5], [1.0]]], dtype=torch.float64)
    # the same sizes again (from the warm-start cache), then new ones (symbolic strides)
    inputs = [small, small, torch.linspace(-2, 2, 30, dtype=torch.float64).view(3, 5, 2)]
    compiled = ember.compile(fn, backend=backend)
    for x in inputs:
        grads = []
        for run in (fn, compiled):
            leaf = x.clone().requires_grad_()
            out = run(leaf)
            weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
            (out * weight).sum().backward()
            grads.append(leaf.grad)
        torch.testing.assert_close(grads[1], grads[0])


FAILING_BACKWARD_FORMULAS = {
    # eager runs the forward; each formula fails at backward on the bool operand
    "pow_bool_exponent": lambda x: x ** torch.tensor([True, False, True]),
    "atan2_bool_first": lambda x: torch.atan2(torch.tensor(True), x),
    "pow_bool_scalar_tensor": lambda x: torch.pow(x, torch.tensor(True)) * 2,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "op", FAILING_BACKWARD_FORMULAS.values(), ids=FAILING_BACKWARD_FORMULAS.keys()
)
def test_backward_formula_eager_fails_in_raises_at_backward_only(op, backend):
    def fn(x):
        return op(x), x.sin() * 3

    results = []
    for run in (fn, ember.compile(fn, backend=backend)):
        x = torch.tensor([[0.5, -2.0, 1.5], [0.25, 3.0, -1.0]], requires_grad=True)
        failing, fine = run(x)
        assert failing.requires_grad
        fine.sum().backward()
        with pytest.raises(RuntimeError, match="bool tensor is not supported"):
            failing.sum().backward()
        results.append((failing.detach(), fine.detach(), x.grad))
    torch.testing.assert_close(results[1], results[0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [None, True])
def test_backward_through_a_write_into_an_expanded_view_raises_at_backward_only(backend, dynamic):
    """Eager allows `masked_fill_` into an expanded view; autograd's backward of that
    write copies into the expanded strides, which eager refuses at `backward()`."""

    def fn(x):
        y = x * 2
        view = y.unsqueeze(0).expand(2, *y.shape)
        view.masked_fill_(view < 0, 0)
        return view, x.cos()

    results = []
    for run in (fn, ember.compile(fn, backend=backend, dynamic=dynamic)):
        x = torch.tensor([0.5, -2.0, 1.5], requires_grad=True)
        written, fine = run(x)
        fine.sum().backward()
        with pytest.raises(RuntimeError, match="more than one element of the written-to"):
            written.sum().backward()
        results.append((written.detach(), fine.detach(), x.grad))
    torch.testing.assert_close(results[1], results[0])


def _restrides_a_leaf_under_no_grad(x, c):
    y = x * 3
    with torch.no_grad():
        x.diagonal().masked_fill_(x.diagonal() < 0, 1)
        x.unsqueeze_(0)
    return y * 2, c


def _restrides_an_output_beside_others(x, c):
    v = x.sum(dim=[-1], keepdim=True)
    with torch.set_grad_enabled(False):
        v.unsqueeze_(-1)
    return torch.round(x.sum((1, 0))) + x.cos().sum(), v.detach()


def _restrides_a_constant_then_reads_it(x, c):
    c.unsqueeze_(0)
    return torch.mul(c, x), c


def _writes_an_input_after_reading_it(x, c):
    flat = x.reshape(-1)
    out = torch.where(flat > 0, flat, 0.5)
    with torch.no_grad():
        x.sub_(flat.sum() / flat.shape[0])
    return out.masked_fill_(out < 0, 0), c


def _order_dependent_write(x, c):
    c[:, 1:].add_(c[:, :-1])
    return x * 2, c


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "program",
    [
        _restrides_a_leaf_under_no_grad,
        _restrides_an_output_beside_others,
        _restrides_a_constant_then_reads_it,
        _writes_an_input_after_reading_it,
        _order_dependent_write,
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_mutations_the_graph_cannot_express_match_eager(backend, program):
    compiled = ember.compile(program, backend=backend)
    results = []
    for f in (program, compiled, compiled):
        x = torch.linspace(-1, 1, 9).reshape(3, 3).requires_grad_()
        c = torch.arange(9.0).reshape(3, 3)
        out = f(x, c)
        sum((o * 1).sum() for o in out if o.requires_grad).backward()
        results.append([*(o.detach() for o in out), x.detach(), x.grad, c])
    for got in results[1:]:
        torch.testing.assert_close(got, results[0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["exp", "clone"])
def test_output_written_after_call_beside_an_equal_value_backwards_as_eager(backend, op):
    def fn(x):
        a = getattr(x, op)()
        b = getattr(x, op)()  # the same value: merged, `b * b` would save the output `a`
        return a, b * b

    def run(f):
        x = torch.linspace(-1, 1, 4).requires_grad_()
        a, c = f(x)
        with torch.no_grad():
            a.add_(1)
        c.sum().backward()
        return x.grad

    torch.testing.assert_close(run(ember.compile(fn, backend=backend)), run(fn))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_inference_mode_outputs_are_inference_tensors(backend, requires_grad):
    def fn(x):
        with torch.inference_mode():
            y = x * 2
            v = x.view(-1)  # a view of a normal tensor stays normal
        return y, x + 1, v, y.view(2, 2)

    x = torch.randn(4, requires_grad=requires_grad)
    expected = fn(x)
    got = ember.compile(fn, backend=backend)(x)
    assert [t.is_inference() for t in got] == [t.is_inference() for t in expected]
    assert [t.requires_grad for t in got] == [t.requires_grad for t in expected]
    torch.testing.assert_close(got, expected)
    w = torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        got[0] * w
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        got[0].add_(1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_of_inference_tensors_taken_after_the_block_are_inference_tensors(backend):
    def fn(x):
        with torch.inference_mode():
            y = x * 2
        return y.view(-1), y.t(), y.sum()  # views of an inference tensor are ones

    x = torch.randn(2, 3)
    expected, got = fn(x), ember.compile(fn, backend=backend)(x)
    assert [t.is_inference() for t in got] == [t.is_inference() for t in expected]
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_tensor_used_by_autograd_in_the_frame_raises_as_eager(backend):
    def fn(x, w):
        with torch.inference_mode():
            y = x * 2
        return (y * w).sum()

    w = torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        fn(torch.randn(4), w)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        ember.compile(fn, backend=backend)(torch.randn(4), w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_eig_backward_refuses_a_phase_dependent_loss_as_eager(backend):
    def fn(x):
        values, vectors = torch.linalg.eig(x)
        return values, vectors

    compiled = ember.compile(fn, backend=backend)
    x = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for f in (fn, compiled):
        leaf = x.clone().requires_grad_()
        with pytest.raises(RuntimeError, match="ill-defined"):
            f(leaf)[1].real.sum().backward()
    grads = []
    for f in (fn, compiled):  # a loss that does not depend on the phase
        leaf = x.clone().requires_grad_()
        values, vectors = f(leaf)
        (values.real.sum() + vectors.abs().sum()).backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0])
