"""The remote cache on a real redis-server (started here on a free localhost port).

Footguns, worst first:
| garbage from the remote loaded (wrong result or a crash) | garbage entry / library -> compiled, one warning
| a remote that is down fails the compile                 | down -> local cache, one warning
| B recompiles although A published                       | two processes: B loads with remote hits only
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(
    REDIS is None, reason="redis-server is not installed (apt-get install redis-server)"
)
redis = pytest.importorskip("redis", reason="redis-py is not installed (pip install 'redis>=5')")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    """A redis-server of this test's own, on a free port, no persistence; stopped after."""
    port = _free_port()
    server = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            pytest.fail("redis-server did not start")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_remote_cache_second_process_loads_with_remote_hits_only(tmp_path, redis_url, run_step):
    a = run_step(tmp_path / "a", redis_url)
    client = redis.Redis.from_url(redis_url)
    kinds = {key.decode().split(":")[2] for key in client.keys("ember:*")}
    assert kinds == {"entry", "kernel", "library", "capture"}
    b = run_step(tmp_path / "b", redis_url)
    assert b["stats"].get("remote_hits") == 1 and not b["stats"].get("stored")
    # nor captured: the capture record A published was installed
    assert b["stats"].get("capture_remote_hits") == 1 and b["stats"].get("capture_hits") == 1
    assert b["digest"] == a["digest"]
    assert not b["warnings"]
    # B compiled no kernel: its libraries are the ones A published.
    assert not list((tmp_path / "b" / "cpp" / "lib").glob("*.cpp"))


def test_remote_cache_down_degrades_to_local_with_one_warning(tmp_path, run_step):
    url = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    cold = run_step(tmp_path / "c", url)
    assert cold["stats"].get("stored") == 1
    assert len([w for w in cold["warnings"] if "remote ember cache" in w]) == 1
    warm = run_step(tmp_path / "c", url)
    assert warm["stats"].get("hits") == 1 and warm["digest"] == cold["digest"]


def test_remote_cache_garbage_entry_is_compiled_with_one_warning(tmp_path, redis_url, run_step):
    a = run_step(tmp_path / "a", redis_url)
    client = redis.Redis.from_url(redis_url)
    for key in client.keys("ember:*:entry:*"):
        client.set(key, b"\x00not an entry")
    b = run_step(tmp_path / "b", redis_url)
    assert b["digest"] == a["digest"]
    assert b["stats"].get("stored") == 1 and not b["stats"].get("hits")
    assert len([w for w in b["warnings"] if "remote ember cache" in w]) == 1


def test_remote_cache_garbage_library_is_never_loaded(tmp_path, redis_url, run_step):
    a = run_step(tmp_path / "a", redis_url)
    client = redis.Redis.from_url(redis_url)
    for key in client.keys("ember:*:library:*"):
        client.set(key, b"\x7fELF garbage")
    b = run_step(tmp_path / "b", redis_url)
    assert b["digest"] == a["digest"]  # the kernels were compiled locally instead
    assert list((tmp_path / "b" / "cpp" / "lib").glob("*.cpp"))
    assert len([w for w in b["warnings"] if "remote ember cache" in w]) == 1


def test_remote_cache_slow_server_degrades(tmp_path, run_step):
    """A server that accepts but never answers: each request waits the timeout, once."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        result = run_step(tmp_path / "s", url, EMBER_REMOTE_CACHE_TIMEOUT="0.5")
    assert result["stats"].get("stored") == 1
    assert len([w for w in result["warnings"] if "remote ember cache" in w]) == 1
