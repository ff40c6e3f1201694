"""Whether a compiled call gets slower in a process that already ran other models.

    python tools/device/process_probe.py resnet50 infer gpt2,bert_base

Times `target` (eager, ember, torch.compile; back to back, as gpu_bench does) in a
fresh process, then runs gpu_bench's whole case for each model of the list (eager,
torch.compile, ember, kernel bandwidths) and times `target` again, freshly compiled:
once as is, once with the garbage collector's objects frozen, once with it off. Each
timing line also gives the collector's time and collections during the timed calls
and the number of objects it tracks.
"""

from __future__ import annotations

import gc
import sys
import time

import torch
from common import gpu_bench, prepared, wall_ms

_gc = {"seconds": 0.0, "collections": [0, 0, 0], "start": 0.0}


def _on_gc(phase, info):
    if phase == "start":
        _gc["start"] = time.perf_counter()
    else:
        _gc["seconds"] += time.perf_counter() - _gc["start"]
        _gc["collections"][info["generation"]] += 1


def _timed(label: str, step) -> None:
    for _ in range(3):
        step()
    times = []
    _gc["seconds"], _gc["collections"] = 0.0, [0, 0, 0]
    for _ in range(3):
        times.append(wall_ms(step, 30))
    print(
        f"  {label:28s} {min(times):6.2f} / {sorted(times)[1]:6.2f} ms (best / median of 3x30);"
        f" gc {_gc['seconds'] * 1000:7.1f} ms in {_gc['collections']} collections;"
        f" {len(gc.get_objects())} objects tracked",
        flush=True,
    )


def _measure(name: str, mode: str, state: str) -> None:
    model, inputs = prepared(name, mode)
    print(f"== {name} {mode}, {state}", flush=True)
    _timed("eager", gpu_bench.make_step(model, inputs, mode))
    for backend in ("ember", "torch"):
        step = gpu_bench.make_step(gpu_bench.compiled_model(backend, model), inputs, mode)
        step()
        _timed(backend, step)
        if backend == "ember" and state != "fresh process":
            gc.freeze()
            _timed("ember, gc frozen", step)
            gc.unfreeze()
            gc.disable()
            _timed("ember, gc off", step)
            gc.enable()


def main(target: str, mode: str, before: list[str]) -> None:
    gc.callbacks.append(_on_gc)
    print("gc thresholds", gc.get_threshold(), flush=True)
    _measure(target, mode, "fresh process")
    for name in before:
        start = time.perf_counter()
        gpu_bench.run_case(name, gpu_bench.MODELS[name][0], mode, ("torch", "ember"))
        print(f"   ran gpu_bench case {name} {mode} in {time.perf_counter() - start:.0f} s")
    _measure(target, mode, "after " + ",".join(before))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [n for n in sys.argv[3].split(",") if n])
