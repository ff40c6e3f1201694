"""guards.trace_events: compile scopes, full and light sinks, a failing sink."""

from __future__ import annotations

import pytest

from guards.trace_events import (
    add_sink,
    compile_scope,
    current_compile_id,
    emit,
    remove_sink,
    tracing,
    within_compile,
)


def test_events_carry_the_innermost_compile_id_and_scopes_time_themselves():
    events = []
    add_sink(events.append)
    try:
        with compile_scope("0/0", frame="f"):
            emit("inside", value=1)
            with within_compile("7/2"):
                emit("deferred")
            assert current_compile_id() == "0/0"
        emit("outside")
    finally:
        remove_sink(events.append)
    kinds = [(e["kind"], e["compile_id"]) for e in events]
    assert kinds == [
        ("compile_start", "0/0"),
        ("inside", "0/0"),
        ("deferred", "7/2"),
        ("compile_end", "0/0"),
        ("outside", None),
    ]
    assert events[0]["frame"] == "f" and events[3]["seconds"] >= 0 and events[3]["error"] is None


def test_a_light_sink_does_not_ask_for_full_payloads():
    events = []
    assert not tracing()
    add_sink(events.append, full=False)
    try:
        assert not tracing()
        emit("cheap")
    finally:
        remove_sink(events.append)
    assert [e["kind"] for e in events] == ["cheap"]


def test_a_failing_sink_is_removed_with_a_warning_and_compiling_goes_on():
    def broken(event):
        raise OSError("disk full")

    add_sink(broken)
    with pytest.warns(RuntimeWarning, match="disk full"):
        emit("one")
    assert not tracing()
    emit("two")  # no sink, no warning


def test_a_compile_that_raises_records_its_error():
    events = []
    add_sink(events.append)
    try:
        with pytest.raises(ValueError), compile_scope("1/0"):
            raise ValueError("bad graph")
    finally:
        remove_sink(events.append)
    assert events[-1]["kind"] == "compile_end" and "bad graph" in events[-1]["error"]
