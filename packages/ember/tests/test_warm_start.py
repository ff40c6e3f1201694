"""Warm start: a compiled graph stored on disk is loaded, in this process after a reset or
in a new one, only when nothing it depends on changed, and runs bit for bit as compiled.

Footguns, worst first:
| a stale entry loaded (wrong result)     | each key part changed -> a miss: code, global read,
|                                         | option, version, input dtype, shape, requires_grad
| a faulty entry crashes or loads         | corrupt file -> recompiled with one warning
| an unnameable graph stored              | custom decompositions, a lambda in the graph -> not stored
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from conftest import ROOT, SOURCES

import ember
from ember import warm_cache

SCALE = 2.0


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))


def scaled(model, x):
    return model(x) * SCALE


def _step(fn, model, x, **compile_args):
    """(output, grads) of a compiled training step, compiled afresh (`ember.reset()` first)."""
    ember.reset()
    compiled = ember.compile(fn, **compile_args)
    model.zero_grad()
    out = compiled(model, x)
    out.float().sin().sum().backward()
    return out.detach().clone(), [p.grad.clone() for p in model.parameters()]


def _counts() -> tuple[int, int]:
    return warm_cache.STATS["hits"], warm_cache.STATS["stored"]


def test_warm_start_reloads_the_same_graph_bit_for_bit(warm):
    model, x = _model(), torch.randn(4, 8)
    cold = _step(scaled, model, x)
    assert _counts() == (0, 1)
    again = _step(scaled, model, x)
    assert _counts() == (1, 1)
    assert torch.equal(cold[0], again[0])
    assert all(torch.equal(a, b) for a, b in zip(cold[1], again[1]))
    expected = model(x) * SCALE
    torch.testing.assert_close(again[0], expected)


def test_warm_start_inference_graph_is_stored_apart_from_training(warm):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    with torch.no_grad():
        ember.reset()
        out = ember.compile(scaled)(model, x)
    assert _counts() == (0, 2)  # no_grad is another variant: a miss, stored
    torch.testing.assert_close(out, model(x) * SCALE)


def test_warm_start_misses_when_the_code_changes(warm):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)

    def scaled_differently(model, x):
        return model(x) * SCALE + 1.0

    out, _ = _step(scaled_differently, model, x)
    assert _counts() == (0, 2)
    torch.testing.assert_close(out, model(x) * SCALE + 1.0)


def test_warm_start_misses_when_a_global_read_changes(warm, monkeypatch):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    out, _ = _step(scaled, model, x)
    assert _counts() == (0, 2)
    torch.testing.assert_close(out, model(x) * 3.0)


def test_warm_start_misses_when_an_option_changes(warm):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    _step(scaled, model, x, options={"partitioner": "default"})
    assert _counts() == (0, 2)


def test_warm_start_misses_when_a_version_changes(warm, monkeypatch):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    monkeypatch.setattr(warm_cache, "_versions_part", lambda: json.dumps(["torch 9.9"]))
    _step(scaled, model, x)
    assert _counts() == (0, 2)


def test_warm_start_misses_when_the_toolchain_changes(warm, monkeypatch):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    monkeypatch.setattr(warm_cache, "_toolchain_part", lambda cxx, flags: "another compiler")
    _step(scaled, model, x)
    assert _counts() == (0, 2)


@pytest.mark.parametrize(
    "change",
    [
        lambda x: x.double(),
        lambda x: torch.randn(5, 8),
        lambda x: x.t().contiguous().t(),
        lambda x: x.clone().requires_grad_(),
    ],
    ids=["dtype", "shape", "strides", "requires_grad"],
)
def test_warm_start_misses_when_input_metadata_changes(warm, change):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    y = change(x)
    if y.dtype == torch.float64:
        model = model.double()
    out, _ = _step(scaled, model, y, dynamic=False)
    assert warm_cache.STATS["hits"] == 0
    torch.testing.assert_close(out, model(y) * SCALE)


def test_warm_start_misses_when_an_ember_variable_changes(warm, monkeypatch):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    monkeypatch.setenv("EMBER_SOME_SETTING", "1")
    _step(scaled, model, x)
    assert _counts() == (0, 2)


def _forward_entry(cache: Path) -> Path:
    """The one entry file of a forward graph (a training entry's backward is one apart)."""
    (entry,) = [
        path
        for path in (cache / "warm").rglob("*.json")
        if json.loads(json.loads(path.read_text())["payload"])["forward"] is not None
    ]
    return entry


def test_warm_start_corrupt_entry_is_recompiled_with_a_warning(warm):
    model, x = _model(), torch.randn(4, 8)
    cold = _step(scaled, model, x)
    entry = _forward_entry(warm)
    entry.write_bytes(entry.read_bytes()[:100])
    with pytest.warns(UserWarning, match="faulty"):
        again = _step(scaled, model, x)
    assert torch.equal(cold[0], again[0])
    assert _counts() == (0, 2)


def test_warm_start_entry_that_fails_to_load_is_recompiled(warm):
    model, x = _model(), torch.randn(4, 8)
    cold = _step(scaled, model, x)
    entry = _forward_entry(warm)
    envelope = json.loads(entry.read_text())
    payload = json.loads(envelope["payload"])
    payload["forward"]["graph"]["wrapper"] = "def call(args):\n    raise RuntimeError('x')\n("
    from guards.cache_root import store_record

    store_record(entry, payload)
    with pytest.warns(UserWarning, match="could not be loaded"):
        again = _step(scaled, model, x)
    assert torch.equal(cold[0], again[0])


def test_warm_start_does_not_store_a_custom_decomposition_table(warm):
    from prim_decomp import inductor_default

    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x, options={"decompositions": inductor_default.without()})
    assert _counts() == (0, 0)
    assert warm_cache.STATS["not_storable"] == 1


