"""In-place writes into tensors whose elements share memory (`expand`) never write wrong values.

Eager refuses most in-place ops on such a tensor ("unsupported operation: more than one
element of the written-to tensor refers to a single memory location"); a functional
graph sees separate elements and would write each. Compiled code must raise a
RuntimeError then, and leave the caller's tensor as eager leaves it. Writes eager
performs (`fill_`, `masked_fill_`, a column of an expanded tensor) give eager's values;
those whose result depends on eager's write order run eagerly, with a warning.

Footguns, worst first:
| a write through an expanded input or view lands  | add_, mul_, copy_, sub_ into an
| in the wrong elements (silent wrong result)       | expanded input or in-frame expand
| eager's refusal lost                              | -> RuntimeError, input untouched
| a write eager allows (fill_, zero_) refused       | eager's values, merged into the
|                                                   | compact memory
"""

from __future__ import annotations

import pytest
import torch

import ember
from aot_autograd import EagerCallWarning

BACKENDS = ["aot_eager", "inductor"]


pytestmark = pytest.mark.usefixtures("fresh_ember")


INPUT_WRITES = {
    "add_": lambda x: x.add_(1),
    "mul_then_use": lambda x: x.mul_(2) + 1,
    "copy_": lambda x: x.copy_(torch.ones(3, 4)),
    "sub_tensor": lambda x: x.sub_(torch.arange(4.0)),
    "clamp_": lambda x: x.clamp_(0, 0.1),
    "row_add_": lambda x: x[0].add_(1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(INPUT_WRITES))
def test_in_place_write_into_expanded_input_raises_like_eager(backend, case):
    fn = INPUT_WRITES[case]
    with pytest.raises(RuntimeError, match="single memory location"):
        fn(torch.randn(3, 1).expand(3, 4))
    base = torch.randn(3, 1)
    before = base.clone()
    with pytest.raises(RuntimeError, match="share memory|single memory location"):
        ember.compile(fn, backend=backend)(base.expand(3, 4))
    torch.testing.assert_close(base, before)  # nothing written


FRAME_WRITES = {
    "mul_": lambda a: a.expand(3, 4).mul_(2),
    "add_then_return_base": lambda a: (a.expand(3, 4).add_(1), a),
    "intermediate": lambda a: (a * 1).expand(3, 4).add_(1),
    "unsqueeze_expand": lambda a: a.unsqueeze(0).expand(2, 3, 1).mul_(2),
    "broadcast_to": lambda a: torch.broadcast_to(a, (3, 4)).sub_(1),
    "copy_": lambda a: a.expand(3, 4).copy_(torch.ones(3, 4)),
    "as_strided": lambda a: a.as_strided((3, 4), (1, 0)).add_(1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(FRAME_WRITES))
def test_in_place_write_into_expand_in_the_frame_raises_like_eager(backend, case):
    fn = FRAME_WRITES[case]
    with pytest.raises(RuntimeError, match="single memory location"):
        fn(torch.randn(3, 1))
    a = torch.randn(3, 1)
    before = a.clone()
    with pytest.raises(RuntimeError, match="share memory|single memory location"):
        ember.compile(fn, backend=backend)(a)
    torch.testing.assert_close(a, before)


ALLOWED_WRITES = {
    "fill_": lambda x: x.fill_(2.0),
    "zero_": lambda x: x.zero_(),
    "column_add_": lambda x: (x[:, 0].add_(1), x[:, 1] * 1)[1],
    "masked_fill_": lambda x: x.masked_fill_(torch.ones(3, 4, dtype=torch.bool), 1.0),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(ALLOWED_WRITES))
def test_write_eager_allows_into_expanded_input_matches_eager(backend, case):
    """Writes eager performs on an expanded tensor (one value per memory location):
    compiled code gives eager's values."""
    fn = ALLOWED_WRITES[case]
    base = torch.randn(3, 1)
    compiled_base = base.clone()
    expected = fn(base.expand(3, 4))
    out = ember.compile(fn, backend=backend)(compiled_base.expand(3, 4))
    torch.testing.assert_close(compiled_base, base)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_of_no_elements_into_expanded_input_runs_like_eager(backend):
    """An empty slice of an expanded input written in place: eager writes nothing."""

    def fn(x):
        x.narrow(1, 0, 0).add_(1)
        y = x.clamp(min=-1, max=2)
        y.div_(y)
        return y, x

    base = torch.randn(1, 1)
    expected = fn(base.expand(4, 1))
    compiled_base = base.clone()
    actual = ember.compile(fn, backend=backend)(compiled_base.expand(4, 1))
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(compiled_base, base)


# Writes eager performs into an expanded tensor, checked in eager (torch 2.13): each
# writes one value to every alias of a memory location it touches. `masked_fill_`,
# `index_fill_` and `index_put_` warn (deprecated) and run.
EAGER_ALLOWED = {
    "fill_": lambda x: x.fill_(2.0),
    "zero_": lambda x: x.zero_(),
    "masked_fill_where_negative": lambda x: x.masked_fill_(x < 0, 0),
    "masked_fill_some_columns": lambda x: x.masked_fill_(
        torch.tensor([True, False, True, False]), 7.0
    ),
    "masked_fill_tensor_value": lambda x: x.masked_fill_(x > 0, torch.tensor(4.0)),
    "index_fill_expanded_dim": lambda x: x.index_fill_(1, torch.tensor([0, 2]), -1.0),
    "index_fill_other_dim": lambda x: x.index_fill_(0, torch.tensor([0, 2]), 5.0),
    "narrow_zero_": lambda x: x.narrow(0, 0, 1).zero_(),
    "narrow_expanded_dim_zero_": lambda x: x.narrow(1, 1, 2).zero_(),
    "diagonal_add_": lambda x: x.diagonal().add_(1),
    "column_add_": lambda x: x[:, 0].add_(1),
    "transposed_row_mul_": lambda x: x.t()[2].mul_(3),
    "row_fill_": lambda x: x[1].fill_(9.0),
    "setitem_scalar": lambda x: x.__setitem__((0, 1), 5.0),
    "column_copy_": lambda x: x[:, 1].copy_(torch.tensor([7.0, 8.0, 9.0])),
    "index_put_": lambda x: x.index_put_(
        (torch.tensor([0, 2]), torch.tensor([1, 3])), torch.tensor(6.0)
    ),
}


def _reads_after(fn):
    """`fn`'s write, then what later reads of the written tensor see, and its result."""

    def wrapped(x):
        out = fn(x)
        return out, x * 2, x.sum(1), x[:, 3] + 0

    return wrapped


@pytest.mark.filterwarnings("ignore:Use of .* on expanded tensors is deprecated")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(EAGER_ALLOWED))
def test_write_eager_allows_into_expanded_input_gives_eager_values(backend, case):
    fn = _reads_after(EAGER_ALLOWED[case])
    base = torch.randn(3, 1)
    compiled_base = base.clone()
    expected = fn(base.expand(3, 4))
    actual = ember.compile(fn, backend=backend)(compiled_base.expand(3, 4))
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(compiled_base, base)  # the caller's memory, written as eager


@pytest.mark.filterwarnings("ignore:Use of .* on expanded tensors is deprecated")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(EAGER_ALLOWED))
def test_write_eager_allows_into_expand_in_the_frame_gives_eager_values(backend, case):
    write = EAGER_ALLOWED[case]

    def fn(a):
        x = a.expand(3, 4)
        out = write(x)
        return out, x * 2, a + 0, a.expand(2, 3, 4).sum(0)

    a = torch.randn(3, 1)
    compiled_a = a.clone()
    expected = fn(a)
    actual = ember.compile(fn, backend=backend)(compiled_a)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(compiled_a, a)


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_into_expand_of_fresh_tensor_in_the_frame_gives_eager_values(backend):
    def fn(a):
        x = (a * 1).unsqueeze(0).expand(2, 3, 4)
        x[:, 1].fill_(3.0)
        x[0, :, 2].add_(1)
        return x + 0, x.sum()

    a = torch.randn(3, 4)
    torch.testing.assert_close(ember.compile(fn, backend=backend)(a), fn(a))


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_into_input_expanded_along_several_dims_gives_eager_values(backend):
    def fn(x):
        x[0, :, 1].add_(2)
        x.diagonal(0, 0, 2).fill_(-1.0)
        return x.clone(), x.mean()

    base = torch.randn(1, 3, 1)
    compiled_base = base.clone()
    expected = fn(base.expand(4, 3, 4))
    actual = ember.compile(fn, backend=backend)(compiled_base.expand(4, 3, 4))
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(compiled_base, base)


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_eager_refuses_after_allowed_write_into_expanded_input_raises(backend):
    def fn(x):
        x.fill_(1.0)
        return x.add_(1)

    with pytest.raises(RuntimeError, match="single memory location"):
        fn(torch.randn(3, 1).expand(3, 4))
    base = torch.randn(3, 1)
    before = base.clone()
    with pytest.raises(RuntimeError, match="single memory location"):
        ember.compile(fn, backend=backend)(base.expand(3, 4))
    torch.testing.assert_close(base, before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fill_of_expanded_input_keeps_signed_zero_and_nan_like_eager(backend):
    def fn(x):
        x[:, 0].mul_(-1)
        return x + 0

    base = torch.tensor([[0.0], [float("nan")], [2.0]])
    compiled_base = base.clone()
    expected = fn(base.expand(3, 4))
    actual = ember.compile(fn, backend=backend)(compiled_base.expand(3, 4))
    torch.testing.assert_close(actual, expected, equal_nan=True)
    torch.testing.assert_close(compiled_base, base, equal_nan=True)
    assert torch.equal(torch.signbit(compiled_base), torch.signbit(base))


@pytest.mark.parametrize("backend", BACKENDS)
def test_expanded_input_written_then_returned_with_views_matches_eager(backend):
    def fn(x):
        x.masked_fill_(torch.tensor([True, False, True, False]), 7.0)
        x[:, 3].add_(torch.arange(3.0))
        return x, x[:, 1], x.diagonal()

    base = torch.randn(3, 1)
    compiled_base = base.clone()
    with pytest.warns(UserWarning, match="deprecated"):
        expected = fn(base.expand(3, 4))
    actual = ember.compile(fn, backend=backend)(compiled_base.expand(3, 4))
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
        assert a.stride() == e.stride()
    torch.testing.assert_close(compiled_base, base)


@pytest.mark.parametrize("backend", BACKENDS)
def test_view_of_written_expand_in_the_frame_read_in_its_traced_layout(backend):
    def fn(a):
        x = a.expand(2, 3, 4)
        x[1, :, 2].add_(1)
        return x.diagonal(0, 1, 2) + 0, x.transpose(0, 2) * 1

    a = torch.randn(3, 1)
    compiled_a = a.clone()
    torch.testing.assert_close(ember.compile(fn, backend=backend)(compiled_a), fn(a))
    torch.testing.assert_close(compiled_a, a)


ORDER_DEPENDENT_INDEX_PUTS = {
    # eager (torch 2.13) runs each: 6.0 (last write), 4.0 (a row's last)
    "several_values": lambda x: x.index_put_(
        (torch.tensor([0, 0]), torch.tensor([2, 1])), torch.tensor([5.0, 6.0])
    ),
    "row_of_values": lambda x: x.index_put_((torch.tensor([0]),), torch.tensor([[1.0, 2, 3, 4]])),
}


@pytest.mark.filterwarnings("ignore:Use of .* on expanded tensors is deprecated")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(ORDER_DEPENDENT_INDEX_PUTS))
def test_index_put_of_order_dependent_values_into_expanded_input_runs_eagerly(backend, case):
    """index_put_ into an expanded tensor whose result depends on eager's write order: the
    graph cannot express it, so the call runs eagerly with a warning (eager's values)."""
    fn = ORDER_DEPENDENT_INDEX_PUTS[case]
    base = torch.randn(3, 1)
    want = base.clone()
    expected = fn(want.expand(3, 4))
    with pytest.warns(EagerCallWarning):
        got = ember.compile(fn, backend=backend)(base.expand(3, 4))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(base, want)


