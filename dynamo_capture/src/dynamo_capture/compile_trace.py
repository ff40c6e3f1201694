"""What capture tells the compile trace and the recompile log about a compiled callable.

Every compiled callable (a frame, or a part of a frame split by a graph break) gets a
frame id the first time it compiles; its n-th compile has the compile id
"<frame id>/<n>", as torch's. `frame_compile` opens the compile scope (guards'
trace_events) that the later stages' events fall in; the other functions emit one
event each, only while a trace records (`guards.trace_events.tracing()`).

Recompiles name the guard each cached entry failed, not only the newest entry's:
a recompile storm is often two guards failing in turn.
"""

from __future__ import annotations

import itertools
from collections import Counter
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from guards.trace_events import compile_scope, emit, tracing

if TYPE_CHECKING:
    from dynamo_capture.capture import CompiledEntry
    from dynamo_capture.errors import Unsupported
    from dynamo_capture.optimize import CompiledCallable

__all__ = [
    "entry_failures",
    "frame_compile",
    "frame_id",
    "limit_message",
    "note_break",
    "note_entry",
    "note_hit",
    "note_recompile",
    "recompile_message",
]

_frame_ids = itertools.count()


def frame_id(compiled: CompiledCallable) -> int:
    """The frame id of a compiled callable, given on first use."""
    found = compiled.__dict__.get("_trace_frame_id")
    if found is None:
        found = compiled.__dict__["_trace_frame_id"] = next(_frame_ids)
    return found


def frame_compile(compiled: CompiledCallable) -> AbstractContextManager[None]:
    """The compile scope of `compiled`'s next compile; its id is on `compiled.compile_id`."""
    attempt = compiled.__dict__.get("_trace_compiles", 0)
    compiled.__dict__["_trace_compiles"] = attempt + 1
    compile_id = f"{frame_id(compiled)}/{attempt}"
    compiled.compile_id = compile_id
    parent = compiled.__dict__.get("parent")
    code = _user_code(compiled)
    return compile_scope(
        compile_id,
        frame=compiled.frame.name,
        frame_id=frame_id(compiled),
        attempt=attempt,
        parent_frame_id=None if parent is None else frame_id(parent),
        filename=getattr(code, "co_filename", None),
        line=getattr(code, "co_firstlineno", None),
        entries=len(compiled.entries),
        source=_source(code) if tracing() else None,
    )


def _source(code: Any) -> str | None:
    """The user's source text of the frame's function, when its file can be read."""
    import inspect

    try:
        return "".join(inspect.getsourcelines(code)[0]) if code is not None else None
    except (OSError, TypeError):
        return None


def _user_code(compiled: CompiledCallable) -> Any:
    """The code of the user's function the frame runs: a module's forward for a module."""
    from dynamo_capture.frame_target import _module_call

    function = compiled.frame.function
    if function is _module_call:
        function = getattr(type(compiled.target), "forward", None)
    return getattr(function, "__code__", None)


def _where(error: Unsupported) -> list[dict[str, Any]]:
    return [
        {"filename": loc.filename, "line": loc.line, "function": loc.function, "text": loc.text}
        for loc in error.where
    ]


def note_break(compiled: CompiledCallable, error: Unsupported, handling: str) -> None:
    """A graph break in `compiled`'s frame: the reason, the user's frames, how it is handled."""
    if tracing():
        emit(
            "graph_break",
            frame=compiled.frame.name,
            reason=error.reason,
            where=_where(error),
            handling=handling,
        )


def note_entry(compiled: CompiledCallable, entry: CompiledEntry) -> None:
    """A new cache entry: its guards, entry code and captured graph, and the time taken."""
    if not tracing():
        return
    artifacts = entry.artifacts
    emit(
        "entry",
        frame=compiled.frame.name,
        entry_index=len(compiled.entries),
        eager=entry.eager,
        guard_code=artifacts.guard_code,
        guards=[guard.describe() for guard in entry.guards.guards],
        entry_code=artifacts.entry_code,
        graph_code=artifacts.graph_code,
        graph_break_reason=artifacts.graph_break_reason,
        capture_seconds=artifacts.capture_seconds,
        backend_seconds=artifacts.backend_seconds,
    )


def note_hit(compiled: CompiledCallable, entry: CompiledEntry) -> None:
    """A cache hit; the caller calls it at the 1st, 2nd, 4th, 8th... hit of an entry."""
    if tracing():
        emit(
            "cache_hit",
            frame=compiled.frame.name,
            entry_compile_id=getattr(entry.artifacts, "compile_id", None),
            hits=entry.hits,
        )


def entry_failures(
    compiled: CompiledCallable, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> list[tuple[str, str]]:
    """(compile id, every guard it fails in words) for each cached entry, oldest first."""
    failures = []
    for index, entry in enumerate(compiled.entries):
        compile_id = getattr(entry.artifacts, "compile_id", "") or f"entry {index}"
        every = getattr(entry.guards, "failures", None)
        if every is not None:
            reasons = every(f_locals, f_globals)
        else:
            reasons = [r for r in [entry.guards.why_failed(f_locals, f_globals)] if r]
        failures.append((compile_id, "; ".join(reasons) or "guards pass"))
    return failures


def _guard_of(failure: str) -> str:
    """A failure's guard without the values: "tensor 'x' size mismatch at index 0"."""
    return failure.split(": expected")[0].strip()


def recompile_message(name: str, failures: list[tuple[str, str]]) -> str:
    lines = [f"Recompiling {name}: each of its {len(failures)} cached entries failed a guard:"]
    lines += [f"  entry {compile_id}: {reason}" for compile_id, reason in failures]
    return "\n".join(lines)


def limit_message(name: str, limit: int, failures: list[tuple[str, str]]) -> str:
    """The recompile-limit warning: what failed, the guard most at fault, and what to do."""
    counts = Counter(
        guard for _, reasons in failures for guard in {_guard_of(r) for r in reasons.split("; ")}
    )
    worst, times = counts.most_common(1)[0] if counts else ("unknown", 0)
    lines = [
        f"{name} hit the recompile limit ({limit}); it runs eagerly from now on. "
        f"The guard each of its {len(failures)} cached entries failed:",
        *(f"  entry {compile_id}: {reason}" for compile_id, reason in failures),
        f"The guard most at fault ({times} of {len(failures)} entries): {worst}.",
        "To fix it: a size that changes between calls -> ember.mark_dynamic(tensor, dim) "
        "before the call, or ember.compile(..., dynamic=True); a Python value that changes "
        "(an int argument, a flag, an attribute) -> pass it as a tensor or keep it constant; "
        "or raise the limit with ember.compile(..., options={'recompile_limit': N}).",
    ]
    return "\n".join(lines)


def note_recompile(
    compiled: CompiledCallable, failures: list[tuple[str, str]], *, limit_hit: bool
) -> None:
    if tracing():
        emit(
            "recompile",
            frame=compiled.frame.name,
            frame_id=frame_id(compiled),
            failures=[{"compile_id": c, "reason": r} for c, r in failures],
            limit_hit=limit_hit,
            limit=compiled.recompile_limit,
        )
