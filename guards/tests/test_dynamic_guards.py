"""Guards on symbolic sizes: generated in the one guard function, explained in words, sound.

A program is traced on fakes with every dim dynamic; the guard set (tensor
matches + the ShapeEnv's guard) must pass on new inputs exactly when a plain
reference says the trace is still valid: every dim keeps its 0/1-ness, sizes
that shared a symbol (duck sizing) are still equal, and eager runs the program
on the new inputs without error along the same branches. When it passes, the
symbolic output shape, evaluated at the new sizes, is eager's output shape.
"""

from __future__ import annotations

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from guards import FakeTensorMode, GuardSet, LocalSource, ShapeEnv, mark_dynamic

# ---------------------------------------------------------------------------- programs
# Each takes tensors and returns (output, path): path lists the branch decisions.


def cat_branch(x, y):
    out = torch.cat([x, y])
    if out.shape[0] > 6:
        return out.relu(), [True]
    return -out, [False]


def matmul_parity(x, y):
    out = (x @ y).sum(0)
    even = bool(out.shape[0] % 2 == 0)
    return (out * 2 if even else out), [even]


def view_or_transpose(x, y):
    big = bool(x.shape[0] * x.shape[1] > 20)
    out = x.reshape(-1) if big else x.t().reshape(x.shape[1], x.shape[0])
    return out.unsqueeze(0).expand(2, -1, *out.shape[1:]), [big]


def broadcast_add(x, y):
    out = x + y
    return out.softmax(-1), [bool(out.shape[-1] >= x.shape[0])]


def reshape_half(x, y):
    return x.reshape(x.shape[0] // 2, -1) * y.sum(), []


# name -> (program, exact): exact programs' guards pass exactly when the reference
# does; the others may be stricter than needed (meta kernels take decisions on
# sizes that need not hold for another valid input) but must stay sound.
PROGRAMS = {
    "cat_branch": (cat_branch, True),
    "matmul_parity": (matmul_parity, True),
    "view_or_transpose": (view_or_transpose, True),
    "broadcast_add": (broadcast_add, True),
    "reshape_half": (reshape_half, False),
}


def _trace(program, tensors, duck_shape=True):
    env = ShapeEnv(duck_shape=duck_shape)
    mode = FakeTensorMode(shape_env=env)
    names = [f"t{i}" for i in range(len(tensors))]
    fakes = [
        mode.from_real(t, LocalSource(n), dynamic_dims=range(t.dim()))
        for n, t in zip(names, tensors, strict=True)
    ]
    with mode:
        out, path = program(*fakes)
    guards = GuardSet()
    for name, fake in zip(names, fakes, strict=True):
        guards.add_tensor(LocalSource(name), fake)
    guards.add_shape_env(env)
    return env, guards, out, path


def _bound_shape(env, out, frame):
    values = {}
    for binding in env.bindings():
        values[binding.symbol] = sympy.Integer(eval(binding.sources[0].expr, {"L": frame}))
    shape = []
    for size in out.shape:
        expr = size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)
        shape.append(int(expr.xreplace(values)))
    return tuple(shape)


def _reference(program, old, new, duck_shape):
    """Whether the trace on `old` is valid for `new`, decided without the guards."""
    for a, b in zip(old, new, strict=True):
        if a.dim() != b.dim():
            return False
        for s, t in zip(a.shape, b.shape, strict=True):
            if (s in (0, 1) or t in (0, 1)) and s != t:
                return False
    if duck_shape:
        old_sizes = [s for t in old for s in t.shape]
        new_sizes = [s for t in new for s in t.shape]
        for i, s in enumerate(old_sizes):
            for j, u in enumerate(old_sizes):
                if s == u and s > 1 and new_sizes[i] != new_sizes[j]:
                    return False
    try:
        _, old_path = program(*old)
        _, new_path = program(*new)
    except RuntimeError:
        return False
    return old_path == new_path


@st.composite
def shapes(draw, program_name):
    def dims(k):
        return draw(st.lists(st.integers(1, 9), min_size=k, max_size=k))

    a, b, c = draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    if program_name == "cat_branch":
        return [(a, b), (c, draw(st.sampled_from([b, *dims(1)])))]
    if program_name == "matmul_parity":
        return [(a, b), (draw(st.sampled_from([b, *dims(1)])), c)]
    if program_name in ("view_or_transpose", "reshape_half"):
        return [(a, b), (c,)]
    return [(a, b), (draw(st.sampled_from([a, 1, *dims(1)])), b)]


@pytest.mark.parametrize("program_name", sorted(PROGRAMS))
@settings(max_examples=12, deadline=None)
@given(data=st.data(), duck_shape=st.booleans())
def test_guards_agree_with_reference_and_are_sound(program_name, data, duck_shape):
    program, exact = PROGRAMS[program_name]
    old = [torch.randn(s) for s in data.draw(shapes(program_name), label="old")]
    try:
        program(*old)
    except RuntimeError:
        return  # eager refuses the example itself
    env, guards, out, _ = _trace(program, old, duck_shape)
    check = guards.compile()
    assert check({f"t{i}": t for i, t in enumerate(old)}, {})
    for _ in range(4):
        new = [torch.randn(s) for s in data.draw(shapes(program_name), label="new")]
        frame = {f"t{i}": t for i, t in enumerate(new)}
        passed = check(frame, {})
        assert passed == (guards.why_failed(frame, {}) is None)
        valid = _reference(program, old, new, duck_shape)
        assert passed == valid if exact else valid or not passed, guards.why_failed(frame, {})
        if passed:
            eager, _ = program(*new)
            assert _bound_shape(env, out, frame) == tuple(eager.shape)


