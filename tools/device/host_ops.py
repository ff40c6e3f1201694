"""Host time per call, interleaved between backends, and which ATen ops spend it.

    python tools/device/host_ops.py resnet50,gpt2 infer [--rounds 5] [--top 15]

Compiles each model with ember and torch.compile in one process, then times eager,
ember and torch.compile back to back in alternating rounds of 30 calls (a slower
stretch of the host then falls on all three alike): best and median per backend.
Then, for each backend, the profiler's CPU view of 5 calls: the ATen ops and CUDA
runtime calls with the most host time of their own, per call.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from common import gpu_bench, prepared, wall_ms
from torch.profiler import ProfilerActivity, profile


def _cpu_ops(step, top: int, calls: int = 5) -> str:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    rows = sorted(averages, key=lambda e: -e.self_cpu_time_total)[:top]
    total = sum(e.self_cpu_time_total for e in averages) / calls / 1000
    lines = [f"   profiled ops' own host time {total:.2f} ms per call"]
    for e in rows:
        lines.append(
            f"   {e.self_cpu_time_total / calls / 1000:7.3f} ms  x{e.count // calls:<4d} {e.key[:80]}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models")
    parser.add_argument("mode")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    for name in args.models.split(","):
        model, inputs = prepared(name, args.mode)
        steps = {"eager": gpu_bench.make_step(model, inputs, args.mode)}
        for backend in ("ember", "torch"):
            steps[backend] = gpu_bench.make_step(
                gpu_bench.compiled_model(backend, model), inputs, args.mode
            )
            steps[backend]()
        times: dict[str, list[float]] = {b: [] for b in steps}
        for _ in range(args.rounds):
            for backend, step in steps.items():
                times[backend].append(wall_ms(step, 30))
        print(f"== {name} {args.mode}: ms per call back to back, best / median of {args.rounds}")
        for backend, values in times.items():
            print(f"   {backend:6s} {min(values):6.2f} / {statistics.median(values):6.2f}")
        for backend, step in steps.items():
            print(f"-- {name} {args.mode} {backend}: host ops")
            print(_cpu_ops(step, args.top))


if __name__ == "__main__":
    main()
