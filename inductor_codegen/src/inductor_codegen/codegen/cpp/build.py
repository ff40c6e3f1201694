"""Compiling generated C++ with the host compiler, in parallel, cached on disk.

Each kernel's cache key is an ordered list of named parts (schema version,
source, compiler and its version, flags), each hashed; the function is named
after the key, so identical kernels (the same layer repeated) compile once.
Missing kernels are split into one chunk per CPU core, each chunk compiled by
its own compiler process into one shared library, all chunks at once.
An index record per kernel names its library (relative to the cache, with a
checksum); an entry that is faulty in any way is removed, with one warning
naming the file, and recompiled, never trusted.

Inside `deferred_builds()` the missing kernels of every graph compiled are built
together when the block ends, in one compiler process per core, instead of one
build per graph: each compiler process costs about 0.1 s before it reads a kernel
(the C++ headers), which a model cut into several graphs (ember's regions) would
pay for every graph. Until then a graph's wrapper holds `DeferredKernel`s: the
block's end puts the built functions in their place; one called earlier builds
the batch first.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import ctypes.util
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from guards import artifact_logger
from guards.cache_root import (
    cache_folder,
    discard,
    load_record,
    payload_digest,
    private_temporary_root,
    read_private,
    store_record,
    write_private,
)
from inductor_codegen import runtime
from inductor_codegen.codegen.cpp.prelude import PRELUDE
from inductor_codegen.codegen.cpp.vector_math import needed_functions, vector_math_source
from inductor_codegen.codegen.kernel import KernelSource
from inductor_codegen.errors import CppCompileError
from inductor_codegen.options import default_cache_dir

__all__ = ["CompilerConfig", "DeferredKernel", "KernelLibrary", "default_cache_dir"]
__all__ += ["bind_deferred", "deferred_builds", "wrapper_namespace"]

SCHEMA_VERSION = "2"
CTYPES = {
    "int64_t": ctypes.c_int64,
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,
}


BASE_FLAGS = (
    "-O3",
    "-march=native",
    "-fopenmp",
    "-shared",
    "-fPIC",
    "-std=c++17",
    "-fno-strict-aliasing",
    "-fno-math-errno",
    # NOTE: no fused multiply-add contraction: `x * c - mean` must round as eager
    # rounds it (a std of equal elements is exactly 0, and its backward's 0/0 guard
    # then fires as in eager).
    "-ffp-contract=off",
    "-w",
)


def vector_width_flags(
    machine: str | None = None, capability: str | None = None
) -> tuple[str, ...]:
    """The vector width kernels are built for: the one ATen's own CPU kernels use.

    Where ATen runs its AVX-512 kernels (`torch.backends.cpu.get_cpu_capability()`,
    which honours `ATEN_CPU_CAPABILITY`), loops are vectorized 512 bits wide. gcc's
    tuning for Intel's AVX-512 server CPUs prefers 256-bit vectors even under
    `-march=native`, which halves the width of every loop there (GELU's erf, layer
    norm rows) against the ATen and torch.compile kernels beside them.
    """
    machine = platform.machine() if machine is None else machine
    if capability is None:
        capability = torch.backends.cpu.get_cpu_capability()
    if machine.lower() in ("x86_64", "amd64") and capability == "AVX512":
        return ("-mprefer-vector-width=512",)
    return ()


@functools.lru_cache(maxsize=1)
def default_flags() -> tuple[str, ...]:
    """The compiler flags kernels are built with when none are given."""
    return BASE_FLAGS + vector_width_flags()


@dataclass(frozen=True, slots=True)
class CompilerConfig:
    cxx: str = "g++"
    flags: tuple[str, ...] = field(default_factory=default_flags)


@functools.lru_cache(maxsize=1)
def vector_math_available() -> bool:
    """Whether glibc's vector math library (libmvec) can be linked."""
    return ctypes.util.find_library("mvec") is not None


def prelude(source: str, flags: tuple[str, ...]) -> str:
    """The text a generated file of kernels `source`, built with `flags`, starts with:
    the math library functions it calls (through libmvec when linkable) and the helpers."""
    widest = 64 if "-mprefer-vector-width=512" in flags else 32
    used = needed_functions(source)
    return vector_math_source(used, vector_math_available(), widest) + PRELUDE


