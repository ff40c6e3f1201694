"""CUDA graphs (mode reduce-overhead, backend cudagraphs): replay, inputs that move, re-recording.

The GPU tests skip without CUDA; the CPU tests check the runner's plain path.
"""

from __future__ import annotations

import pytest
import torch
from graph_helpers import trace

from inductor_codegen import compile_graph, cudagraph_compiler
from inductor_codegen.codegen.triton.cudagraphs import CUDAGraphRunner

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def f(x, y):
    return (x * y).sin() + 1, x.sum(0)


def test_runner_without_cuda_tensors_calls_through():
    calls = []

    def fn(x):
        calls.append(x)
        return x + 1

    runner = CUDAGraphRunner(fn)
    x = torch.randn(3)
    torch.testing.assert_close(runner(x), x + 1)
    torch.testing.assert_close(runner.call_boxed([x]), x + 1)
    assert len(calls) == 2 and not runner.recordings


def test_cudagraph_compiler_runs_the_graph():
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    compiled = cudagraph_compiler(trace(f, x, y), [x, y])
    torch.testing.assert_close(compiled(x, y), f(x, y))


@gpu
def test_replay_matches_eager_and_copies_moved_inputs():
    x, y = torch.randn(64, 32, device="cuda"), torch.randn(64, 32, device="cuda")
    compiled = compile_graph(trace(f, x, y), [x, y], options={"cudagraphs": True})
    torch.testing.assert_close(compiled(x, y), f(x, y))
    for _ in range(3):  # new tensors at new addresses each call: copied into static inputs
        a, b = torch.randn_like(x), torch.randn_like(y)
        torch.testing.assert_close(compiled(a, b), f(a, b))


@gpu
def test_outputs_are_overwritten_by_the_next_replay():
    x, y = torch.randn(16, 8, device="cuda"), torch.randn(16, 8, device="cuda")
    compiled = cudagraph_compiler(trace(f, x, y), [x, y])
    first = compiled(x, y)
    kept = first[0].clone()
    second = compiled(x * 2, y)
    assert second[0].data_ptr() == first[0].data_ptr()  # static output memory
    torch.testing.assert_close(first[0], f(x * 2, y)[0])  # the old result is gone
    torch.testing.assert_close(kept, f(x, y)[0])


@gpu
def test_new_shapes_record_new_graphs():
    runner = CUDAGraphRunner(lambda x: x.relu() * 2)
    for n in (8, 16, 8):
        x = torch.randn(n, device="cuda")
        torch.testing.assert_close(runner(x), x.relu() * 2)
    assert len(runner.recordings) == 2
