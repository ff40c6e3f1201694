"""Guard filtering: entries carry torch's fields; the six helpers keep what torch keeps."""

from __future__ import annotations

import pytest
import torch

from guards import (
    GlobalSource,
    GuardFilterError,
    GuardSet,
    LocalSource,
    ModuleSource,
    NNModuleSource,
    ParamBufferSource,
    keep_portable_guards_unsafe,
    keep_tensor_guards_unsafe,
    skip_all_guards_unsafe,
    skip_guard_on_all_nn_modules_unsafe,
    skip_guard_on_globals_unsafe,
    skip_guard_on_inbuilt_nn_modules_unsafe,
)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        self.scale = 2


@pytest.fixture
def setup():
    block, x, W = Block(), torch.randn(2), torch.randn(2)  # noqa: N806
    me = NNModuleSource(LocalSource("self"))
    linear = ModuleSource(me, "linear", builtin=True)
    guards = GuardSet()
    guards.add_tensor(LocalSource("x"), x)  # 0 local tensor
    guards.add_tensor(GlobalSource("W"), W)  # 1 global tensor
    guards.add_nn_module(me, block)  # 2 user module
    guards.add_nn_module(linear, block.linear)  # 3 builtin module
    guards.add_tensor(ParamBufferSource(linear, "weight"), block.linear.weight)  # 4 parameter
    guards.add_global_state()  # 5
    guards.add_equals(LocalSource("n"), 3)  # 6
    return guards, {"x": x, "self": block, "n": 3}, {"W": W}


def test_entries_have_torch_fields(setup):
    guards, L, G = setup  # noqa: N806
    entries = guards.filter_entries()
    assert [e.guard_type for e in entries] == [
        "TENSOR_MATCH",
        "TENSOR_MATCH",
        "NN_MODULE",
        "NN_MODULE",
        "TENSOR_MATCH",
        "GLOBAL_STATE",
        "EQUALS_MATCH",
    ]
    assert entries[0].name == "L['x']" and entries[0].value is L["x"] and entries[0].has_value
    assert entries[1].is_global and not entries[0].is_global
    assert entries[4].value is L["self"].linear.weight
    assert "TYPE_MATCH" in entries[0].derived_guard_types
    assert not entries[5].has_value
    assert entries[6].value == 3


@pytest.mark.parametrize(
    ("helper", "kept"),
    [
        (skip_guard_on_inbuilt_nn_modules_unsafe, [0, 1, 2, 5, 6]),
        (skip_guard_on_all_nn_modules_unsafe, [0, 1, 5, 6]),
        (keep_tensor_guards_unsafe, [0, 1]),
        (lambda e: keep_tensor_guards_unsafe(e, keep_parameters=True), [0, 1, 4]),
        (skip_guard_on_globals_unsafe, [0, 2, 3, 4, 5, 6]),
        (skip_all_guards_unsafe, []),
        (keep_portable_guards_unsafe, [0, 4, 5]),
    ],
)
def test_helpers(setup, helper, kept):
    guards, L, G = setup  # noqa: N806
    original = list(guards)
    filtered = guards.filter(helper)
    assert list(filtered) == [original[i] for i in kept]
    compiled = guards.compile(guard_filter_fn=helper)
    assert len(compiled) == len(kept)
    assert compiled(L, G)


def test_dropped_guards_are_not_checked(setup):
    guards, L, G = setup  # noqa: N806
    bad = dict(L, n=4)
    assert not guards.compile()(bad, G)
    assert guards.compile(guard_filter_fn=keep_tensor_guards_unsafe)(bad, G)
    assert guards.compile(guard_filter_fn=skip_all_guards_unsafe)({}, {})


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (lambda e: [True], "exactly one bool per entry"),
        (lambda e: [1] * len(e), "must be True or False"),
        (lambda e: None, "must return a list"),
    ],
)
def test_bad_filter_answers(setup, answer, words):
    guards, _, _ = setup
    with pytest.raises(GuardFilterError, match=words):
        guards.compile(guard_filter_fn=answer)
