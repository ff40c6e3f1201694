"""A graph whose fused expression is deeper than Python's recursion limit runs through
ATen (eager's values), never raising RecursionError at the user."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("prim_decomp")  # (packages of the pipeline: tests run alone without)
from graph_helpers import compile_fn  # noqa: E402


def _program(x0, x2):
    # (a fuzzer's program: the scheduler's walk over its fused expression went ~480
    # frames deep)
    v3 = F.avg_pool2d(x2, 2)
    v4 = torch.stack(v3.unbind(1), -1)
    v5 = v4.cumprod(-2)
    v6 = v5.split(2, 1)[-1]
    v7 = v6.index_put((torch.tensor([0]),), v6[torch.tensor([0])] * 3, accumulate=False)
    v8 = v5.new_full((v5.shape[-1], 2), v5.shape[-1])
    weight = torch.linspace(-1, 1, 4 * v8.shape[-2], dtype=v8.dtype).reshape(4, v8.shape[-2], 1)
    v9 = F.conv1d(v8, weight, torch.ones(4, dtype=v8.dtype))
    return v9, v8, v7, x0.argmax(0)


def test_expression_deeper_than_the_recursion_limit_runs_through_aten():
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(1025, generator=g).half()
    x2 = (torch.randint(-8, 9, (3, 1025, 9), generator=g) / 4).half()[..., :6]
    compiled, _ = compile_fn(_program, x0, x2)
    for got, want in zip(compiled(x0, x2), _program(x0, x2)):
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
