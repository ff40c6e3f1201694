"""Warm start of capture: what capture made for a frame, kept on disk for later processes.

    compiled = ember.compile(model)   # a built-in backend, warm start on (the default)
    compiled(x)                       # a later process: no capture when a kept record's
                                      # guards pass; the graph goes to the backend, whose
                                      # warm-start entries (ember.warm_cache) then hit

A record (`dynamo_capture.portable`) holds the frame's guards, its graph, where each
graph input is read and the entry's output and replays. A later process rebuilds the
guards and checks them on the call's locals; when they pass it rebuilds the graph and
installs the entry without capturing. Where they fail, capture runs as usual.

What the guards do not see is the record's key, an ordered list of named parts
(logged under `EMBER_LOGS=cache`, as `ember.warm_cache`'s):

    schema      the record layout
    frame       the frame's function: its module, qualified name, code (every nested
                code object), defaults and closure contents
    backend     the backend's name
    options     the compile options, fullgraph, dynamic
    versions    Python, torch, triton, each Ember stage's version and source digest
    environment EMBER_* variables (but the cache's own) and TRITON_* ones

Functions and classes a guard names are found again by module and name and checked
against a fingerprint of their code; a module object an NN_MODULE guard held is the
one at the guard's source in the installing call (capture guards each attribute it
read of it). A frame with a graph break keeps its capture's guards and the break: a
later process makes the split (resume functions, branches) again from them, and each
compiled part keeps records under its own code. A graph with symbolic sizes keeps its
ShapeEnv as data, rebuilt with the installing call's sizes as hints. A break inside an
inlined call keeps the call (its function and receiver, found again where the frame's
locals hold them); the called function, a compiled frame of its own, keeps its own
records. Symbolic floats, a guard filter or a stance other than the default keep
nothing. Files: `<cache root>/capture/<key[:2]>/<key>/<record>.json`, written
atomically with a checksum; a faulty one is removed and the frame captured again.
A process reads a key's records once, at the first cache miss of any compiled callable
of the frame, and again only when the folder changed (a record kept or removed).
With `EMBER_REMOTE_CACHE`, the first record kept for a key is published
(`ember:v1:capture:<key>`) and fetched by a process that has none locally.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynamo_capture.portable import CaptureCache, NotPortable, frame_fingerprint
from ember.warm_cache import ENVELOPE_ERRORS, STATS, open_envelope
from guards import artifact_enabled, artifact_logger
from guards.cache_root import cache_folder, discard, load_record, payload_digest, store_record

__all__ = ["FileCaptureCache", "capture_cache"]

SCHEMA = "2"  # 2: graphs named as torch.compile names them, their frame kept
_MAX_RECORDS = 8  # per frame key: the newest are kept
_log = artifact_logger("cache")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class FileCaptureCache(CaptureCache):
    """Capture records of one compiled callable's frame, under the cache root."""

    def __init__(
        self, backend: str, options: Mapping[str, Any], fullgraph: bool, dynamic: bool | None
    ) -> None:
        self.backend = backend
        self.options = options
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.cache_dir = options.get("cache_dir")
        self._parts: list[tuple[str, str]] | None = None
        self._loaded: list[tuple[Path, dict]] | None = None

    def for_part(self) -> FileCaptureCache:
        """The capture records of a compiled part of a split frame: keyed by its own code."""
        return FileCaptureCache(self.backend, self.options, self.fullgraph, self.dynamic)

    # ------------------------------------------------------------ the key

    def parts(self, compiled: Any) -> list[tuple[str, str]] | None:
        """The key parts of `compiled`'s frame (once); None when the frame has no name."""
        if self._parts is None:
            from ember.warm_cache import (
                NotStorable,
                _environment_part,
                _options_part,
                _versions_part,
            )

            try:
                options = _options_part(self.options)
                frame = frame_fingerprint(compiled.frame)
                if compiled.frame.modules_by_structure:  # its modules guarded on structure
                    frame += ":modules by structure"
            except (NotStorable, NotPortable) as error:
                _log.info("capture of %s not kept: %s", compiled.frame.name, error)
                self._parts = []
                return None
            texts = [
                ("schema", SCHEMA),
                ("frame", frame),
                ("backend", self.backend),
                ("options", json.dumps([options, self.fullgraph, repr(self.dynamic)])),
                ("versions", _versions_part()),
                ("environment", _environment_part()),
            ]
            self._parts = [(name, _digest(text)[:16]) for name, text in texts]
        return self._parts or None

    def key(self, compiled: Any) -> str | None:
        parts = self.parts(compiled)
        return None if parts is None else _digest(repr(parts))[:40]

    def folder(self, compiled: Any) -> Path | None:
        key = self.key(compiled)
        return None if key is None else cache_folder("capture", key[:2], key, root=self.cache_dir)

    # ------------------------------------------------------------ CaptureCache

    def records(self, compiled: Any) -> list[dict[str, Any]]:
        """The records of the frame's key: read once per process (for every compiled
        callable of the frame, at every miss of theirs) until its folder changes."""
        folder = self.folder(compiled)
        if folder is None:
            self._loaded = []
            return []
        stamp = _stamp(folder)
        known = _KEPT.pop(folder, None)  # put back last: the most recently used
        if known is None or known.stamp != stamp:
            known = _Kept(stamp, self._read(compiled, folder))
            if artifact_enabled("cache"):
                _log.info(
                    "capture of %s: %d record(s) kept", compiled.frame.name, len(known.loaded)
                )
        _KEPT[folder] = known
        while len(_KEPT) > KEPT_FOLDERS:  # the least recently used folder is read again
            del _KEPT[next(iter(_KEPT))]
        self._loaded = known.loaded
        return [record for _, record in known.loaded]

    def _read(self, compiled: Any, folder: Path) -> list[tuple[Path, dict]]:
        STATS["capture_record_reads"] += 1
        loaded = []
        if folder.is_dir():
            paths = sorted(folder.glob("*.json"), key=_modified, reverse=True)
            for path in paths[:_MAX_RECORDS]:
                record = load_record(path)
                if isinstance(record, dict):
                    loaded.append((path, record))
        if not loaded:
            fetched = self._fetch_remote(compiled, folder)
            if fetched is not None:
                loaded.append(fetched)
        return loaded

    def keep(self, compiled: Any, record: dict[str, Any]) -> None:
        folder = self.folder(compiled)
        if folder is None:
            return
        name = _record_name(record)
        try:
            store_record(folder / f"{name}.json", record)
        except OSError as error:
            _log.info("capture of %s not kept: %s", compiled.frame.name, error)
            return
        STATS["captures_kept"] += 1
        _log.info("capture of %s kept: %s", compiled.frame.name, name)
        self._publish(compiled, record)

    # ------------------------------------------------------------ remote

    def _publish(self, compiled: Any, record: dict[str, Any]) -> None:
        """The record on the remote cache (the first one kept for a frame key stays there)."""
        from ember.remote_cache import remote_cache

        remote = remote_cache()
        key = self.key(compiled)
        if remote is None or key is None:
            return
        text = json.dumps(record, sort_keys=True)
        envelope = {"sha256": payload_digest(text.encode()), "payload": text}
        remote.put({f"capture:{key}": json.dumps(envelope).encode()})

    def _fetch_remote(self, compiled: Any, folder: Path) -> tuple[Path, dict] | None:
        from ember.remote_cache import remote_cache

        remote = remote_cache()
        key = self.key(compiled)
        if remote is None or key is None:
            return None
        data = remote.get("capture", key)
        if data is None:
            return None
        try:
            record = open_envelope(data)
        except ENVELOPE_ERRORS as error:
            remote.garbage(f"capture record {key}: {error}")
            return None
        path = folder / f"{_record_name(record)}.json"
        try:
            store_record(path, record)
        except OSError:
            pass
        STATS["capture_remote_hits"] += 1
        return path, record

    def install(
        self, compiled: Any, f_locals: dict[str, Any], f_globals: dict[str, Any], backend: Any
    ) -> Any:
        entry = super().install(compiled, f_locals, f_globals, backend)
        if entry is not None:
            STATS["capture_hits"] += 1
            _log.info("capture of %s installed from a kept record", compiled.frame.name)
        return entry

    def discard(self, compiled: Any, record: dict[str, Any], reason: str) -> None:
        for path, loaded in list(self._loaded or ()):
            if loaded is record:
                self._loaded.remove((path, loaded))  # the table's list: gone for all
                discard(path, f"it could not be installed: {reason}")

    def not_portable(self, compiled: Any, reason: str) -> None:
        _log.info("capture of %s not kept: %s", compiled.frame.name, reason)