def link_flags() -> tuple[str, ...]:
    return ("-lmvec",) if vector_math_available() else ()


def _run_version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        raise CppCompileError(_compiler_missing(cxx, error)) from error
    return out.stdout.splitlines()[0] if out.stdout else cxx


def _compiler_missing(cxx: str, error: object) -> str:
    return (
        f"the C++ compiler {cxx!r} did not run ({error}); install g++, or name another "
        "compiler: ember.compile(..., options={'cpp.cxx': '/path/to/compiler'}) "
        "(compile_graph(..., options={'cxx': ...}) when calling inductor_codegen directly)"
    )


_identities: dict[tuple, str] = {}


def compiler_version(cxx: str, folder: Path | None = None) -> str:
    """The compiler's identity: its `--version` line, recorded beside the cache.

    The compiler is run only when the file it resolves to (path, size, mtime)
    differs from the recorded one. When it cannot be found the recorded identity
    stands, so cached kernels still load; compiling a missing one then fails.
    """
    resolved = shutil.which(cxx)
    record_path = None if folder is None else folder / f"{_digest(cxx)[:24]}.json"
    if resolved is None:
        record = load_record(record_path) if record_path is not None else None
        if isinstance(record, dict) and isinstance(record.get("version"), str):
            return record["version"]
        return f"missing compiler {cxx}"
    real = os.path.realpath(resolved)
    info = os.stat(real)
    identity = {"cxx": cxx, "path": real, "size": info.st_size, "mtime_ns": info.st_mtime_ns}
    key = tuple(identity.values())
    if key in _identities:
        return _identities[key]
    record = load_record(record_path) if record_path is not None else None
    if isinstance(record, dict) and record.get("identity") == identity:
        version = record.get("version")
    else:
        version = None
    if not isinstance(version, str):
        version = _run_version(cxx)
        if record_path is not None:
            try:
                store_record(record_path, {"identity": identity, "version": version})
            except OSError:
                pass  # NOTE: only an optimization: the next process runs the compiler again.
    _identities[key] = version
    return version


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def host_cpu() -> str:
    """The host CPU's model and instruction-set flags: `-march=native` builds for them.

    Part of the cache key, so a cache shared between machines never hands a library
    built for one CPU's instructions to another CPU (an illegal instruction).
    """
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name in wanted and name not in fields:
            fields[name] = (
                " ".join(sorted(value.split())) if name in ("flags", "Features") else value.strip()
            )
    return f"{platform.machine()} " + "; ".join(f"{k}={fields[k]}" for k in sorted(fields))


def cache_key_parts(
    source: str, config: CompilerConfig, toolchain: str | None = None
) -> list[tuple[str, str]]:
    """The named parts of a kernel's cache key, each hashed (logged on a miss)."""
    toolchain = compiler_version(config.cxx) if toolchain is None else toolchain
    return [
        ("schema", SCHEMA_VERSION),
        ("source", _digest(prelude(source, config.flags) + source)[:16]),
        ("compiler", _digest(config.cxx + toolchain)[:16]),
        ("flags", _digest(" ".join(config.flags + link_flags()))[:16]),
        ("cpu", _digest(host_cpu() if "-march=native" in config.flags else "")[:16]),
    ]


_LIBRARY_NAME = re.compile(r"[0-9a-f]{64}\.so")