def test_warm_start_does_not_store_a_graph_calling_an_unnamed_function(warm):
    double = ember.allow_in_graph(lambda t: t * 2)

    def fn(model, x):
        return double(model(x))

    model, x = _model(), torch.randn(4, 8)
    out, _ = _step(fn, model, x)
    assert warm_cache.STATS["stored"] == 0
    torch.testing.assert_close(out, model(x) * 2)


def test_warm_start_off_stores_nothing(warm, monkeypatch):
    monkeypatch.setenv("EMBER_WARM_START", "0")
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    _step(scaled, model, x, options={"warm_start": True})
    assert _counts() == (0, 0)
    monkeypatch.setenv("EMBER_WARM_START", "1")
    _step(scaled, model, x, options={"warm_start": False})
    assert _counts() == (0, 0)


def two_outputs(model, x):
    y = model(x)
    return y * SCALE, y.sum(1)


def test_warm_start_keeps_the_backward_compiled_for_a_none_tangent(warm, monkeypatch):
    model, x = _model(), torch.randn(4, 8)

    def step():
        ember.reset()
        model.zero_grad()
        out, _ = ember.compile(two_outputs)(model, x)
        out.sum().backward()  # the second output's tangent is None: a backward without it
        return out.detach(), [p.grad.clone() for p in model.parameters()]

    cold = step()
    assert _counts() == (0, 2)  # the graphs, and the backward without the second tangent
    from aot_autograd import api

    def no_trace(*args, **kwargs):
        raise AssertionError("a hit traced the graph again")

    monkeypatch.setattr(api, "trace_program", no_trace)
    again = step()
    assert _counts() == (2, 2)
    assert torch.equal(cold[0], again[0])
    assert all(torch.equal(a, b) for a, b in zip(cold[1], again[1]))
    model.zero_grad()
    (model(x) * SCALE).sum().backward()
    for got, parameter in zip(again[1], model.parameters()):
        torch.testing.assert_close(got, parameter.grad)


# ----------------------------------------------------------------- new processes


