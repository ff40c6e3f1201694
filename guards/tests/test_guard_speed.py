"""What makes the generated guard function cheaper, and that each such guard still fails.

Every shortcut here (constants as globals, implied guards left out, plain reads
through known __getattribute__ overrides, trusted parameters) is checked both
ways: the guard passes on the compile-time values, and fails when the value it
protects changes.
"""

from __future__ import annotations

import pytest
import torch
from guardcheck import check_both

from guards import (
    AttrSource,
    FakeTensorMode,
    GuardSet,
    ItemSource,
    LocalSource,
    NNModuleSource,
    ParamBufferSource,
)
from guards.attribute_access import plain_read_plan

X = LocalSource("x")
_both = check_both


def _code_lines(guards: GuardSet) -> list[str]:
    """The generated function's lines, without comments and the constants' header."""
    source = guards.compile().source
    body = source[source.index("def guard_check") :]
    return [line.strip() for line in body.splitlines() if not line.strip().startswith("#")]


# ---------------------------------------------------------------------------- constants


def test_constants_are_globals_not_keyword_defaults():
    guards = GuardSet()
    guards.add_tensor(X, torch.randn(2, 3))
    guards.add_id(LocalSource("f"), torch.relu)
    guards.add_global_state()
    compiled = guards.compile()
    assert compiled.check.__kwdefaults__ is None
    assert compiled.check.__code__.co_argcount == 2
    assert compiled({"x": torch.randn(2, 3), "f": torch.relu}, {})
    assert not compiled({"x": torch.randn(2, 3), "f": torch.sigmoid}, {})
    assert not compiled({"x": torch.randn(2, 3, dtype=torch.float64), "f": torch.relu}, {})


# ---------------------------------------------------------------------------- implied guards


class Thing:
    """An object with an attribute, reads of which are counted."""

    reads = 0

    @property
    def size(self) -> int:
        Thing.reads += 1
        return 3


def test_type_match_implied_by_id_match_is_not_checked_again():
    thing = Thing()
    guards = GuardSet()
    guards.add_type(X, thing)
    guards.add_id(X, thing)
    guards.add_equals(AttrSource(X, "size"), 3)
    lines = _code_lines(guards)
    assert not any(line.startswith("if not (type(x) is") for line in lines), lines
    assert _both(guards, {"x": thing}) == (True, None)
    ok, why = _both(guards, {"x": Thing()})
    assert not ok and "not the same object" in why
    ok, why = _both(guards, {"x": 3})
    assert not ok and "type mismatch" in why  # why_failed still names the type guard
    Thing.reads = 0
    assert not guards.compile()({"x": Thing()}, {})
    assert Thing.reads == 0  # the identity check moved up to the type check's place


def test_type_match_implied_by_equals_and_tensor_match():
    guards = GuardSet()
    guards.add_type(LocalSource("n"), 3)
    guards.add_equals(LocalSource("n"), 3)
    guards.add_type(X, torch.randn(2))
    guards.add_tensor(X, torch.randn(2))
    compiled = guards.compile()
    assert "2 implied by others" in compiled.source
    assert compiled({"n": 3, "x": torch.randn(2)}, {})
    assert not compiled({"n": 3.0, "x": torch.randn(2)}, {})
    assert not compiled({"n": True, "x": torch.randn(2)}, {})
    assert not compiled({"n": 3, "x": torch.nn.Parameter(torch.randn(2))}, {})


def test_training_flag_implied_by_module_guard():
    module = torch.nn.Dropout()
    me = NNModuleSource(LocalSource("m"))
    guards = GuardSet()
    guards.add_nn_module(me, module)
    guards.add_equals(AttrSource(me, "training"), True)
    assert "1 implied by others" in guards.compile().source
    assert _both(guards, {"m": module}) == (True, None)
    module.eval()
    ok, why = _both(guards, {"m": module})
    assert not ok and "training" in why


def test_length_implied_by_dict_keys_and_tuple_equals():
    guards = GuardSet()
    guards.add_dict_keys(LocalSource("d"), {"a": 1, "b": 2})
    guards.add_length(LocalSource("d"), {"a": 1, "b": 2})
    guards.add_equals(LocalSource("t"), (1, 2))
    guards.add_length(LocalSource("t"), (1, 2))
    assert "3 implied by others" in guards.compile().source  # 2 lengths and the dict's type
    assert _both(guards, {"d": {"a": 1, "b": 2}, "t": (1, 2)}) == (True, None)
    assert not _both(guards, {"d": {"a": 1, "b": 2, "c": 3}, "t": (1, 2)})[0]
    assert not _both(guards, {"d": {"a": 1}, "t": (1, 2)})[0]
    assert not _both(guards, {"d": {"a": 1, "b": 2}, "t": (1, 2, 3)})[0]


def test_guards_a_filter_keeps_are_never_implied_by_guards_it_dropped():
    thing = Thing()
    guards = GuardSet()
    guards.add_type(X, thing)
    guards.add_id(X, thing)
    kept = guards.compile(
        guard_filter_fn=lambda entries: [e.guard_type == "TYPE_MATCH" for e in entries]
    )
    assert kept({"x": Thing()}, {}) and not kept({"x": 3}, {})