class KernelLibrary:
    """Turns KernelSources into callable ctypes functions, through the disk cache.

    Layout under `<cache root>/cpp`: `lib/<sha256>.so` (a library named by the
    checksum of its bytes, and its `.cpp`), `index/<kernel key>` (a checked
    record naming the library, relative to `lib`), `toolchain/` (the compiler
    identities). A library is loaded only after its bytes match its name, so a
    truncated or swapped file is never handed to the dynamic loader, and a
    changed library never takes the name of one already loaded.
    """

    _loaded: dict[str, ctypes._CFuncPtr] = {}
    _libraries: dict[str, ctypes.CDLL] = {}

    def __init__(self, cache_dir: Path | None = None, config: CompilerConfig | None = None):
        self.root = cache_dir
        self.lib_dir, self.index_dir = self._folders()
        self.cache_dir = self.lib_dir.parent
        self.config = config or CompilerConfig()
        self.toolchain = compiler_version(
            self.config.cxx, cache_folder("cpp", "toolchain", root=self.cache_dir.parent)
        )
        self.log = artifact_logger("output_code")
        self.stats = {"hits": 0, "compiled": 0, "compile_seconds": 0.0}

    def _folders(self) -> tuple[Path, Path]:
        """`cpp/lib` and `cpp/index`, made if missing, both under the same (usable) root."""
        lib = cache_folder("cpp", "lib", root=self.root)
        index = cache_folder("cpp", "index", root=lib.parent.parent)
        if index.parent != lib.parent:  # the index fell back to a private temporary root
            lib = cache_folder("cpp", "lib", root=index.parent.parent)
        return lib, index

    def key(self, kernel: KernelSource) -> str:
        return _digest(repr(cache_key_parts(kernel.source, self.config, self.toolchain)))[:24]

    def build(self, kernels: list[KernelSource], workers: int | None = None) -> dict[str, object]:
        """kernel.name -> ctypes function, compiling what the cache lacks in parallel
        (inside `deferred_builds()`: a DeferredKernel for each kernel compiled later)."""
        keys = {k.name: self.key(k) for k in kernels}
        by_key = {keys[k.name]: k for k in kernels}
        missing = [key for key in by_key if self._load(key, by_key[key]) is None]
        batch = _open_batch()
        if missing and batch is not None:
            result = {}
            for kernel in kernels:
                key = keys[kernel.name]
                if key in missing:
                    result[kernel.name] = batch.add(self, key, kernel, workers)
                else:
                    result[kernel.name] = self._loaded[key]
            self.stats["hits"] += len(by_key) - len(missing)
            return result
        if missing:
            self.compile_missing(missing, by_key, workers or os.cpu_count() or 1)
        result = {}
        for kernel in kernels:
            result[kernel.name] = self.loaded(keys[kernel.name], kernel)
        self.stats["hits"] += len(by_key) - len(missing)
        return result

    def compile_missing(self, missing: list[str], by_key: dict, workers: int) -> None:
        """Compile the kernels of `missing` (keys) into the cache."""
        try:
            self._compile(missing, by_key, workers)
        except OSError as error:  # the cache filled up or became read-only meanwhile
            self.root = private_temporary_root(self.cache_dir.parent, f"failed: {error}")
            self.lib_dir, self.index_dir = self._folders()
            self.cache_dir = self.lib_dir.parent
            self._compile(missing, by_key, workers)
        # NOTE: another process may have removed an entry just written (it found the
        # old one faulty); compiling such a kernel once more settles it.
        lost = [key for key in missing if self._load(key, by_key[key]) is None]
        if lost:
            self._compile(lost, by_key, 1)

    def loaded(self, key: str, kernel: KernelSource):
        """The compiled function of `kernel` (`key`) from the cache; CppCompileError if absent."""
        fn = self._load(key, kernel)
        if fn is None:
            raise CppCompileError(
                f"kernel {kernel.name} compiled but could not be loaded from the cache "
                f"folder {self.cache_dir}"
            )
        return fn

    def source_of(self, kernel: KernelSource) -> str:
        return kernel.source.replace("KERNEL_NAME", "kernel_" + self.key(kernel))

    # ------------------------------------------------------------ cache

    def _index_path(self, key: str) -> Path:
        return self.index_dir / key

    def _library_path(self, key: str) -> Path | None:
        """The checked library the index entry of `key` names; None (entry discarded) if faulty."""
        index = self._index_path(key)
        record = load_record(index)
        if record is None:
            return None
        name = record.get("library") if isinstance(record, dict) else None
        if not isinstance(name, str) or not _LIBRARY_NAME.fullmatch(name):
            discard(index, f"it names {name!r}, not a library of the cache")
            return None
        path = self.lib_dir / name
        if str(path) in self._libraries:
            return path
        try:
            data = read_private(path)
        except OSError as error:
            data, why = None, str(error)
        else:
            why = "it is missing"
        if data is not None and payload_digest(data) == name[:-3]:
            return path
        if data is not None:
            why = f"its {len(data)} bytes do not match its checksum"
            discard(path, why)
        elif os.path.lexists(path):
            discard(path, why)
        discard(index, f"its library {name} is faulty: {why}")
        return None

    def _load(self, key: str, kernel: KernelSource):
        if key in self._loaded:
            return self._loaded[key]
        path = self._library_path(key)
        if path is None:
            return None
        try:
            library = self._libraries.get(str(path)) or ctypes.CDLL(str(path))
            fn = getattr(library, "kernel_" + key)
        except (OSError, AttributeError) as error:
            discard(self._index_path(key), f"its library {path.name} did not load: {error}")
            return None
        self._libraries[str(path)] = library
        fn.restype = None
        fn.argtypes = [CTYPES.get(a.ctype, ctypes.c_void_p) for a in kernel.args]
        self._loaded[key] = fn
        return fn

    def _compile(self, keys: list[str], by_key: dict, workers: int) -> None:
        if self.toolchain.startswith("missing compiler"):
            raise CppCompileError(_compiler_missing(self.config.cxx, "not found on PATH"))
        start = time.perf_counter()
        chunks = [keys[i::workers] for i in range(min(workers, len(keys)))]
        self.lib_dir, self.index_dir = self._folders()  # again: they may have gone meanwhile
        lib_dir = self.lib_dir
        jobs = []
        for chunk in chunks:
            kernels = "\n".join(self.source_of(by_key[k]) for k in chunk)
            text = prelude(kernels, self.config.flags) + "\n" + kernels
            cpp_path = lib_dir / f"{_digest(text)[:24]}.cpp"
            write_private(cpp_path, text.encode())
            fd, tmp = tempfile.mkstemp(suffix=".so.tmp", dir=lib_dir)  # 0600, a fresh name
            os.close(fd)
            command = [self.config.cxx, *self.config.flags, str(cpp_path), "-o", tmp, *link_flags()]
            try:
                process = subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            except OSError as error:
                Path(tmp).unlink(missing_ok=True)
                raise CppCompileError(_compiler_missing(self.config.cxx, error)) from error
            jobs.append((chunk, process, tmp, cpp_path, command))
        for chunk, process, tmp, cpp_path, command in jobs:
            _, err = process.communicate()
            if process.returncode != 0:
                Path(tmp).unlink(missing_ok=True)
                raise CppCompileError(
                    f"{self.config.cxx} failed on {cpp_path} (exit {process.returncode}):\n"
                    f"{err[-4000:]}\ncommand: {' '.join(command)}"
                )
            name = self._publish(Path(tmp), lib_dir)
            for key in chunk:
                store_record(self._index_path(key), {"library": name})
        elapsed = time.perf_counter() - start
        self.stats["compiled"] += len(keys)
        self.stats["compile_seconds"] += elapsed
        self.log.debug("compiled %d kernels in %d chunks in %.2fs", len(keys), len(chunks), elapsed)

    @staticmethod
    def _publish(built: Path, lib_dir: Path) -> str:
        """Move the compiler's output to its content-addressed name; return that name."""
        with open(built, "rb") as handle:
            data = handle.read()
            os.fsync(handle.fileno())
        name = payload_digest(data) + ".so"
        os.chmod(built, 0o600)
        os.replace(built, lib_dir / name)
        return name


