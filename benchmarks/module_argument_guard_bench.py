"""Guard check cost of a module passed as an argument: `f(model, x)` for a 12-layer MLP.

Compiles `f` with dynamo_capture (a counting backend) on one model, then times the
entry's guard check (`CompiledEntry.check` on the call's frame locals) and the whole
compiled call, each the minimum over `--rounds` rounds of `--calls` calls (per call,
in microseconds). Run it on two checkouts alternately (before and after a change) to
compare; `--thread-time` times the thread's CPU time, which waiting for a core on a
loaded machine does not inflate.

    PYTHONPATH=<src folders> python benchmarks/module_argument_guard_bench.py
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend


def mlp(layers: int, width: int) -> torch.nn.Module:
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*blocks)


def f(model, x):
    return model(x)


def per_call_us(fn, calls: int, rounds: int, clock) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = clock()
        for _ in range(calls):
            fn()
        best = min(best, (clock() - start) / calls)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--thread-time", action="store_true")
    options = parser.parse_args()
    clock = time.thread_time if options.thread_time else time.perf_counter
    torch.manual_seed(0)
    model = mlp(options.layers, options.width).eval()
    x = torch.randn(1, options.width)
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(f, backend=backend)
    with torch.no_grad():
        compiled(model, x)
        (entry,) = compiled.entries
        frame = compiled.frame
        f_locals, f_globals = frame.bind((model, x), {}), frame.globals
        assert entry.check(f_locals, f_globals)
        check = per_call_us(
            lambda: entry.check(f_locals, f_globals), options.calls, options.rounds, clock
        )
        call = per_call_us(lambda: compiled(model, x), options.calls, options.rounds, clock)
        eager = per_call_us(lambda: f(model, x), options.calls, options.rounds, clock)
        other = mlp(options.layers, options.width).eval()
        compiled(other, x)  # a new module of the same structure
    print(
        json.dumps(
            {
                "guard_check_us": round(check, 2),
                "call_us": round(call, 2),
                "eager_us": round(eager, 2),
                "frames_after_a_second_module": backend.frame_count,
            }
        )
    )


if __name__ == "__main__":
    main()
