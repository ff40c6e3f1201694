"""Run every benchmark script (each `*_bench.py` in this folder and in a package's
own `benchmarks/` folder), one after another.

    python benchmarks/run.py            all of them
    python benchmarks/run.py guards     only scripts whose name contains "guards"

Each script prints its own table (eager / ember / torch.compile in one run);
benchmarks/RESULTS.md records the numbers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    scripts = sorted(here.glob("*_bench.py")) + sorted(here.parent.glob("*/benchmarks/*_bench.py"))
    if argv:
        scripts = [s for s in scripts if any(word in s.name for word in argv)]
    if not scripts:
        print("no benchmark scripts matched", argv)
        return 1
    failed = []
    for script in scripts:
        print(f"\n=== {script.name} ===", flush=True)
        if subprocess.run([sys.executable, str(script)]).returncode != 0:
            failed.append(script.name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
