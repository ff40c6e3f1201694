"""A fixed-seed slice of the differential fuzzer (tools/fuzz) under aot_eager and inductor.

About a minute on a 2-core machine. A silent mismatch (a wrong result) fails the
test, which lists the reproducers (saved unshrunk in the test's tmp folder; run
`python tools/fuzz/fuzz.py --seed S --count 1 --backend B` to shrink one).

Seeds of the slice that show an open bug are listed in KNOWN_SILENT with the
shrunk reproducer; they are left out of the slice and each is checked alone as a
strict xfail, so the fix of the bug turns that test into a failure that says to
move the seed back into the slice.

The slice and FIXED_SEEDS use the generator's "base" profile (a seed gives the program
it gave when pinned); FIXED_FULL_SEEDS are programs of the "full" profile; WIDE_SLICE
is a few programs of the "wide" profile (larger sizes, more layouts, nn and scatter ops).
"""

from __future__ import annotations

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

BACKENDS = ("aot_eager", "inductor")
SLICE = range(40, 75)
WIDE_SLICE = range(0, 10)

# seed -> (backend, shrunk reproducer of the open bug it shows). Remove a seed once
# its bug is fixed (its strict xfail then fails, saying so).
KNOWN_SILENT: dict[int, tuple[str, str]] = {}

# seed -> the bug it showed, since fixed: each is run alone under both backends.
FIXED_SEEDS: dict[int, str] = {
    93000031: "x / x2.to(int32) with x2 in (-1, 0): the C++ compiler folded the casts to trunc",
    454: "NaN grad through an output the loss does not use (zero tangent times inf)",
    1632: "prod backward over a dim of size 1 with an inf input (eager: NaN)",
    405: "an unused `torch.sub(x, True)` (eager: bool subtraction error)",
    1306: "an unused integer remainder by a bool tensor with a zero (eager: ZeroDivisionError)",
    179574751143: "unsqueeze_ of a tensor the backward saved (eager: raises at backward)",
    339456573265: "a value without a derivative carried across a graph break raised at backward",
    58201937486: "prod over a negative dim of a 3-D tensor differentiated along the wrong dim",
    58201937560: "a saved slice the forward laid out densely, read by the backward as a slice",
    179576311059: "a fill_ into part of a matmul's result ignored by the gradient (inductor)",
    179581311128: "a view of a cast of an input written in place read in the wrong order",
    179568748534: "two outputs viewing a value unsqueeze_ reshaped: gradient doubled",
    179568748609: "fp16 layer_norm(x) / x with a zero in x: backward -inf where eager's is NaN",
}

# Programs of the generator's "full" profile (regions, branches, ...): seed -> (dynamic,
# the bug it showed, since fixed). Each is run alone under both backends.
FIXED_FULL_SEEDS: dict[int, tuple[bool | None, str]] = {
    96000013: (True, "a no_grad view of an input, viewed again and returned: grad added"),
    95000151: (None, "a view and its base written in place after a branch: refused"),
    635: (None, "masked_fill_ into an expanded view of a value requiring grad: refused"),
    271: (None, "an unused arange of dtype bool (eager: arange_cpu not implemented for 'Bool')"),
}

# Programs of the "full" profile whose outputs had other strides than eager's (a
# metadata mismatch): seed -> the cause, since fixed. Run alone under both backends.
FIXED_FULL_LAYOUT_SEEDS: dict[int, str] = {
    234: "x // x.diagonal(): the meta function of floor_divide lays out its own way",
    179570814113: "x.t() // x.sum(): floor_divide's meta strides (inductor)",
    179571814103: "x.mT // x: floor_divide's meta strides (inductor)",
    462: "masked_fill of a permuted input with symbolic sizes: the where's layout",
    684: "masked_fill of a permuted input with symbolic sizes: the where's layout",
    680: "a transposed view written by masked_fill_, then read: row-major",
    748: "a movedim view written by masked_fill_, then read, symbolic sizes: row-major",
}

