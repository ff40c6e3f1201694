"""Modules of one class share one compiled frame, guarded on structure, not identity.

A frame run eagerly (a break inside its loop) calls each layer's forward as a
compiled frame of its own; as under torch.compile, every module of the class
reuses that frame's entries: the module is an argument guarded on its class and
on what capture read of it (attributes, training flag, hooks, parameters'
metadata), its parameters and buffers graph inputs. What differs between the
modules (a shape, a flag, an attribute) recompiles; identity comparisons still
guard identity.
"""

from __future__ import annotations

import itertools

import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend


class Layer(torch.nn.Module):
    def __init__(self, width_in: int = 4, width_out: int = 4) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(width_in, width_out)
        self.scale = 2.0

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale


class Layers(torch.nn.Module):
    """A loop over layers with a break in its body: the frame runs eagerly."""

    def __init__(self, layers: list[torch.nn.Module]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            torch._dynamo.graph_break()
        return x


def _forward_parts(compiled: dynamo_capture.CompiledCallable, name: str) -> list:
    return [part for part in compiled.parts if part.frame.name == name]


def test_layers_of_one_class_share_one_compiled_forward():
    torch.manual_seed(0)
    model = Layers([Layer() for _ in range(12)])
    check_like_torch(model, lambda: (torch.randn(2, 4),), calls=3)
    compiled = dynamo_capture.optimize(model, backend=CountingBackend())
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    (part,) = _forward_parts(compiled, "Layer.forward")
    # the first layer's input does not require grad, the others' do: two entries
    assert len(part.entries) == 2


def test_layers_with_other_weight_shapes_recompile_for_their_shapes():
    torch.manual_seed(0)
    model = Layers([Layer(4, 8), Layer(8, 8), Layer(8, 4), Layer(4, 8)])
    check_like_torch(model, lambda: (torch.randn(2, 4),), calls=2)


def test_layer_attribute_read_by_capture_guards_its_value():
    torch.manual_seed(0)
    layers = [Layer() for _ in range(5)]
    layers[2].scale = 3.0  # a float attribute: symbolic after it changes, as torch
    model = Layers(layers)
    check_like_torch(model, lambda: (torch.randn(2, 4),), calls=2)


class Flagged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.mode = "add"

    def forward(self, x):
        if self.training:
            x = x + 1
        if self.mode == "add":
            return self.lin(x) + 1
        return self.lin(x) * 3


def test_layer_training_flag_and_string_attribute_recompile_per_value():
    torch.manual_seed(0)
    layers = [Flagged() for _ in range(6)]
    layers[3].eval()
    layers[4].mode = "mul"
    model = Layers(layers)
    check_like_torch(model, lambda: (torch.randn(2, 4),), calls=2)


def test_layer_with_a_forward_hook_runs_its_hook():
    torch.manual_seed(0)
    layers = [Layer() for _ in range(4)]
    layers[1].register_forward_hook(lambda module, args, out: out * 10)
    model = Layers(layers)
    compiled = dynamo_capture.optimize(model, backend=CountingBackend())
    for _ in range(2):
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x), model(x))


FIRST: list[torch.nn.Module] = []


class IdentitySensitive(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        if self is FIRST[0]:
            return self.lin(x) + 100
        return self.lin(x)


def test_identity_comparison_of_a_shared_module_guards_its_identity():
    torch.manual_seed(0)
    layers = [IdentitySensitive() for _ in range(4)]
    FIRST[:] = [layers[0]]
    model = Layers(layers)
    compiled = dynamo_capture.optimize(model, backend=CountingBackend())
    for _ in range(2):
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x), model(x))


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.calls = self.calls + 1
        self.seen.add_(1)
        return self.lin(x), self.lin


def test_writes_to_a_shared_module_reach_the_module_called():
    torch.manual_seed(0)
    layers = [Counter() for _ in range(3)]

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(layers)

        def forward(self, x):
            found = []
            for layer in self.layers:
                x, lin = layer(x)
                found.append(lin)
                torch._dynamo.graph_break()
            return x, found

    model = Outer()
    compiled = dynamo_capture.optimize(model, backend=CountingBackend())
    x = torch.randn(2, 4)
    got, found = compiled(x)
    assert [layer.calls for layer in layers] == [1, 1, 1]
    assert [float(layer.seen) for layer in layers] == [1.0, 1.0, 1.0]
    assert all(lin is layer.lin for lin, layer in zip(found, layers, strict=True))
    for layer in layers:
        layer.calls = 0
        layer.seen.zero_()
    expected, _ = model(x)
    torch.testing.assert_close(got, expected)


def test_float_attribute_of_a_module_becomes_symbolic_after_it_changes():
    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.scale = 2.0

        def forward(self, x):
            return self.lin(x) * self.scale

    torch.manual_seed(0)
    model = Scaled()
    scales = itertools.cycle([2.0, 3.0, 4.0, 5.0])  # each side calls it 4 times

    def make_args():
        model.scale = next(scales)
        return (torch.randn(2, 4),)

    counter = check_like_torch(model, make_args, calls=4)
    assert counter.frame_count == 2


def test_resume_part_takes_only_the_locals_it_reads():
    def helper(t):
        print("helper")
        return t * 2

    def f(x, unused):
        h = x + 1
        h = helper(h)
        return h.tanh()

    flags = itertools.cycle([False, True])

    def make_args():
        return torch.randn(3), torch.randn(3, requires_grad=next(flags))

    check_like_torch(f, make_args, calls=4)


def test_zero_argument_super_after_a_break_keeps_the_first_argument():
    # super() reads the frame's first argument without naming it: a resumed part must
    # receive it even though no instruction loads it by name
    class Base:
        def step(self, x):
            return x * 2

    class Child(Base):
        def step(self, x):
            y = x + 1
            print("", end="")  # a graph break
            return super().step(y) - 1

    obj = Child()
    x = torch.randn(4)
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(obj.step, backend=backend)
    torch.testing.assert_close(compiled(x), obj.step(x))
    assert len(backend.graphs) == 2
