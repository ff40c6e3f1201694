"""The remote cache: compiled entries and kernel libraries shared through Redis.

    EMBER_REMOTE_CACHE=redis://host:6379/0 python train.py

A process that compiles an entry publishes it, with the kernel libraries it calls,
after storing it locally; a process that misses locally fetches before compiling.
Keys (`ember:<schema>:` prefixed): `entry:<key>` (the entry record, JSON with its
checksum), `kernel:<kernel key>` (the name of the library holding a kernel),
`library:<sha256>.so` (the library's bytes, checked against their name), and for an
entry of Triton graphs `triton:<key>` (the files of Triton's JIT cache holding its
compiled kernels and the launchers Triton built for them, JSON: path -> sha256) and `binary:<sha256>` (a file's bytes, checked
against their name). A Triton kernel compiled at its first launch rather than in the
background (one with scalar arguments) is not built when its entry is published, so
it is compiled again where the entry is fetched.

The remote is an optimization, never a dependency: when it is down, slow (each
request waits at most `EMBER_REMOTE_CACHE_TIMEOUT` seconds, default 2) or answers
with something that is not what was stored, the process warns once and goes on with
its local cache alone. redis-py is needed only when the variable is set
(`pip install redis`).

What the remote holds is code (kernel libraries, wrappers run by the process that
loads them): point it only at a Redis your team controls, as with any build cache.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable

from guards import artifact_logger
from guards.cache_root import payload_digest, warn_once

__all__ = ["RemoteCache", "remote_cache"]

SCHEMA = "v1"
_LIBRARY_NAME = re.compile(r"[0-9a-f]{64}\.so")
_DIGEST = re.compile(r"[0-9a-f]{64}")
_log = artifact_logger("cache")
_remotes: dict[str, RemoteCache | None] = {}


class RemoteCache:
    """One Redis database; every failure turns it off for this process (one warning)."""

    def __init__(self, url: str, timeout: float) -> None:
        import redis  # an optional dependency: only when EMBER_REMOTE_CACHE is set

        self.url = url
        self.client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self.prefix = f"ember:{SCHEMA}:"
        self.working = True
        self.stats = {"hits": 0, "misses": 0, "published": 0}

    def _off(self, error: BaseException, doing: str) -> None:
        self.working = False
        warn_once(
            f"the remote ember cache {self.url} failed while {doing} "
            f"({type(error).__name__}: {error}); this process uses its local cache only"
        )

    def get(self, kind: str, name: str) -> bytes | None:
        if not self.working:
            return None
        try:
            value = self.client.get(self.prefix + f"{kind}:{name}")
        except Exception as error:  # noqa: BLE001 - any failure of the remote degrades
            self._off(error, f"fetching {kind} {name}")
            return None
        if value is not None and not isinstance(value, bytes):
            self.garbage(f"{kind} {name} is a {type(value).__name__}, not bytes")
            return None
        self.stats["hits" if value is not None else "misses"] += 1
        return value

    def put(self, items: dict[str, bytes]) -> None:
        """Store `items` (`kind:name` -> bytes) in one round trip; existing keys are kept."""
        if not self.working or not items:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for name, value in items.items():
                pipe.set(self.prefix + name, value, nx=True)
            pipe.execute()
        except Exception as error:  # noqa: BLE001
            self._off(error, "publishing")
            return
        self.stats["published"] += len(items)

    def garbage(self, why: str) -> None:
        """What the remote answered is not what ember stores: stop using it."""
        self._off(ValueError(why), "reading")

    # ------------------------------------------------------------ kernel libraries

    def fetch_kernel(self, kernel_key: str) -> tuple[str, bytes] | None:
        """(library name, library bytes) of a kernel, checked against the name; None if absent."""
        name = self.get("kernel", kernel_key)
        if name is None:
            return None
        text = name.decode("ascii", "replace")
        if not _LIBRARY_NAME.fullmatch(text):
            self.garbage(f"kernel {kernel_key} names {text[:80]!r}, not a library")
            return None
        data = self.get("library", text)
        if data is None:
            return None
        if payload_digest(data) != text[:-3]:
            self.garbage(f"library {text} does not match its checksum")
            return None
        return text, data

    # ------------------------------------------------------------ Triton binaries

    def fetch_binaries(self, key: str, present: Callable[[str, str], bool]) -> dict[str, bytes]:
        """The Triton cache files of entry `key` that `present(path, sha256)` says are not
        here, each checked against its checksum; {} where none are published or one fails."""
        index = self.get("triton", key)
        if index is None:
            return {}
        try:
            files = json.loads(index)
            if not isinstance(files, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and _DIGEST.fullmatch(v)
                for k, v in files.items()
            ):
                raise ValueError("not a map of paths to checksums")
        except ValueError as error:
            self.garbage(f"the Triton files of entry {key}: {error}")
            return {}
        fetched = {}
        for path, digest in files.items():
            if present(path, digest):
                continue
            data = self.get("binary", digest)
            if data is None:
                return {}
            if payload_digest(data) != digest:
                self.garbage(f"binary {digest} does not match its checksum")
                return {}
            fetched[path] = data
        return fetched


def remote_cache() -> RemoteCache | None:
    """The remote cache EMBER_REMOTE_CACHE names (one per URL and process); None when unset."""
    url = os.environ.get("EMBER_REMOTE_CACHE", "").strip()
    if not url:
        return None
    if url not in _remotes:
        try:
            timeout = float(os.environ.get("EMBER_REMOTE_CACHE_TIMEOUT", "2"))
        except ValueError:
            timeout = 2.0
        try:
            _remotes[url] = RemoteCache(url, timeout)
        except Exception as error:  # noqa: BLE001 - no redis-py, or a malformed URL
            warn_once(
                f"EMBER_REMOTE_CACHE={url} cannot be used ({type(error).__name__}: {error}); "
                "this process uses its local cache only (the remote cache needs redis-py: "
                "pip install redis)"
            )
            _remotes[url] = None
        _log.info("remote cache: %s", url)
    remote = _remotes[url]
    return remote if remote is not None and remote.working else None
