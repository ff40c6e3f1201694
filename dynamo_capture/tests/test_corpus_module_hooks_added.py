"""Hooks registered on a compiled module (of a user class) after its first call.

As torch.compile, nn.Module.__call__ then runs eagerly around the module's compiled
frame: each hook is a compiled frame of its own, and the forward is the frame the
first call compiled (2 frames for a call without hooks then one with a hook, not 3).
Each program's results equal eager's, its graph and op counts torch.compile's."""

from __future__ import annotations

import pytest
import torch
from programcheck import check_program_like_torch
from torch.nn.modules.module import register_module_forward_hook

import dynamo_capture


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()


def _args():
    return (torch.randn(2, 4),)


def _program(register, calls=2):
    """A Net whose hooks `register(index, net, handles)` adds (or removes) before call
    `index`."""

    def program():
        handles: list = []
        return {
            "fn": Net(),
            "args": _args,
            "calls": calls,
            "between": lambda index, net: register(index, net, handles),
        }

    program.__name__ = register.__name__
    return program


def forward_hook_after_the_first_call(index, net, handles):
    if index == 1:
        net.register_forward_hook(lambda module, args, out: out * 2)


def pre_hook_after_the_first_call(index, net, handles):
    if index == 1:
        net.register_forward_pre_hook(lambda module, args: (args[0] * 3,))


def pre_hook_with_kwargs_after_the_first_call(index, net, handles):
    if index == 1:
        net.register_forward_pre_hook(lambda module, args, kwargs: None, with_kwargs=True)


def hook_reading_its_module_after_the_first_call(index, net, handles):
    if index == 1:
        net.register_forward_hook(lambda module, args, out: out + module.linear.bias)


def pre_hook_and_hook_after_the_first_call(index, net, handles):
    if index == 1:
        net.register_forward_pre_hook(lambda module, args: (args[0] - 1,))
        net.register_forward_hook(lambda module, args, out: out.sum(0))


def hook_added_then_removed(index, net, handles):
    if index == 1:
        handles.append(net.register_forward_hook(lambda module, args, out: out * 2))
    if index == 2:
        handles.pop().remove()


def second_hook_on_the_third_call(index, net, handles):
    if index == 1:
        net.register_forward_hook(lambda module, args, out: out * 2)
    if index == 2:
        net.register_forward_hook(lambda module, args, out: out - 1)


PROGRAMS = [
    _program(forward_hook_after_the_first_call),
    _program(pre_hook_after_the_first_call),
    _program(pre_hook_with_kwargs_after_the_first_call),
    _program(hook_reading_its_module_after_the_first_call),
    _program(pre_hook_and_hook_after_the_first_call),
    _program(hook_added_then_removed, calls=3),
    _program(second_hook_on_the_third_call, calls=3),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_hook_added_after_the_first_call_reuses_the_forward_frame_like_torch(program):
    check_program_like_torch(program)


class RegistersAHook(torch.nn.Module):
    """Registers a forward hook on itself from its forward, on its first call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x):
        if not self.calls:
            self.register_forward_hook(lambda module, args, out: out - 3)
        self.calls += 1
        return x + 1


def test_hook_registered_by_the_forward_of_a_hooked_module_is_kept():
    def doubled(module, args, out):
        return out * 2

    module, twin = RegistersAHook(), RegistersAHook()
    module.register_forward_hook(doubled)
    twin.register_forward_hook(doubled)
    compiled = dynamo_capture.optimize(module, backend=lambda gm, example_inputs: gm.forward)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), twin(x))
    assert len(module._forward_hooks) == len(twin._forward_hooks) == 2


def test_global_hook_and_own_hook_each_run_once_per_call():
    module, twin = Net(), Net()
    compiled = dynamo_capture.optimize(module, backend=lambda gm, example_inputs: gm.forward)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), twin(x))
    for net in (module, twin):
        net.register_forward_hook(lambda m, args, out: out * 2)
    calls: list[str] = []
    handle = register_module_forward_hook(lambda m, args, out: calls.append(type(m).__name__))
    try:
        expected = twin(x)
        eager_calls, calls[:] = list(calls), []
        for _ in range(2):
            torch.testing.assert_close(compiled(x), expected)
            assert calls == eager_calls
            calls.clear()
    finally:
        handle.remove()
    torch.testing.assert_close(compiled(x), twin(x))
