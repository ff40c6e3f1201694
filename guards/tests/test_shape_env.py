"""ShapeEnv: symbols, hints, ranges, duck sizing, 0/1 specialization, recorded guards."""

from __future__ import annotations

import math
import operator

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from guards import (
    DynamicRange,
    FloorDiv,
    LocalSource,
    ShapeEnv,
    ShapeEnvError,
    SymNode,
    TensorPropertySource,
    ValueRange,
)
from guards.sym_exprs import bound, python_code, size_symbol, static_truth


def size_source(name: str, dim: int = 0) -> TensorPropertySource:
    return TensorPropertySource(LocalSource(name), "size", dim)


def symint(env: ShapeEnv, hint: int, name: str = "x", dim: int = 0, **kwargs) -> torch.SymInt:
    return env.create_symint(env.create_symbol(hint, size_source(name, dim), **kwargs), hint)


# ---------------------------------------------------------------------------- symbols


def test_symbol_has_hint_and_range():
    env = ShapeEnv()
    s = env.create_symbol(8, size_source("x"))
    assert isinstance(s, sympy.Symbol) and s.name == "s0"
    (binding,) = env.bindings()
    assert binding.hint == 8 and binding.range == ValueRange(2, math.inf)
    assert binding.sources[0].expr == "L['x'].size()[0]"


@pytest.mark.parametrize("hint", [0, 1])
def test_zero_and_one_stay_static(hint):
    env = ShapeEnv()
    assert env.create_symbol(hint, size_source("x")) == hint
    assert env.bindings() == []


def test_zero_one_specialization_can_be_switched_off():
    env = ShapeEnv(specialize_zero_one=False)
    s = env.create_symbol(1, size_source("x"))
    assert isinstance(s, sympy.Symbol)
    assert env.bindings()[0].range.lo == 0


def test_duck_sizing_shares_a_symbol_and_guards_equality():
    env = ShapeEnv()
    a = env.create_symbol(8, size_source("x"))
    b = env.create_symbol(8, size_source("y"))
    c = env.create_symbol(4, size_source("z"))
    assert a == b != c
    assert "L['y'].size()[0] == L['x'].size()[0]" in env.format_guards()


def test_duck_sizing_off_gives_distinct_symbols():
    env = ShapeEnv(duck_shape=False)
    a = env.create_symbol(8, size_source("x"))
    b = env.create_symbol(8, size_source("y"))
    assert a != b
    assert "L['y'].size()[0] == L['x'].size()[0]" not in env.format_guards()


def test_marked_range_is_kept_and_checked():
    env = ShapeEnv()
    env.create_symbol(8, size_source("x"), min=4, max=64)
    assert env.bindings()[0].range == ValueRange(4, 64)
    with pytest.raises(ShapeEnvError, match="not in range"):
        env.create_symbol(100, size_source("y"), min=4, max=64)


# ---------------------------------------------------------------------------- decisions


def test_guard_bool_decided_by_hint_and_recorded_once():
    env = ShapeEnv()
    s = symint(env, 8)
    t = symint(env, 5, "y")
    assert bool(s * t > 30) is True
    assert bool(s * t > 30) is True
    assert len(env.records) == 1
    assert python_code(env.records[0].condition) in ("s0*s1 > 30", "30 < s0*s1")


def test_trivial_and_range_decided_questions_record_nothing():
    env = ShapeEnv()
    s = symint(env, 8)
    assert bool(s == s) and bool(s + 1 > s) and not bool(s == 1) and bool(s >= 2)
    assert bool(s * 4 == 4 * s) and not bool(s < 0)
    assert (
        env.records == [] and env.ranges()[sympy.Symbol("s0", integer=True, positive=True)].lo == 2
    )


def test_single_symbol_inequality_narrows_the_range():
    env = ShapeEnv()
    s = symint(env, 8)
    assert bool(s > 5)
    assert bool(s <= 100)
    assert bool(2 * s + 1 < 50)
    (binding,) = env.bindings()
    assert binding.range == ValueRange(6, 24)
    assert env.records == []
    assert bool(s > 3)  # implied by the range: nothing new
    assert env.bindings()[0].range == ValueRange(6, 24)


def test_equality_between_symbols_becomes_a_replacement():
    env = ShapeEnv(duck_shape=False)
    a = symint(env, 8, "x")
    b = symint(env, 8, "y")
    assert bool(a == b)
    assert len(env.bindings()) == 1
    assert str((a + b).node.expr) == "2*s0"
    assert "L['y'].size()[0] == L['x'].size()[0]" in env.format_guards()