# ----------------------------------------------------------------- deferred builds


class DeferredKernel:
    """A kernel whose build waits for the end of a `deferred_builds()` block.

    It stands in a wrapper's namespace (`bind_deferred`) until the batch is built,
    which puts the compiled function in its place; called before that, it builds
    the batch and calls the function.
    """

    __slots__ = ("_batch", "function", "homes", "kernel", "key", "library")

    def __init__(self, batch: _Batch, library: KernelLibrary, key: str, kernel: KernelSource):
        self._batch, self.library, self.key, self.kernel = batch, library, key, kernel
        self.function = None
        self.homes: list[tuple[dict, str]] = []

    def __call__(self, *args):
        if self.function is None:
            self._batch.build()
        return self.function(*args)

    def resolve(self, function) -> None:
        self.function = function
        for namespace, name in self.homes:
            if namespace.get(name) is self:
                namespace[name] = function
        self.homes.clear()


def bind_deferred(namespace: dict) -> None:
    """Let the DeferredKernels in `namespace` put their compiled functions there."""
    for name, value in namespace.items():
        if isinstance(value, DeferredKernel):
            if value.function is not None:
                namespace[name] = value.function
            else:
                value.homes.append((namespace, name))


def wrapper_namespace(*parts: dict) -> dict:
    """The namespace a C++ graph's wrapper runs in: torch, ATen and the run-time helpers
    it calls (runtime.py), then `parts` in order (its objects, its kernels' functions);
    the DeferredKernels among them bound to it (`bind_deferred`)."""
    namespace = {
        "torch": torch,
        "aten": torch.ops.aten,
        "empty_strided": runtime.empty_strided,
        "reinterpret": runtime.reinterpret,
        "check_layout": runtime.check_layout,
        "ensure_layout": runtime.ensure_layout,
    }
    for part in parts:
        namespace.update(part)
    bind_deferred(namespace)  # kernels built later (deferred_builds) take their places here
    return namespace