def test_warm_start_new_process_loads_the_entry_bit_for_bit(tmp_path, run_step):
    cold = run_step(tmp_path / "cache")
    warm = run_step(tmp_path / "cache")
    assert cold["stats"].get("stored") == 1 and not cold["stats"].get("hits")
    assert warm["stats"].get("hits") == 1 and not warm["stats"].get("stored")
    assert warm["digest"] == cold["digest"]
    assert not warm["warnings"]


def test_cache_cli_info_prune_clear(tmp_path, run_step):
    cache = tmp_path / "cache"
    run_step(cache)
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache)}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / s) for s in SOURCES)

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "ember.cache", *args], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "warm-start entries" in cli("info")
    assert any((cache / "warm").rglob("*.json"))
    cli("prune", "--max-size", "0")
    assert not [*cache.rglob("*.json"), *cache.rglob("*.so"), *(cache / "cpp" / "index").iterdir()]
    run_step(cache)
    cli("clear")
    assert not any(cache.rglob("*.json"))
    # Pruned or cleared, the next process compiles again and is right.
    assert run_step(cache)["stats"].get("stored") == 1


def test_cache_prune_evicts_least_recently_used_first(tmp_path):
    from ember.cache import prune

    root = tmp_path / "root"
    (root / "warm").mkdir(parents=True)
    for i, name in enumerate(["old", "middle", "new"]):
        path = root / "warm" / f"{name}.json"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1000 + i, 1000 + i))
    removed, freed = prune(2000, root)
    assert (removed, freed) == (1, 1000)
    assert sorted(p.stem for p in (root / "warm").iterdir()) == ["middle", "new"]