ACCUMULATING_INDEX_PUTS = {
    # (compact shape, expanded shape, write): each adds to memory locations through aliases
    "two_aliases_of_one_row": ((3, 1), (3, 4), lambda x: x.index_put_(
        (torch.tensor([0, 0]), torch.tensor([1, 2])), torch.tensor(5.0), accumulate=True)),
    "rows_of_values": ((1, 4), (3, 4), lambda x: x.index_put_(
        (torch.tensor([0, 2, 2]),), torch.arange(12.0).view(3, 4), accumulate=True)),
    "leading_dim": ((3,), (2, 3), lambda x: x.index_put_(
        (torch.tensor([1, 0, 1]), torch.tensor([2, 2, 0])), torch.tensor([1.0, 2, 3]),
        accumulate=True)),
    "two_expanded_dims": ((1, 3, 1), (2, 3, 4), lambda x: x.index_put_(
        (torch.tensor([0, 1]),), torch.ones(3, 4), accumulate=True)),
    "mask": ((3, 1), (3, 4), lambda x: x.index_put_(
        (torch.tensor([True, False, True]),), torch.tensor([[1.0, 2, 3, 4]]), accumulate=True)),
    "int64": ((3, 1), (3, 4), lambda x: x.index_put_(
        (torch.tensor([0, 0, 2]), torch.tensor([1, 1, 3])), torch.tensor([1, 2, 3]),
        accumulate=True)),
    "bool": ((3, 1), (3, 4), lambda x: x.index_put_(
        (torch.tensor([1]), torch.tensor([3])), torch.tensor(True), accumulate=True)),
}  # fmt: skip


