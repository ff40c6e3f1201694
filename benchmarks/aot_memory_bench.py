"""Activation memory of aot_autograd's partitioners, and peak memory against eager and torch.

    python benchmarks/aot_memory_bench.py            every model of benchmarks/models.py
    python benchmarks/aot_memory_bench.py mlp cnn    some of them

For one training step (forward + backward) of each model it measures:

- saved: bytes of the tensors autograd keeps for the backward (a saved_tensors_hooks
  pack hook; each storage counted once; parameters and inputs not counted);
- peak: the highest total of tensor storages allocated during the step and alive at
  once, tracked by a dispatch mode of this script (parameters and inputs not counted);
- compile s: the first step's time less a warm step's (tracing, partitioning, compiling);

for eager PyTorch, ember's aot_autograd with the default partitioner and with the
min-cut partitioner (graphs run as they are, like the aot_eager backend), and
torch.compile(backend="aot_eager"). Note: torch.compile may run a frame eagerly
while a dispatch mode is active, so its peak column can read as eager's.
"""

from __future__ import annotations

import copy
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [
    str(ROOT / "benchmarks"),
    str(ROOT / "aot_autograd" / "src"),
    str(ROOT / "guards" / "src"),
]

from models import MODELS  # noqa: E402

from aot_autograd import (  # noqa: E402
    aot_module,
    default_partition,
    min_cut_rematerialization_partition,
)


class PeakMemory(TorchDispatchMode):
    """Tracks bytes of tensor storages created under it that are still alive; keeps the peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}  # storage pointer -> [bytes, tensors alive]
        self.current = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key == 0:
            return
        entry = self.live.get(key)
        if entry is None:
            entry = self.live[key] = [storage.nbytes(), 0]
            self.current += entry[0]
            self.peak = max(self.peak, self.current)
        entry[1] += 1
        weakref.finalize(t, self._release, key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # Views and in-place results share an argument's storage: nothing new was allocated.
        inputs = {
            t.untyped_storage().data_ptr()
            for t in torch.utils._pytree.tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                key = t.untyped_storage().data_ptr()
                if key in self.live or key not in inputs:
                    self._track(t)
        return out


def saved_bytes(step: Callable[[], None], exclude: set[int]) -> int:
    """Bytes of the distinct storages autograd saves for the backward during `step`."""
    seen: dict[int, int] = {}

    @torch.compiler.disable
    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in exclude:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(seen.values())


def _identity(gm, example_inputs):
    return gm


def _variants(model: torch.nn.Module) -> dict[str, torch.nn.Module | Callable]:
    return {
        "eager": model,
        "ember default": aot_module(
            copy.deepcopy(model), _identity, partition_fn=default_partition
        ),
        "ember min-cut": aot_module(
            copy.deepcopy(model), _identity, partition_fn=min_cut_rematerialization_partition
        ),
        "torch aot_eager": torch.compile(copy.deepcopy(model), backend="aot_eager"),
    }


def measure(name: str) -> list[tuple[str, int, int, float]]:
    case = MODELS[name]()
    case.model.train()
    rows = []
    for label, model in _variants(case.model).items():
        params = model.parameters() if isinstance(model, torch.nn.Module) else []
        exclude = {p.untyped_storage().data_ptr() for p in params}
        exclude |= {
            t.untyped_storage().data_ptr() for t in case.inputs if isinstance(t, torch.Tensor)
        }
        exclude |= {b.untyped_storage().data_ptr() for b in case.model.buffers()}

        def step(model=model) -> None:
            case.loss(model(*case.inputs)).backward()

        start = time.perf_counter()
        step()  # compile and warm up
        first = time.perf_counter() - start
        start = time.perf_counter()
        saved = saved_bytes(step, exclude)
        compile_s = max(first - (time.perf_counter() - start), 0.0)
        tracker = PeakMemory()
        try:
            with tracker:
                step()
            peak = tracker.peak
        except Exception:  # noqa: BLE001 - a backend that refuses to run under a dispatch mode
            peak = -1
        rows.append((label, saved, peak, compile_s))
    return rows


def main(argv: list[str]) -> int:
    names = argv or list(MODELS)
    print(
        f"{'model':8} {'variant':16} {'saved KiB':>10} {'peak KiB':>10} "
        f"{'saved vs default':>17} {'compile s':>10}"
    )
    for name in names:
        try:
            rows = measure(name)
        except Exception as error:  # noqa: BLE001 - report and go on with the other models
            print(f"{name:8} failed: {type(error).__name__}: {str(error)[:200]}")
            continue
        default = {r[0]: r[1] for r in rows}["ember default"]
        for label, saved, peak, compile_s in rows:
            ratio = f"{saved / default:.2f}x" if default else "-"
            peak_text = f"{peak / 1024:10.0f}" if peak >= 0 else f"{'n/a':>10}"
            print(
                f"{name:8} {label:16} {saved / 1024:10.0f} {peak_text} {ratio:>17} "
                f"{compile_s:10.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
