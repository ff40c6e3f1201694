"""CPU seconds of a cold first call, split by compile stage (capture, guards, AOT, codegen).

    python benchmarks/compile_stages_bench.py                       every case, tiny sizes
    python benchmarks/compile_stages_bench.py --cases gpt2 llama --size full --repeat 3
    python benchmarks/compile_stages_bench.py --codegen triton      Triton (TRITON_INTERPRET=1)
    python benchmarks/compile_stages_bench.py --cases gpt2 llama --steps --codegen triton \
        --regional off --size full          the GPU's split (whole graphs), on the CPU
    python benchmarks/compile_stages_bench.py --cases gpt2 llama --steps --size full
                                            on a GPU machine: the models on CUDA (bf16)

Cases: `gpt2`, `llama` (HF `generate()` with `model.forward` compiled, as in
serving_bench.py: a prefill, the first decode step and the symbolic decode steps, 3
entries), `gpt2-train` (a GPT-2 training step, forward and backward) and `cnn` (a
ResNet-like CNN training step). Each run is a process of its own with an empty ember
cache and `EMBER_WARM_START=0`, one thread, after one eager call (HF's and torch's own
first-call costs left out). The stage functions are wrapped to count the thread's CPU
seconds (`time.thread_time`) spent in each, exclusive of the stages nested in it:

    capture    dynamo_capture.capture.capture_frame (bytecode to FX, fakes)
    guards     guards.guard_codegen.generate_guard_function
    AOT trace  aot_autograd.program.trace_program (functionalize, decompose, joint graph)
    partition  the min-cut / default partitioner
    lower      GraphLowering.run          schedule   scheduler.schedule
    codegen    kernels, wrapper and the driver around them
    build      C++ compile (its compiler processes not counted) / Triton kernel load

"first call" is the process's CPU seconds for the whole first call (running included;
the Triton interpreter runs kernels slowly; every thread's, so on CUDA the Triton
compiles in the background too), "wall" its wall seconds (on the CPU: with the C++
compiler's runs, which the CPU seconds leave out; on CUDA: with the Triton compiles),
"compiler wait" the wall seconds the calling thread spent in the C++ compiler's
builds or waiting for Triton compiles (the machine's compile cost the CPU columns
leave out), "GC" the collector's share of it. Printed: the fastest of `--repeat` runs for each
column. `--steps` prints each forward call of the first generate() that compiled
(a prefill, a first decode step, the symbolic decode steps) with its stages, from
the fastest run; `--options deferred_recompiles=False` (any `ember.compile` options, as
name=Python literal) compares an option's two sides in one tree; `--regional` sets
the `regional` option (`off`: whole graphs, as on the GPU).
"""

from __future__ import annotations

import argparse
import ast
import functools
import gc
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("guards", "dynamo_capture", "prim_decomp", "aot_autograd", "inductor_codegen")
CASES = ("gpt2", "llama", "gpt2-train", "cnn")
# (stage, module, function or class, method)
STAGES = (
    ("capture", "dynamo_capture.capture", "capture_frame", None),
    ("guards", "guards.guard_codegen", "generate_guard_function", None),
    ("AOT trace", "aot_autograd.program", "trace_program", None),
    ("partition", "aot_autograd.partitioners", "min_cut_rematerialization_partition", None),
    ("partition", "aot_autograd.partitioners", "default_partition", None),
    ("codegen", "inductor_codegen.compile", "_compile_graph", None),
    ("codegen", "inductor_codegen.codegen.triton.compile", "_compile_triton_graph", None),
    ("lower", "inductor_codegen.lowering", "GraphLowering", "run"),
    ("schedule", "inductor_codegen.scheduler", "schedule", None),
    ("codegen", "inductor_codegen.codegen.cpp.generate", "generate_kernel", None),
    ("codegen", "inductor_codegen.codegen.triton.kernel", "generate_triton_kernel", None),
    ("codegen", "inductor_codegen.codegen.wrapper", "generate_wrapper", None),
    ("codegen", "inductor_codegen.codegen.triton.wrapper", "generate_triton_wrapper", None),
    ("build", "inductor_codegen.codegen.cpp.build", "KernelLibrary", "build"),
    ("build", "inductor_codegen.codegen.triton.compile", "_launchers", None),
)
# Wall seconds the calling thread waits for compilers: the C++ compiler's runs (with the
# build's own work), the Triton compiles started in the background (CUDA) or at launch
WAITS = (
    ("inductor_codegen.codegen.cpp.build", "KernelLibrary", "build"),
    ("inductor_codegen.codegen.triton.runtime", "TritonKernel", "_wait_for_precompile"),
    ("inductor_codegen.codegen.triton.runtime", "_resolved", None),
)
COLUMNS = ("capture", "guards", "AOT trace", "partition", "lower", "schedule", "codegen", "build")