def test_guard_int_specializes():
    env = ShapeEnv()
    s = symint(env, 8)
    assert int(s) == 8 and isinstance(int(s), int)
    assert env.bindings() == []
    assert "L['x'].size()[0] == 8" in env.format_guards()


def test_size_oblivious_and_expect_true():
    env = ShapeEnv()
    s = symint(env, 8)
    assert (s == 1).node.guard_size_oblivious("", 0) is False
    assert (s % 2 == 0).node.expect_true("f.py", 3) is True
    (record,) = env.records
    assert record.where == "f.py:3"


def test_statically_known_true_records_nothing():
    env = ShapeEnv()
    s = symint(env, 8)
    assert (s >= 2).node.statically_known_true("", 0)
    assert not (s > 5).node.statically_known_true("", 0)
    assert env.records == [] and env.bindings()[0].range.lo == 2


def test_format_guards_is_readable():
    env = ShapeEnv()
    s = symint(env, 8)
    t = symint(env, 6, "y", 1)
    assert bool(s % t == 2)
    text = env.format_guards()
    assert "s0 = L['x'].size()[0]  # hint 8" in text
    assert "(L['x'].size()[0] % L['y'].size()[1]) == 2" in text


def test_guards_name_the_user_code_that_made_them():
    """`user_location` is asked at each guard; format_guards and a failing ShapeGuard name
    the lines behind each check (ranges, relations, specializations), none where unknown."""
    from guards.symbolic_guards import ShapeGuard

    env = ShapeEnv()
    where = ["if n > 4:  # f.py:3 in f"]
    env.user_location = lambda: where[0]
    s = symint(env, 8)
    t = symint(env, 6, "y", 1)
    u = symint(env, 5, "z")
    assert bool(s > 4)
    where[0] = "if n % m == 2:  # f.py:5 in f"
    assert bool(s % t == 2)
    where[0] = "x.view(5)  # f.py:7 in f"
    assert int(u) == 5
    text = env.format_guards()
    assert "5 <= L['x'].size()[0]  # if n > 4:  # f.py:3 in f" in text
    assert "(L['x'].size()[0] % L['y'].size()[1]) == 2  # if n % m == 2:  # f.py:5 in f" in text
    assert "L['z'].size()[0] == 5  # x.view(5)  # f.py:7 in f" in text
    assert "L['y'].size()[1]  # hint 6" in text  # a symbol's binding names no line
    guard = ShapeGuard.of(env)
    failures = {guard.failure(*values) for values in ((4, 6, 5), (8, 5, 5), (8, 6, 6))}
    assert failures == {
        "shape range 5 <= L['x'].size()[0] violated: L['x'].size()[0] = 4"
        "  # guarded by: if n > 4:  # f.py:3 in f",
        "shape relation (L['x'].size()[0] % L['y'].size()[1]) == 2 violated: "
        "L['x'].size()[0] = 8, L['y'].size()[1] = 5  # guarded by: if n % m == 2:  # f.py:5 in f",
        "L['z'].size()[0] is 6, but the compiled code assumed 5"
        "  # guarded by: x.view(5)  # f.py:7 in f",
    }


# ---------------------------------------------------------------------------- SymNode arithmetic

BINARY = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "truediv": operator.truediv,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}


@settings(max_examples=60, deadline=None)
@given(
    a=st.integers(2, 50),
    b=st.integers(2, 50),
    k=st.integers(-5, 5),
    op=st.sampled_from(sorted(BINARY)),
)
def test_symint_arithmetic_matches_python(a, b, k, op):
    env = ShapeEnv(duck_shape=False)
    x, y = symint(env, a, "x"), symint(env, b, "y")
    fn = BINARY[op]
    for left, right, want in ((x, y, fn(a, b)), (x, k, None), (k, y, None)):
        if want is None:
            lv = a if left is x else left
            rv = b if right is y else right
            if op in ("floordiv", "mod", "truediv") and rv == 0:
                continue
            want = fn(lv, rv)
        got = fn(left, right)
        node = got.node if isinstance(got, torch.SymInt | torch.SymFloat | torch.SymBool) else None
        if node is not None:
            assert node.hint == want
            # the expression agrees with its hint, in sympy and as generated Python
            assert env.hint_of(node.expr) == pytest.approx(want)
            assert eval(python_code(node.expr), {"s0": a, "s1": b}) == pytest.approx(want)
        else:
            assert got == want


