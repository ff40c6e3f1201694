"""Submodules of the compiled module replaced between calls, against torch.compile.

As torch.compile (inline_inbuilt_nn_modules): the compiled module itself is guarded by
identity, the modules below it on their structure (class, what capture read of each:
attributes, training flag, hooks, `_modules` keys, parameters' and buffers' metadata),
their parameters and buffers graph inputs read at call time. A submodule (nested, in a
ModuleList / ModuleDict / Sequential) or a parameter replaced by one of the same class
and structure reuses the entry; a class, shape, training flag read by the code, an
instance `forward` or hooks that differ recompile. Small models are checked inline,
models of eight modules or more behind their module tree (guards' module_tree.py),
whose fast path holds the submodules seen last and checks them in full after a write.

PROGRAMS: values and state equal eager's, graphs and ops equal torch.compile's
(programcheck.check_program_like_torch). HOOK_PROGRAMS: a hook registered on a
submodule after the first call, where torch.compile reuses its graph and misses the
hook (its values differ from eager's); ember recompiles (eager's values, 2 graphs); and
a layer set to another layer of the model (its parameters then alias: ember's guard
that they stay apart recompiles, torch.compile's graph is reused).
"""

from __future__ import annotations

import pytest
import torch
from programcheck import check_program_like_eager, check_program_like_torch, program_table
from torch import nn

PROGRAMS, program = program_table()
HOOK_PROGRAMS, hook_program = program_table()


def x44():
    return (torch.linspace(-2, 2, 16).reshape(4, 4),)


class Block(nn.Module):
    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=bias)

    def forward(self, x):
        return self.lin(x).relu()


class OtherBlock(Block):
    def forward(self, x):
        return self.lin(x).tanh()


class Scaled(nn.Module):
    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class Gated(nn.Module):
    """Reads its training flag."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return y + 1 if self.training else y - 1


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x) * 2


class Small(nn.Module):
    """Five modules: its guards are checked inline."""

    def __init__(self) -> None:
        super().__init__()
        self.first = Block()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(self.first(x))


class Deep(nn.Module):
    """Over twenty modules: its guards are behind a module tree."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.gate = Gated()
        self.layers = nn.ModuleList([Block() for _ in range(4)])
        self.heads = nn.ModuleDict({"a": Block(), "b": Inner()})
        self.tail = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Inner())

    def forward(self, x):
        x = self.gate(self.block(x))
        for layer in self.layers:
            x = layer(x)
        x = self.heads["a"](x) + self.heads["b"](x)
        return self.tail(x)


def seeded(cls, *args):
    torch.manual_seed(0)
    return cls(*args)


def fresh(cls, *args):
    """A module of new weights (another seed): its values tell it from the old one."""
    torch.manual_seed(7)
    return cls(*args)


def swapped(model_cls, change, calls=3, at=(1,)):
    """A program calling a `model_cls` compiled, `change(model, i)` before call i in `at`."""
    model = seeded(model_cls)

    def between(i, fn):
        if i in at:
            change(model, i)

    return dict(fn=model, args=x44, between=between, calls=calls)


# ----- replaced by a module of the same class and structure: one graph -------------------
@program
def small_submodule_replaced():
    return swapped(Small, lambda m, i: setattr(m, "first", fresh(Block)))


@program
def small_nested_submodule_replaced():
    return swapped(Small, lambda m, i: setattr(m.inner, "block", fresh(Block)))


@program
def small_leaf_linear_replaced():
    return swapped(Small, lambda m, i: setattr(m.inner.block, "lin", fresh(nn.Linear, 4, 4)))


@program
def small_submodule_replaced_every_call():
    return swapped(Small, lambda m, i: setattr(m, "first", fresh(Block)), calls=4, at=(1, 2, 3))


@program
def small_submodules_exchanged():
    def exchange(m, i):
        m.first, m.inner.block = m.inner.block, m.first

    return swapped(Small, exchange)


@program
def small_submodule_replaced_then_restored():
    kept = {}

    def change(m, i):
        if i == 1:
            kept["old"] = m.first
            m.first = fresh(Block)
        else:
            m.first = kept["old"]

    return swapped(Small, change, calls=3, at=(1, 2))


@program
def small_parameter_replaced():
    def change(m, i):
        m.first.lin.weight = nn.Parameter(torch.full((4, 4), 0.1))

    return swapped(Small, change)


@program
def small_submodule_deleted_then_set_again():
    def change(m, i):
        del m.first
        m.first = fresh(Block)

    return swapped(Small, change)


@program
def deep_submodule_replaced():
    return swapped(Deep, lambda m, i: setattr(m, "block", fresh(Block)))


@program
def deep_module_list_entry_replaced():
    return swapped(Deep, lambda m, i: m.layers.__setitem__(2, fresh(Block)))


@program
def deep_module_dict_entry_replaced():
    return swapped(Deep, lambda m, i: m.heads.__setitem__("b", fresh(Inner)))


@program
def deep_sequential_entry_replaced():
    return swapped(Deep, lambda m, i: m.tail.__setitem__(0, fresh(nn.Linear, 4, 4)))


