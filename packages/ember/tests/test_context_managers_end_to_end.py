"""Context managers through the tracing backends: a graph that switches grad mode and
leaves it switched (`torch.set_grad_enabled(False)` called as a function, a user
context's `__enter__` compiled as a frame of its own) leaves the process in eager's
mode, and values equal eager's with aot_eager and inductor too."""

from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ["eager", "aot_eager", "inductor"]


class GradSwitch:
    def __init__(self, mode):
        self.prev = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.prev)


def _switch_off_and_scale(x):
    torch.set_grad_enabled(False)
    return x * 2


def _user_switch_around_a_break(x):
    with GradSwitch(False):
        y = x * 2
        torch._dynamo.graph_break()
        y = y + 1
    return y, torch.is_grad_enabled()


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_mode_a_graph_leaves_is_set_with_tracing_backends(backend):
    x = torch.randn(3, requires_grad=True)
    with torch.enable_grad():
        got = ember.compile(_switch_off_and_scale, backend=backend)(x)
        assert not torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    torch.testing.assert_close(got, x.detach() * 2)
    assert not got.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_grad_switch_around_a_break_matches_eager(backend):
    x = torch.randn(3, requires_grad=True)
    with torch.enable_grad():
        expected = _user_switch_around_a_break(x)
        got = ember.compile(_user_switch_around_a_break, backend=backend)(x)
        assert torch.is_grad_enabled()
    torch.testing.assert_close(got[0], expected[0])
    assert got[0].requires_grad == expected[0].requires_grad is False
    assert got[1] == expected[1] is True
