"""Warm start of capture: a later compile of the same frame installs the kept capture record
(no bytecode capture) only when nothing the record depends on changed.

Footguns, worst first:
| a stale record installed (wrong result) | frame code, a global read, a closure's contents,
|                                         | a function the frame calls, a module attribute,
|                                         | options, input metadata changed -> captured again
| a faulty record crashes or installs     | corrupt file, malformed record -> captured again
| a record kept that cannot be found      | a lambda in a closure, a symbolic graph -> not kept
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

import ember
from ember import warm_cache

SCALE = 2.0


def helper(x):
    return x.cos() + 1


@pytest.fixture
def no_capture(monkeypatch):
    """Calling it makes every later capture fail the test (the record must be installed)."""

    def forbid():
        def capture(*args, **kwargs):
            raise AssertionError("captured, though a kept record applies")

        monkeypatch.setattr(sys.modules["dynamo_capture.optimize"], "capture_frame", capture)

    return forbid


def scaled(x):
    return helper(x) * SCALE + x.sum()


def _run(fn, *args, backend="eager", **compile_args):
    """fn compiled afresh (a new compiled callable, as in a new process) and called."""
    return ember.compile(fn, backend=backend, **compile_args)(*args)


def _records(cache) -> list:
    return sorted((cache / "capture").rglob("*.json"))


def test_warm_capture_installs_record_without_capturing(warm, no_capture):
    x = torch.randn(4, 8)
    first = _run(scaled, x)
    assert warm_cache.STATS["captures_kept"] == 1
    no_capture()
    second = _run(scaled, x)
    assert warm_cache.STATS["capture_hits"] == 1
    torch.testing.assert_close(second, scaled(x))
    torch.testing.assert_close(first, second)


def test_warm_capture_module_training_step_matches_eager(warm, no_capture):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
    x = torch.randn(4, 8)
    ember.compile(model, backend="aot_eager")(x).sum().backward()
    model.zero_grad()
    no_capture()
    out = ember.compile(model, backend="aot_eager")(x)
    out.sin().sum().backward()
    assert warm_cache.STATS["capture_hits"] == 1
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.sin().sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads, [p.grad for p in model.parameters()])


def test_warm_capture_changed_global_recaptures(warm, monkeypatch):
    x = torch.randn(4, 8)
    _run(scaled, x)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)
    out = _run(scaled, x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, helper(x) * 3.0 + x.sum())


def test_warm_capture_changed_called_function_recaptures(warm, monkeypatch):
    x = torch.randn(4, 8)
    _run(scaled, x)

    def helper(x):  # the same name, another body
        return x.sin() - 1

    helper.__qualname__ = "helper"
    monkeypatch.setattr(sys.modules[__name__], "helper", helper)
    out = _run(scaled, x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, helper(x) * SCALE + x.sum())


def test_warm_capture_changed_frame_code_recaptures(warm):
    x = torch.randn(4, 8)
    namespace = {"__name__": __name__}
    exec("def frame(x):\n    return x * 2\n", namespace)  # noqa: S102
    _run(namespace["frame"], x)
    exec("def frame(x):\n    return x * 5\n", namespace)  # noqa: S102
    out = _run(namespace["frame"], x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, x * 5)


def test_warm_capture_changed_closure_contents_recaptures(warm):
    def make(k):
        def frame(x):
            return x * k

        return frame

    x = torch.randn(4, 8)
    _run(make(2), x)
    out = _run(make(7), x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, x * 7)
    again = _run(make(7), x)
    assert warm_cache.STATS["capture_hits"] == 1
    torch.testing.assert_close(again, x * 7)


@torch.no_grad()
def rotary(x):  # as transformers decorates its rotary embeddings' forward
    return x.cos()


def with_rotary(x):
    return rotary(x) + x * 2


def test_warm_capture_of_a_frame_calling_a_no_grad_decorated_function_is_kept(
    warm, no_capture, monkeypatch
):
    # the decorator's wrapper keeps `ctx.clone`, a method bound to the no_grad object
    x = torch.randn(4, 8, requires_grad=True)
    first = _run(with_rotary, x)
    assert warm_cache.STATS["captures_kept"] == 1
    no_capture()
    second = _run(with_rotary, x)
    assert warm_cache.STATS["capture_hits"] == 1
    torch.testing.assert_close(second, with_rotary(x))
    torch.testing.assert_close(first, second)


def test_warm_capture_of_a_decorated_function_under_another_grad_mode_recaptures(warm):
    x = torch.randn(4, 8, requires_grad=True)
    _run(with_rotary, x)
    module = sys.modules[__name__]
    original = module.rotary
    try:
        module.rotary = torch.enable_grad()(original.__wrapped__)
        out = _run(with_rotary, x)
        assert warm_cache.STATS["capture_hits"] == 0
        out.sum().backward()  # the cosine's gradient flows under enable_grad
        torch.testing.assert_close(x.grad, -x.detach().sin() + 2)
    finally:
        module.rotary = original


def reads_environment(x):  # as transformers reads flags in forward
    if os.environ.get("EMBER_WARM_TEST_FLAG") == "1":
        return x + 1
    return x - 1


def test_warm_capture_of_a_frame_reading_the_environment_is_kept_and_guarded(warm, monkeypatch):
    x = torch.randn(4, 8)
    monkeypatch.setenv("EMBER_WARM_TEST_FLAG", "1")
    torch.testing.assert_close(_run(reads_environment, x), x + 1)
    assert warm_cache.STATS["captures_kept"] == 1
    torch.testing.assert_close(_run(reads_environment, x), x + 1)
    assert warm_cache.STATS["capture_hits"] == 1
    monkeypatch.setenv("EMBER_WARM_TEST_FLAG", "0")  # another process's environment
    torch.testing.assert_close(_run(reads_environment, x), x - 1)


def test_warm_capture_changed_module_attribute_recaptures(warm):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Dropout(0.0))
    x = torch.randn(4, 8)
    ember.compile(model, backend="eager")(x)
    model[1].eps = 0.5
    out = ember.compile(model, backend="eager")(x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, model(x))
    model.eval()  # the training flag Dropout reads: an EQUALS_MATCH guard
    out = ember.compile(model, backend="eager")(x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, model(x))


def test_warm_capture_other_module_instance_of_same_structure_installs(warm, no_capture):
    torch.manual_seed(0)
    first = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    second = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(4, 8)
    ember.compile(first, backend="eager")(x)
    no_capture()
    out = ember.compile(second, backend="eager")(x)
    assert warm_cache.STATS["capture_hits"] == 1
    torch.testing.assert_close(out, second(x))  # its own weights, not the first's


def test_warm_capture_changed_options_recaptures(warm):
    x = torch.randn(4, 8)
    _run(scaled, x)
    out = _run(scaled, x, backend="aot_eager")
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, scaled(x))
    _run(scaled, x, fullgraph=True)
    assert warm_cache.STATS["capture_hits"] == 0


def test_warm_capture_changed_input_metadata_recaptures(warm):
    x = torch.randn(4, 8)
    _run(scaled, x)
    for other in (torch.randn(5, 8), x.double(), x.t(), x.requires_grad_()):
        out = _run(scaled, other)
        torch.testing.assert_close(out, scaled(other))
    assert warm_cache.STATS["capture_hits"] == 0


def test_warm_capture_grad_mode_is_guarded(warm):
    x = torch.randn(4, 8)
    _run(scaled, x)
    with torch.no_grad():
        out = _run(scaled, x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, scaled(x))


def test_warm_capture_corrupt_record_recaptures(warm):
    x = torch.randn(4, 8)
    _run(scaled, x)
    (path,) = _records(warm)
    path.write_bytes(b"not json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _run(scaled, x)
    assert warm_cache.STATS["capture_hits"] == 0
    assert any("faulty" in str(w.message) for w in caught)
    torch.testing.assert_close(out, scaled(x))


def test_warm_capture_malformed_record_recaptures(warm):
    from guards.cache_root import load_record, store_record

    x = torch.randn(4, 8)
    _run(scaled, x)
    (path,) = _records(warm)
    record = load_record(path)
    record["graph"]["nodes"][1][1] = "no_such_op"  # a checksum that holds, a graph that does not
    store_record(path, record)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _run(scaled, x)
    assert warm_cache.STATS["capture_hits"] == 0
    assert any("could not be installed" in str(w.message) for w in caught)
    torch.testing.assert_close(out, scaled(x))


def test_warm_capture_record_with_other_graph_code_is_not_installed(warm):
    from guards.cache_root import load_record, store_record

    x = torch.randn(4, 8)
    _run(scaled, x)
    (path,) = _records(warm)
    record = load_record(path)
    record["graph"]["code"] += "\n# another graph"
    store_record(path, record)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        out = _run(scaled, x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, scaled(x))


def test_warm_capture_lambda_in_closure_is_not_kept(warm):
    fn = lambda x: x + 1  # noqa: E731

    def frame(x):
        return fn(x) * 2

    x = torch.randn(4, 8)
    _run(frame, x)
    out = _run(frame, x)
    torch.testing.assert_close(out, frame(x))


def test_warm_capture_off_keeps_nothing(warm, monkeypatch):
    monkeypatch.setenv("EMBER_WARM_START", "0")
    _run(scaled, torch.randn(4, 8))
    assert not (warm / "capture").exists() or not _records(warm)


def test_warm_capture_training_step_in_new_process_is_bit_identical(tmp_path, run_step):
    cold = run_step(tmp_path)
    warm_run = run_step(tmp_path)
    assert cold["stats"].get("captures_kept") == 1
    assert warm_run["stats"].get("capture_hits") == 1
    assert warm_run["digest"] == cold["digest"]
    assert not warm_run["warnings"], warm_run["warnings"]


def test_warm_capture_record_is_plain_json(warm):
    _run(scaled, torch.randn(4, 8))
    (path,) = _records(warm)
    envelope = json.loads(path.read_text())
    record = json.loads(envelope["payload"])
    assert {"guards", "graph", "inputs", "output"} <= set(record)


def test_warm_capture_installed_sizes_feed_automatic_dynamic(warm):
    from ember.api import compiled_callable_of

    _run(scaled, torch.randn(4, 8))
    compiled = ember.compile(scaled, backend="eager")
    compiled(torch.randn(4, 8))
    assert warm_cache.STATS["capture_hits"] == 1
    for rows in (5, 6, 7):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(compiled(x), scaled(x))
    # the installed entry, then one symbolic graph for every other size
    assert len(compiled_callable_of(compiled).entries) == 2


class Block(torch.nn.Module):
    def forward(self, x):
        return self.scale(x) + 1

    def scale(self, x):
        return x * 2


def test_warm_capture_changed_class_body_recaptures(warm, monkeypatch):
    x = torch.randn(4, 8)
    ember.compile(Block(), backend="eager")(x)

    class Edited(torch.nn.Module):  # the same name, one method edited
        def forward(self, x):
            return self.scale(x) + 1

        def scale(self, x):
            return x * 3

    Edited.__name__ = Edited.__qualname__ = "Block"
    monkeypatch.setattr(sys.modules[__name__], "Block", Edited)
    out = ember.compile(Edited(), backend="eager")(x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, x * 3 + 1)


def test_warm_capture_guard_subclass_is_not_kept_as_its_base():
    from dataclasses import dataclass

    from dynamo_capture.portable import NotPortable, encode_guard
    from guards import IdGuard
    from guards.sources import LocalSource

    @dataclass(frozen=True, slots=True)
    class Special(IdGuard):
        extra: int = 0

    guard = Special(LocalSource("x"), id(len), lambda: len, "builtin_function_or_method", 1)
    with pytest.raises(NotPortable):
        encode_guard(guard)


USER_MODULE = """
import functools
import torch


