"""Outputs keep eager's metadata: shape after in-place view ops, requires_grad of views
(complex and real views, detach), lazy conjugate and negative bits, and their grads."""

from __future__ import annotations

import pytest
import torch

from aot_autograd import aot_function


def identity_compiler(gm, example_inputs):
    return gm


def _meta_recording_compiler(seen):
    def compiler(gm, example_inputs):
        seen.extend(n.meta["val"] for n in gm.graph.nodes if n.op == "call_function")
        return gm

    return compiler


def _assert_same_outputs(actual, expected):
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for a, e in zip(actual, expected, strict=True):
        assert a.requires_grad == e.requires_grad
        assert a.is_conj() == e.is_conj()
        torch.testing.assert_close(a.resolve_conj().resolve_neg(), e.resolve_conj().resolve_neg())


def _as_real_loss(outputs):
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    total = 0
    for t in outputs:
        if t.requires_grad:
            t = torch.view_as_real(t.resolve_conj()) if t.is_complex() else t
            total = total + (t * torch.arange(t.numel()).view(t.shape)).sum()
    return total


def test_node_values_keep_their_shape_before_an_in_place_squeeze():
    """matmul of 1-D by 2-D under no_grad runs `mm(...).squeeze_(0)`: the mm node's
    meta["val"] must stay (1, n), not take the squeezed shape."""
    seen = []
    x, y = torch.randn(5), torch.randn(5, 3)
    with torch.no_grad():
        out = aot_function(torch.matmul, _meta_recording_compiler(seen))(x, y)
    torch.testing.assert_close(out, x @ y)
    # the mm node keeps (1, 3); the squeezed result is a view of it (in the graph or
    # rebuilt by the run time, as eager returns a view of the product)
    assert [tuple(v.shape) for v in seen][:2] == [(1, 5), (1, 3)]
    assert out.shape == (3,)


def test_in_place_view_ops_on_intermediates_keep_earlier_shapes():
    def fn(x):
        y = x * 2
        y.unsqueeze_(0).transpose_(0, 1)
        return y + 1

    seen = []
    x = torch.randn(3, 4)
    out = aot_function(fn, _meta_recording_compiler(seen))(x)
    torch.testing.assert_close(out, fn(x))
    assert tuple(seen[0].shape) == (3, 4)  # the mul, before the in-place views


RG = {"requires_grad": True}
VIEW_CASES = {
    "view_as_complex": (torch.view_as_complex, lambda: torch.randn(3, 4, 2, **RG)),
    "view_as_complex_then_select": (
        lambda x: torch.view_as_complex(x)[1],
        lambda: torch.randn(3, 4, 2, **RG),
    ),
    "view_as_real": (torch.view_as_real, lambda: torch.randn(3, 4, dtype=torch.cfloat, **RG)),
    "real": (lambda x: x.real, lambda: torch.randn(3, 4, dtype=torch.cfloat, **RG)),
    "imag": (lambda x: x.imag, lambda: torch.randn(3, 4, dtype=torch.cfloat, **RG)),
    "conj": (lambda x: x.conj(), lambda: torch.randn(3, 4, dtype=torch.cfloat, **RG)),
    "conj_then_imag": (
        lambda x: x.conj().imag,
        lambda: torch.randn(3, 4, dtype=torch.cfloat, **RG),
    ),
    "intermediate_and_its_complex_view": (
        lambda x: (lambda y: (y, torch.view_as_complex(y)))(x * 2),
        lambda: torch.randn(3, 4, 2, **RG),
    ),
    "intermediate_and_its_real_view": (
        lambda x: (lambda y: (y, torch.view_as_real(y)))(x * 2),
        lambda: torch.randn(3, 4, dtype=torch.cfloat, **RG),
    ),
    "detach": (lambda x: x.detach(), lambda: torch.randn(3, 4, **RG)),
    "detach_then_select": (lambda x: x.detach()[0], lambda: torch.randn(3, 4, **RG)),
    "intermediate_and_its_detach": (
        lambda x: (lambda y: (y, y.detach()))(x * 2),
        lambda: torch.randn(3, 4, **RG),
    ),
    "view_dtype": (lambda x: x.view(torch.int32), lambda: torch.randn(3, 4, **RG)),
    "complex_times_python_complex": (
        lambda x: x * (1 + 2j),
        lambda: torch.randn(3, 4, dtype=torch.cfloat, **RG),
    ),
}


