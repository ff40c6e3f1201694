"""Recompiles counted as torch.compile counts them: automatic dynamic, marks, dynamic=.

Each program runs on a sequence of inputs under ember and under torch.compile
(torchcheck); the results equal eager's and both compile as many graphs.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def _run(compiled, fn, inputs):
    for make in inputs:
        args = make()  # the same tensors (their marks kept) for both calls
        expected = fn(*args)
        torch.testing.assert_close(compiled(*args), expected)


def _counts_like_torch(fn, inputs, **settings):
    """Ember's graph count on `inputs` (arguments factories, one per call) equals torch's."""
    counter = CountingBackend()
    _run(dynamo_capture.optimize(fn, backend=counter, **settings), fn, inputs)
    torch._dynamo.reset()
    reference = torch._dynamo.testing.CompileCounter()
    _run(torch.compile(fn, backend=reference, **settings), fn, inputs)
    torch._dynamo.reset()
    assert counter.frame_count == reference.frame_count, (
        f"graphs: ember {counter.frame_count}, torch {reference.frame_count}"
    )
    return counter


def _marked(size):
    def make():
        tensor = torch.randn(size, 3)
        torch._dynamo.mark_dynamic(tensor, 0)
        return (tensor,)

    return make


def _rows(x):
    return x.sum(0) + x.shape[0]


@pytest.mark.parametrize("dynamic", [False, None, True])
def test_mark_dynamic_is_honoured_whatever_dynamic_says(dynamic):
    inputs = [_marked(size) for size in (3, 4, 5, 6)]
    counter = _counts_like_torch(_rows, inputs, dynamic=dynamic)
    assert counter.frame_count == 1


def test_sizes_that_changed_get_a_symbol_each_not_a_shared_one():
    def two(x, y):
        return x.sum() + y.sum()

    sizes = [(3, 3), (4, 4), (5, 6), (7, 7), (8, 9)]
    inputs = [lambda a=a, b=b: (torch.randn(a), torch.randn(b)) for a, b in sizes]
    counter = _counts_like_torch(two, inputs)
    assert counter.frame_count == 2


def test_sizes_without_a_shared_symbol_still_guard_what_the_graph_assumed():
    def broadcasting(x, y):
        return (x + y) * x.shape[0]

    sizes = [(3, 3), (4, 4), (5, 1), (6, 6), (7, 1)]
    inputs = [lambda a=a, b=b: (torch.randn(a), torch.randn(b)) for a, b in sizes]
    _counts_like_torch(broadcasting, inputs)
