"""In-place shape and stride changes of an input tensor (`x.t_()`, `x.unsqueeze_(0)`,
`x.as_strided_(...)`) are captured in the graph; the compiled function restrides the
caller's tensor after it, as eager's op left it. Resizing an input (`resize_`) runs
eagerly, as a graph break."""

from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ["eager", "aot_eager", "inductor"]


def _changes_inputs(x0, x1):
    x1.unsqueeze_(0)
    y = x1 * 2
    x1.transpose_(0, 2)
    x0.squeeze_()
    return x0 + 1, y


def _assert_same_tensor_state(got, want):
    assert got.shape == want.shape
    assert got.stride() == want.stride()
    assert got.storage_offset() == want.storage_offset()
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_metadata_mutation_changes_the_callers_tensor_like_eager(backend):
    compiled = ember.compile(_changes_inputs, backend=backend)
    for shape in [(2, 3), (4, 5)]:
        eager_args = [torch.randn(1, shape[1]), torch.randn(*shape)]
        compiled_args = [t.clone() for t in eager_args]
        expected = _changes_inputs(*eager_args)
        actual = compiled(*compiled_args)
        for got, want in zip(actual, expected):
            torch.testing.assert_close(got, want)
        for got, want in zip(compiled_args, eager_args):
            _assert_same_tensor_state(got, want)


RESTRIDES = {
    "unsqueeze_": lambda x: x.unsqueeze_(1),
    "squeeze_": lambda x: x.squeeze_(),
    "squeeze_dim": lambda x: x.squeeze_(1),
    "t_": lambda x: x.t_(),
    "transpose_": lambda x: x.transpose_(0, 1),
    "swapdims_": lambda x: x.swapdims_(1, 0),
    "as_strided_": lambda x: x.as_strided_((2, 2), (1, 2), 1),
    "t_then_t_": lambda x: x.t_().t_(),
}


def _restrides_then_computes(restride):
    def program(x, y):
        out = restride(x)
        z = x * 2 + 1
        return out, z, y + 1

    return program


def _writes_then_restrides(restride):
    def program(x, y):
        x.add_(1)
        restride(x)
        x.mul_(2)  # written in its new geometry
        return x.sum(0), y * x.flatten()[0]

    return program


def _input_of_shape(name):
    return torch.randn(3, 1, 2) if name.startswith("squeeze") else torch.randn(3, 2)


