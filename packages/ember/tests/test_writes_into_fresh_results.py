"""In-place writes into results that decompositions compute as views match eager.

Matmul's result is a view of a batched product to the decomposition (`_unsafe_view`), a
layer norm's output a view of its intermediate, `reshape` or `flatten` of a new tensor a
view of it: to eager and autograd each is a new tensor. A write into (part of) one must
change that tensor only, and its gradient must follow eager's autograd history.

Footguns, worst first:
| a write reaches the gradient wrongly or an input  | fill_/add_/mul_/zero_ into results of
| (silent wrong result)                              | matmul, reshape, flatten, contiguous,
|                                                    | clone-then-view chains, norms, mv
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember

BACKENDS = ["aot_eager", "inductor"]


pytestmark = pytest.mark.usefixtures("fresh_ember")


def _matmul_row_fill(a, b):
    y = a @ b
    y[0].fill_(1)
    return y * a[:, :4]


def _batched_matmul_flat_fill(a, b):
    y = a.view(2, 2, 6) @ b
    y.view(-1)[:3].fill_(0)
    return y.sin()


def _matmul_3d_fill(a, b):
    y = torch.matmul(a.view(2, 2, 6), b)
    y[0, 0].fill_(7)
    return y.exp()


def _vector_matmul_zero(a, b):
    y = a[0] @ b
    y[1:].zero_()
    return y * a[0, 0]


def _linear_column_add(a, b):
    y = F.linear(a, b.t())
    y[:, 1].add_(1)
    return y.tanh()


def _reshape_row_fill(a, b):
    y = (a * 2).reshape(6, 4)
    y[1].fill_(2)
    return y.sum(0) * b[0]


def _reshape_transposed_column_add(a, b):
    y = (a.t() * 2).reshape(4, 6)
    y[:, 0].add_(1)
    return y.cos()


def _flatten_mul(a, b):
    y = (a * 1).flatten()
    y[:5].mul_(3)
    return y * 2


def _flatten_transposed_mul(a, b):
    y = a.t().flatten()
    y[:5].mul_(3)
    return y * 2


def _contiguous_row_fill(a, b):
    y = a.t().contiguous()
    y[0].fill_(1)
    return y * b


def _clone_view_add(a, b):
    y = a.clone()
    y.view(3, 8)[0].add_(5)
    return y * 3


def _clone_view_chain_fill(a, b):
    c = a.clone()
    c.view(24)[2:7].fill_(0)
    return c.t() @ b.t()


def _layer_norm_row_add(a, b):
    y = F.layer_norm(a, (6,))
    y[0].add_(1)
    return y * b[:, 0]


def _mv_fill(a, b):
    y = torch.mv(a, b[:, 0])
    y.fill_(1)
    return y * a[:, 0]


CASES = {f.__name__.lstrip("_"): f for f in [
    _matmul_row_fill, _batched_matmul_flat_fill, _matmul_3d_fill, _vector_matmul_zero,
    _linear_column_add, _reshape_row_fill, _reshape_transposed_column_add, _flatten_mul,
    _flatten_transposed_mul, _contiguous_row_fill, _clone_view_add, _clone_view_chain_fill,
    _layer_norm_row_add, _mv_fill,
]}  # fmt: skip


def _inputs():
    torch.manual_seed(0)
    a = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    return a, b


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_write_into_fresh_result_matches_eager_values_and_gradients(backend, case):
    fn = CASES[case]
    a, b = _inputs()
    expected = fn(a, b)
    a_compiled, b_compiled = _inputs()
    actual = ember.compile(fn, backend=backend)(a_compiled, b_compiled)
    torch.testing.assert_close(actual, expected)
    tangent = torch.randn(expected.shape, dtype=torch.float64)
    expected.backward(tangent)
    actual.backward(tangent)
    torch.testing.assert_close(a_compiled.grad, a.grad)
    torch.testing.assert_close(b_compiled.grad, b.grad)
    torch.testing.assert_close(a_compiled, a)  # inputs are never written


@pytest.mark.parametrize("backend", BACKENDS)
def test_fresh_result_of_a_decomposition_is_not_the_callers_input(backend):
    """`logsumexp` of a 0-d tensor decomposes to the tensor itself; eager returns a new one."""
    x = torch.tensor(2.0)
    out = ember.compile(lambda t: torch.logsumexp(t, 0), backend=backend)(x)
    torch.testing.assert_close(out, torch.logsumexp(torch.tensor(2.0), 0))
    out.add_(1)
    torch.testing.assert_close(x, torch.tensor(2.0))
