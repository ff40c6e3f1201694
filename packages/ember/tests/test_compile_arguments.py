"""ember.compile's argument checking: each wrong value gets a message naming it and the choices."""

import pytest
import torch

import ember
from ember.config import MODES, OPTIONS


def f(x):
    return x + 1


def test_not_a_callable():
    with pytest.raises(ember.InvalidArgumentError, match="function, method or nn.Module, got int"):
        ember.compile(3)


def test_not_a_callable_through_the_decorator():
    with pytest.raises(ember.InvalidArgumentError, match="got str"):
        ember.compile(backend="eager")("not callable")


def test_unknown_backend_lists_the_available_ones_and_how_to_register():
    with pytest.raises(ember.BackendNotFoundError) as info:
        ember.compile(f, backend="indcutor")
    message = str(info.value)
    assert "'indcutor'" in message
    for name in ("inductor", "eager", "aot_eager", "cudagraphs"):
        assert name in message
    assert "register_backend" in message and "ember.backends" in message


def test_unknown_backend_is_also_a_value_error():
    with pytest.raises(ValueError):
        ember.compile(f, backend=42)


def test_unknown_mode_lists_the_modes():
    with pytest.raises(ember.InvalidArgumentError) as info:
        ember.compile(f, mode="fastest")
    message = str(info.value)
    assert "'fastest'" in message
    for mode in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        assert repr(mode) in message


def test_unknown_option_lists_the_known_ones():
    with pytest.raises(ember.InvalidArgumentError) as info:
        ember.compile(f, options={"max_autotun": True})
    message = str(info.value)
    assert "'max_autotun'" in message
    for name in OPTIONS:
        assert name in message


def test_option_of_the_wrong_type():
    with pytest.raises(ember.InvalidArgumentError, match="'recompile_limit' takes int, got 'many'"):
        ember.compile(f, options={"recompile_limit": "many"})
    with pytest.raises(ember.InvalidArgumentError, match="takes int"):
        ember.compile(f, options={"recompile_limit": True})


def test_mode_and_options_that_agree_are_accepted():
    compiled = ember.compile(
        f, mode="max-autotune", options={"max_autotune": True, "compile_threads": 2}
    )
    assert callable(compiled)


def test_mode_and_options_that_conflict():
    with pytest.raises(
        ember.InvalidArgumentError, match="mode 'reduce-overhead' sets triton.cudagraphs=True"
    ):
        ember.compile(f, mode="reduce-overhead", options={"triton.cudagraphs": False})


def test_codegen_options_need_the_inductor_backend():
    with pytest.raises(ember.InvalidArgumentError, match="only applies to backend"):
        ember.compile(f, backend="eager", options={"max_autotune": True})
    with pytest.raises(ember.InvalidArgumentError, match="only applies to backend 'inductor'"):
        ember.compile(f, backend="eager", mode="max-autotune")


def test_capture_options_apply_to_every_backend():
    ember.compile(f, backend="eager", options={"recompile_limit": 2, "guard_filter_fn": None})
    ember.compile(f, backend=lambda gm, inputs: gm.forward, options={"recompile_limit": 2})


def test_flags_are_checked():
    with pytest.raises(ember.InvalidArgumentError, match="fullgraph must be True or False"):
        ember.compile(f, fullgraph="yes")
    with pytest.raises(ember.InvalidArgumentError, match="dynamic must be None"):
        ember.compile(f, dynamic="auto")
    with pytest.raises(ember.InvalidArgumentError, match="disable must be True or False"):
        ember.compile(f, disable=1)


def test_options_must_be_a_mapping():
    with pytest.raises(ember.InvalidArgumentError, match="options must be a dict"):
        ember.compile(f, options=[("max_autotune", True)])


def test_every_mode_expands_to_known_options():
    for mode, options in MODES.items():
        assert set(options) <= set(OPTIONS), mode
        ember.compile(f, mode=mode)


def test_arguments_are_checked_before_the_decorator_is_applied():
    # A typo fails where ember.compile is called, not at the first call.
    with pytest.raises(ember.InvalidArgumentError):
        ember.compile(mode="turbo")


def test_wrong_arguments_never_wrap(monkeypatch):
    with pytest.raises(ember.InvalidArgumentError):
        ember.compile(torch.nn.Linear(2, 2), options={"nope": 1})
