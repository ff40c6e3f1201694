"""A/B of launch and fusion choices on whole models: each variant patches one module
constant or function, compiles the model afresh with ember and times training or
inference steps back to back, one variant after another in one process.

    python tools/device/ab_variants.py NAMES infer|train [--variants head,no_join,...]

Variants: head (as committed), no_join (a pointwise sharing reads never joins a
reduction kernel as an inner loop), persistent_4096 (persistent rows in programs of 4096 elements),
row_tile_4096 (row tiles of 4096 elements), row_step_1024 (looped rows: 1024 elements
a step, 4 warps). `--kernels N` also prints each variant's N kernels moving the most
bytes, each timed alone (gpu_bench.kernel_bandwidth).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PATCHES = {
    "head": [],
    "no_join": [("inductor_codegen.scheduler", "stores_along_rows", lambda plan, buf: False)],
    "persistent_4096": [
        ("inductor_codegen.codegen.triton.heuristics", "PERSISTENT_PROGRAM_ELEMENTS", 4096)
    ],
    "row_tile_4096": [("inductor_codegen.codegen.triton.heuristics", "ROW_TILE_ELEMENTS", 4096)],
    "row_step_1024": [
        ("inductor_codegen.codegen.triton.heuristics", "ROW_STEP", 1024),
        ("inductor_codegen.codegen.triton.heuristics", "ROW_STEP_WARPS", 4),
    ],
}


@contextlib.contextmanager
def patched(variant: str):
    import importlib

    saved = []
    for module_name, attr, value in PATCHES[variant]:
        module = importlib.import_module(module_name)
        saved.append((module, attr, getattr(module, attr)))
        setattr(module, attr, value)
    try:
        yield
    finally:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("names")
    parser.add_argument("mode")
    parser.add_argument("--variants", default=",".join(PATCHES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kernels", type=int, default=0)
    args = parser.parse_args(argv)
    import torch
    from common import gpu_bench, prepared, wall_ms

    for name in args.names.split(","):
        model, inputs = prepared(name, args.mode)
        # Each variant compiled afresh and timed at once (ember.reset drops the compiled
        # code of the one before); head again last, to show the drift over the run.
        variants = args.variants.split(",")
        for variant in variants + (["head"] if variants[0] == "head" else []):
            with patched(variant):
                step = gpu_bench.make_step(
                    gpu_bench.compiled_model("ember", model), inputs, args.mode
                )
                step()
                torch.cuda.synchronize()
                ms = [wall_ms(step, 30) for _ in range(args.rounds)]
            print(f"{name:20s} {args.mode:5s} {variant:16s} " + " ".join(f"{t:7.2f}" for t in ms),
                  flush=True)  # fmt: skip
            if args.kernels:
                for k in gpu_bench.kernel_bandwidth(step, top=args.kernels):
                    print(
                        f"    {k['kernel']:32s} {k['us']:8.1f} us {k['GBps']:6.0f} GB/s {k['config']}"
                    )
            del step
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