@pytest.mark.parametrize("name", sorted(VIEW_CASES))
def test_output_views_keep_requires_grad_bits_and_grads(name):
    fn, make = VIEW_CASES[name]
    x = make()
    expected = fn(x)
    actual = aot_function(fn, identity_compiler)(x)
    _assert_same_outputs(actual, expected)
    loss = _as_real_loss(expected)
    if isinstance(loss, torch.Tensor):
        (grad_e,) = torch.autograd.grad(loss, x)
        (grad_a,) = torch.autograd.grad(_as_real_loss(actual), x)
        torch.testing.assert_close(grad_a, grad_e)


def _cast_view_of_written_input(x, w):
    x.masked_fill_(x < 0, 0)
    y = x.to(torch.bfloat16) * w
    return y.transpose(2, 0), y[0]


@pytest.mark.parametrize("requires_grad", [False, True])
def test_view_of_value_written_in_place_keeps_eager_layout(requires_grad):
    """An output view of a value computed from an input written in place: eager kernels
    on the functional graph lay the value out otherwise than tracing saw, and the views
    must still read its elements where eager's do."""
    base = torch.tensor([[[-1.0], [2.0]], [[3.0], [-4.0]]], dtype=torch.float64)
    w = torch.tensor(1.5, dtype=torch.bfloat16, requires_grad=requires_grad)
    w_compiled = w.detach().clone().requires_grad_(requires_grad)
    x, x_compiled = base.clone().permute(2, 1, 0), base.clone().permute(2, 1, 0)
    expected = _cast_view_of_written_input(x, w)
    actual = aot_function(_cast_view_of_written_input, identity_compiler)(x_compiled, w_compiled)
    _assert_same_outputs(actual, expected)
    assert actual[0]._base is actual[1]._base
    torch.testing.assert_close(x_compiled, x)
    if requires_grad:
        (expected[0].float().sum() * 2 + expected[1].float().sum()).backward()
        (actual[0].float().sum() * 2 + actual[1].float().sum()).backward()
        torch.testing.assert_close(w_compiled.grad, w.grad)