@dataclasses.dataclass(slots=True)
class _Kept:
    """The records of one frame key's folder as read, and the folder's state then."""

    stamp: tuple[int, int] | None
    loaded: list[tuple[Path, dict]]


# Folder of a frame key -> its records read in this process. A cache miss of any
# compiled callable of the frame asks here; the folder is read again only once it
# changed (a record kept or removed, here or by another process: its mtime), or once
# KEPT_FOLDERS other frames were asked for since (least recently used first), so that
# a process compiling many different functions keeps a bounded number of records.
KEPT_FOLDERS = 256
_KEPT: dict[Path, _Kept] = {}


def _record_name(record: dict[str, Any]) -> str:
    """A record's file name: its guards and, for a symbolic graph, what its ShapeEnv
    assumed (records of equal guards whose compiles assumed other sizes are kept apart)."""
    return _digest(json.dumps([record["guards"], record.get("shape_env")], sort_keys=True))[:24]


def _stamp(folder: Path) -> tuple[int, int] | None:
    try:
        info = folder.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_ino


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def capture_cache(
    backend: Any, options: Mapping[str, Any], fullgraph: bool, dynamic: bool | None
) -> FileCaptureCache | None:
    """The capture cache of one compiled callable: a built-in backend named by a string,
    warm start on; None otherwise (a backend callable may read anything of the graph)."""
    from ember.warm_cache import warm_start_enabled

    if not isinstance(backend, str) or not warm_start_enabled(options):
        return None
    return FileCaptureCache(backend, options, fullgraph, dynamic)