@program
def deep_nested_in_a_dict_entry_replaced():
    return swapped(Deep, lambda m, i: setattr(m.heads["b"].block, "lin", fresh(nn.Linear, 4, 4)))


@program
def deep_parameter_replaced():
    def change(m, i):
        m.layers[1].lin.weight = nn.Parameter(torch.full((4, 4), 0.2))

    return swapped(Deep, change)


@program
def deep_buffer_set_to_a_new_tensor():
    class WithBuffer(Deep):
        def __init__(self) -> None:
            super().__init__()
            self.block.register_buffer("shift", torch.ones(4))

        def forward(self, x):
            return super().forward(x) + self.block.shift

    def change(m, i):
        m.block.shift = torch.full((4,), 3.0)

    return swapped(WithBuffer, change)


@program
def deep_every_layer_replaced_each_call():
    def change(m, i):
        for index in range(len(m.layers)):
            m.layers[index] = fresh(Block)

    return swapped(Deep, change, calls=4, at=(1, 2, 3))


@program
def deep_submodule_not_reading_training_in_eval():
    return swapped(Deep, lambda m, i: m.block.eval())


@program
def deep_whole_model_in_eval():
    return swapped(Deep, lambda m, i: m.eval())


@program
def bound_forward_submodule_replaced():
    model = seeded(Small)

    def between(i, fn):
        if i == 1:
            model.first = fresh(Block)

    return dict(fn=model.forward, args=x44, between=between, calls=3)


# ----- what differs recompiles: two graphs ----------------------------------------------
@program
def small_submodule_of_another_class():
    return swapped(Small, lambda m, i: setattr(m, "first", fresh(OtherBlock)))


@program
def small_submodule_of_another_shape():
    return swapped(Small, lambda m, i: setattr(m, "first", fresh(Block, False)))


@program
def small_submodule_attribute_differs():
    class WithScale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = Scaled(2)

        def forward(self, x):
            return self.scale(x) + 1

    return swapped(WithScale, lambda m, i: setattr(m, "scale", Scaled(3)))


@program
def small_submodule_with_an_instance_forward():
    def change(m, i):
        block = fresh(Block)
        block.forward = lambda x: x * 100
        m.first = block

    return swapped(Small, change)


@program
def small_parameter_frozen():
    def change(m, i):
        m.first.lin.weight = nn.Parameter(torch.full((4, 4), 0.1), requires_grad=False)

    return swapped(Small, change)


@program
def deep_gate_in_eval():
    return swapped(Deep, lambda m, i: m.gate.eval())


@program
def deep_gate_replaced_by_one_in_eval():
    return swapped(Deep, lambda m, i: setattr(m, "gate", fresh(Gated).eval()))


@program
def deep_module_list_appended():
    return swapped(Deep, lambda m, i: m.layers.append(fresh(Block)))


@program
def deep_layer_of_another_class():
    return swapped(Deep, lambda m, i: m.layers.__setitem__(1, fresh(OtherBlock)))


@program
def deep_parameter_of_another_shape():
    class Wide(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.deep = Deep()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(self.deep(x))

    def change(m, i):
        m.proj = fresh(nn.Linear, 4, 4)
        m.proj.weight = nn.Parameter(torch.full((4, 1), 0.5).expand(4, 4).contiguous().t())

    return swapped(Wide, change)


# ----- a hook on a submodule added after the first call ---------------------------------
@hook_program
def small_forward_hook_added_to_a_submodule():
    return swapped(Small, lambda m, i: m.first.register_forward_hook(lambda mod, a, o: o * 10))


@hook_program
def deep_forward_pre_hook_added_to_a_layer():
    def change(m, i):
        m.layers[2].register_forward_pre_hook(lambda mod, a: (a[0] + 5,))

    return swapped(Deep, change)


@hook_program
def deep_replacement_hooked_before_it_is_set():
    def change(m, i):
        block = fresh(Block)
        block.register_forward_hook(lambda mod, a, o: o - 3)
        m.block = block

    return swapped(Deep, change)


# ----- one module at two places where two were: ember recompiles --------------------------
# Its parameters, graph inputs taken apart, are guarded to stay different objects (a
# graph writing one in place and reading the other computes otherwise); torch.compile
# reuses its graph (1). Eager's values either way.
@hook_program
def deep_layer_set_to_another_layer():
    return swapped(Deep, lambda m, i: m.layers.__setitem__(3, m.layers[0]))


# ----- tests ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_submodule_program_like_torch(name):
    check_program_like_torch(PROGRAMS[name])


@pytest.mark.parametrize("name", sorted(HOOK_PROGRAMS))
def test_hook_or_aliasing_added_to_a_submodule_recompiles(name):
    counter = check_program_like_eager(HOOK_PROGRAMS[name])
    assert counter.frame_count == 2


def test_tied_weights_untied_by_a_replaced_submodule():
    # the head's weight is the embedding's: one graph input for both; a head of its
    # own (the same class and shapes) must not be read through the embedding's weight
    class TiedModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(4, 4, bias=False)
            self.head = nn.Linear(4, 4, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, x):
            return self.head(self.embed(x))

    def program():
        return swapped(TiedModel, lambda m, i: setattr(m, "head", fresh(nn.Linear, 4, 4, False)))

    check_program_like_eager(program)
