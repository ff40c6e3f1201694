"""Modules a compiled function reads are guarded on structure, not identity.

As torch.compile (inline_inbuilt_nn_modules): a module passed as an argument, made per
call by a factory, read from a global, an attribute or a closure, compiles once for
every module of its class and structure; its parameters and buffers are graph inputs
read from the module at call time. What differs (a shape, a flag, an attribute value,
hooks) recompiles. The compiled module itself keeps its identity guard (its submodules
are guarded on structure: tests/test_corpus_compiled_module_submodules.py). Identity
comparisons guard identity; a frame writing an attribute of such a module keeps the
modules it read aliased as they were.
"""

from __future__ import annotations

import itertools

import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend


class Model(torch.nn.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.register_buffer("shift", torch.randn(width))
        self.scale = 2.0

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.scale + self.shift


def _model(seed: int, width: int = 4) -> Model:
    torch.manual_seed(seed)
    return Model(width)


def apply(model, x):
    return model(x) + 1


def test_new_module_argument_each_call_compiles_once():
    seeds = itertools.count()
    counter = check_like_torch(apply, lambda: (_model(next(seeds)), torch.randn(2, 4)), calls=4)
    assert counter.frame_count == 1


def test_two_modules_with_different_weights_alternately_give_each_ones_result():
    first, second = _model(1), _model(2)
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(apply, backend=backend)
    for model in [first, second, first, second, second, first]:
        x = torch.randn(3, 4)
        torch.testing.assert_close(compiled(model, x), apply(model, x))
    assert backend.frame_count == 1
    with torch.no_grad():  # new values in place: read at call time
        first.lin.weight.mul_(3)
        first.shift.zero_()
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(first, x), apply(first, x))
    first.lin.weight = torch.nn.Parameter(torch.randn(4, 4))  # a new parameter object
    torch.testing.assert_close(compiled(first, x), apply(first, x))
    assert backend.frame_count == 1


def test_module_of_another_structure_recompiles():
    models = itertools.cycle([_model(0), _model(1, width=8)])

    def make_args():
        model = next(models)
        return model, torch.randn(2, model.lin.in_features)

    check_like_torch(apply, make_args, calls=4)


def test_attribute_value_and_training_flag_changes_recompile():
    class Flagged(torch.nn.Module):
        def __init__(self, mode: str) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.mode = mode

        def forward(self, x):
            x = self.lin(x)
            if self.training:
                x = x + 1
            return x * 3 if self.mode == "mul" else x - 3

    def make(mode: str, training: bool) -> torch.nn.Module:
        torch.manual_seed(0)
        return Flagged(mode).train(training)

    kinds = itertools.cycle([("mul", True), ("sub", True), ("mul", False), ("mul", True)])
    check_like_torch(apply, lambda: (make(*next(kinds)), torch.randn(2, 4)), calls=4)


def test_forward_hook_added_to_a_new_module_is_run():
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(apply, backend=backend)
    plain, hooked = _model(0), _model(1)
    hooked.register_forward_hook(lambda module, args, out: out * 10)
    for model in [plain, hooked, plain, hooked]:
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(model, x), apply(model, x))
    assert backend.frame_count == 2


def test_module_made_per_call_by_a_factory_and_passed_in():
    seeds = itertools.count()

    def factory() -> torch.nn.Module:
        return _model(next(seeds))

    counter = check_like_torch(apply, lambda: (factory(), torch.randn(2, 4)), calls=4)
    assert counter.frame_count == 1


class Scale(torch.nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


def test_module_built_inside_the_frame_from_constants():
    def build_and_call(x):
        return Scale(3.0)(x) + Scale(0.5)(x)

    check_like_torch(build_and_call, lambda: (torch.randn(2, 4),), calls=3)


GLOBAL_MODEL = _model(0)


def through_global(x):
    return GLOBAL_MODEL(x) * 2


def test_global_module_replaced_by_an_equal_structured_one():
    seeds = itertools.count()

    def make_args():
        global GLOBAL_MODEL
        GLOBAL_MODEL = _model(next(seeds))
        return (torch.randn(2, 4),)

    counter = check_like_torch(through_global, make_args, calls=4)
    assert counter.frame_count == 1


class Holder:
    def __init__(self) -> None:
        self.model = _model(0)


def test_attribute_module_replaced_and_closure_module():
    holder = Holder()
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(lambda x: apply(holder.model, x), backend=backend)
    for seed in range(4):
        holder.model = _model(seed)
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x), apply(holder.model, x))
    assert backend.frame_count == 1

    def make_closure(model):
        def closure(x):
            return model(x) - 1

        return closure

    backend = CountingBackend()
    compiled_closure = dynamo_capture.optimize(make_closure(_model(0)), backend=backend)
    torch.testing.assert_close(compiled_closure(torch.ones(2, 4)), _model(0)(torch.ones(2, 4)) - 1)
    assert backend.frame_count == 1