def logged(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    return wrapper


class Base(torch.nn.Module):
    def scale(self, x):
        return x * 2


class Block(Base):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.mode = "gelu"

    @logged
    def forward(self, x):
        if self.mode in {"gelu", "tanh", "erf"}:  # a frozenset constant: hash-seed ordered
            x = torch.nn.functional.gelu(self.linear(x))
        return super().scale(x) + 1
"""

CHILD = """
import json, sys
sys.path.insert(0, {folder!r})
import torch, ember, user_block
from ember import warm_cache
torch.manual_seed(0)
block = user_block.Block()
x = torch.randn(4, 8)
out = ember.compile(block)(x)
print(json.dumps({{"stats": dict(warm_cache.STATS), "out": out.tolist()}}))
"""


def test_warm_capture_user_classes_install_in_new_process_with_other_hash_seed(tmp_path):
    import os
    import subprocess

    root = Path(__file__).resolve().parents[3]
    sources = ["packages/ember/src", "guards/src", "dynamo_capture/src", "prim_decomp/src"]
    sources += ["aot_autograd/src", "inductor_codegen/src"]
    (tmp_path / "user_block.py").write_text(USER_MODULE)
    runs = []
    for seed in ("1", "2"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
        env["PYTHONPATH"] = os.pathsep.join(str(root / s) for s in sources)
        env["EMBER_CACHE_DIR"] = str(tmp_path / "cache")
        env["PYTHONHASHSEED"] = seed
        code = CHILD.format(folder=str(tmp_path))
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0]["stats"].get("captures_kept") == 1
    assert runs[1]["stats"].get("capture_hits") == 1, runs[1]["stats"]
    assert runs[1]["out"] == runs[0]["out"]


def test_warm_capture_records_are_read_once_per_frame_until_the_store_changes(warm, no_capture):
    x = torch.randn(4, 8)
    _run(scaled, x)  # read (nothing kept yet), captured, kept
    reads = warm_cache.STATS["capture_record_reads"]
    for _ in range(3):  # new compiled callables of the frame: one read for all of them
        torch.testing.assert_close(_run(scaled, x), scaled(x))
    assert warm_cache.STATS["capture_record_reads"] == reads + 1
    assert warm_cache.STATS["capture_hits"] == 3


def test_warm_capture_record_kept_later_in_the_process_is_installed(warm):
    x = torch.randn(4, 8)
    _run(scaled, x)
    _run(scaled, x)  # the record read
    doubled = x.double()
    torch.testing.assert_close(_run(scaled, doubled), scaled(doubled))  # another record kept
    assert warm_cache.STATS["captures_kept"] == 2
    hits = warm_cache.STATS["capture_hits"]
    torch.testing.assert_close(_run(scaled, doubled), scaled(doubled))  # the store changed
    assert warm_cache.STATS["capture_hits"] == hits + 1


def with_default(x, factor=2.0):
    return x.sin() * factor


def test_warm_capture_changed_default_argument_recaptures(warm, monkeypatch):
    x = torch.randn(4, 8)
    _run(with_default, x)
    monkeypatch.setattr(with_default, "__defaults__", (3.0,))
    out = _run(with_default, x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, x.sin() * 3.0)


def test_warm_capture_changed_version_recaptures(warm, monkeypatch):
    x = torch.randn(4, 8)
    _run(scaled, x)
    monkeypatch.setattr(warm_cache, "_versions_part", lambda: json.dumps(["torch 9.9"]))
    torch.testing.assert_close(_run(scaled, x), scaled(x))
    assert warm_cache.STATS["capture_hits"] == 0


def test_warm_capture_changed_config_variable_recaptures(warm, monkeypatch):
    x = torch.randn(4, 8)
    _run(scaled, x)
    monkeypatch.setenv("EMBER_SOME_SETTING", "1")
    torch.testing.assert_close(_run(scaled, x), scaled(x))
    assert warm_cache.STATS["capture_hits"] == 0


WORLD = {"size": 2}


@ember.assume_constant_result
def world_size():
    return WORLD["size"]


def scaled_by_world(x):
    return x * world_size()


def test_warm_capture_assume_constant_result_frame_is_not_kept(warm, monkeypatch):
    x = torch.randn(4, 8)
    torch.testing.assert_close(_run(scaled_by_world, x), x * 2)
    assert warm_cache.STATS["captures_kept"] == 0  # its result would hold in no later process
    monkeypatch.setitem(WORLD, "size", 3)
    torch.testing.assert_close(_run(scaled_by_world, x), x * 3)
    assert warm_cache.STATS["capture_hits"] == 0


def test_warm_capture_install_runs_with_old_objects_frozen(warm, monkeypatch, unfrozen_heap):
    """A full collection during a warm first call would scan every object of the process
    (a model's, torch's): installing, as compiling, freezes the objects that exist."""
    from dynamo_capture import portable
    from guards import garbage_collection

    x = torch.randn(4, 8)
    _run(scaled, x)
    seen = []
    install = portable.install_parts

    def spying(*args, **kwargs):
        seen.append(garbage_collection._frozen_here[0])
        return install(*args, **kwargs)

    monkeypatch.setattr(portable, "install_parts", spying)
    torch.testing.assert_close(_run(scaled, x), scaled(x))
    assert warm_cache.STATS["capture_hits"] == 1
    assert seen == [1]


# ----------------------------------------------------------------- frames with graph breaks


def printed_between(x):
    y = x.sin() + 1
    print("between the graphs", file=sys.stderr)
    return y.cos() * 2 + x


def branched(x):
    y = x * 2
    if y.sum() > 0:
        return y.sin()
    return y.cos() - 1


def broken_in_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("inside no_grad", file=sys.stderr)
        y = y + 1
    return y * x


def test_warm_capture_graph_break_frame_installs_without_capturing(warm, no_capture):
    x = torch.randn(4, 8)
    first = _run(printed_between, x)
    kept = warm_cache.STATS["captures_kept"]
    assert kept == 3  # the frame (its break), the part before it, the resume function
    records = [json.loads(json.loads(p.read_text())["payload"]) for p in _records(warm)]
    assert sum(record.get("break") is not None for record in records) == 1
    no_capture()
    second = _run(printed_between, x)
    assert warm_cache.STATS["capture_hits"] == kept
    torch.testing.assert_close(second, printed_between(x))
    torch.testing.assert_close(first, second)


def test_warm_capture_data_dependent_branch_installs_either_branch(warm, no_capture):
    x = torch.randn(4, 8).abs()
    compiled = ember.compile(branched, backend="eager")
    compiled(x)
    compiled(-x)
    no_capture()
    again = ember.compile(branched, backend="eager")
    for value in (x, -x):
        torch.testing.assert_close(again(value), branched(value))
    assert warm_cache.STATS["capture_hits"] >= 3


def chained_branch(x):
    if 0 < x.sum() < 100:
        return x.sin()
    return x.cos() - 1


def kept_in_call_argument(x):
    return torch.add(x, x.sum() > 0 and 3)


@pytest.mark.parametrize("fn", [chained_branch, kept_in_call_argument])
def test_warm_capture_jump_handing_statement_values_installs(warm, no_capture, fn):
    """A data-dependent jump with the statement's values below its tested one (a chained
    comparison's operand; a call's NULL, callable and argument) installs from the
    record, each branch resuming with those values."""
    x = torch.randn(4, 8).abs()
    compiled = ember.compile(fn, backend="eager")
    compiled(x)
    compiled(-x)
    no_capture()
    again = ember.compile(fn, backend="eager")
    for value in (x, -x):
        torch.testing.assert_close(again(value), fn(value))
    assert warm_cache.STATS["capture_hits"] >= 3


def test_warm_capture_graph_break_in_no_grad_block_keeps_grad_mode(warm, no_capture):
    x = torch.randn(4, 8, requires_grad=True)
    _run(broken_in_no_grad, x)
    no_capture()
    out = _run(broken_in_no_grad, x)
    expected = broken_in_no_grad(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    grad = x.grad.clone()
    x.grad = None
    expected.sum().backward()
    torch.testing.assert_close(grad, x.grad)


class BrokenBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x).relu()
        print("between the graphs", file=sys.stderr)
        return self.linear(y) + 1


def test_warm_capture_module_graph_break_training_step_matches_eager(warm, no_capture):
    torch.manual_seed(0)
    model = BrokenBlock()
    x = torch.randn(4, 8)
    ember.compile(model, backend="aot_eager")(x).sum().backward()
    model.zero_grad()
    no_capture()
    out = ember.compile(model, backend="aot_eager")(x)
    out.sin().sum().backward()
    assert warm_cache.STATS["capture_hits"] >= 3
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.sin().sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads, [p.grad for p in model.parameters()])


def test_warm_capture_graph_break_failing_guard_recaptures(warm):
    _run(printed_between, torch.randn(4, 8))
    x = torch.randn(4, 8, dtype=torch.float64)
    out = _run(printed_between, x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, printed_between(x))


def test_warm_capture_graph_break_changed_code_after_break_recaptures(warm):
    x = torch.randn(4, 8)
    namespace = {"__name__": __name__, "sys": sys}
    source = "def frame(x):\n    y = x * 2\n    print('', file=sys.stderr)\n    return y {}\n"
    exec(source.format("+ 1"), namespace)  # noqa: S102
    _run(namespace["frame"], x)
    exec(source.format("- 5"), namespace)  # noqa: S102
    out = _run(namespace["frame"], x)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, x * 2 - 5)


BREAK_CHILD = """
import json, sys
import torch, ember
import dynamo_capture.optimize
optimize = sys.modules["dynamo_capture.optimize"]
from ember import warm_cache
if {forbid}:
    def capture(*args, **kwargs):
        raise AssertionError("captured on the warm path")
    optimize.capture_frame = capture
