"""The model-zoo sweep: every model of benchmarks/zoo_models.py through ember.compile
(inductor, default options), inference and a training step, against eager.

    python benchmarks/model_zoo.py                       every model (each in a child process)
    python benchmarks/model_zoo.py gpt2 swin tv_resnet18 only these
    python benchmarks/model_zoo.py --list                the names
    nox -s zoo                                           the same, in a nox environment
    EMBER_ZOO_TORCHVISION=/tmp/tv python benchmarks/model_zoo.py   torchvision from a folder

For each model and mode:

    inference  eval mode, under no_grad: every floating tensor of the output
    training   train mode (every dropout 0): forward, loss = sum of sin(output).mean(),
               backward; the loss and every parameter's gradient

compared with eager by torch.testing.assert_close (fp32; outputs rtol=atol=1e-4,
gradients rtol=1e-3, atol=1e-4). A row that fails it is checked against eager in
float64 (benchmarks/accuracy.py's rule: compiled's error at most 3x eager-fp32's own
plus 2e-3): within it, the row is "pass~" (float32 rounding, eager's own error as large);
outside, "MISMATCH" (a silent wrong result: the worst outcome). Other outcomes:
"error" (ember raised), "eager" (a frame fell back to eager: EagerFallbackWarning),
"timeout" (past --timeout seconds). Each row also counts the graphs compiled, the graph
breaks, and the seconds of the first compiled call (capture + compile + one run).

Each model runs in its own child process with a timeout and a fresh kernel cache
(cold compiles); the JSON rows go to --json (default model_zoo.json), the markdown
table benchmarks/RESULTS.md takes is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SOURCES = [
    ROOT / "packages" / "ember" / "src",
    *(ROOT / name / "src" for name in ("guards", "dynamo_capture", "prim_decomp")),
    *(ROOT / name / "src" for name in ("aot_autograd", "inductor_codegen")),
]
OUTPUT_TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
GRAD_TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}


# --------------------------------------------------------------------- one model


def output_tensors(output: Any) -> list[torch.Tensor]:
    """The floating tensors of a model's output, in order (ModelOutput, tuple, tensor)."""
    if isinstance(output, torch.Tensor):
        return [output] if output.is_floating_point() else []
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        return [t for item in output for t in output_tensors(item)]
    return []


def zoo_loss(output: Any) -> torch.Tensor:
    """sum of sin(t).mean() over the output's floating tensors: every output takes part,
    and sin keeps gradients alive through normalizations."""
    return sum(t.float().sin().mean() for t in output_tensors(output))


def _no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout | torch.nn.Dropout2d | torch.nn.AlphaDropout):
            module.p = 0.0
    return model


class CompileRecorder:
    """Counts what ember did through its compile-trace events: graphs, breaks, eager frames."""

    def __init__(self) -> None:
        self.graphs = 0
        self.eager_frames = 0
        self.breaks: list[str] = []

    def __call__(self, event: dict[str, Any]) -> None:
        if event["kind"] == "entry":
            if event.get("eager"):
                self.eager_frames += 1
            else:
                self.graphs += 1
        elif event["kind"] == "graph_break":
            self.breaks.append(str(event.get("reason"))[:160])

    def __enter__(self) -> CompileRecorder:
        from guards.trace_events import add_sink

        add_sink(self)
        return self

    def __exit__(self, *exc: object) -> None:
        from guards.trace_events import remove_sink

        remove_sink(self)


def _compare(
    actual: list[torch.Tensor], expected: list[torch.Tensor], tolerance: dict, names: list[str]
) -> str | None:
    """None when every pair is close, else the first failure in a line."""
    if len(actual) != len(expected):
        return f"{len(actual)} tensors, eager gave {len(expected)}"
    for name, got, want in zip(names, actual, expected):
        try:
            torch.testing.assert_close(got, want, **tolerance)
        except AssertionError as error:
            lines = [line.strip() for line in str(error).splitlines() if "Greatest" in line]
            return f"{name}: " + ("; ".join(lines) or str(error).splitlines()[0])
    return None