# Programs of the "wide" profile: seed -> the bug it showed, since fixed. Run alone under
# both backends.
FIXED_WIDE_SEEDS: dict[int, str] = {
    830568: "bf16 amax backward: x == amax(x) of a recomputed, unrounded x matched nothing",
}

pytestmark = pytest.mark.fuzz


def _silent_report(summary: fuzz.Summary) -> str:
    lines = []
    for r in summary.silent():
        lines += [r["mismatch"], f"reproducer: {r['path']}", Path(r["path"]).read_text(), ""]
    return "\n".join(lines)


def _run(seeds, tmp_path: Path, backends=BACKENDS, profile="base", dynamic=None) -> fuzz.Summary:
    options = fuzz.Options(
        backends=backends, out=tmp_path, shrink=False, verbose=False, profile=profile,
        dynamic=dynamic,
    )  # fmt: skip
    return fuzz.run(seeds, options)


def test_fuzz_slice_has_no_silent_mismatch(tmp_path):
    seeds = [s for s in SLICE if s not in KNOWN_SILENT]
    summary = _run(seeds, tmp_path)
    print(summary.report())
    assert summary.programs == len(seeds)
    assert not summary.crashes, f"the fuzzer itself failed on seeds {summary.crashes}"
    assert not summary.silent(), _silent_report(summary)


def test_fuzz_wide_slice_has_no_silent_mismatch(tmp_path):
    summary = _run(WIDE_SLICE, tmp_path, profile="wide")
    print(summary.report())
    assert summary.programs == len(WIDE_SLICE)
    assert not summary.crashes, f"the fuzzer itself failed on seeds {summary.crashes}"
    assert not summary.silent(), _silent_report(summary)


@pytest.mark.parametrize(
    "seed",
    [pytest.param(seed, marks=pytest.mark.xfail(strict=True, reason=f"open bug: {repro}"))
     for seed, (_, repro) in sorted(KNOWN_SILENT.items())]
    or [pytest.param(None, marks=pytest.mark.skip(reason="no known silent seeds"))],
)  # fmt: skip
def test_fuzz_known_silent_seed(seed, tmp_path):
    backend = KNOWN_SILENT[seed][0]
    summary = _run([seed], tmp_path, backends=(backend,))
    assert not summary.silent(), _silent_report(summary)


@pytest.mark.parametrize("seed", sorted(FIXED_SEEDS))
def test_fuzz_fixed_seed_matches_eager(seed, tmp_path):
    summary = _run([seed], tmp_path)
    assert not summary.crashes, f"the fuzzer itself failed on seed {seed}"
    assert not summary.silent(), f"{FIXED_SEEDS[seed]}:\n{_silent_report(summary)}"
    assert not any(summary.counts[b, "missing_error"] for b in BACKENDS), summary.report()


@pytest.mark.parametrize("seed", sorted(FIXED_FULL_SEEDS))
def test_fuzz_fixed_full_profile_seed_matches_eager(seed, tmp_path):
    dynamic, bug = FIXED_FULL_SEEDS[seed]
    summary = _run([seed], tmp_path, profile="full", dynamic=dynamic)
    assert not summary.crashes, f"the fuzzer itself failed on seed {seed}"
    assert not summary.silent(), f"{bug}:\n{_silent_report(summary)}"
    kinds = ("missing_error", "error")
    assert not any(summary.counts[b, k] for b in BACKENDS for k in kinds), summary.report()


@pytest.mark.parametrize("seed", sorted(FIXED_FULL_LAYOUT_SEEDS))
def test_fuzz_fixed_full_profile_seed_keeps_eager_strides(seed, tmp_path):
    summary = _run([seed], tmp_path, profile="full")
    assert not summary.crashes, f"the fuzzer itself failed on seed {seed}"
    kinds = ("silent", "missing_error", "error", "metadata")
    assert not any(summary.counts[b, k] for b in BACKENDS for k in kinds), (
        f"{FIXED_FULL_LAYOUT_SEEDS[seed]}:\n{summary.report()}"
    )


