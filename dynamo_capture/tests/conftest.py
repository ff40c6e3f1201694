"""Shared helpers: compile with a counting eager backend and compare with eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import dynamo_capture
from dynamo_capture.interpreter import checks
from dynamo_capture.testing import CountingBackend, assert_same, clone_inputs


@pytest.fixture(autouse=True)
def _interpreter_checks():
    with checks(True):
        yield


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