def frame(x, n):
    y = (x * n).sin()
    print("between the graphs", file=sys.stderr)
    if y.sum() > 0:
        return y.cos() + x
    return y - x
torch.manual_seed(0)
x = torch.randn(4, 8)
compiled = ember.compile(frame, backend="inductor")
outs = [compiled(x, 2).tolist(), compiled(-x, 2).tolist()]
print(json.dumps({{"stats": dict(warm_cache.STATS), "outs": outs}}))
"""


def test_warm_capture_graph_break_frame_in_new_process_skips_capture(tmp_path):
    import os
    import subprocess

    root = Path(__file__).resolve().parents[3]
    sources = ["packages/ember/src", "guards/src", "dynamo_capture/src", "prim_decomp/src"]
    sources += ["aot_autograd/src", "inductor_codegen/src"]
    runs = []
    for forbid in (False, True):
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
        env["PYTHONPATH"] = os.pathsep.join(str(root / s) for s in sources)
        env["EMBER_CACHE_DIR"] = str(tmp_path / "cache")
        done = subprocess.run(
            [sys.executable, "-c", BREAK_CHILD.format(forbid=forbid)],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm_run = runs
    assert cold["stats"].get("captures_kept", 0) >= 4, cold["stats"]
    assert warm_run["stats"].get("capture_hits") == cold["stats"]["captures_kept"]
    assert warm_run["outs"] == cold["outs"]
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    y = (x * 2).sin()
    torch.testing.assert_close(torch.tensor(cold["outs"][0]), y.cos() + x if y.sum() > 0 else y - x)


def prints_inside(x):
    print("inside a called function", file=sys.stderr)
    return x + 1


def calls_a_breaking_function(x):
    y = x.sin()
    return prints_inside(y) * 2


def test_warm_capture_break_inside_inlined_call_installs_caller_and_callee(warm, no_capture):
    x = torch.randn(4, 8)
    first = _run(calls_a_breaking_function, x)
    kept = warm_cache.STATS["captures_kept"]
    records = [json.loads(json.loads(p.read_text())["payload"]) for p in _records(warm)]
    # the calling frame (split at the call) and the called function, compiled as a frame
    # of its own, each keep their break
    assert sum(record.get("break") is not None for record in records) == 2
    no_capture()
    second = _run(calls_a_breaking_function, x)
    assert warm_cache.STATS["capture_hits"] == kept
    torch.testing.assert_close(second, calls_a_breaking_function(x))
    torch.testing.assert_close(first, second, rtol=0, atol=0)


class HelperOwner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def helper(self, x):
        y = self.linear(x).relu()
        print("inside a method", file=sys.stderr)
        return y - 1

    def forward(self, x):
        return self.helper(x * 2) + 1


class OtherHelperOwner(HelperOwner):
    def helper(self, x):
        y = self.linear(x).relu()
        print("inside another method", file=sys.stderr)
        return y + 5


def test_warm_capture_break_inside_inlined_method_installs_without_capturing(warm, no_capture):
    torch.manual_seed(0)
    model = HelperOwner()
    x = torch.randn(4, 8)
    ember.compile(model, backend="eager")(x)
    kept = warm_cache.STATS["captures_kept"]
    no_capture()
    out = ember.compile(model, backend="eager")(x)
    assert warm_cache.STATS["capture_hits"] == kept
    torch.testing.assert_close(out, model(x))


def test_warm_capture_break_inside_inlined_call_changed_callee_recaptures(warm, monkeypatch):
    x = torch.randn(4, 8)
    _run(calls_a_breaking_function, x)

    def prints_other(x):
        print("inside another function", file=sys.stderr)
        return x - 7

    monkeypatch.setitem(globals(), "prints_inside", prints_other)
    warm_cache.STATS.clear()
    out = _run(calls_a_breaking_function, x)
    torch.testing.assert_close(out, (x.sin() - 7) * 2)
    # the calling frame and the new function captured; the unchanged parts installed
    assert warm_cache.STATS["captures_kept"] >= 2


def test_warm_capture_break_inside_inlined_method_of_other_class_recaptures(warm):
    torch.manual_seed(0)
    model = HelperOwner()
    x = torch.randn(4, 8)
    ember.compile(model, backend="eager")(x)
    other = OtherHelperOwner()
    other.load_state_dict(model.state_dict())
    warm_cache.STATS.clear()
    out = ember.compile(other, backend="eager")(x)
    torch.testing.assert_close(out, other(x))


def test_warm_capture_symbolic_frame_with_break_installs_its_parts_at_other_sizes(warm):
    x = torch.randn(4, 8)
    _run(printed_between, x, dynamic=True)
    y = torch.randn(6, 8)
    out = _run(printed_between, y, dynamic=True)
    # the frame's capture up to its break keeps its symbolic sizes (an ordinary break):
    # its record, and the parts' symbolic graphs, are installed at 6 rows
    assert warm_cache.STATS["capture_hits"] == 3
    torch.testing.assert_close(out, printed_between(y))


# ----------------------------------------------------------------- symbolic sizes


def sized(x, y):
    z = (x * 2).sum(0) + y[: x.shape[1]]
    return z.cos() * x.shape[0]


def longer_first(x, y):
    if x.shape[0] > y.shape[0]:
        return x[: y.shape[0]] + y
    return x + y[: x.shape[0]]


def test_warm_capture_dynamic_graph_installs_without_capturing(warm, no_capture):
    _run(sized, torch.randn(6, 4), torch.randn(10), dynamic=True)
    assert warm_cache.STATS["captures_kept"] == 1
    no_capture()
    compiled = ember.compile(sized, backend="eager", dynamic=True)
    for shape in ((6, 4), (9, 3), (2, 10)):
        x, y = torch.randn(*shape), torch.randn(10)
        torch.testing.assert_close(compiled(x, y), sized(x, y))
    assert warm_cache.STATS["capture_hits"] == 1  # one symbolic entry for every size


def test_warm_capture_dynamic_record_failing_shape_guard_recaptures(warm):
    _run(sized, torch.randn(6, 4), torch.randn(10), dynamic=True)
    x, y = torch.randn(1, 4), torch.randn(10)  # 1 is specialized: the range 2 <= s0 fails
    out = _run(sized, x, y, dynamic=True)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, sized(x, y))


def test_warm_capture_dynamic_record_failing_relation_recaptures(warm):
    _run(longer_first, torch.randn(8, 3), torch.randn(5, 3), dynamic=True)
    x, y = torch.randn(4, 3), torch.randn(7, 3)  # the other side of the recorded relation
    out = _run(longer_first, x, y, dynamic=True)
    assert warm_cache.STATS["capture_hits"] == 0
    torch.testing.assert_close(out, longer_first(x, y))
    x, y = torch.randn(11, 3), torch.randn(6, 3)  # the first record's side: installed
    out = _run(longer_first, x, y, dynamic=True)
    assert warm_cache.STATS["capture_hits"] == 1
    torch.testing.assert_close(out, longer_first(x, y))


def test_warm_capture_automatic_dynamic_graph_installs_at_new_size(warm, no_capture):
    compiled = ember.compile(sized, backend="aot_eager")
    for rows in (6, 7):  # the second call makes the rows symbolic
        compiled(torch.randn(rows, 4), torch.randn(10))
    assert warm_cache.STATS["captures_kept"] == 2
    no_capture()
    x, y = torch.randn(9, 4), torch.randn(10)
    out = ember.compile(sized, backend="aot_eager")(x, y)
    assert warm_cache.STATS["capture_hits"] == 1
    torch.testing.assert_close(out, sized(x, y))


def running_product(x):
    return x.cumprod(0) * 2


def test_warm_capture_dynamic_record_checks_what_the_backward_assumed(warm):
    # Tracing cumprod's backward proves the rows equal to the example's (Eq(s0, 5)): the
    # ShapeEnv kept with the record writes the graph's sizes with 5. A call of 7 rows
    # passes the frame's guards (rows symbolic) but not that assumption: captured again.
    x = torch.randn(5, 3, requires_grad=True)
    _run(running_product, x, backend="aot_eager", dynamic=True).sum().backward()
    assert warm_cache.STATS["captures_kept"] == 1
    y = torch.randn(7, 3, requires_grad=True)
    out = _run(running_product, y, backend="aot_eager", dynamic=True)
    out.sum().backward()
    assert warm_cache.STATS["capture_hits"] == 0
    expected_y = y.detach().clone().requires_grad_()
    expected = running_product(expected_y)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(y.grad, expected_y.grad)
    z = torch.randn(5, 3, requires_grad=True)  # the sizes it assumed: installed
    torch.testing.assert_close(
        _run(running_product, z, backend="aot_eager", dynamic=True), running_product(z)
    )
    assert warm_cache.STATS["capture_hits"] == 1


DYNAMIC_CHILD = """
import json, sys
import torch, ember
from ember import warm_cache
optimize = sys.modules["dynamo_capture.optimize"]
if {forbid}:
    def capture(*args, **kwargs):
        raise AssertionError("captured on the warm path")
    optimize.capture_frame = capture
