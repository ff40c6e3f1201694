"""Triton's compiled kernels under ember's cache root: counted, cleared, pruned, shared.

Triton compiles nothing under TRITON_INTERPRET=1, so the CPU tests use a stub set of
Triton cache files (a kernel's folder: its binary, metadata and group file); the GPU
test compiles for real.

Footguns, worst first:
| a binary from the remote that is not what was published installed | checksum -> nothing installed, one warning
| some of a kernel's files pruned (Triton fails loading it)         | prune removes the folder whole
| a warm machine compiles every Triton kernel again                  | binaries published and fetched with the entry
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
from conftest import ROOT, SOURCES

from ember import cache as ember_cache
from ember.remote_cache import RemoteCache
from ember.warm_cache import WarmStartCache
from inductor_codegen import portable
from inductor_codegen.codegen.triton import jit_cache

FUNCTION = "triton_poi_0123456789ab"
STUB = {
    f"ABCDEFGHIJKLMNOP/{FUNCTION}.cubin": b"\x7fELF kernel",
    f"ABCDEFGHIJKLMNOP/{FUNCTION}.json": b'{"name": "triton_poi"}',
    f"ABCDEFGHIJKLMNOP/__grp__{FUNCTION}.json": b'{"child_paths": {}}',
}


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A cache root of this test's own, TRITON_CACHE_DIR unset as ember found it."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "root"))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setattr(jit_cache, "_set_by_ember", None)
    yield tmp_path / "root"
    os.environ.pop("TRITON_CACHE_DIR", None)


def _write(folder, files) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def test_cache_info_counts_triton_binaries_and_clear_removes_them(root):
    _write(jit_cache.use_jit_cache_under(root), STUB)
    found = ember_cache.cache_info(root)
    assert found["triton-jit"] == (3, sum(len(d) for d in STUB.values()))
    ember_cache.clear(root)
    assert ember_cache.cache_info(root)["triton-jit"] == (0, 0)


def test_cache_prune_removes_a_triton_kernels_folder_whole(root):
    jit = jit_cache.use_jit_cache_under(root)
    _write(jit, STUB)
    newer = {
        name.replace("ABCDEFGHIJKLMNOP", "QRSTUVWXYZ234567"): data for name, data in STUB.items()
    }
    _write(jit, newer)
    for name in STUB:  # the first kernel used long ago, but for its group file
        os.utime(jit / name, (1000, 1000))
    os.utime(jit / f"ABCDEFGHIJKLMNOP/__grp__{FUNCTION}.json", (2000, 2000))
    for name in newer:
        os.utime(jit / name, (3000, 3000))
    size = sum(len(d) for d in STUB.values())
    assert ember_cache.prune(size, root) == (3, size)
    assert not (jit / "ABCDEFGHIJKLMNOP").exists()
    assert all((jit / name).exists() for name in newer)


class FakeRedis:
    """The few calls RemoteCache makes, on a dict."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key):
        return self.data.get(key)

    def pipeline(self, transaction=False):
        return self

    def set(self, key, value, nx=False):
        self.data.setdefault(key, value)

    def execute(self):
        return []


def _remote(monkeypatch, client) -> RemoteCache:
    remote = RemoteCache.__new__(RemoteCache)
    remote.url, remote.client, remote.prefix, remote.working = "fake://", client, "ember:v1:", True
    remote.stats = {"hits": 0, "misses": 0, "published": 0}
    monkeypatch.setattr("ember.remote_cache.remote_cache", lambda: remote)
    return remote


def _triton_entry(key: str) -> dict:
    return {"key": key, "forward": {"graph": {"language": "Triton", "kernels": []}}}


def test_remote_cache_publishes_and_fetches_an_entrys_triton_binaries(root, monkeypatch):
    client = FakeRedis()
    _remote(monkeypatch, client)
    monkeypatch.setattr(portable, "triton_binaries", lambda record: dict(STUB))
    WarmStartCache([], None, "graph")._publish("k" * 40, _triton_entry("k" * 40))
    kinds = sorted({key.split(":")[2] for key in client.data})
    assert kinds == ["binary", "entry", "triton"]
    index = json.loads(client.data["ember:v1:triton:" + "k" * 40])
    assert sorted(index) == sorted(STUB)
    # another machine: an empty cache root fetches them with the entry
    WarmStartCache([], None, "graph")._fetch_kernels(_triton_entry("k" * 40))
    jit = root / "triton" / "jit"
    assert {name: (jit / name).read_bytes() for name in STUB} == STUB
    assert os.environ["TRITON_CACHE_DIR"] == str(jit)


def test_remote_cache_triton_binary_not_matching_its_checksum_is_never_installed(root, monkeypatch):
    client = FakeRedis()
    remote = _remote(monkeypatch, client)
    monkeypatch.setattr(portable, "triton_binaries", lambda record: dict(STUB))
    WarmStartCache([], None, "graph")._publish("k" * 40, _triton_entry("k" * 40))
    for key in client.data:
        if ":binary:" in key:
            client.data[key] = b"something else"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        WarmStartCache([], None, "graph")._fetch_kernels(_triton_entry("k" * 40))
    assert not remote.working
    assert len([w for w in caught if "remote ember cache" in str(w.message)]) == 1
    assert not list(root.rglob("*.cubin"))


def test_remote_cache_does_not_install_triton_binaries_into_the_users_folder(
    root, tmp_path, monkeypatch
):
    client = FakeRedis()
    _remote(monkeypatch, client)
    monkeypatch.setattr(portable, "triton_binaries", lambda record: dict(STUB))
    WarmStartCache([], None, "graph")._publish("k" * 40, _triton_entry("k" * 40))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    WarmStartCache([], None, "graph")._fetch_kernels(_triton_entry("k" * 40))
    assert not (tmp_path / "mine").exists() and not (root / "triton" / "jit").exists()


GPU_STEP = """
import os, sys, torch
from pathlib import Path
import ember
def f(x):
    return (x.sin() + 1).sum(0)
x = torch.randn(64, 32, device="cuda")
torch.testing.assert_close(ember.compile(f)(x), f(x))
torch.cuda.synchronize()
jit = Path(os.environ["EMBER_CACHE_DIR"]) / "triton" / "jit"
print(os.environ.get("TRITON_CACHE_DIR"), len(list(jit.glob("*/__grp__*.json"))))
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (Triton binaries)")
def test_triton_kernels_compiled_on_a_gpu_are_kept_under_the_cache_root(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "EMBER_"))}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / s) for s in SOURCES)
    env["EMBER_CACHE_DIR"] = str(tmp_path / "root")
    done = subprocess.run(
        [sys.executable, "-c", GPU_STEP], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    folder, kernels = done.stdout.split()[-2:]
    assert folder == str(tmp_path / "root" / "triton" / "jit")
    assert int(kernels) >= 1
