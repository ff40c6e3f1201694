"""Classes made in the frame with type(name, bases, namespace), and bytes operations.

A class made by type() is made once, while capturing, where its namespace holds
constants and functions; where it (or an instance) would leave the compiled part, or
is written, the frame runs eagerly (eagerly each call makes a new class).

Each program gives eager's results and torch.compile's graph and op counts
(`check_like_torch`).
"""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same


def class_with_method_made_by_type(x):
    Scaler = type("Scaler", (), {"scale": 2, "apply": lambda self, t: t * self.scale})
    return Scaler().apply(x)


def class_made_by_type_on_a_made_base(x):
    Base = type("Base", (object,), {"k": 3})
    Child = type("Child", (Base,), {})
    return x * Child.k + Child.__mro__.index(Base)


def class_made_by_type_holding_instance_attributes(x):
    Holder = type("Holder", (), {})
    held = Holder()
    held.value = x
    return held.value + 1 + len(Holder.__name__)


def bytes_concatenated_indexed_and_searched(x):
    data = b"hello" + bytes([1, 2])
    return x * len(data) + data[1] + (b"l" in data) + (108 in data)


def bytes_indexed_and_tested(x):
    data = b"abc"
    return x * data[1] + (b"b" in data) + (98 in data) + len(data[1:] * 3)


def bytes_decoded(x):
    return x * int(b"12".decode())


def _one():
    return (torch.randn(4),)


PROGRAMS = {
    fn.__name__: (fn, _one)
    for fn in (
        class_with_method_made_by_type,
        class_made_by_type_on_a_made_base,
        class_made_by_type_holding_instance_attributes,
        bytes_indexed_and_tested,
        bytes_decoded,
    )
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_made_class_programs_count_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


def class_made_by_type_returned(x):
    Made = type("Made", (), {"k": 3})
    return x * Made.k, Made


def instance_of_class_made_by_type_returned(x):
    Made = type("Made", (), {"k": 3})
    return Made()


def class_made_by_type_written(x):
    Made = type("Made", (), {"k": 3})
    Made.k = 5
    return x * Made.k


def test_class_made_by_type_is_a_new_class_each_call():
    for fn in (class_made_by_type_returned, instance_of_class_made_by_type_returned):
        compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
        (x,) = _one()
        first, second = compiled(x), compiled(x)
        made = [
            result[1] if isinstance(result, tuple) else type(result) for result in (first, second)
        ]
        assert made[0] is not made[1]
        assert made[0].k == 3


def test_class_made_by_type_written_in_the_frame():
    compiled = dynamo_capture.optimize(class_made_by_type_written, backend=CountingBackend())
    for _ in range(3):
        (x,) = _one()
        assert_same(compiled(x), class_made_by_type_written(x))


def test_bytes_membership_is_a_substring_test():
    compiled = dynamo_capture.optimize(
        bytes_concatenated_indexed_and_searched, backend=CountingBackend()
    )
    (x,) = _one()
    assert_same(compiled(x), bytes_concatenated_indexed_and_searched(x))