def test_cache_prune_is_exclusive_between_processes(tmp_path):
    import fcntl

    from ember.cache import prune

    root = tmp_path / "root"
    (root / "warm").mkdir(parents=True)
    (root / "warm" / "a.json").write_bytes(b"x" * 100)
    fd = os.open(root / ".prune.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert prune(0, root) == (0, 0)  # another prune holds the lock: nothing done
    finally:
        os.close(fd)
    assert prune(0, root) == (1, 100)


def test_warm_start_warns_about_nothing_when_loading(warm):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _step(scaled, model, x)
    assert warm_cache.STATS["hits"] == 1


class WithConstant(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.offset = torch.ones(8)  # a plain tensor attribute: neither parameter nor buffer

    def forward(self, x):
        return self.linear(x) + self.offset


def test_warm_start_never_reuses_a_graph_for_another_tensor_constant(warm):
    torch.manual_seed(0)
    module, x = WithConstant(), torch.randn(4, 8)
    _step(lambda m, x: m(x), module, x)
    module.offset = torch.full((8,), 5.0)
    out, _ = _step(lambda m, x: m(x), module, x)
    torch.testing.assert_close(out, module(x))


def test_warm_start_batch_norm_statistics_are_updated_after_a_hit(warm):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    x = torch.randn(2, 3, 8, 8)
    _step(lambda m, x: m(x), model, x)
    before = model[1].running_mean.clone()
    out, _ = _step(lambda m, x: m(x), model, x)
    assert warm_cache.STATS["hits"] == 1
    expected = 0.9 * before + 0.1 * model[0](x).mean((0, 2, 3))
    torch.testing.assert_close(model[1].running_mean, expected)


def test_warm_start_outputs_that_alias_inputs_are_views_after_a_hit(warm):
    def fn(model, x):
        return model(x), x.view(-1)[2:]

    model, x = _model(), torch.randn(4, 8)
    for _ in range(2):
        ember.reset()
        out, view = ember.compile(fn)(model, x)
        out.sum().backward()
    assert warm_cache.STATS["hits"] == 1
    assert view._base is x or view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    torch.testing.assert_close(view, x.view(-1)[2:])
    torch.testing.assert_close(out, model(x))


def test_warm_start_miss_names_the_key_part_that_changed(warm, capsys):
    model, x = _model(), torch.randn(4, 8)
    _step(scaled, model, x)
    ember.set_logs(cache=logging.INFO)
    try:
        _step(scaled, model, x, options={"partitioner": "default"})
    finally:
        logging.getLogger("ember.cache").setLevel(logging.NOTSET)
    assert "differs from the last entry stored for scaled_graph in: options" in (
        capsys.readouterr().err
    )


def _tripled(t):
    return t * 3


def test_warm_start_does_not_store_a_graph_calling_a_user_function_whole(warm):
    """Its body could change under the same name; the key would not see it."""
    tripled = ember.allow_in_graph(_tripled)

    def fn(model, x):
        return tripled(model(x))

    model, x = _model(), torch.randn(4, 8)
    out, _ = _step(fn, model, x)
    assert warm_cache.STATS["stored"] == 0
    torch.testing.assert_close(out, model(x) * 3)


def test_warm_start_concurrent_processes_share_one_cache(tmp_path, run_step):
    """Two processes compiling into one empty cache at once, with a prune running
    meanwhile: both right, and a third loads the entry."""
    from concurrent.futures import ThreadPoolExecutor

    from ember.cache import prune

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    with ThreadPoolExecutor(2) as pool:
        first = [pool.submit(run_step, cache) for _ in range(2)]
        prune(0, cache)
        results = [f.result() for f in first]
    assert results[0]["digest"] == results[1]["digest"]
    third = run_step(cache)
    assert third["digest"] == results[0]["digest"]
    assert third["stats"].get("hits") == 1 or third["stats"].get("stored") == 1


# ----------------------------------------------------------------- symbolic sizes

SIZES_STEP = """
import json, sys
import torch, ember
from ember import warm_cache
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
def fn(model, x):
    if x.shape[0] > 6:  # a guard on the size that changes nothing in the graph
        pass
    return model(x).view(x.shape[0], 4, 4).sum(1) * 2.0
compiled = ember.compile(fn)
for size in json.loads(sys.argv[1]):
    x = torch.randn(size, 8)
    if sys.argv[2] == "mark":
        ember.mark_dynamic(x, 0)
    model.zero_grad()
    out = compiled(model, x)
    out.sin().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = fn(model, x)
    expected.sin().sum().backward()
    torch.testing.assert_close(out, expected)
    for got, want in zip(grads, model.parameters()):
        torch.testing.assert_close(got, want.grad)
print(json.dumps(dict(warm_cache.STATS)))
"""


def _run_sizes(cache: Path, sizes: list[int], how: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / s) for s in SOURCES)
    env["EMBER_CACHE_DIR"] = str(cache)
    done = subprocess.run(
        [sys.executable, "-c", SIZES_STEP, json.dumps(sizes), how],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_warm_start_symbolic_graph_of_mark_dynamic_hits_in_a_new_process_at_another_size(
    tmp_path,
):
    cold = _run_sizes(tmp_path / "cache", [4], "mark")
    assert cold.get("stored") == 1 and not cold.get("hits")
    warm = _run_sizes(tmp_path / "cache", [3, 5], "mark")
    assert warm.get("hits") == 1 and not warm.get("stored") and not warm.get("misses")


def test_warm_start_symbolic_graph_of_automatic_dynamic_hits_in_a_new_process_at_a_third_size(
    tmp_path,
):
    cold = _run_sizes(tmp_path / "cache", [4, 5], "automatic")  # static 4, then symbolic
    assert cold.get("stored") == 2 and not cold.get("hits")
    warm = _run_sizes(tmp_path / "cache", [4, 3], "automatic")
    # NOTE: the frame's symbolic capture record holds for size 4 too (its guards take any size
    # in range), so the warm process may run both sizes on the symbolic graph: one hit
    assert warm.get("hits") in (1, 2) and warm.get("capture_hits")
    assert not warm.get("stored") and not warm.get("misses"), warm


def test_warm_start_symbolic_entry_misses_where_the_shape_guards_differ(tmp_path):
    cold = _run_sizes(tmp_path / "cache", [4], "mark")  # guarded: size <= 6
    assert cold.get("stored") == 1
    warm = _run_sizes(tmp_path / "cache", [8], "mark")  # guarded: size > 6: the same graph
    assert warm.get("misses") == 1 and warm.get("stored") == 1 and not warm.get("hits")


# ----------------------------------------------------------------- Triton

TRITON_STEP = """
import hashlib, json
import torch, ember
from aot_autograd import aot_graph
from inductor_codegen import compile_graph
from prim_decomp import inductor_default
from ember import warm_cache
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPTIONS = {"device_codegen": "triton"}
def triton(gm, examples):  # the inductor backend, its graphs compiled to Triton on any device
    def part(g, i):
        return compile_graph(g, i, options=OPTIONS)
    return aot_graph(gm, examples, fw_compiler=part, bw_compiler=part, inference_compiler=part,
                     decompositions=inductor_default,
                     cache=warm_cache.warm_start_cache(gm, examples, OPTIONS))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
model = model.to(DEVICE)
def fn(model, x):
    return model(x).sin() * 2.0
x = torch.randn(4, 8, device=DEVICE)
out = ember.compile(fn, backend=triton)(model, x)
out.sum().backward()
grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
expected = fn(model, x)
expected.sum().backward()
torch.testing.assert_close(out, expected)
for got, p in zip(grads, model.parameters()):
    torch.testing.assert_close(got, p.grad)
data = out.detach().cpu().numpy().tobytes() + b"".join(g.cpu().numpy().tobytes() for g in grads)
print(json.dumps({"stats": dict(warm_cache.STATS), "digest": hashlib.sha256(data).hexdigest()}))
"""


def _run_triton(cache: Path, **variables: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "TRITON_"))}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / s) for s in SOURCES)
    env["EMBER_CACHE_DIR"] = str(cache)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    env.update(variables)
    done = subprocess.run(
        [sys.executable, "-c", TRITON_STEP], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_warm_start_triton_graph_new_process_loads_the_entry_bit_for_bit(tmp_path):
    pytest.importorskip("triton")
    cold = _run_triton(tmp_path / "cache")
    assert cold["stats"].get("stored") == 1 and not cold["stats"].get("hits")
    warm = _run_triton(tmp_path / "cache")
    assert warm["stats"].get("hits") == 1 and not warm["stats"].get("stored")
    assert warm["digest"] == cold["digest"]
    other = _run_triton(tmp_path / "cache", TRITON_DEBUG="0")  # a Triton switch: a miss
    assert other["stats"].get("stored") == 1 and not other["stats"].get("hits")


def output_and_ratio(model, x):
    y = model(x)
    return y * SCALE, (y / y).sum(0)


def _two_output_step(model, x, used):
    """Grads of a compiled step whose loss reads the outputs `used` (compiled afresh)."""
    ember.reset()
    compiled = ember.compile(output_and_ratio)
    model.zero_grad()
    outputs = compiled(model, x)
    sum(outputs[i].sin().sum() for i in used).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_warm_start_full_backward_first_run_in_a_later_process_matches_eager(warm):
    model, x = _model(), torch.randn(4, 8)
    _two_output_step(model, x, [0])  # only the backward without tangent 1 is compiled
    assert warm_cache.STATS["full_backward_stored"] == 0
    model.zero_grad()
    outputs = output_and_ratio(model, x)
    sum(o.sin().sum() for o in outputs).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    got = _two_output_step(model, x, [0, 1])  # a hit; the full backward traced again
    assert warm_cache.STATS["hits"] >= 1 and warm_cache.STATS["full_backward_stored"] == 1
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    ember.reset()
    cold = ember.compile(output_and_ratio, options={"warm_start": False})
    model.zero_grad()
    sum(o.sin().sum() for o in cold(model, x)).backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(got, model.parameters()))
    again = _two_output_step(model, x, [0, 1])
    assert warm_cache.STATS["full_backward_hits"] == 1
    assert all(torch.equal(a, b) for a, b in zip(got, again))