# ---------------------------------------------------------------------------- trusted parameters


def test_parameters_guarded_through_fakes_trust_the_real_parameter():
    model = torch.nn.Linear(3, 4)
    me = NNModuleSource(LocalSource("self"))
    source = ParamBufferSource(me, "weight")
    mode = FakeTensorMode()
    fake = mode.from_real(model.weight, source)
    guards = GuardSet()
    guards.add_tensor(source, fake)
    compiled = guards.compile()
    (guard,) = compiled.guards
    # NOTE: compiled guards keep no tensor they were built on (tensor_guards.held)
    assert guard.trust_identity and not guard.has_value
    assert _both(guards, {"self": model}) == (True, None)
    model.weight.requires_grad_(False)
    ok, why = _both(guards, {"self": model})
    assert not ok and "requires_grad" in why
    model.weight.requires_grad_(True)
    model.double()  # the same Parameter object, another dtype
    ok, why = _both(guards, {"self": model})
    assert not ok and "dtype" in why
    other = torch.nn.Linear(3, 4)
    assert _both(guards, {"self": other}) == (True, None)  # another object: fully checked
    assert not _both(guards, {"self": torch.nn.Linear(3, 5)})[0]


def test_fakes_of_plain_inputs_are_not_trusted():
    x = torch.randn(2, 3)
    mode = FakeTensorMode()
    guards = GuardSet()
    guards.add_tensor(X, mode.from_real(x, X))
    (guard,) = guards.compile().guards
    assert not guard.trust_identity
    assert guards.compile()({"x": torch.randn(2, 3)}, {})
    assert not guards.compile()({"x": x.t().contiguous().t()}, {})  # another layout


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)
        self.register_buffer("scale", torch.ones(2))
        self.register_parameter("extra", None)
        self.eps = 1e-5


class Dynamic(Block):
    """A module whose __getattr__ makes up attributes: only the slow read is right."""

    def __getattr__(self, name):
        if name == "made_up":
            return 1
        return super().__getattr__(name)


NAMES = ("fc", "scale", "extra", "eps", "forward", "missing", "made_up")


@pytest.mark.parametrize("cls", [Block, Dynamic])
def test_has_attr_on_modules_agrees_with_hasattr(cls):
    module = cls()
    me = NNModuleSource(LocalSource("m"))
    guards = GuardSet()
    guards.add_nn_module(me, module)
    for name in NAMES:
        guards.add_has_attr(me, name, hasattr(module, name))
    source = guards.compile().source
    assert ("'_modules', ()" in source) is (cls is Block)
    assert _both(guards, {"m": module}) == (True, None)
    module.missing = 1
    ok, why = _both(guards, {"m": module})
    assert not ok and "'missing'" in why
    del module.missing
    del module.fc
    ok, why = _both(guards, {"m": module})
    assert not ok and "'fc'" in why
    module.fc = torch.nn.Linear(2, 2)
    module.register_buffer("missing", torch.ones(1))
    assert not _both(guards, {"m": module})[0]
    del module.missing
    cls.missing = 3  # a class attribute now: the slow read sees it
    try:
        assert not _both(guards, {"m": module})[0]
    finally:
        del cls.missing
    assert _both(guards, {"m": module}) == (True, None)
    other = torch.nn.Linear(2, 2)  # another class: the slow read, and the identity fails
    assert not _both(guards, {"m": other})[0]


# ---------------------------------------------------------------------------- plain reads


def _gpt2_config(**kwargs):
    """A transformers GPT2Config (its class overrides __getattribute__ in Python)."""
    transformers = pytest.importorskip("transformers")
    return transformers.GPT2Config(**kwargs)


def _config_guards(config) -> GuardSet:
    source = LocalSource("config")
    guards = GuardSet()
    guards.add_type(source, config)
    for name in ("use_cache", "return_dict", "num_hidden_layers", "_attn_implementation_internal"):
        guards.add_equals(AttrSource(source, name), getattr(config, name))
    return guards


def test_config_attributes_are_read_plainly_and_still_guarded():
    config = _gpt2_config(n_layer=2)
    guards = _config_guards(config)
    assert plain_read_plan(type(config)) is not None
    assert "object_getattribute" in guards.compile().source
    assert _both(guards, {"config": config}) == (True, None)
    config.use_cache = not config.use_cache
    ok, why = _both(guards, {"config": config})
    assert not ok and "use_cache" in why
    config.use_cache = not config.use_cache
    config.num_hidden_layers = 3  # an attribute_map alias: stored as n_layer
    assert config.__dict__["n_layer"] == 3
    ok, why = _both(guards, {"config": config})
    assert not ok and "num_hidden_layers" in why


