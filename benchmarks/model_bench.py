"""The model suite end to end: eager vs ember.compile vs torch.compile, in one run.

    python benchmarks/model_bench.py                 every model, inference and training
    python benchmarks/model_bench.py gpt2 mlp        only these models
    EMBER_BENCH_MODES=inference python benchmarks/model_bench.py

For each model and mode it reports: the speedup over eager (median of timed
calls after warm-up, eager / ember / torch.compile calls interleaved so that
load from other processes falls on all three alike) for ember (backend
inductor) and torch.compile (inductor),
each one's first-call time from a cold kernel cache (capture + AOT + codegen +
build), whether the result matched eager, and how many graphs / graph breaks ember
made. Training times a forward, a loss and the backward.

Accuracy (benchmarks/accuracy.py): every compiled row is checked against eager
in float64 (a float64 copy of the model and its float inputs): inference by its
outputs, training by its loss and the global norm of all gradients. A row fails
(FAIL in the table, `"<backend>_accuracy": "FAIL"` in the JSON) when its error
exceeds 3x eager-fp32's error against the same float64 reference + 2e-3.
Threads: torch's default (the machine's cores), or EMBER_BENCH_THREADS (set
OMP_NUM_THREADS to the same number, so that ember's OpenMP kernels use as many).
benchmarks/cpu_suite.sh runs the whole suite pinned to two cores at two threads.
Prints a markdown table and writes JSON beside it when EMBER_BENCH_JSON names a file.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy  # noqa: E402
from models import MODELS  # noqa: E402

import ember  # noqa: E402

REPEATS = int(os.environ.get("EMBER_BENCH_REPEATS", "20"))


def interleaved_medians(steps: dict, repeats: int = REPEATS) -> dict:
    """Median seconds per call of each step, timed in interleaved rounds.

    One call of each step per round, so a burst of load from other processes
    on a shared machine falls on every variant alike and the ratios hold; the
    order reverses every other round, so no step always runs after the same one.
    """
    for step in steps.values():
        for _ in range(3):
            step()
    times: dict = {label: [] for label in steps}
    for round_index in range(repeats):
        order = list(steps.items())
        for label, step in order if round_index % 2 == 0 else reversed(order):
            start = time.perf_counter()
            step()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(values) for label, values in times.items()}


def step_fn(model, inputs, loss_fn, training: bool):
    if not training:

        def infer():
            with torch.no_grad():
                return model(*inputs)

        return infer

    def train():
        loss = loss_fn(model(*inputs))
        loss.backward()
        return loss.detach()

    return train


def compare(expected, actual) -> bool:
    try:
        torch.testing.assert_close(actual, expected, rtol=1e-3, atol=1e-3)
        return True
    except AssertionError:
        return False


def output_tensors(output) -> list[torch.Tensor]:
    """The tensors an inference call is judged by: logits, else every output tensor."""
    for name in ("logits", "last_hidden_state"):
        if hasattr(output, name):
            return [getattr(output, name)]
    if isinstance(output, (tuple, list)):
        return [t for t in output if isinstance(t, torch.Tensor)]
    return [output]


def measure(step, model, training: bool):
    """What the accuracy rule compares of one call: output tensors, or (loss, gradient norm)."""
    for parameter in model.parameters():
        parameter.grad = None
    torch.manual_seed(0)
    result = step()
    if not training:
        return [t.detach() for t in output_tensors(result)]
    norm = accuracy.global_grad_norm([p.grad for p in model.parameters()])
    for parameter in model.parameters():
        parameter.grad = None
    return float(result), norm


def accuracy_errors(measured, reference, training: bool) -> dict:
    if training:
        return accuracy.training_errors(*measured, reference)
    return {"outputs": accuracy.tensors_error(measured, reference)}


def float64_reference(case, training: bool):
    """The float64 eager measurement of a case (a float64 copy of the model and inputs)."""
    model = copy.deepcopy(case.model).double()
    inputs = tuple(
        x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
        for x in case.inputs
    )
    return measure(step_fn(model, inputs, case.loss, training), model, training)


def run_case(name: str, training: bool) -> dict:
    case = MODELS[name]()
    model = case.model.train(training)
    if training:
        # Dropout would make eager and compiled runs differ; compare deterministic graphs.
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    row: dict = {"model": name, "mode": "training" if training else "inference"}
    steps = {"eager": step_fn(model, case.inputs, case.loss, training)}
    reference = float64_reference(case, training)
    eager_errors = accuracy_errors(measure(steps["eager"], model, training), reference, training)
    accuracy.record(row, "eager", eager_errors, eager_errors)
    torch.manual_seed(0)
    expected = case.loss(steps["eager"]()) if not training else steps["eager"]()
    for parameter in model.parameters():
        parameter.grad = None

    for label, make in (
        ("ember", lambda m: ember.compile(m, backend="inductor")),
        ("torch", lambda m: torch.compile(m, backend="inductor")),
    ):
        compiled = make(model)
        step = step_fn(compiled, case.inputs, case.loss, training)
        try:
            start = time.perf_counter()
            torch.manual_seed(0)
            first = step()
            row[f"{label}_compile_s"] = time.perf_counter() - start
            got = case.loss(first) if not training else first
            row[f"{label}_matches"] = compare(expected, got)
            errors = accuracy_errors(measure(step, model, training), reference, training)
            accuracy.record(row, label, errors, eager_errors)
            steps[label] = step
        except Exception as error:  # a failure is a result to report, not a crash
            row[f"{label}_error"] = f"{type(error).__name__}: {str(error)[:160]}"
        if label == "ember" and f"{label}_error" not in row:
            runner = ember.api.compiled_callable_of(compiled)
            row["ember_graphs"] = sum(not e.eager for e in runner.entries)
            row["ember_breaks"] = len(runner.graph_breaks)
        for parameter in model.parameters():
            parameter.grad = None
    medians = interleaved_medians(steps)
    row["eager_ms"] = medians["eager"] * 1e3
    for label in ("ember", "torch"):
        if label in medians:
            row[f"{label}_ms"] = medians[label] * 1e3
            row[f"{label}_speedup"] = medians["eager"] / medians[label]
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| model | mode | eager ms | ember speedup | torch speedup | ember compile s "
        "| torch compile s | eager err | ember accuracy | torch accuracy "
        "| ember graphs / breaks |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:

        def cell(key, fmt="{:.2f}", r=r):
            return fmt.format(r[key]) if key in r else r.get(key.split("_")[0] + "_error", "-")

        lines.append(
            f"| {r['model']} | {r['mode']} | {r['eager_ms']:.1f} | {cell('ember_speedup')}x "
            f"| {cell('torch_speedup')}x | {cell('ember_compile_s', '{:.1f}')} "
            f"| {cell('torch_compile_s', '{:.1f}')} | {accuracy.cell(r, 'eager')} "
            f"| {accuracy.cell(r, 'ember')} | {accuracy.cell(r, 'torch')} "
            f"| {r.get('ember_graphs', '-')} / {r.get('ember_breaks', '-')} |"
        )
    return "\n".join(lines)


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0]
    if not values:
        return float("nan")
    product = 1.0
    for v in values:
        product *= v
    return product ** (1 / len(values))


def set_threads() -> None:
    """torch's thread count from EMBER_BENCH_THREADS, checked against OMP_NUM_THREADS."""
    threads = os.environ.get("EMBER_BENCH_THREADS")
    if not threads:
        return
    torch.set_num_threads(int(threads))
    omp = os.environ.get("OMP_NUM_THREADS")
    if omp != threads:
        print(
            f"warning: EMBER_BENCH_THREADS={threads} but OMP_NUM_THREADS={omp}: ember's "
            "OpenMP kernels use OMP_NUM_THREADS (or every core); set both alike"
        )


