"""What a compiled frame read is guarded: changing it after compiling recompiles.

Each test compiles, calls once, changes something the frame read (a method, a
module function, a global, a builtin, a tensor flag) and checks that the next
call gives eager's result rather than the stale compiled one.

| footgun                                          | without the guard        |
| ------------------------------------------------ | ------------------------ |
| `module.forward` replaced (instance or class)    | silent wrong result      |
| a method of an object's class replaced           | silent wrong result      |
| `F.relu` (a torch function) patched              | silent wrong result      |
| a builtin shadowed by a global                   | silent wrong result      |
| an inference tensor after a normal one           | silent wrong result      |
| a non-leaf tensor after a leaf (`x.is_leaf`)     | silent wrong result      |
"""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch.testing import assert_close

import ember

BACKENDS = ["eager", "aot_eager"]


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.scale = 2.0

    def forward(self, x):
        return self.lin(x) * self.scale


class ScaledWithBreak(Scaled):
    def forward(self, x):
        y = self.lin(x)
        print("", end="")  # a graph break: forward is split into compiled parts
        return y * self.scale


def _shift(self, x):
    print("", end="")  # breaks too
    return x + 100


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_forward_replaced_on_instance_recompiles(backend):
    model = Scaled()
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(2, 3)
    compiled(x)
    model.forward = lambda x: x + 100
    assert_close(compiled(x), x + 100)
    del model.forward
    assert_close(compiled(x), model(x))


def test_module_forward_replaced_on_class_recompiles():
    class Local(Scaled):
        pass

    model = Local()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(2, 3)
    compiled(x)
    Local.forward = lambda self, x: x - 100
    assert_close(compiled(x), x - 100)


@pytest.mark.parametrize("where", ["instance", "class"])
def test_module_forward_replaced_after_graph_break_recompiles(where):
    class Local(ScaledWithBreak):
        pass

    model = Local()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(2, 3)
    assert_close(compiled(x), model(x))
    if where == "instance":
        model.forward = types.MethodType(_shift, model)
    else:
        Local.forward = _shift
    assert_close(compiled(x), x + 100)


def test_submodule_method_replaced_recompiles():
    class Inner(torch.nn.Module):
        def forward(self, x):
            return x * 3

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x) + 1

    model = Outer()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(4)
    compiled(x)
    model.inner.forward = lambda x: x * 5
    assert_close(compiled(x), x * 5 + 1)
    Inner.forward = lambda self, x: x * 7
    del model.inner.forward
    assert_close(compiled(x), x * 7 + 1)


def test_module_helper_method_replaced_recompiles():
    class Model(torch.nn.Module):
        def helper(self, x):
            return x + 1

        def forward(self, x):
            return self.helper(x) * 2

    model = Model()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(4)
    compiled(x)
    model.helper = lambda x: x - 1  # on the instance
    assert_close(compiled(x), (x - 1) * 2)
    del model.helper
    Model.helper = lambda self, x: x + 10  # on the class
    assert_close(compiled(x), (x + 10) * 2)


def test_module_attributes_changed_after_compile_recompile():
    model = Scaled()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(2, 3)
    compiled(x)
    model.lin = torch.nn.Linear(3, 3)  # a submodule swapped
    assert_close(compiled(x), model(x))
    model.scale = 3.0  # a plain attribute the frame read
    assert_close(compiled(x), model(x))
    handle = model.register_forward_hook(lambda module, args, out: out + 1)
    assert_close(compiled(x), model(x))
    handle.remove()
    assert_close(compiled(x), model(x))
    model.eval()
    assert_close(compiled(x), model(x))


def test_object_method_replaced_recompiles():
    class Adder:
        def go(self, x):
            return x + 1

    adder = Adder()

    def fn(x):
        return adder.go(x)

    compiled = ember.compile(fn, backend="eager")
    x = torch.randn(4)
    compiled(x)
    Adder.go = lambda self, x: x + 50
    assert_close(compiled(x), x + 50)
    adder.go = lambda x: x + 70
    assert_close(compiled(x), x + 70)


def test_class_constant_of_object_made_in_frame_recompiles():
    class Config:
        factor = 2

        def __init__(self) -> None:
            self.bias = 1

    def fn(x):
        config = Config()
        return x * config.factor + config.bias

    compiled = ember.compile(fn, backend="eager")
    x = torch.randn(4)
    compiled(x)
    Config.factor = 5
    assert_close(compiled(x), x * 5 + 1)


