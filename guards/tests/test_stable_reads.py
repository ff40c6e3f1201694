"""Stable reads (stable_reads.py): the fast body of a guard function and when it runs.

Each test builds guards on chains rooted at a module global or a local, compiles
them, and checks the answer of the generated function (against the reference
check) after a change of one link; and when the fast body is used at all.
"""

from __future__ import annotations

import gc
import itertools
import sys
import types
import weakref
from dataclasses import dataclass

import pytest

from guards import (
    AttrSource,
    GuardSet,
    ItemSource,
    LocalSource,
    ModuleGlobalSource,
    NNModuleSource,
    Source,
    dict_versions,
    stable_reads,
)
from guards.stable_reads import use_stable_reads

pytestmark = pytest.mark.skipif(
    not dict_versions.AVAILABLE, reason="dict version tags are not available here"
)

_names = itertools.count()


class Config:
    def __init__(self) -> None:
        self.flag = True
        self.size = 4


class Owner:
    def __init__(self) -> None:
        self.config = Config()


@pytest.fixture
def module():
    name = f"stable_reads_unit_{next(_names)}"
    made = types.ModuleType(name)
    made.CONFIG = Config()
    made.TABLE = {"k": 1}
    made.Config = Config
    sys.modules[name] = made
    yield made
    sys.modules.pop(name, None)


def _global_guards(module) -> GuardSet:
    name = module.__name__
    config = ModuleGlobalSource(name, "CONFIG")
    guards = GuardSet()
    guards.add_type(config, module.CONFIG)
    guards.add_equals(AttrSource(config, "flag"), True)
    guards.add_equals(AttrSource(config, "size"), 4)
    guards.add_equals(ItemSource(ModuleGlobalSource(name, "TABLE"), "k"), 1)
    return guards


def _state(compiled):
    found = [v for k, v in compiled.check.__globals__.items() if k.startswith("___stable_reads")]
    return found[0] if found else None


def _warm(compiled, L=None, G=None):  # noqa: N803
    for _ in range(3):  # snapshot, trusted snapshot, fast
        assert compiled.check(L or {}, G or {})


def test_stable_reads_leave_out_guards_on_unchanged_module_globals(module):
    compiled = _global_guards(module).compile()
    _warm(compiled)
    state = _state(compiled)
    assert state is not None and state.unchanged()
    fast = compiled.source[compiled.source.index("def guard_check(") :]
    assert "EQUALS_MATCH" not in fast


def test_stable_reads_see_an_instance_attribute_of_a_global_set(module):
    compiled = _global_guards(module).compile()
    _warm(compiled)
    module.CONFIG.flag = False
    assert not compiled.check({}, {})
    module.CONFIG.flag = True
    assert compiled.check({}, {})


def test_stable_reads_see_a_global_rebound_to_an_equal_object(module):
    compiled = _global_guards(module).compile()
    _warm(compiled)
    module.CONFIG = Config()
    assert compiled.check({}, {})
    module.CONFIG.size = 5
    assert not compiled.check({}, {})


def test_stable_reads_see_a_dict_item_set(module):
    compiled = _global_guards(module).compile()
    _warm(compiled)
    module.TABLE["k"] = 2
    assert not compiled.check({}, {})


def test_stable_reads_see_a_class_swapped_under_an_instance(module):
    compiled = _global_guards(module).compile()
    _warm(compiled)

    class Other(Config):
        pass

    module.CONFIG.__class__ = Other
    assert not compiled.check({}, {})


def test_stable_reads_see_an_instance_dict_replaced(module):
    compiled = _global_guards(module).compile()
    _warm(compiled)
    module.CONFIG.__dict__ = {"flag": True, "size": 7}
    assert not compiled.check({}, {})


def test_stable_reads_see_a_data_descriptor_added_to_the_class(module):
    compiled = _global_guards(module).compile()
    _warm(compiled)
    try:
        Config.size = property(lambda self: 9)
        assert not compiled.check({}, {})
    finally:
        del Config.size