@pytest.mark.parametrize("seed", sorted(FIXED_WIDE_SEEDS))
def test_fuzz_fixed_wide_profile_seed_matches_eager(seed, tmp_path):
    summary = _run([seed], tmp_path, profile="wide")
    assert not summary.crashes, f"the fuzzer itself failed on seed {seed}"
    assert not summary.silent(), f"{FIXED_WIDE_SEEDS[seed]}:\n{_silent_report(summary)}"


def test_oracle_nan_from_finite_half_values_is_never_precision():
    want = torch.tensor([0.5, -0.125, 2.0], dtype=torch.bfloat16)
    got = torch.tensor([float("nan"), -0.125, 2.0], dtype=torch.bfloat16)
    assert oracle.value_difference(want, got, torch.bfloat16).startswith(oracle.NONFINITE)
    overflowed = torch.tensor([float("inf"), -0.125, 2.0], dtype=torch.bfloat16)
    assert not oracle.value_difference(overflowed, got, torch.bfloat16).startswith(oracle.NONFINITE)


def _off_by_one_backend(gm, example_inputs):
    """A deliberately wrong backend: every float output of the graph is off by one."""

    def run(*args):
        outputs = gm.forward(*args)
        return type(outputs)(o + 1 if o.is_floating_point() else o for o in outputs)

    return run


def test_fuzz_oracle_flags_a_wrong_backend_and_shrinks_it(tmp_path):
    if "fuzz_off_by_one" not in ember.list_backends():
        ember.register_backend(_off_by_one_backend, name="fuzz_off_by_one")
    source = fuzz_program.Program(
        seed=3,
        inputs=(fuzz_program.InputSpec("x0", ("d0", 3), "float32", layout="permuted"),),
        statements=("v1 = x0.sin()", "v2 = v1.sum(0)", "v3 = x0.to(torch.int64)"),
        outputs=("v2", "v3"),
        dims=({"d0": 4}, {"d0": 6}),
    )
    found = fuzz.check_program(source, "fuzz_off_by_one")
    assert [m.kind for m in found if m.check == "value"] == ["silent", "silent"]
    small, _ = shrink.shrink(source, "fuzz_off_by_one", found[0], budget_s=60)
    assert len(small.statements) <= 1 and len(small.dims) == 1
    assert small.outputs != ("v3",)  # an int output is not off by one


def test_fuzz_oracle_calls_a_float32_summation_order_difference_precision():
    # A gradient summed over a broadcast of 1056 terms that cancel: eager and compiled
    # code sum in different orders (off by 2e-4 of a true 0). In float64 they agree.
    source = fuzz_program.Program(
        seed=1099,
        inputs=(
            fuzz_program.InputSpec("x0", ("d1", "d2"), "float32", requires_grad=True),
            fuzz_program.InputSpec("x1", ("d0", "d1", "d2"), "float32"),
        ),
        statements=("v1 = torch.add(x1, x0.sum(), alpha=2)", "v2 = F.elu(v1)"),
        outputs=("v2",),
        dims=({"d0": 3, "d1": 32, "d2": 11},),
        grad=True,
    )
    found = fuzz.check_program(source, "inductor")
    assert not [m for m in found if m.kind == "silent"], [m.describe() for m in found]


def _slightly_off_backend(gm, example_inputs):
    """A deliberately wrong backend: float outputs off by 5e-4 (near, but not rounding)."""

    def run(*args):
        outputs = gm.forward(*args)
        return type(outputs)(o + 5e-4 if o.is_floating_point() else o for o in outputs)

    return run


