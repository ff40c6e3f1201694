"""What ember writes, and where: everything under one private cache root, written so that a
symlink planted anywhere in it is never followed, guarded values never on disk in clear."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

import ember
from guards import cache_root as cache_root_module
from guards import set_logs
from inductor_codegen.codegen.cpp.build import KernelLibrary

QUICK = {"cpp.cxx_flags": ("-O0", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-w")}
API_TOKEN = "sekrit-token-123"
API_BYTES = b"sekrit-bytes-456"


def uses_secrets(x):
    if API_TOKEN == "sekrit-token-123" and API_BYTES.startswith(b"sekrit"):
        return (x * 3).tanh() + 1
    return x


@pytest.fixture(autouse=True)
def _private_state(monkeypatch, tmp_path):
    monkeypatch.setattr(cache_root_module, "_warned", set())
    monkeypatch.setattr(cache_root_module, "_fallback", [])
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "unused"))
    yield
    set_logs()
    ember.reset()


def _run_fresh(cache: Path, logs: bool = True) -> None:
    """Compile and run `uses_secrets` as a new process would, with `cache` as the root."""
    os.environ["EMBER_CACHE_DIR"] = str(cache)
    ember.reset()
    KernelLibrary._loaded.clear()
    KernelLibrary._libraries.clear()
    set_logs(guards=logs)
    try:
        x = torch.randn(4, 5)
        compiled = ember.compile(uses_secrets, options=QUICK)
        torch.testing.assert_close(compiled(x), uses_secrets(x))
    finally:
        set_logs()


def _tree(root: Path) -> tuple[list[Path], list[Path]]:
    """(folders, files) under root, relative, folders deepest first."""
    folders, files = [], []
    for path in sorted(root.rglob("*"), key=lambda p: -len(p.parts)):
        (folders if path.is_dir() else files).append(path.relative_to(root))
    return folders, files


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"", p.lstat().st_mode)
        for p in folder.rglob("*")
    }


def test_guard_source_is_written_only_with_the_guards_log_and_values_elided(tmp_path):
    cache = tmp_path / "cache"
    _run_fresh(cache, logs=False)
    assert not (cache / "guards").exists()
    _run_fresh(cache, logs=True)
    (guard_file,) = (cache / "guards").iterdir()
    text = guard_file.read_text()
    assert "API_TOKEN" in text and "def guard_check" in text
    assert "sekrit" not in text, text
    assert guard_file.stat().st_mode & 0o777 == 0o600


def test_symlinks_planted_at_every_written_path_are_never_followed(tmp_path):
    reference = tmp_path / "reference"
    _run_fresh(reference)
    folders, files = _tree(reference)
    assert {Path("cpp/lib"), Path("cpp/index"), Path("wrappers"), Path("guards")} <= set(folders)
    assert any(f.suffix == ".so" for f in files) and any(f.parts[0] == "guards" for f in files)

    outside = tmp_path / "outside"
    outside.mkdir()
    for n in range(len(files)):
        (outside / f"target{n}").write_text(f"not ember's {n}")
    for name in ("a", "b", "c"):
        (outside / name).mkdir()

    # 1. a symlink at every file ember writes (the folders real)
    cache = tmp_path / "files"
    for folder in folders:
        (cache / folder).mkdir(parents=True, exist_ok=True, mode=0o700)
    for n, file in enumerate(files):
        (cache / file).symlink_to(outside / f"target{n}")
    # 2. a symlink at every innermost folder
    leaves = tmp_path / "leaves"
    leaves.mkdir(mode=0o700)
    (leaves / "cpp").mkdir(mode=0o700)
    for n, folder in enumerate(f for f in folders if not any(g.parent == f for g in folders)):
        (leaves / folder).symlink_to(outside / "abc"[n % 3], target_is_directory=True)
    # 3. a symlink at the folder above them
    upper = tmp_path / "upper"
    upper.mkdir(mode=0o700)
    (upper / "cpp").symlink_to(outside / "a", target_is_directory=True)

    before = _snapshot(outside)
    for planted in (cache, leaves, upper):
        _run_fresh(planted)
        assert _snapshot(outside) == before, planted
        planted_folders, planted_files = _tree(planted)
        assert sorted(planted_files) == sorted(files), planted
        for path in planted.rglob("*"):
            assert not path.is_symlink(), path


def test_no_file_outside_the_cache_root(tmp_path, monkeypatch):
    # The shared temporary folder and the home folder of this test are its own.
    shared, home = tmp_path / "tmp", tmp_path / "home"
    shared.mkdir()
    home.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setenv("HOME", str(home))
    _run_fresh(tmp_path / "cache")
    assert not list(shared.iterdir())
    assert not list(home.iterdir())