# A module whose graph has a dropout that drops nothing (p=0 in training, as transformers'
# models built with zero dropout rates), run under CPU autocast bf16.
DROPOUT_STEP = """
import hashlib, json
import torch, ember
from ember import warm_cache

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)
        self.drop = torch.nn.Dropout(0.0)
        self.out = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.out(torch.nn.functional.gelu(self.drop(self.fc(x))) + 1.0)

torch.manual_seed(0)
model = Block().train()
x = torch.randn(4, 8)
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = ember.compile(model)(x)
    loss = out.float().sin().mean()
loss.backward()
grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
with torch.autocast("cpu", dtype=torch.bfloat16):
    expected = model(x).float().sin().mean()
expected.backward()
torch.testing.assert_close(loss, expected, rtol=2e-2, atol=1e-3)  # bf16 rounding
for got, p in zip(grads, model.parameters()):
    torch.testing.assert_close(got, p.grad, rtol=2e-2, atol=1e-3)
data = out.detach().float().numpy().tobytes() + b"".join(g.numpy().tobytes() for g in grads)
print(json.dumps({"digest": hashlib.sha256(data).hexdigest(), "stats": dict(warm_cache.STATS)}))
"""


def test_warm_start_graph_with_identity_dropout_hits_in_a_new_process(tmp_path):
    # The backend rewrites a dropout that drops nothing away before tracing; the capture
    # record keeps the graph as captured, so the new process keys the same entry.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / s) for s in SOURCES)
    env["EMBER_CACHE_DIR"] = str(tmp_path / "cache")
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", DROPOUT_STEP], env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["stats"].get("stored") == 1 and cold["stats"].get("captures_kept") == 1
    assert warm["stats"].get("capture_hits") == 1
    assert warm["stats"].get("hits") == 1 and not warm["stats"].get("misses")
    assert warm["digest"] == cold["digest"]


