"""A one-line progress display for cold compiles that take more than about two seconds.

    [ember] compiling Model.forward [0/0]: inductor backward graph, 3 graphs (41 kernels) 5.2 s

Shown on stderr only when stderr is a terminal and EMBER_PROGRESS is not "0"; the
line is rewritten in place every half second and erased when the compile ends.
It listens to guards' trace events as a light sink (it asks no stage for extra
work) and draws with a daemon thread, so a long pass still shows its time.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, TextIO

from guards.trace_events import add_sink

__all__ = ["DELAY_SECONDS", "ProgressLine", "enabled", "install"]

DELAY_SECONDS = 2.0
REFRESH_SECONDS = 0.5


def enabled(stream: TextIO | None = None) -> bool:
    """Whether the progress line is shown: a terminal, and EMBER_PROGRESS is not "0"."""
    if os.environ.get("EMBER_PROGRESS", "").strip() == "0":
        return False
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class ProgressLine:
    """The state of the compiles under way, from trace events; `line()` is what is shown."""

    def __init__(self, stream: TextIO | None = None, delay: float = DELAY_SECONDS) -> None:
        self.stream = stream
        self.delay = delay
        self.open: list[tuple[str, str]] = []  # (compile id, frame) of the open compiles
        self.since: float | None = None  # when the current busy period began
        self.stage = "capture"
        self.graphs = 0
        self.kernels = 0
        self.shown = False
        self._lock = threading.Lock()
        self._timer: threading.Thread | None = None

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        with self._lock:
            if kind == "compile_start":
                self._busy()
                self.open.append((event["compile_id"], event.get("frame", "")))
                self.stage = "capture"
            elif kind == "stage_start":
                self._busy()
                self.stage = f"{event['stage']} {event.get('role', '')} graph".strip()
            elif kind == "stage_end":
                self.graphs += 1
                self.kernels += event.get("kernel_count") or 0
                self.stage = "capture" if self.open else "run"
            elif kind == "compile_end":
                if self.open:
                    self.open.pop()
            else:
                return
            if not self.open and kind in ("compile_end", "stage_end"):
                self._idle()

    def _busy(self) -> None:
        if self.since is None:
            self.since = time.perf_counter()
            self.graphs = self.kernels = 0
            self._timer = threading.Thread(target=self._draw_loop, daemon=True)
            self._timer.start()

    def _idle(self) -> None:
        self.since = None
        if self.shown:
            self._write("\r\033[K")
            self.shown = False

    def line(self) -> str:
        frame = f"{self.open[-1][1]} [{self.open[-1][0]}]" if self.open else "graph"
        seconds = time.perf_counter() - (self.since or time.perf_counter())
        return (
            f"[ember] compiling {frame}: {self.stage}, {self.graphs} graphs "
            f"({self.kernels} kernels) {seconds:.1f} s"
        )

    def _draw_loop(self) -> None:
        started = self.since
        time.sleep(self.delay)
        while True:
            with self._lock:
                if self.since is None or self.since != started:
                    return
                self._write("\r\033[K" + self.line())
                self.shown = True
            time.sleep(REFRESH_SECONDS)

    def _write(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):  # a closed stream: nothing to show
            pass


_installed: list[ProgressLine] = []


def install() -> None:
    """Show the progress line from now on, where `enabled()` (called at `import ember`)."""
    if _installed or not enabled():
        return
    progress = ProgressLine()
    _installed.append(progress)
    add_sink(progress, full=False)
