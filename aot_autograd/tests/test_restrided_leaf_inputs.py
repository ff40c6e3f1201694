"""A leaf input requiring grad restrided in place under no_grad (`w.t_()`,
`w.unsqueeze_(0)`): the compiled graph cannot give eager's gradient layout, so that
call runs the graph's ops eagerly, with an EagerCallWarning, and matches eager."""

from __future__ import annotations

import pytest
import torch

from aot_autograd import EagerCallWarning, aot_function


def _restride_t(x):
    x.t_()


def _restride_unsqueeze(x):
    x.unsqueeze_(0)


def _restride_and_write(x):
    x.diagonal().masked_fill_(x.diagonal() < 0, 1)
    x.unsqueeze_(0)


RESTRIDES = {"t_": _restride_t, "unsqueeze_": _restride_unsqueeze, "write": _restride_and_write}


def _program(restride):
    def fn(x):
        a = x * 3
        with torch.no_grad():
            restride(x)
        return a * 2, x.cos()

    return fn


def _run(fn, seed):
    x = torch.randn(3, 3, generator=torch.Generator().manual_seed(seed)).requires_grad_()
    outputs = fn(x)
    sum(o.sum() for o in outputs).backward()
    return [*outputs, x.detach().clone(), x.grad]


@pytest.mark.parametrize("restride", RESTRIDES.values(), ids=RESTRIDES.keys())
def test_leaf_restrided_under_no_grad_runs_eagerly_with_eager_results(restride):
    fn = _program(restride)
    compiled = aot_function(fn, lambda gm, _: gm)
    for seed in (0, 1):
        with pytest.warns(EagerCallWarning, match="leaf tensor requiring grad"):
            actual = _run(compiled, seed)
        expected = _run(fn, seed)
        for got, want in zip(actual, expected, strict=True):
            assert got.shape == want.shape and got.stride() == want.stride()
            torch.testing.assert_close(got, want)


def test_non_leaf_restrided_under_no_grad_runs_compiled():
    fn = _program(_restride_unsqueeze)
    compiled = aot_function(fn, lambda gm, _: gm)
    base = torch.randn(3, 3, requires_grad=True)
    with torch.no_grad():
        expected = fn(base * 1)
    with torch.no_grad():
        actual = compiled(base * 1)
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want)


RESTRIDES_OF_A_CONSTANT = {
    "unsqueeze_": lambda c: c.unsqueeze_(0),
    "t_": lambda c: c.t_(),
    "transpose_unsqueeze": lambda c: c.unsqueeze_(0).transpose_(1, 2),
}


@pytest.mark.parametrize(
    "restride", RESTRIDES_OF_A_CONSTANT.values(), ids=RESTRIDES_OF_A_CONSTANT.keys()
)
def test_input_restrided_then_saved_for_backward_keeps_its_gradient(restride):
    """`c.unsqueeze_(0)` on an input without grad, then `c * w`: the backward reads the
    restrided `c`. Eager's version bump comes before the save; the compiled call's
    restride after the graph must not fail the saved view's version check."""

    def fn(w, c):
        restride(c)
        return torch.mul(c, w)

    compiled = aot_function(fn, lambda gm, _: gm)
    results = []
    for f in (fn, compiled, compiled):
        w = torch.linspace(-1, 1, 3).requires_grad_()
        c = torch.arange(9.0).reshape(3, 3)
        out = f(w, c)
        out.sum().backward()
        results.append((out.detach(), w.grad, c))
    for got in results[1:]:
        torch.testing.assert_close(got, results[0])
        assert got[2].stride() == results[0][2].stride()
