"""Each Triton kernel of a model under its default launch configuration and under every
autotuning candidate: how much the heuristics leave on the table, and which shapes lose it.

    python tools/device/kernel_configs.py NAMES infer|train [--kinds persistent,looped,column]
        [--top N]

Per kernel (one call of the model records each kernel's arguments): calls per model
call, bytes of its tensor arguments, the default configuration's time and GB/s, the
best candidate's, both configurations, and a copy of as many bytes (same timing).
With `--top N`, only the N kernels moving the most bytes, every kind, sources kept. Last, per kind of kernel, the time per
model call under the defaults and under the best candidates. Writes kernel_configs.json
(with the sources of kernels whose best candidate is 10% faster) to $OUT when set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

KINDS = ("persistent", "looped", "column", "pointwise", "tile")


def kind_of(source) -> str:
    if source.ynumel:
        return "tile"
    if not source.groups:
        return "pointwise"
    if source.column_reduction:
        return "column"
    return "persistent" if all(g.persistent for g in source.groups) else "looped"


def sweep(name: str, mode: str, kinds: set[str], top: int = 0) -> list[dict]:
    import torch
    from common import gpu_bench, prepared

    from inductor_codegen.codegen.triton.heuristics import autotune_configs, default_config

    model, inputs = prepared(name, mode)
    step = gpu_bench.make_step(gpu_bench.compiled_model("ember", model), inputs, mode)
    step()
    step()
    torch.cuda.synchronize()
    calls = gpu_bench.recorded_kernels(step)
    torch.cuda.synchronize()
    rows = []
    entries = list(calls.values())
    if top:
        entries = sorted(entries, key=lambda e: -e[2])[:top]
    for kernel, args, nbytes, count in entries:
        source = kernel.source
        if not top and kind_of(source) not in kinds:
            continue
        default = kernel.config or default_config(source)
        timings = gpu_bench.config_times(kernel, args, autotune_configs(source))
        if default not in timings:
            continue
        best = min(timings, key=timings.get)
        rows.append(
            {
                "model": name,
                "kernel": source.name,
                "kind": kind_of(source),
                "xnumel": source.xnumel,
                "rnumel": [g.numel for g in source.groups],
                "calls": count,
                "MB": nbytes / 1e6,
                "default": default.describe(),
                "default_us": timings[default] * 1000,
                "best": best.describe(),
                "best_us": timings[best] * 1000,
                "all": {c.describe(): t * 1000 for c, t in timings.items()},
                "copy_us": gpu_bench.copy_us(nbytes),
                "source": source.source if top or timings[best] < 0.9 * timings[default] else "",
            }
        )
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("names")
    parser.add_argument("mode")
    parser.add_argument("--kinds", default="persistent,looped,column")
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args(argv)
    import torch

    kinds = set(args.kinds.split(","))
    copy = None
    everything = []
    for name in args.names.split(","):
        rows = sweep(name, args.mode, kinds, args.top)
        everything += rows
        if copy is None:
            sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
            import gpu_bench

            copy = gpu_bench.copy_bandwidth()
        print(f"== {name} {args.mode} (copy {copy:.0f} GB/s)")
        print(f"{'kernel':44s} {'kind':10s} {'x':>8s} {'r':>12s} n {'MB':>7s} "
              f"{'def us':>7s} {'GB/s':>5s} {'best us':>7s} {'GB/s':>5s} {'copy':>6s}  default -> best")  # fmt: skip
        for r in sorted(rows, key=lambda r: -r["calls"] * (r["default_us"] - r["best_us"])):
            print(
                f"{r['kernel'][:44]:44s} {r['kind']:10s} {r['xnumel']:8d} "
                f"{str(r['rnumel'])[:12]:>12s} {r['calls']} {r['MB']:7.1f} "
                f"{r['default_us']:7.1f} {r['MB'] / r['default_us'] * 1000:5.0f} "
                f"{r['best_us']:7.1f} {r['MB'] / r['best_us'] * 1000:5.0f} {r['copy_us']:6.1f}  "
                f"{r['default']} -> {r['best']}"
            )
        for kind in KINDS:
            part = [r for r in rows if r["kind"] == kind]
            if part:
                default = sum(r["calls"] * r["default_us"] for r in part)
                best = sum(r["calls"] * r["best_us"] for r in part)
                print(f"   {kind:10s} {len(part):3d} kernels: {default:8.0f} us default, "
                      f"{best:8.0f} us best")  # fmt: skip
        torch.cuda.empty_cache()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "kernel_configs.json").write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
