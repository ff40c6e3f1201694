"""Compile time of a transformer block: once with a symbolic sequence length vs once per length.

Measured, never asserted (speed is not a unit-test property); off by default:

    EMBER_DYNAMIC_BENCH=1 python -m pytest tests/test_dynamic_compile_time.py -s -q

Both sides start from an empty kernel cache; tracing is timed apart from compile_graph.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
from dynamic_graphs import trace_symbolic
from graph_helpers import trace
from models import TransformerBlock

from inductor_codegen import compile_graph

pytestmark = pytest.mark.skipif(
    not os.environ.get("EMBER_DYNAMIC_BENCH"), reason="set EMBER_DYNAMIC_BENCH=1 to measure"
)

LENGTHS = [5, 8, 11, 16, 19, 24, 31, 40, 57, 64]


def _block():
    torch.manual_seed(0)
    model = TransformerBlock(32, heads=4).eval()
    names = [name for name, _ in model.named_parameters()]
    params = [p.detach() for _, p in model.named_parameters()]

    def fn(x, *weights):
        return torch.func.functional_call(model, dict(zip(names, weights)), (x,))

    return fn, params


def _per_call(compiled, args, repeat=50) -> float:
    compiled(*args)
    start = time.perf_counter()
    for _ in range(repeat):
        compiled(*args)
    return (time.perf_counter() - start) / repeat


@torch.no_grad()
def test_transformer_block_compile_time_dynamic_vs_static(tmp_path):
    fn, params = _block()
    start = time.perf_counter()
    gm, examples = trace_symbolic(fn, torch.randn(2, 16, 32), *params, dynamic={0: [1]})
    traced = time.perf_counter()
    dynamic = compile_graph(gm, examples, options={"cache_dir": tmp_path / "dynamic"})
    dynamic_compile = time.perf_counter() - traced
    static_trace = static_compile = 0.0
    calls = []
    for length in LENGTHS:
        args = (torch.randn(2, length, 32), *params)
        a = time.perf_counter()
        graph = trace(fn, *args)
        b = time.perf_counter()
        static = compile_graph(graph, list(args), options={"cache_dir": tmp_path / "static"})
        static_trace += b - a
        static_compile += time.perf_counter() - b
        torch.testing.assert_close(dynamic(*args)[0], fn(*args), rtol=1e-4, atol=1e-4)
        calls.append((length, _per_call(dynamic, args), _per_call(static, args)))
    print(
        f"\ntransformer block, {len(LENGTHS)} sequence lengths: compile_graph once (symbolic) "
        f"{dynamic_compile:.2f}s (trace {traced - start:.2f}s) vs per length (static) "
        f"{static_compile:.2f}s in all (trace {static_trace:.2f}s)"
    )
    for length, dyn, stat in calls:
        print(
            f"  length {length:3d}: call {dyn * 1e6:7.1f} us symbolic, {stat * 1e6:7.1f} us static"
        )
