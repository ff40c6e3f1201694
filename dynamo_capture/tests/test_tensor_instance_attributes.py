"""Attributes the caller set on an input tensor (`x.scale = 2`) read inside the frame.

They are read from the real tensor and guarded at their source, as torch.compile reads
them: a change recompiles (an int changing twice goes automatic dynamic), and an
attribute the capture found missing (`getattr(x, "s", 3)`, `hasattr`) is guarded to
stay missing. Each program's results equal eager's and its graph and op counts
torch.compile's.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same, clone_inputs


def _tagged(name, value):
    x = torch.randn(3)
    if value is not None:
        setattr(x, name, value)
    return x


def _run(compiled, fn, name, values):
    for value in values:
        x = _tagged(name, value)
        expected = fn(_copy(x))
        assert_same(compiled(x), expected)


def _copy(x):
    copy = clone_inputs(x)
    copy.__dict__.update(x.__dict__)
    return copy


def scaled(x):
    return x * x.s


def scaled_or_default(x):
    return x * getattr(x, "s", 3)


def doubled_if_tagged(x):
    if hasattr(x, "s"):
        return x * 2
    return x


def by_kind(x):
    if x.s == "a":
        return x + 1
    return x - 1


def by_tensor(x):
    return x * x.s


PROGRAMS = {
    "int_read": (scaled, [1, 1, 2, 3]),
    "float_read": (scaled, [0.5, 1.5, 2.5]),
    "string_branch": (by_kind, ["a", "b", "a"]),
    "tensor_read": (by_tensor, [torch.ones(3) * 2] * 3),
    "getattr_default_missing_later": (scaled_or_default, [2, None, 2]),
    "getattr_default_missing_first": (scaled_or_default, [None, 2, None, 4]),
    "hasattr_present_then_missing": (doubled_if_tagged, [2, None, 2]),
    "hasattr_missing_then_present": (doubled_if_tagged, [None, 2, None]),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_tensor_instance_attribute_read_like_torch(name):
    fn, values = PROGRAMS[name]
    counter = CountingBackend()
    _run(dynamo_capture.optimize(fn, backend=counter), fn, "s", values)
    torch._dynamo.reset()
    reference = torch._dynamo.testing.CompileCounter()
    _run(torch.compile(fn, backend=reference), fn, "s", values)
    torch._dynamo.reset()
    assert (counter.frame_count, counter.op_count) == (reference.frame_count, reference.op_count)