def test_classmethod_and_staticmethod_replaced_recompile():
    class Ops:
        @staticmethod
        def twice(x):
            return x * 2

        @classmethod
        def thrice(cls, x):
            return x * 3

    def fn(x):
        return Ops.twice(x) + Ops.thrice(x)

    compiled = ember.compile(fn, backend="eager")
    x = torch.randn(4)
    compiled(x)
    Ops.twice = staticmethod(lambda x: x * 20)
    assert_close(compiled(x), x * 23)
    Ops.thrice = classmethod(lambda cls, x: x * 30)
    assert_close(compiled(x), x * 50)


def test_torch_function_patched_recompiles(monkeypatch):
    def fn(x):
        return F.relu(x) + 1

    compiled = ember.compile(fn, backend="eager")
    x = torch.randn(8)
    compiled(x)
    monkeypatch.setattr(F, "relu", lambda x: x * 0 + 1000)
    assert_close(compiled(x), fn(x))


def _helper(x):
    return x + 1


def _uses_helper(x):
    return _helper(x) * 2


def test_global_function_rebound_recompiles(monkeypatch):
    compiled = ember.compile(_uses_helper, backend="eager")
    x = torch.randn(4)
    compiled(x)
    monkeypatch.setitem(globals(), "_helper", lambda x: x - 1)
    assert_close(compiled(x), (x - 1) * 2)


def _uses_builtin(x):
    return x * abs(-2)


def test_builtin_shadowed_by_global_recompiles(monkeypatch):
    compiled = ember.compile(_uses_builtin, backend="eager")
    x = torch.randn(4)
    compiled(x)
    monkeypatch.setitem(globals(), "abs", lambda v: 10)
    assert_close(compiled(x), x * 10)
    monkeypatch.delitem(globals(), "abs")
    assert_close(compiled(x), x * 2)


