"""The cache's command line: what it holds, emptying it, and evicting what was least used.

    python -m ember.cache info                 # the root, and the size and count per kind
    python -m ember.cache prune --max-size 2G  # least recently used first, down to the bound
    python -m ember.cache clear                # everything under the root

The bound is `--max-size`, else $EMBER_CACHE_SIZE, else 4G (suffixes K, M, G).
A file's last use is its modification time: a warm-start hit touches its entry and
the kernel libraries it loads. Pruning is safe while other processes compile or
load: files are removed, never rewritten, so a reader finds a whole file or none
and compiles again; a library removed goes with the index records naming it; two
prunes never run at once (a lock file under the root).

Triton's own JIT cache lives under `triton/jit/` where the user has not set
TRITON_CACHE_DIR (`inductor_codegen.codegen.triton.jit_cache`): `info` counts it
(the `triton-jit` line), `clear` empties it, and `prune` removes a compiled kernel's
folder whole (its last use: its newest file), never some of its files, which Triton
would read as a kernel to load and fail on.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from guards.cache_root import cache_root, load_record

__all__ = ["cache_info", "clear", "main", "parse_size", "prune"]

DEFAULT_SIZE = "4G"
KINDS = {
    "warm": "warm-start entries",
    "cpp": "C++ kernel libraries and their index",
    "wrappers": "generated wrappers",
    "triton": "Triton kernel modules and autotuning",
    "triton-jit": "Triton's compiled kernels (its JIT cache, triton/jit)",
    "guards": "guard functions (EMBER_LOGS=guards)",
}
_LOCK = ".prune.lock"
_TRITON_JIT = ("triton", "jit")  # Triton's JIT cache: one folder per compiled kernel


def parse_size(text: str) -> int:
    """`"512M"` -> bytes; K, M, G, T suffixes are powers of 1024."""
    text = text.strip().upper().removesuffix("B")
    scale = 1
    for suffix, power in (("K", 1), ("M", 2), ("G", 3), ("T", 4)):
        if text.endswith(suffix):
            scale, text = 1024**power, text[:-1]
            break
    try:
        value = float(text) * scale
    except ValueError:
        raise ValueError(f"{text!r} is not a size (examples: 500M, 4G, 1048576)") from None
    if value < 0:
        raise ValueError("a size is not negative")
    return int(value)


def size_bound(max_size: str | None = None) -> int:
    return parse_size(max_size or os.environ.get("EMBER_CACHE_SIZE") or DEFAULT_SIZE)


def _files(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            yield path, info


def cache_info(root: Path | None = None) -> dict[str, tuple[int, int]]:
    """kind -> (files, bytes) under the cache root."""
    root = root or cache_root()
    found = {}
    for kind in (*KINDS, "other"):
        found[kind] = (0, 0)
    for path, info in _files(root):
        if path.name == _LOCK:
            continue
        parts = path.relative_to(root).parts
        kind = "triton-jit" if parts[:2] == _TRITON_JIT else parts[0]
        kind = kind if kind in KINDS else "other"
        count, size = found[kind]
        found[kind] = (count + 1, size + info.st_size)
    return found


@contextlib.contextmanager
def _pruning(root: Path) -> Iterator[bool]:
    """Held while pruning; yields False when another process is pruning already."""
    fd = os.open(root / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _unlink(path: Path) -> int:
    try:
        size = os.lstat(path).st_size
        os.unlink(path)
        return size
    except FileNotFoundError:
        return 0


def _drop_index_records(root: Path, libraries: set[str]) -> None:
    """Remove the kernel index records that name a removed library."""
    index = root / "cpp" / "index"
    if not libraries or not index.is_dir():
        return
    for path in index.iterdir():
        record = load_record(path)
        if isinstance(record, dict) and record.get("library") in libraries:
            _unlink(path)


def prune(max_bytes: int, root: Path | None = None) -> tuple[int, int]:
    """Remove least recently used files until the cache holds at most `max_bytes`.

    Returns (files removed, bytes freed). Index records are kept while their
    library stays (they are tiny and say where a kernel is).
    """
    root = root or cache_root()
    with _pruning(root) as mine:
        if not mine:
            return 0, 0
        units = _eviction_units(root)
        total = sum(size for _, _, size in units)
        removed, freed, libraries = 0, 0, set()
        for _, paths, _ in sorted(units, key=lambda unit: unit[0]):
            if total - freed <= max_bytes:
                break
            for path in paths:
                freed += _unlink(path)
                removed += 1
                if path.suffix == ".so":
                    libraries.add(path.name)
            if paths[0].parent.parent == root.joinpath(*_TRITON_JIT):
                with contextlib.suppress(OSError):
                    paths[0].parent.rmdir()  # a Triton kernel's folder, now empty
        _drop_index_records(root, libraries)
        return removed, freed


def _eviction_units(root: Path) -> list[tuple[float, list[Path], int]]:
    """(last use, files, bytes) of what `prune` removes at once: a file, or the folder of
    one kernel in Triton's JIT cache (its files go together, its last use the newest)."""
    units: list[tuple[float, list[Path], int]] = []
    kernels: dict[Path, list] = {}
    for path, info in _files(root):
        parts = path.relative_to(root).parts
        if path.name == _LOCK or "index" in parts:
            continue
        if parts[:2] == _TRITON_JIT and len(parts) == 4:
            unit = kernels.setdefault(path.parent, [0.0, [], 0])
            unit[0] = max(unit[0], info.st_mtime)
            unit[1].append(path)
            unit[2] += info.st_size
            continue
        units.append((info.st_mtime, [path], info.st_size))
    units.extend((mtime, paths, size) for mtime, paths, size in kernels.values())
    return units


def clear(root: Path | None = None) -> int:
    """Remove everything under the cache root (the root stays); returns the bytes freed."""
    root = root or cache_root()
    freed = sum(info.st_size for _, info in _files(root))
    for entry in root.iterdir():
        if entry.name == _LOCK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            _unlink(entry)
    return freed


def _human(size: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if size < 1024 or unit == "G":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}T"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ember.cache", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="the cache root, and files and bytes per kind")
    commands.add_parser("clear", help="remove everything under the cache root")
    pruning = commands.add_parser("prune", help="remove least recently used files down to a size")
    pruning.add_argument(
        "--max-size", help=f"the bound (default $EMBER_CACHE_SIZE or {DEFAULT_SIZE})"
    )
    args = parser.parse_args(argv)
    root = cache_root()
    if args.command == "info":
        found = cache_info(root)
        print(f"cache root: {root}")
        print(f"size bound: {_human(size_bound())} (python -m ember.cache prune)")
        for kind, (count, size) in found.items():
            if count or kind in KINDS:
                print(f"  {kind:<10} {count:>7} files {_human(size):>8}  {KINDS.get(kind, '')}")
        total = sum(size for _, size in found.values())
        print(f"  {'total':<10} {sum(c for c, _ in found.values()):>7} files {_human(total):>8}")
    elif args.command == "clear":
        print(f"removed {_human(clear(root))} from {root}")
    else:
        try:
            bound = size_bound(args.max_size)
        except ValueError as error:
            parser.error(str(error))
        start = time.perf_counter()
        removed, freed = prune(bound, root)
        print(
            f"removed {removed} files ({_human(freed)}) from {root} in "
            f"{time.perf_counter() - start:.2f}s; bound {_human(bound)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
