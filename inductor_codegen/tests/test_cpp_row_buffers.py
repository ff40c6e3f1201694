"""A value a C++ kernel computes over a row and reads back in later passes over that row
(a norm's input: the mean, the variance, the output) is kept in an array of one row on
the stack when nothing else reads it (codegen/cpp/row_buffers.py), not in a full-size
buffer. The values read back are those a buffer would give: the results are the same,
bit for bit, as with the buffer in memory.
"""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import compile_fn

from inductor_codegen.codegen.cpp import kernel as cpp_kernel
from inductor_codegen.codegen.cpp.row_buffers import ROW_BUFFER_MAX_BYTES

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _embedding_norm(ids, types, positions, words, type_table, position_table, weight, bias):
    summed = (
        F.embedding(ids, words)
        + F.embedding(types, type_table)
        + F.embedding(positions, position_table)
    )
    return F.layer_norm(summed, summed.shape[-1:], weight, bias)


def _embedding_inputs(hidden: int, dtype=torch.float32):
    ids = torch.randint(0, 100, (2, 16))
    types = torch.randint(0, 2, (2, 16))
    positions = torch.arange(16).expand(2, 16)
    tables = [torch.randn(n, hidden, dtype=dtype) for n in (100, 2, 16)]
    weight, bias = torch.randn(hidden, dtype=dtype), torch.randn(hidden, dtype=dtype)
    return [ids, types, positions, *tables, weight, bias]


def _in_memory(monkeypatch, fn, inputs):
    """fn compiled with every buffer in memory (no row arrays)."""
    with monkeypatch.context() as patch:
        patch.setattr(cpp_kernel, "row_buffers", lambda kernel, buffers: {})
        compiled, _ = compile_fn(fn, *inputs)
    return compiled


def _allocations(compiled) -> int:
    return compiled.artifact("wrapper").count("torch.empty_strided")


def test_embedding_sum_layer_norm_keeps_the_row_on_the_stack(monkeypatch):
    inputs = _embedding_inputs(96)
    # non-finite values and ties in the tables reach the mean, the variance and the output
    inputs[3][3, :5] = float("nan")
    inputs[3][7, 10] = float("inf")
    inputs[3][9] = 1.0
    inputs[0][0, :3] = torch.tensor([3, 7, 9])
    compiled, _ = compile_fn(_embedding_norm, *inputs)
    code = compiled.artifact("codegen")
    assert "_row[96];" in code, code
    assert _allocations(compiled) == 1  # the output only: no buffer of the summed rows
    expected = _embedding_norm(*inputs)
    actual = compiled(*inputs)
    torch.testing.assert_close(actual, expected, equal_nan=True)
    in_memory = _in_memory(monkeypatch, _embedding_norm, inputs)
    assert _allocations(in_memory) == 2
    assert torch.equal(actual.isnan(), in_memory(*inputs).isnan())
    torch.testing.assert_close(actual, in_memory(*inputs), rtol=0, atol=0, equal_nan=True)


def _embedding_range_scale(ids, types, positions, words, type_table, position_table, w, b):
    summed = (
        F.embedding(ids, words)
        + F.embedding(types, type_table)
        + F.embedding(positions, position_table)
    )
    high = summed.amax(-1, keepdim=True)
    low = summed.amin(-1, keepdim=True)
    return (summed - low) / (high - low) * w + b


def test_row_of_bfloat16_is_rounded_as_in_memory(monkeypatch):
    inputs = _embedding_inputs(64, torch.bfloat16)
    fn = _embedding_range_scale
    compiled, _ = compile_fn(fn, *inputs)
    code = compiled.artifact("codegen")
    assert "uint16_t buf0_row[64];" in code, code  # the sum rounded to bfloat16, as stored
    actual = compiled(*inputs)
    torch.testing.assert_close(actual, fn(*inputs), atol=0.05, rtol=0.02)
    assert torch.equal(actual, _in_memory(monkeypatch, fn, inputs)(*inputs))


def test_row_the_graph_returns_stays_in_memory():
    def fn(x, a, b, c, d):
        summed = x + a + b + c + d
        return summed, F.layer_norm(summed, summed.shape[-1:])

    inputs = [torch.randn(8, 64) for _ in range(5)]
    compiled, _ = compile_fn(fn, *inputs)
    assert "_row[" not in compiled.artifact("codegen")
    for actual, expected in zip(compiled(*inputs), fn(*inputs)):
        torch.testing.assert_close(actual, expected)


def test_row_longer_than_the_stack_bound_stays_in_memory():
    hidden = ROW_BUFFER_MAX_BYTES // 4 + 64
    inputs = _embedding_inputs(hidden)
    compiled, _ = compile_fn(_embedding_norm, *inputs)
    assert "_row[" not in compiled.artifact("codegen")
    assert _allocations(compiled) == 2
    torch.testing.assert_close(compiled(*inputs), _embedding_norm(*inputs))


def test_softmax_of_masked_scores_keeps_its_row():
    """A causal mask added to the scores, read by the max, the sum and the division."""

    def fn(scores, bias):
        mask = torch.ones(32, 32, dtype=torch.bool).tril()
        masked = (scores + bias).masked_fill(~mask, float("-inf"))
        return torch.softmax(masked, dim=-1)

    scores, bias = torch.randn(4, 32, 32), torch.randn(4, 32, 32)
    scores[0, 3] = float("nan")
    compiled, _ = compile_fn(fn, scores, bias)
    assert "_row[32];" in compiled.artifact("codegen")
    torch.testing.assert_close(compiled(scores, bias), fn(scores, bias), equal_nan=True)
