"""Compile a benchmark model with ember, time it against eager, and keep its wrappers.

    python tools/device/dump_wrappers.py llama,t5_small train $OUT

For each model: eager and ember wall ms per call (20 calls after warm-up), the
ATen calls the generated wrappers make, counted by op, and the wrapper files
copied under `$OUT/<model>_<mode>/` to read offline.
"""

from __future__ import annotations

import collections
import re
import shutil
import sys
from pathlib import Path

from common import gpu_bench, prepared, wall_ms


def main(names: list[str], mode: str, out: Path) -> None:
    from inductor_codegen.options import default_cache_dir

    wrappers = Path(default_cache_dir()) / "wrappers"
    for name in names:
        model, inputs = prepared(name, mode)
        eager = wall_ms(gpu_bench.make_step(model, inputs, mode))
        before = set(wrappers.glob("*.py")) if wrappers.exists() else set()
        step = gpu_bench.make_step(gpu_bench.compiled_model("ember", model), inputs, mode)
        ember = wall_ms(step)
        print(f"== {name} {mode}: eager {eager:.2f} ms, ember {ember:.2f} ms")
        folder = out / f"{name}_{mode}"
        folder.mkdir(parents=True, exist_ok=True)
        calls: collections.Counter[str] = collections.Counter()
        for path in sorted(set(wrappers.glob("*.py")) - before):
            text = path.read_text()
            shutil.copy(path, folder / path.name)
            calls.update(re.findall(r"= (aten_\w+|ensure_layout)\(", text))
            calls["triton launches"] += len(re.findall(r"\.launch\(stream0", text))
            calls["triton checked calls"] += len(re.findall(r"^    triton_\w+\(", text, re.M))
        for op, count in calls.most_common():
            print(f"   {count:5d}  {op}")


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2], Path(sys.argv[3]))