def _float64_verdict(make_case: Any, mode: str, compiled_result: Any, eager_result: Any) -> str:
    """'ok' when the compiled result is as close to eager-float64 as eager-fp32 is."""
    from accuracy import global_grad_norm, tensors_error, training_errors, verdict

    case = make_case()
    model = case.model.double()
    convert = lambda v: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v  # noqa: E731
    args = tuple(convert(a) for a in case.args)
    kwargs = {k: convert(v) for k, v in case.kwargs.items()}
    if mode == "inference":
        with torch.no_grad():
            reference = output_tensors(model.eval()(*args, **kwargs))
        errors = {"output": tensors_error(compiled_result, reference)}
        eager = {"output": tensors_error(eager_result, reference)}
        return verdict(errors, eager)
    _no_dropout(model.train())
    loss = zoo_loss(model(*args, **kwargs))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    reference = (float(loss), global_grad_norm(grads))
    got = training_errors(compiled_result[0], compiled_result[1], reference)
    want = training_errors(eager_result[0], eager_result[1], reference)
    return verdict(got, want)


def run_mode(make_case: Any, mode: str) -> dict[str, Any]:
    """One model in one mode through ember.compile against eager: the row's fields."""
    import ember

    case = make_case()
    model = case.model.eval() if mode == "inference" else _no_dropout(case.model.train())
    row: dict[str, Any] = {"status": "pass", "detail": ""}
    compiled = ember.compile(model)
    with CompileRecorder() as recorder, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ember.EagerFallbackWarning)
        try:
            if mode == "inference":
                with torch.no_grad():
                    expected = output_tensors(model(*case.args, **case.kwargs))
                    start = time.perf_counter()
                    actual = output_tensors(compiled(*case.args, **case.kwargs))
                    row["compile_s"] = time.perf_counter() - start
                    again = output_tensors(compiled(*case.args, **case.kwargs))
                names = [f"output[{i}]" for i in range(len(expected))]
                failure = _compare(actual, expected, OUTPUT_TOLERANCE, names)
                failure = failure or _compare(again, expected, OUTPUT_TOLERANCE, names)
                results = (actual, expected)
            else:
                expected_loss, expected_grads = _training_step(model, model, case)
                start = time.perf_counter()
                actual_loss, actual_grads = _training_step(model, compiled, case)
                row["compile_s"] = time.perf_counter() - start
                names = ["loss", *expected_grads]
                if actual_grads.keys() != expected_grads.keys():
                    missing = sorted(set(expected_grads) ^ set(actual_grads))
                    failure = f"gradients of other parameters: {missing[:3]}"
                else:
                    failure = _compare(
                        [actual_loss], [expected_loss], OUTPUT_TOLERANCE, names[:1]
                    ) or _compare(
                        list(actual_grads.values()),
                        list(expected_grads.values()),
                        GRAD_TOLERANCE,
                        names[1:],
                    )
                results = (
                    _loss_and_norm(actual_loss, actual_grads),
                    _loss_and_norm(expected_loss, expected_grads),
                )
        except Exception as error:  # noqa: BLE001 - every error is a row of the table
            row.update(status="error", detail=_error_line(error))
            row["traceback"] = traceback.format_exc()[-4000:]
            failure = None
    row.update(graphs=recorder.graphs, breaks=len(recorder.breaks), break_reasons=recorder.breaks)
    fallbacks = [
        str(w.message) for w in caught if issubclass(w.category, ember.EagerFallbackWarning)
    ]
    if row["status"] == "error":
        return row
    if failure is not None:
        judged = _float64_verdict(make_case, mode, *results)
        row.update(status="pass~" if judged == "ok" else "MISMATCH", detail=failure)
    if fallbacks or recorder.eager_frames:
        if row["status"] == "pass":
            row["status"] = "eager"
        row["detail"] = (row["detail"] + " " + "; ".join(fallbacks)[:300]).strip()
    return row


