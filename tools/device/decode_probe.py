"""Where a generate() call's time goes: per decode step host time, GPU time, launches.

    python tools/device/decode_probe.py gpt2 1 ember,ember-whole,torch.compile [--top 25]

For each variant (names as in benchmarks/serving_bench.py): the model from
serving_bench's configs (EMBER_SERVING_SIZE=full is set here), one warm-up
generate(), then one generate() under torch.profiler (kernel launches per new
token, GPU kernel time per token, wall time per token) and, for ember variants,
one under cProfile (the top functions by own time; cProfile roughly doubles
Python time: read shares, not totals). Writes nothing.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

os.environ.setdefault("EMBER_SERVING_SIZE", "full")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import serving_bench as sb  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


def main() -> None:
    kind, batch, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 25
    tokens = sb.NEW_TOKENS
    rows = []
    for variant in variants:
        if variant.startswith("torch.compile"):
            torch._dynamo.reset()
        run = sb.prepare(kind, batch, variant)
        sb.generate(run["model"], run["ids"])  # warm
        start = time.perf_counter()
        sb.generate(run["model"], run["ids"])
        wall = (time.perf_counter() - start) / tokens * 1e3
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            sb.generate(run["model"], run["ids"])
        events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        kernels = [e for e in events if "memcpy" not in e.name.lower()]
        gpu_ms = sum(e.device_time for e in kernels) / 1e3 / tokens
        launches = len(kernels) / tokens
        rows.append((variant, wall, gpu_ms, launches, run["first_s"]))
        print(f"{variant}: {wall:.3f} ms/token wall, {gpu_ms:.3f} ms/token GPU, "
              f"{launches:.1f} kernels/token, first call {run['first_s']:.1f} s", flush=True)  # fmt: skip
        by_name: dict[str, list[float]] = {}
        for e in kernels:
            by_name.setdefault(e.name[:90], []).append(e.device_time)
        ranked = sorted(by_name.items(), key=lambda kv: -len(kv[1]))[:45]
        for name, times in ranked:
            print(
                f"    {sum(times) / 1e3 / tokens:8.4f} ms/token {len(times) / tokens:6.1f}x  {name}"
            )
        if variant.startswith("ember"):
            profiler = cProfile.Profile()
            profiler.enable()
            sb.generate(run["model"], run["ids"])
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
            print("\n".join(text.getvalue().splitlines()[: top + 12]))
        del run
        torch.cuda.empty_cache()
    print("\nvariant, wall ms/token, GPU ms/token, kernels/token, first call s")
    for row in rows:
        print("  ", row[0], *(f"{v:.3f}" for v in row[1:]))


if __name__ == "__main__":
    main()