def test_a_snapshot_is_trusted_only_from_the_second_full_check(module):
    compiled = _global_guards(module).compile()
    state = _state(compiled)
    assert compiled.check({}, {})
    assert not state.unchanged()  # the tags of new dicts were read after that check
    assert compiled.check({}, {})
    assert state.unchanged()


def test_a_snapshot_going_stale_on_every_call_is_given_up(module):
    compiled = _global_guards(module).compile()
    state = _state(compiled)
    for count in range(4 * stable_reads.GIVE_UP_AFTER):
        module.TABLE["other"] = count  # a write to a watched dict on every call
        assert compiled.check({}, {})
    module.TABLE["k"] = 2
    assert not state.unchanged()
    assert not compiled.check({}, {})


def test_no_fast_body_without_version_tags(module, monkeypatch):
    monkeypatch.setattr(dict_versions, "AVAILABLE", False)
    compiled = _global_guards(module).compile()
    assert "guard_check_full" not in compiled.source
    assert compiled.check({}, {})


def test_use_stable_reads_false_gives_the_one_function(module):
    with use_stable_reads(False):
        compiled = _global_guards(module).compile()
    assert "guard_check_full" not in compiled.source
    assert compiled.check({}, {})
    module.CONFIG.flag = False
    assert not compiled.check({}, {})


def _local_guards(owner: Owner) -> GuardSet:
    me = NNModuleSource(LocalSource("self"))
    guards = GuardSet()
    guards.add_id(me, owner)
    guards.add_equals(AttrSource(AttrSource(me, "config"), "flag"), True)
    return guards


def test_stable_reads_from_a_local_check_its_identity():
    owner = Owner()
    compiled = _local_guards(owner).compile()
    _warm(compiled, {"self": owner})
    assert _state(compiled).unchanged()
    other = Owner()
    other.config.flag = False
    assert not compiled.check({"self": other}, {})
    owner.config.flag = False
    assert not compiled.check({"self": owner}, {})


def test_stable_reads_do_not_keep_a_local_alive():
    owner = Owner()
    compiled = _local_guards(owner).compile()
    _warm(compiled, {"self": owner})
    state = _state(compiled)
    alive = weakref.ref(owner)
    del owner
    gc.collect()
    assert alive() is None
    assert not state.unchanged()


def test_a_class_with_its_own_getattribute_is_not_read_stably(module):
    class Remapped(Config):
        def __getattribute__(self, name):
            return object.__getattribute__(self, name)

    module.CONFIG = Remapped()
    compiled = _global_guards(module).compile()
    _warm(compiled)
    fast = compiled.source[compiled.source.index("def guard_check(") :]
    assert "CONFIG'].flag" in fast  # still checked on every call
    module.CONFIG.flag = False
    assert not compiled.check({}, {})


def test_stable_reads_of_code_attributes_see_the_code_replaced(module):
    def helper(a, b):
        return a + b

    def other(c, d):
        return c - d

    module.helper = helper
    code = AttrSource(ModuleGlobalSource(module.__name__, "helper"), "__code__")
    names = AttrSource(code, "co_varnames")
    guards = GuardSet()
    guards.add_equals(names, ("a", "b"))
    guards.add_equals(ItemSource(names, 0), "a")
    compiled = guards.compile()
    _warm(compiled)
    assert _state(compiled).unchanged()
    fast = compiled.source[compiled.source.index("def guard_check(") :]
    assert "EQUALS_MATCH" not in fast
    helper.__code__ = other.__code__
    assert not compiled.check({}, {})
    helper.__code__ = (lambda a, b: a * b).__code__
    assert compiled.check({}, {})


class Registry:
    _mapping = {"sdpa": 1}  # noqa: RUF012 - shared by the instances, as a registry is


