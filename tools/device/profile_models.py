"""Where a compiled model's GPU time goes: kernels per call, GPU busy time, host time.

    python tools/device/profile_models.py vit_b_16,mobilenet_v3_large [infer|train] [--torch] [--top=N]
    python tools/device/profile_models.py bert_base train --backends=ember,ember_whole

For eager and ember (and torch.compile with --torch): wall ms per call (host +
device, synchronized), the GPU's kernel time per call, kernel launches per
call, and the top kernels by total time. Writes nothing; prints a short table.
"""

from __future__ import annotations

import sys

import torch
from common import gpu_bench, prepared, wall_ms
from torch.profiler import ProfilerActivity, profile


def _profile(step, repeats: int = 5, top: int = 10) -> tuple[float, int, list]:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time for e in kernels) / 1000 / repeats
    by_name: dict[str, list[float]] = {}
    for event in kernels:
        by_name.setdefault(event.name, []).append(event.device_time / 1000 / repeats)
    ranked = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:top]
    return total, len(kernels) // repeats, [(n[:70], len(t) // repeats, sum(t)) for n, t in ranked]


def main(argv: list[str]) -> None:
    names = argv[0].split(",")
    mode = argv[1] if len(argv) > 1 else "infer"
    backends = ["eager", "ember"] + (["torch"] if "--torch" in argv else [])
    chosen = next((a.split("=", 1)[1] for a in argv if a.startswith("--backends=")), None)
    if chosen:  # e.g. --backends=ember,ember_whole (gpu_bench's backend names)
        backends = chosen.split(",")
    top = int(next((a.split("=")[1] for a in argv if a.startswith("--top=")), 10))
    if "--torch-first" in argv:  # gpu_bench's order: torch.compile runs before ember
        backends = ["eager", "torch", "ember"]
    for name in names:
        model, inputs = prepared(name, mode)
        for backend in backends:
            target = model if backend == "eager" else gpu_bench.compiled_model(backend, model)
            step = gpu_bench.make_step(target, inputs, mode)
            step()
            wall = wall_ms(step)
            gpu, launches, kernels = _profile(step, top=top)
            print(
                f"== {name} {mode} {backend}: wall {wall:.2f} ms, kernels {gpu:.2f} ms, "
                f"{launches} launches per call"
            )
            for kernel, count, ms in kernels:
                print(f"   {ms:7.3f} ms  x{count:<4d} {kernel}")


if __name__ == "__main__":
    main(sys.argv[1:])
