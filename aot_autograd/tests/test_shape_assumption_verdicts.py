"""What tracing assumed of symbolic ints, checked per call once for each tuple of values."""

from __future__ import annotations

import sympy
import torch

from aot_autograd.symbolic import ShapeAssumptions, SymbolSource

s0, s1 = sympy.symbols("s0 s1", integer=True)


def _assumptions() -> ShapeAssumptions:
    sources = (SymbolSource(s0, 0, "int"), SymbolSource(s1, 1, "size", 0))
    return ShapeAssumptions.of(sources, (sympy.Lt(s0, 4), sympy.Ge(s0 + s1, 3)))


def test_shape_assumption_verdicts_follow_each_calls_values():
    assumptions = _assumptions()
    calls = [(2, 3), (5, 3), (2, 3), (0, 2), (0, 3), (5, 3), (1, 1)]
    for _ in range(2):  # the second round answers from the kept verdicts
        for value, rows in calls:
            expected = value < 4 and value + rows >= 3
            assert assumptions.hold((value, torch.zeros(rows))) is expected
    assert set(assumptions.verdicts) == set(calls)


def test_shape_assumption_verdicts_are_not_kept_for_floats():
    x = sympy.Symbol("x", real=True)
    assumptions = ShapeAssumptions.of((SymbolSource(x, 0, "item"),), (sympy.Gt(x, 0),))
    assert assumptions.hold((torch.tensor(1.5),)) is True
    assert assumptions.hold((torch.tensor(-1.5),)) is False
    assert assumptions.verdicts == {}
