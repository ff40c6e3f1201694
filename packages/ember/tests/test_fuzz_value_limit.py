"""The fuzzer skips a seed whose program would make a value over its size limit.

A seed of the `wide` profile (940009) drew a `torch.outer` of a 20,000-element selection:
a 1.6 GB value, copied by eager and each backend until the process ran out of memory.
The rule fires only on such values, so every other seed keeps its program.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

FUZZ = Path(__file__).resolve().parents[3] / "tools" / "fuzz"
sys.path.insert(0, str(FUZZ))

import fuzz  # noqa: E402
import generator  # noqa: E402
import scope  # noqa: E402


def test_a_program_over_the_limit_is_not_generated(monkeypatch):
    monkeypatch.setattr(scope, "MAX_VALUE_BYTES", 64)
    with pytest.raises(scope.ValueTooLarge, match="limit"):
        generator.generate(3, profile="wide")


def test_the_driver_records_the_seed_as_skipped(monkeypatch, tmp_path):
    monkeypatch.setattr(scope, "MAX_VALUE_BYTES", 64)
    summary = fuzz.Summary()
    options = fuzz.Options(backends=("eager",), out=tmp_path, shrink=False, verbose=False)
    fuzz.fuzz_one(3, options, summary, fuzz.Counter())
    assert summary.skipped == [3]
    assert summary.programs == 0
    assert "skipped" in summary.report()


def test_programs_under_the_limit_are_the_ones_they_were(monkeypatch):
    default = [generator.generate(seed, profile="wide") for seed in range(5)]
    monkeypatch.setattr(scope, "MAX_VALUE_BYTES", 1 << 62)
    assert [generator.generate(seed, profile="wide") for seed in range(5)] == default
