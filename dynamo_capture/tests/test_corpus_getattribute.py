"""Classes defining `__getattribute__` (and `__getattr__` behind it): attribute reads
go through them, as eagerly.

Each program gives eager's results and torch.compile's graph and op counts
(`check_like_torch`); where torch.compile's own values differ from eager's, capture is
checked against eager alone.
"""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same


class ScaledRead:
    def __init__(self):
        self.a = 2

    def __getattribute__(self, name):
        value = object.__getattribute__(self, name)
        return value * 10 if name == "a" else value


class SuperRead:
    def __init__(self):
        self.a = 3

    def __getattribute__(self, name):
        if name == "z":
            return 7
        return super().__getattribute__(name)


class SuperReadWithFallback:
    def __init__(self):
        self.a = 3

    def __getattribute__(self, name):
        if name == "hidden":
            raise AttributeError(name)
        return super().__getattribute__(name)

    def __getattr__(self, name):
        return len(name)


class Fallback:
    def __init__(self):
        self.a = 2

    def __getattr__(self, name):
        if name.startswith("x"):
            return 1.5
        raise AttributeError(name)


def getattribute_through_object_made_in_frame(x):
    held = ScaledRead()
    return x * held.a


def getattribute_through_object_argument(x, held):
    return x * held.a


def getattribute_through_super_made_in_frame(x):
    held = SuperRead()
    return x * held.a + held.z


def getattribute_raising_falls_back_to_getattr(x):
    held = SuperReadWithFallback()
    return x * held.a + held.hidden + getattr(held, "missing", 0)


def getattr_fallback_with_defaults_made_in_frame(x):
    held = Fallback()
    return x * getattr(held, "y", 4) + held.xq + hasattr(held, "q") + hasattr(held, "xx")


def getattr_fallback_argument(x, held):
    return x * getattr(held, "y", 4) + held.xq + hasattr(held, "q")


def _one():
    return (torch.randn(4),)


PROGRAMS = {
    "getattribute_through_object_made_in_frame": (getattribute_through_object_made_in_frame, _one),
    "getattribute_through_object_argument": (
        getattribute_through_object_argument,
        lambda: (torch.randn(4), ScaledRead()),
    ),
    "getattribute_through_super_made_in_frame": (getattribute_through_super_made_in_frame, _one),
    "getattribute_raising_falls_back_to_getattr": (
        getattribute_raising_falls_back_to_getattr,
        _one,
    ),
    "getattr_fallback_with_defaults_made_in_frame": (
        getattr_fallback_with_defaults_made_in_frame,
        _one,
    ),
    "getattr_fallback_argument": (getattr_fallback_argument, lambda: (torch.randn(4), Fallback())),
    "getattribute_of_argument_through_super": (
        lambda x, held: x * held.a + held.z,
        lambda: (torch.randn(4), SuperRead()),
    ),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_getattribute_programs_count_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


def getattribute_after_attribute_write(x):
    held = ScaledRead()
    held.a = 5
    return x + held.a


@pytest.mark.parametrize(
    "fn, make_args",
    [
        (getattribute_after_attribute_write, _one),
    ],
)
def test_getattribute_reads_give_eager_values(fn, make_args):
    # NOTE: torch.compile reads the written attribute past __getattribute__ in the first
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    for _ in range(2):
        args = make_args()
        assert_same(compiled(*args), fn(*args))


class SuperReadHolding:
    k = 10

    def __init__(self, a, w):
        self.a = a
        self.w = w

    def __getattribute__(self, name):
        if name == "z":
            return 7
        return super().__getattribute__(name)


def getattribute_of_argument_holding_a_tensor(x, held):
    return x * held.a + held.w + held.z + held.k


def test_getattribute_of_argument_reads_its_attributes_each_call():
    counter = CountingBackend()
    fn = getattribute_of_argument_holding_a_tensor
    compiled = dynamo_capture.optimize(fn, backend=counter)
    for a in (2, 2, 3):
        held, x = SuperReadHolding(a, torch.randn(4)), torch.randn(4)
        assert_same(compiled(x, held), fn(x, held))
    held = SuperReadHolding(2, torch.randn(4))
    held.k = 99  # the instance's own attribute hides the class's
    assert_same(compiled(x, held), fn(x, held))
    assert counter.frame_count == 3


def getattribute_of_argument_written_in_the_frame(x, held):
    held.a = 5
    return x * held.a + held.z


def test_getattribute_of_argument_reads_the_frames_own_write():
    fn = getattribute_of_argument_written_in_the_frame
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    for _ in range(2):
        x, mine, theirs = torch.randn(4), SuperRead(), SuperRead()
        assert_same(compiled(x, mine), fn(x, theirs))
        assert mine.a == theirs.a == 5