def main(argv: list[str]) -> int:
    set_threads()
    names = argv or list(MODELS)
    modes = os.environ.get("EMBER_BENCH_MODES", "inference,training").split(",")
    # Cold caches for both compilers, so compile times are comparable.
    os.environ.setdefault("EMBER_CACHE_DIR", tempfile.mkdtemp(prefix="ember-bench-"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="torch-bench-"))
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"cores {','.join(map(str, cores)) or '?'}, repeats {REPEATS} (interleaved), "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    rows = []
    for mode in modes:
        for name in names:
            try:
                rows.append(run_case(name, training=(mode == "training")))
            except ImportError as missing:
                print(f"skipping {name}: {missing}")
                continue
            print(rows[-1], flush=True)
    print()
    print(table(rows))
    for mode in modes:
        mine = [
            r["ember_speedup"]
            for r in rows
            if r["mode"].startswith(mode[:5]) and "ember_speedup" in r
        ]
        theirs = [
            r["torch_speedup"]
            for r in rows
            if r["mode"].startswith(mode[:5]) and "torch_speedup" in r
        ]
        print(
            f"{mode}: geomean speedup ember {geomean(mine):.2f}x ({len(mine)} models), "
            f"torch.compile {geomean(theirs):.2f}x ({len(theirs)} models)"
        )
    failing = [f"{r['model']} {r['mode']} {b}" for r in rows for b in ("ember", "torch")
               if r.get(f"{b}_accuracy") == "FAIL"]  # fmt: skip
    print(f"accuracy: {'FAIL ' + ', '.join(failing) if failing else 'every compiled row ok'}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if os.environ.get("EMBER_BENCH_JSON"):
        Path(os.environ["EMBER_BENCH_JSON"]).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
