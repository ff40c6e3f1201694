"""torch's control-flow operators through ember.compile's aot_autograd backends: values
and gradients equal eager's.

aot_autograd traces to ATen, where torch.cond has no lowering that is sound for both
branches (computing both and selecting would run the branch not taken: its errors, its
cost, and a NaN of its gradient, `0 * inf`, in the selected one). So for these backends
capture breaks the graph at the call, which runs eagerly between compiled graphs: a real
branch in Python, the one eager takes, and eager's autograd through it. while_loop, map
and scan do likewise; a nested_compile_region function is traced in place.
"""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

import ember

_map = sys.modules["torch._higher_order_ops.map"].map
_scan = getattr(torch._higher_order_ops, "scan", None)
_region = getattr(torch.compiler, "nested_compile_region", lambda fn: fn)


def _cond_over_a_list_of_closed_tensors(x, w):
    ws = [w, w * 2]
    return torch.cond(x.sum() > 0, lambda a: a * ws[0], lambda a: a + ws[1], (x,))


def _nested_cond_returning_a_dict(x, w):
    def true_fn(a):
        inner = torch.cond(a.mean() > 0.5, lambda b: b.exp(), lambda b: b * w, (a,))
        return {"out": inner, "aux": a.sin()}

    return torch.cond(x.sum() > 0, true_fn, lambda a: {"out": a * 3, "aux": a.cos()}, (x,))


def _untaken_branch_gradient_would_be_nan(x, w):
    # the false branch's log has an infinite derivative at 0: selecting between both
    # branches would give NaN gradients where eager gives finite ones
    return torch.cond(x.sum() > 0, lambda a: a * w, lambda a: a.log(), (x,))


def _while_loop_then_cond(x, w):
    _, v = torch.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 0.5), (torch.tensor(0), x))
    return torch.cond(v.sum() > 0, lambda a: a + w, lambda a: a - w, (v,))


def _map_with_a_closure(x, w):
    return _map(lambda row: row * w + 1, torch.stack([x, x * 2]))


def _scan_cumulative(x, w):
    return _scan(lambda c, r: (c + r * w, (c * 2).clone()), torch.zeros(4), torch.stack([x, x]))


@_region
def _block(a, b):
    return (a * b).sin() + b


def _nested_compile_region_twice(x, w):
    return _block(_block(x, w), w)


PROGRAMS = [
    _cond_over_a_list_of_closed_tensors,
    _nested_cond_returning_a_dict,
    _untaken_branch_gradient_would_be_nan,
    _while_loop_then_cond,
    _map_with_a_closure,
    _scan_cumulative,
    _nested_compile_region_twice,
]


def _leaves(result):
    return [t for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__.strip("_"))
def test_control_flow_values_and_gradients_match_eager(backend, fn):
    if fn is _scan_cumulative and _scan is None:
        pytest.skip("this torch has no scan")
    compiled = ember.compile(fn, backend=backend)
    w = nn.Parameter(torch.linspace(0.5, 1.5, 4))
    for x in (torch.linspace(-1.0, 2.0, 4), torch.linspace(-3.0, -0.5, 4)):
        x = x.abs() if fn is _untaken_branch_gradient_would_be_nan else x
        inputs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
        expected, got = fn(inputs[0], w), compiled(inputs[1], w)
        for a, b in zip(_leaves(got), _leaves(expected), strict=True):
            torch.testing.assert_close(a, b)
        expected_grads = torch.autograd.grad(
            [t.sum() for t in _leaves(expected)], [inputs[0], w], allow_unused=True
        )
        got_grads = torch.autograd.grad(
            [t.sum() for t in _leaves(got)], [inputs[1], w], allow_unused=True
        )
        torch.testing.assert_close(got_grads, expected_grads, equal_nan=False)
