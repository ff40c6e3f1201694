"""A missing attribute of a container made in the frame is missing under capture too.

Found by the model zoo: transformers' output capturing asks `hasattr(outputs,
"vision_hidden_states")` of a ModelOutput (an OrderedDict subclass) the frame made;
capture answered True (any name of a container was taken for a method of it), and
SegFormer's hidden states read back a method in place of a tensor.
"""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch

import dynamo_capture


class Ordered(collections.OrderedDict):
    pass


@dataclasses.dataclass
class Output(collections.OrderedDict):
    last: torch.Tensor | None = None

    def __post_init__(self):
        self["last"] = self.last


def asks_hasattr(x):
    out = Output(last=x * 2)
    flags = (
        hasattr(out, "vision_states"),
        hasattr(out, "last"),
        hasattr({}, "missing"),
        hasattr(Ordered(a=1), "missing"),
        hasattr([x], "missing"),
        hasattr((x,), "missing"),
        hasattr({1}, "missing"),
        hasattr({}, "keys"),
    )
    picked = out.vision_states if hasattr(out, "vision_states") else out.last
    return picked + 1, flags


def getattr_default(x):
    return x + getattr({"a": x}, "missing", 2)


def catches_attribute_error(x):
    try:
        return {"a": x}.missing
    except AttributeError:
        return x - 1


@pytest.mark.parametrize("fn", [asks_hasattr, getattr_default, catches_attribute_error])
def test_missing_attribute_as_eagerly(fn, backend):
    x = torch.randn(3)
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    result, expected = compiled(x), fn(x)
    if isinstance(expected, tuple):
        assert result[1] == expected[1]
        result, expected = result[0], expected[0]
    torch.testing.assert_close(result, expected)
    assert len(backend.graphs) == 1