# ---------------------------------------------------------------------------- messages


def test_violated_relation_is_explained():
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    _, guards, _, _ = _trace(cat_branch, [x, y])
    check = guards.compile()
    frame = {"t0": torch.randn(8, 4), "t1": torch.randn(6, 4)}
    assert not check(frame, {})
    assert guards.why_failed(frame, {}) == (
        "shape relation L['t1'].size()[0] == L['t0'].size()[0] violated: "
        "L['t1'].size()[0] = 6 but L['t0'].size()[0] = 8 (L['t0'].size()[0] = 8)"
    )


def test_violated_range_is_explained():
    x, y = torch.randn(4, 3), torch.randn(5, 3)
    _, guards, _, _ = _trace(cat_branch, [x, y], duck_shape=False)
    frame = {"t0": torch.randn(2, 3), "t1": torch.randn(2, 3)}
    assert guards.why_failed(frame, {}) == (
        "shape relation L['t0'].size()[0] + L['t1'].size()[0] > 6 violated: "
        "L['t0'].size()[0] = 2, L['t1'].size()[0] = 2"
    )


def test_sizes_zero_and_one_are_specialized():
    x, y = torch.randn(1, 3), torch.randn(5, 3)
    env, guards, out, _ = _trace(cat_branch, [x, y], duck_shape=False)
    assert out.shape[0] == 1 + out.shape[0] - 1 and len(env.bindings()) == 2
    assert [b.sources[0].expr for b in env.bindings()][0] == "L['t0'].size()[1]"
    frame = {"t0": torch.randn(2, 3), "t1": torch.randn(6, 3)}
    assert not guards.compile()(frame, {})
    assert "size mismatch at index 0: expected 1, actual 2" in guards.why_failed(frame, {})
    frame = {"t0": torch.randn(1, 3), "t1": torch.randn(1, 3)}
    assert "sizes 0 and 1 are specialized" in guards.why_failed(frame, {})


def test_generated_source_shows_shape_checks():
    _, guards, _, _ = _trace(matmul_parity, [torch.randn(6, 4), torch.randn(4, 8)])
    source = guards.compile().source
    assert "t0_size_0 = t0.size()[0]" in source
    assert "(t1_size_1 % 2) == 0" in source or "(t0_size_1 % 2) == 0" in source
    assert "# SHAPE_ENV" in source


def test_mark_dynamic_range_in_guard():
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = torch.randn(8, 3)
    mark_dynamic(x, 0, min=4, max=16)
    fake = mode.from_real(x, LocalSource("x"))
    with mode:
        fake.sum(0)
    guards = GuardSet()
    guards.add_tensor(LocalSource("x"), fake)
    guards.add_shape_env(env)
    check = guards.compile()
    assert check({"x": torch.randn(16, 3)}, {}) and not check({"x": torch.randn(17, 3)}, {})
    assert guards.why_failed({"x": torch.randn(3, 3)}, {}) == (
        "shape range 4 <= L['x'].size()[0] <= 16 violated: L['x'].size()[0] = 3"
    )


def test_non_contiguous_input_strides_are_guarded():
    x = torch.randn(6, 8).t()  # strides (1, 8)
    env, guards, _, _ = _trace(lambda a, b: (a.sum(1), []), [x, torch.randn(2)])
    check = guards.compile()
    assert check({"t0": torch.randn(10, 5).t(), "t1": torch.randn(3)}, {})
    assert not check({"t0": torch.randn(5, 10), "t1": torch.randn(3)}, {})
    assert "stride" in guards.why_failed({"t0": torch.randn(5, 10), "t1": torch.randn(3)}, {})


def test_dynamic_log_names_symbols_guards_and_user_lines(caplog):
    import logging

    from guards import set_logs

    set_logs(dynamic=True)
    logger = logging.getLogger("ember.dynamic")
    logger.addHandler(caplog.handler)
    try:
        env, guards, _, _ = _trace(cat_branch, [torch.randn(4, 3), torch.randn(5, 3)], False)
    finally:
        logger.removeHandler(caplog.handler)
        set_logs()
    assert "create_symbol s0 = L['t0'].size()[0] (hint 4, range [2, inf])" in caplog.text
    assert "guard s0 + s2 > 6 (at " in caplog.text and "test_dynamic_guards.py:" in caplog.text
    assert "symbolic shape guards:\ns0 = L['t0'].size()[0]  # hint 4" in caplog.text


def test_transformer_layer_one_trace_serves_twenty_sequence_lengths():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = torch.randn(2, 7, 16)
    fake = mode.from_real(x, LocalSource("x"), dynamic_dims=[1])
    mask = torch.nn.Transformer.generate_square_subsequent_mask
    with mode:
        out = layer(fake, src_mask=mask(fake.shape[1]), is_causal=True)
    assert str(out.shape[1].node.expr) == "s0"
    guards = GuardSet()
    guards.add_tensor(LocalSource("x"), fake)
    guards.add_shape_env(env)
    check = guards.compile()
    for length in range(2, 22):
        frame = {"x": torch.randn(2, length, 16)}
        assert check(frame, {}), guards.why_failed(frame, {})
        eager = layer(frame["x"], src_mask=mask(length), is_causal=True)
        assert _bound_shape(env, out, frame) == tuple(eager.shape)
    assert not check({"x": torch.randn(2, 1, 16)}, {})