def test_stable_reads_of_a_class_attribute_through_an_instance_see_it_shadowed(module):
    module.REGISTRY = Registry()
    mapping = AttrSource(ModuleGlobalSource(module.__name__, "REGISTRY"), "_mapping")
    guards = GuardSet()
    guards.add_dict_keys(mapping, Registry._mapping)
    compiled = guards.compile()
    _warm(compiled)
    assert _state(compiled).unchanged()
    module.REGISTRY._mapping = {"eager": 2}  # the instance's own now
    assert not compiled.check({}, {})
    del module.REGISTRY._mapping
    assert compiled.check({}, {})
    Registry._mapping["eager"] = 2  # the class's dict itself
    try:
        assert not compiled.check({}, {})
    finally:
        del Registry._mapping["eager"]
    Registry._mapping = {"flex": 3}
    try:
        assert not compiled.check({}, {})
    finally:
        Registry._mapping = {"sdpa": 1}


def test_stable_reads_keep_no_class_alive_after_the_guard_function(module):
    class Made:
        flag = True

    module.MADE = Made
    guards = GuardSet()
    guards.add_equals(AttrSource(ModuleGlobalSource(module.__name__, "MADE"), "flag"), True)
    compiled = guards.compile()
    _warm(compiled)
    alive = weakref.ref(Made)
    del Made, module.MADE, compiled, guards
    gc.collect()
    assert alive() is None


# -- steps of source kinds defined elsewhere (register_stable_step) --------------------------


@dataclass(frozen=True, slots=True)
class RawRead(Source):
    """`object.__getattribute__(base, name)`, as dynamo_capture's RawAttrSource renders it."""

    source: Source
    attr: str

    @property
    def base(self) -> Source:
        return self.source

    def reconstruct(self, base_expr: str) -> str:
        return f"__import__('builtins').object.__getattribute__({base_expr}, {self.attr!r})"

    def short_name(self, base_name: str) -> str:
        return f"object.__getattribute__({base_name}, {self.attr!r})"


stable_reads.register_stable_step(
    RawRead, lambda base, source, links: stable_reads.raw_attribute_link(base, source.attr, links)
)


class Remapped(Config):
    """A class with its own `__getattribute__`, as transformers' configs have."""

    def __getattribute__(self, name):
        return object.__getattribute__(self, name)


def _raw_guards(module) -> GuardSet:
    config = ModuleGlobalSource(module.__name__, "CONFIG")
    instance = RawRead(config, "__dict__")
    guards = GuardSet()
    guards.add_type(config, module.CONFIG)
    guards.add_type(instance, {})
    guards.add_dict_keys(instance, module.CONFIG.__dict__)
    guards.add_equals(ItemSource(instance, "flag"), True)
    guards.add_equals(RawRead(config, "size"), 4)
    return guards


@pytest.fixture
def remapped(module):
    module.CONFIG = Remapped()
    return module


def test_a_registered_step_kind_twice_is_an_error():
    with pytest.raises(ValueError, match="already registered"):
        stable_reads.register_stable_step(RawRead, lambda base, source, links: None)


def test_reads_past_getattribute_leave_out_guards_while_unchanged(remapped):
    compiled = _raw_guards(remapped).compile()
    _warm(compiled)
    assert _state(compiled).unchanged()
    fast = compiled.source[compiled.source.index("def guard_check(") :]
    assert "EQUALS_MATCH" not in fast and "DICT_KEYS_MATCH" not in fast


@pytest.mark.parametrize(
    "change",
    [
        lambda c: setattr(c, "flag", False),  # an item of the instance dict
        lambda c: setattr(c, "size", 5),  # a raw attribute
        lambda c: setattr(c, "extra", 1),  # the dict's keys
        lambda c: object.__setattr__(c, "__dict__", {"flag": False, "size": 4}),
        lambda c: object.__setattr__(c, "__class__", type("Other", (Remapped,), {})),
    ],
    ids=["item", "raw attribute", "keys", "dict replaced", "class swapped"],
)
def test_reads_past_getattribute_see_each_change(remapped, change):
    compiled = _raw_guards(remapped).compile()
    with use_stable_reads(False):
        reference = _raw_guards(remapped).compile()
    _warm(compiled)
    change(remapped.CONFIG)
    assert not reference.check({}, {})
    assert not compiled.check({}, {})


