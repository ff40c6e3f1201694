"""Where the host time of a compiled call goes, and what one Triton launch costs.

    python tools/device/host_probe.py launch
    python tools/device/host_probe.py mobilenet_v3_large,t5_small infer [--top 30]
    python tools/device/host_probe.py compile bert_base train 60

`launch`: microseconds per launch of a one-kernel graph through ember's
launcher, through Triton's JIT entry, through the compiled binary's `run`
directly, and eager's `torch.add`, each over 2000 launches.

Model names: the wall time per call, then cProfile's top functions by own time
over 10 calls (cProfile's own cost inflates Python time about 2x; read the
shares, not the totals).

`sections NAMES infer|train`: for eager, ember and torch.compile, milliseconds per
call back to back, the host time of issuing one call from an idle GPU (median of
20; for ember also the part inside the generated wrapper), and every operation
in one call that makes the host wait for the GPU (CUDA's sync debug mode).
"""

from __future__ import annotations

import collections
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch
from common import gpu_bench, prepared, wall_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "inductor_codegen" / "tests"))


def _profiled(run, sort: str, top: int) -> str:
    """cProfile's top `top` functions by `sort` while `run()` runs (then a device sync)."""
    profiler = cProfile.Profile()
    profiler.enable()
    run()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats(sort).print_stats(top)
    return "\n".join(text.getvalue().splitlines()[: top + 12])


def launch() -> None:
    from graph_helpers import trace

    from inductor_codegen import compile_graph
    from inductor_codegen.codegen.triton.runtime import TritonKernel

    x = torch.randn(1024, device="cuda")
    out = torch.empty_like(x)

    def fn(a):
        return a + 1

    compiled = compile_graph(trace(fn, x), [x], options={"device_codegen": "triton"})
    compiled(x)
    (kernel,) = [v for v in compiled._call.__globals__.values() if isinstance(v, TritonKernel)]
    kernel(x, out)
    launcher = kernel.static_launcher
    (runner,) = launcher.runners.values()
    args = (x, out)
    rows = {
        "eager torch.add(x, 1, out=)": lambda: torch.add(x, 1, out=out),
        "ember compiled graph (alloc + launch)": lambda: compiled(x),
        "ember TritonKernel(x, out)": lambda: kernel(x, out),
        "ember Launcher(args)": lambda: launcher(args),
        "triton runner[grid](x, out)": lambda: runner(x, out, *launcher.constexpr_values),
        "triton JIT fn[grid](...)": lambda: kernel.fn[launcher.grid](
            x, out, **launcher.constexprs, **launcher.options
        ),
    }
    compiled_kernel = None
    try:
        device = torch.cuda.current_device()
        cache = kernel.fn.device_caches[device][0]
        compiled_kernel = next(iter(cache.values()))
    except Exception as error:  # the cache layout differs between Triton versions
        print("no compiled kernel handle:", error)
    if compiled_kernel is not None:
        stream = torch.cuda.current_stream().cuda_stream
        run = compiled_kernel.run
        function = compiled_kernel.function
        packed = compiled_kernel.packed_metadata
        grid = launcher.grid
        values = launcher.constexpr_values
        rows["CompiledKernel.run direct"] = lambda: run(
            grid[0], grid[1], grid[2], stream, function, packed, None, None, None, x, out, *values
        )
        import inspect

        print(inspect.signature(type(compiled_kernel).__getitem__))
    for name, fn in rows.items():
        try:
            print(f"{name:42s} {wall_ms(fn, 2000) * 1000:7.2f} us")
        except Exception as error:
            print(f"{name:42s} failed: {type(error).__name__}: {error}")


def models(names: list[str], mode: str, top: int) -> None:
    for name in names:
        model, inputs = prepared(name, mode)
        for backend in ("eager", "ember"):
            target = model if backend == "eager" else gpu_bench.compiled_model(backend, model)
            step = gpu_bench.make_step(target, inputs, mode)
            step()
            print(f"== {name} {mode} {backend}: wall {wall_ms(step):.2f} ms per call")
            if backend == "ember":
                print(_profiled(lambda s=step: [s() for _ in range(10)], "tottime", top))


def _host_ms(step, repeats: int = 20) -> float:
    """Median host milliseconds to issue one call, each started with the GPU idle."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return sorted(times)[len(times) // 2] * 1000


def _syncs(step) -> list[str]:
    """The operations in one call of `step` that wait for the GPU, with where they run."""
    import warnings

    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    found = collections.Counter(
        f"{Path(w.filename).name}:{w.lineno}: {str(w.message).splitlines()[0][:90]}" for w in caught
    )
    return [f"{count:4d} x {text}" for text, count in found.most_common()]


def sections(names: list[str], mode: str) -> None:
    from inductor_codegen.pipeline import CompiledGraph

    inside = []
    original = CompiledGraph.call_boxed

    def timed(self, args):
        start = time.perf_counter()
        try:
            return original(self, args)
        finally:
            inside.append(time.perf_counter() - start)

    # Patched before anything compiles: aot_autograd binds `call_boxed` at compile time.
    CompiledGraph.call_boxed = timed
    try:
        for name in names:
            model, inputs = prepared(name, mode)
            for backend in ("eager", "ember", "torch"):
                target = model if backend == "eager" else gpu_bench.compiled_model(backend, model)
                step = gpu_bench.make_step(target, inputs, mode)
                for _ in range(3):
                    step()
                wall = wall_ms(step)
                inside.clear()
                host = _host_ms(step)
                wrapper = sum(inside) * 1000 / 20
                extra = f", in wrappers {wrapper:.2f} ms" if backend == "ember" else ""
                print(
                    f"== {name} {mode} {backend}: {wall:.2f} ms per call, host {host:.2f} ms{extra}"
                )
                for line in _syncs(step):
                    print("   sync", line)
    finally:
        CompiledGraph.call_boxed = original


def compile_profile(names: list[str], mode: str, top: int) -> None:
    """cProfile of the first (compiling) call: the top functions by cumulative time."""
    for name in names:
        model, inputs = prepared(name, mode)
        step = gpu_bench.make_step(gpu_bench.compiled_model("ember", model), inputs, mode)
        start = time.perf_counter()
        text = _profiled(step, "cumulative", top)
        print(f"== compile {name} {mode}: {time.perf_counter() - start:.1f} s under cProfile")
        print(text)


if __name__ == "__main__":
    if sys.argv[1] == "compile":
        compile_profile(sys.argv[2].split(","), sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "launch":
        launch()
    elif sys.argv[1] == "sections":
        sections(sys.argv[2].split(","), sys.argv[3])
    else:
        top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 30
        models(sys.argv[1].split(","), sys.argv[2] if len(sys.argv) > 2 else "infer", top)
