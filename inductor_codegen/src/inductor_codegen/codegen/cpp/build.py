"""Compiling generated C++ with the host compiler, in parallel, cached on disk.

Each kernel's cache key is an ordered list of named parts (schema version,
source, compiler and its version, flags), each hashed; the function is named
after the key, so identical kernels (the same layer repeated) compile once.
Missing kernels are split into one chunk per CPU core, each chunk compiled by
its own compiler process into one shared library, all chunks at once.
An index file per kernel points at its library; an entry that fails to load
is recompiled, never trusted.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from guards import artifact_logger
from inductor_codegen.codegen.cpp.prelude import PRELUDE, vector_math_declarations
from inductor_codegen.codegen.kernel import KernelSource
from inductor_codegen.errors import CppCompileError
from inductor_codegen.options import default_cache_dir

__all__ = ["CompilerConfig", "KernelLibrary", "default_cache_dir"]

SCHEMA_VERSION = "1"
CTYPES = {
    "int64_t": ctypes.c_int64,
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,
}


@dataclass(frozen=True, slots=True)
class CompilerConfig:
    cxx: str = "g++"
    flags: tuple[str, ...] = (
        "-O3",
        "-march=native",
        "-fopenmp",
        "-shared",
        "-fPIC",
        "-std=c++17",
        "-fno-strict-aliasing",
        "-fno-math-errno",
        "-w",
    )


@functools.lru_cache(maxsize=1)
def vector_math_available() -> bool:
    """Whether glibc's vector math library (libmvec) can be linked."""
    return ctypes.util.find_library("mvec") is not None


def prelude() -> str:
    """The text every generated file starts with (vector math declared when linkable)."""
    return (vector_math_declarations() if vector_math_available() else "") + PRELUDE


def link_flags() -> tuple[str, ...]:
    return ("-lmvec",) if vector_math_available() else ()


@functools.lru_cache(maxsize=8)
def compiler_version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        raise CppCompileError(
            f"the C++ compiler {cxx!r} did not run ({error}); install g++ or pass "
            "options={'cxx': '/path/to/compiler'}"
        ) from error
    return out.stdout.splitlines()[0] if out.stdout else cxx


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def cache_key_parts(source: str, config: CompilerConfig) -> list[tuple[str, str]]:
    """The named parts of a kernel's cache key, each hashed (logged on a miss)."""
    return [
        ("schema", SCHEMA_VERSION),
        ("source", _digest(prelude() + source)[:16]),
        ("compiler", _digest(config.cxx + compiler_version(config.cxx))[:16]),
        ("flags", _digest(" ".join(config.flags + link_flags()))[:16]),
    ]


class KernelLibrary:
    """Turns KernelSources into callable ctypes functions, through the disk cache."""

    _loaded: dict[str, ctypes._CFuncPtr] = {}
    _libraries: dict[str, ctypes.CDLL] = {}

    def __init__(self, cache_dir: Path | None = None, config: CompilerConfig | None = None):
        self.cache_dir = Path(cache_dir or default_cache_dir()) / "cpp"
        self.config = config or CompilerConfig()
        self.log = artifact_logger("output_code")
        self.stats = {"hits": 0, "compiled": 0, "compile_seconds": 0.0}

    def key(self, kernel: KernelSource) -> str:
        return _digest(repr(cache_key_parts(kernel.source, self.config)))[:24]

    def build(self, kernels: list[KernelSource], workers: int | None = None) -> dict[str, object]:
        """kernel.name -> ctypes function, compiling what the cache lacks in parallel."""
        keys = {k.name: self.key(k) for k in kernels}
        by_key = {keys[k.name]: k for k in kernels}
        missing = [key for key in by_key if self._load(key, by_key[key]) is None]
        if missing:
            self._compile(missing, by_key, workers or os.cpu_count() or 1)
        result = {}
        for kernel in kernels:
            fn = self._load(keys[kernel.name], kernel)
            if fn is None:
                raise CppCompileError(f"kernel {kernel.name} compiled but could not be loaded")
            result[kernel.name] = fn
        self.stats["hits"] += len(by_key) - len(missing)
        return result

    def source_of(self, kernel: KernelSource) -> str:
        return kernel.source.replace("KERNEL_NAME", "kernel_" + self.key(kernel))

    # ------------------------------------------------------------ cache

    def _index_path(self, key: str) -> Path:
        return self.cache_dir / "index" / key

    def _load(self, key: str, kernel: KernelSource):
        if key in self._loaded:
            return self._loaded[key]
        index = self._index_path(key)
        try:
            library_path = index.read_text().strip()
            library = self._libraries.get(library_path) or ctypes.CDLL(library_path)
            fn = getattr(library, "kernel_" + key)
        except (OSError, AttributeError):
            return None
        self._libraries[library_path] = library
        fn.restype = None
        fn.argtypes = [CTYPES.get(a.ctype, ctypes.c_void_p) for a in kernel.args]
        self._loaded[key] = fn
        return fn

    def _compile(self, keys: list[str], by_key: dict, workers: int) -> None:
        start = time.perf_counter()
        chunks = [keys[i::workers] for i in range(min(workers, len(keys)))]
        lib_dir = self.cache_dir / "lib"
        lib_dir.mkdir(parents=True, exist_ok=True)
        (self.cache_dir / "index").mkdir(parents=True, exist_ok=True)
        jobs = []
        for chunk in chunks:
            text = prelude() + "\n" + "\n".join(self.source_of(by_key[k]) for k in chunk)
            name = _digest(text)[:24]
            cpp_path = lib_dir / f"{name}.cpp"
            so_path = lib_dir / f"{name}.so"
            cpp_path.write_text(text)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=lib_dir)
            os.close(fd)
            command = [self.config.cxx, *self.config.flags, str(cpp_path), "-o", tmp, *link_flags()]
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            jobs.append((chunk, process, tmp, so_path, cpp_path, command))
        for chunk, process, tmp, so_path, cpp_path, command in jobs:
            _, err = process.communicate()
            if process.returncode != 0:
                Path(tmp).unlink(missing_ok=True)
                raise CppCompileError(
                    f"{self.config.cxx} failed on {cpp_path} (exit {process.returncode}):\n"
                    f"{err[-4000:]}\ncommand: {' '.join(command)}"
                )
            os.replace(tmp, so_path)
            for key in chunk:
                index = self._index_path(key)
                tmp_index = index.with_suffix(f".{os.getpid()}.tmp")
                tmp_index.write_text(str(so_path))
                os.replace(tmp_index, index)
        elapsed = time.perf_counter() - start
        self.stats["compiled"] += len(keys)
        self.stats["compile_seconds"] += elapsed
        self.log.debug("compiled %d kernels in %d chunks in %.2fs", len(keys), len(chunks), elapsed)
