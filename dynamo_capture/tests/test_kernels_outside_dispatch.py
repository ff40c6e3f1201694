"""Callables of torch's that take tensors without the dispatcher run eagerly.

Capture evaluates a graph node on fake tensors, which have no memory. A private C
function of `torch._C` (a storage address, jiterator's launcher) or a jiterator
compiled function would work on the fakes' data pointers: on a GPU an illegal address
that breaks the process's CUDA context. Such calls break the graph and run on the
real tensors.
"""

from __future__ import annotations

import pytest
import torch

import dynamo_capture
from dynamo_capture.torch_calls import _launches_outside_dispatch


def _run(fn, *args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return dynamo_capture.optimize(fn, backend=backend)(*args), graphs


def test_private_torch_c_function_on_a_tensor_runs_on_the_real_tensor():
    def f(x):
        y = x * 2
        return y, torch._C._storage_address(y)

    (y, address), graphs = _run(f, torch.randn(3))
    assert address == torch._C._storage_address(y)  # the returned tensor's own storage
    assert len(graphs) == 1  # the multiplication compiled; the address read eagerly


def test_which_callables_bypass_the_dispatcher():
    assert _launches_outside_dispatch(torch._C._storage_address)
    assert not _launches_outside_dispatch(torch._C._nn.linear)
    assert not _launches_outside_dispatch(torch.add)
    assert not _launches_outside_dispatch(torch.ops.aten.add.Tensor)
    jiterator = pytest.importorskip("torch.cuda.jiterator")
    jitted = jiterator._create_jit_fn("template <typename T> T f(T x) { return x; }")
    assert _launches_outside_dispatch(jitted)