def frame(x, y):
    z = (x * 2).sum(0) + y[: x.shape[1]]
    return z.cos() * x.shape[0]
torch.manual_seed(0)
compiled = ember.compile(frame, backend="inductor", dynamic=True)
outs = [compiled(torch.randn(rows, cols), torch.randn(12)).tolist() for rows, cols in {sizes}]
print(json.dumps({{"stats": dict(warm_cache.STATS), "outs": outs}}))
"""


def test_warm_capture_dynamic_graph_in_new_process_skips_capture_and_compile(tmp_path):
    import os
    import subprocess

    root = Path(__file__).resolve().parents[3]
    sources = ["packages/ember/src", "guards/src", "dynamo_capture/src", "prim_decomp/src"]
    sources += ["aot_autograd/src", "inductor_codegen/src"]
    runs = []
    for forbid, sizes in ((False, [(6, 4)]), (True, [(6, 4), (9, 7), (3, 12)])):
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
        env["PYTHONPATH"] = os.pathsep.join(str(root / s) for s in sources)
        env["EMBER_CACHE_DIR"] = str(tmp_path / "cache")
        done = subprocess.run(
            [sys.executable, "-c", DYNAMIC_CHILD.format(forbid=forbid, sizes=sizes)],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm_run = runs
    assert cold["stats"].get("captures_kept") == 1, cold["stats"]
    assert warm_run["stats"].get("capture_hits") == 1, warm_run["stats"]
    assert warm_run["stats"].get("hits") == 1  # the compiled graph too: no inductor compile
    assert warm_run["outs"][0] == cold["outs"][0]
    torch.manual_seed(0)
    for (rows, cols), out in zip([(6, 4), (9, 7), (3, 12)], warm_run["outs"], strict=True):
        x, y = torch.randn(rows, cols), torch.randn(12)
        torch.testing.assert_close(torch.tensor(out), sized(x, y))


def test_warm_capture_module_graph_break_with_hook_added_later_runs_the_hook(warm):
    torch.manual_seed(0)
    model = BrokenBlock()
    x = torch.randn(4, 8)
    ember.compile(model, backend="eager")(x)
    model.register_forward_hook(lambda module, args, out: out * 10)
    out = ember.compile(model, backend="eager")(x)
    torch.testing.assert_close(out, model(x))


def views_of_one_value(x):
    h = x * 2
    head = h[: x.shape[0] // 2]
    flat = h.view(-1)
    return head.sum(0) + flat[: x.shape[1]] + h.t().sum(1)[: x.shape[1]]


def test_warm_capture_dynamic_graph_keeps_views_sharing_memory(warm, no_capture):
    _run(views_of_one_value, torch.randn(6, 4), backend="aot_eager", dynamic=True)
    (path,) = _records(warm)
    record = json.loads(json.loads(path.read_text())["payload"])
    fakes = [node[5] for node in record["graph"]["nodes"] if node[5] and node[5][0] == "symfake"]
    storages = [fake[-1] for fake in fakes]
    assert len(set(storages)) < len(storages)  # h and its views: one storage
    no_capture()
    compiled = ember.compile(views_of_one_value, backend="aot_eager", dynamic=True)
    for shape in ((6, 4), (10, 3), (4, 8)):
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), views_of_one_value(x))
    assert warm_cache.STATS["capture_hits"] == 1


INLINED_BREAK_CHILD = """
import json, sys, warnings
import torch, ember
import dynamo_capture.optimize
optimize = sys.modules["dynamo_capture.optimize"]
from ember import warm_cache
warnings.simplefilter("error")  # no part may fall back to eager
captures = []
real_capture = optimize.capture_frame
def counted(frame, *args, **kwargs):
    captures.append(frame.name)
    return real_capture(frame, *args, **kwargs)