class StageClock:
    """Exclusive thread CPU seconds per stage: a nested stage's time is not its caller's."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._open: list[list] = []  # [stage, since]
        self.steps: list[dict] = []  # the forward calls that compiled (generate() cases)
        self.calls = 0
        self.equal: bool | None = None  # generate()'s tokens equal eager's

    def wrap(self, stage: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            now = time.thread_time()
            if self._open:
                self._add(*self._open[-1], now)
            self._open.append([stage, now])
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.thread_time()
                self._add(*self._open.pop(), end)
                if self._open:
                    self._open[-1][1] = end

        return timed

    def install_waits(self) -> None:
        """Wrap the functions of WAITS to count the main thread's wall seconds in them."""
        main = threading.main_thread()

        def waited(fn):
            @functools.wraps(fn)
            def timed(*args, **kwargs):
                if threading.current_thread() is not main:
                    return fn(*args, **kwargs)
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._add("compiler wait", start, time.perf_counter())

            return timed

        for module_name, name, method in WAITS:
            owner = getattr(importlib.import_module(module_name), name)
            if method is not None:
                setattr(owner, method, waited(getattr(owner, method)))
                continue
            for module in list(sys.modules.values()):
                names = getattr(module, "__dict__", None) or {}
                for key, value in list(names.items()):
                    if value is owner:
                        setattr(module, key, waited(owner))

    def _add(self, stage: str, since: float, now: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - since

    def install(self) -> None:
        """Wrap every stage function, where it is defined and where it was imported."""
        for stage, module_name, name, method in STAGES:
            owner = getattr(importlib.import_module(module_name), name)
            if method is not None:
                setattr(owner, method, self.wrap(stage, getattr(owner, method)))
                continue
            timed = self.wrap(stage, owner)
            for module in list(sys.modules.values()):
                names = getattr(module, "__dict__", None) or {}
                for key, value in list(names.items()):
                    if value is owner:
                        setattr(module, key, timed)


def _case(name: str, size: str, tokens: int, options: dict, clock: StageClock):
    """(the compiled callable's first call, as a thunk) for one case, its eager call made;
    the generate() cases note each forward call's stages in `clock.steps`."""
    import torch
    import transformers

    import ember

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    full = size == "full"
    if name in ("gpt2", "llama"):
        os.environ["EMBER_SERVING_SIZE"] = size
        os.environ["EMBER_SERVING_NEW_TOKENS"] = str(tokens)
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import serving_bench

        model = serving_bench.build(name)
        shape = (1, serving_bench.PROMPT)
        ids = torch.randint(1, model.config.vocab_size, shape, device=serving_bench.DEVICE)
        expected = serving_bench.generate(model, ids)
        model.forward = _stepped(ember.compile(model.forward, options=options), clock)

        def first_call():
            tokens = serving_bench.generate(model, ids)
            clock.equal = bool(torch.equal(tokens, expected))

        return first_call
    if name == "gpt2-train":
        config = (
            transformers.GPT2Config()
            if full
            else transformers.GPT2Config(
                n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=256
            )
        )
        model = transformers.GPT2LMHeadModel(config)
        ids = torch.randint(0, config.vocab_size, (2, 128 if full else 64))

        def step(m):
            m(ids, labels=ids).loss.backward()

    else:  # cnn
        nn = torch.nn
        width, blocks = (64, 8) if full else (16, 2)

        class Residual(nn.Module):
            def __init__(self, c: int) -> None:
                super().__init__()
                self.body = nn.Sequential(
                    nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                    nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                )  # fmt: skip

            def forward(self, x):
                return torch.relu(self.body(x) + x)

        model = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            *[Residual(width) for _ in range(blocks)],
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10),
        )  # fmt: skip
        x = torch.randn(4, 3, 32, 32)

        def step(m):
            m(x).sum().backward()

    step(model)
    compiled = ember.compile(model, options=options)
    return lambda: step(compiled)


