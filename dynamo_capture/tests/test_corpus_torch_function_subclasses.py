"""Tensor subclasses defining their own `__torch_function__`, and torch function modes
entered in the captured frame: capture runs the override as Python (the subclass's
classmethod, `super().__torch_function__`, torch's default conversion of results back
to the subclass; a mode's `__torch_function__` with its instance state) and records the
operations it reaches.

Each program gives eager's results and torch.compile's graph and op counts (two calls
each, fresh arguments).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torchcheck import check_like_torch, program_registry

PROGRAMS, program = program_registry()


def r(*shape):
    return torch.randn(*shape)


class Passing(torch.Tensor):
    """Hands every call to torch's default handling (results are Passing again)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        return super().__torch_function__(func, types, args, kwargs)

    def doubled(self):
        return self * 2

    @property
    def halved(self):
        return self / 2


class Unwrapping(torch.Tensor):
    """Runs the call with subclass handling off: results are plain tensors."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class AddsOne(torch.Tensor):
    """Changes what additions give: one more, as plain tensors."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        if func in (torch.add, torch.Tensor.add, torch.Tensor.__add__):
            return out + 1
        return out


class Rewrapping(torch.Tensor):
    """Converts the results itself, with `as_subclass`."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            return out.as_subclass(cls)
        return out


class ChildOfPassing(Passing):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs)


class Scaled(torch.Tensor):
    """Multiplies every tensor result by two (torch's default handling, then scaled)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func is torch.Tensor.__mul__:
            return out * 2
        return out


def ps(x):
    return x.as_subclass(Passing)


def uw(x):
    return x.as_subclass(Unwrapping)


# ----- subclass arguments -----------------------------------------------------
@program(lambda: ps(r(3)))
def sub_passing_add(x):
    return x + 1


@program(lambda: ps(r(3)))
def sub_passing_chain(x):
    return torch.sin(x).cos() * 2


@program(lambda: ps(r(3)))
def sub_passing_type_of_result(x):
    y = x.exp()
    return y + 1 if type(y) is Passing else y - 1


@program(lambda: ps(r(3)))
def sub_passing_isinstance(x):
    return x * 2 if isinstance(x, Passing) else x


@program(lambda: ps(r(3)))
def sub_passing_isinstance_result(x):
    y = x.neg()
    return y * 3 if isinstance(y, Passing) and isinstance(y, torch.Tensor) else y


@program(lambda: ps(r(3)))
def sub_passing_method(x):
    return x.doubled() + 1


@program(lambda: ps(r(3)))
def sub_passing_property(x):
    return x.halved + x


@program(lambda: ps(r(2, 3)))
def sub_passing_metadata(x):
    return x * x.shape[0] + x.size(1) + x.dim()


@program(lambda: ps(r(2, 3)))
def sub_passing_kwargs(x):
    return torch.sum(x, dim=1, keepdim=True)


@program(lambda: ps(r(3)), lambda: r(3))
def sub_passing_with_plain(x, y):
    return torch.add(x, y), y * x


@program(lambda: ps(r(3)), lambda: ps(r(3)))
def sub_passing_cat(x, y):
    return torch.cat([x, y]) * 2


@program(lambda: ps(r(4, 2)))
def sub_passing_tuple_result(x):
    a, b = x.split(2)
    return a + b


@program(lambda: ps(r(4)))
def sub_passing_unbind(x):
    return x.unbind(0)


@program(lambda: ps(r(2, 3)))
def sub_passing_functional(x):
    return F.relu(x) + F.softmax(x, -1)


@program(lambda: ps(r(3)))
def sub_passing_unwrap(x):
    return (x + 1).as_subclass(torch.Tensor) * 2


@program(lambda: ps(r(3)))
def sub_passing_class_name(x):
    return x + len(type(x * 2).__name__)


@program(lambda: ps(r(3)))
def sub_passing_inplace(x):
    y = x.clone()
    y.add_(2)
    return y


@program(lambda: ps(r(3)))
def sub_passing_reduction(x):
    return x.sum() + x.mean()


@program(lambda: ps(r(3)))
def sub_passing_indexing(x):
    return x[0] + x[1:]


@program()
def sub_made_in_frame(x):
    y = x.as_subclass(Passing)
    return y * 2 + 1


@program()
def sub_made_in_frame_type(x):
    y = x.as_subclass(Passing).sin()
    return y, type(y) is Passing


@program(lambda: uw(r(3)))
def sub_unwrapping(x):
    y = torch.relu(x) + 1
    return y, type(y).__name__


@program(lambda: uw(r(3)), lambda: r(3))
def sub_unwrapping_mixed(x, y):
    return x * y + y


@program(lambda: r(3).as_subclass(AddsOne))
def sub_changes_results(x):
    return x + 2, x * 2


@program(lambda: r(3).as_subclass(AddsOne))
def sub_changes_results_method(x):
    return x.add(1), torch.add(x, 1)


@program(lambda: r(3).as_subclass(Rewrapping))
def sub_rewrapping(x):
    y = x.sin() + 1
    return y, isinstance(y, Rewrapping)


@program(lambda: r(3).as_subclass(ChildOfPassing))
def sub_child_super_chain(x):
    return x.doubled() - 1


@program(lambda: r(3).as_subclass(ChildOfPassing), lambda: ps(r(3)))
def sub_child_and_parent(x, y):
    z = x + y
    return z, type(z).__name__


@program(lambda: r(3).as_subclass(Scaled))
def sub_scaled(x):
    return x * 3, x + 3


@program(lambda: ps(r(3)))
def sub_disable_subclass_block(x):
    with torch._C.DisableTorchFunctionSubclass():
        y = x + 1
    return y * 2, type(y) is torch.Tensor


@program(lambda: ps(r(3)))
def sub_disable_block(x):
    with torch._C.DisableTorchFunction():
        y = x.sin()
    return y, type(y).__name__


# ----- torch function modes entered in the frame ------------------------------
class PassMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class MulPlusHundredMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        return result + 100 if func in (torch.mul, torch.Tensor.mul) else result


class AddToSubMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.add:
            func = torch.sub
        return func(*args, **(kwargs or {}))


class ScaleMode(TorchFunctionMode):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.sin:
            return out * self.scale
        return out


@program()
def mode_pass(x):
    with PassMode():
        y = torch.sin(x) + 1
    return y * 2


@program()
def mode_changes_mul(x):
    with MulPlusHundredMode():
        y = torch.mul(x, 2)
    return y + torch.mul(x, 2)


@program()
def mode_changes_method(x):
    with MulPlusHundredMode():
        y = x.mul(3)
    return y


@program()
def mode_swaps_function(x):
    with AddToSubMode():
        y = torch.add(x, 1)
        z = x + 1
    return y, z


@program()
def mode_with_state(x):
    with ScaleMode(3.0):
        y = torch.sin(x)
    return y


@program()
def mode_nested(x):
    with ScaleMode(2.0):
        with MulPlusHundredMode():
            y = torch.mul(torch.sin(x), 2)
    return y


@program(lambda: ps(r(3)))
def mode_and_subclass(x):
    with PassMode():
        y = x + 1
    return y, type(y).__name__


@program()
def mode_disable_inside(x):
    with MulPlusHundredMode():
        with torch._C.DisableTorchFunction():
            y = torch.mul(x, 2)
    return y


@program()
def mode_after_exit(x):
    with ScaleMode(5.0):
        y = x.cos()
    return torch.sin(y)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_torch_function_subclass_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)
