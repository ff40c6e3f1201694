"""The one folder every file Ember writes goes under, and how files there are written and read.

    root = cache_root()                        # $EMBER_CACHE_DIR, else ~/.cache/ember
    lib = cache_folder("cpp", "lib")           # made 0700, a real folder (never a symlink)
    write_private(lib / "x.json", b"...")      # atomic: private temp file, fsync, rename
    data = read_private(lib / "x.json")        # None when missing; CacheEntryError when not a file
    store_record(path, {"a": 1}); load_record(path)   # JSON with a checksum of its payload

Why it is built this way:
- One root, owned by the user and made 0700: another local user can neither read
  what is cached (generated code holds guarded values) nor plant files that a
  later run loads (a kernel library is code). A root owned by someone else, or
  writable by everyone, is refused; a root that cannot be made or written (a
  read-only or missing cache, an unwritable HOME) is replaced, for this process,
  by a private temporary folder, with one warning. Compiling never fails because
  of the cache.
- Writes go to a fresh temporary name opened with O_CREAT | O_EXCL | O_NOFOLLOW
  (mode 0600), are fsync-ed, then renamed over the target: a reader sees the old
  file or the whole new one, never half of one, and a symlink planted at the
  target is replaced, not followed.
- Reads open with O_NOFOLLOW and accept only regular files. Callers check a
  payload's checksum before using it; a faulty entry is `discard`-ed (with one
  warning naming the file) and built again.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

__all__ = [
    "CacheEntryError",
    "CacheWarning",
    "cache_folder",
    "cache_root",
    "discard",
    "load_record",
    "payload_digest",
    "private_temporary_root",
    "read_private",
    "store_record",
    "write_private",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_fallback: list[Path] = []  # the private temporary root of this process, once made
_warned: set[str] = set()


class CacheWarning(UserWarning):
    """The cache could not be used as it is: a faulty entry was rebuilt, or a folder replaced."""


class CacheEntryError(OSError):
    """A cache entry that is not what it should be (a folder, a symlink, a bad checksum)."""


def warn_once(message: str) -> None:
    """Warn with `message` once per process."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, CacheWarning, stacklevel=3)


def payload_digest(data: bytes) -> str:
    """The checksum cache entries carry: sha256, hex."""
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------- the root


def _requested_root(requested: str | os.PathLike | None) -> Path:
    if requested is None:
        requested = os.environ.get("EMBER_CACHE_DIR") or None
    if requested is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
        requested = os.path.join(base, "ember")
    # NOTE: absolute, so that nothing recorded or loaded depends on the working directory.
    return Path(os.path.abspath(os.path.expanduser(os.fspath(requested))))


def _unusable(root: Path) -> str | None:
    """Why `root` (made if missing) cannot be the cache root; None when it can."""
    try:
        if not os.path.lexists(root):
            os.makedirs(root.parent, exist_ok=True)
            try:
                os.mkdir(root, 0o700)
                os.chmod(root, 0o700)
            except FileExistsError:
                pass
        info = os.stat(root)
    except (OSError, RuntimeError) as error:
        return f"cannot be made ({error})"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"is owned by user id {info.st_uid}, not by this user ({os.getuid()})"
    if info.st_mode & stat.S_IWOTH:
        return "is writable by every user"
    if not os.access(root, os.W_OK | os.X_OK):
        return "is not writable"
    return None


def private_temporary_root(requested: Path, why: str) -> Path:
    """This process's private temporary cache root, used instead of `requested`.

    Made, with one warning, the first time any cache folder cannot be used.
    """
    if not _fallback:
        folder = Path(tempfile.mkdtemp(prefix="ember-cache-"))  # 0700, a fresh name
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _fallback.append(folder)
        warn_once(
            f"the ember cache folder {requested} {why}; this process uses the private "
            f"temporary folder {folder} instead (nothing compiled now is kept for later "
            "runs). Set EMBER_CACHE_DIR to a folder of your own to keep the cache."
        )
    return _fallback[0]


def cache_root(requested: str | os.PathLike | None = None) -> Path:
    """The absolute cache root: `requested`, else $EMBER_CACHE_DIR, else ~/.cache/ember.

    Made 0700 when missing; one not owned by this user, writable by everyone, or
    not writable is replaced by a private temporary folder (one warning).
    """
    try:
        root = _requested_root(requested)
    except (OSError, RuntimeError) as error:  # no home folder
        return private_temporary_root(Path("~/.cache/ember"), f"cannot be found ({error})")
    why = _unusable(root)
    return root if why is None else private_temporary_root(root, why)


def _make_folder(path: Path) -> None:
    """A real folder of this user at `path`; whatever else is there is removed first."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        discard(path, "a folder was expected there")
        info = None
    if info is None:
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)
        except FileExistsError:  # made by another process meanwhile
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                raise
    elif hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise CacheEntryError(f"{path} is owned by another user")


def cache_folder(*parts: str, root: str | os.PathLike | None = None) -> Path:
    """The folder `root/parts...`, each level a real folder made 0700.

    When the folders cannot be made or written, the same folders under a private
    temporary root (one warning).
    """
    base = cache_root(root)
    for attempt in range(2):
        folder = base
        try:
            for part in parts:
                folder = folder / part
                _make_folder(folder)
            if os.access(folder, os.W_OK | os.X_OK):
                return folder
            why = "is not writable"
        except OSError as error:
            why = f"cannot be used ({error})"
        if attempt == 0:
            base = private_temporary_root(folder, why)
    raise CacheEntryError(f"no usable cache folder for {'/'.join(parts)}: {folder} {why}")


# ----------------------------------------------------------------- entries


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically, through a private temporary file (0600)."""
    temporary = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    fd = os.open(temporary, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.replace(temporary, path)
        except IsADirectoryError:
            discard(path, "a file was expected there, not a folder")
            os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def read_private(path: Path) -> bytes | None:
    """The bytes of the regular file `path`; None when missing.

    A symlink or a folder there raises CacheEntryError.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:  # ELOOP: a symlink
        raise CacheEntryError(f"{path} cannot be opened as a file ({error})") from error
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise CacheEntryError(f"{path} is not a regular file")
        return handle.read()


def discard(path: Path, why: str) -> None:
    """Remove the faulty entry `path` (file, symlink or folder), warning once that it was."""
    warn_once(f"ember cache entry {path} was faulty ({why}); it was removed and is rebuilt")
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def store_record(path: Path, payload: Any) -> None:
    """Write the JSON `payload` with its checksum, atomically."""
    text = json.dumps(payload, sort_keys=True)
    envelope = {"sha256": payload_digest(text.encode()), "payload": text}
    write_private(path, json.dumps(envelope).encode())


def load_record(path: Path) -> Any | None:
    """The payload `store_record` wrote at `path`; None when missing or faulty.

    A faulty record (undecodable, truncated, wrong checksum, a folder) is
    discarded with one warning naming the file.
    """
    try:
        data = read_private(path)
        if data is None:
            return None
        envelope = json.loads(data.decode())
        text = envelope["payload"]
        if payload_digest(text.encode()) != envelope["sha256"]:
            raise ValueError("its checksum does not match its contents")
        return json.loads(text)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        discard(path, f"{type(error).__name__}: {error}")
        return None
