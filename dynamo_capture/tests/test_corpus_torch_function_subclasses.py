"""Tensor subclasses defining their own `__torch_function__`, and torch function modes
entered in the captured frame: capture runs the override as Python (the subclass's
classmethod, `super().__torch_function__`, torch's default conversion of results back
to the subclass; a mode's `__torch_function__` with its instance state) and records the
operations it reaches.

Each program gives eager's results and torch.compile's graph and op counts (two calls
each, fresh arguments). Where torch.compile itself differs from eager (its values, or
a frame it runs eagerly), the program is checked against eager alone, and captured in
one graph.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensor_subclasses import Passing, Unwrapping
from torch.overrides import TorchFunctionMode
from torchcheck import check_like_torch, program_registry

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same, clone_inputs

PROGRAMS, program = program_registry()
# programs where torch.compile's own results or counts are off: checked against eager,
# one graph and no break
EAGER_PROGRAMS, eager_program = program_registry()


def r(*shape):
    return torch.randn(*shape)


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


# eager only: torch.compile compiles it again on the second call
@eager_program(lambda: ps(r(4, 2)))
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


# eager only: torch.compile recurses without end in the override's as_subclass
@eager_program(lambda: r(3).as_subclass(Rewrapping))
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


# eager only: torch.compile gives the subclass where eager gives a Tensor
@eager_program(lambda: ps(r(3)))
def sub_disable_subclass_block(x):
    with torch._C.DisableTorchFunctionSubclass():
        y = x + 1
    return y * 2, type(y) is torch.Tensor


# eager only: torch.compile gives the subclass where eager gives a Tensor
@eager_program(lambda: ps(r(3)))
def sub_disable_block(x):
    with torch._C.DisableTorchFunction():
        y = x.sin()
    return y, type(y).__name__


class TypesChecking(torch.Tensor):
    """torch's own pattern: NotImplemented for types it does not know."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if not all(issubclass(t, (torch.Tensor, cls)) for t in types):
            return NotImplemented
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        return out


class OwnAdd(Passing):
    """Defines a Tensor method of its own name."""

    def add(self, other):
        return torch.sub(self, other)


def with_scale(x, scale):
    x.scale = scale
    return x


@program(lambda: with_scale(ps(r(3)), 2.0))
def sub_instance_attribute(x):
    return x * x.scale


@program(lambda: ps(r(3)))
def sub_class_checks(x):
    ok = type(x) is Passing and x.__class__ is Passing and isinstance(x, torch.Tensor)
    return x + (1 if ok else 2)


@program(lambda: ps(r(3)))
def sub_is_tensor_checks(x):
    ok = torch.is_tensor(x) and torch.overrides.is_tensor_like(x)
    return x * (2 if ok else 3)


# eager only: torch.compile fails on the .T read
@eager_program(lambda: ps(r(2, 3)))
def sub_views(x):
    return x.view(-1), x.reshape(3, 2), x.t(), x.T


@program(lambda: ps(r(2, 3)))
def sub_properties(x):
    y = x.to(torch.float64)
    return y * (2 if y.dtype == torch.float64 and not x.requires_grad else 3)


@program(lambda: ps(r(3)))
def sub_where(x):
    return torch.where(x > 0, x, torch.zeros_like(x))


@program(lambda: ps(r(3)), lambda: uw(r(3)))
def sub_two_overriding_kinds(x, y):
    z = x + y
    return z, type(z).__name__


@program(lambda: r(3).as_subclass(TypesChecking))
def sub_types_check(x):
    return x.sin() + x


# eager only: torch.compile's values differ from eager's
@eager_program(lambda: r(3).as_subclass(OwnAdd))
def sub_own_method_name(x):
    return x.add(1), x + 1


# eager only: torch.compile runs the frame eagerly (`1 - x`)
@eager_program(lambda: ps(r(3)))
def sub_reflected_operators(x):
    return 1 - x, 2 / x, 3 * x, 1 < x


@program(lambda: ps(r(3)))
def sub_in_place_operator(x):
    y = x.clone()
    y += 1
    y *= 2
    return y


# eager only: torch.compile gives a Tensor where eager gives the subclass
@eager_program(lambda: ps(r(3)))
def sub_neg_abs(x):
    return -x, abs(x), x.abs()


@program(lambda: ps(r(4, 2)))
def sub_len(x):
    return x * len(x)


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