def test_fuzz_oracle_keeps_a_small_float32_error_silent_when_float64_shows_it(tmp_path):
    if "fuzz_slightly_off" not in ember.list_backends():
        ember.register_backend(_slightly_off_backend, name="fuzz_slightly_off")
    source = fuzz_program.Program(
        seed=5,
        inputs=(fuzz_program.InputSpec("x0", ("d0", 3), "float32"),),
        statements=("v1 = x0.sin()",),
        outputs=("v1",),
        dims=({"d0": 4},),
    )
    found = fuzz.check_program(source, "fuzz_slightly_off")
    assert [(m.kind, m.check) for m in found] == [("silent", "value")]


def _batch_norm_branch(extra=()):
    """A branch on the sum of a training batch norm's output: zero up to rounding, its sign
    set by the summation order, which eager takes from the input's strides."""
    bn = (
        "F.batch_norm(x0, torch.zeros(x0.shape[1], dtype=x0.dtype), "
        "torch.ones(x0.shape[1], dtype=x0.dtype), "
        "torch.linspace(0.5, 1.5, x0.shape[1], dtype=x0.dtype), "
        "torch.zeros(x0.shape[1], dtype=x0.dtype), training=True)"
    )
    program = fuzz_program.Program(
        seed=625,
        inputs=(fuzz_program.InputSpec("x0", ("d2", "d0"), "float32", layout="padded"),),
        statements=(
            f"v1 = {bn}",
            *extra,
            "v2 = v1 + 1.5 if v1.sum() > 0 else torch.zeros(1, 1, dtype=torch.float32)",
            "v3 = x0.sin()",
        ),
        outputs=("v2", "v3"),
        dims=({"d0": 5, "d2": 69},),
    )
    return fuzz_program.render(program)


def test_fuzz_oracle_calls_a_branch_eager_takes_by_its_inputs_layout_precision():
    # Eager sums the batch norm's output to -1.2e-7 for the strided input, and in float64
    # to +8.9e-15 for a contiguous copy: which branch runs is decided by rounding.
    source = _batch_norm_branch()
    branch = oracle.Mismatch("silent", "shape", "inductor", "call 0 output 0", "(1, 1)")
    sine = oracle.Mismatch("silent", "value", "inductor", "call 0 output 1", "differs")
    found = oracle.reclassify_layout(source, [branch, sine])
    assert [m.kind for m in found] == ["precision", "silent"]
    # A reshape is a view of a contiguous input and a copy of a strided one: with an
    # in-place write in the program, the copies could change what it computes.
    source = _batch_norm_branch(extra=("v4 = x0.reshape(-1)", "v4.mul_(1)"))
    assert [m.kind for m in oracle.reclassify_layout(source, [branch])] == ["silent"]


def test_fuzz_oracle_widens_casting_methods_with_their_dtypes():
    # float16 inputs, `.float().mean().item()` scaling a value near 190 before a cosine:
    # compiled code skips the float16 rounding of the product (0.125 apart there). In the
    # widened programs `.float()` must widen too (to `.double()`): left float32, the mean's
    # own rounding, times 190, shows in the float64 program's grads.
    program = fuzz_program.Program(
        seed=1651,
        inputs=(
            fuzz_program.InputSpec("x0", ("d1", "d2"), "float16", "offset", requires_grad=True),
            fuzz_program.InputSpec(
                "x1", ("d1", "d2"), "float16", values="randn", requires_grad=True
            ),
        ),
        statements=(
            "v3 = torch.add(x0, x1.sum(), alpha=2)",
            "v4 = torch.relu(v3)",
            "v5 = v3 * v4.float().mean().item()",
            "v6 = torch.cos(v5)",
        ),
        outputs=("v6",),
        dims=({"d1": 17, "d2": 2},),
        grad=True,
    )
    source = fuzz_program.render(program, "inductor")
    with fuzz.quiet():
        found = oracle._differences(source, "inductor", False)
        assert {m.kind for m in found} == {"silent"}
        found = oracle.check_source(source, "inductor")
    assert {m.kind for m in found} == {"precision"}