@pytest.mark.parametrize("make", [_restrides_then_computes, _writes_then_restrides])
@pytest.mark.parametrize("name", sorted(RESTRIDES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_input_restrided_in_place_is_restrided_after_the_graph(backend, name, make):
    program = make(RESTRIDES[name])
    compiled = ember.compile(program, backend=backend, fullgraph=True)
    for _ in range(2):
        x, y = _input_of_shape(name), torch.randn(3)
        eager_x, got_x = x.clone(), x.clone()
        expected = program(eager_x, y)
        got = compiled(got_x, y)
        torch.testing.assert_close(got, expected)
        _assert_same_tensor_state(got_x, eager_x)
    if make is _restrides_then_computes:
        assert got[0] is got_x  # the caller's tensor itself, as eager returns it


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_view_with_an_offset_restrided_in_place_keeps_its_storage(backend):
    def program(x):
        x.t_()
        return x + 1

    compiled = ember.compile(program, backend=backend)
    base = torch.randn(5, 4)
    eager_x, got_x = base.clone()[1:4, 1:3], base.clone()[1:4, 1:3]
    expected = program(eager_x)
    got = compiled(got_x)
    torch.testing.assert_close(got, expected)
    _assert_same_tensor_state(got_x, eager_x)
    got_x.fill_(7.0)  # still a view of the caller's storage
    assert got_x._base is not None and (got_x._base[1:4, 1:3] == 7.0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_leaf_input_restrided_in_place_keeps_gradients(backend):
    def program(x, w):
        x.t_()
        return (x * w).sum()

    compiled = ember.compile(program, backend=backend)
    leaf = torch.randn(3, 2, requires_grad=True)
    w = torch.randn(2, 3)
    grads = []
    for run in (program, compiled):
        x = leaf * 1
        out = run(x, w)
        assert x.shape == (2, 3)
        (out + (x * x).sum()).backward()  # through the restrided input too
        grads.append(leaf.grad.clone())
        leaf.grad = None
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_leaf_requiring_grad_restrided_in_place_raises_eagers_error(backend):
    def program(x):
        x.t_()
        return x * 2

    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        program(torch.randn(3, 2, requires_grad=True))
    compiled = ember.compile(program, backend=backend)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        compiled(torch.randn(3, 2, requires_grad=True))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_input_restrided_in_place_under_dynamic_shapes(backend):
    def program(x):
        x.unsqueeze_(0).transpose_(0, 2)
        return x * 2

    compiled = ember.compile(program, backend=backend, dynamic=True)
    for shape in [(3, 2), (5, 4), (2, 7)]:
        x = torch.randn(*shape)
        eager_x, got_x = x.clone(), x.clone()
        expected = program(eager_x)
        got = compiled(got_x)
        torch.testing.assert_close(got, expected)
        _assert_same_tensor_state(got_x, eager_x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_resized_in_place_runs_eagerly(backend):
    def program(x):
        x.resize_(2, 3)
        return x * 2

    compiled = ember.compile(program, backend=backend)
    x = torch.randn(3, 2)
    eager_x, got_x = x.clone(), x.clone()
    expected = program(eager_x)
    torch.testing.assert_close(compiled(got_x), expected)
    _assert_same_tensor_state(got_x, eager_x)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_input_as_strided_in_place_takes_an_offset_into_the_storage(backend, dynamic):
    def program(x):
        x.as_strided_((2, 2), (1, 2), 1)
        return x + 1

    compiled = ember.compile(program, backend=backend, dynamic=dynamic)
    for row, column in [(1, 1), (2, 0)]:  # views of the storage at other offsets
        base = torch.randn(6, 4)
        eager_x = base.clone()[row : row + 3, column : column + 2]
        got_x = base.clone()[row : row + 3, column : column + 2]
        expected = program(eager_x)
        torch.testing.assert_close(compiled(got_x), expected)
        _assert_same_tensor_state(got_x, eager_x)


class _TransposesItsWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 2))

    def forward(self, x):
        with torch.no_grad():
            self.weight.t_()
        return (x * self.weight).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_restrided_in_place_under_no_grad_has_eagers_gradient(backend):
    eager_model = _TransposesItsWeight()
    model = _TransposesItsWeight()
    model.load_state_dict(eager_model.state_dict())
    x = torch.randn(2, 3)
    expected = eager_model(x)
    got = ember.compile(model, backend=backend)(x)
    torch.testing.assert_close(got, expected)
    expected.backward()
    got.backward()
    _assert_same_tensor_state(model.weight.detach(), eager_model.weight.detach())
    torch.testing.assert_close(model.weight.grad, eager_model.weight.grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_restrided_once_when_another_input_turns_dynamic(backend):
    def program(x, y):
        y.unsqueeze_(0)
        return x * 2

    compiled = ember.compile(program, backend=backend)
    for shape in [(6, 1, 5), (2, 1, 1), (3, 4, 2)]:  # the second call compiles with sizes symbolic
        x, y = torch.randn(shape), torch.ones(1, dtype=torch.int32)
        eager_y, got_y = y.clone(), y.clone()
        expected = program(x, eager_y)
        torch.testing.assert_close(compiled(x, got_y), expected)
        _assert_same_tensor_state(got_y, eager_y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_restrided_beside_an_output_returned_in_another_layout(backend):
    def program(x0, x1):
        x0.unsqueeze_(0)
        return (torch.div(x1, x1).movedim(1, 0),)

    compiled = ember.compile(program, backend=backend)
    x0, x1 = torch.ones(1, 1, 1, dtype=torch.bool), torch.randn(1, 1, 1)
    eager_x0, got_x0 = x0.clone(), x0.clone()
    torch.testing.assert_close(compiled(got_x0, x1), program(eager_x0, x1))
    _assert_same_tensor_state(got_x0, eager_x0)
