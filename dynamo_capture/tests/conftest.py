"""Shared helpers: compile with a counting eager backend and compare with eager."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import dynamo_capture
from dynamo_capture.interpreter import checks


class CountingBackend:
    """The eager backend (runs the FX graph) that remembers every graph it was given."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self.graphs.append(gm)
        return gm.forward


@pytest.fixture(autouse=True)
def _interpreter_checks():
    with checks(True):
        yield


def clone_inputs(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        cloned = value.detach().clone()
        cloned.requires_grad_(value.requires_grad)
        return cloned
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value)
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list | tuple):
        return type(value)(clone_inputs(item) for item in value)
    if isinstance(value, dict):
        return {key: clone_inputs(item) for key, item in value.items()}
    return value


def perturb(value: Any) -> Any:
    """Floating tensors get new random values (same metadata); everything else is kept."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        fresh = torch.randn_like(value) * 3
        return fresh.requires_grad_(value.requires_grad)
    if isinstance(value, list | tuple):
        return type(value)(perturb(item) for item in value)
    if isinstance(value, dict):
        return {key: perturb(item) for key, item in value.items()}
    return value


def assert_same(got: Any, expected: Any) -> None:
    """Eager and compiled results agree: tensors close, containers of the same type, rest equal."""
    assert type(got) is type(expected), f"{type(got).__name__} != {type(expected).__name__}"
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected, equal_nan=True)
        assert got.requires_grad == expected.requires_grad
    elif isinstance(expected, np.ndarray | np.generic):  # NumPy results: dtype too
        assert got.dtype == expected.dtype, f"{got.dtype} != {expected.dtype}"
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
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
    else:
        assert got == expected


def check_capture(
    fn: Callable[..., Any], *args: Any, graphs: int | None = 1, **kwargs: Any
) -> dynamo_capture.CompiledCallable:
    """Compile `fn` with fullgraph=True, run twice, compare each run with eager."""
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=backend, fullgraph=True)
    for _ in range(2):
        eager_args, eager_kwargs = clone_inputs(args), clone_inputs(kwargs)
        got_args, got_kwargs = clone_inputs(args), clone_inputs(kwargs)
        torch.manual_seed(0)
        expected = fn(*eager_args, **eager_kwargs)
        torch.manual_seed(0)
        got = compiled(*got_args, **got_kwargs)
        assert_same(got, expected)
        assert_same(got_args, eager_args)
    assert len(compiled.entries) == 1, "the second call recompiled"
    # Same shapes, new values: the cached entry must not have baked any tensor data in.
    fresh_args, fresh_kwargs = perturb(args), perturb(kwargs)
    torch.manual_seed(0)
    expected = fn(*clone_inputs(fresh_args), **clone_inputs(fresh_kwargs))
    torch.manual_seed(0)
    got = compiled(*clone_inputs(fresh_args), **clone_inputs(fresh_kwargs))
    assert_same(got, expected)
    if graphs is not None:
        assert len(backend.graphs) <= graphs
    return compiled


@pytest.fixture
def check():
    return check_capture


@pytest.fixture
def backend():
    return CountingBackend()