def _zero_residue_program(step: str) -> fuzz_program.Program:
    """A training batch norm over channels of two equal elements, so `x - mean` is zero in
    real arithmetic: eager's `x * alpha + beta` leaves a residue (7.6e-6), the decomposed
    `(x - mean) * invstd` gives exactly 0, and `step` is discontinuous there."""
    bn = (
        "F.batch_norm(x0, torch.zeros(x0.shape[1], dtype=torch.float32), "
        "torch.ones(x0.shape[1], dtype=torch.float32), "
        "torch.linspace(0.5, 1.5, x0.shape[1], dtype=x0.dtype), "
        "torch.zeros(x0.shape[1], dtype=x0.dtype), training=True, momentum=0.1)"
    )
    return fuzz_program.Program(
        seed=1219,
        inputs=(fuzz_program.InputSpec("x0", (2, "d0", 1), "float32"),),
        statements=(f"v1 = {bn}", f"v2 = {step}"),
        outputs=("v2",),
        dims=({"d0": 55},),
    )


@pytest.mark.parametrize("step", ["torch.where(v1 != 0, v1, 2)", "v1 // v1", "v1.sign() * 3"])
def test_fuzz_oracle_calls_a_rounding_residue_turned_by_a_step_precision(step):
    # The values differ by 2 (or NaN) where eager has the residue and inductor 0, in
    # float64 as in float32; but each statement, run eagerly on the compiled values before
    # it, gives the compiled values after it: a difference of rounding, not a wrong step.
    source = fuzz_program.render(_zero_residue_program(step), "inductor")
    with fuzz.quiet():
        found = oracle._differences(source, "inductor", False)
        assert [(m.kind, m.check) for m in found] == [("silent", "value")]
        found = oracle.check_source(source, "inductor")
    assert [(m.kind, m.check) for m in found] == [("precision", "value")]


def _flipped_comparison_backend(gm, example_inputs):
    """A deliberately wrong backend: every `!=` of the graph computes `==`."""
    import operator

    for node in gm.graph.nodes:
        if node.target in (operator.ne, torch.ne):
            node.target = operator.eq if node.target is operator.ne else torch.eq
        elif node.op == "call_method" and node.target == "ne":
            node.target = "eq"
    gm.recompile()
    return gm.forward


def test_fuzz_oracle_keeps_a_step_wrong_on_its_operands_silent():
    if "fuzz_flipped_comparison" not in ember.list_backends():
        ember.register_backend(_flipped_comparison_backend, name="fuzz_flipped_comparison")
    program = fuzz_program.Program(
        seed=7,
        inputs=(fuzz_program.InputSpec("x0", ("d0", 3), "float32"),),
        statements=("v1 = x0 * 2", "v2 = torch.where(v1 != 0, v1, 2)", "v3 = v2.sin()"),
        outputs=("v3",),
        dims=({"d0": 4},),
    )
    found = fuzz.check_program(program, "fuzz_flipped_comparison")
    assert [(m.kind, m.check) for m in found] == [("silent", "value")]


def _hardswish_program(size: int = 56) -> fuzz_program.Program:
    """F.hardswish of grid values with NaN and infinities (seed 900178, shrunk)."""
    return fuzz_program.Program(
        seed=900178,
        inputs=(
            fuzz_program.InputSpec(
                "x1", ("d2", 1), "float32", values="special", requires_grad=True
            ),
        ),
        statements=("v7 = F.hardswish(x1)",),
        outputs=("v7",),
        dims=({"d2": size},),
        grad=True,
    )


def test_fuzz_oracle_calls_hardswish_grad_at_nan_by_eager_position_precision():
    # Eager's hardswish backward gives NaN at a NaN input in its vectorized loop and passes
    # the gradient on in its scalar tail (56 elements: 32 and 24); inductor passes it on
    # everywhere, as eager's scalar formula does at every position.
    source = fuzz_program.render(_hardswish_program(), "inductor")
    with fuzz.quiet():
        found = oracle._differences(source, "inductor", False)
        assert [(m.kind, m.check) for m in found] == [("silent", "grad_value")]
        found = oracle.check_source(source, "inductor")
    assert [(m.kind, m.check) for m in found] == [("precision", "grad_value")]
    assert found[0].message.startswith(oracle.BY_POSITION)


