"""Per-call host overhead of compiled functions: tiny models whose kernels cost nothing.

    python benchmarks/overhead_bench.py                  every case
    python benchmarks/overhead_bench.py mlp block        only these models
    EMBER_BENCH_MODES=inference python benchmarks/overhead_bench.py
    EMBER_BENCH_VARIANTS=eager,ember-inductor python benchmarks/overhead_bench.py

Models: a 2-layer MLP on [2, 8], a tiny transformer block on [1, 4, 16], and chains
of Linear(4, 4) + tanh layers with 20 and 100 parameters on [2, 4]. Modes: inference
under no_grad, and training (forward, `.sum()`, backward). Variants: eager,
torch.compile (backends inductor and aot_eager) and ember.compile (inductor and
aot_eager), called in interleaved rounds (each round runs every variant
`EMBER_BENCH_CALLS` times in a row and keeps the mean) so that load from other
processes falls on all of them alike; the table gives the median over
`EMBER_BENCH_ROUNDS` rounds, in microseconds per call.

The split of ember's inductor time comes from a separately compiled instance whose
layers are timed with perf_counter_ns (the timers cost about 0.1 us each, so the
split adds up to a little more than the plain call):

- guard: the capture entry's guard check;
- capture: the rest of capture's dispatch (frame binding, the entry's code, the
  call into the backend): the module call's time less guard and aot;
- aot: aot_autograd's run time around the compiled graphs (the graph-input list,
  grad mode, the autograd.Function's forward and backward, saved tensors, outputs);
- kernels: the generated wrappers (buffer allocation, layout checks, kernel and
  ATen calls), forward and backward;
- engine: training only, autograd's engine and the loss's `.sum()`, outside the
  compiled backward.
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
for package in ("guards", "dynamo_capture", "prim_decomp", "aot_autograd", "inductor_codegen"):
    sys.path.insert(0, str(ROOT / package / "src"))
sys.path.insert(0, str(ROOT / "packages" / "ember" / "src"))

import ember  # noqa: E402
from aot_autograd import aot_graph  # noqa: E402
from inductor_codegen import compile_graph  # noqa: E402
from prim_decomp import inductor_default  # noqa: E402

ROUNDS = int(os.environ.get("EMBER_BENCH_ROUNDS", "60"))
CALLS = int(os.environ.get("EMBER_BENCH_CALLS", "20"))
VARIANTS = ("eager", "torch-inductor", "torch-aot_eager", "ember-inductor", "ember-aot_eager")


# -- models ------------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: 2-head self-attention and a GELU MLP, width 16."""

    def __init__(self, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) * (width // self.heads) ** -0.5
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, width)
        x = x + self.proj(attended)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class Chain(nn.Module):
    """Linear(4, 4) + tanh layers: `parameters` weights and biases, one graph input each."""

    def __init__(self, parameters: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(parameters // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


CASES: dict[str, Callable[[], tuple[nn.Module, torch.Tensor]]] = {
    "mlp": lambda: (MLP(), torch.randn(2, 8)),
    "block": lambda: (Block(), torch.randn(1, 4, 16)),
    "params20": lambda: (Chain(20), torch.randn(2, 4)),
    "params100": lambda: (Chain(100), torch.randn(2, 4)),
}


def make_variant(name: str, model: nn.Module) -> Callable:
    if name == "eager":
        return model
    library, backend = name.split("-")
    if library == "torch":
        return torch.compile(model, backend=backend)
    return ember.compile(model, backend=backend)


def step_fn(model: Callable, x: torch.Tensor, training: bool) -> Callable[[], None]:
    if training:

        def train() -> None:
            model(x).sum().backward()

        return train

    def infer() -> None:
        with torch.no_grad():
            model(x)

    return infer


def interleaved(steps: dict[str, Callable[[], None]]) -> dict[str, float]:
    """Median over rounds of each step's mean microseconds per call, variants interleaved."""
    for step in steps.values():
        for _ in range(CALLS):
            step()
    times: dict[str, list[float]] = {label: [] for label in steps}
    clock = time.perf_counter_ns
    for _ in range(ROUNDS):
        for label, step in steps.items():
            start = clock()
            for _ in range(CALLS):
                step()
            times[label].append((clock() - start) / CALLS / 1000)
    return {label: statistics.median(values) for label, values in times.items()}


# -- ember's split -----------------------------------------------------------------------------


class Timers:
    def __init__(self) -> None:
        self.ns: dict[str, int] = {}
        self.reset()

    def reset(self) -> None:
        self.ns = dict.fromkeys(("guard", "aot", "kernels", "backward", "fwd", "bwd"), 0)

    def timed(self, key: str, fn: Callable) -> Callable:
        clock = time.perf_counter_ns
        ns = self

        def call(*args):
            start = clock()
            try:
                return fn(*args)
            finally:
                ns.ns[key] += clock() - start

        return call


def timed_inductor(timers: Timers, aot_runs: list) -> Callable:
    """ember's inductor backend (aot_graph + inductor_default + compile_graph), layers timed."""

    def forward_compiler(graph, inputs):
        return timers.timed("kernels", compile_graph(graph, inputs))

    def backward_compiler(graph, inputs):
        compiled = compile_graph(graph, inputs)
        boxed = timers.timed("kernels", compiled.call_boxed)
        boxed._boxed_call = True
        return boxed

    def backend(gm, example_inputs):
        run = aot_graph(
            gm,
            example_inputs,
            fw_compiler=forward_compiler,
            bw_compiler=backward_compiler,
            decompositions=inductor_default,
        )
        aot_runs.append(run)
        return timers.timed("aot", run)

    return backend


def _time_backward(run: Callable, timers: Timers) -> None:
    """Time the compiled autograd.Function's backward (the class behind its `apply`)."""
    for compiled in run.aot._cache.values():
        apply = getattr(compiled, "run", None) if compiled is not None else None
        function = getattr(apply, "function", None) or getattr(apply, "__self__", None)
        if isinstance(function, type) and issubclass(function, torch.autograd.Function):
            original = function.backward
            if not getattr(original, "_timed", False):
                wrapped = timers.timed("backward", original)
                wrapped._timed = True
                function.backward = staticmethod(wrapped)


def ember_split(model: nn.Module, x: torch.Tensor, training: bool) -> dict:
    timers, aot_runs = Timers(), []
    compiled = ember.compile(model, backend=timed_inductor(timers, aot_runs))
    step = step_fn(compiled, x, training)
    step()
    for entry in ember.api.compiled_callable_of(compiled).entries:
        entry.check = timers.timed("guard", entry.check)
    for run in aot_runs:
        _time_backward(run, timers)
    for _ in range(CALLS):
        step()
    clock = time.perf_counter_ns
    calls = ROUNDS * CALLS // 2
    timers.reset()
    with torch.set_grad_enabled(training):
        for _ in range(calls):
            start = clock()
            out = compiled(x)
            middle = clock()
            if training:
                out.sum().backward()
                timers.ns["bwd"] += clock() - middle
            timers.ns["fwd"] += middle - start
    us = {key: value / calls / 1000 for key, value in timers.ns.items()}
    split = {
        "guard": us["guard"],
        "capture": us["fwd"] - us["guard"] - us["aot"],
        "aot": us["aot"] + us["backward"] - us["kernels"],
        "kernels": us["kernels"],
    }
    if training:
        split["engine"] = us["bwd"] - us["backward"]
    return split


# -- driver ------------------------------------------------------------------------------------


def run_case(name: str, training: bool, variants: list[str]) -> dict:
    torch.manual_seed(0)
    model, x = CASES[name]()
    steps = {}
    for variant in variants:
        copy_of = copy.deepcopy(model)
        steps[variant] = step_fn(make_variant(variant, copy_of), x, training)
        steps[variant]()  # compile outside the timed rounds
    row = {"case": name, "mode": "training" if training else "inference"}
    row.update(interleaved(steps))
    if "ember-inductor" in row:
        row["split"] = ember_split(copy.deepcopy(model), x, training)
    return row


def table(rows: list[dict], variants: list[str]) -> str:
    split_keys = ("guard", "capture", "aot", "kernels", "engine")
    header = "| case | mode | " + " | ".join(variants) + " | ember inductor split: "
    header += " / ".join(split_keys) + " |"
    lines = [header, "|---|---|" + "---:|" * len(variants) + "---|"]
    for r in rows:
        cells = [f"{r[v]:.1f}" if v in r else "-" for v in variants]
        split = r.get("split", {})
        parts = " / ".join(f"{split[k]:.1f}" if k in split else "-" for k in split_keys)
        lines.append(f"| {r['case']} | {r['mode']} | " + " | ".join(cells) + f" | {parts} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    names = [a for a in argv if a in CASES] or list(CASES)
    modes = os.environ.get("EMBER_BENCH_MODES", "inference,training").split(",")
    wanted = os.environ.get("EMBER_BENCH_VARIANTS")
    variants = [v for v in VARIANTS if wanted is None or v in wanted.split(",")]
    torch.set_num_threads(1)  # the kernels are tiny: thread start-up would only add noise
    print(
        f"per-call wall time, us (median of {ROUNDS} rounds of {CALLS} calls); "
        f"torch {torch.__version__}, 1 thread",
        flush=True,
    )
    rows = []
    for name in names:
        for mode in modes:
            rows.append(run_case(name, mode == "training", variants))
            print(table(rows[-1:], variants).splitlines()[-1], flush=True)
    print()
    print(table(rows, variants))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