def test_identity_comparison_guards_identity():
    special = _model(5)

    def pick(model, x):
        if model is special:
            return model(x) + 100
        return model(x)

    models = itertools.cycle([special, _model(1), _model(2), special])
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(pick, backend=backend)
    for _ in range(4):
        model, x = next(models), torch.randn(2, 4)
        torch.testing.assert_close(compiled(model, x), pick(model, x))


def test_frame_writing_a_module_attribute_keeps_aliasing():
    def write_then_read(a, b, x):
        a.scale = 5.0
        return x * b.scale

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(write_then_read, backend=backend)
    x = torch.ones(2)
    for same in [True, False, False, True]:
        first, second = _model(0), _model(1)
        b = first if same else second
        expected = x * 5.0 if same else x * 2.0  # eager: b.scale after a.scale = 5
        torch.testing.assert_close(compiled(first, b, x), expected)
        assert first.scale == 5.0


def test_compiled_module_keeps_its_own_identity_guards():
    model = _model(0)
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(model, backend=backend)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    with torch.no_grad():
        model.lin.weight.add_(1)
    torch.testing.assert_close(compiled(x), model(x))
    assert backend.frame_count == 1


def _sequential() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())


def test_structure_changes_fail_the_guards():
    plain, replaced, swapped, frozen, hooked = (_sequential() for _ in range(5))
    replaced.forward = lambda x: x * 100  # an instance forward
    swapped[1] = torch.nn.Tanh()  # a submodule of another class
    frozen[0].weight.requires_grad_(False)
    hooked[0].register_forward_pre_hook(lambda module, args: (args[0] * 0,))
    compiled = dynamo_capture.optimize(apply, backend=CountingBackend())
    for model in [plain, replaced, swapped, frozen, hooked] * 2:
        x = torch.randn(2, 4)
        got, expected = compiled(model, x), apply(model, x)
        torch.testing.assert_close(got, expected)
        assert got.requires_grad == expected.requires_grad


class Tied(torch.nn.Module):
    def __init__(self, tie: bool) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        if tie:
            self.b.weight = self.a.weight

    def forward(self, x):
        with torch.no_grad():
            self.a.weight.add_(1)  # seen through b's weight only where they are tied
        return self.b(x)


def test_tied_and_untied_weights_of_one_class():
    compiled = dynamo_capture.optimize(apply, backend=CountingBackend())
    for tie in [True, False, True, False]:
        torch.manual_seed(0)
        model = Tied(tie)
        torch.manual_seed(0)
        reference = Tied(tie)
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(model, x), apply(reference, x))


def test_same_module_again_then_changed_sees_each_change():
    # the same module on most calls takes the guards' fast path (stable reads pin it
    # while it comes back); a write to it, or another module, runs the full check
    model = _model(0)
    compiled = dynamo_capture.optimize(apply, backend=CountingBackend())
    x = torch.randn(2, 4)
    for _ in range(4):
        torch.testing.assert_close(compiled(model, x), apply(model, x))
    model.scale = 3.0
    torch.testing.assert_close(compiled(model, x), apply(model, x))
    model.lin = torch.nn.Linear(4, 4)
    torch.testing.assert_close(compiled(model, x), apply(model, x))
    model.lin.register_forward_hook(lambda module, args, out: out + 7)
    torch.testing.assert_close(compiled(model, x), apply(model, x))
    other = _model(1)
    torch.testing.assert_close(compiled(other, x), apply(other, x))
    torch.testing.assert_close(compiled(model, x), apply(model, x))
    model.train(False)
    torch.testing.assert_close(compiled(model, x), apply(model, x))


class Settings:
    def __init__(self) -> None:
        self.scale = 2.0


def test_frame_writing_a_user_object_attribute_keeps_aliasing():
    # a plain object is guarded on its class: the same aliasing holds as for a module
    def write_then_read(a, b, x):
        a.scale = 5.0
        return x * b.scale

    compiled = dynamo_capture.optimize(write_then_read, backend=CountingBackend())
    x = torch.ones(2)
    shared = Settings()
    torch.testing.assert_close(compiled(shared, shared, x), x * 5.0)
    torch.testing.assert_close(compiled(Settings(), Settings(), x), x * 2.0)
    other = Settings()
    torch.testing.assert_close(compiled(other, other, x), x * 5.0)