def test_symint_min_max_sum_and_float():
    env = ShapeEnv(duck_shape=False)
    x, y = symint(env, 7, "x"), symint(env, 3, "y")
    assert torch.sym_max(x, y).node.hint == 7 and torch.sym_min(x, y).node.hint == 3
    assert torch.sym_float(x).node.hint == 7.0 and torch.sym_float(x).node.pytype is float
    total = torch.sym_sum([x, y, 5])
    assert total.node.hint == 15 and str(total.node.expr) == "s0 + s1 + 5"
    assert (x**2).node.hint == 49 and (-x).node.hint == -7


def test_node_protocol_basics():
    env = ShapeEnv()
    node = symint(env, 8).node
    assert isinstance(node, SymNode)
    assert node.is_int() and not node.is_float() and not node.is_bool()
    assert node.is_symbolic() and not node.is_nested_int() and node.has_hint()
    assert node.maybe_as_int() is None and node.wrap_int(3).maybe_as_int() == 3
    assert node.wrap_bool(True).maybe_as_bool() is True
    assert node.str() == "s0" == node._graph_repr() and node.clone() is node


# ---------------------------------------------------------------------------- sympy pieces


def test_floordiv_simplifies():
    s = size_symbol(0)
    assert FloorDiv(4 * s, 2) == 2 * s
    assert FloorDiv(FloorDiv(s, 2), 3) == FloorDiv(s, 6)
    assert FloorDiv(7, 2) == 3 and FloorDiv(-7, 2) == -4
    assert python_code(FloorDiv(s + 1, 2)) == "((s0 + 1) // 2)"
    assert eval(python_code(sympy.Mod(2 * s + 1, s - 1)), {"s0": 9}) == 19 % 8


@pytest.mark.parametrize("value", [2, 5, 9])
def test_abs_and_sign_print_as_python(value):
    """Guard code is Python: sympy's Abs and sign (a slice bound's `x*sign(x)`) evaluate
    there as in sympy (they printed as `Abs(...)` / `sign(...)`, names guard code lacks:
    the guard failed on every call, a recompile each time)."""
    s = size_symbol(0)
    for expr in (sympy.Abs(s - 5), sympy.sign(s - 5), (s - 5) * sympy.sign(s - 5)):
        assert eval(python_code(expr), {"s0": value}) == expr.subs(s, value)


def test_bound_and_static_truth():
    s, t = size_symbol(0), size_symbol(1)
    ranges = {s: ValueRange(2, 10), t: ValueRange(3, math.inf)}
    assert bound(s * t, ranges) == ValueRange(6, math.inf)
    assert bound(sympy.Mod(s, 4), ranges) == ValueRange(0, 3)
    assert static_truth(sympy.Gt(s * t, 5), ranges) is True
    assert static_truth(sympy.Lt(s, 10), ranges) is None
    assert static_truth(sympy.Eq(s, 1), ranges) is False


def test_sizes_from_marks_and_requested_dims():
    from guards import FakeTensorMode, mark_dynamic, mark_static, maybe_mark_dynamic

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = torch.randn(8, 6, 5)
    mark_dynamic(x, 0, min=2, max=64)
    maybe_mark_dynamic(x, 1)
    fake = mode.from_real(x, LocalSource("x"))
    assert [isinstance(d, torch.SymInt) for d in fake.shape] == [True, True, False]
    assert env.bindings()[0].range == ValueRange(2, 64)
    y = torch.randn(8, 6)
    mark_static(y, 0)
    fake_y = mode.from_real(y, LocalSource("y"), dynamic_dims=[0, 1])
    assert isinstance(fake_y.shape[1], torch.SymInt) and fake_y.shape[0] == 8
    assert DynamicRange is not None


def test_size_history_makes_changed_dims_dynamic():
    from guards import SizeHistory

    history = SizeHistory()
    x = LocalSource("x")
    assert history.observe(x, torch.empty(8, 3)) == frozenset()
    assert history.observe(x, torch.empty(16, 3)) == {0}
    assert history.observe(x, torch.empty(16, 5)) == {0, 1}  # sticky
    assert history.observe(x, torch.empty(4)) == {0}  # a rank change: every dim dynamic
    assert history.observe(x, torch.empty(4, 2, 2)) == {0, 1, 2}  # from then on
    first_seen_rank_change = LocalSource("y")
    history.observe(first_seen_rank_change, torch.empty(2))
    assert history.observe(first_seen_rank_change, torch.empty(2, 3)) == {0, 1}
    n = LocalSource("n")
    assert not history.observe_int(n, 3) and not history.observe_int(n, 3)
    assert history.observe_int(n, 4) and history.observe_int(n, 4)


