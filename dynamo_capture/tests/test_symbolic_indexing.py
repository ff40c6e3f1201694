"""Reads and writes of a tensor at a symbolic int (`cache[layer, 0, :, position] = k`).

Tensor.__getitem__ / __setitem__ read an int inside an index tuple with `__index__`,
which would fix a SymInt to its example value: a decode step would compile again at
every position. Capture records such indexing as `select`-based calls instead
(dynamo_capture.symbolic_indexing): one graph for every position, results and the
written cache equal eager's, a negative or out-of-range position as in eager.
"""

from __future__ import annotations

import pytest
import torch

import dynamo_capture
from dynamo_capture.symbolic_indexing import assign_indexed_, indexed_view


def _decode_write(cache: torch.Tensor, k: torch.Tensor, position: int) -> torch.Tensor:
    cache[1, 0, :, position] = k
    cache[(1, 1, slice(None), position)] = k * 2
    keys = cache[1, 0, :, : position + 1]
    values = cache[1, 1, :, position - 1 : position + 1]
    return keys.sum(-2) + values.sum(-2) + cache[1, 0, :, position]


def test_write_at_a_symbolic_position_is_one_graph_for_every_position(backend):
    compiled = dynamo_capture.optimize(_decode_write, backend=backend)
    for position in (2, 3, 4, 6, -1):
        cache, k = torch.randn(2, 2, 3, 8, 4), torch.randn(3, 4)
        expected_cache = cache.clone()
        expected = _decode_write(expected_cache, k, position)
        torch.testing.assert_close(compiled(cache, k, position), expected)
        torch.testing.assert_close(cache, expected_cache)
        if position == 6:
            # the first position static, the second one symbolic for all later ones
            assert len(backend.graphs) == 2
    targets = {node.target for node in backend.graphs[1].graph.nodes}
    assert {assign_indexed_, indexed_view} <= targets


def test_write_at_a_symbolic_position_out_of_range_raises_as_eager(backend):
    compiled = dynamo_capture.optimize(_decode_write, backend=backend)
    for position in (2, 3):
        compiled(torch.randn(2, 2, 3, 8, 4), torch.randn(3, 4), position)
    with pytest.raises(IndexError):
        _decode_write(torch.randn(2, 2, 3, 8, 4), torch.randn(3, 4), 8)
    with pytest.raises(IndexError):
        compiled(torch.randn(2, 2, 3, 8, 4), torch.randn(3, 4), 8)


def test_assign_indexed_drops_leading_ones_of_the_value_as_setitem_does():
    x, y = torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)
    value = torch.randn(1, 1, 4)
    x[1, 2] = value
    assign_indexed_(y, (1, 2), value)
    torch.testing.assert_close(x, y)
    x[0, :, None] = 2.5
    assign_indexed_(y, (0, slice(None), None), 2.5)
    torch.testing.assert_close(x, y)
