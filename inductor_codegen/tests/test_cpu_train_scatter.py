"""Scatter kernels (index_put, embedding backward, scatter, scatter_add, index_add) vs eager.

OpInfo samples of each op (every sample, float32, CPU), then targeted cases with
indices that repeat (accumulation order), negative indices, padding indices,
sizes large enough for the parallel loops (both the per-row and the sliced
form), out-of-range indices raising eager's exception type, and an embedding
model trained through `ember.compile`.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import check, compile_fn, trace
from opinfo_samples import sample_fns
from torch.testing._internal.common_methods_invocations import op_db

from inductor_codegen import compile_graph

aten = torch.ops.aten

SCATTER_OPS = ("index_put", "index_add", "scatter", "scatter_add", "put", "index_fill")


def _opinfo_cases():
    for info in op_db:
        if info.name in SCATTER_OPS and torch.float32 in info.supported_dtypes("cpu"):
            name = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
            yield pytest.param(info, id=name)


@pytest.mark.parametrize("info", list(_opinfo_cases()))
def test_opinfo_scatter_samples(info):
    compared = 0
    for fn, tensors in sample_fns(info, "cpu", limit=None):
        try:
            expected = fn(*[t.clone() for t in tensors])
            gm = trace(fn, *[t.clone() for t in tensors])
        except Exception:  # the reference front end cannot trace this sample
            continue
        compiled = compile_graph(gm, tensors)
        actual = compiled(*[t.clone() for t in tensors])
        torch.testing.assert_close(actual, expected, equal_nan=True, rtol=1e-4, atol=1e-5)
        compared += 1
    if not compared:
        pytest.skip("no sample could be traced by make_fx")


def _lowered(compiled, op: str) -> bool:
    return not any(op in name for name in compiled.fallbacks)


def _repeating(high: int, size, low: int = 0) -> torch.Tensor:
    index = torch.randint(low, high, size)
    index.view(-1)[: max(1, index.numel() // 3)] = high - 1  # a third hits one row
    return index


@pytest.mark.parametrize("rows,width", [(40, 33), (512, 128), (7, 1)])
@pytest.mark.parametrize("padding_idx", [-1, 3])
def test_embedding_backward_is_one_kernel(rows, width, padding_idx):
    torch.manual_seed(0)
    vocab = 50
    grad = torch.randn(rows, width)
    index = _repeating(vocab, (rows,))
    index[::5] = 3

    def fn(g, i):
        return aten.embedding_dense_backward(g, i, vocab, padding_idx, False)

    compiled = check(fn, grad, index)
    assert _lowered(compiled, "index_put"), compiled.fallbacks
    assert compiled.kernel_count == 1  # zero fill, padding mask and scatter together


def test_embedding_backward_of_a_3d_gradient_fuses_its_producer():
    torch.manual_seed(0)
    grad = torch.randn(4, 16, 24)
    index = _repeating(30, (4, 16))

    def fn(g, i):
        return aten.embedding_dense_backward(g * 2 + 1, i, 30, -1, False).sum(0)

    compiled = check(fn, grad, index, rtol=1e-4, atol=1e-4)
    assert _lowered(compiled, "index_put")


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("size", [(6, 9), (64, 1024)])
def test_scatter_add_with_repeated_indices(dim, size):
    torch.manual_seed(0)
    x = torch.randn(size)
    index_size = list(size)
    index_size[dim] = index_size[dim] + 3
    index = _repeating(size[dim], index_size)
    src = torch.randn(index_size)
    compiled = check(lambda x, i, s: torch.scatter_add(x.cos(), dim, i, s * 2), x, index, src)
    assert _lowered(compiled, "scatter_add")


def test_scatter_add_index_smaller_than_input():
    torch.manual_seed(0)
    x, src = torch.randn(5, 8, 3), torch.randn(6, 9, 4)
    index = _repeating(8, (4, 6, 2))
    compiled = check(lambda x, i, s: torch.scatter_add(x, 1, i, s), x, index, src)
    assert _lowered(compiled, "scatter_add")


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_stores_a_permutation(dim):
    torch.manual_seed(0)
    x = torch.randn(8, 10)
    index = torch.argsort(torch.rand(8, 10), dim=dim)
    compiled = check(
        lambda x, i, s: torch.scatter(x, dim, i, s.exp()), x, index, torch.randn(8, 10)
    )
    assert _lowered(compiled, "scatter")
    check(lambda x, i: torch.scatter(x, dim, i, 2.5), x, index)


@pytest.mark.parametrize("accumulate", [True, False])
def test_index_put_with_negative_and_repeated_indices(accumulate):
    torch.manual_seed(0)
    x = torch.randn(12, 7)
    index = torch.tensor([0, -1, 3, 11, -12, 5, 5])
    if not accumulate:
        index = torch.tensor([0, -1, 3, -5, 6])
    values = torch.randn(index.numel(), 7)
    compiled = check(
        lambda x, i, v: torch.index_put(x, (i,), v, accumulate=accumulate), x, index, values
    )
    assert _lowered(compiled, "index_put")


def test_index_put_two_indices_broadcast_values():
    torch.manual_seed(0)
    x = torch.randn(6, 5, 4)
    rows, cols = _repeating(6, (3, 1)), _repeating(5, (1, 8))
    values = torch.randn(8, 4)
    compiled = check(
        lambda x, r, c, v: torch.index_put(x, (r, c), v, accumulate=True), x, rows, cols, values
    )
    assert _lowered(compiled, "index_put")


@pytest.mark.parametrize("dim,alpha", [(0, 1), (1, 2.5), (-1, -1)])
def test_index_add_with_repeated_indices(dim, alpha):
    torch.manual_seed(0)
    x = torch.randn(9, 11)
    size = list(x.shape)
    size[dim] = 14
    index = _repeating(x.shape[dim], (14,))
    source = torch.randn(size)
    compiled = check(lambda x, i, s: torch.index_add(x, dim, i, s, alpha=alpha), x, index, source)
    assert _lowered(compiled, "index_add")


def test_integer_scatter_add_is_exact():
    x = torch.zeros(10, dtype=torch.int64)
    index = _repeating(10, (100,))
    compiled = check(lambda x, i: torch.scatter_add(x, 0, i, torch.ones_like(i)), x, index)
    assert _lowered(compiled, "scatter_add")


# (fn, args builder, the bad index's position in args, the size it indexes, eager's exception)
BOUNDS = {
    "index_put": (
        lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
        lambda: (torch.randn(5, 3), torch.tensor([0, 4, 1]), torch.randn(3, 3)),
    ),
    "scatter_add": (
        lambda x, i, s: torch.scatter_add(x, 1, i, s),
        lambda: (torch.randn(4, 5), torch.randint(0, 5, (4, 2)), torch.randn(4, 2)),
    ),
    "index_add": (
        lambda x, i, s: torch.index_add(x, 0, i, s),
        lambda: (torch.randn(5, 3), torch.tensor([0, 4, 1]), torch.randn(3, 3)),
    ),
}


@pytest.mark.parametrize("name", list(BOUNDS))
@pytest.mark.parametrize("bad", ["past_end", "too_negative"])
def test_out_of_range_index_raises_like_eager(name, bad):
    fn, build = BOUNDS[name]
    x, index, values = build()
    compiled, _ = compile_fn(fn, x, index, values)
    wrong = index.clone()
    limit = x.shape[0] if name != "scatter_add" else x.shape[1]
    wrong.view(-1)[1] = limit if bad == "past_end" else -limit - 1
    with pytest.raises(Exception) as eager_error:
        fn(x, wrong, values)
    with pytest.raises(eager_error.type):
        compiled(x, wrong, values)
    # the failure is not sticky
    torch.testing.assert_close(compiled(x, index, values), fn(x, index, values))


def test_embedding_model_trains_through_ember_compile():
    ember = pytest.importorskip("ember")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 32, padding_idx=0), torch.nn.Linear(32, 8))
    tokens = _repeating(64, (4, 24))

    def grads(module):
        for p in module.parameters():
            p.grad = None
        out = module(tokens)
        (out.sin().sum()).backward()
        return [p.grad.clone() for p in module.parameters()]

    expected = grads(model)
    compiled = ember.compile(model, backend="inductor")
    for _ in range(2):
        torch.testing.assert_close(grads(compiled), expected, rtol=1e-4, atol=1e-5)


def test_embedding_bag_style_sum_backward():
    """F.embedding then a sum over tokens: the backward scatters an expanded gradient."""
    torch.manual_seed(0)
    weight = torch.randn(20, 6, requires_grad=True)
    index = _repeating(20, (3, 10))

    def fn(w, i):
        out = F.embedding(i, w).sum(1)
        (grad,) = torch.autograd.grad(out.sum(), w, create_graph=False)
        return grad

    expected = fn(weight, index)
    gm = trace(fn, weight, index)
    compiled = compile_graph(gm, [weight, index])
    torch.testing.assert_close(compiled(weight, index), expected)
