"""Views made while grad mode is off, returned by a compiled function, carry no gradient
into their base, as in eager.

In eager a view made under `torch.no_grad()` of a tensor that requires grad requires grad
too (views share their base's flag), but autograd's graph from it stops there: a loss
through it adds nothing to the base's gradient. Such an output, rebuilt as a view of its
input (or of a graph output) at run time, was rebuilt differentiably and added to it.

| rank | footgun                                                     | before       | test |
|------|-------------------------------------------------------------|--------------|------|
| 1    | a no_grad view of an input returned (or viewed again, under enable_grad) | silent: grad | test_no_grad_view_of_input_returned_adds_no_gradient |
| 1    | a no_grad view of an intermediate returned                  | silent: grad | test_no_grad_view_of_intermediate_returned_adds_no_gradient |
"""

from __future__ import annotations

import pytest
import torch

import ember

BACKENDS = ("aot_eager", "inductor")


def _input_view(x):
    with torch.no_grad():
        v = x.view(-1)
    return v.unsqueeze(-1) * x.view(1, -1), v.unsqueeze(-1)


def _input_view_nested(x):
    with torch.no_grad():
        v = x.t()
        with torch.enable_grad():
            w = v[1:]
    return x * w.sum(), w


def _input_view_direct(x):
    with torch.no_grad():
        v = x[0]
    return v, x.cos()


def _intermediate_view(x):
    y = x * 2
    with torch.no_grad():
        v = y[0]
    return v, y.sin(), v.unsqueeze(0) * y


FUNCTIONS = {
    "input_view_viewed_again": _input_view,
    "input_view_nested_regions": _input_view_nested,
    "input_view_direct": _input_view_direct,
}


def _outputs_and_grad(fn, dynamic=None, backend=None):
    run = fn if backend is None else ember.compile(fn, backend=backend, dynamic=dynamic)
    x = torch.tensor([[0.5, -1.0], [2.0, 3.0]], requires_grad=True)
    outputs = run(x)
    flags = [o.requires_grad for o in outputs]
    weights = [torch.arange(1.0, o.numel() + 1).view(o.shape) for o in outputs]
    sum((o * w).sum() for o, w in zip(outputs, weights) if o.requires_grad).backward()
    return [o.detach() for o in outputs], flags, x.grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", FUNCTIONS.values(), ids=FUNCTIONS.keys())
def test_no_grad_view_of_input_returned_adds_no_gradient(fn, dynamic, backend):
    ember.reset()
    expected = _outputs_and_grad(fn)
    actual = _outputs_and_grad(fn, dynamic, backend)
    assert actual[1] == expected[1]  # requires_grad, as eager's views
    torch.testing.assert_close(actual[0], expected[0])
    torch.testing.assert_close(actual[2], expected[2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_grad_view_of_intermediate_returned_adds_no_gradient(backend):
    ember.reset()
    expected = _outputs_and_grad(_intermediate_view)
    actual = _outputs_and_grad(_intermediate_view, None, backend)
    assert actual[1] == expected[1]
    torch.testing.assert_close(actual[0], expected[0])
    torch.testing.assert_close(actual[2], expected[2])
