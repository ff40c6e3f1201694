"""Where the first generate() call's time goes: cProfile of a cold compile, and the files made.

    EMBER_CACHE_DIR=/tmp/cold python tools/device/first_call_probe.py gpt2 1 ember

Builds the serving model (benchmarks/serving_bench.py, EMBER_SERVING_SIZE=full), compiles
its forward with the variant and runs the first generate() under cProfile: the top
functions by cumulative and by own time (cProfile roughly doubles Python time). With
$OUT set, copies the generated wrappers and kernels of the cache folder there.
"""

from __future__ import annotations

import cProfile
import glob
import io
import os
import pstats
import shutil
import sys
from pathlib import Path

os.environ.setdefault("EMBER_SERVING_SIZE", "full")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import serving_bench as sb  # noqa: E402


def main() -> None:
    kind, batch, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    profiler = cProfile.Profile()
    profiler.enable()
    run = sb.prepare(kind, batch, variant)
    profiler.disable()
    print("first call s", run["first_s"])
    for order, count in (("cumtime", 60), ("tottime", 30)):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(count)
        print(text.getvalue())
    out, cache = os.environ.get("OUT"), os.environ.get("EMBER_CACHE_DIR")
    if out and cache:
        for path in glob.glob(cache + "/**/*.py", recursive=True):
            if "wrappers" in path or "kernels" in path:
                shutil.copy(path, Path(out) / ("w_" + Path(path).name))


if __name__ == "__main__":
    main()