def test_size_history_source_seen_as_tensor_and_number_is_dynamic_in_both():
    from guards import SizeHistory

    history = SizeHistory()
    y = LocalSource("y")
    assert history.observe(y, torch.empty(2)) == frozenset()
    assert history.observe_int(y, 3)  # a tensor before: symbolic at once
    assert history.observe(y, torch.empty(4, 2)) == {0, 1}
    z = LocalSource("z")
    assert not history.observe_value(z, 1.5)
    assert history.observe(z, torch.empty(3)) == {0}  # a number before: every dim


def test_int_input_symbol_and_arange():
    from guards import FakeTensorMode, GuardSet

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    n = env.create_symint(env.create_symbol(10, LocalSource("n")), 10)
    with mode:
        out = torch.arange(n * 2)
    assert str(out.shape[0].node.expr) == "2*s0" and env.hint_of(out.shape[0].node.expr) == 20
    guards = GuardSet()
    guards.add_shape_env(env)
    check = guards.compile()
    assert check({"n": 7}, {}) and not check({"n": 1}, {})


def _float_input(env: ShapeEnv, hint: float, name: str = "s") -> torch.SymFloat:
    return torch.SymFloat(
        SymNode(env.create_float_symbol(hint, LocalSource(name)), env, float, hint)
    )


def test_float_input_guard_rejects_nan_but_takes_inf():
    from guards import GuardSet

    env = ShapeEnv()
    scale = _float_input(env, 2.5)
    assert bool(scale != 5.0)  # a relation on the float, no specialization
    guards = GuardSet()
    guards.add_shape_env(env)
    check = guards.compile()
    assert check({"s": 3.5}, {}) and check({"s": math.inf}, {})
    assert not check({"s": 5.0}, {}) and not check({"s": math.nan}, {})
    assert "is nan" in guards.why_failed({"s": math.nan}, {})


def test_integer_equality_made_from_a_float_keeps_it_symbolic():
    from guards import GuardSet

    env = ShapeEnv()
    scale = _float_input(env, 1.5)
    size = math.floor(scale * 8.0)  # an output size computed from the float
    assert bool(torch.sym_max(1, size) == size)
    assert not env.specialized_floats
    guards = GuardSet()
    guards.add_shape_env(env)
    check = guards.compile()
    assert check({"s": 2.5}, {}) and not check({"s": 0.1}, {})


def test_equality_on_the_float_itself_specializes_it():
    env = ShapeEnv()
    scale = _float_input(env, 1.5)
    assert bool(scale == 1.5)
    assert env.specialized_floats == {LocalSource("s"): 1.5}


def test_graph_inputs_list_symbols_with_sources():
    from guards import FakeTensorMode

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = mode.from_real(torch.randn(8, 5), LocalSource("x"), dynamic_dims=[0, 1])
    mode.from_real(torch.randn(8), LocalSource("y"), dynamic_dims=[0])
    inputs = env.graph_inputs()
    assert [(b.name, b.sources[0].expr, b.hint) for b, _ in inputs] == [
        ("s0", "L['x'].size()[0]", 8),
        ("s1", "L['x'].size()[1]", 5),
    ]
    assert [s.expr for s in inputs[0][0].sources] == ["L['x'].size()[0]", "L['y'].size()[0]"]
    symint = inputs[0][1]
    assert isinstance(symint, torch.SymInt) and bool(symint == x.shape[0])
    assert env.records == []


def test_size_oblivious_treats_sizes_as_at_least_two():
    env = ShapeEnv(specialize_zero_one=False)
    s = symint(env, 5)
    assert (s == 1).node.guard_size_oblivious("", 0) is False
    assert (s >= 2).node.guard_size_oblivious("", 0) is True
    assert env.records == [] and env.bindings()[0].range.lo == 0
    assert bool(s != 1) and env.bindings()[0].range.lo == 0  # a real guard: s0 != 1
    assert len(env.records) == 1
