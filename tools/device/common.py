"""What the device tools share: a benchmark model ready on the GPU, and wall time per call."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_bench  # noqa: E402

__all__ = ["gpu_bench", "prepared", "wall_ms"]


def prepared(name: str, mode: str) -> tuple[torch.nn.Module, tuple]:
    """gpu_bench's model `name` on the GPU: bf16 in eval mode for `infer`, float32 in train
    mode for `train` (AMP makes the bf16 casts), with its inputs."""
    torch.manual_seed(0)
    model, inputs = gpu_bench.MODELS[name][0]()
    model = model.to("cuda")
    dtype = torch.bfloat16 if mode == "infer" else torch.float32
    model = model.eval().to(dtype) if mode == "infer" else model.train()
    inputs = tuple(x.to("cuda", dtype if x.is_floating_point() else x.dtype) for x in inputs)
    return model, inputs


def wall_ms(step, repeats: int = 20) -> float:
    """Milliseconds per call of `step` run back to back (host and GPU overlapped), after
    three warm-up calls: gpu_bench's back-to-back timing."""
    return gpu_bench.back_to_back_time(step, repeats) * 1000