class RecordingMode(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


class KwargsMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            return func(*args) * 2
        return func(*args, **kwargs)


@program()
def mode_records_functions(x):
    mode = RecordingMode()
    with mode:
        y = torch.sin(x) * 2
    return y + len(mode.seen)


# eager only: torch.compile hands the mode a dict where eager hands None
@eager_program()
def mode_sees_kwargs(x):
    with KwargsMode():
        y = torch.add(x, 1)
        z = torch.add(x, 1, alpha=2)
    return y, z


@program(lambda: r(2, 3))
def mode_functional(x):
    with MulPlusHundredMode():
        y = F.relu(x)
    return y


@program(lambda: r(2, 3))
def mode_property_and_index(x):
    with PassMode():
        y = x[0] * x.shape[1]
    return y


@program()
def mode_in_place(x):
    y = x.clone()
    with ScaleMode(2.0):
        y.add_(1)
        z = torch.sin(y)
    return y, z


@program()
def mode_state_queries(x):
    with ScaleMode(2.0):
        y = torch.sin(x) if torch.is_grad_enabled() else x
        z = y.to(torch.get_default_dtype())
    return z


@program()
def mode_disable_subclass_inside(x):
    with ScaleMode(4.0):
        with torch._C.DisableTorchFunctionSubclass():
            y = torch.sin(x)
    return y


@program(lambda: r(4, 2))
def mode_len(x):
    with PassMode():
        y = x * len(x)
    return y


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_torch_function_subclass_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


@pytest.mark.parametrize("name", list(EAGER_PROGRAMS))
def test_torch_function_subclass_program_like_eager(name):
    fn, make_args = EAGER_PROGRAMS[name]
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter)
    for _ in range(2):
        args = make_args()
        assert_same(compiled(*clone_inputs(args)), fn(*clone_inputs(args)))
    explained = dynamo_capture.explain(fn)(*make_args())
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    assert counter.frame_count == 1


def test_override_replaced_on_the_class_is_guarded():
    """An override assigned to the class after compiling runs (the entry is guarded on it)."""

    class Replaced(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs)

    def f(x):
        return x + 1

    compiled = dynamo_capture.optimize(f, backend=CountingBackend())
    x = r(3).as_subclass(Replaced)
    assert_same(compiled(x), f(x))

    def times_ten(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {})) * 10

    Replaced.__torch_function__ = classmethod(times_ten)
    assert_same(compiled(x), f(x))


@pytest.mark.parametrize("kind", [Passing, AddsOne, Unwrapping, torch.Tensor])
def test_entry_guarded_on_the_subclass(kind):
    """One compiled function called with each kind of argument gives eager's results."""

    def f(x):
        return x * 2 + 1

    compiled = dynamo_capture.optimize(f, backend=CountingBackend())
    for argument_kind in (Passing, AddsOne, Unwrapping, torch.Tensor, kind):
        x = r(3).as_subclass(argument_kind)
        assert_same(compiled(x), f(x))


def test_override_under_a_mode_entered_outside_runs_eagerly():
    """A mode entered outside the frame would see the graph's operations: the override
    is not run inside the graph (a break), and the values are eager's."""

    def f(x):
        return torch.mul(x, 2) + 1

    compiled = dynamo_capture.optimize(f, backend=CountingBackend())
    x = ps(r(3))
    with MulPlusHundredMode():
        expected = f(x)
        got = compiled(x)
    assert_same(got, expected)


def test_disable_block_entered_outside_gives_plain_results():
    def f(x):
        return x * 2 + 1

    compiled = dynamo_capture.optimize(f, backend=CountingBackend())
    x = r(3).as_subclass(AddsOne)
    with torch._C.DisableTorchFunctionSubclass():
        expected, got = f(x), compiled(x)
    assert_same(got, expected)


def test_gradients_flow_to_a_subclass_leaf():
    def f(x):
        return (x.sin() * 2).sum()

    x = ps(r(3)).requires_grad_()
    y = ps(x.detach().clone()).requires_grad_()
    f(x).backward()
    dynamo_capture.optimize(f, backend=CountingBackend())(y).backward()
    assert_same(y.grad, x.grad)


def test_in_place_write_of_a_subclass_input():
    def f(x):
        x.add_(1)
        return x

    x = ps(r(3))
    y = x.clone()
    expected = f(x)
    got = dynamo_capture.optimize(f, backend=CountingBackend())(y)
    assert got is y
    assert_same(y, x)
    assert_same(got, expected)


def test_graph_break_inside_a_mode_block_keeps_eager_values():
    def f(x):
        with ScaleMode(3.0):
            y = torch.sin(x)
            torch._dynamo.graph_break()
            z = torch.sin(y)
        return z

    import torch._dynamo

    x = r(3)
    assert_same(dynamo_capture.optimize(f, backend=CountingBackend())(x), f(x))


class Counting(torch.Tensor):
    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls += 1
        return super().__torch_function__(func, types, args, kwargs)


def test_override_runs_as_often_as_in_eager():
    """The override's side effect (a class counter) happens as often as in eager: the
    guards and the compiled code read the input's metadata without running it."""

    def f(x):
        return (x + 1) * Counting.calls

    compiled = dynamo_capture.optimize(f, backend=CountingBackend())
    for start in (0, 5, 10):
        x = r(3)
        Counting.calls = start
        expected = f(x.as_subclass(Counting))
        eager_calls = Counting.calls
        Counting.calls = start
        got = compiled(x.as_subclass(Counting))
        assert Counting.calls == eager_calls  # (comparing the results runs it again)
        assert_same(got, expected)
