import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

# Tests look at what each compile makes (artifacts, logs, kernel counts): they compile cold.
# The warm-start tests turn it on for themselves, with a cache folder of their own.
os.environ.setdefault("EMBER_WARM_START", "0")
# Helper modules beside the tests (copy_counting, distributed_workers) import by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest

import dynamo_capture
import ember
from ember import warm_cache


@pytest.fixture(autouse=True)
def _clean_state():
    """Each test starts from the default stance and silent logs."""
    yield
    dynamo_capture.set_stance("default")
    for name in ("ember",):
        logging.getLogger(name).setLevel(logging.WARNING)


CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture
def fresh_ember():
    """A test of what compiles keep starts and ends with none kept (`ember.reset()`)."""
    ember.reset()
    yield
    ember.reset()


@pytest.fixture
def warm(tmp_path, monkeypatch):
    """Warm start on, with a cache root of this test's own."""
    monkeypatch.setenv("EMBER_WARM_START", "1")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("EMBER_REMOTE_CACHE", raising=False)
    warm_cache.STATS.clear()
    yield tmp_path / "cache"
    ember.reset()


@pytest.fixture
def unfrozen_heap():
    """A test of compiles freezing the heap starts from an unfrozen one (torch.compile,
    used as a reference by other tests, freezes the process's heap on some versions)."""
    import gc

    was_frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    yield
    if was_frozen:
        gc.freeze()


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of a Chromium (or Chrome) binary for headless page tests; skips without one.

    $EMBER_CHROMIUM names one explicitly. CI installs Debian's `chromium` package.
    """
    explicit = os.environ.get("EMBER_CHROMIUM")
    found = explicit if explicit and os.access(explicit, os.X_OK) else None
    for name in () if found else CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            break
    if found is None:
        pytest.skip(
            "no Chromium for the browser test: install it (`apt-get install -y chromium` on "
            f"Debian/Ubuntu) or set EMBER_CHROMIUM; looked for {', '.join(CHROMIUM_NAMES)}"
        )
    return found


# ----------------------------------------------------------------- a step in a new process

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ["packages/ember/src", "guards/src", "dynamo_capture/src", "prim_decomp/src"]
SOURCES += ["aot_autograd/src", "inductor_codegen/src"]

STEP = """
import hashlib, json, sys, time, warnings
import torch, ember
from ember import warm_cache
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
x = torch.randn(4, 8)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    start = time.perf_counter()
    out = ember.compile(model)(x)
    out.sin().sum().backward()
    seconds = time.perf_counter() - start
data = out.detach().numpy().tobytes() + b"".join(p.grad.numpy().tobytes() for p in model.parameters())
print(json.dumps({"digest": hashlib.sha256(data).hexdigest(), "stats": dict(warm_cache.STATS),
                  "seconds": seconds, "warnings": [str(w.message) for w in caught]}))
"""


def _run_step(cache: Path, remote: str | None = None, **variables: str) -> dict:
    """One training step of a small model in a new process; what it reports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / s) for s in SOURCES)
    env["EMBER_CACHE_DIR"] = str(cache)
    if remote is not None:
        env["EMBER_REMOTE_CACHE"] = remote
    env.update(variables)
    done = subprocess.run(
        [sys.executable, "-c", STEP], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def run_step():
    """`run_step(cache, remote=None, **variables)`: a compiled training step of a small
    model in a new process (warm start on); returns its digest, STATS, seconds, warnings."""
    return _run_step