def _stepped(forward, clock: StageClock):
    """`forward`, each call's CPU seconds and stages noted in `clock.steps` (calls over
    10 ms: the ones that compiled or ran a graph as captured)."""

    @functools.wraps(forward)
    def call(*args, **kwargs):
        before = dict(clock.seconds)
        start, wall = time.process_time(), time.perf_counter()
        result = forward(*args, **kwargs)
        seconds, wall = time.process_time() - start, time.perf_counter() - wall
        if seconds > 0.01:
            stages = {k: round(v - before.get(k, 0.0), 3) for k, v in clock.seconds.items()}
            stages = {k: v for k, v in stages.items() if v >= 0.005}
            clock.steps.append(
                {"call": clock.calls, "cpu": round(seconds, 3), "wall": round(wall, 3), **stages}
            )
        clock.calls += 1
        return result

    return call


def measure(name: str, size: str, codegen: str, tokens: int, options: dict) -> dict:
    """One run in this process: {column: CPU seconds}."""
    os.environ.setdefault("EMBER_WARM_START", "0")
    os.environ["EMBER_CACHE_DIR"] = tempfile.mkdtemp(prefix="ember-stages-")
    if codegen == "triton":
        os.environ["TRITON_INTERPRET"] = "1"
    for package in PACKAGES:
        sys.path.insert(0, str(ROOT / package / "src"))
    sys.path.insert(0, str(ROOT / "packages" / "ember" / "src"))
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    for _, module_name, _, _ in STAGES:
        importlib.import_module(module_name)
    if codegen == "triton":  # every graph through the Triton generator, CPU tensors or not
        import inductor_codegen.compile

        inductor_codegen.compile.wants_triton = lambda *args: True
    clock = StageClock()
    first_call = _case(name, size, tokens, options, clock)
    clock.install()
    clock.install_waits()
    collected = [0.0, 0.0]

    def on_collection(phase: str, info: dict) -> None:
        if phase == "start":
            collected[1] = time.thread_time()
        else:
            collected[0] += time.thread_time() - collected[1]

    gc.callbacks.append(on_collection)
    start, wall = time.process_time(), time.perf_counter()
    first_call()
    waits = clock.seconds.pop("compiler wait", 0.0)
    result = {column: clock.seconds.get(column, 0.0) for column in COLUMNS}
    result["stages"] = sum(clock.seconds.values())
    result["compiler wait"] = waits
    result["first call"] = time.process_time() - start
    result["wall"] = time.perf_counter() - wall
    result["steps"] = clock.steps
    result["tokens = eager"] = clock.equal
    result["GC"] = collected[0]
    gc.callbacks.remove(on_collection)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--size", default="tiny", choices=("tiny", "full"))
    parser.add_argument("--codegen", default="cpp", choices=("cpp", "triton"))
    parser.add_argument("--tokens", type=int, default=4, help="new tokens of generate()")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--steps", action="store_true", help="each compiling call's stages")
    parser.add_argument("--regional", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--options", nargs="*", default=[], help="name=value, ember options")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    options = {}
    for item in args.options:
        name, _, value = item.partition("=")
        options[name] = ast.literal_eval(value)
    if args.regional != "auto":
        options["regional"] = args.regional == "on"
    if args.one:
        print(json.dumps(measure(args.cases[0], args.size, args.codegen, args.tokens, options)))
        return
    columns = (*COLUMNS, "stages", "first call", "wall", "compiler wait", "GC")
    print(
        f"CPU seconds, fastest of {args.repeat}; {args.size} sizes, {args.codegen} codegen, "
        f"options {options or 'default'}"
    )
    print(f"{'case':11s}" + "".join(f"{c:>14s}" for c in columns))
    for case in args.cases:
        runs = []
        for _ in range(args.repeat):
            command = [sys.executable, __file__, "--one", "--cases", case, "--size", args.size,
                       "--codegen", args.codegen, "--tokens", str(args.tokens),
                       "--regional", args.regional, "--options", *args.options]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            lines = done.stdout.strip().splitlines()
            if done.returncode != 0 or not lines:
                print(f"{case:11s} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
                break
            runs.append(json.loads(lines[-1]))
        if runs:
            best = {c: min(run[c] for run in runs) for c in columns}
            equal = {run["tokens = eager"] for run in runs} - {None}
            same = f"  tokens = eager: {' / '.join(map(str, sorted(equal)))}" if equal else ""
            print(f"{case:11s}" + "".join(f"{best[c]:14.2f}" for c in columns) + same, flush=True)
            if args.steps:
                for step in min(runs, key=lambda run: run["first call"])["steps"]:
                    print(f"{'':11s}{json.dumps(step)}")


if __name__ == "__main__":
    main()