def _base(shape: tuple, dtype_of_write) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    base = torch.randint(-3, 4, shape, generator=g)
    return (
        base > 0
        if dtype_of_write == "bool"
        else base.to(torch.int64 if dtype_of_write == "int64" else torch.float32)
    )


@pytest.mark.filterwarnings("ignore:Use of .* on expanded tensors is deprecated")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(ACCUMULATING_INDEX_PUTS))
def test_index_put_accumulate_into_expanded_input_adds_each_alias_like_eager(backend, case):
    """index_put_(..., accumulate=True) into an expanded tensor: eager adds every value to
    the memory location its index names, so a location gains the sums its aliases got."""
    compact, shape, write = ACCUMULATING_INDEX_PUTS[case]

    def fn(x):
        return write(x) * 1, x.sum(-1), x[0] + 0

    base = _base(compact, case)
    compiled_base = base.clone()
    expected = fn(base.expand(shape))
    actual = ember.compile(fn, backend=backend)(compiled_base.expand(shape))
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(compiled_base, base)  # the caller's memory, written as eager


@pytest.mark.filterwarnings("ignore:Use of .* on expanded tensors is deprecated")
@pytest.mark.parametrize("backend", BACKENDS)
def test_index_put_accumulate_into_expand_in_the_frame_adds_like_eager(backend):
    def fn(a, values):
        x = (a * 2).expand(3, 4)
        x.index_put_((torch.tensor([0, 1, 1]), torch.tensor([3, 0, 3])), values, accumulate=True)
        return x + 0, a.expand(3, 4).index_put_((torch.tensor([2]),), values[:1], True) * 1

    a, values = torch.randn(1, 4), torch.randn(3)
    compiled_a = a.clone()
    expected = fn(a, values)
    actual = ember.compile(fn, backend=backend)(compiled_a, values)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(compiled_a, a)
