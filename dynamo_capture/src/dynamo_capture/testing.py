"""Backends and checks for testing captured code against eager, here and in the
packages built on capture:

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    x = torch.randn(3)
    assert_same(compiled(clone_inputs(x)), fn(clone_inputs(x)))
    assert backend.frame_count == 1

`CountingBackend` runs each graph it is given eagerly and keeps it (its counts are
those of torch's `CompileCounter`: graphs and their call nodes); `eager_backend` runs
a graph eagerly and keeps nothing. `clone_inputs` gives each side arguments of its own
and `assert_same` compares the two sides' results. Stable for tests; nothing in the
compiler uses this module.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from guards.tensor_subclasses import SubclassLayout, flatten, is_traceable_subclass

__all__ = ["CountingBackend", "assert_same", "clone_inputs", "eager_backend"]


def eager_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The backend that runs the graph as it is (its GraphModule's forward)."""
    return gm.forward


class CountingBackend:
    """The eager backend (runs each FX graph as it is), remembering every graph it was
    given, in order."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs.append(gm)
        return gm.forward

    @property
    def frame_count(self) -> int:
        """How many graphs it was given."""
        return len(self.graphs)

    @property
    def op_count(self) -> int:
        """How many call nodes (functions, methods, modules) its graphs hold together."""
        return sum(1 for gm in self.graphs for node in gm.graph.nodes if node.op.startswith("call"))


def clone_inputs(value: Any) -> Any:
    """A copy of arguments for one side of a comparison: tensors detached and cloned
    (keeping requires_grad, a leaf's .grad and a user's subclass; parameters stay parameters), modules deep-copied, NumPy arrays copied, lists, tuples and
    dicts copied through; anything else shared."""
    if isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            cloned = value.detach().clone()
        if isinstance(value, torch.nn.Parameter):
            return type(value)(cloned, requires_grad=value.requires_grad)
        if is_traceable_subclass(value):  # `clone` went through its own dispatch
            pass
        elif type(value) is not torch.Tensor and type(value).__module__.split(".")[0] != "torch":
            cloned = cloned.as_subclass(type(value))  # a user's subclass stays one
        cloned.requires_grad_(value.requires_grad)
        if value.is_leaf and value.grad is not None:  # each side gets its own .grad
            cloned.grad = value.grad.detach().clone()
        return cloned
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value)
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a namedtuple
        return type(value)(*(clone_inputs(item) for item in value))
    if isinstance(value, list | tuple):
        return type(value)(clone_inputs(item) for item in value)
    if isinstance(value, dict):
        return {key: clone_inputs(item) for key, item in value.items()}
    return value


def assert_same(got: Any, expected: Any) -> None:
    """The compiled side's result agrees with eager's: the same types throughout, tensors
    close (NaN where eager has NaN; alike in requires_grad), NumPy results close and of
    the same dtype, containers item by item, objects by their attributes, anything else
    equal."""
    assert type(got) is type(expected), f"{type(got).__name__} != {type(expected).__name__}"
    if is_traceable_subclass(expected):  # its inner tensors, one by one, and its context
        assert SubclassLayout.of(got).ctx == SubclassLayout.of(expected).ctx, "contexts differ"
        assert_same(flatten(got), flatten(expected))
        assert got.requires_grad == expected.requires_grad, "requires_grad differs"
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected, equal_nan=True)
        assert got.requires_grad == expected.requires_grad, "requires_grad differs"
    elif isinstance(expected, np.ndarray | np.generic):  # NumPy results: dtype too
        assert got.dtype == expected.dtype, f"{got.dtype} != {expected.dtype}"
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, equal_nan=True)
    elif isinstance(expected, list | tuple):
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert_same(a, b)
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for key in expected:
            assert_same(got[key], expected[key])
    elif hasattr(expected, "__dict__") and not isinstance(expected, type):
        assert_same(vars(got), vars(expected))
    elif isinstance(expected, float) and expected != expected:  # NaN where eager has NaN
        assert got != got, f"{got!r} != nan"
    else:
        assert got == expected
