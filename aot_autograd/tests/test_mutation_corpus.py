"""Mutation and aliasing programs: aot matches eager in outputs, inputs after the call,
aliasing between outputs and inputs, and grads."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from aot_checks import RecordingCompiler

from aot_autograd import aot_function


def _clone(inputs: tuple) -> tuple:
    def clone(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone().requires_grad_(t.requires_grad)

    return pytree.tree_map_only(torch.Tensor, clone, inputs)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _aliasing(inputs: tuple, outputs: list) -> list:
    """For each output tensor: which inputs and which earlier outputs share its memory."""
    flat_in = [t for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor)]
    flat_out = [t for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]
    pattern = []
    for j, out in enumerate(flat_out):
        shares_input = [i for i, t in enumerate(flat_in) if _storage(t) == _storage(out)]
        shares_output = [k for k in range(j) if _storage(flat_out[k]) == _storage(out)]
        pattern.append((shares_input, shares_output))
    return pattern


def _grads(outputs: object, inputs: tuple) -> list:
    leaves = [t for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor)]
    wanted = [t for t in leaves if t.requires_grad]
    outs = [
        t
        for t in pytree.tree_leaves(outputs)
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()
    ]
    if not outs:
        return []
    loss = sum((o * torch.linspace(0.5, 1.5, o.numel()).view(o.shape)).sum() for o in outs)
    return list(torch.autograd.grad(loss, wanted, allow_unused=True))


def check(fn, *inputs, grad: bool = False, decompositions=None) -> None:
    eager_inputs, aot_inputs = _clone(inputs), _clone(inputs)
    compiler = RecordingCompiler()
    compiled = aot_function(fn, compiler, decompositions=decompositions)
    expected = fn(*eager_inputs)
    actual = compiled(*aot_inputs)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(aot_inputs, eager_inputs)
    assert _aliasing(aot_inputs, actual) == _aliasing(eager_inputs, expected)
    assert compiler.graphs, "nothing was compiled"
    if grad:
        torch.testing.assert_close(_grads(actual, aot_inputs), _grads(expected, eager_inputs))


def r(*shape: int, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape).requires_grad_(grad)


def _p01(x):
    x.add_(1)
    return x * 2


def _p02(x):
    y = x * 2
    y.mul_(3)
    return y


def _p03(x):
    x[:, 1:3].add_(1)
    return x.sum()


def _p04(x):
    x[0].mul_(2)
    return x + 1


def _p05(x):
    v = x.view(-1)
    x.add_(1)
    return v * 2


def _p06(x):
    v = x.view(2, 6)
    v.add_(1)
    return x.sum(0)


def _p07(x):
    x.t().mul_(3)
    return x.clone()


def _p08(x):
    x.permute(2, 0, 1).sub_(1)
    return x.mean()


def _p09(x):
    x.diagonal().fill_(0)
    return x * 1


def _p10(x):
    x.zero_()
    return x + 1


def _p11(x, y):
    x.copy_(y * 2)
    return x.sum()


def _p12(x, y):
    x.copy_(y[0])
    return y + 1


def _p13(x):
    y = x * 2
    y[1:3].fill_(7)
    return y


def _p14(x):
    x.unsqueeze(0).add_(1)
    return x * 1


def _p15(x):
    x.squeeze(1).mul_(2)
    return x * 1


def _p16(x):
    x[1:][:, 0].add_(5)
    return x * 1


def _p17(x):
    a, b = x.split(2)
    a.mul_(2)
    return x + b.sum()


def _p18(x):
    rows = x.unbind(0)
    rows[1].add_(1)
    return x * 1


def _p19(x):
    parts = x.chunk(3, dim=1)
    parts[2].neg_()
    return x * 1


def _p20(x):
    x[torch.tensor([0, 2])] = 1.0
    return x * 2


def _p21(x):
    y = x * 1
    y.masked_fill_(y > 0, 0.5)
    return y


def _p22(x):
    y = x * 3
    y.clamp_(-1, 1)
    return y


def _p23(x):
    y = x + 1
    y.relu_()
    return y * 2


def _p24(x):
    return x


def _p25(x):
    return x.view(-1)


def _p26(x):
    return x.t(), x * 2


def _p27(x):
    y = x * 2
    return y, y.view(-1)


def _p28(x):
    y = x + 1
    return y[0], y[1]


def _p29(x):
    y = x.sin()
    return y, y


def _p30(x):
    x.add_(1)
    return x[0]


def _p31(x, mean, var, w, b):
    return F.batch_norm(x, mean, var, w, b, training=True, momentum=0.1)


def _p32(x, mean, var, w, b):
    return F.batch_norm(x, mean, var, w, b, training=False)


def _p33(x, y, z):
    x.add_(1)
    z.mul_(y)
    return x + z


def _p34(w, buf):
    buf.add_(w.detach())
    return w * buf


def _p35(x):
    y = x * 2
    y.add_(1)
    y.mul_(2)
    y.sub_(x)
    return y


def _p36(x):
    y = x.clone()
    y[0].mul_(2)
    return y


def _p37(x):
    y = torch.zeros(5, 4)
    y[1:3] = x[:2]
    return y


def _p38(x):
    x.detach().add_(1)
    return x * 1


def _p39(x):
    x.as_strided((2,), (2,)).add_(1)
    return x * 1


def _p40(x):
    t = torch.tensor([1.0, 2.0, 3.0, 4.0])
    t.add_(1)
    return x + t


def _p41(x):
    acc = torch.zeros(4)
    for i in range(3):
        acc += x[i]
    return acc


def _p42(x):
    x += 1
    return x


def _p43(x, index):
    y = torch.zeros(3, 4)
    y.scatter_(0, index, x)
    return y


def _p44(x):
    v = x[0]
    x.mul_(2)
    return v


def _p45(x):
    y = x * 1
    v = y[0]
    y.add_(1)
    return v


def _p46(x):
    x.add_(3)
    return x * 2


def _p47(x):
    y = x * 2
    y[:, 0].relu_()
    return y.sum(1)


def _p48(x, w):
    h = x @ w
    h.mul_(2)
    h[0] = 0.0
    return h


def _p49(x):
    y = torch.empty(3, 4)
    y.copy_(x.t())
    return y.exp()


def _p50(x):
    a = x.view(4, 3)
    b = a.transpose(0, 1)
    b[0].add_(10)
    return x + 0, a.sum()


def _p51(x):
    return torch.view_as_complex(x), x * 2


def _p52(x):
    c = torch.view_as_real(x)
    return c[..., 0] + 1


def _p53(a, b, out):
    torch.mm(a, b, out=out)
    return out.sum(0)


def _p54(x, y):
    buffer = torch.empty(3, 4)
    torch.add(x, y, out=buffer)
    values, indices = torch.empty(3), torch.empty(3, dtype=torch.long)
    torch.max(buffer, 1, out=(values, indices))
    return buffer * 2, values, indices


def _p55(index, weight):
    return F.embedding(index, weight, max_norm=1.0).sum(0)


def _p56(x, w):
    real = torch.view_as_real(torch.view_as_complex(x.contiguous()) * (1 + 2j))
    real.mul_(w)  # writes the complex intermediate through view_as_real
    return real * 2


def _p57(x):
    y = x * 2
    torch.view_as_complex(y).mul_(1j)  # writes the real intermediate through view_as_complex
    return y


def _p58(x, w):
    product = torch.view_as_complex(x.contiguous()) * (1 + 2j)
    torch.view_as_real(product)[..., 0].add_(w)
    return product


CORPUS = [
    ("add_ on input", _p01, lambda: (r(3, 4),), False),
    ("mul_ on intermediate", _p02, lambda: (r(3, 4, grad=True),), True),
    ("in-place on slice of input", _p03, lambda: (r(3, 4),), False),
    ("in-place on select of input", _p04, lambda: (r(3, 4),), False),
    ("view read after base written", _p05, lambda: (r(3, 4),), False),
    ("write through view, read base", _p06, lambda: (r(3, 4),), False),
    ("write through transpose", _p07, lambda: (r(3, 4),), False),
    ("write through permute", _p08, lambda: (r(2, 3, 4),), False),
    ("fill_ diagonal", _p09, lambda: (r(4, 4),), False),
    ("zero_ input", _p10, lambda: (r(3, 4),), False),
    ("copy_ into input", _p11, lambda: (r(3, 4), r(3, 4)), False),
    ("broadcasting copy_", _p12, lambda: (r(3, 4), r(2, 4)), False),
    ("fill_ slice of intermediate", _p13, lambda: (r(5, 4, grad=True),), True),
    ("write through unsqueeze", _p14, lambda: (r(3, 4),), False),
    ("write through squeeze", _p15, lambda: (r(3, 1, 4),), False),
    ("chained views", _p16, lambda: (r(3, 4),), False),
    ("write a split piece", _p17, lambda: (r(4, 3),), False),
    ("write an unbind piece", _p18, lambda: (r(3, 4),), False),
    ("write a chunk piece", _p19, lambda: (r(2, 6),), False),
    ("index_put_ on input", _p20, lambda: (r(4, 3),), False),
    ("masked_fill_ intermediate", _p21, lambda: (r(3, 4, grad=True),), True),
    ("clamp_ intermediate", _p22, lambda: (r(3, 4, grad=True),), True),
    ("relu_ intermediate", _p23, lambda: (r(3, 4, grad=True),), True),
    ("return the input", _p24, lambda: (r(3, 4),), False),
    ("return a view of the input", _p25, lambda: (r(3, 4, grad=True),), True),
    ("return transposed input", _p26, lambda: (r(3, 4, grad=True),), True),
    ("two views of one intermediate", _p27, lambda: (r(3, 4, grad=True),), True),
    ("two selects of one intermediate", _p28, lambda: (r(3, 4, grad=True),), True),
    ("same output twice", _p29, lambda: (r(3, 4, grad=True),), True),
    ("view of mutated input", _p30, lambda: (r(3, 4),), False),
    (
        "batch_norm training updates stats",
        _p31,
        lambda: (r(6, 3, grad=True), torch.zeros(3), torch.ones(3), r(3, grad=True), r(3)),
        True,
    ),
    (
        "batch_norm eval",
        _p32,
        lambda: (r(6, 3, grad=True), torch.rand(3), torch.rand(3) + 1, r(3), r(3)),
        True,
    ),
    ("several input mutations", _p33, lambda: (r(3), r(3), r(3)), False),
    ("buffer mutated, grad through weight", _p34, lambda: (r(4, grad=True), r(4)), True),
    ("chain of in-place ops with grad", _p35, lambda: (r(3, 4, grad=True),), True),
    ("in-place on view of a clone with grad", _p36, lambda: (r(3, 4, grad=True),), True),
    ("setitem slice from input", _p37, lambda: (r(3, 4, grad=True),), True),
    ("write through detach", _p38, lambda: (r(3, 4),), False),
    ("write through as_strided", _p39, lambda: (r(2, 2),), False),
    ("mutate a fresh constant", _p40, lambda: (r(4),), False),
    ("accumulate in a loop", _p41, lambda: (r(3, 4, grad=True),), True),
    ("augmented assignment on input", _p42, lambda: (r(3, 4),), False),
    (
        "scatter_ into zeros",
        _p43,
        lambda: (r(2, 4), torch.tensor([[0, 1, 2, 0], [2, 0, 1, 1]])),
        False,
    ),
    ("view taken before input mutation", _p44, lambda: (r(3, 4),), False),
    ("view of intermediate taken before mutation", _p45, lambda: (r(3, 4, grad=True),), True),
    ("integer input mutation", _p46, lambda: (torch.arange(6).view(2, 3),), False),
    ("relu_ on a column with grad", _p47, lambda: (r(3, 4, grad=True),), True),
    (
        "mul_ then setitem after matmul",
        _p48,
        lambda: (r(3, 4, grad=True), r(4, 5, grad=True)),
        True,
    ),
    ("copy_ from a transposed input", _p49, lambda: (r(4, 3, grad=True),), True),
    ("write through view of transpose", _p50, lambda: (r(12),), False),
    ("view_as_complex of input", _p51, lambda: (r(3, 2, grad=True),), True),
    ("view_as_real of complex input", _p52, lambda: (torch.randn(4, dtype=torch.cfloat),), False),
    ("mm with out= into an input", _p53, lambda: (r(3, 4), r(4, 2), torch.zeros(3, 2)), False),
    ("out= into fresh tensors, two outs", _p54, lambda: (r(3, 4), r(3, 4)), False),
    ("write through view_as_real", _p56, lambda: (r(3, 2, grad=True), r(2)), True),
    ("write through view_as_complex", _p57, lambda: (r(3, 2, grad=True),), True),
    ("write through a slice of view_as_real", _p58, lambda: (r(3, 2), r(3)), False),
    (
        "embedding max_norm renormalizes the weight in place",
        _p55,
        lambda: (torch.tensor([0, 2, 2, 4]), (torch.randn(5, 3) * 3).requires_grad_()),
        True,
    ),
]


@pytest.mark.parametrize("name,fn,make_inputs,grad", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus(name, fn, make_inputs, grad):
    torch.manual_seed(0)
    check(fn, *make_inputs(), grad=grad)


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 40