def test_fuzz_oracle_keeps_a_wrong_result_of_a_hardswish_program_silent():
    if "fuzz_off_by_one" not in ember.list_backends():
        ember.register_backend(_off_by_one_backend, name="fuzz_off_by_one")
    found = fuzz.check_program(_hardswish_program(), "fuzz_off_by_one")
    assert ("silent", "value") in [(m.kind, m.check) for m in found]


def test_fuzz_oracle_explains_an_overflow_only_where_eager_float64_disagrees():
    # float32 sums of values near 3.4e38 overflow by their order (seed 900355): eager
    # gives inf where the exact sum is 6.8e38 (eager is unsure there) and 0.0 where it
    # is exact.
    big = torch.finfo(torch.float32).max
    eager32 = torch.tensor([float("inf"), 0.0, 1.0])
    eager64 = torch.tensor([2.0 * big, 0.0, 1.0], dtype=torch.float64)
    explained = oracle._differing_elements_explained
    # compiled differs only where eager overflowed: explained
    assert explained(eager32, eager64, torch.tensor([big, 0.0, 1.0]), torch.float32)
    # compiled overflowed where eager is exact: not explained
    assert not explained(eager32, eager64, torch.tensor([big, -float("inf"), 1.0]), torch.float32)
    # a wrong value where eager is exact: not explained
    assert not explained(eager32, eager64, torch.tensor([big, 0.0, 2.0]), torch.float32)
    # no difference at all: nothing to explain
    assert not explained(eager32, eager64, eager32.clone(), torch.float32)


def test_fuzz_oracle_float64_spelling_keeps_float32_range_of_nan_to_num():
    program = fuzz_program.Program(
        seed=900355,
        inputs=(fuzz_program.InputSpec("x1", ("d0", 4), "float32", values="special"),),
        statements=("v1 = torch.nan_to_num(x1)", "v2 = v1.sum(0)"),
        outputs=("v2",),
        dims=({"d0": 16},),
    )
    source = fuzz_program.render(program, "inductor")
    wide = oracle.load(oracle._float64_spelling(source))
    wide.update(oracle.FLOAT32_LIMITS)
    x = wide["make_inputs"](0)[0]
    assert x.dtype == torch.float64 and torch.isinf(x).any()
    assert wide["program"](x)[0].abs().max() <= 16 * torch.finfo(torch.float32).max
    # a program with float64 values of its own keeps float64's range
    own = source.replace("v2 = v1.sum(0)", "v2 = v1.sum(0).double()")
    assert "_nan_to_num_at_float32_limits" not in oracle._float64_spelling(own)


def _half_rows_dropped_backend(gm, example_inputs):
    """A deliberately wrong backend: float16/bfloat16 outputs lose their last row."""

    def run(*args):
        outputs = gm.forward(*args)
        low = (torch.float16, torch.bfloat16)
        return type(outputs)(o[:-1] if o.dtype in low else o for o in outputs)

    return run


def test_fuzz_oracle_keeps_a_wrong_size_silent_where_no_size_comes_from_values():
    # The float32 spelling of the program matches (the backend is wrong on bfloat16
    # alone), as a stale compiled entry missed by the widened program's other key does:
    # no rounding changes a size computed from sizes alone.
    if "fuzz_half_rows_dropped" not in ember.list_backends():
        ember.register_backend(_half_rows_dropped_backend, name="fuzz_half_rows_dropped")
    program = fuzz_program.Program(
        seed=11,
        inputs=(fuzz_program.InputSpec("x0", ("d0", 3), "bfloat16"),),
        statements=("v1 = x0.cumsum(0)", "v2 = v1.amin(dim=[-1], keepdim=True)"),
        outputs=("v2",),
        dims=({"d0": 4},),
    )
    found = fuzz.check_program(program, "fuzz_half_rows_dropped")
    assert [(m.kind, m.check) for m in found] == [("silent", "shape")]


