"""Per-call cost of a compiled callable past its recompile limit, against eager.

    python benchmarks/recompile_limit_bench.py

Past `recompile_limit` entries, a call that no entry's guards accept runs the
function eagerly. That path should cost eager's time plus the guard checks of the
cached entries, nothing more (no guard-failure explanation, no capture). Cases:

- `scale`: `x * n + 1` on a [4] tensor, compiled with dynamic=False and called with
  a new int `n` each call (every call misses the 8 cached entries);
- `mlp`: a 3-layer MLP module compiled with dynamic=False, called with batch sizes
  outside the 8 compiled ones.

Eager and compiled calls alternate in rounds (`EMBER_BENCH_ROUNDS`, each
`EMBER_BENCH_CALLS` calls) so that load from other processes falls on both; the
table gives the median per call, in microseconds, and the overhead over eager.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
for package in ("guards", "dynamo_capture", "prim_decomp", "aot_autograd", "inductor_codegen"):
    sys.path.insert(0, str(ROOT / package / "src"))
sys.path.insert(0, str(ROOT / "packages" / "ember" / "src"))

import ember  # noqa: E402

ROUNDS = int(os.environ.get("EMBER_BENCH_ROUNDS", "30"))
CALLS = int(os.environ.get("EMBER_BENCH_CALLS", "200"))


def scale(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n + 1


def _scale_case() -> tuple[Callable[..., Any], Callable[..., Any], list[tuple[Any, ...]]]:
    compiled = ember.compile(scale, backend="eager", dynamic=False)
    x = torch.randn(4)
    for n in range(2, 12):  # fills the cache past the limit of 8
        compiled(x, n)
    return scale, compiled, [(x, n) for n in range(100, 100 + CALLS)]


def _mlp_case() -> tuple[Callable[..., Any], Callable[..., Any], list[tuple[Any, ...]]]:
    model = nn.Sequential(
        nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)
    )
    compiled = ember.compile(model, backend="eager", dynamic=False)
    with torch.no_grad():
        for batch in range(1, 11):
            compiled(torch.randn(batch, 8))
    inputs = [(torch.randn(batch, 8),) for batch in range(20, 24)]
    return model, compiled, [inputs[i % len(inputs)] for i in range(CALLS)]


def _per_call_us(fn: Callable[..., Any], calls: list[tuple[Any, ...]]) -> float:
    start = time.perf_counter_ns()
    for args in calls:
        fn(*args)
    return (time.perf_counter_ns() - start) / len(calls) / 1000


def measure(name: str, case: Callable[..., Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager, compiled, calls = case()
    eager_times, compiled_times = [], []
    with torch.no_grad():
        for _ in range(ROUNDS):
            eager_times.append(_per_call_us(eager, calls))
            compiled_times.append(_per_call_us(compiled, calls))
    eager_us = statistics.median(eager_times)
    compiled_us = statistics.median(compiled_times)
    print(
        f"{name:8s} {eager_us:10.2f} {compiled_us:14.2f} {compiled_us - eager_us:12.2f}"
        f" {compiled_us / eager_us:8.2f}x"
    )


def main() -> None:
    print(
        f"{'case':8s} {'eager us':>10s} {'past limit us':>14s} {'overhead us':>12s} {'ratio':>9s}"
    )
    measure("scale", _scale_case)
    measure("mlp", _mlp_case)


if __name__ == "__main__":
    main()