def test_config_reads_fall_back_when_the_override_would_not_forward():
    config = _gpt2_config(n_layer=2)
    guards = _config_guards(config)
    compiled = guards.compile()
    assert compiled({"config": config}, {})

    class Spec:
        per_layer_attributes = ("use_cache",)

    config.__dict__["_heterogeneity_spec"] = Spec()
    config.__dict__["allow_global_per_layer_attribute_access"] = False
    try:
        # the override raises for a per-layer attribute: the slow read runs, and fails
        assert not compiled({"config": config}, {})
    finally:
        del config.__dict__["_heterogeneity_spec"]
    assert compiled({"config": config}, {})


def test_config_reads_notice_a_patched_override():
    config = _gpt2_config(n_layer=2)
    compiled = _config_guards(config).compile()
    cls = type(config)
    original = cls.__dict__.get("__getattribute__")

    def patched(self, key):
        return "patched" if key == "return_dict" else object.__getattribute__(self, key)

    cls.__getattribute__ = patched
    try:
        assert not compiled({"config": config}, {})
    finally:
        if original is None:
            del cls.__getattribute__
        else:
            cls.__getattribute__ = original
    assert compiled({"config": config}, {})


class Unknown:
    """A __getattribute__ override with no rule: always read the slow way."""

    def __init__(self) -> None:
        self.value = 1

    def __getattribute__(self, key):
        if key == "value":
            return object.__getattribute__(self, "value") + Unknown.offset
        return object.__getattribute__(self, key)

    offset = 0


class PreTrainedConfig:
    """Same name as a known override, another body: no rule applies."""

    attribute_map: dict = {}  # noqa: RUF012

    def __init__(self) -> None:
        self.value = 1

    def __getattribute__(self, key):
        if key == "value":
            return 2
        return super().__getattribute__(key)


@pytest.mark.parametrize("cls", [Unknown, PreTrainedConfig])
def test_unknown_overrides_keep_the_slow_read(cls):
    obj = cls()
    source = LocalSource("o")
    guards = GuardSet()
    guards.add_type(source, obj)
    guards.add_equals(AttrSource(source, "value"), obj.value)
    assert plain_read_plan(cls) is None
    assert "object_getattribute" not in guards.compile().source
    assert _both(guards, {"o": obj}) == (True, None)
    if cls is Unknown:
        Unknown.offset = 1
        try:
            assert not _both(guards, {"o": obj})[0]
        finally:
            Unknown.offset = 0


def test_plain_reads_are_shared_along_a_chain():
    config = _gpt2_config(n_layer=2)
    holder = {"cfg": config}
    source = ItemSource(LocalSource("h"), "cfg")
    guards = GuardSet()
    guards.add_type(source, config)
    guards.add_equals(AttrSource(source, "use_cache"), config.use_cache)
    guards.add_equals(AttrSource(source, "return_dict"), config.return_dict)
    lines = _code_lines(guards)
    assert sum("h['cfg']" in line for line in lines) == 1, lines
    assert sum("___mro_" in line for line in lines) == 1, lines
    assert _both(guards, {"h": holder}) == (True, None)
    assert not _both(guards, {"h": {"cfg": _gpt2_config(use_cache=False)}})[0]


# ---------------------------------------------------------------------------- hasattr


def test_has_attr_guard_on_plain_objects():
    thing = Thing()
    guards = GuardSet()
    guards.add_has_attr(X, "size", True)
    guards.add_has_attr(X, "color", False)
    assert _both(guards, {"x": thing}) == (True, None)
    thing.color = "red"
    ok, why = _both(guards, {"x": thing})
    assert not ok and why == "'x' did not have attribute 'color' when compiled"
    ok, why = _both(guards, {"x": 3})
    assert not ok and why == "'x' had attribute 'size' when compiled"


def test_has_attr_on_configs_is_an_instance_dict_test_and_still_guarded():
    config = _gpt2_config(n_layer=2)
    config.extra_flag = 1  # in the instance dict only
    source = LocalSource("config")
    guards = GuardSet()
    guards.add_type(source, config)
    guards.add_has_attr(source, "extra_flag", True)
    guards.add_has_attr(source, "vision_feature_layer", False)
    guards.add_has_attr(source, "num_hidden_layers", True)  # an attribute_map alias
    guards.add_has_attr(source, "to_dict", True)  # a method of the class
    compiled = guards.compile()
    assert "in config___dict" in compiled.source
    assert _both(guards, {"config": config}) == (True, None)
    config.vision_feature_layer = -1
    assert not _both(guards, {"config": config})[0]
    del config.vision_feature_layer
    assert _both(guards, {"config": config}) == (True, None)
    cls = type(config)
    cls.vision_feature_layer = -1  # on the class now: the slow read sees it
    try:
        assert not _both(guards, {"config": config})[0]
    finally:
        del cls.vision_feature_layer
    del config.extra_flag
    ok, why = _both(guards, {"config": config})
    assert not ok and "extra_flag" in why


def test_id_match_of_a_dead_object_fails_for_none_even_without_its_type_match():
    class Gone:
        pass

    thing = Gone()
    guards = GuardSet()
    guards.add_type(X, thing)
    guards.add_id(X, thing)
    compiled = guards.compile()
    assert compiled({"x": thing}, {})
    del thing
    assert not compiled({"x": None}, {})
    assert compiled.why_failed({"x": None}, {}) is not None
