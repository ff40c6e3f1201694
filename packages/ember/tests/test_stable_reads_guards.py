"""Guards on chains read once and reused still see every change to the chain.

A guard function skips what cannot have changed since its last full check
(guards/stable_reads.py): module globals, class and instance attributes behind
unchanged dict version tags, closures, code. Each test compiles a function that
inlines code of a module of its own (globals, a class hierarchy, a closure, an
instance), calls it until the fast path runs, changes one link of a chain in one
way, and checks that the next calls give eager's result.

| footgun                                                    | without the check   |
| ---------------------------------------------------------- | ------------------- |
| a module global rebound, a registry dict item set          | silent wrong result |
| a class attribute set, on the class or a base; `__bases__` | silent wrong result |
| a function's `__defaults__`, `__code__`, `__name__` set     | silent wrong result |
| a closure cell assigned                                    | silent wrong result |
| an instance attribute set, `__dict__` or `__class__` swapped | silent wrong result |
| a method monkeypatched on the instance                     | silent wrong result |
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import textwrap

import pytest
import torch
from torch.testing import assert_close

import ember
from guards import dict_versions

pytestmark = pytest.mark.skipif(
    not dict_versions.AVAILABLE, reason="dict version tags are not available here"
)

SOURCE = textwrap.dedent(
    """
    import torch

    SCALE = 2.0
    REGISTRY = {"shift": 1.0}


    def make(k):
        def helper(x, bias=1.0):
            return x * k + bias

        return helper


    helper = make(3.0)


    def other_helper(x, bias=1.0):
        return x * k - bias


    k = 0.5


    class Base:
        def act(self, x):
            return torch.relu(x)


    class OtherBase:
        def act(self, x):
            return torch.sigmoid(x)


    class Block(Base):
        label = "block"

        def run(self, x):
            return self.act(x) * SCALE + helper(x) + len(Block.label)


    class OtherBlock(Block):
        def run(self, x):
            return self.act(x) - 1.0


    class Holder:
        pass


    holder = Holder()
    holder.block = Block()
    holder.factor = 1.5


    def entry(x):
        out = holder.block.run(x) * holder.factor + REGISTRY["shift"]
        return out + len(helper.__name__)
    """
)

_names = itertools.count()


@pytest.fixture
def module(tmp_path):
    """A fresh module of SOURCE (its own classes and globals: tests do not share them)."""
    name = f"stable_reads_case_{next(_names)}"
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    spec.loader.exec_module(loaded)
    yield loaded
    sys.modules.pop(name, None)


def _stable_reads(compiled) -> list:
    runner = compiled._ember_compiled
    found = []
    for entry in runner.entries:
        namespace = entry.guards.check.__globals__
        found += [value for name, value in namespace.items() if name.startswith("___stable_reads")]
    return found


def _compiled(module):
    def f(x):
        return module.entry(x)

    compiled = ember.compile(f, backend="eager")
    x = torch.randn(4)
    for _ in range(4):  # compile, snapshot, trusted snapshot, fast
        assert_close(compiled(x), f(x))
    states = _stable_reads(compiled)
    assert states and all(state.unchanged() for state in states), "the fast path is not taken"
    return f, compiled, x


def _matches_eager(f, compiled, x) -> None:
    for _ in range(3):
        assert_close(compiled(x), f(x))


def test_stable_reads_see_a_rebound_module_global(module):
    f, compiled, x = _compiled(module)
    module.SCALE = 5.0
    _matches_eager(f, compiled, x)


def test_stable_reads_see_a_registry_item_set(module):
    f, compiled, x = _compiled(module)
    module.REGISTRY["shift"] = -4.0
    _matches_eager(f, compiled, x)


def test_stable_reads_see_a_class_attribute_set(module):
    f, compiled, x = _compiled(module)
    module.Block.label = "a longer label"
    _matches_eager(f, compiled, x)


def test_stable_reads_see_a_method_set_on_a_base_class(module):
    f, compiled, x = _compiled(module)
    module.Base.act = lambda self, x: torch.tanh(x) * 3
    _matches_eager(f, compiled, x)


def test_stable_reads_see_a_method_set_on_the_class(module):
    f, compiled, x = _compiled(module)
    module.Block.act = lambda self, x: x * 7
    _matches_eager(f, compiled, x)


def test_stable_reads_see_bases_assigned(module):
    f, compiled, x = _compiled(module)
    module.Block.__bases__ = (module.OtherBase,)
    _matches_eager(f, compiled, x)


def test_stable_reads_see_defaults_set(module):
    f, compiled, x = _compiled(module)
    module.helper.__defaults__ = (10.0,)
    _matches_eager(f, compiled, x)


def test_stable_reads_see_code_replaced(module):
    f, compiled, x = _compiled(module)
    module.helper.__code__ = _helper_code()
    _matches_eager(f, compiled, x)


def _helper_code():
    """A code object for `helper` with the same free variable (`k`) and another body."""

    def make(k):
        def helper(x, bias=1.0):
            return x * k * 4 - bias

        return helper

    return make(0.0).__code__


def test_stable_reads_see_a_function_renamed(module):
    f, compiled, x = _compiled(module)
    module.helper.__name__ = "a_much_longer_name"
    _matches_eager(f, compiled, x)


def test_stable_reads_see_a_closure_cell_assigned(module):
    f, compiled, x = _compiled(module)
    module.helper.__closure__[0].cell_contents = -6.0
    _matches_eager(f, compiled, x)


def test_stable_reads_see_an_instance_attribute_set(module):
    f, compiled, x = _compiled(module)
    module.holder.factor = -2.5
    _matches_eager(f, compiled, x)


def test_stable_reads_see_an_instance_dict_replaced(module):
    f, compiled, x = _compiled(module)
    module.holder.__dict__ = {"block": module.holder.block, "factor": 9.0}
    _matches_eager(f, compiled, x)


def test_stable_reads_see_a_class_swapped(module):
    f, compiled, x = _compiled(module)
    module.holder.block.__class__ = module.OtherBlock
    _matches_eager(f, compiled, x)


def test_stable_reads_see_a_method_patched_on_the_instance(module):
    f, compiled, x = _compiled(module)
    module.holder.block.run = lambda x: x * 11
    _matches_eager(f, compiled, x)


def test_stable_reads_see_a_module_attribute_rebound(module):
    f, compiled, x = _compiled(module)
    module.holder = module.Holder()
    module.holder.block = module.Block()
    module.holder.factor = 0.25
    _matches_eager(f, compiled, x)


def test_stable_reads_return_to_the_fast_path_after_a_change(module):
    f, compiled, x = _compiled(module)
    module.SCALE = 4.0
    _matches_eager(f, compiled, x)
    _matches_eager(f, compiled, x)
    assert any(state.unchanged() for state in _stable_reads(compiled))


class Settings:
    def __init__(self) -> None:
        self.scale = 2.0
        self.enabled = True


class ScaledSettings(Settings):
    @property
    def scale(self):
        return -3.0

    @scale.setter
    def scale(self, value):
        pass


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.settings = Settings()

    def forward(self, x):
        y = self.fc(x)
        return y * self.settings.scale if self.settings.enabled else y - 1


def _compiled_net():
    torch.manual_seed(0)
    model = Net().eval()

    def f(model, x):
        return model(x)

    compiled = ember.compile(f, backend="eager")
    x = torch.randn(2, 4)
    for _ in range(4):
        assert_close(compiled(model, x), f(model, x))
    return model, f, compiled, x


def _net_matches_eager(model, f, compiled, x) -> None:
    for _ in range(3):
        assert_close(compiled(model, x), f(model, x))


def test_stable_reads_from_a_local_see_an_attribute_of_its_object_set():
    model, f, compiled, x = _compiled_net()
    model.settings.scale = 5.0
    _net_matches_eager(model, f, compiled, x)
    model.settings.enabled = False
    _net_matches_eager(model, f, compiled, x)


def test_stable_reads_from_a_local_see_its_object_replaced():
    model, f, compiled, x = _compiled_net()
    model.settings = Settings()
    model.settings.scale = -1.0
    _net_matches_eager(model, f, compiled, x)


def test_stable_reads_from_a_local_see_a_class_swapped_under_it():
    model, f, compiled, x = _compiled_net()
    model.settings.__class__ = ScaledSettings
    _net_matches_eager(model, f, compiled, x)


def test_stable_reads_from_a_local_see_another_object_passed():
    model, f, compiled, x = _compiled_net()
    torch.manual_seed(1)
    other = Net().eval()
    other.settings.scale = 7.0
    _net_matches_eager(other, f, compiled, x)
    _net_matches_eager(model, f, compiled, x)


class RemappedSettings:
    """Settings with their own `__getattribute__` (names remapped, as transformers'
    configs do): capture reads them past it, `object.__getattribute__(s, '__dict__')`."""

    attribute_map = {"factor": "scale"}

    def __init__(self) -> None:
        self.scale = 2.0
        self.enabled = True

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class RemappedNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.settings = RemappedSettings()

    def forward(self, x):
        y = self.fc(x)
        return y * self.settings.factor if self.settings.enabled else y - 1


def _compiled_remapped():
    torch.manual_seed(0)
    model = RemappedNet().eval()

    def f(model, x):
        return model(x)

    compiled = ember.compile(f, backend="eager")
    x = torch.randn(2, 4)
    for _ in range(4):
        assert_close(compiled(model, x), f(model, x))
    states = _stable_reads(compiled)
    assert states and all(state.unchanged() for state in states), "the fast path is not taken"
    return model, f, compiled, x


def test_reads_past_getattribute_are_left_out_of_the_fast_path():
    model, f, compiled, x = _compiled_remapped()
    (entry,) = compiled._ember_compiled.entries
    fast = entry.guards.source[entry.guards.source.index("def guard_check(") :]
    for name in ("scale", "enabled"):  # read past __getattribute__ by the full check only
        assert f"__getattribute__(model_settings, '{name}')" not in fast


@pytest.mark.parametrize(
    "change",
    [
        lambda s: setattr(s, "scale", 5.0),
        lambda s: setattr(s, "enabled", False),
        lambda s: object.__setattr__(s, "__dict__", {"scale": -1.0, "enabled": True}),
        lambda s: object.__setattr__(s, "__class__", type("Other", (RemappedSettings,), {})),
        lambda s: type(s).attribute_map.update(factor="enabled"),
    ],
    ids=["attribute", "flag", "dict replaced", "class swapped", "map item set"],
)
def test_reads_past_getattribute_see_each_change(change):
    model, f, compiled, x = _compiled_remapped()
    try:
        change(model.settings)
        _net_matches_eager(model, f, compiled, x)
    finally:
        RemappedSettings.attribute_map = {"factor": "scale"}


def _passed_on(fn):
    """A decorator passing its arguments on (`*args`), as transformers' deprecation one."""

    def wrapped(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapped


def test_stable_reads_through_a_model_passed_on_by_args_see_each_change():
    torch.manual_seed(0)
    model = Net().eval()
    f = _passed_on(lambda model, x: model(x))
    compiled = ember.compile(f, backend="eager")
    x = torch.randn(2, 4)
    for _ in range(4):
        assert_close(compiled(model, x), f(model, x))
    states = _stable_reads(compiled)
    assert states and all(state.unchanged() for state in states), "the fast path is not taken"
    model.settings.scale = 5.0
    _net_matches_eager(model, f, compiled, x)
    other = Net().eval()
    other.settings.enabled = False
    _net_matches_eager(other, f, compiled, x)
    _net_matches_eager(model, f, compiled, x)
