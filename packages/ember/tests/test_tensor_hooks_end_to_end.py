"""Tensor hooks registered inside a compiled function: the gradients (and the hooks'
side effects) equal eager's on every backend."""

from __future__ import annotations

import functools

import pytest
import torch
import torch._dynamo

import ember

SEEN: list[torch.Tensor] = []
BACKENDS = ["eager", "aot_eager", "inductor"]


def _hook_adds_one(x):
    y = x * 3
    y.register_hook(lambda g: g + 1)
    return y.cos()


def _hook_closes_over_constant(x):
    y = x.sin()
    scale = 5.0
    y.register_hook(lambda g: g * scale)
    return y * y + y


def _hook_returns_none(x):
    y = x * 2
    y.register_hook(lambda g: None)
    return y.exp()


def _hook_on_returned_tensor(x):
    y = x * 2
    y.register_hook(lambda g: g * 3)
    return y


def _hook_appends_outside(x):
    y = x * 2
    y.register_hook(lambda g: SEEN.append(g.sum()))
    return y.exp()


def _hook_after_a_use(x):
    y = x * 2
    z = y.sin()
    y.register_hook(lambda g: g * 10)
    return z + y.cos()


def _hook_after_a_use_with_side_effect(x):
    y = x * 2
    z = y.sin()
    y.register_hook(lambda g: SEEN.append(g.sum()))
    return z + y.cos()


def _two_hooks_in_order(x):
    y = x * 2
    y.register_hook(lambda g: g * 2)
    y.register_hook(lambda g: g + 1)
    return y.cos()


def _pure_hook_then_one_with_side_effect(x):
    y = x * 2
    y.register_hook(lambda g: g * 2)
    y.register_hook(lambda g: SEEN.append(g.sum()))
    y.register_hook(lambda g: g + 1)
    return y.cos()


def _hook_then_break_then_hook(x):
    y = x * 2
    y.register_hook(lambda g: g * 2)
    torch._dynamo.graph_break()
    y.register_hook(lambda g: g + 1)
    return y.cos()


def _handle_kept_and_removed(x):
    y = x * 2
    handle = y.register_hook(lambda g: g * 3)
    z = y.sin()
    handle.remove()
    return z + y


def _hook_closes_over_tensor(x):
    y = x * 2
    w = x.detach() + 1
    y.register_hook(lambda g: g * w)
    return y.sin()


def _hooks_in_loop(x):
    out = x
    for _ in range(3):
        out = out * 2
        out.register_hook(lambda g: g + 1)
    return out.cos()


def _registers_hook(y):
    y.register_hook(lambda g: g * 4)
    return y


def _hook_in_callee(x):
    return _registers_hook(x * 2).exp()


def _hook_on_view(x):
    y = x * 2
    v = y[1:]
    v.register_hook(lambda g: g * 2)
    return v.sin() + y.sum()


def _hook_reads_item(x):
    y = x * 2
    y.register_hook(lambda g: g * g.sum().item())
    return y.sin()


def _hook_counts_calls_in_cell(x):
    calls = [0]
    y = x * 2

    def counted(g):
        calls[0] += 1
        return g * (calls[0] + 1)

    y.register_hook(counted)
    return y.sin()


def _hook_variable_bound_again(x):
    scale = 5.0
    y = x * 2
    y.register_hook(lambda g: g * scale)
    scale = 7.0
    return y.sin()


def _hook_variable_of_loop(x):
    y = x * 2
    for scale in (2.0, 3.0):
        y = y * 1
        y.register_hook(lambda g: g * scale)  # noqa: B023 - late binding, as eager
    return y.sin()


def _scale_by_four(g):
    return g * 4


def _add_k(g, *, k=0.0):
    return g + k


def _hook_global_function_after_a_use(x):
    y = x * 2
    z = y.sin()
    y.register_hook(_scale_by_four)
    return z + y.cos()


def _hook_partial_of_global_function(x):
    y = x * 2
    y.register_hook(functools.partial(_add_k, k=3.0))
    return y.exp()


def _hook_closes_over_tensor_needing_grad(x):
    y = x.sin()
    w = x.cos()
    y.register_hook(lambda g: g * w)
    return y * w


def _hook_with_tensor_default(x):
    y = x * 2
    y.register_hook(lambda g, w=x.detach() * 3: g * w)  # noqa: B008 - a tensor default
    return y.tanh()


def _hook_on_input_with_closure_over_tensor(x):
    y = x.sin()
    x.register_hook(lambda g: g + y.detach())
    return y.cos()


def _hook_on_input_handle_removed(x):
    handle = x.register_hook(lambda g: g * 100)
    x.register_hook(_scale_by_four)
    handle.remove()
    return x.exp()


def _gradient_and_seen(fn, x):
    SEEN.clear()
    fn(x).sum().backward()
    grad, x.grad = x.grad, None
    return grad, [t.detach() for t in SEEN]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [
        _hook_adds_one,
        _hook_closes_over_constant,
        _hook_returns_none,
        _hook_on_returned_tensor,
        _hook_appends_outside,
        _hook_after_a_use,
        _hook_after_a_use_with_side_effect,
        _two_hooks_in_order,
        _pure_hook_then_one_with_side_effect,
        _hook_then_break_then_hook,
        _handle_kept_and_removed,
        _hook_closes_over_tensor,
        _hooks_in_loop,
        _hook_in_callee,
        _hook_on_view,
        _hook_reads_item,
        _hook_counts_calls_in_cell,
        _hook_variable_bound_again,
        _hook_variable_of_loop,
        _hook_global_function_after_a_use,
        _hook_partial_of_global_function,
        _hook_closes_over_tensor_needing_grad,
        _hook_with_tensor_default,
    ],
    ids=lambda fn: fn.__name__.strip("_"),
)
def test_tensor_hook_in_frame_gives_eager_gradients(fn, backend):
    x = torch.randn(5, requires_grad=True)
    expected = _gradient_and_seen(fn, x)
    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(_gradient_and_seen(compiled, x), expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [_hook_on_input_with_closure_over_tensor, _hook_on_input_handle_removed],
    ids=lambda fn: fn.__name__.strip("_"),
)
def test_tensor_hook_on_an_input_gives_eager_gradients(fn, backend):
    """A hook the frame registers on its input stays on the caller's tensor (a fresh one
    each call here, as each call adds one)."""
    values = torch.randn(5)
    expected = _gradient_and_seen(fn, values.clone().requires_grad_())
    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        got = _gradient_and_seen(compiled, values.clone().requires_grad_())
        torch.testing.assert_close(got, expected)


def _hooked_and_returned(x):
    y = x * 2
    y.register_hook(lambda g: g * 2)
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_hook_on_returned_tensor_runs_before_hooks_added_outside(backend):
    x = torch.randn(5, requires_grad=True)
    compiled = ember.compile(_hooked_and_returned, backend=backend)
    for fn in (_hooked_and_returned, compiled, compiled):
        y = fn(x)
        y.register_hook(lambda g: g + 1)
        y.retain_grad()
        y.sum().backward()
        grads = (x.grad, y.grad)
        x.grad = None
        if fn is _hooked_and_returned:
            expected = grads
        else:
            torch.testing.assert_close(grads, expected)
