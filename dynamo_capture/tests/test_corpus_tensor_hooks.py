"""Tensor hooks registered inside the frame: ember's graph and op counts equal
torch.compile's and its results eager's (torchcheck.check_like_torch).

    a hook on a tensor the frame computed, pure, closing over constants or nothing,
    returning a new gradient or None: one graph node, the frame one graph
    several hooks on one tensor: a node each, run in the order registered
    a hook with side effects (appending to a list outside): the call runs eagerly

(Unlike torch.compile, capture breaks at the hook where the hooked tensor leaves the
graph: a hook registered on it outside must run after the graph's.)
"""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

SEEN: list[torch.Tensor] = []


def r(*shape):
    return torch.randn(*shape, requires_grad=True)


def _hook_adds_one(x):
    y = x * 3
    y.register_hook(lambda g: g + 1)
    return y.cos()


def _hook_closes_over_constant(x):
    y = x.sin()
    scale = 5.0
    y.register_hook(lambda g: g * scale)
    return y * y, y.sum()


def _hook_returns_none(x):
    y = x * 2

    def keep(g):
        return None

    y.register_hook(keep)
    return y.exp()


def _hook_with_default(x):
    y = x + 1
    y.register_hook(lambda g, k=2.0: g.clamp(-k, k))
    return y.tanh().sum()


def _hook_then_more_uses(x):
    y = x * 2
    y.register_hook(lambda g: g * 10)
    z = y.sin()
    return z + y.cos()


def _hook_appends_outside(x):
    y = x * 2
    y.register_hook(lambda g: SEEN.append(g.sum()))
    return y.exp()


def _two_hooks_in_order(x):
    y = x * 2
    y.register_hook(lambda g: g * 2)
    y.register_hook(lambda g: g + 1)
    return y.cos()


PROGRAMS = [
    _two_hooks_in_order,
    _hook_adds_one,
    _hook_closes_over_constant,
    _hook_returns_none,
    _hook_with_default,
    _hook_then_more_uses,
    _hook_appends_outside,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda fn: fn.__name__.strip("_"))
def test_tensor_hook_counts_like_torch(fn):
    check_like_torch(fn, lambda: (r(4),))