def test_an_instance_dict_behind_a_class_dict_property_is_not_read_stably(module):
    class Odd(Config):
        __dict__ = property(lambda self: {"flag": True, "size": 4})  # type: ignore[assignment]

    module.CONFIG = Odd()
    compiled = _raw_guards(module).compile()
    _warm(compiled)
    fast = compiled.source[compiled.source.index("def guard_check(") :]
    assert "'flag'" in fast  # still read and checked on every call


class Slotted:
    __slots__ = ("value",)


class OtherSlotted:
    __slots__ = ("value",)


@pytest.mark.parametrize("make", [Config, Slotted], ids=["instance dict", "slots"])
def test_a_type_match_on_a_heap_class_is_left_out_and_sees_the_class_swapped(module, make):
    module.THING = make()
    source = ModuleGlobalSource(module.__name__, "THING")
    guards = GuardSet()
    guards.add_type(source, module.THING)
    compiled = guards.compile()
    _warm(compiled)
    assert _state(compiled).unchanged()
    fast = compiled.source[compiled.source.index("def guard_check(") :]
    assert "TYPE_MATCH" not in fast
    module.THING.__class__ = OtherSlotted if make is Slotted else Owner
    assert not compiled.check({}, {})
    module.THING.__class__ = make
    assert compiled.check({}, {})


class WithDefault:
    flag = True  # a dataclass field's default: on the class, shadowed by the instance

    def __init__(self) -> None:
        self.flag = False


def test_an_instance_attribute_shadowing_a_class_default_is_read_stably(module):
    module.THING = WithDefault()
    guards = GuardSet()
    guards.add_equals(AttrSource(ModuleGlobalSource(module.__name__, "THING"), "flag"), False)
    compiled = guards.compile()
    _warm(compiled)
    assert "EQUALS_MATCH" not in compiled.source[compiled.source.index("def guard_check(") :]
    del module.THING.flag  # the class's default shows through
    assert not compiled.check({}, {})
    module.THING.flag = False
    assert compiled.check({}, {})
    try:
        WithDefault.flag = property(lambda self: True)  # a data descriptor wins
        assert not compiled.check({}, {})
    finally:
        WithDefault.flag = True


def _item_guards(owner: Owner) -> GuardSet:
    me = NNModuleSource(ItemSource(LocalSource("args"), 0))  # a model passed on by `*args`
    guards = GuardSet()
    guards.add_length(LocalSource("args"), (owner,))
    guards.add_id(me, owner)
    guards.add_equals(AttrSource(AttrSource(me, "config"), "flag"), True)
    return guards


def test_an_object_pinned_by_identity_behind_an_item_is_a_checked_root():
    owner = Owner()
    compiled = _item_guards(owner).compile()
    _warm(compiled, {"args": (owner,)})
    assert _state(compiled).unchanged()
    fast = compiled.source[compiled.source.index("def guard_check(") :]
    assert "EQUALS_MATCH" not in fast
    other = Owner()
    assert not compiled.check({"args": (other,)}, {})  # another object: the full check
    assert compiled.check({"args": (owner,)}, {})
    owner.config.flag = False
    assert not compiled.check({"args": (owner,)}, {})
    assert not compiled.check({"args": (owner, owner)}, {})


def test_an_object_pinned_behind_an_item_is_not_kept_alive():
    owner = Owner()
    compiled = _item_guards(owner).compile()
    _warm(compiled, {"args": (owner,)})
    alive = weakref.ref(owner)
    del owner
    gc.collect()
    assert alive() is None
    assert not _state(compiled).unchanged()
