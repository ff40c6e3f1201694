"""prim_decomp's tables applied while tracing: graphs are decomposed, results match eager."""

from __future__ import annotations

import copy

import pytest
import torch
from aot_checks import RecordingCompiler
from test_mutation_corpus import CORPUS, check

from aot_autograd import aot_function, aot_module

prim_decomp = pytest.importorskip("prim_decomp")

TABLES = {
    "core_aten": lambda: prim_decomp.core_aten,
    "inductor_default": lambda: prim_decomp.inductor_default,
    "core_aten|prims": lambda: prim_decomp.core_aten | prim_decomp.prims,
}


def _model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.GELU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, 8),
        torch.nn.LayerNorm(8),
        torch.nn.Softmax(-1),
    )


@pytest.mark.parametrize("name", list(TABLES))
def test_training_step_with_table_matches_eager(name):
    table = TABLES[name]()
    torch.manual_seed(0)
    eager = _model()
    compiled_model = copy.deepcopy(eager)
    compiler = RecordingCompiler()
    compiled = aot_module(compiled_model, compiler, decompositions=table)
    x = torch.randn(2, 3, 6, 6)
    expected, actual = eager(x), compiled(x)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
    expected.sin().sum().backward()
    actual.sin().sum().backward()
    for p, q in zip(eager.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
    for b, c in zip(eager.buffers(), compiled_model.buffers()):
        torch.testing.assert_close(c, b)
    for gm in compiler.graphs:
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in table:
                pytest.fail(f"{node.target} is in the {name} table but stayed in the graph")


# Corpus programs that build a tensor with torch.zeros(...) and no dtype.
USES_ZEROS = {"setitem slice from input", "accumulate in a loop", "scatter_ into zeros"}


def _zeros_keep_default_dtype(table) -> bool:
    with prim_decomp.DecompositionMode(table):
        return torch.zeros(1).dtype == torch.get_default_dtype()


@pytest.mark.parametrize("name,fn,make_inputs,grad", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_with_prims_table(name, fn, make_inputs, grad):
    table = prim_decomp.core_aten | prim_decomp.prims
    if name in USES_ZEROS and not _zeros_keep_default_dtype(table):
        pytest.xfail("prim_decomp's table gives torch.zeros() an integer dtype, eager float32")
    torch.manual_seed(0)
    check(fn, *make_inputs(), grad=grad, decompositions=table)


class _WriteIntoProduct(torch.nn.Module):
    """A write into part of a matmul's result (the result is `_unsafe_view` of a bmm)."""

    def forward(self, x):
        y = x.mT @ x
        y.select(-3, 0).fill_(1)
        y[-1, :, 0].mul_(2)
        return y


@pytest.mark.parametrize("name", list(TABLES))
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 3)])
def test_write_into_matmul_result_reaches_gradient(name, shape):
    table = TABLES[name]()
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    x_compiled = x.detach().clone().requires_grad_()
    expected = _WriteIntoProduct()(x)
    actual = aot_module(_WriteIntoProduct(), RecordingCompiler(), decompositions=table)(x_compiled)
    torch.testing.assert_close(actual, expected)
    tangent = torch.randn(expected.shape, dtype=torch.float64)
    expected.backward(tangent)
    actual.backward(tangent)
    torch.testing.assert_close(x_compiled.grad, x.grad)


# Decompositions of ops whose schema says their result is a new tensor, computed as a
# view: of their own intermediate (`sin` below), of their argument (`clone`), of a graph
# input. Whether the result aliases something decides, not a list of ops.
_aten = torch.ops.aten


def _sin_as_view_of_intermediate(x):
    return _aten.cos.default(_aten.sub.Tensor(x, torch.pi / 2)).unsqueeze(0).squeeze(0)


def _clone_as_alias(x, memory_format=None):
    return _aten.alias.default(x)


def _neg_as_view(x):
    return _aten.mul.Tensor(x, -1).view(-1).view(x.shape)


def _write_into_sin(x):
    y = x.sin()
    y[0].fill_(1)
    y[1:].mul_(3)
    return y * 2


def _write_into_clone(x):
    y = x.clone()
    y.view(-1)[:3].add_(1)
    return y * x


def _write_into_neg_then_read_input(x):
    y = -x
    y.t()[0].zero_()
    return y * x


_FRESH_CASES = {
    "view_of_intermediate": (_write_into_sin, {_aten.sin.default: _sin_as_view_of_intermediate}),
    "alias_of_argument": (_write_into_clone, {_aten.clone.default: _clone_as_alias}),
    "view_chain_of_intermediate": (
        _write_into_neg_then_read_input,
        {_aten.neg.default: _neg_as_view},
    ),
}


@pytest.mark.parametrize("case", sorted(_FRESH_CASES))
def test_write_into_decomposed_fresh_result_matches_eager_values_and_gradient(case):
    fn, table = _FRESH_CASES[case]
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    x_compiled = x.detach().clone().requires_grad_()
    expected = fn(x)
    actual = aot_function(fn, RecordingCompiler(), decompositions=table)(x_compiled)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(x_compiled, x)  # the input itself is never written
    tangent = torch.randn(expected.shape, dtype=torch.float64)
    expected.backward(tangent)
    actual.backward(tangent)
    torch.testing.assert_close(x_compiled.grad, x.grad)


def test_decomposed_fresh_result_is_never_the_callers_input():
    """A decomposition returning its argument (`clone` as `alias`) gives a new tensor."""
    x = torch.randn(4)
    fn = aot_function(
        lambda t: t.clone(),
        RecordingCompiler(),
        decompositions=_FRESH_CASES["alias_of_argument"][1],
    )
    out = fn(x)
    torch.testing.assert_close(out, x)
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
