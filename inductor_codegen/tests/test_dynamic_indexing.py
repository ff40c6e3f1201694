"""Index arithmetic over size symbols: decisions for every size, printing, symbol bindings."""

from __future__ import annotations

import itertools

import pytest
import sympy
import torch

import guards
from inductor_codegen import DynamicShapeError
from inductor_codegen.indexing import (
    FloorDiv,
    GuardedFacts,
    IndexMod,
    as_index,
    guarded_facts,
    index_of_shape_expr,
    py_index,
    reshape_index,
    simplify_with_ranges,
    statically_lt,
    view_strides,
)
from inductor_codegen.ir import InputBuffer, Layout
from inductor_codegen.symbols import bind_symbols, guarded_facts_of

s0, s1 = (sympy.Symbol(f"s{k}", integer=True, positive=True) for k in range(2))
x0, y0 = (sympy.Symbol(n, integer=True, nonnegative=True) for n in ("x0", "y0"))


@pytest.mark.parametrize(
    "a,b,expected",
    [
        (s0, s0 * s1, True),  # s1 >= 2
        (s0, 5 * s0, True),
        (s1, s0, None),
        (s0 - 2, (s0 - 2) * (s1 - 2), None),  # s1 - 2 may be 1
        (2 * s0, s0 + 1, False),
        (sympy.Integer(3), sympy.Integer(4), True),
    ],
)
def test_comparisons_are_decided_for_every_size_or_not_at_all(a, b, expected):
    assert statically_lt(a, b) is expected
    for v0, v1 in itertools.product(range(2, 7), repeat=2):
        values = {s0: v0, s1: v1}
        truth = bool(a.subs(values) < b.subs(values))
        assert expected is None or truth == expected


def test_divisions_by_a_symbol_fold_when_the_loop_bounds_allow():
    ranges = {x0: s0, y0: s1}
    assert simplify_with_ranges(FloorDiv(s1 * x0 + y0, s1), ranges) == x0
    assert simplify_with_ranges(IndexMod(s1 * x0 + y0, s1), ranges) == y0
    unbounded = FloorDiv(s1 * x0 + y0, s1)
    assert simplify_with_ranges(unbounded, {x0: s0}) == unbounded


def test_reshapes_between_symbolic_sizes():
    assert view_strides((s0, s1), (s1, 1), (s0 * s1,)) == (1,)
    assert view_strides((s0, 4), (4, 1), (s0, 2, 2)) == (4, 2, 1)
    assert view_strides((s0, s1), (1, s0), (s0 * s1,)) is None
    with pytest.raises(DynamicShapeError, match="cannot tell"):
        reshape_index((s0, s1), (s1, s0), (x0, y0))


def test_shape_expressions_map_onto_index_functions():
    assert index_of_shape_expr(guards.FloorDiv(s0, 2)) == FloorDiv(s0, 2)
    assert index_of_shape_expr(sympy.Mod(s0, 3)) == IndexMod(s0, 3)
    with pytest.raises(DynamicShapeError, match="not an integer"):
        index_of_shape_expr(s0 / 3)
    with pytest.raises(DynamicShapeError, match="uses Weird"):
        index_of_shape_expr(sympy.Function("Weird")(s0))


