"""Fault injection on the disk cache: files corrupted, truncated, swapped, deleted, replaced
by folders or symlinks, between and during runs. Every fault is repaired (the entry is
removed, with one warning naming the file, and rebuilt) and the result stays right;
none kills the process (a truncated library handed to the dynamic loader would: SIGBUS,
so that case runs in a subprocess), none loads a file the cache did not make.

    fault                                   what must happen
    ------------------------------------    ----------------------------------------
    truncated / garbage / deleted .so       never loaded; rebuilt; one warning
    index: random bytes, folder, symlink    removed; rebuilt; one warning naming it
    index naming a path outside the cache   never followed; rebuilt
    two index entries swapped               the wrong library is not used; rebuilt
    cache folders replaced or deleted       made again
    cache root missing / unmakeable / alien a private temporary cache, one warning
    compiler gone, kernels cached           cached kernels load; a new one: clear error
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from graph_helpers import trace

from guards import cache_root as cache_root_module
from guards.cache_root import CacheWarning, cache_root, store_record
from inductor_codegen import compile_graph
from inductor_codegen.codegen.cpp.build import KernelLibrary
from inductor_codegen.errors import CppCompileError


def _fn(x):
    return (x * 3).tanh().sum(1)


def _other(x):
    return (x - 1).sigmoid() * 2


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch):
    """Each test loads from disk as a new process would, and sees its own warnings."""
    KernelLibrary._loaded.clear()
    monkeypatch.setattr(cache_root_module, "_warned", set())
    monkeypatch.setattr(cache_root_module, "_fallback", [])
    yield
    KernelLibrary._loaded.clear()


# Quick to compile: these tests compile the same small kernels many times.
QUICK = {"cxx_flags": ("-O0", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-w")}


def _run(cache: Path, fn=_fn, shape=(4, 6), **options):
    """Compile `fn` through the cache as a new process would; check it; return the build stats."""
    options = {**QUICK, **options}
    KernelLibrary._loaded.clear()
    KernelLibrary._libraries.clear()
    x = torch.randn(*shape)
    compiled = compile_graph(trace(fn, x), [x], options={"cache_dir": cache, **options})
    torch.testing.assert_close(compiled(x), fn(x))
    return compiled.artifact("build")


def _faulty_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, CacheWarning)]


def _index_files(cache: Path) -> list[Path]:
    return sorted((cache / "cpp" / "index").iterdir())


def _libraries(cache: Path) -> list[Path]:
    return sorted((cache / "cpp" / "lib").glob("*.so"))


def _repaired(cache: Path, faulty: Path, fn=_fn) -> None:
    """The next run recompiles, warns once naming `faulty`, and the run after hits the cache."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert "'compiled': 1" in _run(cache, fn)
    messages = _faulty_warnings(record)
    assert any(str(faulty) in m for m in messages), messages
    assert len(messages) <= 2, messages  # the entry, and the index pointing at it
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert "'compiled': 0" in _run(cache, fn)
    assert not _faulty_warnings(record)


@pytest.mark.parametrize(
    "fault",
    [
        lambda p: p.write_bytes(os.urandom(300)),  # random bytes (not UTF-8, not JSON)
        lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),  # truncated
        lambda p: p.write_text('{"sha256": "0", "payload": "{\\"library\\": \\"x\\"}"}'),
        lambda p: (p.unlink(), p.mkdir(), (p / "inside").write_text("x")),  # a folder
        lambda p: (p.unlink(), p.symlink_to(p.parent / "elsewhere")),  # a symlink
    ],
    ids=["random_bytes", "truncated", "bad_checksum", "folder", "symlink"],
)
def test_faulty_index_entry_is_removed_and_rebuilt(tmp_path, fault):
    _run(tmp_path)
    (index,) = _index_files(tmp_path)
    fault(index)
    _repaired(tmp_path, index)


@pytest.mark.parametrize(
    "library",
    ["/tmp/evil.so", "../../evil.so", "lib/../../evil.so", "a" * 64 + ".so", 3, None],
)
def test_index_naming_a_library_outside_the_cache_is_never_followed(tmp_path, library):
    evil = tmp_path / "evil.so"
    evil.write_bytes(b"not a library")
    cache = tmp_path / "cache"
    _run(cache)
    (index,) = _index_files(cache)
    store_record(index, {"library": library})  # a well-formed record naming a bad file
    _repaired(cache, index)
    assert evil.read_bytes() == b"not a library"


def test_swapped_index_entries_never_use_the_wrong_library(tmp_path):
    _run(tmp_path, _fn)
    first = set(_index_files(tmp_path))
    _run(tmp_path, _other)
    (a,) = first
    (b,) = set(_index_files(tmp_path)) - first
    a_bytes, b_bytes = a.read_bytes(), b.read_bytes()
    a.write_bytes(b_bytes)
    b.write_bytes(a_bytes)
    _repaired(tmp_path, a, _fn)
    _repaired(tmp_path, b, _other)