def _views_of_floor_division(x):
    q = x // x
    return q.narrow(-2, 0, q.shape[-2] // 2), q[1:]


def test_views_of_result_without_derivative_require_grad_and_raise_on_backward():
    """Eager's `x // x` requires grad but has no derivative; views of it too, and a
    backward through them raises eager's error."""
    x = torch.arange(1.0, 13.0).view(4, 3).requires_grad_()
    expected = _views_of_floor_division(x)
    actual = aot_function(_views_of_floor_division, identity_compiler)(x)
    _assert_same_outputs(actual, expected)
    with pytest.raises(RuntimeError, match="floor_divide is not implemented"):
        (actual[0].sum() + actual[1].sum()).backward()


def _reshaped_in_place_then_viewed(x):
    y = torch.relu(x) + 3
    y.unsqueeze_(-1)
    return y.mT, y


def test_outputs_sharing_a_base_reshaped_in_place_get_eager_gradients():
    """Two outputs viewing one intermediate that `unsqueeze_` reshaped: the base comes
    back in its new shape, the one its tangent was traced with (the old shape broadcast
    against the tangent and doubled the gradient)."""
    x = torch.tensor([[[1.0], [-2.0], [3.0]]], requires_grad=True)
    x_compiled = x.detach().clone().requires_grad_()
    expected = _reshaped_in_place_then_viewed(x)
    actual = aot_function(_reshaped_in_place_then_viewed, identity_compiler)(x_compiled)
    _assert_same_outputs(actual, expected)
    (expected[0].sum() + 10 * expected[1].sum()).backward()
    (actual[0].sum() + 10 * actual[1].sum()).backward()
    torch.testing.assert_close(x_compiled.grad, x.grad)


def test_a_no_grad_view_restrided_in_place_is_returned_cut_from_autograd():
    """A view made under no_grad and then restrided in place (`transpose_`) has a grad_fn
    that autograd refuses to read; the output is returned as eager's, cut from the graph."""

    def fn(x):
        y = x * 2
        with torch.no_grad():
            v = y[:, ::2]
            v.transpose_(0, 1)
        return v, y + 1

    x = torch.randn(3, 4, requires_grad=True)
    out, other = aot_function(fn, identity_compiler)(x)
    want, want_other = fn(x)
    with torch.no_grad():  # (autograd refuses to read eager's view outside no_grad)
        torch.testing.assert_close(out, want)
    assert out.shape == want.shape and out.stride() == want.stride()
    assert out.requires_grad == want.requires_grad
    other.sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


@pytest.mark.parametrize("dim", [-1, 0])
def test_output_restrided_under_no_grad_beside_other_outputs_raises_only_at_its_backward(dim):
    """`v.unsqueeze_(-1)` under no_grad leaves v's autograd node expecting the old
    shape: eager's backward through v raises ("invalid gradient at index N", N its
    place among the outputs differentiated together), the call and the other outputs'
    gradients do not. `unsqueeze_(0)` keeps a shape the gradient sums back to."""

    def fn(x):
        a = x.sin() * 2
        v = x.sum(dim=[-1], keepdim=True)
        with torch.no_grad():
            v.unsqueeze_(dim)
        return a, v

    def grads(outputs, x, which):
        x.grad = None
        loss = sum(
            (outputs[i] * torch.arange(outputs[i].numel()).view(outputs[i].shape)).sum()
            for i in which
        )
        try:
            loss.backward(retain_graph=True)
        except RuntimeError:
            return "raised"
        return x.grad.clone()

    compiled = aot_function(fn, identity_compiler)
    x = torch.randn(2, 2, requires_grad=True)
    expected, actual = fn(x), compiled(x)
    _assert_same_outputs(actual, expected)
    for which in ([0], [0, 1]):
        got, want = grads(actual, x, which), grads(expected, x, which)
        if isinstance(want, str):
            assert got == want
        else:
            torch.testing.assert_close(got, want)


def test_outputs_whose_backwards_fail_with_different_messages_raise_only_at_backward():
    """`v.unsqueeze_(-1)` under no_grad, then `index_copy` of v: the backward of v fails
    at its root ("invalid gradient ..."), that of the copy in IndexCopyBackward0
    ("Function IndexCopyBackward0 returned an invalid gradient ..."). Eager's call runs
    and its backward raises; each message is found by a trace of its own, and the call
    ran no backward before."""

    def fn(x):
        v = x.clamp(min=-1, max=2)
        with torch.no_grad():
            v.unsqueeze_(-1)
        w = v.index_copy(2, torch.tensor([0]), v.index_select(2, torch.tensor([0])).flip(2))
        return v, w, x.cos()

    compiled = aot_function(fn, identity_compiler)
    x = torch.randn(5, 3, 1, requires_grad=True)
    expected, actual = fn(x), compiled(x)
    _assert_same_outputs(actual, expected)
    for i in (0, 1):
        with pytest.raises(RuntimeError, match="invalid gradient"):
            actual[i].sum().backward(retain_graph=True)
        with pytest.raises(RuntimeError, match="invalid gradient"):
            expected[i].sum().backward(retain_graph=True)
    x.grad = None
    actual[2].sum().backward()
    torch.testing.assert_close(x.grad, -x.detach().sin())


WRITES_THROUGH_A_VIEW = {
    "transpose_copy": lambda v: v.transpose(0, -1).copy_(v.transpose(0, -1).flip(0)),
    "row_mul": lambda v: v[0].mul_(2),
    "diagonal_add": lambda v: v.diagonal().add_(1),
}
AFTER_THE_CALL = {
    "unsqueeze_": lambda v: v.unsqueeze_(-1),
    "mul_": lambda v: v.mul_(3),
    "t_": lambda v: v.t_(),
}


@pytest.mark.parametrize("after", AFTER_THE_CALL.values(), ids=AFTER_THE_CALL.keys())
@pytest.mark.parametrize("write", WRITES_THROUGH_A_VIEW.values(), ids=WRITES_THROUGH_A_VIEW.keys())
@pytest.mark.parametrize("shared", [False, True])
def test_output_written_through_a_view_is_not_a_view_and_takes_in_place_ops(write, after, shared):
    """An intermediate written through a view of it (its graph value is a view op of
    the write) and returned is no view, as in eager: the caller may modify it in place
    (`v.unsqueeze_(-1)`, `v.mul_(3)`), and gradients flow as eager's."""

    def fn(x):
        v = x.sin() * 1
        write(v)
        return (v, v[1]) if shared else (v,)

    compiled = aot_function(fn, identity_compiler)
    grads = []
    for f in (fn, compiled):
        x = torch.linspace(-1, 1, 9).reshape(3, 3).requires_grad_()
        outputs = f(x)
        assert not outputs[0]._is_view()
        after(outputs[0])
        _as_real_loss(outputs[0]).backward()
        grads.append((outputs[0].detach(), x.grad))
    torch.testing.assert_close(grads[1], grads[0])


def test_outputs_made_under_inference_mode_come_back_as_inference_tensors():
    def fn(x):
        with torch.inference_mode():
            y = x.sin()
        return y, x.cos()

    x = torch.randn(3, requires_grad=True)
    got = aot_function(fn, fw_compiler=lambda gm, inputs: gm)(x)
    expected = fn(x)
    assert [t.is_inference() for t in got] == [t.is_inference() for t in expected] == [True, False]
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_expanded_input_output_grad_sums_expanded_dims_at_once_as_eager(dtype):
    # rebuilt by as_strided, the output's backward summed one expanded dim at a time,
    # rounding to `dtype` in between: one unit off eager's expand backward
    def fn(a, b):
        return torch.broadcast_tensors(a, b)

    compiled = aot_function(fn, fw_compiler=lambda gm, inputs: gm)
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):
        a = torch.randn(1, 1, generator=generator).to(dtype)
        b = torch.randn(5, 2, 3, generator=generator).to(dtype)
        upstream = [torch.randn(5, 2, 3, generator=generator).to(dtype) for _ in range(2)]
        grads = []
        for f in (fn, compiled):
            leaves = (a.clone().requires_grad_(), b.clone().requires_grad_())
            grads.append(torch.autograd.grad(f(*leaves), leaves, upstream))
        assert torch.equal(grads[1][0], grads[0][0]) and torch.equal(grads[1][1], grads[0][1])


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.expand(8, 5, 6).transpose(0, 1),
        lambda x: x.expand(8, 5, 6)[::2],
        lambda x: x.expand(8, 5, 6).permute(2, 0, 1)[1:],
        lambda x: x.unsqueeze(1).expand(5, 8, 6).mT,
    ],
    ids=["transpose", "slice", "permute_slice", "unsqueeze_mT"],
)
def test_expand_then_another_view_output_grad_sums_expanded_dims_at_once_as_eager(view):
    # `expand` and then another view is no `expand` of the input: rebuilt by as_strided
    # alone, the backward summed one expanded dim at a time in bfloat16, one unit off
    # eager's; now `expand` of a view that repeats no element
    compiled = aot_function(view, fw_compiler=lambda gm, inputs: gm)
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):
        x = torch.randn(5, 1, generator=generator).to(torch.bfloat16)
        expected = view(x)
        upstream = torch.randn(expected.shape, generator=generator).to(torch.bfloat16)
        grads = []
        for f in (view, compiled):
            leaf = x.clone().requires_grad_()
            out = f(leaf)
            assert out.shape == expected.shape and out.stride() == expected.stride()
            assert torch.equal(out, expected)
            grads.append(torch.autograd.grad(out, leaf, upstream)[0])
        assert torch.equal(grads[1], grads[0])