@pytest.mark.parametrize(
    "shape_expr,python",
    [
        (sympy.Mod(-2, s0), lambda v: -2 % v),  # roll by -2
        (guards.FloorDiv(-7, s0), lambda v: -7 // v),
        (guards.FloorDiv(s0 + 1, 2), lambda v: (v + 1) // 2),
    ],
)
def test_floored_division_of_negative_numbers_keeps_python_semantics(shape_expr, python):
    index = index_of_shape_expr(shape_expr)
    for value in range(2, 12):
        assert eval(py_index(index), {}, {"s0": value}) == python(value)


def test_python_printing_computes_the_same_values():
    expr = FloorDiv(s0 * s1 + 3, 2) + IndexMod(s0, s1) * sympy.Max(s1, 4)
    for v0, v1 in itertools.product(range(2, 6), repeat=2):
        got = eval(py_index(expr), {"max": max, "min": min}, {"s0": v0, "s1": v1})
        assert got == (v0 * v1 + 3) // 2 + (v0 % v1) * max(v1, 4)


def test_symint_sizes_become_their_expressions():
    mode = guards.FakeTensorMode(shape_env=guards.ShapeEnv())
    fake = mode.from_real(torch.randn(6, 4), guards.LocalSource("x"), dynamic_dims=[0])
    (symbol,) = as_index(fake.shape[0]).free_symbols
    assert as_index(fake.shape[0] * 2 + 1) == 2 * symbol + 1
    assert as_index(fake.shape[1]) == 4


def test_symbols_are_read_from_sizes_strides_symint_inputs_or_solved():
    layout = Layout(torch.float32, (2 * s0 + 1, s1), (1, 2 * s0 + 1))
    bindings = bind_symbols([InputBuffer("x", layout)], {})
    assert bindings["s0"].source == "(x.size(0) - 1) // 2"
    assert bindings["s1"].source == "x.size(1)"
    bindings = bind_symbols([InputBuffer("x", layout)], {"n": s0})
    assert bindings["s0"].source == "n"


@pytest.mark.parametrize(
    "shape_expr,python",
    [
        (sympy.floor(s0 / 2), lambda v: v // 2),
        (sympy.ceiling(3 * s0 / 2), lambda v: -(-3 * v // 2)),
        (sympy.floor(s0 * sympy.Float(0.5)), lambda v: int(v * 0.5)),  # interpolate(scale=0.5)
    ],
)
def test_rounded_divisions_become_floor_divisions(shape_expr, python):
    index = index_of_shape_expr(shape_expr)
    for value in range(2, 40):
        assert eval(py_index(index), {}, {"s0": value}) == python(value)
    with pytest.raises(DynamicShapeError, match="inexact"):
        index_of_shape_expr(sympy.floor(s0 * sympy.Float(0.1)))


def test_size_that_is_an_exact_quotient_prints_as_floor_division():
    """A shape environment solving `s1*s1*s2 == s3` for `s2` gives `s3/s1**2`, a whole
    size written as a quotient: the wrapper computes it with `//`."""
    s3 = sympy.Symbol("s3", integer=True, positive=True)
    text = py_index(s3 / s1**2)
    assert eval(text, {"s1": 2, "s3": 12}) == 3
    assert "//" in text and "/ " not in text.replace("//", "")
    assert eval(py_index(s3 * s0 / 2), {"s0": 3, "s3": 4}) == 6


def test_division_by_an_int_input_uses_its_guarded_range_and_relations():
    # slice(start, end, step) with int inputs: (end - start + step - 1) // step
    start, end, step = (sympy.Symbol(f"s{k}", integer=True) for k in (2, 3, 4))
    expr = sympy.Function("FloorDiv")(end - start + step - 1, step)
    with pytest.raises(DynamicShapeError, match="may not be positive"):
        index_of_shape_expr(expr)
    with guarded_facts(GuardedFacts({start: 0, end: 0, step: 1})):
        with pytest.raises(DynamicShapeError, match="may be negative"):
            index_of_shape_expr(expr)  # end - start may be negative
    with guarded_facts(GuardedFacts({start: 0, end: 0, step: 1}, (end - start,))):
        index = index_of_shape_expr(expr)
    assert index == FloorDiv(end - start + step - 1, step)
    for a, b, c in itertools.product(range(0, 5), range(0, 5), range(1, 4)):
        if b >= a:
            assert int(index.subs({start: a, end: b, step: c})) == (b - a + c - 1) // c


def test_guarded_facts_come_from_the_shape_environment():
    env = guards.ShapeEnv()
    source = guards.LocalSource("step")
    step = env.create_int_symbol(3, source)
    other = env.create_int_symbol(1, guards.LocalSource("start"))
    assert guarded_facts_of(env) == GuardedFacts()
    env.record(sympy.Ge(step, 1))
    env.record(sympy.Ge(step, other))
    facts = guarded_facts_of(env)
    assert facts.lower_bounds == {step: 1}
    assert facts.nonnegative == (step - other,)
