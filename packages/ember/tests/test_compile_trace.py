"""Seeing what the compiler did: the compile trace, last_artifacts, explain, recompile logs,
log names and the progress line."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ember
from ember import report
from ember.progress import ProgressLine, enabled
from guards.logs import torch_log_levels
from guards.trace_events import tracing

SRC = [str(Path(__file__).resolve().parents[3] / p / "src") for p in
       ("packages/ember", "guards", "dynamo_capture", "prim_decomp", "aot_autograd",
        "inductor_codegen")]  # fmt: skip


def _break_in_middle(x):
    y = torch.sin(x) * 2
    print("graph break here")  # the break the trace must locate
    return y.cos() + x


RESUME_NAME = (
    f"torch_dynamo_resume_in__break_in_middle_at_{_break_in_middle.__code__.co_firstlineno + 2}"
)


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _kinds(events, kind):
    return [e for e in events if e["kind"] == kind]


@pytest.fixture
def traced_break_and_recompile(tmp_path):
    """A function with a graph break, compiled for two sizes (a recompile), traced."""
    compiled = ember.compile(_break_in_middle)
    x, y = torch.randn(8, requires_grad=True), torch.randn(12, requires_grad=True)
    with ember.trace(tmp_path / "trace") as path:
        torch.testing.assert_close(compiled(x), _break_in_middle(x))
        torch.testing.assert_close(compiled(x), _break_in_middle(x))
        torch.testing.assert_close(compiled(y), _break_in_middle(y))
    assert not tracing()
    return compiled, path


def test_trace_records_frames_breaks_recompiles_kernels_and_times(traced_break_and_recompile):
    _, path = traced_break_and_recompile
    events = _events(path)
    assert events[0]["kind"] == "process" and events[0]["pid"] == os.getpid()
    starts = _kinds(events, "compile_start")
    frames = {e["frame"] for e in starts}
    # the part before the break keeps the function's name; the one after is named as
    # torch.compile names its resume function
    assert {"_break_in_middle", RESUME_NAME} <= frames
    top = next(e for e in starts if e["frame"] == "_break_in_middle")
    parts = [e for e in starts if e["parent_frame_id"] is not None]
    assert [e["frame"] for e in parts[:2]] == ["_break_in_middle", RESUME_NAME]
    assert all(e["parent_frame_id"] == top["frame_id"] for e in parts)
    (graph_break,) = {json.dumps(e["where"]): e for e in _kinds(events, "graph_break")}.values()
    assert graph_break["where"][-1]["filename"] == __file__
    assert "graph break here" in graph_break["where"][-1]["text"]
    recompiles = _kinds(events, "recompile")
    assert recompiles and all("size mismatch" in r["failures"][0]["reason"] for r in recompiles)
    assert {e["compile_id"] for e in starts} >= {f"{top['frame_id']}/0", f"{top['frame_id']}/1"}
    assert _kinds(events, "cache_hit")
    entries = _kinds(events, "entry")
    assert any("sin" in (e["graph_code"] or "") for e in entries)
    assert any(e["guards"] and "TENSOR_MATCH" in e["guards"][0] for e in entries)
    assert {e["name"] for e in _kinds(events, "aot_graph")} >= {"joint", "forward", "backward"}
    passes = _kinds(events, "inductor_pass")
    assert {"schedule", "codegen", "wrapper"} <= {p["name"] for p in passes}
    assert any("extern" in p["text"] for p in passes if p["name"] == "codegen")
    assert all(isinstance(p["seconds"], float) for p in passes)
    assert all(e["compile_id"] is not None for e in passes)  # lazy compiles attributed too
    assert all(e["seconds"] >= 0 for e in _kinds(events, "compile_end"))


def test_trace_files_are_private_and_large_artifacts_sit_beside_it(tmp_path):
    compiled = ember.compile(_big_graph, backend="eager")
    with ember.trace(tmp_path / "trace") as path:
        compiled(torch.randn(4))
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    entry = _kinds(_events(path), "entry")[0]
    reference = entry["graph_code"]
    assert set(reference) == {"file", "chars"}
    stored = path.parent / reference["file"]
    assert stat.S_IMODE(os.stat(stored).st_mode) == 0o600
    assert "sin" in stored.read_text() and len(stored.read_text()) == reference["chars"]


def _big_graph(x):
    for _ in range(60):
        x = torch.sin(x) + 1
    return x


def test_trace_dir_environment_variable_traces_the_process(tmp_path):
    code = "import torch, ember; ember.compile(lambda x: x * 2, backend='eager')(torch.ones(2))"
    env = {**os.environ, "EMBER_TRACE_DIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(SRC)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    (path,) = tmp_path.glob("ember_trace_*.jsonl")
    assert _kinds(_events(path), "entry")


def _calls_math(kernels: str, name: str) -> bool:
    """The C++ source calls math function `name` (libm's, or the one routine every position
    of a kernel shares: `ember_vm_<name>f`)."""
    return re.search(rf"\b(std::{name}|ember_vm_{name}f?)\(", kernels) is not None


def test_last_artifacts_has_every_part_in_order_with_aot_graphs_and_kernels(
    traced_break_and_recompile,
):
    compiled, _ = traced_break_and_recompile
    artifacts = ember.last_artifacts(compiled)
    names = [part.frame_name for part in artifacts.parts]
    assert names == ["_break_in_middle", "_break_in_middle", RESUME_NAME]
    pre, resume = artifacts.parts[1], artifacts.parts[2]
    assert "sin" in pre.graph_code and "cos" in resume.graph_code
    assert set(pre.aot_graphs) == {"joint", "forward", "backward"}
    assert "extern" in pre.kernels and _calls_math(pre.kernels, "sin")
    assert "def call" in pre.wrapper and "kernel" in pre.schedule
    assert _calls_math(artifacts.kernels, "cos")  # joined over the parts
    assert pre.compile_id.endswith("/1")  # the newest compile: the recompile for size 12
    assert "kernels" in str(artifacts)


def test_last_artifacts_of_a_split_module_is_not_only_the_last_part():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.linear(x).relu()
            print("break")
            return y.sum(-1)

    model = Model()
    compiled = ember.compile(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    artifacts = ember.last_artifacts(compiled)
    graphs = [part.graph_code for part in artifacts.parts]
    assert any("relu" in g for g in graphs) and any("sum" in g for g in graphs)
    assert artifacts.kernels


def _inner(x):
    y = x.sin()
    print("inner break")
    return y.cos()


def _outer(x):
    a = x + 1
    b = _inner(a)
    return b * 2


def test_explain_counts_resume_graphs_ops_and_part_guards():
    outer = _outer
    x = torch.randn(4)
    explained = ember.explain(outer)(x)
    torch.testing.assert_close(explained.result, outer(x))
    assert explained.graph_count == 4  # outer before, inner before/after, outer after
    assert [len(ops) for ops in explained.ops_per_graph] == [1, 1, 1, 1]
    assert explained.break_reasons[0].location.filename == __file__
    assert "inner break" in explained.break_reasons[0].location.text
    assert sum("TENSOR_MATCH" in g for g in explained.guards) >= 4  # each part's guards
    assert "(1 ops)" in str(explained)


def test_explain_of_a_compiled_function_explains_what_it_compiles():
    compiled = ember.compile(_break_in_middle, backend="eager")
    explained = ember.explain(compiled)(torch.randn(4))
    assert explained.graph_count == 2 and explained.graph_break_count == 1


def test_recompile_log_names_the_failing_guard_of_each_cached_entry(caplog):
    def scale(x, n):
        return x * n

    compiled = ember.compile(scale, backend="eager")
    ember.set_logs(recompiles=True)
    logger = logging.getLogger("ember")
    logger.addHandler(caplog.handler)
    try:
        compiled(torch.ones(2), 2)
        compiled(torch.ones(2, dtype=torch.float64), 2)  # entry 0 fails on the dtype
        compiled(torch.ones(2), 3)  # entry 0 fails on n, entry 1 on the dtype
    finally:
        logger.removeHandler(caplog.handler)
        ember.set_logs()
    last = [r.getMessage() for r in caplog.records if "Recompiling" in r.getMessage()][-1]
    assert "each of its 2 cached entries failed a guard" in last
    lines = last.splitlines()[1:]
    assert "dtype mismatch" not in lines[0] and "'n' value mismatch" in lines[0], last
    assert "dtype mismatch" in lines[1], last


def test_recompile_limit_message_names_the_guard_at_fault_and_what_to_do(caplog):
    def double(x):
        return x * 2

    compiled = ember.compile(double, backend="eager", dynamic=False, options={"recompile_limit": 2})
    logger = logging.getLogger("ember")
    logger.addHandler(caplog.handler)
    try:
        for size in (2, 3, 4):
            torch.testing.assert_close(compiled(torch.ones(size)), torch.ones(size) * 2)
    finally:
        logger.removeHandler(caplog.handler)
    (message,) = [r.getMessage() for r in caplog.records if "recompile limit" in r.getMessage()]
    assert "most at fault (2 of 2 entries): tensor 'x' size mismatch at index 0" in message
    assert "mark_dynamic" in message and "dynamic=True" in message
    assert "recompile_limit" in message


def _import_ember(env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    code = (
        "import logging, ember; from guards.logs import artifact_enabled; "
        "print(artifact_enabled('guards'), artifact_enabled('recompiles', logging.DEBUG))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(SRC), **env_extra}
    for name in ("EMBER_LOGS", "TORCH_LOGS"):
        if name not in env_extra:
            env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )


def test_unknown_ember_logs_name_warns_listing_names_and_import_succeeds():
    result = _import_ember({"EMBER_LOGS": "bogus,guards"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False"]
    assert "'bogus'" in result.stderr and "recompiles" in result.stderr


def test_torch_logs_names_with_an_ember_equivalent_are_honoured():
    result = _import_ember({"TORCH_LOGS": "recompiles_verbose,guards,dynamo,-graph"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]
    assert torch_log_levels("+output_code,fusion,inductor") == {
        "output_code": logging.DEBUG,
        "schedule": logging.INFO,
    }


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_shows_stage_and_kernels_then_erases_itself():
    import time

    stream = _Terminal()
    progress = ProgressLine(stream, delay=0.0)
    progress({"kind": "compile_start", "compile_id": "0/0", "frame": "Model.forward"})
    progress({"kind": "stage_start", "compile_id": "0/0", "stage": "inductor", "role": "forward"})
    progress({"kind": "stage_end", "compile_id": "0/0", "stage": "inductor", "kernel_count": 7})
    # The line is redrawn by a thread every REFRESH_SECONDS: wait for a redraw after the
    # stage ended (a loaded machine may delay it), not for a fixed time.
    deadline = time.monotonic() + 10
    while "(7 kernels)" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    shown = stream.getvalue()
    assert "[ember] compiling Model.forward [0/0]" in shown and "(7 kernels)" in shown
    progress({"kind": "compile_end", "compile_id": "0/0"})
    assert stream.getvalue().endswith("\r\033[K")


def test_progress_is_silent_off_a_terminal_or_with_ember_progress_0(monkeypatch):
    assert not enabled(io.StringIO())
    assert enabled(_Terminal())
    monkeypatch.setenv("EMBER_PROGRESS", "0")
    assert not enabled(_Terminal())


def test_report_page_is_self_contained_and_shows_compiles(traced_break_and_recompile, tmp_path):
    _, path = traced_break_and_recompile
    output = tmp_path / "report.html"
    assert report.main([str(path.parent), "-o", str(output)]) == 0
    page = output.read_text()
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and "<link" not in page and "src=" not in page
    assert RESUME_NAME in page and "<svg" in page
    assert "graph break here" in page and "size mismatch" in page


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_traces_into_a_file_of_its_own(tmp_path):
    compiled = ember.compile(lambda x: x + 1, backend="eager")
    with ember.trace(tmp_path) as path:
        pid = os.fork()
        if pid == 0:  # the child compiles, then leaves at once
            try:
                compiled(torch.ones(2))
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        compiled(torch.ones(3))
    files = sorted(tmp_path.glob("ember_trace_*.jsonl"))
    assert len(files) == 2 and path in files
    (child,) = [f for f in files if f != path]
    assert _events(child)[0]["pid"] == pid and _kinds(_events(child), "entry")
    assert all(e.get("pid", os.getpid()) == os.getpid() for e in _events(path))
