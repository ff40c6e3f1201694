"""Sources render the expression that fetches their value, and answer the filters' questions."""

from __future__ import annotations

import pytest
import torch

from guards import (
    AttrSource,
    CellContentsSource,
    ClosureSource,
    DefaultArgSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    ModuleGlobalSource,
    ModuleSource,
    NNModuleSource,
    ParamBufferSource,
    SourceError,
    TypeSource,
    is_builtin_module_class,
)

W = torch.ones(2)


def _read(source, L, G):  # noqa: N803
    return eval(source.expr, {}, {"L": L, "G": G})


def test_expressions_fetch_the_value():
    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 3)
            self.register_buffer("scale", torch.ones(3))
            self.tag = "t"

    module = Inner()
    offset = 5

    def f(a, b=7, *, c=9):
        return a + offset

    L = {"self": module, "xs": [10, 20], "d": {"k": 1}, "offset": offset, "f": f}  # noqa: N806
    G = {"W": W}  # noqa: N806
    self_source = NNModuleSource(LocalSource("self"))
    linear = ModuleSource(self_source, "linear", builtin=True)
    cases = [
        (LocalSource("xs"), L["xs"], "L['xs']", "xs"),
        (GlobalSource("W"), W, "G['W']", "W"),
        (ItemSource(LocalSource("xs"), 0), 10, "L['xs'][0]", "xs[0]"),
        (ItemSource(LocalSource("d"), "k"), 1, "L['d']['k']", "d['k']"),
        (AttrSource(LocalSource("self"), "tag"), "t", "L['self'].tag", "self.tag"),
        (linear, module.linear, "L['self']._modules['linear']", "self.linear"),
        (ParamBufferSource(linear, "weight"), module.linear.weight, None, "self.linear.weight"),
        (ParamBufferSource(self_source, "scale", is_buffer=True), module.scale, None, "self.scale"),
        (ClosureSource("offset"), 5, "L['offset']", "offset"),
        (CellContentsSource(LocalSource("f"), 0, "offset"), 5, None, None),
        (DefaultArgSource(LocalSource("f"), 0), 7, "L['f'].__defaults__[0]", None),
        (DefaultArgSource(LocalSource("f"), "c"), 9, "L['f'].__kwdefaults__['c']", None),
        (TypeSource(LocalSource("self")), Inner, "type(L['self'])", "type(self)"),
        (AttrSource(LocalSource("self"), "not an identifier"), None, None, None),
    ]
    setattr(module, "not an identifier", None)
    for source, value, expr, name in cases:
        assert _read(source, L, G) is value or _read(source, L, G) == value, source
        if expr is not None:
            assert source.expr == expr
        if name is not None:
            assert source.name == name


def test_sources_are_hashable_values():
    a = AttrSource(LocalSource("self"), "w")
    b = AttrSource(LocalSource("self"), "w")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != AttrSource(LocalSource("self"), "v")
    with pytest.raises(AttributeError):
        a.member = "x"  # frozen


def test_global_and_module_flags():
    user = NNModuleSource(LocalSource("self"))
    builtin = ModuleSource(user, "linear", builtin=True)
    weight = ParamBufferSource(builtin, "weight")
    user_attr = AttrSource(user, "scale")
    assert not LocalSource("x").is_nn_module()
    assert user.is_nn_module() and not user.is_builtin_nn_module()
    assert weight.is_nn_module() and weight.is_builtin_nn_module()
    assert user_attr.is_nn_module() and not user_attr.is_builtin_nn_module()
    assert GlobalSource("W").is_global() and ItemSource(GlobalSource("W"), 0).is_global()
    assert not weight.is_global()
    assert is_builtin_module_class(torch.nn.Linear)
    assert not is_builtin_module_class(type("Mine", (torch.nn.Module,), {}))


def test_bad_item_key_is_a_clear_error():
    with pytest.raises(SourceError, match="ItemSource index"):
        ItemSource(LocalSource("d"), object())
    with pytest.raises(SourceError, match="non-empty str"):
        AttrSource(LocalSource("d"), "")


def test_module_global_source():
    import torch.nn.functional as F  # noqa: N812

    from guards import GuardSet

    source = ModuleGlobalSource("torch.nn.functional", "relu")
    assert _read(source, {}, {}) is F.relu
    assert source.name == "torch.nn.functional.relu" and source.is_global()
    guards = GuardSet()
    guards.add_id(source, F.relu)
    compiled = guards.compile()
    assert "___module_globals" in compiled.source  # the module dict is bound once
    assert compiled({}, {}) and compiled.why_failed({}, {}) is None
    missing = GuardSet()
    missing.add_equals(ModuleGlobalSource("torch.nn.functional", "no_such_name"), 1)
    assert not missing.compile()({}, {})


def test_source_and_guard_hash_once_and_pickle_without_it():
    import dataclasses
    import pickle

    from guards import LocalSource
    from guards.guard_kinds import EqualsGuard
    from guards.sources import AttrSource, ItemSource

    def chain():
        return AttrSource(ItemSource(AttrSource(LocalSource("self"), "h"), 3), "weight")

    source = chain()
    assert source._hash is None
    assert hash(source) == hash(chain()) and source == chain()
    assert source._hash == hash(source)  # kept after the first hash
    assert {source: 1}[chain()] == 1
    copied = pickle.loads(pickle.dumps(source))
    assert copied == source and copied._hash is None  # another process salts str hashes
    assert hash(copied) == hash(source)
    moved = dataclasses.replace(source, member="bias")
    assert moved != source and moved._hash is None
    guard = EqualsGuard(source, 3)
    assert hash(guard) == hash(EqualsGuard(chain(), 3)) and guard._hash is not None
    assert len({guard, EqualsGuard(chain(), 3), EqualsGuard(chain(), 4)}) == 2


def test_a_sources_expression_is_built_once_and_follows_copies_and_replacements():
    import copy
    import dataclasses
    import pickle

    from guards import AttrSource, LocalSource

    source = AttrSource(AttrSource(LocalSource("self"), "linear"), "weight")
    assert source.expr == "L['self'].linear.weight"
    assert source.expr is source.expr  # kept, not rebuilt
    for same in (copy.copy(source), copy.deepcopy(source), pickle.loads(pickle.dumps(source))):
        assert same == source and same.expr == source.expr and hash(same) == hash(source)
    other = dataclasses.replace(source, member="bias")
    assert other.expr == "L['self'].linear.bias"
