"""Gathers (embedding, index_select, gather) as indirect loads, against eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import check

aten = torch.ops.aten


def test_embedding_sum_is_one_kernel():
    def fn(wte, wpe, tokens, positions):
        return F.embedding(tokens, wte) + F.embedding(positions, wpe)

    tokens = torch.randint(0, 50, (2, 7))
    positions = torch.arange(7).expand(2, 7)
    compiled = check(fn, torch.randn(50, 16), torch.randn(10, 16), tokens, positions)
    assert not compiled.fallbacks
    assert compiled.kernel_count == 1


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_index_select(dim, index_dtype):
    x = torch.randn(6, 5, 4)
    index = torch.tensor([3, 0, 3, 1], dtype=index_dtype)
    compiled = check(lambda x, i: torch.index_select(x.sin(), dim, i) * 2, x, index)
    assert not compiled.fallbacks


def test_index_select_of_a_transposed_table_and_scalar_index():
    x = torch.randn(5, 7).t()
    check(lambda x, i: torch.index_select(x, 0, i), x, torch.tensor(4))


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_gather(dim):
    x = torch.randn(4, 5, 6)
    size = [3, 4, 5]
    index = torch.randint(0, x.shape[dim], size)
    compiled = check(lambda x, i: torch.gather(x, dim, i) + 1, x, index)
    assert not compiled.fallbacks


def test_gather_bfloat16_and_integer_tables():
    index = torch.randint(0, 6, (4, 3))
    check(lambda x, i: torch.gather(x, 1, i), torch.randn(4, 6).bfloat16(), index)
    check(lambda x, i: torch.gather(x, 1, i), torch.randint(-9, 9, (4, 6)), index)


@pytest.mark.parametrize("shape", [(2, 2, 0), (5, 3, 0)])
def test_reduction_over_an_empty_gather_reads_no_offset(shape):
    # The offset of an empty index tensor was read before a reduction loop that runs zero
    # times: a read of an empty buffer (a crash when its storage has no memory).
    def fn(x, index):
        picked = x.index_select(2, index)
        return (picked > 0).any(), picked.sum(1), picked.abs().sum()

    check(fn, torch.randn(*shape), torch.tensor([], dtype=torch.long))


def test_rows_reduced_over_an_empty_index_keep_the_reduction_identity():
    empty = torch.tensor([], dtype=torch.long)
    check(lambda x, i: x.index_select(1, i).sum(1) + 1, torch.randn(4, 6), empty)
    check(lambda x, i: x.index_select(1, i).prod(1), torch.randn(4, 6), empty)
