"""Triton's JIT cache: under ember's cache root, and its binaries as files to share.

Triton compiles each kernel module ember writes (`<root>/triton/kernels/`) to device
binaries, kept in its own cache folder: `$TRITON_CACHE_DIR`, else `~/.triton/cache`.
Left there, a warm ember cache (or one filled from the remote) still compiles every
Triton kernel again on a machine whose `~/.triton` is empty, and `python -m ember.cache
clear` leaves the binaries behind. So, unless the user chose Triton's folder
(`TRITON_CACHE_DIR` set, or `triton.knobs.cache.dir` assigned), ember points Triton at

    <root>/triton/jit/<Triton's key>/<kernel function>.{cubin,json,ptx,...}
                                     __grp__<kernel function>.json

(made 0700 with the rest of the root, never a shared temporary folder) by setting
`TRITON_CACHE_DIR` for this process and the processes it starts, the first time a
Triton graph is compiled or loaded.

Each of Triton's cache folders holds one compiled kernel: the group file
`__grp__<function>.json` names its files. Ember's kernel functions are named after a
digest of their source (`runtime.kernel_function_name`), so the folders of a graph's
kernels are found by name: `kernel_binaries` reads them, `install_kernel_binaries`
writes them back on another machine (the remote cache, `ember.warm_cache`), each file
checked against its name and written atomically, the group file last (Triton reads a
folder only through its group file). The launchers Triton builds per argument signature
(`<Triton's key>/__triton_launcher<Python's extension suffix>.so`, and its `cuda_utils`
module) are host code built with the C compiler, about a quarter of a second each: a
process that fetched a graph's kernels but built its twenty launchers again spent five
seconds of an eight-second first call doing so (Llama, H200). `launcher_binaries` reads
them, so they travel with the kernels; Triton's key for one is a digest of its source and
the platform, and the file's suffix names the Python it was built for, so a launcher is
only ever loaded by the Python and platform it was built for.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from guards.cache_root import cache_folder, read_private, write_private

__all__ = [
    "JIT_FOLDER",
    "install_kernel_binaries",
    "jit_cache_dir",
    "kernel_binaries",
    "launcher_binaries",
    "use_jit_cache_under",
]

JIT_FOLDER = "jit"  # under <root>/triton
_VARIABLE = "TRITON_CACHE_DIR"
# Triton names a cache folder by its key in base32; a file by the kernel and a suffix.
_FOLDER_NAME = re.compile(r"[A-Za-z0-9_-]{8,128}")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")
_set_by_ember: str | None = None  # the value ember gave TRITON_CACHE_DIR, if it did


def _chosen_by_user() -> bool:
    """The user chose Triton's cache folder: the variable (not set by ember), or the knob."""
    value = os.environ.get(_VARIABLE, "").strip()
    if value and value != _set_by_ember:
        return True
    triton = sys.modules.get("triton")
    knobs = getattr(getattr(triton, "knobs", None), "cache", None)
    return knobs is not None and "dir" in vars(knobs)


def use_jit_cache_under(cache_dir: str | os.PathLike | None = None) -> Path | None:
    """Point Triton's JIT cache at `<root>/triton/jit` (root: `cache_dir`, else ember's
    cache root) unless the user chose Triton's folder; the folder, or None where the
    user's choice stands."""
    global _set_by_ember
    if _chosen_by_user():
        return None
    folder = cache_folder("triton", JIT_FOLDER, root=cache_dir)
    if _set_by_ember != str(folder):
        os.environ[_VARIABLE] = _set_by_ember = str(folder)
    return folder


def jit_cache_dir() -> Path:
    """The folder Triton's JIT cache uses now."""
    triton = sys.modules.get("triton")
    knobs = getattr(getattr(triton, "knobs", None), "cache", None)
    if knobs is not None and "dir" in vars(knobs):
        return Path(vars(knobs)["dir"])
    value = os.environ.get(_VARIABLE, "").strip()
    if value:
        return Path(value)
    home = os.environ.get("TRITON_HOME", "").strip() or os.path.expanduser("~")
    return Path(home) / ".triton" / "cache"


