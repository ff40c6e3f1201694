"""Where a model's compile time goes on the GPU, and how Triton compilation scales.

    python tools/device/compile_phases.py NAMES infer|train [--workers 1,4,8,16] [--processes 8,16]

Per model, in a process of its own with empty Triton and ember caches: the first
call's seconds, split into ember's passes (lower, schedule, codegen, load with the
parallel Triton compile, wrapper), the first launches after compiling (the compiles
run in the background from `precompile` on, so the wait for them falls here), and the rest
(capture, guards, AOT tracing and partitioning). Then the model's distinct kernels
are compiled again in fresh processes and fresh caches: with thread pools of each
`--workers` size (how ember compiles) and with process pools of each `--processes`
size (started before the clock, as a warm pool would be). Writes compile_phases.json
to $OUT when set.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def _fresh_caches() -> None:
    root = Path(tempfile.mkdtemp(prefix="ember-phases-"))
    os.environ["EMBER_CACHE_DIR"] = str(root / "ember")
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")


def _mock(kernel) -> list[str]:
    from inductor_codegen.codegen.triton.ops import TRITON_DTYPES

    names = {text: str(dtype).removeprefix("torch.") for dtype, text in TRITON_DTYPES.items()}
    return [names[a.ctype] for a in kernel.source.args]


def measure(name: str, mode: str) -> dict:
    """The first call of `name` compiled by ember, split by phase; the kernels it compiled."""
    _fresh_caches()
    sys.path.insert(0, str(HERE.parent))
    import torch
    from common import gpu_bench, prepared

    from inductor_codegen import compile as driver
    from inductor_codegen.codegen.triton import runtime

    graphs, precompiled = [], []
    seconds = {"precompile": 0.0, "first launches": 0.0}
    original_init = driver.CompiledGraph.__init__

    def record_graph(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        graphs.append(self)

    original_precompile = runtime.precompile

    def timed_precompile(kernels, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original_precompile(kernels, *args, **kwargs)
        finally:
            seconds["precompile"] += time.perf_counter() - start
            precompiled.extend(kernels)

    original_first = runtime.TritonKernel._first_launch

    def timed_first(self, stream, *args):
        start = time.perf_counter()
        try:
            return original_first(self, stream, *args)
        finally:
            seconds["first launches"] += time.perf_counter() - start

    driver.CompiledGraph.__init__ = record_graph
    runtime.precompile = timed_precompile
    runtime.TritonKernel._first_launch = timed_first
    model, inputs = prepared(name, mode)
    step = gpu_bench.make_step(gpu_bench.compiled_model("ember", model), inputs, mode)
    total = gpu_bench.first_call(step)
    second = gpu_bench.first_call(step)
    passes: dict[str, float] = {}
    for graph in graphs:
        for artifact in graph.artifacts:
            passes[artifact.name] = passes.get(artifact.name, 0.0) + artifact.seconds
    passes["load (without precompile)"] = passes.pop("load", 0.0) - seconds["precompile"]
    passes.update(seconds)
    passes["capture, guards, AOT, other"] = total - sum(passes.values())
    kernels = {}
    for kernel in precompiled:
        config = kernel.config
        kernels.setdefault(
            str(kernel.path),
            {
                "path": str(kernel.path),
                "function": kernel.fn.__name__,
                "mock": _mock(kernel),
                "constexprs": config.constexprs(),
                "num_warps": config.num_warps,
            },
        )
    del torch
    return {
        "model": name,
        "mode": mode,
        "first_call_s": total,
        "second_call_s": second,
        "graphs": len(graphs),
        "kernels": sum(g.kernel_count for g in graphs),
        "precompiled": len(precompiled),
        "distinct": len(kernels),
        "passes": passes,
        "manifest": list(kernels.values()),
    }


def _compile_one(item: dict) -> float:
    import importlib.util

    import torch

    start = time.perf_counter()
    spec = importlib.util.spec_from_file_location(f"phases_{Path(item['path']).stem}", item["path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, item["function"])
    mock = [getattr(torch, dtype) for dtype in item["mock"]]
    fn.warmup(*mock, grid=(1,), **item["constexprs"], num_warps=item["num_warps"])
    return time.perf_counter() - start


def _warm(_: int) -> int:
    import torch
    import triton  # noqa: F401

    torch.cuda.init()
    return os.getpid()


def trial(kind: str, size: int, manifest_path: str) -> None:
    """Compile every kernel of the manifest in a pool; prints JSON seconds."""
    _fresh_caches()
    import torch
    import triton  # noqa: F401

    torch.cuda.init()
    manifest = json.loads(Path(manifest_path).read_text())
    if kind == "threads":
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(size)
        startup = 0.0
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        start = time.perf_counter()
        pool = ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("spawn"))
        list(pool.map(_warm, range(size)))
        startup = time.perf_counter() - start
    start = time.perf_counter()
    each = list(pool.map(_compile_one, manifest))
    wall = time.perf_counter() - start
    reload = 0.0
    if kind == "processes":  # the parent then loads each binary from the shared cache
        start = time.perf_counter()
        for item in manifest:
            _compile_one(item)
        reload = time.perf_counter() - start
    pool.shutdown()
    print(json.dumps({"startup": startup, "wall": wall, "sum": sum(each), "reload": reload}))


def main(argv: list[str]) -> None:
    if argv[0] == "--trial":
        trial(argv[1], int(argv[2]), argv[3])
        return
    if argv[0] == "--measure":
        print("RESULT " + json.dumps(measure(argv[1], argv[2])), flush=True)
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("names")
    parser.add_argument("mode")
    parser.add_argument("--workers", default="1,4,8,16")
    parser.add_argument("--processes", default="8,16")
    args = parser.parse_args(argv)
    out = Path(os.environ.get("OUT", tempfile.mkdtemp()))
    results = []
    for name in args.names.split(","):
        text = subprocess.run(
            [sys.executable, str(HERE), "--measure", name, args.mode],
            capture_output=True,
            text=True,
        )
        line = next((x for x in text.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(f"== {name} {args.mode}: failed\n{text.stderr[-3000:]}")
            continue
        result = json.loads(line[len("RESULT ") :])
        manifest = out / f"manifest_{name}_{args.mode}.json"
        manifest.write_text(json.dumps(result["manifest"]))
        result["trials"] = {}
        for kind, sizes in (("threads", args.workers), ("processes", args.processes)):
            for size in [int(s) for s in sizes.split(",") if s]:
                run = subprocess.run(
                    [sys.executable, str(HERE), "--trial", kind, str(size), str(manifest)],
                    capture_output=True,
                    text=True,
                )
                try:
                    result["trials"][f"{kind} {size}"] = json.loads(run.stdout.splitlines()[-1])
                except (IndexError, json.JSONDecodeError):
                    result["trials"][f"{kind} {size}"] = {"error": run.stderr[-1000:]}
        results.append(result)
        print(
            f"== {name} {args.mode}: first call {result['first_call_s']:.1f} s, second "
            f"{result['second_call_s'] * 1000:.0f} ms; {result['graphs']} graphs, "
            f"{result['kernels']} kernels, {result['precompiled']} precompiled, "
            f"{result['distinct']} distinct"
        )
        for phase, value in result["passes"].items():
            print(f"   {phase:32s} {value:7.2f} s")
        for trial_name, value in result["trials"].items():
            print(f"   compile {trial_name:12s} {json.dumps(value)[:200]}")
        (out / "compile_phases.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
