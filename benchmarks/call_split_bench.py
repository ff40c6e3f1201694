"""Where the host time of one compiled call goes: guard checks, wrapper, kernels, the rest.

    python benchmarks/call_split_bench.py                     llama and gpt2-decode
    python benchmarks/call_split_bench.py llama               one case
    EMBER_BENCH_LAYERS=2 EMBER_BENCH_THREADS=1 python benchmarks/call_split_bench.py
    EMBER_BENCH_CLOCK=cpu python benchmarks/call_split_bench.py   thread CPU time

Cases (transformers models of benchmarks/models.py's sizes, random weights, eval,
under no_grad):

- `llama`: one inference call of benchmarks/models.py's Llama (hidden 128, 2 x 64
  tokens) with `EMBER_BENCH_LAYERS` decoder layers (default 4), the model compiled
  with `ember.compile(model)`;
- `gpt2-decode`: the decode steps of greedy `generate()` (batch 1, a 16-token prompt,
  32 new tokens, transformers' DynamicCache) of a GPT-2 of 2 layers and width 128,
  `model.forward = ember.compile(model.forward)` as serving code does; the timed calls
  are the steps after the first of each generate() call.

Each ember call is split by timers (perf_counter_ns, about 0.1 us each) around: the
guard checks of every cache entry the call tried (`guard`), the generated wrapper of
each compiled graph (`wrapper`: its allocations, views, pointer reads and calls), and
within it the C++ kernels and extern ATen calls (`kernels`); `rest` is the call less
those (argument binding, the entry code, aot_autograd's runtime, building the
outputs: a transformers ModelOutput). `wrapper own` is `wrapper` less `kernels` (it
includes the kernel timers themselves, about 0.2 us a kernel). Numbers are
microseconds per call: the minimum over `EMBER_BENCH_CALLS` timed calls and their
median. `eager` and `total` are whole calls of the same model timed without the
split's timers, in interleaved rounds (minimum of the per-round means).
"""

from __future__ import annotations

import gc
import inspect
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead_bench  # noqa: E402, F401  (puts every package's src folder on sys.path)

import ember  # noqa: E402
from ember.api import compiled_callable_of  # noqa: E402

LAYERS = int(os.environ.get("EMBER_BENCH_LAYERS", "4"))
THREADS = int(os.environ.get("EMBER_BENCH_THREADS", "2"))
CALLS = int(os.environ.get("EMBER_BENCH_CALLS", "300"))
# "wall" time, or "cpu": the thread's CPU time, which waiting for a core on a loaded machine
# does not inflate (a timer then costs about 0.3 us more; kernels' other threads not counted)
CLOCK = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}[
    os.environ.get("EMBER_BENCH_CLOCK", "wall")
]


class Split:
    """Per-call sums of the timed layers, appended by `end_call`."""

    def __init__(self) -> None:
        self.now = dict.fromkeys(("guard", "wrapper", "kernels"), 0)
        self.calls: list[dict[str, int]] = []

    def timed(self, key: str, fn: Callable) -> Callable:
        now = self.now

        def call(*args, **kwargs):
            start = CLOCK()
            try:
                return fn(*args, **kwargs)
            finally:
                now[key] += CLOCK() - start

        return call

    def end_call(self, total: int) -> None:
        self.calls.append({**self.now, "total": total})
        for key in self.now:
            self.now[key] = 0

    def row(self) -> dict[str, tuple[float, float]]:
        parts = {
            "total": [c["total"] for c in self.calls],
            "guard": [c["guard"] for c in self.calls],
            "wrapper own": [c["wrapper"] - c["kernels"] for c in self.calls],
            "kernels": [c["kernels"] for c in self.calls],
            "rest": [c["total"] - c["guard"] - c["wrapper"] for c in self.calls],
        }
        return {k: (min(v) / 1e3, statistics.median(v) / 1e3) for k, v in parts.items()}


def instrument(runner, split: Split) -> None:
    """Timers around each entry's guard check and each compiled graph's wrapper and kernels."""
    for entry in runner.entries:
        entry.check = split.timed("guard", entry.check)
    graphs = [
        graph
        for graph in gc.get_objects()
        if type(graph).__name__ == "CompiledGraph" and hasattr(graph, "_call")
    ]
    for graph in graphs:
        wrapper = graph._call
        graph._call = split.timed("wrapper", wrapper)
        names = getattr(wrapper, "__globals__", {})
        for name in list(names):
            if name.startswith(("cpp_", "aten_", "torch_")) and callable(names[name]):
                names[name] = split.timed("kernels", names[name])


