"""Gradients whose eager formula branches on the input's values match eager on any data.

The graph is traced on fake tensors once and reused for every input, so a branch
that eager picks by reading the data must be chosen inside the graph.
"""

from __future__ import annotations

import pytest
import torch

from aot_autograd import aot_function

nan, inf = float("nan"), float("inf")

PROD_CALLS = {
    "all": lambda x: x.prod(),
    "dim0": lambda x: x.prod(0),
    "dim1_keepdim": lambda x: x.prod(1, keepdim=True),
    "last_dim": lambda x: x.prod(-1),
    "transposed": lambda x: x.t().prod(1),
    "dtype": lambda x: x.prod(1, dtype=torch.float64),
    "all_dtype": lambda x: x.prod(dtype=torch.float64),
    "one_dim": lambda x: x[0].prod(0),
    "zero_dim": lambda x: x[0, 0].prod(),
    "zero_dim_dim": lambda x: x[0, 0].prod(0),
    # negative dims of a 3-D tensor (autograd saves them as their unsigned 64-bit wrap)
    "first_of_three_negative": lambda x: x.unsqueeze(-1).prod(-3),
    "middle_of_three_negative": lambda x: x.unsqueeze(0).prod(-2, keepdim=True),
}

PROD_INPUTS = {
    "no_zeros": [[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0], [2.0, 3.0, 4.0]],
    "one_zero": [[0.0, 2.0, 3.0], [1.0, 5.0, 2.0], [2.0, 3.0, 4.0]],
    "zeros": [[0.0, 2.0, 3.0], [1.0, 0.0, 0.0], [2.0, 3.0, 4.0]],
    "inf_without_zeros": [[inf, 2.0, 3.0], [1.0, -inf, 2.0], [2.0, 3.0, 4.0]],
    "nan_without_zeros": [[nan, 2.0, 3.0], [1.0, 5.0, 2.0], [2.0, 3.0, 4.0]],
    "inf_and_zero": [[0.0, inf, 1.0], [1.0, 2.0, 3.0], [0.0, 0.0, inf]],
    "size_one_inf": [[inf], [-inf], [nan]],
    "size_one_row": [[0.0, inf, 0.0]],
    "empty": [[], [], []],
}


def _grads(fn, x, compiled):
    x = x.clone().requires_grad_()
    out = (aot_function(fn, lambda gm, _: gm) if compiled else fn)(x)
    weight = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.dtype)
    (grad,) = torch.autograd.grad((out * weight).sum(), x)
    return out, grad


@pytest.mark.parametrize("values", PROD_INPUTS.values(), ids=PROD_INPUTS.keys())
@pytest.mark.parametrize("call", PROD_CALLS.values(), ids=PROD_CALLS.keys())
def test_prod_backward_follows_eager_formula_for_zeros_inf_and_nan(call, values):
    x = torch.tensor(values)
    if x.numel() == 0 and call in (PROD_CALLS["zero_dim"], PROD_CALLS["zero_dim_dim"]):
        pytest.skip("no element to select")
    expected_out, expected_grad = _grads(call, x, compiled=False)
    out, grad = _grads(call, x, compiled=True)
    torch.testing.assert_close(out, expected_out, equal_nan=True)
    torch.testing.assert_close(grad, expected_grad, equal_nan=True)


def test_prod_backward_branch_is_chosen_at_every_call():
    compiled = aot_function(lambda x: x.prod(1), lambda gm, _: gm)
    for values in ([[inf, 2.0], [3.0, 1.0]], [[inf, 2.0], [0.0, 1.0]], [[1.0, 2.0], [3.0, 4.0]]):
        x_eager = torch.tensor(values, requires_grad=True)
        x_eager.prod(1).sum().backward()
        x_compiled = torch.tensor(values, requires_grad=True)
        compiled(x_compiled).sum().backward()
        torch.testing.assert_close(x_compiled.grad, x_eager.grad, equal_nan=True)


def test_autograd_nodes_visits_every_node_once_with_objects_freed_between():
    """Node objects are made per access and freed once unreferenced; a walk keyed by
    id() must keep them alive, or a reused id hides a node (a prod behind a select)."""
    from aot_autograd.backward_formulas import autograd_nodes

    x = torch.randn(3, 4, requires_grad=True)
    branches = [x.prod(1).select(0, 0), x.sin().sum(), x.exp().mean(), x.cos().amax()]
    y = sum(b - b for b in branches)
    names = [node.name() for node in autograd_nodes([y.grad_fn])]
    for name in ("ProdBackward1", "SelectBackward0", "SinBackward0", "ExpBackward0"):
        assert names.count(name) == 1
    assert names.count("SubBackward0") == 4
    assert sum(name.endswith("AccumulateGrad") for name in names) == 1