class _Batch:
    """The kernels left to build by a `deferred_builds()` block."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[tuple, DeferredKernel] = {}
        self._workers: int | None = None
        self.closed = False  # its block has ended: builds after it do not join it

    def add(
        self, library: KernelLibrary, key: str, kernel: KernelSource, workers: int | None
    ) -> DeferredKernel:
        with self._lock:
            place = (id(library), key)
            found = self._kernels.get(place)
            if found is None:
                found = self._kernels[place] = DeferredKernel(self, library, key, kernel)
            self._workers = workers or self._workers
            return found

    def build(self) -> None:
        """Compile every kernel added so far (one compile per cache folder and compiler
        configuration, its kernels split over the cores), then hand each its function."""
        with self._lock:
            pending, self._kernels = list(self._kernels.values()), {}
            # libraries of one cache folder and compiler configuration build together
            by_library: dict[tuple, list[DeferredKernel]] = {}
            for stub in pending:
                place = (stub.library.lib_dir, stub.library.config)
                by_library.setdefault(place, []).append(stub)
            workers = self._workers or os.cpu_count() or 1
            try:
                for stubs in by_library.values():
                    library = stubs[0].library
                    by_key = {stub.key: stub.kernel for stub in stubs}
                    missing = [key for key in by_key if library._load(key, by_key[key]) is None]
                    if missing:
                        library.compile_missing(missing, by_key, workers)
                    for stub in stubs:
                        stub.resolve(library.loaded(stub.key, stub.kernel))
            finally:
                # a failed build stays pending: a later call of its kernels raises again
                for stub in pending:
                    if stub.function is None:
                        self._kernels[(id(stub.library), stub.key)] = stub


_BATCH: contextvars.ContextVar[_Batch | None] = contextvars.ContextVar(
    "inductor_codegen_deferred_builds", default=None
)


@contextlib.contextmanager
def deferred_builds() -> Iterator[None]:
    """Build the C++ kernels of the graphs compiled inside the block together, at its end.

    >>> with deferred_builds():
    ...     first = compile_graph(gm_a, inputs_a)
    ...     second = compile_graph(gm_b, inputs_b)   # both built here, in one batch

    Nested blocks build at the end of the outermost. A build that fails raises at
    the end of the block (or at the first call of one of its graphs, if earlier).
    """
    if _open_batch() is not None:
        yield
        return
    batch = _Batch()
    token = _BATCH.set(batch)
    try:
        yield
    finally:
        _BATCH.reset(token)
        batch.closed = True
    batch.build()


def _open_batch() -> _Batch | None:
    """The batch of the `deferred_builds()` block the caller is in, if any.

    NOTE: a context copied inside a block outlives it (a backward compiled later under
    the context its forward compiled in, aot_autograd's `compiler_in_this_context`): a
    closed batch found there is no block's."""
    batch = _BATCH.get()
    return batch if batch is not None and not batch.closed else None