# -- cases -------------------------------------------------------------------------------------


def llama_case() -> tuple[Callable[[], Callable[[], None]], ...]:
    from models import MODELS

    base = MODELS["llama"]()
    config = base.model.config
    config.num_hidden_layers = LAYERS
    torch.manual_seed(0)
    model = type(base.model)(config).eval()
    (tokens,) = base.inputs

    def eager() -> Callable[[], None]:
        return lambda: model(tokens)

    def compiled(split: Split | None = None) -> Callable[[], None]:
        fn = ember.compile(model)
        fn(tokens)
        fn(tokens)
        if split is None:
            return lambda: fn(tokens)
        instrument(compiled_callable_of(fn), split)

        def step() -> None:
            start = CLOCK()
            fn(tokens)
            split.end_call(CLOCK() - start)

        return step

    return eager, compiled


def gpt2_decode_case() -> tuple[Callable[[], Callable[[], None]], ...]:
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=256
    )
    ids = torch.randint(1, 1000, (1, 16), generator=torch.Generator().manual_seed(1))

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(config).eval()

    def generate(model: torch.nn.Module) -> None:
        model.generate(
            ids, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0,
            disable_compile=True,
        )  # fmt: skip

    def eager() -> Callable[[], None]:
        model = build()
        return lambda: generate(model)

    def compiled(split: Split | None = None) -> Callable[[], None]:
        model = build()
        forward = ember.compile(model.forward)
        model.forward = forward
        generate(model)
        generate(model)
        if split is None:
            return lambda: generate(model)
        instrument(compiled_callable_of(forward), split)
        steps = [0]

        def timed_forward(*args, **kwargs):
            start = CLOCK()
            result = forward(*args, **kwargs)
            steps[0] += 1
            if steps[0] > 1:  # a decode step
                split.end_call(CLOCK() - start)
            else:
                split.now.update(dict.fromkeys(split.now, 0))
            return result

        # NOTE: generate() picks the inputs it passes by the signature of `model.forward`.
        timed_forward.__signature__ = inspect.signature(forward)  # type: ignore[attr-defined]
        model.forward = timed_forward

        def run() -> None:
            steps[0] = 0
            generate(model)

        return run

    return eager, compiled


CASES = {"llama": (llama_case, 1), "gpt2-decode": (gpt2_decode_case, 31)}


def interleaved(steps: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Minimum over rounds of each step's time, the steps taking turns."""
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(rounds):
        for label, step in steps.items():
            start = CLOCK()
            step()
            best[label] = min(best[label], (CLOCK() - start) / 1e3)
    return best


def run_case(name: str) -> dict:
    make, per_step = CASES[name]
    eager, compiled = make()
    split = Split()
    with torch.no_grad():
        whole = interleaved({"eager": eager(), "ember": compiled()}, max(CALLS // per_step, 20))
        timed = compiled(split)
        while len(split.calls) < CALLS:
            timed()
    row = {"case": name, "eager": whole["eager"] / per_step, "ember": whole["ember"] / per_step}
    row.update(split.row())
    return row


def main(argv: list[str]) -> int:
    torch.set_num_threads(THREADS)
    names = [a for a in argv if a in CASES] or list(CASES)
    keys = ("total", "guard", "wrapper own", "kernels", "rest")
    print(
        f"torch {torch.__version__}, {THREADS} thread(s), llama of {LAYERS} layers; "
        f"{os.environ.get('EMBER_BENCH_CLOCK', 'wall')} us per call "
        f"(eager, ember: min of interleaved rounds; split: min / median of {CALLS} calls)\n"
    )
    print("| case | eager | ember | " + " | ".join(keys) + " |")
    print("|---|---:|---:|" + "---:|" * len(keys))
    for name in names:
        r = run_case(name)
        cells = " | ".join(f"{r[k][0]:.1f} / {r[k][1]:.1f}" for k in keys)
        print(f"| {name} | {r['eager']:.1f} | {r['ember']:.1f} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
