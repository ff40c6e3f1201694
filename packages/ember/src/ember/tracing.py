"""The structured compile trace: every compile's artifacts and times as JSON lines.

    EMBER_TRACE_DIR=trace python train.py        # the whole process
    with ember.trace("trace"):                   # or a region of it
        compiled(x)
    python -m ember.report trace -o report.html  # read it as one page

Each process (a forked child too) writes one file,
`<dir>/ember_trace_<pid>_<start>.jsonl`: one JSON
object a line, in the order things happened. A line holds `kind`, `compile_id`
("<frame id>/<attempt>"; null outside a compile), `time` and the kind's fields:

    process           pid, argv, versions: the first line
    compile_start     frame, frame_id, attempt, parent_frame_id (a part of a split
                      frame), filename, line, source (the user's function), entries
                      (cached before this compile)
    entry             guards (in words), guard_code, entry_code (the frame's new
                      code, as Python), graph_code (the captured graph), eager,
                      graph_break_reason, capture_seconds, backend_seconds
    graph_break       frame, reason, where (the user's file, line, function, text),
                      handling (split around an eager part, or the frame runs eagerly)
    recompile         frame, failures (each cached entry's compile id and the guard
                      it failed), limit_hit, limit
    cache_hit         entry_compile_id, hits (at the 1st, 2nd, 4th, 8th... hit)
    aot_graph         name (joint, inference, forward, backward), text, seconds
    inductor_pass     role (forward, backward, inference), name (lower, schedule,
                      codegen = kernel sources, build, wrapper, load), text, seconds
    compiled_graph    role, kernel_count, fallbacks (ops run by ATen), wrapper_path
    stage_start/_end  stage, role: a backend compile of one graph began / ended
    log               level, logger, message: ember's warnings while tracing
    compile_end       seconds, error

A text field longer than 2,000 characters is written to a file beside the trace,
`<file stem>/<n>_<kind>_<field>.txt`, and the line holds `{"file": "<that path,
relative to the dir>"}` instead. The folder is made 0700 and every file 0600,
written with guards.cache_root's private, atomic writes (a symlink planted there is
never followed).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from guards.cache_root import write_private
from guards.trace_events import add_sink, remove_sink

__all__ = ["TRACE_DIR_VARIABLE", "TraceWriter", "trace"]

TRACE_DIR_VARIABLE = "EMBER_TRACE_DIR"
INLINE_LIMIT = 2000  # characters of text kept on the line; longer goes to a file
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_writers: dict[Path, TraceWriter] = {}
_lock = threading.Lock()


def _private_folder(folder: Path) -> Path:
    """`folder`, made 0700 when missing; an existing one must be a real folder of this user."""
    folder = Path(os.path.abspath(os.path.expanduser(os.fspath(folder))))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise NotADirectoryError(f"the trace folder {folder} is not a folder (a symlink?)")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise PermissionError(f"the trace folder {folder} belongs to another user")
    return folder


class TraceWriter:
    """A sink for guards' trace events: one JSON-lines file of this process in `folder`."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = _private_folder(Path(folder))
        self._lock = threading.RLock()  # reopening after a fork writes under it
        self._log_handler = _TraceLogHandler(self)
        self._open()

    def _open(self) -> None:
        """This process's file: a fresh name, created here (O_EXCL), never a planted one."""
        self.pid = os.getpid()
        stem = f"ember_trace_{self.pid}_{time.strftime('%Y%m%d_%H%M%S')}"
        self.path = self.folder / f"{stem}.jsonl"
        self.artifacts = self.folder / stem
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _NOFOLLOW | _CLOEXEC
        self._fd = os.open(self.path, flags, 0o600)
        self._count = itertools.count()
        self._write({"kind": "process", "compile_id": None, "time": time.time(),
                     **_process_info()})  # fmt: skip

    def __call__(self, event: dict[str, Any]) -> None:
        if os.getpid() != self.pid:  # a forked child (a data-loader worker): its own file
            with self._lock:
                self._open()
        self._write(event)

    def _write(self, event: dict[str, Any]) -> None:
        with self._lock:
            number = next(self._count)
            line = {key: self._field(number, event["kind"], key, v) for key, v in event.items()}
            data = (json.dumps(line, default=str) + "\n").encode()
            os.write(self._fd, data)

    def _field(self, number: int, kind: str, key: str, value: Any) -> Any:
        if not isinstance(value, str) or len(value) <= INLINE_LIMIT:
            return value
        if not os.path.lexists(self.artifacts):
            os.mkdir(self.artifacts, 0o700)
        if not stat.S_ISDIR(os.lstat(self.artifacts).st_mode):  # NOTE: never a symlink
            raise NotADirectoryError(f"{self.artifacts} is not a folder of this trace")
        name = f"{number:05d}_{kind}_{key}.txt"
        write_private(self.artifacts / name, value.encode())
        return {"file": f"{self.artifacts.name}/{name}", "chars": len(value)}

    def start(self) -> None:
        add_sink(self)
        logging.getLogger("ember").addHandler(self._log_handler)

    def stop(self) -> None:
        remove_sink(self)
        logging.getLogger("ember").removeHandler(self._log_handler)

    def close(self) -> None:
        self.stop()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class _TraceLogHandler(logging.Handler):
    """ember's log records (warnings, and artifacts turned on) as `log` events."""

    def __init__(self, writer: TraceWriter) -> None:
        super().__init__(logging.INFO)
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        from guards.trace_events import current_compile_id

        self.writer(
            {
                "kind": "log",
                "compile_id": current_compile_id(),
                "time": record.created,
                "level": record.levelname,
                "logger": record.name,
                "message": record.getMessage(),
            }
        )


def _process_info() -> dict[str, Any]:
    import torch

    return {
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
    }


def _writer(folder: str | os.PathLike) -> TraceWriter:
    key = Path(os.path.abspath(os.path.expanduser(os.fspath(folder))))
    with _lock:
        writer = _writers.get(key)
        if writer is None:
            writer = _writers[key] = TraceWriter(key)
        return writer


@contextlib.contextmanager
def trace(folder: str | os.PathLike) -> Iterator[Path]:
    """Record every compile inside the block into this process's trace file in `folder`.

        with ember.trace("trace") as path:
            compiled(x)
        # python -m ember.report trace -o report.html

    Yields the JSON-lines file's path. Entering again with the same folder appends
    to the same file. Stable API.
    """
    writer = _writer(folder)
    writer.start()
    try:
        yield writer.path
    finally:
        writer.stop()


def start_from_environment() -> None:
    """Trace the whole process when EMBER_TRACE_DIR names a folder (read at `import ember`).

    A folder that cannot be used warns once and the process runs untraced.
    """
    folder = os.environ.get(TRACE_DIR_VARIABLE)
    if not folder:
        return
    try:
        writer = _writer(folder)
    except OSError as error:
        import warnings

        warnings.warn(
            f"{TRACE_DIR_VARIABLE}={folder!r} cannot be used ({error}); this process is not traced",
            RuntimeWarning,
            stacklevel=3,
        )
        return
    writer.start()
