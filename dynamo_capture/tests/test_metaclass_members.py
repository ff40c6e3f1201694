"""Members of a metaclass read through its classes, and instances of classes whose
metaclass only shapes the class (registries, properties, helper methods)."""

from __future__ import annotations

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend


class Describing(type):
    level = 3

    @property
    def kind(cls):
        return cls.__name__.lower()

    def make(cls, value):
        return cls(value)


class Described(metaclass=Describing):
    def __init__(self, value):
        self.value = value


def metaclass_property(x):
    return x * len(Described.kind)


def metaclass_method_makes_an_instance(x):
    return x * Described.make(2).value + Described.level


@pytest.mark.parametrize("fn", [metaclass_property, metaclass_method_makes_an_instance])
def test_metaclass_member_is_read_without_recompiling(fn):
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter, fullgraph=True)
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), fn(x))
    assert counter.frame_count == 1  # the guards hold on every call


def test_metaclass_property_counts_like_torch():
    check_like_torch(metaclass_property, lambda: (torch.randn(3),))


def test_metaclass_method_patched_later_recompiles():
    class Meta(type):
        def factor(cls):
            return 2

    class Owner(metaclass=Meta):
        pass

    compiled = dynamo_capture.optimize(lambda x: x * Owner.factor(), backend=CountingBackend())
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2)
    Meta.factor = lambda cls: 5
    torch.testing.assert_close(compiled(x), x * 5)
