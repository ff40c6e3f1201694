"""Resident memory of one process that compiles many different programs.

Runs a fixed slice of the differential fuzzer (tools/fuzz) program after program in
this process, and prints VmRSS after each program (after `gc.collect()`), the number
of objects the collector tracks, and the growth per program over the second half of
the run (the first programs also warm up imports and op tables).

    python benchmarks/fuzz_memory_bench.py --seed 940000 --count 60 \\
        --backend aot_eager,inductor --out /tmp/fuzzmem

Run from the repository root with every package's `src` and `tools/fuzz` on
`PYTHONPATH`. Linux only (reads /proc/self/status).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections import Counter
from pathlib import Path


def resident_mib() -> float:
    """This process's VmRSS in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=940000)
    parser.add_argument("--count", type=int, default=60)
    parser.add_argument("--backend", default="aot_eager,inductor")
    parser.add_argument("--profile", default="wide")
    parser.add_argument("--out", type=Path, default=Path("/tmp/fuzzmem"))
    parser.add_argument("--json", type=Path, help="write the per-program rows here")
    args = parser.parse_args(argv)

    import fuzz

    options = fuzz.Options(
        backends=tuple(args.backend.split(",")), out=args.out, shrink=False,
        verbose=False, profile=args.profile,
    )  # fmt: skip
    summary, shrunk = fuzz.Summary(), Counter()
    rows = []
    for seed in range(args.seed, args.seed + args.count):
        began = time.monotonic()
        try:
            fuzz.fuzz_one(seed, options, summary, shrunk)
            outcome = "skipped" if seed in summary.skipped else "ok"
        except Exception as error:  # a crash is a row too: the run goes on
            outcome = f"{type(error).__name__}: {str(error)[:80]}"
        gc.collect()
        row = {
            "seed": seed, "rss_mib": round(resident_mib(), 1), "objects": len(gc.get_objects()),
            "seconds": round(time.monotonic() - began, 1), "outcome": outcome,
        }  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    half = rows[len(rows) // 2 :]
    if len(half) > 1:
        growth = (half[-1]["rss_mib"] - half[0]["rss_mib"]) / (len(half) - 1)
        print(f"peak {max(r['rss_mib'] for r in rows):.0f} MiB, last {rows[-1]['rss_mib']:.0f} MiB, "
              f"second half {growth:+.1f} MiB/program, skipped {summary.skipped}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