def _replace(path: Path, data: bytes) -> None:
    """New contents under `path`, as another process would leave them.

    NOTE: a new file, not an in-place write: this process has the old one mapped, and
    changing a mapped library in place crashes whoever runs it (no cache can help).
    """
    other = path.with_name("replacement")
    other.write_bytes(data)
    os.replace(other, path)


@pytest.mark.parametrize(
    "fault",
    [
        lambda p: _replace(p, os.urandom(p.stat().st_size)),  # garbage, same size
        lambda p: _replace(p, p.read_bytes()[: p.stat().st_size // 2]),  # truncated
        lambda p: p.unlink(),
        lambda p: (p.unlink(), p.mkdir()),
        lambda p: (p.unlink(), p.symlink_to("/bin/true")),
    ],
    ids=["garbage", "truncated", "deleted", "folder", "symlink"],
)
def test_faulty_library_is_never_loaded_and_rebuilt(tmp_path, fault):
    _run(tmp_path)
    (library,) = _libraries(tmp_path)
    fault(library)
    (index,) = _index_files(tmp_path)
    _repaired(tmp_path, index)
    assert _libraries(tmp_path) == [library] and library.is_file()


_CHILD = textwrap.dedent(
    """
    import sys, warnings, torch
    sys.path.insert(0, {tests!r})
    from graph_helpers import trace
    from inductor_codegen import compile_graph
    warnings.simplefilter("always")
    def fn(x):
        return (x * 3).tanh().sum(1)
    x = torch.randn(4, 6)
    compiled = compile_graph(trace(fn, x), [x], options={{"cache_dir": {cache!r}, **{quick!r}}})
    torch.testing.assert_close(compiled(x), fn(x))
    print(compiled.artifact("build"))
    """
)


def test_truncated_library_in_a_new_process_is_rebuilt_not_loaded(tmp_path):
    # Loading a truncated library would kill the process with SIGBUS, hence the subprocess.
    _run(tmp_path)
    (library,) = _libraries(tmp_path)
    data = library.read_bytes()
    # as an interrupted write leaves it; a new file under the name (this process has the
    # old one mapped: truncating a mapped library in place kills this process at exit)
    _replace(library, data[: len(data) // 2])
    script = _CHILD.format(tests=str(Path(__file__).parent), cache=str(tmp_path), quick=QUICK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert "'compiled': 1" in child.stdout
    assert str(library) in child.stderr and "CacheWarning" in child.stderr
    assert library.read_bytes() == data  # rebuilt under the same content address


def test_changed_library_never_aliases_a_loaded_one(tmp_path):
    _run(tmp_path, _fn)
    _run(tmp_path, _other)
    names = [p.name for p in _libraries(tmp_path)]
    assert len(set(names)) == 2  # each library is named by its own bytes
    for library in _libraries(tmp_path):
        assert library.stem == cache_root_module.payload_digest(library.read_bytes())


def test_cache_folders_replaced_or_deleted_between_runs(tmp_path):
    _run(tmp_path)
    shutil.rmtree(tmp_path / "cpp" / "lib")
    (tmp_path / "cpp" / "lib").write_text("a file where a folder was")
    shutil.rmtree(tmp_path / "wrappers")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert "'compiled': 1" in _run(tmp_path)
    assert any(str(tmp_path / "cpp" / "lib") in m for m in _faulty_warnings(record))
    assert (tmp_path / "cpp" / "lib").is_dir() and (tmp_path / "wrappers").is_dir()


def test_cache_deleted_during_a_run(tmp_path):
    x = torch.randn(4, 6)
    gm = trace(_fn, x)
    from inductor_codegen.codegen.cpp.build import KernelLibrary as Library

    original = Library._compile

    def delete_then_compile(self, *args, **kwargs):
        shutil.rmtree(tmp_path)  # gone after the lookup, before the build
        return original(self, *args, **kwargs)

    Library._compile = delete_then_compile
    try:
        compiled = compile_graph(gm, [x], options={"cache_dir": tmp_path, **QUICK})
    finally:
        Library._compile = original
    torch.testing.assert_close(compiled(x), _fn(x))


def test_corrupt_wrapper_file_is_rewritten(tmp_path):
    x = torch.randn(4, 6)
    gm = trace(_fn, x)
    first = compile_graph(gm, [x], options={"cache_dir": tmp_path, **QUICK})
    text = first.wrapper_path.read_bytes()
    first.wrapper_path.write_bytes(text[:10])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        again = compile_graph(gm, [x], options={"cache_dir": tmp_path, **QUICK})
    assert again.wrapper_path.read_bytes() == text
    assert any(str(first.wrapper_path) in m for m in _faulty_warnings(record))


@pytest.mark.parametrize(
    "make_root",
    [
        lambda tmp: Path("/proc/ember-cache"),  # cannot be made, even by root
        lambda tmp: (tmp / "file").write_text("x") and tmp / "file",  # not a folder
        lambda tmp: _alien(tmp / "alien"),  # owned by another user
        lambda tmp: _everyone(tmp / "everyone"),  # writable by every user
    ],
    ids=["unmakeable", "a_file", "another_users", "world_writable"],
)
def test_unusable_cache_root_falls_back_to_a_private_temporary_one(tmp_path, make_root):
    root = make_root(tmp_path)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _run(root)
        _run(root, _other)
    messages = _faulty_warnings(record)
    assert len(messages) == 1 and str(root) in messages[0], messages
    fallback = cache_root_module._fallback[0]
    assert fallback.stat().st_mode & 0o777 == 0o700
    assert list((fallback / "cpp" / "lib").glob("*.so"))


def _alien(path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("making a folder owned by another user needs root")
    path.mkdir()
    os.chown(path, 65534, 65534)
    return path


def _everyone(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o777)
    return path


def test_unwritable_home_falls_back_to_a_private_temporary_cache(monkeypatch):
    monkeypatch.delenv("EMBER_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/proc/no-home")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        root = cache_root()
    assert root == cache_root_module._fallback[0]
    assert "/proc/no-home/.cache/ember" in _faulty_warnings(record)[0]


def test_relative_cache_dir_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EMBER_CACHE_DIR", "relative-cache")
    assert cache_root() == tmp_path / "relative-cache"


def test_cached_kernels_load_without_the_compiler(tmp_path):
    compiler = tmp_path / "bin" / "my-cxx"
    compiler.parent.mkdir()
    compiler.symlink_to(shutil.which("g++"))
    cache = tmp_path / "cache"
    _run(cache, cxx=str(compiler))
    compiler.unlink()  # the toolchain is gone; its identity was recorded at build time
    assert "'compiled': 0" in _run(cache, cxx=str(compiler))
    with pytest.raises(CppCompileError, match="'cpp.cxx'"):
        _run(cache, _other, cxx=str(compiler))


def test_every_written_file_and_folder_is_private_even_under_umask_0(tmp_path):
    cache = tmp_path / "new" / "cache"
    old = os.umask(0)
    try:
        _run(cache)
    finally:
        os.umask(old)
    assert cache.stat().st_mode & 0o777 == 0o700
    for path in cache.rglob("*"):
        mode = path.lstat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_tampered_triton_kernel_module_is_rewritten_and_run_from_its_text(tmp_path):
    import inspect

    from guards.cache_root import cache_folder
    from inductor_codegen.codegen.triton import runtime

    path = cache_folder("kernels", root=tmp_path) / "kernel_0123.py"
    text = "def kernel_0123():\n    return 42\n"
    runtime._write_module(path, text)
    path.write_text("def kernel_0123():\n    return 'not the kernel'\n")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        runtime._write_module(path, text)
    assert path.read_text() == text
    assert any(str(path) in m for m in _faulty_warnings(record))
    function = runtime._import(path, "kernel_0123", text)
    assert function() == 42
    assert inspect.getsource(function) == text  # what Triton reads


def test_threads_compiling_into_one_fresh_cache_all_get_right_results(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    x = torch.randn(4, 6)
    gm = trace(_fn, x)

    def compile_and_run(_):
        compiled = compile_graph(gm, [x], options={"cache_dir": tmp_path, **QUICK})
        return compiled(x)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(compile_and_run, range(4)))
    for result in results:
        torch.testing.assert_close(result, _fn(x))


def test_cache_that_fails_to_write_mid_run_falls_back_with_one_warning(tmp_path, monkeypatch):
    import errno

    from inductor_codegen import pipeline as compile_module
    from inductor_codegen.codegen.cpp import build as cpp_build

    real = cpp_build.write_private

    def disk_full(path, data):
        if str(path).startswith(str(tmp_path)):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(cpp_build, "write_private", disk_full)
    monkeypatch.setattr(compile_module, "write_private", disk_full)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _run(tmp_path)
    messages = _faulty_warnings(record)
    assert len(messages) == 1 and "No space left" in messages[0], messages


def test_native_builds_are_keyed_by_the_host_cpu(monkeypatch):
    from inductor_codegen.codegen.cpp import build as cpp_build

    config = cpp_build.CompilerConfig()
    before = dict(cpp_build.cache_key_parts("int x;", config, "g++ 12"))
    monkeypatch.setattr(cpp_build, "host_cpu", lambda: "another cpu without avx512")
    after = dict(cpp_build.cache_key_parts("int x;", config, "g++ 12"))
    assert before["cpu"] != after["cpu"]
    portable = cpp_build.CompilerConfig(
        flags=tuple(f for f in config.flags if f != "-march=native")
    )
    assert (
        dict(cpp_build.cache_key_parts("int x;", portable, "g++ 12"))["cpu"]
        == dict(cpp_build.cache_key_parts("int x;", portable, "g++ 13"))["cpu"]
    )