def test_closure_cell_function_changed_recompiles():
    def make():
        fn = lambda t: t + 1  # noqa: E731

        def outer(x):
            return fn(x) * 2

        def set_fn(new):
            nonlocal fn
            fn = new

        return outer, set_fn

    outer, set_fn = make()
    compiled = ember.compile(outer, backend="eager")
    x = torch.randn(4)
    compiled(x)
    set_fn(lambda t: t + 5)
    assert_close(compiled(x), (x + 5) * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_tensor_after_normal_tensor_recompiles(backend):
    def fn(x):
        return x * 2 + x.is_inference()

    compiled = ember.compile(fn, backend=backend)
    x = torch.randn(3)
    assert_close(compiled(x), fn(x))
    with torch.inference_mode():
        inference = torch.randn(3)
    assert_close(compiled(inference), fn(inference))
    assert_close(compiled(x), fn(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_called_under_inference_mode_and_not_matches_eager(backend):
    model = torch.nn.Linear(3, 3)
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(2, 3)
    assert_close(compiled(x), model(x))
    with torch.inference_mode():
        inference = torch.randn(2, 3)
        out = compiled(inference)
        assert out.is_inference()
        assert_close(out, model(inference))
    out = compiled(x)
    assert out.requires_grad and not out.is_inference()
    assert_close(out, model(x))


def test_is_leaf_of_input_is_guarded():
    def fn(x):
        return x * (2.0 if x.is_leaf else 3.0)

    compiled = ember.compile(fn, backend="eager")
    leaf = torch.randn(3, requires_grad=True)
    assert_close(compiled(leaf), fn(leaf))
    non_leaf = leaf * 1
    assert_close(compiled(non_leaf), fn(non_leaf))
    assert_close(compiled(leaf), fn(leaf))


def test_requires_grad_of_input_is_guarded():
    def fn(x):
        return x * (2.0 if x.requires_grad else 3.0)

    compiled = ember.compile(fn, backend="eager")
    x = torch.randn(3)
    assert_close(compiled(x), fn(x))
    y = torch.randn(3, requires_grad=True)
    assert_close(compiled(y), fn(y))


def test_base_class_method_reached_through_super_replaced_recompiles():
    class Base(torch.nn.Module):
        def forward(self, x):
            return x + 1

    class Derived(Base):
        def forward(self, x):
            return super().forward(x) * 2

    model = Derived()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(4)
    compiled(x)
    Base.forward = lambda self, x: x + 10
    assert_close(compiled(x), (x + 10) * 2)


def test_forward_pre_hook_added_beside_a_forward_hook_recompiles():
    model = torch.nn.Linear(3, 3)
    model.register_forward_hook(lambda module, args, out: out + 1)
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(2, 3)
    assert_close(compiled(x), model(x))
    model.register_forward_pre_hook(lambda module, args: (args[0] * 0,))
    assert_close(compiled(x), model(x))


def test_backward_hook_added_after_compile_runs():
    inner = torch.nn.Linear(3, 3)

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x).sum()

    compiled = ember.compile(Outer(), backend="eager")
    x = torch.randn(2, 3, requires_grad=True)
    compiled(x).backward()
    calls = []
    inner.register_full_backward_hook(lambda module, grad_in, grad_out: calls.append(1))
    compiled(x).backward()
    assert calls == [1]


def test_call_and_init_of_user_classes_replaced_recompile():
    class Scale:
        def __init__(self, factor):
            self.factor = factor

        def __call__(self, x):
            return x * self.factor

    outside = Scale(2)

    def fn(x):
        return outside(x) + Scale(3)(x)

    compiled = ember.compile(fn, backend="eager")
    x = torch.randn(4)
    assert_close(compiled(x), fn(x))
    Scale.__call__ = lambda self, x: x + self.factor
    assert_close(compiled(x), fn(x))

    def init(self, factor):
        self.factor = factor * 10

    Scale.__init__ = init
    assert_close(compiled(x), fn(x))


def test_environment_variable_read_changed_recompiles(monkeypatch):
    import os

    monkeypatch.setenv("EMBER_TEST_SCALE_FLAG", "1")

    def fn(x):
        return x * 2 if os.environ.get("EMBER_TEST_SCALE_FLAG") == "1" else x * 3

    compiled = ember.compile(fn, backend="eager")
    x = torch.randn(4)
    assert_close(compiled(x), x * 2)
    monkeypatch.setenv("EMBER_TEST_SCALE_FLAG", "0")
    assert_close(compiled(x), x * 3)
    monkeypatch.delenv("EMBER_TEST_SCALE_FLAG")
    assert_close(compiled(x), x * 3)


class _Table:
    ENTRIES = {"scale": 2}
    SIZES = [1, 2]


def test_class_level_container_read_through_new_instance_recompiles():
    def fn(x):
        table = _Table()
        return x * table.ENTRIES["scale"] + sum(table.SIZES)

    compiled = ember.compile(fn, backend="eager")
    x = torch.randn(4)
    assert_close(compiled(x), fn(x))
    _Table.ENTRIES["scale"] = 5
    assert_close(compiled(x), fn(x))
    _Table.SIZES.append(7)
    assert_close(compiled(x), fn(x))


def test_class_container_read_through_type_of_object_recompiles():
    def fn(x, table):
        return x * type(table).ENTRIES["scale"]

    compiled = ember.compile(fn, backend="eager")
    x = torch.randn(4)
    table = _Table()
    assert_close(compiled(x, table), fn(x, table))
    _Table.ENTRIES["scale"] = 11
    assert_close(compiled(x, table), fn(x, table))


_METHOD_DEFAULTS = {"scale": 2}


class _WithDefaultArgument(torch.nn.Module):
    def helper(self, x, config=_METHOD_DEFAULTS):
        return x * config["scale"]

    def forward(self, x):
        return self.helper(x)


def test_mutable_default_of_a_method_changed_recompiles(monkeypatch):
    model = _WithDefaultArgument()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(4)
    assert_close(compiled(x), model(x))
    monkeypatch.setitem(_METHOD_DEFAULTS, "scale", 7)
    assert_close(compiled(x), x * 7)


class _ForwardWithDefault(torch.nn.Module):
    def forward(self, x, config=_METHOD_DEFAULTS):
        return x * config["scale"]


def test_mutable_default_of_forward_changed_recompiles(monkeypatch):
    model = _ForwardWithDefault()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(4)
    assert_close(compiled(x), model(x))
    monkeypatch.setitem(_METHOD_DEFAULTS, "scale", 9)
    assert_close(compiled(x), x * 9)


def _reloaded_helper(x):
    return x + 1


def _calls_reloaded_helper(x):
    return _reloaded_helper(x) * 2


def test_function_code_replaced_in_place_recompiles(monkeypatch):
    """Autoreload (IPython's %autoreload) swaps a function's __code__ in place."""
    compiled = ember.compile(_calls_reloaded_helper, backend="eager")
    x = torch.randn(4)
    assert_close(compiled(x), (x + 1) * 2)
    monkeypatch.setattr(_reloaded_helper, "__code__", (lambda x: x + 10).__code__)
    assert_close(compiled(x), (x + 10) * 2)


def test_method_code_replaced_in_place_recompiles():
    class Model(torch.nn.Module):
        def helper(self, x):
            return x + 1

        def forward(self, x):
            return self.helper(x) * 2

    model = Model()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(4)
    assert_close(compiled(x), (x + 1) * 2)
    Model.helper.__code__ = (lambda self, x: x + 10).__code__
    assert_close(compiled(x), (x + 10) * 2)
    Model.forward.__code__ = (lambda self, x: self.helper(x) * 3).__code__
    assert_close(compiled(x), (x + 10) * 3)