optimize.capture_frame = counted
def logged(x):
    y = x.cos()
    print("inside a called function", file=sys.stderr)
    return y + 1
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
    def scaled(self, x):
        y = self.linear(x).relu()
        print("inside a method", file=sys.stderr)
        return y * 0.5
    def forward(self, x):
        return self.scaled(x) + x
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Block()
        self.second = Block()
    def forward(self, x):
        x = logged(x * 3) * 2
        return self.second(self.first(x)) - 1
torch.manual_seed(0)
model = Model()
x = torch.randn(4, 8)
out = ember.compile(model, backend="inductor")(x)
expected = model(x)
print(json.dumps({{"stats": dict(warm_cache.STATS), "captures": captures,
                  "out": out.tolist(), "expected": expected.tolist()}}))
"""


def test_warm_capture_break_inside_inlined_call_in_new_process_skips_capture(tmp_path):
    import os
    import subprocess

    root = Path(__file__).resolve().parents[3]
    sources = ["packages/ember/src", "guards/src", "dynamo_capture/src", "prim_decomp/src"]
    sources += ["aot_autograd/src", "inductor_codegen/src"]
    runs = []
    for _ in ("cold", "warm"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_")}
        env["PYTHONPATH"] = os.pathsep.join(str(root / s) for s in sources)
        env["EMBER_CACHE_DIR"] = str(tmp_path / "cache")
        done = subprocess.run(
            [sys.executable, "-c", INLINED_BREAK_CHILD.format()],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm_run = runs
    assert cold["captures"] and cold["stats"].get("stored", 0) >= 2, cold
    # no capture, no AOT trace, no lowering: every frame's record installed, every
    # graph a warm-start hit
    assert warm_run["captures"] == [], warm_run["captures"]
    assert warm_run["stats"].get("capture_hits") == cold["stats"]["captures_kept"]
    assert warm_run["stats"].get("misses", 0) == 0, warm_run["stats"]
    assert warm_run["stats"].get("hits") == cold["stats"]["stored"]
    assert warm_run["out"] == cold["out"]  # bit-equal
    torch.testing.assert_close(torch.tensor(cold["out"]), torch.tensor(cold["expected"]))


def makes_a_breaking_function(x):
    def inner(y):
        print("inside a function made in the frame", file=sys.stderr)
        return y + 1

    return inner(x.sin()) * 2


def test_warm_capture_break_inside_function_made_in_frame_installs(warm, no_capture):
    x = torch.randn(4, 8)
    first = _run(makes_a_breaking_function, x)
    kept = warm_cache.STATS["captures_kept"]
    records = [json.loads(json.loads(p.read_text())["payload"]) for p in _records(warm)]
    assert any((r.get("break") or {}).get("callee_code") for r in records)
    no_capture()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = _run(makes_a_breaking_function, x)
    assert warm_cache.STATS["capture_hits"] == kept
    torch.testing.assert_close(second, makes_a_breaking_function(x))
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def _made_function(n: int):
    namespace = {"torch": torch, "__name__": "warm_made"}
    source = f"def made_{n}(x):\n    return (x * {n}).sin() + x.sum()\n"
    exec(compile(source, f"<warm-made-{n}>", "exec"), namespace)
    return namespace[f"made_{n}"]


def test_warm_capture_keeps_a_bounded_number_of_frames_and_rereads_evicted_ones(
    warm, no_capture, monkeypatch
):
    from ember import warm_capture

    monkeypatch.setattr(warm_capture, "KEPT_FOLDERS", 2)
    x = torch.randn(4, 8)
    functions = [_made_function(n) for n in range(4)]
    for fn in functions:
        _run(fn, x)
    assert len(warm_capture._KEPT) <= 2
    reads = warm_cache.STATS["capture_record_reads"]
    no_capture()
    torch.testing.assert_close(_run(functions[0], x), functions[0](x))
    assert warm_cache.STATS["capture_hits"] == 1
    assert warm_cache.STATS["capture_record_reads"] == reads + 1  # read again, not kept
    assert len(warm_capture._KEPT) <= 2


def test_warm_capture_records_this_callable_kept_are_not_installed_again_at_its_misses(
    warm, monkeypatch
):
    """A miss of a compiled callable skips the records it kept itself (their guards are its
    entries' guards, which just failed) rather than decode them; after a reset they apply."""
    import dynamo_capture.portable as portable

    installs = []
    real = portable.install_parts
    monkeypatch.setattr(
        portable, "install_parts", lambda record, *a: installs.append(1) or real(record, *a)
    )
    compiled = ember.compile(scaled, backend="eager", dynamic=False)
    x, y = torch.randn(4, 8), torch.randn(5, 8)
    torch.testing.assert_close(compiled(x), scaled(x))  # captured, kept
    torch.testing.assert_close(compiled(y), scaled(y))  # a miss: x's record skipped
    assert installs == [] and warm_cache.STATS["captures_kept"] == 2
    ember.reset()
    torch.testing.assert_close(compiled(x), scaled(x))  # reset: the kept records apply
    assert installs and warm_cache.STATS["capture_hits"] == 1
