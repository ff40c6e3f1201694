"""Where a warm or remote-warm first call of a GPU suite model spends its time.

    PATH=<dir with redis-server>:$PATH python tools/device/warm_probe.py llama OUT

Runs, each in a fresh process: cold with EMBER_REMOTE_CACHE (publishing), remote-warm
(an empty local cache), and warm (the cold run's folder) under cProfile; prints each run's
warm-start stats, the cache log of the remote-warm run, the Triton cache files each folder
holds, and the profile's top functions.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import warm_start_bench as bench  # noqa: E402


def triton_files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file() and "jit" in p.parts)


def run(model: str, cache: Path, log: Path, url: str) -> dict:
    """bench.child with the cache log kept (stderr) in `log`."""
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [*(str(ROOT / s) for s in bench.SOURCES), env.get("PYTHONPATH", "")]
    )
    env.update(EMBER_CACHE_DIR=str(cache), EMBER_REMOTE_CACHE=url, EMBER_LOGS="+cache")
    name, infer = model.removesuffix("-infer"), model.endswith("-infer")
    code = bench.CHILD_GPU.format(
        benchmarks=str(ROOT / "benchmarks"), model=name, eager=False, infer=infer, device="cuda"
    )
    script = log.with_suffix(".py")
    script.write_text(code)
    profile = f"import cProfile; cProfile.run(open({str(script)!r}).read(), {str(log.with_suffix('.prof'))!r})"
    done = subprocess.run([sys.executable, "-c", profile], env=env, capture_output=True, text=True)
    log.write_text(done.stderr)
    print("\n".join(line[:240] for line in done.stderr.splitlines()[-25:]))
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    model, out = sys.argv[1], Path(sys.argv[2])
    bench.DEVICE.update(name="cuda", suite="gpu")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        redis = bench.start_redis(base)
        assert redis is not None, "redis-server and redis-py are needed"
        url = redis[1]
        try:
            cold = bench.child(model, base / "b", EMBER_REMOTE_CACHE=url)
            print(
                "cold",
                round(cold["first"], 2),
                cold["stats"],
                "triton files",
                triton_files(base / "b"),
            )
            remote = run(model, base / "c", out / f"{model}_remote_log.txt", url)
            print(
                "remote-warm",
                round(remote["first"], 2),
                remote["stats"],
                "triton files",
                triton_files(base / "c"),
            )
            profile = out / f"{model}_warm.prof"
            code_wrap = f"import cProfile; cProfile.run(open({str(out / 'c.py')!r}).read(), {str(profile)!r})"
            name, infer = model.removesuffix("-infer"), model.endswith("-infer")
            code = bench.CHILD_GPU.format(
                benchmarks=str(ROOT / "benchmarks"),
                model=name,
                eager=False,
                infer=infer,
                device="cuda",
            )
            (out / "c.py").write_text(code)
            env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
            env["PYTHONPATH"] = os.pathsep.join(
                [*(str(ROOT / s) for s in bench.SOURCES), env.get("PYTHONPATH", "")]
            )
            env["EMBER_CACHE_DIR"] = str(base / "b")
            import subprocess

            done = subprocess.run(
                [sys.executable, "-c", code_wrap], env=env, capture_output=True, text=True
            )
            print(
                "warm (profiled)",
                done.stdout.strip().splitlines()[-1][:300]
                if done.stdout.strip()
                else done.stderr[-2000:],
            )
            import pstats

            stats = pstats.Stats(str(profile))
            stats.sort_stats("cumulative").print_stats(45)
        finally:
            redis[0].terminate()


if __name__ == "__main__":
    main()
