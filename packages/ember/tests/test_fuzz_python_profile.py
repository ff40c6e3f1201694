"""The differential fuzzer's `python` profile (tools/fuzz/python_constructs.py): programs
with try/except, containers, closures, loops, user classes and outside state, and the
oracle's comparison of outside state and of the program's own exceptions."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import ember

FUZZ = Path(__file__).resolve().parents[3] / "tools" / "fuzz"
sys.path.insert(0, str(FUZZ))

import fuzz  # noqa: E402
import generator  # noqa: E402
import oracle  # noqa: E402
import program as fuzz_program  # noqa: E402
import shrink  # noqa: E402

pytestmark = pytest.mark.fuzz

# What each construct writes: some seed of the first SEEDS must show each one.
MARKS = {
    "try/except": r"^\s*try:$",
    "except a user exception": r"except FuzzError as error:",
    "raise on a size": r"raise FuzzError\(",
    "finally": r"^\s*finally:$",
    "caught torch error": r"except (RuntimeError|IndexError) as error:",
    "list append": r"items\d+\.append\(",
    "list insert": r"items\d+\.insert\(",
    "list pop": r"items\d+\.pop\(",
    "tuple unpacking": r"first, \*rest = ",
    "dict update": r"parts\d+\.update\(",
    "dict iteration": r"for key(, value)? in ",
    "set of ints": r"dims\d+ = \{0, ",
    "outside list": r"LOG\.(append|extend)\(",
    "outside dict": r"TABLE\[",
    "outside object": r"SCALER\.",
    "nested function": r"^\s*def fn\d+\(t\):",
    "nonlocal": r"nonlocal count\d+",
    "lambda": r"lambda t",
    "closure factory": r"def make\d+\(k\):",
    "range loop": r"for i in range\(",
    "continue": r"^\s*continue$",
    "break": r"^\s*break$",
    "loop over tensors": r"for (j, )?t(, w)? in ",
    "value branch": r"^\s*if v\d+\.(sum|amax)\(\) ",
    "while on a value": r"^\s*while v\d+\.abs\(\)\.sum\(\) > 1",
    ".item()": r"\.item\(\)",
    ".tolist()": r"\.tolist\(\)",
    "torch.cond": r"torch\.cond\(",
    "torch.while_loop": r"torch\.while_loop\(",
    "user class": r"= (Scaler|Shifted)(\.unit)?\(",
    "subclass with super()": r"Shifted",
    "property": r"\.double\b",
    "in-place helper": r"def bump\d+\(t\):",
    "in-place loop": r"for t in \(x\d",
    "printing helper": r"printing_helper\(",
    "item helper": r"item_helper\(",
    "raising helper": r"checked_sum\(",
    "try in a loop": r"^\s+try:\n\s+if i == ",
    "list reverse or del": r"(items\d+\.reverse\(\)|del items\d+\[)",
    "generator function": r"yield t \* k",
    "global rebound": r"global COUNT",
    "helper writing an outside list": r"append_sum\(LOG, ",
    "tensor in an outside object": r"SCALER\.factor = v\d+|SCALER\.factor = x\d",
}
SEEDS = range(1000, 1125)  # (each construct's first seed: 1122 the latest, a list's pop)


@pytest.fixture(scope="module")
def python_programs():
    return {seed: generator.generate(seed, profile="python") for seed in SEEDS}


@pytest.mark.slow
@pytest.mark.parametrize("mark", sorted(MARKS))
def test_python_profile_draws_each_construct(python_programs, mark):
    pattern = re.compile(MARKS[mark], re.MULTILINE)
    seeds = [s for s, p in python_programs.items() if pattern.search("\n".join(p.statements))]
    assert seeds, f"no program of seeds {SEEDS} shows {mark}"


@pytest.mark.slow
def test_python_programs_run_eagerly_and_deterministically(python_programs):
    for seed in list(SEEDS)[:40]:
        source = fuzz_program.render(python_programs[seed])
        first, second = oracle.load(source), oracle.load(source)
        with oracle.quiet():
            for call in range(len(first["DIMS"])):
                a = oracle.run_call(first["program"], first, call)
                b = oracle.run_call(second["program"], second, call)
                if a.error is not None:  # only a kept last statement may raise
                    assert type(a.error).__name__ == type(b.error).__name__
                    assert str(a.error) == str(b.error)
                    continue
                mismatches = oracle.compare_outcomes(a, b, "eager", f"seed {seed} call {call}")
                assert not mismatches, [m.describe() for m in mismatches]


def test_python_programs_are_deterministic_by_seed():
    for seed in (1000000, 1000001):
        first = fuzz_program.render(generator.generate(seed, profile="python"))
        assert first == fuzz_program.render(generator.generate(seed, profile="python"))


def test_full_profile_draws_constructs_in_few_seeds_and_keeps_the_others():
    full = generator.PROFILES["full"]
    drawn = [s for s in range(2000) if generator.uses_constructs(s, full)]
    assert 0.04 * 2000 < len(drawn) < 0.14 * 2000
    # A seed without constructs gives the program it gave before they were added: the
    # same as the profile without them.
    plain = generator.Profile(full.expressions, full.mutations, full.blocks)
    generator.PROFILES["_full_without_constructs"] = plain
    try:
        for seed in [s for s in range(40) if s not in drawn][:10]:
            assert generator.generate(seed, profile="full") == generator.generate(
                seed, profile="_full_without_constructs"
            )
    finally:
        del generator.PROFILES["_full_without_constructs"]
    # the programs pinned in test_fuzz_slice keep theirs
    import test_fuzz_slice

    pinned = [*test_fuzz_slice.FIXED_FULL_SEEDS, *test_fuzz_slice.FIXED_FULL_LAYOUT_SEEDS]
    assert not [s for s in pinned if generator.uses_constructs(s, full)]


def _program(statements, definitions=(), outputs=("v1",), dims=({"d0": 4},)):
    return fuzz_program.Program(
        seed=3,
        inputs=(fuzz_program.InputSpec("x0", ("d0", 3), "float32"),),
        statements=tuple(statements),
        outputs=outputs,
        dims=dims,
        definitions=tuple(definitions),
    )


def _off_by_one_backend(gm, example_inputs):
    """A deliberately wrong backend: every float output of the graph is off by one."""

    def run(*args):
        outputs = gm.forward(*args)
        return type(outputs)(o + 1 if o.is_floating_point() else o for o in outputs)

    return run


def _register_off_by_one():
    if "fuzz_off_by_one_py" not in ember.list_backends():
        ember.register_backend(_off_by_one_backend, name="fuzz_off_by_one_py")


def test_oracle_compares_outside_state_after_each_call():
    # The tensor appended to LOG comes out of the graph: the wrong backend shifts it.
    _register_off_by_one()
    program = _program(
        ["v1 = x0.sin()", "LOG.append(v1.sum())", "v2 = v1.shape[0] + len(LOG)"],
        definitions=("LOG",),
        outputs=("v2",),
    )
    found = fuzz.check_program(program, "fuzz_off_by_one_py")
    assert [(m.kind, m.check, m.where) for m in found] == [
        ("silent", "state", "call 0 state LOG[0]")
    ]


def test_oracle_state_matches_for_a_right_backend():
    program = _program(
        [
            "v1 = x0.sin()",
            "LOG.append(v1.sum())",
            'TABLE["hits"] += 1',
            "SCALER.factor = v1.shape[0]",
            "v2 = SCALER.apply(v1) + len(LOG)",
        ],
        definitions=("LOG", "TABLE", "SCALER"),
        outputs=("v2",),
        dims=({"d0": 4}, {"d0": 5}),
    )
    assert fuzz.check_program(program, "aot_eager") == []


def _outcome(error=None, state=None, outputs=()):
    return oracle.Outcome(inputs=[], outputs=list(outputs), error=error, state=state)


def test_oracle_compares_the_programs_own_exception_message():
    namespace = oracle.load(fuzz_program.render(_program(["v1 = x0"], ("FuzzError",))))
    fuzz_error = namespace["FuzzError"]
    expected = _outcome(error=fuzz_error("rank 2"))
    same = oracle.compare_outcomes(expected, _outcome(error=fuzz_error("rank 2")), "b", "c")
    assert same == []
    wrong = oracle.compare_outcomes(expected, _outcome(error=fuzz_error("rank 3")), "b", "c")
    assert [(m.kind, m.check) for m in wrong] == [("silent", "exception_message")]
    other = oracle.compare_outcomes(expected, _outcome(error=ValueError("rank 2")), "b", "c")
    assert [m.kind for m in other] == ["error"]
    # torch's own messages are compared by family only
    torch_error = _outcome(error=RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert oracle.compare_outcomes(torch_error, _outcome(error=RuntimeError("x")), "b", "c") == []


def test_oracle_compares_state_where_both_raise_and_floats_with_tolerance():
    error = RuntimeError("boom")
    want = _outcome(error=error, state={"LOG": [1, torch.ones(2)]})
    got = _outcome(error=error, state={"LOG": [1]})
    assert [m.check for m in oracle.compare_outcomes(want, got, "b", "c")] == ["state"]
    near = oracle.compare_outcomes(_outcome(outputs=[0.1 + 0.2]), _outcome(outputs=[0.3]), "b", "c")
    assert near == []
    far = oracle.compare_outcomes(_outcome(outputs=[0.3]), _outcome(outputs=[0.4]), "b", "c")
    assert [m.kind for m in far] == ["silent"]


def test_shrink_reduces_a_python_program_and_its_definitions():
    _register_off_by_one()
    program = _program(
        [
            "v1 = x0.sin()\nitems2 = [v1, v1 * 2]\nitems2.append(v1)\nv3 = items2[-1] + 1",
            "try:\n    v4 = v1 * 2\n    if v1.dim() >= 2:\n        raise FuzzError('wide')\n"
            "except FuzzError as error:\n    v4 = v1 - 1\nfinally:\n    TABLE['hits'] += 1",
            "scaler5 = Scaler(2)\nv6 = scaler5.apply(v4) + scaler5.double",
        ],
        definitions=("TABLE", "FuzzError", "Scaler", "printing_helper"),
        outputs=("v6",),
    )
    found = fuzz.check_program(program, "fuzz_off_by_one_py")
    assert found and found[0].kind == "silent"
    small, _ = shrink.shrink(program, "fuzz_off_by_one_py", found[0], budget_s=60)
    text = "\n".join(small.statements)
    assert "try" not in text and "items2" not in text, text
    assert "printing_helper" not in small.definitions and "TABLE" not in small.definitions
