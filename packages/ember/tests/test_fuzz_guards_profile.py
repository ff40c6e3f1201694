"""The differential fuzzer's `guards` profile (tools/fuzz/guard_programs.py): a program
compiled once and called 4-8 times, one thing it reads changed between calls; the
oracle compares every call with eager on the same state. Reproducers of what it found
are pinned here (the fix's own test lives in the package of the fix)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dynamo_capture")

FUZZ = Path(__file__).resolve().parents[3] / "tools" / "fuzz"
sys.path.insert(0, str(FUZZ))

import fuzz  # noqa: E402
import guard_programs  # noqa: E402
import oracle  # noqa: E402
import shrink  # noqa: E402
from guard_programs import X0_DEFAULTS, GuardProgram, Read  # noqa: E402

pytestmark = pytest.mark.fuzz

SEEDS = range(0, 150)  # each mutator's first seed is below 120


@pytest.fixture(scope="module")
def guard_programs_by_seed():
    return {seed: guard_programs.generate(seed) for seed in SEEDS}


@pytest.mark.slow
def test_guards_profile_draws_each_mutator():
    # in a process of its own: a read is kept only where eager runs the program, and
    # state other tests leave behind in this process must not decide that
    code = (
        "import guard_programs as g; "
        f"print(sorted({{r.mutator for s in range({SEEDS.start}, {SEEDS.stop}) "
        "for r in g.generate(s).reads}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    drawn = set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))
    assert set(guard_programs.MUTATORS) <= drawn, set(guard_programs.MUTATORS) - drawn


def test_each_later_call_changes_at_most_one_read():
    for seed in range(20):
        program = guard_programs.generate(seed)
        assert 4 <= len(program.calls) <= 8
        keys = set(program.calls[0])
        for before, after in zip(program.calls, program.calls[1:]):
            assert set(after) == keys
            assert sum(before[k] != after[k] for k in keys) <= 1


def test_guards_programs_run_eagerly_and_deterministically():
    for seed in range(12):
        source = guard_programs.render(guard_programs.generate(seed))
        assert source == guard_programs.render(guard_programs.generate(seed))
        first, second = oracle.load(source), oracle.load(source)
        with oracle.quiet():
            for call in range(len(first["DIMS"])):
                a = oracle.run_call(first["program"], first, call)
                b = oracle.run_call(second["program"], second, call)
                assert a.error is None, f"seed {seed} call {call}: {a.error!r}"
                found = oracle.compare_outcomes(a, b, "eager", f"seed {seed} call {call}")
                assert not found, [m.describe() for m in found]


def _program(read: Read, values: list, dynamic=None) -> GuardProgram:
    calls = tuple({**X0_DEFAULTS, read.key: value} for value in values)
    return GuardProgram(seed=0, shape=(4, 6), reads=(read,), calls=calls, dynamic=dynamic)


def _global_number_program() -> GuardProgram:
    read = Read(
        "global_number", "G1", (2, 3, 0.5), "v = v * G1", definitions=("G1 = None",),
        setter="lambda value: globals().update(G1=value)",
    )  # fmt: skip
    return _program(read, [2, 3, 3, 0.5])


def test_oracle_finds_a_guard_left_out(monkeypatch):
    """With every entry's guard check passing, the profile's calls show a stale result."""
    import dynamo_capture.capture as capture

    program = _global_number_program()
    source = guard_programs.render(program, "aot_eager")
    assert not oracle.check_source(source, "aot_eager")
    monkeypatch.setattr(capture.CompiledEntry, "check", lambda self, *args, **kwargs: True)
    found = oracle.check_source(source, "aot_eager")
    assert any(m.kind == "silent" for m in found), [m.describe() for m in found]
    target = next(m for m in found if m.kind == "silent")
    small, _ = shrink.shrink(program, "aot_eager", target, budget_s=20)
    assert len(small.calls) <= len(program.calls) and small.reads


def test_fuzz_driver_runs_the_guards_profile(tmp_path):
    options = fuzz.Options(
        backends=("aot_eager",), out=tmp_path, shrink=False, verbose=False, profile="guards"
    )
    summary = fuzz.run(range(3), options)
    assert summary.programs == 3 and not summary.crashes
    assert not summary.silent(), summary.report()


# A library function reading its module's global, after a graph break, where the module is
# not in sys.modules (made with types.ModuleType): the resumed frame's entry read the
# global through `sys.modules['fuzz_lib']`, a KeyError where eager ran (dynamic=True makes
# the float a graph input; seed 364, `--dynamic true`). Fixed in dynamo_capture's
# `Translator.global_source` (dynamo_capture/tests/test_globals_of_unregistered_modules.py).
LIBRARY_READ = Read(
    "library", "LIB.FACTOR", (2, 3, 0.5), "torch._dynamo.graph_break()\nv = lib_scale(v)",
    setter="lambda value: setattr(LIB, 'FACTOR', value)",
)  # fmt: skip


@pytest.mark.parametrize("dynamic", [None, True])
def test_fixed_global_of_an_unregistered_library_module(dynamic):
    program = _program(LIBRARY_READ, [0.5, 3, 0.5, 2], dynamic=dynamic)
    found = oracle.check_source(guard_programs.render(program, "aot_eager"), "aot_eager")
    assert not found, [m.describe() for m in found]


# Dropout of a transposed or channels-last input: eager's mask `empty_like(x).bernoulli_`
# is drawn in x's memory order, the functional `bernoulli` of the traced graph drew it
# contiguous: another mask from the same random state (seed 1195, `--profile guards`, call
# 0: a random op's layout, not a guard). Fixed in aot_autograd's tracer
# (aot_autograd/tests/test_random_draws_in_memory_order.py).
DROPOUT_READ = Read(
    "layout", "x0.layout", ("transposed", "contiguous"),
    "v = F.dropout(v, 0.5, training=True)",
)  # fmt: skip
SEED_READ = Read("seed", "seed", (0,), "", setter="torch.manual_seed")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_fixed_dropout_of_a_transposed_input(backend):
    calls = tuple(
        {**X0_DEFAULTS, "x0.layout": layout, "seed": 0}
        for layout in ("transposed", "contiguous", "transposed")
    )
    program = GuardProgram(0, (4, 6), (DROPOUT_READ, SEED_READ), calls, grad=False)
    found = oracle.check_source(guard_programs.render(program, backend), backend)
    assert not found, [m.describe() for m in found]
