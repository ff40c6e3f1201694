"""Host time of one decode step of HF `generate()`: ember.compile against torch.compile.

    python benchmarks/decode_host_bench.py                         gpt2 and llama, CPU
    python benchmarks/decode_host_bench.py --models llama --rounds 20
    python benchmarks/decode_host_bench.py --profile               also cProfile of ember's step
    python benchmarks/decode_host_bench.py --device cuda           on the GPU (synchronized)

Models: transformers' GPT-2 and Llama built from configs with random weights, sizes so
small (2 layers, width 64, vocabulary 256, batch 1) that the kernels cost next to
nothing and a decode step's time is the host's: the compiled callable's guard checks,
binding and flattening the arguments (the DynamicCache among them), the entry code,
the generated wrapper's allocations and kernel calls, and packing the outputs (a
ModelOutput and the cache). `model.forward` is compiled (`model.forward =
compile(model.forward)`, as serving code does) and greedy `generate()` runs a 16-token
prompt and 32 new tokens with the default DynamicCache; each forward call after the
first of a generate() call (a decode step) is timed alone. Variants: eager,
`ember.compile` and `torch.compile` (both with their inductor backends), taking turns,
one generate() call each per round, so that load from other processes falls on all
alike. Printed: microseconds per decode step, the minimum over rounds of each round's
median step (`min`) and the median of those (`med`), wall time (`--clock cpu`: the
thread's CPU time, which waiting for a core does not inflate; CPU only).

For ember the step is also split by timers around the guard checks of the entries tried
(`guard`), the generated wrappers (`wrapper`) and the kernels and extern calls within
them (`kernels`); `host` is the step less its kernels. `--profile` prints cProfile's
top functions by own time over ember's decode steps (cProfile slows Python code far
more than C code: read the shares, not the sum).

On the GPU (`--device cuda`) every timed step ends with a synchronize, so the kernels'
time is in the step (at these sizes a few microseconds each); `kernels` then counts the
extern ATen calls' host time, and Triton launches stay in `wrapper own`.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import inspect
import io
import pstats
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
for package in ("guards", "dynamo_capture", "prim_decomp", "aot_autograd", "inductor_codegen"):
    sys.path.insert(0, str(ROOT / package / "src"))
sys.path.insert(0, str(ROOT / "packages" / "ember" / "src"))

import transformers  # noqa: E402

import ember  # noqa: E402
from ember.api import compiled_callable_of  # noqa: E402

PROMPT = 16
NEW_TOKENS = 32


def build(kind: str, device: str, size: str) -> torch.nn.Module:
    torch.manual_seed(0)
    width = 64 if size == "tiny" else 768
    if kind == "gpt2":
        config = transformers.GPT2Config(
            n_layer=2, n_head=4, n_embd=width, vocab_size=256, n_positions=128
        )
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
            max_position_embeddings=128,
        )  # fmt: skip
        model = transformers.LlamaForCausalLM(config)
    return model.to(device).eval()


class StepTimer:
    """Wraps `model.forward`: times each call after the first of a generate() call."""

    def __init__(self, model: torch.nn.Module, clock: Callable[[], int], sync: Callable) -> None:
        self.forward = model.forward
        self.clock = clock
        self.sync = sync
        self.steps: list[int] = []
        self.calls = 0
        forward = self.forward

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                return forward(*args, **kwargs)
            start = clock()
            result = forward(*args, **kwargs)
            sync()
            self.steps.append(clock() - start)
            return result

        # NOTE: generate() picks the inputs it passes by the signature of `model.forward`.
        timed.__signature__ = inspect.signature(forward)  # type: ignore[attr-defined]
        model.forward = timed


def generate(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(
            ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
            pad_token_id=0, disable_compile=True,
        )  # fmt: skip


class Split:
    """ember's step split by timers around guard checks, wrappers and kernels."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.now = dict.fromkeys(("guard", "wrapper", "kernels"), 0)
        self.steps: list[dict[str, int]] = []

    def timed(self, key: str, fn: Callable) -> Callable:
        now, clock = self.now, self.clock

        def call(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                now[key] += clock() - start

        return call

    def instrument(self, forward: Any) -> None:
        runner = compiled_callable_of(forward)
        for entry in runner.entries:
            entry.check = self.timed("guard", entry.check)
        for graph in gc.get_objects():
            if type(graph).__name__ != "CompiledGraph" or not hasattr(graph, "_call"):
                continue
            wrapper = graph._call
            graph._call = self.timed("wrapper", wrapper)
            names = getattr(wrapper, "__globals__", {})
            for name in list(names):
                if name.startswith(("cpp_", "aten_", "torch_")) and callable(names[name]):
                    names[name] = self.timed("kernels", names[name])


def prepare(kind: str, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    model = build(kind, args.device, args.size)
    if variant == "ember":
        model.forward = ember.compile(model.forward)
    elif variant == "torch.compile":
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward)
    torch.manual_seed(1)
    ids = torch.randint(1, 256, (1, PROMPT), device=args.device)
    start = time.perf_counter()
    first = generate(model, ids)
    first_s = time.perf_counter() - start
    generate(model, ids)  # the symbolic decode entry is compiled by now
    compiled_forward = model.forward
    return {"model": model, "ids": ids, "first": first, "first_s": first_s,
            "forward": compiled_forward, "rounds": []}  # fmt: skip


def run_model(kind: str, args: argparse.Namespace, clock: Callable[[], int]) -> None:
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    runs = {variant: prepare(kind, variant, args) for variant in args.variants}
    timers = {variant: StepTimer(run["model"], clock, sync) for variant, run in runs.items()}
    for _ in range(args.rounds):
        for variant, run in runs.items():
            timer = timers[variant]
            timer.calls, timer.steps = 0, []
            run["out"] = generate(run["model"], run["ids"])
            run["rounds"].append(statistics.median(timer.steps) / 1e3)
    reference = runs["eager"]["out"] if "eager" in runs else None
    for variant, run in runs.items():
        same = reference is None or torch.equal(run["out"], reference)
        entries = len(compiled_callable_of(run["forward"]).entries) if variant == "ember" else "-"
        print(
            f"| {kind} | {variant} | {min(run['rounds']):.1f} | "
            f"{statistics.median(run['rounds']):.1f} | {run['first_s']:.2f} | {entries} | "
            f"{same} |",
            flush=True,
        )
    if "ember" in runs:
        split_and_profile(kind, runs["ember"], args, clock, sync)


def split_and_profile(
    kind: str, run: dict[str, Any], args: argparse.Namespace, clock: Callable, sync: Callable
) -> None:
    model, forward = run["model"], run["forward"]
    if args.profile:  # before the split's timers go in
        model.forward = forward
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(10):
            generate(model, run["ids"])
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.profile_top)
        print(out.getvalue())
    split = Split(clock)
    split.instrument(forward)
    rows: list[dict[str, int]] = []
    calls = [0]

    def timed(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        for key in split.now:
            split.now[key] = 0
        start = clock()
        out = forward(*a, **k)
        sync()
        if calls[0] > 1:  # a decode step
            rows.append({**split.now, "total": clock() - start})
        return out

    timed.__signature__ = inspect.signature(forward)  # type: ignore[attr-defined]
    model.forward = timed
    for _ in range(max(args.rounds // 2, 3)):
        calls[0] = 0
        generate(model, run["ids"])
    cols = {
        "total": [r["total"] for r in rows],
        "guard": [r["guard"] for r in rows],
        "wrapper own": [r["wrapper"] - r["kernels"] for r in rows],
        "kernels": [r["kernels"] for r in rows],
        "host (total - kernels)": [r["total"] - r["kernels"] for r in rows],
    }
    cells = ", ".join(
        f"{k} {min(v) / 1e3:.1f} / {statistics.median(v) / 1e3:.1f}" for k, v in cols.items()
    )
    print(f"  {kind} ember split, us min / median over {len(rows)} steps: {cells}", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "llama"])
    parser.add_argument("--variants", nargs="+", default=["eager", "ember", "torch.compile"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", default="tiny", choices=("tiny", "small"))
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--clock", default="wall", choices=("wall", "cpu"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-top", type=int, default=30)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    clock = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}[args.clock]
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, {args.device}, "
        f"{args.threads} thread(s), {args.size} models, {args.clock} us per decode step "
        f"(min / median over {args.rounds} rounds of each round's median step)\n"
    )
    print("| model | variant | step min | step med | first call s | entries | tokens = eager |")
    print("|---|---|---:|---:|---:|---:|---|")
    for kind in args.models:
        run_model(kind, args, clock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
