"""Compiling ahead of the first call (`AotCallable.compile_ahead`) and backwards joined to
compile together at the first backward of any of them (`runtime.compile_together`)."""

from __future__ import annotations

import contextlib

import torch
from torch import fx

from aot_autograd import aot_graph
from aot_autograd.runtime import compile_together


def _first(x, w):
    return (x @ w).tanh()


def _second(h, w):
    return (h * w.sum()).sigmoid() + h


def _counting_compiler(calls: list, role: str):
    def compiler(gm, example_inputs):
        calls.append(role)
        return gm

    return compiler


def _compiled(fn, inputs: list, calls: list):
    gm = fx.symbolic_trace(fn)
    forward, backward = _counting_compiler(calls, "forward"), _counting_compiler(calls, "backward")
    return aot_graph(gm, inputs, fw_compiler=forward, bw_compiler=backward)


def test_compile_ahead_compiles_before_the_first_call():
    calls: list = []
    x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
    run = _compiled(_first, [x, w], calls)
    run.aot.compile_ahead()
    assert calls == ["forward"]
    out = run(x, w)
    assert calls == ["forward"]  # the first call compiled nothing more
    torch.testing.assert_close(out, _first(x, w))


def test_backwards_compiled_together_at_the_first_backward():
    calls: list = []
    entered: list = []
    x = torch.randn(3, 4)
    w1, w2 = torch.randn(4, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    h = _first(x, w1).detach().requires_grad_()
    first = _compiled(_first, [x, w1], calls)
    second = _compiled(_second, [h, w2], calls)
    for run in (first, second):
        run.aot.compile_ahead()
    backwards = first.aot.deferred_backwards() + second.aot.deferred_backwards()
    assert len(backwards) == 2

    @contextlib.contextmanager
    def around():
        entered.append(len(calls))
        yield

    compile_together(backwards, around)
    out = second(first(x, w1), w2)
    assert calls == ["forward", "forward"]
    out.sum().backward()
    assert calls == ["forward", "forward", "backward", "backward"]
    assert entered == [2]  # one context around both backwards' compiles
    grads = [w1.grad.clone(), w2.grad.clone()]
    w1.grad = w2.grad = None
    expected = _second(_first(x, w1), w2)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads, [w1.grad, w2.grad])
