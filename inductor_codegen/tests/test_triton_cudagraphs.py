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
def test_outputs_still_referenced_are_not_overwritten():
    x, y = torch.randn(16, 8, device="cuda"), torch.randn(16, 8, device="cuda")
    compiled = cudagraph_compiler(trace(f, x, y), [x, y])
    first = compiled(x, y)
    second = compiled(x * 2, y)  # first is alive: a second recording, its own outputs
    assert second[0].data_ptr() != first[0].data_ptr()
    torch.testing.assert_close(first[0], f(x, y)[0])
    torch.testing.assert_close(second[0], f(x * 2, y)[0])


@gpu
def test_a_loop_keeping_the_last_output_alternates_between_two_recordings():
    runner = CUDAGraphRunner(lambda x: x * 3)
    x = torch.randn(32, device="cuda")
    out = None
    for step in range(6):
        previous = out
        out = runner(x + step)
        torch.testing.assert_close(out, (x + step) * 3)
        if previous is not None:  # the last call's output survived this replay
            torch.testing.assert_close(previous, (x + step - 1) * 3)
    (recordings,) = runner.recordings.values()
    assert len(recordings) == 2  # the loop alternates between two


@gpu
def test_dropped_outputs_let_one_recording_replay():
    runner = CUDAGraphRunner(lambda x: x * 3)
    x = torch.randn(32, device="cuda")
    for step in range(4):
        torch.testing.assert_close(runner(x + step), (x + step) * 3)
    (recordings,) = runner.recordings.values()
    assert len(recordings) == 1


@gpu
def test_every_recording_held_runs_plainly():
    from inductor_codegen.codegen.triton.cudagraphs import RECORDINGS_PER_SIGNATURE

    runner = CUDAGraphRunner(lambda x: x + 1)
    x = torch.randn(8, device="cuda")
    kept = [runner(x + i) for i in range(RECORDINGS_PER_SIGNATURE + 2)]
    for i, out in enumerate(kept):
        torch.testing.assert_close(out, x + i + 1)
    (recordings,) = runner.recordings.values()
    assert len(recordings) == RECORDINGS_PER_SIGNATURE


@gpu
def test_cpu_tensor_input_runs_plainly():
    runner = CUDAGraphRunner(lambda x, s: x * s.to(x.device))
    x = torch.randn(8, device="cuda")
    for value in (2.0, 3.0):
        torch.testing.assert_close(runner(x, torch.tensor(value)), x * value)
    assert not runner.recordings


@gpu
def test_parameters_are_recorded_at_their_own_address():
    weight = torch.nn.Parameter(torch.randn(8, 8, device="cuda"), requires_grad=False)
    runner = CUDAGraphRunner(lambda w, x: x @ w)
    x = torch.randn(4, 8, device="cuda")
    torch.testing.assert_close(runner(weight, x), x @ weight)
    (recordings,) = runner.recordings.values()
    assert recordings[0].static_inputs[0] is weight and recordings[0].copied_positions == (1,)
    with torch.no_grad():
        weight.mul_(2)  # an optimizer step in place: the replay reads the new values
    torch.testing.assert_close(runner(weight, x), x @ weight)


@gpu
def test_more_signatures_than_the_limit_run_plainly():
    from inductor_codegen.codegen.triton.cudagraphs import MAX_RECORDINGS

    runner = CUDAGraphRunner(lambda x: x - 1)
    for n in range(1, MAX_RECORDINGS + 4):
        x = torch.randn(n, device="cuda")
        torch.testing.assert_close(runner(x), x - 1)
    assert len(runner.recordings) == MAX_RECORDINGS


@gpu
def test_new_shapes_record_new_graphs():
    runner = CUDAGraphRunner(lambda x: x.relu() * 2)
    for n in (8, 16, 8):
        x = torch.randn(n, device="cuda")
        torch.testing.assert_close(runner(x), x.relu() * 2)
    assert len(runner.recordings) == 2


@gpu
def test_inputs_written_in_place_are_recorded_at_their_own_address_and_written_once():
    calls = []

    def fn(counter, x):
        calls.append(1)
        counter.add_(1)  # written in place (as a graph reinplaced by the lowering does)
        return x * counter

    runner = CUDAGraphRunner(fn, pinned=frozenset({0}))
    counter, x = torch.zeros(4, device="cuda"), torch.randn(4, device="cuda")
    for step in range(1, 4):
        torch.testing.assert_close(runner(counter, x), x * step)
        torch.testing.assert_close(counter, torch.full((4,), float(step), device="cuda"))
    (recordings,) = runner.recordings.values()
    assert recordings[0].static_inputs[0] is counter and recordings[0].copied_positions == (1,)
    other = torch.zeros(4, device="cuda")  # another address: a recording of its own
    torch.testing.assert_close(runner(other, x), x)
    torch.testing.assert_close(other, torch.ones(4, device="cuda"))
    torch.testing.assert_close(counter, torch.full((4,), 3.0, device="cuda"))
    assert len(runner.recordings) == 2
