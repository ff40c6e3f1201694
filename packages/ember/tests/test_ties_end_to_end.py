"""Ops choosing among tied values (sort, topk, max/min, kthvalue, median, mode, argmax)
on a computed tensor: indices and gradients as eager's.

The values are computed in the graph (`tanh` of grid values with repeats), so a compiled
kernel that computes equal inputs at different positions otherwise (a vectorized loop
against its scalar tail, seed 900119 of the fuzzer) breaks the ties: the gradient of a
descending sort went to the other tied element than eager's. The shape (2, 127) puts one
of each tied pair in a kernel's tail.
"""

from __future__ import annotations

import pytest
import torch

import ember

pytest.importorskip("inductor_codegen")


def _ops(t):
    sort = t.sort(0, descending=True)
    topk = t.topk(2, 1)
    return (
        sort.values,
        sort.indices,
        t.sort(dim=1, stable=True).indices,
        topk.values,
        topk.indices,
        *t.max(0),
        *t.min(1),
        t.argmax(1),
        *t.kthvalue(2, 0),
        *t.median(0),
        *t.mode(0),
    )


def program(x):
    return _ops(torch.tanh(x))


def _weighted_grad(outputs, x):
    loss = sum(
        (o.double() * torch.linspace(-1, 1, o.numel(), dtype=torch.float64).view(o.shape)).sum()
        + 0.3 * o.double().sum()
        for o in outputs
        if o.is_floating_point()
    )
    (grad,) = torch.autograd.grad(loss, x)
    return grad


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_ties_of_a_computed_tensor_pick_eager_s_indices_and_gradients(backend, dynamic):
    compiled = ember.compile(program, backend=backend, dynamic=dynamic)
    g = torch.Generator().manual_seed(900120)
    x = (torch.randint(-8, 9, (2, 127), generator=g) / 4).requires_grad_()
    want, got = program(x), compiled(x)
    for i, (w, c) in enumerate(zip(want, got)):
        if w.is_floating_point():
            torch.testing.assert_close(c, w, msg=lambda m, i=i: f"output {i}: {m}")
        else:
            assert torch.equal(c, w), f"output {i} (indices) differs"
    torch.testing.assert_close(_weighted_grad(got, x), _weighted_grad(want, x))