@pytest.mark.parametrize(
    "statement, from_values",
    [
        ("v1 = x0[x0 > 0]", True),
        ("v1 = x1[x1]", True),
        ("v1 = x0.reshape(-1)[: int((x0 > 0).sum())]", True),
        ("v1 = x0 * x0.amax().item()", True),
        ("v1 = torch.nonzero(x0)", True),
        ("v1 = x0[1:, ::2].amin(dim=[-1], keepdim=True)", False),
        ("v1 = torch.einsum('ij->ji', x0)", False),
    ],
)
def test_fuzz_oracle_knows_sizes_computed_from_values(statement, from_values):
    body = f"def program(x0, x1):\n    {statement}\n    return (v1, )\n"
    assert (oracle.DATA_DEPENDENT_SIZE.search(body) is not None) == from_values


def test_fuzz_programs_are_deterministic_by_seed():
    for profile in generator.PROFILES:
        first = fuzz_program.render(generator.generate(1234, profile=profile))
        assert first == fuzz_program.render(generator.generate(1234, profile=profile))
        assert first != fuzz_program.render(generator.generate(1235, profile=profile))


def _overflowing_sum_program() -> fuzz_program.Program:
    """A row sum of `nan_to_num` of infinities (3.4e38 and -3.4e38 among grid values,
    seed 900355, shrunk): eager's cascade of partial sums and inductor's one accumulator
    overflow, or absorb the small values, at other elements. It names bfloat16 (as the
    seed's autocast region does), which leaves it to the element-wise rules."""
    return fuzz_program.Program(
        seed=900355,
        inputs=(
            fuzz_program.InputSpec(
                "x1", ("d2", "d0", "d1"), "float32", layout="sliced", values="special"
            ),
        ),
        statements=(
            "v1 = torch.nan_to_num(x1)",
            "v2 = v1.sum(1, keepdim=False)",
            "v3 = v2.to(torch.bfloat16)",
        ),
        outputs=("v2",),
        dims=({"d0": 22, "d1": 19, "d2": 5}, {"d0": 22, "d1": 19, "d2": 64}),
    )


def test_fuzz_oracle_calls_an_order_dependent_float32_overflow_precision():
    source = fuzz_program.render(_overflowing_sum_program(), "inductor")
    with fuzz.quiet():
        found = oracle._differences(source, "inductor", False)
        assert {(m.kind, m.check) for m in found} == {("silent", "value")}
        found = oracle.check_source(source, "inductor")
    assert {(m.kind, m.check) for m in found} == {("precision", "value")}


def _negating_backend(gm, example_inputs):
    """A deliberately wrong backend: every float output of the graph is negated."""

    def run(*args):
        outputs = gm.forward(*args)
        return type(outputs)(-o if o.is_floating_point() else o for o in outputs)

    return run


def test_fuzz_oracle_keeps_a_wrong_sum_of_overflowing_values_silent():
    # Where the sum's terms reach 3.4e38, float32 leaves the last few units of 1e32 and
    # the overflow to the order (an off-by-one backend is not seen there); a sign is not.
    if "fuzz_negating" not in ember.list_backends():
        ember.register_backend(_negating_backend, name="fuzz_negating")
    found = fuzz.check_program(_overflowing_sum_program(), "fuzz_negating")
    assert ("silent", "value") in [(m.kind, m.check) for m in found]


