"""A capture that stops at a graph break keeps the shape guards of what it decided.

An int argument made symbolic (automatic dynamic) that the frame branches on before
a break need not become a graph input; the entry's guards still hold the branches
taken, else a later call with another value reuses an entry (and the compiled parts
behind it) built for the other branch. A recursive function whose break lies at its
base case shows it: each call of its compiled frame hands the next a smaller int.
"""

from __future__ import annotations

import pytest
import torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def _halves(x, n):
    if n == 0:
        torch._dynamo.graph_break()
        return x
    return _halves(x + 1, n - 1) * 2


def _through_a_caller(x, n):
    return _halves(x, n) + 1


@pytest.mark.parametrize("fn", [_halves, _through_a_caller])
@pytest.mark.parametrize("values", [[1, 2, 3, 2, 0, 4], [2, 2, 2], [3, 1, 0, 3]])
def test_recursion_broken_at_its_base_guards_the_ints_it_branched_on(fn, values):
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    for n in values:
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, n), fn(x, n))


def test_entry_of_a_capture_stopped_at_a_break_guards_its_symbolic_int():
    def branches(x, n):
        if n > 2:
            torch._dynamo.graph_break()
            return x + 1
        return x - 1

    compiled = dynamo_capture.optimize(branches, backend=CountingBackend())
    for n in (3, 4, 1, 5, 0):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, n), branches(x, n))