def _cache_folders(folder: Path) -> Iterator[tuple[str, str, list[str]]]:
    """(name, path, file names less half-written `.tmp` ones) of each of Triton's cache
    folders under `folder`; none where it cannot be read."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if not (entry.is_dir(follow_symlinks=False) and _FOLDER_NAME.fullmatch(entry.name)):
            continue
        try:
            names = [n for n in os.listdir(entry.path) if not n.endswith(".tmp")]
        except OSError:
            continue
        yield entry.name, entry.path, names


def _read_files(name: str, path: str, files: Iterable[str]) -> dict[str, bytes]:
    """`<name>/<file>` -> bytes for each of `files` in the folder at `path` still readable."""
    found = {}
    for file in files:
        try:
            data = read_private(Path(path) / file)
        except OSError:
            data = None
        if data is not None:
            found[f"{name}/{file}"] = data
    return found


def kernel_binaries(functions: Iterable[str], folder: Path | None = None) -> dict[str, bytes]:
    """`<cache folder>/<file>` -> bytes, for every cache folder of Triton's (`folder`, else
    the one in use) holding a compiled kernel of one of `functions`; {} where none is
    built yet (a kernel is compiled in the background, or at its first launch)."""
    wanted = {f"__grp__{name}.json" for name in functions}
    found: dict[str, bytes] = {}
    for name, path, names in _cache_folders(folder or jit_cache_dir()):
        if not wanted.intersection(names):
            continue
        files = _read_files(name, path, (n for n in names if _FILE_NAME.fullmatch(n)))
        if any(relative.split("/")[1].startswith("__grp__") for relative in files):
            found.update(files)
    return found


_LAUNCHER_NAME = re.compile(r"(__triton_launcher|cuda_utils)[A-Za-z0-9_.-]{0,100}\.so")


def launcher_binaries(folder: Path | None = None) -> dict[str, bytes]:
    """`<cache folder>/<file>` -> bytes, for every cache folder of Triton's (`folder`, else
    the one in use) that holds only launcher modules Triton built (`__triton_launcher*.so`,
    `cuda_utils*.so`); {} where there are none."""
    found: dict[str, bytes] = {}
    for name, path, names in _cache_folders(folder or jit_cache_dir()):
        if names and all(_LAUNCHER_NAME.fullmatch(n) for n in names):
            found.update(_read_files(name, path, names))
    return found


def install_kernel_binaries(files: Mapping[str, bytes], folder: Path | None = None) -> int:
    """Write `files` (as `kernel_binaries` gives them) into Triton's cache (`folder`, else
    ember's own: nothing is written into a folder the user chose); the number written.
    A name that is not a cache folder and file of Triton's raises ValueError."""
    if folder is None:
        if _chosen_by_user() or _set_by_ember is None:
            return 0
        folder = Path(_set_by_ember)
    by_folder: dict[str, dict[str, bytes]] = {}
    for relative, data in files.items():
        parts = relative.split("/")
        if len(parts) != 2 or not _FOLDER_NAME.fullmatch(parts[0]):
            raise ValueError(f"{relative!r} is not a Triton cache file")
        if not _FILE_NAME.fullmatch(parts[1]) or not isinstance(data, bytes):
            raise ValueError(f"{relative!r} is not a Triton cache file")
        by_folder.setdefault(parts[0], {})[parts[1]] = data
    written = 0
    for name, contents in by_folder.items():
        target = cache_folder(name, root=folder)
        # the group file last: Triton finds a compiled kernel only through it
        for file_name in sorted(contents, key=lambda n: n.startswith("__grp__")):
            path = target / file_name
            if read_private(path) == contents[file_name]:
                continue
            write_private(path, contents[file_name])
            written += 1
    return written