def test_fuzz_oracle_summation_bound_takes_any_order_and_nothing_else():
    import ast

    big = torch.finfo(torch.float32).max
    statement = ast.parse("v2 = v1.sum(0)").body[0]
    v1 = torch.tensor([[big, 1.0], [big, 2.0], [-big, 0.5], [0.5, -0.25]])
    eager = torch.tensor([big, 3.25])  # one order: the 0.5 absorbed by 2 * big
    explains = oracle._summation_order_explains

    def explained(compiled):
        return explains(statement, {"v1": v1}, {"v2": eager}, {"v2": compiled}, ["v2"])

    assert explained(torch.tensor([float("inf"), 3.25]))  # a partial sum 2 * big overflows
    assert explained(torch.tensor([float("nan"), 3.25]))
    assert not explained(torch.tensor([big, 3.5]))  # no overflow there: 3.5 is wrong
    assert not explained(torch.tensor([1.0, 3.25]))  # finite and far from big + 0.5
    mean = ast.parse("v2 = v1.mean(0)").body[0]
    assert not explains(mean, {"v1": v1}, {"v2": eager}, {"v2": eager + 1}, ["v2"])


def _layer_norm_branch(requires_grad: bool):
    """Seed 179590938815, shrunk: a branch on the sum of a layer norm's output (zero up to
    rounding: eager's float32 run gives +2.4e-7, its float64 run -4.4e-16) between a value
    of x0 and one that x0 does not reach."""
    program = fuzz_program.Program(
        seed=179590938815,
        inputs=(
            fuzz_program.InputSpec("x0", ("d0",), "float32", values="special", requires_grad=True),
            fuzz_program.InputSpec("x1", ("d2", "d1"), "float32", requires_grad=requires_grad),
        ),
        statements=(
            "v1 = x1.abs()",
            "v2 = F.layer_norm(v1, v1.shape[-1:])",
            "v6 = torch.view_as_real(torch.view_as_complex(x0.contiguous()) * (1 + 2j)) "
            "if v2.sum() > 0 else v2.t() @ v2",
        ),
        outputs=("v6",),
        dims=({"d0": 2, "d1": 3, "d2": 1},),
        grad=True,
    )
    return fuzz_program.render(program)


def test_fuzz_oracle_calls_grads_lost_by_a_branch_on_rounding_precision():
    # The branch eager's float32 run takes uses x0, the one its float64 run takes does not:
    # compiled code taking the other branch has no grads at all. That follows from rounding
    # as the output's other shape does, and says so in its message.
    source = _layer_norm_branch(requires_grad=False)
    shape = oracle.Mismatch("silent", "shape", "inductor", "call 0 output 0", "(2,) vs (3, 3)")
    grads = oracle.Mismatch("silent", "grad", "inductor", "call 0", "eager has grads, ...")
    value = oracle.Mismatch("silent", "value", "inductor", "call 0 output 1", "differs")
    found = oracle.reclassify_rounding(source, [shape, grads, value])
    assert [m.kind for m in found] == ["precision", "precision", "silent"]
    assert found[1].message.startswith(oracle.EAGER_ROUNDING)
    # x1 requiring grad: both branches have grads, eager's float64 run one for x1 only
    per_input = oracle.Mismatch("silent", "grad", "inductor", "call 0 grad of input 1", "None")
    source = _layer_norm_branch(requires_grad=True)
    found = oracle.reclassify_rounding(source, [per_input])
    assert [m.kind for m in found] == ["precision"]


def test_fuzz_oracle_keeps_lost_grads_silent_without_a_branch_on_values():
    # No value decides a size or a branch: a grad missing on one side is a wrong result
    program = fuzz_program.Program(
        seed=3,
        inputs=(fuzz_program.InputSpec("x0", ("d0",), "float32", requires_grad=True),),
        statements=("v1 = x0.sin()",),
        outputs=("v1",),
        dims=({"d0": 4},),
        grad=True,
    )
    grads = oracle.Mismatch("silent", "grad", "inductor", "call 0", "eager has grads, ...")
    assert oracle.reclassify_rounding(fuzz_program.render(program), [grads]) == [grads]