def _training_step(model: torch.nn.Module, module: Any, case: Any) -> tuple:
    for parameter in model.parameters():
        parameter.grad = None
    torch.manual_seed(0)
    loss = zoo_loss(module(*case.args, **case.kwargs))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def _loss_and_norm(loss: torch.Tensor, grads: dict[str, torch.Tensor]) -> tuple[float, float]:
    from accuracy import global_grad_norm

    return float(loss), global_grad_norm(list(grads.values()))


def _error_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def run_model(name: str) -> dict[str, Any]:
    """Both modes of one zoo model, in this process."""
    from zoo_models import ZOO

    row: dict[str, Any] = {"model": name}
    try:
        ZOO[name]()
    except ImportError as missing:
        row["skipped"] = f"needs {missing.name}"
        return row
    for mode in ("inference", "training"):
        row[mode] = run_mode(ZOO[name], mode)
    return row


# ------------------------------------------------------------------------- sweep


def _child(name: str, timeout: float, cache_dir: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), *map(str, SOURCES), *filter(None, [env.get("PYTHONPATH")])]
    )
    with tempfile.TemporaryDirectory(prefix="ember_zoo_") as fresh:
        env["EMBER_CACHE_DIR"] = cache_dir or fresh
        command = [sys.executable, str(Path(__file__).resolve()), "--child", name]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"model": name, "timeout": timeout}
    rows = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not rows:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"model": name, "crashed": f"exit {done.returncode}: " + " | ".join(tail)}
    row = json.loads(rows[-1])
    row["wall_s"] = time.perf_counter() - start
    return row


def _cell(mode: dict[str, Any] | None) -> str:
    if mode is None:
        return "-"
    detail = mode["detail"]
    if mode["status"] == "pass~":  # which tensor; the numbers are in the JSON
        detail = detail.split(":")[0]
    return mode["status"] + (f" ({detail[:70]})" if mode["status"] != "pass" and detail else "")


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | inference | training | graphs / breaks (inf, train) | compile s (inf, train) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        name = row["model"]
        if "skipped" in row or "timeout" in row or "crashed" in row:
            what = row.get("skipped") or row.get("crashed") or f"timeout ({row['timeout']:.0f} s)"
            lines.append(f"| {name} | {what[:90]} | | | |")
            continue
        inference, training = row["inference"], row["training"]
        counts = ", ".join(f"{m['graphs']} / {m['breaks']}" for m in (inference, training))
        seconds = ", ".join(
            f"{m['compile_s']:.1f}" if "compile_s" in m else "-" for m in (inference, training)
        )
        lines.append(f"| {name} | {_cell(inference)} | {_cell(training)} | {counts} | {seconds} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="zoo names (default: every model)")
    parser.add_argument("--list", action="store_true", help="print the names and stop")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per model")
    parser.add_argument("--json", default="model_zoo.json", help="where the rows go")
    parser.add_argument("--cache-dir", help="one kernel cache for every model (default: fresh)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.child:
        warnings.filterwarnings("ignore", message=".*bos_token_id|.*eos_token_id")
        print(json.dumps(run_model(args.child)))
        return 0
    from zoo_models import ZOO

    if args.list:
        print("\n".join(ZOO))
        return 0
    unknown = [name for name in args.models if name not in ZOO]
    if unknown:
        parser.error(f"unknown models {unknown}; see --list")
    rows = []
    for name in args.models or list(ZOO):
        row = _child(name, args.timeout, args.cache_dir)
        rows.append(row)
        print(table([row]).splitlines()[-1], flush=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print()
    print(table(rows))
    worst = [r["model"] for r in rows for m in ("inference", "training")
             if r.get(m, {}).get("status") == "MISMATCH"]  # fmt: skip
    if worst:
        print(f"\nMISMATCH (silent wrong results): {', '.join(sorted(set(worst)))}")
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
