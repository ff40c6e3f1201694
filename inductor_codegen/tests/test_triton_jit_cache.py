"""Triton's JIT cache under ember's cache root (codegen.triton.jit_cache).

Footguns, worst first:
| a binary of one kernel installed as another's (wrong result) | files keep their folder and name; bad names raise
| the user's TRITON_CACHE_DIR overridden or written into      | theirs stands, nothing installed there
| binaries in ~/.triton, outside the root (compiled again)     | unset: Triton's cache is <root>/triton/jit, 0700
"""

from __future__ import annotations

import os
import stat

import pytest

from inductor_codegen.codegen.triton import jit_cache


@pytest.fixture
def no_triton_choice(monkeypatch):
    """TRITON_CACHE_DIR unset, as ember found it; put back after."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setattr(jit_cache, "_set_by_ember", None)
    yield
    os.environ.pop("TRITON_CACHE_DIR", None)


def test_triton_jit_cache_is_a_private_folder_under_the_cache_root(tmp_path, no_triton_choice):
    folder = jit_cache.use_jit_cache_under(tmp_path / "root")
    assert folder == tmp_path / "root" / "triton" / "jit"
    assert os.environ["TRITON_CACHE_DIR"] == str(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert jit_cache.jit_cache_dir() == folder
    triton = pytest.importorskip("triton")
    if hasattr(triton, "knobs"):
        assert triton.knobs.cache.dir == str(folder)


def test_triton_jit_cache_follows_the_cache_root_it_set(tmp_path, no_triton_choice):
    jit_cache.use_jit_cache_under(tmp_path / "a")
    assert jit_cache.use_jit_cache_under(tmp_path / "b") == tmp_path / "b" / "triton" / "jit"
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "b" / "triton" / "jit")


def test_triton_jit_cache_keeps_the_users_folder(tmp_path, no_triton_choice, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    assert jit_cache.use_jit_cache_under(tmp_path / "root") is None
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")
    assert not (tmp_path / "root" / "triton" / "jit").exists()
    # nothing fetched from elsewhere is written into the user's folder
    assert jit_cache.install_kernel_binaries({"ABCDEFGHIJ/k.cubin": b"x"}) == 0
    assert not (tmp_path / "mine").exists()


def _stub_kernel(folder, key: str, function: str, payload: bytes) -> None:
    """A compiled kernel as Triton's cache keeps it: its files and the group file naming them."""
    kernel = folder / key
    kernel.mkdir(parents=True)
    (kernel / f"{function}.cubin").write_bytes(payload)
    (kernel / f"{function}.json").write_bytes(b'{"name": "%s"}' % function.encode())
    (kernel / f"__grp__{function}.json").write_bytes(b'{"child_paths": {}}')


def test_triton_kernel_binaries_of_named_kernels_travel_whole(tmp_path):
    source = tmp_path / "source"
    _stub_kernel(source, "ABCDEFGHIJKLMNOP", "triton_poi_0123456789ab", b"\x7fELF one")
    _stub_kernel(source, "QRSTUVWXYZ234567", "triton_red_ba9876543210", b"\x7fELF two")
    (source / "LAUNCHERKEY12345").mkdir()
    (source / "LAUNCHERKEY12345" / "__triton_launcher.so").write_bytes(b"host code")
    files = jit_cache.kernel_binaries(["triton_poi_0123456789ab"], source)
    assert sorted(files) == [
        "ABCDEFGHIJKLMNOP/__grp__triton_poi_0123456789ab.json",
        "ABCDEFGHIJKLMNOP/triton_poi_0123456789ab.cubin",
        "ABCDEFGHIJKLMNOP/triton_poi_0123456789ab.json",
    ]
    target = tmp_path / "target"
    assert jit_cache.install_kernel_binaries(files, target) == 3
    for name, data in files.items():
        assert (target / name).read_bytes() == data
    assert jit_cache.install_kernel_binaries(files, target) == 0  # already there
    assert jit_cache.kernel_binaries(["not_built_yet_000000000000"], source) == {}


def test_triton_launchers_travel_with_the_kernels_and_nothing_else(tmp_path):
    source = tmp_path / "source"
    _stub_kernel(source, "ABCDEFGHIJKLMNOP", "triton_poi_0123456789ab", b"\x7fELF one")
    suffix = ".cpython-312-x86_64-linux-gnu.so"
    (source / ("a" * 64)).mkdir()
    (source / ("a" * 64) / f"__triton_launcher{suffix}").write_bytes(b"launcher")
    (source / ("b" * 64)).mkdir()
    (source / ("b" * 64) / "cuda_utils.so").write_bytes(b"utils")
    (source / ("c" * 64)).mkdir()  # a launcher beside another file: not Triton's layout
    (source / ("c" * 64) / "__triton_launcher.so").write_bytes(b"x")
    (source / ("c" * 64) / "notes.txt").write_bytes(b"x")
    (source / ("d" * 64)).mkdir()
    (source / ("d" * 64) / "__triton_launcher.so.tmp").write_bytes(b"half written")
    files = jit_cache.launcher_binaries(source)
    assert files == {
        f"{'a' * 64}/__triton_launcher{suffix}": b"launcher",
        f"{'b' * 64}/cuda_utils.so": b"utils",
    }
    target = tmp_path / "target"
    assert jit_cache.install_kernel_binaries(files, target) == 2
    assert (target / ("a" * 64) / f"__triton_launcher{suffix}").read_bytes() == b"launcher"
    assert jit_cache.launcher_binaries(tmp_path / "missing") == {}


def test_an_entrys_triton_files_include_the_launchers_once_its_kernels_are_built(
    tmp_path, monkeypatch
):
    from inductor_codegen import portable
    from inductor_codegen.codegen.triton import runtime

    source = tmp_path / "jit"
    _stub_kernel(source, "ABCDEFGHIJKLMNOP", "triton_poi_0123456789ab", b"\x7fELF one")
    (source / ("a" * 64)).mkdir()
    (source / ("a" * 64) / "__triton_launcher.so").write_bytes(b"launcher")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(source))
    monkeypatch.setattr(runtime, "kernel_function_name", lambda kernel: kernel)
    monkeypatch.setattr(
        portable, "_triton_kernels", lambda record: {"k": "triton_poi_0123456789ab"}
    )
    files = portable.triton_binaries({"language": "Triton"})
    assert f"{'a' * 64}/__triton_launcher.so" in files
    assert "ABCDEFGHIJKLMNOP/triton_poi_0123456789ab.cubin" in files
    monkeypatch.setattr(portable, "_triton_kernels", lambda record: {"k": "not_built_000000000000"})
    assert portable.triton_binaries({"language": "Triton"}) == {}  # no kernel: nothing


@pytest.mark.parametrize(
    "name", ["../evil/x.cubin", "ABCDEFGHIJ/../../x", "ABCDEFGHIJ/.hidden", "x.cubin", "A/x.cubin"]
)
def test_triton_kernel_binaries_with_names_outside_the_cache_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="not a Triton cache file"):
        jit_cache.install_kernel_binaries({name: b"x"}, tmp_path / "target")
    assert not (tmp_path / "target").exists()