@pytest.mark.parametrize("with_other", [False, True])
def test_a_no_grad_view_of_a_base_unsqueezed_in_place_traces_its_backward(with_other):
    """Fuzz seed 1425: `v.unsqueeze_(-1)` and a `narrow` of it under no_grad give an output
    that requires grad without a grad_fn. Autograd refused it as an output of the traced
    backward ("element 0 of tensors does not require grad"), where eager's call and
    backward run: no gradient flows from it into the inputs."""

    def fn(x):
        v = x * 2
        with torch.no_grad():
            v.unsqueeze_(-1)
            w = v.narrow(0, v.shape[0] // 2, v.shape[0] - v.shape[0] // 2)
        return (w, x.sin()) if with_other else (w,)

    x = torch.randn(3, requires_grad=True)
    x_compiled = x.detach().clone().requires_grad_()
    expected = fn(x)
    actual = aot_function(fn, identity_compiler)(x_compiled)
    with torch.no_grad():
        for got, want in zip(actual, expected):
            torch.testing.assert_close(got, want)
    assert [t.requires_grad for t in actual] == [t.requires_grad for t in expected]
    sum((t.double() * 3).sum() for t in expected).backward()
    sum((t.double() * 3).sum() for t in actual).backward()
    if with_other:
        torch.testing.assert_close(x_compiled.grad, x.grad)
    else:
        assert x.grad is None and x_compiled.grad is None


def test_an_output_without_a_derivative_from_a_no_grad_view_raises_eager_s_error_at_backward():
    """Fuzz seed 1542: `v // v` of a where() over a no_grad view of the input: its autograd
    graph holds no leaf. Finding the message of the error its backward raises called
    autograd.grad with no inputs, which torch 2.11 refused at the call ("grad requires
    non-empty inputs")."""

    def fn(x):
        with torch.no_grad():
            v = x.unsqueeze(0).expand(2, *x.shape)
            with torch.enable_grad():
                w = torch.where(v > 0, v, True)
                return w // w

    x = torch.tensor([[1.5], [-2.0]], requires_grad=True)
    expected = fn(x)
    actual = aot_function(fn, identity_compiler)(x.detach().clone().requires_grad_())
    with torch.no_grad():
        torch.testing.assert_close(actual, expected)
    assert actual.requires_grad == expected.requires_grad
    if expected.requires_grad:
        with pytest.raises(RuntimeError) as eager_error:
            expected.sum().backward()
        with pytest.raises(RuntimeError) as compiled_error:
            actual.sum().backward()
        assert "floor_divide" in str(eager_error.value)
        assert "floor_divide" in str(compiled_error.value)
