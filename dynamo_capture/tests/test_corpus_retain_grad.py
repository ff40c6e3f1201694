"""`Tensor.retain_grad()` and the `grad_fn` of a tensor that has one, in a compiled
frame. torch.compile breaks on reading them and cannot resume after that read: it compiles the frame up to the last
statement outside any block whose graph has more than one call and runs the rest
eagerly, or, with none, runs the whole frame eagerly; read in a callee, the frame
breaks at the call. Capture cuts the frame as it does; each program's values equal
eager's, and the intermediate's `.grad` is kept after backward."""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _input():
    return (torch.randn(3, 4, requires_grad=True),)


def retain_after_one_operation(x):
    y = x * 2
    y.retain_grad()
    return y.sum() * y, y


def retain_after_two_operations(x):
    a = x + 1
    y = a * 2
    y.retain_grad()
    return y.exp(), y


def retain_read_then_called_later(x):
    y = x.exp()
    keep = y.retain_grad
    w = y * 4
    keep()
    return w.sum() * y, y


def retain_inside_a_branch(x):
    a = x + 1
    y = a * 2
    if y.requires_grad:
        y.retain_grad()
    return y.tanh(), y


def _keep_grad(y):
    y.retain_grad()
    return y


def retain_in_a_callee(x):
    y = _keep_grad(x.sin())
    return (y * 3).cos(), y


def retain_each_of_a_loop(x):
    outs = []
    for scale in (2.0, 3.0):
        y = (x * scale).relu()
        y.retain_grad()
        outs.append(y)
    return outs[0] + outs[1], outs


PROGRAMS = [
    retain_after_one_operation,
    retain_after_two_operations,
    retain_read_then_called_later,
    retain_inside_a_branch,
    retain_in_a_callee,
    retain_each_of_a_loop,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_retain_grad_cuts_the_frame_like_torch(fn):
    check_like_torch(fn, _input)


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_retain_grad_keeps_the_intermediate_grad(fn):
    compiled = dynamo_capture.optimize(fn, backend=lambda gm, example_inputs: gm.forward)
    x = torch.randn(3, 4, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    out, kept = compiled(x)
    out_eager, kept_eager = fn(x_eager)
    out.sum().backward()
    out_eager.sum().backward()
    kept = kept if isinstance(kept, list) else [kept]
    kept_eager = kept_eager if isinstance(kept_eager, list) else [kept_eager]
    for got, expected in zip(kept, kept_eager, strict=True):
        torch.testing.assert_close(got.grad, expected.grad)
    torch.testing.assert_close(x.grad, x_eager.grad)


def grad_fn_after_one_operation(x):
    y = x * 2
    return y + (y.grad_fn is None)


def grad_fn_after_two_operations(x):
    a = x + 1
    y = a * 2
    node = y.grad_fn
    return y.exp(), node is None


def _has_history(y):
    return y.grad_fn is not None


def grad_fn_in_a_callee(x):
    y = x.sin() * 2
    return y.cos() + _has_history(y)


GRAD_FN_PROGRAMS = [grad_fn_after_one_operation, grad_fn_after_two_operations, grad_fn_in_a_callee]


@pytest.mark.parametrize("fn", GRAD_FN_PROGRAMS, ids=[fn.__name__ for fn in GRAD_FN_PROGRAMS])
def test_grad_fn_of_an_intermediate_cuts_the_frame_like_torch(fn):
    check_like_torch(fn, _input)
