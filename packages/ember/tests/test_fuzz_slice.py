"""A fixed-seed slice of the differential fuzzer (tools/fuzz) under aot_eager and inductor.

About a minute on a 2-core machine. A silent mismatch (a wrong result) fails the
test, which lists the reproducers (saved unshrunk in the test's tmp folder; run
`python tools/fuzz/fuzz.py --seed S --count 1 --backend B` to shrink one).

Seeds of the slice that show an open bug are listed in KNOWN_SILENT with the
shrunk reproducer; they are left out of the slice and each is checked alone as a
strict xfail, so the fix of the bug turns that test into a failure that says to
move the seed back into the slice.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[3] / "tools" / "fuzz"
sys.path.insert(0, str(FUZZ))

import fuzz  # noqa: E402

BACKENDS = ("aot_eager", "inductor")
SLICE = range(0, 40)

# seed -> (backend, shrunk reproducer of the open bug it shows)
KNOWN_SILENT: dict[int, tuple[str, str]] = {}

pytestmark = pytest.mark.fuzz


def _silent_report(summary: fuzz.Summary) -> str:
    lines = []
    for r in summary.silent():
        lines += [r["mismatch"], f"reproducer: {r['path']}", Path(r["path"]).read_text(), ""]
    return "\n".join(lines)


def _run(seeds, tmp_path: Path, backends=BACKENDS) -> fuzz.Summary:
    options = fuzz.Options(backends=backends, out=tmp_path, shrink=False, verbose=False)
    return fuzz.run(seeds, options)


def test_fuzz_slice_has_no_silent_mismatch(tmp_path):
    seeds = [s for s in SLICE if s not in KNOWN_SILENT]
    summary = _run(seeds, tmp_path)
    print(summary.report())
    assert summary.programs == len(seeds)
    assert not summary.crashes, f"the fuzzer itself failed on seeds {summary.crashes}"
    assert not summary.silent(), _silent_report(summary)


@pytest.mark.parametrize(
    "seed",
    [pytest.param(seed, marks=pytest.mark.xfail(strict=True, reason=f"open bug: {repro}"))
     for seed, (_, repro) in sorted(KNOWN_SILENT.items())] or [pytest.param(None, marks=pytest.mark.skip(reason="no known silent seeds"))],
)  # fmt: skip
def test_fuzz_known_silent_seed(seed, tmp_path):
    backend = KNOWN_SILENT[seed][0]
    summary = _run([seed], tmp_path, backends=(backend,))
    assert not summary.silent(), _silent_report(summary)
