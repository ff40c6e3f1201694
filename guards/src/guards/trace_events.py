"""Structured compile-trace events that every stage may emit, and where they go.

    from guards.trace_events import compile_scope, emit, tracing

    with compile_scope("3/1", frame="Model.forward"):   # capture opens one per compile
        if tracing():                                  # cheap: build payloads only when on
            emit("aot_graph", name="forward", text=gm.code, seconds=0.01)

An event is a flat dict: `kind`, the `compile_id` of the innermost open compile
scope (capture's "<frame id>/<attempt>"; None outside one), `time` (seconds since
the epoch) and the payload. Nothing is recorded until a sink is installed
(`ember.trace` installs one that writes JSON lines); with none, `tracing()` is False
and `emit` returns at once, so stages pay one function call per event site.

The lowest layer holds this so that each stage emits the same way when used alone,
as with the log artifacts (`guards.logs`).
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["add_sink", "compile_scope", "current_compile_id", "emit", "remove_sink", "tracing"]

Sink = Callable[[dict[str, Any]], None]
_sinks: list[Sink] = []
_scopes = threading.local()


def tracing() -> bool:
    """Whether any sink records events: check it before building an expensive payload."""
    return bool(_sinks)


def add_sink(sink: Sink) -> None:
    """Send every event from now on to `sink(event)` as well."""
    _sinks.append(sink)


def remove_sink(sink: Sink) -> None:
    """Stop sending events to `sink` (no error when it is not installed)."""
    if sink in _sinks:
        _sinks.remove(sink)


def _stack() -> list[tuple[str, dict[str, Any]]]:
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    return stack


def current_compile_id() -> str | None:
    """The compile id of the innermost open compile scope of this thread, or None."""
    stack = _stack()
    return stack[-1][0] if stack else None


@contextlib.contextmanager
def compile_scope(compile_id: str, **info: Any) -> Iterator[None]:
    """Events emitted inside belong to `compile_id`; `compile_start`/`compile_end` around it.

    `info` (the frame's name, file, line, the parent frame) goes on the start event;
    the end event carries the seconds the compile took and whether it raised.
    """
    stack = _stack()
    stack.append((compile_id, info))
    start = time.perf_counter()
    emit("compile_start", **info)
    failed: str | None = None
    try:
        yield
    except BaseException as error:
        failed = f"{type(error).__name__}: {error}"
        raise
    finally:
        emit("compile_end", seconds=time.perf_counter() - start, error=failed)
        stack.pop()


def emit(kind: str, **payload: Any) -> None:
    """Record one event of `kind` in the current compile scope; nothing when not tracing.

    A sink that fails is removed (a trace must never break a compile).
    """
    if not _sinks:
        return
    event = {"kind": kind, "compile_id": current_compile_id(), "time": time.time(), **payload}
    for sink in list(_sinks):
        try:
            sink(event)
        except Exception as error:  # noqa: BLE001 - tracing is best effort; compiling goes on
            remove_sink(sink)
            warnings.warn(
                f"the compile trace stopped recording: its sink failed on a {kind!r} event "
                f"({type(error).__name__}: {error})",
                RuntimeWarning,
                stacklevel=2,
            )
