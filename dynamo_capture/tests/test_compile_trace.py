"""What capture tells the compile trace and the recompile log (dynamo_capture.compile_trace)."""

from __future__ import annotations

import logging

import torch

from dynamo_capture import optimize
from dynamo_capture.testing import eager_backend
from guards import set_logs
from guards.trace_events import add_sink, remove_sink


def _scale(x, n):
    return x * n


def _split(x):
    y = x + 1
    print("break")
    return y * 2


def test_recompile_log_lists_the_failing_guard_of_every_cached_entry(caplog):
    compiled = optimize(_scale, backend=eager_backend)
    set_logs(recompiles=True)
    logger = logging.getLogger("ember")
    logger.addHandler(caplog.handler)
    try:
        torch.testing.assert_close(compiled(torch.ones(2), 2), torch.ones(2) * 2)
        compiled(torch.ones(2, dtype=torch.float64), 2)
        compiled(torch.ones(2), 3)
    finally:
        logger.removeHandler(caplog.handler)
        set_logs()
    message = [r.getMessage() for r in caplog.records][-1]
    first, second = message.splitlines()[1:]
    assert "'n' value mismatch" in first and "dtype mismatch" not in first
    assert "'n' value mismatch" in second and "dtype mismatch" in second


def test_trace_events_give_split_parts_their_parent_and_breaks_their_user_line():
    events = []
    add_sink(events.append)
    try:
        compiled = optimize(_split, backend=eager_backend)
        torch.testing.assert_close(compiled(torch.ones(3)), _split(torch.ones(3)))
    finally:
        remove_sink(events.append)
    starts = [e for e in events if e["kind"] == "compile_start"]
    top, *parts = starts
    assert top["frame"] == "_split" and top["parent_frame_id"] is None
    break_line = _split.__code__.co_firstlineno + 2
    assert [p["frame"] for p in parts] == [
        "_split",
        f"torch_dynamo_resume_in__split_at_{break_line}",
    ]
    assert all(p["parent_frame_id"] == top["frame_id"] for p in parts)
    (graph_break,) = [e for e in events if e["kind"] == "graph_break"]
    assert graph_break["compile_id"] == f"{top['frame_id']}/0"
    assert graph_break["where"][-1]["filename"] == __file__
    assert graph_break["where"][-1]["text"] == 'print("break")'
    entries = [e for e in events if e["kind"] == "entry"]
    assert [e["compile_id"] for e in entries] == [s["compile_id"] for s in starts]
    assert "+ 1" in entries[1]["graph_code"] and "* 2" in entries[2]["graph_code"]
