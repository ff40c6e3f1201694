"""The backward, compiled at its first use, sees the configuration scopes its forward
compiled in, on whatever thread autograd runs it (`runtime.compiler_in_this_context`).

Autograd's engine runs the backward of CUDA tensors on a thread of its own, which
starts with no context variables set; the threads here stand in for it on the CPU.
"""

from __future__ import annotations

import contextvars
import threading

import torch
from torch import fx

from aot_autograd import aot_graph
from aot_autograd.runtime import compiler_in_this_context

_SETTING: contextvars.ContextVar[str] = contextvars.ContextVar("test_setting", default="default")


def _fn(x, w):
    return (x * w).tanh().sum(0)


def _compiled(seen: list):
    def forward(gm, example_inputs):
        return gm

    def backward(gm, example_inputs):
        seen.append(_SETTING.get())
        return gm

    x, w = torch.randn(3, 4), torch.randn(4, requires_grad=True)
    return aot_graph(fx.symbolic_trace(_fn), [x, w], fw_compiler=forward, bw_compiler=backward)


def _on_a_thread_of_its_own(fn) -> None:
    errors: list = []

    def run():
        try:
            fn()
        except BaseException as error:  # noqa: BLE001 - raised again on the caller's thread
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def _gradient_matches_eager(x, w) -> None:
    expected = torch.autograd.grad(_fn(x, w).sum(), w)[0]
    torch.testing.assert_close(w.grad, expected)


def test_backward_on_another_thread_compiles_in_the_forwards_scope():
    seen: list = []
    run = _compiled(seen)
    x, w = torch.randn(3, 4), torch.randn(4, requires_grad=True)
    token = _SETTING.set("forward scope")
    try:
        out = run(x, w)
    finally:
        _SETTING.reset(token)
    _on_a_thread_of_its_own(lambda: out.sum().backward())
    assert seen == ["forward scope"]
    _gradient_matches_eager(x, w)


def test_backward_thread_own_setting_wins():
    seen: list = []
    run = _compiled(seen)
    x, w = torch.randn(3, 4), torch.randn(4, requires_grad=True)
    token = _SETTING.set("forward scope")
    try:
        out = run(x, w)
    finally:
        _SETTING.reset(token)

    def backward_in_its_own_scope():
        _SETTING.set("backward scope")
        out.sum().backward()

    _on_a_thread_of_its_own(backward_in_its_own_scope)
    assert seen == ["backward scope"]
    _gradient_matches_eager(x, w)


def test_compiler_in_this_context_leaves_the_callers_context_unchanged():
    token = _SETTING.set("captured")
    try:
        wrapped = compiler_in_this_context(lambda: _SETTING.get())
    finally:
        _SETTING.reset(token)
    assert wrapped() == "captured"
    assert _SETTING.get() == "default"