# A convolution training step: the compiled forward saves convolution outputs
# channels-last, so the backward is compiled against those layouts and returns its
# gradients in eager's strides through a wrapper (aot_autograd.saved_layouts).
CONV_STEP = """
import hashlib, json
import torch, ember
from ember import warm_cache

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
    torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4),
).train()
x = torch.randn(2, 3, 16, 16)
out = ember.compile(model)(x)
out.sin().sum().backward()
grads = [p.grad.clone() for p in model.parameters()]
strides = [g.stride() for g in grads]
model.zero_grad()
expected = model(x)  # eager (batch norm statistics updated twice: outputs do not read them)
expected.sin().sum().backward()
torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
for got, p in zip(grads, model.parameters()):
    torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-5)
    assert got.stride() == p.grad.stride()
data = out.detach().numpy().tobytes() + b"".join(g.numpy().tobytes() for g in grads)
print(json.dumps({"digest": hashlib.sha256(data).hexdigest(), "stats": dict(warm_cache.STATS)}))
"""


def _run_child(code: str, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
    env["PYTHONPATH"] = os.pathsep.join(str(ROOT / s) for s in SOURCES)
    env["EMBER_CACHE_DIR"] = str(cache)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_warm_start_backward_in_the_forwards_saved_layouts_is_stored_and_loaded(tmp_path):
    cold = _run_child(CONV_STEP, tmp_path / "cache")
    assert cold["stats"].get("stored") == 1 and cold["stats"].get("full_backward_stored") == 1
    warm = _run_child(CONV_STEP, tmp_path / "cache")
    assert warm["stats"].get("hits") == 1 and warm["stats"].get("full_backward_hits") == 1
    assert not warm["stats"].get("misses") and not warm["stats"].get("full_backward_stored")
    assert warm["digest"] == cold["digest"]
