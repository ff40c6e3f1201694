"""Structured compile-trace events that every stage may emit, and where they go.

    from guards.trace_events import compile_scope, emit, tracing

    with compile_scope("3/1", frame="Model.forward"):   # capture opens one per compile
        if tracing():                                  # cheap: build payloads only when on
            emit("aot_graph", name="forward", text=gm.code, seconds=0.01)

An event is a flat dict: `kind`, the `compile_id` of the innermost open compile
scope (capture's "<frame id>/<attempt>"; None outside one), `time` (seconds since
the epoch) and the payload. Nothing is recorded until a sink is installed
(`ember.trace` installs one that writes JSON lines); with none, `tracing()` is False
and `emit` returns at once, so stages pay one function call per event site. A light
sink (the progress line) gets every event but does not make `tracing()` True: event
sites that build large payloads (graph code) build them only for full sinks.

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

__all__ = [
    "add_sink",
    "compile_scope",
    "current_compile_id",
    "emit",
    "remove_sink",
    "tracing",
    "within_compile",
]

Sink = Callable[[dict[str, Any]], None]
_sinks: list[Sink] = []
_full_sinks: list[Sink] = []
_scopes = threading.local()


def tracing() -> bool:
    """Whether a full sink records events: check it before building an expensive payload."""
    return bool(_full_sinks)


def add_sink(sink: Sink, *, full: bool = True) -> None:
    """Send every event from now on to `sink(event)` as well.

    A full sink (a trace) asks event sites for their whole payload; a light one
    (`full=False`, a progress line) takes what is emitted anyway.
    """
    _sinks.append(sink)
    if full:
        _full_sinks.append(sink)


def remove_sink(sink: Sink) -> None:
    """Stop sending events to `sink` (no error when it is not installed)."""
    if sink in _sinks:
        _sinks.remove(sink)
    if sink in _full_sinks:
        _full_sinks.remove(sink)


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


@contextlib.contextmanager
def within_compile(compile_id: str) -> Iterator[None]:
    """Events emitted inside belong to `compile_id`, a compile that already started
    (work a stage defers to the first call, as aot_autograd's training graphs)."""
    stack = _stack()
    stack.append((compile_id, {}))
    try:
        yield
    finally:
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
