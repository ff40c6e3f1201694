"""torch.func.vmap through ember.compile on every backend: one graph (vmap traced into it
as functorch's batching calls, which aot_autograd traces to ATen ops), values and
gradients equal eager's. associative_scan's generic mode is a vmap of its combine_fn
(Mamba's selective scan in transformers)."""

from __future__ import annotations

import pytest
import torch

import ember
from dynamo_capture.testing import clone_inputs

_associative_scan = getattr(torch._higher_order_ops, "associative_scan", None)

BACKENDS = ["eager", "aot_eager", "inductor"]


def vmap_with_a_reduction(x):
    return torch.vmap(lambda row, other: row * other + row.sum())(x, x.cos()).sin()


def vmap_with_unbatched_weight(x, w):
    return torch.vmap(lambda row: row @ w, in_dims=0)(x).relu()


def _linear_recurrence(left, right):
    decay_left, state_left = left
    decay_right, state_right = right
    return decay_left * decay_right, decay_right * state_left + state_right


def selective_scan(decays, inputs):
    _, states = _associative_scan(
        _linear_recurrence, (decays, inputs), dim=2, combine_mode="generic"
    )
    return states


def _args(fn):
    torch.manual_seed(0)
    if fn is selective_scan:
        return [torch.rand(2, 3, 16).requires_grad_(), torch.randn(2, 3, 16).requires_grad_()]
    if fn is vmap_with_unbatched_weight:
        return [torch.randn(4, 3).requires_grad_(), torch.randn(3, 5).requires_grad_()]
    return [torch.randn(4, 3).requires_grad_()]


PROGRAMS = [vmap_with_a_reduction, vmap_with_unbatched_weight, selective_scan]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda fn: fn.__name__)
def test_vmap_is_one_graph_values_and_gradients_eager(backend, fn):
    if fn is selective_scan and _associative_scan is None:
        pytest.skip("this torch has no associative_scan")
    compiled = ember.compile(fn, backend=backend, fullgraph=True)
    args = _args(fn)
    eager_args, compiled_args = clone_inputs(args), clone_inputs(args)
    expected, got = fn(*eager_args), compiled(*compiled_args)
    torch.testing.assert_close(got, expected)
    expected.sin().sum().backward()
    got.sin().sum().backward()
    for eager_arg, compiled_arg in zip(eager_args, compiled_args, strict=True):
        torch.testing.assert_close(compiled_arg.grad, eager_arg.grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_inference_is_eager(backend):
    x = torch.randn(4, 3)
    with torch.no_grad():
        got = ember.compile(vmap_with_a_reduction, backend=backend)(x)
    torch.testing.assert_close(got, vmap_with_a_reduction(x))


def vmap_draws_in_error_mode(x):
    return torch.vmap(lambda row: row + torch.rand(row.shape))(x) * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_refusing_a_random_op_raises_eagers_error(backend):
    # functorch raises while aot_autograd traces; the level it opened is closed again,
    # so the error is eager's and later operations run unbatched
    compiled = ember.compile(vmap_draws_in_error_mode, backend=backend)
    x = torch.randn(4, 3)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        vmap_draws_in_error_mode(x)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        compiled(x)
    assert torch._C._functorch.get_dynamic_layer_stack_depth() == 0
